/* numeric-zeropp.h — the block quantizer of ZeRO++ (quantized weights,
 * "qwZ", and quantized gradients, "qgZ"), element by element as
 * DeepSpeed's CUDA kernels compute it, so that a libmixprec run and a
 * DeepSpeed run cut a tensor into the same blocks and give every block
 * the same codes and the same scale.
 *
 * Transcribed from DeepSpeed 0.19.6 (deepspeedai/DeepSpeed commit
 * edaa7221267243c7be7fb49c5d5f5c4fb97b4641): csrc/includes/
 * quantization_utils.h (Params<Symmetric>, GroupStats<Symmetric>),
 * dequantization_utils.h, csrc/quantization/quantize.cu, dequantize.cu,
 * swizzled_quantize.cu, and the group sizing of CUDAQuantizer in
 * deepspeed/runtime/zero/partition_parameters.py. What they compute, in
 * our words:
 *
 * Input. The kernels read IEEE half precision: CUDAQuantizer converts the
 * parameter to float16 first (round to nearest even, beyond 65504 to
 * infinity), so a bfloat16 or float32 weight is quantized from its fp16
 * rounding.
 *
 * Blocks ("groups"). A tensor of n elements is cut into `groups` equal
 * runs of n / groups consecutive elements. For weights the count comes
 * from n alone (_mixprec_zpp_weight_groups() below): start at
 * ceil(n / 8000), step up to the first count g with n divisible by 8 g,
 * then double g while n stays divisible by 16 g and blocks stay above
 * 8000 elements. DeepSpeed refuses (asserts) when n is not a multiple of
 * 8 g, when a block would reach 16000 elements, or when g >= n.
 *
 * Scale. absmax is the largest |x| of the block, compared in fp16 and
 * taken as a float; a NaN element does not take part (the CUDA max
 * returns the other operand). With B bits, scale = 2^B / (2 absmax), in
 * float32, and 1 when absmax is 0 (an all-zero block). What is stored
 * and sent beside the codes is its reciprocal, 1 / scale, in float32.
 *
 * Codes. q = clamp (rint (float (x) * scale), -2^(B-1), 2^(B-1) - 1):
 * round half to even (__float2int_rn), a NaN product gives 0 (PTX's
 * float-to-int conversion), and the clamp catches +absmax, which lands on
 * 2^(B-1) and becomes 2^(B-1) - 1. The range is asymmetric: -absmax
 * codes as -2^(B-1), +absmax as 2^(B-1) - 1.
 *
 * Dequantization. y = fp16 (float (q) * stored), rounded to nearest even;
 * the caller then converts the fp16 to its own dtype.
 *
 * Packing. Int4 codes go two to a byte, element 2i in the high nibble and
 * element 2i + 1 in the low one (DeepSpeed's PackedInt4 bit-field, laid
 * out by a little-endian compiler, names its first member "high" and
 * fills it with the second element), each nibble two's complement.
 *
 * Swizzle (qgZ). For a reduce-scatter through all-to-all over `nodes`
 * hosts of `devices` ranks, the groups of partition p (groups / (nodes *
 * devices) consecutive groups each) move to partition (p % devices) *
 * nodes + p / devices, so that each host's all-to-all sends contiguous
 * runs; with one host the order is unchanged.
 *
 * Dequantize-reduce-requantize (quant_reduce.cu's dequant_reduce, the
 * middle of DeepSpeed's hierarchical qgZ): n tensors of the same length,
 * each in its own input blocks; element e of the result is
 * ((+0 + d_0[e]) + d_1[e]) + ... in fp16 arithmetic (__hadd2, each
 * addition rounded to fp16), d_j the fp16 dequantization above; the sums
 * are then quantized afresh in the output blocks as above.
 *
 * Edge cases that follow from the above: an all-zero block gets scale 1
 * and codes 0, and dequantizes to zeros; a block whose fp16 image holds
 * an infinity (a value beyond fp16's range) has scale 0, stores
 * infinity, and dequantizes to NaN everywhere; an all-NaN block likewise;
 * a NaN in a finite block codes as 0 and comes back as 0. fp16
 * subnormals are exact in float32, so the device's flush-to-zero changes
 * nothing here.
 *
 * Where DeepSpeed's device can differ. DeepSpeed compiles these kernels
 * with --use_fast_math, so on a GPU its two divisions (2^B / (2 absmax)
 * and 1 / scale) are the hardware's approximate division (within 2 ulp);
 * this header divides in IEEE float32 everywhere, which is what the
 * kernels' source writes and what every backend of libmixprec reproduces.
 * A scale may therefore differ from a GPU run of DeepSpeed in its last
 * bits, and a code that sits on a rounding tie with it. The rest —
 * blocks, rounding, clamping, packing, the zero, NaN and infinity rules —
 * is the same bit for bit.
 *
 * The bound this adds to a value x of a finite block (its fp16 image h):
 * |h - y| <= stored / 2, except for the elements at +absmax, which lose
 * one whole step, stored = 2 absmax / 2^B; y then carries fp16's own
 * rounding. */
