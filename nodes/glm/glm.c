/* glm.c — the `glm` node: a first-level GLM of one run, as nilearn 0.14's
 * FirstLevelModel fits it (run_glm, then compute_contrast for t contrasts),
 * for every voxel of a frames x voxels matrix and its design table.
 *
 * nilearn's recipe, step by step: with scaling: mean each voxel becomes
 * percent signal change, 100 (y / max(mean, 1) - 1) (so voxels of mean below
 * 1, zero-mean ones included, are only shifted, as nilearn's mean_scaling
 * does); an OLS fit gives residuals whose lag-1 autocorrelation (Yule-Walker:
 * Σ y_t y_{t+1} / (n - 1) over Σ y_t² / n, y the residuals less their mean
 * over the whole run) is cut to two decimals toward zero, int(100 rho) / 100,
 * nilearn's bins; each bin is refitted with the design and data whitened by
 * y_t - rho y_{t-1} (the first frame left as it is). Betas are pinv(Xw) yw;
 * the dispersion is the whitened residuals' sum of squares over n - k; a t
 * contrast's effect is cᵀβ, its variance cᵀ (XwᵀXw)⁺ c times the dispersion,
 * t = effect / sqrt(max(variance, 1e-50)), p = P(T > t) with n - rank(X)
 * degrees of freedom, and z the normal quantile of that tail (nilearn's
 * clipping at 1e-300).
 *
 * The algorithm: one pass over Y. Everything the fits need of a series y
 * is linear or quadratic in it: the projections Xᵀy and Xᵀ(S + Sᵀ)y (S the
 * lag-1 shift), Σ y, y_0, y_{n-1}, yᵀy and yᵀSy. So each block of voxels is
 * read in Y's own layout (frames x voxels, no transposition), less its
 * float mean, and one float GEMM gives the projections; the rest, in
 * double, is k x k algebra per voxel: the OLS betas b = (XᵀX)⁺Xᵀy (a GEMM
 * over the block), the residuals' sums at the least-squares solution (rᵀr =
 * yᵀy - bᵀXᵀy, rᵀSr = yᵀSy - bᵀXᵀ(S + Sᵀ)y + bᵀXᵀSXb, Σ r, r_0, r_{n-1}:
 * the Yule-Walker estimate), and for each AR bin, with W = I - rho S,
 * XwᵀXw = XᵀWᵀWX and Xwᵀyw = XᵀWᵀWy, WᵀW = I - rho (S + Sᵀ) + rho² SᵀS,
 * from the same sums: betas (XwᵀXw)⁺ Xwᵀyw and the whitened residuals' sum
 * of squares ywᵀyw - betaᵀXwᵀyw. One factorisation per design (the OLS
 * one, then one per AR bin, spread over the node's threads): the
 * column-equilibrated normal matrix is decomposed by Jacobi rotations in
 * double, giving the design's rank (whitening keeps it, so the bins of a
 * full-rank design are inverted by Cholesky, cheaper) and (XwᵀXw)⁺, which
 * with a rank-deficient design gives another least-squares solution than
 * pinv (estimable contrasts are the same as nilearn's, the betas of aliased
 * columns are not). With AR(1) each voxel's sums are kept (2k + 5 doubles)
 * between the OLS pass and the refit, which goes through the voxels in
 * order (outputs written in place), each with its bin's inverse.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/distributions.h"
#include "core/util.h"
#include "kernels/kernels.h"

#include "glm.h"

/* Voxels per GEMM block: n x BLOCK floats of data stay in the L2 cache. */
#define BLOCK_VOXELS 512
/* Eigenvalues of the equilibrated normal matrix below this fraction of the
 * largest count as zero: columns that are combinations of others. */
#define RANK_TOLERANCE 1e-12
/* nilearn's AR(1) bins: int(rho * 100) / 100. */
#define AR_BINS 100

static const char *const noise_names[] = { "ols", "ar1", NULL };
static const char *const scaling_names[] = { "none", "mean", NULL };

