/* numeric-dtype.h — one value at a time: fp32 to and from the narrow
 * formats (float16, bfloat16, float8 e4m3fn and e5m2; round to nearest
 * even or stochastic) and the random bits of stochastic rounding. The
 * reference that the library's scalar kernels, the cpu optimizer plugins
 * and the cuda plugin's kernels all compile from these same lines (see
 * numeric-base.h), and that every SIMD kernel reproduces bit for bit.
 * Integer arithmetic only, so no result depends on MXCSR (flush-to-zero,
 * denormals-are-zero) or on the GPU's float modes. */
#pragma once

#include "numeric-base.h"

MIXPREC_NUMERIC_FN uint32_t
_mixprec_num_min32 (uint32_t a,
                    uint32_t b)
{
  return a < b ? a : b;
}

MIXPREC_NUMERIC_FN uint64_t
_mixprec_num_min64 (uint64_t a,
                    uint64_t b)
{
  return a < b ? a : b;
}

/* ------------------------------------------------------------ rounding
 *
 * A narrow format is described by its number of mantissa bits @man_bits and
 * by @emin_b, the fp32 biased exponent of its smallest normal number (113
 * for fp16 and e5m2, 121 for e4m3, 1 for bf16). Its magnitude bits are
 * (biased exponent << man_bits | mantissa), the exponent field of its
 * smallest normal being 1, so fp32 exponent e maps to field e - emin_b + 1.
 */

/* Rounds the finite fp32 magnitude @a (sign bit clear) to nearest, ties to
 * even. Returns the format's magnitude bits; a result above the format's
 * largest finite pattern means overflow, which the caller maps to its
 * format's Inf or NaN. Integer arithmetic only, so the result does not
 * depend on MXCSR (flush-to-zero, denormals-are-zero). */
MIXPREC_NUMERIC_FN uint32_t
_mixprec_round_rne_bits (uint32_t a,
                         unsigned   man_bits,
                         uint32_t emin_b)
{
  uint32_t e = a >> 23;
  unsigned d = 23 - man_bits;

  if (e >= emin_b)
    {
      uint32_t r = a - ((emin_b - 1) << 23);

      /* A carry out of the mantissa bumps the exponent: still right. */
      return (r + ((1u << (d - 1)) - 1) + ((r >> d) & 1)) >> d;
    }
  else
    {
      /* Below the format's normal range the quantum is fixed: shift the
       * full significand (fp32 subnormals have no hidden bit) so that one
       * unit is the format's smallest subnormal. */
      uint32_t sig = e != 0 ? (a & 0x7FFFFF) | 0x800000 : a;
      unsigned shift = d + emin_b - (e > 1 ? e : 1);

      if (shift > 24)
        return 0;               /* below half the smallest subnormal */
      return (sig + ((1u << (shift - 1)) - 1) + ((sig >> shift) & 1)) >> shift;
    }
}

/* Stochastic rounding of the finite fp32 magnitude @a with random bits @r.
 *
 * d is the number of fp32 mantissa bits the format drops at this value:
 * 23 - man_bits in its normal range, more below it so that the randomness
 * always spans exactly one unit in the last place of the format. When
 * d <= 23, the low d bits of @r are added to @a and the low d bits of the
 * sum cleared: the result is the neighbour above with probability equal to
 * the dropped fraction, and is exactly representable, so the final
 * conversion rounds nothing. Below the smallest subnormal s (d > 23) the
 * result is s with probability |x| / s, decided by comparing all 32 bits of
 * @r with that probability scaled by 2^32 and truncated (a bias below
 * 2^-32 s), else zero. */
MIXPREC_NUMERIC_FN uint32_t
_mixprec_round_sr_bits (uint32_t a,
                        uint32_t r,
                        unsigned   man_bits,
                        uint32_t emin_b)
{
  uint32_t e = a >> 23;
  uint32_t e1 = (e > 1 ? e : 1);
  unsigned d = 23 - man_bits + (e1 < emin_b ? emin_b - e1 : 0);

  if (d <= 23)
    {
      uint32_t mask = (1u << d) - 1;

      return _mixprec_round_rne_bits ((a + (r & mask)) & ~mask, man_bits, emin_b);
    }
  else
    {
      uint32_t sig = e != 0 ? (a & 0x7FFFFF) | 0x800000 : a;
      uint32_t threshold;

      if (d <= 32)
        threshold = sig << (32 - d);
      else if (d < 64)
        threshold = sig >> (d - 32);
      else
        threshold = 0;
      return r < threshold ? 1 : 0;
    }
}

/* ------------------------------------------------------------ bfloat16 */

MIXPREC_NUMERIC_FN float
_mixprec_bf16_to_f32 (uint16_t b)
{
  return _mixprec_f32_from_bits ((uint32_t) b << 16);
}

