/* test_keys.c — cache keys are complete: a key changes exactly when what the
 * node produces changes.
 *
 * The property test walks every parameter of every node type in the registry.
 * For each there is a decision below: a small pipeline in which the parameter
 * has a base and another valid value, and whether the node's results must
 * change. Both versions are planned (keys, no cache) and run; the node's key
 * (its output keys) and a digest of what it produced (every output value's
 * bytes, labels and geometry, and every file the run wrote, by path relative
 * to the pipeline folder and content) are compared: the key must change if and
 * only if the results do, and the results must change as decided. A parameter
 * without a decision fails the test, so a new parameter must be decided.
 * Settings a node reads (seed) and settings that must not change results
 * (threads, memory, outputs for in-memory results, cache) are decided the same
 * way, and files a node reads by content (simulate's mask, load's labels) have
 * tests of their own.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "io/io.h"
#include "cache/keys.h"
#include "pipeline.h"
#include "core/util.h"

static char *tmpdir;

/* ---- pipelines of the decisions ---- */

/* The node under test is `t`; @P is replaced by its parameters. The data
 * folder (made once, by simulate) holds sub-0[1-3]/func/sub-0N_task-sim_bold.nii.gz,
 * mask.nii.gz, truth.nii.gz, atlas.nii.gz, design.tsv (f1 f2), labels.tsv
 * (trial_type target), copy/design.tsv (the same bytes as design.tsv) and
 * events.tsv (onset duration trial_type amp: one event 10 s before the first
 * frame, the others within the 16 frames). */
#define IMAGES "  bold: {type: load, path: data/sub-01/func/sub-01_task-sim_bold.nii.gz}\n" \
               "  brain: {type: load, path: data/mask.nii.gz}\n" \
               "  voxels: {type: mask, in: {data: bold, mask: brain}, standardize: zscore}\n"
#define CTX_SIM "  t: {type: simulate, @P}\n"
#define CTX_LOAD "  t: {type: load, @P}\n"
#define CTX_MASK IMAGES "  t: {type: mask, in: {data: bold, mask: brain}, @P}\n"
#define CTX_RIDGE IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                         "  t: {type: ridge, in: {X: x, Y: voxels}, @P}\n"
/* the score used: a fixed alpha cross-validates only then (else cv, score,
 * shuffle and seed change nothing) */
#define CTX_RIDGE_SCORED CTX_RIDGE "  s: {type: moments, in: {data: t.score}}\n"
#define CTX_BOOT IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                        "  t: {type: bootstrap, in: {X: x, Y: voxels}, @P}\n"
#define CTX_BOOT_DEC IMAGES "  y: {type: load, path: data/labels.tsv}\n" \
                            "  t: {type: bootstrap, in: {data: voxels, y: y}, @P}\n"
#define CTX_BOOT_DEC_NUM IMAGES "  y: {type: load, path: data/design.tsv}\n" \
                                "  t: {type: bootstrap, in: {data: voxels, y: y}, @P}\n"
#define CTX_BOOT_STAT IMAGES "  t: {type: bootstrap, in: {data: voxels}, @P}\n"
#define CTX_PERMUTE IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                           "  t: {type: permute, in: {data: voxels}, @P}\n"
#define CTX_PERMUTE_COV IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                               "  t: {type: permute, in: {data: voxels, covariate: x}, @P}\n"
#define CTX_PERMUTE_GROUPS IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                              "  t: {type: permute, in: {data: voxels, groups: x}, @P}\n"
#define CTX_PERMUTE_GLM IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                               "  y: {type: load, path: data/labels.tsv}\n" \
                               "  t: {type: permute, in: {data: voxels, design: x, blocks: y}, @P}\n"
/* the cluster outputs are computed only when read: a node reads one */
#define CTX_PERMUTE_GLM_CLUSTERS CTX_PERMUTE_GLM "  s: {type: moments, in: {data: t.cluster_mass_p_fwe}}\n"
#define CTX_PREDICT IMAGES "  y: {type: load, path: data/labels.tsv}\n" \
                           "  t: {type: predict, in: {X: voxels, y: y}, @P}\n"
#define CTX_PREDICT_NUM IMAGES "  y: {type: load, path: data/design.tsv}\n" \
                               "  t: {type: predict, in: {X: voxels, y: y}, @P}\n"
#define CTX_SUMMARIZE "  brain: {type: load, path: data/mask.nii.gz}\n" \
                      "  truth: {type: load, path: data/truth.nii.gz}\n" \
                      "  atlas: {type: load, path: data/atlas.nii.gz}\n" \
                      "  m: {type: mask, in: {data: truth, mask: brain}}\n" \
                      "  a: {type: mask, in: {data: atlas, mask: brain}}\n" \
                      "  t: {type: summarize, in: {m: m, a: a, p: a}, @P}\n"
#define CTX_SUMMARIZE_ATLAS "  brain: {type: load, path: data/mask.nii.gz}\n" \
                            "  truth: {type: load, path: data/truth.nii.gz}\n" \
                            "  atlas: {type: load, path: data/atlas.nii.gz}\n" \
                            "  m: {type: mask, in: {data: truth, mask: brain}}\n" \
                            "  t: {type: summarize, in: {atlas: atlas, m: m}, @P}\n"
#define CTX_FAULT "  t: {type: debug_fault, @P}\n"
#define CTX_REPORT "  brain: {type: load, path: data/mask.nii.gz}\n" \
                   "  truth: {type: load, path: data/truth.nii.gz}\n" \
                   "  m: {type: mask, in: {data: truth, mask: brain}}\n" \
                   "  t: {type: report, in: {m: m}, @P}\n"
#define CTX_DESIGN IMAGES "  ev: {type: load, path: data/events.tsv}\n" \
                          "  cf: {type: load, path: data/design.tsv}\n" \
                          "  t: {type: design, in: {events: ev, frames: voxels, confounds: cf}, @P}\n"
#define CTX_SELECT IMAGES "  x: {type: load, path: data/design.tsv}\n" \
                          "  r: {type: ridge, in: {X: x, Y: voxels}, alpha: 1}\n" \
                          "  t: {type: select, in: {data: r.weights}, @P}\n"
#define CTX_GLM IMAGES "  ev: {type: load, path: data/events.tsv}\n" \
                       "  d: {type: design, in: {events: ev, frames: voxels}, tr: 2}\n" \
                       "  t: {type: glm, in: {X: d.X, Y: voxels}, @P}\n"
#define CTX_SMOOTH IMAGES "  t: {type: smooth, in: {data: bold}, @P}\n"
#define CTX_RESAMPLE IMAGES "  grid: {type: simulate, images: 2, voxel_size: 7, mask: synthetic}\n" \
                            "  t: {type: resample, in: {data: bold, to: grid.mask}, @P}\n"
