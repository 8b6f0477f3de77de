/* mixprec-numerics-kernels.c — the scalar references of the per-tensor
 * numerics kernels (see mixprec-numerics-kernels-private.h) and the
 * choice, made once, of the fastest kernel this CPU runs. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec-numerics-kernels-private.h"
#include "mixprec-cpu-private.h"

void
_mixprec_numerics_grad_counts (const gfloat       *v,
                               gsize               n,
                               guint32             under,
                               guint32             over,
                               _MixprecGradCounts *out)
{
  const guint32 *bits = (const guint32 *) v;
  _MixprecGradCounts c = { 0 };

  /* Positive floats order as their bits. */
  for (gsize i = 0; i < n; i++)
    {
      guint32 a = bits[i] & 0x7fffffffu;
      gboolean finite = a < 0x7f800000u;

      if (!finite)
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

/* Half an ulp of @w (FP32 bits) in a format of precision @p and minimum
 * normal exponent @emin: 2^(e - p) for w of exponent e, 2^(emin - p)
 * below 2^emin. w's FP32 exponent field gives e (0 and FP32 subnormals
 * read -127, below any emin). */
static gdouble
half_ulp (guint32 w, gint p, gint emin)
{
  gint e = (gint) ((w >> 23) & 0xff) - 127;
  guint64 bits = (guint64) (MAX (e, emin) - p + 1023) << 52;
  gdouble half;

  memcpy (&half, &bits, sizeof half);
  return half;
}

void
_mixprec_numerics_update (const gfloat       *old,
                          const gfloat       *now,
                          const gfloat       *w,
                          gsize               n,
                          gint                p,
                          gint                emin,
                          _MixprecUpdateSums *out)
{
  const guint32 *wb = (const guint32 *) w;
  gdouble dl[8] = { 0 }, ml[8] = { 0 };
  guint32 stale = 0;

  for (gsize i = 0; i < n; i++)
    {
      /* The difference of two floats: exact in double unless their
       * exponents are more than 29 apart. */
      gdouble d = (gdouble) now[i] - (gdouble) old[i];
      gdouble o = old[i];

      dl[i % 8] += d * d;
      ml[i % 8] += o * o;
      if (w != NULL && ((wb[i] >> 23) & 0xff) != 0xff)
        stale += fabs (d) < half_ulp (wb[i], p, emin);
    }
  out->delta_sumsq = ((dl[0] + dl[1]) + (dl[2] + dl[3])) + ((dl[4] + dl[5]) + (dl[6] + dl[7]));
  out->old_sumsq = ((ml[0] + ml[1]) + (ml[2] + ml[3])) + ((ml[4] + ml[5]) + (ml[6] + ml[7]));
  out->stale = stale;
}

typedef void (*GradCountsFunc) (const gfloat *, gsize, guint32, guint32, _MixprecGradCounts *);
typedef void (*UpdateFunc) (const gfloat *, const gfloat *, const gfloat *, gsize, gint, gint,
                            _MixprecUpdateSums *);

void
_mixprec_numerics_grad_counts_best (const gfloat       *v,
                                    gsize               n,
                                    guint32             under,
                                    guint32             over,
                                    _MixprecGradCounts *out)
{
  static gsize chosen = 0;

  if (g_once_init_enter (&chosen))
    {
      GradCountsFunc f = _mixprec_numerics_grad_counts;

#ifdef MIXPREC_HAVE_X86_SIMD
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2)
        f = _mixprec_numerics_grad_counts_avx2;
#endif
      g_once_init_leave (&chosen, (gsize) f);
    }
  ((GradCountsFunc) chosen) (v, n, under, over, out);
}

void
_mixprec_numerics_update_best (const gfloat       *old,
                               const gfloat       *now,
                               const gfloat       *w,
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
      g_once_init_leave (&chosen, (gsize) f);
    }
  ((UpdateFunc) chosen) (old, now, w, n, p, emin, out);
}
