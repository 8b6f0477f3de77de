/* mixprec-loss-scaler-config.c — which scaler a configuration asks for:
 * dynamic for fp16 with loss_scale 0, static otherwise. */
#include "config.h"

#include <math.h>

#include "mixprec.h"

static gboolean
invalid (GError     **error,
         const gchar *key,
         const gchar *rule,
         gdouble      got)
{
  g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG,
               "%s: must be %s to build a loss scaler, got %g", key, rule, got);
  return FALSE;
}

/* The config validates these already; a scaler is also built from configs
 * that were changed or made by other code, so check again. */
static gboolean
check_dynamic (gdouble   init_scale,
               gint      power,
               guint     window,
               guint     hysteresis,
               gdouble   min_scale,
               gdouble   max_scale,
               gdouble   growth,
               gdouble   backoff,
               GError  **error)
{
  if (!isfinite (init_scale) || init_scale < G_MINDOUBLE)
    return invalid (error, "fp16.initial_scale_power",
                    "a power of two that is finite and positive in double precision", power);
  if (window < 1)
    return invalid (error, "fp16.loss_scale_window", "a positive integer", window);
  if (hysteresis < 1)
    return invalid (error, "fp16.hysteresis", "a positive integer", hysteresis);
  /* 0 is no floor (PyTorch, Apex); the scale still stays positive. */
  if (!isfinite (min_scale) || min_scale < 0)
    return invalid (error, "fp16.min_loss_scale", "0 (no floor) or a finite number > 0",
                    min_scale);
  if (!isfinite (max_scale) || max_scale < 0)
    return invalid (error, "mixprec.scaler.max_scale", "0 (no ceiling) or a finite number > 0",
                    max_scale);
  if (max_scale > 0 && max_scale < min_scale)
    return invalid (error, "mixprec.scaler.max_scale", "at least fp16.min_loss_scale", max_scale);
  if (max_scale > 0 && max_scale < init_scale)
    return invalid (error, "mixprec.scaler.max_scale", "at least the initial scale", max_scale);
  if (!isfinite (growth) || growth <= 1)
    return invalid (error, "mixprec.scaler.growth_factor", "a finite number > 1", growth);
  if (!isfinite (backoff) || backoff <= 0 || backoff >= 1)
    return invalid (error, "mixprec.scaler.backoff_factor", "a number between 0 and 1, both excluded",
                    backoff);
  return TRUE;
}

/**
 * mixprec_loss_scaler_new_from_config:
 * @config: a #MixprecConfig
 * @error: return location for a #GError
 *
 * Creates the loss scaler @config asks for: in fp16 mode (and under
 * autocast to fp16) a #MixprecDynamicScaler built from the `fp16` keys and
 * `mixprec.scaler` when `fp16.loss_scale` is 0, otherwise a
 * #MixprecStaticScaler at that scale; in the bf16 modes, under autocast to
 * bf16 and in fp32 mode a #MixprecStaticScaler at 1, as these formats
 * need no loss scaling.
 *
 * Returns: (transfer full) (nullable): a new scaler, or %NULL with @error
 *   set to %MIXPREC_SCALER_ERROR_INVALID_CONFIG when a value cannot make
 *   a scaler (a negative minimum, a growth factor not above 1,
 *   a backoff factor outside (0, 1), a window of 0, an initial scale that
 *   is not finite)
 *
 * Since: 1.0
 */
MixprecLossScaler *
mixprec_loss_scaler_new_from_config (MixprecConfig *config,
                                     GError       **error)
{
  gboolean fp16;
  gdouble loss_scale, init_scale;
  gint power;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  switch (mixprec_config_get_precision_mode (config))
    {
    case MIXPREC_PRECISION_MODE_FP16:
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      fp16 = TRUE;
      break;
    case MIXPREC_PRECISION_MODE_AUTOCAST:
      fp16 = mixprec_config_get_low_dtype (config) == MIXPREC_DTYPE_FLOAT16;
      break;
    case MIXPREC_PRECISION_MODE_FP32:
    case MIXPREC_PRECISION_MODE_BF16:
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
    default:
      fp16 = FALSE;
      break;
    }
  if (!fp16)
    return mixprec_static_scaler_new (1.0);

  loss_scale = mixprec_config_get_loss_scale (config);
  if (!isfinite (loss_scale) || loss_scale < 0 || (loss_scale > 0 && loss_scale < G_MINDOUBLE))
    {
      invalid (error, "fp16.loss_scale", "0 (dynamic) or a finite number > 0 (static)", loss_scale);
      return NULL;
    }
  if (loss_scale > 0)
    return mixprec_static_scaler_new (loss_scale);

  power = mixprec_config_get_initial_scale_power (config);
  init_scale = ldexp (1.0, power);
  if (!check_dynamic (init_scale, power,
                      mixprec_config_get_loss_scale_window (config),
                      mixprec_config_get_hysteresis (config),
                      mixprec_config_get_min_loss_scale (config),
                      mixprec_config_get_max_scale (config),
                      mixprec_config_get_growth_factor (config),
                      mixprec_config_get_backoff_factor (config),
                      error))
    return NULL;

  return g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", mixprec_config_get_scaler_semantics (config),
                       "init-scale", init_scale,
                       "scale-window", mixprec_config_get_loss_scale_window (config),
                       "hysteresis", mixprec_config_get_hysteresis (config),
                       "consecutive-hysteresis", mixprec_config_get_consecutive_hysteresis (config),
                       "min-scale", mixprec_config_get_min_loss_scale (config),
                       "max-scale", mixprec_config_get_max_scale (config),
                       "growth-factor", mixprec_config_get_growth_factor (config),
                       "backoff-factor", mixprec_config_get_backoff_factor (config),
                       "raise-at-min-scale", mixprec_config_get_raise_at_min_scale (config),
                       NULL);
}
