/* store.c — the result cache store: one SQLite file in WAL mode holding node
 * results as zstd-compressed, checksummed chunks, the file-hash memo, what each
 * node was last computed from, checkpoints of long nodes and leases.
 *
 * A result is a row in `results` (description, sizes, a small binary header)
 * plus rows in `chunks`. The header holds everything but the arrays: kind,
 * grid, shape, column names, numeric flags, the list of data segments, all in
 * explicit little-endian encoding and closed by an XXH3-64 of its own bytes.
 * The arrays (float data, a geometry's voxel index, a table's numeric columns
 * and its string cells) are cut into chunks of NF_CACHE_CHUNK_BYTES; each chunk row has
 * its zstd frame, its raw size and the XXH3-64 of its raw bytes. Chunks and the
 * result row are written in one BEGIN IMMEDIATE transaction, so a killed
 * process leaves the whole result or nothing; a chunk that does not decode to
 * its checksum makes the result a miss, and it is deleted so that the next run
 * stores a good copy.
 *
 * How values become a header and chunks, the compression measurements and
 * the checks on decoding are in codec.c; SQLite statements and transactions in
 * db.c; checkpoints, leases and maintenance (gc, verify, repair) in their own
 * files.
 *
 * Durability: journal_mode=WAL with synchronous=NORMAL. In WAL mode NORMAL
 * keeps the database consistent on a power loss: the last transactions
 * committed before a power cut may be rolled back, but the file is never
 * corrupted. That is the right trade for a cache, whose entries can always be
 * recomputed, and it saves an fsync per result.
 *
 * Concurrency: calls on one struct nf_cache are serialised by a mutex; several
 * processes share the file through SQLite locking with a busy timeout (that an
 * interrupt ends) and a retry loop on BEGIN IMMEDIATE; best-effort writes (the
 * file-hash memo, node records, heartbeats, last-use times) do not wait at all. Leases record (pid, host, heartbeat) so that
 * the lease of a process that died is reclaimed without anyone deleting a
 * lock file. Network file systems are refused at open (SQLite's WAL needs the
 * shared memory and locks of a local disk).
 *
 * Testing aids (environment, core/switches.h): NLFLOW_CACHE_MAX_PAGES=N sets
 * PRAGMA max_page_count (a real "disk full" after N pages of 16 KiB),
 * NLFLOW_CACHE_READONLY=1 opens the file read-only, NLFLOW_CACHE_FS_MAGIC=0x...
 * replaces the statfs file system type of the cache folder.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "cache_internal.h"
#include "core/fault.h"
#include "core/switches.h"
#include "core/util.h"

/* A file modified within this long of being hashed may change again without
 * its mtime changing (coarse timestamps), so its memo is not trusted. */
#define MTIME_GUARD_NS INT64_C(2000000000)
/* The WAL is truncated back to this after a checkpoint (a 1 GiB result passes
 * through it whole). */
#define WAL_SIZE_LIMIT "67108864"

/* ---- keys ---- */
void nf_key_hex(struct nf_key k, char out[33])
{
    snprintf(out, 33, "%016" PRIx64 "%016" PRIx64, k.hi, k.lo);
}

