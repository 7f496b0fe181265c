/* summarize.c — the `summarize` node: the sink that turns results into files.
 *
 * Every named input (`in: {score: ridge1.score, z: perm.z}`) is written under
 * settings.outputs with BIDS-derivative names: maps (matrices whose columns are
 * voxels, and volumes) as `<prefix>_stat-<key>_statmap.nii.gz`, tables and
 * plain matrices as `<prefix>_stat-<key>.tsv`, collections as one file per item
 * with the item's label (e.g. sub-01) in front. An item labelled with BIDS
 * entities beyond the subject (a bids node's run, sub-01_task-x_run-1_space-S)
 * is a BIDS derivative: it goes into sub-01/ (sub-01/ses-2/), named by its
 * entities without the prefix, and a k x V map with named rows (contrasts)
 * becomes one file per row, `..._contrast-<name>_stat-<key>_statmap.nii.gz`,
 * the names of nilearn's save_glm_to_bids and fitlins. Optionally one map is
 * thresholded (by value with a tail, and/or by a p-value map), its supra-
 * threshold voxels grouped into 26-connected clusters, and the clusters listed
 * with size, peak and atlas label. When the atlas's region names are known,
 * a table with a numeric `label` column (predict's ROI table) is written with
 * a `region` column after it. With `naming: fsl` the statistic, p and
 * p_fwe maps are also written under fsl/ with FSL randomise's names and its
 * 1 - p convention, for users whose next tools are FSL's. summary.json
 * (statistics of every input) and dataset_description.json (provenance) are
 * written last, so a run that fails half way leaves no JSON claiming it
 * finished. All writes are atomic.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "node.h"
#include "summarize.h"
#include "core/util.h"
#include "core/value.h"

#ifndef NF_VERSION
#ifdef PACKAGE_VERSION
#define NF_VERSION PACKAGE_VERSION
#else
#define NF_VERSION "0.1.0"
#endif
#endif

/* NIfTI intent codes (nifti1.h), named here to keep this file free of nifti headers. */
#define INTENT_NONE 0
#define INTENT_CORREL 2
#define INTENT_TTEST 3
#define INTENT_ZSCORE 5
#define INTENT_PVAL 22
#define INTENT_ESTIMATE 1001
#define INTENT_LABEL 1002


static const char *const tail_names[] = {"two", "upper", "lower", NULL};
static const char *const naming_names[] = {"bids", "fsl", NULL};


/* ---- names ---- */

/* BIDS entity values are alphanumeric: "p_fwe" -> "pFwe", "r-squared" -> "rSquared". */
static void bids_key(const char *key, char *out, size_t size)
{
    size_t n = 0;
    bool upper_next = false;
    for (const char *s = key; *s && n + 1 < size; s++) {
        unsigned char ch = (unsigned char)*s;
        if (!isalnum(ch)) {
            upper_next = n > 0;
            continue;
        }
        out[n++] = (char)(upper_next ? toupper(ch) : ch);
        upper_next = false;
    }
    out[n] = '\0';
}

/* A file-name prefix: letters, digits, '-' and '_' (BIDS entity separators). */
static void safe_prefix(const char *s, char *out, size_t size)
{
    if (s && *s)
        nf_output_name_part(s, out, size);
    else if (size)
        out[0] = '\0';   /* no label */
}

/* ---- what a map holds ---- */

/* What an input holds: what its producer said (the item's, else the whole
 * collection's); without that (a file read from disk, a result from a cache
 * that predates values saying it), a guess from the key the user gave it. */
static struct nf_stat_info stat_of(const struct nf_value *v, const struct nf_value *outer,
                                   const char *bids)
{
    if (v && v->stat.kind != NF_STAT_NONE)
        return v->stat;
    if (outer && outer->stat.kind != NF_STAT_NONE)
        return outer->stat;
    struct nf_stat_info guess = {NF_STAT_NONE, 0, NULL};
    if (!strcmp(bids, "p"))
        guess.kind = NF_STAT_P;
    else if (!strcmp(bids, "pFwe"))
        guess.kind = NF_STAT_P_FWE;
    else if (!strcmp(bids, "qFdr") || !strcmp(bids, "q"))
        guess.kind = NF_STAT_Q_FDR;
    else if (!strcmp(bids, "t"))
        guess.kind = NF_STAT_T;
    else if (!strcmp(bids, "z"))
        guess.kind = NF_STAT_Z;
    return guess;
}

/* NIfTI intent of a statistic. t and correlation maps need their degrees of
 * freedom (intent_p1); without them they are labelled as plain estimates
 * rather than as a distribution with a made-up parameter. Unknown maps keep
 * the estimate intent nlflow always wrote for them. */
static int intent_of(const struct nf_stat_info *st)
{
    switch (st->kind) {
    case NF_STAT_T: return st->dof > 0 ? INTENT_TTEST : INTENT_ESTIMATE;
    case NF_STAT_CORREL: return st->dof > 0 ? INTENT_CORREL : INTENT_ESTIMATE;
    case NF_STAT_Z: return INTENT_ZSCORE;
    case NF_STAT_P:
    case NF_STAT_P_FWE:
    case NF_STAT_Q_FDR: return INTENT_PVAL;
    case NF_STAT_LABEL: return INTENT_LABEL;
    case NF_STAT_DATA: return INTENT_NONE;
    default: return INTENT_ESTIMATE;
    }
}

static const char *intent_word(int intent)
{
    switch (intent) {
    case INTENT_CORREL: return "correl";
    case INTENT_TTEST: return "ttest";
    case INTENT_ZSCORE: return "zscore";
    case INTENT_PVAL: return "pval";
    case INTENT_ESTIMATE: return "estimate";
    case INTENT_LABEL: return "label";
    default: return "none";
    }
}

/* Outside the mask a p-like map holds 1 ("nothing here"): 0 would read as
 * significant to anyone thresholding p < 0.05. Everything else holds 0. */
static float outside_of(const struct nf_stat_info *st)
{
    return nf_stat_is_p(st->kind) ? 1.0f : 0.0f;
}

static const char *units_of(enum nf_stat kind)
{
    switch (kind) {
    case NF_STAT_P:
    case NF_STAT_P_FWE:
    case NF_STAT_Q_FDR: return "probability";
    case NF_STAT_T:
    case NF_STAT_Z:
    case NF_STAT_CORREL: return "unitless";
    case NF_STAT_ESTIMATE:
    case NF_STAT_DATA: return "data units";
    default: return NULL;
    }
}

static struct nf_nifti_label nifti_label(const struct nf_stat_info *st, const char *descrip)
{
    int intent = intent_of(st);
    return (struct nf_nifti_label){
        .intent = intent,
        .intent_p1 = intent == INTENT_TTEST || intent == INTENT_CORREL ? st->dof : 0,
        .intent_name = nf_stat_name(st->kind),
        .outside = outside_of(st),
        .descrip = descrip,
    };
}

/* "'a', 'b', 'c'" for messages that list the inputs. */
static void list_names(const char *const *names, size_t n, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && len < size; i++) {
        int w = snprintf(buf + len, size - len, "%s'%s'", i ? ", " : "", names[i]);
        if (w < 0)
            break;
        len += (size_t)w;
    }
    if (n == 0)
        snprintf(buf, size, "none");
}

static int find_input(const char *const *names, size_t n, const char *key)
{
    for (size_t i = 0; key && i < n; i++)
        if (!strcmp(names[i], key))
            return (int)i;
    return -1;
}

/* Input keys must stay distinct once made BIDS-safe and must not vanish. */
static int check_keys(const char *const *names, size_t n, const struct nf_node_inst *node,
                      struct nf_error *err)
{
    char a[128], b[128];
    for (size_t i = 0; i < n; i++) {
        bids_key(names[i], a, sizeof a);
        if (!a[0])
            return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                              "input key '%s' has no letters or digits to name a file with",
                              names[i]);
        for (size_t j = 0; j < i; j++) {
            bids_key(names[j], b, sizeof b);
            if (!strcmp(a, b))
                return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                                  "input keys '%s' and '%s' both become file name "
                                  "'stat-%s'", names[j], names[i], a);
        }
    }
    return 0;
}

static bool thresholding(const struct summarize_params *p)
{
    return !isnan(p->threshold) || !isnan(p->p_below);
}

static const char *p_key_of(const struct summarize_params *p)
{
    return p->p_key ? p->p_key : "p";
}

/* The keys named by threshold_key and p_key must exist (plan and run time). */
static int check_named_inputs(const struct summarize_params *p, const char *const *names,
                              size_t n, const struct nf_node_inst *node, struct nf_error *err)
{
    char list[512];
    if (!thresholding(p))
        return 0;
    list_names(names, n, list, sizeof list);
    if (p->threshold_key && find_input(names, n, p->threshold_key) < 0)
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "threshold_key '%s' is not an input of this node (inputs: %s)",
                          p->threshold_key, list);
    if (!isnan(p->p_below) && find_input(names, n, p_key_of(p)) < 0)
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "p_key '%s' is not an input of this node (inputs: %s); "
                          "p_below needs a p-value map", p_key_of(p), list);
    return 0;
}

/* ---- FSL randomise's names ---- */

/* With `naming: fsl` three inputs are also written as randomise names its
 * one-contrast outputs, under <outputs>/fsl/: the statistic as
 * <prefix>_tstat1, 1 - p as <prefix>_vox_p_tstat1 and 1 - p_fwe as
 * <prefix>_vox_corrp_tstat1 (randomise stores p maps as 1 - p, "bigger is
 * better"). Roles in that order; fsl_roles[r].from_p: the file holds 1 - p. */
enum { FSL_STAT, FSL_P, FSL_P_FWE, FSL_N_ROLES };
static const struct {
    const char *suffix;   /* randomise's name after "<prefix>_" */
    const char *port;     /* the permute output that holds the input */
    bool from_p;
} fsl_roles[FSL_N_ROLES] = {
    {"tstat1", "stat", false},
    {"vox_p_tstat1", "p", true},
    {"vox_corrp_tstat1", "p_fwe", true},
};

struct fsl_pick {
    int input[FSL_N_ROLES];   /* the input written in each role; -1: none */
};

/* The first input that comes from output `port` of a permute node (of node
 * `from` when not NULL), or -1; *second: the next such input, or -1. */
static int permute_input(const struct nf_node_inst *node, const struct nf_env *env,
                         const char *const *names, size_t n, const char *port, const char *from,
                         int *second)
{
    int first = -1;
    *second = -1;
    for (size_t i = 0; i < n; i++) {
        struct nf_input_source src;
        if (!nf_node_input_source(node, env, names[i], &src) ||
            strcmp(src.node_type, "permute") != 0 || strcmp(src.port, port) != 0 ||
            (from && strcmp(src.node_id, from) != 0))
            continue;
        if (first < 0)
            first = (int)i;
        else if (*second < 0)
            *second = (int)i;
    }
    return first;
}

/* Which inputs fill the FSL roles (plan and run time alike). The statistic:
 * the input named by threshold_key, else the one input from a permute node's
 * `stat`, else the input keyed `t` or `stat`; there must be one. p and p_fwe:
 * from the `p` and `p_fwe` ports of the statistic's permute node (any permute
 * node's when the statistic has none), else the inputs keyed `p` and `p_fwe`;
 * either may be missing (that file is not written). */
