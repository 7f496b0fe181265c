/* kernels_blas.c — the OpenBLAS kernel table, `nf_kernels_blas`, and BLAS identity.
 *
 * sgemm goes to cblas_sgemm; the nodes' vector loops (perm_tile,
 * ridge_error_sums, the row_* passes) are the vectorised versions of
 * kernels/simd/. OpenBLAS takes 32-bit sizes (blasint), so larger
 * problems are cut into pieces that fit; a leading dimension that does not fit
 * cannot be cut and falls back to the reference loop. The column reductions
 * (col_moments, standardize) are our own loops: they walk the row-major matrix
 * row by row, accumulating per-column sums in double, so memory is read
 * contiguously instead of striding by `cols` floats per element. They are two-pass
 * (mean, then squared deviations) for the same precision reason as the reference,
 * and for a given column they add in the same order, so their moments match the
 * reference bit for bit.
 *
 * svd calls LAPACK's sgesdd (divide and conquer) through the Fortran symbol that
 * Debian's libopenblas exports (there is no LAPACKE), falling back to sgesvd when
 * sgesdd does not converge. LAPACK is column-major, and a row-major rows x cols A
 * is the column-major cols x rows matrix A^T, so the call factors A^T = U' S V'^T
 * without any transposition: read back as row-major, U' is Vt and V'^T is U.
 *
 * Also here: nf_kernels_cpu() (the best CPU table of this build) and the
 * OpenBLAS identification used by `nlflow devices` and benchmark records.
 */
#include "kernels/kernels.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* LAPACK's Fortran entry points (column-major, every argument by reference). The
 * trailing size_t arguments are the hidden lengths gfortran passes for CHARACTER
 * arguments; leaving them out happens to work but is undefined (the gfortran
 * tail-call breakage that hit R and numpy), and passing them is free. */
extern void sgesdd_(const char *jobz, const int *m, const int *n, float *a, const int *lda,
                    float *s, float *u, const int *ldu, float *vt, const int *ldvt,
                    float *work, const int *lwork, int *iwork, int *info, size_t jobz_len);
extern void sgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, float *a,
                    const int *lda, float *s, float *u, const int *ldu, float *vt,
                    const int *ldvt, float *work, const int *lwork, int *info,
                    size_t jobu_len, size_t jobvt_len);

/* Columns standardised per block: the block's per-column mean and divisor live on
 * the stack (2 × 4 KiB), so standardize cannot fail for lack of memory, and a
 * block of a few hundred rows stays in cache across its three passes. */
enum { STANDARDIZE_BLOCK_COLS = 512 };

/* The largest size one cblas call accepts. */
#define BLAS_SIZE_MAX ((int64_t)INT_MAX)

static void scale_c(int64_t m, int64_t n, float beta, float *C, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++)
            C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

