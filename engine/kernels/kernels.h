/* kernels.h — the compute dispatch table.
 *
 * Nodes never call BLAS or CUDA directly: they call through a struct nf_kernels.
 * `nf_kernels_ref` (kernels/ref/) is plain C, written for clarity and used as
 * the oracle in tests; `nf_kernels_blas` (kernels/blas/) overrides entries with
 * OpenBLAS/LAPACK and with the hand-vectorised loops of kernels/simd/ (each
 * compiled for AVX-512 / AVX2 / the baseline and chosen by the CPU); a CUDA
 * table (kernels/cuda/) comes with the GPU backend, whose device memory,
 * streams, events and copies are behind the helpers of kernels/cuda/gpu.h.
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

struct nf_kernels;

/* ---- the permute node's null-statistic tile ----
 * For a block of permutation rows R (rows x n) and voxels [v0, v0 + nv) of the
 * data D (n x V, row-major), every null value g = R D is turned into the
 * transformed statistic q (per voxel: d = a g - shift; t: q = s(d) |d| /
 * max(ss - c d², floor), else q = s(d); s by tail; capped at cap), counted
 * where q >= hi, and the values inside the round-off tie window (lo < q < hi)
 * decided again in double by tie_exceeds. Implementations sum each value in
 * their own order, so q differs between them by round-off but the counts do
 * not (nodes/permute/permute.c explains the window). */
enum nf_tail { NF_TAIL_TWO, NF_TAIL_UPPER, NF_TAIL_LOWER };
/* The fastest CPU implementations: BLAS SGEMM then an epilogue pass
 * ("reference" in NLFLOW_PERM_TILE, the name it had in benchmarks), and a
 * GEMM fused with the epilogue in registers for AVX2+FMA or AVX-512F. */
enum nf_perm_tile_impl { NF_PERM_TILE_GEMM, NF_PERM_TILE_AVX2, NF_PERM_TILE_AVX512 };
struct nf_perm_tile {
    int64_t n, V;              /* subjects (the GEMM depth); voxels (D's leading dimension) */
    const float *D;
    const float *shift, *ss, *floor_, *cap, *lo, *hi;   /* V each, indexed from voxel 0 */
    float a, c;
    bool t_stat;
    int tail;                  /* enum nf_tail */
    enum nf_perm_tile_impl impl;   /* what nf_kernels_blas.perm_tile runs (nf_perm_tile_choose) */
    /* The fused implementations may sum rows whose entries take two values
     * (sign flips, group labels) from tables of partial sums instead of their
     * GEMM (nf_perm_tile_tables: true unless NLFLOW_PERM_TABLES=0). */
    bool tables;
    const struct nf_kernels *K;    /* the SGEMM of NF_PERM_TILE_GEMM */
    /* Whether permutation row `row` (n floats) reaches the observed value at
     * voxel v, decided in double (rare: values inside the tie window). */
    bool (*tie_exceeds)(const void *tie_ctx, const float *row, int64_t v);
    const void *tie_ctx;
};
/* Rows of R in a block of the GEMM implementation (its scratch is this many
 * rows of a tile). */
enum { NF_PERM_TILE_SUB_ROWS = 255 };
/* The fastest implementation this CPU runs; whether it runs `impl`. */
enum nf_perm_tile_impl nf_perm_tile_best(void);
bool nf_perm_tile_available(enum nf_perm_tile_impl impl);
/* What a node should use: the best, unless a test forced another
 * (nf_perm_tile_force) or NLFLOW_PERM_TILE=reference|avx2|avx512 names one
 * this CPU runs (for comparing them in benchmarks). */
enum nf_perm_tile_impl nf_perm_tile_choose(void);
/* Tests: make nf_perm_tile_choose answer `impl` (-1: the best available again). */
void nf_perm_tile_force(int impl);
/* What a node should set in `tables`. */
bool nf_perm_tile_tables(void);
/* Tile calls that used the tables so far (tests: the path was taken). */
int64_t nf_perm_tile_table_calls(void);
/* Floats of scratch perm_tile needs for `rows` rows of n subjects and tiles
 * of at most max_voxels voxels. */
