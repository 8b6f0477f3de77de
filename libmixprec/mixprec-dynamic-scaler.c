/* mixprec-dynamic-scaler.c — the dynamic loss scaler: one set of parameters,
 * four published update rules (DeepSpeed, PyTorch GradScaler, Megatron-LM,
 * Apex amp)
 * reproduced to the bit, plus the guarantee that the scale stays finite and
 * positive. */
#include "config.h"

#include <float.h>
#include <math.h>

#include "mixprec.h"
#include "mixprec-loss-scaler-private.h"

/**
 * MixprecDynamicScaler:
 *
 * A loss scaler that lowers the scale when gradients overflow and raises it
 * again after a run of clean steps, following one of four published
 * scalers chosen by #MixprecDynamicScaler:semantics:
 *
 * - %MIXPREC_SCALER_SEMANTICS_DEEPSPEED (the default) follows DeepSpeed's
 *   `DynamicLossScaler`: an overflow first uses up the hysteresis, then
 *   divides the scale by #MixprecDynamicScaler:growth-factor (DeepSpeed's
 *   `scale_factor` both ways; #MixprecDynamicScaler:backoff-factor is not
 *   used), never below #MixprecDynamicScaler:min-scale; an overflow while
 *   the scale already equals its minimum is refused with
 *   %MIXPREC_SCALER_ERROR_AT_MINIMUM when
 *   #MixprecDynamicScaler:raise-at-min-scale is set. After
 *   #MixprecDynamicScaler:scale-window clean steps since the last overflow
 *   the scale is multiplied by the growth factor and the hysteresis is
 *   refilled; with #MixprecDynamicScaler:consecutive-hysteresis every
 *   clean step refills it. Double precision.
 * - %MIXPREC_SCALER_SEMANTICS_TORCH follows PyTorch's `GradScaler`: every
 *   overflow multiplies the scale by the backoff factor and restarts the
 *   growth count; the scale grows after #MixprecDynamicScaler:scale-window
 *   (`growth_interval`) consecutive clean steps. The scale is a
 *   single-precision number, each product computed in double and rounded
 *   to single as PyTorch's kernel does. Hysteresis, consecutive hysteresis
 *   and raise-at-min-scale do not apply; min-scale defaults to 0 (none).
 * - %MIXPREC_SCALER_SEMANTICS_MEGATRON follows Megatron-LM's
 *   `DynamicGradScaler`: every overflow restarts the growth count and
 *   counts the hysteresis down; once it reaches zero each overflow
 *   multiplies the scale by the backoff factor, never below the minimum.
 *   After scale-window consecutive clean steps the scale grows and the
 *   hysteresis is refilled. The scale is a single-precision number and the
 *   products are single-precision, as a float32 tensor times a Python
 *   number is in PyTorch. Consecutive hysteresis and raise-at-min-scale do
 *   not apply.
 * - %MIXPREC_SCALER_SEMANTICS_APEX follows NVIDIA Apex amp's `LossScaler`
 *   (`loss_scale="dynamic"`): every overflow multiplies the scale by the
 *   backoff factor (Apex halves it), never below min-scale when that is
 *   positive (`min_loss_scale`; default 0, none), and restarts the count
 *   of clean steps; after scale-window (2000) consecutive clean steps the
 *   scale is multiplied by the growth factor, capped at
 *   #MixprecDynamicScaler:max-scale (`max_loss_scale`, default 2^24).
 *   Double precision, as Apex keeps the scale in a Python float.
 *   Hysteresis, consecutive hysteresis and raise-at-min-scale do not
 *   apply.
 *
 * In every semantics, where the published scaler would overflow to
 * infinity or underflow to zero libmixprec does not: a growth whose result
 * is not finite keeps the old scale (PyTorch's own rule, extended to the
 * other two), and no backoff goes below the smallest positive normal
 * number of the scale's precision (%G_MINDOUBLE, or `FLT_MIN` in single
 * precision) so that the inverse scale stays finite. An optional
 * #MixprecDynamicScaler:max-scale caps growth.
 *
 * Parameters left unset at construction take the defaults of the chosen
 * semantics. Setting a parameter before the first update is the same as
 * passing it at construction (#MixprecDynamicScaler:init-scale then also
 * sets the scale, #MixprecDynamicScaler:hysteresis the hysteresis
 * counter); afterwards it applies from the next update and the running
 * state is kept.
 *
 * Since: 1.0
 */
/* The parameters and the running state, kept together so that a restore
 * can check a complete copy before it replaces them. */
