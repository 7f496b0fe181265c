/* test_cache_hardening.c — the result cache against what a fuzzing and fault
 * run found (issue 14): records with a valid checksum but crafted content
 * (grid dims whose product overflows, a header claiming a 256 GiB volume, a
 * mask geometry whose voxel count disagrees with the matrix), run records
 * with a NULL text cell or a NaN port, a cache held by another writer
 * (best-effort writes must not wait, stores wait bounded and stop on an
 * interrupt), damaged SQLite pages (`cache repair`), and the decoder's memory
 * bound. Each record is crafted byte by byte here, with its checksums, and
 * written behind the store's back with SQL; every case must be a miss (a
 * corrupt entry, recomputed) or a clear error, never a crash. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include "cache/cache.h"
#include "cache/codec.h"
#include "cache/exec_cache.h"
#include "core/util.h"
#include "core/rng.h"

static char tmpdir[256];
static int n_caches;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-hardening-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *new_cache_path(void)
{
    return nf_asprintf("%s/c%d/cache.db", tmpdir, ++n_caches);
}

static struct nf_cache *open_cache(const char *path, const struct nf_cache_opts *o)
{
    struct nf_error err = { 0 };
    struct nf_cache *c = NULL;
    int rc = nf_cache_open(path, o, &c, &err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    return c;
}

static struct nf_key key_of(uint64_t n)
{
    return (struct nf_key){ 0xfeedfacecafebeefull, n };
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- crafting records: the stored format written out by hand ---- */
struct buf {
    uint8_t p[4096];
    size_t len;
};

static void le(struct buf *b, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

static void f64(struct buf *b, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    le(b, u, 8);
}

static void grid(struct buf *b, int64_t nx, int64_t ny, int64_t nz)
{
    le(b, (uint64_t)nx, 8);
    le(b, (uint64_t)ny, 8);
    le(b, (uint64_t)nz, 8);
    for (int i = 0; i < 3; i++)
        f64(b, 2.0);
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 4; k++)
            f64(b, r == k ? 2.0 : 0.0);
    le(b, 4, 4);
    le(b, 1, 4);
}

/* "NFC1", kind, chunk size, the segments (elem, bytes), then the body. */
static void header_start(struct buf *b, uint32_t kind, int n_segs, const uint32_t *elem,
                         const uint64_t *bytes)
{
    b->len = 0;
    memcpy(b->p, "NFC1", 4);
    b->len = 4;
    le(b, kind, 4);
    le(b, 1 << 20, 4);
    le(b, (uint64_t)n_segs, 4);
    for (int i = 0; i < n_segs; i++) {
        le(b, elem[i], 4);
        le(b, bytes[i], 8);
    }
}

static void header_close(struct buf *b)
{
    le(b, XXH3_64bits(b->p, b->len), 8);   /* a valid checksum over crafted content */
}

/* A result row (and no chunks) written with SQL. */
static void insert_result(const char *path, struct nf_key key, const char *kind, const struct buf *hdr)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char hex[33];
    nf_key_hex(key, hex);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO results(key, kind, shape, bytes, stored, node_type, "
                                        "node_id, label, pipeline, created, used, header, port) "
                                        "VALUES(?1, ?2, '', 0, 0, 'test', 'crafted', '', NULL, 1, 1, ?3, 'out')",
                                        -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, kind, -1, SQLITE_TRANSIENT);
    sqlite3_bind_blob(st, 3, hdr->p, (int)hdr->len, SQLITE_TRANSIENT);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* A chunk of n zero bytes (zeros need no byte planes), with its checksum. */
static void insert_zero_chunk(const char *path, struct nf_key key, int64_t idx, size_t n)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    char hex[33];
    uint8_t raw[64] = { 0 }, packed[256];
    assert_true(n <= sizeof raw);
    size_t len = ZSTD_compress(packed, sizeof packed, raw, n, 1);
    assert_false(ZSTD_isError(len));
    nf_key_hex(key, hex);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO chunks(key, idx, data, raw_size, checksum) "
                                            "VALUES(?1, ?2, ?3, ?4, ?5)", -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 2, idx);
    sqlite3_bind_blob(st, 3, packed, (int)len, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, (int64_t)n);
    sqlite3_bind_int64(st, 5, (int64_t)XXH3_64bits(raw, n));
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sqlite3_close(db);
}

