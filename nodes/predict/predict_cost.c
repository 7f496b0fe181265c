/* predict_cost.c — the work of one predict run in mode searchlight with a
 * closed-form learner (node_type.cost), for the placement cost model behind
 * `device: auto` (engine/plan/cost.h): the only mode and learners with a GPU
 * path; every other gets no estimate and stays on the CPU.
 * Per sphere and fold a Gram, a Cholesky and solves, on the CPU one sphere
 * at a time and on the GPU in batches of spheres. How to count: struct
 * nf_cost (node.h).
 */
#include <math.h>

#include "node.h"
#include "predict.h"
#include "predict_models.h"
#include "searchlight/searchlight.h"

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
