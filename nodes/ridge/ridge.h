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

enum { RIDGE_IN_X, RIDGE_IN_Y, RIDGE_IN_GROUPS, RIDGE_N_IN };
enum { RIDGE_OUT_WEIGHTS, RIDGE_OUT_ALPHA, RIDGE_OUT_SCORE, RIDGE_OUT_PREDICTIONS, RIDGE_OUT_INTERCEPT,
       RIDGE_OUT_CV_SCORES, RIDGE_N_OUT };

/* node_type.cost (ridge_cost.c, every build): 1 and *c filled, or 0 while
 * shapes are unknown. */
int nf_ridge_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                  struct nf_cost *c);
#ifdef HAVE_CUDA
/* The GPU implementation (ridge_gpu.c, CUDA builds): the contract of run_cpu
 * and the same outputs (docs/gpu.md); without a usable GPU it warns and runs
 * the CPU node. */
int nf_ridge_run_gpu(struct nf_run *run);
#endif
/* Voxels per block on the GPU, at most (blocks shrink to fit): the cost
 * model's launch count and the GPU path's upper bound. */
enum { NF_RIDGE_GPU_BLOCK = 65536 };

extern const struct nf_node_type nf_node_ridge;

#endif