/* get must answer "miss" (0): a corrupt entry, deleted, recomputed. */
static void assert_miss_and_gone(struct nf_cache *c, struct nf_key key)
{
    struct nf_error err = { 0 };
    struct nf_value *v = NULL;
    int rc = nf_cache_get(c, key, &v, &err);
    if (rc < 0)
        fprintf(stderr, "get: %s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_null(v);
    assert_int_equal(nf_cache_has(c, key, &err), 0);
}

/* Grid dims whose product overflows int64 (the signed overflow found in
 * nf_grid_nvox), with a segment that the wrapped product would match. */
static void test_grid_overflow(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path, NULL);
    struct buf h;
    /* 2^32 * 2^32 * 1 wraps to 0 voxels: a 0-byte segment */
    uint32_t elem[] = { 4 };
    uint64_t bytes[] = { 0 };
    header_start(&h, NF_KIND_VOLUME, 1, elem, bytes);
    grid(&h, INT64_C(1) << 32, INT64_C(1) << 32, 1);
    le(&h, 3, 4);      /* ndim */
    le(&h, 1, 8);      /* nt */
    f64(&h, 2.0);      /* tr */
    header_close(&h);
    insert_result(path, key_of(1), "volume", &h);
    assert_miss_and_gone(c, key_of(1));
    nf_cache_close(c);
    free(path);
}

/* A header claiming a 4096^3 volume (256 GiB) with no chunks behind it: the
 * claim is checked against the stored chunks before anything is allocated. */
static void test_huge_claim(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path, NULL);
    struct buf h;
    uint32_t elem[] = { 4 };
    uint64_t bytes[] = { UINT64_C(4096) * 4096 * 4096 * 4 };
    header_start(&h, NF_KIND_VOLUME, 1, elem, bytes);
    grid(&h, 4096, 4096, 4096);
    le(&h, 3, 4);
    le(&h, 1, 8);
    f64(&h, 2.0);
    header_close(&h);
    insert_result(path, key_of(2), "volume", &h);
    assert_miss_and_gone(c, key_of(2));

    /* the same through verify: reported and removed, no allocation */
    insert_result(path, key_of(2), "volume", &h);
    uint64_t n_bad = 0;
    struct nf_error err = { 0 };
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 1);
    nf_cache_close(c);
    free(path);
}

/* A 1x2 matrix whose geometry claims 2^61 + 2 voxels: n_voxels * 8 wraps to
 * the 16 bytes of the index segment that is stored. */
static void test_geometry_disagrees(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path, NULL);
    struct buf h;
    uint32_t elem[] = { 4, 8 };
    uint64_t bytes[] = { 8, 16 };
    header_start(&h, NF_KIND_MATRIX, 2, elem, bytes);
    le(&h, 1, 8);                                  /* rows */
    le(&h, 2, 8);                                  /* cols */
    le(&h, 1, 1);                                  /* has a geometry */
    grid(&h, 4, 4, 4);
    le(&h, (UINT64_C(1) << 61) + 2, 8);            /* n_voxels */
    le(&h, 0, 1);                                  /* no column names */
    header_close(&h);
    insert_result(path, key_of(3), "matrix", &h);
    insert_zero_chunk(path, key_of(3), 0, 8);
    insert_zero_chunk(path, key_of(3), 1, 16);
    assert_miss_and_gone(c, key_of(3));
    nf_cache_close(c);
    free(path);
}

/* ---- run records ---- */
/* A well-formed run record table with one "out" row, then spoiled by `spoil`. */
static struct nf_value *record(void (*spoil)(struct nf_table *t))
{
    static const char *const names[] = { "what", "port", "index", "text", "hash" };
    struct nf_error err = { 0 };
    struct nf_value *v = nf_value_new_table(1, 5, &err);
    assert_non_null(v);
    struct nf_table *t = &v->u.tab;
    for (int k = 0; k < 5; k++) {
        t->cols[k].name = strdup(names[k]);
        t->cols[k].numeric = k == 1 || k == 2;
        if (t->cols[k].numeric)
            t->cols[k].num = calloc(1, sizeof(double));
        else
            t->cols[k].str = calloc(1, sizeof(char *));
    }
    t->cols[0].str[0] = strdup("out");
    t->cols[1].num[0] = 0;
    t->cols[2].num[0] = -1;
    t->cols[3].str[0] = strdup("");
    t->cols[4].str[0] = strdup("");
    spoil(t);
    return v;
}

static void null_text(struct nf_table *t)
{
    free(t->cols[3].str[0]);
    t->cols[3].str[0] = NULL;   /* stored as a NULL cell */
}

static void nan_port(struct nf_table *t)
{
    t->cols[1].num[0] = NAN;
}

