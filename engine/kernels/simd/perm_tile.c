/* perm_tile.c — the permute node's tile kernel on the CPU (struct
 * nf_perm_tile in kernels.h): for a block of permutation rows R (rows x n)
 * and one tile of voxels of the data D (n x V), every null value G = R D,
 * turned into the transformed statistic q, counted where q reaches the
 * observed value (q >= hi), with the row maxima over the tile, and the rare
 * values inside the round-off tie window (lo < q < hi) decided again in
 * double (t->tie_exceeds).
 *
 * Three implementations behind nf_perm_tile_simd (the entry of
 * nf_kernels_blas), chosen once per run by nf_perm_tile_choose:
 *  - gemm: BLAS SGEMM of up to NF_PERM_TILE_SUB_ROWS rows x the tile into a
 *    scratch tile, then an epilogue pass over each row (8-wide vectors,
 *    compiled for AVX-512 / AVX2 / the baseline);
 *  - fused (x86-64 with AVX2+FMA or AVX-512F): a register-blocked GEMM whose
 *    tile of ROWS x 2 vectors never leaves the registers: the epilogue runs on
 *    the accumulators, the exceedance counts of the voxel strip stay in
 *    registers across all rows, and the row maxima are kept as vectors. At
 *    the permute node's shapes (k = n subjects is 10-100) BLAS spends much of
 *    its time packing and writing G, and the separate epilogue pass reads G
 *    back; fused, the work is the FMAs and the few compares per value. The
 *    strips that do not fill 2 vectors and the rows that do not fill a row
 *    block go through the gemm implementation.
 * Each sums each value in its own order, so null values differ between them
 * by round-off; the counts do not: a value within round-off of the observed
 * one is inside the tie window and decided in double, identically. So
 * p-values are the same whatever the implementation, thread count or CPU.
 * The plain version, the oracle of tests/unit/test_kernels.c, is
 * kernels/ref/perm_tile_ref.c.
 */
#include <float.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "core/switches.h"

/* ---- gemm, then an epilogue pass ---- */

struct row_consts {
    const float *shift, *ss, *fl, *cap, *lo, *hi;
    float a, c;
};

typedef float nf_v8f __attribute__((vector_size(32)));
typedef int32_t nf_v8i __attribute__((vector_size(32)));

/* mask ? a : b for vectors (a mask is all ones or zeros per lane) */
#define VSEL(mask, a, b) ((nf_v8f)(((nf_v8i)(a) & (mask)) | ((nf_v8i)(b) & ~(mask))))

/* The epilogue of one GEMM row: transform in place (as the node's nf_perm_transform()),
 * count exceedances (q >= hi), count values inside the tie window (lo, hi),
 * return the row's maximum. Specialised per statistic and tail (constant
 * arguments of an always-inlined body). */
