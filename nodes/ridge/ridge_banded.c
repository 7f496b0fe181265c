/* ridge_banded.c — banded ridge: the `ridge` node when `bands` is given, with
 * the semantics of himalaya 0.4's BandedRidgeCV (GroupRidgeCV) and
 * MultipleKernelRidgeCV with the random_search solver.
 *
 * The columns of X are split into bands (feature spaces). A candidate is a
 * vector γ of band weights on the simplex; the model for (γ, α) is ridge on
 * Z = [√γ_1 X_1, …, √γ_B X_B] with penalty α, i.e. band b is penalised by
 * α / γ_b. Candidates are himalaya's: the uniform one, then Dirichlet samples
 * cycling through `concentration` (or a fixed grid, or an explicit list).
 * For every candidate and voxel the CV score of every α is the mean over
 * folds (r2 as himalaya's r2_score, or its default l2_neg_loss), the best α
 * gets a 1e-10 log(α) tie slope as in himalaya, and a voxel moves to a later
 * candidate only when it beats its best so far by the float32 epsilon. The
 * weights are refit on all samples at each voxel's (γ, α) and reported on
 * the unscaled columns of X (himalaya's coef_), with the band penalties
 * α / γ_b (exp(-deltas_)) and the split R² of the refit on the training data
 * (himalaya's score(split=True), r2_score_split).
 *
 * Algorithm, per candidate and fold: one thin SVD of the scaled training
 * design Z_tr = U S Vᵀ (r = min(n_train, p): the kernel form's eigenvectors
 * when p > n, the primal ones otherwise, never an n x n matrix more than that)
 * and P = Z_val V. With u = S Uᵀ y_tr and w_a = 1 / (s² + α_a) the validation
 * prediction is P diag(w_a) u, so
 *   SSE_a = yᵀy - 2 Σ_j w_aj u_j z_j + ||R diag(w_a) u||²,  z = Pᵀ y_val,
 * where R is P (n_val <= r) or the r x r factor of PᵀP (from the SVD of P):
 * per voxel block one GEMM for u and z, one (A m) x r stacked-α GEMM for the
 * quadratic terms and one A x r GEMM for the cross terms; no prediction and no
 * solve per α or per voxel. Voxel blocks run on the node's threads; per-voxel
 * state (best score, candidate, α) carries from one candidate to the next.
 * The refit groups voxels by their candidate: one SVD of the full design per
 * candidate chosen by some voxel.
 *
 * Checkpoints (with a cache): the per-voxel state after the candidates done
 * so far is one chunk, replaced at each commit, with the cv_scores rows of
 * the candidates since the last commit in a chunk of their own; commits come
 * when the candidates since the last one took CKPT_COST_RATIO times what a
 * commit takes (about 1% of the node's time). Refit groups are committed as
 * they finish within the same budget. A resumed run continues from the last
 * commit and ends with the bits of an uninterrupted run, on any thread count
 * (details at "checkpoints" below; layout in ridge_internal.h).
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "node.h"
#include "core/rng.h"
#include "core/util.h"

#include "ridge.h"
#include "ridge_internal.h"

#define BLOCK_VOXELS 1024
#define ALPHA_GROUP 4
#define SUB_VOXELS 256
/* himalaya compares candidates in the data's dtype: float32 here */
#define CANDIDATE_EPS ((double)FLT_EPSILON)

/* ---- bands ---- */

struct bands {
    int64_t B;
    char **name;      /* B */
    int *of;          /* p: band of each column */
    int64_t *size;    /* B: columns per band */
};

static void bands_free(struct bands *bd)
{
    for (int64_t b = 0; bd->name && b < bd->B; b++)
        free(bd->name[b]);
    free(bd->name);
    free(bd->of);
    free(bd->size);
}

static char *trimmed(const char *s, size_t len)
{
    while (len && (*s == ' ' || *s == '\t')) {
        s++;
        len--;
    }
    while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    char *t = nf_malloc(len + 1);
    if (t) {
        memcpy(t, s, len);
        t[len] = '\0';
    }
    return t;
}

/* "i" or "i:j" (0-based, j excluded) as [*lo, *hi). */
static bool parse_range(const char *s, int64_t *lo, int64_t *hi)
{
    char *end;
    long long a = strtoll(s, &end, 10);
    if (end == s || a < 0)
        return false;
    if (*end == '\0') {
        *lo = a;
        *hi = a + 1;
        return true;
    }
    if (*end != ':')
        return false;
    const char *t = end + 1;
    long long b = strtoll(t, &end, 10);
    if (end == t || *end != '\0' || b <= a)
        return false;
    *lo = a;
    *hi = b;
    return true;
}

static const char *col_name(const struct nf_matrix *X, int64_t j, char *buf, size_t size)
{
    if (X->col_names && X->col_names[j])
        return X->col_names[j];
    snprintf(buf, size, "c%lld", (long long)j);
    return buf;
}

/* Put column j in band b; a column in two bands is an error. */
static int assign_column(const struct nf_run *run, const struct nf_matrix *X, struct bands *bd, int64_t j,
                         int64_t b)
{
    char buf[32];
    if (bd->of[j] >= 0 && bd->of[j] != b)
        return NF_FAIL_AT(run->err, NF_EINVAL, nf_node_loc(run->node), nf_node_id(run->node),
                          "column '%s' of X is in band '%s' and in band '%s': bands must not overlap",
                          col_name(X, j, buf, sizeof buf), bd->name[bd->of[j]], bd->name[b]);
    if (bd->of[j] < 0)
        bd->size[b]++;
    bd->of[j] = (int)b;
    return 0;
}

/* One item of band b: an exact column name, a prefix*, or a range i:j. */
static int assign_item(const struct nf_run *run, const struct nf_matrix *X, struct bands *bd, int64_t b,
                       const char *item)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    int64_t p = X->cols, lo, hi;
    size_t len = strlen(item);
    int rc;
    for (int64_t j = 0; X->col_names && j < p; j++)
        if (X->col_names[j] && strcmp(X->col_names[j], item) == 0)
            return assign_column(run, X, bd, j, b);
    if (len > 1 && item[len - 1] == '*') {
        bool any = false;
        for (int64_t j = 0; X->col_names && j < p; j++)
            if (X->col_names[j] && strncmp(X->col_names[j], item, len - 1) == 0) {
                NF_TRY(rc = assign_column(run, X, bd, j, b));
                any = true;
            }
        if (!any)
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "band '%s': no column of X starts with '%.*s'%s",
                              bd->name[b], (int)(len - 1), item, X->col_names ? "" : " (X has no column names)");
        return 0;
    }
    if (parse_range(item, &lo, &hi)) {
        if (hi > p)
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "band '%s': columns %s are past X's %lld columns",
                              bd->name[b], item, (long long)p);
        for (int64_t j = lo; j < hi; j++)
            NF_TRY(rc = assign_column(run, X, bd, j, b));
        return 0;
    }
    return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "band '%s': X has no column '%s'%s", bd->name[b], item,
                      X->col_names ? "" : " (X has no column names: give 0-based ranges i:j)");
fail:
    return rc;
}