typedef struct
{
  gdouble init_scale;
  guint scale_window;
  guint hysteresis;
  gboolean consecutive_hysteresis;
  gdouble min_scale;
  gdouble max_scale;
  gdouble growth_factor;
  gdouble backoff_factor;
  gboolean raise_at_min_scale;

  /* In single-precision semantics always a float value. */
  gdouble scale;
  /* DeepSpeed's cur_iter and last_overflow_iter. */
  gint64 iteration;
  gint64 last_overflow_iteration;
  /* DeepSpeed's cur_hysteresis, Megatron's hysteresis tracker (which goes
   * below zero while overflows keep coming). */
  gint64 hysteresis_left;
  /* PyTorch's and Megatron's growth tracker. */
  guint64 growth_tracker;
} DynamicState;

struct _MixprecDynamicScaler
{
  MixprecLossScaler parent_instance;

  MixprecScalerSemantics semantics;
  DynamicState st;
};

G_DEFINE_FINAL_TYPE (MixprecDynamicScaler, mixprec_dynamic_scaler, MIXPREC_TYPE_LOSS_SCALER)

enum
{
  PROP_0,
  PROP_SEMANTICS,
  PROP_INIT_SCALE,
  PROP_SCALE_WINDOW,
  PROP_HYSTERESIS,
  PROP_CONSECUTIVE_HYSTERESIS,
  PROP_MIN_SCALE,
  PROP_MAX_SCALE,
  PROP_GROWTH_FACTOR,
  PROP_BACKOFF_FACTOR,
  PROP_RAISE_AT_MIN_SCALE,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/* The smallest growth factor above 1 and the largest backoff below 1. */
#define GROWTH_MIN (1.0 + DBL_EPSILON)
#define BACKOFF_MAX (1.0 - DBL_EPSILON / 2)

typedef struct
{
  gdouble init_scale;
  guint scale_window;
  guint hysteresis;
  gdouble min_scale;
  gdouble max_scale;
  gboolean raise_at_min_scale;
} SemanticsDefaults;

static const SemanticsDefaults semantics_defaults[] = {
  /* DeepSpeed: initial_scale_power 16, loss_scale_window 1000, hysteresis 2,
   * min_loss_scale 1, raise_error_at_min_scale True. */
  [MIXPREC_SCALER_SEMANTICS_DEEPSPEED] = { 65536.0, 1000, 2, 1.0, 0.0, TRUE },
  /* PyTorch: init_scale 2^16, growth_interval 2000, no hysteresis, no minimum. */
  [MIXPREC_SCALER_SEMANTICS_TORCH] = { 65536.0, 2000, 1, 0.0, 0.0, FALSE },
  /* Megatron-LM: initial scale 2^32, window 1000, hysteresis 2, min 1. */
  [MIXPREC_SCALER_SEMANTICS_MEGATRON] = { 4294967296.0, 1000, 2, 1.0, 0.0, FALSE },
  /* Apex amp: init_scale 2^16, scale_window 2000, min_loss_scale None,
   * max_loss_scale 2^24. */
  [MIXPREC_SCALER_SEMANTICS_APEX] = { 65536.0, 2000, 1, 0.0, 16777216.0, FALSE },
};

static gboolean
is_single_precision (MixprecDynamicScaler *self)
{
  return self->semantics == MIXPREC_SCALER_SEMANTICS_TORCH
         || self->semantics == MIXPREC_SCALER_SEMANTICS_MEGATRON;
}

/* Rounds to the precision of the scale, clamped to its finite positive
 * normal range. */
static gdouble
to_scale_precision (MixprecDynamicScaler *self,
                    gdouble               value)
{
  if (is_single_precision (self))
    {
      float f = (float) MIN (value, (gdouble) FLT_MAX);

      return MAX (f, FLT_MIN);
    }
  return CLAMP (value, G_MINDOUBLE, G_MAXDOUBLE);
}

static gdouble
effective_min_scale (MixprecDynamicScaler *self)
{
  return to_scale_precision (self, self->st.min_scale);
}

static gdouble
grow (MixprecDynamicScaler *self,
      gdouble               scale)
{
  gdouble grown;

  switch (self->semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_TORCH:
      grown = (float) (scale * self->st.growth_factor);
      break;
    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
      {
        float product = (float) scale * (float) self->st.growth_factor;

        grown = product;
      }
      break;
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
    default:
      grown = scale * self->st.growth_factor;
      break;
    }

  if (!isfinite (grown))
    return scale;
  if (self->st.max_scale > 0)
    {
      gdouble cap = to_scale_precision (self, self->st.max_scale);

      /* A scale that starts above the cap is not lowered by a growth. */
      if (grown > cap)
        grown = MAX (cap, scale);
    }
  return grown;
}

static gdouble
back_off (MixprecDynamicScaler *self,
          gdouble               scale)
{
  gdouble lowered;

  switch (self->semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_TORCH:
      lowered = (float) (scale * self->st.backoff_factor);
      break;
    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
      {
        float product = (float) scale * (float) self->st.backoff_factor;

        lowered = product;
      }
      break;
    case MIXPREC_SCALER_SEMANTICS_APEX:
      lowered = scale * self->st.backoff_factor;
      break;
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
    default:
      lowered = scale / self->st.growth_factor;
      break;
    }

  return MAX (lowered, effective_min_scale (self));
}

static gboolean
update_deepspeed (MixprecDynamicScaler *self,
                  gboolean              overflow,
                  GError              **error)
{
  if (overflow)
    {
      if (self->st.hysteresis == 1 || self->st.hysteresis_left == 1)
        {
          if (self->st.scale == effective_min_scale (self) && self->st.raise_at_min_scale)
            {
              g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM,
                           "Current loss scale already at minimum - cannot decrease scale anymore "
                           "(scale %g, min-scale %g, step %" G_GINT64_FORMAT "); lower "
                           "fp16.min_loss_scale, or unset raise-at-min-scale to keep "
                           "skipping steps at the minimum",
                           self->st.scale, self->st.min_scale, self->st.iteration);
              return FALSE;
            }
          self->st.scale = back_off (self, self->st.scale);
        }
      else
        {
          self->st.hysteresis_left--;
        }
      self->st.last_overflow_iteration = self->st.iteration;
    }
  else
    {
      gint64 stable;

      if (self->st.consecutive_hysteresis)
        self->st.hysteresis_left = self->st.hysteresis;
      stable = self->st.iteration - self->st.last_overflow_iteration - 1;
      if (stable > 0 && stable % self->st.scale_window == 0)
        {
          if (!self->st.consecutive_hysteresis)
            self->st.hysteresis_left = self->st.hysteresis;
          self->st.scale = grow (self, self->st.scale);
        }
    }
  self->st.iteration++;
  return TRUE;
}

