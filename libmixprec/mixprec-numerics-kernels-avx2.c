/* mixprec-numerics-kernels-avx2.c — AVX2 versions of the per-tensor
 * numerics kernels: counts and maxima are exact in any order; the sums
 * keep the scalar reference's eight lanes (element i of each eight in
 * lane i, the gradient's squares in double over two registers, the
 * update's in FP32 in one) and its additions, each product rounded on
 * its own as the scalar code rounds it. Compiled with -mavx2 -mf16c
 * -mfma; called only on a CPU that has them. */
#include "config.h"

/* A fused multiply-add would round d * d + sum once where the scalar code
 * rounds twice. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "mixprec-numerics-kernels-private.h"
#include "mixprec-dtype-private.h"

/* Eight values of @dtype at @p widened to FP32 (exactly, as the scalar
 * conversions do). */
static inline __m256
load8 (gconstpointer src, MixprecDType dtype, gsize i)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_BFLOAT16:
      return _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_cvtepu16_epi32 (
        _mm_loadu_si128 ((const __m128i *) ((const guint16 *) src + i))), 16));
    case MIXPREC_DTYPE_FLOAT16:
      return _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) ((const guint16 *) src + i)));
    default:
      return _mm256_loadu_ps ((const gfloat *) src + i);
    }
}

static guint32
sum_epi32 (__m256i v)
{
  guint32 lanes[8], sum = 0;

  _mm256_storeu_si256 ((__m256i *) lanes, v);
  for (guint k = 0; k < 8; k++)
    sum += lanes[k];
  return sum;
}

void
_mixprec_numerics_grad_avx2 (gconstpointer       src,
                             MixprecDType        dtype,
                             gsize               n,
                             guint32             under,
                             guint32             over,
                             _MixprecGradCounts *out)
{
  const __m256i abs_mask = _mm256_set1_epi32 (0x7fffffff);
  const __m256i inf = _mm256_set1_epi32 (0x7f800000);
  const __m256i zero = _mm256_setzero_si256 (), ones = _mm256_set1_epi32 (-1);
  /* Unsigned a < b as signed: every |v| bits and bound is below 2^31. */
  const __m256i lo = _mm256_set1_epi32 ((gint32) under), hi = _mm256_set1_epi32 ((gint32) over);
  __m256i nonfinite = zero, nonzero = zero, nunder = zero, nover = zero, amax = zero;
  __m256d slo = _mm256_setzero_pd (), shi = slo;
  _MixprecGradCounts c = { 0 };
  guint32 lanes[8];
  gdouble lane[8];
  gsize i = 0;

  if (!_mixprec_numerics_vector_dtype (dtype))
    {
      _mixprec_numerics_grad (src, dtype, n, under, over, out);
      return;
    }
  for (; i + 8 <= n; i += 8)
    {
      __m256 x = load8 (src, dtype, i);
      __m256i a = _mm256_and_si256 (_mm256_castps_si256 (x), abs_mask);
      __m256i finite = _mm256_cmpgt_epi32 (inf, a);
      __m256i nz = _mm256_andnot_si256 (_mm256_cmpeq_epi32 (a, zero), finite);
      __m256d x0 = _mm256_cvtps_pd (_mm256_castps256_ps128 (x));
      __m256d x1 = _mm256_cvtps_pd (_mm256_extractf128_ps (x, 1));

      /* Squares of FP32 values are exact in double. */
      slo = _mm256_add_pd (slo, _mm256_mul_pd (x0, x0));
      shi = _mm256_add_pd (shi, _mm256_mul_pd (x1, x1));
      /* Masks are -1: subtracting counts them. */
      nonfinite = _mm256_sub_epi32 (nonfinite, _mm256_andnot_si256 (finite, ones));
      nonzero = _mm256_sub_epi32 (nonzero, nz);
      nunder = _mm256_sub_epi32 (nunder, _mm256_and_si256 (nz, _mm256_cmpgt_epi32 (lo, a)));
      nover = _mm256_sub_epi32 (nover, _mm256_andnot_si256 (_mm256_cmpgt_epi32 (hi, a), nz));
      amax = _mm256_max_epu32 (amax, _mm256_and_si256 (a, nz));
    }
  c.nonfinite = sum_epi32 (nonfinite);
  c.nonzero = sum_epi32 (nonzero);
  c.under = sum_epi32 (nunder);
  c.over = sum_epi32 (nover);
  _mm256_storeu_si256 ((__m256i *) lanes, amax);
  for (guint k = 0; k < 8; k++)
    c.amax = MAX (c.amax, lanes[k]);
  _mm256_storeu_pd (lane, slo);
  _mm256_storeu_pd (lane + 4, shi);
  for (gsize k = 0; i + k < n; k++)
    {
      guint32 bits = _mixprec_numerics_bits_at (src, dtype, i + k), a = bits & 0x7fffffffu;
      gfloat f;
      gdouble x;

      memcpy (&f, &bits, sizeof f);
      x = f;
      lane[k] += x * x;
      if (a >= 0x7f800000u)
        c.nonfinite++;
      else if (a != 0)
        {
          c.nonzero++;
          c.under += a < under;
          c.over += a >= over;
          c.amax = MAX (c.amax, a);
        }
    }
  c.sumsq = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  *out = c;
}

