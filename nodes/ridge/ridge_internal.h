/* ridge_internal.h — what the ridge node's modes share (nodes/ridge/ridge.c,
 * ridge_banded.c, ridge_gpu.c): what they read off the run, input checks, the fold
 * plan, the rows of X around a validation fold, a fold's Gram matrix, and the
 * outputs (allocation, intercept, hand-over).
 * Defined in ridge.c (outputs, fold Gram) and ridge_folds.c (inputs, folds). */
#ifndef NF_NODE_RIDGE_INTERNAL_H
#define NF_NODE_RIDGE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "node.h"
#include "ridge.h"

/* Nothing to choose and no score asked for: a fixed `alpha` (with bands, and
 * a single band weighting) while none of the cross-validated outputs (score,
 * cv_scores, predictions) is consumed. The model is then fit once on all
 * samples and no fold is cut (issue 20). wanted: per output port, NULL when
 * unknown (then every output is wanted and the node cross-validates). */
bool nf_ridge_fit_only(const struct ridge_params *prm, const bool *wanted);
/* Shapes, folds (k = 0: none, the fit-only path), alphas and finite values (errors naming the node), and the
 * warnings (more features than training samples, a constant column). */
int nf_ridge_check_inputs(const struct nf_run *run, const float *X, const float *Y, int64_t n, int64_t p,
                          int64_t V, int64_t k, int64_t A, bool center);
int nf_ridge_check_finite(const float *a, int64_t n, const char *what, const struct nf_run *run);
/* The folds (contiguous, shuffled KFold, GroupKFold or leave-one-group-out)
 * and the rows in fold order: *fold_size (k), *perm and *X_perm (NULL for
 * contiguous folds; then *X is unchanged, else *X = *X_perm) become the
 * caller's; *k_out may differ from k (leave-one-group-out). */
int nf_ridge_assign_folds(const struct ridge_params *prm, int64_t n, int64_t p, int64_t k, const float **X,
                          int64_t **fold_size_out, int64_t **perm_out, float **X_perm_out,
                          const struct nf_value *groups, const struct nf_run *run, int64_t *k_out);
/* What both nodes read off the run: X (n x p) and Y (n x V), the folds asked
 * for (k; leave-one-group-out may change it), the A alphas (`alphas`, or the
 * single `alpha`), and the centring: legacy is shared mode, whose only
 * centring is the global one; fold_center re-centres on each training fold. */
void nf_ridge_read_run(const struct nf_run *run, const float **X, const float **Y, int64_t *n, int64_t *p,
                       int64_t *V, int64_t *k, const double **alphas, int64_t *A, bool *legacy, bool *center,
                       bool *fold_center);
/* G += PᵀP (r x r) and p_sum += Pᵀ1 in double, for the n_val x r matrix P of
 * a validation fold, summed over rows in order (so CPU and GPU nodes agree). */
void nf_ridge_fold_gram(const float *P, int64_t n_val, int64_t r, double *G, double *p_sum);
/* A voxel block's rows of Y (n x V) in fold order: Y itself from column b0
 * (*ld = V) for contiguous folds, else rows perm[i] gathered into buf
 * (n x nb, *ld = nb). */
const float *nf_ridge_block_rows(const float *Y, int64_t n, int64_t V, const int64_t *perm, int64_t b0, int64_t nb,
                                 float *buf, int64_t *ld);
/* Per-column means of the rows of X outside [skip0, skip1). */
void nf_ridge_column_means(const float *X, int64_t n, int64_t p, int64_t skip0, int64_t skip1, double *mean);
/* Rows of X outside [skip0, skip1) (inside, when `inside`), minus `mean` when given. */
void nf_ridge_copy_rows(const float *X, int64_t n, int64_t p, int64_t skip0, int64_t skip1, bool inside,
                        const double *mean, float *out);
/* The node's output matrices (p, 1, 1, n, 1 and k A rows of V voxels, with Y's
 * geometry), predictions and cv_scores only when wanted; out[6] the
 * caller's. 0, or the error code with run->err set. */
int nf_ridge_new_outputs(const struct nf_run *run, int64_t n, int64_t p, int64_t k, int64_t A, int64_t V,
                         struct nf_geom *geom, struct nf_value **out);
/* intercept = mean(Y) - mean(X) W (when center), what each output holds
 * (statistic, row names: X's columns, folds and alphas, samples), then the
 * outputs move to run->out (out[] left NULL). 0, or NF_ENOMEM (out[] kept). */
int nf_ridge_finish_outputs(struct nf_run *run, struct nf_value **out, bool center, const double *x_mean,
                            const double *y_mean, int64_t p, int64_t V);

/* Banded ridge's checkpoint chunks (ridge_banded.c), laid out here for the
 * tests that resume from doctored ones. Chunk NF_RIDGE_BAND_CKPT_STATE holds
 * this head, then per voxel the best score (float, V), candidate and alpha
 * index (int32, V each) after the first `done` candidates; it is replaced at
 * every commit. Chunk 1 + c0 holds the cv_scores rows of candidates
 * [c0, c1) (struct nf_ridge_band_rows, then (c1 - c0) x V floats); chunk
 * 1 + C + c the refit weights of the voxels that chose candidate c
 * (struct nf_ridge_band_refit, then p x nv floats, voxels in order). */
#define NF_RIDGE_BAND_CKPT_STATE 0
struct nf_ridge_band_state { int64_t V, C, done; };
struct nf_ridge_band_rows { int64_t V, c0, c1; };
struct nf_ridge_band_refit { int64_t cand, nv, p; };

#endif
