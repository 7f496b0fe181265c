/* bids.c — the `bids` node: the runs of a BIDS dataset (and its fMRIPrep
 * derivatives) as collections aligned item by item.
 *
 * A lab's data arrive as BIDS raw data plus fMRIPrep outputs; finding each
 * run's preprocessed image, brain mask, events and confounds by globs is
 * error-prone (one missing file shifts every pairing after it). This node
 * walks the dataset once (bids_files.c), keeps the runs the entity filters
 * select, and gives four collections whose item i belongs to the same run,
 * labelled sub-XX[_ses-YY]_task-T[_run-R][_space-S] (the derivatives'
 * space), so that a node mapped over them (design, mask, glm) pairs the
 * right files and per-run results keep the run's entities in their names.
 * The dataset's participants.tsv is a fifth output, one table (absent: an
 * error only when a node reads it), keyed by its own content
 * (node_type.output_file) so that a new column reruns no first level.
 * The repetition time comes from the JSON sidecars by BIDS inheritance and travels on each bold item (volume.tr),
 * where `design` reads it; a header that says otherwise is an error. A
 * missing piece is an error when `require` lists it or a node consumes its
 * output, otherwise a warning, and that output is then not produced.
 * Everything is found at plan time, so `nlflow validate` reports it. No
 * parameter is part of the cache key: what they select is (the bold files'
 * content and labels per item, every other file's content in the base key,
 * as load keys its path), so two filters that pick the same files share
 * results.
 */
#include "bids.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bids_internal.h"
#include "io/io.h"
#include "core/util.h"

#define FAIL_NODE(err, node, code, ...) NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node), __VA_ARGS__)

/* The optional outputs and the `require` word of each. */
static const char *const piece_names[BIDS_N_RUN_OUT] = { "bold", "mask", "events", "confounds" };

