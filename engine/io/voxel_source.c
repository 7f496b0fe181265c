/* voxel_source.c — the raw voxel bytes of a NIfTI image at disk speed.
 *
 * Reading was zlib's gzread for every file: a copy through zlib's buffer for
 * a plain .nii, and zlib's one-core inflate (2-3x slower than libdeflate) for
 * .nii.gz, which dominated loading real data. Here a plain file that the
 * caller only reads is mapped, a 16 MiB window at a time per reader: the
 * caller converts straight out of the page cache, with no copy at all (a
 * 1 GB file took 0.09 s of CPU to pread in 128 KiB pieces, as cat does, and
 * 0.01 s to map window by window, the kernel mapping its large folios whole
 * when a window starts on a 2 MiB boundary). Windows, not the whole file, so
 * that the mapped pages a reader holds (which count in its RSS) stay a few
 * MiB. A file that shrinks while mapped would raise SIGBUS; the size is
 * checked when the file is opened, and nothing of ours truncates an input.
 * Otherwise (bytes to be swapped in place, a file that cannot be mapped) it
 * is read with pread into the reader's scratch (the kernel's copy is the
 * only one), and a compressed file is read in one piece and inflated in one call per
 * gzip member by libdeflate, which has no streaming interface: the inflated
 * file is held while the caller converts or masks it, then freed. Its pages
 * are faulted in by a second thread ahead of libdeflate: a fault per 4 KiB
 * page was half the inflating thread's time on a 1 GB file.
 *
 * Whole-buffer inflation needs the output size in advance. The header gives
 * what matters (vox_offset + the voxel bytes); the 4-byte ISIZE trailer gives
 * the last member's size modulo 4 GiB, a hint only, so the buffer grows when
 * a member needs more room. A multi-member file (pigz --independent, bgzip,
 * concatenated .gz) is inflated member after member into one buffer; bytes
 * after the last member that do not start a new one are ignored, as zlib
 * ignores them. Data that libdeflate refuses (a truncated or corrupt file) is
 * streamed through zlib instead, which reports how many voxel bytes it got
 * before the fault — the message users saw before, with the same counts.
 * Builds without libdeflate stream every compressed file through zlib.
 */
#include "voxel_source.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include "core/alloc.h"

static bool is_gzip_file(const char *path)
{
    size_t n = strlen(path);
    return n >= 3 && strcmp(path + n - 3, ".gz") == 0;
}

/* The one message for voxel data that ends early, whatever the reader. */
static int truncated(const struct nf_voxel_source *s, uint64_t got, struct nf_error *err)
{
    return NF_FAIL(err, NF_EIO, "cannot read '%s': file is truncated (expected %llu bytes of "
                   "voxel data, got %llu)", s->path, (unsigned long long)s->expected,
                   (unsigned long long)got);
}

/* The view's scratch, at least `want` bytes. */
static int scratch_for(const struct nf_voxel_source *s, struct nf_voxel_view *v, size_t want,
                       struct nf_error *err)
{
    if (v->scratch_len < want || !v->scratch) {
        unsigned char *grown = nf_realloc(v->scratch, want ? want : 1);
        if (!grown)
            return NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory", s->path);
        v->scratch = grown;
        v->scratch_len = want;
    }
    return 0;
}

/* ---- zlib, streamed ---- */

static int open_streamed(struct nf_voxel_source *s, const char *data_file, struct nf_error *err)
{
    errno = 0;
    s->gz = gzopen(data_file, "rb");
    if (!s->gz)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': %s", data_file,
                       errno ? strerror(errno) : "cannot open");
    gzbuffer(s->gz, 1 << 17);
    if (gzseek(s->gz, (z_off_t)s->offset, SEEK_SET) < 0)
        return NF_FAIL(err, NF_EIO,
                       "cannot read '%s': file is truncated (expected voxel data at byte %llu)",
                       s->path, (unsigned long long)s->offset);
    return 0;
}

