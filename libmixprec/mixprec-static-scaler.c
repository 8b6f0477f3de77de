/* mixprec-static-scaler.c — DeepSpeed's static loss scale (fp16.loss_scale
 * > 0) and the implicit scale 1 of bf16 and fp32 training. */
#include "config.h"

#include <math.h>

#include "mixprec.h"
#include "mixprec-loss-scaler-private.h"

/**
 * MixprecStaticScaler:
 *
 * A loss scaler with one fixed scale. Overflowing steps are still counted
 * (the caller skips them) but never change the scale, so an update never
 * fails.
 *
 * Since: 1.0
 */
struct _MixprecStaticScaler
{
  MixprecLossScaler parent_instance;

  gdouble scale;
};

G_DEFINE_FINAL_TYPE (MixprecStaticScaler, mixprec_static_scaler, MIXPREC_TYPE_LOSS_SCALER)

enum
{
  PROP_0,
  PROP_INIT_SCALE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void
mixprec_static_scaler_get_property (GObject    *object,
                                    guint       prop_id,
                                    GValue     *value,
                                    GParamSpec *pspec)
{
  MixprecStaticScaler *self = MIXPREC_STATIC_SCALER (object);

  switch (prop_id)
    {
    case PROP_INIT_SCALE:
      g_value_set_double (value, self->scale);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_static_scaler_set_property (GObject      *object,
                                    guint         prop_id,
                                    const GValue *value,
                                    GParamSpec   *pspec)
{
  MixprecStaticScaler *self = MIXPREC_STATIC_SCALER (object);

  switch (prop_id)
    {
    case PROP_INIT_SCALE:
      self->scale = g_value_get_double (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static gdouble
mixprec_static_scaler_get_scale (MixprecLossScaler *scaler)
{
  return MIXPREC_STATIC_SCALER (scaler)->scale;
}

static gboolean
mixprec_static_scaler_update (MixprecLossScaler *scaler,
                              gboolean           overflow,
                              GError           **error)
{
  return TRUE;
}

static void
mixprec_static_scaler_fill_state (MixprecLossScaler *scaler,
                                  GVariantDict      *state)
{
  g_variant_dict_insert (state, "scale", "d", MIXPREC_STATIC_SCALER (scaler)->scale);
}

static gboolean
mixprec_static_scaler_apply_state (MixprecLossScaler *scaler,
                                     GVariantDict      *state,
                                     GError           **error)
{
  gdouble scale;

  if (!_mixprec_scaler_state_get_double (state, "scale", G_MINDOUBLE, TRUE, G_MAXDOUBLE,
                                         &scale, error))
    return FALSE;

  MIXPREC_STATIC_SCALER (scaler)->scale = scale;
  return TRUE;
}

static void
mixprec_static_scaler_class_init (MixprecStaticScalerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  MixprecLossScalerClass *scaler_class = MIXPREC_LOSS_SCALER_CLASS (klass);

  object_class->get_property = mixprec_static_scaler_get_property;
  object_class->set_property = mixprec_static_scaler_set_property;
  scaler_class->get_scale = mixprec_static_scaler_get_scale;
  scaler_class->update = mixprec_static_scaler_update;
  scaler_class->fill_state = mixprec_static_scaler_fill_state;
  scaler_class->apply_state = mixprec_static_scaler_apply_state;

  /**
   * MixprecStaticScaler:init-scale:
   *
   * The fixed scale: finite and at least %G_MINDOUBLE (the smallest
   * positive normal double), so that its inverse is finite too.
   *
   * Since: 1.0
   */
  properties[PROP_INIT_SCALE] =
    g_param_spec_double ("init-scale", NULL, NULL,
                         G_MINDOUBLE, G_MAXDOUBLE, 1.0,
                         G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_static_scaler_init (MixprecStaticScaler *self)
{
  self->scale = 1.0;
}

/**
 * mixprec_static_scaler_new:
 * @scale: the fixed scale, finite and at least %G_MINDOUBLE
 *
 * Creates a scaler that always returns @scale: DeepSpeed's
 * `fp16.loss_scale` > 0, or 1 for bf16 and fp32 training.
 *
 * Another @scale is a programmer error (a critical warning and %NULL);
 * mixprec_static_scaler_new_full() reports it with a #GError instead.
 *
 * Returns: (transfer full) (type MixprecStaticScaler): a new #MixprecStaticScaler
 *
 * Since: 1.0
 */
MixprecLossScaler *
mixprec_static_scaler_new (gdouble scale)
{
  g_return_val_if_fail (isfinite (scale) && scale >= G_MINDOUBLE, NULL);

  return g_object_new (MIXPREC_TYPE_STATIC_SCALER, "init-scale", scale, NULL);
}

/**
 * mixprec_static_scaler_new_full:
 * @scale: the fixed scale, finite and at least %G_MINDOUBLE
 * @error: return location for a #GError
 *
 * Like mixprec_static_scaler_new(), for a value that comes from a user.
 *
 * Returns: (transfer full) (type MixprecStaticScaler): a new
 *   #MixprecStaticScaler, or %NULL with @error set to
 *   %MIXPREC_SCALER_ERROR_INVALID_CONFIG
 *
 * Since: 1.1
 */
MixprecLossScaler *
mixprec_static_scaler_new_full (gdouble   scale,
                                GError  **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!(isfinite (scale) && scale >= G_MINDOUBLE))
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG,
                   "scale: must be a finite number of at least %g, got %g", G_MINDOUBLE, scale);
      return NULL;
    }
  return mixprec_static_scaler_new (scale);
}
