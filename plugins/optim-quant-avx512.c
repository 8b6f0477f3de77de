/* optim-quant-avx512.c — optim-quant.h's block decode and encode sixteen
 * lanes at a time, the tail under a mask; the bits of the scalar level
 * (numeric/numeric-quant.h). Compiled with $(MIXPREC_AVX512_CFLAGS), run
 * only where init() found AVX-512 F, BW and VL. */
#include "config.h"

#include "optim-quant.h"
#include "mixprec-avx512-private.h"

#define I32 _MIXPREC_AVX512_I32

/* The int8 search runs level by level on tables held in registers
 * (permutes, 32 floats per two-register permute): on AMD's cores, where
 * gathers are microcoded, it beats the bucket table of optim-quant.h
 * with its two gathers per sixteen quotients; on Intel's, one gather of
 * packed[] per sixteen is twice as fast again, and the dispatch below
 * picks it there. Decoding int8 reads the map one element at a time,
 * which measured faster on AMD than one gather per sixteen or a 256-entry
 * permute tree; with AVX-512 VBMI four byte permutes per plane are faster
 * still. */

/* The registers of an int8 search: level 0 broadcast, levels 1 .. 4 one
 * register each, level 5 two, level 6 four, level 7 eight. */
typedef struct {
  __m512 l0, l1, l2, l3, l4, l5[2], l6[4], l7[8];
} Search8;

static inline void
search8_load (Search8                  *r,
              const _MixprecQuantTable *t)
{
  r->l0 = _mm512_set1_ps (t->level[0][0]);
  r->l1 = _mm512_load_ps (t->level[1]);
  r->l2 = _mm512_load_ps (t->level[2]);
  r->l3 = _mm512_load_ps (t->level[3]);
  r->l4 = _mm512_load_ps (t->level[4]);
  for (unsigned k = 0; k < 2; k++)
    r->l5[k] = _mm512_load_ps (t->level[5] + 16 * k);
  for (unsigned k = 0; k < 4; k++)
    r->l6[k] = _mm512_load_ps (t->level[6] + 16 * k);
  for (unsigned k = 0; k < 8; k++)
    r->l7[k] = _mm512_load_ps (t->level[7] + 16 * k);
}

static inline __m512i
step_up (__m512i c,
         __m512  q,
         __m512  v,
         int     step)
{
  return _mm512_mask_add_epi32 (c, _mm512_cmp_ps_mask (q, v, _CMP_GE_OQ), c, I32 (step));
}

/* The largest c with up[c] <= q (0 for NaN): the code of q. */
static inline __m512i
search8 (const Search8 *r,
         __m512         q)
{
  __m512i c = _mm512_maskz_mov_epi32 (_mm512_cmp_ps_mask (q, r->l0, _CMP_GE_OQ), I32 (128));
  __m512i j;
  __m512 a, b, v;

  c = step_up (c, q, _mm512_permutexvar_ps (_mm512_srli_epi32 (c, 7), r->l1), 64);
  c = step_up (c, q, _mm512_permutexvar_ps (_mm512_srli_epi32 (c, 6), r->l2), 32);
  c = step_up (c, q, _mm512_permutexvar_ps (_mm512_srli_epi32 (c, 5), r->l3), 16);
  c = step_up (c, q, _mm512_permutexvar_ps (_mm512_srli_epi32 (c, 4), r->l4), 8);
  c = step_up (c, q, _mm512_permutex2var_ps (r->l5[0], _mm512_srli_epi32 (c, 3), r->l5[1]), 4);
  j = _mm512_srli_epi32 (c, 2);
  a = _mm512_permutex2var_ps (r->l6[0], j, r->l6[1]);
  b = _mm512_permutex2var_ps (r->l6[2], j, r->l6[3]);
  c = step_up (c, q, _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (32)), a, b), 2);
  j = _mm512_srli_epi32 (c, 1);
  a = _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (32)),
                            _mm512_permutex2var_ps (r->l7[0], j, r->l7[1]),
                            _mm512_permutex2var_ps (r->l7[2], j, r->l7[3]));
  b = _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (32)),
                            _mm512_permutex2var_ps (r->l7[4], j, r->l7[5]),
                            _mm512_permutex2var_ps (r->l7[6], j, r->l7[7]));
  v = _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (64)), a, b);
  return step_up (c, q, v, 1);
}

