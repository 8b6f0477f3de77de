/* mixprec-engine-numerics-private.h — what the files of per-tensor
 * numerics share: the slots and their records, where a slot's values
 * lie, and the FP32 shadow's part (mixprec-engine-numerics.c,
 * mixprec-engine-numerics-shadow.c). Never installed. */
#pragma once

#include "mixprec-engine-impl-private.h"

G_BEGIN_DECLS

/* What one slot records, as doubles (counts are exact below 2^53). */
enum {
  REC_NONFINITE,             /* gradient elements that are inf or NaN */
  REC_NONZERO,               /* finite non-zero gradient elements */
  REC_UNDERFLOW,             /* of those, rounding to zero or subnormal in the wire dtype */
  REC_OVERFLOW,              /* of those, rounding to infinity in it */
  REC_AMAX,                  /* largest finite |gradient| */
  REC_SUMSQ,                 /* sum of squares of the gradient elements */
  REC_STALE,                 /* |new master - old master| < ulp(new working) / 2 */
  REC_DELTA_SUMSQ,           /* sum of (new master - old master)^2 */
  REC_MASTER_SUMSQ,          /* sum of old master^2 */
  REC_FP8_SATURATED,         /* FP8 copies: |value * scale| beyond the format */
  REC_FP8_NONZERO,           /* ... values that are not zero */
  REC_FP8_UNDERFLOW,         /* ... of those, FP8 codes of zero */
  REC_SHADOW_DIFF_SUMSQ,     /* FP32 shadow: sum of (working - shadow)^2 */
  REC_SHADOW_SUMSQ,          /* ... sum of shadow^2 */
  REC_SHADOW_ULP,            /* ... the most ulps of the working format apart */
  N_REC
};

typedef struct {
  MixprecParam *param;
  Group *group;
  guint unit;
  guint64 start;             /* first element, relative to its unit */
  guint64 numel;
  guint64 first_slot;
  guint64 n_slots;
  gboolean has_values;       /* FP32 values the optimizer updates */
  gboolean has_working;      /* ... and a working copy of its own */
  gboolean fp8;              /* an FP8 copy of a per-tensor scaling */
  gboolean fp8_mx;           /* ... or of MX block scales */
  gboolean shadow;           /* an FP32 shadow follows it */
  MixprecDType wire;         /* what its gradient underflow is measured against:
                                the group's wire dtype, or the policy's while
                                auto-precision widens it */
  guint32 wire_under;        /* its bounds as FP32 bits of magnitudes (wire_bounds()) */
  guint32 wire_over;
} NumParam;

typedef struct {
  guint param;               /* index in params */
  guint64 lo, hi;            /* elements [lo, hi) of the unit */
  guint64 index;             /* lo's place in the group's unpadded element space */
  guint owner;               /* the rank whose slice holds them */
  guint64 at;                /* owned: where its old masters go in the scratch */
  guint64 shadow_at;         /* owned, shadowed: where its shadow lies */
  guint64 norm_block;        /* owned: the gradient norm's block holding exactly
                                its elements, or G_MAXUINT64 */
} NumSlot;

struct _MixprecEngineNumerics {
  guint64 every;
  GArray *params;            /* NumParam, registration order */
  GArray *slots;             /* NumSlot */
  GArray *owned;             /* guint64: the slots this rank measures */
  gdouble *records;          /* N_REC per slot */
  gfloat *old_master;        /* this rank's masters before the step, for the
                                groups the optimizer's pass does not measure */
  guint64 old_n;
  GArray **by_group;         /* per group: its slots (guint64), in element order */
  guint n_groups;
  gboolean *fused;           /* per group: measured in the optimizer's pass */
  gint cut;                  /* a fused pass cut a slot (never, by construction) */
  gboolean measuring;        /* this step is measured */
  gboolean in_pass;          /* ... where it can, by the optimizer itself */
  /* One process: each parameter's sums, added up in slot order by the
   * thread that met its first slot, over all its slots (summed[i] 2) or
   * up to slot prefix_next[i] (summed[i] 1), the rest being records. */
  gdouble *param_sums;       /* N_REC per parameter */
  guint8 *summed;
  guint64 *prefix_next;
  gint generation;           /* this measured step's, among all engines' */
  /* The FP32 shadow: this rank's part of the shadowed parameters, and
   * its optimizer state (FP32 slots), from the first step on. */
  gfloat *shadow;
  gfloat *shadow_states[16];
  guint64 shadow_n;
  gboolean shadow_started;
  gboolean updated;          /* ... and its update statistics were taken */
  gdouble divisor;           /* what unscales the gradients read */
  MixprecNumerics *last;
};

/* The slots of every parameter, and which this rank owns (first use). */
void          _mixprec_numerics_layout     (MixprecEngine                 *self,
                                            struct _MixprecEngineNumerics *nm);
/* The step's gradients of elements [lo, ...) of @np's unit on this rank,
 * and the FP32 values and working copy (NULL when they are the same) of
 * element @lo. */
gconstpointer _mixprec_numerics_grad_run   (MixprecEngine  *self,
                                            const NumParam *np,
                                            guint64         lo,
                                            MixprecDType   *dtype);
void          _mixprec_numerics_values_run (MixprecEngine  *self,
                                            const NumParam *np,
                                            guint64         lo,
                                            gfloat        **master,
                                            gpointer       *working);

/* The FP32 shadow (mixprec-engine-numerics-shadow.c): whether it follows
 * parameter @i (registration order) of @name; its drift measured into
 * the records of a measured step; its buffers freed. */
gboolean      _mixprec_numerics_shadowed     (MixprecEngine                 *self,
                                              guint                          i,
                                              const gchar                   *name);
void          _mixprec_numerics_shadow_drift (MixprecEngine                 *self,
                                              struct _MixprecEngineNumerics *nm);
void          _mixprec_numerics_shadow_free  (struct _MixprecEngineNumerics *nm);

G_END_DECLS
