/* mixprec-zeropp-avx2.c — ZeRO++'s block codes eight lanes at a time,
 * bit-identical to the scalar kernel of mixprec-zeropp.c (the rules of
 * numeric/numeric-zeropp.h). Compiled with AVX2/F16C/FMA enabled; called
 * only after _mixprec_cpu_simd_level() said the CPU runs it. A tail
 * shorter than a vector goes through a padded copy. */
#include "config.h"

#include <string.h>

#include "mixprec-avx2-private.h"
#include "mixprec-zeropp-private.h"
#include "numeric/numeric-zeropp.h"

/* Eight fp16 values from @h (@n of them, the rest padded with @pad). */
static inline __m128i
load8 (const guint16 *h, gsize n, guint16 pad)
{
  guint16 tail[8];

  if (n >= 8)
    return _mm_loadu_si128 ((const __m128i *) (gconstpointer) h);
  for (gsize i = 0; i < 8; i++)
    tail[i] = i < n ? h[i] : pad;
  return _mm_loadu_si128 ((const __m128i *) (gconstpointer) tail);
}

static gfloat
codes_avx2 (const guint16 *h,
            gsize          n,
            guint          bits,
            gint8         *codes)
{
  const __m256i nan_from = _MIXPREC_AVX2_I32 (0x7C00), none = _MIXPREC_AVX2_I32 (-1);
  const __m256 hi = _mm256_set1_ps ((gfloat) ((1 << (bits - 1)) - 1));
  const __m256 lo = _mm256_set1_ps ((gfloat) -(1 << (bits - 1)));
  __m256i best = none;
  __m256 scale;
  gint32 lanes[8], top = -1;
  gfloat s;

  /* The largest magnitude, as bits: fp16 NaNs (above 0x7C00), and the
   * padding (a NaN), count -1. */
  for (gsize i = 0; i < n; i += 8)
    {
      __m256i a = _mm256_and_si256 (_mm256_cvtepu16_epi32 (load8 (h + i, n - i, 0x7E00)),
                                    _MIXPREC_AVX2_I32 (0x7FFF));

      a = _mm256_blendv_epi8 (a, none, _mm256_cmpgt_epi32 (a, nan_from));
      best = _mm256_max_epi32 (best, a);
    }
  _mm256_storeu_si256 ((__m256i *) (gpointer) lanes, best);
  for (guint j = 0; j < 8; j++)
    top = MAX (top, lanes[j]);
  s = _mixprec_zpp_scale_of_mag (top, bits);
  scale = _mm256_set1_ps (s);
  /* rint, then the clamp; a NaN product codes as 0. */
  for (gsize i = 0; i < n; i += 8)
    {
      __m256 v = _mm256_mul_ps (_mm256_cvtph_ps (load8 (h + i, n - i, 0)), scale);
      __m256i number = _mm256_castps_si256 (_mm256_cmp_ps (v, v, _CMP_ORD_Q));
      __m256 r = _mm256_round_ps (v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m256i q = _mm256_and_si256 (_mm256_cvtps_epi32 (_mm256_min_ps (_mm256_max_ps (r, lo), hi)), number);
      __m128i w = _mm_packs_epi32 (_mm256_castsi256_si128 (q), _mm256_extracti128_si256 (q, 1));
      __m128i b = _mm_packs_epi16 (w, w);

      if (n - i >= 8)
        _mm_storel_epi64 ((__m128i *) (gpointer) (codes + i), b);
      else
        {
          gint8 tail[16];

          _mm_storeu_si128 ((__m128i *) (gpointer) tail, b);
          memcpy (codes + i, tail, n - i);
        }
    }
  return s;
}

const _MixprecZeroppKernels _mixprec_zeropp_kernels_avx2 = { codes_avx2 };