/* The bands of the parameters over the columns of X. */
static int parse_bands(const struct nf_run *run, const struct nf_matrix *X, struct bands *bd)
{
    const struct ridge_params *prm = run->params;
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    int64_t p = X->cols;
    int rc = 0;
    bd->B = (int64_t)prm->bands.n;
    bd->name = nf_calloc((size_t)bd->B, sizeof *bd->name);
    bd->of = nf_malloc((size_t)(p ? p : 1) * sizeof *bd->of);
    bd->size = nf_calloc((size_t)bd->B, sizeof *bd->size);
    if (!bd->name || !bd->of || !bd->size)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t j = 0; j < p; j++)
        bd->of[j] = -1;
    for (int64_t b = 0; b < bd->B; b++) {
        const char *entry = prm->bands.v[b], *eq = strchr(entry, '=');
        if (!eq)
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "band %lld ('%s') must be \"name = item, item\"",
                              (long long)b + 1, entry);
        if (!(bd->name[b] = trimmed(entry, (size_t)(eq - entry))))
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        for (int64_t c = 0; c < b; c++)
            if (strcmp(bd->name[c], bd->name[b]) == 0)
                return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "band '%s' is given twice", bd->name[b]);
        for (const char *s = eq + 1; *s;) {
            const char *comma = strchr(s, ',');
            size_t len = comma ? (size_t)(comma - s) : strlen(s);
            char *item = trimmed(s, len);
            if (!item)
                return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            rc = item[0] ? assign_item(run, X, bd, b, item) : 0;
            free(item);
            if (rc < 0)
                return rc;
            s += len + (comma ? 1 : 0);
        }
        if (bd->size[b] == 0)
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "band '%s' is empty: give its columns", bd->name[b]);
    }
    for (int64_t j = 0; j < p; j++)
        if (bd->of[j] < 0) {
            char buf[32];
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id,
                              "column '%s' of X is in no band: every column must be in exactly one",
                              col_name(X, j, buf, sizeof buf));
        }
    return 0;
}

/* ---- candidates ---- */

/* Gamma(a, 1) by Marsaglia and Tsang (a < 1 through Gamma(a + 1) U^(1/a)). */
static double gamma_variate(uint64_t *st, double a)
{
    if (a < 1) {
        double u = nf_rand_uniform(st);
        return gamma_variate(st, a + 1) * pow(u, 1.0 / a);
    }
    double d = a - 1.0 / 3, c = 1 / sqrt(9 * d);
    for (;;) {
        double x, v;
        do {
            x = nf_rand_normal(st);
            v = 1 + c * x;
        } while (v <= 0);
        v = v * v * v;
        double u = nf_rand_uniform(st);
        if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1 - v + log(v)))
            return d * v;
    }
}

/* The grid points with the first `at` weights set and `left` steps to give. */
static void grid_points(int64_t B, int64_t steps, int64_t at, int64_t left, int64_t *w, double *out, int64_t *n)
{
    if (at == B - 1) {
        w[at] = left;
        bool uniform = true;
        for (int64_t b = 0; b < B; b++)
            uniform = uniform && w[b] * B == steps;
        if (uniform)
            return;   /* already the first candidate */
        for (int64_t b = 0; b < B; b++)
            out[*n * B + b] = (double)w[b] / (double)steps;
        (*n)++;
        return;
    }
    for (int64_t s = left; s >= 0; s--) {
        w[at] = s;
        grid_points(B, steps, at + 1, left - s, w, out, n);
    }
}

