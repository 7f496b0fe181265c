/* shards.c — shard files: one SLURM task unit's cache entries as one
 * immutable file (shards.h says why and what is checked).
 *
 * Layout (integers little-endian as the machine writes them; shards are read
 * back on the same cluster):
 *   "NLFSHRD2", u32 header length, header text ("key=value" lines: pipeline,
 *   node, unit, key, part, parts, entries),
 *   entries: u8 type ('v' a value, 'r' the run record, 'c' a checkpoint
 *   chunk), 32 hex digits of its key, then
 *     'v'/'r': port and label (u32 length + bytes each), u32 kind, shape
 *              (for `cache ls`; u32 length + bytes), the codec header
 *              (u32 length + bytes), u64 chunk count, per chunk i64 raw size,
 *              u64 checksum, u32 length + the zstd frame (exactly the cache's
 *              own encoding, codec.h);
 *     'c':     i64 index, u64 length + bytes;
 *   u64 XXH3-64 of everything before it, "NLFSEND1".
 * The trailer is written last and checked first: a file cut short by a crash
 * or a full disk is never read as a result.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "shards.h"
#include "cache_internal.h"
#include "codec.h"
#include "keys.h"
#include "run_record.h"
#include "core/fault.h"
#include "core/util.h"

static const char shard_magic[8] = { 'N', 'L', 'F', 'S', 'H', 'R', 'D', '2' };
static const char shard_end[8] = { 'N', 'L', 'F', 'S', 'E', 'N', 'D', '1' };

/* ---- writing ---- */

struct shard_out {
    FILE *fp;
    XXH3_state_t *hash;
    bool bad;
};

static void put_bytes(struct shard_out *w, const void *p, size_t n)
{
    if (w->bad || n == 0)
        return;
    if (fwrite(p, 1, n, w->fp) != n)
        w->bad = true;
    XXH3_64bits_update(w->hash, p, n);
}

static void put_u32(struct shard_out *w, uint32_t v) { put_bytes(w, &v, sizeof v); }
static void put_u64(struct shard_out *w, uint64_t v) { put_bytes(w, &v, sizeof v); }
static void put_i64(struct shard_out *w, int64_t v) { put_bytes(w, &v, sizeof v); }

static void put_str(struct shard_out *w, const char *s)
{
    size_t n = s ? strlen(s) : 0;
    put_u32(w, (uint32_t)n);
    put_bytes(w, s, n);
}

static void put_entry_head(struct shard_out *w, char type, struct nf_key key)
{
    char hex[33];
    nf_key_hex(key, hex);
    put_bytes(w, &type, 1);
    put_bytes(w, hex, 32);
}

/* One value as the cache encodes it. */
static int put_value(struct shard_out *w, struct nf_codec *k, char type, struct nf_key key,
                     const char *port, const struct nf_value *v, struct nf_error *err)
{
    struct nf_bytes hdr = { 0 };
    struct nf_layout L = { 0 };
    int rc;
    NF_TRY(rc = nf_layout_from_value(v, &hdr, &L, err));
    put_entry_head(w, type, key);
    put_str(w, port);
    put_str(w, v->label);
    put_u32(w, (uint32_t)v->kind);
    put_str(w, L.shape);
    put_u32(w, (uint32_t)hdr.len);
    put_bytes(w, hdr.p, hdr.len);
    put_u64(w, L.n_chunks);
    for (size_t s = 0; s < L.n_segs; s++) {
        const struct nf_segment *seg = &L.segs[s];
        for (uint64_t off = 0; off < seg->bytes; off += L.chunk_bytes) {
            size_t n = (size_t)(seg->bytes - off < L.chunk_bytes ? seg->bytes - off : L.chunk_bytes);
            const uint8_t *raw = (const uint8_t *)seg->src + off;
            size_t packed_len;
            NF_TRY(rc = nf_codec_pack(k, raw, n, seg->elem, &packed_len, err));
            put_i64(w, (int64_t)n);
            put_u64(w, XXH3_64bits(raw, n));
            put_u32(w, (uint32_t)packed_len);
            put_bytes(w, k->packed, packed_len);
        }
    }
    rc = 0;
fail:
    nf_layout_release(&L);
    free(hdr.p);
    return rc;
}

