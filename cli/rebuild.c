/* rebuild.c — `nlflow report RESULTS_DIR`: the HTML page of a run made
 * before, from its outputs folder alone.
 *
 * summarize leaves summary.json in the outputs folder: each input's key,
 * kind, shape, files (maps as NIfTI with a JSON sidecar whose "Source" names
 * the node type and port that made them; tables and columns of numbers as
 * TSV) and, from summarize version 3 on, its "source" (for tables too), and
 * the thresholding's cluster table. JSON is YAML, so the
 * pipeline language's tree reader parses it with line numbers for messages.
 * From it this file writes an ordinary pipeline — one `load` node per input,
 * one `report` node wired to them under the original keys, told where each
 * input was made (`sources`) and what it was rebuilt from (`rebuilt_from`) —
 * into a scratch folder, and cli.c runs it through the normal phases without a
 * cache. Going through the engine keeps the page identical in kind to one a
 * run writes; the scratch folder holds what `load` cannot take as listed: a
 * column of numbers (TSV) converted to .npy so that it is a matrix again, and
 * a collection's files linked into a folder of their own for one glob. The
 * page is written in the scratch folder and copied into place only when the
 * run succeeded, so a failure leaves no partial page.
 */
#include "rebuild.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/util.h"
#include "core/value.h"
#include "io/io.h"
#include "lang/ytree.h"
#include "node.h"

/* One input of the page: its key, the file or glob its load node reads, and
 * where it was made ("type.port", or NULL when no sidecar says). */
struct page_input {
    char *key, *path, *source;
};

struct page_inputs {
    struct page_input *v;
    size_t n;
};