static void test_bad_run_records(void **state)
{
    (void)state;
    void (*spoilers[])(struct nf_table *) = { null_text, nan_port };
    for (size_t s = 0; s < sizeof spoilers / sizeof spoilers[0]; s++) {
        char *path = new_cache_path();
        struct nf_cache *c = open_cache(path, NULL);
        struct nf_error err = { 0 };
        struct nf_key run = key_of(10 + s);
        struct nf_value *rec = record(spoilers[s]);
        struct nf_cache_meta meta = { "test", "n", "run record", NULL, NULL, NULL };
        assert_int_equal(nf_cache_put(c, run, rec, &meta, &err), 0);
        /* the output itself is there: only the record is damaged */
        struct nf_value *m = nf_value_new_matrix(1, 1, NULL, &err);
        assert_int_equal(nf_cache_put(c, nf_key_output(run, 0), m, NULL, &err), 0);

        /* verify reports what a fetch would trip on, and removes it */
        uint64_t n_bad = 0;
        assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
        assert_int_equal(n_bad, 1);
        assert_int_equal(nf_cache_has(c, run, &err), 0);

        /* and a fetch of such a record is a miss, not a crash */
        assert_int_equal(nf_cache_put(c, run, rec, &meta, &err), 0);
        struct nf_value *out[1] = { NULL };
        assert_int_equal(nf_run_fetch(c, run, NULL, 1, out, &err), 0);
        assert_null(out[0]);
        assert_int_equal(nf_run_valid(c, run, NULL, NULL, &err), 0);
        nf_value_unref(m);
        nf_value_unref(rec);
        nf_cache_close(c);
        free(path);
    }
}

/* ---- another writer holds the cache ---- */
static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static volatile sig_atomic_t interrupt_flag;

struct busy_case {
    struct nf_cache *c;
    char *files[3];
    double took;
};

static void hash_files(void *arg)
{
    struct busy_case *b = arg;
    double t0 = seconds();
    for (int i = 0; i < 3; i++) {
        struct nf_key k;
        struct nf_error err = { 0 };
        assert_int_equal(nf_cache_file_hash(b->c, b->files[i], &k, &err), 0);
        nf_cache_record_node(b->c, "/p.yaml", "n", k, "{}", &err);
        nf_cache_heartbeat(b->c);
    }
    b->took = seconds() - t0;
}

/* Clock checks with a wide gap from both sides: what must not wait is timed
 * against a 60 s busy timeout (it would take 60 s or more), what waits against
 * 1 s (at least 1 s, and returning at all shows the bound), so no machine's
 * speed decides the outcome. */
static void test_busy_cache(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache_opts o = { .busy_timeout_ms = 60000, .interrupt = &interrupt_flag };
    struct nf_cache_opts o_short = { .busy_timeout_ms = 1000, .interrupt = &interrupt_flag };
    struct nf_cache *c = open_cache(path, &o), *c_short = open_cache(path, &o_short);
    struct busy_case b = { .c = c };
    for (int i = 0; i < 3; i++) {
        b.files[i] = nf_asprintf("%s/in%d.txt", tmpdir, i);
        write_text(b.files[i], i == 0 ? "a" : i == 1 ? "bb" : "ccc");
    }
    sqlite3 *other = NULL;
    assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
    assert_int_equal(sqlite3_exec(other, "BEGIN EXCLUSIVE", NULL, NULL, NULL), SQLITE_OK);

    /* best-effort writes: no waiting, one warning for all of them */
    char out[4096] = "";
    char *log = nf_asprintf("%s/busy.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    dup2(fd, 2);
    close(fd);
    hash_files(&b);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(log, "r");
    size_t n = fread(out, 1, sizeof out - 1, f);
    out[n] = 0;
    fclose(f);
    assert_true(b.took < 30.0);   /* three waits would take 180 s */
    int warnings = 0;
    for (const char *p = out; (p = strstr(p, "warning")); p++)
        warnings++;
    assert_int_equal(warnings, 1);

    /* a result store waits, bounded by the busy timeout... */
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(2, 2, NULL, &err);
    double t0 = seconds();
    assert_true(nf_cache_put(c_short, key_of(20), m, NULL, &err) < 0);
    double waited = seconds() - t0;
    assert_true(waited >= 0.95);
    /* ...and an interrupt ends the wait at once (the 60 s one) */
    interrupt_flag = 1;
    t0 = seconds();
    assert_true(nf_cache_put(c, key_of(20), m, NULL, &err) < 0);
    assert_true(seconds() - t0 < 30.0);
    interrupt_flag = 0;

    /* once the other writer is done, everything works again */
    sqlite3_exec(other, "COMMIT", NULL, NULL, NULL);
    sqlite3_close(other);
    assert_int_equal(nf_cache_put(c, key_of(20), m, NULL, &err), 0);
    nf_value_unref(m);
    nf_cache_close(c_short);
    nf_cache_close(c);
    for (int i = 0; i < 3; i++)
        free(b.files[i]);
    free(log);
    free(path);
}

/* ---- damaged pages: repair keeps every intact entry ---- */
static void test_repair(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path, NULL);
    struct nf_error err = { 0 };
    enum { N = 12 };
    struct nf_value *v[N];
    uint64_t seed = 7;
    for (int i = 0; i < N; i++) {
        /* noise does not compress: each result fills pages of its own */
        v[i] = nf_value_new_matrix(40, 500, NULL, &err);
        for (int k = 0; k < 40 * 500; k++)
            v[i]->u.mat.data[k] = (float)nf_rand_normal(&seed);
        assert_int_equal(nf_cache_put(c, key_of(100 + i), v[i], NULL, &err), 0);
    }
    nf_cache_close(c);

    /* garbage over pages in the middle of the file, as a bad disk would leave */
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    uint8_t junk[16384 * 3];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 131 + 7);
    assert_int_equal(pwrite(fd, junk, sizeof junk, (st.st_size / 2) & ~(off_t)16383),
                     (ssize_t)sizeof junk);
    close(fd);

    uint64_t kept = 0, lost = 0;
    int rc = nf_cache_repair(path, NULL, NULL, &kept, &lost, &err);
    if (rc < 0)
        fprintf(stderr, "repair: %s\n", err.msg);
    assert_int_equal(rc, 0);
    assert_true(kept >= N / 2 && kept < N);
    assert_true(kept + lost <= N);

    /* the repaired file is clean, and what it kept is bit for bit the same */
    c = open_cache(path, NULL);
    uint64_t n_bad = 0;
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 0);
    uint64_t hits = 0;
    for (int i = 0; i < N; i++) {
        struct nf_value *back = NULL;
        rc = nf_cache_get(c, key_of(100 + i), &back, &err);
        assert_true(rc == 0 || rc == 1);
        if (rc == 1) {
            hits++;
            assert_memory_equal(back->u.mat.data, v[i]->u.mat.data, 40 * 500 * sizeof(float));
        }
        nf_value_unref(back);
        nf_value_unref(v[i]);
    }
    assert_int_equal(hits, kept);
    nf_cache_close(c);
    free(path);
}

