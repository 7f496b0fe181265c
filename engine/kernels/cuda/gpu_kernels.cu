/* gpu_kernels.cu — the fused epilogue kernels of the GPU ridge and permute
 * nodes, and the searchlight's gather and per-sphere solve.
 *
 * The GEMM-shaped work goes to cuBLAS (gpu_context.c); what follows a GEMM and
 * would otherwise cost a pass over its output through host memory is fused
 * here: per-voxel sums of the ridge validation error for every alpha and fold,
 * the choice of the best alpha, the shrinkage of the refit; the permutation
 * statistic's transform, exceedance counts, near-tie flags and per-permutation
 * maxima.
 *
 * What a thread computes is in gpu_kernel_bodies.h, shared with the CPU
 * emulation the tests use; it mirrors the CPU nodes operation by operation.
 * This file is compiled with --fmad=false so that nvcc does not contract a*b+c
 * into one FMA the CPU code does not do (the CPU build is ISO C, which does not
 * contract either). Given equal inputs the epilogues therefore give the CPU's
 * bits; the inputs (the GEMMs) differ only by float round-off.
 *
 * Layouts: one thread per voxel (consecutive threads, consecutive voxels, so
 * every row read is coalesced), loops over rows / alphas / components inside.
 */
#include "gpu.h"
#include "gpu_kernel_bodies.h"

namespace {

const int THREADS = 256;
/* Permutations per thread block of the permute epilogue: their maxima are
 * reduced in shared memory first, one global atomic per row and block. */
const int PERM_ROWS = 32;

unsigned blocks_for(int64_t n)
{
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b);
}

int launch_status()
{
    cudaError_t st = cudaGetLastError();
    return st == cudaSuccess ? 0 : -(int)st;
}

/* ---- ridge: one thread per voxel (and row j / i in grid y) ---- */

__global__ void ridge_stats_kernel(const float *Y, int64_t n, int64_t nb, int k, const int64_t *v0,
                                   const int64_t *v1, bool center, bool fold_center, double *y_mean,
                                   double *ymean, double *sy, double *syy)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < nb)
        nf_body_ridge_stats(v, Y, n, nb, k, v0, v1, center, fold_center, y_mean, ymean, sy, syy);
}

__global__ void ridge_center_kernel(float *X, int64_t r, int64_t rmax, int64_t nb, const double *colsum,
                                    const double *centre, bool center)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    if (v < nb && j < rmax)
        nf_body_ridge_center(j, v, X, r, nb, colsum, centre, center);
}

__global__ void ridge_scores_kernel(int f0, int kb, int64_t A, int64_t rmax, int64_t nb, const int *r,
                                    const double *nval, const float *UtY, const float *Z, const float *T,
                                    const double *dj, const double *pj, const double *sy,
                                    const double *syy, int score_kind, bool legacy, double *acc,
                                    float *cv)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, a = blockIdx.y;
    if (v < nb && a < A)
        nf_body_ridge_scores(v, a, f0, kb, A, rmax, nb, r, nval, UtY, Z, T, dj, pj, sy, syy, score_kind, legacy,
                             acc, cv);
}

__global__ void ridge_choose_kernel(int64_t A, int64_t nb, int k, const double *acc, const double *alphas,
                                    int64_t shared_best, int *best, float *alpha_out, float *score_out)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (v < nb)
        nf_body_ridge_choose(v, A, nb, k, acc, alphas, shared_best, best, alpha_out, score_out);
}

__global__ void ridge_shrink_kernel(const float *in, float *out, int64_t r, int64_t nb, const float *s,
                                    const double *alphas, const int *best, const double *colsum,
                                    const double *y_mean)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y;
    if (v < nb && j < r)
        nf_body_ridge_shrink(j, v, in, out, nb, s, alphas, best, colsum, y_mean);
}

__global__ void add_rows_kernel(float *X, int64_t rows, int64_t nb, const double *centre)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (v < nb && i < rows)
        nf_body_add_rows(i, v, X, nb, centre);
}