/* Round to nearest even; subnormals kept; NaN stays NaN, made quiet, with
 * its sign and the top of its payload. */
MIXPREC_NUMERIC_FN uint16_t
_mixprec_f32_to_bf16_rne (float f)
{
  uint32_t u = _mixprec_f32_bits (f);

  if ((u & 0x7FFFFFFF) > 0x7F800000)
    return (uint16_t) ((u >> 16) | 0x0040);
  return (uint16_t) ((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* llm.c's rule: add 16 random bits below the kept ones, truncate. bf16 has
 * fp32's exponent range, so d is 16 everywhere, subnormals included. */
MIXPREC_NUMERIC_FN uint16_t
_mixprec_f32_to_bf16_sr (float  f,
                         uint32_t r)
{
  uint32_t u = _mixprec_f32_bits (f);

  if ((u & 0x7FFFFFFF) >= 0x7F800000)
    return _mixprec_f32_to_bf16_rne (f);
  return (uint16_t) ((u + (r & 0xFFFF)) >> 16);
}

/* ------------------------------------------------------------ float16 */

/* Matches F16C's VCVTPH2PS, which quiets signalling NaNs. */
MIXPREC_NUMERIC_FN float
_mixprec_f16_to_f32 (uint16_t h)
{
  uint32_t sign = (uint32_t) (h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1F;
  uint32_t m = h & 0x3FF;

  if (e == 0x1F)
    return _mixprec_f32_from_bits (sign | 0x7F800000 | (m != 0 ? 0x400000 | (m << 13) : 0));
  if (e == 0)
    {
      /* m * 2^-24 is an fp32 normal (or zero): exact, whatever MXCSR says. */
      float v = (float) m * 0x1p-24f;

      return sign != 0 ? -v : v;
    }
  return _mixprec_f32_from_bits (sign | ((e + 112) << 23) | (m << 13));
}

/* IEEE round to nearest even, gradual underflow, overflow to Inf. NaN as
 * F16C's VCVTPS2PH: sign | 0x7E00 | the top ten payload bits. */
MIXPREC_NUMERIC_FN uint16_t
_mixprec_f32_to_f16_rne (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (uint16_t) (sign | 0x7E00 | ((a >> 13) & 0x3FF));
  return (uint16_t) (sign | _mixprec_num_min32 (_mixprec_round_rne_bits (a, 10, 113), 0x7C00));
}

MIXPREC_NUMERIC_FN uint16_t
_mixprec_f32_to_f16_sr (float  f,
                        uint32_t r)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return _mixprec_f32_to_f16_rne (f);
  return (uint16_t) (sign | _mixprec_num_min32 (_mixprec_round_sr_bits (a, r, 10, 113), 0x7C00));
}

/* ------------------------------------------------------------ float8 e4m3
 *
 * The "fn" variant: no infinities, S.1111.111 is NaN, max 448. Overflow and
 * ±Inf give NaN (the OCP non-saturating conversion; numeric-fp8.h has the
 * saturating one), NaN gives sign | 0x7F.
 */

MIXPREC_NUMERIC_FN float
_mixprec_e4m3_to_f32 (uint8_t b)
{
  uint32_t sign = (uint32_t) (b & 0x80) << 24;
  uint32_t e = (b >> 3) & 0xF;
  uint32_t m = b & 0x7;

  if (e == 0xF && m == 0x7)
    return _mixprec_f32_from_bits (sign | 0x7FC00000);
  if (e == 0)
    {
      float v = (float) m * 0x1p-9f;

      return sign != 0 ? -v : v;
    }
  return _mixprec_f32_from_bits (sign | ((e + 120) << 23) | (m << 20));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_e4m3_finish (uint32_t sign,
                      uint32_t bits)
{
  return (uint8_t) ((sign >> 24) | (bits > 0x7E ? 0x7F : bits));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e4m3_rne (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return (uint8_t) (((u >> 24) & 0x80) | 0x7F);
  return _mixprec_e4m3_finish (u & 0x80000000, _mixprec_round_rne_bits (a, 3, 121));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e4m3_sr (float  f,
                         uint32_t r)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return _mixprec_f32_to_e4m3_rne (f);
  return _mixprec_e4m3_finish (u & 0x80000000, _mixprec_round_sr_bits (a, r, 3, 121));
}

/* ------------------------------------------------------------ float8 e5m2
 *
 * IEEE-like: the top byte of an fp16. Overflow and ±Inf give ±Inf, NaN
 * gives sign | 0x7F.
 */

MIXPREC_NUMERIC_FN float
_mixprec_e5m2_to_f32 (uint8_t b)
{
  return _mixprec_f16_to_f32 ((uint16_t) ((uint16_t) b << 8));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e5m2_rne (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t sign = (u >> 24) & 0x80;
  uint32_t a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (uint8_t) (sign | 0x7F);
  return (uint8_t) (sign | _mixprec_num_min32 (_mixprec_round_rne_bits (a, 2, 113), 0x7C));
}

MIXPREC_NUMERIC_FN uint8_t
_mixprec_f32_to_e5m2_sr (float  f,
                         uint32_t r)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return _mixprec_f32_to_e5m2_rne (f);
  return (uint8_t) (((u >> 24) & 0x80) | _mixprec_num_min32 (_mixprec_round_sr_bits (a, r, 2, 113), 0x7C));
}

/* ------------------------------------------------------------ random bits
 *
 * The bits for element @index of a tensor are a hash of (seed, index): a
 * counter-based stream, so a result never depends on how the work was split
 * across threads, SIMD lanes or calls. The seed and the high half of the
 * index make a 64-bit key (two splitmix64 finalisers, computed once per 2^32
 * elements); the low half of the index goes through two lowbias32 rounds
 * (Wellons' hash-prospector constants), with half of the key mixed in
 * before each, so streams of different seeds are not shifted or permuted
 * copies of each other. Four 32-bit multiplies per 32-bit word: cheap in
 * 8-lane AVX2.
 *
 * float16 and the float8 formats take one whole word per element (element
 * i: word i), since below their normal range they can use all 32 bits.
 * bfloat16 only ever uses 16 bits per element, so it takes half a word:
 * element i gets 16-bit unit i of the word stream read as little-endian
 * 16-bit units, i.e. the low half of word i / 2 for even i and its high
 * half for odd i (_mixprec_sr_bits16()). That halves the hashing of the
 * conversion that matters most. For a fixed key the word hash is a
 * bijection of the word index, so over each block of 2^32 words every
 * (low, high) pair of halves occurs exactly once: the two elements that
 * share a word are as independent as two uniform 16-bit draws.
 */

MIXPREC_NUMERIC_FN uint64_t
_mixprec_sr_mix64 (uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

MIXPREC_NUMERIC_FN uint64_t
_mixprec_sr_key (uint64_t seed,
                 uint32_t index_hi)
{
  return _mixprec_sr_mix64 (_mixprec_sr_mix64 (seed + 0x9E3779B97F4A7C15ull) ^ index_hi);
}

MIXPREC_NUMERIC_FN uint32_t
_mixprec_sr_round32 (uint32_t x)
{
  x ^= x >> 16;
  x *= 0x21F0AAADu;
  x ^= x >> 15;
  x *= 0xD35A2D97u;
  x ^= x >> 15;
  return x;
}

MIXPREC_NUMERIC_FN uint32_t
_mixprec_sr_bits_keyed (uint64_t key,
                        uint32_t index_lo)
{
  return _mixprec_sr_round32 (_mixprec_sr_round32 (index_lo ^ (uint32_t) key) + (uint32_t) (key >> 32));
}

MIXPREC_NUMERIC_FN uint32_t
_mixprec_sr_bits (uint64_t seed,
                  uint64_t index)
{
  return _mixprec_sr_bits_keyed (_mixprec_sr_key (seed, (uint32_t) (index >> 32)), (uint32_t) index);
}

/* How many of @n elements starting at @index share its key, i.e. lie
 * before the next multiple of 2^32. */
MIXPREC_NUMERIC_FN size_t
_mixprec_sr_run_length (uint64_t index,
                        size_t   n)
{
  uint64_t left = (1ull << 32) - (uint32_t) index;

  return (size_t) _mixprec_num_min64 ((uint64_t) n, left);
}

/* The 16 random bits of bfloat16 element @index: half (@index & 1) of
 * word @index / 2, whose key is _mixprec_sr_key (seed, @index >> 33). */
MIXPREC_NUMERIC_FN uint32_t
_mixprec_sr_half_keyed (uint64_t key,
                        uint64_t index)
{
  return (_mixprec_sr_bits_keyed (key, (uint32_t) (index >> 1)) >> ((unsigned) (index & 1) * 16)) & 0xFFFF;
}

MIXPREC_NUMERIC_FN uint32_t
_mixprec_sr_bits16 (uint64_t seed,
                    uint64_t index)
{
  return (_mixprec_sr_bits (seed, index >> 1) >> ((unsigned) (index & 1) * 16)) & 0xFFFF;
}

/* How many of @n bfloat16 elements starting at @index share its key, i.e.
 * lie before the next multiple of 2^33 (two elements per word). */
MIXPREC_NUMERIC_FN size_t
_mixprec_sr_run_length16 (uint64_t index,
                          size_t   n)
{
  uint64_t left = (1ull << 33) - (index & ((1ull << 33) - 1));

  return (size_t) _mixprec_num_min64 ((uint64_t) n, left);
}
