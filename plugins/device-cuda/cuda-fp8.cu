/* cuda-fp8.cu — the float8 cast kernels of the cuda plugin: the scaled
 * cast with its amax, its decode, and MX block quantisation, each built
 * from the element bodies of cuda-fp8.cuh (libmixprec/numeric/numeric-fp8.h)
 * so the bits are the library's. The amax is an integer maximum of
 * magnitude bits (atomicMax), which does not depend on the order the
 * threads finish in. */
#include "cuda-launch.h"
#include "cuda-grid.cuh"
#include "cuda-fp8.cuh"

static __global__ void
fp8_quantize_kernel (const float *__restrict__ src, uint8_t *__restrict__ dst, size_t n,
                     unsigned format, int saturate, float scale, uint32_t *amax_bits)
{
  uint32_t m = 0;

  MIXPREC_CUDA_FOR (i, n)
    {
      /* No @dst: the amax pass of current scaling (device ABI 1.3). */
      uint32_t a = dst != NULL ? mp_fp8_quantize1 (src, dst, i, format, saturate, scale)
                               : _mixprec_fp8_amax_bits (0, src[i]);

      m = a > m ? a : m;
    }
  if (amax_bits == NULL)
    return;
  for (int off = 16; off > 0; off /= 2)
    {
      uint32_t o = __shfl_down_sync (0xFFFFFFFFu, m, off);

      m = o > m ? o : m;
    }
  if ((threadIdx.x & 31) == 0 && m != 0)
    atomicMax (amax_bits, m);
}

static __global__ void
fp8_dequantize_kernel (const uint8_t *__restrict__ src, float *__restrict__ dst, size_t n,
                       unsigned format, float scale_inv)
{
  MIXPREC_CUDA_FOR (i, n)
    mp_fp8_dequantize1 (src, dst, i, format, scale_inv);
}

/* One thread per MX block: a block is 32 elements, so the reads of a
 * warp are strided by 128 bytes, but every byte of the block's lines is
 * used by the same thread on the next iterations (L1). */
static __global__ void
mx_quantize_kernel (const float *__restrict__ src, size_t n, unsigned format, unsigned block_size,
                    size_t n_blocks, uint8_t *__restrict__ dst, uint8_t *__restrict__ scales)
{
  MIXPREC_CUDA_FOR (b, n_blocks)
    mp_mx_block1 (src, n, format, block_size, b, dst, scales);
}

static __global__ void
mx_dequantize_kernel (const uint8_t *__restrict__ src, const uint8_t *__restrict__ scales,
                      float *__restrict__ dst, size_t n, unsigned format, unsigned block_size)
{
  MIXPREC_CUDA_FOR (i, n)
    mp_mx_dequantize1 (src, scales, dst, i, format, block_size);
}

extern "C" cudaError_t
_mixprec_cuda_fp8_quantize (const float *src, uint8_t *dst, size_t n, int format, int saturate,
                            float scale, uint32_t *amax_bits, cudaStream_t stream, const char **call)
{
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  if ((e = mixprec_cuda_grid (n, &blocks, call)) != cudaSuccess)
    return e;
  fp8_quantize_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (src, dst, n, (unsigned) format,
                                                                    saturate, scale, amax_bits);
  return mixprec_cuda_launched ("fp8_quantize_kernel", call);
}

extern "C" cudaError_t
_mixprec_cuda_fp8_dequantize (const uint8_t *src, float *dst, size_t n, int format, float scale_inv,
                              cudaStream_t stream, const char **call)
{
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  if ((e = mixprec_cuda_grid (n, &blocks, call)) != cudaSuccess)
    return e;
  fp8_dequantize_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (src, dst, n, (unsigned) format,
                                                                      scale_inv);
  return mixprec_cuda_launched ("fp8_dequantize_kernel", call);
}

extern "C" cudaError_t
_mixprec_cuda_mx_quantize (const float *src, size_t n, int format, unsigned block_size, uint8_t *dst,
                           uint8_t *scales, cudaStream_t stream, const char **call)
{
  size_t n_blocks;
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  n_blocks = n / block_size + (n % block_size != 0);
  if ((e = mixprec_cuda_grid (n_blocks, &blocks, call)) != cudaSuccess)
    return e;
  mx_quantize_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (src, n, (unsigned) format, block_size,
                                                                   n_blocks, dst, scales);
  return mixprec_cuda_launched ("mx_quantize_kernel", call);
}

extern "C" cudaError_t
_mixprec_cuda_mx_dequantize (const uint8_t *src, const uint8_t *scales, float *dst, size_t n, int format,
                             unsigned block_size, cudaStream_t stream, const char **call)
{
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  if ((e = mixprec_cuda_grid (n, &blocks, call)) != cudaSuccess)
    return e;
  mx_dequantize_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (src, scales, dst, n, (unsigned) format,
                                                                     block_size);
  return mixprec_cuda_launched ("mx_dequantize_kernel", call);
}
