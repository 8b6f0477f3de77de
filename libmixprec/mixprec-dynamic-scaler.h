/* mixprec-dynamic-scaler.h — loss scaling that adapts to overflows, with
 * DeepSpeed, PyTorch or Megatron-LM semantics */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-loss-scaler.h"
#include "mixprec-config.h"

G_BEGIN_DECLS

#define MIXPREC_TYPE_DYNAMIC_SCALER (mixprec_dynamic_scaler_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecDynamicScaler, mixprec_dynamic_scaler, MIXPREC, DYNAMIC_SCALER, MixprecLossScaler)

MIXPREC_AVAILABLE_IN_1_0
MixprecLossScaler      *mixprec_dynamic_scaler_new              (MixprecScalerSemantics semantics);
MIXPREC_AVAILABLE_IN_1_0
MixprecLossScaler      *mixprec_dynamic_scaler_new_deepspeed    (gdouble                init_scale,
                                                                 guint                  scale_window,
                                                                 guint                  hysteresis,
                                                                 gdouble                min_scale);
MIXPREC_AVAILABLE_IN_1_1
MixprecLossScaler      *mixprec_dynamic_scaler_new_deepspeed_full (gdouble              init_scale,
                                                                   guint                scale_window,
                                                                   guint                hysteresis,
                                                                   gdouble              min_scale,
                                                                   GError             **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecScalerSemantics  mixprec_dynamic_scaler_get_semantics    (MixprecDynamicScaler  *self);

/* A MixprecLossScaler function, declared here rather than in
 * mixprec-loss-scaler.h because it needs mixprec-config.h, which in turn
 * needs mixprec-loss-scaler.h for MixprecScalerSemantics. */
MIXPREC_AVAILABLE_IN_1_0
MixprecLossScaler      *mixprec_loss_scaler_new_from_config     (MixprecConfig         *config,
                                                                 GError               **error);

G_END_DECLS
