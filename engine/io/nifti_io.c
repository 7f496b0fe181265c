/* nifti_io.c — reading and writing NIfTI images.
 *
 * Reading goes through libnifti2 (nifti_clib 3.0.1) for the header only: it
 * understands NIfTI-1, NIfTI-2, .hdr/.img pairs and either byte order. The voxel
 * data we read ourselves (voxel_source.c: mapped or pread for .nii, the whole
 * file inflated by libdeflate or streamed by zlib for .nii.gz), in chunks,
 * converting any integer or float on-disk type to float32 and applying
 * scl_slope/scl_inter (the library does not). Doing the read ourselves is what
 * lets a truncated or corrupt file become one clear NF_EIO error that names the
 * file and says how many bytes were missing, instead of library chatter on
 * stderr and a NULL. A masked read (nf_nifti_read_masked) converts only the
 * in-mask voxels of each image (of each chunk, for a zlib stream), straight
 * into the matrix, whose rows' pages each worker faults in with one call
 * just before it fills them.
 *
 * Writing is NIfTI-1 FLOAT32 only (nifti_clib 3.0.1 cannot write single-file
 * NIfTI-2). We fill the 348-byte header ourselves and write it with zlib so that
 * every write error is seen (nifti_image_write returns void), into a temporary
 * file in the same folder that is renamed over the final name on success. A
 * .nii.gz of up to WHOLE_GZIP_MAX bytes (statistical maps) is compressed in one
 * buffer by libdeflate when the build has it: 2-3x faster than zlib's stream
 * at the same level, and the same gzip format.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <nifti2_io.h>
#include <zlib.h>
#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "run/events.h"
#include "io.h"
#include "voxel_source.h"
#include "core/util.h"

/* Voxels converted per chunk: bounds the scratch buffer to 2 MiB (int64). */
#define CHUNK_VOXELS ((size_t)1 << 18)
/* Voxels per chunk of a masked read: 128 KiB of float32, as cat reads, so that
 * a pread copy lands in cache and the scatter reads it from there (a mapped
 * or inflated file is walked in the same steps, with no copy). */
#define MASKED_CHUNK_VOXELS ((size_t)1 << 15)
/* Images compressed whole by libdeflate: the header and data are copied
 * next to each other, so the bound keeps that copy small. */
#define WHOLE_GZIP_MAX ((size_t)256 << 20)
/* The gzip level of written .nii.gz (zlib's and libdeflate's 6 compress alike). */
#define GZIP_LEVEL 6
/* NIfTI-1 dims are int16. */
#define NIFTI1_MAX_DIM 32767

static pthread_once_t quiet_once = PTHREAD_ONCE_INIT;

static void quiet_nifti_library(void)
{
    /* The library prints its own diagnostics to stderr; ours replace them. */
    nifti_set_debug_level(0);
}

/* The name to put in messages: the path as the user gave it. */
static const char *display_name(const char *path)
{
    return path ? path : "(null)";
}

static bool datatype_supported(int dt)
{
    switch (dt) {
    case DT_UINT8: case DT_INT8: case DT_INT16: case DT_UINT16:
    case DT_INT32: case DT_UINT32: case DT_INT64: case DT_UINT64:
    case DT_FLOAT32: case DT_FLOAT64:
        return true;
    default:
        return false;
    }
}

static int datatype_size(int dt)
{
    switch (dt) {
    case DT_UINT8: case DT_INT8: return 1;
    case DT_INT16: case DT_UINT16: return 2;
    case DT_INT32: case DT_UINT32: case DT_FLOAT32: return 4;
    case DT_INT64: case DT_UINT64: case DT_FLOAT64: return 8;
    default: return 0;
    }
}

static uint32_t swap32(uint32_t x) { return __builtin_bswap32(x); }

/* Check the fields that libnifti2 rejects with an unconditional message on
 * stderr (sizeof_hdr, dim[], datatype), so that a bad file gets our message
 * only. The header is read through zlib, which reads plain files as they are. */
static int precheck_header(const char *path, struct nf_error *err)
{
    unsigned char h[540];
    int32_t size32;
    int64_t dim[8];
    int16_t dt16;
    int version, got;
    bool swap;
    gzFile fp;

    if (nf_path_has_suffix(path, ".img"))
        return 0;   /* an ANALYZE/NIfTI pair named by its data file: the library finds the .hdr */
    errno = 0;
    fp = gzopen(path, "rb");
    if (!fp)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno ? errno : EIO));
    got = gzread(fp, h, sizeof h);
    gzclose(fp);
    if (got < 348)
        return NF_FAIL(err, NF_EIO,
                       "cannot read '%s': file is truncated or not NIfTI (got %d header "
                       "bytes, expected at least 348)", path, got < 0 ? 0 : got);
    memcpy(&size32, h, 4);
    swap = size32 != 348 && size32 != 540;
    if (swap)
        size32 = (int32_t)swap32((uint32_t)size32);
    if (size32 != 348 && size32 != 540)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': not a NIfTI-1/2 image "
                       "(sizeof_hdr is not 348 or 540)", path);
    version = size32 == 540 ? 2 : 1;
    if (version == 2 && got < 540)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': file is truncated inside the "
                       "NIfTI-2 header", path);
    for (int a = 0; a < 8; a++) {
        if (version == 1) {
            int16_t v;
            memcpy(&v, h + 40 + 2 * a, 2);
            dim[a] = swap ? (int16_t)__builtin_bswap16((uint16_t)v) : v;
        } else {
            int64_t v;
            memcpy(&v, h + 16 + 8 * a, 8);
            dim[a] = swap ? (int64_t)__builtin_bswap64((uint64_t)v) : v;
        }
    }
    memcpy(&dt16, h + (version == 1 ? 70 : 12), 2);
    if (swap)
        dt16 = (int16_t)__builtin_bswap16((uint16_t)dt16);
    if (dim[0] < 1 || dim[0] > 7)
        return NF_FAIL(err, NF_EDATA, "cannot read '%s': header dim[0] is %lld "
                       "(expected 1 to 7)", path, (long long)dim[0]);
    for (int a = 1; a <= dim[0]; a++)
        if (dim[a] < 1 && !(a == 4 && dim[a] == 0))
            return NF_FAIL(err, NF_EDATA, "cannot read '%s': dimension %d has size %lld "
                           "(expected >= 1)", path, a, (long long)dim[a]);
    if (!datatype_supported(dt16))
        return NF_FAIL(err, NF_EDATA, "cannot read '%s': voxel type %s (code %d) is not "
                       "supported (expected an integer or float type)", path,
                       nifti_datatype_string(dt16), dt16);
    return 0;
}

