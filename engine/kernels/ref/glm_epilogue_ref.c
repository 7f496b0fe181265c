/* glm_epilogue_ref.c — the glm permutation test's epilogue (struct
 * nf_glm_epi in kernels.h) as a plain loop over the permutations and voxels:
 * the oracle of tests/unit/test_kernels.c for kernels/simd/glm_epilogue.c,
 * which must give the same bits, the entry of nf_kernels_ref, and the vector
 * version's tails and its case of F contrasts and many rows.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "kernels/kernels.h"

void nf_glm_epilogue_ref(const struct nf_glm_epi *e, float *q, float *mx, uint32_t *count, int32_t *near, int *n_near)
{
    const int64_t ld = e->ld, nv = e->nv;
    if (count)
        *n_near = 0;
    for (int64_t i = 0; i < e->np; i++) {
        const float *G = e->G + i * e->pld;
        float *qi = q + i * nv, top = -FLT_MAX;
        for (int64_t v = 0; v < nv; v++) {
            float num, rss;
            int64_t m;
            if (e->is_f) {
                num = G[v] * G[v];
                for (m = 1; m < e->s; m++)
                    num += G[m * ld + v] * G[m * ld + v];
                rss = e->ss[v] - num;
            } else {
                const float g0 = G[v];
                num = e->two ? g0 * g0 : e->sg * g0 * fabsf(g0);
                rss = e->ss[v] - g0 * g0;
                m = 1;
            }
            for (; m < e->r; m++)
                rss -= G[m * ld + v] * G[m * ld + v];
            rss = rss > e->fl[v] ? rss : e->fl[v];
            float x = num / rss;
            x = x < e->cap[v] ? x : e->cap[v];
            qi[v] = x;
            top = x > top ? x : top;
            if (count) {
                count[v] += x >= e->hi[v];
                if (x >= e->lo[v] && x < e->hi[v])
                    near[(*n_near)++] = (int32_t)(i * nv + v);
            }
        }
        mx[i] = top;
    }
}
