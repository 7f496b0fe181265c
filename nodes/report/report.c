/* report.c — the `report` node: one self-contained HTML page of a pipeline's
 * results, <name>_report.html in the outputs folder, that opens offline and
 * can be mailed (every image inline, no external file; report_page.h).
 *
 * It takes named inputs like summarize (`in: {t: group.stat, null: ...}`) and
 * shows each by what it is: a map (a 1xV matrix with voxel geometry, or a 3-D
 * volume) as orthogonal slices through its peak, an axial mosaic and
 * glass-brain projections over an anatomical underlay with a colour bar
 * (render.h); a column of numbers (a permutation test's null distribution of
 * the maximum) as a histogram with its 95th percentile marked; a table as a
 * table; a collection of maps as one glass-brain thumbnail per item. The
 * header names the pipeline, its hash and nlflow's version, and holds the
 * pipeline file itself. Same inputs, same bytes, except the date line.
 *
 * The underlay is the `underlay` input, else the file named by `template`,
 * else mricron-data's ch2better template (MNI space, as the simulated
 * data) when installed; the file's content is part of the node's key.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "node.h"
#include "io/io.h"
#include "core/switches.h"
#include "core/util.h"
#include "report.h"
#include "report_internal.h"
#include "encode.h"

#define DEFAULT_UNDERLAY "/usr/share/mricron/templates/ch2better.nii.gz"

#define FIELD(f) offsetof(struct report_params, f)
static const struct nf_param report_param_table[] = {
    NF_PARAM_STR_F("title", FIELD(title), "", NF_PF_OPTIONAL, "page title (default: '<pipeline name> report')"),
    NF_PARAM_STR_F("name", FIELD(name), "", NF_PF_OPTIONAL,
                   "file prefix: <name>_report.html under settings.outputs (default: the pipeline's name); "
                   "characters other than letters, digits, - and _ become -, so the page stays there"),
    NF_PARAM_NUM("threshold", FIELD(threshold), 0, 0, 1e30,
                 "maps of a statistic (t, z, r) show voxels with |value| >= threshold (0: every nonzero voxel); "
                 "other maps show every nonzero voxel"),
    NF_PARAM_NUM("p_below", FIELD(p_below), 0.05, 1e-300, 1,
                 "p maps (p, p_fwe, q_fdr) are shown as -log10 p where p < p_below"),
    NF_PARAM_STR_F("p_key", FIELD(p_key), "", NF_PF_OPTIONAL,
                   "an input holding a p map (e.g. p_fwe): statistic maps (t, z, r) are shown only where it is "
                   "below p_below, as summarize's p_key"),
    NF_PARAM_INT("min_cluster_size", FIELD(min_cluster_size), 1, 1, 1e12,
                 "thresholded maps (statistics, p maps) hide clusters of fewer voxels (26-connected, signs apart)"),
    NF_PARAM_STR_F("template", FIELD(underlay), "", NF_PF_OPTIONAL,
                    "anatomical image file under the maps, any grid in the same space (default: mricron-data's "
                    "ch2better MNI template when installed; none: no underlay); the `underlay` input wins"),
    NF_PARAM_INT("mosaic", FIELD(mosaic), 12, 1, 64, "axial slices in each map's mosaic"),
    NF_PARAM_STR_LIST_F("sources", FIELD(sources), "", 1, 0, NF_PF_OPTIONAL,
                        "where inputs were made, for reports rebuilt by `nlflow report`: key=type.port "
                        "entries, e.g. [null_max=permute.null_max, t=permute.stat] (default: the wiring)"),
    NF_PARAM_STR_F("rebuilt_from", FIELD(rebuilt_from), "", NF_PF_OPTIONAL,
                   "for reports rebuilt by `nlflow report`: the results they were rebuilt from, shown in "
                   "the header in place of this pipeline's file and hash"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port report_inputs[] = {
    { "underlay", "anatomical volume under the maps (any grid in the same space)", NF_PT_VOLUME,
      NF_PORT_OPTIONAL },
    { "atlas", "an atlas loaded from a file with a label file beside it (mricron .nii.txt, .lut, BIDS dseg.tsv): "
      "names ROIs in predict's ROI scores", NF_PT_VOLUME, NF_PORT_OPTIONAL },
    { "*", "any named results to show, e.g. {t: perm.stat, null: perm.null_max, fit: ridge1.score}", NF_PT_ANY,
      NF_PORT_VARIADIC | NF_PORT_OPTIONAL },
    NF_PORT_END,
};
static const struct nf_port report_outputs[] = {
    { "files", "the page written: columns key and path (relative to settings.outputs)", NF_PT_TABLE, 0 },
    NF_PORT_END,
};
NF_PORTS_MATCH(report_inputs, REPORT_N_IN);
NF_PORTS_MATCH(report_outputs, REPORT_N_OUT);

/* The underlay file the node reads itself (owned: relative to the pipeline
 * file's folder), or NULL: `template: none`, or no template installed. */
