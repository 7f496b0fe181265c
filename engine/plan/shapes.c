/* shapes.c — phase 3: resolve the shape of every port before any data is read.
 *
 * In topological order, each node's input shapes are derived from its sources
 * (applying the collection rules of DESIGN.md §1: a collection of 1×V maps on a
 * stacking matrix port becomes one n×V matrix; a collection on a port that
 * takes one item makes the node run once per item), then the node's resolve()
 * fills its output shapes from headers and parameters. Errors name the node.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "core/util.h"

/* Shape seen by a port, given the source shape; sets *maps when the node must
 * run per item. Returns false (and reports) on a kind mismatch. */
static bool port_shape(const struct nf_node_inst *node, const struct nf_edge *e,
                       const struct nf_port *port, const struct nf_shape *src,
                       const char *src_desc, struct nf_shape *out, bool *maps,
                       int64_t *n_items, struct nf_diags *d)
{
    *out = *src;
    if (src->kind == NF_KIND_NONE)
        return true;
    unsigned accepted = port->types;
    if (src->kind == NF_KIND_COLLECTION && !(accepted & NF_PT_COLL) && (port->flags & NF_PORT_STACK) &&
        src->item_kind == NF_KIND_MATRIX) {
        out->kind = NF_KIND_MATRIX;   /* stacked, also for nodes that are never mapped */
        out->dim[0] = src->dim[0] * src->n_items;
        out->n_items = 0;
        return true;
    }
    if (src->kind == NF_KIND_COLLECTION && !(accepted & NF_PT_COLL) &&
        !(node->type->flags & NF_NODE_NO_MAP)) {
        /* map over items */
        if (*n_items >= 0 && *n_items != src->n_items) {
            NF_DIAG(d, NF_ESHAPE, &e->loc, node->id,
                    "collections of different sizes cannot be paired item by item (input '%s' has %" PRId64
                    " items, another input has %" PRId64 ")", e->name, src->n_items, *n_items);
            return false;
        }
        *n_items = src->n_items;
        *maps = true;
        out->kind = src->item_kind;
        out->n_items = 0;
    }
    if (out->kind == NF_KIND_TABLE && (port->flags & NF_PORT_TABLE_AS_MATRIX) &&
        !(accepted & NF_PT_TABLE)) {
        out->kind = NF_KIND_MATRIX;
        return true;
    }
    if (!(accepted & (1u << out->kind))) {
        char want[64] = "";
        static const char *const names[] = { "", "a volume", "a matrix", "a table", "a collection" };
        for (int k = 1; k <= 4; k++)
            if (accepted & (1u << k))
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", want[0] ? " or " : "", names[k]);
        NF_DIAG(d, NF_EINVAL, &e->loc, node->id, "input '%s' expects %s, but '%s' gives %s %s",
                e->name, want, src_desc, out->kind == NF_KIND_COLLECTION ? "a" : "a",
                nf_kind_name(out->kind));
        return false;
    }
    return true;
}

/* A volume that can stay on disk (can_be_lazy) stays there when every node
 * that consumes it reads it itself (NF_PORT_LAZY): mask then gathers the
 * in-mask voxels as the file is read, and the whole 4D image is never held.
 * One consumer that needs the voxels in memory keeps it a plain value. */
static void leave_volumes_on_disk(struct nf_pipeline *p)
{
    for (size_t j = 0; j < p->n_nodes; j++)
        for (size_t e = 0; e < p->nodes[j].n_edges; e++) {
            const struct nf_edge *edge = &p->nodes[j].edges[e];
            if (edge->port == NF_EDGE_AFTER)
                continue;
            struct nf_shape *s = &p->nodes[edge->src].out_shape[edge->src_port];
            if (s->kind == NF_KIND_VOLUME && s->can_be_lazy)
                s->lazy = true;
        }
    for (size_t j = 0; j < p->n_nodes; j++)
        for (size_t e = 0; e < p->nodes[j].n_edges; e++) {
            const struct nf_edge *edge = &p->nodes[j].edges[e];
            if (edge->port == NF_EDGE_AFTER)
                continue;
            struct nf_shape *s = &p->nodes[edge->src].out_shape[edge->src_port];
            if (s->kind == NF_KIND_VOLUME && s->lazy &&
                (edge->port < 0 || !(p->nodes[j].type->inputs[edge->port].flags & NF_PORT_LAZY)))
                s->lazy = false;
        }
}

