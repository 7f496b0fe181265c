/* test_cache.c — the result cache store (engine/cache/store.c): round trips of every
 * kind of value bit for bit (volume, matrix with geometry and column names,
 * table with numeric and string columns, a value of several chunks), hits,
 * misses and no-op re-puts, corruption found by get and by verify (bytes
 * flipped and checksums changed behind the store's back with SQL), the file
 * hash memo and its mtime guard, checkpoints, leases of live and dead
 * processes, LRU gc with pinning, network file system refusal, a full disk
 * (max_page_count), a read-only cache, a cache of a newer format, and two
 * processes writing one cache at once. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/cache.h"
#include "core/switches.h"
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
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-cache-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Each test starts without the testing aids (a failed test may leave one set). */
static int clean_env(void **state)
{
    (void)state;
    unsetenv("NLFLOW_CACHE_MAX_PAGES");
    unsetenv("NLFLOW_CACHE_READONLY");
    unsetenv("NLFLOW_CACHE_FS_MAGIC");
    nf_switches_reload();   /* the switches are read once: read them again */
    return 0;
}

/* A fresh cache file (in a folder that does not exist yet: open creates it). */
static char *new_cache_path(void)
{
    return nf_asprintf("%s/c%d/.nlflow/cache.db", tmpdir, ++n_caches);
}

static struct nf_cache *open_cache(const char *path)
{
    struct nf_error err = { 0 };
    struct nf_cache *c = NULL;
    int rc = nf_cache_open(path, NULL, &c, &err);
    if (rc < 0)
        fprintf(stderr, "%s\n", err.msg);
    assert_int_equal(rc, 0);
    return c;
}

static struct nf_key key_of(uint64_t n)
{
    return (struct nf_key){ 0x1234567890abcdefull, n };
}

static struct nf_grid test_grid(int64_t nx, int64_t ny, int64_t nz)
{
    struct nf_grid g = { .dim = { nx, ny, nz }, .pixdim = { 2, 2.5, 3 }, .sform_code = 4, .qform_code = 1 };
    for (int r = 0; r < 4; r++)
        for (int k = 0; k < 4; k++)
            g.affine[r][k] = (r == k) ? (r < 3 ? g.pixdim[r] : 1) : 0;
    g.affine[0][3] = -90.25;
    g.affine[1][3] = -126.5;
    g.affine[2][3] = -72.125;
    g.affine[0][1] = 1e-7;   /* oblique by a hair: must survive bit for bit */
    return g;
}

static void fill_noise(float *x, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sin((double)i * 0.01) * 5 + nf_rand_normal(&seed));
}

static void assert_grid_identical(const struct nf_grid *a, const struct nf_grid *b)
{
    assert_memory_equal(a->dim, b->dim, sizeof a->dim);
    assert_memory_equal(a->pixdim, b->pixdim, sizeof a->pixdim);
    assert_memory_equal(a->affine, b->affine, sizeof a->affine);
    assert_int_equal(a->sform_code, b->sform_code);
    assert_int_equal(a->qform_code, b->qform_code);
}

static int put(struct nf_cache *c, struct nf_key k, const struct nf_value *v, const char *pipeline)
{
    struct nf_error err = { 0 };
    struct nf_cache_meta meta = { "test", "node1", v->label, pipeline, "out", NULL };
    int rc = nf_cache_put(c, k, v, &meta, &err);
    if (rc < 0)
        fprintf(stderr, "put: %s\n", err.msg);
    return rc;
}

static struct nf_value *get(struct nf_cache *c, struct nf_key k, int expect)
{
    struct nf_error err = { 0 };
    struct nf_value *v = NULL;
    int rc = nf_cache_get(c, k, &v, &err);
    if (rc < 0)
        fprintf(stderr, "get: %s\n", err.msg);
    assert_int_equal(rc, expect);
    return v;
}

static struct nf_value *make_matrix(int64_t rows, int64_t cols, uint64_t seed)
{
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(rows, cols, NULL, &err);
    assert_non_null(m);
    fill_noise(m->u.mat.data, (size_t)(rows * cols), seed);
    return m;
}

static sqlite3 *raw_db(const char *path)
{
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    return db;
}

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *db = raw_db(path);
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        fprintf(stderr, "%s: %s\n", sql, msg);
    assert_int_equal(rc, SQLITE_OK);
    sqlite3_free(msg);
    sqlite3_close(db);
}

