/* test_gpu.c — the CUDA backend against the CPU.
 *
 * On a machine with a usable GPU: cuBLAS SGEMM (every transpose, leading
 * dimensions wider than the matrix) and strided-batched SGEMM against the
 * reference kernel; the cuSOLVER thin SVD (tall, wide, rank-deficient) by
 * reconstruction, orthonormality and the CPU's singular values; the GPU
 * dispatch table; and the GPU ridge and permute nodes against the CPU nodes on
 * the same inputs — ridge weights, scores, intercepts, predictions and CV
 * scores within float32 tolerance and the same chosen alphas except at
 * documented near ties (two alphas' mean CV scores within round-off);
 * permutation statistics, p and q_fdr identical, p_fwe identical except where
 * a null maximum lies within round-off of the observed value, null maxima to
 * float round-off — with voxel / permutation blocks forced small (several
 * blocks, the double-buffered pipeline), with simulated out-of-memory (blocks
 * shrink and the results do not change), and with discrete data whose many
 * near ties overflow the device's tie list. Bad input gives the CPU node's
 * messages. predict's searchlight (ridge_classifier with 2 and 3 classes,
 * ridge; standardize on and off; spheres on both sides of the training-row
 * count, so primal and dual solves on both devices): accuracy maps identical
 * at >= 99% of the centres and every other centre a near tie when its decision
 * values are recomputed here in double, R² maps within float tolerance, the
 * same NaN centres and counts — in one batch, in batches smaller than a
 * checkpoint block, and after simulated out-of-memory; checkpoints of a killed
 * CPU run resumed on the GPU and a GPU run's resumed on the CPU; and `device:
 * gpu` for an svm searchlight or a whole_brain fit warns once and gives the
 * CPU node's outputs.
 *
 * Without a GPU in a CUDA build, the GPU nodes must fall back to the CPU nodes
 * (bit-identical outputs); those checks run, then the program reports SKIP
 * (exit 77) for the rest. Without CUDA it only reports SKIP.
 *
 * Built a second time as test_gpu_emu (NF_GPU_EMULATED, CUDA builds), linked
 * with tests/unit/gpu_emu.c instead of the CUDA libraries: every test above
 * then runs on any machine, the "device" being a CPU emulation — the nodes'
 * host side and the kernels' arithmetic are checked everywhere, the device
 * itself only on a GPU.
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
#include <unistd.h>

#ifdef HAVE_CUDA
#include "cache/cache.h"
#include "cache/exec_cache.h"
#include "kernels/cuda/gpu.h"
#include "kernels/kernels.h"
#include "pipeline.h"
#include "core/util.h"
#include "core/rng.h"
#include "permute/permute.h"
#include "predict/predict.h"
#include "predict/predict_models.h"
#include "ridge/ridge.h"
#include "searchlight/searchlight.h"

static bool have_gpu;

/* ---- helpers ---- */

static uint64_t rng_state = 12345;

static float randn(void)
{
    return (float)nf_rand_normal(&rng_state);
}

static void fill(float *a, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        a[i] = randn();
}

static double max_abs(const float *a, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(a[i]));
    return m;
}

/* ---- kernels ---- */

static void test_sgemm(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    const int64_t m = 37, n = 53, k = 29, pad = 3;
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        int64_t lda = ac + pad, ldb = bc + pad, ldc = n + pad;
        float *A = malloc((size_t)(ar * lda) * sizeof *A), *B = malloc((size_t)(br * ldb) * sizeof *B);
        float *C = malloc((size_t)(m * ldc) * sizeof *C), *R = malloc((size_t)(m * ldc) * sizeof *R);
        fill(A, ar * lda);
        fill(B, br * ldb);
        fill(C, m * ldc);
        memcpy(R, C, (size_t)(m * ldc) * sizeof *R);
        nf_kernels_ref.sgemm(ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, R, ldc);
        nf_kernels_cuda.sgemm(ta, tb, m, n, k, 0.5f, A, lda, B, ldb, 0.25f, C, ldc);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                assert_true(fabs(C[i * ldc + j] - R[i * ldc + j]) <= 1e-5 * k);
        free(A);
        free(B);
        free(C);
        free(R);
    }
}

