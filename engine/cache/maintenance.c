/* maintenance.c — `nlflow cache ls/info/verify/gc/repair`: listing results,
 * statistics, re-checking every entry the way a run would read it, LRU
 * garbage collection, and rebuilding a damaged file from its intact entries.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache_internal.h"
#include "run_record.h"
#include "core/util.h"

int nf_cache_list(struct nf_cache *c, int (*fn)(const struct nf_cache_entry *e, void *arg),
                  void *arg, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    struct nf_cache_entry *v = NULL;
    size_t n = 0, cap = 0;
    int rc;
    /* collected first, so that fn may call the cache */
    cache_lock(c);
    NF_TRY(rc = db_prepare(c, c->has_origin
                                  ? "SELECT key, node_type, node_id, label, kind, shape, bytes, stored, "
                                    "created, used, pipeline, port, pipeline_path FROM results "
                                    "ORDER BY used DESC, created DESC, key"
                                  : "SELECT key, node_type, node_id, label, kind, shape, bytes, stored, "
                                    "created, used, pipeline, NULL, NULL FROM results "
                                    "ORDER BY used DESC, created DESC, key",
                           &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        NF_TRY(rc = cache_grow(&v, n, &cap, sizeof *v, err));
        struct nf_cache_entry *e = &v[n++];
        memset(e, 0, sizeof *e);
        snprintf(e->pipeline, sizeof e->pipeline, "%s", column_text(st, 10));
        snprintf(e->port, sizeof e->port, "%s", column_text(st, 11));
        if (sqlite3_column_type(st, 12) != SQLITE_NULL &&
            !(e->pipeline_path = nf_strdup(column_text(st, 12)))) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        snprintf(e->key, sizeof e->key, "%s", column_text(st, 0));
        snprintf(e->node_type, sizeof e->node_type, "%s", column_text(st, 1));
        snprintf(e->node_id, sizeof e->node_id, "%s", column_text(st, 2));
        snprintf(e->label, sizeof e->label, "%s", column_text(st, 3));
        snprintf(e->kind, sizeof e->kind, "%s", column_text(st, 4));
        snprintf(e->shape, sizeof e->shape, "%s", column_text(st, 5));
        e->bytes = (uint64_t)sqlite3_column_int64(st, 6);
        e->stored = (uint64_t)sqlite3_column_int64(st, 7);
        e->created = sqlite3_column_int64(st, 8);
        e->used = sqlite3_column_int64(st, 9);
        /* the executor labels run records so (exec_cache.c) */
        e->run_record = !e->port[0] && strcmp(e->label, NF_RUN_RECORD_LABEL) == 0;
    }
    if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "listing results");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    cache_unlock(c);
    rc = 0;
    for (size_t i = 0; i < n && rc >= 0; i++)
        rc = fn(&v[i], arg);
    for (size_t i = 0; i < n; i++)
        free((char *)v[i].pipeline_path);
    free(v);
    return rc < 0 ? rc : 0;
fail:
    sqlite3_finalize(st);
    cache_unlock(c);
    for (size_t i = 0; i < n; i++)
        free((char *)v[i].pipeline_path);
    free(v);
    return rc;
}

static int query_u64(struct nf_cache *c, const char *sql, uint64_t *out, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = db_row(c, &st, "reading statistics", err, sql, NULL);
    *out = rc == 1 ? (uint64_t)sqlite3_column_int64(st, 0) : 0;   /* aggregates: always a row */
    sqlite3_finalize(st);
    return rc < 0 ? rc : 0;
}

int nf_cache_info(struct nf_cache *c, struct nf_cache_info *info, struct nf_error *err)
{
    int rc;
    memset(info, 0, sizeof *info);
    cache_lock(c);
    NF_TRY(rc = query_u64(c, "SELECT COUNT(*) FROM results", &info->n_results, err));
    NF_TRY(rc = query_u64(c, "SELECT COALESCE(SUM(bytes), 0) FROM results", &info->bytes, err));
    NF_TRY(rc = query_u64(c, "SELECT COALESCE(SUM(stored), 0) FROM results", &info->stored, err));
    NF_TRY(rc = query_u64(c, "SELECT COUNT(*) FROM chunks", &info->n_chunks, err));
    NF_TRY(rc = query_u64(c, "SELECT COUNT(*) FROM ckpt", &info->n_ckpt_chunks, err));
    NF_TRY(rc = query_u64(c, "SELECT COUNT(*) FROM files", &info->n_files, err));
    NF_TRY(rc = query_u64(c, "SELECT COUNT(*) FROM leases", &info->n_leases, err));
    info->format = c->format;
    /* on disk: the database and its write-ahead log */
    const char *suffix[] = { "", "-wal" };
    for (int i = 0; i < 2; i++) {
        char *p = nf_asprintf("%s%s", c->path, suffix[i]);
        struct stat st;
        if (p && stat(p, &st) == 0)
            info->file_bytes += (uint64_t)st.st_size;
        free(p);
    }
    rc = 0;
fail:
    cache_unlock(c);
    return rc;
}