static char *underlay_path(const struct report_params *p, const struct nf_env *env)
{
    if (p->underlay && strcmp(p->underlay, "none") == 0)
        return NULL;
    if (p->underlay)
        return env && env->pipeline_dir ? nf_path_join(env->pipeline_dir, p->underlay) : nf_strdup(p->underlay);
    struct stat st;
    return stat(DEFAULT_UNDERLAY, &st) == 0 ? nf_strdup(DEFAULT_UNDERLAY) : NULL;
}

static int report_key_files(const void *params, const struct nf_env *env, char ***paths, size_t *n,
                            struct nf_error *err)
{
    char *u = underlay_path(params, env);
    *paths = NULL;
    *n = 0;
    if (!u)
        return 0;
    if (!(*paths = nf_calloc(2, sizeof **paths))) {
        free(u);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    (*paths)[0] = u;
    *n = 1;
    return 0;
}

/* The region names of an atlas read from `path`: the label file beside it
 * (io.h nf_label_names_sidecar); names->n == 0 when there is none or the
 * atlas was not read from a file. A malformed label file is an error. */
static int atlas_names(const char *path, struct nf_label_names *names, struct nf_error *err)
{
    char *found = NULL;
    int rc = 0;
    memset(names, 0, sizeof *names);
    if (path)
        NF_TRY(rc = nf_label_names_sidecar(path, &found, err));
    if (found)
        rc = nf_label_names_read(found, names, err);
fail:
    free(found);
    return rc;
}

/* A `sources` entry "key=type.port": the length of its key, the node type
 * and the index of its output; false when it is not of that form or names no
 * node type or output. */
static bool source_entry(const char *entry, size_t *key_len, const struct nf_node_type **type, int *port)
{
    const char *eq = strchr(entry, '='), *dot = eq ? strchr(eq + 1, '.') : NULL;
    char name[64];
    if (!eq || eq == entry || !dot || dot == eq + 1 || (size_t)(dot - eq - 1) >= sizeof name)
        return false;
    snprintf(name, sizeof name, "%.*s", (int)(dot - eq - 1), eq + 1);
    *key_len = (size_t)(eq - entry);
    *type = nf_node_type_find(name);
    *port = *type ? nf_port_index((*type)->outputs, dot + 1) : -1;
    return *port >= 0;
}

/* Two reports must not write the same page (a cached rerun would leave the
 * one it did not run again): an error at the later one in run order. */
static int check_page_apart(const struct report_params *p, const struct nf_env *env,
                            const struct nf_node_inst *node, struct nf_error *err)
{
    const char *pipeline = env && env->pipeline_name ? env->pipeline_name : "nlflow";
    char mine[160], other[160];
    nf_output_name_part(p->name ? p->name : pipeline, mine, sizeof mine);
    struct nf_node_info info;
    for (size_t i = 0; nf_pipeline_node(env, i, &info); i++) {
        if (info.params == p)
            return 0;
        if (info.type != &nf_node_report)
            continue;
        const struct report_params *q = info.params;
        nf_output_name_part(q->name ? q->name : pipeline, other, sizeof other);
        if (strcmp(mine, other) == 0)
            return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                              "this report and '%s' would both write %s_report.html: give one of them its own "
                              "`name:`", info.id, mine);
    }
    return 0;
}