#define CTX_MOMENTS IMAGES "  t: {type: moments, in: {data: voxels}@P}\n"

#define CTX_BIDS "  t: {type: bids, @P}\n"
#define DERIV "derivatives: data/bids/derivatives/fmriprep"

#define CTX_FX "  r: {type: bids, root: data/bids, " DERIV "}\n" \
               "  v: {type: mask, in: {data: r.bold, mask: r.mask}}\n" \
               "  t: {type: fixed_effects, in: {effect: v, variance: v}, @P}\n"

/* group_design: the simulated subjects' images (only their labels matter)
 * and a participants table with a second id column in another order */
#define CTX_GD "  m: {type: load, path: data/sub-*/func/*_bold.nii.gz}\n" \
               "  pt: {type: load, path: data/participants.tsv}\n" \
               "  t: {type: group_design, in: {participants: pt, maps: m}, @P}\n"

#define SIM "images: 12, voxel_size: 10, mask: synthetic"
#define PERM "n_permutations: 200"
#define SEED "seed: 7"

struct decision {
    const char *type, *param;     /* a parameter, or a setting ("settings.seed") */
    const char *ctx;
    const char *common;           /* parameters of both versions ("" none) */
    const char *base, *alt;       /* the parameter's two values (or settings) */
    bool changes;                 /* must the results (and the key) change? */
    const char *alt_ctx;          /* the other version's pipeline when the value
                                     needs other wiring (NULL: ctx) */
};

/* Settings of both versions unless the decision is about a setting. */
#define SETTINGS "seed: 7, outputs: out, cache: off"

