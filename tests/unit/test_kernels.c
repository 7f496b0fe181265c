/* test_kernels.c — every kernel table against the reference (checkasm style).
 *
 * For each non-reference table (BLAS; CUDA once it has a table) every entry is
 * run on the same inputs as nf_kernels_ref and compared with a relative
 * tolerance. The reference itself is pinned by closed forms (a hand-worked
 * product, columns with known mean and std), so an error shared by both sides
 * is still caught. Sizes are odd and leading dimensions padded, and the padding
 * is filled with a sentinel that must survive, so a kernel that confuses a
 * size with a leading dimension fails. The SVD is checked by its definition
 * (orthonormal factors, sorted non-negative s, A = U S Vt) on tall, wide, square,
 * rank-deficient and vector shapes, and its singular values across tables; signs
 * of singular vectors are free, so vectors are not compared directly. Also checks
 * the BLAS identification functions and that the CUDA probe answers sensibly on
 * any machine. The nodes' vector kernels (perm_tile, ridge_error_sums, row_*) are
 * checked against their plain versions on random inputs with odd sizes and
 * tails, every implementation this CPU runs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <dirent.h>

#include "kernels/kernels.h"
#include "core/util.h"
#include "core/switches.h"
#include "core/rng.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_internal.h"
#endif

/* The tables under test; each is compared against nf_kernels_ref. */
static const struct nf_kernels *const tables_under_test[] = {
    &nf_kernels_blas,
};
#define N_TABLES (sizeof tables_under_test / sizeof tables_under_test[0])

/* cmocka 1.1 compares only floats (assert_float_equal); moments are doubles. */
#define assert_close(got, want, tolerance)                                          \
    do {                                                                            \
        double got_ = (got), want_ = (want), tolerance_ = (tolerance);              \
        if (!(fabs(got_ - want_) <= tolerance_))                                    \
            fail_msg("%s = %.17g, want %.17g (tolerance %g)", #got, got_, want_,    \
                     tolerance_);                                                   \
    } while (0)

/* Written into padding; a kernel must never touch it. */
static const float PAD_SENTINEL = -12345.5f;

/* A deterministic generator so failures reproduce (xorshift64*). */
static uint64_t rng_state;

static void rng_seed(uint64_t seed)
{
    rng_state = seed ? seed : 0x9E3779B97F4A7C15ull;
}

/* Uniform in [-1, 1). */
static float rng_uniform(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    uint64_t bits = (rng_state * 0x2545F4914F6CDD1Dull) >> 40;   /* 24 bits */
    return (float)bits / (float)(1u << 23) - 1.0f;
}

/* A rows×cols matrix with leading dimension ld: random inside, sentinel in the pad. */
static float *random_matrix(int64_t rows, int64_t cols, int64_t ld)
{
    size_t count = (size_t)(rows * ld);
    float *M = test_malloc((count ? count : 1) * sizeof *M);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++)
            M[i * ld + j] = j < cols ? rng_uniform() : PAD_SENTINEL;
    return M;
}

static float *copy_floats(const float *src, size_t count)
{
    float *dst = test_malloc((count ? count : 1) * sizeof *dst);
    memcpy(dst, src, count * sizeof *dst);
    return dst;
}

/* ---- sgemm ---------------------------------------------------------------- */

struct gemm_case {
    int64_t m, n, k;
    float alpha, beta;
};

static void check_sgemm_case(const struct nf_kernels *table, bool ta, bool tb,
                             struct gemm_case c)
{
    /* Stored shapes: op(A) is m×k, so A is k×m when transposed; likewise B. */
    int64_t a_rows = ta ? c.k : c.m, a_cols = ta ? c.m : c.k;
    int64_t b_rows = tb ? c.n : c.k, b_cols = tb ? c.k : c.n;
    int64_t lda = a_cols + 3, ldb = b_cols + 5, ldc = c.n + 2;

    float *A = random_matrix(a_rows, a_cols, lda);
    float *B = random_matrix(b_rows, b_cols, ldb);
    float *C_ref = random_matrix(c.m, c.n, ldc);
    float *C_got = copy_floats(C_ref, (size_t)(c.m * ldc));

    nf_kernels_ref.sgemm(ta, tb, c.m, c.n, c.k, c.alpha, A, lda, B, ldb, c.beta, C_ref, ldc);
    table->sgemm(ta, tb, c.m, c.n, c.k, c.alpha, A, lda, B, ldb, c.beta, C_got, ldc);

    double max_abs = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < c.m; i++) {
        for (int64_t j = 0; j < c.n; j++) {
            double want = C_ref[i * ldc + j], got = C_got[i * ldc + j];
            assert_true(isfinite(got));
            if (fabs(want) > max_abs)
                max_abs = fabs(want);
            if (fabs(want - got) > max_diff)
                max_diff = fabs(want - got);
        }
        for (int64_t j = c.n; j < ldc; j++)
            assert_true(C_got[i * ldc + j] == PAD_SENTINEL);
    }
    if (max_diff > 1e-5 * max_abs + 1e-30)
        fail_msg("%s sgemm ta=%d tb=%d m=%lld n=%lld k=%lld: max |diff| %g > 1e-5 * max |C| %g",
                 table->name, ta, tb, (long long)c.m, (long long)c.n, (long long)c.k,
                 max_diff, max_abs);

    test_free(A);
    test_free(B);
    test_free(C_ref);
    test_free(C_got);
}

static void test_sgemm_matches_reference(void **state)
{
    (void)state;
    static const struct gemm_case cases[] = {
        {37, 53, 29, 0.75f, -0.5f},
        {1, 53, 29, 1.25f, 0.25f},     /* m = 1: a row vector times a matrix */
        {37, 1, 29, -1.5f, 2.0f},      /* n = 1: matrix times vector */
        {37, 53, 1, 0.5f, 1.0f},       /* k = 1: an outer product */
        {1, 1, 1, 3.0f, -1.0f},
        {129, 67, 257, 1.0f, 0.0f},    /* past OpenBLAS blocking thresholds */
    };
    rng_seed(42);
    for (size_t t = 0; t < N_TABLES; t++)
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    check_sgemm_case(tables_under_test[t], ta, tb, cases[i]);
}

/* Pins the oracle: [1 2 3; 4 5 6] * [7 8; 9 10; 11 12] = [58 64; 139 154]. */
static void test_sgemm_reference_closed_form(void **state)
{
    (void)state;
    const float A[] = {1, 2, 3, 4, 5, 6};
    const float B[] = {7, 8, 9, 10, 11, 12};
    const float At[] = {1, 4, 2, 5, 3, 6};        /* A stored transposed */
    const float Bt[] = {7, 9, 11, 8, 10, 12};     /* B stored transposed */
    const float want[] = {2 * 58 - 1, 2 * 64 - 2, 2 * 139 - 3, 2 * 154 - 4};
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];

    for (size_t t = 0; t < N_TABLES + 1; t++) {
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                float C[] = {1, 2, 3, 4};
                all[t]->sgemm(ta, tb, 2, 2, 3, 2.0f, ta ? At : A, ta ? 2 : 3,
                              tb ? Bt : B, tb ? 3 : 2, -1.0f, C, 2);
                for (int i = 0; i < 4; i++)
                    if (C[i] != want[i])
                        fail_msg("%s ta=%d tb=%d: C[%d] = %g, want %g", all[t]->name, ta, tb,
                                 i, (double)C[i], (double)want[i]);
            }
        }
    }
}

/* k = 0 scales C by beta; beta = 0 overwrites C even when it holds NaN; m = 0 is a no-op. */
static void test_sgemm_edges(void **state)
{
    (void)state;
    const float A[] = {1}, B[] = {1};
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];

    for (size_t t = 0; t < N_TABLES + 1; t++) {
        float C[] = {1, 2, 3, 4};
        all[t]->sgemm(false, false, 2, 2, 0, 1.0f, A, 1, B, 2, 0.5f, C, 2);
        assert_true(C[0] == 0.5f && C[1] == 1.0f && C[2] == 1.5f && C[3] == 2.0f);

        float C_nan[] = {NAN, NAN, NAN, NAN};
        const float A2[] = {1, 2, 3, 4}, B2[] = {1, 0, 0, 1};
        all[t]->sgemm(false, false, 2, 2, 2, 1.0f, A2, 2, B2, 2, 0.0f, C_nan, 2);
        for (int i = 0; i < 4; i++)
            assert_true(C_nan[i] == A2[i]);

        float C_keep[] = {7};
        all[t]->sgemm(false, false, 0, 1, 1, 1.0f, A, 1, B, 1, 0.0f, C_keep, 1);
        assert_true(C_keep[0] == 7.0f);
    }
}

/* ---- col_moments ---------------------------------------------------------- */

/* Columns with known moments, rows even:
 *   0: 1000 ± 2 alternating   -> mean 1000, std 2 (large mean, small spread)
 *   1: constant 3.25          -> mean 3.25, std exactly 0
 *   2: 0, 1, ..., rows-1      -> mean (rows-1)/2, std sqrt((rows^2 - 1) / 12)
 *   3: random                 -> compared with the reference only */
enum { KNOWN_ROWS = 1000, KNOWN_COLS = 4 };

static float *known_moments_matrix(void)
{
    float *X = test_malloc(KNOWN_ROWS * KNOWN_COLS * sizeof *X);
    for (int i = 0; i < KNOWN_ROWS; i++) {
        X[i * KNOWN_COLS + 0] = (i % 2) ? 1002.0f : 998.0f;
        X[i * KNOWN_COLS + 1] = 3.25f;
        X[i * KNOWN_COLS + 2] = (float)i;
        X[i * KNOWN_COLS + 3] = 5.0f + rng_uniform();
    }
    return X;
}

static void test_col_moments_closed_form(void **state)
{
    (void)state;
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];
    rng_seed(7);
    float *X = known_moments_matrix();

    for (size_t t = 0; t < N_TABLES + 1; t++) {
        double mean[KNOWN_COLS], std[KNOWN_COLS];
        all[t]->col_moments(X, KNOWN_ROWS, KNOWN_COLS, mean, std);
        assert_close(mean[0], 1000.0, 1e-9);
        assert_close(std[0], 2.0, 1e-9);
        assert_true(mean[1] == 3.25);
        assert_true(std[1] == 0.0);
        assert_close(mean[2], (KNOWN_ROWS - 1) / 2.0, 1e-9);
        assert_close(std[2], sqrt((KNOWN_ROWS * (double)KNOWN_ROWS - 1) / 12.0), 1e-9);
    }
    test_free(X);
}

static void test_col_moments_matches_reference(void **state)
{
    (void)state;
    enum { rows = 101, cols = 67 };
    rng_seed(11);
    float *X = random_matrix(rows, cols, cols);
    /* BOLD-like columns: a large offset per column over a small signal. */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            X[i * cols + j] = 100.0f * (float)j + X[i * cols + j];

    double mean_ref[cols], std_ref[cols], mean_got[cols], std_got[cols];
    nf_kernels_ref.col_moments(X, rows, cols, mean_ref, std_ref);
    for (size_t t = 0; t < N_TABLES; t++) {
        tables_under_test[t]->col_moments(X, rows, cols, mean_got, std_got);
        for (int64_t j = 0; j < cols; j++) {
            assert_close(mean_got[j], mean_ref[j], 1e-12 * (1.0 + fabs(mean_ref[j])));
            assert_close(std_got[j], std_ref[j], 1e-12 * (1.0 + std_ref[j]));
        }
    }
    test_free(X);
}

/* ---- standardize ---------------------------------------------------------- */

/* Wider than the BLAS table's column block (512), with a constant column in the
 * second block, so block edges are crossed. */
enum { STD_ROWS = 53, STD_COLS = 1031, CONSTANT_COL = 700 };

