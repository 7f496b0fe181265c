/* searchlight_gpu.c — the searchlight of the `predict` node on the GPU (CUDA
 * builds), for the closed-form learners (ridge, ridge_classifier): the
 * algorithm of nodes/searchlight/searchlight.c with the spheres' Gram matrices and solves
 * on the device.
 *
 * Host, exactly as the CPU path (the same functions, shared through
 * searchlight_internal.h): input checks and messages, the grid offsets and
 * sphere lists, the folds with their per-voxel training mean and 1/sd in
 * double and their centred targets, checkpoint chunks (same format and block
 * numbering, so a run resumes from either device's chunks), and the scoring:
 * predictions from the decision values and nf_score, fold by fold, on the
 * host, so a centre's score is the CPU's whenever its decision values are.
 *
 * Device: X (n x V) goes up once and stays, with every fold's rows, mean,
 * 1/sd and targets. Centres go in batches of B spheres (B sized from free
 * device memory, halved when the arena cannot be had), each batch sorted by
 * sphere size (largest first) and padded to its largest sphere; per fold:
 *   Z = the spheres' standardised columns, fold row order    gather kernel
 *   dual spheres (m > n_tr): [K_tt; K_vt] = Z Z_tᵀ            one strided-batched SGEMM
 *   primal spheres (m <= n_tr): Z_tᵀ Z_t                      one strided-batched SGEMM
 *   Cholesky of (Gram + αI), solves, decision values          one thread per sphere, double
 * The primal/dual choice is the CPU's, per sphere and fold; with the batch
 * sorted by size the dual spheres are a prefix and the primal ones the rest,
 * so each is one batched GEMM. Zero padding adds exact zeros to the Grams. The
 * solve kernel runs the CPU's double-precision code operation by operation
 * (gpu_kernel_bodies.h), so the decision values differ from the CPU's only by
 * the Gram's float round-off (cuBLAS sums in another order), and accuracy maps
 * differ only where a decision value is within that round-off of the class
 * threshold (docs/gpu.md).
 *
 * Overlap: sphere lists go up from pinned buffers on the copy stream while the
 * previous batch computes; a batch's decision values (k x B x n_val x n_out
 * floats) come down after its last fold and are scored on the host (over the
 * node's threads) while the next batch computes. Finished blocks are committed as the CPU's checkpoint
 * chunks. No usable GPU, or a learner without closed form: a warning and the
 * CPU path.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/gpu.h"
#include "node.h"
#include "core/util.h"

#include "predict/predict.h"
#include "searchlight.h"
#include "searchlight_internal.h"


/* One sphere of a batch, for the sort. */
struct cand {
    int64_t centre;
    int32_t m;
    int32_t at;          /* its list in the candidate buffer */
};

struct gsl {
    const struct sl_ctx *c;
    struct sl_work *w;
    int64_t B;           /* spheres per batch */
    int64_t S;           /* bound on a system's size: min(max sphere, max training rows) */
    int64_t g_stride;    /* floats per sphere's Gram */
    int64_t dec_ld;      /* floats per sphere's decisions: max_val x n_out */
    /* device */
    float *dX, *dZ, *dG, *dDec[2];
    bool x_resident;     /* dX is a resident copy of the X input (nf_gpu_resident), not in the arena */
    int64_t *dRows;
    double *dMean, *dInv, *dTc, *dTmean, *dL, *dT;
    int32_t *dList[2];   /* sizes (B), then the padded lists (B x mb) */
    /* host */
    int32_t *up[2];      /* pinned: the batch's sizes and lists */
    float *down[2];      /* pinned: its decisions, k x B x dec_ld */
    nf_gpu_event up_done[2], done[2];
    struct cand *cands;  /* B */
    int32_t *lists;      /* B x max_sphere: the candidates' columns */
    int64_t *centres[2]; /* B per slot: the batch's centres, in batch order */
    int64_t nb[2];       /* spheres in the batch of each slot */
    int64_t *pending;    /* n_blocks: centres queued but not scored */
    /* host scoring, over `threads` threads */
    int threads;
    struct sl_counts *tcounts;   /* threads x n_blocks: each thread's failures per block */
    double *pred;                /* threads x max_val */
};