static int hex_digit(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int nf_key_parse(const char *hex, struct nf_key *out)
{
    uint64_t part[2] = { 0, 0 };
    if (!hex || strlen(hex) != 32)
        return NF_EDATA;
    for (int i = 0; i < 32; i++) {
        int d = hex_digit(hex[i]);
        if (d < 0)
            return NF_EDATA;
        part[i / 16] = part[i / 16] << 4 | (uint64_t)d;
    }
    out->hi = part[0];
    out->lo = part[1];
    return 0;
}

bool nf_key_equal(struct nf_key a, struct nf_key b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

/* ---- network file systems ---- */
const char *nf_cache_network_fs_name(unsigned long fs_magic)
{
    static const struct { uint32_t magic; const char *name; } network[] = {
        { 0x00006969u, "NFS" },
        { 0x0000517Bu, "SMB" },
        { 0xFF534D42u, "CIFS" },
        { 0xFE534D42u, "SMB2" },
        { 0x0BD00BD0u, "Lustre" },
        { 0x47504653u, "GPFS" },
        { 0x5346414Fu, "AFS" },
        { 0x6B414653u, "AFS" },
        { 0x00C36400u, "CephFS" },
        { 0x19830326u, "BeeGFS" },
        { 0x01021997u, "9P" },
        { 0x0000564Cu, "NCP" },
        { 0x73757245u, "Coda" },
        /* sshfs, gcsfuse, s3fs, GlusterFS...: their locking cannot be trusted */
        { 0x65735546u, "FUSE" },
    };
    /* f_type is a signed long; compare the 32-bit magic whatever its sign */
    uint32_t m = (uint32_t)fs_magic;
    for (size_t i = 0; i < sizeof network / sizeof network[0]; i++)
        if (network[i].magic == m)
            return network[i].name;
    return NULL;
}

int nf_cache_check_fs(const char *path, unsigned long fs_magic, struct nf_error *err)
{
    const char *name = nf_cache_network_fs_name(fs_magic);
    if (!name)
        return 0;
    return NF_FAIL(err, NF_EUSAGE,
                   "cache '%s' is on a network file system (%s): SQLite's write-ahead log needs "
                   "a local disk, and a shared cache there can be corrupted; put the cache on a "
                   "local disk with --cache PATH (or settings.cache), or run with --no-cache",
                   path, name);
}

/* ---- schema ---- */
/* Small rows keyed by their primary key are WITHOUT ROWID (one b-tree instead
 * of two); rows with large blobs keep a rowid, as SQLite advises. */
static const char SCHEMA[] =
    "CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS results(key TEXT PRIMARY KEY, kind TEXT NOT NULL, shape TEXT NOT NULL,"
    " bytes INTEGER NOT NULL, stored INTEGER NOT NULL, node_type TEXT, node_id TEXT, label TEXT,"
    " pipeline TEXT, created INTEGER NOT NULL, used INTEGER NOT NULL, header BLOB NOT NULL,"
    " port TEXT, pipeline_path TEXT);"
    "CREATE INDEX IF NOT EXISTS results_used ON results(used);"
    "CREATE TABLE IF NOT EXISTS chunks(key TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL,"
    " raw_size INTEGER NOT NULL, checksum INTEGER NOT NULL, PRIMARY KEY(key, idx));"
    "CREATE TABLE IF NOT EXISTS files(dev INTEGER NOT NULL, ino INTEGER NOT NULL, size INTEGER NOT NULL,"
    " mtime_ns INTEGER NOT NULL, hash TEXT NOT NULL, hashed_at INTEGER NOT NULL,"
    " PRIMARY KEY(dev, ino)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS nodes(pipeline TEXT NOT NULL, node TEXT NOT NULL, key TEXT NOT NULL,"
    " components TEXT NOT NULL, time INTEGER NOT NULL, PRIMARY KEY(pipeline, node));"
    "CREATE TABLE IF NOT EXISTS ckpt(key TEXT NOT NULL, idx INTEGER NOT NULL, data BLOB NOT NULL,"
    " raw_size INTEGER NOT NULL, checksum INTEGER NOT NULL, PRIMARY KEY(key, idx));"
    "CREATE TABLE IF NOT EXISTS leases(key TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL,"
    " heartbeat INTEGER NOT NULL) WITHOUT ROWID;";

/* The stored format version: >0, 0 when the schema is not there yet. */
static int read_format(struct nf_cache *c, int *format, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(c->db, "SELECT value FROM meta WHERE name = 'format'", -1, &st, NULL);
    *format = 0;
    if (rc != SQLITE_OK) {
        /* no meta table: a new (or foreign but empty) file */
        bool missing = (rc & 0xff) == SQLITE_ERROR && strstr(sqlite3_errmsg(c->db), "no such table");
        rc = missing ? 0 : db_error(c, err, rc, "reading the format version");
        goto fail;
    }
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *format = atoi(column_text(st, 0));
    else if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "reading the format version");
        goto fail;
    }
    rc = 0;
fail:
    sqlite3_finalize(st);
    return rc;
}