#pragma once

#include "numeric-dtype.h"
#include "numeric-fp8.h"

/* Target and hard limit of CUDAQuantizer's weight blocks. */
#define _MIXPREC_ZPP_TARGET_GROUP 8000u
#define _MIXPREC_ZPP_MAX_GROUP 16000u

/* The number of blocks DeepSpeed cuts a weight partition of @n elements
 * into, or 0 where it would refuse. */
MIXPREC_NUMERIC_FN uint64_t
_mixprec_zpp_weight_groups (uint64_t n)
{
  uint64_t g;

  if (n == 0)
    return 0;
  g = (n + _MIXPREC_ZPP_TARGET_GROUP - 1) / _MIXPREC_ZPP_TARGET_GROUP;
  while (g < n && n % (8 * g) != 0)
    g++;
  while (n % (16 * g) == 0 && n > (uint64_t) _MIXPREC_ZPP_TARGET_GROUP * g)
    g *= 2;
  if (n % (8 * g) != 0 || n >= (uint64_t) _MIXPREC_ZPP_MAX_GROUP * g || n <= g)
    return 0;
  return g;
}

/* The float32 bits of |h| for the max: fp16 compares as its magnitude
 * bits do, so the largest magnitude, NaNs left out, is the largest
 * integer below 0x7C01. Returns -1 for a NaN. */
MIXPREC_NUMERIC_FN int32_t
_mixprec_zpp_f16_mag (uint16_t h)
{
  uint16_t a = h & 0x7FFF;

  return a > 0x7C00 ? -1 : (int32_t) a;
}

/* The float32 scale (2^bits / (2 absmax), or 1) of a block whose largest
 * _mixprec_zpp_f16_mag() is @best (-1: no element was a number). */
MIXPREC_NUMERIC_FN float
_mixprec_zpp_scale_of_mag (int32_t  best,
                           unsigned bits)
{
  /* DeepSpeed's max starts from -infinity: a block of NaNs keeps it. */
  float absmax = best < 0 ? -INFINITY : _mixprec_f16_to_f32 ((uint16_t) best);

  if (absmax == 0.0f)
    return 1.0f;
  return (float) (1u << bits) / (2.0f * absmax);
}

/* The float32 scale of the @n fp16 values at @h, and in *@all_nan whether
 * no element was a number. */
MIXPREC_NUMERIC_FN float
_mixprec_zpp_block_scale (const uint16_t *h,
                          uint64_t        n,
                          unsigned        bits,
                          int            *all_nan)
{
  int32_t best = -1;

  for (uint64_t i = 0; i < n; i++)
    {
      int32_t m = _mixprec_zpp_f16_mag (h[i]);

      if (m > best)
        best = m;
    }
  *all_nan = best < 0;
  return _mixprec_zpp_scale_of_mag (best, bits);
}

/* One code: clamp (rint (float (h) * scale)) into the signed @bits range;
 * a NaN product gives 0. */
MIXPREC_NUMERIC_FN int32_t
_mixprec_zpp_code (uint16_t h,
                   float    scale,
                   unsigned bits)
{
  int32_t q_max = (1 << (bits - 1)) - 1;
  int32_t q_min = -(1 << (bits - 1));
  float v = _mixprec_f16_to_f32 (h) * scale;
  float r;

  if (v != v)
    return 0;
  r = rintf (v);
  if (r >= (float) q_max)
    return q_max;
  if (r <= (float) q_min)
    return q_min;
  return (int32_t) r;
}

/* Quantizes one block of @n fp16 values (n even for 4 bits) into @codes
 * (n bytes for 8 bits, n / 2 packed bytes for 4) and returns the stored
 * scale, 1 / scale. */
MIXPREC_NUMERIC_FN float
_mixprec_zpp_quantize_block (const uint16_t *h,
                             uint64_t        n,
                             unsigned        bits,
                             int8_t         *codes)
{
  int all_nan;
  float scale = _mixprec_zpp_block_scale (h, n, bits, &all_nan);

  if (bits == 8)
    {
      for (uint64_t i = 0; i < n; i++)
        codes[i] = (int8_t) _mixprec_zpp_code (h[i], scale, 8);
    }
  else
    {
      for (uint64_t i = 0; i + 1 < n; i += 2)
        {
          uint32_t hi = (uint32_t) _mixprec_zpp_code (h[i], scale, 4) & 0xFu;
          uint32_t lo = (uint32_t) _mixprec_zpp_code (h[i + 1], scale, 4) & 0xFu;

          codes[i / 2] = (int8_t) (uint8_t) ((hi << 4) | lo);
        }
    }
  return 1.0f / scale;
}

