/* numeric-fp8.h — one value at a time: the scaled float8 casts of FP8
 * training (a per-tensor scale, saturating or not, and the amax the next
 * scale is computed from) and the microscaling (OCP MX v1.0) block
 * scales in E8M0. Built on the round-to-nearest-even conversions of
 * numeric-dtype.h and compiled by the C compiler and by nvcc from these
 * same lines (see numeric-base.h); the AVX2 and AVX-512 kernels of
 * mixprec-fp8-avx2.c / -avx512.c reproduce them bit for bit.
 *
 * Everything but the one multiply of a value by its scale is integer
 * arithmetic. That multiply is an IEEE fp32 product rounded to nearest
 * even, as torch's `x * scale` is; like every fp32 operation of the CPU it
 * follows MXCSR, which in a default process keeps subnormals. */
#pragma once

#include "numeric-dtype.h"

/* fp32 bit patterns of the largest finite values: 448 and 57344. */
#define _MIXPREC_E4M3_MAX_BITS 0x43E00000u
#define _MIXPREC_E5M2_MAX_BITS 0x47600000u

/* The largest exponent of an element's normal range (emax_elem of the
 * OCP MX specification): 2^8 <= 448 < 2^9, 2^15 <= 57344 < 2^16. */
#define _MIXPREC_E4M3_EMAX 8
#define _MIXPREC_E5M2_EMAX 15

/* E8M0: an exponent biased by 127; 0xFF is NaN. */
#define _MIXPREC_E8M0_BIAS 127
#define _MIXPREC_E8M0_NAN 0xFFu

/* A float8 format: 0 for e4m3 (fn: max 448, no Inf), 1 for e5m2. */
#define _MIXPREC_FP8_E4M3 0
#define _MIXPREC_FP8_E5M2 1

MIXPREC_NUMERIC_FN float
_mixprec_num_mul (float a,
                  float b)
{
#ifdef __CUDA_ARCH__
  return __fmul_rn (a, b);
#else
  return a * b;
#endif
}

/* ------------------------------------------------------------ saturating casts
 *
 * torch's `x.clamp(-max, max).to(float8)`: finite values beyond the largest
 * finite one and ±Inf give ±max; NaN stays NaN (sign | 0x7F, as the
 * non-saturating casts of numeric-dtype.h give it). */

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e4m3_sat (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 24) & 0x80;
  uint32_t a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (uint8_t) (sign | 0x7F);
  if (a >= _MIXPREC_E4M3_MAX_BITS)
    return (uint8_t) (sign | 0x7E);
  return (uint8_t) (sign | _mixprec_round_rne_bits (a, 3, 121));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e5m2_sat (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 24) & 0x80;
  uint32_t a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (uint8_t) (sign | 0x7F);
  if (a >= _MIXPREC_E5M2_MAX_BITS)
    return (uint8_t) (sign | 0x7B);
  return (uint8_t) (sign | _mixprec_round_rne_bits (a, 2, 113));
}

/* ------------------------------------------------------------ scaled cast
 *
 * The float8 byte of @x * @scale (one fp32 product, rounded to nearest
 * even) in @format, rounded to nearest even. @saturate: as
 * _mixprec_f32_to_e4m3_sat(); otherwise torch's `.to(float8)`: overflow
 * and ±Inf give NaN in e4m3, ±Inf in e5m2. */
MIXPREC_NUMERIC_FN uint8_t
_mixprec_fp8_cast (unsigned format,
                   int      saturate,
                   float    x,
                   float    scale)
{
  uint32_t u = _mixprec_f32_bits (x);
  float y;

  /* NaN in, NaN out with its sign, whatever NaN the multiply would make
   * (x86 keeps the operand's sign; a GPU may give its canonical NaN). */
  if ((u & 0x7FFFFFFF) > 0x7F800000)
    return (uint8_t) (((u >> 24) & 0x80) | 0x7F);
  y = _mixprec_num_mul (x, scale);

  if (format == _MIXPREC_FP8_E4M3)
    return saturate ? _mixprec_f32_to_e4m3_sat (y) : _mixprec_f32_to_e4m3_rne (y);
  return saturate ? _mixprec_f32_to_e5m2_sat (y) : _mixprec_f32_to_e5m2_rne (y);
}

