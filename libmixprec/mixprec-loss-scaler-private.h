/* mixprec-loss-scaler-private.h — what the scaler subclasses share:
 * typed look-ups in a saved state that fail with a sentence naming the key. */
#pragma once

#include "mixprec.h"

G_BEGIN_DECLS

gboolean _mixprec_scaler_state_lookup (GVariantDict        *state,
                                       const gchar         *key,
                                       const GVariantType  *type,
                                       GVariant           **value,
                                       GError             **error);
gboolean _mixprec_scaler_state_get_double (GVariantDict  *state,
                                           const gchar   *key,
                                           gdouble        min,
                                           gboolean       min_inclusive,
                                           gdouble        max,
                                           gdouble       *value,
                                           GError       **error);

G_END_DECLS
