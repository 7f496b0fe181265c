/* glm_tile.c — the glm permutation test's fused tile (glm_tile in kernels.h),
 * vectorised: the GEMM of the permutation rows with a strip of voxels in
 * registers and the epilogue on the accumulators, so that the values never
 * go to memory. The BLAS path (sgemm into a block, then glm_epilogue) spends
 * ~10% of the test packing, zeroing and writing that block and the epilogue
 * reads it back from L2; the FMAs (3 rows x n per voxel and permutation for
 * one regressor and two moving nuisance columns) are the rest, and here they
 * run at ~90% of a Zen 4 core's peak. A register tile is P permutations x r
 * rows x 2 vectors of voxels (24 accumulators of 32 with AVX-512, 12 of 16
 * with AVX2); the strip's counts stay in registers across the permutations;
 * each lane sums in k order with FMA and then does the epilogue's float
 * operations in kernels/ref/glm_epilogue_ref.c's order, so the same bits as
 * kernels/ref/glm_tile_ref.c, which also takes the voxels past the last whole
 * strip and the shapes without a vector body (F contrasts, more than 4 rows,
 * CPUs without AVX2+FMA). Permutations past the last whole register tile go
 * one at a time through the same body.
 */
#include <float.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "core/switches.h"

/* The ref loop over the voxels [v, nv) of every permutation in [0, np): the
 * values in q / near / mx as if one call had done the whole block. */