MIXPREC_NUMERIC_FN float
_mixprec_fp8_to_f32 (unsigned format,
                     uint8_t  b)
{
  return format == _MIXPREC_FP8_E4M3 ? _mixprec_e4m3_to_f32 (b) : _mixprec_e5m2_to_f32 (b);
}

/* ------------------------------------------------------------ amax
 *
 * A running maximum of magnitudes kept as fp32 bits: non-negative floats
 * order as their bit patterns, so the comparison is an integer one and
 * does not depend on MXCSR. NaN inputs are skipped (as fmaxf skips them);
 * ±Inf counts (0x7F800000). */
MIXPREC_NUMERIC_FN uint32_t
_mixprec_fp8_amax_bits (uint32_t running,
                        float    x)
{
  uint32_t a = _mixprec_f32_bits (x) & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return running;
  return a > running ? a : running;
}

/* ------------------------------------------------------------ MX (E8M0 scales)
 *
 * OCP Microscaling Formats (MX) v1.0, section 6.3, with the FLOOR rule
 * (torchao's default): a block's shared exponent is
 * floor(log2(amax)) - emax_elem, clamped to the E8M0 range [-127, 127].
 * floor(log2(amax)) is read from the exponent field of amax, as torchao
 * does: exact for normal values; zero and fp32 subnormals give -127, which
 * the clamp makes -127 either way; an Inf amax gives 128. A block holding
 * NaN gets the NaN scale 0xFF. */

MIXPREC_NUMERIC_FN int32_t
_mixprec_mx_shared_exp (uint32_t amax_bits,
                        unsigned format)
{
  int32_t e = (int32_t) (amax_bits >> 23) - 127;

  e -= format == _MIXPREC_FP8_E4M3 ? _MIXPREC_E4M3_EMAX : _MIXPREC_E5M2_EMAX;
  if (e < -127)
    e = -127;
  if (e > 127)
    e = 127;
  return e;
}

/* The E8M0 byte of a block whose non-NaN magnitudes have the maximum
 * @amax_bits (see _mixprec_fp8_amax_bits()); @has_nan: the block holds a
 * NaN. */
MIXPREC_NUMERIC_FN uint8_t
_mixprec_mx_scale_byte (uint32_t amax_bits,
                        int      has_nan,
                        unsigned format)
{
  if (has_nan)
    return (uint8_t) _MIXPREC_E8M0_NAN;
  return (uint8_t) (_mixprec_mx_shared_exp (amax_bits, format) + _MIXPREC_E8M0_BIAS);
}

/* The scale modes of torchao's ScaleCalculationMode (MixprecMxScaleMode's
 * values) for float8 elements. FLOOR is _mixprec_mx_scale_byte(); CEIL
 * adds one to FLOOR's exponent unless the amax is a power of two; EVEN
 * takes FLOOR of the amax first rounded to the element's mantissa bits
 * (3 for E4M3, 2 for E5M2; ties away from zero, an add to the fp32 bits);
 * RCEIL is ceil(log2(amax / max_elem)) (448 or 57344), each step an fp32
 * operation, 0 for an amax of 0 and 127 for one whose quotient overflows.
 * Clamped to [-127, 127] as FLOOR is; a block holding NaN gets 0xFF. */
#define _MIXPREC_MX_MODE_FLOOR 0
#define _MIXPREC_MX_MODE_RCEIL 1
#define _MIXPREC_MX_MODE_CEIL 2
#define _MIXPREC_MX_MODE_EVEN 3

