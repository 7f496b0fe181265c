/* place.c — phase 4: decide for every node whether it runs on the CPU or GPU.
 *
 * A node asked for explicitly (node `device:` or settings.device) runs there
 * when it can: `gpu` needs a GPU implementation and a usable GPU, and an
 * explicit GPU request that cannot be honoured falls back to the CPU with a
 * warning (the seed's "fallback" promise, docs/gpu.md). `auto` asks the cost
 * model (cost.h): a node that can run on the GPU and reports its work
 * (node_type.cost) goes to the GPU when the estimated time there — transfers,
 * setup and launches included — is lower than on the CPU, with the rates
 * measured by `nlflow devices --calibrate` (or the documented defaults). Both
 * estimates are kept on the node for `nlflow plan`. Without a cost, `auto`
 * means the CPU. Nodes are placed in execution order, so that a GPU node that
 * reads a value an earlier GPU node keeps on the device (its cost's
 * resident_port) is not charged that value's upload.
 */
#include <math.h>
#include <stdlib.h>

#include "cost.h"
#include "kernels/kernels.h"
#include "pipeline.h"
#include "core/alloc.h"

enum nf_device nf_place_node(enum nf_device requested, enum nf_device pipeline_default,
                             bool node_has_gpu, bool gpu_available)
{
    enum nf_device want = requested != NF_DEV_AUTO ? requested : pipeline_default;
    if (want == NF_DEV_GPU && node_has_gpu && gpu_available)
        return NF_DEV_GPU;
    return NF_DEV_CPU;
}

/* The rates of this machine; a broken rates file is a warning, not an error
 * (placement then uses the defaults). */
static void load_rates(struct nf_rates *rates, bool gpu_available, struct nf_diags *d)
{
    struct nf_error err = { 0 };
    char *path = nf_rates_path();
    if (nf_rates_load(path, rates, &err) < 0) {
        nf_error_prefix(&err, "device placement uses default rates: ");
        nf_diags_warn(d, &err);
    }
    free(path);
    if (gpu_available)   /* a model measured elsewhere beats the defaults */
        nf_rates_this_gpu(rates);
}

/* The edge that feeds input `port` of node n, or NULL. */
static const struct nf_edge *edge_of_port(const struct nf_node_inst *n, int port)
{
    for (size_t e = 0; port >= 0 && e < n->n_edges; e++)
        if (n->edges[e].port == port)
            return &n->edges[e];
    return NULL;
}

int nf_place(struct nf_pipeline *p, bool gpu_available, struct nf_diags *d)
{
    struct nf_rates rates;
    bool have_rates = false;
    /* the (source node, port) values kept on the device by GPU nodes placed so far */
    struct { int src, port; } *kept = nf_calloc(p->n_nodes ? p->n_nodes : 1, sizeof *kept);
    size_t n_kept = 0;
    for (size_t k = 0; k < p->n_nodes; k++) {
        struct nf_node_inst *n = &p->nodes[p->order ? (size_t)p->order[k] : k];
        bool has_gpu = n->type->run_gpu != NULL;
        enum nf_device want = n->device_req != NF_DEV_AUTO ? n->device_req : p->settings.device;
        struct nf_cost cost = { .resident_port = -1 };
        bool costed = n->type->cost && n->in_shape && n->out_shape &&
                      n->type->cost(n->params, n->in_shape, n->out_shape, &cost) == 1;
        double cpu_s = NAN, gpu_s = NAN;
        const struct nf_edge *resident = costed && cost.resident_bytes > 0 ? edge_of_port(n, cost.resident_port)
                                                                          : NULL;
        if (costed) {
            if (!have_rates)
                load_rates(&rates, gpu_available, d);
            have_rates = true;
            for (size_t j = 0; resident && j < n_kept; j++)
                if (kept[j].src == resident->src && kept[j].port == resident->src_port) {
                    cost.transfer_bytes = fmax(0.0, cost.transfer_bytes - cost.resident_bytes);
                    break;
                }
            nf_cost_times(&cost, &rates, &cpu_s, &gpu_s);
        }
        n->est_cpu_s = cpu_s;
        n->est_gpu_s = has_gpu ? gpu_s : NAN;
        if (want == NF_DEV_AUTO && costed && has_gpu && gpu_available)
            n->device = gpu_s < cpu_s ? NF_DEV_GPU : NF_DEV_CPU;
        else
            n->device = nf_place_node(n->device_req, p->settings.device, has_gpu, gpu_available);
        if (want == NF_DEV_GPU && n->device != NF_DEV_GPU) {
            struct nf_error w = { 0 };
            NF_FAIL_AT(&w, 0, &n->loc, n->id, "device gpu requested but %s; running on the CPU",
                       !has_gpu ? "this node type has no GPU implementation" : "no usable GPU was found");
            nf_diags_warn(d, &w);
        }
        if (n->device == NF_DEV_GPU && resident && kept) {
            kept[n_kept].src = resident->src;
            kept[n_kept++].port = resident->src_port;
        }
    }
    free(kept);
    return 0;
}
