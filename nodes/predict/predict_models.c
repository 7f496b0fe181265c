/* predict_models.c — the linear learners, folds and scores behind the
 * `predict` and `searchlight` nodes (the contract is predict_models.h).
 *
 * Learners work on float32 X read in place (never copied) with weights,
 * sums and solver state in double:
 *  - svm: liblinear's dual coordinate descent for the L2-regularised
 *    squared-hinge SVM (Hsieh et al. 2008, solve_l2r_l1l2_svc with D_ii =
 *    1/(2C), no upper bound, with shrinking), the intercept as a constant
 *    feature of value 1 that is penalised (liblinear's bias = 1). Coordinates
 *    are visited in a permutation drawn from a fixed seed, so fits are
 *    deterministic. Stops when the projected-gradient spread is <= tol.
 *    With many more features than samples (p > 2n: whole brain, large ROIs)
 *    the same iterations run on the n x n Gram matrix (one SGEMM), O(n) per
 *    coordinate update instead of O(p), and w = Σ α_i y_i x̃_i at the end.
 *  - logistic: Newton's method with a Jacobi-preconditioned conjugate
 *    gradient (Hessian-vector products only, two passes over X each, so it
 *    works for p >> n) and an Armijo backtracking line search; the intercept
 *    is not penalised. Stops when |∇(f / C)|_inf <= tol, which is sklearn's
 *    lbfgs criterion on its objective Σ loss + |w|² / (2C).
 *  - ridge, ridge_classifier: the closed form on centred data, by Cholesky
 *    of the smaller of the primal (p x p) and dual (n x n) systems.
 * More than two classes: one-vs-rest for all three classifiers (sklearn's
 * LinearSVC and RidgeClassifier do the same; sklearn's LogisticRegression
 * is multinomial by default, ours is one-vs-rest).
 *
 * A classifier refuses (NF_EDATA) training data in which a class has no
 * sample, where sklearn would silently fit the remaining classes only.
 *
 * Folds reproduce sklearn 1.2's StratifiedKFold / KFold (shuffle=True,
 * random_state=seed) bit for bit through engine/core/rng.c, and GroupKFold /
 * leave-one-group-out; GroupKFold orders equal-sized groups as numpy 1.24's
 * unstable argsort does (the same as nodes/ridge/ridge.c's stable rule up to 16
 * groups, different beyond). Scores follow sklearn.metrics (accuracy,
 * balanced accuracy, r2, ROC AUC).
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "core/rng.h"
#include "core/util.h"

#include "predict_models.h"

bool nf_model_is_classifier(enum nf_model_kind kind)
{
    return kind == NF_MODEL_SVM || kind == NF_MODEL_LOGISTIC || kind == NF_MODEL_RIDGE_CLASSIFIER;
}

struct nf_model_opts nf_model_defaults(enum nf_model_kind kind)
{
    struct nf_model_opts o = { .kind = kind, .C = 1.0, .alpha = 1.0, .tol = 1e-4, .max_iter = 1000 };
    if (kind == NF_MODEL_SVM)
        o.max_iter = 10000;
    return o;
}

/* ---- small double-precision helpers on float rows ---- */

static double dot_fd(const float *x, const double *w, int64_t p)
{
    double s = 0;
    for (int64_t j = 0; j < p; j++)
        s += (double)x[j] * w[j];
    return s;
}

static void axpy_fd(double a, const float *x, double *w, int64_t p)
{
    for (int64_t j = 0; j < p; j++)
        w[j] += a * (double)x[j];
}

/* The ±1 target of sample i in class problem o: binary (n_out 1) class 1 is
 * positive, one-vs-rest class o is. */
static double class_sign(const double *y, int64_t i, int64_t o, int64_t n_out)
{
    return y[i] == (double)(n_out == 1 ? 1 : o) ? 1.0 : -1.0;
}

/* log(1 + exp(-m)) without overflow */
static double log1pexp_neg(double m)
{
    return m >= 0 ? log1p(exp(-m)) : -m + log1p(exp(m));
}

/* 1 / (1 + exp(-m)) without overflow */
static double sigmoid(double m)
{
    if (m >= 0)
        return 1.0 / (1.0 + exp(-m));
    double e = exp(m);
    return e / (1.0 + e);
}

/* ---- svm: dual coordinate descent (liblinear's L2-loss SVC dual) ---- */

/* Solves min_α ½ αᵀ(Q + D)α - eᵀα, α >= 0, Q_ij = y_i y_j x̃_iᵀx̃_j,
 * D_ii = 1/(2C), x̃ = [x, 1]; w = Σ α_i y_i x̃_i (p + 1 values, the last one
 * the intercept) is kept up to date. yy: ±1 per sample. */