#define FIELD(f) offsetof(struct glm_params, f)
static const struct nf_param glm_params_table[] = {
    NF_PARAM_ENUM("noise", FIELD(noise), noise_names, GLM_NOISE_AR1,
                  "temporal noise model: ar1 (nilearn's default: OLS residuals' lag-1 autocorrelation per "
                  "voxel, cut to 2 decimals, and a refit with the design and data whitened by it) or ols"),
    NF_PARAM_ENUM("scaling", FIELD(scaling), scaling_names, GLM_SCALING_MEAN,
                  "mean: each voxel to percent signal change, 100 * (y / max(mean, 1) - 1), as nilearn's "
                  "signal_scaling=0 (its default); none: the data as they are"),
    NF_PARAM_STR_LIST_F("contrasts", FIELD(contrasts), "", 1, 1000, NF_PF_REQUIRED,
                        "t contrasts, each \"name = expression\" over the design's column names with +, -, "
                        "numbers times names and parentheses (\"faces_vs_houses = faces - houses\", "
                        "\"f = 2*a - (b + c)\", \"mean = (a + b)/2\") or \"name = [1, -1, 0]\" (weights in "
                        "column order, zeros added up to the number of columns)"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port glm_inputs[] = {
    { "X", "design table: one row per frame, one numeric column per regressor (the design node's X)",
      NF_PT_TABLE, 0 },
    { "Y", "the run's data: frames x voxels matrix (the mask node's output), rows matching X's",
      NF_PT_MATRIX, 0 },
    NF_PORT_END
};
static const struct nf_port glm_outputs[] = {
    { "effect", "contrasts x voxels: each contrast's effect size cᵀβ (rows named by contrast)", NF_PT_MATRIX,
      NF_PORT_ON_DEMAND },
    { "variance", "contrasts x voxels: the variance of each effect", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "t", "contrasts x voxels: t statistics, n - rank(X) degrees of freedom", NF_PT_MATRIX, 0 },
    { "z", "contrasts x voxels: z scores of the t statistics' upper tail, as nilearn's", NF_PT_MATRIX, 0 },
    { "p", "contrasts x voxels: one-sided p-values P(T > t)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "betas", "regressors x voxels: the parameter estimates (rows named by design column)", NF_PT_MATRIX,
      NF_PORT_ON_DEMAND },
    { "residual_variance", "1 x voxels: the (whitened) residuals' sum of squares over n - k",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    NF_PORT_END
};
NF_PORTS_MATCH(glm_inputs, GLM_N_IN);
NF_PORTS_MATCH(glm_outputs, GLM_N_OUT);

#define FAIL_NODE(err, node, code, ...) NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node), __VA_ARGS__)

/* ---- methods and checks ---- */

static char *glm_methods(const void *params)
{
    const struct glm_params *p = params;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "A general linear model was fitted to every voxel's time series as nilearn's "
                        "FirstLevelModel fits it");
    if (p->scaling == GLM_SCALING_MEAN)
        nf_strbuf_addf(&sb, ", after scaling each voxel to percent signal change");
    if (p->noise == GLM_NOISE_AR1)
        nf_strbuf_addf(&sb, ", with an AR(1) noise model (the lag-1 autocorrelation of each voxel's OLS "
                            "residuals, cut to two decimals, whitening a refit of the model)");
    else
        nf_strbuf_addf(&sb, ", by ordinary least squares");
    if (p->contrasts.n == 0) {
        nf_strbuf_addf(&sb, "; t contrasts were estimated, with z scores from the t statistics' upper tails.");
        return nf_strbuf_detach(&sb);
    }
    nf_strbuf_addf(&sb, "; %zu t contrast%s (", p->contrasts.n, p->contrasts.n == 1 ? " was" : "s were");
    for (size_t i = 0; i < p->contrasts.n; i++)
        nf_strbuf_addf(&sb, "%s%s", i ? "; " : "", p->contrasts.v[i]);
    nf_strbuf_addf(&sb, ") estimated, with z scores from the t statistics' upper tails.");
    return nf_strbuf_detach(&sb);
}

/* The syntax of every contrast, before any data. */
static void glm_check(const void *params, const struct nf_loc *loc, const char *node, struct nf_diags *d)
{
    const struct glm_params *p = params;
    for (size_t i = 0; i < p->contrasts.n; i++) {
        char why[1024], *name = NULL, *expr = NULL;
        int rc = glm_contrast_split(p->contrasts.v[i], &name, &expr, why, sizeof why);
        if (rc == 0)
            rc = glm_contrast_weights(expr, NULL, 0, NULL, why, sizeof why);
        if (rc == NF_EINVAL)
            NF_DIAG(d, NF_EINVAL, loc, node, "contrasts[%zu]: %s", i + 1, why);
        for (size_t j = 0; rc == 0 && j < i; j++) {
            char *other = NULL, *other_expr = NULL;
            if (glm_contrast_split(p->contrasts.v[j], &other, &other_expr, why, sizeof why) == 0 &&
                strcmp(other, name) == 0)
                NF_DIAG(d, NF_EINVAL, loc, node, "contrasts[%zu]: the name '%s' is used twice (also "
                        "contrasts[%zu])", i + 1, name, j + 1);
            free(other);
            free(other_expr);
        }
        free(name);
        free(expr);
    }
}

/* ---- contrasts against the design's columns ---- */

struct contrasts {
    size_t c;
    char **names;      /* c, owned */
    double *w;         /* c x k */
};

static void contrasts_free(struct contrasts *cs)
{
    for (size_t i = 0; cs->names && i < cs->c; i++)
        free(cs->names[i]);
    free(cs->names);
    free(cs->w);
    *cs = (struct contrasts){ 0 };
}

static int read_contrasts(const struct glm_params *p, const char *const *cols, size_t k, struct contrasts *cs,
                          const struct nf_node_inst *node, struct nf_error *err)
{
    cs->c = p->contrasts.n;
    cs->names = nf_calloc(cs->c + 1, sizeof *cs->names);
    cs->w = nf_calloc(cs->c * k + 1, sizeof *cs->w);
    if (!cs->names || !cs->w)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (size_t i = 0; i < cs->c; i++) {
        char why[1024], *expr = NULL;
        int rc = glm_contrast_split(p->contrasts.v[i], &cs->names[i], &expr, why, sizeof why);
        if (rc == 0)
            rc = glm_contrast_weights(expr, cols, k, cs->w + i * k, why, sizeof why);
        free(expr);
        if (rc == NF_ENOMEM)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        if (rc < 0)
            return FAIL_NODE(err, node, NF_EINVAL, "contrasts[%zu]: %s", i + 1, why);
    }
    return 0;
}

/* ---- shapes ---- */

/* "a\nb\n" -> an array of k names pointing into a copy (*buf owned). */
static const char **split_names(const char *names, size_t *k, char **buf)
{
    *k = 0;
    *buf = nf_strdup(names);
    if (!*buf)
        return NULL;
    for (const char *s = names; *s; s++)
        *k += *s == '\n';
    const char **out = nf_calloc(*k + 1, sizeof *out);
    if (!out) {
        free(*buf);
        *buf = NULL;
        return NULL;
    }
    size_t i = 0;
    for (char *s = *buf; *s && i < *k;) {
        char *nl = strchr(s, '\n');
        out[i++] = s;
        if (!nl)
            break;
        *nl = '\0';
        s = nl + 1;
    }
    return out;
}

static int glm_resolve(struct nf_resolve *r)
{
    const struct glm_params *p = r->params;
    const struct nf_shape *x = &r->in[GLM_IN_X], *y = &r->in[GLM_IN_Y];
    if (x->kind == NF_KIND_TABLE && y->kind == NF_KIND_MATRIX && x->dim[0] > 0 && y->dim[0] > 0 &&
        x->dim[0] != y->dim[0])
        return FAIL_NODE(r->err, r->node, NF_ESHAPE, "the design X has %" PRId64 " rows but Y has %" PRId64
                         " frames: they must be the same run, row for row", x->dim[0], y->dim[0]);
    if (x->kind == NF_KIND_TABLE && x->col_names) {   /* names known from the file: check now */
        size_t k;
        char *buf;
        const char **cols = split_names(x->col_names, &k, &buf);
        struct contrasts cs = { 0 };
        int rc = cols ? read_contrasts(p, cols, k, &cs, r->node, r->err)
                      : NF_FAIL(r->err, NF_ENOMEM, "out of memory");
        contrasts_free(&cs);
        free(cols);
        free(buf);
        if (rc < 0)
            return rc;
    }
    int64_t V = y->kind == NF_KIND_MATRIX ? y->dim[1] : 0, c = (int64_t)p->contrasts.n;
    struct nf_shape map = { .kind = NF_KIND_MATRIX, .dim = { c, V }, .has_geom = y->has_geom,
                            .cols_upper_bound = y->cols_upper_bound };
    for (int o = GLM_OUT_EFFECT; o <= GLM_OUT_P; o++)
        r->out[o] = map;
    r->out[GLM_OUT_BETAS] = map;
    r->out[GLM_OUT_BETAS].dim[0] = x->kind == NF_KIND_TABLE ? x->dim[1] : 0;
    r->out[GLM_OUT_RESIDUAL_VARIANCE] = map;
    r->out[GLM_OUT_RESIDUAL_VARIANCE].dim[0] = 1;
    return 0;
}

/* ---- the design's sums ---- */

struct glm_ctx {
    const struct glm_params *prm;
    const struct nf_kernels *K;
    int64_t n, k, kp, V;        /* kp: k rounded up to whole vectors (the stride of cov, betas) */
    const float *Y;             /* n x V */
    double *X;                  /* n x k */
    double *Z;                  /* ZROWS(k) x n: the linear functionals of a series that the fit needs */
    double *Zsum;               /* ZROWS(k): each functional of the constant series 1 */
    float *Zf;                  /* 2k x n: Z's first rows in float */
    double *XtX, *XsX;          /* k x k: XᵀX and Xᵀ(S + Sᵀ)X, S the lag-1 shift */
    struct contrasts cs;
    double dof;                 /* n - rank(X) */
    struct nf_t_tail tail;      /* Student's t of dof degrees of freedom */
    struct factor *ols;
    struct factor *bins;        /* AR(1): one per bin index (2 AR_BINS + 1), empty unless it has voxels */
    double *rec;                /* AR(1): V x REC(k), every voxel's sums (record layout below) */
    double *acf;                /* AR(1): V x 5 sums of the OLS residuals r:
                                   Σ r, Σ r², Σ r_t r_{t+1}, r_0, r_{n-1} */
    int32_t *bin;               /* AR(1): V, int(100 rho) + AR_BINS */
    int64_t *todo, n_todo;      /* AR(1): the bins that have voxels */
    float *out[GLM_N_OUT];      /* output data */
};

/* A voxel's record: the functionals Zy (Xᵀy, Xᵀ(S + Sᵀ)y, Σ y, y_0,
 * y_{n-1}), then yᵀy and yᵀSy = Σ y_t y_{t-1}; y the (scaled) series with
 * its mean. */
#define ZROWS(k) (2 * (k) + 3)
#define REC(k) (ZROWS(k) + 2)
enum { R_SUM, R_FIRST, R_LAST, R_YY, R_YSY };   /* offsets after the 2k projections */

/* Z's rows: X's columns, (S + Sᵀ)X's (x_{t-1} + x_{t+1}, the missing
 * neighbour 0 at either end), ones, e_0 and e_{n-1}; XᵀX and Xᵀ(S + Sᵀ)X. */
static int design_sums(struct glm_ctx *c, struct nf_error *err)
{
    const int64_t n = c->n, k = c->k, rows = ZROWS(k);
    c->Z = nf_calloc((size_t)(rows * n), sizeof *c->Z);
    c->Zsum = nf_calloc((size_t)rows, sizeof *c->Zsum);
    c->XtX = nf_calloc((size_t)(k * k), sizeof *c->XtX);
    c->XsX = nf_calloc((size_t)(k * k), sizeof *c->XsX);
    if (!c->Z || !c->Zsum || !c->XtX || !c->XsX)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    const double *X = c->X;
    for (int64_t j = 0; j < k; j++)
        for (int64_t t = 0; t < n; t++) {
            c->Z[j * n + t] = X[t * k + j];
            c->Z[(k + j) * n + t] = (t > 0 ? X[(t - 1) * k + j] : 0) + (t < n - 1 ? X[(t + 1) * k + j] : 0);
        }
    for (int64_t t = 0; t < n; t++)
        c->Z[2 * k * n + t] = 1;
    c->Z[(2 * k + 1) * n] = 1;
    c->Z[(2 * k + 2) * n + n - 1] = 1;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < n; t++)
            c->Zsum[r] += c->Z[r * n + t];
    if (!(c->Zf = nf_alloc_floats((size_t)(2 * k * n))))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t e = 0; e < 2 * k * n; e++)
        c->Zf[e] = (float)c->Z[e];
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++) {
            double a = 0, b = 0;
            for (int64_t t = 0; t < n; t++) {
                a += c->Z[i * n + t] * c->Z[j * n + t];
                b += c->Z[i * n + t] * c->Z[(k + j) * n + t];
            }
            c->XtX[i * k + j] = a;
            c->XsX[i * k + j] = b;
        }
    for (int64_t i = 0; i < k; i++)   /* symmetric in exact arithmetic: make it so in floating point */
        for (int64_t j = 0; j < i; j++)
            c->XsX[i * k + j] = c->XsX[j * k + i] = (c->XsX[i * k + j] + c->XsX[j * k + i]) / 2;
    return 0;
}

