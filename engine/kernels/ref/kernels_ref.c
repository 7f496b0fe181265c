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
 *   svd:   rows or cols == 0 is a no-op returning 0 (r = 0). Singular values
 *          that are zero to working precision come out as exactly 0, and their
 *          singular vectors are completed to an orthonormal set, so U^T U = I
 *          and Vt Vt^T = I also for rank-deficient A.
 */
#include "kernels/kernels.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#include "core/util.h"

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

/* ---- svd: one-sided Jacobi (Hestenes) --------------------------------------
 *
 * The columns g_1..g_n of a tall m x n matrix G (m >= n), held in double, are
 * rotated in pairs until every pair is orthogonal, |g_i.g_j| <= tol |g_i| |g_j|.
 * Applying the same rotations to V = I keeps G = A V, so at the end the column
 * norms are the singular values, the normalised columns are the left singular
 * vectors and A = U S V^T. A wide A is handled as its transpose: A^T = U' S V'^T
 * gives U = V' and Vt = U'^T. One-sided Jacobi is slow (O(m n^2) per sweep) but
 * simple and accurate to high relative precision, which is what an oracle needs.
 */

/* Sweeps over all column pairs before giving up; quadratic convergence usually
 * needs fewer than 10. */
enum { JACOBI_MAX_SWEEPS = 60 };

/* Makes columns i and j of the column-major m x n G orthogonal by one plane
 * rotation, applied to the columns of the n x n V as well. Returns false when
 * they were already orthogonal within `tolerance` (nothing was changed). */
static bool jacobi_rotate_pair(double *G, int64_t m, double *V, int64_t n, int64_t i,
                               int64_t j, double tolerance)
{
    double *gi = G + i * m, *gj = G + j * m;
    double alpha = 0.0, beta = 0.0, gamma = 0.0;
    for (int64_t k = 0; k < m; k++) {
        alpha += gi[k] * gi[k];
        beta += gj[k] * gj[k];
        gamma += gi[k] * gj[k];
    }
    if (gamma == 0.0 || fabs(gamma) <= tolerance * sqrt(alpha) * sqrt(beta))
        return false;
    /* The smaller root t = tan(theta) of t^2 + 2 zeta t - 1 = 0 zeroes the new
     * inner product; hypot avoids overflow when zeta is huge. */
    double zeta = (beta - alpha) / (2.0 * gamma);
    double t = (zeta >= 0.0 ? 1.0 : -1.0) / (fabs(zeta) + hypot(1.0, zeta));
    double c = 1.0 / sqrt(1.0 + t * t), s = c * t;
    for (int64_t k = 0; k < m; k++) {
        double a = gi[k], b = gj[k];
        gi[k] = c * a - s * b;
        gj[k] = s * a + c * b;
    }
    double *vi = V + i * n, *vj = V + j * n;
    for (int64_t k = 0; k < n; k++) {
        double a = vi[k], b = vj[k];
        vi[k] = c * a - s * b;
        vj[k] = s * a + c * b;
    }
    return true;
}

/* Fills column q of the column-major m x r Q with a unit vector orthogonal to
 * columns 0..q-1 (which are orthonormal): the unit basis vector e_k that sticks
 * out most of their span, orthogonalised twice (classical Gram-Schmidt loses
 * orthogonality in one pass). Used for the singular vectors of zero singular
 * values, which the Jacobi iteration leaves as zero columns. */
static void complete_orthonormal_column(double *Q, int64_t m, int64_t q)
{
    int64_t best_k = 0;
    double best_residual = -1.0;
    for (int64_t k = 0; k < m; k++) {
        double projected = 0.0;
        for (int64_t l = 0; l < q; l++)
            projected += Q[l * m + k] * Q[l * m + k];
        if (1.0 - projected > best_residual) {
            best_residual = 1.0 - projected;
            best_k = k;
        }
    }
    double *v = Q + q * m;
    for (int64_t k = 0; k < m; k++)
        v[k] = k == best_k ? 1.0 : 0.0;
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t l = 0; l < q; l++) {
            const double *u = Q + l * m;
            double dot = 0.0;
            for (int64_t k = 0; k < m; k++)
                dot += u[k] * v[k];
            for (int64_t k = 0; k < m; k++)
                v[k] -= dot * u[k];
        }
    }
    double norm = 0.0;
    for (int64_t k = 0; k < m; k++)
        norm += v[k] * v[k];
    norm = sqrt(norm);
    for (int64_t k = 0; k < m; k++)
        v[k] /= norm;
}