static void page_inputs_release(struct page_inputs *in)
{
    for (size_t i = 0; i < in->n; i++) {
        free(in->v[i].key);
        free(in->v[i].path);
        free(in->v[i].source);
    }
    free(in->v);
}

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Why path is not a regular file, for a message. */
static const char *not_a_file(const char *path)
{
    struct stat st;
    return stat(path, &st) != 0 ? "is missing" : S_ISDIR(st.st_mode) ? "is a folder" : "is not a regular file";
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The summary file: --summary (as given, else inside the folder), else the
 * folder's summary.json, else its one *_summary.json. Owned. */
static char *find_summary(const char *dir, const char *given, struct nf_error *err)
{
    if (given) {
        if (is_file(given))
            return nf_strdup(given);
        char *inside = nf_path_join(dir, given);
        if (inside && is_file(inside))
            return inside;
        free(inside);
        NF_FAIL(err, NF_EIO, "no summary file '%s' (nor in '%s')", given, dir);
        return NULL;
    }
    char *plain = nf_path_join(dir, "summary.json");
    if (!plain || is_file(plain))
        return plain;
    free(plain);
    DIR *d = opendir(dir);
    char **found = NULL, *path = NULL;
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (nf_path_has_suffix(e->d_name, "_summary.json")) {
            char **grown = nf_realloc(found, (n + 1) * sizeof *found);
            if (!grown || !(grown[n] = nf_strdup(e->d_name))) {
                found = grown ? grown : found;
                NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto done;
            }
            found = grown;
            n++;
        }
    if (n == 1) {
        path = nf_path_join(dir, found[0]);
    } else if (n == 0) {
        NF_FAIL(err, NF_EIO, "no summary.json in '%s': is it the outputs folder of a run with a summarize node?",
                dir);
    } else {
        struct nf_strbuf names;
        nf_strbuf_init(&names);
        qsort(found, n, sizeof *found, compare_strings);
        for (size_t i = 0; i < n; i++)
            nf_strbuf_addf(&names, "%s%s", i ? ", " : "", found[i]);
        NF_FAIL(err, NF_EUSAGE, "'%s' holds %zu summaries (%s): choose one with --summary FILE", dir, n,
                names.buf ? names.buf : "");
        nf_strbuf_release(&names);
    }
done:
    for (size_t i = 0; i < n; i++)
        free(found[i]);
    free(found);
    if (d)
        closedir(d);
    return path;
}

static struct nf_ynode *read_json(const char *path, struct nf_error *err)
{
    size_t len;
    char *text = nf_read_file(path, &len, err);
    if (!text)
        return NULL;
    struct nf_ynode *root = nf_yaml_parse(text, len, nf_intern(path), err);
    free(text);
    /* the reader speaks of YAML; this file is JSON (a subset) */
    static const char yaml[] = "invalid YAML: ";
    if (!root && strncmp(err->msg, yaml, sizeof yaml - 1) == 0)
        memcpy(err->msg, "invalid JSON: ", sizeof yaml - 1);
    return root;
}

/* The string value of `key` in map n (a quoted scalar), else NULL. */
static const char *json_str(const struct nf_ynode *n, const char *key)
{
    const struct nf_ynode *v = n && n->type == NF_Y_MAP ? nf_ymap_get(n, key) : NULL;
    return v && v->type == NF_Y_SCALAR && v->quoted ? v->value : NULL;
}

/* *out = "type.port" from a Source object ({"Node", "NodeType", "Port"}, as
 * summarize writes into map sidecars and summary.json) when it names a node
 * type of this nlflow and one of its outputs, else NULL. */
static int origin_of(const struct nf_ynode *src, char **out, struct nf_error *err)
{
    const char *type = json_str(src, "NodeType"), *port = json_str(src, "Port");
    const struct nf_node_type *t = type ? nf_node_type_find(type) : NULL;
    *out = NULL;
    if (t && port && nf_port_index(t->outputs, port) >= 0 && !(*out = nf_asprintf("%s.%s", type, port)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    return 0;
}

/* The origin a map's sidecar names. A sidecar is provenance, not data: one
 * that cannot be read only loses the origin, with a warning; running out of
 * memory is an error. */
static int sidecar_source(const char *path, char **out, struct nf_error *err)
{
    struct nf_error e = { 0 };
    struct nf_ynode *root = read_json(path, &e);
    *out = NULL;
    if (!root && e.code == NF_ENOMEM)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (!root) {
        char msg[1200];
        nf_error_format(&e, msg, sizeof msg);
        nf_warn(NULL, "%s (the page will not say where this map was made)", msg);
        return 0;
    }
    int rc = origin_of(root->type == NF_Y_MAP ? nf_ymap_get(root, "Source") : NULL, out, err);
    nf_ynode_free(root);
    return rc;
}

enum data_format { DATA_NONE, DATA_NIFTI_GZ, DATA_NIFTI, DATA_TSV };

static enum data_format data_format(const char *name)
{
    return nf_path_has_suffix(name, ".nii.gz") ? DATA_NIFTI_GZ
           : nf_path_has_suffix(name, ".nii") ? DATA_NIFTI
           : nf_path_has_suffix(name, ".tsv") ? DATA_TSV : DATA_NONE;
}

static const char *const format_glob[] = { "", "*.nii.gz", "*.nii", "*.tsv" };

/* A file listed in the summary must be a plain name in the folder (a
 * summary is data: it does not get to point anywhere else) and be there. */
static int listed_file(const struct nf_rebuild *rb, const char *summary, const struct nf_ynode *f, const char *key,
                       char **path, struct nf_error *err)
{
    *path = NULL;
    if (f->type != NF_Y_SCALAR || !f->quoted || !f->value[0] || strchr(f->value, '/') ||
        strcmp(f->value, ".") == 0 || strcmp(f->value, "..") == 0) {
        char what[160];
        nf_ynode_describe(f, what, sizeof what);
        return NF_FAIL_AT(err, NF_EDATA, &f->loc, NULL, "input '%s': %s is not the name of a file in the folder",
                          key, what);
    }
    if (!(*path = nf_path_join(rb->results, f->value)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    struct stat st;
    if (lstat(*path, &st) == 0 && S_ISLNK(st.st_mode)) {   /* a link could read anything, anywhere */
        NF_FAIL(err, NF_EIO, "%s lists '%s' (input '%s'), a symbolic link: nlflow report reads only files that "
                "are in the folder", summary, f->value, key);
        free(*path);
        *path = NULL;
        return NF_EIO;
    }
    if (!is_file(*path)) {
        NF_FAIL(err, NF_EIO, "%s lists '%s' (input '%s'), but '%s' %s", summary, f->value, key, *path,
                not_a_file(*path));
        free(*path);
        *path = NULL;
        return NF_EIO;
    }
    return 0;
}

/* A column of numbers (or any matrix summarize wrote as TSV) as .npy, so that
 * `load` gives the matrix back instead of a table. */
static char *tsv_as_npy(const struct nf_rebuild *rb, size_t index, const char *tsv, const char *key,
                        struct nf_error *err)
{
    struct nf_value *tab = nf_table_read(tsv, NULL, 0, err), *m = NULL;
    char *npy = nf_asprintf("%s/input-%zu.npy", rb->tmpdir, index);
    if (!npy)
        NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (tab && npy && (m = nf_table_to_matrix(tab, err)) && nf_npy_write(npy, &m->u.mat, err) == 0) {
        nf_value_unref(tab);
        nf_value_unref(m);
        return npy;
    }
    nf_error_prefix(err, "input '%s': ", key);
    nf_value_unref(tab);
    nf_value_unref(m);
    free(npy);
    return NULL;
}

/* A collection's files as one glob: links to them in a folder of their own
 * (the names keep the items' labels, sub-01_...). */
static char *collection_glob(const struct nf_rebuild *rb, size_t index, char *const *paths, size_t n,
                             enum data_format fmt, struct nf_error *err)
{
    char *dir = nf_asprintf("%s/input-%zu", rb->tmpdir, index);
    if (!dir || mkdir(dir, 0700) != 0) {
        if (dir)
            NF_FAIL(err, NF_EIO, "cannot create '%s': %s", dir, strerror(errno));
        else
            NF_FAIL(err, NF_ENOMEM, "out of memory");
        free(dir);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        const char *base = strrchr(paths[i], '/');
        char *link = nf_path_join(dir, base ? base + 1 : paths[i]);
        int rc = link ? symlink(paths[i], link) : -1;
        if (rc != 0) {
            if (link)
                NF_FAIL(err, NF_EIO, "cannot link '%s': %s", link, strerror(errno));
            else
                NF_FAIL(err, NF_ENOMEM, "out of memory");
            free(link);
            free(dir);
            return NULL;
        }
        free(link);
    }
    char *pattern = nf_path_join(dir, format_glob[fmt]);
    if (!pattern)
        NF_FAIL(err, NF_ENOMEM, "out of memory");
    free(dir);
    return pattern;
}

static int add_input(struct page_inputs *in, char *key, char *path, char *source, struct nf_error *err)
{
    struct page_input *grown = nf_realloc(in->v, (in->n + 1) * sizeof *grown);
    if (!grown || !key || !path) {
        if (grown)
            in->v = grown;
        free(key);
        free(path);
        free(source);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    in->v = grown;
    in->v[in->n++] = (struct page_input){ key, path, source };
    return 0;
}

static bool key_taken(const struct page_inputs *in, const char *key)
{
    for (size_t i = 0; i < in->n; i++)
        if (strcmp(in->v[i].key, key) == 0)
            return true;
    return false;
}

/* One entry of the summary's "inputs": its data file(s) as something `load`
 * reads, and its origin: the entry's "source", else the first sidecar that
 * names one. */
static int summary_input(const struct nf_rebuild *rb, const char *summary, const struct nf_ynode *item,
                         struct page_inputs *in, struct nf_error *err)
{
    const char *key = json_str(item, "key"), *kind = json_str(item, "kind");
    const struct nf_ynode *files = item->type == NF_Y_MAP ? nf_ymap_get(item, "files") : NULL;
    char **data = NULL, *source = NULL, *path = NULL;
    size_t n_data = 0;
    enum data_format fmt = DATA_NONE;
    int rc = 0;
    if (!key || !key[0])
        return NF_FAIL_AT(err, NF_EDATA, &item->loc, NULL, "an input without a \"key\" (a string)");
    if (key_taken(in, key))
        return NF_FAIL_AT(err, NF_EDATA, &item->loc, NULL, "input '%s' is listed twice", key);
    if (strcmp(key, "underlay") == 0)
        return NF_FAIL_AT(err, NF_EDATA, &item->loc, NULL, "input 'underlay' cannot be shown: the report node "
                          "takes 'underlay' as the anatomical image under its maps");
    if (!files || files->type != NF_Y_SEQ)
        return NF_FAIL_AT(err, NF_EDATA, &item->loc, NULL, "input '%s' has no \"files\" list", key);
    if (!(data = nf_calloc(files->n + 1, sizeof *data)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    /* the origin: summary.json names it (since summarize version 3), else a sidecar */
    NF_TRY(rc = origin_of(nf_ymap_get(item, "source"), &source, err));
    for (size_t f = 0; f < files->n; f++) {
        char *file;
        NF_TRY(rc = listed_file(rb, summary, files->items[f], key, &file, err));
        enum data_format ff = data_format(file);
        if (nf_path_has_suffix(file, ".json")) {
            rc = source ? 0 : sidecar_source(file, &source, err);
            free(file);
            if (rc < 0)
                goto fail;
            continue;
        }
        if (ff == DATA_NONE) {   /* nothing `load` reads: not part of the page */
            free(file);
            continue;
        }
        if (n_data > 0 && ff != fmt) {
            rc = NF_FAIL_AT(err, NF_EDATA, &files->items[f]->loc, NULL, "input '%s' lists files of different "
                            "kinds ('%s' and '%s')", key, data[0], file);
            free(file);
            goto fail;
        }
        /* headers now, so that a damaged file is named here rather than by
         * the generated pipeline's load node */
        struct nf_nifti_info info;
        int64_t rows, cols;
        struct nf_error e = { 0 };
        if ((ff == DATA_TSV ? nf_table_read_info(file, NULL, 0, &rows, &cols, &e)
                            : nf_nifti_read_info(file, &info, &e)) < 0) {
            rc = NF_FAIL_AT(err, NF_EDATA, &files->items[f]->loc, NULL, "input '%s': %s", key, e.msg);
            free(file);
            goto fail;
        }
        fmt = ff;
        data[n_data++] = file;
    }
    if (n_data == 0) {
        nf_warn(NULL, "%s: input '%s' lists no map or table file; the page leaves it out", summary, key);
        goto done;
    }
    bool collection = (kind && strcmp(kind, "collection") == 0) || n_data > 1;
    if (collection)
        path = collection_glob(rb, in->n, data, n_data, fmt, err);
    else if (fmt == DATA_TSV && kind && strcmp(kind, "matrix") == 0)
        path = tsv_as_npy(rb, in->n, data[0], key, err);
    else
        path = nf_strdup(data[0]);
    if (!path) {
        rc = err->code ? err->code : NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    rc = add_input(in, nf_strdup(key), path, source, err);
    source = NULL;
done:
fail:
    for (size_t i = 0; i < n_data; i++)
        free(data[i]);
    free(data);
    free(source);
    return rc;
}

/* The thresholding's cluster table, under "clusters" (or a key not taken). */
static int cluster_input(const struct nf_rebuild *rb, const char *summary, const struct nf_ynode *th,
                         struct page_inputs *in, struct nf_error *err)
{
    const struct nf_ynode *files = th->type == NF_Y_MAP ? nf_ymap_get(th, "files") : NULL;
    for (size_t f = 0; files && files->type == NF_Y_SEQ && f < files->n; f++) {
        const struct nf_ynode *name = files->items[f];
        if (name->type != NF_Y_SCALAR || !nf_path_has_suffix(name->value, "_clusters.tsv"))
            continue;
        char *path;
        int rc = listed_file(rb, summary, name, "thresholding", &path, err);
        if (rc < 0)
            return rc;
        const char *key = key_taken(in, "clusters") ? "thresholding_clusters" : "clusters";
        return add_input(in, nf_strdup(key), path, nf_strdup("summarize.table"), err);
    }
    return 0;
}

/* The page's file name: the pipeline's name as a file name. */
static char *page_name(const char *name)
{
    char *s = nf_asprintf("%s_report.html", name && name[0] ? name : "nlflow");
    for (char *c = s; c && *c; c++)
        if (*c == '/' || (unsigned char)*c < 32)
            *c = '-';
    return s;
}

static void add_param_str(struct nf_strbuf *sb, const char *name, const char *value)
{
    nf_strbuf_addf(sb, "    %s: ", name);
    nf_strbuf_add_json_str(sb, value);   /* a JSON string is a YAML string */
    nf_strbuf_addf(sb, "\n");
}

/* The pipeline: a load node per input, the report node, outputs in the
 * scratch folder, no cache. Absolute paths throughout. */
static char *pipeline_text(const struct nf_rebuild_opts *o, const struct nf_rebuild *rb, const char *name,
                           const char *hash, const struct page_inputs *in, const char *template_abs)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "# written by `nlflow report`\nnlflow: 1\nname: ");
    nf_strbuf_add_json_str(&sb, name);
    nf_strbuf_addf(&sb, "\nsettings:\n  cache: \"off\"\n  outputs: ");
    nf_strbuf_add_json_str(&sb, rb->tmpdir);
    nf_strbuf_addf(&sb, "\nnodes:\n");
    for (size_t i = 0; i < in->n; i++) {
        nf_strbuf_addf(&sb, "  input_%zu:\n    type: load\n", i);
        add_param_str(&sb, "path", in->v[i].path);
    }
    nf_strbuf_addf(&sb, "  page:\n    type: report\n    name: page\n    in:\n");
    for (size_t i = 0; i < in->n; i++) {
        nf_strbuf_addf(&sb, "      ");
        nf_strbuf_add_json_str(&sb, in->v[i].key);
        nf_strbuf_addf(&sb, ": input_%zu\n", i);
    }
    bool any_source = false;
    for (size_t i = 0; i < in->n; i++)
        if (in->v[i].source) {
            nf_strbuf_addf(&sb, "%s      - ", any_source ? "" : "    sources:\n");
            char *entry = nf_asprintf("%s=%s", in->v[i].key, in->v[i].source);
            nf_strbuf_add_json_str(&sb, entry ? entry : "");
            nf_strbuf_addf(&sb, "\n");
            sb.oom |= !entry;
            free(entry);
            any_source = true;
        }
    char *from = nf_asprintf("%s by `nlflow report` (the run of pipeline hash %s)", rb->results,
                             hash ? hash : "unknown: summary.json does not say");
    add_param_str(&sb, "rebuilt_from", from ? from : "");
    sb.oom |= !from;
    free(from);
    if (o->title)
        add_param_str(&sb, "title", o->title);
    if (o->threshold)
        nf_strbuf_addf(&sb, "    threshold: %s\n", o->threshold);   /* checked to be a number */
    if (template_abs)
        add_param_str(&sb, "template", template_abs);
    if (sb.oom) {
        nf_strbuf_release(&sb);
        return NULL;
    }
    return nf_strbuf_detach(&sb);
}

/* --template as given is relative to the current folder; the pipeline is
 * elsewhere, so it gets an absolute path ("none" stays). Owned. */
static char *template_path(const char *t)
{
    if (!t || strcmp(t, "none") == 0 || t[0] == '/')
        return t ? nf_strdup(t) : NULL;
    char *cwd = nf_realpath(".");
    char *abs = cwd ? nf_path_join(cwd, t) : NULL;
    free(cwd);
    return abs;
}

int nf_rebuild_prepare(const struct nf_rebuild_opts *o, struct nf_rebuild *rb, struct nf_error *err)
{
    struct page_inputs in = { 0 };
    struct nf_ynode *root = NULL;
    char *summary = NULL, *text = NULL, *template_abs = NULL;
    int rc = 0;
    memset(rb, 0, sizeof *rb);
    struct stat st;
    if (stat(o->results, &st) != 0)
        return NF_FAIL(err, NF_EIO, "results folder '%s': %s", o->results, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return NF_FAIL(err, NF_EIO, "'%s' is not a folder (give the outputs folder of a run)", o->results);
    if (!(rb->results = nf_realpath(o->results)))
        return NF_FAIL(err, NF_EIO, "cannot resolve '%s': %s", o->results, strerror(errno));
    if (!(summary = find_summary(o->results, o->summary, err)) || !(root = read_json(summary, err))) {
        rc = err->code ? err->code : NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    const struct nf_ynode *inputs = root->type == NF_Y_MAP ? nf_ymap_get(root, "inputs") : NULL;
    if (!inputs || inputs->type != NF_Y_SEQ) {
        rc = NF_FAIL_AT(err, NF_EDATA, &root->loc, NULL, "not a summary: no \"inputs\" list (summarize writes "
                        "one in summary.json)");
        goto fail;
    }
    const char *tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
    if (!(rb->tmpdir = nf_asprintf("%s/nlflow-rebuild-XXXXXX", tmp))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (!mkdtemp(rb->tmpdir)) {
        rc = NF_FAIL(err, NF_EIO, "cannot create a scratch folder in '%s': %s", tmp, strerror(errno));
        free(rb->tmpdir);
        rb->tmpdir = NULL;
        goto fail;
    }
    for (size_t i = 0; i < inputs->n; i++)
        NF_TRY(rc = summary_input(rb, summary, inputs->items[i], &in, err));
    const struct nf_ynode *th = nf_ymap_get(root, "thresholding");
    if (th)
        NF_TRY(rc = cluster_input(rb, summary, th, &in, err));
    if (in.n == 0) {
        rc = NF_FAIL(err, NF_EDATA, "nothing to show: %s lists no input with a map or table file", summary);
        goto fail;
    }
    const char *name = json_str(root, "Name");
    char *page = page_name(name);
    rb->target = o->output ? nf_strdup(o->output) : page ? nf_path_join(rb->results, page) : NULL;
    free(page);
    rb->pipeline = nf_path_join(rb->tmpdir, "report.yaml");
    rb->page = nf_path_join(rb->tmpdir, "page_report.html");
    template_abs = template_path(o->template_path);
    text = pipeline_text(o, rb, name ? name : "nlflow", json_str(root, "PipelineHash"), &in, template_abs);
    if (!rb->target || !rb->pipeline || !rb->page || !text || (o->template_path && !template_abs)) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (template_abs && strcmp(template_abs, "none") != 0 && !is_file(template_abs)) {
        rc = NF_FAIL(err, NF_EUSAGE, "--template '%s': '%s' %s", o->template_path, template_abs,
                     not_a_file(template_abs));
        goto fail;
    }
    rc = nf_write_file_atomic(rb->pipeline, text, strlen(text), err);
fail:
    page_inputs_release(&in);
    nf_ynode_free(root);
    free(summary);
    free(text);
    free(template_abs);
    return rc;
}

int nf_rebuild_finish(const struct nf_rebuild *rb, struct nf_error *err)
{
    size_t len;
    char *html = nf_read_file(rb->page, &len, err);
    if (!html)
        return err->code;
    char *dir = nf_path_dirname(rb->target);
    int rc = dir ? nf_mkdirs(dir, err) : NF_FAIL(err, NF_ENOMEM, "out of memory");
    free(dir);
    bool replacing = rc == 0 && access(rb->target, F_OK) == 0;
    if (rc == 0)
        rc = nf_write_file_atomic(rb->target, html, len, err);
    if (rc == 0)
        nf_log("nlflow: %s %s (%.1f MB), rebuilt from %s", replacing ? "replaced" : "wrote", rb->target,
               (double)len / 1e6, rb->results);
    free(html);
    return rc;
}


void nf_rebuild_release(struct nf_rebuild *rb)
{
    if (rb->tmpdir)
        nf_remove_tree(rb->tmpdir);
    free(rb->tmpdir);
    free(rb->pipeline);
    free(rb->page);
    free(rb->target);
    free(rb->results);
    memset(rb, 0, sizeof *rb);
}
