/* cuda_internal.h — CUDA helpers shared by cuda_host.c, cuda_probe.cu and tests.
 *
 * Only present in builds with HAVE_CUDA. Callable from C and C++ (nvcc).
 */
#ifndef NF_CUDA_INTERNAL_H
#define NF_CUDA_INTERNAL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* y[i] = a * x[i] + y[i] for i < n, computed on the current CUDA device.
 * x and y are host arrays; y is updated in place. A smoke test that the toolkit,
 * driver and device work end to end. Returns 0, or -(cudaError_t) of the first
 * CUDA call that failed (or -1 for a negative n). */
int nf_cuda_saxpy_test(int64_t n, float a, const float *x, float *y);

#ifdef __cplusplus
}
#endif

#endif
