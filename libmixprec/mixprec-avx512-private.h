/* mixprec-avx512-private.h — 16-lane AVX-512 versions of the conversions
 * in mixprec-dtype-private.h, bit-identical to them (and to the 8-lane
 * ones of mixprec-avx2-private.h) for every input. Include only from files
 * compiled with $(MIXPREC_AVX512_CFLAGS), and call only after
 * _mixprec_cpu_simd_level() returned _MIXPREC_SIMD_AVX512.
 *
 * Every helper takes whole vectors; the kernels handle a tail shorter than
 * sixteen elements with masked loads and stores (_mixprec_avx512_mask()),
 * which neither read nor write past the end of a buffer. */
#pragma once

#include <immintrin.h>
#include <glib.h>

#include "mixprec-dtype-private.h"

G_BEGIN_DECLS

#define _MIXPREC_AVX512_I32(x) _mm512_set1_epi32 ((gint32) (x))

/* The first MIN (n, 16) lanes. */
static inline __mmask16
_mixprec_avx512_mask (gsize n)
{
  return n >= 16 ? (__mmask16) 0xFFFF : (__mmask16) ((1u << n) - 1);
}

/* ------------------------------------------------------------ random bits */

static inline __m512i
_mixprec_avx512_sr_round32 (__m512i x)
{
  x = _mm512_xor_si512 (x, _mm512_srli_epi32 (x, 16));
  x = _mm512_mullo_epi32 (x, _MIXPREC_AVX512_I32 (0x21F0AAADu));
  x = _mm512_xor_si512 (x, _mm512_srli_epi32 (x, 15));
  x = _mm512_mullo_epi32 (x, _MIXPREC_AVX512_I32 (0xD35A2D97u));
  return _mm512_xor_si512 (x, _mm512_srli_epi32 (x, 15));
}

/* _mixprec_sr_bits_keyed() of each lane of @index_lo. */
static inline __m512i
_mixprec_avx512_sr_hash (__m512i index_lo,
                         guint64 key)
{
  __m512i x = _mixprec_avx512_sr_round32 (_mm512_xor_si512 (index_lo, _MIXPREC_AVX512_I32 ((guint32) key)));

  x = _mm512_add_epi32 (x, _MIXPREC_AVX512_I32 ((guint32) (key >> 32)));
  return _mixprec_avx512_sr_round32 (x);
}

/* _mixprec_sr_bits_keyed() for index_lo .. index_lo + 15, which must not
 * wrap past 2^32 (the key covers one block of 2^32 indices). */
static inline __m512i
_mixprec_avx512_sr_bits_keyed (guint64 key,
                               guint32 index_lo)
{
  return _mixprec_avx512_sr_hash (_mm512_add_epi32 (_MIXPREC_AVX512_I32 (index_lo),
                                                    _mm512_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7,
                                                                       8, 9, 10, 11, 12, 13, 14, 15)),
                                  key);
}

/* _mixprec_sr_bits() for indices @index0 .. @index0 + 15, deriving the key
 * on each call (see _mixprec_avx2_sr_bits() for the keyed alternative). */
static inline __m512i
_mixprec_avx512_sr_bits (guint64 seed,
                         guint64 index0)
{
  guint32 lo = (guint32) index0;

  if (G_UNLIKELY (lo > G_MAXUINT32 - 15))
    {
      /* The sixteen indices straddle two key blocks. */
      guint32 r[16];

      for (guint i = 0; i < 16; i++)
        r[i] = _mixprec_sr_bits (seed, index0 + i);
      return _mm512_loadu_si512 (r);
    }
  return _mixprec_avx512_sr_bits_keyed (_mixprec_sr_key (seed, (guint32) (index0 >> 32)), lo);
}

/* _mixprec_sr_bits16() for bfloat16 elements @index .. @index + 15, zero
 * extended to 32-bit lanes. One 16-lane hash of words @index / 2 onwards
 * (nine of them are used), then each lane picks its 16-bit unit. */
