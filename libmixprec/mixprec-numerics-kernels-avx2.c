/* mixprec-numerics-kernels-avx2.c — AVX2 versions of the per-tensor
 * numerics kernels: counts and maxima are exact in any order; the sums
 * keep the scalar reference's eight lanes (elements 0-3 of each eight in
 * one register, 4-7 in the other) and its additions, each product rounded
 * on its own as the scalar code rounds it. Compiled with -mavx2 -mf16c
 * -mfma; called only on a CPU that has them. */
#include "config.h"

/* A fused multiply-add would round d * d + sum once where the scalar code
 * rounds twice. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("fp-contract=off")
#endif

#include <immintrin.h>
#include <string.h>

#include "mixprec-numerics-kernels-private.h"

void
_mixprec_numerics_grad_counts_avx2 (const gfloat       *v,
                                    gsize               n,
                                    guint32             under,
                                    guint32             over,
                                    _MixprecGradCounts *out)
{
  const __m256i abs_mask = _mm256_set1_epi32 (0x7fffffff);
  const __m256i inf = _mm256_set1_epi32 (0x7f800000);
  const __m256i zero = _mm256_setzero_si256 ();
  /* Unsigned a < b as signed: every |v| bits and bound is below 2^31. */
  const __m256i lo = _mm256_set1_epi32 ((gint32) under), hi = _mm256_set1_epi32 ((gint32) over);
  __m256i nonfinite = zero, nonzero = zero, nunder = zero, nover = zero, amax = zero;
  _MixprecGradCounts tail;
  guint32 lanes[8];
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m256i a = _mm256_and_si256 (_mm256_loadu_si256 ((const __m256i *) (v + i)), abs_mask);
      __m256i finite = _mm256_cmpgt_epi32 (inf, a);
      __m256i nz = _mm256_andnot_si256 (_mm256_cmpeq_epi32 (a, zero), finite);

      /* Masks are -1: subtracting counts them. */
      nonfinite = _mm256_sub_epi32 (nonfinite, _mm256_andnot_si256 (finite, _mm256_set1_epi32 (-1)));
      nonzero = _mm256_sub_epi32 (nonzero, nz);
      nunder = _mm256_sub_epi32 (nunder, _mm256_and_si256 (nz, _mm256_cmpgt_epi32 (lo, a)));
      nover = _mm256_sub_epi32 (nover, _mm256_andnot_si256 (_mm256_cmpgt_epi32 (hi, a), nz));
      amax = _mm256_max_epu32 (amax, _mm256_and_si256 (a, nz));
    }
  _mixprec_numerics_grad_counts (v + i, n - i, under, over, &tail);
#define SUM_LANES(reg, field) \
  _mm256_storeu_si256 ((__m256i *) lanes, reg); \
  for (guint k = 0; k < 8; k++) \
    tail.field += lanes[k];
  SUM_LANES (nonfinite, nonfinite);
  SUM_LANES (nonzero, nonzero);
  SUM_LANES (nunder, under);
  SUM_LANES (nover, over);
#undef SUM_LANES
  _mm256_storeu_si256 ((__m256i *) lanes, amax);
  for (guint k = 0; k < 8; k++)
    tail.amax = MAX (tail.amax, lanes[k]);
  *out = tail;
}

