/* load.c — the `load` node: every pipeline's data enters through it.
 *
 * `path` names one file, or a glob (* ? [ ]) that names many. The format comes
 * from the extension: NIfTI images (.nii, .nii.gz) become volumes, delimited
 * tables (.tsv, .csv, .txt) become tables, .npy arrays become matrices. One
 * file gives one value, read in full. A glob gives a collection, always, even
 * with one match: its items are sorted by path (strcmp, so the order does not
 * depend on the locale) and labelled with their BIDS subject ("sub-01") or,
 * failing that, their file stem. NIfTI items stay lazy (header only) so that a
 * collection of subjects costs the memory of one subject at a time; tables and
 * arrays are small and are read at once. A single image stays on disk too (a
 * lazy volume) when the plan finds that every consumer reads it itself
 * (engine/plan/shapes.c: mask's data port, and design's frames, which reads
 * the header only), so that mask gathers its voxels while reading and the 4D
 * series is never held whole.
 *
 * At plan time resolve() reads headers only, so that `nlflow validate` and
 * `nlflow plan` report a missing or unreadable file before anything runs.
 */
#include "load.h"

#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/io.h"
#include "core/util.h"

static const char *const lazy_choices[] = { "auto", "true", "false", NULL };

/* Whether a NIfTI collection of `bytes` in total is read lazily. */
static bool collection_is_lazy(const struct load_params *p, uint64_t bytes, uint64_t budget)
{
    if (p->lazy == LOAD_LAZY_AUTO)
        return bytes > budget / 4;
    return p->lazy == LOAD_LAZY_TRUE;
}

#define FIELD(f) offsetof(struct load_params, f)
static const struct nf_param load_params_table[] = {
    NF_PARAM_PATH_F("path", FIELD(path), "", NF_PF_REQUIRED | NF_PF_NOT_KEYED,
                    "file to read: NIfTI (.nii, .nii.gz), table (.tsv, .csv, .txt, header row "
                    "required) or array (.npy); a glob (* ? [ ]) reads every match into a "
                    "collection sorted by path, one item per file"),
    NF_PARAM_STR_LIST_F("columns", FIELD(columns), "", 1, 0, NF_PF_OPTIONAL,
                        "table columns to keep, in this order (tables only; default: every column)"),
    NF_PARAM_ENUM_F("lazy", FIELD(lazy), lazy_choices, LOAD_LAZY_AUTO, NF_PF_NOT_KEYED,
                    "images of a glob collection: true reads each subject only when a node needs it "
                    "(memory holds one subject per worker); false reads all of them at once; auto "
                    "reads lazily when the collection is larger than a quarter of the memory budget"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port load_inputs[] = {
    NF_PORT_END
};

static const struct nf_port load_outputs[] = {
    { "out",
      "the image (volume), table, or array (matrix); a collection of them for a glob",
      NF_PT_VOLUME | NF_PT_MATRIX | NF_PT_TABLE | NF_PT_COLL, 0 },
    NF_PORT_END
};
NF_PORTS_MATCH(load_inputs, LOAD_N_IN);
NF_PORTS_MATCH(load_outputs, LOAD_N_OUT);

#define SUPPORTED_EXTENSIONS ".nii, .nii.gz, .tsv, .csv, .txt, .npy"

/* The io layer reports errors without a pipeline location; re-raise them on
 * the node so that they print as `file:line:col: node 'id': ...`. */
static int fail_on_node(struct nf_error *err, const struct nf_node_inst *node,
                        const struct nf_error *cause)
{
    int code = cause->code < 0 ? cause->code : NF_EBUG;
    return NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node), "%s", cause->msg);
}

static const char *format_noun(enum nf_file_format fmt)
{
    switch (fmt) {
    case NF_FMT_NIFTI: return "a NIfTI image";
    case NF_FMT_TABLE: return "a table";
    case NF_FMT_NPY:   return "a .npy array";
    default:           return "of unknown format";
    }
}

static bool path_has_glob(const char *path)
{
    return strpbrk(path, "*?[") != NULL;
}