static int create_schema(struct nf_cache *c, struct nf_error *err)
{
    int rc;
    /* Both only take effect on a new, empty file: large pages for large blobs,
     * and incremental auto-vacuum so that gc can give space back. */
    NF_TRY(rc = db_exec(c, "PRAGMA page_size = 16384", "creating the cache", err));
    NF_TRY(rc = db_exec(c, "PRAGMA auto_vacuum = INCREMENTAL", "creating the cache", err));
    NF_TRY(rc = db_exec(c, "PRAGMA journal_mode = WAL", "switching to WAL", err));
    NF_TRY(rc = tx_begin(c, err));
    if ((rc = db_exec(c, SCHEMA, "creating the cache tables", err)) < 0) {
        tx_rollback(c);
        goto fail;
    }
    char *sql = nf_asprintf("INSERT OR IGNORE INTO meta(name, value) VALUES('format', '%d')",
                            NF_CACHE_FORMAT);
    if (!sql) {
        tx_rollback(c);
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    rc = db_exec(c, sql, "creating the cache tables", err);
    free(sql);
    if (rc < 0) {
        tx_rollback(c);
        goto fail;
    }
    NF_TRY(rc = tx_commit(c, err));
    return 0;
fail:
    return rc;
}

/* Format 1 -> 2: results gain the output port and the pipeline file that
 * stored them (for `cache ls`). Failures are left to has_column (a read-only
 * cache lists without them); a concurrent migration's duplicate column too. */
static void migrate_tables(struct nf_cache *c, int from)
{
    if (from < 2) {
        sqlite3_exec(c->db, "ALTER TABLE results ADD COLUMN port TEXT", NULL, NULL, NULL);
        sqlite3_exec(c->db, "ALTER TABLE results ADD COLUMN pipeline_path TEXT", NULL, NULL, NULL);
    }
}

static bool has_column(struct nf_cache *c, const char *table, const char *column)
{
    sqlite3_stmt *st = NULL;
    bool found = false;
    char *sql = nf_asprintf("PRAGMA table_info(%s)", table);
    if (sql && sqlite3_prepare_v2(c->db, sql, -1, &st, NULL) == SQLITE_OK)
        while (!found && sqlite3_step(st) == SQLITE_ROW)
            found = strcmp(column_text(st, 1), column) == 0;
    sqlite3_finalize(st);
    free(sql);
    return found;
}

/* Apply the testing aids read from the environment (see the top of the file). */
static int apply_test_limits(struct nf_cache *c, struct nf_error *err)
{
    const struct nf_switches *sw = nf_switches();
    if (!sw->cache_max_pages_set)
        return 0;
    char *sql = nf_asprintf("PRAGMA max_page_count = %lld", sw->cache_max_pages);
    if (!sql)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    int rc = db_exec(c, sql, "setting max_page_count", err);
    free(sql);
    return rc;
}

static int check_cache_folder(const char *path, struct nf_error *err)
{
    char *dir = nf_path_dirname(path);
    int rc = 0;
    if (!dir)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    NF_TRY(rc = nf_mkdirs(dir, err));
    unsigned long magic;
    if (nf_switches()->cache_fs_magic_set) {
        magic = nf_switches()->cache_fs_magic;
    } else {
        struct statfs sfs;
        if (statfs(dir, &sfs) != 0) {
            rc = NF_FAIL(err, NF_EIO, "cache '%s': cannot inspect folder '%s': %s", path, dir,
                         strerror(errno));
            goto fail;
        }
        magic = (unsigned long)sfs.f_type;
    }
    rc = nf_cache_check_fs(path, magic, err);
fail:
    free(dir);
    return rc;
}

struct nf_cache *cache_alloc(const char *path, const struct nf_cache_opts *o, struct nf_error *err)
{
    struct nf_cache *c = nf_calloc(1, sizeof *c);
    if (!c || !(c->path = nf_strdup(path))) {
        free(c);
        NF_FAIL(err, NF_ENOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->busy_timeout_ms = o && o->busy_timeout_ms > 0 ? o->busy_timeout_ms : 30000;
    c->strict = o && o->strict;
    c->interrupt = o ? o->interrupt : NULL;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "localhost");
    return c;
}

int cache_connect(struct nf_cache *c, int flags, struct nf_error *err)
{
    nf_alloc_init();   /* SQLite allocates through alloc.h: before it initialises */
    nf_fault_init();   /* tests: NLFLOW_FAIL_WRITE's VFS */
    /* NOMUTEX: this struct's own mutex serialises the connection */
    int rc = sqlite3_open_v2(c->path, &c->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK)
        return db_error(c, err, rc, "opening");
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_handler(c->db, db_busy_handler, c);
    return nf_codec_init(&c->codec, err);
}

int nf_cache_open(const char *path, const struct nf_cache_opts *o, struct nf_cache **out,
                  struct nf_error *err)
{
    int rc;
    *out = NULL;
    struct nf_cache *c = cache_alloc(path, o, err);
    if (!c)
        return NF_ENOMEM;
    NF_TRY(rc = check_cache_folder(path, err));
    NF_TRY(rc = cache_connect(c, nf_switches()->cache_readonly
                                     ? SQLITE_OPEN_READONLY
                                     : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, err));
    NF_TRY(rc = apply_test_limits(c, err));

    int format;
    NF_TRY(rc = read_format(c, &format, err));
    if (format == 0) {
        NF_TRY(rc = create_schema(c, err));
        NF_TRY(rc = read_format(c, &format, err));
    } else {
        /* persistent in the file; fails harmlessly on a read-only cache that
         * is already in WAL mode */
        sqlite3_exec(c->db, "PRAGMA journal_mode = WAL", NULL, NULL, NULL);
    }
    if (format > NF_CACHE_FORMAT) {
        rc = NF_FAIL(err, NF_EUSAGE,
                     "cache '%s' was written by a newer nlflow (cache format %d; this nlflow "
                     "reads format %d): use that nlflow, or another cache with --cache PATH, "
                     "or run with --no-cache",
                     path, format, NF_CACHE_FORMAT);
        goto fail;
    }
    if (format < NF_CACHE_FORMAT) {
        /* Older entries are unreachable (the format is part of every key) and
         * age out through gc. A format that changes the tables migrates here. */
        migrate_tables(c, format);
        char *sql = nf_asprintf("UPDATE meta SET value = '%d' WHERE name = 'format'", NF_CACHE_FORMAT);
        if (sql)
            sqlite3_exec(c->db, sql, NULL, NULL, NULL);
        free(sql);
    }
    c->format = NF_CACHE_FORMAT;
    c->has_origin = has_column(c, "results", "pipeline_path") && has_column(c, "results", "port");
    NF_TRY(rc = db_exec(c, "PRAGMA synchronous = NORMAL", "configuring", err));
    sqlite3_exec(c->db, "PRAGMA journal_size_limit = " WAL_SIZE_LIMIT, NULL, NULL, NULL);
    if (c->strict) {
        /* fail now, not at the first result, when the user asked for caching
         * and the file cannot be written */
        if (sqlite3_db_readonly(c->db, "main") == 1) {
            rc = NF_FAIL(err, NF_EIO, "cache '%s' cannot be written (read-only file or folder)", path);
            goto fail;
        }
        NF_TRY(rc = tx_begin(c, err));
        rc = db_exec(c, "UPDATE meta SET value = value WHERE name = 'format'", "writing", err);
        tx_rollback(c);
        if (rc < 0)
            goto fail;
    }

    *out = c;
    return 0;
fail:
    nf_cache_close(c);
    return rc;
}

void nf_cache_close(struct nf_cache *c)
{
    if (!c)
        return;
    if (c->db)
        sqlite3_close(c->db);
    nf_codec_release(&c->codec);
    pthread_mutex_destroy(&c->lock);
    free(c->path);
    free(c);
}

const char *nf_cache_path(const struct nf_cache *c)
{
    return c ? c->path : NULL;
}

uint64_t nf_cache_hashed_bytes(const struct nf_cache *c)
{
    return atomic_load(&((struct nf_cache *)c)->hashed_bytes);
}

/* ---- chunks ---- */
/* The chunk rows of one result, as a codec chunk source. */
struct chunk_rows {
    struct nf_cache *c;
    sqlite3_stmt *st;
};

static int next_chunk_row(void *arg, struct nf_chunk *out, struct nf_error *err)
{
    struct chunk_rows *rows = arg;
    int step = sqlite3_step(rows->st);
    if (step == SQLITE_DONE)
        return 0;
    if (step != SQLITE_ROW)
        return db_error(rows->c, err, step, "reading a result");
    out->idx = sqlite3_column_int64(rows->st, 0);
    out->data = sqlite3_column_blob(rows->st, 1);
    out->len = (size_t)sqlite3_column_bytes(rows->st, 1);
    out->raw_size = sqlite3_column_int64(rows->st, 2);
    out->checksum = (uint64_t)sqlite3_column_int64(rows->st, 3);
    return 1;
}

int read_chunks(struct nf_cache *c, const char *hex, struct nf_layout *L, char *what,
                size_t what_size, struct nf_error *err)
{
    struct chunk_rows rows = { c, NULL };
    int rc;
    NF_TRY(rc = db_prepare(c, "SELECT idx, data, raw_size, checksum FROM chunks WHERE key = ?1 "
                              "ORDER BY idx", &rows.st, err));
    bind_text(rows.st, 1, hex);
    rc = nf_layout_read_chunks(&c->codec, L, next_chunk_row, &rows, what, what_size, err);
fail:
    sqlite3_finalize(rows.st);
    return rc;
}

/* A value larger than this machine's memory cannot be decoded here: such a
 * claim in a header is treated as corruption rather than allocated. */
static uint64_t memory_bound(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : UINT64_MAX;
}

/* Fewer chunks than the header lists: say which one is missing. 1, or <0. */
static int name_missing_chunk(struct nf_cache *c, const char *hex, char *what, size_t what_size,
                              struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int64_t expect = 0;
    int rc;
    NF_TRY(rc = db_row(c, &st, "reading a result", err,
                       "SELECT idx FROM chunks WHERE key = ?1 ORDER BY idx", "t", hex));
    while (rc == 1 && sqlite3_column_int64(st, 0) == expect) {
        expect++;
        rc = sqlite3_step(st) == SQLITE_ROW;
    }
    snprintf(what, what_size, "chunk %" PRId64 " missing", expect);
    rc = 1;
fail:
    sqlite3_finalize(st);
    return rc;
}

int load_layout(struct nf_cache *c, const char *hex, const uint8_t *hdr, size_t hdr_len,
                bool build, struct nf_layout *L, char *what, size_t what_size,
                struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    NF_TRY(rc = nf_layout_from_header(hdr, hdr_len, false, L, what, what_size, err));
    if (rc == 1)
        goto fail;
    NF_TRY(rc = db_row(c, &st, "reading a result", err,
                       "SELECT COUNT(*), COALESCE(SUM(raw_size), 0), MIN(raw_size) FROM chunks "
                       "WHERE key = ?1", "t", hex));
    int64_t n = rc == 1 ? sqlite3_column_int64(st, 0) : 0;
    int64_t raw = rc == 1 ? sqlite3_column_int64(st, 1) : 0;
    int64_t smallest = rc == 1 ? sqlite3_column_int64(st, 2) : 0;
    sqlite3_finalize(st);
    st = NULL;
    rc = nf_layout_check_chunks(L, (uint64_t)n, smallest < 0 ? UINT64_MAX : (uint64_t)raw,
                                memory_bound(), what, what_size);
    if (rc == 1 && (uint64_t)n < L->n_chunks)
        NF_TRY(rc = name_missing_chunk(c, hex, what, what_size, err));
    if (rc == 0 && build) {
        nf_layout_release(L);
        rc = nf_layout_from_header(hdr, hdr_len, true, L, what, what_size, err);
    }
fail:
    sqlite3_finalize(st);
    return rc;
}

int delete_result(struct nf_cache *c, const char *hex, struct nf_error *err)
{
    int rc;
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_run(c, "deleting a result", err, "DELETE FROM chunks WHERE key = ?1", "t", hex));
    NF_TRY(rc = db_run(c, "deleting a result", err, "DELETE FROM results WHERE key = ?1", "t", hex));
    return tx_commit(c, err);
fail:
    tx_rollback(c);
    return rc;
}

int nf_cache_forget(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    nf_key_hex(key, hex);
    cache_lock(c);
    int rc = delete_result(c, hex, err);
    cache_unlock(c);
    return rc;
}

/* ---- results ---- */
int nf_cache_get(struct nf_cache *c, struct nf_key key, struct nf_value **out, struct nf_error *err)
{
    char hex[33], what[128] = "";
    char *node_id = NULL, *label = NULL;
    uint8_t *hdr = NULL;
    size_t hdr_len = 0;
    int64_t used = 0;
    struct nf_layout L = { 0 };
    sqlite3_stmt *st = NULL;
    int rc;
    *out = NULL;
    nf_key_hex(key, hex);
    cache_lock(c);
    NF_TRY(rc = db_row(c, &st, "looking up a result", err,
                       "SELECT header, node_id, label, used FROM results WHERE key = ?1", "t", hex));
    if (rc == 0)
        goto fail;
    hdr_len = (size_t)sqlite3_column_bytes(st, 0);
    hdr = nf_malloc(hdr_len ? hdr_len : 1);
    node_id = nf_strdup(column_text(st, 1));
    label = nf_strdup(column_text(st, 2));
    used = sqlite3_column_int64(st, 3);
    if (!hdr || !node_id || !label) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (hdr_len)
        memcpy(hdr, sqlite3_column_blob(st, 0), hdr_len);
    sqlite3_finalize(st);
    st = NULL;

    NF_TRY(rc = load_layout(c, hex, hdr, hdr_len, true, &L, what, sizeof what, err));
    if (rc == 0)
        NF_TRY(rc = read_chunks(c, hex, &L, what, sizeof what, err));
    if (rc == 0)
        rc = nf_layout_finish(&L, what, sizeof what);
    if (rc == 1) {
        /* corrupt: drop it so that this run stores a good copy */
        struct nf_error derr = { 0 };
        if (delete_result(c, hex, &derr) < 0)
            nf_warn(NULL, "%s", derr.msg);
        nf_warn(NULL, "cache entry %s (node '%s'%s%s) is corrupt (%s): recomputing", hex, node_id,
                *label ? ", " : "", label, what);
        rc = 0;
        goto fail;
    }
    int64_t now = now_s();
    if (now != used)   /* a busy or read-only cache still serves hits */
        db_try(c, NULL, "UPDATE results SET used = ?1 WHERE key = ?2", "it", now, hex);
    L.v->key = key;
    L.v->has_key = true;
    if (*label)
        nf_value_set_label(L.v, label);
    *out = L.v;
    L.v = NULL;
    rc = 1;
fail:
    sqlite3_finalize(st);
    cache_unlock(c);
    nf_layout_release(&L);
    free(hdr);
    free(node_id);
    free(label);
    return rc;
}

int nf_cache_has(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    nf_key_hex(key, hex);
    cache_lock(c);
    int rc = db_row(c, &st, "looking up a result", err, "SELECT 1 FROM results WHERE key = ?1", "t", hex);
    sqlite3_finalize(st);
    cache_unlock(c);
    return rc;
}

/* Store every chunk of L under hex (inside the caller's transaction); adds
 * the compressed sizes to *stored. */
static int put_chunks(struct nf_cache *c, const char *hex, const struct nf_layout *L,
                      uint64_t *stored, struct nf_error *err)
{
    sqlite3_stmt *chunk = NULL;
    int rc;
    NF_TRY(rc = db_prepare(c, "INSERT INTO chunks(key, idx, data, raw_size, checksum) "
                              "VALUES(?1, ?2, ?3, ?4, ?5)", &chunk, err));
    int64_t idx = 0;
    for (size_t s = 0; s < L->n_segs; s++) {
        const struct nf_segment *seg = &L->segs[s];
        for (uint64_t off = 0; off < seg->bytes; off += L->chunk_bytes, idx++) {
            size_t n = (size_t)(seg->bytes - off < L->chunk_bytes ? seg->bytes - off : L->chunk_bytes);
            const uint8_t *raw = (const uint8_t *)seg->src + off;
            size_t packed_len;
            NF_TRY(rc = nf_codec_pack(&c->codec, raw, n, seg->elem, &packed_len, err));
            sqlite3_bind_text(chunk, 1, hex, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(chunk, 2, idx);
            sqlite3_bind_blob(chunk, 3, c->codec.packed, (int)packed_len, SQLITE_STATIC);
            sqlite3_bind_int64(chunk, 4, (int64_t)n);
            sqlite3_bind_int64(chunk, 5, (int64_t)XXH3_64bits(raw, n));
            NF_TRY(rc = db_step_done(c, chunk, "storing a result", err));
            *stored += packed_len;
        }
    }
    rc = 0;
fail:
    sqlite3_finalize(chunk);
    return rc;
}

/* The row of a result whose chunks are in (one statement for both puts). A
 * cache from before format 2 has no port and pipeline_path columns: the same
 * row without the last two values. */
static int insert_result_row(struct nf_cache *c, const char *hex, enum nf_kind kind, const char *shape,
                             uint64_t raw_bytes, uint64_t stored, const uint8_t *hdr, size_t hdr_len,
                             const struct nf_cache_meta *meta, struct nf_error *err)
{
    return db_run(c, "storing a result", err,
                  c->has_origin ? "INSERT INTO results(key, kind, shape, bytes, stored, node_type, node_id, label, "
                                  "pipeline, created, used, header, port, pipeline_path) VALUES(?1, ?2, ?3, ?4, "
                                  "?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13)"
                                : "INSERT INTO results(key, kind, shape, bytes, stored, node_type, node_id, label, "
                                  "pipeline, created, used, header) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                                  "?10, ?10, ?11)",
                  c->has_origin ? "tttiittttibtt" : "tttiittttib", hex, nf_kind_name(kind), shape,
                  (int64_t)raw_bytes, (int64_t)stored, meta->node_type, meta->node_id, meta->label,
                  meta->pipeline, now_s(), (const void *)hdr, (int)hdr_len, meta->port, meta->pipeline_path);
}

int nf_cache_put_encoded(struct nf_cache *c, struct nf_key key, enum nf_kind kind, const char *shape,
                         uint64_t raw_bytes, const uint8_t *hdr, size_t hdr_len, const struct nf_chunk *chunks,
                         size_t n_chunks, const struct nf_cache_meta *meta, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *exists = NULL, *chunk = NULL;
    int rc;
    nf_key_hex(key, hex);
    cache_lock(c);
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_row(c, &exists, "storing a result", err, "SELECT 1 FROM results WHERE key = ?1", "t", hex));
    if (rc == 1) {   /* already there: same key, same content */
        rc = tx_commit(c, err);
        goto done;
    }
    NF_TRY(rc = db_run(c, "storing a result", err, "DELETE FROM chunks WHERE key = ?1", "t", hex));
    NF_TRY(rc = db_prepare(c, "INSERT INTO chunks(key, idx, data, raw_size, checksum) VALUES(?1, ?2, ?3, ?4, ?5)",
                           &chunk, err));
    uint64_t stored = hdr_len;
    for (size_t i = 0; i < n_chunks; i++) {
        sqlite3_reset(chunk);
        sqlite3_bind_text(chunk, 1, hex, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(chunk, 2, chunks[i].idx);
        sqlite3_bind_blob(chunk, 3, chunks[i].data, (int)chunks[i].len, SQLITE_STATIC);
        sqlite3_bind_int64(chunk, 4, chunks[i].raw_size);
        sqlite3_bind_int64(chunk, 5, (int64_t)chunks[i].checksum);
        NF_TRY(rc = db_step_done(c, chunk, "storing a result", err));
        stored += chunks[i].len;
    }
    NF_TRY(rc = insert_result_row(c, hex, kind, shape, raw_bytes, stored, hdr, hdr_len, meta, err));
    rc = tx_commit(c, err);
    goto done;
fail:
    tx_rollback(c);
done:
    sqlite3_finalize(exists);
    sqlite3_finalize(chunk);
    cache_unlock(c);
    return rc;
}

int nf_cache_put(struct nf_cache *c, struct nf_key key, const struct nf_value *v,
                 const struct nf_cache_meta *meta, struct nf_error *err)
{
    static const struct nf_cache_meta no_meta = { 0 };
    char hex[33];
    struct nf_bytes hdr = { 0 };
    struct nf_layout L = { 0 };
    sqlite3_stmt *exists = NULL;
    int rc;
    bool locked = false;
    if (!meta)
        meta = &no_meta;
    nf_key_hex(key, hex);
    NF_TRY(rc = nf_layout_from_value(v, &hdr, &L, err));

    cache_lock(c);
    locked = true;
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_row(c, &exists, "storing a result", err, "SELECT 1 FROM results WHERE key = ?1",
                       "t", hex));
    sqlite3_finalize(exists);
    exists = NULL;
    if (rc == 1) {        /* already there: same key, same content */
        rc = tx_commit(c, err);
        goto fail;
    }
    /* chunks without a result row cannot exist after a commit, but a crash of
     * an older version might have left some: start clean */
    NF_TRY(rc = db_run(c, "storing a result", err, "DELETE FROM chunks WHERE key = ?1", "t", hex));
    uint64_t stored = hdr.len;
    NF_TRY(rc = put_chunks(c, hex, &L, &stored, err));
    NF_TRY(rc = insert_result_row(c, hex, v->kind, L.shape, L.raw_bytes, stored, hdr.p, hdr.len, meta, err));
    rc = tx_commit(c, err);
fail:
    if (rc < 0 && locked)
        tx_rollback(c);
    sqlite3_finalize(exists);
    if (locked)
        cache_unlock(c);
    nf_layout_release(&L);
    free(hdr.p);
    return rc;
}