static int svm_dual_cd(const struct nf_model_opts *opts, const float *X, int64_t n, int64_t p,
                       int64_t ldx, const double *K, const double *yy, double *w, int64_t *iters,
                       bool *converged, struct nf_error *err)
{
    double *alpha = nf_calloc((size_t)n, sizeof *alpha), *QD = nf_malloc((size_t)n * sizeof *QD);
    double *f = K ? nf_calloc((size_t)n, sizeof *f) : NULL;   /* Gram form: f_i = w·x̃_i */
    int64_t *index = nf_malloc((size_t)n * sizeof *index);
    int rc = 0;
    if (!alpha || !QD || !index || (K && !f)) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the svm solver (%lld samples)", (long long)n);
        goto fail;
    }
    const double diag = 0.5 / opts->C;
    memset(w, 0, (size_t)(p + 1) * sizeof *w);
    for (int64_t i = 0; i < n; i++) {
        const float *xi = X + i * ldx;
        double sq = 1.0;   /* the bias feature */
        if (K)
            sq = K[i * n + i];
        else
            for (int64_t j = 0; j < p; j++)
                sq += (double)xi[j] * xi[j];
        QD[i] = diag + sq;
        index[i] = i;
    }
    /* liblinear draws the visiting order with rand(); a fixed seed keeps
     * every fit (and every thread) reproducible */
    uint64_t rs = 0x6c69626c696e6561ull;
    int64_t active = n, iter = 0;
    double pg_max_old = INFINITY;
    *converged = false;
    while (iter < opts->max_iter) {
        double pg_max = -INFINITY, pg_min = INFINITY;
        for (int64_t s = 0; s < active; s++) {
            int64_t j = s + (int64_t)(nf_splitmix64(&rs) % (uint64_t)(active - s));
            int64_t t = index[s];
            index[s] = index[j];
            index[j] = t;
        }
        for (int64_t s = 0; s < active; s++) {
            int64_t i = index[s];
            const float *xi = X + i * ldx;
            double G = yy[i] * (K ? f[i] : dot_fd(xi, w, p) + w[p]) - 1.0 + alpha[i] * diag;
            double pg = 0;
            if (alpha[i] == 0) {
                if (G > pg_max_old) {   /* shrink: stays at the bound */
                    active--;
                    int64_t t = index[s];
                    index[s] = index[active];
                    index[active] = t;
                    s--;
                    continue;
                }
                if (G < 0)
                    pg = G;
            } else {
                pg = G;
            }
            pg_max = fmax(pg_max, pg);
            pg_min = fmin(pg_min, pg);
            if (fabs(pg) > 1.0e-12) {
                double old = alpha[i];
                alpha[i] = fmax(alpha[i] - G / QD[i], 0.0);
                double d = (alpha[i] - old) * yy[i];
                if (K) {
                    const double *Ki = K + i * n;
                    for (int64_t q = 0; q < n; q++)
                        f[q] += d * Ki[q];
                } else {
                    axpy_fd(d, xi, w, p);
                    w[p] += d;
                }
            }
        }
        iter++;
        if (pg_max - pg_min <= opts->tol) {
            if (active == n) {
                *converged = true;
                break;
            }
            active = n;   /* check the shrunk coordinates once more */
            pg_max_old = INFINITY;
            continue;
        }
        pg_max_old = pg_max <= 0 ? INFINITY : pg_max;
    }
    *iters = iter;
    if (K)   /* w = Σ α_i y_i x̃_i */
        for (int64_t i = 0; i < n; i++)
            if (alpha[i] != 0) {
                axpy_fd(alpha[i] * yy[i], X + i * ldx, w, p);
                w[p] += alpha[i] * yy[i];
            }
fail:
    free(alpha);
    free(QD);
    free(index);
    free(f);
    return rc;
}

/* K = X̃ X̃ᵀ with the bias feature (x̃ = [x, 1]), for the Gram form of the svm
 * solver when features outnumber samples: one SGEMM, then double. */
static double *svm_gram(const float *X, int64_t n, int64_t p, int64_t ldx)
{
    float *Kf = nf_malloc((size_t)(n * n) * sizeof *Kf);
    double *K = nf_malloc((size_t)(n * n) * sizeof *K);
    if (!Kf || !K) {
        free(Kf);
        free(K);
        return NULL;
    }
    nf_kernels_cpu()->sgemm(false, true, n, n, p, 1.0f, X, ldx, X, ldx, 0.0f, Kf, n);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++)   /* symmetric, exactly */
            K[i * n + j] = K[j * n + i] = (double)Kf[i * n + j] + 1.0;
    free(Kf);
    return K;
}

/* ---- logistic: Newton-CG ---- */

struct logit {
    const float *X;
    int64_t n, p, ldx;
    const double *yy;
    double C;
};

/* f = ½|w|² + C Σ log(1 + exp(-y_i z_i)) for margins z = Xw + b; w has p + 1
 * values and the last (the intercept) is not penalised. */
static double logit_objective(const struct logit *L, const double *w, const double *z)
{
    double f = 0;
    for (int64_t i = 0; i < L->n; i++)
        f += log1pexp_neg(L->yy[i] * z[i]);
    f *= L->C;
    for (int64_t j = 0; j < L->p; j++)
        f += 0.5 * w[j] * w[j];
    return f;
}

/* Xv_i = v[0..p) · x_i + v[p] */
static void logit_xv(const struct logit *L, const double *v, double *xv)
{
    for (int64_t i = 0; i < L->n; i++)
        xv[i] = dot_fd(L->X + i * L->ldx, v, L->p) + v[L->p];
}

/* out = H v with H = diag(1,..,1,0) + X̃ᵀ D X̃ (D already includes C). */
static void logit_hv(const struct logit *L, const double *D, const double *v, double *tmp_n, double *out)
{
    logit_xv(L, v, tmp_n);
    for (int64_t j = 0; j < L->p; j++)
        out[j] = v[j];
    out[L->p] = 0;
    for (int64_t i = 0; i < L->n; i++) {
        double u = D[i] * tmp_n[i];
        axpy_fd(u, L->X + i * L->ldx, out, L->p);
        out[L->p] += u;
    }
}

static double dot_dd(const double *a, const double *b, int64_t m)
{
    double s = 0;
    for (int64_t j = 0; j < m; j++)
        s += a[j] * b[j];
    return s;
}

