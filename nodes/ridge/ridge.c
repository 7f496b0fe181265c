/* ridge.c — the `ridge` node: cross-validated ridge encoding models, one per
 * voxel, with nltools' semantics (reference/nltools-core.md §1).
 *
 * alpha_mode per_voxel is nltools' solve_ridge_cv: contiguous k-fold, per fold
 * one thin SVD of the (training-mean centred, with fit_intercept) design, all
 * alphas from it, R² = 1 - SS_res / (SS_tot + 1e-10) on the validation fold,
 * the mean over folds, the first best alpha per voxel, and a refit on all data.
 * alpha_mode shared is the legacy ridge_cv rule: one alpha for every voxel,
 * the best mean over folds and voxels, R² without the epsilon (0 when SS_tot
 * is 0), global centring only.
 *
 * Algorithm, per fold f (X_train = U S Vt): P = X_val Vtᵀ once; then for a block
 * of voxels UtY = Uᵀ Y_train (one GEMM; the training rows are the two ranges
 * around the validation fold, so Y is never copied). The validation error of
 * every alpha comes without forming predictions: with d_a = s/(s²+α) and
 * z = Pᵀ y_val, ||y_val - P D_a u||² = yᵀy - 2 (D_a u)ᵀz + uᵀ(D_a PᵀP D_a)u, so
 * one stacked (A r) x r GEMM with UtY gives every alpha (r < n_val makes this
 * cheaper than the (A n_val) x r predictions). The epilogue sums in double. Never an SVD or
 * a solve per alpha or per voxel. Voxel blocks are sized so that the working
 * set stays small; GEMMs use the threaded BLAS. Sums of squares are in double.
 *
 * Shared mode cannot choose before every voxel is scored, so it makes two
 * passes over the voxel blocks, but only the first does the CV: it keeps each
 * alpha's mean score per voxel (A x V floats) and the refit's Uᵀ Y (in the
 * weights output), so the second pass, once the alpha is known, only scales
 * and multiplies by Vt (and recomputes each fold's Uᵀ Y when predictions are
 * wanted). Its cost is that of per_voxel mode (issue 20), with the same bits
 * as when the second pass redid the CV.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "node.h"
#include "core/rng.h"
#include "core/util.h"

#include "predict/predict_models.h"
#include "ridge.h"
#include "ridge_internal.h"

static const char *const alpha_modes[] = { "per_voxel", "shared", NULL };
static const char *const score_kinds[] = { "r2", "pearson", "l2_neg_loss", NULL };
static const char *const candidate_kinds[] = { "random", "grid", NULL };

#define FIELD(f) offsetof(struct ridge_params, f)
static const struct nf_param ridge_params_table[] = {
    NF_PARAM_NUM_LIST("alphas", FIELD(alphas), "logspace:-2,4,20", 0, 1e300, 1, 10000,
                      "candidate penalties, a list or {logspace: [lo, hi, n]} (10^lo .. 10^hi); "
                      "the best per voxel (or shared) is chosen by cross-validation"),
    NF_PARAM_NUM_F("alpha", FIELD(alpha), NAN, 0, 1e300, NF_PF_OPTIONAL,
                   "a fixed penalty instead of choosing among `alphas`: the model is fit once on all "
                   "samples, with no folds, unless score, cv_scores or predictions is used (then they are "
                   "cross-validated as with alphas); with bands, when there is one band weighting"),
    NF_PARAM_INT("cv", FIELD(cv), 5, 2, 1000000,
                 "folds of the contiguous, unshuffled k-fold (the first n mod k folds one sample larger)"),
    NF_PARAM_ENUM("alpha_mode", FIELD(alpha_mode), alpha_modes, RIDGE_PER_VOXEL,
                  "per_voxel: each voxel its own alpha (nltools solve_ridge_cv); shared: one alpha "
                  "for all voxels (nltools' legacy ridge_cv rule)"),
    NF_PARAM_BOOL("fit_intercept", FIELD(fit_intercept), 0,
                  "centre X and Y (per training fold in per_voxel mode) and report the intercept"),
    NF_PARAM_ENUM("score", FIELD(score), score_kinds, RIDGE_R2,
                  "cross-validation score: r2 (coefficient of determination) or pearson (correlation "
                  "of predicted and observed)"),
    NF_PARAM_BOOL("shuffle", FIELD(shuffle), 0,
                  "shuffle samples before cutting the folds, as sklearn's KFold(shuffle=True, "
                  "random_state=seed): the same folds as nltools/sklearn with the same seed"),
    NF_PARAM_SEED("seed", FIELD(seed), 4294967295.0,
                  "RandomState seed of the shuffle and of random band weights (-1: the pipeline's "
                  "settings.seed)"),
    NF_PARAM_STR_LIST_F("bands", FIELD(bands), "", 1, 64, NF_PF_OPTIONAL | NF_PF_NAMED_LISTS,
                        "banded ridge (himalaya's BandedRidgeCV / MultipleKernelRidgeCV): the feature "
                        "spaces, {name: [items]} or [\"name = item, item\"], each item a column name of X, "
                        "a prefix ending in * (\"motion_*\") or a 0-based column range i:j (j excluded); "
                        "every column in exactly one band. Each voxel gets the band weights and alpha "
                        "with the best cross-validated score"),
    NF_PARAM_INT("n_iter", FIELD(n_iter), 100, 1, 1000000,
                 "bands, candidates random: number of band-weight candidates (himalaya's n_iter; the "
                 "first is the uniform one)"),
    NF_PARAM_NUM_LIST("concentration", FIELD(concentration), "0.1,1", 1e-6, 1e300, 1, 100,
                      "bands, candidates random: Dirichlet concentrations, cycled over the candidates "
                      "(himalaya's concentration)"),
    NF_PARAM_ENUM("candidates", FIELD(candidates), candidate_kinds, RIDGE_CANDIDATES_RANDOM,
                  "bands: random (Dirichlet samples over the simplex of band weights, seeded) or grid "
                  "(every weight vector whose weights are multiples of 1/grid_steps, after the uniform one)"),
    NF_PARAM_INT("grid_steps", FIELD(grid_steps), 4, 1, 1000, "bands, candidates grid: steps per unit weight"),
    NF_PARAM_NUM_LIST("gammas", FIELD(gammas), "", 0, 1e300, 0, 0,
                      "bands: explicit candidates instead, one weight per band for each candidate, rows "
                      "one after the other (himalaya's solver_params n_iter given as an array)"),
    NF_PARAM_END,
};
#undef FIELD

/* The candidate penalties as a methods section gives them: the values, or
 * the range of a long grid ("20 values log-spaced from 0.01 to 10000"). */
static void add_alpha_grid(struct nf_strbuf *sb, const struct nf_num_list *a)
{
    bool log_spaced = a->n > 2 && a->v[0] > 0 && a->v[1] != a->v[0];
    for (size_t i = 1; log_spaced && i < a->n; i++)
        log_spaced = a->v[i] > 0 && fabs(log(a->v[i] / a->v[i - 1]) - log(a->v[1] / a->v[0])) <= 1e-9;
    if (a->n > 6 && log_spaced) {
        nf_strbuf_addf(sb, "%zu values log-spaced from %g to %g", a->n, a->v[0], a->v[a->n - 1]);
    } else if (a->n > 12) {
        double lo = a->v[0], hi = a->v[0];
        for (size_t i = 1; i < a->n; i++) {
            lo = fmin(lo, a->v[i]);
            hi = fmax(hi, a->v[i]);
        }
        nf_strbuf_addf(sb, "%zu values from %g to %g", a->n, lo, hi);
    } else {
        for (size_t i = 0; i < a->n; i++)
            nf_strbuf_addf(sb, "%s%g", i ? ", " : "{", a->v[i]);
        nf_strbuf_addf(sb, "}");
    }
}

