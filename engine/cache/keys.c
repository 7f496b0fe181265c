/* keys.c — canonical parameters and Merkle keys of node results (keys.h). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
/* the state's layout, so that it lives on the stack: hashing allocates nothing
 * and cannot fail */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "keys.h"
#include "lang/params.h"
#include "run_record.h"
#include "core/util.h"

void nf_keyset_release(struct nf_keyset *k)
{
    free(k->items);
    memset(k, 0, sizeof *k);
}

static void feed(XXH3_state_t *st, const void *p, size_t n)
{
    XXH3_128bits_update(st, p, n);
}

static void feed_u64(XXH3_state_t *st, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));   /* explicit little-endian */
    feed(st, b, 8);
}

static void feed_str(XXH3_state_t *st, const char *s)
{
    if (!s) {
        feed_u64(st, UINT64_MAX);   /* NULL differs from "" */
        return;
    }
    size_t n = strlen(s);
    feed_u64(st, n);
    feed(st, s, n);
}

static void feed_double(XXH3_state_t *st, double d)
{
    if (d == 0)
        d = 0;   /* -0 and +0 are the same parameter */
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    feed_u64(st, bits);
}

/* A parameter's value reaches the hash through its type's key op (params.c). */
static void sink_u64(void *st, uint64_t v) { feed_u64(st, v); }
static void sink_double(void *st, double v) { feed_double(st, v); }
static void sink_str(void *st, const char *s) { feed_str(st, s); }

static void feed_key(XXH3_state_t *st, struct nf_key k)
{
    feed_u64(st, k.hi);
    feed_u64(st, k.lo);
}

static struct nf_key digest(XXH3_state_t *st)
{
    XXH128_hash_t h = XXH3_128bits_digest(st);
    return (struct nf_key){ h.high64, h.low64 };
}

/* Begin a key in the caller's `state` (on its stack): `XXH3_state_t state,
 * *st = start(&state, "node");` then feed and digest(st). */
static XXH3_state_t *start(XXH3_state_t *st, const char *domain)
{
    XXH3_INITSTATE(st);
    XXH3_128bits_reset(st);
    feed_str(st, domain);
    feed_u64(st, NF_CACHE_FORMAT);
    return st;
}

void nf_keyset_seal(struct nf_keyset *k)
{
    XXH3_state_t state, *st = start(&state, "collection");
    feed_u64(st, k->n);
    for (size_t i = 0; i < k->n; i++)
        feed_key(st, k->items[i]);
    k->whole = digest(st);
}

/* Is parameter p part of the node's key? */
static bool keyed(const struct nf_node_inst *node, const struct nf_param *p)
{
    if (p->flags & NF_PF_NOT_KEYED)
        return false;
    return !node->type->param_matters || node->type->param_matters(node->params, p);
}

struct nf_key nf_key_node_base(const struct nf_node_inst *node)
{
    const struct nf_node_type *t = node->type;
    XXH3_state_t state, *st = start(&state, "node");
    const struct nf_key_sink sink = { sink_u64, sink_double, sink_str, st };
    feed_str(st, t->name);
    feed_u64(st, (uint64_t)t->version);
    for (const struct nf_param *p = t->params; p && p->name; p++) {
        if (!keyed(node, p))
            continue;
        const char *field = (const char *)node->params + p->offset;
        feed_str(st, p->name);
        nf_ptype_ops(p->type)->key(p, field, &sink);
    }
    return digest(st);
}

struct nf_key nf_key_combine(struct nf_key base, const struct nf_key *inputs, size_t n)
{
    XXH3_state_t state, *st = start(&state, "run");
    feed_key(st, base);
    feed_u64(st, n);
    for (size_t i = 0; i < n; i++)
        feed_key(st, inputs[i]);
    return digest(st);
}

struct nf_key nf_key_output(struct nf_key run, int port)
{
    XXH3_state_t state, *st = start(&state, "output");
    feed_key(st, run);
    feed_u64(st, (uint64_t)port);
    return digest(st);
}

struct nf_key nf_key_file_value(struct nf_key load_base, struct nf_key content, const char *label)
{
    XXH3_state_t state, *st = start(&state, "file");
    feed_key(st, load_base);
    feed_key(st, content);
    feed_str(st, label);
    return digest(st);
}