static size_t al(size_t bytes)
{
    return nf_gpu_alloc_size(bytes);
}

/* Arena bytes: the resident data and fold constants, then a batch of B. */
static size_t arena_bytes(const struct gsl *gs, int64_t B)
{
    const struct sl_ctx *c = gs->c;
    size_t n = (size_t)c->n, V = (size_t)c->V, k = (size_t)c->k, q = (size_t)c->n_out, m = (size_t)c->max_sphere;
    size_t b = (size_t)B, S = (size_t)gs->S;
    size_t fixed = (gs->x_resident ? 0 : al(n * V * 4)) + al(k * n * 8) + 2 * al(k * V * 8) +
                   al(k * (size_t)c->max_tr * q * 8) +
                   al(k * q * 8);
    size_t batch = 2 * al((b + b * m) * 4) + al(b * n * m * 4) + al(b * (size_t)gs->g_stride * 4) +
                   al(b * S * S * 8) + al(b * S * 8) + 2 * al(k * b * (size_t)gs->dec_ld * 4);
    return fixed + batch + 16 * 256;
}


/* Fold constants, packed host-side and uploaded (synchronously: once). */
static int upload_folds(struct gsl *gs, struct nf_gpu *g, struct nf_error *err)
{
    const struct sl_ctx *c = gs->c;
    const int64_t n = c->n, V = c->V, k = c->k, q = c->n_out, mt = c->max_tr;
    int64_t *rows = nf_malloc((size_t)(k * n) * sizeof *rows);
    double *mean = nf_malloc((size_t)(k * V) * sizeof *mean), *inv = nf_malloc((size_t)(k * V) * sizeof *inv);
    double *tc = nf_calloc((size_t)(k * mt * q), sizeof *tc), *tm = nf_malloc((size_t)(k * q) * sizeof *tm);
    int rc = 0;
    if (!rows || !mean || !inv || !tc || !tm) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t f = 0; f < k; f++) {
        const struct sl_fold *fd = &c->folds[f];
        memcpy(rows + f * n, fd->rows, (size_t)n * sizeof *rows);
        memcpy(mean + f * V, fd->mean, (size_t)V * sizeof *mean);
        memcpy(inv + f * V, fd->inv_sd, (size_t)V * sizeof *inv);
        memcpy(tc + f * mt * q, fd->t_c, (size_t)(fd->n_tr * q) * sizeof *tc);
        memcpy(tm + f * q, fd->t_mean, (size_t)q * sizeof *tm);
    }
    if (!gs->x_resident)
        NF_TRY(rc = nf_gpu_upload_2d(g->compute, gs->dX, (size_t)V * sizeof(float), c->X,
                                     (size_t)c->ldx * sizeof(float), (size_t)V * sizeof(float), (size_t)n,
                                     "uploading the data", err));
    NF_TRY(rc = nf_gpu_upload(g->compute, gs->dRows, rows, (size_t)(k * n) * sizeof *rows, "uploading the folds", err));
    NF_TRY(rc = nf_gpu_upload(g->compute, gs->dMean, mean, (size_t)(k * V) * sizeof *mean, "uploading the folds", err));
    NF_TRY(rc = nf_gpu_upload(g->compute, gs->dInv, inv, (size_t)(k * V) * sizeof *inv, "uploading the folds", err));
    NF_TRY(rc = nf_gpu_upload(g->compute, gs->dTc, tc, (size_t)(k * mt * q) * sizeof *tc, "uploading the folds", err));
    NF_TRY(rc = nf_gpu_upload(g->compute, gs->dTmean, tm, (size_t)(k * q) * sizeof *tm, "uploading the folds", err));
    /* the host buffers are freed below: wait for the copies */
    NF_TRY(rc = nf_gpu_stream_sync(g->compute, "uploading the folds", err));