static void
update_torch (MixprecDynamicScaler *self,
              gboolean              overflow)
{
  if (overflow)
    {
      self->st.scale = back_off (self, self->st.scale);
      self->st.growth_tracker = 0;
    }
  else
    {
      /* ">=" rather than PyTorch's "==" only matters when scale-window is
       * lowered below a running count. */
      if (++self->st.growth_tracker >= self->st.scale_window)
        {
          self->st.scale = grow (self, self->st.scale);
          self->st.growth_tracker = 0;
        }
    }
  self->st.iteration++;
}

static void
update_megatron (MixprecDynamicScaler *self,
                 gboolean              overflow)
{
  if (overflow)
    {
      self->st.growth_tracker = 0;
      self->st.hysteresis_left--;
      if (self->st.hysteresis_left <= 0)
        self->st.scale = back_off (self, self->st.scale);
      self->st.last_overflow_iteration = self->st.iteration;
    }
  else
    {
      if (++self->st.growth_tracker >= self->st.scale_window)
        {
          self->st.growth_tracker = 0;
          self->st.hysteresis_left = self->st.hysteresis;
          self->st.scale = grow (self, self->st.scale);
        }
    }
  self->st.iteration++;
}

static gboolean
mixprec_dynamic_scaler_update (MixprecLossScaler *scaler,
                               gboolean           overflow,
                               GError           **error)
{
  MixprecDynamicScaler *self = MIXPREC_DYNAMIC_SCALER (scaler);

  switch (self->semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_TORCH:
    case MIXPREC_SCALER_SEMANTICS_APEX:
      /* Apex's _unskipped is GradScaler's growth tracker; only the
       * arithmetic (double here) and the cap differ. */
      update_torch (self, overflow);
      return TRUE;
    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
      update_megatron (self, overflow);
      return TRUE;
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
    default:
      return update_deepspeed (self, overflow, error);
    }
}

static gdouble
mixprec_dynamic_scaler_get_scale (MixprecLossScaler *scaler)
{
  return MIXPREC_DYNAMIC_SCALER (scaler)->st.scale;
}

/* The names saved states use; stable across versions. */
static const gchar *
semantics_nick (MixprecScalerSemantics semantics)
{
  switch (semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
      return "deepspeed";
    case MIXPREC_SCALER_SEMANTICS_TORCH:
      return "torch";
    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
      return "megatron";
    case MIXPREC_SCALER_SEMANTICS_APEX:
      return "apex";
    default:
      return "unknown";
    }
}

static void
mixprec_dynamic_scaler_fill_state (MixprecLossScaler *scaler,
                                   GVariantDict      *state)
{
  MixprecDynamicScaler *self = MIXPREC_DYNAMIC_SCALER (scaler);

  g_variant_dict_insert (state, "semantics", "s", semantics_nick (self->semantics));
  g_variant_dict_insert (state, "init-scale", "d", self->st.init_scale);
  g_variant_dict_insert (state, "scale-window", "u", self->st.scale_window);
  g_variant_dict_insert (state, "hysteresis", "u", self->st.hysteresis);
  g_variant_dict_insert (state, "consecutive-hysteresis", "b", self->st.consecutive_hysteresis);
  g_variant_dict_insert (state, "min-scale", "d", self->st.min_scale);
  g_variant_dict_insert (state, "max-scale", "d", self->st.max_scale);
  g_variant_dict_insert (state, "growth-factor", "d", self->st.growth_factor);
  g_variant_dict_insert (state, "backoff-factor", "d", self->st.backoff_factor);
  g_variant_dict_insert (state, "raise-at-min-scale", "b", self->st.raise_at_min_scale);
  g_variant_dict_insert (state, "scale", "d", self->st.scale);
  g_variant_dict_insert (state, "iteration", "x", self->st.iteration);
  g_variant_dict_insert (state, "last-overflow-iteration", "x", self->st.last_overflow_iteration);
  g_variant_dict_insert (state, "hysteresis-left", "x", self->st.hysteresis_left);
  g_variant_dict_insert (state, "growth-tracker", "t", self->st.growth_tracker);
}

