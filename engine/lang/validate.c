/* validate.c — phase 2: from a YAML tree to a checked pipeline graph.
 *
 * Walks the parsed document, substitutes ${vars} (file `params:` overridden by
 * --set), checks settings, node ids, node types, parameters (through each
 * node's table), `in:` edges (unknown nodes, unknown ports, port types,
 * missing required inputs) and `after:` ordering, then sorts the graph
 * topologically and reports cycles. Every problem is added to the diagnostics
 * so that the user sees all of them at once; nothing is computed here.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "params.h"
#include "pipeline.h"
#include "suggest.h"
#include "use.h"
#include "vars.h"
#include "core/util.h"
#include "ytree.h"

const char *nf_device_name(enum nf_device d)
{
    switch (d) {
    case NF_DEV_CPU: return "cpu";
    case NF_DEV_GPU: return "gpu";
    default: return "auto";
    }
}

static const char *const device_choices[] = { "auto", "cpu", "gpu", NULL };

/* "; did you mean 'cpu'?" after a bad choice, or "" (a static buffer: one
 * message at a time, validation is single-threaded). */
static const char *choice_hint(const struct nf_ynode *v, const char *const *choices)
{
    static char hint[160];
    const char *best = v->type == NF_Y_SCALAR ? nf_suggest_from(v->value, choices) : NULL;
    hint[0] = '\0';
    if (best)
        snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
    return hint;
}

int nf_node_index(const struct nf_pipeline *p, const char *id)
{
    for (size_t i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].id && strcmp(p->nodes[i].id, id) == 0)
            return (int)i;
    return -1;
}

static void port_names(const struct nf_port *ports, bool skip_variadic, char *buf, size_t size)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (int i = 0; ports && ports[i].name; i++) {
        if (skip_variadic && (ports[i].flags & NF_PORT_VARIADIC))
            continue;
        nf_strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", ports[i].name);
    }
    snprintf(buf, size, "%s", sb.len ? sb.buf : "none");
    nf_strbuf_release(&sb);
}

/* The port a mistyped name probably means (NULL: none), and its hint. */
static const char *port_suggest(const struct nf_port *ports, const char *name, char *hint, size_t size)
{
    struct nf_suggest sg;
    nf_suggest_init(&sg, name);
    for (int i = 0; ports && ports[i].name; i++)
        if (!(ports[i].flags & NF_PORT_VARIADIC))
            nf_suggest_add(&sg, ports[i].name);
    nf_suggest_hint(&sg, hint, size);
    return sg.best;
}

static const struct nf_port *variadic_port(const struct nf_port *ports)
{
    for (int i = 0; ports && ports[i].name; i++)
        if (ports[i].flags & NF_PORT_VARIADIC)
            return &ports[i];
    return NULL;
}

static void kinds_text(unsigned types, char *buf, size_t size)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    static const struct { unsigned bit; const char *name; } k[] = {
        { NF_PT_VOLUME, "a volume" }, { NF_PT_MATRIX, "a matrix" },
        { NF_PT_TABLE, "a table" }, { NF_PT_COLL, "a collection" } };
    for (size_t i = 0; i < 4; i++)
        if (types & k[i].bit)
            nf_strbuf_addf(&sb, "%s%s", sb.len ? " or " : "", k[i].name);
    snprintf(buf, size, "%s", sb.len ? sb.buf : "nothing");
    nf_strbuf_release(&sb);
}

/* ---- variables ---- */

/* ---- settings ---- */
/* settings.executor: {type, partition, account, qos, time, max_array_tasks,
 * max_concurrent, retries, cpus_per_task, min_task_seconds, check_every,
 * extra: [...]} */
