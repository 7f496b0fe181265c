/* gpu_emu.c — a CPU emulation of the CUDA runtime, cuBLAS and cuSOLVER calls
 * and of the epilogue kernels the GPU nodes use, for tests/unit/test_gpu_emu.
 *
 * Linked instead of the CUDA libraries (and instead of the library's
 * cuda_host.o and gpu_kernels.o, whose symbols are defined here first), it lets
 * the whole host side of the GPU backend — the context, the arena and pinned
 * buffers, the row-major cuBLAS wrappers and their transpose trick, the SVD's
 * orientation and transposes, the nodes' memory plans, block pipelines,
 * layouts, strides, near-tie lists and checkpoints — run on a machine with no
 * GPU, against the CPU nodes, in every CUDA build. "Device" memory is host
 * memory; streams and events complete every call at once (so this cannot find
 * a missing synchronisation: the real device run of test_gpu does); cuBLAS
 * calls are column-major loops with BLAS semantics, gesvdj is LAPACK's sgesvd,
 * and the kernels loop over their threads calling the bodies the device runs
 * (gpu_kernel_bodies.h). The permute epilogue's reductions are done
 * sequentially, with the same results (a maximum, counts, a list of pairs).
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu.h"
#include "kernels/cuda/gpu_kernel_bodies.h"

/* LAPACK (OpenBLAS), column-major, for gesvdj. */
extern void sgesvd_(const char *jobu, const char *jobvt, const int *m, const int *n, float *a, const int *lda,
                    float *s, float *u, const int *ldu, float *vt, const int *ldvt, float *work, const int *lwork,
                    int *info, size_t jobu_len, size_t jobvt_len);

/* Opaque handle types of the real libraries. */
struct CUstream_st { int unused; };
struct CUevent_st { int unused; };
struct cublasContext { int unused; };
struct cusolverDnContext { int unused; };
struct gesvdjInfo { int unused; };

/* ---- availability (cuda_host.c) ---- */

bool nf_cuda_available(char *why, size_t why_size)
{
    if (why && why_size)
        snprintf(why, why_size, "emulated");
    return true;
}

void nf_cuda_describe(char *buf, size_t size)
{
    if (buf && size)
        snprintf(buf, size, "CPU emulation of a GPU (tests only)");
}

/* ---- CUDA runtime ---- */

cudaError_t cudaGetLastError(void)
{
    return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t error)
{
    return error == cudaSuccess ? "no error" : "emulated error";
}

const char *cudaGetErrorName(cudaError_t error)
{
    return error == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated";
}

cudaError_t cudaSetDevice(int device)
{
    return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
    if (device != 0)
        return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof *prop);
    snprintf(prop->name, sizeof prop->name, "emulated");
    prop->totalGlobalMem = (size_t)4 << 30;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    (void)flags;
    *stream = calloc(1, sizeof **stream);
    return *stream ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    free(stream);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
    (void)stream;
    (void)event;
    (void)flags;
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    *event = calloc(1, sizeof **event);
    return *event ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    (void)flags;
    return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    free(event);
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    (void)event;
    (void)stream;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    (void)event;
    return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    (void)start;
    (void)end;
    *ms = 1.0f;
    return cudaSuccess;
}

/* Device memory: a budget (4 GiB, or nf_emu_set_device_memory's) that
 * cudaMalloc draws from and cudaMemGetInfo reports, so that out-of-memory
 * paths and evictions happen here as on a device; and a count of the bytes
 * copied host to device, so that tests see what a node uploaded. */
static size_t emu_total = (size_t)4 << 30, emu_used;
static size_t emu_h2d;
enum { EMU_HEADER = 64 };   /* keeps allocations 64-byte aligned */

void nf_emu_set_device_memory(size_t total)
{
    emu_total = total ? total : (size_t)4 << 30;
}

size_t nf_emu_h2d_bytes(void)
{
    return emu_h2d;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total)
{
    *free_bytes = emu_total > emu_used ? emu_total - emu_used : 0;
    *total = emu_total;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t size)
{
    if (size > emu_total - (emu_used < emu_total ? emu_used : emu_total))
        return cudaErrorMemoryAllocation;
    char *p = malloc(size + EMU_HEADER);
    if (!p)
        return cudaErrorMemoryAllocation;
    memcpy(p, &size, sizeof size);
    emu_used += size;
    *ptr = p + EMU_HEADER;
    /* a pattern that is not zero, so that reading memory never written shows */
    memset(*ptr, 0xff, size);
    return cudaSuccess;
}