static int next_streamed(struct nf_voxel_source *s, size_t want, unsigned char *scratch,
                         struct nf_error *err)
{
    size_t have = 0;
    while (have < want) {
        size_t piece = want - have < (1u << 30) ? want - have : (1u << 30);
        int got = gzread(s->gz, scratch + have, (unsigned)piece);
        if (got <= 0) {
            int zerr = Z_OK;
            const char *zmsg = gzerror(s->gz, &zerr);
            s->got += have;
            if (got < 0 && zerr != Z_BUF_ERROR)
                return NF_FAIL(err, NF_EIO,
                               "cannot read '%s': corrupt compressed data after %llu bytes of "
                               "voxel data (%s)", s->path, (unsigned long long)s->got,
                               zmsg ? zmsg : "zlib error");
            return truncated(s, s->got, err);
        }
        have += (size_t)got;
    }
    s->got += have;
    return 0;
}

/* ---- plain files: mapped windows, or pread ---- */

/* Windows start on a 2 MiB boundary of the file, where the page cache's
 * large folios start. */
#define MAP_ALIGN ((uint64_t)2 << 20)

static int pread_at(struct nf_voxel_source *s, struct nf_voxel_view *v, uint64_t pos, size_t want,
                    unsigned char **bytes, struct nf_error *err)
{
    int rc = scratch_for(s, v, want, err);
    if (rc < 0)
        return rc;
    size_t have = 0;
    while (have < want) {
        ssize_t got = pread(s->fd, v->scratch + have, want - have,
                            (off_t)(s->offset + pos + have));
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return NF_FAIL(err, NF_EIO, "cannot read '%s': %s", s->path, strerror(errno));
        if (got == 0)   /* the file ends at pos + have, whoever asks */
            return truncated(s, pos + have, err);
        have += (size_t)got;
    }
    *bytes = v->scratch;
    return 0;
}

static void unmap_window(struct nf_voxel_view *v)
{
    if (v->map)
        munmap(v->map, v->map_len);
    v->map = NULL;
    v->map_at = 0;
    v->map_len = 0;
}

/* 0: *bytes points into the view's window; 1: the file cannot be mapped
 * (read it with pread). */
static int map_at(struct nf_voxel_source *s, struct nf_voxel_view *v, uint64_t pos, size_t n,
                  unsigned char **bytes, struct nf_error *err)
{
    uint64_t from = s->offset + pos, to;
    if (__builtin_add_overflow(from, (uint64_t)n, &to) || to > s->file_size)
        return truncated(s, s->file_size > s->offset ? s->file_size - s->offset : 0, err);
    if (n == 0)
        return 1;
    if (!v->map || from < v->map_at || to > v->map_at + v->map_len) {
        unmap_window(v);
        uint64_t start = from & ~(MAP_ALIGN - 1);
        uint64_t end = to > start + NF_VOXEL_MAP_WINDOW ? to : start + NF_VOXEL_MAP_WINDOW;
        if (end > s->file_size)
            end = s->file_size;
        if (end - start > SIZE_MAX)
            return 1;
        void *m = mmap(NULL, (size_t)(end - start), PROT_READ, MAP_SHARED, s->fd, (off_t)start);
        if (m == MAP_FAILED)
            return 1;
        v->map = m;
        v->map_at = start;
        v->map_len = (size_t)(end - start);
    }
    *bytes = v->map + (from - v->map_at);
    return 0;
}

/* ---- libdeflate, whole buffer ---- */

#ifdef HAVE_LIBDEFLATE
static pthread_once_t allocator_once = PTHREAD_ONCE_INIT;

/* The decompressor's own tables go through nf_malloc like everything else. */
static void use_our_allocator(void)
{
    libdeflate_set_memory_allocator(nf_malloc, free);
}

