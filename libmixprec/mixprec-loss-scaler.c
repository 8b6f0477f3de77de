/* mixprec-loss-scaler.c — the abstract loss scaler: step and overflow
 * counting, scale notification, and the framing of saved states that the
 * subclasses fill in. */
#include "config.h"

#include <math.h>

#include "mixprec.h"
#include "mixprec-loss-scaler-private.h"

/**
 * MixprecLossScaler:
 *
 * Scales the loss before the backward pass so that small gradients survive
 * in a low-precision format, and adapts the scale to overflows.
 *
 * A loss scaler is told once per optimizer step whether any gradient of
 * that step was not finite (mixprec_loss_scaler_update()); the caller skips
 * such steps. #MixprecStaticScaler keeps one scale; #MixprecDynamicScaler
 * reproduces the dynamic scalers of DeepSpeed, PyTorch and Megatron-LM.
 *
 * Subclasses implement #MixprecLossScalerClass.get_scale and
 * #MixprecLossScalerClass.update, and save and restore their own state
 * through #MixprecLossScalerClass.fill_state and
 * #MixprecLossScalerClass.apply_state.
 *
 * Since: 1.0
 */

typedef struct
{
  guint64 steps;
  guint64 overflows;
} MixprecLossScalerPrivate;

G_DEFINE_ABSTRACT_TYPE_WITH_PRIVATE (MixprecLossScaler, mixprec_loss_scaler, G_TYPE_OBJECT)