static void tail_voxels(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,
                        float *mx, uint32_t *count, int32_t *near, int *listed, int64_t np, int64_t v)
{
    struct nf_glm_epi t = *e;
    t.ss += v, t.fl += v, t.cap += v;
    if (count)
        t.lo += v, t.hi += v;
    t.nv = e->nv - v;
    t.np = 1;
    for (int64_t i = 0; i < np; i++) {
        float m;
        int n_tail = 0;
        nf_glm_tile_ref(&t, R + i * e->r * n, E + v, n, lde, q ? q + i * e->nv + v : NULL, &m,
                        count ? count + v : NULL, count ? near + *listed : NULL, &n_tail);
        for (int j = 0; j < n_tail; j++)
            near[*listed + j] += (int32_t)(i * e->nv + v);
        *listed += n_tail;
        mx[i] = m > mx[i] ? m : mx[i];
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* permutations whose strip maxima are kept at once (the stack block below) */
enum { TILE_PERMS = 96 };

/* One instantiation: W floats per vector, for a target; the body for RR rows,
 * P permutations per register tile. Processes permutations [0, np - np % P)
 * and voxels [0, nv - nv % 2W); mx[i] gets the maximum over those voxels;
 * near lists permutation i as i_base + i. */
#define DEFINE_GLM_TILE(NAME, TARGET, W_, FMA, SET1, MT, MIN, MAX)                                            \
    typedef float NAME##_vf __attribute__((vector_size(4 * (W_))));                                          \
    typedef int32_t NAME##_vi __attribute__((vector_size(4 * (W_))));                                        \
    static inline __attribute__((always_inline, target(TARGET))) void NAME##_body(                           \
        const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,          \
        float *mx, uint32_t *count, int32_t *near, int *listed, int64_t i_base, const int RR, const int P,     \
        const bool counting)                                                                                 \
    {                                                                                                        \
        typedef NAME##_vf VF;                                                                                \
        typedef NAME##_vi VI;                                                                                \
        enum { W = W_ };                                                                                     \
        const int64_t nv = e->nv, nvf = nv - nv % (2 * W), npf = e->np - e->np % P;                          \
        const bool two = e->two;                                                                             \
        const VF vsg = (VF){ 0 } + e->sg;                                                                    \
        const VI absmask = (VI){ 0 } + 0x7fffffff;                                                           \
        float vmax[TILE_PERMS * W];                                                                          \
        for (int64_t b0 = 0; b0 < npf; b0 += TILE_PERMS - TILE_PERMS % P) {                                  \
            const int64_t bn = npf - b0 < TILE_PERMS - TILE_PERMS % P ? npf - b0 : TILE_PERMS - TILE_PERMS % P; \
            for (int64_t i = 0; i < bn * W; i++)                                                             \
                vmax[i] = -FLT_MAX;                                                                          \
            for (int64_t v = 0; v < nvf; v += 2 * W) {                                                       \
                const float *Ev = E + v;                                                                     \
                VI cnt[2] = { { 0 }, { 0 } };                                                                \
                if (counting) {                                                                              \
                    memcpy(&cnt[0], count + v, sizeof cnt[0]);                                               \
                    memcpy(&cnt[1], count + v + W, sizeof cnt[1]);                                           \
                }                                                                                            \
                for (int64_t p = b0; p < b0 + bn; p += P) {                                                  \
                    VF acc0[24], acc1[24]; /* P RR <= 24 of them used: registers */                           \
                    _Pragma("GCC unroll 24") for (int j = 0; j < P * RR; j++)                                \
                        acc0[j] = acc1[j] = (VF){ 0 };                                                       \
                    const float *Rp = R + p * RR * n;                                                        \
                    for (int64_t k = 0; k < n; k++) {                                                        \
                        VF d0, d1;                                                                           \
                        memcpy(&d0, Ev + k * lde, sizeof d0);                                                \
                        memcpy(&d1, Ev + k * lde + W, sizeof d1);                                            \
                        _Pragma("GCC unroll 24") for (int j = 0; j < P * RR; j++) {                          \
                            VF s = (VF)SET1(Rp[j * n + k]); /* not 0 + x: that adds (-0) */                  \
                            acc0[j] = (VF)FMA((MT)s, (MT)d0, (MT)acc0[j]);                                   \
                            acc1[j] = (VF)FMA((MT)s, (MT)d1, (MT)acc1[j]);                                   \
                        }                                                                                    \
                    }                                                                                        \
                    VI nearv = { 0 };                                                                        \
                    float qt[8][2 * W];                                                                      \
                    _Pragma("GCC unroll 8") for (int pp = 0; pp < P; pp++) {                                 \
                        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {                                \
                            const VF *a = h ? acc1 + pp * RR : acc0 + pp * RR;                               \
                            const int64_t u = v + h * W;                                                     \
                            VF ss, fl, cap, g0 = a[0];                                                       \
                            memcpy(&ss, e->ss + u, sizeof ss);                                               \
                            memcpy(&fl, e->fl + u, sizeof fl);                                               \
                            memcpy(&cap, e->cap + u, sizeof cap);                                            \
                            VF ag = (VF)((VI)g0 & absmask);                                                  \
                            VF num = two ? g0 * g0 : vsg * g0 * ag;                                          \
                            VF rss = ss - g0 * g0;                                                           \
                            _Pragma("GCC unroll 4") for (int m = 1; m < RR; m++)                             \
                                rss -= a[m] * a[m];                                                          \
                            rss = (VF)MAX((MT)rss, (MT)fl);  /* rss > fl ? rss : fl */                       \
                            VF x = num / rss;                                                                \
                            x = (VF)MIN((MT)x, (MT)cap);     /* x < cap ? x : cap */                         \
                            memcpy(qt[pp] + h * W, &x, sizeof x);                                            \
                            if (q)                                                                           \
                                memcpy(q + (p + pp) * nv + u, &x, sizeof x);                                 \
                            float *slot = vmax + (p - b0 + pp) * W;                                          \
                            VF old;                                                                          \
                            memcpy(&old, slot, sizeof old);                                                  \
                            old = (VF)MAX((MT)x, (MT)old);                                                   \
                            memcpy(slot, &old, sizeof old);                                                  \
                            if (counting) {                                                                  \
                                VF lo, hi;                                                                   \
                                memcpy(&lo, e->lo + u, sizeof lo);                                           \
                                memcpy(&hi, e->hi + u, sizeof hi);                                           \
                                cnt[h] -= (VI)(x >= hi);                                                     \
                                nearv |= (VI)(x >= lo) & (VI)(x < hi);                                       \
                            }                                                                                \
                        }                                                                                    \
                    }                                                                                        \
                    if (counting) {                                                                          \
                        int any = 0;                                                                         \
                        for (int l = 0; l < W; l++)                                                          \
                            any |= nearv[l];                                                                 \
                        /* rare: the values inside their window, listed */                                   \
                        for (int pp = 0; any && pp < P; pp++)                                                \
                            for (int64_t l = 0; l < 2 * W; l++)                                              \
                                if (qt[pp][l] >= e->lo[v + l] && qt[pp][l] < e->hi[v + l])                   \
                                    near[(*listed)++] = (int32_t)((i_base + p + pp) * nv + v + l);           \
                    }                                                                                        \
                }                                                                                            \
                if (counting) {                                                                              \
                    memcpy(count + v, &cnt[0], sizeof cnt[0]);                                               \
                    memcpy(count + v + W, &cnt[1], sizeof cnt[1]);                                           \
                }                                                                                            \
            }                                                                                                \
            for (int64_t i = 0; i < bn; i++) {                                                               \
                float m = -FLT_MAX;                                                                          \
                for (int l = 0; l < W; l++)                                                                  \
                    m = vmax[i * W + l] > m ? vmax[i * W + l] : m;                                           \
                mx[b0 + i] = m;                                                                              \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    /* The P-permutation tiles, then the rest one permutation at a time. */                                \
    static inline __attribute__((always_inline, target(TARGET))) void NAME##_rows(                           \
        const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,          \
        float *mx, uint32_t *count, int32_t *near, int *listed, const int RR, const int P, const bool counting) \
    {                                                                                                        \
        const int64_t npf = e->np - e->np % P;                                                               \
        NAME##_body(e, R, E, n, lde, q, mx, count, near, listed, 0, RR, P, counting);                        \
        if (npf < e->np) {                                                                                   \
            struct nf_glm_epi t = *e;                                                                        \
            t.np = e->np - npf;                                                                              \
            NAME##_body(&t, R + npf * RR * n, E, n, lde, q ? q + npf * e->nv : NULL, mx + npf, count, near,  \
                        listed, npf, RR, 1, counting);                                                       \
        }                                                                                                    \
    }                                                                                                        \
    static __attribute__((target(TARGET), noinline)) void NAME(const struct nf_glm_epi *e, const float *R,     \
                                                               const float *E, int64_t n, int64_t lde,       \
                                                               float *q, float *mx, uint32_t *count,         \
                                                               int32_t *near, int *listed)                   \
    {                                                                                                        \
        /* accumulators: 2 P r of 32 (AVX-512) or 16 (AVX2) registers, a few left for the operands */        \
        const bool big = (W_) == 16;                                                                         \
        switch (e->r * 2 + (count != NULL)) {                                                                \
        case 2: NAME##_rows(e, R, E, n, lde, q, mx, NULL, NULL, listed, 1, big ? 8 : 6, false); break;       \
        case 3: NAME##_rows(e, R, E, n, lde, q, mx, count, near, listed, 1, big ? 8 : 6, true); break;       \
        case 4: NAME##_rows(e, R, E, n, lde, q, mx, NULL, NULL, listed, 2, big ? 6 : 3, false); break;       \
        case 5: NAME##_rows(e, R, E, n, lde, q, mx, count, near, listed, 2, big ? 6 : 3, true); break;       \
        case 6: NAME##_rows(e, R, E, n, lde, q, mx, NULL, NULL, listed, 3, big ? 4 : 2, false); break;       \
        case 7: NAME##_rows(e, R, E, n, lde, q, mx, count, near, listed, 3, big ? 4 : 2, true); break;       \
        case 8: NAME##_rows(e, R, E, n, lde, q, mx, NULL, NULL, listed, 4, big ? 3 : 1, false); break;       \
        default: NAME##_rows(e, R, E, n, lde, q, mx, count, near, listed, 4, big ? 3 : 1, true); break;      \
        }                                                                                                    \
    }

DEFINE_GLM_TILE(glm_tile_avx512, "avx512f,avx2,fma", 16, _mm512_fmadd_ps, _mm512_set1_ps, __m512, _mm512_min_ps,
                _mm512_max_ps)
DEFINE_GLM_TILE(glm_tile_avx2, "avx2,fma", 8, _mm256_fmadd_ps, _mm256_set1_ps, __m256, _mm256_min_ps,
                _mm256_max_ps)

/* 2: AVX-512, 1: AVX2 (+FMA), 0: neither (the plain loop) */
static int glm_tile_level(void)
{
    static _Atomic int level = -1;
    int l = level;
    if (l < 0) {
        __builtin_cpu_init();
        l = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 2
          : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")                                    ? 1
                                                                                                               : 0;
        level = l;
    }
    return l;
}
#endif

bool nf_glm_tile_fused(int64_t r, bool is_f)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return !is_f && r >= 1 && r <= 4 && glm_tile_level() > 0 && nf_switches()->glm_tile;
#else
    (void)r;
    (void)is_f;
    return false;
#endif
}

void nf_glm_tile_simd(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,
                      float *mx, uint32_t *count, int32_t *near, int *n_near)
{
#if defined(__x86_64__) && defined(__GNUC__)
    int level = e->is_f || e->r > 4 || e->r < 1 ? 0 : glm_tile_level();
    if (level == 2 && e->nv < 32)
        level = 1;   /* a short block (a tile's last voxels): AVX2's strips of 16 still fit */
    const int64_t W = level == 2 ? 16 : 8;
    if (level > 0 && e->nv >= 2 * W) {
        int listed = 0;
        if (level == 2)
            glm_tile_avx512(e, R, E, n, lde, q, mx, count, near, &listed);
        else
            glm_tile_avx2(e, R, E, n, lde, q, mx, count, near, &listed);
        const int64_t nvf = e->nv - e->nv % (2 * W);
        if (nvf < e->nv)   /* the voxels past the last strip */
            tail_voxels(e, R, E, n, lde, q, mx, count, near, &listed, e->np, nvf);
        if (count)
            *n_near = listed;
        return;
    }
#endif
    nf_glm_tile_ref(e, R, E, n, lde, q, mx, count, near, n_near);
}
