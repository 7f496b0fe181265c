/* fixed_effects.c — the `fixed_effects` node: each subject's runs combined
 * into one map per contrast, as nilearn's compute_fixed_effects.
 *
 * A first-level model gives an effect and its variance per run; a group test
 * wants one map per subject. This node groups the runs of a collection by
 * the subject (and session) entities of their labels (sub-01_task-x_run-1
 * and sub-01_task-x_run-2 make sub-01), and combines each group voxel by
 * voxel in double precision: the mean effect and mean variance / n, or with
 * `precision_weighted` the inverse-variance weighted mean and 1 / sum of the
 * weights; then t = effect / sqrt(variance) and its z with the runs' summed
 * degrees of freedom, exactly nilearn 0.14's formulas (floors, clips and
 * caps included). Each row of a c x V input is its own contrast (nilearn's
 * call per contrast, not an F test). The outputs are collections with one
 * item per group, so that `permute` stacks them, labelled by the group and
 * the entities its runs share (sub-01_task-x_space-MNI: the file names of
 * the subject's maps keep task and space as the runs' do).
 *
 * The engine hands the node both collections whole (NF_PT_COLL, never
 * mapped); the number of groups depends on the labels, which plans do not
 * carry, so the output shapes are left unknown until the run.
 */
#include "fixed_effects.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/distributions.h"
#include "core/util.h"

#define FAIL_NODE(err, node, code, ...) NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node), __VA_ARGS__)

#define VARIANCE_FLOOR 1e-16   /* nilearn's `tiny` in _compute_fixed_effects_params */
#define CONTRAST_TINY 1e-50    /* Contrast's DEF_TINY */
#define DOF_MAX 1e10           /* Contrast's DEF_DOFMAX */

#define FIELD(f) offsetof(struct fixed_effects_params, f)
static const struct nf_param fixed_effects_params_table[] = {
    NF_PARAM_BOOL("precision_weighted", FIELD(precision_weighted), false,
                  "weight each run by its inverse variance (effect = sum(e/v) / sum(1/v), variance = "
                  "1 / sum(1/v)); false (nilearn's default): the mean effect, variance = mean(v) / runs"),
    NF_PARAM_NUM("dof", FIELD(dof), 100, 1, 1e10,
                 "degrees of freedom of each run's model; the combined t has their sum (100 per run is "
                 "nilearn's assumption when compute_fixed_effects is given no dofs)"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port fixed_effects_inputs[] = {
    { "effect", "per-run effect maps (1 x voxels, or contrasts x voxels), labelled sub-XX[_ses-YY]_...",
      NF_PT_COLL, 0 },
    { "variance", "their variance maps, same runs in the same order", NF_PT_COLL, 0 },
    NF_PORT_END,
};
static const struct nf_port fixed_effects_outputs[] = {
    { "effect", "per subject (and session): the combined effect, labelled sub-XX[_ses-YY][_<shared entities>]", NF_PT_COLL, 0 },
    { "variance", "per subject: the combined variance", NF_PT_COLL, 0 },
    { "t", "per subject: effect / sqrt(variance), with the runs' summed degrees of freedom", NF_PT_COLL, 0 },
    { "z", "per subject: the z score of t (nilearn's z_score)", NF_PT_COLL, 0 },
    NF_PORT_END,
};
NF_PORTS_MATCH(fixed_effects_inputs, FIXED_EFFECTS_N_IN);
NF_PORTS_MATCH(fixed_effects_outputs, FIXED_EFFECTS_N_OUT);

/* ---- Student's t and the normal quantile ---- */


void fixed_effects_combine(const double *effect, const double *variance, size_t n, bool precision_weighted,
                           double dof_total, double *out_effect, double *out_variance, double *out_t,
                           double *out_z)
{
    double fe = 0, fv = 0;
    if (precision_weighted) {
        double wsum = 0, ewsum = 0;
        for (size_t i = 0; i < n; i++) {
            double w = 1 / fmax(variance[i], VARIANCE_FLOOR);
            wsum += w;
            ewsum += effect[i] * w;
        }
        fv = 1 / wsum;
        fe = ewsum * fv;
    } else {
        for (size_t i = 0; i < n; i++) {
            fe += effect[i];
            fv += fmax(variance[i], VARIANCE_FLOOR);
        }
        fe /= (double)n;
        fv = fv / (double)n / (double)n;
    }
    double t = fe / sqrt(fmax(fv, CONTRAST_TINY));
    double dof = fmin(dof_total, DOF_MAX);
    double z = t;
    if (!isnan(t)) {
        /* nilearn: z = isf(sf(t)) where that is >= 0, else ppf(cdf(t)); both
           p-values clipped to [1e-300, 1 - 1e-16]; by symmetry sign(t) isf(sf(|t|)) */
        double p = fmax(nf_t_sf(fabs(t), dof), 1e-300);
        z = p >= 0.5 ? 0 : copysign(nf_normal_isf(p), t);
    }
    *out_effect = fe;
    *out_variance = fv;
    *out_t = t;
    *out_z = z;
}

char *fixed_effects_group(const char *label, bool *oom)
{
    *oom = false;
    if (!label || strncmp(label, "sub-", 4) != 0)
        return NULL;
    size_t n = 4;
    while (isalnum((unsigned char)label[n]))
        n++;
    if (n == 4)
        return NULL;
    if (strncmp(label + n, "_ses-", 5) == 0) {
        size_t m = n + 5;
        while (isalnum((unsigned char)label[m]))
            m++;
        if (m > n + 5)
            n = m;
    }
    char *g = nf_strndup(label, n);
    *oom = !g;
    return g;
}

/* Whether `label` has the entity `entity` ("task-x", len bytes) as one of
 * its '_'-separated parts. */
static bool has_entity(const char *label, const char *entity, size_t len)
{
    for (const char *s = label; s; s = strchr(s, '_')) {
        if (*s == '_')
            s++;
        if (strncmp(s, entity, len) == 0 && (s[len] == '_' || s[len] == '\0'))
            return true;
    }
    return false;
}

char *fixed_effects_group_label(const char *group, const char *const *members, size_t n)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "%s", group);
    size_t glen = strlen(group);
    const char *rest = n && strncmp(members[0], group, glen) == 0 ? members[0] + glen : "";
    while (*rest == '_') {
        const char *entity = rest + 1;
        size_t len = strcspn(entity, "_");
        bool shared = strncmp(entity, "run-", 4) != 0;
        for (size_t k = 1; k < n && shared; k++)
            shared = has_entity(members[k], entity, len);
        if (shared)
            nf_strbuf_addf(&sb, "_%.*s", (int)len, entity);
        rest = entity + len;
    }
    return nf_strbuf_detach(&sb);
}