static void blas_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                       const float *A, int64_t lda, const float *B, int64_t ldb,
                       float beta, float *C, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    /* cblas rejects lda < 1 even when k == 0, and there is nothing to multiply. */
    if (k <= 0) {
        scale_c(m, n, beta, C, ldc);
        return;
    }
    if (lda > BLAS_SIZE_MAX || ldb > BLAS_SIZE_MAX || ldc > BLAS_SIZE_MAX) {
        nf_kernels_ref.sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    /* Split any size cblas cannot take: rows of C, columns of C, then the inner
     * dimension, where later pieces accumulate onto the first (beta = 1). */
    if (m > BLAS_SIZE_MAX) {
        int64_t half = m / 2;
        blas_sgemm(ta, tb, half, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        blas_sgemm(ta, tb, m - half, n, k, alpha, ta ? A + half : A + half * lda, lda,
                   B, ldb, beta, C + half * ldc, ldc);
        return;
    }
    if (n > BLAS_SIZE_MAX) {
        int64_t half = n / 2;
        blas_sgemm(ta, tb, m, half, k, alpha, A, lda, B, ldb, beta, C, ldc);
        blas_sgemm(ta, tb, m, n - half, k, alpha, A, lda, tb ? B + half * ldb : B + half,
                   ldb, beta, C + half, ldc);
        return;
    }
    if (k > BLAS_SIZE_MAX) {
        int64_t half = k / 2;
        blas_sgemm(ta, tb, m, n, half, alpha, A, lda, B, ldb, beta, C, ldc);
        blas_sgemm(ta, tb, m, n, k - half, alpha, ta ? A + half * lda : A + half, lda,
                   tb ? B + half : B + half * ldb, ldb, 1.0f, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                (blasint)m, (blasint)n, (blasint)k, alpha, A, (blasint)lda, B, (blasint)ldb,
                beta, C, (blasint)ldc);
}

/* Moments of columns [first, first + width) of X into mean[0..width), std[0..width). */
static void block_moments(const float *X, int64_t rows, int64_t cols, int64_t first,
                          int64_t width, double *mean, double *std)
{
    for (int64_t j = 0; j < width; j++) {
        mean[j] = 0.0;
        std[j] = 0.0;
    }
    if (rows == 0)
        return;
    for (int64_t i = 0; i < rows; i++) {
        const float *row = X + i * cols + first;
        for (int64_t j = 0; j < width; j++)
            mean[j] += row[j];
    }
    for (int64_t j = 0; j < width; j++)
        mean[j] /= (double)rows;
    for (int64_t i = 0; i < rows; i++) {
        const float *row = X + i * cols + first;
        for (int64_t j = 0; j < width; j++) {
            double d = row[j] - mean[j];
            std[j] += d * d;
        }
    }
    for (int64_t j = 0; j < width; j++)
        std[j] = sqrt(std[j] / (double)rows);
}

static void blas_col_moments(const float *X, int64_t rows, int64_t cols,
                             double *mean, double *std)
{
    /* The caller's output arrays double as the accumulators: no allocation. */
    block_moments(X, rows, cols, 0, cols, mean, std);
}

static void blas_standardize(float *X, int64_t rows, int64_t cols, enum nf_standardize mode)
{
    if (mode != NF_STD_ZSCORE && mode != NF_STD_CENTER)
        return;
    double mean[STANDARDIZE_BLOCK_COLS], std[STANDARDIZE_BLOCK_COLS];
    for (int64_t first = 0; first < cols; first += STANDARDIZE_BLOCK_COLS) {
        int64_t width = cols - first < STANDARDIZE_BLOCK_COLS ? cols - first
                                                              : STANDARDIZE_BLOCK_COLS;
        block_moments(X, rows, cols, first, width, mean, std);
        /* Reuse std[] as the reciprocal of the divisor: a multiply per element
         * instead of a divide (differs from the reference by at most 1 ulp). */
        for (int64_t j = 0; j < width; j++)
            std[j] = (mode == NF_STD_ZSCORE && std[j] != 0.0) ? 1.0 / std[j] : 1.0;
        for (int64_t i = 0; i < rows; i++) {
            float *row = X + i * cols + first;
            for (int64_t j = 0; j < width; j++)
                row[j] = (float)((row[j] - mean[j]) * std[j]);
        }
    }
}

/* One LAPACK thin SVD of the column-major m x n matrix `a` (overwritten) into
 * u (m x min(m,n), ld m), s and vt (min(m,n) x n, ld min(m,n)): sgesdd when
 * `divide_and_conquer`, else sgesvd. Asks LAPACK for its workspace size first.
 * Returns 0 with LAPACK's info in *info, or NF_ENOMEM. */
static int lapack_thin_svd(bool divide_and_conquer, float *a, int m, int n, float *s,
                           float *u, float *vt, int *iwork, int *info)
{
    int r = m < n ? m : n, lwork = -1;
    float optimal_lwork = 0.0f;
    if (divide_and_conquer)
        sgesdd_("S", &m, &n, a, &m, s, u, &m, vt, &r, &optimal_lwork, &lwork, iwork, info, 1);
    else
        sgesvd_("S", "S", &m, &n, a, &m, s, u, &m, vt, &r, &optimal_lwork, &lwork, info, 1, 1);
    if (*info != 0)
        return 0;
    /* The size comes back as a float, which older LAPACK rounds down past 2^24:
     * add a little. */
    double wanted = ceil((double)optimal_lwork * (1.0 + 1e-6)) + 1.0;
    lwork = wanted > (double)INT_MAX ? INT_MAX : (int)wanted;
    float *work = nf_malloc((size_t)lwork * sizeof *work);
    if (!work)
        return NF_ENOMEM;
    if (divide_and_conquer)
        sgesdd_("S", &m, &n, a, &m, s, u, &m, vt, &r, work, &lwork, iwork, info, 1);
    else
        sgesvd_("S", "S", &m, &n, a, &m, s, u, &m, vt, &r, work, &lwork, info, 1, 1);
    free(work);
    return 0;
}

static int blas_svd(const float *A, int64_t rows, int64_t cols, float *U, float *s, float *Vt)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    /* LAPACK may loop forever or return garbage on non-finite input. */
    for (int64_t e = 0; e < rows * cols; e++)
        if (!isfinite(A[e]))
            return NF_EDATA;
    /* LAPACK takes 32-bit sizes and indexes A with them. A design matrix this
     * large does not occur; the reference is slow there but correct. */
    if (rows * cols > BLAS_SIZE_MAX)
        return nf_kernels_ref.svd(A, rows, cols, U, s, Vt);

    int m = (int)cols, n = (int)rows, r = m < n ? m : n, info = 0;
    int rc = NF_ENOMEM;
    float *copy = nf_malloc((size_t)(rows * cols) * sizeof *copy);
    int *iwork = nf_malloc(8 * (size_t)r * sizeof *iwork);
    if (!copy || !iwork)
        goto fail;
    /* Column-major m x n with ld m is exactly the row-major buffer of A: u' lands
     * in Vt (ld cols) and vt' in U (ld r). Each attempt overwrites its input. */
    memcpy(copy, A, (size_t)(rows * cols) * sizeof *copy);
    NF_TRY(rc = lapack_thin_svd(true, copy, m, n, s, Vt, U, iwork, &info));
    if (info > 0) {
        /* sgesdd's divide and conquer sometimes fails where the QR iteration of
         * sgesvd converges. */
        memcpy(copy, A, (size_t)(rows * cols) * sizeof *copy);
        NF_TRY(rc = lapack_thin_svd(false, copy, m, n, s, Vt, U, iwork, &info));
    }
    /* info < 0 names an illegal argument: a bug in this function. */
    rc = info == 0 ? 0 : info > 0 ? NF_EDATA : NF_EBUG;
fail:
    free(copy);
    free(iwork);
    return rc;
}

/* cblas_dsyrk fills the lower triangle; the upper is mirrored so that C is
 * exactly symmetric. Sizes beyond 32 bits go to the reference. */
static void blas_dsyrk(int64_t n, int64_t k, const double *A, int64_t lda, double *C, int64_t ldc)
{
    if (n <= 0)
        return;
    if (n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldc > INT32_MAX) {
        nf_kernels_ref.dsyrk(n, k, A, lda, C, ldc);
        return;
    }
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (blasint)n, (blasint)k, 1.0, A, (blasint)lda, 0.0, C,
                (blasint)ldc);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++)
            C[j * ldc + i] = C[i * ldc + j];
}

