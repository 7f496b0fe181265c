/* cuda_stub.c — the CUDA entry points of a build without CUDA.
 *
 * Compiled instead of cuda_host.c and cuda_probe.cu when configure did not find
 * a CUDA toolkit. Everything then runs on the CPU with no error (DESIGN.md §3);
 * these functions only let `nlflow devices` (and its --calibrate) and device
 * placement say why.
 */
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>

#include "plan/cost.h"

bool nf_cuda_available(char *why, size_t why_size)
{
    if (why && why_size > 0)
        snprintf(why, why_size, "this build has no CUDA support (configure --with-cuda)");
    return false;
}

void nf_cuda_describe(char *buf, size_t size)
{
    if (buf && size > 0)
        snprintf(buf, size, "none");
}

int nf_cuda_calibrate(double *sgemm_gflops, double *hbm_gbs, double *pcie_gbs, double *setup_s,
                      struct nf_error *err)
{
    *sgemm_gflops = *hbm_gbs = *pcie_gbs = *setup_s = NAN;
    return NF_FAIL(err, NF_EUSAGE, "this build has no CUDA support (configure --with-cuda)");
}