static float *standardize_input(void)
{
    float *X = random_matrix(STD_ROWS, STD_COLS, STD_COLS);
    for (int64_t i = 0; i < STD_ROWS; i++) {
        for (int64_t j = 0; j < STD_COLS; j++)
            X[i * STD_COLS + j] = 50.0f + (float)(j % 7) * X[i * STD_COLS + j];
        X[i * STD_COLS + CONSTANT_COL] = 42.0f;
    }
    return X;
}

static void check_standardize_mode(enum nf_standardize mode)
{
    const size_t count = (size_t)STD_ROWS * STD_COLS;
    rng_seed(123 + (uint64_t)mode);
    float *original = standardize_input();
    float *want = copy_floats(original, count);
    nf_kernels_ref.standardize(want, STD_ROWS, STD_COLS, mode);

    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];

    for (size_t t = 0; t < N_TABLES + 1; t++) {
        float *got = copy_floats(original, count);
        all[t]->standardize(got, STD_ROWS, STD_COLS, mode);
        for (size_t e = 0; e < count; e++) {
            assert_true(isfinite(got[e]));
            assert_close(got[e], want[e], 1e-5f * (1.0f + fabsf(want[e])));
        }
        /* The constant column: 0 after zscore or center (std 0 divides by 1). */
        for (int64_t i = 0; i < STD_ROWS; i++)
            assert_true(got[i * STD_COLS + CONSTANT_COL] == 0.0f);

        /* Pin the meaning, not just the agreement: mean 0, and std 1 (zscore) or
         * unchanged (center) on the other columns. */
        double *mean = test_malloc(STD_COLS * sizeof *mean);
        double *std = test_malloc(STD_COLS * sizeof *std);
        double *std_before = test_malloc(STD_COLS * sizeof *std_before);
        nf_kernels_ref.col_moments(original, STD_ROWS, STD_COLS, mean, std_before);
        nf_kernels_ref.col_moments(got, STD_ROWS, STD_COLS, mean, std);
        for (int64_t j = 0; j < STD_COLS; j++) {
            assert_close(mean[j], 0.0, 1e-5);
            if (j == CONSTANT_COL || std_before[j] == 0.0)
                continue;
            double expected_std = mode == NF_STD_ZSCORE ? 1.0 : std_before[j];
            assert_close(std[j], expected_std, 1e-4 * expected_std);
        }
        test_free(mean);
        test_free(std);
        test_free(std_before);
        test_free(got);
    }
    test_free(original);
    test_free(want);
}

static void test_standardize_zscore(void **state)
{
    (void)state;
    check_standardize_mode(NF_STD_ZSCORE);
}

static void test_standardize_center(void **state)
{
    (void)state;
    check_standardize_mode(NF_STD_CENTER);
}

static void test_standardize_none_is_noop(void **state)
{
    (void)state;
    rng_seed(5);
    float *X = random_matrix(9, 13, 13);
    float *before = copy_floats(X, 9 * 13);
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];
    for (size_t t = 0; t < N_TABLES + 1; t++) {
        all[t]->standardize(X, 9, 13, NF_STD_NONE);
        assert_memory_equal(X, before, 9 * 13 * sizeof *X);
    }
    test_free(X);
    test_free(before);
}

/* ---- svd ------------------------------------------------------------------ */

/* Tolerances: the reference works in double and only rounds its results to
 * float; LAPACK's sgesdd works in float throughout. */
static double svd_tolerance(const struct nf_kernels *table)
{
    return table == &nf_kernels_ref ? 1e-5 : 1e-4;
}

/* Largest |M^T M - I| over the c x c Gram matrix of the c columns of the row-major
 * n x ld matrix M (column stride 1, row stride ld), accumulated in double. */
static double orthonormal_columns_error(const float *M, int64_t n, int64_t c, int64_t ld)
{
    double worst = 0.0;
    for (int64_t a = 0; a < c; a++) {
        for (int64_t b = 0; b < c; b++) {
            double dot = 0.0;
            for (int64_t i = 0; i < n; i++)
                dot += (double)M[i * ld + a] * (double)M[i * ld + b];
            worst = fmax(worst, fabs(dot - (a == b ? 1.0 : 0.0)));
        }
    }
    return worst;
}

/* Same for the rows of a row-major c x n matrix: its transpose's columns. */
static double orthonormal_rows_error(const float *M, int64_t c, int64_t n)
{
    double worst = 0.0;
    for (int64_t a = 0; a < c; a++) {
        for (int64_t b = 0; b < c; b++) {
            double dot = 0.0;
            for (int64_t j = 0; j < n; j++)
                dot += (double)M[a * n + j] * (double)M[b * n + j];
            worst = fmax(worst, fabs(dot - (a == b ? 1.0 : 0.0)));
        }
    }
    return worst;
}

/* Runs table->svd on A and checks what defines an SVD: U^T U = I, Vt Vt^T = I,
 * s descending and >= 0, A = U diag(s) Vt, and A left untouched. Returns s
 * (test_malloc'ed, r values) for comparison across tables. */
static float *check_svd_properties(const struct nf_kernels *table, const float *A,
                                   int64_t rows, int64_t cols, const char *label)
{
    int64_t r = rows < cols ? rows : cols;
    float *before = copy_floats(A, (size_t)(rows * cols));
    float *U = test_malloc((size_t)(rows * r) * sizeof *U);
    float *s = test_malloc((size_t)r * sizeof *s);
    float *Vt = test_malloc((size_t)(r * cols) * sizeof *Vt);
    double tolerance = svd_tolerance(table);

    int rc = table->svd(A, rows, cols, U, s, Vt);
    if (rc != 0)
        fail_msg("%s svd %s (%lldx%lld): returned %d", table->name, label, (long long)rows,
                 (long long)cols, rc);
    assert_memory_equal(A, before, (size_t)(rows * cols) * sizeof *A);

    double u_error = orthonormal_columns_error(U, rows, r, r);
    double v_error = orthonormal_rows_error(Vt, r, cols);
    if (u_error > tolerance || v_error > tolerance)
        fail_msg("%s svd %s: |U^T U - I| = %g, |Vt Vt^T - I| = %g (tolerance %g)",
                 table->name, label, u_error, v_error, tolerance);
    for (int64_t q = 0; q < r; q++) {
        assert_true(isfinite(s[q]) && s[q] >= 0.0f);
        if (q > 0 && s[q] > s[q - 1])
            fail_msg("%s svd %s: s[%lld] = %g > s[%lld] = %g", table->name, label,
                     (long long)q, (double)s[q], (long long)q - 1, (double)s[q - 1]);
    }

    double max_abs = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < cols; j++) {
            double sum = 0.0;
            for (int64_t q = 0; q < r; q++)
                sum += (double)U[i * r + q] * (double)s[q] * (double)Vt[q * cols + j];
            max_abs = fmax(max_abs, fabs((double)A[i * cols + j]));
            max_diff = fmax(max_diff, fabs(sum - (double)A[i * cols + j]));
        }
    }
    if (max_diff > tolerance * max_abs + 1e-30)
        fail_msg("%s svd %s: max |U S Vt - A| = %g > %g * max |A| = %g", table->name, label,
                 max_diff, tolerance, max_abs);

    test_free(before);
    test_free(U);
    test_free(Vt);
    return s;
}

/* Every table on one matrix; the singular values must agree with the reference
 * within 1e-4 of the largest. */
static void check_svd_all_tables(const float *A, int64_t rows, int64_t cols, const char *label)
{
    int64_t r = rows < cols ? rows : cols;
    float *s_ref = check_svd_properties(&nf_kernels_ref, A, rows, cols, label);
    for (size_t t = 0; t < N_TABLES; t++) {
        float *s_got = check_svd_properties(tables_under_test[t], A, rows, cols, label);
        double scale = r > 0 ? fmax((double)s_ref[0], 1e-30) : 1.0;
        for (int64_t q = 0; q < r; q++)
            if (fabs((double)s_got[q] - (double)s_ref[q]) > 1e-4 * scale)
                fail_msg("%s svd %s: s[%lld] = %.9g, reference %.9g", tables_under_test[t]->name,
                         label, (long long)q, (double)s_got[q], (double)s_ref[q]);
        test_free(s_got);
    }
    test_free(s_ref);
}

static void check_svd_random(int64_t rows, int64_t cols, const char *label)
{
    float *A = random_matrix(rows, cols, cols);
    check_svd_all_tables(A, rows, cols, label);
    test_free(A);
}

static void test_svd_shapes(void **state)
{
    (void)state;
    rng_seed(2024);
    check_svd_random(200, 13, "tall");
    check_svd_random(7, 40, "wide");
    check_svd_random(25, 25, "square");
    check_svd_random(1, 17, "1xN");
    check_svd_random(23, 1, "Nx1");
    check_svd_random(1, 1, "1x1");
}

/* Duplicate columns (tall) and duplicate rows (wide) make A rank-deficient: the
 * zero singular values must come out (near) 0 and their vectors still orthonormal. */
static void test_svd_rank_deficient(void **state)
{
    (void)state;
    rng_seed(99);
    enum { TALL_ROWS = 50, TALL_COLS = 8, WIDE_ROWS = 6, WIDE_COLS = 30 };
    float *tall = random_matrix(TALL_ROWS, TALL_COLS, TALL_COLS);
    for (int64_t i = 0; i < TALL_ROWS; i++) {
        tall[i * TALL_COLS + 5] = tall[i * TALL_COLS + 2];
        tall[i * TALL_COLS + 7] = tall[i * TALL_COLS + 2];
    }
    check_svd_all_tables(tall, TALL_ROWS, TALL_COLS, "duplicate columns");

    float *wide = random_matrix(WIDE_ROWS, WIDE_COLS, WIDE_COLS);
    memcpy(wide + 4 * WIDE_COLS, wide + 1 * WIDE_COLS, WIDE_COLS * sizeof *wide);
    check_svd_all_tables(wide, WIDE_ROWS, WIDE_COLS, "duplicate rows");

    /* Rank 2 of 8, so two singular values only; the rest are 0 to precision. */
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];
    for (size_t t = 0; t < N_TABLES + 1; t++) {
        float *s = check_svd_properties(all[t], tall, TALL_ROWS, TALL_COLS, "duplicate columns");
        for (int q = TALL_COLS - 2; q < TALL_COLS; q++)
            assert_true(s[q] <= 1e-5f * s[0]);
        test_free(s);
    }

    float zero[3 * 4] = {0};
    check_svd_all_tables(zero, 3, 4, "zero matrix");
    test_free(tall);
    test_free(wide);
}

/* Pins the oracle: [[3, 0], [4, 5]] has singular values sqrt(45) and sqrt(5). */
static void test_svd_reference_closed_form(void **state)
{
    (void)state;
    const float A[] = {3, 0, 4, 5};
    float U[4], s[2], Vt[4];
    assert_int_equal(nf_kernels_ref.svd(A, 2, 2, U, s, Vt), 0);
    assert_close(s[0], sqrt(45.0), 1e-6);
    assert_close(s[1], sqrt(5.0), 1e-6);
    /* Empty matrices: nothing to do, nothing touched. */
    float untouched = 7.0f;
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];
    for (size_t t = 0; t < N_TABLES + 1; t++) {
        assert_int_equal(all[t]->svd(A, 0, 5, &untouched, &untouched, &untouched), 0);
        assert_int_equal(all[t]->svd(A, 5, 0, &untouched, &untouched, &untouched), 0);
        assert_true(untouched == 7.0f);
    }
}