static int report_resolve(struct nf_resolve *r)
{
    for (size_t i = 0; i < r->n_extra; i++)
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->extra_names[i], r->extra_names[j]) == 0)
                return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                                  "input '%s' is named twice", r->extra_names[i]);
    const struct report_params *p = r->params;
    bool p_key_found = !p->p_key;
    for (size_t i = 0; i < r->n_extra && !p_key_found; i++)
        p_key_found = strcmp(r->extra_names[i], p->p_key) == 0;
    if (!p_key_found)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                          "p_key '%s' names no input of this node (it selects the voxels of statistic maps "
                          "by a p map given as another input)", p->p_key);
    if (p->underlay && strcmp(p->underlay, "none") != 0) {
        char *path = underlay_path(p, r->env);
        struct nf_nifti_info info;
        struct nf_error e = { 0 };
        int rc = path ? nf_nifti_read_info(path, &info, &e) : NF_FAIL(&e, NF_ENOMEM, "out of memory");
        free(path);
        if (rc < 0)
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "template '%s': %s", p->underlay, e.msg);
    }
    if (r->in && r->in[REPORT_IN_ATLAS].path) {   /* a bad label file fails `nlflow validate` */
        struct nf_label_names names;
        struct nf_error e = { 0 };
        int rc = atlas_names(r->in[REPORT_IN_ATLAS].path, &names, &e);
        nf_label_names_release(&names);
        if (rc < 0)
            return NF_FAIL_AT(r->err, rc, nf_node_loc(r->node), nf_node_id(r->node), "atlas: %s", e.msg);
    }
    for (size_t i = 0; i < p->sources.n; i++) {
        const char *entry = p->sources.v[i];
        const struct nf_node_type *type;
        size_t key_len;
        int port;
        bool wired = false;
        if (!source_entry(entry, &key_len, &type, &port))
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "sources entry '%s' must be key=type.port: an input of this node, a node type "
                              "and one of its outputs (e.g. null_max=permute.null_max)", entry);
        for (size_t k = 0; k < r->n_extra && !wired; k++)
            wired = strlen(r->extra_names[k]) == key_len && strncmp(r->extra_names[k], entry, key_len) == 0;
        if (!wired)
            return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                              "sources entry '%s': this node has no input '%.*s'", entry, (int)key_len, entry);
        for (size_t j = 0; j < i; j++)
            if (strncmp(p->sources.v[j], entry, key_len + 1) == 0)
                return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(r->node), nf_node_id(r->node),
                                  "sources names input '%.*s' twice", (int)key_len, entry);
    }
    r->out[REPORT_OUT_FILES] = (struct nf_shape){ .kind = NF_KIND_TABLE, .dim = { 1, 2 } };
    return check_page_apart(r->params, r->env, r->node, r->err);   /* last: a node's own mistakes first */
}

/* Where input `key` was made: its `sources` entry (node_type and port filled,
 * no node id or parameters), else the node wired to it. A rebuilt page
 * (rebuilt_from) is wired to load nodes that read the files, which say
 * nothing of where the data came from: there only `sources` counts. */
static bool input_origin(const struct report_params *p, const struct nf_run *run, const char *key,
                         struct nf_input_source *src)
{
    for (size_t i = 0; i < p->sources.n; i++) {
        const struct nf_node_type *type;
        size_t key_len;
        int port;
        if (source_entry(p->sources.v[i], &key_len, &type, &port) && strlen(key) == key_len &&
            strncmp(p->sources.v[i], key, key_len) == 0) {
            *src = (struct nf_input_source){ .node_type = type->name, .port = type->outputs[port].name,
                                             .type = type };
            return true;
        }
    }
    return !p->rebuilt_from && nf_node_input_source(run->node, run->env, key, src);
}

/* The underlay at most ~1.5 million voxels: a template at 1 mm (7 million)
 * is averaged over 2x2x2 blocks. Every picture is drawn on the underlay's
 * grid, so its size sets the report's time (percentiles, sampling, PNGs),
 * and maps are rarely finer than 2 mm. Owned; NULL on out of memory. */
