/* exec_cache.c — storing and fetching whole node runs through the result
 * cache: outputs, item labels and written files, with the run record last
 * (see exec_cache.h). */
#include <stdlib.h>
#include <string.h>

#include "exec_cache.h"
#include "core/util.h"

enum { REC_WHAT, REC_PORT, REC_INDEX, REC_TEXT, REC_HASH, REC_COLS };
static const char *const rec_names[REC_COLS] = { "what", "port", "index", "text", "hash" };

struct record_row { const char *what; int port; int64_t index; const char *text; char hash[33]; };

static struct nf_value *record_build(const struct record_row *rows, size_t n, struct nf_error *err)
{
    struct nf_value *v = nf_value_new_table((int64_t)n, REC_COLS, err);
    if (!v)
        return NULL;
    struct nf_table *t = &v->u.tab;
    for (int c = 0; c < REC_COLS; c++) {
        struct nf_column *col = &t->cols[c];
        col->name = nf_strdup(rec_names[c]);
        col->numeric = c == REC_PORT || c == REC_INDEX;
        if (col->numeric)
            col->num = nf_calloc(n + 1, sizeof *col->num);
        else
            col->str = nf_calloc(n + 1, sizeof *col->str);
        if (!col->name || (col->numeric ? !col->num : !col->str))
            goto oom;
    }
    for (size_t r = 0; r < n; r++) {
        t->cols[REC_PORT].num[r] = rows[r].port;
        t->cols[REC_INDEX].num[r] = (double)rows[r].index;
        t->cols[REC_WHAT].str[r] = nf_strdup(rows[r].what);
        t->cols[REC_TEXT].str[r] = nf_strdup(rows[r].text ? rows[r].text : "");
        t->cols[REC_HASH].str[r] = nf_strdup(rows[r].hash);
        if (!t->cols[REC_WHAT].str[r] || !t->cols[REC_TEXT].str[r] || !t->cols[REC_HASH].str[r])
            goto oom;
    }
    return v;
oom:
    nf_value_unref(v);
    NF_FAIL(err, NF_ENOMEM, "out of memory");
    return NULL;
}

static bool record_ok(const struct nf_value *rec)
{
    if (!rec || rec->kind != NF_KIND_TABLE || rec->u.tab.n_cols != REC_COLS)
        return false;
    for (int c = 0; c < REC_COLS; c++)
        if (!rec->u.tab.cols[c].name || strcmp(rec->u.tab.cols[c].name, rec_names[c]) != 0 ||
            rec->u.tab.cols[c].numeric != (c == REC_PORT || c == REC_INDEX))
            return false;
    return true;
}

/* Written files are recorded relative to the outputs folder when they are in
 * it ("@outputs/sub-01_x.nii.gz"), so that they are checked where the current
 * outputs folder is, and by absolute path otherwise. */
#define OUTPUTS_MARK "@outputs/"

static char *recorded_path(const char *path, const char *outputs_dir)
{
    char *real = nf_realpath(path);
    char *out_real = outputs_dir ? nf_realpath(outputs_dir) : NULL;
    char *rec = NULL;
    size_t n = out_real ? strlen(out_real) : 0;
    if (real && out_real && strncmp(real, out_real, n) == 0 && real[n] == '/')
        rec = nf_asprintf(OUTPUTS_MARK "%s", real + n + 1);
    else
        rec = nf_strdup(real ? real : path);
    free(real);
    free(out_real);
    return rec;
}

static char *resolved_path(const char *recorded, const char *outputs_dir)
{
    size_t n = strlen(OUTPUTS_MARK);
    if (strncmp(recorded, OUTPUTS_MARK, n) == 0)
        return outputs_dir ? nf_path_join(outputs_dir, recorded + n) : NULL;
    return nf_strdup(recorded);
}

/* Files the run wrote still there (in the current outputs folder) with the
 * same content? When not, *stale (if given) names the first one that is not. */
static int files_match(struct nf_cache *c, const struct nf_table *t, const char *outputs_dir,
                       char **stale)
{
    for (int64_t r = 0; r < t->n_rows; r++) {
        if (strcmp(t->cols[REC_WHAT].str[r], "file") != 0)
            continue;
        struct nf_key want, got;
        struct nf_error ferr = { 0 };
        char *path = resolved_path(t->cols[REC_TEXT].str[r], outputs_dir);
        bool same = path && nf_key_parse(t->cols[REC_HASH].str[r], &want) == 0 &&
                    nf_cache_file_hash(c, path, &got, &ferr) == 0 && nf_key_equal(want, got);
        if (!same) {   /* gone, unreadable or edited: write it again */
            if (stale)
                *stale = path ? path : nf_strdup(t->cols[REC_TEXT].str[r]);
            else
                free(path);
            return 0;
        }
        free(path);
    }
    return 1;
}