int nf_ridge_band_candidates(const struct ridge_params *prm, int64_t B, uint32_t seed, double **out,
                             int64_t *n_out, struct nf_error *err)
{
    int64_t C = nf_ridge_band_candidate_count(prm, B);
    double *g = nf_malloc((size_t)(C * B + 1) * sizeof *g);
    int64_t *w = nf_malloc((size_t)B * sizeof *w);
    if (!g || !w) {
        free(g);
        free(w);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    if (prm->gammas.n) {
        memcpy(g, prm->gammas.v, (size_t)(C * B) * sizeof *g);
        for (int64_t c = 0; c < C; c++) {
            double sum = 0;
            for (int64_t b = 0; b < B; b++)
                sum += g[c * B + b];
            if (!(sum > 0)) {
                free(g);
                free(w);
                return NF_FAIL(err, NF_EINVAL, "gammas row %lld has no positive weight", (long long)c + 1);
            }
        }
    } else {
        for (int64_t b = 0; b < B; b++)
            g[b] = 1.0 / (double)B;   /* himalaya's gammas[0] = 1 / n_kernels */
        if (prm->candidates == RIDGE_CANDIDATES_GRID) {
            int64_t n = 1;
            grid_points(B, prm->grid_steps, 0, prm->grid_steps, w, g, &n);
        } else {
            /* Dirichlet samples cycling through the concentrations, as
             * himalaya's generate_dirichlet_samples interleaves them */
            uint64_t st = seed;
            for (int64_t c = 1; c < C; c++) {
                double a = prm->concentration.v[c % (int64_t)prm->concentration.n], sum = 0;
                while (!(sum > 0)) {
                    sum = 0;
                    for (int64_t b = 0; b < B; b++)
                        sum += g[c * B + b] = isinf(a) ? 1.0 : gamma_variate(&st, a);
                }
                for (int64_t b = 0; b < B; b++)
                    g[c * B + b] /= sum;
            }
        }
    }
    free(w);
    *out = g;
    *n_out = C;
    return 0;
}

/* ---- the cross-validation ---- */

struct bfold {
    int64_t v0, v1, n_tr, n_val, r, m;
    double *x_mean;   /* p: training means (fit_intercept) */
    float *Us;        /* n_tr x r: U diag(s) */
    double *us_sum;   /* r */
    float *P;         /* n_val x r: Z_val V */
    double *p_sum;    /* r */
    float *L;         /* (A m) x r: R diag(w_a) stacked over alphas */
    float *W;         /* A x r: w_a */
};

struct bctx {
    const struct ridge_params *prm;
    const struct nf_kernels *K;
    const float *X, *Y, *X_orig;   /* X in fold order; X_orig in Y's */
    int64_t n, p, V, k, A, B, C, block, n_blocks;
    const double *alphas;
    const double *gam;             /* C x B */
    const int *band_of;            /* p */
    bool center;
    int64_t *perm, *fold_size;
    float *X_perm;
    struct bfold *folds;
    int64_t cand;                  /* the candidate being scored */
    /* per voxel, across candidates */
    float *best_score;
    int32_t *best_c, *best_a;
    float *cv_scores;              /* C x V, or NULL */
    double *x_mean, *y_mean;       /* global (refit) */
    /* checkpoints: NULL without a cache, or when the model is fit once */
    struct nf_checkpoint *ckpt;
    pthread_mutex_t ckpt_lock;     /* refit groups commit from the pool's threads */
    bool *refit_done;              /* C: weights resumed from checkpoints */
    double t_start, ckpt_seconds;  /* when the node began; its commits took (ckpt_lock) */
    int64_t refit_commits;         /* (ckpt_lock) */
};

static void bfold_release(struct bfold *f)
{
    free(f->Us);
    free(f->us_sum);
    free(f->P);
    free(f->p_sum);
    free(f->L);
    free(f->W);
    f->Us = f->P = f->L = f->W = NULL;
    f->us_sum = f->p_sum = NULL;
}

/* Rows [r0, r1) of X (or outside them), minus mean, times √γ of the column's band. */
static void scaled_rows(const struct bctx *c, const float *X, int64_t skip0, int64_t skip1, bool inside,
                        const double *mean, const double *gam, float *out)
{
    int64_t o = 0;
    for (int64_t i = 0; i < c->n; i++) {
        if ((i >= skip0 && i < skip1) != inside)
            continue;
        for (int64_t j = 0; j < c->p; j++)
            out[o * c->p + j] = (float)((X[i * c->p + j] - (mean ? mean[j] : 0.0)) * sqrt(gam[c->band_of[j]]));
        o++;
    }
}

static int svd_or_fail(const struct bctx *c, const float *A, int64_t rows, int64_t cols, float *U, float *s,
                       float *Vt, struct nf_error *err)
{
    int rc = c->K->svd(A, rows, cols, U, s, Vt);
    if (rc < 0)
        return NF_FAIL(err, rc == NF_ENOMEM ? NF_ENOMEM : NF_EDATA, "the SVD of a %lld x %lld scaled design %s",
                       (long long)rows, (long long)cols, rc == NF_ENOMEM ? "ran out of memory" : "did not converge");
    return 0;
}

/* Fold f's factors for candidate c->cand. */
static int fold_factor(const struct bctx *c, struct bfold *fd, struct nf_error *err)
{
    const double *gam = c->gam + c->cand * c->B;
    int64_t p = c->p, ntr = fd->n_tr, nval = fd->n_val, r = ntr < p ? ntr : p;
    const double *mean = c->center ? fd->x_mean : NULL;
    float *Ztr = nf_malloc((size_t)(ntr * p) * sizeof *Ztr), *Zval = nf_malloc((size_t)(nval * p) * sizeof *Zval);
    float *U = nf_malloc((size_t)(ntr * r) * sizeof *U), *s = nf_malloc((size_t)r * sizeof *s);
    float *Vt = nf_malloc((size_t)(r * p) * sizeof *Vt);
    float *Up = NULL, *sp = NULL, *Vpt = NULL;
    int rc = 0;
    bfold_release(fd);
    fd->r = r;
    fd->m = nval < r ? nval : r;
    fd->Us = U;
    fd->us_sum = nf_calloc((size_t)r, sizeof *fd->us_sum);
    fd->P = nf_malloc((size_t)(nval * r) * sizeof *fd->P);
    fd->p_sum = nf_calloc((size_t)r, sizeof *fd->p_sum);
    fd->L = nf_malloc((size_t)(c->A * fd->m * r) * sizeof *fd->L);
    fd->W = nf_malloc((size_t)(c->A * r) * sizeof *fd->W);
    if (!Ztr || !Zval || !U || !s || !Vt || !fd->us_sum || !fd->P || !fd->p_sum || !fd->L || !fd->W) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the factors of a fold");
        goto fail;
    }
    scaled_rows(c, c->X, fd->v0, fd->v1, false, mean, gam, Ztr);
    scaled_rows(c, c->X, fd->v0, fd->v1, true, mean, gam, Zval);
    NF_TRY(rc = svd_or_fail(c, Ztr, ntr, p, U, s, Vt, err));
    for (int64_t i = 0; i < ntr; i++)
        for (int64_t j = 0; j < r; j++) {
            U[i * r + j] *= s[j];
            fd->us_sum[j] += U[i * r + j];
        }
    c->K->sgemm(false, true, nval, r, p, 1.0f, Zval, p, Vt, p, 0.0f, fd->P, r);
    for (int64_t i = 0; i < nval; i++)
        for (int64_t j = 0; j < r; j++)
            fd->p_sum[j] += fd->P[i * r + j];
    /* R with RᵀR = PᵀP: P itself, or diag(s_P) V_Pᵀ when P has more rows than columns */
    const float *R = fd->P;
    if (nval > r) {
        Up = nf_malloc((size_t)(nval * r) * sizeof *Up);
        sp = nf_malloc((size_t)r * sizeof *sp);
        Vpt = nf_malloc((size_t)(r * r) * sizeof *Vpt);
        if (!Up || !sp || !Vpt) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the factors of a fold");
            goto fail;
        }
        NF_TRY(rc = svd_or_fail(c, fd->P, nval, r, Up, sp, Vpt, err));
        for (int64_t i = 0; i < r; i++)
            for (int64_t j = 0; j < r; j++)
                Vpt[i * r + j] *= sp[i];
        R = Vpt;
    }
    for (int64_t a = 0; a < c->A; a++) {
        for (int64_t j = 0; j < r; j++)
            fd->W[a * r + j] = (float)(1.0 / ((double)s[j] * s[j] + c->alphas[a]));
        for (int64_t i = 0; i < fd->m; i++)
            for (int64_t j = 0; j < r; j++)
                fd->L[(a * fd->m + i) * r + j] = R[i * r + j] * fd->W[a * r + j];
    }
fail:
    free(Ztr);
    free(Zval);
    free(s);
    free(Vt);
    free(Up);
    free(sp);
    free(Vpt);
    return rc;
}

/* Per-thread scratch of a voxel block. */
struct bblock {
    int64_t b0, nb;
    const float *Y;
    int64_t ldy;
    float *Ybuf;      /* n x nb (shuffled folds) */
    float *u, *z;     /* r x nb */
    float *h;         /* r x nb: u z */
    float *Q;         /* (ALPHA_GROUP m) x SUB_VOXELS */
    float *cross;     /* A x nb */
    double *ymean, *yy, *sy, *quad;   /* nb; quad A x nb */
    double *acc;      /* A x nb: scores summed over folds */
};

static int bblock_alloc(const struct bctx *c, struct bblock *b, struct nf_error *err)
{
    int64_t nb = c->block, rmax = 0, mmax = 0;
    for (int64_t f = 0; f < c->k; f++) {
        int64_t r = c->n - c->fold_size[f] < c->p ? c->n - c->fold_size[f] : c->p;
        rmax = r > rmax ? r : rmax;
        mmax = (c->fold_size[f] < r ? c->fold_size[f] : r) > mmax ? (c->fold_size[f] < r ? c->fold_size[f] : r) : mmax;
    }
    b->Ybuf = c->perm ? nf_malloc((size_t)(c->n * nb) * sizeof *b->Ybuf) : NULL;
    b->u = nf_malloc((size_t)(rmax * nb) * sizeof *b->u);
    b->z = nf_malloc((size_t)(rmax * nb) * sizeof *b->z);
    b->h = nf_malloc((size_t)(rmax * nb) * sizeof *b->h);
    b->Q = nf_malloc((size_t)(ALPHA_GROUP * mmax * SUB_VOXELS) * sizeof *b->Q);
    b->cross = nf_malloc((size_t)(c->A * nb) * sizeof *b->cross);
    b->ymean = nf_malloc((size_t)(3 * nb) * sizeof *b->ymean);
    b->quad = nf_malloc((size_t)(c->A * nb) * sizeof *b->quad);
    b->acc = nf_malloc((size_t)(c->A * nb) * sizeof *b->acc);
    if ((c->perm && !b->Ybuf) || !b->u || !b->z || !b->h || !b->Q || !b->cross || !b->ymean || !b->quad || !b->acc)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for a block of %lld voxels", (long long)nb);
    b->yy = b->ymean + nb;
    b->sy = b->yy + nb;
    return 0;
}