fail:
    free(rows);
    free(mean);
    free(inv);
    free(tc);
    free(tm);
    return rc;
}

/* Size the batch, open the arena (halving on out-of-memory), carve it, pin
 * the staging buffers and put the data on the device. */
static int setup_device(struct gsl *gs, struct nf_gpu *g, int64_t todo, const struct nf_run *run,
                        struct nf_error *err)
{
    const struct sl_ctx *c = gs->c;
    const int64_t n = c->n, V = c->V, k = c->k, q = c->n_out, m = c->max_sphere;
    int rc = 0;
    int64_t B = todo < NF_SEARCHLIGHT_GPU_BLOCK ? todo : NF_SEARCHLIGHT_GPU_BLOCK;
    int64_t cap = nf_gpu_debug_block_cap();
    if (cap > 0 && B > cap)
        B = cap;
    if (B < 1)
        B = 1;
    size_t free_b = nf_gpu_free_bytes(g);
    /* X as a resident copy when it is the X input as is and leaves at least
     * as much for the batches: the next GPU node with the same X finds it */
    const struct nf_value *xin = run && run->in ? run->in[PREDICT_IN_X] : NULL;
    size_t x_bytes = (size_t)(n * V) * sizeof(float);
    gs->x_resident = false;
    if (xin && xin->kind == NF_KIND_MATRIX && xin->u.mat.data == c->X && c->ldx == V && x_bytes <= free_b / 2 &&
        nf_gpu_residency_enabled()) {
        void *d = NULL;
        rc = nf_gpu_resident(g, xin->serial, NF_GPU_AS_IS, c->X, x_bytes, &d, NULL, err);
        if (rc < 0 && rc != NF_ENOMEM)
            return rc;
        memset(err, 0, sizeof *err);
        gs->x_resident = rc == 0;
        gs->dX = rc == 0 ? d : NULL;
        rc = 0;
        free_b = nf_gpu_free_bytes(g);
    }
    while (B > 1 && arena_bytes(gs, B) > free_b)
        B /= 2;
    for (;;) {
        rc = nf_gpu_arena_open(g, arena_bytes(gs, B), err);
        if (rc == 0)
            break;
        if (rc != NF_ENOMEM || B <= 1)
            return rc == NF_ENOMEM ? NF_FAIL_AT(err, NF_ENOMEM, run ? nf_node_loc(run->node) : NULL,
                                                run ? nf_node_id(run->node) : NULL,
                                                "not enough GPU memory for the data (%lld x %lld) and one "
                                                "searchlight sphere (%s)", (long long)n, (long long)V, err->msg)
                                   : rc;
        memset(err, 0, sizeof *err);
        B /= 2;   /* out of memory: a smaller batch, and try again */
    }
    gs->B = B;
    if (!gs->x_resident)
        NF_GPU_ALLOC(gs->dX, n * V);
    NF_GPU_ALLOC(gs->dRows, k * n);
    NF_GPU_ALLOC(gs->dMean, k * V);
    NF_GPU_ALLOC(gs->dInv, k * V);
    NF_GPU_ALLOC(gs->dTc, k * c->max_tr * q);
    NF_GPU_ALLOC(gs->dTmean, k * q);
    for (int i = 0; i < 2; i++) {
        NF_GPU_ALLOC(gs->dList[i], B + B * m);
        NF_GPU_ALLOC(gs->dDec[i], k * B * gs->dec_ld);
    }
    NF_GPU_ALLOC(gs->dZ, B * n * m);
    NF_GPU_ALLOC(gs->dG, B * gs->g_stride);
    NF_GPU_ALLOC(gs->dL, B * gs->S * gs->S);
    NF_GPU_ALLOC(gs->dT, B * gs->S);
    for (int i = 0; i < 2; i++) {
        gs->up[i] = nf_gpu_pinned(g, NF_GPU_PIN_UP0 + i, (size_t)(B + B * m) * sizeof(int32_t));
        gs->down[i] = nf_gpu_pinned(g, NF_GPU_PIN_DOWN0 + i, (size_t)(k * B * gs->dec_ld) * sizeof(float));
        if (!gs->up[i] || !gs->down[i]) {
            rc = NF_FAIL(err, NF_ENOMEM, "cannot pin %zu bytes of host memory for GPU transfers",
                         (size_t)(B + B * m) * sizeof(int32_t) + (size_t)(k * B * gs->dec_ld) * sizeof(float));
            goto fail;
        }
        gs->centres[i] = nf_malloc((size_t)B * sizeof *gs->centres[i]);
        if (!gs->centres[i]) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    gs->cands = nf_malloc((size_t)B * sizeof *gs->cands);
    gs->lists = nf_malloc((size_t)(B * m) * sizeof *gs->lists);
    if (!gs->cands || !gs->lists) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = upload_folds(gs, g, err));
fail:
    return rc;
}