static gboolean
state_get_uint (GVariantDict *state,
                const gchar  *key,
                guint        *value,
                GError      **error)
{
  g_autoptr(GVariant) v = NULL;

  if (!_mixprec_scaler_state_lookup (state, key, G_VARIANT_TYPE_UINT32, &v, error))
    return FALSE;
  *value = g_variant_get_uint32 (v);
  if (*value == 0)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: the key “%s” must be at least 1, got 0", key);
      return FALSE;
    }
  return TRUE;
}

static gboolean
state_get_boolean (GVariantDict *state,
                   const gchar  *key,
                   gboolean     *value,
                   GError      **error)
{
  g_autoptr(GVariant) v = NULL;

  if (!_mixprec_scaler_state_lookup (state, key, G_VARIANT_TYPE_BOOLEAN, &v, error))
    return FALSE;
  *value = g_variant_get_boolean (v);
  return TRUE;
}

static gboolean
state_get_int64 (GVariantDict *state,
                 const gchar  *key,
                 gint64       *value,
                 GError      **error)
{
  g_autoptr(GVariant) v = NULL;

  if (!_mixprec_scaler_state_lookup (state, key, G_VARIANT_TYPE_INT64, &v, error))
    return FALSE;
  *value = g_variant_get_int64 (v);
  return TRUE;
}

static gboolean
state_invalid (GError     **error,
               const gchar *key,
               const gchar *rule,
               gint64       got)
{
  g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
               "loss scaler state: the key “%s” %s, got %" G_GINT64_FORMAT "; the state is corrupt",
               key, rule, got);
  return FALSE;
}

static void
notify_changed_parameters (MixprecDynamicScaler *self,
                           const DynamicState   *old)
{
  GObject *object = G_OBJECT (self);
  const DynamicState *st = &self->st;

  g_object_freeze_notify (object);
  if (st->init_scale != old->init_scale)
    g_object_notify_by_pspec (object, properties[PROP_INIT_SCALE]);
  if (st->scale_window != old->scale_window)
    g_object_notify_by_pspec (object, properties[PROP_SCALE_WINDOW]);
  if (st->hysteresis != old->hysteresis)
    g_object_notify_by_pspec (object, properties[PROP_HYSTERESIS]);
  if (st->consecutive_hysteresis != old->consecutive_hysteresis)
    g_object_notify_by_pspec (object, properties[PROP_CONSECUTIVE_HYSTERESIS]);
  if (st->min_scale != old->min_scale)
    g_object_notify_by_pspec (object, properties[PROP_MIN_SCALE]);
  if (st->max_scale != old->max_scale)
    g_object_notify_by_pspec (object, properties[PROP_MAX_SCALE]);
  if (st->growth_factor != old->growth_factor)
    g_object_notify_by_pspec (object, properties[PROP_GROWTH_FACTOR]);
  if (st->backoff_factor != old->backoff_factor)
    g_object_notify_by_pspec (object, properties[PROP_BACKOFF_FACTOR]);
  if (st->raise_at_min_scale != old->raise_at_min_scale)
    g_object_notify_by_pspec (object, properties[PROP_RAISE_AT_MIN_SCALE]);
  g_object_thaw_notify (object);
}

