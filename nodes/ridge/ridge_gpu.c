/* ridge_gpu.c — the `ridge` node on the GPU (CUDA builds): the algorithm of
 * nodes/ridge/ridge.c with the voxel-sized work on the device and the data resident
 * there for the whole node.
 *
 * Host, as the CPU node (and with its messages): input checks and warnings,
 * the folds (contiguous, shuffled as sklearn's KFold, or by groups), the
 * centring means, and from each fold's factors the small r x r products in
 * double (G = PᵀP, M_a = D_a G D_a, d_a, Pᵀ1, Uᵀ1). Device: the thin SVD of
 * every fold's design and of all samples (cuSOLVER gesvdj), P = X_val Vtᵀ, and
 * per block of voxels
 *   UtY_f = U_fᵀ (Y_train - centre)       two GEMMs per fold (rows around the fold)
 *   Z_f   = P_fᵀ (Y_val - centre)         one GEMM per fold
 *   T_f   = M_f UtY_f, every alpha        one strided-batched GEMM over folds
 *   SS_res, SS_tot, R² (or r) per alpha   fused epilogue (double), summed over
 *   folds in fold order; the best alpha   per voxel (first on ties)
 *   predictions P_f D_best UtY_f + centre (when wanted), the refit
 *   W = Vtᵀ D_best Uᵀ (Y - mean)          two GEMMs and a shrink kernel.
 * With d_a = s/(s²+α) and z = Pᵀ y_val, ||y_val - P D_a u||² = yᵀy - 2 (D_a u)ᵀz
 * + uᵀ(D_a PᵀP D_a)u, so predictions are never formed for the choice.
 *
 * Memory: the factors stay on the device; voxel blocks are sized from the free
 * device memory (nf_gpu_free_bytes: less a margin) and at most NF_RIDGE_GPU_BLOCK;
 * a block whose arena cannot be allocated halves and tries again. Y goes up
 * block by block from pinned buffers on the copy stream while the previous
 * block computes (two device buffers, events between the streams), and a
 * block's results come down while the host packs the next one.
 *
 * Results: weights and scores agree with the CPU node to float32 round-off;
 * the chosen alphas are the same except where two alphas' mean scores are
 * within round-off of each other (the GEMMs sum in another order), and so is
 * shared mode's single alpha. Degenerate shapes (no voxels or no features)
 * and a missing GPU go to the CPU node.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu.h"
#include "kernels/kernels.h"
#include "node.h"
#include "core/util.h"

#include "predict/predict_models.h"
#include "ridge.h"
#include "ridge_internal.h"

/* Folds whose T (every alpha) is computed in one batched GEMM. */
enum { FOLD_BATCH = 8 };
/* The smallest block worth trying before giving up for lack of memory. */
enum { MIN_BLOCK = 32 };

/* ---- host side: what nodes/ridge/ridge.c computes before its voxel blocks ---- */

struct gfold {
    int64_t v0, v1, n_tr, n_val, r;
    float *s;          /* r */
    double *u_sum;     /* r: column sums of U */
    double *x_mean;    /* p: training means of X */
    float *P;          /* n_val x r */
    double *p_sum;     /* r: Pᵀ 1 */
    /* device */
    float *dU, *dP;
};

struct gctx {
    const struct ridge_params *prm;
    const float *X, *Y;
    uint64_t y_serial;        /* Y's value (its device copy, when resident) */
    int64_t n, p, V, k, A, r, rmax, nvmax;
    const double *alphas;
    bool center, fold_center, legacy;
    int threads;
    struct gfold *folds;
    int64_t *perm, *fold_size;
    float *X_perm;
    double *x_mean;           /* p: global means (centre) */
    double *y_mean;           /* V: global means, from the device */
    float *s;                 /* r: the full fit's singular values */
    double *u_sum;            /* r */
    /* device, for the whole node */
    float *dU, *dVt, *ds, *dM, *dsf;
    double *du_sum, *dusum_f, *dpsum_f, *ddj, *dpj, *dnval, *dalphas;
    int *dr;
    int64_t *dv0, *dv1;
    const float *dYall;       /* Y whole (n x V), resident (nf_gpu_resident), or NULL */
    int64_t *dperm;           /* n: fold order -> Y's rows (NULL: the same order) */
    /* device, per block (nb voxels) */
    int64_t nb;
    float *dY[2], *dUtY, *dZ, *dT, *dcv, *dpred, *dcoef, *dfull, *dW, *dalpha, *dscore;
    double *dym_all, *dymean, *dsy, *dsyy, *dacc;
    int *dbest;
    /* pinned staging */
    float *up[2];
    char *down[2];
    size_t down_bytes;
    nf_gpu_event up_done[2], compute_done[2], down_done[2];
};

static void gfold_release(struct gfold *f)
{
    free(f->s);
    free(f->u_sum);
    free(f->x_mean);
    free(f->P);
    free(f->p_sum);
}

static void free_gctx(struct gctx *c)
{
    for (int64_t f = 0; c->folds && f < c->k; f++)
        gfold_release(&c->folds[f]);
    free(c->folds);
    free(c->perm);
    free(c->fold_size);
    free(c->X_perm);
    free(c->x_mean);
    free(c->y_mean);
    free(c->s);
    free(c->u_sum);
    for (int i = 0; i < 2; i++) {
        nf_gpu_event_destroy(c->up_done[i]);
        nf_gpu_event_destroy(c->compute_done[i]);
        nf_gpu_event_destroy(c->down_done[i]);
    }
}

/* ---- device memory plan ---- */

static size_t al(size_t bytes)
{
    return nf_gpu_alloc_size(bytes);
}

/* Arena bytes that do not depend on the block: every fold's factors and
 * small products, the full fit, and the largest transient (one SVD). */
