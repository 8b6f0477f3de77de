/* mixprec-fp8-avx2.c — 8-lane AVX2 versions of the float8 cast kernels of
 * mixprec-fp8.c, bit-identical to them. Compiled with AVX2/F16C/FMA
 * enabled; called only after _mixprec_cpu_simd_level() said the CPU runs
 * them. Tails shorter than a vector go through the scalar element code. */
#include "config.h"

#include "mixprec-avx2-private.h"
#include "mixprec-fp8-private.h"

/* Saturation before the cast: magnitudes at or beyond max (Inf included)
 * become max, NaN lanes pass unchanged, the sign stays. */
static inline __m256
clamp_magnitude (__m256  y,
                 guint32 max_bits)
{
  __m256i u = _mm256_castps_si256 (y);
  __m256i a = _mm256_and_si256 (u, _MIXPREC_AVX2_I32 (0x7FFFFFFF));
  __m256i nan = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F800000));
  __m256i c = _mm256_blendv_epi8 (_mm256_min_epi32 (a, _MIXPREC_AVX2_I32 (max_bits)), a, nan);

  return _mm256_castsi256_ps (_mm256_or_si256 (c, _mm256_andnot_si256 (_MIXPREC_AVX2_I32 (0x7FFFFFFF), u)));
}

/* _mixprec_fp8_cast() of eight lanes, as eight bytes in the low half. */
static inline __m128i
cast8 (guint    format,
       gboolean saturate,
       __m256   x,
       __m256   scale)
{
  __m256 y = _mm256_mul_ps (x, scale);

  if (format == _MIXPREC_FP8_E4M3)
    return _mixprec_avx2_f32_to_e4m3_rne (saturate ? clamp_magnitude (y, _MIXPREC_E4M3_MAX_BITS) : y);
  return _mixprec_avx2_f32_to_e5m2_rne (saturate ? clamp_magnitude (y, _MIXPREC_E5M2_MAX_BITS) : y);
}

/* The magnitude bits of eight lanes, NaN lanes zeroed; sets *nan_seen's
 * lanes that were NaN. */
static inline __m256i
magnitude (__m256   x,
           __m256i *nan_seen)
{
  __m256i a = _mm256_and_si256 (_mm256_castps_si256 (x), _MIXPREC_AVX2_I32 (0x7FFFFFFF));
  __m256i nan = _mm256_cmpgt_epi32 (a, _MIXPREC_AVX2_I32 (0x7F800000));

  *nan_seen = _mm256_or_si256 (*nan_seen, nan);
  return _mm256_andnot_si256 (nan, a);
}

static inline guint32
hmax_epu32 (__m256i m)
{
  __m128i h = _mm_max_epu32 (_mm256_castsi256_si128 (m), _mm256_extracti128_si256 (m, 1));

  h = _mm_max_epu32 (h, _mm_shuffle_epi32 (h, _MM_SHUFFLE (1, 0, 3, 2)));
  h = _mm_max_epu32 (h, _mm_shuffle_epi32 (h, _MM_SHUFFLE (2, 3, 0, 1)));
  return (guint32) _mm_cvtsi128_si32 (h);
}

static void
quantize_avx2 (guint         format,
               gboolean      saturate,
               gfloat        scale,
               const gfloat *src,
               guint8       *dst,
               gsize         n,
               guint32      *amax_bits)
{
  const __m256 s = _mm256_set1_ps (scale);
  __m256i m = _mm256_setzero_si256 (), nan = _mm256_setzero_si256 ();
  guint32 mm;
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m256 x = _mm256_loadu_ps (src + i);

      if (amax_bits != NULL)
        m = _mm256_max_epu32 (m, magnitude (x, &nan));
      _mm_storel_epi64 ((__m128i *) (dst + i), cast8 (format, saturate, x, s));
    }
  if (amax_bits == NULL)
    {
      for (; i < n; i++)
        dst[i] = _mixprec_fp8_cast (format, saturate, src[i], scale);
      return;
    }
  mm = MAX (*amax_bits, hmax_epu32 (m));
  for (; i < n; i++)
    {
      mm = _mixprec_fp8_amax_bits (mm, src[i]);
      dst[i] = _mixprec_fp8_cast (format, saturate, src[i], scale);
    }
  *amax_bits = mm;
}

static void
amax_avx2 (const gfloat *src,
           gsize         n,
           guint32      *amax_bits)
{
  /* Four accumulators: the loop is bound by the max's latency otherwise. */
  __m256i m0 = _mm256_setzero_si256 (), m1 = m0, m2 = m0, m3 = m0, nan = m0;
  guint32 mm;
  gsize i = 0;

  for (; i + 32 <= n; i += 32)
    {
      m0 = _mm256_max_epu32 (m0, magnitude (_mm256_loadu_ps (src + i), &nan));
      m1 = _mm256_max_epu32 (m1, magnitude (_mm256_loadu_ps (src + i + 8), &nan));
      m2 = _mm256_max_epu32 (m2, magnitude (_mm256_loadu_ps (src + i + 16), &nan));
      m3 = _mm256_max_epu32 (m3, magnitude (_mm256_loadu_ps (src + i + 24), &nan));
    }
  for (; i + 8 <= n; i += 8)
    m0 = _mm256_max_epu32 (m0, magnitude (_mm256_loadu_ps (src + i), &nan));
  m0 = _mm256_max_epu32 (_mm256_max_epu32 (m0, m1), _mm256_max_epu32 (m2, m3));
  mm = MAX (*amax_bits, hmax_epu32 (m0));
  for (; i < n; i++)
    mm = _mixprec_fp8_amax_bits (mm, src[i]);
  *amax_bits = mm;
}

static void
mx_quantize_avx2 (guint         format,
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
      __m256i m = _mm256_setzero_si256 (), nan = _mm256_setzero_si256 ();
      gboolean has_nan;
      guint32 mm;
      gfloat inv;
      __m256 vinv;
      gsize i = 0;

      for (; i + 8 <= len; i += 8)
        m = _mm256_max_epu32 (m, magnitude (_mm256_loadu_ps (s + i), &nan));
      mm = hmax_epu32 (m);
      has_nan = !_mm256_testz_si256 (nan, nan);
      for (; i < len; i++)
        {
          mm = _mixprec_fp8_amax_bits (mm, s[i]);
          has_nan |= (_mixprec_f32_bits (s[i]) & 0x7FFFFFFF) > 0x7F800000;
        }
      scales[b] = _mixprec_mx_scale_byte (mm, has_nan, format);
      inv = _mixprec_mx_inv_scale (scales[b]);
      vinv = _mm256_set1_ps (inv);
      i = 0;
      if (scales[b] != _MIXPREC_E8M0_NAN)   /* NaN blocks are rare: scalar */
        for (; i + 8 <= len; i += 8)
          _mm_storel_epi64 ((__m128i *) (d + i), cast8 (format, TRUE, _mm256_loadu_ps (s + i), vinv));
      for (; i < len; i++)
        d[i] = _mixprec_mx_cast (format, s[i], inv);
    }
}

const _MixprecFp8Kernels _mixprec_fp8_kernels_avx2 = {
  "avx2",
  quantize_avx2,
  amax_avx2,
  mx_quantize_avx2,
};