/* ---- the decoder on bytes in memory ---- */
/* A value encoded and decoded through the codec API (what the fuzz target
 * feeds), then its header with each byte changed in turn (checksum fixed up):
 * every variant decodes or is refused, within the memory bound. */
static void test_decode_api(void **state)
{
    (void)state;
    struct nf_codec k;
    struct nf_error err = { 0 };
    assert_int_equal(nf_codec_init(&k, &err), 0);
    struct nf_value *m = nf_value_new_matrix(3, 5, NULL, &err);
    for (int i = 0; i < 15; i++)
        m->u.mat.data[i] = (float)i;
    struct nf_bytes hdr = { 0 };
    struct nf_layout L = { 0 };
    assert_int_equal(nf_layout_from_value(m, &hdr, &L, &err), 0);
    assert_int_equal(L.n_segs, 1);
    size_t packed_len;
    assert_int_equal(nf_codec_pack(&k, L.segs[0].src, L.segs[0].bytes, 4, &packed_len, &err), 0);
    uint8_t *packed = malloc(packed_len);
    memcpy(packed, k.packed, packed_len);
    struct nf_chunk ch = { 0, packed, packed_len, (int64_t)L.segs[0].bytes,
                           XXH3_64bits(L.segs[0].src, L.segs[0].bytes) };
    struct nf_value *back = NULL;
    char what[128];
    assert_int_equal(nf_cache_decode(&k, hdr.p, hdr.len, &ch, 1, 1 << 20, &back, what, sizeof what, &err), 1);
    assert_memory_equal(back->u.mat.data, m->u.mat.data, 15 * sizeof(float));
    nf_value_unref(back);
    /* over the memory bound: refused */
    assert_int_equal(nf_cache_decode(&k, hdr.p, hdr.len, &ch, 1, 16, &back, what, sizeof what, &err), 0);

    uint8_t *h = malloc(hdr.len);
    for (size_t i = 4; i + 8 < hdr.len; i++)
        for (int bit = 0; bit < 8; bit++) {
            memcpy(h, hdr.p, hdr.len);
            h[i] ^= (uint8_t)(1u << bit);
            uint64_t sum = XXH3_64bits(h, hdr.len - 8);
            memcpy(h + hdr.len - 8, &sum, 8);
            int rc = nf_cache_decode(&k, h, hdr.len, &ch, 1, 1 << 20, &back, what, sizeof what, &err);
            assert_true(rc == 0 || rc == 1);
            nf_value_unref(back);
            back = NULL;
        }
    free(h);
    free(packed);
    free(hdr.p);
    nf_layout_release(&L);
    nf_value_unref(m);
    nf_codec_release(&k);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid_overflow),
        cmocka_unit_test(test_huge_claim),
        cmocka_unit_test(test_geometry_disagrees),
        cmocka_unit_test(test_bad_run_records),
        cmocka_unit_test(test_busy_cache),
        cmocka_unit_test(test_repair),
        cmocka_unit_test(test_decode_api),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