static void test_svd_rejects_non_finite(void **state)
{
    (void)state;
    const struct nf_kernels *all[N_TABLES + 1] = {&nf_kernels_ref};
    for (size_t t = 0; t < N_TABLES; t++)
        all[t + 1] = tables_under_test[t];
    const float bad_values[] = {NAN, INFINITY, -INFINITY};
    for (size_t t = 0; t < N_TABLES + 1; t++) {
        for (size_t b = 0; b < sizeof bad_values / sizeof bad_values[0]; b++) {
            float A[4 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
            A[7] = bad_values[b];
            float U[4 * 3], s[3], Vt[3 * 3];
            assert_int_equal(all[t]->svd(A, 4, 3, U, s, Vt), NF_EDATA);
            assert_int_equal(all[t]->svd(A, 3, 4, U, s, Vt), NF_EDATA);
        }
    }
}

/* ---- perm_tile ------------------------------------------------------------ */

/* A tile problem: data, per-voxel constants, and the observed statistic of
 * each voxel taken from row 0 of R, so that row 0 ties with it exactly and
 * the tie path (lo < q < hi, decided in double) is taken. */
struct tile_case {
    int64_t n, V, rows, v0, nv;
};
struct tile_problem {
    struct nf_perm_tile t;
    float *D, *R, *consts;
    double *q_obs_d;
    int64_t tie_calls;
};

/* The transformed statistic in double (what the node's nf_perm_q_double does). */
static double tile_q_double(const struct nf_perm_tile *t, const float *row, int64_t v)
{
    double g = 0;
    for (int64_t j = 0; j < t->n; j++)
        g += (double)row[j] * (double)t->D[j * t->V + v];
    double d = (double)t->a * g - t->shift[v], ad = fabs(d);
    double q = t->tail == NF_TAIL_TWO ? ad : t->tail == NF_TAIL_UPPER ? d : -d;
    if (t->t_stat) {
        double den = t->ss[v] - (double)t->c * d * d;
        q = q * ad / (den > t->floor_[v] ? den : t->floor_[v]);
    }
    return q < t->cap[v] ? q : t->cap[v];
}

static bool tile_tie_exceeds(const void *ctx, const float *row, int64_t v)
{
    struct tile_problem *p = (struct tile_problem *)ctx;
    p->tie_calls++;
    return tile_q_double(&p->t, row, v) >= p->q_obs_d[v];
}

/* Kinds of rows of R: any values (correlation), sign flips (one-sample), two
 * group weights (two-sample): the last two take the fused tables' path. */
enum tile_rows { ROWS_ANY, ROWS_SIGNS, ROWS_GROUPS };

static void tile_problem_make(struct tile_problem *p, struct tile_case tc, bool t_stat, int tail,
                              enum tile_rows kind)
{
    const int64_t n = tc.n, V = tc.V;
    memset(p, 0, sizeof *p);
    p->D = random_matrix(n, V, V);
    p->R = random_matrix(tc.rows, n, n);
    for (int64_t i = 0; kind != ROWS_ANY && i < tc.rows * n; i++)
        p->R[i] = kind == ROWS_SIGNS ? (p->R[i] < 0 ? -1.0f : 1.0f) : p->R[i] < 0 ? 1.0f / 3.0f : -0.2f;
    p->consts = test_malloc((size_t)(6 * V) * sizeof *p->consts);
    p->q_obs_d = test_malloc((size_t)V * sizeof *p->q_obs_d);
    float *shift = p->consts, *ss = shift + V, *fl = ss + V, *cap = fl + V, *lo = cap + V, *hi = lo + V;
    p->t = (struct nf_perm_tile){ .n = n, .V = V, .D = p->D, .shift = shift, .ss = ss, .floor_ = fl, .cap = cap,
                                  .lo = lo, .hi = hi, .a = 1.25f, .c = 0.5f / (float)n, .t_stat = t_stat,
                                  .tail = tail, .K = nf_kernels_cpu(), .tie_exceeds = tile_tie_exceeds,
                                  .tie_ctx = p };
    for (int64_t v = 0; v < V; v++) {
        shift[v] = 0.25f * rng_uniform();
        ss[v] = (float)n * (0.75f + 0.25f * rng_uniform());
        fl[v] = 1e-3f;
        /* a few voxels capped (as after a zero-variance voxel: -FLT_MAX), a few at a finite cap */
        cap[v] = v % 17 == 5 ? -FLT_MAX : v % 13 == 3 ? 0.25f : FLT_MAX;
    }
    for (int64_t v = 0; v < V; v++) {
        double q = tile_q_double(&p->t, p->R, v);
        p->q_obs_d[v] = q;
        double window = 1e-3 * (1.0 + fabs(q));
        lo[v] = cap[v] == -FLT_MAX ? FLT_MAX : (float)(q - window);
        hi[v] = cap[v] == -FLT_MAX ? FLT_MAX : (float)(q + window);
    }
}

static void tile_problem_free(struct tile_problem *p)
{
    test_free(p->D);
    test_free(p->R);
    test_free(p->consts);
    test_free(p->q_obs_d);
}

/* Every implementation of perm_tile this CPU runs (the GEMM one, fused AVX2
 * and AVX-512, the fused ones with and without tables of partial sums)
 * against nf_perm_tile_ref: the same counts, bit for bit (a value within
 * round-off of the observed one is decided in double), row maxima within
 * round-off. Rows of any values, of signs and of two group weights. Shapes
 * with odd sizes: rows that do not fill a register block (4, 6 or 8) or a
 * GEMM block (255), voxel strips that do not fill 2 vectors, a tile that
 * starts inside D, single rows and voxels, subjects that do not fill a table
 * group (4), groups over several passes (13 per pass with AVX-512, 26 with
 * AVX2; 53 subjects: one group in the last), the most groups tables take
 * (255) and one more; counts start non-zero (they accumulate). */
static void test_perm_tile_matches_reference(void **state)
{
    (void)state;
    const struct tile_case cases[] = {
        { 7, 83, 13, 0, 83 },       { 30, 600, 50, 37, 512 }, { 1, 1, 1, 0, 1 },      { 12, 40, 300, 3, 37 },
        { 40, 97, 8, 0, 97 },       { 5, 33, 6, 1, 32 },      { 19, 260, 31, 0, 260 }, { 50, 700, 203, 5, 640 },
        { 256, 70, 9, 2, 64 },      { 53, 100, 12, 0, 96 },   { 1020, 40, 6, 0, 40 },  { 1021, 40, 5, 0, 33 },
    };
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    rng_seed(314);
    int64_t fused_runs = 0, table_calls = nf_perm_tile_table_calls();
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int t_stat = 0; t_stat < 2; t_stat++)
            for (int tail = NF_TAIL_TWO; tail <= NF_TAIL_LOWER; tail++)
            for (int kind = ROWS_ANY; kind <= ROWS_GROUPS; kind++) {
                struct tile_case tc = cases[ci];
                struct tile_problem p;
                tile_problem_make(&p, tc, t_stat, tail, (enum tile_rows)kind);
                uint32_t *cnt0 = test_malloc((size_t)tc.nv * sizeof *cnt0);
                uint32_t *want = test_malloc((size_t)tc.nv * sizeof *want);
                uint32_t *got = test_malloc((size_t)tc.nv * sizeof *got);
                float *max_want = test_malloc((size_t)tc.rows * sizeof *max_want);
                float *max_got = test_malloc((size_t)tc.rows * sizeof *max_got);
                float *scratch = test_malloc(nf_perm_tile_scratch(tc.rows, tc.n, tc.nv) * sizeof *scratch);
                for (int64_t v = 0; v < tc.nv; v++)
                    cnt0[v] = (uint32_t)(v % 3);
                memcpy(want, cnt0, (size_t)tc.nv * sizeof *want);
                nf_perm_tile_ref(&p.t, p.R, tc.rows, tc.v0, tc.nv, want, max_want, scratch);
                /* row 0 ties with the observed value at every uncapped voxel */
                assert_true(p.tie_calls > 0);
                for (size_t ti = 0; ti < sizeof tables / sizeof tables[0]; ti++)
                    for (int impl = NF_PERM_TILE_GEMM; impl <= NF_PERM_TILE_AVX512; impl++)
                    for (int use_tables = 0; use_tables < 2; use_tables++) {
                        if (!nf_perm_tile_available((enum nf_perm_tile_impl)impl))
                            continue;
                        fused_runs += impl != NF_PERM_TILE_GEMM;
                        p.t.impl = (enum nf_perm_tile_impl)impl;
                        p.t.tables = use_tables;
                        memcpy(got, cnt0, (size_t)tc.nv * sizeof *got);
                        tables[ti]->perm_tile_prepare(&p.t, p.R, tc.rows, scratch);
                        tables[ti]->perm_tile(&p.t, p.R, tc.rows, tc.v0, tc.nv, got, max_got, scratch);
                        for (int64_t v = 0; v < tc.nv; v++)
                            if (got[v] != want[v])
                                fail_msg("%s impl %d tables %d, case %zu (t %d, tail %d, rows %d): count[%lld] = "
                                         "%u, want %u",
                                         tables[ti]->name, impl, use_tables, ci, t_stat, tail, kind, (long long)v,
                                         got[v], want[v]);
                        for (int64_t i = 0; i < tc.rows; i++)
                            assert_close(max_got[i], max_want[i], 1e-4 * (1.0 + fabs(max_want[i])));
                    }
                test_free(cnt0);
                test_free(want);
                test_free(got);
                test_free(max_want);
                test_free(max_got);
                test_free(scratch);
                tile_problem_free(&p);
            }
    if (nf_perm_tile_best() != NF_PERM_TILE_GEMM) {
        assert_true(fused_runs > 0);
        assert_true(nf_perm_tile_table_calls() > table_calls);
    }
}

/* With tables, a row's values do not depend on the rows it comes with (the
 * permute node's chunk size must not change its null maxima): each row's
 * maximum alone equals, bit for bit, its maximum among 13 (a 4-row block
 * and a remainder), and the counts add up; 53 subjects (two passes). */
static void test_perm_tile_rows_independent(void **state)
{
    (void)state;
    const struct tile_case tc = { 53, 100, 13, 4, 96 };
    rng_seed(99);
    for (int impl = NF_PERM_TILE_AVX2; impl <= NF_PERM_TILE_AVX512; impl++) {
        if (!nf_perm_tile_available((enum nf_perm_tile_impl)impl))
            continue;
        struct tile_problem p;
        tile_problem_make(&p, tc, true, NF_TAIL_TWO, ROWS_SIGNS);
        p.t.impl = (enum nf_perm_tile_impl)impl;
        p.t.tables = true;
        float *scratch = test_malloc(nf_perm_tile_scratch(tc.rows, tc.n, tc.nv) * sizeof *scratch);
        uint32_t *all = test_calloc((size_t)tc.nv, sizeof *all), *one = test_calloc((size_t)tc.nv, sizeof *one);
        float max_all[13], max_one;
        int64_t calls = nf_perm_tile_table_calls();
        nf_kernels_blas.perm_tile_prepare(&p.t, p.R, tc.rows, scratch);
        nf_kernels_blas.perm_tile(&p.t, p.R, tc.rows, tc.v0, tc.nv, all, max_all, scratch);
        for (int64_t i = 0; i < tc.rows; i++) {
            nf_kernels_blas.perm_tile_prepare(&p.t, p.R + i * tc.n, 1, scratch);
            nf_kernels_blas.perm_tile(&p.t, p.R + i * tc.n, 1, tc.v0, tc.nv, one, &max_one, scratch);
            assert_memory_equal(&max_one, &max_all[i], sizeof max_one);
        }
        assert_memory_equal(one, all, (size_t)tc.nv * sizeof *all);
        assert_true(nf_perm_tile_table_calls() == calls + 1 + tc.rows);
        test_free(scratch);
        test_free(all);
        test_free(one);
        tile_problem_free(&p);
    }
}

/* The choice of implementation: the best by default, NLFLOW_PERM_TILE names
 * another this CPU runs, a test's force wins over both, and a name this CPU
 * cannot run (or an unknown one) gives the best. */