/* Open the header with libnifti2 and learn its on-disk version (nim->nifti_type
 * says 1 for NIfTI-2 files). On success *out is owned by the caller. */
static int open_header(const char *path, nifti_image **out, int *version,
                       struct nf_error *err)
{
    struct stat st;
    nifti_image *nim = NULL;
    void *hdr = NULL;
    int ver = 0, rc;

    pthread_once(&quiet_once, quiet_nifti_library);
    if (!path || stat(path, &st) != 0)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': %s", display_name(path),
                       path ? strerror(errno) : "no path given");
    if (S_ISDIR(st.st_mode))
        return NF_FAIL(err, NF_EIO, "cannot read '%s': is a folder, expected a NIfTI file",
                       path);
    if (nf_special_file_kind(st.st_mode))
        return NF_FAIL(err, NF_EIO, "cannot read '%s': it is %s, not a regular file", path,
                       nf_special_file_kind(st.st_mode));

    NF_TRY(rc = precheck_header(path, err));
    /* check = 0: with 1, 3.0.1 prints "looks bad" on stderr even for headers
     * it then accepts; precheck_header and nifti_image_read do the checking. */
    hdr = nifti_read_header(path, &ver, 0);
    if (!hdr)
        goto not_nifti;
    free(hdr);
    nim = nifti_image_read(path, 0);
    if (!nim)
        goto not_nifti;
    *out = nim;
    *version = ver >= 2 ? 2 : 1;
    return 0;

not_nifti:
    return NF_FAIL(err, NF_EIO,
                   "cannot read '%s': not a NIfTI-1/2 image, or its header is truncated or corrupt",
                   path);
fail:
    return rc;
}

/* Check dims and fill the info struct from an opened header. */
static int info_from_header(const char *path, const nifti_image *nim, int version,
                            struct nf_nifti_info *info, struct nf_error *err)
{
    int64_t d[8];
    int64_t ndim_on_disk = nim->dim[0];
    int64_t nvox;

    memset(info, 0, sizeof *info);
    if (ndim_on_disk < 1 || ndim_on_disk > 7)
        return NF_FAIL(err, NF_EDATA,
                       "cannot read '%s': header dim[0] is %lld (expected 1 to 7)",
                       path, (long long)ndim_on_disk);
    /* Dimensions past dim[0] do not exist; dim[4] = 0 (ITK) means 1. */
    for (int a = 1; a <= 7; a++) {
        d[a] = a <= ndim_on_disk ? nim->dim[a] : 1;
        if (a == 4 && d[a] == 0)
            d[a] = 1;
        if (d[a] < 1)
            return NF_FAIL(err, NF_EDATA,
                           "cannot read '%s': dimension %d has size %lld (expected >= 1)",
                           path, a, (long long)d[a]);
    }
    for (int a = 5; a <= 7; a++)
        if (d[a] > 1)
            return NF_FAIL(err, NF_EDATA,
                           "cannot read '%s': %d-D images are not supported "
                           "(got %lldx%lldx%lldx%lldx%lld..., expected 3-D or 4-D)",
                           path, (int)ndim_on_disk, (long long)d[1], (long long)d[2],
                           (long long)d[3], (long long)d[4], (long long)d[5]);
    if (__builtin_mul_overflow(d[1], d[2], &nvox) || __builtin_mul_overflow(nvox, d[3], &nvox) ||
        __builtin_mul_overflow(nvox, d[4], &nvox) ||
        (uint64_t)nvox > SIZE_MAX / sizeof(float) / 8)
        return NF_FAIL(err, NF_EDATA,
                       "cannot read '%s': image is too large (%lldx%lldx%lldx%lld voxels)",
                       path, (long long)d[1], (long long)d[2], (long long)d[3],
                       (long long)d[4]);
    if (!datatype_supported(nim->datatype))
        return NF_FAIL(err, NF_EDATA,
                       "cannot read '%s': voxel type %s is not supported "
                       "(expected an integer or float type)",
                       path, nifti_datatype_string(nim->datatype));

    struct nf_grid *g = &info->grid;
    for (int a = 0; a < 3; a++) {
        double p = fabs(nim->pixdim[a + 1]);
        g->dim[a] = d[a + 1];
        g->pixdim[a] = (isfinite(p) && p > 0) ? p : 1.0;
    }
    g->sform_code = nim->sform_code;
    g->qform_code = nim->qform_code;
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++) {
            double v;
            if (nim->sform_code > 0)
                v = nim->sto_xyz.m[r][c];
            else if (nim->qform_code > 0)
                v = nim->qto_xyz.m[r][c];
            else
                v = (r == c) ? (r < 3 ? g->pixdim[r] : 1.0) : 0.0;
            if (!isfinite(v))
                return NF_FAIL(err, NF_EDATA,
                               "cannot read '%s': the %s affine has non-finite entries",
                               path, nim->sform_code > 0 ? "sform" : "qform");
            g->affine[r][c] = v;
        }

    info->ndim = (ndim_on_disk >= 4 && nim->dim[4] >= 1) ? 4 : 3;
    info->nt = d[4];
    info->datatype = nim->datatype;
    info->version = version;
    info->tr = 0;
    if (info->ndim == 4) {
        double tr = nim->pixdim[4];
        int unit = nim->time_units;
        if (unit == NIFTI_UNITS_MSEC)
            tr /= 1e3;
        else if (unit == NIFTI_UNITS_USEC)
            tr /= 1e6;
        info->tr = (isfinite(tr) && tr > 0) ? tr : 0;
    }
    return 0;
}

int nf_nifti_read_info(const char *path, struct nf_nifti_info *info, struct nf_error *err)
{
    nifti_image *nim = NULL;
    int version = 0, rc;

    NF_TRY(rc = open_header(path, &nim, &version, err));
    NF_TRY(rc = info_from_header(path, nim, version, info, err));
    nifti_image_free(nim);
    return 0;
fail:
    nifti_image_free(nim);
    return rc;
}

