/* optim-quant-avx512.c — optim-quant.h's block decode and encode sixteen
 * lanes at a time, the tail under a mask; the bits of the scalar level
 * (numeric/numeric-quant.h). Compiled with $(MIXPREC_AVX512_CFLAGS), run
 * only where init() found AVX-512 F, BW and VL. */
#include "config.h"

#include "optim-quant.h"
#include "mixprec-avx512-private.h"

#define I32 _MIXPREC_AVX512_I32

static inline __m512
load_scaled (unsigned    format,
             int         is_signed,
             const void *base,
             size_t      at,
             __mmask16   m)
{
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT16_SCALED:
      return _mm512_cvtph_ps (_mm256_maskz_loadu_epi16 (m, (const guint16 *) base + at));
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      return _mixprec_avx512_bf16_to_f32 (_mm256_maskz_loadu_epi16 (m, (const guint16 *) base + at));
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
      return _mixprec_avx512_e4m3_to_f32 (_mm_maskz_loadu_epi8 (m, (const uint8_t *) base + at));
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      {
        __m512i codes = _mm512_cvtepu8_epi32 (_mm_maskz_loadu_epi8 (m, (const uint8_t *) base + at));

        return _mm512_i32gather_ps (codes, _mixprec_qmap (8, is_signed), 4);
      }
    default:
      {
        /* at is even: sixteen nibbles are eight bytes, low nibble first. */
        __mmask16 bytes = _mixprec_avx512_mask ((_mm_popcnt_u32 (m) + 1) / 2);
        __m128i b = _mm_maskz_loadu_epi8 (bytes, (const uint8_t *) base + at / 2);
        __m128i lo = _mm_and_si128 (b, _mm_set1_epi8 (0x0F));
        __m128i hi = _mm_and_si128 (_mm_srli_epi16 (b, 4), _mm_set1_epi8 (0x0F));
        __m512i codes = _mm512_cvtepu8_epi32 (_mm_unpacklo_epi8 (lo, hi));

        return _mm512_permutexvar_ps (codes, _mm512_loadu_ps (_mixprec_qmap (4, is_signed)));
      }
    }
}

void
_mixprec_quant_decode_avx512 (unsigned    format,
                              int         is_signed,
                              const void *base,
                              size_t      start,
                              size_t      len,
                              float       scale,
                              float      *out)
{
  const __m512 s = _mm512_set1_ps (scale);

  for (size_t i = 0; i < len; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (len - i);

      _mm512_mask_storeu_ps (out + i, m, _mm512_mul_ps (load_scaled (format, is_signed, base, start + i, m), s));
    }
}

/* The codes of sixteen quotients through the table (optim-quant.h). */
static inline __m512i
table_codes (const _MixprecQuantTable *t,
             __m512                    q)
{
  __m512i u = _mm512_castps_si512 (q);
  __m512i e = _mm512_and_si512 (_mm512_srli_epi32 (u, 23), I32 (0xFF));
  __m512i mh = _mm512_and_si512 (_mm512_srli_epi32 (u, 16), I32 (0x7F));
  __m512i sign = _mm512_srli_epi32 (u, 31);
  __mmask16 tiny = _mm512_cmple_epu32_mask (e, I32 (_MIXPREC_QUANT_EXP_LO));
  __mmask16 nan = _mm512_cmp_ps_mask (q, q, _CMP_UNORD_Q);
  __m512i idx, cand;
  __m512 up;

  e = _mm512_min_epu32 (_mm512_max_epu32 (e, I32 (_MIXPREC_QUANT_EXP_LO)), I32 (_MIXPREC_QUANT_EXP_HI));
  mh = _mm512_mask_mov_epi32 (mh, tiny, _mm512_setzero_si512 ());
  idx = _mm512_add_epi32 (_mm512_mullo_epi32 (sign, I32 (_MIXPREC_QUANT_N_EXP)),
                          _mm512_sub_epi32 (e, I32 (_MIXPREC_QUANT_EXP_LO)));
  idx = _mm512_or_si512 (_mm512_slli_epi32 (idx, 7), mh);
  cand = _mm512_and_si512 (_mm512_i32gather_epi32 (idx, t->lut, 1), I32 (0xFF));
  up = _mm512_i32gather_ps (_mm512_add_epi32 (cand, I32 (1)), t->up, 4);
  cand = _mm512_mask_add_epi32 (cand, _mm512_cmp_ps_mask (q, up, _CMP_GE_OQ), cand, I32 (1));
  return _mm512_mask_mov_epi32 (cand, nan, _mm512_setzero_si512 ());
}

