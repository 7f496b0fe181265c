/* test_searchlight.c — searchlight decoding (nodes/searchlight/searchlight.c) against
 * independent computations: spheres against a brute-force O(V²) distance check
 * in world coordinates under oblique, anisotropic and flipped affines; the
 * batched closed forms (ridge, ridge_classifier; primal and dual spheres)
 * against a per-sphere double-precision solve written here and against the
 * one-sphere-at-a-time pipeline of nodes/predict/predict_models.h (scaler + fit +
 * score); a planted pattern that must be found while far spheres stay at
 * chance; identical maps for any thread count; checkpoints that resume to the
 * same map; NaN (counted, with a warning) for spheres of fewer than 2 voxels
 * and for fits that fail or cannot be scored; and bad input.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "cache/exec_cache.h"
#include "core/util.h"
#include "predict/predict_models.h"
#include "searchlight/searchlight.h"
#include "ref_solve.h"
#include "searchlight_testdata.h"
#include "core/rng.h"

static char tmpdir[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-searchlight-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- geometry ---- */

static void world(const struct nf_geom *g, int64_t c, double w[3])
{
    int64_t nx = g->grid.dim[0], ny = g->grid.dim[1], off = g->index[c];
    double ijk[3] = { (double)(off % nx), (double)((off / nx) % ny), (double)(off / (nx * ny)) };
    for (int a = 0; a < 3; a++)
        w[a] = g->grid.affine[a][0] * ijk[0] + g->grid.affine[a][1] * ijk[1] + g->grid.affine[a][2] * ijk[2] +
               g->grid.affine[a][3];
}

/* Brute force: every pair's squared world distance against r². */
static void check_spheres(const struct nf_geom *g, double r)
{
    struct nf_sl_spheres s;
    struct nf_error err = { 0 };
    assert_int_equal(nf_sl_spheres_build(g, r, &s, &err), 0);
    int64_t V = g->n_voxels, max = 0;
    assert_int_equal(s.n_centres, V);
    double (*w)[3] = malloc((size_t)V * sizeof *w);
    for (int64_t c = 0; c < V; c++)
        world(g, c, w[c]);
    for (int64_t i = 0; i < V; i++) {
        int64_t at = s.indptr[i], count = 0;
        bool has_centre = false;
        for (int64_t j = 0; j < V; j++) {
            double d2 = 0;
            for (int a = 0; a < 3; a++)
                d2 += (w[i][a] - w[j][a]) * (w[i][a] - w[j][a]);
            if (d2 <= r * r) {
                /* listed, in ascending order */
                assert_true(at < s.indptr[i + 1]);
                assert_int_equal(s.indices[at], j);
                at++;
                count++;
                has_centre |= j == i;
            }
        }
        assert_int_equal(at, s.indptr[i + 1]);
        assert_true(has_centre);
        max = count > max ? count : max;
    }
    assert_int_equal(s.max_size, max);
    assert_true(s.n_offsets >= max);
    free(w);
    nf_sl_spheres_release(&s);
}