static int fsl_pick_inputs(const struct summarize_params *p, const struct nf_node_inst *node,
                           const struct nf_env *env, const char *const *names, size_t n,
                           struct fsl_pick *pick, struct nf_error *err)
{
    char list[512];
    int second;
    for (int r = 0; r < FSL_N_ROLES; r++)
        pick->input[r] = -1;
    if (p->naming != SUM_NAMING_FSL)
        return 0;
    list_names(names, n, list, sizeof list);
    int stat = p->threshold_key ? find_input(names, n, p->threshold_key) : -1;
    if (p->threshold_key && stat < 0)
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "threshold_key '%s' is not an input of this node (inputs: %s)",
                          p->threshold_key, list);
    if (stat < 0) {
        stat = permute_input(node, env, names, n, "stat", NULL, &second);
        if (second >= 0)
            return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                              "naming: fsl writes one test's maps (<prefix>_tstat1), but "
                              "inputs '%s' and '%s' are both a permute statistic: write each "
                              "test with its own summarize node (and name), or pick one with "
                              "threshold_key", names[stat], names[second]);
    }
    if (stat < 0)
        stat = find_input(names, n, "t");
    if (stat < 0)
        stat = find_input(names, n, "stat");
    if (stat < 0)
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "naming: fsl needs a statistic map for <prefix>_tstat1, and no input "
                          "is one: wire a permute node's stat (e.g. t: perm.stat), key the "
                          "map 't', or name it with threshold_key (inputs: %s)", list);
    struct nf_input_source src;
    const char *from = nf_node_input_source(node, env, names[stat], &src) &&
                               !strcmp(src.node_type, "permute") ? src.node_id : NULL;
    pick->input[FSL_STAT] = stat;
    for (int r = FSL_P; r < FSL_N_ROLES; r++) {
        int i = permute_input(node, env, names, n, fsl_roles[r].port, from, &second);
        pick->input[r] = i >= 0 ? i : find_input(names, n, fsl_roles[r].port);
        if (pick->input[r] == stat)
            return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                              "naming: fsl: input '%s' is the %s map, not a statistic for "
                              "<prefix>_tstat1 (threshold_key names it)", names[stat],
                              fsl_roles[r].port);
    }
    return 0;
}

/* ---- maps: a view of a value as voxel values on a grid ---- */

struct map_view {
    const struct nf_grid *grid;
    int64_t n;              /* voxels per map */
    const int64_t *index;   /* grid offset of each voxel; NULL: voxel c is offset c */
    const float *values;    /* rows × n, row-major */
    int64_t rows;
};

static bool map_view_of(const struct nf_value *v, struct map_view *mv)
{
    memset(mv, 0, sizeof *mv);
    if (v->kind == NF_KIND_MATRIX && v->u.mat.geom) {
        mv->grid = &v->u.mat.geom->grid;
        mv->n = v->u.mat.cols;
        mv->index = v->u.mat.geom->index;
        mv->values = v->u.mat.data;
        mv->rows = v->u.mat.rows;
        return mv->n == v->u.mat.geom->n_voxels && mv->values;
    }
    if (v->kind == NF_KIND_VOLUME && v->u.vol.data) {
        mv->grid = &v->u.vol.grid;
        mv->n = nf_grid_nvox(mv->grid);
        mv->values = v->u.vol.data;
        mv->rows = v->u.vol.nt;
        return true;
    }
    return false;
}

static int64_t map_offset(const struct map_view *mv, int64_t c)
{
    return mv->index ? mv->index[c] : c;
}

/* Rank of a grid offset in nltools' voxel order (C order over i, j, k): ties
 * between voxels are broken by it, so a map gives the same peaks whether it
 * arrives as a volume or as a masked matrix. */
static int64_t c_order_rank(const struct nf_grid *g, int64_t off)
{
    int64_t i = off % g->dim[0], j = (off / g->dim[0]) % g->dim[1],
            k = off / (g->dim[0] * g->dim[1]);
    return (i * g->dim[1] + j) * g->dim[2] + k;
}

static void offset_to_world(const struct nf_grid *g, int64_t off, double xyz[3])
{
    int64_t i = off % g->dim[0], j = (off / g->dim[0]) % g->dim[1],
            k = off / (g->dim[0] * g->dim[1]);
    for (int r = 0; r < 3; r++)
        xyz[r] = g->affine[r][0] * (double)i + g->affine[r][1] * (double)j +
                 g->affine[r][2] * (double)k + g->affine[r][3];
}

/* ---- run state ---- */

struct written {
    char *key;      /* the input key, or "summary" / "dataset_description" */
    char *path;     /* full path */
    char *name;     /* relative to the outputs folder, for summary.json */
};

struct stats {
    double min, max, sum;
    int64_t n_finite, n_nonzero, n_nonfinite;
};

struct summarize_ctx {
    const struct summarize_params *p;
    struct nf_run *run;
    const char *outdir;
    char prefix[160];
    struct written *files;
    size_t n_files, cap_files;
    struct nf_strbuf inputs_json;     /* the "inputs" array body */
    struct nf_strbuf threshold_json;  /* the "thresholding" object, or empty */
    struct fsl_pick fsl;              /* naming: fsl: the inputs of randomise's names */
    struct nf_label_names names;      /* the atlas's region names; n == 0: none known */
};

static void stats_add(struct stats *s, double x)
{
    if (!isfinite(x)) {
        s->n_nonfinite++;
        return;
    }
    if (s->n_finite == 0 || x < s->min)
        s->min = x;
    if (s->n_finite == 0 || x > s->max)
        s->max = x;
    s->sum += x;
    s->n_finite++;
    s->n_nonzero += x != 0.0;
}

static void stats_add_value(struct stats *s, const struct nf_value *v)
{
    switch (v->kind) {
    case NF_KIND_VOLUME: {
        int64_t n = nf_grid_nvox(&v->u.vol.grid) * v->u.vol.nt;
        for (int64_t i = 0; v->u.vol.data && i < n; i++)
            stats_add(s, v->u.vol.data[i]);
        break;
    }
    case NF_KIND_MATRIX:
        for (int64_t i = 0; v->u.mat.data && i < v->u.mat.rows * v->u.mat.cols; i++)
            stats_add(s, v->u.mat.data[i]);
        break;
    case NF_KIND_TABLE:
        for (int64_t c = 0; c < v->u.tab.n_cols; c++)
            if (v->u.tab.cols[c].numeric && v->u.tab.cols[c].num)
                for (int64_t r = 0; r < v->u.tab.n_rows; r++)
                    stats_add(s, v->u.tab.cols[c].num[r]);
        break;
    default:
        break;
    }
}

static void json_number(struct nf_strbuf *sb, double x)
{
    if (isfinite(x))
        nf_strbuf_addf(sb, "%.9g", x);
    else
        nf_strbuf_addf(sb, "null");
}

static void json_shape(struct nf_strbuf *sb, const struct nf_value *v)
{
    switch (v->kind) {
    case NF_KIND_VOLUME:
        nf_strbuf_addf(sb, "%" PRId64 ", %" PRId64 ", %" PRId64, v->u.vol.grid.dim[0],
                       v->u.vol.grid.dim[1], v->u.vol.grid.dim[2]);
        if (v->u.vol.ndim == 4 || v->u.vol.nt > 1)
            nf_strbuf_addf(sb, ", %" PRId64, v->u.vol.nt);
        break;
    case NF_KIND_MATRIX:
        nf_strbuf_addf(sb, "%" PRId64 ", %" PRId64, v->u.mat.rows, v->u.mat.cols);
        break;
    case NF_KIND_TABLE:
        nf_strbuf_addf(sb, "%" PRId64 ", %" PRId64, v->u.tab.n_rows, v->u.tab.n_cols);
        break;
    case NF_KIND_COLLECTION:
        nf_strbuf_addf(sb, "%zu", v->u.coll.n);
        if (v->u.coll.n > 0 && v->u.coll.items[0]) {
            nf_strbuf_addf(sb, ", ");
            json_shape(sb, v->u.coll.items[0]);
        }
        break;
    default:
        break;
    }
}

static int record_file(struct summarize_ctx *ctx, const char *key, const char *name,
                       const char *path)
{
    if (ctx->n_files == ctx->cap_files) {
        size_t cap = ctx->cap_files ? 2 * ctx->cap_files : 16;
        struct written *grown = nf_realloc(ctx->files, cap * sizeof *grown);
        if (!grown)
            return NF_FAIL(ctx->run->err, NF_ENOMEM, "out of memory");
        ctx->files = grown;
        ctx->cap_files = cap;
    }
    struct written *w = &ctx->files[ctx->n_files];
    w->key = nf_strdup(key);
    w->name = nf_strdup(name);
    w->path = nf_strdup(path);
    ctx->n_files++;
    if (!w->key || !w->name || !w->path)
        return NF_FAIL(ctx->run->err, NF_ENOMEM, "out of memory");
    return 0;
}

/* "[<label>_]<prefix>_stat-<key><suffix>", e.g. suffix "_statmap.nii.gz". */
static char *file_name(const struct summarize_ctx *ctx, const char *label, const char *bids,
                       const char *suffix)
{
    char safe_label[128];
    safe_prefix(label, safe_label, sizeof safe_label);
    if (label && safe_label[0])
        return nf_asprintf("%s_%s_stat-%s%s", safe_label, ctx->prefix, bids, suffix);
    return nf_asprintf("%s_stat-%s%s", ctx->prefix, bids, suffix);
}

/* The node and port input `key` comes from, when the run has a pipeline. */
static bool source_of(const struct summarize_ctx *ctx, const char *key, const char **node_id,
                      const char **node_type, const char **port)
{
    struct nf_input_source src;
    if (!nf_node_input_source(ctx->run->node, ctx->run->env, key, &src))
        return false;
    *node_id = src.node_id;
    *node_type = src.node_type;
    *port = src.port;
    return true;
}

/* The BIDS sidecar of a map: "x_statmap.nii.gz" -> "x_statmap.json". */
static char *sidecar_name(const char *map_name)
{
    size_t n = strlen(map_name);
    if (n > 7 && !strcmp(map_name + n - 7, ".nii.gz"))
        n -= 7;
    else if (n > 4 && !strcmp(map_name + n - 4, ".nii"))
        n -= 4;
    return nf_asprintf("%.*s.json", (int)n, map_name);
}

/* Write the JSON sidecar of the map just written as `map_name` with header
 * label `nl`: what it holds (statistic, degrees of freedom, units, NIfTI
 * intent, the value outside the mask), where it came from (input key, node
 * and port, item), and for k x V maps the name of each volume. `extra` is more
 * members ("\"A\": ..."), or NULL. */
static int write_sidecar(struct summarize_ctx *ctx, const char *key, const char *map_name,
                         const char *label, const struct nf_value *data,
                         const struct nf_stat_info *st, const struct nf_nifti_label *header,
                         const char *extra)
{
    struct nf_error *err = ctx->run->err;
    struct nf_nifti_label nl = *header;
    const char *node_id, *node_type, *port, *units = units_of(st->kind);
    struct nf_strbuf sb;
    char *name = NULL, *path = NULL;
    int rc = 0;

    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "{\n  \"Statistic\": ");
    if (st->kind != NF_STAT_NONE)
        nf_strbuf_add_json_str(&sb, nf_stat_name(st->kind));
    else
        nf_strbuf_addf(&sb, "null");
    if (st->description) {
        nf_strbuf_addf(&sb, ",\n  \"Description\": ");
        nf_strbuf_add_json_str(&sb, st->description);
    }
    if (st->dof > 0)
        nf_strbuf_addf(&sb, ",\n  \"DegreesOfFreedom\": %.17g", st->dof);
    if (units) {
        nf_strbuf_addf(&sb, ",\n  \"Units\": ");
        nf_strbuf_add_json_str(&sb, units);
    }
    nf_strbuf_addf(&sb, ",\n  \"IntentCode\": %d, \"IntentName\": \"%s\"", nl.intent,
                   intent_word(nl.intent));
    if (nl.intent_p1 > 0)
        nf_strbuf_addf(&sb, ", \"IntentP1\": %.17g", nl.intent_p1);
    if (data->kind == NF_KIND_MATRIX)
        nf_strbuf_addf(&sb, ",\n  \"OutsideMask\": %g", (double)nl.outside);
    nf_strbuf_addf(&sb, ",\n  \"Key\": ");
    nf_strbuf_add_json_str(&sb, key);
    if (source_of(ctx, key, &node_id, &node_type, &port)) {
        nf_strbuf_addf(&sb, ",\n  \"Source\": {\"Node\": ");
        nf_strbuf_add_json_str(&sb, node_id);
        nf_strbuf_addf(&sb, ", \"NodeType\": ");
        nf_strbuf_add_json_str(&sb, node_type);
        nf_strbuf_addf(&sb, ", \"Port\": ");
        nf_strbuf_add_json_str(&sb, port);
        nf_strbuf_addf(&sb, "}");
    }
    if (label) {
        nf_strbuf_addf(&sb, ",\n  \"Item\": ");
        nf_strbuf_add_json_str(&sb, label);
    }
    int64_t volumes = data->kind == NF_KIND_MATRIX ? data->u.mat.rows
                      : data->kind == NF_KIND_VOLUME ? data->u.vol.nt : 1;
    if (volumes > 1) {
        /* unnamed volumes are named by their index on the 4th axis (from 0) */
        char **names = data->kind == NF_KIND_MATRIX ? data->u.mat.row_names : NULL;
        nf_strbuf_addf(&sb, ",\n  \"VolumeNames\": [");
        for (int64_t r = 0; r < volumes; r++) {
            char index[24];
            snprintf(index, sizeof index, "%lld", (long long)r);
            nf_strbuf_addf(&sb, "%s", r ? ", " : "");
            nf_strbuf_add_json_str(&sb, names && names[r] ? names[r] : index);
        }
        nf_strbuf_addf(&sb, "]");
    }
    if (extra)
        nf_strbuf_addf(&sb, ",\n  %s", extra);
    nf_strbuf_addf(&sb, "\n}\n");

    name = sidecar_name(map_name);
    path = name ? nf_path_join(ctx->outdir, name) : NULL;
    if (!path || sb.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_write_file_atomic(path, sb.buf, sb.len, err));
    NF_TRY(rc = record_file(ctx, key, name, path));