/* node_type.methods: what was read, by file name only (the folder is the
 * user's machine, not a method). */
static char *load_methods(const void *params)
{
    const struct load_params *p = params;
    const char *path = p->path ? p->path : "";   /* required: only unset in a bare params struct */
    bool glob_path = path_has_glob(path);
    /* a glob from the folder of its first wildcard on, so that wildcard folders
     * show; else the file name */
    const char *name = path, *end = glob_path ? strpbrk(path, "*?[") : path + strlen(path);
    for (const char *c = path; c < end; c++)
        if (*c == '/')
            name = c + 1;
    const char *what;
    switch (nf_file_format_of(path)) {
    case NF_FMT_NIFTI: what = glob_path ? "NIfTI images" : "A NIfTI image"; break;
    case NF_FMT_TABLE: what = glob_path ? "Tables" : "A table"; break;
    case NF_FMT_NPY:   what = glob_path ? "NumPy arrays" : "A NumPy array"; break;
    default:           what = glob_path ? "Files" : "A file"; break;
    }
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    if (glob_path)
        nf_strbuf_addf(&sb, "%s were read from every file matching %s (one item per file, sorted by path)", what, name);
    else
        nf_strbuf_addf(&sb, "%s was read from %s", what, name);
    if (p->columns.n > 0) {
        nf_strbuf_addf(&sb, ", keeping the column%s", p->columns.n > 1 ? "s" : "");
        for (size_t i = 0; i < p->columns.n; i++)
            nf_strbuf_addf(&sb, "%s %s", i == 0 ? "" : i + 1 < p->columns.n ? "," : " and", p->columns.v[i]);
    }
    nf_strbuf_addf(&sb, ".");
    return nf_strbuf_detach(&sb);
}

static const char *const *selected_columns(const struct load_params *p)
{
    return p->columns.n > 0 ? (const char *const *)p->columns.v : NULL;
}

/* The format of one file, with the errors a user can fix: an unknown
 * extension, `columns` on something that is not a table. */
static int file_format(const char *path, const struct load_params *p,
                       const struct nf_node_inst *node, enum nf_file_format *fmt,
                       struct nf_error *err)
{
    *fmt = nf_file_format_of(path);
    if (*fmt == NF_FMT_UNKNOWN)
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "cannot tell the format of '%s' from its extension "
                          "(supported: " SUPPORTED_EXTENSIONS ")", path);
    if (p->columns.n > 0 && *fmt != NF_FMT_TABLE)
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "'columns' selects table columns, but '%s' is %s",
                          path, format_noun(*fmt));
    return 0;
}

/* Whether the file exists, checked before any reader so that the message is
 * the same for every format. At plan time a missing input is a mistake in the
 * pipeline (exit 2); at run time it vanished in between (an i/o error). */
static int file_must_exist(const char *path, int code, const struct nf_node_inst *node,
                           struct nf_error *err)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node),
                          errno == ENOENT ? "file '%s' does not exist"
                                          : "cannot open '%s': %s",
                          path, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node),
                          "'%s' is a folder, not a file", path);
    if (nf_special_file_kind(st.st_mode))   /* a FIFO would block the reader */
        return NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node),
                          "'%s' is %s, not a regular file", path, nf_special_file_kind(st.st_mode));
    return 0;
}

/* ---- globbing ---- */

static int compare_paths(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Expand `pattern` into a strcmp-sorted list (globfree it). Zero matches is an
 * error: a pipeline that silently analyses no subjects is worse than one that
 * stops. */
static int expand_glob(const char *pattern, const struct nf_node_inst *node,
                       glob_t *matches, struct nf_error *err)
{
    memset(matches, 0, sizeof *matches);
    int rc = glob(pattern, GLOB_NOSORT, NULL, matches);
    if (rc == GLOB_NOMATCH || (rc == 0 && matches->gl_pathc == 0))
        return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "no files match '%s'", pattern);
    if (rc == GLOB_NOSPACE)
        return NF_FAIL_AT(err, NF_ENOMEM, nf_node_loc(node), nf_node_id(node),
                          "out of memory expanding '%s'", pattern);
    if (rc != 0)
        return NF_FAIL_AT(err, NF_EIO, nf_node_loc(node), nf_node_id(node),
                          "cannot read the folders of '%s'", pattern);
    qsort(matches->gl_pathv, matches->gl_pathc, sizeof *matches->gl_pathv, compare_paths);
    return 0;
}