static inline __m512i
_mixprec_avx512_sr_bits16 (guint64 seed,
                           guint64 index)
{
  __m512i words = _mixprec_avx512_sr_bits (seed, index >> 1);
  __m512i units = _mm512_add_epi32 (_mm512_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7,
                                                       8, 9, 10, 11, 12, 13, 14, 15),
                                    _MIXPREC_AVX512_I32 (index & 1));

  /* Unit o + j of the words to the low half of lane j; high halves zero. */
  return _mm512_maskz_permutexvar_epi16 ((__mmask32) 0x55555555, units, words);
}

/* ------------------------------------------------------------ rounding */

/* The dropped-bit count d of _mixprec_round_sr_bits() for sixteen
 * magnitudes. */
static inline __m512i
_mixprec_avx512_sr_dropped (__m512i a,
                            guint   man_bits,
                            guint32 emin_b)
{
  __m512i e1 = _mm512_max_epi32 (_mm512_srli_epi32 (a, 23), _MIXPREC_AVX512_I32 (1));
  __m512i below = _mm512_max_epi32 (_mm512_sub_epi32 (_MIXPREC_AVX512_I32 (emin_b), e1),
                                    _mm512_setzero_si512 ());

  return _mm512_add_epi32 (below, _MIXPREC_AVX512_I32 (23 - man_bits));
}

/* The d <= 23 half of stochastic rounding: @a plus the low d bits of @r,
 * low d bits cleared; lanes in @keep pass unchanged. Lanes with d > 23
 * come out as garbage and must be replaced by the caller. */
static inline __m512i
_mixprec_avx512_sr_truncate (__m512i   a,
                             __m512i   r,
                             __m512i   d,
                             __mmask16 keep)
{
  __m512i mask = _mm512_maskz_sub_epi32 ((__mmask16) ~keep,
                                         _mm512_sllv_epi32 (_MIXPREC_AVX512_I32 (1), d),
                                         _MIXPREC_AVX512_I32 (1));

  return _mm512_andnot_si512 (mask, _mm512_add_epi32 (a, _mm512_and_si512 (r, mask)));
}

/* The d > 23 half: 1 (the smallest subnormal) where r < |x| / s * 2^32. */
static inline __m512i
_mixprec_avx512_sr_tiny (__m512i a,
                         __m512i r,
                         __m512i d)
{
  __mmask16 has_exp = _mm512_test_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F800000));
  __m512i sig = _mm512_mask_or_epi32 (_mm512_and_si512 (a, _MIXPREC_AVX512_I32 (0x7FFFFF)), has_exp,
                                      _mm512_and_si512 (a, _MIXPREC_AVX512_I32 (0x7FFFFF)),
                                      _MIXPREC_AVX512_I32 (0x800000));
  /* Shift counts outside 0..31 give 0 in sllv/srlv, so exactly one of the
   * two shifts below contributes (both the same value when d == 32). */
  __m512i thr = _mm512_or_si512 (_mm512_sllv_epi32 (sig, _mm512_sub_epi32 (_MIXPREC_AVX512_I32 (32), d)),
                                 _mm512_srlv_epi32 (sig, _mm512_sub_epi32 (d, _MIXPREC_AVX512_I32 (32))));

  return _mm512_maskz_mov_epi32 (_mm512_cmplt_epu32_mask (r, thr), _MIXPREC_AVX512_I32 (1));
}