fail:
    nf_strbuf_release(&sb);
    free(name);
    free(path);
    return rc;
}

/* Write table t to path. When the atlas's region names are known and t has a
 * numeric `label` column (predict's ROI table), a `region` column follows it
 * with the label file's name of each row's label, empty where the file names
 * none (or the label is no integer); t is written as it is otherwise, and
 * when it already has a `region` column (a warning says so). */
static int write_table(struct summarize_ctx *ctx, const char *key, const char *path,
                       const struct nf_table *t)
{
    struct nf_error *err = ctx->run->err;
    int64_t label = nf_table_find(t, "label");
    if (!ctx->names.n || label < 0 || !t->cols[label].numeric)
        return nf_table_write(path, t, err);
    if (nf_table_find(t, "region") >= 0) {
        nf_warn(nf_node_id(ctx->run->node), "input '%s' already has a region column: it is "
                "written without the atlas's region names", key);
        return nf_table_write(path, t, err);
    }
    /* what is written: t's own columns (borrowed) with the region column */
    char region_name[] = "region";
    struct nf_column *cols = nf_calloc((size_t)t->n_cols + 1, sizeof *cols);
    char **region = nf_calloc((size_t)(t->n_rows ? t->n_rows : 1), sizeof *region);
    int rc = 0;
    if (!cols || !region) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (int64_t r = 0; r < t->n_rows; r++) {
        double x = t->cols[label].num[r];
        const char *name = isfinite(x) && x == rint(x) && x >= 0 && x <= NF_LABELS_MAX_INDEX
                               ? nf_label_name(&ctx->names, (int64_t)x) : NULL;
        /* NULL is written as an empty cell */
        if (name && !(region[r] = nf_strdup(name))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    }
    memcpy(cols, t->cols, (size_t)(label + 1) * sizeof *cols);
    cols[label + 1] = (struct nf_column){.name = region_name, .numeric = false, .str = region};
    memcpy(cols + label + 2, t->cols + label + 1, (size_t)(t->n_cols - label - 1) * sizeof *cols);
    struct nf_table with_regions = {.n_rows = t->n_rows, .n_cols = t->n_cols + 1, .cols = cols};
    rc = nf_table_write(path, &with_regions, err);

fail:
    for (int64_t r = 0; region && r < t->n_rows; r++)
        free(region[r]);
    free(region);
    free(cols);
    return rc;
}

/* Whether `label` names a run or a subject as BIDS derivatives do: the
 * subject entity and at least one more entity (sub-01_task-x_run-1_space-S,
 * as the bids node labels runs; sub-01_task-x as fixed_effects labels
 * subjects). Such items are written in the subject's folder (`dir`:
 * "sub-01", or "sub-01/ses-2" with a session), without the prefix. */
static bool bids_run_label(const char *label, char *dir, size_t size)
{
    if (!label || strncmp(label, "sub-", 4) != 0)
        return false;
    size_t parts = 0, sub_end = 0, ses_start = 0, ses_end = 0;
    for (const char *s = label; *s;) {
        size_t len = strcspn(s, "_");
        const char *dash = memchr(s, '-', len);
        if (!dash || dash == s || dash + 1 == s + len)
            return false;
        for (const char *c = s; c < s + len; c++)
            if (c != dash && !isalnum((unsigned char)*c))
                return false;
        if (parts == 0)
            sub_end = len;
        else if (parts == 1 && !strncmp(s, "ses-", 4)) {
            ses_start = (size_t)(s - label);
            ses_end = ses_start + len;
        }
        parts++;
        s += len;
        if (*s == '_' && !*++s)
            return false;
    }
    if (parts < 2 || sub_end + 1 > size || ses_end + 1 > size)
        return false;
    if (ses_end) {
        snprintf(dir, size, "%.*s/%.*s", (int)sub_end, label, (int)(ses_end - ses_start), label + ses_start);
    } else {
        snprintf(dir, size, "%.*s", (int)sub_end, label);
    }
    return true;
}

/* Write `data` (one non-collection value, already read) as `name` under the
 * outputs, a map with its sidecar (`extra`: more sidecar members, or NULL). */
static int write_file(struct summarize_ctx *ctx, const char *key, const char *bids, const char *label,
                      const char *name, struct nf_value *data, const struct nf_stat_info *what,
                      const char *extra)
{
    struct nf_error *err = ctx->run->err;
    bool as_nifti = data->kind == NF_KIND_VOLUME ||
                    (data->kind == NF_KIND_MATRIX && data->u.mat.geom);
    char descrip[80];
    int rc = 0;
    char *path = nf_path_join(ctx->outdir, name);
    if (!path)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    const char *slash = strrchr(name, '/');
    if (slash) {
        char *dir = nf_asprintf("%s/%.*s", ctx->outdir, (int)(slash - name), name);
        rc = dir ? nf_mkdirs(dir, err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
        free(dir);
        NF_TRY(rc);
    }
    snprintf(descrip, sizeof descrip, "nlflow summarize stat-%.50s", bids);
    struct nf_nifti_label nl = nifti_label(what, descrip);
    if (data->kind == NF_KIND_VOLUME)
        rc = nf_nifti_write_labelled(path, &data->u.vol.grid, data->u.vol.nt, data->u.vol.data,
                                     &nl, err);
    else if (as_nifti)
        rc = nf_nifti_write_matrix_labelled(path, &data->u.mat, &nl, err);
    else if (data->kind == NF_KIND_MATRIX)
        rc = nf_matrix_write_tsv(path, &data->u.mat, err);
    else
        rc = write_table(ctx, key, path, &data->u.tab);
    NF_TRY(rc);
    NF_TRY(rc = record_file(ctx, key, name, path));
    if (as_nifti)
        NF_TRY(rc = write_sidecar(ctx, key, name, label, data, what, &nl, extra));
fail:
    free(path);
    return rc;
}

/* A k x V map of a BIDS-labelled item, one file per named row (a contrast of
 * glm or fixed_effects, a design column of betas), as nilearn's
 * save_glm_to_bids and fitlins name them:
 * sub-01/sub-01_task-x_run-1_space-S_contrast-facesMinusHouses_stat-z_statmap.nii.gz. */
static int write_rows(struct summarize_ctx *ctx, const char *key, const char *bids, const char *label,
                      const char *dir, struct nf_value *data, const struct nf_stat_info *what)
{
    struct nf_error *err = ctx->run->err;
    const struct nf_matrix *m = &data->u.mat;
    int rc = 0;
    for (int64_t r = 0; r < m->rows && rc == 0; r++) {
        char contrast[128];
        bids_key(m->row_names[r] ? m->row_names[r] : "", contrast, sizeof contrast);
        if (!contrast[0])
            snprintf(contrast, sizeof contrast, "%lld", (long long)r + 1);
        struct nf_strbuf extra;
        nf_strbuf_init(&extra);
        nf_strbuf_addf(&extra, "\"Contrast\": ");
        nf_strbuf_add_json_str(&extra, m->row_names[r] ? m->row_names[r] : contrast);
        char *name = nf_asprintf("%s/%s_contrast-%s_stat-%s_statmap.nii.gz", dir, label, contrast, bids);
        struct nf_value *row = nf_value_new_matrix(1, m->cols, m->geom, err);
        if (!name || !row || extra.oom) {
            rc = row ? NF_FAIL(err, NF_ENOMEM, "out of memory") : err->code;
        } else {
            memcpy(row->u.mat.data, m->data + r * m->cols, (size_t)m->cols * sizeof *m->data);
            rc = write_file(ctx, key, bids, label, name, row, what, extra.buf);
        }
        nf_value_unref(row);
        nf_strbuf_release(&extra);
        free(name);
    }
    return rc;
}

/* Write one non-collection value under its file name (a map with its
 * sidecar); add its statistics. `outer` is the collection it belongs to.
 * An item labelled with BIDS entities goes into its subject's folder. */
static int write_item(struct summarize_ctx *ctx, const char *key, const char *bids,
                      const char *label, struct nf_value *v, const struct nf_value *outer,
                      struct stats *st)
{
    struct nf_error *err = ctx->run->err;
    struct nf_value *data = NULL;
    char *name = NULL;
    char dir[128];
    int rc = 0;

    if (!v || v->kind == NF_KIND_COLLECTION || v->kind == NF_KIND_NONE) {
        rc = NF_FAIL(err, NF_EDATA, "input '%s': %s cannot be written (nested collections "
                     "and empty values are not supported)", key,
                     v ? nf_kind_name(v->kind) : "a missing value");
        goto fail;
    }
    data = nf_value_materialize(v, err);
    if (!data) {
        rc = err->code ? err->code : NF_EIO;
        goto fail;
    }
    bool as_nifti = data->kind == NF_KIND_VOLUME ||
                    (data->kind == NF_KIND_MATRIX && data->u.mat.geom);
    const char *suffix = as_nifti ? "_statmap.nii.gz" : ".tsv";
    struct nf_stat_info what = stat_of(v, outer, bids);
    if (bids_run_label(label, dir, sizeof dir)) {
        if (as_nifti && data->kind == NF_KIND_MATRIX && data->u.mat.row_names) {
            NF_TRY(rc = write_rows(ctx, key, bids, label, dir, data, &what));
            stats_add_value(st, data);
            goto fail;
        }
        name = nf_asprintf("%s/%s_stat-%s%s", dir, label, bids, suffix);
    } else {
        name = file_name(ctx, label, bids, suffix);
    }
    if (!name) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = write_file(ctx, key, bids, label, name, data, &what, NULL));
    stats_add_value(st, data);

fail:
    nf_value_unref(data);
    free(name);
    return rc;
}

/* Write input `key` (value v) in FSL role `role` under fsl/, with a sidecar:
 * the statistic as it is, a p map as 1.0f - p. Outside the mask the
 * statistic holds 0 as in its BIDS map, and 1 - p holds 0 as randomise's
 * files do (our p maps hold 1 there). 1 - p is no p-value: intent none. */
static int write_fsl(struct summarize_ctx *ctx, int role, const char *key, struct nf_value *v)
{
    const struct nf_node_inst *node = ctx->run->node;
    struct nf_error *err = ctx->run->err;
    struct nf_value *data = NULL;
    struct map_view mv;
    struct nf_strbuf extra;
    char *name = NULL, *path = NULL, *dir = NULL, *description = NULL;
    float *one_minus = NULL;
    char bids[128], descrip[80];
    int rc = 0;

    nf_strbuf_init(&extra);
    bids_key(key, bids, sizeof bids);
    data = v && v->kind != NF_KIND_COLLECTION ? nf_value_materialize(v, err) : NULL;
    if (v && v->kind != NF_KIND_COLLECTION && !data) {
        rc = err->code ? err->code : NF_EIO;
        goto fail;
    }
    if (!data || !map_view_of(data, &mv) || mv.rows != 1) {
        rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "naming: fsl: cannot write input '%s' as <prefix>_%s: it is %s (expected "
                        "one 1xV map or 3D volume)", key, fsl_roles[role].suffix,
                        !data ? "a collection" : mv.grid ? "several maps"
                                                         : "not a map with voxel geometry");
        goto fail;
    }
    struct nf_stat_info what = stat_of(v, NULL, bids);
    struct nf_nifti_label nl = nifti_label(&what, NULL);
    const float *values = mv.values;
    if (fsl_roles[role].from_p) {
        one_minus = nf_malloc((size_t)(mv.n ? mv.n : 1) * sizeof *one_minus);
        if (!one_minus) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t c = 0; c < mv.n; c++)
            one_minus[c] = 1.0f - mv.values[c];
        values = one_minus;
        description = nf_asprintf("1 - p (FSL randomise's convention), where p is: %s",
                                  what.description ? what.description : nf_stat_name(what.kind));
        what = (struct nf_stat_info){NF_STAT_NONE, 0, description};
        nl = (struct nf_nifti_label){.intent = INTENT_NONE, .intent_name = "1-p", .outside = 0};
    }
    snprintf(descrip, sizeof descrip, "nlflow summarize %s%.40s (randomise %s)",
             fsl_roles[role].from_p ? "1-" : "", bids, fsl_roles[role].suffix);
    nl.descrip = descrip;

    dir = nf_path_join(ctx->outdir, "fsl");
    name = nf_asprintf("fsl/%s_%s.nii.gz", ctx->prefix, fsl_roles[role].suffix);
    path = name ? nf_path_join(ctx->outdir, name) : NULL;
    if (!dir || !path || (fsl_roles[role].from_p && !description)) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(dir, err));
    if (data->kind == NF_KIND_MATRIX) {
        struct nf_matrix m = data->u.mat;
        m.data = (float *)values;
        m.col_names = NULL;
        m.row_names = NULL;
        rc = nf_nifti_write_matrix_labelled(path, &m, &nl, err);
    } else {
        rc = nf_nifti_write_labelled(path, mv.grid, 1, values, &nl, err);
    }
    NF_TRY(rc);
    NF_TRY(rc = record_file(ctx, key, name, path));
    nf_strbuf_addf(&extra, "\"Fsl\": {\"Name\": \"%s\", \"Values\": \"%s\"}",
                   fsl_roles[role].suffix, fsl_roles[role].from_p ? "1 - p" : "statistic");
    if (extra.oom) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = write_sidecar(ctx, key, name, NULL, data, &what, &nl, extra.buf));