static size_t fixed_bytes(const struct gctx *c, struct nf_gpu *g)
{
    size_t b = 0, f4 = sizeof(float), d8 = sizeof(double);
    int64_t k = c->k, A = c->A, rm = c->rmax, n = c->n, p = c->p, r = c->r;
    for (int64_t f = 0; f < k; f++) {
        int64_t ntr = c->folds[f].n_tr, nv = c->folds[f].n_val, rf = ntr < p ? ntr : p;
        b += al((size_t)(ntr * rf) * f4) + al((size_t)(nv * rf) * f4);
    }
    b += al((size_t)(k * A * rm * rm) * f4) + 2 * al((size_t)(k * A * rm) * d8) + 2 * al((size_t)(k * rm) * d8) +
         al((size_t)(k * rm) * f4) + al((size_t)k * sizeof(int)) + al((size_t)k * d8) + 2 * al((size_t)k * 8) +
         al((size_t)A * d8);
    b += al((size_t)(n * r) * f4) + al((size_t)(r * p) * f4) + al((size_t)r * f4) + al((size_t)r * d8);
    b += al((size_t)n * sizeof(int64_t));   /* the fold order, for gathering from a resident Y */
    /* transient: X (n x p), X_val, Vt of a fold and the SVD's own scratch */
    size_t svd = nf_gpu_svd_bytes(g, n, p);
    b += al((size_t)(n * p) * f4) + al((size_t)(n * p) * f4) + al((size_t)(r * p) * f4) + al((size_t)r * f4) +
         (svd ? svd : al((size_t)(2 * n * p + 1024) * f4));
    return b;
}

/* Arena bytes per voxel of a block, and a fixed allowance for its rounding. */
static size_t block_bytes(const struct gctx *c, int64_t nb, bool want_cv, bool want_pred)
{
    size_t f4 = sizeof(float), d8 = sizeof(double);
    int64_t k = c->k, A = c->A, rm = c->rmax, kb = k < FOLD_BATCH ? k : FOLD_BATCH;
    size_t per = f4 * (size_t)(2 * c->n + k * rm + kb * rm + kb * A * rm + rm + c->r + c->p + 3 +
                               (want_cv ? k * A : 0) + (want_pred ? c->n : 0)) +
                 d8 * (size_t)(3 * k + 1 + A) + sizeof(int);
    return per * (size_t)nb + 32 * 256;
}

static size_t down_layout(const struct gctx *c, int64_t nb, bool want_cv, bool want_pred, size_t off[7])
{
    /* W (p), alpha, score, y_mean (double), cv (k A), predictions (n), acc (A, double) */
    size_t at = 0, f4 = sizeof(float), d8 = sizeof(double);
    off[0] = at, at += (size_t)(c->p * nb) * f4;
    off[1] = at, at += (size_t)nb * f4;
    off[2] = at, at += (size_t)nb * f4;
    at = (at + 7) & ~(size_t)7;
    off[3] = at, at += (size_t)nb * d8;
    off[4] = at, at += want_cv ? (size_t)(c->k * c->A * nb) * f4 : 0;
    off[5] = at, at += want_pred ? (size_t)(c->n * nb) * f4 : 0;
    at = (at + 7) & ~(size_t)7;
    off[6] = at, at += (size_t)(c->A * nb) * d8;
    return at;
}

/* ---- copying rows between host arrays, over threads ---- */

struct rows_job {
    float *dst;
    const float *src;
    int64_t rows, cols, ld_dst, ld_src;
    const int64_t *src_row, *dst_row;   /* NULL: identity */
    int parts, part;
};

static void *rows_worker(void *arg)
{
    const struct rows_job *j = arg;
    int64_t i0 = j->rows * j->part / j->parts, i1 = j->rows * (j->part + 1) / j->parts;
    for (int64_t i = i0; i < i1; i++) {
        int64_t s = j->src_row ? j->src_row[i] : i, d = j->dst_row ? j->dst_row[i] : i;
        memcpy(j->dst + d * j->ld_dst, j->src + s * j->ld_src, (size_t)j->cols * sizeof(float));
    }
    return NULL;
}

/* dst row (dst_row ? dst_row[i] : i) = src row (src_row ? src_row[i] : i). */
static void copy_rows_threads(float *dst, int64_t ld_dst, const int64_t *dst_row, const float *src, int64_t ld_src,
                              const int64_t *src_row, int64_t rows, int64_t cols, int threads)
{
    struct rows_job jobs[16];
    pthread_t tids[16];
    int parts = threads < 1 ? 1 : threads > 16 ? 16 : threads, started = 0;
    if ((double)rows * (double)cols < 1 << 20)
        parts = 1;   /* small: threads cost more than they save */
    for (int t = 0; t < parts; t++)
        jobs[t] = (struct rows_job){ dst, src, rows, cols, ld_dst, ld_src, src_row, dst_row, parts, t };
    int created[16] = { 0 };
    for (int t = 1; t < parts; t++)
        if (pthread_create(&tids[t], NULL, rows_worker, &jobs[t]) == 0) {
            created[t] = 1;
            started++;
        }
    rows_worker(&jobs[0]);
    for (int t = 1; t < parts; t++) {
        if (created[t])
            pthread_join(tids[t], NULL);
        else
            rows_worker(&jobs[t]);
    }
    (void)started;
}

/* ---- device setup ---- */

static int upload_sync(struct nf_gpu *g, void *dst, const void *src, size_t bytes, struct nf_error *err)
{
    if (!bytes)
        return 0;
    int rc = nf_gpu_upload(g->compute, dst, src, bytes, "an upload", err);
    return rc < 0 ? rc : nf_gpu_stream_sync(g->compute, "an upload", err);
}

static int download_sync(struct nf_gpu *g, void *dst, const void *src, size_t bytes, struct nf_error *err)
{
    if (!bytes)
        return 0;
    int rc = nf_gpu_download(g->compute, dst, src, bytes, "a download", err);
    return rc < 0 ? rc : nf_gpu_stream_sync(g->compute, "a download", err);
}


