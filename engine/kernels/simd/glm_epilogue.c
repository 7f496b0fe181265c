/* glm_epilogue.c — the glm permutation test's epilogue (struct nf_glm_epi in
 * kernels.h), vectorised: it runs once per permutation over every voxel, so
 * at 5,000 permutations x 230,000 voxels it is the largest work of the test
 * after the GEMM. t contrasts of up to 4 rows take one pass of 8-wide float
 * vectors with the row count a constant (the rows unrolled), 2 permutations
 * at a time, so that each voxel's constants and count are loaded and the
 * count stored once for both (about 15% less time than one at a time on a
 * Zen 4; 4 at a time are no faster, spilling the 16 vector registers). Each
 * lane does the plain loop's operations of kernels/ref/glm_epilogue_ref.c in
 * its order (a select for each ?:, the sign bit cleared for fabsf; no
 * contraction in C11 mode), so the same bits. That
 * loop does the tails and the other cases (F contrasts, many rows: rare, and
 * row by row in any case). Near values (inside their window) are rare: a
 * lane mask is gathered over 64 voxels and only then are those voxels
 * listed. Compiled for AVX-512 / AVX2 / the baseline and chosen at load time.
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

enum { EPI_PERMS = 2 };

/* Permutations i0 .. i0 + P of R rows (P and R constants where inlined) over
 * the block's whole vectors, then the plain loop over the tail of each. */
static inline __attribute__((always_inline)) void epi_body(const struct nf_glm_epi *e, int64_t i0, float *q,
                                                          float *mx, uint32_t *count, int32_t *near, int *listed,
                                                          const int P, const int R, const bool counting)
{
    const float *ss = e->ss, *fl = e->fl, *cap = e->cap, *lo = e->lo, *hi = e->hi;
    const int64_t ld = e->ld, nv = e->nv;
    const bool two = e->two;   /* a local: the stores through q could alias *e */
    const float *G[EPI_PERMS];
    float *qp[EPI_PERMS];
    const epi_v8f vsg = { e->sg, e->sg, e->sg, e->sg, e->sg, e->sg, e->sg, e->sg };
    const epi_v8i absmask = { INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX };
    epi_v8f vmax[EPI_PERMS];
    epi_v8i vnear[EPI_PERMS];
    /* every loop over p unrolled, so that these arrays live in registers */
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        G[p] = e->G + (i0 + p) * e->pld;
        qp[p] = q + (i0 + p) * nv;
        vmax[p] = (epi_v8f){ -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX };
        vnear[p] = (epi_v8i){ 0 };
    }
    int64_t v = 0;
    for (int64_t run_from = 0; v + 8 <= nv; v += 8) {
        epi_v8f vss, vfl, vcap, vlo, vhi;
        epi_v8i cnt;
        memcpy(&vss, ss + v, sizeof vss);
        memcpy(&vfl, fl + v, sizeof vfl);
        memcpy(&vcap, cap + v, sizeof vcap);
        if (counting) {
            memcpy(&vlo, lo + v, sizeof vlo);
            memcpy(&vhi, hi + v, sizeof vhi);
            memcpy(&cnt, count + v, sizeof cnt);
        }
#pragma GCC unroll 4
        for (int p = 0; p < P; p++) {
            epi_v8f g0, gm, rss, x;
            memcpy(&g0, G[p] + v, sizeof g0);
            rss = vss - g0 * g0;
#pragma GCC unroll 4
            for (int m = 1; m < R; m++) {
                memcpy(&gm, G[p] + m * ld + v, sizeof gm);
                rss -= gm * gm;
            }
            rss = EPI_SELECT(rss > vfl, rss, vfl);
            epi_v8f ag = (epi_v8f)((epi_v8i)g0 & absmask);
            x = (two ? g0 * g0 : vsg * g0 * ag) / rss;
            x = EPI_SELECT(x < vcap, x, vcap);
            memcpy(qp[p] + v, &x, sizeof x);
            vmax[p] = EPI_SELECT(x > vmax[p], x, vmax[p]);
            if (counting) {
                cnt -= (epi_v8i)(x >= vhi);
                vnear[p] |= (epi_v8i)(x >= vlo) & (epi_v8i)(x < vhi);
            }
        }
        if (counting) {
            memcpy(count + v, &cnt, sizeof cnt);
            /* every 64 voxels (and at the end): the rare values inside their window, listed */
            if ((v + 8) % 64 == 0 || v + 16 > nv) {
#pragma GCC unroll 4
                for (int p = 0; p < P; p++) {
                    int any = 0;
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++)
                        any |= vnear[p][j];
                    for (int64_t u = run_from; any && u < v + 8; u++)
                        if (qp[p][u] >= lo[u] && qp[p][u] < hi[u])
                            near[(*listed)++] = (int32_t)((i0 + p) * nv + u);
                    vnear[p] = (epi_v8i){ 0 };
                }
                run_from = v + 8;
            }
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < P; p++) {
        float m = -FLT_MAX;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            m = vmax[p][j] > m ? vmax[p][j] : m;
        if (v < nv) {
            struct nf_glm_epi tail = *e;
            tail.G = G[p] + v, tail.ss += v, tail.fl += v, tail.cap += v, tail.lo += v, tail.hi += v;
            tail.nv = nv - v;
            tail.np = 1;
            int n_tail = 0;
            float t;
            nf_glm_epilogue_ref(&tail, qp[p] + v, &t, counting ? count + v : NULL, counting ? near + *listed : NULL,
                                &n_tail);
            for (int j = 0; j < n_tail; j++)
                near[*listed + j] += (int32_t)((i0 + p) * nv + v);
            *listed += n_tail;
            m = t > m ? t : m;
        }
        mx[i0 + p] = m;
    }
}

/* All permutations of the block, EPI_PERMS at a time, then one at a time. */
static inline __attribute__((always_inline)) void epi_rows(const struct nf_glm_epi *e, float *q, float *mx,
                                                          uint32_t *count, int32_t *near, int *listed, const int R,
                                                          const bool counting)
{
    int64_t i = 0;
    for (; i + EPI_PERMS <= e->np; i += EPI_PERMS)
        epi_body(e, i, q, mx, count, near, listed, EPI_PERMS, R, counting);
    for (; i < e->np; i++)
        epi_body(e, i, q, mx, count, near, listed, 1, R, counting);
}

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_glm_epilogue_simd(const struct nf_glm_epi *e, float *q, float *mx, uint32_t *count, int32_t *near,
                          int *n_near)
{
    int listed = 0;
    switch (e->is_f || e->r > 4 ? 0 : (int)e->r) {
    case 1: count ? epi_rows(e, q, mx, count, near, &listed, 1, true) : epi_rows(e, q, mx, NULL, NULL, &listed, 1, false); break;
    case 2: count ? epi_rows(e, q, mx, count, near, &listed, 2, true) : epi_rows(e, q, mx, NULL, NULL, &listed, 2, false); break;
    case 3: count ? epi_rows(e, q, mx, count, near, &listed, 3, true) : epi_rows(e, q, mx, NULL, NULL, &listed, 3, false); break;
    case 4: count ? epi_rows(e, q, mx, count, near, &listed, 4, true) : epi_rows(e, q, mx, NULL, NULL, &listed, 4, false); break;
    default: nf_glm_epilogue_ref(e, q, mx, count, near, n_near); return;
    }
    if (count)
        *n_near = listed;
}
