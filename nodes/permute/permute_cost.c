/* permute_cost.c — the work of one permute run (node_type.cost), for the
 * placement cost model behind `device: auto` (engine/plan/cost.h), from the
 * resolved shapes and parameters.
 * The null statistics are one GEMM R D per block of permutations: the CPU
 * re-reads D per sub-block of rows, the GPU writes every null value and its
 * epilogue reads it back. How to count: struct nf_cost (node.h).
 */
#include <math.h>

#include "node.h"
#include "permute.h"

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
    /* TFCE and clusters: every permutation's map again (a GEMM on the CPU) and
     * its union-find passes, about 90 ns (TFCE, 100 steps) and 30 ns
     * (clusters) per voxel measured at 215k voxels; both paths run them on
     * the CPU (permute_gpu.c hands such runs to the CPU node) */
    if (prm->tfce || nf_perm_clusters_asked(prm)) {
        c->flops += 2 * N * n * V;
        c->host_s += N * V * ((prm->tfce ? 9e-8 * (double)prm->tfce_steps / 100 : 0) +
                              (nf_perm_clusters_asked(prm) ? 3e-8 : 0));
    }
    return 1;
}

/* node_type.chunks: checkpoint chunks of one run (at most n_permutations /
 * chunk; an exact test may enumerate fewer, and parts without chunks then
 * have nothing to do). */
int64_t nf_permute_chunks(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct permute_params *prm = params;
    (void)in;
    (void)out;
    return prm->chunk > 0 ? (prm->n_permutations + prm->chunk - 1) / prm->chunk : 0;
}
