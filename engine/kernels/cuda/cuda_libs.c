/* cuda_libs.c — cuBLAS and cuSOLVER loaded when the GPU is first used, not
 * when nlflow starts.
 *
 * Linking libcublas/libcusolver makes every nlflow process map about 250 MB
 * of libraries (cuBLASLt, cuSPARSE, nvJitLink come with them) and spend
 * 0.1-0.2 s relocating them — even `nlflow --version`, even on machines with
 * no GPU, which is most of them. The CUDA runtime itself is small and stays
 * linked (it answers "is there a GPU?"). The handful of cuBLAS/cuSOLVER
 * functions the GPU backend calls are defined here with their exact
 * prototypes (the library headers check them) as trampolines that dlopen the
 * library on first use (once, thread-safe) and call the real function. When a
 * library cannot be loaded, the call returns the library's "not initialized"
 * status, which the backend reports as an error naming the library (and
 * nf_cuda_libs_missing() says why, for `nlflow devices`).
 *
 * This object is only pulled from libnlflow.a for these symbols, so the
 * device emulation of tests/unit/gpu_emu.c, which defines the same functions,
 * replaces it at link time.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include "gpu.h"

struct lazy_lib {
    const char *path, *soname;   /* full path in the toolkit, then the search path */
    pthread_once_t once;
    void *handle;
    char why[256];
};

static struct lazy_lib cublas = { NF_CUBLAS_LIB, NF_CUBLAS_SONAME, PTHREAD_ONCE_INIT, NULL, "" };
static struct lazy_lib cusolver = { NF_CUSOLVER_LIB, NF_CUSOLVER_SONAME, PTHREAD_ONCE_INIT, NULL, "" };

static void open_lib(struct lazy_lib *l)
{
    l->handle = dlopen(l->path, RTLD_NOW | RTLD_LOCAL);
    if (!l->handle)
        l->handle = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
    if (!l->handle) {
        const char *e = dlerror();
        snprintf(l->why, sizeof l->why, "cannot load %s (%s)", l->soname, e ? e : "unknown error");
    }
}
static void open_cublas(void) { open_lib(&cublas); }
static void open_cusolver(void) { open_lib(&cusolver); }

static void *sym(struct lazy_lib *l, void (*opener)(void), const char *name)
{
    pthread_once(&l->once, opener);
    return l->handle ? dlsym(l->handle, name) : NULL;
}

const char *nf_cuda_libs_missing(void)
{
    pthread_once(&cublas.once, open_cublas);
    pthread_once(&cusolver.once, open_cusolver);
    return !cublas.handle ? cublas.why : !cusolver.handle ? cusolver.why : NULL;
}

/* One trampoline: the real function, looked up once. */
#define TRAMPOLINE(lib, opener, fail, ret, name, params, args)                   \
    static ret(*real_##name) params;                                            \
    static pthread_once_t once_##name = PTHREAD_ONCE_INIT;                      \
    static void find_##name(void)                                               \
    {                                                                           \
        *(void **)&real_##name = sym(&lib, opener, #name);                      \
    }                                                                           \
    ret name params                                                             \
    {                                                                           \
        pthread_once(&once_##name, find_##name);                                \
        if (!real_##name)                                                       \
            return fail;                                                        \
        return real_##name args;                                                \
    }

#define CUBLAS(name, params, args) \
    TRAMPOLINE(cublas, open_cublas, CUBLAS_STATUS_NOT_INITIALIZED, cublasStatus_t, name, params, args)
#define CUSOLVER(name, params, args) \
    TRAMPOLINE(cusolver, open_cusolver, CUSOLVER_STATUS_NOT_INITIALIZED, cusolverStatus_t, name, params, args)

CUBLAS(cublasCreate_v2, (cublasHandle_t *handle), (handle))
CUBLAS(cublasDestroy_v2, (cublasHandle_t handle), (handle))
CUBLAS(cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
CUBLAS(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t streamId), (handle, streamId))
CUBLAS(cublasSetWorkspace_v2, (cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes),
       (handle, workspace, workspaceSizeInBytes))
CUBLAS(cublasSgemm_v2,
       (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
        const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc),
       (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc))
CUBLAS(cublasSgemmStridedBatched,
       (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
        const float *alpha, const float *A, int lda, long long int strideA, const float *B, int ldb,
        long long int strideB, const float *beta, float *C, int ldc, long long int strideC, int batchCount),
       (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batchCount))
CUBLAS(cublasSgeam,
       (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, const float *alpha,
        const float *A, int lda, const float *beta, const float *B, int ldb, float *C, int ldc),
       (handle, transa, transb, m, n, alpha, A, lda, beta, B, ldb, C, ldc))

/* A message for a status: the library's own when it is loaded. */
static const char *(*real_status_string)(cublasStatus_t);
static pthread_once_t once_status_string = PTHREAD_ONCE_INIT;
static void find_status_string(void)
{
    *(void **)&real_status_string = sym(&cublas, open_cublas, "cublasGetStatusString");
}

const char *cublasGetStatusString(cublasStatus_t status)
{
    pthread_once(&once_status_string, find_status_string);
    if (real_status_string)
        return real_status_string(status);
    return cublas.why[0] ? cublas.why : "cuBLAS is not loaded";
}

CUSOLVER(cusolverDnCreate, (cusolverDnHandle_t *handle), (handle))
CUSOLVER(cusolverDnDestroy, (cusolverDnHandle_t handle), (handle))
CUSOLVER(cusolverDnSetStream, (cusolverDnHandle_t handle, cudaStream_t streamId), (handle, streamId))
CUSOLVER(cusolverDnCreateGesvdjInfo, (gesvdjInfo_t *info), (info))
CUSOLVER(cusolverDnDestroyGesvdjInfo, (gesvdjInfo_t info), (info))
CUSOLVER(cusolverDnSgesvdj,
         (cusolverDnHandle_t handle, cusolverEigMode_t jobz, int econ, int m, int n, float *A, int lda, float *S,
          float *U, int ldu, float *V, int ldv, float *work, int lwork, int *info, gesvdjInfo_t params),
         (handle, jobz, econ, m, n, A, lda, S, U, ldu, V, ldv, work, lwork, info, params))
CUSOLVER(cusolverDnSgesvdj_bufferSize,
         (cusolverDnHandle_t handle, cusolverEigMode_t jobz, int econ, int m, int n, const float *A, int lda,
          const float *S, const float *U, int ldu, const float *V, int ldv, int *lwork, gesvdjInfo_t params),
         (handle, jobz, econ, m, n, A, lda, S, U, ldu, V, ldv, lwork, params))
