/* glm_tile_i8.c — the glm permutation test's fused tile with the moved
 * nuisance rows summed in bytes (glm_tile_i8 in kernels.h), for CPUs with
 * AVX-512 VNNI (Ice Lake, Sapphire Rapids, Zen 4).
 *
 * Exact Freedman–Lane needs 1 + k_moved products per voxel and permutation
 * (docs/randomise.md); the first, the regressor's, decides the statistic's
 * numerator and is summed in float exactly as glm_tile sums it, while the
 * nuisance rows only enter the residual sum of squares, where an error of a
 * percent of each of them moves the statistic by a fraction of a percent.
 * E in signed bytes (a step per voxel) and the rows in unsigned bytes (a step
 * per row, offset 128; the sums start at -128 x the voxel's bytes' sum) go
 * through VPDPBUSD, four subjects' products per lane summed exactly in 32-bit
 * integers: the two moved rows take half an
 * instruction per subject instead of two FMAs.
 * Each value gets an interval that surely holds glm_tile's float value: the
 * byte sums are off from the float ones by at most dg (nf_glm_i8_bound, by
 * Cauchy–Schwarz on the vectors' measured rounding), which bounds the float
 * path's residual sum of squares within D of ours (its round-off counted
 * twice over), and the statistic moves by at most its value x D / (the
 * smallest such sum) plus the divisions' round-off. Where the interval does
 * not decide a count (reaches the voxel's window [lo, hi)) or may raise the
 * permutation's running maximum, the 16 values of that vector are summed
 * again in float, as glm_tile sums them (the same bits), and decided as
 * glm_tile decides them. So the counts, the near list and the running
 * maximum are glm_tile's exactly (tests/unit/test_kernels.c checks it); only
 * the block maxima are upper bounds. Register tile: P permutations x (1 float
 * + r-1 byte rows) x 2 vectors = 24 accumulators. CPUs without VNNI take
 * glm_tile (the vector or the plain one).
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"
#include "core/switches.h"

/* glm_tile's values with the block maxima as both the bound and the running maximum */
static void through_glm_tile(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde,
                             float *ub_max, float *run_max, uint32_t *count, int32_t *near, int *n_near)
{
    nf_glm_tile_simd(e, R, E, n, lde, NULL, ub_max, count, near, n_near);
    for (int64_t i = 0; i < e->np; i++)
        run_max[i] = ub_max[i] > run_max[i] ? ub_max[i] : run_max[i];
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define I8_TARGET "avx512f,avx512bw,avx512vnni,avx2,fma"
typedef float i8_vf __attribute__((vector_size(64)));
typedef int32_t i8_vi __attribute__((vector_size(64)));
#define I8_MIN(a, b) ((i8_vf)_mm512_min_ps((__m512)(a), (__m512)(b)))   /* a < b ? a : b */
#define I8_MAX(a, b) ((i8_vf)_mm512_max_ps((__m512)(a), (__m512)(b)))   /* a > b ? a : b */

enum { I8_BLOCK = 96 };   /* permutations whose bound maxima are kept at once */

/* glm_tile's 16 values of one permutation (rows Rp, g0 its first row's sums,
 * already the float ones) at the voxels u .. u + 15: the other rows summed in
 * float in k order and the epilogue's operations in its order (the same bits). */
static inline __attribute__((always_inline, target(I8_TARGET))) i8_vf
exact16(const struct nf_glm_epi *e, const float *Rp, const float *E, int64_t n, int64_t lde, int64_t u, i8_vf g0,
        const int RR)
{
    __m512 g[4];
    for (int m = 1; m < RR; m++)
        g[m] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        __m512 d = _mm512_loadu_ps(E + k * lde + u);
        for (int m = 1; m < RR; m++)
            g[m] = _mm512_fmadd_ps(_mm512_set1_ps(Rp[m * n + k]), d, g[m]);
    }
    const i8_vi absmask = (i8_vi){ 0 } + 0x7fffffff;
    const i8_vf vsg = (i8_vf){ 0 } + e->sg;
    i8_vf ss, fl, cap;
    memcpy(&ss, e->ss + u, sizeof ss);
    memcpy(&fl, e->fl + u, sizeof fl);
    memcpy(&cap, e->cap + u, sizeof cap);
    i8_vf ag = (i8_vf)((i8_vi)g0 & absmask);
    i8_vf num = e->two ? g0 * g0 : vsg * g0 * ag;
    i8_vf rss = ss - g0 * g0;
    for (int m = 1; m < RR; m++)
        rss -= (i8_vf)g[m] * (i8_vf)g[m];
    rss = I8_MAX(rss, fl);
    i8_vf x = num / rss;
    return I8_MIN(x, cap);
}