static int64_t raw_count(const char *path, const char *sql)
{
    sqlite3 *db = raw_db(path);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    int64_t n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Run fn with stderr captured into buf. */
static void capture_stderr(void (*fn)(void *), void *arg, char *buf, size_t size)
{
    char *path = nf_asprintf("%s/stderr.txt", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    fn(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t len = 0;
    struct nf_error err = { 0 };
    char *text = nf_read_file(path, &len, &err);
    assert_non_null(text);
    snprintf(buf, size, "%s", text);
    free(text);
    free(path);
}

/* ---- tests ---- */
static void test_key_hex(void **state)
{
    (void)state;
    struct nf_key k = { 0x0123456789abcdefull, 0xfedcba9876543210ull }, back;
    char hex[33];
    nf_key_hex(k, hex);
    assert_string_equal(hex, "0123456789abcdeffedcba9876543210");
    assert_int_equal(nf_key_parse(hex, &back), 0);
    assert_true(nf_key_equal(k, back));
    assert_true(nf_key_parse("0123", &back) < 0);
    assert_true(nf_key_parse("0123456789abcdeffedcba987654321g", &back) < 0);
}

static void test_volume_round_trip(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_grid g = test_grid(9, 8, 7);
    struct nf_value *v = nf_value_new_volume(&g, 4, 5, &err);
    assert_non_null(v);
    v->u.vol.tr = 2.05;
    fill_noise(v->u.vol.data, 9 * 8 * 7 * 5, 1);
    v->u.vol.data[3] = NAN;
    v->u.vol.data[4] = -0.0f;
    nf_value_set_label(v, "sub-01");

    assert_int_equal(nf_cache_has(c, key_of(1), &err), 0);
    get(c, key_of(1), 0);
    assert_int_equal(put(c, key_of(1), v, "p"), 0);
    assert_int_equal(nf_cache_has(c, key_of(1), &err), 1);
    struct nf_value *back = get(c, key_of(1), 1);
    assert_int_equal(back->kind, NF_KIND_VOLUME);
    assert_grid_identical(&back->u.vol.grid, &v->u.vol.grid);
    assert_int_equal(back->u.vol.ndim, 4);
    assert_int_equal(back->u.vol.nt, 5);
    assert_memory_equal(&back->u.vol.tr, &v->u.vol.tr, sizeof(double));
    assert_memory_equal(back->u.vol.data, v->u.vol.data, 9 * 8 * 7 * 5 * sizeof(float));
    assert_string_equal(back->label, "sub-01");
    assert_true(back->has_key && nf_key_equal(back->key, key_of(1)));
    assert_int_equal(back->refcount, 1);
    nf_value_unref(back);
    /* a different key is a miss */
    get(c, key_of(2), 0);
    nf_value_unref(v);
    nf_cache_close(c);
    free(path);
}

static void test_matrix_round_trip(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_grid g = test_grid(11, 10, 9);
    float mask[11 * 10 * 9];
    for (int i = 0; i < 11 * 10 * 9; i++)
        mask[i] = (i % 3 != 0) ? 1.0f : 0.0f;
    struct nf_geom *geom = nf_geom_from_mask(&g, mask);
    assert_non_null(geom);
    int64_t rows = 3, cols = geom->n_voxels;
    struct nf_value *m = nf_value_new_matrix(rows, cols, geom, &err);
    nf_geom_unref(geom);
    assert_non_null(m);
    fill_noise(m->u.mat.data, (size_t)(rows * cols), 2);
    m->u.mat.col_names = calloc((size_t)cols, sizeof(char *));
    for (int64_t k = 0; k < cols; k++)
        m->u.mat.col_names[k] = nf_asprintf("v%" PRId64, k);
    /* what it holds and its row names come back too (format 2) */
    const char *row_names[] = { "age", NULL, "reaction time" };
    assert_int_equal(nf_matrix_set_row_names(m, row_names, &err), 0);
    nf_value_set_stat(m, NF_STAT_T, 19.5, "one-sample t");

    assert_int_equal(put(c, key_of(10), m, NULL), 0);
    struct nf_value *back = get(c, key_of(10), 1);
    assert_int_equal(back->kind, NF_KIND_MATRIX);
    assert_int_equal(back->u.mat.rows, rows);
    assert_int_equal(back->u.mat.cols, cols);
    assert_memory_equal(back->u.mat.data, m->u.mat.data, (size_t)(rows * cols) * sizeof(float));
    assert_non_null(back->u.mat.geom);
    assert_grid_identical(&back->u.mat.geom->grid, &m->u.mat.geom->grid);
    assert_int_equal(back->u.mat.geom->n_voxels, m->u.mat.geom->n_voxels);
    assert_memory_equal(back->u.mat.geom->index, m->u.mat.geom->index,
                        (size_t)cols * sizeof(int64_t));
    assert_non_null(back->u.mat.col_names);
    for (int64_t k = 0; k < cols; k++)
        assert_string_equal(back->u.mat.col_names[k], m->u.mat.col_names[k]);
    assert_int_equal(back->stat.kind, NF_STAT_T);
    assert_true(back->stat.dof == 19.5);
    assert_string_equal(back->stat.description, "one-sample t");
    assert_non_null(back->u.mat.row_names);
    assert_string_equal(back->u.mat.row_names[0], "age");
    assert_null(back->u.mat.row_names[1]);
    assert_string_equal(back->u.mat.row_names[2], "reaction time");
    nf_value_unref(back);
    uint64_t n_bad = 99;
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 0);

    /* without geometry or names */
    struct nf_value *plain = make_matrix(4, 6, 3);
    assert_int_equal(put(c, key_of(11), plain, NULL), 0);
    back = get(c, key_of(11), 1);
    assert_null(back->u.mat.geom);
    assert_null(back->u.mat.col_names);
    assert_null(back->u.mat.row_names);
    assert_int_equal(back->stat.kind, NF_STAT_NONE);
    assert_null(back->stat.description);
    assert_memory_equal(back->u.mat.data, plain->u.mat.data, 24 * sizeof(float));
    nf_value_unref(back);
    nf_value_unref(plain);
    nf_value_unref(m);
    nf_cache_close(c);
    free(path);
}

static void test_table_round_trip(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    int64_t rows = 5;
    struct nf_value *t = nf_value_new_table(rows, 3, &err);
    assert_non_null(t);
    static const char *names[] = { "onset", "trial_type", "duration" };
    static const char *cells[] = { "face", "house", "", "n/a", "scrambled face, with comma\tand tab" };
    for (int k = 0; k < 3; k++) {
        struct nf_column *col = &t->u.tab.cols[k];
        col->name = nf_strdup(names[k]);
        col->numeric = k != 1;
        if (col->numeric) {
            col->num = malloc((size_t)rows * sizeof(double));
            for (int64_t r = 0; r < rows; r++)
                col->num[r] = k * 100 + r * 0.1;
            col->num[2] = NAN;
        } else {
            col->str = calloc((size_t)rows, sizeof(char *));
            for (int64_t r = 0; r < rows; r++)
                col->str[r] = nf_strdup(cells[r]);
        }
    }
    assert_int_equal(put(c, key_of(20), t, NULL), 0);
    struct nf_value *back = get(c, key_of(20), 1);
    assert_int_equal(back->kind, NF_KIND_TABLE);
    assert_int_equal(back->u.tab.n_rows, rows);
    assert_int_equal(back->u.tab.n_cols, 3);
    for (int k = 0; k < 3; k++) {
        const struct nf_column *a = &t->u.tab.cols[k], *b = &back->u.tab.cols[k];
        assert_string_equal(a->name, b->name);
        assert_int_equal(a->numeric, b->numeric);
        if (a->numeric)
            assert_memory_equal(a->num, b->num, (size_t)rows * sizeof(double));
        else
            for (int64_t r = 0; r < rows; r++)
                assert_string_equal(a->str[r], b->str[r]);
    }
    nf_value_unref(back);

    /* an empty table */
    struct nf_value *empty = nf_value_new_table(0, 0, &err);
    assert_int_equal(put(c, key_of(21), empty, NULL), 0);
    back = get(c, key_of(21), 1);
    assert_int_equal(back->u.tab.n_rows, 0);
    assert_int_equal(back->u.tab.n_cols, 0);
    nf_value_unref(back);
    nf_value_unref(empty);
    nf_value_unref(t);
    nf_cache_close(c);
    free(path);
}

/* Out of memory at every allocation of a put (alloc.h's countdown, libuv's
 * test-loop-oom): each fails cleanly (ASan checks for leaks: a text column
 * before a numeric one once leaked its cells) and the put then succeeds. */
static void test_put_out_of_memory(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_value *t = nf_value_new_table(3, 2, &err);
    assert_non_null(t);
    for (int k = 0; k < 2; k++) {
        struct nf_column *col = &t->u.tab.cols[k];
        col->name = nf_strdup(k ? "onset" : "trial_type");
        col->numeric = k == 1;
        if (col->numeric) {
            col->num = calloc(3, sizeof(double));
        } else {
            col->str = calloc(3, sizeof(char *));
            for (int64_t r = 0; r < 3; r++)
                col->str[r] = nf_strdup("face");
        }
    }
    int rc = -1;
    long k;
    for (k = 1; k < 10000 && rc < 0; k++) {
        struct nf_error e = { 0 };
        nf_alloc_fail_at(k, false);
        rc = nf_cache_put(c, key_of(25), t, NULL, &e);
        nf_alloc_fail_at(0, false);
        assert_true(rc == 0 || rc == NF_ENOMEM || rc == NF_EIO);
    }
    assert_int_equal(rc, 0);
    assert_true(k > 2);
    struct nf_value *back = get(c, key_of(25), 1);
    assert_string_equal(back->u.tab.cols[0].str[2], "face");
    nf_value_unref(back);
    nf_value_unref(t);
    nf_cache_close(c);
    free(path);
}

static void test_large_value_and_noop_put(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    /* 3.5 MiB: four chunks, the last one half full */
    struct nf_value *big = make_matrix(7, 131072, 4);
    assert_int_equal(put(c, key_of(30), big, NULL), 0);
    struct nf_cache_info info;
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.n_results, 1);
    assert_int_equal(info.n_chunks, 4);
    assert_int_equal(info.bytes, 7 * 131072 * 4);
    assert_true(info.stored > 0 && info.stored < info.bytes);
    assert_int_equal(info.format, NF_CACHE_FORMAT);
    assert_true(info.file_bytes > 0);

    struct nf_value *back = get(c, key_of(30), 1);
    assert_memory_equal(back->u.mat.data, big->u.mat.data, 7 * 131072 * sizeof(float));
    nf_value_unref(back);

    /* storing under an existing key changes nothing */
    struct nf_value *other = make_matrix(2, 2, 5);
    assert_int_equal(put(c, key_of(30), other, NULL), 0);
    back = get(c, key_of(30), 1);
    assert_int_equal(back->u.mat.rows, 7);
    assert_memory_equal(back->u.mat.data, big->u.mat.data, 7 * 131072 * sizeof(float));
    nf_value_unref(back);
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.n_results, 1);
    assert_int_equal(info.n_chunks, 4);

    /* collections and lazy volumes are refused, not stored */
    struct nf_value *coll = nf_value_new_collection(1, &err);
    assert_int_equal(nf_cache_put(c, key_of(31), coll, NULL, &err), NF_EBUG);
    nf_value_unref(coll);
    nf_value_unref(other);
    nf_value_unref(big);
    nf_cache_close(c);
    free(path);
}

