/* test_predict_models.c — the learners, folds and scores of the `predict`
 * node (nodes/predict/predict_models.c) against independent computations:
 *  - ridge and ridge_classifier against the normal equations on centred data,
 *    solved in double by ref_solve.h's Gauss-Jordan (both the primal n > p and the
 *    dual n < p path of the library);
 *  - svm and logistic against a slow brute-force optimum (plain gradient
 *    descent in double on the primal, many small steps, on 3-feature
 *    problems), plus optimality conditions: the gradient of the logistic
 *    objective, and for the squared-hinge SVM the dual variables recovered
 *    from the primal (α_i = 2C max(0, 1 - y_i f_i) >= 0, zero outside the
 *    margin) reproducing w = Σ α_i y_i x̃_i; separable, non-separable and
 *    3-class one-vs-rest problems;
 *  - folds against vectors printed by the installed sklearn 1.2.1 (numpy
 *    1.24.2), plus properties (balance, determinism, one fold per sample);
 *  - scores against small hand-checked examples.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "predict/predict_models.h"
#include "ref_solve.h"
#include "core/rng.h"

/* ---- data ---- */

enum { MAXN = 64, MAXP = 40, LDX = 41 };   /* LDX > p: rows are strided */

struct problem {
    int n, p, classes;
    float X[MAXN * LDX];
    double y[MAXN];
};

/* Gaussian clusters: class c centred at `sep` * e_c (c mod p); sep large:
 * separable, small: overlapping. classes 0: a regression target. */
static void make_problem(struct problem *pr, int n, int p, int classes, double sep, uint64_t seed)
{
    uint64_t st = seed;
    pr->n = n;
    pr->p = p;
    pr->classes = classes;
    double w[MAXP];
    for (int j = 0; j < p; j++)
        w[j] = nf_rand_normal(&st);
    for (int i = 0; i < n; i++) {
        int c = classes ? i % classes : 0;
        double t = 2.0;   /* offset, for the intercept */
        for (int j = 0; j < p; j++) {
            double x = nf_rand_normal(&st) + (classes && j == c % p ? sep : 0.0) + (j == 1 ? 0.7 : 0.0);
            if (classes == 2 && c == 0 && j == 0)
                x -= sep;
            pr->X[i * LDX + j] = (float)x;
            t += w[j] * x;
        }
        pr->y[i] = classes ? (double)c : t + 0.5 * nf_rand_normal(&st);
    }
}

static void expect_close(double got, double want, double rel, double abs_tol, const char *what, int idx)
{
    if (!(fabs(got - want) <= rel * fabs(want) + abs_tol)) {
        print_error("%s[%d]: got %.10g, want %.10g\n", what, idx, got, want);
        fail();
    }
}

/* ---- ridge: normal equations in double ---- */

/* Solve (XcᵀXc + αI) w = Xcᵀ tc by Gauss-Jordan with partial pivoting. */
static void ridge_reference(const struct problem *pr, const double *t, double alpha, double *w, double *b)
{
    int n = pr->n, p = pr->p;
    double xm[MAXP] = { 0 }, tm = 0;
    static double M[MAXP * MAXP];
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < p; j++)
            xm[j] += pr->X[i * LDX + j] / (double)n;
        tm += t[i] / n;
    }
    memset(M, 0, sizeof M);
    memset(w, 0, (size_t)p * sizeof *w);
    for (int i = 0; i < n; i++)
        for (int a = 0; a < p; a++) {
            double xa = pr->X[i * LDX + a] - xm[a];
            for (int c = 0; c < p; c++)
                M[a * p + c] += xa * (pr->X[i * LDX + c] - xm[c]);
            w[a] += xa * (t[i] - tm);
        }
    for (int a = 0; a < p; a++)
        M[a * p + a] += alpha;
    gauss(M, w, p, 1);
    *b = tm;
    for (int j = 0; j < p; j++)
        *b -= xm[j] * w[j];
}

static void check_ridge(enum nf_model_kind kind, int n, int p, int classes, uint64_t seed)
{
    static struct problem pr;
    make_problem(&pr, n, p, classes, 1.0, seed);
    struct nf_model_opts o = nf_model_defaults(kind);
    o.alpha = 1.0;
    struct nf_linear_model m;
    struct nf_error err = { 0 };
    assert_int_equal(nf_model_fit(&o, pr.X, n, p, LDX, pr.y, classes, &m, &err), 0);
    int n_out = classes > 2 ? classes : 1;
    assert_int_equal(m.n_out, n_out);
    assert_int_equal(m.p, p);
    assert_true(m.converged);
    for (int out = 0; out < n_out; out++) {
        double t[MAXN], w[MAXP], b, wmax = 0;
        for (int i = 0; i < n; i++)   /* RidgeClassifier: ±1, class 1 positive when binary */
            t[i] = !classes ? pr.y[i] : pr.y[i] == (classes == 2 ? 1 : out) ? 1.0 : -1.0;
        ridge_reference(&pr, t, o.alpha, w, &b);
        for (int j = 0; j < p; j++)
            wmax = fmax(wmax, fabs(w[j]));
        for (int j = 0; j < p; j++)
            expect_close(m.coef[out * p + j], w[j], 1e-4, 1e-6 * wmax, "coef", out * p + j);
        expect_close(m.intercept[out], b, 1e-4, 1e-6 * (wmax + fabs(b)), "intercept", out);
    }
    nf_model_free(&m);
}

