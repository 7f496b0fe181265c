/* domain_cache.c — the `cache` benchmark domain: how fast the result cache
 * stores and returns a large float32 result, how well it compresses
 * brain-like data, and how long a fully cached rerun of the quickstart
 * pipeline takes.
 *
 *   put[maps,1GiB]  store a 1 GiB matrix of simulated brain maps (a smooth
 *                   spatial signal plus Gaussian noise: what encoding and
 *                   group maps look like), replacing the previous copy
 *   get[maps,1GiB]  read it back (decompress, verify every chunk checksum)
 *   put/get[bold,1GiB]  the same for 4D BOLD-like volumes (zeros outside an
 *                   ellipsoid brain, slow drift plus noise inside)
 *   rerun[quickstart]  `nlflow run` of pipelines/quickstart.yaml with every
 *                   result cached: planning, key checks, file hashes from the
 *                   memo, nothing computed
 * GB/s is uncompressed bytes per second; the compression ratio is reported
 * with each put/get condition.
 */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cache/cache.h"
#include "io/io.h"
#include "pipeline.h"
#include "core/util.h"
#include "lang/ytree.h"
#include "core/rng.h"

enum cache_variant { PUT_MAPS, GET_MAPS, PUT_BOLD, GET_BOLD, RERUN };

struct cache_state {
    enum cache_variant variant;
    struct nf_cache *cache;
    struct nf_value *value;
    struct nf_key key;
    uint64_t rep;
    char *pipeline;             /* RERUN */
    int threads;
    uint64_t raw, stored;       /* bytes of the stored value, after the first put */
};

static void cache_teardown(void *state)
{
    struct cache_state *st = state;
    if (!st)
        return;
    nf_value_unref(st->value);
    nf_cache_close(st->cache);
    free(st->pipeline);
    free(st);
}

/* size[0] floats, rows of size[1] voxels. */
static struct nf_value *make_maps(int64_t n, int64_t cols, struct nf_error *err)
{
    int64_t rows = n / cols;
    struct nf_value *v = nf_value_new_matrix(rows, cols, NULL, err);
    if (!v)
        return NULL;
    uint64_t state = 12345;
    for (int64_t r = 0; r < rows; r++) {
        float *row = v->u.mat.data + r * cols;
        double phase = r * 0.37;
        for (int64_t c = 0; c < cols; c++)
            row[c] = (float)(2.0 * sin(c * 0.002 + phase) + 0.5 * nf_rand_normal(&state));
    }
    return v;
}

/* 4D volumes on a 64x64x40 grid: zeros outside an ellipsoid. */
static struct nf_value *make_bold(int64_t n, struct nf_error *err)
{
    struct nf_grid g = { .dim = { 64, 64, 40 }, .pixdim = { 3, 3, 3 }, .sform_code = 1 };
    for (int i = 0; i < 3; i++)
        g.affine[i][i] = 3;
    g.affine[3][3] = 1;
    int64_t nvox = 64 * 64 * 40, nt = n / nvox;
    struct nf_value *v = nf_value_new_volume(&g, 4, nt > 0 ? nt : 1, err);
    if (!v)
        return NULL;
    uint64_t state = 777;
    for (int64_t t = 0; t < nt; t++)
        for (int64_t k = 0; k < 40; k++)
            for (int64_t j = 0; j < 64; j++)
                for (int64_t i = 0; i < 64; i++) {
                    double x = (i - 32) / 28.0, y = (j - 32) / 30.0, z = (k - 20) / 18.0;
                    float val = 0;
                    if (x * x + y * y + z * z <= 1)
                        val = (float)(800 + 50 * sin(t * 0.1 + i * 0.05) + 10 * nf_rand_normal(&state));
                    v->u.vol.data[t * nvox + i + 64 * (j + 64 * k)] = val;
                }
    return v;
}

static int cache_setup(const struct nf_bench_ctx *ctx, void **state, struct nf_error *err)
{
    struct cache_state *st = calloc(1, sizeof *st);
    char *path = NULL;
    int rc = 0;
    if (!st)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    st->variant = (enum cache_variant)ctx->cond->variant;
    st->threads = ctx->threads;
    if (st->variant == RERUN) {
        /* the quickstart pipeline, run once here to fill the cache */
        char *src = nf_path_join(ctx->work_dir, "quickstart.yaml");
        const char *repo_pipeline = getenv("NLFLOW_BENCH_QUICKSTART");
        char *text = nf_read_file(repo_pipeline ? repo_pipeline : "pipelines/quickstart.yaml", NULL, err);
        if (!src || !text) {
            free(src);
            free(text);
            rc = err->code ? err->code : NF_ENOMEM;
            goto fail;
        }
        rc = nf_write_file_atomic(src, text, strlen(text), err);
        free(text);
        st->pipeline = src;
        NF_TRY(rc);
        *state = st;
        return 0;
    }
    path = nf_path_join(ctx->work_dir, "cache.db");
    struct nf_cache_opts co = { 0 };
    NF_TRY(rc = nf_cache_open(path, &co, &st->cache, err));
    bool bold = st->variant == PUT_BOLD || st->variant == GET_BOLD;
    st->value = bold ? make_bold(ctx->size[0], err) : make_maps(ctx->size[0], ctx->size[1], err);
    if (!st->value) {
        rc = err->code ? err->code : NF_ENOMEM;
        goto fail;
    }
    st->raw = nf_value_bytes(st->value);
    st->key = (struct nf_key){ 0x6e6c666c6f770000ull, 1 };
    struct nf_cache_meta meta = { "bench", "cache", NULL, NULL, NULL, NULL };
    NF_TRY(rc = nf_cache_put(st->cache, st->key, st->value, &meta, err));
    struct nf_cache_info info;
    NF_TRY(rc = nf_cache_info(st->cache, &info, err));
    st->stored = info.stored;
    if (st->variant == GET_MAPS || st->variant == GET_BOLD) {
        nf_value_unref(st->value);   /* only the stored copy is needed */
        st->value = NULL;
    }
    *state = st;
    st = NULL;
fail:
    free(path);
    cache_teardown(st);
    return rc;
}


