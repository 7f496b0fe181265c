/* glm_tile_ref.c — the glm permutation test's fused tile (glm_tile in
 * kernels.h) as a plain loop: each permutation row's value at each voxel
 * summed by fmaf in k order, then nf_glm_epilogue_ref on that one voxel's
 * rows. The oracle of tests/unit/test_kernels.c for kernels/simd/glm_tile.c,
 * which must give the same bits, the entry of nf_kernels_ref, and the vector
 * version's tails (voxels past its last strip). Also glm_tile_bf16's plain
 * version and its helpers: bfloat16 pairs of rows and the bound of a bf16
 * sum's distance from the float one.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

void nf_glm_tile_ref(const struct nf_glm_epi *e, const float *R, const float *E, int64_t n, int64_t lde, float *q,
                     float *mx, uint32_t *count, int32_t *near, int *n_near)
{
    const int64_t r = e->r, nv = e->nv;
    float G[NF_GLM_TILE_MAX_ROWS];
    if (count)
        *n_near = 0;
    for (int64_t i = 0; i < e->np; i++) {
        float top = -FLT_MAX;
        for (int64_t v = 0; v < nv; v++) {
            for (int64_t m = 0; m < r; m++) {
                const float *row = R + (i * r + m) * n;
                float acc = 0.0f;
                for (int64_t k = 0; k < n; k++)
                    acc = fmaf(row[k], E[k * lde + v], acc);
                G[m] = acc;
            }
            /* this voxel's rows as a block of one: G's row m at G + m */
            struct nf_glm_epi one = *e;
            one.G = G, one.ld = 1, one.pld = r, one.np = 1, one.nv = 1;
            one.ss += v, one.fl += v, one.cap += v;
            if (count)   /* the windows are read only when counting (NULL otherwise, perhaps) */
                one.lo += v, one.hi += v;
            float x, m1;
            int32_t at;
            int listed = 0;
            nf_glm_epilogue_ref(&one, &x, &m1, count ? count + v : NULL, &at, &listed);
            if (count && listed)
                near[(*n_near)++] = (int32_t)(i * nv + v);
            if (q)
                q[i * nv + v] = x;
            top = x > top ? x : top;
        }
        mx[i] = top;
    }
}

/* ---- the bfloat16 variant (glm_tile_bf16) ----
 * Its counts, near list and running maximum are glm_tile's exactly; the plain
 * version computes every value as glm_tile does, so its upper bound of each
 * block's maximum is that maximum. The operands in bf16 (b) go unused here. */
void nf_glm_tile_bf16_ref(const struct nf_glm_epi *e, const struct nf_glm_bf16 *b, const float *R, const float *E,
                          int64_t n, int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near,
                          int *n_near)
{
    (void)b;
    nf_glm_tile_ref(e, R, E, n, lde, NULL, ub_max, count, near, n_near);
    for (int64_t i = 0; i < e->np; i++)
        run_max[i] = ub_max[i] > run_max[i] ? ub_max[i] : run_max[i];
}

/* x to bfloat16, to nearest with ties to even (finite x; NaN stays NaN) */
static uint32_t bf16_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u)
        return (u >> 16) | ((u & 0xffffu) ? 0x40u : 0u);
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

void nf_bf16_pairs(const float *X, int64_t rows, int64_t cols, int64_t ld, uint32_t *out, int64_t ldo)
{
    for (int64_t j = 0; j < rows; j += 2)
        for (int64_t c = 0; c < cols; c++)
            out[(j / 2) * ldo + c] = bf16_of(X[j * ld + c]) | (j + 1 < rows ? bf16_of(X[(j + 1) * ld + c]) << 16 : 0u);
}

float nf_glm_bf16_bound(int64_t n, double row_norm, double ss)
{
    /* per product: both operands off by up to 2^-8 relative (bf16 keeps 8
     * significant bits); the bf16 sum's and the float sum's round-off,
     * (n + 2) 2^-24 each of the sum of |products|, which Cauchy-Schwarz
     * bounds by |row| |column|; a flushed subnormal operand or partial sum:
     * 2^-126 each */
    const double rel = 0x1p-7 + 0x1p-16 + 2.0 * (double)(n + 2) * 0x1p-24 * 1.01;
    double d = rel * row_norm * sqrt(ss > 0 ? ss : 0) * 1.001 + (double)(n + 1) * 0x1p-110;
    return nextafterf((float)d, INFINITY);
}

float nf_glm_bf16_roundoff(int64_t n, int64_t r, double row_norm, double colsq, double ss)
{
    double g = row_norm * sqrt(colsq > 0 ? colsq : 0) * (1.0 + (double)(n + 1) * 0x1p-24 * 1.01) +
               (double)nf_glm_bf16_bound(n, row_norm, colsq);
    double big = (ss > 0 ? ss : 0) + (double)r * g * g;
    return nextafterf((float)(8.0 * (double)r * 0x1p-24 * big * 1.001), INFINITY);
}
