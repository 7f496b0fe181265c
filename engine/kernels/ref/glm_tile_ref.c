/* glm_tile_ref.c — the glm permutation test's fused tile (glm_tile in
 * kernels.h) as a plain loop: each permutation row's value at each voxel
 * summed by fmaf in k order, then nf_glm_epilogue_ref on that one voxel's
 * rows. The oracle of tests/unit/test_kernels.c for kernels/simd/glm_tile.c,
 * which must give the same bits, the entry of nf_kernels_ref, and the vector
 * version's tails (voxels past its last strip). Also glm_tile_i8's plain
 * version and its helpers: rows and columns in bytes, their norms and the
 * bound of a byte sum's distance from the float one.
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

/* ---- the byte variant (glm_tile_i8) ----
 * Its counts, near list and running maximum are glm_tile's exactly; the plain
 * version computes every value as glm_tile does, so its upper bound of each
 * block's maximum is that maximum. The byte operands (b) go unused here. */
void nf_glm_tile_i8_ref(const struct nf_glm_epi *e, const struct nf_glm_i8 *b, const float *R, const float *E,
                        int64_t n, int64_t lde, float *ub_max, float *run_max, uint32_t *count, int32_t *near,
                        int *n_near)
{
    (void)b;
    nf_glm_tile_ref(e, R, E, n, lde, NULL, ub_max, count, near, n_near);
    for (int64_t i = 0; i < e->np; i++)
        run_max[i] = ub_max[i] > run_max[i] ? ub_max[i] : run_max[i];
}

float nf_i8_step(const float *x, int64_t n)
{
    float s;
    nf_i8_column_steps(x, n, 1, 1, &s);
    return s;
}

void nf_i8_column_steps(const float *X, int64_t rows, int64_t cols, int64_t ld, float *step)
{
    for (int64_t c = 0; c < cols; c++)
        step[c] = 0.0f;
    for (int64_t j = 0; j < rows; j++)   /* row by row: X's rows are long */
        for (int64_t c = 0; c < cols; c++)
            step[c] = fabsf(X[j * ld + c]) > step[c] ? fabsf(X[j * ld + c]) : step[c];
    for (int64_t c = 0; c < cols; c++)
        step[c] /= 127.0f;
}

/* x times inv (1 / the step) to the nearest integer within +-127 (0 for a
 * zero step): 1.5 x 2^23 added and taken away rounds to an integer, ties to
 * even, for |x inv| < 2^22 (here at most 127 and a few ulps), without a libm
 * call. Any rounding would do: the bounds use the bytes it gives
 * (nf_i8_norms), not an assumed error. */
static inline int byte_of(float x, float inv)
{
    volatile float big = 0x1.8p23f;   /* volatile: not folded away under any flags */
    float b = (x * inv + big) - big;
    return b > 127.0f ? 127 : b < -127.0f ? -127 : (int)b;
}

static inline float inverse_of(float step)
{
    return step > 0.0f ? 1.0f / step : 0.0f;
}

/* nf_i8_norms's sums of squares, one value x and its byte y by step at a time:
 * of x, of x - step y and of step y (exact in double) */
static inline void add_norms(double acc[3], float x, int y, float step)
{
    double v = x, t = (double)step * y;
    acc[0] += v * v, acc[1] += (v - t) * (v - t), acc[2] += t * t;
}

void nf_i8_quads(const float *X, int64_t rows, int64_t cols, int64_t ld, const float *step, uint32_t *out,
                 int64_t ldo, int32_t *off, double *norms)
{
    enum { BLOCK = 256 };   /* columns at a time, row by row */
    float inv[BLOCK];
    int32_t sum[BLOCK];
    double acc[BLOCK][3];
    for (int64_t c0 = 0; c0 < cols; c0 += BLOCK) {
        const int64_t nc = cols - c0 < BLOCK ? cols - c0 : BLOCK;
        for (int64_t c = 0; c < nc; c++)
            inv[c] = inverse_of(step[c0 + c]), sum[c] = 0, acc[c][0] = acc[c][1] = acc[c][2] = 0;
        for (int64_t j = 0; j < rows; j += 4) {
            uint32_t *o = out + (j / 4) * ldo + c0;
            for (int64_t c = 0; c < nc; c++)
                o[c] = 0;
            for (int64_t b = 0; b < 4 && j + b < rows; b++) {
                const float *x = X + (j + b) * ld + c0;
                for (int64_t c = 0; c < nc; c++) {
                    int y = byte_of(x[c], inv[c]);
                    sum[c] += y;
                    o[c] |= (uint32_t)(uint8_t)(int8_t)y << (8 * b);
                    if (norms)
                        add_norms(acc[c], x[c], y, step[c0 + c]);
                }
            }
        }
        for (int64_t c = 0; c < nc; c++) {
            if (off)
                off[c0 + c] = -128 * sum[c];
            for (int j = 0; norms && j < 3; j++)
                norms[3 * (c0 + c) + j] = sqrt(acc[c][j]);
        }
    }
}

void nf_u8_quads(const float *row, int64_t n, float step, uint32_t *out)
{
    const float inv = inverse_of(step);
    for (int64_t j = 0; j < n; j += 4) {
        uint32_t w = 0;
        for (int64_t b = 0; b < 4; b++)
            w |= (uint32_t)(j + b < n ? byte_of(row[j + b], inv) + 128 : 128) << (8 * b);
        out[j / 4] = w;
    }
}

void nf_i8_norms(const float *x, int64_t n, float step, double norm[3])
{
    const float inv = inverse_of(step);
    double acc[3] = { 0, 0, 0 };
    for (int64_t k = 0; k < n; k++)
        add_norms(acc, x[k], byte_of(x[k], inv), step);
    for (int j = 0; j < 3; j++)
        norm[j] = sqrt(acc[j]);
}

float nf_glm_i8_bound(int64_t n, const double row[3], const double col[3])
{
    /* |q'e - q~'e~| <= |q| |e - e~| + |q - q~| |e~|; the float path's sum is
     * off from q'e by (n + 2) u |q| |e| at most (fmaf in k order); ours is
     * the exact integer sum (n <= NF_GLM_I8_MAX_N: exact in float too) times
     * fl(sv sq), two roundings of u; an underflowing step or product, 2^-149
     * per unit of the byte sum (127² n) and once more. The norms themselves
     * were summed in double: 1.001 covers their round-off many times over. */
    const double u = 0x1p-24;
    double d = row[0] * col[1] + row[1] * col[2] + (double)(n + 2) * u * 1.01 * row[0] * col[0] +
               2.0 * u * 1.01 * row[2] * col[2];
    d = d * 1.001 + (127.0 * 127.0 * (double)n + 2.0) * 0x1p-149;
    return nextafterf((float)d, INFINITY);
}

float nf_glm_i8_roundoff(int64_t n, int64_t r, double row_norm, double colsq, double dg, double ss)
{
    double g = row_norm * sqrt(colsq > 0 ? colsq : 0) * (1.0 + (double)(n + 1) * 0x1p-24 * 1.01) + dg;
    double big = (ss > 0 ? ss : 0) + (double)r * g * g;
    return nextafterf((float)(8.0 * (double)r * 0x1p-24 * big * 1.001), INFINITY);
}
