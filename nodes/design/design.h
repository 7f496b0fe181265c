/* design.h — parameters and ports of the `design` node (nodes/design/design.c),
 * exposed so that unit tests can fill them without a pipeline file. */
#ifndef NF_NODE_DESIGN_H
#define NF_NODE_DESIGN_H

#include <stdint.h>

#include "node.h"

/* hrf: the names are nilearn's hrf_model strings, in this order. */
enum design_hrf {
    DESIGN_HRF_GLOVER,
    DESIGN_HRF_SPM,
    DESIGN_HRF_GLOVER_DERIV,
    DESIGN_HRF_SPM_DERIV,
    DESIGN_HRF_GLOVER_DERIV_DISP,
    DESIGN_HRF_SPM_DERIV_DISP,
    DESIGN_HRF_FIR,
};
enum design_drift { DESIGN_DRIFT_COSINE, DESIGN_DRIFT_POLYNOMIAL, DESIGN_DRIFT_NONE };

struct design_params {
    int hrf;                        /* enum design_hrf */
    struct nf_num_list fir_delays;  /* in frames, whole numbers >= 0 */
    int drift;                      /* enum design_drift */
    double high_pass;               /* Hz, cosine drift */
    int64_t drift_order;            /* polynomial drift */
    int64_t oversampling;
    double min_onset;               /* seconds, relative to the first frame */
    double slice_time_ref;          /* fraction of a TR */
    double tr;                      /* seconds; NaN: from the frames' header */
    struct nf_str_list confound_columns; /* names or globs; empty: every column */
    char *modulation;               /* events column of amplitudes; NULL: "modulation" if present */
};

enum { DESIGN_IN_EVENTS, DESIGN_IN_FRAMES, DESIGN_IN_CONFOUNDS, DESIGN_N_IN };
enum { DESIGN_OUT_X, DESIGN_N_OUT };

extern const struct nf_node_type nf_node_design;

#endif
