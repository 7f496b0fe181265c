/* group_design.c — the `group_design` node: a group-level design table built
 * from a BIDS participants.tsv, one row per subject map, in the maps' order.
 *
 * A lab's group model lives in participants.tsv (age, sex, group, ...), one
 * row per participant in whatever order the file has; the subject maps come
 * from fixed_effects or load in the order of their labels, perhaps only some
 * subjects. Writing the design by hand in the maps' order is where rows get
 * shuffled. This node joins the table to the maps by subject: each map's
 * label (sub-01, sub-01_task-x_space-S, a file stem) gives its subject entity
 * (nf_subject_entity), which must be one participant_id (ids written without
 * "sub-" are read with it, as BIDS names subjects). The chosen columns become
 * regressors in the order given: numbers as they are, minus their mean over
 * the design's rows (`demean`, the default, so that an intercept is the group
 * mean at the average covariate); categories (text columns, or columns listed
 * in `categorical`) as 0/1 indicator columns named column[level], levels in
 * sorted order (numerically for numbers). With an intercept every category
 * drops its first level (the reference); without one the first categorical
 * column keeps every level (its indicators carry the mean) and later ones
 * drop their first, as patsy codes a formula, so that the design stays full
 * rank. What was coded how is logged. A subject missing from the table, a
 * missing value ("n/a", empty) in a used column, a duplicate participant, a
 * category with a single level and a constant number are errors that name
 * the subject, column or row: a silently dropped subject or column would
 * change the test.
 */
#include "group_design.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/util.h"
#include "io/io.h"

#define FAIL_NODE(err, node, code, ...) NF_FAIL_AT(err, code, nf_node_loc(node), nf_node_id(node), __VA_ARGS__)

#define FIELD(f) offsetof(struct group_design_params, f)
static const struct nf_param group_design_params_table[] = {
    NF_PARAM_STR_LIST_F("columns", FIELD(columns), "", 1, 0, NF_PF_REQUIRED,
                        "the participants' columns that become regressors, in this order (e.g. [age, sex, "
                        "group])"),
    NF_PARAM_STR_LIST_F("categorical", FIELD(categorical), "", 1, 0, NF_PF_OPTIONAL,
                        "columns coded as categories even though their values are numbers (site 1, 2, 3); "
                        "a column with any value that is not a number is a category anyway"),
    NF_PARAM_BOOL("demean", FIELD(demean), true,
                  "subtract from each numeric column its mean over the design's rows (the subjects of the "
                  "maps), so that the intercept is the mean at the average covariate"),
    NF_PARAM_BOOL("intercept", FIELD(intercept), true,
                  "put a first column `intercept` of ones; categories then drop their first level (the "
                  "reference)"),
    NF_PARAM_STR("id_column", FIELD(id_column), "participant_id",
                 "the column naming each participant (sub-<label>, or the bare label)"),
    NF_PARAM_END,
};
#undef FIELD

static const struct nf_port group_design_inputs[] = {
    { "participants", "one row per participant: an id column (participant_id) and the variables, e.g. the bids "
      "node's participants output or a load of participants.tsv", NF_PT_TABLE, 0 },
    { "maps", "the per-subject maps the design is for: a collection labelled by subject (fixed_effects, load), "
      "or a matrix whose rows are named so; only the labels are read", NF_PT_COLL | NF_PT_MATRIX, NF_PORT_LAZY },
    NF_PORT_END,
};
static const struct nf_port group_design_outputs[] = {
    { "out", "the design table: one row per map, in the maps' order: intercept, numeric columns, column[level] indicators "
      "(the design input of permute's test: glm)", NF_PT_TABLE, 0 },
    NF_PORT_END,
};
NF_PORTS_MATCH(group_design_inputs, GROUP_DESIGN_N_IN);
NF_PORTS_MATCH(group_design_outputs, GROUP_DESIGN_N_OUT);

/* The id column's name ("participant_id" unless id_column says otherwise). */
static const char *id_column_of(const struct group_design_params *p)
{
    return p->id_column && p->id_column[0] ? p->id_column : "participant_id";
}

