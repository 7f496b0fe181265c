/* row_ops.c — passes over one row of a matrix in double (row_accumulate,
 * row_sq_dev, row_standardize, row_gemv_double, and the glm test's row_axpy
 * and row_residual in kernels.h), vectorised: the permute node's per-voxel
 * preparation, which at 230,000 voxels costs as much
 * as a chunk of permutations when scalar. Explicit 8-wide vectors (-O2 leaves
 * these loops scalar) with the same IEEE operations per element as the plain
 * loops of kernels/ref/row_ops_ref.c, which do the tails, so the same bits;
 * each compiled for AVX-512 / AVX2 / the baseline and chosen at load time.
 *
 * rows_gemm_f32 (the permute node's whole permutation maps for TFCE and
 * clusters) keeps a tile of 8 rows x 16 voxels in registers over the whole
 * sum, so that only D is read and G written once: voxel blocks of
 * ROWS_BLOCK columns keep the block of D in L2 across the groups of 8 rows.
 * Each element is 0 + w_0 d_0 + w_1 d_1 + ... in order with separate
 * multiplies and adds (C11 mode: no contraction), as the plain loop.
 *
 * perm_signed_t_f32 (those maps' t, 8 voxels at a time) needs a vector
 * square root in double, which -O2 leaves scalar whatever the target: so an
 * AVX-512 and an AVX2 version with the intrinsics, chosen at run time, the
 * plain loop elsewhere. Each lane does the plain loop's operations in its
 * order (a select for each ?:, the sign bit cleared for fabs).
 */
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

typedef double nf_v8d __attribute__((vector_size(64)));
typedef float nf_v8f __attribute__((vector_size(32)));
typedef int64_t nf_v8l __attribute__((vector_size(64)));

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_row_accumulate_simd(double *restrict acc, const float *restrict x, int64_t V, bool squared)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        nf_v8d a;
        nf_v8f f;
        memcpy(&a, acc + v, sizeof a);
        memcpy(&f, x + v, sizeof f);
        nf_v8d d = __builtin_convertvector(f, nf_v8d);
        a += squared ? d * d : d;
        memcpy(acc + v, &a, sizeof a);
    }
    nf_row_accumulate_ref(acc + v, x + v, V - v, squared);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_row_sq_dev_simd(double *restrict sq, const double *restrict sum, const float *restrict x, double n, int64_t V)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        nf_v8d q, m;
        nf_v8f f;
        memcpy(&q, sq + v, sizeof q);
        memcpy(&m, sum + v, sizeof m);
        memcpy(&f, x + v, sizeof f);
        nf_v8d d = __builtin_convertvector(f, nf_v8d) - m / n;
        q += d * d;
        memcpy(sq + v, &q, sizeof q);
    }
    nf_row_sq_dev_ref(sq + v, sum + v, x + v, n, V - v);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_row_standardize_simd(float *z, double *restrict cross, const float *x, const double *restrict m,
                             const double *restrict sd, const int64_t *restrict keep, double cov, int64_t V)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        nf_v8d mv, sv, cr;
        nf_v8l kv;
        nf_v8f f;
        memcpy(&mv, m + v, sizeof mv);
        memcpy(&sv, sd + v, sizeof sv);
        memcpy(&kv, keep + v, sizeof kv);
        memcpy(&f, x + v, sizeof f);
        memcpy(&cr, cross + v, sizeof cr);
        nf_v8d zv = (nf_v8d)((nf_v8l)((__builtin_convertvector(f, nf_v8d) - mv) / sv) & kv);
        nf_v8f zf = __builtin_convertvector(zv, nf_v8f);
        cr += zv * cov;
        memcpy(z + v, &zf, sizeof zf);
        memcpy(cross + v, &cr, sizeof cr);
    }
    nf_row_standardize_ref(z + v, cross + v, x + v, m + v, sd + v, keep + v, cov, V - v);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_row_axpy_simd(double *restrict acc, double w, const float *restrict x, int64_t V)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        nf_v8d a;
        nf_v8f f;
        memcpy(&a, acc + v, sizeof a);
        memcpy(&f, x + v, sizeof f);
        a += w * __builtin_convertvector(f, nf_v8d);
        memcpy(acc + v, &a, sizeof a);
    }
    nf_row_axpy_ref(acc + v, w, x + v, V - v);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_row_residual_simd(const float *restrict y, const double *restrict B, const double *restrict q, int64_t dq,
                          int64_t nz, int64_t ldb, int64_t V, float *restrict e, double *restrict ss)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8) {
        nf_v8d s, b, sv;
        nf_v8f f;
        memcpy(&f, y + v, sizeof f);
        s = __builtin_convertvector(f, nf_v8d);
        for (int64_t m = 0; m < nz; m++) {
            memcpy(&b, B + m * ldb + v, sizeof b);
            s -= q[m * dq] * b;
        }
        f = __builtin_convertvector(s, nf_v8f);
        memcpy(e + v, &f, sizeof f);
        nf_v8d ed = __builtin_convertvector(f, nf_v8d);
        memcpy(&sv, ss + v, sizeof sv);
        sv += ed * ed;
        memcpy(ss + v, &sv, sizeof sv);
    }
    nf_row_residual_ref(y + v, B + v, q, dq, nz, ldb, V - v, e + v, ss + v);
}

