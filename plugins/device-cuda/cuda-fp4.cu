/* cuda-fp4.cu — the 4-bit block kernels of the cuda plugin: NVFP4 (1x16
 * blocks or 16x16 tiles, E4M3 scales under an fp32 tensor scale) and
 * MXFP4 (E8M0 scales in the four scale modes), round to nearest even or
 * stochastic, their decode, and the random Hadamard transform; each built from the bodies of
 * cuda-fp4.cuh (libmixprec/numeric/numeric-fp4.h) so the bits are the
 * library's. NVFP4's tensor amax is an integer maximum of magnitude bits
 * (atomicMax), which does not depend on the order the threads finish in;
 * the block kernel then reads it on the same stream. */
#include "cuda-launch.h"
#include "cuda-grid.cuh"
#include "cuda-fp4.cuh"

static __global__ void
fp4_amax_kernel (const float *__restrict__ src, size_t n, uint32_t *amax_bits)
{
  uint32_t m = 0;

  MIXPREC_CUDA_FOR (i, n)
    m = mp_fp4_amax_fold (m, src[i]);
  for (int off = 16; off > 0; off /= 2)
    {
      uint32_t o = __shfl_down_sync (0xFFFFFFFFu, m, off);

      m = o > m ? o : m;
    }
  if ((threadIdx.x & 31) == 0 && m != 0)
    atomicMax (amax_bits, m);
}

/* One thread per NVFP4 block (or 16x16 tile), one per MXFP4 block: the
 * scale needs the whole block's amax before any of its elements is cast. */
static __global__ void
fp4_quantize_kernel (const float *__restrict__ src, size_t rows, size_t cols, unsigned recipe,
                     unsigned mode, int stochastic, uint64_t seed, size_t n_units,
                     const uint32_t *__restrict__ amax_bits, float *tensor_scale,
                     uint8_t *__restrict__ dst, uint8_t *__restrict__ scales)
{
  float ts = 1.0f;

  if (recipe != MIXPREC_CUDA_FP4_MXFP4)
    ts = _mixprec_nvfp4_tensor_scale (mp_fp4_amax_final (*amax_bits));
  if (tensor_scale != NULL && blockIdx.x == 0 && threadIdx.x == 0)
    *tensor_scale = ts;
  MIXPREC_CUDA_FOR (u, n_units)
    {
      if (recipe == MIXPREC_CUDA_FP4_MXFP4)
        mp_mxfp4_block1 (src, u, mode, stochastic, seed, dst, scales);
      else if (recipe == MIXPREC_CUDA_FP4_NVFP4_2D)
        mp_nvfp4_tile1 (src, rows, cols, u, ts, stochastic, seed, dst, scales);
      else
        mp_nvfp4_block1 (src, u, ts, stochastic, seed, dst, scales);
    }
}

static __global__ void
fp4_dequantize_kernel (const uint8_t *__restrict__ src, const uint8_t *__restrict__ scales,
                       const float *__restrict__ tensor_scale, size_t n, int mx, float *__restrict__ dst)
{
  float ts = tensor_scale != NULL ? *tensor_scale : 1.0f;

  MIXPREC_CUDA_FOR (i, n)
    mp_fp4_dequantize1 (src, scales, ts, mx, i, dst);
}

/* One thread per group of 16: the butterflies stay in its registers. */
static __global__ void
rht_kernel (const float *src, size_t n_groups, uint16_t sign_mask, int inverse, float *dst)
{
  MIXPREC_CUDA_FOR (g, n_groups)
    mp_rht_group1 (src, g, sign_mask, inverse, dst);
}

extern "C" cudaError_t
_mixprec_cuda_fp4_quantize (int recipe, int scale_mode, const float *src, size_t rows, size_t cols,
                            int stochastic, uint64_t seed, uint8_t *dst, uint8_t *scales,
                            uint32_t *amax_bits, float *tensor_scale, cudaStream_t stream,
                            const char **call)
{
  size_t n = rows * cols, units = mp_fp4_units ((unsigned) recipe, rows, cols);
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  if (recipe != MIXPREC_CUDA_FP4_MXFP4)
    {
      if ((e = cudaMemsetAsync (amax_bits, 0, sizeof *amax_bits, stream)) != cudaSuccess)
        {
          *call = "cudaMemsetAsync";
          return e;
        }
      if ((e = mixprec_cuda_grid (n, &blocks, call)) != cudaSuccess)
        return e;
      fp4_amax_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (src, n, amax_bits);
      if ((e = mixprec_cuda_launched ("fp4_amax_kernel", call)) != cudaSuccess)
        return e;
    }
  if ((e = mixprec_cuda_grid (units, &blocks, call)) != cudaSuccess)
    return e;
  fp4_quantize_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (
    src, rows, cols, (unsigned) recipe, (unsigned) scale_mode, stochastic, seed, units,
    recipe != MIXPREC_CUDA_FP4_MXFP4 ? amax_bits : NULL, tensor_scale, dst, scales);
  return mixprec_cuda_launched ("fp4_quantize_kernel", call);
}

extern "C" cudaError_t
_mixprec_cuda_fp4_dequantize (int recipe, const uint8_t *src, const uint8_t *scales,
                              const float *tensor_scale, size_t n, float *dst, cudaStream_t stream,
                              const char **call)
{
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  if ((e = mixprec_cuda_grid (n, &blocks, call)) != cudaSuccess)
    return e;
  fp4_dequantize_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (
    src, scales, recipe == MIXPREC_CUDA_FP4_MXFP4 ? NULL : tensor_scale, n,
    recipe == MIXPREC_CUDA_FP4_MXFP4, dst);
  return mixprec_cuda_launched ("fp4_dequantize_kernel", call);
}

extern "C" cudaError_t
_mixprec_cuda_rht (const float *src, size_t n, uint16_t sign_mask, int inverse, float *dst,
                   cudaStream_t stream, const char **call)
{
  unsigned blocks;
  cudaError_t e;

  if (n == 0)
    return cudaSuccess;
  if ((e = mixprec_cuda_grid (n / _MIXPREC_RHT_GROUP, &blocks, call)) != cudaSuccess)
    return e;
  rht_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> (src, n / _MIXPREC_RHT_GROUP, sign_mask,
                                                           inverse, dst);
  return mixprec_cuda_launched ("rht_kernel", call);
}