static void test_perm_tile_choice(void **state)
{
    (void)state;
    enum nf_perm_tile_impl best = nf_perm_tile_best();
    assert_true(nf_perm_tile_available(NF_PERM_TILE_GEMM));
    assert_true(nf_perm_tile_available(best));
    unsetenv("NLFLOW_PERM_TILE");
    nf_switches_reload();
    assert_int_equal(nf_perm_tile_choose(), best);
    setenv("NLFLOW_PERM_TILE", "reference", 1);
    nf_switches_reload();
    assert_int_equal(nf_perm_tile_choose(), NF_PERM_TILE_GEMM);
    setenv("NLFLOW_PERM_TILE", "gemm", 1);
    nf_switches_reload();
    assert_int_equal(nf_perm_tile_choose(), NF_PERM_TILE_GEMM);
    setenv("NLFLOW_PERM_TILE", "avx2", 1);
    nf_switches_reload();
    assert_int_equal(nf_perm_tile_choose(), nf_perm_tile_available(NF_PERM_TILE_AVX2) ? NF_PERM_TILE_AVX2 : best);
    setenv("NLFLOW_PERM_TILE", "avx512", 1);
    nf_switches_reload();
    assert_int_equal(nf_perm_tile_choose(), nf_perm_tile_available(NF_PERM_TILE_AVX512) ? NF_PERM_TILE_AVX512 : best);
    setenv("NLFLOW_PERM_TILE", "no-such-kernel", 1);
    nf_switches_reload();
    assert_int_equal(nf_perm_tile_choose(), best);
    setenv("NLFLOW_PERM_TILE", "reference", 1);
    nf_switches_reload();
    nf_perm_tile_force(best);
    assert_int_equal(nf_perm_tile_choose(), best);
    nf_perm_tile_force(-1);
    assert_int_equal(nf_perm_tile_choose(), NF_PERM_TILE_GEMM);
    unsetenv("NLFLOW_PERM_TILE");
    nf_switches_reload();
    /* scratch covers the GEMM implementation's block of a tile */
    assert_true(nf_perm_tile_scratch(1, 50, 512) >= (size_t)NF_PERM_TILE_SUB_ROWS * 512);
}

/* ---- ridge_error_sums ----------------------------------------------------- */

/* Every table against nf_ridge_error_sums_ref, bit for bit (the node relies on
 * the same bits on every CPU), on voxel counts around the vector width (8),
 * padded leading dimensions and ranks 1..20; the reference itself against a
 * direct sum. Outputs beyond nb must not be written. */
static void test_ridge_error_sums_matches_reference(void **state)
{
    (void)state;
    const int64_t nbs[] = { 1, 7, 8, 9, 17, 69 }, rs[] = { 1, 3, 20 };
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    rng_seed(2718);
    for (size_t a = 0; a < sizeof nbs / sizeof nbs[0]; a++)
        for (size_t b = 0; b < sizeof rs / sizeof rs[0]; b++) {
            const int64_t nb = nbs[a], r = rs[b], ld = nb + 3, ldt = nb + 5;
            float *U = random_matrix(r, nb, ld), *Z = random_matrix(r, nb, ld), *T = random_matrix(r, nb, ldt);
            double *dj = test_malloc((size_t)r * sizeof *dj), *pj = test_malloc((size_t)r * sizeof *pj);
            for (int64_t j = 0; j < r; j++) {
                dj[j] = 0.5 + rng_uniform();
                pj[j] = rng_uniform();
            }
            double *want = test_malloc((size_t)(3 * (nb + 1)) * sizeof *want);
            double *got = test_malloc((size_t)(3 * (nb + 1)) * sizeof *got);
            nf_ridge_error_sums_ref(r, nb, ld, U, Z, T, ldt, dj, pj, want, want + nb + 1, want + 2 * (nb + 1));
            for (int64_t v = 0; v < nb; v++) {
                double q = 0;
                for (int64_t j = 0; j < r; j++)
                    q += (double)U[j * ld + v] * (double)T[j * ldt + v];
                assert_close(want[v], q, 1e-12 * (1.0 + fabs(q)));
            }
            for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
                for (int64_t e = 0; e < 3 * (nb + 1); e++)
                    got[e] = -7.0;
                tables[t]->ridge_error_sums(r, nb, ld, U, Z, T, ldt, dj, pj, got, got + nb + 1, got + 2 * (nb + 1));
                for (int part = 0; part < 3; part++) {
                    for (int64_t v = 0; v < nb; v++)
                        if (memcmp(&got[part * (nb + 1) + v], &want[part * (nb + 1) + v], sizeof(double)) != 0)
                            fail_msg("%s: part %d voxel %lld (nb %lld, r %lld): %.17g, want %.17g", tables[t]->name,
                                     part, (long long)v, (long long)nb, (long long)r, got[part * (nb + 1) + v],
                                     want[part * (nb + 1) + v]);
                    assert_true(got[part * (nb + 1) + nb] == -7.0);
                }
            }
            test_free(U);
            test_free(Z);
            test_free(T);
            test_free(dj);
            test_free(pj);
            test_free(want);
            test_free(got);
        }
}

/* ---- row passes ----------------------------------------------------------- */

/* Whether two double arrays hold the same bits (n values), failing with the first difference. */
static void assert_same_doubles(const double *got, const double *want, int64_t n, const char *what, int64_t V)
{
    for (int64_t v = 0; v < n; v++)
        if (memcmp(&got[v], &want[v], sizeof(double)) != 0)
            fail_msg("%s (V = %lld): [%lld] = %.17g, want %.17g", what, (long long)V, (long long)v, got[v], want[v]);
}

/* Every table's row passes against the plain loops, bit for bit, on lengths
 * around the vector width (8) and the GEMV's block (1024), with values
 * beyond V that must not be touched; the plain loops against direct sums. */
static void test_row_passes_match_reference(void **state)
{
    (void)state;
    const int64_t lengths[] = { 1, 7, 8, 9, 23, 1024, 1031 };
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    rng_seed(1618);
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t V = lengths[li], n = 5, W = V + 1;   /* W: one value past the end */
        float *x = random_matrix(1, W, W), *D = random_matrix(n, V, V), *row = random_matrix(1, n, n);
        double *base = test_malloc((size_t)W * sizeof *base), *sum = test_malloc((size_t)W * sizeof *sum);
        double *m = test_malloc((size_t)W * sizeof *m), *sd = test_malloc((size_t)W * sizeof *sd);
        int64_t *keep = test_malloc((size_t)W * sizeof *keep);
        double *want = test_malloc((size_t)W * sizeof *want), *got = test_malloc((size_t)W * sizeof *got);
        double *want2 = test_malloc((size_t)W * sizeof *want2), *got2 = test_malloc((size_t)W * sizeof *got2);
        float *zw = test_malloc((size_t)W * sizeof *zw), *zg = test_malloc((size_t)W * sizeof *zg);
        for (int64_t v = 0; v < W; v++) {
            base[v] = 3.0 * rng_uniform();
            sum[v] = 10.0 * rng_uniform();
            m[v] = rng_uniform();
            sd[v] = 0.5 + rng_uniform() * rng_uniform();
            keep[v] = v % 5 == 2 ? 0 : -1;   /* some flat voxels */
        }
        for (int squared = 0; squared < 2; squared++) {
            memcpy(want, base, (size_t)W * sizeof *want);
            nf_row_accumulate_ref(want, x, V, squared);
            for (int64_t v = 0; v < V; v++)
                assert_true(want[v] == base[v] + (squared ? (double)x[v] * x[v] : (double)x[v]));
            for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
                memcpy(got, base, (size_t)W * sizeof *got);
                tables[t]->row_accumulate(got, x, V, squared);
                assert_same_doubles(got, want, W, squared ? "row_accumulate squared" : "row_accumulate", V);
            }
        }
        memcpy(want, base, (size_t)W * sizeof *want);
        nf_row_sq_dev_ref(want, sum, x, 7.0, V);
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            memcpy(got, base, (size_t)W * sizeof *got);
            tables[t]->row_sq_dev(got, sum, x, 7.0, V);
            assert_same_doubles(got, want, W, "row_sq_dev", V);
        }
        memcpy(want, base, (size_t)W * sizeof *want);
        zw[V] = PAD_SENTINEL;
        nf_row_standardize_ref(zw, want, x, m, sd, keep, 0.75, V);
        for (int64_t v = 0; v < V; v++)
            assert_true(keep[v] ? zw[v] == (float)((x[v] - m[v]) / sd[v]) : zw[v] == 0.0f);
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            memcpy(got, base, (size_t)W * sizeof *got);
            zg[V] = PAD_SENTINEL;
            tables[t]->row_standardize(zg, got, x, m, sd, keep, 0.75, V);
            assert_same_doubles(got, want, W, "row_standardize cross", V);
            assert_memory_equal(zg, zw, (size_t)W * sizeof *zg);
            /* in place, as the node calls it for a copy it owns */
            float *xz = copy_floats(x, (size_t)W);
            memcpy(got, base, (size_t)W * sizeof *got);
            tables[t]->row_standardize(xz, got, xz, m, sd, keep, 0.75, V);
            assert_memory_equal(xz, zw, (size_t)V * sizeof *xz);
            test_free(xz);
        }
        want2[V] = got2[V] = -7.0;
        nf_row_gemv_double_ref(row, D, n, V, want2);
        for (int64_t v = 0; v < V; v++) {
            double g = 0;
            for (int64_t j = 0; j < n; j++)
                g += (double)row[j] * D[j * V + v];
            assert_true(want2[v] == g);
        }
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            for (int64_t v = 0; v < V; v++)
                got2[v] = NAN;
            tables[t]->row_gemv_double(row, D, n, V, got2);
            assert_same_doubles(got2, want2, W, "row_gemv_double", V);
        }
        /* the glm test's row_axpy and row_residual (nz = 3 rows of B, q every 2nd of qv) */
        const double qv[6] = { 0.5, -9.0, -1.25, 9.0, 0.375, -9.0 };
        double *B = test_malloc((size_t)(3 * W) * sizeof *B);
        for (int64_t i = 0; i < 3 * W; i++)
            B[i] = 2.0 * rng_uniform() - 1.0;
        memcpy(want, base, (size_t)W * sizeof *want);
        nf_row_axpy_ref(want, -0.3, x, V);
        for (int64_t v = 0; v < V; v++)
            assert_true(want[v] == base[v] + -0.3 * (double)x[v]);
        memcpy(want2, base, (size_t)W * sizeof *want2);
        zw[V] = PAD_SENTINEL;
        nf_row_residual_ref(x, B, qv, 2, 3, W, V, zw, want2);
        for (int64_t v = 0; v < V; v++) {
            double e = (double)x[v] - 0.5 * B[v] - -1.25 * B[W + v] - 0.375 * B[2 * W + v];
            assert_true(zw[v] == (float)e);
            assert_true(want2[v] == base[v] + (double)(float)e * (double)(float)e);
        }
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            memcpy(got, base, (size_t)W * sizeof *got);
            tables[t]->row_axpy(got, -0.3, x, V);
            assert_same_doubles(got, want, W, "row_axpy", V);
            memcpy(got2, base, (size_t)W * sizeof *got2);
            zg[V] = PAD_SENTINEL;
            tables[t]->row_residual(x, B, qv, 2, 3, W, V, zg, got2);
            assert_same_doubles(got2, want2, W, "row_residual ss", V);
            assert_memory_equal(zg, zw, (size_t)W * sizeof *zg);
        }
        test_free(B);
        test_free(x);
        test_free(D);
        test_free(row);
        test_free(base);
        test_free(sum);
        test_free(m);
        test_free(sd);
        test_free(keep);
        test_free(want);
        test_free(got);
        test_free(want2);
        test_free(got2);
        test_free(zw);
        test_free(zg);
    }
}

/* ---- the glm test's epilogue ------------------------------------------------ */

static int cmp_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* A glm kernel's maxima (np + 1 with the pad), counts (nv + 1 with the pad),
 * and near list (as a set: ng is sorted here; nw is sorted) equal the
 * reference's. */
