/* fuzz_cache_decode.c — libFuzzer target for the result cache's decoder
 * (engine/cache/codec.h): arbitrary bytes become a stored header plus chunk
 * rows and go through nf_cache_decode, which must answer "decoded" or
 * "corrupt" within its memory bound, never crash, leak or allocate without
 * bound. A cache file is shared and copied between machines, so its records
 * are input like any other.
 *
 * Built by `make fuzz` (build/fuzz/fuzz_cache_decode; tests/fuzz/README.md);
 * a longer run: fuzz/fuzz_cache_decode -max_total_time=600 -rss_limit_mb=2048
 * ../tests/fuzz/corpus/fuzz_cache_decode
 *
 * The seed corpus (tests/fuzz/corpus/fuzz_cache_decode/) holds valid encodings of
 * a volume, a matrix with geometry, names and a statistic, and a table with
 * numeric and string columns; rebuild it by compiling this file with
 * -DFUZZ_WRITE_SEEDS (and -fsanitize=address,undefined, no fuzzer) against
 * build/libnlflow.a, then `/tmp/seeds tests/fuzz/corpus/fuzz_cache_decode`.
 *
 * Input layout (all little-endian):
 *   u8 flags       bit 0: recompute the header's checksum (so that mutations
 *                  reach the fields behind it); bit 1: chunk data is raw and
 *                  is compressed and checksummed here (so that mutations
 *                  reach the decoded arrays: string cells, voxel indices)
 *   u16 hdr_len, hdr_len bytes of header
 *   chunks until the input ends: u8 elem, u16 len, then (unless raw)
 *   i32 raw_size and u64 checksum, then len bytes of data
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "cache/codec.h"
#include "core/util.h"

enum { MAX_CHUNKS = 64, MEMORY_BOUND = 64 << 20 };

struct input {
    const uint8_t *p;
    size_t len, pos;
};

static bool take(struct input *in, void *out, size_t n)
{
    if (n > in->len - in->pos)
        return false;
    memcpy(out, in->p + in->pos, n);
    in->pos += n;
    return true;
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static struct nf_codec codec;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct input in = { data, size, 0 };
    uint8_t flags, b2[2], b4[4], b8[8];
    struct nf_error err = { 0 };
    if (!codec.dctx && nf_codec_init(&codec, &err) < 0)
        abort();
    if (!take(&in, &flags, 1) || !take(&in, b2, 2))
        return 0;
    size_t hdr_len = (size_t)le(b2, 2);
    if (hdr_len > in.len - in.pos)
        return 0;
    uint8_t *hdr = malloc(hdr_len ? hdr_len : 1);
    take(&in, hdr, hdr_len);
    if ((flags & 1) && hdr_len >= 12) {
        uint64_t sum = XXH3_64bits(hdr, hdr_len - 8);
        memcpy(hdr + hdr_len - 8, &sum, 8);
    }
    struct nf_chunk chunks[MAX_CHUNKS];
    uint8_t *owned[MAX_CHUNKS];
    size_t n = 0;
    uint8_t elem;
    while (n < MAX_CHUNKS && take(&in, &elem, 1) && take(&in, b2, 2)) {
        size_t len = (size_t)le(b2, 2);
        struct nf_chunk *ch = &chunks[n];
        ch->idx = (int64_t)n;
        owned[n] = NULL;
        if (flags & 2) {
            if (len > in.len - in.pos)
                break;
            size_t packed_len;
            if (nf_codec_pack(&codec, in.p + in.pos, len, elem ? elem : 1, &packed_len, &err) < 0)
                break;
            owned[n] = malloc(packed_len ? packed_len : 1);
            memcpy(owned[n], codec.packed, packed_len);
            ch->data = owned[n];
            ch->len = packed_len;
            ch->raw_size = (int64_t)len;
            ch->checksum = XXH3_64bits(in.p + in.pos, len);
            in.pos += len;
        } else {
            if (!take(&in, b4, 4) || !take(&in, b8, 8) || len > in.len - in.pos)
                break;
            ch->raw_size = (int32_t)(uint32_t)le(b4, 4);
            ch->checksum = le(b8, 8);
            ch->data = in.p + in.pos;
            ch->len = len;
            in.pos += len;
        }
        n++;
    }
    struct nf_value *v = NULL;
    char what[128];
    int rc = nf_cache_decode(&codec, hdr, hdr_len, chunks, n, MEMORY_BOUND, &v, what, sizeof what, &err);
    if (rc == 1 && !v)
        abort();   /* "decoded" must come with a value */
    nf_value_unref(v);
    for (size_t i = 0; i < n; i++)
        free(owned[i]);
    free(hdr);
    return 0;
}