static void parse_executor(struct nf_executor_settings *ex, const struct nf_ynode *v, struct nf_diags *d)
{
    static const char *const known[] = { "type", "partition", "account", "qos", "time", "max_array_tasks",
                                         "max_concurrent", "retries", "cpus_per_task", "min_task_seconds",
                                         "check_every", "extra", NULL };
    char got[256];
    if (v->type != NF_Y_MAP) {
        nf_ynode_describe(v, got, sizeof got);
        NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "setting 'executor' must be a mapping such as {type: slurm, "
                "partition: short} (got %s)", got);
        return;
    }
    for (size_t i = 0; i < v->n; i++) {
        const char *k = v->keys[i]->value;
        const struct nf_ynode *x = v->items[i];
        nf_ynode_describe(x, got, sizeof got);
        int64_t n;
        double f;
        if (strcmp(k, "type") == 0) {
            if (x->type == NF_Y_SCALAR && (strcmp(x->value, "slurm") == 0 || strcmp(x->value, "local") == 0))
                ex->slurm = x->value[0] == 's';
            else
                NF_DIAG(d, NF_EINVAL, &x->loc, NULL, "executor 'type' must be local or slurm (got %s)", got);
        } else if (strcmp(k, "partition") == 0 || strcmp(k, "account") == 0 || strcmp(k, "qos") == 0 ||
                   strcmp(k, "time") == 0) {
            if (x->type != NF_Y_SCALAR || !x->value[0] || strpbrk(x->value, " \t\n'\"")) {
                NF_DIAG(d, NF_EINVAL, &x->loc, NULL, "executor '%s' must be one word (got %s)", k, got);
                continue;
            }
            char **dst = k[0] == 'p' ? &ex->partition : k[0] == 'a' ? &ex->account : k[0] == 'q' ? &ex->qos
                                                                                              : &ex->time;
            free(*dst);
            *dst = nf_strdup(x->value);
        } else if (strcmp(k, "max_array_tasks") == 0 || strcmp(k, "max_concurrent") == 0 ||
                   strcmp(k, "retries") == 0 || strcmp(k, "cpus_per_task") == 0) {
            int64_t lo = strcmp(k, "max_array_tasks") == 0 ? 1 : 0;
            if (x->type != NF_Y_SCALAR || !nf_parse_int64(x->value, &n) || n < lo || n > 1000000) {
                NF_DIAG(d, NF_EINVAL, &x->loc, NULL, "executor '%s' must be an integer between %lld and "
                        "1000000 (got %s)", k, (long long)lo, got);
                continue;
            }
            *(k[0] == 'r' ? &ex->retries : k[0] == 'c' ? &ex->cpus_per_task
              : k[4] == 'a' ? &ex->max_array_tasks : &ex->max_concurrent) = n;
        } else if (strcmp(k, "min_task_seconds") == 0 || strcmp(k, "check_every") == 0) {
            char *end = NULL;
            f = x->type == NF_Y_SCALAR ? strtod(x->value, &end) : -1;
            double lo = k[0] == 'c' ? 1 : 0;
            if (x->type != NF_Y_SCALAR || !end || *end || !(f >= lo && f <= 86400)) {
                NF_DIAG(d, NF_EINVAL, &x->loc, NULL, "executor '%s' must be a number of seconds between %g "
                        "and 86400 (got %s)", k, lo, got);
                continue;
            }
            *(k[0] == 'c' ? &ex->check_every : &ex->min_task_seconds) = f;
        } else if (strcmp(k, "extra") == 0) {
            bool ok = x->type == NF_Y_SEQ;
            for (size_t j = 0; ok && j < x->n; j++)
                ok = x->items[j]->type == NF_Y_SCALAR && x->items[j]->value[0] == '-';
            if (!ok) {
                NF_DIAG(d, NF_EINVAL, &x->loc, NULL, "executor 'extra' must be a list of sbatch options such "
                        "as [\"--constraint=avx2\"] (got %s)", got);
                continue;
            }
            ex->extra = nf_calloc(x->n + 1, sizeof *ex->extra);
            for (size_t j = 0; ex->extra && j < x->n; j++)
                if ((ex->extra[j] = nf_strdup(x->items[j]->value)))
                    ex->n_extra = j + 1;
        } else {
            const char *best = nf_suggest_from(k, known);
            char hint[160] = "";
            if (best)
                snprintf(hint, sizeof hint, "did you mean '%s'? ", best);
            NF_DIAG(d, NF_EINVAL, &v->keys[i]->loc, NULL, "unknown executor setting '%s' (%sknown: type, "
                    "partition, account, qos, time, max_array_tasks, max_concurrent, retries, cpus_per_task, "
                    "min_task_seconds, check_every, extra)", k, hint);
        }
    }
}

static void parse_settings(struct nf_pipeline *p, const struct nf_ynode *s, struct nf_diags *d)
{
    struct nf_settings *st = &p->settings;
    st->device = NF_DEV_AUTO;
    uint64_t phys = nf_physical_memory();
    st->memory = phys ? phys / 4 * 3 : (uint64_t)8 << 30;   /* default: 75% of RAM */
    st->threads = 0;
    st->seed = 0;
    st->cache = nf_strdup(".nlflow/cache.db");
    st->outputs = nf_strdup("results");
    st->executor = (struct nf_executor_settings){ .max_array_tasks = 1000, .retries = 2,
                                                  .min_task_seconds = 180, .check_every = 30 };
    if (!s)
        return;
    if (s->type != NF_Y_MAP) {
        NF_DIAG(d, NF_EINVAL, &s->loc, NULL, "'settings' must be a mapping");
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        const char *k = s->keys[i]->value;
        const struct nf_ynode *v = s->items[i];
        char got[256];
        bool flag;
        nf_ynode_describe(v, got, sizeof got);
        if (strcmp(k, "device") == 0) {
            int found = -1;
            for (int c = 0; v->type == NF_Y_SCALAR && device_choices[c]; c++)
                if (strcmp(v->value, device_choices[c]) == 0)
                    found = c;
            if (found < 0)
                NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "setting 'device' must be one of auto, cpu, gpu (got %s%s)", got,
                        choice_hint(v, device_choices));
            else
                st->device = (enum nf_device)found;
        } else if (strcmp(k, "memory") == 0) {
            int64_t b = v->type == NF_Y_SCALAR ? nf_parse_size(v->value) : -1;
            if (b <= 0)
                NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "setting 'memory' must be a size such as 8GiB or 512MiB (got %s)", got);
            else
                st->memory = (uint64_t)b;
        } else if (strcmp(k, "threads") == 0) {
            int64_t t;
            if (v->type != NF_Y_SCALAR || !nf_parse_int64(v->value, &t) || t < 0 || t > 4096)
                NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "setting 'threads' must be an integer between 0 and 4096 (got %s)", got);
            else
                st->threads = (int)t;
        } else if (strcmp(k, "seed") == 0) {
            int64_t t;
            if (v->type != NF_Y_SCALAR || !nf_parse_int64(v->value, &t) || t < 0 || t > 4294967295LL)
                NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "setting 'seed' must be an integer between 0 and 4294967295 (got %s)", got);
            else
                st->seed = (uint64_t)t;
        } else if (strcmp(k, "cache") == 0 && v->type == NF_Y_SCALAR && !v->quoted &&
                   nf_parse_bool(v->value, &flag)) {
            /* YAML's booleans: `cache: false` (and YAML 1.1's `off`, which a
             * YAML 1.2 reader sees as the string "off") turn the cache off;
             * `true` keeps the default file */
            free(st->cache);
            st->cache = nf_strdup(flag ? ".nlflow/cache.db" : "off");
        } else if (strcmp(k, "cache") == 0 || strcmp(k, "outputs") == 0) {
            if (v->type != NF_Y_SCALAR || !v->value[0]) {
                NF_DIAG(d, NF_EINVAL, &v->loc, NULL, "setting '%s' must be a path (got %s)", k, got);
                continue;
            }
            char **dst = k[0] == 'c' ? &st->cache : &st->outputs;
            free(*dst);
            *dst = nf_strdup(v->value);
        } else if (strcmp(k, "executor") == 0) {
            parse_executor(&st->executor, v, d);
        } else {
            static const char *const known[] = { "device", "memory", "threads", "seed", "cache", "outputs",
                                                 "executor", NULL };
            const char *best = nf_suggest_from(k, known);
            char hint[160] = "";
            if (best)
                snprintf(hint, sizeof hint, "did you mean '%s'? ", best);
            NF_DIAG(d, NF_EINVAL, &s->keys[i]->loc, NULL,
                    "unknown setting '%s' (%ssettings: device, memory, threads, seed, cache, outputs, executor)", k, hint);
        }
    }
}