static inline __attribute__((always_inline)) float row_body(const struct row_consts *k, float *g,
                                                            uint32_t *cnt, int64_t len, int *near_out,
                                                            const bool t_stat, const int tail)
{
    nf_v8f vmax = { -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX };
    nf_v8i vnear = { 0 };
    const nf_v8f va = { k->a, k->a, k->a, k->a, k->a, k->a, k->a, k->a };
    const nf_v8f vc = { k->c, k->c, k->c, k->c, k->c, k->c, k->c, k->c };
    int64_t v = 0;
    for (; v + 8 <= len; v += 8) {
        nf_v8f x, sh, ss, fl, cap, lo, hi, q;
        nf_v8i cn;
        memcpy(&x, g + v, sizeof x);
        memcpy(&sh, k->shift + v, sizeof sh);
        memcpy(&cap, k->cap + v, sizeof cap);
        memcpy(&lo, k->lo + v, sizeof lo);
        memcpy(&hi, k->hi + v, sizeof hi);
        nf_v8f d = va * x - sh;
        nf_v8f ad = VSEL(d < 0, -d, d);
        nf_v8f sd = tail == NF_TAIL_TWO ? ad : tail == NF_TAIL_UPPER ? d : -d;
        if (t_stat) {
            memcpy(&ss, k->ss + v, sizeof ss);
            memcpy(&fl, k->fl + v, sizeof fl);
            nf_v8f den = ss - vc * d * d;
            den = VSEL(den > fl, den, fl);
            q = sd * ad / den;
        } else {
            q = sd;
        }
        q = VSEL(q < cap, q, cap);
        memcpy(g + v, &q, sizeof q);
        memcpy(&cn, cnt + v, sizeof cn);
        cn -= (nf_v8i)(q >= hi);
        memcpy(cnt + v, &cn, sizeof cn);
        vnear -= (nf_v8i)(q > lo) & (nf_v8i)(q < hi);
        vmax = VSEL(q > vmax, q, vmax);
    }
    float m = -FLT_MAX;
    int near = 0;
    for (int i = 0; i < 8; i++) {
        m = vmax[i] > m ? vmax[i] : m;
        near += vnear[i];
    }
    for (; v < len; v++) {
        float d = k->a * g[v] - k->shift[v], ad = d < 0 ? -d : d, q;
        float sd = tail == NF_TAIL_TWO ? ad : tail == NF_TAIL_UPPER ? d : -d;
        if (t_stat) {
            float den = k->ss[v] - k->c * d * d;
            den = den > k->fl[v] ? den : k->fl[v];
            q = sd * ad / den;
        } else {
            q = sd;
        }
        q = q < k->cap[v] ? q : k->cap[v];
        g[v] = q;
        cnt[v] += q >= k->hi[v];
        near += (q > k->lo[v]) & (q < k->hi[v]);
        m = q > m ? q : m;
    }
    *near_out = near;
    return m;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
static float row_epilogue(const struct row_consts *k, float *g, uint32_t *cnt, int64_t len, int *near,
                          bool t_stat, int tail)
{
    if (t_stat)
        return tail == NF_TAIL_TWO ? row_body(k, g, cnt, len, near, true, NF_TAIL_TWO)
             : tail == NF_TAIL_UPPER ? row_body(k, g, cnt, len, near, true, NF_TAIL_UPPER)
                                       : row_body(k, g, cnt, len, near, true, NF_TAIL_LOWER);
    return tail == NF_TAIL_TWO ? row_body(k, g, cnt, len, near, false, NF_TAIL_TWO)
         : tail == NF_TAIL_UPPER ? row_body(k, g, cnt, len, near, false, NF_TAIL_UPPER)
                                   : row_body(k, g, cnt, len, near, false, NF_TAIL_LOWER);
}

/* Rows [0, rows) of R x voxels [v0, v0 + nv) by BLAS, NF_PERM_TILE_SUB_ROWS
 * rows at a time into C (NF_PERM_TILE_SUB_ROWS x nv floats). */
static void tile_gemm(const struct nf_perm_tile *c, const float *R, int64_t rows, int64_t v0, int64_t nv,
                           uint32_t *cnt, float *rowmax, float *C)
{
    const float *lo = c->lo + v0, *hi = c->hi + v0;
    const struct row_consts k = { c->shift + v0, c->ss + v0, c->floor_ + v0, c->cap + v0, lo, hi,
                                  c->a, c->c };
    for (int64_t r0 = 0; r0 < rows; r0 += NF_PERM_TILE_SUB_ROWS) {
        int64_t nr = rows - r0 < NF_PERM_TILE_SUB_ROWS ? rows - r0 : NF_PERM_TILE_SUB_ROWS;
        c->K->sgemm(false, false, nr, nv, c->n, 1.0f, R + r0 * c->n, c->n, c->D + v0, c->V, 0.0f, C, nv);
        for (int64_t i = 0; i < nr; i++) {
            float *q = C + i * nv;
            int near = 0;
            rowmax[r0 + i] = row_epilogue(&k, q, cnt, nv, &near, c->t_stat, c->tail);
            for (int64_t v = 0; near && v < nv; v++)   /* rare: within round-off */
                if (q[v] > lo[v] && q[v] < hi[v])
                    cnt[v] += c->tie_exceeds(c->tie_ctx, R + (r0 + i) * c->n, v0 + v);
        }
    }
}

/* ---- fused ---- */

/* The values inside the tie window of one register tile (rows r.. of R,
 * voxels v.. of the strip; q: ROWS x 2W floats, row-major), decided in double. */
static __attribute__((noinline)) void near_ties(const struct nf_perm_tile *c, const float *R, int64_t rows, int64_t v,
                                                int64_t width, const float *q, uint32_t *cnt)
{
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < width; j++)
            if (q[i * width + j] > c->lo[v + j] && q[i * width + j] < c->hi[v + j])
                cnt[j] += c->tie_exceeds(c->tie_ctx, R + i * c->n, v + j);
}

/* Tables of partial sums (below): subjects per group, rows per pass. */
enum { TAB_BITS = 4, TAB_PATTERNS = 1 << TAB_BITS, TAB_ROWS = 4, TAB_MAX_GROUPS = 255 };
/* Groups whose tables take at most 26 KB (L1 holds them with the rows'
 * patterns and maxima streaming past) for entries of `strip` floats: a pass
 * over the rows per this many groups. */
#define TAB_PASS_GROUPS(strip) ((int64_t)(26 * 1024 / (TAB_PATTERNS * (strip) * 4)))

/* What nf_perm_tile_prepare_simd leaves at the start of scratch for the
 * tiles of its rows (magic 0: use no tables). */
struct tab_header {
    uint32_t magic;
    float one, zero;
    int64_t rows, n;
    enum nf_perm_tile_impl impl;
    const float *R;
};
enum { TAB_MAGIC = 0x7AB1E5, TAB_HEADER_FLOATS = 16 };