static bool listed(const struct nf_str_list *l, const char *name)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], name) == 0)
            return true;
    return false;
}

static void group_design_check(const void *params, const struct nf_loc *loc, const char *node, struct nf_diags *d)
{
    const struct group_design_params *p = params;
    for (size_t i = 0; i < p->columns.n; i++) {
        for (size_t j = 0; j < i; j++)
            if (strcmp(p->columns.v[i], p->columns.v[j]) == 0)
                NF_DIAG(d, NF_EINVAL, loc, node, "columns lists '%s' twice", p->columns.v[i]);
        if (strcmp(p->columns.v[i], id_column_of(p)) == 0)
            NF_DIAG(d, NF_EINVAL, loc, node, "columns lists '%s', the participant id column: an id is no regressor",
                    id_column_of(p));
    }
    for (size_t i = 0; i < p->categorical.n; i++)
        if (!listed(&p->columns, p->categorical.v[i]))
            NF_DIAG(d, NF_EINVAL, loc, node, "categorical lists '%s', which is not in columns", p->categorical.v[i]);
}

/* ---- the design ---- */

/* Whether cell r of a column is missing: NaN (the reader's "n/a", empty) or
 * the text "n/a" / empty in a text column. */
static bool cell_missing(const struct nf_column *c, int64_t r)
{
    if (c->numeric)
        return isnan(c->num[r]);
    return !c->str[r] || !c->str[r][0] || strcasecmp(c->str[r], "n/a") == 0;
}

static int compare_ids(const void *a, const void *b, void *ids)
{
    char *const *s = ids;
    int64_t ia = *(const int64_t *)a, ib = *(const int64_t *)b;
    int c = strcmp(s[ia], s[ib]);
    return c ? c : (ia > ib) - (ia < ib);
}

/* The participants' ids with "sub-" (owned), and their rows sorted by id. */
struct id_index {
    char **id;
    int64_t *sorted;
    int64_t n;
};

/* The error for a column the table lacks, listing the ones it has. */
static int no_such_column(const struct nf_table *t, const char *tname, const char *name, int code,
                          const char *hint, struct nf_error *err)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (int64_t j = 0; j < t->n_cols; j++)
        nf_strbuf_addf(&sb, "%s%s", j ? ", " : "", t->cols[j].name);
    int rc = NF_FAIL(err, code, "%s has no column '%s' (columns: %s)%s", tname, name, sb.buf ? sb.buf : "",
                     hint);
    nf_strbuf_release(&sb);
    return rc;
}

static void id_index_release(struct id_index *x)
{
    for (int64_t r = 0; x->id && r < x->n; r++)
        free(x->id[r]);
    free(x->id);
    free(x->sorted);
}

static int id_index_build(struct id_index *x, const struct nf_table *t, const char *tname, const char *id_column,
                          struct nf_error *err)
{
    *x = (struct id_index){ .n = t->n_rows };
    int64_t c = nf_table_find(t, id_column);
    if (c < 0)
        return no_such_column(t, tname, id_column, NF_EDATA, "; a BIDS participants.tsv starts with "
                              "participant_id", err);
    const struct nf_column *col = &t->cols[c];
    if (col->numeric)
        return NF_FAIL(err, NF_EDATA, "column '%s' of %s holds numbers, not participant labels (BIDS writes "
                       "sub-<label>, e.g. sub-01)", id_column, tname);
    x->id = nf_calloc((size_t)t->n_rows + 1, sizeof *x->id);
    x->sorted = nf_malloc_array((size_t)t->n_rows + 1, sizeof *x->sorted);
    if (!x->id || !x->sorted)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (int64_t r = 0; r < t->n_rows; r++) {
        if (cell_missing(col, r))
            return NF_FAIL(err, NF_EDATA, "row %" PRId64 " of %s has no %s", r + 1, tname, id_column);
        const char *s = col->str[r];
        x->id[r] = strncmp(s, "sub-", 4) == 0 ? nf_strdup(s) : nf_asprintf("sub-%s", s);
        if (!x->id[r])
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        x->sorted[r] = r;
    }
    qsort_r(x->sorted, (size_t)t->n_rows, sizeof *x->sorted, compare_ids, x->id);
    for (int64_t i = 1; i < t->n_rows; i++)
        if (strcmp(x->id[x->sorted[i - 1]], x->id[x->sorted[i]]) == 0)
            return NF_FAIL(err, NF_EDATA, "participant '%s' appears twice in %s (rows %" PRId64 " and %" PRId64
                           "): each participant must have one row", x->id[x->sorted[i]], tname,
                           x->sorted[i - 1] + 1, x->sorted[i] + 1);
    return 0;
}