/* Keys of a table, collected so that the work on each can take the lock alone. */
struct key_list {
    char (*v)[33];
    int64_t *idx;         /* checkpoint index, when listing ckpt */
    size_t n, cap;
};

static int collect_keys(struct nf_cache *c, const char *sql, bool with_idx, struct key_list *k,
                        struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    cache_lock(c);
    NF_TRY(rc = db_prepare(c, sql, &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        size_t cap_v = k->cap, cap_idx = k->cap;
        NF_TRY(rc = cache_grow(&k->v, k->n, &cap_v, sizeof *k->v, err));
        if (with_idx)
            NF_TRY(rc = cache_grow(&k->idx, k->n, &cap_idx, sizeof *k->idx, err));
        k->cap = cap_v;
        snprintf(k->v[k->n], 33, "%s", column_text(st, 0));
        if (with_idx)
            k->idx[k->n] = sqlite3_column_int64(st, 1);
        k->n++;
    }
    if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "listing the cache");
        goto fail;
    }
    rc = 0;
fail:
    sqlite3_finalize(st);
    cache_unlock(c);
    return rc;
}

/* Check one result the way a run reads it (header, chunks, and for a run
 * record every cell a fetch uses); 1 and `what` when it is corrupt. Called
 * with the lock held. */
static int verify_result(struct nf_cache *c, const char *hex, char *what, size_t what_size,
                         struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    uint8_t *hdr = NULL;
    struct nf_layout L = { 0 };
    int rc;
    NF_TRY(rc = db_row(c, &st, "verifying", err,
                       c->has_origin ? "SELECT header, label, port FROM results WHERE key = ?1"
                                     : "SELECT header, label, NULL FROM results WHERE key = ?1",
                       "t", hex));
    if (rc == 0)   /* deleted meanwhile */
        goto fail;
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    bool run_record = strcmp(column_text(st, 1), NF_RUN_RECORD_LABEL) == 0 &&
                      sqlite3_column_type(st, 2) == SQLITE_NULL;
    if (!(hdr = nf_malloc(len ? len : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (len)
        memcpy(hdr, sqlite3_column_blob(st, 0), len);
    sqlite3_finalize(st);
    st = NULL;
    NF_TRY(rc = load_layout(c, hex, hdr, len, true, &L, what, what_size, err));
    if (rc == 0)
        NF_TRY(rc = read_chunks(c, hex, &L, what, what_size, err));
    if (rc == 0)
        rc = nf_layout_finish(&L, what, what_size);
    if (rc == 0 && run_record && !nf_run_record_check(L.v, what, what_size))
        rc = 1;
fail:
    sqlite3_finalize(st);
    nf_layout_release(&L);
    free(hdr);
    return rc;
}

int nf_cache_verify(struct nf_cache *c, void (*fn)(const char *key_hex, const char *what, void *arg),
                    void *arg, uint64_t *n_bad, struct nf_error *err)
{
    struct key_list results = { 0 }, ckpts = { 0 };
    char what[128];
    int rc;
    uint64_t bad = 0;
    if (n_bad)
        *n_bad = 0;
    NF_TRY(rc = collect_keys(c, "SELECT key FROM results ORDER BY key", false, &results, err));
    for (size_t i = 0; i < results.n; i++) {
        cache_lock(c);
        what[0] = 0;
        rc = verify_result(c, results.v[i], what, sizeof what, err);
        if (rc == 1)
            rc = delete_result(c, results.v[i], err);
        cache_unlock(c);
        if (rc < 0)
            goto fail;
        if (what[0]) {
            bad++;
            if (fn)
                fn(results.v[i], what, arg);
        }
    }
    NF_TRY(rc = collect_keys(c, "SELECT key, idx FROM ckpt ORDER BY key, idx", true, &ckpts, err));
    for (size_t i = 0; i < ckpts.n; i++) {
        cache_lock(c);
        rc = ckpt_read(c, ckpts.v[i], ckpts.idx[i], NULL, NULL, err);
        bool corrupt = rc == 2;
        if (corrupt)
            rc = delete_ckpt(c, ckpts.v[i], ckpts.idx[i], err);
        cache_unlock(c);
        if (rc < 0)
            goto fail;
        if (corrupt) {
            bad++;
            snprintf(what, sizeof what, "checkpoint chunk %" PRId64 " checksum mismatch", ckpts.idx[i]);
            if (fn)
                fn(ckpts.v[i], what, arg);
        }
    }
    /* Chunks without a result cannot be reached; only a foreign writer leaves them. */
    cache_lock(c);
    rc = db_exec(c, "DELETE FROM chunks WHERE key NOT IN (SELECT key FROM results)",
                 "removing unreachable chunks", err);
    cache_unlock(c);
    if (rc < 0)
        goto fail;
    if (n_bad)
        *n_bad = bad;
    rc = 0;
fail:
    free(results.v);
    free(ckpts.v);
    free(ckpts.idx);
    return rc;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp((const char *)a, (const char *)b);
}

/* Keys under a live lease, sorted (for bsearch); dead leases are deleted. */
static int live_leases(struct nf_cache *c, struct key_list *live, struct nf_error *err)
{
    sqlite3_stmt *st = NULL, *del = NULL;
    struct key_list dead = { 0 };
    int rc;
    int64_t now = now_s();
    NF_TRY(rc = db_prepare(c, "SELECT key, pid, host, heartbeat FROM leases", &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        bool alive = lease_alive(c, sqlite3_column_int64(st, 1), column_text(st, 2),
                                 sqlite3_column_int64(st, 3), now);
        struct key_list *k = alive ? live : &dead;
        NF_TRY(rc = cache_grow(&k->v, k->n, &k->cap, sizeof *k->v, err));
        snprintf(k->v[k->n++], 33, "%s", column_text(st, 0));
    }
    if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "reading leases");
        goto fail;
    }
    if (live->n)
        qsort(live->v, live->n, sizeof *live->v, cmp_key);
    if (dead.n) {
        NF_TRY(rc = db_prepare(c, "DELETE FROM leases WHERE key = ?1", &del, err));
        for (size_t i = 0; i < dead.n; i++) {
            bind_text(del, 1, dead.v[i]);
            NF_TRY(rc = db_step_done(c, del, "deleting a dead lease", err));
        }
    }
    rc = 0;
fail:
    sqlite3_finalize(st);
    sqlite3_finalize(del);
    free(dead.v);
    return rc;
}

struct gc_candidate {
    char key[33];
    uint64_t stored;
    int64_t used;
    bool pinned;
};

/* Delete the given results and their chunks, GC_BATCH per transaction. */
static int gc_delete(struct nf_cache *c, struct gc_candidate **doomed, size_t n, struct nf_error *err)
{
    sqlite3_stmt *del_chunks = NULL, *del_result = NULL;
    int rc = 0;
    bool open_tx = false;
    NF_TRY(rc = db_prepare(c, "DELETE FROM chunks WHERE key = ?1", &del_chunks, err));
    NF_TRY(rc = db_prepare(c, "DELETE FROM results WHERE key = ?1", &del_result, err));
    for (size_t i = 0; i < n; i++) {
        if (!open_tx) {
            NF_TRY(rc = tx_begin(c, err));
            open_tx = true;
        }
        bind_text(del_chunks, 1, doomed[i]->key);
        bind_text(del_result, 1, doomed[i]->key);
        NF_TRY(rc = db_step_done(c, del_chunks, "deleting a result", err));
        NF_TRY(rc = db_step_done(c, del_result, "deleting a result", err));
        if ((i + 1) % GC_BATCH == 0 || i + 1 == n) {
            open_tx = false;
            NF_TRY(rc = tx_commit(c, err));
        }
    }
fail:
    if (rc < 0)
        tx_rollback(c);
    sqlite3_finalize(del_chunks);
    sqlite3_finalize(del_result);
    return rc;
}

static int gc_run(struct nf_cache *c, uint64_t max_bytes, double older_than_days,
                  const char *keep_pipeline, bool dry_run, uint64_t *n_deleted,
                  uint64_t *bytes_freed, struct nf_error *err);

int nf_cache_gc(struct nf_cache *c, uint64_t max_bytes, double older_than_days,
                const char *keep_pipeline, uint64_t *n_deleted, uint64_t *bytes_freed,
                struct nf_error *err)
{
    return gc_run(c, max_bytes, older_than_days, keep_pipeline, false, n_deleted, bytes_freed, err);
}

int nf_cache_gc_preview(struct nf_cache *c, uint64_t max_bytes, double older_than_days,
                        uint64_t *n_deleted, uint64_t *bytes_freed, struct nf_error *err)
{
    return gc_run(c, max_bytes, older_than_days, NULL, true, n_deleted, bytes_freed, err);
}

/* The LRU selection of nf_cache_gc; with dry_run it only counts. */
static int gc_run(struct nf_cache *c, uint64_t max_bytes, double older_than_days,
                  const char *keep_pipeline, bool dry_run, uint64_t *n_deleted,
                  uint64_t *bytes_freed, struct nf_error *err)
{
    struct key_list live = { 0 };
    struct gc_candidate *cand = NULL, **doomed = NULL;
    size_t n = 0, cap = 0, n_doomed = 0;
    sqlite3_stmt *st = NULL;
    uint64_t total = 0, freed = 0;
    int rc;
    if (n_deleted)
        *n_deleted = 0;
    if (bytes_freed)
        *bytes_freed = 0;
    cache_lock(c);
    if (!dry_run) {   /* a preview deletes nothing, dead leases included */
        NF_TRY(rc = tx_begin(c, err));
        NF_TRY(rc = tx_end(c, live_leases(c, &live, err), err));
    }

    /* least recently used first */
    NF_TRY(rc = db_prepare(c, "SELECT key, stored, used, pipeline FROM results "
                              "ORDER BY used, created, key", &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        NF_TRY(rc = cache_grow(&cand, n, &cap, sizeof *cand, err));
        struct gc_candidate *k = &cand[n++];
        snprintf(k->key, sizeof k->key, "%s", column_text(st, 0));
        k->stored = (uint64_t)sqlite3_column_int64(st, 1);
        k->used = sqlite3_column_int64(st, 2);
        const char *pipeline = (const char *)sqlite3_column_text(st, 3);
        k->pinned = (keep_pipeline && pipeline && strcmp(pipeline, keep_pipeline) == 0) ||
                    (live.n && bsearch(k->key, live.v, live.n, sizeof *live.v, cmp_key));
        total += k->stored;
    }
    if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "listing results");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;

    int64_t cutoff = older_than_days >= 0 ? now_s() - (int64_t)(older_than_days * 86400.0) : INT64_MIN;
    if (n && !(doomed = nf_malloc(n * sizeof *doomed))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        struct gc_candidate *k = &cand[i];
        bool too_old = k->used < cutoff;
        bool too_big = max_bytes && total > max_bytes;
        if (k->pinned || !(too_old || too_big))
            continue;
        doomed[n_doomed++] = k;
        total -= k->stored;
        freed += k->stored;
    }
    if (dry_run) {
        if (n_deleted)
            *n_deleted = n_doomed;
        if (bytes_freed)
            *bytes_freed = freed;
        rc = 0;
        goto fail;
    }
    NF_TRY(rc = gc_delete(c, doomed, n_doomed, err));

    /* Checkpoints of a finished result are obsolete; those of a computation
     * no live process is running go when the cache is still over its size. */
    NF_TRY(rc = tx_begin(c, err));
    rc = db_exec(c, "DELETE FROM ckpt WHERE key IN (SELECT key FROM results)",
                 "deleting obsolete checkpoints", err);
    if (rc == 0 && max_bytes) {
        uint64_t ckpt_bytes = 0;
        rc = query_u64(c, "SELECT COALESCE(SUM(length(data)), 0) FROM ckpt", &ckpt_bytes, err);
        if (rc == 0 && total + ckpt_bytes > max_bytes)
            rc = db_exec(c, "DELETE FROM ckpt WHERE key NOT IN (SELECT key FROM leases)",
                         "deleting checkpoints", err);
    }
    NF_TRY(rc = tx_end(c, rc, err));

    /* Give the space back: free pages to the file system (auto_vacuum is
     * INCREMENTAL from creation), then shrink the write-ahead log. */
    NF_TRY(rc = db_exec(c, "PRAGMA incremental_vacuum", "returning free space", err));
    sqlite3_exec(c->db, "PRAGMA wal_checkpoint(TRUNCATE)", NULL, NULL, NULL);
    if (n_deleted)
        *n_deleted = n_doomed;
    if (bytes_freed)
        *bytes_freed = freed;
    rc = 0;
fail:
    sqlite3_finalize(st);
    cache_unlock(c);
    free(live.v);
    free(cand);
    free(doomed);
    return rc;
}

/* ---- repair ---- */
/* The damaged file, read-only, as a cache handle that nothing was checked
 * on (nf_cache_open would give up at the first damaged page). */
static int open_damaged(const char *path, struct nf_cache **out, struct nf_error *err)
{
    int rc;
    struct nf_cache *c = cache_alloc(path, NULL, err);
    *out = NULL;
    if (!c)
        return NF_ENOMEM;
    NF_TRY(rc = cache_connect(c, SQLITE_OPEN_READONLY, err));
    sqlite3_stmt *st = NULL;
    c->has_origin = sqlite3_prepare_v2(c->db, "SELECT port, pipeline_path FROM results", -1, &st,
                                       NULL) == SQLITE_OK;
    sqlite3_finalize(st);
    *out = c;
    return 0;
fail:
    nf_cache_close(c);
    return rc;
}

/* Row ids of results, scanning forwards and then backwards so that the rows
 * on both sides of a damaged page are found; sorted, without repeats. */
static int result_rowids(struct nf_cache *src, int64_t **ids, size_t *n, struct nf_error *err)
{
    static const char *const scans[] = { "SELECT rowid FROM results ORDER BY rowid",
                                         "SELECT rowid FROM results ORDER BY rowid DESC" };
    size_t cap = 0, k = 0;
    *ids = NULL;
    *n = 0;
    for (int s = 0; s < 2; s++) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(src->db, scans[s], -1, &st, NULL) != SQLITE_OK)
            continue;
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (cache_grow(ids, k, &cap, sizeof **ids, err) < 0) {
                sqlite3_finalize(st);
                return NF_ENOMEM;
            }
            (*ids)[k++] = sqlite3_column_int64(st, 0);
        }
        sqlite3_finalize(st);
    }
    qsort(*ids, k, sizeof **ids, cmp_i64);
    size_t u = 0;
    for (size_t i = 0; i < k; i++)
        if (u == 0 || (*ids)[u - 1] != (*ids)[i])
            (*ids)[u++] = (*ids)[i];
    *n = u;
    return 0;
}

