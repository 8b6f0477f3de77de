/* mixprec-avx2-private.h — 8-lane AVX2/F16C versions of the conversions in
 * mixprec-dtype-private.h, bit-identical to them for every input. Include
 * only from files compiled with -mavx2 -mf16c -mfma, and call only after
 * _mixprec_cpu_simd_level() returned _MIXPREC_SIMD_AVX2. */
#pragma once

#include <immintrin.h>
#include <glib.h>

#include "mixprec-dtype-private.h"

G_BEGIN_DECLS

#define _MIXPREC_AVX2_I32(x) _mm256_set1_epi32 ((gint32) (x))

/* Lane-wise unsigned a < b. */
static inline __m256i
_mixprec_avx2_cmplt_epu32 (__m256i a,
                           __m256i b)
{
  const __m256i bias = _MIXPREC_AVX2_I32 (0x80000000u);

  return _mm256_cmpgt_epi32 (_mm256_xor_si256 (b, bias), _mm256_xor_si256 (a, bias));
}

/* Eight 32-bit lanes holding values below 2^16 to eight 16-bit values. */
static inline __m128i
_mixprec_avx2_pack_u16 (__m256i v)
{
  return _mm_packus_epi32 (_mm256_castsi256_si128 (v), _mm256_extracti128_si256 (v, 1));
}

/* Eight 32-bit lanes holding values below 2^8 to eight bytes (low half). */
static inline __m128i
_mixprec_avx2_pack_u8 (__m256i v)
{
  __m128i w = _mixprec_avx2_pack_u16 (v);

  return _mm_packus_epi16 (w, w);
}

/* ------------------------------------------------------------ random bits */

static inline __m256i
_mixprec_avx2_sr_round32 (__m256i x)
{
  x = _mm256_xor_si256 (x, _mm256_srli_epi32 (x, 16));
  x = _mm256_mullo_epi32 (x, _MIXPREC_AVX2_I32 (0x21F0AAADu));
  x = _mm256_xor_si256 (x, _mm256_srli_epi32 (x, 15));
  x = _mm256_mullo_epi32 (x, _MIXPREC_AVX2_I32 (0xD35A2D97u));
  return _mm256_xor_si256 (x, _mm256_srli_epi32 (x, 15));
}

/* _mixprec_sr_bits_keyed() of each lane of @index_lo. */
static inline __m256i
_mixprec_avx2_sr_hash (__m256i index_lo,
                       guint64 key)
{
  __m256i x = _mixprec_avx2_sr_round32 (_mm256_xor_si256 (index_lo, _MIXPREC_AVX2_I32 ((guint32) key)));

  x = _mm256_add_epi32 (x, _MIXPREC_AVX2_I32 ((guint32) (key >> 32)));
  return _mixprec_avx2_sr_round32 (x);
}

/* _mixprec_sr_bits_keyed() for index_lo .. index_lo + 7, which must not wrap
 * past 2^32 (the key covers one block of 2^32 indices). */
static inline __m256i
_mixprec_avx2_sr_bits_keyed (guint64 key,
                             guint32 index_lo)
{
  return _mixprec_avx2_sr_hash (_mm256_add_epi32 (_MIXPREC_AVX2_I32 (index_lo),
                                                  _mm256_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7)),
                                key);
}

/* _mixprec_sr_bits() for indices @index0 .. @index0 + 7. It derives the
 * key on every call; loops over many elements can instead derive it once
 * per run of indices that share their high 32 bits (_mixprec_sr_key(),
 * _mixprec_sr_run_length()) and call _mixprec_avx2_sr_bits_keyed(), as
 * the kernels of mixprec-convert-avx2.c do. */