static int cache_run_once(void *state, struct nf_error *err)
{
    struct cache_state *st = state;
    int rc = 0;
    switch (st->variant) {
    case PUT_MAPS:
    case PUT_BOLD: {
        /* replace the previous copy, so the file does not grow rep by rep */
        NF_TRY(rc = nf_cache_forget(st->cache, st->key, err));
        st->key.lo = ++st->rep + 1;
        struct nf_cache_meta meta = { "bench", "cache", NULL, NULL, NULL, NULL };
        rc = nf_cache_put(st->cache, st->key, st->value, &meta, err);
        break;
    }
    case GET_MAPS:
    case GET_BOLD: {
        struct nf_value *v = NULL;
        rc = nf_cache_get(st->cache, st->key, &v, err);
        if (rc == 1) {
            nf_value_unref(v);
            rc = 0;
        } else if (rc == 0) {
            rc = NF_FAIL(err, NF_EBUG, "the stored value is gone");
        }
        break;
    }
    case RERUN:
        rc = nf_bench_run_pipeline(st->pipeline, st->threads, true, err);
        break;
    }
fail:
    return rc;
}

static double cache_bytes(const struct nf_bench_ctx *ctx)
{
    return ctx->cond->variant == RERUN ? 0 : (double)ctx->size[0] * 4;   /* size 1x1: a rerun has no data size */
}

static void cache_describe(const struct nf_bench_ctx *ctx, void *state, struct nf_strbuf *json)
{
    const struct cache_state *st = state;
    (void)ctx;
    if (st && st->stored)
        nf_strbuf_addf(json, ", \"stored_bytes\": %" PRIu64 ", \"compression_ratio\": %.3f",
                       st->stored, (double)st->raw / (double)st->stored);
}

#define CACHE_ROW(name, runs, floats, cols, variant) \
    { name, runs, { floats, cols, 0, 0 }, variant, NULL, cache_setup, cache_run_once, cache_teardown, \
      NULL, cache_bytes, NULL, cache_describe, NULL, NULL, false }

const struct nf_bench_condition nf_bench_cache_conditions[] = {
    CACHE_ROW("put[maps,8MiB]", NF_BENCH_QUICK, 2 << 20, 20000, PUT_MAPS),
    CACHE_ROW("get[maps,8MiB]", NF_BENCH_QUICK, 2 << 20, 20000, GET_MAPS),
    CACHE_ROW("put[maps,1GiB]", NF_BENCH_FULL, 256 << 20, 230000, PUT_MAPS),
    CACHE_ROW("get[maps,1GiB]", NF_BENCH_FULL, 256 << 20, 230000, GET_MAPS),
    CACHE_ROW("put[bold,1GiB]", NF_BENCH_FULL, 256 << 20, 0, PUT_BOLD),
    CACHE_ROW("get[bold,1GiB]", NF_BENCH_FULL, 256 << 20, 0, GET_BOLD),
    CACHE_ROW("rerun[quickstart]", NF_BENCH_FULL | NF_BENCH_QUICK, 1, 1, RERUN),
    { NULL, 0, { 0 }, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false },
};

/* Under the table: throughput in MB/s and the compression ratios. */
void nf_bench_cache_notes(const struct nf_ynode *domain_result, struct nf_strbuf *md)
{
    const struct nf_ynode *conds = nf_ymap_get(domain_result, "conditions");
    bool any = false;
    for (size_t i = 0; conds && i < conds->n; i++) {
        const char *name = nf_ypath_str(conds->items[i], "name");
        double median = nf_ypath_num(conds->items[i], "measure.median_s");
        double bytes = nf_ypath_num(conds->items[i], "measure.bytes");
        double ratio = nf_ypath_num(conds->items[i], "measure.compression_ratio");
        if (!name || !(median > 0))
            continue;
        if (!any)
            nf_strbuf_addf(md, "\n");
        any = true;
        if (bytes > 0)
            nf_strbuf_addf(md, "- %s: %.0f MB/s of float32 data%s", name, bytes / median / 1e6,
                           ratio > 0 ? "" : "\n");
        else
            nf_strbuf_addf(md, "- %s: %.3f s\n", name, median);
        if (bytes > 0 && ratio > 0)
            nf_strbuf_addf(md, ", compression ratio %.2f (zstd level 1 on byte planes)\n", ratio);
    }
}
