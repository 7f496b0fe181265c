/* ridge.h — parameters and ports of the `ridge` node (nodes/ridge/ridge.c), shared
 * with the unit tests, which run the node without a pipeline file. */
#ifndef NF_NODE_RIDGE_H
#define NF_NODE_RIDGE_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"

enum { RIDGE_PER_VOXEL, RIDGE_SHARED };
enum { RIDGE_R2, RIDGE_PEARSON, RIDGE_L2_NEG_LOSS };
enum { RIDGE_CANDIDATES_RANDOM, RIDGE_CANDIDATES_GRID };

struct ridge_params {
    struct nf_num_list alphas;  /* candidates (default: logspace -2..4, 20) */
    double alpha;               /* NaN: choose among alphas by CV */
    int64_t cv;                 /* folds */
    int alpha_mode;             /* RIDGE_PER_VOXEL / RIDGE_SHARED */
    bool fit_intercept;
    int score;                  /* RIDGE_R2 / RIDGE_PEARSON */
    bool shuffle;               /* shuffled k-fold, as sklearn KFold(shuffle=True) */
    int64_t seed;               /* its RandomState seed (and the band weights'); -1: settings.seed */
    /* banded ridge (ridge_banded.c), when bands are given */
    struct nf_str_list bands;   /* "name = item, item, ..." (a column, prefix*, or i:j) */
    int64_t n_iter;             /* random candidates */
    struct nf_num_list concentration;   /* Dirichlet concentrations, cycled */
    int candidates;             /* RIDGE_CANDIDATES_RANDOM / _GRID */
    int64_t grid_steps;         /* grid: each weight a multiple of 1/grid_steps */
    struct nf_num_list gammas;  /* explicit candidates, bands weights per row (overrides) */
};

enum { RIDGE_IN_X, RIDGE_IN_Y, RIDGE_IN_GROUPS, RIDGE_N_IN };
/* The first RIDGE_N_PLAIN_OUT outputs are those of every mode (what the
 * shared helpers of ridge_internal.h allocate and hand over); the band
 * outputs exist with `bands` only. */
enum { RIDGE_OUT_WEIGHTS, RIDGE_OUT_ALPHA, RIDGE_OUT_SCORE, RIDGE_OUT_PREDICTIONS, RIDGE_OUT_INTERCEPT,
       RIDGE_OUT_CV_SCORES, RIDGE_N_PLAIN_OUT, RIDGE_OUT_BAND_ALPHA = RIDGE_N_PLAIN_OUT, RIDGE_OUT_SPLIT_R2,
       RIDGE_N_OUT };

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

/* Banded ridge (ridge_banded.c): the node's run when `bands` is given. */
int nf_ridge_banded_run(struct nf_run *run);
/* The candidate band weights (rows of n_bands, in double) the parameters
 * ask for: explicit gammas, the grid, or himalaya's Dirichlet sampling (first
 * row uniform). *out the caller's. 0, or the error code. */
int nf_ridge_band_candidates(const struct ridge_params *prm, int64_t n_bands, uint32_t seed, double **out,
                             int64_t *n_out, struct nf_error *err);
/* Their number, without generating them (resolve; ridge_folds.c); 0 when it
 * cannot be known. */
int64_t nf_ridge_band_candidate_count(const struct ridge_params *prm, int64_t n_bands);

extern const struct nf_node_type nf_node_ridge;

#endif