static struct nf_value *underlay_for_display(const struct nf_value *u, struct nf_error *err)
{
    const struct nf_grid *g = &u->u.vol.grid;
    int64_t nvox = nf_grid_nvox(g), f = 1;
    while (nvox / (f * f * f) > 1500000)
        f++;
    if (f == 1)
        return nf_value_ref((struct nf_value *)u);
    struct nf_grid d = *g;
    for (int a = 0; a < 3; a++) {
        d.dim[a] = (g->dim[a] + f - 1) / f;
        d.pixdim[a] = g->pixdim[a] * (double)f;
    }
    /* voxel i of the new grid is the block [f i, f i + f) of the old: its centre */
    for (int r = 0; r < 3; r++) {
        for (int c = 0; c < 3; c++) {
            d.affine[r][3] += g->affine[r][c] * (double)(f - 1) / 2;
            d.affine[r][c] = g->affine[r][c] * (double)f;
        }
    }
    struct nf_value *out = nf_value_new_volume(&d, 3, 1, err);
    if (!out)
        return NULL;
    const float *src = u->u.vol.data;
    for (int64_t z = 0; z < d.dim[2]; z++)
        for (int64_t y = 0; y < d.dim[1]; y++)
            for (int64_t x = 0; x < d.dim[0]; x++) {
                double sum = 0;
                int64_t n = 0;
                for (int64_t k = z * f; k < z * f + f && k < g->dim[2]; k++)
                    for (int64_t j = y * f; j < y * f + f && j < g->dim[1]; j++)
                        for (int64_t i = x * f; i < x * f + f && i < g->dim[0]; i++) {
                            float v = src[(k * g->dim[1] + j) * g->dim[0] + i];
                            if (isfinite(v)) {
                                sum += v;
                                n++;
                            }
                        }
                out->u.vol.data[(z * d.dim[1] + y) * d.dim[0] + x] = n ? (float)(sum / (double)n) : NAN;
            }
    return out;
}

static int input_section(struct report_ctx *c, const char *key, const struct nf_value *v)
{
    char heading[160], anchor[160];
    snprintf(heading, sizeof heading, "%s", key);
    snprintf(anchor, sizeof anchor, "in-%s", key);
    report_page_section(&c->pg, heading, anchor);
    struct nf_input_source src;
    bool known = input_origin(c->p, c->run, key, &src);
    if (known) {
        char from[400];
        const char *desc = v->stat.description;
        if (src.node_id)
            snprintf(from, sizeof from, "From node '%s' (%s), output '%s'%s%s.", src.node_id, src.node_type,
                     src.port, desc ? ": " : "", desc ? desc : "");
        else
            snprintf(from, sizeof from, "From a %s node, output '%s'%s%s.", src.node_type, src.port,
                     desc ? ": " : "", desc ? desc : "");
        report_page_paragraph(&c->pg, from);
    }
    if (v->kind == NF_KIND_COLLECTION && v->u.coll.n == 1 && v->u.coll.items[0])
        v = v->u.coll.items[0];   /* one subject: shown in full */
    bool handled = false;
    int rc = known ? report_node_section(c, key, v, &src, &handled) : 0;
    if (rc < 0 || handled)
        return rc;
    bool is_map = (v->kind == NF_KIND_MATRIX && v->u.mat.geom && v->u.mat.rows == 1) ||
                  (v->kind == NF_KIND_VOLUME && v->u.vol.nt == 1);
    if (is_map)
        return report_map_section(c, key, v);
    if (v->kind == NF_KIND_MATRIX && (v->u.mat.rows == 1 || v->u.mat.cols == 1))
        return report_values_section(c, key, &v->u.mat);
    if (v->kind == NF_KIND_TABLE)
        return report_table_section(c, &v->u.tab);
    if (v->kind == NF_KIND_COLLECTION)
        return report_collection_section(c, key, v);
    char text[200];
    snprintf(text, sizeof text, "A %s (not drawn: the report shows maps, columns of numbers, tables and "
             "collections of maps).", nf_kind_name(v->kind));
    report_page_paragraph(&c->pg, text);
    return 0;
}

/* The methods paragraph: each node's own sentences (node_type.methods) in
 * the order the nodes ran, then the software. */
static int methods_section(struct report_ctx *c)
{
    const struct nf_env *env = c->run->env;
    size_t n = nf_pipeline_size(env);
    if (n == 0 || c->p->rebuilt_from)   /* a rebuilt page's pipeline only read files back */
        return 0;
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (size_t i = 0; i < n; i++) {
        struct nf_node_info info;
        if (!nf_pipeline_node(env, i, &info) || (info.type->flags & NF_NODE_SINK && !info.type->methods))
            continue;
        char *text = info.type->methods ? info.type->methods(info.params) : NULL;
        if (info.type->methods && !text) {
            nf_strbuf_release(&sb);
            return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
        }
        if (text)
            nf_strbuf_addf(&sb, "%s%s", sb.len ? " " : "", text);
        else
            nf_strbuf_addf(&sb, "%sNode '%s' (%s): %s.", sb.len ? " " : "", info.id, info.type->name,
                           info.type->summary);
        free(text);
    }
    const char *file = env->pipeline_file ? env->pipeline_file : "", *base = strrchr(file, '/');
    nf_strbuf_addf(&sb, "%sThe analysis was run with nlflow %s (commit %s) from the pipeline file %s (hash %s).",
                   sb.len ? " " : "", NF_VERSION, NF_GIT_COMMIT, base ? base + 1 : file,
                   env->pipeline_hash ? env->pipeline_hash : "");
    struct nf_used_file_info used;
    for (size_t u = 0; nf_pipeline_used_file(env, u, &used); u++) {
        const char *ub = strrchr(used.path, '/');
        nf_strbuf_addf(&sb, " Node '%s' used the pipeline file %s (hash %s%s%s).", used.used_by,
                       ub ? ub + 1 : used.path, used.hash, used.commit ? ", commit " : "",
                       used.commit ? used.commit : "");
    }
    char *text = nf_strbuf_detach(&sb);
    if (!text)
        return NF_FAIL(c->run->err, NF_ENOMEM, "out of memory");
    report_page_section(&c->pg, "Methods", "methods");
    report_page_paragraph(&c->pg, text);
    free(text);
    return 0;
}

