/* mixprec-engine-autoprec-private.h — closed-loop precision
 * (mixprec.auto_precision, mixprec-engine-autoprec.c): what the engine's
 * other files call. Never installed. */
#pragma once

#include "mixprec-engine-impl-private.h"

G_BEGIN_DECLS

/* At engine creation: NULL-op when mixprec.auto_precision is off; refuses
 * the combinations it cannot serve (naming them) otherwise. */
gboolean     _mixprec_engine_autoprec_setup       (MixprecEngine *self,
                                                   GError       **error);
void         _mixprec_engine_autoprec_free        (MixprecEngine *self);
/* Before the first layout: refuses parameters it cannot widen
 * (registered external memory). */
gboolean     _mixprec_engine_autoprec_check       (MixprecEngine *self,
                                                   GError       **error);
/* At the start of mixprec_engine_step(): refuses a caller that took a
 * buffer's address (a change would move the buffer). */
gboolean     _mixprec_engine_autoprec_check_step  (MixprecEngine *self,
                                                   GError       **error);
/* At the end of mixprec_engine_step(), after the numerics of the step:
 * decides from them, and widens or narrows parameters for the next step. */
gboolean     _mixprec_engine_autoprec_step        (MixprecEngine *self,
                                                   GError       **error);
/* The dtype the numerics measure parameter @i's gradient underflow
 * against: its wire dtype at the policy's precision while it is widened
 * (what it would lose if narrowed), else @wire. */
MixprecDType _mixprec_engine_autoprec_probe_wire  (MixprecEngine *self,
                                                   guint          i,
                                                   MixprecDType   wire);

/* mixprec-engine-numerics.c: forgets the slots laid out over the groups
 * (the next measured step lays them out again), and the FP32 shadow,
 * which restarts from the masters at the next applied step. */
void         _mixprec_engine_numerics_relayout    (MixprecEngine *self);
/* mixprec-engine-monitor.c: @n scalars recorded at @step (rank 0). */
void         _mixprec_engine_record_scalars       (MixprecEngine       *self,
                                                   const gchar * const *tags,
                                                   const gdouble       *values,
                                                   guint                n,
                                                   guint64              step);

G_END_DECLS