/* The format shared by every match; mixing kinds in one collection would make
 * every downstream node guess, so it is an error naming two culprits. */
static int glob_format(const glob_t *matches, const char *pattern,
                       const struct load_params *p, const struct nf_node_inst *node,
                       enum nf_file_format *fmt, struct nf_error *err)
{
    int rc = file_format(matches->gl_pathv[0], p, node, fmt, err);
    if (rc < 0)
        return rc;
    for (size_t i = 1; i < matches->gl_pathc; i++) {
        enum nf_file_format other;
        rc = file_format(matches->gl_pathv[i], p, node, &other, err);
        if (rc < 0)
            return rc;
        if (other != *fmt)
            return NF_FAIL_AT(err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                              "'%s' matches files of different kinds: '%s' is %s "
                              "but '%s' is %s",
                              pattern, matches->gl_pathv[0], format_noun(*fmt),
                              matches->gl_pathv[i], format_noun(other));
    }
    return 0;
}

/* ---- labels ---- */

static bool labels_unique(char *const *labels, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++)
            if (!labels[i] || !labels[j] || strcmp(labels[i], labels[j]) == 0)
                return false;
    return true;
}

/* Every item's label: its subject; when two files share a subject (several
 * runs or sessions) subjects would not tell items apart, so every item gets
 * its stem. NULL on OOM (entries NULL where a string could not be made). */
static char **item_labels(char *const *paths, size_t n)
{
    char **labels = nf_calloc(n ? n : 1, sizeof *labels);
    if (!labels)
        return NULL;
    for (size_t i = 0; i < n; i++)
        labels[i] = nf_subject_entity(paths[i]);
    if (!labels_unique(labels, n))
        for (size_t i = 0; i < n; i++) {
            free(labels[i]);
            labels[i] = NULL;
        }
    for (size_t i = 0; i < n; i++)
        if (!labels[i])
            labels[i] = nf_path_stem(paths[i]);
    return labels;
}

static void label_items(struct nf_value *coll, char *const *paths)
{
    size_t n = coll->u.coll.n;
    char **labels = item_labels(paths, n);
    for (size_t i = 0; i < n; i++)
        nf_value_set_label(coll->u.coll.items[i], labels && labels[i] ? labels[i] : paths[i]);
    if (labels)
        for (size_t i = 0; i < n; i++)
            free(labels[i]);
    free(labels);
}

/* ---- shapes (plan time) ---- */

static int file_shape(const char *path, enum nf_file_format fmt, const struct load_params *p,
                      const struct nf_node_inst *node, struct nf_shape *s,
                      struct nf_error *err)
{
    struct nf_error cause = { 0 };
    int rc = file_must_exist(path, NF_EINVAL, node, err);
    if (rc < 0)
        return rc;

    *s = (struct nf_shape){ 0 };
    switch (fmt) {
    case NF_FMT_NIFTI: {
        struct nf_nifti_info info;
        rc = nf_nifti_read_info(path, &info, &cause);
        if (rc < 0)
            goto fail;
        s->kind = NF_KIND_VOLUME;
        s->dim[0] = info.grid.dim[0];
        s->dim[1] = info.grid.dim[1];
        s->dim[2] = info.grid.dim[2];
        s->dim[3] = info.nt;
        s->has_grid = true;   /* the mask node compares grids before any voxel is read */
        s->grid = info.grid;
        s->path = nf_intern(path);
        return 0;
    }
    case NF_FMT_TABLE: {
        char *names = NULL;
        rc = nf_table_read_header(path, selected_columns(p), p->columns.n,
                                  &s->dim[0], &s->dim[1], &names, &cause);
        if (rc < 0)
            goto fail;
        s->kind = NF_KIND_TABLE;
        s->path = nf_intern(path);
        /* column names let nodes check the columns they are told to use
         * (predict's target, permute's column) at validate time */
        s->col_names = nf_intern(names);
        free(names);
        return 0;
    }
    case NF_FMT_NPY:
        rc = nf_npy_read_info(path, &s->dim[0], &s->dim[1], &cause);
        if (rc < 0)
            goto fail;
        s->kind = NF_KIND_MATRIX;
        s->path = nf_intern(path);
        return 0;
    default:
        return NF_FAIL_AT(err, NF_EBUG, nf_node_loc(node), nf_node_id(node),
                          "no reader for '%s'", path);
    }
fail:
    return fail_on_node(err, node, &cause);
}