/* Factor the rows of X outside [skip0, skip1) on the device: centred as asked,
 * U (n_tr x r) into dU, s and u_sum on the host; Vt into dVt. */
static int factor(struct gctx *c, struct nf_gpu *g, int64_t skip0, int64_t skip1, int how, double *x_mean,
                  float *dX, float *dU, float *ds, float *dVt, float *s, double *u_sum, struct nf_error *err)
{
    int64_t n = c->n - (skip1 - skip0), p = c->p, r = n < p ? n : p;
    float *Xc = nf_malloc((size_t)(n * p) * sizeof *Xc), *U = nf_malloc((size_t)(n * r) * sizeof *U);
    int rc = 0;
    if (!Xc || !U) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the SVD of a %lldx%lld design", (long long)n, (long long)p);
        goto fail;
    }
    if (how == 1)
        nf_ridge_column_means(c->X, c->n, p, skip0, skip1, x_mean);
    else if (how == 2 && x_mean != c->x_mean)
        memcpy(x_mean, c->x_mean, (size_t)p * sizeof *x_mean);
    nf_ridge_copy_rows(c->X, c->n, p, skip0, skip1, false, how == 0 ? NULL : x_mean, Xc);
    NF_TRY(rc = upload_sync(g, dX, Xc, (size_t)(n * p) * sizeof *Xc, err));
    rc = nf_gpu_svd(g, dX, n, p, dU, ds, dVt, err);
    if (rc == NF_EDATA) {
        rc = NF_FAIL(err, NF_EDATA, "the SVD of the design (%lld x %lld) did not converge", (long long)n,
                     (long long)p);
        goto fail;
    }
    NF_TRY(rc);
    NF_TRY(rc = download_sync(g, U, dU, (size_t)(n * r) * sizeof *U, err));
    NF_TRY(rc = download_sync(g, s, ds, (size_t)r * sizeof *s, err));
    /* A zero singular value (a column centred to exactly zero) leaves Jacobi's
     * U column as 0/0; LAPACK completes it instead. Its shrinkage factor is 0
     * for every alpha > 0, so any finite column will do: zero it, so that it
     * cannot turn a product with 0 into NaN. */
    bool patched = false;
    for (int64_t j = 0; j < r; j++) {
        bool finite = true;
        for (int64_t i = 0; i < n && finite; i++)
            finite = isfinite(U[i * r + j]);
        if (!finite) {
            for (int64_t i = 0; i < n; i++)
                U[i * r + j] = 0.0f;
            patched = true;
        }
    }
    if (patched)
        NF_TRY(rc = upload_sync(g, dU, U, (size_t)(n * r) * sizeof *U, err));
    memset(u_sum, 0, (size_t)r * sizeof *u_sum);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < r; j++)
            u_sum[j] += U[i * r + j];
fail:
    free(Xc);
    free(U);
    return rc;
}

/* Everything before the voxel blocks: factors of the folds and of all samples,
 * the small products on the host, and their upload. The arena is open. */