static int logistic_newton(const struct nf_model_opts *opts, const float *X, int64_t n, int64_t p,
                           int64_t ldx, const double *yy, double *w, int64_t *iters, bool *converged,
                           struct nf_error *err)
{
    const struct logit L = { X, n, p, ldx, yy, opts->C };
    const int64_t m = p + 1;
    double *buf = nf_malloc((size_t)(4 * n + 7 * m) * sizeof *buf);
    int rc = 0;
    if (!buf) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the logistic solver (%lld x %lld)", (long long)n,
                     (long long)p);
        goto fail;
    }
    double *z = buf, *D = z + n, *xd = D + n, *tmp = xd + n;
    double *g = tmp + n, *d = g + m, *r = d + m, *s = r + m, *q = s + m, *M = q + m, *wn = M + m;
    memset(w, 0, (size_t)m * sizeof *w);
    memset(z, 0, (size_t)n * sizeof *z);
    double f = logit_objective(&L, w, z);
    int64_t it = 0;
    *converged = false;
    for (; it < opts->max_iter; it++) {
        /* gradient, Hessian weights and the Jacobi preconditioner */
        memcpy(g, w, (size_t)p * sizeof *g);
        g[p] = 0;
        for (int64_t j = 0; j < m; j++)
            M[j] = j < p ? 1.0 : 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float *xi = X + i * ldx;
            double sg = sigmoid(yy[i] * z[i]);
            double c = -opts->C * yy[i] * (1.0 - sg);
            D[i] = opts->C * sg * (1.0 - sg);
            axpy_fd(c, xi, g, p);
            g[p] += c;
            for (int64_t j = 0; j < p; j++)
                M[j] += D[i] * (double)xi[j] * xi[j];
            M[p] += D[i];
        }
        double gmax = 0;
        for (int64_t j = 0; j < m; j++)
            gmax = fmax(gmax, fabs(g[j]));
        if (gmax <= opts->tol * opts->C) {
            *converged = true;
            break;
        }
        for (int64_t j = 0; j < m; j++)
            M[j] = M[j] > 1e-300 ? M[j] : 1.0;
        /* H d = -g by preconditioned CG; H has at most n + 2 distinct
         * eigenvalues, so n + 2 steps suffice in exact arithmetic; the
         * forcing term shrinks with |g| for a quadratic finish */
        double gnorm = sqrt(dot_dd(g, g, m)), cg_tol = fmin(0.1, sqrt(gnorm)) * gnorm;
        int64_t cg_max = (n + 2 < m ? n + 2 : m) + 10;
        memset(d, 0, (size_t)m * sizeof *d);
        for (int64_t j = 0; j < m; j++) {
            r[j] = -g[j];
            s[j] = r[j] / M[j];
        }
        double rz = dot_dd(r, s, m);
        for (int64_t k = 0; k < cg_max && sqrt(dot_dd(r, r, m)) > cg_tol; k++) {
            logit_hv(&L, D, s, tmp, q);
            double sq = dot_dd(s, q, m);
            if (!(sq > 0))
                break;
            double a = rz / sq;
            for (int64_t j = 0; j < m; j++) {
                d[j] += a * s[j];
                r[j] -= a * q[j];
            }
            double rz_new = 0;
            for (int64_t j = 0; j < m; j++)
                rz_new += r[j] * r[j] / M[j];
            double beta = rz_new / rz;
            rz = rz_new;
            for (int64_t j = 0; j < m; j++)
                s[j] = r[j] / M[j] + beta * s[j];
        }
        double gd = dot_dd(g, d, m);
        if (!(gd < 0)) {   /* CG made no progress: a preconditioned gradient step */
            for (int64_t j = 0; j < m; j++)
                d[j] = -g[j] / M[j];
            gd = dot_dd(g, d, m);
        }
        /* Armijo backtracking along d */
        logit_xv(&L, d, xd);
        double t = 1, f_new = f;
        bool accepted = false;
        for (int ls = 0; ls < 60; ls++, t *= 0.5) {
            for (int64_t j = 0; j < m; j++)
                wn[j] = w[j] + t * d[j];
            for (int64_t i = 0; i < n; i++)
                tmp[i] = z[i] + t * xd[i];
            f_new = logit_objective(&L, wn, tmp);
            if (f_new <= f + 1e-4 * t * gd) {
                accepted = true;
                break;
            }
        }
        if (!accepted) {
            /* no decrease is representable: the gradient is at round-off
             * level, which counts as converged */
            *converged = gmax <= 1e-8 * (1.0 + fabs(f));
            break;
        }
        memcpy(w, wn, (size_t)m * sizeof *w);
        memcpy(z, tmp, (size_t)n * sizeof *z);
        f = f_new;
    }
    *iters = it;
fail:
    free(buf);
    return rc;
}

/* ---- ridge: closed form by Cholesky ---- */

/* In place: A (m x m, row-major, symmetric) = L Lᵀ, lower triangle. -1 when
 * A is not positive definite, counting pivots at round-off level (relative
 * to the largest diagonal entry) as zero. */
static int cholesky(double *A, int64_t m)
{
    double dmax = 0;
    for (int64_t j = 0; j < m; j++)
        dmax = fmax(dmax, A[j * m + j]);
    const double tiny = (double)m * DBL_EPSILON * dmax;
    for (int64_t j = 0; j < m; j++) {
        double djj = A[j * m + j];
        for (int64_t k = 0; k < j; k++)
            djj -= A[j * m + k] * A[j * m + k];
        if (!(djj > tiny))
            return -1;
        djj = sqrt(djj);
        A[j * m + j] = djj;
        for (int64_t i = j + 1; i < m; i++) {
            double a = A[i * m + j];
            for (int64_t k = 0; k < j; k++)
                a -= A[i * m + k] * A[j * m + k];
            A[i * m + j] = a / djj;
        }
    }
    return 0;
}

/* B (m x nrhs) := (L Lᵀ)⁻¹ B */
static void chol_solve(const double *Lf, int64_t m, double *B, int64_t nrhs)
{
    for (int64_t c = 0; c < nrhs; c++) {
        for (int64_t i = 0; i < m; i++) {
            double v = B[i * nrhs + c];
            for (int64_t k = 0; k < i; k++)
                v -= Lf[i * m + k] * B[k * nrhs + c];
            B[i * nrhs + c] = v / Lf[i * m + i];
        }
        for (int64_t i = m - 1; i >= 0; i--) {
            double v = B[i * nrhs + c];
            for (int64_t k = i + 1; k < m; k++)
                v -= Lf[k * m + i] * B[k * nrhs + c];
            B[i * nrhs + c] = v / Lf[i * m + i];
        }
    }
}

/* Ridge on centred X and targets T (n x n_out): coef (n_out x p) and
 * intercept = tmean - xmean · coef. */
