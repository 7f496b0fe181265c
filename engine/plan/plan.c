/* plan.c — phase 5: estimate memory per node and check it against the budget.
 *
 * Each node's estimate() gives its working bytes for one run (one item when
 * mapped over a collection); inputs and outputs come from the resolved shapes.
 * The planner then walks the topological order as the executor would, keeping
 * track of which results are still needed, to find the pipeline's peak. Nodes
 * mapped over collections are streamed: only as many items are in flight as fit
 * the budget (lazy inputs are read a subject at a time). A node whose single run
 * does not fit fails here, before anything is computed, with the numbers.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline.h"
#include "core/util.h"

uint64_t nf_outputs_wanted(const struct nf_pipeline *p, size_t ni)
{
    uint64_t mask = 0;
    for (size_t j = 0; j < p->n_nodes; j++)
        for (size_t e = 0; e < p->nodes[j].n_edges; e++)
            if ((size_t)p->nodes[j].edges[e].src == ni && p->nodes[j].edges[e].port != NF_EDGE_AFTER &&
                p->nodes[j].edges[e].src_port < 64)
                mask |= 1ull << p->nodes[j].edges[e].src_port;
    return mask;
}

int nf_fold_target(const struct nf_pipeline *p, size_t ni)
{
    int target = -1, uses = 0;
    for (size_t j = 0; j < p->n_nodes; j++)
        for (size_t e = 0; e < p->nodes[j].n_edges; e++)
            if ((size_t)p->nodes[j].edges[e].src == ni) {
                uses++;
                target = (int)j;
            }
    if (uses != 1)
        return -1;
    const struct nf_node_inst *r = &p->nodes[target];
    if (!r->type->fold_begin || !r->type->fold_item || !r->type->fold_end ||
        r->n_edges != 1 || r->edges[0].port != 0)
        return -1;
    return target;
}

static uint64_t shape_resident(const struct nf_shape *s)
{
    /* lazy collections hold headers only until an item is read */
    return s->lazy ? 0 : nf_shape_bytes(s);
}

int nf_plan_memory(struct nf_pipeline *p, struct nf_diags *d)
{
    uint64_t budget = p->settings.memory;
    size_t n = p->n_nodes;
    int *remaining = nf_calloc(n + 1, sizeof *remaining);
    if (!remaining) {
        NF_DIAG(d, NF_ENOMEM, NULL, NULL, "out of memory");
        return NF_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t e = 0; e < p->nodes[i].n_edges; e++)
            remaining[p->nodes[i].edges[e].src]++;

    int threads = p->settings.threads > 0 ? p->settings.threads : nf_cpu_count();
    uint64_t live = 0, peak = 0;
    int rc = 0;
    for (size_t oi = 0; oi < n; oi++) {
        struct nf_node_inst *node = &p->nodes[p->order[oi]];
        size_t n_out = nf_port_count(node->type->outputs);
        /* Inputs cost new memory only when they are copied for the node:
         * a lazy item read from disk, a stacked collection, a table turned
         * into a matrix. Other inputs are references to results already
         * counted in `live`. */
        uint64_t in_item = 0, in_new = 0, out_item = 0, out_all = 0;
        for (size_t e = 0; e < node->n_edges; e++) {
            const struct nf_edge *edge = &node->edges[e];
            if (edge->port < 0)
                continue;
            const struct nf_shape *src = &p->nodes[edge->src].out_shape[edge->src_port];
            const struct nf_shape *in = &node->in_shape[edge->port];
            /* a port that reads a volume left on disk itself (mask: its
             * voxels, counted in its output; design: the header) holds none
             * of it */
            if (src->lazy && src->kind == NF_KIND_VOLUME &&
                (node->type->inputs[edge->port].flags & NF_PORT_LAZY))
                continue;
            uint64_t bytes = nf_shape_item_bytes(in);
            in_item += bytes;
            bool copied = src->lazy || (src->kind == NF_KIND_COLLECTION && in->kind == NF_KIND_MATRIX &&
                                        src->item_kind == NF_KIND_MATRIX && !node->mapped) ||
                          (src->kind == NF_KIND_TABLE && in->kind == NF_KIND_MATRIX);
            if (copied)
                in_new += bytes;
        }
        for (size_t e = 0, x = 0; e < node->n_edges; e++)
            if (node->edges[e].port == NF_EDGE_VARIADIC)   /* taken whole, as they are */
                in_item += shape_resident(&node->extra_shape[x++]);
        for (size_t o = 0; o < n_out; o++) {
            const struct nf_shape *out = &node->out_shape[o];
            if (out->lazy && out->kind == NF_KIND_VOLUME)   /* left on disk: a header */
                continue;
            out_item += nf_shape_item_bytes(out);
            out_all += shape_resident(&node->out_shape[o]);
        }
        /* A mapped node folded item by item into its consumer keeps only the
         * items in flight, never the whole collection. */
        node->fold_into = node->mapped ? nf_fold_target(p, (size_t)p->order[oi]) : -1;
        node->est_work = node->type->estimate
                         ? node->type->estimate(node->params, node->in_shape, node->out_shape) : 0;
        node->est_out = out_all;   /* folded nodes: set to 0 below */
        /* One run, as shown by `plan`: its inputs, its output item and the
         * working set. The budget check below counts only new memory. */
        node->est_peak = in_item + out_item + node->est_work;
        uint64_t new_peak = in_new + out_item + node->est_work;
        node->est_task = new_peak;
        node->concurrency = 1;
        if (node->mapped) {
            /* every item's output stays (it forms the collection); what is
             * left decides how many items may be in flight */
            if (node->fold_into >= 0)
                out_all = 0;
            uint64_t room = budget > live + out_all ? budget - live - out_all : 0;
            uint64_t per_item = in_new + node->est_work + (node->fold_into >= 0 ? out_item : 0);
            uint64_t fit64 = per_item ? room / per_item : (uint64_t)threads;
            int fit = fit64 > (uint64_t)threads ? threads : (int)fit64;
            node->concurrency = fit < 1 ? 1 : fit > threads ? threads : fit;
            if ((size_t)node->concurrency > node->n_items && node->n_items > 0)
                node->concurrency = (int)node->n_items;
        }
        uint64_t during = live + (uint64_t)node->concurrency * (in_new + node->est_work) + out_all;
        if (node->fold_into >= 0) {
            during += (uint64_t)node->concurrency * out_item;
            node->est_out = 0;
        }
        if (!node->mapped)
            during = live + new_peak + (out_all > out_item ? out_all - out_item : 0);
        if (during > peak)
            peak = during;
        if (new_peak > budget || during > budget) {
            char need[32], have[32], in_s[32], out_s[32], work_s[32], live_s[32];
            nf_format_size(new_peak > budget ? new_peak : during, need, sizeof need);
            nf_format_size(budget, have, sizeof have);
            nf_format_size(in_new, in_s, sizeof in_s);
            nf_format_size(node->mapped ? out_all : out_item, out_s, sizeof out_s);
            nf_format_size(node->est_work, work_s, sizeof work_s);
            nf_format_size(live, live_s, sizeof live_s);
            NF_DIAG(d, NF_EBUDGET, &node->loc, node->id,
                    "needs an estimated %s (inputs read or copied %s, outputs %s, working %s, earlier results kept %s), "
                    "more than the memory budget of %s; raise --memory or settings.memory",
                    need, in_s, out_s, work_s, live_s, have);
            rc = NF_EBUDGET;
        }
        live += out_all;
        /* release inputs whose last consumer this is */
        for (size_t e = 0; e < node->n_edges; e++) {
            int src = node->edges[e].src;
            if (--remaining[src] == 0) {
                struct nf_node_inst *s = &p->nodes[src];
                live -= s->est_out <= live ? s->est_out : live;
            }
        }
        /* sinks' and unused outputs are released right away by the executor */
        if (remaining[p->order[oi]] == 0)
            live -= node->est_out <= live ? node->est_out : live;
    }
    p->est_total_peak = peak;
    free(remaining);
    return rc;
}