static void test_ridge_primal(void **state)
{
    (void)state;
    check_ridge(NF_MODEL_RIDGE, 50, 6, 0, 1);
    check_ridge(NF_MODEL_RIDGE_CLASSIFIER, 50, 6, 2, 2);
    check_ridge(NF_MODEL_RIDGE_CLASSIFIER, 51, 7, 3, 3);
}

static void test_ridge_dual(void **state)
{
    (void)state;
    check_ridge(NF_MODEL_RIDGE, 12, 35, 0, 4);
    check_ridge(NF_MODEL_RIDGE_CLASSIFIER, 12, 35, 2, 5);
    check_ridge(NF_MODEL_RIDGE_CLASSIFIER, 13, 40, 3, 6);
}

/* ---- svm and logistic: brute force ---- */

/* ±1 target of class problem `out` (binary: class 1 positive) */
static double sgn(const struct problem *pr, int i, int out, int n_out)
{
    return pr->y[i] == (n_out == 1 ? 1 : out) ? 1.0 : -1.0;
}

/* The primal objective and its gradient in double, written here from the
 * definitions: v has p weights then the intercept. */
static double primal(enum nf_model_kind kind, const struct problem *pr, int out, int n_out, double C,
                     const double *v, double *grad)
{
    int p = pr->p;
    double f = 0;
    for (int j = 0; j < p; j++) {
        f += 0.5 * v[j] * v[j];
        if (grad)
            grad[j] = v[j];
    }
    if (kind == NF_MODEL_SVM) {   /* the intercept is penalised */
        f += 0.5 * v[p] * v[p];
        if (grad)
            grad[p] = v[p];
    } else if (grad) {
        grad[p] = 0;
    }
    for (int i = 0; i < pr->n; i++) {
        double z = v[p], t = sgn(pr, i, out, n_out);
        for (int j = 0; j < p; j++)
            z += v[j] * pr->X[i * LDX + j];
        double dz;   /* d loss / d z */
        if (kind == NF_MODEL_SVM) {
            double h = 1 - t * z > 0 ? 1 - t * z : 0;
            f += C * h * h;
            dz = -2 * C * h * t;
        } else {
            double m = t * z;
            f += C * (m > 0 ? log1p(exp(-m)) : -m + log1p(exp(m)));
            dz = -C * t / (1 + exp(m));
        }
        if (grad) {
            for (int j = 0; j < p; j++)
                grad[j] += dz * pr->X[i * LDX + j];
            grad[p] += dz;
        }
    }
    return f;
}

/* Gradient descent with step 1/L (L bounds the Hessian) until the gradient
 * is below 1e-11: slow and simple, the optimum to ~1e-15. */
static double brute_force(enum nf_model_kind kind, const struct problem *pr, int out, int n_out, double C,
                          double *v)
{
    int p = pr->p;
    double fro = 0;
    for (int i = 0; i < pr->n; i++) {
        fro += 1;
        for (int j = 0; j < p; j++)
            fro += (double)pr->X[i * LDX + j] * pr->X[i * LDX + j];
    }
    double L = 1 + (kind == NF_MODEL_SVM ? 2 : 0.25) * C * fro, g[MAXP + 1];
    memset(v, 0, (size_t)(p + 1) * sizeof *v);
    for (long it = 0; it < 3000000; it++) {
        primal(kind, pr, out, n_out, C, v, g);
        double gn = 0;
        for (int j = 0; j <= p; j++)
            gn = fmax(gn, fabs(g[j]));
        if (gn < 1e-11)
            break;
        for (int j = 0; j <= p; j++)
            v[j] -= g[j] / L;
    }
    return primal(kind, pr, out, n_out, C, v, NULL);
}

/* One fitted model against brute force and the optimality conditions. */
static int svm_gram = 0;   /* nf_model_opts.gram for the svm checks */