static void bblock_free(struct bblock *b)
{
    free(b->Ybuf);
    free(b->u);
    free(b->z);
    free(b->h);
    free(b->Q);
    free(b->cross);
    free(b->ymean);
    free(b->quad);
    free(b->acc);
}

static void bblock_rows(const struct bctx *c, struct bblock *b)
{
    b->Y = nf_ridge_block_rows(c->Y, c->n, c->V, c->perm, b->b0, b->nb, b->Ybuf, &b->ldy);
}

/* Add fold fd's score of every alpha for the block's voxels to b->acc. */
static void fold_scores(const struct bctx *c, const struct bfold *fd, struct bblock *b)
{
    int64_t nb = b->nb, ld = b->ldy, r = fd->r, m = fd->m, A = c->A;
    const float *Y = b->Y;
    /* the training centre of every voxel */
    memset(b->ymean, 0, (size_t)(3 * c->block) * sizeof *b->ymean);   /* yy and sy sit block apart */
    if (c->center) {
        for (int64_t i = 0; i < c->n; i++) {
            if (i >= fd->v0 && i < fd->v1)
                continue;
            for (int64_t v = 0; v < nb; v++)
                b->ymean[v] += Y[i * ld + v];
        }
        for (int64_t v = 0; v < nb; v++)
            b->ymean[v] /= (double)fd->n_tr;
    }
    /* u = (U S)ᵀ (y_tr - m): the training rows are the two ranges around the fold */
    if (fd->v0 > 0)
        c->K->sgemm(true, false, r, nb, fd->v0, 1.0f, fd->Us, r, Y, ld, 0.0f, b->u, nb);
    else
        memset(b->u, 0, (size_t)(r * nb) * sizeof *b->u);
    if (fd->v1 < c->n)
        c->K->sgemm(true, false, r, nb, c->n - fd->v1, 1.0f, fd->Us + fd->v0 * r, r, Y + fd->v1 * ld, ld, 1.0f,
                    b->u, nb);
    c->K->sgemm(true, false, r, nb, fd->n_val, 1.0f, fd->P, r, Y + fd->v0 * ld, ld, 0.0f, b->z, nb);
    for (int64_t j = 0; j < r && c->center; j++)
        for (int64_t v = 0; v < nb; v++) {
            b->u[j * nb + v] -= (float)(fd->us_sum[j] * b->ymean[v]);
            b->z[j * nb + v] -= (float)(fd->p_sum[j] * b->ymean[v]);
        }
    for (int64_t i = 0; i < fd->n_val; i++) {
        const float *y = Y + (fd->v0 + i) * ld;
        for (int64_t v = 0; v < nb; v++) {
            double yv = y[v] - b->ymean[v];
            b->sy[v] += yv;
            b->yy[v] += yv * yv;
        }
    }
    /* cross terms: Σ_j w_aj u_j z_j, one A x r GEMM */
    for (int64_t j = 0; j < r * nb; j++)
        b->h[j] = b->u[j] * b->z[j];
    c->K->sgemm(false, false, A, nb, r, 1.0f, fd->W, r, b->h, nb, 0.0f, b->cross, nb);
    /* quadratic terms: ||R diag(w_a) u||², a few alphas and voxels at a time (in cache) */
    memset(b->quad, 0, (size_t)(A * nb) * sizeof *b->quad);
    for (int64_t a0 = 0; a0 < A; a0 += ALPHA_GROUP) {
        int64_t ag = A - a0 < ALPHA_GROUP ? A - a0 : ALPHA_GROUP;
        for (int64_t s0 = 0; s0 < nb; s0 += SUB_VOXELS) {
            int64_t ns = nb - s0 < SUB_VOXELS ? nb - s0 : SUB_VOXELS;
            c->K->sgemm(false, false, ag * m, ns, r, 1.0f, fd->L + a0 * m * r, r, b->u + s0, nb, 0.0f, b->Q, ns);
            for (int64_t a = 0; a < ag; a++) {
                double *q = b->quad + (a0 + a) * nb + s0;
                for (int64_t i = 0; i < m; i++) {
                    const float *row = b->Q + (a * m + i) * ns;
                    for (int64_t v = 0; v < ns; v++)
                        q[v] += (double)row[v] * row[v];
                }
            }
        }
    }
    double nv = (double)fd->n_val;
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nb; v++) {
            double sse = b->yy[v] - 2.0 * b->cross[a * nb + v] + b->quad[a * nb + v];
            if (sse < 0)
                sse = 0;
            double score;
            if (c->prm->score == RIDGE_L2_NEG_LOSS) {
                score = -sse / nv;
            } else {
                /* himalaya's r2_score: 0 where the validation data are constant */
                double var = b->yy[v] - b->sy[v] * b->sy[v] / nv;
                score = var > 1e-12 * b->yy[v] && var > 0 ? 1.0 - sse / var : 0.0;
            }
            b->acc[a * nb + v] += score;
        }
}

/* Every fold for the block, then each voxel's best alpha for this candidate
 * and whether the candidate beats the voxel's best so far. */
static void block_candidate(struct bctx *c, struct bblock *b)
{
    bblock_rows(c, b);
    memset(b->acc, 0, (size_t)(c->A * b->nb) * sizeof *b->acc);
    for (int64_t f = 0; f < c->k; f++)
        fold_scores(c, &c->folds[f], b);
    for (int64_t v = 0; v < b->nb; v++) {
        int64_t pick = 0;
        double pick_score = 0;
        for (int64_t a = 0; a < c->A; a++) {
            /* himalaya: mean over splits, plus a 1e-10 log(alpha) slope for ties */
            double s = b->acc[a * b->nb + v] / (double)c->k + log(c->alphas[a]) * 1e-10;
            if (a == 0 || s > pick_score) {
                pick = a;
                pick_score = s;
            }
        }
        int64_t vox = b->b0 + v;
        if (c->cv_scores)
            c->cv_scores[c->cand * c->V + vox] = (float)pick_score;
        if (c->cand == 0 || pick_score > (double)c->best_score[vox] + CANDIDATE_EPS) {
            c->best_score[vox] = (float)pick_score;
            c->best_c[vox] = (int32_t)c->cand;
            c->best_a[vox] = (int32_t)pick;
        }
    }
}

/* ---- tasks over threads ---- */

struct pool {
    struct bctx *c;
    int kind;   /* POOL_FOLDS, POOL_BLOCKS, POOL_REFIT, POOL_SPLIT */
    int64_t n_tasks;
    _Atomic int64_t next;
    _Atomic int failed;
    pthread_mutex_t lock;
    struct nf_error err;
    const struct nf_run *run;
    void *arg;
};
enum { POOL_FOLDS, POOL_BLOCKS, POOL_REFIT, POOL_SPLIT };

static int refit_candidate(struct bctx *c, int64_t cand, struct nf_value **out, struct nf_error *err);
static int split_block(struct bctx *c, int64_t i, struct nf_value **out, struct nf_error *err);