void
_mixprec_numerics_update_avx2 (const gfloat       *old,
                               const gfloat       *now,
                               gconstpointer       w,
                               MixprecDType        wdtype,
                               gsize               n,
                               gint                p,
                               gint                emin,
                               _MixprecUpdateSums *out)
{
  const __m256 abs_mask = _mm256_castsi256_ps (_mm256_set1_epi32 (0x7fffffff));
  const __m256 scale = _mm256_set1_ps (ldexpf (1.0f, p));
  const __m256i e_mask = _mm256_set1_epi32 (0xff), floor_field = _mm256_set1_epi32 (emin + 127);
  __m256 dsum = _mm256_setzero_ps (), msum = dsum;
  gfloat dl[8], ml[8];
  guint32 stale = 0;
  gsize i = 0;

  if (w != NULL && !_mixprec_numerics_vector_dtype (wdtype))
    {
      _mixprec_numerics_update (old, now, w, wdtype, n, p, emin, out);
      return;
    }
  for (; i + 8 <= n; i += 8)
    {
      __m256 o = _mm256_loadu_ps (old + i);
      __m256 d = _mm256_sub_ps (_mm256_loadu_ps (now + i), o);

      dsum = _mm256_add_ps (dsum, _mm256_mul_ps (d, d));
      msum = _mm256_add_ps (msum, _mm256_mul_ps (o, o));
      if (w != NULL)
        {
          __m256i field = _mm256_and_si256 (_mm256_srli_epi32 (_mm256_castps_si256 (load8 (w, wdtype, i)), 23),
                                            e_mask);
          __m256 half = _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_max_epi32 (field, floor_field), 23));
          __m256 below = _mm256_cmp_ps (_mm256_mul_ps (_mm256_and_ps (d, abs_mask), scale), half, _CMP_LT_OQ);
          __m256 finite = _mm256_castsi256_ps (_mm256_cmpeq_epi32 (field, e_mask));

          stale += (guint32) __builtin_popcount ((guint) _mm256_movemask_ps (_mm256_andnot_ps (finite, below)));
        }
    }
  _mm256_storeu_ps (dl, dsum);
  _mm256_storeu_ps (ml, msum);
  for (gsize k = 0; i + k < n; k++)
    {
      gfloat d = now[i + k] - old[i + k];

      dl[k] += d * d;
      ml[k] += old[i + k] * old[i + k];
      if (w != NULL)
        {
          guint32 field = (_mixprec_numerics_bits_at (w, wdtype, i + k) >> 23) & 0xff;
          guint32 hb = MAX (field, (guint32) (emin + 127)) << 23;
          gfloat half;

          memcpy (&half, &hb, sizeof half);
          stale += field != 0xff && (d < 0 ? -d : d) * ldexpf (1.0f, p) < half;
        }
    }
  out->delta_sumsq = (((gdouble) dl[0] + dl[1]) + ((gdouble) dl[2] + dl[3])) +
                     (((gdouble) dl[4] + dl[5]) + ((gdouble) dl[6] + dl[7]));
  out->old_sumsq = (((gdouble) ml[0] + ml[1]) + ((gdouble) ml[2] + ml[3])) +
                   (((gdouble) ml[4] + ml[5]) + ((gdouble) ml[6] + ml[7]));
  out->stale = stale;
}
