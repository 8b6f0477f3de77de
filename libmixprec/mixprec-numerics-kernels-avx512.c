/* mixprec-numerics-kernels-avx512.c — AVX-512 versions of the per-tensor
 * numerics kernels, sixteen values at a time: the counts kept in mask
 * registers and added lane by lane (exact in any order), the sums in
 * the scalar reference's eight lanes (element i of each eight in lane i),
 * each sixteen added to them as two eights one after the other, so that
 * every lane sees its elements in the scalar order. Compiled with
 * $(MIXPREC_AVX512_CFLAGS) (F, BW, VL); called only on a CPU that has
 * them. */
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

/* Sixteen values of @dtype at @i widened to FP32 (exactly). */
static inline __m512
load16 (gconstpointer src, MixprecDType dtype, gsize i)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_BFLOAT16:
      return _mm512_castsi512_ps (_mm512_slli_epi32 (_mm512_cvtepu16_epi32 (
        _mm256_loadu_si256 ((const __m256i *) ((const guint16 *) src + i))), 16));
    case MIXPREC_DTYPE_FLOAT16:
      return _mm512_cvtph_ps (_mm256_loadu_si256 ((const __m256i *) ((const guint16 *) src + i)));
    default:
      return _mm512_loadu_ps ((const gfloat *) src + i);
    }
}

/* The upper eight floats of @v. */
static inline __m256
high8 (__m512 v)
{
  return _mm256_castpd_ps (_mm512_extractf64x4_pd (_mm512_castps_pd (v), 1));
}