/* The run's outputs (every item of a collection) and then its record. */
static int put_run(struct shard_out *w, struct nf_codec *k, struct nf_cache *c, struct nf_key run,
                   size_t *n_entries, struct nf_error *err)
{
    struct nf_value *rec = NULL, *v = NULL;
    char why[128];
    int rc = nf_cache_get(c, run, &rec, err);
    if (rc <= 0) {
        if (rc == 0)
            rc = NF_FAIL(err, NF_EBUG, "the run to write as a shard is not in the task's cache");
        return rc;
    }
    if (!nf_run_record_check(rec, why, sizeof why)) {
        rc = NF_FAIL(err, NF_EBUG, "the run record to write as a shard is damaged (%s)", why);
        goto fail;
    }
    const struct nf_table *t = &rec->u.tab;
    for (int64_t r = 0; r < t->n_rows; r++) {
        const char *what = t->cols[NF_REC_WHAT].str[r];
        int port = (int)t->cols[NF_REC_PORT].num[r];
        int64_t n = (int64_t)t->cols[NF_REC_INDEX].num[r];
        if (strcmp(what, "file") == 0) {
            rc = NF_FAIL(err, NF_EBUG, "a run that writes files cannot be a shard (sinks run on the coordinator)");
            goto fail;
        }
        if (strcmp(what, "out") != 0)
            continue;
        struct nf_key okey = nf_key_output(run, port);
        for (int64_t i = n < 0 ? -1 : 0; i < (n < 0 ? 0 : n); i++) {
            struct nf_key key = i < 0 ? okey : nf_key_output(okey, (int)i);
            if ((rc = nf_cache_get(c, key, &v, err)) <= 0) {
                if (rc == 0)
                    rc = NF_FAIL(err, NF_EBUG, "an output of the run to write as a shard is missing");
                goto fail;
            }
            char port_name[24];
            snprintf(port_name, sizeof port_name, "%d", port);
            NF_TRY(rc = put_value(w, k, 'v', key, port_name, v, err));
            nf_value_unref(v);
            v = NULL;
            (*n_entries)++;
        }
    }
    NF_TRY(rc = put_value(w, k, 'r', run, "", rec, err));
    (*n_entries)++;
    rc = 0;
fail:
    nf_value_unref(v);
    nf_value_unref(rec);
    return rc;
}

static int put_chunks(struct shard_out *w, struct nf_cache *c, struct nf_key run, size_t *n_entries,
                      struct nf_error *err)
{
    int64_t *idx = NULL;
    size_t n = 0;
    int rc;
    NF_TRY(rc = nf_cache_ckpt_list(c, run, &idx, &n, err));
    for (size_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t bytes = 0;
        NF_TRY(rc = nf_cache_ckpt_get(c, run, idx[i], &data, &bytes, err));
        if (rc == 0) {
            rc = NF_FAIL(err, NF_EIO, "a checkpoint chunk of this part could not be read back");
            goto fail;
        }
        put_entry_head(w, 'c', run);
        put_i64(w, idx[i]);
        put_u64(w, bytes);
        put_bytes(w, data, bytes);
        free(data);
        (*n_entries)++;
    }
    rc = 0;
fail:
    free(idx);
    return rc;
}

static char *head_text(const struct nf_shard_head *h, size_t n_entries)
{
    char hex[33];
    nf_key_hex(h->key, hex);
    return nf_asprintf("pipeline=%s\nnode=%s\nunit=%s\nkey=%s\npart=%" PRId64 "\nparts=%" PRId64
                       "\nentries=%zu\n", h->pipeline_hash, h->node_id, h->unit, hex, h->part, h->parts,
                       n_entries);
}

/* How many entries the unit will have, so that the header can say it
 * before they are written. */