/* ---- the node ---- */

static int fixed_effects_resolve(struct nf_resolve *r)
{
    for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
        r->out[o] = (struct nf_shape){ 0 };   /* one item per subject: known when the labels are */
    const struct nf_shape *e = &r->in[FIXED_EFFECTS_IN_EFFECT], *v = &r->in[FIXED_EFFECTS_IN_VARIANCE];
    if (e->kind == NF_KIND_COLLECTION && v->kind == NF_KIND_COLLECTION && e->n_items != v->n_items)
        return FAIL_NODE(r->err, r->node, NF_ESHAPE, "effect has %" PRId64 " runs but variance has %" PRId64,
                         e->n_items, v->n_items);
    return 0;
}

/* Every run's maps: same shape as the first, labelled with a subject. */
static int check_runs(const struct nf_value *E, const struct nf_value *V, const struct nf_node_inst *node,
                      struct nf_error *err)
{
    if (!E || !V || E->kind != NF_KIND_COLLECTION || V->kind != NF_KIND_COLLECTION)
        return FAIL_NODE(err, node, NF_EDATA, "effect and variance must be collections of per-run maps");
    if (E->u.coll.n != V->u.coll.n || E->u.coll.n == 0)
        return FAIL_NODE(err, node, NF_ESHAPE, "effect has %zu runs but variance has %zu", E->u.coll.n,
                         V->u.coll.n);
    const struct nf_value *first = E->u.coll.items[0];
    for (size_t i = 0; i < E->u.coll.n; i++) {
        const struct nf_value *pair[2] = { E->u.coll.items[i], V->u.coll.items[i] };
        for (int k = 0; k < 2; k++) {
            const struct nf_value *m = pair[k];
            if (m->kind != NF_KIND_MATRIX || first->kind != NF_KIND_MATRIX)
                return FAIL_NODE(err, node, NF_EDATA, "%s of run %zu (%s) is a %s, not a map (a matrix)",
                                 k ? "variance" : "effect", i + 1, m->label ? m->label : "unlabelled",
                                 nf_kind_name(m->kind));
            if (m->u.mat.rows != first->u.mat.rows || m->u.mat.cols != first->u.mat.cols)
                return FAIL_NODE(err, node, NF_ESHAPE, "%s of %s is %" PRId64 " x %" PRId64 " but effect of %s "
                                 "is %" PRId64 " x %" PRId64, k ? "variance" : "effect",
                                 m->label ? m->label : "a run", m->u.mat.rows, m->u.mat.cols,
                                 first->label ? first->label : "the first run", first->u.mat.rows,
                                 first->u.mat.cols);
        }
        if (!pair[0]->label || !pair[1]->label || strcmp(pair[0]->label, pair[1]->label) != 0)
            return FAIL_NODE(err, node, NF_EDATA, "run %zu is '%s' in effect but '%s' in variance: the two "
                             "collections must list the same runs in the same order", i + 1,
                             pair[0]->label ? pair[0]->label : "(no label)",
                             pair[1]->label ? pair[1]->label : "(no label)");
    }
    return 0;
}