static int64_t tab_groups(int64_t n)
{
    return (n + TAB_BITS - 1) / TAB_BITS;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define NF_PERM_FUSED 1
#include <immintrin.h>

/* mask ? a : b for vectors of any width */
#define VSELT(VF, VI, mask, a, b) ((VF)(((VI)(a) & (VI)(mask)) | ((VI)(b) & ~(VI)(mask))))

/* The epilogue on one accumulator vector x of voxels with the voxels'
 * constants in vectors: q, the count update (cntv), the near flag (nearv). */
#define EPILOGUE_ON(P, VF, VI, x, sh_, cap_, hi_, lo_, ss_, fl_, cntv, q_out)                                \
    do {                                                                                                     \
        VF d_ = va * (x) - (sh_);                                                                            \
        VF ad_ = (VF)((VI)d_ & absmask);                                                                     \
        VF sd_ = tail == NF_TAIL_TWO ? ad_ : tail == NF_TAIL_UPPER ? d_ : -d_;                               \
        VF q_;                                                                                               \
        if (t_stat) {                                                                                        \
            VF den_ = (ss_) - vc * d_ * d_;                                                                  \
            den_ = P##_vmax(den_, (fl_));                                                                    \
            q_ = sd_ * ad_ / den_;                                                                           \
        } else {                                                                                             \
            q_ = sd_;                                                                                        \
        }                                                                                                    \
        q_ = P##_vmin(q_, (cap_));                                                                           \
        VI ge_ = (VI)(q_ >= (hi_));                                                                          \
        cntv -= ge_;                                                                                         \
        nearv |= (VI)(q_ > (lo_)) & ~ge_;                                                                    \
        q_out = q_;                                                                                          \
    } while (0)

/* The same with the constants read from k[..] (pointers to the strip's first
 * voxel), vector h of the strip, into counts cnt##h. */
#define FUSED_EPILOGUE(P, VF, VI, x, h, q_out)                                                               \
    do {                                                                                                     \
        VF sh_, cap_, hi_, lo_, ss_ = { 0 }, fl_ = { 0 };                                                    \
        memcpy(&sh_, shift + (h) * W, sizeof sh_);                                                           \
        memcpy(&cap_, capv + (h) * W, sizeof cap_);                                                          \
        memcpy(&hi_, hiv + (h) * W, sizeof hi_);                                                             \
        memcpy(&lo_, lov + (h) * W, sizeof lo_);                                                             \
        if (t_stat) {                                                                                        \
            memcpy(&ss_, ssv + (h) * W, sizeof ss_);                                                         \
            memcpy(&fl_, flv + (h) * W, sizeof fl_);                                                         \
        }                                                                                                    \
        EPILOGUE_ON(P, VF, VI, x, sh_, cap_, hi_, lo_, ss_, fl_, cnt##h, q_out);                             \
    } while (0)

/* A row's maxima over a strip: the larger of its two vectors q0, q1 kept in
 * its vector of vmax at `slot`. */
#define STRIP_ROW_MAX(P, VF, q0, q1, slot)                                                                   \
    do {                                                                                                     \
        VF m_ = P##_vmax((q0), (q1)), old_;                                                                  \
        memcpy(&old_, (slot), sizeof old_);                                                                  \
        m_ = P##_vmax(m_, old_);                                                                             \
        memcpy((slot), &m_, sizeof m_);                                                                      \
    } while (0)

/* The values of a register tile inside the tie window (nearv), rows Rrows ..
 * (nrows of them, acc0/acc1 holding q, at most CAP), decided in double: the
 * strip's counts are in registers, so flush, decide, reload. */
#define STRIP_NEAR_TIES(VF, Rrows, nrows, CAP)                                                               \
    do {                                                                                                     \
        bool any_ = false;                                                                                   \
        for (int l_ = 0; l_ < W; l_++)                                                                       \
            any_ |= nearv[l_] != 0;                                                                          \
        if (__builtin_expect(any_, 0)) {                                                                     \
            float q_[(CAP) * 2 * W];                                                                         \
            for (int i_ = 0; i_ < (CAP); i_++) {                                                             \
                memcpy(q_ + i_ * 2 * W, &acc0[i_], sizeof acc0[i_]);                                         \
                memcpy(q_ + i_ * 2 * W + W, &acc1[i_], sizeof acc1[i_]);                                     \
            }                                                                                                \
            memcpy(cnt + v, &cnt0, sizeof cnt0);                                                             \
            memcpy(cnt + v + W, &cnt1, sizeof cnt1);                                                         \
            near_ties(c, (Rrows), (nrows), v0 + v, 2 * W, q_, cnt + v);                                      \
            memcpy(&cnt0, cnt + v, sizeof cnt0);                                                             \
            memcpy(&cnt1, cnt + v + W, sizeof cnt1);                                                         \
        }                                                                                                    \
    } while (0)

/* NAME_vmin(a, b) = a < b ? a : b and NAME_vmax(a, b) = a > b ? a : b for an
 * instantiation's vectors, one instruction each (the x86 min/max return b
 * when the comparison is false, as these selects do, NaN included). */
#define DEFINE_MINMAX(NAME, TARGET, MT, MIN, MAX)                                                            \
    static inline __attribute__((always_inline, target(TARGET))) NAME##_vf NAME##_vmin(NAME##_vf a, NAME##_vf b) \
    {                                                                                                        \
        return (NAME##_vf)MIN((MT)a, (MT)b);                                                                 \
    }                                                                                                        \
    static inline __attribute__((always_inline, target(TARGET))) NAME##_vf NAME##_vmax(NAME##_vf a, NAME##_vf b) \
    {                                                                                                        \
        return (NAME##_vf)MAX((MT)a, (MT)b);                                                                 \
    }

/* One instantiation: W floats per vector, ROWS rows per register tile, for a
 * target. Processes rows [0, rows - rows % ROWS) and voxels [0, nv - nv % 2W)
 * of the tile; vmax: ROWS-rounded rows x W floats of running row maxima,
 * initialised by the caller. */
#define DEFINE_FUSED(NAME, TARGET, W_, ROWS_, FMA, SET1, MT, MIN, MAX)                                       \
    typedef float NAME##_vf __attribute__((vector_size(4 * (W_))));                                          \
    typedef int32_t NAME##_vi __attribute__((vector_size(4 * (W_))));                                        \
    DEFINE_MINMAX(NAME, TARGET, MT, MIN, MAX)                                                                \
    static inline __attribute__((always_inline, target(TARGET))) void NAME##_body(                           \
        const struct nf_perm_tile *c, const float *R, int64_t rows, int64_t v0, int64_t nv, uint32_t *cnt,      \
        float *vmax, const bool t_stat, const int tail)                                                      \
    {                                                                                                        \
        typedef NAME##_vf VF;                                                                                \
        typedef NAME##_vi VI;                                                                                \
        enum { W = W_, ROWS = ROWS_ };                                                                       \
        const int64_t n = c->n, ldd = c->V;                                                                  \
        const VF va = (VF){ 0 } + c->a, vc = (VF){ 0 } + c->c;                                \
        const VI absmask = (VI){ 0 } + 0x7fffffff;                                                           \
        for (int64_t v = 0; v + 2 * W <= nv; v += 2 * W) {                                                   \
            const float *shift = c->shift + v0 + v, *capv = c->cap + v0 + v, *hiv = c->hi + v0 + v,          \
                        *lov = c->lo + v0 + v, *ssv = c->ss + v0 + v, *flv = c->floor_ + v0 + v;             \
            const float *Dv = c->D + v0 + v;                                                                 \
            VI cnt0, cnt1;                                                                                   \
            memcpy(&cnt0, cnt + v, sizeof cnt0);                                                             \
            memcpy(&cnt1, cnt + v + W, sizeof cnt1);                                                         \
            for (int64_t r = 0; r + ROWS <= rows; r += ROWS) {                                               \
                VF acc0[ROWS], acc1[ROWS];                                                                   \
                _Pragma("GCC unroll 16") for (int i = 0; i < ROWS; i++)                                      \
                    acc0[i] = acc1[i] = (VF){ 0 };                                                           \
                const float *Rr = R + r * n;                                                                 \
                for (int64_t k = 0; k < n; k++) {                                                            \
                    VF d0, d1;                                                                               \
                    memcpy(&d0, Dv + k * ldd, sizeof d0);                                                    \
                    memcpy(&d1, Dv + k * ldd + W, sizeof d1);                                                \
                    _Pragma("GCC unroll 16") for (int i = 0; i < ROWS; i++) {                                \
                        float s = Rr[i * n + k];                                                             \
                        VF sv = (VF)SET1(s); /* not 0 + s: that is an addition (-0) */                       \
                        acc0[i] = (VF)FMA(sv, d0, acc0[i]);                                                  \
                        acc1[i] = (VF)FMA(sv, d1, acc1[i]);                                                  \
                    }                                                                                        \
                }                                                                                            \
                VI nearv = (VI){ 0 };                                                                        \
                _Pragma("GCC unroll 16") for (int i = 0; i < ROWS; i++) {                                    \
                    VF q0, q1;                                                                               \
                    FUSED_EPILOGUE(NAME, VF, VI, acc0[i], 0, q0);                                                  \
                    FUSED_EPILOGUE(NAME, VF, VI, acc1[i], 1, q1);                                                  \
                    acc0[i] = q0;                                                                            \
                    acc1[i] = q1;                                                                            \
                    STRIP_ROW_MAX(NAME, VF, q0, q1, vmax + (r + i) * W);                                       \
                }                                                                                            \
                STRIP_NEAR_TIES(VF, Rr, ROWS, ROWS);                                                         \
            }                                                                                                \
            memcpy(cnt + v, &cnt0, sizeof cnt0);                                                             \
            memcpy(cnt + v + W, &cnt1, sizeof cnt1);                                                         \
        }                                                                                                    \
    }                                                                                                        \
    static __attribute__((target(TARGET), noinline)) void NAME(const struct nf_perm_tile *c, const float *R,    \
                                                               int64_t rows, int64_t v0, int64_t nv,         \
                                                               uint32_t *cnt, float *vmax)                   \
    {                                                                                                        \
        if (c->t_stat) {                                                                                     \
            if (c->tail == NF_TAIL_TWO)                                                                    \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, true, NF_TAIL_TWO);                             \
            else if (c->tail == NF_TAIL_UPPER)                                                             \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, true, NF_TAIL_UPPER);                           \
            else                                                                                             \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, true, NF_TAIL_LOWER);                           \
        } else {                                                                                             \
            if (c->tail == NF_TAIL_TWO)                                                                    \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, false, NF_TAIL_TWO);                            \
            else if (c->tail == NF_TAIL_UPPER)                                                             \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, false, NF_TAIL_UPPER);                          \
            else                                                                                             \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, false, NF_TAIL_LOWER);                          \
        }                                                                                                    \
    }