static int count_entries(struct nf_cache *c, const struct nf_shard_head *h, size_t *n, struct nf_error *err)
{
    *n = 0;
    if (h->parts > 0) {
        int64_t *idx = NULL;
        int rc = nf_cache_ckpt_list(c, h->key, &idx, n, err);
        free(idx);
        return rc;
    }
    struct nf_value *rec = NULL;
    char why[128];
    int rc = nf_cache_get(c, h->key, &rec, err);
    if (rc <= 0)
        return rc == 0 ? NF_FAIL(err, NF_EBUG, "the run to write as a shard is not in the task's cache") : rc;
    if (nf_run_record_check(rec, why, sizeof why)) {
        const struct nf_table *t = &rec->u.tab;
        for (int64_t r = 0; r < t->n_rows; r++)
            if (strcmp(t->cols[NF_REC_WHAT].str[r], "out") == 0) {
                int64_t items = (int64_t)t->cols[NF_REC_INDEX].num[r];
                *n += items < 0 ? 1 : (size_t)items;
            }
    }
    (*n)++;   /* the record */
    nf_value_unref(rec);
    return 0;
}

int nf_shard_write(struct nf_cache *c, const char *path, const struct nf_shard_head *h,
                   struct nf_error *err)
{
    struct nf_atomic a = { 0 };
    struct nf_codec k = { 0 };
    struct shard_out w = { 0 };
    char *head = NULL;
    size_t n_claimed = 0, n_entries = 0;
    int rc;
    NF_TRY(rc = count_entries(c, h, &n_claimed, err));
    NF_TRY(rc = nf_codec_init(&k, err));
    if (!(w.hash = XXH3_createState()) || !(head = head_text(h, n_claimed))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    XXH3_64bits_reset(w.hash);
    NF_TRY(rc = nf_atomic_open(&a, path, err));
    w.fp = a.fp;
    put_bytes(&w, shard_magic, sizeof shard_magic);
    put_u32(&w, (uint32_t)strlen(head));
    put_bytes(&w, head, strlen(head));
    if (h->parts > 0)
        NF_TRY(rc = put_chunks(&w, c, h->key, &n_entries, err));
    else
        NF_TRY(rc = put_run(&w, &k, c, h->key, &n_entries, err));
    if (n_entries != n_claimed) {
        rc = NF_FAIL(err, NF_EBUG, "the shard's entries changed while it was written (%zu, then %zu)",
                     n_claimed, n_entries);
        goto fail;
    }
    uint64_t sum = XXH3_64bits_digest(w.hash);
    if (w.bad || fwrite(&sum, sizeof sum, 1, a.fp) != 1 || fwrite(shard_end, sizeof shard_end, 1, a.fp) != 1) {
        rc = NF_FAIL(err, NF_EIO, "cannot write the shard '%s'", path);
        goto fail;
    }
    nf_fault_point("shard written, not yet renamed");
    rc = nf_atomic_commit(&a, err);   /* fsync, then rename to its final name */
fail:
    if (rc < 0)
        nf_atomic_abort(&a);
    if (w.hash)
        XXH3_freeState(w.hash);
    nf_codec_release(&k);
    free(head);
    return rc;
}

/* ---- reading ---- */

struct shard_in {
    const uint8_t *p;
    size_t len, off;
    bool bad;
};

static const void *take(struct shard_in *r, size_t n)
{
    if (r->bad || n > r->len - r->off) {
        r->bad = true;
        return NULL;
    }
    const void *at = r->p + r->off;
    r->off += n;
    return at;
}

static uint32_t take_u32(struct shard_in *r)
{
    uint32_t v = 0;
    const void *at = take(r, sizeof v);
    if (at)
        memcpy(&v, at, sizeof v);
    return v;
}

static uint64_t take_u64(struct shard_in *r)
{
    uint64_t v = 0;
    const void *at = take(r, sizeof v);
    if (at)
        memcpy(&v, at, sizeof v);
    return v;
}

/* A length-prefixed string as an owned C string (NULL when bad). */
static char *take_str(struct shard_in *r)
{
    uint32_t n = take_u32(r);
    const char *at = take(r, n);
    if (!at)
        return NULL;
    if (memchr(at, 0, n)) {
        r->bad = true;
        return NULL;
    }
    return nf_strndup(at, n);
}

/* The value of "name=" in the header text, copied into out. */
static bool head_field(const char *head, const char *name, char *out, size_t size)
{
    size_t nl = strlen(name);
    for (const char *line = head; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, name, nl) == 0 && line[nl] == '=') {
            const char *v = line + nl + 1, *e = strchr(v, '\n');
            size_t n = e ? (size_t)(e - v) : strlen(v);
            if (n >= size)
                return false;
            memcpy(out, v, n);
            out[n] = 0;
            return true;
        }
    }
    return false;
}

