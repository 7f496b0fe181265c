/* gpu_cost.c — the work of one ridge, permute or searchlight (predict) run,
 * for the placement cost model (engine/plan/cost.h), from the resolved shapes and
 * parameters.
 *
 * FLOPs follow the algorithms of the nodes (a multiply-add counts 2); bytes
 * are what each implementation moves through memory: the CPU paths are
 * compute-bound GEMMs over cache-sized tiles, the GPU paths stream their GEMM
 * outputs through device memory once and back (cuBLAS writes them, the fused
 * epilogue reads them). Transfers are the inputs that go up and the outputs
 * that come back. Estimates, not measurements: what matters is their ratio
 * between devices and their growth with the problem, so that small problems
 * (where the GPU's fixed setup and launches dominate) stay on the CPU and large
 * ones move.
 */
#include <math.h>

#include "plan/cost.h"
#include "gpu_nodes.h"
#include "permute/permute.h"
#include "predict/predict.h"
#include "predict/predict_models.h"
#include "ridge/ridge.h"

int nf_ridge_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                  struct nf_cost *c)
{
    const struct ridge_params *prm = params;
    (void)out;
    /* X may be a numeric table taken as a matrix: rows x columns either way */
    if ((in[RIDGE_IN_X].kind != NF_KIND_MATRIX && in[RIDGE_IN_X].kind != NF_KIND_TABLE) || in[RIDGE_IN_Y].kind != NF_KIND_MATRIX)
        return 0;
    double n = (double)in[RIDGE_IN_X].dim[0], p = (double)in[RIDGE_IN_X].dim[1], V = (double)in[RIDGE_IN_Y].dim[1];
    double k = (double)prm->cv, A = isnan(prm->alpha) ? (double)prm->alphas.n : 1.0;
    if (!(n > 0 && p > 0 && V > 0 && k >= 1))
        return 0;
    double n_val = n / k, n_tr = n - n_val, r = fmin(n_tr, p), r_all = fmin(n, p);
    /* per fold: SVD, P, Uᵀ Y_train, Z = Pᵀ Y_val, T = M UtY (every alpha), the
     * epilogue; then the refit on all samples */
    double per_fold = 4 * n_tr * p * p + 2 * n_val * p * r + 2 * n_val * r * r + 2 * r * n_tr * V +
                      2 * r * n_val * V + 2 * A * r * r * V + 6 * A * r * V + 2 * n_val * V;
    c->flops = k * per_fold + 4 * n * p * p + 2 * r_all * n * V + 2 * p * r_all * V;
    /* CPU: Y is read per fold and twice more (means, refit) */
    c->cpu_bytes = 4 * V * ((k + 2) * n + k * A * r);
    /* GPU: Y per fold, T written and read per fold, UtY/Z/weights */
    c->gpu_bytes = 4 * V * ((k + 3) * n + 2 * k * A * r + 4 * k * r + 2 * p) + 8 * V * (A + 3 * k);
    /* Y up; weights, alpha, score, intercept down */
    c->transfer_bytes = 4 * V * (n + p + 3);
    c->resident_port = RIDGE_IN_Y;   /* Y stays on the device (ridge_gpu.c) */
    c->resident_bytes = 4 * V * n;
    double blocks = ceil(V / NF_RIDGE_GPU_BLOCK);
    /* each fold's SVD is a gesvdj of many sweeps (about 500 launches' worth) */
    c->launches = (k + 1) * 500 + blocks * (4 * k + 12);
    c->host_s = 0;
    return 1;
}