static int setup_device(struct gctx *c, struct nf_gpu *g, struct nf_error *err)
{
    const int64_t k = c->k, A = c->A, p = c->p, rm = c->rmax;
    float *M = NULL, *sf = NULL;
    double *dj = NULL, *pj = NULL, *us = NULL, *ps = NULL, *nval = NULL, *G = NULL;
    int *rr = NULL;
    int64_t *v0 = NULL, *v1 = NULL;
    float *Xval = NULL, *dXval = NULL;
    int rc = 0;

    /* persistent first, transient (design copies, a fold's Vt) after: reset later */
    for (int64_t f = 0; f < k; f++) {
        struct gfold *fd = &c->folds[f];
        NF_GPU_ALLOC(fd->dU, fd->n_tr * fd->r);
        NF_GPU_ALLOC(fd->dP, fd->n_val * fd->r);
    }
    NF_GPU_ALLOC(c->dM, k * A * rm * rm);
    NF_GPU_ALLOC(c->ddj, k * A * rm);
    NF_GPU_ALLOC(c->dpj, k * A * rm);
    NF_GPU_ALLOC(c->dusum_f, k * rm);
    NF_GPU_ALLOC(c->dpsum_f, k * rm);
    NF_GPU_ALLOC(c->dsf, k * rm);
    NF_GPU_ALLOC(c->dr, k);
    NF_GPU_ALLOC(c->dnval, k);
    NF_GPU_ALLOC(c->dv0, k);
    NF_GPU_ALLOC(c->dv1, k);
    NF_GPU_ALLOC(c->dalphas, A);
    NF_GPU_ALLOC(c->dperm, c->n);
    NF_GPU_ALLOC(c->dU, c->n * c->r);
    NF_GPU_ALLOC(c->dVt, c->r * p);
    NF_GPU_ALLOC(c->ds, c->r);
    NF_GPU_ALLOC(c->du_sum, c->r);
    size_t mark = g->arena_used;
    float *dX, *dVtf, *dsf1;
    NF_GPU_ALLOC(dX, c->n * p);
    NF_GPU_ALLOC(dXval, c->nvmax * p);
    NF_GPU_ALLOC(dVtf, c->r * p);
    NF_GPU_ALLOC(dsf1, c->r);

    /* the full fit: global centring (also legacy mode's only centring) */
    NF_TRY(rc = factor(c, g, 0, 0, c->center ? 2 : 0, c->x_mean, dX, c->dU, c->ds, c->dVt, c->s, c->u_sum, err));
    NF_TRY(rc = upload_sync(g, c->du_sum, c->u_sum, (size_t)c->r * sizeof *c->u_sum, err));

    M = nf_calloc((size_t)(k * A * rm * rm), sizeof *M);
    sf = nf_calloc((size_t)(k * rm), sizeof *sf);
    dj = nf_calloc((size_t)(k * A * rm), sizeof *dj);
    pj = nf_calloc((size_t)(k * A * rm), sizeof *pj);
    us = nf_calloc((size_t)(k * rm), sizeof *us);
    ps = nf_calloc((size_t)(k * rm), sizeof *ps);
    nval = nf_malloc((size_t)k * sizeof *nval);
    rr = nf_malloc((size_t)k * sizeof *rr);
    v0 = nf_malloc((size_t)k * sizeof *v0);
    v1 = nf_malloc((size_t)k * sizeof *v1);
    G = nf_malloc((size_t)(rm * rm) * sizeof *G);
    Xval = nf_malloc((size_t)(c->nvmax * p) * sizeof *Xval);
    if (!M || !sf || !dj || !pj || !us || !ps || !nval || !rr || !v0 || !v1 || !G || !Xval) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t f = 0; f < k; f++) {
        struct gfold *fd = &c->folds[f];
        int64_t r = fd->r;
        /* per_voxel: re-centre on the training fold; shared: global centring */
        int how = !c->center ? 0 : c->fold_center ? 1 : 2;
        NF_TRY(rc = factor(c, g, fd->v0, fd->v1, how, fd->x_mean, dX, fd->dU, dsf1, dVtf, fd->s, fd->u_sum, err));
        /* P = X_val Vtᵀ */
        for (int64_t i = 0; i < fd->n_val; i++)
            for (int64_t j = 0; j < p; j++)
                Xval[i * p + j] = (float)(c->X[(fd->v0 + i) * p + j] - (c->center ? fd->x_mean[j] : 0.0));
        NF_TRY(rc = upload_sync(g, dXval, Xval, (size_t)(fd->n_val * p) * sizeof *Xval, err));
        NF_TRY(rc = nf_gpu_sgemm(g, false, true, fd->n_val, r, p, 1.0f, dXval, p, dVtf, p, 0.0f, fd->dP, r, err));
        NF_TRY(rc = download_sync(g, fd->P, fd->dP, (size_t)(fd->n_val * r) * sizeof *fd->P, err));
        /* G = PᵀP and Pᵀ1 in double; M_a = D_a G D_a, d_a = s/(s²+α), as the CPU */
        memset(G, 0, (size_t)(r * r) * sizeof *G);
        nf_ridge_fold_gram(fd->P, fd->n_val, r, G, fd->p_sum);
        for (int64_t a = 0; a < A; a++) {
            double *d = dj + (f * A + a) * rm;   /* d_a as float, held exactly in double */
            for (int64_t j = 0; j < r; j++) {
                double sj = fd->s[j];
                d[j] = (float)(sj / (sj * sj + c->alphas[a]));
                pj[(f * A + a) * rm + j] = fd->p_sum[j] * d[j];
            }
            for (int64_t j = 0; j < r; j++)
                for (int64_t l = 0; l < r; l++)
                    M[((f * A + a) * rm + j) * rm + l] = (float)(d[j] * G[j * r + l] * d[l]);
        }
        for (int64_t j = 0; j < r; j++) {
            us[f * rm + j] = fd->u_sum[j];
            ps[f * rm + j] = fd->p_sum[j];
            sf[f * rm + j] = fd->s[j];
        }
        nval[f] = (double)fd->n_val;
        rr[f] = (int)r;
        v0[f] = fd->v0;
        v1[f] = fd->v1;
    }
    NF_TRY(rc = upload_sync(g, c->dM, M, (size_t)(k * A * rm * rm) * sizeof *M, err));
    NF_TRY(rc = upload_sync(g, c->ddj, dj, (size_t)(k * A * rm) * sizeof *dj, err));
    NF_TRY(rc = upload_sync(g, c->dpj, pj, (size_t)(k * A * rm) * sizeof *pj, err));
    NF_TRY(rc = upload_sync(g, c->dusum_f, us, (size_t)(k * rm) * sizeof *us, err));
    NF_TRY(rc = upload_sync(g, c->dpsum_f, ps, (size_t)(k * rm) * sizeof *ps, err));
    NF_TRY(rc = upload_sync(g, c->dsf, sf, (size_t)(k * rm) * sizeof *sf, err));
    NF_TRY(rc = upload_sync(g, c->dr, rr, (size_t)k * sizeof *rr, err));
    NF_TRY(rc = upload_sync(g, c->dnval, nval, (size_t)k * sizeof *nval, err));
    NF_TRY(rc = upload_sync(g, c->dv0, v0, (size_t)k * sizeof *v0, err));
    NF_TRY(rc = upload_sync(g, c->dv1, v1, (size_t)k * sizeof *v1, err));
    NF_TRY(rc = upload_sync(g, c->dalphas, c->alphas, (size_t)A * sizeof *c->alphas, err));
    if (c->perm)
        NF_TRY(rc = upload_sync(g, c->dperm, c->perm, (size_t)c->n * sizeof *c->perm, err));
    else
        c->dperm = NULL;
    g->arena_used = mark;   /* the transient part is free for the blocks */
fail:
    free(M);
    free(sf);
    free(dj);
    free(pj);
    free(us);
    free(ps);
    free(nval);
    free(rr);
    free(v0);
    free(v1);
    free(G);
    free(Xval);
    return rc;
}