/* search8() on two vectors at once, interleaved level by level: each
 * level waits on the one before, so two independent chains keep the
 * permute and compare units busy. */
static inline void
search8x2 (const Search8 *r,
           __m512         q0,
           __m512         q1,
           __m512i       *out0,
           __m512i       *out1)
{
  __m512i c0 = _mm512_maskz_mov_epi32 (_mm512_cmp_ps_mask (q0, r->l0, _CMP_GE_OQ), I32 (128));
  __m512i c1 = _mm512_maskz_mov_epi32 (_mm512_cmp_ps_mask (q1, r->l0, _CMP_GE_OQ), I32 (128));
  __m512i j0, j1;

#define LEVEL_1REG(shift, table, step) \
  c0 = step_up (c0, q0, _mm512_permutexvar_ps (_mm512_srli_epi32 (c0, shift), table), step); \
  c1 = step_up (c1, q1, _mm512_permutexvar_ps (_mm512_srli_epi32 (c1, shift), table), step)
  LEVEL_1REG (7, r->l1, 64);
  LEVEL_1REG (6, r->l2, 32);
  LEVEL_1REG (5, r->l3, 16);
  LEVEL_1REG (4, r->l4, 8);
#undef LEVEL_1REG
  c0 = step_up (c0, q0, _mm512_permutex2var_ps (r->l5[0], _mm512_srli_epi32 (c0, 3), r->l5[1]), 4);
  c1 = step_up (c1, q1, _mm512_permutex2var_ps (r->l5[0], _mm512_srli_epi32 (c1, 3), r->l5[1]), 4);
  j0 = _mm512_srli_epi32 (c0, 2);
  j1 = _mm512_srli_epi32 (c1, 2);
  c0 = step_up (c0, q0, _mm512_mask_blend_ps (_mm512_test_epi32_mask (j0, I32 (32)),
                                              _mm512_permutex2var_ps (r->l6[0], j0, r->l6[1]),
                                              _mm512_permutex2var_ps (r->l6[2], j0, r->l6[3])), 2);
  c1 = step_up (c1, q1, _mm512_mask_blend_ps (_mm512_test_epi32_mask (j1, I32 (32)),
                                              _mm512_permutex2var_ps (r->l6[0], j1, r->l6[1]),
                                              _mm512_permutex2var_ps (r->l6[2], j1, r->l6[3])), 2);
  j0 = _mm512_srli_epi32 (c0, 1);
  j1 = _mm512_srli_epi32 (c1, 1);
#define LEVEL_LAST(c, q, j) \
  c = step_up (c, q, \
               _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (64)), \
                                     _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (32)), \
                                                           _mm512_permutex2var_ps (r->l7[0], j, r->l7[1]), \
                                                           _mm512_permutex2var_ps (r->l7[2], j, r->l7[3])), \
                                     _mm512_mask_blend_ps (_mm512_test_epi32_mask (j, I32 (32)), \
                                                           _mm512_permutex2var_ps (r->l7[4], j, r->l7[5]), \
                                                           _mm512_permutex2var_ps (r->l7[6], j, r->l7[7]))), 1)
  LEVEL_LAST (c0, q0, j0);
  LEVEL_LAST (c1, q1, j1);
#undef LEVEL_LAST
  *out0 = c0;
  *out1 = c1;
}

/* The same for int4: up[0 .. 15] in one register (up[0] is never read). */
static inline __m512i
search4 (__m512 up,
         __m512 q)
{
  __m512i c = _mm512_setzero_si512 ();

  for (int step = 8; step >= 1; step /= 2)
    c = step_up (c, q, _mm512_permutexvar_ps (_mm512_add_epi32 (c, I32 (step)), up), step);
  return c;
}

/* The codes of sixteen quotients through optim-quant.h's packed[]: one
 * gather of the bucket's word, and the step inside the bucket found by
 * comparing low halves (the AVX2 level's rule). Where gathers run well
 * (Intel's cores) this is twice the speed of search8(). */