/* Convert n voxels of on-disk type dt (already in CPU byte order) to float. */
static void convert_to_float(int dt, const unsigned char *raw, float *out, size_t n,
                             bool scale, double slope, double inter)
{
#define CONVERT(T)                                                      \
    for (size_t i = 0; i < n; i++) {                                    \
        T x;                                                            \
        memcpy(&x, raw + i * sizeof x, sizeof x);                       \
        out[i] = scale ? (float)(slope * (double)x + inter) : (float)x; \
    }                                                                   \
    break
    switch (dt) {
    case DT_UINT8:   CONVERT(uint8_t);
    case DT_INT8:    CONVERT(int8_t);
    case DT_INT16:   CONVERT(int16_t);
    case DT_UINT16:  CONVERT(uint16_t);
    case DT_INT32:   CONVERT(int32_t);
    case DT_UINT32:  CONVERT(uint32_t);
    case DT_INT64:   CONVERT(int64_t);
    case DT_UINT64:  CONVERT(uint64_t);
    case DT_FLOAT32: CONVERT(float);
    case DT_FLOAT64: CONVERT(double);
    default: break;   /* rejected by info_from_header */
    }
#undef CONVERT
}

/* An open stream of voxel data: read in order, converted to float32 and
 * scaled, CHUNK_VOXELS at a time, so callers choose how much to hold. The
 * bytes come from voxel_source.c (mapped, pread, or the whole file inflated). */
struct voxel_reader {
    const char *path;
    const nifti_image *nim;
    int size;
    bool swap, scale;
    double slope, inter;
    struct nf_voxel_view view; /* sequential reads: this thread's window or scratch */
    int64_t next;              /* sequential reads: the next voxel of the file */
    struct nf_voxel_source src;
};

static void reader_close(struct voxel_reader *r)
{
    nf_voxel_source_close(&r->src);
    nf_voxel_view_release(&r->view);
    memset(r, 0, sizeof *r);
    r->src.fd = -1;
}

static int reader_open(struct voxel_reader *r, const char *path, const nifti_image *nim,
                       int64_t nvox_total, struct nf_error *err)
{
    int rc = 0;
    memset(r, 0, sizeof *r);
    r->src.fd = -1;
    r->path = path;
    r->nim = nim;
    r->size = datatype_size(nim->datatype);
    r->swap = nim->byteorder != nifti_short_order() && r->size > 1;
    r->scale = nim->scl_slope != 0 && isfinite(nim->scl_slope);
    r->slope = nim->scl_slope;
    r->inter = isfinite(nim->scl_inter) ? nim->scl_inter : 0.0;
    if (!nim->iname || nim->iname_offset < 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot read '%s': header names no image data", path);
        goto fail;
    }
    NF_TRY(rc = nf_voxel_source_open(&r->src, path, nim->iname, (uint64_t)nim->iname_offset,
                                     (uint64_t)nvox_total * (uint64_t)r->size, !r->swap, err));
    return 0;
fail:
    reader_close(r);
    return rc;
}

/* The raw bytes of n voxels from voxel `first` of the file on, in CPU byte
 * order, through the calling thread's view. */
static int reader_raw_at(struct voxel_reader *r, struct nf_voxel_view *view, int64_t first,
                         size_t n, unsigned char **raw, struct nf_error *err)
{
    if (nf_interrupt_pending())   /* a big .nii.gz takes seconds; a chunk, milliseconds */
        return NF_FAIL(err, NF_EINTR, "interrupted while reading '%s'", r->path);
    int rc = nf_voxel_source_read_at(&r->src, view, (uint64_t)first * (uint64_t)r->size,
                                     n * (size_t)r->size, raw, err);
    if (rc == 0 && r->swap)
        nifti_swap_Nbytes((int64_t)n, r->size, *raw);
    return rc;
}

/* The next nvox voxels into out. */
static int reader_read(struct voxel_reader *r, int64_t nvox, float *out, struct nf_error *err)
{
    for (int64_t done = 0; done < nvox;) {
        size_t n = (size_t)(nvox - done) < CHUNK_VOXELS ? (size_t)(nvox - done) : CHUNK_VOXELS;
        unsigned char *raw;
        int rc = reader_raw_at(r, &r->view, r->next, n, &raw, err);
        if (rc < 0)
            return rc;
        convert_to_float(r->nim->datatype, raw, out + done, n, r->scale, r->slope, r->inter);
        r->next += (int64_t)n;
        done += (int64_t)n;
    }
    return 0;
}

/* The in-mask voxels of an image in storage order: voxel offset[k] of the
 * image is column column[k] of the matrix, and chunk j of the image (voxels
 * j·MASKED_CHUNK_VOXELS on) holds entries chunk_first[j] to chunk_first[j + 1] - 1.
 * Reading in this order streams through each chunk while it is in cache; the
 * writes jump, but within one row, which stays in cache too (columns follow
 * C order, storage is i fastest). 32-bit entries halve the index traffic,
 * which is read once per image. That order serves a zlib stream, which is
 * read in order (the only source these tables are built for); a file read at
 * random (mapped, pread or inflated whole) is gathered in column order
 * instead through `gather` (gather_converted). */
struct storage_order {
    uint32_t *offset, *column;
    int64_t *chunk_first;
    int64_t n, n_chunks;
    uint32_t *gather;   /* random access: gather[c] = storage offset of column c */
};

/* `gather` always; the storage-order tables only for a source read in order
 * (a zlib stream): building them walks a table of the whole grid. */
static int storage_order_make(const struct nf_geom *geom, int64_t nvox, bool in_order,
                              struct storage_order *o)
{
    o->n = geom->n_voxels;
    if (!(o->gather = nf_malloc_array((size_t)o->n, sizeof *o->gather)))
        return -1;
    for (int64_t c = 0; c < o->n; c++)
        o->gather[c] = (uint32_t)geom->index[c];
    if (!in_order)
        return 0;
    o->n_chunks = (nvox + (int64_t)MASKED_CHUNK_VOXELS - 1) / (int64_t)MASKED_CHUNK_VOXELS;
    uint32_t *column_at = nf_malloc_array((size_t)nvox, sizeof *column_at);
    o->offset = nf_malloc_array((size_t)o->n, sizeof *o->offset);
    o->column = nf_malloc_array((size_t)o->n, sizeof *o->column);
    o->chunk_first = nf_malloc_array((size_t)o->n_chunks + 1, sizeof *o->chunk_first);
    if (!column_at || !o->offset || !o->column || !o->chunk_first) {
        free(column_at);
        return -1;
    }
    memset(column_at, 0xff, (size_t)nvox * sizeof *column_at);   /* UINT32_MAX: outside */
    for (int64_t c = 0; c < o->n; c++)
        column_at[geom->index[c]] = (uint32_t)c;
    int64_t k = 0;
    for (int64_t v = 0; v < nvox; v++) {
        if (v % (int64_t)MASKED_CHUNK_VOXELS == 0)
            o->chunk_first[v / (int64_t)MASKED_CHUNK_VOXELS] = k;
        if (column_at[v] != UINT32_MAX) {
            o->offset[k] = (uint32_t)v;
            o->column[k++] = column_at[v];
        }
    }
    o->chunk_first[o->n_chunks] = k;
    free(column_at);
    return 0;
}