static int ridge_fit(const struct nf_model_opts *opts, const float *X, int64_t n, int64_t p, int64_t ldx,
                     const double *T, int64_t n_out, struct nf_linear_model *mdl, struct nf_error *err)
{
    const bool dual = n < p;
    const int64_t m = dual ? n : p;
    double *xm = nf_calloc((size_t)p, sizeof *xm), *tm = nf_calloc((size_t)n_out, sizeof *tm);
    double *A = nf_calloc((size_t)(m * m), sizeof *A), *B = nf_calloc((size_t)(m * n_out), sizeof *B);
    double *xc = nf_malloc((size_t)p * sizeof *xc), *W = NULL;
    int rc = 0;
    if (!xm || !tm || !A || !B || !xc) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the ridge system (%lld x %lld)", (long long)m,
                     (long long)m);
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < p; j++)
            xm[j] += X[i * ldx + j];
        for (int64_t o = 0; o < n_out; o++)
            tm[o] += T[i * n_out + o];
    }
    for (int64_t j = 0; j < p; j++)
        xm[j] /= (double)n;
    for (int64_t o = 0; o < n_out; o++)
        tm[o] /= (double)n;
    if (dual) {
        /* (Xc Xcᵀ + αI) a = Tc, coef = Xcᵀ a. Centred first (in double, so the
         * Gram is accurate whatever the means), then the Gram as one DSYRK:
         * n² p multiply-adds that took most of a whole-brain fit as scalar
         * loops */
        double *Xc = nf_malloc((size_t)(n * p) * sizeof *Xc);
        if (!Xc) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the ridge system (%lld x %lld)", (long long)n,
                         (long long)p);
            goto fail;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < p; j++)
                Xc[i * p + j] = (double)X[i * ldx + j] - xm[j];
        nf_kernels_cpu()->dsyrk(n, p, Xc, p, A, n);
        free(Xc);
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < n_out; o++)
                B[i * n_out + o] = T[i * n_out + o] - tm[o];
    } else {
        /* (XcᵀXc + αI) coef = XcᵀTc */
        for (int64_t i = 0; i < n; i++) {
            for (int64_t j = 0; j < p; j++)
                xc[j] = X[i * ldx + j] - xm[j];
            for (int64_t a = 0; a < p; a++) {
                double xa = xc[a];
                double *row = A + a * p;
                for (int64_t b = 0; b <= a; b++)
                    row[b] += xa * xc[b];
                for (int64_t o = 0; o < n_out; o++)
                    B[a * n_out + o] += xa * (T[i * n_out + o] - tm[o]);
            }
        }
        for (int64_t a = 0; a < p; a++)
            for (int64_t b = 0; b < a; b++)
                A[b * p + a] = A[a * p + b];
    }
    for (int64_t j = 0; j < m; j++)
        A[j * m + j] += opts->alpha;
    if (cholesky(A, m) < 0) {
        rc = NF_FAIL(err, NF_EDATA, "the ridge system is singular (alpha %g): the design is rank "
                     "deficient; use alpha > 0", opts->alpha);
        goto fail;
    }
    chol_solve(A, m, B, n_out);
    if (dual) {
        W = nf_calloc((size_t)(p * n_out), sizeof *W);
        if (!W) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the ridge weights");
            goto fail;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < p; j++) {
                double x = X[i * ldx + j] - xm[j];
                for (int64_t o = 0; o < n_out; o++)
                    W[j * n_out + o] += x * B[i * n_out + o];
            }
    }
    const double *coef = dual ? W : B;   /* p x n_out */
    for (int64_t o = 0; o < n_out; o++) {
        double b = tm[o];
        for (int64_t j = 0; j < p; j++) {
            mdl->coef[o * p + j] = (float)coef[j * n_out + o];
            b -= xm[j] * coef[j * n_out + o];
        }
        mdl->intercept[o] = (float)b;
    }
fail:
    free(xm);
    free(tm);
    free(A);
    free(B);
    free(xc);
    free(W);
    return rc;
}

/* ---- fitting ---- */

static int check_fit_input(const struct nf_model_opts *opts, const float *X, int64_t n, int64_t p,
                           int64_t ldx, const double *y, int64_t n_classes, struct nf_error *err)
{
    if (n < 1 || p < 1)
        return NF_FAIL(err, NF_EDATA, "cannot fit a model on %lld samples and %lld features", (long long)n,
                       (long long)p);
    if (ldx < p)
        return NF_FAIL(err, NF_EBUG, "leading dimension %lld < %lld features", (long long)ldx, (long long)p);
    bool iterative = opts->kind == NF_MODEL_SVM || opts->kind == NF_MODEL_LOGISTIC;
    if (iterative && (!(opts->C > 0) || !isfinite(opts->C) || !(opts->tol > 0) || opts->max_iter < 1))
        return NF_FAIL(err, NF_EINVAL, "invalid solver settings (C %g, tol %g, max_iter %lld): C and tol "
                       "must be > 0, max_iter >= 1", opts->C, opts->tol, (long long)opts->max_iter);
    if (!iterative && (!(opts->alpha >= 0) || !isfinite(opts->alpha)))
        return NF_FAIL(err, NF_EINVAL, "the ridge penalty alpha must be finite and >= 0 (got %g)", opts->alpha);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < p; j++)
            if (!isfinite(X[i * ldx + j]))
                return NF_FAIL(err, NF_EDATA, "the data have a non-finite value (NaN or inf) at sample %lld, "
                               "feature %lld", (long long)i + 1, (long long)j + 1);
    if (!nf_model_is_classifier(opts->kind)) {
        for (int64_t i = 0; i < n; i++)
            if (!isfinite(y[i]))
                return NF_FAIL(err, NF_EDATA, "the target of sample %lld is not finite", (long long)i + 1);
        return 0;
    }
    if (n_classes < 2)
        return NF_FAIL(err, NF_EDATA, "a classifier needs at least 2 classes (got %lld)", (long long)n_classes);
    int64_t *count = nf_calloc((size_t)n_classes, sizeof *count);
    if (!count)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc = 0;
    for (int64_t i = 0; i < n; i++) {
        double c = y[i];
        if (!(c >= 0 && c < (double)n_classes && c == floor(c))) {
            rc = NF_FAIL(err, NF_EDATA, "sample %lld has class %g, not a class index 0..%lld", (long long)i + 1,
                         c, (long long)n_classes - 1);
            goto fail;
        }
        count[(int64_t)c]++;
    }
    for (int64_t c = 0; c < n_classes; c++)
        if (count[c] == 0) {
            /* sklearn would fit the remaining classes only; the contract
             * here has one score function per class, so refuse */
            rc = NF_FAIL(err, NF_EDATA, "class %lld has no training samples (of %lld): every class needs "
                         "at least one", (long long)c, (long long)n);
            goto fail;
        }