/* ---- file content hashes ---- */
/* Hash an open file from its start, in HASH_READ_BYTES reads. */
static int hash_fd(int fd, const char *path, struct nf_key *out, uint64_t *n_read,
                   struct nf_error *err)
{
    uint8_t *buf = nf_malloc(HASH_READ_BYTES);
    XXH3_state_t *state = XXH3_createState();
    int rc = 0;
    *n_read = 0;
    if (!buf || !state) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    XXH3_128bits_reset(state);
    if (lseek(fd, 0, SEEK_SET) < 0) {
        rc = NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
        goto fail;
    }
    for (;;) {
        ssize_t n = read(fd, buf, HASH_READ_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
            goto fail;
        }
        if (n == 0)
            break;
        XXH3_128bits_update(state, buf, (size_t)n);
        *n_read += (uint64_t)n;
    }
    XXH128_hash_t h = XXH3_128bits_digest(state);
    out->hi = h.high64;
    out->lo = h.low64;
fail:
    XXH3_freeState(state);
    free(buf);
    return rc;
}

static int64_t mtime_ns_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static bool same_version(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           mtime_ns_of(a) == mtime_ns_of(b);
}

/* Hash a file whose content holds still while it is read: a file that changes
 * under the reader has no single hash, so read it again (a few times). */