/* Largest sphere first; equal sizes in column order (deterministic). */
static int cmp_cand(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->m != y->m)
        return x->m > y->m ? -1 : 1;
    return (x->centre > y->centre) - (x->centre < y->centre);
}

/* Enqueue the nb candidates as the batch of `slot`: sort, pack and upload
 * the lists, then per fold the gather, the Grams and the solves, and the
 * decisions' download. */
static int enqueue_batch(struct gsl *gs, struct nf_gpu *g, int slot, int64_t nb, struct nf_error *err)
{
    const struct sl_ctx *c = gs->c;
    const int64_t n = c->n, k = c->k, q = c->n_out, B = gs->B;
    int rc = 0;
    qsort(gs->cands, (size_t)nb, sizeof *gs->cands, cmp_cand);
    const int64_t mb = gs->cands[0].m;
    /* up[slot] was last read by the upload two batches ago */
    NF_TRY(rc = nf_gpu_event_sync(gs->up_done[slot], "an upload", err));
    int32_t *sizes = gs->up[slot], *lists = gs->up[slot] + nb;
    for (int64_t b = 0; b < nb; b++) {
        const struct cand *cd = &gs->cands[b];
        sizes[b] = cd->m;
        memcpy(lists + b * mb, gs->lists + (int64_t)cd->at * c->max_sphere, (size_t)cd->m * sizeof *lists);
        for (int64_t j = cd->m; j < mb; j++)
            lists[b * mb + j] = -1;
        gs->centres[slot][b] = cd->centre;
    }
    gs->nb[slot] = nb;
    /* dList[slot] was last read by that batch's gathers and solves */
    NF_TRY(rc = nf_gpu_stream_wait(g->copy, gs->done[slot], "ordering an upload", err));
    NF_TRY(rc = nf_gpu_upload(g->copy, gs->dList[slot], gs->up[slot], (size_t)(nb + nb * mb) * sizeof(int32_t),
                              "uploading sphere lists", err));
    NF_TRY(rc = nf_gpu_event_record(gs->up_done[slot], g->copy, err));
    NF_TRY(rc = nf_gpu_stream_wait(g->compute, gs->up_done[slot], "ordering a batch", err));
    const int32_t *dsize = gs->dList[slot], *dlist = gs->dList[slot] + nb;
    for (int64_t f = 0; f < k; f++) {
        const struct sl_fold *fd = &c->folds[f];
        const int64_t nt = fd->n_tr;
        int64_t d = 0;   /* the dual spheres: a prefix, since the batch is sorted */
        while (d < nb && gs->cands[d].m > nt)
            d++;
        NF_GPU_KL(nf_gpu_sl_gather(g->compute, gs->dX, c->V, gs->dRows + f * n, gs->dMean + f * c->V,
                                   gs->dInv + f * c->V, dlist, nb, n, mb, gs->dZ),
                  "the searchlight gather");
        NF_TRY(rc = nf_gpu_sgemm_batched(g, false, true, n, nt, mb, 1.0f, gs->dZ, mb, n * mb, gs->dZ, mb, n * mb,
                                         0.0f, gs->dG, nt, gs->g_stride, d, err));
        const int64_t mp = d < nb ? gs->cands[d].m : 1;
        NF_TRY(rc = nf_gpu_sgemm_batched(g, true, false, mp, mp, nt, 1.0f, gs->dZ + d * n * mb, mb, n * mb,
                                         gs->dZ + d * n * mb, mb, n * mb, 0.0f, gs->dG + d * gs->g_stride, mp,
                                         gs->g_stride, nb - d, err));
        NF_GPU_KL(nf_gpu_sl_solve(g->compute, nb, dsize, nt, fd->n_val, q, mb, mp, gs->S, gs->dZ, gs->dG, gs->g_stride,
                                  c->model->alpha, gs->dTc + f * c->max_tr * q, gs->dTmean + f * q, gs->dL, gs->dT,
                                  gs->dDec[slot] + f * B * gs->dec_ld, gs->dec_ld),
                  "the searchlight solve");
    }
    /* the decisions of all folds, k rows of nb x dec_ld floats */
    NF_TRY(rc = nf_gpu_download_2d(g->compute, gs->down[slot], (size_t)(nb * gs->dec_ld) * sizeof(float),
                                   gs->dDec[slot], (size_t)(B * gs->dec_ld) * sizeof(float),
                                   (size_t)(nb * gs->dec_ld) * sizeof(float), (size_t)k, "downloading decisions", err));
    NF_TRY(rc = nf_gpu_event_record(gs->done[slot], g->compute, err));
fail:
    return rc;
}

