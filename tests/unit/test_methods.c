/* test_methods.c — unit tests of the nodes' `methods` sentences (node.h), the
 * text a report pastes into its methods paragraph.
 *
 * For each node type the parameters are filled with their defaults, a few are
 * set to values other than the defaults, and the sentence must be a sentence
 * (non-empty, ending with '.', no unfilled "nan") that states those values:
 * a callback that ignored a parameter, or described the default whatever was
 * asked, fails here. Every registered node type except the debugging and
 * report nodes must have the callback, so a new node type cannot be left out
 * of the paragraph. An allocation failure at any point gives NULL, never a
 * truncated sentence.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "core/util.h"
#include "bids/bids.h"
#include "bootstrap/bootstrap.h"
#include "design/design.h"
#include "glm/glm.h"
#include "fixed_effects/fixed_effects.h"
#include "group_design/group_design.h"
#include "load/load.h"
#include "mask/mask.h"
#include "permute/permute.h"
#include "predict/predict.h"
#include "predict/predict_models.h"
#include "resample/resample.h"
#include "ridge/ridge.h"
#include "simulate/simulate.h"
#include "smooth/smooth.h"
#include "summarize/summarize.h"

/* Large enough for any node's params struct (checked against params_size). */
union any_params {
    struct bids_params bids;
    struct bootstrap_params bootstrap;
    struct fixed_effects_params fixed_effects;
    struct group_design_params group_design;
    struct design_params design;
    struct glm_params glm;
    struct load_params load;
    struct mask_params mask;
    struct permute_params permute;
    struct predict_params predict;
    struct resample_params resample;
    struct ridge_params ridge;
    struct simulate_params simulate;
    struct smooth_params smooth;
    struct summarize_params summarize;
    char bytes[512];
};

static const struct nf_node_type *defaults(const char *name, union any_params *p)
{
    const struct nf_node_type *t = nf_node_type_find(name);
    assert_non_null(t);
    assert_true(t->params_size <= sizeof *p);
    memset(p, 0, sizeof *p);
    nf_params_defaults(t, p);
    return t;
}

/* The sentence of `name` for params p, checked to be one (owned). */
static char *sentence(const char *name, const void *p)
{
    const struct nf_node_type *t = nf_node_type_find(name);
    assert_non_null(t);
    assert_non_null(t->methods);
    char *s = t->methods(p);
    assert_non_null(s);
    size_t n = strlen(s);
    assert_true(n > 20);
    assert_int_equal(s[n - 1], '.');
    assert_true(s[0] >= 'A' && s[0] <= 'Z');
    assert_null(strstr(s, "nan"));
    assert_null(strstr(s, "  "));
    return s;
}

/* Assert that the sentence of `name` contains every needle and none of the
 * absent ones (NULL-terminated lists; absent may be NULL). */
static void expect(const char *name, const void *p, const char *const *needles, const char *const *absent)
{
    char *s = sentence(name, p);
    for (size_t i = 0; needles[i]; i++)
        if (!strstr(s, needles[i]))
            fail_msg("%s: \"%s\" not in: %s", name, needles[i], s);
    for (size_t i = 0; absent && absent[i]; i++)
        if (strstr(s, absent[i]))
            fail_msg("%s: \"%s\" should not be in: %s", name, absent[i], s);
    free(s);
}
#define HAS(...) ((const char *const[]){ __VA_ARGS__, NULL })

static void set_str(char **field, const char *value)
{
    free(*field);
    *field = nf_strdup(value);
}

static void set_nums(struct nf_num_list *l, size_t n, const double *v)
{
    free(l->v);
    l->v = nf_malloc(n * sizeof *l->v);
    memcpy(l->v, v, n * sizeof *l->v);
    l->n = n;
}

/* ---- every node type ---- */

static void test_every_node_type_has_methods(void **state)
{
    (void)state;
    size_t n = 0;
    for (size_t i = 0; nf_node_types[i]; i++) {
        const struct nf_node_type *t = nf_node_types[i];
        if (strcmp(t->name, "debug_fault") == 0 || strcmp(t->name, "report") == 0)
            continue;
        if (!t->methods)
            fail_msg("node type '%s' has no methods callback (node.h): the report's methods "
                     "paragraph would fall back to its summary", t->name);
        union any_params p;
        defaults(t->name, &p);
        free(sentence(t->name, &p));   /* the defaults give a sentence too */
        nf_params_release(t, &p);
        n++;
    }
    assert_true(n >= 8);
}

