/* cache.c — the result cache store: one SQLite file in WAL mode holding node
 * results as zstd-compressed, checksummed chunks, the file-hash memo, what each
 * node was last computed from, checkpoints of long nodes and leases.
 *
 * A result is a row in `results` (description, sizes, a small binary header)
 * plus rows in `chunks`. The header holds everything but the arrays: kind,
 * grid, shape, column names, numeric flags, the list of data segments, all in
 * explicit little-endian encoding and closed by an XXH3-64 of its own bytes.
 * The arrays (float data, a geometry's voxel index, a table's numeric columns
 * and its string cells) are cut into chunks of CHUNK_BYTES; each chunk row has
 * its zstd frame, its raw size and the XXH3-64 of its raw bytes. Chunks and the
 * result row are written in one BEGIN IMMEDIATE transaction, so a killed
 * process leaves the whole result or nothing; a chunk that does not decode to
 * its checksum makes the result a miss, and it is deleted so that the next run
 * stores a good copy.
 *
 * Compression, chosen by measuring (a throwaway benchmark on 1 MiB chunks,
 * Debian zstd 1.5.4, one core of a 2-core VM; MB/s of raw data):
 *
 *   data                                 plain lvl 1   shuffled lvl 1   shuffled lvl 3   shuffled lvl 9
 *   BOLD-like 4D, 91x109x91x20, zeros    4.51x  960    5.02x  630       5.06x  350       5.12x  150
 *     outside an ellipsoid brain
 *   masked maps 20 x 235779, smooth      1.08x  490    1.19x  580       1.17x  410       1.18x   50
 *     signal + N(0, 0.6) noise
 *   mask geometry index (int64)          4.74x  370    30.3x 1000       32.8x  880       47.4x  245
 *
 * (level 6 ≈ level 9 on ratio at 100-200 MB/s; level 19 runs at ~5 MB/s for
 * no gain on floats.) Splitting the bytes of each element into planes (all
 * first bytes, then all second bytes, ...) before compression raises the ratio
 * on float32 from 1.08 to 1.19 on noise-dominated maps and from 4.5 to 5.0 on
 * images, and on the voxel index from 4.7 to 30; it also decompresses 3x
 * faster (2.6-3.2 GB/s against 0.85) because the planes are entropy-coded
 * rather than matched. Beyond level 1 the ratio gains at most 2% while
 * compression slows 1.5-4x, and the low mantissa bits of real data are noise
 * that no level can squeeze. So: byte shuffle by element size (4 for float32,
 * 8 for int64/double, none for string bytes) + zstd level 1.
 *
 * Durability: journal_mode=WAL with synchronous=NORMAL. In WAL mode NORMAL
 * keeps the database consistent on a power loss: the last transactions
 * committed before a power cut may be rolled back, but the file is never
 * corrupted. That is the right trade for a cache, whose entries can always be
 * recomputed, and it saves an fsync per result.
 *
 * Concurrency: calls on one struct nf_cache are serialised by a mutex; several
 * processes share the file through SQLite locking with a busy timeout and a
 * retry loop on BEGIN IMMEDIATE. Leases record (pid, host, heartbeat) so that
 * the lease of a process that died is reclaimed without anyone deleting a
 * lock file. Network file systems are refused at open (SQLite's WAL needs the
 * shared memory and locks of a local disk).
 *
 * Testing aids (environment, read at open): NLFLOW_CACHE_MAX_PAGES=N sets
 * PRAGMA max_page_count (a real "disk full" after N pages of 16 KiB),
 * NLFLOW_CACHE_READONLY=1 opens the file read-only, NLFLOW_CACHE_FS_MAGIC=0x...
 * replaces the statfs file system type of the cache folder.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <sqlite3.h>
#include <xxhash.h>
#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_customMem: zstd allocates through alloc.h */
#include <zstd.h>

#include "cache.h"
#include "core/fault.h"
#include "core/util.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "cache chunks hold arrays in memory order, which the format defines as little-endian"
#endif

enum {
    CHUNK_BYTES = 1 << 20,        /* raw bytes per chunk (a multiple of every element size) */
    ZSTD_LEVEL = 1,               /* see the measurements above */
    HASH_READ_BYTES = 1 << 20,
    LEASE_STALE_S = 60,           /* a foreign host's lease without heartbeat for this long is dead */
    PAGE_SIZE_BYTES = 16384,      /* SQLite's advice for large blobs: 8-16 KiB pages */
    GC_BATCH = 64,                /* results deleted per transaction, so others can write between */
};
/* A file modified within this long of being hashed may change again without
 * its mtime changing (coarse timestamps), so its memo is not trusted. */
#define MTIME_GUARD_NS INT64_C(2000000000)
/* The WAL is truncated back to this after a checkpoint (a 1 GiB result passes
 * through it whole). */
#define WAL_SIZE_LIMIT "67108864"
#define HEADER_MAGIC "NFC1"

struct nf_cache {
    char *path;
    sqlite3 *db;
    pthread_mutex_t lock;
    int busy_timeout_ms;
    bool strict;
    int format;
    bool has_origin;       /* results has the port and pipeline_path columns */
    char host[256];
    ZSTD_CCtx *cctx;
    ZSTD_DCtx *dctx;
    uint8_t *planes;       /* CHUNK_BYTES: a chunk with its bytes split into planes */
    uint8_t *scratch;      /* CHUNK_BYTES: a decoded chunk nobody keeps (verify) */
    uint8_t *packed;       /* a compressed chunk */
    size_t packed_cap;
    _Atomic uint64_t hashed_bytes;
};

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

/* ---- byte planes ---- */
/* Byte k of element i goes to plane k: float exponents and high mantissa
 * bytes then sit together, which zstd codes far better than interleaved.
 * Whole elements are moved as one integer (little-endian host), which runs at
 * 7-10 GB/s against 1.5-3 GB/s for a byte-by-byte loop. A ragged tail (n not a
 * multiple of elem, only in checkpoints) is copied as it is. */
static void shuffle(const uint8_t *in, uint8_t *out, size_t n, uint32_t elem)
{
    size_t m = n / elem;
    if (elem == 4) {
        uint8_t *p0 = out, *p1 = out + m, *p2 = out + 2 * m, *p3 = out + 3 * m;
        for (size_t i = 0; i < m; i++) {
            uint32_t v;
            memcpy(&v, in + 4 * i, 4);
            p0[i] = (uint8_t)v;
            p1[i] = (uint8_t)(v >> 8);
            p2[i] = (uint8_t)(v >> 16);
            p3[i] = (uint8_t)(v >> 24);
        }
    } else if (elem == 8) {
        for (size_t i = 0; i < m; i++) {
            uint64_t v;
            memcpy(&v, in + 8 * i, 8);
            for (int b = 0; b < 8; b++)
                out[b * m + i] = (uint8_t)(v >> (8 * b));
        }
    } else {
        for (size_t i = 0; i < m; i++)
            for (uint32_t b = 0; b < elem; b++)
                out[b * m + i] = in[i * elem + b];
    }
    memcpy(out + m * elem, in + m * elem, n - m * elem);
}

