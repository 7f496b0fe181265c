/* voxel_source.h — the raw bytes of a NIfTI image's voxel data, in file order,
 * read as fast as the storage allows (voxel_source.c; used by nifti_io.c only).
 *
 * An uncompressed file is mapped, a window at a time, when the caller only
 * reads the bytes, and read with pread otherwise. A gzip-compressed one is read
 * whole and inflated whole with libdeflate when the build has it (every
 * member of a multi-member file), else streamed through zlib; a file that
 * libdeflate refuses is streamed through zlib too, so that a truncated or
 * corrupt one is reported at the byte where it goes wrong, as before.
 */
#ifndef NF_VOXEL_SOURCE_H
#define NF_VOXEL_SOURCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include "core/error.h"

struct nf_voxel_source {
    const char *path;          /* the image as the user named it (messages) */
    uint64_t expected;         /* bytes of voxel data the header promises */
    uint64_t got;              /* zlib stream: bytes read so far */
    int fd;                    /* uncompressed: pread at offset + pos; -1 otherwise */
    bool map;                  /* uncompressed: read through mapped windows */
    uint64_t file_size;        /* uncompressed: the file's size when opened */
    uint64_t offset;           /* where voxel data starts in the (inflated) file */
    unsigned char *inflated;   /* compressed, whole-buffer: the inflated file */
    uint64_t inflated_len;
    gzFile gz;                 /* compressed, streamed through zlib */
};

/* A mapped window holds at least this many bytes of the file (from a 2 MiB
 * boundary on): a reader that asks for runs of about 3/4 of it maps each
 * window once. */
#define NF_VOXEL_MAP_WINDOW ((uint64_t)16 << 20)

/* What one reader (one thread) holds between reads: the mapped window of a
 * plain file, or the scratch buffer that pread fills. Start it zeroed;
 * nf_voxel_view_release gives both back. */
struct nf_voxel_view {
    unsigned char *map;        /* file bytes map_at .. map_at + map_len */
    uint64_t map_at;
    size_t map_len;
    unsigned char *scratch;
    size_t scratch_len;
};

/* Open the voxel data of `path` (its data file `data_file`, the same for a
 * single-file image), starting at byte `offset`, of which `expected` bytes
 * will be asked for. A compressed file is inflated here. `read_only`: the
 * caller never modifies the bytes it is handed (no byte swapping), so that a
 * plain file may be mapped instead of copied. */
int nf_voxel_source_open(struct nf_voxel_source *s, const char *path, const char *data_file,
                         uint64_t offset, uint64_t expected, bool read_only,
                         struct nf_error *err);
/* The n bytes at byte pos of the voxel data: *bytes points into the
 * inflated file, into the view's mapped window, or at the view's scratch
 * (filled here). The caller may modify them (byte swapping) unless it opened
 * the source read_only. A short file is NF_EIO with the expected and the
 * available byte counts. Safe from several threads at once, each with its
 * own view, when nf_voxel_source_random_access; a zlib stream reads in order
 * only. */
int nf_voxel_source_read_at(struct nf_voxel_source *s, struct nf_voxel_view *view, uint64_t pos,
                            size_t n, unsigned char **bytes, struct nf_error *err);
void nf_voxel_view_release(struct nf_voxel_view *view);
/* The caller will not ask for bytes pos .. pos + n - 1 again: an inflated
 * file gives the pages wholly inside them back now (a masked read drops each
 * image once gathered, so that giving back the 1 GB inflated file is spread
 * over its workers instead of one munmap after them, and its memory shrinks
 * as it goes). Nothing for other sources. */
void nf_voxel_source_done_with(struct nf_voxel_source *s, uint64_t pos, size_t n);
/* Whether read_at takes any position (pread, inflated), not only the next. */
static inline int nf_voxel_source_random_access(const struct nf_voxel_source *s)
{
    return s->gz == NULL;
}
void nf_voxel_source_close(struct nf_voxel_source *s);

#endif
