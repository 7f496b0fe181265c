/* voxel_source.h — the raw bytes of a NIfTI image's voxel data, in file order,
 * read as fast as the storage allows (voxel_source.c; used by nifti_io.c only).
 *
 * An uncompressed file is read with pread. A gzip-compressed one is read
 * whole and inflated whole with libdeflate when the build has it (every
 * member of a multi-member file), else streamed through zlib; a file that
 * libdeflate refuses is streamed through zlib too, so that a truncated or
 * corrupt one is reported at the byte where it goes wrong, as before.
 */
#ifndef NF_VOXEL_SOURCE_H
#define NF_VOXEL_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include "core/error.h"

struct nf_voxel_source {
    const char *path;          /* the image as the user named it (messages) */
    uint64_t expected;         /* bytes of voxel data the header promises */
    uint64_t got;              /* zlib stream: bytes read so far */
    int fd;                    /* uncompressed: pread at offset + pos; -1 otherwise */
    uint64_t offset;           /* where voxel data starts in the (inflated) file */
    unsigned char *inflated;   /* compressed, whole-buffer: the inflated file */
    uint64_t inflated_len;
    gzFile gz;                 /* compressed, streamed through zlib */
};

/* Open the voxel data of `path` (its data file `data_file`, the same for a
 * single-file image), starting at byte `offset`, of which `expected` bytes
 * will be asked for. A compressed file is inflated here. */
int nf_voxel_source_open(struct nf_voxel_source *s, const char *path, const char *data_file,
                         uint64_t offset, uint64_t expected, struct nf_error *err);
/* The n bytes at byte pos of the voxel data: *bytes points into the
 * inflated file, or at scratch (n bytes, filled here). The caller may modify
 * them (byte swapping). A short file is NF_EIO with the expected and the
 * available byte counts. Safe from several threads at once when
 * nf_voxel_source_random_access; a zlib stream reads in order only. */
int nf_voxel_source_read_at(struct nf_voxel_source *s, uint64_t pos, size_t n,
                            unsigned char *scratch, unsigned char **bytes, struct nf_error *err);
/* Whether read_at takes any position (pread, inflated), not only the next. */
static inline int nf_voxel_source_random_access(const struct nf_voxel_source *s)
{
    return s->gz == NULL;
}
/* Whether read_at hands out pointers into memory (no scratch needed). */
static inline int nf_voxel_source_in_memory(const struct nf_voxel_source *s)
{
    return s->inflated != NULL;
}
void nf_voxel_source_close(struct nf_voxel_source *s);

#endif