float
_mixprec_quant_encode_avx512 (unsigned     format,
                              int          is_signed,
                              const float *in,
                              size_t       len,
                              void        *base,
                              size_t       start)
{
  const _MixprecQuantTable *t = NULL;
  __m512i amax = _mm512_setzero_si512 ();
  __m512 s;
  float scale;
  size_t i;

  for (i = 0; i < len; i += 16)
    {
      __m512i u = _mm512_maskz_loadu_epi32 (_mixprec_avx512_mask (len - i), in + i);

      amax = _mm512_max_epu32 (amax, _mm512_and_si512 (u, I32 (0x7FFFFFFF)));
    }
  scale = _mixprec_state_block_scale (format, _mm512_reduce_max_epu32 (amax));
  s = _mm512_set1_ps (scale);
  if (format == _MIXPREC_QFMT_INT8_DYNAMIC || format == _MIXPREC_QFMT_INT4_DYNAMIC)
    {
      t = _mixprec_quant_table (format == _MIXPREC_QFMT_INT8_DYNAMIC ? 8 : 4, is_signed);
      if (t == NULL)
        {
          for (i = 0; i < len; i++)
            _mixprec_state_store_code (format, base, start + i,
                                       _mixprec_state_encode1 (format, is_signed, in[i], scale));
          return scale;
        }
    }

  for (i = 0; i < len; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (len - i);
      __m512 q = _mm512_div_ps (_mm512_maskz_loadu_ps (m, in + i), s);
      __mmask16 nan = _mm512_cmp_ps_mask (q, q, _CMP_UNORD_Q);
      size_t at = start + i;

      switch (format)
        {
        case _MIXPREC_QFMT_FLOAT16_SCALED:
          {
            __m512 c = _mm512_min_ps (_mm512_max_ps (q, _mm512_set1_ps (-65504.0f)), _mm512_set1_ps (65504.0f));
            __m256i h = _mm512_cvtps_ph (c, _MM_FROUND_TO_NEAREST_INT);

            h = _mm256_mask_mov_epi16 (h, nan, _mm256_set1_epi16 (0x7E00));
            _mm256_mask_storeu_epi16 ((guint16 *) base + at, m, h);
          }
          break;
        case _MIXPREC_QFMT_BFLOAT16_SCALED:
          {
            const __m512 big = _mm512_castsi512_ps (I32 (0x7F7F0000));
            __m512 c = _mm512_min_ps (_mm512_max_ps (q, _mm512_sub_ps (_mm512_setzero_ps (), big)), big);
            __m256i h = _mixprec_avx512_f32_to_bf16_rne (c);

            h = _mm256_mask_mov_epi16 (h, nan, _mm256_set1_epi16 (0x7FC0));
            _mm256_mask_storeu_epi16 ((guint16 *) base + at, m, h);
          }
          break;
        case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
          {
            __m512 c = _mm512_min_ps (_mm512_max_ps (q, _mm512_set1_ps (-448.0f)), _mm512_set1_ps (448.0f));
            __m128i b = _mixprec_avx512_f32_to_e4m3_rne (c);

            b = _mm_mask_mov_epi8 (b, nan, _mm_set1_epi8 (0x7F));
            _mm_mask_storeu_epi8 ((uint8_t *) base + at, m, b);
          }
          break;
        case _MIXPREC_QFMT_INT8_DYNAMIC:
          _mm_mask_storeu_epi8 ((uint8_t *) base + at, m, _mm512_cvtepi32_epi8 (table_codes (t, q)));
          break;
        default:
          {
            /* Pairs of codes into bytes, even element low; an odd last
             * element goes through its nibble alone. */
            __m128i c8 = _mm512_cvtepi32_epi8 (table_codes (t, q));
            __m128i w = _mm_or_si128 (_mm_and_si128 (c8, _mm_set1_epi16 (0x000F)),
                                      _mm_and_si128 (_mm_srli_epi16 (c8, 4), _mm_set1_epi16 (0x00F0)));
            size_t rem = len - i < 16 ? len - i : 16;

            _mm_mask_storeu_epi8 ((uint8_t *) base + at / 2, _mixprec_avx512_mask (rem / 2),
                                  _mm_packus_epi16 (w, _mm_setzero_si128 ()));
            if (rem % 2 != 0)
              {
                uint8_t codes[16];

                _mm_storeu_si128 ((__m128i *) codes, c8);
                _mixprec_state_store_code (format, base, at + rem - 1, codes[rem - 1]);
              }
          }
          break;
        }
    }
  return scale;
}