fail:
    free(count);
    return rc;
}

int nf_model_fit(const struct nf_model_opts *opts, const float *X, int64_t n, int64_t p, int64_t ldx,
                 const double *y, int64_t n_classes, struct nf_linear_model *m, struct nf_error *err)
{
    double *w = NULL, *yy = NULL, *T = NULL, *K = NULL;
    int rc = 0;
    memset(m, 0, sizeof *m);
    NF_TRY(rc = check_fit_input(opts, X, n, p, ldx, y, n_classes, err));
    const bool classifier = nf_model_is_classifier(opts->kind);
    m->kind = opts->kind;
    m->p = p;
    m->n_classes = classifier ? n_classes : 0;
    m->n_out = classifier && n_classes > 2 ? n_classes : 1;
    m->converged = true;
    m->coef = nf_calloc((size_t)(m->n_out * p), sizeof *m->coef);
    m->intercept = nf_calloc((size_t)m->n_out, sizeof *m->intercept);
    if (!m->coef || !m->intercept) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for a %lld x %lld model", (long long)m->n_out, (long long)p);
        goto fail;
    }
    if (opts->kind == NF_MODEL_RIDGE || opts->kind == NF_MODEL_RIDGE_CLASSIFIER) {
        T = nf_malloc((size_t)(n * m->n_out) * sizeof *T);
        if (!T) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t i = 0; i < n; i++)
            for (int64_t o = 0; o < m->n_out; o++)
                T[i * m->n_out + o] = classifier ? class_sign(y, i, o, m->n_out) : y[i];
        rc = ridge_fit(opts, X, n, p, ldx, T, m->n_out, m, err);
    } else {
        w = nf_malloc((size_t)(p + 1) * sizeof *w);
        yy = nf_malloc((size_t)n * sizeof *yy);
        if (!w || !yy) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        /* many more features than samples (whole brain, large ROIs): coordinate
         * updates cost O(n) on the Gram matrix instead of O(p) on the rows;
         * one Gram matrix serves every one-vs-rest problem */
        if (opts->kind == NF_MODEL_SVM && (opts->gram > 0 || (opts->gram == 0 && p > 2 * n)) &&
            !(K = svm_gram(X, n, p, ldx))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for a %lld x %lld Gram matrix", (long long)n, (long long)n);
            goto fail;
        }
        for (int64_t o = 0; o < m->n_out; o++) {
            int64_t iters = 0;
            bool conv = false;
            for (int64_t i = 0; i < n; i++)
                yy[i] = class_sign(y, i, o, m->n_out);
            if (opts->kind == NF_MODEL_SVM)
                NF_TRY(rc = svm_dual_cd(opts, X, n, p, ldx, K, yy, w, &iters, &conv, err));
            else
                NF_TRY(rc = logistic_newton(opts, X, n, p, ldx, yy, w, &iters, &conv, err));
            for (int64_t j = 0; j < p; j++)
                m->coef[o * p + j] = (float)w[j];
            m->intercept[o] = (float)w[p];
            m->iterations = iters > m->iterations ? iters : m->iterations;
            m->converged = m->converged && conv;
        }
    }
fail:
    free(w);
    free(yy);
    free(T);
    free(K);
    if (rc < 0)
        nf_model_free(m);
    return rc;
}

static double score_row(const struct nf_linear_model *m, int64_t o, const float *x)
{
    double s = m->intercept[o];
    const float *c = m->coef + o * m->p;
    for (int64_t j = 0; j < m->p; j++)
        s += (double)c[j] * x[j];
    return s;
}

void nf_model_decision(const struct nf_linear_model *m, const float *X, int64_t n, int64_t ldx, float *out)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t o = 0; o < m->n_out; o++)
            out[i * m->n_out + o] = (float)score_row(m, o, X + i * ldx);
}

void nf_model_predict(const struct nf_linear_model *m, const float *X, int64_t n, int64_t ldx, double *out)
{
    for (int64_t i = 0; i < n; i++) {
        const float *x = X + i * ldx;
        if (!nf_model_is_classifier(m->kind)) {
            out[i] = score_row(m, 0, x);
        } else if (m->n_out == 1) {
            out[i] = score_row(m, 0, x) > 0 ? 1 : 0;
        } else {   /* argmax, the first on ties (numpy) */
            int64_t best = 0;
            double best_s = score_row(m, 0, x);
            for (int64_t o = 1; o < m->n_out; o++) {
                double s = score_row(m, o, x);
                if (s > best_s) {
                    best_s = s;
                    best = o;
                }
            }
            out[i] = (double)best;
        }
    }
}

void nf_model_weights(const struct nf_linear_model *m, float *w)
{
    for (int64_t j = 0; j < m->p; j++) {
        double s = 0;
        for (int64_t o = 0; o < m->n_out; o++)
            s += m->coef[o * m->p + j];
        w[j] = (float)(s / (double)m->n_out);
    }
}

void nf_model_free(struct nf_linear_model *m)
{
    if (!m)
        return;
    free(m->coef);
    free(m->intercept);
    m->coef = NULL;
    m->intercept = NULL;
}

