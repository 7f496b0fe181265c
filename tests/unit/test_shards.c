/* test_shards.c — shard files (engine/cache/shards.c), what SLURM tasks send
 * back: a run (two outputs, one a collection of items with labels, and its
 * record) and a part (checkpoint chunks) written from one cache and imported
 * into another come back bit for bit; a shard is refused, with nothing put
 * into the cache, when any single byte of it is changed (every byte of the
 * file in turn), when it is cut short at any length, and when it belongs to
 * another pipeline, node, unit, key or part; when its values are filed under
 * keys that are not its unit's outputs, or items are swapped; and when a FIFO
 * or a link stands where the shard should be. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache.h"
#include "cache/keys.h"
#include "cache/run_record.h"
#include "cache/shards.h"
#include "core/util.h"
#include <xxhash.h>

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
    snprintf(tmpdir, sizeof tmpdir, "/tmp/nlflow-test-shards-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct nf_cache *new_cache(void)
{
    char path[320];
    snprintf(path, sizeof path, "%s/c%d.db", tmpdir, n_caches++);
    struct nf_cache *c = NULL;
    struct nf_error err = { 0 };
    struct nf_cache_opts o = { 0 };
    assert_int_equal(nf_cache_open(path, &o, &c, &err), 0);
    return c;
}

static struct nf_value *matrix(int64_t rows, int64_t cols, float base)
{
    struct nf_error err = { 0 };
    struct nf_value *m = nf_value_new_matrix(rows, cols, NULL, &err);
    assert_non_null(m);
    for (int64_t i = 0; i < rows * cols; i++)
        m->u.mat.data[i] = base + (float)i * 0.25f;
    return m;
}

static const struct nf_key run_key = { 0x1234, 0x5678 };
static const char *const ports[] = { "weights", "score" };

/* A run as the executor stores it: port 0 a single 3x50 matrix, port 1 a
 * collection of four labelled 1x2000 matrices, then the record. */
static void store_run(struct nf_cache *c)
{
    struct nf_error err = { 0 };
    struct nf_cache_meta meta = { "ridge", "fit", NULL, "p", NULL, NULL };
    struct nf_value *w = matrix(3, 50, 1.0f);
    assert_int_equal(nf_cache_put(c, nf_key_output(run_key, 0), w, &meta, &err), 0);
    nf_value_unref(w);
    struct nf_run_row rows[8];
    size_t n = 0;
    rows[n++] = (struct nf_run_row){ "out", 0, -1, NULL, "" };
    static const char *labels[] = { "sub-01", "sub-02", "sub-03", "sub-04" };
    for (int i = 0; i < 4; i++) {
        struct nf_value *it = matrix(1, 2000, (float)i);
        nf_value_set_label(it, labels[i]);
        meta.label = labels[i];
        assert_int_equal(nf_cache_put(c, nf_key_output(nf_key_output(run_key, 1), i), it, &meta, &err), 0);
        nf_value_unref(it);
        rows[n++] = (struct nf_run_row){ "label", 1, i, labels[i], "" };
    }
    rows[n++] = (struct nf_run_row){ "out", 1, 4, NULL, "" };
    struct nf_value *rec = nf_run_record_build(rows, n, &err);
    assert_non_null(rec);
    meta.label = NF_RUN_RECORD_LABEL;
    assert_int_equal(nf_cache_put(c, run_key, rec, &meta, &err), 0);
    nf_value_unref(rec);
}

static void assert_same_value(struct nf_cache *a, struct nf_cache *b, struct nf_key key)
{
    struct nf_error err = { 0 };
    struct nf_value *x = NULL, *y = NULL;
    assert_int_equal(nf_cache_get(a, key, &x, &err), 1);
    assert_int_equal(nf_cache_get(b, key, &y, &err), 1);
    assert_int_equal(x->kind, y->kind);
    if (x->kind == NF_KIND_MATRIX) {
        assert_int_equal(x->u.mat.rows, y->u.mat.rows);
        assert_int_equal(x->u.mat.cols, y->u.mat.cols);
        assert_memory_equal(x->u.mat.data, y->u.mat.data, (size_t)(x->u.mat.rows * x->u.mat.cols) * sizeof(float));
    }
    nf_value_unref(x);
    nf_value_unref(y);
}

static bool cache_empty(struct nf_cache *c)
{
    struct nf_cache_info info;
    struct nf_error err = { 0 };
    assert_int_equal(nf_cache_info(c, &info, &err), 0);
    return info.n_results == 0 && info.n_ckpt_chunks == 0;
}

static const struct nf_shard_head run_head = { "abcd", "fit", "run", { 0x1234, 0x5678 }, 0, 0 };

static int import(struct nf_cache *c, const char *path, const struct nf_shard_head *h, char *why, size_t size)
{
    struct nf_error err = { 0 };
    struct nf_cache_meta meta = { "ridge", "fit", NULL, "abcd", NULL, NULL };
    int rc = nf_shard_import(c, path, h, &meta, ports, 2, true, why, size, &err);
    assert_true(rc >= 0);
    return rc;
}