static int hash_stable(int fd, const char *path, struct stat *st, struct nf_key *out,
                       uint64_t *n_read, int64_t *started_ns, struct nf_error *err)
{
    int rc;
    *n_read = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        struct stat after;
        uint64_t n;
        *started_ns = now_realtime_ns();
        NF_TRY(rc = hash_fd(fd, path, out, &n, err));
        *n_read += n;
        if (fstat(fd, &after) != 0) {
            rc = NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
            goto fail;
        }
        if (same_version(st, &after))
            return 0;
        *st = after;
    }
    rc = NF_FAIL(err, NF_EIO, "cannot hash '%s': it keeps changing while it is read", path);
fail:
    return rc;
}

static int open_regular(const char *path, struct stat *st, struct nf_error *err)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer (fstat refuses it) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NF_FAIL(err, NF_EIO, "cannot read '%s': %s", path, strerror(errno));
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        int e = errno;
        close(fd);
        return NF_FAIL(err, NF_EIO, "cannot hash '%s': %s", path,
                       S_ISREG(st->st_mode) ? strerror(e) : "not a regular file");
    }
    return fd;
}

int nf_file_hash(const char *path, struct nf_key *out, struct nf_error *err)
{
    struct stat st;
    uint64_t n_read;
    int64_t started;
    int fd = open_regular(path, &st, err);
    if (fd < 0)
        return fd;
    int rc = hash_stable(fd, path, &st, out, &n_read, &started, err);
    close(fd);
    return rc;
}