fail:
    nf_strbuf_release(&extra);
    nf_value_unref(data);
    free(one_minus);
    free(description);
    free(name);
    free(path);
    free(dir);
    return rc;
}

static const char *kind_word(enum nf_kind k)
{
    switch (k) {
    case NF_KIND_VOLUME: return "volume";
    case NF_KIND_MATRIX: return "matrix";
    case NF_KIND_TABLE: return "table";
    case NF_KIND_COLLECTION: return "collection";
    default: return "none";
    }
}

/* Write input i (one file, or one per collection item) and describe it in JSON. */
static int summarize_input(struct summarize_ctx *ctx, size_t i)
{
    const char *key = ctx->run->extra_names[i];
    struct nf_value *v = ctx->run->extra_in[i];
    struct stats st = {0};
    size_t first_file = ctx->n_files;
    char bids[128], label[32];
    int rc = 0;

    bids_key(key, bids, sizeof bids);
    if (!v)
        return NF_FAIL(ctx->run->err, NF_EBUG, "input '%s' has no value", key);
    if (v->kind == NF_KIND_COLLECTION) {
        for (size_t k = 0; k < v->u.coll.n; k++) {
            struct nf_value *item = v->u.coll.items[k];
            snprintf(label, sizeof label, "item-%02zu", k + 1);
            NF_TRY(rc = write_item(ctx, key, bids, item && item->label ? item->label : label,
                                   item, v, &st));
        }
    } else {
        NF_TRY(rc = write_item(ctx, key, bids, NULL, v, NULL, &st));
    }
    for (int r = 0; r < FSL_N_ROLES; r++)
        if (ctx->fsl.input[r] == (int)i)
            NF_TRY(rc = write_fsl(ctx, r, key, v));

    struct nf_strbuf *sb = &ctx->inputs_json;
    nf_strbuf_addf(sb, "%s\n    {\"key\": ", i ? "," : "");
    nf_strbuf_add_json_str(sb, key);
    nf_strbuf_addf(sb, ", \"name\": ");
    nf_strbuf_add_json_str(sb, bids);
    nf_strbuf_addf(sb, ", \"kind\": \"%s\", \"shape\": [", kind_word(v->kind));
    json_shape(sb, v);
    nf_strbuf_addf(sb, "],\n     \"files\": [");
    for (size_t f = first_file; f < ctx->n_files; f++) {
        nf_strbuf_addf(sb, "%s", f > first_file ? ", " : "");
        nf_strbuf_add_json_str(sb, ctx->files[f].name);
    }
    nf_strbuf_addf(sb, "],\n     \"min\": ");
    json_number(sb, st.n_finite ? st.min : NAN);
    nf_strbuf_addf(sb, ", \"max\": ");
    json_number(sb, st.n_finite ? st.max : NAN);
    nf_strbuf_addf(sb, ", \"mean\": ");
    json_number(sb, st.n_finite ? st.sum / (double)st.n_finite : NAN);
    nf_strbuf_addf(sb, ", \"n_nonzero\": %" PRId64 ", \"n_nonfinite\": %" PRId64, st.n_nonzero,
                   st.n_nonfinite);
    /* where it was made, as a map's sidecar says it: tables and columns have
     * no sidecar, and `nlflow report RESULTS_DIR` reads this */
    const char *node_id, *node_type, *port;
    if (source_of(ctx, key, &node_id, &node_type, &port)) {
        nf_strbuf_addf(sb, ",\n     \"source\": {\"Node\": ");
        nf_strbuf_add_json_str(sb, node_id);
        nf_strbuf_addf(sb, ", \"NodeType\": ");
        nf_strbuf_add_json_str(sb, node_type);
        nf_strbuf_addf(sb, ", \"Port\": ");
        nf_strbuf_add_json_str(sb, port);
        nf_strbuf_addf(sb, "}");
    }
    nf_strbuf_addf(sb, "}");
    return 0;

fail:
    return rc;
}

/* ---- thresholding and clusters ---- */

struct cluster {
    int64_t size;
    int64_t peak;       /* map voxel of the largest |value| (first in C order on ties) */
    int64_t peak_rank;  /* c_order_rank of the peak, for deterministic ties */
    float peak_value;
    int64_t id;         /* component number from label_clusters (cid values) */
};

static int cluster_order(const void *pa, const void *pb)
{
    const struct cluster *a = pa, *b = pb;
    if (a->size != b->size)
        return a->size > b->size ? -1 : 1;
    if (fabsf(a->peak_value) != fabsf(b->peak_value))
        return fabsf(a->peak_value) > fabsf(b->peak_value) ? -1 : 1;
    return a->peak_rank < b->peak_rank ? -1 : (a->peak_rank > b->peak_rank);
}

static bool value_passes(float x, const struct summarize_params *p)
{
    if (!isfinite(x))
        return false;
    if (isnan(p->threshold))
        return true;
    switch (p->tail) {
    case SUM_TAIL_UPPER: return x >= p->threshold;
    case SUM_TAIL_LOWER: return x <= -p->threshold;
    default: return fabs(x) >= p->threshold;
    }
}

/* Connected components of the passing voxels, 26-neighbourhood on the grid.
 * cid[c] receives the component of map voxel c (-1 when it does not pass). */
static int label_clusters(const struct map_view *mv, const bool *pass, int64_t *cid,
                          struct cluster **out, size_t *n_out, struct nf_error *err)
{
    const struct nf_grid *g = mv->grid;
    const int64_t nx = g->dim[0], ny = g->dim[1], nz = g->dim[2];
    int64_t nvox = nf_grid_nvox(g);
    int64_t *slot = NULL, *queue = NULL;   /* slot: grid offset -> passing map voxel */
    struct cluster *cl = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;

    slot = nf_malloc((size_t)nvox * sizeof *slot);
    queue = nf_malloc((size_t)(mv->n ? mv->n : 1) * sizeof *queue);
    if (!slot || !queue) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory labelling clusters");
        goto fail;
    }
    for (int64_t o = 0; o < nvox; o++)
        slot[o] = -1;
    for (int64_t c = 0; c < mv->n; c++) {
        cid[c] = -1;
        if (pass[c])
            slot[map_offset(mv, c)] = c;
    }
    for (int64_t seed = 0; seed < mv->n; seed++) {
        if (!pass[seed] || cid[seed] >= 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            struct cluster *grown = nf_realloc(cl, cap * sizeof *grown);
            if (!grown) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory labelling clusters");
                goto fail;
            }
            cl = grown;
        }
        struct cluster *k = &cl[n];
        *k = (struct cluster){.size = 0, .peak = seed, .id = (int64_t)n,
                              .peak_rank = c_order_rank(g, map_offset(mv, seed)),
                              .peak_value = mv->values[seed]};
        int64_t head = 0, tail = 0;
        queue[tail++] = seed;
        cid[seed] = (int64_t)n;
        while (head < tail) {
            int64_t c = queue[head++], off = map_offset(mv, c);
            int64_t i = off % nx, j = (off / nx) % ny, kk = off / (nx * ny);
            float x = mv->values[c];
            int64_t rank = c_order_rank(g, off);
            k->size++;
            if (fabsf(x) > fabsf(k->peak_value) ||
                (fabsf(x) == fabsf(k->peak_value) && rank < k->peak_rank)) {
                k->peak = c;
                k->peak_rank = rank;
                k->peak_value = x;
            }
            for (int64_t dk = -1; dk <= 1; dk++)
                for (int64_t dj = -1; dj <= 1; dj++)
                    for (int64_t di = -1; di <= 1; di++) {
                        int64_t a = i + di, b = j + dj, z = kk + dk;
                        if (a < 0 || a >= nx || b < 0 || b >= ny || z < 0 || z >= nz)
                            continue;
                        int64_t nb = slot[a + nx * (b + ny * z)];
                        if (nb >= 0 && cid[nb] < 0) {
                            cid[nb] = (int64_t)n;
                            queue[tail++] = nb;
                        }
                    }
        }
        n++;
    }
    *out = cl;
    *n_out = n;
    cl = NULL;

fail:
    free(slot);
    free(queue);
    free(cl);
    return rc;
}

static int pick_threshold_target(const struct summarize_ctx *ctx)
{
    const struct nf_run *run = ctx->run;
    const struct summarize_params *p = ctx->p;
    int p_index = isnan(p->p_below) ? -1
                  : find_input(run->extra_names, run->n_extra, p_key_of(p));
    struct map_view mv;
    if (p->threshold_key)
        return find_input(run->extra_names, run->n_extra, p->threshold_key);
    for (size_t i = 0; i < run->n_extra; i++)
        if ((int)i != p_index && run->extra_in[i] && map_view_of(run->extra_in[i], &mv) &&
            mv.rows == 1)
            return (int)i;
    return p_index;
}

/* A table that ran out of memory while being filled: dropped, NULL with the
 * error set. */
static struct nf_value *table_oom(struct nf_value *tab, struct nf_error *err)
{
    NF_FAIL(err, NF_ENOMEM, "out of memory");
    nf_value_unref(tab);
    return NULL;
}

/* What an atlas says about a cluster table: the label volume (by grid offset)
 * and the names of its labels (names NULL: no label file). */
struct atlas_info {
    const float *labels;
    const struct nf_label_names *names;
};

/* The integer label of grid offset off, -1 when the atlas holds something else
 * there (NaN, a fraction, a negative number). */
static int64_t atlas_label_at(const struct atlas_info *at, int64_t off)
{
    float a = at->labels[off];
    if (!isfinite(a) || a != rintf(a) || a < 0 || a > (float)NF_LABELS_MAX_INDEX)
        return -1;
    return (int64_t)a;
}

/* peak_region: the name of a labelled region, "" for label 0 or a label the
 * file does not name (n/a without an atlas). */
static char *peak_region_text(const struct atlas_info *at, int64_t off)
{
    if (!at->labels)
        return nf_strdup("n/a");
    int64_t label = atlas_label_at(at, off);
    const char *name = label > 0 ? nf_label_name(at->names, label) : NULL;
    return nf_strdup(name ? name : "");
}

