/* mixprec-numerics-kernels-private.h — the element-wise kernels of
 * per-tensor numerics (mixprec-engine-numerics.c): a run of one slot's
 * gradients classified against a dtype's range and summed, and a run of
 * masters before and after a step compared. Scalar references in
 * mixprec-numerics-kernels.c, AVX2 and AVX-512 beside them giving the
 * same bits. */
#pragma once

#include <string.h>

#include "mixprec.h"
#include "mixprec-dtype-private.h"

G_BEGIN_DECLS

/* Element @i of @src widened to FP32 bits (exact: every format is an
 * FP32 value). */
static inline guint32
_mixprec_numerics_bits_at (gconstpointer src, MixprecDType dtype, gsize i)
{
  gfloat f;
  guint32 bits;

  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT32:
      memcpy (&bits, (const gfloat *) src + i, sizeof bits);
      return bits;
    case MIXPREC_DTYPE_BFLOAT16:
      return (guint32) ((const guint16 *) src)[i] << 16;
    case MIXPREC_DTYPE_FLOAT16:
      f = _mixprec_f16_to_f32 (((const guint16 *) src)[i]);
      break;
    case MIXPREC_DTYPE_FLOAT8_E4M3:
      f = _mixprec_e4m3_to_f32 (((const guint8 *) src)[i]);
      break;
    default:
      f = _mixprec_e5m2_to_f32 (((const guint8 *) src)[i]);
      break;
    }
  memcpy (&bits, &f, sizeof bits);
  return bits;
}

/* Whether the SIMD kernels load @dtype as vectors (the FP8 formats take
 * the scalar path). */
static inline gboolean
_mixprec_numerics_vector_dtype (MixprecDType dtype)
{
  return dtype == MIXPREC_DTYPE_FLOAT32 || dtype == MIXPREC_DTYPE_FLOAT16 || dtype == MIXPREC_DTYPE_BFLOAT16;
}

typedef struct {
  guint32 nonfinite;         /* inf or NaN */
  guint32 nonzero;           /* finite and not zero */
  guint32 under;             /* of those, |v| bits below @under */
  guint32 over;              /* of those, |v| bits at or above @over */
  guint32 amax;              /* the bits of the largest finite |v| */
  gdouble sumsq;             /* the sum of squares, as _mixprec_kernel_sumsq() forms it */
} _MixprecGradCounts;

/* @n values of @dtype (float32, float16 or bfloat16; any other is
 * widened first), widened to FP32; @under and @over are FP32 bits of
 * magnitudes. The sum of squares in eight interleaved partial sums
 * (element i in lane i % 8) added as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)). */
void _mixprec_numerics_grad      (gconstpointer       src,
                                  MixprecDType        dtype,
                                  gsize               n,
                                  guint32             under,
                                  guint32             over,
                                  _MixprecGradCounts *out);
void _mixprec_numerics_grad_avx2 (gconstpointer       src,
                                  MixprecDType        dtype,
                                  gsize               n,
                                  guint32             under,
                                  guint32             over,
                                  _MixprecGradCounts *out);
void _mixprec_numerics_grad_avx512 (gconstpointer       src,
                                    MixprecDType        dtype,
                                    gsize               n,
                                    guint32             under,
                                    guint32             over,
                                    _MixprecGradCounts *out);
void _mixprec_numerics_grad_best (gconstpointer       src,
                                  MixprecDType        dtype,
                                  gsize               n,
                                  guint32             under,
                                  guint32             over,
                                  _MixprecGradCounts *out);

/* The same counts without the sum of squares (left 0), for a run whose
 * sum the gradient norm already formed the same way (a whole block). */
void _mixprec_numerics_counts        (gconstpointer       src,
                                      MixprecDType        dtype,
                                      gsize               n,
                                      guint32             under,
                                      guint32             over,
                                      _MixprecGradCounts *out);
void _mixprec_numerics_counts_avx512 (gconstpointer       src,
                                      MixprecDType        dtype,
                                      gsize               n,
                                      guint32             under,
                                      guint32             over,
                                      _MixprecGradCounts *out);
void _mixprec_numerics_counts_best   (gconstpointer       src,
                                      MixprecDType        dtype,
                                      gsize               n,
                                      guint32             under,
                                      guint32             over,
                                      _MixprecGradCounts *out);

/* The sums of (now - old)^2 and old^2, each difference, square and sum
 * in FP32 (cheap: a ratio of norms needs no more), in eight lanes as above
 * (the lanes added in double); and the elements whose |now - old| is below
 * half an ulp of the working value @w (of @wdtype, a format of precision
 * @p and minimum normal exponent @emin; NULL: no count) while w is
 * finite. That test is exact: an FP32 difference below half an ulp of a
 * value near both is exact (Sterbenz), and it is compared scaled by 2^p
 * against 2^max(e, emin), a normal FP32 number. */
typedef struct {
  gdouble delta_sumsq;
  gdouble old_sumsq;
  guint32 stale;
} _MixprecUpdateSums;

void _mixprec_numerics_update      (const gfloat       *old,
                                    const gfloat       *now,
                                    gconstpointer       w,
                                    MixprecDType        wdtype,
                                    gsize               n,
                                    gint                p,
                                    gint                emin,
                                    _MixprecUpdateSums *out);
void _mixprec_numerics_update_avx2 (const gfloat       *old,
                                    const gfloat       *now,
                                    gconstpointer       w,
                                    MixprecDType        wdtype,
                                    gsize               n,
                                    gint                p,
                                    gint                emin,
                                    _MixprecUpdateSums *out);
void _mixprec_numerics_update_avx512 (const gfloat       *old,
                                      const gfloat       *now,
                                      gconstpointer       w,
                                      MixprecDType        wdtype,
                                      gsize               n,
                                      gint                p,
                                      gint                emin,
                                      _MixprecUpdateSums *out);
void _mixprec_numerics_update_best (const gfloat       *old,
                                    const gfloat       *now,
                                    gconstpointer       w,
                                    MixprecDType        wdtype,
                                    gsize               n,
                                    gint                p,
                                    gint                emin,
                                    _MixprecUpdateSums *out);

G_END_DECLS
