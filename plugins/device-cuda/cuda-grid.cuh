/* cuda-grid.cuh — launch geometry of the element-wise kernels: blocks of
 * 256 threads, grid-stride loops, and at most enough blocks to fill every
 * SM (2048 resident threads each on sm_80 and sm_90), so large arrays
 * reuse threads instead of paying for millions of tiny blocks. */
#pragma once

#include <cuda_runtime.h>

#define MIXPREC_CUDA_THREADS 256

static inline cudaError_t
mixprec_cuda_grid (size_t       work,
                   unsigned    *blocks,
                   const char **call)
{
  int device, sms;
  cudaError_t e;
  size_t want = (work + MIXPREC_CUDA_THREADS - 1) / MIXPREC_CUDA_THREADS;
  size_t cap;

  if ((e = cudaGetDevice (&device)) != cudaSuccess)
    {
      *call = "cudaGetDevice";
      return e;
    }
  if ((e = cudaDeviceGetAttribute (&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
    {
      *call = "cudaDeviceGetAttribute (multiProcessorCount)";
      return e;
    }
  cap = (size_t) sms * (2048 / MIXPREC_CUDA_THREADS);
  *blocks = (unsigned) (want < 1 ? 1 : want < cap ? want : cap);
  return cudaSuccess;
}

/* The launch's own error (bad configuration, no kernel image for this GPU). */
static inline cudaError_t
mixprec_cuda_launched (const char  *kernel,
                       const char **call)
{
  cudaError_t e = cudaGetLastError ();

  if (e != cudaSuccess)
    *call = kernel;
  return e;
}

/* Grid-stride loop over [0, n). */
#define MIXPREC_CUDA_FOR(i, n) \
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (size_t) gridDim.x * blockDim.x)
