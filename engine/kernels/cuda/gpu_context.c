/* gpu_context.c — the process's GPU context, its memory, and cuBLAS/cuSOLVER
 * calls in nlflow's row-major conventions (builds with HAVE_CUDA; see gpu.h).
 *
 * The context is made once, on first use, and kept: creating cuBLAS and
 * cuSOLVER handles costs a few hundred milliseconds, which a pipeline of GPU
 * nodes should pay once. A mutex gives it to one node at a time. Memory for a
 * node run is one arena (a single cudaMalloc, so a node learns at once whether
 * its blocks fit, and an out-of-memory is a clean NF_ENOMEM the node answers by
 * shrinking its blocks); the cuBLAS workspace is carved from it so that cuBLAS
 * never allocates behind our back. Pinned host buffers are kept between nodes,
 * and so are device copies of node inputs (nf_gpu_resident), so that GPU
 * nodes in a row do not upload the same matrix again.
 *
 * The thin SVD uses cuSOLVER's gesvdj (one-sided Jacobi) rather than syevd on
 * XᵀX: forming XᵀX squares the condition number, so singular values below
 * about sqrt(eps) s_max ≈ 2.4e-4 s_max (common in smooth, collinear designs)
 * would lose every correct digit, and the ridge penalties nlflow tries go down
 * to 0.01, where those components still count. gesvdj converges to a residual
 * of about eps ‖X‖ like LAPACK's sgesdd, and the designs are small (samples x
 * features), so its cost does not matter next to the voxel GEMMs.
 */
#include "gpu.h"

#include "plan/cost.h"
#include "core/switches.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "core/value.h"

static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nf_gpu *the_gpu;          /* made on first acquire */
static int debug_fail_arena;            /* nf_gpu_debug_fail_arena */
static int64_t debug_block_cap;         /* nf_gpu_debug_max_block */

void nf_gpu_debug_fail_arena(int n)
{
    debug_fail_arena = n;
}

void nf_gpu_debug_max_block(int64_t max_block)
{
    debug_block_cap = max_block;
}

int64_t nf_gpu_debug_block_cap(void)
{
    return debug_block_cap;
}

/* ---- phase profile (NLFLOW_GPU_PROFILE), under gpu_lock ---- */

enum { PROFILE_MAX = 32 };
static struct { const char *label; double seconds; long count; } profile[PROFILE_MAX];
static int profile_n;
static double profile_mark;

void nf_gpu_phase(struct nf_gpu *g, const char *label)
{
    if (!nf_switches()->gpu_profile)
        return;
    (void)cudaStreamSynchronize(g->copy);
    (void)cudaStreamSynchronize(g->compute);
    double now = nf_now();
    int i = 0;
    while (label && i < profile_n && strcmp(profile[i].label, label) != 0)
        i++;
    if (label && i == profile_n && profile_n < PROFILE_MAX)
        profile[profile_n++].label = label;
    if (label && i < profile_n) {
        profile[i].seconds += now - profile_mark;
        profile[i].count++;
    }
    profile_mark = now;
}

static void profile_print(void)
{
    if (!nf_switches()->gpu_profile || profile_n == 0)
        return;
    double total = 0;
    for (int i = 0; i < profile_n; i++)
        total += profile[i].seconds;
    fprintf(stderr, "nlflow: GPU phases (NLFLOW_GPU_PROFILE; the device waited for at each mark): %.2f ms\n",
            total * 1e3);
    for (int i = 0; i < profile_n; i++)
        fprintf(stderr, "  %-38s %6ld x %10.3f ms %5.1f%%\n", profile[i].label, profile[i].count,
                profile[i].seconds * 1e3, total > 0 ? 100 * profile[i].seconds / total : 0);
    memset(profile, 0, sizeof profile);
    profile_n = 0;
}

int nf_gpu_check(cudaError_t status, const char *what, struct nf_error *err)
{
    if (status == cudaSuccess)
        return 0;
    (void)cudaGetLastError();   /* clear a non-sticky error so later calls start clean */
    if (status == cudaErrorMemoryAllocation)
        return NF_FAIL(err, NF_ENOMEM, "out of GPU memory (%s)", what);
    return NF_FAIL(err, NF_EBUG, "CUDA error in %s: %s (%s)", what, cudaGetErrorString(status),
                   cudaGetErrorName(status));
}

/* ---- streams, events, copies (gpu.h: the node GPU paths' runtime calls) ---- */

int nf_gpu_event_create(nf_gpu_event *event, struct nf_error *err)
{
    return nf_gpu_check(cudaEventCreateWithFlags(event, cudaEventDisableTiming), "cudaEventCreate", err);
}

void nf_gpu_event_destroy(nf_gpu_event event)
{
    if (event)
        (void)cudaEventDestroy(event);
}

int nf_gpu_event_record(nf_gpu_event event, cudaStream_t stream, struct nf_error *err)
{
    return nf_gpu_check(cudaEventRecord(event, stream), "cudaEventRecord", err);
}

int nf_gpu_stream_wait(cudaStream_t stream, nf_gpu_event event, const char *what, struct nf_error *err)
{
    return nf_gpu_check(cudaStreamWaitEvent(stream, event, 0), what, err);
}

int nf_gpu_event_sync(nf_gpu_event event, const char *what, struct nf_error *err)
{
    return nf_gpu_check(cudaEventSynchronize(event), what, err);
}

int nf_gpu_stream_sync(cudaStream_t stream, const char *what, struct nf_error *err)
{
    return nf_gpu_check(cudaStreamSynchronize(stream), what, err);
}

