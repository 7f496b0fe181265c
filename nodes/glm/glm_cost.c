/* glm_cost.c — the work of one glm run (node_type.cost), for the placement
 * cost model (engine/plan/cost.h), from the resolved shapes. The node runs on
 * the CPU only: two GEMMs per voxel block per fit (B = P Y, residuals
 * Y - Xw B), one fit with OLS and two with AR(1), each reading the data once
 * more (the AR pass gathers it by bin), and per voxel and contrast a t tail
 * (a continued fraction, some hundred operations). How to count: struct
 * nf_cost (node.h).
 */
#include "node.h"

#include "glm.h"

int nf_glm_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out, struct nf_cost *c)
{
    const struct glm_params *p = params;
    (void)out;
    if (in[GLM_IN_X].kind != NF_KIND_TABLE || in[GLM_IN_Y].kind != NF_KIND_MATRIX)
        return 0;
    double n = (double)in[GLM_IN_Y].dim[0], V = (double)in[GLM_IN_Y].dim[1], k = (double)in[GLM_IN_X].dim[1];
    double fits = p->noise == GLM_NOISE_AR1 ? 2 : 1, contrasts = (double)p->contrasts.n;
    if (!(n > 0 && V > 0))
        return 0;
    if (!(k > 0))
        k = 10;   /* columns unknown until the design is made */
    c->flops = fits * (4 * n * k * V + 6 * n * V) + contrasts * V * (2 * k + 300);
    /* the data read per fit (and written back once as residuals), the maps written */
    c->cpu_bytes = fits * 8 * n * V + 4 * V * (5 * contrasts + k + 1);
    c->gpu_bytes = c->cpu_bytes;
    c->transfer_bytes = 0;
    c->resident_port = -1;
    c->resident_bytes = 0;
    c->launches = 0;
    /* factorisations: one per AR bin (up to 201), k x k Jacobi and n k² products */
    c->host_s = (p->noise == GLM_NOISE_AR1 ? 201 : 1) * (20 * k * k * k + 4 * n * k * k) / 2e9;
    return 1;
}