static void unshuffle(const uint8_t *in, uint8_t *out, size_t n, uint32_t elem)
{
    size_t m = n / elem;
    if (elem == 4) {
        const uint8_t *p0 = in, *p1 = in + m, *p2 = in + 2 * m, *p3 = in + 3 * m;
        size_t i = 0;
#ifdef __SSE2__
        /* the read path: 16 elements at a time by interleaving the planes (~20 GB/s) */
        for (; i + 16 <= m; i += 16) {
            __m128i a = _mm_loadu_si128((const __m128i *)(p0 + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(p1 + i));
            __m128i c = _mm_loadu_si128((const __m128i *)(p2 + i));
            __m128i d = _mm_loadu_si128((const __m128i *)(p3 + i));
            __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
            __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
            _mm_storeu_si128((__m128i *)(out + 4 * i), _mm_unpacklo_epi16(ab0, cd0));
            _mm_storeu_si128((__m128i *)(out + 4 * i + 16), _mm_unpackhi_epi16(ab0, cd0));
            _mm_storeu_si128((__m128i *)(out + 4 * i + 32), _mm_unpacklo_epi16(ab1, cd1));
            _mm_storeu_si128((__m128i *)(out + 4 * i + 48), _mm_unpackhi_epi16(ab1, cd1));
        }
#endif
        for (; i < m; i++) {
            uint32_t v = (uint32_t)p0[i] | (uint32_t)p1[i] << 8 | (uint32_t)p2[i] << 16 |
                         (uint32_t)p3[i] << 24;
            memcpy(out + 4 * i, &v, 4);
        }
    } else if (elem == 8) {
        for (size_t i = 0; i < m; i++) {
            uint64_t v = 0;
            for (int b = 0; b < 8; b++)
                v |= (uint64_t)in[b * m + i] << (8 * b);
            memcpy(out + 8 * i, &v, 8);
        }
    } else {
        for (size_t i = 0; i < m; i++)
            for (uint32_t b = 0; b < elem; b++)
                out[i * elem + b] = in[b * m + i];
    }
    memcpy(out + m * elem, in + m * elem, n - m * elem);
}

/* Compress n <= CHUNK_BYTES raw bytes into c->packed. */
static int pack_chunk(struct nf_cache *c, const uint8_t *raw, size_t n, uint32_t elem,
                      size_t *packed_len, struct nf_error *err)
{
    const uint8_t *in = raw;
    if (elem > 1) {
        shuffle(raw, c->planes, n, elem);
        in = c->planes;
    }
    size_t r = ZSTD_compressCCtx(c->cctx, c->packed, c->packed_cap, in, n, ZSTD_LEVEL);
    if (ZSTD_isError(r))
        return NF_FAIL(err, NF_ENOMEM, "cache '%s': compressing a chunk: %s", c->path,
                       ZSTD_getErrorName(r));
    *packed_len = r;
    return 0;
}

/* Decompress one frame of n raw bytes into dst. false when it does not decode
 * to exactly n bytes. */
static bool unpack_chunk(struct nf_cache *c, const void *blob, size_t blob_len, uint8_t *dst,
                         size_t n, uint32_t elem)
{
    uint8_t *into = elem > 1 ? c->planes : dst;
    size_t r = ZSTD_decompressDCtx(c->dctx, into, n, blob, blob_len);
    if (ZSTD_isError(r) || r != n)
        return false;
    if (elem > 1)
        unshuffle(c->planes, dst, n, elem);
    return true;
}

/* ---- SQLite helpers ---- */
static void lock(struct nf_cache *c) { pthread_mutex_lock(&c->lock); }
static void unlock(struct nf_cache *c) { pthread_mutex_unlock(&c->lock); }

/* Every SQLite failure becomes NF_EIO (NF_ENOMEM for SQLITE_NOMEM) naming the
 * cache and SQLite's own words ("database or disk is full", "attempt to write
 * a readonly database", ...), plus what to do where that is not obvious. */
static int db_error(struct nf_cache *c, struct nf_error *err, int rc, const char *what)
{
    const char *msg = c->db ? sqlite3_errmsg(c->db) : sqlite3_errstr(rc);
    if (!msg || !strcmp(msg, "not an error"))
        msg = sqlite3_errstr(rc);
    char hint[200] = "";
    switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        snprintf(hint, sizeof hint,
                 " (another process kept the cache busy for longer than %d ms)", c->busy_timeout_ms);
        break;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        snprintf(hint, sizeof hint,
                 "; the cache file is damaged: delete it (it holds only results that can be "
                 "recomputed) or use another with --cache PATH");
        break;
    default:
        break;
    }
    int code = (rc & 0xff) == SQLITE_NOMEM ? NF_ENOMEM : NF_EIO;
    return NF_FAIL(err, code, "cache '%s': %s: %s%s", c->path, what, msg, hint);
}

static int db_exec(struct nf_cache *c, const char *sql, const char *what, struct nf_error *err)
{
    int rc = sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    return rc == SQLITE_OK ? 0 : db_error(c, err, rc, what);
}

static int db_prepare(struct nf_cache *c, const char *sql, sqlite3_stmt **st, struct nf_error *err)
{
    int rc = sqlite3_prepare_v2(c->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        *st = NULL;
        return db_error(c, err, rc, "preparing a query");
    }
    return 0;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s)
{
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(st, i);
}

static const char *column_text(sqlite3_stmt *st, int i)
{
    const unsigned char *s = sqlite3_column_text(st, i);
    return s ? (const char *)s : "";
}

/* Run a statement that returns no rows. */
static int db_step_done(struct nf_cache *c, sqlite3_stmt *st, const char *what, struct nf_error *err)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return db_error(c, err, rc, what);
    sqlite3_reset(st);
    return 0;
}

/* BEGIN IMMEDIATE takes the write lock now, so a transaction never fails
 * half-way for want of it. The busy handler waits inside it for up to the busy
 * timeout, but SQLite answers SQLITE_BUSY without waiting in a few cases (e.g.
 * while another connection recovers the WAL), so retry with a growing pause
 * until the same deadline. */
static int tx_begin(struct nf_cache *c, struct nf_error *err)
{
    double deadline = nf_now() + c->busy_timeout_ms / 1000.0;
    useconds_t pause_us = 1000;
    for (;;) {
        int rc = sqlite3_exec(c->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        if (rc == SQLITE_OK)
            return 0;
        int primary = rc & 0xff;
        if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) || nf_now() >= deadline)
            return db_error(c, err, rc, "starting a write");
        usleep(pause_us);
        if (pause_us < 100000)
            pause_us *= 2;
    }
}

/* Roll back when a transaction is open (SQLite may already have rolled back
 * after SQLITE_FULL or SQLITE_IOERR). */
static void tx_rollback(struct nf_cache *c)
{
    if (!sqlite3_get_autocommit(c->db))
        sqlite3_exec(c->db, "ROLLBACK", NULL, NULL, NULL);
}

static int tx_commit(struct nf_cache *c, struct nf_error *err)
{
    int rc = sqlite3_exec(c->db, "COMMIT", NULL, NULL, NULL);
    if (rc == SQLITE_OK)
        return 0;
    rc = db_error(c, err, rc, "committing");
    tx_rollback(c);
    return rc;
}

static int64_t now_s(void)
{
    return (int64_t)time(NULL);
}