void
_mixprec_numerics_grad_avx512 (gconstpointer       src,
                               MixprecDType        dtype,
                               gsize               n,
                               guint32             under,
                               guint32             over,
                               _MixprecGradCounts *out)
{
  const __m512i abs_mask = _mm512_set1_epi32 (0x7fffffff);
  const __m512i inf = _mm512_set1_epi32 (0x7f800000);
  const __m512i zero = _mm512_setzero_si512 (), ones = _mm512_set1_epi32 (-1);
  const __m512i lo = _mm512_set1_epi32 ((gint32) under), hi = _mm512_set1_epi32 ((gint32) over);
  __m512i nonfinite = zero, nonzero = zero, nunder = zero, nover = zero, amax = zero;
  __m512d sum = _mm512_setzero_pd ();
  _MixprecGradCounts c = { 0 };
  gdouble lane[8];
  gsize i = 0;

  if (!_mixprec_numerics_vector_dtype (dtype))
    {
      _mixprec_numerics_grad (src, dtype, n, under, over, out);
      return;
    }
  for (; i + 16 <= n; i += 16)
    {
      __m512 x = load16 (src, dtype, i);
      __m512i a = _mm512_and_si512 (_mm512_castps_si512 (x), abs_mask);
      __mmask16 finite = _mm512_cmplt_epu32_mask (a, inf);
      __mmask16 nz = _mm512_mask_cmpneq_epu32_mask (finite, a, zero);
      __m512d x0 = _mm512_cvtps_pd (_mm512_castps512_ps256 (x));
      __m512d x1 = _mm512_cvtps_pd (high8 (x));

      /* Squares of FP32 values are exact in double; elements i..i+7,
       * then i+8..i+15, into lanes 0..7. */
      sum = _mm512_add_pd (sum, _mm512_mul_pd (x0, x0));
      sum = _mm512_add_pd (sum, _mm512_mul_pd (x1, x1));
      /* Adding -1 where the mask is set counts it. */
      nonfinite = _mm512_mask_sub_epi32 (nonfinite, _knot_mask16 (finite), nonfinite, ones);
      nonzero = _mm512_mask_sub_epi32 (nonzero, nz, nonzero, ones);
      nunder = _mm512_mask_sub_epi32 (nunder, _mm512_mask_cmplt_epu32_mask (nz, a, lo), nunder, ones);
      nover = _mm512_mask_sub_epi32 (nover, _mm512_mask_cmpge_epu32_mask (nz, a, hi), nover, ones);
      amax = _mm512_mask_max_epu32 (amax, nz, amax, a);
    }
  c.nonfinite = (guint32) _mm512_reduce_add_epi32 (nonfinite);
  c.nonzero = (guint32) _mm512_reduce_add_epi32 (nonzero);
  c.under = (guint32) _mm512_reduce_add_epi32 (nunder);
  c.over = (guint32) _mm512_reduce_add_epi32 (nover);
  c.amax = _mm512_reduce_max_epu32 (amax);
  _mm512_storeu_pd (lane, sum);
  /* Fewer than sixteen left: element i + k belongs to lane k % 8. */
  for (gsize k = 0; i + k < n; k++)
    {
      guint32 bits = _mixprec_numerics_bits_at (src, dtype, i + k), a = bits & 0x7fffffffu;
      gfloat f;
      gdouble x;

      memcpy (&f, &bits, sizeof f);
      x = f;
      lane[k % 8] += x * x;
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

/* bfloat16 in its own sixteen bits, thirty-two at a time: its FP32 bits
 * are a << 16, so a << 16 < b exactly when a < ceil(b / 2^16), and the
 * counts of up to 2^15 - 1 runs of 32 elements fit sixteen-bit lanes that
 * _mm512_madd_epi16() reads as signed. */
static void
counts_bf16 (const guint16 *src, gsize n, guint32 under, guint32 over, _MixprecGradCounts *c)
{
  const __m512i abs_mask = _mm512_set1_epi16 (0x7fff), inf = _mm512_set1_epi16 (0x7f80);
  const __m512i zero = _mm512_setzero_si512 (), ones = _mm512_set1_epi16 (-1);
  const __m512i lo = _mm512_set1_epi16 ((gint16) ((under + 0xffffu) >> 16));
  const __m512i hi = _mm512_set1_epi16 ((gint16) ((over + 0xffffu) >> 16));
  gsize i = 0;

  while (i + 32 <= n)
    {
      __m512i nonfinite = zero, nonzero = zero, nunder = zero, nover = zero, amax = zero;
      gsize end = i + MIN ((n - i) / 32 * 32, (gsize) 0x7fff * 32);
      guint16 lanes[32];

      for (; i < end; i += 32)
        {
          __m512i a = _mm512_and_si512 (_mm512_loadu_si512 (src + i), abs_mask);
          __mmask32 finite = _mm512_cmplt_epu16_mask (a, inf);
          __mmask32 nz = _mm512_mask_cmpneq_epu16_mask (finite, a, zero);

          nonfinite = _mm512_mask_sub_epi16 (nonfinite, _knot_mask32 (finite), nonfinite, ones);
          nonzero = _mm512_mask_sub_epi16 (nonzero, nz, nonzero, ones);
          nunder = _mm512_mask_sub_epi16 (nunder, _mm512_mask_cmplt_epu16_mask (nz, a, lo), nunder, ones);
          nover = _mm512_mask_sub_epi16 (nover, _mm512_mask_cmpge_epu16_mask (nz, a, hi), nover, ones);
          amax = _mm512_mask_max_epu16 (amax, nz, amax, a);
        }
      /* Widened to 32 bits before adding: each lane is below 2^15. */
      c->nonfinite += (guint32) _mm512_reduce_add_epi32 (_mm512_madd_epi16 (nonfinite, _mm512_set1_epi16 (1)));
      c->nonzero += (guint32) _mm512_reduce_add_epi32 (_mm512_madd_epi16 (nonzero, _mm512_set1_epi16 (1)));
      c->under += (guint32) _mm512_reduce_add_epi32 (_mm512_madd_epi16 (nunder, _mm512_set1_epi16 (1)));
      c->over += (guint32) _mm512_reduce_add_epi32 (_mm512_madd_epi16 (nover, _mm512_set1_epi16 (1)));
      _mm512_storeu_si512 (lanes, amax);
      for (guint k = 0; k < 32; k++)
        c->amax = MAX (c->amax, (guint32) lanes[k] << 16);
    }
  for (; i < n; i++)
    {
      guint32 a = ((guint32) src[i] << 16) & 0x7fffffffu;

      if (a >= 0x7f800000u)
        c->nonfinite++;
      else if (a != 0)
        {
          c->nonzero++;
          c->under += a < under;
          c->over += a >= over;
          c->amax = MAX (c->amax, a);
        }
    }
}

void
_mixprec_numerics_counts_avx512 (gconstpointer       src,
                                 MixprecDType        dtype,
                                 gsize               n,
                                 guint32             under,
                                 guint32             over,
                                 _MixprecGradCounts *out)
{
  const __m512i abs_mask = _mm512_set1_epi32 (0x7fffffff);
  const __m512i inf = _mm512_set1_epi32 (0x7f800000);
  const __m512i zero = _mm512_setzero_si512 (), ones = _mm512_set1_epi32 (-1);
  const __m512i lo = _mm512_set1_epi32 ((gint32) under), hi = _mm512_set1_epi32 ((gint32) over);
  __m512i nonfinite = zero, nonzero = zero, nunder = zero, nover = zero, amax = zero;
  _MixprecGradCounts c = { 0 };
  gsize i = 0;

  if (dtype == MIXPREC_DTYPE_BFLOAT16)
    {
      counts_bf16 (src, n, under, over, &c);
      *out = c;
      return;
    }
  if (!_mixprec_numerics_vector_dtype (dtype))
    {
      _mixprec_numerics_counts (src, dtype, n, under, over, out);
      return;
    }
  for (; i + 16 <= n; i += 16)
    {
      __m512i a = _mm512_and_si512 (_mm512_castps_si512 (load16 (src, dtype, i)), abs_mask);
      __mmask16 finite = _mm512_cmplt_epu32_mask (a, inf);
      __mmask16 nz = _mm512_mask_cmpneq_epu32_mask (finite, a, zero);

      nonfinite = _mm512_mask_sub_epi32 (nonfinite, _knot_mask16 (finite), nonfinite, ones);
      nonzero = _mm512_mask_sub_epi32 (nonzero, nz, nonzero, ones);
      nunder = _mm512_mask_sub_epi32 (nunder, _mm512_mask_cmplt_epu32_mask (nz, a, lo), nunder, ones);
      nover = _mm512_mask_sub_epi32 (nover, _mm512_mask_cmpge_epu32_mask (nz, a, hi), nover, ones);
      amax = _mm512_mask_max_epu32 (amax, nz, amax, a);
    }
  c.nonfinite = (guint32) _mm512_reduce_add_epi32 (nonfinite);
  c.nonzero = (guint32) _mm512_reduce_add_epi32 (nonzero);
  c.under = (guint32) _mm512_reduce_add_epi32 (nunder);
  c.over = (guint32) _mm512_reduce_add_epi32 (nover);
  c.amax = _mm512_reduce_max_epu32 (amax);
  for (; i < n; i++)
    {
      guint32 a = _mixprec_numerics_bits_at (src, dtype, i) & 0x7fffffffu;

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
  *out = c;
}

void
_mixprec_numerics_update_avx512 (const gfloat       *old,
                                 const gfloat       *now,
                                 gconstpointer       w,
                                 MixprecDType        wdtype,
                                 gsize               n,
                                 gint                p,
                                 gint                emin,
                                 _MixprecUpdateSums *out)
{
  const __m512i abs_mask = _mm512_set1_epi32 (0x7fffffff);
  const __m512 scale = _mm512_set1_ps (ldexpf (1.0f, p));
  const __m512i e_mask = _mm512_set1_epi32 (0xff), floor_field = _mm512_set1_epi32 (emin + 127);
  const __m512i ones = _mm512_set1_epi32 (-1);
  __m512i nstale = _mm512_setzero_si512 ();
  __m256 dsum = _mm256_setzero_ps (), msum = dsum;
  gfloat dl[8], ml[8];
  guint32 stale;
  gsize i = 0;

  if (w != NULL && !_mixprec_numerics_vector_dtype (wdtype))
    {
      _mixprec_numerics_update (old, now, w, wdtype, n, p, emin, out);
      return;
    }
  for (; i + 16 <= n; i += 16)
    {
      __m512 o = _mm512_loadu_ps (old + i);
      __m512 d = _mm512_sub_ps (_mm512_loadu_ps (now + i), o);
      __m512 dd = _mm512_mul_ps (d, d), oo = _mm512_mul_ps (o, o);

      /* Elements i..i+7, then i+8..i+15, into lanes 0..7. */
      dsum = _mm256_add_ps (dsum, _mm512_castps512_ps256 (dd));
      dsum = _mm256_add_ps (dsum, high8 (dd));
      msum = _mm256_add_ps (msum, _mm512_castps512_ps256 (oo));
      msum = _mm256_add_ps (msum, high8 (oo));
      if (w != NULL)
        {
          __m512i field = _mm512_and_si512 (_mm512_srli_epi32 (_mm512_castps_si512 (load16 (w, wdtype, i)), 23),
                                            e_mask);
          __m512 half = _mm512_castsi512_ps (_mm512_slli_epi32 (_mm512_max_epi32 (field, floor_field), 23));
          __mmask16 finite = _mm512_cmpneq_epi32_mask (field, e_mask);
          __mmask16 below = _mm512_mask_cmp_ps_mask (finite, _mm512_mul_ps (_mm512_castsi512_ps (_mm512_and_si512 (_mm512_castps_si512 (d), abs_mask)), scale),
                                                     half, _CMP_LT_OQ);

          nstale = _mm512_mask_sub_epi32 (nstale, below, nstale, ones);
        }
    }
  stale = (guint32) _mm512_reduce_add_epi32 (nstale);
  _mm256_storeu_ps (dl, dsum);
  _mm256_storeu_ps (ml, msum);
  for (gsize k = 0; i + k < n; k++)
    {
      gfloat d = now[i + k] - old[i + k];

      dl[k % 8] += d * d;
      ml[k % 8] += old[i + k] * old[i + k];
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