static void *pool_worker(void *arg)
{
    struct pool *w = arg;
    struct bctx *c = w->c;
    struct bblock b = { 0 };
    struct nf_error err = { 0 };
    if (w->kind == POOL_BLOCKS)
        bblock_alloc(c, &b, &err);
    for (int64_t i; !err.code && !atomic_load(&w->failed) && (i = atomic_fetch_add(&w->next, 1)) < w->n_tasks;) {
        if (nf_run_interrupted(w->run)) {
            NF_FAIL(&err, NF_EINTR, "interrupted");
            break;
        }
        if (w->kind == POOL_FOLDS) {
            fold_factor(c, &c->folds[i], &err);
        } else if (w->kind == POOL_BLOCKS) {
            b.b0 = i * c->block;
            b.nb = c->V - b.b0 < c->block ? c->V - b.b0 : c->block;
            block_candidate(c, &b);
        } else if (w->kind == POOL_REFIT) {
            refit_candidate(c, i, w->arg, &err);
        } else {
            split_block(c, i, w->arg, &err);
        }
    }
    if (err.code && atomic_exchange(&w->failed, 1) == 0) {
        pthread_mutex_lock(&w->lock);
        w->err = err;
        pthread_mutex_unlock(&w->lock);
    }
    bblock_free(&b);
    return NULL;
}

static int run_pool(struct bctx *c, int kind, int64_t n_tasks, void *arg, const struct nf_run *run)
{
    struct pool w = { .c = c, .kind = kind, .n_tasks = n_tasks, .run = run, .arg = arg };
    int threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    if (threads > n_tasks)
        threads = (int)(n_tasks > 0 ? n_tasks : 1);
    pthread_t tids[64];
    int started = 0;
    pthread_mutex_init(&w.lock, NULL);
    for (int t = 0; t < threads - 1 && t < 64; t++)
        if (pthread_create(&tids[t], NULL, pool_worker, &w) == 0)
            started++;
    pool_worker(&w);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&w.lock);
    if (atomic_load(&w.failed)) {
        *run->err = w.err;
        return w.err.code ? w.err.code : NF_EBUG;
    }
    return 0;
}

/* ---- checkpoints (layout: ridge_internal.h) ----
 * The candidates run in order and each changes the per-voxel state, so the
 * state after the first `done` candidates is one chunk, replaced at every
 * commit (the cache keeps one copy, not one per commit); the cv_scores rows
 * of the candidates since the last commit go first in a chunk of their own,
 * so that a state chunk always has its rows behind it. A commit waits until
 * the candidates computed since the last one took CKPT_COST_RATIO times what
 * that commit took (the first comes after candidate 0): about 1% of the
 * node's time whatever the machine, and a killed run loses about that share
 * of the candidates' work since the last commit. An interrupt commits what
 * is done before stopping. The refit commits a candidate's group of voxels
 * (its weights) as it finishes, the first always, the others while all
 * commits so far took less than 1/CKPT_COST_RATIO of the node's time: a
 * group's weights cost about a sixth of its refit to store, so only a share
 * of the groups is kept where the refit is short next to the candidates
 * (a run killed in the refit redoes at most the refit). Chunk boundaries depend on timing,
 * the state after a candidate does not: a run resumed from any chunk, on any
 * number of threads, ends with the same bits. */
#define CKPT_COST_RATIO 100

static void commit_candidates(struct bctx *c, int64_t c0, int64_t c1)
{
    int64_t V = c->V;
    struct nf_error e = { 0 };
    if (c->cv_scores && c1 > c0) {
        struct nf_ridge_band_rows rh = { V, c0, c1 };
        size_t bytes = sizeof rh + (size_t)((c1 - c0) * V) * sizeof(float);
        unsigned char *buf = nf_malloc(bytes);
        if (!buf)
            return;   /* not saved: a resumed run computes these candidates again */
        memcpy(buf, &rh, sizeof rh);
        memcpy(buf + sizeof rh, c->cv_scores + c0 * V, bytes - sizeof rh);
        nf_ckpt_put(c->ckpt, 1 + c0, buf, bytes, &e);
        free(buf);
    }
    struct nf_ridge_band_state sh = { V, c->C, c1 };
    size_t bytes = sizeof sh + (size_t)V * (sizeof *c->best_score + sizeof *c->best_c + sizeof *c->best_a);
    unsigned char *buf = nf_malloc(bytes), *at = buf;
    if (!buf)
        return;
    memcpy(at, &sh, sizeof sh);
    memcpy(at += sizeof sh, c->best_score, (size_t)V * sizeof *c->best_score);
    memcpy(at += (size_t)V * sizeof *c->best_score, c->best_c, (size_t)V * sizeof *c->best_c);
    memcpy(at + (size_t)V * sizeof *c->best_c, c->best_a, (size_t)V * sizeof *c->best_a);
    nf_ckpt_put(c->ckpt, NF_RIDGE_BAND_CKPT_STATE, buf, bytes, &e);
    free(buf);
}

/* The cv_scores rows of candidates [0, done) from their chunks; false when
 * one is missing or does not fit (then the state is not used). */
static bool resume_rows(struct bctx *c, int64_t done)
{
    for (int64_t c0 = 0; c0 < done;) {
        void *data = NULL;
        size_t bytes = 0;
        struct nf_error e = { 0 };
        struct nf_ridge_band_rows rh;
        if (nf_ckpt_get(c->ckpt, 1 + c0, &data, &bytes, &e) != 1)
            return false;
        bool fits = bytes >= sizeof rh;
        if (fits) {
            memcpy(&rh, data, sizeof rh);
            fits = rh.V == c->V && rh.c0 == c0 && rh.c1 > c0 && rh.c1 <= done &&
                   bytes == sizeof rh + (size_t)((rh.c1 - c0) * c->V) * sizeof(float);
        }
        if (fits)
            memcpy(c->cv_scores + c0 * c->V, (unsigned char *)data + sizeof rh, bytes - sizeof rh);
        free(data);
        if (!fits)
            return false;
        c0 = rh.c1;
    }
    return true;
}

/* The state after the candidates an earlier run committed: how many (0: none). */
static int64_t resume_candidates(struct bctx *c, const struct nf_run *run)
{
    int64_t V = c->V, done = 0;
    void *data = NULL;
    size_t bytes = 0;
    struct nf_error e = { 0 };
    struct nf_ridge_band_state sh;
    size_t want = sizeof sh + (size_t)V * (sizeof *c->best_score + sizeof *c->best_c + sizeof *c->best_a);
    if (nf_ckpt_get(c->ckpt, NF_RIDGE_BAND_CKPT_STATE, &data, &bytes, &e) != 1)
        return 0;
    if (bytes == want) {
        memcpy(&sh, data, sizeof sh);
        const unsigned char *at = (const unsigned char *)data + sizeof sh;
        const int32_t *bc = (const int32_t *)(at + (size_t)V * sizeof *c->best_score), *ba = bc + V;
        bool fits = sh.V == V && sh.C == c->C && sh.done > 0 && sh.done <= c->C;
        for (int64_t v = 0; fits && v < V; v++)
            fits = bc[v] >= 0 && bc[v] < sh.done && ba[v] >= 0 && ba[v] < c->A;
        if (fits && (!c->cv_scores || resume_rows(c, sh.done))) {
            memcpy(c->best_score, at, (size_t)V * sizeof *c->best_score);
            memcpy(c->best_c, bc, (size_t)V * sizeof *c->best_c);
            memcpy(c->best_a, ba, (size_t)V * sizeof *c->best_a);
            done = sh.done;
        }
    }
    free(data);
    if (done)
        nf_log("nlflow: node '%s': resumed %lld of %lld candidates from checkpoints", nf_node_id(run->node),
               (long long)done, (long long)c->C);
    return done;
}

