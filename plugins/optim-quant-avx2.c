/* optim-quant-avx2.c — optim-quant.h's block decode and encode eight lanes
 * at a time, the last (len % 8) elements through the scalar level; the
 * bits of numeric/numeric-quant.h. Compiled with $(MIXPREC_SIMD_CFLAGS),
 * run only where init() found AVX2, FMA and F16C. */
#include "config.h"

#include "optim-quant.h"
#include "mixprec-avx2-private.h"

#define I32 _MIXPREC_AVX2_I32

static inline __m256
load_scaled (unsigned    format,
             int         is_signed,
             const void *base,
             size_t      at)
{
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT16_SCALED:
      return _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) ((const guint16 *) base + at)));
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      return _mixprec_avx2_bf16_to_f32 (_mm_loadu_si128 ((const __m128i *) ((const guint16 *) base + at)));
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
      return _mixprec_avx2_e4m3_to_f32 (_mm_loadl_epi64 ((const __m128i *) ((const uint8_t *) base + at)));
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      {
        __m256i codes = _mm256_cvtepu8_epi32 (_mm_loadl_epi64 ((const __m128i *) ((const uint8_t *) base + at)));

        return _mm256_i32gather_ps (_mixprec_qmap (8, is_signed), codes, 4);
      }
    default:
      {
        /* at is even: eight nibbles are four bytes, low nibble first. The
         * sixteen map values sit in two registers: each half permuted by
         * the code's low three bits, then the half its bit 3 picks. */
        const float *map = _mixprec_qmap (4, is_signed);
        int32_t word;
        __m128i b, lo, hi;
        __m256i idx;

        memcpy (&word, (const uint8_t *) base + at / 2, sizeof word);
        b = _mm_cvtsi32_si128 (word);
        lo = _mm_and_si128 (b, _mm_set1_epi8 (0x0F));
        hi = _mm_and_si128 (_mm_srli_epi16 (b, 4), _mm_set1_epi8 (0x0F));
        idx = _mm256_cvtepu8_epi32 (_mm_unpacklo_epi8 (lo, hi));
        return _mm256_blendv_ps (_mm256_permutevar8x32_ps (_mm256_loadu_ps (map), idx),
                                 _mm256_permutevar8x32_ps (_mm256_loadu_ps (map + 8), idx),
                                 _mm256_castsi256_ps (_mm256_slli_epi32 (idx, 28)));
      }
    }
}

void
_mixprec_quant_decode_avx2 (unsigned    format,
                            int         is_signed,
                            const void *base,
                            size_t      start,
                            size_t      len,
                            float       scale,
                            float      *out)
{
  const __m256 s = _mm256_set1_ps (scale);
  size_t n8 = len - len % 8;

  if (format == _MIXPREC_QFMT_INT8_DYNAMIC)
    {
      /* Eight scalar loads of the map inserted into a register beat a
       * gather, and element-wise stores, on the cores measured (Zen 3:
       * 0.66 against 1.3 and 1.6 cycles an element); the same single
       * multiplication. */
      const float *map = _mixprec_qmap (8, is_signed);
      const uint8_t *b = (const uint8_t *) base + start;

      for (size_t i = 0; i < n8; i += 8)
        {
          uint64_t w;
          __m128 lo, hi;

          memcpy (&w, b + i, sizeof w);
          lo = _mm_load_ss (map + (w & 0xFF));
          lo = _mm_insert_ps (lo, _mm_load_ss (map + ((w >> 8) & 0xFF)), 0x10);
          lo = _mm_insert_ps (lo, _mm_load_ss (map + ((w >> 16) & 0xFF)), 0x20);
          lo = _mm_insert_ps (lo, _mm_load_ss (map + ((w >> 24) & 0xFF)), 0x30);
          hi = _mm_load_ss (map + ((w >> 32) & 0xFF));
          hi = _mm_insert_ps (hi, _mm_load_ss (map + ((w >> 40) & 0xFF)), 0x10);
          hi = _mm_insert_ps (hi, _mm_load_ss (map + ((w >> 48) & 0xFF)), 0x20);
          hi = _mm_insert_ps (hi, _mm_load_ss (map + (w >> 56)), 0x30);
          _mm256_storeu_ps (out + i, _mm256_mul_ps (_mm256_set_m128 (hi, lo), s));
        }
      for (size_t i = n8; i < len; i++)
        out[i] = map[b[i]] * scale;
      return;
    }
  for (size_t i = 0; i < n8; i += 8)
    _mm256_storeu_ps (out + i, _mm256_mul_ps (load_scaled (format, is_signed, base, start + i), s));
  _mixprec_quant_decode_scalar (format, is_signed, base, start + n8, len - n8, scale, out + n8);
}