void
_mixprec_numerics_update_avx2 (const gfloat       *old,
                               const gfloat       *now,
                               const gfloat       *w,
                               gsize               n,
                               gint                p,
                               gint                emin,
                               _MixprecUpdateSums *out)
{
  const __m256d sign = _mm256_set1_pd (-0.0);
  const __m128i e_mask = _mm_set1_epi32 (0xff), e_inf = _mm_set1_epi32 (0xff);
  const __m128i bias = _mm_set1_epi32 (127), floor_e = _mm_set1_epi32 (emin);
  const __m128i to_double = _mm_set1_epi32 (1023 - p);
  __m256d dlo = _mm256_setzero_pd (), dhi = dlo, mlo = dlo, mhi = dlo;
  gdouble dl[8], ml[8];
  guint32 stale = 0;
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m256 o = _mm256_loadu_ps (old + i), x = _mm256_loadu_ps (now + i);
      __m256d o0 = _mm256_cvtps_pd (_mm256_castps256_ps128 (o));
      __m256d o1 = _mm256_cvtps_pd (_mm256_extractf128_ps (o, 1));
      __m256d d0 = _mm256_sub_pd (_mm256_cvtps_pd (_mm256_castps256_ps128 (x)), o0);
      __m256d d1 = _mm256_sub_pd (_mm256_cvtps_pd (_mm256_extractf128_ps (x, 1)), o1);

      dlo = _mm256_add_pd (dlo, _mm256_mul_pd (d0, d0));
      dhi = _mm256_add_pd (dhi, _mm256_mul_pd (d1, d1));
      mlo = _mm256_add_pd (mlo, _mm256_mul_pd (o0, o0));
      mhi = _mm256_add_pd (mhi, _mm256_mul_pd (o1, o1));
      if (w != NULL)
        {
          __m256i wb = _mm256_loadu_si256 ((const __m256i *) (w + i));
          __m128i field[2];
          guint m = 0;

          field[0] = _mm_and_si128 (_mm_srli_epi32 (_mm256_castsi256_si128 (wb), 23), e_mask);
          field[1] = _mm_and_si128 (_mm_srli_epi32 (_mm256_extracti128_si256 (wb, 1), 23), e_mask);
          for (guint h = 0; h < 2; h++)
            {
              /* max(e, emin) - p + 1023, in the exponent field of a double. */
              __m128i e = _mm_max_epi32 (_mm_sub_epi32 (field[h], bias), floor_e);
              __m256d hu = _mm256_castsi256_pd (_mm256_slli_epi64 (_mm256_cvtepi32_epi64 (_mm_add_epi32 (e, to_double)), 52));
              __m256d ad = _mm256_andnot_pd (sign, h == 0 ? d0 : d1);
              __m256d lt = _mm256_cmp_pd (ad, hu, _CMP_LT_OQ);
              __m256d fin = _mm256_castsi256_pd (_mm256_cvtepi32_epi64 (_mm_xor_si128 (_mm_cmpeq_epi32 (field[h], e_inf),
                                                                                       _mm_set1_epi32 (-1))));

              m |= (guint) _mm256_movemask_pd (_mm256_and_pd (lt, fin)) << (4 * h);
            }
          stale += (guint32) __builtin_popcount (m);
        }
    }
  _mm256_storeu_pd (dl, dlo);
  _mm256_storeu_pd (dl + 4, dhi);
  _mm256_storeu_pd (ml, mlo);
  _mm256_storeu_pd (ml + 4, mhi);
  for (gsize k = 0; i + k < n; k++)
    {
      gdouble d = (gdouble) now[i + k] - (gdouble) old[i + k];
      gdouble o = old[i + k];
      guint32 wb;

      dl[k] += d * d;
      ml[k] += o * o;
      if (w == NULL)
        continue;
      memcpy (&wb, w + i + k, sizeof wb);
      if (((wb >> 23) & 0xff) != 0xff)
        {
          gint e = MAX ((gint) ((wb >> 23) & 0xff) - 127, emin);
          guint64 hb = (guint64) (e - p + 1023) << 52;
          gdouble half;

          memcpy (&half, &hb, sizeof half);
          stale += (d < 0 ? -d : d) < half;
        }
    }
  out->delta_sumsq = ((dl[0] + dl[1]) + (dl[2] + dl[3])) + ((dl[4] + dl[5]) + (dl[6] + dl[7]));
  out->old_sumsq = ((ml[0] + ml[1]) + (ml[2] + ml[3])) + ((ml[4] + ml[5]) + (ml[6] + ml[7]));
  out->stale = stale;
}