/* ---- nodes ---- */
static bool valid_node_id(const char *s)
{
    if (!(*s >= 'a' && *s <= 'z'))
        return false;
    for (s++; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return false;
    return true;
}

static void type_list(char *buf, size_t size)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (size_t i = 0; nf_node_types[i]; i++)
        nf_strbuf_addf(&sb, "%s%s", i ? ", " : "", nf_node_types[i]->name);
    snprintf(buf, size, "%s", sb.len ? sb.buf : "");
    nf_strbuf_release(&sb);
}

static void param_list(const struct nf_node_type *t, char *buf, size_t size)
{
    struct nf_strbuf sb;
    nf_strbuf_init(&sb);
    for (const struct nf_param *p = t->params; p && p->name; p++)
        nf_strbuf_addf(&sb, "%s%s", sb.len ? ", " : "", p->name);
    snprintf(buf, size, "%s", sb.len ? sb.buf : "none");
    nf_strbuf_release(&sb);
}

/* Edge text "id" or "id.port" saved for phase-2 resolution. */
struct pending_edge {
    size_t node; char *name; char *src; char *src_port; struct nf_loc loc; int port;
    bool reported;   /* an unknown port already reported, kept only so that the port it
                        probably meant is not reported missing as well */
};

struct vstate {
    struct pending_edge *pe;
    size_t n_pe, cap_pe;
    int *first_same_id;   /* per node: the first node with its id (NULL: search) */
};

static int compare_key_values(const void *a, const void *b, void *keys)
{
    struct nf_ynode *const *k = keys;
    int ia = *(const int *)a, ib = *(const int *)b;
    int c = strcmp(k[ia]->value, k[ib]->value);
    return c ? c : (ia > ib) - (ia < ib);
}

/* For each node key, the index of the first key with the same id: duplicate
 * ids are found by one sort instead of comparing every pair. */
