/* test_glm.c — the `glm` node against direct double-precision computations
 * of what nilearn's FirstLevelModel defines: OLS betas, t, p and z from the
 * normal equations (Gauss-Jordan), p from the closed-form Student t
 * distribution of even degrees of freedom, z by bisection on erfc; mean
 * scaling to percent signal change (a voxel of mean below 1 divided by 1);
 * AR(1) by the definition, voxel by voxel (OLS residuals less their mean over
 * the run, lag-1 Yule-Walker, int(100 rho) / 100, the design and the series
 * whitened, the normal equations again); a rank-deficient design against the
 * reduced one. Also the tail functions against scipy's values, the contrast
 * parser (weights and every kind of malformed expression, with its message),
 * and the node's errors: rows that differ, a contrast naming no column.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/distributions.h"
#include "core/rng.h"
#include "core/util.h"
#include "glm/glm.h"
#include "ref_solve.h"

/* ---- the contrast parser ---- */

static const char *const COLS[] = { "a", "b", "c_2", "constant" };

static void expect_weights(const char *expr, const double *want)
{
    double w[4];
    char why[512];
    int rc = glm_contrast_weights(expr, COLS, 4, w, why, sizeof why);
    if (rc != 0)
        fail_msg("'%s': %s", expr, why);
    for (int j = 0; j < 4; j++)
        if (fabs(w[j] - want[j]) > 1e-15)
            fail_msg("'%s': weight %d is %g, expected %g", expr, j, w[j], want[j]);
    /* the syntax-only check accepts it too */
    assert_int_equal(glm_contrast_weights(expr, NULL, 0, NULL, why, sizeof why), 0);
}

static void expect_refused(const char *expr, const char *needle, bool syntax_only_too)
{
    double w[4];
    char why[512];
    assert_int_equal(glm_contrast_weights(expr, COLS, 4, w, why, sizeof why), NF_EINVAL);
    if (!strstr(why, needle))
        fail_msg("'%s': the message \"%s\" lacks \"%s\"", expr, why, needle);
    if (syntax_only_too)
        assert_int_equal(glm_contrast_weights(expr, NULL, 0, NULL, why, sizeof why), NF_EINVAL);
}

#define W(...) ((const double[]){ __VA_ARGS__ })

static void test_contrast_weights(void **state)
{
    (void)state;
    expect_weights("a - b", W(1, -1, 0, 0));
    expect_weights("2*a - (b + c_2)", W(2, -1, -1, 0));
    expect_weights("(a + b)/2", W(0.5, 0.5, 0, 0));
    expect_weights("a*2 - -b", W(2, 1, 0, 0));
    expect_weights("-(a - 3 * (b - c_2)) + a", W(0, 3, -3, 0));
    expect_weights("0.5*a+0.5*b-c_2", W(0.5, 0.5, -1, 0));
    expect_weights("a + a", W(2, 0, 0, 0));
    expect_weights("1e-1 * constant", W(0, 0, 0, 0.1));
    expect_weights("[1, -1]", W(1, -1, 0, 0));
    expect_weights(" [0, 0, 0.25, 1] ", W(0, 0, 0.25, 1));
}

static void test_contrast_errors(void **state)
{
    (void)state;
    expect_refused("a - d", "'d' is not a column of the design (columns: a, b, c_2, constant)", false);
    expect_refused("a - d", "at character 5", false);
    expect_refused("a * b", "a product of two columns", true);
    expect_refused("a / b", "division by a column", true);
    expect_refused("a / 0", "division by zero", true);
    expect_refused("a +", "the expression ends where a name", true);
    expect_refused("a - b + 1", "a constant term (1)", true);
    expect_refused("(a - b", "'(' is not closed", true);
    expect_refused("a - b)", "')' where '+', '-', '*', '/' or the end was expected", true);
    expect_refused("2a", "write 2*a, not 2a", true);
    expect_refused("1 + 2", "no column in the expression", true);
    expect_refused("a - a", "every weight cancels out", false);
    expect_refused("a $ b", "'$' where", true);
    expect_refused("", "the expression ends", true);
    expect_refused("[1, 2, 3, 4, 5]", "5 weights or more for a design of 4 columns", false);
    expect_refused("[1, a]", "numbers only", true);
    expect_refused("[1 2]", "',' or ']' expected", true);
    expect_refused("[]", "an empty weight list", true);
    expect_refused("[1] + a", "text after the weight list", true);
    /* nesting is bounded, not a stack overflow */
    char deep[400];
    memset(deep, '(', 300);
    strcpy(deep + 300, "a");
    expect_refused(deep, "nested", true);
    memset(deep, '-', 300);
    expect_refused(deep, "nested", true);
}