/* ---- factorisations ---- */

/* The normal matrix of one design whitened with rho (0: OLS), inverted. */
struct factor {
    double rho;
    double *cov;       /* k x kp: (XwᵀXw)⁺, zeros beyond column k */
    double *cvar;      /* per contrast: cᵀ cov c */
    int64_t rank;
};

static void factor_free(struct factor *f)
{
    free(f->cov);
    free(f->cvar);
    *f = (struct factor){ 0 };
}

/* The inverse of the symmetric k x k matrix C (row-major) by Cholesky,
 * C = L Lᵀ, then C x = e_j column by column, in double; L is k x k and y k
 * scratch. False when a pivot is not clearly positive, for the caller to
 * fall back on the eigendecomposition. C has a unit diagonal here (the
 * columns equilibrated), so the pivots are on the scale of 1. */
static bool cholesky_inverse(const double *C, int64_t k, double *inv, double *L, double *y)
{
    for (int64_t j = 0; j < k; j++) {
        double d = C[j * k + j];
        for (int64_t q = 0; q < j; q++)
            d -= L[j * k + q] * L[j * k + q];
        if (!(d > 1e-9))
            return false;
        L[j * k + j] = sqrt(d);
        for (int64_t i = j + 1; i < k; i++) {
            double s = C[i * k + j];
            for (int64_t q = 0; q < j; q++)
                s -= L[i * k + q] * L[j * k + q];
            L[i * k + j] = s / L[j * k + j];
        }
    }
    for (int64_t c = 0; c < k; c++) {
        for (int64_t i = 0; i < k; i++) {   /* L y = e_c */
            double s = i == c;
            for (int64_t q = 0; q < i; q++)
                s -= L[i * k + q] * y[q];
            y[i] = s / L[i * k + i];
        }
        for (int64_t i = k - 1; i >= 0; i--) {   /* Lᵀ x = y */
            double s = y[i];
            for (int64_t q = i + 1; q < k; q++)
                s -= L[q * k + i] * inv[q * k + c];
            inv[i * k + c] = s / L[i * k + i];
        }
    }
    return true;
}

