/* kernels.h — the compute dispatch table.
 *
 * Nodes never call BLAS or CUDA directly: they call through a struct nf_kernels.
 * `nf_kernels_ref` (kernels/ref/) is plain C, written for clarity and used as
 * the oracle in tests; `nf_kernels_blas` (kernels/blas/) overrides entries with
 * OpenBLAS/LAPACK; a CUDA table (kernels/cuda/) comes with the GPU backend.
 * Every entry of every table is checked against the reference by
 * tests/unit/test_kernels.c.
 *
 * Conventions: float32 data, row-major, 64-bit sizes. Moments accumulate in
 * double so that standardisation of long time series is not biased by float
 * round-off. Entries that can fail return 0 or a negative NF_E* code (error.h).
 */
#ifndef NF_KERNELS_H
#define NF_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

enum nf_standardize { NF_STD_NONE = 0, NF_STD_ZSCORE, NF_STD_CENTER };

struct nf_kernels {
    const char *name;
    /* C = alpha * op(A) * op(B) + beta * C, row-major; op transposes when t* set.
     * op(A) is m×k, op(B) is k×n, C is m×n. */
    void (*sgemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const float *A, int64_t lda, const float *B, int64_t ldb,
                  float beta, float *C, int64_t ldc);
    /* Per-column mean and population standard deviation of a rows×cols matrix. */
    void (*col_moments)(const float *X, int64_t rows, int64_t cols,
                        double *mean, double *std);
    /* In place, per column: zscore ((x-mean)/std, std 0 -> 1) or center. */
    void (*standardize)(float *X, int64_t rows, int64_t cols, enum nf_standardize mode);
    /* Thin SVD of a row-major rows x cols matrix A (not modified): r = min(rows, cols);
     * U is rows x r, s has r values in descending order, Vt is r x cols (all row-major),
     * A = U diag(s) Vt. U has orthonormal columns and Vt orthonormal rows even when A
     * is rank-deficient. rows or cols == 0 does nothing. Returns 0, NF_ENOMEM, or
     * NF_EDATA when it does not converge or A holds NaN or inf (NF_EBUG only if
     * LAPACK rejects an argument). Kept last so designated initialisers stay valid. */
    int (*svd)(const float *A, int64_t rows, int64_t cols, float *U, float *s, float *Vt);
    /* C = A Aᵀ in double, both triangles filled: A is n x k row-major (lda), C is
     * n x n (ldc). The Gram matrix of closed-form ridge models with more features
     * than samples. NULL in tables without it (the caller uses the CPU's). */
    void (*dsyrk)(int64_t n, int64_t k, const double *A, int64_t lda, double *C, int64_t ldc);
};

extern const struct nf_kernels nf_kernels_ref;
extern const struct nf_kernels nf_kernels_blas;
/* The best CPU table of this build. */
const struct nf_kernels *nf_kernels_cpu(void);

/* BLAS identification for `nlflow devices` and benchmark records. */
const char *nf_blas_name(void);          /* e.g. "OpenBLAS 0.3.21" */
const char *nf_blas_core(void);          /* active kernel / core type, e.g. "Haswell" */
int nf_blas_threads(void);
void nf_blas_set_threads(int n);

/* CUDA: whether this build has CUDA and a usable device; `why` explains when not. */
bool nf_cuda_available(char *why, size_t why_size);
/* Fills a one-line description of the GPU (name, memory, cc, driver/runtime). */
void nf_cuda_describe(char *buf, size_t size);

#endif
