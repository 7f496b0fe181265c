/* registry.c — the list of benchmark domains `nlflow bench` knows.
 *
 * The order here is the order of the report. sgemm comes first because every
 * other condition is compared with the SGEMM rate it measures. Domains whose
 * issue has not landed yet have no conditions: they are listed so that the
 * report says they are missing (and why) instead of silently omitting them.
 */
#include <string.h>

#include "bench.h"

const struct nf_bench_domain nf_bench_domains[] = {
    { "sgemm", "single-precision GEMM through the engine's CPU kernel table",
      "m x n x k", 0, nf_bench_sgemm_conditions, NULL, false },
    { "collection", "multi-subject 4D NIfTI: mask + per-voxel mean/std, lazy vs in memory; "
      "whole-brain load + mask (.nii, .nii.gz) against cat and read + inflate",
      "subjects x images x voxels (x grid side)", 0, nf_bench_collection_conditions,
      nf_bench_collection_notes, false },
    { "ridge", "ridge encoding models: 5-fold CV over 20 alphas, per-voxel alpha, refit",
      "samples x voxels x features", 0, nf_bench_ridge_conditions, nf_bench_ridge_notes, true },
    { "bootstrap", "bootstrapped ridge weights: n_boot refits (fixed alpha), mean, se, z, p, percentile interval",
      "samples x voxels x features x resamples", 0, nf_bench_bootstrap_conditions, nf_bench_bootstrap_notes, false },
    { "predict", "MVPA decoding: whole brain, ROIs, searchlight (vs scikit-learn on the same folds)",
      "images x voxels x folds x (parcels | radius mm)", 0, nf_bench_predict_conditions,
      nf_bench_predict_notes, false },
    { "inference", "permutation tests (sign flip, two-sample, correlation) with max-statistic FWE",
      "subjects x voxels x permutations", 0, nf_bench_inference_conditions, nf_bench_inference_notes, true },
    { "firstlevel", "first-level GLM of one run (AR(1), vs nilearn FirstLevelModel) and a BIDS study end to end",
      "frames x voxels x conditions x confounds | subjects x runs x images x mm", 0,
      nf_bench_firstlevel_conditions, nf_bench_firstlevel_notes, false },
    { "cache", "result cache: store and read a large float32 result, a fully cached rerun",
      "float32 values x row length", 0, nf_bench_cache_conditions, nf_bench_cache_notes, false },
    { "gpu", "GPU ridge and permute nodes next to the CPU nodes (CUDA builds with a GPU)",
      "n x voxels x features (ridge) | subjects x voxels x permutations", 0, nf_bench_gpu_conditions,
      nf_bench_gpu_notes, false },
    { NULL, NULL, NULL, 0, NULL, NULL, false },
};

const struct nf_bench_domain *nf_bench_domain_find(const char *name)
{
    for (const struct nf_bench_domain *d = nf_bench_domains; d->name; d++)
        if (strcmp(d->name, name) == 0)
            return d;
    return NULL;
}
