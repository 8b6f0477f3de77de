/* cuda-fp4.cuh — the per-block and per-element bodies of the 4-bit block
 * kernels of cuda-fp4.cu (NVFP4 in 1x16 blocks and 16x16 tiles, MXFP4 in
 * torchao's four scale modes) and of the random Hadamard transform that
 * NVFP4 training applies first: libmixprec/numeric/numeric-fp4.h and
 * numeric-rht.h, the
 * library's scalar reference, behind the kernels' indexing, with the
 * element order and the stochastic-rounding stream of
 * mixprec_quantize_blocks() (element i of the row-major matrix takes word
 * i of the seed's stream). All __host__ __device__, so test-device-cuda
 * runs them on the CPU of a machine without a GPU
 * (tests/cuda-host-kernels.cu) and compares them with the library bit for
 * bit. */
#pragma once

#include <stdint.h>
#include <stddef.h>

#include "numeric/numeric-fp4.h"
#include "numeric/numeric-rht.h"

#define MP_FP4_HD static __host__ __device__ __forceinline__

/* What an element goes through before its cast, as in
 * mixprec-fp4-private.h: x / factor (MXFP4 FLOOR, CEIL, EVEN), or
 * x * factor clamped to ±6 (MXFP4 RCEIL, NVFP4). */
#define MP_FP4_DIV 1u
#define MP_FP4_MUL_CLAMP 2u

#define MP_NVFP4_BLOCK 16
#define MP_MXFP4_BLOCK 32

/* The units of work of a quantisation, one thread each: NVFP4 blocks
 * (recipe 0), NVFP4 16x16 tiles (1) or MXFP4 blocks (2), numbered
 * row-major. */
MP_FP4_HD size_t
mp_fp4_units (unsigned recipe,
              size_t   rows,
              size_t   cols)
{
  if (recipe == 2)
    return rows * cols / MP_MXFP4_BLOCK;
  if (recipe == 1)
    return (rows + MP_NVFP4_BLOCK - 1) / MP_NVFP4_BLOCK * (cols / MP_NVFP4_BLOCK);
  return rows * cols / MP_NVFP4_BLOCK;
}

/* The running amax of magnitudes as fp32 bits: an integer maximum, so
 * the order the threads fold in does not matter; a NaN's bits lie above
 * every number's. */
MP_FP4_HD uint32_t
mp_fp4_amax_fold (uint32_t m,
                  float    x)
{
  uint32_t a = _mixprec_f32_bits (x) & 0x7FFFFFFFu;

  return a > m ? a : m;
}

/* Any NaN amax as the one NaN torch.amax gives. */
MP_FP4_HD uint32_t
mp_fp4_amax_final (uint32_t m)
{
  return m > 0x7F800000u ? 0x7FC00000u : m;
}

MP_FP4_HD uint32_t
mp_fp4_amax_run (const float *__restrict__ src,
                 size_t                    start,
                 size_t                    len)
{
  uint32_t m = 0;

  for (size_t k = 0; k < len; k++)
    m = mp_fp4_amax_fold (m, src[start + k]);
  return mp_fp4_amax_final (m);
}

MP_FP4_HD uint8_t
mp_fp4_cast1 (unsigned op,
              float    factor,
              float    x,
              int      stochastic,
              uint64_t seed,
              uint64_t index)
{
  float y = op == MP_FP4_DIV ? _mixprec_num_div (x, factor) : _mixprec_nvfp4_scaled (x, factor);

  return stochastic ? _mixprec_f32_to_e2m1_sr (y, _mixprec_sr_bits (seed, index))
                    : _mixprec_f32_to_e2m1_rne (y);
}

/* Elements [start, start + len) (start and len even) cast and packed two
 * a byte, element 2j in the low nibble. */
MP_FP4_HD void
mp_fp4_cast_run (unsigned                  op,
                 float                     factor,
                 const float *__restrict__ src,
                 size_t                    start,
                 size_t                    len,
                 int                       stochastic,
                 uint64_t                  seed,
                 uint8_t *__restrict__     dst)
{
  for (size_t k = 0; k < len; k += 2)
    {
      size_t i = start + k;
      uint8_t lo = mp_fp4_cast1 (op, factor, src[i], stochastic, seed, i);
      uint8_t hi = mp_fp4_cast1 (op, factor, src[i + 1], stochastic, seed, i + 1);

      dst[i / 2] = (uint8_t) (lo | (hi << 4));
    }
}

/* NVFP4 1x16 block b under the tensor scale @ts: its E4M3 scale and its
 * eight bytes. */