static void assert_same_glm_decisions(const float *mg, const float *mw, int64_t np, const uint32_t *cg,
                                      const uint32_t *cw, int64_t nv, int32_t *ng, int n_g, const int32_t *nw,
                                      int n_w)
{
    assert_memory_equal(mg, mw, (size_t)(np + 1) * sizeof *mg);
    assert_memory_equal(cg, cw, (size_t)(nv + 1) * sizeof *cg);
    assert_int_equal(n_g, n_w);
    qsort(ng, (size_t)n_g, sizeof *ng, cmp_int32);
    if (n_w)
        assert_memory_equal(ng, nw, (size_t)n_w * sizeof *ng);
}

/* Every table's glm_epilogue against the plain loop, bit for bit (q, the
 * maxima, counts, the near list as a set), for t contrasts of 1..5 rows in
 * each tail and F contrasts of 1..2 rows, 1..9 permutations (around the
 * vector version's groups of 2), block lengths around the 8-wide vectors
 * and the 64-voxel near scan, counting or not, with flat voxels (cap
 * -FLT_MAX), RSS floors that bind, and windows placed on some values; the
 * plain loop against q computed here in double (within float round-off),
 * and nothing written past the values. */
static void test_glm_epilogue_matches_reference(void **state)
{
    (void)state;
    const int64_t lengths[] = { 1, 7, 8, 9, 63, 64, 65, 130, 256 };
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    const struct { int64_t r, s; bool is_f; } shapes[] = {
        { 1, 1, false }, { 2, 1, false }, { 3, 1, false }, { 4, 1, false }, { 5, 1, false },
        { 1, 1, true }, { 3, 2, true }, { 2, 2, true },
    };
    rng_seed(2718);
    int64_t near_seen = 0, counted_seen = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int tail = 0; tail < 3; tail++) {
                const int64_t nv = lengths[li], ld = nv + 3, r = shapes[si].r, np = 1 + (int64_t)(li + si + tail) % 9;
                const int64_t pld = r * ld + 5, W = np * nv + 1;
                if (shapes[si].is_f && tail)
                    continue;
                float *G = random_matrix(np, pld, pld), *ss = test_malloc((size_t)(nv + 1) * sizeof *ss);
                float *fl = test_malloc((size_t)(nv + 1) * sizeof *fl), *cap = test_malloc((size_t)(nv + 1) * sizeof *cap);
                float *lo = test_malloc((size_t)(nv + 1) * sizeof *lo), *hi = test_malloc((size_t)(nv + 1) * sizeof *hi);
                float *qw = test_malloc((size_t)W * sizeof *qw), *qg = test_malloc((size_t)W * sizeof *qg);
                float *mw = test_malloc((size_t)(np + 1) * sizeof *mw), *mg = test_malloc((size_t)(np + 1) * sizeof *mg);
                uint32_t *cw = test_malloc((size_t)(nv + 1) * sizeof *cw), *cg = test_malloc((size_t)(nv + 1) * sizeof *cg);
                int32_t *nw = test_malloc((size_t)W * sizeof *nw), *ng = test_malloc((size_t)W * sizeof *ng);
                for (int64_t v = 0; v < nv; v++) {
                    double sum = 0;
                    for (int64_t m = 0; m < r; m++)
                        sum += (double)G[m * ld + v] * G[m * ld + v];
                    ss[v] = (float)(sum * (v % 11 == 3 ? 0.5 : 1.5 + rng_uniform()));   /* some floors bind */
                    fl[v] = (float)(0.01 * sum);
                    cap[v] = v % 13 == 5 ? -FLT_MAX : FLT_MAX;
                    lo[v] = hi[v] = FLT_MAX;
                }
                struct nf_glm_epi e = { .G = G, .ss = ss, .fl = fl, .cap = cap, .lo = lo, .hi = hi, .np = np,
                                        .pld = pld, .r = r, .s = shapes[si].s, .ld = ld, .nv = nv,
                                        .sg = tail == 2 ? -1.0f : 1.0f, .two = tail == 0, .is_f = shapes[si].is_f };
                qw[np * nv] = qg[np * nv] = PAD_SENTINEL;
                mw[np] = mg[np] = PAD_SENTINEL;
                nf_glm_epilogue_ref(&e, qw, mw, NULL, NULL, NULL);
                /* the plain loop against double */
                for (int64_t i = 0; i < np; i++) {
                    float mx = -FLT_MAX;
                    for (int64_t v = 0; v < nv; v++) {
                        const float *Gi = G + i * pld;
                        double g0 = Gi[v], num = 0, rss = ss[v];
                        for (int64_t m = 0; m < r; m++) {
                            double gm = Gi[m * ld + v];
                            if (m < e.s)
                                num += gm * gm;
                            rss -= gm * gm;
                        }
                        if (!e.is_f)
                            num = e.two ? g0 * g0 : e.sg * g0 * fabs(g0);
                        rss = rss > fl[v] ? rss : fl[v];
                        double q = cap[v] == -FLT_MAX ? -FLT_MAX : num / rss;
                        assert_close(qw[i * nv + v], q, 1e-4 * (fabs(q) + 1.0) * (num / rss > 1e3 ? 1e3 : 1.0));
                        mx = qw[i * nv + v] > mx ? qw[i * nv + v] : mx;
                    }
                    assert_true(mw[i] == mx);
                }
                assert_true(mw[np] == PAD_SENTINEL);
                /* windows: on some values of the first permutation, below others */
                for (int64_t v = 0; v < nv; v++) {
                    if (v % 3 == 0) {
                        lo[v] = qw[v] - 1e-3f * fabsf(qw[v]) - 1e-6f;
                        hi[v] = qw[v] + 1e-3f * fabsf(qw[v]) + 1e-6f;
                    } else if (v % 3 == 1) {
                        lo[v] = qw[v] - 2.0f;
                        hi[v] = qw[v] - 1.0f;
                    }
                }
                for (int64_t v = 0; v <= nv; v++)
                    cw[v] = (uint32_t)v;
                int n_w = -1;
                nf_glm_epilogue_ref(&e, qw, mw, cw, nw, &n_w);
                for (int64_t v = 0, j = 0; v < nv; v++) {
                    uint32_t c = (uint32_t)v;
                    for (int64_t i = 0; i < np; i++) {
                        float x = qw[i * nv + v];
                        c += x >= hi[v];
                        counted_seen += x >= hi[v];
                        bool in = x >= lo[v] && x < hi[v];
                        near_seen += in;
                        if (in) {
                            bool listed = false;
                            for (int jj = 0; jj < n_w; jj++)
                                listed |= nw[jj] == (int32_t)(i * nv + v);
                            assert_true(listed);
                            j++;
                        }
                    }
                    assert_true(cw[v] == c);
                    if (v == nv - 1)
                        assert_int_equal(j, n_w);
                }
                assert_true(cw[nv] == (uint32_t)nv);
                qsort(nw, (size_t)n_w, sizeof *nw, cmp_int32);
                for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
                    for (int64_t i = 0; i < np * nv; i++)
                        qg[i] = NAN;
                    tables[t]->glm_epilogue(&e, qg, mg, NULL, NULL, NULL);
                    assert_memory_equal(qg, qw, (size_t)W * sizeof *qg);
                    assert_memory_equal(mg, mw, (size_t)(np + 1) * sizeof *mg);
                    for (int64_t v = 0; v <= nv; v++)
                        cg[v] = (uint32_t)v;
                    int n_g = -1;
                    tables[t]->glm_epilogue(&e, qg, mg, cg, ng, &n_g);
                    assert_memory_equal(qg, qw, (size_t)W * sizeof *qg);
                    assert_same_glm_decisions(mg, mw, np, cg, cw, nv, ng, n_g, nw, n_w);
                }
                test_free(G);
                test_free(ss);
                test_free(fl);
                test_free(cap);
                test_free(lo);
                test_free(hi);
                test_free(qw);
                test_free(qg);
                test_free(mw);
                test_free(mg);
                test_free(cw);
                test_free(cg);
                test_free(nw);
                test_free(ng);
            }
    assert_true(near_seen > 0 && counted_seen > 0);
}

/* Every table's glm_tile against the plain loop, bit for bit (q, the maxima,
 * counts, the near list as a set; with q or without), for t contrasts of 1..5
 * rows in each tail and F contrasts, permutation counts around the vector
 * version's register tiles (8, 6, 4, 3 permutations; 1..2 with AVX2) and its
 * block of 96, voxel counts around its strips of 32 (16 with AVX2), flat
 * voxels, floors that bind and windows on some values; the plain loop against
 * the epilogue over values summed here by fmaf in k order (the same bits),
 * and against double (within round-off); nothing written past the values. */