/* node_type.methods */
static char *ridge_methods(const void *params)
{
    const struct ridge_params *p = params;
    const char *score = p->score == RIDGE_PEARSON ? "Pearson correlation of predicted and observed responses"
                                                  : "coefficient of determination (R²)";
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "Voxel-wise encoding models were fit by ridge regression %s an intercept",
                   p->fit_intercept ? "with" : "without");
    if (p->bands.n) {
        nf_strbuf_addf(&sb, " and %zu feature spaces (banded ridge, as himalaya's BandedRidgeCV): each "
                       "voxel's band weights and penalty were chosen among ", p->bands.n);
        if (p->gammas.n)
            nf_strbuf_addf(&sb, "%zu given band weightings", p->gammas.n / p->bands.n);
        else if (p->candidates == RIDGE_CANDIDATES_GRID)
            nf_strbuf_addf(&sb, "band weightings on a grid of 1/%" PRId64, p->grid_steps);
        else
            nf_strbuf_addf(&sb, "%" PRId64 " band weightings (the uniform one and Dirichlet samples)", p->n_iter);
        nf_strbuf_addf(&sb, " times ");
        if (isnan(p->alpha))
            add_alpha_grid(&sb, &p->alphas);
        else
            nf_strbuf_addf(&sb, "alpha = %g", p->alpha);
        nf_strbuf_addf(&sb, " by %" PRId64 "-fold cross-validation maximising the mean %s over folds; the "
                       "weights were then refit on all samples.", p->cv,
                       p->score == RIDGE_L2_NEG_LOSS ? "negative mean squared error" : "R²");
        return nf_strbuf_detach(&sb);
    }
    if (isnan(p->alpha)) {
        nf_strbuf_addf(&sb, ", with %s chosen from ",
                       p->alpha_mode == RIDGE_SHARED ? "one penalty for all voxels" : "each voxel's penalty");
        add_alpha_grid(&sb, &p->alphas);
        nf_strbuf_addf(&sb, " by %" PRId64 "-fold cross-validation", p->cv);
    } else {
        nf_strbuf_addf(&sb, " and a fixed penalty (alpha = %g) on all samples; scores, where reported, were "
                       "obtained by %" PRId64 "-fold cross-validation", p->alpha, p->cv);
    }
    if (!p->shuffle)
        nf_strbuf_addf(&sb, " (contiguous, unshuffled folds)");
    else if (p->seed >= 0)
        nf_strbuf_addf(&sb, " (shuffled folds, seed %" PRId64 ")", p->seed);
    else
        nf_strbuf_addf(&sb, " (shuffled folds)");
    nf_strbuf_addf(&sb, "%s the mean %s over folds%s%s", isnan(p->alpha) ? " maximising" : " as", score,
                   isnan(p->alpha) && p->alpha_mode == RIDGE_SHARED ? " and voxels" : "",
                   isnan(p->alpha) ? "; the weights were then refit on all samples." : ".");
    return nf_strbuf_detach(&sb);
}

/* The seed only shuffles the samples and draws random band weights; the band
 * parameters matter only with bands (node.h param_matters). */
static bool ridge_param_matters(const void *params, const struct nf_param *p)
{
    const struct ridge_params *prm = params;
    bool banded = prm->bands.n > 0, random = banded && !prm->gammas.n && prm->candidates == RIDGE_CANDIDATES_RANDOM;
    if (strcmp(p->name, "seed") == 0)
        return prm->shuffle || random;
    if (strcmp(p->name, "n_iter") == 0 || strcmp(p->name, "concentration") == 0)
        return random;
    if (strcmp(p->name, "grid_steps") == 0)
        return banded && !prm->gammas.n && prm->candidates == RIDGE_CANDIDATES_GRID;
    if (strcmp(p->name, "candidates") == 0 || strcmp(p->name, "gammas") == 0)
        return banded;
    return true;
}

static const struct nf_port ridge_inputs[] = {
    { "X", "design: samples x features (a numeric table or matrix)", NF_PT_MATRIX, NF_PORT_TABLE_AS_MATRIX },
    { "Y", "data: samples x voxels (e.g. from mask)", NF_PT_MATRIX, 0 },
    { "groups", "a group label per sample (a table's first column, numbers or text, or a 1-column "
      "matrix): folds keep groups whole; leave-one-group-out when cv >= the number of groups, "
      "else group k-fold (sklearn's GroupKFold assignment)", NF_PT_MATRIX | NF_PT_TABLE, NF_PORT_OPTIONAL },
    NF_PORT_END
};

static const struct nf_port ridge_outputs[] = {
    { "weights", "features x voxels: the refit on all samples with each voxel's alpha", NF_PT_MATRIX, 0 },
    { "alpha", "1 x voxels: the chosen alpha", NF_PT_MATRIX, 0 },
    { "score", "1 x voxels: mean cross-validated score at the chosen alpha (with a fixed alpha, "
      "computed only when used: it is what needs the folds)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "predictions", "samples x voxels: cross-validated predictions at the chosen alpha (computed "
      "only when used)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "intercept", "1 x voxels: mean(Y) - mean(X) weights (zeros without fit_intercept)", NF_PT_MATRIX, 0 },
    { "cv_scores", "(folds x alphas) x voxels: every fold's score for every alpha, row f * alphas + a; "
      "with bands, candidates x voxels: each candidate's mean score over folds at its best alpha "
      "(himalaya's cv_scores_) (computed only when used)", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "band_alpha", "bands x voxels (with bands): each band's penalty, alpha / band weight "
      "(himalaya's exp(-deltas_))", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    { "split_r2", "bands x voxels (with bands): each band's share of the R² of the refit on the "
      "training data (himalaya's score(X, Y, split=True))", NF_PT_MATRIX, NF_PORT_ON_DEMAND },
    NF_PORT_END
};
NF_PORTS_MATCH(ridge_inputs, RIDGE_N_IN);
NF_PORTS_MATCH(ridge_outputs, RIDGE_N_OUT);

/* ---- shapes and checks ---- */

static void ridge_check(const void *params, const struct nf_loc *loc, const char *node, struct nf_diags *d)
{
    const struct ridge_params *p = params;
    for (size_t i = 0; i < p->alphas.n; i++)
        if (!(p->alphas.v[i] >= 0) || !isfinite(p->alphas.v[i]))
            NF_DIAG(d, NF_EINVAL, loc, node, "alphas must be finite and >= 0 (value %zu is %g)", i + 1,
                    p->alphas.v[i]);
    if (!p->bands.n) {
        if (p->score == RIDGE_L2_NEG_LOSS)
            NF_DIAG(d, NF_EINVAL, loc, node, "score l2_neg_loss is for banded ridge (give bands)");
        if (p->gammas.n)
            NF_DIAG(d, NF_EINVAL, loc, node, "gammas are band weights: give bands too");
        return;
    }
    if (p->score == RIDGE_PEARSON)
        NF_DIAG(d, NF_EINVAL, loc, node, "banded ridge scores r2 or l2_neg_loss (as himalaya), not pearson");
    if (p->alpha_mode == RIDGE_SHARED)
        NF_DIAG(d, NF_EINVAL, loc, node, "banded ridge chooses per voxel: alpha_mode shared is not available");
    for (size_t i = 0; i < p->alphas.n && isnan(p->alpha); i++)
        if (!(p->alphas.v[i] > 0))
            NF_DIAG(d, NF_EINVAL, loc, node, "banded ridge needs alphas > 0 (value %zu is %g)", i + 1,
                    p->alphas.v[i]);
    if (!isnan(p->alpha) && !(p->alpha > 0))
        NF_DIAG(d, NF_EINVAL, loc, node, "banded ridge needs alpha > 0 (got %g)", p->alpha);
    if (p->gammas.n % p->bands.n)
        NF_DIAG(d, NF_EINVAL, loc, node, "gammas has %zu values: not a whole number of rows of %zu band weights",
                p->gammas.n, p->bands.n);
    for (size_t i = 0; i < p->bands.n; i++) {
        const char *eq = strchr(p->bands.v[i], '=');
        const char *name = p->bands.v[i];
        while (*name == ' ')
            name++;
        int name_len = eq ? (int)(eq - name) : 0;
        while (name_len > 0 && name[name_len - 1] == ' ')
            name_len--;
        if (!eq || eq == name)
            NF_DIAG(d, NF_EINVAL, loc, node, "band %zu ('%s') must be \"name = item, item\" or a map entry "
                    "name: [items]", i + 1, p->bands.v[i]);
        else if (strspn(eq + 1, " ,") == strlen(eq + 1))
            NF_DIAG(d, NF_EINVAL, loc, node, "band '%.*s' is empty: give its columns", name_len, name);
    }
}

static int ridge_resolve(struct nf_resolve *r)
{
    const struct ridge_params *p = r->params;
    const struct nf_shape *x = &r->in[RIDGE_IN_X], *y = &r->in[RIDGE_IN_Y];
    if (x->kind == NF_KIND_NONE || y->kind == NF_KIND_NONE)
        return 0;
    int64_t n = x->dim[0], pf = x->dim[1], n_alpha = isnan(p->alpha) ? (int64_t)p->alphas.n : 1;
    bool fit_only = nf_ridge_fit_only(p, r->wanted);
    if (x->dim[0] > 0 && y->dim[0] > 0 && x->dim[0] != y->dim[0])
        return NF_FAIL_AT(r->err, NF_ESHAPE, nf_node_loc(r->node), nf_node_id(r->node),
                          "X has %lld samples (rows) but Y has %lld", (long long)x->dim[0],
                          (long long)y->dim[0]);
    if (!fit_only && n > 0 && n < p->cv)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "%lld samples cannot be split into %lld folds (cv)", (long long)n, (long long)p->cv);
    int64_t n_bands = (int64_t)p->bands.n;
    const int64_t dims[][2] = { { pf, y->dim[1] }, { 1, y->dim[1] }, { 1, y->dim[1] }, { n, y->dim[1] },
                                { 1, y->dim[1] },
                                /* with groups, leave-one-group-out may change the fold count */
                                { n_bands ? nf_ridge_band_candidate_count(p, n_bands)
                                  : r->in[RIDGE_IN_GROUPS].kind != NF_KIND_NONE ? 0 : p->cv * n_alpha, y->dim[1] },
                                { n_bands, y->dim[1] }, { n_bands, y->dim[1] } };
    for (int o = 0; o < RIDGE_N_OUT; o++) {
        r->out[o].kind = NF_KIND_MATRIX;
        r->out[o].dim[0] = dims[o][0];
        r->out[o].dim[1] = dims[o][1];
        r->out[o].cols_upper_bound = y->cols_upper_bound;
        r->out[o].has_geom = y->has_geom;
    }
    /* fitted once without folds: no cross-validated output (estimate and
     * cost read this) */
    for (int o = RIDGE_OUT_SCORE; fit_only && o <= RIDGE_OUT_CV_SCORES; o++)
        if (o != RIDGE_OUT_INTERCEPT)
            r->out[o] = (struct nf_shape){ .kind = NF_KIND_NONE };
    return 0;
}

/* Working memory: factors of every fold and one voxel block (and shared
 * mode's mean score of every alpha and voxel); without folds (fit only, the
 * resolved score is not produced) the full-data factors and a block. */
#define BLOCK_VOXELS 1000
/* the T GEMM and its epilogue: alphas x voxels per tile (see fold_scores) */
#define ALPHA_GROUP 4
#define SUB_VOXELS 256
static uint64_t ridge_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct ridge_params *prm = params;
    uint64_t n = (uint64_t)in[RIDGE_IN_X].dim[0], p = (uint64_t)in[RIDGE_IN_X].dim[1], k = (uint64_t)prm->cv;
    uint64_t a = isnan(prm->alpha) ? prm->alphas.n : 1, r = n < p ? n : p, b = BLOCK_VOXELS;
    if (out && out[RIDGE_OUT_WEIGHTS].kind == NF_KIND_MATRIX && out[RIDGE_OUT_SCORE].kind == NF_KIND_NONE)
        return (n * r + r * p + n * p + (n + r + p) * b) * sizeof(float) * 2;
    uint64_t factors = k * (n * r + r * p + (a * (n / k + 1) * r)) + n * r + r * p + n * p;
    uint64_t block = k * r * b + a * (n / k + 1) * b + k * a * b * 2 + r * b + n * b;
    uint64_t means = prm->alpha_mode == RIDGE_SHARED && in[RIDGE_IN_Y].dim[1] > 0
                     ? a * (uint64_t)in[RIDGE_IN_Y].dim[1] : 0;
    return (factors + block + means) * sizeof(float) * 2;
}

/* ---- the computation ---- */

struct fold {
    int64_t v0, v1;       /* validation rows [v0, v1) */
    int64_t n_tr, n_val, r;
    float *U;             /* n_tr x r */
    float *s;             /* r */
    float *P;             /* n_val x r: X_val Vtᵀ */
    double *u_sum;        /* r: column sums of U (for centring Y on the fly) */
    double *x_mean;       /* p: training means of X (fit_intercept) */
    float *M;             /* (A r) x r: D_a PᵀP D_a stacked over alphas */
    float *d;             /* A x r: s / (s² + alpha) */
    double *p_sum;        /* r: Pᵀ 1 */
};

struct ridge_ctx {
    const struct ridge_params *prm;
    const struct nf_kernels *K;
    const float *X, *Y;
    int64_t n, p, V, k, A;
    const double *alphas;
    bool center, fold_center, legacy;
    struct fold *folds;
    /* the full-data fit */
    int64_t r;
    float *U, *s, *Vt;
    double *u_sum, *x_mean, *y_mean;   /* y_mean: V */
    int64_t *perm;        /* shuffled or grouped folds: row i of the fold order is Y row
                             perm[i]; NULL: identity (contiguous k-fold) */
    int64_t *fold_size;   /* k: validation rows of each fold, in fold order */
    int64_t block;        /* voxels per block: BLOCK_VOXELS, or fewer so that every
                             thread has a block */
    float *X_perm;        /* X in fold order (shuffled folds) */
};

static void fold_release(struct fold *f)
{
    free(f->M);
    free(f->d);
    free(f->p_sum);
    free(f->U);
    free(f->s);
    free(f->P);
    free(f->u_sum);
    free(f->x_mean);
}

/* Rows of X outside [skip0, skip1) (or inside, when `inside`), centred by
 * `mean` when given. */
void nf_ridge_copy_rows(const float *X, int64_t n, int64_t p, int64_t skip0, int64_t skip1, bool inside,
                        const double *mean, float *out)
{
    int64_t o = 0;
    for (int64_t i = 0; i < n; i++) {
        if ((i >= skip0 && i < skip1) != inside)
            continue;
        for (int64_t j = 0; j < p; j++)
            out[o * p + j] = (float)(X[i * p + j] - (mean ? mean[j] : 0.0));
        o++;
    }
}

int nf_ridge_new_outputs(const struct nf_run *run, int64_t n, int64_t p, int64_t k, int64_t A, int64_t V,
                         struct nf_geom *geom, struct nf_value **out)
{
    const int64_t rows[6] = { p, 1, 1, n, 1, k * A };
    for (int o = 0; o < RIDGE_N_PLAIN_OUT; o++) {
        if ((o == RIDGE_OUT_PREDICTIONS || o == RIDGE_OUT_CV_SCORES || (o == RIDGE_OUT_SCORE && k == 0)) &&
            !nf_run_wants(run, o))
            continue;
        if (!(out[o] = nf_value_new_matrix(rows[o], V, geom, run->err)))
            return run->err->code;
    }
    return 0;
}

/* Name rows r of m by fmt(r) (one %lld, 1-based for samples and folds). */
static int name_rows_numbered(struct nf_value *m, const char *fmt, struct nf_error *err)
{
    int64_t rows = m->u.mat.rows;
    char **names = nf_calloc((size_t)(rows ? rows : 1), sizeof *names);
    int rc = names ? 0 : NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t r = 0; rc == 0 && r < rows; r++)
        if (!(names[r] = nf_asprintf(fmt, (long long)r + 1)))
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (rc == 0)
        rc = nf_matrix_set_row_names(m, (const char *const *)names, err);
    for (int64_t r = 0; names && r < rows; r++)
        free(names[r]);
    free(names);
    return rc;
}