struct label_count { int64_t label, count; };

static int cmp_i64(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static int cmp_share(const void *pa, const void *pb)
{
    const struct label_count *a = pa, *b = pb;
    if (a->count != b->count)
        return a->count > b->count ? -1 : 1;
    return (a->label > b->label) - (a->label < b->label);
}

/* regions: the labels a cluster covers, "name 62%; name 30%" by decreasing
 * share of its voxels (ties by label), label 0 left out unless it is all there
 * is; a label without a name is written as its number. `work` holds n. */
static char *regions_text(const struct atlas_info *at, const struct map_view *mv,
                          const int64_t *members, int64_t n, int64_t *work)
{
    struct nf_strbuf sb;
    struct label_count *lc;
    size_t n_lc = 0;
    int64_t n_labelled = 0;
    if (!at->labels)
        return nf_strdup("n/a");
    for (int64_t m = 0; m < n; m++) {
        int64_t label = atlas_label_at(at, map_offset(mv, members[m]));
        if (label >= 0)
            work[n_labelled++] = label;
    }
    qsort(work, (size_t)n_labelled, sizeof *work, cmp_i64);
    lc = nf_malloc((size_t)(n_labelled ? n_labelled : 1) * sizeof *lc);
    if (!lc)
        return NULL;
    bool only_zero = n_labelled == 0 || work[n_labelled - 1] == 0;
    for (int64_t m = 0; m < n_labelled; m++) {
        if (work[m] == 0 && !only_zero)
            continue;
        if (n_lc && lc[n_lc - 1].label == work[m])
            lc[n_lc - 1].count++;
        else
            lc[n_lc++] = (struct label_count){work[m], 1};
    }
    qsort(lc, n_lc, sizeof *lc, cmp_share);
    nf_strbuf_init(&sb);
    for (size_t i = 0; i < n_lc; i++) {
        const char *name = nf_label_name(at->names, lc[i].label);
        if (name)
            nf_strbuf_addf(&sb, "%s%s %.0f%%", i ? "; " : "", name,
                           100.0 * (double)lc[i].count / (double)n);
        else
            nf_strbuf_addf(&sb, "%s%" PRId64 " %.0f%%", i ? "; " : "", lc[i].label,
                           100.0 * (double)lc[i].count / (double)n);
    }
    free(lc);
    if (sb.oom) {
        nf_strbuf_release(&sb);
        return NULL;
    }
    char *text = nf_strbuf_detach(&sb);
    return text ? text : nf_strdup("");
}

struct peak_cand { int64_t voxel; float mag; int64_t rank; };

static int cmp_cand(const void *pa, const void *pb)
{
    const struct peak_cand *a = pa, *b = pb;
    if (a->mag != b->mag)
        return a->mag > b->mag ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

/* The peaks of one cluster, as nilearn's get_clusters_table finds them: its
 * local maxima of |value| (no 26-neighbour in the cluster larger), by
 * decreasing |value| (ties in C order, as for the cluster's peak, which comes
 * first), each kept when more than SUM_PEAK_DISTANCE_MM from every peak kept
 * before it; at most 1 + SUM_MAX_SUBPEAKS. Unlike nilearn, a plateau of equal
 * maxima is not replaced by its centre of mass: its voxels are candidates in
 * C order, and the distance rule keeps the first. slot: grid offset -> map voxel
 * for surviving voxels (every surviving neighbour of a member is a member:
 * clusters are connected components). cand holds n. */
static size_t cluster_peaks(const struct map_view *mv, const int64_t *slot,
                            const int64_t *members, int64_t n, struct peak_cand *cand,
                            int64_t peaks[1 + SUM_MAX_SUBPEAKS])
{
    const struct nf_grid *g = mv->grid;
    const int64_t nx = g->dim[0], ny = g->dim[1], nz = g->dim[2];
    size_t n_cand = 0, n_peaks = 0;
    for (int64_t m = 0; m < n; m++) {
        int64_t c = members[m], off = map_offset(mv, c);
        int64_t i = off % nx, j = (off / nx) % ny, k = off / (nx * ny);
        float mag = fabsf(mv->values[c]);
        bool is_max = true;
        for (int64_t dk = -1; dk <= 1 && is_max; dk++)
            for (int64_t dj = -1; dj <= 1 && is_max; dj++)
                for (int64_t di = -1; di <= 1 && is_max; di++) {
                    int64_t a = i + di, b = j + dj, z = k + dk;
                    if (a < 0 || a >= nx || b < 0 || b >= ny || z < 0 || z >= nz)
                        continue;
                    int64_t nb = slot[a + nx * (b + ny * z)];
                    if (nb >= 0 && fabsf(mv->values[nb]) > mag)
                        is_max = false;
                }
        if (is_max)
            cand[n_cand++] = (struct peak_cand){c, mag, c_order_rank(g, off)};
    }
    qsort(cand, n_cand, sizeof *cand, cmp_cand);
    for (size_t q = 0; q < n_cand && n_peaks < 1 + SUM_MAX_SUBPEAKS; q++) {
        double xyz[3];
        bool far = true;
        offset_to_world(g, map_offset(mv, cand[q].voxel), xyz);
        for (size_t r = 0; r < n_peaks && far; r++) {
            double other[3], d2 = 0;
            offset_to_world(g, map_offset(mv, peaks[r]), other);
            for (int a = 0; a < 3; a++)
                d2 += (xyz[a] - other[a]) * (xyz[a] - other[a]);
            far = d2 > SUM_PEAK_DISTANCE_MM * SUM_PEAK_DISTANCE_MM;
        }
        if (far)
            peaks[n_peaks++] = cand[q].voxel;
    }
    return n_peaks;
}

static int new_cluster_table(size_t rows, struct nf_value **out, struct nf_error *err)
{
    static const char *const names[SUM_CLUSTER_COLUMNS] = {
        "cluster", "size", "peak_value", "peak_x", "peak_y", "peak_z", "label",
        "peak_region", "regions", "size_mm3"};
    static const bool numeric[SUM_CLUSTER_COLUMNS] = {
        false, true, true, true, true, true, false, false, false, true};
    struct nf_value *tab = nf_value_new_table((int64_t)rows, SUM_CLUSTER_COLUMNS, err);
    *out = NULL;
    if (!tab)
        return err->code ? err->code : NF_ENOMEM;
    for (int c = 0; c < SUM_CLUSTER_COLUMNS; c++) {
        struct nf_column *col = &tab->u.tab.cols[c];
        col->name = nf_strdup(names[c]);
        col->numeric = numeric[c];
        if (col->numeric)
            col->num = nf_calloc(rows ? rows : 1, sizeof(double));
        else
            col->str = nf_calloc(rows ? rows : 1, sizeof(char *));
        if (!col->name || (col->numeric ? !col->num : !col->str)) {
            table_oom(tab, err);
            return NF_ENOMEM;
        }
    }
    *out = tab;
    return 0;
}

/* The cluster table: one row per cluster (its id, size, peak, the atlas label
 * and region there, the regions it covers, its volume), then a row per
 * sub-peak ("3a", "3b": position, value and region; size and regions n/a and
 * ""). cid: each map voxel's component; row_of: a component's cluster (-1:
 * dropped). */
static struct nf_value *cluster_table(const struct map_view *mv, const struct cluster *cl,
                                      size_t n, const int64_t *cid, const int64_t *row_of,
                                      const struct atlas_info *at, struct nf_error *err)
{
    struct nf_value *tab = NULL;
    int64_t *slot = NULL, *members = NULL, *start = NULL, *work = NULL;
    int64_t (*peaks)[1 + SUM_MAX_SUBPEAKS] = NULL;
    size_t *n_peaks = NULL, rows = 0;
    struct peak_cand *cand = NULL;

    if (n == 0) {
        new_cluster_table(0, &tab, err);
        return tab;
    }
    const struct nf_grid *g = mv->grid;
    int64_t nvox = nf_grid_nvox(g), total = 0;
    for (size_t r = 0; r < n; r++)
        total += cl[r].size;
    slot = nf_malloc((size_t)nvox * sizeof *slot);
    members = nf_malloc((size_t)total * sizeof *members);
    start = nf_calloc(n + 1, sizeof *start);
    work = nf_malloc((size_t)total * sizeof *work);
    cand = nf_malloc((size_t)total * sizeof *cand);
    peaks = nf_malloc(n * sizeof *peaks);
    n_peaks = nf_calloc(n, sizeof *n_peaks);
    if (!slot || !members || !start || !work || !cand || !peaks || !n_peaks)
        goto oom;
    /* the members of each cluster, grouped by row (counting sort) */
    for (int64_t o = 0; o < nvox; o++)
        slot[o] = -1;
    for (size_t r = 0; r < n; r++)
        start[r + 1] = start[r] + cl[r].size;
    for (int64_t c = 0; c < mv->n; c++)
        if (cid[c] >= 0 && row_of[cid[c]] >= 0) {
            slot[map_offset(mv, c)] = c;
            members[start[row_of[cid[c]]]++] = c;
        }
    for (size_t r = n; r > 0; r--)   /* back to each row's first member */
        start[r] = start[r - 1];
    start[0] = 0;
    for (size_t r = 0; r < n; r++) {
        n_peaks[r] = cluster_peaks(mv, slot, members + start[r], cl[r].size, cand, peaks[r]);
        rows += n_peaks[r] ? n_peaks[r] : 1;
    }
    if (new_cluster_table(rows, &tab, err) < 0)
        goto fail;
    /* voxel volume: |det| of the affine's 3x3 part */
    const double (*A)[4] = g->affine;
    double voxel_mm3 = fabs(A[0][0] * (A[1][1] * A[2][2] - A[1][2] * A[2][1]) -
                            A[0][1] * (A[1][0] * A[2][2] - A[1][2] * A[2][0]) +
                            A[0][2] * (A[1][0] * A[2][1] - A[1][1] * A[2][0]));
    struct nf_column *col = tab->u.tab.cols;
    size_t row = 0;
    for (size_t r = 0; r < n; r++) {
        size_t np = n_peaks[r] ? n_peaks[r] : 1;
        for (size_t q = 0; q < np; q++, row++) {
            int64_t voxel = q == 0 ? cl[r].peak : peaks[r][q];
            int64_t off = map_offset(mv, voxel);
            double xyz[3];
            offset_to_world(g, off, xyz);
            col[0].str[row] = q == 0 ? nf_asprintf("%zu", r + 1)
                                     : nf_asprintf("%zu%c", r + 1, (char)('a' + q - 1));
            col[1].num[row] = q == 0 ? (double)cl[r].size : NAN;
            col[2].num[row] = mv->values[voxel];
            for (int a = 0; a < 3; a++)
                col[3 + a].num[row] = xyz[a];
            if (!at->labels)
                col[6].str[row] = nf_strdup("n/a");
            else if (isfinite(at->labels[off]) && at->labels[off] == rintf(at->labels[off]))
                col[6].str[row] = nf_asprintf("%.0f", (double)at->labels[off]);
            else
                col[6].str[row] = nf_asprintf("%g", (double)at->labels[off]);
            col[7].str[row] = peak_region_text(at, off);
            col[8].str[row] = q == 0 ? regions_text(at, mv, members + start[r], cl[r].size, work)
                                     : nf_strdup("");
            col[9].num[row] = q == 0 ? (double)cl[r].size * voxel_mm3 : NAN;
            if (!col[0].str[row] || !col[6].str[row] || !col[7].str[row] || !col[8].str[row])
                goto oom;
        }
    }
    goto done;

oom:
    NF_FAIL(err, NF_ENOMEM, "out of memory building the cluster table");
fail:
    nf_value_unref(tab);
    tab = NULL;
done:
    free(slot);
    free(members);
    free(start);
    free(work);
    free(cand);
    free(peaks);
    free(n_peaks);
    return tab;
}

/* The names of the atlas's labels: from atlas_labels when given, else from a
 * file found beside the one the atlas was loaded from (io.h
 * nf_label_names_sidecar); names->n == 0 when there is none. A malformed file
 * is an error on the node. */
static int read_atlas_names(const struct summarize_params *p, const char *atlas_path,
                            const struct nf_node_inst *node, struct nf_label_names *names,
                            struct nf_error *err)
{
    char *path = NULL;
    int rc = 0;
    memset(names, 0, sizeof *names);
    if (p->atlas_labels)
        path = nf_strdup(p->atlas_labels);
    else
        NF_TRY(rc = nf_label_names_sidecar(atlas_path, &path, err));
    if (p->atlas_labels && !path)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (path)
        rc = nf_label_names_read(path, names, err);
    free(path);
fail:
    return nf_error_on_node(node, err, rc);
}

/* Threshold one map, label its clusters, write the thresholded map and the
 * cluster table, and return the table in *table_out. */
static int summarize_threshold(struct summarize_ctx *ctx, struct nf_value **table_out)
{
    const struct summarize_params *p = ctx->p;
    struct nf_run *run = ctx->run;
    const struct nf_node_inst *node = run->node;
    struct nf_error *err = run->err;
    struct nf_value *target = NULL, *pmap = NULL, *atlas = NULL, *table = NULL;
    struct map_view mv, pv;
    struct cluster *cl = NULL;
    size_t n_cl = 0, n_kept = 0;
    bool *pass = NULL, *kept = NULL;
    int64_t *cid = NULL, *row_of = NULL, n_pass = 0;
    float *pfull = NULL, *thr = NULL;
    char bids[128], list[512];
    char *name = NULL, *path = NULL;
    int rc = 0;

    int ti = pick_threshold_target(ctx);
    list_names(run->extra_names, run->n_extra, list, sizeof list);
    if (ti < 0) {
        rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "thresholding asked but no input is a single map with voxel geometry "
                        "(inputs: %s)", list);
        goto fail;
    }
    const char *key = run->extra_names[ti];
    bids_key(key, bids, sizeof bids);
    if (!run->extra_in[ti] || run->extra_in[ti]->kind == NF_KIND_COLLECTION) {
        rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "cannot threshold input '%s': it is a collection (threshold a single "
                        "map, e.g. a group result)", key);
        goto fail;
    }
    target = nf_value_materialize(run->extra_in[ti], err);
    if (!target) {
        rc = err->code ? err->code : NF_EIO;
        goto fail;
    }
    if (!map_view_of(target, &mv)) {
        rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "cannot threshold input '%s': it is a %s without voxel geometry "
                        "(threshold a map from mask/ridge/permute, or a volume)",
                        key, nf_kind_name(target->kind));
        goto fail;
    }
    if (mv.rows != 1) {
        rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "cannot threshold input '%s': it holds %" PRId64 " maps (expected one "
                        "1xV map or 3D volume)", key, mv.rows);
        goto fail;
    }
    const int64_t nvox = nf_grid_nvox(mv.grid);

    if (!isnan(p->p_below)) {
        int pi = find_input(run->extra_names, run->n_extra, p_key_of(p));
        if (pi < 0 || !run->extra_in[pi]) {
            rc = NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                            "p_key '%s' is not an input of this node (inputs: %s)",
                            p_key_of(p), list);
            goto fail;
        }
        pmap = nf_value_materialize(run->extra_in[pi], err);
        if (!pmap) {
            rc = err->code ? err->code : NF_EIO;
            goto fail;
        }
        if (!map_view_of(pmap, &pv) || pv.rows != 1 || !nf_grid_same(pv.grid, mv.grid)) {
            char ga[256], gb[256] = "";
            nf_grid_describe(mv.grid, ga, sizeof ga);
            if (pv.grid)
                nf_grid_describe(pv.grid, gb, sizeof gb);
            rc = NF_FAIL_AT(err, NF_ESHAPE, nf_node_loc(node), nf_node_id(node),
                            "p_key '%s' must be one p-value map on the grid of '%s' "
                            "(%s); got %s", p_key_of(p), key, ga,
                            pv.grid ? gb : nf_kind_name(pmap->kind));
            goto fail;
        }
        /* p-values by grid offset: the two maps may cover different voxels. */
        pfull = nf_malloc((size_t)nvox * sizeof *pfull);
        if (!pfull) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (int64_t o = 0; o < nvox; o++)
            pfull[o] = NAN;
        for (int64_t c = 0; c < pv.n; c++)
            pfull[map_offset(&pv, c)] = pv.values[c];
    }
    if (run->in && run->in[SUMMARIZE_IN_ATLAS]) {
        atlas = nf_value_materialize(run->in[SUMMARIZE_IN_ATLAS], err);
        if (!atlas) {
            rc = err->code ? err->code : NF_EIO;
            goto fail;
        }
        if (atlas->kind != NF_KIND_VOLUME || !nf_grid_same(&atlas->u.vol.grid, mv.grid)) {
            char ga[256], gb[256] = "";
            nf_grid_describe(mv.grid, ga, sizeof ga);
            if (atlas->kind == NF_KIND_VOLUME)
                nf_grid_describe(&atlas->u.vol.grid, gb, sizeof gb);
            rc = NF_FAIL_AT(err, NF_ESHAPE, nf_node_loc(node), nf_node_id(node),
                            "atlas is not on the grid of '%s': atlas %s, map %s", key,
                            atlas->kind == NF_KIND_VOLUME ? gb : nf_kind_name(atlas->kind),
                            ga);
            goto fail;
        }
    }

    pass = nf_calloc((size_t)(mv.n ? mv.n : 1), sizeof *pass);
    cid = nf_malloc((size_t)(mv.n ? mv.n : 1) * sizeof *cid);
    thr = nf_calloc((size_t)(mv.n ? mv.n : 1), sizeof *thr);
    if (!pass || !cid || !thr) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    /* voxels that do not survive read as "nothing here": 0, or 1 in a p map */
    struct nf_stat_info what = stat_of(run->extra_in[ti], NULL, bids);
    for (int64_t c = 0; c < mv.n; c++)
        thr[c] = outside_of(&what);
    for (int64_t c = 0; c < mv.n; c++)
        pass[c] = value_passes(mv.values[c], p) &&
                  (!pfull || pfull[map_offset(&mv, c)] < p->p_below);
    NF_TRY(rc = label_clusters(&mv, pass, cid, &cl, &n_cl, err));

    /* Drop small clusters, from the table and from the thresholded map. */
    kept = nf_calloc(n_cl ? n_cl : 1, sizeof *kept);
    if (!kept) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n_cl; k++) {
        kept[k] = cl[k].size >= p->min_cluster_size;
        if (kept[k])
            cl[n_kept++] = cl[k];
    }
    for (int64_t c = 0; c < mv.n; c++)
        if (cid[c] >= 0 && kept[cid[c]]) {
            thr[c] = mv.values[c];
            n_pass++;
        }
    if (n_kept > 1)     /* cl is NULL when nothing passed the threshold */
        qsort(cl, n_kept, sizeof *cl, cluster_order);
    row_of = nf_malloc((n_cl ? n_cl : 1) * sizeof *row_of);
    if (!row_of) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < n_cl; k++)
        row_of[k] = -1;
    for (size_t r = 0; r < n_kept; r++)
        row_of[cl[r].id] = (int64_t)r;

    name = file_name(ctx, NULL, bids, "_desc-thresholded_statmap.nii.gz");
    path = name ? nf_path_join(ctx->outdir, name) : NULL;
    if (!path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    struct nf_nifti_label nl = nifti_label(&what, "nlflow summarize thresholded");
    if (target->kind == NF_KIND_MATRIX) {
        struct nf_matrix m = target->u.mat;
        m.data = thr;
        m.col_names = NULL;
        m.row_names = NULL;
        rc = nf_nifti_write_matrix_labelled(path, &m, &nl, err);
    } else {
        /* a volume has no mask: what fails the threshold is the "outside" */
        rc = nf_nifti_write_labelled(path, mv.grid, 1, thr, &nl, err);
    }
    NF_TRY(rc);
    NF_TRY(rc = record_file(ctx, key, name, path));
    {
        struct nf_strbuf extra;
        nf_strbuf_init(&extra);
        nf_strbuf_addf(&extra, "\"Thresholded\": {\"Threshold\": ");
        json_number(&extra, p->threshold);
        nf_strbuf_addf(&extra, ", \"Tail\": \"%s\", \"PBelow\": ",
                       tail_names[p->tail >= 0 && p->tail <= 2 ? p->tail : 0]);
        json_number(&extra, p->p_below);
        nf_strbuf_addf(&extra, ", \"PKey\": ");
        if (isnan(p->p_below))
            nf_strbuf_addf(&extra, "null");
        else
            nf_strbuf_add_json_str(&extra, p_key_of(p));
        nf_strbuf_addf(&extra, ", \"MinClusterSize\": %" PRId64 ", \"SurvivingVoxels\": %" PRId64
                       ", \"FailingValue\": %g}", p->min_cluster_size, n_pass,
                       (double)outside_of(&what));
        rc = extra.oom ? NF_FAIL(err, NF_ENOMEM, "out of memory")
                       : write_sidecar(ctx, key, name, NULL, target, &what, &nl, extra.buf);
        nf_strbuf_release(&extra);
        NF_TRY(rc);
    }
    free(name);
    free(path);
    name = path = NULL;

    struct atlas_info at = {.labels = atlas ? atlas->u.vol.data : NULL,
                            .names = ctx->names.n ? &ctx->names : NULL};
    table = cluster_table(&mv, cl, n_kept, cid, row_of, &at, err);
    if (!table) {
        rc = err->code ? err->code : NF_ENOMEM;
        goto fail;
    }
    name = file_name(ctx, NULL, bids, "_clusters.tsv");
    path = name ? nf_path_join(ctx->outdir, name) : NULL;
    if (!path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_table_write(path, &table->u.tab, err));
    NF_TRY(rc = record_file(ctx, key, name, path));

    struct nf_strbuf *sb = &ctx->threshold_json;
    nf_strbuf_addf(sb, "{\"key\": ");
    nf_strbuf_add_json_str(sb, key);
    nf_strbuf_addf(sb, ", \"threshold\": ");
    json_number(sb, p->threshold);
    nf_strbuf_addf(sb, ", \"tail\": \"%s\", \"p_below\": ",
                   tail_names[p->tail >= 0 && p->tail <= 2 ? p->tail : 0]);
    json_number(sb, p->p_below);
    nf_strbuf_addf(sb, ", \"p_key\": ");
    if (isnan(p->p_below))
        nf_strbuf_addf(sb, "null");
    else
        nf_strbuf_add_json_str(sb, p_key_of(p));
    nf_strbuf_addf(sb, ",\n    \"min_cluster_size\": %" PRId64 ", \"connectivity\": 26, "
                   "\"atlas\": %s, \"atlas_labels\": ", p->min_cluster_size,
                   atlas ? "true" : "false");
    const char *names_path = ctx->names.path;
    if (names_path)   /* its name only: the same results wherever the data lie */
        nf_strbuf_add_json_str(sb, strrchr(names_path, '/') ? strrchr(names_path, '/') + 1
                                                            : names_path);
    else
        nf_strbuf_addf(sb, "null");
    nf_strbuf_addf(sb, ", \"min_peak_distance_mm\": %g, \"n_voxels\": %" PRId64
                   ", \"n_clusters\": %zu, \"files\": [", SUM_PEAK_DISTANCE_MM, n_pass, n_kept);
    /* the thresholded map, its sidecar, the cluster table */
    for (size_t f = ctx->n_files - 3; f < ctx->n_files; f++) {
        nf_strbuf_add_json_str(sb, ctx->files[f].name);
        nf_strbuf_addf(sb, "%s", f + 1 < ctx->n_files ? ", " : "");
    }
    nf_strbuf_addf(sb, "]}");
    *table_out = table;
    table = NULL;

fail:
    nf_error_on_node(node, err, rc);
    nf_value_unref(target);
    nf_value_unref(pmap);
    nf_value_unref(atlas);
    nf_value_unref(table);
    free(cl);
    free(pass);
    free(kept);
    free(cid);
    free(row_of);
    free(pfull);
    free(thr);
    free(name);
    free(path);
    return rc;
}