MIXPREC_NUMERIC_FN uint8_t
_mixprec_mx_scale_byte_mode (uint32_t amax_bits,
                             int      has_nan,
                             unsigned format,
                             unsigned mode)
{
  int32_t e;

  if (has_nan)
    return (uint8_t) _MIXPREC_E8M0_NAN;
  if (mode == _MIXPREC_MX_MODE_RCEIL)
    {
      float d = _mixprec_num_div (_mixprec_f32_from_bits (amax_bits),
                                  _mixprec_f32_from_bits (format == _MIXPREC_FP8_E4M3
                                                          ? _MIXPREC_E4M3_MAX_BITS
                                                          : _MIXPREC_E5M2_MAX_BITS));

      if (_mixprec_f32_bits (d) == 0x7F800000)
        return 254;
      if (_mixprec_f32_bits (d) == 0)
        return 0;
      /* log2 of a double is far more precise than an fp32 ulp: its fp32
       * rounding is the correctly rounded fp32 log2. */
      e = (int32_t) ceilf ((float) log2 ((double) d));
      e = e < -127 ? -127 : e > 127 ? 127 : e;
      return (uint8_t) (e + _MIXPREC_E8M0_BIAS);
    }
  if (mode == _MIXPREC_MX_MODE_EVEN)
    amax_bits = (amax_bits + (1u << (23 - (format == _MIXPREC_FP8_E4M3 ? 3 : 2) - 1))) & 0xFF800000u;
  /* torchao's order: the exponent field, CEIL's step, emax, the clamp. */
  e = (int32_t) ((amax_bits >> 23) & 0xFF) - 127;
  if (mode == _MIXPREC_MX_MODE_CEIL && (amax_bits & 0x7FFFFF) != 0)
    e += 1;
  e -= format == _MIXPREC_FP8_E4M3 ? _MIXPREC_E4M3_EMAX : _MIXPREC_E5M2_EMAX;
  e = e < -127 ? -127 : e > 127 ? 127 : e;
  return (uint8_t) (e + _MIXPREC_E8M0_BIAS);
}

/* 2^(e - 127) for the byte e, 2^-127 being an fp32 subnormal; NaN for 0xFF. */
MIXPREC_NUMERIC_FN float
_mixprec_e8m0_decode (uint8_t e)
{
  if (e == _MIXPREC_E8M0_NAN)
    return _mixprec_f32_from_bits (0x7FC00000);
  if (e == 0)
    return _mixprec_f32_from_bits (0x00400000);
  return _mixprec_f32_from_bits ((uint32_t) e << 23);
}

/* What the elements of a block with scale byte @e are multiplied by before
 * their saturating cast: 1 / 2^(e - 127) = 2^(127 - e), a normal fp32 for
 * every byte a block gets (0 .. 247; at most 128 - emax_elem + 127), so
 * the product is the correctly rounded quotient x / 2^(e - 127) (254
 * gives the subnormal 2^-127). The NaN
 * scale gives 0, i.e. x / Inf as torchao computes it: finite values become
 * ±0, Inf and NaN become NaN. */
MIXPREC_NUMERIC_FN float
_mixprec_mx_inv_scale (uint8_t e)
{
  if (e == _MIXPREC_E8M0_NAN)
    return 0.0f;
  if (e == 254)
    return _mixprec_f32_from_bits (0x00400000);
  return _mixprec_f32_from_bits ((uint32_t) (254 - e) << 23);
}

/* One element of an MX block: the saturating cast of @x * @inv_scale. In
 * a block with the NaN scale (@inv_scale 0) ±Inf gives NaN with its sign,
 * spelled out because Inf * 0 is a NaN whose sign differs between x86 and
 * GPUs. */
MIXPREC_NUMERIC_FN uint8_t
_mixprec_mx_cast (unsigned format,
                  float    x,
                  float    inv_scale)
{
  uint32_t u = _mixprec_f32_bits (x);

  if ((u & 0x7FFFFFFF) == 0x7F800000 && _mixprec_f32_bits (inv_scale) == 0)
    return (uint8_t) (((u >> 24) & 0x80) | 0x7F);
  return _mixprec_fp8_cast (format, 1, x, inv_scale);
}

/* One element decoded: its float8 value times the block's scale, one
 * fp32 product (exact unless it leaves the normal range). */
MIXPREC_NUMERIC_FN float
_mixprec_mx_decode (unsigned format,
                    uint8_t  b,
                    uint8_t  e)
{
  return _mixprec_num_mul (_mixprec_fp8_to_f32 (format, b), _mixprec_e8m0_decode (e));
}