/* (XwᵀXw)⁺ for the design whitened by rho, from the design's sums: with
 * W = I - rho S (ARModel.whiten: row t minus rho times row t - 1, the first
 * kept), WᵀW = I - rho (S + Sᵀ) + rho² SᵀS and SᵀS is the identity less its
 * last frame. With full_rank (the design's rank is k, which whitening keeps:
 * W is invertible) it is inverted by Cholesky, a fraction of the
 * eigendecomposition's work, which finds the rank (the OLS design, or a
 * rank-deficient one). */
static int factor_make(const struct glm_ctx *c, double rho, bool full_rank, struct factor *f, struct nf_error *err)
{
    const int64_t k = c->k, kp = c->kp;
    const double *xl = c->X + (c->n - 1) * k;
    size_t kk = (size_t)(k * k);
    *f = (struct factor){ .rho = rho };
    double *C = nf_malloc_array(kk, sizeof *C), *Q = nf_malloc_array(kk, sizeof *Q);
    double *inv = nf_calloc(kk, sizeof *inv), *lambda = nf_malloc_array((size_t)k, sizeof *lambda);
    double *d = nf_malloc_array((size_t)k, sizeof *d);
    f->cov = nf_calloc((size_t)(k * kp), sizeof *f->cov);
    f->cvar = nf_calloc(c->cs.c + 1, sizeof *f->cvar);
    int rc = 0;
    if (!C || !Q || !inv || !lambda || !d || !f->cov || !f->cvar) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            C[i * k + j] = c->XtX[i * k + j] - rho * c->XsX[i * k + j] +
                           rho * rho * (c->XtX[i * k + j] - xl[i] * xl[j]);
    /* equilibrate the columns so that their scales (a constant next to
     * rotations in radians) do not pass for rank deficiency */
    for (int64_t j = 0; j < k; j++)
        d[j] = C[j * k + j] > 0 ? 1 / sqrt(C[j * k + j]) : 0;
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            C[i * k + j] *= d[i] * d[j];
    if (full_rank && cholesky_inverse(C, k, inv, Q, lambda)) {
        f->rank = k;
    } else {
        memset(inv, 0, kk * sizeof *inv);
        glm_sym_eigen(C, k, lambda, Q);
        double top = 0;
        for (int64_t i = 0; i < k; i++)
            top = lambda[i] > top ? lambda[i] : top;
        /* inv = Q diag(1/lambda) Qᵀ over the eigenvalues kept */
        for (int64_t e = 0; e < k; e++) {
            if (!(lambda[e] > RANK_TOLERANCE * top))
                continue;
            f->rank++;
            for (int64_t i = 0; i < k; i++)
                for (int64_t j = 0; j < k; j++)
                    inv[i * k + j] += Q[i * k + e] * Q[j * k + e] / lambda[e];
        }
    }
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            f->cov[i * kp + j] = inv[i * k + j] * d[i] * d[j];
    for (size_t q = 0; q < c->cs.c; q++) {
        const double *cw = c->cs.w + q * (size_t)k;
        double s = 0;
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = 0; j < k; j++)
                s += cw[i] * f->cov[i * kp + j] * cw[j];
        f->cvar[q] = s;
    }
done:
    free(C);
    free(Q);
    free(inv);
    free(lambda);
    free(d);
    if (rc < 0)
        factor_free(f);
    return rc;
}

/* ---- per-voxel vector loops ----
 * -O2 leaves loops of unknown length scalar: these are written with
 * explicit SSE2-wide vectors (the same IEEE operations per element as the
 * scalar code, in a fixed order, so results do not depend on threads). */

typedef float glm_v2f __attribute__((vector_size(8)));
typedef double glm_v2d __attribute__((vector_size(16)));

/* (macros: no vector arguments or results across calls) */
#define load2(p) __extension__({ glm_v2d v2_; memcpy(&v2_, (p), sizeof v2_); v2_; })
#define store2(p, v) __extension__({ glm_v2d v2_ = (v); memcpy((p), &v2_, sizeof v2_); })

static double dot(const double *a, const double *b, int64_t k)
{
    double s = 0;
    for (int64_t j = 0; j < k; j++)
        s += a[j] * b[j];
    return s;
}

/* beta = cov q: cov symmetric k x kp (zeros past k, kp a multiple of 4),
 * beta kp values. The refit's k² per voxel: cloned for AVX2 (4 doubles a
 * vector; the same multiplies and adds in the same order, no fusing, so
 * every clone gives the same bits). */
__attribute__((target_clones("avx2", "default")))
static void symv(const double *cov, int64_t k, int64_t kp, const double *q, double *beta)
{
    typedef double v4d __attribute__((vector_size(32)));
    memset(beta, 0, (size_t)kp * sizeof *beta);
    for (int64_t j = 0; j < k; j++) {
        const double qj = q[j];
        const double *row = cov + j * kp;
        for (int64_t i = 0; i < kp; i += 4) {
            v4d b, r;
            memcpy(&b, beta + i, sizeof b);
            memcpy(&r, row + i, sizeof r);
            b += qj * r;
            memcpy(beta + i, &b, sizeof b);
        }
    }
}

/* Per-thread scratch; blocks are voxel-major (a voxel's series contiguous). */
struct scratch {
    float *Yf;                  /* n x BLOCK_VOXELS: the block less its float means */
    float *G;                   /* BLOCK_VOXELS x 2k: its projections */
    double *col;                /* BLOCK_VOXELS x 3: Σ y, Σ of the centred y, the float means */
    double *rec;                /* BLOCK_VOXELS x REC(k): OLS only (AR(1) keeps them all) */
    double *B, *MB;             /* BLOCK_VOXELS x kp: OLS betas, (Xᵀ(S + Sᵀ)X) betas */
    double *q;                  /* kp */
};

static void scratch_free(struct scratch *s)
{
    free(s->Yf);
    free(s->G);
    free(s->col);
    free(s->rec);
    free(s->B);
    free(s->MB);
    free(s->q);
}

static bool scratch_alloc(const struct glm_ctx *c, struct scratch *s)
{
    s->Yf = nf_alloc_floats((size_t)(c->n * BLOCK_VOXELS));
    s->G = nf_alloc_floats((size_t)(2 * c->k * BLOCK_VOXELS));
    s->col = nf_calloc((size_t)(3 * BLOCK_VOXELS), sizeof *s->col);
    if (!s->Yf || !s->G || !s->col)
        return false;
    s->rec = c->rec ? NULL : nf_malloc_array((size_t)(REC(c->k) * BLOCK_VOXELS), sizeof *s->rec);
    s->B = nf_calloc((size_t)(c->kp * BLOCK_VOXELS), sizeof *s->B);
    s->MB = nf_calloc((size_t)(c->kp * BLOCK_VOXELS), sizeof *s->MB);
    s->q = nf_calloc((size_t)c->kp, sizeof *s->q);
    return (c->rec || s->rec) && s->B && s->MB && s->q;
}

