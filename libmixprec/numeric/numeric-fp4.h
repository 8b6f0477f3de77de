/* numeric-fp4.h — one value at a time: fp32 to and from FP4 E2M1 (round to
 * nearest even or stochastic) and the block scales of the 4-bit recipes:
 * NVFP4 (an E4M3 scale per block of 16 under an fp32 per-tensor scale) and
 * MXFP4 (an E8M0 scale per block of 32, in torchao's four scale modes).
 *
 * The element conversion is integer arithmetic, as in numeric-dtype.h.
 * The scale arithmetic follows torchao's emulation (to_mx() and
 * nvfp4_quantize() of torchao.prototype.mx_formats) operation by
 * operation, because a block's bytes depend on how each fp32 quotient was
 * rounded: every division and product below is one IEEE fp32 operation
 * rounded to nearest even, as torch's are on the CPU. */
#pragma once

#include "numeric-fp8.h"

/* E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit; no Inf, no NaN.
 * Magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; code 7 (6.0) is the largest. */
#define _MIXPREC_E2M1_MAX_CODE 7u
#define _MIXPREC_E2M1_MAX 6.0f
/* fp32 biased exponent of E2M1's smallest normal (1.0). */
#define _MIXPREC_E2M1_EMIN_B 127u
/* emax_elem of the OCP MX specification: 2^2 <= 6 < 2^3. */
#define _MIXPREC_E2M1_EMAX 2

/* 448 * 6: the divisor that turns a tensor's amax into NVFP4's per-tensor
 * scale, so that the block holding the amax gets the E4M3 scale 448. */
#define _MIXPREC_NVFP4_TENSOR_DIVISOR 2688.0f
/* The E4M3 block scales are clamped to [2^-6, 448] before their cast:
 * 2^-6 is E4M3's smallest normal (torch.finfo's tiny). */
#define _MIXPREC_NVFP4_SCALE_MIN_BITS 0x3C800000u

/* ------------------------------------------------------------ E2M1 elements
 *
 * Codes are 4 bits, the sign in bit 3. E2M1 has no NaN: a NaN becomes the
 * code torchao's bit-level cast gives it, which reads a NaN as a normal
 * number (its exponent and mantissa shifted into E2M1's field); for the
 * NaN 0x7FC00000 that is 3 (1.5), and never more than 4 for any NaN.
 * Saturating: |x| >= 6 and ±Inf give ±6 (code 7). */

MIXPREC_NUMERIC_FN uint32_t
_mixprec_e2m1_nan_code (uint32_t a)
{
  uint32_t r = a - ((127u - 1u) << 23);

  return ((r + ((1u << 21) - 1) + ((r >> 22) & 1)) >> 22) & 0xFFu;
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e2m1_rne (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 28) & 0x8;
  uint32_t a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (uint8_t) (sign | _mixprec_e2m1_nan_code (a));
  if (a >= 0x40C00000)          /* 6.0 and above, Inf included */
    return (uint8_t) (sign | _MIXPREC_E2M1_MAX_CODE);
  return (uint8_t) (sign | _mixprec_num_min32 (_mixprec_round_rne_bits (a, 1, _MIXPREC_E2M1_EMIN_B),
                                               _MIXPREC_E2M1_MAX_CODE));
}

/* Stochastic rounding with the random word @r (one per element, as for
 * the float8 formats): below 0.5 the result is 0.5 with probability
 * |x| / 0.5; values beyond 6 saturate as in the RNE cast. */
MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e2m1_sr (float    f,
                         uint32_t r)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 28) & 0x8;
  uint32_t a = u & 0x7FFFFFFF;

  if (a > 0x7F800000 || a >= 0x40C00000)
    return _mixprec_f32_to_e2m1_rne (f);
  return (uint8_t) (sign | _mixprec_num_min32 (_mixprec_round_sr_bits (a, r, 1, _MIXPREC_E2M1_EMIN_B),
                                               _MIXPREC_E2M1_MAX_CODE));
}