/* ---- one node at a time ---- */

static void test_simulate(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("simulate", &u);
    struct simulate_params *p = &u.simulate;
    p->subjects = 12;
    p->images = 60;
    p->features = 3;
    p->voxel_size = 3;
    p->effect_size = 0.8;
    p->noise = 2.5;
    set_nums(&p->roi_center, 3, (const double[]){ 10, -30, 22 });
    p->roi_radius = 8;
    p->seed = 42;
    set_str(&p->mask, "synthetic");
    expect("simulate", p,
           HAS("12 subjects", "60 images", "3 regressors (a boxcar and 2 sines)", "3 mm voxels",
               "effect size of 0.8", "sphere of radius 8 mm", "(10, -30, 22) mm", "constant effect of 0.4",
               "standard deviation of 2.5", "seed 42", "synthetic ellipsoid"),
           NULL);
    set_str(&p->mask, "masks/brain_mask.nii.gz");
    p->subjects = 1;
    p->features = 1;
    p->seed = -1;
    expect("simulate", p, HAS("the brain mask brain_mask.nii.gz", "1 subject of 60 images, on", "1 regressor (a boxcar)"),
           HAS("masks/", "seed", "1 subjects", "each"));
    nf_params_release(t, p);
}

static void test_load(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("load", &u);
    struct load_params *p = &u.load;
    set_str(&p->path, "/home/me/study/derivatives/sub-*/func/sub-*_bold.nii.gz");
    expect("load", p, HAS("NIfTI images were read", "sub-*/func/sub-*_bold.nii.gz", "one item per file"),
           HAS("/home/me", "derivatives"));
    set_str(&p->path, "/home/me/study/events.tsv");
    p->columns.v = nf_malloc(3 * sizeof *p->columns.v);
    p->columns.v[0] = nf_strdup("onset");
    p->columns.v[1] = nf_strdup("duration");
    p->columns.v[2] = nf_strdup("trial_type");
    p->columns.n = 3;
    expect("load", p, HAS("A table was read from events.tsv", "columns onset, duration and trial_type"),
           HAS("/home/me", "one item"));
    nf_params_release(t, p);
    defaults("load", &u);
    set_str(&p->path, "design.npy");
    expect("load", p, HAS("A NumPy array was read from design.npy"), HAS("column"));
    nf_params_release(t, p);
}

static void test_mask(void **state)
{
    (void)state;
    union any_params u;
    defaults("mask", &u);
    expect("mask", &u.mask, HAS("brain mask"), HAS("z-scored", "centred"));
    u.mask.standardize = MASK_STD_ZSCORE;
    expect("mask", &u.mask, HAS("z-scored", "population standard deviation"), HAS("centred"));
    u.mask.standardize = MASK_STD_CENTER;
    expect("mask", &u.mask, HAS("mean-centred"), HAS("z-scored"));
}

static void test_ridge(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("ridge", &u);
    struct ridge_params *p = &u.ridge;
    expect("ridge", p,
           HAS("ridge regression without an intercept", "each voxel's penalty",
               "20 values log-spaced from 0.01 to 10000", "5-fold", "contiguous, unshuffled", "R\u00b2"),
           HAS("seed", "Pearson", "fixed", "and voxels"));
    set_nums(&p->alphas, 3, (const double[]){ 0.1, 1, 10 });
    p->cv = 3;
    p->alpha_mode = RIDGE_SHARED;
    p->score = RIDGE_PEARSON;
    p->shuffle = true;
    p->seed = 7;
    p->fit_intercept = true;
    expect("ridge", p,
           HAS("with an intercept", "one penalty for all voxels", "{0.1, 1, 10}", "3-fold",
               "shuffled folds, seed 7", "Pearson correlation", "over folds and voxels"),
           HAS("log-spaced", "each voxel's", "R\u00b2", "unshuffled"));
    /* a long grid that is not log-spaced is summarised by its range */
    double lin[15];
    for (int i = 0; i < 15; i++)
        lin[i] = 15 - i;
    set_nums(&p->alphas, 15, lin);
    expect("ridge", p, HAS("15 values from 1 to 15"), HAS("log-spaced", "{"));
    p->alpha = 2.5;
    expect("ridge", p, HAS("fixed penalty (alpha = 2.5) on all samples", "3-fold", "where reported"),
           HAS("chosen", "15 values", "and voxels", "refit"));
    nf_params_release(t, p);
}