/* sum += row (nb floats), in double. */
static void frame_add(const float *row, double *sum, int64_t nb)
{
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        glm_v2f f;
        memcpy(&f, row + i, sizeof f);
        store2(sum + i, load2(sum + i) + __builtin_convertvector(f, glm_v2d));
    }
    for (; i < nb; i++)
        sum[i] += row[i];
}

/* d = row - mean (float); yy += d², csum += d, lag += d prev (prev the
 * frame before, NULL for the first), in double. */
static void frame_center(const float *row, const float *mean, float *d, const float *prev, double *yy, double *csum,
                         double *lag, int64_t nb)
{
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
        glm_v2f f, m;
        memcpy(&f, row + i, sizeof f);
        memcpy(&m, mean + i, sizeof m);
        f -= m;
        memcpy(d + i, &f, sizeof f);
        glm_v2d v = __builtin_convertvector(f, glm_v2d);
        store2(yy + i, load2(yy + i) + v * v);
        store2(csum + i, load2(csum + i) + v);
        if (prev) {
            memcpy(&m, prev + i, sizeof m);
            store2(lag + i, load2(lag + i) + v * __builtin_convertvector(m, glm_v2d));
        }
    }
    for (; i < nb; i++) {
        d[i] = row[i] - mean[i];
        const double v = d[i];
        yy[i] += v * v;
        csum[i] += v;
        if (prev)
            lag[i] += v * prev[i];
    }
}

/* The records (rec, nb x REC(k)) of voxels b0..: Y's frames are read row by
 * row (no transposition), twice while the block is in cache: for each
 * voxel's sum, then less its float mean (exact for the data near it), with
 * the sums Σ y², Σ y_t y_{t-1} and Σ y of that in double; one float GEMM
 * gives the projections Xᵀy and Xᵀ(S + Sᵀ)y of the centred series (its
 * round-off scales with the data's variation, not their baseline, as in
 * the float residuals nilearn's float32 data would give). The mean's share
 * is added back in double (Zsum m), then nilearn's mean scaling, y -> a y
 * + b with a = 100 / max(mean, 1) (the mean rounded to float32, as
 * nilearn's) and b = -100, is applied to the record: Z(a y + b) = a Z y +
 * b Zsum, and the quadratic sums likewise. */
static void project_block(const struct glm_ctx *c, struct scratch *s, int64_t b0, int64_t nb, double *rec)
{
    const int64_t n = c->n, V = c->V, k = c->k, R = REC(k);
    double *yy = s->B, *lag = s->MB, *sum = s->col, *csum = s->col + BLOCK_VOXELS;
    float *mf = (float *)(s->col + 2 * BLOCK_VOXELS);
    memset(sum, 0, (size_t)nb * sizeof *sum);
    for (int64_t t = 0; t < n; t++)
        frame_add(c->Y + t * V + b0, sum, nb);
    for (int64_t i = 0; i < nb; i++) {
        mf[i] = (float)(sum[i] / (double)n);
        yy[i] = lag[i] = csum[i] = 0;
    }
    for (int64_t t = 0; t < n; t++)
        frame_center(c->Y + t * V + b0, mf, s->Yf + t * nb, t ? s->Yf + (t - 1) * nb : NULL, yy, csum, lag, nb);
    c->K->sgemm(true, true, nb, 2 * k, n, 1.0f, s->Yf, nb, c->Zf, n, 0.0f, s->G, 2 * k);
    const double dn = (double)n;
    for (int64_t i = 0; i < nb; i++) {
        double *r = rec + i * R, *z = r + 2 * k, a = 1, b = 0, m = mf[i];
        const float *g = s->G + i * 2 * k;
        for (int64_t j = 0; j < 2 * k; j++)
            r[j] = (double)g[j] + m * c->Zsum[j];
        const double c0 = s->Yf[i], cl = s->Yf[(n - 1) * nb + i];
        z[R_SUM] = csum[i] + dn * m;
        z[R_FIRST] = c0 + m;
        z[R_LAST] = cl + m;
        z[R_YY] = yy[i] + 2 * m * csum[i] + dn * m * m;
        z[R_YSY] = lag[i] + m * (2 * csum[i] - c0 - cl) + (dn - 1) * m * m;
        if (c->prm->scaling == GLM_SCALING_MEAN) {
            const float mean = (float)(sum[i] / dn);
            a = 100.0 / (mean > 1.0f ? mean : 1.0f);
            b = -100;
        }
        const double sy = z[R_SUM], y0 = z[R_FIRST], yl = z[R_LAST];
        for (int64_t j = 0; j < ZROWS(k); j++)
            r[j] = a * r[j] + b * c->Zsum[j];
        z[R_YY] = a * a * z[R_YY] + 2 * a * b * sy + dn * b * b;
        z[R_YSY] = a * a * z[R_YSY] + a * b * (2 * sy - y0 - yl) + (dn - 1) * b * b;
    }
}

/* ---- the fit, from the records ---- */

/* Voxel v's betas (kp values), residual variance and contrasts into the outputs. */
static void store_voxel(const struct glm_ctx *c, const struct factor *f, int64_t v, const double *beta, double sse)
{
    const int64_t k = c->k, V = c->V;
    const double dispersion = (sse > 0 ? sse : 0) / (double)(c->n - k);
    for (int64_t j = 0; c->out[GLM_OUT_BETAS] && j < k; j++)
        c->out[GLM_OUT_BETAS][j * V + v] = (float)beta[j];
    if (c->out[GLM_OUT_RESIDUAL_VARIANCE])
        c->out[GLM_OUT_RESIDUAL_VARIANCE][v] = (float)dispersion;
    for (size_t ci = 0; ci < c->cs.c; ci++) {
        const double effect = dot(c->cs.w + ci * (size_t)k, beta, k), variance = f->cvar[ci] * dispersion;
        double t = effect / sqrt(variance > 1e-50 ? variance : 1e-50), p, z;
        glm_t_p_z_tail(&c->tail, t, &p, &z);
        const int64_t at = (int64_t)ci * V + v;
        if (c->out[GLM_OUT_EFFECT])
            c->out[GLM_OUT_EFFECT][at] = (float)effect;
        if (c->out[GLM_OUT_VARIANCE])
            c->out[GLM_OUT_VARIANCE][at] = (float)variance;
        if (c->out[GLM_OUT_P])
            c->out[GLM_OUT_P][at] = (float)p;
        c->out[GLM_OUT_T][at] = (float)t;
        c->out[GLM_OUT_Z][at] = (float)z;
    }
}

