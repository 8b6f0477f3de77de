/* mixprec-numerics-kernels-private.h — the element-wise kernels of
 * per-tensor numerics (mixprec-engine-numerics.c): a run of one slot's
 * gradients classified against a dtype's range, and a run of masters
 * before and after a step compared. Scalar references in
 * mixprec-numerics-kernels.c, AVX2 beside them giving the same bits. */
#pragma once

#include "mixprec.h"

G_BEGIN_DECLS

typedef struct {
  guint32 nonfinite;         /* inf or NaN */
  guint32 nonzero;           /* finite and not zero */
  guint32 under;             /* of those, |v| bits below @under */
  guint32 over;              /* of those, |v| bits at or above @over */
  guint32 amax;              /* the bits of the largest finite |v| */
} _MixprecGradCounts;

/* Counts @n FP32 values; @under and @over are FP32 bits of magnitudes. */
void _mixprec_numerics_grad_counts      (const gfloat       *v,
                                         gsize               n,
                                         guint32             under,
                                         guint32             over,
                                         _MixprecGradCounts *out);
void _mixprec_numerics_grad_counts_avx2 (const gfloat       *v,
                                         gsize               n,
                                         guint32             under,
                                         guint32             over,
                                         _MixprecGradCounts *out);
void _mixprec_numerics_grad_counts_best (const gfloat       *v,
                                         gsize               n,
                                         guint32             under,
                                         guint32             over,
                                         _MixprecGradCounts *out);

/* The sums of (new - old)^2 and old^2 in double, each element's
 * difference formed in double, in eight interleaved partial sums (element
 * i in lane i % 8) added as ((0 + 1) + (2 + 3)) + ((4 + 5) + (6 + 7)); and
 * the elements whose |new - old| is below half an ulp of @w (FP32 values
 * of a format of precision @p and minimum normal exponent @emin; NULL:
 * no count) while w is finite. */
typedef struct {
  gdouble delta_sumsq;
  gdouble old_sumsq;
  guint32 stale;
} _MixprecUpdateSums;

void _mixprec_numerics_update      (const gfloat       *old,
                                    const gfloat       *now,
                                    const gfloat       *w,
                                    gsize               n,
                                    gint                p,
                                    gint                emin,
                                    _MixprecUpdateSums *out);
void _mixprec_numerics_update_avx2 (const gfloat       *old,
                                    const gfloat       *now,
                                    const gfloat       *w,
                                    gsize               n,
                                    gint                p,
                                    gint                emin,
                                    _MixprecUpdateSums *out);
void _mixprec_numerics_update_best (const gfloat       *old,
                                    const gfloat       *now,
                                    const gfloat       *w,
                                    gsize               n,
                                    gint                p,
                                    gint                emin,
                                    _MixprecUpdateSums *out);

G_END_DECLS