static int64_t shape_elements(const struct nf_shape *s)
{
    int64_t n = 1;
    int used = s->kind == NF_KIND_VOLUME ? 4 : 2;
    for (int d = 0; d < used; d++)
        n *= s->dim[d] > 0 ? s->dim[d] : 1;
    return n;
}

static int load_resolve(struct nf_resolve *r)
{
    const struct load_params *p = r->params;
    const struct nf_node_inst *node = r->node;
    enum nf_file_format fmt;
    glob_t matches;
    bool have_matches = false;
    int rc = 0;

    if (!p->path || !*p->path)
        return NF_FAIL_AT(r->err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "'path' is empty");

    if (!path_has_glob(p->path)) {
        NF_TRY(rc = file_format(p->path, p, node, &fmt, r->err));
        NF_TRY(rc = file_shape(p->path, fmt, p, node, &r->out[LOAD_OUT_DATA], r->err));
        /* an image only mask reads stays on disk: mask gathers its voxels
         * as it is read (engine/plan/shapes.c decides) */
        r->out[LOAD_OUT_DATA].can_be_lazy = fmt == NF_FMT_NIFTI;
        return 0;
    }

    NF_TRY(rc = expand_glob(p->path, node, &matches, r->err));
    have_matches = true;
    NF_TRY(rc = glob_format(&matches, p->path, p, node, &fmt, r->err));

    /* The collection's shape carries its largest item, so that the planner's
     * per-item memory estimate is an upper bound. */
    struct nf_shape largest = { 0 };
    bool same_grid = true, same_columns = true;
    const char *first_columns = NULL;
    struct nf_grid first_grid = { 0 };
    for (size_t i = 0; i < matches.gl_pathc; i++) {
        struct nf_shape item;
        NF_TRY(rc = file_shape(matches.gl_pathv[i], fmt, p, node, &item, r->err));
        if (i == 0) {
            first_grid = item.grid;
            first_columns = item.col_names;
        }
        same_grid &= item.has_grid && nf_grid_same(&first_grid, &item.grid);
        same_columns &= item.col_names == first_columns;   /* interned: equal text, same pointer */
        if (i == 0 || shape_elements(&item) > shape_elements(&largest))
            largest = item;
    }
    r->out[LOAD_OUT_DATA] = largest;
    /* what the items share is known now; what differs is checked per item at run time */
    r->out[LOAD_OUT_DATA].has_grid = same_grid;
    r->out[LOAD_OUT_DATA].col_names = same_columns ? first_columns : NULL;
    r->out[LOAD_OUT_DATA].path = nf_intern(p->path);   /* the pattern names the collection */
    r->out[LOAD_OUT_DATA].kind = NF_KIND_COLLECTION;
    r->out[LOAD_OUT_DATA].item_kind = largest.kind;
    r->out[LOAD_OUT_DATA].n_items = (int64_t)matches.gl_pathc;
    /* Lazy NIfTI items keep only their headers in memory until needed. */
    r->out[LOAD_OUT_DATA].lazy = fmt == NF_FMT_NIFTI &&
                     collection_is_lazy(p, nf_shape_bytes(&r->out[LOAD_OUT_DATA]),
                                        r->env ? r->env->memory_budget : UINT64_MAX);
    globfree(&matches);
    return 0;

fail:
    if (have_matches)
        globfree(&matches);
    return rc;
}

/* ---- reading (run time) ---- */