size_t nf_perm_tile_scratch(int64_t rows, int64_t n, int64_t max_voxels);

/* ---- the glm permutation test's epilogue ----
 * The GEMM values of np permutations over a block of nv voxels (nodes/
 * permute/permute_glm.c): permutation i's rows G_0 .. G_{r-1} at G + i pld
 * (leading dimension ld), the first s of them the contrast's. Per
 * permutation and voxel, in float and in this order:
 *   t (s = 1): num = two ? g0 g0 : sg g0 |g0|,  rss = ss - g0 g0 - G_1² - ...
 *   F:         num = G_0² + ... + G_{s-1}²,      rss = ss - num - G_s² - ...
 *   rss raised to fl when not above it, q = num / rss lowered to cap when not
 *   below it. The constants (ss, fl, cap, lo, hi) are offset to the block. */
struct nf_glm_epi {
    const float *G, *ss, *fl, *cap, *lo, *hi;
    int64_t np, pld;   /* permutations, and the distance between their rows */
    int64_t r, s, ld, nv;
    float sg;          /* the tail's sign, +1 or -1 (two tails: +1, and num = g0²) */
    bool two, is_f;
};

/* glm_tile_i8's second operands: E and the moved nuisance rows in bytes.
 * Eq holds E's rows in quads of signed bytes, byte b of Eq[j ldq + v] =
 * E[(4j + b) lde + v] / sv[v] rounded (0 past n), as nf_i8_quads writes them,
 * off[v] = -128 x the sum of voxel v's bytes; Rq each permutation's rows
 * 1 .. r-1 as quads of unsigned bytes, row / step rounded + 128 (128 past n;
 * nf_u8_quads), permutation i's row m at Rq + (i (r-1) + m-1) (n+3)/4, each
 * row m by the step sq[m-1] (a draw moves and flips a row's values, so one
 * step serves them all). So the integer sum over the quads from off[v]
 * is the sum of the bytes' products, exactly, and sv[v] sq times it the
 * product of the rounded vectors. dg[v] bounds |that value - the float
 * path's| at voxel v (nf_glm_i8_bound; offset to the block like e->ss), and
 * dr[v] both paths' round-off in the residual sum of squares. */