static void test_glm_tile_matches_reference(void **state)
{
    (void)state;
    const int64_t lengths[] = { 1, 15, 16, 17, 31, 32, 33, 64, 65, 100 };
    const int64_t perms[] = { 1, 3, 5, 8, 13, 97 };
    const int64_t depths[] = { 1, 5, 37 };
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    const struct { int64_t r, s; bool is_f; } shapes[] = {
        { 1, 1, false }, { 2, 1, false }, { 3, 1, false }, { 4, 1, false }, { 5, 1, false },
        { 1, 1, true }, { 3, 2, true },
    };
    rng_seed(31415);
    int64_t near_seen = 0, counted_seen = 0, cases = 0, checked = 0, values = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t pi = 0; pi < sizeof perms / sizeof perms[0]; pi++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (int tail = 0; tail < 3; tail++) {
                    const int64_t nv = lengths[li], lde = nv + 3, r = shapes[si].r, np = perms[pi];
                    const int64_t n = depths[(li + pi + si + (size_t)tail) % 3], W = np * nv + 1;
                    if ((shapes[si].is_f && tail) || (np == 97 && (li % 3 || tail)))
                        continue;   /* the long blocks in fewer cases: the plain loop is slow */
                    cases++;
                    values += np * nv;
                    float *R = random_matrix(np * r, n, n), *E = random_matrix(n, nv, lde);
                    float *ss = test_malloc((size_t)(nv + 1) * sizeof *ss), *fl = test_malloc((size_t)(nv + 1) * sizeof *fl);
                    float *cap = test_malloc((size_t)(nv + 1) * sizeof *cap), *lo = test_malloc((size_t)(nv + 1) * sizeof *lo);
                    float *hi = test_malloc((size_t)(nv + 1) * sizeof *hi), *G = test_malloc((size_t)(np * r * nv) * sizeof *G);
                    float *qw = test_malloc((size_t)W * sizeof *qw), *qg = test_malloc((size_t)W * sizeof *qg);
                    float *qe = test_malloc((size_t)W * sizeof *qe);
                    float *mw = test_malloc((size_t)(np + 1) * sizeof *mw), *mg = test_malloc((size_t)(np + 1) * sizeof *mg);
                    uint32_t *cw = test_malloc((size_t)(nv + 1) * sizeof *cw), *cg = test_malloc((size_t)(nv + 1) * sizeof *cg);
                    int32_t *nw = test_malloc((size_t)W * sizeof *nw), *ng = test_malloc((size_t)W * sizeof *ng);
                    /* the values by fmaf in k order, and the constants from the first permutation's */
                    for (int64_t i = 0; i < np * r; i++)
                        for (int64_t v = 0; v < nv; v++) {
                            float acc = 0.0f;
                            for (int64_t k = 0; k < n; k++)
                                acc = fmaf(R[i * n + k], E[k * lde + v], acc);
                            G[i * nv + v] = acc;
                        }
                    for (int64_t v = 0; v < nv; v++) {
                        double sum = 0;
                        for (int64_t m = 0; m < r; m++)
                            sum += (double)G[m * nv + v] * G[m * nv + v];
                        ss[v] = (float)(sum * (v % 11 == 3 ? 0.5 : 1.5 + rng_uniform()));   /* some floors bind */
                        fl[v] = (float)(0.01 * sum) + 1e-30f;
                        cap[v] = v % 13 == 5 ? -FLT_MAX : FLT_MAX;
                        lo[v] = hi[v] = FLT_MAX;
                    }
                    struct nf_glm_epi e = { .G = NULL, .ss = ss, .fl = fl, .cap = cap, .lo = lo, .hi = hi, .np = np,
                                            .r = r, .s = shapes[si].s, .nv = nv, .sg = tail == 2 ? -1.0f : 1.0f,
                                            .two = tail == 0, .is_f = shapes[si].is_f };
                    qw[np * nv] = qg[np * nv] = qe[np * nv] = PAD_SENTINEL;
                    mw[np] = mg[np] = PAD_SENTINEL;
                    nf_glm_tile_ref(&e, R, E, n, lde, qw, mw, NULL, NULL, NULL);
                    /* the plain loop against the epilogue over the fmaf sums, and against double */
                    struct nf_glm_epi ge = e;
                    ge.G = G, ge.ld = nv, ge.pld = r * nv;
                    nf_glm_epilogue_ref(&ge, qe, mg, NULL, NULL, NULL);
                    assert_memory_equal(qe, qw, (size_t)W * sizeof *qe);
                    assert_memory_equal(mg, mw, (size_t)np * sizeof *mg);
                    for (int64_t i = 0; i < np; i++)
                        for (int64_t v = 0; v < nv; v++) {
                            double num = 0, rss = ss[v], g0 = 0;
                            bool ill = false;   /* a sum that cancels to far below its terms: round-off dominates */
                            for (int64_t m = 0; m < r; m++) {
                                double gm = 0, terms = 0;
                                for (int64_t k = 0; k < n; k++) {
                                    gm += (double)R[(i * r + m) * n + k] * E[k * lde + v];
                                    terms += fabs((double)R[(i * r + m) * n + k] * E[k * lde + v]);
                                }
                                ill |= fabs(gm) < 1e-2 * terms;
                                g0 = m == 0 ? gm : g0;
                                num += m < e.s ? gm * gm : 0;
                                rss -= gm * gm;
                            }
                            if (!e.is_f)
                                num = e.two ? g0 * g0 : e.sg * g0 * fabs(g0);
                            rss = rss > fl[v] ? rss : fl[v];
                            double q = cap[v] == -FLT_MAX ? -FLT_MAX : num / rss;
                            if (ill)
                                continue;
                            checked++;
                            assert_close(qw[i * nv + v], q, 1e-3 * (fabs(q) + 1.0) * (num / rss > 1e2 ? 1e3 : 1.0));
                        }
                    /* windows: on some values of the first permutation, below others */
                    for (int64_t v = 0; v < nv; v++) {
                        if (v % 5 == 0) {
                            lo[v] = qw[v] - 1e-3f * fabsf(qw[v]) - 1e-6f;
                            hi[v] = qw[v] + 1e-3f * fabsf(qw[v]) + 1e-6f;
                        } else if (v % 5 == 1) {
                            lo[v] = qw[v] - 2.0f;
                            hi[v] = qw[v] - 1.0f;
                        } else if (v % 5 == 2) {   /* the edges exactly: lo is inside, hi is not */
                            lo[v] = qw[v];
                            hi[v] = qw[v] + 1.0f;
                        } else if (v % 5 == 3) {
                            lo[v] = qw[v] - 1.0f;
                            hi[v] = qw[v];
                        }
                    }
                    for (int64_t v = 0; v <= nv; v++)
                        cw[v] = (uint32_t)v;
                    int n_w = -1;
                    nf_glm_tile_ref(&e, R, E, n, lde, qw, mw, cw, nw, &n_w);
                    for (int64_t v = 0; v < nv; v++) {
                        uint32_t c = (uint32_t)v;
                        for (int64_t i = 0; i < np; i++) {
                            float x = qw[i * nv + v];
                            c += x >= hi[v];
                            counted_seen += x >= hi[v];
                            bool in = x >= lo[v] && x < hi[v];
                            near_seen += in;
                            bool listed = false;
                            for (int jj = 0; jj < n_w; jj++)
                                listed |= nw[jj] == (int32_t)(i * nv + v);
                            assert_true(listed == in);
                        }
                        assert_true(cw[v] == c);
                    }
                    assert_true(cw[nv] == (uint32_t)nv);
                    qsort(nw, (size_t)n_w, sizeof *nw, cmp_int32);
                    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
                        for (int with_q = 0; with_q < 2; with_q++) {
                            for (int64_t i = 0; i < np * nv; i++)
                                qg[i] = NAN;
                            tables[t]->glm_tile(&e, R, E, n, lde, with_q ? qg : NULL, mg, NULL, NULL, NULL);
                            if (with_q)
                                assert_memory_equal(qg, qw, (size_t)W * sizeof *qg);
                            assert_memory_equal(mg, mw, (size_t)(np + 1) * sizeof *mg);
                            for (int64_t v = 0; v <= nv; v++)
                                cg[v] = (uint32_t)v;
                            int n_g = -1;
                            tables[t]->glm_tile(&e, R, E, n, lde, with_q ? qg : NULL, mg, cg, ng, &n_g);
                            if (with_q)
                                assert_memory_equal(qg, qw, (size_t)W * sizeof *qg);
                            else
                                assert_true(qg[np * nv] == PAD_SENTINEL);
                            assert_same_glm_decisions(mg, mw, np, cg, cw, nv, ng, n_g, nw, n_w);
                        }
                    test_free(R);
                    test_free(E);
                    test_free(G);
                    test_free(ss);
                    test_free(fl);
                    test_free(cap);
                    test_free(lo);
                    test_free(hi);
                    test_free(qw);
                    test_free(qg);
                    test_free(qe);
                    test_free(mw);
                    test_free(mg);
                    test_free(cw);
                    test_free(cg);
                    test_free(nw);
                    test_free(ng);
                }
    assert_true(near_seen > 0 && counted_seen > 0 && cases > 300 && checked > values * 9 / 10);
}

/* Every table's glm_tile_i8 against glm_tile's plain loop: the same
 * counts and near list, the running maximum max(seed, glm_tile's maximum) and
 * the block maxima at or above glm_tile's (equal for the plain version), for
 * t contrasts of 2..4 unit rows in each tail, odd and even subject counts,
 * permutation counts around the register tiles (6, 4, 3) and the block of 96,
 * voxel counts around the strips of 32, a flat voxel, floors that bind, and
 * windows whose edges are exactly some float values (so that many values
 * are not decided by their bounds and are summed again). */
static void test_glm_tile_i8_matches_tile(void **state)
{
    (void)state;
    const int64_t lengths[] = { 1, 31, 32, 33, 64, 100 };
    const int64_t perms[] = { 1, 3, 5, 7, 13, 97 };
    const int64_t depths[] = { 1, 2, 5, 37, 100 };
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    rng_seed(1618);
    int64_t cases = 0, near_seen = 0, counted_seen = 0;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
        for (size_t pi = 0; pi < sizeof perms / sizeof perms[0]; pi++)
            for (int64_t r = 2; r <= 4; r++)
                for (int tail = 0; tail < 3; tail++) {
                    const int64_t nv = lengths[li], np = perms[pi], lde = nv + 3, ldq = nv + 1;
                    const int64_t n = depths[(li + pi + (size_t)r + (size_t)tail) % 5], n4 = (n + 3) / 4;
                    if (np == 97 && (li % 2 || tail))
                        continue;
                    cases++;
                    float *R = random_matrix(np * r, n, n), *E = random_matrix(n, nv, lde);
                    for (int64_t i = 0; i < np * r; i++) {   /* unit rows (row_norm 1) */
                        double sq = 0;
                        for (int64_t k = 0; k < n; k++)
                            sq += (double)R[i * n + k] * R[i * n + k];
                        for (int64_t k = 0; k < n; k++)
                            R[i * n + k] = (float)(R[i * n + k] / sqrt(sq));
                    }
                    if (nv > 2)
                        for (int64_t k = 0; k < n; k++)
                            E[k * lde + 2] = 0.0f;   /* voxel 2 flat */
                    uint32_t *Eq = test_malloc((size_t)(n4 * ldq) * sizeof *Eq), *Rq = test_malloc((size_t)(np * (r - 1) * n4) * sizeof *Rq);
                    float *sv = test_malloc((size_t)nv * sizeof *sv), sq[NF_GLM_TILE_MAX_ROWS] = { 0 };
                    int32_t *off = test_malloc((size_t)nv * sizeof *off);
                    double *norms = test_malloc((size_t)(3 * nv) * sizeof *norms), row[3] = { 0, 0, 0 };
                    nf_i8_column_steps(E, n, nv, lde, sv);
                    nf_i8_quads(E, n, nv, lde, sv, Eq, ldq, off, norms);
                    /* one step per row m, the largest of every permutation's (as a draw's rows share
                     * it); the bound takes the largest norms */
                    for (int64_t i = 0; i < np; i++)
                        for (int64_t m = 1; m < r; m++)
                            sq[m - 1] = fmaxf(sq[m - 1], nf_i8_step(R + (i * r + m) * n, n));
                    for (int64_t i = 0; i < np; i++)
                        for (int64_t m = 1; m < r; m++) {
                            const float *x = R + (i * r + m) * n;
                            double rm[3];
                            nf_u8_quads(x, n, sq[m - 1], Rq + (i * (r - 1) + m - 1) * n4);
                            nf_i8_norms(x, n, sq[m - 1], rm);
                            for (int j = 0; j < 3; j++)
                                row[j] = fmax(row[j], rm[j]);
                        }
                    float *ss = test_malloc((size_t)nv * sizeof *ss), *fl = test_malloc((size_t)nv * sizeof *fl);
                    float *cap = test_malloc((size_t)nv * sizeof *cap), *lo = test_malloc((size_t)nv * sizeof *lo);
                    float *hi = test_malloc((size_t)nv * sizeof *hi), *dg = test_malloc((size_t)nv * sizeof *dg);
                    float *dr = test_malloc((size_t)nv * sizeof *dr);
                    float *q = test_malloc((size_t)(np * nv) * sizeof *q);
                    float *mref = test_malloc((size_t)np * sizeof *mref), *ub = test_malloc((size_t)(np + 1) * sizeof *ub);
                    float *seed = test_malloc((size_t)np * sizeof *seed), *run = test_malloc((size_t)(np + 1) * sizeof *run);
                    uint32_t *cref = test_malloc((size_t)nv * sizeof *cref), *cg = test_malloc((size_t)(nv + 1) * sizeof *cg);
                    int32_t *nref = test_malloc((size_t)(np * nv) * sizeof *nref), *ng = test_malloc((size_t)(np * nv) * sizeof *ng);
                    for (int64_t v = 0; v < nv; v++) {
                        double col = 0;
                        for (int64_t k = 0; k < n; k++)
                            col += (double)E[k * lde + v] * E[k * lde + v];
                        dg[v] = nf_glm_i8_bound(n, row, norms + 3 * v);
                        ss[v] = (float)(col * (v % 7 == 4 ? 0.2 : 1.0));   /* some floors bind */
                        dr[v] = nf_glm_i8_roundoff(n, r, 1.0 + 1e-5, col, dg[v], ss[v]);
                        fl[v] = (float)(1e-3 * col);
                        cap[v] = col == 0 ? -FLT_MAX : FLT_MAX;
                        lo[v] = hi[v] = FLT_MAX;
                    }
                    struct nf_glm_epi e = { .ss = ss, .fl = fl, .cap = cap, .lo = lo, .hi = hi, .np = np, .r = r, .s = 1,
                                            .nv = nv, .sg = tail == 2 ? -1.0f : 1.0f, .two = tail == 0 };
                    struct nf_glm_i8 b = { .Eq = Eq, .Rq = Rq, .ldq = ldq, .off = off, .sv = sv, .sq = sq, .dg = dg, .dr = dr };
                    nf_glm_tile_ref(&e, R, E, n, lde, q, mref, NULL, NULL, NULL);
                    /* windows with edges at values of various permutations */
                    for (int64_t v = 0; v < nv; v++) {
                        float x = q[((v * 7) % np) * nv + v];
                        switch (v % 5) {
                        case 0: lo[v] = x, hi[v] = x + 0.5f * fabsf(x) + 1e-3f; break;   /* x inside */
                        case 1: lo[v] = x - 0.5f * fabsf(x) - 1e-3f, hi[v] = x; break;   /* x counted */
                        case 2: lo[v] = hi[v] = FLT_MAX; break;                          /* not tested */
                        case 3: lo[v] = nextafterf(x, INFINITY), hi[v] = nextafterf(lo[v], INFINITY); break;
                        default: lo[v] = x - 1e-3f, hi[v] = x + 1e-3f; break;
                        }
                    }
                    memset(cref, 0, (size_t)nv * sizeof *cref);
                    int n_ref = -1;
                    nf_glm_tile_ref(&e, R, E, n, lde, NULL, mref, cref, nref, &n_ref);
                    qsort(nref, (size_t)n_ref, sizeof *nref, cmp_int32);
                    for (int64_t v = 0; v < nv; v++)
                        counted_seen += cref[v];
                    near_seen += n_ref;
                    for (int64_t i = 0; i < np; i++)   /* running maxima seeded below, at and above the block's */
                        seed[i] = i % 3 == 0 ? -FLT_MAX : i % 3 == 1 ? mref[i] - 0.01f * fabsf(mref[i]) : mref[i] + 1.0f;
                    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
                        for (int counting = 0; counting < 2; counting++) {
                            memcpy(run, seed, (size_t)np * sizeof *run);
                            run[np] = ub[np] = PAD_SENTINEL;
                            for (int64_t v = 0; v <= nv; v++)
                                cg[v] = 0;
                            int n_g = -1;
                            tables[t]->glm_tile_i8(&e, &b, R, E, n, lde, ub, run, counting ? cg : NULL,
                                                   counting ? ng : NULL, &n_g);
                            for (int64_t i = 0; i < np; i++) {
                                assert_true(run[i] == (mref[i] > seed[i] ? mref[i] : seed[i]));
                                assert_true(ub[i] >= mref[i]);
                                if (tables[t] == &nf_kernels_ref)
                                    assert_true(ub[i] == mref[i]);
                            }
                            assert_true(run[np] == PAD_SENTINEL && ub[np] == PAD_SENTINEL);
                            assert_true(cg[nv] == 0);
                            if (!counting)
                                continue;
                            assert_memory_equal(cg, cref, (size_t)nv * sizeof *cg);
                            assert_int_equal(n_g, n_ref);
                            qsort(ng, (size_t)n_g, sizeof *ng, cmp_int32);
                            if (n_ref)
                                assert_memory_equal(ng, nref, (size_t)n_ref * sizeof *ng);
                        }
                    test_free(R);
                    test_free(E);
                    test_free(Eq);
                    test_free(Rq);
                    test_free(sv);
                    test_free(off);
                    test_free(norms);
                    test_free(ss);
                    test_free(fl);
                    test_free(cap);
                    test_free(lo);
                    test_free(hi);
                    test_free(dg);
                    test_free(dr);
                    test_free(q);
                    test_free(mref);
                    test_free(ub);
                    test_free(seed);
                    test_free(run);
                    test_free(cref);
                    test_free(cg);
                    test_free(nref);
                    test_free(ng);
                }
    assert_true(cases > 200 && near_seen > 0 && counted_seen > 0);
}