__global__ void gather_rows_kernel(float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                                   const int64_t *rows, int64_t n_rows, int64_t cols)
{
    int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, i = blockIdx.y;
    if (v < cols && i < n_rows)
        nf_body_gather_rows(i, v, dst, ld_dst, src, ld_src, rows);
}

/* ---- searchlight ---- */

/* One thread per element of the gathered batch (consecutive threads write
 * consecutive floats; the reads follow a sphere's columns, which are close in
 * the grid and so mostly in the same cache lines). */
__global__ void sl_gather_kernel(const float *X, int64_t ldx, const int64_t *rows, const double *mean,
                                 const double *inv_sd, const int32_t *idx, int64_t total, int64_t n, int64_t mb,
                                 float *Z)
{
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e < total)
        nf_body_sl_gather(e, X, ldx, rows, mean, inv_sd, idx, n, mb, Z);
}

/* One thread per sphere: the solves are small (a sphere's voxels or the
 * training rows), and a thread doing the CPU's sequential Cholesky gives the
 * CPU's double arithmetic exactly; the scratch is interleaved across spheres so
 * that the threads of a warp read and write consecutive doubles. */
__global__ void sl_solve_kernel(int64_t nb, const int32_t *size, int64_t n_tr, int64_t n_val, int64_t q, int64_t mb,
                                int64_t ldp, int64_t S, const float *Z, const float *G, int64_t g_stride,
                                double alpha, const double *t_c, const double *t_mean, double *L, double *T,
                                float *dec, int64_t dec_ld)
{
    int64_t b = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (b < nb)
        nf_body_sl_solve(b, nb, size, n_tr, n_val, q, mb, ldp, S, Z, G, g_stride, alpha, t_c, t_mean, L, T, dec,
                         dec_ld);
}

/* ---- permute ---- */

/* A block covers THREADS voxels and PERM_ROWS permutations: per value the
 * transform, the count and the tie flag; per permutation the maximum, reduced
 * over the warp (__reduce_max_sync), then over the block in shared memory,
 * then one global atomicMax per permutation and block. */
__global__ void perm_epilogue_kernel(const float *C, int64_t rows, int64_t nv, int64_t v0, int64_t row0,
                                     nf_gpu_perm_consts k, uint32_t *count, int *rowmax, int2 *near,
                                     int64_t near_cap, unsigned long long *n_near)
{
    __shared__ int smax[PERM_ROWS];
    const int tid = threadIdx.x;
    const int64_t vl = (int64_t)blockIdx.x * blockDim.x + tid, v = v0 + vl;
    const bool valid = vl < nv;
    const int64_t r0 = (int64_t)blockIdx.y * PERM_ROWS;
    const int nr = rows - r0 < PERM_ROWS ? (int)(rows - r0) : PERM_ROWS;
    const int key_min = nf_body_float_key(-FLT_MAX);
    for (int i = tid; i < PERM_ROWS; i += blockDim.x)
        smax[i] = key_min;
    __syncthreads();
    float shift = 0, ss = 0, fl = 0, cap = 0, lo = 0, hi = 0;
    if (valid) {
        shift = k.shift[v];
        ss = k.ss[v];
        fl = k.floor_[v];
        cap = k.cap[v];
        lo = k.lo[v];
        hi = k.hi[v];
    }
    uint32_t cnt = 0;
    for (int i = 0; i < nr; i++) {
        int key = key_min;
        if (valid) {
            float q = nf_body_perm_transform(&k, C[(r0 + i) * nv + vl], shift, ss, fl, cap);
            cnt += q >= hi;
            if (q > lo && q < hi) {   /* rare: within round-off of the observed value */
                unsigned long long at = atomicAdd(n_near, 1ull);
                if ((int64_t)at < near_cap)
                    near[at] = make_int2((int)(row0 + r0 + i), (int)v);
            }
            key = nf_body_float_key(q);
        }
        key = __reduce_max_sync(0xffffffffu, key);
        if ((tid & 31) == 0)
            atomicMax(&smax[i], key);
    }
    if (valid && cnt)
        atomicAdd(&count[v], cnt);
    __syncthreads();
    for (int i = tid; i < nr; i += blockDim.x)
        atomicMax(&rowmax[row0 + r0 + i], smax[i]);
}

