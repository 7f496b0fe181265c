/* test_ridge_banded.c — banded ridge (the ridge node with `bands`) against a
 * direct enumeration in double precision: for every candidate band weighting,
 * fold, alpha and voxel the test solves (ZᵀZ + αI) β = Zᵀy on the scaled
 * training rows by Gaussian elimination, scores the validation rows, and
 * applies himalaya's rule (mean over folds, a 1e-10 log α tie slope, a later
 * candidate only when better by the float32 epsilon). The node's chosen
 * alphas, band penalties, scores, cv_scores and refit weights must match; the
 * split R² must sum to the refit's R² as himalaya's product measure does.
 * Both more samples than features (primal factors) and more features than
 * training samples (kernel-sized factors), with and without intercept; the
 * candidate generators (Dirichlet, grid) and malformed bands. One band
 * weighting and a fixed alpha with no score used: the closed form on all
 * samples, without folds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "core/rng.h"
#include "core/util.h"
#include "ridge/ridge.h"
#include "ref_solve.h"

enum { VOX = 9, KF = 3, MAXP = 16, MAXN = 40 };
static const double alphas[] = { 0.1, 1, 10, 100 };
enum { NA = 4 };
/* candidates over 2 bands (rows of weights), well apart */
static const double gammas2[] = { 0.5, 0.5, 0.95, 0.05, 0.05, 0.95, 0.75, 0.25, 0.2, 0.8 };
enum { NC = 5 };

struct problem {
    int n, p, split;          /* columns [0, split) are band a, the rest band b */
    float X[MAXN * MAXP], Y[MAXN * VOX];
    const char *names[MAXP];
};

static void make_problem(struct problem *pb, int n, int p, int split, uint64_t seed)
{
    static char name_buf[MAXP][16];
    pb->n = n;
    pb->p = p;
    pb->split = split;
    for (int i = 0; i < n * p; i++)
        pb->X[i] = (float)nf_rand_normal(&seed);
    /* voxels driven by band a, band b, both, or neither, plus noise */
    for (int v = 0; v < VOX; v++) {
        double wa = v % 3 == 0 ? 1.0 : 0.1 * v, wb = v % 3 == 1 ? 1.5 : 0.05 * v;
        for (int i = 0; i < n; i++) {
            double y = 0.5 + 2 * nf_rand_normal(&seed);
            for (int j = 0; j < p; j++)
                y += (j < split ? wa : wb) * pb->X[i * p + j] * (1 + 0.1 * j);
            pb->Y[i * VOX + v] = (float)y;
        }
    }
    for (int j = 0; j < p; j++) {
        snprintf(name_buf[j], sizeof name_buf[j], "%s_%d", j < split ? "motion" : "sem", j);
        pb->names[j] = name_buf[j];
    }
}

static bool want_scores = true;   /* score and cv_scores consumed (run_banded) */

static int run_banded(const struct problem *pb, struct ridge_params *prm, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *x = nf_value_new_matrix(pb->n, pb->p, NULL, err), *y = nf_value_new_matrix(pb->n, VOX, NULL, err);
    memcpy(x->u.mat.data, pb->X, (size_t)(pb->n * pb->p) * sizeof(float));
    memcpy(y->u.mat.data, pb->Y, (size_t)(pb->n * VOX) * sizeof(float));
    x->u.mat.col_names = calloc((size_t)pb->p, sizeof(char *));
    for (int j = 0; j < pb->p; j++)
        x->u.mat.col_names[j] = strdup(pb->names[j]);
    struct nf_value *in[3] = { x, y, NULL };
    bool wanted[RIDGE_N_OUT] = { true, true, want_scores, false, true, want_scores, true, true };
    struct nf_env env = { .threads = 2, .seed = 7 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err, .wanted = wanted };
    int rc = nf_node_ridge.run_cpu(&run);
    nf_value_unref(x);
    nf_value_unref(y);
    return rc;
}

static void banded_params(struct ridge_params *prm, const char *band_a, const char *band_b)
{
    nf_params_defaults(&nf_node_ridge, prm);
    free(prm->alphas.v);
    prm->alphas.v = malloc(sizeof alphas);
    memcpy(prm->alphas.v, alphas, sizeof alphas);
    prm->alphas.n = NA;
    prm->cv = KF;
    prm->bands.v = calloc(2, sizeof(char *));
    prm->bands.v[0] = strdup(band_a);
    prm->bands.v[1] = strdup(band_b);
    prm->bands.n = 2;
    prm->gammas.v = malloc(sizeof gammas2);
    memcpy(prm->gammas.v, gammas2, sizeof gammas2);
    prm->gammas.n = NC * 2;
}