/* AVX-512: 8 rows x 2 zmm = 16 accumulators of 32; AVX2: 6 x 2 ymm = 12 of 16. */
DEFINE_FUSED(fused_avx512, "avx512f,avx2,fma", 16, 8, _mm512_fmadd_ps, _mm512_set1_ps, __m512, _mm512_min_ps,
             _mm512_max_ps)
DEFINE_FUSED(fused_avx2, "avx2,fma", 8, 6, _mm256_fmadd_ps, _mm256_set1_ps, __m256, _mm256_min_ps, _mm256_max_ps)

/* ---- fused, rows of two values: sums from tables of partial sums ----
 * A row of sign flips (one-sample) or of group weights (two-sample) takes two
 * values, so its dot product with a strip of voxels is fixed by which subjects
 * take which value. Subjects go in groups of TAB_BITS; for each group and each
 * of its 2^TAB_BITS patterns the table holds the group's partial sum for the
 * strip (built once per strip, each entry summed left to right as the GEMM
 * would), and a row's sum is the sum of its groups' entries: n / TAB_BITS
 * vector loads and adds per vector of voxels instead of n FMAs. The tables of
 * 2 vectors x 13 groups (50 subjects) take 26 KB with AVX-512: they stay in L1;
 * more groups go in passes of 13 over the rows, each row's sum so far kept
 * between them (added first, so the sum has the same terms in the same order).
 * The sums differ from the GEMM's by round-off only (each term goes through
 * fewer additions), which the tie window covers, so the counts are the same. */

