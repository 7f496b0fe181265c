/* ridge_cost.c — the work of one ridge run (node_type.cost), for the placement
 * cost model behind `device: auto` (engine/plan/cost.h), from the resolved
 * shapes and parameters.
 * The CPU path is compute-bound GEMMs over cache-sized tiles; the GPU path
 * streams its GEMM outputs through device memory once and back (cuBLAS
 * writes them, the fused epilogue reads them). How to count: struct nf_cost
 * (node.h).
 */
#include <math.h>

#include "node.h"
#include "ridge.h"

int nf_ridge_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                  struct nf_cost *c)
{
    const struct ridge_params *prm = params;
    /* X may be a numeric table taken as a matrix: rows x columns either way */
    if ((in[RIDGE_IN_X].kind != NF_KIND_MATRIX && in[RIDGE_IN_X].kind != NF_KIND_TABLE) || in[RIDGE_IN_Y].kind != NF_KIND_MATRIX)
        return 0;
    double n = (double)in[RIDGE_IN_X].dim[0], p = (double)in[RIDGE_IN_X].dim[1], V = (double)in[RIDGE_IN_Y].dim[1];
    double k = (double)prm->cv, A = isnan(prm->alpha) ? (double)prm->alphas.n : 1.0;
    if (!(n > 0 && p > 0 && V > 0 && k >= 1))
        return 0;
    /* fitted once without folds (resolve left score unproduced): the refit only */
    if (out && out[RIDGE_OUT_WEIGHTS].kind == NF_KIND_MATRIX && out[RIDGE_OUT_SCORE].kind == NF_KIND_NONE)
        k = 0;
    double n_val = k ? n / k : 0, n_tr = n - n_val, r = fmin(n_tr, p), r_all = fmin(n, p);
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