int nf_cache_file_hash(struct nf_cache *c, const char *path, struct nf_key *out,
                       struct nf_error *err)
{
    struct stat st;
    sqlite3_stmt *st_get = NULL;
    uint64_t n_read;
    int64_t started;
    char hex[33];
    int rc;
    int fd = open_regular(path, &st, err);
    if (fd < 0)
        return fd;

    cache_lock(c);
    NF_TRY(rc = db_row(c, &st_get, "looking up a file hash", err,
                       "SELECT hash, hashed_at FROM files WHERE dev = ?1 AND ino = ?2 "
                       "AND size = ?3 AND mtime_ns = ?4", "iiii", (int64_t)st.st_dev,
                       (int64_t)st.st_ino, (int64_t)st.st_size, mtime_ns_of(&st)));
    if (rc == 1 && sqlite3_column_int64(st_get, 1) - mtime_ns_of(&st) >= MTIME_GUARD_NS &&
        nf_key_parse(column_text(st_get, 0), out) == 0) {
        rc = 0;
        goto fail;
    }
    sqlite3_finalize(st_get);
    st_get = NULL;
    cache_unlock(c);   /* no lock while reading a possibly large file */

    rc = hash_stable(fd, path, &st, out, &n_read, &started, err);
    cache_lock(c);
    atomic_fetch_add(&c->hashed_bytes, n_read);
    if (rc < 0)
        goto fail;
    /* The memo is an optimisation: a cache that cannot be written still hashes. */
    nf_key_hex(*out, hex);
    db_try(c, "remembering a file's hash",
           "INSERT OR REPLACE INTO files(dev, ino, size, mtime_ns, hash, hashed_at) "
           "VALUES(?1, ?2, ?3, ?4, ?5, ?6)", "iiiiti", (int64_t)st.st_dev, (int64_t)st.st_ino,
           (int64_t)st.st_size, mtime_ns_of(&st), hex, started);
    rc = 0;
fail:
    sqlite3_finalize(st_get);
    cache_unlock(c);
    close(fd);
    return rc;
}