/* Whether every entry of R (rows x n) has the bits of one of two values; the
 * value of the first entry is `one` (a set bit of a pattern), the other `zero`
 * (the same as `one` when all entries are equal). */
static bool two_valued(const float *R, int64_t rows, int64_t n, float *one, float *zero)
{
    uint32_t a, b = 0, x;
    bool have_b = false;
    memcpy(&a, R, sizeof a);
    for (int64_t i = 0; i < rows * n; i++) {
        memcpy(&x, R + i, sizeof x);
        if (x == a || (have_b && x == b))
            continue;
        if (have_b)
            return false;
        b = x;
        have_b = true;
    }
    memcpy(one, &a, sizeof a);
    memcpy(zero, have_b ? &b : &a, sizeof a);
    return true;
}

/* Where each row's entry of each group lies in a strip's tables:
 * off[i * groups + g] in units of 8 bytes (one addressing mode away from the
 * table's start), for the pattern whose bit k is set where subject
 * g * TAB_BITS + k takes the value `one`; strip: floats per table entry. */
static void row_patterns(const float *R, int64_t rows, int64_t n, float one, int64_t strip, uint16_t *off)
{
    const int64_t groups = tab_groups(n);
    uint32_t a, x;
    memcpy(&a, &one, sizeof a);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t g = 0; g < groups; g++) {
            int64_t p = 0;
            for (int64_t k = 0, j = g * TAB_BITS; k < TAB_BITS && j < n; k++, j++) {
                memcpy(&x, R + i * n + j, sizeof x);
                p |= (int64_t)(x == a) << k;
            }
            off[i * groups + g] = (uint16_t)((g * TAB_PATTERNS + p) * strip / 2);
        }
}

/* One instantiation: W floats per vector, strips of 2 vectors, TAB_ROWS rows
 * at a time, for a target. Processes rows [0, rows - rows % TAB_ROWS) and
 * voxels [0, nv - nv % 2W) of the tile, with vmax as DEFINE_FUSED's. table:
 * groups x TAB_PATTERNS x 2W floats. */
