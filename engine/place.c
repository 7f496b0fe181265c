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
 * means the CPU.
 */
#include <math.h>
#include <stdlib.h>

#include "cost.h"
#include "kernels/kernels.h"
#include "pipeline.h"

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
static void load_rates(struct nf_rates *rates, struct nf_diags *d)
{
    struct nf_error err = { 0 };
    char *path = nf_rates_path();
    if (nf_rates_load(path, rates, &err) < 0) {
        nf_error_prefix(&err, "device placement uses default rates: ");
        nf_diags_warn(d, &err);
    }
    free(path);
}

int nf_place(struct nf_pipeline *p, bool gpu_available, struct nf_diags *d)
{
    struct nf_rates rates;
    bool have_rates = false;
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct nf_node_inst *n = &p->nodes[i];
        bool has_gpu = n->type->run_gpu != NULL;
        enum nf_device want = n->device_req != NF_DEV_AUTO ? n->device_req : p->settings.device;
        struct nf_cost cost = { 0 };
        bool costed = n->type->cost && n->in_shape && n->out_shape &&
                      n->type->cost(n->params, n->in_shape, n->out_shape, &cost) == 1;
        double cpu_s = NAN, gpu_s = NAN;
        if (costed) {
            if (!have_rates)
                load_rates(&rates, d);
            have_rates = true;
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
    }
    return 0;
}