static void test_spheres_brute_force(void **state)
{
    (void)state;
    /* oblique (rotated about two axes) and anisotropic, off-origin */
    double ca = cos(0.5), sa = sin(0.5), cb = cos(0.3), sb = sin(0.3);
    double R[3][3] = { { ca, -sa * cb, sa * sb }, { sa, ca * cb, -ca * sb }, { 0, sb, cb } };
    double scale[3] = { 2.0, 2.5, 3.1 };
    double M[3][4];
    for (int a = 0; a < 3; a++) {
        for (int b = 0; b < 3; b++)
            M[a][b] = R[a][b] * scale[b];
        M[a][3] = (a - 1) * 17.3;
    }
    struct nf_geom *g = sl_geom_affine(8, 7, 6, M, 0.6, 1);
    for (double r = 1.5; r < 9; r += 1.7)
        check_spheres(g, r);
    nf_geom_unref(g);

    /* a shear, and a whole box */
    double S[3][4] = { { 2, 0.7, 0, -30 }, { 0, 2, 0.4, 12 }, { 0.3, 0, 2.5, 5 } };
    g = sl_geom_affine(6, 6, 5, S, 1.0, 2);
    check_spheres(g, 3.9);
    check_spheres(g, 6.2);
    nf_geom_unref(g);

    /* MNI-like flipped x, 3 mm, r = 6 mm: the boundary (2 voxels along an
     * axis, exactly 6 mm) is included; a full interior sphere has 33 voxels */
    double F[3][4] = { { -3, 0, 0, 90 }, { 0, 3, 0, -126 }, { 0, 0, 3, -72 } };
    g = sl_geom_affine(9, 9, 9, F, 1.0, 3);
    check_spheres(g, 6.0);
    struct nf_sl_spheres s;
    struct nf_error err = { 0 };
    assert_int_equal(nf_sl_spheres_build(g, 6.0, &s, &err), 0);
    assert_int_equal(s.max_size, 33);
    assert_int_equal(s.n_offsets, 33);
    assert_false(s.sub_voxel);
    nf_sl_spheres_release(&s);
    /* smaller than a voxel: each sphere is its centre */
    assert_int_equal(nf_sl_spheres_build(g, 2.5, &s, &err), 0);
    assert_true(s.sub_voxel);
    assert_int_equal(s.max_size, 1);
    nf_sl_spheres_release(&s);
    /* bad radius, singular affine */
    assert_int_equal(nf_sl_spheres_build(g, 0, &s, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "radius"));
    nf_geom_unref(g);
    double Z[3][4] = { { 2, 0, 0, 0 }, { 0, 2, 0, 0 }, { 2, 0, 0, 0 } };
    g = sl_geom_affine(4, 4, 4, Z, 1.0, 4);
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_sl_spheres_build(g, 3, &s, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "singular"));
    nf_geom_unref(g);
}

/* ---- independent reference: one sphere at a time, in double ---- */

/* Mean fold score of the ridge / ridge_classifier closed form on the voxels
 * `idx` (primal normal equations in double), and the smallest decision
 * margin met (how close a prediction was to flipping). */
static double reference_closed_form(const struct sldata *d, const int32_t *idx, int64_t m, double alpha,
                                    bool standardize, double *margin)
{
    int64_t q = d->n_classes > 2 ? d->n_classes : 1;
    double total = 0;
    *margin = INFINITY;
    double *Z = malloc((size_t)(d->n * m) * sizeof *Z), *A = malloc((size_t)(m * m) * sizeof *A);
    double *B = malloc((size_t)(m * q) * sizeof *B), *T = malloc((size_t)(d->n * q) * sizeof *T);
    for (int64_t f = 0; f < d->k; f++) {
        int64_t nt = 0;
        for (int64_t i = 0; i < d->n; i++)
            nt += d->fold_of[i] != f;
        for (int64_t j = 0; j < m; j++) {
            double mean = 0, var = 0;
            for (int64_t i = 0; i < d->n; i++)
                if (d->fold_of[i] != f)
                    mean += d->X[i * d->V + idx[j]];
            mean /= (double)nt;
            for (int64_t i = 0; i < d->n; i++)
                if (d->fold_of[i] != f)
                    var += pow(d->X[i * d->V + idx[j]] - mean, 2);
            double sd = standardize ? sqrt(var / (double)nt) : 1.0;
            for (int64_t i = 0; i < d->n; i++)
                Z[i * m + j] = (d->X[i * d->V + idx[j]] - mean) / sd;
        }
        double tm[8] = { 0 };
        for (int64_t i = 0; i < d->n; i++)
            for (int64_t o = 0; o < q; o++) {
                T[i * q + o] = !d->n_classes ? d->y[i] : d->y[i] == (double)(q == 1 ? 1 : o) ? 1 : -1;
                if (d->fold_of[i] != f)
                    tm[o] += T[i * q + o] / (double)nt;
            }
        memset(A, 0, (size_t)(m * m) * sizeof *A);
        memset(B, 0, (size_t)(m * q) * sizeof *B);
        for (int64_t i = 0; i < d->n; i++) {
            if (d->fold_of[i] == f)
                continue;
            for (int64_t a = 0; a < m; a++) {
                for (int64_t b = 0; b < m; b++)
                    A[a * m + b] += Z[i * m + a] * Z[i * m + b];
                for (int64_t o = 0; o < q; o++)
                    B[a * q + o] += Z[i * m + a] * (T[i * q + o] - tm[o]);
            }
        }
        for (int64_t a = 0; a < m; a++)
            A[a * m + a] += alpha;
        gauss(A, B, m, q);
        /* score the validation rows */
        double hits = 0, ss_res = 0, ss_tot = 0, ym = 0;
        int64_t nv = 0;
        for (int64_t i = 0; i < d->n; i++)
            if (d->fold_of[i] == f) {
                ym += d->y[i];
                nv++;
            }
        ym /= (double)nv;
        for (int64_t i = 0; i < d->n; i++) {
            if (d->fold_of[i] != f)
                continue;
            double dec[8];
            for (int64_t o = 0; o < q; o++) {
                dec[o] = tm[o];
                for (int64_t j = 0; j < m; j++)
                    dec[o] += Z[i * m + j] * B[j * q + o];
            }
            if (!d->n_classes) {
                ss_res += pow(d->y[i] - dec[0], 2);
                ss_tot += pow(d->y[i] - ym, 2);
            } else if (q == 1) {
                hits += (dec[0] > 0 ? 1.0 : 0.0) == d->y[i];
                *margin = fmin(*margin, fabs(dec[0]));
            } else {
                int64_t best = 0, second = -1;
                for (int64_t o = 1; o < q; o++)
                    if (dec[o] > dec[best])
                        best = o;
                for (int64_t o = 0; o < q; o++)
                    if (o != best && (second < 0 || dec[o] > dec[second]))
                        second = o;
                hits += (double)best == d->y[i];
                *margin = fmin(*margin, dec[best] - dec[second]);
            }
        }
        total += d->n_classes ? hits / (double)nv : 1 - ss_res / ss_tot;
    }
    free(Z);
    free(A);
    free(B);
    free(T);
    return total / (double)d->k;
}