static void test_bootstrap(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("bootstrap", &u);
    struct bootstrap_params *p = &u.bootstrap;
    expect("bootstrap", p,
           HAS("5000 resamples", "without an intercept", "alpha = 1 ", "95% percentile", "ddof 1",
               "two-tailed normal p"),
           HAS("seed", "normal (mean"));
    p->n_boot = 250;
    p->alpha = 7.5;
    p->fit_intercept = true;
    p->ci = 0.9;
    p->ci_method = BOOT_CI_NORMAL;
    p->seed = 12;
    expect("bootstrap", p,
           HAS("250 resamples", "seed 12", "with an intercept", "alpha = 7.5", "90% normal (mean"),
           HAS("5000", "percentile", "without"));
    p->model = BOOT_MODEL_SVM;
    p->C = 0.25;
    expect("bootstrap", p,
           HAS("decoding model", "support vector machine", "C = 0.25", "250 resamples of the images", "seed 12",
               "z-scored", "90% normal (mean"),
           HAS("Ridge weights", "intercept", "principal components"));
    p->model = BOOT_MODEL_RIDGE_REGRESSOR;
    p->standardize = false;
    p->pca = 6;
    expect("bootstrap", p, HAS("ridge regression (alpha = 7.5)", "6 principal components"),
           HAS("z-scored", "C = "));
    p->model = BOOT_MODEL_RIDGE;
    p->stat = BOOT_STAT_MEDIAN;
    expect("bootstrap", p, HAS("The median of each voxel", "250 resamples", "seed 12", "90% normal (mean"),
           HAS("alpha", "intercept", "weights"));
    nf_params_release(t, p);
}

static void test_permute(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("permute", &u);
    struct permute_params *p = &u.permute;
    expect("permute", p,
           HAS("one-sample sign-flip permutation test of the mean (two-tailed)", "two-tailed",
               "5000 random permutations", "all 2^n sign flips", "no more than 5000",
               "maximum statistic over voxels", "Benjamini\u2013Hochberg"),
           HAS("seed", "one-tailed"));
    p->stat = PERM_STAT_T;
    p->tail = PERM_TAIL_UPPER;
    p->n_permutations = 1000;
    p->seed = 3;
    p->exact = PERM_EXACT_NEVER;
    expect("permute", p, HAS("test of the one-sample t statistic (one-tailed, upper)", "1000 random permutations (seed 3)"),
           HAS("2^n", "5000", "two-tailed"));
    p->test = PERM_TWO_SAMPLE;
    p->tail = PERM_TAIL_LOWER;
    p->exact = PERM_EXACT_AUTO;
    set_str(&p->column, "group");
    expect("permute", p,
           HAS("two-sample permutation test of Student's pooled-variance t statistic, the group labels permuted",
               "(one-tailed, lower; groups from column group)", "every relabelling", "no more than 1000"),
           HAS("sign", "one-sample"));
    p->stat = PERM_STAT_MEAN;
    expect("permute", p, HAS("test of the difference of means"), HAS("pooled"));
    p->test = PERM_CORRELATION;
    p->method = PERM_SPEARMAN;
    set_str(&p->column, "age");
    expect("permute", p, HAS("permutation test of the Spearman rank correlation between each voxel and the covariate",
                             "covariate column age",
                             "every ordering"),
           HAS("difference", "groups from"));
    p->test = PERM_GLM;
    p->tail = PERM_TAIL_UPPER;
    p->exchange = PERM_EXCHANGE_BOTH;
    p->whole_blocks = true;
    set_str(&p->blocks_column, "site");
    p->contrasts.n = 2;
    p->contrasts.v = nf_calloc(2, sizeof *p->contrasts.v);
    p->contrasts.v[0] = nf_strdup("age = age");
    p->contrasts.v[1] = nf_strdup("g = a - b");
    p->f_contrasts.n = 1;
    p->f_contrasts.v = nf_calloc(1, sizeof *p->f_contrasts.v);
    p->f_contrasts.v[0] = nf_strdup("groups = a - b; b - c");
    expect("permute", p,
           HAS("general linear model with t contrasts (age = age; g = a - b) and F contrast (groups = a - b; b - c), "
               "one-tailed, upper",
               "1000 random permutations and sign flips of the residuals of the nuisance model (Freedman-Lane)",
               "whole exchangeability blocks given by site", "per contrast by the maximum statistic over voxels"),
           HAS("Spearman", "covariate", "two-tailed"));
    /* clusters of t and F contrasts: both thresholds, or cluster_p through both distributions */
    p->cluster_threshold = 3.1;
    p->f_cluster_threshold = 9.5;
    expect("permute", p, HAS("Clusters (6-connectivity) formed at thresholds of t > 3.1 and F > 9.5 were tested"),
           HAS("cluster_p"));
    p->cluster_threshold = p->f_cluster_threshold = NAN;
    p->cluster_p = 0.001;
    expect("permute", p, HAS("formed at p < 0.001 (one-sided, through the t and F distributions)"), HAS("F >"));
    p->contrasts.n = 0;   /* F contrasts only (the list is released through its owner below) */
    expect("permute", p, HAS("through the F distribution)"), HAS("t and F"));
    p->contrasts.n = 2;
    nf_params_release(t, p);
}