void nf_gpu_drain(struct nf_gpu *g)
{
    (void)cudaStreamSynchronize(g->copy);
    (void)cudaStreamSynchronize(g->compute);
}

int nf_gpu_upload(cudaStream_t stream, void *dev, const void *host, size_t bytes, const char *what,
                  struct nf_error *err)
{
    return nf_gpu_check(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, stream), what, err);
}

int nf_gpu_download(cudaStream_t stream, void *host, const void *dev, size_t bytes, const char *what,
                    struct nf_error *err)
{
    return nf_gpu_check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream), what, err);
}

int nf_gpu_upload_2d(cudaStream_t stream, void *dev, size_t dst_pitch, const void *host, size_t src_pitch,
                     size_t width, size_t rows, const char *what, struct nf_error *err)
{
    return nf_gpu_check(
        cudaMemcpy2DAsync(dev, dst_pitch, host, src_pitch, width, rows, cudaMemcpyHostToDevice, stream), what, err);
}

int nf_gpu_download_2d(cudaStream_t stream, void *host, size_t dst_pitch, const void *dev, size_t src_pitch,
                       size_t width, size_t rows, const char *what, struct nf_error *err)
{
    return nf_gpu_check(
        cudaMemcpy2DAsync(host, dst_pitch, dev, src_pitch, width, rows, cudaMemcpyDeviceToHost, stream), what, err);
}

int nf_gpu_zero(cudaStream_t stream, void *dev, size_t bytes, const char *what, struct nf_error *err)
{
    return nf_gpu_check(cudaMemsetAsync(dev, 0, bytes, stream), what, err);
}

int nf_gpu_malloc(void **dev, size_t bytes, const char *what, struct nf_error *err)
{
    *dev = NULL;
    return nf_gpu_check(cudaMalloc(dev, bytes), what, err);
}

void nf_gpu_free(void *dev)
{
    if (dev)
        (void)cudaFree(dev);
}

static int blas_check(cublasStatus_t status, const char *what, struct nf_error *err)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return 0;
    if (status == CUBLAS_STATUS_ALLOC_FAILED)
        return NF_FAIL(err, NF_ENOMEM, "out of GPU memory (cuBLAS %s)", what);
    return NF_FAIL(err, NF_EBUG, "cuBLAS error in %s: %s", what, cublasGetStatusString(status));
}

static int solver_check(cusolverStatus_t status, const char *what, struct nf_error *err)
{
    if (status == CUSOLVER_STATUS_SUCCESS)
        return 0;
    if (status == CUSOLVER_STATUS_ALLOC_FAILED)
        return NF_FAIL(err, NF_ENOMEM, "out of GPU memory (cuSOLVER %s)", what);
    return NF_FAIL(err, NF_EBUG, "cuSOLVER error in %s: status %d", what, (int)status);
}

/* ---- the context ---- */

/* ---- resident copies (the bookkeeping; nf_gpu_resident below) ---- */

struct nf_gpu_copy {
    uint64_t serial;
    int layout;
    void *dev;
    size_t bytes;
    uint64_t last_use;
    bool held;     /* taken by the node that holds the context */
    bool dead;     /* its value is gone (set from any thread) */
};

/* Guards g->copies and the stats: the free hook runs on whatever thread drops
 * a value's last reference, while the node holding the context may be
 * looking the copies up. CUDA calls are made outside it, by that node. */
static pthread_mutex_t copies_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nf_gpu_resident_stats copy_stats;

static void value_freed(uint64_t serial)
{
    pthread_mutex_lock(&copies_lock);
    for (size_t i = 0; the_gpu && i < the_gpu->n_copies; i++)
        if (the_gpu->copies[i].serial == serial)
            the_gpu->copies[i].dead = true;
    pthread_mutex_unlock(&copies_lock);
}

/* Remove copy i (the caller holds the context, not copies_lock) and free its memory. */
static void drop_copy(struct nf_gpu *g, size_t i, bool eviction)
{
    pthread_mutex_lock(&copies_lock);
    void *dev = g->copies[i].dev;
    copy_stats.bytes -= g->copies[i].bytes;
    copy_stats.copies--;
    copy_stats.evictions += eviction;
    g->copies[i] = g->copies[--g->n_copies];
    pthread_mutex_unlock(&copies_lock);
    /* nothing may still read it */
    (void)cudaStreamSynchronize(g->copy);
    (void)cudaStreamSynchronize(g->compute);
    (void)cudaFree(dev);
    (void)cudaGetLastError();
}

/* Free the copies whose values are gone (or, with all, every copy not held). */
static void reap_copies(struct nf_gpu *g, bool all)
{
    for (size_t i = g->n_copies; i-- > 0;) {
        pthread_mutex_lock(&copies_lock);
        bool go = !g->copies[i].held && (all || g->copies[i].dead || g->copies[i].serial == 0);
        pthread_mutex_unlock(&copies_lock);
        if (go)
            drop_copy(g, i, false);
    }
}

/* Free the least recently used copy not held: false when there is none. */
static bool evict_one(struct nf_gpu *g)
{
    size_t best = SIZE_MAX;
    pthread_mutex_lock(&copies_lock);
    for (size_t i = 0; i < g->n_copies; i++)
        if (!g->copies[i].held && (best == SIZE_MAX || g->copies[i].last_use < g->copies[best].last_use))
            best = i;
    pthread_mutex_unlock(&copies_lock);
    if (best == SIZE_MAX)
        return false;
    drop_copy(g, best, true);
    return true;
}