__global__ void fill_kernel(int *keys, int64_t n, int value)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        keys[i] = value;
}

/* Grid y (rows of a 2D launch) is limited to 65535. */
bool rows_fit(int64_t rows)
{
    return rows <= 65535;
}

} // namespace

extern "C" int nf_gpu_ridge_stats(cudaStream_t stream, const float *Y, int64_t n, int64_t nb, int k,
                                  const int64_t *v0, const int64_t *v1, bool center, bool fold_center,
                                  double *y_mean, double *ymean, double *sy, double *syy)
{
    if (nb <= 0)
        return 0;
    ridge_stats_kernel<<<blocks_for(nb), THREADS, 0, stream>>>(Y, n, nb, k, v0, v1, center, fold_center,
                                                               y_mean, ymean, sy, syy);
    return launch_status();
}

extern "C" int nf_gpu_ridge_center(cudaStream_t stream, float *X, int64_t r, int64_t rmax, int64_t nb,
                                   const double *colsum, const double *centre, bool center)
{
    if (nb <= 0 || rmax <= 0 || (!center && r >= rmax))
        return 0;
    /* rows in grid y, at most 65535 per launch */
    for (int64_t j0 = 0; j0 < rmax; j0 += 65535) {
        int64_t len = rmax - j0 < 65535 ? rmax - j0 : 65535;
        ridge_center_kernel<<<dim3(blocks_for(nb), (unsigned)len), THREADS, 0, stream>>>(
            X + j0 * nb, r - j0, len, nb, colsum + j0, centre, center);
        int rc = launch_status();
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int nf_gpu_ridge_scores(cudaStream_t stream, int f0, int kb, int64_t A, int64_t rmax, int64_t nb,
                                   const int *r, const double *nval, const float *UtY, const float *Z,
                                   const float *T, const double *dj, const double *pj, const double *sy,
                                   const double *syy, int score_kind, bool legacy, double *acc, float *cv)
{
    if (nb <= 0 || kb <= 0 || A <= 0)
        return 0;
    if (!rows_fit(A))
        return -(int)cudaErrorInvalidValue;   /* the alphas table allows 10000 */
    ridge_scores_kernel<<<dim3(blocks_for(nb), (unsigned)A), THREADS, 0, stream>>>(
        f0, kb, A, rmax, nb, r, nval, UtY, Z, T, dj, pj, sy, syy, score_kind, legacy, acc, cv);
    return launch_status();
}

extern "C" int nf_gpu_ridge_choose(cudaStream_t stream, int64_t A, int64_t nb, int k, const double *acc,
                                   const double *alphas, int64_t shared_best, int *best, float *alpha_out,
                                   float *score_out)
{
    if (nb <= 0)
        return 0;
    ridge_choose_kernel<<<blocks_for(nb), THREADS, 0, stream>>>(A, nb, k, acc, alphas, shared_best, best,
                                                                alpha_out, score_out);
    return launch_status();
}

extern "C" int nf_gpu_ridge_shrink(cudaStream_t stream, const float *in, float *out, int64_t r, int64_t nb,
                                   const float *s, const double *alphas, const int *best,
                                   const double *colsum, const double *y_mean)
{
    if (nb <= 0 || r <= 0)
        return 0;
    for (int64_t j0 = 0; j0 < r; j0 += 65535) {
        int64_t len = r - j0 < 65535 ? r - j0 : 65535;
        ridge_shrink_kernel<<<dim3(blocks_for(nb), (unsigned)len), THREADS, 0, stream>>>(
            in + j0 * nb, out + j0 * nb, len, nb, s + j0, alphas, best, colsum ? colsum + j0 : NULL, y_mean);
        int rc = launch_status();
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int nf_gpu_gather_rows(cudaStream_t stream, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                                  const int64_t *rows, int64_t n_rows, int64_t cols)
{
    if (cols <= 0 || n_rows <= 0)
        return 0;
    for (int64_t i0 = 0; i0 < n_rows; i0 += 65535) {   /* the grid's y limit */
        int64_t len = n_rows - i0 < 65535 ? n_rows - i0 : 65535;
        gather_rows_kernel<<<dim3(blocks_for(cols), (unsigned)len), THREADS, 0, stream>>>(
            dst + i0 * ld_dst, ld_dst, rows ? src : src + i0 * ld_src, ld_src, rows ? rows + i0 : NULL, len, cols);
        int rc = launch_status();
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int nf_gpu_add_rows(cudaStream_t stream, float *X, int64_t rows, int64_t nb, const double *centre)
{
    if (nb <= 0 || rows <= 0)
        return 0;
    /* rows can exceed the grid's y limit (samples): launch in slices */
    for (int64_t i0 = 0; i0 < rows; i0 += 65535) {
        int64_t len = rows - i0 < 65535 ? rows - i0 : 65535;
        add_rows_kernel<<<dim3(blocks_for(nb), (unsigned)len), THREADS, 0, stream>>>(X + i0 * nb, len, nb,
                                                                                    centre);
        int rc = launch_status();
        if (rc)
            return rc;
    }
    return 0;
}

extern "C" int nf_gpu_sl_gather(cudaStream_t stream, const float *X, int64_t ldx, const int64_t *rows,
                                const double *mean, const double *inv_sd, const int32_t *idx, int64_t nb, int64_t n,
                                int64_t mb, float *Z)
{
    const int64_t total = nb * n * mb;
    if (total <= 0)
        return 0;
    if ((total + THREADS - 1) / THREADS > 0x7fffffff)
        return -(int)cudaErrorInvalidValue;   /* the caller's batches are far smaller */
    sl_gather_kernel<<<blocks_for(total), THREADS, 0, stream>>>(X, ldx, rows, mean, inv_sd, idx, total, n, mb, Z);
    return launch_status();
}

extern "C" int nf_gpu_sl_solve(cudaStream_t stream, int64_t nb, const int32_t *size, int64_t n_tr, int64_t n_val,
                               int64_t q, int64_t mb, int64_t ldp, int64_t S, const float *Z, const float *G,
                               int64_t g_stride, double alpha, const double *t_c, const double *t_mean, double *L,
                               double *T, float *dec, int64_t dec_ld)
{
    if (nb <= 0)
        return 0;
    /* 64 threads a block: a batch of a few thousand spheres still spreads
     * over every SM */
    sl_solve_kernel<<<(unsigned)((nb + 63) / 64), 64, 0, stream>>>(nb, size, n_tr, n_val, q, mb, ldp, S, Z, G,
                                                                   g_stride, alpha, t_c, t_mean, L, T, dec, dec_ld);
    return launch_status();
}

extern "C" int nf_gpu_perm_epilogue(cudaStream_t stream, const float *C, int64_t rows, int64_t nv, int64_t v0,
                                    int64_t row0, const struct nf_gpu_perm_consts *k, uint32_t *count,
                                    int *rowmax, int2 *near, int64_t near_cap, unsigned long long *n_near)
{
    if (rows <= 0 || nv <= 0)
        return 0;
    int64_t row_blocks = (rows + PERM_ROWS - 1) / PERM_ROWS;
    if (!rows_fit(row_blocks))
        return -(int)cudaErrorInvalidValue;
    perm_epilogue_kernel<<<dim3(blocks_for(nv), (unsigned)row_blocks), THREADS, 0, stream>>>(
        C, rows, nv, v0, row0, *k, count, rowmax, near, near_cap, n_near);
    return launch_status();
}

extern "C" int nf_gpu_fill_key_min(cudaStream_t stream, int *keys, int64_t n)
{
    if (n <= 0)
        return 0;
    fill_kernel<<<blocks_for(n), THREADS, 0, stream>>>(keys, n, nf_body_float_key(-FLT_MAX));
    return launch_status();
}

extern "C" float nf_gpu_key_to_float(int key)
{
    return nf_body_key_float(key);
}