static void check_iterative(enum nf_model_kind kind, int n, int p, int classes, double sep, double C, double tol,
                            uint64_t seed)
{
    static struct problem pr;
    make_problem(&pr, n, p, classes, sep, seed);
    struct nf_model_opts o = nf_model_defaults(kind);
    o.C = C;
    o.gram = svm_gram;
    if (tol > 0)
        o.tol = tol;
    struct nf_linear_model m;
    struct nf_error err = { 0 };
    assert_int_equal(nf_model_fit(&o, pr.X, n, p, LDX, pr.y, classes, &m, &err), 0);
    assert_true(m.converged);
    int n_out = classes > 2 ? classes : 1;
    assert_int_equal(m.n_out, n_out);
    for (int out = 0; out < n_out; out++) {
        double opt[MAXP + 1], v[MAXP + 1], g[MAXP + 1];
        double f_opt = brute_force(kind, &pr, out, n_out, C, opt);
        for (int j = 0; j < p; j++)
            v[j] = m.coef[out * p + j];
        v[p] = m.intercept[out];
        double f_mine = primal(kind, &pr, out, n_out, C, v, g);
        double f_lib = nf_model_objective(&o, &m, out, pr.X, n, LDX, pr.y);
        expect_close(f_lib, f_mine, 1e-12, 0, "objective (library vs test)", out);
        /* the optimum: within 1e-6 relative, and never meaningfully below */
        expect_close(f_lib, f_opt, 1e-6, 0, "objective vs brute force", out);
        assert_true(f_lib >= f_opt * (1 - 1e-9));
        for (int j = 0; j <= p; j++)
            expect_close(v[j], opt[j], 2e-3, 2e-3, "weights vs brute force", j);
        if (kind == NF_MODEL_LOGISTIC) {
            /* stationarity: |∇f|_inf / C within the solver's tol (plus the
             * float rounding of the stored weights) */
            for (int j = 0; j <= p; j++)
                expect_close(g[j] / C, 0, 0, o.tol + 1e-4, "logistic gradient", j);
        } else {
            /* KKT of the L2-loss SVM through the dual variables recovered
             * from the primal: dual feasibility α >= 0, complementary
             * slackness (α_i = 0 exactly when y_i f_i >= 1), and
             * stationarity w̃ = Σ α_i y_i x̃_i */
            double w_dual[MAXP + 1] = { 0 }, wmax = 0;
            int n_sv = 0;
            for (int i = 0; i < n; i++) {
                double z = v[p], t = sgn(&pr, i, out, n_out);
                for (int j = 0; j < p; j++)
                    z += v[j] * pr.X[i * LDX + j];
                double a = 2 * C * (1 - t * z > 0 ? 1 - t * z : 0);
                assert_true(a >= 0);
                assert_true((a > 0) == (t * z < 1));
                n_sv += a > 0;
                for (int j = 0; j < p; j++)
                    w_dual[j] += a * t * pr.X[i * LDX + j];
                w_dual[p] += a * t;
            }
            assert_true(n_sv > 0);
            for (int j = 0; j <= p; j++)
                wmax = fmax(wmax, fabs(v[j]));
            for (int j = 0; j <= p; j++)
                expect_close(w_dual[j], v[j], 0, 1e-3 * (1 + wmax), "svm stationarity", j);
        }
    }
    nf_model_free(&m);
}

static void test_svm_binary(void **state)
{
    (void)state;
    check_iterative(NF_MODEL_SVM, 30, 3, 2, 0.5, 1.0, 0, 11);    /* overlapping */
    check_iterative(NF_MODEL_SVM, 30, 3, 2, 4.0, 1.0, 0, 12);    /* separable */
    check_iterative(NF_MODEL_SVM, 24, 2, 2, 1.0, 0.1, 1e-8, 13); /* another C, tight tol */
}

static void test_svm_ovr(void **state)
{
    (void)state;
    check_iterative(NF_MODEL_SVM, 45, 3, 3, 1.5, 1.0, 0, 14);
    check_iterative(NF_MODEL_SVM, 40, 4, 4, 5.0, 1.0, 0, 15);
}

/* The Gram form of the svm solver (n x n kernel, O(n) per coordinate
 * update; chosen by default when p > 2n) reaches the same optimum: forced on
 * the cases above, and by default on problems with more features than
 * samples. */
static void test_svm_gram(void **state)
{
    (void)state;
    svm_gram = 1;
    check_iterative(NF_MODEL_SVM, 30, 3, 2, 0.5, 1.0, 0, 11);
    check_iterative(NF_MODEL_SVM, 24, 2, 2, 1.0, 0.1, 1e-8, 13);
    check_iterative(NF_MODEL_SVM, 45, 3, 3, 1.5, 1.0, 0, 14);
    svm_gram = 0;
    check_iterative(NF_MODEL_SVM, 12, 30, 2, 1.0, 1.0, 0, 16);   /* p > 2n: the Gram form by default */
    check_iterative(NF_MODEL_SVM, 15, 36, 3, 1.0, 0.5, 0, 17);
    /* and the primal form on the same problem agrees with it */
    static struct problem pr;
    make_problem(&pr, 12, 30, 2, 1.0, 16);
    struct nf_model_opts o = nf_model_defaults(NF_MODEL_SVM);
    struct nf_linear_model a, b;
    struct nf_error err = { 0 };
    o.gram = 1;
    assert_int_equal(nf_model_fit(&o, pr.X, 12, 30, LDX, pr.y, 2, &a, &err), 0);
    o.gram = -1;
    assert_int_equal(nf_model_fit(&o, pr.X, 12, 30, LDX, pr.y, 2, &b, &err), 0);
    double fa = nf_model_objective(&o, &a, 0, pr.X, 12, LDX, pr.y), fb = nf_model_objective(&o, &b, 0, pr.X, 12, LDX, pr.y);
    expect_close(fa, fb, 1e-6, 0, "objective, Gram vs primal form", 0);
    nf_model_free(&a);
    nf_model_free(&b);
}

static void test_logistic_binary(void **state)
{
    (void)state;
    check_iterative(NF_MODEL_LOGISTIC, 30, 3, 2, 0.5, 1.0, 0, 21);
    check_iterative(NF_MODEL_LOGISTIC, 30, 3, 2, 4.0, 1.0, 0, 22);   /* separable */
    check_iterative(NF_MODEL_LOGISTIC, 24, 2, 2, 1.0, 10.0, 1e-9, 23);
}