/* _mixprec_round_rne_bits() on sixteen finite magnitudes. */
static inline __m512i
_mixprec_avx512_round_rne_bits (__m512i a,
                                guint   man_bits,
                                guint32 emin_b)
{
  const guint d = 23 - man_bits;
  const __m512i one = _MIXPREC_AVX512_I32 (1);
  __m512i e = _mm512_srli_epi32 (a, 23);
  __mmask16 normal = _mm512_cmpgt_epi32_mask (e, _MIXPREC_AVX512_I32 (emin_b - 1));
  __m512i rn, bn, sig, shift, half, bs;

  rn = _mm512_sub_epi32 (a, _MIXPREC_AVX512_I32 ((emin_b - 1) << 23));
  bn = _mm512_add_epi32 (rn, _MIXPREC_AVX512_I32 ((1u << (d - 1)) - 1));
  bn = _mm512_add_epi32 (bn, _mm512_and_si512 (_mm512_srli_epi32 (rn, d), one));
  bn = _mm512_srli_epi32 (bn, d);

  /* Below the normal range; a shift of 25 already gives 0, so clamp there
   * to keep the shifts in range. */
  sig = _mm512_mask_or_epi32 (_mm512_and_si512 (a, _MIXPREC_AVX512_I32 (0x7FFFFF)),
                              _mm512_cmpgt_epi32_mask (e, _mm512_setzero_si512 ()),
                              _mm512_and_si512 (a, _MIXPREC_AVX512_I32 (0x7FFFFF)),
                              _MIXPREC_AVX512_I32 (0x800000));
  shift = _mm512_sub_epi32 (_MIXPREC_AVX512_I32 (d + emin_b), _mm512_max_epi32 (e, one));
  shift = _mm512_min_epi32 (shift, _MIXPREC_AVX512_I32 (25));
  half = _mm512_sub_epi32 (_mm512_sllv_epi32 (one, _mm512_sub_epi32 (shift, one)), one);
  bs = _mm512_add_epi32 (_mm512_add_epi32 (sig, half),
                         _mm512_and_si512 (_mm512_srlv_epi32 (sig, shift), one));
  bs = _mm512_srlv_epi32 (bs, shift);

  return _mm512_mask_mov_epi32 (bs, normal, bn);
}

/* _mixprec_round_sr_bits() on sixteen magnitudes; lanes holding Inf or NaN
 * give meaningless bits, to be replaced by the caller. */
static inline __m512i
_mixprec_avx512_round_sr_bits (__m512i a,
                               __m512i r,
                               guint   man_bits,
                               guint32 emin_b)
{
  __m512i d = _mixprec_avx512_sr_dropped (a, man_bits, emin_b);
  __mmask16 tiny = _mm512_cmpgt_epi32_mask (d, _MIXPREC_AVX512_I32 (23));
  /* Inf and NaN take no random bits; the caller maps them. */
  __mmask16 special = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F7FFFFF));
  __m512i bits;

  bits = _mixprec_avx512_sr_truncate (a, r, d, (__mmask16) (tiny | special));
  bits = _mixprec_avx512_round_rne_bits (bits, man_bits, emin_b);
  if (tiny != 0)
    bits = _mm512_mask_mov_epi32 (bits, tiny, _mixprec_avx512_sr_tiny (a, r, d));
  return bits;
}

/* ------------------------------------------------------------ bfloat16 */

static inline __m512
_mixprec_avx512_bf16_to_f32 (__m256i b)
{
  return _mm512_castsi512_ps (_mm512_slli_epi32 (_mm512_cvtepu16_epi32 (b), 16));
}

/* 32-bit lanes of bf16 bits, for callers that pack two vectors at once. */
static inline __m512i
_mixprec_avx512_f32_to_bf16_rne_epi32 (__m512 x)
{
  __m512i u = _mm512_castps_si512 (x);
  __mmask16 nan = _mm512_cmpgt_epi32_mask (_mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF)),
                                           _MIXPREC_AVX512_I32 (0x7F800000));
  __m512i lsb = _mm512_and_si512 (_mm512_srli_epi32 (u, 16), _MIXPREC_AVX512_I32 (1));
  __m512i r = _mm512_add_epi32 (_mm512_add_epi32 (u, _MIXPREC_AVX512_I32 (0x7FFF)), lsb);

  r = _mm512_mask_or_epi32 (r, nan, u, _MIXPREC_AVX512_I32 (0x00400000));
  return _mm512_srli_epi32 (r, 16);
}

