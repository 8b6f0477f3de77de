/* cuda-dtype.cuh — libmixprec/mixprec-dtype-private.h for the GPU: fp32 to
 * and from the narrow formats and the random bits of stochastic rounding,
 * line for line the same integer arithmetic, so every kernel of the cuda
 * plugin produces the bits of the library's CPU kernels. Any change to
 * that header must be mirrored here (tests/test-device-cuda compares the
 * two bitwise). */
#pragma once

#include <stdint.h>

#define CUDA_DTYPE_F(name) static __device__ __forceinline__ name

CUDA_DTYPE_F (uint32_t) mp_f32_bits (float f) { return __float_as_uint (f); }
CUDA_DTYPE_F (float) mp_f32_from_bits (uint32_t u) { return __uint_as_float (u); }

/* ------------------------------------------------------------ rounding */

/* _mixprec_round_rne_bits: @a a finite fp32 magnitude; @emin_b the fp32
 * biased exponent of the format's smallest normal. */
CUDA_DTYPE_F (uint32_t)
mp_round_rne_bits (uint32_t a, unsigned man_bits, uint32_t emin_b)
{
  uint32_t e = a >> 23;
  unsigned d = 23 - man_bits;

  if (e >= emin_b)
    {
      uint32_t r = a - ((emin_b - 1) << 23);

      return (r + ((1u << (d - 1)) - 1) + ((r >> d) & 1)) >> d;
    }
  else
    {
      uint32_t sig = e != 0 ? (a & 0x7FFFFF) | 0x800000 : a;
      unsigned shift = d + emin_b - (e > 1 ? e : 1);

      if (shift > 24)
        return 0;
      return (sig + ((1u << (shift - 1)) - 1) + ((sig >> shift) & 1)) >> shift;
    }
}

