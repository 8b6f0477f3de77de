/* mixprec-static-scaler.h — a loss scaler whose scale never changes */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-loss-scaler.h"

G_BEGIN_DECLS

#define MIXPREC_TYPE_STATIC_SCALER (mixprec_static_scaler_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecStaticScaler, mixprec_static_scaler, MIXPREC, STATIC_SCALER, MixprecLossScaler)

MIXPREC_AVAILABLE_IN_1_0
MixprecLossScaler *mixprec_static_scaler_new      (gdouble   scale);
MIXPREC_AVAILABLE_IN_1_1
MixprecLossScaler *mixprec_static_scaler_new_full (gdouble   scale,
                                                   GError  **error);

G_END_DECLS