struct get_call { struct nf_cache *c; struct nf_key k; int rc; };
static void do_get(void *arg)
{
    struct get_call *g = arg;
    struct nf_value *v = NULL;
    struct nf_error err = { 0 };
    g->rc = nf_cache_get(g->c, g->k, &v, &err);
    nf_value_unref(v);
}

struct verify_log { int n; char key[33]; char what[128]; };
static void on_bad(const char *key_hex, const char *what, void *arg)
{
    struct verify_log *log = arg;
    log->n++;
    snprintf(log->key, sizeof log->key, "%s", key_hex);
    snprintf(log->what, sizeof log->what, "%s", what);
}

static void test_corruption(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_value *big = make_matrix(4, 262144, 6);   /* 4 MiB, 4 chunks */
    struct nf_value *small = make_matrix(3, 3, 7);
    nf_value_set_label(big, "sub-02");
    assert_int_equal(put(c, key_of(40), big, NULL), 0);
    assert_int_equal(put(c, key_of(41), big, NULL), 0);
    assert_int_equal(put(c, key_of(42), small, NULL), 0);
    uint64_t n_bad = 99;
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 0);

    /* a wrong checksum: get reports it by chunk, deletes the entry, misses */
    char hex[33], sql[256], out[2048];
    nf_key_hex(key_of(40), hex);
    snprintf(sql, sizeof sql, "UPDATE chunks SET checksum = checksum + 1 WHERE key = '%s' AND idx = 1", hex);
    raw_exec(path, sql);
    struct get_call call = { c, key_of(40), -1 };
    capture_stderr(do_get, &call, out, sizeof out);
    assert_int_equal(call.rc, 0);
    char expect[256];
    snprintf(expect, sizeof expect,
             "cache entry %s (node 'node1', sub-02) is corrupt (chunk 1 checksum mismatch): recomputing", hex);
    assert_non_null(strstr(out, expect));
    assert_int_equal(nf_cache_has(c, key_of(40), &err), 0);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM chunks WHERE key = '%s'", hex);
    assert_int_equal(raw_count(path, sql), 0);
    /* stored again, it is a hit */
    assert_int_equal(put(c, key_of(40), big, NULL), 0);
    struct nf_value *back = get(c, key_of(40), 1);
    assert_memory_equal(back->u.mat.data, big->u.mat.data, 4 * 262144 * sizeof(float));
    nf_value_unref(back);

    /* bytes flipped inside a compressed chunk (a bad sector): verify finds it */
    nf_key_hex(key_of(41), hex);
    snprintf(sql, sizeof sql,
             "UPDATE chunks SET data = substr(data, 1, 1000) || x'DEADBEEF' || substr(data, 1005) "
             "WHERE key = '%s' AND idx = 2", hex);
    raw_exec(path, sql);
    struct verify_log log = { 0 };
    assert_int_equal(nf_cache_verify(c, on_bad, &log, &n_bad, &err), 0);
    assert_int_equal(n_bad, 1);
    assert_int_equal(log.n, 1);
    assert_string_equal(log.key, hex);
    assert_non_null(strstr(log.what, "chunk 2"));
    assert_int_equal(nf_cache_has(c, key_of(41), &err), 0);
    assert_int_equal(nf_cache_has(c, key_of(42), &err), 1);
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 0);

    /* a missing chunk and a damaged header are corrupt too */
    assert_int_equal(put(c, key_of(43), big, NULL), 0);
    nf_key_hex(key_of(43), hex);
    snprintf(sql, sizeof sql, "DELETE FROM chunks WHERE key = '%s' AND idx = 3", hex);
    raw_exec(path, sql);
    call.k = key_of(43);
    capture_stderr(do_get, &call, out, sizeof out);
    assert_int_equal(call.rc, 0);
    assert_non_null(strstr(out, "chunk 3 missing"));
    nf_key_hex(key_of(42), hex);
    snprintf(sql, sizeof sql,
             "UPDATE results SET header = substr(header, 1, 20) || x'00' || substr(header, 22) "
             "WHERE key = '%s'", hex);
    raw_exec(path, sql);
    call.k = key_of(42);
    capture_stderr(do_get, &call, out, sizeof out);
    assert_int_equal(call.rc, 0);
    assert_non_null(strstr(out, "header"));
    assert_int_equal(nf_cache_has(c, key_of(42), &err), 0);

    nf_value_unref(big);
    nf_value_unref(small);
    nf_cache_close(c);
    free(path);
}