/* One parameter's value as JSON text. */
static void param_value_json(const struct nf_node_inst *node, const struct nf_param *p,
                             struct nf_strbuf *sb)
{
    nf_ptype_ops(p->type)->json(p, (const char *)node->params + p->offset, sb);
}

char *nf_params_json(const struct nf_node_inst *node)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    nf_strbuf_addf(&sb, "{");
    bool first = true;
    for (const struct nf_param *p = node->type->params; p && p->name; p++) {
        if (!keyed(node, p))
            continue;
        nf_strbuf_addf(&sb, "%s", first ? "" : ", ");
        first = false;
        nf_strbuf_add_json_str(&sb, p->name);
        nf_strbuf_addf(&sb, ": ");
        param_value_json(node, p, &sb);
    }
    nf_strbuf_addf(&sb, "}");
    return nf_strbuf_detach(&sb);
}

/* ---- keys of a whole pipeline ---- */

void nf_node_keys_release(struct nf_node_keys *k)
{
    if (!k)
        return;
    for (size_t o = 0; k->outs && o < k->n_outs; o++)
        nf_keyset_release(&k->outs[o]);
    free(k->outs);
    free(k->runs);
    free(k->components);
    memset(k, 0, sizeof *k);
}

static struct nf_key named_input(const char *name, struct nf_key key)
{
    XXH3_state_t state, *st = start(&state, "input");
    feed_str(st, name);
    feed_key(st, key);
    return digest(st);
}

/* Does port `port` of node run once per item of a collection with these keys? */
/* Could node run once per item of what reaches input `port`? (Not when the
 * port takes collections whole, or the node never maps.) */
static bool port_can_map(const struct nf_node_inst *node, int port)
{
    const struct nf_port *pt = &node->type->inputs[port];
    return !(pt->types & NF_PT_COLL) && !(node->type->flags & NF_NODE_NO_MAP);
}

/* Does node run once per item of keyset ks on input `port`: 1 yes, 0 no,
 * -1 not known yet (the shape is open, or whether a port that stacks a
 * collection of matrices gets one is not known). As prepare_inputs decides
 * at run time: a collection of matrices on a stacking port is stacked, any
 * other collection (an empty one too) is mapped over. */
static int port_maps(const struct nf_node_inst *node, int port, const struct nf_keyset *ks)
{
    if (port < 0 || !port_can_map(node, port))
        return 0;
    if (ks->shape_open)
        return -1;
    if (!ks->is_coll)
        return 0;
    if (!(node->type->inputs[port].flags & NF_PORT_STACK) || ks->n == 0)
        return 1;
    int kind = ks->item_kind;
    if (kind == NF_KIND_NONE && node->in_shape && node->in_shape[port].kind == NF_KIND_MATRIX)
        kind = NF_KIND_MATRIX;   /* the plan stacked it */
    return kind == NF_KIND_NONE ? -1 : kind != NF_KIND_MATRIX;
}

struct named { const char *name; const struct nf_keyset *ks; bool maps; };