/* What each output holds: weights rows are X's columns (named as in X's
 * table, else c0, c1, ... as a TSV of X would be), cv_scores rows are
 * (fold, alpha) pairs, predictions rows are samples. */
static int label_outputs(const struct nf_run *run, struct nf_value **out)
{
    const struct ridge_params *prm = run->params;
    const struct nf_matrix *X = &run->in[RIDGE_IN_X]->u.mat;
    const bool pearson = prm->score == RIDGE_PEARSON;
    const int64_t A = isnan(prm->alpha) ? (int64_t)prm->alphas.n : 1;
    const double *alphas = isnan(prm->alpha) ? prm->alphas.v : &prm->alpha;
    int rc = 0;
    char **names = NULL;
    int64_t n_names = 0;

    nf_value_set_stat(out[RIDGE_OUT_WEIGHTS], NF_STAT_ESTIMATE, 0,
                      "ridge weights of each feature, refit on all samples at the voxel's alpha");
    nf_value_set_stat(out[RIDGE_OUT_ALPHA], NF_STAT_PENALTY, 0, isnan(prm->alpha)
                      ? "ridge penalty chosen by cross-validation" : "ridge penalty (fixed)");
    if (out[RIDGE_OUT_SCORE])
        nf_value_set_stat(out[RIDGE_OUT_SCORE], NF_STAT_SCORE, 0, pearson
                          ? "mean cross-validated Pearson r of predicted and observed"
                          : "mean cross-validated R^2 (1 - SS_res / SS_tot)");
    nf_value_set_stat(out[RIDGE_OUT_INTERCEPT], NF_STAT_ESTIMATE, 0, "intercept");
    n_names = out[RIDGE_OUT_WEIGHTS]->u.mat.rows;
    if (!(names = nf_calloc((size_t)(n_names ? n_names : 1), sizeof *names))) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t j = 0; j < n_names; j++)
        if (!(names[j] = X->col_names && X->col_names[j] ? nf_strdup(X->col_names[j])
                                                          : nf_asprintf("c%lld", (long long)j))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    NF_TRY(rc = nf_matrix_set_row_names(out[RIDGE_OUT_WEIGHTS], (const char *const *)names, run->err));
    if (out[RIDGE_OUT_PREDICTIONS]) {
        nf_value_set_stat(out[RIDGE_OUT_PREDICTIONS], NF_STAT_DATA, 0, "cross-validated predictions");
        NF_TRY(rc = name_rows_numbered(out[RIDGE_OUT_PREDICTIONS], "sample-%lld", run->err));
    }
    if (out[RIDGE_OUT_CV_SCORES]) {
        struct nf_value *cv = out[RIDGE_OUT_CV_SCORES];
        nf_value_set_stat(cv, NF_STAT_SCORE, 0, pearson ? "Pearson r of each fold and alpha"
                                                        : "R^2 of each fold and alpha");
        for (int64_t j = 0; j < n_names; j++)
            free(names[j]);
        free(names);
        n_names = cv->u.mat.rows;
        if (!(names = nf_calloc((size_t)(n_names ? n_names : 1), sizeof *names))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t r = 0; r < n_names; r++)
            if (!(names[r] = nf_asprintf("fold-%lld_alpha-%g", (long long)(r / A) + 1, alphas[r % A]))) {
                rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
                goto fail;
            }
        NF_TRY(rc = nf_matrix_set_row_names(cv, (const char *const *)names, run->err));
    }
fail:
    for (int64_t j = 0; names && j < n_names; j++)
        free(names[j]);
    free(names);
    return rc;
}