static int64_t now_realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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
    const char *pages = getenv("NLFLOW_CACHE_MAX_PAGES");
    if (!pages || !*pages)
        return 0;
    char *sql = nf_asprintf("PRAGMA max_page_count = %lld", atoll(pages));
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
    const char *inject = getenv("NLFLOW_CACHE_FS_MAGIC");
    if (inject && *inject) {
        magic = strtoul(inject, NULL, 0);
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

int nf_cache_open(const char *path, const struct nf_cache_opts *o, struct nf_cache **out,
                  struct nf_error *err)
{
    int rc;
    *out = NULL;
    struct nf_cache *c = nf_calloc(1, sizeof *c);
    if (!c || !(c->path = nf_strdup(path))) {
        free(c);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&c->lock, NULL);
    c->busy_timeout_ms = o && o->busy_timeout_ms > 0 ? o->busy_timeout_ms : 30000;
    c->strict = o && o->strict;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "localhost");

    NF_TRY(rc = check_cache_folder(path, err));

    const char *ro = getenv("NLFLOW_CACHE_READONLY");
    int flags = (ro && *ro && strcmp(ro, "0") != 0)
                    ? SQLITE_OPEN_READONLY
                    : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    nf_alloc_init();   /* SQLite allocates through alloc.h: before it initialises */
    nf_fault_init();   /* tests: NLFLOW_FAIL_WRITE's VFS */
    /* NOMUTEX: this struct's own mutex serialises the connection */
    rc = sqlite3_open_v2(path, &c->db, flags | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        rc = db_error(c, err, rc, "opening");
        goto fail;
    }
    sqlite3_extended_result_codes(c->db, 1);
    sqlite3_busy_timeout(c->db, c->busy_timeout_ms);
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

    const ZSTD_customMem zstd_mem = { nf_zstd_alloc, nf_zstd_free, NULL };
    c->cctx = ZSTD_createCCtx_advanced(zstd_mem);
    c->dctx = ZSTD_createDCtx_advanced(zstd_mem);
    c->packed_cap = ZSTD_compressBound(CHUNK_BYTES);
    c->planes = nf_malloc(CHUNK_BYTES);
    c->scratch = nf_malloc(CHUNK_BYTES);
    c->packed = nf_malloc(c->packed_cap);
    if (!c->cctx || !c->dctx || !c->planes || !c->scratch || !c->packed) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
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
    ZSTD_freeCCtx(c->cctx);
    ZSTD_freeDCtx(c->dctx);
    free(c->planes);
    free(c->scratch);
    free(c->packed);
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

/* ---- the value header: explicit little-endian encoding ---- */
struct bytes {
    uint8_t *p;
    size_t len, cap;
    bool oom;
};

static void put_raw(struct bytes *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *p = nf_realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

static void put_u8(struct bytes *b, uint8_t v) { put_raw(b, &v, 1); }

static void put_u32(struct bytes *b, uint32_t v)
{
    uint8_t x[4];
    for (int i = 0; i < 4; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    put_raw(b, x, 4);
}

static void put_u64(struct bytes *b, uint64_t v)
{
    uint8_t x[8];
    for (int i = 0; i < 8; i++)
        x[i] = (uint8_t)(v >> (8 * i));
    put_raw(b, x, 8);
}

static void put_i64(struct bytes *b, int64_t v) { put_u64(b, (uint64_t)v); }

static void put_f64(struct bytes *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    put_u64(b, u);
}

/* A string as u32 length + bytes; NULL as length 0xFFFFFFFF. */
static void put_str(struct bytes *b, const char *s)
{
    if (!s) {
        put_u32(b, UINT32_MAX);
        return;
    }
    size_t n = strlen(s);
    put_u32(b, (uint32_t)n);
    put_raw(b, s, n);
}

static void put_grid(struct bytes *b, const struct nf_grid *g)
{
    for (int i = 0; i < 3; i++)
        put_i64(b, g->dim[i]);
    for (int i = 0; i < 3; i++)
        put_f64(b, g->pixdim[i]);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 4; k++)
            put_f64(b, g->affine[r][k]);
    put_u32(b, (uint32_t)g->sform_code);
    put_u32(b, (uint32_t)g->qform_code);
}

struct reader {
    const uint8_t *p;
    size_t len, pos;
    bool bad;     /* ran past the end or found nonsense */
    bool oom;
};

static const uint8_t *get_raw(struct reader *r, size_t n)
{
    if (r->bad || n > r->len - r->pos) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}

static uint8_t get_u8(struct reader *r)
{
    const uint8_t *p = get_raw(r, 1);
    return p ? p[0] : 0;
}

static uint32_t get_u32(struct reader *r)
{
    const uint8_t *p = get_raw(r, 4);
    uint32_t v = 0;
    for (int i = 0; p && i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get_u64(struct reader *r)
{
    const uint8_t *p = get_raw(r, 8);
    uint64_t v = 0;
    for (int i = 0; p && i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int64_t get_i64(struct reader *r) { return (int64_t)get_u64(r); }

static double get_f64(struct reader *r)
{
    uint64_t u = get_u64(r);
    double v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* An owned copy of the next string (NULL for a stored NULL). */
static char *get_str(struct reader *r)
{
    uint32_t n = get_u32(r);
    if (r->bad || n == UINT32_MAX)
        return NULL;
    const uint8_t *p = get_raw(r, n);
    if (!p)
        return NULL;
    char *s = nf_strndup((const char *)p, n);
    if (!s)
        r->oom = true;
    return s;
}

static void get_grid(struct reader *r, struct nf_grid *g)
{
    for (int i = 0; i < 3; i++)
        g->dim[i] = get_i64(r);
    for (int i = 0; i < 3; i++)
        g->pixdim[i] = get_f64(r);
    for (int row = 0; row < 4; row++)
        for (int k = 0; k < 4; k++)
            g->affine[row][k] = get_f64(r);
    g->sform_code = (int)get_u32(r);
    g->qform_code = (int)get_u32(r);
    for (int i = 0; i < 3; i++)
        if (g->dim[i] < 0)
            r->bad = true;
}

/* ---- values <-> header + segments ---- */
/* One array of a value: `bytes` raw bytes of `elem`-byte elements, read from
 * src (put) or decoded into dst (get; NULL when only verifying). */
struct segment {
    uint32_t elem;
    uint64_t bytes;
    const void *src;
    void *dst;
};

/* A value taken apart (put) or being rebuilt (get, verify). */
struct layout {
    enum nf_kind kind;
    uint32_t chunk_bytes;
    size_t n_segs;
    struct segment *segs;
    struct nf_value *v;         /* get: the value being filled (owned until returned) */
    uint8_t *strings;           /* table string cells, encoded: u32 length + bytes each (owned) */
    uint64_t strings_bytes;
    char shape[64];
    uint64_t raw_bytes;         /* sum of the segments */
};

static void layout_release(struct layout *L)
{
    free(L->segs);
    free(L->strings);
    nf_value_unref(L->v);
    memset(L, 0, sizeof *L);
}

static bool mul_ok(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

static int add_segment(struct layout *L, uint32_t elem, uint64_t bytes, const void *src, void *dst)
{
    struct segment *s = nf_realloc(L->segs, (L->n_segs + 1) * sizeof *s);
    if (!s)
        return NF_ENOMEM;
    L->segs = s;
    L->segs[L->n_segs++] = (struct segment){ elem, bytes, src, dst };
    L->raw_bytes += bytes;
    return 0;
}

/* Tagged sections after a header's kind-specific body (format 2): what the
 * value holds, and a matrix's row names. Absent when the value has none, so
 * such a header is byte for byte a format-1 header, and format-1 headers
 * (which end at the body) still decode. */
enum { EXTRA_STAT = 1, EXTRA_ROW_NAMES = 2 };

static void put_extras(struct bytes *b, const struct nf_value *v)
{
    if (v->stat.kind != NF_STAT_NONE || v->stat.description) {
        put_u8(b, EXTRA_STAT);
        put_u32(b, (uint32_t)v->stat.kind);
        put_f64(b, v->stat.dof);
        put_str(b, v->stat.description);
    }
    if (v->kind == NF_KIND_MATRIX && v->u.mat.row_names) {
        put_u8(b, EXTRA_ROW_NAMES);
        put_i64(b, v->u.mat.rows);
        for (int64_t r = 0; r < v->u.mat.rows; r++)
            put_str(b, v->u.mat.row_names[r]);
    }
}

/* Read the tagged sections up to the end of the header; with L->v (build),
 * apply them. 0, 1 when undecodable, NF_ENOMEM. */
static int get_extras(struct reader *r, struct layout *L, int64_t matrix_rows)
{
    while (!r->bad && r->pos < r->len) {
        uint8_t tag = get_u8(r);
        if (tag == EXTRA_STAT) {
            uint32_t kind = get_u32(r);
            double dof = get_f64(r);
            char *description = get_str(r);
            if (r->oom)
                return NF_ENOMEM;
            if (!r->bad && kind < NF_STAT_N_KINDS && L->v) {
                nf_value_set_stat(L->v, (enum nf_stat)kind, dof, NULL);
                L->v->stat.description = description;
                description = NULL;
            }
            free(description);
            /* a kind this nlflow does not know: an unknown statistic, not an error */
        } else if (tag == EXTRA_ROW_NAMES) {
            int64_t n = get_i64(r);
            if (r->bad || L->kind != NF_KIND_MATRIX || n != matrix_rows || (uint64_t)n > r->len / 4)
                return 1;
            char **names = nf_calloc((size_t)(n ? n : 1), sizeof *names);
            if (!names)
                return NF_ENOMEM;
            for (int64_t k = 0; k < n; k++)
                names[k] = get_str(r);
            if (r->oom || r->bad || !L->v) {
                for (int64_t k = 0; k < n; k++)
                    free(names[k]);
                free(names);
                if (r->oom)
                    return NF_ENOMEM;
                continue;
            }
            L->v->u.mat.row_names = names;
        } else {
            return 1;
        }
    }
    return r->bad ? 1 : 0;
}

/* Take v apart for put: fill `hdr` and the segments (pointing into v). */
static int value_to_layout(const struct nf_value *v, struct bytes *hdr, struct layout *L,
                           struct nf_error *err)
{
    int rc = 0;
    L->kind = v->kind;
    L->chunk_bytes = CHUNK_BYTES;
    struct bytes body = { 0 };
    switch (v->kind) {
    case NF_KIND_VOLUME: {
        const struct nf_volume *vol = &v->u.vol;
        if (vol->lazy || !vol->data) {
            rc = NF_FAIL(err, NF_EBUG, "cache: cannot store a lazy volume (its data is not loaded)");
            goto fail;
        }
        uint64_t n = (uint64_t)nf_grid_nvox(&vol->grid) * (uint64_t)vol->nt;
        put_grid(&body, &vol->grid);
        put_u32(&body, (uint32_t)vol->ndim);
        put_i64(&body, vol->nt);
        put_f64(&body, vol->tr);
        if (add_segment(L, 4, n * 4, vol->data, NULL) < 0)
            goto oom;
        if (vol->ndim >= 4 || vol->nt > 1)
            snprintf(L->shape, sizeof L->shape, "%" PRId64 "x%" PRId64 "x%" PRId64 "x%" PRId64,
                     vol->grid.dim[0], vol->grid.dim[1], vol->grid.dim[2], vol->nt);
        else
            snprintf(L->shape, sizeof L->shape, "%" PRId64 "x%" PRId64 "x%" PRId64,
                     vol->grid.dim[0], vol->grid.dim[1], vol->grid.dim[2]);
        break;
    }
    case NF_KIND_MATRIX: {
        const struct nf_matrix *m = &v->u.mat;
        put_i64(&body, m->rows);
        put_i64(&body, m->cols);
        put_u8(&body, m->geom != NULL);
        if (m->geom) {
            put_grid(&body, &m->geom->grid);
            put_i64(&body, m->geom->n_voxels);
        }
        put_u8(&body, m->col_names != NULL);
        if (m->col_names)
            for (int64_t k = 0; k < m->cols; k++)
                put_str(&body, m->col_names[k]);
        if (add_segment(L, 4, (uint64_t)m->rows * (uint64_t)m->cols * 4, m->data, NULL) < 0)
            goto oom;
        if (m->geom && add_segment(L, 8, (uint64_t)m->geom->n_voxels * 8, m->geom->index, NULL) < 0)
            goto oom;
        snprintf(L->shape, sizeof L->shape, "%" PRId64 "x%" PRId64, m->rows, m->cols);
        break;
    }
    case NF_KIND_TABLE: {
        const struct nf_table *t = &v->u.tab;
        struct bytes cells = { 0 };
        put_i64(&body, t->n_rows);
        put_i64(&body, t->n_cols);
        for (int64_t k = 0; k < t->n_cols; k++) {
            put_str(&body, t->cols[k].name);
            put_u8(&body, t->cols[k].numeric);
        }
        for (int64_t k = 0; k < t->n_cols; k++) {
            const struct nf_column *col = &t->cols[k];
            if (col->numeric) {
                if (add_segment(L, 8, (uint64_t)t->n_rows * 8, col->num, NULL) < 0) {
                    free(cells.p);   /* the text columns before this one */
                    goto oom;
                }
            } else {
                for (int64_t r = 0; r < t->n_rows; r++)
                    put_str(&cells, col->str ? col->str[r] : NULL);
            }
        }
        if (cells.oom) {
            free(cells.p);
            goto oom;
        }
        L->strings = cells.p;
        L->strings_bytes = cells.len;
        if (cells.len && add_segment(L, 1, cells.len, cells.p, NULL) < 0)
            goto oom;
        snprintf(L->shape, sizeof L->shape, "%" PRId64 "x%" PRId64, t->n_rows, t->n_cols);
        break;
    }
    default:
        rc = NF_FAIL(err, NF_EBUG, "cache: cannot store a %s (collections are stored per item)",
                     nf_kind_name(v->kind));
        goto fail;
    }
    put_extras(&body, v);
    put_raw(hdr, HEADER_MAGIC, 4);
    put_u32(hdr, (uint32_t)v->kind);
    put_u32(hdr, L->chunk_bytes);
    put_u32(hdr, (uint32_t)L->n_segs);
    for (size_t i = 0; i < L->n_segs; i++) {
        put_u32(hdr, L->segs[i].elem);
        put_u64(hdr, L->segs[i].bytes);
    }
    if (body.oom)
        goto oom;
    put_raw(hdr, body.p, body.len);
    if (hdr->oom)
        goto oom;
    put_u64(hdr, XXH3_64bits(hdr->p, hdr->len));   /* the header checks itself */
    if (hdr->oom)
        goto oom;
    free(body.p);
    return 0;
oom:
    rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
fail:
    free(body.p);
    return rc;
}

/* The segments the header's body implies must be the segments it lists. */
static bool expect_segment(struct layout *L, size_t *next, uint32_t elem, uint64_t bytes)
{
    if (*next >= L->n_segs || L->segs[*next].elem != elem || L->segs[*next].bytes != bytes)
        return false;
    (*next)++;
    return true;
}

/* Parse a stored header. With `build`, also allocate the value (L->v) and point
 * the segments into it. Returns 0, 1 when the header is undecodable (what says
 * why), or <0 (out of memory). */
static int layout_from_header(const uint8_t *hdr, size_t len, bool build, struct layout *L,
                              char *what, size_t what_size, struct nf_error *err)
{
    struct reader r = { hdr, len, 0, false, false };
    int rc = 0;
    char **names = NULL;
    int64_t n_names = 0;
    bool *numeric = NULL;
    struct nf_geom *geom = NULL;
    size_t next = 0;
    int64_t matrix_rows = -1;

    if (len < 12 || memcmp(hdr, HEADER_MAGIC, 4) != 0)
        goto undecodable;
    uint64_t sum;
    memcpy(&sum, hdr + len - 8, 8);   /* little-endian host, checked at the top */
    if (XXH3_64bits(hdr, len - 8) != sum) {
        snprintf(what, what_size, "header checksum mismatch");
        rc = 1;
        goto fail;
    }
    r.len = len - 8;
    get_raw(&r, 4);
    L->kind = (enum nf_kind)get_u32(&r);
    L->chunk_bytes = get_u32(&r);
    uint32_t n_segs = get_u32(&r);
    if (r.bad || L->chunk_bytes == 0 || L->chunk_bytes > CHUNK_BYTES || L->chunk_bytes % 8 ||
        n_segs > r.len / 12)
        goto undecodable;
    for (uint32_t i = 0; i < n_segs; i++) {
        uint32_t elem = get_u32(&r);
        uint64_t bytes = get_u64(&r);
        if (r.bad || (elem != 1 && elem != 4 && elem != 8))
            goto undecodable;
        if (add_segment(L, elem, bytes, NULL, NULL) < 0)
            goto oom;
    }

    switch (L->kind) {
    case NF_KIND_VOLUME: {
        struct nf_grid g;
        get_grid(&r, &g);
        int ndim = (int)get_u32(&r);
        int64_t nt = get_i64(&r);
        double tr = get_f64(&r);
        uint64_t n, bytes;
        if (r.bad || nt < 1 || !mul_ok((uint64_t)nf_grid_nvox(&g), (uint64_t)nt, &n) ||
            !mul_ok(n, 4, &bytes) || !expect_segment(L, &next, 4, bytes))
            goto undecodable;
        if (build) {
            if (!(L->v = nf_value_new_volume(&g, ndim, nt, err))) {
                rc = err ? err->code : NF_ENOMEM;
                goto fail;
            }
            L->v->u.vol.tr = tr;
            L->segs[0].dst = L->v->u.vol.data;
        }
        break;
    }
    case NF_KIND_MATRIX: {
        int64_t rows = get_i64(&r), cols = get_i64(&r);
        matrix_rows = rows;
        bool has_geom = get_u8(&r);
        struct nf_grid g = { 0 };
        int64_t n_voxels = 0;
        if (has_geom) {
            get_grid(&r, &g);
            n_voxels = get_i64(&r);
        }
        bool has_names = get_u8(&r);
        uint64_t n, bytes;
        if (r.bad || rows < 0 || cols < 0 || n_voxels < 0 ||
            !mul_ok((uint64_t)rows, (uint64_t)cols, &n) || !mul_ok(n, 4, &bytes) ||
            !expect_segment(L, &next, 4, bytes) ||
            (has_geom && !expect_segment(L, &next, 8, (uint64_t)n_voxels * 8)))
            goto undecodable;
        if (has_names) {
            if ((uint64_t)cols > r.len / 4)
                goto undecodable;
            if (!(names = nf_calloc((size_t)(cols ? cols : 1), sizeof *names)))
                goto oom;
            n_names = cols;
            for (int64_t k = 0; k < cols; k++)
                names[k] = get_str(&r);
            if (r.oom)
                goto oom;
            if (r.bad)
                goto undecodable;
        }
        if (build) {
            if (has_geom) {
                if (!(geom = nf_calloc(1, sizeof *geom)) ||
                    !(geom->index = nf_malloc((size_t)(n_voxels ? n_voxels : 1) * sizeof *geom->index)))
                    goto oom;
                geom->refcount = 1;
                geom->grid = g;
                geom->n_voxels = n_voxels;
            }
            if (!(L->v = nf_value_new_matrix(rows, cols, geom, err))) {
                rc = err ? err->code : NF_ENOMEM;
                goto fail;
            }
            L->v->u.mat.col_names = names;
            names = NULL;
            L->segs[0].dst = L->v->u.mat.data;
            if (geom)
                L->segs[1].dst = geom->index;
        }
        break;
    }
    case NF_KIND_TABLE: {
        int64_t rows = get_i64(&r), cols = get_i64(&r);
        uint64_t num_bytes;
        if (r.bad || rows < 0 || cols < 0 || (uint64_t)cols > r.len ||
            !mul_ok((uint64_t)rows, 8, &num_bytes))
            goto undecodable;
        if (!(names = nf_calloc((size_t)(cols ? cols : 1), sizeof *names)) ||
            !(numeric = nf_calloc((size_t)(cols ? cols : 1), sizeof *numeric)))
            goto oom;
        n_names = cols;
        bool any_strings = false;
        for (int64_t k = 0; k < cols; k++) {
            names[k] = get_str(&r);
            numeric[k] = get_u8(&r);
            any_strings |= !numeric[k];
        }
        if (r.oom)
            goto oom;
        if (r.bad)
            goto undecodable;
        for (int64_t k = 0; k < cols; k++)
            if (numeric[k] && !expect_segment(L, &next, 8, num_bytes))
                goto undecodable;
        if (any_strings && rows > 0) {
            if (next >= L->n_segs || L->segs[next].elem != 1)
                goto undecodable;
            L->strings_bytes = L->segs[next].bytes;
            if (build && !(L->strings = nf_malloc(L->strings_bytes ? L->strings_bytes : 1)))
                goto oom;
            L->segs[next++].dst = L->strings;
        }
        if (build) {
            if (!(L->v = nf_value_new_table(rows, cols, err))) {
                rc = err ? err->code : NF_ENOMEM;
                goto fail;
            }
            size_t s = 0;
            for (int64_t k = 0; k < cols; k++) {
                struct nf_column *col = &L->v->u.tab.cols[k];
                col->name = names[k];
                names[k] = NULL;
                col->numeric = numeric[k];
                if (col->numeric) {
                    if (!(col->num = nf_malloc(num_bytes ? num_bytes : 1)))
                        goto oom;
                    L->segs[s++].dst = col->num;
                } else if (!(col->str = nf_calloc((size_t)(rows ? rows : 1), sizeof *col->str))) {
                    goto oom;
                }
            }
        }
        break;
    }
    default:
        goto undecodable;
    }
    if (next != L->n_segs)
        goto undecodable;
    rc = get_extras(&r, L, matrix_rows);
    if (rc == NF_ENOMEM)
        goto oom;
    if (rc != 0 || r.pos != r.len)
        goto undecodable;
    rc = 0;
    goto fail;
undecodable:
    snprintf(what, what_size, "undecodable header");
    rc = 1;
    goto fail;
oom:
    rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
fail:
    for (int64_t k = 0; names && k < n_names; k++)
        free(names[k]);
    free(names);
    free(numeric);
    nf_geom_unref(geom);   /* the matrix holds its own reference */
    return rc;
}

/* Split the decoded string cells into the table's string columns. */
static bool strings_to_table(struct layout *L)
{
    struct nf_table *t = &L->v->u.tab;
    struct reader r = { L->strings, L->strings_bytes, 0, false, false };
    for (int64_t k = 0; k < t->n_cols; k++)
        if (!t->cols[k].numeric)
            for (int64_t row = 0; row < t->n_rows; row++)
                t->cols[k].str[row] = get_str(&r);
    return !r.bad && !r.oom && r.pos == r.len;
}

/* ---- chunks ---- */
/* Read, decompress and check every chunk of a result into the segments'
 * destinations (or into scratch when there are none). Returns 0, 1 when
 * something does not match (what says which chunk and how), <0 on error. */
static int read_chunks(struct nf_cache *c, const char *hex, struct layout *L, char *what,
                       size_t what_size, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    NF_TRY(rc = db_prepare(c, "SELECT idx, data, raw_size, checksum FROM chunks WHERE key = ?1 "
                              "ORDER BY idx", &st, err));
    bind_text(st, 1, hex);
    int64_t idx = 0;
    for (size_t s = 0; s < L->n_segs; s++) {
        const struct segment *seg = &L->segs[s];
        for (uint64_t off = 0; off < seg->bytes; off += L->chunk_bytes, idx++) {
            size_t n = (size_t)(seg->bytes - off < L->chunk_bytes ? seg->bytes - off : L->chunk_bytes);
            int step = sqlite3_step(st);
            if (step != SQLITE_ROW && step != SQLITE_DONE) {
                rc = db_error(c, err, step, "reading a result");
                goto fail;
            }
            if (step == SQLITE_DONE || sqlite3_column_int64(st, 0) != idx) {
                snprintf(what, what_size, "chunk %" PRId64 " missing", idx);
                rc = 1;
                goto fail;
            }
            if (sqlite3_column_int64(st, 2) != (int64_t)n) {
                snprintf(what, what_size, "chunk %" PRId64 " size mismatch", idx);
                rc = 1;
                goto fail;
            }
            uint8_t *dst = seg->dst ? (uint8_t *)seg->dst + off : c->scratch;
            const void *blob = sqlite3_column_blob(st, 1);
            size_t blob_len = (size_t)sqlite3_column_bytes(st, 1);
            if (!blob || !unpack_chunk(c, blob, blob_len, dst, n, seg->elem)) {
                snprintf(what, what_size, "chunk %" PRId64 " does not decompress", idx);
                rc = 1;
                goto fail;
            }
            if (XXH3_64bits(dst, n) != (uint64_t)sqlite3_column_int64(st, 3)) {
                snprintf(what, what_size, "chunk %" PRId64 " checksum mismatch", idx);
                rc = 1;
                goto fail;
            }
        }
    }
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
        snprintf(what, what_size, "unexpected chunk %" PRId64, (int64_t)sqlite3_column_int64(st, 0));
        rc = 1;
        goto fail;
    }
    if (step != SQLITE_DONE) {
        rc = db_error(c, err, step, "reading a result");
        goto fail;
    }
    rc = 0;
fail:
    sqlite3_finalize(st);
    return rc;
}

/* Delete a result and its chunks (one transaction). */
static int delete_result(struct nf_cache *c, const char *hex, struct nf_error *err)
{
    sqlite3_stmt *del_chunks = NULL, *del_result = NULL;
    int rc;
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_prepare(c, "DELETE FROM chunks WHERE key = ?1", &del_chunks, err));
    NF_TRY(rc = db_prepare(c, "DELETE FROM results WHERE key = ?1", &del_result, err));
    bind_text(del_chunks, 1, hex);
    bind_text(del_result, 1, hex);
    NF_TRY(rc = db_step_done(c, del_chunks, "deleting a result", err));
    NF_TRY(rc = db_step_done(c, del_result, "deleting a result", err));
    sqlite3_finalize(del_chunks);
    sqlite3_finalize(del_result);
    return tx_commit(c, err);
fail:
    sqlite3_finalize(del_chunks);
    sqlite3_finalize(del_result);
    tx_rollback(c);
    return rc;
}

int nf_cache_forget(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    nf_key_hex(key, hex);
    lock(c);
    int rc = delete_result(c, hex, err);
    unlock(c);
    return rc;
}

/* ---- results ---- */
int nf_cache_get(struct nf_cache *c, struct nf_key key, struct nf_value **out, struct nf_error *err)
{
    char hex[33], what[96] = "";
    char *node_id = NULL, *label = NULL;
    uint8_t *hdr = NULL;
    size_t hdr_len = 0;
    int64_t used = 0;
    struct layout L = { 0 };
    sqlite3_stmt *st = NULL;
    int rc;
    *out = NULL;
    nf_key_hex(key, hex);
    lock(c);
    NF_TRY(rc = db_prepare(c, "SELECT header, node_id, label, used FROM results WHERE key = ?1", &st, err));
    bind_text(st, 1, hex);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        rc = 0;
        goto fail;
    }
    if (rc != SQLITE_ROW) {
        rc = db_error(c, err, rc, "looking up a result");
        goto fail;
    }
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

    NF_TRY(rc = layout_from_header(hdr, hdr_len, true, &L, what, sizeof what, err));
    if (rc == 0)
        NF_TRY(rc = read_chunks(c, hex, &L, what, sizeof what, err));
    if (rc == 0 && L.kind == NF_KIND_TABLE && !strings_to_table(&L)) {
        snprintf(what, sizeof what, "undecodable string cells");
        rc = 1;
    }
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
    if (now != used) {
        /* Best effort, without waiting: a busy or read-only cache still serves hits. */
        sqlite3_busy_timeout(c->db, 0);
        if (db_prepare(c, "UPDATE results SET used = ?1 WHERE key = ?2", &st, NULL) == 0) {
            sqlite3_bind_int64(st, 1, now);
            bind_text(st, 2, hex);
            sqlite3_step(st);
        }
        sqlite3_busy_timeout(c->db, c->busy_timeout_ms);
    }
    L.v->key = key;
    L.v->has_key = true;
    if (*label)
        nf_value_set_label(L.v, label);
    *out = L.v;
    L.v = NULL;
    rc = 1;
fail:
    sqlite3_finalize(st);
    unlock(c);
    layout_release(&L);
    free(hdr);
    free(node_id);
    free(label);
    return rc;
}

int nf_cache_has(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    int rc;
    nf_key_hex(key, hex);
    lock(c);
    NF_TRY(rc = db_prepare(c, "SELECT 1 FROM results WHERE key = ?1", &st, err));
    bind_text(st, 1, hex);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        rc = 1;
    else if (rc == SQLITE_DONE)
        rc = 0;
    else
        rc = db_error(c, err, rc, "looking up a result");
fail:
    sqlite3_finalize(st);
    unlock(c);
    return rc;
}

int nf_cache_put(struct nf_cache *c, struct nf_key key, const struct nf_value *v,
                 const struct nf_cache_meta *meta, struct nf_error *err)
{
    static const struct nf_cache_meta no_meta = { 0 };
    char hex[33];
    struct bytes hdr = { 0 };
    struct layout L = { 0 };
    sqlite3_stmt *exists = NULL, *clear = NULL, *chunk = NULL, *result = NULL;
    int rc;
    bool locked = false;
    if (!meta)
        meta = &no_meta;
    nf_key_hex(key, hex);
    NF_TRY(rc = value_to_layout(v, &hdr, &L, err));

    lock(c);
    locked = true;
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_prepare(c, "SELECT 1 FROM results WHERE key = ?1", &exists, err));
    bind_text(exists, 1, hex);
    rc = sqlite3_step(exists);
    if (rc == SQLITE_ROW) {        /* already there: same key, same content */
        sqlite3_finalize(exists);
        exists = NULL;
        rc = tx_commit(c, err);
        goto fail;
    }
    if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "storing a result");
        goto fail;
    }
    /* chunks without a result row cannot exist after a commit, but a crash of
     * an older version might have left some: start clean */
    NF_TRY(rc = db_prepare(c, "DELETE FROM chunks WHERE key = ?1", &clear, err));
    bind_text(clear, 1, hex);
    NF_TRY(rc = db_step_done(c, clear, "storing a result", err));
    NF_TRY(rc = db_prepare(c, "INSERT INTO chunks(key, idx, data, raw_size, checksum) "
                              "VALUES(?1, ?2, ?3, ?4, ?5)", &chunk, err));
    uint64_t stored = hdr.len;
    int64_t idx = 0;
    for (size_t s = 0; s < L.n_segs; s++) {
        const struct segment *seg = &L.segs[s];
        for (uint64_t off = 0; off < seg->bytes; off += L.chunk_bytes, idx++) {
            size_t n = (size_t)(seg->bytes - off < L.chunk_bytes ? seg->bytes - off : L.chunk_bytes);
            const uint8_t *raw = (const uint8_t *)seg->src + off;
            size_t packed_len;
            NF_TRY(rc = pack_chunk(c, raw, n, seg->elem, &packed_len, err));
            sqlite3_bind_text(chunk, 1, hex, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(chunk, 2, idx);
            sqlite3_bind_blob(chunk, 3, c->packed, (int)packed_len, SQLITE_STATIC);
            sqlite3_bind_int64(chunk, 4, (int64_t)n);
            sqlite3_bind_int64(chunk, 5, (int64_t)XXH3_64bits(raw, n));
            NF_TRY(rc = db_step_done(c, chunk, "storing a result", err));
            stored += packed_len;
        }
    }
    NF_TRY(rc = db_prepare(c, c->has_origin
                                  ? "INSERT INTO results(key, kind, shape, bytes, stored, node_type, "
                                    "node_id, label, pipeline, created, used, header, port, pipeline_path) "
                                    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12, ?13)"
                                  : "INSERT INTO results(key, kind, shape, bytes, stored, node_type, "
                                    "node_id, label, pipeline, created, used, header) "
                                    "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11)",
                           &result, err));
    int64_t now = now_s();
    bind_text(result, 1, hex);
    bind_text(result, 2, nf_kind_name(v->kind));
    bind_text(result, 3, L.shape);
    sqlite3_bind_int64(result, 4, (int64_t)L.raw_bytes);
    sqlite3_bind_int64(result, 5, (int64_t)stored);
    bind_text(result, 6, meta->node_type);
    bind_text(result, 7, meta->node_id);
    bind_text(result, 8, meta->label);
    bind_text(result, 9, meta->pipeline);
    sqlite3_bind_int64(result, 10, now);
    sqlite3_bind_blob(result, 11, hdr.p, (int)hdr.len, SQLITE_STATIC);
    if (c->has_origin) {
        bind_text(result, 12, meta->port);
        bind_text(result, 13, meta->pipeline_path);
    }
    NF_TRY(rc = db_step_done(c, result, "storing a result", err));
    rc = tx_commit(c, err);
fail:
    if (rc < 0 && locked)
        tx_rollback(c);
    sqlite3_finalize(exists);
    sqlite3_finalize(clear);
    sqlite3_finalize(chunk);
    sqlite3_finalize(result);
    if (locked)
        unlock(c);
    layout_release(&L);
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
    int fd = open(path, O_RDONLY | O_CLOEXEC);
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
    sqlite3_stmt *st_get = NULL, *st_put = NULL;
    uint64_t n_read;
    int64_t started;
    char hex[33];
    int rc;
    int fd = open_regular(path, &st, err);
    if (fd < 0)
        return fd;

    lock(c);
    NF_TRY(rc = db_prepare(c, "SELECT hash, hashed_at FROM files WHERE dev = ?1 AND ino = ?2 "
                              "AND size = ?3 AND mtime_ns = ?4", &st_get, err));
    sqlite3_bind_int64(st_get, 1, (int64_t)st.st_dev);
    sqlite3_bind_int64(st_get, 2, (int64_t)st.st_ino);
    sqlite3_bind_int64(st_get, 3, (int64_t)st.st_size);
    sqlite3_bind_int64(st_get, 4, mtime_ns_of(&st));
    rc = sqlite3_step(st_get);
    if (rc == SQLITE_ROW && sqlite3_column_int64(st_get, 1) - mtime_ns_of(&st) >= MTIME_GUARD_NS &&
        nf_key_parse(column_text(st_get, 0), out) == 0) {
        rc = 0;
        goto fail;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "looking up a file hash");
        goto fail;
    }
    sqlite3_finalize(st_get);
    st_get = NULL;
    unlock(c);   /* no lock while reading a possibly large file */

    rc = hash_stable(fd, path, &st, out, &n_read, &started, err);
    lock(c);
    atomic_fetch_add(&c->hashed_bytes, n_read);
    if (rc < 0)
        goto fail;
    /* The memo is an optimisation: a cache that cannot be written still hashes. */
    nf_key_hex(*out, hex);
    if (db_prepare(c, "INSERT OR REPLACE INTO files(dev, ino, size, mtime_ns, hash, hashed_at) "
                      "VALUES(?1, ?2, ?3, ?4, ?5, ?6)", &st_put, NULL) == 0) {
        sqlite3_bind_int64(st_put, 1, (int64_t)st.st_dev);
        sqlite3_bind_int64(st_put, 2, (int64_t)st.st_ino);
        sqlite3_bind_int64(st_put, 3, (int64_t)st.st_size);
        sqlite3_bind_int64(st_put, 4, mtime_ns_of(&st));
        bind_text(st_put, 5, hex);
        sqlite3_bind_int64(st_put, 6, started);
        sqlite3_step(st_put);
    }
    rc = 0;
fail:
    sqlite3_finalize(st_get);
    sqlite3_finalize(st_put);
    unlock(c);
    close(fd);
    return rc;
}

/* ---- what each node was computed from ---- */
int nf_cache_record_node(struct nf_cache *c, const char *pipeline_path, const char *node_id,
                         struct nf_key key, const char *components, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    int rc;
    nf_key_hex(key, hex);
    lock(c);
    NF_TRY(rc = db_prepare(c, "INSERT INTO nodes(pipeline, node, key, components, time) "
                              "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(pipeline, node) DO UPDATE "
                              "SET key = excluded.key, components = excluded.components, "
                              "time = excluded.time", &st, err));
    bind_text(st, 1, pipeline_path);
    bind_text(st, 2, node_id);
    bind_text(st, 3, hex);
    bind_text(st, 4, components ? components : "{}");
    sqlite3_bind_int64(st, 5, now_s());
    rc = db_step_done(c, st, "recording a node", err);
fail:
    sqlite3_finalize(st);
    unlock(c);
    return rc;
}

int nf_cache_last_node(struct nf_cache *c, const char *pipeline_path, const char *node_id,
                       struct nf_key *key, char **components, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    *components = NULL;
    lock(c);
    NF_TRY(rc = db_prepare(c, "SELECT key, components FROM nodes WHERE pipeline = ?1 AND node = ?2",
                           &st, err));
    bind_text(st, 1, pipeline_path);
    bind_text(st, 2, node_id);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        rc = 0;
        goto fail;
    }
    if (rc != SQLITE_ROW) {
        rc = db_error(c, err, rc, "looking up a node");
        goto fail;
    }
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
    unlock(c);
    return rc;
}