/* Ridge on rows `rows` of the scaled (and, with center, centred) design:
 * β (p) for voxel v; the centre of X and y in xm, *ym. */
static void direct_fit(const struct problem *pb, const bool *rows, const double *g, double alpha, int v,
                       bool center, double *beta, double *xm, double *ym)
{
    int n = pb->n, p = pb->p, cnt = 0;
    double M[MAXP * MAXP] = { 0 }, b[MAXP] = { 0 };
    *ym = 0;
    for (int j = 0; j < p; j++)
        xm[j] = 0;
    for (int i = 0; i < n; i++)
        if (rows[i]) {
            cnt++;
            *ym += pb->Y[i * VOX + v];
            for (int j = 0; j < p; j++)
                xm[j] += pb->X[i * p + j];
        }
    for (int j = 0; j < p; j++)
        xm[j] = center ? xm[j] / cnt : 0;
    *ym = center ? *ym / cnt : 0;
    for (int i = 0; i < n; i++) {
        if (!rows[i])
            continue;
        double z[MAXP];
        for (int j = 0; j < p; j++)
            z[j] = (pb->X[i * p + j] - xm[j]) * sqrt(g[j < pb->split ? 0 : 1]);
        for (int j = 0; j < p; j++) {
            for (int l = 0; l < p; l++)
                M[j * p + l] += z[j] * z[l];
            b[j] += z[j] * (pb->Y[i * VOX + v] - *ym);
        }
    }
    for (int j = 0; j < p; j++)
        M[j * p + j] += alpha;
    gauss(M, b, p, 1);
    for (int j = 0; j < p; j++)
        beta[j] = b[j];
}

/* The direct enumeration: per voxel the best candidate and alpha, its score,
 * and every candidate's best mean score (cv_scores). */
static void direct_search(const struct problem *pb, bool center, bool l2, int *best_c, int *best_a,
                          double *best_score, double *cv_scores /* NC x VOX */)
{
    int n = pb->n;
    for (int v = 0; v < VOX; v++) {
        double current = -INFINITY;
        for (int c = 0; c < NC; c++) {
            const double *g = gammas2 + 2 * c;
            double mean[NA] = { 0 };
            for (int f = 0; f < KF; f++) {
                /* contiguous folds, the first n mod k one larger */
                int start = 0;
                for (int e = 0; e < f; e++)
                    start += n / KF + (e < n % KF);
                int size = n / KF + (f < n % KF);
                bool train[MAXN];
                for (int i = 0; i < n; i++)
                    train[i] = i < start || i >= start + size;
                for (int a = 0; a < NA; a++) {
                    double beta[MAXP], xm[MAXP], ym, sse = 0, sy = 0, syy = 0;
                    direct_fit(pb, train, g, alphas[a], v, center, beta, xm, &ym);
                    for (int i = start; i < start + size; i++) {
                        double pred = 0, y = pb->Y[i * VOX + v] - ym;
                        for (int j = 0; j < pb->p; j++)
                            pred += (pb->X[i * pb->p + j] - xm[j]) * sqrt(g[j < pb->split ? 0 : 1]) * beta[j];
                        sse += (y - pred) * (y - pred);
                        sy += y;
                        syy += y * y;
                    }
                    double var = syy - sy * sy / size;
                    mean[a] += (l2 ? -sse / size : 1 - sse / var) / KF;
                }
            }
            int pick = 0;
            for (int a = 0; a < NA; a++) {
                mean[a] += log(alphas[a]) * 1e-10;
                if (mean[a] > mean[pick])
                    pick = a;
            }
            cv_scores[c * VOX + v] = mean[pick];
            if (mean[pick] > current + FLT_EPSILON) {
                current = mean[pick];
                best_c[v] = c;
                best_a[v] = pick;
            }
        }
        best_score[v] = current;
    }
}

