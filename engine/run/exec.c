/* exec.c — phase 7: run the planned pipeline.
 *
 * A fixed pool of worker threads takes tasks — one per node, or one per item
 * for nodes mapped over a collection — in topological order as soon as their
 * inputs are ready and their estimated memory fits in what is left of the
 * budget (a task always starts when nothing else runs, so progress is
 * guaranteed). Results are reference-counted values; a node's outputs are
 * dropped as soon as its last consumer has finished, and lazy collection items
 * (subjects on disk) are read just before the task that needs them and freed
 * right after, so memory stays O(items in flight). Chains of mapped nodes
 * stream: a mapped consumer starts with its mapped sources still running,
 * its item i as soon as their item i is made, tasks are taken deepest node
 * first, and an item that only mapped consumers read is dropped once they
 * are done with it (smooth -> mask -> glm over 40 runs holds a few runs'
 * images, not 40). Dropped values are freed by a releaser thread, joined
 * before the run returns, so that unmapping a large image happens neither
 * under the scheduler's lock nor between a node and the next.
 *
 * The first failure stops scheduling; running tasks finish, nothing else
 * starts, and the error is returned. SIGINT/SIGTERM set nf_interrupted
 * (events.c): workers stop taking tasks and items, long nodes stop at their
 * next block with their finished checkpoint chunks committed, and the run ends
 * with NF_EINTR (exit 130) after saying, per interrupted node, what was saved.
 * Nothing of an interrupted run is stored as a result.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "events.h"
#include "cache/exec_cache.h"
#include "io/io.h"
#include "cache/keys.h"
#include "pipeline.h"
#include "core/util.h"

/* Internal: a cached result needed by the plan vanished; plan and run again. */
#define EXEC_REPLAN (-100)

enum node_mode {
    MODE_RUN,                 /* compute (runs whose result is cached are fetched) */
    MODE_SKIP,                /* not needed: every consumer is served from the cache */
    MODE_FETCH,               /* every run is cached: fetch, compute nothing */
};

struct nstate {
    enum node_mode mode;
    bool up_to_date;          /* MODE_SKIP because its own result is cached */
    size_t runs_fetched, runs_computed;
    int deps_left;            /* source nodes not finished */
    int consumers_left;       /* consuming edges whose node has not finished */
    struct nf_value **out;    /* per output port */
    struct nf_value **prepared; /* per input port: stacked / converted / whole inputs */
    size_t items_total, items_started, items_done;
    bool mapped;              /* runs per item (decided from the data, which may
                                 only be known at run time) */
    bool prepared_ok, done;
    double t_start;
    /* streaming fold (this node is the producer): consumer index or -1 */
    int fold_into;
    size_t fold_next;         /* next item to fold, in item order */
    bool folding;             /* a worker is folding right now */
    /* streaming fold (this node is the consumer) */
    bool fold_target, fold_begun;
    void *fold_state;
    struct nf_run fold_run;
    struct nf_env fold_env;
    /* streaming a chain of mapped nodes item by item */
    bool piped;               /* started before its sources finished: item i
                                 waits for item i of each mapped source */
    bool finish_pending;      /* every item done, a source not yet finished */
    int **item_uses;          /* per output port: per item, the mapped
                                 consumers' edges not yet done with it (the
                                 item is dropped at 0); NULL: kept whole */
    /* events */
    struct nf_progress progress;
    uint64_t rss_start;       /* the process's peak RSS when the node started */
    bool started;             /* node_start (or node_cached) said */
    int64_t ckpt_saved, ckpt_total;   /* its checkpoint chunks then (-1: none) */
};

struct executor {
    struct nf_pipeline *p;
    const struct nf_exec_opts *o;
    struct nf_env env;
    struct nstate *st;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    uint64_t mem_used;
    int running;
    size_t nodes_done;
    bool abort;
    struct nf_error err;
    /* cache */
    struct nf_cache *cache;   /* NULL: no caching */
    struct nf_node_keys *keys;
    bool cache_off;           /* a write failed: stop writing, keep running */
    char *pipeline_abs;       /* for explain records */
    bool finished;            /* workers are done: the heartbeat thread stops */
    bool interrupt_said;      /* the interrupt event is out */
    double t_start;           /* nf_now() when execution began */
    /* values whose last reference the workers dropped, freed by the releaser
     * thread (releasing a 675 MB image is a munmap of 0.1 s or more: not
     * under the lock, not between a node and the next) */
    struct nf_value **dropped;
    size_t n_dropped, cap_dropped;
    bool releasing;           /* the releaser thread runs */
    bool workers_done;        /* the releaser drains what is left and stops */
};

/* Keeps this process's cache leases fresh (other hosts judge them by age)
 * until the workers are done. */
static void *heartbeat(void *arg)
{
    struct executor *x = arg;
    double last = nf_now();
    pthread_mutex_lock(&x->lock);
    while (!x->finished) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 10;
        pthread_cond_timedwait(&x->cond, &x->lock, &until);   /* also woken by every task */
        if (!x->finished && nf_now() - last >= 10) {
            last = nf_now();
            pthread_mutex_unlock(&x->lock);
            nf_cache_heartbeat(x->cache);
            pthread_mutex_lock(&x->lock);
        }
    }
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

/* Under the lock: drop one reference to v, freeing it on the releaser
 * thread when there is one (and memory to queue it), here otherwise. The
 * queue holds the reference, so nothing still used can be freed. */
static void drop_value(struct executor *x, struct nf_value *v)
{
    if (!v)
        return;
    if (x->releasing && x->n_dropped == x->cap_dropped) {
        size_t cap = x->cap_dropped ? 2 * x->cap_dropped : 16;
        struct nf_value **grown = nf_realloc_array(x->dropped, cap, sizeof *grown);
        if (grown) {
            x->dropped = grown;
            x->cap_dropped = cap;
        }
    }
    if (!x->releasing || x->n_dropped == x->cap_dropped) {
        nf_value_unref(v);
        return;
    }
    x->dropped[x->n_dropped++] = v;
    pthread_cond_broadcast(&x->cond);
}

/* The releaser thread: frees the queued values outside the lock until the
 * workers are done and the queue is empty. */