MP_FP4_HD void
mp_nvfp4_block1 (const float *__restrict__ src,
                 size_t                    b,
                 float                     ts,
                 int                       stochastic,
                 uint64_t                  seed,
                 uint8_t *__restrict__     dst,
                 uint8_t *__restrict__     scales)
{
  size_t start = b * MP_NVFP4_BLOCK;
  uint8_t e = _mixprec_nvfp4_scale_byte (mp_fp4_amax_run (src, start, MP_NVFP4_BLOCK), ts);

  scales[b] = e;
  mp_fp4_cast_run (MP_FP4_MUL_CLAMP, _mixprec_nvfp4_block_factor (e, ts), src, start, MP_NVFP4_BLOCK,
                   stochastic, seed, dst);
}

/* NVFP4 16x16 tile t of a @rows x @cols matrix, tiles numbered row-major
 * (cols / 16 a row of tiles; the last row of tiles may be shorter): one
 * amax and one scale, written for each of the tile's rows so that the
 * scales keep the 1x16 layout. */
MP_FP4_HD void
mp_nvfp4_tile1 (const float *__restrict__ src,
                size_t                    rows,
                size_t                    cols,
                size_t                    t,
                float                     ts,
                int                       stochastic,
                uint64_t                  seed,
                uint8_t *__restrict__     dst,
                uint8_t *__restrict__     scales)
{
  size_t bpr = cols / MP_NVFP4_BLOCK;
  size_t r0 = t / bpr * MP_NVFP4_BLOCK;
  size_t cb = t % bpr;
  size_t r1 = rows - r0 < MP_NVFP4_BLOCK ? rows : r0 + MP_NVFP4_BLOCK;
  uint32_t m = 0;
  uint8_t e;
  float f;

  for (size_t r = r0; r < r1; r++)
    {
      uint32_t a = mp_fp4_amax_run (src, r * cols + cb * MP_NVFP4_BLOCK, MP_NVFP4_BLOCK);

      m = a > m ? a : m;
    }
  e = _mixprec_nvfp4_scale_byte (m, ts);
  f = _mixprec_nvfp4_block_factor (e, ts);
  for (size_t r = r0; r < r1; r++)
    {
      scales[r * bpr + cb] = e;
      mp_fp4_cast_run (MP_FP4_MUL_CLAMP, f, src, r * cols + cb * MP_NVFP4_BLOCK, MP_NVFP4_BLOCK,
                       stochastic, seed, dst);
    }
}

/* MXFP4 block b of 32 under @mode (_MIXPREC_MX4_FLOOR...): its E8M0
 * scale and its sixteen bytes. */
MP_FP4_HD void
mp_mxfp4_block1 (const float *__restrict__ src,
                 size_t                    b,
                 unsigned                  mode,
                 int                       stochastic,
                 uint64_t                  seed,
                 uint8_t *__restrict__     dst,
                 uint8_t *__restrict__     scales)
{
  size_t start = b * MP_MXFP4_BLOCK;
  uint8_t e = _mixprec_mx4_scale_byte (mp_fp4_amax_run (src, start, MP_MXFP4_BLOCK), mode);

  scales[b] = e;
  mp_fp4_cast_run (mode == _MIXPREC_MX4_RCEIL ? MP_FP4_MUL_CLAMP : MP_FP4_DIV,
                   _mixprec_mx4_block_factor (e, mode), src, start, MP_MXFP4_BLOCK, stochastic, seed, dst);
}

/* Decode of element i: its E2M1 value times its block's factor, one fp32
 * product (mixprec_dequantize_blocks()). @mx: MXFP4 (E8M0 scales in
 * blocks of 32), else NVFP4 (E4M3 in blocks of 16 under @ts). */
MP_FP4_HD void
mp_fp4_dequantize1 (const uint8_t *__restrict__ src,
                    const uint8_t *__restrict__ scales,
                    float                       ts,
                    int                         mx,
                    size_t                      i,
                    float *__restrict__         dst)
{
  uint8_t code = (uint8_t) ((src[i / 2] >> (4 * (i & 1))) & 0xF);
  float f = mx ? _mixprec_mx4_decode_scale (scales[i / MP_MXFP4_BLOCK])
               : _mixprec_nvfp4_decode_scale (scales[i / MP_NVFP4_BLOCK], ts);

  dst[i] = _mixprec_num_mul (_mixprec_e2m1_to_f32 (code), f);
}

/* The random Hadamard transform of group g (16 values) of @src into
 * @dst (mixprec_rht_apply()); @dst may be @src. */
MP_FP4_HD void
mp_rht_group1 (const float *src,
               size_t       g,
               uint16_t     sign_mask,
               int          inverse,
               float       *dst)
{
  _mixprec_rht16 (src + g * _MIXPREC_RHT_GROUP, sign_mask, inverse, dst + g * _MIXPREC_RHT_GROUP);
}