#define FIELD(f) offsetof(struct bids_params, f)
static const struct nf_param bids_params_table[] = {
    NF_PARAM_PATH_F("root", FIELD(root), "", NF_PF_REQUIRED | NF_PF_NOT_KEYED,
                    "the BIDS dataset (the folder with dataset_description.json and sub-XX/); events "
                    "and JSON sidecars are read from it"),
    NF_PARAM_PATH_F("derivatives", FIELD(derivatives), "", NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                    "an fMRIPrep derivatives folder: bold images are its _desc-<desc>_bold files, masks its "
                    "_desc-brain_mask files, confounds its _desc-confounds_timeseries.tsv (default: the raw "
                    "bold, no mask or confounds)"),
    NF_PARAM_STR_LIST_F("subjects", FIELD(subjects), "", 1, 0, NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                        "subjects to keep: labels (01 or sub-01) or globs (0*); default every subject"),
    NF_PARAM_STR_LIST_F("sessions", FIELD(sessions), "", 1, 0, NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                        "sessions to keep (labels or globs); default every session, and subjects without "
                        "sessions"),
    NF_PARAM_STR_F("task", FIELD(task), "", NF_PF_OPTIONAL | NF_PF_NOT_KEYED, "the task to keep; default every task"),
    NF_PARAM_STR_LIST_F("runs", FIELD(runs), "", 1, 0, NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                        "runs to keep (1 and 01 are the same run; globs allowed); default every run"),
    NF_PARAM_STR_F("space", FIELD(space), "", NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                   "the derivatives' space entity (e.g. MNI152NLin2009cAsym); default the one space "
                   "there is (several are an error asking for this)"),
    NF_PARAM_STR_F("desc", FIELD(desc), "preproc", NF_PF_NOT_KEYED, "the desc entity of the derivatives' bold images"),
    NF_PARAM_STR_LIST_F("require", FIELD(require), "", 1, 3, NF_PF_OPTIONAL | NF_PF_NOT_KEYED,
                        "pieces every run must have, of events, confounds, mask: a run without one is an "
                        "error (a piece whose output a node consumes is required anyway; others missing "
                        "are a warning)"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port bids_inputs[] = { NF_PORT_END };
static const struct nf_port bids_outputs[] = {
    { "bold", "the runs' 4D images (lazy: read when a node needs them), labelled "
      "sub-XX[_ses-YY]_task-T[_run-R][_space-S], each carrying the sidecars' repetition time", NF_PT_COLL, 0 },
    { "mask", "each run's brain mask (fMRIPrep's _desc-brain_mask, in the bold's space), same order", NF_PT_COLL, 0 },
    { "events", "each run's _events.tsv table (onset, duration, trial_type, ...), same order", NF_PT_COLL, 0 },
    { "confounds", "each run's fMRIPrep confounds table, same order", NF_PT_COLL, 0 },
    { "participants", "the dataset's participants.tsv (participant_id, then age, sex, group, ...; n/a where "
      "missing), for group_design; an error only when a node reads it and the file is absent", NF_PT_TABLE, 0 },
    NF_PORT_END,
};
NF_PORTS_MATCH(bids_inputs, BIDS_N_IN);
NF_PORTS_MATCH(bids_outputs, BIDS_N_OUT);

static void query_of(const struct bids_params *p, struct bids_query *q)
{
    *q = (struct bids_query){ .root = p->root, .derivatives = p->derivatives, .subjects = &p->subjects,
                              .sessions = &p->sessions, .runs = &p->runs, .task = p->task,
                              .space = p->space, .desc = p->desc };
}

static bool required(const struct bids_params *p, int piece)
{
    for (size_t i = 0; i < p->require.n; i++)
        if (strcmp(p->require.v[i], piece_names[piece]) == 0)
            return true;
    return false;
}

/* `require` words are known pieces. */
static int check_require(const struct bids_params *p, const struct nf_node_inst *node, struct nf_error *err)
{
    for (size_t i = 0; i < p->require.n; i++) {
        bool known = false;
        for (int o = BIDS_OUT_MASK; o < BIDS_N_RUN_OUT; o++)
            known |= strcmp(p->require.v[i], piece_names[o]) == 0;
        if (!known)
            return FAIL_NODE(err, node, NF_EINVAL, "require: '%s' is not a piece of a run (events, confounds, "
                             "mask)", p->require.v[i]);
    }
    if (!p->derivatives)
        for (int o = BIDS_OUT_MASK; o < BIDS_N_RUN_OUT; o++)
            if (o != BIDS_OUT_EVENTS && required(p, o))
                return FAIL_NODE(err, node, NF_EINVAL, "require lists %s, which come from fMRIPrep: give "
                                 "derivatives (the fMRIPrep folder)", piece_names[o]);
    return 0;
}

static const char *piece_path(const struct bids_item *it, int o)
{
    switch (o) {
    case BIDS_OUT_BOLD: return it->bold;
    case BIDS_OUT_MASK: return it->mask;
    case BIDS_OUT_EVENTS: return it->events;
    default: return it->confounds;
    }
}

/* Where a missing piece was looked for, for the message. */
static const char *piece_hint(int o)
{
    switch (o) {
    case BIDS_OUT_BOLD: return "the derivatives have no _desc-<desc>_bold image for it";
    case BIDS_OUT_MASK: return "the derivatives have no _desc-brain_mask in the bold's space";
    case BIDS_OUT_EVENTS: return "no _events.tsv in its func folder or the levels above";
    default: return "the derivatives have no _desc-confounds_timeseries.tsv for it";
    }
}

/* The filters, for the message when nothing matches. */
static char *filters_text(const struct bids_params *p)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    const struct { const char *name; const struct nf_str_list *l; } lists[] = {
        { "subjects", &p->subjects }, { "sessions", &p->sessions }, { "runs", &p->runs } };
    for (size_t k = 0; k < 3; k++) {
        if (lists[k].l->n == 0)
            continue;
        nf_strbuf_addf(&sb, "%s%s [", sb.len ? ", " : "", lists[k].name);
        for (size_t i = 0; i < lists[k].l->n; i++)
            nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", lists[k].l->v[i]);
        nf_strbuf_addf(&sb, "]");
    }
    if (p->task)
        nf_strbuf_addf(&sb, "%stask %s", sb.len ? ", " : "", p->task);
    if (p->space)
        nf_strbuf_addf(&sb, "%sspace %s", sb.len ? ", " : "", p->space);
    if (!sb.len)
        nf_strbuf_addf(&sb, "no filter");
    return nf_strbuf_detach(&sb);
}

/* The dataset's participants.tsv (owned; NULL when out of memory). */
static char *participants_path(const struct bids_params *p)
{
    return nf_path_join(p->root ? p->root : ".", "participants.tsv");
}

/* Scan and judge what is missing: *produce[o] says which outputs can be
 * made (every run has the piece). wanted: per output, consumed (NULL:
 * unknown, nothing required beyond `require`). Warnings only when `warn`
 * (at plan time; the run repeats the scan). */
static int scan_checks(const struct bids_params *p, const struct nf_node_inst *node, const bool *wanted,
                       bool warn, struct bids_scan *scan, bool produce[BIDS_N_OUT], struct nf_error *err);

/* The scan is released when it does not check out: callers own it only on success. */
static int scan_checked(const struct bids_params *p, const struct nf_node_inst *node, const bool *wanted,
                        bool warn, struct bids_scan *scan, bool produce[BIDS_N_OUT], struct nf_error *err)
{
    memset(scan, 0, sizeof *scan);
    int rc = scan_checks(p, node, wanted, warn, scan, produce, err);
    if (rc < 0)
        bids_scan_release(scan);
    return rc;
}

static int scan_checks(const struct bids_params *p, const struct nf_node_inst *node, const bool *wanted,
                       bool warn, struct bids_scan *scan, bool produce[BIDS_N_OUT], struct nf_error *err)
{
    struct bids_query q;
    int rc = check_require(p, node, err);
    if (rc < 0)
        return rc;
    query_of(p, &q);
    if ((rc = bids_scan(&q, scan, err)) < 0)
        return nf_error_on_node(node, err, rc);
    if (scan->n == 0) {
        char *f = filters_text(p);
        rc = FAIL_NODE(err, node, NF_EINVAL, "no BOLD runs in '%s' match %s (the dataset has %s)", p->root,
                       f ? f : "the filters", scan->seen ? scan->seen : "nothing");
        free(f);
        return rc;
    }
    for (size_t i = 0; i < scan->n; i++)
        if (!(scan->items[i].tr > 0))
            return FAIL_NODE(err, node, NF_EDATA, "%s: no JSON sidecar gives RepetitionTime (%s); BIDS "
                             "requires it, e.g. in task-%s_bold.json at the dataset's top level",
                             scan->items[i].label,
                             scan->items[i].n_sidecars ? "the sidecars that apply do not have it"
                                                       : "none applies to it",
                             p->task ? p->task : "<task>");
    for (int o = 0; o < BIDS_N_RUN_OUT; o++) {
        size_t missing = 0, first = 0;
        for (size_t i = 0; i < scan->n; i++)
            if (!piece_path(&scan->items[i], o) && missing++ == 0)
                first = i;
        produce[o] = missing == 0;
        if (missing == 0)
            continue;
        bool must = o == BIDS_OUT_BOLD || required(p, o) || (wanted && wanted[o]);
        const char *why = o == BIDS_OUT_BOLD ? "" : required(p, o) ? " (require lists it)"
                          : must ? " (a node reads this output)" : "";
        if (must)
            return FAIL_NODE(err, node, NF_EDATA, "%s has no %s file: %s%s; %zu of %zu runs miss it",
                             scan->items[first].label, piece_names[o], piece_hint(o), why, missing, scan->n);
        if (warn && (o == BIDS_OUT_EVENTS || p->derivatives))
            nf_warn(nf_node_id(node), "%zu of %zu runs have no %s file (first: %s; %s): output '%s' is not "
                    "produced", missing, scan->n, piece_names[o], scan->items[first].label, piece_hint(o),
                    piece_names[o]);
    }
    char *participants = participants_path(p);
    if (!participants)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    struct stat st;
    produce[BIDS_OUT_PARTICIPANTS] = stat(participants, &st) == 0 && S_ISREG(st.st_mode);
    int rc_p = 0;
    if (!produce[BIDS_OUT_PARTICIPANTS] && wanted && wanted[BIDS_OUT_PARTICIPANTS])
        rc_p = FAIL_NODE(err, node, NF_EDATA, "the dataset has no participants.tsv ('%s' %s) but a node reads "
                         "output 'participants': add the file (participant_id, then one column per variable) or "
                         "load the table from elsewhere", participants,
                         stat(participants, &st) != 0 ? "does not exist" : "is not a file");
    free(participants);
    return rc_p;
}

/* ---- shapes ---- */

static int image_shapes(const struct bids_params *p, const struct nf_node_inst *node, const struct bids_scan *scan,
                        int o, struct nf_shape *out, struct nf_error *err)
{
    struct nf_shape s = { .kind = NF_KIND_COLLECTION, .item_kind = NF_KIND_VOLUME, .n_items = (int64_t)scan->n,
                          .lazy = o == BIDS_OUT_BOLD, .has_grid = true, .path = nf_intern(p->root) };
    for (size_t i = 0; i < scan->n; i++) {
        const struct bids_item *it = &scan->items[i];
        const char *path = piece_path(it, o);
        struct nf_nifti_info info;
        int rc = nf_nifti_read_info(path, &info, err);
        if (rc < 0)
            return nf_error_on_node(node, err, rc);
        if (o == BIDS_OUT_BOLD) {
            if (info.ndim != 4 || info.nt < 2)
                return FAIL_NODE(err, node, NF_EDATA, "%s: '%s' is not a 4D series (%" PRId64 " volume%s)",
                                 it->label, path, info.nt, info.nt == 1 ? "" : "s");
            /* a header TR of 1 s without a time unit is nibabel's and old writers'
               placeholder as often as a real TR: only a clear disagreement is an error */
            if (info.tr > 0 && fabs(info.tr - it->tr) > 1e-3 * it->tr)
                return FAIL_NODE(err, node, NF_EDATA, "%s: the repetition time is %g s in %s but the header "
                                 "of '%s' says %g s: fix the sidecar or the header", it->label, it->tr,
                                 it->tr_source, path, info.tr);
        }
        if (i == 0)
            s.grid = info.grid;
        s.has_grid &= nf_grid_same(&s.grid, &info.grid);
        int64_t dims[4] = { info.grid.dim[0], info.grid.dim[1], info.grid.dim[2], info.nt };
        if (dims[0] * dims[1] * dims[2] * dims[3] > s.dim[0] * s.dim[1] * s.dim[2] * (s.dim[3] ? s.dim[3] : 1))
            memcpy(s.dim, dims, sizeof dims);
    }
    *out = s;
    return 0;
}

static int table_shapes(const struct bids_params *p, const struct nf_node_inst *node, const struct bids_scan *scan,
                        int o, struct nf_shape *out, struct nf_error *err)
{
    struct nf_shape s = { .kind = NF_KIND_COLLECTION, .item_kind = NF_KIND_TABLE, .n_items = (int64_t)scan->n,
                          .path = nf_intern(p->root) };
    bool same = true;
    for (size_t i = 0; i < scan->n; i++) {
        int64_t rows = 0, cols = 0;
        char *names = NULL;
        int rc = nf_table_read_header(piece_path(&scan->items[i], o), NULL, 0, &rows, &cols, &names, err);
        if (rc < 0)
            return nf_error_on_node(node, err, rc);
        const char *interned = nf_intern(names);
        free(names);
        if (i == 0)
            s.col_names = interned;
        same &= interned == s.col_names;
        s.dim[0] = rows > s.dim[0] ? rows : s.dim[0];
        s.dim[1] = cols > s.dim[1] ? cols : s.dim[1];
    }
    if (!same)
        s.col_names = NULL;   /* checked per item at run time */
    *out = s;
    return 0;
}

static int participants_shape(const struct bids_params *p, const struct nf_node_inst *node, struct nf_shape *out,
                              struct nf_error *err)
{
    char *path = participants_path(p), *names = NULL;
    if (!path)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int64_t rows = 0, cols = 0;
    int rc = nf_table_read_header(path, NULL, 0, &rows, &cols, &names, err);
    if (rc == 0)
        *out = (struct nf_shape){ .kind = NF_KIND_TABLE, .dim = { rows, cols }, .path = nf_intern(path),
                                  .col_names = nf_intern(names) };
    free(names);
    free(path);
    return rc < 0 ? nf_error_on_node(node, err, rc) : 0;
}

static int bids_resolve(struct nf_resolve *r)
{
    const struct bids_params *p = r->params;
    struct bids_scan scan;
    bool produce[BIDS_N_OUT];
    int rc = scan_checked(p, r->node, r->wanted, true, &scan, produce, r->err);
    if (rc < 0)
        return rc;
    for (int o = 0; o < BIDS_N_OUT && rc == 0; o++) {
        r->out[o] = (struct nf_shape){ 0 };
        if (!produce[o])
            continue;
        if (o == BIDS_OUT_PARTICIPANTS) {
            rc = participants_shape(p, r->node, &r->out[o], r->err);
            if (rc < 0 && rc != NF_ENOMEM && !(r->wanted && r->wanted[o])) {
                /* a broken participants.tsv must not stop a first level that does not read it */
                nf_warn(nf_node_id(r->node), "%s: output 'participants' is not produced", r->err->msg);
                *r->err = (struct nf_error){ 0 };
                r->out[o] = (struct nf_shape){ 0 };
                rc = 0;
            }
            continue;
        }
        rc = o == BIDS_OUT_BOLD || o == BIDS_OUT_MASK ? image_shapes(p, r->node, &scan, o, &r->out[o], r->err)
                                                      : table_shapes(p, r->node, &scan, o, &r->out[o], r->err);
    }
    bids_scan_release(&scan);
    return rc;
}

/* ---- run ---- */

static struct nf_value *read_piece(const struct bids_item *it, int o, struct nf_error *err)
{
    const char *path = piece_path(it, o);
    /* series stay on disk until a node reads them; masks are small and the
       mask node wants them in memory */
    struct nf_value *v = o == BIDS_OUT_BOLD ? nf_nifti_open_lazy(path, err)
                         : o == BIDS_OUT_MASK ? nf_nifti_read(path, err) : nf_table_read(path, NULL, 0, err);
    if (!v)
        return NULL;
    if (o == BIDS_OUT_BOLD)
        v->u.vol.tr = it->tr;   /* the sidecar's: design reads it from here */
    nf_value_set_path(v, path);
    nf_value_set_label(v, it->label);
    if (!v->label || !v->path) {
        nf_value_unref(v);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    return v;
}

static int bids_run(struct nf_run *run)
{
    const struct bids_params *p = run->params;
    const struct nf_node_inst *node = run->node;
    struct bids_scan scan;
    bool produce[BIDS_N_OUT];
    int rc = scan_checked(p, node, run->wanted, false, &scan, produce, run->err);
    if (rc < 0)
        return rc;
    const struct nf_shape *planned = nf_node_planned_output(node, BIDS_OUT_BOLD);
    if (planned && planned->kind == NF_KIND_COLLECTION && planned->n_items != (int64_t)scan.n) {
        rc = FAIL_NODE(run->err, node, NF_EDATA, "the dataset had %" PRId64 " matching runs when planned but "
                       "%zu now", planned->n_items, scan.n);
        goto done;
    }
    for (int o = 0; o < BIDS_N_OUT && rc == 0; o++) {
        if (!produce[o])
            continue;
        if (o == BIDS_OUT_PARTICIPANTS) {
            char *path = participants_path(p);
            run->out[o] = path ? nf_table_read(path, NULL, 0, run->err) : NULL;
            if (!run->out[o] && path && run->err->code != NF_ENOMEM && !nf_run_wants(run, o))
                *run->err = (struct nf_error){ 0 };   /* unread: warned about at plan time */
            else if (!run->out[o])
                rc = path ? nf_error_on_node(node, run->err, run->err->code ? run->err->code : NF_EIO)
                          : NF_FAIL(run->err, NF_ENOMEM, "out of memory");
            free(path);
            continue;
        }
        struct nf_value *coll = nf_value_new_collection(scan.n, run->err);
        if (!coll) {
            rc = run->err->code ? run->err->code : NF_ENOMEM;
            break;
        }
        for (size_t i = 0; i < scan.n && rc == 0; i++)
            if (!(coll->u.coll.items[i] = read_piece(&scan.items[i], o, run->err)))
                rc = nf_error_on_node(node, run->err, run->err->code ? run->err->code : NF_EIO);
        if (rc < 0) {
            nf_value_unref(coll);
            break;
        }
        nf_value_set_path(coll, p->root);
        run->out[o] = coll;
    }
done:
    if (rc < 0)
        for (int o = 0; o < BIDS_N_OUT; o++) {
            nf_value_unref(run->out[o]);
            run->out[o] = NULL;
        }
    bids_scan_release(&scan);
    return rc;
}

/* ---- cache keys: the bold images per item, every other file in the base ---- */

static int bids_input_files(const void *params, char ***paths, char ***labels, size_t *n, bool *is_collection,
                            struct nf_error *err)
{
    const struct bids_params *p = params;
    struct bids_query q;
    struct bids_scan scan;
    *paths = *labels = NULL;
    *n = 0;
    *is_collection = true;
    query_of(p, &q);
    int rc = bids_scan(&q, &scan, err);
    if (rc < 0)
        return rc;
    *paths = nf_calloc(scan.n + 1, sizeof **paths);
    *labels = nf_calloc(scan.n + 1, sizeof **labels);
    if (!*paths || !*labels)
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (size_t i = 0; rc == 0 && i < scan.n; i++) {
        if (!scan.items[i].bold) {
            rc = NF_FAIL(err, NF_EDATA, "%s has no bold image", scan.items[i].label);
            break;
        }
        (*paths)[i] = scan.items[i].bold;
        (*labels)[i] = scan.items[i].label;
        scan.items[i].bold = scan.items[i].label = NULL;
        (*n)++;
    }
    bids_scan_release(&scan);
    return rc;
}

static int push(char ***paths, size_t *n, const char *path, struct nf_error *err)
{
    if (!path)
        return 0;
    char **grown = nf_realloc(*paths, (*n + 1) * sizeof *grown);
    if (!grown)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    *paths = grown;
    if (!((*paths)[*n] = nf_strdup(path)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    (*n)++;
    return 0;
}

static int bids_key_files(const void *params, const struct nf_env *env, char ***paths, size_t *n,
                          struct nf_error *err)
{
    const struct bids_params *p = params;
    struct bids_query q;
    struct bids_scan scan;
    (void)env;
    *paths = NULL;
    *n = 0;
    query_of(p, &q);
    int rc = bids_scan(&q, &scan, err);
    for (size_t i = 0; rc == 0 && i < scan.n; i++) {
        const struct bids_item *it = &scan.items[i];
        for (size_t s = 0; rc == 0 && s < it->n_sidecars; s++)
            rc = push(paths, n, it->sidecars[s], err);
        for (int o = BIDS_OUT_MASK; rc == 0 && o < BIDS_N_RUN_OUT; o++)
            rc = push(paths, n, piece_path(it, o), err);
    }
    bids_scan_release(&scan);
    if (rc < 0) {
        for (size_t i = 0; i < *n; i++)
            free((*paths)[i]);
        free(*paths);
        *paths = NULL;
        *n = 0;
    }
    return rc;
}

/* participants.tsv keys the participants output alone (node_type.output_file). */
static int bids_output_file(const void *params, int port, char **path, struct nf_error *err)
{
    if (port != BIDS_OUT_PARTICIPANTS)
        return 0;
    if (!(*path = participants_path(params)))
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    return 1;
}

/* node_type.methods */
static char *bids_methods(const void *params)
{
    const struct bids_params *p = params;
    const char *root = p->root ? p->root : "", *slash = strrchr(root, '/');
    char *f = filters_text(p);
    char *text = NULL;
    struct nf_strbuf req;
    nf_strbuf_init(&req);
    for (size_t i = 0; i < p->require.n; i++)
        nf_strbuf_addf(&req, "%s%s", i == 0 ? "" : i + 1 < p->require.n ? ", " : " and ", p->require.v[i]);
    if (f)
        text = nf_asprintf("BOLD runs were selected from the BIDS dataset %s (%s)%s%s%s, with each run's "
                           "repetition time taken from its JSON sidecars by BIDS inheritance%s%s.",
                           !*root ? "given" : slash && slash[1] ? slash + 1 : root, f,
                           p->derivatives ? " and taken from the fMRIPrep derivatives (desc-" : "",
                           p->derivatives ? (p->desc ? p->desc : "preproc") : "", p->derivatives ? ")" : "",
                           req.len ? "; every run had to have " : "", req.len ? req.buf : "");
    free(f);
    nf_strbuf_release(&req);
    return text;
}

const struct nf_node_type nf_node_bids = {
    .name = "bids",
    .summary = "the runs of a BIDS dataset and its fMRIPrep derivatives, as aligned collections",
    .description =
        "Walks a BIDS dataset (`root`) and, when given, its fMRIPrep derivatives, keeps the BOLD runs the "
        "entity filters select (`subjects`, `sessions`, `task`, `runs`; `space` and `desc` choose the "
        "derivatives' image), and returns four collections aligned item by item and labelled "
        "sub-XX[_ses-YY]_task-T[_run-R][_space-S]: `bold` (lazy 4D images), `mask` (fMRIPrep's brain mask), `events` "
        "(the raw _events.tsv, found by BIDS inheritance) and `confounds` (fMRIPrep's confounds table); and the "
        "dataset's participants.tsv as the table `participants` (for group_design; keyed by that file alone, so "
        "that editing it reruns only what reads it). "
        "Each bold item carries the repetition time of its JSON sidecars (BIDS inheritance: top-level "
        "task-T_bold.json, then subject, session and file level, the nearest winning), which `design` "
        "uses; a header whose TR disagrees, a run without RepetitionTime, a malformed sidecar and a filter "
        "that matches nothing are errors. A run missing a piece is an error when `require` lists it or a "
        "node reads that output, otherwise a warning (the output is then not produced). Everything is found "
        "at plan time (`nlflow validate`), without reading voxel data.",
    .version = 1,
    .params = bids_params_table,
    .params_size = sizeof(struct bids_params),
    .inputs = bids_inputs,
    .outputs = bids_outputs,
    .resolve = bids_resolve,
    .run_cpu = bids_run,
    .input_files = bids_input_files,
    .key_files = bids_key_files,
    .output_file = bids_output_file,
    .methods = bids_methods,
    .flags = NF_NODE_SOURCE,
};