/* ---- JSON files and outputs ---- */

static int write_json_files(struct summarize_ctx *ctx)
{
    const struct nf_env *env = ctx->run->env;
    const char *pipeline = env->pipeline_name ? env->pipeline_name : "nlflow";
    const char *hash = env->pipeline_hash ? env->pipeline_hash : "";
    struct nf_strbuf sb;
    char *name = NULL, *path = NULL;
    int rc = 0;

    nf_strbuf_init(&sb);
    /* first, so that a failed run can mark these results as an earlier run's (failed_run.c) */
    nf_strbuf_addf(&sb, "{\n  \"Status\": \"complete\",\n  \"Name\": ");
    nf_strbuf_add_json_str(&sb, pipeline);
    nf_strbuf_addf(&sb, ",\n  \"PipelineHash\": ");
    nf_strbuf_add_json_str(&sb, hash);
    struct nf_used_file_info used;
    for (size_t u = 0; nf_pipeline_used_file(env, u, &used); u++) {   /* `type: use` files */
        nf_strbuf_addf(&sb, "%s\n    {\"path\": ", u ? "," : ",\n  \"UsedFiles\": [");
        nf_strbuf_add_json_str(&sb, used.path);
        nf_strbuf_addf(&sb, ", \"hash\": ");
        nf_strbuf_add_json_str(&sb, used.hash);
        nf_strbuf_addf(&sb, ", \"commit\": ");
        if (used.commit)
            nf_strbuf_add_json_str(&sb, used.commit);
        else
            nf_strbuf_addf(&sb, "null");
        nf_strbuf_addf(&sb, ", \"used_by\": ");
        nf_strbuf_add_json_str(&sb, used.used_by);
        nf_strbuf_addf(&sb, "}%s", u + 1 == nf_pipeline_used_files(env) ? "\n  ]" : "");
    }
    nf_strbuf_addf(&sb, ",\n  \"prefix\": ");
    nf_strbuf_add_json_str(&sb, ctx->prefix);
    nf_strbuf_addf(&sb, ",\n  \"inputs\": [%s%s],\n  \"thresholding\": %s",
                   ctx->inputs_json.buf ? ctx->inputs_json.buf : "",
                   ctx->inputs_json.len ? "\n  " : "",
                   ctx->threshold_json.len ? ctx->threshold_json.buf : "null");
    if (ctx->p->naming == SUM_NAMING_FSL) {
        /* which input each of randomise's names holds (the files are in its list) */
        nf_strbuf_addf(&sb, ",\n  \"fsl\": {");
        for (int r = 0; r < FSL_N_ROLES; r++) {
            int i = ctx->fsl.input[r];
            nf_strbuf_addf(&sb, "%s\"%s\": ", r ? ", " : "", fsl_roles[r].suffix);
            if (i >= 0)
                nf_strbuf_add_json_str(&sb, ctx->run->extra_names[i]);
            else
                nf_strbuf_addf(&sb, "null");
        }
        nf_strbuf_addf(&sb, "}");
    }
    nf_strbuf_addf(&sb, "\n}\n");
    /* Two summarize nodes with their own `name` get their own summary. */
    name = ctx->p->name ? nf_asprintf("%s_summary.json", ctx->prefix) : nf_strdup("summary.json");
    path = name ? nf_path_join(ctx->outdir, name) : NULL;
    if (!path || sb.oom) {
        rc = NF_FAIL(ctx->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_write_file_atomic(path, sb.buf, sb.len, ctx->run->err));
    NF_TRY(rc = record_file(ctx, "summary", name, path));
    free(name);
    free(path);
    name = path = NULL;

    nf_strbuf_release(&sb);
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "{\n  \"Name\": ");
    nf_strbuf_add_json_str(&sb, pipeline);
    nf_strbuf_addf(&sb, ",\n  \"BIDSVersion\": \"1.8.0\",\n  \"DatasetType\": \"derivative\",\n"
                   "  \"GeneratedBy\": [\n    {\"Name\": \"nlflow\", \"Version\": ");
    nf_strbuf_add_json_str(&sb, NF_VERSION);
    nf_strbuf_addf(&sb, ", \"PipelineHash\": ");
    nf_strbuf_add_json_str(&sb, hash);
    nf_strbuf_addf(&sb, "}\n  ]\n}\n");
    path = nf_path_join(ctx->outdir, "dataset_description.json");
    if (!path || sb.oom) {
        rc = NF_FAIL(ctx->run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_write_file_atomic(path, sb.buf, sb.len, ctx->run->err));
    NF_TRY(rc = record_file(ctx, "dataset_description", "dataset_description.json", path));

fail:
    nf_strbuf_release(&sb);
    free(name);
    free(path);
    return rc;
}

static struct nf_value *files_table(const struct summarize_ctx *ctx, struct nf_error *err)
{
    struct nf_value *tab = nf_value_new_table((int64_t)ctx->n_files, 2, err);
    if (!tab)
        return NULL;
    for (int c = 0; c < 2; c++) {
        struct nf_column *col = &tab->u.tab.cols[c];
        col->name = nf_strdup(c == 0 ? "key" : "path");
        col->numeric = false;
        col->str = nf_calloc(ctx->n_files ? ctx->n_files : 1, sizeof(char *));
        if (!col->name || !col->str)
            goto oom;
    }
    for (size_t f = 0; f < ctx->n_files; f++) {
        tab->u.tab.cols[0].str[f] = nf_strdup(ctx->files[f].key);
        /* relative to the outputs folder: the value does not depend on where
         * the files went (a moved outputs folder keeps the cached result) */
        tab->u.tab.cols[1].str[f] = nf_strdup(ctx->files[f].name);
        if (!tab->u.tab.cols[0].str[f] || !tab->u.tab.cols[1].str[f])
            goto oom;
    }
    return tab;

oom:
    return table_oom(tab, err);
}

/* Two summarize nodes must not write the same summary file: a cached rerun
 * runs one of them again and leaves the other's file, where a fresh run
 * leaves the last one's, so the outputs would depend on the cache.
 * summary.json of two without a name, or <name>_summary.json of one name,
 * is an error at the later node in run order. */
static int check_files_apart(const struct summarize_params *p, const struct nf_env *env,
                             const struct nf_node_inst *node, struct nf_error *err)
{
    char mine[160], other[160];
    const char *pipeline = env && env->pipeline_name ? env->pipeline_name : "nlflow";
    safe_prefix(p->name ? p->name : pipeline, mine, sizeof mine);
    struct nf_node_info info;
    for (size_t i = 0; nf_pipeline_node(env, i, &info); i++) {
        if (info.params == p)
            return 0;   /* only nodes before this one: the error is said once */
        if (info.type != &nf_node_summarize)
            continue;
        const struct summarize_params *q = info.params;
        safe_prefix(q->name ? q->name : pipeline, other, sizeof other);
        if (!p->name != !q->name || (p->name && strcmp(mine, other) != 0))
            continue;
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "this summarize and '%s' would both write %s%s into "
                         "settings.outputs (a rerun that runs one of them again would leave the other's): give "
                         "one of them its own `name:`", info.id, p->name ? mine : "",
                         p->name ? "_summary.json" : "summary.json");
    }
    return 0;
}

