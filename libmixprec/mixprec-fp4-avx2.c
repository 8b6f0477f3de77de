/* mixprec-fp4-avx2.c — the 8-lane AVX2 E2M1 cast of mixprec-fp4.c,
 * bit-identical to the scalar one. Compiled with AVX2/F16C/FMA enabled;
 * called only after _mixprec_cpu_simd_level() said the CPU runs it. Tails
 * shorter than a vector go through the scalar element code. */
#include "config.h"

#include "mixprec-avx2-private.h"
#include "mixprec-fp4-private.h"

/* _mixprec_fp4_cast_one()'s op on eight lanes. The clamp keeps NaN: MINPS
 * and MAXPS return their second operand when either is NaN. */
static inline __m256
op8 (guint  op,
     __m256 x,
     __m256 factor)
{
  if (op == _MIXPREC_FP4_OP_DIV)
    return _mm256_div_ps (x, factor);
  if (op == _MIXPREC_FP4_OP_MUL_CLAMP)
    {
      /* A NaN x gives itself quieted, as _mixprec_nvfp4_scaled() says. */
      __m256 quiet = _mm256_or_ps (x, _mm256_castsi256_ps (_MIXPREC_AVX2_I32 (0x00400000)));
      __m256 y = _mm256_blendv_ps (_mm256_mul_ps (x, factor), quiet, _mm256_cmp_ps (x, x, _CMP_UNORD_Q));

      y = _mm256_min_ps (_mm256_set1_ps (_MIXPREC_E2M1_MAX), y);
      return _mm256_max_ps (_mm256_set1_ps (-_MIXPREC_E2M1_MAX), y);
    }
  return x;
}

/* _mixprec_f32_to_e2m1_rne() / _sr() of eight lanes, one code per lane. */
static inline __m256i
e2m1_8 (__m256   y,
        gboolean stochastic,
        __m256i  r)
{
  __m256i u = _mm256_castps_si256 (y);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));
  __m256i sign = _mm256_and_si256 (_mm256_srli_epi32 (u, 28), _MIXPREC_AVX2_I32 (0x8));
  __m256i nan = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F800000));
  __m256i sat = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x40BFFFFF));
  __m256i code, rn, nan_code;

  code = stochastic ? _mixprec_avx2_round_sr_bits (a, r, 1, _MIXPREC_E2M1_EMIN_B)
                    : _mixprec_avx2_round_rne_bits (a, 1, _MIXPREC_E2M1_EMIN_B);
  code = _mm256_min_epu32 (code, _MIXPREC_AVX2_I32 (_MIXPREC_E2M1_MAX_CODE));
  code = _mm256_blendv_epi8 (code, _MIXPREC_AVX2_I32 (_MIXPREC_E2M1_MAX_CODE), sat);

  rn = _mm256_sub_epi32 (a, _MIXPREC_AVX2_I32 ((127u - 1u) << 23));
  nan_code = _mm256_add_epi32 (rn, _MIXPREC_AVX2_I32 ((1u << 21) - 1));
  nan_code = _mm256_add_epi32 (nan_code, _mm256_and_si256 (_mm256_srli_epi32 (rn, 22), _MIXPREC_AVX2_I32 (1)));
  nan_code = _mm256_and_si256 (_mm256_srli_epi32 (nan_code, 22), _MIXPREC_AVX2_I32 (0xFF));
  code = _mm256_blendv_epi8 (code, nan_code, nan);
  return _mm256_or_si256 (code, sign);
}

/* Eight codes (below 16) to four bytes, lane 2j in the low nibble of byte j. */
static inline guint32
pack8 (__m256i c)
{
  __m256i t = _mm256_or_si256 (c, _mm256_srli_epi64 (c, 28));
  __m256i even = _mm256_permutevar8x32_epi32 (t, _mm256_setr_epi32 (0, 2, 4, 6, 0, 2, 4, 6));
  __m128i w = _mm256_castsi256_si128 (even);

  w = _mm_and_si128 (w, _mm_set1_epi32 (0xFF));
  w = _mm_packus_epi32 (w, w);
  w = _mm_packus_epi16 (w, w);
  return (guint32) _mm_cvtsi128_si32 (w);
}

static void
cast_avx2 (guint         op,
           gfloat        factor,
           const gfloat *src,
           gsize         n,
           gboolean      stochastic,
           guint64       seed,
           guint64       first_index,
           guint8       *dst)
{
  const __m256 f = _mm256_set1_ps (factor);
  const __m256i no_bits = _mm256_setzero_si256 ();
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m256i r = stochastic ? _mixprec_avx2_sr_bits (seed, first_index + i) : no_bits;
      guint32 packed = pack8 (e2m1_8 (op8 (op, _mm256_loadu_ps (src + i), f), stochastic, r));

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

const _MixprecFp4Kernels _mixprec_fp4_kernels_avx2 = {
  "avx2",
  cast_avx2,
};