/* Refit groups an earlier run committed: their weights, refit_done[] set. */
static void resume_refit(struct bctx *c, struct nf_value **out, const struct nf_run *run)
{
    int64_t V = c->V, p = c->p, groups = 0, resumed = 0;
    int64_t *nv = nf_calloc((size_t)c->C, sizeof *nv);
    if (!nv)
        return;   /* nothing resumed: every group is refit */
    for (int64_t v = 0; v < V; v++)
        nv[c->best_c[v]]++;
    float *wout = out[RIDGE_OUT_WEIGHTS]->u.mat.data;
    for (int64_t cand = 0; cand < c->C; cand++) {
        void *data = NULL;
        size_t bytes = 0;
        struct nf_error e = { 0 };
        struct nf_ridge_band_refit rh;
        groups += nv[cand] > 0;
        if (!nv[cand] || nf_ckpt_get(c->ckpt, 1 + c->C + cand, &data, &bytes, &e) != 1)
            continue;
        if (bytes == sizeof rh + (size_t)(p * nv[cand]) * sizeof(float)) {
            memcpy(&rh, data, sizeof rh);
            if (rh.cand == cand && rh.nv == nv[cand] && rh.p == p) {
                const float *w = (const float *)((const unsigned char *)data + sizeof rh);
                for (int64_t v = 0, t = 0; v < V; v++)
                    if (c->best_c[v] == cand) {
                        for (int64_t j = 0; j < p; j++)
                            wout[j * V + v] = w[j * nv[cand] + t];
                        t++;
                    }
                c->refit_done[cand] = true;
                resumed++;
            }
        }
        free(data);
    }
    if (resumed)
        nf_log("nlflow: node '%s': resumed %lld of %lld refit groups from checkpoints", nf_node_id(run->node),
               (long long)resumed, (long long)groups);
    free(nv);
}

/* ---- refit and split R² ---- */

/* Weights of the voxels whose best candidate is cand: one SVD of the whole
 * scaled design, W = diag(√γ) V diag(s / (s² + α_v)) Uᵀ (y - mean). */
static int refit_candidate(struct bctx *c, int64_t cand, struct nf_value **out, struct nf_error *err)
{
    int64_t n = c->n, p = c->p, r = n < p ? n : p, V = c->V, nv = 0, done = 0;
    const double *gam = c->gam + cand * c->B;
    for (int64_t v = 0; v < V; v++)
        nv += c->best_c[v] == cand;
    if (!nv || (c->refit_done && c->refit_done[cand]))
        return 0;
    /* the group's weights as its checkpoint chunk holds them (p x nv) */
    struct nf_ridge_band_refit head = { cand, nv, p };
    unsigned char *saved = c->ckpt ? nf_malloc(sizeof head + (size_t)(p * nv) * sizeof(float)) : NULL;
    float *kept = saved ? (float *)(saved + sizeof head) : NULL;
    int64_t chunk = nv < BLOCK_VOXELS ? nv : BLOCK_VOXELS;
    float *Z = nf_malloc((size_t)(n * p) * sizeof *Z), *U = nf_malloc((size_t)(n * r) * sizeof *U);
    float *s = nf_malloc((size_t)r * sizeof *s), *Vt = nf_malloc((size_t)(r * p) * sizeof *Vt);
    float *Yc = nf_malloc((size_t)(n * chunk) * sizeof *Yc), *T = nf_malloc((size_t)(r * chunk) * sizeof *T);
    float *Wc = nf_malloc((size_t)(p * chunk) * sizeof *Wc);
    int64_t *vox = nf_malloc((size_t)chunk * sizeof *vox);
    int rc = 0;
    if (!Z || !U || !s || !Vt || !Yc || !T || !Wc || !vox) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the refit");
        goto fail;
    }
    scaled_rows(c, c->X_orig, 0, 0, false, c->center ? c->x_mean : NULL, gam, Z);
    NF_TRY(rc = svd_or_fail(c, Z, n, p, U, s, Vt, err));
    float *wout = out[RIDGE_OUT_WEIGHTS]->u.mat.data;
    for (int64_t v0 = 0; v0 < V;) {
        int64_t m = 0;
        for (; v0 < V && m < chunk; v0++)
            if (c->best_c[v0] == cand)
                vox[m++] = v0;
        if (!m)
            break;
        for (int64_t i = 0; i < n; i++)
            for (int64_t t = 0; t < m; t++)
                Yc[i * m + t] = (float)(c->Y[i * V + vox[t]] - (c->center ? c->y_mean[vox[t]] : 0.0));
        c->K->sgemm(true, false, r, m, n, 1.0f, U, r, Yc, m, 0.0f, T, m);
        for (int64_t j = 0; j < r; j++)
            for (int64_t t = 0; t < m; t++) {
                double sj = s[j];
                T[j * m + t] = (float)(T[j * m + t] * (sj / (sj * sj + c->alphas[c->best_a[vox[t]]])));
            }
        c->K->sgemm(true, false, p, m, r, 1.0f, Vt, p, T, m, 0.0f, Wc, m);
        for (int64_t j = 0; j < p; j++) {
            float g = (float)sqrt(gam[c->band_of[j]]);
            for (int64_t t = 0; t < m; t++)
                wout[j * V + vox[t]] = Wc[j * m + t] * g;
            for (int64_t t = 0; kept && t < m; t++)
                kept[j * nv + done + t] = wout[j * V + vox[t]];
        }
        done += m;
    }
    if (saved) {   /* NULL (out of memory): not saved, a resumed run refits this group again */
        memcpy(saved, &head, sizeof head);
        struct nf_error e = { 0 };
        pthread_mutex_lock(&c->ckpt_lock);
        double t0 = nf_now();
        if (!c->refit_commits || c->ckpt_seconds * CKPT_COST_RATIO <= t0 - c->t_start) {   /* within the budget */
            nf_ckpt_put(c->ckpt, 1 + c->C + cand, saved, sizeof head + (size_t)(p * nv) * sizeof(float), &e);
            c->ckpt_seconds += nf_now() - t0;
            c->refit_commits++;
        }
        pthread_mutex_unlock(&c->ckpt_lock);
    }
fail:
    free(saved);
    free(Z);
    free(U);
    free(s);
    free(Vt);
    free(Yc);
    free(T);
    free(Wc);
    free(vox);
    return rc;
}

/* himalaya's r2_score_split of the refit on the training data for block i:
 * r2_b = Σ_i (2 y ŷ_b - ŷ_b Σ_c ŷ_c) / Σ_i y², ŷ_b = X_b W_b (centred X and y
 * with fit_intercept, where himalaya has no split). */
