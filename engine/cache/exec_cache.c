/* exec_cache.c — storing and fetching whole node runs through the result
 * cache: outputs, item labels and written files, with the run record last
 * (see exec_cache.h; the record's format and checks: run_record.c). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "exec_cache.h"
#include "run_record.h"
#include "core/util.h"
#include "core/fault.h"

int nf_run_fetch(struct nf_cache *c, struct nf_key run, const char *outputs_dir, size_t n_out,
                 struct nf_value **out, struct nf_error *err)
{
    return nf_run_fetch_some(c, run, outputs_dir, n_out, out, NULL, NULL, err);
}

int nf_run_fetch_some(struct nf_cache *c, struct nf_key run, const char *outputs_dir, size_t n_out,
                      struct nf_value **out, bool (*want)(void *arg, int port, int64_t item), void *want_arg,
                      struct nf_error *err)
{
    struct nf_value *rec = NULL;
    char why[128];
    int rc = nf_cache_get(c, run, &rec, err);
    if (rc != 1)
        return rc;
    if (!nf_run_record_check(rec, why, sizeof why)) {
        nf_warn(NULL, "cache entry of a run is damaged (%s): recomputing", why);
        rc = 0;
        goto miss;
    }
    if (nf_run_files_match(c, &rec->u.tab, outputs_dir, NULL) != 1) {
        /* its files must be written again: a miss, but the record stays (the
         * rerun replaces it) and --explain can say why */
        nf_value_unref(rec);
        return 0;
    }
    const struct nf_table *t = &rec->u.tab;
    for (int64_t r = 0; r < t->n_rows; r++) {
        const char *what = t->cols[NF_REC_WHAT].str[r];
        int port = (int)t->cols[NF_REC_PORT].num[r];
        int64_t n = (int64_t)t->cols[NF_REC_INDEX].num[r];
        if (strcmp(what, "out") != 0)
            continue;
        if (port < 0 || (size_t)port >= n_out || out[port]) {   /* out of range or twice */
            rc = 0;
            goto miss;
        }
        struct nf_key okey = nf_key_output(run, port);
        if (want && !want(want_arg, port, -1))
            continue;
        if (n < 0) {   /* a single value */
            rc = nf_cache_get(c, okey, &out[port], err);
            if (rc != 1)
                goto miss;
            nf_value_set_label(out[port], t->cols[NF_REC_TEXT].str[r][0] ? t->cols[NF_REC_TEXT].str[r] : NULL);
            continue;
        }
        /* the last item must be there before room for all is made */
        if (n > 0 && (rc = nf_cache_has(c, nf_key_output(okey, (int)(n - 1)), err)) != 1)
            goto miss;
        out[port] = nf_value_new_collection((size_t)n, err);
        if (!out[port]) {
            rc = err->code;
            goto miss;
        }
        for (int64_t i = 0; i < n; i++) {
            if (want && !want(want_arg, port, i))
                continue;   /* left NULL: the caller does not read it */
            rc = nf_cache_get(c, nf_key_output(okey, (int)i), &out[port]->u.coll.items[i], err);
            if (rc != 1)
                goto miss;
        }
    }
    /* item labels */
    for (int64_t r = 0; r < t->n_rows; r++) {
        if (strcmp(t->cols[NF_REC_WHAT].str[r], "label") != 0)
            continue;
        int port = (int)t->cols[NF_REC_PORT].num[r];
        int64_t i = (int64_t)t->cols[NF_REC_INDEX].num[r];
        struct nf_value *coll = port >= 0 && (size_t)port < n_out ? out[port] : NULL;
        if (coll && coll->kind == NF_KIND_COLLECTION && i >= 0 && (size_t)i < coll->u.coll.n &&
            coll->u.coll.items[i])
            nf_value_set_label(coll->u.coll.items[i], t->cols[NF_REC_TEXT].str[r]);
    }
    nf_value_unref(rec);
    return 1;
miss:
    for (size_t o = 0; o < n_out; o++) {
        nf_value_unref(out[o]);
        out[o] = NULL;
    }
    nf_value_unref(rec);
    if (rc == 0) {
        /* an output is missing or was corrupt (and deleted): the record must
         * go too, or the run would look cached forever */
        struct nf_error e = { 0 };
        nf_cache_forget(c, run, &e);
    }
    return rc < 0 ? rc : 0;
}