#ifdef FUZZ_WRITE_SEEDS
/* Write valid encodings (flags 2: raw chunks) of a few values as seeds. */
static void write_seed(const char *dir, const char *name, const struct nf_value *v)
{
    struct nf_bytes hdr = { 0 };
    struct nf_layout L = { 0 };
    struct nf_error err = { 0 };
    if (nf_layout_from_value(v, &hdr, &L, &err) < 0)
        abort();
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    uint8_t head[3] = { 2, (uint8_t)hdr.len, (uint8_t)(hdr.len >> 8) };
    fwrite(head, 1, 3, f);
    fwrite(hdr.p, 1, hdr.len, f);
    for (size_t s = 0; s < L.n_segs; s++) {
        /* the seeds are small: one chunk per segment */
        uint8_t ch[3] = { (uint8_t)L.segs[s].elem, (uint8_t)L.segs[s].bytes,
                          (uint8_t)(L.segs[s].bytes >> 8) };
        fwrite(ch, 1, 3, f);
        fwrite(L.segs[s].src, 1, L.segs[s].bytes, f);
    }
    fclose(f);
    free(hdr.p);
    nf_layout_release(&L);
}

int main(int argc, char **argv)
{
    struct nf_error err = { 0 };
    if (argc != 2)
        return 2;
    struct nf_grid g = { .dim = { 3, 2, 2 }, .pixdim = { 2, 2, 2 }, .sform_code = 4 };
    for (int i = 0; i < 4; i++)
        g.affine[i][i] = i < 3 ? 2 : 1;
    struct nf_value *vol = nf_value_new_volume(&g, 4, 2, &err);
    for (int i = 0; i < 24; i++)
        vol->u.vol.data[i] = (float)i * 0.5f;
    write_seed(argv[1], "volume", vol);

    float mask[12] = { 1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0 };
    struct nf_geom *geom = nf_geom_from_mask(&g, mask);
    struct nf_value *m = nf_value_new_matrix(2, geom->n_voxels, geom, &err);
    nf_geom_unref(geom);
    for (int64_t i = 0; i < 2 * m->u.mat.cols; i++)
        m->u.mat.data[i] = (float)i;
    m->u.mat.col_names = calloc((size_t)m->u.mat.cols, sizeof(char *));
    for (int64_t k = 0; k < m->u.mat.cols; k++)
        m->u.mat.col_names[k] = nf_asprintf("v%d", (int)k);
    const char *rows[] = { "a", NULL };
    nf_matrix_set_row_names(m, rows, &err);
    nf_value_set_stat(m, NF_STAT_T, 11, "t test");
    write_seed(argv[1], "matrix_geometry", m);

    struct nf_value *t = nf_value_new_table(3, 2, &err);
    t->u.tab.cols[0].name = strdup("subject");
    t->u.tab.cols[0].str = calloc(3, sizeof(char *));
    t->u.tab.cols[0].str[0] = strdup("sub-01");
    t->u.tab.cols[0].str[2] = strdup("sub-03");
    t->u.tab.cols[1].name = strdup("age");
    t->u.tab.cols[1].numeric = true;
    t->u.tab.cols[1].num = calloc(3, sizeof(double));
    t->u.tab.cols[1].num[1] = 31.5;
    write_seed(argv[1], "table", t);
    nf_value_unref(vol);
    nf_value_unref(m);
    nf_value_unref(t);
    return 0;
}
#endif
