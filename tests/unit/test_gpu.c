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
 * messages.
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

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include "kernels/cuda/gpu.h"
#include "kernels/kernels.h"
#include "pipeline.h"
#include "util.h"
#include "../../nodes/gpu_nodes.h"
#include "../../nodes/permute.h"
#include "../../nodes/ridge.h"

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

/* CPU vs GPU for one configuration on the first n samples; returns the
 * number of near-tie voxels. */
static int compare_ridge_n(struct ridge_params *prm, struct nf_value *groups, int64_t n)
{
    struct nf_value *cpu[6] = { 0 }, *gpu[6] = { 0 };
    struct nf_error err = { 0 };
    assert_int_equal(run_ridge(false, prm, groups, RX, RY, n, RV, cpu, &err), 0);
    int rc = run_ridge(true, prm, groups, RX, RY, n, RV, gpu, &err);
    if (rc)
        fprintf(stderr, "GPU ridge failed: %s\n", err.msg);
    assert_int_equal(rc, 0);
    int64_t A = isnan(prm->alpha) ? RA : 1, k = cpu[OUT_CV_SCORES]->u.mat.rows / A;
    int ties = 0;
    for (int o = 0; o < 6; o++) {
        assert_int_equal(gpu[o]->u.mat.rows, cpu[o]->u.mat.rows);
        assert_int_equal(gpu[o]->u.mat.cols, cpu[o]->u.mat.cols);
    }
    bool shared_tie = false;
    if (prm->alpha_mode == RIDGE_SHARED && cpu[OUT_ALPHA]->u.mat.data[0] != gpu[OUT_ALPHA]->u.mat.data[0]) {
        /* shared mode: one alpha for all voxels, from the sum of every score; a
         * different choice only where two alphas' sums tie to round-off */
        double tc = 0, tg = 0;
        for (int64_t a = 0; a < A; a++) {
            double sum = 0;
            for (int64_t f = 0; f < k; f++)
                for (int64_t v = 0; v < RV; v++)
                    sum += cpu[OUT_CV_SCORES]->u.mat.data[(f * A + a) * RV + v];
            if ((float)ridge_alphas[a] == cpu[OUT_ALPHA]->u.mat.data[0])
                tc = sum;
            if ((float)ridge_alphas[a] == gpu[OUT_ALPHA]->u.mat.data[0])
                tg = sum;
        }
        assert_true(fabs(tc - tg) <= 1e-5 * (1 + fabs(tc)));
        shared_tie = true;
        ties++;
    }
    for (int64_t v = 0; v < RV; v++) {
        float ac = cpu[OUT_ALPHA]->u.mat.data[v], ag = gpu[OUT_ALPHA]->u.mat.data[v];
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
                mc += cpu[OUT_CV_SCORES]->u.mat.data[(f * A + ic) * RV + v] / (double)k;
                mg += cpu[OUT_CV_SCORES]->u.mat.data[(f * A + ig) * RV + v] / (double)k;
            }
            assert_true(fabs(mc - mg) <= 1e-5 * (1 + fabs(mc)));
            tie = true;
            ties++;
        }
        if (!shared_tie) {   /* the score is that of the chosen alpha */
            double a = cpu[OUT_SCORE]->u.mat.data[v], b = gpu[OUT_SCORE]->u.mat.data[v];
            assert_true(fabs(a - b) <= 1e-4 * (1 + fabs(a)));
        }
        for (int64_t fa = 0; fa < cpu[OUT_CV_SCORES]->u.mat.rows; fa++) {
            double a = cpu[OUT_CV_SCORES]->u.mat.data[fa * RV + v], b = gpu[OUT_CV_SCORES]->u.mat.data[fa * RV + v];
            assert_true(fabs(a - b) <= 1e-4 * (1 + fabs(a)));
        }
        if (tie)
            continue;
        double wmax = 0, pmax = 0;
        for (int64_t j = 0; j < RP; j++)
            wmax = fmax(wmax, fabs(cpu[OUT_WEIGHTS]->u.mat.data[j * RV + v]));
        for (int64_t j = 0; j < RP; j++)
            assert_true(fabs(cpu[OUT_WEIGHTS]->u.mat.data[j * RV + v] - gpu[OUT_WEIGHTS]->u.mat.data[j * RV + v]) <=
                        1e-3 * wmax + 1e-6);
        for (int64_t i = 0; i < n; i++)
            pmax = fmax(pmax, fabs(cpu[OUT_PREDICTIONS]->u.mat.data[i * RV + v]));
        for (int64_t i = 0; i < n; i++)
            assert_true(fabs(cpu[OUT_PREDICTIONS]->u.mat.data[i * RV + v] -
                             gpu[OUT_PREDICTIONS]->u.mat.data[i * RV + v]) <= 1e-4 * pmax + 1e-6);
        assert_true(fabs(cpu[OUT_INTERCEPT]->u.mat.data[v] - gpu[OUT_INTERCEPT]->u.mat.data[v]) <=
                    1e-4 * (1 + fabs(cpu[OUT_INTERCEPT]->u.mat.data[v])));
    }
    unref_all(cpu, 6);
    unref_all(gpu, 6);
    return ties;
}