/**
 * mixprec_scaler_error_quark:
 *
 * Gets the error domain of the loss scalers.
 *
 * Returns: the quark behind %MIXPREC_SCALER_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-scaler-error-quark, mixprec_scaler_error)

enum
{
  PROP_0,
  PROP_SCALE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void
mixprec_loss_scaler_get_property (GObject    *object,
                                  guint       prop_id,
                                  GValue     *value,
                                  GParamSpec *pspec)
{
  MixprecLossScaler *self = MIXPREC_LOSS_SCALER (object);

  switch (prop_id)
    {
    case PROP_SCALE:
      g_value_set_double (value, mixprec_loss_scaler_get_scale (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_loss_scaler_class_init (MixprecLossScalerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->get_property = mixprec_loss_scaler_get_property;

  /**
   * MixprecLossScaler:scale:
   *
   * The current loss scale: the factor the loss is multiplied by before
   * the backward pass. Always finite and positive.
   *
   * Since: 1.0
   */
  properties[PROP_SCALE] =
    g_param_spec_double ("scale", NULL, NULL,
                         0.0, G_MAXDOUBLE, 1.0,
                         G_PARAM_READABLE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_loss_scaler_init (MixprecLossScaler *self)
{
}

/**
 * mixprec_loss_scaler_get_scale:
 * @self: a #MixprecLossScaler
 *
 * Gives the factor the loss is multiplied by before the backward pass.
 *
 * Returns: the current loss scale, finite and positive
 *
 * Since: 1.0
 */
gdouble
mixprec_loss_scaler_get_scale (MixprecLossScaler *self)
{
  MixprecLossScalerClass *klass;

  g_return_val_if_fail (MIXPREC_IS_LOSS_SCALER (self), 1.0);

  klass = MIXPREC_LOSS_SCALER_GET_CLASS (self);
  g_return_val_if_fail (klass->get_scale != NULL, 1.0);

  return klass->get_scale (self);
}

/**
 * mixprec_loss_scaler_update:
 * @self: a #MixprecLossScaler
 * @overflow: whether any gradient of this step was not finite
 * @error: return location for a #GError
 *
 * Advances the scaler by one optimizer step. On success the step is
 * counted (and counted as an overflow when @overflow is set), and
 * #GObject::notify is emitted for #MixprecLossScaler:scale if the scale
 * changed.
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_SCALER_ERROR_AT_MINIMUM when an overflow arrives while the
 *   scale already equals its minimum and
 *   #MixprecDynamicScaler:raise-at-min-scale is set. A refused step
 *   changes nothing, counters included, as DeepSpeed raises before it
 *   touches its state.
 *
 * Since: 1.0
 */
gboolean
mixprec_loss_scaler_update (MixprecLossScaler *self,
                            gboolean           overflow,
                            GError           **error)
{
  MixprecLossScalerPrivate *priv;
  MixprecLossScalerClass *klass;
  gdouble before;

  g_return_val_if_fail (MIXPREC_IS_LOSS_SCALER (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  priv = mixprec_loss_scaler_get_instance_private (self);
  klass = MIXPREC_LOSS_SCALER_GET_CLASS (self);
  g_return_val_if_fail (klass->update != NULL && klass->get_scale != NULL, FALSE);

  before = klass->get_scale (self);
  if (!klass->update (self, overflow != FALSE, error))
    return FALSE;

  priv->steps++;
  if (overflow)
    priv->overflows++;
  if (klass->get_scale (self) != before)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SCALE]);

  return TRUE;
}

/**
 * mixprec_loss_scaler_get_steps:
 * @self: a #MixprecLossScaler
 *
 * Gives how many updates the scaler has accepted; a restored state brings
 * its count along.
 *
 * Returns: how many updates the scaler accepted, overflowing ones included
 *
 * Since: 1.0
 */
guint64
mixprec_loss_scaler_get_steps (MixprecLossScaler *self)
{
  MixprecLossScalerPrivate *priv;

  g_return_val_if_fail (MIXPREC_IS_LOSS_SCALER (self), 0);

  priv = mixprec_loss_scaler_get_instance_private (self);
  return priv->steps;
}

/**
 * mixprec_loss_scaler_get_overflows:
 * @self: a #MixprecLossScaler
 *
 * Gives how many of the updates the scaler accepted reported an overflow.
 *
 * Returns: how many accepted updates reported an overflow, that is how
 *   many optimizer steps were skipped
 *
 * Since: 1.0
 */
guint64
mixprec_loss_scaler_get_overflows (MixprecLossScaler *self)
{
  MixprecLossScalerPrivate *priv;

  g_return_val_if_fail (MIXPREC_IS_LOSS_SCALER (self), 0);

  priv = mixprec_loss_scaler_get_instance_private (self);
  return priv->overflows;
}

/**
 * mixprec_loss_scaler_save_state:
 * @self: a #MixprecLossScaler
 *
 * Describes everything needed to resume this scaler bit-exactly: a
 * dictionary (`a{sv}`) holding "type" (the #GType name, `s`), "steps" and
 * "overflows" (`t`), and the keys of the subclass (for
 * #MixprecDynamicScaler its parameters, scale and counters).
 *
 * Returns: (transfer full): the state, a non-floating `a{sv}` #GVariant
 *
 * Since: 1.0
 */
GVariant *
mixprec_loss_scaler_save_state (MixprecLossScaler *self)
{
  MixprecLossScalerPrivate *priv;
  MixprecLossScalerClass *klass;
  /* On the heap: bindings take a reference to what a vfunc is given. */
  g_autoptr(GVariantDict) dict = g_variant_dict_new (NULL);

  g_return_val_if_fail (MIXPREC_IS_LOSS_SCALER (self), NULL);

  priv = mixprec_loss_scaler_get_instance_private (self);
  klass = MIXPREC_LOSS_SCALER_GET_CLASS (self);

  g_variant_dict_insert (dict, "type", "s", G_OBJECT_TYPE_NAME (self));
  g_variant_dict_insert (dict, "steps", "t", priv->steps);
  g_variant_dict_insert (dict, "overflows", "t", priv->overflows);
  if (klass->fill_state != NULL)
    klass->fill_state (self, dict);

  return g_variant_ref_sink (g_variant_dict_end (dict));
}

/**
 * mixprec_loss_scaler_restore_state:
 * @self: a #MixprecLossScaler
 * @state: a state from mixprec_loss_scaler_save_state()
 * @error: return location for a #GError
 *
 * Puts the scaler back into a saved state, after which it continues
 * exactly as the scaler that saved it would have. Keys the scaler does not
 * know are ignored, so that newer versions can add some.
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_SCALER_ERROR_INVALID_STATE when @state is not an `a{sv}`
 *   dictionary, was saved by another kind of scaler (or another
 *   #MixprecDynamicScaler:semantics), lacks a key, holds a value of the
 *   wrong type or out of range. The scaler is unchanged on failure.
 *
 * Since: 1.0
 */
gboolean
mixprec_loss_scaler_restore_state (MixprecLossScaler *self,
                                   GVariant          *state,
                                   GError           **error)
{
  MixprecLossScalerPrivate *priv;
  MixprecLossScalerClass *klass;
  g_autoptr(GVariantDict) dict = NULL;
  g_autoptr(GVariant) type = NULL;
  g_autoptr(GVariant) steps = NULL;
  g_autoptr(GVariant) overflows = NULL;
  const gchar *type_name;
  gdouble before;

  g_return_val_if_fail (MIXPREC_IS_LOSS_SCALER (self), FALSE);
  g_return_val_if_fail (state != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  priv = mixprec_loss_scaler_get_instance_private (self);
  klass = MIXPREC_LOSS_SCALER_GET_CLASS (self);

  if (!g_variant_is_of_type (state, G_VARIANT_TYPE_VARDICT))
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: must be a dictionary of type “a{sv}”, got a value of type “%s”",
                   g_variant_get_type_string (state));
      return FALSE;
    }

  dict = g_variant_dict_new (state);
  if (!_mixprec_scaler_state_lookup (dict, "type", G_VARIANT_TYPE_STRING, &type, error))
    return FALSE;
  type_name = g_variant_get_string (type, NULL);
  if (g_strcmp0 (type_name, G_OBJECT_TYPE_NAME (self)) != 0)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: “type” is “%s”, but this scaler is a %s; "
                   "restore the state into a scaler of the kind that saved it",
                   type_name, G_OBJECT_TYPE_NAME (self));
      return FALSE;
    }
  if (!_mixprec_scaler_state_lookup (dict, "steps", G_VARIANT_TYPE_UINT64, &steps, error) ||
      !_mixprec_scaler_state_lookup (dict, "overflows", G_VARIANT_TYPE_UINT64, &overflows, error))
    return FALSE;
  if (g_variant_get_uint64 (overflows) > g_variant_get_uint64 (steps))
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: “overflows” (%" G_GUINT64_FORMAT ") must not exceed "
                   "“steps” (%" G_GUINT64_FORMAT "); the state is corrupt",
                   g_variant_get_uint64 (overflows), g_variant_get_uint64 (steps));
      return FALSE;
    }

  before = mixprec_loss_scaler_get_scale (self);
  if (klass->apply_state != NULL && !klass->apply_state (self, dict, error))
    return FALSE;

  priv->steps = g_variant_get_uint64 (steps);
  priv->overflows = g_variant_get_uint64 (overflows);
  if (mixprec_loss_scaler_get_scale (self) != before)
    g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_SCALE]);

  return TRUE;
}

