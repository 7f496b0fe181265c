/* glm_tile_ref.c — the glm permutation test's fused tile (glm_tile in
 * kernels.h) as a plain loop: each permutation row's value at each voxel
 * summed by fmaf in k order, then nf_glm_epilogue_ref on that one voxel's
 * rows. The oracle of tests/unit/test_kernels.c for kernels/simd/glm_tile.c,
 * which must give the same bits, the entry of nf_kernels_ref, and the vector
 * version's tails (voxels past its last strip, permutations past its last
 * register tile).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

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