static void test_predict(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("predict", &u);
    struct predict_params *p = &u.predict;
    expect("predict", p,
           HAS("classification of the class labels", "linear support vector machine", "C = 1",
               "all voxels", "stratified, shuffled 5-fold", "accuracy", "z-scored"),
           HAS("principal", "searchlight", "seed"));
    p->model = NF_MODEL_LOGISTIC;
    p->C = 0.5;
    p->mode = PREDICT_SEARCHLIGHT;
    p->radius = 6;
    p->cv = 4;
    p->seed = 11;
    p->scoring = NF_SCORE_AUC;
    p->pca = 10;
    set_str(&p->target, "condition");
    expect("predict", p,
           HAS("classification of condition", "logistic regression (C = 0.5)", "searchlight of 6 mm radius",
               "4-fold", "(seed 11)", "area under the ROC curve", "z-scored and reduced to 10 principal components"),
           HAS("support vector", "all voxels", "accuracy"));
    p->model = NF_MODEL_RIDGE;
    p->alpha = 3;
    p->mode = PREDICT_ROI;
    p->scoring = NF_SCORE_AUTO;
    p->standardize = false;
    p->pca = 0;
    set_str(&p->target, "rating");
    expect("predict", p,
           HAS("regression of rating", "ridge regression (alpha = 3)", "each region of interest",
               "shuffled 4-fold", "R\u00b2"),
           HAS("stratified", "z-scored", "principal", "classification"));
    p->model = NF_MODEL_RIDGE_CLASSIFIER;
    p->scoring = NF_SCORE_BALANCED_ACCURACY;
    p->pca = 5;
    expect("predict", p, HAS("ridge classifier (alpha = 3)", "balanced accuracy", "reduced to 5 principal"),
           HAS("z-scored"));
    nf_params_release(t, p);
}

static void test_summarize(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("summarize", &u);
    struct summarize_params *p = &u.summarize;
    expect("summarize", p, HAS("BIDS-derivative"), HAS("threshold", "cluster"));
    p->threshold = 3.1;
    p->tail = SUM_TAIL_UPPER;
    p->p_below = 0.05;
    set_str(&p->p_key, "p_fwe");
    set_str(&p->threshold_key, "z");
    p->min_cluster_size = 10;
    expect("summarize", p,
           HAS("The z map was thresholded", "values >= 3.1 (upper tail)", "and where the p_fwe map was below 0.05",
               "26-connected", "fewer than 10 voxels"),
           HAS("|values|", "BIDS"));
    p->tail = SUM_TAIL_LOWER;
    p->p_below = NAN;
    p->min_cluster_size = 1;
    expect("summarize", p, HAS("values <= -3.1 (lower tail)"), HAS("p_fwe", "fewer than"));
    p->tail = SUM_TAIL_TWO;
    expect("summarize", p, HAS("|values| >= 3.1 (two-tailed)"), NULL);
    p->threshold = NAN;
    p->p_below = 0.001;
    set_str(&p->threshold_key, "t");
    expect("summarize", p, HAS("The t map was thresholded where the p_fwe map was below 0.001"), HAS(">="));
    nf_params_release(t, p);
}