#define DEFINE_TABLES(NAME, TARGET, W_, MT, MIN, MAX)                                                        \
    typedef float NAME##_vf __attribute__((vector_size(4 * (W_))));                                          \
    typedef int32_t NAME##_vi __attribute__((vector_size(4 * (W_))));                                        \
    DEFINE_MINMAX(NAME, TARGET, MT, MIN, MAX)                                                                \
    static inline __attribute__((always_inline, target(TARGET))) void NAME##_body(                           \
        const struct nf_perm_tile *c, const float *R, int64_t rows, int64_t v0, int64_t nv, uint32_t *cnt,      \
        float *vmax, const uint16_t *off, float one, float zero, float *table, float *partial,             \
        const bool t_stat,                                                                                   \
        const int tail)                                                                                      \
    {                                                                                                        \
        typedef NAME##_vf VF;                                                                                \
        typedef NAME##_vi VI;                                                                                \
        enum { W = W_, STRIP = 2 * W_ };                                                                     \
        const int64_t n = c->n, ldd = c->V, groups = tab_groups(n);                                          \
        const VF va = (VF){ 0 } + c->a, vc = (VF){ 0 } + c->c, vone = (VF){ 0 } + one,                      \
                 vzero = (VF){ 0 } + zero;                                                                   \
        const VI absmask = (VI){ 0 } + 0x7fffffff;                                                           \
        for (int64_t v = 0; v + STRIP <= nv; v += STRIP) {                                                   \
            const float *shift = c->shift + v0 + v, *capv = c->cap + v0 + v, *hiv = c->hi + v0 + v,          \
                        *lov = c->lo + v0 + v, *ssv = c->ss + v0 + v, *flv = c->floor_ + v0 + v;             \
            const float *Dv = c->D + v0 + v;                                                                 \
            VI cnt0, cnt1;                                                                                   \
            memcpy(&cnt0, cnt + v, sizeof cnt0);                                                             \
            memcpy(&cnt1, cnt + v + W, sizeof cnt1);                                                         \
            /* the strip's constants in registers for all its rows */                                      \
            VF sh0, sh1, cap0, cap1, hi0, hi1, lo0, lo1, ss0 = { 0 }, ss1 = { 0 }, fl0 = { 0 }, fl1 = { 0 };  \
            memcpy(&sh0, shift, sizeof sh0);                                                                 \
            memcpy(&sh1, shift + W, sizeof sh1);                                                             \
            memcpy(&cap0, capv, sizeof cap0);                                                                \
            memcpy(&cap1, capv + W, sizeof cap1);                                                            \
            memcpy(&hi0, hiv, sizeof hi0);                                                                   \
            memcpy(&hi1, hiv + W, sizeof hi1);                                                               \
            memcpy(&lo0, lov, sizeof lo0);                                                                   \
            memcpy(&lo1, lov + W, sizeof lo1);                                                               \
            if (t_stat) {                                                                                    \
                memcpy(&ss0, ssv, sizeof ss0);                                                               \
                memcpy(&ss1, ssv + W, sizeof ss1);                                                           \
                memcpy(&fl0, flv, sizeof fl0);                                                               \
                memcpy(&fl1, flv + W, sizeof fl1);                                                           \
            }                                                                                                \
            /* passes over groups whose tables fit in L1, the rows' sums so far kept in partial */      \
            for (int64_t g0 = 0; g0 < groups; g0 += TAB_PASS_GROUPS(STRIP)) {                                \
                const int64_t g1 = g0 + TAB_PASS_GROUPS(STRIP) < groups ? g0 + TAB_PASS_GROUPS(STRIP) : groups; \
                const int64_t base = g0 * TAB_PATTERNS * STRIP;                                              \
                const bool last = g1 == groups;                                                              \
                /* this pass's tables, each group's patterns built a subject at a time */                   \
                for (int64_t g = g0; g < g1; g++) {                                                          \
                    float *T = table + (g - g0) * TAB_PATTERNS * STRIP;                                      \
                    memset(T, 0, sizeof(float) * STRIP);                                                     \
                    for (int64_t k = 0, j = g * TAB_BITS; k < TAB_BITS && j < n; k++, j++) {                 \
                        VF d0, d1;                                                                           \
                        memcpy(&d0, Dv + j * ldd, sizeof d0);                                                \
                        memcpy(&d1, Dv + j * ldd + W, sizeof d1);                                            \
                        for (int64_t p = 0; p < ((int64_t)1 << k); p++) {                                    \
                            VF t0, t1, s0, s1;                                                               \
                            memcpy(&t0, T + p * STRIP, sizeof t0);                                           \
                            memcpy(&t1, T + p * STRIP + W, sizeof t1);                                       \
                            s0 = t0 + vone * d0;                                                             \
                            s1 = t1 + vone * d1;                                                             \
                            memcpy(T + (p | ((int64_t)1 << k)) * STRIP, &s0, sizeof s0);                     \
                            memcpy(T + (p | ((int64_t)1 << k)) * STRIP + W, &s1, sizeof s1);                 \
                            t0 = t0 + vzero * d0;                                                            \
                            t1 = t1 + vzero * d1;                                                            \
                            memcpy(T + p * STRIP, &t0, sizeof t0);                                           \
                            memcpy(T + p * STRIP + W, &t1, sizeof t1);                                       \
                        }                                                                                    \
                    }                                                                                        \
                }                                                                                            \
                for (int64_t r = 0; r < rows; r += TAB_ROWS) {                                               \
                    /* the last block may hold fewer rows: the others repeat its last one, unused */           \
                    const int64_t nvalid = rows - r < TAB_ROWS ? rows - r : TAB_ROWS;                        \
                    VF acc0[TAB_ROWS], acc1[TAB_ROWS];                                                       \
                    const uint16_t *ixr[TAB_ROWS];                                                           \
                    for (int i = 0; i < TAB_ROWS; i++)                                                       \
                        ixr[i] = off + (r + (i < nvalid ? i : nvalid - 1)) * groups;                         \
                    _Pragma("GCC unroll 4") for (int i = 0; i < TAB_ROWS; i++) {                             \
                        const float *T = table + (2 * (int64_t)ixr[i][g0] - base);                           \
                        memcpy(&acc0[i], T, sizeof acc0[i]);                                                 \
                        memcpy(&acc1[i], T + W, sizeof acc1[i]);                                             \
                        if (g0 > 0 && i < nvalid) { /* the earlier passes' sum first: the terms in one pass's order */ \
                            VF p0, p1;                                                                       \
                            memcpy(&p0, partial + (r + i) * STRIP, sizeof p0);                               \
                            memcpy(&p1, partial + (r + i) * STRIP + W, sizeof p1);                           \
                            acc0[i] = p0 + acc0[i];                                                          \
                            acc1[i] = p1 + acc1[i];                                                          \
                        }                                                                                    \
                    }                                                                                        \
                    for (int64_t g = g0 + 1; g < g1; g++) {                                                  \
                        _Pragma("GCC unroll 4") for (int i = 0; i < TAB_ROWS; i++) {                         \
                            const float *T = table + (2 * (int64_t)ixr[i][g] - base);                        \
                            VF t0, t1;                                                                       \
                            memcpy(&t0, T, sizeof t0);                                                       \
                            memcpy(&t1, T + W, sizeof t1);                                                   \
                            acc0[i] += t0;                                                                   \
                            acc1[i] += t1;                                                                   \
                        }                                                                                    \
                    }                                                                                        \
                    if (!last) {                                                                             \
                        for (int i = 0; i < nvalid; i++) {                                                   \
                            memcpy(partial + (r + i) * STRIP, &acc0[i], sizeof acc0[i]);                     \
                            memcpy(partial + (r + i) * STRIP + W, &acc1[i], sizeof acc1[i]);                 \
                        }                                                                                    \
                        continue;                                                                            \
                    }                                                                                        \
                    VI nearv = (VI){ 0 };                                                                    \
                    _Pragma("GCC unroll 4") for (int i = 0; i < TAB_ROWS; i++) {                             \
                        if (i >= nvalid)                                                                     \
                            break;                                                                           \
                        VF q0, q1;                                                                           \
                        EPILOGUE_ON(NAME, VF, VI, acc0[i], sh0, cap0, hi0, lo0, ss0, fl0, cnt0, q0);               \
                        EPILOGUE_ON(NAME, VF, VI, acc1[i], sh1, cap1, hi1, lo1, ss1, fl1, cnt1, q1);               \
                        acc0[i] = q0;                                                                        \
                        acc1[i] = q1;                                                                        \
                        STRIP_ROW_MAX(NAME, VF, q0, q1, vmax + (r + i) * W);                                   \
                    }                                                                                        \
                    STRIP_NEAR_TIES(VF, R + r * n, nvalid, TAB_ROWS);                                        \
                }                                                                                            \
            }                                                                                                \
            memcpy(cnt + v, &cnt0, sizeof cnt0);                                                             \
            memcpy(cnt + v + W, &cnt1, sizeof cnt1);                                                         \
        }                                                                                                    \
    }                                                                                                        \
    static __attribute__((target(TARGET), noinline)) void NAME(                                              \
        const struct nf_perm_tile *c, const float *R, int64_t rows, int64_t v0, int64_t nv, uint32_t *cnt,      \
        float *vmax, const uint16_t *idx, float one, float zero, float *table, float *partial)               \
    {                                                                                                        \
        if (c->t_stat) {                                                                                     \
            if (c->tail == NF_TAIL_TWO)                                                                      \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, idx, one, zero, table, partial, true, NF_TAIL_TWO);        \
            else if (c->tail == NF_TAIL_UPPER)                                                               \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, idx, one, zero, table, partial, true, NF_TAIL_UPPER);      \
            else                                                                                             \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, idx, one, zero, table, partial, true, NF_TAIL_LOWER);      \
        } else {                                                                                             \
            if (c->tail == NF_TAIL_TWO)                                                                      \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, idx, one, zero, table, partial, false, NF_TAIL_TWO);       \
            else if (c->tail == NF_TAIL_UPPER)                                                               \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, idx, one, zero, table, partial, false, NF_TAIL_UPPER);     \
            else                                                                                             \
                NAME##_body(c, R, rows, v0, nv, cnt, vmax, idx, one, zero, table, partial, false, NF_TAIL_LOWER);     \
        }                                                                                                    \
    }