/* Commit every block from *next on that is complete: all its centres
 * enumerated (those before `enumerated`) and scored. Resumed blocks were
 * committed before. Centres are enumerated in order, so blocks complete in
 * order. */
static void commit_blocks(struct gsl *gs, int64_t *next, int64_t enumerated)
{
    const struct sl_ctx *c = gs->c;
    while (*next < c->n_blocks) {
        int64_t b = *next;
        if (!gs->w->done[b]) {
            if (b * c->block + nf_sl_block_len(c, b) > enumerated || gs->pending[b] > 0)
                break;
            nf_sl_block_finished(gs->w, b);
        }
        (*next)++;
    }
}

/* Host scoring of part of a batch by one thread: its own counts and
 * predictions scratch; each centre's map value is written by one thread. */
struct score_job {
    struct gsl *gs;
    int slot, t;
    int64_t b0, b1;
};

static void *score_range(void *arg)
{
    const struct score_job *j = arg;
    struct gsl *gs = j->gs;
    const struct sl_ctx *c = gs->c;
    const int64_t nb = gs->nb[j->slot];
    struct sl_counts *counts = gs->tcounts + (int64_t)j->t * c->n_blocks;
    double *pred = gs->pred + (int64_t)j->t * c->max_val;
    for (int64_t b = j->b0; b < j->b1; b++) {
        int64_t centre = gs->centres[j->slot][b];
        struct sl_counts *bc = &counts[centre / c->block];
        char why[256] = "";
        int64_t failed = bc->n_failed;
        gs->w->map[centre] = nf_sl_closed_centre(c, gs->down[j->slot] + b * gs->dec_ld, nb * gs->dec_ld, NULL,
                                                 pred, bc, why, sizeof why);
        if (bc->n_failed > failed)
            nf_sl_note_failure(gs->w, centre, why);   /* keeps the first in column order: any thread order */
    }
    return NULL;
}

/* Wait for the batch of `slot` and score its centres on the host (over the
 * node's threads: scoring is the host's largest share), then add the
 * threads' counts into the blocks'. */
