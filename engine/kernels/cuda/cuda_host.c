/* cuda_host.c — CUDA availability and description, for builds with HAVE_CUDA.
 *
 * Asks the CUDA runtime whether a usable device exists and describes it for
 * `nlflow devices`, benchmark records and device placement. A CUDA build must
 * still run everywhere (DESIGN.md §3), so every failure is an answer, not an
 * error: nf_cuda_available() returns false and `why` says exactly which step
 * failed (no driver, driver too old for this runtime, zero devices, ...).
 * Only device 0 is considered for now.
 */
#include "kernels/kernels.h"
#include "gpu.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

/* CUDA encodes versions as 1000*major + 10*minor. */
static void format_cuda_version(int version, char *buf, size_t size)
{
    snprintf(buf, size, "%d.%d", version / 1000, (version % 1000) / 10);
}

static void set_why(char *why, size_t why_size, const char *what, cudaError_t status)
{
    if (!why || why_size == 0)
        return;
    snprintf(why, why_size, "%s: %s (%s)", what, cudaGetErrorString(status),
             cudaGetErrorName(status));
}

bool nf_cuda_available(char *why, size_t why_size)
{
    int driver_version = 0, device_count = 0;
    cudaError_t status;

    /* Succeeds with 0 when no driver is installed at all: the clearest message. */
    status = cudaDriverGetVersion(&driver_version);
    if (status != cudaSuccess) {
        set_why(why, why_size, "cudaDriverGetVersion failed", status);
        return false;
    }
    if (driver_version == 0) {
        if (why && why_size > 0)
            snprintf(why, why_size, "no NVIDIA driver is installed (libcuda not found)");
        return false;
    }
    status = cudaGetDeviceCount(&device_count);
    if (status != cudaSuccess) {
        set_why(why, why_size, "cudaGetDeviceCount failed", status);
        return false;
    }
    if (device_count == 0) {
        if (why && why_size > 0)
            snprintf(why, why_size, "the NVIDIA driver reports no CUDA devices");
        return false;
    }
    const char *missing = nf_cuda_libs_missing();   /* loads cuBLAS/cuSOLVER now */
    if (missing) {
        if (why && why_size > 0)
            snprintf(why, why_size, "%s", missing);
        return false;
    }
    return true;
}

void nf_cuda_describe(char *buf, size_t size)
{
    struct cudaDeviceProp props;
    int driver_version = 0, runtime_version = 0;
    char driver[16], runtime[16];

    if (!buf || size == 0)
        return;
    if (!nf_cuda_available(NULL, 0) || cudaGetDeviceProperties(&props, 0) != cudaSuccess) {
        snprintf(buf, size, "none");
        return;
    }
    /* Versions are informational here; a failure leaves them at 0.0. */
    (void)cudaDriverGetVersion(&driver_version);
    (void)cudaRuntimeGetVersion(&runtime_version);
    format_cuda_version(driver_version, driver, sizeof driver);
    format_cuda_version(runtime_version, runtime, sizeof runtime);
    snprintf(buf, size, "%s, %.1f GiB, compute capability %d.%d, %d SMs, driver %s, runtime %s",
             props.name, (double)props.totalGlobalMem / (1024.0 * 1024.0 * 1024.0),
             props.major, props.minor, props.multiProcessorCount, driver, runtime);
}