static void test_run_round_trip(void **state)
{
    (void)state;
    struct nf_cache *a = new_cache(), *b = new_cache();
    struct nf_error err = { 0 };
    char path[320], why[256];
    store_run(a);
    snprintf(path, sizeof path, "%s/run.shard", tmpdir);
    assert_int_equal(nf_shard_write(a, path, &run_head, &err), 0);
    assert_int_equal(import(b, path, &run_head, why, sizeof why), 1);
    /* everything a fetch reads: the record, both outputs, every item */
    assert_int_equal(nf_run_valid(b, run_key, tmpdir, NULL, &err), 1);
    assert_same_value(a, b, nf_key_output(run_key, 0));
    for (int i = 0; i < 4; i++)
        assert_same_value(a, b, nf_key_output(nf_key_output(run_key, 1), i));
    assert_same_value(a, b, run_key);
    nf_cache_close(a);
    nf_cache_close(b);
}

static void test_part_round_trip(void **state)
{
    (void)state;
    struct nf_cache *a = new_cache(), *b = new_cache();
    struct nf_error err = { 0 };
    char path[320], why[256];
    float chunk[3][700];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 700; i++)
            chunk[k][i] = (float)(k * 1000 + i) / 7.0f;
    for (int k = 0; k < 3; k++)
        assert_int_equal(nf_cache_ckpt_put(a, run_key, 100 + 2 * k, chunk[k], sizeof chunk[k], &err), 0);
    struct nf_shard_head h = { "abcd", "fit", "part-0001-of-0002", run_key, 1, 2 };
    snprintf(path, sizeof path, "%s/part.shard", tmpdir);
    assert_int_equal(nf_shard_write(a, path, &h, &err), 0);
    assert_int_equal(import(b, path, &h, why, sizeof why), 1);
    int64_t *idx = NULL;
    size_t n = 0;
    assert_int_equal(nf_cache_ckpt_list(b, run_key, &idx, &n, &err), 0);
    assert_int_equal(n, 3);
    for (int k = 0; k < 3; k++) {
        void *data = NULL;
        size_t bytes = 0;
        assert_int_equal(idx[k], 100 + 2 * k);
        assert_int_equal(nf_cache_ckpt_get(b, run_key, idx[k], &data, &bytes, &err), 1);
        assert_int_equal(bytes, sizeof chunk[k]);
        assert_memory_equal(data, chunk[k], bytes);
        free(data);
    }
    free(idx);
    /* a part shard is not the run, and not another part */
    struct nf_shard_head other = h;
    other.part = 0;
    struct nf_cache *c = new_cache();
    assert_int_equal(import(c, path, &other, why, sizeof why), 0);
    assert_int_equal(import(c, path, &run_head, why, sizeof why), 0);
    assert_true(cache_empty(c));
    nf_cache_close(a);
    nf_cache_close(b);
    nf_cache_close(c);
}

static unsigned char *read_all(const char *path, size_t *len)
{
    struct nf_error err = { 0 };
    unsigned char *p = (unsigned char *)nf_read_file(path, len, &err);
    assert_non_null(p);
    return p;
}

static void write_all(const char *path, const unsigned char *p, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, len, f), len);
    fclose(f);
}

/* The run of store_run written from a fresh cache as the shard `name` in the
 * scratch folder: its path, and its bytes with a copy to tamper with. */
struct written_shard {
    struct nf_cache *from;
    char path[320];
    unsigned char *bytes, *copy;
    size_t len;
};

static void write_run_shard(struct written_shard *w, const char *name)
{
    struct nf_error err = { 0 };
    w->from = new_cache();
    store_run(w->from);
    snprintf(w->path, sizeof w->path, "%s/%s", tmpdir, name);
    assert_int_equal(nf_shard_write(w->from, w->path, &run_head, &err), 0);
    w->bytes = read_all(w->path, &w->len);
    w->copy = malloc(w->len);
    assert_non_null(w->copy);
}

static void written_shard_release(struct written_shard *w)
{
    free(w->copy);
    free(w->bytes);
    nf_cache_close(w->from);
}

/* Every single changed byte, and every truncation, is refused and leaves
 * the cache untouched. */
static void test_damage_refused(void **state)
{
    (void)state;
    struct written_shard w;
    write_run_shard(&w, "dmg.shard");
    struct nf_cache *b = new_cache();
    char bad[320], why[256];
    snprintf(bad, sizeof bad, "%s/bad.shard", tmpdir);
    const char *path = w.path;
    size_t len = w.len;
    unsigned char *orig = w.bytes, *copy = w.copy;
    size_t refused = 0;
    for (size_t i = 0; i < len; i++) {
        memcpy(copy, orig, len);
        copy[i] ^= (unsigned char)(1u << (i % 8));
        write_all(bad, copy, len);
        if (import(b, bad, &run_head, why, sizeof why) == 0)
            refused++;
        else
            fail_msg("byte %zu of %zu changed, and the shard was taken", i, len);
    }
    assert_int_equal(refused, len);
    for (size_t cut = 0; cut < len; cut += 1 + cut / 16) {
        write_all(bad, orig, cut);
        if (import(b, bad, &run_head, why, sizeof why) != 0)
            fail_msg("the shard cut to %zu of %zu bytes was taken", cut, len);
    }
    assert_true(cache_empty(b));
    /* and the intact file still imports */
    assert_int_equal(import(b, path, &run_head, why, sizeof why), 1);
    written_shard_release(&w);
    nf_cache_close(b);
}