static void test_sgemm_batched(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    enum { M = 20, N = 31, K = 9, BATCH = 5 };
    struct nf_error err = { 0 };
    float A[BATCH][M * K], B[BATCH][K * N], C[BATCH][M * N], R[M * N];
    fill(&A[0][0], BATCH * M * K);
    fill(&B[0][0], BATCH * K * N);
    struct nf_gpu *g = nf_gpu_acquire(&err);
    assert_non_null(g);
    assert_int_equal(nf_gpu_arena_open(g, sizeof A + sizeof B + sizeof C + 4096, &err), 0);
    float *dA = nf_gpu_alloc(g, sizeof A), *dB = nf_gpu_alloc(g, sizeof B), *dC = nf_gpu_alloc(g, sizeof C);
    assert_int_equal(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(nf_gpu_sgemm_batched(g, false, false, M, N, K, 1.0f, dA, K, M * K, dB, N, K * N, 0.0f, dC, N,
                                          M * N, BATCH, &err),
                     0);
    assert_int_equal(cudaStreamSynchronize(g->compute), cudaSuccess);
    assert_int_equal(cudaMemcpy(C, dC, sizeof C, cudaMemcpyDeviceToHost), cudaSuccess);
    nf_gpu_release(g);
    for (int b = 0; b < BATCH; b++) {
        nf_kernels_ref.sgemm(false, false, M, N, K, 1.0f, A[b], K, B[b], N, 0.0f, R, N);
        for (int i = 0; i < M * N; i++)
            assert_true(fabs(C[b][i] - R[i]) <= 1e-5 * K);
    }
}

/* Thin SVD: A = U S Vt to float precision, orthonormal factors, the CPU's s. */
static void check_svd(int64_t rows, int64_t cols, int rank)
{
    int64_t r = rows < cols ? rows : cols;
    float *A = malloc((size_t)(rows * cols) * sizeof *A), *U = malloc((size_t)(rows * r) * sizeof *U);
    float *s = malloc((size_t)r * sizeof *s), *Vt = malloc((size_t)(r * cols) * sizeof *Vt);
    float *s_cpu = malloc((size_t)r * sizeof *s_cpu), *U2 = malloc((size_t)(rows * r) * sizeof *U2);
    float *Vt2 = malloc((size_t)(r * cols) * sizeof *Vt2);
    /* rank-limited: A = L R with L rows x rank */
    float *L = malloc((size_t)(rows * rank) * sizeof *L), *Rm = malloc((size_t)(rank * cols) * sizeof *Rm);
    fill(L, rows * rank);
    fill(Rm, rank * cols);
    nf_kernels_ref.sgemm(false, false, rows, cols, rank, 1.0f, L, rank, Rm, cols, 0.0f, A, cols);
    assert_int_equal(nf_kernels_cuda.svd(A, rows, cols, U, s, Vt), 0);
    assert_int_equal(nf_kernels_cpu()->svd(A, rows, cols, U2, s_cpu, Vt2), 0);
    double scale = s_cpu[0];
    for (int64_t j = 0; j < r; j++) {
        assert_true(fabs(s[j] - s_cpu[j]) <= 1e-5 * scale);
        if (j > 0)
            assert_true(s[j] <= s[j - 1]);
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double acc = 0;
            for (int64_t l = 0; l < r; l++)
                acc += (double)U[i * r + l] * s[l] * Vt[l * cols + j];
            assert_true(fabs(acc - A[i * cols + j]) <= 2e-5 * scale);
        }
    /* orthonormal columns of U and rows of Vt, for the components that carry
     * the matrix (beyond the rank, gesvdj still returns orthonormal vectors) */
    for (int64_t a = 0; a < r; a++)
        for (int64_t b = 0; b < r; b++) {
            double uu = 0, vv = 0;
            for (int64_t i = 0; i < rows; i++)
                uu += (double)U[i * r + a] * U[i * r + b];
            for (int64_t j = 0; j < cols; j++)
                vv += (double)Vt[a * cols + j] * Vt[b * cols + j];
            assert_true(fabs(uu - (a == b)) <= 1e-4);
            assert_true(fabs(vv - (a == b)) <= 1e-4);
        }
    free(A);
    free(U);
    free(s);
    free(Vt);
    free(s_cpu);
    free(U2);
    free(Vt2);
    free(L);
    free(Rm);
}

/* nf_gpu_svd itself on a rank-deficient matrix (the table sends those to the
 * CPU): reconstruction, the CPU's singular values, orthonormal factors for the
 * components that carry the matrix, and finite values everywhere (what the
 * ridge node relies on). */
static void check_gpu_svd_rank_deficient(int64_t rows, int64_t cols, int rank)
{
    int64_t r = rows < cols ? rows : cols;
    struct nf_error err = { 0 };
    float *A = malloc((size_t)(rows * cols) * sizeof *A), *U = malloc((size_t)(rows * r) * sizeof *U);
    float *s = malloc((size_t)r * sizeof *s), *Vt = malloc((size_t)(r * cols) * sizeof *Vt);
    float *U2 = malloc((size_t)(rows * r) * sizeof *U2), *s2 = malloc((size_t)r * sizeof *s2);
    float *Vt2 = malloc((size_t)(r * cols) * sizeof *Vt2);
    float *L = malloc((size_t)(rows * rank) * sizeof *L), *Rm = malloc((size_t)(rank * cols) * sizeof *Rm);
    fill(L, rows * rank);
    fill(Rm, rank * cols);
    nf_kernels_ref.sgemm(false, false, rows, cols, rank, 1.0f, L, rank, Rm, cols, 0.0f, A, cols);
    for (int64_t i = 0; i < rows; i++)   /* and an exactly zero column */
        A[i * cols + cols - 1] = 0.0f;
    assert_int_equal(nf_kernels_cpu()->svd(A, rows, cols, U2, s2, Vt2), 0);
    struct nf_gpu *g = nf_gpu_acquire(&err);
    assert_non_null(g);
    size_t bytes = (size_t)(rows * cols + rows * r + r + r * cols) * sizeof(float) + 4096 +
                   nf_gpu_svd_bytes(g, rows, cols);
    assert_int_equal(nf_gpu_arena_open(g, bytes, &err), 0);
    float *dA = nf_gpu_alloc(g, (size_t)(rows * cols) * sizeof(float)), *dU = nf_gpu_alloc(g, (size_t)(rows * r) * sizeof(float));
    float *ds = nf_gpu_alloc(g, (size_t)r * sizeof(float)), *dVt = nf_gpu_alloc(g, (size_t)(r * cols) * sizeof(float));
    assert_int_equal(cudaMemcpy(dA, A, (size_t)(rows * cols) * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    assert_int_equal(nf_gpu_svd(g, dA, rows, cols, dU, ds, dVt, &err), 0);
    assert_int_equal(cudaMemcpy(U, dU, (size_t)(rows * r) * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(s, ds, (size_t)r * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(Vt, dVt, (size_t)(r * cols) * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    nf_gpu_release(g);
    double scale = s2[0];
    for (int64_t j = 0; j < r; j++)
        assert_true(fabs(s[j] - s2[j]) <= 1e-5 * scale);
    for (int64_t e = 0; e < r * cols; e++)
        assert_true(isfinite(Vt[e]));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) {
            double acc = 0;
            for (int64_t l = 0; l < rank; l++)   /* the rest: zero singular values */
                acc += (double)U[i * r + l] * s[l] * Vt[l * cols + j];
            assert_true(fabs(acc - A[i * cols + j]) <= 2e-5 * scale);
        }
    for (int64_t a = 0; a < rank; a++)
        for (int64_t b = 0; b < rank; b++) {
            double uu = 0;
            for (int64_t i = 0; i < rows; i++)
                uu += (double)U[i * r + a] * U[i * r + b];
            assert_true(fabs(uu - (a == b)) <= 1e-4);
        }
    free(A);
    free(U);
    free(s);
    free(Vt);
    free(U2);
    free(s2);
    free(Vt2);
    free(L);
    free(Rm);
}

static void test_svd(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    check_svd(90, 12, 12);    /* tall: samples x features */
    check_svd(11, 70, 11);    /* wide: more features than samples */
    check_svd(40, 40, 40);
    check_svd(60, 15, 6);     /* rank-deficient: the table answers with LAPACK's */
    check_gpu_svd_rank_deficient(60, 15, 6);
    check_gpu_svd_rank_deficient(9, 20, 5);
}

/* ---- ridge ---- */

enum { RN = 120, RP = 10, RV = 300 };
static float RX[RN * RP], RY[RN * RV];
static const double ridge_alphas[] = { 0.01, 0.3, 1, 4, 20, 150, 1000 };
enum { RA = sizeof ridge_alphas / sizeof ridge_alphas[0] };

static void ridge_data(void)
{
    uint64_t st = 99;
    for (int i = 0; i < RN; i++)
        for (int j = 0; j < RP; j++)
            RX[i * RP + j] = (float)(nf_rand_normal(&st) + (j == 3 ? 2.0 : 0.0));
    for (int v = 0; v < RV; v++) {
        double w[RP], amp = (v % 5) * 0.4;
        for (int j = 0; j < RP; j++)
            w[j] = amp * nf_rand_normal(&st);
        for (int i = 0; i < RN; i++) {
            double y = 3.0 + 0.01 * v;
            for (int j = 0; j < RP; j++)
                y += RX[i * RP + j] * w[j];
            RY[i * RV + v] = (float)(y + nf_rand_normal(&st));
        }
    }
}

static void ridge_params(struct ridge_params *p)
{
    nf_params_defaults(&nf_node_ridge, p);
    free(p->alphas.v);
    p->alphas.v = malloc(sizeof ridge_alphas);
    memcpy(p->alphas.v, ridge_alphas, sizeof ridge_alphas);
    p->alphas.n = RA;
}

static int run_ridge(bool gpu, struct ridge_params *prm, struct nf_value *groups, const float *X, const float *Y,
                     int64_t n, int64_t V, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *x = nf_value_new_matrix(n, RP, NULL, err), *y = nf_value_new_matrix(n, V, NULL, err);
    memcpy(x->u.mat.data, X, (size_t)(n * RP) * sizeof(float));
    memcpy(y->u.mat.data, Y, (size_t)(n * V) * sizeof(float));
    struct nf_value *in[3] = { x, y, groups };
    struct nf_env env = { .threads = 2, .seed = 5 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    int rc = gpu ? nf_ridge_run_gpu(&run) : nf_node_ridge.run_cpu(&run);
    nf_value_unref(x);
    nf_value_unref(y);
    return rc;
}

static void unref_all(struct nf_value **out, int n)
{
    for (int o = 0; o < n; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
}

/* CPU vs GPU for one configuration on the first n samples, CV scores within
 * score_tol x (1 + |score|); returns the number of near-tie voxels. */
static int compare_ridge_n(struct ridge_params *prm, struct nf_value *groups, int64_t n, double score_tol)
{
    struct nf_value *cpu[6] = { 0 }, *gpu[6] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_ridge(false, prm, groups, RX, RY, n, RV, cpu, &err), 0);
    int rc = run_ridge(true, prm, groups, RX, RY, n, RV, gpu, &err);
    if (rc)
        fprintf(stderr, "GPU ridge failed: %s\n", err.msg);
    assert_int_equal(rc, 0);
    int64_t A = isnan(prm->alpha) ? RA : 1, k = cpu[RIDGE_OUT_CV_SCORES]->u.mat.rows / A;
    int ties = 0;
    for (int o = 0; o < 6; o++) {
        assert_int_equal(gpu[o]->u.mat.rows, cpu[o]->u.mat.rows);
        assert_int_equal(gpu[o]->u.mat.cols, cpu[o]->u.mat.cols);
    }
    bool shared_tie = false;
    if (prm->alpha_mode == RIDGE_SHARED && cpu[RIDGE_OUT_ALPHA]->u.mat.data[0] != gpu[RIDGE_OUT_ALPHA]->u.mat.data[0]) {
        /* shared mode: one alpha for all voxels, from the sum of every score; a
         * different choice only where two alphas' sums tie to round-off */
        double tc = 0, tg = 0;
        for (int64_t a = 0; a < A; a++) {
            double sum = 0;
            for (int64_t f = 0; f < k; f++)
                for (int64_t v = 0; v < RV; v++)
                    sum += cpu[RIDGE_OUT_CV_SCORES]->u.mat.data[(f * A + a) * RV + v];
            if ((float)ridge_alphas[a] == cpu[RIDGE_OUT_ALPHA]->u.mat.data[0])
                tc = sum;
            if ((float)ridge_alphas[a] == gpu[RIDGE_OUT_ALPHA]->u.mat.data[0])
                tg = sum;
        }
        assert_true(fabs(tc - tg) <= 1e-5 * (1 + fabs(tc)));
        shared_tie = true;
        ties++;
    }
    for (int64_t v = 0; v < RV; v++) {
        float ac = cpu[RIDGE_OUT_ALPHA]->u.mat.data[v], ag = gpu[RIDGE_OUT_ALPHA]->u.mat.data[v];
        bool tie = shared_tie;
        if (ac != ag && !shared_tie) {
            /* allowed only when the two alphas' mean CV scores (the CPU's) tie to round-off */
            double mc = 0, mg = 0;
            int64_t ic = -1, ig = -1;
            for (int64_t a = 0; a < A; a++) {
                float al = isnan(prm->alpha) ? (float)ridge_alphas[a] : (float)prm->alpha;
                if (al == ac)
                    ic = a;
                if (al == ag)
                    ig = a;
            }
            assert_true(ic >= 0 && ig >= 0);
            for (int64_t f = 0; f < k; f++) {
                mc += cpu[RIDGE_OUT_CV_SCORES]->u.mat.data[(f * A + ic) * RV + v] / (double)k;
                mg += cpu[RIDGE_OUT_CV_SCORES]->u.mat.data[(f * A + ig) * RV + v] / (double)k;
            }
            assert_true(fabs(mc - mg) <= 1e-5 * (1 + fabs(mc)));
            tie = true;
            ties++;
        }
        if (!shared_tie) {   /* the score is that of the chosen alpha */
            double a = cpu[RIDGE_OUT_SCORE]->u.mat.data[v], b = gpu[RIDGE_OUT_SCORE]->u.mat.data[v];
            assert_true(fabs(a - b) <= 1e-4 * (1 + fabs(a)));
        }
        for (int64_t fa = 0; fa < cpu[RIDGE_OUT_CV_SCORES]->u.mat.rows; fa++) {
            double a = cpu[RIDGE_OUT_CV_SCORES]->u.mat.data[fa * RV + v], b = gpu[RIDGE_OUT_CV_SCORES]->u.mat.data[fa * RV + v];
            assert_true(fabs(a - b) <= score_tol * (1 + fabs(a)));
        }
        if (tie)
            continue;
        double wmax = 0, pmax = 0;
        for (int64_t j = 0; j < RP; j++)
            wmax = fmax(wmax, fabs(cpu[RIDGE_OUT_WEIGHTS]->u.mat.data[j * RV + v]));
        for (int64_t j = 0; j < RP; j++)
            assert_true(fabs(cpu[RIDGE_OUT_WEIGHTS]->u.mat.data[j * RV + v] - gpu[RIDGE_OUT_WEIGHTS]->u.mat.data[j * RV + v]) <=
                        1e-3 * wmax + 1e-6);
        for (int64_t i = 0; i < n; i++)
            pmax = fmax(pmax, fabs(cpu[RIDGE_OUT_PREDICTIONS]->u.mat.data[i * RV + v]));
        for (int64_t i = 0; i < n; i++)
            assert_true(fabs(cpu[RIDGE_OUT_PREDICTIONS]->u.mat.data[i * RV + v] -
                             gpu[RIDGE_OUT_PREDICTIONS]->u.mat.data[i * RV + v]) <= 1e-4 * pmax + 1e-6);
        assert_true(fabs(cpu[RIDGE_OUT_INTERCEPT]->u.mat.data[v] - gpu[RIDGE_OUT_INTERCEPT]->u.mat.data[v]) <=
                    1e-4 * (1 + fabs(cpu[RIDGE_OUT_INTERCEPT]->u.mat.data[v])));
    }
    unref_all(cpu, 6);
    unref_all(gpu, 6);
    return ties;
}

static int compare_ridge(struct ridge_params *prm, struct nf_value *groups)
{
    return compare_ridge_n(prm, groups, RN, 1e-4);
}

static void test_ridge_agreement(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    struct ridge_params prm;
    struct nf_error err = { 0 };
    int ties = 0;
    ridge_data();
    /* every combination that changes the arithmetic; blocks of 64 voxels so
     * that the double-buffered pipeline runs (5 blocks, the last partial) */
    nf_gpu_debug_max_block(64);
    for (int mode = 0; mode < 2; mode++)
        for (int icpt = 0; icpt < 2; icpt++)
            for (int score = 0; score < 2; score++) {
                ridge_params(&prm);
                prm.alpha_mode = mode ? RIDGE_SHARED : RIDGE_PER_VOXEL;
                prm.fit_intercept = icpt;
                prm.score = score ? RIDGE_PEARSON : RIDGE_R2;
                ties += compare_ridge(&prm, NULL);
                nf_params_release(&nf_node_ridge, &prm);
            }
    /* shuffled folds, a fixed alpha, leave-one-group-out and group k-fold */
    ridge_params(&prm);
    prm.shuffle = true;
    prm.fit_intercept = true;
    prm.cv = 7;
    ties += compare_ridge(&prm, NULL);
    prm.shuffle = false;
    prm.alpha = 3.5;
    ties += compare_ridge(&prm, NULL);
    prm.alpha = NAN;
    struct nf_value *groups = nf_value_new_matrix(RN, 1, NULL, &err);
    for (int i = 0; i < RN; i++)
        groups->u.mat.data[i] = (float)(i % 6);
    prm.cv = 10;   /* >= 6 groups: leave one group out */
    ties += compare_ridge(&prm, groups);
    prm.cv = 4;    /* group k-fold */
    ties += compare_ridge(&prm, groups);
    nf_value_unref(groups);
    /* fewer samples than features in some training folds (12 samples, 10
     * features, 5 folds: training ranks 9, 9, 10, 10, 10): folds of a smaller
     * rank are padded on the device */
    prm.fit_intercept = false;
    prm.cv = 5;
    /* scores within 1e-3, not 1e-4: a test fold of two samples makes R2's
     * denominator their tiny spread (scores down to -4e4), so float round-off
     * of the predictions moves the scores by ~1e-4 relative; two CPU BLAS
     * kernels (Prescott's and Zen 4's) move the CPU's own score by 4e-5, and
     * the emulated device by 1.1e-4 on the H200 machine's Prescott kernel.
     * A padding error of a smaller-rank fold moves them by O(1). */
    ties += compare_ridge_n(&prm, NULL, 12, 1e-3);
    prm.fit_intercept = true;
    ties += compare_ridge_n(&prm, NULL, 12, 1e-3);
    /* a constant column centred to exactly zero: a zero singular value */
    for (int i = 0; i < RN; i++)
        RX[i * RP + 7] = 1.0f;
    ties += compare_ridge(&prm, NULL);
    ridge_data();
    /* one block for everything, and out-of-memory twice: smaller blocks, same results */
    nf_gpu_debug_max_block(0);
    ties += compare_ridge(&prm, NULL);
    nf_gpu_debug_fail_arena(2);
    ties += compare_ridge(&prm, NULL);
    nf_gpu_debug_fail_arena(0);
    nf_params_release(&nf_node_ridge, &prm);
    /* near ties happen (small alphas whose shrinkage is negligible score alike,
     * each checked above), but not for a sizeable share of the voxels */
    assert_true(ties <= RV / 10);
    if (ties)
        fprintf(stderr, "note: %d voxels chose another alpha at a near tie\n", ties);
}

static void expect_same_error(struct ridge_params *prm, struct nf_value *groups, const float *X, const float *Y,
                              int64_t n)
{
    struct nf_value *cpu[6] = { 0 }, *gpu[6] = { 0 };
    struct nf_error e1 = { 0 }, e2 = { 0 };
    int r1 = run_ridge(false, prm, groups, X, Y, n, RV, cpu, &e1);
    int r2 = run_ridge(true, prm, groups, X, Y, n, RV, gpu, &e2);
    assert_true(r1 < 0);
    assert_int_equal(r1, r2);
    assert_string_equal(e1.msg, e2.msg);
    for (int o = 0; o < 6; o++) {
        assert_null(cpu[o]);
        assert_null(gpu[o]);
    }
}

static void test_ridge_bad_input(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    struct ridge_params prm;
    struct nf_error err = { 0 };
    ridge_data();
    ridge_params(&prm);
    float *Y = malloc(sizeof RY);
    memcpy(Y, RY, sizeof RY);
    Y[17 * RV + 5] = NAN;
    expect_same_error(&prm, NULL, RX, Y, RN);           /* a NaN in Y */
    prm.cv = RN + 1;
    expect_same_error(&prm, NULL, RX, RY, RN);          /* more folds than samples */
    prm.cv = 5;
    struct nf_value *groups = nf_value_new_matrix(RN, 1, NULL, &err);
    for (int i = 0; i < RN; i++)
        groups->u.mat.data[i] = 1;
    expect_same_error(&prm, groups, RX, RY, RN);        /* one group */
    nf_value_unref(groups);
    free(Y);
    nf_params_release(&nf_node_ridge, &prm);
}

/* ---- permute ---- */

static int run_permute(bool gpu, struct permute_params *prm, const float *D, int64_t n, int64_t n1, int64_t V,
                       const float *cov, struct nf_value **out, struct nf_error *err)
{
    struct nf_value *in[4] = { 0 };
    in[PERMUTE_IN_DATA] = nf_value_new_matrix(n, V, NULL, err);
    memcpy(in[PERMUTE_IN_DATA]->u.mat.data, D, (size_t)(n * V) * sizeof(float));
    if (prm->test == PERM_TWO_SAMPLE) {
        in[PERMUTE_IN_GROUPS] = nf_value_new_matrix(n, 1, NULL, err);
        for (int64_t i = 0; i < n; i++)   /* n1 subjects labelled 3 (group 1), scattered */
            in[PERMUTE_IN_GROUPS]->u.mat.data[i] = (i * 7) % n < n1 ? 3.0f : 7.0f;
    }
    if (prm->test == PERM_CORRELATION) {
        in[PERMUTE_IN_COVARIATE] = nf_value_new_matrix(n, 1, NULL, err);
        memcpy(in[PERMUTE_IN_COVARIATE]->u.mat.data, cov, (size_t)n * sizeof(float));
    }
    struct nf_env env = { .threads = 2, .seed = 11 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    int rc = gpu ? nf_permute_run_gpu(&run) : nf_node_permute.run_cpu(&run);
    for (int i = 0; i < 4; i++)
        nf_value_unref(in[i]);
    return rc;
}

/* CPU vs GPU: identical stat, p, q_fdr and info; p_fwe identical unless a
 * null maximum sits within round-off of the voxel's tie threshold; null_max
 * to float round-off. Returns the voxels whose p_fwe differed. */
static int compare_permute(struct permute_params *prm, const float *D, int64_t n, int64_t n1, int64_t V,
                           const float *cov)
{
    struct nf_value *cpu[6] = { 0 }, *gpu[6] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_permute(false, prm, D, n, n1, V, cov, cpu, &err), 0);
    int rc = run_permute(true, prm, D, n, n1, V, cov, gpu, &err);
    if (rc)
        fprintf(stderr, "GPU permute failed: %s\n", err.msg);
    assert_int_equal(rc, 0);
    int64_t M = cpu[PERMUTE_OUT_NULL_MAX]->u.mat.rows;
    assert_int_equal(gpu[PERMUTE_OUT_NULL_MAX]->u.mat.rows, M);
    assert_memory_equal(cpu[PERMUTE_OUT_STAT]->u.mat.data, gpu[PERMUTE_OUT_STAT]->u.mat.data, (size_t)V * sizeof(float));
    assert_memory_equal(cpu[PERMUTE_OUT_P]->u.mat.data, gpu[PERMUTE_OUT_P]->u.mat.data, (size_t)V * sizeof(float));
    assert_memory_equal(cpu[PERMUTE_OUT_Q_FDR]->u.mat.data, gpu[PERMUTE_OUT_Q_FDR]->u.mat.data, (size_t)V * sizeof(float));
    double scale = max_abs(cpu[PERMUTE_OUT_NULL_MAX]->u.mat.data, M);
    for (int64_t i = 0; i < M; i++)
        assert_true(fabs(cpu[PERMUTE_OUT_NULL_MAX]->u.mat.data[i] - gpu[PERMUTE_OUT_NULL_MAX]->u.mat.data[i]) <=
                    1e-4 * scale + 1e-6);
    int differ = 0;
    for (int64_t v = 0; v < V; v++) {
        float a = cpu[PERMUTE_OUT_P_FWE]->u.mat.data[v], b = gpu[PERMUTE_OUT_P_FWE]->u.mat.data[v];
        if (a == b)
            continue;
        /* a tie: some null maximum within round-off of the voxel's statistic */
        double st = fabs(cpu[PERMUTE_OUT_STAT]->u.mat.data[v]);
        bool near = false;
        for (int64_t i = 0; i < M && !near; i++)
            near = fabs(fabs(cpu[PERMUTE_OUT_NULL_MAX]->u.mat.data[i]) - st) <= 1e-4 * (st + 1e-6);
        assert_true(near);
        assert_true(fabs(a - b) <= 2.0 / (double)M + 1e-6);
        differ++;
    }
    const struct nf_table *tc = &cpu[PERMUTE_OUT_INFO]->u.tab, *tg = &gpu[PERMUTE_OUT_INFO]->u.tab;
    assert_int_equal(tc->n_rows, tg->n_rows);
    for (int64_t i = 0; i < tc->n_rows; i++)
        assert_string_equal(tc->cols[1].str[i], tg->cols[1].str[i]);
    unref_all(cpu, 6);
    unref_all(gpu, 6);
    return differ;
}

static void test_permute_agreement(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    enum { N = 24, V = 700 };
    float *D = malloc((size_t)(N * V) * sizeof *D), cov[N];
    struct permute_params prm;
    int differ = 0;
    rng_state = 777;
    for (int64_t i = 0; i < N; i++) {
        cov[i] = randn();
        for (int64_t v = 0; v < V; v++)   /* an effect in a tenth of the voxels */
            D[i * V + v] = randn() + (v % 10 == 0 ? 0.8f : 0.0f) + (v % 7 == 0 ? 0.5f * cov[i] : 0.0f);
    }
    for (int64_t i = 0; i < N; i++)   /* one zero-variance voxel */
        D[i * V + 3] = 2.0f;
    nf_gpu_debug_max_block(128);      /* several permutation blocks and voxel tiles */
    for (int test = 0; test < 3; test++)
        for (int tail = 0; tail < 3; tail++) {
            nf_params_defaults(&nf_node_permute, &prm);
            prm.test = test;
            prm.tail = tail;
            prm.stat = (tail + test) % 2 ? PERM_STAT_T : PERM_STAT_MEAN;
            prm.method = tail == 2 ? PERM_SPEARMAN : PERM_PEARSON;
            prm.n_permutations = 600;
            prm.chunk = 250;          /* three checkpoint chunks, the last partial */
            prm.seed = 42 + test;
            differ += compare_permute(&prm, D, N, 10, V, cov);
            nf_params_release(&nf_node_permute, &prm);
        }
    /* exact: every sign flip of 9 subjects (512 <= N), identity and mirror ties */
    nf_params_defaults(&nf_node_permute, &prm);
    prm.stat = PERM_STAT_T;
    prm.n_permutations = 1000;
    differ += compare_permute(&prm, D, 9, 0, V, cov);
    /* out of memory twice on the way: smaller blocks, same results */
    nf_gpu_debug_fail_arena(2);
    differ += compare_permute(&prm, D, 9, 0, V, cov);
    nf_gpu_debug_fail_arena(0);
    nf_gpu_debug_max_block(0);
    differ += compare_permute(&prm, D, N, 0, V, cov);
    nf_params_release(&nf_node_permute, &prm);
    assert_true(differ <= V / 50);
    if (differ)
        fprintf(stderr, "note: %d voxel p_fwe values differed at a documented tie\n", differ);
    free(D);
}

/* TFCE and clusters are computed on the CPU: asked of the GPU node, it says
 * so and runs the CPU node, whose outputs it returns bit for bit. */
static void test_permute_tfce_on_cpu(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    enum { NX = 10, NY = 10, NZ = 7, N = 12 };
    struct nf_grid grid = { .dim = { NX, NY, NZ }, .pixdim = { 2, 2, 2 } };
    float *mask = malloc(NX * NY * NZ * sizeof *mask);
    for (int c = 0; c < NX * NY * NZ; c++)
        mask[c] = 1;
    struct nf_geom *geom = nf_geom_from_mask(&grid, mask);
    free(mask);
    assert_non_null(geom);
    const int64_t V = geom->n_voxels;
    struct nf_error err = { 0 };
    struct nf_value *in[PERMUTE_N_IN] = { 0 }, *cpu[PERMUTE_N_OUT] = { 0 }, *gpu[PERMUTE_N_OUT] = { 0 };
    in[PERMUTE_IN_DATA] = nf_value_new_matrix(N, V, geom, &err);
    rng_state = 99;
    for (int64_t e = 0; e < N * V; e++)
        in[PERMUTE_IN_DATA]->u.mat.data[e] = randn() + (e % V < V / 5 ? 0.7f : 0.0f);
    struct permute_params prm;
    nf_params_defaults(&nf_node_permute, &prm);
    prm.stat = PERM_STAT_T;
    prm.n_permutations = 100;
    prm.tfce = true;
    prm.cluster_threshold = 2;
    struct nf_env env = { .threads = 2, .seed = 11 };
    struct nf_run rc_run = { .params = &prm, .env = &env, .in = in, .out = cpu, .err = &err };
    struct nf_run rg_run = { .params = &prm, .env = &env, .in = in, .out = gpu, .err = &err };
    assert_int_equal(nf_node_permute.run_cpu(&rc_run), 0);
    assert_int_equal(nf_permute_run_gpu(&rg_run), 0);
    const int ports[] = { PERMUTE_OUT_P_FWE, PERMUTE_OUT_TFCE, PERMUTE_OUT_P_TFCE_FWE, PERMUTE_OUT_NULL_MAX_TFCE,
                          PERMUTE_OUT_CLUSTER_P_FWE, PERMUTE_OUT_NULL_MAX_CLUSTER_MASS };
    for (size_t i = 0; i < sizeof ports / sizeof *ports; i++) {
        const struct nf_matrix *a = &cpu[ports[i]]->u.mat, *b = &gpu[ports[i]]->u.mat;
        assert_int_equal(a->rows * a->cols, b->rows * b->cols);
        assert_memory_equal(a->data, b->data, (size_t)(a->rows * a->cols) * sizeof(float));
    }
    unref_all(cpu, PERMUTE_N_OUT);
    unref_all(gpu, PERMUTE_N_OUT);
    nf_value_unref(in[PERMUTE_IN_DATA]);
    nf_params_release(&nf_node_permute, &prm);
    nf_geom_unref(geom);
}

/* Discrete data: the sign-flip statistics of many permutations equal the
 * observed one exactly, more near ties than the device's list holds, so a
 * chunk is computed again with room for all; counts must still be the CPU's. */
static void test_permute_many_ties(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    enum { N = 10, V = 8000 };
    float *D = malloc((size_t)(N * V) * sizeof *D);
    struct permute_params prm;
    uint64_t st = 3;
    for (int64_t e = 0; e < N * V; e++)
        D[e] = (float)((int)(nf_rand_uniform(&st) * 3.0) - 1);   /* -1, 0, 1 */
    nf_params_defaults(&nf_node_permute, &prm);
    prm.n_permutations = 1024;   /* 2^10: exact */
    prm.chunk = 1024;
    compare_permute(&prm, D, N, 0, V, NULL);
    nf_params_release(&nf_node_permute, &prm);
    free(D);
}

/* ---- searchlight (predict's mode searchlight, closed forms) ---- */

#include "ref_solve.h"
#include "searchlight_testdata.h"

static int run_sl(bool gpu, const struct sldata *d, const struct nf_model_opts *opts, bool standardize, double radius,
                  struct nf_run *run, float *map, struct nf_sl_stats *st)
{
    struct nf_error err = { 0 };
    int rc = (gpu ? nf_searchlight_run_gpu : nf_searchlight_run)(run, d->X, d->n, d->V, d->V, d->geom, d->y,
                                                                 d->n_classes, d->fold_of, d->k, opts, standardize,
                                                                 NF_SCORE_AUTO, radius, 2, map, st, &err);
    if (rc < 0)
        fprintf(stderr, "%s searchlight failed: %s\n", gpu ? "GPU" : "CPU", err.msg);
    return rc;
}

/* Is some validation decision of the centre within `tol` (relative to the
 * fold's largest decision) of a class boundary? Recomputed here in double,
 * independently of both devices: the scaler of the training rows, the dual
 * ridge solve, the decisions. */
static bool near_tie(const struct sldata *d, const struct nf_sl_spheres *s, int64_t centre, double alpha,
                     bool standardize, double tol)
{
    const int64_t m = s->indptr[centre + 1] - s->indptr[centre], n = d->n;
    const int32_t *cols = s->indices + s->indptr[centre];
    const int64_t q = d->n_classes > 2 ? d->n_classes : 1;
    double *Z = malloc((size_t)(n * m) * sizeof *Z), *K = malloc((size_t)(n * n) * sizeof *K);
    double *T = malloc((size_t)(n * q) * sizeof *T), *dec = malloc((size_t)(n * q) * sizeof *dec);
    int64_t *tr = malloc((size_t)n * sizeof *tr), *va = malloc((size_t)n * sizeof *va);
    bool tie = false;
    for (int64_t f = 0; f < d->k && !tie; f++) {
        int64_t nt = 0, nv = 0;
        for (int64_t i = 0; i < n; i++) {
            if (d->fold_of[i] == f)
                va[nv++] = i;
            else
                tr[nt++] = i;
        }
        for (int64_t j = 0; j < m; j++) {
            double mu = 0, ss = 0;
            for (int64_t t = 0; t < nt; t++)
                mu += d->X[tr[t] * d->V + cols[j]];
            mu /= (double)nt;
            for (int64_t t = 0; t < nt; t++)
                ss += pow(d->X[tr[t] * d->V + cols[j]] - mu, 2);
            double sd = standardize && ss > 0 ? sqrt(ss / (double)nt) : 1.0;
            for (int64_t i = 0; i < n; i++)
                Z[i * m + j] = (d->X[i * d->V + cols[j]] - mu) / sd;
        }
        /* targets: the value, or ±1 per class (one column for two classes) */
        double tm[8] = { 0 };
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < q; o++) {
                double yv = d->y[tr[t]];
                T[t * q + o] = !d->n_classes ? yv : q == 1 ? (yv == 1 ? 1.0 : -1.0) : (yv == (double)o ? 1.0 : -1.0);
                tm[o] += T[t * q + o] / (double)nt;
            }
        for (int64_t t = 0; t < nt; t++)
            for (int64_t o = 0; o < q; o++)
                T[t * q + o] -= tm[o];
        /* (Z_t Z_tᵀ + αI) a = T_c; decisions Z_v Z_tᵀ a + t_mean */
        for (int64_t a = 0; a < nt; a++)
            for (int64_t b = 0; b < nt; b++) {
                double acc = a == b ? alpha : 0.0;
                for (int64_t j = 0; j < m; j++)
                    acc += Z[tr[a] * m + j] * Z[tr[b] * m + j];
                K[a * nt + b] = acc;
            }
        gauss(K, T, nt, q);
        double scale = 0;
        for (int64_t i = 0; i < nv; i++)
            for (int64_t o = 0; o < q; o++) {
                double acc = tm[o];
                for (int64_t t = 0; t < nt; t++) {
                    double kv = 0;
                    for (int64_t j = 0; j < m; j++)
                        kv += Z[va[i] * m + j] * Z[tr[t] * m + j];
                    acc += kv * T[t * q + o];
                }
                dec[i * q + o] = acc;
                scale = fmax(scale, fabs(acc));
            }
        for (int64_t i = 0; i < nv && !tie; i++) {
            double margin;
            if (q == 1) {
                margin = fabs(dec[i]);
            } else {
                double best = -INFINITY, second = -INFINITY;
                for (int64_t o = 0; o < q; o++) {
                    double v = dec[i * q + o];
                    if (v > best) {
                        second = best;
                        best = v;
                    } else if (v > second) {
                        second = v;
                    }
                }
                margin = best - second;
            }
            tie = margin <= tol * scale + 1e-9;
        }
    }
    free(Z);
    free(K);
    free(T);
    free(dec);
    free(tr);
    free(va);
    return tie;
}

/* The GPU map against the CPU's: accuracy maps identical at >= 99% of the
 * centres, and every differing centre a near tie (recomputed in double);
 * ridge R² within float tolerance; NaN at the same centres. Returns the
 * number of differing (near-tie) centres. */
static int64_t compare_maps(const struct sldata *d, const struct nf_sl_spheres *s, double alpha, bool standardize,
                            const float *cpu, const float *gpu)
{
    int64_t differ = 0;
    for (int64_t v = 0; v < d->V; v++) {
        assert_int_equal(isnan(cpu[v]), isnan(gpu[v]));
        if (isnan(cpu[v]))
            continue;
        if (!d->n_classes) {
            assert_true(fabs(cpu[v] - gpu[v]) <= 1e-4 * (1 + fabs(cpu[v])));
        } else if (cpu[v] != gpu[v]) {
            if (!near_tie(d, s, v, alpha, standardize, 1e-3))
                fprintf(stderr, "centre %lld: CPU %g, GPU %g and no near tie\n", (long long)v, cpu[v], gpu[v]);
            assert_true(near_tie(d, s, v, alpha, standardize, 1e-3));
            differ++;
        }
    }
    assert_true(differ * 100 <= d->V);
    return differ;
}

static void check_sl_case(enum nf_model_kind kind, int64_t n_classes, bool standardize, double radius, uint64_t seed)
{
    struct sldata d;
    struct nf_sl_spheres s = { 0 };
    struct nf_error err = { 0 };
    struct nf_sl_stats sc, sg;
    sl_make(&d, sl_geom(8, 7, 6, 0.8, seed), 24, 3, n_classes, 1000 + seed);
    struct nf_model_opts opts = nf_model_defaults(kind);
    assert_int_equal(nf_sl_spheres_build(d.geom, radius, &s, &err), 0);
    /* n_tr = 16: spheres on both sides of it, so the CPU and the GPU use both
     * the primal and the dual forms */
    int64_t primal = 0, dual = 0;
    for (int64_t v = 0; v < d.V; v++) {
        int64_t m = s.indptr[v + 1] - s.indptr[v];
        primal += m >= 2 && m <= 16;
        dual += m > 16;
    }
    assert_true(primal > 0 && dual > 0);
    float *cpu = malloc((size_t)d.V * sizeof *cpu), *gpu = malloc((size_t)d.V * sizeof *gpu);
    assert_int_equal(run_sl(false, &d, &opts, standardize, radius, NULL, cpu, &sc), 0);
    /* one batch; several (a cap below the 16-centre checkpoint block); and an
     * arena that fails twice (the batch halves) */
    for (int variant = 0; variant < 3; variant++) {
        nf_gpu_debug_max_block(variant == 1 ? 7 : 0);
        nf_gpu_debug_fail_arena(variant == 2 ? 2 : 0);
        memset(gpu, 0, (size_t)d.V * sizeof *gpu);
        assert_int_equal(run_sl(true, &d, &opts, standardize, radius, NULL, gpu, &sg), 0);
        compare_maps(&d, &s, opts.alpha, standardize, cpu, gpu);
        assert_int_equal(sg.n_small, sc.n_small);
        assert_int_equal(sg.n_failed, sc.n_failed);
        assert_int_equal(sg.max_sphere, sc.max_sphere);
        assert_true(sg.mean_sphere == sc.mean_sphere);
    }
    nf_gpu_debug_max_block(0);
    nf_gpu_debug_fail_arena(0);
    free(cpu);
    free(gpu);
    nf_sl_spheres_release(&s);
    sl_free(&d);
}

static void test_searchlight_agreement(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    check_sl_case(NF_MODEL_RIDGE_CLASSIFIER, 2, true, 6.0, 1);
    check_sl_case(NF_MODEL_RIDGE_CLASSIFIER, 3, false, 6.0, 2);
    check_sl_case(NF_MODEL_RIDGE_CLASSIFIER, 3, true, 4.5, 3);
    check_sl_case(NF_MODEL_RIDGE, 0, true, 6.0, 4);
    check_sl_case(NF_MODEL_RIDGE, 0, false, 4.5, 5);
}

static char sl_tmpdir[256];

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* Checkpoints are one format on both devices: a GPU run resumes the CPU's
 * chunks of a killed run (and the resumed blocks keep their stored values),
 * and the CPU resumes all of a GPU run's. */
static void test_searchlight_resume(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    struct sldata d;
    struct nf_sl_spheres s = { 0 };
    struct nf_error err = { 0 };
    struct nf_sl_stats st;
    sl_make(&d, sl_geom(9, 9, 8, 0.9, 41), 24, 3, 2, 500);
    struct nf_model_opts opts = nf_model_defaults(NF_MODEL_RIDGE_CLASSIFIER);
    assert_int_equal(nf_sl_spheres_build(d.geom, 6.0, &s, &err), 0);
    snprintf(sl_tmpdir, sizeof sl_tmpdir, "/tmp/nlflow-test-gpu-XXXXXX");
    assert_non_null(mkdtemp(sl_tmpdir));
    char *path = nf_asprintf("%s/cache.db", sl_tmpdir);
    struct nf_cache *cache = NULL;
    assert_int_equal(nf_cache_open(path, NULL, &cache, &err), 0);
    struct nf_checkpoint ck1 = { cache, { 1, 1 }, false, 0, 0, 0 }, ck2 = { cache, { 1, 2 }, false, 0, 0, 0 },
                         ck3 = { cache, { 1, 3 }, false, 0, 0, 0 };
    struct nf_run run1 = { .ckpt = &ck1 }, run2 = { .ckpt = &ck2 }, run3 = { .ckpt = &ck3 };
    float *ref = malloc((size_t)d.V * sizeof *ref), *map = malloc((size_t)d.V * sizeof *map);
    float *gmap = malloc((size_t)d.V * sizeof *gmap);

    assert_int_equal(run_sl(false, &d, &opts, true, 6.0, &run1, ref, NULL), 0);
    int64_t *idx = NULL;
    size_t n_chunks = 0;
    assert_int_equal(nf_ckpt_list(&ck1, &idx, &n_chunks, &err), 0);
    assert_true(n_chunks >= 4);
    /* a killed CPU run: every other block committed, the first with changed
     * values (the resumed run must take them as they are) */
    int64_t resumed_expected = 0;
    for (size_t t = 0; t < n_chunks; t += 2) {
        void *data = NULL;
        size_t bytes = 0;
        assert_int_equal(nf_ckpt_get(&ck1, idx[t], &data, &bytes, &err), 1);
        if (t == 0) {
            float marker = 0.125f;
            for (size_t b = 48; b < bytes; b += sizeof marker)
                memcpy((char *)data + b, &marker, sizeof marker);
        }
        nf_ckpt_put(&ck2, idx[t], data, bytes, &err);
        resumed_expected += (int64_t)((bytes - 48) / sizeof(float));
        free(data);
    }
    nf_gpu_debug_max_block(5);   /* batches that straddle blocks */
    assert_int_equal(run_sl(true, &d, &opts, true, 6.0, &run2, map, &st), 0);
    assert_int_equal(st.n_resumed, resumed_expected);
    int64_t first_len = 0;
    for (int64_t v = 0; v < d.V && map[v] == 0.125f; v++)
        first_len++;
    assert_true(first_len > 0);
    memcpy(gmap, ref, (size_t)d.V * sizeof *gmap);
    for (int64_t v = 0; v < first_len; v++)
        gmap[v] = 0.125f;
    for (int64_t v = 0; v < d.V; v++)
        if (map[v] != gmap[v] && !(isnan(map[v]) && isnan(gmap[v])))
            assert_true(near_tie(&d, &s, v, opts.alpha, true, 1e-3));
    /* the killed run's blocks are now all committed: a rerun resumes everything */
    assert_int_equal(run_sl(true, &d, &opts, true, 6.0, &run2, gmap, &st), 0);
    assert_int_equal(st.n_resumed, d.V);
    assert_memory_equal(gmap, map, (size_t)d.V * sizeof *map);
    /* a whole GPU run, resumed whole by the CPU */
    assert_int_equal(run_sl(true, &d, &opts, true, 6.0, &run3, gmap, NULL), 0);
    nf_gpu_debug_max_block(0);
    assert_int_equal(run_sl(false, &d, &opts, true, 6.0, &run3, map, &st), 0);
    assert_int_equal(st.n_resumed, d.V);
    assert_memory_equal(map, gmap, (size_t)d.V * sizeof *map);
    compare_maps(&d, &s, opts.alpha, true, ref, gmap);
    free(idx);
    free(ref);
    free(map);
    free(gmap);
    free(path);
    nf_cache_close(cache);
    nftw(sl_tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    nf_sl_spheres_release(&s);
    sl_free(&d);
}

/* stderr of what runs between begin and end. */
static FILE *cap_file;
static int cap_fd;

static void capture_begin(void)
{
    fflush(stderr);
    cap_file = tmpfile();
    assert_non_null(cap_file);
    cap_fd = dup(2);
    assert_true(dup2(fileno(cap_file), 2) >= 0);
}

static char *capture_end(void)
{
    fflush(stderr);
    dup2(cap_fd, 2);
    close(cap_fd);
    long size = fseek(cap_file, 0, SEEK_END) == 0 ? ftell(cap_file) : 0;
    char *text = calloc((size_t)size + 1, 1);
    rewind(cap_file);
    assert_int_equal(fread(text, 1, (size_t)size, cap_file), (size_t)size);
    fclose(cap_file);
    return text;
}

/* The predict node with device gpu where there is no GPU path (svm
 * searchlight, whole_brain): one warning, and the CPU node's outputs. */
static void test_searchlight_no_gpu_path(void **state)
{
    (void)state;
    struct sldata d;
    sl_make(&d, sl_geom(5, 4, 4, 1.0, 7), 18, 3, 2, 900);
    struct nf_error err = { 0 };
    struct nf_value *x = nf_value_new_matrix(d.n, d.V, d.geom, &err), *y = nf_value_new_matrix(d.n, 1, NULL, &err);
    assert_non_null(x);
    assert_non_null(y);
    memcpy(x->u.mat.data, d.X, (size_t)(d.n * d.V) * sizeof(float));
    for (int64_t i = 0; i < d.n; i++)
        y->u.mat.data[i] = (float)d.y[i];
    for (int mode = 0; mode < 2; mode++) {
        struct predict_params prm;
        nf_params_defaults(&nf_node_predict, &prm);
        prm.mode = mode == 0 ? PREDICT_SEARCHLIGHT : PREDICT_WHOLE_BRAIN;
        prm.model = NF_MODEL_SVM;
        prm.cv = 3;
        prm.seed = 4;
        prm.radius = 4.0;
        struct nf_value *in[4] = { x, y, NULL, NULL }, *cpu[PREDICT_N_OUT] = { 0 }, *gpu[PREDICT_N_OUT] = { 0 };
        struct nf_env env = { .threads = 2, .seed = 1 };
        struct nf_run rc_run = { .params = &prm, .env = &env, .in = in, .out = cpu, .err = &err };
        struct nf_run rg_run = { .params = &prm, .env = &env, .in = in, .out = gpu, .err = &err };
        assert_int_equal(nf_node_predict.run_cpu(&rc_run), 0);
        capture_begin();
        int rc = nf_predict_run_gpu(&rg_run);
        char *warnings = capture_end();
        assert_int_equal(rc, 0);
        assert_non_null(strstr(warnings, "has no GPU path; running on the CPU"));
        assert_null(strstr(strstr(warnings, "has no GPU path") + 1, "has no GPU path"));   /* once */
        free(warnings);
        for (int o = 0; o < PREDICT_N_OUT; o++) {
            assert_int_equal(cpu[o] != NULL, gpu[o] != NULL);
            if (cpu[o] && cpu[o]->kind == NF_KIND_MATRIX)
                assert_memory_equal(cpu[o]->u.mat.data, gpu[o]->u.mat.data,
                                    (size_t)(cpu[o]->u.mat.rows * cpu[o]->u.mat.cols) * sizeof(float));
            nf_value_unref(cpu[o]);
            nf_value_unref(gpu[o]);
        }
        nf_params_release(&nf_node_predict, &prm);
    }
    nf_value_unref(x);
    nf_value_unref(y);
    sl_free(&d);
}

/* ---- without a GPU: the fallback to the CPU nodes ---- */

static void test_fallback(void **state)
{
    (void)state;
    if (have_gpu)
        skip();
    struct ridge_params rp;
    struct permute_params pp;
    struct nf_value *cpu[6] = { 0 }, *gpu[6] = { 0 };
    struct nf_error err = { 0 };
    ridge_data();
    ridge_params(&rp);
    assert_int_equal(run_ridge(false, &rp, NULL, RX, RY, RN, RV, cpu, &err), 0);
    assert_int_equal(run_ridge(true, &rp, NULL, RX, RY, RN, RV, gpu, &err), 0);
    for (int o = 0; o < 6; o++) {
        assert_int_equal(cpu[o]->u.mat.rows * cpu[o]->u.mat.cols, gpu[o]->u.mat.rows * gpu[o]->u.mat.cols);
        assert_memory_equal(cpu[o]->u.mat.data, gpu[o]->u.mat.data,
                            (size_t)(cpu[o]->u.mat.rows * cpu[o]->u.mat.cols) * sizeof(float));
    }
    unref_all(cpu, 6);
    unref_all(gpu, 6);
    nf_params_release(&nf_node_ridge, &rp);
    nf_params_defaults(&nf_node_permute, &pp);
    pp.n_permutations = 99;
    assert_int_equal(run_permute(false, &pp, RY, 20, 0, RV, NULL, cpu, &err), 0);
    assert_int_equal(run_permute(true, &pp, RY, 20, 0, RV, NULL, gpu, &err), 0);
    for (int o = PERMUTE_OUT_STAT; o <= PERMUTE_OUT_NULL_MAX; o++)
        assert_memory_equal(cpu[o]->u.mat.data, gpu[o]->u.mat.data,
                            (size_t)(cpu[o]->u.mat.rows * cpu[o]->u.mat.cols) * sizeof(float));
    unref_all(cpu, 6);
    unref_all(gpu, 6);
    nf_params_release(&nf_node_permute, &pp);
    /* the searchlight too */
    struct sldata d;
    sl_make(&d, sl_geom(5, 5, 4, 0.9, 3), 18, 3, 2, 31);
    struct nf_model_opts opts = nf_model_defaults(NF_MODEL_RIDGE_CLASSIFIER);
    float *mc = malloc((size_t)d.V * sizeof *mc), *mg = malloc((size_t)d.V * sizeof *mg);
    assert_int_equal(run_sl(false, &d, &opts, true, 6.0, NULL, mc, NULL), 0);
    assert_int_equal(run_sl(true, &d, &opts, true, 6.0, NULL, mg, NULL), 0);
    assert_memory_equal(mc, mg, (size_t)d.V * sizeof *mc);
    free(mc);
    free(mg);
    sl_free(&d);
    /* the dispatch table falls back too */
    float A[6] = { 1, 2, 3, 4, 5, 6 }, B[6] = { 1, 0, 0, 1, 1, 1 }, C[4] = { 0 };
    nf_kernels_cuda.sgemm(false, false, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
    assert_true(C[0] == 4 && C[1] == 5 && C[2] == 10 && C[3] == 11);
}

/* ---- inputs resident between GPU nodes ---- */

#ifdef NF_GPU_EMULATED
void nf_emu_set_device_memory(size_t total);
size_t nf_emu_h2d_bytes(void);
#endif

static int run_ridge_on(struct ridge_params *prm, struct nf_value *x, struct nf_value *y, struct nf_value **out,
                        struct nf_error *err)
{
    struct nf_value *in[3] = { x, y, NULL };
    struct nf_env env = { .threads = 2, .seed = 5 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    return nf_ridge_run_gpu(&run);
}

static int run_permute_on(struct permute_params *prm, struct nf_value *data, struct nf_value **out,
                          struct nf_error *err)
{
    struct nf_value *in[4] = { data, NULL, NULL, NULL };
    struct nf_env env = { .threads = 2, .seed = 11 };
    struct nf_run run = { .params = prm, .env = &env, .in = in, .out = out, .err = err };
    return nf_permute_run_gpu(&run);
}

static void assert_same_outputs(struct nf_value **a, struct nf_value **b, int n)
{
    for (int o = 0; o < n; o++) {
        assert_true((a[o] == NULL) == (b[o] == NULL));
        if (a[o] && a[o]->kind == NF_KIND_MATRIX)
            assert_memory_equal(a[o]->u.mat.data, b[o]->u.mat.data,
                                (size_t)(a[o]->u.mat.rows * a[o]->u.mat.cols) * sizeof(float));
    }
}

/* Two ridge nodes on the same Y: the second finds Y on the device (one
 * upload, then a hit, and fewer bytes go up), and each gives exactly what it
 * gives with residency off (blocks gathered on the device are the blocks the
 * host packs). Two permutes on the same maps: the same. A freed value's copy
 * goes at the next acquire; when device memory runs short, the least recently
 * used copy not in use goes. */
static void test_resident_inputs(void **state)
{
    (void)state;
    if (!have_gpu)
        skip();
    struct ridge_params prm;
    struct permute_params pp;
    struct nf_error err = { 0 };
    struct nf_value *ref[4][6] = { { 0 } }, *got[4][6] = { { 0 } };
    struct nf_gpu_resident_stats s0, s1, s2, s3;
    ridge_data();
    ridge_params(&prm);
    nf_gpu_debug_max_block(64);
    struct nf_value *x1 = nf_value_new_matrix(RN, RP, NULL, &err), *x2 = nf_value_new_matrix(RN, RP, NULL, &err);
    struct nf_value *y = nf_value_new_matrix(RN, RV, NULL, &err);
    assert_non_null(x1);
    assert_non_null(x2);
    assert_non_null(y);
    memcpy(x1->u.mat.data, RX, sizeof RX);
    for (int e = 0; e < RN * RP; e++)   /* another design: the columns in reverse */
        x2->u.mat.data[e] = RX[(e / RP) * RP + (RP - 1 - e % RP)] * (e % 3 ? 1.0f : -0.5f);
    memcpy(y->u.mat.data, RY, sizeof RY);
    const size_t y_bytes = sizeof RY;

    nf_gpu_debug_residency(0);
    assert_int_equal(run_ridge_on(&prm, x1, y, ref[0], &err), 0);
    assert_int_equal(run_ridge_on(&prm, x2, y, ref[1], &err), 0);
    nf_gpu_debug_residency(1);
    nf_gpu_resident_stats(&s0);
#ifdef NF_GPU_EMULATED
    size_t h0 = nf_emu_h2d_bytes();
#endif
    assert_int_equal(run_ridge_on(&prm, x1, y, got[0], &err), 0);
    nf_gpu_resident_stats(&s1);
#ifdef NF_GPU_EMULATED
    size_t h1 = nf_emu_h2d_bytes();
#endif
    assert_int_equal(run_ridge_on(&prm, x2, y, got[1], &err), 0);
    nf_gpu_resident_stats(&s2);
#ifdef NF_GPU_EMULATED
    size_t h2 = nf_emu_h2d_bytes();
    /* the second node sent up what the first did (X, factors), but Y */
    assert_true(h1 - h0 >= y_bytes);
    assert_int_equal(h2 - h1, h1 - h0 - y_bytes);
#endif
    assert_int_equal(s1.uploads, s0.uploads + 1);
    assert_true(s1.uploaded_bytes - s0.uploaded_bytes == y_bytes);
    assert_int_equal(s2.uploads, s1.uploads);
    assert_int_equal(s2.hits, s1.hits + 1);
    assert_same_outputs(ref[0], got[0], 6);
    assert_same_outputs(ref[1], got[1], 6);

    /* permute: one-sample t on Y's first 40 rows as maps, then the other tail */
    struct nf_value *maps = nf_value_new_matrix(40, RV, NULL, &err);
    assert_non_null(maps);
    for (int e = 0; e < 40 * RV; e++)
        maps->u.mat.data[e] = RY[e] - 3.0f - 0.01f * (float)(e % RV);
    for (int pass = 0; pass < 2; pass++) {
        nf_gpu_debug_residency(pass);
        for (int t = 0; t < 2; t++) {
            nf_params_defaults(&nf_node_permute, &pp);
            pp.test = PERM_ONE_SAMPLE;
            pp.stat = PERM_STAT_T;
            pp.tail = t ? PERM_TAIL_UPPER : PERM_TAIL_TWO;
            pp.n_permutations = 300;
            pp.seed = 3;
            assert_int_equal(run_permute_on(&pp, maps, pass ? got[2 + t] : ref[2 + t], &err), 0);
            nf_params_release(&nf_node_permute, &pp);
        }
    }
    nf_gpu_resident_stats(&s3);
    assert_int_equal(s3.uploads, s2.uploads + 1);
    assert_int_equal(s3.hits, s2.hits + 1);
    assert_same_outputs(ref[2], got[2], 5);
    assert_same_outputs(ref[3], got[3], 5);

    /* freed values: their copies go at the next acquire */
    assert_true(s3.copies >= 2);
    nf_value_unref(y);
    nf_value_unref(maps);
    struct nf_gpu *g = nf_gpu_acquire(&err);
    assert_non_null(g);
    nf_gpu_release(g);
    nf_gpu_resident_stats(&s3);
    assert_int_equal(s3.copies, 0);
    assert_int_equal(s3.bytes, 0);

#ifdef NF_GPU_EMULATED
    /* eviction: a device with room for two 4 MiB copies, not three */
    nf_emu_set_device_memory((size_t)10 << 20);
    const size_t mb4 = (size_t)4 << 20;
    char *host = calloc(1, mb4);
    void *da = NULL, *db = NULL, *dc = NULL;
    assert_non_null(host);
    g = nf_gpu_acquire(&err);
    assert_int_equal(nf_gpu_resident(g, 1u << 30, NF_GPU_AS_IS, host, mb4, &da, NULL, &err), 0);
    nf_gpu_release(g);   /* a not in use any more */
    g = nf_gpu_acquire(&err);
    assert_int_equal(nf_gpu_resident(g, (1u << 30) + 1, NF_GPU_AS_IS, host, mb4, &db, NULL, &err), 0);
    nf_gpu_resident_stats(&s0);
    assert_int_equal(nf_gpu_resident(g, (1u << 30) + 2, NF_GPU_AS_IS, host, mb4, &dc, NULL, &err), 0);
    nf_gpu_resident_stats(&s1);
    assert_int_equal(s1.evictions, s0.evictions + 1);   /* a went, b (in use) stayed */
    void *d = NULL;
    bool up = false;
    assert_int_equal(nf_gpu_resident(g, (1u << 30) + 1, NF_GPU_AS_IS, host, mb4, &d, &up, &err), 0);
    assert_true(d == db && !up);
    /* three in use at once do not fit: out of memory, nothing evicted */
    assert_int_equal(nf_gpu_resident(g, (1u << 30) + 3, NF_GPU_AS_IS, host, mb4, &d, NULL, &err), NF_ENOMEM);
    memset(&err, 0, sizeof err);
    nf_gpu_release(g);
    nf_gpu_shutdown();   /* drops every copy; the next acquire makes a new context */
    nf_gpu_resident_stats(&s2);
    assert_int_equal(s2.copies, 0);
    nf_emu_set_device_memory(0);
    free(host);
#endif
    nf_gpu_debug_residency(-1);
    nf_gpu_debug_max_block(0);
    for (int i = 0; i < 4; i++)
        unref_all(ref[i], 6), unref_all(got[i], 6);
    nf_value_unref(x1);
    nf_value_unref(x2);
    nf_params_release(&nf_node_ridge, &prm);
}

int main(void)
{
    char why[512];
    have_gpu = nf_cuda_available(why, sizeof why);
    nf_log_quiet = true;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_sgemm),
        cmocka_unit_test(test_sgemm_batched),
        cmocka_unit_test(test_svd),
        cmocka_unit_test(test_ridge_agreement),
        cmocka_unit_test(test_ridge_bad_input),
        cmocka_unit_test(test_permute_agreement),
        cmocka_unit_test(test_permute_many_ties),
        cmocka_unit_test(test_permute_tfce_on_cpu),
        cmocka_unit_test(test_searchlight_agreement),
        cmocka_unit_test(test_searchlight_resume),
        cmocka_unit_test(test_searchlight_no_gpu_path),
        cmocka_unit_test(test_resident_inputs),
    };
#ifdef NF_GPU_EMULATED
    printf("note: the device is tests/unit/gpu_emu.c's CPU emulation: this checks the host side of the GPU "
           "backend and the kernels' arithmetic, not the device itself\n");
#endif
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    nf_gpu_shutdown();
    if (failed)
        return 1;
    if (!have_gpu) {
        printf("SKIP: no usable GPU (%s): the CPU fallback of the GPU nodes passed; the CPU-vs-GPU "
               "agreement tests did not run (bench/gpu-check.sh runs them on a GPU machine)\n", why);
        return 77;
    }
    return 0;
}

#else

int main(void)
{
    printf("SKIP: this build has no CUDA support (configure --with-cuda): GPU tests not built\n");
    return 77;
}

#endif