/* The output item of one group and one output port. */
static struct nf_value *group_map(const struct nf_value *like, const char *group, enum nf_stat stat, double dof,
                                  const char *what, struct nf_error *err)
{
    struct nf_value *m = nf_value_new_matrix(like->u.mat.rows, like->u.mat.cols, like->u.mat.geom, err);
    if (!m)
        return NULL;
    nf_value_set_label(m, group);
    nf_value_set_stat(m, stat, dof, what);
    if (like->u.mat.row_names && nf_matrix_set_row_names(m, (const char *const *)like->u.mat.row_names, err) < 0) {
        nf_value_unref(m);
        return NULL;
    }
    if (!m->label) {
        nf_value_unref(m);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    return m;
}

static int fixed_effects_run(struct nf_run *run)
{
    const struct fixed_effects_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    const struct nf_value *E = run->in[FIXED_EFFECTS_IN_EFFECT], *V = run->in[FIXED_EFFECTS_IN_VARIANCE];
    int rc = check_runs(E, V, node, run->err);
    if (rc < 0)
        return rc;
    size_t n = E->u.coll.n, n_groups = 0;
    char **group = nf_calloc(n, sizeof *group);
    size_t *of = nf_calloc(n, sizeof *of), *members = nf_calloc(n, sizeof *members);
    const char **member_labels = nf_calloc(n, sizeof *member_labels);
    double *e = nf_malloc_array(n, sizeof *e), *v = nf_malloc_array(n, sizeof *v);
    struct nf_value *out[FIXED_EFFECTS_N_OUT] = { 0 };
    if (!group || !of || !members || !member_labels || !e || !v) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto done;
    }
    /* groups in order of first appearance */
    for (size_t i = 0; i < n; i++) {
        bool oom;
        char *g = fixed_effects_group(E->u.coll.items[i]->label, &oom);
        if (!g) {
            rc = oom ? NF_FAIL(run->err, NF_ENOMEM, "out of memory")
                     : FAIL_NODE(run->err, node, NF_EDATA, "run %zu is labelled '%s', which names no subject "
                                 "(expected sub-XX[_ses-YY]_..., as the bids node labels runs)", i + 1,
                                 E->u.coll.items[i]->label);
            goto done;
        }
        size_t k = 0;
        while (k < n_groups && strcmp(group[k], g) != 0)
            k++;
        if (k == n_groups)
            group[n_groups++] = g;
        else
            free(g);
        of[i] = k;
    }
    static const char *const what[FIXED_EFFECTS_N_OUT] = { "fixed-effects effect", "fixed-effects variance",
                                                           "fixed-effects t", "fixed-effects z" };
    static const enum nf_stat stats[FIXED_EFFECTS_N_OUT] = { NF_STAT_ESTIMATE, NF_STAT_ESTIMATE, NF_STAT_T,
                                                             NF_STAT_Z };
    for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
        if (!(out[o] = nf_value_new_collection(n_groups, run->err))) {
            rc = run->err->code;
            goto done;
        }
    const struct nf_value *first = E->u.coll.items[0];
    int64_t cells = first->u.mat.rows * first->u.mat.cols;
    for (size_t g = 0; g < n_groups; g++) {
        size_t count = 0;
        for (size_t i = 0; i < n; i++)
            if (of[i] == g)
                members[count++] = i;
        double dof_total = p->dof * (double)count;
        for (size_t k = 0; k < count; k++)
            member_labels[k] = E->u.coll.items[members[k]]->label;
        char *label = fixed_effects_group_label(group[g], member_labels, count);
        if (!label) {
            rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            goto done;
        }
        struct nf_value *maps[FIXED_EFFECTS_N_OUT];
        for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++) {
            maps[o] = group_map(first, label, stats[o], o == FIXED_EFFECTS_OUT_T ? fmin(dof_total, DOF_MAX) : 0,
                                what[o], run->err);
            if (!maps[o]) {
                free(label);
                rc = run->err->code ? run->err->code : NF_ENOMEM;
                goto done;
            }
            out[o]->u.coll.items[g] = maps[o];
        }
        free(label);
        for (int64_t c = 0; c < cells; c++) {
            for (size_t k = 0; k < count; k++) {
                e[k] = E->u.coll.items[members[k]]->u.mat.data[c];
                v[k] = V->u.coll.items[members[k]]->u.mat.data[c];
            }
            double r[FIXED_EFFECTS_N_OUT];
            fixed_effects_combine(e, v, count, p->precision_weighted, dof_total, &r[0], &r[1], &r[2], &r[3]);
            for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
                maps[o]->u.mat.data[c] = (float)r[o];
        }
    }
    for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++) {
        run->out[o] = out[o];
        out[o] = NULL;
    }