/* The whole file in memory, NULL with err set otherwise. */
static unsigned char *read_whole(const char *path, const char *data_file, size_t *len,
                                 struct nf_error *err)
{
    struct stat st;
    unsigned char *buf = NULL;
    int fd = open(data_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        NF_FAIL(err, NF_EIO, "cannot read '%s': %s", data_file, strerror(errno));
        return NULL;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        NF_FAIL(err, NF_EIO, "cannot read '%s': not a regular file", data_file);
        goto fail;
    }
    buf = nf_malloc((size_t)st.st_size);
    if (!buf) {
        NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory for its %lld compressed bytes",
                path, (long long)st.st_size);
        goto fail;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    size_t have = 0;
    while (have < (size_t)st.st_size) {
        ssize_t got = read(fd, buf + have, (size_t)st.st_size - have);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            NF_FAIL(err, NF_EIO, "cannot read '%s': %s", data_file,
                    got < 0 ? strerror(errno) : "the file shrank while it was read");
            goto fail;
        }
        have += (size_t)got;
    }
    close(fd);
    *len = have;
    return buf;
fail:
    free(buf);
    close(fd);
    return NULL;
}

static bool starts_gzip_member(const unsigned char *p, size_t n)
{
    return n >= 18 && p[0] == 0x1f && p[1] == 0x8b;
}

/* Inflate every member of in[0..in_len) into one buffer with at least `want`
 * bytes of room. 0: *out, *out_len set; 1: libdeflate refused the data;
 * < 0: out of memory (err). Stops once `want` bytes are out: the reader never
 * asks for more. */
static int inflate_whole(const char *path, const unsigned char *in, size_t in_len, uint64_t want,
                         unsigned char **out, uint64_t *out_len, struct nf_error *err)
{
    /* deflate cannot compress better than 1032:1: a bigger request is a lie */
    const uint64_t most = (uint64_t)in_len * 1032u + 4096u;
    uint64_t cap = want, hint = 0;
    if (in_len >= 18)
        hint = (uint64_t)in[in_len - 4] | (uint64_t)in[in_len - 3] << 8 |
               (uint64_t)in[in_len - 2] << 16 | (uint64_t)in[in_len - 1] << 24;
    if (hint > cap)
        cap = hint;
    if (cap == 0)
        cap = 1;
    if (cap > most || cap > SIZE_MAX)
        return 1;
    pthread_once(&allocator_once, use_our_allocator);
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    unsigned char *buf = nf_malloc((size_t)cap);
    size_t in_at = 0, out_at = 0;
    int rc = 0;
    struct nf_prefault prefault = { 0 };
    if (!d || !buf) {
        rc = NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory for %llu inflated bytes",
                     path, (unsigned long long)cap);
        goto done;
    }
    /* the inflated bytes' pages are faulted in by another thread ahead of
     * libdeflate (half of its time on one thread went to those faults) */
    nf_prefault_begin(&prefault, buf, (size_t)want);
    while (out_at < want && starts_gzip_member(in + in_at, in_len - in_at)) {
        size_t used_in = 0, used_out = 0;
        enum libdeflate_result r = libdeflate_gzip_decompress_ex(
            d, in + in_at, in_len - in_at, buf + out_at, (size_t)cap - out_at, &used_in, &used_out);
        if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
            nf_prefault_end(&prefault);   /* before the block moves */
            uint64_t bigger = cap * 2 < most ? cap * 2 : most;
            if (bigger <= cap || bigger > SIZE_MAX) {
                rc = 1;
                goto done;
            }
            unsigned char *grown = nf_realloc(buf, (size_t)bigger);
            if (!grown) {
                rc = NF_FAIL(err, NF_ENOMEM, "cannot read '%s': out of memory for %llu "
                             "inflated bytes", path, (unsigned long long)bigger);
                goto done;
            }
            buf = grown;
            cap = bigger;
            continue;   /* the member again, with room */
        }
        if (r != LIBDEFLATE_SUCCESS) {
            rc = 1;
            goto done;
        }
        in_at += used_in;
        out_at += used_out;
    }
    if (in_at == 0) {   /* not even one member: zlib says what is wrong */
        rc = 1;
        goto done;
    }
    *out = buf;
    *out_len = out_at;
    buf = NULL;