static void test_wrong_unit_refused(void **state)
{
    (void)state;
    struct nf_cache *a = new_cache(), *b = new_cache();
    struct nf_error err = { 0 };
    char path[320], why[256];
    store_run(a);
    snprintf(path, sizeof path, "%s/unit.shard", tmpdir);
    assert_int_equal(nf_shard_write(a, path, &run_head, &err), 0);
    struct nf_shard_head h[5];
    for (int i = 0; i < 5; i++)
        h[i] = run_head;
    h[0].pipeline_hash = "abce";
    h[1].node_id = "fit2";
    h[2].unit = "item-00001";
    h[3].key.lo ^= 1;
    h[4].parts = 2;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(import(b, path, &h[i], why, sizeof why), 0);
        assert_non_null(strstr(why, i == 4 ? "part" : "another"));
    }
    assert_true(cache_empty(b));
    nf_cache_close(a);
    nf_cache_close(b);
}

/* A shard whose bytes are whole (its checksum made again) but whose values
 * are filed under keys that are not its unit's outputs, or under the unit's
 * keys with another item's label (two subjects swapped), is refused
 * (../shared/repro/09: SLURM shards with another unit's values were imported
 * silently). */
static void rekey(unsigned char *buf, size_t len, struct nf_key from, struct nf_key to)
{
    char a[33], b[33];
    nf_key_hex(from, a);
    nf_key_hex(to, b);
    size_t hits = 0;
    for (size_t i = 0; i + 32 <= len; i++)
        if (memcmp(buf + i, a, 32) == 0) {
            memcpy(buf + i, b, 32);
            hits++;
        }
    assert_int_equal(hits, 1);
    uint64_t sum = XXH3_64bits(buf, len - 16);
    memcpy(buf + len - 16, &sum, sizeof sum);
}

static void test_foreign_keys_refused(void **state)
{
    (void)state;
    struct written_shard w;
    write_run_shard(&w, "own.shard");
    struct nf_cache *b = new_cache();
    char bad[320], why[256];
    snprintf(bad, sizeof bad, "%s/foreign.shard", tmpdir);
    const char *path = w.path;
    size_t len = w.len;
    unsigned char *orig = w.bytes, *copy = w.copy;
    const struct nf_key other_run = { 0x9999, 0x5678 };
    struct nf_key item0 = nf_key_output(nf_key_output(run_key, 1), 0), item1 = nf_key_output(nf_key_output(run_key, 1), 1);
    struct {
        struct nf_key from, to;
        const char *why;
    } cases[] = {
        { nf_key_output(run_key, 0), nf_key_output(other_run, 0), "lacks output 0" },   /* another unit's value */
        { item1, nf_key_output(nf_key_output(other_run, 1), 1), "lacks output 1" },
        { item0, item1, "port or label differ" },   /* items 0 and 1 swapped: two subjects' maps */
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        memcpy(copy, orig, len);
        if (c == 2) {   /* a swap: both keys stay the unit's own, the labels give it away */
            const struct nf_key tmp = { 0x7777, 0x7777 };
            rekey(copy, len, item0, tmp);
            rekey(copy, len, item1, item0);
            rekey(copy, len, tmp, item1);
        } else {
            rekey(copy, len, cases[c].from, cases[c].to);
        }
        write_all(bad, copy, len);
        assert_int_equal(import(b, bad, &run_head, why, sizeof why), 0);
        if (!strstr(why, cases[c].why))
            fail_msg("case %zu refused for another reason: %s", c, why);
    }
    assert_true(cache_empty(b));
    assert_int_equal(import(b, path, &run_head, why, sizeof why), 1);
    written_shard_release(&w);
    nf_cache_close(b);
}

/* A FIFO or a link (to /dev/zero) where a shard should be is refused at
 * once, without blocking on it or reading it (../shared/repro/10). */
static void test_special_files_refused(void **state)
{
    (void)state;
    struct nf_cache *b = new_cache();
    char fifo[320], link[320], why[256];
    snprintf(fifo, sizeof fifo, "%s/fifo.shard", tmpdir);
    snprintf(link, sizeof link, "%s/zero.shard", tmpdir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(symlink("/dev/zero", link), 0);
    assert_int_equal(import(b, fifo, &run_head, why, sizeof why), 0);
    assert_non_null(strstr(why, "not a regular file (a FIFO)"));
    assert_int_equal(import(b, link, &run_head, why, sizeof why), 0);
    assert_non_null(strstr(why, "symbolic link"));
    assert_true(cache_empty(b));
    nf_cache_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_round_trip),
        cmocka_unit_test(test_part_round_trip),
        cmocka_unit_test(test_damage_refused),
        cmocka_unit_test(test_wrong_unit_refused),
        cmocka_unit_test(test_foreign_keys_refused),
        cmocka_unit_test(test_special_files_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