int nf_cache_file_memo(struct nf_cache *c, const char *path, struct nf_file_memo *m, struct nf_error *err)
{
    struct stat st;
    sqlite3_stmt *q = NULL;
    int rc;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    cache_lock(c);
    NF_TRY(rc = db_row(c, &q, "looking up a file hash", err,
                       "SELECT hash, hashed_at FROM files WHERE dev = ?1 AND ino = ?2 AND size = ?3 AND mtime_ns = ?4",
                       "iiii", (int64_t)st.st_dev, (int64_t)st.st_ino, (int64_t)st.st_size, mtime_ns_of(&st)));
    if (rc == 1) {
        m->size = (int64_t)st.st_size;
        m->mtime_ns = mtime_ns_of(&st);
        m->hashed_at = sqlite3_column_int64(q, 1);
        rc = m->hashed_at - m->mtime_ns >= MTIME_GUARD_NS && nf_key_parse(column_text(q, 0), &m->hash) == 0;
    }
fail:
    sqlite3_finalize(q);
    cache_unlock(c);
    return rc;
}

int nf_cache_file_memo_adopt(struct nf_cache *c, const char *path, const struct nf_file_memo *m,
                             struct nf_error *err)
{
    struct stat st;
    char hex[33];
    (void)err;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (int64_t)st.st_size != m->size ||
        mtime_ns_of(&st) != m->mtime_ns || m->hashed_at - m->mtime_ns < MTIME_GUARD_NS)
        return 0;   /* not the file that was hashed: it will be hashed here */
    nf_key_hex(m->hash, hex);
    cache_lock(c);
    db_try(c, "remembering a file's hash",
           "INSERT OR REPLACE INTO files(dev, ino, size, mtime_ns, hash, hashed_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
           "iiiiti", (int64_t)st.st_dev, (int64_t)st.st_ino, (int64_t)st.st_size, m->mtime_ns, hex, m->hashed_at);
    cache_unlock(c);
    return 1;
}

