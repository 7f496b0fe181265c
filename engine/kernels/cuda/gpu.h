/* gpu.h — the GPU context and kernels of the CUDA backend (builds with HAVE_CUDA).
 *
 * One process-wide context on device 0, made the first time a node asks for it:
 * a cuBLAS and a cuSOLVER handle bound to a compute stream, a second stream for
 * host<->device copies, pinned host staging buffers (kept between nodes, since
 * pinning is slow) and a device memory arena (one cudaMalloc per node run, sized
 * by the node from cudaMemGetInfo less a safety margin; bump allocation inside).
 * A node takes the context with nf_gpu_acquire() and gives it back with
 * nf_gpu_release(): one node at a time uses the GPU (a mutex), so two nodes
 * running side by side on CPU threads never share handles or streams.
 *
 * Device pointers are plain `float *`. Matrices are row-major like everything
 * else in nlflow; the cuBLAS wrappers do the usual transpose trick (a row-major
 * m x n matrix is the column-major n x m one, so C = A B is computed as
 * Cᵀ = Bᵀ Aᵀ). cuBLAS runs in CUBLAS_DEFAULT_MATH: FP32 arithmetic, never TF32,
 * so its round-off stays within the bounds the nodes assume (permute's tie window).
 *
 * Errors: functions return 0 or a negative NF_E* code and fill `err`; a CUDA
 * out-of-memory is NF_ENOMEM (the nodes shrink their blocks and retry), anything
 * else NF_EBUG with the CUDA error's name. Only this header's functions and the
 * kernel launchers below touch CUDA (tests/check-layout-kernels.sh checks that
 * node files call no cuda*, cublas* or cusolver* function); callable from C
 * and C++ (nvcc).
 */
#ifndef NF_GPU_H
#define NF_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cusolverDn.h>

#include "core/error.h"
#include "kernels/kernels.h"

/* cuBLAS and cuSOLVER are loaded at their first call (cuda_libs.c): NULL when
 * both load, else why not. */
const char *nf_cuda_libs_missing(void);