static inline __m512i
packed_codes (const _MixprecQuantTable *t,
              __m512                    q)
{
  __m512i u = _mm512_castps_si512 (q);
  __m512i sign = _mm512_srai_epi32 (u, 31);
  __mmask16 number = _mm512_cmp_ps_mask (q, q, _CMP_ORD_Q);
  __m512i v = _mm512_and_si512 (_mm512_srli_epi32 (u, 16), I32 (0x7FFF));
  /* key: the low half, complemented for negative q. */
  __m512i key = _mm512_and_si512 (_mm512_xor_si512 (u, sign), I32 (0xFFFF));
  __m512i idx, entry, code;
  __mmask16 step;

  v = _mm512_min_epi32 (_mm512_max_epi32 (v, I32 (_MIXPREC_QUANT_EXP_LO << 7)),
                        I32 ((_MIXPREC_QUANT_EXP_HI << 7) | 127));
  idx = _mm512_add_epi32 (_mm512_and_si512 (sign, I32 (_MIXPREC_QUANT_N_EXP << 7)),
                          _mm512_sub_epi32 (v, I32 (_MIXPREC_QUANT_EXP_LO << 7)));
  entry = _mm512_i32gather_epi32 (idx, (const int *) t->packed, 4);
  code = _mm512_srli_epi32 (entry, _MIXPREC_QUANT_PACKED_CODE_SHIFT);
  step = _mm512_cmpge_epi32_mask (key, _mm512_and_si512 (entry, I32 ((1 << _MIXPREC_QUANT_PACKED_CODE_SHIFT) - 1)));
  /* NaN: code 0, as every comparison of the search fails. */
  return _mm512_maskz_mov_epi32 (number, _mm512_mask_add_epi32 (code, step, code, I32 (1)));
}

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

  if (format == _MIXPREC_QFMT_INT8_DYNAMIC)
    {
      /* One load per element beats a gather where gathers are
       * microcoded; the product is the same one multiplication. */
      const float *map = _mixprec_qmap (8, is_signed);
      const uint8_t *b = (const uint8_t *) base + start;

      for (size_t i = 0; i < len; i++)
        out[i] = map[b[i]] * scale;
      return;
    }
  for (size_t i = 0; i < len; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (len - i);

      _mm512_mask_storeu_ps (out + i, m, _mm512_mul_ps (load_scaled (format, is_signed, base, start + i, m), s));
    }
}

int
_mixprec_quant_have_vbmi (void)
{
  __builtin_cpu_init ();
  return __builtin_cpu_supports ("avx512vbmi");
}

/* Sixty-four int8 codes at a time: each byte plane of the map (optim-quant.h's
 * planes[]) is two 128-entry byte permutes, one per half of the codes,
 * and two rounds of unpacks join the planes into floats. The unpacks
 * work inside 128-bit lanes, so the codes are first transposed as 4 x 4
 * dwords: lane L then holds codes 4L .. 4L+3 of each group of sixteen,
 * and the k-th join of the planes is codes 16k .. 16k+15 in order. */
__attribute__ ((target ("avx512f,avx512bw,avx512vl,avx512vbmi"))) static void
decode_int8_vbmi (const _MixprecQuantTable *t,
                  const uint8_t            *codes,
                  size_t                    len,
                  float                     scale,
                  float                    *out)
{
  static const int32_t transpose[16] __attribute__ ((aligned (64))) = {
    0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15
  };
  const __m512i order = _mm512_load_si512 (transpose);
  const __m512 s = _mm512_set1_ps (scale);
  __m512i plane[4][4];

  for (unsigned b = 0; b < 4; b++)
    for (unsigned k = 0; k < 4; k++)
      plane[b][k] = _mm512_load_si512 (t->planes[b] + 64 * k);
  for (size_t i = 0; i < len; i += 64)
    {
      size_t rem = len - i < 64 ? len - i : 64;
      __mmask64 m = rem == 64 ? ~(__mmask64) 0 : ((__mmask64) 1 << rem) - 1;
      __m512i c = _mm512_permutexvar_epi32 (order, _mm512_maskz_loadu_epi8 (m, codes + i));
      __mmask64 high = _mm512_movepi8_mask (c);
      __m512i p[4], lo01, hi01, lo23, hi23, joined[4];

      for (unsigned b = 0; b < 4; b++)
        p[b] = _mm512_mask_blend_epi8 (high, _mm512_permutex2var_epi8 (plane[b][0], c, plane[b][1]),
                                       _mm512_permutex2var_epi8 (plane[b][2], c, plane[b][3]));
      lo01 = _mm512_unpacklo_epi8 (p[0], p[1]);
      hi01 = _mm512_unpackhi_epi8 (p[0], p[1]);
      lo23 = _mm512_unpacklo_epi8 (p[2], p[3]);
      hi23 = _mm512_unpackhi_epi8 (p[2], p[3]);
      joined[0] = _mm512_unpacklo_epi16 (lo01, lo23);
      joined[1] = _mm512_unpackhi_epi16 (lo01, lo23);
      joined[2] = _mm512_unpacklo_epi16 (hi01, hi23);
      joined[3] = _mm512_unpackhi_epi16 (hi01, hi23);
      for (unsigned k = 0; k < 4 && 16 * k < rem; k++)
        _mm512_mask_storeu_ps (out + i + 16 * k, _mixprec_avx512_mask (rem - 16 * k),
                               _mm512_mul_ps (_mm512_castsi512_ps (joined[k]), s));
    }
}