static int *first_same_key(struct nf_ynode *const *keys, size_t n)
{
    int *order = nf_malloc((n + 1) * sizeof *order);
    int *first = nf_malloc((n + 1) * sizeof *first);
    if (!order || !first) {
        free(order);
        free(first);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        order[i] = (int)i;
    qsort_r(order, n, sizeof *order, compare_key_values, (void *)keys);
    for (size_t i = 0; i < n; i++)
        first[order[i]] = i > 0 && strcmp(keys[order[i]]->value, keys[order[i - 1]]->value) == 0 ?
                          first[order[i - 1]] : order[i];
    free(order);
    return first;
}

static bool add_pending(struct vstate *vs, size_t node, const char *name, const char *ref,
                        const struct nf_loc *loc, int port)
{
    if (vs->n_pe == vs->cap_pe) {
        size_t cap = vs->cap_pe ? vs->cap_pe * 2 : 16;
        struct pending_edge *n = nf_realloc(vs->pe, cap * sizeof *n);
        if (!n)
            return false;
        vs->pe = n;
        vs->cap_pe = cap;
    }
    struct pending_edge *e = &vs->pe[vs->n_pe];
    memset(e, 0, sizeof *e);
    e->node = node;
    e->name = nf_strdup(name);
    e->src = nf_strdup(ref);   /* "id" or "id.port"; split when resolved (ids of used files have dots) */
    e->src_port = nf_strdup("");
    e->loc = *loc;
    e->port = port;
    if (!e->name || !e->src || !e->src_port) {   /* out of memory: nf_pipeline_load says so */
        free(e->name);
        free(e->src);
        free(e->src_port);
        return false;
    }
    vs->n_pe++;
    return true;
}

static void parse_node(struct nf_pipeline *p, size_t idx, const struct nf_ynode *key,
                       const struct nf_ynode *body, struct vstate *vs, struct nf_diags *d)
{
    struct nf_node_inst *node = &p->nodes[idx];
    const char *id = key->value;
    long failures_before = nf_alloc_failures();
    node->loc = key->loc;
    node->id = nf_strdup(id);
    bool valid = true;   /* a used file's nodes are namespaced: "faces.glm" */
    for (const char *seg = id; valid && seg; seg = node->used_file && strchr(seg, '.') ? strchr(seg, '.') + 1 : NULL) {
        char part[256];
        snprintf(part, sizeof part, "%.*s", (int)(node->used_file ? strcspn(seg, ".") : strlen(seg)), seg);
        valid = valid_node_id(part);
    }
    if (!valid)
        NF_DIAG(d, NF_EINVAL, &key->loc, id,
                "invalid node id (expected a lowercase letter followed by lowercase letters, digits or _)");
    for (size_t j = vs->first_same_id ? (size_t)vs->first_same_id[idx] : 0; j < idx; j++)
        if (p->nodes[j].id && strcmp(p->nodes[j].id, id) == 0) {
            NF_DIAG(d, NF_EINVAL, &key->loc, id, "duplicate node id (first defined at line %d)",
                    p->nodes[j].loc.line);
            free(node->id);
            node->id = NULL;   /* keep the first definition only */
            return;
        }
    if (body->type != NF_Y_MAP) {
        NF_DIAG(d, NF_EINVAL, &body->loc, id, "a node must be a mapping with at least 'type'");
        return;
    }
    const struct nf_ynode *type = nf_ymap_get(body, "type");
    if (!type) {
        NF_DIAG(d, NF_EINVAL, &key->loc, id, "missing 'type'");
        return;
    }
    node->type_loc = type->loc;
    if (type->type != NF_Y_SCALAR || !(node->type = nf_node_type_find(type->value))) {
        char types[512], got[256], hint[160] = "";
        type_list(types, sizeof types);
        nf_ynode_describe(type, got, sizeof got);
        if (type->type == NF_Y_SCALAR)
            nf_node_type_suggest(type->value, hint, sizeof hint);
        NF_DIAG(d, NF_EINVAL, &type->loc, id, "unknown node type %s (%sknown types: %s)", got, hint, types);
        return;
    }
    const struct nf_node_type *t = node->type;
    node->params = nf_calloc(1, t->params_size ? t->params_size : 1);
    if (!node->params) {
        NF_DIAG(d, NF_ENOMEM, &key->loc, id, "out of memory");
        return;
    }
    nf_params_defaults(t, node->params);
    node->device_req = NF_DEV_AUTO;
    bool seen_param[256] = { 0 };
    for (size_t i = 0; i < body->n; i++) {
        const char *k = body->keys[i]->value;
        const struct nf_ynode *v = body->items[i];
        for (size_t j = 0; j < i; j++)
            if (strcmp(body->keys[j]->value, k) == 0) {
                NF_DIAG(d, NF_EINVAL, &body->keys[i]->loc, id, "key '%s' is given twice (first at line %d)",
                        k, body->keys[j]->loc.line);
                goto next_key;
            }
        if (strcmp(k, "type") == 0)
            continue;
        if (strcmp(k, "device") == 0) {
            int found = -1;
            for (int c = 0; v->type == NF_Y_SCALAR && device_choices[c]; c++)
                if (strcmp(v->value, device_choices[c]) == 0)
                    found = c;
            if (found < 0) {
                char got[256];
                nf_ynode_describe(v, got, sizeof got);
                NF_DIAG(d, NF_EINVAL, &v->loc, id, "'device' must be one of auto, cpu, gpu (got %s%s)", got,
                        choice_hint(v, device_choices));
            } else {
                node->device_req = (enum nf_device)found;
            }
            continue;
        }
        if (strcmp(k, "in") == 0) {
            if (v->type != NF_Y_MAP) {
                NF_DIAG(d, NF_EINVAL, &v->loc, id, "'in' must map input ports to node ids, e.g. {data: bold}");
                continue;
            }
            for (size_t e = 0; e < v->n; e++) {
                const char *port = v->keys[e]->value;
                const struct nf_ynode *ref = v->items[e];
                if (ref->type != NF_Y_SCALAR || !ref->value[0]) {
                    NF_DIAG(d, NF_EINVAL, &ref->loc, id, "input '%s' must name a node as 'id' or 'id.port'", port);
                    continue;
                }
                int pi = nf_port_index(t->inputs, port);
                if (pi < 0 || (t->inputs[pi].flags & NF_PORT_VARIADIC)) {
                    if (!variadic_port(t->inputs)) {
                        char names[256], hint[160];
                        port_names(t->inputs, true, names, sizeof names);
                        const char *meant = port_suggest(t->inputs, port, hint, sizeof hint);
                        NF_DIAG(d, NF_EINVAL, &v->keys[e]->loc, id, "unknown input port '%s' (%s%s inputs: %s)",
                                port, hint, t->name, names);
                        if (meant && add_pending(vs, idx, port, ref->value, &ref->loc, nf_port_index(t->inputs, meant)))
                            vs->pe[vs->n_pe - 1].reported = true;
                        continue;
                    }
                    pi = NF_EDGE_VARIADIC;
                }
                if (add_pending(vs, idx, port, ref->value, &ref->loc, pi) && ref->reported)
                    vs->pe[vs->n_pe - 1].reported = true;
            }
            continue;
        }
        if (strcmp(k, "after") == 0) {
            size_t n = v->type == NF_Y_SEQ ? v->n : 1;
            if (v->type == NF_Y_MAP) {
                NF_DIAG(d, NF_EINVAL, &v->loc, id, "'after' must be a node id or a list of node ids");
                continue;
            }
            for (size_t e = 0; e < n; e++) {
                const struct nf_ynode *ref = v->type == NF_Y_SEQ ? v->items[e] : v;
                if (ref->type != NF_Y_SCALAR) {
                    NF_DIAG(d, NF_EINVAL, &ref->loc, id, "'after' must list node ids");
                    continue;
                }
                if (add_pending(vs, idx, "after", ref->value, &ref->loc, NF_EDGE_AFTER) && ref->reported)
                    vs->pe[vs->n_pe - 1].reported = true;
            }
            continue;
        }
        const struct nf_param *prm = nf_param_find(t->params, k);
        if (!prm) {
            char names[512], hint[160];
            struct nf_suggest sg;
            param_list(t, names, sizeof names);
            nf_suggest_init(&sg, k);
            for (const struct nf_param *q = t->params; q && q->name; q++)
                nf_suggest_add(&sg, q->name);
            static const char *const node_keys[] = { "type", "in", "after", "device" };
            for (size_t q = 0; q < sizeof node_keys / sizeof *node_keys; q++)
                nf_suggest_add(&sg, node_keys[q]);
            nf_suggest_hint(&sg, hint, sizeof hint);
            NF_DIAG(d, NF_EINVAL, &body->keys[i]->loc, id,
                    "unknown parameter '%s' for node type '%s' (%sparameters: %s)", k, t->name, hint, names);
            continue;
        }
        seen_param[(prm - t->params) & 255] = true;
        nf_param_set(prm, node->params, v, id, p->dir, d);
next_key:;
    }
    for (const struct nf_param *prm = t->params; prm && prm->name; prm++)
        if ((prm->flags & NF_PF_REQUIRED) && !seen_param[(prm - t->params) & 255])
            NF_DIAG(d, NF_EINVAL, &key->loc, id, "missing required parameter '%s' (%s: %s)",
                    prm->name, nf_ptype_name(prm->type), prm->help);
    /* a node's check reads its parameters: not after one of them failed to
       allocate (the loader reports "out of memory" for the whole file) */
    if (t->check && nf_alloc_failures() == failures_before)
        t->check(node->params, &key->loc, id, d);
}

/* Node ids sorted (ties by index), so that resolving E edges costs E log n,
 * not E n: a 20,000-node chain resolved by linear search took seconds. */
static int compare_node_ids(const void *a, const void *b, void *pipeline)
{
    const struct nf_pipeline *p = pipeline;
    int ia = *(const int *)a, ib = *(const int *)b;
    int c = strcmp(p->nodes[ia].id, p->nodes[ib].id);
    return c ? c : (ia > ib) - (ia < ib);
}

/* nf_node_index through the sorted ids: the first node in file order with that id. */
static int sorted_node_index(const struct nf_pipeline *p, const int *sorted, size_t n_sorted,
                             const char *id)
{
    size_t lo = 0, hi = n_sorted;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(p->nodes[sorted[mid]].id, id) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n_sorted && strcmp(p->nodes[sorted[lo]].id, id) == 0 ? sorted[lo] : -1;
}

static void resolve_edges(struct nf_pipeline *p, struct vstate *vs, struct nf_diags *d)
{
    int *sorted = nf_malloc((p->n_nodes + 1) * sizeof *sorted);
    size_t n_sorted = 0;
    for (size_t i = 0; sorted && i < p->n_nodes; i++)
        if (p->nodes[i].id)
            sorted[n_sorted++] = (int)i;
    if (sorted)
        qsort_r(sorted, n_sorted, sizeof *sorted, compare_node_ids, p);
    /* count per node */
    for (size_t i = 0; i < vs->n_pe; i++) {
        struct pending_edge *pe = &vs->pe[i];
        struct nf_node_inst *node = &p->nodes[pe->node];
        if (!node->type || !node->id || pe->reported)
            continue;
        int src = sorted ? sorted_node_index(p, sorted, n_sorted, pe->src) : nf_node_index(p, pe->src);
        char *dot = strrchr(pe->src, '.');
        if (src < 0 && dot && pe->port != NF_EDGE_AFTER) {   /* "id.port": the node before the last dot */
            char *port = nf_strdup(dot + 1);
            if (port) {
                *dot = '\0';
                free(pe->src_port);
                pe->src_port = port;
                src = sorted ? sorted_node_index(p, sorted, n_sorted, pe->src) : nf_node_index(p, pe->src);
            }
        }
        if (src < 0) {
            struct nf_suggest sg;
            char hint[160] = "";
            nf_suggest_init(&sg, pe->src);
            for (size_t k = 0; k < p->n_nodes; k++)
                if (k != pe->node)
                    nf_suggest_add(&sg, p->nodes[k].id);
            if (sg.best)
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", sg.best);
            if (pe->port == NF_EDGE_AFTER)
                NF_DIAG(d, NF_EINVAL, &pe->loc, node->id, "'after' refers to unknown node '%s'%s", pe->src, hint);
            else
                NF_DIAG(d, NF_EINVAL, &pe->loc, node->id, "input '%s' refers to unknown node '%s'%s", pe->name,
                        pe->src, hint);
            continue;
        }
        if ((size_t)src == pe->node) {
            NF_DIAG(d, NF_EINVAL, &pe->loc, node->id, "node cannot take its own output as input '%s'", pe->name);
            continue;
        }
        const struct nf_node_inst *sn = &p->nodes[src];
        int sport = 0;
        if (sn->type && pe->port != NF_EDGE_AFTER) {
            const char *want = pe->src_port[0] ? pe->src_port : "out";
            sport = nf_port_index(sn->type->outputs, want);
            if (sport < 0 && !pe->src_port[0] && nf_port_count(sn->type->outputs) > 0) {
                char names[256];
                port_names(sn->type->outputs, false, names, sizeof names);
                NF_DIAG(d, NF_EINVAL, &pe->loc, node->id,
                        "node '%s' (%s) has no default output 'out': name one of its outputs as '%s.PORT' (outputs: %s)",
                        sn->id, sn->type->name, sn->id, names);
                continue;
            }
            if (sport < 0) {
                char names[256], hint[160];
                port_names(sn->type->outputs, false, names, sizeof names);
                port_suggest(sn->type->outputs, want, hint, sizeof hint);
                NF_DIAG(d, NF_EINVAL, &pe->loc, node->id, "node '%s' (%s) has no output '%s' (%soutputs: %s)",
                        sn->id, sn->type->name, want, hint, names);
                continue;
            }
            /* port types: statically compatible unless nothing can match */
            unsigned produced = sn->type->outputs[sport].types;
            const struct nf_port *in = pe->port >= 0 ? &node->type->inputs[pe->port]
                                                     : variadic_port(node->type->inputs);
            unsigned accepted = in->types;
            if (in->flags & NF_PORT_TABLE_AS_MATRIX)
                accepted |= NF_PT_TABLE;
            /* a node that can be mapped over a collection gives a collection
               when it is: a port that takes collections whole (fixed_effects)
               accepts it, and shapes.c checks the kinds once mapping is known */
            bool may_map = !(sn->type->flags & NF_NODE_NO_MAP) && nf_port_count(sn->type->inputs) > 0;
            bool ok = (produced & accepted) != 0 || (produced & NF_PT_COLL) ||
                      ((accepted & NF_PT_COLL) && may_map);
            if (!ok) {
                char want_t[128], got_t[128];
                kinds_text(accepted, want_t, sizeof want_t);
                kinds_text(produced, got_t, sizeof got_t);
                NF_DIAG(d, NF_EINVAL, &pe->loc, node->id,
                        "input '%s' expects %s, but '%s.%s' gives %s", pe->name, want_t, sn->id,
                        sn->type->outputs[sport].name, got_t);
                continue;
            }
        }
        if (pe->port >= 0)
            for (size_t e = 0; e < node->n_edges; e++)
                if (node->edges[e].port == pe->port) {
                    NF_DIAG(d, NF_EINVAL, &pe->loc, node->id, "input '%s' is connected twice", pe->name);
                    goto next;
                }
        struct nf_edge *edges = nf_realloc(node->edges, (node->n_edges + 1) * sizeof *edges);
        if (!edges)
            continue;
        node->edges = edges;
        struct nf_edge *e = &edges[node->n_edges++];
        e->port = pe->port;
        e->name = pe->name;
        pe->name = NULL;
        e->src = src;
        e->src_port = sport;
        e->loc = pe->loc;
next:;
    }
    /* required inputs */
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct nf_node_inst *node = &p->nodes[i];
        if (!node->type || !node->id)
            continue;
        for (int pi = 0; node->type->inputs && node->type->inputs[pi].name; pi++) {
            const struct nf_port *port = &node->type->inputs[pi];
            if (port->flags & (NF_PORT_OPTIONAL | NF_PORT_VARIADIC))
                continue;
            bool connected = false;
            for (size_t e = 0; e < node->n_edges; e++)
                connected |= node->edges[e].port == pi;
            bool named = false;   /* reported as unknown/bad already? */
            for (size_t e = 0; !connected && e < vs->n_pe; e++)
                if (vs->pe[e].node == i && vs->pe[e].port == pi)
                    named = true;
            if (!connected && !named)
                NF_DIAG(d, NF_EINVAL, &node->loc, node->id, "missing required input '%s' (%s), e.g. in: {%s: NODE}",
                        port->name, port->help, port->name);
        }
    }
    free(sorted);
}