done:
    for (int o = 0; o < FIXED_EFFECTS_N_OUT; o++)
        nf_value_unref(out[o]);
    for (size_t g = 0; group && g < n_groups; g++)
        free(group[g]);
    free(group);
    free(of);
    free(members);
    free(member_labels);
    free(e);
    free(v);
    return rc;
}

static uint64_t fixed_effects_estimate(const void *params, const struct nf_shape *in, const struct nf_shape *out)
{
    (void)params;
    (void)out;
    /* at most one output item per run, four outputs */
    return 4 * nf_shape_bytes(&in[FIXED_EFFECTS_IN_EFFECT]);
}

static char *fixed_effects_methods(const void *params)
{
    const struct fixed_effects_params *p = params;
    return nf_asprintf("Each subject's runs were combined in a fixed-effects model as nilearn's "
                       "compute_fixed_effects (%s, %g degrees of freedom per run), giving per-subject effect, "
                       "variance, t and z maps.",
                       p->precision_weighted ? "effects weighted by their inverse variance"
                                             : "the mean effect, with the mean variance divided by the number of runs",
                       p->dof);
}

const struct nf_node_type nf_node_fixed_effects = {
    .name = "fixed_effects",
    .summary = "combine each subject's runs (effect and variance maps) as nilearn compute_fixed_effects",
    .description =
        "Groups per-run effect and variance maps (collections of 1 x V or c x V matrices, e.g. a glm mapped "
        "over the runs of a bids node) by the subject and session entities of their labels (sub-01_task-x_run-1 "
        "and sub-01_task-x_run-2 make sub-01; sub-01_ses-2_... make sub-01_ses-2) and combines each group as "
        "nilearn 0.14's compute_fixed_effects: effect = mean of the runs' effects and variance = mean of their "
        "variances / runs, or with precision_weighted effect = sum(e/v) / sum(1/v) and variance = 1 / sum(1/v) "
        "(variances floored at 1e-16); t = effect / sqrt(variance) with the runs' summed degrees of freedom "
        "(`dof` each), and z its normal equivalent through the p-value (clipped as nilearn does). Each row is "
        "its own contrast. Outputs are collections with one item per subject, labelled sub-XX[_ses-YY] followed "
        "by the entities all its runs share but the run (sub-01_task-x_space-S), which a permute node stacks "
        "into subjects x voxels. The number of subjects is known when the labels are, at run time.",
    .version = 2,
    .params = fixed_effects_params_table,
    .params_size = sizeof(struct fixed_effects_params),
    .inputs = fixed_effects_inputs,
    .outputs = fixed_effects_outputs,
    .resolve = fixed_effects_resolve,
    .estimate = fixed_effects_estimate,
    .run_cpu = fixed_effects_run,
    .methods = fixed_effects_methods,
    .flags = NF_NODE_NO_MAP,
};