/* One file as a value. `lazy` applies to NIfTI only (collection items). */
static struct nf_value *read_one(const char *path, enum nf_file_format fmt,
                                 const struct load_params *p, bool lazy,
                                 const struct nf_node_inst *node, struct nf_error *err)
{
    struct nf_error cause = { 0 };
    struct nf_value *v = NULL;

    if (file_must_exist(path, NF_EIO, node, err) < 0)
        return NULL;
    switch (fmt) {
    case NF_FMT_NIFTI:
        v = lazy ? nf_nifti_open_lazy(path, &cause) : nf_nifti_read(path, &cause);
        break;
    case NF_FMT_TABLE:
        v = nf_table_read(path, selected_columns(p), p->columns.n, &cause);
        break;
    case NF_FMT_NPY:
        v = nf_npy_read(path, &cause);
        break;
    default:
        NF_FAIL_AT(err, NF_EBUG, nf_node_loc(node), nf_node_id(node), "no reader for '%s'", path);
        return NULL;
    }
    if (!v) {
        if (cause.code == 0)
            NF_FAIL(&cause, NF_EIO, "cannot read '%s'", path);
        fail_on_node(err, node, &cause);
        return NULL;
    }
    nf_value_set_path(v, path);
    return v;
}

static int load_run(struct nf_run *run)
{
    const struct load_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    struct nf_value *coll = NULL;
    enum nf_file_format fmt;
    glob_t matches;
    bool have_matches = false;
    int rc = 0;

    if (!p->path || !*p->path)
        return NF_FAIL_AT(run->err, NF_EINVAL, nf_node_loc(node), nf_node_id(node),
                          "'path' is empty");

    if (!path_has_glob(p->path)) {
        NF_TRY(rc = file_format(p->path, p, node, &fmt, run->err));
        const struct nf_shape *planned = nf_node_planned_output(node, 0);
        bool lazy = planned && planned->kind == NF_KIND_VOLUME && planned->lazy;
        run->out[LOAD_OUT_DATA] = read_one(p->path, fmt, p, lazy, node, run->err);
        return run->out[LOAD_OUT_DATA] ? 0 : run->err->code;
    }

    NF_TRY(rc = expand_glob(p->path, node, &matches, run->err));
    have_matches = true;
    NF_TRY(rc = glob_format(&matches, p->path, p, node, &fmt, run->err));

    /* The plan sized memory and mapped downstream nodes for the files seen
     * then; a different set now would silently change the analysis. */
    const struct nf_shape *planned = nf_node_planned_output(node, 0);
    if (planned && planned->kind == NF_KIND_COLLECTION &&
        planned->n_items != (int64_t)matches.gl_pathc) {
        rc = NF_FAIL_AT(run->err, NF_EDATA, nf_node_loc(node), nf_node_id(node),
                        "'%s' matched %lld files when planned but %zu now",
                        p->path, (long long)planned->n_items,
                        matches.gl_pathc);
        goto fail;
    }

    coll = nf_value_new_collection(matches.gl_pathc, run->err);
    if (!coll) {
        rc = run->err->code ? run->err->code : NF_ENOMEM;
        goto fail;
    }
    /* The plan decided (from headers and the budget); without a plan, only an
     * explicit `lazy: false` reads everything now. */
    bool lazy = planned && planned->kind == NF_KIND_COLLECTION ? planned->lazy
                                                               : p->lazy != LOAD_LAZY_FALSE;
    for (size_t i = 0; i < matches.gl_pathc; i++) {
        coll->u.coll.items[i] = read_one(matches.gl_pathv[i], fmt, p, lazy, node, run->err);
        if (!coll->u.coll.items[i]) {
            rc = run->err->code;
            goto fail;
        }
    }
    label_items(coll, matches.gl_pathv);
    nf_value_set_path(coll, p->path);
    globfree(&matches);
    run->out[LOAD_OUT_DATA] = coll;
    return 0;

fail:
    nf_value_unref(coll);
    if (have_matches)
        globfree(&matches);
    return rc < 0 ? rc : NF_EBUG;
}