/* _mixprec_round_sr_bits. */
CUDA_DTYPE_F (uint32_t)
mp_round_sr_bits (uint32_t a, uint32_t r, unsigned man_bits, uint32_t emin_b)
{
  uint32_t e = a >> 23;
  uint32_t e1 = e > 1 ? e : 1;
  unsigned d = 23 - man_bits + (e1 < emin_b ? emin_b - e1 : 0);

  if (d <= 23)
    {
      uint32_t mask = (1u << d) - 1;

      return mp_round_rne_bits ((a + (r & mask)) & ~mask, man_bits, emin_b);
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

CUDA_DTYPE_F (float) mp_bf16_to_f32 (uint16_t b) { return mp_f32_from_bits ((uint32_t) b << 16); }

CUDA_DTYPE_F (uint16_t)
mp_f32_to_bf16_rne (float f)
{
  uint32_t u = mp_f32_bits (f);

  if ((u & 0x7FFFFFFF) > 0x7F800000)
    return (uint16_t) ((u >> 16) | 0x0040);
  return (uint16_t) ((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

CUDA_DTYPE_F (uint16_t)
mp_f32_to_bf16_sr (float f, uint32_t r)
{
  uint32_t u = mp_f32_bits (f);

  if ((u & 0x7FFFFFFF) >= 0x7F800000)
    return mp_f32_to_bf16_rne (f);
  return (uint16_t) ((u + (r & 0xFFFF)) >> 16);
}

/* ------------------------------------------------------------ float16 */

CUDA_DTYPE_F (float)
mp_f16_to_f32 (uint16_t h)
{
  uint32_t sign = (uint32_t) (h & 0x8000) << 16;
  uint32_t e = (h >> 10) & 0x1F;
  uint32_t m = h & 0x3FF;

  if (e == 0x1F)
    return mp_f32_from_bits (sign | 0x7F800000 | (m != 0 ? 0x400000 | (m << 13) : 0));
  if (e == 0)
    {
      /* Exact: m < 2^10 scaled by a power of two; no rounding to differ. */
      float v = __fmul_rn ((float) m, 0x1p-24f);

      return sign != 0 ? -v : v;
    }
  return mp_f32_from_bits (sign | ((e + 112) << 23) | (m << 13));
}

CUDA_DTYPE_F (uint16_t)
mp_f32_to_f16_rne (float f)
{
  uint32_t u = mp_f32_bits (f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7FFFFFFF;
  uint32_t bits;

  if (a > 0x7F800000)
    return (uint16_t) (sign | 0x7E00 | ((a >> 13) & 0x3FF));
  bits = mp_round_rne_bits (a, 10, 113);
  return (uint16_t) (sign | (bits < 0x7C00 ? bits : 0x7C00));
}

CUDA_DTYPE_F (uint16_t)
mp_f32_to_f16_sr (float f, uint32_t r)
{
  uint32_t u = mp_f32_bits (f);
  uint32_t sign = (u >> 16) & 0x8000;
  uint32_t a = u & 0x7FFFFFFF;
  uint32_t bits;

  if (a >= 0x7F800000)
    return mp_f32_to_f16_rne (f);
  bits = mp_round_sr_bits (a, r, 10, 113);
  return (uint16_t) (sign | (bits < 0x7C00 ? bits : 0x7C00));
}

/* ------------------------------------------------------------ float8 e4m3fn */

CUDA_DTYPE_F (float)
mp_e4m3_to_f32 (uint8_t b)
{
  uint32_t sign = (uint32_t) (b & 0x80) << 24;
  uint32_t e = (b >> 3) & 0xF;
  uint32_t m = b & 0x7;

  if (e == 0xF && m == 0x7)
    return mp_f32_from_bits (sign | 0x7FC00000);
  if (e == 0)
    {
      float v = __fmul_rn ((float) m, 0x1p-9f);

      return sign != 0 ? -v : v;
    }
  return mp_f32_from_bits (sign | ((e + 120) << 23) | (m << 20));
}

CUDA_DTYPE_F (uint8_t)
mp_e4m3_finish (uint32_t sign, uint32_t bits)
{
  return (uint8_t) ((sign >> 24) | (bits > 0x7E ? 0x7F : bits));
}

CUDA_DTYPE_F (uint8_t)
mp_f32_to_e4m3_rne (float f)
{
  uint32_t u = mp_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return (uint8_t) (((u >> 24) & 0x80) | 0x7F);
  return mp_e4m3_finish (u & 0x80000000, mp_round_rne_bits (a, 3, 121));
}

CUDA_DTYPE_F (uint8_t)
mp_f32_to_e4m3_sr (float f, uint32_t r)
{
  uint32_t u = mp_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return mp_f32_to_e4m3_rne (f);
  return mp_e4m3_finish (u & 0x80000000, mp_round_sr_bits (a, r, 3, 121));
}

/* ------------------------------------------------------------ float8 e5m2 */

CUDA_DTYPE_F (float) mp_e5m2_to_f32 (uint8_t b) { return mp_f16_to_f32 ((uint16_t) ((uint16_t) b << 8)); }

CUDA_DTYPE_F (uint8_t)
mp_f32_to_e5m2_rne (float f)
{
  uint32_t u = mp_f32_bits (f);
  uint32_t sign = (u >> 24) & 0x80;
  uint32_t a = u & 0x7FFFFFFF;
  uint32_t bits;

  if (a > 0x7F800000)
    return (uint8_t) (sign | 0x7F);
  bits = mp_round_rne_bits (a, 2, 113);
  return (uint8_t) (sign | (bits < 0x7C ? bits : 0x7C));
}

CUDA_DTYPE_F (uint8_t)
mp_f32_to_e5m2_sr (float f, uint32_t r)
{
  uint32_t u = mp_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFF;
  uint32_t bits;

  if (a >= 0x7F800000)
    return mp_f32_to_e5m2_rne (f);
  bits = mp_round_sr_bits (a, r, 2, 113);
  return (uint8_t) (((u >> 24) & 0x80) | (bits < 0x7C ? bits : 0x7C));
}

/* ------------------------------------------------------------ random bits
 * _mixprec_sr_bits: a hash of (seed, index); the key depends on the seed
 * and the high half of the index only, so a thread handling consecutive
 * elements computes it once. */

CUDA_DTYPE_F (uint64_t)
mp_sr_mix64 (uint64_t z)
{
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

CUDA_DTYPE_F (uint64_t)
mp_sr_key (uint64_t seed, uint32_t index_hi)
{
  return mp_sr_mix64 (mp_sr_mix64 (seed + 0x9E3779B97F4A7C15ull) ^ index_hi);
}

CUDA_DTYPE_F (uint32_t)
mp_sr_round32 (uint32_t x)
{
  x ^= x >> 16;
  x *= 0x21F0AAADu;
  x ^= x >> 15;
  x *= 0xD35A2D97u;
  x ^= x >> 15;
  return x;
}

CUDA_DTYPE_F (uint32_t)
mp_sr_bits_keyed (uint64_t key, uint32_t index_lo)
{
  return mp_sr_round32 (mp_sr_round32 (index_lo ^ (uint32_t) key) + (uint32_t) (key >> 32));
}

CUDA_DTYPE_F (uint32_t)
mp_sr_bits (uint64_t seed, uint64_t index)
{
  return mp_sr_bits_keyed (mp_sr_key (seed, (uint32_t) (index >> 32)), (uint32_t) index);
}

/* _mixprec_sr_bits16: bfloat16 takes 16 bits per element, the low (even
 * index) or high (odd index) half of word index / 2; its key changes every
 * 2^33 elements. */
CUDA_DTYPE_F (uint32_t)
mp_sr_half_keyed (uint64_t key, uint64_t index)
{
  return (mp_sr_bits_keyed (key, (uint32_t) (index >> 1)) >> ((unsigned) (index & 1) * 16)) & 0xFFFF;
}

CUDA_DTYPE_F (uint32_t)
mp_sr_bits16 (uint64_t seed, uint64_t index)
{
  return (mp_sr_bits (seed, index >> 1) >> ((unsigned) (index & 1) * 16)) & 0xFFFF;
}

/* ------------------------------------------------------------ by dtype
 * Element types as template parameters: DT is a MixprecPluginDType. */

template <int DT> struct MpType;
template <> struct MpType<0> { typedef float T; };
template <> struct MpType<1> { typedef uint16_t T; };
template <> struct MpType<2> { typedef uint16_t T; };
template <> struct MpType<3> { typedef uint8_t T; };
template <> struct MpType<4> { typedef uint8_t T; };

template <int DT>
static __device__ __forceinline__ float
mp_to_f32 (typename MpType<DT>::T v)
{
  if constexpr (DT == 0)
    return v;
  else if constexpr (DT == 1)
    return mp_f16_to_f32 (v);
  else if constexpr (DT == 2)
    return mp_bf16_to_f32 (v);
  else if constexpr (DT == 3)
    return mp_e4m3_to_f32 (v);
  else
    return mp_e5m2_to_f32 (v);
}

template <int DT>
static __device__ __forceinline__ typename MpType<DT>::T
mp_from_f32_rne (float f)
{
  if constexpr (DT == 0)
    return f;
  else if constexpr (DT == 1)
    return mp_f32_to_f16_rne (f);
  else if constexpr (DT == 2)
    return mp_f32_to_bf16_rne (f);
  else if constexpr (DT == 3)
    return mp_f32_to_e4m3_rne (f);
  else
    return mp_f32_to_e5m2_rne (f);
}

template <int DT>
static __device__ __forceinline__ typename MpType<DT>::T
mp_from_f32_sr (float f, uint32_t r)
{
  if constexpr (DT == 0)
    return f;
  else if constexpr (DT == 1)
    return mp_f32_to_f16_sr (f, r);
  else if constexpr (DT == 2)
    return mp_f32_to_bf16_sr (f, r);
  else if constexpr (DT == 3)
    return mp_f32_to_e4m3_sr (f, r);
  else
    return mp_f32_to_e5m2_sr (f, r);
}