int nf_run_valid(struct nf_cache *c, struct nf_key run, const char *outputs_dir, char **stale,
                 struct nf_error *err)
{
    struct nf_value *rec = NULL;
    if (stale)
        *stale = NULL;
    int rc = nf_cache_get(c, run, &rec, err);
    if (rc != 1)
        return rc;
    rc = record_ok(rec) ? files_match(c, &rec->u.tab, outputs_dir, stale) : 0;
    nf_value_unref(rec);
    return rc;
}

int nf_run_fetch(struct nf_cache *c, struct nf_key run, const char *outputs_dir, size_t n_out,
                 struct nf_value **out, struct nf_error *err)
{
    struct nf_value *rec = NULL;
    int rc = nf_cache_get(c, run, &rec, err);
    if (rc != 1)
        return rc;
    if (!record_ok(rec)) {
        rc = 0;
        goto miss;
    }
    if (files_match(c, &rec->u.tab, outputs_dir, NULL) != 1) {
        /* its files must be written again: a miss, but the record stays (the
         * rerun replaces it) and --explain can say why */
        nf_value_unref(rec);
        return 0;
    }
    const struct nf_table *t = &rec->u.tab;
    for (int64_t r = 0; r < t->n_rows; r++) {
        const char *what = t->cols[REC_WHAT].str[r];
        int port = (int)t->cols[REC_PORT].num[r];
        int64_t n = (int64_t)t->cols[REC_INDEX].num[r];
        if (strcmp(what, "out") != 0)
            continue;
        if (port < 0 || (size_t)port >= n_out) {
            rc = 0;
            goto miss;
        }
        struct nf_key okey = nf_key_output(run, port);
        if (n < 0) {   /* a single value */
            rc = nf_cache_get(c, okey, &out[port], err);
            if (rc != 1)
                goto miss;
            nf_value_set_label(out[port], t->cols[REC_TEXT].str[r][0] ? t->cols[REC_TEXT].str[r] : NULL);
            continue;
        }
        out[port] = nf_value_new_collection((size_t)n, err);
        if (!out[port]) {
            rc = err->code;
            goto miss;
        }
        for (int64_t i = 0; i < n; i++) {
            rc = nf_cache_get(c, nf_key_output(okey, (int)i), &out[port]->u.coll.items[i], err);
            if (rc != 1)
                goto miss;
        }
    }
    /* item labels */
    for (int64_t r = 0; r < t->n_rows; r++) {
        if (strcmp(t->cols[REC_WHAT].str[r], "label") != 0)
            continue;
        int port = (int)t->cols[REC_PORT].num[r];
        int64_t i = (int64_t)t->cols[REC_INDEX].num[r];
        struct nf_value *coll = port >= 0 && (size_t)port < n_out ? out[port] : NULL;
        if (coll && coll->kind == NF_KIND_COLLECTION && i >= 0 && (size_t)i < coll->u.coll.n)
            nf_value_set_label(coll->u.coll.items[i], t->cols[REC_TEXT].str[r]);
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
    struct record_row *rows = nf_calloc(cap, sizeof *rows);
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
            rows[n++] = (struct record_row){ "out", (int)o, -1, v->label, "" };
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
                rows[n++] = (struct record_row){ "label", (int)o, (int64_t)i, it->label, "" };
        }
        rows[n++] = (struct record_row){ "out", (int)o, (int64_t)v->u.coll.n, NULL, "" };
    }
    for (size_t f = 0; written && f < written->n; f++) {
        struct nf_key h;
        NF_TRY(rc = nf_cache_file_hash(c, written->paths[f], &h, err));
        rows[n] = (struct record_row){ "file", -1, (int64_t)f, NULL, "" };
        rows[n].text = owned[n_owned++] = recorded_path(written->paths[f], outputs_dir);
        if (!rows[n].text) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        nf_key_hex(h, rows[n].hash);
        n++;
    }
    rec = record_build(rows, n, err);
    if (!rec) {
        rc = err->code ? err->code : NF_ENOMEM;
        goto fail;
    }
    struct nf_cache_meta meta = { node->type->name, node->id, "run record", pipeline_hash, NULL,
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
