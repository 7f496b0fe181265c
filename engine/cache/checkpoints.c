/* checkpoints.c — numbered partial chunks of a long node's computation,
 * stored under the key its final result will have (cache.h), so that a
 * killed run resumes where it stopped.
 *
 * A checkpoint chunk is one blob: the data cut into NF_CACHE_CHUNK_BYTES
 * pieces, each in its own zstd frame, with byte planes of 4 (checkpoints hold
 * float32 in practice; the planes are lossless whatever they hold).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>
#include <zstd.h>

#include "cache_internal.h"
#include "core/util.h"

int nf_cache_ckpt_put(struct nf_cache *c, struct nf_key key, int64_t index, const void *data,
                      size_t bytes, struct nf_error *err)
{
    char hex[33];
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    int rc;
    nf_key_hex(key, hex);
    cache_lock(c);
    size_t cap = 0;
    for (size_t off = 0; off < bytes; off += NF_CACHE_CHUNK_BYTES)
        cap += ZSTD_compressBound(bytes - off < NF_CACHE_CHUNK_BYTES ? bytes - off : NF_CACHE_CHUNK_BYTES);
    if (!(blob = nf_malloc(cap ? cap : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t off = 0; off < bytes; off += NF_CACHE_CHUNK_BYTES) {
        size_t n = bytes - off < NF_CACHE_CHUNK_BYTES ? bytes - off : NF_CACHE_CHUNK_BYTES, packed_len;
        NF_TRY(rc = nf_codec_pack(&c->codec, (const uint8_t *)data + off, n, 4, &packed_len, err));
        memcpy(blob + blob_len, c->codec.packed, packed_len);
        blob_len += packed_len;
    }
    if (blob_len > INT_MAX) {
        rc = NF_FAIL(err, NF_EDATA, "cache: checkpoint chunk %" PRId64 " is too large (%zu bytes "
                     "compressed); use smaller checkpoint chunks", index, blob_len);
        goto fail;
    }
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_run(c, "storing a checkpoint", err,
                       "INSERT OR REPLACE INTO ckpt(key, idx, data, raw_size, checksum) "
                       "VALUES(?1, ?2, ?3, ?4, ?5)", "tibii", hex, index, (const void *)blob,
                       (int)blob_len, (int64_t)bytes, (int64_t)XXH3_64bits(data, bytes)));
    rc = tx_commit(c, err);
fail:
    if (rc < 0)
        tx_rollback(c);
    cache_unlock(c);
    free(blob);
    return rc;
}

int nf_cache_ckpt_list(struct nf_cache *c, struct nf_key key, int64_t **indices, size_t *n,
                       struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    int64_t *v = NULL;
    size_t count = 0, cap = 0;
    int rc;
    *indices = NULL;
    *n = 0;
    nf_key_hex(key, hex);
    cache_lock(c);
    NF_TRY(rc = db_row(c, &st, "listing checkpoints", err,
                       "SELECT idx FROM ckpt WHERE key = ?1 ORDER BY idx", "t", hex));
    if (rc == 1)
        rc = SQLITE_ROW;
    for (; rc == SQLITE_ROW; rc = sqlite3_step(st)) {
        NF_TRY(rc = cache_grow(&v, count, &cap, sizeof *v, err));
        v[count++] = sqlite3_column_int64(st, 0);
    }
    if (st && rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "listing checkpoints");
        goto fail;
    }
    *indices = v;
    *n = count;
    v = NULL;
    rc = 0;
fail:
    free(v);
    sqlite3_finalize(st);
    cache_unlock(c);
    return rc;
}

/* Does the blob hold exactly the frames that `raw` bytes are cut into, each
 * saying it holds its piece's size? Checked before the raw buffer is
 * allocated: a crafted raw_size must not make us allocate without bound. */