static inline __m256i
_mixprec_avx2_sr_bits (guint64 seed,
                       guint64 index0)
{
  guint32 lo = (guint32) index0;

  if (G_UNLIKELY (lo > G_MAXUINT32 - 7))
    {
      /* The eight indices straddle two key blocks. */
      guint32 r[8];

      for (guint i = 0; i < 8; i++)
        r[i] = _mixprec_sr_bits (seed, index0 + i);
      return _mm256_loadu_si256 ((const __m256i *) r);
    }
  return _mixprec_avx2_sr_bits_keyed (_mixprec_sr_key (seed, (guint32) (index0 >> 32)), lo);
}

/* _mixprec_sr_bits16() for bfloat16 elements @index .. @index + 7, zero
 * extended to 32-bit lanes: units o .. o + 7 (o = @index & 1) of the words
 * from @index / 2 on. */
static inline __m256i
_mixprec_avx2_sr_bits16 (guint64 seed,
                         guint64 index)
{
  __m256i words = _mixprec_avx2_sr_bits (seed, index >> 1);
  __m128i lo = _mm256_castsi256_si128 (words);

  if (index & 1)
    lo = _mm_alignr_epi8 (_mm256_extracti128_si256 (words, 1), lo, 2);
  return _mm256_cvtepu16_epi32 (lo);
}

/* ------------------------------------------------------------ rounding */

/* _mixprec_round_rne_bits() on eight finite magnitudes. */
static inline __m256i
_mixprec_avx2_round_rne_bits (__m256i a,
                              guint   man_bits,
                              guint32 emin_b)
{
  const guint d = 23 - man_bits;
  const __m128i dv = _mm_cvtsi32_si128 ((gint) d);
  const __m256i one = _MIXPREC_AVX2_I32 (1);
  __m256i e = _mm256_srli_epi32 (a, 23);
  __m256i normal = _mm256_cmpgt_epi32 (e, _MIXPREC_AVX2_I32 (emin_b - 1));
  __m256i rn, bn, sig, shift, half, bs;

  rn = _mm256_sub_epi32 (a, _MIXPREC_AVX2_I32 ((emin_b - 1) << 23));
  bn = _mm256_add_epi32 (rn, _MIXPREC_AVX2_I32 ((1u << (d - 1)) - 1));
  bn = _mm256_add_epi32 (bn, _mm256_and_si256 (_mm256_srl_epi32 (rn, dv), one));
  bn = _mm256_srl_epi32 (bn, dv);

  /* Below the normal range; a shift of 25 already gives 0, so clamp there
   * to keep the shifts in range. */
  sig = _mm256_or_si256 (_mm256_and_si256 (a, _MIXPREC_AVX2_I32 (0x7FFFFF)),
                         _mm256_and_si256 (_mm256_cmpgt_epi32 (e, _mm256_setzero_si256 ()),
                                           _MIXPREC_AVX2_I32 (0x800000)));
  shift = _mm256_sub_epi32 (_MIXPREC_AVX2_I32 (d + emin_b), _mm256_max_epi32 (e, one));
  shift = _mm256_min_epi32 (shift, _MIXPREC_AVX2_I32 (25));
  half = _mm256_sub_epi32 (_mm256_sllv_epi32 (one, _mm256_sub_epi32 (shift, one)), one);
  bs = _mm256_add_epi32 (_mm256_add_epi32 (sig, half),
                         _mm256_and_si256 (_mm256_srlv_epi32 (sig, shift), one));
  bs = _mm256_srlv_epi32 (bs, shift);

  return _mm256_blendv_epi8 (bs, bn, normal);
}

/* The dropped-bit count d of _mixprec_round_sr_bits() for eight magnitudes. */
static inline __m256i
_mixprec_avx2_sr_dropped (__m256i a,
                          guint   man_bits,
                          guint32 emin_b)
{
  __m256i e1 = _mm256_max_epi32 (_mm256_srli_epi32 (a, 23), _MIXPREC_AVX2_I32 (1));
  __m256i below = _mm256_max_epi32 (_mm256_sub_epi32 (_MIXPREC_AVX2_I32 (emin_b), e1),
                                    _mm256_setzero_si256 ());

  return _mm256_add_epi32 (below, _MIXPREC_AVX2_I32 (23 - man_bits));
}