static int alloc_block(struct gctx *c, struct nf_gpu *g, int64_t nb, bool want_cv, bool want_pred,
                       struct nf_error *err)
{
    int64_t k = c->k, A = c->A, rm = c->rmax, kb = k < FOLD_BATCH ? k : FOLD_BATCH;
    int rc = 0;
    c->nb = nb;
    NF_GPU_ALLOC(c->dY[0], c->n * nb);
    NF_GPU_ALLOC(c->dY[1], c->n * nb);
    NF_GPU_ALLOC(c->dUtY, k * rm * nb);
    NF_GPU_ALLOC(c->dZ, kb * rm * nb);
    NF_GPU_ALLOC(c->dT, kb * A * rm * nb);
    c->dcv = NULL;
    c->dpred = NULL;
    if (want_cv)
        NF_GPU_ALLOC(c->dcv, k * A * nb);
    if (want_pred)
        NF_GPU_ALLOC(c->dpred, c->n * nb);
    NF_GPU_ALLOC(c->dcoef, rm * nb);
    NF_GPU_ALLOC(c->dfull, c->r * nb);
    NF_GPU_ALLOC(c->dW, c->p * nb);
    NF_GPU_ALLOC(c->dalpha, nb);
    NF_GPU_ALLOC(c->dscore, nb);
    NF_GPU_ALLOC(c->dym_all, nb);
    NF_GPU_ALLOC(c->dymean, k * nb);
    NF_GPU_ALLOC(c->dsy, k * nb);
    NF_GPU_ALLOC(c->dsyy, k * nb);
    NF_GPU_ALLOC(c->dacc, A * nb);
    NF_GPU_ALLOC(c->dbest, nb);
fail:
    return rc;
}

/* ---- one block ---- */


/* Pass 2 of a block after its scores: the choice, predictions, the refit,
 * and the downloads into down (offsets off). */
static int finish_on_device(struct gctx *c, struct nf_gpu *g, const float *Y, char *down, const size_t off[7],
                            int64_t nb, int64_t shared_best, bool want_cv, bool want_pred, struct nf_error *err)
{
    const int64_t k = c->k, A = c->A, rm = c->rmax, n = c->n;
    int rc = 0;
    NF_GPU_KL(nf_gpu_ridge_choose(g->compute, A, nb, (int)k, c->dacc, c->dalphas, shared_best, c->dbest, c->dalpha,
                                  c->dscore),
              "the choice kernel");
    nf_gpu_phase(g, "block: choice kernel");
    if (want_pred)
        for (int64_t f = 0; f < k; f++) {
            const struct gfold *fd = &c->folds[f];
            NF_GPU_KL(nf_gpu_ridge_shrink(g->compute, c->dUtY + f * rm * nb, c->dcoef, fd->r, nb, c->dsf + f * rm,
                                          c->dalphas, c->dbest, NULL, NULL),
                      "the shrink kernel");
            float *pred = c->dpred + fd->v0 * nb;
            NF_TRY(rc = nf_gpu_sgemm(g, false, false, fd->n_val, nb, fd->r, 1.0f, fd->dP, fd->r, c->dcoef, nb, 0.0f,
                                     pred, nb, err));
            NF_GPU_KL(nf_gpu_add_rows(g->compute, pred, fd->n_val, nb, c->dymean + f * nb), "the centring kernel");
            nf_gpu_phase(g, "block: predictions");
        }
    /* refit on all samples: W = Vtᵀ diag(d_alpha(v)) Uᵀ (Y - mean) */
    NF_TRY(rc = nf_gpu_sgemm(g, true, false, c->r, nb, n, 1.0f, c->dU, c->r, Y, nb, 0.0f, c->dfull, nb, err));
    NF_GPU_KL(nf_gpu_ridge_shrink(g->compute, c->dfull, c->dfull, c->r, nb, c->ds, c->dalphas, c->dbest,
                                  c->center ? c->du_sum : NULL, c->dym_all),
              "the shrink kernel");
    NF_TRY(rc = nf_gpu_sgemm(g, true, false, c->p, nb, c->r, 1.0f, c->dVt, c->p, c->dfull, nb, 0.0f, c->dW, nb, err));
    nf_gpu_phase(g, "block: refit GEMMs");
    NF_TRY(rc = nf_gpu_download(g->compute, down + off[0], c->dW, (size_t)(c->p * nb) * sizeof(float),
                                "downloading weights", err));
    NF_TRY(rc = nf_gpu_download(g->compute, down + off[1], c->dalpha, (size_t)nb * sizeof(float), "downloading alphas",
                                err));
    NF_TRY(rc = nf_gpu_download(g->compute, down + off[2], c->dscore, (size_t)nb * sizeof(float), "downloading scores",
                                err));
    if (c->center)
        NF_TRY(rc = nf_gpu_download(g->compute, down + off[3], c->dym_all, (size_t)nb * sizeof(double),
                                    "downloading means", err));
    if (want_cv)
        NF_TRY(rc = nf_gpu_download(g->compute, down + off[4], c->dcv, (size_t)(k * A * nb) * sizeof(float),
                                    "downloading CV scores", err));
    if (want_pred)
        NF_TRY(rc = nf_gpu_download(g->compute, down + off[5], c->dpred, (size_t)(n * nb) * sizeof(float),
                                    "downloading predictions", err));
fail:
    return rc;
}

/* Enqueue block b0..b0+nb (Y packed into up[slot], or resident): upload or
 * gather, CV scores, choice, predictions, refit, downloads into down[slot]. */