static void test_logistic_ovr(void **state)
{
    (void)state;
    check_iterative(NF_MODEL_LOGISTIC, 45, 3, 3, 1.5, 1.0, 0, 24);
    check_iterative(NF_MODEL_LOGISTIC, 40, 4, 4, 5.0, 1.0, 0, 25);
}

/* Decision values, predictions and the weight map from the stored model;
 * p > n (svm/logistic work in the feature space without a p x p system);
 * a planted separable problem is fitted perfectly; fits are deterministic. */
static void test_predict_and_weights(void **state)
{
    (void)state;
    static struct problem pr;
    const enum nf_model_kind kinds[] = { NF_MODEL_SVM, NF_MODEL_LOGISTIC, NF_MODEL_RIDGE_CLASSIFIER };
    for (int classes = 2; classes <= 3; classes++)
        for (int k = 0; k < 3; k++) {
            make_problem(&pr, 36, 40, classes, 6.0, 30 + (uint64_t)classes);
            struct nf_model_opts o = nf_model_defaults(kinds[k]);
            struct nf_linear_model m, m2;
            struct nf_error err = { 0 };
            assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, classes, &m, &err), 0);
            assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, classes, &m2, &err), 0);
            assert_memory_equal(m.coef, m2.coef, (size_t)(m.n_out * m.p) * sizeof(float));
            assert_memory_equal(m.intercept, m2.intercept, (size_t)m.n_out * sizeof(float));
            nf_model_free(&m2);
            float dec[MAXN * 4], w[MAXP];
            double pred[MAXN];
            nf_model_decision(&m, pr.X, pr.n, LDX, dec);
            nf_model_predict(&m, pr.X, pr.n, LDX, pred);
            int correct = 0;
            for (int i = 0; i < pr.n; i++) {
                int best = 0;
                for (int out = 0; out < m.n_out; out++) {
                    double s = m.intercept[out];
                    for (int j = 0; j < pr.p; j++)
                        s += (double)m.coef[out * pr.p + j] * pr.X[i * LDX + j];
                    expect_close(dec[i * m.n_out + out], s, 1e-6, 1e-6, "decision", i);
                    if (dec[i * m.n_out + out] > dec[i * m.n_out + best])
                        best = out;
                }
                double want = m.n_out == 1 ? (dec[i] > 0 ? 1 : 0) : best;
                assert_true(pred[i] == want);
                correct += pred[i] == pr.y[i];
            }
            assert_int_equal(correct, pr.n);   /* separable by construction */
            nf_model_weights(&m, w);
            for (int j = 0; j < pr.p; j++) {
                double s = 0;
                for (int out = 0; out < m.n_out; out++)
                    s += m.coef[out * pr.p + j];
                expect_close(w[j], s / m.n_out, 1e-6, 1e-7, "weights", j);
            }
            nf_model_free(&m);
        }
    /* argmax ties go to the first class (numpy), a zero binary score to class 0 */
    float zero_coef[2 * 3] = { 0 }, tie_b[3] = { 0.5f, 0.5f, 0.5f };
    struct nf_linear_model tie = { .kind = NF_MODEL_SVM, .p = 2, .n_out = 3, .n_classes = 3,
                                   .coef = zero_coef, .intercept = tie_b };
    double tie_pred[2];
    nf_model_predict(&tie, pr.X, 2, LDX, tie_pred);
    assert_true(tie_pred[0] == 0 && tie_pred[1] == 0);
    tie.n_out = 1;
    tie_b[0] = 0;
    nf_model_predict(&tie, pr.X, 2, LDX, tie_pred);
    assert_true(tie_pred[0] == 0 && tie_pred[1] == 0);
    /* ridge regression predicts values */
    make_problem(&pr, 30, 4, 0, 0, 40);
    struct nf_model_opts o = nf_model_defaults(NF_MODEL_RIDGE);
    struct nf_linear_model m;
    struct nf_error err = { 0 };
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, 0, &m, &err), 0);
    assert_false(nf_model_is_classifier(m.kind));
    double pred[MAXN];
    nf_model_predict(&m, pr.X, pr.n, LDX, pred);
    for (int i = 0; i < pr.n; i++) {
        double s = m.intercept[0];
        for (int j = 0; j < pr.p; j++)
            s += (double)m.coef[j] * pr.X[i * LDX + j];
        expect_close(pred[i], s, 1e-12, 1e-12, "ridge prediction", i);
    }
    expect_close(nf_score(NF_SCORE_AUTO, pr.y, pred, NULL, pr.n, 1, 0),
                 nf_score(NF_SCORE_R2, pr.y, pred, NULL, pr.n, 1, 0), 0, 0, "auto is r2", 0);
    nf_model_free(&m);
}