DEFINE_TABLES(tables_avx512, "avx512f,avx2,fma", 16, __m512, _mm512_min_ps, _mm512_max_ps)
DEFINE_TABLES(tables_avx2, "avx2,fma", 8, __m256, _mm256_min_ps, _mm256_max_ps)

static const struct {
    int w, rows;
    void (*fn)(const struct nf_perm_tile *, const float *, int64_t, int64_t, int64_t, uint32_t *, float *);
    void (*tables)(const struct nf_perm_tile *, const float *, int64_t, int64_t, int64_t, uint32_t *, float *,
                   const uint16_t *, float, float, float *, float *);
} fused_impl[] = {
    [NF_PERM_TILE_AVX2] = { 8, 6, fused_avx2, tables_avx2 },
    [NF_PERM_TILE_AVX512] = { 16, 8, fused_avx512, tables_avx512 },
};
#endif

enum nf_perm_tile_impl nf_perm_tile_best(void)
{
#ifdef NF_PERM_FUSED
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return NF_PERM_TILE_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return NF_PERM_TILE_AVX2;
#endif
    return NF_PERM_TILE_GEMM;
}

bool nf_perm_tile_available(enum nf_perm_tile_impl impl)
{
    if (impl == NF_PERM_TILE_GEMM)
        return true;
    enum nf_perm_tile_impl best = nf_perm_tile_best();
    return best != NF_PERM_TILE_GEMM && impl <= best;
}

static _Atomic int forced_impl = -1;

void nf_perm_tile_force(int impl)
{
    forced_impl = impl;
}

enum nf_perm_tile_impl nf_perm_tile_choose(void)
{
    int f = forced_impl;
    /* NLFLOW_PERM_TILE=reference (or gemm)|avx2|avx512: for comparing them (benchmarks) */
    const char *env = nf_switches()->perm_tile;
    if (f < 0 && env)
        f = strcmp(env, "reference") == 0 ? NF_PERM_TILE_GEMM
          : strcmp(env, "gemm") == 0      ? NF_PERM_TILE_GEMM
          : strcmp(env, "avx2") == 0      ? NF_PERM_TILE_AVX2
          : strcmp(env, "avx512") == 0    ? NF_PERM_TILE_AVX512
                                          : -1;
    return f >= 0 && nf_perm_tile_available((enum nf_perm_tile_impl)f) ? (enum nf_perm_tile_impl)f
                                                                        : nf_perm_tile_best();
}

static _Atomic int64_t table_calls;

int64_t nf_perm_tile_table_calls(void)
{
    return table_calls;
}

bool nf_perm_tile_tables(void)
{
    return nf_switches()->perm_tables;
}