/* The files the output is read from, and the labels its items get, for cache
 * keys (node.h input_files). */
static int load_input_files(const void *params, char ***paths, char ***labels, size_t *n,
                            bool *is_collection, struct nf_error *err)
{
    const struct load_params *p = params;
    *paths = NULL;
    *labels = NULL;
    *n = 0;
    *is_collection = path_has_glob(p->path);
    if (!*is_collection) {
        *paths = nf_calloc(1, sizeof **paths);
        if (!*paths || !((*paths)[0] = nf_strdup(p->path)))
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        *n = 1;
        return 0;
    }
    glob_t matches;
    int rc = expand_glob(p->path, NULL, &matches, err);
    if (rc < 0)
        return rc;
    *paths = nf_calloc(matches.gl_pathc + 1, sizeof **paths);
    *labels = item_labels(matches.gl_pathv, matches.gl_pathc);
    if (!*paths || !*labels) {
        globfree(&matches);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    size_t found = matches.gl_pathc;
    for (size_t i = 0; i < found; i++)
        if (((*paths)[i] = nf_strdup(matches.gl_pathv[i])))
            (*n)++;
    globfree(&matches);
    return *n == found ? 0 : NF_FAIL(err, NF_ENOMEM, "out of memory");
}

/* The label-name file beside an atlas image (io.h nf_label_names_sidecar:
 * aal.nii.gz -> aal.nii.txt, ...), which summarize reads by the loaded
 * value's path: its content is part of this node's key (node.h key_files),
 * so that editing the names reruns the tables that show them, while the image
 * itself keeps its own content key. Globs (collections of subjects) have none. */
static int load_key_files(const void *params, const struct nf_env *env, char ***paths, size_t *n,
                          struct nf_error *err)
{
    const struct load_params *p = params;
    char *found = NULL;
    (void)env;
    *paths = NULL;
    *n = 0;
    if (path_has_glob(p->path) || nf_file_format_of(p->path) != NF_FMT_NIFTI)
        return 0;
    int rc = nf_label_names_sidecar(p->path, &found, err);
    if (rc < 0 || !found)
        return rc;
    *paths = nf_calloc(1, sizeof **paths);
    if (!*paths) {
        free(found);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    (*paths)[0] = found;
    *n = 1;
    return 0;
}

const struct nf_node_type nf_node_load = {
    .name = "load",
    .summary = "read a NIfTI image, a TSV/CSV table or a .npy array (a glob gives a collection)",
    .description =
        "Reads one file, chosen by its extension: NIfTI-1/2 images (.nii, .nii.gz; 3D or "
        "4D, any data type, converted to float32 with scl_slope/scl_inter applied), "
        "delimited tables with a header row (.tsv, .csv, .txt; `columns` selects and "
        "orders columns; numeric columns and string columns such as BIDS trial_type), "
        "or .npy arrays (float32/float64, 1-D or 2-D). A path with a glob (* ? [ ]) "
        "reads every matching file into a collection sorted by path, each item "
        "labelled by its BIDS subject (sub-01) or, when files do not name distinct "
        "subjects, by its file stem; downstream nodes then run once per item. Images "
        "in a collection are read when a node needs them, so memory holds one subject "
        "at a time. An image that only `mask` nodes consume (as data) is not read here: "
        "mask reads it and keeps the in-mask voxels of each image as the file streams "
        "past, so the whole 4D series is never in memory (.nii.gz is inflated whole "
        "with libdeflate when nlflow is built with it). A missing file, a glob that matches nothing, an unreadable header "
        "and a `columns` name the table does not have are reported by `nlflow "
        "validate` (headers only: no voxel data is read).",
    .version = 1,
    .params = load_params_table,
    .params_size = sizeof(struct load_params),
    .inputs = load_inputs,
    .outputs = load_outputs,
    .check = NULL,
    .resolve = load_resolve,
    .estimate = NULL,
    .run_cpu = load_run,
    .run_gpu = NULL,
    .input_files = load_input_files,
    .key_files = load_key_files,
    .methods = load_methods,
    .flags = NF_NODE_SOURCE,
};