int nf_permute_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                    struct nf_cost *c)
{
    const struct permute_params *prm = params;
    (void)out;
    if (in[PERMUTE_IN_DATA].kind != NF_KIND_MATRIX && in[PERMUTE_IN_DATA].kind != NF_KIND_TABLE)
        return 0;
    double n = (double)in[PERMUTE_IN_DATA].dim[0], V = (double)in[PERMUTE_IN_DATA].dim[1];
    if (in[PERMUTE_IN_DATA2].kind == NF_KIND_MATRIX)
        n += (double)in[PERMUTE_IN_DATA2].dim[0];
    double N = (double)prm->n_permutations, chunk = (double)prm->chunk;
    if (!(n > 0 && V > 0 && N > 0))
        return 0;
    if (prm->test == PERM_ONE_SAMPLE && prm->exact == PERM_EXACT_AUTO && n < 62 && ldexp(1.0, (int)n) <= N)
        N = ldexp(1.0, (int)n);   /* exact: every sign flip */
    double chunks = ceil(N / chunk), sub = ceil(N / NF_PERMUTE_GPU_ROWS);
    /* null = R D (GEMM), then the transform, count and maximum (~10 per value) */
    c->flops = 2 * N * n * V + 10 * N * V;
    /* CPU: D is re-read for every 255 permutations (its GEMM sub-blocks) */
    c->cpu_bytes = 4 * n * V * ceil(N / 255);
    /* GPU: each null value written by cuBLAS and read by the epilogue; D per GEMM */
    c->gpu_bytes = 8 * N * V + 4 * n * V * sub;
    /* D up once; R up; counts down per chunk */
    c->transfer_bytes = 4 * n * V + 4 * N * n + 4 * V * chunks + 4 * V * 4;
    if (prm->test != PERM_TWO_SAMPLE) {   /* the data stays on the device (permute_gpu.c) */
        c->resident_port = PERMUTE_IN_DATA;
        c->resident_bytes = 4 * n * V;
    }
    c->launches = chunks * 6 + sub * 3;
    /* MT19937: seeding (624 words) and n draws per permutation, on the host
     * in both implementations; and the per-voxel preparation in double */
    c->host_s = N * (2e-6 + n * 1e-8) + n * V * 5e-9;
    return 1;
}

/* Offsets within a searchlight radius on a grid of spacing `voxel_mm` (the
 * lattice points of a ball, about 4/3 π (r/h)³; 33 for 6 mm at 3 mm). */
static double sphere_voxels(double radius_mm, double voxel_mm)
{
    double rv = radius_mm / voxel_mm;
    return fmax(1.0, 4.0 / 3.0 * M_PI * rv * rv * rv);
}

int nf_predict_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                    struct nf_cost *c)
{
    const struct predict_params *prm = params;
    (void)out;
    /* only the searchlight's closed forms have a GPU path: no estimate
     * (`auto` keeps the CPU) for anything else */
    if (prm->mode != PREDICT_SEARCHLIGHT || (prm->model != NF_MODEL_RIDGE && prm->model != NF_MODEL_RIDGE_CLASSIFIER))
        return 0;
    if (in[PREDICT_IN_X].kind != NF_KIND_MATRIX)
        return 0;
    double n = (double)in[PREDICT_IN_X].dim[0], V = (double)in[PREDICT_IN_X].dim[1], k = (double)prm->cv;
    if (!(n > 0 && V > 0 && k >= 2 && prm->radius > 0))
        return 0;
    /* The shapes carry no voxel size: 3 mm, the usual fMRI analysis grid, for
     * the sphere size (sphere_voxels); a classifier is counted with one output
     * column (two classes). */
    double m = fmin(sphere_voxels(prm->radius, 3.0), V), q = 1;
    double n_val = n / k, n_tr = n - n_val, s = fmin(m, n_tr);
    /* per sphere and fold (the CPU's and the GPU's algebra): the Gram, primal
     * (m <= n_tr) or dual; the right-hand side, Cholesky in double, solves and
     * the decision values */
    double gram = m <= n_tr ? 2 * m * m * n_tr : 2 * n * n_tr * m;
    double per = gram + (m <= n_tr ? 2 * m * n_tr * q : 0) + s * s * s / 3 + 2 * s * s * q + 2 * n_val * s * q;
    c->flops = V * k * per;
    /* CPU: each sphere's columns gathered per fold (n m floats from short
     * runs of columns: about 12 bytes of memory traffic per value, which puts
     * the 120 x 50000, r = 6 mm, 5-fold bench near its measured 1.6 s on a
     * 2-core VM), its Gram and factor */
    c->cpu_bytes = V * k * (12 * n * m + 4 * (m <= n_tr ? m * m : n * n_tr) + 8 * s * s);
    /* GPU: the gathered Z written and read by the GEMM, the Gram written and
     * read, the factor in double read once per column of the Cholesky (one
     * thread per sphere: the solve streams its factor) */
    c->gpu_bytes = V * k * (4 * n * m * 2 + 8 * (m <= n_tr ? m * m : n * n_tr) + 8 * s * s * (s / 3 + 2));
    /* X up once; sphere lists up; decision values down */
    c->transfer_bytes = 4 * n * V + 4 * V * m + 4 * V * k * n_val * q;
    c->resident_port = PREDICT_IN_X;   /* X stays on the device (searchlight_gpu.c) */
    c->resident_bytes = 4 * n * V;
    double batches = ceil(V / NF_SEARCHLIGHT_GPU_BLOCK);
    c->launches = 20 + batches * (4 * k + 4);
    /* on the host either way: sphere lists, and predictions and scores per
     * sphere and fold */
    c->host_s = V * (m * 5e-9 + k * n_val * 2e-8);
    return 1;
}