/* The OLS fit of voxels b0.. from their records: betas b = cov Xᵀy (a GEMM
 * over the block) and, at the least-squares solution, the residuals' sums
 * rᵀr = yᵀy - bᵀXᵀy and rᵀSr = yᵀSy - bᵀXᵀ(S + Sᵀ)y + bᵀXᵀSXb (the last
 * half of bᵀXᵀ(S + Sᵀ)Xb), Σ r, r_0 and r_{n-1}: the Yule-Walker sums with
 * AR(1), the outputs without. */
static void ols_block(const struct glm_ctx *c, struct scratch *s, int64_t b0, int64_t nb, const double *rec)
{
    const int64_t n = c->n, k = c->k, kp = c->kp, R = REC(k);
    const double *x0 = c->X, *xl = c->X + (n - 1) * k;
    c->K->dgemm(false, true, nb, k, k, rec, R, c->ols->cov, kp, s->B, kp);
    if (c->acf)
        c->K->dgemm(false, true, nb, k, k, s->B, kp, c->XsX, k, s->MB, kp);
    for (int64_t i = 0; i < nb; i++) {
        const double *r = rec + i * R, *z = r + 2 * k, *b = s->B + i * kp;
        const double rr = z[R_YY] - dot(b, r, k);
        if (!c->acf) {
            store_voxel(c, c->ols, b0 + i, b, rr);
            continue;
        }
        double *a = c->acf + (b0 + i) * 5;
        a[0] = z[R_SUM] - dot(b, c->Zsum, k);
        a[1] = rr;
        a[2] = z[R_YSY] - dot(b, r + k, k) + 0.5 * dot(b, s->MB + i * kp, k);
        a[3] = z[R_FIRST] - dot(b, x0, k);
        a[4] = z[R_LAST] - dot(b, xl, k);
    }
}

/* The AR(1) refit of voxels b0.. with their bins' factors: Xwᵀyw = XᵀWᵀWy
 * and ywᵀyw from the record (WᵀW as in factor_make), betas cov Xwᵀyw, the
 * whitened residuals' sum of squares ywᵀyw - betaᵀXwᵀyw. */
static void ar_block(const struct glm_ctx *c, struct scratch *s, int64_t b0, int64_t nb)
{
    const int64_t k = c->k, kp = c->kp, R = REC(k);
    const double *xl = c->X + (c->n - 1) * k;
    double *beta = s->B;
    for (int64_t i = 0; i < nb; i++) {
        const int64_t v = b0 + i;
        const struct factor *f = &c->bins[c->bin[v]];
        const double *r = c->rec + v * R, *z = r + 2 * k, rho = f->rho, yl = z[R_LAST];
        for (int64_t j = 0; j < k; j++)
            s->q[j] = r[j] - rho * r[k + j] + rho * rho * (r[j] - xl[j] * yl);
        const double yy = z[R_YY] - 2 * rho * z[R_YSY] + rho * rho * (z[R_YY] - yl * yl);
        symv(f->cov, k, kp, s->q, beta);
        store_voxel(c, f, v, beta, yy - dot(beta, s->q, k));
    }
}

/* ---- voxel blocks over threads ---- */

enum { PASS_OLS, PASS_FACTOR, PASS_AR };   /* records and OLS fits, AR bins' factors, AR refits */

struct work {
    struct glm_ctx *c;
    int pass;                   /* PASS_* */
    int64_t n_items;
    const struct nf_run *run;
    int64_t total;              /* voxels to report in all */
    atomic_long next, done;
    atomic_int failed;
    pthread_mutex_t lock;
    struct nf_error err;
};

static void *worker(void *arg)
{
    struct work *w = arg;
    struct glm_ctx *c = w->c;
    struct scratch s = { 0 };
    struct nf_error err = { 0 };
    if (!scratch_alloc(c, &s))
        NF_FAIL(&err, NF_ENOMEM, "out of memory");
    for (int64_t i; !err.code && !atomic_load(&w->failed) && (i = atomic_fetch_add(&w->next, 1)) < w->n_items;) {
        if (nf_run_interrupted(w->run)) {
            NF_FAIL(&err, NF_EINTR, "interrupted");
            break;
        }
        if (w->pass == PASS_FACTOR) {   /* nilearn's rho: (int * 1.0) / bins */
            const int64_t b = c->todo[i];
            if (factor_make(c, (double)(b - AR_BINS) * 1.0 / AR_BINS, c->ols->rank == c->k, &c->bins[b], &err) < 0)
                break;
            continue;
        }
        const int64_t b0 = i * BLOCK_VOXELS, nb = c->V - b0 < BLOCK_VOXELS ? c->V - b0 : BLOCK_VOXELS;
        if (w->pass == PASS_OLS) {
            double *rec = c->rec ? c->rec + b0 * REC(c->k) : s.rec;
            project_block(c, &s, b0, nb, rec);
            ols_block(c, &s, b0, nb, rec);
        } else {
            ar_block(c, &s, b0, nb);
        }
        nf_progress(w->run, atomic_fetch_add(&w->done, nb) + nb, w->total, "voxels");
    }
    if (err.code && atomic_exchange(&w->failed, 1) == 0) {
        pthread_mutex_lock(&w->lock);
        w->err = err;
        pthread_mutex_unlock(&w->lock);
    }
    scratch_free(&s);
    return NULL;
}

/* Items over the node's threads, each with single-threaded BLAS (the node
 * sets it): whole blocks side by side beat splitting small GEMMs. */
static int run_pass(struct work *w, const struct nf_run *run)
{
    int threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    if (threads > w->n_items)
        threads = w->n_items > 0 ? (int)w->n_items : 1;
    if (threads > 64)
        threads = 64;
    pthread_t tids[64];
    int started = 0;
    atomic_store(&w->next, 0);
    for (int t = 0; t < threads - 1; t++)
        if (pthread_create(&tids[t], NULL, worker, w) == 0)
            started++;
    worker(w);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (atomic_load(&w->failed)) {
        *run->err = w->err;
        return w->err.code ? w->err.code : NF_EBUG;
    }
    return 0;
}

/* nilearn's _yule_walker on the OLS residuals less their mean over the whole
 * run, then its bins; and the list of bins that have voxels (each then gets
 * its factorisation). */