/* ---- checkpoints ---- */
/* A checkpoint chunk is one blob: the data cut into CHUNK_BYTES pieces, each
 * in its own zstd frame, with byte planes of 4 (checkpoints hold float32 in
 * practice; the planes are lossless whatever they hold). */
int nf_cache_ckpt_put(struct nf_cache *c, struct nf_key key, int64_t index, const void *data,
                      size_t bytes, struct nf_error *err)
{
    char hex[33];
    uint8_t *blob = NULL;
    size_t blob_len = 0;
    sqlite3_stmt *st = NULL;
    int rc;
    nf_key_hex(key, hex);
    lock(c);
    size_t cap = 0;
    for (size_t off = 0; off < bytes; off += CHUNK_BYTES)
        cap += ZSTD_compressBound(bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES);
    if (!(blob = nf_malloc(cap ? cap : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t off = 0; off < bytes; off += CHUNK_BYTES) {
        size_t n = bytes - off < CHUNK_BYTES ? bytes - off : CHUNK_BYTES, packed_len;
        NF_TRY(rc = pack_chunk(c, (const uint8_t *)data + off, n, 4, &packed_len, err));
        memcpy(blob + blob_len, c->packed, packed_len);
        blob_len += packed_len;
    }
    if (blob_len > INT_MAX) {
        rc = NF_FAIL(err, NF_EDATA, "cache: checkpoint chunk %" PRId64 " is too large (%zu bytes "
                     "compressed); use smaller checkpoint chunks", index, blob_len);
        goto fail;
    }
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_prepare(c, "INSERT OR REPLACE INTO ckpt(key, idx, data, raw_size, checksum) "
                              "VALUES(?1, ?2, ?3, ?4, ?5)", &st, err));
    bind_text(st, 1, hex);
    sqlite3_bind_int64(st, 2, index);
    sqlite3_bind_blob(st, 3, blob, (int)blob_len, SQLITE_STATIC);
    sqlite3_bind_int64(st, 4, (int64_t)bytes);
    sqlite3_bind_int64(st, 5, (int64_t)XXH3_64bits(data, bytes));
    NF_TRY(rc = db_step_done(c, st, "storing a checkpoint", err));
    rc = tx_commit(c, err);
fail:
    if (rc < 0)
        tx_rollback(c);
    sqlite3_finalize(st);
    unlock(c);
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
    lock(c);
    NF_TRY(rc = db_prepare(c, "SELECT idx FROM ckpt WHERE key = ?1 ORDER BY idx", &st, err));
    bind_text(st, 1, hex);
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *nv = nf_realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            v = nv;
        }
        v[count++] = sqlite3_column_int64(st, 0);
    }
    if (rc != SQLITE_DONE) {
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
    unlock(c);
    return rc;
}

