/* ridge.h — parameters and ports of the `ridge` node (nodes/ridge/ridge.c), shared
 * with the unit tests, which run the node without a pipeline file. */
#ifndef NF_NODE_RIDGE_H
#define NF_NODE_RIDGE_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"

enum { RIDGE_PER_VOXEL, RIDGE_SHARED };
enum { RIDGE_R2, RIDGE_PEARSON };

struct ridge_params {
    struct nf_num_list alphas;  /* candidates (default: logspace -2..4, 20) */
    double alpha;               /* NaN: choose among alphas by CV */
    int64_t cv;                 /* folds */
    int alpha_mode;             /* RIDGE_PER_VOXEL / RIDGE_SHARED */
    bool fit_intercept;
    int score;                  /* RIDGE_R2 / RIDGE_PEARSON */
    bool shuffle;               /* shuffled k-fold, as sklearn KFold(shuffle=True) */
    int64_t seed;               /* its RandomState seed; -1: settings.seed */
};

enum { IN_X, IN_Y, IN_GROUPS };
enum { OUT_WEIGHTS, OUT_ALPHA, OUT_SCORE, OUT_PREDICTIONS, OUT_INTERCEPT, OUT_CV_SCORES };

extern const struct nf_node_type nf_node_ridge;

#endif
