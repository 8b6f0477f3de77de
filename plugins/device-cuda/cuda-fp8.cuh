/* cuda-fp8.cuh — the per-element and per-block bodies of the float8 cast
 * kernels of cuda-fp8.cu: libmixprec/numeric/numeric-fp8.h (the library's
 * scalar reference, the same lines) behind the kernels' indexing. All
 * __host__ __device__, so tests/test-device-cuda runs them on the CPU of
 * a machine without a GPU (tests/cuda-host-kernels.cu) and compares them
 * with the library bit for bit. */
#pragma once

#include <stdint.h>
#include <stddef.h>

#include "numeric/numeric-fp8.h"

#define MP_FP8_HD static __host__ __device__ __forceinline__

/* Scaled cast of element i; returns its magnitude bits for the amax
 * (0 for NaN, which the amax skips). @format: _MIXPREC_FP8_E4M3 or
 * _MIXPREC_FP8_E5M2. */
MP_FP8_HD uint32_t
mp_fp8_quantize1 (const float *__restrict__ src, uint8_t *__restrict__ dst, size_t i,
                  unsigned format, int saturate, float scale)
{
  float x = src[i];

  dst[i] = _mixprec_fp8_cast (format, saturate, x, scale);
  return _mixprec_fp8_amax_bits (0, x);
}

/* Decode of element i times @scale_inv. */
MP_FP8_HD void
mp_fp8_dequantize1 (const uint8_t *__restrict__ src, float *__restrict__ dst, size_t i,
                    unsigned format, float scale_inv)
{
  dst[i] = _mixprec_num_mul (_mixprec_fp8_to_f32 (format, src[i]), scale_inv);
}

/* MX block b of @n elements in blocks of @block_size: its E8M0 scale and
 * its elements, one pass for the amax and one for the casts. */
MP_FP8_HD void
mp_mx_block1 (const float *__restrict__ src, size_t n, unsigned format, unsigned block_size,
              size_t b, uint8_t *__restrict__ dst, uint8_t *__restrict__ scales)
{
  size_t start = b * block_size;
  size_t len = n - start < block_size ? n - start : block_size;
  uint32_t m = 0;
  int has_nan = 0;
  float inv;

  for (size_t k = 0; k < len; k++)
    {
      float x = src[start + k];

      m = _mixprec_fp8_amax_bits (m, x);
      has_nan |= (_mixprec_f32_bits (x) & 0x7FFFFFFF) > 0x7F800000;
    }
  scales[b] = _mixprec_mx_scale_byte (m, has_nan, format);
  inv = _mixprec_mx_inv_scale (scales[b]);
  for (size_t k = 0; k < len; k++)
    dst[start + k] = _mixprec_mx_cast (format, src[start + k], inv);
}

/* MX decode of element i. */
MP_FP8_HD void
mp_mx_dequantize1 (const uint8_t *__restrict__ src, const uint8_t *__restrict__ scales,
                   float *__restrict__ dst, size_t i, unsigned format, unsigned block_size)
{
  dst[i] = _mixprec_mx_decode (format, src[i], scales[i / block_size]);
}