double nf_model_objective(const struct nf_model_opts *opts, const struct nf_linear_model *m, int64_t o,
                          const float *X, int64_t n, int64_t ldx, const double *y)
{
    const float *c = m->coef + o * m->p;
    double penalty = 0, data = 0;
    for (int64_t j = 0; j < m->p; j++)
        penalty += (double)c[j] * c[j];
    for (int64_t i = 0; i < n; i++) {
        double s = score_row(m, o, X + i * ldx);
        double t = m->kind == NF_MODEL_RIDGE ? y[i] : class_sign(y, i, o, m->n_out);
        switch (m->kind) {
        case NF_MODEL_SVM: {
            double h = fmax(0.0, 1.0 - t * s);
            data += h * h;
            break;
        }
        case NF_MODEL_LOGISTIC:
            data += log1pexp_neg(t * s);
            break;
        default:
            data += (t - s) * (t - s);
            break;
        }
    }
    switch (m->kind) {
    case NF_MODEL_SVM:   /* the intercept is a penalised weight */
        return 0.5 * (penalty + (double)m->intercept[o] * m->intercept[o]) + opts->C * data;
    case NF_MODEL_LOGISTIC:
        return 0.5 * penalty + opts->C * data;
    default:
        return data + opts->alpha * penalty;
    }
}

/* ---- standardisation ---- */

void nf_scaler_fit(const float *X, int64_t n, int64_t p, int64_t ldx, double *mean, double *std)
{
    for (int64_t j = 0; j < p; j++)
        mean[j] = std[j] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < p; j++)
            mean[j] += X[i * ldx + j];
    for (int64_t j = 0; j < p; j++)
        mean[j] /= (double)(n > 0 ? n : 1);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < p; j++) {
            double d = X[i * ldx + j] - mean[j];
            std[j] += d * d;
        }
    for (int64_t j = 0; j < p; j++) {
        double var = std[j] / (double)(n > 0 ? n : 1);
        /* sklearn's _is_constant_feature: variance at round-off level is 0 */
        double bound = (double)n * DBL_EPSILON * var + pow((double)n * mean[j] * DBL_EPSILON, 2);
        std[j] = var <= bound ? 1.0 : sqrt(var);
    }
}

void nf_scaler_apply(const float *X, int64_t n, int64_t p, int64_t ldx, const double *mean, const double *std,
                     float *out, int64_t ldo)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < p; j++)
            out[i * ldo + j] = (float)((X[i * ldx + j] - mean[j]) / std[j]);
}

/* ---- folds ---- */

/* numpy RandomState.shuffle of a 1-d array (Fisher-Yates from the end, as
 * nf_mt_permutation) */
static void mt_shuffle(struct nf_mt19937 *mt, int64_t *a, int64_t n)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)nf_mt_bounded(mt, (uint32_t)i);
        int64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static int check_k(int64_t n, int64_t k, struct nf_error *err)
{
    if (k < 2)
        return NF_FAIL(err, NF_EINVAL, "cross-validation needs at least 2 folds (got %lld)", (long long)k);
    if (n < k)
        return NF_FAIL(err, NF_EDATA, "%lld samples cannot be split into %lld folds", (long long)n, (long long)k);
    if (n > (int64_t)UINT32_MAX)
        return NF_FAIL(err, NF_EDATA, "too many samples (%lld) to shuffle", (long long)n);
    return 0;
}

int nf_folds_stratified(const int64_t *cls, int64_t n, int64_t n_classes, int64_t k, uint32_t seed,
                        int64_t *fold_of, struct nf_error *err)
{
    int64_t *enc = NULL, *count = NULL, *alloc = NULL, *folds = NULL;
    int rc = 0;
    NF_TRY(rc = check_k(n, k, err));
    if (n_classes < 1)
        return NF_FAIL(err, NF_EDATA, "no classes to stratify by");
    enc = nf_malloc((size_t)n_classes * sizeof *enc);
    count = nf_calloc((size_t)n_classes, sizeof *count);
    alloc = nf_calloc((size_t)(k * n_classes), sizeof *alloc);
    folds = nf_malloc((size_t)n * sizeof *folds);
    if (!enc || !count || !alloc || !folds) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    /* sklearn encodes classes in order of first appearance */
    for (int64_t c = 0; c < n_classes; c++)
        enc[c] = -1;
    int64_t n_enc = 0;
    for (int64_t i = 0; i < n; i++) {
        if (cls[i] < 0 || cls[i] >= n_classes) {
            rc = NF_FAIL(err, NF_EDATA, "sample %lld has class %lld, not a class index 0..%lld", (long long)i + 1,
                         (long long)cls[i], (long long)n_classes - 1);
            goto fail;
        }
        if (enc[cls[i]] < 0)
            enc[cls[i]] = n_enc++;
        count[enc[cls[i]]]++;
    }
    for (int64_t c = 0; c < n_classes; c++)
        if (enc[c] >= 0 && count[enc[c]] < k) {
            rc = NF_FAIL(err, NF_EDATA, "class %lld has only %lld sample%s, fewer than the %lld folds", (long long)c,
                         (long long)count[enc[c]], count[enc[c]] == 1 ? "" : "s", (long long)k);
            goto fail;
        }
    /* allocation[f][c] = bincount(y_order[f::k]) with y_order = sort(y_encoded) */
    for (int64_t c = 0, pos = 0; c < n_enc; c++)
        for (int64_t r = 0; r < count[c]; r++, pos++)
            alloc[(pos % k) * n_enc + c]++;
    struct nf_mt19937 mt;
    nf_mt_seed(&mt, seed);
    for (int64_t c = 0; c < n_enc; c++) {
        int64_t len = 0;
        for (int64_t f = 0; f < k; f++)
            for (int64_t r = 0; r < alloc[f * n_enc + c]; r++)
                folds[len++] = f;
        mt_shuffle(&mt, folds, len);
        for (int64_t i = 0, at = 0; i < n; i++)
            if (enc[cls[i]] == c)
                fold_of[i] = folds[at++];
    }
fail:
    free(enc);
    free(count);
    free(alloc);
    free(folds);
    return rc;
}