static int compare_ridge(struct ridge_params *prm, struct nf_value *groups)
{
    return compare_ridge_n(prm, groups, RN);
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
    ties += compare_ridge_n(&prm, NULL, 12);
    prm.fit_intercept = true;
    ties += compare_ridge_n(&prm, NULL, 12);
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
    in[PIN_DATA] = nf_value_new_matrix(n, V, NULL, err);
    memcpy(in[PIN_DATA]->u.mat.data, D, (size_t)(n * V) * sizeof(float));
    if (prm->test == PERM_TWO_SAMPLE) {
        in[PIN_GROUPS] = nf_value_new_matrix(n, 1, NULL, err);
        for (int64_t i = 0; i < n; i++)   /* n1 subjects labelled 3 (group 1), scattered */
            in[PIN_GROUPS]->u.mat.data[i] = (i * 7) % n < n1 ? 3.0f : 7.0f;
    }
    if (prm->test == PERM_CORRELATION) {
        in[PIN_COVARIATE] = nf_value_new_matrix(n, 1, NULL, err);
        memcpy(in[PIN_COVARIATE]->u.mat.data, cov, (size_t)n * sizeof(float));
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
    int64_t M = cpu[POUT_NULL_MAX]->u.mat.rows;
    assert_int_equal(gpu[POUT_NULL_MAX]->u.mat.rows, M);
    assert_memory_equal(cpu[POUT_STAT]->u.mat.data, gpu[POUT_STAT]->u.mat.data, (size_t)V * sizeof(float));
    assert_memory_equal(cpu[POUT_P]->u.mat.data, gpu[POUT_P]->u.mat.data, (size_t)V * sizeof(float));
    assert_memory_equal(cpu[POUT_Q_FDR]->u.mat.data, gpu[POUT_Q_FDR]->u.mat.data, (size_t)V * sizeof(float));
    double scale = max_abs(cpu[POUT_NULL_MAX]->u.mat.data, M);
    for (int64_t i = 0; i < M; i++)
        assert_true(fabs(cpu[POUT_NULL_MAX]->u.mat.data[i] - gpu[POUT_NULL_MAX]->u.mat.data[i]) <=
                    1e-4 * scale + 1e-6);
    int differ = 0;
    for (int64_t v = 0; v < V; v++) {
        float a = cpu[POUT_P_FWE]->u.mat.data[v], b = gpu[POUT_P_FWE]->u.mat.data[v];
        if (a == b)
            continue;
        /* a tie: some null maximum within round-off of the voxel's statistic */
        double st = fabs(cpu[POUT_STAT]->u.mat.data[v]);
        bool near = false;
        for (int64_t i = 0; i < M && !near; i++)
            near = fabs(fabs(cpu[POUT_NULL_MAX]->u.mat.data[i]) - st) <= 1e-4 * (st + 1e-6);
        assert_true(near);
        assert_true(fabs(a - b) <= 2.0 / (double)M + 1e-6);
        differ++;
    }
    const struct nf_table *tc = &cpu[POUT_INFO]->u.tab, *tg = &gpu[POUT_INFO]->u.tab;
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
    for (int o = POUT_STAT; o <= POUT_NULL_MAX; o++)
        assert_memory_equal(cpu[o]->u.mat.data, gpu[o]->u.mat.data,
                            (size_t)(cpu[o]->u.mat.rows * cpu[o]->u.mat.cols) * sizeof(float));
    unref_all(cpu, 6);
    unref_all(gpu, 6);
    nf_params_release(&nf_node_permute, &pp);
    /* the dispatch table falls back too */
    float A[6] = { 1, 2, 3, 4, 5, 6 }, B[6] = { 1, 0, 0, 1, 1, 1 }, C[4] = { 0 };
    nf_kernels_cuda.sgemm(false, false, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);
    assert_true(C[0] == 4 && C[1] == 5 && C[2] == 10 && C[3] == 11);
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