/* "1.23 s" / "45.6 ms" / "789 us" */
static void format_seconds(double s, char *buf, size_t size)
{
    if (s >= 1.0)
        snprintf(buf, size, "%.3g s", s);
    else if (s >= 1e-3)
        snprintf(buf, size, "%.3g ms", s * 1e3);
    else
        snprintf(buf, size, "%.3g us", s * 1e6);
}

/* The cost model's estimates of one run (place.c), for nodes that can run on
 * either device (a CUDA build's ridge and permute). */
static void print_estimates(const struct nf_node_inst *node, FILE *out)
{
    char cpu[32], gpu[32];
    if (!(node->est_cpu_s > 0) || !(node->est_gpu_s > 0))
        return;
    format_seconds(node->est_cpu_s, cpu, sizeof cpu);
    format_seconds(node->est_gpu_s, gpu, sizeof gpu);
    fprintf(out, "  [est. per run: cpu %s, gpu %s]", cpu, gpu);
}

void nf_plan_print(const struct nf_pipeline *p, FILE *out)
{
    char mem[32], peak[32];
    nf_format_size(p->settings.memory, mem, sizeof mem);
    nf_format_size(p->est_total_peak, peak, sizeof peak);
    fprintf(out, "pipeline '%s' (%s): %zu nodes, memory budget %s\n", p->name, p->file, p->n_nodes, mem);
    fprintf(out, "%-16s %-10s %-5s %-12s %s\n", "node", "type", "dev", "peak", "outputs");
    for (size_t oi = 0; oi < p->n_nodes; oi++) {
        const struct nf_node_inst *node = &p->nodes[p->order[oi]];
        char est[32], shape[160];
        nf_format_size(node->est_peak, est, sizeof est);
        fprintf(out, "%-16s %-10s %-5s %-12s", node->id, node->type->name, nf_device_name(node->device), est);
        size_t n_out = nf_port_count(node->type->outputs);
        bool first = true, any = false;
        for (size_t o = 0; o < n_out; o++)
            any |= node->out_shape[o].kind != NF_KIND_NONE;
        if (!any) {
            fprintf(out, " known at run time\n");
            continue;
        }
        for (size_t o = 0; o < n_out; o++) {
            const struct nf_shape *s = &node->out_shape[o];
            if (s->kind == NF_KIND_NONE && n_out > 1)
                continue;
            if (s->kind == NF_KIND_NONE)
                snprintf(shape, sizeof shape, "known at run time");
            else
                nf_shape_describe(s, shape, sizeof shape);
            fprintf(out, "%s%s=%s", first ? " " : ", ", node->type->outputs[o].name, shape);
            first = false;
        }
        if (node->mapped && node->fold_into >= 0)
            fprintf(out, "  [per item, %zu items, %d at a time, streamed into '%s']", node->n_items,
                    node->concurrency, p->nodes[node->fold_into].id);
        else if (node->mapped)
            fprintf(out, "  [per item, %zu items, %d at a time]", node->n_items, node->concurrency);
        print_estimates(node, out);
        fputc('\n', out);
    }
    fprintf(out, "estimated peak memory: %s of %s\n", peak, mem);
}
