/* mixprec-numerics-private.h — how the engine fills a MixprecNumerics:
 * the statistics, by index in the order of their names. Never installed. */
#pragma once

#include "mixprec.h"

G_BEGIN_DECLS

typedef enum {
  _MIXPREC_NUM_GRAD_AMAX,
  _MIXPREC_NUM_GRAD_NORM,
  _MIXPREC_NUM_GRAD_NONFINITE,
  _MIXPREC_NUM_GRAD_UNDERFLOW,
  _MIXPREC_NUM_GRAD_OVERFLOW,
  _MIXPREC_NUM_STALE,
  _MIXPREC_NUM_UPDATE_RATIO,
  _MIXPREC_NUM_FP8_SATURATION,
  _MIXPREC_NUM_FP8_UNDERFLOW,
  _MIXPREC_NUM_FP8_SCALE,
  _MIXPREC_NUM_SHADOW_REL_L2,
  _MIXPREC_NUM_SHADOW_MAX_ULP,
  _MIXPREC_NUM_N_STATS
} _MixprecNumStat;

MixprecNumerics *_mixprec_numerics_new (guint64  step,
                                        gboolean applied);
/* Sets @stat of parameter @name (@by_type: of module type @name), adding
 * the row on first use; rows keep the order of their first set. */
void _mixprec_numerics_set (MixprecNumerics *self,
                            gboolean         by_type,
                            const gchar     *name,
                            _MixprecNumStat  stat,
                            gdouble          value);
/* The row of parameter @name (@by_type: of module type @name), added on
 * first use, for setting many of its statistics with one lookup; valid
 * until the next row is added. */
typedef struct _MixprecNumericsRow _MixprecNumericsRow;
_MixprecNumericsRow *_mixprec_numerics_row     (MixprecNumerics     *self,
                                                gboolean             by_type,
                                                const gchar         *name);
/* A new row for @name, which has none yet (not checked): no lookup, and
 * the name index waits until something asks by name. */
_MixprecNumericsRow *_mixprec_numerics_append_row (MixprecNumerics     *self,
                                                   gboolean             by_type,
                                                   const gchar         *name);
void                 _mixprec_numerics_row_set (_MixprecNumericsRow *row,
                                                _MixprecNumStat      stat,
                                                gdouble              value);
/* Calls @func on every value set, parameters first, in row order and
 * then in the order of the statistics. */
typedef void (*_MixprecNumericsFunc) (gboolean     by_type,
                                      const gchar *name,
                                      const gchar *stat,
                                      gdouble      value,
                                      gpointer     data);
void _mixprec_numerics_foreach (MixprecNumerics      *self,
                                _MixprecNumericsFunc  func,
                                gpointer              data);

G_END_DECLS