static bool ckpt_frames_fit(const uint8_t *blob, size_t blob_len, uint64_t raw)
{
    size_t pos = 0;
    uint64_t off = 0;
    while (off < raw) {
        uint64_t n = raw - off < NF_CACHE_CHUNK_BYTES ? raw - off : NF_CACHE_CHUNK_BYTES;
        if (pos >= blob_len)
            return false;
        size_t frame = ZSTD_findFrameCompressedSize(blob + pos, blob_len - pos);
        if (ZSTD_isError(frame) || ZSTD_getFrameContentSize(blob + pos, blob_len - pos) != n)
            return false;
        pos += frame;
        off += n;
    }
    return pos == blob_len;
}

/* Decode a checkpoint blob into out (raw bytes); false when it does not match. */
static bool ckpt_decode(struct nf_codec *k, const uint8_t *blob, size_t blob_len, uint8_t *out,
                        size_t raw, uint64_t checksum)
{
    size_t pos = 0, off = 0;
    while (off < raw) {
        size_t n = raw - off < NF_CACHE_CHUNK_BYTES ? raw - off : NF_CACHE_CHUNK_BYTES;
        size_t frame = ZSTD_findFrameCompressedSize(blob + pos, blob_len - pos);
        if (ZSTD_isError(frame) || !nf_codec_unpack(k, blob + pos, frame, out + off, n, 4))
            return false;
        pos += frame;
        off += n;
    }
    return pos == blob_len && XXH3_64bits(out, raw) == checksum;
}

int delete_ckpt(struct nf_cache *c, const char *hex, int64_t index, struct nf_error *err)
{
    return db_run(c, "deleting a checkpoint", err, "DELETE FROM ckpt WHERE key = ?1 AND idx = ?2",
                  "ti", hex, index);
}

int ckpt_read(struct nf_cache *c, const char *hex, int64_t index, void **data, size_t *bytes,
              struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    uint8_t *out = NULL;
    int rc;
    NF_TRY(rc = db_row(c, &st, "reading a checkpoint", err,
                       "SELECT data, raw_size, checksum FROM ckpt WHERE key = ?1 AND idx = ?2", "ti",
                       hex, index));
    if (rc == 0)
        goto fail;
    int64_t raw = sqlite3_column_int64(st, 1);
    const uint8_t *blob = sqlite3_column_blob(st, 0);
    size_t blob_len = (size_t)sqlite3_column_bytes(st, 0);
    bool good = raw >= 0 && (blob || raw == 0) && ckpt_frames_fit(blob, blob_len, (uint64_t)raw);
    if (good && !(out = nf_malloc(raw ? (size_t)raw : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory reading a %" PRId64 "-byte checkpoint", raw);
        goto fail;
    }
    good = good && ckpt_decode(&c->codec, blob, blob_len, out, (size_t)raw,
                               (uint64_t)sqlite3_column_int64(st, 2));
    if (!good) {
        rc = 2;
        goto fail;
    }
    if (data) {
        *data = out;
        *bytes = (size_t)raw;
        out = NULL;
    }
    rc = 1;
fail:
    free(out);
    sqlite3_finalize(st);
    return rc;
}

int nf_cache_ckpt_get(struct nf_cache *c, struct nf_key key, int64_t index, void **data,
                      size_t *bytes, struct nf_error *err)
{
    char hex[33];
    *data = NULL;
    *bytes = 0;
    nf_key_hex(key, hex);
    cache_lock(c);
    int rc = ckpt_read(c, hex, index, data, bytes, err);
    if (rc == 2) {
        struct nf_error derr = { 0 };
        if (delete_ckpt(c, hex, index, &derr) < 0)
            nf_warn(NULL, "%s", derr.msg);
        nf_warn(NULL, "checkpoint chunk %" PRId64 " of cache entry %s is corrupt (checksum "
                "mismatch): recomputing it", index, hex);
        rc = 0;
    }
    cache_unlock(c);
    return rc;
}

int nf_cache_ckpt_drop(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    nf_key_hex(key, hex);
    cache_lock(c);
    int rc = db_run(c, "dropping checkpoints", err, "DELETE FROM ckpt WHERE key = ?1", "t", hex);
    cache_unlock(c);
    return rc;
}
