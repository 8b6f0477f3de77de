/* mixprec-loss-scaler.h — loss scaling for low-precision gradients */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"

G_BEGIN_DECLS

/**
 * MixprecScalerSemantics:
 * @MIXPREC_SCALER_SEMANTICS_DEEPSPEED: DeepSpeed's `DynamicLossScaler`:
 *   hysteresis (`delayed_shift`), optional consecutive hysteresis, growth
 *   after `scale_window` overflow-free steps, an error when an overflow
 *   arrives while the scale already equals its minimum; double precision
 * @MIXPREC_SCALER_SEMANTICS_TORCH: PyTorch's `GradScaler`: back off on
 *   every overflow, grow after `growth_interval` clean steps if the grown
 *   scale is finite; the scale is kept in single precision
 * @MIXPREC_SCALER_SEMANTICS_MEGATRON: Megatron-LM's `DynamicGradScaler`:
 *   hysteresis counted down on every overflow and refilled only when the
 *   scale grows, growth tracker reset by any overflow; single precision
 * @MIXPREC_SCALER_SEMANTICS_APEX: NVIDIA Apex amp's `LossScaler`: halve on
 *   every overflow (never below an optional minimum), double after
 *   `scale_window` clean steps up to `max_loss_scale` (2^24 by default);
 *   double precision. Since: 1.1
 *
 * Which published loss scaler a #MixprecDynamicScaler reproduces, step
 * for step. Values are appended only, never renumbered.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_SCALER_SEMANTICS_DEEPSPEED = 0,
  MIXPREC_SCALER_SEMANTICS_TORCH = 1,
  MIXPREC_SCALER_SEMANTICS_MEGATRON = 2,
  MIXPREC_SCALER_SEMANTICS_APEX = 3,
} MixprecScalerSemantics;

/**
 * MIXPREC_SCALER_ERROR:
 *
 * Error domain of the loss scalers. Errors in this domain are from the
 * #MixprecScalerError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_SCALER_ERROR (mixprec_scaler_error_quark ())

/**
 * MixprecScalerError:
 * @MIXPREC_SCALER_ERROR_AT_MINIMUM: an overflow arrived while the scale
 *   already equalled its minimum (DeepSpeed's "Current loss scale already
 *   at minimum - cannot decrease scale anymore")
 * @MIXPREC_SCALER_ERROR_INVALID_STATE: a saved state that does not belong
 *   to this scaler or is malformed (wrong type, missing key, wrong value
 *   type, value out of range)
 * @MIXPREC_SCALER_ERROR_INVALID_CONFIG: configuration values a scaler
 *   cannot be built from
 *
 * Errors from the loss scalers. Values are appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_SCALER_ERROR_AT_MINIMUM,
  MIXPREC_SCALER_ERROR_INVALID_STATE,
  MIXPREC_SCALER_ERROR_INVALID_CONFIG,
} MixprecScalerError;

MIXPREC_AVAILABLE_IN_1_0
GQuark mixprec_scaler_error_quark (void);

#define MIXPREC_TYPE_LOSS_SCALER (mixprec_loss_scaler_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_DERIVABLE_TYPE (MixprecLossScaler, mixprec_loss_scaler, MIXPREC, LOSS_SCALER, GObject)

/**
 * MixprecLossScalerClass:
 * @parent_class: the parent class
 * @get_scale: returns the current scale; must be finite and positive
 * @update: advances the scaler by one optimizer step; returns %FALSE with
 *   the error set, and the scaler unchanged, when the step is refused
 * @fill_state: adds the subclass's keys to @state (the base class adds
 *   "type", "steps" and "overflows")
 * @apply_state: checks every subclass key of @state and, only if all are
 *   valid, applies them; otherwise sets the error and changes nothing
 *
 * The virtual functions of a loss scaler. The base class counts steps and
 * overflows, emits #GObject::notify for #MixprecLossScaler:scale and
 * checks the state's type; subclasses hold the scale itself.
 *
 * Since: 1.0
 */
struct _MixprecLossScalerClass
{
  GObjectClass parent_class;

  gdouble  (* get_scale)     (MixprecLossScaler *self);
  gboolean (* update)        (MixprecLossScaler *self,
                              gboolean           overflow,
                              GError           **error);
  void     (* fill_state)    (MixprecLossScaler *self,
                              GVariantDict      *state);
  gboolean (* apply_state)   (MixprecLossScaler *self,
                              GVariantDict      *state,
                              GError           **error);

  /*< private >*/
  gpointer _mixprec_reserved[8];
};

MIXPREC_AVAILABLE_IN_1_0
gdouble   mixprec_loss_scaler_get_scale     (MixprecLossScaler *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean  mixprec_loss_scaler_update        (MixprecLossScaler *self,
                                             gboolean           overflow,
                                             GError           **error);
MIXPREC_AVAILABLE_IN_1_0
guint64   mixprec_loss_scaler_get_steps     (MixprecLossScaler *self);
MIXPREC_AVAILABLE_IN_1_0
guint64   mixprec_loss_scaler_get_overflows (MixprecLossScaler *self);
MIXPREC_AVAILABLE_IN_1_0
GVariant *mixprec_loss_scaler_save_state    (MixprecLossScaler *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean  mixprec_loss_scaler_restore_state (MixprecLossScaler *self,
                                             GVariant          *state,
                                             GError           **error);

/* mixprec_loss_scaler_new_from_config() is declared in
 * mixprec-dynamic-scaler.h: it needs mixprec-config.h, which needs this
 * header for MixprecScalerSemantics. */

G_END_DECLS