/* Voxels in blocks whose sums stay in L1 while the n rows of D stream past. */
__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_row_gemv_double_simd(const float *row, const float *D, int64_t n, int64_t V, double *restrict acc)
{
    enum { BLOCK = 1024 };
    for (int64_t v0 = 0; v0 < V; v0 += BLOCK) {
        const int64_t len = V - v0 < BLOCK ? V - v0 : BLOCK;
        double *restrict a = acc + v0;
        for (int64_t v = 0; v < len; v++)
            a[v] = 0;
        for (int64_t j = 0; j < n; j++) {
            const double r = row[j];
            const float *restrict d = D + j * V + v0;
            for (int64_t v = 0; v < len; v++)
                a[v] += r * (double)d[v];
        }
    }
}

typedef float nf_v16f __attribute__((vector_size(64)));
enum { ROWS_TILE = 8, ROWS_BLOCK = 1024 };

/* rows (<= ROWS_TILE) rows of R times the columns v0 .. v0 + 16 k of D into G;
 * `rows` is a constant where it is inlined. */
static inline __attribute__((always_inline)) void rows_tile(const float *R, int rows, const float *D, int64_t n,
                                                             int64_t V, int64_t v0, int64_t v1, float *G)
{
    for (int64_t v = v0; v + 16 <= v1; v += 16) {
        nf_v16f acc[ROWS_TILE];   /* registers: the loops over r unrolled (-O2 would keep acc in memory) */
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
            acc[r] = (nf_v16f){ 0 };
        for (int64_t j = 0; j < n; j++) {
            nf_v16f d;
            memcpy(&d, D + j * V + v, sizeof d);
            __builtin_prefetch(D + j * V + v + 64);   /* 4 tiles ahead: n rows are too many streams for the
                                                         hardware prefetcher */
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++)
                acc[r] += R[r * n + j] * d;
        }
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++)
            memcpy(G + r * V + v, &acc[r], sizeof acc[r]);
    }
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_rows_gemm_f32_simd(const float *R, int64_t nr, const float *D, int64_t n, int64_t V, float *G)
{
    for (int64_t b = 0; b < V; b += ROWS_BLOCK) {
        const int64_t e = V - b < ROWS_BLOCK ? V : b + ROWS_BLOCK, vec_end = b + (e - b) / 16 * 16;
        for (int64_t r0 = 0; r0 < nr; r0 += ROWS_TILE) {
            const int64_t rows = nr - r0 < ROWS_TILE ? nr - r0 : ROWS_TILE;
            const float *Rr = R + r0 * n;
            float *Gr = G + r0 * V;
            if (rows == ROWS_TILE)
                rows_tile(Rr, ROWS_TILE, D, n, V, b, vec_end, Gr);
            else
                for (int64_t r = 0; r < rows; r++)
                    rows_tile(Rr + r * n, 1, D, n, V, b, vec_end, Gr + r * V);
        }
    }
    /* the columns past the last whole vector of each block: plain loops */
    for (int64_t b = 0; b < V; b += ROWS_BLOCK) {
        const int64_t e = V - b < ROWS_BLOCK ? V : b + ROWS_BLOCK;
        for (int64_t r = 0; r < nr; r++)
            for (int64_t v = b + (e - b) / 16 * 16; v < e; v++) {
                float acc = 0;
                for (int64_t j = 0; j < n; j++)
                    acc += R[r * n + j] * D[j * V + v];
                G[r * V + v] = acc;
            }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

typedef int32_t nf_v8i __attribute__((vector_size(32)));

/* mask ? a : b, lane by lane (a mask lane is all ones or all zeros) */
#define SELECT8(V, I, mask, a, b) ((V)(((I)(a) & (I)(mask)) | ((I)(b) & ~(I)(mask))))

/* The signed t of 8 voxels from v; SQRT8(out, in) sets the nf_v8d out to
 * the square roots of in (a macro: vectors this wide cannot be passed to an
 * AVX2 function). */
#define SIGNED_T_8(SQRT8)                                                                                   \
    do {                                                                                                    \
        nf_v8f gv, sh, s, fl, cp;                                                                           \
        memcpy(&gv, g + v, sizeof gv);                                                                      \
        memcpy(&sh, shift + v, sizeof sh);                                                                  \
        memcpy(&s, ss + v, sizeof s);                                                                       \
        memcpy(&fl, floor_ + v, sizeof fl);                                                                 \
        memcpy(&cp, cap + v, sizeof cp);                                                                    \
        nf_v8f d = a * gv - sh;                                                                             \
        nf_v8f den = s - c * d * d;                                                                         \
        den = SELECT8(nf_v8f, nf_v8i, den > fl, den, fl);                                                   \
        nf_v8f ad = SELECT8(nf_v8f, nf_v8i, d < 0, -d, d);                                                  \
        nf_v8f q = d * ad / den;                                                                            \
        q = SELECT8(nf_v8f, nf_v8i, q < cp, q, cp);                                                         \
        nf_v8d qd = (nf_v8d)((nf_v8l)__builtin_convertvector(q, nf_v8d) & INT64_MAX), root;                 \
        qd = qd * k;                                                                                        \
        SQRT8(root, qd);                                                                                    \
        nf_v8f t = __builtin_convertvector(root, nf_v8f);                                                   \
        t = SELECT8(nf_v8f, nf_v8i, q < 0, -t, t);                                                          \
        t = SELECT8(nf_v8f, nf_v8i, q == -FLT_MAX, (nf_v8f){ 0 }, t);                                       \
        memcpy(g + v, &t, sizeof t);                                                                        \
    } while (0)

#define SQRT8_AVX512(out, in) ((out) = (nf_v8d)_mm512_sqrt_pd((__m512d)(in)))
#define SQRT8_AVX2(out, in)                                                                                 \
    do {                                                                                                    \
        double lanes_[8];                                                                                   \
        memcpy(lanes_, &(in), sizeof lanes_);                                                               \
        _mm256_storeu_pd(lanes_, _mm256_sqrt_pd(_mm256_loadu_pd(lanes_)));                                  \
        _mm256_storeu_pd(lanes_ + 4, _mm256_sqrt_pd(_mm256_loadu_pd(lanes_ + 4)));                          \
        memcpy(&(out), lanes_, sizeof lanes_);                                                              \
    } while (0)

__attribute__((target("avx512f"))) static void signed_t_avx512(float *g, int64_t V, float a, float c,
                                                               const float *shift, const float *ss,
                                                               const float *floor_, const float *cap, double k)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8)
        SIGNED_T_8(SQRT8_AVX512);
    nf_perm_signed_t_f32_ref(g + v, V - v, a, c, shift + v, ss + v, floor_ + v, cap + v, k);
}

__attribute__((target("avx2"))) static void signed_t_avx2(float *g, int64_t V, float a, float c,
                                                          const float *shift, const float *ss, const float *floor_,
                                                          const float *cap, double k)
{
    int64_t v = 0;
    for (; v + 8 <= V; v += 8)
        SIGNED_T_8(SQRT8_AVX2);
    nf_perm_signed_t_f32_ref(g + v, V - v, a, c, shift + v, ss + v, floor_ + v, cap + v, k);
}
#endif

void nf_perm_signed_t_f32_simd(float *g, int64_t V, float a, float c, const float *shift, const float *ss,
                               const float *floor_, const float *cap, double k)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        signed_t_avx512(g, V, a, c, shift, ss, floor_, cap, k);
        return;
    }
    if (__builtin_cpu_supports("avx2")) {
        signed_t_avx2(g, V, a, c, shift, ss, floor_, cap, k);
        return;
    }
#endif
    nf_perm_signed_t_f32_ref(g, V, a, c, shift, ss, floor_, cap, k);
}