/* The same sphere through predict_models one fold at a time, as the predict
 * node's whole-brain path would do it: scaler, fit, predict, score. */
static double reference_models(const struct sldata *d, const int32_t *idx, int64_t m,
                               const struct nf_model_opts *opts, bool standardize)
{
    float *Xs = malloc((size_t)(d->n * m) * sizeof *Xs), *Zt = malloc((size_t)(d->n * m) * sizeof *Zt);
    float *Zv = malloc((size_t)(d->n * m) * sizeof *Zv), *dec = malloc((size_t)(d->n * 8) * sizeof *dec);
    double *mean = malloc((size_t)m * sizeof *mean), *sd = malloc((size_t)m * sizeof *sd);
    double *yt = malloc((size_t)d->n * sizeof *yt), *yv = malloc((size_t)d->n * sizeof *yv);
    double *pred = malloc((size_t)d->n * sizeof *pred), total = 0;
    for (int64_t f = 0; f < d->k; f++) {
        int64_t nt = 0, nv = 0;
        for (int64_t i = 0; i < d->n; i++) {
            float *row = Xs + (d->fold_of[i] != f ? nt : d->n - 1 - nv) * m;   /* train up, validation down */
            for (int64_t j = 0; j < m; j++)
                row[j] = d->X[i * d->V + idx[j]];
            if (d->fold_of[i] != f)
                yt[nt++] = d->y[i];
            else
                yv[nv++] = d->y[i];
        }
        /* validation rows were stored bottom-up: put them back in order */
        for (int64_t a = 0; a < nv; a++)
            memcpy(Zv + a * m, Xs + (d->n - 1 - a) * m, (size_t)m * sizeof *Zv);
        if (standardize) {
            nf_scaler_fit(Xs, nt, m, m, mean, sd);
            nf_scaler_apply(Xs, nt, m, m, mean, sd, Zt, m);
            nf_scaler_apply(Zv, nv, m, m, mean, sd, Zv, m);
        } else {
            memcpy(Zt, Xs, (size_t)(nt * m) * sizeof *Zt);
        }
        struct nf_linear_model mdl;
        struct nf_error err = { 0 };
        assert_int_equal(nf_model_fit(opts, Zt, nt, m, m, yt, d->n_classes, &mdl, &err), 0);
        nf_model_decision(&mdl, Zv, nv, m, dec);
        nf_model_predict(&mdl, Zv, nv, m, pred);
        total += nf_score(NF_SCORE_AUTO, yv, pred, dec, nv, mdl.n_out, d->n_classes);
        nf_model_free(&mdl);
    }
    free(Xs);
    free(Zt);
    free(Zv);
    free(dec);
    free(mean);
    free(sd);
    free(yt);
    free(yv);
    free(pred);
    return total / (double)d->k;
}