/* Bytes of the copies that could go (not held). */
static size_t reclaimable_bytes(struct nf_gpu *g)
{
    size_t b = 0;
    pthread_mutex_lock(&copies_lock);
    for (size_t i = 0; i < g->n_copies; i++)
        b += g->copies[i].held ? 0 : g->copies[i].bytes;
    pthread_mutex_unlock(&copies_lock);
    return b;
}

static int debug_residency = -1;

void nf_gpu_debug_residency(int on)
{
    debug_residency = on;
}

bool nf_gpu_residency_enabled(void)
{
    if (debug_residency >= 0)
        return debug_residency == 1;
    return nf_switches()->gpu_resident;
}

void nf_gpu_resident_stats(struct nf_gpu_resident_stats *out)
{
    pthread_mutex_lock(&copies_lock);
    *out = copy_stats;
    pthread_mutex_unlock(&copies_lock);
}

static void destroy(struct nf_gpu *g)
{
    if (!g)
        return;
    if (g->arena)
        nf_gpu_arena_close(g);
    for (size_t i = 0; i < g->n_copies; i++)
        g->copies[i].held = false;
    reap_copies(g, true);
    free(g->copies);
    for (int i = 0; i < NF_GPU_PIN_SLOTS; i++)
        if (g->pinned[i])
            cudaFreeHost(g->pinned[i]);
    if (g->solver)
        cusolverDnDestroy(g->solver);
    if (g->blas)
        cublasDestroy(g->blas);
    if (g->compute)
        cudaStreamDestroy(g->compute);
    if (g->copy)
        cudaStreamDestroy(g->copy);
    free(g);
}