int nf_ridge_finish_outputs(struct nf_run *run, struct nf_value **out, bool center, const double *x_mean,
                            const double *y_mean, int64_t p, int64_t V)
{
    int rc;
    for (int64_t v = 0; v < V && center; v++) {
        double acc = y_mean[v];
        for (int64_t j = 0; j < p; j++)
            acc -= x_mean[j] * out[RIDGE_OUT_WEIGHTS]->u.mat.data[j * V + v];
        out[RIDGE_OUT_INTERCEPT]->u.mat.data[v] = (float)acc;
    }
    if ((rc = label_outputs(run, out)) < 0)
        return rc;
    for (int o = 0; o < RIDGE_N_PLAIN_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
    return 0;
}

void nf_ridge_fold_gram(const float *P, int64_t n_val, int64_t r, double *G, double *p_sum)
{
    for (int64_t i = 0; i < n_val; i++)
        for (int64_t j = 0; j < r; j++) {
            double pij = P[i * r + j];
            p_sum[j] += pij;
            for (int64_t l = 0; l < r; l++)
                G[j * r + l] += pij * P[i * r + l];
        }
}

enum centring { CENTER_NONE, CENTER_TRAIN, CENTER_GLOBAL };

/* SVD of the rows of X outside [skip0, skip1): raw, centred on their own means
 * (stored in x_mean), or on the global means (c->x_mean, copied to x_mean). */
static int factor(const struct ridge_ctx *c, int64_t skip0, int64_t skip1, enum centring how,
                  double *x_mean, float **U, float **s, float **Vt, int64_t *r_out,
                  double **u_sum, struct nf_error *err)
{
    int64_t n = c->n - (skip1 - skip0), p = c->p, r = n < p ? n : p;
    float *Xc = nf_malloc((size_t)(n * p) * sizeof *Xc);
    *U = nf_malloc((size_t)(n * r) * sizeof **U);
    *s = nf_malloc((size_t)r * sizeof **s);
    *Vt = nf_malloc((size_t)(r * p) * sizeof **Vt);
    *u_sum = nf_calloc((size_t)r, sizeof **u_sum);
    int rc = 0;
    if (!Xc || !*U || !*s || !*Vt || !*u_sum) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory for the SVD of a %lldx%lld design", (long long)n,
                     (long long)p);
        goto fail;
    }
    if (how == CENTER_TRAIN)
        nf_ridge_column_means(c->X, c->n, p, skip0, skip1, x_mean);
    else if (how == CENTER_GLOBAL && x_mean != c->x_mean)
        memcpy(x_mean, c->x_mean, (size_t)p * sizeof *x_mean);
    nf_ridge_copy_rows(c->X, c->n, p, skip0, skip1, false, how == CENTER_NONE ? NULL : x_mean, Xc);
    rc = c->K->svd(Xc, n, p, *U, *s, *Vt);
    if (rc < 0) {
        rc = NF_FAIL(err, rc == NF_ENOMEM ? NF_ENOMEM : NF_EDATA, "the SVD of the design (%lld x %lld) %s",
                     (long long)n, (long long)p, rc == NF_ENOMEM ? "ran out of memory" : "did not converge");
        goto fail;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < r; j++)
            (*u_sum)[j] += (*U)[i * r + j];
    *r_out = r;
fail:
    free(Xc);
    return rc;
}

static int setup_folds(struct ridge_ctx *c, struct nf_error *err)
{
    int64_t start = 0;
    c->folds = nf_calloc((size_t)c->k, sizeof *c->folds);
    if (!c->folds)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t f = 0; f < c->k; f++) {
        struct fold *fd = &c->folds[f];
        int64_t size = c->fold_size[f];
        fd->v0 = start;
        fd->v1 = start + size;
        start += size;
        fd->n_val = size;
        fd->n_tr = c->n - size;
        fd->x_mean = nf_calloc((size_t)c->p, sizeof *fd->x_mean);
        if (!fd->x_mean)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        /* per_voxel: re-centre on the training fold (solve_ridge_cv); shared:
         * the data were centred once, globally (legacy ridge_cv) */
        float *Vt = NULL;
        enum centring how = !c->center ? CENTER_NONE : c->fold_center ? CENTER_TRAIN : CENTER_GLOBAL;
        int rc = factor(c, fd->v0, fd->v1, how, fd->x_mean, &fd->U, &fd->s, &Vt, &fd->r, &fd->u_sum, err);
        if (rc < 0) {
            free(Vt);
            return rc;
        }
        int64_t r = fd->r;
        fd->P = nf_calloc((size_t)(fd->n_val * r), sizeof *fd->P);
        float *Xval = nf_malloc((size_t)(fd->n_val * c->p) * sizeof *Xval);
        if (!fd->P || !Xval) {
            free(Vt);
            free(Xval);
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        }
        for (int64_t i = 0; i < fd->n_val; i++)
            for (int64_t j = 0; j < c->p; j++)
                Xval[i * c->p + j] = (float)(c->X[(fd->v0 + i) * c->p + j] - (c->center ? fd->x_mean[j] : 0.0));
        /* P = X_val Vtᵀ */
        c->K->sgemm(false, true, fd->n_val, r, c->p, 1.0f, Xval, c->p, Vt, c->p, 0.0f, fd->P, r);
        /* The validation error of every alpha without forming its predictions:
         * ||y - P D_a u||² = yᵀy - 2 (D_a u)ᵀ(Pᵀy) + uᵀ (D_a PᵀP D_a) u, so one
         * (A r) x r by r x V GEMM replaces the (A n_val) x r one (r < n_val). */
        fd->M = nf_malloc((size_t)(c->A * r * r) * sizeof *fd->M);
        fd->d = nf_malloc((size_t)(c->A * r) * sizeof *fd->d);
        fd->p_sum = nf_calloc((size_t)r, sizeof *fd->p_sum);
        double *G = nf_calloc((size_t)(r * r), sizeof *G);
        if (!fd->M || !fd->d || !fd->p_sum || !G) {
            free(G);
            free(Vt);
            free(Xval);
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        }
        nf_ridge_fold_gram(fd->P, fd->n_val, r, G, fd->p_sum);
        for (int64_t a = 0; a < c->A; a++) {
            for (int64_t j = 0; j < r; j++) {
                double sj = fd->s[j];
                fd->d[a * r + j] = (float)(sj / (sj * sj + c->alphas[a]));
            }
            for (int64_t j = 0; j < r; j++)
                for (int64_t l = 0; l < r; l++)
                    fd->M[(a * r + j) * r + l] = (float)((double)fd->d[a * r + j] * G[j * r + l] * fd->d[a * r + l]);
        }
        free(G);
        free(Xval);
        free(Vt);
    }
    return 0;
}

/* Per block scratch. */
struct block {
    int64_t b0, nb;
    const float *Y;    /* the block's rows in fold order (Y itself, or Ybuf) */
    int64_t ldy;
    float *Ybuf;       /* n x nb gathered rows (shuffled folds only) */
    float *pred;       /* n_val_max x nb: one fold's predictions */
    float *UtY;        /* k x (r x nb): each fold's Uᵀ Y_train */
    float *T;          /* (ALPHA_GROUP r) x SUB_VOXELS: a tile of T = M UtY */
    float *Z;          /* r x nb */
    double *y_tr_mean; /* k x nb: training means (fold centring) */
    double *score;     /* k x A x nb */
    double *acc;       /* 5 x nb accumulators */
    double *dj;        /* 2 x r: one alpha's shrinkage factors and their products with p_sum */
};

/* UtY_f = Uᵀ (Y_train - centre) for the voxels of the block. */
static void fold_uty(const struct ridge_ctx *c, const struct fold *fd, struct block *b, float *UtY,
                     double *ymean)
{
    int64_t r = fd->r, nb = b->nb, V = c->V;
    const float *Yb = b->Y;
    V = b->ldy;
    /* two ranges of training rows: [0, v0) and [v1, n) */
    if (fd->v0 > 0)
        c->K->sgemm(true, false, r, nb, fd->v0, 1.0f, fd->U, r, Yb, V, 0.0f, UtY, nb);
    else
        memset(UtY, 0, (size_t)(r * nb) * sizeof *UtY);
    if (fd->v1 < c->n)
        c->K->sgemm(true, false, r, nb, c->n - fd->v1, 1.0f, fd->U + fd->v0 * r, r, Yb + fd->v1 * V, V,
                    1.0f, UtY, nb);
    if (!c->center) {
        memset(ymean, 0, (size_t)nb * sizeof *ymean);
        return;
    }
    /* centre: Uᵀ (Y - 1 mᵀ) = Uᵀ Y - (Uᵀ 1) mᵀ, with m the training mean
     * (per fold) or the global mean (legacy shared mode) */
    if (c->fold_center) {
        memset(ymean, 0, (size_t)nb * sizeof *ymean);
        for (int64_t i = 0; i < c->n; i++) {
            if (i >= fd->v0 && i < fd->v1)
                continue;
            const float *row = Yb + i * V;
            for (int64_t v = 0; v < nb; v++)
                ymean[v] += row[v];
        }
        for (int64_t v = 0; v < nb; v++)
            ymean[v] /= (double)fd->n_tr;
    } else {
        for (int64_t v = 0; v < nb; v++)
            ymean[v] = c->y_mean[b->b0 + v];
    }
    for (int64_t j = 0; j < r; j++)
        for (int64_t v = 0; v < nb; v++)
            UtY[j * nb + v] -= (float)(fd->u_sum[j] * ymean[v]);
}