static void write_file(const char *path, const char *text, time_t mtime)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    struct timespec ts[2] = { { mtime, 0 }, { mtime, 0 } };
    assert_int_equal(utimensat(AT_FDCWD, path, ts, 0), 0);
}

static void test_file_hash_memo(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    char *file = nf_asprintf("%s/input.txt", tmpdir);
    time_t old = time(NULL) - 100;
    write_file(file, "hello brain", old);

    struct nf_key plain, h1, h2, h3;
    assert_int_equal(nf_file_hash(file, &plain, &err), 0);
    assert_int_equal(nf_cache_file_hash(c, file, &h1, &err), 0);
    assert_true(nf_key_equal(plain, h1));
    assert_int_equal(nf_cache_hashed_bytes(c), 11);
    /* second time from the memo: nothing read */
    assert_int_equal(nf_cache_file_hash(c, file, &h2, &err), 0);
    assert_true(nf_key_equal(h1, h2));
    assert_int_equal(nf_cache_hashed_bytes(c), 11);

    /* new content, new mtime: rehashed */
    write_file(file, "hello world", old + 10);
    assert_int_equal(nf_cache_file_hash(c, file, &h3, &err), 0);
    assert_false(nf_key_equal(h1, h3));
    assert_int_equal(nf_cache_hashed_bytes(c), 22);
    assert_int_equal(nf_file_hash(file, &plain, &err), 0);
    assert_true(nf_key_equal(plain, h3));

    /* Documented limitation, as for every (size, mtime) memo (make, git, DVC):
     * content changed with size and mtime restored by hand is not seen. */
    write_file(file, "hello brain", old + 10);
    assert_int_equal(nf_cache_file_hash(c, file, &h2, &err), 0);
    assert_true(nf_key_equal(h2, h3));

    /* mtime guard: a file modified just now is rehashed every time, since it
     * may change again without its mtime changing */
    write_file(file, "fresh", time(NULL));
    uint64_t before = nf_cache_hashed_bytes(c);
    assert_int_equal(nf_cache_file_hash(c, file, &h1, &err), 0);
    assert_int_equal(nf_cache_file_hash(c, file, &h2, &err), 0);
    assert_true(nf_key_equal(h1, h2));
    assert_int_equal(nf_cache_hashed_bytes(c), before + 10);

    /* a file larger than one read */
    char *bigfile = nf_asprintf("%s/big.bin", tmpdir);
    FILE *f = fopen(bigfile, "w");
    for (int i = 0; i < 3 * 1024 * 1024 + 17; i++)
        fputc(i * 7 % 251, f);
    fclose(f);
    assert_int_equal(nf_cache_file_hash(c, bigfile, &h1, &err), 0);
    assert_int_equal(nf_file_hash(bigfile, &h2, &err), 0);
    assert_true(nf_key_equal(h1, h2));

    /* errors name the file */
    assert_int_equal(nf_cache_file_hash(c, "/nonexistent/x.nii", &h1, &err), NF_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.nii"));
    assert_int_equal(nf_file_hash(tmpdir, &h1, &err), NF_EIO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    free(bigfile);
    free(file);
    nf_cache_close(c);
    free(path);
}

static void test_nodes(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_key k;
    char *text = NULL;
    assert_int_equal(nf_cache_last_node(c, "/p.yaml", "a", &k, &text, &err), 0);
    assert_null(text);
    assert_int_equal(nf_cache_record_node(c, "/p.yaml", "a", key_of(1), "{\"alpha\":1}", &err), 0);
    assert_int_equal(nf_cache_record_node(c, "/p.yaml", "a", key_of(2), "{\"alpha\":2}", &err), 0);
    assert_int_equal(nf_cache_record_node(c, "/q.yaml", "a", key_of(3), "{}", &err), 0);
    assert_int_equal(nf_cache_last_node(c, "/p.yaml", "a", &k, &text, &err), 1);
    assert_true(nf_key_equal(k, key_of(2)));
    assert_string_equal(text, "{\"alpha\":2}");
    free(text);
    assert_int_equal(nf_cache_last_node(c, "/q.yaml", "a", &k, &text, &err), 1);
    assert_true(nf_key_equal(k, key_of(3)));
    free(text);
    nf_cache_close(c);
    free(path);
}

static void test_checkpoints(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    size_t big_n = 655360 + 3;   /* 2.5 MiB + 12 bytes: three frames, a ragged end */
    float *big = malloc(big_n * sizeof(float));
    fill_noise(big, big_n, 8);
    float small[5] = { 1, 2, 3, 4, 5 };
    const char odd[] = "seven b";   /* not a multiple of 4 bytes */
    struct nf_key k = key_of(50);
    assert_int_equal(nf_cache_ckpt_put(c, k, 2, small, sizeof small, &err), 0);
    assert_int_equal(nf_cache_ckpt_put(c, k, 0, big, big_n * sizeof(float), &err), 0);
    assert_int_equal(nf_cache_ckpt_put(c, k, 1, odd, sizeof odd, &err), 0);
    assert_int_equal(nf_cache_ckpt_put(c, key_of(51), 0, small, sizeof small, &err), 0);

    int64_t *idx = NULL;
    size_t n = 0;
    assert_int_equal(nf_cache_ckpt_list(c, k, &idx, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_int_equal(idx[0], 0);
    assert_int_equal(idx[1], 1);
    assert_int_equal(idx[2], 2);
    free(idx);

    void *data = NULL;
    size_t bytes = 0;
    assert_int_equal(nf_cache_ckpt_get(c, k, 0, &data, &bytes, &err), 1);
    assert_int_equal(bytes, big_n * sizeof(float));
    assert_memory_equal(data, big, bytes);
    free(data);
    assert_int_equal(nf_cache_ckpt_get(c, k, 1, &data, &bytes, &err), 1);
    assert_int_equal(bytes, sizeof odd);
    assert_memory_equal(data, odd, bytes);
    free(data);
    assert_int_equal(nf_cache_ckpt_get(c, k, 7, &data, &bytes, &err), 0);
    assert_null(data);

    /* overwrite an index */
    float again[2] = { 9, 8 };
    assert_int_equal(nf_cache_ckpt_put(c, k, 2, again, sizeof again, &err), 0);
    assert_int_equal(nf_cache_ckpt_get(c, k, 2, &data, &bytes, &err), 1);
    assert_int_equal(bytes, sizeof again);
    assert_memory_equal(data, again, bytes);
    free(data);

    /* a corrupt checkpoint chunk is absent (and gone); verify finds another */
    char hex[33], sql[256];
    nf_key_hex(k, hex);
    snprintf(sql, sizeof sql, "UPDATE ckpt SET checksum = checksum + 1 WHERE key = '%s' AND idx = 0", hex);
    raw_exec(path, sql);
    assert_int_equal(nf_cache_ckpt_get(c, k, 0, &data, &bytes, &err), 0);
    assert_null(data);
    assert_int_equal(nf_cache_ckpt_list(c, k, &idx, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(idx[0], 1);
    free(idx);
    snprintf(sql, sizeof sql,
             "UPDATE ckpt SET data = x'00' || substr(data, 2) WHERE key = '%s' AND idx = 2", hex);
    raw_exec(path, sql);
    uint64_t n_bad = 0;
    struct verify_log log = { 0 };
    assert_int_equal(nf_cache_verify(c, on_bad, &log, &n_bad, &err), 0);
    assert_int_equal(n_bad, 1);
    assert_non_null(strstr(log.what, "checkpoint chunk 2"));

    /* drop removes only that key's checkpoints */
    assert_int_equal(nf_cache_ckpt_drop(c, k, &err), 0);
    assert_int_equal(nf_cache_ckpt_list(c, k, &idx, &n, &err), 0);
    assert_int_equal(n, 0);
    free(idx);
    assert_int_equal(nf_cache_ckpt_list(c, key_of(51), &idx, &n, &err), 0);
    assert_int_equal(n, 1);
    free(idx);
    free(big);
    nf_cache_close(c);
    free(path);
}

static int dead_pid(void)
{
    for (int pid = 999999; pid > 1000; pid--)
        if (kill(pid, 0) != 0 && errno == ESRCH)
            return pid;
    return -1;
}

static void test_leases(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    char hex[33], sql[512];

    assert_int_equal(nf_cache_lease(c, key_of(60), &err), 1);
    assert_int_equal(nf_cache_lease(c, key_of(60), &err), 1);   /* already ours */

    /* a dead process on this host: reclaimed */
    nf_key_hex(key_of(61), hex);
    snprintf(sql, sizeof sql, "INSERT INTO leases VALUES('%s', %d, '%s', %lld)", hex, dead_pid(), host,
             (long long)time(NULL));
    raw_exec(path, sql);
    assert_int_equal(nf_cache_lease(c, key_of(61), &err), 1);
    snprintf(sql, sizeof sql, "SELECT pid FROM leases WHERE key = '%s'", hex);
    assert_int_equal(raw_count(path, sql), getpid());

    /* a live process on this host (our parent): it blocks */
    nf_key_hex(key_of(62), hex);
    snprintf(sql, sizeof sql, "INSERT INTO leases VALUES('%s', %d, '%s', 0)", hex, (int)getppid(), host);
    raw_exec(path, sql);
    assert_int_equal(nf_cache_lease(c, key_of(62), &err), 0);

    /* another host: its heartbeat decides */
    nf_key_hex(key_of(63), hex);
    snprintf(sql, sizeof sql, "INSERT INTO leases VALUES('%s', 1, 'elsewhere.example', %lld)", hex,
             (long long)time(NULL) - 5);
    raw_exec(path, sql);
    assert_int_equal(nf_cache_lease(c, key_of(63), &err), 0);
    snprintf(sql, sizeof sql, "UPDATE leases SET heartbeat = %lld WHERE key = '%s'",
             (long long)time(NULL) - 120, hex);
    raw_exec(path, sql);
    assert_int_equal(nf_cache_lease(c, key_of(63), &err), 1);

    /* heartbeat refreshes our leases only */
    snprintf(sql, sizeof sql, "UPDATE leases SET heartbeat = 5");
    raw_exec(path, sql);
    nf_cache_heartbeat(c);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM leases WHERE heartbeat > 5 AND pid = %d", (int)getpid());
    assert_int_equal(raw_count(path, sql), 3);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM leases WHERE heartbeat = 5");
    assert_int_equal(raw_count(path, sql), 1);

    /* release */
    nf_cache_release(c, key_of(60));
    nf_cache_release(c, key_of(62));   /* not ours: stays */
    assert_int_equal(raw_count(path, "SELECT COUNT(*) FROM leases"), 3);
    struct nf_cache_info info;
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.n_leases, 3);
    nf_cache_close(c);
    free(path);
}

struct listing { int n; char keys[8][33]; };
static int on_entry(const struct nf_cache_entry *e, void *arg)
{
    struct listing *l = arg;
    if (l->n < 8)
        snprintf(l->keys[l->n], 33, "%s", e->key);
    l->n++;
    return 0;
}

static void test_gc(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    char hex[33], sql[256];
    /* five results; used = 1000, 2000, ... (key 70 least recently used) */
    struct nf_value *v = make_matrix(16, 1024, 9);
    for (int i = 0; i < 5; i++) {
        fill_noise(v->u.mat.data, 16 * 1024, 100 + (uint64_t)i);
        assert_int_equal(put(c, key_of(70 + (uint64_t)i), v, i == 1 ? "pinned-pipeline" : "other"), 0);
        nf_key_hex(key_of(70 + (uint64_t)i), hex);
        snprintf(sql, sizeof sql, "UPDATE results SET used = %d WHERE key = '%s'", 1000 * (i + 1), hex);
        raw_exec(path, sql);
    }
    struct listing l = { 0 };
    assert_int_equal(nf_cache_list(c, on_entry, &l, &err), 0);
    assert_int_equal(l.n, 5);
    nf_key_hex(key_of(74), hex);
    assert_string_equal(l.keys[0], hex);   /* most recently used first */
    struct nf_cache_info info;
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    uint64_t each = info.stored / 5;

    /* a live lease on key 72 (ours) pins it; key 71 belongs to the pipeline kept */
    assert_int_equal(nf_cache_lease(c, key_of(72), &err), 1);
    uint64_t n_deleted = 0, freed = 0;
    /* room for about two: 70 goes, 71 and 72 are pinned, 73 goes, 74 stays */
    assert_int_equal(nf_cache_gc(c, each * 3 + each / 2, -1, "pinned-pipeline", &n_deleted, &freed, &err), 0);
    assert_int_equal(n_deleted, 2);
    assert_true(freed > each * 3 / 2);
    assert_int_equal(nf_cache_has(c, key_of(70), &err), 0);
    assert_int_equal(nf_cache_has(c, key_of(71), &err), 1);
    assert_int_equal(nf_cache_has(c, key_of(72), &err), 1);
    assert_int_equal(nf_cache_has(c, key_of(73), &err), 0);
    assert_int_equal(nf_cache_has(c, key_of(74), &err), 1);
    nf_key_hex(key_of(70), hex);
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM chunks WHERE key = '%s'", hex);
    assert_int_equal(raw_count(path, sql), 0);

    /* age: everything unused for more than a day, except the pinned */
    nf_cache_release(c, key_of(72));
    snprintf(sql, sizeof sql, "UPDATE results SET used = %lld", (long long)time(NULL));
    raw_exec(path, sql);
    nf_key_hex(key_of(74), hex);
    snprintf(sql, sizeof sql, "UPDATE results SET used = %lld WHERE key = '%s'",
             (long long)time(NULL) - 3 * 86400, hex);
    raw_exec(path, sql);
    assert_int_equal(nf_cache_gc(c, 0, 1.0, NULL, &n_deleted, &freed, &err), 0);
    assert_int_equal(n_deleted, 1);
    assert_int_equal(nf_cache_has(c, key_of(74), &err), 0);
    assert_int_equal(nf_cache_has(c, key_of(72), &err), 1);

    /* checkpoints of a finished result are dropped; size 1 byte keeps only the pinned */
    assert_int_equal(nf_cache_ckpt_put(c, key_of(72), 0, "abcd", 4, &err), 0);
    assert_int_equal(nf_cache_gc(c, 1, -1, "pinned-pipeline", &n_deleted, &freed, &err), 0);
    assert_int_equal(n_deleted, 1);   /* 72 */
    assert_int_equal(nf_cache_has(c, key_of(71), &err), 1);
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.n_results, 1);
    assert_int_equal(info.n_chunks, 1);
    assert_int_equal(info.n_ckpt_chunks, 0);
    nf_value_unref(v);
    nf_cache_close(c);
    free(path);
}

static void test_network_fs(void **state)
{
    (void)state;
    struct nf_error err = { 0 };
    assert_string_equal(nf_cache_network_fs_name(0x6969), "NFS");
    assert_string_equal(nf_cache_network_fs_name(0x517B), "SMB");
    assert_string_equal(nf_cache_network_fs_name(0xFF534D42ul), "CIFS");
    /* f_type is a signed long: a sign-extended magic is the same file system */
    assert_string_equal(nf_cache_network_fs_name((unsigned long)(long)(int32_t)0xFF534D42u), "CIFS");
    assert_string_equal(nf_cache_network_fs_name(0xFE534D42ul), "SMB2");
    assert_string_equal(nf_cache_network_fs_name(0x0BD00BD0), "Lustre");
    assert_string_equal(nf_cache_network_fs_name(0x47504653), "GPFS");
    assert_string_equal(nf_cache_network_fs_name(0x5346414F), "AFS");
    assert_string_equal(nf_cache_network_fs_name(0x00C36400), "CephFS");
    assert_string_equal(nf_cache_network_fs_name(0x19830326), "BeeGFS");
    assert_string_equal(nf_cache_network_fs_name(0x01021997), "9P");
    assert_string_equal(nf_cache_network_fs_name(0x65735546), "FUSE");
    assert_null(nf_cache_network_fs_name(0xEF53));        /* ext4 */
    assert_null(nf_cache_network_fs_name(0x58465342));    /* xfs */
    assert_null(nf_cache_network_fs_name(0x9123683E));    /* btrfs */
    assert_null(nf_cache_network_fs_name(0x01021994));    /* tmpfs */
    assert_null(nf_cache_network_fs_name(0x794C7630));    /* overlayfs (containers) */
    assert_int_equal(nf_cache_check_fs("/x/cache.db", 0xEF53, &err), 0);
    assert_int_equal(nf_cache_check_fs("/x/cache.db", 0x6969, &err), NF_EUSAGE);
    assert_string_equal(err.msg,
                        "cache '/x/cache.db' is on a network file system (NFS): SQLite's write-ahead "
                        "log needs a local disk, and a shared cache there can be corrupted; put the "
                        "cache on a local disk with --cache PATH (or settings.cache), or run with "
                        "--no-cache");

    /* the same through open, with the folder's file system type injected */
    char *path = new_cache_path();
    struct nf_cache *c = NULL;
    setenv("NLFLOW_CACHE_FS_MAGIC", "0x0BD00BD0", 1);
    nf_switches_reload();
    assert_int_equal(nf_cache_open(path, NULL, &c, &err), NF_EUSAGE);
    unsetenv("NLFLOW_CACHE_FS_MAGIC");
    nf_switches_reload();
    assert_null(c);
    assert_non_null(strstr(err.msg, "(Lustre)"));
    assert_int_equal(access(path, F_OK), -1);   /* nothing was created */
    free(path);
}

static void test_disk_full(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_value *small = make_matrix(8, 8, 10);
    struct nf_value *big = make_matrix(7, 131072, 11);   /* 3.5 MiB of noise */
    assert_int_equal(put(c, key_of(80), small, NULL), 0);
    nf_cache_close(c);

    char pages[32];
    snprintf(pages, sizeof pages, "%lld", (long long)raw_count(path, "PRAGMA page_count") + 8);
    setenv("NLFLOW_CACHE_MAX_PAGES", pages, 1);
    nf_switches_reload();
    c = open_cache(path);
    assert_int_equal(nf_cache_put(c, key_of(81), big, NULL, &err), NF_EIO);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "full"));
    /* rolled back: nothing of it, the earlier entry intact, still usable */
    assert_int_equal(nf_cache_has(c, key_of(81), &err), 0);
    struct nf_value *back = get(c, key_of(80), 1);
    assert_memory_equal(back->u.mat.data, small->u.mat.data, 64 * sizeof(float));
    nf_value_unref(back);
    uint64_t n_bad = 1;
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 0);
    struct nf_cache_info info;
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.n_results, 1);
    assert_int_equal(info.n_chunks, 1);
    nf_cache_close(c);
    unsetenv("NLFLOW_CACHE_MAX_PAGES");
    nf_switches_reload();

    /* room again: it fits */
    c = open_cache(path);
    assert_int_equal(put(c, key_of(81), big, NULL), 0);
    back = get(c, key_of(81), 1);
    nf_value_unref(back);
    nf_cache_close(c);
    sqlite3 *db = raw_db(path);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
    sqlite3_finalize(st);
    sqlite3_close(db);
    nf_value_unref(small);
    nf_value_unref(big);
    free(path);
}