static void test_contrast_split(void **state)
{
    (void)state;
    char why[512], *name, *expr;
    assert_int_equal(glm_contrast_split("  faces_vs_houses =  faces - houses ", &name, &expr, why, sizeof why), 0);
    assert_string_equal(name, "faces_vs_houses");
    assert_string_equal(expr, "faces - houses");
    free(name);
    free(expr);
    assert_int_equal(glm_contrast_split("faces - houses", &name, &expr, why, sizeof why), NF_EINVAL);
    assert_non_null(strstr(why, "has no '=': write each contrast as \"name = expression\""));
    assert_null(name);
    assert_int_equal(glm_contrast_split(" = a", &name, &expr, why, sizeof why), NF_EINVAL);
    assert_non_null(strstr(why, "has no name before '='"));
    assert_int_equal(glm_contrast_split("x = ", &name, &expr, why, sizeof why), NF_EINVAL);
    assert_non_null(strstr(why, "has no expression after '='"));
    assert_int_equal(glm_contrast_split("x y = a", &name, &expr, why, sizeof why), NF_EINVAL);
    assert_non_null(strstr(why, "characters other than letters"));
}

/* ---- t, p and z ---- */

/* P(T > t) for even dof from the closed form (Abramowitz & Stegun 26.7.3):
 * P(|T| < t) = sin θ Σ_{j<ν/2} a_j cos^{2j}θ, a_j = 1·3···(2j-1) / (2·4···2j),
 * θ = atan(t / √ν). The full series sums to 1 / sin θ, so in the far tail
 * P(T > t) = sin θ Σ_{j>=ν/2} a_j cos^{2j}θ / 2, without cancellation. */
static double t_sf_even(double t, int dof)
{
    double th = atan(fabs(t) / sqrt(dof)), c2 = cos(th) * cos(th), term = 1, sum = 1, sf;
    if (c2 < 0.5) {
        for (int j = 1; j < dof / 2; j++)
            term *= c2 * (2 * j - 1) / (2 * j);
        sum = 0;
        for (int j = dof / 2; j < dof / 2 + 4000 && term > 1e-30 * sum; j++) {
            term *= c2 * (2 * j - 1) / (2 * j);
            sum += term;
        }
        sf = sin(th) * sum / 2;
    } else {
        for (int j = 1; j <= dof / 2 - 1; j++) {
            term *= c2 * (2 * j - 1) / (2 * j);
            sum += term;
        }
        sf = (1 - sin(th) * sum) / 2;
    }
    return t < 0 ? 1 - sf : sf;
}