/* The codes of eight quotients through the table (optim-quant.h). */
static inline __m256i
table_codes (const _MixprecQuantTable *t,
             __m256                    q)
{
  __m256i u = _mm256_castps_si256 (q);
  __m256i e = _mm256_and_si256 (_mm256_srli_epi32 (u, 23), I32 (0xFF));
  __m256i mh = _mm256_and_si256 (_mm256_srli_epi32 (u, 16), I32 (0x7F));
  __m256i sign = _mm256_srli_epi32 (u, 31);
  __m256i tiny = _mm256_cmpgt_epi32 (I32 (_MIXPREC_QUANT_EXP_LO + 1), e);
  __m256i nan = _mm256_castps_si256 (_mm256_cmp_ps (q, q, _CMP_UNORD_Q));
  __m256i idx, cand, step;
  __m256 up;

  e = _mm256_min_epi32 (_mm256_max_epi32 (e, I32 (_MIXPREC_QUANT_EXP_LO)), I32 (_MIXPREC_QUANT_EXP_HI));
  mh = _mm256_andnot_si256 (tiny, mh);
  idx = _mm256_add_epi32 (_mm256_mullo_epi32 (sign, I32 (_MIXPREC_QUANT_N_EXP)),
                          _mm256_sub_epi32 (e, I32 (_MIXPREC_QUANT_EXP_LO)));
  idx = _mm256_or_si256 (_mm256_slli_epi32 (idx, 7), mh);
  cand = _mm256_and_si256 (_mm256_i32gather_epi32 ((const int *) t->lut, idx, 1), I32 (0xFF));
  up = _mm256_i32gather_ps (t->up, _mm256_add_epi32 (cand, I32 (1)), 4);
  /* The comparison is all ones where q steps up: subtracting adds one. */
  step = _mm256_castps_si256 (_mm256_cmp_ps (q, up, _CMP_GE_OQ));
  cand = _mm256_sub_epi32 (cand, step);
  return _mm256_andnot_si256 (nan, cand);
}

/* The same codes through packed[] (optim-quant.h): one gather, and the
 * step found by comparing low halves, without the gather of up[]. */
static inline __m256i
packed_codes (const _MixprecQuantTable *t,
              __m256                    q)
{
  __m256i u = _mm256_castps_si256 (q);
  __m256i sign = _mm256_srai_epi32 (u, 31);
  __m256i nan = _mm256_castps_si256 (_mm256_cmp_ps (q, q, _CMP_UNORD_Q));
  __m256i v = _mm256_and_si256 (_mm256_srli_epi32 (u, 16), I32 (0x7FFF));
  /* key + 1: the low half, complemented for negative q, plus one. */
  __m256i key1 = _mm256_add_epi32 (_mm256_and_si256 (_mm256_xor_si256 (u, sign), I32 (0xFFFF)), I32 (1));
  __m256i idx, entry, step, code;

  v = _mm256_min_epi32 (_mm256_max_epi32 (v, I32 (_MIXPREC_QUANT_EXP_LO << 7)),
                        I32 ((_MIXPREC_QUANT_EXP_HI << 7) | 127));
  idx = _mm256_add_epi32 (_mm256_and_si256 (sign, I32 (_MIXPREC_QUANT_N_EXP << 7)),
                          _mm256_sub_epi32 (v, I32 (_MIXPREC_QUANT_EXP_LO << 7)));
  entry = _mm256_i32gather_epi32 ((const int *) t->packed, idx, 4);
  code = _mm256_srli_epi32 (entry, _MIXPREC_QUANT_PACKED_CODE_SHIFT);
  /* key >= T, all ones there: subtracting adds one. */
  step = _mm256_cmpgt_epi32 (key1, _mm256_and_si256 (entry, I32 ((1 << _MIXPREC_QUANT_PACKED_CODE_SHIFT) - 1)));
  return _mm256_andnot_si256 (nan, _mm256_sub_epi32 (code, step));
}

/* The int8 / int4 codes of in[0 .. n8) divided by the block's scale, the
 * format's loop on its own so the constants stay in registers. */