static void test_read_only(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_value *m = make_matrix(3, 3, 12);
    assert_int_equal(put(c, key_of(90), m, NULL), 0);
    nf_cache_close(c);

    setenv("NLFLOW_CACHE_READONLY", "1", 1);
    nf_switches_reload();
    c = open_cache(path);
    struct nf_value *back = get(c, key_of(90), 1);   /* hits are served */
    nf_value_unref(back);
    assert_int_equal(nf_cache_put(c, key_of(91), m, NULL, &err), NF_EIO);
    assert_non_null(strstr(err.msg, "readonly"));
    assert_non_null(strstr(err.msg, path));
    nf_cache_close(c);
    /* strict: refused at open */
    struct nf_cache_opts strict = { .strict = true };
    c = NULL;
    assert_int_equal(nf_cache_open(path, &strict, &c, &err), NF_EIO);
    assert_null(c);
    unsetenv("NLFLOW_CACHE_READONLY");
    nf_switches_reload();
    nf_value_unref(m);
    free(path);
}

static int count_entry(const struct nf_cache_entry *e, void *arg)
{
    struct nf_cache_entry *last = arg;
    *last = *e;
    last->pipeline_path = NULL;   /* valid during the callback only */
    return 0;
}

/* A format-1 cache (results without port and pipeline_path columns, headers
 * without tagged sections) is migrated when opened: its entries stay readable
 * and listable, new entries record their port and pipeline file. */
