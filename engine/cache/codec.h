/* codec.h — how the result cache turns a value into bytes and back
 * (engine-internal): a small self-checking header (kind, grid, shape, names,
 * the list of data segments) plus the arrays cut into zstd-compressed,
 * checksummed chunks. Used by the store (store.c), unit tests and the fuzz
 * target tests/fuzz/fuzz_cache_decode.c.
 *
 * Decoding trusts nothing: a cache file is shared between people and copied
 * between machines, and a record can carry a valid checksum over crafted
 * content. Every size is checked against the record's own shape and against
 * a memory bound before anything is allocated; whatever does not add up is a
 * corrupt entry (decode answers 0 and says why), never a crash.
 */
#ifndef NF_CACHE_CODEC_H
#define NF_CACHE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/value.h"

/* Raw bytes per chunk (a multiple of every element size) and the zstd level
 * (see the measurements at the top of codec.c). */
#define NF_CACHE_CHUNK_BYTES (1 << 20)
#define NF_CACHE_ZSTD_LEVEL 1

/* Compression state and buffers, one per cache handle (not thread safe). */
struct nf_codec {
    struct ZSTD_CCtx_s *cctx;
    struct ZSTD_DCtx_s *dctx;
    uint8_t *planes;       /* NF_CACHE_CHUNK_BYTES: a chunk split into byte planes */
    uint8_t *scratch;      /* NF_CACHE_CHUNK_BYTES: a decoded chunk nobody keeps (verify) */
    uint8_t *packed;       /* a compressed chunk */
    size_t packed_cap;
};
int nf_codec_init(struct nf_codec *k, struct nf_error *err);
void nf_codec_release(struct nf_codec *k);   /* zeroed or initialised */

/* Compress n <= NF_CACHE_CHUNK_BYTES raw bytes of elem-byte elements into
 * k->packed (*packed_len bytes). */
int nf_codec_pack(struct nf_codec *k, const uint8_t *raw, size_t n, uint32_t elem,
                  size_t *packed_len, struct nf_error *err);
/* Decompress one frame that must hold exactly n raw bytes into dst. */
bool nf_codec_unpack(struct nf_codec *k, const void *blob, size_t blob_len, uint8_t *dst, size_t n,
                     uint32_t elem);

/* A growing byte buffer (oom set on a failed allocation). */
struct nf_bytes {
    uint8_t *p;
    size_t len, cap;
    bool oom;
};

/* One array of a value: `bytes` raw bytes of `elem`-byte elements, read from
 * src (encode) or decoded into dst (decode; NULL when only verifying). */
struct nf_segment {
    uint32_t elem;
    uint64_t bytes;
    const void *src;
    void *dst;
};

/* A value taken apart (encode) or being rebuilt (decode, verify). */
struct nf_layout {
    enum nf_kind kind;
    uint32_t chunk_bytes;
    size_t n_segs;
    struct nf_segment *segs;
    struct nf_value *v;         /* decode: the value being filled (owned until taken) */
    uint8_t *strings;           /* table string cells, encoded: u32 length + bytes each (owned) */
    uint64_t strings_bytes;
    char shape[64];
    uint64_t raw_bytes;         /* sum of the segments */
    uint64_t n_chunks;          /* chunks the segments are cut into */
};
void nf_layout_release(struct nf_layout *L);

/* Take v apart: fill hdr (closed by its checksum) and the segments (pointing
 * into v, which must outlive L). */
int nf_layout_from_value(const struct nf_value *v, struct nf_bytes *hdr, struct nf_layout *L,
                         struct nf_error *err);
/* Parse a stored header. With `build`, also allocate the value (L->v) and point
 * the segments into it (call only after nf_layout_check_chunks agreed).
 * Returns 0, 1 when the header is corrupt (what says why), <0 on error. */
int nf_layout_from_header(const uint8_t *hdr, size_t len, bool build, struct nf_layout *L,
                          char *what, size_t what_size, struct nf_error *err);
/* Do the stored chunks agree with the header (their count and raw bytes),
 * and is the value no larger than max_bytes? 0 yes, 1 no (what says why). */
int nf_layout_check_chunks(const struct nf_layout *L, uint64_t n_chunks, uint64_t raw_bytes,
                           uint64_t max_bytes, char *what, size_t what_size);

/* One stored chunk. */
struct nf_chunk {
    int64_t idx;
    const void *data;
    size_t len;
    int64_t raw_size;
    uint64_t checksum;
};
/* A source of chunks in idx order: 1 and *out filled, 0 at the end, <0 error. */
typedef int (*nf_chunk_next_fn)(void *arg, struct nf_chunk *out, struct nf_error *err);
/* Decode and check every chunk of L into the segments' destinations (or
 * k->scratch): 0, 1 when something does not match (what says which chunk and
 * how), <0 error. */
int nf_layout_read_chunks(struct nf_codec *k, struct nf_layout *L, nf_chunk_next_fn next, void *arg,
                          char *what, size_t what_size, struct nf_error *err);
/* After the chunks of a built layout: split a table's string cells into its
 * columns and check a matrix's voxel index against its grid. 0, or 1 corrupt. */
int nf_layout_finish(struct nf_layout *L, char *what, size_t what_size);

/* The whole decoder over bytes in memory (tests, fuzzing): header, chunks in
 * idx order, a memory bound. 1 and *out (owned) when it decodes, 0 when the
 * record is corrupt (what says why), <0 on error (out of memory). */
int nf_cache_decode(struct nf_codec *k, const uint8_t *hdr, size_t hdr_len,
                    const struct nf_chunk *chunks, size_t n_chunks, uint64_t max_bytes,
                    struct nf_value **out, char *what, size_t what_size, struct nf_error *err);

/* A stored encoding checked without building the value (shards.c imports
 * encodings as they are): the header, the chunk count and sizes against it,
 * the memory bound, and with verify_data every chunk decompressed and
 * checksummed (into k->scratch). 0 good (*kind, *raw_bytes set), 1 corrupt
 * (what says why), <0 error. Cell-level checks (table strings, voxel index)
 * are left to the fetch, which deletes what fails them. */
int nf_cache_check_encoded(struct nf_codec *k, const uint8_t *hdr, size_t hdr_len, const struct nf_chunk *chunks,
                           size_t n_chunks, uint64_t max_bytes, bool verify_data, enum nf_kind *kind,
                           uint64_t *raw_bytes, char *what, size_t what_size, struct nf_error *err);

#endif
