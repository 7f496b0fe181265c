/* kernels_ref.c — the reference kernel table, `nf_kernels_ref`.
 *
 * Plain C loops written to be obviously right rather than fast. Every other
 * table (BLAS, CUDA) is checked against this one by tests/unit/test_kernels.c,
 * so clarity wins over speed here: one output element at a time, every dot
 * product and every moment accumulated in double. Nodes should use
 * nf_kernels_cpu(), not this table.
 *
 * Edge conventions shared by all tables:
 *   sgemm: m, n == 0 is a no-op; k == 0 gives C = beta*C; beta == 0 overwrites
 *          C without reading it (as BLAS does, so NaN garbage in C is ignored).
 *   col_moments: rows == 0 gives mean 0 and std 0.
 *   standardize: zscore divides by std, or by 1 where std == 0 (sklearn's
 *          `scale`), so constant columns become zeros instead of NaN.
 */
#include "kernels/kernels.h"

#include <math.h>

/* Element (row, col) of op(M), where M is stored row-major with leading dimension ld. */
static float op_at(const float *M, int64_t ld, bool transposed, int64_t row, int64_t col)
{
    return transposed ? M[col * ld + row] : M[row * ld + col];
}

static void ref_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *A, int64_t lda, const float *B, int64_t ldb,
                      float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double dot = 0.0;
            for (int64_t p = 0; p < k; p++)
                dot += (double)op_at(A, lda, ta, i, p) * (double)op_at(B, ldb, tb, p, j);
            double result = (double)alpha * dot;
            if (beta != 0.0f)
                result += (double)beta * (double)C[i * ldc + j];
            C[i * ldc + j] = (float)result;
        }
    }
}

/* Mean and population std of column `col`. Two passes (mean, then squared
 * deviations from it): the one-pass sum-of-squares formula loses digits when
 * |mean| >> std, as in raw BOLD signal. */
static void column_moments(const float *X, int64_t rows, int64_t cols, int64_t col,
                           double *mean, double *std)
{
    if (rows == 0) {
        *mean = 0.0;
        *std = 0.0;
        return;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < rows; i++)
        sum += X[i * cols + col];
    double column_mean = sum / (double)rows;

    double squared_deviations = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        double d = X[i * cols + col] - column_mean;
        squared_deviations += d * d;
    }
    *mean = column_mean;
    *std = sqrt(squared_deviations / (double)rows);
}

static void ref_col_moments(const float *X, int64_t rows, int64_t cols,
                            double *mean, double *std)
{
    for (int64_t j = 0; j < cols; j++)
        column_moments(X, rows, cols, j, &mean[j], &std[j]);
}

static void ref_standardize(float *X, int64_t rows, int64_t cols, enum nf_standardize mode)
{
    if (mode != NF_STD_ZSCORE && mode != NF_STD_CENTER)
        return;
    for (int64_t j = 0; j < cols; j++) {
        double mean, std;
        column_moments(X, rows, cols, j, &mean, &std);
        double divisor = (mode == NF_STD_ZSCORE && std != 0.0) ? std : 1.0;
        for (int64_t i = 0; i < rows; i++)
            X[i * cols + j] = (float)((X[i * cols + j] - mean) / divisor);
    }
}

const struct nf_kernels nf_kernels_ref = {
    .name = "ref",
    .sgemm = ref_sgemm,
    .col_moments = ref_col_moments,
    .standardize = ref_standardize,
};