/* Subjects 4j .. 4j + NS - 1 (NS = 4, or n % 4 for the last quad) into the
 * accumulators of i8_body: the regressor's row in float, subject by subject
 * (glm_tile's k order), the others' quad in one VPDPBUSD. A macro so that the
 * loop's copy has no branch. */
#define I8_STEP(j_, NS)                                                                                    \
    do {                                                                                                   \
        _Pragma("GCC unroll 4") for (int b_ = 0; b_ < (NS); b_++) {                                        \
            const int64_t k_ = 4 * (j_) + b_;                                                              \
            __m512 d0_ = _mm512_loadu_ps(E + k_ * lde + v), d1_ = _mm512_loadu_ps(E + k_ * lde + v + W);   \
            _Pragma("GCC unroll 6") for (int pp = 0; pp < P; pp++) {                                       \
                __m512 s_ = _mm512_set1_ps(Rp[pp * RR * n + k_]);                                          \
                x0[pp] = _mm512_fmadd_ps(s_, d0_, x0[pp]);                                                 \
                x1[pp] = _mm512_fmadd_ps(s_, d1_, x1[pp]);                                                 \
            }                                                                                              \
        }                                                                                                  \
        __m512i f0_ = _mm512_loadu_si512(b->Eq + (j_) * ldq + v);                                          \
        __m512i f1_ = _mm512_loadu_si512(b->Eq + (j_) * ldq + v + W);                                      \
        _Pragma("GCC unroll 18") for (int q = 0; q < P * R1; q++) {                                        \
            __m512i s_ = _mm512_set1_epi32((int)Rq[q * n4 + (j_)]);                                        \
            c0[q] = _mm512_dpbusd_epi32(c0[q], s_, f0_);                                                   \
            c1[q] = _mm512_dpbusd_epi32(c1[q], s_, f1_);                                                   \
        }                                                                                                  \
    } while (0)

/* The body for RR rows, P permutations per register tile: permutations
 * [0, np - np % P) (listed in near as i_base + i) and voxels [0, nv - nv % 32). */