static void
encode_dynamic (const _MixprecQuantTable *t,
                unsigned                  format,
                const float              *in,
                size_t                    n8,
                __m256                    s,
                void                     *base,
                size_t                    start)
{
  if (format == _MIXPREC_QFMT_INT8_DYNAMIC)
    {
      uint8_t *out = (uint8_t *) base + start;

      if (t->packed_ok)
        for (size_t i = 0; i < n8; i += 8)
          _mm_storel_epi64 ((__m128i *) (out + i),
                            _mixprec_avx2_pack_u8 (packed_codes (t, _mm256_div_ps (_mm256_loadu_ps (in + i), s))));
      else
        for (size_t i = 0; i < n8; i += 8)
          _mm_storel_epi64 ((__m128i *) (out + i),
                            _mixprec_avx2_pack_u8 (table_codes (t, _mm256_div_ps (_mm256_loadu_ps (in + i), s))));
      return;
    }
  for (size_t i = 0; i < n8; i += 8)
    {
      __m256 q = _mm256_div_ps (_mm256_loadu_ps (in + i), s);
      __m128i c8 = _mixprec_avx2_pack_u8 (t->packed_ok ? packed_codes (t, q) : table_codes (t, q));
      __m128i w = _mm_or_si128 (_mm_and_si128 (c8, _mm_set1_epi16 (0x000F)),
                                _mm_and_si128 (_mm_srli_epi16 (c8, 4), _mm_set1_epi16 (0x00F0)));
      int32_t word = _mm_cvtsi128_si32 (_mm_packus_epi16 (w, w));

      /* start + i is even: eight nibbles are four bytes. */
      memcpy ((uint8_t *) base + (start + i) / 2, &word, sizeof word);
    }
}

/* The fp16 / bf16 / e4m3 values of in[0 .. n8) divided by the block's
 * scale, clamped to the format's largest finite value, NaN kept. */
static void
encode_scaled (unsigned     format,
               const float *in,
               size_t       n8,
               __m256       s,
               void        *base,
               size_t       start)
{
  for (size_t i = 0; i < n8; i += 8)
    {
      __m256 q = _mm256_div_ps (_mm256_loadu_ps (in + i), s);
      __m256i nan = _mm256_castps_si256 (_mm256_cmp_ps (q, q, _CMP_UNORD_Q));
      size_t at = start + i;

      switch (format)
        {
        case _MIXPREC_QFMT_FLOAT16_SCALED:
          {
            __m256 c = _mm256_min_ps (_mm256_max_ps (q, _mm256_set1_ps (-65504.0f)), _mm256_set1_ps (65504.0f));
            __m256i h = _mm256_cvtepu16_epi32 (_mm256_cvtps_ph (c, _MM_FROUND_TO_NEAREST_INT));

            h = _mm256_blendv_epi8 (h, I32 (0x7E00), nan);
            _mm_storeu_si128 ((__m128i *) ((guint16 *) base + at), _mixprec_avx2_pack_u16 (h));
          }
          break;
        case _MIXPREC_QFMT_BFLOAT16_SCALED:
          {
            const __m256 big = _mm256_castsi256_ps (I32 (0x7F7F0000));
            __m256 c = _mm256_min_ps (_mm256_max_ps (q, _mm256_sub_ps (_mm256_setzero_ps (), big)), big);
            __m256i h = _mixprec_avx2_f32_to_bf16_rne_epi32 (c);

            h = _mm256_blendv_epi8 (h, I32 (0x7FC0), nan);
            _mm_storeu_si128 ((__m128i *) ((guint16 *) base + at), _mixprec_avx2_pack_u16 (h));
          }
          break;
        case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
          {
            __m256 c = _mm256_min_ps (_mm256_max_ps (q, _mm256_set1_ps (-448.0f)), _mm256_set1_ps (448.0f));
            __m128i b = _mixprec_avx2_f32_to_e4m3_rne (c);
            __m128i nan8 = _mixprec_avx2_pack_u8 (_mm256_and_si256 (nan, I32 (0xFF)));

            b = _mm_blendv_epi8 (b, _mm_set1_epi8 (0x7F), nan8);
            _mm_storel_epi64 ((__m128i *) ((uint8_t *) base + at), b);
          }
          break;
        default:
          /* The dynamic formats took their own loop above. */
          break;
        }
    }
}

