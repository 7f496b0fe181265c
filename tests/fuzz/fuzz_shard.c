/* fuzz_shard.c — libFuzzer target for shard files (engine/cache/shards.h),
 * what SLURM tasks write onto a shared file system and the coordinator
 * imports: arbitrary bytes, with their trailer (checksum and end marker)
 * made valid here so that mutations reach the header and entry parser, go
 * through nf_shard_import into a scratch cache. It must answer "imported" or
 * "not a valid shard" and never crash, leak or allocate without bound; what it
 * imports must then fetch (or be found corrupt and deleted) without a crash.
 *
 * The expected unit is fixed (pipeline "abcd", node "fit", unit "run", key
 * 1234/5678, or part 1 of 2 when the input's header says parts=2), so the
 * seeds (tests/fuzz/corpus/fuzz_shard/: a run with a single output, a
 * collection of labelled items and a record, and a part with checkpoint
 * chunks) are shards of that unit; rebuild them by compiling this file with
 * -DFUZZ_WRITE_SEEDS (and -fsanitize=address,undefined, no fuzzer) against
 * build/libnlflow.a, then `/tmp/seeds tests/fuzz/corpus/fuzz_shard`.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cache/cache.h"
#include "cache/exec_cache.h"
#include "cache/keys.h"
#include "cache/run_record.h"
#include "cache/shards.h"
#include "core/util.h"
#include "fuzz_common.h"

static const struct nf_key unit_key = { 0x1234, 0x5678 };
static const char *const ports[] = { "weights", "score" };

#ifndef FUZZ_WRITE_SEEDS
static struct nf_cache *cache;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct nf_error err = { 0 };
    if (!cache) {
        const char *path = fuzz_write_input("cache.db", NULL, 0);
        remove(path);
        struct nf_cache_opts o = { 0 };
        if (nf_cache_open(path, &o, &cache, &err) < 0)
            abort();
    }
    if (size > (64u << 20))
        return 0;
    /* the input with a valid trailer: XXH3-64 of it, then the end marker */
    uint8_t *buf = malloc(size + 16);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    uint64_t sum = XXH3_64bits(buf, size);
    memcpy(buf + size, &sum, 8);
    memcpy(buf + size + 8, "NLFSEND1", 8);
    const char *path = fuzz_write_input("in.shard", buf, size + 16);
    free(buf);
    bool part = memmem(data, size, "parts=2", 7) != NULL;
    struct nf_shard_head want = { "abcd", "fit", part ? "part-0001-of-0002" : "run", unit_key, part ? 1 : 0,
                                  part ? 2 : 0 };
    struct nf_cache_meta meta = { "ridge", "fit", NULL, "abcd", NULL, NULL };
    char why[256];
    int rc = nf_shard_import(cache, path, &want, &meta, ports, 2, size & 1, why, sizeof why, &err);
    if (rc < 0 && err.code != NF_ENOMEM && err.code != NF_EIO)
        abort();
    if (rc == 1 && !part) {   /* what was taken must read back (or be found corrupt), never crash */
        struct nf_value *out[2] = { 0 };
        struct nf_error ferr = { 0 };
        nf_run_fetch(cache, unit_key, "/nonexistent", 2, out, &ferr);
        nf_value_unref(out[0]);
        nf_value_unref(out[1]);
    }
    /* start the next input from an empty cache */
    nf_cache_forget(cache, unit_key, &err);
    for (int p = 0; p < 2; p++) {
        nf_cache_forget(cache, nf_key_output(unit_key, p), &err);
        for (int i = 0; i < 8; i++)
            nf_cache_forget(cache, nf_key_output(nf_key_output(unit_key, p), i), &err);
    }
    nf_cache_ckpt_drop(cache, unit_key, &err);
    return 0;
}
#else
/* Seeds: shards of the unit above, without their 16-byte trailer (the
 * target adds it). */
static void write_seed(struct nf_cache *c, const char *dir, const char *name, const struct nf_shard_head *h)
{
    struct nf_error err = { 0 };
    char path[512], out[512];
    snprintf(path, sizeof path, "/tmp/nlflow-seed-%s", name);
    if (nf_shard_write(c, path, h, &err) < 0)
        abort();
    size_t len;
    char *text = nf_read_file(path, &len, &err);
    if (!text || len < 16)
        abort();
    snprintf(out, sizeof out, "%s/%s", dir, name);
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(text, 1, len - 16, f) != len - 16 || fclose(f) != 0)
        abort();
    free(text);
    remove(path);
}

int main(int argc, char **argv)
{
    struct nf_error err = { 0 };
    struct nf_cache *c = NULL;
    struct nf_cache_opts o = { 0 };
    if (argc != 2)
        return 2;
    remove("/tmp/nlflow-seed-cache.db");
    if (nf_cache_open("/tmp/nlflow-seed-cache.db", &o, &c, &err) < 0)
        abort();
    struct nf_cache_meta meta = { "ridge", "fit", NULL, "abcd", NULL, NULL };
    struct nf_value *w = nf_value_new_matrix(2, 5, NULL, &err);
    for (int i = 0; i < 10; i++)
        w->u.mat.data[i] = (float)i / 3.0f;
    nf_cache_put(c, nf_key_output(unit_key, 0), w, &meta, &err);
    nf_value_unref(w);
    struct nf_run_row rows[8];
    size_t n = 0;
    rows[n++] = (struct nf_run_row){ "out", 0, -1, NULL, "" };
    static const char *labels[] = { "sub-01", "sub-02" };
    for (int i = 0; i < 2; i++) {
        struct nf_value *it = nf_value_new_matrix(1, 4, NULL, &err);
        it->u.mat.data[i] = 1.5f;
        nf_value_set_label(it, labels[i]);
        meta.label = labels[i];
        nf_cache_put(c, nf_key_output(nf_key_output(unit_key, 1), i), it, &meta, &err);
        nf_value_unref(it);
        rows[n++] = (struct nf_run_row){ "label", 1, i, labels[i], "" };
    }
    rows[n++] = (struct nf_run_row){ "out", 1, 2, NULL, "" };
    struct nf_value *rec = nf_run_record_build(rows, n, &err);
    meta.label = NF_RUN_RECORD_LABEL;
    nf_cache_put(c, unit_key, rec, &meta, &err);
    nf_value_unref(rec);
    struct nf_shard_head run = { "abcd", "fit", "run", unit_key, 0, 0 };
    write_seed(c, argv[1], "run", &run);
    float chunk[16];
    for (int i = 0; i < 16; i++)
        chunk[i] = (float)i * 0.5f;
    nf_cache_ckpt_put(c, unit_key, 3, chunk, sizeof chunk, &err);
    nf_cache_ckpt_put(c, unit_key, 5, chunk, 8 * sizeof(float), &err);
    struct nf_shard_head part = { "abcd", "fit", "part-0001-of-0002", unit_key, 1, 2 };
    write_seed(c, argv[1], "part", &part);
    nf_cache_close(c);
    remove("/tmp/nlflow-seed-cache.db");
    return 0;
}
#endif
