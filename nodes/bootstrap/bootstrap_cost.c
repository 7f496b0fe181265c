/* bootstrap_cost.c — how one bootstrap run is cut into voxel blocks and
 * chunks of resamples (sized to the memory budget), and its
 * work (node_type.cost) for the placement cost model behind `device: auto`
 * (engine/plan/cost.h), from the resolved shapes and parameters. The node has
 * no GPU path: the estimate places it on the CPU and lets the planner weigh
 * it against other nodes. How to count: struct nf_cost (node.h).
 */
#include <math.h>

#include "node.h"
#include "bootstrap.h"

/* Every resample's weights of one block, at most this many floats. */
#define BLOCK_FLOATS ((int64_t)1 << 24)

int64_t nf_bootstrap_block(int64_t n_boot, int64_t p, int64_t V)
{
    int64_t per_voxel = n_boot * (p > 0 ? p : 1);
    int64_t block = BLOCK_FLOATS / per_voxel;
    int64_t spread = (V + 7) / 8;   /* at least 8 blocks, so that small problems use threads */
    if (block > spread)
        block = spread;
    return block < 1 ? 1 : block;
}

int64_t nf_bootstrap_pred_rows(int64_t n_boot, int64_t block, int64_t m)
{
    int64_t rows = BLOCK_FLOATS / ((n_boot > 0 ? n_boot : 1) * (block > 0 ? block : 1));
    if (rows > m)
        rows = m;
    return rows < 1 ? 1 : rows;
}

/* What the factors and, with chunks, the group of blocks may take together:
 * the lesser of this and a quarter of the budget. */
#define ROOM_BYTES ((uint64_t)1 << 30)

static uint64_t room_of(uint64_t budget)
{
    return budget / 4 < ROOM_BYTES ? budget / 4 : ROOM_BYTES;
}

int64_t nf_bootstrap_chunk(int64_t chunk, int64_t n_boot, int64_t floats_each, uint64_t budget)
{
    const int64_t unit = NF_BOOT_GEMM_RESAMPLES;
    uint64_t each = (uint64_t)(floats_each > 0 ? floats_each : 1) * sizeof(float), room = room_of(budget);
    if (chunk <= 0)   /* all when they fit, else a quarter of the room (the rest: the group) */
        chunk = room / each >= (uint64_t)n_boot ? n_boot : (int64_t)(room / 4 / each);
    if (chunk >= n_boot)
        return n_boot;
    chunk -= chunk % unit;
    return chunk < unit ? (unit < n_boot ? unit : n_boot) : chunk;
}

int64_t nf_bootstrap_group(int64_t block_floats, int64_t n_blocks, int threads, uint64_t budget)
{
    uint64_t each = (uint64_t)(block_floats > 0 ? block_floats : 1) * sizeof(float);
    int64_t group = (int64_t)(room_of(budget) / 4 * 3 / each);
    if (group < threads)
        group = threads;
    if (group > n_blocks)
        group = n_blocks;
    return group < 1 ? 1 : group;
}

int nf_bootstrap_cost(const void *params, const struct nf_shape *in, const struct nf_shape *out,
                      struct nf_cost *c)
{
    const struct bootstrap_params *prm = params;
    if ((in[BOOT_IN_X].kind != NF_KIND_MATRIX && in[BOOT_IN_X].kind != NF_KIND_TABLE) ||
        in[BOOT_IN_Y].kind != NF_KIND_MATRIX)
        return 0;
    double n = (double)in[BOOT_IN_X].dim[0], p = (double)in[BOOT_IN_X].dim[1], V = (double)in[BOOT_IN_Y].dim[1];
    double B = (double)prm->n_boot, r = fmin(n, p);
    if (!(n > 0 && p > 0 && V > 0))
        return 0;
    bool per_voxel = in[BOOT_IN_PENALTY].kind != NF_KIND_NONE;
    /* per resample: the factorisation and H_b (the SVD form's count, the
     * larger), once, or once per group of blocks when the factors come in
     * chunks (the caps: the budget is not known here); per weight and
     * resample: the stacked GEMM (and per-voxel shrinkage and Vtᵀ), the sums
     * and the selection of the percentile interval */
    int64_t block = nf_bootstrap_block(prm->n_boot, (int64_t)p, (int64_t)V);
    int64_t n_blocks = ((int64_t)V + block - 1) / block;
    int64_t each = per_voxel ? (int64_t)(r * (n + p + 1)) : (int64_t)(p * n);
    double passes = nf_bootstrap_chunk(prm->chunk, prm->n_boot, each, UINT64_MAX) < prm->n_boot
                    ? ceil((double)n_blocks / (double)nf_bootstrap_group(prm->n_boot * (int64_t)p * block, n_blocks,
                                                                         1, UINT64_MAX))
                    : 1;
    /* predictions of m test samples (resolve leaves them unresolved when not
     * asked for): per prediction and resample the GEMM with X_test, the sums
     * and the selection, and with an intercept each resample's mean of Y */
    double m = out && out[BOOT_OUT_PRED_MEAN].kind == NF_KIND_MATRIX ? (double)out[BOOT_OUT_PRED_MEAN].dim[0] : 0;
    c->flops = passes * B * (4 * n * p * p + 2 * p * r * n) + 2 * B * (per_voxel ? r : p) * n * V +
               (per_voxel ? 2 * B * p * r * V : 0) + 8 * B * p * V +
               (m > 0 ? 2 * B * m * p * V + 8 * B * m * V + (prm->fit_intercept ? 2 * B * (n + p) * V : 0) : 0);
    /* Y is read once per block; every resample's weights written and read */
    double blocks = (double)n_blocks;
    c->cpu_bytes = 4 * n * V + 4 * B * p * n * blocks + 12 * B * p * V + 16 * B * m * V;
    c->gpu_bytes = c->cpu_bytes;
    c->transfer_bytes = 4 * (n * V + 6 * (p + m) * V);
    c->resident_port = -1;
    c->resident_bytes = 0;
    c->launches = blocks;
    c->host_s = 0;
    return 1;
}