static int create(struct nf_gpu **out, struct nf_error *err)
{
    char why[512];
    struct cudaDeviceProp props;
    struct nf_gpu *g = NULL;
    int rc = 0;
    if (!nf_cuda_available(why, sizeof why))
        return NF_FAIL(err, NF_EUSAGE, "no usable GPU: %s", why);
    if (!(g = nf_calloc(1, sizeof *g)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    NF_TRY(rc = nf_gpu_check(cudaSetDevice(0), "cudaSetDevice", err));
    NF_TRY(rc = nf_gpu_check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties", err));
    snprintf(g->name, sizeof g->name, "%s", props.name);
    g->cc_major = props.major;
    g->cc_minor = props.minor;
    g->sm_count = props.multiProcessorCount;
    g->total_mem = props.totalGlobalMem;
    NF_TRY(rc = nf_gpu_check(cudaStreamCreateWithFlags(&g->compute, cudaStreamNonBlocking),
                             "creating the compute stream", err));
    NF_TRY(rc = nf_gpu_check(cudaStreamCreateWithFlags(&g->copy, cudaStreamNonBlocking),
                             "creating the copy stream", err));
    NF_TRY(rc = blas_check(cublasCreate(&g->blas), "cublasCreate", err));
    NF_TRY(rc = blas_check(cublasSetStream(g->blas, g->compute), "cublasSetStream", err));
    /* FP32 arithmetic, never TF32: the nodes' round-off bounds assume it */
    NF_TRY(rc = blas_check(cublasSetMathMode(g->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode", err));
    NF_TRY(rc = solver_check(cusolverDnCreate(&g->solver), "cusolverDnCreate", err));
    NF_TRY(rc = solver_check(cusolverDnSetStream(g->solver, g->compute), "cusolverDnSetStream", err));
    nf_value_set_free_hook(value_freed);
    *out = g;
    g = NULL;
fail:
    destroy(g);
    return rc;
}

struct nf_gpu *nf_gpu_acquire(struct nf_error *err)
{
    pthread_mutex_lock(&gpu_lock);
    if (!the_gpu) {
        struct nf_gpu *g = NULL;
        if (create(&g, err) < 0) {
            pthread_mutex_unlock(&gpu_lock);
            return NULL;
        }
        pthread_mutex_lock(&copies_lock);   /* the free hook reads the_gpu */
        the_gpu = g;
        pthread_mutex_unlock(&copies_lock);
    }
    if (cudaSetDevice(the_gpu->device) != cudaSuccess) {   /* this thread's current device */
        pthread_mutex_unlock(&gpu_lock);
        NF_FAIL(err, NF_EBUG, "cudaSetDevice failed");
        return NULL;
    }
    reap_copies(the_gpu, false);
    nf_gpu_phase(the_gpu, NULL);
    return the_gpu;
}

void nf_gpu_release(struct nf_gpu *g)
{
    if (!g)
        return;
    nf_gpu_phase(g, "release");
    nf_gpu_arena_close(g);
    nf_gpu_phase(g, "closing the arena");
    profile_print();
    pthread_mutex_lock(&copies_lock);
    for (size_t i = 0; i < g->n_copies; i++)
        g->copies[i].held = false;
    pthread_mutex_unlock(&copies_lock);
    reap_copies(g, false);
    pthread_mutex_unlock(&gpu_lock);
}

void nf_gpu_shutdown(void)
{
    /* a node still holding the context (a failed test, say) keeps it: better
     * a leak at exit than waiting for ever */
    if (pthread_mutex_trylock(&gpu_lock) != 0)
        return;
    struct nf_gpu *g = the_gpu;
    pthread_mutex_lock(&copies_lock);   /* the free hook no longer sees it */
    the_gpu = NULL;
    pthread_mutex_unlock(&copies_lock);
    destroy(g);
    pthread_mutex_unlock(&gpu_lock);
}

/* ---- memory ---- */

size_t nf_gpu_free_bytes(struct nf_gpu *g)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    free_b += reclaimable_bytes(g);   /* copies that an allocation may evict */
    return free_b > NF_GPU_MARGIN_BYTES ? free_b - NF_GPU_MARGIN_BYTES : 0;
}

/* cudaMalloc, evicting copies not held (least recently used first) while it
 * is out of memory. */
static cudaError_t malloc_evicting(struct nf_gpu *g, void **p, size_t bytes)
{
    for (;;) {
        cudaError_t st = cudaMalloc(p, bytes);
        if (st != cudaErrorMemoryAllocation)
            return st;
        (void)cudaGetLastError();
        if (!evict_one(g))
            return st;
    }
}

size_t nf_gpu_alloc_size(size_t bytes)
{
    return (bytes + 255) & ~(size_t)255;
}

int nf_gpu_arena_open(struct nf_gpu *g, size_t bytes, struct nf_error *err)
{
    void *p = NULL;
    nf_gpu_arena_close(g);
    bytes = nf_gpu_alloc_size(bytes);
    if (debug_fail_arena > 0) {
        debug_fail_arena--;
        return NF_FAIL(err, NF_ENOMEM, "out of GPU memory (arena of %zu bytes; simulated)", bytes);
    }
    int rc = nf_gpu_check(malloc_evicting(g, &p, bytes + NF_GPU_BLAS_WORKSPACE), "allocating the GPU arena", err);
    if (rc < 0)
        return rc;
    g->arena = p;
    g->arena_size = bytes;
    g->arena_used = 0;
    rc = blas_check(cublasSetWorkspace(g->blas, g->arena + bytes, NF_GPU_BLAS_WORKSPACE), "cublasSetWorkspace",
                    err);
    if (rc < 0)
        nf_gpu_arena_close(g);
    return rc;
}

void *nf_gpu_alloc(struct nf_gpu *g, size_t bytes)
{
    size_t size = nf_gpu_alloc_size(bytes);
    if (!g->arena || g->arena_used + size > g->arena_size)
        return NULL;
    void *p = g->arena + g->arena_used;
    g->arena_used += size;
    return p;
}

void nf_gpu_arena_close(struct nf_gpu *g)
{
    if (!g || !g->arena)
        return;
    /* nothing may still be using the memory */
    (void)cudaStreamSynchronize(g->copy);
    (void)cudaStreamSynchronize(g->compute);
    (void)cublasSetWorkspace(g->blas, NULL, 0);
    (void)cudaFree(g->arena);
    (void)cudaGetLastError();
    g->arena = NULL;
    g->arena_size = g->arena_used = 0;
}

void *nf_gpu_pinned(struct nf_gpu *g, int slot, size_t bytes)
{
    if (slot < 0 || slot >= NF_GPU_PIN_SLOTS)
        return NULL;
    if (bytes <= g->pinned_size[slot] && g->pinned[slot])
        return g->pinned[slot];
    if (g->pinned[slot]) {
        /* a copy may still read it */
        (void)cudaStreamSynchronize(g->copy);
        (void)cudaStreamSynchronize(g->compute);
        cudaFreeHost(g->pinned[slot]);
        g->pinned[slot] = NULL;
        g->pinned_size[slot] = 0;
    }
    size_t want = bytes + bytes / 4 + 4096;   /* some room so that growing is rare */
    if (cudaHostAlloc(&g->pinned[slot], want, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        g->pinned[slot] = NULL;
        return NULL;
    }
    g->pinned_size[slot] = want;
    return g->pinned[slot];
}

/* ---- resident copies ---- */

/* host -> dev through two pinned buffers on the copy stream (a pageable
 * cudaMemcpy of a large matrix runs at about half the bus's speed). */
static int upload_staged(struct nf_gpu *g, char *dev, const char *host, size_t bytes, struct nf_error *err)
{
    const size_t chunk = (size_t)32 << 20, slot_bytes = bytes < chunk ? bytes : chunk;
    cudaEvent_t done[2] = { 0 };
    int rc = 0;
    for (int i = 0; i < 2 && rc == 0; i++)
        rc = nf_gpu_check(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming), "cudaEventCreate", err);
    for (size_t off = 0, i = 0; rc == 0 && off < bytes; off += chunk, i++) {
        size_t len = bytes - off < chunk ? bytes - off : chunk;
        int slot = (int)(i % 2);
        char *pin = nf_gpu_pinned(g, NF_GPU_PIN_RES0 + slot, slot_bytes);
        if (!pin) {   /* no pinned memory: the slow way */
            rc = nf_gpu_check(cudaMemcpy(dev + off, host + off, len, cudaMemcpyHostToDevice), "an upload", err);
            continue;
        }
        if (i >= 2 && (rc = nf_gpu_check(cudaEventSynchronize(done[slot]), "an upload", err)) < 0)
            break;
        memcpy(pin, host + off, len);
        rc = nf_gpu_check(cudaMemcpyAsync(dev + off, pin, len, cudaMemcpyHostToDevice, g->copy), "an upload", err);
        if (rc == 0)
            rc = nf_gpu_check(cudaEventRecord(done[slot], g->copy), "cudaEventRecord", err);
    }
    if (rc == 0)
        rc = nf_gpu_check(cudaStreamSynchronize(g->copy), "an upload", err);
    for (int i = 0; i < 2; i++)
        if (done[i])
            (void)cudaEventDestroy(done[i]);
    return rc;
}

int nf_gpu_resident(struct nf_gpu *g, uint64_t serial, int layout, const void *host, size_t bytes, void **dev,
                    bool *uploaded, struct nf_error *err)
{
    void *p = NULL;
    int rc = 0;
    if (uploaded)
        *uploaded = false;
    pthread_mutex_lock(&copies_lock);
    for (size_t i = 0; serial && i < g->n_copies; i++) {
        struct nf_gpu_copy *cp = &g->copies[i];
        if (cp->serial == serial && cp->layout == layout && cp->bytes == bytes && !cp->dead) {
            cp->held = true;
            cp->last_use = ++g->use_clock;
            copy_stats.hits++;
            *dev = cp->dev;
            pthread_mutex_unlock(&copies_lock);
            return 0;
        }
    }
    pthread_mutex_unlock(&copies_lock);
    if (g->n_copies == g->cap_copies) {
        size_t cap = g->cap_copies ? 2 * g->cap_copies : 8;
        struct nf_gpu_copy *grown = nf_realloc(g->copies, cap * sizeof *grown);
        if (!grown)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        pthread_mutex_lock(&copies_lock);
        g->copies = grown;
        g->cap_copies = cap;
        pthread_mutex_unlock(&copies_lock);
    }
    NF_TRY(rc = nf_gpu_check(malloc_evicting(g, &p, bytes ? bytes : 1), "allocating a resident copy", err));
    if ((rc = upload_staged(g, p, host, bytes, err)) < 0) {
        (void)cudaFree(p);
        goto fail;
    }
    pthread_mutex_lock(&copies_lock);
    g->copies[g->n_copies++] = (struct nf_gpu_copy){ serial, layout, p, bytes, ++g->use_clock, true, false };
    copy_stats.bytes += bytes;
    copy_stats.copies++;
    copy_stats.uploads++;
    copy_stats.uploaded_bytes += bytes;
    pthread_mutex_unlock(&copies_lock);
    *dev = p;
    if (uploaded)
        *uploaded = true;
fail:
    return rc;
}

/* ---- cuBLAS ---- */

static bool fits_int(int64_t x)
{
    return x >= 0 && x <= INT_MAX;
}

int nf_gpu_sgemm(struct nf_gpu *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, struct nf_error *err)
{
    return nf_gpu_sgemm_batched(g, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, err);
}

int nf_gpu_sgemm_batched(struct nf_gpu *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *A, int64_t lda, int64_t stride_a, const float *B,
                         int64_t ldb, int64_t stride_b, float beta, float *C, int64_t ldc,
                         int64_t stride_c, int64_t batch, struct nf_error *err)
{
    if (m <= 0 || n <= 0 || batch <= 0)
        return 0;
    if (!fits_int(m) || !fits_int(n) || !fits_int(k) || !fits_int(lda) || !fits_int(ldb) || !fits_int(ldc) ||
        !fits_int(batch))
        return NF_FAIL(err, NF_EBUG, "a GEMM of %lld x %lld x %lld is too large for one cuBLAS call",
                       (long long)m, (long long)n, (long long)k);
    if (k == 0) {
        /* nothing to multiply: C = beta C, which only beta 0 needs here */
        if (beta != 0.0f)
            return beta == 1.0f ? 0 : NF_FAIL(err, NF_EBUG, "GEMM with k = 0 and beta %g", beta);
        for (int64_t b = 0; b < batch; b++) {
            int rc = nf_gpu_check(cudaMemset2DAsync(C + b * stride_c, (size_t)ldc * sizeof(float), 0,
                                                    (size_t)n * sizeof(float), (size_t)m, g->compute),
                                  "clearing a GEMM output", err);
            if (rc < 0)
                return rc;
        }
        return 0;
    }
    /* row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ, and a
     * row-major matrix read as column-major is its transpose: swap the operands */
    cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    if (batch == 1)
        st = cublasSgemm(g->blas, ob, oa, (int)n, (int)m, (int)k, &alpha, B, (int)ldb, A, (int)lda, &beta, C,
                         (int)ldc);
    else
        st = cublasSgemmStridedBatched(g->blas, ob, oa, (int)n, (int)m, (int)k, &alpha, B, (int)ldb,
                                       (long long)stride_b, A, (int)lda, (long long)stride_a, &beta, C,
                                       (int)ldc, (long long)stride_c, (int)batch);
    return blas_check(st, batch == 1 ? "sgemm" : "sgemm (strided batched)", err);
}

/* dst (rows x cols, row-major, ld cols) = the column-major rows x cols matrix
 * src (ld rows) — the transpose of src's memory read row-major. */
static int transpose(struct nf_gpu *g, const float *src, int64_t rows, int64_t cols, float *dst,
                     struct nf_error *err)
{
    const float one = 1.0f, zero = 0.0f;
    /* geam reads its B operand (dst, in place, times 0): clear it, so that
     * whatever the arena held (a NaN pattern) cannot leak in as 0 * NaN */
    int rc = nf_gpu_check(cudaMemsetAsync(dst, 0, (size_t)(rows * cols) * sizeof(float), g->compute),
                          "clearing a transpose", err);
    if (rc < 0)
        return rc;
    /* column-major view: dst is cols x rows (ld cols) = srcᵀ, src is rows x cols (ld rows) */
    return blas_check(cublasSgeam(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)cols, (int)rows, &one, src,
                                  (int)rows, &zero, dst, (int)cols, dst, (int)cols),
                      "geam (transpose)", err);
}

/* ---- cuSOLVER: thin SVD ---- */

/* The column-major problem gesvdj solves: m >= n always (see nf_gpu_svd). */
static void svd_shape(int64_t rows, int64_t cols, int *m, int *n)
{
    *m = (int)(cols >= rows ? cols : rows);
    *n = (int)(cols >= rows ? rows : cols);
}

/* gesvdj's workspace for the column-major m x n problem; the pointers are the
 * call's (NULL when only sizing: if a cuSOLVER version rejects that, sizing
 * returns 0 and nf_gpu_svd takes whatever it needs outside the arena). */
static int svd_lwork(struct nf_gpu *g, int m, int n, const float *A, const float *S, const float *U, const float *V,
                     int *lwork, gesvdjInfo_t params, struct nf_error *err)
{
    return solver_check(cusolverDnSgesvdj_bufferSize(g->solver, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, A, m, S, U, m, V,
                                                     n, lwork, params),
                        "gesvdj_bufferSize", err);
}

size_t nf_gpu_svd_bytes(struct nf_gpu *g, int64_t rows, int64_t cols)
{
    int m, n, lwork = 0;
    gesvdjInfo_t params = NULL;
    struct nf_error err = { 0 };
    if (rows <= 0 || cols <= 0)
        return 0;
    if (!fits_int(rows) || !fits_int(cols) || !fits_int(rows * cols))
        return 0;
    svd_shape(rows, cols, &m, &n);
    if (cusolverDnCreateGesvdjInfo(&params) != CUSOLVER_STATUS_SUCCESS)
        return 0;
    int rc = svd_lwork(g, m, n, NULL, NULL, NULL, NULL, &lwork, params, &err);
    cusolverDnDestroyGesvdjInfo(params);
    if (rc < 0)
        return 0;
    /* the copy of A, the factor that needs a transpose, the workspace, info */
    return nf_gpu_alloc_size((size_t)m * (size_t)n * sizeof(float)) +
           nf_gpu_alloc_size((size_t)m * (size_t)n * sizeof(float)) +
           nf_gpu_alloc_size((size_t)lwork * sizeof(float)) + nf_gpu_alloc_size(sizeof(int));
}

/* Scratch from the arena when it has room, else a cudaMalloc of its own
 * (*own set: free it). */
static void *scratch(struct nf_gpu *g, size_t bytes, void **own)
{
    void *p = nf_gpu_alloc(g, bytes);
    *own = NULL;
    if (p)
        return p;
    if (cudaMalloc(own, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        *own = NULL;
    }
    return *own;
}

int nf_gpu_svd(struct nf_gpu *g, const float *A, int64_t rows, int64_t cols, float *U, float *s, float *Vt,
               struct nf_error *err)
{
    int m, n, lwork = 0, info = 0, rc = 0;
    gesvdjInfo_t params = NULL;
    void *own[4] = { NULL, NULL, NULL, NULL };
    if (rows <= 0 || cols <= 0)
        return 0;
    if (!fits_int(rows) || !fits_int(cols) || !fits_int(rows * cols))
        return NF_FAIL(err, NF_EBUG, "an SVD of %lld x %lld is too large", (long long)rows, (long long)cols);
    svd_shape(rows, cols, &m, &n);
    size_t mark = g->arena_used;
    float *B = scratch(g, (size_t)m * (size_t)n * sizeof(float), &own[0]);
    float *T = scratch(g, (size_t)m * (size_t)n * sizeof(float), &own[1]);
    float *work = NULL;
    int *dinfo = scratch(g, sizeof(int), &own[2]);
    NF_TRY(rc = solver_check(cusolverDnCreateGesvdjInfo(&params), "CreateGesvdjInfo", err));
    if (!B || !T || !dinfo) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of GPU memory for an SVD of %lld x %lld", (long long)rows, (long long)cols);
        goto fail;
    }
    /* the factor written in place (Vt) and the one transposed after (T) */
    if (cols >= rows)
        NF_TRY(rc = svd_lwork(g, m, n, B, s, Vt, T, &lwork, params, err));
    else
        NF_TRY(rc = svd_lwork(g, m, n, B, s, T, Vt, &lwork, params, err));
    if (!(work = scratch(g, (size_t)lwork * sizeof(float), &own[3]))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of GPU memory for an SVD of %lld x %lld", (long long)rows, (long long)cols);
        goto fail;
    }
    if (cols >= rows) {
        /* A row-major is the column-major cols x rows matrix Aᵀ = U' S V'ᵀ, so
         * A = V' S U'ᵀ: U' (cols x r, ld cols) is Vt row-major as it stands, V'
         * (rows x r, column-major) is U transposed */
        NF_TRY(rc = nf_gpu_check(cudaMemcpyAsync(B, A, (size_t)m * (size_t)n * sizeof(float),
                                                 cudaMemcpyDeviceToDevice, g->compute),
                                 "copying the matrix of an SVD", err));
        NF_TRY(rc = solver_check(cusolverDnSgesvdj(g->solver, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, B, m, s, Vt, m, T,
                                                   n, work, lwork, dinfo, params),
                                 "gesvdj", err));
        NF_TRY(rc = transpose(g, T, rows, n, U, err));
    } else {
        /* more rows than columns: factor A itself, column-major (a transpose of
         * the row-major memory): A = U' S V'ᵀ, V' (cols x r, ld cols) is Vt
         * row-major, U' (rows x r, column-major) is U transposed */
        NF_TRY(rc = transpose(g, A, cols, rows, B, err));   /* B: rows x cols column-major = A */
        NF_TRY(rc = solver_check(cusolverDnSgesvdj(g->solver, CUSOLVER_EIG_MODE_VECTOR, 1, m, n, B, m, s, T, m, Vt,
                                                   n, work, lwork, dinfo, params),
                                 "gesvdj", err));
        NF_TRY(rc = transpose(g, T, rows, n, U, err));
    }
    NF_TRY(rc = nf_gpu_check(cudaMemcpyAsync(&info, dinfo, sizeof info, cudaMemcpyDeviceToHost, g->compute),
                             "reading the SVD's status", err));
    NF_TRY(rc = nf_gpu_check(cudaStreamSynchronize(g->compute), "the SVD", err));
    if (info != 0)
        rc = NF_FAIL(err, info < 0 ? NF_EBUG : NF_EDATA, "the GPU SVD of a %lld x %lld matrix did not converge "
                     "(gesvdj info %d)", (long long)rows, (long long)cols, info);
fail:
    if (params)
        cusolverDnDestroyGesvdjInfo(params);
    if (own[0] || own[1] || own[2] || own[3])
        (void)cudaStreamSynchronize(g->compute);
    for (int i = 0; i < 4; i++)
        if (own[i])
            cudaFree(own[i]);
    g->arena_used = mark;   /* scratch only: give it back */
    return rc;
}

/* ---- the dispatch table (host pointers) ---- */

static int upload(struct nf_gpu *g, float *dst, const float *src, int64_t rows, int64_t cols, int64_t ld,
                  struct nf_error *err)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return nf_gpu_check(cudaMemcpy2DAsync(dst, (size_t)cols * sizeof(float), src, (size_t)ld * sizeof(float),
                                          (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyHostToDevice,
                                          g->compute),
                        "uploading a matrix", err);
}

static int download(struct nf_gpu *g, float *dst, int64_t ld, const float *src, int64_t rows, int64_t cols,
                    struct nf_error *err)
{
    if (rows <= 0 || cols <= 0)
        return 0;
    return nf_gpu_check(cudaMemcpy2DAsync(dst, (size_t)ld * sizeof(float), src, (size_t)cols * sizeof(float),
                                          (size_t)cols * sizeof(float), (size_t)rows, cudaMemcpyDeviceToHost,
                                          g->compute),
                        "downloading a matrix", err);
}

static int host_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                      int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    struct nf_error err = { 0 };
    struct nf_gpu *g = nf_gpu_acquire(&err);
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    int rc = 0;
    if (!g)
        return err.code;
    size_t bytes = nf_gpu_alloc_size((size_t)(ar * ac) * sizeof(float)) +
                   nf_gpu_alloc_size((size_t)(br * bc) * sizeof(float)) +
                   nf_gpu_alloc_size((size_t)(m * n) * sizeof(float));
    NF_TRY(rc = nf_gpu_arena_open(g, bytes, &err));
    float *dA = nf_gpu_alloc(g, (size_t)(ar * ac) * sizeof(float));
    float *dB = nf_gpu_alloc(g, (size_t)(br * bc) * sizeof(float));
    float *dC = nf_gpu_alloc(g, (size_t)(m * n) * sizeof(float));
    NF_TRY(rc = upload(g, dA, A, ar, ac, lda, &err));
    NF_TRY(rc = upload(g, dB, B, br, bc, ldb, &err));
    if (beta != 0.0f)
        NF_TRY(rc = upload(g, dC, C, m, n, ldc, &err));
    NF_TRY(rc = nf_gpu_sgemm(g, ta, tb, m, n, k, alpha, dA, ac, dB, bc, beta, dC, n, &err));
    NF_TRY(rc = download(g, C, ldc, dC, m, n, &err));
    NF_TRY(rc = nf_gpu_check(cudaStreamSynchronize(g->compute), "sgemm", &err));
fail:
    nf_gpu_release(g);
    return rc;
}

static void cuda_sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *A,
                       int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc)
{
    if (m <= 0 || n <= 0)
        return;
    if (host_sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc) < 0)
        nf_kernels_cpu()->sgemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

static int cuda_svd(const float *A, int64_t rows, int64_t cols, float *U, float *s, float *Vt)
{
    struct nf_error err = { 0 };
    int64_t r = rows < cols ? rows : cols;
    int rc = 0;
    bool rank_deficient = false;
    if (rows <= 0 || cols <= 0)
        return 0;
    struct nf_gpu *g = nf_gpu_acquire(&err);
    if (!g)
        return nf_kernels_cpu()->svd(A, rows, cols, U, s, Vt);
    size_t bytes = nf_gpu_alloc_size((size_t)(rows * cols) * sizeof(float)) +
                   nf_gpu_alloc_size((size_t)(rows * r) * sizeof(float)) +
                   nf_gpu_alloc_size((size_t)r * sizeof(float)) +
                   nf_gpu_alloc_size((size_t)(r * cols) * sizeof(float)) + nf_gpu_svd_bytes(g, rows, cols);
    NF_TRY(rc = nf_gpu_arena_open(g, bytes, &err));
    float *dA = nf_gpu_alloc(g, (size_t)(rows * cols) * sizeof(float));
    float *dU = nf_gpu_alloc(g, (size_t)(rows * r) * sizeof(float));
    float *ds = nf_gpu_alloc(g, (size_t)r * sizeof(float));
    float *dVt = nf_gpu_alloc(g, (size_t)(r * cols) * sizeof(float));
    NF_TRY(rc = upload(g, dA, A, rows, cols, cols, &err));
    NF_TRY(rc = nf_gpu_svd(g, dA, rows, cols, dU, ds, dVt, &err));
    NF_TRY(rc = download(g, U, r, dU, rows, r, &err));
    NF_TRY(rc = download(g, s, r, ds, 1, r, &err));
    NF_TRY(rc = download(g, Vt, cols, dVt, r, cols, &err));
    NF_TRY(rc = nf_gpu_check(cudaStreamSynchronize(g->compute), "svd", &err));
    /* the table's contract: U orthonormal even for a rank-deficient A. Jacobi's
     * U columns of (numerically) zero singular values are A v / s, which is
     * not; LAPACK completes them, so such matrices go to the CPU */
    rank_deficient = !(s[r - 1] > 1e-4f * s[0]);
fail:
    nf_gpu_release(g);
    if (rc < 0 || rank_deficient)   /* the CPU's answer, its errors included */
        return nf_kernels_cpu()->svd(A, rows, cols, U, s, Vt);
    return 0;
}

static void cpu_col_moments(const float *X, int64_t rows, int64_t cols, double *mean, double *std)
{
    nf_kernels_cpu()->col_moments(X, rows, cols, mean, std);
}

static void cpu_standardize(float *X, int64_t rows, int64_t cols, enum nf_standardize mode)
{
    nf_kernels_cpu()->standardize(X, rows, cols, mode);
}

const struct nf_kernels nf_kernels_cuda = {
    .name = "cuda",
    .sgemm = cuda_sgemm,
    .col_moments = cpu_col_moments,
    .standardize = cpu_standardize,
    .svd = cuda_svd,
    NF_KERNELS_SIMD_ENTRIES,
};

/* ---- calibration ---- */

/* Seconds between two events recorded on the compute stream. */
static double elapsed(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms * 1e-3 : NAN;
}

int nf_cuda_calibrate(double *sgemm_gflops, double *hbm_gbs, double *pcie_gbs, double *setup_s,
                      struct nf_error *err)
{
    enum { SIZE = 8192, REPS = 5 };
    const size_t mat = (size_t)SIZE * SIZE * sizeof(float), copy_bytes = (size_t)1 << 30,
                 pcie_bytes = (size_t)256 << 20;
    cudaEvent_t e0 = NULL, e1 = NULL;
    int rc = 0;
    *sgemm_gflops = *hbm_gbs = *pcie_gbs = *setup_s = NAN;
    bool fresh = the_gpu == NULL;
    double t0 = nf_now();
    struct nf_gpu *g = nf_gpu_acquire(err);
    if (!g)
        return err->code;
    if (fresh)
        *setup_s = nf_now() - t0;
    size_t need = 3 * nf_gpu_alloc_size(mat);
    if (need < 2 * nf_gpu_alloc_size(copy_bytes))
        need = 2 * nf_gpu_alloc_size(copy_bytes);
    NF_TRY(rc = nf_gpu_arena_open(g, need, err));
    NF_TRY(rc = nf_gpu_check(cudaEventCreate(&e0), "cudaEventCreate", err));
    NF_TRY(rc = nf_gpu_check(cudaEventCreate(&e1), "cudaEventCreate", err));
    {
        float *A = nf_gpu_alloc(g, mat), *B = nf_gpu_alloc(g, mat), *C = nf_gpu_alloc(g, mat);
        NF_TRY(rc = nf_gpu_check(cudaMemsetAsync(A, 0, mat, g->compute), "memset", err));
        NF_TRY(rc = nf_gpu_check(cudaMemsetAsync(B, 0, mat, g->compute), "memset", err));
        NF_TRY(rc = nf_gpu_sgemm(g, false, false, SIZE, SIZE, SIZE, 1.0f, A, SIZE, B, SIZE, 0.0f, C, SIZE, err));
        cudaEventRecord(e0, g->compute);
        for (int i = 0; i < REPS; i++)
            NF_TRY(rc = nf_gpu_sgemm(g, false, false, SIZE, SIZE, SIZE, 1.0f, A, SIZE, B, SIZE, 0.0f, C, SIZE,
                                     err));
        cudaEventRecord(e1, g->compute);
        NF_TRY(rc = nf_gpu_check(cudaEventSynchronize(e1), "timing sgemm", err));
        *sgemm_gflops = 2.0 * SIZE * (double)SIZE * SIZE * REPS / elapsed(e0, e1) * 1e-9;
    }
    g->arena_used = 0;
    {
        char *a = nf_gpu_alloc(g, copy_bytes), *b = nf_gpu_alloc(g, copy_bytes);
        NF_TRY(rc = nf_gpu_check(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice, g->compute), "copy",
                                 err));
        cudaEventRecord(e0, g->compute);
        for (int i = 0; i < REPS; i++)
            NF_TRY(rc = nf_gpu_check(cudaMemcpyAsync(b, a, copy_bytes, cudaMemcpyDeviceToDevice, g->compute),
                                     "copy", err));
        cudaEventRecord(e1, g->compute);
        NF_TRY(rc = nf_gpu_check(cudaEventSynchronize(e1), "timing copies", err));
        *hbm_gbs = 2.0 * (double)copy_bytes * REPS / elapsed(e0, e1) * 1e-9;
        void *host = nf_gpu_pinned(g, NF_GPU_PIN_UP0, pcie_bytes);
        if (host) {
            memset(host, 0, pcie_bytes);
            NF_TRY(rc = nf_gpu_check(cudaMemcpyAsync(a, host, pcie_bytes, cudaMemcpyHostToDevice, g->compute),
                                     "upload", err));
            cudaEventRecord(e0, g->compute);
            for (int i = 0; i < REPS; i++)
                NF_TRY(rc = nf_gpu_check(cudaMemcpyAsync(a, host, pcie_bytes, cudaMemcpyHostToDevice, g->compute),
                                         "upload", err));
            cudaEventRecord(e1, g->compute);
            NF_TRY(rc = nf_gpu_check(cudaEventSynchronize(e1), "timing uploads", err));
            *pcie_gbs = (double)pcie_bytes * REPS / elapsed(e0, e1) * 1e-9;
        }
    }
fail:
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    nf_gpu_release(g);
    return rc;
}