/* The row of participant `subject`, or -1. */
static int64_t id_index_find(const struct id_index *x, const char *subject)
{
    int64_t lo = 0, hi = x->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(x->id[x->sorted[mid]], subject);
        if (c == 0)
            return x->sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

/* "sub-01, sub-02, ... (40 in all)" for messages. */
static char *ids_text(const struct id_index *x)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (int64_t i = 0; i < x->n && i < 8; i++)
        nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", x->id[x->sorted[i]]);
    if (x->n > 8)
        nf_strbuf_addf(&sb, ", ... (%" PRId64 " in all)", x->n);
    return nf_strbuf_detach(&sb);
}

/* The output columns as they are made. */
struct design_cols {
    size_t n, cap, rows;
    char **name;
    double **v;
};

static void design_cols_release(struct design_cols *d)
{
    for (size_t j = 0; j < d->n; j++) {
        free(d->name[j]);
        free(d->v[j]);
    }
    free(d->name);
    free(d->v);
}

/* A new zeroed column named `name` (owned: taken, also when this fails). */
static double *design_cols_add(struct design_cols *d, char *name, struct nf_error *err)
{
    if (name && d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        char **nn = nf_realloc(d->name, cap * sizeof *nn);
        if (nn)
            d->name = nn;
        double **nv = nn ? nf_realloc(d->v, cap * sizeof *nv) : NULL;
        if (nv) {
            d->v = nv;
            d->cap = cap;
        }
    }
    double *v = name && d->n < d->cap ? nf_calloc(d->rows + 1, sizeof *v) : NULL;
    if (!v) {
        free(name);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    d->name[d->n] = name;
    d->v[d->n++] = v;
    return v;
}

/* One category value of a design row: its text, or its number for numeric columns. */
struct level { const char *text; double num; };

static int compare_levels(const void *a, const void *b)
{
    const struct level *x = a, *y = b;
    if (!x->text)
        return (x->num > y->num) - (x->num < y->num);
    return strcmp(x->text, y->text);
}

static bool same_level(const struct level *a, const struct level *b)
{
    return a->text ? strcmp(a->text, b->text) == 0 : a->num == b->num;
}

/* "F" or "2.5": a level as its column is named. */
static char *level_name(const struct level *l)
{
    return l->text ? nf_strdup(l->text) : nf_asprintf("%.15g", l->num);
}

/* Indicator columns of one categorical column, levels in sorted order; keep_first: the first level
 * too (it carries the mean when there is no intercept), else it is the reference and left out. */
static int add_categorical(struct design_cols *d, const struct nf_column *col, const int64_t *row, bool keep_first,
                           struct nf_strbuf *log, struct nf_error *err)
{
    size_t n = d->rows, n_levels = 0;
    struct level *cell = nf_malloc_array(n, sizeof *cell), *levels = nf_malloc_array(n, sizeof *levels);
    int rc = 0;
    if (!cell || !levels) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        cell[i] = levels[i] = col->numeric ? (struct level){ NULL, col->num[row[i]] }
                                           : (struct level){ col->str[row[i]], 0 };
    qsort(levels, n, sizeof *levels, compare_levels);
    for (size_t i = 0; i < n; i++)
        if (n_levels == 0 || !same_level(&levels[n_levels - 1], &levels[i]))
            levels[n_levels++] = levels[i];
    if (n_levels < 2) {
        char *only = level_name(&levels[0]);
        rc = only ? NF_FAIL(err, NF_EDATA, "column '%s' has a single level ('%s') among the %zu subjects of the "
                            "maps: it cannot be a regressor (leave it out of columns)", col->name, only, n)
                  : NF_FAIL(err, NF_ENOMEM, "out of memory");
        free(only);
        goto done;
    }
    char *reference = keep_first ? NULL : level_name(&levels[0]);
    if (!keep_first && !reference) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    nf_strbuf_addf(log, "; %s as", col->name);
    for (size_t l = keep_first ? 0 : 1; l < n_levels && rc == 0; l++) {
        char *lname = level_name(&levels[l]);
        double *v = design_cols_add(d, lname ? nf_asprintf("%s[%s]", col->name, lname) : NULL, err);
        if (!v) {
            free(lname);
            rc = err->code;
            break;
        }
        nf_strbuf_addf(log, " %s", d->name[d->n - 1]);
        free(lname);
        for (size_t i = 0; i < n; i++)
            v[i] = same_level(&cell[i], &levels[l]) ? 1 : 0;
    }
    if (rc == 0) {
        if (reference)
            nf_strbuf_addf(log, " (reference level %s)", reference);
        else
            nf_strbuf_addf(log, " (every level: no intercept)");
    }
    free(reference);
done:
    free(cell);
    free(levels);
    return rc;
}

static int add_numeric(struct design_cols *d, const struct nf_column *col, const int64_t *row, bool demean,
                       bool intercept, struct nf_strbuf *log, struct nf_error *err)
{
    size_t n = d->rows;
    double mean = 0;
    bool constant = true;
    for (size_t i = 0; i < n; i++) {
        mean += col->num[row[i]];
        constant = constant && col->num[row[i]] == col->num[row[0]];
    }
    mean /= (double)n;
    if (constant && (demean || intercept))
        return NF_FAIL(err, NF_EDATA, "column '%s' is %g for every one of the %zu subjects of the maps: a "
                       "constant is no regressor (%s)", col->name, col->num[row[0]], n,
                       demean ? "demeaned it is all zeros" : "it repeats the intercept");
    double *v = design_cols_add(d, nf_strdup(col->name), err);
    if (!v)
        return err->code;
    for (size_t i = 0; i < n; i++)
        v[i] = col->num[row[i]] - (demean ? mean : 0);
    if (demean)
        nf_strbuf_addf(log, "; %s demeaned (mean %.6g)", col->name, mean);
    else
        nf_strbuf_addf(log, "; %s as is", col->name);
    return 0;
}

/* The participants' row of every map, checked. */
static int match_rows(const struct id_index *ids, const char *tname, const char *const *labels, size_t n,
                      int64_t *row, struct nf_error *err)
{
    for (size_t i = 0; i < n; i++) {
        char *subject = labels[i] ? nf_subject_entity(labels[i]) : NULL;
        if (!subject)
            return labels[i] && strstr(labels[i], "sub-") == NULL
                       ? NF_FAIL(err, NF_EDATA, "map %zu is labelled '%s', which names no subject (expected "
                                 "sub-XX..., as bids, load and fixed_effects label per-subject maps)", i + 1,
                                 labels[i])
                   : labels[i] ? NF_FAIL(err, NF_ENOMEM, "out of memory")
                               : NF_FAIL(err, NF_EDATA, "map %zu has no label, so its subject is unknown (give "
                                         "the per-subject collection, e.g. fixed_effects.effect, whose maps are "
                                         "labelled sub-XX)", i + 1);
        row[i] = id_index_find(ids, subject);
        if (row[i] < 0) {
            char *have = ids_text(ids);
            int rc = NF_FAIL(err, NF_EDATA, "%s (map %zu, '%s') is not in %s (participants: %s)", subject, i + 1,
                             labels[i], tname, have ? have : "");
            free(have);
            free(subject);
            return rc;
        }
        free(subject);
    }
    return 0;
}

int group_design_build(const struct group_design_params *p, const struct nf_table *t, const char *tname,
                       const char *const *labels, size_t n, struct nf_value **design, char **summary,
                       struct nf_error *err)
{
    struct id_index ids;
    struct design_cols d = { .rows = n };
    struct nf_strbuf log;
    int64_t *row = nf_malloc_array(n + 1, sizeof *row);
    nf_strbuf_init(&log);
    *design = NULL;
    *summary = NULL;
    int rc = id_index_build(&ids, t, tname, id_column_of(p), err);
    if (rc < 0)
        goto done;
    if (!row) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    if (n == 0) {
        rc = NF_FAIL(err, NF_EDATA, "there are no maps to build a design for");
        goto done;
    }
    if ((rc = match_rows(&ids, tname, labels, n, row, err)) < 0)
        goto done;
    nf_strbuf_addf(&log, "design of %zu maps from %s", n, tname);
    if (p->intercept) {
        double *one = design_cols_add(&d, nf_strdup("intercept"), err);
        if (!one) {
            rc = err->code;
            goto done;
        }
        for (size_t i = 0; i < n; i++)
            one[i] = 1;
        nf_strbuf_addf(&log, "; intercept");
    }
    bool full_rank_taken = p->intercept;   /* who carries the mean */
    for (size_t k = 0; k < p->columns.n && rc == 0; k++) {
        const char *name = p->columns.v[k];
        int64_t c = nf_table_find(t, name);
        if (c < 0) {
            rc = no_such_column(t, tname, name, NF_EUSAGE, "", err);
            break;
        }
        const struct nf_column *col = &t->cols[c];
        for (size_t i = 0; i < n; i++)
            if (cell_missing(col, row[i]) || (col->numeric && !isfinite(col->num[row[i]]))) {
                rc = NF_FAIL(err, NF_EDATA, "column '%s' is %s for %s (map %zu, row %" PRId64 " of %s): give a "
                             "value or leave the subject out of the maps", name,
                             col->numeric && !isnan(col->num[row[i]]) ? "infinite" : "n/a",
                             ids.id[row[i]], i + 1, row[i] + 1, tname);
                break;
            }
        if (rc < 0)
            break;
        if (!col->numeric || listed(&p->categorical, name)) {
            rc = add_categorical(&d, col, row, !full_rank_taken, &log, err);
            full_rank_taken = true;
        } else {
            rc = add_numeric(&d, col, row, p->demean, p->intercept, &log, err);
        }
    }
    if (rc < 0)
        goto done;
    struct nf_value *v = nf_value_new_table((int64_t)n, (int64_t)d.n, err);
    if (!v) {
        rc = err->code ? err->code : NF_ENOMEM;
        goto done;
    }
    for (size_t j = 0; j < d.n; j++) {
        struct nf_column *col = &v->u.tab.cols[j];
        col->name = d.name[j];
        col->numeric = true;
        col->num = d.v[j];
        d.name[j] = NULL;
        d.v[j] = NULL;
    }
    *design = v;
    *summary = nf_strbuf_detach(&log);
done:
    nf_strbuf_release(&log);
    design_cols_release(&d);
    id_index_release(&ids);
    free(row);
    return rc;
}

/* ---- the node ---- */

/* The design's column names at plan time, so that permute checks its
 * contrasts at validation, before any first level runs: the design over
 * every participant whose used cells are filled in. The run's subjects are
 * some of them, so its columns are these or fewer (a level no map's subject
 * has drops out; a reference level is never one of these names' levels
 * while it is still among the subjects); a design that cannot be built over
 * all of them (a single level, a constant) leaves the names to the run.
 * What is wrong with the table whatever the maps (no id column, an id
 * twice) is an error now. *names: nf_intern'ed "a\nb\n", or NULL. */
static int planned_columns(const struct group_design_params *p, const struct nf_shape *t,
                           const struct nf_node_inst *node, const char **names, struct nf_error *err)
{
    *names = NULL;
    if (t->kind != NF_KIND_TABLE || !t->path)
        return 0;
    struct nf_error rerr = { 0 };
    struct nf_value *tab = nf_table_read(t->path, NULL, 0, &rerr);
    if (!tab)
        return 0;   /* the reader that made the shape reports what is wrong with the file */
    const struct nf_table *tb = &tab->u.tab;
    struct id_index ids;
    int rc = id_index_build(&ids, tb, t->path, id_column_of(p), err);
    const char **labels = rc == 0 ? nf_calloc((size_t)tb->n_rows + 1, sizeof *labels) : NULL;
    size_t n = 0;
    if (rc < 0) {
        rc = nf_error_on_node(node, err, rc);
        goto done;
    }
    if (!labels) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    for (int64_t r = 0; r < tb->n_rows; r++) {
        bool complete = true;
        for (size_t k = 0; k < p->columns.n && complete; k++) {
            int64_t c = nf_table_find(tb, p->columns.v[k]);
            complete = c >= 0 && !cell_missing(&tb->cols[c], r);
        }
        if (complete)
            labels[n++] = ids.id[r];
    }
    struct nf_value *design = NULL;
    char *summary = NULL;
    struct nf_error berr = { 0 };
    if (n > 0 && group_design_build(p, tb, t->path, labels, n, &design, &summary, &berr) == 0) {
        struct nf_strbuf sb;
        nf_strbuf_init(&sb);
        for (int64_t j = 0; j < design->u.tab.n_cols; j++)
            nf_strbuf_addf(&sb, "%s\n", design->u.tab.cols[j].name);
        if (!sb.oom)
            *names = nf_intern(sb.buf);
        nf_strbuf_release(&sb);
    }
    nf_value_unref(design);
    free(summary);
done:
    free(labels);
    id_index_release(&ids);
    nf_value_unref(tab);
    return rc;
}

static int group_design_resolve(struct nf_resolve *r)
{
    const struct group_design_params *p = r->params;
    const struct nf_shape *t = &r->in[GROUP_DESIGN_IN_PARTICIPANTS], *m = &r->in[GROUP_DESIGN_IN_MAPS];
    const char *tname = t->path ? t->path : "participants";
    const char *missing = t->kind != NF_KIND_TABLE ? NULL
                          : !nf_shape_has_column(t, id_column_of(p)) ? id_column_of(p) : NULL;
    for (size_t k = 0; !missing && t->kind == NF_KIND_TABLE && k < p->columns.n; k++)
        if (!nf_shape_has_column(t, p->columns.v[k]))
            missing = p->columns.v[k];
    if (missing) {
        char cols[512];
        nf_shape_columns_text(t, cols, sizeof cols);
        return FAIL_NODE(r->err, r->node, NF_EUSAGE, "%s has no column '%s' (columns: %s)", tname, missing, cols);
    }
    int64_t rows = m->kind == NF_KIND_COLLECTION ? m->n_items : m->kind == NF_KIND_MATRIX ? m->dim[0] : 0;
    const char *names = NULL;
    int rc = planned_columns(p, t, r->node, &names, r->err);
    if (rc < 0)
        return rc;
    int64_t cols = 0;
    for (const char *c = names; c && *c; c = strchr(c, '\n') + 1)
        cols++;
    r->out[GROUP_DESIGN_OUT] = (struct nf_shape){ .kind = NF_KIND_TABLE, .dim = { rows, cols }, .col_names = names };
    return 0;
}

static int group_design_run(struct nf_run *run)
{
    const struct group_design_params *p = run->params;
    const struct nf_value *t = run->in[GROUP_DESIGN_IN_PARTICIPANTS], *m = run->in[GROUP_DESIGN_IN_MAPS];
    if (!t || t->kind != NF_KIND_TABLE || !m || (m->kind != NF_KIND_COLLECTION && m->kind != NF_KIND_MATRIX))
        return FAIL_NODE(run->err, run->node, NF_EDATA, "needs a participants table and the maps (a collection "
                         "or a matrix)");
    size_t n = m->kind == NF_KIND_COLLECTION ? m->u.coll.n : (size_t)m->u.mat.rows;
    if (m->kind == NF_KIND_MATRIX && !m->u.mat.row_names)
        return FAIL_NODE(run->err, run->node, NF_EDATA, "maps is a matrix whose rows have no names, so their "
                         "subjects are unknown: give the per-subject collection (e.g. fixed_effects.effect or a "
                         "load of sub-*_ files), whose maps are labelled sub-XX");
    const char **labels = nf_calloc(n + 1, sizeof *labels);
    if (!labels)
        return NF_FAIL(run->err, NF_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        labels[i] = m->kind == NF_KIND_COLLECTION ? m->u.coll.items[i]->label : m->u.mat.row_names[i];
    struct nf_value *design = NULL;
    char *summary = NULL;
    int rc = group_design_build(p, &t->u.tab, t->path ? t->path : "participants", labels, n, &design, &summary,
                                run->err);
    free(labels);
    if (rc < 0)
        return nf_error_on_node(run->node, run->err, rc);
    if (summary)
        nf_log("nlflow: node '%s': %s", nf_node_id(run->node), summary);
    free(summary);
    run->out[GROUP_DESIGN_OUT] = design;
    return 0;
}

/* node_type.methods */
static char *group_design_methods(const void *params)
{
    const struct group_design_params *p = params;
    struct nf_strbuf cols;
    nf_strbuf_init(&cols);
    for (size_t i = 0; i < p->columns.n; i++)
        nf_strbuf_addf(&cols, "%s%s%s", i == 0 ? "" : i + 1 < p->columns.n ? ", " : " and ", p->columns.v[i],
                       listed(&p->categorical, p->columns.v[i]) ? " (categorical)" : "");
    char *text = cols.oom ? NULL
                 : nf_asprintf("The group design was built from the participants table (matched to each subject's "
                               "map by its %s) with %s%s%s; numeric variables were %s, and categorical "
                               "ones coded as indicator regressors%s.",
                               id_column_of(p), cols.len ? "the regressors " : "",
                               cols.len ? cols.buf : "the columns given",
                               p->intercept ? " and an intercept" : " and no intercept",
                               p->demean ? "mean-centred over the subjects" : "used as they are",
                               p->intercept ? " with the first level in sorted order as the reference"
                                            : " (every level of the first; the others without their first level)");
    nf_strbuf_release(&cols);
    return text;
}

const struct nf_node_type nf_node_group_design = {
    .name = "group_design",
    .summary = "a group design table from participants.tsv, one row per subject map in the maps' order",
    .description =
        "Joins a BIDS participants table (the bids node's `participants` output, or a load of participants.tsv) "
        "to per-subject maps by subject: each map's label (sub-01, sub-01_task-x_space-S, a file stem with "
        "sub-01) gives its subject, which must be one row's `id_column` (participant_id; ids without \"sub-\" "
        "are read with it). The `columns` become regressors in the order given, after an `intercept` column of "
        "ones (`intercept: true`, the default): numeric columns as they are, or minus their mean over the "
        "design's rows (`demean: true`, the default); text columns, and numeric ones listed in `categorical`, "
        "as 0/1 indicator columns named column[level] (sex[M]), levels in sorted order. With an intercept each "
        "category drops its first level, the reference; without one the first category keeps every level and "
        "later ones drop their first (patsy's coding), so the design stays full rank. The run logs how each "
        "column was coded. The output (`out`) has one row per map in the maps' order, the `design` input of "
        "permute's test: glm, whose contrasts name the columns (\"patients = group[patient]\"); the columns are "
        "known before the run from the table (every participant with the used cells filled in; the run's subjects "
        "may lack a level), so that permute checks contrasts at validation when the maps are known then. A map whose "
        "subject is not in the table, a missing value (n/a or empty) in a used column, a participant listed "
        "twice, a category with one level among the subjects and a constant numeric column are errors naming "
        "the subject, row and column.",
    .version = 1,
    .params = group_design_params_table,
    .params_size = sizeof(struct group_design_params),
    .inputs = group_design_inputs,
    .outputs = group_design_outputs,
    .check = group_design_check,
    .resolve = group_design_resolve,
    .run_cpu = group_design_run,
    .methods = group_design_methods,
    .flags = NF_NODE_NO_MAP,
};
