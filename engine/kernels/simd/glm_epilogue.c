/* glm_epilogue.c — the glm permutation test's epilogue (struct nf_glm_epi in
 * kernels.h), vectorised: it runs once per permutation over every voxel, so
 * at 5,000 permutations x 230,000 voxels it is the largest work of the test
 * after the GEMM. t contrasts of up to 4 rows take one pass of 8-wide float
 * vectors with the row count a constant (the rows unrolled); each lane does
 * the plain loop's operations of kernels/ref/glm_epilogue_ref.c in its order
 * (a select for each ?:, the sign bit cleared for fabsf; no contraction in
 * C11 mode), so the same bits. That loop does the tail and the other cases
 * (F contrasts, many rows: rare, and row by row in any case). Near values
 * (inside their window) are rare: a lane mask is gathered over 64 voxels and
 * only then are those voxels listed, in order. Compiled for AVX-512 / AVX2 /
 * the baseline and chosen at load time.
 */
#include <float.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

typedef float epi_v8f __attribute__((vector_size(32)));
typedef int32_t epi_v8i __attribute__((vector_size(32)));
/* mask ? a : b for vectors (a mask is all ones or zeros per lane) */
#define EPI_SELECT(mask, a, b) ((epi_v8f)(((epi_v8i)(a) & (mask)) | ((epi_v8i)(b) & ~(mask))))

/* The vector body for R rows, then the plain loop over the tail. */
static inline __attribute__((always_inline)) float epi_body(const struct nf_glm_epi *e, float *q, uint32_t *count,
                                                           int32_t *near, int *n_near, const int R, const bool counting)
{
    const float *G = e->G, *ss = e->ss, *fl = e->fl, *cap = e->cap, *lo = e->lo, *hi = e->hi;
    const int64_t ld = e->ld, nv = e->nv;
    const epi_v8f vsg = { e->sg, e->sg, e->sg, e->sg, e->sg, e->sg, e->sg, e->sg };
    const epi_v8i absmask = { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX };
    epi_v8f vmax = { -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX };
    epi_v8i vnear = { 0 };
    int64_t v = 0;
    int listed = 0;
    for (int64_t run_from = 0; v + 8 <= nv; v += 8) {
        epi_v8f g0, gm, rss, vss, vfl, vcap, x;
        memcpy(&g0, G + v, sizeof g0);
        memcpy(&vss, ss + v, sizeof vss);
        memcpy(&vfl, fl + v, sizeof vfl);
        memcpy(&vcap, cap + v, sizeof vcap);
        rss = vss - g0 * g0;
        for (int m = 1; m < R; m++) {
            memcpy(&gm, G + m * ld + v, sizeof gm);
            rss -= gm * gm;
        }
        rss = EPI_SELECT(rss > vfl, rss, vfl);
        epi_v8f ag = (epi_v8f)((epi_v8i)g0 & absmask);
        x = (e->two ? g0 * g0 : vsg * g0 * ag) / rss;
        x = EPI_SELECT(x < vcap, x, vcap);
        memcpy(q + v, &x, sizeof x);
        vmax = EPI_SELECT(x > vmax, x, vmax);
        if (counting) {
            epi_v8f vlo, vhi;
            epi_v8i cnt;
            memcpy(&vlo, lo + v, sizeof vlo);
            memcpy(&vhi, hi + v, sizeof vhi);
            memcpy(&cnt, count + v, sizeof cnt);
            cnt -= (epi_v8i)(x >= vhi);
            memcpy(count + v, &cnt, sizeof cnt);
            vnear |= (epi_v8i)(x >= vlo) & (epi_v8i)(x < vhi);
            /* every 64 voxels (and at the end): the rare values inside their window, listed */
            if ((v + 8) % 64 == 0 || v + 16 > nv) {
                int any = 0;
                for (int j = 0; j < 8; j++)
                    any |= vnear[j];
                for (int64_t u = run_from; any && u < v + 8; u++)
                    if (q[u] >= lo[u] && q[u] < hi[u])
                        near[listed++] = (int32_t)u;
                vnear = (epi_v8i){ 0 };
                run_from = v + 8;
            }
        }
    }
    float mx = -FLT_MAX;
    for (int j = 0; j < 8; j++)
        mx = vmax[j] > mx ? vmax[j] : mx;
    if (v < nv) {
        struct nf_glm_epi tail = *e;
        tail.G += v, tail.ss += v, tail.fl += v, tail.cap += v, tail.lo += v, tail.hi += v;
        tail.nv = nv - v;
        int n_tail = 0;
        float t = nf_glm_epilogue_ref(&tail, q + v, counting ? count + v : NULL, counting ? near + listed : NULL,
                                      &n_tail);
        for (int j = 0; j < n_tail; j++)
            near[listed + j] += (int32_t)v;
        listed += n_tail;
        mx = t > mx ? t : mx;
    }
    if (counting)
        *n_near = listed;
    return mx;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
float nf_glm_epilogue_simd(const struct nf_glm_epi *e, float *q, uint32_t *count, int32_t *near, int *n_near)
{
    const bool counting = count != NULL;
    switch (e->is_f || e->r > 4 ? 0 : (int)e->r) {
    case 1: return counting ? epi_body(e, q, count, near, n_near, 1, true) : epi_body(e, q, NULL, NULL, NULL, 1, false);
    case 2: return counting ? epi_body(e, q, count, near, n_near, 2, true) : epi_body(e, q, NULL, NULL, NULL, 2, false);
    case 3: return counting ? epi_body(e, q, count, near, n_near, 3, true) : epi_body(e, q, NULL, NULL, NULL, 3, false);
    case 4: return counting ? epi_body(e, q, count, near, n_near, 4, true) : epi_body(e, q, NULL, NULL, NULL, 4, false);
    default: return nf_glm_epilogue_ref(e, q, count, near, n_near);
    }
}