static void storage_order_release(struct storage_order *o)
{
    free(o->offset);
    free(o->column);
    free(o->chunk_first);
    free(o->gather);
}

/* row[column[k]] = voxel offset[k] - first of raw, converted as convert_to_float
 * does, for the n entries given; non-finite values become 0 (returns how many). */
static int64_t scatter_converted(int dt, const unsigned char *raw, uint32_t first,
                                 const uint32_t *offset, const uint32_t *column, int64_t n,
                                 bool scale, double slope, double inter, float *row)
{
    int64_t bad = 0;
#define SCATTER(T)                                                                   \
    for (int64_t k = 0; k < n; k++) {                                                \
        T x;                                                                         \
        memcpy(&x, raw + (size_t)(offset[k] - first) * sizeof x, sizeof x);          \
        float f = scale ? (float)(slope * (double)x + inter) : (float)x;             \
        if (!isfinite(f)) {                                                          \
            f = 0.0f;                                                                \
            bad++;                                                                   \
        }                                                                            \
        row[column[k]] = f;                                                          \
    }                                                                                \
    break
    switch (dt) {
    case DT_UINT8:   SCATTER(uint8_t);
    case DT_INT8:    SCATTER(int8_t);
    case DT_INT16:   SCATTER(int16_t);
    case DT_UINT16:  SCATTER(uint16_t);
    case DT_INT32:   SCATTER(int32_t);
    case DT_UINT32:  SCATTER(uint32_t);
    case DT_INT64:   SCATTER(int64_t);
    case DT_UINT64:  SCATTER(uint64_t);
    case DT_FLOAT32: SCATTER(float);
    case DT_FLOAT64: SCATTER(double);
    default: break;   /* rejected by info_from_header */
    }
#undef SCATTER
    return bad;
}

/* row[c] = voxel gather[c] of raw (one whole image), converted as
 * convert_to_float does, columns in order; non-finite values become 0
 * (returns how many). Columns follow C order, so consecutive columns step
 * through k and read one float per cache line of the image; the next 15
 * columns of the same x read the same lines again, which an image-sized
 * working set of (j, k) lines (under 1 MiB) keeps in L2. The writes are
 * sequential, unlike a scatter in storage order, and the index is 4 bytes
 * a voxel instead of 8. */
static int64_t gather_converted(int dt, const unsigned char *raw, const uint32_t *gather,
                                int64_t n, bool scale, double slope, double inter, float *row)
{
    int64_t bad = 0;
    enum { AHEAD = 256 };   /* columns between a prefetch and its use */
#define GATHER(T)                                                                    \
    for (int64_t c = 0; c < n; c++) {                                                \
        if (c + AHEAD < n)                                                           \
            __builtin_prefetch(raw + (size_t)gather[c + AHEAD] * sizeof(T));         \
        T x;                                                                         \
        memcpy(&x, raw + (size_t)gather[c] * sizeof x, sizeof x);                    \
        float f = scale ? (float)(slope * (double)x + inter) : (float)x;             \
        if (!isfinite(f)) {                                                          \
            f = 0.0f;                                                                \
            bad++;                                                                   \
        }                                                                            \
        row[c] = f;                                                                  \
    }                                                                                \
    break
    switch (dt) {
    case DT_UINT8:   GATHER(uint8_t);
    case DT_INT8:    GATHER(int8_t);
    case DT_INT16:   GATHER(int16_t);
    case DT_UINT16:  GATHER(uint16_t);
    case DT_INT32:   GATHER(int32_t);
    case DT_UINT32:  GATHER(uint32_t);
    case DT_INT64:   GATHER(int64_t);
    case DT_UINT64:  GATHER(uint64_t);
    case DT_FLOAT32: GATHER(float);
    case DT_FLOAT64: GATHER(double);
    default: break;   /* rejected by info_from_header */
    }
#undef GATHER
    return bad;
}

/* The masked read, shared by its workers: each claims the next few images
 * (a run of about 12 MiB, which one window of a mapped file holds, so that
 * each window is mapped once) and gathers each image's in-mask voxels into
 * its row (a zlib stream: chunk by chunk, scattered while the chunk is in
 * cache).
 * Images are independent, so workers overlap one image's read (the page
 * faults of a window, the kernel's copy, or the walk through the inflated
 * file) with another's scatter. */
struct masked_read {
    struct voxel_reader *r;
    const struct storage_order *o;
    int64_t nvox, nt, cols, images_per_claim;
    float *out;
    pthread_mutex_t lock;
    int64_t next_image, n_nonfinite;
    int rc;                   /* the first failure, in err */
    struct nf_error err;
};

/* One image into its row. */
static int masked_image(struct masked_read *m, struct nf_voxel_view *view, int64_t t,
                        int64_t *bad, struct nf_error *err)
{
    const struct voxel_reader *r = m->r;
    const struct storage_order *o = m->o;
    float *row = m->out + t * m->cols;
    /* the row's fresh pages, faulted in by the thread that fills them, in
     * one call and just before the writes (so that they are still in cache) */
    nf_populate_for_write(row, (size_t)m->cols * sizeof *row);
    if (nf_voxel_source_random_access(&r->src)) {   /* the whole image at once */
        unsigned char *raw;
        int rc = reader_raw_at(m->r, view, t * m->nvox, (size_t)m->nvox, &raw, err);
        if (rc < 0)
            return rc;
        *bad += gather_converted(r->nim->datatype, raw, o->gather, o->n, r->scale, r->slope,
                                 r->inter, row);
        nf_voxel_source_done_with(&m->r->src, (uint64_t)(t * m->nvox) * (uint64_t)r->size,
                                  (size_t)m->nvox * (size_t)r->size);
        return 0;
    }
    for (int64_t j = 0; j < o->n_chunks; j++) {
        int64_t done = j * (int64_t)MASKED_CHUNK_VOXELS;
        size_t n = (size_t)(m->nvox - done) < MASKED_CHUNK_VOXELS ? (size_t)(m->nvox - done)
                                                                  : MASKED_CHUNK_VOXELS;
        unsigned char *raw;
        int rc = reader_raw_at(m->r, view, t * m->nvox + done, n, &raw, err);
        if (rc < 0)
            return rc;
        int64_t k = o->chunk_first[j];
        *bad += scatter_converted(r->nim->datatype, raw, (uint32_t)done, o->offset + k,
                                  o->column + k, o->chunk_first[j + 1] - k, r->scale, r->slope,
                                  r->inter, row);
    }
    return 0;
}