struct shard_entry {
    char type;
    struct nf_key key;
    int64_t index;            /* 'c' */
    const void *data;         /* 'c' */
    size_t bytes;
    /* 'v', 'r': the stored encoding, pointing into the file's bytes */
    char *port, *label, *shape;
    enum nf_kind kind;
    uint64_t raw_bytes;
    const uint8_t *hdr;
    size_t hdr_len;
    struct nf_chunk *chunks;  /* owned */
    size_t n_chunks;
};

static void entries_release(struct shard_entry *e, size_t n)
{
    for (size_t i = 0; e && i < n; i++) {
        free(e[i].port);
        free(e[i].label);
        free(e[i].shape);
        free(e[i].chunks);
    }
    free(e);
}

#define BAD(...) do { snprintf(why, why_size, __VA_ARGS__); rc = 0; goto fail; } while (0)

/* The values of a run's shard are exactly the outputs its record lists: each
 * under the key the run's own key gives it (output o: H(run, o); item i of a
 * collection: H(H(run, o), i)), with the record's port and label, each once,
 * none missing. A value filed under another unit's key (a shard made from
 * another subject's results) would otherwise be imported as this one's. 1
 * good, 0 not (why says), <0 error. */
static int check_unit_outputs(struct nf_codec *k, const struct shard_entry *ent, size_t n_ent, struct nf_key run,
                              uint64_t max_bytes, char *why, size_t why_size, struct nf_error *err)
{
    const struct shard_entry *r = &ent[n_ent - 1];
    struct nf_value *rec = NULL;
    bool *seen = NULL;
    char what[160] = "";
    int rc = nf_cache_decode(k, r->hdr, r->hdr_len, r->chunks, r->n_chunks, max_bytes, &rec, what, sizeof what, err);
    if (rc < 0)
        return rc;
    if (rc == 0 || !nf_run_record_check(rec, what, sizeof what))
        BAD("its run record does not decode (%s)", what);
    const struct nf_table *t = &rec->u.tab;
    if (!(seen = nf_calloc(n_ent + 1, sizeof *seen))) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    size_t listed = 0;
    for (int64_t row = 0; row < t->n_rows; row++) {
        if (strcmp(t->cols[NF_REC_WHAT].str[row], "out") != 0)
            continue;
        int port = (int)t->cols[NF_REC_PORT].num[row];
        int64_t n = (int64_t)t->cols[NF_REC_INDEX].num[row];
        struct nf_key okey = nf_key_output(run, port);
        for (int64_t i = n < 0 ? -1 : 0; i < (n < 0 ? 0 : n); i++) {
            struct nf_key key = i < 0 ? okey : nf_key_output(okey, (int)i);
            const char *label = i < 0 ? t->cols[NF_REC_TEXT].str[row] : "";
            for (int64_t l = 0; i >= 0 && l < t->n_rows; l++)
                if (strcmp(t->cols[NF_REC_WHAT].str[l], "label") == 0 && (int)t->cols[NF_REC_PORT].num[l] == port &&
                    (int64_t)t->cols[NF_REC_INDEX].num[l] == i)
                    label = t->cols[NF_REC_TEXT].str[l];
            size_t e = 0;
            while (e + 1 < n_ent && !(ent[e].type == 'v' && nf_key_equal(ent[e].key, key)))
                e++;
            if (e + 1 == n_ent)
                BAD("it lacks output %d (item %" PRId64 ") of its run record", port, i);
            char port_text[24];
            snprintf(port_text, sizeof port_text, "%d", port);
            if (seen[e] || strcmp(ent[e].port, port_text) != 0 || strcmp(ent[e].label, label ? label : "") != 0)
                BAD("entry %zu is not output %d%s as its run record lists it (port or label differ)", e, port,
                    i < 0 ? "" : " (an item)");
            seen[e] = true;
            listed++;
        }
    }
    size_t values = 0;
    for (size_t e = 0; e + 1 < n_ent; e++)
        values += ent[e].type == 'v';
    if (values != listed)
        BAD("%zu of its values are not outputs of its run (filed under another unit's keys?)", values - listed);
    rc = 1;
fail:
    free(seen);
    nf_value_unref(rec);
    return rc;
}