gboolean
_mixprec_scaler_state_lookup (GVariantDict        *state,
                              const gchar         *key,
                              const GVariantType  *type,
                              GVariant           **value,
                              GError             **error)
{
  g_autoptr(GVariant) v = g_variant_dict_lookup_value (state, key, NULL);

  if (v == NULL)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: the key “%s” is missing; pass a state made by "
                   "mixprec_loss_scaler_save_state()", key);
      return FALSE;
    }
  if (!g_variant_is_of_type (v, type))
    {
      g_autofree gchar *wanted = g_variant_type_dup_string (type);

      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: the key “%s” must hold a value of type “%s”, got “%s”",
                   key, wanted, g_variant_get_type_string (v));
      return FALSE;
    }

  *value = g_steal_pointer (&v);
  return TRUE;
}

gboolean
_mixprec_scaler_state_get_double (GVariantDict  *state,
                                  const gchar   *key,
                                  gdouble        min,
                                  gboolean       min_inclusive,
                                  gdouble        max,
                                  gdouble       *value,
                                  GError       **error)
{
  g_autoptr(GVariant) v = NULL;
  gdouble d;

  if (!_mixprec_scaler_state_lookup (state, key, G_VARIANT_TYPE_DOUBLE, &v, error))
    return FALSE;

  d = g_variant_get_double (v);
  if (!isfinite (d) || d < min || (d == min && !min_inclusive) || d > max)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: the key “%s” must be a finite number %s %g and at most %g, got %g",
                   key, min_inclusive ? ">=" : ">", min, max, d);
      return FALSE;
    }

  *value = d;
  return TRUE;
}