static const struct decision decisions[] = {
    /* load: the path is not keyed (content is); the other files' bytes are */
    { "load", "path", CTX_LOAD, "", "path: data/design.tsv", "path: data/copy/design.tsv", false, NULL },
    { "load", "columns", CTX_LOAD, "path: data/design.tsv", "columns: [f1, f2]", "columns: [f2]", true, NULL },
    { "load", "lazy", CTX_LOAD, "path: data/sub-*/func/*_bold.nii.gz", "lazy: true", "lazy: false", false, NULL },
    { "mask", "standardize", CTX_MASK, "", "standardize: none", "standardize: zscore", true, NULL },
    { "bootstrap", "n_boot", CTX_BOOT, "seed: 3", "n_boot: 40", "n_boot: 41", true, NULL },
    { "bootstrap", "alpha", CTX_BOOT, "n_boot: 40", "alpha: 1", "alpha: 30", true, NULL },
    { "bootstrap", "fit_intercept", CTX_BOOT, "n_boot: 40", "fit_intercept: false", "fit_intercept: true", true, NULL },
    { "bootstrap", "ci", CTX_BOOT, "n_boot: 40", "ci: 0.95", "ci: 0.5", true, NULL },
    { "bootstrap", "ci_method", CTX_BOOT, "n_boot: 40", "ci_method: percentile", "ci_method: normal", true, NULL },
    { "bootstrap", "seed", CTX_BOOT, "n_boot: 40", "seed: 1", "seed: 2", true, NULL },
    { "bootstrap", "chunk", CTX_BOOT, "n_boot: 40, seed: 1", "chunk: 0", "chunk: 16", false, NULL },
    /* the decoders' parameters: keyed for a decoder, not for model ridge (whose
     * keys they leave as they were), and ridge's not for a decoder */
    { "bootstrap", "model", CTX_BOOT_DEC, "n_boot: 40", "model: svm", "model: logistic", true, NULL },
    { "bootstrap", "C", CTX_BOOT_DEC, "n_boot: 40, model: svm", "C: 1", "C: 0.001", true, NULL },
    { "bootstrap", "C", CTX_BOOT, "n_boot: 40", "C: 1", "C: 0.001", false, NULL },
    { "bootstrap", "C", CTX_BOOT_DEC, "n_boot: 40, model: ridge_classifier", "C: 1", "C: 0.001", false, NULL },
    { "bootstrap", "alpha", CTX_BOOT_DEC, "n_boot: 40, model: ridge_classifier", "alpha: 1", "alpha: 1000", true, NULL },
    { "bootstrap", "alpha", CTX_BOOT_DEC, "n_boot: 40, model: svm", "alpha: 1", "alpha: 1000", false, NULL },
    { "bootstrap", "fit_intercept", CTX_BOOT_DEC, "n_boot: 40, model: svm", "fit_intercept: false", "fit_intercept: true", false, NULL },
    { "bootstrap", "standardize", CTX_BOOT_DEC, "n_boot: 40, model: svm", "standardize: true", "standardize: false", true, NULL },
    { "bootstrap", "standardize", CTX_BOOT, "n_boot: 40", "standardize: true", "standardize: false", false, NULL },
    { "bootstrap", "reduce", CTX_BOOT_DEC, "n_boot: 40, model: svm", "reduce: 0", "reduce: {pca: 3}", true, NULL },
    { "bootstrap", "reduce", CTX_BOOT, "n_boot: 40", "reduce: 0", "reduce: {pca: 3}", false, NULL },
    { "bootstrap", "target", CTX_BOOT_DEC_NUM, "n_boot: 40, model: ridge_regressor", "target: f1", "target: f2", true, NULL },
    { "bootstrap", "target", CTX_BOOT, "n_boot: 40", "target: f1", "target: f2", false, NULL },
    /* a statistic of data's rows: stat is keyed then (and not for the weights), the models' parameters not */
    { "bootstrap", "stat", CTX_BOOT_STAT, "n_boot: 40", "stat: mean", "stat: median", true, NULL },
    { "bootstrap", "alpha", CTX_BOOT_STAT, "n_boot: 40, stat: std", "alpha: 1", "alpha: 1000", false, NULL },
    { "bootstrap", "standardize", CTX_BOOT_STAT, "n_boot: 40, stat: std", "standardize: true", "standardize: false", false, NULL },
    { "bootstrap", "ci", CTX_BOOT_STAT, "n_boot: 40, stat: max", "ci: 0.95", "ci: 0.5", true, NULL },
    { "ridge", "alphas", CTX_RIDGE, "cv: 2", "alphas: [0.1, 1, 10]", "alphas: [1000, 10000]", true, NULL },
    { "ridge", "alpha", CTX_RIDGE, "cv: 2", "alpha: 1", "alpha: 50", true, NULL },
    { "ridge", "cv", CTX_RIDGE_SCORED, "alpha: 1", "cv: 2", "cv: 3", true, NULL },
    { "ridge", "alpha_mode", CTX_RIDGE, "cv: 2, alphas: [0.01, 1, 100, 10000]", "alpha_mode: per_voxel",
      "alpha_mode: shared", true, NULL },
    { "ridge", "fit_intercept", CTX_RIDGE, "cv: 2, alpha: 1", "fit_intercept: false", "fit_intercept: true", true, NULL },
    { "ridge", "score", CTX_RIDGE_SCORED, "cv: 2, alpha: 1", "score: r2", "score: pearson", true, NULL },
    { "ridge", "shuffle", CTX_RIDGE_SCORED, "cv: 2, alpha: 1", "shuffle: false", "shuffle: true", true, NULL },
    { "ridge", "seed", CTX_RIDGE_SCORED, "cv: 2, alpha: 1, shuffle: true", "seed: 1", "seed: 2", true, NULL },
    /* without shuffling the seed is not used: not keyed (param_matters) */
    { "ridge", "bands", CTX_RIDGE, "cv: 2, n_iter: 3", "bands: ['all = f1, f2']", "bands: {u: [f1], v: [f2]}", true, NULL },
    { "ridge", "n_iter", CTX_RIDGE, "cv: 2, bands: {u: [f1], v: [f2]}", "n_iter: 2", "n_iter: 6", true, NULL },
    { "ridge", "concentration", CTX_RIDGE, "cv: 2, n_iter: 6, bands: {u: [f1], v: [f2]}", "concentration: [0.1, 1]",
      "concentration: 5", true, NULL },
    { "ridge", "candidates", CTX_RIDGE, "cv: 2, n_iter: 3, bands: {u: [f1], v: [f2]}", "candidates: random",
      "candidates: grid", true, NULL },
    { "ridge", "grid_steps", CTX_RIDGE, "cv: 2, candidates: grid, bands: {u: [f1], v: [f2]}", "grid_steps: 2",
      "grid_steps: 3", true, NULL },
    { "ridge", "gammas", CTX_RIDGE, "cv: 2, bands: {u: [f1], v: [f2]}", "gammas: [0.5, 0.5]",
      "gammas: [0.9, 0.1, 0.1, 0.9]", true, NULL },
    { "ridge", "seed (no shuffle)", CTX_RIDGE, "cv: 2, alpha: 1", "seed: 1", "seed: 2", false, NULL },
    { "permute", "test", CTX_PERMUTE_COV, PERM ", column: f1", "test: correlation", "test: two_sample", true,
      CTX_PERMUTE_GROUPS },
    { "permute", "stat", CTX_PERMUTE, PERM, "stat: mean", "stat: t", true, NULL },
    { "permute", "tail", CTX_PERMUTE, PERM, "tail: two", "tail: upper", true, NULL },
    { "permute", "n_permutations", CTX_PERMUTE, "", "n_permutations: 200", "n_permutations: 300", true, NULL },
    { "permute", "seed", CTX_PERMUTE, PERM, "seed: 1", "seed: 2", true, NULL },
    { "permute", "method", CTX_PERMUTE_COV, PERM ", test: correlation", "method: pearson", "method: spearman", true, NULL },
    { "permute", "exact", CTX_PERMUTE, "n_permutations: 70000, stat: t", "exact: auto", "exact: never", true, NULL },
    { "permute", "column", CTX_PERMUTE_COV, PERM ", test: correlation", "column: f1", "column: f2", true, NULL },
    { "permute", "chunk", CTX_PERMUTE, PERM, "chunk: 50", "chunk: 70", false, NULL },
    { "permute", "tfce", CTX_PERMUTE, PERM, "tfce: false", "tfce: true", true, NULL },
    { "permute", "tfce_e", CTX_PERMUTE, PERM ", tfce: true", "tfce_e: 0.5", "tfce_e: 1", true, NULL },
    { "permute", "tfce_h", CTX_PERMUTE, PERM ", tfce: true", "tfce_h: 2", "tfce_h: 1.5", true, NULL },
    { "permute", "tfce_steps", CTX_PERMUTE, PERM ", tfce: true", "tfce_steps: 100", "tfce_steps: 50", true, NULL },
    { "permute", "connectivity", CTX_PERMUTE, PERM ", tfce: true", "connectivity: 6", "connectivity: 26", true, NULL },
    /* without tfce its options are not used: not keyed (param_matters) */
    { "permute", "tfce_e (no tfce)", CTX_PERMUTE, PERM, "tfce_e: 0.5", "tfce_e: 1", false, NULL },
    { "permute", "tfce_h (no tfce)", CTX_PERMUTE, PERM, "tfce_h: 2", "tfce_h: 1.5", false, NULL },
    { "permute", "tfce_steps (no tfce)", CTX_PERMUTE, PERM, "tfce_steps: 100", "tfce_steps: 50", false, NULL },
    { "permute", "connectivity (no tfce)", CTX_PERMUTE, PERM, "connectivity: 6", "connectivity: 26", false, NULL },
    { "permute", "cluster_threshold", CTX_PERMUTE, PERM ", stat: t", "cluster_threshold: 2", "cluster_threshold: 3",
      true, NULL },
    { "permute", "cluster_p", CTX_PERMUTE, PERM ", stat: t", "cluster_p: 0.01", "cluster_p: 0.001", true, NULL },
    /* test: glm (blocks from labels.tsv: trial_type two blocks, target one subject each) */
    { "permute", "contrasts", CTX_PERMUTE_GLM, PERM ", test: glm", "contrasts: [\"c = f1\"]",
      "contrasts: [\"c = f2\"]", true, NULL },
    { "permute", "f_contrasts", CTX_PERMUTE_GLM, PERM ", test: glm", "f_contrasts: [\"f = f1; f2\"]",
      "f_contrasts: [\"f = f1\"]", true, NULL },
    { "permute", "f_cluster_threshold", CTX_PERMUTE_GLM_CLUSTERS, PERM ", test: glm, f_contrasts: [\"f = f1; f2\"]",
      "f_cluster_threshold: 1", "f_cluster_threshold: 3", true, NULL },
    { "permute", "exchange", CTX_PERMUTE_GLM, PERM ", test: glm, contrasts: [\"c = f1\"]", "exchange: permute",
      "exchange: both", true, NULL },
    { "permute", "blocks_column", CTX_PERMUTE_GLM, PERM ", test: glm, contrasts: [\"c = f1\"]",
      "blocks_column: trial_type", "blocks_column: target", true, NULL },
    { "permute", "whole_blocks", CTX_PERMUTE_GLM, PERM ", test: glm, contrasts: [\"c = f1\"], blocks_column: target",
      "whole_blocks: false", "whole_blocks: true", true, NULL },
    /* Smith's nulls differ where a draw moves f2, the nuisance; Freedman-Lane keeps its old key */
    { "permute", "nuisance_method", CTX_PERMUTE_GLM, PERM ", test: glm, contrasts: [\"c = f1\"]",
      "nuisance_method: freedman_lane", "nuisance_method: smith", true, NULL },
    /* the GLM's parameters do not matter to the other tests, nor stat to the GLM */
    { "permute", "exchange (not glm)", CTX_PERMUTE, PERM, "exchange: permute", "exchange: both", false, NULL },
    { "permute", "whole_blocks (not glm)", CTX_PERMUTE, PERM, "whole_blocks: false", "whole_blocks: true", false, NULL },
    { "permute", "nuisance_method (not glm)", CTX_PERMUTE, PERM, "nuisance_method: freedman_lane",
      "nuisance_method: smith", false, NULL },
    { "permute", "stat (glm)", CTX_PERMUTE_GLM, PERM ", test: glm, contrasts: [\"c = f1\"]", "stat: mean", "stat: t",
      false, NULL },
    { "predict", "mode", CTX_PREDICT, "cv: 2", "mode: whole_brain", "mode: searchlight", true, NULL },
    { "predict", "model", CTX_PREDICT, "cv: 2", "model: svm", "model: logistic", true, NULL },
    { "predict", "cv", CTX_PREDICT, "", "cv: 2", "cv: 4", true, NULL },
    { "predict", "seed", CTX_PREDICT, "cv: 2", "seed: 1", "seed: 2", true, NULL },
    { "predict", "scoring", CTX_PREDICT, "cv: 2", "scoring: accuracy", "scoring: auc", true, NULL },
    { "predict", "standardize", CTX_PREDICT, "cv: 2", "standardize: true", "standardize: false", true, NULL },
    { "predict", "reduce", CTX_PREDICT, "cv: 2", "reduce: 0", "reduce: {pca: 3}", true, NULL },
    { "predict", "radius", CTX_PREDICT, "cv: 2, mode: searchlight", "radius: 10", "radius: 25", true, NULL },
    { "predict", "C", CTX_PREDICT, "cv: 2", "C: 1", "C: 0.001", true, NULL },
    { "predict", "alpha", CTX_PREDICT, "cv: 2, model: ridge_classifier", "alpha: 1", "alpha: 1000", true, NULL },
    { "predict", "target", CTX_PREDICT_NUM, "cv: 2, model: ridge", "target: f1", "target: f2", true, NULL },
    { "simulate", "subjects", CTX_SIM, SIM, "subjects: 2", "subjects: 3", true, NULL },
    { "simulate", "images", CTX_SIM, "voxel_size: 10, mask: synthetic", "images: 12", "images: 14", true, NULL },
    { "simulate", "features", CTX_SIM, SIM, "features: 1", "features: 2", true, NULL },
    { "simulate", "mask", CTX_SIM, "images: 12, voxel_size: 10", "mask: synthetic", "mask: data/truth.nii.gz", true, NULL },
    { "simulate", "voxel_size", CTX_SIM, "images: 12, mask: synthetic", "voxel_size: 10", "voxel_size: 8", true, NULL },
    { "simulate", "effect_size", CTX_SIM, SIM, "effect_size: 1", "effect_size: 2", true, NULL },
    { "simulate", "noise", CTX_SIM, SIM, "noise: 1", "noise: 0.5", true, NULL },
    { "simulate", "roi_center", CTX_SIM, SIM, "roi_center: [40, -20, 40]", "roi_center: [0, 0, 0]", true, NULL },
    { "simulate", "roi_radius", CTX_SIM, SIM, "roi_radius: 10", "roi_radius: 30", true, NULL },
    { "simulate", "seed", CTX_SIM, SIM, "seed: 1", "seed: 2", true, NULL },
    { "simulate", "write", CTX_SIM, SIM, "write: w1", "write: w2", true, NULL },   /* files elsewhere */
    { "simulate", "bids", CTX_SIM, SIM, "bids: w1", "bids: w2", true, NULL },   /* files elsewhere */
    { "simulate", "runs", CTX_SIM, SIM ", bids: w1", "runs: 1", "runs: 2", true, NULL },
    /* whether simulate may write into a folder it did not make: the data are the same */
    { "simulate", "overwrite", CTX_SIM, SIM ", write: w1", "overwrite: false", "overwrite: true", false, NULL },
    /* runs belong to the task data set, features to the regression one (param_matters) */
    { "simulate", "runs (no bids)", CTX_SIM, SIM, "runs: 1", "runs: 2", false, NULL },
    { "simulate", "features (bids)", CTX_SIM, SIM ", bids: w1", "features: 1", "features: 3", false, NULL },
    /* bids: no parameter is keyed; the files it selects (content, labels) are.
     * data/bids2 has another seed, data/bses sessions 1 and 2 of the same
     * files, data/bmix tasks localizer and other of the same files, and
     * data/bids a desc-smooth copy of sub-01 run 1's preprocessed image */
    { "fixed_effects", "precision_weighted", CTX_FX, "", "precision_weighted: false", "precision_weighted: true",
      true, NULL },
    { "fixed_effects", "dof", CTX_FX, "", "dof: 100", "dof: 3", true, NULL },
    { "group_design", "columns", CTX_GD, "", "columns: [age]", "columns: [age, sex]", true, NULL },
    { "group_design", "categorical", CTX_GD, "columns: [age, site]", "", "categorical: [site]", true, NULL },
    { "group_design", "demean", CTX_GD, "columns: [age]", "demean: true", "demean: false", true, NULL },
    { "group_design", "intercept", CTX_GD, "columns: [age]", "intercept: true", "intercept: false", true, NULL },
    { "group_design", "id_column", CTX_GD, "columns: [age]", "id_column: participant_id", "id_column: code", true,
      NULL },
    { "bids", "root", CTX_BIDS, "", "root: data/bids", "root: data/bids2", true, NULL },
    { "bids", "derivatives", CTX_BIDS, "root: data/bids", "", DERIV, true, NULL },
    { "bids", "subjects", CTX_BIDS, "root: data/bids", "subjects: ['01']", "subjects: ['0*']", true, NULL },
    { "bids", "sessions", CTX_BIDS, "root: data/bses", "sessions: ['1']", "sessions: ['2']", true, NULL },
    { "bids", "task", CTX_BIDS, "root: data/bmix", "task: localizer", "task: other", true, NULL },
    { "bids", "runs", CTX_BIDS, "root: data/bids", "runs: ['1']", "runs: ['2']", true, NULL },
    { "bids", "space", CTX_BIDS, "root: data/bids, " DERIV, "", "space: MNI152NLin2009cAsym", false, NULL },
    { "bids", "desc", CTX_BIDS, "root: data/bids, subjects: ['01'], runs: ['1'], " DERIV, "desc: preproc",
      "desc: smooth", false, NULL },
    { "bids", "require", CTX_BIDS, "root: data/bids, " DERIV, "require: [events]",
      "require: [events, confounds, mask]", false, NULL },
    /* summarize writes files: every change of the pipeline changes its
     * provenance (dataset_description.json), so it always reruns */
    { "summarize", "threshold", CTX_SUMMARIZE, "threshold_key: m", "threshold: 0.5", "threshold: 1.5", true, NULL },
    { "summarize", "threshold_key", CTX_SUMMARIZE, "threshold: 0.5", "threshold_key: m", "threshold_key: a", true, NULL },
    { "summarize", "tail", CTX_SUMMARIZE, "threshold: 0.5, threshold_key: m", "tail: two", "tail: lower", true, NULL },
    { "summarize", "p_below", CTX_SUMMARIZE, "threshold_key: m", "p_below: 0.5", "p_below: 0.01", true, NULL },
    { "summarize", "p_key", CTX_SUMMARIZE, "threshold_key: m, p_below: 0.5", "p_key: p", "p_key: m", true, NULL },
    { "summarize", "min_cluster_size", CTX_SUMMARIZE, "threshold: 0.5, threshold_key: m", "min_cluster_size: 1",
      "min_cluster_size: 1000", true, NULL },
    { "summarize", "name", CTX_SUMMARIZE, "", "name: one", "name: two", true, NULL },
    { "summarize", "atlas_labels", CTX_SUMMARIZE_ATLAS, "threshold: 0.5, threshold_key: m",
      "atlas_labels: data/names1.txt", "atlas_labels: data/names2.txt", true, NULL },
    /* fsl: randomise's names under fsl/ as well (threshold_key names the statistic) */
    { "summarize", "naming", CTX_SUMMARIZE, "threshold: 0.5, threshold_key: m", "naming: bids",
      "naming: fsl", true, NULL },
    /* report writes a page: like summarize, it reruns when anything changes */
    { "report", "title", CTX_REPORT, "template: none", "title: one", "title: two", true, NULL },
    { "report", "name", CTX_REPORT, "template: none", "name: one", "name: two", true, NULL },
    { "report", "threshold", CTX_REPORT, "template: none", "threshold: 0", "threshold: 0.3", true, NULL },
    { "report", "p_below", CTX_REPORT, "template: none", "p_below: 0.05", "p_below: 0.01", true, NULL },
    { "report", "p_key", CTX_REPORT, "template: none", "mosaic: 12", "p_key: m", true, NULL },
    { "report", "min_cluster_size", CTX_REPORT, "template: none", "min_cluster_size: 1", "min_cluster_size: 3", true, NULL },
    { "report", "template", CTX_REPORT, "", "template: none", "template: data/truth.nii.gz", true, NULL },
    { "report", "mosaic", CTX_REPORT, "template: none", "mosaic: 4", "mosaic: 6", true, NULL },
    /* where an input was made is printed under its heading */
    { "report", "sources", CTX_REPORT, "template: none", "sources: [m=mask.out]", "sources: [m=simulate.truth]", true,
      NULL },
    { "report", "rebuilt_from", CTX_REPORT, "template: none", "", "rebuilt_from: results/old", true, NULL },
    { "debug_fault", "chunks", CTX_FAULT, "", "chunks: 3", "chunks: 4", true, NULL },
    { "debug_fault", "chunk_size", CTX_FAULT, "", "chunk_size: 10", "chunk_size: 20", true, NULL },
    { "debug_fault", "seed", CTX_FAULT, "", "seed: 1", "seed: 2", true, NULL },
    { "debug_fault", "fail_after", CTX_FAULT, "", "fail_after: -1", "fail_after: 100", false, NULL },
    { "debug_fault", "kill_after", CTX_FAULT, "", "kill_after: -1", "kill_after: 100", false, NULL },
    /* settings: the seed is read by every node that draws (NF_PF_SEED) */
    { "simulate", "settings.seed", CTX_SIM, SIM, "seed: 1, outputs: out, cache: off",
      "seed: 2, outputs: out, cache: off", true, NULL },
    { "ridge", "settings.seed", CTX_RIDGE_SCORED, "cv: 2, alpha: 1, shuffle: true", "seed: 1, outputs: out",
      "seed: 2, outputs: out", true, NULL },
    { "ridge", "settings.seed (no shuffle)", CTX_RIDGE, "cv: 2, alpha: 1", "seed: 1, outputs: out",
      "seed: 2, outputs: out", false, NULL },
    { "bootstrap", "settings.seed", CTX_BOOT, "n_boot: 40", "seed: 1, outputs: out", "seed: 2, outputs: out", true, NULL },
    { "bootstrap", "settings.threads", CTX_BOOT, "n_boot: 40", SEED ", threads: 1", SEED ", threads: 2", false, NULL },
    { "permute", "settings.seed", CTX_PERMUTE, PERM, "seed: 1, outputs: out", "seed: 2, outputs: out", true, NULL },
    { "predict", "settings.seed", CTX_PREDICT, "cv: 2", "seed: 1, outputs: out", "seed: 2, outputs: out", true, NULL },
    /* settings that must not change results */
    { "permute", "settings.threads", CTX_PERMUTE, PERM ", stat: t", SEED ", threads: 1", SEED ", threads: 2", false, NULL },
    { "ridge", "settings.threads", CTX_RIDGE, "cv: 2", SEED ", threads: 1", SEED ", threads: 2", false, NULL },
    { "predict", "settings.threads", CTX_PREDICT, "cv: 2, mode: searchlight", SEED ", threads: 1",
      SEED ", threads: 2", false, NULL },
    { "permute", "settings.memory", CTX_PERMUTE, PERM, SEED ", memory: 4GiB", SEED ", memory: 96MiB", false, NULL },
    { "ridge", "settings.memory", CTX_RIDGE, "cv: 2", SEED ", memory: 4GiB", SEED ", memory: 96MiB", false, NULL },
    { "ridge", "settings.outputs", CTX_RIDGE, "cv: 2", SEED ", outputs: out", SEED ", outputs: out2", false, NULL },
    { "ridge", "settings.cache", CTX_RIDGE, "cv: 2", SEED ", cache: off", SEED ", cache: c/cache.db", false, NULL },
    { "ridge", "settings.device", CTX_RIDGE, "cv: 2", SEED ", device: cpu", SEED ", device: auto", false, NULL },
    { "moments", "(none)", CTX_MOMENTS, "", "", "", false, NULL },
    { "select", "row", CTX_SELECT, "", "row: f1", "row: f2", true, NULL },
    { "design", "hrf", CTX_DESIGN, "tr: 2", "hrf: glover", "hrf: spm + derivative", true, NULL },
    { "design", "fir_delays", CTX_DESIGN, "tr: 2, hrf: fir", "fir_delays: [0]", "fir_delays: [0, 2]", true, NULL },
    /* delays are read by the fir model only (param_matters) */
    { "design", "fir_delays (not fir)", CTX_DESIGN, "tr: 2", "fir_delays: [0]", "fir_delays: [2]", false, NULL },
    { "design", "drift", CTX_DESIGN, "tr: 2", "drift: cosine", "drift: polynomial", true, NULL },
    { "design", "high_pass", CTX_DESIGN, "tr: 2", "high_pass: 0.01", "high_pass: 0.05", true, NULL },
    { "design", "high_pass (polynomial)", CTX_DESIGN, "tr: 2, drift: polynomial", "high_pass: 0.01",
      "high_pass: 0.05", false, NULL },
    { "design", "drift_order", CTX_DESIGN, "tr: 2, drift: polynomial", "drift_order: 1", "drift_order: 3", true, NULL },
    { "design", "oversampling", CTX_DESIGN, "tr: 2", "oversampling: 50", "oversampling: 10", true, NULL },
    { "design", "min_onset", CTX_DESIGN, "tr: 2", "min_onset: -24", "min_onset: -4", true, NULL },
    { "design", "slice_time_ref", CTX_DESIGN, "tr: 2", "slice_time_ref: 0", "slice_time_ref: 0.5", true, NULL },
    { "design", "tr", CTX_DESIGN, "", "tr: 2", "tr: 2.5", true, NULL },
    { "design", "confound_columns", CTX_DESIGN, "tr: 2", "confound_columns: [f1]", "confound_columns: [f*]", true, NULL },
    { "design", "modulation", CTX_DESIGN, "tr: 2", "", "modulation: amp", true, NULL },
    { "glm", "noise", CTX_GLM, "contrasts: [d = a - b]", "noise: ar1", "noise: ols", true, NULL },
    { "glm", "scaling", CTX_GLM, "contrasts: [d = a - b]", "scaling: mean", "scaling: none", true, NULL },
    { "glm", "contrasts", CTX_GLM, "", "contrasts: [d = a - b]", "contrasts: [d = a + b]", true, NULL },
    { "smooth", "fwhm", CTX_SMOOTH, "", "fwhm: 6", "fwhm: [6, 6, 12]", true, NULL },
    { "resample", "interpolation", CTX_RESAMPLE, "", "interpolation: linear", "interpolation: nearest", true, NULL },
};