int nf_shard_import(struct nf_cache *c, const char *path, const struct nf_shard_head *expect,
                    const struct nf_cache_meta *meta, const char *const *port_names, size_t n_ports,
                    bool verify, char *why, size_t why_size, struct nf_error *err)
{
    struct nf_error rerr = { 0 };
    size_t len = 0;
    /* a regular file, not a link, of a size this machine can hold: a FIFO or
       a link to /dev/zero in a shared folder must not hang or exhaust it */
    uint64_t mem = nf_physical_memory();
    size_t limit = mem ? (size_t)(mem / 2) : (size_t)1 << 34;
    uint8_t *buf = (uint8_t *)nf_read_untrusted_file(path, limit, "shard", true, &len, &rerr);
    struct shard_entry *ent = NULL;
    struct nf_codec k = { 0 };
    size_t n_ent = 0;
    int rc = 0;
    why[0] = 0;
    if (!buf) {
        if (rerr.code == NF_ENOMEM)
            return NF_FAIL(err, NF_ENOMEM, "out of memory reading the shard '%s'", path);
        snprintf(why, why_size, "cannot be read (%s)", rerr.msg);
        return 0;
    }
    if (len < sizeof shard_magic + 4 + 16 || memcmp(buf, shard_magic, sizeof shard_magic) != 0)
        BAD("not a shard file (bad magic or too short: %zu bytes)", len);
    if (memcmp(buf + len - 8, shard_end, 8) != 0)
        BAD("incomplete (no end marker: cut short?)");
    uint64_t sum;
    memcpy(&sum, buf + len - 16, sizeof sum);
    if (XXH3_64bits(buf, len - 16) != sum)
        BAD("checksum mismatch (damaged)");
    struct shard_in r = { buf, len - 16, sizeof shard_magic, false };
    uint32_t head_len = take_u32(&r);
    const char *head_at = take(&r, head_len);
    if (!head_at || head_len > 4096)
        BAD("bad header length");
    char head[4097], f[128], hex[33];
    memcpy(head, head_at, head_len);
    head[head_len] = 0;
    char want_part[24], want_parts[24];
    nf_key_hex(expect->key, hex);
    snprintf(want_part, sizeof want_part, "%" PRId64, expect->part);
    snprintf(want_parts, sizeof want_parts, "%" PRId64, expect->parts);
    const char *names[] = { "pipeline", "node", "unit", "key", "part", "parts" };
    const char *wants[] = { expect->pipeline_hash, expect->node_id, expect->unit, hex, want_part, want_parts };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        if (!head_field(head, names[i], f, sizeof f))
            BAD("header has no %s", names[i]);
        if (strcmp(f, wants[i]) != 0)
            BAD("made for another %s (%s, expected %s)", names[i], f, wants[i]);
    }
    int64_t n_claimed;
    char *end = NULL;
    if (!head_field(head, "entries", f, sizeof f) || (n_claimed = strtoll(f, &end, 10)) < 0 || !end || *end ||
        n_claimed > (int64_t)(len / 33))
        BAD("bad entry count");
    ent = nf_calloc((size_t)n_claimed + 1, sizeof *ent);
    if (!ent) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    NF_TRY(rc = nf_codec_init(&k, err));
    uint64_t max_bytes = nf_physical_memory() ? nf_physical_memory() : (uint64_t)1 << 40;
    for (; n_ent < (size_t)n_claimed; n_ent++) {
        struct shard_entry *e = &ent[n_ent];
        const char *type = take(&r, 1), *khex = take(&r, 32);
        char kbuf[33];
        if (!type || !khex)
            BAD("entry %zu cut short", n_ent);
        memcpy(kbuf, khex, 32);
        kbuf[32] = 0;
        e->type = *type;
        if (nf_key_parse(kbuf, &e->key) < 0)
            BAD("entry %zu has a bad key", n_ent);
        if (e->type == 'c') {
            e->index = (int64_t)take_u64(&r);
            e->bytes = (size_t)take_u64(&r);
            e->data = take(&r, e->bytes);
            if (!e->data || !nf_key_equal(e->key, expect->key) || expect->parts == 0)
                BAD("checkpoint entry %zu is bad or does not belong to this unit", n_ent);
            continue;
        }
        if ((e->type != 'v' && e->type != 'r') || expect->parts > 0)
            BAD("entry %zu has an unexpected type", n_ent);
        e->port = take_str(&r);
        e->label = take_str(&r);
        uint32_t kind = take_u32(&r);
        e->shape = take_str(&r);
        uint32_t hlen = take_u32(&r);
        e->hdr = take(&r, hlen);
        e->hdr_len = hlen;
        uint64_t n_chunks = take_u64(&r);
        if (!e->port || !e->label || !e->shape || strlen(e->shape) > 63 || !e->hdr || r.bad ||
            n_chunks > r.len / 20)
            BAD("entry %zu cut short", n_ent);
        e->chunks = nf_calloc((size_t)n_chunks + 1, sizeof *e->chunks);
        if (!e->chunks) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        e->n_chunks = (size_t)n_chunks;
        for (uint64_t i = 0; i < n_chunks; i++) {
            struct nf_chunk *ch = &e->chunks[i];
            ch->idx = (int64_t)i;
            ch->raw_size = (int64_t)take_u64(&r);
            ch->checksum = take_u64(&r);
            ch->len = take_u32(&r);
            ch->data = take(&r, ch->len);
            if (!ch->data)
                BAD("entry %zu cut short", n_ent);
        }
        char what[160] = "";
        NF_TRY(rc = nf_cache_check_encoded(&k, e->hdr, hlen, e->chunks, e->n_chunks, max_bytes, verify, &e->kind,
                                           &e->raw_bytes, what, sizeof what, err));
        if (rc != 0)
            BAD("entry %zu does not decode (%s)", n_ent, what);
        if ((uint32_t)e->kind != kind)
            BAD("entry %zu says it holds another kind of value than its header", n_ent);
        if ((e->type == 'r') != nf_key_equal(e->key, expect->key) ||
            (e->type == 'r' && n_ent + 1 != (size_t)n_claimed))
            BAD("the run record is not the unit's or not last");
    }
    if (r.off != r.len)
        BAD("%zu bytes after the last entry", r.len - r.off);
    if (expect->parts == 0 && (n_ent == 0 || ent[n_ent - 1].type != 'r'))
        BAD("no run record");
    if (expect->parts == 0) {
        char whose[200] = "";
        rc = check_unit_outputs(&k, ent, n_ent, expect->key, max_bytes, whose, sizeof whose, err);
        if (rc < 0)
            goto fail;
        if (rc == 0)
            BAD("%s", whose);
    }
    /* every entry checked: store them, the run record last */
    for (size_t i = 0; i < n_ent; i++) {
        struct shard_entry *e = &ent[i];
        if (e->type == 'c') {
            NF_TRY(rc = nf_cache_ckpt_put(c, e->key, e->index, e->data, e->bytes, err));
            continue;
        }
        struct nf_cache_meta m = *meta;
        m.label = e->type == 'r' ? NF_RUN_RECORD_LABEL : e->label[0] ? e->label : NULL;
        char *pend = NULL;
        long port = e->type == 'v' && e->port[0] ? strtol(e->port, &pend, 10) : -1;
        m.port = pend && !*pend && port >= 0 && (size_t)port < n_ports ? port_names[port] : NULL;
        NF_TRY(rc = nf_cache_put_encoded(c, e->key, e->kind, e->shape, e->raw_bytes, e->hdr, e->hdr_len, e->chunks,
                                         e->n_chunks, &m, err));
    }
    rc = 1;
fail:
    entries_release(ent, ent ? n_ent + 1 : 0);
    nf_codec_release(&k);
    free(buf);
    return rc;
}