struct nf_glm_i8 {
    const uint32_t *Eq, *Rq;
    int64_t ldq;
    const int32_t *off;
    const float *sv, *sq;
    const float *dg;
    const float *dr;   /* per voxel: both paths' round-off in the residual sum of squares (nf_glm_i8_roundoff) */
};

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
     * LAPACK rejects an argument). */
    int (*svd)(const float *A, int64_t rows, int64_t cols, float *U, float *s, float *Vt);
    /* C = A Aᵀ in double, both triangles filled: A is n x k row-major (lda), C is
     * n x n (ldc). The Gram matrix of closed-form ridge models with more features
     * than samples. NULL in tables without it (the caller uses the CPU's). */
    void (*dsyrk)(int64_t n, int64_t k, const double *A, int64_t lda, double *C, int64_t ldc);
    /* C = op(A) op(B) in double (C overwritten), row-major as sgemm: op(A) is
     * m x k, op(B) k x n, C m x n. The glm node's projections of float data,
     * where sums of squares are later differenced and float would cancel.
     * NULL in tables without it (the caller uses the CPU's). */
    void (*dgemm)(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double *A, int64_t lda,
                  const double *B, int64_t ldb, double *C, int64_t ldc);
    /* The permute tile (struct nf_perm_tile above): cnt[0..nv) += exceedances
     * of voxels v0.., near ties included; rowmax[i] = row i's largest q over
     * the tile; scratch: nf_perm_tile_scratch(rows, n, nv) floats. */
    void (*perm_tile)(const struct nf_perm_tile *t, const float *R, int64_t rows, int64_t v0, int64_t nv,
                      uint32_t *cnt, float *rowmax, float *scratch);
    /* Once for a block of rows R, before its tiles: what perm_tile can reuse
     * over them goes into scratch (the fused kernels' patterns of rows of two
     * values). perm_tile with that R and scratch may use it; R must not change
     * until the next call. */
    void (*perm_tile_prepare)(const struct nf_perm_tile *t, const float *R, int64_t rows, float *scratch);
    /* The ridge node's per-voxel sums of one alpha's validation error over r
     * components, for v < nb, in double with j in order (so every table gives
     * the same bits):
     *   quad[v] = Σ_j u t,  cross[v] = Σ_j dj[j] u z,  psum[v] = Σ_j pj[j] u
     * with u = U[j ld + v], z = Z[j ld + v], t = T[j ldt + v]. */
    void (*ridge_error_sums)(int64_t r, int64_t nb, int64_t ld, const float *U, const float *Z, const float *T,
                             int64_t ldt, const double *dj, const double *pj, double *quad, double *cross,
                             double *psum);
    /* Passes over one row of V columns in double: the permute node's per-voxel
     * preparation. Every table does the same IEEE operations per element, so
     * gives the same bits:
     *   row_accumulate:   acc[v] += x[v]  (x[v]² when squared);
     *   row_sq_dev:       sq[v] += (x[v] - sum[v] / n)²;
     *   row_standardize:  z[v] = keep[v] ? (x[v] - m[v]) / sd[v] : 0 (keep[v]
     *                     is 0 or -1; z may be x), cross[v] += z[v] cov;
     *   row_gemv_double:  acc[v] = Σ_j row[j] D[j V + v] for v < V, j < n in
     *                     order (D: n x V, row-major). */
    void (*row_accumulate)(double *acc, const float *x, int64_t V, bool squared);
    void (*row_sq_dev)(double *sq, const double *sum, const float *x, double n, int64_t V);
    void (*row_standardize)(float *z, double *cross, const float *x, const double *m, const double *sd,
                            const int64_t *keep, double cov, int64_t V);
    void (*row_gemv_double)(const float *row, const float *D, int64_t n, int64_t V, double *acc);
    /* Whole statistic maps of a few permutations (the permute node's TFCE and
     * clusters): G (nr x V) = R (nr x n) · D (n x V), all row-major, in float,
     * each element summed over j = 0 .. n-1 in order from 0, one multiply and
     * one add per term (no fused multiply-add), so every table gives the same
     * bits whatever nr and the rows beside an element. */
    void (*rows_gemm_f32)(const float *R, int64_t nr, const float *D, int64_t n, int64_t V, float *G);
    /* The signed t of such a map in place (the permute node's statistic for
     * TFCE and clusters), per voxel in float: d = a g - shift, den = ss - c d d
     * raised to floor when not above it, q = d |d| / den lowered to cap when
     * not below it; then g = 0 when q is -FLT_MAX (a zero-variance voxel),
     * else (float) ±sqrt(|q| k) in double with q's sign. Every table gives
     * the same bits. */
    void (*perm_signed_t_f32)(float *g, int64_t V, float a, float c, const float *shift, const float *ss,
                              const float *floor_, const float *cap, double k);
    /* The glm node's fixed work, in double with the same IEEE operations per
     * element in every table (the same bits):
     *   row_axpy:      acc[v] += w x[v], v < V;
     *   row_residual:  e[v] = (float)(y[v] - Σ_m q[m dq] B[m ldb + v]) (m < nz
     *                  in order), ss[v] += e[v]² of the rounded value. */
    void (*row_axpy)(double *acc, double w, const float *x, int64_t V);
    void (*row_residual)(const float *y, const double *B, const double *q, int64_t dq, int64_t nz, int64_t ldb,
                         int64_t V, float *e, double *ss);
    /* struct nf_glm_epi above: q[i nv + v] the compared values, mx[i]
     * permutation i's maximum (-FLT_MAX for nv = 0); with count (not NULL),
     * count[v] += (q >= hi[v]) for every permutation, and the values with
     * lo[v] <= q < hi[v] listed in near as i nv + v (*n_near of them, in no
     * particular order). Every table gives the same bits. */
    void (*glm_epilogue)(const struct nf_glm_epi *e, float *q, float *mx, uint32_t *count, int32_t *near,
                         int *n_near);
    /* glm_epilogue on values it computes itself (e->G, ld and pld unused):
     * permutation i's row m at voxel v is the sum over k = 0 .. n-1, in that
     * order, of R[(i r + m) n + k] E[k lde + v], each step a fused
     * multiply-add from 0 (fmaf; a BLAS micro-kernel's order within one k
     * block). q (NULL: not kept) receives the compared values. r is at most
     * NF_GLM_TILE_MAX_ROWS. Every table gives the same bits. */
    void (*glm_tile)(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde,
                     float *q, float *mx, uint32_t *count, int32_t *near, int *n_near);
    /* glm_tile's counts and near list (t contrasts, q not kept), with the rows
     * after the first summed in bytes (struct nf_glm_i8): four subjects per
     * instruction where the CPU has AVX-512 VNNI, so about 1.3x faster. A
     * value is bounded from the byte sums (dg), and computed as glm_tile does
     * (the same bits) only where the bounds do not decide it, so the counts
     * and the near list are glm_tile's. ub_max[i] is an upper bound of
     * glm_tile's mx[i] (its value or above), and run_max[i] becomes
     * max(run_max[i], glm_tile's mx[i]): a running maximum seeded from earlier
     * blocks saves computing values that cannot raise it. n is at most
     * NF_GLM_I8_MAX_N (the byte sums stay exact in float). */
    void (*glm_tile_i8)(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E,
                        int64_t n, int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near,
                        int *n_near);
};
enum { NF_GLM_TILE_MAX_ROWS = 16 };
enum { NF_GLM_I8_MAX_N = 1040 };   /* 127² n < 2^24 */
/* The step of n values in signed bytes: their largest |value| / 127 (0 for
 * zeros); of each column of X (rows x cols, leading dimension ld) into step. */