/* The d <= 23 half of stochastic rounding: @a plus the low d bits of @r,
 * low d bits cleared; lanes where @keep is set pass unchanged. Lanes with
 * d > 23 come out as garbage and must be replaced by the caller. */
static inline __m256i
_mixprec_avx2_sr_truncate (__m256i a,
                           __m256i r,
                           __m256i d,
                           __m256i keep)
{
  __m256i mask = _mm256_sub_epi32 (_mm256_sllv_epi32 (_MIXPREC_AVX2_I32 (1), d), _MIXPREC_AVX2_I32 (1));

  r = _mm256_andnot_si256 (keep, _mm256_and_si256 (r, mask));
  mask = _mm256_andnot_si256 (keep, mask);
  return _mm256_andnot_si256 (mask, _mm256_add_epi32 (a, r));
}

/* The d > 23 half: 1 (the smallest subnormal) where r < |x| / s * 2^32. */
static inline __m256i
_mixprec_avx2_sr_tiny (__m256i a,
                       __m256i r,
                       __m256i d)
{
  __m256i e = _mm256_srli_epi32 (a, 23);
  __m256i sig = _mm256_or_si256 (_mm256_and_si256 (a, _MIXPREC_AVX2_I32 (0x7FFFFF)),
                                 _mm256_and_si256 (_mm256_cmpgt_epi32 (e, _mm256_setzero_si256 ()),
                                                   _MIXPREC_AVX2_I32 (0x800000)));
  /* Shift counts outside 0..31 give 0 in sllv/srlv, so exactly one of the
   * two shifts below contributes (both the same value when d == 32). */
  __m256i thr = _mm256_or_si256 (_mm256_sllv_epi32 (sig, _mm256_sub_epi32 (_MIXPREC_AVX2_I32 (32), d)),
                                 _mm256_srlv_epi32 (sig, _mm256_sub_epi32 (d, _MIXPREC_AVX2_I32 (32))));

  return _mm256_and_si256 (_mixprec_avx2_cmplt_epu32 (r, thr), _MIXPREC_AVX2_I32 (1));
}

/* _mixprec_round_sr_bits() on eight magnitudes; lanes holding Inf or NaN
 * give meaningless bits, to be replaced by the caller. */
static inline __m256i
_mixprec_avx2_round_sr_bits (__m256i a,
                             __m256i r,
                             guint   man_bits,
                             guint32 emin_b)
{
  __m256i d = _mixprec_avx2_sr_dropped (a, man_bits, emin_b);
  __m256i tiny = _mm256_cmpgt_epi32 (d, _MIXPREC_AVX2_I32 (23));
  /* Inf and NaN take no random bits; the caller maps them. */
  __m256i special = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F7FFFFF));
  __m256i bits;

  bits = _mixprec_avx2_sr_truncate (a, r, d, _mm256_or_si256 (tiny, special));
  bits = _mixprec_avx2_round_rne_bits (bits, man_bits, emin_b);
  if (!_mm256_testz_si256 (tiny, tiny))
    bits = _mm256_blendv_epi8 (bits, _mixprec_avx2_sr_tiny (a, r, d), tiny);
  return bits;
}

/* ------------------------------------------------------------ bfloat16 */

static inline __m256
_mixprec_avx2_bf16_to_f32 (__m128i b)
{
  return _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_cvtepu16_epi32 (b), 16));
}

/* 32-bit lanes of bf16 bits, for callers that pack two vectors at once. */
static inline __m256i
_mixprec_avx2_f32_to_bf16_rne_epi32 (__m256 x)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i nan = _mm256_cmpgt_epi32 (_mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF)),
                                    _MIXPREC_AVX2_I32 (0x7F800000));
  __m256i lsb = _mm256_and_si256 (_mm256_srli_epi32 (u, 16), _MIXPREC_AVX2_I32 (1));
  __m256i r = _mm256_add_epi32 (_mm256_add_epi32 (u, _MIXPREC_AVX2_I32 (0x7FFF)), lsb);
  __m256i q = _mm256_or_si256 (u, _MIXPREC_AVX2_I32 (0x00400000));

  return _mm256_srli_epi32 (_mm256_blendv_epi8 (r, q, nan), 16);
}