void
_mixprec_quant_decode_avx512_vbmi (unsigned    format,
                                   int         is_signed,
                                   const void *base,
                                   size_t      start,
                                   size_t      len,
                                   float       scale,
                                   float      *out)
{
  const _MixprecQuantTable *t = format == _MIXPREC_QFMT_INT8_DYNAMIC
                                ? _mixprec_quant_table (8, is_signed) : NULL;

  if (t == NULL)
    {
      _mixprec_quant_decode_avx512 (format, is_signed, base, start, len, scale, out);
      return;
    }
  decode_int8_vbmi (t, (const uint8_t *) base + start, len, scale, out);
}

/* The saturating casts of the scaled floats on sixteen quotients, as
 * 32-bit lanes; NaN gives the format's positive quiet NaN. */
static inline __m512i
cast_f16 (__m512 q)
{
  __m512 c = _mm512_min_ps (_mm512_max_ps (q, _mm512_set1_ps (-65504.0f)), _mm512_set1_ps (65504.0f));
  __m512i h = _mm512_cvtepu16_epi32 (_mm512_cvtps_ph (c, _MM_FROUND_TO_NEAREST_INT));

  return _mm512_mask_mov_epi32 (h, _mm512_cmp_ps_mask (q, q, _CMP_UNORD_Q), I32 (0x7E00));
}

static inline __m512i
cast_bf16 (__m512 q)
{
  const __m512 big = _mm512_castsi512_ps (I32 (0x7F7F0000));
  __m512 c = _mm512_min_ps (_mm512_max_ps (q, _mm512_sub_ps (_mm512_setzero_ps (), big)), big);

  return _mm512_mask_mov_epi32 (_mixprec_avx512_f32_to_bf16_rne_epi32 (c),
                                _mm512_cmp_ps_mask (q, q, _CMP_UNORD_Q), I32 (0x7FC0));
}

static inline __m128i
cast_e4m3 (__m512 q)
{
  __m512 c = _mm512_min_ps (_mm512_max_ps (q, _mm512_set1_ps (-448.0f)), _mm512_set1_ps (448.0f));

  return _mm_mask_mov_epi8 (_mixprec_avx512_f32_to_e4m3_rne (c), _mm512_cmp_ps_mask (q, q, _CMP_UNORD_Q),
                            _mm_set1_epi8 (0x7F));
}