static void *releaser(void *arg)
{
    struct executor *x = arg;
    pthread_mutex_lock(&x->lock);
    for (;;) {
        if (x->n_dropped > 0) {
            struct nf_value *v = x->dropped[--x->n_dropped];
            pthread_mutex_unlock(&x->lock);
            nf_value_unref(v);
            pthread_mutex_lock(&x->lock);
            continue;
        }
        if (x->workers_done)
            break;
        pthread_cond_wait(&x->cond, &x->lock);
    }
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

static const char *node_source(const struct nstate *s)
{
    if (s->mode == MODE_SKIP)
        return s->up_to_date ? "cache" : "skipped";
    if (s->runs_computed == 0 && s->runs_fetched > 0)
        return "cache";
    return s->runs_fetched > 0 ? "partly cached" : "run";
}

/* How the run stands, for a sink's page (nf_env.facts). */
static void run_facts(struct executor *x, struct nf_run_facts *f)
{
    memset(f, 0, sizeof *f);
    f->known = true;
    f->nodes = x->p->n_nodes;
    pthread_mutex_lock(&x->lock);
    f->seconds = nf_now() - x->t_start;
    for (size_t i = 0; i < x->p->n_nodes; i++) {
        const struct nstate *s = &x->st[i];
        if (!s->done && s->mode != MODE_SKIP)
            continue;
        f->nodes_done++;
        if (strcmp(node_source(s), "cache") == 0)
            f->nodes_cached++;
    }
    pthread_mutex_unlock(&x->lock);
}

/* The process's peak resident set so far, bytes (Linux: ru_maxrss in KiB). */
static uint64_t peak_rss(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (uint64_t)ru.ru_maxrss * 1024u : 0;
}

/* A node's event (docs/events.md): node_start, node_cached, node_done,
 * node_failed, node_interrupted. seconds < 0: not over yet. */
static void json_event(struct executor *x, const char *event, const struct nf_node_inst *node,
                       double seconds, const struct nf_error *e)
{
    if (!x->o->json)
        return;
    size_t ni = (size_t)(node - x->p->nodes);
    const struct nstate *s = &x->st[ni];
    struct nf_strbuf sb;
    nf_event_begin(&sb, event);
    nf_strbuf_addf(&sb, ",\"node\":");
    nf_strbuf_add_json_str(&sb, node->id);
    nf_strbuf_addf(&sb, ",\"type\":\"%s\",\"device\":\"%s\"", node->type->name, nf_device_name(node->device));
    if (x->keys && x->keys[ni].known && x->keys[ni].n_runs == 1 && !x->keys[ni].mapped) {
        char hex[33];
        nf_key_hex(x->keys[ni].runs[0], hex);
        nf_strbuf_addf(&sb, ",\"key\":\"%s\"", hex);
    }
    if (s->mapped)
        nf_strbuf_addf(&sb, ",\"items\":%zu", s->items_total);
    if (seconds >= 0) {
        uint64_t peak = peak_rss();
        nf_strbuf_addf(&sb, ",\"seconds\":%.6f,\"source\":\"%s\",\"computed\":%zu,\"cached\":%zu",
                       seconds, node_source(s), s->runs_computed, s->runs_fetched);
        nf_strbuf_addf(&sb, ",\"rss_peak_bytes\":%" PRIu64 ",\"rss_growth_bytes\":%" PRIu64
                       ",\"est_peak_bytes\":%" PRIu64, peak, peak > s->rss_start ? peak - s->rss_start : 0,
                       node->est_peak);
    }
    if (strcmp(event, "node_interrupted") == 0) {
        nf_strbuf_addf(&sb, ",\"items_done\":%zu", s->items_done);
        if (s->ckpt_total >= 0)
            nf_strbuf_addf(&sb, ",\"chunks_saved\":%" PRId64 ",\"chunks_total\":%" PRId64, s->ckpt_saved,
                           s->ckpt_total);
    }
    if (e) {
        nf_strbuf_addf(&sb, ",\"code\":\"%s\",\"message\":", nf_err_name(e->code));
        nf_strbuf_add_json_str(&sb, e->msg);
        nf_event_add_loc(&sb, &e->loc);
    }
    nf_event_end(&sb);
}

/* Under the lock: the node begins (computing, or served from the cache). */
static void node_begins(struct executor *x, size_t ni, const char *event)
{
    struct nstate *s = &x->st[ni];
    if (s->started)
        return;
    s->started = true;
    s->rss_start = peak_rss();
    json_event(x, event, &x->p->nodes[ni], -1, NULL);
}

static void fail_locked(struct executor *x, const struct nf_error *e)
{
    if (!x->abort) {
        x->err = *e;
        x->abort = true;
    }
    pthread_cond_broadcast(&x->cond);
}

/* Inputs that are the same for every item of a node: stacked collections,
 * tables converted to matrices, and whole values. Called under the lock once,
 * when the node becomes ready (cheap: a memcpy at most). */
static int prepare_inputs(struct executor *x, size_t ni, struct nf_error *err)
{
    struct nf_node_inst *node = &x->p->nodes[ni];
    struct nstate *s = &x->st[ni];
    for (size_t e = 0; e < node->n_edges; e++) {
        const struct nf_edge *edge = &node->edges[e];
        if (edge->port < 0)
            continue;
        const struct nf_port *port = &node->type->inputs[edge->port];
        struct nf_node_inst *src = &x->p->nodes[edge->src];
        struct nf_value *v = x->st[edge->src].out[edge->src_port];
        if (!v)
            return NF_FAIL_AT(err, NF_EDATA, &edge->loc, node->id,
                              "input '%s': node '%s' produced no '%s' output", edge->name, src->id,
                              src->type->outputs[edge->src_port].name);
        struct nf_value *prepared = NULL;
        if (v->kind == NF_KIND_COLLECTION && !(port->types & NF_PT_COLL)) {
            if ((port->flags & NF_PORT_STACK) && v->u.coll.n > 0 &&
                v->u.coll.items[0]->kind == NF_KIND_MATRIX) {
                prepared = nf_collection_stack(v, err);
                if (!prepared)
                    goto fail;
            } else {
                s->mapped = true;   /* per item at run time */
                continue;
            }
        } else if (v->kind == NF_KIND_TABLE && (port->flags & NF_PORT_TABLE_AS_MATRIX) &&
                   !(port->types & NF_PT_TABLE)) {
            prepared = nf_table_to_matrix(v, err);
            if (!prepared)
                goto fail;
        } else {
            if (!(port->types & (1u << v->kind)))
                return NF_FAIL_AT(err, NF_EDATA, &edge->loc, node->id,
                                  "input '%s' got a %s from '%s', which it cannot take", edge->name,
                                  nf_kind_name(v->kind), src->id);
            prepared = nf_value_ref(v);
        }
        s->prepared[edge->port] = prepared;
    }
    s->prepared_ok = true;
    return 0;
fail:
    if (!err->node[0]) {
        err->loc = node->edges[0].loc;
        snprintf(err->node, sizeof err->node, "%s", node->id);
    }
    return err->code ? err->code : NF_EDATA;
}

/* ---- streaming folds: producer ni feeds consumer r item by item ---- */

/* Under the lock, when the producer becomes ready: the consumer's state is
 * created now and it is never scheduled as a task of its own. */
static int fold_start(struct executor *x, size_t ni, size_t r, struct nf_error *err)
{
    struct nstate *c = &x->st[r];
    struct nf_node_inst *rn = &x->p->nodes[r];
    x->st[ni].fold_into = (int)r;
    c->fold_target = true;
    c->prepared_ok = true;
    c->items_total = 1;
    c->items_started = 1;   /* never picked by pick_task */
    c->t_start = nf_now();
    c->fold_env = x->env;
    c->fold_run = (struct nf_run){ .node = rn, .params = rn->params, .env = &c->fold_env,
                                   .in = c->prepared, .out = c->out, .err = err };
    int rc = rn->type->fold_begin(&c->fold_run, &c->fold_state);
    c->fold_run.err = NULL;   /* err is the caller's; each call gets its own */
    if (rc < 0)
        return nf_error_on_node(rn, err, rc);
    c->fold_begun = true;
    node_begins(x, r, "node_start");
    return 0;
}

static void node_finished(struct executor *x, size_t ni);
static int cache_store(struct executor *x, size_t ni, size_t r, size_t n_out,
                       struct nf_value *const *out, const struct nf_written *w, struct nf_error *err);

/* Under the lock: fold every item that is ready, in order. The lock is
 * released around each fold_item; one worker folds at a time. Finishes the
 * producer and the consumer once everything is folded. */
static void fold_pending(struct executor *x, size_t ni)
{
    struct nstate *s = &x->st[ni];
    size_t r = (size_t)s->fold_into;
    struct nstate *c = &x->st[r];
    struct nf_node_inst *rn = &x->p->nodes[r];
    if (s->folding)
        return;
    s->folding = true;
    struct nf_value *coll = s->out[rn->edges[0].src_port];
    while (!x->abort && s->fold_next < s->items_total && coll->u.coll.items[s->fold_next]) {
        size_t i = s->fold_next;
        struct nf_value *item = coll->u.coll.items[i];
        coll->u.coll.items[i] = NULL;   /* ours now: dropped after folding */
        pthread_mutex_unlock(&x->lock);
        struct nf_error e = { 0 };
        c->fold_run.err = &e;
        int rc = rn->type->fold_item(&c->fold_run, c->fold_state, item, i);
        nf_value_unref(item);
        pthread_mutex_lock(&x->lock);
        if (rc < 0) {
            nf_error_on_node(rn, &e, rc);
            fail_locked(x, &e);
            break;
        }
        s->fold_next++;
    }
    s->folding = false;
    if (x->abort || s->fold_next < s->items_total || s->items_done < s->items_total)
        return;
    /* all items made and folded: finish both nodes */
    node_finished(x, ni);
    pthread_mutex_unlock(&x->lock);
    struct nf_error e = { 0 };
    c->fold_run.err = &e;
    int rc = rn->type->fold_end(&c->fold_run, c->fold_state, true);
    pthread_mutex_lock(&x->lock);
    c->fold_begun = false;
    c->fold_state = NULL;
    if (rc == 0) {
        pthread_mutex_unlock(&x->lock);
        rc = cache_store(x, r, 0, nf_port_count(rn->type->outputs), c->out, NULL, &e);
        pthread_mutex_lock(&x->lock);
    }
    if (rc < 0) {
        nf_error_on_node(rn, &e, rc);
        fail_locked(x, &e);
        return;
    }
    c->items_done = 1;
    c->runs_computed = 1;
    node_finished(x, r);
}

/* ---- streaming chains of mapped nodes ----
 * A mapped node (mask after smooth, glm after mask) may start before its
 * mapped sources finish: its item i runs as soon as item i of each of them
 * is made, and an item that only mapped consumers read is dropped once they
 * are all done with it. A chain over runs then holds a few runs' images at
 * a time instead of every run's intermediate results. */

/* Whether `edge` hands its node the source's collection an item at a time
 * (as prepare_inputs maps it: a port that takes no collection, no stacking). */
static bool edge_maps(const struct nf_pipeline *p, const struct nf_node_inst *node, const struct nf_edge *edge)
{
    if (edge->port < 0)
        return false;
    const struct nf_shape *src = &p->nodes[edge->src].out_shape[edge->src_port];
    const struct nf_port *port = &node->type->inputs[edge->port];
    return src->kind == NF_KIND_COLLECTION && !(port->types & NF_PT_COLL) && !(port->flags & NF_PORT_STACK);
}

/* Under the lock: may node ni start before all its sources are done? Each
 * unfinished source must be a running mapped node (not folded) that feeds
 * it item by item, and nothing may depend on whole results of unfinished
 * sources (keys of cached runs, `after:`, inputs taken whole). */
static bool can_pipe(const struct executor *x, size_t ni)
{
    const struct nf_node_inst *node = &x->p->nodes[ni];
    const struct nstate *s = &x->st[ni];
    if (!node->mapped || s->mode != MODE_RUN || x->o->only || (x->cache && !x->keys[ni].known))
        return false;
    bool waits = false;
    for (size_t e = 0; e < node->n_edges; e++) {
        const struct nf_edge *edge = &node->edges[e];
        const struct nstate *src = &x->st[edge->src];
        if (src->done)
            continue;
        if (!edge_maps(x->p, node, edge) || !src->prepared_ok || !src->mapped || src->mode != MODE_RUN ||
            src->fold_into >= 0 || x->p->nodes[edge->src].fold_into >= 0)
            return false;
        waits = true;
    }
    return waits;
}

/* Under the lock: are the inputs of item i of piped node ni made? */
static bool item_ready(const struct executor *x, size_t ni, size_t item)
{
    const struct nf_node_inst *node = &x->p->nodes[ni];
    for (size_t e = 0; e < node->n_edges; e++) {
        const struct nf_edge *edge = &node->edges[e];
        if (edge->port < 0 || x->st[ni].prepared[edge->port])
            continue;
        const struct nf_value *v = x->st[edge->src].out[edge->src_port];
        if (!v || v->kind != NF_KIND_COLLECTION || item >= v->u.coll.n || !v->u.coll.items[item])
            return false;
    }
    return true;
}

/* Under the lock, when mapped node ni creates its output collections: the
 * outputs whose every reader is a mapped consumer get per-item counts. */
static int item_uses_init(struct executor *x, size_t ni, size_t items, struct nf_error *err)
{
    const struct nf_pipeline *p = x->p;
    size_t n_out = nf_port_count(p->nodes[ni].type->outputs);
    if (x->o->on_outputs || x->o->only || items == 0)
        return 0;   /* a caller that sees whole outputs; a SLURM task's part */
    for (size_t o = 0; o < n_out; o++) {
        int uses = 0;
        bool per_item = true;
        for (size_t j = 0; j < p->n_nodes && per_item; j++)
            for (size_t e = 0; e < p->nodes[j].n_edges; e++) {
                const struct nf_edge *edge = &p->nodes[j].edges[e];
                if ((size_t)edge->src != ni || edge->port == NF_EDGE_AFTER || (size_t)edge->src_port != o)
                    continue;
                if (!edge_maps(p, &p->nodes[j], edge) || x->st[j].mode != MODE_RUN) {
                    per_item = false;
                    break;
                }
                uses++;
            }
        if (!per_item || uses == 0)
            continue;
        if (!x->st[ni].item_uses && !(x->st[ni].item_uses = nf_calloc(n_out + 1, sizeof *x->st[ni].item_uses)))
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        int *count = nf_malloc_array(items, sizeof *count);
        if (!count)
            return NF_FAIL(err, NF_ENOMEM, "out of memory");
        for (size_t i = 0; i < items; i++)
            count[i] = uses;
        x->st[ni].item_uses[o] = count;
    }
    return 0;
}

/* Under the lock, item i of mapped node ni done: drop the source items that
 * no other consumer will read. */
static void release_items(struct executor *x, size_t ni, size_t item)
{
    const struct nf_node_inst *node = &x->p->nodes[ni];
    for (size_t e = 0; e < node->n_edges; e++) {
        const struct nf_edge *edge = &node->edges[e];
        struct nstate *src = &x->st[edge->src];
        if (edge->port < 0 || x->st[ni].prepared[edge->port] || !src->item_uses ||
            !src->item_uses[edge->src_port] || item >= src->items_total)
            continue;
        struct nf_value *v = src->out[edge->src_port];
        if (--src->item_uses[edge->src_port][item] == 0 && v && v->kind == NF_KIND_COLLECTION &&
            item < v->u.coll.n) {
            drop_value(x, v->u.coll.items[item]);
            v->u.coll.items[item] = NULL;
        }
    }
}

static void item_uses_free(struct nstate *s, size_t n_out)
{
    for (size_t o = 0; s->item_uses && o < n_out; o++)
        free(s->item_uses[o]);
    free(s->item_uses);
    s->item_uses = NULL;
}

/* A piped node whose items are all done finishes when its sources have. */
static void node_finished(struct executor *x, size_t ni);
static void finish_or_defer(struct executor *x, size_t ni)
{
    if (x->st[ni].deps_left > 0)
        x->st[ni].finish_pending = true;
    else
        node_finished(x, ni);
}

/* Under the lock: the keys of every node downstream of ni that has not
 * started and was keyed from ni's outputs are computed again when it starts
 * (ni's keys followed what it really made). */
static void keys_again_downstream(struct executor *x, size_t ni)
{
    for (size_t oi = 0; oi < x->p->n_nodes; oi++) {   /* in order: released keys pass on */
        size_t j = (size_t)x->p->order[oi];
        const struct nf_node_inst *node = &x->p->nodes[j];
        if (j == ni || x->st[j].prepared_ok || x->st[j].mode != MODE_RUN || !x->keys[j].known)
            continue;
        for (size_t e = 0; e < node->n_edges; e++) {
            size_t src = (size_t)node->edges[e].src;
            if (node->edges[e].port != NF_EDGE_AFTER && (src == ni || !x->keys[src].known)) {
                nf_node_keys_release(&x->keys[j]);   /* known = false: keyed when it starts */
                break;
            }
        }
    }
}

/* Under the lock: node ni's outputs are made or fetched; if it is not
 * mapped, its output keys follow them (a collection of N items is keyed as
 * N items whatever the plan guessed), so that what consumes them is keyed
 * by what it really gets. */
static void keys_follow_outputs(struct executor *x, size_t ni)
{
    const struct nf_node_inst *node = &x->p->nodes[ni];
    struct nstate *s = &x->st[ni];
    if (!x->keys || s->mode == MODE_SKIP || s->mapped)
        return;
    struct nf_error e = { 0 };
    int rc = nf_node_keys_follow(&x->keys[ni], s->out, nf_port_count(node->type->outputs), &e);
    if (rc < 0) {
        fail_locked(x, &e);
        return;
    }
    if (rc == 1) {
        nf_warn(node->id, "its outputs are not the shape the plan expected; what uses them is keyed by "
                "what it made");
        keys_again_downstream(x, ni);
    }
}

/* Under the lock, when node ni starts to run: its keys must describe the runs
 * it really makes (per item of a collection, or one run). The plan keys a
 * node from its sources' shapes, and those follow the real outputs, so a
 * mismatch is a planning bug: rather than store a result under another run's
 * key, the node is keyed again from its sources, and runs uncached if that
 * still disagrees. */
static int keys_match_runs(struct executor *x, size_t ni, struct nf_error *err)
{
    struct nstate *s = &x->st[ni];
    struct nf_node_keys *k = x->keys ? &x->keys[ni] : NULL;
    if (!k || !k->known || k->reads_files)
        return 0;
    size_t runs = s->mapped ? s->items_total : 1;
    if (k->mapped == s->mapped && k->n_runs == runs)
        return 0;
    const struct nf_node_inst *node = &x->p->nodes[ni];
    if (nf_node_keys_compute(x->p, ni, x->keys, x->cache, err) < 0)
        return err->code;
    if (k->known && k->mapped == s->mapped && k->n_runs == runs)
        return 0;
    nf_warn(node->id, "the cache keys planned for it describe %zu run%s%s, it makes %zu%s; it runs "
            "without the cache", k->n_runs, k->n_runs == 1 ? "" : "s", k->mapped ? " (per item)" : "", runs,
            s->mapped ? " (per item)" : "");
    nf_node_keys_release(k);
    keys_again_downstream(x, ni);
    return 0;
}

/* Start the node's state once all its sources are done (or, piped, once
 * they are running). */
static int node_ready(struct executor *x, size_t ni, struct nf_error *err)
{
    struct nf_node_inst *node = &x->p->nodes[ni];
    struct nstate *s = &x->st[ni];
    size_t n_out = nf_port_count(node->type->outputs);
    s->items_total = 1;
    if (!s->mapped && keys_match_runs(x, ni, err) < 0)
        return err->code;
    if (s->mapped) {
        /* the real item count comes from the data, not the plan */
        size_t items = 0;
        for (size_t e = 0; e < node->n_edges; e++) {
            const struct nf_edge *edge = &node->edges[e];
            if (edge->port < 0 || s->prepared[edge->port])
                continue;
            struct nf_value *v = x->st[edge->src].out[edge->src_port];
            if (v && v->kind == NF_KIND_COLLECTION) {
                if (items && items != v->u.coll.n)
                    return NF_FAIL_AT(err, NF_ESHAPE, &edge->loc, node->id,
                                      "collections of different sizes cannot be paired (%zu and %zu items)",
                                      items, v->u.coll.n);
                items = v->u.coll.n;
            }
        }
        s->items_total = items;
        if (keys_match_runs(x, ni, err) < 0)
            return err->code;
        for (size_t o = 0; o < n_out; o++) {
            s->out[o] = nf_value_new_collection(items, err);
            if (!s->out[o])
                return err->code;
        }
        if (item_uses_init(x, ni, items, err) < 0)
            return err->code;
        int r = nf_fold_target(x->p, ni);
        if (r >= 0 && x->st[r].mode == MODE_RUN)
            return fold_start(x, ni, (size_t)r, err);
    }
    return 0;
}

static void release_sources(struct executor *x, size_t ni)
{
    struct nf_node_inst *node = &x->p->nodes[ni];
    struct nstate *s = &x->st[ni];
    size_t n_in = nf_port_count(node->type->inputs);
    for (size_t i = 0; i < n_in; i++) {
        drop_value(x, s->prepared[i]);
        s->prepared[i] = NULL;
    }
    for (size_t e = 0; e < node->n_edges; e++) {
        size_t src = (size_t)node->edges[e].src;
        if (--x->st[src].consumers_left == 0) {
            size_t n_out = nf_port_count(x->p->nodes[src].type->outputs);
            for (size_t o = 0; o < n_out; o++) {
                drop_value(x, x->st[src].out[o]);
                x->st[src].out[o] = NULL;
            }
        }
    }
}

static void node_finished(struct executor *x, size_t ni)
{
    struct nf_node_inst *node = &x->p->nodes[ni];
    struct nstate *s = &x->st[ni];
    s->done = true;
    x->nodes_done++;
    double dt = nf_now() - s->t_start;
    const char *src = node_source(s);
    node->run_s = s->mode == MODE_SKIP ? 0 : dt;
    if (s->mode == MODE_SKIP)
        nf_log("nlflow: [%zu/%zu] %s (%s): %s", x->nodes_done, x->p->n_nodes, node->id, node->type->name,
               s->up_to_date ? "up to date (cached)" : "skipped, not needed (what uses it is cached)");
    else if (s->mapped)
        nf_log("nlflow: [%zu/%zu] %s (%s): %zu items in %.2f s%s%s%s", x->nodes_done, x->p->n_nodes,
               node->id, node->type->name, s->items_total, dt, strcmp(src, "run") ? " (" : "",
               strcmp(src, "run") ? src : "", strcmp(src, "run") ? ")" : "");
    else
        nf_log("nlflow: [%zu/%zu] %s (%s): %s in %.2f s", x->nodes_done, x->p->n_nodes,
               node->id, node->type->name, strcmp(src, "cache") == 0 ? "from the cache" : "done", dt);
    nf_progress_finish(&s->progress);
    if (s->mode == MODE_SKIP && s->up_to_date)
        node_begins(x, ni, "node_cached");
    keys_follow_outputs(x, ni);
    json_event(x, "node_done", node, dt, NULL);
    if (x->o->on_outputs && s->mode != MODE_SKIP)
        x->o->on_outputs(x->o->on_outputs_arg, ni, s->out, nf_port_count(node->type->outputs));
    /* its runs are in the cache now (nodes after it check that) */
    if (x->cache && !x->cache_off && x->keys[ni].known && s->mode != MODE_SKIP)
        x->keys[ni].n_cached = x->keys[ni].n_runs;
    /* what this node was computed from, for `plan --explain` next time */
    if (x->cache && !x->cache_off && x->pipeline_abs && x->keys[ni].known && s->mode != MODE_SKIP) {
        const struct nf_node_keys *k = &x->keys[ni];
        struct nf_error e = { 0 };
        struct nf_key key = k->n_runs > 0 ? k->runs[0] : k->outs && k->n_outs ? k->outs[0].whole
                                                                               : (struct nf_key){ 0, 0 };
        nf_cache_record_node(x->cache, x->pipeline_abs, node->id, key,
                             k->components ? k->components : "", &e);
    }
    release_sources(x, ni);
    if (s->consumers_left == 0) {
        size_t n_out = nf_port_count(node->type->outputs);
        for (size_t o = 0; o < n_out; o++) {
            drop_value(x, s->out[o]);
            s->out[o] = NULL;
        }
    }
    for (size_t j = 0; j < x->p->n_nodes; j++)
        for (size_t e = 0; e < x->p->nodes[j].n_edges; e++)
            if ((size_t)x->p->nodes[j].edges[e].src == ni && --x->st[j].deps_left == 0 &&
                x->st[j].finish_pending) {
                x->st[j].finish_pending = false;
                node_finished(x, j);
            }
}

/* ---- the cache around one run ---- */

/* Is node ni's run `r` servable from the cache? Its keys must be known and it
 * must not be a file reader (those are cheap to reread and keyed by content). */
static bool cacheable(const struct executor *x, size_t ni)
{
    return x->cache && x->keys[ni].known && !x->keys[ni].reads_files;
}

static void cache_write_failed(struct executor *x, const struct nf_node_inst *node,
                               const struct nf_error *e)
{
    pthread_mutex_lock(&x->lock);
    if (!x->cache_off) {
        x->cache_off = true;
        nf_warn(node->id, "cannot write to the cache '%s' (%s); continuing without caching",
                nf_cache_path(x->cache), e->msg);
    }
    pthread_mutex_unlock(&x->lock);
}

/* After a successful run: store its outputs (and what it wrote). */
static int cache_store(struct executor *x, size_t ni, size_t r, size_t n_out,
                       struct nf_value *const *out, const struct nf_written *w, struct nf_error *err)
{
    if (!cacheable(x, ni) || x->cache_off || r >= x->keys[ni].n_runs)
        return 0;
    struct nf_error e = { 0 };
    int rc = nf_run_store(x->cache, x->keys[ni].runs[r], &x->p->nodes[ni], x->p->hash, x->pipeline_abs,
                          x->p->outputs_dir, n_out, out, w, &e);
    if (rc < 0) {
        if (x->o->cache_strict) {
            *err = e;
            nf_error_prefix(err, "cannot write to the cache '%s': ", nf_cache_path(x->cache));
            return nf_error_on_node(&x->p->nodes[ni], err, rc);
        }
        cache_write_failed(x, &x->p->nodes[ni], &e);
    }
    return 0;
}

/* Before a run: 1 when served from the cache (out[] filled), 0 to compute
 * (holding the lease on the run), <0 error. Waits while another process holds
 * the lease and is alive, then uses its result. */
static int cache_lookup(struct executor *x, size_t ni, size_t r, size_t n_out, struct nf_value **out,
                        bool *leased, struct nf_error *err)
{
    *leased = false;
    if (!cacheable(x, ni) || r >= x->keys[ni].n_runs)
        return 0;
    struct nf_key key = x->keys[ni].runs[r];
    for (;;) {
        struct nf_error e = { 0 };
        int rc = nf_run_fetch(x->cache, key, x->p->outputs_dir, n_out, out, &e);
        if (rc == 1)
            return 1;
        if (x->cache_off)
            return 0;
        rc = nf_cache_lease(x->cache, key, &e);
        if (rc == 1) {
            *leased = true;
            return 0;
        }
        if (rc < 0)
            return 0;   /* leases unavailable (read-only cache): just compute */
        if (nf_interrupt_pending())
            return NF_FAIL(err, NF_EINTR, "interrupted");
        /* another live process computes this result: wait for it */
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
}

/* A run of node ni stopped for an interrupt: what of it is saved. Its
 * partial results are not stored (the caller returns before cache_store). */
static void interrupted_run(struct executor *x, size_t ni, struct nf_checkpoint *ck)
{
    int64_t saved = -1, total = -1;
    if (ck && ck->total > 0 && !x->cache_off) {
        int64_t *idx = NULL;
        size_t n = 0;
        struct nf_error e = { 0 };
        if (nf_cache_ckpt_list(x->cache, ck->key, &idx, &n, &e) == 0) {
            saved = (int64_t)n;
            total = ck->total;
        }
        free(idx);
    }
    pthread_mutex_lock(&x->lock);
    struct nstate *s = &x->st[ni];
    if (total >= 0 && (!s->mapped || s->items_total == 1)) {   /* chunks of one run */
        s->ckpt_saved = saved;
        s->ckpt_total = total;
    }
    pthread_mutex_unlock(&x->lock);
}

/* A SLURM task fetches only what its share reads: outputs that a node that
 * computes consumes, and of a collection that only the task's node maps over,
 * the items of its runs. port -1: any port (the runs of a mapped node). */
struct fetch_want { struct executor *x; size_t ni; };

static bool task_wants(void *arg, int port, int64_t item)
{
    const struct fetch_want *fw = arg;
    const struct executor *x = fw->x;
    const struct nf_pipeline *p = x->p;
    bool whole = false, any = false;
    for (size_t j = 0; j < p->n_nodes; j++) {
        if (x->st[j].mode != MODE_RUN)   /* skipped, or fetched: reads no input */
            continue;
        const struct nf_node_inst *node = &p->nodes[j];
        for (size_t e = 0; e < node->n_edges; e++) {
            const struct nf_edge *edge = &node->edges[e];
            if ((size_t)edge->src != fw->ni || (port >= 0 && edge->src_port != port))
                continue;
            any = true;
            const struct nf_port *in = edge->port >= 0 ? &node->type->inputs[edge->port] : NULL;
            bool mapped = in && !(in->types & NF_PT_COLL) && !(in->flags & NF_PORT_STACK) &&
                          !(node->type->flags & NF_NODE_NO_MAP);
            if (!(j == x->o->only_node && mapped && x->o->only_runs && x->o->parts == 0))
                whole = true;
        }
    }
    if (!any)
        return false;
    if (whole || item < 0)
        return true;
    return (size_t)item < x->keys[x->o->only_node].n_runs && x->o->only_runs[item];
}

/* MODE_FETCH: every run of the node comes from the cache. */
static int fetch_node(struct executor *x, size_t ni, struct nf_error *err)
{
    struct nf_node_inst *node = &x->p->nodes[ni];
    const struct nf_node_keys *k = &x->keys[ni];
    size_t n_out = nf_port_count(node->type->outputs);
    struct nf_value **out = nf_calloc(n_out + 1, sizeof *out), **one = nf_calloc(n_out + 1, sizeof *one);
    int rc = 0;
    if (!out || !one) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if (k->mapped)
        for (size_t o = 0; o < n_out; o++)
            if (!(out[o] = nf_value_new_collection(k->n_runs, err))) {
                rc = err->code;
                goto fail;
            }
    for (size_t r = 0; r < k->n_runs; r++) {
        struct fetch_want fw = { x, ni };
        if (x->o->only && k->mapped && !task_wants(&fw, -1, (int64_t)r))
            continue;   /* an item this task's runs do not read */
        rc = nf_run_fetch_some(x->cache, k->runs[r], x->p->outputs_dir, n_out, k->mapped ? one : out,
                               x->o->only ? task_wants : NULL, &fw, err);
        if (rc < 0)
            goto fail;
        if (rc == 0) {
            /* corrupt (and now deleted) or collected by another process since
             * the plan: the sources this node needs may have been skipped, so
             * the whole run is planned again (cheap: the rest is cached) */
            rc = NF_FAIL_AT(err, EXEC_REPLAN, &node->loc, node->id,
                            "a cached result of '%s' is gone; planning again", node->id);
            goto fail;
        }
        for (size_t o = 0; k->mapped && o < n_out; o++) {
            out[o]->u.coll.items[r] = one[o];
            one[o] = NULL;
        }
    }
    pthread_mutex_lock(&x->lock);
    for (size_t o = 0; o < n_out; o++) {
        x->st[ni].out[o] = out[o];
        out[o] = NULL;
    }
    x->st[ni].runs_fetched = k->n_runs;
    pthread_mutex_unlock(&x->lock);
fail:
    for (size_t o = 0; out && o < n_out; o++)
        nf_value_unref(out[o]);
    for (size_t o = 0; one && o < n_out; o++)
        nf_value_unref(one[o]);
    free(out);
    free(one);
    return rc < 0 ? rc : 0;
}

static int run_task(struct executor *x, size_t ni, size_t item, struct nf_error *err)
{
    struct nf_node_inst *node = &x->p->nodes[ni];
    struct nstate *s = &x->st[ni];
    const struct nf_node_type *t = node->type;
    size_t n_in = nf_port_count(t->inputs), n_out = nf_port_count(t->outputs);
    if (s->mode == MODE_FETCH)
        return fetch_node(x, ni, err);
    size_t run_index = s->mapped ? item : 0;
    bool target = x->o->only && ni == x->o->only_node;
    if (target && x->o->only_runs && !x->o->only_runs[run_index])
        return 0;   /* another SLURM task's run */
    bool part = target && x->o->parts > 0;
    bool leased = false, hit = false, fell_back = false;
    struct nf_written written = { 0 };
    size_t n_extra = 0;
    for (size_t e = 0; e < node->n_edges; e++)
        n_extra += node->edges[e].port == NF_EDGE_VARIADIC;
    struct nf_value **in = nf_calloc(n_in + 1, sizeof *in);
    struct nf_value **out = nf_calloc(n_out + 1, sizeof *out);
    struct nf_value **extra = nf_calloc(n_extra + 1, sizeof *extra);
    const char **extra_names = nf_calloc(n_extra + 1, sizeof *extra_names);
    const char *item_label = NULL;
    int rc = 0;
    if (!in || !out || !extra || !extra_names) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    /* the mapped item's label, for outputs served from the cache too */
    for (size_t e = 0; e < node->n_edges && s->mapped && !item_label; e++) {
        const struct nf_edge *edge = &node->edges[e];
        struct nf_value *v = edge->port >= 0 && !s->prepared[edge->port] ? x->st[edge->src].out[edge->src_port] : NULL;
        if (v && v->kind == NF_KIND_COLLECTION && item < v->u.coll.n && v->u.coll.items[item])
            item_label = v->u.coll.items[item]->label;
    }
    rc = cache_lookup(x, ni, run_index, n_out, out, &leased, err);
    if (rc < 0)
        goto fail;
    if (rc == 1) {
        hit = true;
        goto publish;
    }
    size_t xi = 0;
    for (size_t e = 0; e < node->n_edges; e++) {
        const struct nf_edge *edge = &node->edges[e];
        struct nf_value *v = x->st[edge->src].out[edge->src_port];
        if (edge->port == NF_EDGE_AFTER)
            continue;
        if (edge->port == NF_EDGE_VARIADIC) {
            extra_names[xi] = edge->name;
            extra[xi++] = nf_value_ref(v);
            continue;
        }
        if (s->prepared[edge->port]) {
            /* a volume left on disk reaches only ports that read it themselves
             * (shapes.c); any other port gets it read in full */
            struct nf_value *whole = s->prepared[edge->port];
            bool reads_itself = t->inputs[edge->port].flags & NF_PORT_LAZY;
            in[edge->port] = reads_itself ? nf_value_ref(whole) : nf_value_materialize(whole, err);
            if (!in[edge->port]) {
                if (!err->loc.file) {
                    err->loc = node->loc;
                    snprintf(err->node, sizeof err->node, "%s", node->id);
                }
                rc = err->code;
                goto fail;
            }
            continue;
        }
        /* mapped port: this task's item, read from disk if lazy */
        struct nf_value *it = v->u.coll.items[item];
        if (!item_label)
            item_label = it->label;
        in[edge->port] = (t->flags & NF_NODE_LAZY_INPUTS) ? nf_value_ref(it) : nf_value_materialize(it, err);
        if (!in[edge->port]) {
            if (!err->loc.file) {
                err->loc = node->loc;
                snprintf(err->node, sizeof err->node, "%s", node->id);
            }
            rc = err->code;
            goto fail;
        }
        if (in[edge->port]->kind == NF_KIND_TABLE && (t->inputs[edge->port].flags & NF_PORT_TABLE_AS_MATRIX) &&
            !(t->inputs[edge->port].types & NF_PT_TABLE)) {
            struct nf_value *m = nf_table_to_matrix(in[edge->port], err);
            nf_value_unref(in[edge->port]);
            in[edge->port] = m;
            if (!m) {
                rc = err->code;
                goto fail;
            }
        }
    }
    struct nf_env env = x->env;
    if (s->mapped && s->items_total > 1)
        env.threads = 1;
    if (t->flags & NF_NODE_SINK)
        run_facts(x, &env.facts);
    bool wanted[64];
    uint64_t wanted_mask = nf_outputs_wanted(x->p, ni);
    for (size_t o = 0; o < n_out && o < 64; o++)
        wanted[o] = (wanted_mask >> o) & 1;
    struct nf_checkpoint ckpt = { 0 };
    bool with_ckpt = cacheable(x, ni) && !x->cache_off && run_index < x->keys[ni].n_runs;
    if (with_ckpt)
        ckpt = (struct nf_checkpoint){ x->cache, x->keys[ni].runs[run_index], false, 0,
                                       part ? x->o->part : 0, part ? x->o->parts : 0 };
    if (part && !with_ckpt) {
        rc = NF_FAIL_AT(err, NF_EBUG, &node->loc, node->id, "a part of a run needs a cache for its chunks");
        goto fail;
    }
    struct nf_run run = {
        .node = node, .params = node->params, .env = &env, .in = in,
        .n_extra = n_extra, .extra_names = extra_names, .extra_in = extra,
        .out = out, .err = err, .item = item, .n_items = s->mapped ? s->items_total : 0,
        .ckpt = with_ckpt ? &ckpt : NULL,
        .wanted = n_out <= 64 ? wanted : NULL,
        /* items of a mapped node: the engine counts items instead */
        .progress = s->mapped && s->items_total > 1 ? NULL : &s->progress,
    };
    int (*fn)(struct nf_run *) = node->device == NF_DEV_GPU && t->run_gpu ? t->run_gpu : t->run_cpu;
    nf_written_begin(&written);
    rc = fn ? fn(&run) : NF_FAIL(err, NF_EBUG, "node type '%s' has no implementation", t->name);
    if (rc < 0 && fn == t->run_gpu && fn != t->run_cpu && t->run_cpu && (rc == NF_EBUG || rc == NF_ENOMEM)) {
        /* the device failed (a CUDA error, or out of memory even at the smallest
         * block), not the data: the seed's promise is a CPU fallback */
        nf_warn(node->id, "the GPU run failed (%s); running on the CPU instead", err->msg);
        for (size_t o = 0; o < n_out; o++) {
            nf_value_unref(out[o]);
            out[o] = NULL;
        }
        memset(err, 0, sizeof *err);
        rc = t->run_cpu(&run);
        fell_back = true;
    }
    nf_written_end();
    if (rc == NF_EINTR)
        interrupted_run(x, ni, with_ckpt ? &ckpt : NULL);
    if (rc < 0) {
        if (!err->loc.file)
            err->loc = node->loc;
        if (!err->node[0])
            snprintf(err->node, sizeof err->node, "%s", node->id);
        goto fail;
    }
    if (part) {   /* its chunks are what it made; the outputs it built from them are partial */
        if (ckpt.warned) {
            rc = NF_FAIL_AT(err, NF_EIO, &node->loc, node->id, "the chunks of this part could not be saved");
            goto fail;
        }
        for (size_t o = 0; o < n_out; o++) {
            nf_value_unref(out[o]);
            out[o] = NULL;
        }
        goto publish;
    }
    for (size_t o = 0; s->mapped && o < n_out; o++)
        if (out[o] && item_label && !out[o]->label)
            nf_value_set_label(out[o], item_label);
    /* a GPU node's key names the GPU: CPU results are not stored under it */
    rc = fell_back ? 0 : cache_store(x, ni, run_index, n_out, out, &written, err);
    if (rc < 0)
        goto fail;
    if (with_ckpt && !x->cache_off) {   /* the result is stored: partial chunks are done */
        struct nf_error e = { 0 };
        nf_cache_ckpt_drop(x->cache, ckpt.key, &e);
    }
publish:
    pthread_mutex_lock(&x->lock);
    if (hit)
        s->runs_fetched++;
    else
        s->runs_computed++;
    for (size_t o = 0; o < n_out; o++) {
        if (s->mapped) {
            if (out[o] && item_label && !out[o]->label)
                nf_value_set_label(out[o], item_label);
            s->out[o]->u.coll.items[item] = out[o];
        } else {
            s->out[o] = out[o];
        }
        out[o] = NULL;
    }
    pthread_mutex_unlock(&x->lock);
fail:
    if (leased)
        nf_cache_release(x->cache, x->keys[ni].runs[run_index]);
    nf_written_release(&written);
    for (size_t i = 0; in && i < n_in; i++)
        nf_value_unref(in[i]);
    for (size_t i = 0; extra && i < n_extra; i++)
        nf_value_unref(extra[i]);
    for (size_t o = 0; out && o < n_out; o++)
        nf_value_unref(out[o]);
    free(in);
    free(out);
    free(extra);
    free(extra_names);
    return rc;
}

/* Under the lock: find a task that can start now, the last in the order
 * first (depth first), so that a chain of mapped nodes carries the items it
 * started to its end (where they are dropped) before starting more. */
static bool pick_task(struct executor *x, size_t *ni_out, size_t *item_out)
{
    for (size_t oi = x->p->n_nodes; oi-- > 0;) {
        size_t ni = (size_t)x->p->order[oi];
        struct nf_node_inst *node = &x->p->nodes[ni];
        struct nstate *s = &x->st[ni];
        if (s->done || s->finish_pending)
            continue;
        if (s->deps_left > 0 && !(s->prepared_ok ? s->piped : can_pipe(x, ni)))
            continue;
        if (!s->prepared_ok) {
            s->piped = s->deps_left > 0;
            struct nf_error e = { 0 };
            s->t_start = nf_now();
            if (x->cache && s->mode == MODE_RUN && !x->keys[ni].known) {
                /* inputs known only now (files written by an earlier node) */
                if (nf_node_keys_compute(x->p, ni, x->keys, x->cache, &e) < 0) {
                    fail_locked(x, &e);
                    return false;
                }
            }
            if (s->mode == MODE_SKIP) {
                s->prepared_ok = true;
                node_finished(x, ni);
                pthread_cond_broadcast(&x->cond);
                oi = x->p->n_nodes;   /* nodes after it may be ready now: look again */
                continue;
            }
            if (s->mode == MODE_FETCH) {
                s->prepared_ok = true;
                s->items_total = 1;
            } else if (prepare_inputs(x, ni, &e) < 0 || node_ready(x, ni, &e) < 0) {
                fail_locked(x, &e);
                return false;
            }
            node_begins(x, ni, s->mode == MODE_FETCH ? "node_cached" : "node_start");
            if (s->items_total == 0) {   /* empty collection: nothing to do */
                if (s->fold_into >= 0)
                    fold_pending(x, ni);
                else
                    finish_or_defer(x, ni);
                pthread_cond_broadcast(&x->cond);
                oi = x->p->n_nodes;
                continue;
            }
        }
        if (s->items_started >= s->items_total || (s->piped && !item_ready(x, ni, s->items_started)))
            continue;
        /* the plan decided how many items of a streamed node fit at once */
        if (node->mapped && node->concurrency > 0 &&
            s->items_started - s->items_done >= (size_t)node->concurrency)
            continue;
        bool fits = x->mem_used + node->est_task <= x->p->settings.memory;
        if (x->running > 0 && !fits)
            continue;
        *ni_out = ni;
        *item_out = s->items_started++;
        x->mem_used += node->est_task;
        x->running++;
        return true;
    }
    return false;
}

static void *worker(void *arg)
{
    struct executor *x = arg;
    pthread_mutex_lock(&x->lock);
    for (;;) {
        if (nf_interrupt_pending() && !x->interrupt_said) {
            x->interrupt_said = true;
            struct nf_strbuf sb;
            nf_event_begin(&sb, "interrupt");
            nf_strbuf_addf(&sb, ",\"signal\":\"%s\"", nf_interrupt_signal_name());
            nf_event_end(&sb);
        }
        if (nf_interrupt_pending() && !x->abort) {
            struct nf_error e = { 0 };
            NF_FAIL(&e, NF_EINTR, "interrupted");
            fail_locked(x, &e);
        }
        if (x->abort || x->nodes_done == x->p->n_nodes)
            break;
        size_t ni, item;
        if (!pick_task(x, &ni, &item)) {
            if (x->abort || x->nodes_done == x->p->n_nodes)
                break;
            pthread_cond_wait(&x->cond, &x->lock);
            continue;
        }
        pthread_mutex_unlock(&x->lock);
        struct nf_error e = { 0 };
        int rc = run_task(x, ni, item, &e);
        pthread_mutex_lock(&x->lock);
        x->running--;
        x->mem_used -= x->p->nodes[ni].est_task;
        struct nstate *s = &x->st[ni];
        if (rc < 0) {
            if (rc != NF_EINTR)
                json_event(x, "node_failed", &x->p->nodes[ni], nf_now() - s->t_start, &e);
            fail_locked(x, &e);
        } else if (s->fold_into >= 0) {
            s->items_done++;
            fold_pending(x, ni);
        } else {
            if (s->mapped)
                release_items(x, ni, item);
            if (++s->items_done == s->items_total)
                finish_or_defer(x, ni);
        }
        if (rc >= 0 && s->mapped && s->items_total > 1 && !s->done) {
            struct nf_run r = { .progress = &s->progress };
            nf_progress(&r, (int64_t)s->items_done, (int64_t)s->items_total, "items");
        }
        pthread_cond_broadcast(&x->cond);
    }
    pthread_cond_broadcast(&x->cond);
    pthread_mutex_unlock(&x->lock);
    return NULL;
}

/* Before running: every node's keys, then backwards, which nodes must run,
 * which can be fetched from the cache, and which are not needed at all
 * (nothing that runs consumes them). */
static int plan_cache(struct executor *x, struct nf_error *err)
{
    struct nf_pipeline *p = x->p;
    x->cache = x->o->cache;
    x->keys = nf_calloc(p->n_nodes + 1, sizeof *x->keys);
    bool *cached_all = nf_calloc(p->n_nodes + 1, sizeof *cached_all);
    bool *needs_run = nf_calloc(p->n_nodes + 1, sizeof *needs_run);
    int rc = 0;
    x->pipeline_abs = nf_realpath(p->file);
    if (!x->keys || !cached_all || !needs_run) {
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = nf_keys_plan(p, x->cache, x->keys, err)) < 0)
        goto fail;
    for (size_t oi = p->n_nodes; oi-- > 0;) {
        size_t ni = (size_t)p->order[oi];
        const struct nf_node_keys *k = &x->keys[ni];
        bool all = cacheable(x, ni) && k->n_cached == k->n_runs;
        for (size_t r = 0; all && r < k->n_runs; r++) {
            struct nf_error e = { 0 };
            all = nf_run_valid(x->cache, k->runs[r], p->outputs_dir, NULL, &e) == 1;   /* written files intact? */
        }
        cached_all[ni] = all;
        bool terminal = true, needed = false;
        for (size_t j = 0; j < p->n_nodes; j++)
            for (size_t e = 0; e < p->nodes[j].n_edges; e++)
                if ((size_t)p->nodes[j].edges[e].src == ni) {
                    terminal = false;
                    needed |= needs_run[j];
                }
        if (x->o->only && ni == x->o->only_node) {
            /* a SLURM task: its share of this node, nothing after it */
            all = cacheable(x, ni) && !x->o->parts;
            for (size_t r = 0; all && r < k->n_runs; r++) {
                struct nf_error e = { 0 };
                all = (x->o->only_runs && !x->o->only_runs[r]) ||
                      nf_run_valid(x->cache, k->runs[r], p->outputs_dir, NULL, &e) == 1;
            }
            needed = !all;
        } else if ((terminal || (p->nodes[ni].type->flags & NF_NODE_SINK)) && !x->o->only) {
            /* what writes files is wanted for its files, also when another
             * node reads its results (a report after summarize) */
            needed |= !all;
        }
        needs_run[ni] = needed && !all;
        x->st[ni].mode = !needed ? MODE_SKIP : all ? MODE_FETCH : MODE_RUN;
        x->st[ni].up_to_date = all;
    }
fail:
    free(cached_all);
    free(needs_run);
    return rc;
}

static int execute_once(struct nf_pipeline *p, const struct nf_exec_opts *o, struct nf_error *err);

/* After an interrupt: per node that had begun and not finished, what is kept
 * for the rerun (stderr, even with --quiet, and node_interrupted events). */
static void say_interrupted(struct executor *x)
{
    for (size_t oi = 0; oi < x->p->n_nodes; oi++) {
        size_t ni = (size_t)x->p->order[oi];
        struct nf_node_inst *node = &x->p->nodes[ni];
        struct nstate *s = &x->st[ni];
        if (!s->started || s->done)
            continue;
        nf_progress_finish(&s->progress);
        char what[160];
        if (s->ckpt_total >= 0)
            snprintf(what, sizeof what, "%" PRId64 " of %" PRId64 " chunks saved; rerun to resume",
                     s->ckpt_saved, s->ckpt_total);
        else if (s->mapped && s->items_total > 1 && x->cache && !x->cache_off)
            snprintf(what, sizeof what, "%zu of %zu items saved; rerun to resume", s->items_done,
                     s->items_total);
        else
            snprintf(what, sizeof what, "nothing of it saved; rerun to start it again");
        fprintf(stderr, "nlflow: interrupted: node '%s' (%s): %s\n", node->id, node->type->name, what);
        json_event(x, "node_interrupted", node, nf_now() - s->t_start, NULL);
    }
}

int nf_execute(struct nf_pipeline *p, const struct nf_exec_opts *o, struct nf_error *err)
{
    for (int attempt = 0;; attempt++) {
        int rc = execute_once(p, o, err);
        if (rc != EXEC_REPLAN)
            return rc;
        if (attempt == 3)
            return NF_FAIL(err, NF_EIO, "cached results keep vanishing from '%s' (another process "
                           "collecting them?); run again", nf_cache_path(o->cache));
        nf_log("nlflow: %s", err->msg);
        memset(err, 0, sizeof *err);
    }
}

static int execute_once(struct nf_pipeline *p, const struct nf_exec_opts *o, struct nf_error *err)
{
    struct executor x;
    memset(&x, 0, sizeof x);
    x.p = p;
    x.o = o;
    x.t_start = nf_now();
    nf_pipeline_env(p, &x.env);
    int rc = 0;
    int nthreads = o->threads > 0 ? o->threads : nf_cpu_count();
    pthread_t *tids = nf_calloc((size_t)nthreads, sizeof *tids);
    x.st = nf_calloc(p->n_nodes + 1, sizeof *x.st);
    if (!tids || !x.st) {
        free(tids);
        free(x.st);
        return NF_FAIL(err, NF_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct nf_node_inst *node = &p->nodes[i];
        x.st[i].deps_left = (int)node->n_edges;
        x.st[i].fold_into = -1;
        x.st[i].ckpt_total = -1;
        nf_progress_init(&x.st[i].progress, node->id, node->type->name);
        x.st[i].out = nf_calloc(nf_port_count(node->type->outputs) + 1, sizeof(struct nf_value *));
        x.st[i].prepared = nf_calloc(nf_port_count(node->type->inputs) + 1, sizeof(struct nf_value *));
        if (!x.st[i].out || !x.st[i].prepared) {
            rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
            goto fail;
        }
        for (size_t e = 0; e < node->n_edges; e++)
            x.st[node->edges[e].src].consumers_left++;
    }
    if (o->cache && (rc = plan_cache(&x, err)) < 0)
        goto fail;
    pthread_mutex_init(&x.lock, NULL);
    pthread_cond_init(&x.cond, NULL);
    int started = 0;
    pthread_t beat;
    bool beating = x.cache && pthread_create(&beat, NULL, heartbeat, &x) == 0;
    pthread_t release_tid;
    x.releasing = pthread_create(&release_tid, NULL, releaser, &x) == 0;
    for (int t = 0; t < nthreads; t++) {
        if (pthread_create(&tids[t], NULL, worker, &x) != 0)
            break;
        started++;
    }
    if (started == 0)
        worker(&x);
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);
    pthread_mutex_lock(&x.lock);
    x.finished = true;
    x.workers_done = true;
    pthread_cond_broadcast(&x.cond);
    pthread_mutex_unlock(&x.lock);
    if (beating)
        pthread_join(beat, NULL);
    if (x.releasing)
        pthread_join(release_tid, NULL);   /* everything dropped is freed now */
    free(x.dropped);
    pthread_mutex_destroy(&x.lock);
    pthread_cond_destroy(&x.cond);
    if (x.abort) {
        *err = x.err;
        rc = x.err.code ? x.err.code : NF_EBUG;
        if (rc == NF_EINTR)
            say_interrupted(&x);
    }
fail:
    for (size_t i = 0; i < p->n_nodes; i++)   /* folds cut short by a failure */
        if (x.st && x.st[i].fold_begun) {
            struct nf_error e = { 0 };
            x.st[i].fold_run.err = &e;
            p->nodes[i].type->fold_end(&x.st[i].fold_run, x.st[i].fold_state, false);
        }
    for (size_t i = 0; i < p->n_nodes; i++) {
        size_t n_out = nf_port_count(p->nodes[i].type->outputs);
        size_t n_in = nf_port_count(p->nodes[i].type->inputs);
        for (size_t k = 0; x.st[i].out && k < n_out; k++)
            nf_value_unref(x.st[i].out[k]);
        for (size_t k = 0; x.st[i].prepared && k < n_in; k++)
            nf_value_unref(x.st[i].prepared[k]);
        free(x.st[i].out);
        free(x.st[i].prepared);
        item_uses_free(&x.st[i], n_out);
        nf_progress_destroy(&x.st[i].progress);
    }
    for (size_t i = 0; x.keys && i < p->n_nodes; i++)
        nf_node_keys_release(&x.keys[i]);
    free(x.keys);
    free(x.pipeline_abs);
    free(x.st);
    free(tids);
    return rc;
}
