/* mixprec-fp4-avx512.c — the 16-lane AVX-512 E2M1 cast of mixprec-fp4.c,
 * bit-identical to the scalar one. Compiled with AVX-512 F/BW/VL enabled;
 * called only after _mixprec_cpu_simd_level() said the CPU runs it. Tails
 * shorter than a vector go through the scalar element code. */
#include "config.h"

#include "mixprec-avx512-private.h"
#include "mixprec-fp4-private.h"

/* As op8() of mixprec-fp4-avx2.c: the clamp keeps NaN, MINPS and MAXPS
 * returning their second operand when either is NaN. */
static inline __m512
op16 (guint  op,
      __m512 x,
      __m512 factor)
{
  if (op == _MIXPREC_FP4_OP_DIV)
    return _mm512_div_ps (x, factor);
  if (op == _MIXPREC_FP4_OP_MUL_CLAMP)
    {
      /* A NaN x gives itself quieted, as _mixprec_nvfp4_scaled() says. */
      __m512 quiet = _mm512_castsi512_ps (_mm512_or_si512 (_mm512_castps_si512 (x),
                                                           _mm512_set1_epi32 (0x00400000)));
      __m512 y = _mm512_mask_mov_ps (_mm512_mul_ps (x, factor), _mm512_cmp_ps_mask (x, x, _CMP_UNORD_Q),
                                     quiet);

      y = _mm512_min_ps (_mm512_set1_ps (_MIXPREC_E2M1_MAX), y);
      return _mm512_max_ps (_mm512_set1_ps (-_MIXPREC_E2M1_MAX), y);
    }
  return x;
}

static inline __m512i
e2m1_16 (__m512   y,
         gboolean stochastic,
         __m512i  r)
{
  __m512i u = _mm512_castps_si512 (y);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));
  __m512i sign = _mm512_and_si512 (_mm512_srli_epi32 (u, 28), _MIXPREC_AVX512_I32 (0x8));
  __mmask16 nan = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F800000));
  __mmask16 sat = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x40BFFFFF));
  __m512i code, rn, nan_code;

  code = stochastic ? _mixprec_avx512_round_sr_bits (a, r, 1, _MIXPREC_E2M1_EMIN_B)
                    : _mixprec_avx512_round_rne_bits (a, 1, _MIXPREC_E2M1_EMIN_B);
  code = _mm512_min_epu32 (code, _MIXPREC_AVX512_I32 (_MIXPREC_E2M1_MAX_CODE));
  code = _mm512_mask_mov_epi32 (code, sat, _MIXPREC_AVX512_I32 (_MIXPREC_E2M1_MAX_CODE));

  rn = _mm512_sub_epi32 (a, _MIXPREC_AVX512_I32 ((127u - 1u) << 23));
  nan_code = _mm512_add_epi32 (rn, _MIXPREC_AVX512_I32 ((1u << 21) - 1));
  nan_code = _mm512_add_epi32 (nan_code, _mm512_and_si512 (_mm512_srli_epi32 (rn, 22), _MIXPREC_AVX512_I32 (1)));
  nan_code = _mm512_and_si512 (_mm512_srli_epi32 (nan_code, 22), _MIXPREC_AVX512_I32 (0xFF));
  code = _mm512_mask_mov_epi32 (code, nan, nan_code);
  return _mm512_or_si512 (code, sign);
}

/* Sixteen codes (below 16) to eight bytes, lane 2j in the low nibble of byte j. */
static inline guint64
pack16 (__m512i c)
{
  __m512i t = _mm512_or_si512 (c, _mm512_srli_epi64 (c, 28));
  /* the low 32 bits of each 64-bit lane hold a byte: truncate to bytes */
  __m128i b = _mm512_cvtepi64_epi8 (_mm512_and_si512 (t, _mm512_set1_epi64 (0xFF)));

  return (guint64) _mm_cvtsi128_si64 (b);
}

static void
cast_avx512 (guint         op,
             gfloat        factor,
             const gfloat *src,
             gsize         n,
             gboolean      stochastic,
             guint64       seed,
             guint64       first_index,
             guint8       *dst)
{
  const __m512 f = _mm512_set1_ps (factor);
  const __m512i no_bits = _mm512_setzero_si512 ();
  gsize i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m512i r = stochastic ? _mixprec_avx512_sr_bits (seed, first_index + i) : no_bits;
      guint64 packed = pack16 (e2m1_16 (op16 (op, _mm512_loadu_ps (src + i), f), stochastic, r));

      memcpy (dst + i / 2, &packed, sizeof packed);
    }
  for (; i + 1 < n; i += 2)
    {
      guint32 r0 = stochastic ? _mixprec_sr_bits (seed, first_index + i) : 0;
      guint32 r1 = stochastic ? _mixprec_sr_bits (seed, first_index + i + 1) : 0;

      dst[i / 2] = (guint8) (_mixprec_fp4_cast_one (op, factor, src[i], stochastic, r0) |
                             (_mixprec_fp4_cast_one (op, factor, src[i + 1], stochastic, r1) << 4));
    }
}

const _MixprecFp4Kernels _mixprec_fp4_kernels_avx512 = {
  "avx512",
  cast_avx512,
};