/* The R² (or Pearson) of every alpha for the block, over fold fd's validation
 * rows, from T = M UtY and Z = Pᵀ y_c (y_c: y minus the training centre):
 *   SS_res = Σ y_c² - 2 Σ_j d_aj u_j z_j + Σ_j u_j T_aj,
 * accumulated in double. */
static void fold_scores(const struct ridge_ctx *c, const struct fold *fd, const struct block *b,
                        const float *UtY, const double *ymean, double *score /* A x nb */)
{
    int64_t nb = b->nb, V = b->ldy, r = fd->r;
    double *sy = b->acc, *syy = sy + nb, *quad = syy + nb, *cross = quad + ALPHA_GROUP * nb,
           *psum = cross + ALPHA_GROUP * nb;
    float *Z = b->Z;
    /* Z = Pᵀ (Y_val - 1 mᵀ) */
    c->K->sgemm(true, false, r, nb, fd->n_val, 1.0f, fd->P, r, b->Y + fd->v0 * V, V, 0.0f, Z, nb);
    if (c->center)
        for (int64_t j = 0; j < r; j++)
            for (int64_t v = 0; v < nb; v++)
                Z[j * nb + v] -= (float)(fd->p_sum[j] * ymean[v]);
    memset(sy, 0, (size_t)(2 * nb) * sizeof *sy);
    for (int64_t i = 0; i < fd->n_val; i++) {
        const float *y = b->Y + (fd->v0 + i) * V;
        for (int64_t v = 0; v < nb; v++) {
            double yv = y[v] - ymean[v];
            sy[v] += yv;
            syy[v] += yv * yv;
        }
    }
    double nv = (double)fd->n_val;
    double *dj = b->dj, *pj = dj + r;
    /* T = (D_a PᵀP D_a)_a UtY, a few alphas and a sub-block of voxels at a time,
     * so that each T tile is still in L2 when ridge_error_sums reads it (all alphas
     * of a 1000-voxel block at once were 8 MB at r = 100, written to memory and
     * read back) */
    for (int64_t a0 = 0; a0 < c->A; a0 += ALPHA_GROUP) {
        int64_t ag = c->A - a0 < ALPHA_GROUP ? c->A - a0 : ALPHA_GROUP;
        for (int64_t s0 = 0; s0 < nb; s0 += SUB_VOXELS) {
            int64_t ns = nb - s0 < SUB_VOXELS ? nb - s0 : SUB_VOXELS;
            c->K->sgemm(false, false, ag * r, ns, r, 1.0f, fd->M + a0 * r * r, r, UtY + s0, nb, 0.0f, b->T, ns);
            for (int64_t a = 0; a < ag; a++) {
                const float *d = fd->d + (a0 + a) * r;
                for (int64_t j = 0; j < r; j++) {
                    dj[j] = d[j];
                    pj[j] = fd->p_sum[j] * dj[j];
                }
                c->K->ridge_error_sums(r, ns, nb, UtY + s0, Z + s0, b->T + a * r * ns, ns, dj, pj, quad + a * nb + s0,
                           cross + a * nb + s0, psum + a * nb + s0);
            }
        }
        for (int64_t a = 0; a < ag; a++)
            for (int64_t v = 0; v < nb; v++) {
                const double qd = quad[a * nb + v], cr = cross[a * nb + v], ps = psum[a * nb + v];
                double ss_tot = syy[v] - sy[v] * sy[v] / nv;   /* about the validation mean */
                if (ss_tot < 0)
                    ss_tot = 0;
                double ss_res = syy[v] - 2 * cr + qd;
                if (ss_res < 0)
                    ss_res = 0;
                double val;
                if (c->prm->score == RIDGE_PEARSON) {
                    double cov = cr - sy[v] * ps / nv, sp2 = qd - ps * ps / nv;
                    val = ss_tot > 0 && sp2 > 0 ? cov / sqrt(ss_tot * sp2) : 0.0;
                } else if (c->legacy) {
                    val = ss_tot == 0 ? 0.0 : 1.0 - ss_res / ss_tot;
                } else {
                    val = 1.0 - ss_res / (ss_tot + 1e-10);
                }
                score[(a0 + a) * nb + v] = val;
            }
    }
}

static int block_alloc(const struct ridge_ctx *c, struct block *b, struct nf_error *err)
{
    int64_t nvmax = 0, rmax = 0, nb = c->block;
    for (int64_t f = 0; f < c->k; f++) {
        if (c->folds[f].n_val > nvmax)
            nvmax = c->folds[f].n_val;
        if (c->folds[f].r > rmax)
            rmax = c->folds[f].r;
    }
    b->UtY = nf_malloc((size_t)(c->k * rmax * nb) * sizeof *b->UtY);
    b->pred = nf_malloc((size_t)(nvmax * nb) * sizeof *b->pred);
    b->Ybuf = c->perm ? nf_malloc((size_t)(c->n * nb) * sizeof *b->Ybuf) : NULL;
    if (!b->pred || (c->perm && !b->Ybuf))
        return NF_FAIL(err, NF_ENOMEM, "out of memory for a block of %lld voxels", (long long)nb);
    b->T = nf_malloc((size_t)(ALPHA_GROUP * rmax * SUB_VOXELS) * sizeof *b->T);
    b->Z = nf_malloc((size_t)(rmax * nb) * sizeof *b->Z);
    b->y_tr_mean = nf_calloc((size_t)(c->k * nb), sizeof *b->y_tr_mean);
    b->score = nf_malloc((size_t)(c->k * c->A * nb) * sizeof *b->score);
    b->acc = nf_malloc((size_t)((2 + 3 * ALPHA_GROUP) * nb) * sizeof *b->acc);
    b->dj = nf_malloc((size_t)(2 * rmax + 1) * sizeof *b->dj);
    if (!b->UtY || !b->T || !b->Z || !b->y_tr_mean || !b->score || !b->acc || !b->dj)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for a block of %lld voxels", (long long)nb);
    return 0;
}

static void block_free(struct block *b)
{
    free(b->UtY);
    free(b->T);
    free(b->Z);
    free(b->pred);
    free(b->Ybuf);
    free(b->y_tr_mean);
    free(b->score);
    free(b->acc);
    free(b->dj);
}

/* Point the block at its rows of Y in fold order (gathered when shuffled). */
static void block_rows(const struct ridge_ctx *c, struct block *b)
{
    b->Y = nf_ridge_block_rows(c->Y, c->n, c->V, c->perm, b->b0, b->nb, b->Ybuf, &b->ldy);
}

/* CV scores of every fold and alpha for the block (b->score), keeping each
 * fold's UtY for the predictions. */
static void block_cv(const struct ridge_ctx *c, struct block *b)
{
    block_rows(c, b);
    int64_t rmax = 0;
    for (int64_t f = 0; f < c->k; f++)
        rmax = c->folds[f].r > rmax ? c->folds[f].r : rmax;
    for (int64_t f = 0; f < c->k; f++) {
        const struct fold *fd = &c->folds[f];
        float *UtY = b->UtY + f * rmax * b->nb;
        double *ymean = b->y_tr_mean + f * b->nb;
        fold_uty(c, fd, b, UtY, ymean);
        fold_scores(c, fd, b, UtY, ymean, b->score + f * c->A * b->nb);
    }
}

static void free_ctx(struct ridge_ctx *c)
{
    for (int64_t f = 0; c->folds && f < c->k; f++)
        fold_release(&c->folds[f]);
    free(c->folds);
    free(c->U);
    free(c->s);
    free(c->Vt);
    free(c->u_sum);
    free(c->x_mean);
    free(c->y_mean);
    free(c->perm);
    free(c->fold_size);
    free(c->X_perm);
}

/* ---- voxel blocks as parts of a SLURM run (node.h: nf_ckpt_skip) ----
 * A part computes the blocks it is given and commits each block's outputs
 * as one checkpoint chunk; the run that merges the parts resumes every block
 * from them. Only parts commit blocks: a local run would write every output
 * twice. Per-voxel mode only (shared mode chooses its alpha from all voxels). */
struct block_head { int64_t nb, has_score, has_cv, has_pred; };

/* Row `row` of a block's chunk: alpha, score, the k·A cv_scores rows, the n
 * prediction rows, the p weight rows (the optional ones when present). */
static float *block_row(const struct ridge_ctx *c, struct nf_value **out, int64_t row, int64_t b0)
{
    if (row == 0)
        return out[RIDGE_OUT_ALPHA]->u.mat.data + b0;
    row--;
    if (out[RIDGE_OUT_SCORE]) {
        if (row == 0)
            return out[RIDGE_OUT_SCORE]->u.mat.data + b0;
        row--;
    }
    if (out[RIDGE_OUT_CV_SCORES]) {
        if (row < c->k * c->A)
            return out[RIDGE_OUT_CV_SCORES]->u.mat.data + row * c->V + b0;
        row -= c->k * c->A;
    }
    if (out[RIDGE_OUT_PREDICTIONS]) {
        if (row < c->n)
            return out[RIDGE_OUT_PREDICTIONS]->u.mat.data + row * c->V + b0;
        row -= c->n;
    }
    return out[RIDGE_OUT_WEIGHTS]->u.mat.data + row * c->V + b0;
}