static void check_against_direct(const struct problem *pb, bool center, bool l2)
{
    struct ridge_params prm;
    banded_params(&prm, "motion = motion_*", "semantic = sem_*");
    prm.fit_intercept = center;
    prm.score = l2 ? RIDGE_L2_NEG_LOSS : RIDGE_R2;
    struct nf_value *out[RIDGE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_banded(pb, &prm, out, &err), 0);

    int best_c[VOX], best_a[VOX];
    double best_score[VOX], cv[NC * VOX];
    direct_search(pb, center, l2, best_c, best_a, best_score, cv);
    int n = pb->n, p = pb->p;
    for (int v = 0; v < VOX; v++) {
        double scale = l2 ? fabs(best_score[v]) + 1 : 1;
        for (int c = 0; c < NC; c++)
            assert_true(fabs(out[RIDGE_OUT_CV_SCORES]->u.mat.data[c * VOX + v] - cv[c * VOX + v]) < 2e-5 * scale);
        /* the same candidate and alpha (the band penalties say both) */
        const double *g = gammas2 + 2 * best_c[v];
        double alpha = alphas[best_a[v]];
        assert_true(fabs(out[RIDGE_OUT_ALPHA]->u.mat.data[v] - alpha) <= 1e-6 * alpha);
        for (int b = 0; b < 2; b++)
            assert_true(fabs(out[RIDGE_OUT_BAND_ALPHA]->u.mat.data[b * VOX + v] - alpha / g[b]) <= 1e-5 * alpha / g[b]);
        assert_true(fabs(out[RIDGE_OUT_SCORE]->u.mat.data[v] - best_score[v]) < 2e-5 * scale);
        /* refit on all samples, reported on the unscaled columns */
        bool all[MAXN];
        for (int i = 0; i < n; i++)
            all[i] = true;
        double beta[MAXP], xm[MAXP], ym, norm = 0;
        direct_fit(pb, all, g, alpha, v, center, beta, xm, &ym);
        for (int j = 0; j < p; j++)
            norm = fmax(norm, fabs(beta[j] * sqrt(g[j < pb->split ? 0 : 1])));
        double icpt = ym;
        for (int j = 0; j < p; j++) {
            double w = beta[j] * sqrt(g[j < pb->split ? 0 : 1]);
            assert_true(fabs(out[RIDGE_OUT_WEIGHTS]->u.mat.data[j * VOX + v] - w) < 1e-4 * (norm + 1));
            icpt -= xm[j] * w;
        }
        if (center)
            assert_true(fabs(out[RIDGE_OUT_INTERCEPT]->u.mat.data[v] - icpt) < 1e-4 * (fabs(icpt) + 1));
        else
            assert_true(out[RIDGE_OUT_INTERCEPT]->u.mat.data[v] == 0.0f);
        /* split R²: each band's 2 y·ŷ_b - ŷ_b·ŷ over Σy², summing to 1 - SSE/Σy² */
        double sst = 0, sse = 0, r2b[2] = { 0 };
        for (int i = 0; i < n; i++) {
            double y = pb->Y[i * VOX + v] - ym, yb[2] = { 0 };
            for (int j = 0; j < p; j++)
                yb[j < pb->split ? 0 : 1] += (pb->X[i * p + j] - xm[j]) * beta[j] * sqrt(g[j < pb->split ? 0 : 1]);
            for (int b = 0; b < 2; b++)
                r2b[b] += 2 * y * yb[b] - yb[b] * (yb[0] + yb[1]);
            sst += y * y;
            sse += (y - yb[0] - yb[1]) * (y - yb[0] - yb[1]);
        }
        double sum = 0;
        for (int b = 0; b < 2; b++) {
            assert_true(fabs(out[RIDGE_OUT_SPLIT_R2]->u.mat.data[b * VOX + v] - r2b[b] / sst) < 1e-4);
            sum += out[RIDGE_OUT_SPLIT_R2]->u.mat.data[b * VOX + v];
        }
        assert_true(fabs(sum - (1 - sse / sst)) < 1e-4);
    }
    /* rows named as the outputs say */
    assert_string_equal(out[RIDGE_OUT_BAND_ALPHA]->u.mat.row_names[1], "semantic");
    assert_string_equal(out[RIDGE_OUT_WEIGHTS]->u.mat.row_names[0], "motion_0");
    assert_string_equal(out[RIDGE_OUT_CV_SCORES]->u.mat.row_names[NC - 1], "candidate-5");
    for (int o = 0; o < RIDGE_N_OUT; o++)
        nf_value_unref(out[o]);
    nf_params_release(&nf_node_ridge, &prm);
}