static gboolean
mixprec_dynamic_scaler_apply_state (MixprecLossScaler *scaler,
                                      GVariantDict      *state,
                                      GError           **error)
{
  MixprecDynamicScaler *self = MIXPREC_DYNAMIC_SCALER (scaler);
  DynamicState st = self->st;
  DynamicState old;
  g_autoptr(GVariant) semantics = NULL;
  g_autoptr(GVariant) growth_tracker = NULL;
  const gchar *nick;

  if (!_mixprec_scaler_state_lookup (state, "semantics", G_VARIANT_TYPE_STRING, &semantics, error))
    return FALSE;
  nick = g_variant_get_string (semantics, NULL);
  if (g_strcmp0 (nick, semantics_nick (self->semantics)) != 0)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: saved with “%s” semantics, but this scaler has “%s” "
                   "semantics; create the scaler with the semantics that saved the state",
                   nick, semantics_nick (self->semantics));
      return FALSE;
    }

  if (!_mixprec_scaler_state_get_double (state, "init-scale", G_MINDOUBLE, TRUE, G_MAXDOUBLE,
                                         &st.init_scale, error) ||
      !state_get_uint (state, "scale-window", &st.scale_window, error) ||
      !state_get_uint (state, "hysteresis", &st.hysteresis, error) ||
      !state_get_boolean (state, "consecutive-hysteresis", &st.consecutive_hysteresis, error) ||
      !_mixprec_scaler_state_get_double (state, "min-scale", 0.0, TRUE, G_MAXDOUBLE,
                                         &st.min_scale, error) ||
      !_mixprec_scaler_state_get_double (state, "max-scale", 0.0, TRUE, G_MAXDOUBLE,
                                         &st.max_scale, error) ||
      !_mixprec_scaler_state_get_double (state, "growth-factor", GROWTH_MIN, TRUE, G_MAXDOUBLE,
                                         &st.growth_factor, error) ||
      !_mixprec_scaler_state_get_double (state, "backoff-factor", G_MINDOUBLE, TRUE, BACKOFF_MAX,
                                         &st.backoff_factor, error) ||
      !state_get_boolean (state, "raise-at-min-scale", &st.raise_at_min_scale, error) ||
      !_mixprec_scaler_state_get_double (state, "scale", G_MINDOUBLE, TRUE, G_MAXDOUBLE,
                                         &st.scale, error) ||
      !state_get_int64 (state, "iteration", &st.iteration, error) ||
      !state_get_int64 (state, "last-overflow-iteration", &st.last_overflow_iteration, error) ||
      !state_get_int64 (state, "hysteresis-left", &st.hysteresis_left, error) ||
      !_mixprec_scaler_state_lookup (state, "growth-tracker", G_VARIANT_TYPE_UINT64,
                                     &growth_tracker, error))
    return FALSE;
  st.growth_tracker = g_variant_get_uint64 (growth_tracker);

  if (to_scale_precision (self, st.scale) != st.scale)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE,
                   "loss scaler state: the key “scale” holds %.17g, which is not a "
                   "single-precision number as “%s” semantics keep; the state is corrupt",
                   st.scale, nick);
      return FALSE;
    }
  if (st.iteration < 0)
    return state_invalid (error, "iteration", "must not be negative", st.iteration);
  if (st.last_overflow_iteration < -1 || st.last_overflow_iteration >= st.iteration)
    return state_invalid (error, "last-overflow-iteration",
                          "must be -1 (none) or below “iteration”", st.last_overflow_iteration);
  if (self->semantics == MIXPREC_SCALER_SEMANTICS_DEEPSPEED && st.hysteresis_left < 1)
    return state_invalid (error, "hysteresis-left", "must be at least 1", st.hysteresis_left);

  old = self->st;
  self->st = st;
  notify_changed_parameters (self, &old);
  return TRUE;
}

static void
reset_to_defaults (MixprecDynamicScaler *self)
{
  const SemanticsDefaults *d = &semantics_defaults[self->semantics];

  self->st.init_scale = d->init_scale;
  self->st.scale_window = d->scale_window;
  self->st.hysteresis = d->hysteresis;
  self->st.consecutive_hysteresis = FALSE;
  self->st.min_scale = d->min_scale;
  self->st.max_scale = d->max_scale;
  self->st.growth_factor = 2.0;
  self->st.backoff_factor = 0.5;
  self->st.raise_at_min_scale = d->raise_at_min_scale;

  self->st.scale = to_scale_precision (self, self->st.init_scale);
  self->st.iteration = 0;
  self->st.last_overflow_iteration = -1;
  self->st.hysteresis_left = self->st.hysteresis;
  self->st.growth_tracker = 0;
}

static gboolean
before_first_update (MixprecDynamicScaler *self)
{
  return mixprec_loss_scaler_get_steps (MIXPREC_LOSS_SCALER (self)) == 0;
}