static void *masked_worker(void *arg)
{
    struct masked_read *m = arg;
    struct nf_voxel_view view = { 0 };
    struct nf_error err = { 0 };
    int64_t bad = 0;
    int rc = 0;
    while (rc == 0) {
        pthread_mutex_lock(&m->lock);
        int64_t first = m->rc < 0 ? m->nt : m->next_image;
        m->next_image += m->images_per_claim;
        pthread_mutex_unlock(&m->lock);
        for (int64_t t = first; t < first + m->images_per_claim && t < m->nt && rc == 0; t++)
            rc = masked_image(m, &view, t, &bad, &err);
        if (first >= m->nt)
            break;
    }
    nf_voxel_view_release(&view);
    pthread_mutex_lock(&m->lock);
    m->n_nonfinite += bad;
    if (rc < 0 && m->rc == 0) {
        m->rc = rc;
        m->err = err;
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* Every image into its row of out (nt x cols), with up to `threads` workers
 * (one for a zlib stream, which is read in order). */
static int reader_read_masked(struct voxel_reader *r, int64_t nvox, int64_t nt,
                              const struct storage_order *o, float *out, int threads,
                              int64_t *n_nonfinite, struct nf_error *err)
{
    struct masked_read m = { .r = r, .o = o, .nvox = nvox, .nt = nt, .cols = o->n, .out = out };
    pthread_t tid[64];
    int started = 0;
    if (!nf_voxel_source_random_access(&r->src) || threads < 1)
        threads = 1;
    if (threads > 64)
        threads = 64;
    if (threads > nt)
        threads = (int)nt;
    /* runs of images that a window holds, but at least four claims per worker */
    const int64_t image_bytes = nvox * r->size;
    m.images_per_claim = (int64_t)(NF_VOXEL_MAP_WINDOW * 3 / 4) / (image_bytes ? image_bytes : 1);
    if (m.images_per_claim > nt / (4 * threads))
        m.images_per_claim = nt / (4 * threads);
    if (m.images_per_claim < 1)
        m.images_per_claim = 1;
    pthread_mutex_init(&m.lock, NULL);
    while (started < threads - 1 && pthread_create(&tid[started], NULL, masked_worker, &m) == 0)
        started++;
    masked_worker(&m);   /* this thread is a worker too */
    while (started > 0)
        pthread_join(tid[--started], NULL);
    pthread_mutex_destroy(&m.lock);
    *n_nonfinite = m.n_nonfinite;
    if (m.rc < 0) {
        *err = m.err;
        return m.rc;
    }
    return 0;
}

/* Read nvox voxels of voxel data into out (float32, scaled). */
static int read_voxels(const char *path, const nifti_image *nim, int64_t nvox, float *out,
                       struct nf_error *err)
{
    struct voxel_reader r;
    int rc = reader_open(&r, path, nim, nvox, err);
    if (rc == 0)
        rc = reader_read(&r, nvox, out, err);
    reader_close(&r);
    return rc;
}

/* A file too short for what its header promises is reported before a (possibly
 * huge) volume is allocated for it. For .gz the exact size is only known after
 * reading, but deflate cannot compress better than 1032:1, which bounds it. */
static int check_file_size(const char *path, const nifti_image *nim, int64_t nvox,
                           struct nf_error *err)
{
    struct stat st;
    uint64_t need = (uint64_t)nvox * (uint64_t)datatype_size(nim->datatype), have;

    if (!nim->iname || stat(nim->iname, &st) != 0)
        return 0;   /* read_voxels reports these */
    if (nifti_is_gzfile(nim->iname)) {
        uint64_t most = (uint64_t)st.st_size * 1032u + (1u << 20);
        if (need > most)
            return NF_FAIL(err, NF_EIO,
                           "cannot read '%s': file is truncated or its header is corrupt "
                           "(expected %llu bytes of voxel data; %lld compressed bytes hold "
                           "at most %llu)", path, (unsigned long long)need,
                           (long long)st.st_size, (unsigned long long)most);
        return 0;
    }
    have = (uint64_t)st.st_size > (uint64_t)nim->iname_offset ?
           (uint64_t)st.st_size - (uint64_t)nim->iname_offset : 0;
    if (have < need)
        return NF_FAIL(err, NF_EIO,
                       "cannot read '%s': file is truncated (expected %llu bytes of voxel "
                       "data, got %llu)", path, (unsigned long long)need,
                       (unsigned long long)have);
    return 0;
}

/* What a statistical map's header says it holds (its NIfTI intent, as
 * summarize writes them): a t, r, z or p map keeps that kind when read back,
 * so that it is thresholded and shown as such (a p map as -log10 p). Other
 * intents say nothing a node uses. */
static void stat_from_intent(struct nf_value *v, const nifti_image *nim)
{
    switch (nim->intent_code) {
    case NIFTI_INTENT_TTEST: nf_value_set_stat(v, NF_STAT_T, nim->intent_p1, NULL); break;
    case NIFTI_INTENT_CORREL: nf_value_set_stat(v, NF_STAT_CORREL, nim->intent_p1, NULL); break;
    case NIFTI_INTENT_ZSCORE: nf_value_set_stat(v, NF_STAT_Z, 0, NULL); break;
    case NIFTI_INTENT_PVAL: nf_value_set_stat(v, NF_STAT_P, 0, NULL); break;
    default: break;
    }
}

/* The whole-image read behind nf_nifti_read and nf_value_materialize. */
static struct nf_value *read_volume(const char *path, struct nf_nifti_info *info_out,
                                    struct nf_error *err)
{
    nifti_image *nim = NULL;
    struct nf_nifti_info info;
    struct nf_value *v = NULL;
    int version = 0, rc;

    NF_TRY(rc = open_header(path, &nim, &version, err));
    NF_TRY(rc = info_from_header(path, nim, version, &info, err));
    NF_TRY(rc = check_file_size(path, nim, nf_grid_nvox(&info.grid) * info.nt, err));
    v = nf_value_new_volume_unfilled(&info.grid, info.ndim, info.nt, err);   /* every voxel is read */
    if (!v)
        goto fail;
    v->u.vol.tr = info.tr;
    NF_TRY(rc = read_voxels(path, nim, nf_grid_nvox(&info.grid) * info.nt,
                            v->u.vol.data, err));
    nf_value_set_path(v, path);
    stat_from_intent(v, nim);
    if (info_out)
        *info_out = info;
    nifti_image_free(nim);
    return v;

fail:
    nf_value_unref(v);
    nifti_image_free(nim);
    return NULL;
}

struct nf_value *nf_nifti_read(const char *path, struct nf_error *err)
{
    return read_volume(path, NULL, err);
}

struct nf_value *nf_nifti_read_masked(const char *path, struct nf_geom *geom, int threads,
                                      int64_t *n_nonfinite, struct nf_error *err)
{
    nifti_image *nim = NULL;
    struct nf_nifti_info info;
    struct nf_value *m = NULL;
    struct voxel_reader r = { .src.fd = -1 };
    struct storage_order order = { 0 };
    int version = 0, rc;
    *n_nonfinite = 0;

    NF_TRY(rc = open_header(path, &nim, &version, err));
    NF_TRY(rc = info_from_header(path, nim, version, &info, err));
    if (!nf_grid_same(&info.grid, &geom->grid)) {
        char a[512], b[512];
        nf_grid_describe(&info.grid, a, sizeof a);
        nf_grid_describe(&geom->grid, b, sizeof b);
        rc = NF_FAIL(err, NF_ESHAPE, "'%s' is on another grid than the mask: %s; mask %s (resample it: a "
                     "resample node with the mask as to puts it on the mask's grid)", path, a, b);
        goto fail;
    }
    const int64_t nvox = nf_grid_nvox(&info.grid), cols = geom->n_voxels;
    if (nvox >= (int64_t)UINT32_MAX) {
        rc = NF_FAIL(err, NF_EDATA, "cannot read '%s' through a mask: its 3D images have %lld "
                     "voxels (at most %u)", path, (long long)nvox, UINT32_MAX - 1);
        goto fail;
    }
    NF_TRY(rc = check_file_size(path, nim, nvox * info.nt, err));
    /* opened (for .nii.gz: inflated, its compressed copy freed) before the
     * matrix exists, so that the two copies of the file never meet it */
    NF_TRY(rc = reader_open(&r, path, nim, nvox * info.nt, err));
    if (storage_order_make(geom, nvox, !nf_voxel_source_random_access(&r.src), &order) < 0) {
        rc = NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", path);
        goto fail;
    }
    m = nf_value_new_matrix_unfilled(info.nt, cols, geom, err);   /* every element is read */
    if (!m) {
        rc = err->code;
        goto fail;
    }
    NF_TRY(rc = reader_read_masked(&r, nvox, info.nt, &order, m->u.mat.data, threads,
                                   n_nonfinite, err));
    reader_close(&r);
    storage_order_release(&order);
    nifti_image_free(nim);
    nf_value_set_path(m, path);
    return m;

fail:
    reader_close(&r);
    storage_order_release(&order);
    nf_value_unref(m);
    nifti_image_free(nim);
    return NULL;
}

struct nf_value *nf_nifti_open_lazy(const char *path, struct nf_error *err)
{
    struct nf_nifti_info info;
    struct nf_value *v = NULL;
    struct nf_grid one = {0};

    if (nf_nifti_read_info(path, &info, err) < 0)
        return NULL;
    /* Allocate a 1-voxel volume, then drop its data and take the header's shape:
     * the constructor always allocates, a lazy value holds no voxels. */
    one.dim[0] = one.dim[1] = one.dim[2] = 1;
    v = nf_value_new_volume(&one, info.ndim, 1, err);
    if (!v)
        return NULL;
    nf_free_aligned(v->u.vol.data);
    v->u.vol.data = NULL;
    v->u.vol.lazy = true;
    v->u.vol.grid = info.grid;
    v->u.vol.ndim = info.ndim;
    v->u.vol.nt = info.nt;
    v->u.vol.tr = info.tr;
    nf_value_set_path(v, path);
    if (!v->path) {
        nf_value_unref(v);
        NF_FAIL(err, NF_ENOMEM, "cannot open '%s': out of memory", path);
        return NULL;
    }
    return v;
}

struct nf_value *nf_value_materialize(struct nf_value *v, struct nf_error *err)
{
    struct nf_nifti_info info;
    struct nf_value *full;

    if (!v)
        return NULL;
    if (v->kind != NF_KIND_VOLUME || !v->u.vol.lazy)
        return nf_value_ref(v);
    full = read_volume(v->path, &info, err);
    if (!full)
        return NULL;
    /* The planner trusted the header it saw at open time; a file rewritten since
     * then must not silently change shapes under it. */
    if (!nf_grid_same(&info.grid, &v->u.vol.grid) || info.nt != v->u.vol.nt) {
        char was[256], now[256];
        nf_grid_describe(&v->u.vol.grid, was, sizeof was);
        nf_grid_describe(&info.grid, now, sizeof now);
        NF_FAIL(err, NF_EDATA,
                "'%s' changed since it was opened (got %s x %lld, expected %s x %lld)",
                v->path, now, (long long)info.nt, was, (long long)v->u.vol.nt);
        nf_value_unref(full);
        return NULL;
    }
    full->u.vol.grid = v->u.vol.grid;
    /* a TR given to the lazy value (a BIDS sidecar's) wins over the header's */
    if (v->u.vol.tr > 0)
        full->u.vol.tr = v->u.vol.tr;
    if (v->label)
        nf_value_set_label(full, v->label);
    return full;
}

/* ---- writing ---- */

static void fill_header(nifti_1_header *h, const struct nf_grid *grid, int64_t nt,
                        const struct nf_nifti_label *l)
{
    const char *descrip = l->descrip;
    nifti_dmat44 R;
    double qb, qc, qd, qx, qy, qz, dx, dy, dz, qfac;
    double zooms[3];

    memset(h, 0, sizeof *h);
    h->sizeof_hdr = 348;
    h->dim[0] = nt > 1 ? 4 : 3;
    for (int a = 1; a < 8; a++)
        h->dim[a] = 1;
    h->dim[1] = (short)grid->dim[0];
    h->dim[2] = (short)grid->dim[1];
    h->dim[3] = (short)grid->dim[2];
    h->dim[4] = (short)nt;
    h->intent_code = (short)l->intent;
    h->intent_p1 = (float)l->intent_p1;
    if (l->intent_name)
        snprintf(h->intent_name, sizeof h->intent_name, "%s", l->intent_name);
    h->datatype = DT_FLOAT32;
    h->bitpix = 32;
    h->vox_offset = 352;
    h->scl_slope = 1;
    h->scl_inter = 0;
    h->xyzt_units = NIFTI_UNITS_MM;
    if (descrip)
        snprintf(h->descrip, sizeof h->descrip, "%s", descrip);
    /* the repetition time, when known: what `design` (and nilearn) read back */
    bool timed = nt > 1 && l->tr > 0 && isfinite(l->tr);
    if (timed)
        h->xyzt_units = NIFTI_UNITS_MM | NIFTI_UNITS_SEC;

    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            R.m[r][c] = grid->affine[r][c];
    nifti_dmat44_to_quatern(R, &qb, &qc, &qd, &qx, &qy, &qz, &dx, &dy, &dz, &qfac);
    /* The qform scales by pixdim, so pixdim must be the affine's column lengths
     * for the qform to reproduce the affine; these equal the grid's pixdim for
     * any affine read from a file. A degenerate column keeps the grid's value. */
    zooms[0] = dx > 0 ? dx : grid->pixdim[0];
    zooms[1] = dy > 0 ? dy : grid->pixdim[1];
    zooms[2] = dz > 0 ? dz : grid->pixdim[2];
    for (int a = 0; a < 8; a++)
        h->pixdim[a] = 1;
    h->pixdim[0] = (float)(qfac < 0 ? -1.0 : 1.0);
    for (int a = 0; a < 3; a++)
        h->pixdim[a + 1] = (float)zooms[a];
    if (timed)
        h->pixdim[4] = (float)l->tr;
    h->quatern_b = (float)qb;
    h->quatern_c = (float)qc;
    h->quatern_d = (float)qd;
    h->qoffset_x = (float)qx;
    h->qoffset_y = (float)qy;
    h->qoffset_z = (float)qz;
    h->qform_code = (short)(grid->qform_code > 0 ? grid->qform_code : NIFTI_XFORM_SCANNER_ANAT);
    h->sform_code = (short)(grid->sform_code > 0 ? grid->sform_code : NIFTI_XFORM_SCANNER_ANAT);
    for (int c = 0; c < 4; c++) {
        h->srow_x[c] = (float)grid->affine[0][c];
        h->srow_y[c] = (float)grid->affine[1][c];
        h->srow_z[c] = (float)grid->affine[2][c];
    }
    memcpy(h->magic, "n+1", 4);
}

/* 0, -1 on a write error, 1 when interrupted (SIGINT/SIGTERM): compressing
 * a big image takes seconds, an 8 MiB piece a fraction of one. */
static int gz_write_all(gzFile fp, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    while (n > 0) {
        if (nf_interrupt_pending())
            return 1;
        unsigned piece = n > (8u << 20) ? (8u << 20) : (unsigned)n;
        int w = gzwrite(fp, p, piece);
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

#ifdef HAVE_LIBDEFLATE
/* hdr + 4 zero extension bytes + data, gzip-compressed in one call, to fp.
 * 0, -1 on a write error, NF_ENOMEM-like -2 when memory ran out. */
static int gz_write_whole(FILE *fp, const nifti_1_header *hdr, const float *data, size_t data_bytes)
{
    const size_t head = sizeof *hdr + 4, in_len = head + data_bytes;
    unsigned char *in = nf_malloc(in_len);
    struct libdeflate_compressor *z = libdeflate_alloc_compressor(GZIP_LEVEL);
    size_t bound = z ? libdeflate_gzip_compress_bound(z, in_len) : 0;
    unsigned char *out = bound ? nf_malloc(bound) : NULL;
    int rc = -2;
    if (in && z && out) {
        memcpy(in, hdr, sizeof *hdr);
        memset(in + sizeof *hdr, 0, 4);
        memcpy(in + head, data, data_bytes);
        size_t got = libdeflate_gzip_compress(z, in, in_len, out, bound);
        rc = got > 0 && fwrite(out, 1, got, fp) == got ? 0 : -1;
    }
    free(in);
    free(out);
    if (z)
        libdeflate_free_compressor(z);
    return rc;
}
#endif

int nf_nifti_write(const char *path, const struct nf_grid *grid, int64_t nt,
                   const float *data, int intent, const char *descrip,
                   struct nf_error *err)
{
    struct nf_nifti_label l = { .intent = intent, .descrip = descrip };
    return nf_nifti_write_labelled(path, grid, nt, data, &l, err);
}

int nf_nifti_write_series(const char *path, const struct nf_grid *grid, int64_t nt,
                          const float *data, double tr, const char *descrip,
                          struct nf_error *err)
{
    struct nf_nifti_label l = { .descrip = descrip, .tr = tr };
    return nf_nifti_write_labelled(path, grid, nt, data, &l, err);
}

int nf_nifti_write_labelled(const char *path, const struct nf_grid *grid, int64_t nt,
                            const float *data, const struct nf_nifti_label *l,
                            struct nf_error *err)
{
    struct nf_atomic a = {0};
    nifti_1_header hdr;
    static const unsigned char no_extension[4] = {0, 0, 0, 0};
    bool compress = nf_path_has_suffix(path, ".gz");
    gzFile fp = NULL;
    int64_t nvox;
    int rc = 0;

    if (!grid || !data || nt < 1) {
        rc = NF_FAIL(err, NF_EBUG, "cannot write '%s': no image data", display_name(path));
        goto fail;
    }
    for (int a3 = 0; a3 < 3; a3++)
        if (grid->dim[a3] < 1 || grid->dim[a3] > NIFTI1_MAX_DIM)
            goto too_big;
    if (nt > NIFTI1_MAX_DIM)
        goto too_big;
    nvox = nf_grid_nvox(grid);
    if (__builtin_mul_overflow(nvox, nt, &nvox) || (uint64_t)nvox > SIZE_MAX / sizeof(float)) {
        rc = NF_FAIL(err, NF_EDATA, "cannot write '%s': image is too large", path);
        goto fail;
    }
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 4; c++)
            if (!isfinite(grid->affine[r][c])) {
                rc = NF_FAIL(err, NF_EDATA, "cannot write '%s': affine has non-finite entries",
                             path);
                goto fail;
            }
    /* NIfTI-1 keeps the affine (srow_*, qoffset_*) and the voxel sizes in
     * float32: a larger finite double would be written as inf, a file that
     * no reader, nlflow's included, then accepts. */
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++)
            if (fabs(grid->affine[r][c]) > FLT_MAX ||
                (c < 3 && hypot(hypot(grid->affine[0][c], grid->affine[1][c]),
                                grid->affine[2][c]) > FLT_MAX)) {
                rc = NF_FAIL(err, NF_EDATA, "cannot write '%s': affine entry [%d][%d] = %g "
                             "(or its column's length) is beyond the float32 range of a "
                             "NIfTI-1 header (at most %g)", path, r, c, grid->affine[r][c],
                             (double)FLT_MAX);
                goto fail;
            }
    fill_header(&hdr, grid, nt, l);

    /* The temporary keeps the image suffix, so that a reader tool pointed at it
     * (or a crash leftover) still looks like what it is. */
    NF_TRY(rc = nf_atomic_reserve(&a, path, compress ? ".nii.gz" : ".nii", err));
#ifdef HAVE_LIBDEFLATE
    if (compress && (size_t)nvox * sizeof(float) <= WHOLE_GZIP_MAX) {
        errno = 0;
        FILE *whole = fopen(a.tmp, "wb");
        if (!whole) {
            rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", path,
                         errno ? strerror(errno) : "cannot open temporary file");
            goto fail;
        }
        int wr = gz_write_whole(whole, &hdr, data, (size_t)nvox * sizeof(float));
        if (fclose(whole) != 0 && wr == 0)
            wr = -1;
        if (wr == -2) {
            rc = NF_FAIL(err, NF_ENOMEM, "cannot write '%s': out of memory", display_name(path));
            goto fail;
        }
        if (wr < 0)
            goto write_error;
        NF_TRY(rc = nf_atomic_commit(&a, err));
        return 0;
    }
#endif
    errno = 0;
    fp = gzopen(a.tmp, compress ? "wb6" : "wbT");   /* GZIP_LEVEL */
    if (!fp) {
        rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", path,
                     errno ? strerror(errno) : "cannot open temporary file");
        goto fail;
    }
    int wr = gz_write_all(fp, &hdr, sizeof hdr);
    if (wr == 0)
        wr = gz_write_all(fp, no_extension, sizeof no_extension);
    if (wr == 0)
        wr = gz_write_all(fp, data, (size_t)nvox * sizeof(float));
    if (wr > 0) {   /* the temporary is removed below: no half-written file */
        rc = NF_FAIL(err, NF_EINTR, "interrupted while writing '%s'", display_name(path));
        goto fail;
    }
    if (wr < 0)
        goto write_error;
    {
        int zrc = gzclose(fp);
        fp = NULL;
        if (zrc != Z_OK)
            goto write_error;
    }
    NF_TRY(rc = nf_atomic_commit(&a, err));
    return 0;

write_error:
    rc = NF_FAIL(err, NF_EIO, "cannot write '%s': %s", path,
                 errno ? strerror(errno) : "write failed");
    goto fail;
too_big:
    rc = NF_FAIL(err, NF_EDATA,
                 "cannot write '%s': image %lldx%lldx%lldx%lld does not fit NIfTI-1 "
                 "(each dimension must be 1 to %d)",
                 display_name(path), grid ? (long long)grid->dim[0] : 0LL,
                 grid ? (long long)grid->dim[1] : 0LL, grid ? (long long)grid->dim[2] : 0LL,
                 (long long)nt, NIFTI1_MAX_DIM);
fail:
    if (fp)
        gzclose(fp);
    if (a.tmp)
        nf_atomic_abort(&a);
    return rc;
}

