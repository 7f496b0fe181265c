/* fuzz_pipeline.c — libFuzzer target for the pipeline language: YAML text
 * through nf_pipeline_load (parse, variable substitution, parameter tables,
 * edges, topological sort), the path every `nlflow run/plan/validate` takes
 * first. Any input must end in a pipeline or in diagnostics, never a crash. */
#include "fuzz_common.h"

#include "pipeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write_input("pipeline.yaml", data, size);
    struct nf_diags d;
    nf_diags_init(&d);
    struct nf_pipeline *p = nf_pipeline_load(path, NULL, &d);
    if (p && d.n)
        abort();   /* a pipeline comes back only when nothing was wrong */
    nf_pipeline_free(p);
    nf_diags_release(&d);
    return 0;
}