static int split_block(struct bctx *c, int64_t i, struct nf_value **out, struct nf_error *err)
{
    int64_t n = c->n, p = c->p, V = c->V, B = c->B, b0 = i * c->block;
    int64_t nb = V - b0 < c->block ? V - b0 : c->block;
    float *Xc = nf_malloc((size_t)(n * p) * sizeof *Xc), *Wb = nf_malloc((size_t)(p * nb) * sizeof *Wb);
    float *pred = nf_malloc((size_t)(B * n * nb) * sizeof *pred);
    double *sst = nf_calloc((size_t)nb, sizeof *sst);
    int rc = 0;
    if (!Xc || !Wb || !pred || !sst) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the split R²");
        goto fail;
    }
    const float *W = out[RIDGE_OUT_WEIGHTS]->u.mat.data;
    float *r2 = out[RIDGE_OUT_SPLIT_R2]->u.mat.data;
    /* each band's prediction: X with the other bands' columns zeroed, times W */
    for (int64_t b = 0; b < B; b++) {
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < p; j++)
                Xc[r * p + j] = c->band_of[j] == b
                                ? (float)(c->X_orig[r * p + j] - (c->center ? c->x_mean[j] : 0.0)) : 0.0f;
        for (int64_t j = 0; j < p; j++)
            memcpy(Wb + j * nb, W + j * V + b0, (size_t)nb * sizeof *Wb);
        c->K->sgemm(false, false, n, nb, p, 1.0f, Xc, p, Wb, nb, 0.0f, pred + b * n * nb, nb);
    }
    for (int64_t r = 0; r < n; r++)
        for (int64_t v = 0; v < nb; v++) {
            double y = c->Y[r * V + b0 + v] - (c->center ? c->y_mean[b0 + v] : 0.0);
            sst[v] += y * y;
        }
    for (int64_t b = 0; b < B; b++)
        for (int64_t v = 0; v < nb; v++) {
            double acc = 0;
            for (int64_t r = 0; r < n; r++) {
                double y = c->Y[r * V + b0 + v] - (c->center ? c->y_mean[b0 + v] : 0.0), tot = 0;
                double yb = pred[(b * n + r) * nb + v];
                for (int64_t e = 0; e < B; e++)
                    tot += pred[(e * n + r) * nb + v];
                acc += 2 * y * yb - yb * tot;
            }
            r2[b * V + b0 + v] = sst[v] > 0 ? (float)(acc / sst[v]) : 0.0f;
        }
fail:
    free(Xc);
    free(Wb);
    free(pred);
    free(sst);
    return rc;
}

/* ---- outputs ---- */

static int set_names(struct nf_value *m, char **names, struct nf_error *err)
{
    return nf_matrix_set_row_names(m, (const char *const *)names, err);
}

