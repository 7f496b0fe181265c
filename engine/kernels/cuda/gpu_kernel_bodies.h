/* gpu_kernel_bodies.h — what one GPU thread of each epilogue kernel (and of
 * the searchlight's gather and solve) computes.
 *
 * The kernels in gpu_kernels.cu are thin: they find their voxel (row, element
 * or sphere) from the thread and block indices and call these bodies. The same bodies compile
 * as plain C for tests/unit/gpu_emu.c, which runs the GPU nodes on the CPU
 * through an emulated CUDA runtime, so the arithmetic the device runs is the
 * arithmetic those tests check against the CPU nodes.
 *
 * Every body mirrors the CPU nodes operation by operation (nodes/ridge/ridge.c
 * fold_uty / fold_scores / finish_block, nodes/permute/permute.c transform,
 * nodes/searchlight/searchlight.c gather / dot / chol_solve / closed_form_fold): the same
 * float or double operations in the same order; nvcc compiles them with
 * --fmad=false and C does not contract either, so equal inputs give the CPU's
 * bits.
 */
#ifndef NF_GPU_KERNEL_BODIES_H
#define NF_GPU_KERNEL_BODIES_H

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "gpu.h"

#ifdef __CUDACC__
#define NF_BODY __host__ __device__ inline
#else
#define NF_BODY static inline
#endif

/* Ridge score kinds and permute tails, as in nodes/ridge/ridge.h and nodes/permute/permute.h. */
enum { NF_BODY_SCORE_PEARSON = 1, NF_BODY_TAIL_TWO = 0, NF_BODY_TAIL_UPPER = 1 };

/* ---- ridge (see nf_gpu_ridge_* in gpu.h for the layouts) ---- */

NF_BODY void nf_body_ridge_stats(int64_t v, const float *Y, int64_t n, int64_t nb, int k, const int64_t *v0,
                                 const int64_t *v1, bool center, bool fold_center, double *y_mean, double *ymean,
                                 double *sy, double *syy)
{
    double all = 0.0;
    if (center) {
        for (int64_t i = 0; i < n; i++)
            all += (double)Y[i * nb + v];
        all /= (double)n;
        y_mean[v] = all;
    }
    for (int f = 0; f < k; f++) {
        int64_t a = v0[f], b = v1[f];
        double m = 0.0;
        if (fold_center) {
            for (int64_t i = 0; i < n; i++)
                if (i < a || i >= b)
                    m += (double)Y[i * nb + v];
            m /= (double)(n - (b - a));
        } else if (center) {
            m = all;
        }
        double s1 = 0.0, s2 = 0.0;
        for (int64_t i = a; i < b; i++) {
            double yv = (double)Y[i * nb + v] - m;
            s1 += yv;
            s2 += yv * yv;
        }
        ymean[(int64_t)f * nb + v] = m;
        sy[(int64_t)f * nb + v] = s1;
        syy[(int64_t)f * nb + v] = s2;
    }
}

NF_BODY void nf_body_ridge_center(int64_t j, int64_t v, float *X, int64_t r, int64_t nb, const double *colsum,
                                  const double *centre, bool center)
{
    float *x = X + j * nb + v;
    if (j >= r)
        *x = 0.0f;
    else if (center)
        *x -= (float)(colsum[j] * centre[v]);
}

/* One voxel v and one alpha a (a thread each: A x nb threads keep the device
 * busy), folds f0..f0+kb-1 in order. */
NF_BODY void nf_body_ridge_scores(int64_t v, int64_t a, int f0, int kb, int64_t A, int64_t rmax, int64_t nb,
                                  const int *r, const double *nval, const float *UtY, const float *Z, const float *T,
                                  const double *dj, const double *pj, const double *sy, const double *syy,
                                  int score_kind, bool legacy, double *acc, float *cv)
{
    for (int fl = 0; fl < kb; fl++) {
        const int f = f0 + fl;
        const int64_t rf = r[f];
        const double nv = nval[f], s1 = sy[(int64_t)f * nb + v], s2 = syy[(int64_t)f * nb + v];
        const float *U = UtY + (int64_t)f * rmax * nb + v;
        const float *Zf = Z + (int64_t)fl * rmax * nb + v;
        const float *Ta = T + ((int64_t)fl * A + a) * rmax * nb + v;
        const double *d = dj + ((int64_t)f * A + a) * rmax, *p = pj + ((int64_t)f * A + a) * rmax;
        double quad = 0.0, cross = 0.0, psum = 0.0;
        for (int64_t j = 0; j < rf; j++) {
            double u = (double)U[j * nb];
            quad += u * (double)Ta[j * nb];
            cross += d[j] * u * (double)Zf[j * nb];
            psum += p[j] * u;
        }
        double ss_tot = s2 - s1 * s1 / nv;   /* about the validation mean */
        if (ss_tot < 0)
            ss_tot = 0;
        double ss_res = s2 - 2 * cross + quad;
        if (ss_res < 0)
            ss_res = 0;
        double val;
        if (score_kind == NF_BODY_SCORE_PEARSON) {
            double cov = cross - s1 * psum / nv, sp2 = quad - psum * psum / nv;
            val = ss_tot > 0 && sp2 > 0 ? cov / sqrt(ss_tot * sp2) : 0.0;
        } else if (legacy) {
            val = ss_tot == 0 ? 0.0 : 1.0 - ss_res / ss_tot;
        } else {
            val = 1.0 - ss_res / (ss_tot + 1e-10);
        }
        acc[a * nb + v] += val;
        if (cv)
            cv[((int64_t)f * A + a) * nb + v] = (float)val;
    }
}