#ifdef __cplusplus
extern "C" {
#endif

/* Pinned staging buffers: two for uploads, two for downloads (double
 * buffering), two for the uploads of resident copies (nf_gpu_resident). */
enum { NF_GPU_PIN_UP0, NF_GPU_PIN_UP1, NF_GPU_PIN_DOWN0, NF_GPU_PIN_DOWN1, NF_GPU_PIN_RES0, NF_GPU_PIN_RES1,
       NF_GPU_PIN_SLOTS };
struct nf_gpu_copy;

struct nf_gpu {
    int device;
    char name[256];
    int cc_major, cc_minor, sm_count;
    size_t total_mem;
    cublasHandle_t blas;
    cusolverDnHandle_t solver;
    cudaStream_t compute, copy;        /* kernels and GEMMs; uploads/downloads */
    /* the arena of the current node run */
    char *arena;
    size_t arena_size, arena_used;
    /* pinned host staging, grown on demand, kept until nf_gpu_shutdown */
    void *pinned[NF_GPU_PIN_SLOTS];
    size_t pinned_size[NF_GPU_PIN_SLOTS];
    /* device-resident copies of node inputs (nf_gpu_resident) */
    struct nf_gpu_copy *copies;
    size_t n_copies, cap_copies;
    uint64_t use_clock;                /* orders the copies' last use */
};

/* Bytes kept free on the device beyond what the arena takes: for the CUDA
 * context's own allocations, cuSOLVER's internals and other processes. */
#define NF_GPU_MARGIN_BYTES ((size_t)512 << 20)
/* cuBLAS workspace carved from the arena (NVIDIA recommends 32 MiB on Hopper). */
#define NF_GPU_BLAS_WORKSPACE ((size_t)32 << 20)

/* Take the context (creating it the first time). NULL with err set ("no
 * usable GPU: " and why: no driver, no device, a failed handle) when there is
 * no usable GPU. */
struct nf_gpu *nf_gpu_acquire(struct nf_error *err);
/* Close the arena and give the context back. NULL-safe. */
void nf_gpu_release(struct nf_gpu *g);
/* Destroy the context (handles, streams, pinned buffers, resident copies);
 * for tests and tools that want a clean exit. Does nothing while a node
 * holds it. */
void nf_gpu_shutdown(void);

/* ---- device memory ---- */
/* Free device memory now (cudaMemGetInfo) less NF_GPU_MARGIN_BYTES, 0 if less. */
size_t nf_gpu_free_bytes(struct nf_gpu *g);
/* One cudaMalloc of `bytes` (+ the cuBLAS workspace) for this node run. Returns
 * 0, NF_ENOMEM (the caller shrinks and asks again), or another NF_E* code. */
int nf_gpu_arena_open(struct nf_gpu *g, size_t bytes, struct nf_error *err);
/* Bump allocation from the arena, 256-byte aligned; NULL when it is full
 * (a bug in the caller's sizing: report NF_EBUG). Zero bytes give a valid
 * pointer. */
void *nf_gpu_alloc(struct nf_gpu *g, size_t bytes);
/* Bytes nf_gpu_alloc takes for a request (its rounding), for sizing. */
size_t nf_gpu_alloc_size(size_t bytes);
void nf_gpu_arena_close(struct nf_gpu *g);
/* A pinned host buffer of at least `bytes` for slot (grown as needed); NULL
 * when pinning fails (callers report NF_ENOMEM). */
void *nf_gpu_pinned(struct nf_gpu *g, int slot, size_t bytes);

/* ---- device-resident inputs, kept between node runs ----
 * A GPU node that needs a whole input matrix on the device takes it with
 * nf_gpu_resident(): the first node to ask uploads it; a later GPU node that
 * asks for the same value (a second ridge on the same Y, a permute after
 * another on the same maps) finds it there and skips the upload. A copy is
 * named by the value's serial (value.h: unique in the process, never reused)
 * and a layout tag (NF_GPU_AS_IS: the matrix's own bytes; a node may keep a
 * derived form of one value under a tag of its own). Copies are cudaMalloc'd
 * outside the arena. They go when their value is freed (nf_value_set_free_hook
 * marks them; freed at the next acquire or release), least recently used
 * first when an arena or another copy needs the memory, and at
 * nf_gpu_shutdown; the copies a node took are kept until its nf_gpu_release.
 * nf_gpu_free_bytes counts the memory of copies that could go. */
enum { NF_GPU_AS_IS = 0 };
/* *dev = the device copy of `bytes` bytes at `host` (serial, layout), made
 * and uploaded now unless it is there (*uploaded says which; may be NULL).
 * 0; NF_ENOMEM when it does not fit even with every other copy gone (the
 * node streams instead); another NF_E* code on a CUDA error. serial 0 (a
 * value not from value.c) is never kept: every call uploads into a new copy,
 * freed at release. */
int nf_gpu_resident(struct nf_gpu *g, uint64_t serial, int layout, const void *host, size_t bytes, void **dev,
                    bool *uploaded, struct nf_error *err);
/* Whether nodes keep inputs resident: yes unless NLFLOW_GPU_RESIDENT=0 or a
 * test said no (nf_gpu_debug_residency). */
bool nf_gpu_residency_enabled(void);
void nf_gpu_debug_residency(int on);   /* 1, 0, or -1: back to the environment */
/* What the copies did since the context was made (tests, benchmarks). */
struct nf_gpu_resident_stats {
    size_t bytes;              /* held now */
    int64_t copies;            /* held now */
    int64_t uploads, hits, evictions;
    size_t uploaded_bytes;
};
void nf_gpu_resident_stats(struct nf_gpu_resident_stats *out);

/* Testing hooks: make the next `n` arena opens fail as out of memory (to test
 * the shrink-and-retry paths), and cap the voxel / permutation blocks of the
 * GPU nodes (0: no cap) so that small test problems take several blocks. */
void nf_gpu_debug_fail_arena(int n);
void nf_gpu_debug_max_block(int64_t max_block);
int64_t nf_gpu_debug_block_cap(void);
/* Phase profile (NLFLOW_GPU_PROFILE=1; else nothing): wait for both streams
 * and add the wall time since the previous mark (or nf_gpu_acquire) to
 * `label`, a string literal naming the phase that just ended; the totals go
 * to stderr at nf_gpu_release. Waiting removes the overlap of copies and
 * compute, so it shows where the time goes, not the plain run's total. */
void nf_gpu_phase(struct nf_gpu *g, const char *label);

/* A CUDA runtime status as an nlflow error: 0 when cudaSuccess, else NF_ENOMEM
 * for cudaErrorMemoryAllocation and NF_EBUG otherwise, err saying `what`. */
int nf_gpu_check(cudaError_t status, const char *what, struct nf_error *err);

/* Error plumbing for GPU node code that has `int rc`, `struct nf_error *err`
 * and `struct nf_gpu *g` in scope and one `fail:` label:
 *   NF_GPU_ALLOC(ptr, count)  count elements of *ptr from the arena; running
 *                             out means the node's plan is wrong (NF_EBUG);
 *   NF_GPU_KL(expr, what)     a kernel launcher of this header (0 or -cudaError_t).
 * Everything else a node does on the device returns 0 or an NF_E* code:
 * `NF_TRY(rc = nf_gpu_upload(..., err));`. */
#define NF_GPU_ALLOC(ptr, count)                                                               \
    do {                                                                                       \
        if (!((ptr) = nf_gpu_alloc(g, (size_t)(count) * sizeof *(ptr)))) {                    \
            rc = NF_FAIL(err, NF_EBUG, "the GPU arena is smaller than its plan (%s)", #ptr);   \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)
#define NF_GPU_KL(expr, what)                                                                  \
    do {                                                                                       \
        int kr_ = (expr);                                                                      \
        if (kr_) {                                                                             \
            rc = nf_gpu_check((cudaError_t)-kr_, what, err);                                   \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

/* ---- streams, events, copies: what the node GPU paths use of the runtime ----
 * So that a node's GPU path reads like its CPU path, nodes never call the CUDA
 * runtime: they go through these. Each returns 0 or a negative NF_E* code with
 * err set (nf_gpu_check: NF_ENOMEM for out of memory, else NF_EBUG naming
 * `what` and the CUDA error). Streams are the context's (g->compute, g->copy);
 * copies are asynchronous on the stream given, host buffers pinned
 * (nf_gpu_pinned) when the copy should overlap with compute. */
typedef cudaEvent_t nf_gpu_event;
/* An event for ordering streams and waiting from the host (no timing). */
int nf_gpu_event_create(nf_gpu_event *event, struct nf_error *err);
/* NULL-safe. */
void nf_gpu_event_destroy(nf_gpu_event event);
/* Mark the point the stream has reached. */
int nf_gpu_event_record(nf_gpu_event event, cudaStream_t stream, struct nf_error *err);
/* Later work on `stream` waits for the event (the host does not). */
int nf_gpu_stream_wait(cudaStream_t stream, nf_gpu_event event, const char *what, struct nf_error *err);
/* The host waits for the event / for everything on the stream. */
int nf_gpu_event_sync(nf_gpu_event event, const char *what, struct nf_error *err);
int nf_gpu_stream_sync(cudaStream_t stream, const char *what, struct nf_error *err);
/* After a failure: wait for both of the context's streams, errors ignored,
 * so that nothing in flight still reads or writes buffers about to be freed. */
void nf_gpu_drain(struct nf_gpu *g);
/* bytes from host to device / device to host, asynchronously on `stream`. */
int nf_gpu_upload(cudaStream_t stream, void *dev, const void *host, size_t bytes, const char *what,
                  struct nf_error *err);
int nf_gpu_download(cudaStream_t stream, void *host, const void *dev, size_t bytes, const char *what,
                    struct nf_error *err);
/* `rows` rows of `width` bytes, rows `dst_pitch` / `src_pitch` bytes apart. */
int nf_gpu_upload_2d(cudaStream_t stream, void *dev, size_t dst_pitch, const void *host, size_t src_pitch,
                     size_t width, size_t rows, const char *what, struct nf_error *err);
int nf_gpu_download_2d(cudaStream_t stream, void *host, size_t dst_pitch, const void *dev, size_t src_pitch,
                       size_t width, size_t rows, const char *what, struct nf_error *err);
/* bytes of device memory set to zero, asynchronously on `stream`. */
int nf_gpu_zero(cudaStream_t stream, void *dev, size_t bytes, const char *what, struct nf_error *err);
/* Device memory outside the arena, for a buffer whose size is known only
 * after a step ran (freed with nf_gpu_free, NULL-safe): 0 or NF_ENOMEM. */
int nf_gpu_malloc(void **dev, size_t bytes, const char *what, struct nf_error *err);
void nf_gpu_free(void *dev);

/* ---- cuBLAS / cuSOLVER on the compute stream, device pointers, row-major ---- */
/* C = alpha op(A) op(B) + beta C, as nf_kernels.sgemm. */
int nf_gpu_sgemm(struct nf_gpu *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *A, int64_t lda, const float *B, int64_t ldb, float beta, float *C,
                 int64_t ldc, struct nf_error *err);
/* `batch` independent GEMMs, matrix i at A + i strideA etc. (elements). */
int nf_gpu_sgemm_batched(struct nf_gpu *g, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                         float alpha, const float *A, int64_t lda, int64_t stride_a, const float *B,
                         int64_t ldb, int64_t stride_b, float beta, float *C, int64_t ldc,
                         int64_t stride_c, int64_t batch, struct nf_error *err);
/* Thin SVD of the row-major rows x cols device matrix A (not modified), as
 * nf_kernels.svd: U rows x r, s (r, descending), Vt r x cols, r = min(rows, cols).
 * cuSOLVER's gesvdj (one-sided Jacobi) on the orientation with more rows than
 * columns; scratch comes from the arena (nf_gpu_svd_bytes) or, when it has no
 * room, from a cudaMalloc of its own. NF_EDATA when it does not converge.
 * Synchronises the compute stream. Unlike LAPACK, the U columns of singular
 * values that are zero to working precision are not orthonormal (Jacobi
 * computes them as A v / s; exactly zero ones come back non-finite): callers
 * that need them (nf_kernels_cuda.svd) must complete them, the ridge node
 * zeroes non-finite ones (their shrinkage factor is 0). */
int nf_gpu_svd(struct nf_gpu *g, const float *A, int64_t rows, int64_t cols, float *U, float *s,
               float *Vt, struct nf_error *err);
/* Arena bytes nf_gpu_svd needs for a rows x cols matrix (0 when the query fails). */
size_t nf_gpu_svd_bytes(struct nf_gpu *g, int64_t rows, int64_t cols);

/* The dispatch table on the GPU: host pointers in and out, each call uploads,
 * computes and downloads (for tests and one-off use; the nodes keep data
 * resident instead). sgemm and svd run on the device; col_moments and
 * standardize are the CPU's. Entries fall back to the CPU table when no GPU is
 * usable or a device call fails, and svd also for a numerically rank-deficient
 * matrix (see nf_gpu_svd). */
extern const struct nf_kernels nf_kernels_cuda;

/* ---- epilogue kernels (gpu_kernels.cu) ----
 * Every launcher enqueues on `stream` and returns 0, or -(cudaError_t) of a
 * launch that failed (turn it into an nlflow error with nf_gpu_check). */

/* Ridge (the algebra is in nodes/ridge/ridge_gpu.c), for a block of nb voxels whose
 * rows Y (n x nb, in fold order) are on the device; fold f validates on rows
 * [v0[f], v1[f]) (device arrays of k):
 *   y_mean[v]: the mean of all rows (when center);
 *   ymean[f*nb+v]: the centre of fold f's training rows: their mean when
 *     fold_center, else y_mean[v] when center, else 0;
 *   sy, syy[f*nb+v]: sums of (y - ymean) and of its square over the validation
 *     rows. Double, rows in order (the CPU's sums). */
int nf_gpu_ridge_stats(cudaStream_t stream, const float *Y, int64_t n, int64_t nb, int k,
                       const int64_t *v0, const int64_t *v1, bool center, bool fold_center,
                       double *y_mean, double *ymean, double *sy, double *syy);
/* X[j*nb+v] -= (float)(colsum[j] * centre[v]) for j < r when center; rows
 * r..rmax-1 are zeroed (padding of a fold with a smaller rank). */
int nf_gpu_ridge_center(cudaStream_t stream, float *X, int64_t r, int64_t rmax, int64_t nb,
                        const double *colsum, const double *centre, bool center);
/* The validation score of every alpha for folds f0..f0+kb-1, added (fold by
 * fold, in order) into acc (A x nb, double), and written as float to
 * cv[(f A + a) nb + v] when cv is not NULL. UtY: all k folds, k x rmax x nb;
 * Z: the group's, kb x rmax x nb; T: the group's, kb x (A rmax) x nb; dj, pj:
 * k x A x rmax (double); r (int), nval (double), sy, syy: per fold, all k.
 * score_kind: RIDGE_R2 / RIDGE_PEARSON; legacy: the shared-mode R². */
int nf_gpu_ridge_scores(cudaStream_t stream, int f0, int kb, int64_t A, int64_t rmax, int64_t nb,
                        const int *r, const double *nval, const float *UtY, const float *Z,
                        const float *T, const double *dj, const double *pj, const double *sy,
                        const double *syy, int score_kind, bool legacy, double *acc, float *cv);
/* Per voxel: the first alpha with the best (float) mean score over k folds, or
 * `shared_best` when >= 0; writes best, the alpha and the mean score. */
int nf_gpu_ridge_choose(cudaStream_t stream, int64_t A, int64_t nb, int k, const double *acc,
                        const double *alphas, int64_t shared_best, int *best, float *alpha_out,
                        float *score_out);
/* out[j*nb+v] = (float)((in[j*nb+v] - (y_mean ? colsum[j] * y_mean[v] : 0))
 *               * (s_j / (s_j² + alphas[best[v]])))  for j < r. */
int nf_gpu_ridge_shrink(cudaStream_t stream, const float *in, float *out, int64_t r, int64_t nb,
                        const float *s, const double *alphas, const int *best,
                        const double *colsum, const double *y_mean);
/* dst[i*ld_dst+v] = src[rows[i]*ld_src+v] (src[i*ld_src+v] when rows is
 * NULL) for i < n_rows, v < cols: rows of a resident matrix in another order
 * (rows: a device array). */
int nf_gpu_gather_rows(cudaStream_t stream, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                       const int64_t *rows, int64_t n_rows, int64_t cols);
/* X[i*nb+v] += (float)centre[v] for i < rows. */
int nf_gpu_add_rows(cudaStream_t stream, float *X, int64_t rows, int64_t nb, const double *centre);

/* Searchlight (the algebra is in nodes/searchlight/searchlight.c, the batches in
 * nodes/searchlight/searchlight_gpu.c), for a batch of nb spheres whose column lists are
 * padded to mb entries (idx: nb x mb, -1 = padding), on one fold whose rows
 * (n: training rows then validation rows) index the resident X (ld ldx):
 *   Z[(b n + r) mb + j] = (float)(((double)X[rows[r] ldx + col] - mean[col]) *
 *   inv_sd[col]) with col = idx[b mb + j], 0.0f for padding — the CPU's
 *   gather for the closed forms, so each sphere's (n x mb) Z is the CPU's with
 *   zero columns appended. */
int nf_gpu_sl_gather(cudaStream_t stream, const float *X, int64_t ldx, const int64_t *rows, const double *mean,
                     const double *inv_sd, const int32_t *idx, int64_t nb, int64_t n, int64_t mb, float *Z);
/* One thread per sphere b < nb of size[b] voxels: the CPU's closed form
 * (searchlight.c closed_form_fold, operation by operation, in double) from
 * the Gram matrix at G + b g_stride — primal (size <= n_tr: Z_tᵀ Z_t, ld ldp)
 * or dual (size > n_tr: [K_tt; K_vt] = Z Z_tᵀ, ld n_tr) — and the sphere's Z
 * (n x mb at Z + b n mb); t_c: n_tr x q centred targets, t_mean: q. Writes the
 * n_val x q decision values at dec + b dec_ld (NaN when (K + alpha I) is not
 * positive definite). L (S x S) and T (S) are per-sphere scratch in double,
 * interleaved across spheres (element e of sphere b at [e nb + b], so that a
 * warp's accesses coalesce); S >= every system's size. */
int nf_gpu_sl_solve(cudaStream_t stream, int64_t nb, const int32_t *size, int64_t n_tr, int64_t n_val, int64_t q,
                    int64_t mb, int64_t ldp, int64_t S, const float *Z, const float *G, int64_t g_stride,
                    double alpha, const double *t_c, const double *t_mean, double *L, double *T, float *dec,
                    int64_t dec_ld);

/* Permute: per-voxel constants of the transform (see nodes/permute/permute.c), device arrays. */
struct nf_gpu_perm_consts {
    float a, c;
    int tail;                 /* PERM_TAIL_* */
    bool t_stat;
    const float *shift, *ss, *floor_, *cap, *lo, *hi;   /* V each, device */
};
/* For C (rows x nv, ld nv), the null values of permutations row0.. and voxels
 * v0..v0+nv: the transformed statistic; count[v0+v] += #(q >= hi); the near
 * ties (lo < q < hi) appended as (row0 + i, v0 + v) pairs to near[] (capacity
 * near_cap pairs; *n_near counts every one, also beyond the capacity); and
 * rowmax[row0 + i] = max over voxels as an ordered int (nf_gpu_key_to_float
 * turns it back). */
int nf_gpu_perm_epilogue(cudaStream_t stream, const float *C, int64_t rows, int64_t nv, int64_t v0,
                         int64_t row0, const struct nf_gpu_perm_consts *k, uint32_t *count,
                         int *rowmax, int2 *near, int64_t near_cap, unsigned long long *n_near);
/* Fill n ints with the key of -FLT_MAX (the identity of the maximum). */
int nf_gpu_fill_key_min(cudaStream_t stream, int *keys, int64_t n);
/* The float an ordered-int key stands for (rowmax entries). */
float nf_gpu_key_to_float(int key);

#ifdef __cplusplus
}
#endif

#endif