static int summarize_run(struct nf_run *run)
{
    const struct summarize_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    const struct nf_env *env = run->env;
    struct summarize_ctx ctx = {.p = p, .run = run};
    struct nf_value *clusters = NULL, *files = NULL;
    int rc = 0;

    nf_strbuf_init(&ctx.inputs_json);
    nf_strbuf_init(&ctx.threshold_json);
    if (!env || !env->outputs_dir) {
        rc = NF_FAIL(run->err, NF_EBUG, "summarize run without an outputs folder");
        goto fail;
    }
    ctx.outdir = env->outputs_dir;
    safe_prefix(p->name ? p->name : (env->pipeline_name ? env->pipeline_name : "nlflow"),
                ctx.prefix, sizeof ctx.prefix);
    if (!ctx.prefix[0])
        snprintf(ctx.prefix, sizeof ctx.prefix, "nlflow");
    NF_TRY(rc = check_keys(run->extra_names, run->n_extra, node, run->err));
    NF_TRY(rc = check_named_inputs(p, run->extra_names, run->n_extra, node, run->err));
    /* again: a node after one that writes files is resolved only when it runs */
    NF_TRY(rc = check_files_apart(p, env, node, run->err));
    NF_TRY(rc = fsl_pick_inputs(p, node, env, run->extra_names, run->n_extra, &ctx.fsl,
                                run->err));
    if (run->n_extra == 0)
        nf_warn(nf_node_id(node), "no inputs: only summary.json and dataset_description.json "
                "are written");
    /* the region names, for the cluster table and tables with a label column */
    if (run->in && run->in[SUMMARIZE_IN_ATLAS]) {
        NF_TRY(rc = read_atlas_names(p, run->in[SUMMARIZE_IN_ATLAS]->path, node, &ctx.names,
                                     run->err));
    } else if (p->atlas_labels) {
        rc = NF_FAIL_AT(run->err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                        "atlas_labels names the regions of an atlas, but no atlas input is "
                        "connected");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(ctx.outdir, run->err));

    for (size_t i = 0; i < run->n_extra; i++)
        NF_TRY(rc = summarize_input(&ctx, i));
    if (thresholding(p)) {
        NF_TRY(rc = summarize_threshold(&ctx, &clusters));
    } else {
        clusters = cluster_table(NULL, NULL, 0, NULL, NULL, &(struct atlas_info){0}, run->err);
        if (!clusters) {
            rc = run->err->code ? run->err->code : NF_ENOMEM;
            goto fail;
        }
    }
    if (ctx.inputs_json.oom || ctx.threshold_json.oom) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = write_json_files(&ctx));
    files = files_table(&ctx, run->err);
    if (!files) {
        rc = run->err->code ? run->err->code : NF_ENOMEM;
        goto fail;
    }
    run->out[SUMMARIZE_OUT_TABLE] = clusters;
    run->out[SUMMARIZE_OUT_FILES] = files;
    clusters = files = NULL;

fail:
    nf_error_on_node(node, run->err, rc);
    nf_value_unref(clusters);
    nf_value_unref(files);
    for (size_t f = 0; f < ctx.n_files; f++) {
        free(ctx.files[f].key);
        free(ctx.files[f].name);
        free(ctx.files[f].path);
    }
    free(ctx.files);
    nf_label_names_release(&ctx.names);
    nf_strbuf_release(&ctx.inputs_json);
    nf_strbuf_release(&ctx.threshold_json);
    return rc;
}

/* Plan time: named input i must be one map with voxel geometry when its shape
 * is known ("cannot <verb> input 'x'<as>: ..."). */
static int check_one_map(const struct nf_resolve *r, int i, const char *verb, const char *as)
{
    const struct nf_shape *s = &r->extra_in[i];
    const char *key = r->extra_names[i];
    if (s->kind == NF_KIND_TABLE || (s->kind == NF_KIND_MATRIX && !s->has_geom))
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "cannot %s input '%s'%s: it is a %s without voxel geometry", verb, key,
                          as, nf_kind_name(s->kind));
    if (s->kind == NF_KIND_COLLECTION)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "cannot %s input '%s'%s: it is a collection (%s a single map, e.g. a "
                          "group result)", verb, key, as, verb);
    int64_t maps = s->kind == NF_KIND_VOLUME ? s->dim[3] : s->dim[0];
    if ((s->kind == NF_KIND_VOLUME || s->kind == NF_KIND_MATRIX) && maps > 1)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "cannot %s input '%s'%s: it holds %" PRId64 " maps (expected one 1xV "
                          "map or 3D volume)", verb, key, as, maps);
    return 0;
}

/* Plan time: input names exist and stay distinct; a thresholded input (or one
 * written with FSL's names) that is known to lack geometry is an error now
 * rather than after hours of compute. */