/* z with 0.5 erfc(z / √2) = p, by bisection. */
static double z_of_p(double p)
{
    double lo = -40, hi = 40;
    for (int i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        if (0.5 * erfc(mid / M_SQRT2) > p)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

/* t with P(T > t) = p (dof), by bisection on nf_t_sf. */
static double t_isf(double p, double dof)
{
    double lo = 0, hi = 1;
    while (nf_t_sf(hi, dof) > p)
        hi *= 2;
    for (int i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        if (nf_t_sf(mid, dof) > p)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

/* chi-square(1) upper quantile: x with erfc(sqrt(x / 2)) = p, by bisection. */
static double chi2_1_isf(double p)
{
    double lo = 0, hi = 2000;
    for (int i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        if (erfc(sqrt(mid / 2)) > p)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

/* The F tail and quantile (permute's cluster_p for F contrasts) against
 * scipy.stats.f.sf values, closed forms (d1 = 2: P(F > f) = (1 + 2f/d2)^(-d2/2);
 * d2 = 2: P(F > f) = 1 - (d1 f / (2 + d1 f))^(d1/2); F(1, 1) = cot²(pi p / 2);
 * F(1, d) = t(d)², through nf_t_sf), the chi-square limits of F(d1, inf)
 * (F(2, inf) = -ln p; F(1, inf) = chi2(1)) and table quantiles. */
static void test_f_distribution(void **state)
{
    (void)state;
    static const struct { double f, d1, d2, sf; } S[] = {
        { 3.7, 3, 10, 0.050274934080059876 },   { 0.5, 6, 9, 0.7942178164406177 },
        { 0.02, 4, 20, 0.9991476189788031 },    { 12.0, 2, 5, 0.012343263949723541 },
        { 150.0, 5, 30, 2.779665893110154e-20 }, { 2.2, 40, 60, 0.0027684818516963893 },
        { 1.1, 1, 1, 0.4848366520178962 },      { 900.0, 3, 3, 6.275047416602801e-05 },
        { 0.9, 1000, 1000, 0.9520530748136555 },
    };
    for (size_t i = 0; i < sizeof S / sizeof S[0]; i++) {
        double got = nf_f_sf(S[i].f, S[i].d1, S[i].d2);
        if (fabs(got - S[i].sf) > 1e-12 * S[i].sf)
            fail_msg("f.sf(%g, %g, %g) = %.17g, scipy %.17g", S[i].f, S[i].d1, S[i].d2, got, S[i].sf);
    }
    assert_true(nf_f_sf(0, 3, 10) == 1.0 && nf_f_sf(-1, 3, 10) == 1.0);
    static const double P[] = { 0.4, 0.05, 0.01, 1e-3, 1e-6, 1e-12, 1e-40 };
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        double p = P[i];
        for (double d = 1; d <= 200; d *= 3) {
            /* d1 = 2 and d2 = 2: the incomplete beta in closed form */
            double want = d / 2 * expm1(-2 / d * log(p)), got = nf_f_isf(p, 2, d);
            if (fabs(got - want) > 1e-12 * want)
                fail_msg("f.isf(%g, 2, %g) = %.17g, closed form %.17g", p, d, got, want);
            double u = -expm1(2 / d * log1p(-p));   /* 1 - (1 - p)^(2/d1) = 2 / (2 + d1 f) */
            want = 2 * (1 - u) / (d * u);
            got = nf_f_isf(p, d, 2);
            if (fabs(got - want) > 1e-10 * want)
                fail_msg("f.isf(%g, %g, 2) = %.17g, closed form %.17g", p, d, got, want);
            /* F(1, d) = t(d)²: P(F > f) = 2 P(T > sqrt f) */
            got = nf_f_isf(p, 1, d);
            assert_true(fabs(2 * nf_t_sf(sqrt(got), d) - p) <= 1e-11 * p);
            double t = t_isf(p / 2, d);
            assert_true(fabs(got - t * t) <= 1e-11 * got);
        }
        double c = 1 / tan(M_PI * p / 2), got = nf_f_isf(p, 1, 1);
        assert_true(fabs(got - c * c) <= 1e-11 * c * c);
        /* d2 -> inf: d1 F -> chi2(d1), F(2, d2) = L + L² / d2 + ... with L = -ln p */
        double L = -log(p);
        assert_true(fabs(nf_f_isf(p, 2, 1e6) - L) <= 1.01 * L * L / 1e6);
        if (p >= 1e-12)
            assert_true(fabs(nf_f_isf(p, 1, 1e6) - chi2_1_isf(p)) <= 1e-4 * chi2_1_isf(p));
    }
    /* scipy.stats.f.isf (tables: 3.71, 4.10, 2.69); scipy's own inversion is
     * good to about 1e-9 relative (it is off by 6e-9 at 1e-10, 1, 40) */
    static const struct { double p, d1, d2, f; } Q[] = {
        { 0.05, 3, 10, 3.7082648190468435 }, { 0.01, 5, 20, 4.102684630584732 },
        { 0.05, 4, 30, 2.6896275736914177 }, { 0.2, 7, 25, 1.5391312212991364 },
        { 0.01, 10, 3, 27.228734121474282 },
    };
    for (size_t i = 0; i < sizeof Q / sizeof Q[0]; i++)
        assert_true(fabs(nf_f_isf(Q[i].p, Q[i].d1, Q[i].d2) - Q[i].f) <= 1e-9 * Q[i].f);
}

static void test_tails(void **state)
{
    (void)state;
    /* scipy.stats.t.sf and norm.isf (scipy 1.x), exact to their last digits */
    static const struct { double t, dof, sf; } T[] = {
        { 0.5, 10, 0.3139468028714865 }, { 2.0, 36, 0.026544243554942563 },
        { -1.3, 36, 0.8990683862418282 }, { 8.0, 250, 2.326400759458774e-14 },
        { 40.0, 250, 6.0089391632941994e-111 }, { 3.0, 3.5, 0.02368761974237321 },
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        double got, z;
        glm_t_p_z(T[i].t, T[i].dof, &got, &z);
        if (fabs(got - T[i].sf) > 1e-12 * T[i].sf)
            fail_msg("t.sf(%g, %g) = %.17g, scipy %.17g", T[i].t, T[i].dof, got, T[i].sf);
    }
    static const struct { double p, z; } Z[] = {
        { 0.5, 0.0 }, { 0.025, 1.9599639845400545 }, { 1e-10, 6.361340902404056 },
        { 1e-300, 37.0470962993612 }, { 0.3, 0.5244005127080409 },
    };
    for (size_t i = 0; i < sizeof Z / sizeof Z[0]; i++)
        assert_true(fabs(nf_normal_isf(Z[i].p) - Z[i].z) <= 1e-13 * (1 + Z[i].z));
    /* p and z for both signs; the far tail is clipped at p = 1e-300 */
    for (double t = -6; t <= 6; t += 0.37) {
        double p, z;
        glm_t_p_z(t, 36, &p, &z);
        assert_true(fabs(p - t_sf_even(t, 36)) < 1e-12);
        double want = t >= 0 ? z_of_p(t_sf_even(t, 36)) : -z_of_p(t_sf_even(-t, 36));
        assert_true(fabs(z - want) < 1e-9);
    }
    double p, z;
    glm_t_p_z(1e10, 40, &p, &z);
    assert_true(p < 1e-300);
    assert_true(fabs(z - 37.0470962993612) < 1e-10);
    glm_t_p_z(-1e10, 40, &p, &z);
    assert_true(fabs(z + 37.0470962993612) < 1e-10);
    assert_true(p == 1.0);
}

/* ---- the node and its reference ---- */

static struct nf_value *design_table(const double *X, int64_t n, int64_t k, const char *const *names)
{
    struct nf_error err = { 0 };
    struct nf_value *t = nf_value_new_table(n, k, &err);
    assert_non_null(t);
    for (int64_t j = 0; j < k; j++) {
        assert_int_equal(nf_table_column_numeric(t, j, names[j], &err), 0);
        for (int64_t i = 0; i < n; i++)
            t->u.tab.cols[j].num[i] = X[i * k + j];
    }
    return t;
}

static struct nf_value *data_matrix(const double *Y, int64_t n, int64_t V)
{
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(n, V, NULL, &err);
    assert_non_null(m);
    for (int64_t i = 0; i < n * V; i++)
        m->u.mat.data[i] = (float)Y[i];
    return m;
}

static void set_params(struct glm_params *p, int noise, int scaling, const char *const *contrasts)
{
    const struct nf_node_type *t = nf_node_type_find("glm");
    assert_non_null(t);
    memset(p, 0, sizeof *p);
    nf_params_defaults(t, p);
    p->noise = noise;
    p->scaling = scaling;
    size_t c = 0;
    while (contrasts[c])
        c++;
    p->contrasts.n = c;
    p->contrasts.v = calloc(c, sizeof(char *));
    for (size_t i = 0; i < c; i++)
        p->contrasts.v[i] = strdup(contrasts[i]);
}

static void params_free(struct glm_params *p)
{
    for (size_t i = 0; i < p->contrasts.n; i++)
        free(p->contrasts.v[i]);
    free(p->contrasts.v);
}

/* Run the node (threads as given); 0 and out[] filled, or the error code. */
/* wanted: the outputs consumed downstream (NULL: all). */
static int run_glm_wanting(const struct glm_params *p, struct nf_value *x, struct nf_value *y, int threads,
                           const bool *wanted, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *in[GLM_N_IN] = { x, y };
    struct nf_env env = { .threads = threads };
    struct nf_run run = { .params = p, .env = &env, .in = in, .out = out, .err = err, .wanted = wanted };
    *err = (struct nf_error){ 0 };
    for (int o = 0; o < GLM_N_OUT; o++)
        out[o] = NULL;
    int rc = nf_node_glm.run_cpu(&run);
    if (rc < 0)
        for (int o = 0; o < GLM_N_OUT; o++)
            assert_null(out[o]);
    return rc;
}

static int run_glm(const struct glm_params *p, struct nf_value *x, struct nf_value *y, int threads,
                   struct nf_value **out, struct nf_error *err)
{
    return run_glm_wanting(p, x, y, threads, NULL, out, err);
}

static void outputs_free(struct nf_value **out)
{
    for (int o = 0; o < GLM_N_OUT; o++)
        nf_value_unref(out[o]);
}

/* The reference fit of one series y (n) on X (n x k), both already whitened:
 * betas from the normal equations, dispersion SSE / (n - k), and per
 * contrast effect, variance, t. */
struct ref_fit { double beta[8], dispersion, effect[4], variance[4], t[4]; };

static void ref_fit(const double *X, const double *y, int64_t n, int64_t k, const double *W, int64_t c,
                    struct ref_fit *r)
{
    double A[64], B[8], inv[64];
    for (int64_t i = 0; i < k; i++) {
        B[i] = 0;
        for (int64_t t = 0; t < n; t++)
            B[i] += X[t * k + i] * y[t];
        for (int64_t j = 0; j < k; j++) {
            A[i * k + j] = 0;
            for (int64_t t = 0; t < n; t++)
                A[i * k + j] += X[t * k + i] * X[t * k + j];
        }
    }
    double A2[64];
    memcpy(A2, A, sizeof A);
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = 0; j < k; j++)
            inv[i * k + j] = i == j;
    gauss(A, B, k, 1);
    gauss(A2, inv, k, k);
    double sse = 0;
    for (int64_t t = 0; t < n; t++) {
        double e = y[t];
        for (int64_t j = 0; j < k; j++)
            e -= X[t * k + j] * B[j];
        sse += e * e;
    }
    memcpy(r->beta, B, (size_t)k * sizeof *B);
    r->dispersion = sse / (double)(n - k);
    for (int64_t q = 0; q < c; q++) {
        const double *w = W + q * k;
        r->effect[q] = 0;
        double cv = 0;
        for (int64_t i = 0; i < k; i++) {
            r->effect[q] += w[i] * B[i];
            for (int64_t j = 0; j < k; j++)
                cv += w[i] * inv[i * k + j] * w[j];
        }
        r->variance[q] = cv * r->dispersion;
        r->t[q] = r->effect[q] / sqrt(r->variance[q]);
    }
}

static void expect_close(const char *what, int64_t v, double got, double want, double rel, double abs_tol)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol))
        fail_msg("%s of voxel %lld: %.9g, reference %.9g", what, (long long)v, got, want);
}

/* A design of n frames: two boxcar-like conditions a, b, a drift and a
 * constant; data with known betas plus noise (AR(1) with coefficient
 * rho[v] when rho is given). */
enum { N = 80, K = 4, NV = 60 };

static double normal(uint64_t *state)
{
    double u1 = nf_rand_uniform(state), u2 = nf_rand_uniform(state);
    return sqrt(-2 * log(u1 > 0 ? u1 : 1e-300)) * cos(2 * M_PI * u2);
}
static const char *const NAMES[K] = { "a", "b", "drift", "constant" };

static void make_problem(double *X, double *Y, const double *rho, double baseline, uint64_t seed)
{
    uint64_t rng = seed;
    for (int t = 0; t < N; t++) {
        X[t * K + 0] = (t / 8) % 2 == 0 ? 1.0 + 0.1 * sin(t) : 0.0;
        X[t * K + 1] = (t / 5) % 3 == 1 ? 1.0 : 0.2 * cos(t);
        X[t * K + 2] = cos(M_PI * (t + 0.5) / N);
        X[t * K + 3] = 1;
    }
    for (int v = 0; v < NV; v++) {
        double ba = 2.0 * sin(v), bb = 0.5 + 0.01 * v, bd = 3.0, prev = 0;
        for (int t = 0; t < N; t++) {
            double e = normal(&rng);
            double noise = rho ? rho[v] * prev + e : e;
            prev = noise;
            Y[t * NV + v] = baseline + v + ba * X[t * K + 0] + bb * X[t * K + 1] + bd * X[t * K + 2] + noise;
        }
    }
}

static const double CW[2 * K] = { 1, -1, 0, 0, 0, 0, 1, 0 };   /* "d = a - b", "s = [0, 0, 1]" */
static const char *const CONTRASTS[] = { "d = a - b", "s = [0, 0, 1]", NULL };

/* Check every output of voxel v against a reference fit (dof for p and z). */
static void check_voxel(struct nf_value **out, int64_t v, const struct ref_fit *r, double dof, double rel)
{
    for (int j = 0; j < K; j++)
        expect_close("beta", v, out[GLM_OUT_BETAS]->u.mat.data[j * NV + v], r->beta[j], rel, 1e-4);
    expect_close("residual variance", v, out[GLM_OUT_RESIDUAL_VARIANCE]->u.mat.data[v], r->dispersion, rel, 0);
    for (int q = 0; q < 2; q++) {
        expect_close("effect", v, out[GLM_OUT_EFFECT]->u.mat.data[q * NV + v], r->effect[q], rel, 1e-4);
        expect_close("variance", v, out[GLM_OUT_VARIANCE]->u.mat.data[q * NV + v], r->variance[q], rel, 0);
        expect_close("t", v, out[GLM_OUT_T]->u.mat.data[q * NV + v], r->t[q], rel, 1e-4);
        double tail = t_sf_even(fabs(r->t[q]), (int)dof);
        double p = r->t[q] >= 0 ? tail : 1 - tail, z = r->t[q] >= 0 ? z_of_p(tail) : -z_of_p(tail);
        expect_close("p", v, out[GLM_OUT_P]->u.mat.data[q * NV + v], p, rel * 10, 1e-7);
        expect_close("z", v, out[GLM_OUT_Z]->u.mat.data[q * NV + v], z, rel, 1e-4);
    }
}

static void test_ols(void **state)
{
    (void)state;
    double *X = malloc(sizeof(double) * N * K), *Y = malloc(sizeof(double) * N * NV), y[N];
    make_problem(X, Y, NULL, 0, 11);
    struct glm_params p;
    set_params(&p, GLM_NOISE_OLS, GLM_SCALING_NONE, CONTRASTS);
    struct nf_value *x = design_table(X, N, K, NAMES), *ym = data_matrix(Y, N, NV), *out[GLM_N_OUT];
    struct nf_error err;
    assert_int_equal(run_glm(&p, x, ym, 3, out, &err), 0);
    for (int o = 0; o < GLM_N_OUT; o++)
        assert_int_equal(out[o]->u.mat.cols, NV);
    assert_int_equal(out[GLM_OUT_T]->u.mat.rows, 2);
    assert_string_equal(out[GLM_OUT_T]->u.mat.row_names[0], "d");
    assert_string_equal(out[GLM_OUT_Z]->u.mat.row_names[1], "s");
    assert_string_equal(out[GLM_OUT_BETAS]->u.mat.row_names[2], "drift");
    assert_int_equal(out[GLM_OUT_T]->stat.kind, NF_STAT_T);
    assert_true(out[GLM_OUT_T]->stat.dof == N - K);
    for (int64_t v = 0; v < NV; v++) {
        for (int t = 0; t < N; t++)
            y[t] = (float)Y[t * NV + v];   /* the node sees float data */
        struct ref_fit r;
        ref_fit(X, y, N, K, CW, 2, &r);
        check_voxel(out, v, &r, N - K, 2e-4);
    }
    /* the same bits with one thread */
    struct nf_value *one[GLM_N_OUT];
    assert_int_equal(run_glm(&p, x, ym, 1, one, &err), 0);
    for (int o = 0; o < GLM_N_OUT; o++)
        assert_memory_equal(one[o]->u.mat.data, out[o]->u.mat.data,
                            (size_t)(out[o]->u.mat.rows * NV) * sizeof(float));
    outputs_free(one);
    outputs_free(out);
    nf_value_unref(x);
    nf_value_unref(ym);
    params_free(&p);
    free(X);
    free(Y);
}

/* Percent signal change: 100 (y / max(mean, 1) - 1); one voxel of mean
 * below 1 (only shifted) and one of mean 0. */
static void test_mean_scaling(void **state)
{
    (void)state;
    double *X = malloc(sizeof(double) * N * K), *Y = malloc(sizeof(double) * N * NV), y[N];
    make_problem(X, Y, NULL, 1000, 12);
    for (int t = 0; t < N; t++) {
        Y[t * NV + 0] = 0.3 + 0.2 * X[t * K + 0] + 0.05 * sin(3.0 * t);
        Y[t * NV + 1] = 0.4 * (X[t * K + 1] - 0.3) + 0.05 * cos(5.0 * t);
    }
    double mean1 = 0;   /* voxel 1's mean, taken out so that it is 0 in float */
    for (int t = 0; t < N; t++)
        mean1 += (float)Y[t * NV + 1];
    for (int t = 0; t < N; t++)
        Y[t * NV + 1] -= mean1 / N;
    struct glm_params p;
    set_params(&p, GLM_NOISE_OLS, GLM_SCALING_MEAN, CONTRASTS);
    struct nf_value *x = design_table(X, N, K, NAMES), *ym = data_matrix(Y, N, NV), *out[GLM_N_OUT];
    struct nf_error err;
    assert_int_equal(run_glm(&p, x, ym, 2, out, &err), 0);
    for (int64_t v = 0; v < NV; v++) {
        double mean = 0;
        for (int t = 0; t < N; t++)
            mean += (float)Y[t * NV + v];
        mean /= N;
        double divisor = mean > 1 ? mean : 1;
        for (int t = 0; t < N; t++)
            y[t] = 100 * ((float)Y[t * NV + v] / divisor - 1);
        struct ref_fit r;
        ref_fit(X, y, N, K, CW, 2, &r);
        check_voxel(out, v, &r, N - K, 5e-4);
    }
    outputs_free(out);
    nf_value_unref(x);
    nf_value_unref(ym);
    params_free(&p);
    free(X);
    free(Y);
}

/* AR(1) by the definition, voxel by voxel, on data of the given baseline,
 * scaled or not. */
static void ar1_case(double baseline, int scaling, uint64_t seed)
{
    double *X = malloc(sizeof(double) * N * K), *Y = malloc(sizeof(double) * N * NV), rho[NV];
    for (int v = 0; v < NV; v++)
        rho[v] = -0.3 + 0.9 * v / NV;
    make_problem(X, Y, rho, baseline, seed);
    struct glm_params p;
    set_params(&p, GLM_NOISE_AR1, scaling, CONTRASTS);
    struct nf_value *x = design_table(X, N, K, NAMES), *ym = data_matrix(Y, N, NV), *out[GLM_N_OUT];
    struct nf_error err;
    assert_int_equal(run_glm(&p, x, ym, 4, out, &err), 0);

    /* the scaled series and their OLS residuals, in double */
    double *S = malloc(sizeof(double) * N * NV), *R = malloc(sizeof(double) * N * NV), total = 0;
    double y[N], Xw[N * K], yw[N];
    for (int64_t v = 0; v < NV; v++) {
        double mean = 0;
        for (int t = 0; t < N; t++)
            mean += (float)Y[t * NV + v];
        mean /= N;
        for (int t = 0; t < N; t++)
            y[t] = S[t * NV + v] = scaling == GLM_SCALING_MEAN ? 100 * ((float)Y[t * NV + v] / (mean > 1 ? mean : 1) - 1)
                                                                 : (float)Y[t * NV + v];
        struct ref_fit r;
        ref_fit(X, y, N, K, CW, 0, &r);
        for (int t = 0; t < N; t++) {
            double e = y[t];
            for (int j = 0; j < K; j++)
                e -= X[t * K + j] * r.beta[j];
            R[t * NV + v] = e;
            total += e;
        }
    }
    double mu = total / (N * NV);
    int checked = 0, bins_seen = 0, last_bin = 1000;
    for (int64_t v = 0; v < NV; v++) {
        double s0 = 0, s1 = 0;
        for (int t = 0; t < N; t++) {
            double e = R[t * NV + v] - mu;
            s0 += e * e;
            if (t > 0)
                s1 += e * (R[(t - 1) * NV + v] - mu);
        }
        double r_hat = (s1 / (N - 1)) / (s0 / N), scaled = r_hat * 100;
        /* a float residual may fall on the other side of a bin edge */
        if (fabs(scaled - trunc(scaled)) < 1e-3 || fabs(scaled - trunc(scaled)) > 1 - 1e-3)
            continue;
        int bin = (int)trunc(scaled);
        if (bin != last_bin)
            bins_seen++;
        last_bin = bin;
        double a = bin / 100.0;
        for (int t = 0; t < N; t++) {
            yw[t] = t == 0 ? S[v] : S[t * NV + v] - a * S[(t - 1) * NV + v];
            for (int j = 0; j < K; j++)
                Xw[t * K + j] = t == 0 ? X[j] : X[t * K + j] - a * X[(t - 1) * K + j];
        }
        struct ref_fit r;
        ref_fit(Xw, yw, N, K, CW, 2, &r);
        check_voxel(out, v, &r, N - K, 5e-4);
        checked++;
    }
    assert_true(checked >= NV - 3);
    assert_true(bins_seen >= 20);   /* the data spread over many bins */
    /* the same bits with one thread */
    struct nf_value *one[GLM_N_OUT];
    assert_int_equal(run_glm(&p, x, ym, 1, one, &err), 0);
    for (int o = 0; o < GLM_N_OUT; o++)
        assert_memory_equal(one[o]->u.mat.data, out[o]->u.mat.data,
                            (size_t)(out[o]->u.mat.rows * NV) * sizeof(float));
    outputs_free(one);
    /* only z read downstream: the on-demand outputs are not made, t and z
     * are the same bits */
    bool wanted[GLM_N_OUT] = { [GLM_OUT_Z] = true };
    assert_int_equal(run_glm_wanting(&p, x, ym, 2, wanted, one, &err), 0);
    for (int o = 0; o < GLM_N_OUT; o++) {
        if (o == GLM_OUT_T || o == GLM_OUT_Z)
            assert_memory_equal(one[o]->u.mat.data, out[o]->u.mat.data,
                                (size_t)(out[o]->u.mat.rows * NV) * sizeof(float));
        else
            assert_null(one[o]);
    }
    outputs_free(one);
    outputs_free(out);
    nf_value_unref(x);
    nf_value_unref(ym);
    params_free(&p);
    free(S);
    free(R);
    free(X);
    free(Y);
}

static void test_ar1(void **state)
{
    (void)state;
    ar1_case(50, GLM_SCALING_MEAN, 13);
}

/* No scaling and a baseline of 20000 next to noise of about 1: the node's
 * sums carry the baseline in double and difference it away (yᵀy - bᵀXᵀy),
 * which must keep the residual variance, t and z to the same tolerance. */
static void test_ar1_raw_baseline(void **state)
{
    (void)state;
    ar1_case(20000, GLM_SCALING_NONE, 14);
}

/* A column that is the sum of two others: the estimable contrast a - b
 * equals the fit of the design without it, with n - rank degrees of freedom. */
static void test_rank_deficient(void **state)
{
    (void)state;
    double *X = malloc(sizeof(double) * N * K), *Y = malloc(sizeof(double) * N * NV), y[N];
    make_problem(X, Y, NULL, 0, 14);
    double X5[N * 5], X3[N * 3];
    for (int t = 0; t < N; t++) {
        double row[5] = { X[t * K], X[t * K + 1], X[t * K] + X[t * K + 1], X[t * K + 2], 1 };
        memcpy(X5 + t * 5, row, sizeof row);
        X3[t * 3 + 0] = X[t * K];
        X3[t * 3 + 1] = X[t * K + 1];
        X3[t * 3 + 2] = X[t * K + 2];
    }
    /* reduced design: a, b, drift, constant = X itself */
    (void)X3;
    static const char *const names5[] = { "a", "b", "ab", "drift", "constant" };
    static const char *const con[] = { "d = a - b", NULL };
    struct glm_params p;
    set_params(&p, GLM_NOISE_OLS, GLM_SCALING_NONE, con);
    struct nf_value *x = design_table(X5, N, 5, names5), *ym = data_matrix(Y, N, NV), *out[GLM_N_OUT];
    struct nf_error err;
    assert_int_equal(run_glm(&p, x, ym, 2, out, &err), 0);
    assert_true(out[GLM_OUT_T]->stat.dof == N - 4);
    for (int64_t v = 0; v < NV; v++) {
        for (int t = 0; t < N; t++)
            y[t] = (float)Y[t * NV + v];
        struct ref_fit r;
        ref_fit(X, y, N, K, CW, 1, &r);
        /* nilearn's dispersion divides by n - k, k the columns (5 here), so
         * t is the reduced fit's times sqrt((n - 5) / (n - 4)) */
        expect_close("t", v, out[GLM_OUT_T]->u.mat.data[v], r.t[0] * sqrt((N - 5.0) / (N - 4.0)), 1e-4, 1e-4);
        expect_close("effect", v, out[GLM_OUT_EFFECT]->u.mat.data[v], r.effect[0], 1e-4, 1e-4);
        /* the residual variance divides by n - k with k the columns, as nilearn */
        expect_close("residual variance", v, out[GLM_OUT_RESIDUAL_VARIANCE]->u.mat.data[v],
                     r.dispersion * (N - K) / (N - 5), 1e-4, 0);
    }
    outputs_free(out);
    nf_value_unref(x);
    nf_value_unref(ym);
    params_free(&p);
    free(X);
    free(Y);
}

static void test_errors(void **state)
{
    (void)state;
    double *X = malloc(sizeof(double) * N * K), *Y = malloc(sizeof(double) * N * NV);
    make_problem(X, Y, NULL, 0, 15);
    struct nf_value *x = design_table(X, N, K, NAMES), *out[GLM_N_OUT];
    struct nf_value *short_y = data_matrix(Y, N - 1, NV), *ym = data_matrix(Y, N, NV);
    struct nf_error err;
    struct glm_params p;
    set_params(&p, GLM_NOISE_AR1, GLM_SCALING_MEAN, CONTRASTS);
    assert_true(run_glm(&p, x, short_y, 1, out, &err) < 0);
    assert_non_null(strstr(err.msg, "the design X has 80 rows but Y has 79 frames"));
    params_free(&p);
    static const char *const unknown[] = { "d = a - faces", NULL };
    set_params(&p, GLM_NOISE_OLS, GLM_SCALING_MEAN, unknown);
    assert_true(run_glm(&p, x, ym, 1, out, &err) < 0);
    assert_non_null(strstr(err.msg, "contrasts[1]: 'faces' is not a column of the design (columns: a, b, drift, "
                                    "constant)"));
    params_free(&p);
    /* no more frames than columns */
    struct nf_value *tiny_x = design_table(X, K, K, NAMES), *tiny_y = data_matrix(Y, K, NV);
    set_params(&p, GLM_NOISE_OLS, GLM_SCALING_MEAN, CONTRASTS);
    assert_true(run_glm(&p, tiny_x, tiny_y, 1, out, &err) < 0);
    assert_non_null(strstr(err.msg, "more frames than regressors"));
    params_free(&p);
    nf_value_unref(tiny_x);
    nf_value_unref(tiny_y);
    nf_value_unref(x);
    nf_value_unref(short_y);
    nf_value_unref(ym);
    free(X);
    free(Y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_contrast_weights),
        cmocka_unit_test(test_contrast_errors),
        cmocka_unit_test(test_contrast_split),
        cmocka_unit_test(test_tails),
        cmocka_unit_test(test_f_distribution),
        cmocka_unit_test(test_ols),
        cmocka_unit_test(test_mean_scaling),
        cmocka_unit_test(test_ar1),
        cmocka_unit_test(test_ar1_raw_baseline),
        cmocka_unit_test(test_rank_deficient),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