/* Code @i of a block quantized to @bits. */
MIXPREC_NUMERIC_FN int32_t
_mixprec_zpp_code_at (const int8_t *codes,
                      uint64_t      i,
                      unsigned      bits)
{
  uint32_t nib;

  if (bits == 8)
    return codes[i];
  nib = (i % 2 == 0) ? ((uint8_t) codes[i / 2] >> 4) : ((uint8_t) codes[i / 2] & 0xFu);
  return (int32_t) nib - (nib >= 8 ? 16 : 0);
}

/* The fp16 bits of element @i of a block: fp16 (code * stored). */
MIXPREC_NUMERIC_FN uint16_t
_mixprec_zpp_dequantize (const int8_t *codes,
                         uint64_t      i,
                         unsigned      bits,
                         float         stored)
{
  return _mixprec_f32_to_f16_rne ((float) _mixprec_zpp_code_at (codes, i, bits) * stored);
}

/* fp16 a + b rounded to nearest even, as __hadd2 adds. Through float32:
 * the sum of two fp16 values rounded to float32 and then to fp16 is the
 * correctly rounded fp16 sum (24 >= 2 * 11 + 2 bits, so the double
 * rounding is innocuous). */
MIXPREC_NUMERIC_FN uint16_t
_mixprec_zpp_f16_add (uint16_t a,
                      uint16_t b)
{
  return _mixprec_f32_to_f16_rne (_mixprec_f16_to_f32 (a) + _mixprec_f16_to_f32 (b));
}

/* Where the swizzle puts partition @p of @nodes * @devices. */
MIXPREC_NUMERIC_FN uint64_t
_mixprec_zpp_swizzle_partition (uint64_t p,
                                uint64_t nodes,
                                uint64_t devices)
{
  return (p % devices) * nodes + p / devices;
}

/* ------------------------------------------------------------ FP8 blocks
 *
 * libmixprec's FP8 choice for both collectives (mixprec.
 * quantized_weights_format and quantized_gradients_format "fp8_e4m3" or
 * "fp8_e5m2"; DeepSpeed has no counterpart). Values are read as float32,
 * with no fp16 step, so bfloat16 gradients keep their range. Each block
 * has its own current scale: mult = max / absmax (the format's largest
 * finite value, one float32 division; 1 for an all-zero block), each code
 * is the round-to-nearest-even cast of x * mult without saturation (which
 * keeps every finite value in range: absmax * mult rounds at most to the
 * largest value), and the stored scale is 1 / mult. A code decodes as
 * fp8 (code) * stored, one float32 product. NaN takes no part in absmax
 * and stays NaN; an infinite absmax gives mult 0 and stored infinity, so
 * the whole block decodes to NaN, as an overflowed int8 block does. */
MIXPREC_NUMERIC_FN float
_mixprec_zpp_fp8_mult (uint32_t amax_bits,
                       unsigned format)
{
  if (amax_bits == 0)
    return 1.0f;
  return _mixprec_num_div (_mixprec_f32_from_bits (format == _MIXPREC_FP8_E4M3 ? _MIXPREC_E4M3_MAX_BITS
                                                                                : _MIXPREC_E5M2_MAX_BITS),
                           _mixprec_f32_from_bits (amax_bits));
}

/* Quantizes the @n float32 values of a block into @codes; returns the
 * stored scale. */
MIXPREC_NUMERIC_FN float
_mixprec_zpp_fp8_quantize_block (const float *x,
                                 uint64_t     n,
                                 unsigned     format,
                                 uint8_t     *codes)
{
  uint32_t amax = 0;
  float mult;

  for (uint64_t i = 0; i < n; i++)
    amax = _mixprec_fp8_amax_bits (amax, x[i]);
  mult = _mixprec_zpp_fp8_mult (amax, format);
  for (uint64_t i = 0; i < n; i++)
    codes[i] = _mixprec_fp8_cast (format, 0, x[i], mult);
  return _mixprec_num_div (1.0f, mult);
}

/* The float32 value of one FP8 code of a block with @stored. */
MIXPREC_NUMERIC_FN float
_mixprec_zpp_fp8_dequantize (uint8_t  code,
                             unsigned format,
                             float    stored)
{
  return _mixprec_num_mul (_mixprec_fp8_to_f32 (format, code), stored);
}