int nf_nifti_write_matrix(const char *path, const struct nf_matrix *m, int intent,
                          const char *descrip, struct nf_error *err)
{
    struct nf_nifti_label l = { .intent = intent, .descrip = descrip };
    return nf_nifti_write_matrix_labelled(path, m, &l, err);
}

int nf_nifti_write_matrix_labelled(const char *path, const struct nf_matrix *m,
                                   const struct nf_nifti_label *l, struct nf_error *err)
{
    const struct nf_geom *geom = m ? m->geom : NULL;
    float *vol = NULL;
    int64_t nvox, total;
    int rc = 0;

    if (!geom) {
        rc = NF_FAIL(err, NF_EDATA,
                     "cannot write '%s' as NIfTI: the matrix columns are not voxels "
                     "(it has no mask geometry)", display_name(path));
        goto fail;
    }
    if (m->rows < 1 || m->cols != geom->n_voxels) {
        rc = NF_FAIL(err, NF_ESHAPE,
                     "cannot write '%s': matrix is %lldx%lld (expected >= 1 rows and "
                     "%lld columns, the voxels of its mask)",
                     path, (long long)m->rows, (long long)m->cols, (long long)geom->n_voxels);
        goto fail;
    }
    nvox = nf_grid_nvox(&geom->grid);
    if (__builtin_mul_overflow(nvox, m->rows, &total) ||
        (uint64_t)total > SIZE_MAX / sizeof(float)) {
        rc = NF_FAIL(err, NF_EDATA, "cannot write '%s': image is too large", path);
        goto fail;
    }
    vol = nf_malloc((size_t)total * sizeof(float));
    if (!vol) {
        rc = NF_FAIL(err, NF_ENOMEM, "cannot write '%s': out of memory", path);
        goto fail;
    }
    for (int64_t i = 0; i < total; i++)
        vol[i] = l->outside;
    for (int64_t c = 0; c < m->cols; c++) {
        int64_t at = geom->index[c];
        if (at < 0 || at >= nvox) {
            rc = NF_FAIL(err, NF_EBUG,
                         "cannot write '%s': mask voxel %lld lies outside the grid "
                         "(offset %lld, grid has %lld voxels)",
                         path, (long long)c, (long long)at, (long long)nvox);
            goto fail;
        }
        for (int64_t r = 0; r < m->rows; r++)
            vol[r * nvox + at] = m->data[r * m->cols + c];
    }
    rc = nf_nifti_write_labelled(path, &geom->grid, m->rows, vol, l, err);

fail:
    free(vol);
    return rc;
}