NF_BODY void nf_body_ridge_choose(int64_t v, int64_t A, int64_t nb, int k, const double *acc, const double *alphas,
                                  int64_t shared_best, int *best, float *alpha_out, float *score_out)
{
    int64_t pick = shared_best;
    float pick_mean = 0;
    for (int64_t a = 0; a < A; a++) {
        float mean = (float)(acc[a * nb + v] / (double)k);
        if (shared_best >= 0) {
            if (a == shared_best)
                pick_mean = mean;
        } else if (a == 0 || mean > pick_mean) {
            pick = a;
            pick_mean = mean;
        }
    }
    best[v] = (int)pick;
    alpha_out[v] = (float)alphas[pick];
    score_out[v] = pick_mean;
}

NF_BODY void nf_body_ridge_shrink(int64_t j, int64_t v, const float *in, float *out, int64_t nb, const float *s,
                                  const double *alphas, const int *best, const double *colsum, const double *y_mean)
{
    double sj = s[j], x = in[j * nb + v] - (colsum ? colsum[j] * y_mean[v] : 0.0);
    out[j * nb + v] = (float)(x * (sj / (sj * sj + alphas[best[v]])));
}

NF_BODY void nf_body_add_rows(int64_t i, int64_t v, float *X, int64_t nb, const double *centre)
{
    X[i * nb + v] = X[i * nb + v] + (float)centre[v];
}

NF_BODY void nf_body_gather_rows(int64_t i, int64_t v, float *dst, int64_t ld_dst, const float *src, int64_t ld_src,
                                 const int64_t *rows)
{
    dst[i * ld_dst + v] = src[(rows ? rows[i] : i) * ld_src + v];
}

/* ---- searchlight (see nf_gpu_sl_* in gpu.h for the layouts) ---- */

NF_BODY void nf_body_sl_gather(int64_t e, const float *X, int64_t ldx, const int64_t *rows, const double *mean,
                               const double *inv_sd, const int32_t *idx, int64_t n, int64_t mb, float *Z)
{
    const int64_t j = e % mb, r = (e / mb) % n, b = e / (mb * n);
    const int32_t col = idx[b * mb + j];
    Z[e] = col < 0 ? 0.0f : (float)(((double)X[rows[r] * ldx + col] - mean[col]) * inv_sd[col]);
}

/* nodes/searchlight/searchlight.c dot(): four partial sums, combined as (s0 + s1) + (s2 +
 * s3), here over elements `st` apart (the interleaved scratch). */
NF_BODY double nf_body_sl_dot(const double *a, const double *b, int64_t n, int64_t st)
{
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int64_t t = 0;
    for (; t + 4 <= n; t += 4) {
        s0 += a[t * st] * b[t * st];
        s1 += a[(t + 1) * st] * b[(t + 1) * st];
        s2 += a[(t + 2) * st] * b[(t + 2) * st];
        s3 += a[(t + 3) * st] * b[(t + 3) * st];
    }
    for (; t < n; t++)
        s0 += a[t * st] * b[t * st];
    return (s0 + s1) + (s2 + s3);
}