static void header(struct report_ctx *c)
{
    const struct nf_env *env = c->run->env;
    char date[64] = "";
    const struct nf_switches *sw = nf_switches();
    time_t now = sw->source_date_set ? (time_t)sw->source_date : time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", &tm);
    char version[96];
    snprintf(version, sizeof version, "%s (commit %s)", NF_VERSION, NF_GIT_COMMIT);
    /* where and how: on one line with the date, the only line two runs of
     * the same pipeline may differ in; left out under SOURCE_DATE_EPOCH,
     * whose promise is the same bytes from the same inputs */
    char cpu[128] = "", made[512];
    nf_cpu_model(cpu, sizeof cpu);
    size_t len = (size_t)snprintf(made, sizeof made, "%s", date);
    if (sw->source_date_set)
        snprintf(made + len, sizeof made - len, " (SOURCE_DATE_EPOCH; machine and run time not recorded)");
    else
        len += (size_t)snprintf(made + len, sizeof made - len, " on %s (%d CPUs)", cpu[0] ? cpu : "an unknown CPU",
                                nf_cpu_count());
    if (!sw->source_date_set && !c->p->rebuilt_from && env && env->facts.known && len < sizeof made)
        snprintf(made + len, sizeof made - len, ", %.1f s into the run; %zu of %zu nodes had finished, %zu of "
                 "them from the cache", env->facts.seconds, env->facts.nodes_done, env->facts.nodes,
                 env->facts.nodes_cached);
    if (c->p->rebuilt_from) {   /* this pipeline only read the files: its own file and hash say nothing */
        const char *names[] = { "pipeline", "rebuilt from", "nlflow", "made" };
        const char *values[] = { env && env->pipeline_name ? env->pipeline_name : "", c->p->rebuilt_from, version,
                                 made };
        report_page_facts(&c->pg, names, values, 4);
        return;
    }
    const char *names[] = { "pipeline", "pipeline file", "pipeline hash", "nlflow", "made" };
    /* the file's name, not where it is: results do not depend on the folder */
    const char *file = env && env->pipeline_file ? env->pipeline_file : "";
    const char *base = strrchr(file, '/');
    const char *values[] = { env && env->pipeline_name ? env->pipeline_name : "", base ? base + 1 : file,
                             env && env->pipeline_hash ? env->pipeline_hash : "", version, made };
    report_page_facts(&c->pg, names, values, 5);
    if (env && env->pipeline_file) {
        struct nf_error e = { 0 };
        size_t file_len;
        char *text = nf_read_file(env->pipeline_file, &file_len, &e);
        if (text)
            report_page_details(&c->pg, "the pipeline file", text);
        free(text);
    }
}