static void test_fit_errors(void **state)
{
    (void)state;
    static struct problem pr;
    make_problem(&pr, 20, 3, 2, 1.0, 50);
    struct nf_model_opts o = nf_model_defaults(NF_MODEL_SVM);
    struct nf_linear_model m;
    struct nf_error err = { 0 };
    double one_class[MAXN];
    for (int i = 0; i < pr.n; i++)
        one_class[i] = 1;
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, one_class, 2, &m, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "class 0 has no training samples"));
    assert_null(m.coef);
    nf_model_free(&m);
    one_class[3] = 7;
    err = (struct nf_error){ 0 };
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, one_class, 2, &m, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "sample 4 has class 7"));
    float keep = pr.X[2 * LDX + 1];
    pr.X[2 * LDX + 1] = NAN;
    err = (struct nf_error){ 0 };
    o = nf_model_defaults(NF_MODEL_LOGISTIC);
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, 2, &m, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "sample 3, feature 2"));
    pr.X[2 * LDX + 1] = keep;
    /* bad settings; alpha 0 with more features than samples is singular */
    o = nf_model_defaults(NF_MODEL_SVM);
    o.C = 0;
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, 2, &m, &err), NF_EINVAL);
    make_problem(&pr, 10, 20, 0, 0, 52);
    o = nf_model_defaults(NF_MODEL_RIDGE);
    o.alpha = 0;
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, 0, &m, &err), NF_EDATA);
    assert_non_null(strstr(err.msg, "singular"));
    /* max_iter reached: reported, not an error */
    make_problem(&pr, 40, 3, 2, 0.2, 51);
    o = nf_model_defaults(NF_MODEL_SVM);
    o.max_iter = 1;
    assert_int_equal(nf_model_fit(&o, pr.X, pr.n, pr.p, LDX, pr.y, 2, &m, &err), 0);
    assert_false(m.converged);
    assert_int_equal(m.iterations, 1);
    nf_model_free(&m);
}

/* ---- standardisation ---- */

static void test_scaler(void **state)
{
    (void)state;
    enum { n = 9, p = 3 };
    float X[n * 4], out[n * 5];
    uint64_t st = 60;
    for (int i = 0; i < n; i++) {
        X[i * 4 + 0] = (float)(nf_rand_normal(&st) * 3 + 100);
        X[i * 4 + 1] = 2.5f;   /* constant: std 1 */
        X[i * 4 + 2] = (float)(i % 2);
    }
    double mean[p], sd[p];
    nf_scaler_fit(X, n, p, 4, mean, sd);
    for (int j = 0; j < p; j++) {
        double m = 0, v = 0;
        for (int i = 0; i < n; i++)
            m += X[i * 4 + j] / (double)n;
        for (int i = 0; i < n; i++)
            v += (X[i * 4 + j] - m) * (X[i * 4 + j] - m) / n;   /* population variance */
        expect_close(mean[j], m, 1e-12, 1e-12, "mean", j);
        expect_close(sd[j], j == 1 ? 1.0 : sqrt(v), 1e-12, 0, "std", j);
    }
    expect_close(sd[2], sqrt(20.0 / 81.0), 1e-12, 0, "std of 0/1", 2);
    nf_scaler_apply(X, n, p, 4, mean, sd, out, 5);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < p; j++)
            expect_close(out[i * 5 + j], (X[i * 4 + j] - mean[j]) / sd[j], 1e-6, 1e-6, "scaled", i * p + j);
}

/* ---- folds ---- */

static void check_folds(const int64_t *got, const int64_t *want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            print_error("sample %d: fold %lld, sklearn %lld\n", i, (long long)got[i], (long long)want[i]);
            fail();
        }
}

/* Expected vectors printed by (sklearn 1.2.1, numpy 1.24.2):
 *   /usr/bin/python3 -c 'import numpy as np
 *   from sklearn.model_selection import StratifiedKFold
 *   def skf(y,k,seed):
 *       y=np.array(y); f=np.empty(len(y),int)
 *       for i,(tr,te) in enumerate(StratifiedKFold(k,shuffle=True,random_state=seed)
 *                                  .split(np.zeros(len(y)),y)): f[te]=i
 *       return f.tolist()
 *   print(skf(Y1,5,42), skf(Y2,3,0), skf(Y3,4,123456789), skf(Y1,2,4294967295))'
 * with Y1, Y2, Y3 the label lists below (Y3 = [int(i*7 % 3 == 0) for i in range(30)]). */
static void test_folds_stratified_sklearn(void **state)
{
    (void)state;
    static const int64_t y1[20] = { 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1 };
    static const int64_t f1[20] = { 3, 0, 0, 2, 4, 2, 0, 0, 4, 4, 4, 1, 1, 2, 2, 1, 3, 3, 3, 1 };
    static const int64_t f1k2[20] = { 1, 0, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0, 0, 0 };
    /* class 2 appears first, then 1, then 0: sklearn's order of appearance */
    static const int64_t y2[23] = { 2, 1, 0, 0, 2, 1, 1, 2, 0, 2, 2, 1, 0, 2, 1, 2, 0, 2, 1, 2, 2, 0, 1 };
    static const int64_t f2[23] = { 0, 1, 2, 1, 2, 0, 1, 1, 1, 2, 0, 2, 2, 1, 2, 2, 0, 0, 0, 0, 1, 0, 1 };
    static const int64_t f3[30] = { 2, 1, 2, 0, 1, 1, 2, 2, 1, 1, 3, 3, 1, 3, 0,
                                    1, 1, 2, 3, 2, 0, 0, 0, 3, 0, 0, 0, 3, 2, 3 };
    int64_t y3[30], got[30];
    for (int i = 0; i < 30; i++)
        y3[i] = (i * 7) % 3 == 0;
    struct nf_error err = { 0 };
    assert_int_equal(nf_folds_stratified(y1, 20, 2, 5, 42, got, &err), 0);
    check_folds(got, f1, 20);
    assert_int_equal(nf_folds_stratified(y1, 20, 2, 2, 4294967295u, got, &err), 0);
    check_folds(got, f1k2, 20);
    assert_int_equal(nf_folds_stratified(y2, 23, 3, 3, 0, got, &err), 0);
    check_folds(got, f2, 23);
    assert_int_equal(nf_folds_stratified(y3, 30, 2, 4, 123456789, got, &err), 0);
    check_folds(got, f3, 30);
}

