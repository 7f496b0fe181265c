/* searchlight.h — searchlight decoding for the `predict` node (mode:
 * searchlight): the sphere of in-mask voxels around every in-mask voxel, and a
 * cross-validated score per sphere, as nltools' BrainData.predict(spatial_scale=
 * 'searchlight') (reference/nltools-core.md §2).
 *
 * Spheres: for centre column i, every column j with ||c_i - c_j||² <= r² where
 * c = A[:3,:3] (i,j,k) + A[:3,3] is the voxel's world position (mm) under the
 * geometry's affine; the centre itself and the boundary are included. Columns
 * follow the geometry's order (nltools' C order), so sphere i is the sphere
 * around matrix column i.
 *
 * Scores: per sphere and fold, the model (StandardScaler fitted on the training
 * rows when `standardize`, then the learner of nodes/predict/predict_models.h) is fitted
 * on the training rows of the sphere's columns and scored on the validation rows;
 * the map holds the mean over folds. The folds are the caller's (one fold
 * assignment shared by all spheres: unlike nltools with random_state=None, every
 * sphere sees the same folds). ridge and ridge_classifier are solved for many
 * spheres at once in the dual (kernel) form with GEMMs; svm and logistic fit one
 * sphere at a time, spheres spread over threads. A sphere with fewer than 2
 * voxels, or whose fit fails, scores NaN (as nltools); these are counted and
 * reported once as a warning. Results do not depend on the thread count nor on
 * whether checkpoints were resumed.
 *
 * Ownership: the caller owns every array it passes; nf_sl_spheres_build fills
 * a caller-owned struct whose arrays it allocates and nf_sl_spheres_release
 * frees. nf_searchlight_run allocates only its own scratch.
 */
#ifndef NF_SEARCHLIGHT_H
#define NF_SEARCHLIGHT_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "node.h"
#include "predict/predict_models.h"
#include "core/value.h"

/* Spheres in CSR form: sphere i holds columns indices[indptr[i] .. indptr[i+1]),
 * sorted ascending, centre included. */
struct nf_sl_spheres {
    int64_t n_centres;     /* = geom->n_voxels */
    int64_t *indptr;       /* n_centres + 1 */
    int32_t *indices;      /* indptr[n_centres] entries */
    int64_t max_size;      /* largest sphere */
    int64_t n_offsets;     /* grid offsets within the radius (the full-sphere size) */
    bool sub_voxel;        /* radius smaller than the smallest voxel spacing:
                              every sphere is its centre alone */
};

/* Build the spheres of `geom` with radius `radius_mm` (> 0). The offsets
 * (di,dj,dk) within the radius are computed once from the affine (a general,
 * oblique or anisotropic affine gives the same offset set at every centre), then
 * each centre walks the offsets and keeps those that land in the mask.
 * NF_EDATA for a non-positive radius or an affine that is singular; NF_ENOMEM. */
int nf_sl_spheres_build(const struct nf_geom *geom, double radius_mm, struct nf_sl_spheres *s,
                        struct nf_error *err);
void nf_sl_spheres_release(struct nf_sl_spheres *s);

/* What a searchlight run met, for warnings and tests (may be ignored). */
struct nf_sl_stats {
    int64_t n_small;        /* centres whose sphere has fewer than 2 voxels (NaN) */
    int64_t n_failed;       /* centres whose fit failed (NaN) */
    int64_t n_unconverged;  /* svm/logistic fits that reached max_iter */
    int64_t n_resumed;      /* centres taken from checkpoints */
    int64_t max_sphere;     /* voxels in the largest sphere */
    double mean_sphere;     /* mean voxels per sphere */
};

/* The searchlight map.
 *   run        the predict node's run: checkpoints (run->ckpt), the node's id
 *              and location for messages and warnings. May be NULL (tests):
 *              then no checkpoints and messages name no node.
 *   X          n x V float32, row-major with leading dimension ldx >= V (the
 *              mask node's images x voxels matrix); V = geom->n_voxels.
 *   geom       the columns' geometry (world coordinates for the spheres).
 *   y          n targets: class index 0..n_classes-1 for classifiers (as
 *              double), the value for ridge.
 *   n_classes  number of classes (classifiers; ignored for ridge).
 *   fold_of    n fold numbers in 0..k-1 (from nf_folds_*); every fold must hold
 *              at least one row and leave at least 2 training rows.
 *   model      learner and its options (nf_model_defaults + C/alpha).
 *   standardize per-fold StandardScaler on each sphere's training columns.
 *   scoring    per-fold score (nf_score); NF_SCORE_AUTO: accuracy for
 *              classifiers, r2 for ridge.
 *   radius_mm  sphere radius in mm (> 0); smaller than the voxel size warns.
 *   threads    worker threads (>= 1); results are identical for any value.
 *   map        out: V floats, the mean fold score per centre (NaN: see above).
 *   stats      out, may be NULL.
 * Returns 0, or NF_EDATA / NF_ENOMEM / NF_EINTR with err filled (naming the
 * node when run != NULL). */
int nf_searchlight_run(struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                       const struct nf_geom *geom, const double *y, int64_t n_classes,
                       const int64_t *fold_of, int64_t k, const struct nf_model_opts *model,
                       bool standardize, enum nf_scoring scoring, double radius_mm, int threads,
                       float *map, struct nf_sl_stats *stats, struct nf_error *err);

#ifdef HAVE_CUDA
/* The same map on the GPU (nodes/searchlight/searchlight_gpu.c, CUDA builds), with the
 * same arguments, checks, messages, warnings and checkpoints: the closed forms
 * (ridge, ridge_classifier) run their Grams and solves on the device; svm and
 * logistic, or no usable GPU, warn and run nf_searchlight_run. The map equals
 * the CPU's except at centres where a decision value lies within float
 * round-off of a class boundary (docs/gpu.md); `threads` score on the host
 * (results do not depend on it). Device
 * failures return NF_EBUG or NF_ENOMEM (the engine then reruns the node on the
 * CPU). */
int nf_searchlight_run_gpu(struct nf_run *run, const float *X, int64_t n, int64_t V, int64_t ldx,
                           const struct nf_geom *geom, const double *y, int64_t n_classes,
                           const int64_t *fold_of, int64_t k, const struct nf_model_opts *model,
                           bool standardize, enum nf_scoring scoring, double radius_mm, int threads,
                           float *map, struct nf_sl_stats *stats, struct nf_error *err);
#endif

/* Searchlight spheres per GPU batch, at most (batches shrink to fit): the
 * solve kernel is one thread per sphere, so a batch needs tens of thousands
 * of spheres to keep the device's memory pipes busy; larger maps still get
 * several batches, whose host scoring overlaps the next batch. */
enum { NF_SEARCHLIGHT_GPU_BLOCK = 65536 };
/* The checkpoint blocks of a searchlight over V centres (each block's map
 * is committed when done; a SLURM part computes only its blocks). */
int64_t nf_searchlight_blocks(int64_t V);

/* Working bytes nf_searchlight_run needs beyond its inputs and the map, for the
 * node's estimate: an upper bound from the shapes alone (the sphere lists are
 * counted at the full-sphere size that radius_mm gives on a grid of spacing
 * voxel_mm, the smallest voxel size; voxel_mm <= 0 assumes 1 mm). */
uint64_t nf_searchlight_estimate(int64_t n, int64_t V, int64_t k, enum nf_model_kind kind,
                                 double radius_mm, double voxel_mm, int threads);

#endif