/* Copy what `select` returns on src (?1 bound to key) into dst through
 * `insert` (one parameter per column), value for value. */
static int copy_rows(struct nf_cache *src, struct nf_cache *dst, const char *select, const char *key,
                     const char *insert, struct nf_error *err)
{
    sqlite3_stmt *from = NULL, *to = NULL;
    int rc;
    NF_TRY(rc = db_prepare(src, select, &from, err));
    NF_TRY(rc = db_prepare(dst, insert, &to, err));
    if (key)
        bind_text(from, 1, key);
    while ((rc = sqlite3_step(from)) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(from); i++)
            sqlite3_bind_value(to, i + 1, sqlite3_column_value(from, i));
        NF_TRY(rc = db_step_done(dst, to, "writing the repaired cache", err));
    }
    rc = rc == SQLITE_DONE ? 0 : db_error(src, err, rc, "reading the damaged cache");
fail:
    sqlite3_finalize(from);
    sqlite3_finalize(to);
    return rc;
}

/* Check the result at rowid in src and, when it is intact, copy its row and
 * chunks to dst in one transaction. 1 kept, 0 lost (what says why), <0 error. */
static int repair_one(struct nf_cache *src, struct nf_cache *dst, int64_t rowid, char *hex,
                      char *what, size_t what_size, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    struct nf_error rerr = { 0 };
    int rc = db_row(src, &st, "reading the damaged cache", &rerr,
                    "SELECT key FROM results WHERE rowid = ?1", "i", rowid);
    snprintf(hex, 33, "%s", rc == 1 ? column_text(st, 0) : "?");
    sqlite3_finalize(st);
    if (rc == 1)
        rc = verify_result(src, hex, what, what_size, &rerr);
    if (rc != 0) {
        if (rc < 0)   /* SQLite's words suffice: the file and the remedy are known */
            snprintf(what, what_size, "unreadable: %s", sqlite3_errmsg(src->db));
        return 0;
    }
    NF_TRY(rc = tx_begin(dst, err));
    rc = copy_rows(src, dst,
                   src->has_origin
                       ? "SELECT key, kind, shape, bytes, stored, node_type, node_id, label, pipeline, "
                         "created, used, header, port, pipeline_path FROM results WHERE key = ?1"
                       : "SELECT key, kind, shape, bytes, stored, node_type, node_id, label, pipeline, "
                         "created, used, header, NULL, NULL FROM results WHERE key = ?1",
                   hex,
                   "INSERT OR IGNORE INTO results(key, kind, shape, bytes, stored, node_type, node_id, "
                   "label, pipeline, created, used, header, port, pipeline_path) "
                   "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
                   &rerr);
    if (rc == 0)
        rc = copy_rows(src, dst, "SELECT key, idx, data, raw_size, checksum FROM chunks WHERE key = ?1",
                       hex, "INSERT OR REPLACE INTO chunks(key, idx, data, raw_size, checksum) "
                            "VALUES(?1, ?2, ?3, ?4, ?5)", &rerr);
    if (rc < 0) {
        tx_rollback(dst);
        snprintf(what, what_size, "unreadable: %s", sqlite3_errmsg(src->db));
        return 0;
    }
    NF_TRY(rc = tx_commit(dst, err));
    return 1;
fail:
    return rc;
}