/* Each class spread evenly (per-fold counts differ by at most 1), every
 * fold index valid, every sample in one fold, deterministic per seed. */
static void test_folds_stratified_properties(void **state)
{
    (void)state;
    enum { n = 57, C = 4 };
    int64_t cls[n], a[n], b[n];
    uint64_t st = 70;
    for (int i = 0; i < n; i++)
        cls[i] = (int64_t)(nf_rand_uniform(&st) * 3.999 * nf_rand_uniform(&st));   /* imbalanced */
    for (int64_t k = 2; k <= 5; k++)
        for (uint32_t seed = 0; seed < 6; seed++) {
            struct nf_error err = { 0 };
            int rc = nf_folds_stratified(cls, n, C, k, seed, a, &err);
            if (rc < 0) {   /* only when a class is too small */
                assert_int_equal(rc, NF_EDATA);
                assert_non_null(strstr(err.msg, "fewer than the"));
                continue;
            }
            assert_int_equal(nf_folds_stratified(cls, n, C, k, seed, b, &err), 0);
            assert_memory_equal(a, b, sizeof a);
            int64_t cnt[8][C];
            memset(cnt, 0, sizeof cnt);
            for (int i = 0; i < n; i++) {
                assert_true(a[i] >= 0 && a[i] < k);
                cnt[a[i]][cls[i]]++;
            }
            for (int c = 0; c < C; c++) {
                int64_t lo = n, hi = 0;
                for (int f = 0; f < k; f++) {
                    lo = cnt[f][c] < lo ? cnt[f][c] : lo;
                    hi = cnt[f][c] > hi ? cnt[f][c] : hi;
                }
                assert_true(hi - lo <= 1);
            }
        }
    /* different seeds give different folds */
    struct nf_error err = { 0 };
    int64_t y[40];
    for (int i = 0; i < 40; i++)
        y[i] = i % 2;
    assert_int_equal(nf_folds_stratified(y, 40, 2, 4, 1, a, &err), 0);
    assert_int_equal(nf_folds_stratified(y, 40, 2, 4, 2, b, &err), 0);
    assert_true(memcmp(a, b, 40 * sizeof *a) != 0);
    /* too few members: named class, count and folds */
    y[5] = y[9] = y[13] = 2;
    assert_int_equal(nf_folds_stratified(y, 40, 3, 4, 1, a, &err), NF_EDATA);
    assert_string_equal(err.msg, "class 2 has only 3 samples, fewer than the 4 folds");
    assert_int_equal(nf_folds_stratified(y, 40, 3, 3, 1, a, &err), 0);   /* exactly k is enough */
}

/* KFold(k, shuffle=True, random_state=seed):
 *   /usr/bin/python3 -c 'import numpy as np; from sklearn.model_selection import KFold
 *   def kf(n,k,seed):
 *       f=np.empty(n,int)
 *       for i,(tr,te) in enumerate(KFold(k,shuffle=True,random_state=seed).split(np.zeros(n))): f[te]=i
 *       return f.tolist()
 *   print(kf(17,5,7), kf(10,3,0), kf(23,4,2**32-1))' */
static void test_folds_kfold(void **state)
{
    (void)state;
    static const int64_t f17[17] = { 1, 1, 1, 3, 4, 1, 3, 2, 0, 4, 2, 0, 3, 0, 2, 4, 0 };
    static const int64_t f10[10] = { 2, 1, 0, 2, 0, 2, 1, 1, 0, 0 };
    static const int64_t f23[23] = { 3, 1, 3, 3, 0, 1, 2, 3, 0, 0, 2, 2, 3, 1, 1, 2, 2, 0, 2, 1, 1, 0, 0 };
    int64_t got[23], again[23];
    struct nf_error err = { 0 };
    assert_int_equal(nf_folds_kfold(17, 5, 7, got, &err), 0);
    check_folds(got, f17, 17);
    assert_int_equal(nf_folds_kfold(10, 3, 0, got, &err), 0);
    check_folds(got, f10, 10);
    assert_int_equal(nf_folds_kfold(23, 4, 4294967295u, got, &err), 0);
    check_folds(got, f23, 23);
    /* sizes: the first n mod k folds one larger; deterministic */
    assert_int_equal(nf_folds_kfold(23, 4, 99, again, &err), 0);
    assert_int_equal(nf_folds_kfold(23, 4, 99, got, &err), 0);
    assert_memory_equal(got, again, sizeof got);
    int64_t size[4] = { 0 };
    for (int i = 0; i < 23; i++)
        size[got[i]]++;
    assert_int_equal(size[0], 6);
    assert_int_equal(size[1], 6);
    assert_int_equal(size[2], 6);
    assert_int_equal(size[3], 5);
    assert_int_equal(nf_folds_kfold(3, 4, 0, got, &err), NF_EDATA);
    assert_int_equal(nf_folds_kfold(10, 1, 0, got, &err), NF_EINVAL);
}