/* One loop per format, so that each keeps its tables in registers. */
static inline __attribute__ ((always_inline)) void
encode_loop (unsigned                  format,
             const _MixprecQuantTable *t,
             const float              *in,
             size_t                    len,
             void                     *base,
             size_t                    start,
             __m512                    s,
             int                       gather)
{
  Search8 search;
  __m512 up4 = _mm512_setzero_ps ();

  size_t i = 0;

  if (format == _MIXPREC_QFMT_INT8_DYNAMIC && gather)
    {
      for (; i < len; i += 16)
        {
          __mmask16 m = _mixprec_avx512_mask (len - i);
          __m512 q = _mm512_div_ps (_mm512_maskz_loadu_ps (m, in + i), s);

          _mm_mask_storeu_epi8 ((uint8_t *) base + start + i, m, _mm512_cvtepi32_epi8 (packed_codes (t, q)));
        }
      return;
    }
  if (format == _MIXPREC_QFMT_INT8_DYNAMIC)
    {
      search8_load (&search, t);
      for (; i + 32 <= len; i += 32)
        {
          __m512i c0, c1;

          search8x2 (&search, _mm512_div_ps (_mm512_loadu_ps (in + i), s),
                     _mm512_div_ps (_mm512_loadu_ps (in + i + 16), s), &c0, &c1);
          _mm_storeu_si128 ((__m128i *) ((uint8_t *) base + start + i), _mm512_cvtepi32_epi8 (c0));
          _mm_storeu_si128 ((__m128i *) ((uint8_t *) base + start + i + 16), _mm512_cvtepi32_epi8 (c1));
        }
    }
  else if (format == _MIXPREC_QFMT_INT4_DYNAMIC)
    up4 = _mm512_load_ps (t->up);
  for (; i < len; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (len - i);
      __m512 q = _mm512_div_ps (_mm512_maskz_loadu_ps (m, in + i), s);
      size_t at = start + i;

      if (format == _MIXPREC_QFMT_FLOAT16_SCALED)
        _mm256_mask_storeu_epi16 ((guint16 *) base + at, m, _mm512_cvtepi32_epi16 (cast_f16 (q)));
      else if (format == _MIXPREC_QFMT_BFLOAT16_SCALED)
        _mm256_mask_storeu_epi16 ((guint16 *) base + at, m, _mm512_cvtepi32_epi16 (cast_bf16 (q)));
      else if (format == _MIXPREC_QFMT_FLOAT8_E4M3_SCALED)
        _mm_mask_storeu_epi8 ((uint8_t *) base + at, m, cast_e4m3 (q));
      else if (format == _MIXPREC_QFMT_INT8_DYNAMIC)
        _mm_mask_storeu_epi8 ((uint8_t *) base + at, m, _mm512_cvtepi32_epi8 (search8 (&search, q)));
      else
        {
          /* Pairs of codes into bytes, even element low; an odd last
           * element goes through its nibble alone. */
          __m512i c = search4 (up4, q);
          __m512i w = _mm512_or_si512 (c, _mm512_srli_epi64 (c, 28));
          size_t rem = len - i < 16 ? len - i : 16;

          /* Lane 2j now holds code 2j | code 2j+1 << 4 in its low byte. */
          w = _mm512_and_si512 (w, _mm512_set1_epi64 (0xFF));
          _mm_mask_storeu_epi8 ((uint8_t *) base + at / 2, _mixprec_avx512_mask (rem / 2),
                                _mm512_cvtepi64_epi8 (w));
          if (rem % 2 != 0)
            {
              uint32_t codes[16];

              _mm512_storeu_si512 (codes, c);
              _mixprec_state_store_code (format, base, at + rem - 1, codes[rem - 1]);
            }
        }
    }
}

static float
encode_block (unsigned     format,
              int          is_signed,
              const float *in,
              size_t       len,
              void        *base,
              size_t       start,
              int          gather)
{
  const _MixprecQuantTable *t = NULL;
  __m512i amax = _mm512_setzero_si512 ();
  __m512 s;
  float scale;

  for (size_t i = 0; i < len; i += 16)
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
          for (size_t i = 0; i < len; i++)
            _mixprec_state_store_code (format, base, start + i,
                                       _mixprec_state_encode1 (format, is_signed, in[i], scale));
          return scale;
        }
    }
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT16_SCALED:
      encode_loop (_MIXPREC_QFMT_FLOAT16_SCALED, t, in, len, base, start, s, 0);
      break;
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      encode_loop (_MIXPREC_QFMT_BFLOAT16_SCALED, t, in, len, base, start, s, 0);
      break;
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
      encode_loop (_MIXPREC_QFMT_FLOAT8_E4M3_SCALED, t, in, len, base, start, s, 0);
      break;
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      if (gather && t->packed_ok)
        encode_loop (_MIXPREC_QFMT_INT8_DYNAMIC, t, in, len, base, start, s, 1);
      else
        encode_loop (_MIXPREC_QFMT_INT8_DYNAMIC, t, in, len, base, start, s, 0);
      break;
    default:
      encode_loop (_MIXPREC_QFMT_INT4_DYNAMIC, t, in, len, base, start, s, 0);
      break;
    }
  return scale;
}

float
_mixprec_quant_encode_avx512_search (unsigned     format,
                                     int          is_signed,
                                     const float *in,
                                     size_t       len,
                                     void        *base,
                                     size_t       start)
{
  return encode_block (format, is_signed, in, len, base, start, 0);
}

