/* io.h — reading and writing the file formats nlflow speaks: NIfTI-1/2
 * (.nii, .nii.gz; any on-disk datatype, converted to float32 with
 * scl_slope/scl_inter applied), delimited tables (TSV/CSV with a header row),
 * and .npy arrays (float32/float64, C order).
 *
 * Header-only readers exist for the planner: they learn shapes without reading
 * voxel data. Writers are atomic (temporary file + rename).
 * NIfTI is written as NIfTI-1 FLOAT32 (Debian's nifti_clib 3.0.1 cannot write
 * single-file NIfTI-2), with the grid's affine as both sform and qform.
 */
#ifndef NF_IO_H
#define NF_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"
#include "core/value.h"

/* What kind of special file mode is ("a FIFO", "a character device", ...), or
 * NULL for a regular file or a folder. Readers refuse special files: opening a
 * FIFO blocks until someone writes to it, and a device such as /dev/urandom
 * never ends. Folders keep their own messages. */
const char *nf_special_file_kind(unsigned mode);
/* NF_EIO naming path when it (after symbolic links) is a special file. */
int nf_refuse_special_file(const char *path, struct nf_error *err);

enum nf_file_format { NF_FMT_UNKNOWN = 0, NF_FMT_NIFTI, NF_FMT_TABLE, NF_FMT_NPY };
/* From the file name: .nii/.nii.gz -> NIFTI, .tsv/.csv/.txt -> TABLE, .npy -> NPY. */
enum nf_file_format nf_file_format_of(const char *path);

/* NIfTI header: grid, ndim (3 or 4; a 4D file with nt=1 stays 4), nt.
 * Errors (missing, not NIfTI, 5D+, bad dims) name the file. */
struct nf_nifti_info {
    struct nf_grid grid;
    int ndim;
    int64_t nt;
    int datatype;        /* NIFTI datatype code on disk */
    int version;         /* 1 or 2 */
    double tr;
};
int nf_nifti_read_info(const char *path, struct nf_nifti_info *info, struct nf_error *err);
/* Read a whole image as a float32 volume value (scaling applied; NaN/inf kept
 * as is: masking decides). A truncated or corrupt file is NF_EIO naming it. */
struct nf_value *nf_nifti_read(const char *path, struct nf_error *err);
/* A lazy volume: header read now (grid, ndim, nt; data NULL, lazy = true, path
 * set), voxel data read later by nf_value_materialize. Collections of subjects
 * are lazy so that memory stays O(one subject). */
struct nf_value *nf_nifti_open_lazy(const char *path, struct nf_error *err);
/* A new reference to v with its data in memory: v itself (ref'd) when not lazy;
 * otherwise a freshly read volume (refcount 1) that the caller unrefs when done. */
struct nf_value *nf_value_materialize(struct nf_value *v, struct nf_error *err);
/* Read only the voxels of a mask geometry from a 3D/4D image: an nt x V matrix
 * (with geom) in which non-finite values are 0 (*n_nonfinite counts them).
 * Each image is read chunk by chunk and its in-mask voxels gathered into its
 * row as the chunk arrives, by up to `threads` workers (images in parallel;
 * one for a zlib-streamed .nii.gz). Memory: the matrix plus a chunk per
 * worker (.nii), or plus the inflated file (.nii.gz with libdeflate), never
 * a float copy of the 4D series. The file must be on geom's grid (NF_ESHAPE
 * otherwise). */
struct nf_value *nf_nifti_read_masked(const char *path, struct nf_geom *geom, int threads,
                                      int64_t *n_nonfinite, struct nf_error *err);
/* Write a 3D (nt == 1 and ndim == 3) or 4D float32 image. `intent` is a NIFTI
 * intent code (0 for none). */
int nf_nifti_write(const char *path, const struct nf_grid *grid, int64_t nt,
                   const float *data, int intent, const char *descrip,
                   struct nf_error *err);
/* A 4D series with its repetition time in the header (tr in seconds, > 0). */
int nf_nifti_write_series(const char *path, const struct nf_grid *grid, int64_t nt,
                          const float *data, double tr, const char *descrip,
                          struct nf_error *err);
/* Unmask rows of a matrix with a geometry into a volume (zeros outside) and write
 * it: 1 row -> 3D, k rows -> 4D. */
int nf_nifti_write_matrix(const char *path, const struct nf_matrix *m, int intent,
                          const char *descrip, struct nf_error *err);