/* Sizes beyond 32 bits go to the reference (the glm node's are blocks). */
static void blas_dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *A, int64_t lda,
                       const double *B, int64_t ldb, double *C, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (k <= 0 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX || lda > INT32_MAX || ldb > INT32_MAX ||
        ldc > INT32_MAX) {
        nf_kernels_ref.dgemm(ta, tb, m, n, k, A, lda, B, ldb, C, ldc);
        return;
    }
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (blasint)m,
                (blasint)n, (blasint)k, 1.0, A, (blasint)lda, B, (blasint)ldb, 0.0, C, (blasint)ldc);
}

const struct nf_kernels nf_kernels_blas = {
    .name = "blas",
    .sgemm = blas_sgemm,
    .col_moments = blas_col_moments,
    .standardize = blas_standardize,
    .svd = blas_svd,
    .dsyrk = blas_dsyrk,
    .dgemm = blas_dgemm,
    NF_KERNELS_SIMD_ENTRIES,
};

const struct nf_kernels *nf_kernels_cpu(void)
{
    return &nf_kernels_blas;
}

/* OpenBLAS build string, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell
 * MAX_THREADS=64". The string is static inside OpenBLAS. */
const char *nf_blas_name(void)
{
    const char *config = openblas_get_config();
    return config ? config : "OpenBLAS (unknown version)";
}

/* The kernel set OpenBLAS picked at load time (honours OPENBLAS_CORETYPE). */
const char *nf_blas_core(void)
{
    const char *core = openblas_get_corename();
    return core ? core : "unknown";
}

int nf_blas_threads(void)
{
    return openblas_get_num_threads();
}

/* OpenBLAS (pthreads build) starts its worker threads when the library is
 * loaded, and an idle worker spins on sched_yield for about 2^28 TSC cycles
 * (~0.1 s) before it sleeps: in a short run that spin takes a core's share
 * from the engine's own threads, which split the work themselves and call BLAS
 * single-threaded. So nlflow starts with one BLAS thread and no workers; code
 * that wants BLAS threads (the SGEMM yardstick, calibration) asks for them,
 * and OpenBLAS starts them again then. Weak: other BLAS builds link without. */
extern int blas_thread_shutdown_(void) __attribute__((weak));

bool nf_blas_quiesce(void)
{
    if (!blas_thread_shutdown_)
        return false;
    openblas_set_num_threads(1);   /* before the shutdown: setting it later restarts the workers */
    return blas_thread_shutdown_() == 0;
}

void nf_blas_set_threads(int n)
{
    if (n < 1)
        n = 1;
    if (n != openblas_get_num_threads())   /* any set restarts stopped workers */
        openblas_set_num_threads(n);
}