/* Scratch: the header nf_perm_tile_prepare_simd leaves, where the rows'
 * patterns lie in the tables (2 bytes per row and group, kept over the
 * tiles), then what one tile needs: the gemm implementation's block, or the
 * fused implementations' row maxima (rows + 16 vectors of 16), a pass's
 * tables (groups x patterns x 32 floats at most) and the rows' partial sums
 * between passes (32 floats per row). */
static int64_t pattern_floats(int64_t rows, int64_t n)
{
    int64_t groups = tab_groups(n > 0 ? n : 1);
    return groups <= TAB_MAX_GROUPS ? (rows * groups + 1) / 2 : 0;
}

size_t nf_perm_tile_scratch(int64_t rows, int64_t n, int64_t max_voxels)
{
    size_t ref = (size_t)NF_PERM_TILE_SUB_ROWS * (size_t)max_voxels, fused = (size_t)(rows + 16) * 16 + 16;
    if (pattern_floats(rows, n))   /* a pass's tables, then the rows' partial sums */
        fused += (size_t)(TAB_PASS_GROUPS(32) * TAB_PATTERNS * 32) + (size_t)rows * 32;
    return TAB_HEADER_FLOATS + (size_t)pattern_floats(rows, n) + (ref > fused ? ref : fused);
}

void nf_perm_tile_prepare_simd(const struct nf_perm_tile *c, const float *R, int64_t rows, float *scratch)
{
    struct tab_header h = { .magic = 0 };
#ifdef NF_PERM_FUSED
    /* not on the row count: every chunk of a run, whatever its size, takes the same path */
    if (c->impl != NF_PERM_TILE_GEMM && c->tables && c->n >= TAB_BITS && tab_groups(c->n) <= TAB_MAX_GROUPS &&
        rows >= 1 && two_valued(R, rows, c->n, &h.one, &h.zero)) {
        h = (struct tab_header){ .magic = TAB_MAGIC, .one = h.one, .zero = h.zero, .rows = rows, .n = c->n,
                                 .impl = c->impl, .R = R };
        row_patterns(R, rows, c->n, h.one, 2 * fused_impl[c->impl].w, (uint16_t *)(scratch + TAB_HEADER_FLOATS));
    }
#else
    (void)c;
    (void)R;
    (void)rows;
#endif
    memcpy(scratch, &h, sizeof h);
}

void nf_perm_tile_simd(const struct nf_perm_tile *c, const float *R, int64_t rows, int64_t v0, int64_t nv,
                       uint32_t *cnt, float *rowmax, float *scratch)
{
    const enum nf_perm_tile_impl impl = c->impl;
    struct tab_header h;
    memcpy(&h, scratch, sizeof h);
    /* the rows' patterns, when prepared for these rows; then the tile's own */
    const uint16_t *idx = (const uint16_t *)(scratch + TAB_HEADER_FLOATS);
    scratch += TAB_HEADER_FLOATS + pattern_floats(rows, c->n);
#ifdef NF_PERM_FUSED
    bool tables = h.magic == TAB_MAGIC && h.R == R && h.rows == rows && h.n == c->n && h.impl == impl &&
                  nv >= 2 * fused_impl[impl].w;
    if (tables || (impl != NF_PERM_TILE_GEMM && nv >= 2 * fused_impl[impl].w && rows >= fused_impl[impl].rows)) {
        int64_t W = fused_impl[impl].w, nvf = nv - nv % (2 * W);
        /* the tables take every row: a row's value must not depend on the block it falls in (chunks) */
        int64_t nr = tables ? rows : rows - rows % fused_impl[impl].rows;
        for (int64_t i = 0; i < nr * W; i++)
            scratch[i] = -FLT_MAX;
        if (tables) {
            atomic_fetch_add_explicit(&table_calls, 1, memory_order_relaxed);
            float *table = scratch + (rows + 16) * 16;   /* after the maxima */
            float *partial = table + TAB_PASS_GROUPS(32) * TAB_PATTERNS * 32;
            fused_impl[impl].tables(c, R, nr, v0, nvf, cnt, scratch, idx, h.one, h.zero, table, partial);
        } else {
            fused_impl[impl].fn(c, R, nr, v0, nvf, cnt, scratch);
        }
        for (int64_t i = 0; i < nr; i++) {
            float m = -FLT_MAX;
            for (int64_t l = 0; l < W; l++)
                m = scratch[i * W + l] > m ? scratch[i * W + l] : m;
            rowmax[i] = m;
        }
        /* the voxels beyond the last full strip (these rows), then the rows
         * beyond the last full block (every voxel), by the gemm implementation */
        if (nvf < nv) {
            float *mx = scratch;                      /* nr floats; vmax is spent */
            float C[NF_PERM_TILE_SUB_ROWS * 32];           /* at most 2W - 1 = 31 voxels */
            tile_gemm(c, R, nr, v0 + nvf, nv - nvf, cnt + nvf, mx, C);
            for (int64_t i = 0; i < nr; i++)
                rowmax[i] = mx[i] > rowmax[i] ? mx[i] : rowmax[i];
        }
        if (nr < rows)
            tile_gemm(c, R + nr * c->n, rows - nr, v0, nv, cnt, rowmax + nr, scratch);
        return;
    }
#else
    (void)impl;
#endif
    tile_gemm(c, R, rows, v0, nv, cnt, rowmax, scratch);
}