/* ---- what each node was computed from ---- */
/* Best effort: `plan --explain` says less without it, nothing else changes. */
int nf_cache_record_node(struct nf_cache *c, const char *pipeline_path, const char *node_id,
                         struct nf_key key, const char *components, struct nf_error *err)
{
    char hex[33];
    (void)err;
    nf_key_hex(key, hex);
    cache_lock(c);
    db_try(c, "recording what a node was computed from",
           "INSERT INTO nodes(pipeline, node, key, components, time) VALUES(?1, ?2, ?3, ?4, ?5) "
           "ON CONFLICT(pipeline, node) DO UPDATE SET key = excluded.key, "
           "components = excluded.components, time = excluded.time",
           "tttti", pipeline_path, node_id, hex, components ? components : "{}", now_s());
    cache_unlock(c);
    return 0;
}

int nf_cache_last_node(struct nf_cache *c, const char *pipeline_path, const char *node_id,
                       struct nf_key *key, char **components, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    *components = NULL;
    cache_lock(c);
    NF_TRY(rc = db_row(c, &st, "looking up a node", err,
                       "SELECT key, components FROM nodes WHERE pipeline = ?1 AND node = ?2", "tt",
                       pipeline_path, node_id));
    if (rc == 0)
        goto fail;
    if (nf_key_parse(column_text(st, 0), key) < 0) {
        rc = 0;   /* a damaged record: as if there were none */
        goto fail;
    }
    if (!(*components = nf_strdup(column_text(st, 1)))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    rc = 1;
fail:
    sqlite3_finalize(st);
    cache_unlock(c);
    return rc;
}