/* ---- digests ---- */

static void feed(XXH3_state_t *st, const void *p, size_t n) { XXH3_128bits_update(st, p, n); }
static void feed_str(XXH3_state_t *st, const char *s) { feed(st, s ? s : "(null)", s ? strlen(s) + 1 : 7); }

static void feed_grid(XXH3_state_t *st, const struct nf_grid *g)
{
    feed(st, g->dim, sizeof g->dim);
    feed(st, g->affine, sizeof g->affine);
}

/* Everything a consumer of the value can see. */
static void feed_value(XXH3_state_t *st, struct nf_value *v)
{
    if (!v) {
        feed_str(st, "absent");
        return;
    }
    feed(st, &v->kind, sizeof v->kind);
    feed_str(st, v->label);
    switch (v->kind) {
    case NF_KIND_VOLUME: {
        struct nf_error err = { 0 };
        struct nf_value *m = v->u.vol.lazy ? nf_value_materialize(v, &err) : nf_value_ref(v);
        assert_non_null(m);
        feed_grid(st, &m->u.vol.grid);
        feed(st, &m->u.vol.nt, sizeof m->u.vol.nt);
        feed(st, m->u.vol.data, (size_t)(nf_grid_nvox(&m->u.vol.grid) * m->u.vol.nt) * sizeof(float));
        nf_value_unref(m);
        break;
    }
    case NF_KIND_MATRIX:
        feed(st, &v->u.mat.rows, sizeof v->u.mat.rows);
        feed(st, &v->u.mat.cols, sizeof v->u.mat.cols);
        feed(st, v->u.mat.data, (size_t)(v->u.mat.rows * v->u.mat.cols) * sizeof(float));
        if (v->u.mat.geom) {
            feed_grid(st, &v->u.mat.geom->grid);
            feed(st, v->u.mat.geom->index, (size_t)v->u.mat.geom->n_voxels * sizeof(int64_t));
        }
        for (int64_t c = 0; v->u.mat.col_names && c < v->u.mat.cols; c++)
            feed_str(st, v->u.mat.col_names[c]);
        break;
    case NF_KIND_TABLE:
        for (int64_t c = 0; c < v->u.tab.n_cols; c++) {
            const struct nf_column *col = &v->u.tab.cols[c];
            feed_str(st, col->name);
            for (int64_t r = 0; r < v->u.tab.n_rows; r++) {
                if (col->numeric)
                    feed(st, &col->num[r], sizeof col->num[r]);
                else
                    feed_str(st, col->str[r]);
            }
        }
        break;
    case NF_KIND_COLLECTION:
        for (size_t i = 0; i < v->u.coll.n; i++)
            feed_value(st, v->u.coll.items[i]);
        break;
    default:
        break;
    }
}

