/* mask.h — the parameters of the `mask` node (nodes/mask/mask.c), shared with the
 * unit tests, which fill them by hand instead of through YAML. */
#ifndef NF_NODE_MASK_H
#define NF_NODE_MASK_H

#include "node.h"

/* Index of `standardize` in the choices none|zscore|center. */
enum mask_standardize { MASK_STD_NONE = 0, MASK_STD_ZSCORE, MASK_STD_CENTER };

struct mask_params {
    int standardize;             /* NF_P_ENUM, enum mask_standardize */
};

/* Port indices, in table order. */
enum { MASK_IN_DATA, MASK_IN_MASK, MASK_IN_ATLAS, MASK_N_IN };
enum { MASK_OUT_MATRIX, MASK_OUT_LABELS, MASK_N_OUT };

extern const struct nf_node_type nf_node_mask;

#endif