/* Decode a checkpoint blob into out (raw bytes); false when it does not match. */
static bool ckpt_decode(struct nf_cache *c, const uint8_t *blob, size_t blob_len, uint8_t *out,
                        size_t raw, uint64_t checksum)
{
    size_t pos = 0, off = 0;
    while (off < raw) {
        size_t n = raw - off < CHUNK_BYTES ? raw - off : CHUNK_BYTES;
        size_t frame = ZSTD_findFrameCompressedSize(blob + pos, blob_len - pos);
        if (ZSTD_isError(frame) || !unpack_chunk(c, blob + pos, frame, out + off, n, 4))
            return false;
        pos += frame;
        off += n;
    }
    return pos == blob_len && XXH3_64bits(out, raw) == checksum;
}

static int delete_ckpt(struct nf_cache *c, const char *hex, int64_t index, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    NF_TRY(rc = db_prepare(c, "DELETE FROM ckpt WHERE key = ?1 AND idx = ?2", &st, err));
    bind_text(st, 1, hex);
    sqlite3_bind_int64(st, 2, index);
    rc = db_step_done(c, st, "deleting a checkpoint", err);
fail:
    sqlite3_finalize(st);
    return rc;
}

int nf_cache_ckpt_get(struct nf_cache *c, struct nf_key key, int64_t index, void **data,
                      size_t *bytes, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    uint8_t *out = NULL;
    int rc;
    *data = NULL;
    *bytes = 0;
    nf_key_hex(key, hex);
    lock(c);
    NF_TRY(rc = db_prepare(c, "SELECT data, raw_size, checksum FROM ckpt WHERE key = ?1 AND idx = ?2",
                           &st, err));
    bind_text(st, 1, hex);
    sqlite3_bind_int64(st, 2, index);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        rc = 0;
        goto fail;
    }
    if (rc != SQLITE_ROW) {
        rc = db_error(c, err, rc, "reading a checkpoint");
        goto fail;
    }
    int64_t raw = sqlite3_column_int64(st, 1);
    const uint8_t *blob = sqlite3_column_blob(st, 0);
    size_t blob_len = (size_t)sqlite3_column_bytes(st, 0);
    bool good = raw >= 0 && (uint64_t)raw <= SIZE_MAX / 2 && (blob || raw == 0);
    if (good && !(out = nf_malloc(raw ? (size_t)raw : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory reading a %" PRId64 "-byte checkpoint", raw);
        goto fail;
    }
    good = good && ckpt_decode(c, blob, blob_len, out, (size_t)raw,
                               (uint64_t)sqlite3_column_int64(st, 2));
    sqlite3_finalize(st);
    st = NULL;
    if (!good) {
        struct nf_error derr = { 0 };
        if (delete_ckpt(c, hex, index, &derr) < 0)
            nf_warn(NULL, "%s", derr.msg);
        nf_warn(NULL, "checkpoint chunk %" PRId64 " of cache entry %s is corrupt (checksum "
                "mismatch): recomputing it", index, hex);
        rc = 0;
        goto fail;
    }
    *data = out;
    *bytes = (size_t)raw;
    out = NULL;
    rc = 1;
fail:
    free(out);
    sqlite3_finalize(st);
    unlock(c);
    return rc;
}

int nf_cache_ckpt_drop(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    int rc;
    nf_key_hex(key, hex);
    lock(c);
    NF_TRY(rc = db_prepare(c, "DELETE FROM ckpt WHERE key = ?1", &st, err));
    bind_text(st, 1, hex);
    rc = db_step_done(c, st, "dropping checkpoints", err);
fail:
    sqlite3_finalize(st);
    unlock(c);
    return rc;
}

/* ---- leases ---- */
/* Same host: the pid decides (kill(pid, 0): ESRCH = gone, EPERM = alive but
 * another user's). Another host: its heartbeat, which a live process refreshes. */
static bool lease_alive(const struct nf_cache *c, int64_t pid, const char *host, int64_t heartbeat,
                        int64_t now)
{
    if (strcmp(host, c->host) == 0) {
        if (pid <= 0 || pid > INT_MAX)
            return false;
        return kill((pid_t)pid, 0) == 0 || errno != ESRCH;
    }
    return now - heartbeat < LEASE_STALE_S;
}

int nf_cache_lease(struct nf_cache *c, struct nf_key key, struct nf_error *err)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    int rc;
    int64_t now = now_s(), me = (int64_t)getpid();
    nf_key_hex(key, hex);
    lock(c);
    NF_TRY(rc = tx_begin(c, err));
    NF_TRY(rc = db_prepare(c, "SELECT pid, host, heartbeat FROM leases WHERE key = ?1", &st, err));
    bind_text(st, 1, hex);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        int64_t pid = sqlite3_column_int64(st, 0);
        const char *host = column_text(st, 1);
        bool mine = pid == me && strcmp(host, c->host) == 0;
        if (!mine && lease_alive(c, pid, host, sqlite3_column_int64(st, 2), now)) {
            sqlite3_finalize(st);
            st = NULL;
            NF_TRY(rc = tx_commit(c, err));
            rc = 0;
            goto fail;
        }
    } else if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "taking a lease");
        goto fail;
    }
    sqlite3_finalize(st);
    /* free, ours already, or held by a dead process: (re)claim it */
    NF_TRY(rc = db_prepare(c, "INSERT OR REPLACE INTO leases(key, pid, host, heartbeat) "
                              "VALUES(?1, ?2, ?3, ?4)", &st, err));
    bind_text(st, 1, hex);
    sqlite3_bind_int64(st, 2, me);
    bind_text(st, 3, c->host);
    sqlite3_bind_int64(st, 4, now);
    NF_TRY(rc = db_step_done(c, st, "taking a lease", err));
    NF_TRY(rc = tx_commit(c, err));
    rc = 1;