int nf_folds_kfold(int64_t n, int64_t k, uint32_t seed, int64_t *fold_of, struct nf_error *err)
{
    int rc = check_k(n, k, err);
    if (rc < 0)
        return rc;
    int64_t *perm = nf_malloc((size_t)n * sizeof *perm);
    if (!perm)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    struct nf_mt19937 mt;
    nf_mt_seed(&mt, seed);
    nf_mt_permutation(&mt, perm, n);
    /* the first n mod k folds get one more sample */
    for (int64_t f = 0, start = 0; f < k; f++) {
        int64_t size = n / k + (f < n % k ? 1 : 0);
        for (int64_t i = start; i < start + size; i++)
            fold_of[perm[i]] = f;
        start += size;
    }
    free(perm);
    return 0;
}

/* numpy 1.24's np.argsort(v) (kind 'quicksort') for int64, step for step:
 * introsort with median-of-3 pivots, insertion sort below 16 elements and
 * heapsort past a depth of 2 log2(num). It is not stable, and sklearn's
 * GroupKFold depends on how it orders groups of equal size. (numpy >= 1.25
 * may dispatch to an AVX-512 argsort with yet another tie order.) */
/* numpy's sift-down: tmp goes into the 1-based heap a[1..n] at slot i. */
static void aheap_sift(const int64_t *v, int64_t *a, int64_t tmp, int64_t i, int64_t n)
{
    for (int64_t j = i << 1; j <= n; j += j) {
        if (j < n && v[a[j]] < v[a[j + 1]])
            j += 1;
        if (!(v[tmp] < v[a[j]]))
            break;
        a[i] = a[j];
        i = j;
    }
    a[i] = tmp;
}

static void numpy_aheapsort(const int64_t *v, int64_t *tosort, int64_t n)
{
    int64_t *a = tosort - 1;   /* 1-based heap indexing */
    for (int64_t l = n >> 1; l > 0; --l)
        aheap_sift(v, a, a[l], l, n);
    while (n > 1) {
        int64_t tmp = a[n];
        a[n] = a[1];
        n -= 1;
        aheap_sift(v, a, tmp, 1, n);
    }
}

#define SWAP_I64(x, y) do { int64_t t_ = (x); (x) = (y); (y) = t_; } while (0)

static void numpy_argsort(const int64_t *v, int64_t *tosort, int64_t num)
{
    enum { SMALL_QUICKSORT = 15, STACK = 128 };
    for (int64_t i = 0; i < num; i++)
        tosort[i] = i;
    if (num < 2)
        return;
    int64_t *pl = tosort, *pr = tosort + num - 1, *stack[STACK], **sptr = stack;
    int depth[STACK], *psdepth = depth, cdepth = 0;
    for (int64_t m = num; m > 1; m >>= 1)
        cdepth++;   /* npy_get_msb */
    cdepth *= 2;
    for (;;) {
        if (cdepth < 0) {
            numpy_aheapsort(v, pl, pr - pl + 1);
        } else {
            while ((pr - pl) > SMALL_QUICKSORT) {
                int64_t *pm = pl + ((pr - pl) >> 1), *pi = pl, *pj = pr - 1;
                if (v[*pm] < v[*pl])
                    SWAP_I64(*pm, *pl);
                if (v[*pr] < v[*pm])
                    SWAP_I64(*pr, *pm);
                if (v[*pm] < v[*pl])
                    SWAP_I64(*pm, *pl);
                int64_t vp = v[*pm];
                SWAP_I64(*pm, *pj);
                for (;;) {
                    do
                        ++pi;
                    while (v[*pi] < vp);
                    do
                        --pj;
                    while (vp < v[*pj]);
                    if (pi >= pj)
                        break;
                    SWAP_I64(*pi, *pj);
                }
                SWAP_I64(*pi, *(pr - 1));
                /* push the larger partition */
                if (pi - pl < pr - pi) {
                    *sptr++ = pi + 1;
                    *sptr++ = pr;
                    pr = pi - 1;
                } else {
                    *sptr++ = pl;
                    *sptr++ = pi - 1;
                    pl = pi + 1;
                }
                *psdepth++ = --cdepth;
            }
            for (int64_t *pi = pl + 1; pi <= pr; ++pi) {   /* insertion sort */
                int64_t vi = *pi, vp = v[vi], *pj = pi, *pk = pi - 1;
                while (pj > pl && vp < v[*pk])
                    *pj-- = *pk--;
                *pj = vi;
            }
        }
        if (sptr == stack)
            break;
        pr = *(--sptr);
        pl = *(--sptr);
        cdepth = *(--psdepth);
    }
}