static int enqueue_block(struct gctx *c, struct nf_gpu *g, int slot, int64_t b0, int64_t nb, int pass,
                         int64_t shared_best, bool want_cv, bool want_pred, struct nf_error *err)
{
    const int64_t k = c->k, A = c->A, rm = c->rmax, n = c->n;
    size_t off[7];
    down_layout(c, c->nb, want_cv, want_pred, off);
    char *down = c->down[slot];
    float *Y = c->dY[slot];
    int rc = 0;

    if (c->dYall) {
        /* Y is on the device: the block's columns, rows in fold order (the
         * compute stream orders it after the block that last used dY[slot]) */
        NF_GPU_KL(nf_gpu_gather_rows(g->compute, Y, nb, c->dYall + b0, c->V, c->dperm, n, nb), "the gather kernel");
        nf_gpu_phase(g, "block: gather Y");
    } else {
        /* the upload may not overwrite dY[slot] before the block that used it is done */
        NF_TRY(rc = nf_gpu_stream_wait(g->copy, c->compute_done[slot], "ordering an upload", err));
        NF_TRY(rc = nf_gpu_upload(g->copy, Y, c->up[slot], (size_t)(n * nb) * sizeof(float), "uploading Y", err));
        NF_TRY(rc = nf_gpu_event_record(c->up_done[slot], g->copy, err));
        NF_TRY(rc = nf_gpu_stream_wait(g->compute, c->up_done[slot], "ordering the block", err));
        nf_gpu_phase(g, "block: upload Y");
    }

    NF_GPU_KL(nf_gpu_ridge_stats(g->compute, Y, n, nb, (int)k, c->dv0, c->dv1, c->center, c->fold_center, c->dym_all,
                                 c->dymean, c->dsy, c->dsyy),
              "the fold statistics kernel");
    NF_TRY(rc = nf_gpu_zero(g->compute, c->dacc, (size_t)(A * nb) * sizeof(double), "clearing the scores", err));
    nf_gpu_phase(g, "block: fold statistics");
    for (int64_t f0 = 0; f0 < k; f0 += FOLD_BATCH) {
        int64_t kb = k - f0 < FOLD_BATCH ? k - f0 : FOLD_BATCH;
        for (int64_t f = f0; f < f0 + kb; f++) {
            const struct gfold *fd = &c->folds[f];
            float *UtY = c->dUtY + f * rm * nb, *Z = c->dZ + (f - f0) * rm * nb;
            /* Uᵀ Y_train: the training rows are [0, v0) and [v1, n) */
            if (fd->v0 > 0)
                NF_TRY(rc = nf_gpu_sgemm(g, true, false, fd->r, nb, fd->v0, 1.0f, fd->dU, fd->r, Y, nb, 0.0f, UtY,
                                         nb, err));
            if (fd->v1 < n)
                NF_TRY(rc = nf_gpu_sgemm(g, true, false, fd->r, nb, n - fd->v1, 1.0f, fd->dU + fd->v0 * fd->r, fd->r,
                                         Y + fd->v1 * nb, nb, fd->v0 > 0 ? 1.0f : 0.0f, UtY, nb, err));
            NF_GPU_KL(nf_gpu_ridge_center(g->compute, UtY, fd->r, rm, nb, c->dusum_f + f * rm, c->dymean + f * nb,
                                          c->center),
                      "the centring kernel");
            nf_gpu_phase(g, "block: U'Y GEMMs");
            /* Z = Pᵀ (Y_val - centre) */
            NF_TRY(rc = nf_gpu_sgemm(g, true, false, fd->r, nb, fd->n_val, 1.0f, fd->dP, fd->r, Y + fd->v0 * nb, nb,
                                     0.0f, Z, nb, err));
            NF_GPU_KL(nf_gpu_ridge_center(g->compute, Z, fd->r, rm, nb, c->dpsum_f + f * rm, c->dymean + f * nb,
                                          c->center),
                      "the centring kernel");
            nf_gpu_phase(g, "block: P'Y GEMMs");
        }
        /* T_f = M_f UtY_f for the group's folds, every alpha at once */
        NF_TRY(rc = nf_gpu_sgemm_batched(g, false, false, A * rm, nb, rm, 1.0f, c->dM + f0 * A * rm * rm, rm,
                                         A * rm * rm, c->dUtY + f0 * rm * nb, nb, rm * nb, 0.0f, c->dT, nb,
                                         A * rm * nb, kb, err));
        nf_gpu_phase(g, "block: T = M U'Y, batched GEMM");
        NF_GPU_KL(nf_gpu_ridge_scores(g->compute, (int)f0, (int)kb, A, rm, nb, c->dr, c->dnval, c->dUtY, c->dZ, c->dT,
                                      c->ddj, c->dpj, c->dsy, c->dsyy, c->prm->score, c->legacy, c->dacc,
                                      pass == 2 ? c->dcv : NULL),
                  "the score kernel");
        nf_gpu_phase(g, "block: score kernel");
    }
    if (pass == 1) {
        /* shared mode's first pass: only the score sums come back */
        NF_TRY(rc = nf_gpu_download(g->compute, down + off[6], c->dacc, (size_t)(A * nb) * sizeof(double),
                                    "downloading scores", err));
    } else {
        NF_TRY(rc = finish_on_device(c, g, Y, down, off, nb, shared_best, want_cv, want_pred, err));
    }
    NF_TRY(rc = nf_gpu_event_record(c->compute_done[slot], g->compute, err));
    NF_TRY(rc = nf_gpu_event_record(c->down_done[slot], g->compute, err));
    nf_gpu_phase(g, "block: downloads");
fail:
    return rc;
}

/* Wait for block (b0, nb)'s downloads in down[slot] and put them in place. */
static int finish_block(struct gctx *c, struct nf_gpu *g, int slot, int64_t b0, int64_t nb, int pass,
                        struct nf_value **out, double *alpha_sums, bool want_cv, bool want_pred, struct nf_error *err)
{
    size_t off[7];
    down_layout(c, c->nb, want_cv, want_pred, off);
    const char *down = c->down[slot];
    int rc = nf_gpu_event_sync(c->down_done[slot], "a voxel block", err);
    if (rc < 0)
        return rc;
    nf_gpu_phase(g, "waiting for a block");
    if (pass == 1) {
        const double *acc = (const double *)(down + off[6]);
        for (int64_t a = 0; a < c->A; a++)
            for (int64_t v = 0; v < nb; v++)
                alpha_sums[a] += acc[a * nb + v];
        return 0;
    }
    copy_rows_threads(out[RIDGE_OUT_WEIGHTS]->u.mat.data + b0, c->V, NULL, (const float *)(down + off[0]), nb, NULL, c->p,
                      nb, c->threads);
    memcpy(out[RIDGE_OUT_ALPHA]->u.mat.data + b0, down + off[1], (size_t)nb * sizeof(float));
    memcpy(out[RIDGE_OUT_SCORE]->u.mat.data + b0, down + off[2], (size_t)nb * sizeof(float));
    if (c->center)
        memcpy(c->y_mean + b0, down + off[3], (size_t)nb * sizeof(double));
    if (want_cv)
        copy_rows_threads(out[RIDGE_OUT_CV_SCORES]->u.mat.data + b0, c->V, NULL, (const float *)(down + off[4]), nb,
                          NULL, c->k * c->A, nb, c->threads);
    if (want_pred)   /* rows in fold order back to Y's order */
        copy_rows_threads(out[RIDGE_OUT_PREDICTIONS]->u.mat.data + b0, c->V, c->perm, (const float *)(down + off[5]), nb,
                          NULL, c->n, nb, c->threads);
    nf_gpu_phase(g, "host: results into the outputs");
    return 0;
}