static int64_t block_rows_in_chunk(const struct ridge_ctx *c, struct nf_value **out)
{
    return 1 + (out[RIDGE_OUT_SCORE] != NULL) + (out[RIDGE_OUT_CV_SCORES] ? c->k * c->A : 0) + (out[RIDGE_OUT_PREDICTIONS] ? c->n : 0) + c->p;
}

static void block_commit(const struct ridge_ctx *c, struct nf_value **out, const struct nf_run *run, int64_t i,
                         int64_t b0, int64_t nb)
{
    int64_t rows = block_rows_in_chunk(c, out);
    size_t bytes = sizeof(struct block_head) + (size_t)(rows * nb) * sizeof(float);
    unsigned char *buf = nf_malloc(bytes);
    if (!buf)
        return;   /* not committed: the merging run computes this block itself */
    struct block_head h = { nb, out[RIDGE_OUT_SCORE] != NULL, out[RIDGE_OUT_CV_SCORES] != NULL,
                            out[RIDGE_OUT_PREDICTIONS] != NULL };
    memcpy(buf, &h, sizeof h);
    float *dst = (float *)(buf + sizeof h);
    for (int64_t r = 0; r < rows; r++)
        memcpy(dst + r * nb, block_row(c, out, r, b0), (size_t)nb * sizeof(float));
    struct nf_error e = { 0 };
    nf_ckpt_put(run->ckpt, i, buf, bytes, &e);
    free(buf);
}

/* Blocks committed by parts of this run: their outputs, done[] set. */
static int resume_blocks(const struct ridge_ctx *c, struct nf_value **out, const struct nf_run *run,
                         int64_t n_blocks, bool *done, int64_t *n_done)
{
    int64_t *idx = NULL;
    size_t n_idx = 0;
    int rc;
    *n_done = 0;
    NF_TRY(rc = nf_ckpt_list(run->ckpt, &idx, &n_idx, run->err));
    int64_t rows = block_rows_in_chunk(c, out);
    for (size_t t = 0; t < n_idx; t++) {
        int64_t i = idx[t], b0 = i * c->block, nb = c->V - b0 < c->block ? c->V - b0 : c->block;
        void *data = NULL;
        size_t bytes = 0;
        struct nf_error e = { 0 };
        if (i < 0 || i >= n_blocks || done[i] || nf_ckpt_get(run->ckpt, i, &data, &bytes, &e) != 1)
            continue;
        struct block_head h;
        if (bytes == sizeof h + (size_t)(rows * nb) * sizeof(float)) {
            memcpy(&h, data, sizeof h);
            if (h.nb == nb && h.has_score == (out[RIDGE_OUT_SCORE] != NULL) &&
                h.has_cv == (out[RIDGE_OUT_CV_SCORES] != NULL) &&
                h.has_pred == (out[RIDGE_OUT_PREDICTIONS] != NULL)) {
                const float *src = (const float *)((const unsigned char *)data + sizeof h);
                for (int64_t r = 0; r < rows; r++)
                    memcpy(block_row(c, out, r, b0), src + r * nb, (size_t)nb * sizeof(float));
                done[i] = true;
                (*n_done)++;
            }
        }
        free(data);
    }
    if (*n_done)
        nf_log("nlflow: node '%s': %lld of %lld voxel blocks from its parts", nf_node_id(run->node),
               (long long)*n_done, (long long)n_blocks);
fail:
    free(idx);
    return rc;
}

/* node_type.chunks: the voxel blocks of one run (as ridge_run cuts them). */
static int64_t ridge_chunks(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    const struct ridge_params *prm = params;
    (void)out;
    if (prm->alpha_mode == RIDGE_SHARED || prm->bands.n || in[RIDGE_IN_Y].kind != NF_KIND_MATRIX || in[RIDGE_IN_Y].dim[1] < 1)
        return 0;
    int64_t V = in[RIDGE_IN_Y].dim[1], block = (V + 7) / 8;
    if (block > BLOCK_VOXELS)
        block = BLOCK_VOXELS;
    return (V + block - 1) / block;
}

/* ---- voxel blocks over threads ---- */

struct ridge_work {
    const struct ridge_ctx *c;
    struct nf_value **out;
    int pass;                 /* 1: shared mode's CV (shared_first_pass); 2: everything else */
    int64_t shared_best;      /* pass 2, shared mode: the chosen alpha, else -1 */
    double *block_sums;       /* pass 1: n_blocks x A */
    float *alpha_means;       /* shared mode: A x V, each alpha's mean score over folds */
    int64_t n_blocks;
    const bool *done;         /* pass 2: blocks resumed from parts (NULL: none) */
    const struct nf_run *run; /* interrupts and progress */
    int64_t passes;           /* voxels are reported once per pass */
    atomic_long next, voxels_done;
    atomic_int failed;
    pthread_mutex_t lock;
    struct nf_error err;      /* the first failure */
};

/* Voxel v's mean score over folds at alpha a, rounded to float as nltools'
 * float32 scores are. */
static float fold_mean(const struct ridge_ctx *c, const struct block *b, int64_t a, int64_t v)
{
    double sum = 0;
    for (int64_t f = 0; f < c->k; f++)
        sum += b->score[(f * c->A + a) * b->nb + v];
    return (float)(sum / (double)c->k);
}

static void write_cv_scores(const struct ridge_ctx *c, const struct block *b, struct nf_value **out)
{
    if (out[RIDGE_OUT_CV_SCORES])
        for (int64_t fa = 0; fa < c->k * c->A; fa++)
            for (int64_t v = 0; v < b->nb; v++)
                out[RIDGE_OUT_CV_SCORES]->u.mat.data[fa * c->V + b->b0 + v] = (float)b->score[fa * b->nb + v];
}

/* Cross-validated predictions at each voxel's alpha, from each fold's UtY
 * (b->UtY, b->y_tr_mean: fold_uty's). */
static void predict_block(const struct ridge_ctx *c, struct block *b, struct nf_value **out, float *coef,
                          const int64_t *best)
{
    int64_t rmax = 0;
    for (int64_t f = 0; f < c->k; f++)
        rmax = c->folds[f].r > rmax ? c->folds[f].r : rmax;
    for (int64_t f = 0; f < c->k; f++) {
        const struct fold *fd = &c->folds[f];
        const float *UtY = b->UtY + f * rmax * b->nb;
        for (int64_t j = 0; j < fd->r; j++)
            for (int64_t v = 0; v < b->nb; v++) {
                double sj = fd->s[j];
                coef[j * b->nb + v] = (float)(UtY[j * b->nb + v] * (sj / (sj * sj + c->alphas[best[v]])));
            }
        c->K->sgemm(false, false, fd->n_val, b->nb, fd->r, 1.0f, fd->P, fd->r, coef, b->nb, 0.0f,
                    b->pred, b->nb);
        const double *ym = b->y_tr_mean + f * b->nb;
        for (int64_t i = 0; i < fd->n_val; i++) {
            int64_t row = c->perm ? c->perm[fd->v0 + i] : fd->v0 + i;   /* back to Y's order */
            float *dst = out[RIDGE_OUT_PREDICTIONS]->u.mat.data + row * c->V + b->b0;
            for (int64_t v = 0; v < b->nb; v++)
                dst[v] = b->pred[i * b->nb + v] + (float)ym[v];
        }
    }
}

/* The refit on all samples, W = Vtᵀ diag(d_alpha(v)) Uᵀ (Y - mean), in two
 * steps: refit_uty writes Uᵀ Y (r x nb, leading dimension ld) to dst, and
 * refit_weights finishes from it (in `full`, r x nb, overwritten). */
static void refit_uty(const struct ridge_ctx *c, const struct block *b, float *dst, int64_t ld)
{
    c->K->sgemm(true, false, c->r, b->nb, c->n, 1.0f, c->U, c->r, b->Y, b->ldy, 0.0f, dst, ld);
}

static void refit_weights(const struct ridge_ctx *c, const struct block *b, struct nf_value **out, float *full,
                          const int64_t *best)
{
    for (int64_t j = 0; j < c->r; j++)
        for (int64_t v = 0; v < b->nb; v++) {
            double sj = c->s[j], uty = full[j * b->nb + v] - (c->center ? c->u_sum[j] * c->y_mean[b->b0 + v] : 0.0);
            full[j * b->nb + v] = (float)(uty * (sj / (sj * sj + c->alphas[best[v]])));
        }
    c->K->sgemm(true, false, c->p, b->nb, c->r, 1.0f, c->Vt, c->p, full, b->nb, 0.0f,
                out[RIDGE_OUT_WEIGHTS]->u.mat.data + b->b0, c->V);
}

/* Per-voxel mode, one block after block_cv: choose each voxel's alpha (the
 * first best mean over folds), write scores, predictions, weights. */
