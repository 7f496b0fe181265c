/* ridge_sums.c — the ridge node's per-voxel validation-error sums
 * (ridge_error_sums in kernels.h), vectorised:
 *   quad[v] = Σ_j u_jv t_jv,  cross[v] = Σ_j (d_j u_jv) z_jv,  psum[v] = Σ_j p_j u_jv
 * in double, j in order, so the result is the same bits on every CPU and as
 * the plain loop of kernels/ref/ridge_sums_ref.c. Written with 8-wide double
 * vectors over 8 voxels (accumulators in registers, one pass over the rows)
 * and compiled for AVX2 / AVX-512 as well as the baseline, chosen at load
 * time: the scalar version of this loop cost as much as the node's GEMMs.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/kernels.h"

typedef float nf_v8f __attribute__((vector_size(32)));
typedef double nf_v8d __attribute__((vector_size(64)));

/* eight floats at p (any alignment) as doubles; a macro, since a function
 * returning a 64-byte vector changes the ABI without AVX-512 */
#define LOAD8(p) ({ nf_v8f f_; memcpy(&f_, (p), sizeof f_); __builtin_convertvector(f_, nf_v8d); })

__attribute__((target_clones("avx512f", "avx2", "default")))
void nf_ridge_error_sums_simd(int64_t r, int64_t nb, int64_t ld, const float *restrict U, const float *restrict Z,
                              const float *restrict T, int64_t ldt, const double *restrict dj,
                              const double *restrict pj, double *restrict quad, double *restrict cross,
                              double *restrict psum)
{
    int64_t v = 0;
    for (; v + 8 <= nb; v += 8) {
        nf_v8d q = { 0 }, c = { 0 }, s = { 0 };
        for (int64_t j = 0; j < r; j++) {
            const int64_t o = j * ld + v;
            nf_v8d u = LOAD8(U + o);
            nf_v8d d = { dj[j], dj[j], dj[j], dj[j], dj[j], dj[j], dj[j], dj[j] };
            nf_v8d p = { pj[j], pj[j], pj[j], pj[j], pj[j], pj[j], pj[j], pj[j] };
            q += u * LOAD8(T + j * ldt + v);
            c += d * u * LOAD8(Z + o);
            s += p * u;
        }
        memcpy(quad + v, &q, sizeof q);
        memcpy(cross + v, &c, sizeof c);
        memcpy(psum + v, &s, sizeof s);
    }
    /* the last voxels (fewer than 8): the same sums one voxel at a time */
    nf_ridge_error_sums_ref(r, nb - v, ld, U + v, Z + v, T + v, ldt, dj, pj, quad + v, cross + v, psum + v);
}