static void test_format1_migration(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    struct nf_value *old = make_matrix(3, 4, 1);
    assert_int_equal(put(c, key_of(70), old, "old-pipeline"), 0);
    nf_cache_close(c);
    raw_exec(path, "ALTER TABLE results DROP COLUMN port; ALTER TABLE results DROP COLUMN pipeline_path; "
                   "UPDATE meta SET value = '1' WHERE name = 'format'");
    c = open_cache(path);
    struct nf_cache_info info;
    struct nf_error err = { 0 };
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.format, NF_CACHE_FORMAT);
    struct nf_value *back = get(c, key_of(70), 1);
    assert_memory_equal(back->u.mat.data, old->u.mat.data, 12 * sizeof(float));
    assert_int_equal(back->stat.kind, NF_STAT_NONE);
    nf_value_unref(back);
    struct nf_cache_entry e;
    assert_int_equal(nf_cache_list(c, count_entry, &e, &err), 0);
    assert_string_equal(e.port, "");   /* not recorded then */
    struct nf_cache_meta meta = { "test", "node1", NULL, "new-pipeline", "weights", "/abs/p.yaml" };
    assert_int_equal(nf_cache_put(c, key_of(71), old, &meta, &err), 0);
    nf_cache_close(c);
    assert_int_equal(raw_count(path, "SELECT COUNT(*) FROM results WHERE port = 'weights' AND "
                                     "pipeline_path = '/abs/p.yaml'"), 1);
    nf_value_unref(old);
    free(path);
}

