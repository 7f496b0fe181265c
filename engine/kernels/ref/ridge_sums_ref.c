/* ridge_sums_ref.c — the ridge node's per-voxel validation-error sums
 * (ridge_error_sums in kernels.h) as the plain loop: one voxel at a time, the
 * components in order, in double. The oracle of tests/unit/test_kernels.c for
 * kernels/simd/ridge_sums.c, which must give the same bits, and the entry of
 * nf_kernels_ref.
 */
#include <stdint.h>

#include "kernels/kernels.h"

void nf_ridge_error_sums_ref(int64_t r, int64_t nb, int64_t ld, const float *U, const float *Z, const float *T,
                             int64_t ldt, const double *dj, const double *pj, double *quad, double *cross,
                             double *psum)
{
    for (int64_t v = 0; v < nb; v++) {
        double q = 0, cr = 0, ps = 0;
        for (int64_t j = 0; j < r; j++) {
            double u = U[j * ld + v];
            q += u * T[j * ldt + v];
            cr += dj[j] * u * Z[j * ld + v];
            ps += pj[j] * u;
        }
        quad[v] = q;
        cross[v] = cr;
        psum[v] = ps;
    }
}
