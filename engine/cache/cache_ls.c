/* cache_ls.c — what `nlflow cache ls` and a limitless `nlflow cache gc` print:
 * the cache's results grouped so that a user recognises them (pipeline file,
 * node, output port, how many items, how big), and what a gc would free.
 *
 * The store lists one row per result (nf_cache_list); a mapped node or a
 * collection output has one result per item, and every run has a run record
 * besides its outputs. Listing those rows one by one is unreadable beyond a
 * toy pipeline, so rows are folded into groups of (pipeline file, node id,
 * node type, port), and run records, which are bookkeeping, are hidden unless
 * asked for. Results stored before entries recorded their pipeline file and
 * port are grouped under "(pipeline not recorded)".
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache.h"
#include "core/util.h"

struct ls_group {
    char *pipeline_path;     /* owned, NULL: not recorded */
    char node_id[64], node_type[32], port[64];
    char kind[16], shape[64];    /* of the most recently used result */
    bool shapes_differ, run_records;
    size_t n, n_labelled;
    uint64_t bytes, stored;
    int64_t used;            /* most recent */
};

struct ls_state {
    const struct nf_cache_ls_opts *o;
    struct ls_group *g;
    size_t n, cap;
    size_t hidden_records;
    uint64_t hidden_stored;
    bool oom;
};

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Entries arrive most recently used first, so a group's first entry is its
 * most recent one. */
static int collect(const struct nf_cache_entry *e, void *arg)
{
    struct ls_state *s = arg;
    const char *port = e->run_record ? "(run record)" : e->port[0] ? e->port : "?";
    if (s->o->pipeline_path && !same_str(e->pipeline_path, s->o->pipeline_path))
        return 0;
    if (e->run_record && !s->o->all) {
        s->hidden_records++;
        s->hidden_stored += e->stored;
        return 0;
    }
    size_t i = 0;
    while (i < s->n && !(same_str(s->g[i].pipeline_path, e->pipeline_path) &&
                         !strcmp(s->g[i].node_id, e->node_id) &&
                         !strcmp(s->g[i].node_type, e->node_type) && !strcmp(s->g[i].port, port)))
        i++;
    if (i == s->n) {
        if (s->n == s->cap) {
            size_t cap = s->cap ? 2 * s->cap : 32;
            struct ls_group *grown = nf_realloc(s->g, cap * sizeof *grown);
            if (!grown) {
                s->oom = true;
                return NF_ENOMEM;
            }
            s->g = grown;
            s->cap = cap;
        }
        struct ls_group *g = &s->g[s->n];
        memset(g, 0, sizeof *g);
        if (e->pipeline_path && !(g->pipeline_path = nf_strdup(e->pipeline_path))) {
            s->oom = true;
            return NF_ENOMEM;
        }
        s->n++;
        snprintf(g->node_id, sizeof g->node_id, "%s", e->node_id);
        snprintf(g->node_type, sizeof g->node_type, "%s", e->node_type);
        snprintf(g->port, sizeof g->port, "%s", port);
        snprintf(g->kind, sizeof g->kind, "%s", e->kind);
        snprintf(g->shape, sizeof g->shape, "%s", e->shape);
        g->used = e->used;
        g->run_records = e->run_record;
    }
    struct ls_group *g = &s->g[i];
    g->shapes_differ |= strcmp(g->shape, e->shape) != 0;
    g->n++;
    g->n_labelled += e->label[0] && !e->run_record;
    g->bytes += e->bytes;
    g->stored += e->stored;
    return 0;
}

/* Most recently used pipeline first (by its most recent group), then its
 * nodes by their most recent use, then ports by name. */
static int64_t pipeline_used(const struct ls_state *s, const char *path)
{
    int64_t used = 0;
    for (size_t i = 0; i < s->n; i++)
        if (same_str(s->g[i].pipeline_path, path) && s->g[i].used > used)
            used = s->g[i].used;
    return used;
}

static int64_t node_used(const struct ls_state *s, const struct ls_group *g)
{
    int64_t used = 0;
    for (size_t i = 0; i < s->n; i++)
        if (same_str(s->g[i].pipeline_path, g->pipeline_path) &&
            !strcmp(s->g[i].node_id, g->node_id) && s->g[i].used > used)
            used = s->g[i].used;
    return used;
}

static const struct ls_state *sort_state;   /* qsort has no argument pointer */

static int cmp_i64_desc(int64_t a, int64_t b)
{
    return a > b ? -1 : a < b;
}

static int group_order(const void *pa, const void *pb)
{
    const struct ls_group *a = pa, *b = pb;
    int c;
    if (!same_str(a->pipeline_path, b->pipeline_path)) {
        if (!a->pipeline_path || !b->pipeline_path)   /* not recorded: last */
            return a->pipeline_path ? -1 : 1;
        if ((c = cmp_i64_desc(pipeline_used(sort_state, a->pipeline_path),
                              pipeline_used(sort_state, b->pipeline_path))))
            return c;
        return strcmp(a->pipeline_path, b->pipeline_path);
    }
    if (strcmp(a->node_id, b->node_id) || strcmp(a->node_type, b->node_type)) {
        if ((c = cmp_i64_desc(node_used(sort_state, a), node_used(sort_state, b))))
            return c;
        if ((c = strcmp(a->node_id, b->node_id)))
            return c;
        return strcmp(a->node_type, b->node_type);
    }
    if (a->run_records != b->run_records)   /* the record after the outputs */
        return a->run_records ? 1 : -1;
    return strcmp(a->port, b->port);
}