int nf_toposort(struct nf_pipeline *p, struct nf_diags *d)
{
    size_t n = p->n_nodes;
    int *indeg = nf_calloc(n + 1, sizeof *indeg);
    int *order = nf_calloc(n + 1, sizeof *order);
    int rc = 0;
    if (!indeg || !order) {
        rc = NF_ENOMEM;
        NF_DIAG(d, NF_ENOMEM, NULL, NULL, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++)
        indeg[i] = (int)p->nodes[i].n_edges;
    size_t done = 0;
    /* Kahn's algorithm, always taking the first ready node in file order so
     * that the order (and logs) are deterministic: the ready nodes wait in a
     * min-heap of indices, and each node's consumers are listed once
     * (consumer_start/consumers, by source), so that the sort is
     * O(E log n) rather than a scan of every edge per node placed. */
    bool *placed = nf_calloc(n + 1, sizeof *placed);
    size_t *consumer_start = nf_calloc(n + 2, sizeof *consumer_start);
    size_t n_edges = 0;
    for (size_t j = 0; j < n; j++)
        n_edges += p->nodes[j].n_edges;
    int *consumers = nf_malloc((n_edges + 1) * sizeof *consumers);
    int *ready = nf_malloc((n + 1) * sizeof *ready);
    size_t n_ready = 0;
    if (!placed || !consumer_start || !consumers || !ready) {
        free(placed);
        free(consumer_start);
        free(consumers);
        free(ready);
        rc = NF_ENOMEM;
        NF_DIAG(d, NF_ENOMEM, NULL, NULL, "out of memory");
        goto fail;
    }
    for (size_t j = 0; j < n; j++)
        for (size_t e = 0; e < p->nodes[j].n_edges; e++)
            consumer_start[p->nodes[j].edges[e].src + 1]++;
    for (size_t i = 0; i <= n; i++)
        consumer_start[i + 1] += consumer_start[i];
    for (size_t j = 0; j < n; j++)   /* fill from the back: consumer_start[s] ends as s's start */
        for (size_t e = p->nodes[j].n_edges; e-- > 0;)
            consumers[--consumer_start[p->nodes[j].edges[e].src + 1]] = (int)j;
    for (size_t i = 0; i < n; i++)
        if (indeg[i] == 0)
            ready[n_ready++] = (int)i;   /* ascending: already a min-heap */
    while (n_ready > 0) {
        int pick = ready[0];
        ready[0] = ready[--n_ready];
        for (size_t at = 0;;) {       /* sift down */
            size_t child = 2 * at + 1, least = at;
            if (child < n_ready && ready[child] < ready[least])
                least = child;
            if (child + 1 < n_ready && ready[child + 1] < ready[least])
                least = child + 1;
            if (least == at)
                break;
            int tmp = ready[at]; ready[at] = ready[least]; ready[least] = tmp;
            at = least;
        }
        placed[pick] = true;
        order[done++] = pick;
        for (size_t c = consumer_start[pick + 1]; c < consumer_start[pick + 2]; c++)
            if (--indeg[consumers[c]] == 0) {
                size_t at = n_ready++;  /* sift up */
                ready[at] = consumers[c];
                while (at > 0 && ready[(at - 1) / 2] > ready[at]) {
                    int tmp = ready[at]; ready[at] = ready[(at - 1) / 2]; ready[(at - 1) / 2] = tmp;
                    at = (at - 1) / 2;
                }
            }
    }
    free(consumer_start);
    free(consumers);
    free(ready);
    if (done < n) {
        /* Walk back along edges from a node left over until a node repeats:
         * that loop is a cycle. */
        size_t start = 0;
        while (placed[start])
            start++;
        int *seen = nf_calloc(n + 1, sizeof *seen);
        int *path = nf_calloc(n + 1, sizeof *path);
        size_t len = 0;
        int cur = (int)start;
        while (seen && path && !seen[cur]) {
            seen[cur] = (int)len + 1;
            path[len++] = cur;
            int next = -1;
            for (size_t e = 0; e < p->nodes[cur].n_edges && next < 0; e++)
                if (!placed[p->nodes[cur].edges[e].src])
                    next = p->nodes[cur].edges[e].src;
            if (next < 0)
                break;
            cur = next;
        }
        struct nf_strbuf sb;
        nf_strbuf_init(&sb);
        if (seen && path && seen[cur]) {
            /* path[seen[cur]-1 .. len-1] is the cycle, in consumer->producer
             * order; print it producer -> consumer. */
            size_t first = (size_t)seen[cur] - 1;
            for (size_t k = len; k > first; k--)
                nf_strbuf_addf(&sb, "%s -> ", p->nodes[path[k - 1]].id);
            nf_strbuf_addf(&sb, "%s", p->nodes[path[len - 1]].id);
        }
        const struct nf_node_inst *at = &p->nodes[seen && path && seen[cur] ? cur : (int)start];
        NF_DIAG(d, NF_EINVAL, &at->loc, at->id, "the pipeline has a cycle: %s", sb.len ? sb.buf : "?");
        nf_strbuf_release(&sb);
        free(seen);
        free(path);
        rc = NF_EINVAL;
    }
    free(placed);
    if (rc == 0) {
        free(p->order);
        p->order = order;
        order = NULL;
    }
fail:
    free(indeg);
    free(order);
    return rc;
}

static const char *const top_keys[] = { "nlflow", "name", "requires", "settings", "params", "inputs", "outputs",
                                         "nodes", NULL };

/* Parameters whose default stands for a pipeline setting (NF_PF_SEED: -1 is
 * settings.seed) get the setting's value now, so that everything after this
 * phase (cache keys, `plan --explain`, the node) sees the value actually used:
 * a changed setting is a changed parameter. */
static void fill_setting_defaults(struct nf_pipeline *p)
{
    for (size_t i = 0; i < p->n_nodes; i++) {
        const struct nf_node_type *t = p->nodes[i].type;
        if (!t || !p->nodes[i].params)
            continue;
        for (const struct nf_param *prm = t->params; prm && prm->name; prm++) {
            int64_t *seed = (int64_t *)((char *)p->nodes[i].params + prm->offset);
            if ((prm->flags & NF_PF_SEED) && prm->type == NF_P_INT && *seed < 0)
                *seed = (int64_t)p->settings.seed;
        }
    }
}

struct nf_pipeline *nf_pipeline_load(const char *path, const struct nf_overrides *ov,
                                     struct nf_diags *d)
{
    struct nf_error err = { 0 };
    struct nf_ynode *root = NULL;
    struct vstate vs = { 0 };
    struct nf_ynode *expanded = NULL;   /* `nodes:` with use nodes expanded */
    size_t *used_file = NULL;
    size_t len = 0;
    /* Any allocation failure while loading makes the result suspect (a
     * missing variable reads as undefined, a missing edge as no input):
     * the load then fails with "out of memory" alone. */
    long alloc_failures = nf_alloc_failures();
    size_t n_errors = d->n, n_warnings = d->n_warnings;
    struct nf_pipeline *p = nf_calloc(1, sizeof *p);
    char *text = nf_read_text_file(path, NF_PIPELINE_FILE_MAX, "pipeline file", &len, &err);
    if (!p || !text) {
        if (p && err.code != NF_ENOMEM)
            err.code = NF_EUSAGE;
        else if (!p)
            NF_FAIL(&err, NF_ENOMEM, "out of memory");
        nf_diags_add(d, &err);
        goto fail;
    }
    p->file = nf_strdup(path);
    p->dir = nf_path_dirname(path);
    root = nf_yaml_parse(text, len, nf_intern(p->file), &err);
    if (!root) {
        nf_diags_add(d, &err);
        goto fail;
    }
    struct nf_loc top = { nf_intern(p->file), 1, 1 };
    if (root->type != NF_Y_MAP) {
        NF_DIAG(d, NF_EINVAL, &root->loc, NULL, "a pipeline file must be a mapping with 'nlflow: 1' and 'nodes'");
        goto fail;
    }
    /* A file for a newer nlflow says so before its new keys read as mistakes. */
    if (nf_requires_check(nf_ymap_get(root, "requires"), PACKAGE_VERSION, d) <= 0)
        goto fail;
    {
        const struct nf_ynode *v = nf_ymap_get(root, "nlflow");
        if (v && v->type == NF_Y_SCALAR && strtol(v->value, NULL, 10) > 1) {
            NF_DIAG(d, NF_EINVAL, &v->loc, NULL,
                    "this pipeline file is format version %s, written for a newer nlflow (this is nlflow %s, "
                    "which reads version 1)", v->value, PACKAGE_VERSION);
            goto fail;
        }
    }
    const struct nf_ynode *declared = nf_ymap_get(root, "inputs");
    if (declared)
        NF_DIAG(d, NF_EINVAL, &declared->loc, NULL,
                "this file declares 'inputs': it is meant to be used by another pipeline file (a node of "
                "type: use that connects them), not run by itself");
    for (size_t i = 0; i < root->n; i++) {
        bool known = false;
        for (int k = 0; top_keys[k]; k++)
            known |= strcmp(root->keys[i]->value, top_keys[k]) == 0;
        if (!known) {
            const char *best = nf_suggest_from(root->keys[i]->value, top_keys);
            char hint[160] = "";
            if (best)
                snprintf(hint, sizeof hint, "did you mean '%s'? ", best);
            NF_DIAG(d, NF_EINVAL, &root->keys[i]->loc, NULL,
                    "unknown top-level key '%s' (%sexpected nlflow, name, requires, settings, params, inputs, outputs, nodes)",
                    root->keys[i]->value, hint);
        }
    }
    const struct nf_ynode *ver = nf_ymap_get(root, "nlflow");
    if (!ver)
        NF_DIAG(d, NF_EINVAL, &top, NULL, "missing 'nlflow: 1' (the pipeline format version)");
    else if (ver->type != NF_Y_SCALAR || strcmp(ver->value, "1") != 0) {
        char got[256];
        nf_ynode_describe(ver, got, sizeof got);
        NF_DIAG(d, NF_EINVAL, &ver->loc, NULL, "unsupported pipeline format version %s (this nlflow reads version 1)", got);
    }
    const struct nf_ynode *name = nf_ymap_get(root, "name");
    if (name && name->type == NF_Y_SCALAR && name->value[0])
        p->name = nf_strdup(name->value);
    else {
        if (name)
            NF_DIAG(d, NF_EINVAL, &name->loc, NULL, "'name' must be a non-empty string");
        p->name = nf_path_stem(path);
    }

    nf_vars_parse(p, nf_ymap_get(root, "params"), false, ov, d);
    struct nf_ynode *settings = nf_ymap_get(root, "settings");
    struct nf_ynode *nodes = nf_ymap_get(root, "nodes");
    if (settings)
        nf_vars_substitute(p, settings, NULL, d);
    parse_settings(p, settings, d);
    if (ov && ov->device >= 0)
        p->settings.device = (enum nf_device)ov->device;
    if (ov && ov->memory > 0)
        p->settings.memory = (uint64_t)ov->memory;
    if (ov && ov->threads >= 0)
        p->settings.threads = ov->threads;
    p->outputs_dir = nf_path_join(p->dir, p->settings.outputs);

    if (!nodes) {
        NF_DIAG(d, NF_EINVAL, &top, NULL, "missing 'nodes' (a mapping of node id to node)");
    } else if (nodes->type != NF_Y_MAP || nodes->n == 0) {
        NF_DIAG(d, NF_EINVAL, &nodes->loc, NULL, "'nodes' must be a non-empty mapping of node id to node");
    } else {
        for (size_t i = 0; i < nodes->n; i++)
            nf_vars_substitute(p, nodes->items[i], nodes->keys[i]->value, d);
        size_t n_before = d->n;
        expanded = nf_uses_expand(p, nodes, &used_file, d);
        if (!expanded)
            goto fail;
        nodes = expanded;
        p->nodes = nf_calloc(nodes->n + 1, sizeof *p->nodes);
        if (!p->nodes)
            goto fail;
        p->n_nodes = nodes->n;
        vs.first_same_id = first_same_key(nodes->keys, nodes->n);
        for (size_t i = 0; i < nodes->n; i++) {
            p->nodes[i].used_file = used_file[i];
            parse_node(p, i, nodes->keys[i], nodes->items[i], &vs, d);
        }
        if (nf_alloc_failures() != alloc_failures)
            goto fail;
        resolve_edges(p, &vs, d);
        fill_setting_defaults(p);
        nf_uses_annotate(p, d, n_before);
    }
    for (size_t i = 0; i < p->n_vars; i++)
        if (!p->vars[i].used) {
            struct nf_error w = { 0 };
            nf_error_set(&w, 0, &p->vars[i].loc, NULL, __FILE__, __LINE__,
                         "variable '%s' is never used", p->vars[i].name);
            nf_diags_warn(d, &w);
        }
    if (d->n == 0)
        nf_toposort(p, d);

    /* Pipeline hash: the file text and the command-line overrides. */
    {
        XXH3_state_t *st = XXH3_createState();
        if (st) {
            XXH3_128bits_reset(st);
            XXH3_128bits_update(st, text, len);
            for (size_t i = 0; ov && i < ov->n_set; i++)
                XXH3_128bits_update(st, ov->set[i], strlen(ov->set[i]) + 1);
            XXH128_hash_t h = XXH3_128bits_digest(st);
            snprintf(p->hash, sizeof p->hash, "%016llx%016llx", (unsigned long long)h.high64,
                     (unsigned long long)h.low64);
            XXH3_freeState(st);
        }
    }
fail:
    if (nf_alloc_failures() != alloc_failures) {
        d->n = n_errors;
        d->n_warnings = n_warnings;
        NF_DIAG(d, NF_ENOMEM, NULL, NULL, "out of memory loading '%s'", path);
    }
    for (size_t i = 0; i < vs.n_pe; i++) {
        free(vs.pe[i].name);
        free(vs.pe[i].src);
        free(vs.pe[i].src_port);
    }
    free(vs.pe);
    free(vs.first_same_id);
    free(used_file);
    nf_ynode_free(expanded);
    nf_ynode_free(root);
    free(text);
    if (d->n > 0 || !p) {
        nf_pipeline_free(p);
        return NULL;
    }
    return p;
}

void nf_pipeline_free(struct nf_pipeline *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct nf_node_inst *n = &p->nodes[i];
        if (n->type && n->params)
            nf_params_release(n->type, n->params);
        free(n->params);
        for (size_t e = 0; e < n->n_edges; e++)
            free(n->edges[e].name);
        free(n->edges);
        free(n->in_shape);
        free(n->extra_shape);
        free(n->out_shape);
        free(n->id);
    }
    free(p->nodes);
    for (size_t i = 0; i < p->n_used_files; i++) {
        free(p->used_files[i].commit);
        free(p->used_files[i].used_by);
    }
    free(p->used_files);
    for (size_t i = 0; i < p->n_vars; i++) {
        free(p->vars[i].name);
        free(p->vars[i].value);
    }
    free(p->vars);
    free(p->order);
    free(p->settings.cache);
    free(p->settings.outputs);
    struct nf_executor_settings *ex = &p->settings.executor;
    free(ex->partition);
    free(ex->account);
    free(ex->qos);
    free(ex->time);
    for (size_t i = 0; i < ex->n_extra; i++)
        free(ex->extra[i]);
    free(ex->extra);
    free(p->outputs_dir);
    free(p->file);
    free(p->dir);
    free(p->name);
    free(p);
}