float nf_i8_step(const float *x, int64_t n);
void nf_i8_column_steps(const float *X, int64_t rows, int64_t cols, int64_t ld, float *step);
/* X's columns in quads of signed bytes, column c by step[c] (x / step to the
 * nearest, ties to even, within +-127): byte b of out[j ldo + c] from row
 * 4j + b, 0 past the last row; off[c] (NULL: not kept) = -128 x the sum of
 * column c's bytes; norms (NULL: not kept) as nf_i8_norms's, 3 per column. */
void nf_i8_quads(const float *X, int64_t rows, int64_t cols, int64_t ld, const float *step, uint32_t *out,
                 int64_t ldo, int32_t *off, double *norms);
/* One row of n values by step in quads of unsigned bytes (its signed bytes
 * + 128; (n+3)/4 words, 128 past n). */
void nf_u8_quads(const float *row, int64_t n, float step, uint32_t *out);
/* Of n values and their signed bytes by step, in double: the 2-norm of the
 * values (norm[0]), of their distance from step x bytes (norm[1]) and of
 * step x bytes (norm[2]). */
void nf_i8_norms(const float *x, int64_t n, float step, double norm[3]);
/* dg at a voxel: for rows of 2-norm at most row[0] whose distance from their
 * rounded version is at most row[1] and whose rounded version's norm is at
 * most row[2], and the voxel's column of E with norms col[0..2] (nf_i8_norms):
 * |q'e - q~'e~| <= |q| |e - e~| + |q - q~| |e~| (Cauchy-Schwarz), the float
 * sum's round-off (n + 2) u |q| |e|, two roundings of the scaled byte sum and
 * underflow. */