static void test_newer_format(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    nf_cache_close(c);
    raw_exec(path, "UPDATE meta SET value = '99' WHERE name = 'format'");
    struct nf_error err = { 0 };
    c = NULL;
    assert_int_equal(nf_cache_open(path, NULL, &c, &err), NF_EUSAGE);
    assert_null(c);
    assert_non_null(strstr(err.msg, "newer nlflow"));
    assert_non_null(strstr(err.msg, "format 99"));

    /* not a database at all */
    char *junk = nf_asprintf("%s/junk.db", tmpdir);
    write_file(junk, "this is not an SQLite file, just text long enough to have a header......", time(NULL));
    assert_true(nf_cache_open(junk, NULL, &c, &err) == NF_EIO);
    assert_non_null(strstr(err.msg, "junk.db"));
    free(junk);
    free(path);
}

static void test_schema(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);
    nf_cache_close(c);
    sqlite3 *db = raw_db(path);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_int_equal(raw_count(path, "PRAGMA auto_vacuum"), 2);   /* incremental */
    assert_int_equal(raw_count(path, "PRAGMA page_size"), 16384);
    assert_int_equal(raw_count(path, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                                     "('meta','results','chunks','files','nodes','ckpt','leases')"), 7);
    /* reopening an existing cache works and keeps it */
    c = open_cache(path);
    nf_cache_close(c);
    nf_cache_close(NULL);
    free(path);
}