/* Bytes: a column's and a row's quads (rounded to nearest, ties to even,
 * within +-127, row 4j + b in byte b, 0 / 128 past the end), the offset and
 * the norms against a direct computation; and on random unit rows and
 * columns of every length 1..300 (step 37) and scales, the exact sum of the
 * bytes' products, from the offset, times sv sq (as the kernel forms it) is
 * within nf_glm_i8_bound of the float sum (fmaf in k order), the bound not
 * vacuous and reached within a factor of 50. */
static void test_i8_quads_and_bound(void **state)
{
    (void)state;
    /* steps 2^-6 and 2^-7 (largest |x| 127 steps): exact, so ties are ties */
    const float X[5][2] = { { 1.0f, 0.5f }, { -1.984375f, 0.9921875f }, { 0.0078125f, -0.9921875f },
                            { 1.984375f, 0.0f }, { 0.0234375f, 0.01171875f } };
    float step[2];
    nf_i8_column_steps(&X[0][0], 5, 2, 2, step);
    assert_true(step[0] == 0x1p-6f && step[1] == 0x1p-7f);
    uint32_t out[4];
    int32_t off[2];
    double norms[6];
    nf_i8_quads(&X[0][0], 5, 2, 2, step, out, 2, off, norms);
    /* column 0: 64, -127, 0.5 -> 0 (ties to even), 127, then 1.5 -> 2; column 1: 64, 127, -127, 0, 1.5 -> 2 */
    const int b0[5] = { 64, -127, 0, 127, 2 }, b1[5] = { 64, 127, -127, 0, 2 };
    assert_int_equal(out[0], 64u | 0x81u << 8 | 0u << 16 | 0x7fu << 24);
    assert_int_equal(out[1], 64u | 0x7fu << 8 | 0x81u << 16 | 0u << 24);
    assert_int_equal(out[2], 2u);   /* row 4 alone: the rest 0 */
    assert_int_equal(out[3], 2u);
    assert_int_equal(off[0], -128 * (64 - 127 + 0 + 127 + 2));
    assert_int_equal(off[1], -128 * (64 + 127 - 127 + 0 + 2));
    for (int c = 0; c < 2; c++) {
        double a = 0, d = 0, q = 0;
        for (int k = 0; k < 5; k++) {
            double t = (double)step[c] * (c ? b1[k] : b0[k]);
            a += (double)X[k][c] * X[k][c], d += (X[k][c] - t) * (X[k][c] - t), q += t * t;
        }
        assert_true(fabs(norms[3 * c] - sqrt(a)) <= 1e-12 && fabs(norms[3 * c + 1] - sqrt(d)) <= 1e-12 &&
                    fabs(norms[3 * c + 2] - sqrt(q)) <= 1e-12);
    }
    const float row[5] = { 0.5f, -0.9921875f, 0.01171875f, 0.0f, 0.9921875f };
    uint32_t rq[2];
    assert_true(nf_i8_step(row, 5) == 0x1p-7f);
    nf_u8_quads(row, 5, nf_i8_step(row, 5), rq);
    assert_int_equal(rq[0], (128u + 64u) | (128u - 127u) << 8 | (128u + 2u) << 16 | 128u << 24);
    assert_int_equal(rq[1], (128u + 127u) | 128u << 8 | 128u << 16 | 128u << 24);
    rng_seed(99);
    double worst = 0;
    for (int64_t n = 1; n <= 300; n += 37)
        for (int scale = 0; scale < 3; scale++) {
            float *x = random_matrix(1, n, n), *col = random_matrix(1, n, n);
            const double colscale = scale == 0 ? 1.0 : scale == 1 ? 1e-3 : 1e4;
            double xx = 0;
            for (int64_t k = 0; k < n; k++)
                xx += (double)x[k] * x[k];
            for (int64_t k = 0; k < n; k++)
                x[k] = (float)(x[k] / sqrt(xx)), col[k] = (float)(col[k] * colscale);
            float sx = nf_i8_step(x, n), sc;
            nf_i8_column_steps(col, n, 1, 1, &sc);
            uint32_t *xq = test_malloc((size_t)((n + 3) / 4) * sizeof *xq), *cq = test_malloc((size_t)((n + 3) / 4) * sizeof *cq);
            int32_t co;
            double rn[3], cn[3];
            nf_u8_quads(x, n, sx, xq);
            nf_i8_quads(col, n, 1, 1, &sc, cq, 1, &co, cn);
            nf_i8_norms(x, n, sx, rn);
            int64_t acc = co;
            float fsum = 0.0f;
            for (int64_t k = 0; k < n; k++) {
                int xb = (int)(xq[k / 4] >> (8 * (k % 4)) & 0xffu), cb = (int8_t)(cq[k / 4] >> (8 * (k % 4)) & 0xffu);
                assert_true(fabs((double)sx * (xb - 128) - x[k]) <= 0.5001 * sx);
                assert_true(fabs((double)sc * cb - col[k]) <= 0.5001 * sc);
                acc += (int64_t)xb * cb;
                fsum = fmaf(x[k], col[k], fsum);
            }
            float ours = (float)acc * (sc * sx);
            float bound = nf_glm_i8_bound(n, rn, cn);
            assert_true(fabs((double)ours - (double)fsum) <= bound);
            assert_true(bound < 0.05 * cn[0]);   /* and not vacuous */
            worst = fmax(worst, fabs((double)ours - (double)fsum) / bound);
            test_free(x);
            test_free(col);
            test_free(xq);
            test_free(cq);
        }
    assert_true(worst > 0.02 && worst <= 1.0);
}

/* ---- tables, BLAS identity, CUDA probe ------------------------------------ */

static void test_tables_are_complete(void **state)
{
    (void)state;
    const struct nf_kernels *cpu = nf_kernels_cpu();
    const struct nf_kernels *all[] = {&nf_kernels_ref, &nf_kernels_blas, cpu};
    assert_non_null(cpu);
    for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
        assert_non_null(all[t]->name);
        assert_non_null(all[t]->sgemm);
        assert_non_null(all[t]->col_moments);
        assert_non_null(all[t]->standardize);
        assert_non_null(all[t]->svd);
        assert_non_null(all[t]->dsyrk);
        assert_non_null(all[t]->dgemm);
        assert_non_null(all[t]->perm_tile);
        assert_non_null(all[t]->ridge_error_sums);
        assert_non_null(all[t]->row_accumulate);
        assert_non_null(all[t]->row_sq_dev);
        assert_non_null(all[t]->row_standardize);
        assert_non_null(all[t]->row_gemv_double);
        assert_non_null(all[t]->rows_gemm_f32);
        assert_non_null(all[t]->perm_signed_t_f32);
        assert_non_null(all[t]->row_axpy);
        assert_non_null(all[t]->row_residual);
        assert_non_null(all[t]->glm_epilogue);
    }
}

/* rows_gemm_f32 of every table against the sum written out here, element by
 * element in float with j in order: the same bits, for row counts around the
 * 8-row register tile, voxel counts around the 16-wide vectors and the
 * 1024-column blocks, and n = 1; nothing past G's end is written. */
static void test_rows_gemm_f32_matches_reference(void **state)
{
    (void)state;
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    const int64_t sizes[][3] = { { 1, 1, 1 }, { 3, 7, 15 }, { 8, 50, 16 }, { 9, 50, 1024 + 37 },
                                 { 16, 12, 2048 + 5 }, { 11, 1, 33 }, { 8, 3, 3000 } };
    uint64_t seed = 17;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t nr = sizes[s][0], n = sizes[s][1], V = sizes[s][2];
        float *R = test_malloc((size_t)(nr * n) * sizeof *R), *D = test_malloc((size_t)(n * V) * sizeof *D);
        float *want = test_malloc((size_t)(nr * V) * sizeof *want);
        float *got = test_malloc((size_t)(nr * V + 1) * sizeof *got);
        for (int64_t i = 0; i < nr * n; i++)
            R[i] = (float)nf_rand_normal(&seed);
        for (int64_t i = 0; i < n * V; i++)
            D[i] = (float)nf_rand_normal(&seed);
        for (int64_t r = 0; r < nr; r++)
            for (int64_t v = 0; v < V; v++) {
                float g = 0;
                for (int64_t j = 0; j < n; j++) {
                    float term = R[r * n + j] * D[j * V + v];
                    g = g + term;
                }
                want[r * V + v] = g;
            }
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            for (int64_t i = 0; i <= nr * V; i++)
                got[i] = NAN;
            got[nr * V] = PAD_SENTINEL;
            tables[t]->rows_gemm_f32(R, nr, D, n, V, got);
            assert_memory_equal(got, want, (size_t)(nr * V) * sizeof *got);
            assert_true(got[nr * V] == PAD_SENTINEL);
        }
        test_free(R);
        test_free(D);
        test_free(want);
        test_free(got);
    }
}