static inline __attribute__((always_inline, target(I8_TARGET))) void
i8_body(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E, int64_t n,
        int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near, int *listed, int64_t i_base,
        const int RR, const int P, const bool counting)
{
    enum { W = 16 };
    const int R1 = RR - 1;
    const int64_t nv = e->nv, nvf = nv - nv % (2 * W), npf = e->np - e->np % P, n4 = (n + 3) / 4;
    const int64_t ldq = b->ldq;
    const bool two = e->two;
    const i8_vf vsg = (i8_vf){ 0 } + e->sg;
    const i8_vi absmask = (i8_vi){ 0 } + 0x7fffffff;
    float vub[I8_BLOCK * W];
    const int64_t pb = I8_BLOCK - I8_BLOCK % P;
    for (int64_t b0 = 0; b0 < npf; b0 += pb) {
        const int64_t bn = npf - b0 < pb ? npf - b0 : pb;
        for (int64_t i = 0; i < bn * W; i++)
            vub[i] = -FLT_MAX;
        for (int64_t v = 0; v < nvf; v += 2 * W) {
            __m512i cnt[2] = { _mm512_setzero_si512(), _mm512_setzero_si512() };
            if (counting) {
                cnt[0] = _mm512_loadu_si512(count + v);
                cnt[1] = _mm512_loadu_si512(count + v + W);
            }
            for (int64_t p = b0; p < b0 + bn; p += P) {
                __m512 x0[6], x1[6];
                __m512i c0[18], c1[18];   /* P and P (RR-1) of them used: registers */
                _Pragma("GCC unroll 6") for (int j = 0; j < P; j++)
                    x0[j] = x1[j] = _mm512_setzero_ps();
                const __m512i off0 = _mm512_loadu_si512(b->off + v), off1 = _mm512_loadu_si512(b->off + v + W);
                _Pragma("GCC unroll 18") for (int j = 0; j < P * R1; j++)
                    c0[j] = off0, c1[j] = off1;
                const float *Rp = R + p * RR * n;
                const uint32_t *Rq = b->Rq + p * R1 * n4;
                for (int64_t j = 0; j < n / 4; j++)
                    I8_STEP(j, 4);
                switch (n % 4) {   /* the last, partial quad */
                case 1: I8_STEP(n / 4, 1); break;
                case 2: I8_STEP(n / 4, 2); break;
                case 3: I8_STEP(n / 4, 3); break;
                default: break;
                }
                _Pragma("GCC unroll 6") for (int pp = 0; pp < P; pp++) {
                    __m512 ubm = _mm512_set1_ps(-FLT_MAX), rmv = _mm512_set1_ps(run_max[p + pp]);
                    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                        const int64_t u = v + h * W;
                        const __m512i *c = h ? c1 + pp * R1 : c0 + pp * R1;
                        i8_vf g0 = (i8_vf)(h ? x1[pp] : x0[pp]);
                        i8_vf ss, fl, cap, dg, dr, sv;
                        memcpy(&ss, e->ss + u, sizeof ss);
                        memcpy(&fl, e->fl + u, sizeof fl);
                        memcpy(&cap, e->cap + u, sizeof cap);
                        memcpy(&dg, b->dg + u, sizeof dg);
                        memcpy(&dr, b->dr + u, sizeof dr);
                        memcpy(&sv, b->sv + u, sizeof sv);
                        i8_vf g0sq = g0 * g0, ag = (i8_vf)((i8_vi)g0 & absmask);
                        i8_vf num = two ? g0sq : vsg * g0 * ag;
                        i8_vf rss = ss - g0sq, sab = { 0 };
                        _Pragma("GCC unroll 4") for (int m = 0; m < R1; m++) {
                            /* the bytes' product sum (exact: n <= NF_GLM_I8_MAX_N) x sv sq */
                            i8_vf bm = (i8_vf)_mm512_cvtepi32_ps(c[m]) *
                                       (sv * b->sq[m]);
                            rss -= bm * bm;
                            sab += (i8_vf)((i8_vi)bm & absmask);
                        }
                        /* the float path's rss is within D of ours (|g_f² - g_b²| <= dg (2|g_b| + dg)
                         * per row, and both paths' round-off dr), so its statistic is within rad of
                         * qm: D over the smallest rss it can have, plus rcp14's 2^-14 and round-off */
                        i8_vf D = (dg * (2.0f * sab + (float)R1 * dg) + dr) * 1.01f + FLT_MIN;
                        i8_vf lo_rss = I8_MAX(rss - D, fl);
                        i8_vf qm = I8_MIN(num * (i8_vf)_mm512_rcp14_ps((__m512)I8_MAX(rss, fl)), cap);
                        i8_vf rho = D * (i8_vf)_mm512_rcp14_ps((__m512)lo_rss) * (1.0f + 0x1p-11f) + 0x1p-12f;
                        i8_vf rad = (i8_vf)((i8_vi)qm & absmask) * rho;
                        __m512 lb = (__m512)(qm - rad), ub = (__m512)(qm + rad);
                        ubm = _mm512_max_ps(ub, ubm);
                        __mmask16 need = _mm512_cmp_ps_mask(ub, rmv, _CMP_GT_OQ);
                        __mmask16 unsure = 0;
                        __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
                        if (counting) {
                            lo = _mm512_loadu_ps(e->lo + u);
                            hi = _mm512_loadu_ps(e->hi + u);
                            cnt[h] = _mm512_mask_add_epi32(cnt[h], _mm512_cmp_ps_mask(lb, hi, _CMP_GE_OQ), cnt[h],
                                                           _mm512_set1_epi32(1));
                            __mmask16 reach = _mm512_cmp_ps_mask(ub, lo, _CMP_GE_OQ);
                            unsure = reach & _mm512_cmp_ps_mask(lb, hi, _CMP_LT_OQ);
                            /* NaN bounds (a flat voxel's 0/0) decide nothing: decided exactly */
                            unsure |= _mm512_cmp_ps_mask(lb, lb, _CMP_UNORD_Q) &
                                      (reach | _mm512_cmp_ps_mask(ub, ub, _CMP_UNORD_Q));
                            need |= unsure;
                        }
                        if (__builtin_expect(need != 0, 0)) {
                            float x[W], lov[W], hiv[W];
                            _mm512_storeu_ps(x, (__m512)exact16(e, Rp + pp * RR * n, E, n, lde, u, g0, RR));
                            _mm512_storeu_ps(lov, lo);
                            _mm512_storeu_ps(hiv, hi);
                            uint32_t add[W] = { 0 };
                            float m = run_max[p + pp];
                            for (unsigned bits = need; bits; bits &= bits - 1) {
                                const int l = __builtin_ctz(bits);
                                m = x[l] > m ? x[l] : m;
                                if (counting && (unsure >> l & 1)) {
                                    add[l] = x[l] >= hiv[l];
                                    if (x[l] >= lov[l] && x[l] < hiv[l])
                                        near[(*listed)++] = (int32_t)((i_base + p + pp) * nv + u + l);
                                }
                            }
                            run_max[p + pp] = m;
                            rmv = _mm512_set1_ps(m);
                            if (counting)
                                cnt[h] = _mm512_add_epi32(cnt[h], _mm512_loadu_si512(add));
                        }
                    }
                    float *slot = vub + (p - b0 + pp) * W;
                    _mm512_storeu_ps(slot, _mm512_max_ps(ubm, _mm512_loadu_ps(slot)));
                }
            }
            if (counting) {
                _mm512_storeu_si512(count + v, cnt[0]);
                _mm512_storeu_si512(count + v + W, cnt[1]);
            }
        }
        for (int64_t i = 0; i < bn; i++) {
            float m = -FLT_MAX;
            for (int l = 0; l < W; l++)
                m = vub[i * W + l] > m ? vub[i * W + l] : m;
            ub_max[b0 + i] = m;
        }
    }
}