/* One pass over every voxel block (pass 1: shared mode's score sums). */
static int run_blocks(struct gctx *c, struct nf_gpu *g, int pass, int64_t shared_best, struct nf_value **out,
                      double *alpha_sums, bool want_cv, bool want_pred, struct nf_error *err)
{
    int64_t n_blocks = (c->V + c->nb - 1) / c->nb;
    int rc = 0;
    for (int64_t bi = 0; bi <= n_blocks && rc == 0; bi++) {
        if (bi < n_blocks && nf_run_interrupted(NULL)) {   /* between voxel blocks */
            rc = NF_FAIL(err, NF_EINTR, "interrupted");
            break;
        }
        if (bi < n_blocks) {
            int slot = (int)(bi % 2);
            int64_t b0 = bi * c->nb, nb = c->V - b0 < c->nb ? c->V - b0 : c->nb;
            /* up[slot] was last read by block bi - 2's upload */
            if (!c->dYall) {
                rc = nf_gpu_event_sync(c->up_done[slot], "an upload", err);
                if (rc < 0)
                    break;
                copy_rows_threads(c->up[slot], nb, NULL, c->Y + b0, c->V, c->perm, c->n, nb, c->threads);
                nf_gpu_phase(g, "host: packing Y");
            }
            rc = enqueue_block(c, g, slot, b0, nb, pass, shared_best, want_cv, want_pred, err);
            if (rc < 0)
                break;
        }
        if (bi > 0) {   /* the previous block's results, while this one computes */
            int64_t pb = bi - 1, b0 = pb * c->nb, nb = c->V - b0 < c->nb ? c->V - b0 : c->nb;
            rc = finish_block(c, g, (int)(pb % 2), b0, nb, pass, out, alpha_sums, want_cv, want_pred, err);
        }
    }
    if (rc < 0)
        nf_gpu_drain(g);
    return rc;
}

/* Open the arena for the largest block that fits (halving on out-of-memory),
 * set up the factors and the block buffers, pin the staging buffers. */
static int plan_memory(struct gctx *c, struct nf_gpu *g, bool want_cv, bool want_pred, const struct nf_run *run)
{
    struct nf_error *err = run->err;
    size_t fixed = fixed_bytes(c, g), free_b = nf_gpu_free_bytes(g);
    size_t y_bytes = (size_t)(c->n * c->V) * sizeof(float);
    /* Y whole on the device when it leaves at least as much for the factors
     * and blocks: its blocks are then gathered there instead of packed and
     * uploaded (shared mode reads them twice), and the next GPU node with the
     * same Y finds it (nf_gpu_resident). Else Y streams up block by block. */
    c->dYall = NULL;
    if (y_bytes <= free_b / 2 && nf_gpu_residency_enabled()) {
        void *d = NULL;
        int rc = nf_gpu_resident(g, c->y_serial, NF_GPU_AS_IS, c->Y, y_bytes, &d, NULL, err);
        if (rc < 0 && rc != NF_ENOMEM)
            return rc;
        memset(err, 0, sizeof *err);
        c->dYall = rc == 0 ? d : NULL;
        free_b = nf_gpu_free_bytes(g);
    }
    nf_gpu_phase(g, "Y resident (its upload when cold)");
    int64_t nb = c->V < NF_RIDGE_GPU_BLOCK ? c->V : NF_RIDGE_GPU_BLOCK;
    int64_t cap = nf_gpu_debug_block_cap();
    if (cap > 0 && nb > cap)
        nb = cap;
    while (nb > MIN_BLOCK && fixed + block_bytes(c, nb, want_cv, want_pred) > free_b)
        nb /= 2;
    for (;;) {
        size_t off[7];
        int rc = nf_gpu_arena_open(g, fixed + block_bytes(c, nb, want_cv, want_pred), err);
        if (rc == 0) {
            c->down_bytes = down_layout(c, nb, want_cv, want_pred, off);
            for (int i = 0; i < 2 && rc == 0; i++) {
                c->up[i] = nf_gpu_pinned(g, NF_GPU_PIN_UP0 + i, (size_t)(c->n * nb) * sizeof(float));
                c->down[i] = nf_gpu_pinned(g, NF_GPU_PIN_DOWN0 + i, c->down_bytes);
                if (!c->up[i] || !c->down[i])
                    rc = NF_FAIL(err, NF_ENOMEM, "cannot pin %zu bytes of host memory for GPU transfers",
                                 (size_t)(c->n * nb) * sizeof(float) + c->down_bytes);
            }
        }
        if (rc == 0)
            break;
        if (rc != NF_ENOMEM || nb <= MIN_BLOCK)
            return rc == NF_ENOMEM ? NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(run->node), nf_node_id(run->node),
                                                "not enough GPU memory for the ridge factors and a block of %lld "
                                                "voxels (%s)", (long long)nb, err->msg)
                                   : rc;
        memset(err, 0, sizeof *err);
        nb /= 2;   /* out of memory: a smaller block, and try again */
    }
    nf_gpu_phase(g, "arena and pinned buffers");
    int rc = setup_device(c, g, err);
    nf_gpu_phase(g, "factors: SVDs, small products");
    if (rc == 0)
        rc = alloc_block(c, g, nb, want_cv, want_pred, err);
    return rc;
}