int nf_resolve_shapes(struct nf_pipeline *p, struct nf_diags *d)
{
    struct nf_env env;
    nf_pipeline_env(p, &env);
    /* every node's wanted outputs in one pass over the edges (asking
     * nf_outputs_wanted node by node scans all edges each time: quadratic) */
    uint64_t *wanted_by_node = nf_calloc(p->n_nodes + 1, sizeof *wanted_by_node);
    if (!wanted_by_node) {
        NF_DIAG(d, NF_ENOMEM, NULL, NULL, "out of memory");
        return NF_ENOMEM;
    }
    for (size_t j = 0; j < p->n_nodes; j++)
        for (size_t e = 0; e < p->nodes[j].n_edges; e++) {
            const struct nf_edge *edge = &p->nodes[j].edges[e];
            if (edge->port != NF_EDGE_AFTER && edge->src_port < 64)
                wanted_by_node[edge->src] |= 1ull << edge->src_port;
        }
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        struct nf_node_inst *node = &p->nodes[p->order[oi]];
        const struct nf_node_type *t = node->type;
        size_t n_in = nf_port_count(t->inputs), n_out = nf_port_count(t->outputs);
        size_t n_extra = 0;
        for (size_t e = 0; e < node->n_edges; e++)
            n_extra += node->edges[e].port == NF_EDGE_VARIADIC;
        free(node->in_shape);
        free(node->extra_shape);
        free(node->out_shape);
        node->in_shape = nf_calloc(n_in + 1, sizeof *node->in_shape);
        node->extra_shape = nf_calloc(n_extra + 1, sizeof *node->extra_shape);
        node->out_shape = nf_calloc(n_out + 1, sizeof *node->out_shape);
        const char **extra_names = nf_calloc(n_extra + 1, sizeof *extra_names);
        if (!node->in_shape || !node->extra_shape || !node->out_shape || !extra_names) {
            free(extra_names);
            free(wanted_by_node);
            NF_DIAG(d, NF_ENOMEM, NULL, NULL, "out of memory");
            return NF_ENOMEM;
        }
        bool maps = false, ok = true, deferred = false;
        int64_t n_items = -1;
        size_t xi = 0;
        for (size_t e = 0; e < node->n_edges; e++) {
            const struct nf_edge *edge = &node->edges[e];
            const struct nf_node_inst *src = &p->nodes[edge->src];
            if (edge->port == NF_EDGE_AFTER) {
                deferred = true;
                continue;
            }
            char src_desc[160];
            snprintf(src_desc, sizeof src_desc, "%s.%s", src->id, src->type->outputs[edge->src_port].name);
            const struct nf_shape *ss = &src->out_shape[edge->src_port];
            if (edge->port == NF_EDGE_VARIADIC) {
                extra_names[xi] = edge->name;
                node->extra_shape[xi++] = *ss;   /* variadic ports take values as they are */
                continue;
            }
            ok &= port_shape(node, edge, &t->inputs[edge->port], ss, src_desc,
                             &node->in_shape[edge->port], &maps, &n_items, d);
            /* a source known only when it runs (after a node that writes its
               files): so is this node, and it is checked then */
            deferred |= ss->kind == NF_KIND_NONE;
        }
        if (!ok) {
            free(extra_names);
            continue;
        }
        node->mapped = maps;
        node->n_items = maps ? (size_t)n_items : 0;
        if (deferred) {
            /* ordered after a node that may (re)write the files it reads: what
             * is on disk now says nothing reliable about the run */
            free(extra_names);
            continue;
        }
        struct nf_error err = { 0 };
        bool wanted[64];
        uint64_t wanted_mask = wanted_by_node[p->order[oi]];
        for (size_t o = 0; o < n_out && o < 64; o++)
            wanted[o] = (wanted_mask >> o) & 1;
        struct nf_resolve r = {
            .node = node, .params = node->params, .env = &env, .in = node->in_shape,
            .n_extra = n_extra, .extra_names = extra_names, .extra_in = node->extra_shape,
            .out = node->out_shape, .err = &err, .wanted = n_out <= 64 ? wanted : NULL,
        };
        int rc = t->resolve ? t->resolve(&r) : 0;
        free(extra_names);
        if (rc < 0) {
            if (!err.loc.file)
                err.loc = node->loc;
            if (!err.node[0])
                snprintf(err.node, sizeof err.node, "%s", node->id);
            nf_diags_add(d, &err);
            continue;
        }
        if (maps)
            for (size_t o = 0; o < n_out; o++) {
                struct nf_shape *s = &node->out_shape[o];
                if (s->kind == NF_KIND_NONE || s->kind == NF_KIND_COLLECTION)
                    continue;
                s->item_kind = s->kind;
                s->kind = NF_KIND_COLLECTION;
                s->n_items = n_items;
                s->lazy = false;
            }
    }
    free(wanted_by_node);
    leave_volumes_on_disk(p);
    return d->n ? d->v[0].code : 0;
}

bool nf_shape_has_column(const struct nf_shape *s, const char *name)
{
    if (!s->col_names || !name)
        return true;
    size_t len = strlen(name);
    for (const char *c = s->col_names; *c;) {   /* "a\nb\n" (the last '\n' may be missing) */
        size_t n = strcspn(c, "\n");
        if (n == len && strncmp(c, name, len) == 0)
            return true;
        c += n + (c[n] == '\n');
    }
    return false;
}

void nf_shape_columns_text(const struct nf_shape *s, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const char *c = s->col_names; c && *c && used + 1 < size;) {
        size_t len = strcspn(c, "\n");
        int n = snprintf(buf + used, size - used, "%s%.*s", used ? ", " : "", (int)len, c);
        if (n < 0)
            break;
        used += (size_t)n;
        c += len + (c[len] == '\n');
    }
}