static int report_run(struct nf_run *run)
{
    const struct report_params *p = run->params;
    const struct nf_env *env = run->env;
    struct report_ctx c = { .p = p, .run = run };
    struct nf_value *owned_under = NULL, *files = NULL;
    char *html = NULL, *path = NULL, *file = NULL;
    int rc = 0;
    if (!env || !env->outputs_dir)
        return NF_FAIL(run->err, NF_EBUG, "report run without an outputs folder");
    const struct nf_value *under = run->in[REPORT_IN_UNDERLAY];
    struct nf_value *read = NULL;
    char *template = under ? NULL : underlay_path(p, env);
    if (template) {
        read = nf_nifti_read(template, run->err);
        free(template);
        if (!read)
            return nf_error_on_node(run->node, run->err, run->err->code);
        under = read;
    }
    if (under && under->kind == NF_KIND_VOLUME) {
        owned_under = underlay_for_display(under, run->err);
        nf_value_unref(read);
        if (!owned_under)
            return nf_error_on_node(run->node, run->err, run->err->code ? run->err->code : NF_ENOMEM);
        c.underlay = owned_under;
    } else {
        nf_value_unref(read);
    }
    if (run->in[REPORT_IN_ATLAS])
        NF_TRY(rc = atlas_names(run->in[REPORT_IN_ATLAS]->path, &c.names, run->err));
    const char *pipeline = env->pipeline_name ? env->pipeline_name : "nlflow";
    char title[256];
    snprintf(title, sizeof title, "%s", p->title ? p->title : "");
    if (!p->title)
        snprintf(title, sizeof title, "%s report", pipeline);
    report_page_begin(&c.pg, title);
    header(&c);
    for (size_t i = 0; i < run->n_extra; i++)
        if (run->extra_in[i])
            NF_TRY(rc = input_section(&c, run->extra_names[i], run->extra_in[i]));
    NF_TRY(rc = methods_section(&c));
    size_t len = 0;
    html = report_page_end(&c.pg, &len);
    if (!html) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory building the report");
        goto fail;
    }
    char stem[160];
    nf_output_name_part(p->name ? p->name : pipeline, stem, sizeof stem);   /* never a path elsewhere */
    NF_TRY(rc = check_page_apart(p, env, run->node, run->err));   /* a node resolved only now, too */
    file = nf_asprintf("%s_report.html", stem);
    path = file ? nf_path_join(env->outputs_dir, file) : NULL;
    if (!path) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(env->outputs_dir, run->err));
    NF_TRY(rc = nf_write_file_atomic(path, html, len, run->err));
    if (!(files = nf_value_new_table(1, 2, run->err)) ||
        nf_table_column_string(files, 0, "key", run->err) < 0 ||
        nf_table_column_string(files, 1, "path", run->err) < 0) {
        rc = run->err->code ? run->err->code : NF_ENOMEM;
        goto fail;
    }
    files->u.tab.cols[0].str[0] = nf_strdup("report");
    files->u.tab.cols[1].str[0] = nf_strdup(file);
    if (!files->u.tab.cols[0].str[0] || !files->u.tab.cols[1].str[0]) {
        rc = NF_FAIL(run->err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    run->out[REPORT_OUT_FILES] = files;
    files = NULL;
    nf_log("nlflow: node '%s': wrote %s (%.1f MB)", nf_node_id(run->node), path, (double)len / 1e6);
fail:
    if (c.have_link)
        nf_scene_release(&c.link_scene);
    nf_label_names_release(&c.names);
    report_page_release(&c.pg);
    nf_value_unref(owned_under);
    nf_value_unref(files);
    free(html);
    free(path);
    free(file);
    return rc < 0 ? nf_error_on_node(run->node, run->err, rc) : 0;
}

const struct nf_node_type nf_node_report = {
    .name = "report",
    .summary = "one self-contained HTML page of the results: maps as slices, mosaics and glass brains, charts, tables",
    .description =
        "Writes <name>_report.html under settings.outputs: one file, every image inline (PNG data: URIs, "
        "SVG charts), no external script, font or style, so it opens offline and can be mailed. Each named "
        "input is shown by what it is: a map (1xV with voxel geometry, or a 3-D volume) as sagittal, coronal "
        "and axial slices through its peak, an axial mosaic and three glass-brain projections over an "
        "underlay, thresholded at `threshold`, with a colour bar (RdBu_r for signed maps, viridis for "
        "positive ones); a column of numbers (e.g. a permutation test's null_max) as a histogram with its "
        "95th percentile marked; a table as a table; a collection of maps as one glass-brain thumbnail per "
        "item. The header names the pipeline, its hash, nlflow's version and holds the pipeline file. The "
        "same inputs give the same bytes except the date line.",
    .version = 1,
    .params = report_param_table,
    .params_size = sizeof(struct report_params),
    .inputs = report_inputs,
    .outputs = report_outputs,
    .resolve = report_resolve,
    .run_cpu = report_run,
    .key_files = report_key_files,
    .flags = NF_NODE_SINK | NF_NODE_NO_MAP,
};