static void finish_block(const struct ridge_ctx *c, struct block *b, struct nf_value **out, float *coef,
                         float *full, int64_t *best)
{
    for (int64_t v = 0; v < b->nb; v++) {
        int64_t pick = 0;
        float pick_mean = 0;
        for (int64_t a = 0; a < c->A; a++) {
            float mean = fold_mean(c, b, a, v);
            if (a == 0 || mean > pick_mean) {
                pick = a;
                pick_mean = mean;
            }
        }
        best[v] = pick;
        out[RIDGE_OUT_ALPHA]->u.mat.data[b->b0 + v] = (float)c->alphas[pick];
        out[RIDGE_OUT_SCORE]->u.mat.data[b->b0 + v] = pick_mean;
    }
    write_cv_scores(c, b, out);
    if (out[RIDGE_OUT_PREDICTIONS])
        predict_block(c, b, out, coef, best);
    refit_uty(c, b, full, b->nb);
    refit_weights(c, b, out, full, best);
}

/* Without folds (nf_ridge_fit_only, c->k = 0): the block's weights at the
 * fixed alpha, by the refit that follows the CV otherwise (the same bits). */
static void fit_block(const struct ridge_ctx *c, struct block *b, struct nf_value **out, float *full, int64_t *best)
{
    block_rows(c, b);
    for (int64_t v = 0; v < b->nb; v++) {
        best[v] = 0;
        out[RIDGE_OUT_ALPHA]->u.mat.data[b->b0 + v] = (float)c->alphas[0];
    }
    refit_uty(c, b, full, b->nb);
    refit_weights(c, b, out, full, best);
}

/* Shared mode's first pass, one block after block_cv: everything that does
 * not depend on the alpha chosen. The block's score sums per alpha (folds,
 * then voxels in order), each alpha's mean over folds per voxel (alpha_means,
 * A x V), the cv_scores, and the refit's Uᵀ Y, kept in the first r rows of
 * the block's weights (r <= p) until the alpha is known. */
static void shared_first_pass(const struct ridge_ctx *c, struct block *b, struct nf_value **out, double *sums,
                              float *alpha_means)
{
    for (int64_t a = 0; a < c->A; a++) {   /* one alpha's k score rows, while they are in cache */
        for (int64_t f = 0; f < c->k; f++)
            for (int64_t v = 0; v < b->nb; v++)
                sums[a] += b->score[(f * c->A + a) * b->nb + v];
        for (int64_t v = 0; v < b->nb; v++)
            alpha_means[a * c->V + b->b0 + v] = fold_mean(c, b, a, v);
    }
    write_cv_scores(c, b, out);
    refit_uty(c, b, out[RIDGE_OUT_WEIGHTS]->u.mat.data + b->b0, c->V);
}

/* Shared mode's second pass, one block, once the alpha is chosen: its scores
 * (from alpha_means), the predictions (each fold's UtY again: only when they
 * are wanted) and the weights (from the kept Uᵀ Y). */
static void shared_finish_block(const struct ridge_ctx *c, struct block *b, struct nf_value **out,
                                int64_t shared_best, const float *alpha_means, float *coef, float *full,
                                int64_t *best)
{
    for (int64_t v = 0; v < b->nb; v++) {
        best[v] = shared_best;
        out[RIDGE_OUT_ALPHA]->u.mat.data[b->b0 + v] = (float)c->alphas[shared_best];
        out[RIDGE_OUT_SCORE]->u.mat.data[b->b0 + v] = alpha_means[shared_best * c->V + b->b0 + v];
    }
    if (out[RIDGE_OUT_PREDICTIONS]) {
        int64_t rmax = 0;
        for (int64_t f = 0; f < c->k; f++)
            rmax = c->folds[f].r > rmax ? c->folds[f].r : rmax;
        block_rows(c, b);
        for (int64_t f = 0; f < c->k; f++)
            fold_uty(c, &c->folds[f], b, b->UtY + f * rmax * b->nb, b->y_tr_mean + f * b->nb);
        predict_block(c, b, out, coef, best);
    }
    for (int64_t j = 0; j < c->r; j++)
        memcpy(full + j * b->nb, out[RIDGE_OUT_WEIGHTS]->u.mat.data + j * c->V + b->b0,
               (size_t)b->nb * sizeof *full);
    refit_weights(c, b, out, full, best);
}

static void *ridge_worker(void *arg)
{
    struct ridge_work *w = arg;
    const struct ridge_ctx *c = w->c;
    struct block b = { 0 };
    struct nf_error err = { 0 };
    float *coef = nf_malloc((size_t)(c->r * c->block) * sizeof *coef);
    float *full = nf_malloc((size_t)(c->r * c->block) * sizeof *full);
    int64_t *best = nf_malloc((size_t)c->block * sizeof *best);
    if (!coef || !full || !best)
        NF_FAIL(&err, NF_ENOMEM, "out of memory");
    else if (c->k > 0)   /* without folds a block needs no scratch */
        block_alloc(c, &b, &err);
    for (int64_t i; !err.code && !atomic_load(&w->failed) && (i = atomic_fetch_add(&w->next, 1)) < w->n_blocks;) {
        if (nf_run_interrupted(w->run)) {   /* between voxel blocks (tens of ms each) */
            NF_FAIL(&err, NF_EINTR, "interrupted");
            break;
        }
        b.b0 = i * c->block;
        b.nb = c->V - b.b0 < c->block ? c->V - b.b0 : c->block;
        if (w->pass == 2 && ((w->done && w->done[i]) || nf_ckpt_skip(w->run->ckpt, i)))
            continue;   /* resumed from a part, or another part's */
        if (w->pass == 1) {
            block_cv(c, &b);
            shared_first_pass(c, &b, w->out, w->block_sums + i * c->A, w->alpha_means);
        } else {
            if (c->k == 0) {
                fit_block(c, &b, w->out, full, best);
            } else if (w->shared_best >= 0) {
                shared_finish_block(c, &b, w->out, w->shared_best, w->alpha_means, coef, full, best);
            } else {
                block_cv(c, &b);
                finish_block(c, &b, w->out, coef, full, best);
            }
            if (nf_ckpt_partial(w->run->ckpt)) {
                pthread_mutex_lock(&w->lock);
                block_commit(c, w->out, w->run, i, b.b0, b.nb);
                pthread_mutex_unlock(&w->lock);
            }
        }
        nf_progress(w->run, atomic_fetch_add(&w->voxels_done, b.nb) + b.nb, w->passes * c->V, "voxels");
    }
    if (err.code && atomic_exchange(&w->failed, 1) == 0) {
        pthread_mutex_lock(&w->lock);
        w->err = err;
        pthread_mutex_unlock(&w->lock);
    }
    block_free(&b);
    free(coef);
    free(full);
    free(best);
    return NULL;
}

/* Blocks over the node's threads, each with single-threaded BLAS (set for
 * the process while the node runs): the GEMMs are small enough that splitting
 * them costs more (spinning BLAS threads) than running whole blocks side by
 * side, and the double-precision epilogue then runs in parallel too. */
static int run_workers(struct ridge_work *w, const struct nf_run *run)
{
    int threads = run->env && run->env->threads > 1 ? run->env->threads : 1;
    if (threads > w->n_blocks)
        threads = (int)w->n_blocks;
    pthread_t tids[64];
    int started = 0;
    pthread_mutex_init(&w->lock, NULL);
    for (int t = 0; t < threads - 1 && t < 64; t++)
        if (pthread_create(&tids[t], NULL, ridge_worker, w) == 0)
            started++;
    ridge_worker(w);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    pthread_mutex_destroy(&w->lock);
    if (atomic_load(&w->failed)) {
        *run->err = w->err;
        return w->err.code ? w->err.code : NF_EBUG;
    }
    return 0;
}