fail:
    if (rc < 0)
        tx_rollback(c);
    sqlite3_finalize(st);
    unlock(c);
    return rc;
}

/* release and heartbeat cannot fail usefully: a lease left behind is
 * reclaimed once this process is gone. */
void nf_cache_release(struct nf_cache *c, struct nf_key key)
{
    char hex[33];
    sqlite3_stmt *st = NULL;
    nf_key_hex(key, hex);
    lock(c);
    if (db_prepare(c, "DELETE FROM leases WHERE key = ?1 AND pid = ?2 AND host = ?3", &st, NULL) == 0) {
        bind_text(st, 1, hex);
        sqlite3_bind_int64(st, 2, (int64_t)getpid());
        bind_text(st, 3, c->host);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
    unlock(c);
}

void nf_cache_heartbeat(struct nf_cache *c)
{
    sqlite3_stmt *st = NULL;
    lock(c);
    if (db_prepare(c, "UPDATE leases SET heartbeat = ?1 WHERE pid = ?2 AND host = ?3", &st, NULL) == 0) {
        sqlite3_bind_int64(st, 1, now_s());
        sqlite3_bind_int64(st, 2, (int64_t)getpid());
        bind_text(st, 3, c->host);
        sqlite3_step(st);
    }
    sqlite3_finalize(st);
    unlock(c);
}

/* ---- maintenance ---- */
int nf_cache_list(struct nf_cache *c, int (*fn)(const struct nf_cache_entry *e, void *arg),
                  void *arg, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    struct nf_cache_entry *v = NULL;
    size_t n = 0, cap = 0;
    int rc;
    /* collected first, so that fn may call the cache */
    lock(c);
    NF_TRY(rc = db_prepare(c, c->has_origin
                                  ? "SELECT key, node_type, node_id, label, kind, shape, bytes, stored, "
                                    "created, used, pipeline, port, pipeline_path FROM results "
                                    "ORDER BY used DESC, created DESC, key"
                                  : "SELECT key, node_type, node_id, label, kind, shape, bytes, stored, "
                                    "created, used, pipeline, NULL, NULL FROM results "
                                    "ORDER BY used DESC, created DESC, key",
                           &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            struct nf_cache_entry *nv = nf_realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            v = nv;
        }
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
        e->run_record = !e->port[0] && strcmp(e->label, "run record") == 0;
    }
    if (rc != SQLITE_DONE) {
        rc = db_error(c, err, rc, "listing results");
        goto fail;
    }
    sqlite3_finalize(st);
    st = NULL;
    unlock(c);
    rc = 0;
    for (size_t i = 0; i < n && rc >= 0; i++)
        rc = fn(&v[i], arg);
    for (size_t i = 0; i < n; i++)
        free((char *)v[i].pipeline_path);
    free(v);
    return rc < 0 ? rc : 0;
fail:
    sqlite3_finalize(st);
    unlock(c);
    for (size_t i = 0; i < n; i++)
        free((char *)v[i].pipeline_path);
    free(v);
    return rc;
}

static int query_u64(struct nf_cache *c, const char *sql, uint64_t *out, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    int rc;
    NF_TRY(rc = db_prepare(c, sql, &st, err));
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        rc = db_error(c, err, rc, "reading statistics");
        goto fail;
    }
    *out = (uint64_t)sqlite3_column_int64(st, 0);
    rc = 0;
fail:
    sqlite3_finalize(st);
    return rc;
}