static inline __m128i
_mixprec_avx2_f32_to_bf16_rne (__m256 x)
{
  return _mixprec_avx2_pack_u16 (_mixprec_avx2_f32_to_bf16_rne_epi32 (x));
}

/* Stochastic rounding with @r16 below 2^16 (as _mixprec_avx2_sr_bits16()
 * gives), as 32-bit lanes of bf16 bits, for callers that pack two vectors
 * at once. Inf needs no care: adding at most 0xFFFF to its bits never
 * carries into the kept ones. NaN is quieted as in round to nearest. */
static inline __m256i
_mixprec_avx2_f32_to_bf16_sr16_epi32 (__m256  x,
                                      __m256i r16)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i nan = _mm256_cmpgt_epi32 (_mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF)),
                                    _MIXPREC_AVX2_I32 (0x7F800000));
  __m256i s = _mm256_blendv_epi8 (_mm256_add_epi32 (u, r16),
                                  _mm256_or_si256 (u, _MIXPREC_AVX2_I32 (0x00400000)), nan);

  return _mm256_srli_epi32 (s, 16);
}

static inline __m128i
_mixprec_avx2_f32_to_bf16_sr (__m256  x,
                              __m256i r)
{
  __m256i r16 = _mm256_and_si256 (r, _MIXPREC_AVX2_I32 (0xFFFF));

  return _mixprec_avx2_pack_u16 (_mixprec_avx2_f32_to_bf16_sr16_epi32 (x, r16));
}

/* ------------------------------------------------------------ float16 */

static inline __m256
_mixprec_avx2_f16_to_f32 (__m128i h)
{
  return _mm256_cvtph_ps (h);
}

static inline __m128i
_mixprec_avx2_f32_to_f16_rne (__m256 x)
{
  return _mm256_cvtps_ph (x, _MM_FROUND_TO_NEAREST_INT);
}

/* Truncation makes every lane exact in fp16 (or past its range, where
 * VCVTPS2PH gives Inf as required); Inf and NaN take no random bits, so
 * they convert as in round to nearest. */
static inline __m128i
_mixprec_avx2_f32_to_f16_sr (__m256  x,
                             __m256i r)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));
  __m256i special = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F7FFFFF));
  __m256i d = _mixprec_avx2_sr_dropped (a, 10, 113);
  __m256i tiny = _mm256_cmpgt_epi32 (d, _MIXPREC_AVX2_I32 (23));
  __m256i t = _mixprec_avx2_sr_truncate (u, r, d, _mm256_or_si256 (special, tiny));
  __m128i h = _mm256_cvtps_ph (_mm256_castsi256_ps (t), _MM_FROUND_TO_NEAREST_INT);

  if (!_mm256_testz_si256 (tiny, tiny))
    {
      __m256i sign = _mm256_and_si256 (_mm256_srli_epi32 (u, 16), _MIXPREC_AVX2_I32 (0x8000));
      __m256i small = _mm256_or_si256 (sign, _mixprec_avx2_sr_tiny (a, r, d));

      h = _mm_blendv_epi8 (h, _mixprec_avx2_pack_u16 (small), _mixprec_avx2_pack_u16 (_mm256_srli_epi32 (tiny, 16)));
    }
  return h;
}

/* ------------------------------------------------------------ float8 */