/* nodes/searchlight/searchlight.c closed_form_fold() and chol_solve() for sphere b. */
NF_BODY void nf_body_sl_solve(int64_t b, int64_t nb, const int32_t *size, int64_t n_tr, int64_t n_val, int64_t q,
                              int64_t mb, int64_t ldp, int64_t S, const float *Z, const float *G, int64_t g_stride,
                              double alpha, const double *t_c, const double *t_mean, double *L, double *T, float *dec,
                              int64_t dec_ld)
{
    const int64_t m = size[b];
    const bool dual = m > n_tr;
    const int64_t s = dual ? n_tr : m, lda = dual ? n_tr : ldp;
    const float *A = G + b * g_stride, *Zb = Z + b * (n_tr + n_val) * mb;
    double *Lb = L + b, *Tb = T + b;
    float *db = dec + b * dec_ld;
    /* row i of L starts at Lb + i S nb; its elements are nb apart */
    for (int64_t i = 0; i < s; i++)
        for (int64_t j = 0; j <= i; j++)
            Lb[(i * S + j) * nb] = (double)A[i * lda + j] + (i == j ? alpha : 0.0);
    for (int64_t j = 0; j < s; j++) {
        double *lj = Lb + j * S * nb;
        double d = lj[j * nb] - nf_body_sl_dot(lj, lj, j, nb);
        if (!(d > 0) || !isfinite(d)) {
            for (int64_t e = 0; e < n_val * q; e++)
                db[e] = NAN;
            return;
        }
        d = sqrt(d);
        lj[j * nb] = d;
        for (int64_t i = j + 1; i < s; i++) {
            double *li = Lb + i * S * nb;
            li[j * nb] = (li[j * nb] - nf_body_sl_dot(li, lj, j, nb)) / d;
        }
    }
    for (int64_t o = 0; o < q; o++) {
        /* the right-hand side: T_c (dual) or Z_tᵀ T_c (primal, summed over rows in order) */
        for (int64_t i = 0; i < s; i++) {
            double acc = 0;
            if (dual)
                acc = t_c[i * q + o];
            else
                for (int64_t t = 0; t < n_tr; t++)
                    acc += (double)Zb[t * mb + i] * t_c[t * q + o];
            Tb[i * nb] = acc;
        }
        for (int64_t i = 0; i < s; i++)   /* L z = b */
            Tb[i * nb] = (Tb[i * nb] - nf_body_sl_dot(Lb + i * S * nb, Tb, i, nb)) / Lb[(i * S + i) * nb];
        for (int64_t i = s - 1; i >= 0; i--) {   /* Lᵀ x = z */
            const double *li = Lb + i * S * nb;
            double xi = Tb[i * nb] / li[i * nb];
            Tb[i * nb] = xi;
            for (int64_t t = 0; t < i; t++)
                Tb[t * nb] -= li[t * nb] * xi;
        }
        /* decision values of the validation rows for output o (the CPU
         * computes them after every solve: the same values) */
        for (int64_t i = 0; i < n_val; i++) {
            double acc = t_mean[o];
            if (dual) {
                const float *kv = A + (n_tr + i) * n_tr;
                for (int64_t t = 0; t < n_tr; t++)
                    acc += (double)kv[t] * Tb[t * nb];
            } else {
                const float *zv = Zb + (n_tr + i) * mb;
                for (int64_t j = 0; j < m; j++)
                    acc += (double)zv[j] * Tb[j * nb];
            }
            db[i * q + o] = (float)acc;
        }
    }
}

/* ---- permute ---- */

/* Floats as ints that order the same way (for atomicMax): the bits of a
 * non-negative float, the magnitude bits flipped for a negative one. */
NF_BODY int nf_body_float_key(float f)
{
    int i;
    memcpy(&i, &f, sizeof i);
    return i >= 0 ? i : i ^ 0x7fffffff;
}

NF_BODY float nf_body_key_float(int key)
{
    int i = key >= 0 ? key : key ^ 0x7fffffff;
    float f;
    memcpy(&f, &i, sizeof f);
    return f;
}

/* nodes/permute/permute.c transform() of one GEMM value g of a voxel. */
NF_BODY float nf_body_perm_transform(const struct nf_gpu_perm_consts *k, float g, float shift, float ss, float fl,
                                     float cap)
{
    float d = k->a * g - shift, q;
    if (k->t_stat) {
        float den = ss - k->c * d * d;
        den = den > fl ? den : fl;
        float ad = d < 0 ? -d : d;
        q = (k->tail == NF_BODY_TAIL_TWO ? ad : k->tail == NF_BODY_TAIL_UPPER ? d : -d) * ad / den;
    } else {
        q = k->tail == NF_BODY_TAIL_TWO ? (d < 0 ? -d : d) : k->tail == NF_BODY_TAIL_UPPER ? d : -d;
    }
    return q < cap ? q : cap;
}

#endif
