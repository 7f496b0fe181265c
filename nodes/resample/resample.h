/* resample.h — parameters and ports of the `resample` node
 * (nodes/resample/resample.c), shared with the unit tests, which fill them by
 * hand instead of through YAML. */
#ifndef NF_NODE_RESAMPLE_H
#define NF_NODE_RESAMPLE_H

#include "node.h"

/* Index of `interpolation` in its choices; the order of the spline is 1, 0, 3. */
enum resample_interp { RESAMPLE_LINEAR = 0, RESAMPLE_NEAREST, RESAMPLE_CONTINUOUS };

struct resample_params {
    int interpolation;           /* NF_P_ENUM, enum resample_interp */
};

enum { RESAMPLE_IN_DATA, RESAMPLE_IN_TO, RESAMPLE_N_IN };
enum { RESAMPLE_OUT_DATA, RESAMPLE_N_OUT };

extern const struct nf_node_type nf_node_resample;

#endif