static int make_bins(struct glm_ctx *c, struct nf_error *err)
{
    const int64_t n = c->n, V = c->V, nbins = 2 * AR_BINS + 1;
    double total = 0;
    for (int64_t v = 0; v < V; v++)
        total += c->acf[v * 5];
    const double mu = total / ((double)n * (double)V), dn = (double)n;
    bool *used = nf_calloc((size_t)nbins, sizeof *used);
    c->bins = nf_calloc((size_t)nbins, sizeof *c->bins);
    c->bin = nf_malloc_array((size_t)V, sizeof *c->bin);
    c->todo = nf_malloc_array((size_t)nbins, sizeof *c->todo);
    if (!used || !c->bins || !c->bin || !c->todo) {
        free(used);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    for (int64_t v = 0; v < V; v++) {
        const double *a = c->acf + v * 5;
        double s0 = a[1] - 2 * mu * a[0] + dn * mu * mu;
        double s1 = a[2] - mu * (2 * a[0] - a[3] - a[4]) + (dn - 1) * mu * mu;
        double rho = (s1 / ((dn - 1) * dn)) / (s0 / (dn * dn));
        /* a series the design fits exactly has no autocorrelation to speak
         * of (nilearn fails on a singular Yule-Walker system) */
        if (!isfinite(rho) || !(s0 > 0))
            rho = 0;
        int64_t b = (int64_t)(rho * AR_BINS);   /* toward zero, as astype(int) */
        b = b < -AR_BINS ? -AR_BINS : b > AR_BINS ? AR_BINS : b;
        c->bin[v] = (int32_t)(b + AR_BINS);
        used[b + AR_BINS] = true;
    }
    for (int64_t b = 0; b < nbins; b++)
        if (used[b])
            c->todo[c->n_todo++] = b;
    free(used);
    return 0;
}

/* X as doubles (n x k) and its column names (borrowed from the table). */
static int read_design(const struct nf_value *xv, double **X, const char ***cols, const struct nf_node_inst *node,
                       struct nf_error *err)
{
    const struct nf_table *t = &xv->u.tab;
    *X = nf_malloc_array((size_t)(t->n_rows * t->n_cols) + 1, sizeof **X);
    *cols = nf_calloc((size_t)t->n_cols + 1, sizeof **cols);
    if (!*X || !*cols)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t j = 0; j < t->n_cols; j++) {
        const struct nf_column *col = &t->cols[j];
        if (!col->numeric)
            return FAIL_NODE(err, node, NF_EDATA, "the design's column '%s' is not numeric", col->name);
        (*cols)[j] = col->name;
        for (int64_t i = 0; i < t->n_rows; i++) {
            if (!isfinite(col->num[i]))
                return FAIL_NODE(err, node, NF_EDATA, "the design's column '%s' has %s in row %" PRId64,
                                 col->name, isnan(col->num[i]) ? "n/a (NaN)" : "an infinite value", i + 1);
            (*X)[i * t->n_cols + j] = col->num[i];
        }
    }
    return 0;
}


static void ctx_free(struct glm_ctx *c)
{
    free(c->X);
    free(c->Z);
    free(c->Zsum);
    free(c->Zf);
    free(c->XtX);
    free(c->XsX);
    contrasts_free(&c->cs);
    if (c->ols)
        factor_free(c->ols);
    free(c->ols);
    for (int64_t b = 0; c->bins && b < 2 * AR_BINS + 1; b++)
        factor_free(&c->bins[b]);
    free(c->bins);
    free(c->rec);
    free(c->acf);
    free(c->bin);
    free(c->todo);
}

/* The outputs some node reads (t and z always; the others on demand): NULL
 * in out[] and c->out[] for the rest. */
static int new_outputs(struct glm_ctx *c, const struct nf_run *run, const char *const *cols, struct nf_value **out,
                       struct nf_error *err)
{
    struct nf_geom *geom = run->in[GLM_IN_Y]->u.mat.geom;
    const int64_t rows[GLM_N_OUT] = { (int64_t)c->cs.c, (int64_t)c->cs.c, (int64_t)c->cs.c, (int64_t)c->cs.c,
                                      (int64_t)c->cs.c, c->k, 1 };
    char what[160];
    snprintf(what, sizeof what, "first-level GLM (%s), contrast ",
             c->prm->noise == GLM_NOISE_AR1 ? "AR(1)" : "OLS");
    char *effect = nf_asprintf("%seffect size", what), *variance = nf_asprintf("%svariance", what);
    const struct { int kind; double dof; const char *what; } stat[GLM_N_OUT] = {
        [GLM_OUT_EFFECT] = { NF_STAT_ESTIMATE, 0, effect },
        [GLM_OUT_VARIANCE] = { NF_STAT_ESTIMATE, 0, variance },
        [GLM_OUT_T] = { NF_STAT_T, c->dof, "first-level GLM t contrast" },
        [GLM_OUT_Z] = { NF_STAT_Z, 0, "first-level GLM z score (upper tail of t)" },
        [GLM_OUT_P] = { NF_STAT_P, 0, "first-level GLM one-sided p-value P(T > t)" },
        [GLM_OUT_BETAS] = { NF_STAT_ESTIMATE, 0, "first-level GLM parameter estimates" },
        [GLM_OUT_RESIDUAL_VARIANCE] = { NF_STAT_ESTIMATE, 0,
                                        "first-level GLM residual variance (whitened SSE / (n - k))" },
    };
    int rc = 0;
    for (int o = 0; o < GLM_N_OUT && rc == 0; o++) {
        if ((glm_outputs[o].flags & NF_PORT_ON_DEMAND) && !nf_run_wants(run, o))
            continue;
        if (!(out[o] = nf_value_new_matrix(rows[o], c->V, geom, err))) {
            rc = err->code ? err->code : NF_ENOMEM;
            break;
        }
        c->out[o] = out[o]->u.mat.data;
        const char *const *names = o == GLM_OUT_BETAS ? cols : o == GLM_OUT_RESIDUAL_VARIANCE ? NULL
                                   : (const char *const *)c->cs.names;
        if (names && nf_matrix_set_row_names(out[o], names, err) < 0)
            rc = err->code;
        else
            nf_value_set_stat(out[o], stat[o].kind, stat[o].dof, stat[o].what);
    }
    free(effect);
    free(variance);
    return rc;
}