float nf_glm_i8_bound(int64_t n, const double row[3], const double col[3]);
/* dr for r rows of 2-norm at most row_norm over n subjects, a voxel whose
 * float column of E has sum of squares at most colsq, whose bound is dg and whose ss (as the
 * epilogue takes it) is ss: every partial result of either path's ss - g0² -
 * g1² - ... is at most ss + r (row_norm |E_v| + dg)² (Cauchy-Schwarz), each of
 * its 2r operations rounds by u of that; counted twice over. */
float nf_glm_i8_roundoff(int64_t n, int64_t r, double row_norm, double colsq, double dg, double ss);
/* Whether the glm test should call glm_tile_i8 for a contrast of r rows
 * over n subjects (with nf_glm_tile_fused): this CPU has AVX-512 VNNI,
 * 2 <= r <= 4, n <= NF_GLM_I8_MAX_N, and NLFLOW_GLM_I8 is not "0". */
bool nf_glm_tile_i8_fast(int64_t r, bool is_f, int64_t n);
/* Whether the glm test should call glm_tile for a contrast of r rows (t, or
 * F when is_f): where this CPU has its vector body (t contrasts of up to 4
 * rows, AVX2+FMA) and NLFLOW_GLM_TILE is not "0"; else the BLAS's sgemm, then
 * glm_epilogue, is the faster path. */
bool nf_glm_tile_fused(int64_t r, bool is_f);

/* The plain versions (kernels/ref/), also the fallbacks of the other tables. */
void nf_perm_tile_ref(const struct nf_perm_tile *t, const float *R, int64_t rows, int64_t v0, int64_t nv,
                      uint32_t *cnt, float *rowmax, float *scratch);
void nf_perm_tile_prepare_ref(const struct nf_perm_tile *t, const float *R, int64_t rows, float *scratch);
void nf_ridge_error_sums_ref(int64_t r, int64_t nb, int64_t ld, const float *U, const float *Z, const float *T,
                             int64_t ldt, const double *dj, const double *pj, double *quad, double *cross,
                             double *psum);
void nf_row_accumulate_ref(double *acc, const float *x, int64_t V, bool squared);
void nf_row_sq_dev_ref(double *sq, const double *sum, const float *x, double n, int64_t V);
void nf_row_standardize_ref(float *z, double *cross, const float *x, const double *m, const double *sd,
                            const int64_t *keep, double cov, int64_t V);
void nf_row_gemv_double_ref(const float *row, const float *D, int64_t n, int64_t V, double *acc);
void nf_rows_gemm_f32_ref(const float *R, int64_t nr, const float *D, int64_t n, int64_t V, float *G);
void nf_perm_signed_t_f32_ref(float *g, int64_t V, float a, float c, const float *shift, const float *ss,
                              const float *floor_, const float *cap, double k);
void nf_row_axpy_ref(double *acc, double w, const float *x, int64_t V);
void nf_row_residual_ref(const float *y, const double *B, const double *q, int64_t dq, int64_t nz, int64_t ldb,
                         int64_t V, float *e, double *ss);
void nf_glm_epilogue_ref(const struct nf_glm_epi *e, float *q, float *mx, uint32_t *count, int32_t *near, int *n_near);
void nf_glm_tile_ref(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,
                     float *mx, uint32_t *count, int32_t *near, int *n_near);
void nf_glm_tile_i8_ref(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E,
                        int64_t n, int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near,
                        int *n_near);
/* The vectorised versions (kernels/simd/): perm_tile runs t->impl. */
void nf_perm_tile_simd(const struct nf_perm_tile *t, const float *R, int64_t rows, int64_t v0, int64_t nv,
                       uint32_t *cnt, float *rowmax, float *scratch);