static int finish_batch(struct gsl *gs, int slot, struct nf_error *err)
{
    const struct sl_ctx *c = gs->c;
    int rc = 0;
    NF_TRY(rc = nf_gpu_event_sync(gs->done[slot], "a searchlight batch", err));
    const int64_t nb = gs->nb[slot];
    /* a thread per 256 centres at least: starting one costs more than that */
    int threads = (int)(nb / 256 + 1 < gs->threads ? nb / 256 + 1 : gs->threads);
    struct score_job jobs[64];
    pthread_t tids[64];
    int started = 0;
    memset(gs->tcounts, 0, (size_t)(gs->threads * c->n_blocks) * sizeof *gs->tcounts);
    for (int t = 0; t < threads; t++)
        jobs[t] = (struct score_job){ gs, slot, t, nb * t / threads, nb * (t + 1) / threads };
    for (int t = 1; t < threads; t++) {
        if (pthread_create(&tids[t], NULL, score_range, &jobs[t]) != 0)
            break;
        started = t;
    }
    for (int t = started + 1; t < threads; t++)   /* threads that could not start: here */
        score_range(&jobs[t]);
    score_range(&jobs[0]);
    for (int t = 1; t <= started; t++)
        pthread_join(tids[t], NULL);
    for (int t = 0; t < threads; t++)
        for (int64_t b = 0; b < c->n_blocks; b++)
            gs->w->counts[b].n_failed += gs->tcounts[(int64_t)t * c->n_blocks + b].n_failed;
    for (int64_t b = 0; b < nb; b++)
        gs->pending[gs->centres[slot][b] / c->block]--;
    gs->nb[slot] = 0;
fail:
    return rc;
}

static void gsl_release(struct gsl *gs)
{
    for (int i = 0; i < 2; i++) {
        nf_gpu_event_destroy(gs->up_done[i]);
        nf_gpu_event_destroy(gs->done[i]);
        free(gs->centres[i]);
    }
    free(gs->cands);
    free(gs->lists);
    free(gs->pending);
    free(gs->tcounts);
    free(gs->pred);
}

/* Every centre of the blocks not resumed, in batches on the GPU. */
static int run_batches(const struct sl_ctx *c, struct sl_work *w, struct nf_gpu *g, int threads,
                       struct nf_error *err)
{
    struct gsl gs = { .c = c, .w = w, .threads = threads < 1 ? 1 : threads > 64 ? 64 : threads };
    int rc = 0;
    int64_t todo = 0;
    for (int64_t b = 0; b < c->n_blocks; b++)
        todo += w->done[b] ? 0 : nf_sl_block_len(c, b);
    gs.S = c->max_sphere < c->max_tr ? c->max_sphere : c->max_tr;
    /* primal Grams are at most S x S; dual ones (when a sphere can exceed a
     * fold's training rows) n x n_tr */
    gs.g_stride = gs.S * gs.S;
    if (c->max_sphere > c->min_tr && c->n * c->max_tr > gs.g_stride)
        gs.g_stride = c->n * c->max_tr;
    gs.dec_ld = c->max_val * c->n_out;
    gs.pending = nf_calloc((size_t)c->n_blocks, sizeof *gs.pending);
    gs.tcounts = nf_calloc((size_t)(gs.threads * c->n_blocks), sizeof *gs.tcounts);
    gs.pred = nf_malloc((size_t)(gs.threads * c->max_val) * sizeof *gs.pred);
    if (!gs.pending || !gs.tcounts || !gs.pred) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < 2; i++) {
        NF_TRY(rc = nf_gpu_event_create(&gs.up_done[i], err));
        NF_TRY(rc = nf_gpu_event_create(&gs.done[i], err));
    }
    NF_TRY(rc = setup_device(&gs, g, todo, w->run, err));
    int64_t committed = 0, n_batches = 0, nc = 0;
    int prev = -1;
    for (int64_t centre = 0; centre <= c->V; centre++) {
        bool last = centre == c->V;
        if (!last) {
            int64_t blk = centre / c->block;
            if (w->done[blk]) {
                /* skip the resumed block */
                centre = ((blk + 1) * c->block < c->V ? (blk + 1) * c->block : c->V) - 1;
                continue;
            }
            int32_t *list = gs.lists + nc * c->max_sphere;
            int64_t m = nf_sl_sphere(c, centre, list);
            if (nf_sl_centre_small(m, &w->counts[blk], &w->map[centre]))
                continue;   /* NaN, counted: nothing for the device */
            gs.cands[nc] = (struct cand){ centre, (int32_t)m, (int32_t)nc };
            gs.pending[blk]++;
            nc++;
        }
        if (nc == gs.B || (last && nc > 0)) {
            if (nf_run_interrupted(w->run)) {   /* between batches */
                rc = NF_FAIL(err, NF_EINTR, "interrupted");
                goto fail;
            }
            int slot = (int)(n_batches++ % 2);
            NF_TRY(rc = enqueue_batch(&gs, g, slot, nc, err));
            nc = 0;
            if (prev >= 0) {   /* the previous batch, while this one computes */
                NF_TRY(rc = finish_batch(&gs, prev, err));
                commit_blocks(&gs, &committed, last ? c->V : centre + 1);
            }
            prev = slot;
        }
    }
    if (prev >= 0)
        NF_TRY(rc = finish_batch(&gs, prev, err));
    commit_blocks(&gs, &committed, c->V);