static void test_design(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("design", &u);
    struct design_params *p = &u.design;
    expect("design", p,
           HAS("make_first_level_design_matrix", "the Glover HRF at 50 time steps per TR", "from 24 s before",
               "the start of each frame", "a discrete cosine drift basis with a 0.01 Hz high-pass cut-off"),
           HAS("TR =", "confounds", "polynomial", "derivative"));
    p->hrf = DESIGN_HRF_FIR;
    set_nums(&p->fir_delays, 3, (const double[]){ 0, 1, 3 });
    p->drift = DESIGN_DRIFT_POLYNOMIAL;
    p->drift_order = 3;
    p->oversampling = 16;
    p->min_onset = -10;
    p->slice_time_ref = 0.5;
    p->tr = 2.5;
    set_str(&p->modulation, "rt");
    p->confound_columns.v = nf_calloc(2, sizeof *p->confound_columns.v);
    p->confound_columns.v[0] = nf_strdup("trans_*");
    p->confound_columns.v[1] = nf_strdup("csf");
    p->confound_columns.n = 2;
    expect("design", p,
           HAS("finite impulse response basis (delays of 0, 1, 3 frames)", "16 time steps per TR",
               "from 10 s before", "0.5 of each frame (slice_time_ref) (TR = 2.5 s)", "events column rt",
               "the confounds trans_* and csf", "polynomial drifts up to order 3"),
           HAS("Glover", "cosine"));
    p->hrf = DESIGN_HRF_SPM_DERIV_DISP;
    p->drift = DESIGN_DRIFT_NONE;
    expect("design", p, HAS("the SPM HRF and its time and dispersion derivatives", "a constant and no drift"),
           HAS("delays", "polynomial"));
    nf_params_release(t, p);
}

static void test_glm(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("glm", &u);
    struct glm_params *p = &u.glm;
    p->contrasts.v = nf_calloc(2, sizeof *p->contrasts.v);
    p->contrasts.v[0] = nf_strdup("faces_vs_houses = faces - houses");
    p->contrasts.v[1] = nf_strdup("all = [1, 1]");
    p->contrasts.n = 2;
    expect("glm", p,
           HAS("FirstLevelModel", "percent signal change", "AR(1) noise model", "cut to two decimals",
               "2 t contrasts were (faces_vs_houses = faces - houses; all = [1, 1]) estimated"),
           HAS("ordinary least squares"));
    p->noise = GLM_NOISE_OLS;
    p->scaling = GLM_SCALING_NONE;
    expect("glm", p, HAS("by ordinary least squares"), HAS("AR(1)", "percent"));
    nf_params_release(t, p);
}

static void test_bids(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("bids", &u);
    struct bids_params *p = &u.bids;
    set_str(&p->root, "/data/ds001");
    expect("bids", p, HAS("BIDS dataset ds001 (no filter)", "JSON sidecars by BIDS inheritance"),
           HAS("fMRIPrep", "had to have"));
    set_str(&p->derivatives, "/data/ds001/derivatives/fmriprep");
    set_str(&p->task, "faces");
    set_str(&p->space, "MNI152NLin2009cAsym");
    set_str(&p->desc, "smooth");
    p->subjects.v = nf_calloc(1, sizeof *p->subjects.v);
    p->subjects.v[0] = nf_strdup("0*");
    p->subjects.n = 1;
    p->require.v = nf_calloc(2, sizeof *p->require.v);
    p->require.v[0] = nf_strdup("events");
    p->require.v[1] = nf_strdup("mask");
    p->require.n = 2;
    expect("bids", p,
           HAS("subjects [0*], task faces, space MNI152NLin2009cAsym", "fMRIPrep derivatives (desc-smooth)",
               "every run had to have events and mask"),
           NULL);
    nf_params_release(t, p);
}

static void test_fixed_effects(void **state)
{
    (void)state;
    union any_params u;
    defaults("fixed_effects", &u);
    struct fixed_effects_params *p = &u.fixed_effects;
    expect("fixed_effects", p, HAS("compute_fixed_effects", "the mean effect", "100 degrees of freedom per run"),
           HAS("inverse variance"));
    p->precision_weighted = true;
    p->dof = 37;
    expect("fixed_effects", p, HAS("weighted by their inverse variance", "37 degrees of freedom per run"),
           HAS("mean effect"));
}