static int run_on_gpu(struct gctx *c, struct nf_gpu *g, struct nf_run *run, struct nf_value **out)
{
    bool want_cv = out[RIDGE_OUT_CV_SCORES] != NULL, want_pred = out[RIDGE_OUT_PREDICTIONS] != NULL;
    double *alpha_sums = NULL;
    int rc = 0;
    for (int i = 0; i < 2; i++)
        if ((rc = nf_gpu_event_create(&c->up_done[i], run->err)) < 0 ||
            (rc = nf_gpu_event_create(&c->compute_done[i], run->err)) < 0 ||
            (rc = nf_gpu_event_create(&c->down_done[i], run->err)) < 0)
            return rc;
    NF_TRY(rc = plan_memory(c, g, want_cv, want_pred, run));
    int64_t shared_best = -1;
    if (c->legacy) {
        if (!(alpha_sums = nf_calloc((size_t)c->A, sizeof *alpha_sums))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        NF_TRY(rc = run_blocks(c, g, 1, -1, out, alpha_sums, want_cv, want_pred, run->err));
        shared_best = 0;
        for (int64_t a = 1; a < c->A; a++)   /* ties: the first alpha */
            if (alpha_sums[a] > alpha_sums[shared_best])
                shared_best = a;
    }
    NF_TRY(rc = run_blocks(c, g, 2, shared_best, out, NULL, want_cv, want_pred, run->err));
fail:
    free(alpha_sums);
    return rc;
}

int nf_ridge_run_gpu(struct nf_run *run)
{
    if (((const struct ridge_params *)run->params)->bands.n)   /* banded ridge runs on the CPU */
        return nf_ridge_banded_run(run);
    const struct ridge_params *prm = run->params;
    const struct nf_value *xin = run->in[RIDGE_IN_X], *yin = run->in[RIDGE_IN_Y];
    const char *id = nf_node_id(run->node);
    struct gctx c = { 0 };
    struct nf_value *out[6] = { 0 };
    struct nf_gpu *g = NULL;
    struct nf_error gpu_err = { 0 };
    int rc = 0;

    /* nothing for a GPU to do; or, with a fixed alpha and no score, one SVD
     * and the refit's GEMMs (nf_ridge_fit_only), which the CPU does in the
     * time a GPU takes to start */
    if (xin->u.mat.cols < 1 || yin->u.mat.cols < 1 || nf_ridge_fit_only(prm, run->wanted))
        return nf_node_ridge.run_cpu(run);
    if (!(g = nf_gpu_acquire(&gpu_err))) {
        nf_warn(id, "%s; running on the CPU", gpu_err.msg);
        return nf_node_ridge.run_cpu(run);
    }
    c.prm = prm;
    nf_ridge_read_run(run, &c.X, &c.Y, &c.n, &c.p, &c.V, &c.k, &c.alphas, &c.A, &c.legacy, &c.center,
                      &c.fold_center);
    c.y_serial = yin->serial;
    c.threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    NF_TRY(rc = nf_ridge_check_inputs(run, c.X, c.Y, c.n, c.p, c.V, c.k, c.A, c.center));
    NF_TRY(rc = nf_ridge_assign_folds(c.prm, c.n, c.p, c.k, &c.X, &c.fold_size, &c.perm, &c.X_perm,
                                      run->in[RIDGE_IN_GROUPS], run, &c.k));
    struct nf_geom *geom = yin->u.mat.geom;
    NF_TRY(rc = nf_ridge_new_outputs(run, c.n, c.p, c.k, c.A, c.V, geom, out));
    nf_gpu_phase(g, "host: checks, folds, outputs");
    c.r = c.n < c.p ? c.n : c.p;
    c.folds = nf_calloc((size_t)c.k, sizeof *c.folds);
    c.x_mean = nf_calloc((size_t)c.p, sizeof *c.x_mean);
    c.y_mean = nf_calloc((size_t)c.V, sizeof *c.y_mean);
    c.s = nf_malloc((size_t)c.r * sizeof *c.s);
    c.u_sum = nf_calloc((size_t)c.r, sizeof *c.u_sum);
    if (!c.folds || !c.x_mean || !c.y_mean || !c.s || !c.u_sum) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (c.center)
        nf_ridge_column_means(c.X, c.n, c.p, 0, 0, c.x_mean);
    for (int64_t f = 0, start = 0; f < c.k; f++) {
        struct gfold *fd = &c.folds[f];
        fd->v0 = start;
        fd->v1 = start + c.fold_size[f];
        start = fd->v1;
        fd->n_val = c.fold_size[f];
        fd->n_tr = c.n - fd->n_val;
        fd->r = fd->n_tr < c.p ? fd->n_tr : c.p;
        c.rmax = fd->r > c.rmax ? fd->r : c.rmax;
        c.nvmax = fd->n_val > c.nvmax ? fd->n_val : c.nvmax;
        fd->s = nf_malloc((size_t)fd->r * sizeof *fd->s);
        fd->u_sum = nf_calloc((size_t)fd->r, sizeof *fd->u_sum);
        fd->x_mean = nf_calloc((size_t)c.p, sizeof *fd->x_mean);
        fd->P = nf_malloc((size_t)(fd->n_val * fd->r) * sizeof *fd->P);
        fd->p_sum = nf_calloc((size_t)fd->r, sizeof *fd->p_sum);
        if (!fd->s || !fd->u_sum || !fd->x_mean || !fd->P || !fd->p_sum) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    NF_TRY(rc = run_on_gpu(&c, g, run, out));
    rc = nf_ridge_finish_outputs(run, out, c.center, c.x_mean, c.y_mean, c.p, c.V);
    nf_gpu_phase(g, "host: intercepts");
fail:
    nf_gpu_release(g);
    for (int o = 0; o < RIDGE_N_PLAIN_OUT; o++)
        nf_value_unref(out[o]);
    free_gctx(&c);
    if (rc < 0)
        nf_error_on_node(run->node, run->err, rc);
    return rc;
}