fail:
    if (rc < 0)
        nf_gpu_drain(g);
    gsl_release(&gs);
    return rc;
}

int nf_searchlight_run_gpu(struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                           const struct nf_geom *geom, const double *y, int64_t n_classes,
                           const int64_t *fold_of, int64_t k, const struct nf_model_opts *model,
                           bool standardize, enum nf_scoring scoring, double radius_mm, int threads,
                           float *map, struct nf_sl_stats *stats, struct nf_error *err)
{
    const char *id = run ? nf_node_id(run->node) : NULL;
    struct sl_ctx c = { 0 };
    struct sl_work w = { 0 };
    struct nf_gpu *g = NULL;
    struct nf_error gpu_err = { 0 };
    int rc = 0;

    if (model->kind != NF_MODEL_RIDGE && model->kind != NF_MODEL_RIDGE_CLASSIFIER) {
        nf_warn(id, "the searchlight with model %s has no GPU path; running on the CPU (only ridge and "
                "ridge_classifier have one)", model->kind == NF_MODEL_SVM ? "svm" : "logistic");
        return nf_searchlight_run(run, X, n, V, ldx, geom, y, n_classes, fold_of, k, model, standardize, scoring,
                                  radius_mm, threads, map, stats, err);
    }
    NF_TRY(rc = nf_sl_begin(&c, run, X, n, V, ldx, geom, y, n_classes, fold_of, k, model, standardize, scoring,
                            radius_mm, err));
    if (!(g = nf_gpu_acquire(&gpu_err))) {
        nf_warn(id, "%s; running on the CPU", gpu_err.msg);
        nf_sl_ctx_release(&c);
        return nf_searchlight_run(run, X, n, V, ldx, geom, y, n_classes, fold_of, k, model, standardize, scoring,
                                  radius_mm, threads, map, stats, err);
    }
    NF_TRY(rc = nf_sl_work_init(&w, &c, run, map, err));
    if (w.blocks_finished < c.n_blocks)
        NF_TRY(rc = run_batches(&c, &w, g, threads, err));
    nf_sl_finish(&w, stats);
fail:
    nf_gpu_release(g);
    nf_sl_work_release(&w);
    nf_sl_ctx_release(&c);
    if (rc < 0 && run)
        nf_error_on_node(run->node, err, rc);
    return rc < 0 ? rc : 0;
}