done:
    nf_prefault_end(&prefault);
    free(buf);
    libdeflate_free_decompressor(d);
    return rc;
}

/* 0: inflated; 1: fall back to zlib (the data is not valid as far as it goes). */
static int open_inflated(struct nf_voxel_source *s, const char *data_file, struct nf_error *err)
{
    size_t in_len = 0;
    uint64_t want;
    if (__builtin_add_overflow(s->offset, s->expected, &want))
        return 1;
    unsigned char *in = read_whole(s->path, data_file, &in_len, err);
    if (!in)
        return err->code;
    int rc = inflate_whole(s->path, in, in_len, want, &s->inflated, &s->inflated_len, err);
    free(in);
    return rc;
}
#endif

/* ---- the source ---- */

int nf_voxel_source_open(struct nf_voxel_source *s, const char *path, const char *data_file,
                         uint64_t offset, uint64_t expected, bool read_only,
                         struct nf_error *err)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->offset = offset;
    s->expected = expected;
    s->fd = -1;
    int rc = 0;
    if (is_gzip_file(data_file)) {
#ifdef HAVE_LIBDEFLATE
        rc = open_inflated(s, data_file, err);
        if (rc <= 0)
            goto done;
#endif
        rc = open_streamed(s, data_file, err);
        goto done;
    }
    s->fd = open(data_file, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot read '%s': %s", data_file, strerror(errno));
        goto done;
    }
    struct stat st;
    if (read_only && fstat(s->fd, &st) == 0 && S_ISREG(st.st_mode)) {
        s->map = true;
        s->file_size = (uint64_t)st.st_size;
    } else {
        (void)posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    }
done:
    if (rc < 0)
        nf_voxel_source_close(s);
    return rc < 0 ? rc : 0;
}

int nf_voxel_source_read_at(struct nf_voxel_source *s, struct nf_voxel_view *view, uint64_t pos,
                            size_t n, unsigned char **bytes, struct nf_error *err)
{
    if (s->inflated) {
        uint64_t have = s->inflated_len > s->offset ? s->inflated_len - s->offset : 0;
        if (pos > have || have - pos < n)
            return truncated(s, have, err);
        *bytes = s->inflated + s->offset + pos;
        return 0;
    }
    if (s->gz) {
        if (pos != s->got)
            return NF_FAIL(err, NF_EBUG, "cannot read '%s': a compressed stream is read in "
                           "order (asked for byte %llu after %llu)", s->path,
                           (unsigned long long)pos, (unsigned long long)s->got);
        int rc = scratch_for(s, view, n, err);
        if (rc < 0)
            return rc;
        *bytes = view->scratch;
        return next_streamed(s, n, view->scratch, err);
    }
    if (s->map) {
        int rc = map_at(s, view, pos, n, bytes, err);
        if (rc <= 0)
            return rc;
    }
    return pread_at(s, view, pos, n, bytes, err);
}

void nf_voxel_view_release(struct nf_voxel_view *view)
{
    unmap_window(view);
    free(view->scratch);
    view->scratch = NULL;
    view->scratch_len = 0;
}

void nf_voxel_source_done_with(struct nf_voxel_source *s, uint64_t pos, size_t n)
{
    if (!s->inflated)
        return;
    /* only the pages wholly inside the range: the bytes around it may be
     * another image's, still to be read */
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t from = (uintptr_t)(s->inflated + s->offset + pos);
    uintptr_t to = (from + n) & ~(page - 1);
    from = (from + page - 1) & ~(page - 1);
    if (to > from)
        madvise((void *)from, to - from, MADV_DONTNEED);
}

void nf_voxel_source_close(struct nf_voxel_source *s)
{
    if (s->gz)
        gzclose(s->gz);
    if (s->fd >= 0)
        close(s->fd);
    free(s->inflated);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}
