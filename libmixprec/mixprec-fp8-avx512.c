/* mixprec-fp8-avx512.c — 16-lane AVX-512 versions of the float8 cast
 * kernels of mixprec-fp8.c, bit-identical to them. Compiled with AVX-512
 * F/BW/VL enabled; called only after _mixprec_cpu_simd_level() said the
 * CPU runs them. Tails go through the same lanes under a mask, which
 * neither reads nor writes past the end of a buffer (masked-off lanes
 * load as +0, which no amax notices). */
#include "config.h"

#include "mixprec-avx512-private.h"
#include "mixprec-fp8-private.h"

static inline __m512
clamp_magnitude (__m512  y,
                 guint32 max_bits)
{
  __m512i u = _mm512_castps_si512 (y);
  __m512i a = _mm512_and_si512 (u, _MIXPREC_AVX512_I32 (0x7FFFFFFF));
  __mmask16 nan = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F800000));
  __m512i c = _mm512_mask_mov_epi32 (_mm512_min_epi32 (a, _MIXPREC_AVX512_I32 (max_bits)), nan, a);

  return _mm512_castsi512_ps (_mm512_or_si512 (c, _mm512_andnot_si512 (_MIXPREC_AVX512_I32 (0x7FFFFFFF), u)));
}

/* _mixprec_fp8_cast() of sixteen lanes. */
static inline __m128i
cast16 (guint    format,
        gboolean saturate,
        __m512   x,
        __m512   scale)
{
  __m512 y = _mm512_mul_ps (x, scale);

  if (format == _MIXPREC_FP8_E4M3)
    return _mixprec_avx512_f32_to_e4m3_rne (saturate ? clamp_magnitude (y, _MIXPREC_E4M3_MAX_BITS) : y);
  return _mixprec_avx512_f32_to_e5m2_rne (saturate ? clamp_magnitude (y, _MIXPREC_E5M2_MAX_BITS) : y);
}

/* Magnitude bits, NaN lanes zeroed and recorded in *nan_seen. */
static inline __m512i
magnitude (__m512     x,
           __mmask16 *nan_seen)
{
  __m512i a = _mm512_and_si512 (_mm512_castps_si512 (x), _MIXPREC_AVX512_I32 (0x7FFFFFFF));
  __mmask16 nan = _mm512_cmpgt_epi32_mask (a, _MIXPREC_AVX512_I32 (0x7F800000));

  *nan_seen |= nan;
  return _mm512_maskz_mov_epi32 ((__mmask16) ~nan, a);
}

static void
quantize_avx512 (guint         format,
                 gboolean      saturate,
                 gfloat        scale,
                 const gfloat *src,
                 guint8       *dst,
                 gsize         n,
                 guint32      *amax_bits)
{
  const __m512 s = _mm512_set1_ps (scale);
  __m512i m = _mm512_setzero_si512 ();
  __mmask16 nan = 0;

  for (gsize i = 0; i < n; i += 16)
    {
      __mmask16 k = _mixprec_avx512_mask (n - i);
      __m512 x = _mm512_maskz_loadu_ps (k, src + i);

      if (amax_bits != NULL)
        m = _mm512_max_epu32 (m, magnitude (x, &nan));
      _mm_mask_storeu_epi8 (dst + i, k, cast16 (format, saturate, x, s));
    }
  if (amax_bits != NULL)
    *amax_bits = MAX (*amax_bits, (guint32) _mm512_reduce_max_epu32 (m));
}

static void
amax_avx512 (const gfloat *src,
             gsize         n,
             guint32      *amax_bits)
{
  __m512i m0 = _mm512_setzero_si512 (), m1 = m0, m2 = m0, m3 = m0;
  __mmask16 nan = 0;
  gsize i = 0;

  for (; i + 64 <= n; i += 64)
    {
      m0 = _mm512_max_epu32 (m0, magnitude (_mm512_loadu_ps (src + i), &nan));
      m1 = _mm512_max_epu32 (m1, magnitude (_mm512_loadu_ps (src + i + 16), &nan));
      m2 = _mm512_max_epu32 (m2, magnitude (_mm512_loadu_ps (src + i + 32), &nan));
      m3 = _mm512_max_epu32 (m3, magnitude (_mm512_loadu_ps (src + i + 48), &nan));
    }
  for (; i < n; i += 16)
    m0 = _mm512_max_epu32 (m0, magnitude (_mm512_maskz_loadu_ps (_mixprec_avx512_mask (n - i), src + i), &nan));
  m0 = _mm512_max_epu32 (_mm512_max_epu32 (m0, m1), _mm512_max_epu32 (m2, m3));
  *amax_bits = MAX (*amax_bits, (guint32) _mm512_reduce_max_epu32 (m0));
}

static void
mx_quantize_avx512 (guint         format,
                    guint         block_size,
                    const gfloat *src,
                    gsize         n,
                    guint8       *dst,
                    guint8       *scales)
{
  for (gsize start = 0, b = 0; start < n; start += block_size, b++)
    {
      const gfloat *s = src + start;
      guint8 *d = dst + start;
      gsize len = MIN ((gsize) block_size, n - start);
      __m512i m = _mm512_setzero_si512 ();
      __mmask16 nan = 0;
      __m512 vinv;

      for (gsize i = 0; i < len; i += 16)
        m = _mm512_max_epu32 (m, magnitude (_mm512_maskz_loadu_ps (_mixprec_avx512_mask (len - i), s + i), &nan));
      scales[b] = _mixprec_mx_scale_byte ((guint32) _mm512_reduce_max_epu32 (m), nan != 0, format);
      if (scales[b] == _MIXPREC_E8M0_NAN)
        {
          /* NaN blocks are rare: the scalar element code. */
          for (gsize i = 0; i < len; i++)
            d[i] = _mixprec_mx_cast (format, s[i], 0.0f);
          continue;
        }
      vinv = _mm512_set1_ps (_mixprec_mx_inv_scale (scales[b]));
      for (gsize i = 0; i < len; i += 16)
        {
          __mmask16 k = _mixprec_avx512_mask (len - i);

          _mm_mask_storeu_epi8 (d + i, k, cast16 (format, TRUE, _mm512_maskz_loadu_ps (k, s + i), vinv));
        }
    }
}

const _MixprecFp8Kernels _mixprec_fp8_kernels_avx512 = {
  "avx512",
  quantize_avx512,
  amax_avx512,
  mx_quantize_avx512,
};