int nf_cache_repair(const char *path, void (*fn)(const char *key_hex, const char *what, void *arg),
                    void *arg, uint64_t *n_kept, uint64_t *n_lost, struct nf_error *err)
{
    struct nf_cache *src = NULL, *dst = NULL;
    int64_t *ids = NULL;
    size_t n_ids = 0;
    uint64_t kept = 0, lost = 0;
    char *tmp = nf_asprintf("%s.repair", path);
    char *side[4] = { nf_asprintf("%s-wal", path), nf_asprintf("%s-shm", path),
                      nf_asprintf("%s.repair-wal", path), nf_asprintf("%s.repair-shm", path) };
    int rc;
    *n_kept = *n_lost = 0;
    if (!tmp || !side[0] || !side[1] || !side[2] || !side[3]) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = open_damaged(path, &src, err));
    /* a fresh file beside it, left from nothing */
    unlink(tmp);
    unlink(side[2]);
    unlink(side[3]);
    NF_TRY(rc = nf_cache_open(tmp, NULL, &dst, err));
    NF_TRY(rc = result_rowids(src, &ids, &n_ids, err));
    for (size_t i = 0; i < n_ids; i++) {
        char hex[33], what[160] = "";
        NF_TRY(rc = repair_one(src, dst, ids[i], hex, what, sizeof what, err));
        if (rc == 1) {
            kept++;
        } else {
            lost++;
            if (fn)
                fn(hex, what, arg);
        }
    }
    /* what each node was computed from (for --explain), as far as readable;
     * file hashes are not carried over: a damaged one would name wrong content */
    struct nf_error ignored = { 0 };
    NF_TRY(rc = tx_begin(dst, err));
    copy_rows(src, dst, "SELECT pipeline, node, key, components, time FROM nodes", NULL,
              "INSERT OR REPLACE INTO nodes(pipeline, node, key, components, time) "
              "VALUES(?1, ?2, ?3, ?4, ?5)", &ignored);
    NF_TRY(rc = tx_commit(dst, err));
    /* closing the new file folds its log into it; the old log and shared
     * memory must go before the rename, or SQLite would replay them onto it */
    nf_cache_close(dst);
    dst = NULL;
    nf_cache_close(src);
    src = NULL;
    unlink(side[0]);
    unlink(side[1]);
    if (rename(tmp, path) != 0) {
        rc = NF_FAIL(err, NF_EIO, "cache '%s': cannot replace it with the repaired copy '%s': %s",
                     path, tmp, strerror(errno));
        goto fail;
    }
    *n_kept = kept;
    *n_lost = lost;
    rc = 0;
fail:
    nf_cache_close(dst);
    nf_cache_close(src);
    if (rc < 0 && tmp) {
        unlink(tmp);
        unlink(side[2]);
        unlink(side[3]);
    }
    free(ids);
    free(tmp);
    for (int i = 0; i < 4; i++)
        free(side[i]);
    return rc;
}