int nf_folds_groups(const int64_t *group, int64_t n, int64_t n_groups, int64_t *k, int64_t *fold_of,
                    struct nf_error *err)
{
    int64_t *count = NULL, *id = NULL, *by_size = NULL, *load = NULL, *group_fold = NULL;
    int rc = 0;
    if (*k < 2)
        return NF_FAIL(err, NF_EINVAL, "cross-validation needs at least 2 folds (got %lld)", (long long)*k);
    if (n_groups < 1)
        return NF_FAIL(err, NF_EDATA, "groups has no values: cross-validation needs at least 2");
    count = nf_calloc((size_t)n_groups, sizeof *count);
    id = nf_malloc((size_t)n_groups * sizeof *id);
    if (!count || !id) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < n; i++) {
        if (group[i] < 0 || group[i] >= n_groups) {
            rc = NF_FAIL(err, NF_EDATA, "sample %lld has group %lld, not a group index 0..%lld", (long long)i + 1,
                         (long long)group[i], (long long)n_groups - 1);
            goto fail;
        }
        count[group[i]]++;
    }
    /* only groups with samples exist for sklearn (np.unique): renumber them */
    int64_t G = 0;
    for (int64_t g = 0; g < n_groups; g++) {
        id[g] = count[g] ? G : -1;
        if (count[g])
            count[G++] = count[g];
    }
    if (G < 2) {
        rc = NF_FAIL(err, NF_EDATA, "groups has %lld distinct value%s: cross-validation needs at least 2",
                     (long long)G, G == 1 ? "" : "s");
        goto fail;
    }
    group_fold = nf_malloc((size_t)G * sizeof *group_fold);
    if (!group_fold) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (*k >= G) {   /* leave one group out, folds in group order */
        *k = G;
        for (int64_t g = 0; g < G; g++)
            group_fold[g] = g;
    } else {
        /* GroupKFold: largest groups first (argsort(sizes)[::-1] with
         * numpy's unstable introsort, so ties fall as in sklearn), each to
         * the fold with the fewest samples so far (the first such fold) */
        by_size = nf_malloc((size_t)G * sizeof *by_size);
        load = nf_calloc((size_t)*k, sizeof *load);
        if (!by_size || !load) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        numpy_argsort(count, by_size, G);
        for (int64_t a = 0, b = G - 1; a < b; a++, b--) {
            int64_t t = by_size[a];
            by_size[a] = by_size[b];
            by_size[b] = t;
        }
        for (int64_t q = 0; q < G; q++) {
            int64_t lightest = 0;
            for (int64_t f = 1; f < *k; f++)
                if (load[f] < load[lightest])
                    lightest = f;
            load[lightest] += count[by_size[q]];
            group_fold[by_size[q]] = lightest;
        }
    }
    for (int64_t i = 0; i < n; i++)
        fold_of[i] = group_fold[id[group[i]]];
fail:
    free(count);
    free(id);
    free(by_size);
    free(load);
    free(group_fold);
    return rc;
}

/* ---- scores ---- */

struct ranked {
    float s;
    bool pos;
};

static int cmp_ranked(const void *a, const void *b)
{
    float x = ((const struct ranked *)a)->s, y = ((const struct ranked *)b)->s;
    return (x > y) - (x < y);
}

/* Mann-Whitney AUC of `pos` against the rest on scores decision[i*stride]
 * (ties count 1/2); NAN when one side is empty or on allocation failure. */
static double auc_one(const double *y_true, double pos, const float *decision, int64_t stride, int64_t n)
{
    struct ranked *r = nf_malloc((size_t)n * sizeof *r);
    if (!r)
        return NAN;
    int64_t n_pos = 0;
    for (int64_t i = 0; i < n; i++) {
        r[i].s = decision[i * stride];
        r[i].pos = y_true[i] == pos;
        n_pos += r[i].pos;
    }
    int64_t n_neg = n - n_pos;
    if (n_pos == 0 || n_neg == 0) {
        free(r);
        return NAN;
    }
    qsort(r, (size_t)n, sizeof *r, cmp_ranked);
    double wins = 0;
    int64_t neg_below = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i, tp = 0, tn = 0;
        for (; j < n && r[j].s == r[i].s; j++)
            r[j].pos ? tp++ : tn++;
        wins += (double)tp * (double)neg_below + 0.5 * (double)tp * (double)tn;
        neg_below += tn;
        i = j;
    }
    free(r);
    return wins / ((double)n_pos * (double)n_neg);
}

/* Mean recall over the classes present in y_true (sklearn: classes only
 * predicted get no recall and are left out). */
static double balanced_accuracy(const double *y_true, const double *y_pred, int64_t n)
{
    double sum = 0;
    int64_t n_present = 0;
    for (int64_t i = 0; i < n; i++) {
        bool first = true;
        for (int64_t j = 0; j < i && first; j++)
            first = y_true[j] != y_true[i];
        if (!first)
            continue;
        int64_t total = 0, hit = 0;
        for (int64_t j = i; j < n; j++)
            if (y_true[j] == y_true[i]) {
                total++;
                hit += y_pred[j] == y_true[i];
            }
        sum += (double)hit / (double)total;
        n_present++;
    }
    return sum / (double)n_present;
}

static double r2(const double *y_true, const double *y_pred, int64_t n)
{
    if (n < 2)
        return NAN;   /* sklearn: not well-defined with fewer than two samples */
    double mean = 0, ss_res = 0, ss_tot = 0;
    for (int64_t i = 0; i < n; i++)
        mean += y_true[i];
    mean /= (double)n;
    for (int64_t i = 0; i < n; i++) {
        ss_res += (y_true[i] - y_pred[i]) * (y_true[i] - y_pred[i]);
        ss_tot += (y_true[i] - mean) * (y_true[i] - mean);
    }
    if (ss_tot == 0)   /* sklearn (force_finite): perfect -> 1, else 0 */
        return ss_res == 0 ? 1.0 : 0.0;
    return 1.0 - ss_res / ss_tot;
}

double nf_score(enum nf_scoring s, const double *y_true, const double *y_pred, const float *decision, int64_t n,
                int64_t n_out, int64_t n_classes)
{
    if (n < 1)
        return NAN;
    if (s == NF_SCORE_AUTO)
        s = n_classes > 0 ? NF_SCORE_ACCURACY : NF_SCORE_R2;
    switch (s) {
    case NF_SCORE_ACCURACY: {
        int64_t hit = 0;
        for (int64_t i = 0; i < n; i++)
            hit += y_true[i] == y_pred[i];
        return (double)hit / (double)n;
    }
    case NF_SCORE_BALANCED_ACCURACY:
        return balanced_accuracy(y_true, y_pred, n);
    case NF_SCORE_R2:
        return r2(y_true, y_pred, n);
    case NF_SCORE_AUC: {
        if (!decision || n_out < 1)
            return NAN;
        if (n_out == 1)
            return auc_one(y_true, 1.0, decision, 1, n);
        double sum = 0;
        for (int64_t c = 0; c < n_out; c++)
            sum += auc_one(y_true, (double)c, decision + c, n_out, n);
        return sum / (double)n_out;   /* NAN when a class is absent, as sklearn refuses */
    }
    default:
        return NAN;
    }
}