struct capture {
    size_t node;
    XXH3_state_t *st;
    bool seen;
};

static void on_outputs(void *arg, size_t node, struct nf_value *const *out, size_t n_out)
{
    struct capture *c = arg;
    if (node != c->node)
        return;
    c->seen = true;
    for (size_t o = 0; o < n_out; o++)
        feed_value(c->st, out[o]);
}

/* Every file under the pipeline folder but the inputs and the file itself,
 * in sorted order, by relative path and content. */
static char **files;
static size_t n_files;

static int collect(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    const char *rel = path + strlen(tmpdir) + 1;
    if (type != FTW_F || strncmp(rel, "data/", 5) == 0 || strcmp(rel, "p.yaml") == 0)
        return 0;
    files = realloc(files, (n_files + 1) * sizeof *files);
    files[n_files++] = strdup(rel);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void feed_files(XXH3_state_t *st)
{
    n_files = 0;
    assert_int_equal(nftw(tmpdir, collect, 16, FTW_PHYS), 0);
    if (n_files > 1)
        qsort(files, n_files, sizeof *files, cmp_str);
    for (size_t i = 0; i < n_files; i++) {
        struct nf_error err = { 0 };
        char *path = nf_path_join(tmpdir, files[i]);
        size_t len = 0;
        char *text = nf_read_file(path, &len, &err);
        assert_non_null(text);
        feed_str(st, files[i]);
        feed(st, &len, sizeof len);
        feed(st, text, len);
        free(text);
        free(path);
        free(files[i]);
    }
    free(files);
    files = NULL;
}

/* ---- one version of a decision: its key and what it produced ---- */

struct outcome { struct nf_key key, results; };

static void clean_outputs(void)
{
    char *cmd = nf_asprintf("cd '%s' && rm -rf out out2 w1 w2 c p.yaml", tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

static char *pipeline_text(const struct decision *d, bool alt)
{
    const char *value = alt ? d->alt : d->base;
    bool is_setting = strncmp(d->param, "settings.", 9) == 0;
    const char *params = is_setting ? d->common : NULL;
    char *joined = NULL;
    if (!is_setting)
        params = joined = nf_asprintf("%s%s%s", d->common, d->common[0] && value[0] ? ", " : "", value);
    const char *ctx = alt && d->alt_ctx ? d->alt_ctx : d->ctx;
    const char *at = strstr(ctx, "@P");
    assert_non_null(at);
    char *text = nf_asprintf("nlflow: 1\nname: keys\nsettings: {%s}\nnodes:\n%.*s%s%s",
                             is_setting ? value : SETTINGS, (int)(at - ctx), ctx, params, at + 2);
    free(joined);
    return text;
}

static struct outcome run_version(const struct decision *d, bool alt)
{
    struct outcome r;
    struct nf_error err = { 0 };
    struct nf_diags diags;
    clean_outputs();
    char *text = pipeline_text(d, alt);
    char *path = nf_asprintf("%s/p.yaml", tmpdir);
    assert_int_equal(nf_write_file_atomic(path, text, strlen(text), &err), 0);

    nf_diags_init(&diags);
    struct nf_pipeline *p = nf_pipeline_load(path, NULL, &diags);
    if (!p || nf_resolve_shapes(p, &diags) < 0 || nf_place(p, false, &diags) < 0 ||
        nf_plan_memory(p, &diags) < 0) {
        nf_diags_print(&diags);
        fail_msg("%s.%s: the %s version is not a valid pipeline:\n%s", d->type, d->param,
                 alt ? "other" : "base", text);
    }
    nf_diags_release(&diags);
    int ti = nf_node_index(p, "t");
    assert_true(ti >= 0);

    struct nf_node_keys *keys = calloc(p->n_nodes, sizeof *keys);
    assert_int_equal(nf_keys_plan(p, NULL, keys, &err), 0);
    assert_true(keys[ti].known);
    XXH3_state_t *st = XXH3_createState();
    XXH3_128bits_reset(st);
    for (size_t o = 0; o < keys[ti].n_outs; o++)
        feed(st, &keys[ti].outs[o].whole, sizeof keys[ti].outs[o].whole);
    XXH128_hash_t h = XXH3_128bits_digest(st);
    r.key = (struct nf_key){ h.high64, h.low64 };

    struct capture cap = { (size_t)ti, st, false };
    XXH3_128bits_reset(st);
    struct nf_exec_opts o = { .threads = p->settings.threads > 0 ? p->settings.threads : 2,
                              .on_outputs = on_outputs, .on_outputs_arg = &cap };
    if (nf_execute(p, &o, &err) < 0)
        fail_msg("%s.%s (%s version): %s", d->type, d->param, alt ? "other" : "base", err.msg);
    assert_true(cap.seen);
    feed_files(st);
    h = XXH3_128bits_digest(st);
    r.results = (struct nf_key){ h.high64, h.low64 };

    XXH3_freeState(st);
    for (size_t i = 0; i < p->n_nodes; i++)
        nf_node_keys_release(&keys[i]);
    free(keys);
    nf_pipeline_free(p);
    free(path);
    free(text);
    return r;
}

/* ---- the property ---- */

static const struct decision *find_decision(const char *type, const char *param)
{
    for (size_t i = 0; i < sizeof decisions / sizeof *decisions; i++)
        if (strcmp(decisions[i].type, type) == 0 && strcmp(decisions[i].param, param) == 0)
            return &decisions[i];
    return NULL;
}

/* Every parameter of every node type has a decision. */
static void test_every_parameter_decided(void **state)
{
    (void)state;
    size_t missing = 0;
    for (size_t t = 0; nf_node_types[t]; t++) {
        const struct nf_node_type *type = nf_node_types[t];
        if (!type->params || !type->params[0].name) {
            if (!find_decision(type->name, "(none)")) {
                fprintf(stderr, "node type '%s' (no parameters) has no decision in test_keys.c\n", type->name);
                missing++;
            }
            continue;
        }
        for (const struct nf_param *prm = type->params; prm->name; prm++)
            if (!find_decision(type->name, prm->name)) {
                fprintf(stderr, "parameter '%s' of node type '%s' has no key decision in test_keys.c: "
                        "add one (does it change results? then it must change the key)\n",
                        prm->name, type->name);
                missing++;
            }
    }
    assert_int_equal(missing, 0);
}

static void test_key_changes_exactly_when_results_do(void **state)
{
    (void)state;
    size_t bad = 0;
    for (size_t i = 0; i < sizeof decisions / sizeof *decisions; i++) {
        const struct decision *d = &decisions[i];
        struct outcome a = run_version(d, false), b = run_version(d, true);
        bool key_changed = !nf_key_equal(a.key, b.key), results_changed = !nf_key_equal(a.results, b.results);
        if (key_changed != results_changed || results_changed != d->changes) {
            fprintf(stderr, "%s.%s (%s -> %s): key %s, results %s; decided: results %s\n", d->type, d->param,
                    d->base, d->alt, key_changed ? "changed" : "unchanged",
                    results_changed ? "changed" : "unchanged", d->changes ? "change" : "do not change");
            bad++;
        }
    }
    clean_outputs();
    assert_int_equal(bad, 0);
}

/* simulate's mask is read by content: other bytes under the same name change
 * the key and the data. */
static void test_simulate_mask_content_keyed(void **state)
{
    (void)state;
    const struct decision d = { "simulate", "mask", CTX_SIM, "images: 12, voxel_size: 10", "mask: m.nii.gz", "mask: m.nii.gz",
                                true, NULL };
    char *cmd = nf_asprintf("cd '%s' && cp data/mask.nii.gz m.nii.gz", tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    struct outcome a = run_version(&d, false);
    cmd = nf_asprintf("cd '%s' && cp data/truth.nii.gz m.nii.gz", tmpdir);   /* a different brain */
    assert_int_equal(system(cmd), 0);
    free(cmd);
    struct outcome b = run_version(&d, true);
    assert_false(nf_key_equal(a.key, b.key));
    assert_false(nf_key_equal(a.results, b.results));
    cmd = nf_asprintf("rm -f '%s/m.nii.gz'", tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

/* Items of a glob are labelled by subject; the label names per-subject
 * results, so renaming a subject's file (same bytes) changes its key. */
static void test_load_labels_keyed(void **state)
{
    (void)state;
    const struct decision d = { "load", "path", CTX_LOAD, "", "path: g/*.nii.gz", "path: g/*.nii.gz", true,
                                NULL };
    char *cmd = nf_asprintf("cd '%s' && mkdir -p g && cp data/sub-01/func/sub-01_task-sim_bold.nii.gz g/sub-01_bold.nii.gz"
                            " && cp data/sub-02/func/sub-02_task-sim_bold.nii.gz g/sub-02_bold.nii.gz", tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    struct outcome a = run_version(&d, false);
    cmd = nf_asprintf("cd '%s' && mv g/sub-02_bold.nii.gz g/sub-05_bold.nii.gz", tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    struct outcome b = run_version(&d, true);
    assert_false(nf_key_equal(a.key, b.key));
    assert_false(nf_key_equal(a.results, b.results));
    cmd = nf_asprintf("rm -rf '%s/g'", tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

static void write_names(const char *name, const char *text)
{
    struct nf_error err = { 0 };
    char *path = nf_asprintf("%s/%s", tmpdir, name);
    assert_int_equal(nf_write_file_atomic(path, text, strlen(text), &err), 0);
    free(path);
}

/* Label names are read by content: summarize's atlas_labels, and the file
 * beside a loaded atlas (through load's key). Other names under the same file
 * name change the key and the cluster table. */
static void test_atlas_label_files_keyed(void **state)
{
    (void)state;
    const struct decision given = { "summarize", "atlas_labels", CTX_SUMMARIZE_ATLAS,
                                    "threshold: 0.5, threshold_key: m", "atlas_labels: n.txt",
                                    "atlas_labels: n.txt", true, NULL };
    write_names("n.txt", "1 Roi\n");
    struct outcome a = run_version(&given, false);
    write_names("n.txt", "1 Sphere\n");
    struct outcome b = run_version(&given, true);
    assert_false(nf_key_equal(a.key, b.key));
    assert_false(nf_key_equal(a.results, b.results));

    const struct decision beside = { "summarize", "threshold", CTX_SUMMARIZE_ATLAS, "threshold_key: m",
                                     "threshold: 0.5", "threshold: 0.5", true, NULL };
    struct outcome none = run_version(&beside, false);
    write_names("data/atlas.nii.txt", "1 Roi\n");
    a = run_version(&beside, false);
    write_names("data/atlas.nii.txt", "1 Sphere\n");
    b = run_version(&beside, true);
    assert_false(nf_key_equal(none.key, a.key));
    assert_false(nf_key_equal(none.results, a.results));
    assert_false(nf_key_equal(a.key, b.key));
    assert_false(nf_key_equal(a.results, b.results));
    char *cmd = nf_asprintf("rm -f '%s/n.txt' '%s/data/atlas.nii.txt'", tmpdir, tmpdir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
}

/* ---- fixtures ---- */

static int setup(void **state)
{
    (void)state;
    char tmpl[] = "/tmp/nlflow-test-keys-XXXXXX";
    if (!mkdtemp(tmpl))
        return -1;
    tmpdir = strdup(tmpl);
    nf_log_quiet = true;
    struct nf_error err = { 0 };
    const char *yaml = "nlflow: 1\nsettings: {seed: 3, cache: off}\nnodes:\n"
                       "  sim: {type: simulate, subjects: 3, images: 16, voxel_size: 10, mask: synthetic, "
                       "write: data, overwrite: true}\n"
                       "  b1: {type: simulate, subjects: 2, images: 16, voxel_size: 10, roi_center: [0, -10, 5], "
                       "bids: data/bids}\n"
                       "  b2: {type: simulate, subjects: 2, images: 16, voxel_size: 10, roi_center: [0, -10, 5], "
                       "seed: 5, bids: data/bids2}\n";
    char *path = nf_asprintf("%s/make-data.yaml", tmpdir);
    if (nf_write_file_atomic(path, yaml, strlen(yaml), &err) < 0)
        return -1;
    struct nf_diags d;
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(path, NULL, &d);
    if (!p || nf_resolve_shapes(p, &d) < 0 || nf_place(p, false, &d) < 0 || nf_plan_memory(p, &d) < 0)
        return -1;
    struct nf_exec_opts o = { .threads = 2 };
    if (nf_execute(p, &o, &err) < 0)
        return -1;
    nf_pipeline_free(p);
    nf_diags_release(&d);
    char *cmd = nf_asprintf("cd '%s' && rm -f make-data.yaml && mkdir -p data/copy && cp data/design.tsv data/copy/"
                            " && printf '1 Roi\\n' > data/names1.txt && printf '1 Sphere\\n' > data/names2.txt"
                            " && printf 'onset\\tduration\\ttrial_type\\tamp\\n-10\\t4\\ta\\t1\\n2\\t4\\ta\\t1\\n8\\t0\\tb\\t2\\n"
                            "14\\t3\\ta\\t0.5\\n20\\t2\\tb\\t1\\n' > data/events.tsv"
                            " && printf 'participant_id\\tcode\\tage\\tsex\\tsite\\nsub-01\\tsub-02\\t30\\tF\\t1\\n"
                            "sub-02\\tsub-01\\t41\\tM\\t2\\nsub-03\\tsub-03\\t25\\tF\\t2\\n' > data/participants.tsv"
                            " && cd data && D=bids/derivatives/fmriprep/sub-01/func/sub-01_task-localizer_run-1_space-"
                            "MNI152NLin2009cAsym_desc && cp ${D}-preproc_bold.nii.gz ${D}-smooth_bold.nii.gz"
                            " && for s in 1 2; do mkdir -p bses/sub-01/ses-$s/func && for f in bids/sub-01/func/*run-1*; do"
                            " cp $f bses/sub-01/ses-$s/func/$(basename $f | sed s/sub-01_/sub-01_ses-${s}_/); done; done"
                            " && mkdir -p bmix/sub-01/func && for f in bids/sub-01/func/*run-1*; do cp $f bmix/sub-01/func/"
                            " && cp $f bmix/sub-01/func/$(basename $f | sed s/localizer/other/); done"
                            " && cp bids/task-localizer_bold.json bses/ && cp bids/task-localizer_bold.json bmix/"
                            " && sed s/localizer/other/ bids/task-localizer_bold.json > bmix/task-other_bold.json",
                            tmpdir);
    int rc = system(cmd);
    free(cmd);
    free(path);
    return rc == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char *cmd = nf_asprintf("rm -rf '%s'", tmpdir);
    int rc = system(cmd);
    free(cmd);
    free(tmpdir);
    return rc == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_parameter_decided),
        cmocka_unit_test(test_key_changes_exactly_when_results_do),
        cmocka_unit_test(test_simulate_mask_content_keyed),
        cmocka_unit_test(test_load_labels_keyed),
        cmocka_unit_test(test_atlas_label_files_keyed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