static int summarize_resolve(struct nf_resolve *r)
{
    const struct summarize_params *p = r->params;
    int rc = 0;

    NF_TRY(rc = check_keys(r->extra_names, r->n_extra, r->node, r->err));
    NF_TRY(rc = check_named_inputs(p, r->extra_names, r->n_extra, r->node, r->err));
    if (thresholding(p) && p->threshold_key)
        NF_TRY(rc = check_one_map(r, find_input(r->extra_names, r->n_extra, p->threshold_key),
                                  "threshold", ""));
    struct fsl_pick fsl;
    NF_TRY(rc = fsl_pick_inputs(p, r->node, r->env, r->extra_names, r->n_extra, &fsl, r->err));
    for (int k = 0; k < FSL_N_ROLES; k++) {
        char as[64];
        snprintf(as, sizeof as, " as <prefix>_%s (naming: fsl)", fsl_roles[k].suffix);
        if (fsl.input[k] >= 0)
            NF_TRY(rc = check_one_map(r, fsl.input[k], "write", as));
    }
    /* the label file is read now (whenever an atlas is connected, as at run
     * time), so that `nlflow validate` reports a bad one */
    if (p->atlas_labels && !nf_node_input_wired(r->node, SUMMARIZE_IN_ATLAS)) {
        rc = NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                        "atlas_labels names the regions of an atlas, but no atlas input is "
                        "connected");
        goto fail;
    }
    const char *atlas_path = r->in ? r->in[SUMMARIZE_IN_ATLAS].path : NULL;
    if (p->atlas_labels || atlas_path) {
        struct nf_label_names names;
        rc = read_atlas_names(p, atlas_path, r->node, &names, r->err);
        nf_label_names_release(&names);
        NF_TRY(rc);
    }
    NF_TRY(rc = check_files_apart(p, r->env, r->node, r->err));   /* last: a node's own mistakes first */
    r->out[SUMMARIZE_OUT_TABLE] = (struct nf_shape){.kind = NF_KIND_TABLE,
                                              .dim = {0, SUM_CLUSTER_COLUMNS}};
    r->out[SUMMARIZE_OUT_FILES] = (struct nf_shape){.kind = NF_KIND_TABLE, .dim = {0, 2}};

fail:
    return rc;
}

static void summarize_check(const void *params, const struct nf_loc *loc, const char *node,
                            struct nf_diags *d)
{
    const struct summarize_params *p = params;
    if (thresholding(p))
        return;
    if (p->threshold_key && p->naming != SUM_NAMING_FSL)   /* fsl: it names tstat1's map */
        NF_DIAG(d, NF_EINVAL, loc, node,
                "threshold_key is set but neither threshold nor p_below is: nothing would "
                "be thresholded");
    if (p->min_cluster_size > 1)
        NF_DIAG(d, NF_EINVAL, loc, node,
                "min_cluster_size is set but neither threshold nor p_below is: there are no "
                "clusters without a threshold");
}

/* Thresholding works on one map: a pass flag, a cluster id and a thresholded copy
 * per voxel, plus grid-sized lookups; 2 MNI grids' worth is a fair bound when
 * the map's grid is not known here (the atlas grid is used when connected). */
static uint64_t summarize_estimate(const void *params, const struct nf_shape *in,
                                   const struct nf_shape *out)
{
    const struct summarize_params *p = params;
    uint64_t nvox = 91 * 109 * 91;
    (void)out;
    if (in && in[SUMMARIZE_IN_ATLAS].kind == NF_KIND_VOLUME)
        nvox = (uint64_t)(in[SUMMARIZE_IN_ATLAS].dim[0] * in[SUMMARIZE_IN_ATLAS].dim[1] *
                          in[SUMMARIZE_IN_ATLAS].dim[2]);
    /* naming: fsl: a 1 - p copy of one map at a time */
    uint64_t fsl = p->naming == SUM_NAMING_FSL ? nvox * sizeof(float) : 0;
    if (!thresholding(p))
        return fsl;
    /* + the cluster table: a grid-sized slot (8) and, per surviving voxel at
     * most, its member index, label and peak candidate (8 + 8 + 24) */
    return fsl + nvox * (1 + 8 + 4 + 8 + 4 + 4 + 8 + 40);
}

/* atlas_labels (node.h key_files): the file's content, not its name, is part
 * of the key, so that an edited label file rewrites the tables. A label file
 * found beside the atlas enters the key through load's (load.c). */
static int summarize_key_files(const void *params, const struct nf_env *env, char ***paths,
                               size_t *n, struct nf_error *err)
{
    const struct summarize_params *p = params;
    (void)env;
    *paths = NULL;
    *n = 0;
    if (!p->atlas_labels)
        return 0;
    *paths = nf_calloc(1, sizeof **paths);
    if (!*paths || !((*paths)[0] = nf_strdup(p->atlas_labels))) {
        free(*paths);
        *paths = NULL;
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    *n = 1;
    return 0;
}

#define FIELD(f) offsetof(struct summarize_params, f)
static const struct nf_param summarize_param_table[] = {
    NF_PARAM_NUM_F("threshold", FIELD(threshold), NAN, 0, INFINITY, NF_PF_OPTIONAL,
                   "keep voxels whose value passes this threshold (see tail); none if absent"),
    NF_PARAM_STR_F("threshold_key", FIELD(threshold_key), "", NF_PF_OPTIONAL,
                   "input to threshold (default: the first single map, not the p map); with "
                   "naming: fsl also the statistic written as <prefix>_tstat1"),
    NF_PARAM_ENUM("tail", FIELD(tail), tail_names, SUM_TAIL_TWO,
                  "which values pass: two |x| >= t, upper x >= t, lower x <= -t"),
    NF_PARAM_NUM_F("p_below", FIELD(p_below), NAN, 1e-300, 1, NF_PF_OPTIONAL,
                   "keep voxels where the map named by p_key is below this p-value"),
    NF_PARAM_STR("p_key", FIELD(p_key), "p", "input holding the p-values used by p_below"),
    NF_PARAM_INT("min_cluster_size", FIELD(min_cluster_size), 1, 1, 1e12,
                 "drop clusters (26-connected) with fewer voxels"),
    NF_PARAM_STR_F("name", FIELD(name), "", NF_PF_OPTIONAL,
                   "file-name prefix (default: the pipeline name)"),
    NF_PARAM_PATH_F("atlas_labels", FIELD(atlas_labels), "", NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                    "names of the atlas's labels (mricron .txt, .lut, BIDS _dseg.tsv); default: "
                    "the file beside the atlas (aal.nii.gz: aal.nii.txt, aal.txt, aal.lut; "
                    "x_dseg.nii.gz: x_dseg.tsv)"),
    NF_PARAM_ENUM("naming", FIELD(naming), naming_names, SUM_NAMING_BIDS,
                  "bids: BIDS-derivative names; fsl: also FSL randomise's names under fsl/: "
                  "<prefix>_tstat1 (the statistic), _vox_p_tstat1 (1 - p) and "
                  "_vox_corrp_tstat1 (1 - p_fwe)"),
    NF_PARAM_END,
};
#undef FIELD

/* node_type.methods */
static char *summarize_methods(const void *params)
{
    const struct summarize_params *p = params;
    if (isnan(p->threshold) && isnan(p->p_below))
        return nf_strdup("Results were written as BIDS-derivative files (maps as NIfTI images with JSON "
                         "sidecars).");
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    if (p->threshold_key)
        nf_strbuf_addf(&sb, "The %s map was thresholded", p->threshold_key);
    else
        nf_strbuf_addf(&sb, "The result map was thresholded");
    if (!isnan(p->threshold))
        nf_strbuf_addf(&sb, p->tail == SUM_TAIL_UPPER   ? " at values >= %g (upper tail)"
                            : p->tail == SUM_TAIL_LOWER ? " at values <= -%g (lower tail)"
                                                        : " at |values| >= %g (two-tailed)",
                       p->threshold);
    if (!isnan(p->p_below))
        nf_strbuf_addf(&sb, "%s where the %s map was below %g", isnan(p->threshold) ? "" : " and",
                       p->p_key ? p->p_key : "p", p->p_below);
    nf_strbuf_addf(&sb, "; the surviving voxels were grouped into 26-connected clusters");
    if (p->min_cluster_size > 1)
        nf_strbuf_addf(&sb, ", clusters of fewer than %" PRId64 " voxels were discarded", p->min_cluster_size);
    nf_strbuf_addf(&sb, ", and each cluster was reported with its size and peak location.");
    return nf_strbuf_detach(&sb);
}

static const struct nf_port summarize_inputs[] = {
    {"atlas", "integer label image on the maps' grid: labels and names the regions of each "
     "cluster; its label file also names the rows of tables with a label column",
     NF_PT_VOLUME, NF_PORT_OPTIONAL},
    {"*", "any named results to write, e.g. {score: ridge1.score, p: perm.p}", NF_PT_ANY,
     NF_PORT_VARIADIC | NF_PORT_OPTIONAL},
    NF_PORT_END,
};

static const struct nf_port summarize_outputs[] = {
    {"table", "clusters of the thresholded map (cluster, size, peak_value, peak_x, peak_y, "
     "peak_z, label, peak_region, regions, size_mm3; sub-peak rows 1a, 1b, 1c); empty "
     "without thresholding", NF_PT_TABLE, 0},
    {"files", "every file written: columns key and path (relative to settings.outputs)",
     NF_PT_TABLE, 0},
    NF_PORT_END,
};
NF_PORTS_MATCH(summarize_inputs, SUMMARIZE_N_IN);
NF_PORTS_MATCH(summarize_outputs, SUMMARIZE_N_OUT);

const struct nf_node_type nf_node_summarize = {
    .name = "summarize",
    .summary = "write results as BIDS-derivative files, with thresholds and clusters",
    .description =
        "Writes each input `key: node.port` under settings.outputs: maps as "
        "<prefix>_stat-<key>_statmap.nii.gz (1xV -> 3D, kxV -> 4D), tables and plain "
        "matrices as <prefix>_stat-<key>.tsv, collections as one file per item prefixed by "
        "its label. Items labelled with BIDS entities beyond the subject (the runs of a bids "
        "node, sub-01_task-x_run-1_space-S; fixed_effects' subjects, sub-01_task-x_space-S) are "
        "written as BIDS derivatives, in the subject's folder (sub-01/, sub-01/ses-2/) without "
        "the prefix, a kxV map with named rows (glm's contrasts) as one file per row: "
        "sub-01/sub-01_task-x_run-1_space-S_contrast-<name>_stat-<key>_statmap.nii.gz, as "
        "nilearn's save_glm_to_bids and fitlins name them. Each map gets a JSON sidecar (<...>_statmap.json) naming the statistic its "
        "producer computed, degrees of freedom, NIfTI intent, source node and port, and the "
        "name of each volume of a 4D map; t maps carry intent t-test with their degrees of "
        "freedom, correlation maps intent correl, z maps z-score, p/p_fwe/q maps intent pval "
        "and 1 (not 0) outside the mask. With `threshold` and/or `p_below`, one map is "
        "thresholded and its 26-connected clusters are listed with size (voxels and mm3), "
        "peak (world mm), the atlas label and region name there, and the regions the cluster "
        "covers by share of its voxels; up to three local maxima more than 8 mm from the "
        "cluster's stronger peaks follow as sub-peak rows (1a, 1b, 1c, as nilearn's "
        "get_clusters_table). Region names come from `atlas_labels` or a label file beside "
        "the atlas; when they are known, a table with a numeric `label` column (predict's ROI "
        "table) is written with a `region` column after it naming each row's label (empty "
        "where the file names none). With `naming: fsl` the statistic, p and p_fwe maps are also written "
        "under fsl/ as FSL randomise names one contrast's outputs: <prefix>_tstat1 (the "
        "statistic as it is, whatever it is: t, r, mean), <prefix>_vox_p_tstat1 = 1 - p and "
        "<prefix>_vox_corrp_tstat1 = 1 - p_fwe (float 1 - p; 0 outside the mask, intent "
        "none); the p values are those of the permute node's tail, so a two-tailed test "
        "gives two-tailed 1 - p where randomise's tstat1 files hold the positive tail only. "
        "The statistic is the input named by threshold_key, else the one from a permute "
        "node's stat, else the input keyed t (or stat); p and p_fwe come from that permute "
        "node's p and p_fwe, else the inputs keyed p and p_fwe. summary.json and "
        "dataset_description.json are written last.",
    .version = 5,   /* 5: summary.json begins with "Status" */
    .params = summarize_param_table,
    .params_size = sizeof(struct summarize_params),
    .inputs = summarize_inputs,
    .outputs = summarize_outputs,
    .check = summarize_check,
    .resolve = summarize_resolve,
    .estimate = summarize_estimate,
    .run_cpu = summarize_run,
    .key_files = summarize_key_files,
    .methods = summarize_methods,
    .flags = NF_NODE_SINK | NF_NODE_NO_MAP,
};