float
_mixprec_quant_encode_avx2 (unsigned     format,
                            int          is_signed,
                            const float *in,
                            size_t       len,
                            void        *base,
                            size_t       start)
{
  const _MixprecQuantTable *t = NULL;
  size_t n8 = len - len % 8;
  __m256i amax = _mm256_setzero_si256 ();
  uint32_t lanes[8], absmax = 0;
  __m256 s;
  float scale;
  size_t i;

  for (i = 0; i < n8; i += 8)
    amax = _mm256_max_epu32 (amax, _mm256_and_si256 (_mm256_loadu_si256 ((const __m256i *) (in + i)),
                                                     I32 (0x7FFFFFFF)));
  _mm256_storeu_si256 ((__m256i *) lanes, amax);
  for (unsigned k = 0; k < 8; k++)
    absmax = lanes[k] > absmax ? lanes[k] : absmax;
  for (; i < len; i++)
    absmax = _mixprec_absmax_bits (absmax, in[i]);
  scale = _mixprec_state_block_scale (format, absmax);
  s = _mm256_set1_ps (scale);
  if (format == _MIXPREC_QFMT_INT8_DYNAMIC || format == _MIXPREC_QFMT_INT4_DYNAMIC)
    {
      t = _mixprec_quant_table (format == _MIXPREC_QFMT_INT8_DYNAMIC ? 8 : 4, is_signed);
      if (t != NULL)
        encode_dynamic (t, format, in, n8, s, base, start);
      /* Without the tables every element takes the reference rule below. */
      i = t != NULL ? n8 : 0;
    }
  else
    {
      encode_scaled (format, in, n8, s, base, start);
      i = n8;
    }
  /* The rest as the scalar level encodes it, with the block's scale. */
  for (; i < len; i++)
    _mixprec_state_store_code (format, base, start + i,
                               t != NULL ? _mixprec_quant_fast_code (t, _mixprec_num_div (in[i], scale))
                                         : _mixprec_state_encode1 (format, is_signed, in[i], scale));
  return scale;
}

/* ------------------------------------------------------------ masters */

static inline __m256
widen_bf16 (__m256i b)
{
  return _mm256_castsi256_ps (_mm256_slli_epi32 (b, 16));
}

void
_mixprec_quant_master_load_avx2 (unsigned       master_format,
                                 const guint16 *working,
                                 const void    *extra,
                                 size_t         len,
                                 float         *out)
{
  size_t n8 = len - len % 8;

  for (size_t i = 0; i < n8; i += 8)
    {
      __m256i w = _mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) (working + i)));

      if (master_format == _MIXPREC_QMASTER_REMAINDER)
        {
          __m256i rem = _mm256_cvtepi16_epi32 (_mm_loadu_si128 ((const __m128i *) ((const int16_t *) extra + i)));
          /* All ones where the remainder is negative: adding subtracts one. */
          __m256i hi = _mm256_add_epi32 (w, _mm256_cmpgt_epi32 (_mm256_setzero_si256 (), rem));

          w = _mm256_or_si256 (_mm256_slli_epi32 (hi, 16), _mm256_and_si256 (rem, I32 (0xFFFF)));
          _mm256_storeu_ps (out + i, _mm256_castsi256_ps (w));
        }
      else
        _mm256_storeu_ps (out + i, widen_bf16 (w));
    }
  _mixprec_quant_master_load (master_format, working + n8,
                              (const guint16 *) extra + n8, len - n8, out + n8);
}

void
_mixprec_quant_master_store_avx2 (unsigned     master_format,
                                  const float *in,
                                  size_t       len,
                                  guint16     *working,
                                  void        *extra)
{
  size_t n8 = len - len % 8;

  for (size_t i = 0; i < n8; i += 8)
    {
      if (master_format == _MIXPREC_QMASTER_REMAINDER)
        {
          __m256i u = _mm256_loadu_si256 ((const __m256i *) (in + i));
          __m256i lo = _mm256_and_si256 (u, I32 (0xFFFF));
          /* lo >= 0x8000: bit 15 set; all ones there, so subtracting adds one. */
          __m256i up = _mm256_cmpgt_epi32 (lo, I32 (0x7FFF));
          __m256i hi = _mm256_sub_epi32 (_mm256_srli_epi32 (u, 16), up);

          _mm_storeu_si128 ((__m128i *) (working + i), _mixprec_avx2_pack_u16 (_mm256_and_si256 (hi, I32 (0xFFFF))));
          _mm_storeu_si128 ((__m128i *) ((int16_t *) extra + i), _mixprec_avx2_pack_u16 (lo));
        }
      else
        {
          guint16 *comp = (guint16 *) extra + i;
          __m256 p0 = widen_bf16 (_mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) (working + i))));
          __m256 c = widen_bf16 (_mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) comp)));
          __m256 u = _mm256_sub_ps (_mm256_loadu_ps (in + i), p0);
          __m256 c1 = widen_bf16 (_mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_add_ps (c, u)));
          __m256i p1 = _mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_add_ps (p0, c1));
          __m256 d = widen_bf16 (_mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_sub_ps (p0, widen_bf16 (p1))));

          _mm_storeu_si128 ((__m128i *) (working + i), _mixprec_avx2_pack_u16 (p1));
          _mm_storeu_si128 ((__m128i *) comp,
                            _mixprec_avx2_pack_u16 (_mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_add_ps (c1, d))));
        }
    }
  _mixprec_quant_master_store (master_format, in + n8, len - n8, working + n8,
                               (guint16 *) extra + n8);
}