int nf_cache_info(struct nf_cache *c, struct nf_cache_info *info, struct nf_error *err)
{
    int rc;
    memset(info, 0, sizeof *info);
    lock(c);
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
    unlock(c);
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
    lock(c);
    NF_TRY(rc = db_prepare(c, sql, &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (k->n == k->cap) {
            size_t cap = k->cap ? k->cap * 2 : 64;
            char (*nv)[33] = nf_realloc(k->v, cap * sizeof *nv);
            if (nv)
                k->v = nv;
            int64_t *ni = with_idx ? nf_realloc(k->idx, cap * sizeof *ni) : NULL;
            if (ni)
                k->idx = ni;
            if (!nv || (with_idx && !ni)) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            k->cap = cap;
        }
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
    unlock(c);
    return rc;
}

/* Check one result; 1 and `what` when it is corrupt. Called with the lock held. */
static int verify_result(struct nf_cache *c, const char *hex, char *what, size_t what_size,
                         struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    uint8_t *hdr = NULL;
    struct layout L = { 0 };
    int rc;
    NF_TRY(rc = db_prepare(c, "SELECT header FROM results WHERE key = ?1", &st, err));
    bind_text(st, 1, hex);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {   /* deleted meanwhile */
        rc = 0;
        goto fail;
    }
    if (rc != SQLITE_ROW) {
        rc = db_error(c, err, rc, "verifying");
        goto fail;
    }
    size_t len = (size_t)sqlite3_column_bytes(st, 0);
    if (!(hdr = nf_malloc(len ? len : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (len)
        memcpy(hdr, sqlite3_column_blob(st, 0), len);
    sqlite3_finalize(st);
    st = NULL;
    NF_TRY(rc = layout_from_header(hdr, len, false, &L, what, what_size, err));
    if (rc == 0)
        rc = read_chunks(c, hex, &L, what, what_size, err);
fail:
    sqlite3_finalize(st);
    layout_release(&L);
    free(hdr);
    return rc;
}

static int verify_ckpt(struct nf_cache *c, const char *hex, int64_t index, struct nf_error *err)
{
    sqlite3_stmt *st = NULL;
    uint8_t *out = NULL;
    int rc;
    NF_TRY(rc = db_prepare(c, "SELECT data, raw_size, checksum FROM ckpt WHERE key = ?1 AND idx = ?2",
                           &st, err));
    bind_text(st, 1, hex);
    sqlite3_bind_int64(st, 2, index);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        rc = 0;
        goto fail;
    }
    if (rc != SQLITE_ROW) {
        rc = db_error(c, err, rc, "verifying");
        goto fail;
    }
    int64_t raw = sqlite3_column_int64(st, 1);
    const uint8_t *blob = sqlite3_column_blob(st, 0);
    bool good = raw >= 0 && (uint64_t)raw <= SIZE_MAX / 2 && (blob || raw == 0);
    if (good && !(out = nf_malloc(raw ? (size_t)raw : 1))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    good = good && ckpt_decode(c, blob, (size_t)sqlite3_column_bytes(st, 0), out, (size_t)raw,
                               (uint64_t)sqlite3_column_int64(st, 2));
    rc = good ? 0 : 1;
fail:
    sqlite3_finalize(st);
    free(out);
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
        lock(c);
        what[0] = 0;
        rc = verify_result(c, results.v[i], what, sizeof what, err);
        if (rc == 1)
            rc = delete_result(c, results.v[i], err);
        unlock(c);
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
        lock(c);
        rc = verify_ckpt(c, ckpts.v[i], ckpts.idx[i], err);
        bool corrupt = rc == 1;
        if (corrupt)
            rc = delete_ckpt(c, ckpts.v[i], ckpts.idx[i], err);
        unlock(c);
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
    lock(c);
    rc = db_exec(c, "DELETE FROM chunks WHERE key NOT IN (SELECT key FROM results)",
                 "removing unreachable chunks", err);
    unlock(c);
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
        if (k->n == k->cap) {
            size_t cap = k->cap ? k->cap * 2 : 16;
            char (*nv)[33] = nf_realloc(k->v, cap * sizeof *nv);
            if (!nv) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            k->v = nv;
            k->cap = cap;
        }
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
    lock(c);
    if (!dry_run) {   /* a preview deletes nothing, dead leases included */
        NF_TRY(rc = tx_begin(c, err));
        rc = live_leases(c, &live, err);
        if (rc == 0)
            rc = tx_commit(c, err);
        else
            tx_rollback(c);
        if (rc < 0)
            goto fail;
    }

    /* least recently used first */
    NF_TRY(rc = db_prepare(c, "SELECT key, stored, used, pipeline FROM results "
                              "ORDER BY used, created, key", &st, err));
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            struct gc_candidate *nv = nf_realloc(cand, cap * sizeof *nv);
            if (!nv) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            cand = nv;
        }
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
    if (rc == 0)
        rc = tx_commit(c, err);
    else
        tx_rollback(c);
    if (rc < 0)
        goto fail;

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
    unlock(c);
    free(live.v);
    free(cand);
    free(doomed);
    return rc;
}