static int label_banded(const struct nf_run *run, struct bctx *c, const struct bands *bd, struct nf_value **out)
{
    const struct nf_matrix *X = &run->in[RIDGE_IN_X]->u.mat;
    const bool l2 = c->prm->score == RIDGE_L2_NEG_LOSS;
    int64_t rows = c->p > c->C ? c->p : c->C;
    char **names = nf_calloc((size_t)(rows + 1), sizeof *names);
    int rc = 0;
    if (!names)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    nf_value_set_stat(out[RIDGE_OUT_WEIGHTS], NF_STAT_ESTIMATE, 0,
                      "banded ridge weights of each feature (unscaled columns), refit on all samples");
    nf_value_set_stat(out[RIDGE_OUT_ALPHA], NF_STAT_PENALTY, 0, c->k ? "global ridge penalty chosen with the "
                      "band weights by cross-validation" : "global ridge penalty (fixed)");
    if (out[RIDGE_OUT_SCORE])
        nf_value_set_stat(out[RIDGE_OUT_SCORE], NF_STAT_SCORE, 0, l2
                          ? "mean cross-validated negative mean squared error at the chosen band weights and alpha"
                          : "mean cross-validated R^2 at the chosen band weights and alpha");
    nf_value_set_stat(out[RIDGE_OUT_INTERCEPT], NF_STAT_ESTIMATE, 0, "intercept");
    for (int64_t j = 0; j < c->p; j++) {
        char buf[32];
        if (!(names[j] = nf_strdup(col_name(X, j, buf, sizeof buf)))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    NF_TRY(rc = set_names(out[RIDGE_OUT_WEIGHTS], names, run->err));
    for (int64_t j = 0; j < c->p; j++) {
        free(names[j]);
        names[j] = NULL;
    }
    if (out[RIDGE_OUT_CV_SCORES]) {
        nf_value_set_stat(out[RIDGE_OUT_CV_SCORES], NF_STAT_SCORE, 0, l2
                          ? "mean cross-validated negative MSE of each band-weight candidate at its best alpha"
                          : "mean cross-validated R^2 of each band-weight candidate at its best alpha");
        for (int64_t j = 0; j < c->C; j++)
            if (!(names[j] = nf_asprintf("candidate-%lld", (long long)j + 1))) {
                rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
                goto fail;
            }
        NF_TRY(rc = set_names(out[RIDGE_OUT_CV_SCORES], names, run->err));
    }
    if (out[RIDGE_OUT_BAND_ALPHA]) {
        nf_value_set_stat(out[RIDGE_OUT_BAND_ALPHA], NF_STAT_PENALTY, 0,
                          "each band's ridge penalty, alpha / band weight");
        NF_TRY(rc = set_names(out[RIDGE_OUT_BAND_ALPHA], bd->name, run->err));
    }
    if (out[RIDGE_OUT_SPLIT_R2]) {
        nf_value_set_stat(out[RIDGE_OUT_SPLIT_R2], NF_STAT_SCORE, 0,
                          "each band's share of the R^2 of the refit on the training data (product measure)");
        NF_TRY(rc = set_names(out[RIDGE_OUT_SPLIT_R2], bd->name, run->err));
    }
fail:
    for (int64_t j = 0; j < rows; j++)
        free(names[j]);
    free(names);
    return rc;
}

static void bctx_free(struct bctx *c)
{
    for (int64_t f = 0; c->folds && f < c->k; f++) {
        bfold_release(&c->folds[f]);
        free(c->folds[f].x_mean);
    }
    free(c->folds);
    free(c->perm);
    free(c->fold_size);
    free(c->X_perm);
    free(c->best_score);
    free(c->best_c);
    free(c->best_a);
    free(c->x_mean);
    free(c->y_mean);
    free((void *)c->gam);
    free(c->refit_done);
    pthread_mutex_destroy(&c->ckpt_lock);
}

int nf_ridge_banded_run(struct nf_run *run)
{
    const struct ridge_params *prm = run->params;
    const struct nf_value *xin = run->in[RIDGE_IN_X], *yin = run->in[RIDGE_IN_Y];
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    struct bctx c = { 0 };
    struct bands bd = { 0 };
    pthread_mutex_init(&c.ckpt_lock, NULL);
    struct nf_value *out[RIDGE_N_OUT] = { 0 };
    double *gam = NULL;
    bool legacy, fold_center;
    int rc = 0, blas = nf_blas_threads();

    c.t_start = nf_now();
    nf_blas_set_threads(1);   /* blocks over threads instead, as the per-voxel node */
    c.prm = prm;
    c.K = nf_kernels_cpu();
    nf_ridge_read_run(run, &c.X, &c.Y, &c.n, &c.p, &c.V, &c.k, &c.alphas, &c.A, &legacy, &c.center, &fold_center);
    c.X_orig = c.X;
    if (nf_run_wants(run, RIDGE_OUT_PREDICTIONS) && run->wanted) {
        rc = NF_FAIL_AT(run->err, NF_EINVAL, loc, id,
                        "cross-validated predictions are not available with bands (weights, scores, "
                        "band_alpha and split_r2 are)");
        goto fail;
    }
    /* one band weighting, a fixed alpha, no score wanted: fit once, no folds (k = 0) */
    bool fit_only = nf_ridge_fit_only(prm, run->wanted);
    if (fit_only)
        c.k = 0;
    NF_TRY(rc = nf_ridge_check_inputs(run, c.X, c.Y, c.n, c.p, c.V, c.k, c.A, c.center));
    NF_TRY(rc = parse_bands(run, &xin->u.mat, &bd));
    c.B = bd.B;
    c.band_of = bd.of;
    uint32_t seed = (uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env ? run->env->seed : 0);
    if ((rc = nf_ridge_band_candidates(prm, c.B, seed, &gam, &c.C, run->err)) < 0) {
        nf_error_on_node(run->node, run->err, rc);
        goto fail;
    }
    c.gam = gam;
    gam = NULL;
    c.block = (c.V + 7) / 8;
    c.block = c.block > BLOCK_VOXELS ? BLOCK_VOXELS : c.block < 1 ? 1 : c.block;
    c.n_blocks = (c.V + c.block - 1) / c.block;
    if (!fit_only)
        NF_TRY(rc = nf_ridge_assign_folds(prm, c.n, c.p, c.k, &c.X, &c.fold_size, &c.perm, &c.X_perm,
                                          run->in[RIDGE_IN_GROUPS], run, &c.k));

    const int64_t rows[RIDGE_N_OUT] = { c.p, 1, 1, 0, 1, c.C, c.B, c.B };
    for (int o = 0; o < RIDGE_N_OUT; o++) {
        if (o == RIDGE_OUT_PREDICTIONS || (o >= RIDGE_OUT_CV_SCORES && !nf_run_wants(run, o)) ||
            (fit_only && (o == RIDGE_OUT_SCORE || o == RIDGE_OUT_CV_SCORES)))
            continue;
        if (!(out[o] = nf_value_new_matrix(rows[o], c.V, yin->u.mat.geom, run->err)))
            goto fail_code;
    }
    c.cv_scores = out[RIDGE_OUT_CV_SCORES] ? out[RIDGE_OUT_CV_SCORES]->u.mat.data : NULL;
    c.ckpt = fit_only ? NULL : run->ckpt;   /* one fit: nothing worth keeping */
    c.best_score = nf_malloc((size_t)c.V * sizeof *c.best_score + 1);
    c.best_c = nf_calloc((size_t)c.V + 1, sizeof *c.best_c);
    c.best_a = nf_calloc((size_t)c.V + 1, sizeof *c.best_a);
    c.x_mean = nf_calloc((size_t)c.p + 1, sizeof *c.x_mean);
    c.y_mean = nf_calloc((size_t)c.V + 1, sizeof *c.y_mean);
    c.folds = nf_calloc((size_t)c.k + 1, sizeof *c.folds);
    if (!c.best_score || !c.best_c || !c.best_a || !c.x_mean || !c.y_mean || !c.folds) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (c.center) {
        nf_ridge_column_means(c.X_orig, c.n, c.p, 0, 0, c.x_mean);
        for (int64_t i = 0; i < c.n; i++)
            for (int64_t v = 0; v < c.V; v++)
                c.y_mean[v] += c.Y[i * c.V + v];
        for (int64_t v = 0; v < c.V; v++)
            c.y_mean[v] /= (double)c.n;
    }
    for (int64_t f = 0, start = 0; f < c.k; f++) {
        struct bfold *fd = &c.folds[f];
        fd->v0 = start;
        fd->v1 = start + c.fold_size[f];
        start = fd->v1;
        fd->n_val = c.fold_size[f];
        fd->n_tr = c.n - fd->n_val;
        if (!(fd->x_mean = nf_calloc((size_t)c.p + 1, sizeof *fd->x_mean))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        if (c.center)
            nf_ridge_column_means(c.X, c.n, c.p, fd->v0, fd->v1, fd->x_mean);
    }

    /* candidates in order: a voxel keeps the first of equal scores (none to
     * score without folds: every voxel keeps candidate 0 and alpha 0, calloc'd) */
    int64_t first = 0, committed = 0;
    double since_commit = 0, commit_cost = 0;
    if (c.ckpt) {
        nf_ckpt_total(c.ckpt, 1 + (c.cv_scores ? c.C : 0) + c.C);   /* chunks at most */
        first = committed = resume_candidates(&c, run);
    }
    for (c.cand = first; c.cand < c.C && !fit_only; c.cand++) {
        if (c.ckpt && committed < c.cand && nf_run_interrupted(run))
            commit_candidates(&c, committed, c.cand);   /* keep what is done; the pool stops */
        double t0 = nf_now();
        NF_TRY(rc = run_pool(&c, POOL_FOLDS, c.k, NULL, run));
        NF_TRY(rc = run_pool(&c, POOL_BLOCKS, c.n_blocks, NULL, run));
        since_commit += nf_now() - t0;
        if (c.ckpt && (c.cand + 1 == c.C || since_commit >= CKPT_COST_RATIO * commit_cost)) {
            double t1 = nf_now();
            commit_candidates(&c, committed, c.cand + 1);
            commit_cost = nf_now() - t1;
            c.ckpt_seconds += commit_cost;
            committed = c.cand + 1;
            since_commit = 0;
        }
        nf_progress(run, c.cand + 1, c.C + 1, "candidates");
    }
    for (int64_t v = 0; v < c.V; v++) {
        out[RIDGE_OUT_ALPHA]->u.mat.data[v] = (float)c.alphas[c.best_a[v]];
        if (out[RIDGE_OUT_SCORE])
            out[RIDGE_OUT_SCORE]->u.mat.data[v] = c.best_score[v];
        for (int64_t b = 0; out[RIDGE_OUT_BAND_ALPHA] && b < c.B; b++)
            out[RIDGE_OUT_BAND_ALPHA]->u.mat.data[b * c.V + v] =
                (float)(c.alphas[c.best_a[v]] / c.gam[c.best_c[v] * c.B + b]);
    }
    if (c.ckpt) {
        if (!(c.refit_done = nf_calloc((size_t)c.C, sizeof *c.refit_done))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        resume_refit(&c, out, run);
    }
    NF_TRY(rc = run_pool(&c, POOL_REFIT, c.C, out, run));
    if (out[RIDGE_OUT_SPLIT_R2])
        NF_TRY(rc = run_pool(&c, POOL_SPLIT, c.n_blocks, out, run));
    for (int64_t v = 0; v < c.V && c.center; v++) {
        double acc = c.y_mean[v];
        for (int64_t j = 0; j < c.p; j++)
            acc -= c.x_mean[j] * out[RIDGE_OUT_WEIGHTS]->u.mat.data[j * c.V + v];
        out[RIDGE_OUT_INTERCEPT]->u.mat.data[v] = (float)acc;
    }
    NF_TRY(rc = label_banded(run, &c, &bd, out));
    for (int o = 0; o < RIDGE_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
    goto fail;
fail_code:
    rc = run->err->code ? run->err->code : NF_ENOMEM;
fail:
    nf_blas_set_threads(blas);
    for (int o = 0; o < RIDGE_N_OUT; o++)
        nf_value_unref(out[o]);
    free(gam);
    bands_free(&bd);
    bctx_free(&c);
    return rc;
}