static int glm_run(struct nf_run *run)
{
    const struct glm_params *prm = run->params;
    const struct nf_node_inst *node = run->node;
    const struct nf_value *xin = run->in[GLM_IN_X], *yin = run->in[GLM_IN_Y];
    struct glm_ctx c = { .prm = prm, .K = nf_kernels_cpu() };
    struct nf_value *out[GLM_N_OUT] = { 0 };
    const char **cols = NULL;
    int rc = 0, blas = nf_blas_threads();
    nf_blas_set_threads(1);

    c.n = yin->u.mat.rows;
    c.V = yin->u.mat.cols;
    c.k = xin->u.tab.n_cols;
    c.kp = (c.k + 3) / 4 * 4;
    c.Y = yin->u.mat.data;
    if (xin->u.tab.n_rows != c.n) {
        rc = FAIL_NODE(run->err, node, NF_ESHAPE, "the design X has %" PRId64 " rows but Y has %" PRId64
                       " frames: they must be the same run, row for row", xin->u.tab.n_rows, c.n);
        goto fail;
    }
    if (c.k < 1 || c.n <= c.k) {
        rc = FAIL_NODE(run->err, node, NF_EDATA, "the design has %" PRId64 " columns for %" PRId64 " frames: "
                       "a GLM needs more frames than regressors", c.k, c.n);
        goto fail;
    }
    if (c.V < 1) {
        rc = FAIL_NODE(run->err, node, NF_EDATA, "Y has no voxels");
        goto fail;
    }
    NF_TRY(rc = read_design(xin, &c.X, &cols, node, run->err));
    NF_TRY(rc = read_contrasts(prm, cols, (size_t)c.k, &c.cs, node, run->err));
    NF_TRY(rc = design_sums(&c, run->err));
    if (!(c.ols = nf_calloc(1, sizeof *c.ols))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = factor_make(&c, 0, false, c.ols, run->err));
    /* nilearn: the residual degrees of freedom, n - rank of the design */
    c.dof = (double)(c.n - c.ols->rank);
    nf_t_tail_init(&c.tail, c.dof);
    if (c.ols->rank < c.k)
        nf_warn(nf_node_id(node), "the design has rank %" PRId64 " for %" PRId64 " columns (some columns are "
                "combinations of others): contrasts of those columns are not estimable", c.ols->rank, c.k);
    if (prm->noise == GLM_NOISE_AR1) {
        /* not zero-filled: each worker writes its blocks' records first */
        c.acf = nf_malloc_array((size_t)c.V * 5, sizeof *c.acf);
        c.rec = nf_malloc_array((size_t)c.V * REC(c.k), sizeof *c.rec);
        if (!c.acf || !c.rec) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    NF_TRY(rc = new_outputs(&c, run, cols, out, run->err));

    const int64_t blocks = (c.V + BLOCK_VOXELS - 1) / BLOCK_VOXELS;
    struct work w = { .c = &c, .pass = PASS_OLS, .n_items = blocks, .run = run,
                      .total = (prm->noise == GLM_NOISE_AR1 ? 2 : 1) * c.V };
    pthread_mutex_init(&w.lock, NULL);
    rc = run_pass(&w, run);
    if (rc == 0 && prm->noise == GLM_NOISE_AR1) {
        rc = make_bins(&c, run->err);
        if (rc == 0) {
            w.pass = PASS_FACTOR;
            w.n_items = c.n_todo;
            rc = run_pass(&w, run);
        }
        if (rc == 0) {
            w.pass = PASS_AR;
            w.n_items = blocks;
            rc = run_pass(&w, run);
        }
    }
    pthread_mutex_destroy(&w.lock);
    if (rc < 0)
        goto fail;
    for (int o = 0; o < GLM_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    nf_blas_set_threads(blas);
    for (int o = 0; o < GLM_N_OUT; o++)
        nf_value_unref(out[o]);
    free(cols);
    ctx_free(&c);
    return nf_error_on_node(node, run->err, rc);
}

/* Per thread: a block of series (float), records and betas; per voxel with AR(1):
 * its record and residual sums, and its bin; the factorisations (one per
 * AR bin). */
static uint64_t glm_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct glm_params *p = params;
    (void)out;
    double n = (double)in[GLM_IN_Y].dim[0], V = (double)in[GLM_IN_Y].dim[1], k = (double)in[GLM_IN_X].dim[1];
    if (k < 1)
        k = 64;
    double threads = 16, per_thread = (4 * n + 8 * (2 * k + 4) + 4 * 2 * k + 16 * (k + 3) + 24) * BLOCK_VOXELS;
    double per_voxel = p->noise == GLM_NOISE_AR1 ? 8 * (2 * k + 5) + 40 + 4 : 0;
    double factors = (p->noise == GLM_NOISE_AR1 ? 2 * AR_BINS + 2 : 1) * 8 * (k + 3) * (k + 4) + 8 * (2 * k + 3) * n;
    return (uint64_t)(threads * per_thread + per_voxel * V + factors);
}

const struct nf_node_type nf_node_glm = {
    .name = "glm",
    .summary = "first-level GLM of one run (OLS or AR(1)) with t contrasts, as nilearn's FirstLevelModel",
    .description =
        "Fits the design X (a table, e.g. the design node's) to every voxel of Y (frames x voxels, e.g. the "
        "mask node's output; the rows are the same frames) as nilearn 0.14's FirstLevelModel does: with "
        "`scaling: mean` (its default signal_scaling=0) each voxel first becomes percent signal change, "
        "100 * (y / max(mean, 1) - 1); with `noise: ar1` (its default) the OLS residuals' lag-1 "
        "autocorrelation of each voxel, cut to two decimals toward zero as nilearn bins it, whitens the "
        "design and the data for a refit (one factorisation per bin). Each contrast, \"name = expression\" "
        "over the design's column names or \"name = [weights]\", gives a row of `effect`, `variance`, `t`, "
        "`z` and `p` (nilearn's compute_contrast for a t contrast: n - rank(X) degrees of freedom, p the "
        "upper tail P(T > t), z its normal quantile clipped as nilearn clips it); `betas` has a row per "
        "design column and `residual_variance` the whitened residuals' sum of squares over n - k. Maps "
        "keep Y's voxel geometry, so summarize writes them as NIfTI images. A design whose rows differ from "
        "Y's frames, a contrast naming no column of the design, and malformed expressions are errors. "
        "Mapped over runs (a design and a masked run per item), it fits each run.",
    .version = 2,
    .params = glm_params_table,
    .params_size = sizeof(struct glm_params),
    .inputs = glm_inputs,
    .outputs = glm_outputs,
    .check = glm_check,
    .resolve = glm_resolve,
    .estimate = glm_estimate,
    .run_cpu = glm_run,
    .cost = nf_glm_cost,
    .methods = glm_methods,
};