static inline __m256
_mixprec_avx2_e4m3_to_f32 (__m128i b8)
{
  __m256i b = _mm256_cvtepu8_epi32 (b8);
  __m256i sign = _mm256_slli_epi32 (_mm256_and_si256 (b, _MIXPREC_AVX2_I32 (0x80)), 24);
  __m256i em = _mm256_and_si256 (b, _MIXPREC_AVX2_I32 (0x7F));
  __m256i normal = _mm256_add_epi32 (_mm256_slli_epi32 (em, 20), _MIXPREC_AVX2_I32 (120 << 23));
  /* Subnormals through an exact integer-to-float conversion, so that no
   * fp32 denormal (and no MXCSR setting) is involved. */
  __m256i sub = _mm256_castps_si256 (_mm256_mul_ps (_mm256_cvtepi32_ps (em), _mm256_set1_ps (0x1p-9f)));
  __m256i is_sub = _mm256_cmpgt_epi32 (_MIXPREC_AVX2_I32 (8), em);
  __m256i is_nan = _mm256_cmpeq_epi32 (em, _MIXPREC_AVX2_I32 (0x7F));
  __m256i mag = _mm256_blendv_epi8 (normal, sub, is_sub);

  mag = _mm256_blendv_epi8 (mag, _MIXPREC_AVX2_I32 (0x7FC00000), is_nan);
  return _mm256_castsi256_ps (_mm256_or_si256 (mag, sign));
}

static inline __m256
_mixprec_avx2_e5m2_to_f32 (__m128i b8)
{
  return _mm256_cvtph_ps (_mm_unpacklo_epi8 (_mm_setzero_si128 (), b8));
}

/* Magnitude bits (8 lanes) to e4m3/e5m2 bytes, given sign and specials. */
static inline __m128i
_mixprec_avx2_e4m3_finish (__m256i u,
                           __m256i bits)
{
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));
  __m256i special = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F7FFFFF));
  __m256i sign = _mm256_and_si256 (_mm256_srli_epi32 (u, 24), _MIXPREC_AVX2_I32 (0x80));

  bits = _mm256_min_epi32 (bits, _MIXPREC_AVX2_I32 (0x7F));
  bits = _mm256_or_si256 (bits, special);
  return _mixprec_avx2_pack_u8 (_mm256_or_si256 (_mm256_and_si256 (bits, _MIXPREC_AVX2_I32 (0x7F)), sign));
}

static inline __m128i
_mixprec_avx2_e5m2_finish (__m256i u,
                           __m256i bits)
{
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));
  __m256i nan = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F800000));
  __m256i sign = _mm256_and_si256 (_mm256_srli_epi32 (u, 24), _MIXPREC_AVX2_I32 (0x80));

  /* Inf rounds past the largest finite value like any overflow. */
  bits = _mm256_min_epi32 (bits, _MIXPREC_AVX2_I32 (0x7C));
  bits = _mm256_blendv_epi8 (bits, _MIXPREC_AVX2_I32 (0x7F), nan);
  return _mixprec_avx2_pack_u8 (_mm256_or_si256 (bits, sign));
}

static inline __m128i
_mixprec_avx2_f32_to_e4m3_rne (__m256 x)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));

  return _mixprec_avx2_e4m3_finish (u, _mixprec_avx2_round_rne_bits (a, 3, 121));
}

static inline __m128i
_mixprec_avx2_f32_to_e4m3_sr (__m256  x,
                              __m256i r)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));

  return _mixprec_avx2_e4m3_finish (u, _mixprec_avx2_round_sr_bits (a, r, 3, 121));
}

static inline __m128i
_mixprec_avx2_f32_to_e5m2_rne (__m256 x)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));

  return _mixprec_avx2_e5m2_finish (u, _mixprec_avx2_round_rne_bits (a, 2, 113));
}

static inline __m128i
_mixprec_avx2_f32_to_e5m2_sr (__m256  x,
                              __m256i r)
{
  __m256i u = _mm256_castps_si256 (x);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));

  return _mixprec_avx2_e5m2_finish (u, _mixprec_avx2_round_sr_bits (a, r, 2, 113));
}

G_END_DECLS