/* GroupKFold(k):
 *   /usr/bin/python3 -c 'import numpy as np; from sklearn.model_selection import GroupKFold
 *   def gkf(g,k):
 *       g=np.array(g); f=np.empty(len(g),int)
 *       for i,(tr,te) in enumerate(GroupKFold(k).split(np.zeros(len(g)),groups=g)): f[te]=i
 *       return f.tolist()
 *   print(gkf(G1,3), gkf([i%5 for i in range(23)],3),
 *         gkf(sum([[g]*(1+g%3) for g in range(20)],[]),4))' */
static void test_folds_groups(void **state)
{
    (void)state;
    static const int64_t g1[18] = { 0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4, 5, 6, 6, 6, 6, 7 };
    static const int64_t f1[18] = { 0, 0, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1 };
    static const int64_t f2[23] = { 2, 1, 0, 1, 0, 2, 1, 0, 1, 0, 2, 1, 0, 1, 0, 2, 1, 0, 1, 0, 2, 1, 0 };
    static const int64_t f3[39] = { 2, 2, 2, 3, 3, 3, 3, 2, 2, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0,
                                    0, 0, 0, 0, 0, 3, 3, 2, 2, 2, 1, 3, 3, 1, 1, 1, 3, 2, 2 };
    int64_t g2[23], g3[39], got[39];
    for (int i = 0; i < 23; i++)
        g2[i] = i % 5;
    for (int g = 0, i = 0; g < 20; g++)
        for (int r = 0; r < 1 + g % 3; r++)
            g3[i++] = g;
    struct nf_error err = { 0 };
    int64_t k = 3;
    assert_int_equal(nf_folds_groups(g1, 18, 8, &k, got, &err), 0);
    assert_int_equal(k, 3);
    check_folds(got, f1, 18);
    assert_int_equal(nf_folds_groups(g2, 23, 5, &k, got, &err), 0);
    check_folds(got, f2, 23);
    k = 4;   /* 20 groups, many ties: numpy's introsort partitions (> 16 elements) */
    assert_int_equal(nf_folds_groups(g3, 39, 20, &k, got, &err), 0);
    check_folds(got, f3, 39);
    /* leave one group out: k becomes the group count, fold = group */
    k = 10;
    assert_int_equal(nf_folds_groups(g1, 18, 8, &k, got, &err), 0);
    assert_int_equal(k, 8);
    check_folds(got, g1, 18);
    /* an unused group index does not count (sklearn sees only present labels) */
    int64_t g4[6] = { 0, 0, 2, 2, 3, 3 }, f4[6] = { 0, 0, 1, 1, 2, 2 };
    k = 5;
    assert_int_equal(nf_folds_groups(g4, 6, 4, &k, got, &err), 0);
    assert_int_equal(k, 3);
    check_folds(got, f4, 6);
    /* groups stay whole */
    k = 3;
    assert_int_equal(nf_folds_groups(g3, 39, 20, &k, got, &err), 0);
    for (int i = 1; i < 39; i++)
        if (g3[i] == g3[i - 1])
            assert_int_equal(got[i], got[i - 1]);
    /* 40 groups whose sizes (a median-of-3 killer with ties) drive numpy's
     * introsort into its heapsort fallback: the tie order is numpy's, not a
     * stable sort's (the stable order differs in 8 groups). Group sizes and
     * each group's fold, from (sklearn 1.2.1, numpy 1.24.2):
     *   g = np.repeat(np.arange(40), SIZES); folds of GroupKFold(4).split(X, groups=g) */
    static const int64_t sizes[40] = { 1, 11, 2, 12, 3, 21, 4, 19, 5, 20, 6, 19, 7, 18, 8, 18, 9, 17, 10, 1,
                                       2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 16, 16, 15, 15, 14, 14, 13, 13, 17, 12 };
    static const int64_t g2f[40] = { 2, 0, 0, 2, 0, 0, 2, 2, 2, 1, 0, 3, 0, 2, 2, 3, 2, 0, 0, 1,
                                     3, 3, 1, 1, 3, 3, 1, 1, 3, 3, 1, 2, 3, 0, 3, 0, 2, 1, 1, 1 };
    int64_t g5[421], f5[421];
    int64_t *got5 = malloc(421 * sizeof *got5);
    assert_non_null(got5);
    /* 17 groups: the smallest array numpy partitions instead of insertion
     * sorting (same command with SIZES below and GroupKFold(3)) */
    static const int64_t sizes17[17] = { 2, 1, 3, 2, 1, 2, 3, 1, 2, 2, 1, 3, 1, 2, 3, 1, 2 };
    static const int64_t g2f17[17] = { 2, 1, 2, 2, 2, 1, 0, 0, 2, 0, 1, 0, 0, 1, 1, 0, 1 };
    int64_t n17 = 0;
    for (int g = 0; g < 17; g++)
        for (int r = 0; r < sizes17[g]; r++, n17++) {
            g5[n17] = g;
            f5[n17] = g2f17[g];
        }
    k = 3;
    assert_int_equal(nf_folds_groups(g5, n17, 17, &k, got5, &err), 0);
    check_folds(got5, f5, (int)n17);
    for (int g = 0, i = 0; g < 40; g++)
        for (int r = 0; r < sizes[g]; r++, i++) {
            g5[i] = g;
            f5[i] = g2f[g];
        }
    k = 4;
    assert_int_equal(nf_folds_groups(g5, 421, 40, &k, got5, &err), 0);
    check_folds(got5, f5, 421);
    free(got5);
    int64_t one[4] = { 1, 1, 1, 1 };
    k = 3;
    assert_int_equal(nf_folds_groups(one, 4, 2, &k, got, &err), NF_EDATA);
    assert_string_equal(err.msg, "groups has 1 distinct value: cross-validation needs at least 2");
}