int nf_run_store(struct nf_cache *c, struct nf_key run, const struct nf_node_inst *node,
                 const char *pipeline_hash, const char *pipeline_path, const char *outputs_dir,
                 size_t n_out, struct nf_value *const *out, const struct nf_written *written,
                 struct nf_error *err)
{
    size_t cap = n_out + (written ? written->n : 0) + 1;
    for (size_t o = 0; o < n_out; o++)
        if (out[o] && out[o]->kind == NF_KIND_COLLECTION)
            cap += out[o]->u.coll.n;
    struct nf_run_row *rows = nf_calloc(cap, sizeof *rows);
    char **owned = nf_calloc(cap, sizeof *owned);   /* recorded file paths */
    struct nf_value *rec = NULL;
    size_t n = 0, n_owned = 0;
    int rc = 0;
    if (!rows || !owned) {
        free(rows);
        free(owned);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    for (size_t o = 0; o < n_out; o++) {
        struct nf_value *v = out[o];
        if (!v)
            continue;
        struct nf_key okey = nf_key_output(run, (int)o);
        struct nf_cache_meta meta = { node->type->name, node->id, v->label, pipeline_hash,
                                      node->type->outputs[o].name, pipeline_path };
        nf_fault_point("before an output is stored");
        if (v->kind != NF_KIND_COLLECTION) {
            NF_TRY(rc = nf_cache_put(c, okey, v, &meta, err));
            rows[n++] = (struct nf_run_row){ "out", (int)o, -1, v->label, "" };
            continue;
        }
        for (size_t i = 0; i < v->u.coll.n; i++) {
            struct nf_value *it = v->u.coll.items[i];
            if (!it) {
                rc = NF_FAIL(err, NF_EBUG, "item %zu of output '%s' is missing", i,
                             node->type->outputs[o].name);
                goto fail;
            }
            meta.label = it->label;
            NF_TRY(rc = nf_cache_put(c, nf_key_output(okey, (int)i), it, &meta, err));
            if (it->label)
                rows[n++] = (struct nf_run_row){ "label", (int)o, (int64_t)i, it->label, "" };
        }
        rows[n++] = (struct nf_run_row){ "out", (int)o, (int64_t)v->u.coll.n, NULL, "" };
    }
    for (size_t f = 0; written && f < written->n; f++) {
        struct nf_key h;
        NF_TRY(rc = nf_cache_file_hash(c, written->paths[f], &h, err));
        rows[n] = (struct nf_run_row){ "file", -1, (int64_t)f, NULL, "" };
        rows[n].text = owned[n_owned++] = nf_run_recorded_path(written->paths[f], outputs_dir);
        if (!rows[n].text) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        nf_key_hex(h, rows[n].hash);
        n++;
    }
    rec = nf_run_record_build(rows, n, err);
    if (!rec) {
        rc = err->code ? err->code : NF_ENOMEM;
        goto fail;
    }
    struct nf_cache_meta meta = { node->type->name, node->id, NF_RUN_RECORD_LABEL, pipeline_hash, NULL,
                                  pipeline_path };
    nf_fault_point("outputs stored, run record not yet");
    rc = nf_cache_put(c, run, rec, &meta, err);
    nf_fault_point("run record stored");
fail:
    nf_value_unref(rec);
    for (size_t i = 0; i < n_owned; i++)
        free(owned[i]);
    free(owned);
    free(rows);
    return rc < 0 ? rc : 0;
}

/* ---- checkpoints (node.h) ---- */
int nf_ckpt_list(struct nf_checkpoint *ck, int64_t **indices, size_t *n, struct nf_error *err)
{
    *indices = NULL;
    *n = 0;
    return ck ? nf_cache_ckpt_list(ck->cache, ck->key, indices, n, err) : 0;
}

int nf_ckpt_get(struct nf_checkpoint *ck, int64_t index, void **data, size_t *bytes,
                struct nf_error *err)
{
    *data = NULL;
    *bytes = 0;
    return ck ? nf_cache_ckpt_get(ck->cache, ck->key, index, data, bytes, err) : 0;
}

bool nf_ckpt_skip(const struct nf_checkpoint *ck, int64_t ordinal)
{
    return ck && ck->parts > 0 && ordinal % ck->parts != ck->part;
}

bool nf_ckpt_partial(const struct nf_checkpoint *ck)
{
    return ck && ck->parts > 0;
}

int nf_ckpt_put(struct nf_checkpoint *ck, int64_t index, const void *data, size_t bytes,
                struct nf_error *err)
{
    (void)err;
    if (!ck)
        return 0;
    struct nf_error e = { 0 };
    nf_fault_point("before a checkpoint chunk");
    if (nf_cache_ckpt_put(ck->cache, ck->key, index, data, bytes, &e) < 0 && !ck->warned) {
        ck->warned = true;
        nf_warn(NULL, "cannot save checkpoints in the cache (%s); a killed run will start over", e.msg);
    }
    nf_fault_point("after a checkpoint chunk");
    return 0;
}