cudaError_t cudaFree(void *ptr)
{
    if (!ptr)
        return cudaSuccess;
    char *p = (char *)ptr - EMU_HEADER;
    size_t size;
    memcpy(&size, p, sizeof size);
    emu_used -= size;
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags)
{
    (void)flags;
    *ptr = malloc(size ? size : 1);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void *ptr)
{
    free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
    if (kind == cudaMemcpyHostToDevice)
        emu_h2d += count;
    if (count)
        memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream)
{
    (void)stream;
    if (width > dpitch || width > spitch)
        return cudaErrorInvalidPitchValue;
    if (kind == cudaMemcpyHostToDevice)
        emu_h2d += width * height;
    for (size_t i = 0; i < height; i++)
        memmove((char *)dst + i * dpitch, (const char *)src + i * spitch, width);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t count, cudaStream_t stream)
{
    (void)stream;
    memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaMemset2DAsync(void *ptr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream)
{
    (void)stream;
    for (size_t i = 0; i < height; i++)
        memset((char *)ptr + i * pitch, value, width);
    return cudaSuccess;
}

/* ---- cuBLAS (column-major, BLAS semantics) ---- */

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle)
{
    *handle = calloc(1, sizeof **handle);
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle)
{
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream)
{
    (void)handle;
    (void)stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    (void)handle;
    return mode == CUBLAS_DEFAULT_MATH ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes)
{
    (void)handle;
    (void)workspace;
    (void)bytes;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    return status == CUBLAS_STATUS_SUCCESS ? "success" : "emulated cuBLAS error";
}

/* element (i, j) of op(X), X column-major with leading dimension ld */
static float at(const float *X, int ld, bool t, int i, int j)
{
    return t ? X[j + (int64_t)i * ld] : X[i + (int64_t)j * ld];
}

static cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                           const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    bool at_ = ta != CUBLAS_OP_N, bt = tb != CUBLAS_OP_N;
    /* BLAS's argument checks: the leading dimensions of the stored matrices */
    if (m < 0 || n < 0 || k < 0 || lda < (at_ ? k : m) || lda < 1 || ldb < (bt ? n : k) || ldb < 1 || ldc < m ||
        ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double acc = 0;
            for (int l = 0; l < k; l++)
                acc += (double)at(A, lda, at_, i, l) * at(B, ldb, bt, l, j);
            float *c = C + i + (int64_t)j * ldc;
            *c = beta == 0.0f ? alpha * (float)acc : alpha * (float)acc + beta * *c;
        }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc)
{
    (void)handle;
    return gemm(transa, transb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                         int m, int n, int k, const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb, long long int strideB,
                                         const float *beta, float *C, int ldc, long long int strideC, int batchCount)
{
    (void)handle;
    for (int b = 0; b < batchCount; b++) {
        cublasStatus_t st = gemm(transa, transb, m, n, k, *alpha, A + b * strideA, lda, B + b * strideB, ldb, *beta,
                                 C + b * strideC, ldc);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgeam(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                           const float *alpha, const float *A, int lda, const float *beta, const float *B, int ldb,
                           float *C, int ldc)
{
    (void)handle;
    bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
    if (lda < (ta ? n : m) || ldc < m || (*beta != 0.0f && ldb < (tb ? n : m)))
        return CUBLAS_STATUS_INVALID_VALUE;
    /* out of place only here (the wrappers transpose into another buffer) */
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            float v = *alpha * at(A, lda, ta, i, j);
            if (*beta != 0.0f)
                v += *beta * at(B, ldb, tb, i, j);
            C[i + (int64_t)j * ldc] = v;
        }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- cuSOLVER: gesvdj as LAPACK's sgesvd ---- */

cusolverStatus_t cusolverDnCreate(cusolverDnHandle_t *handle)
{
    *handle = calloc(1, sizeof **handle);
    return *handle ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_ALLOC_FAILED;
}

cusolverStatus_t cusolverDnDestroy(cusolverDnHandle_t handle)
{
    free(handle);
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSetStream(cusolverDnHandle_t handle, cudaStream_t stream)
{
    (void)handle;
    (void)stream;
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnCreateGesvdjInfo(gesvdjInfo_t *info)
{
    *info = calloc(1, sizeof **info);
    return *info ? CUSOLVER_STATUS_SUCCESS : CUSOLVER_STATUS_ALLOC_FAILED;
}

cusolverStatus_t cusolverDnDestroyGesvdjInfo(gesvdjInfo_t info)
{
    free(info);
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSgesvdj_bufferSize(cusolverDnHandle_t handle, cusolverEigMode_t jobz, int econ, int m,
                                              int n, const float *A, int lda, const float *S, const float *U, int ldu,
                                              const float *V, int ldv, int *lwork, gesvdjInfo_t params)
{
    (void)handle;
    (void)A;
    (void)S;
    (void)U;
    (void)V;
    (void)params;
    if (jobz != CUSOLVER_EIG_MODE_VECTOR || econ != 1 || lda < m || ldu < m || ldv < n)
        return CUSOLVER_STATUS_INVALID_VALUE;
    *lwork = 7;   /* unused here; a small odd size, so that the caller's sizing is exercised */
    return CUSOLVER_STATUS_SUCCESS;
}

cusolverStatus_t cusolverDnSgesvdj(cusolverDnHandle_t handle, cusolverEigMode_t jobz, int econ, int m, int n,
                                   float *A, int lda, float *S, float *U, int ldu, float *V, int ldv, float *work,
                                   int lwork, int *info, gesvdjInfo_t params)
{
    (void)handle;
    (void)work;
    (void)lwork;
    (void)params;
    int r = m < n ? m : n, query = -1, lw, linfo = 0;
    float wsize = 0;
    if (jobz != CUSOLVER_EIG_MODE_VECTOR || econ != 1 || lda < m || ldu < m || ldv < n)
        return CUSOLVER_STATUS_INVALID_VALUE;
    float *vt = malloc((size_t)r * (size_t)n * sizeof *vt);
    sgesvd_("S", "S", &m, &n, A, &lda, S, U, &ldu, vt, &r, &wsize, &query, &linfo, 1, 1);
    lw = (int)wsize + 1;
    float *w = malloc((size_t)lw * sizeof *w);
    if (!vt || !w) {
        free(vt);
        free(w);
        return CUSOLVER_STATUS_ALLOC_FAILED;
    }
    sgesvd_("S", "S", &m, &n, A, &lda, S, U, &ldu, vt, &r, w, &lw, &linfo, 1, 1);
    for (int i = 0; i < r; i++)   /* V = VTᵀ, n x r */
        for (int j = 0; j < n; j++)
            V[j + (int64_t)i * ldv] = vt[i + (int64_t)j * r];
    *info = linfo;
    free(vt);
    free(w);
    return CUSOLVER_STATUS_SUCCESS;
}

/* ---- the kernels: every thread in turn ---- */

int nf_gpu_ridge_stats(cudaStream_t stream, const float *Y, int64_t n, int64_t nb, int k, const int64_t *v0,
                       const int64_t *v1, bool center, bool fold_center, double *y_mean, double *ymean, double *sy,
                       double *syy)
{
    (void)stream;
    for (int64_t v = 0; v < nb; v++)
        nf_body_ridge_stats(v, Y, n, nb, k, v0, v1, center, fold_center, y_mean, ymean, sy, syy);
    return 0;
}

int nf_gpu_ridge_center(cudaStream_t stream, float *X, int64_t r, int64_t rmax, int64_t nb, const double *colsum,
                        const double *centre, bool center)
{
    (void)stream;
    for (int64_t j = 0; j < rmax; j++)
        for (int64_t v = 0; v < nb; v++)
            nf_body_ridge_center(j, v, X, r, nb, colsum, centre, center);
    return 0;
}

int nf_gpu_ridge_scores(cudaStream_t stream, int f0, int kb, int64_t A, int64_t rmax, int64_t nb, const int *r,
                        const double *nval, const float *UtY, const float *Z, const float *T, const double *dj,
                        const double *pj, const double *sy, const double *syy, int score_kind, bool legacy,
                        double *acc, float *cv)
{
    (void)stream;
    for (int64_t a = 0; a < A; a++)
        for (int64_t v = 0; v < nb; v++)
            nf_body_ridge_scores(v, a, f0, kb, A, rmax, nb, r, nval, UtY, Z, T, dj, pj, sy, syy, score_kind, legacy,
                                 acc, cv);
    return 0;
}

int nf_gpu_ridge_choose(cudaStream_t stream, int64_t A, int64_t nb, int k, const double *acc, const double *alphas,
                        int64_t shared_best, int *best, float *alpha_out, float *score_out)
{
    (void)stream;
    for (int64_t v = 0; v < nb; v++)
        nf_body_ridge_choose(v, A, nb, k, acc, alphas, shared_best, best, alpha_out, score_out);
    return 0;
}

int nf_gpu_ridge_shrink(cudaStream_t stream, const float *in, float *out, int64_t r, int64_t nb, const float *s,
                        const double *alphas, const int *best, const double *colsum, const double *y_mean)
{
    (void)stream;
    for (int64_t j = 0; j < r; j++)
        for (int64_t v = 0; v < nb; v++)
            nf_body_ridge_shrink(j, v, in, out, nb, s, alphas, best, colsum, y_mean);
    return 0;
}

int nf_gpu_gather_rows(cudaStream_t stream, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                       const int64_t *rows, int64_t n_rows, int64_t cols)
{
    (void)stream;
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t v = 0; v < cols; v++)
            nf_body_gather_rows(i, v, dst, ld_dst, src, ld_src, rows);
    return 0;
}

int nf_gpu_add_rows(cudaStream_t stream, float *X, int64_t rows, int64_t nb, const double *centre)
{
    (void)stream;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t v = 0; v < nb; v++)
            nf_body_add_rows(i, v, X, nb, centre);
    return 0;
}

int nf_gpu_sl_gather(cudaStream_t stream, const float *X, int64_t ldx, const int64_t *rows, const double *mean,
                     const double *inv_sd, const int32_t *idx, int64_t nb, int64_t n, int64_t mb, float *Z)
{
    (void)stream;
    for (int64_t e = 0; e < nb * n * mb; e++)
        nf_body_sl_gather(e, X, ldx, rows, mean, inv_sd, idx, n, mb, Z);
    return 0;
}

int nf_gpu_sl_solve(cudaStream_t stream, int64_t nb, const int32_t *size, int64_t n_tr, int64_t n_val, int64_t q,
                    int64_t mb, int64_t ldp, int64_t S, const float *Z, const float *G, int64_t g_stride, double alpha,
                    const double *t_c, const double *t_mean, double *L, double *T, float *dec, int64_t dec_ld)
{
    (void)stream;
    for (int64_t b = 0; b < nb; b++)
        nf_body_sl_solve(b, nb, size, n_tr, n_val, q, mb, ldp, S, Z, G, g_stride, alpha, t_c, t_mean, L, T, dec,
                         dec_ld);
    return 0;
}

int nf_gpu_perm_epilogue(cudaStream_t stream, const float *C, int64_t rows, int64_t nv, int64_t v0, int64_t row0,
                         const struct nf_gpu_perm_consts *k, uint32_t *count, int *rowmax, int2 *near,
                         int64_t near_cap, unsigned long long *n_near)
{
    (void)stream;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t vl = 0; vl < nv; vl++) {
            int64_t v = v0 + vl;
            float q = nf_body_perm_transform(k, C[i * nv + vl], k->shift[v], k->ss[v], k->floor_[v], k->cap[v]);
            count[v] += q >= k->hi[v];
            if (q > k->lo[v] && q < k->hi[v]) {
                unsigned long long at_ = (*n_near)++;
                if ((int64_t)at_ < near_cap)
                    near[at_] = (int2){ (int)(row0 + i), (int)v };
            }
            int key = nf_body_float_key(q);
            if (key > rowmax[row0 + i])
                rowmax[row0 + i] = key;
        }
    return 0;
}

int nf_gpu_fill_key_min(cudaStream_t stream, int *keys, int64_t n)
{
    (void)stream;
    for (int64_t i = 0; i < n; i++)
        keys[i] = nf_body_float_key(-FLT_MAX);
    return 0;
}

float nf_gpu_key_to_float(int key)
{
    return nf_body_key_float(key);
}
