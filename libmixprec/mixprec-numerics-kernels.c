/* mixprec-numerics-kernels.c — the scalar references of the per-tensor
 * numerics kernels (see mixprec-numerics-kernels-private.h) and the
 * choice, made once, of the fastest kernel this CPU runs. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec-numerics-kernels-private.h"
#include "mixprec-cpu-private.h"
#include "mixprec-dtype-private.h"

static gdouble
from_bits (guint32 bits)
{
  gfloat f;

  memcpy (&f, &bits, sizeof f);
  return f;
}

void
_mixprec_numerics_grad (gconstpointer       src,
                        MixprecDType        dtype,
                        gsize               n,
                        guint32             under,
                        guint32             over,
                        _MixprecGradCounts *out)
{
  _MixprecGradCounts c = { 0 };
  gdouble lane[8] = { 0 };

  for (gsize i = 0; i < n; i++)
    {
      guint32 bits = _mixprec_numerics_bits_at (src, dtype, i), a = bits & 0x7fffffffu;
      gdouble x = from_bits (bits);

      lane[i % 8] += x * x;
      /* Positive floats order as their bits. */
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
_mixprec_numerics_counts (gconstpointer       src,
                          MixprecDType        dtype,
                          gsize               n,
                          guint32             under,
                          guint32             over,
                          _MixprecGradCounts *out)
{
  _MixprecGradCounts c = { 0 };

  for (gsize i = 0; i < n; i++)
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
_mixprec_numerics_update (const gfloat       *old,
                          const gfloat       *now,
                          gconstpointer       w,
                          MixprecDType        wdtype,
                          gsize               n,
                          gint                p,
                          gint                emin,
                          _MixprecUpdateSums *out)
{
  gfloat dl[8] = { 0 }, ml[8] = { 0 };
  gfloat scale = ldexpf (1.0f, p);
  guint32 stale = 0, floor_field = (guint32) (emin + 127);

  for (gsize i = 0; i < n; i++)
    {
      gfloat d = now[i] - old[i];

      dl[i % 8] += d * d;
      ml[i % 8] += old[i] * old[i];
      if (w != NULL)
        {
          guint32 field = (_mixprec_numerics_bits_at (w, wdtype, i) >> 23) & 0xff;
          guint32 hb = MAX (field, floor_field) << 23;
          gfloat half;

          memcpy (&half, &hb, sizeof half);
          /* |d| < 2^(max(e, emin) - p), both sides times 2^p. */
          stale += field != 0xff && fabsf (d) * scale < half;
        }
    }
  out->delta_sumsq = (((gdouble) dl[0] + dl[1]) + ((gdouble) dl[2] + dl[3])) +
                     (((gdouble) dl[4] + dl[5]) + ((gdouble) dl[6] + dl[7]));
  out->old_sumsq = (((gdouble) ml[0] + ml[1]) + ((gdouble) ml[2] + ml[3])) +
                   (((gdouble) ml[4] + ml[5]) + ((gdouble) ml[6] + ml[7]));
  out->stale = stale;
}

typedef void (*GradFunc) (gconstpointer, MixprecDType, gsize, guint32, guint32, _MixprecGradCounts *);
typedef void (*UpdateFunc) (const gfloat *, const gfloat *, gconstpointer, MixprecDType, gsize, gint, gint,
                            _MixprecUpdateSums *);

void
_mixprec_numerics_grad_best (gconstpointer       src,
                             MixprecDType        dtype,
                             gsize               n,
                             guint32             under,
                             guint32             over,
                             _MixprecGradCounts *out)
{
  static gsize chosen = 0;

  if (g_once_init_enter (&chosen))
    {
      GradFunc f = _mixprec_numerics_grad;

#ifdef MIXPREC_HAVE_X86_SIMD
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2)
        f = _mixprec_numerics_grad_avx2;
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX512)
        f = _mixprec_numerics_grad_avx512;
#endif
      g_once_init_leave (&chosen, (gsize) f);
    }
  ((GradFunc) chosen) (src, dtype, n, under, over, out);
}

#ifdef MIXPREC_HAVE_X86_SIMD
/* Without AVX-512 the AVX2 gradient kernel counts faster than the scalar
 * loop, its sum thrown away. */
static void
counts_avx2 (gconstpointer src, MixprecDType dtype, gsize n, guint32 under, guint32 over,
             _MixprecGradCounts *out)
{
  _mixprec_numerics_grad_avx2 (src, dtype, n, under, over, out);
  out->sumsq = 0.0;
}
#endif

void
_mixprec_numerics_counts_best (gconstpointer       src,
                               MixprecDType        dtype,
                               gsize               n,
                               guint32             under,
                               guint32             over,
                               _MixprecGradCounts *out)
{
  static gsize chosen = 0;

  if (g_once_init_enter (&chosen))
    {
      GradFunc f = _mixprec_numerics_counts;

#ifdef MIXPREC_HAVE_X86_SIMD
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2)
        f = counts_avx2;
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX512)
        f = _mixprec_numerics_counts_avx512;
#endif
      g_once_init_leave (&chosen, (gsize) f);
    }
  ((GradFunc) chosen) (src, dtype, n, under, over, out);
}

void
_mixprec_numerics_update_best (const gfloat       *old,
                               const gfloat       *now,
                               gconstpointer       w,
                               MixprecDType        wdtype,
                               gsize               n,
                               gint                p,
                               gint                emin,
                               _MixprecUpdateSums *out)
{
  static gsize chosen = 0;

  if (g_once_init_enter (&chosen))
    {
      UpdateFunc f = _mixprec_numerics_update;

#ifdef MIXPREC_HAVE_X86_SIMD
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2)
        f = _mixprec_numerics_update_avx2;
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX512)
        f = _mixprec_numerics_update_avx512;
#endif
      g_once_init_leave (&chosen, (gsize) f);
    }
  ((UpdateFunc) chosen) (old, now, w, wdtype, n, p, emin, out);
}