/* What a written map's header says it holds, and what fills the voxels
 * outside its mask (p maps: 1, so that "p < 0.05" never selects them). */
struct nf_nifti_label {
    int intent;              /* NIFTI_INTENT_* code, 0 for none */
    double intent_p1;        /* first intent parameter: degrees of freedom (t, correl) */
    const char *intent_name; /* intent_name (15 characters kept), may be NULL */
    float outside;           /* matrices: value of voxels outside the mask */
    const char *descrip;     /* descrip (79 characters kept), may be NULL */
    double tr;               /* 4D images: repetition time in seconds, written as
                                pixdim[4] with xyzt_units seconds; 0 when unknown
                                (pixdim[4] = 1, no time unit, as before) */
};
int nf_nifti_write_labelled(const char *path, const struct nf_grid *grid, int64_t nt,
                            const float *data, const struct nf_nifti_label *l,
                            struct nf_error *err);
int nf_nifti_write_matrix_labelled(const char *path, const struct nf_matrix *m,
                                   const struct nf_nifti_label *l, struct nf_error *err);

/* Tables. Delimiter from the extension (.csv ','; else tab). Header required.
 * Columns that parse entirely as numbers (or n/a, NaN, empty) are numeric.
 * `columns` (may be NULL) selects and orders columns by name; an unknown name is
 * an error listing the available ones. */
struct nf_value *nf_table_read(const char *path, const char *const *columns,
                               size_t n_columns, struct nf_error *err);
/* Shape only: rows (excluding header) and selected column count. */
int nf_table_read_info(const char *path, const char *const *columns, size_t n_columns,
                       int64_t *rows, int64_t *cols, struct nf_error *err);
/* The same, and the selected column names, each followed by '\n', in *names
 * (owned; NULL allowed for not wanted). */
int nf_table_read_header(const char *path, const char *const *columns, size_t n_columns,
                         int64_t *rows, int64_t *cols, char **names, struct nf_error *err);
int nf_table_write(const char *path, const struct nf_table *t, struct nf_error *err);
/* Write a matrix as TSV with column names (or c0, c1, ...). */
int nf_matrix_write_tsv(const char *path, const struct nf_matrix *m, struct nf_error *err);

/* .npy: 1-D (n,) becomes 1×n; 2-D (r, c) becomes r×c. float32 or float64,
 * little-endian, C order; anything else is an error that says what was found. */
struct nf_value *nf_npy_read(const char *path, struct nf_error *err);
int nf_npy_read_info(const char *path, int64_t *rows, int64_t *cols, struct nf_error *err);
int nf_npy_write(const char *path, const struct nf_matrix *m, struct nf_error *err);

/* Names of an atlas's labels (labels.c): mricron's "index name [code]" text
 * (aal.nii.txt), colour look-up tables (.lut: "index name R G B [A]" or
 * "index R G B name"), BIDS _dseg.tsv (header columns index and name), chosen
 * by the file name. A malformed file (an index that is not an integer from 0
 * to NF_LABELS_MAX_INDEX, a duplicate, an empty name, binary data, no label at
 * all, a file over NF_LABELS_MAX_BYTES) is NF_EDATA naming the file and line. */
#define NF_LABELS_MAX_BYTES (16 << 20)
#define NF_LABELS_MAX_INDEX (1 << 24)   /* labels are float32 integers in a volume */
#define NF_LABELS_MAX_NAME 255
struct nf_label_name { int64_t index; char *name; int line; };
struct nf_label_names {
    size_t n;
    struct nf_label_name *v;   /* in file order */
    char *path;                /* the file they came from */
};
int nf_label_names_read(const char *path, struct nf_label_names *out, struct nf_error *err);
void nf_label_names_release(struct nf_label_names *l);
/* The name of label `index`, NULL when the file does not name it. */
const char *nf_label_name(const struct nf_label_names *l, int64_t index);
/* The label file beside an atlas volume, first found of: FILE.txt without .gz
 * (aal.nii.gz -> aal.nii.txt, as mricron-data ships them), STEM.txt, STEM.lut
 * (STEM: FILE without .nii/.nii.gz), and for STEM ending in _dseg, STEM.tsv.
 * *found: an owned path, or NULL when there is none. */
int nf_label_names_sidecar(const char *volume_path, char **found, struct nf_error *err);

#endif