static inline __m256i
_mixprec_avx512_f32_to_bf16_rne (__m512 x)
{
  return _mm512_cvtepi32_epi16 (_mixprec_avx512_f32_to_bf16_rne_epi32 (x));
}

/* Stochastic rounding with @r16 below 2^16 (as _mixprec_avx512_sr_bits16()
 * gives), as 32-bit lanes whose high halves are the bf16 bits, for callers
 * that pack two vectors at once. Inf needs no care: adding at most 0xFFFF
 * to its bits never carries into the kept ones. NaN is quieted as in
 * round to nearest. */
static inline __m512i
_mixprec_avx512_f32_to_bf16_sr16_hi16 (__m512  x,
                                       __m512i r16)
{
  __m512i u = _mm512_castps_si512 (x);
  __mmask16 nan = _mm512_cmpgt_epi32_mask (_mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF)),
                                           _MIXPREC_AVX512_I32 (0x7F800000));

  return _mm512_mask_or_epi32 (_mm512_add_epi32 (u, r16), nan, u, _MIXPREC_AVX512_I32 (0x00400000));
}

static inline __m256i
_mixprec_avx512_f32_to_bf16_sr (__m512  x,
                                __m512i r)
{
  __m512i r16 = _mm512_and_si512 (r, _MIXPREC_AVX512_I32 (0xFFFF));

  return _mm512_cvtepi32_epi16 (_mm512_srli_epi32 (_mixprec_avx512_f32_to_bf16_sr16_hi16 (x, r16), 16));
}

/* ------------------------------------------------------------ float16 */

static inline __m512
_mixprec_avx512_f16_to_f32 (__m256i h)
{
  return _mm512_cvtph_ps (h);
}

static inline __m256i
_mixprec_avx512_f32_to_f16_rne (__m512 x)
{
  return _mm512_cvtps_ph (x, _MM_FROUND_TO_NEAREST_INT);
}

/* Truncation makes every lane exact in fp16 (or past its range, where
 * VCVTPS2PH gives Inf as required); Inf and NaN take no random bits, so
 * they convert as in round to nearest. */
static inline __m256i
_mixprec_avx512_f32_to_f16_sr (__m512  x,
                               __m512i r)
{
  __m512i u = _mm512_castps_si512 (x);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));
  __mmask16 special = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F7FFFFF));
  __m512i d = _mixprec_avx512_sr_dropped (a, 10, 113);
  __mmask16 tiny = _mm512_cmpgt_epi32_mask (d, _MIXPREC_AVX512_I32 (23));
  __m512i t = _mixprec_avx512_sr_truncate (u, r, d, (__mmask16) (special | tiny));
  __m256i h = _mm512_cvtps_ph (_mm512_castsi512_ps (t), _MM_FROUND_TO_NEAREST_INT);

  if (tiny != 0)
    {
      __m512i sign = _mm512_and_si512 (_mm512_srli_epi32 (u, 16), _MIXPREC_AVX512_I32 (0x8000));
      __m512i small = _mm512_or_si512 (sign, _mixprec_avx512_sr_tiny (a, r, d));

      h = _mm256_mask_mov_epi16 (h, tiny, _mm512_cvtepi32_epi16 (small));
    }
  return h;
}

/* ------------------------------------------------------------ float8 */