/* Work of one process in test_two_processes: puts, gets and leases on its own
 * connection. Returns 0 when every call behaved. */
static int worker(const char *path, uint64_t base, uint64_t other)
{
    struct nf_error err = { 0 };
    struct nf_cache *c = NULL;
    int bad = 0;
    if (nf_cache_open(path, NULL, &c, &err) < 0)
        return 1;
    struct nf_value *v = nf_value_new_matrix(64, 4096, NULL, &err);   /* 1 MiB: two chunks with the header */
    for (uint64_t i = 0; i < 25 && v; i++) {
        fill_noise(v->u.mat.data, 64 * 4096, base + i);
        struct nf_cache_meta meta = { "test", "w", NULL, NULL, NULL, NULL };
        bad += nf_cache_lease(c, key_of(base + i), &err) != 1;
        bad += nf_cache_put(c, key_of(base + i), v, &meta, &err) != 0;
        bad += nf_cache_put(c, key_of(1000), v, &meta, &err) != 0;   /* both store one key */
        nf_cache_release(c, key_of(base + i));
        struct nf_value *back = NULL;
        bad += nf_cache_get(c, key_of(base + i), &back, &err) != 1;
        bad += back && memcmp(back->u.mat.data, v->u.mat.data, 64 * 4096 * sizeof(float)) != 0;
        nf_value_unref(back);
        back = NULL;
        bad += nf_cache_get(c, key_of(other + i / 2), &back, &err) < 0;   /* the other's, maybe there */
        nf_value_unref(back);
    }
    if (bad)
        fprintf(stderr, "worker %llu: %d failures, last: %s\n", (unsigned long long)base, bad, err.msg);
    nf_value_unref(v);
    nf_cache_close(c);
    return bad != 0 || !v;
}

static void test_two_processes(void **state)
{
    (void)state;
    char *path = new_cache_path();
    struct nf_cache *c = open_cache(path);   /* created before the fork */
    nf_cache_close(c);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(worker(path, 300, 200));
    int mine = worker(path, 200, 300);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(mine, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    c = open_cache(path);
    struct nf_error err = { 0 };
    struct nf_cache_info info;
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    assert_int_equal(info.n_results, 51);
    assert_int_equal(info.n_leases, 0);
    uint64_t n_bad = 1;
    assert_int_equal(nf_cache_verify(c, NULL, NULL, &n_bad, &err), 0);
    assert_int_equal(n_bad, 0);
    nf_cache_close(c);
    free(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_key_hex, clean_env),
        cmocka_unit_test_setup(test_schema, clean_env),
        cmocka_unit_test_setup(test_volume_round_trip, clean_env),
        cmocka_unit_test_setup(test_matrix_round_trip, clean_env),
        cmocka_unit_test_setup(test_table_round_trip, clean_env),
        cmocka_unit_test_setup(test_put_out_of_memory, clean_env),
        cmocka_unit_test_setup(test_large_value_and_noop_put, clean_env),
        cmocka_unit_test_setup(test_corruption, clean_env),
        cmocka_unit_test_setup(test_file_hash_memo, clean_env),
        cmocka_unit_test_setup(test_nodes, clean_env),
        cmocka_unit_test_setup(test_checkpoints, clean_env),
        cmocka_unit_test_setup(test_leases, clean_env),
        cmocka_unit_test_setup(test_gc, clean_env),
        cmocka_unit_test_setup(test_network_fs, clean_env),
        cmocka_unit_test_setup(test_disk_full, clean_env),
        cmocka_unit_test_setup(test_read_only, clean_env),
        cmocka_unit_test_setup(test_format1_migration, clean_env),
        cmocka_unit_test_setup(test_newer_format, clean_env),
        cmocka_unit_test_setup(test_two_processes, clean_env),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