/* ---- scores ---- */

static void test_scores(void **state)
{
    (void)state;
    /* AUC with ties (sklearn roc_auc_score: 8/9): positives 0.4, 0.8, 0.4
     * against negatives 0.1, 0.4, 0.2 win 2.5 + 3 + 2.5 of 9 pairs */
    const double yt[6] = { 0, 0, 1, 1, 1, 0 };
    const float dec[6] = { 0.1f, 0.4f, 0.4f, 0.8f, 0.4f, 0.2f };
    expect_close(nf_score(NF_SCORE_AUC, yt, NULL, dec, 6, 1, 2), 8.0 / 9.0, 1e-12, 0, "auc ties", 0);
    /* multiclass: the macro one-vs-rest mean (1 + 0.8 + 14/15) / 3 */
    const double y3[8] = { 0, 1, 2, 2, 1, 0, 1, 2 };
    const float d3[24] = { .5f, .1f, .2f, .2f, .3f, .3f, .1f, .2f, .9f, .3f, .3f, .3f,
                           .2f, .6f, .1f, .4f, .4f, .1f, .2f, .3f, .3f, .0f, .1f, .5f };
    expect_close(nf_score(NF_SCORE_AUC, y3, NULL, d3, 8, 3, 3), (1 + 0.8 + 14.0 / 15.0) / 3, 1e-12, 0,
                 "auc ovr", 0);
    const double all_one[3] = { 1, 1, 1 };
    assert_true(isnan(nf_score(NF_SCORE_AUC, all_one, NULL, dec, 3, 1, 2)));
    /* balanced accuracy: recalls 2/3, 1, 0; the predicted class 3 absent
     * from y_true does not count (sklearn: 0.5555...) */
    const double bt[6] = { 0, 0, 0, 1, 1, 2 }, bp[6] = { 0, 1, 0, 1, 1, 3 };
    expect_close(nf_score(NF_SCORE_BALANCED_ACCURACY, bt, bp, NULL, 6, 1, 4), 5.0 / 9.0, 1e-12, 0, "bacc", 0);
    /* a class never predicted: recall 0 */
    const double ct[7] = { 0, 0, 0, 1, 1, 2, 2 }, cp[7] = { 0, 1, 0, 1, 1, 1, 1 };
    expect_close(nf_score(NF_SCORE_BALANCED_ACCURACY, ct, cp, NULL, 7, 3, 3), 5.0 / 9.0, 1e-12, 0, "bacc2", 0);
    expect_close(nf_score(NF_SCORE_ACCURACY, ct, cp, NULL, 7, 3, 3), 4.0 / 7.0, 1e-12, 0, "accuracy", 0);
    expect_close(nf_score(NF_SCORE_AUTO, ct, cp, NULL, 7, 3, 3), 4.0 / 7.0, 1e-12, 0, "auto is accuracy", 0);
    /* r2: 1 - 1.5/5; constant truth: 1 when perfect, else 0 (sklearn) */
    const double rt[4] = { 1, 2, 3, 4 }, rp[4] = { 1.5, 2, 2.5, 5 };
    expect_close(nf_score(NF_SCORE_R2, rt, rp, NULL, 4, 1, 0), 0.7, 1e-12, 0, "r2", 0);
    const double kt[3] = { 2, 2, 2 }, kp[3] = { 2, 2, 3 };
    expect_close(nf_score(NF_SCORE_R2, kt, kt, NULL, 3, 1, 0), 1.0, 0, 0, "r2 constant perfect", 0);
    expect_close(nf_score(NF_SCORE_R2, kt, kp, NULL, 3, 1, 0), 0.0, 0, 0, "r2 constant", 0);
    assert_true(isnan(nf_score(NF_SCORE_R2, kt, kp, NULL, 1, 1, 0)));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ridge_primal),
        cmocka_unit_test(test_ridge_dual),
        cmocka_unit_test(test_svm_binary),
        cmocka_unit_test(test_svm_ovr),
        cmocka_unit_test(test_svm_gram),
        cmocka_unit_test(test_logistic_binary),
        cmocka_unit_test(test_logistic_ovr),
        cmocka_unit_test(test_predict_and_weights),
        cmocka_unit_test(test_fit_errors),
        cmocka_unit_test(test_scaler),
        cmocka_unit_test(test_folds_stratified_sklearn),
        cmocka_unit_test(test_folds_stratified_properties),
        cmocka_unit_test(test_folds_kfold),
        cmocka_unit_test(test_folds_groups),
        cmocka_unit_test(test_scores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