static void test_group_design(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("group_design", &u);
    struct group_design_params *p = &u.group_design;
    char *cols[] = { "age", "site", "group" }, *cat[] = { "site" };
    p->columns = (struct nf_str_list){ 3, cols };
    p->categorical = (struct nf_str_list){ 1, cat };
    expect("group_design", p,
           HAS("participant_id", "the regressors age, site (categorical) and group and an intercept",
               "mean-centred", "first level in sorted order as the reference"),
           HAS("no intercept", "as they are"));
    p->demean = false;
    p->intercept = false;
    expect("group_design", p, HAS("and no intercept", "used as they are", "every level of the first"),
           HAS("mean-centred", "reference"));
    p->columns = (struct nf_str_list){ 0 };
    p->categorical = (struct nf_str_list){ 0 };
    nf_params_release(t, p);
}

static void test_simulate_bids(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("simulate", &u);
    struct simulate_params *p = &u.simulate;
    set_str(&p->bids, "ds");
    p->subjects = 3;
    p->runs = 4;
    p->images = 60;
    p->effect_size = 1.5;
    expect("simulate", p,
           HAS("3 subjects, 4 runs each of 60 volumes", "BIDS data with fMRIPrep-like derivatives",
               "a shared response of 0.75", "an extra response of 1.5"),
           HAS("regressors"));
    nf_params_release(t, p);
}

static void test_smooth_resample(void **state)
{
    (void)state;
    union any_params u;
    const struct nf_node_type *t = defaults("smooth", &u);
    struct smooth_params *p = &u.smooth;
    set_nums(&p->fwhm, 1, (const double[]){ 6 });
    expect("smooth", p, HAS("isotropic Gaussian kernel of 6 mm FWHM"), HAS("x"));
    set_nums(&p->fwhm, 3, (const double[]){ 4, 5, 8 });
    expect("smooth", p, HAS("Gaussian kernel of 4 x 5 x 8 mm FWHM"), HAS("isotropic"));
    nf_params_release(t, p);

    t = defaults("resample", &u);
    struct resample_params *r = &u.resample;
    expect("resample", r, HAS("continuous (cubic B-spline) interpolation"), HAS("linear"));
    r->interpolation = RESAMPLE_NEAREST;
    expect("resample", r, HAS("nearest-neighbour interpolation (interpolation = nearest"), HAS("cubic"));
    r->interpolation = RESAMPLE_LINEAR;
    expect("resample", r, HAS("with linear interpolation (interpolation = linear"), HAS("nearest"));
    nf_params_release(t, r);
}

/* Out of memory at any allocation: NULL, never a partial sentence; the same
 * sentence once nothing fails. */
static void test_out_of_memory(void **state)
{
    (void)state;
    for (size_t i = 0; nf_node_types[i]; i++) {
        const struct nf_node_type *t = nf_node_types[i];
        if (!t->methods)
            continue;
        union any_params u;
        defaults(t->name, &u);
        char *full = t->methods(&u);
        assert_non_null(full);
        bool done = false;
        for (long k = 1; !done && k < 1000; k++) {
            long before = nf_alloc_failures();
            nf_alloc_fail_at(k, false);
            char *s = t->methods(&u);
            nf_alloc_fail_at(0, false);
            if (nf_alloc_failures() == before) {
                assert_non_null(s);
                assert_string_equal(s, full);
                done = true;
            } else if (s) {
                fail_msg("%s: an allocation failed but a sentence came back: %s", t->name, s);
            }
            free(s);
        }
        assert_true(done);
        free(full);
        nf_params_release(t, &u);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_node_type_has_methods),
        cmocka_unit_test(test_simulate),
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_mask),
        cmocka_unit_test(test_ridge),
        cmocka_unit_test(test_bootstrap),
        cmocka_unit_test(test_permute),
        cmocka_unit_test(test_predict),
        cmocka_unit_test(test_summarize),
        cmocka_unit_test(test_design),
        cmocka_unit_test(test_glm),
        cmocka_unit_test(test_bids),
        cmocka_unit_test(test_fixed_effects),
        cmocka_unit_test(test_group_design),
        cmocka_unit_test(test_simulate_bids),
        cmocka_unit_test(test_smooth_resample),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
