/* row_ops_ref.c — passes over one row of a matrix in double (row_accumulate,
 * row_sq_dev, row_standardize, row_gemv_double, and the glm node's row_axpy
 * and row_residual in kernels.h) and the float
 * product of a few rows with the data (rows_gemm_f32) and its signed t
 * (perm_signed_t_f32), as plain loops:
 * the oracle of tests/unit/test_kernels.c for kernels/simd/row_ops.c, which
 * must give the same bits, the entries of nf_kernels_ref, and the vector
 * versions' tails.
 */
#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"

void nf_row_accumulate_ref(double *acc, const float *x, int64_t V, bool squared)
{
    for (int64_t v = 0; v < V; v++)
        acc[v] += squared ? (double)x[v] * (double)x[v] : (double)x[v];
}

void nf_row_sq_dev_ref(double *sq, const double *sum, const float *x, double n, int64_t V)
{
    for (int64_t v = 0; v < V; v++) {
        double d = x[v] - sum[v] / n;
        sq[v] += d * d;
    }
}

void nf_row_standardize_ref(float *z, double *cross, const float *x, const double *m, const double *sd,
                            const int64_t *keep, double cov, int64_t V)
{
    for (int64_t v = 0; v < V; v++) {
        double zv = keep[v] ? (x[v] - m[v]) / sd[v] : 0;
        z[v] = (float)zv;
        cross[v] += zv * cov;
    }
}

void nf_row_gemv_double_ref(const float *row, const float *D, int64_t n, int64_t V, double *acc)
{
    for (int64_t v = 0; v < V; v++) {
        double g = 0;
        for (int64_t j = 0; j < n; j++)
            g += (double)row[j] * (double)D[j * V + v];
        acc[v] = g;
    }
}

void nf_rows_gemm_f32_ref(const float *R, int64_t nr, const float *D, int64_t n, int64_t V, float *G)
{
    for (int64_t r = 0; r < nr; r++)
        for (int64_t v = 0; v < V; v++) {
            float acc = 0;
            for (int64_t j = 0; j < n; j++)
                acc += R[r * n + j] * D[j * V + v];
            G[r * V + v] = acc;
        }
}

void nf_perm_signed_t_f32_ref(float *g, int64_t V, float a, float c, const float *shift, const float *ss,
                              const float *floor_, const float *cap, double k)
{
    for (int64_t v = 0; v < V; v++) {
        float d = a * g[v] - shift[v];
        float den = ss[v] - c * d * d;
        den = den > floor_[v] ? den : floor_[v];
        float ad = d < 0 ? -d : d;
        float q = d * ad / den;
        q = q < cap[v] ? q : cap[v];
        double t = sqrt(fabs((double)q) * k);
        g[v] = q == -FLT_MAX ? 0.0f : (float)(q < 0 ? -t : t);
    }
}

void nf_row_axpy_ref(double *acc, double w, const float *x, int64_t V)
{
    for (int64_t v = 0; v < V; v++)
        acc[v] += w * (double)x[v];
}

void nf_row_residual_ref(const float *y, const double *B, const double *q, int64_t dq, int64_t nz, int64_t ldb,
                         int64_t V, float *e, double *ss)
{
    for (int64_t v = 0; v < V; v++) {
        double s = y[v];
        for (int64_t m = 0; m < nz; m++)
            s -= q[m * dq] * B[m * ldb + v];
        e[v] = (float)s;
        ss[v] += (double)e[v] * (double)e[v];
    }
}