static int ref_svd(const float *A, int64_t rows, int64_t cols, float *U, float *s, float *Vt)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    for (int64_t e = 0; e < rows * cols; e++)
        if (!isfinite(A[e]))
            return NF_EDATA;

    /* G is the tall one of A and A^T, column-major: column j is A[:, j] when A
     * is tall, A[j, :] when it is wide. */
    bool wide = rows < cols;
    int64_t m = wide ? cols : rows, n = wide ? rows : cols;
    int rc = NF_ENOMEM;
    double *G = NULL, *V = NULL, *left = NULL, *norms = NULL;
    int64_t *order = NULL;
    if ((uint64_t)m > SIZE_MAX / sizeof(double) / (uint64_t)n)
        goto fail;
    G = nf_malloc((size_t)(m * n) * sizeof *G);
    V = nf_malloc((size_t)(n * n) * sizeof *V);
    left = nf_malloc((size_t)(m * n) * sizeof *left);
    norms = nf_malloc((size_t)n * sizeof *norms);
    order = nf_malloc((size_t)n * sizeof *order);
    if (!G || !V || !left || !norms || !order)
        goto fail;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            G[wide ? i * m + j : j * m + i] = A[i * cols + j];
    for (int64_t e = 0; e < n * n; e++)
        V[e] = e % (n + 1) == 0 ? 1.0 : 0.0;

    /* Round-off in the inner products is about m * eps relative, so a tighter
     * tolerance than that could never be met. */
    double tolerance = fmax(1e-12, (double)m * DBL_EPSILON);
    bool converged = false;
    for (int sweep = 0; sweep < JACOBI_MAX_SWEEPS && !converged; sweep++) {
        bool rotated = false;
        for (int64_t i = 0; i < n - 1; i++)
            for (int64_t j = i + 1; j < n; j++)
                rotated |= jacobi_rotate_pair(G, m, V, n, i, j, tolerance);
        converged = !rotated;
    }
    rc = NF_EDATA;
    if (!converged)
        goto fail;

    /* Column norms are the singular values; order them descending (insertion
     * sort, stable, so equal values keep their column order). */
    double largest = 0.0;
    for (int64_t j = 0; j < n; j++) {
        double sum = 0.0;
        for (int64_t k = 0; k < m; k++)
            sum += G[j * m + k] * G[j * m + k];
        norms[j] = sqrt(sum);
        largest = fmax(largest, norms[j]);
        int64_t at = j;
        while (at > 0 && norms[order[at - 1]] < norms[j]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = j;
    }
    /* A column this small relative to the largest is round-off from rotating
     * linearly dependent columns: its singular value is 0 and its direction is
     * noise, so it is replaced by a completion of the orthonormal set. */
    double zero_below = largest * (double)m * DBL_EPSILON;
    for (int64_t q = 0; q < n; q++) {
        double norm = norms[order[q]];
        if (norm <= zero_below || norm == 0.0) {
            norms[order[q]] = 0.0;
            complete_orthonormal_column(left, m, q);
        } else {
            for (int64_t k = 0; k < m; k++)
                left[q * m + k] = G[order[q] * m + k] / norm;
        }
    }

    /* Tall: U = left (m x r), Vt = V^T. Wide: U = V (the right vectors of A^T),
     * Vt = left^T. r = n either way. */
    int64_t r = n;
    for (int64_t q = 0; q < r; q++) {
        s[q] = (float)norms[order[q]];
        const double *left_q = left + q * m, *right_q = V + order[q] * n;
        const double *u_q = wide ? right_q : left_q, *v_q = wide ? left_q : right_q;
        for (int64_t i = 0; i < rows; i++)
            U[i * r + q] = (float)u_q[i];
        for (int64_t j = 0; j < cols; j++)
            Vt[q * cols + j] = (float)v_q[j];
    }
    rc = 0;
fail:
    free(G);
    free(V);
    free(left);
    free(norms);
    free(order);
    return rc;
}

static void ref_dsyrk(int64_t n, int64_t k, const double *A, int64_t lda, double *C, int64_t ldc)
{
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) {
            double s = 0;
            for (int64_t q = 0; q < k; q++)
                s += A[i * lda + q] * A[j * lda + q];
            C[i * ldc + j] = C[j * ldc + i] = s;
        }
}

static void ref_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *A, int64_t lda,
                      const double *B, int64_t ldb, double *C, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t q = 0; q < k; q++)
                s += (ta ? A[q * lda + i] : A[i * lda + q]) * (tb ? B[j * ldb + q] : B[q * ldb + j]);
            C[i * ldc + j] = s;
        }
}

const struct nf_kernels nf_kernels_ref = {
    .name = "ref",
    .sgemm = ref_sgemm,
    .col_moments = ref_col_moments,
    .standardize = ref_standardize,
    .svd = ref_svd,
    .dsyrk = ref_dsyrk,
    .dgemm = ref_dgemm,
    .perm_tile = nf_perm_tile_ref,
    .perm_tile_prepare = nf_perm_tile_prepare_ref,
    .ridge_error_sums = nf_ridge_error_sums_ref,
    .row_accumulate = nf_row_accumulate_ref,
    .row_sq_dev = nf_row_sq_dev_ref,
    .row_standardize = nf_row_standardize_ref,
    .row_gemv_double = nf_row_gemv_double_ref,
    .rows_gemm_f32 = nf_rows_gemm_f32_ref,
    .perm_signed_t_f32 = nf_perm_signed_t_f32_ref,
    .row_axpy = nf_row_axpy_ref,
    .row_residual = nf_row_residual_ref,
    .glm_epilogue = nf_glm_epilogue_ref,
    .glm_tile = nf_glm_tile_ref,
    .glm_tile_i8 = nf_glm_tile_i8_ref,
};