/* The P-permutation tiles, then the rest one permutation at a time. */
static inline __attribute__((always_inline, target(I8_TARGET))) void
i8_rows(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E, int64_t n,
        int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near, int *listed, const int RR,
        const int P, const bool counting)
{
    const int64_t npf = e->np - e->np % P;
    i8_body(e, b, R, E, n, lde, ub_max, run_max, count, near, listed, 0, RR, P, counting);
    if (npf < e->np) {
        struct nf_glm_epi t = *e;
        struct nf_glm_i8 tb = *b;
        t.np = e->np - npf;
        tb.Rq = b->Rq + npf * (RR - 1) * ((n + 3) / 4);
        i8_body(&t, &tb, R + npf * RR * n, E, n, lde, ub_max + npf, run_max + npf, count, near, listed, npf, RR, 1,
                counting);
    }
}

static __attribute__((target(I8_TARGET), noinline)) void
i8_tile(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E, int64_t n,
        int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near, int *listed)
{
    /* accumulators 2 P r <= 24 of the 32 registers */
    switch (e->r * 2 + (count != NULL)) {
    case 4: i8_rows(e, b, R, E, n, lde, ub_max, run_max, NULL, NULL, listed, 2, 6, false); break;
    case 5: i8_rows(e, b, R, E, n, lde, ub_max, run_max, count, near, listed, 2, 6, true); break;
    case 6: i8_rows(e, b, R, E, n, lde, ub_max, run_max, NULL, NULL, listed, 3, 4, false); break;
    case 7: i8_rows(e, b, R, E, n, lde, ub_max, run_max, count, near, listed, 3, 4, true); break;
    case 8: i8_rows(e, b, R, E, n, lde, ub_max, run_max, NULL, NULL, listed, 4, 3, false); break;
    default: i8_rows(e, b, R, E, n, lde, ub_max, run_max, count, near, listed, 4, 3, true); break;
    }
}

static bool vnni_cpu(void)
{
    static _Atomic int has = -1;
    int h = has;
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        has = h;
    }
    return h;
}
#endif

bool nf_glm_tile_i8_fast(int64_t r, bool is_f, int64_t n)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return !is_f && r >= 2 && r <= 4 && n <= NF_GLM_I8_MAX_N && vnni_cpu() && nf_switches()->glm_i8 &&
           nf_glm_tile_fused(r, is_f);
#else
    (void)r;
    (void)is_f;
    (void)n;
    return false;
#endif
}

void nf_glm_tile_i8_simd(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E,
                         int64_t n, int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near,
                         int *n_near)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (!e->is_f && e->r >= 2 && e->r <= 4 && e->nv >= 32 && n <= NF_GLM_I8_MAX_N && vnni_cpu()) {
        int listed = 0;
        i8_tile(e, b, R, E, n, lde, ub_max, run_max, count, near, &listed);
        const int64_t nvf = e->nv - e->nv % 32;
        if (nvf < e->nv) {   /* the voxels past the last strip, through glm_tile */
            struct nf_glm_epi t = *e;
            t.ss += nvf, t.fl += nvf, t.cap += nvf;
            if (count)
                t.lo += nvf, t.hi += nvf;
            t.nv = e->nv - nvf;
            for (int64_t i = 0; i < e->np; i++) {
                float m;
                int n_tail = 0;
                t.np = 1;
                nf_glm_tile_simd(&t, R + i * e->r * n, E + nvf, n, lde, NULL, &m, count ? count + nvf : NULL,
                                 count ? near + listed : NULL, &n_tail);
                for (int j = 0; j < n_tail; j++)
                    near[listed + j] += (int32_t)(i * e->nv + nvf);
                listed += n_tail;
                ub_max[i] = m > ub_max[i] ? m : ub_max[i];
                run_max[i] = m > run_max[i] ? m : run_max[i];
            }
        }
        if (count)
            *n_near = listed;
        return;
    }
#endif
    through_glm_tile(e, R, E, n, lde, ub_max, run_max, count, near, n_near);
}