/* perm_signed_t_f32 of every table against the definition written out
 * here, bit for bit: voxel counts around the 8-wide vectors, denominators
 * below their floor, values above their cap, zero-variance voxels (cap
 * -FLT_MAX: 0), negative and zero differences; nothing past V is written. */
static void test_perm_signed_t_f32_matches_reference(void **state)
{
    (void)state;
    const struct nf_kernels *tables[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    const int64_t sizes[] = { 1, 7, 8, 9, 17, 1000 + 3 };
    uint64_t seed = 23;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        const int64_t V = sizes[s];
        float *x = test_malloc((size_t)V * sizeof *x), *shift = test_malloc((size_t)V * sizeof *shift);
        float *ss = test_malloc((size_t)V * sizeof *ss), *fl = test_malloc((size_t)V * sizeof *fl);
        float *cap = test_malloc((size_t)V * sizeof *cap), *want = test_malloc((size_t)V * sizeof *want);
        float *got = test_malloc((size_t)(V + 1) * sizeof *got);
        const float a = 0.37f, c = 0.02f;
        const double k = 49.0 / 50.0;
        for (int64_t v = 0; v < V; v++) {
            x[v] = (float)nf_rand_normal(&seed) * 3;
            shift[v] = v % 11 == 3 ? a * x[v] : (float)nf_rand_normal(&seed);   /* d = 0 exactly */
            ss[v] = (float)fabs(nf_rand_normal(&seed)) + 0.01f;
            fl[v] = v % 5 == 1 ? 10.0f : 1e-6f;                                  /* den raised to floor */
            cap[v] = v % 7 == 2 ? -FLT_MAX : v % 13 == 4 ? 0.5f : FLT_MAX;      /* zero variance, capped */
        }
        for (int64_t v = 0; v < V; v++) {
            float d = a * x[v] - shift[v];
            float den = ss[v] - c * d * d;
            if (!(den > fl[v]))
                den = fl[v];
            float q = d * (d < 0 ? -d : d) / den;
            if (!(q < cap[v]))
                q = cap[v];
            double t = sqrt(fabs((double)q) * k);
            want[v] = q == -FLT_MAX ? 0.0f : q < 0 ? (float)-t : (float)t;
        }
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
            memcpy(got, x, (size_t)V * sizeof *got);
            got[V] = PAD_SENTINEL;
            tables[t]->perm_signed_t_f32(got, V, a, c, shift, ss, fl, cap, k);
            assert_memory_equal(got, want, (size_t)V * sizeof *got);
            assert_true(got[V] == PAD_SENTINEL);
        }
        test_free(x);
        test_free(shift);
        test_free(ss);
        test_free(fl);
        test_free(cap);
        test_free(want);
        test_free(got);
    }
}

/* dsyrk (A Aᵀ in double) against a direct sum, including n = 1, k = 0, a
 * strided A and sizes around BLAS blocking; C is exactly symmetric. */
static void test_dsyrk_matches_reference(void **state)
{
    (void)state;
    const int sizes[][3] = { { 1, 5, 5 }, { 3, 0, 1 }, { 7, 13, 16 }, { 40, 300, 301 }, { 65, 129, 130 } };
    const struct nf_kernels *all[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    uint64_t st = 99;
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        int n = sizes[c][0], k = sizes[c][1], lda = sizes[c][2];
        double *A = malloc((size_t)(n * lda + 1) * sizeof *A), *C = malloc((size_t)(n * n) * sizeof *C);
        assert_non_null(A);
        assert_non_null(C);
        for (int e = 0; e < n * lda; e++)
            A[e] = nf_rand_normal(&st);
        for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
            for (int e = 0; e < n * n; e++)
                C[e] = NAN;
            all[t]->dsyrk(n, k, A, lda, C, n);
            for (int i = 0; i < n; i++)
                for (int j = 0; j < n; j++) {
                    double want = 0, scale = 0;
                    for (int q = 0; q < k; q++) {
                        want += A[i * lda + q] * A[j * lda + q];
                        scale += fabs(A[i * lda + q] * A[j * lda + q]);
                    }
                    assert_true(fabs(C[i * n + j] - want) <= 1e-13 * (1 + scale));
                    assert_true(C[i * n + j] == C[j * n + i]);
                }
        }
        free(A);
        free(C);
    }
}

/* dgemm (op(A) op(B) in double) against a direct sum, every transposition:
 * strided operands, k = 0 (C becomes zeros), sizes around BLAS blocking. */
static void test_dgemm_matches_reference(void **state)
{
    (void)state;
    const int sizes[][3] = { { 1, 1, 5 }, { 3, 2, 0 }, { 7, 5, 13 }, { 70, 40, 300 }, { 65, 9, 129 } };
    const struct nf_kernels *all[] = { &nf_kernels_ref, &nf_kernels_blas, nf_kernels_cpu() };
    uint64_t st = 7;
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++)
        for (int tr = 0; tr < 4; tr++) {
            const bool ta = tr & 1, tb = tr & 2;
            const int m = sizes[c][0], n = sizes[c][1], k = sizes[c][2], pad = 3;
            /* op(A) m x k, op(B) k x n, each stored with `pad` spare columns */
            const int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
            const int arows = ta ? k : m, brows = tb ? n : k;
            double *A = malloc((size_t)(arows * lda + 1) * sizeof *A), *B = malloc((size_t)(brows * ldb + 1) * sizeof *B);
            double *C = malloc((size_t)(m * ldc) * sizeof *C);
            assert_non_null(A);
            assert_non_null(B);
            assert_non_null(C);
            for (int e = 0; e < arows * lda; e++)
                A[e] = nf_rand_normal(&st);
            for (int e = 0; e < brows * ldb; e++)
                B[e] = nf_rand_normal(&st);
            for (size_t t = 0; t < sizeof all / sizeof all[0]; t++) {
                for (int e = 0; e < m * ldc; e++)
                    C[e] = NAN;
                all[t]->dgemm(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double want = 0, scale = 0;
                        for (int q = 0; q < k; q++) {
                            double a = ta ? A[q * lda + i] : A[i * lda + q], b = tb ? B[j * ldb + q] : B[q * ldb + j];
                            want += a * b;
                            scale += fabs(a * b);
                        }
                        assert_true(fabs(C[i * ldc + j] - want) <= 1e-13 * (1 + scale));
                    }
            }
            free(A);
            free(B);
            free(C);
        }
}

static void test_blas_identity(void **state)
{
    (void)state;
    assert_non_null(nf_blas_name());
    assert_true(strlen(nf_blas_name()) > 0);
    assert_non_null(nf_blas_core());
    assert_true(strlen(nf_blas_core()) > 0);

    int threads = nf_blas_threads();
    assert_true(threads >= 1);
    nf_blas_set_threads(1);
    assert_int_equal(nf_blas_threads(), 1);
    nf_blas_set_threads(threads);
    assert_int_equal(nf_blas_threads(), threads);
}

/* Threads of this process, from /proc/self/task (-1 where unreadable). */
static int process_threads_now(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* The threads of this process once exited ones are gone: a joined thread can
 * stay listed in /proc/self/task for a moment after pthread_join returns (its
 * kernel task is released after the join's wake-up), so wait for the count
 * to settle at 1: microseconds, but bounded by a minute, not by a guess of
 * how busy the machine is. */
static int process_threads(void)
{
    int n = process_threads_now();
    for (int i = 0; i < 6000 && n > 1; i++) {
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        n = process_threads_now();
    }
    return n;
}

/* nf_blas_quiesce leaves one BLAS thread and stops OpenBLAS's idle workers
 * (this test process has no threads of its own, so one thread is left), and
 * setting one thread again does not start them; a threaded SGEMM afterwards
 * starts them again and still computes the reference's product. */
static void test_blas_quiesce(void **state)
{
    (void)state;
    int threads = nf_blas_threads();
    if (nf_blas_quiesce() && process_threads() > 0) {
        assert_int_equal(nf_blas_threads(), 1);
        assert_int_equal(process_threads(), 1);
        nf_blas_set_threads(1);
        assert_int_equal(process_threads(), 1);
    }
    nf_blas_set_threads(2);
    enum { M = 300, N = 280, K = 260 };
    rng_seed(7);
    float *A = random_matrix(M, K, K), *B = random_matrix(K, N, N);
    float *C = test_malloc(sizeof(float) * M * N), *C_ref = test_malloc(sizeof(float) * M * N);
    nf_kernels_cpu()->sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N);
    nf_kernels_ref.sgemm(false, false, M, N, K, 1.0f, A, K, B, N, 0.0f, C_ref, N);
    for (int i = 0; i < M * N; i++)
        assert_true(fabsf(C[i] - C_ref[i]) <= 1e-4f * (1.0f + fabsf(C_ref[i])));
    nf_blas_set_threads(threads);
    test_free(A);
    test_free(B);
    test_free(C);
    test_free(C_ref);
}

static void test_cuda_probe_answers(void **state)
{
    (void)state;
    char why[256] = "", description[256] = "";
    bool available = nf_cuda_available(why, sizeof why);
    nf_cuda_describe(description, sizeof description);
    assert_true(strlen(description) > 0);
    if (!available) {
        /* No GPU here (or no CUDA build): the reason must be given. */
        assert_true(strlen(why) > 0);
        assert_string_equal(description, "none");
        /* A tiny buffer is truncated, not overrun. */
        char tiny[4] = "xyz";
        assert_false(nf_cuda_available(tiny, sizeof tiny));
        assert_int_equal(strlen(tiny), 3);
        return;
    }
    assert_string_not_equal(description, "none");
#ifdef HAVE_CUDA
    /* A GPU is here: run a real kernel end to end. */
    enum { N = 1000 };
    float x[N], y[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i;
        y[i] = 1.0f;
    }
    assert_int_equal(nf_cuda_saxpy_test(N, 2.0f, x, y), 0);
    for (int i = 0; i < N; i++)
        assert_close(y[i], 2.0f * (float)i + 1.0f, 0.0f);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables_are_complete),
        cmocka_unit_test(test_rows_gemm_f32_matches_reference),
        cmocka_unit_test(test_perm_signed_t_f32_matches_reference),
        cmocka_unit_test(test_dsyrk_matches_reference),
        cmocka_unit_test(test_dgemm_matches_reference),
        cmocka_unit_test(test_sgemm_reference_closed_form),
        cmocka_unit_test(test_sgemm_matches_reference),
        cmocka_unit_test(test_sgemm_edges),
        cmocka_unit_test(test_col_moments_closed_form),
        cmocka_unit_test(test_col_moments_matches_reference),
        cmocka_unit_test(test_standardize_zscore),
        cmocka_unit_test(test_standardize_center),
        cmocka_unit_test(test_standardize_none_is_noop),
        cmocka_unit_test(test_svd_reference_closed_form),
        cmocka_unit_test(test_svd_shapes),
        cmocka_unit_test(test_svd_rank_deficient),
        cmocka_unit_test(test_svd_rejects_non_finite),
        cmocka_unit_test(test_perm_tile_matches_reference),
        cmocka_unit_test(test_perm_tile_rows_independent),
        cmocka_unit_test(test_perm_tile_choice),
        cmocka_unit_test(test_ridge_error_sums_matches_reference),
        cmocka_unit_test(test_row_passes_match_reference),
        cmocka_unit_test(test_glm_epilogue_matches_reference),
        cmocka_unit_test(test_glm_tile_matches_reference),
        cmocka_unit_test(test_glm_tile_i8_matches_tile),
        cmocka_unit_test(test_i8_quads_and_bound),
        cmocka_unit_test(test_blas_identity),
        cmocka_unit_test(test_blas_quiesce),
        cmocka_unit_test(test_cuda_probe_answers),
    };
    return cmocka_run_group_tests_name("kernels", tests, NULL, NULL);
}