static void when_text(int64_t t, char *buf, size_t size)
{
    time_t tt = (time_t)t;
    struct tm tm;
    strftime(buf, size, "%Y-%m-%d %H:%M", localtime_r(&tt, &tm));
}

int nf_cache_ls_print(struct nf_cache *c, const struct nf_cache_ls_opts *o, FILE *out,
                      struct nf_error *err)
{
    struct ls_state s = { .o = o };
    int rc = nf_cache_list(c, collect, &s, err);
    if (s.oom)
        rc = NF_FAIL(err, NF_ENOMEM, "out of memory");
    if (rc < 0)
        goto fail;
    sort_state = &s;
    if (s.n > 1)
        qsort(s.g, s.n, sizeof *s.g, group_order);
    sort_state = NULL;

    uint64_t n_results = 0, bytes = 0, stored = 0;
    for (size_t i = 0; i < s.n; i++) {
        n_results += s.g[i].n;
        bytes += s.g[i].bytes;
        stored += s.g[i].stored;
    }
    char a[32], b[32], when[32];
    nf_format_size(stored, a, sizeof a);
    nf_format_size(bytes, b, sizeof b);
    fprintf(out, "cache %s: %" PRIu64 " result%s%s, %s stored (%s raw)\n", nf_cache_path(c),
            n_results, n_results == 1 ? "" : "s", o->pipeline_path ? " of this pipeline" : "", a, b);
    if (o->pipeline_path && s.n == 0)
        fprintf(out, "no results of %s in this cache (it has not run with this cache, or its "
                "results were removed)\n", o->pipeline_path);
    for (size_t i = 0; i < s.n; i++) {
        const struct ls_group *g = &s.g[i];
        bool new_pipeline = i == 0 || !same_str(g->pipeline_path, s.g[i - 1].pipeline_path);
        if (new_pipeline)
            fprintf(out, "\n%s\n", g->pipeline_path ? g->pipeline_path
                                                    : "(pipeline not recorded: stored by an older nlflow)");
        if (new_pipeline || strcmp(g->node_id, s.g[i - 1].node_id) ||
            strcmp(g->node_type, s.g[i - 1].node_type))
            fprintf(out, "  %s (%s)\n", g->node_id[0] ? g->node_id : "?",
                    g->node_type[0] ? g->node_type : "?");
        char count[32], shape[80];
        if (g->n_labelled == g->n && g->n > 1)
            snprintf(count, sizeof count, "%zu items", g->n);
        else
            snprintf(count, sizeof count, "%zu result%s", g->n, g->n == 1 ? "" : "s");
        snprintf(shape, sizeof shape, "%s%s", g->shape, g->shapes_differ ? " (latest)" : "");
        nf_format_size(g->stored, a, sizeof a);
        nf_format_size(g->bytes, b, sizeof b);
        when_text(g->used, when, sizeof when);
        fprintf(out, "    %-14s %-7s %-22s %-11s %10s stored %10s raw  %s\n", g->port, g->kind, shape,
                count, a, b, when);
    }
    if (s.hidden_records) {
        nf_format_size(s.hidden_stored, a, sizeof a);
        fprintf(out, "\n%zu run record%s (%s) not shown: --all lists them\n", s.hidden_records,
                s.hidden_records == 1 ? "" : "s", a);
    }
    rc = 0;
fail:
    for (size_t i = 0; i < s.n; i++)
        free(s.g[i].pipeline_path);
    free(s.g);
    return rc;
}

int nf_cache_gc_explain(struct nf_cache *c, FILE *out, struct nf_error *err)
{
    struct nf_cache_info info;
    uint64_t n, freed;
    char a[32], b[32];
    int rc;
    NF_TRY(rc = nf_cache_info(c, &info, err));
    nf_format_size(info.stored, a, sizeof a);
    fprintf(out, "gc: no limit given, nothing removed. The cache holds %" PRIu64 " result%s, %s "
            "stored.\n", info.n_results, info.n_results == 1 ? "" : "s", a);
    fprintf(out, "With a limit, gc removes least recently used results (never those a running "
            "nlflow holds):\n");
    NF_TRY(rc = nf_cache_gc_preview(c, 0, 30, &n, &freed, err));
    nf_format_size(freed, a, sizeof a);
    fprintf(out, "  nlflow cache gc --older-than 30    would remove %" PRIu64 " result%s, %s\n", n,
            n == 1 ? "" : "s", a);
    /* size caps around the current size: half of it, and a tenth */
    for (int div = 2; div <= 10 && info.stored > 0; div += 8) {
        /* the option as printed ("1.5MiB": one argument), and the cap it means */
        char opt[64];
        nf_format_size(info.stored / (uint64_t)div, b, sizeof b);
        char *space = strchr(b, ' ');
        if (space)
            memmove(space, space + 1, strlen(space));
        snprintf(opt, sizeof opt, "--max-size %s", b);
        int64_t cap = nf_parse_size(b);
        NF_TRY(rc = nf_cache_gc_preview(c, cap > 0 ? (uint64_t)cap : 1, -1, &n, &freed, err));
        nf_format_size(freed, a, sizeof a);
        fprintf(out, "  nlflow cache gc %-18s would remove %" PRIu64 " result%s, %s\n", opt, n,
                n == 1 ? "" : "s", a);
    }
    fprintf(out, "usage: nlflow cache gc [--max-size SIZE] [--older-than DAYS] [--cache PATH]\n");
    return 0;
fail:
    return rc;
}