/* More samples than features: the factors are the primal ones (r = p). */
static void test_primal(void **state)
{
    (void)state;
    struct problem pb;
    make_problem(&pb, 31, 6, 2, 11);
    check_against_direct(&pb, false, false);
    check_against_direct(&pb, true, false);
    check_against_direct(&pb, false, true);
}

/* More features than training samples: r = n_train, P with more columns than rows. */
static void test_kernel_sized(void **state)
{
    (void)state;
    struct problem pb;
    make_problem(&pb, 13, 14, 5, 12);
    check_against_direct(&pb, false, false);
    check_against_direct(&pb, true, true);
}

/* The candidates: uniform first, Dirichlet rows on the simplex (seeded: the
 * same rows again), the grid's multiples of 1/steps without repeats. */
static void test_candidates(void **state)
{
    (void)state;
    struct ridge_params prm;
    struct nf_error err = { 0 };
    nf_params_defaults(&nf_node_ridge, &prm);
    double *g = NULL, *h = NULL;
    int64_t C = 0, C2 = 0;
    prm.n_iter = 50;
    assert_int_equal(nf_ridge_band_candidates(&prm, 3, 5, &g, &C, &err), 0);
    assert_int_equal(C, 50);
    assert_int_equal(nf_ridge_band_candidate_count(&prm, 3), 50);
    for (int b = 0; b < 3; b++)
        assert_true(g[b] == 1.0 / 3);
    int sparse = 0;
    for (int64_t c = 0; c < C; c++) {
        double sum = 0, mx = 0;
        for (int b = 0; b < 3; b++) {
            assert_true(g[c * 3 + b] >= 0);
            sum += g[c * 3 + b];
            mx = fmax(mx, g[c * 3 + b]);
        }
        assert_true(fabs(sum - 1) < 1e-12);
        sparse += c % 2 == 0 && mx > 0.9;   /* concentration 0.1 (even rows): mostly one band */
    }
    assert_true(sparse >= 10);
    assert_int_equal(nf_ridge_band_candidates(&prm, 3, 5, &h, &C2, &err), 0);
    assert_memory_equal(g, h, (size_t)(C * 3) * sizeof *g);
    free(g);
    free(h);
    prm.candidates = RIDGE_CANDIDATES_GRID;
    prm.grid_steps = 4;
    assert_int_equal(nf_ridge_band_candidates(&prm, 3, 5, &g, &C, &err), 0);
    assert_int_equal(C, 15 + 1);   /* C(6, 2) grid points, then the uniform one first */
    for (int64_t c = 1; c < C; c++) {
        for (int b = 0; b < 3; b++)
            assert_true(fabs(g[c * 3 + b] * 4 - round(g[c * 3 + b] * 4)) < 1e-12);
        for (int64_t e = 0; e < c; e++)
            assert_false(memcmp(g + c * 3, g + e * 3, 3 * sizeof *g) == 0);
    }
    free(g);
    nf_params_release(&nf_node_ridge, &prm);
}