static void run_map(const struct sldata *d, struct nf_run *run, const struct nf_model_opts *opts, bool standardize,
                    double radius, int threads, float *map, struct nf_sl_stats *stats)
{
    struct nf_error err = { 0 };
    int rc = nf_searchlight_run(run, d->X, d->n, d->V, d->V, d->geom, d->y, d->n_classes, d->fold_of, d->k, opts,
                                standardize, NF_SCORE_AUTO, radius, threads, map, stats, &err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
}

/* The searchlight map against both references for every centre. Accuracy
 * is compared exactly except where the reference's decision was within 1e-3
 * of flipping (float vs double could then disagree). */
static void check_closed_form(enum nf_model_kind kind, int64_t n_classes, double radius, bool standardize)
{
    double M[3][4] = { { 2, 0, 0, -4 }, { 0, 2, 0, -4 }, { 0, 0, 2.5, 0 } };
    struct sldata d;
    sl_make(&d, sl_geom_affine(5, 5, 4, M, 0.9, 11), 24, 3, n_classes, 100 + (uint64_t)n_classes);
    struct nf_model_opts opts = nf_model_defaults(kind);
    opts.alpha = 2.0;
    float *map = malloc((size_t)d.V * sizeof *map);
    struct nf_sl_stats st;
    run_map(&d, NULL, &opts, standardize, radius, 2, map, &st);
    struct nf_sl_spheres s;
    struct nf_error err = { 0 };
    assert_int_equal(nf_sl_spheres_build(d.geom, radius, &s, &err), 0);
    int64_t skipped = 0, primal = 0, dual = 0;
    for (int64_t c = 0; c < d.V; c++) {
        const int32_t *idx = s.indices + s.indptr[c];
        int64_t m = s.indptr[c + 1] - s.indptr[c];
        if (m < 2) {
            assert_true(isnan(map[c]));
            continue;
        }
        m <= 16 ? primal++ : dual++;
        double margin, ref = reference_closed_form(&d, idx, m, opts.alpha, standardize, &margin);
        double ref2 = reference_models(&d, idx, m, &opts, standardize);
        if (margin < 1e-3) {
            skipped++;
            continue;
        }
        double tol = n_classes ? 1e-6 : 2e-4;   /* the map is float */
        if (fabs(map[c] - ref) > tol || fabs(map[c] - ref2) > tol)
            fail_msg("centre %lld (%lld voxels): searchlight %.9g, reference %.9g, predict_models %.9g",
                     (long long)c, (long long)m, map[c], ref, ref2);
    }
    /* the comparison covered both systems, and skipped little */
    if (radius > 3)
        assert_true(dual > 0);
    assert_true(primal > 0 || radius > 4);
    assert_true(skipped * 10 < d.V);
    assert_int_equal(st.n_failed, 0);
    nf_sl_spheres_release(&s);
    free(map);
    sl_free(&d);
}

static void test_ridge_classifier_closed_form(void **state)
{
    (void)state;
    check_closed_form(NF_MODEL_RIDGE_CLASSIFIER, 2, 2.1, true);   /* 7-voxel spheres: primal */
    check_closed_form(NF_MODEL_RIDGE_CLASSIFIER, 2, 3.5, true);   /* up to 19: primal and dual */
    check_closed_form(NF_MODEL_RIDGE_CLASSIFIER, 3, 3.5, true);   /* one-vs-rest */
    check_closed_form(NF_MODEL_RIDGE_CLASSIFIER, 2, 5.0, false);  /* dual, centred only */
}

static void test_ridge_closed_form(void **state)
{
    (void)state;
    check_closed_form(NF_MODEL_RIDGE, 0, 2.1, true);
    check_closed_form(NF_MODEL_RIDGE, 0, 3.5, true);
    check_closed_form(NF_MODEL_RIDGE, 0, 5.0, true);
    check_closed_form(NF_MODEL_RIDGE, 0, 3.5, false);
}

/* svm and logistic go through nf_model_fit sphere by sphere: the map must
 * be the per-sphere pipeline's (same scaler, same fit, same score). */
static void test_iterative_models(void **state)
{
    (void)state;
    double M[3][4] = { { 3, 0, 0, 0 }, { 0, 3, 0, 0 }, { 0, 0, 3, 0 } };
    enum nf_model_kind kinds[] = { NF_MODEL_SVM, NF_MODEL_LOGISTIC };
    for (int t = 0; t < 2; t++)
        for (int64_t n_classes = 2; n_classes <= 3; n_classes++) {
            struct sldata d;
            sl_make(&d, sl_geom_affine(4, 4, 3, M, 1.0, 21), 30, 3, n_classes, 200 + (uint64_t)n_classes);
            struct nf_model_opts opts = nf_model_defaults(kinds[t]);
            float *map = malloc((size_t)d.V * sizeof *map);
            struct nf_sl_stats st;
            run_map(&d, NULL, &opts, true, 4.5, 3, map, &st);
            struct nf_sl_spheres s;
            struct nf_error err = { 0 };
            assert_int_equal(nf_sl_spheres_build(d.geom, 4.5, &s, &err), 0);
            for (int64_t c = 0; c < d.V; c++) {
                double ref = reference_models(&d, s.indices + s.indptr[c], s.indptr[c + 1] - s.indptr[c], &opts, true);
                assert_float_equal(map[c], ref, 1e-6);
            }
            nf_sl_spheres_release(&s);
            free(map);
            sl_free(&d);
        }
}

/* ---- a planted pattern ---- */

/* 9x9x7 grid at 3 mm; 60 samples of two classes; a ball of 7 voxels around
 * voxel (4,4,3) carries the class (d' = 2 per voxel), everything else is
 * noise. Spheres of 6 mm touching the ball decode it; spheres that do not are
 * at chance: their accuracies cannot sit far from 0.5 (binomial, n = 60). */
static void check_planted(enum nf_model_kind kind)
{
    double M[3][4] = { { 3, 0, 0, 0 }, { 0, 3, 0, 0 }, { 0, 0, 3, 0 } };
    struct sldata d = { 0 };
    d.geom = sl_geom_affine(9, 9, 7, M, 1.0, 0);
    d.n = 60;
    d.V = d.geom->n_voxels;
    d.k = 3;
    d.n_classes = 2;
    d.X = malloc((size_t)(d.n * d.V) * sizeof *d.X);
    d.y = malloc((size_t)d.n * sizeof *d.y);
    d.fold_of = malloc((size_t)d.n * sizeof *d.fold_of);
    int64_t *cls = malloc((size_t)d.n * sizeof *cls);
    uint64_t st = 77;
    for (int64_t i = 0; i < d.n; i++)
        d.y[i] = (double)(cls[i] = (i * 7 + 3) % 2);
    struct nf_error err = { 0 };
    assert_int_equal(nf_folds_stratified(cls, d.n, 2, d.k, 0, d.fold_of, &err), 0);
    double centre[3] = { 12, 12, 9 };
    bool *planted = calloc((size_t)d.V, sizeof *planted);
    double *dist = malloc((size_t)d.V * sizeof *dist);
    for (int64_t v = 0; v < d.V; v++) {
        double w[3];
        world(d.geom, v, w);
        dist[v] = sqrt(pow(w[0] - centre[0], 2) + pow(w[1] - centre[1], 2) + pow(w[2] - centre[2], 2));
        planted[v] = dist[v] <= 3.0;
    }
    for (int64_t i = 0; i < d.n; i++)
        for (int64_t v = 0; v < d.V; v++)
            d.X[i * d.V + v] = (float)(nf_rand_normal(&st) + (planted[v] ? 2.0 * (d.y[i] - 0.5) : 0.0));
    struct nf_model_opts opts = nf_model_defaults(kind);
    float *map = malloc((size_t)d.V * sizeof *map);
    struct nf_sl_stats stats;
    run_map(&d, NULL, &opts, true, 6.0, 2, map, &stats);
    assert_int_equal(stats.n_small, 0);
    assert_int_equal(stats.n_failed, 0);
    assert_int_equal(stats.max_sphere, 33);
    double far_sum = 0;
    int64_t n_far = 0, far_high = 0, found = 0, n_near = 0;
    for (int64_t v = 0; v < d.V; v++) {
        assert_false(isnan(map[v]));
        if (dist[v] <= 3.0) {   /* the sphere holds the whole ball's centre and more */
            n_near++;
            found += map[v] >= 0.8;   /* P(>= 48 of 60 | chance) ~ 2e-6 */
            if (dist[v] == 0 && map[v] < 0.9)
                fail_msg("the sphere around the planted ball scores %.3f", map[v]);
        } else if (dist[v] > 9.0) {   /* the sphere misses the ball */
            n_far++;
            far_sum += map[v];
            far_high += map[v] >= 0.75;   /* P(>= 45 of 60 | chance) ~ 5e-5 */
        }
    }
    assert_int_equal(found, n_near);
    assert_true(n_far > 300);
    double far_mean = far_sum / (double)n_far;
    /* the mean of correlated chance accuracies: within 3 binomial SDs of one
     * sphere's (sqrt(0.25/60) = 0.065), CV's slight pessimism included */
    if (fabs(far_mean - 0.5) > 3 * 0.065)
        fail_msg("far spheres average %.3f, not chance", far_mean);
    assert_true(far_high * 100 <= n_far);
    free(cls);
    free(planted);
    free(dist);
    free(map);
    sl_free(&d);
}

static void test_planted_ridge_classifier(void **state)
{
    (void)state;
    check_planted(NF_MODEL_RIDGE_CLASSIFIER);
}

static void test_planted_svm(void **state)
{
    (void)state;
    check_planted(NF_MODEL_SVM);
}

/* ---- determinism, NaN, checkpoints, bad input ---- */

static void test_threads_identical(void **state)
{
    (void)state;
    double M[3][4] = { { 2.5, 0, 0, 0 }, { 0, 2.5, 0, 0 }, { 0, 0, 2.5, 0 } };
    enum nf_model_kind kinds[] = { NF_MODEL_RIDGE_CLASSIFIER, NF_MODEL_SVM };
    for (int t = 0; t < 2; t++) {
        struct sldata d;
        sl_make(&d, sl_geom_affine(8, 7, 6, M, 0.8, 31), 24, 3, 2, 300);
        struct nf_model_opts opts = nf_model_defaults(kinds[t]);
        float *ref = malloc((size_t)d.V * sizeof *ref), *map = malloc((size_t)d.V * sizeof *map);
        struct nf_sl_stats st;
        run_map(&d, NULL, &opts, true, 5.0, 1, ref, &st);
        int threads[] = { 2, 3, 8 };
        for (int i = 0; i < 3; i++) {
            run_map(&d, NULL, &opts, true, 5.0, threads[i], map, &st);
            assert_memory_equal(map, ref, (size_t)d.V * sizeof *map);
        }
        free(ref);
        free(map);
        sl_free(&d);
    }
}

static void test_small_spheres_nan(void **state)
{
    (void)state;
    /* a 4x4x4 block in a 6x6x6 grid, and one corner voxel cut off from it */
    struct nf_grid g = { .dim = { 6, 6, 6 } };
    memcpy(g.affine, (double[4][4]){ { 2, 0, 0, 0 }, { 0, 2, 0, 0 }, { 0, 0, 2, 0 }, { 0, 0, 0, 1 } },
           sizeof g.affine);
    float mask[216];
    for (int i = 0; i < 216; i++) {
        int x = i % 6, y = (i / 6) % 6, z = i / 36;
        mask[i] = (x < 4 && y < 4 && z < 4) || (x == 5 && y == 5 && z == 5);
    }
    struct sldata d;
    sl_make(&d, nf_geom_from_mask(&g, mask), 18, 3, 2, 400);
    struct nf_model_opts opts = nf_model_defaults(NF_MODEL_RIDGE_CLASSIFIER);
    float *map = malloc((size_t)d.V * sizeof *map);
    struct nf_sl_stats st;
    run_map(&d, NULL, &opts, true, 2.5, 1, map, &st);
    assert_int_equal(st.n_small, 1);
    assert_true(isnan(map[d.V - 1]));   /* the isolated voxel is the last column */
    for (int64_t v = 0; v + 1 < d.V; v++)
        assert_false(isnan(map[v]));
    /* a radius below the voxel size: every sphere is its centre alone */
    run_map(&d, NULL, &opts, true, 1.5, 1, map, &st);
    assert_int_equal(st.n_small, d.V);
    for (int64_t v = 0; v < d.V; v++)
        assert_true(isnan(map[v]));
    free(map);
    sl_free(&d);
}

/* Fits that fail or cannot be scored give NaN and are counted, never fail
 * the run: leave-one-out R² (one validation sample: undefined), and an svm
 * whose training fold lacks a class. */
static void test_failed_fits(void **state)
{
    (void)state;
    double M[3][4] = { { 2, 0, 0, 0 }, { 0, 2, 0, 0 }, { 0, 0, 2, 0 } };
    struct sldata d;
    sl_make(&d, sl_geom_affine(4, 4, 3, M, 1.0, 61), 12, 12, 0, 700);
    for (int64_t i = 0; i < d.n; i++)
        d.fold_of[i] = i;
    struct nf_model_opts opts = nf_model_defaults(NF_MODEL_RIDGE);
    float *map = malloc((size_t)d.V * sizeof *map);
    struct nf_sl_stats st;
    run_map(&d, NULL, &opts, true, 3.0, 2, map, &st);
    assert_int_equal(st.n_failed, d.V);
    assert_int_equal(st.n_small, 0);
    for (int64_t v = 0; v < d.V; v++)
        assert_true(isnan(map[v]));
    free(map);
    sl_free(&d);

    sl_make(&d, sl_geom_affine(4, 4, 3, M, 1.0, 62), 12, 3, 2, 800);
    for (int64_t i = 0; i < d.n; i++)   /* fold 1 holds every sample of class 1 */
        d.fold_of[i] = d.y[i] == 1 ? 1 : i % 4 < 2 ? 0 : 2;
    opts = nf_model_defaults(NF_MODEL_SVM);
    map = malloc((size_t)d.V * sizeof *map);
    run_map(&d, NULL, &opts, true, 3.0, 2, map, &st);
    assert_int_equal(st.n_failed, d.V);
    for (int64_t v = 0; v < d.V; v++)
        assert_true(isnan(map[v]));
    free(map);
    sl_free(&d);
}

static void test_checkpoints_resume(void **state)
{
    (void)state;
    double M[3][4] = { { 3, 0, 0, 0 }, { 0, 3, 0, 0 }, { 0, 0, 3, 0 } };
    struct sldata d;
    sl_make(&d, sl_geom_affine(9, 9, 8, M, 0.9, 41), 24, 3, 2, 500);
    struct nf_model_opts opts = nf_model_defaults(NF_MODEL_RIDGE_CLASSIFIER);
    char *path = nf_asprintf("%s/.nlflow/cache.db", tmpdir);
    struct nf_cache *cache = NULL;
    struct nf_error err = { 0 };
    assert_int_equal(nf_cache_open(path, NULL, &cache, &err), 0);
    struct nf_checkpoint ck1 = { cache, { 1, 1 }, false, 0, 0, 0 }, ck2 = { cache, { 1, 2 }, false, 0, 0, 0 },
                         ck3 = { cache, { 1, 3 }, false, 0, 0, 0 };
    struct nf_run run1 = { .ckpt = &ck1 }, run2 = { .ckpt = &ck2 }, run3 = { .ckpt = &ck3 };
    float *ref = malloc((size_t)d.V * sizeof *ref), *map = malloc((size_t)d.V * sizeof *map);
    struct nf_sl_stats st_ref, st;

    run_map(&d, &run1, &opts, true, 6.0, 2, ref, &st_ref);
    assert_int_equal(st_ref.n_resumed, 0);
    int64_t *idx = NULL;
    size_t n_chunks = 0;
    assert_int_equal(nf_ckpt_list(&ck1, &idx, &n_chunks, &err), 0);
    assert_true(n_chunks >= 4);
    /* all of it resumed: the same map and counters, nothing recomputed */
    run_map(&d, &run1, &opts, true, 6.0, 1, map, &st);
    assert_int_equal(st.n_resumed, d.V);
    assert_memory_equal(map, ref, (size_t)d.V * sizeof *map);
    assert_int_equal(st.n_small, st_ref.n_small);
    assert_int_equal(st.max_sphere, st_ref.max_sphere);

    /* a killed run: only some blocks were committed, one of them damaged */
    int64_t resumed_expected = 0;
    for (size_t t = 0; t < n_chunks; t += 2) {
        void *data = NULL;
        size_t bytes = 0;
        assert_int_equal(nf_ckpt_get(&ck1, idx[t], &data, &bytes, &err), 1);
        if (t == 2) {
            nf_ckpt_put(&ck2, idx[t], data, bytes - 4, &err);   /* short: ignored */
        } else {
            nf_ckpt_put(&ck2, idx[t], data, bytes, &err);
            resumed_expected += (int64_t)((bytes - 48) / sizeof(float));
        }
        /* a block whose stored values were changed: the resumed run must use them */
        if (t == 0) {
            float marker = 0.125f;
            for (size_t b = 48; b < bytes; b += sizeof marker)
                memcpy((char *)data + b, &marker, sizeof marker);
            nf_ckpt_put(&ck3, idx[t], data, bytes, &err);
        }
        free(data);
    }
    run_map(&d, &run2, &opts, true, 6.0, 2, map, &st);
    assert_int_equal(st.n_resumed, resumed_expected);
    assert_memory_equal(map, ref, (size_t)d.V * sizeof *map);
    run_map(&d, &run3, &opts, true, 6.0, 2, map, &st);
    assert_true(st.n_resumed > 0);
    for (int64_t v = 0; v < st.n_resumed; v++)
        assert_true(map[v] == 0.125f);
    assert_memory_equal(map + st.n_resumed, ref + st.n_resumed, (size_t)(d.V - st.n_resumed) * sizeof *map);
    free(idx);
    free(ref);
    free(map);
    free(path);
    nf_cache_close(cache);
    sl_free(&d);
}

static void test_bad_input(void **state)
{
    (void)state;
    double M[3][4] = { { 2, 0, 0, 0 }, { 0, 2, 0, 0 }, { 0, 0, 2, 0 } };
    struct sldata d;
    sl_make(&d, sl_geom_affine(4, 4, 4, M, 1.0, 51), 12, 3, 2, 600);
    struct nf_model_opts opts = nf_model_defaults(NF_MODEL_RIDGE_CLASSIFIER);
    float *map = malloc((size_t)d.V * sizeof *map);
    struct nf_error err = { 0 };
#define RUN(n_, V_, geom_, k_, radius_) \
    nf_searchlight_run(NULL, d.X, (n_), (V_), d.V, (geom_), d.y, 2, d.fold_of, (k_), &opts, true, \
                       NF_SCORE_AUTO, (radius_), 1, map, NULL, &err)
    assert_int_equal(RUN(d.n, d.V, NULL, 3, 4.0), NF_EDATA);
    assert_non_null(strstr(err.msg, "mask"));
    assert_int_equal(RUN(d.n, d.V - 1, d.geom, 3, 4.0), NF_EDATA);
    assert_int_equal(RUN(d.n, d.V, d.geom, 3, -1.0), NF_EDATA);
    assert_non_null(strstr(err.msg, "radius"));
    /* a fold with a single training sample */
    for (int64_t i = 0; i < d.n; i++)
        d.fold_of[i] = i == 0 ? 0 : 1;
    assert_int_equal(RUN(d.n, d.V, d.geom, 2, 4.0), NF_EDATA);
    assert_non_null(strstr(err.msg, "fold 2"));
    for (int64_t i = 0; i < d.n; i++)
        d.fold_of[i] = i % 3;
    /* a class index outside 0..1, a NaN in X */
    d.y[4] = 2;
    assert_int_equal(RUN(d.n, d.V, d.geom, 3, 4.0), NF_EDATA);
    assert_non_null(strstr(err.msg, "sample 5"));
    d.y[4] = 0;
    d.X[3 * d.V + 7] = NAN;
    assert_int_equal(RUN(d.n, d.V, d.geom, 3, 4.0), NF_EDATA);
    assert_non_null(strstr(err.msg, "non-finite"));
#undef RUN
    free(map);
    sl_free(&d);
}

static void test_estimate(void **state)
{
    (void)state;
    /* grows with the sphere and the threads, and covers the Gram scratch */
    uint64_t a = nf_searchlight_estimate(120, 50000, 3, NF_MODEL_RIDGE_CLASSIFIER, 6, 3, 1);
    uint64_t b = nf_searchlight_estimate(120, 50000, 3, NF_MODEL_RIDGE_CLASSIFIER, 12, 3, 1);
    uint64_t c = nf_searchlight_estimate(120, 50000, 3, NF_MODEL_RIDGE_CLASSIFIER, 6, 3, 4);
    assert_true(b > a && c > a);
    assert_true(a > 120u * 120u * 12u);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spheres_brute_force),
        cmocka_unit_test(test_ridge_classifier_closed_form),
        cmocka_unit_test(test_ridge_closed_form),
        cmocka_unit_test(test_iterative_models),
        cmocka_unit_test(test_planted_ridge_classifier),
        cmocka_unit_test(test_planted_svm),
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_small_spheres_nan),
        cmocka_unit_test(test_failed_fits),
        cmocka_unit_test(test_checkpoints_resume),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_estimate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
