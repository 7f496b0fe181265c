/* cuda_probe.cu — a tiny real CUDA kernel, to prove the GPU path works end to end.
 *
 * nf_cuda_saxpy_test copies two host vectors to the device, runs a float32 axpy
 * kernel and copies the result back. It is not used for analysis; it exists so
 * that a CUDA build genuinely compiles device code for the target architecture
 * and so that tests on a GPU machine can check toolkit, driver and device
 * together. The real kernels (cuBLAS/cuSOLVER/cuRAND and our own) go beside it.
 */
#include "cuda_internal.h"

#include <cuda_runtime.h>

static __global__ void saxpy_kernel(int64_t n, float a, const float *x, float *y)
{
    /* Grid-stride loop: correct for any n whatever the launch size. */
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)blockDim.x * gridDim.x)
        y[i] = a * x[i] + y[i];
}

extern "C" int nf_cuda_saxpy_test(int64_t n, float a, const float *x, float *y)
{
    float *device_x = NULL, *device_y = NULL;
    cudaError_t status = cudaSuccess;
    size_t bytes = (size_t)n * sizeof(float);
    const int threads = 256;
    int64_t wanted_blocks = (n + threads - 1) / threads;
    int blocks = wanted_blocks > 65535 ? 65535 : (int)(wanted_blocks > 0 ? wanted_blocks : 1);

    if (n < 0)
        return -1;
    if (n == 0)
        return 0;

    if ((status = cudaMalloc((void **)&device_x, bytes)) != cudaSuccess)
        goto fail;
    if ((status = cudaMalloc((void **)&device_y, bytes)) != cudaSuccess)
        goto fail;
    if ((status = cudaMemcpy(device_x, x, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto fail;
    if ((status = cudaMemcpy(device_y, y, bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
        goto fail;
    saxpy_kernel<<<blocks, threads>>>(n, a, device_x, device_y);
    /* Launch errors surface at once; execution errors at the next sync. */
    if ((status = cudaGetLastError()) != cudaSuccess)
        goto fail;
    if ((status = cudaMemcpy(y, device_y, bytes, cudaMemcpyDeviceToHost)) != cudaSuccess)
        goto fail;

fail:
    cudaFree(device_x);
    cudaFree(device_y);
    return status == cudaSuccess ? 0 : -(int)status;
}