static int named_cmp(const void *a, const void *b)
{
    return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* What a node's bits depend on beyond its parameters and inputs, folded into
 * its base key (and listed in its components for --explain):
 * - the device, when it is the GPU (float results differ from the CPU's in
 *   their last bits; CPU keys stay as they were);
 * - the content of files it reads on its own (key_files: simulate's mask);
 * - for nodes that write files (sinks): the pipeline's name (file names) and
 *   hash (provenance written into summary.json / dataset_description.json, so
 *   that they always describe the current pipeline) and nlflow's version.
 * Settings that cannot change bits (threads, memory, cache, the outputs
 * folder: files are checked where they are now, see nf_run_valid) stay out.
 * Seeds that default to settings.seed are parameters by now (NF_PF_SEED).
 * Returns 1, 0 when a file cannot be hashed (keys unknown), <0 on OOM. */
static int key_environment(const struct nf_pipeline *p, const struct nf_node_inst *node,
                           struct nf_key *base, struct nf_strbuf *comp, struct nf_cache *cache,
                           struct nf_error *err)
{
    const struct nf_node_type *t = node->type;
    XXH3_state_t state, *st = start(&state, "environment");
    int rc = 1;
    feed_key(st, *base);
    if (node->device == NF_DEV_GPU && t->run_gpu) {
        feed_str(st, "device gpu");
        nf_strbuf_addf(comp, "device gpu\n");
    }
    if (t->flags & NF_NODE_SINK) {
        feed_str(st, p->name);
        feed_str(st, p->hash);
        feed_str(st, PACKAGE_VERSION);
        nf_strbuf_addf(comp, "pipeline name=%s\npipeline hash=%s\nnlflow version=%s\n", p->name,
                       p->hash, PACKAGE_VERSION);
        /* the files used through `use:` as its provenance lists them (summary.json's UsedFiles):
           a cached sink would otherwise describe a template as it was */
        feed_u64(st, p->n_used_files);
        for (size_t i = 0; i < p->n_used_files; i++) {
            const struct nf_used_file *uf = &p->used_files[i];
            feed_str(st, uf->path);
            feed_str(st, uf->hash);
            feed_str(st, uf->commit);
            feed_str(st, uf->used_by);
            nf_strbuf_addf(comp, "used file %s=%s%s%s\n", uf->path, uf->hash, uf->commit ? " commit " : "",
                           uf->commit ? uf->commit : "");
        }
    }
    if (t->key_files) {
        struct nf_env env;
        char **paths = NULL;
        size_t n = 0;
        nf_pipeline_env(p, &env);
        struct nf_error kerr = { 0 };
        rc = t->key_files(node->params, &env, &paths, &n, &kerr);
        if (rc == NF_ENOMEM) {
            *err = kerr;
            return rc;
        }
        if (rc < 0)
            return 0;   /* its files are not there (yet: after a node that writes them);
                           shape resolution reports what is wrong with them */
        rc = 1;
        for (size_t i = 0; i < n; i++) {
            struct nf_key content;
            char hex[33];
            struct nf_error ferr = { 0 };
            if ((cache ? nf_cache_file_hash(cache, paths[i], &content, &ferr)
                       : nf_file_hash(paths[i], &content, &ferr)) < 0) {
                rc = 0;
                break;
            }
            feed_key(st, content);
            nf_key_hex(content, hex);
            nf_strbuf_addf(comp, "file %s=%s\n", paths[i], hex);
        }
        feed_u64(st, n);
        for (size_t i = 0; i < n; i++)
            free(paths[i]);
        free(paths);
    }
    *base = digest(st);
    return rc;
}

/* A file reader's output read from a file of its own (node_type.output_file):
 * one value keyed by the reader's type and parameters and that file's
 * content, or by its absence (nothing can consume an output that is not
 * made: shape resolution says so). 1 when keyed so, 0 for an ordinary
 * output, NF_ENOMEM. */
static int own_file_key(const struct nf_node_type *t, const struct nf_node_inst *node, int port,
                        struct nf_key own_base, struct nf_cache *cache, struct nf_keyset *ks,
                        struct nf_strbuf *comp, struct nf_error *err)
{
    char *path = NULL;
    struct nf_error ferr = { 0 };
    int rc = t->output_file ? t->output_file(node->params, port, &path, &ferr) : 0;
    if (rc <= 0) {
        if (rc == NF_ENOMEM)
            *err = ferr;
        return rc == NF_ENOMEM ? rc : 0;
    }
    XXH3_state_t state, *st = start(&state, "output file");
    feed_key(st, own_base);
    feed_u64(st, (uint64_t)port);
    struct nf_key content;
    bool there = (cache ? nf_cache_file_hash(cache, path, &content, &ferr)
                        : nf_file_hash(path, &content, &ferr)) == 0;
    if (there) {
        char hex[33];
        feed_key(st, content);
        nf_key_hex(content, hex);
        nf_strbuf_addf(comp, "file %s=%s (output %s)\n", path, hex, t->outputs[port].name);
    } else {
        feed_str(st, "absent");
    }
    free(path);
    *ks = (struct nf_keyset){ .known = true, .whole = digest(st) };
    return 1;
}

/* Keyset ks becomes a single value, or a collection of n items keyed from
 * its whole key (a collection made by one run: simulate's subjects). */
static int keyset_shape(struct nf_keyset *ks, bool is_coll, size_t n, int item_kind, struct nf_error *err)
{
    free(ks->items);
    ks->is_coll = is_coll;
    ks->item_kind = is_coll ? item_kind : NF_KIND_NONE;
    ks->n = is_coll ? n : 0;
    ks->shape_open = false;
    ks->items = nf_calloc(ks->n + 1, sizeof *ks->items);
    if (!ks->items)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    for (size_t i = 0; i < ks->n; i++)
        ks->items[i] = nf_key_output(ks->whole, (int)i);
    return 0;
}

/* Output shapes of a run that is in the cache, from its record (which says
 * what the run made: a single value, or a collection and its size), over the
 * plan's guess. Outputs the record does not name stay as planned; so do all
 * of them when the record cannot be read (the fetch then finds out and
 * recomputes). */
static int shapes_from_record(struct nf_cache *cache, struct nf_key run, struct nf_node_keys *k,
                              struct nf_error *err)
{
    struct nf_value *rec = NULL;
    struct nf_error e = { 0 };
    char why[128];
    int rc = nf_cache_get(cache, run, &rec, &e);
    if (rc == NF_ENOMEM) {
        *err = e;
        return rc;
    }
    if (rc != 1 || !nf_run_record_check(rec, why, sizeof why)) {
        nf_value_unref(rec);
        return 0;
    }
    const struct nf_table *t = &rec->u.tab;
    for (int64_t r = 0; r < t->n_rows && rc >= 0; r++) {
        int port = (int)t->cols[NF_REC_PORT].num[r];
        int64_t n = (int64_t)t->cols[NF_REC_INDEX].num[r];
        if (strcmp(t->cols[NF_REC_WHAT].str[r], "out") != 0 || port < 0 || (size_t)port >= k->n_outs ||
            !k->outs[port].known)
            continue;
        struct nf_keyset *ks = &k->outs[port];
        int item_kind = ks->is_coll && n >= 0 && ks->n == (size_t)n ? ks->item_kind : NF_KIND_NONE;
        rc = keyset_shape(ks, n >= 0, n >= 0 ? (size_t)n : 0, item_kind, err);
    }
    nf_value_unref(rec);
    return rc < 0 ? rc : 0;
}

int nf_node_keys_follow(struct nf_node_keys *k, struct nf_value *const *outs, size_t n_out,
                        struct nf_error *err)
{
    int changed_known = 0;
    if (!k->known)
        return 0;
    for (size_t o = 0; o < n_out && o < k->n_outs; o++) {
        struct nf_keyset *ks = &k->outs[o];
        const struct nf_value *v = outs[o];
        if (!v || !ks->known)
            continue;
        bool is_coll = v->kind == NF_KIND_COLLECTION;
        size_t n = is_coll ? v->u.coll.n : 0;
        int item_kind = is_coll && n > 0 && v->u.coll.items[0] ? (int)v->u.coll.items[0]->kind : NF_KIND_NONE;
        if (!ks->shape_open && ks->is_coll == is_coll && ks->n == n) {
            if (is_coll && ks->item_kind == NF_KIND_NONE)
                ks->item_kind = item_kind;
            continue;
        }
        if (k->reads_files || k->mapped)   /* keyed per file or per run: never a guess */
            continue;
        if (!ks->shape_open)
            changed_known = 1;
        if (keyset_shape(ks, is_coll, n, item_kind, err) < 0)
            return NF_ENOMEM;
    }
    return changed_known;
}

int nf_node_keys_compute(const struct nf_pipeline *p, size_t ni, struct nf_node_keys *keys,
                         struct nf_cache *cache, struct nf_error *err)
{
    const struct nf_node_inst *node = &p->nodes[ni];
    const struct nf_node_type *t = node->type;
    struct nf_node_keys *k = &keys[ni];
    size_t n_out = nf_port_count(t->outputs);
    struct nf_strbuf comp;
    struct named *in = NULL;
    char **paths = NULL, **labels = NULL;
    size_t n_paths = 0;
    int rc = 0;
    char hex[33];

    nf_node_keys_release(k);
    nf_strbuf_init(&comp);
    k->outs = nf_calloc(n_out + 1, sizeof *k->outs);
    if (!k->outs)
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    k->n_outs = n_out;
    struct nf_key base = nf_key_node_base(node);
    nf_strbuf_addf(&comp, "type %s\nversion %d\n", t->name, t->version);
    /* outputs computed only on demand: which are asked for is part of the key */
    uint64_t demand = 0;
    for (size_t o = 0; o < n_out && o < 64; o++)
        if (t->outputs[o].flags & NF_PORT_ON_DEMAND)
            demand |= 1ull << o;
    if (demand) {
        uint64_t asked = nf_outputs_wanted(p, ni) & demand;
        XXH3_state_t state, *st = start(&state, "on demand");
        feed_key(st, base);
        feed_u64(st, asked);
        base = digest(st);
        for (size_t o = 0; o < n_out && o < 64; o++)
            if (demand & (1ull << o))
                nf_strbuf_addf(&comp, "output %s=%s\n", t->outputs[o].name,
                               asked & (1ull << o) ? "computed" : "not needed");
    }
    for (const struct nf_param *prm = t->params; prm && prm->name; prm++) {
        if (!keyed(node, prm))
            continue;
        nf_strbuf_addf(&comp, "param %s=", prm->name);
        param_value_json(node, prm, &comp);
        nf_strbuf_addf(&comp, "\n");
    }
    if (node->used_file) {   /* a node of a used file: that file's content is part of its key */
        const struct nf_used_file *uf = &p->used_files[node->used_file - 1];
        XXH3_state_t state, *st = start(&state, "used file");
        feed_key(st, base);
        feed_str(st, uf->hash);
        base = digest(st);
        nf_strbuf_addf(&comp, "pipeline file %s=%s\n", uf->path, uf->hash);
    }
    struct nf_key own_base = base;   /* before key_files: for outputs read from a file of their own */
    rc = key_environment(p, node, &base, &comp, cache, err);
    if (rc < 0)
        goto fail;
    if (rc == 0)
        goto unknown;   /* a file it reads is missing: the plan reports it */
    rc = 0;

    /* After a node that writes files: they are what it writes only when its
     * cached run is intact (its written files verified); otherwise the files
     * on disk now may be stale and the keys are known only at run time. */
    for (size_t e = 0; e < node->n_edges; e++) {
        if (node->edges[e].port != NF_EDGE_AFTER)
            continue;
        const struct nf_node_keys *sk = &keys[node->edges[e].src];
        if (!cache || !sk->known || sk->reads_files || sk->n_cached != sk->n_runs || sk->n_runs == 0)
            goto unknown;
        for (size_t r = 0; r < sk->n_runs; r++)
            if (nf_run_valid(cache, sk->runs[r], p->outputs_dir, NULL, err) != 1)
                goto unknown;
    }

    if (t->input_files) {
        /* a file reader: keyed by the files' content and the items' labels
         * (which name per-subject results), never cached itself */
        bool is_coll;
        k->reads_files = true;
        struct nf_error ferr = { 0 };
        if (t->input_files(node->params, &paths, &labels, &n_paths, &is_coll, &ferr) < 0)
            goto unknown;   /* files not there yet (after: [...]) */
        for (size_t o = 0; o < n_out; o++) {
            struct nf_keyset *ks = &k->outs[o];
            /* a reader with several outputs (bids: bold, mask, events, ...)
             * keys each apart; the first output keeps load's keys */
            struct nf_key out_base = base;
            if (o > 0) {
                XXH3_state_t ostate, *ost = start(&ostate, "output");
                feed_key(ost, base);
                feed_u64(ost, o);
                out_base = digest(ost);
            }
            rc = own_file_key(t, node, (int)o, own_base, cache, ks, &comp, err);
            if (rc < 0)
                goto fail;
            if (rc == 1) {
                rc = 0;
                continue;
            }
            ks->is_coll = is_coll;
            ks->n = is_coll ? n_paths : 0;
            if (is_coll && node->out_shape && node->out_shape[o].kind == NF_KIND_COLLECTION)
                ks->item_kind = node->out_shape[o].item_kind;
            ks->items = nf_calloc(n_paths + 1, sizeof *ks->items);
            if (!ks->items) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            for (size_t i = 0; i < n_paths; i++) {
                struct nf_key content;
                rc = cache ? nf_cache_file_hash(cache, paths[i], &content, &ferr)
                           : nf_file_hash(paths[i], &content, &ferr);
                if (rc < 0) {
                    rc = 0;
                    goto unknown;
                }
                const char *label = is_coll && labels ? labels[i] : NULL;
                ks->items[i] = nf_key_file_value(out_base, content, label);
                if (o == 0) {
                    nf_key_hex(content, hex);
                    nf_strbuf_addf(&comp, "file %s=%s%s%s\n", paths[i], hex, label ? " label " : "",
                                   label ? label : "");
                }
            }
            if (is_coll)
                nf_keyset_seal(ks);
            else
                ks->whole = ks->items[0];
            ks->known = true;
        }
        k->known = true;
        k->n_runs = 0;
        goto done;
    }

    /* inputs: ports in table order, then variadic inputs by name */
    in = nf_calloc(node->n_edges + 1, sizeof *in);
    if (!in) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    size_t n_in = 0;
    for (size_t e = 0; e < node->n_edges; e++)
        if (node->edges[e].port != NF_EDGE_AFTER && !keys[node->edges[e].src].outs)
            goto unknown;   /* a source without keys (not computed) */
    for (int port = 0; t->inputs && t->inputs[port].name; port++)
        for (size_t e = 0; e < node->n_edges; e++)
            if (node->edges[e].port == port)
                in[n_in++] = (struct named){ t->inputs[port].name,
                                             &keys[node->edges[e].src].outs[node->edges[e].src_port], false };
    size_t first_variadic = n_in;
    for (size_t e = 0; e < node->n_edges; e++)
        if (node->edges[e].port == NF_EDGE_VARIADIC)
            in[n_in++] = (struct named){ node->edges[e].name,
                                         &keys[node->edges[e].src].outs[node->edges[e].src_port], false };
    if (n_in > first_variadic + 1)
        qsort(in + first_variadic, n_in - first_variadic, sizeof *in, named_cmp);
    size_t n_items = 0;
    for (size_t i = 0; i < n_in; i++) {
        int port = i < first_variadic ? nf_port_index(t->inputs, in[i].name) : -1;
        int maps = in[i].ks->known ? port_maps(node, port, in[i].ks) : -1;
        if (maps < 0)
            goto unknown;   /* whether it runs per item is known once its source has run */
        in[i].maps = maps == 1;
        if (in[i].maps)
            n_items = in[i].ks->n;
        nf_key_hex(in[i].ks->whole, hex);
        nf_strbuf_addf(&comp, "input %s=%s%s\n", in[i].name, hex, in[i].maps ? " (per item)" : "");
    }
    k->mapped = false;
    for (size_t i = 0; i < n_in; i++)
        k->mapped |= in[i].maps;
    k->n_runs = k->mapped ? n_items : 1;
    k->runs = nf_calloc(k->n_runs + 1, sizeof *k->runs);
    struct nf_key *named_keys = nf_calloc(n_in + 1, sizeof *named_keys);
    if (!k->runs || !named_keys) {
        free(named_keys);
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t r = 0; r < k->n_runs; r++) {
        for (size_t i = 0; i < n_in; i++)
            named_keys[i] = named_input(in[i].name, in[i].maps ? in[i].ks->items[r] : in[i].ks->whole);
        k->runs[r] = nf_key_combine(base, named_keys, n_in);
    }
    free(named_keys);
    for (size_t o = 0; o < n_out; o++) {
        struct nf_keyset *ks = &k->outs[o];
        const struct nf_shape *shape = node->out_shape ? &node->out_shape[o] : NULL;
        ks->known = true;
        if (k->mapped) {
            ks->is_coll = true;
            ks->n = k->n_runs;
            if (shape && shape->kind == NF_KIND_COLLECTION)
                ks->item_kind = shape->item_kind;
            ks->items = nf_calloc(ks->n + 1, sizeof *ks->items);
            if (!ks->items) {
                rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
                goto fail;
            }
            for (size_t r = 0; r < k->n_runs; r++)
                ks->items[r] = nf_key_output(k->runs[r], (int)o);
            nf_keyset_seal(ks);
            continue;
        }
        ks->whole = nf_key_output(k->runs[0], (int)o);
        /* a collection made by one run (simulate's subjects), a single value,
         * or a shape only the run tells (fixed_effects: one item per subject) */
        bool is_coll = shape && shape->kind == NF_KIND_COLLECTION && shape->n_items >= 0;
        if ((rc = keyset_shape(ks, is_coll, is_coll ? (size_t)shape->n_items : 0, is_coll ? shape->item_kind : 0,
                               err)) < 0)
            goto fail;
        ks->shape_open = !shape || shape->kind == NF_KIND_NONE ||
                         (shape->kind == NF_KIND_COLLECTION && shape->n_items < 0);
    }
    k->known = true;
    if (cache)
        for (size_t r = 0; r < k->n_runs; r++)
            if (nf_cache_has(cache, k->runs[r], err) == 1)
                k->n_cached++;
    if (cache && !k->mapped && k->n_cached == 1 && (rc = shapes_from_record(cache, k->runs[0], k, err)) < 0)
        goto fail;
    goto done;

unknown:
    for (size_t o = 0; o < n_out; o++)
        nf_keyset_release(&k->outs[o]);
    k->known = false;
    k->n_runs = 0;
done:
    k->components = nf_strbuf_detach(&comp);
fail:
    nf_strbuf_release(&comp);
    for (size_t i = 0; i < n_paths; i++) {
        free(paths[i]);
        if (labels)
            free(labels[i]);
    }
    free(paths);
    free(labels);
    free(in);
    return rc;
}

int nf_keys_plan(const struct nf_pipeline *p, struct nf_cache *cache, struct nf_node_keys *keys,
                 struct nf_error *err)
{
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        int rc = nf_node_keys_compute(p, (size_t)p->order[oi], keys, cache, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- plan --explain ---- */

/* Find the line starting with `prefix` in text; copy the rest of it. */
static bool find_line(const char *text, const char *prefix, char *out, size_t size)
{
    size_t n = strlen(prefix);
    for (const char *l = text; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (strncmp(l, prefix, n) == 0) {
            const char *end = strchr(l, '\n');
            size_t len = end ? (size_t)(end - l - n) : strlen(l + n);
            snprintf(out, size, "%.*s", (int)len, l + n);
            return true;
        }
    return false;
}

/* Why a node will run, from its current and last recorded components. */
static void explain_reason(const struct nf_pipeline *p, const struct nf_node_inst *node,
                           const struct nf_node_keys *keys, const char *old, struct nf_strbuf *why)
{
    const char *cur = keys[node - p->nodes].components;
    char a[512], b[512], prefix[256];
    size_t reasons = 0;
    for (const char *l = cur; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n');
        size_t len = end ? (size_t)(end - l) : strlen(l);
        const char *eq = memchr(l, '=', len);
        const char *sp = memchr(l, ' ', len);
        if (!sp)
            continue;
        size_t plen = eq ? (size_t)(eq - l + 1) : (size_t)(sp - l + 1);
        snprintf(prefix, sizeof prefix, "%.*s", (int)plen, l);
        snprintf(a, sizeof a, "%.*s", (int)(len - plen), l + plen);
        if (find_line(old, prefix, b, sizeof b) && strcmp(a, b) == 0)
            continue;
        bool had = find_line(old, prefix, b, sizeof b);
        if (reasons++ == 3) {
            nf_strbuf_addf(why, "; ...");
            break;
        }
        nf_strbuf_addf(why, "%s", reasons > 1 ? "; " : "");
        if (strncmp(prefix, "version ", 8) == 0)
            nf_strbuf_addf(why, "node implementation version changed (%s -> %s)", had ? b : "?", a);
        else if (strncmp(prefix, "param ", 6) == 0)
            nf_strbuf_addf(why, "parameter '%.*s' changed (%s -> %s)", (int)(plen - 7), prefix + 6,
                           had ? b : "unset", a);
        else if (strncmp(prefix, "input ", 6) == 0) {
            const char *name = prefix + 6;
            int nlen = (int)(plen - 7);
            const char *src = "?";
            for (size_t e = 0; e < node->n_edges; e++)
                if (strlen(node->edges[e].name) == (size_t)nlen && strncmp(node->edges[e].name, name, (size_t)nlen) == 0)
                    src = p->nodes[node->edges[e].src].id;
            nf_strbuf_addf(why, "input '%.*s' changed (from node '%s')", nlen, name, src);
        } else if (strncmp(prefix, "file ", 5) == 0)
            nf_strbuf_addf(why, "file '%.*s' %s", (int)(plen - 6), prefix + 5, had ? "changed" : "is new");
        else
            nf_strbuf_addf(why, "%.*s changed", (int)(plen - 1), prefix);
    }
    if (reasons == 0)
        nf_strbuf_addf(why, "its result is no longer in the cache");
}

/* A cached node whose written files are missing or changed: says so in why
 * (the node runs again from its cached inputs and writes them). */
static bool stale_files(const struct nf_pipeline *p, struct nf_cache *cache,
                        const struct nf_node_keys *k, struct nf_strbuf *why)
{
    for (size_t r = 0; cache && r < k->n_runs; r++) {
        struct nf_error err = { 0 };
        char *stale = NULL;
        if (nf_run_valid(cache, k->runs[r], p->outputs_dir, &stale, &err) != 0 || !stale) {
            free(stale);
            continue;
        }
        bool missing = access(stale, F_OK) != 0;
        char *dir = nf_path_dirname(stale);
        const char *base = strrchr(stale, '/') ? strrchr(stale, '/') + 1 : stale;
        if (missing)
            nf_strbuf_addf(why, "files missing in %s/ (%s...): will write them again from cached inputs",
                           dir ? dir : ".", base);
        else
            nf_strbuf_addf(why, "file %s changed on disk: will write it again from cached inputs", stale);
        free(dir);
        free(stale);
        return true;
    }
    return false;
}

void nf_explain_print(const struct nf_pipeline *p, struct nf_cache *cache,
                      const struct nf_node_keys *keys, FILE *out)
{
    char *abs = nf_realpath(p->file);
    fprintf(out, "%-16s %-10s %s\n", "node", "type", "status");
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        size_t ni = (size_t)p->order[oi];
        const struct nf_node_inst *node = &p->nodes[ni];
        const struct nf_node_keys *k = &keys[ni];
        struct nf_strbuf why;
        struct nf_error err = { 0 };
        struct nf_key last_key;
        char *old = NULL;
        nf_strbuf_init(&why);
        int have_old = cache && abs ? nf_cache_last_node(cache, abs, node->id, &last_key, &old, &err) : 0;
        if (!k->known) {
            nf_strbuf_addf(&why, k->reads_files ? "reads files that do not exist yet (written by an earlier node)"
                                                : "will run (its inputs are known only at run time)");
        } else if (k->reads_files) {
            nf_strbuf_addf(&why, "reads its files");
            if (have_old == 1) {
                struct nf_strbuf changes;
                nf_strbuf_init(&changes);
                explain_reason(p, node, keys, old, &changes);
                if (strcmp(changes.buf ? changes.buf : "", "its result is no longer in the cache") == 0)
                    nf_strbuf_addf(&why, " (unchanged since the last run)");
                else
                    nf_strbuf_addf(&why, ": %s", changes.buf ? changes.buf : "");
                nf_strbuf_release(&changes);
            }
        } else if (k->n_cached == k->n_runs && stale_files(p, cache, k, &why)) {
            /* cached, but what it wrote is not in the outputs folder as written */
        } else if (k->n_cached == k->n_runs) {
            if (k->mapped)
                nf_strbuf_addf(&why, "cached (%zu of %zu items)", k->n_cached, k->n_runs);
            else
                nf_strbuf_addf(&why, "cached");
        } else {
            if (k->mapped && k->n_cached > 0)
                nf_strbuf_addf(&why, "will run %zu of %zu items (%zu cached)", k->n_runs - k->n_cached,
                               k->n_runs, k->n_cached);
            else
                nf_strbuf_addf(&why, "will run");
            if (!cache)
                nf_strbuf_addf(&why, " (no cache)");
            else if (have_old != 1)
                nf_strbuf_addf(&why, " (never computed)");
            else {
                nf_strbuf_addf(&why, ": ");
                explain_reason(p, node, keys, old, &why);
            }
        }
        fprintf(out, "%-16s %-10s %s\n", node->id, node->type->name, why.buf ? why.buf : "");
        nf_strbuf_release(&why);
        free(old);
    }
    free(abs);
}