static int ridge_run(struct nf_run *run)
{
    const struct ridge_params *prm = run->params;
    /* without bands, band_alpha and split_r2 are not produced (a node using
     * them is told so by the engine); their wanted[] entries are not read,
     * since callers size it by the plain outputs */
    if (prm->bands.n)
        return nf_ridge_banded_run(run);
    const struct nf_value *yin = run->in[RIDGE_IN_Y];
    struct ridge_ctx c = { 0 };
    struct nf_value *out[6] = { 0 };
    double *alpha_score_sum = NULL;
    float *alpha_means = NULL;   /* shared mode: struct ridge_work's */
    bool *done = NULL;
    int rc = 0, blas = nf_blas_threads();

    /* Single-threaded BLAS for the whole node, factorisations included: the
     * work is split over voxel blocks instead, and BLAS worker threads woken by
     * a threaded call would spin (sched_yield) for a while afterwards, taking a
     * core from the block workers. */
    nf_blas_set_threads(1);
    c.prm = prm;
    c.K = nf_kernels_cpu();
    nf_ridge_read_run(run, &c.X, &c.Y, &c.n, &c.p, &c.V, &c.k, &c.alphas, &c.A, &c.legacy, &c.center,
                      &c.fold_center);
    /* a fixed alpha and no cross-validated output wanted: no folds at all (k = 0) */
    bool fit_only = nf_ridge_fit_only(prm, run->wanted);
    if (fit_only)
        c.k = 0;

    NF_TRY(rc = nf_ridge_check_inputs(run, c.X, c.Y, c.n, c.p, c.V, c.k, c.A, c.center));

    /* blocks depend on V only (never on the thread count), so results are the
     * same bits whatever the threads: at most BLOCK_VOXELS, and at least 8
     * blocks so that small problems still spread over threads */
    c.block = (c.V + 7) / 8;
    if (c.block > BLOCK_VOXELS)
        c.block = BLOCK_VOXELS;
    if (c.block < 1)
        c.block = 1;
    /* folds first: leave-one-group-out decides their number */
    if (!fit_only)
        NF_TRY(rc = nf_ridge_assign_folds(prm, c.n, c.p, c.k, &c.X, &c.fold_size, &c.perm, &c.X_perm,
                                          run->in[RIDGE_IN_GROUPS], run, &c.k));
    struct nf_geom *geom = yin->u.mat.geom;
    NF_TRY(rc = nf_ridge_new_outputs(run, c.n, c.p, c.k, c.A, c.V, geom, out));

    /* global centring (the refit, and legacy mode's only centring) */
    c.x_mean = nf_calloc((size_t)c.p, sizeof *c.x_mean);
    c.y_mean = nf_calloc((size_t)c.V, sizeof *c.y_mean);
    if (!c.x_mean || !c.y_mean) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (c.center) {
        nf_ridge_column_means(c.X, c.n, c.p, 0, 0, c.x_mean);
        for (int64_t i = 0; i < c.n; i++)
            for (int64_t v = 0; v < c.V; v++)
                c.y_mean[v] += c.Y[i * c.V + v];
        for (int64_t v = 0; v < c.V; v++)
            c.y_mean[v] /= (double)c.n;
    }
    NF_TRY(rc = factor(&c, 0, 0, c.center ? CENTER_GLOBAL : CENTER_NONE, c.x_mean, &c.U, &c.s, &c.Vt,
                       &c.r, &c.u_sum, run->err));
    if (!fit_only)
        NF_TRY(rc = setup_folds(&c, run->err));

    /* shared mode needs every voxel's scores before it can choose: a first
     * pass does all the CV and sums the scores per alpha (per block, then in
     * block order, so that the choice does not depend on thread timing); the
     * second only picks up what depends on the alpha chosen */
    int64_t shared_best = -1;
    struct ridge_work w = { .c = &c, .out = out, .shared_best = -1,
                            .n_blocks = (c.V + c.block - 1) / c.block, .run = run,
                            .passes = c.legacy && !fit_only ? 2 : 1 };
    if (c.legacy && !fit_only) {
        alpha_score_sum = nf_calloc((size_t)(c.A * (w.n_blocks + 1)), sizeof *alpha_score_sum);
        alpha_means = nf_malloc((size_t)(c.A * c.V + 1) * sizeof *alpha_means);
        if (!alpha_score_sum || !alpha_means) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        w.pass = 1;
        w.alpha_means = alpha_means;
        w.block_sums = alpha_score_sum + c.A;
        NF_TRY(rc = run_workers(&w, run));
        for (int64_t i = 0; i < w.n_blocks; i++)
            for (int64_t a = 0; a < c.A; a++)
                alpha_score_sum[a] += w.block_sums[i * c.A + a];
        shared_best = 0;
        for (int64_t a = 1; a < c.A; a++)   /* ties: the first alpha */
            if (alpha_score_sum[a] > alpha_score_sum[shared_best])
                shared_best = a;
    }
    w.pass = 2;
    w.shared_best = shared_best;
    atomic_store(&w.next, 0);
    if (!c.legacy && run->ckpt) {   /* the parts of a SLURM run, merged */
        int64_t resumed = 0;
        if (!(done = nf_calloc((size_t)w.n_blocks + 1, sizeof *done))) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        NF_TRY(rc = resume_blocks(&c, out, run, w.n_blocks, done, &resumed));
        w.done = done;
        atomic_store(&w.voxels_done, 0);
    }
    NF_TRY(rc = run_workers(&w, run));
    rc = nf_ridge_finish_outputs(run, out, c.center, c.x_mean, c.y_mean, c.p, c.V);
fail:
    nf_blas_set_threads(blas);
    for (int o = 0; o < RIDGE_N_PLAIN_OUT; o++)
        nf_value_unref(out[o]);
    free(alpha_score_sum);
    free(alpha_means);
    free(done);
    free_ctx(&c);
    return rc;
}

const struct nf_node_type nf_node_ridge = {
    .name = "ridge",
    .summary = "cross-validated ridge encoding models for every voxel (nltools semantics)",
    .description =
        "Fits Y (samples x voxels) from X (samples x features) with an L2 penalty for every voxel. "
        "With `alpha_mode: per_voxel` (default, nltools' solve_ridge_cv) each voxel gets the alpha "
        "of `alphas` with the best mean cross-validated R² (1 - SS_res/(SS_tot + 1e-10) on each "
        "validation fold of a contiguous, unshuffled k-fold; ties go to the first alpha); with "
        "`shared` one alpha is chosen for all voxels by nltools' legacy ridge_cv rule. The weights "
        "are refit on all samples. One thin SVD per fold; all alphas and voxels from it as GEMMs, "
        "voxels in blocks. Shared mode costs what per_voxel does: its first pass over the voxels does "
        "all the cross-validation, the second only applies the alpha chosen.\n\n"
        "**A fixed alpha.** With `alpha` instead of `alphas` there is nothing to choose: unless `score`, "
        "`cv_scores` or `predictions` is used by another node, the model is fit once on all samples "
        "(one SVD and the GEMMs of the refit, the weights the same bits as the refit of a "
        "cross-validated run) and no fold is cut, so `cv`, `shuffle` and `groups` have no effect and "
        "`score`, `cv_scores` and `predictions` are not produced. Using any of them brings back the "
        "cross-validation for it, as before. With bands the same holds when there is a single band "
        "weighting (one row of `gammas`, or `n_iter: 1`: the uniform one) and a fixed `alpha`. The "
        "one fit runs on the CPU, also where the GPU was chosen; `cv`, `shuffle` and `seed` stay in "
        "the cache key (changing them recomputes the same weights).\n\n"
        "**Banded ridge.** With `bands` the node is himalaya 0.4's BandedRidgeCV (and "
        "MultipleKernelRidgeCV on linear kernels) with solver random_search: the columns of X are "
        "split into feature spaces, and each voxel gets the band weights gamma (on the simplex) and "
        "the alpha with the best mean cross-validated score; band b is penalised by alpha / gamma_b. "
        "Candidates are the uniform weighting, then Dirichlet samples cycling through "
        "`concentration` (`candidates: random`, `n_iter` in all, seeded by `seed`), or every "
        "weighting on a grid of 1/`grid_steps` (`candidates: grid`), or `gammas` as given. As in "
        "himalaya, the mean over folds gets a 1e-10 log(alpha) slope for ties and a voxel moves to a "
        "later candidate only when it scores better by the float32 epsilon. Mapping: `bands` = "
        "groups (or the kernelizer's column sets); `n_iter`, `concentration`, `alphas` = the "
        "solver_params of the same names; `gammas` = solver_params n_iter given as an array; "
        "`seed` = random_state (the Dirichlet draws are nlflow's own, not numpy's: give `gammas` "
        "to reproduce a himalaya run exactly); `cv` = cv (contiguous KFold; `shuffle` and "
        "`groups` as without bands); `score: r2` = score_func r2_score, `score: l2_neg_loss` = "
        "himalaya's default; `fit_intercept` = fit_intercept (centred per training fold). "
        "Outputs: `weights` = coef_ (on the unscaled columns), `alpha` = best_alphas_, "
        "`band_alpha` = exp(-deltas_), `cv_scores` = cv_scores_ (candidates x voxels), `score` = "
        "the chosen candidate's entry of cv_scores_, `split_r2` = score(X, Y, split=True) on the "
        "training data (with fit_intercept, of the centred data and predictions, where himalaya "
        "has none). Per candidate and fold one thin SVD of the scaled training design (r = "
        "min(n_train, p), so the kernel-sized problem when p > n) and every alpha's validation "
        "error from one stacked GEMM, voxels in blocks over threads; the refit is one SVD per "
        "candidate some voxel chose. With a cache the run is checkpointed: the per-voxel state "
        "(best score, candidate and alpha) after the candidates done so far, committed when the "
        "candidates since the last commit took 100 times what a commit takes (about 1% of the "
        "node's time), with the cv_scores rows, and the refit weights of candidate groups within "
        "the same budget; a killed or interrupted run resumes from them with the same outputs, "
        "on any thread count. Not available with bands: cross-validated predictions, "
        "alpha_mode shared, pearson scores, himalaya's conservative, jitter_alphas and "
        "local_alpha=False, SLURM parts, the GPU (banded runs on the CPU).",
    .version = 2,
    .params = ridge_params_table,
    .params_size = sizeof(struct ridge_params),
    .inputs = ridge_inputs,
    .outputs = ridge_outputs,
    .check = ridge_check,
    .resolve = ridge_resolve,
    .estimate = ridge_estimate,
    .run_cpu = ridge_run,
    .param_matters = ridge_param_matters,
#ifdef HAVE_CUDA
    .run_gpu = nf_ridge_run_gpu,
#endif
    .cost = nf_ridge_cost,
    .chunks = ridge_chunks,
    .methods = ridge_methods,
    .flags = NF_NODE_GPU,
};
