/* place.c — phase 4: decide for every node whether it runs on the CPU or GPU.
 *
 * For now the rule is simple and explicit: a node runs on the GPU only when the
 * user asked for it (node `device:` or settings.device), the node has a GPU
 * implementation and a usable GPU exists; `auto` means CPU until the cost model
 * of the CUDA backend lands. An explicit GPU request that cannot be honoured
 * falls back to the CPU with a warning (the seed's "fallback" promise).
 */
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

int nf_place(struct nf_pipeline *p, bool gpu_available, struct nf_diags *d)
{
    for (size_t i = 0; i < p->n_nodes; i++) {
        struct nf_node_inst *n = &p->nodes[i];
        bool has_gpu = n->type->run_gpu != NULL;
        n->device = nf_place_node(n->device_req, p->settings.device, has_gpu, gpu_available);
        enum nf_device want = n->device_req != NF_DEV_AUTO ? n->device_req : p->settings.device;
        if (want == NF_DEV_GPU && n->device != NF_DEV_GPU) {
            struct nf_error w = { 0 };
            NF_FAIL_AT(&w, 0, &n->loc, n->id, "device gpu requested but %s; running on the CPU",
                       !has_gpu ? "this node type has no GPU implementation" : "no usable GPU was found");
            nf_diags_warn(d, &w);
        }
    }
    return 0;
}