/* Bands that overlap, name no column, or leave a column out: located errors. */
static void test_bad_bands(void **state)
{
    (void)state;
    struct problem pb;
    make_problem(&pb, 20, 4, 2, 13);
    const char *cases[][3] = {
        { "a = motion_*, sem_2", "b = sem_*", "column 'sem_2' of X is in band 'a' and in band 'b'" },
        { "a = motion_0, nope", "b = sem_*", "band 'a': X has no column 'nope'" },
        { "a = motion_0", "b = sem_*", "column 'motion_1' of X is in no band" },
        { "a = 0:2", "b = 2:9", "band 'b': columns 2:9 are past X's 4 columns" },
        { "a = motion_*", "b = zzz*", "band 'b': no column of X starts with 'zzz'" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ridge_params prm;
        banded_params(&prm, cases[i][0], cases[i][1]);
        struct nf_value *out[RIDGE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        assert_int_equal(run_banded(&pb, &prm, out, &err), NF_EINVAL);
        assert_non_null(strstr(err.msg, cases[i][2]));
        for (int o = 0; o < RIDGE_N_OUT; o++)
            assert_null(out[o]);
        nf_params_release(&nf_node_ridge, &prm);
    }
    /* ranges name the same columns as their names */
    struct ridge_params prm;
    banded_params(&prm, "a = 0:2", "b = sem_2, 3");
    struct nf_value *out[RIDGE_N_OUT] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_banded(&pb, &prm, out, &err), 0);
    for (int o = 0; o < RIDGE_N_OUT; o++)
        nf_value_unref(out[o]);
    nf_params_release(&nf_node_ridge, &prm);
}

/* One band weighting (a row of gammas, or n_iter 1: the uniform one) and a
 * fixed alpha, no score wanted: weights, intercept, band penalties and split
 * R² of the direct fit (Zᵀ Z + αI)⁻¹ Zᵀ y on all samples, no score, and no
 * folds (more folds than samples runs); the same bits as the refit after
 * the cross-validation that a wanted score brings back. */
static void test_fixed(void **state)
{
    (void)state;
    struct problem pb;
    make_problem(&pb, 17, 7, 3, 21);
    const double alpha = 4.5;
    for (int mode = 0; mode < 4; mode++) {
        bool center = mode & 1, uniform = mode & 2;
        static const double one_row[] = { 0.7, 0.3 }, halves[] = { 0.5, 0.5 };
        const double *g = uniform ? halves : one_row;
        struct ridge_params prm;
        banded_params(&prm, "motion = motion_*", "semantic = sem_*");
        if (uniform) {   /* n_iter 1: the uniform candidate alone */
            free(prm.gammas.v);
            prm.gammas.v = NULL;
            prm.gammas.n = 0;
            prm.n_iter = 1;
        } else {
            memcpy(prm.gammas.v, one_row, sizeof one_row);
            prm.gammas.n = 2;
        }
        prm.alpha = alpha;
        prm.fit_intercept = center;
        prm.cv = pb.n + 3;   /* no fold could be cut */
        struct nf_value *fit[RIDGE_N_OUT] = { 0 }, *cv[RIDGE_N_OUT] = { 0 };
        struct nf_error err = { 0 };
        want_scores = false;
        assert_int_equal(run_banded(&pb, &prm, fit, &err), 0);
        assert_null(fit[RIDGE_OUT_SCORE]);
        assert_null(fit[RIDGE_OUT_CV_SCORES]);
        bool all[MAXN];
        for (int i = 0; i < pb.n; i++)
            all[i] = true;
        for (int v = 0; v < VOX; v++) {
            double beta[MAXP], xm[MAXP], ym, norm = 0, icpt;
            direct_fit(&pb, all, g, alpha, v, center, beta, xm, &ym);
            for (int j = 0; j < pb.p; j++)
                norm = fmax(norm, fabs(beta[j] * sqrt(g[j < pb.split ? 0 : 1])));
            icpt = ym;
            for (int j = 0; j < pb.p; j++) {
                double w = beta[j] * sqrt(g[j < pb.split ? 0 : 1]);
                assert_true(fabs(fit[RIDGE_OUT_WEIGHTS]->u.mat.data[j * VOX + v] - w) < 1e-5 * (norm + 1));
                icpt -= xm[j] * w;
            }
            assert_true(fabs(fit[RIDGE_OUT_INTERCEPT]->u.mat.data[v] - (center ? icpt : 0)) < 1e-5 * (fabs(icpt) + 1));
            assert_true(fit[RIDGE_OUT_ALPHA]->u.mat.data[v] == (float)alpha);
            for (int b = 0; b < 2; b++)
                assert_true(fabs(fit[RIDGE_OUT_BAND_ALPHA]->u.mat.data[b * VOX + v] - alpha / g[b]) <= 1e-5 * alpha / g[b]);
        }
        assert_non_null(fit[RIDGE_OUT_SPLIT_R2]);
        /* the score wanted: folds again (a cv that can be cut), the same refit */
        want_scores = true;
        prm.cv = KF;
        assert_int_equal(run_banded(&pb, &prm, cv, &err), 0);
        assert_non_null(cv[RIDGE_OUT_SCORE]);
        for (int o = 0; o < RIDGE_N_OUT; o++)
            if (fit[o])
                assert_memory_equal(fit[o]->u.mat.data, cv[o]->u.mat.data,
                                    (size_t)(fit[o]->u.mat.rows * fit[o]->u.mat.cols) * sizeof(float));
        for (int o = 0; o < RIDGE_N_OUT; o++) {
            nf_value_unref(fit[o]);
            nf_value_unref(cv[o]);
        }
        nf_params_release(&nf_node_ridge, &prm);
    }
}

int main(void)
{
    nf_log_quiet = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_primal),
        cmocka_unit_test(test_kernel_sized),
        cmocka_unit_test(test_candidates),
        cmocka_unit_test(test_bad_bands),
        cmocka_unit_test(test_fixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