MIXPREC_NUMERIC_FN float
_mixprec_e2m1_to_f32 (uint8_t code)
{
  /* m * 2^(e-1) with the hidden bit for e > 0; exact in fp32. */
  uint32_t e = (code >> 1) & 0x3;
  uint32_t m = code & 0x1;
  float v = e == 0 ? (float) m * 0.5f : (float) (2 + m) * (float) (1u << e) * 0.25f;

  return (code & 0x8) != 0 ? -v : v;
}

/* ------------------------------------------------------------ MXFP4 scales
 *
 * The four scale modes of torchao's ScaleCalculationMode, for E2M1
 * elements. FLOOR, CEIL and EVEN read the exponent field of the block's
 * amax (bits, sign clear; NaN when the block holds one, as torch.amax
 * propagates it); RCEIL takes ceil(log2(amax / 6)). */

#define _MIXPREC_MX4_FLOOR 0
#define _MIXPREC_MX4_RCEIL 1
#define _MIXPREC_MX4_CEIL 2
#define _MIXPREC_MX4_EVEN 3

/* The base-2 logarithm rounded once to fp32, then its ceiling. log2 of a
 * double is exact to far below an fp32 ulp, so the fp32 rounding of the
 * double result is the correctly rounded fp32 log2 (what torch's
 * vectorised log2 returns on these arguments). */
