/* perm_tile_ref.c — the permute tile kernel (struct nf_perm_tile, kernels.h)
 * written for clarity: each null value is a plain dot product of a row of R
 * and a column of D, transformed and counted one at a time. The oracle of
 * tests/unit/test_kernels.c for the vectorised versions in kernels/simd/, and
 * the entry of nf_kernels_ref.
 */
#include <float.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* The transformed statistic of GEMM value g at voxel v, in float, operation by
 * operation as the node's nf_perm_transform(). */
static float transformed(const struct nf_perm_tile *t, float g, int64_t v)
{
    float d = t->a * g - t->shift[v], ad = d < 0 ? -d : d;
    float q = t->tail == NF_TAIL_TWO ? ad : t->tail == NF_TAIL_UPPER ? d : -d;
    if (t->t_stat) {
        float den = t->ss[v] - t->c * d * d;
        den = den > t->floor_[v] ? den : t->floor_[v];
        q = q * ad / den;
    }
    return q < t->cap[v] ? q : t->cap[v];
}

void nf_perm_tile_ref(const struct nf_perm_tile *t, const float *R, int64_t rows, int64_t v0, int64_t nv,
                      uint32_t *cnt, float *rowmax, float *scratch)
{
    (void)scratch;
    for (int64_t i = 0; i < rows; i++) {
        const float *row = R + i * t->n;
        float m = -FLT_MAX;
        for (int64_t v = 0; v < nv; v++) {
            const int64_t x = v0 + v;
            float g = 0;
            for (int64_t j = 0; j < t->n; j++)
                g += row[j] * t->D[j * t->V + x];
            float q = transformed(t, g, x);
            if (q >= t->hi[x] || (q > t->lo[x] && t->tie_exceeds(t->tie_ctx, row, x)))
                cnt[v]++;
            m = q > m ? q : m;
        }
        rowmax[i] = m;
    }
}

/* The plain version has nothing to reuse over tiles. */
void nf_perm_tile_prepare_ref(const struct nf_perm_tile *t, const float *R, int64_t rows, float *scratch)
{
    (void)t;
    (void)R;
    (void)rows;
    (void)scratch;
}