static inline __m512
_mixprec_avx512_e4m3_to_f32 (__m128i b8)
{
  __m512i b = _mm512_cvtepu8_epi32 (b8);
  __m512i sign = _mm512_slli_epi32 (_mm512_and_si512 (b, _MIXPREC_AVX512_I32 (0x80)), 24);
  __m512i em = _mm512_and_si512 (b, _MIXPREC_AVX512_I32 (0x7F));
  __m512i normal = _mm512_add_epi32 (_mm512_slli_epi32 (em, 20), _MIXPREC_AVX512_I32 (120 << 23));
  /* Subnormals through an exact integer-to-float conversion, so that no
   * fp32 denormal (and no MXCSR setting) is involved. */
  __m512i sub = _mm512_castps_si512 (_mm512_mul_ps (_mm512_cvtepi32_ps (em), _mm512_set1_ps (0x1p-9f)));
  __m512i mag = _mm512_mask_mov_epi32 (normal, _mm512_cmplt_epi32_mask (em, _MIXPREC_AVX512_I32 (8)), sub);

  mag = _mm512_mask_mov_epi32 (mag, _mm512_cmpeq_epi32_mask (em, _MIXPREC_AVX512_I32 (0x7F)),
                               _MIXPREC_AVX512_I32 (0x7FC00000));
  return _mm512_castsi512_ps (_mm512_or_si512 (mag, sign));
}

static inline __m512
_mixprec_avx512_e5m2_to_f32 (__m128i b8)
{
  return _mm512_cvtph_ps (_mm256_slli_epi16 (_mm256_cvtepu8_epi16 (b8), 8));
}

/* Magnitude bits (16 lanes) to e4m3/e5m2 bytes, given sign and specials. */
static inline __m128i
_mixprec_avx512_e4m3_finish (__m512i u,
                             __m512i bits)
{
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));
  __mmask16 special = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F7FFFFF));
  __m512i sign = _mm512_and_si512 (_mm512_srli_epi32 (u, 24), _MIXPREC_AVX512_I32 (0x80));

  bits = _mm512_min_epi32 (bits, _MIXPREC_AVX512_I32 (0x7F));
  bits = _mm512_mask_mov_epi32 (bits, special, _MIXPREC_AVX512_I32 (0x7F));
  return _mm512_cvtepi32_epi8 (_mm512_or_si512 (bits, sign));
}

static inline __m128i
_mixprec_avx512_e5m2_finish (__m512i u,
                             __m512i bits)
{
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));
  __mmask16 nan = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F800000));
  __m512i sign = _mm512_and_si512 (_mm512_srli_epi32 (u, 24), _MIXPREC_AVX512_I32 (0x80));

  /* Inf rounds past the largest finite value like any overflow. */
  bits = _mm512_min_epi32 (bits, _MIXPREC_AVX512_I32 (0x7C));
  bits = _mm512_mask_mov_epi32 (bits, nan, _MIXPREC_AVX512_I32 (0x7F));
  return _mm512_cvtepi32_epi8 (_mm512_or_si512 (bits, sign));
}

static inline __m128i
_mixprec_avx512_f32_to_e4m3_rne (__m512 x)
{
  __m512i u = _mm512_castps_si512 (x);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));

  return _mixprec_avx512_e4m3_finish (u, _mixprec_avx512_round_rne_bits (a, 3, 121));
}

static inline __m128i
_mixprec_avx512_f32_to_e4m3_sr (__m512  x,
                                __m512i r)
{
  __m512i u = _mm512_castps_si512 (x);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));

  return _mixprec_avx512_e4m3_finish (u, _mixprec_avx512_round_sr_bits (a, r, 3, 121));
}

static inline __m128i
_mixprec_avx512_f32_to_e5m2_rne (__m512 x)
{
  __m512i u = _mm512_castps_si512 (x);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));

  return _mixprec_avx512_e5m2_finish (u, _mixprec_avx512_round_rne_bits (a, 2, 113));
}

static inline __m128i
_mixprec_avx512_f32_to_e5m2_sr (__m512  x,
                                __m512i r)
{
  __m512i u = _mm512_castps_si512 (x);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));

  return _mixprec_avx512_e5m2_finish (u, _mixprec_avx512_round_sr_bits (a, r, 2, 113));
}

G_END_DECLS