MIXPREC_NUMERIC_FN int32_t
_mixprec_ceil_log2f (float d)
{
  return (int32_t) ceilf ((float) log2 ((double) d));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_mx4_scale_byte (uint32_t amax_bits,
                         unsigned mode)
{
  int32_t e;

  if (amax_bits > 0x7F800000)
    return (uint8_t) _MIXPREC_E8M0_NAN;
  if (mode == _MIXPREC_MX4_RCEIL)
    {
      float d = _mixprec_num_div (_mixprec_f32_from_bits (amax_bits), _MIXPREC_E2M1_MAX);

      if (_mixprec_f32_bits (d) == 0x7F800000)
        return 254;
      if (_mixprec_f32_bits (d) == 0)
        return 0;
      e = _mixprec_ceil_log2f (d);
      e = e < -127 ? -127 : e > 127 ? 127 : e;
      return (uint8_t) (e + _MIXPREC_E8M0_BIAS);
    }
  if (mode == _MIXPREC_MX4_EVEN)
    amax_bits = (amax_bits + (1u << (23 - 1 - 1))) & 0xFF800000u;
  e = (int32_t) ((amax_bits >> 23) & 0xFF) - 127;
  if (mode == _MIXPREC_MX4_CEIL && (amax_bits & 0x7FFFFF) != 0)
    e += 1;
  e -= _MIXPREC_E2M1_EMAX;
  e = e < -127 ? -127 : e > 128 ? 128 : e;
  return (uint8_t) (e + _MIXPREC_E8M0_BIAS);
}

/* What a block's elements are scaled by before their cast. FLOOR, CEIL
 * and EVEN divide by 2^(byte - 127), raised to 2^-126 for byte 0 (torchao
 * keeps the divisor a normal fp32), Inf for the NaN byte; RCEIL
 * multiplies by 2^(127 - byte), 1 for byte 0 and 2^-127 for 254, then
 * clamps to ±6 (_mixprec_nvfp4_scaled()). This returns that divisor
 * (FLOOR, CEIL, EVEN) or multiplier (RCEIL; NaN for the NaN byte). */
MIXPREC_NUMERIC_FN float
_mixprec_mx4_block_factor (uint8_t  e,
                           unsigned mode)
{
  if (mode == _MIXPREC_MX4_RCEIL)
    {
      if (e == 0)
        return 1.0f;
      if (e == 254)
        return _mixprec_f32_from_bits (0x00400000);
      if (e == _MIXPREC_E8M0_NAN)
        return _mixprec_f32_from_bits (0x7FC00000);
      return _mixprec_f32_from_bits ((uint32_t) (254 - e) << 23);
    }
  if (e == 0)
    return _mixprec_f32_from_bits (0x00800000);
  return _mixprec_f32_from_bits ((uint32_t) e << 23);
}

/* ------------------------------------------------------------ NVFP4 scales
 *
 * Two-level scaling: the per-tensor fp32 scale is amax / (448 * 6); a
 * block's E4M3 scale is the RNE cast of ((block amax / 6) / tensor scale)
 * clamped to [2^-6, 448]; its elements are multiplied by
 * ((1 / tensor scale) / decoded block scale) and clamped to ±6. */

MIXPREC_NUMERIC_FN float
_mixprec_nvfp4_tensor_scale (uint32_t amax_bits)
{
  return _mixprec_num_div (_mixprec_f32_from_bits (amax_bits), _MIXPREC_NVFP4_TENSOR_DIVISOR);
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_nvfp4_scale_byte (uint32_t block_amax_bits,
                           float    tensor_scale)
{
  float s = _mixprec_num_div (_mixprec_num_div (_mixprec_f32_from_bits (block_amax_bits),
                                                _MIXPREC_E2M1_MAX),
                              tensor_scale);
  uint32_t a = _mixprec_f32_bits (s) & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return _mixprec_f32_to_e4m3_rne (s);
  /* clamp (s, 2^-6, 448); s is never negative but may be -0 */
  if ((_mixprec_f32_bits (s) & 0x80000000) != 0 || a < _MIXPREC_NVFP4_SCALE_MIN_BITS)
    return _mixprec_f32_to_e4m3_rne (_mixprec_f32_from_bits (_MIXPREC_NVFP4_SCALE_MIN_BITS));
  if (a > _MIXPREC_E4M3_MAX_BITS)
    return 0x7E;
  return _mixprec_f32_to_e4m3_rne (s);
}

/* An E4M3 block scale as torch decodes it: its NaN (which a block gets
 * only when the tensor scale is 0 or NaN, e.g. for an all-zero tensor)
 * becomes sign | 0x7FF00000, the NaN that then reaches every element of
 * the block and decides its E2M1 code. */
MIXPREC_NUMERIC_FN float
_mixprec_nvfp4_scale_to_f32 (uint8_t scale_byte)
{
  if ((scale_byte & 0x7F) == 0x7F)
    return _mixprec_f32_from_bits (((uint32_t) (scale_byte & 0x80) << 24) | 0x7FF00000u);
  return _mixprec_e4m3_to_f32 (scale_byte);
}

MIXPREC_NUMERIC_FN float
_mixprec_nvfp4_block_factor (uint8_t scale_byte,
                             float   tensor_scale)
{
  return _mixprec_num_div (_mixprec_num_div (1.0f, tensor_scale), _mixprec_nvfp4_scale_to_f32 (scale_byte));
}

MIXPREC_NUMERIC_FN float
_mixprec_nvfp4_scaled (float x,
                       float factor)
{
  /* A NaN x gives itself, quieted, as a product with any other factor
   * does: were the factor a NaN too, which of the two a product returns
   * depends on the operands' order, and compilers may swap them. */
  uint32_t xb = _mixprec_f32_bits (x);
  float y = (xb & 0x7FFFFFFFu) > 0x7F800000u ? _mixprec_f32_from_bits (xb | 0x00400000u)
                                             : _mixprec_num_mul (x, factor);

  if (y > _MIXPREC_E2M1_MAX)
    y = _MIXPREC_E2M1_MAX;
  else if (y < -_MIXPREC_E2M1_MAX)
    y = -_MIXPREC_E2M1_MAX;
  return y;
}

/* ------------------------------------------------------------ decoding
 *
 * What a block's scale byte multiplies its decoded elements by, as
 * torchao's dequantisers compute it: NVFP4: tensor scale * E4M3 value
 * (one fp32 product); MXFP4: 2^(byte - 127) (2^-127 a subnormal), NaN
 * for 0xFF. */

MIXPREC_NUMERIC_FN float
_mixprec_nvfp4_decode_scale (uint8_t scale_byte,
                             float   tensor_scale)
{
  return _mixprec_num_mul (tensor_scale, _mixprec_nvfp4_scale_to_f32 (scale_byte));
}

MIXPREC_NUMERIC_FN float
_mixprec_mx4_decode_scale (uint8_t e)
{
  return _mixprec_e8m0_decode (e);
}