void nf_perm_tile_prepare_simd(const struct nf_perm_tile *t, const float *R, int64_t rows, float *scratch);
void nf_ridge_error_sums_simd(int64_t r, int64_t nb, int64_t ld, const float *U, const float *Z, const float *T,
                              int64_t ldt, const double *dj, const double *pj, double *quad, double *cross,
                              double *psum);
void nf_row_accumulate_simd(double *acc, const float *x, int64_t V, bool squared);
void nf_row_sq_dev_simd(double *sq, const double *sum, const float *x, double n, int64_t V);
void nf_row_standardize_simd(float *z, double *cross, const float *x, const double *m, const double *sd,
                             const int64_t *keep, double cov, int64_t V);
void nf_row_gemv_double_simd(const float *row, const float *D, int64_t n, int64_t V, double *acc);
void nf_rows_gemm_f32_simd(const float *R, int64_t nr, const float *D, int64_t n, int64_t V, float *G);
void nf_perm_signed_t_f32_simd(float *g, int64_t V, float a, float c, const float *shift, const float *ss,
                               const float *floor_, const float *cap, double k);
void nf_row_axpy_simd(double *acc, double w, const float *x, int64_t V);
void nf_row_residual_simd(const float *y, const double *B, const double *q, int64_t dq, int64_t nz, int64_t ldb,
                          int64_t V, float *e, double *ss);
void nf_glm_epilogue_simd(const struct nf_glm_epi *e, float *q, float *mx, uint32_t *count, int32_t *near,
                          int *n_near);
void nf_glm_tile_simd(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,
                      float *mx, uint32_t *count, int32_t *near, int *n_near);
void nf_glm_tile_i8_simd(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E,
                         int64_t n, int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near,
                         int *n_near);
/* The entries of a table that come from kernels/simd/, for the tables that
 * take them all (blas, cuda): `{ .name = "x", ..., NF_KERNELS_SIMD_ENTRIES }`. */
#define NF_KERNELS_SIMD_ENTRIES                                                                     \
    .perm_tile = nf_perm_tile_simd, .perm_tile_prepare = nf_perm_tile_prepare_simd,                 \
    .ridge_error_sums = nf_ridge_error_sums_simd,                                                   \
    .row_accumulate = nf_row_accumulate_simd, .row_sq_dev = nf_row_sq_dev_simd,                     \
    .row_standardize = nf_row_standardize_simd, .row_gemv_double = nf_row_gemv_double_simd,        \
    .rows_gemm_f32 = nf_rows_gemm_f32_simd, .perm_signed_t_f32 = nf_perm_signed_t_f32_simd,       \
    .row_axpy = nf_row_axpy_simd, .row_residual = nf_row_residual_simd,                             \
    .glm_epilogue = nf_glm_epilogue_simd, .glm_tile = nf_glm_tile_simd,                      \
    .glm_tile_i8 = nf_glm_tile_i8_simd

extern const struct nf_kernels nf_kernels_ref;
extern const struct nf_kernels nf_kernels_blas;
/* The best CPU table of this build. */
const struct nf_kernels *nf_kernels_cpu(void);

/* BLAS identification for `nlflow devices` and benchmark records. */
const char *nf_blas_name(void);          /* e.g. "OpenBLAS 0.3.21" */
const char *nf_blas_core(void);          /* active kernel / core type, e.g. "Haswell" */
int nf_blas_threads(void);
void nf_blas_set_threads(int n);
/* Sets the BLAS to one thread and stops its worker threads, which spin while
 * idle (nf_blas_set_threads(n > 1) starts them again); called once at
 * startup: the nodes split their work over threads themselves. False where the
 * BLAS has no such call (then it keeps its threads). */
bool nf_blas_quiesce(void);

/* CUDA: whether this build has CUDA and a usable device; `why` explains when not. */
bool nf_cuda_available(char *why, size_t why_size);
/* Fills a one-line description of the GPU (name, memory, cc, driver/runtime). */
void nf_cuda_describe(char *buf, size_t size);

#endif