float
_mixprec_quant_encode_avx512_gather (unsigned     format,
                                     int          is_signed,
                                     const float *in,
                                     size_t       len,
                                     void        *base,
                                     size_t       start)
{
  return encode_block (format, is_signed, in, len, base, start, 1);
}

/* AMD's cores microcode gathers, so the int8 codes come from the search
 * in registers there and from packed[] elsewhere; the bits are the same. */
float
_mixprec_quant_encode_avx512 (unsigned     format,
                              int          is_signed,
                              const float *in,
                              size_t       len,
                              void        *base,
                              size_t       start)
{
  static int gather = -1;

  if (gather < 0)
    {
      __builtin_cpu_init ();
      gather = !__builtin_cpu_is ("amd");
    }
  return encode_block (format, is_signed, in, len, base, start, gather);
}

/* ------------------------------------------------------------ masters */

static inline __m512
widen_bf16 (__m512i b)
{
  return _mm512_castsi512_ps (_mm512_slli_epi32 (b, 16));
}

static inline __m512i
round_bf16 (__m512 x)
{
  return _mixprec_avx512_f32_to_bf16_rne_epi32 (x);
}

void
_mixprec_quant_master_load_avx512 (unsigned       master_format,
                                   const guint16 *working,
                                   const void    *extra,
                                   size_t         len,
                                   float         *out)
{
  for (size_t i = 0; i < len; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (len - i);
      __m512i w = _mm512_cvtepu16_epi32 (_mm256_maskz_loadu_epi16 (m, working + i));

      if (master_format == _MIXPREC_QMASTER_REMAINDER)
        {
          __m512i rem = _mm512_cvtepi16_epi32 (_mm256_maskz_loadu_epi16 (m, (const int16_t *) extra + i));
          __mmask16 neg = _mm512_cmplt_epi32_mask (rem, _mm512_setzero_si512 ());
          __m512i hi = _mm512_mask_sub_epi32 (w, neg, w, I32 (1));

          w = _mm512_or_si512 (_mm512_slli_epi32 (hi, 16), _mm512_and_si512 (rem, I32 (0xFFFF)));
          _mm512_mask_storeu_ps (out + i, m, _mm512_castsi512_ps (w));
        }
      else
        _mm512_mask_storeu_ps (out + i, m, widen_bf16 (w));
    }
}

void
_mixprec_quant_master_store_avx512 (unsigned     master_format,
                                    const float *in,
                                    size_t       len,
                                    guint16     *working,
                                    void        *extra)
{
  for (size_t i = 0; i < len; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (len - i);

      if (master_format == _MIXPREC_QMASTER_REMAINDER)
        {
          __m512i u = _mm512_maskz_loadu_epi32 (m, in + i);
          __m512i lo = _mm512_and_si512 (u, I32 (0xFFFF));
          __mmask16 up = _mm512_cmpge_epu32_mask (lo, I32 (0x8000));
          __m512i hi = _mm512_srli_epi32 (u, 16);

          hi = _mm512_mask_add_epi32 (hi, up, hi, I32 (1));
          _mm256_mask_storeu_epi16 (working + i, m, _mm512_cvtepi32_epi16 (hi));
          _mm256_mask_storeu_epi16 ((int16_t *) extra + i, m, _mm512_cvtepi32_epi16 (lo));
        }
      else
        {
          /* _mixprec_kahan_step(), sixteen at a time. */
          guint16 *comp = (guint16 *) extra + i;
          __m512 p0 = widen_bf16 (_mm512_cvtepu16_epi32 (_mm256_maskz_loadu_epi16 (m, working + i)));
          __m512 c = widen_bf16 (_mm512_cvtepu16_epi32 (_mm256_maskz_loadu_epi16 (m, comp)));
          __m512 u = _mm512_sub_ps (_mm512_maskz_loadu_ps (m, in + i), p0);
          __m512 c1 = widen_bf16 (round_bf16 (_mm512_add_ps (c, u)));
          __m512i p1 = round_bf16 (_mm512_add_ps (p0, c1));
          __m512 d = widen_bf16 (round_bf16 (_mm512_sub_ps (p0, widen_bf16 (p1))));

          _mm256_mask_storeu_epi16 (working + i, m, _mm512_cvtepi32_epi16 (p1));
          _mm256_mask_storeu_epi16 (comp, m, _mm512_cvtepi32_epi16 (round_bf16 (_mm512_add_ps (c1, d))));
        }
    }
}
