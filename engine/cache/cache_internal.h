/* cache_internal.h — what the files of the result cache share (private to
 * engine/cache/): the cache handle, the SQLite statement helpers (db.c), and
 * the value codec (codec.c) that the store (store.c), checkpoints
 * (checkpoints.c) and maintenance (maintenance.c) use. The public API is
 * cache.h; codec.h exposes the decoder to tests and the fuzz target.
 *
 * Layout of a stored result, compression measurements and durability are
 * described at the top of store.c and codec.c.
 */
#ifndef NF_CACHE_INTERNAL_H
#define NF_CACHE_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "codec.h"

enum {
    HASH_READ_BYTES = 1 << 20,
    LEASE_STALE_S = 60,           /* a foreign host's lease without heartbeat for this long is dead */
    PAGE_SIZE_BYTES = 16384,      /* SQLite's advice for large blobs: 8-16 KiB pages */
    GC_BATCH = 64,                /* results deleted per transaction, so others can write between */
};

struct nf_cache {
    char *path;
    sqlite3 *db;
    pthread_mutex_t lock;
    int busy_timeout_ms;   /* 0 while a best-effort write runs: do not wait */
    double busy_since;     /* when the current wait for a busy cache began */
    const volatile sig_atomic_t *interrupt;   /* stop waiting once it is set (may be NULL) */
    bool strict;
    int format;
    bool has_origin;       /* results has the port and pipeline_path columns */
    bool warned_busy;      /* a best-effort write gave up on a busy cache (said once) */
    char host[256];
    struct nf_codec codec;
    _Atomic uint64_t hashed_bytes;
};

/* ---- SQLite helpers (db.c) ---- */
void cache_lock(struct nf_cache *c);
void cache_unlock(struct nf_cache *c);
/* Every SQLite failure becomes NF_EIO (NF_ENOMEM for SQLITE_NOMEM) naming the
 * cache, SQLite's own words and what to do where that is not obvious. */
int db_error(struct nf_cache *c, struct nf_error *err, int rc, const char *what);
int db_exec(struct nf_cache *c, const char *sql, const char *what, struct nf_error *err);
int db_prepare(struct nf_cache *c, const char *sql, sqlite3_stmt **st, struct nf_error *err);
void bind_text(sqlite3_stmt *st, int i, const char *s);
/* A column's text, "" for NULL. */
const char *column_text(sqlite3_stmt *st, int i);
/* Step a statement that returns no rows, then reset it for the next bindings. */
int db_step_done(struct nf_cache *c, sqlite3_stmt *st, const char *what, struct nf_error *err);

/* The statement helper: prepare `sql` and bind its parameters ?1, ?2, ... from
 * `types`, one letter each: 't' text (const char *, NULL binds NULL), 'i'
 * int64_t, 'b' blob (const void *, then int length; bound without a copy).
 *   db_run: run it to completion (no rows wanted) and finalize; 0 or <0.
 *   db_row: step once; 1 with *st on the row (finalize it), 0 when there is no
 *           row (*st finalized and NULL), <0 on error (what names the step). */
int db_run(struct nf_cache *c, const char *what, struct nf_error *err, const char *sql,
           const char *types, ...);
int db_row(struct nf_cache *c, sqlite3_stmt **st, const char *what, struct nf_error *err,
           const char *sql, const char *types, ...);
/* A best-effort write (file-hash memo, node record, lease heartbeat, last
 * use): tried once without waiting for a busy cache. On failure nothing
 * happens but one warning per cache handle, none when what is NULL (a busy
 * or read-only cache still runs). */
void db_try(struct nf_cache *c, const char *what, const char *sql, const char *types, ...);

/* BEGIN IMMEDIATE, waiting (bounded by the busy timeout, and no longer once
 * an interrupt came) for another writer; COMMIT; ROLLBACK when open. */
int tx_begin(struct nf_cache *c, struct nf_error *err);
void tx_rollback(struct nf_cache *c);
int tx_commit(struct nf_cache *c, struct nf_error *err);
/* End a transaction by what its work returned: commit after rc == 0, else
 * roll back. The work's or the commit's code. */
int tx_end(struct nf_cache *c, int rc, struct nf_error *err);
/* SQLite's busy handler for this cache: waits up to the busy timeout, and
 * gives up as soon as nf_interrupted is set. */
int db_busy_handler(void *arg, int n_calls);

/* Room for element n of a growing array (*(T **)array_of, *cap elements):
 * doubles it when full. 0, or NF_ENOMEM with the array unchanged. */
int cache_grow(void *array_of, size_t n, size_t *cap, size_t elem, struct nf_error *err);

int64_t now_s(void);
int64_t now_realtime_ns(void);

/* ---- shared by the store and maintenance ---- */
/* A handle on path with o's settings (may be NULL), not connected yet. */
struct nf_cache *cache_alloc(const char *path, const struct nf_cache_opts *o, struct nf_error *err);
/* Open the SQLite connection (sqlite3_open_v2 flags) and the codec. */
int cache_connect(struct nf_cache *c, int flags, struct nf_error *err);
/* Check every chunk of a result (key hex) against its layout, decoding into
 * the segments' destinations (scratch when none): 0, 1 when corrupt (what
 * says how), <0 error. */
int read_chunks(struct nf_cache *c, const char *hex, struct nf_layout *L, char *what,
                size_t what_size, struct nf_error *err);
/* Parse a result's header and check that its chunk rows agree with it
 * (count and raw sizes) before anything is allocated: 0, 1 corrupt, <0. */
int load_layout(struct nf_cache *c, const char *hex, const uint8_t *hdr, size_t hdr_len,
                bool build, struct nf_layout *L, char *what, size_t what_size,
                struct nf_error *err);
/* Delete a result and its chunks (one transaction). */
int delete_result(struct nf_cache *c, const char *hex, struct nf_error *err);
int delete_ckpt(struct nf_cache *c, const char *hex, int64_t index, struct nf_error *err);
/* Read and check checkpoint chunk (hex, index): 1 good (*data owned when
 * data is given), 0 absent, 2 corrupt, <0 error. Called with the lock held. */
int ckpt_read(struct nf_cache *c, const char *hex, int64_t index, void **data, size_t *bytes,
              struct nf_error *err);
bool lease_alive(const struct nf_cache *c, int64_t pid, const char *host, int64_t heartbeat,
                 int64_t now);

/* Store a result in its stored encoding as it is (a shard's entries,
 * shards.c): one transaction, like nf_cache_put; checked by the caller
 * (nf_cache_check_encoded) and again by every fetch. */
int nf_cache_put_encoded(struct nf_cache *c, struct nf_key key, enum nf_kind kind, const char *shape,
                         uint64_t raw_bytes, const uint8_t *hdr, size_t hdr_len, const struct nf_chunk *chunks,
                         size_t n_chunks, const struct nf_cache_meta *meta, struct nf_error *err);

#endif