static void
mixprec_dynamic_scaler_get_property (GObject    *object,
                                     guint       prop_id,
                                     GValue     *value,
                                     GParamSpec *pspec)
{
  MixprecDynamicScaler *self = MIXPREC_DYNAMIC_SCALER (object);

  switch (prop_id)
    {
    case PROP_SEMANTICS:
      g_value_set_enum (value, self->semantics);
      break;
    case PROP_INIT_SCALE:
      g_value_set_double (value, self->st.init_scale);
      break;
    case PROP_SCALE_WINDOW:
      g_value_set_uint (value, self->st.scale_window);
      break;
    case PROP_HYSTERESIS:
      g_value_set_uint (value, self->st.hysteresis);
      break;
    case PROP_CONSECUTIVE_HYSTERESIS:
      g_value_set_boolean (value, self->st.consecutive_hysteresis);
      break;
    case PROP_MIN_SCALE:
      g_value_set_double (value, self->st.min_scale);
      break;
    case PROP_MAX_SCALE:
      g_value_set_double (value, self->st.max_scale);
      break;
    case PROP_GROWTH_FACTOR:
      g_value_set_double (value, self->st.growth_factor);
      break;
    case PROP_BACKOFF_FACTOR:
      g_value_set_double (value, self->st.backoff_factor);
      break;
    case PROP_RAISE_AT_MIN_SCALE:
      g_value_set_boolean (value, self->st.raise_at_min_scale);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

/* Stores a property value and notifies only when it changed. */
#define SET_AND_NOTIFY(field, new_value)                                          \
  G_STMT_START {                                                                  \
    if (self->st.field != (new_value))                                               \
      {                                                                           \
        self->st.field = (new_value);                                                \
        g_object_notify_by_pspec (object, pspec);                                 \
      }                                                                           \
  } G_STMT_END

static void
mixprec_dynamic_scaler_set_property (GObject      *object,
                                     guint         prop_id,
                                     const GValue *value,
                                     GParamSpec   *pspec)
{
  MixprecDynamicScaler *self = MIXPREC_DYNAMIC_SCALER (object);

  switch (prop_id)
    {
    case PROP_SEMANTICS:
      self->semantics = g_value_get_enum (value);
      break;
    case PROP_INIT_SCALE:
      SET_AND_NOTIFY (init_scale, g_value_get_double (value));
      if (before_first_update (self))
        {
          gdouble scale = to_scale_precision (self, self->st.init_scale);

          if (scale != self->st.scale)
            {
              self->st.scale = scale;
              g_object_notify (object, "scale");
            }
        }
      break;
    case PROP_SCALE_WINDOW:
      SET_AND_NOTIFY (scale_window, g_value_get_uint (value));
      break;
    case PROP_HYSTERESIS:
      SET_AND_NOTIFY (hysteresis, g_value_get_uint (value));
      if (before_first_update (self))
        self->st.hysteresis_left = self->st.hysteresis;
      break;
    case PROP_CONSECUTIVE_HYSTERESIS:
      SET_AND_NOTIFY (consecutive_hysteresis, g_value_get_boolean (value));
      break;
    case PROP_MIN_SCALE:
      SET_AND_NOTIFY (min_scale, g_value_get_double (value));
      break;
    case PROP_MAX_SCALE:
      SET_AND_NOTIFY (max_scale, g_value_get_double (value));
      break;
    case PROP_GROWTH_FACTOR:
      SET_AND_NOTIFY (growth_factor, g_value_get_double (value));
      break;
    case PROP_BACKOFF_FACTOR:
      SET_AND_NOTIFY (backoff_factor, g_value_get_double (value));
      break;
    case PROP_RAISE_AT_MIN_SCALE:
      SET_AND_NOTIFY (raise_at_min_scale, g_value_get_boolean (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

#undef SET_AND_NOTIFY

static void
mixprec_dynamic_scaler_constructed (GObject *object)
{
  MixprecDynamicScaler *self = MIXPREC_DYNAMIC_SCALER (object);

  G_OBJECT_CLASS (mixprec_dynamic_scaler_parent_class)->constructed (object);

  /* Only the construct-only semantics is known here; GObject sets the other
   * properties given to g_object_new() after this, over these defaults. */
  reset_to_defaults (self);
}

static void
mixprec_dynamic_scaler_class_init (MixprecDynamicScalerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  MixprecLossScalerClass *scaler_class = MIXPREC_LOSS_SCALER_CLASS (klass);
  const GParamFlags rw = G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS;

  object_class->get_property = mixprec_dynamic_scaler_get_property;
  object_class->set_property = mixprec_dynamic_scaler_set_property;
  object_class->constructed = mixprec_dynamic_scaler_constructed;
  scaler_class->get_scale = mixprec_dynamic_scaler_get_scale;
  scaler_class->update = mixprec_dynamic_scaler_update;
  scaler_class->fill_state = mixprec_dynamic_scaler_fill_state;
  scaler_class->apply_state = mixprec_dynamic_scaler_apply_state;

  /**
   * MixprecDynamicScaler:semantics:
   *
   * Which published scaler to reproduce. Chooses the defaults of the
   * other properties as well. Set at construction only.
   *
   * Since: 1.0
   */
  properties[PROP_SEMANTICS] =
    g_param_spec_enum ("semantics", NULL, NULL,
                       MIXPREC_TYPE_SCALER_SEMANTICS, MIXPREC_SCALER_SEMANTICS_DEEPSPEED,
                       G_PARAM_READWRITE | G_PARAM_CONSTRUCT_ONLY | G_PARAM_STATIC_STRINGS);

  /**
   * MixprecDynamicScaler:init-scale:
   *
   * The scale before the first update: 2^16 for DeepSpeed (2 to the power
   * `fp16.initial_scale_power`) and PyTorch, 2^32 for Megatron-LM. In
   * single-precision semantics it is rounded to single precision (and
   * clamped to its finite range).
   *
   * Since: 1.0
   */
  properties[PROP_INIT_SCALE] =
    g_param_spec_double ("init-scale", NULL, NULL,
                         G_MINDOUBLE, G_MAXDOUBLE, 65536.0, rw);

  /**
   * MixprecDynamicScaler:scale-window:
   *
   * How many clean steps grow the scale: DeepSpeed's `loss_scale_window`
   * (default 1000), PyTorch's `growth_interval` (2000), Megatron-LM's
   * `growth_interval` (1000), Apex's `scale_window` (2000).
   *
   * Since: 1.0
   */
  properties[PROP_SCALE_WINDOW] =
    g_param_spec_uint ("scale-window", NULL, NULL,
                       1, G_MAXUINT, 1000, rw);

  /**
   * MixprecDynamicScaler:hysteresis:
   *
   * How many overflows are tolerated before the scale is lowered
   * (DeepSpeed's `delayed_shift`, Megatron-LM's `hysteresis`; default 2).
   * 1 lowers the scale on every overflow. Not used by PyTorch semantics.
   *
   * Since: 1.0
   */
  properties[PROP_HYSTERESIS] =
    g_param_spec_uint ("hysteresis", NULL, NULL,
                       1, G_MAXUINT, 2, rw);

  /**
   * MixprecDynamicScaler:consecutive-hysteresis:
   *
   * DeepSpeed only: refill the hysteresis on every clean step, so that only
   * consecutive overflows lower the scale. Default %FALSE.
   *
   * Since: 1.0
   */
  properties[PROP_CONSECUTIVE_HYSTERESIS] =
    g_param_spec_boolean ("consecutive-hysteresis", NULL, NULL, FALSE, rw);

  /**
   * MixprecDynamicScaler:min-scale:
   *
   * The scale is never lowered below this (DeepSpeed's `min_loss_scale`,
   * default 1; Megatron-LM's `min_scale`, default 1; PyTorch and Apex
   * have none by default and default to 0). Whatever its value the scale stays at least the
   * smallest positive normal number of its precision.
   *
   * Since: 1.0
   */
  properties[PROP_MIN_SCALE] =
    g_param_spec_double ("min-scale", NULL, NULL,
                         0.0, G_MAXDOUBLE, 1.0, rw);

  /**
   * MixprecDynamicScaler:max-scale:
   *
   * When positive, growth never takes the scale above this (as Apex's
   * `max_loss_scale`); 0 means no cap. The default is 0, except in Apex
   * semantics where it is Apex's 2^24. A scale that starts above it is
   * not lowered.
   *
   * Since: 1.0
   */
  properties[PROP_MAX_SCALE] =
    g_param_spec_double ("max-scale", NULL, NULL,
                         0.0, G_MAXDOUBLE, 0.0, rw);

  /**
   * MixprecDynamicScaler:growth-factor:
   *
   * What the scale is multiplied by when it grows (default 2). In
   * DeepSpeed semantics it is also what the scale is divided by on an
   * overflow (DeepSpeed's single `scale_factor`).
   *
   * Since: 1.0
   */
  properties[PROP_GROWTH_FACTOR] =
    g_param_spec_double ("growth-factor", NULL, NULL,
                         GROWTH_MIN, G_MAXDOUBLE, 2.0, rw);

  /**
   * MixprecDynamicScaler:backoff-factor:
   *
   * What the scale is multiplied by when it is lowered, in PyTorch,
   * Megatron-LM and Apex semantics (default 0.5). DeepSpeed semantics divide by
   * #MixprecDynamicScaler:growth-factor instead and ignore this.
   *
   * Since: 1.0
   */
  properties[PROP_BACKOFF_FACTOR] =
    g_param_spec_double ("backoff-factor", NULL, NULL,
                         G_MINDOUBLE, BACKOFF_MAX, 0.5, rw);

  /**
   * MixprecDynamicScaler:raise-at-min-scale:
   *
   * DeepSpeed only (`raise_error_at_min_scale`, default %TRUE): refuse an
   * overflow that arrives while the scale already equals its minimum with
   * %MIXPREC_SCALER_ERROR_AT_MINIMUM. When %FALSE such steps are accepted
   * and the scale stays at the minimum.
   *
   * Since: 1.0
   */
  properties[PROP_RAISE_AT_MIN_SCALE] =
    g_param_spec_boolean ("raise-at-min-scale", NULL, NULL, TRUE, rw);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_dynamic_scaler_init (MixprecDynamicScaler *self)
{
  self->semantics = MIXPREC_SCALER_SEMANTICS_DEEPSPEED;
  reset_to_defaults (self);
}

/**
 * mixprec_dynamic_scaler_new:
 * @semantics: which published scaler to reproduce
 *
 * Creates a dynamic scaler with the defaults of @semantics (see
 * #MixprecDynamicScaler for them). Use g_object_new() or the properties to
 * change any parameter.
 *
 * Returns: (transfer full) (type MixprecDynamicScaler): a new #MixprecDynamicScaler
 *
 * Since: 1.0
 */
MixprecLossScaler *
mixprec_dynamic_scaler_new (MixprecScalerSemantics semantics)
{
  g_return_val_if_fail (semantics >= MIXPREC_SCALER_SEMANTICS_DEEPSPEED &&
                        semantics <= MIXPREC_SCALER_SEMANTICS_APEX, NULL);

  return g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER, "semantics", semantics, NULL);
}

/**
 * mixprec_dynamic_scaler_new_deepspeed:
 * @init_scale: the initial scale (DeepSpeed: 2^`initial_scale_power`)
 * @scale_window: clean steps between growths (`loss_scale_window`), at least 1
 * @hysteresis: overflows tolerated before lowering (`hysteresis`), at least 1
 * @min_scale: the lowest scale (`min_loss_scale`), not negative
 *
 * Creates a scaler with DeepSpeed semantics and the other parameters at
 * DeepSpeed's defaults, as DeepSpeed's `DynamicLossScaler (init_scale,
 * scale_window, min_scale, delayed_shift)` would be.
 *
 * The values must meet the rules above (@init_scale finite and at least
 * %G_MINDOUBLE): breaking them is a programmer error, reported with a
 * critical warning and a %NULL result. For values that come from a user,
 * call mixprec_dynamic_scaler_new_deepspeed_full(), which reports them
 * with a #GError instead.
 *
 * Returns: (transfer full) (type MixprecDynamicScaler): a new #MixprecDynamicScaler
 *
 * Since: 1.0
 */
MixprecLossScaler *
mixprec_dynamic_scaler_new_deepspeed (gdouble init_scale,
                                      guint   scale_window,
                                      guint   hysteresis,
                                      gdouble min_scale)
{
  g_return_val_if_fail (isfinite (init_scale) && init_scale >= G_MINDOUBLE, NULL);
  g_return_val_if_fail (scale_window >= 1, NULL);
  g_return_val_if_fail (hysteresis >= 1, NULL);
  g_return_val_if_fail (isfinite (min_scale) && min_scale >= 0, NULL);

  return g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", MIXPREC_SCALER_SEMANTICS_DEEPSPEED,
                       "init-scale", init_scale,
                       "scale-window", scale_window,
                       "hysteresis", hysteresis,
                       "min-scale", min_scale,
                       NULL);
}

/**
 * mixprec_dynamic_scaler_new_deepspeed_full:
 * @init_scale: the initial scale, finite and at least %G_MINDOUBLE
 * @scale_window: clean steps between growths, at least 1
 * @hysteresis: overflows tolerated before lowering, at least 1
 * @min_scale: the lowest scale, finite and not negative
 * @error: return location for a #GError
 *
 * Like mixprec_dynamic_scaler_new_deepspeed(), for values that come from a
 * user: a value that breaks its rule is an error naming the parameter, the
 * value and the rule, not a programmer error.
 *
 * Returns: (transfer full) (type MixprecDynamicScaler): a new
 *   #MixprecDynamicScaler, or %NULL with @error set to
 *   %MIXPREC_SCALER_ERROR_INVALID_CONFIG
 *
 * Since: 1.1
 */
MixprecLossScaler *
mixprec_dynamic_scaler_new_deepspeed_full (gdouble   init_scale,
                                           guint     scale_window,
                                           guint     hysteresis,
                                           gdouble   min_scale,
                                           GError  **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!(isfinite (init_scale) && init_scale >= G_MINDOUBLE))
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG,
                   "init_scale: must be a finite number of at least %g, got %g",
                   G_MINDOUBLE, init_scale);
      return NULL;
    }
  if (scale_window < 1 || hysteresis < 1)
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG,
                   "%s: must be at least 1, got 0", scale_window < 1 ? "scale_window" : "hysteresis");
      return NULL;
    }
  if (!(isfinite (min_scale) && min_scale >= 0))
    {
      g_set_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG,
                   "min_scale: must be a finite number, not negative, got %g", min_scale);
      return NULL;
    }
  return mixprec_dynamic_scaler_new_deepspeed (init_scale, scale_window, hysteresis, min_scale);
}

/**
 * mixprec_dynamic_scaler_get_semantics:
 * @self: a #MixprecDynamicScaler
 *
 * Says which published loss scaler's rules the scaler follows.
 *
 * Returns: which published scaler @self reproduces
 *
 * Since: 1.0
 */
MixprecScalerSemantics
mixprec_dynamic_scaler_get_semantics (MixprecDynamicScaler *self)
{
  g_return_val_if_fail (MIXPREC_IS_DYNAMIC_SCALER (self), MIXPREC_SCALER_SEMANTICS_DEEPSPEED);

  return self->semantics;
}
