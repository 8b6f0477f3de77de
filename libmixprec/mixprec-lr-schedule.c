/* mixprec-lr-schedule.c — DeepSpeed's WarmupLR, WarmupDecayLR and
 * WarmupCosineLR (runtime/lr_schedules.py), computed in double with
 * DeepSpeed's operation order so that each learning rate equals Python's to
 * the bit, and counted in applied optimizer steps only. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"

/**
 * MixprecLrSchedule:
 *
 * The learning rate of each optimizer step, as DeepSpeed's
 * `scheduler` section defines it:
 *
 * - `WarmupLR` rises from `warmup_min_lr` to `warmup_max_lr` over
 *   `warmup_num_steps` steps (logarithmically, or linearly with
 *   `"warmup_type": "linear"`) and then stays there.
 * - `WarmupDecayLR` warms up the same way and then falls linearly back to
 *   `warmup_min_lr` at step `total_num_steps`, and stays there.
 * - `WarmupCosineLR` scales the optimizer's own learning rate (the base
 *   learning rate) by a ratio that rises from `warmup_min_ratio` to 1 and
 *   then follows a half cosine down to `cos_min_ratio` at step
 *   `total_num_steps`.
 * - `Constant` (libmixprec's name for "no `scheduler` section") keeps the
 *   base learning rate.
 *
 * The schedule's position counts the optimizer steps that were applied;
 * a step skipped because its gradients overflowed does not advance it.
 * mixprec_lr_schedule_get_lr() gives the rate the next applied step uses;
 * the engine calls mixprec_lr_schedule_advance() after each applied step.
 *
 * This reproduces what a DeepSpeed engine does with the same configuration:
 * the schedule object starts at `last_batch_iteration` = -1 and its
 * constructor writes the rate for -1 into the optimizer (`warmup_min_lr`
 * for WarmupLR and WarmupDecayLR, 0 for WarmupCosineLR); the engine calls
 * the schedule's `step()` after each optimizer step that did not overflow.
 * So the step at position p (p applied steps before it) uses DeepSpeed's
 * rate for `last_batch_iteration` = p - 1, and a DeepSpeed checkpoint's
 * `last_batch_iteration` corresponds to position `last_batch_iteration` + 1.
 * In particular the first two steps of a warmup both use `warmup_min_lr`.
 *
 * Where libmixprec is stricter than DeepSpeed: an unknown `warmup_type`,
 * `total_num_steps` below `warmup_num_steps`, negative rates or ratios and
 * unknown parameters are errors (DeepSpeed logs a warning, falls back to a
 * logarithmic warmup, or fails later with a Python exception).
 *
 * Since: 1.0
 */

typedef enum
{
  KIND_CONSTANT,
  KIND_WARMUP,
  KIND_WARMUP_DECAY,
  KIND_WARMUP_COSINE,
} Kind;

typedef enum
{
  WARMUP_LOG,
  WARMUP_LINEAR,
} WarmupType;

struct _MixprecLrSchedule
{
  GObject parent_instance;

  Kind kind;
  gdouble base_lr;

  /* WarmupLR and WarmupDecayLR. */
  gdouble min_lr;
  gdouble max_lr;
  gdouble delta_lr;
  /* WarmupCosineLR. */
  gdouble warmup_min_ratio;
  gdouble cos_min_ratio;

  WarmupType warmup_type;
  guint64 warmup_num_steps_set;   /* as configured */
  guint64 warmup_num_steps;       /* at least 2, as DeepSpeed uses it */
  guint64 total_num_steps;
  gdouble inverse_log_warm_up;
  gint64 last_batch_iteration;    /* configured start, -1 by default */

  guint64 position;
};

G_DEFINE_FINAL_TYPE (MixprecLrSchedule, mixprec_lr_schedule, G_TYPE_OBJECT)

/**
 * mixprec_lr_schedule_error_quark:
 *
 * Gets the error domain of #MixprecLrSchedule.
 *
 * Returns: the quark behind %MIXPREC_LR_SCHEDULE_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-lr-schedule-error-quark, mixprec_lr_schedule_error)

enum
{
  PROP_0,
  PROP_TYPE_NAME,
  PROP_BASE_LR,
  PROP_POSITION,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/* Step counts are converted to double exactly, as Python does for the
 * integers it divides and takes logarithms of, only up to 2^53. */
#define MAX_STEPS (G_GUINT64_CONSTANT (1) << 53)

static const gchar * const constant_params[] = { NULL };
static const gchar * const warmup_params[] = {
  "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type",
  "last_batch_iteration", NULL
};
static const gchar * const warmup_decay_params[] = {
  "total_num_steps", "warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
  "warmup_type", "last_batch_iteration", NULL
};
static const gchar * const warmup_cosine_params[] = {
  "total_num_steps", "warmup_min_ratio", "warmup_num_steps", "cos_min_ratio",
  "warmup_type", "last_batch_iteration", NULL
};

typedef struct
{
  const gchar *name;
  Kind kind;
  const gchar * const *params;
} KindInfo;

static const KindInfo kinds[] = {
  { "Constant", KIND_CONSTANT, constant_params },
  { "WarmupLR", KIND_WARMUP, warmup_params },
  { "WarmupDecayLR", KIND_WARMUP_DECAY, warmup_decay_params },
  { "WarmupCosineLR", KIND_WARMUP_COSINE, warmup_cosine_params },
};

static const gchar * const kind_names[] = {
  "Constant", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", NULL
};

#define SUPPORTED_TYPES "WarmupLR, WarmupDecayLR, WarmupCosineLR"

/* A value as a message shows it; numbers in their shortest exact form
 * (-0.0001, not -0.00010000000000000001). */
static gchar *
describe_node (JsonNode *node)
{
  if (node == NULL)
    return g_strdup ("nothing");
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_DOUBLE)
    {
      gdouble v = json_node_get_double (node);
      gchar buffer[G_ASCII_DTOSTR_BUF_SIZE];

      for (gint digits = 1; digits <= 17; digits++)
        {
          gchar format[8];

          g_snprintf (format, sizeof format, "%%.%dg", digits);
          g_ascii_formatd (buffer, sizeof buffer, format, v);
          if (g_ascii_strtod (buffer, NULL) == v)
            break;
        }
      return g_strdup (buffer);
    }
  if (JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *array = json_node_get_array (node);
      GString *shown = g_string_new ("[");

      for (guint i = 0; i < json_array_get_length (array); i++)
        {
          g_autofree gchar *element = describe_node (json_array_get_element (array, i));

          g_string_append_printf (shown, "%s%s", i > 0 ? ", " : "", element);
        }
      g_string_append_c (shown, ']');
      return g_string_free (shown, FALSE);
    }
  return json_to_string (node, FALSE);
}

static gboolean
node_is_number (JsonNode *node)
{
  GType type;

  if (!JSON_NODE_HOLDS_VALUE (node))
    return FALSE;
  type = json_node_get_value_type (node);
  return type == G_TYPE_INT64 || type == G_TYPE_DOUBLE;
}

/* A rate or ratio: a finite number, at least 0. DeepSpeed takes one value
 * per optimizer parameter group; libmixprec has one group, so a list of
 * one number is accepted where DeepSpeed accepts a list. */
static gboolean
read_rate (JsonObject  *params,
           const gchar *key,
           gboolean     list_allowed,
           gdouble     *value,
           GError     **error)
{
  JsonNode *node = json_object_get_member (params, key);
  JsonNode *number = node;
  g_autofree gchar *shown = NULL;

  if (list_allowed && JSON_NODE_HOLDS_ARRAY (node)
      && json_array_get_length (json_node_get_array (node)) == 1)
    number = json_array_get_element (json_node_get_array (node), 0);

  if (node_is_number (number))
    {
      gdouble v = json_node_get_double (number);

      if (isfinite (v) && v >= 0)
        {
          *value = v;
          return TRUE;
        }
    }

  shown = describe_node (node);
  if (list_allowed && JSON_NODE_HOLDS_ARRAY (node))
    g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
                 "scheduler.params.%s: must be a finite number >= 0 (libmixprec has one "
                 "parameter group, so a list must hold exactly one such number), got %s",
                 key, shown);
  else
    g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
                 "scheduler.params.%s: must be a finite number >= 0, got %s", key, shown);
  return FALSE;
}

/* An integer in [minimum, 2^53]. An integral number written as a float
 * (1e6) is accepted: JSON writers often produce them and the value is the
 * same. */
static gboolean
read_integer (JsonObject  *params,
              const gchar *key,
              gint64       minimum,
              const gchar *rule,
              gint64      *value,
              GError     **error)
{
  JsonNode *node = json_object_get_member (params, key);
  g_autofree gchar *shown = NULL;

  if (node_is_number (node))
    {
      if (json_node_get_value_type (node) == G_TYPE_INT64)
        {
          gint64 v = json_node_get_int (node);

          if (v >= minimum && v <= (gint64) MAX_STEPS)
            {
              *value = v;
              return TRUE;
            }
        }
      else
        {
          gdouble v = json_node_get_double (node);

          if (v == floor (v) && v >= (gdouble) minimum && v <= (gdouble) MAX_STEPS)
            {
              *value = (gint64) v;
              return TRUE;
            }
        }
    }

  shown = describe_node (node);
  g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
               "scheduler.params.%s: must be %s (at most 2^53), got %s", key, rule, shown);
  return FALSE;
}

static gboolean
read_warmup_type (JsonObject  *params,
                  WarmupType  *value,
                  GError     **error)
{
  static const gchar * const names[] = { "log", "linear", NULL };
  JsonNode *node = json_object_get_member (params, "warmup_type");
  const gchar *name = NULL;
  const gchar *suggestion = NULL;
  g_autofree gchar *shown = NULL;

  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_STRING)
    name = json_node_get_string (node);
  if (g_strcmp0 (name, "log") == 0)
    {
      *value = WARMUP_LOG;
      return TRUE;
    }
  if (g_strcmp0 (name, "linear") == 0)
    {
      *value = WARMUP_LINEAR;
      return TRUE;
    }

  shown = describe_node (node);
  if (name != NULL)
    suggestion = _mixprec_suggest (name, names);
  g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
               "scheduler.params.warmup_type: must be \"log\" or \"linear\", got %s%s%s%s "
               "(DeepSpeed would warn and fall back to \"log\")",
               shown,
               suggestion != NULL ? "; did you mean \"" : "",
               suggestion != NULL ? suggestion : "",
               suggestion != NULL ? "\"?" : "");
  return FALSE;
}

static const KindInfo *
find_kind (const gchar  *type,
           GError      **error)
{
  const gchar *suggestion;

  for (gsize i = 0; i < G_N_ELEMENTS (kinds); i++)
    if (strcmp (kinds[i].name, type) == 0)
      return &kinds[i];

  if (strcmp (type, "LRRangeTest") == 0 || strcmp (type, "OneCycle") == 0)
    {
      g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE,
                   "scheduler.type: DeepSpeed's \"%s\" schedule is not implemented by "
                   "libmixprec; use one of " SUPPORTED_TYPES, type);
      return NULL;
    }

  suggestion = _mixprec_suggest (type, kind_names);
  g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE,
               "scheduler.type: \"%s\" is not a learning-rate schedule libmixprec knows%s%s%s "
               "(supported: " SUPPORTED_TYPES ")",
               type,
               suggestion != NULL ? "; did you mean \"" : "",
               suggestion != NULL ? suggestion : "",
               suggestion != NULL ? "\"?" : "");
  return NULL;
}

/* Adds @problem (taken) to the problems found so far: the first is kept
 * for its code, every message is collected, one per line. */
static void
note (GError  **first,
      GString  *messages,
      GError   *problem)
{
  if (problem == NULL)
    return;
  if (messages->len > 0)
    g_string_append_c (messages, '\n');
  g_string_append (messages, problem->message);
  if (*first == NULL)
    *first = problem;
  else
    g_error_free (problem);
}

static void
check_param_names (const KindInfo  *info,
                   JsonObject      *params,
                   GError         **first,
                   GString         *messages)
{
  g_autoptr(GList) members = json_object_get_members (params);

  for (GList *l = members; l != NULL; l = l->next)
    {
      const gchar *key = l->data;
      const gchar *suggestion;
      g_autofree gchar *accepted = NULL;

      if (g_strv_contains ((const gchar * const *) info->params, key))
        continue;

      suggestion = _mixprec_suggest (key, info->params);
      accepted = g_strjoinv (", ", (gchar **) info->params);
      note (first, messages,
            g_error_new (MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM,
                         "scheduler.params.%s: not a parameter of %s%s%s%s (it takes: %s)",
                         key, info->name,
                         suggestion != NULL ? "; did you mean \"" : "",
                         suggestion != NULL ? suggestion : "",
                         suggestion != NULL ? "\"?" : "",
                         *accepted != '\0' ? accepted : "none"));
    }
}

/* Reads the parameters of @info's schedule from @params into @self,
 * reporting every problem in one error (one line each, the code of the
 * first). */
static gboolean
load_params (MixprecLrSchedule *self,
             const KindInfo    *info,
             JsonObject        *params,
             GError           **error)
{
  gint64 warmup_num_steps = 1000;
  gint64 total_num_steps = 0;
  gint64 last_batch_iteration = -1;
  gboolean steps_ok = TRUE;
  g_autoptr(GString) messages = g_string_new (NULL);
  GError *first = NULL;
  GError *local = NULL;

  check_param_names (info, params, &first, messages);
  if (info->kind == KIND_CONSTANT)
    goto out;

#define CHECK(call) G_STMT_START { local = NULL; if (!(call)) { note (&first, messages, local); steps_ok = FALSE; } } G_STMT_END
  if (json_object_has_member (params, "warmup_num_steps"))
    CHECK (read_integer (params, "warmup_num_steps", 0,
                         "a non-negative integer (DeepSpeed warms up over at least 2 steps)",
                         &warmup_num_steps, &local));
  if (json_object_has_member (params, "warmup_type"))
    CHECK (read_warmup_type (params, &self->warmup_type, &local));
  if (json_object_has_member (params, "last_batch_iteration"))
    CHECK (read_integer (params, "last_batch_iteration", -1, "an integer >= -1",
                         &last_batch_iteration, &local));

  if (info->kind == KIND_WARMUP_DECAY || info->kind == KIND_WARMUP_COSINE)
    {
      if (!json_object_has_member (params, "total_num_steps"))
        {
          note (&first, messages,
                g_error_new (MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_MISSING_PARAM,
                             "scheduler.params.total_num_steps: %s needs it (the optimizer "
                             "step at which the decay ends); set it to the length of training "
                             "in optimizer steps", info->name));
          steps_ok = FALSE;
        }
      else
        CHECK (read_integer (params, "total_num_steps", 1, "a positive integer",
                             &total_num_steps, &local));
    }

  if (info->kind == KIND_WARMUP_COSINE)
    {
      if (json_object_has_member (params, "warmup_min_ratio"))
        CHECK (read_rate (params, "warmup_min_ratio", FALSE, &self->warmup_min_ratio, &local));
      if (json_object_has_member (params, "cos_min_ratio"))
        CHECK (read_rate (params, "cos_min_ratio", FALSE, &self->cos_min_ratio, &local));
    }
  else
    {
      JsonNode *max_node = json_object_get_member (params, "warmup_max_lr");

      if (json_object_has_member (params, "warmup_min_lr"))
        CHECK (read_rate (params, "warmup_min_lr", TRUE, &self->min_lr, &local));
      /* DeepSpeed's WarmupLR warms up to the optimizer's learning rate when
       * warmup_max_lr is unset (or None); WarmupDecayLR keeps 0.001. */
      if (info->kind == KIND_WARMUP)
        self->max_lr = self->base_lr;
      if (max_node != NULL && !JSON_NODE_HOLDS_NULL (max_node))
        CHECK (read_rate (params, "warmup_max_lr", TRUE, &self->max_lr, &local));
      if (max_node != NULL && JSON_NODE_HOLDS_NULL (max_node) && info->kind != KIND_WARMUP)
        note (&first, messages,
              g_error_new (MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
                           "scheduler.params.warmup_max_lr: must be a finite number >= 0, got "
                           "null (only WarmupLR reads null as the optimizer's learning rate)"));
      self->delta_lr = self->max_lr - self->min_lr;
    }
#undef CHECK

  self->warmup_num_steps_set = (guint64) warmup_num_steps;
  self->warmup_num_steps = MAX (2, (guint64) warmup_num_steps);
  self->inverse_log_warm_up = 1.0 / log ((gdouble) self->warmup_num_steps);
  self->total_num_steps = (guint64) total_num_steps;
  self->last_batch_iteration = last_batch_iteration;

  if (steps_ok && (info->kind == KIND_WARMUP_DECAY || info->kind == KIND_WARMUP_COSINE)
      && self->total_num_steps < self->warmup_num_steps)
    note (&first, messages,
          g_error_new (MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_CONFLICT,
                       "scheduler.params.total_num_steps: must be at least warmup_num_steps "
                       "(%" G_GUINT64_FORMAT "%s), got %" G_GUINT64_FORMAT "; DeepSpeed only "
                       "warns here and then drops the learning rate to its floor right after "
                       "the warmup",
                       self->warmup_num_steps,
                       self->warmup_num_steps_set < 2 ? ", DeepSpeed's smallest warmup" : "",
                       self->total_num_steps));

out:
  if (first == NULL)
    return TRUE;
  g_set_error_literal (error, first->domain, first->code, messages->str);
  g_error_free (first);
  return FALSE;
}

/**
 * mixprec_lr_schedule_new:
 * @type: (nullable): the DeepSpeed schedule name (`scheduler.type`):
 *   "WarmupLR", "WarmupDecayLR" or "WarmupCosineLR"; "Constant" or %NULL
 *   for the base learning rate at every step
 * @params: (nullable): the schedule's parameters (`scheduler.params`), by
 *   their DeepSpeed names; %NULL for all defaults
 * @base_lr: the optimizer's learning rate (`optimizer.params.lr`), finite
 *   and at least 0: the rate of the constant schedule, the
 *   `warmup_max_lr` of WarmupLR when that is unset, and the rate
 *   WarmupCosineLR's ratios multiply
 * @error: return location for a #GError
 *
 * Builds a schedule at the position given by `last_batch_iteration` + 1
 * (0 by default).
 *
 * Parameters and defaults, as in DeepSpeed:
 *
 * - WarmupLR: `warmup_min_lr` 0, `warmup_max_lr` @base_lr,
 *   `warmup_num_steps` 1000, `warmup_type` "log" (or "linear").
 * - WarmupDecayLR: the same but `warmup_max_lr` 0.001, plus
 *   `total_num_steps` (required).
 * - WarmupCosineLR: `total_num_steps` (required), `warmup_min_ratio` 0,
 *   `warmup_num_steps` 1000, `cos_min_ratio` 0.0001, `warmup_type` "log".
 *
 * All three also take `last_batch_iteration` (default -1), the DeepSpeed
 * way to start a schedule part-way: the schedule starts at position
 * `last_batch_iteration` + 1. (With a value other than -1 DeepSpeed leaves
 * the optimizer's own rate in place for the first step; libmixprec uses
 * the schedule's rate for it.)
 * `warmup_num_steps` is a non-negative integer, used as at least 2 (as
 * DeepSpeed does); `total_num_steps` must be at least that.
 *
 * Returns: (transfer full): a new #MixprecLrSchedule, or %NULL with @error
 *   set in the %MIXPREC_LR_SCHEDULE_ERROR domain; the message names the
 *   parameter as `scheduler.params.<key>` (or `scheduler.type`) and the
 *   rule it breaks, one line for each problem of @params (the code is
 *   that of the first).
 *
 * Since: 1.0
 */
MixprecLrSchedule *
mixprec_lr_schedule_new (const gchar  *type,
                         JsonObject   *params,
                         gdouble       base_lr,
                         GError      **error)
{
  g_autoptr(MixprecLrSchedule) self = NULL;
  g_autoptr(JsonObject) empty = NULL;
  const KindInfo *info;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!isfinite (base_lr) || base_lr < 0)
    {
      g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
                   "optimizer.params.lr: the base learning rate must be a finite number "
                   ">= 0, got %g", base_lr);
      return NULL;
    }

  info = find_kind (type != NULL ? type : "Constant", error);
  if (info == NULL)
    return NULL;

  if (params == NULL)
    params = empty = json_object_new ();

  self = g_object_new (MIXPREC_TYPE_LR_SCHEDULE, NULL);
  self->kind = info->kind;
  self->base_lr = base_lr;
  if (!load_params (self, info, params, error))
    return NULL;
  self->position = (guint64) (self->last_batch_iteration + 1);
  return g_steal_pointer (&self);
}

/**
 * mixprec_lr_schedule_new_from_config:
 * @config: a #MixprecConfig
 * @error: return location for a #GError
 *
 * Builds the schedule of @config's `scheduler` section (the constant
 * schedule when there is none) with `optimizer.params.lr` as the base
 * learning rate, or %MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR when that is
 * unset. See mixprec_lr_schedule_new().
 *
 * Returns: (transfer full): a new #MixprecLrSchedule, or %NULL with @error
 *   set in the %MIXPREC_LR_SCHEDULE_ERROR domain.
 *
 * Since: 1.0
 */
MixprecLrSchedule *
mixprec_lr_schedule_new_from_config (MixprecConfig  *config,
                                     GError        **error)
{
  JsonObject *optimizer_params;
  gdouble base_lr = MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  optimizer_params = mixprec_config_get_optimizer_params (config);
  if (optimizer_params != NULL && json_object_has_member (optimizer_params, "lr"))
    {
      JsonNode *node = json_object_get_member (optimizer_params, "lr");

      if (!node_is_number (node) || !isfinite (json_node_get_double (node))
          || json_node_get_double (node) < 0)
        {
          g_autofree gchar *shown = describe_node (node);

          g_set_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
                       "optimizer.params.lr: must be a finite number >= 0, got %s", shown);
          return NULL;
        }
      base_lr = json_node_get_double (node);
    }

  return mixprec_lr_schedule_new (mixprec_config_get_scheduler_type (config),
                                  mixprec_config_get_scheduler_params (config),
                                  base_lr, error);
}

/**
 * mixprec_lr_schedule_get_type_name:
 * @self: a #MixprecLrSchedule
 *
 * Gives the schedule's type, as DeepSpeed's `scheduler.type` names it.
 *
 * Returns: the schedule's name: "WarmupLR", "WarmupDecayLR",
 *   "WarmupCosineLR" or "Constant".
 *
 * Since: 1.0
 */
const gchar *
mixprec_lr_schedule_get_type_name (MixprecLrSchedule *self)
{
  g_return_val_if_fail (MIXPREC_IS_LR_SCHEDULE (self), NULL);

  return kinds[self->kind].name;
}

/**
 * mixprec_lr_schedule_get_base_lr:
 * @self: a #MixprecLrSchedule
 *
 * Gives the learning rate the schedule scales: the optimizer's configured
 * one.
 *
 * Returns: the optimizer learning rate the schedule was built with.
 *
 * Since: 1.0
 */
gdouble
mixprec_lr_schedule_get_base_lr (MixprecLrSchedule *self)
{
  g_return_val_if_fail (MIXPREC_IS_LR_SCHEDULE (self), 0.0);

  return self->base_lr;
}

/**
 * mixprec_lr_schedule_dup_params:
 * @self: a #MixprecLrSchedule
 *
 * The schedule's parameters with every default filled in, by their
 * DeepSpeed names (`warmup_num_steps` as configured, before DeepSpeed's
 * minimum of 2 applies): what to print or store so that the same
 * schedule can be built again with mixprec_lr_schedule_new().
 *
 * Returns: (transfer full): a new #JsonObject (empty for "Constant").
 *
 * Since: 1.0
 */
JsonObject *
mixprec_lr_schedule_dup_params (MixprecLrSchedule *self)
{
  JsonObject *params;

  g_return_val_if_fail (MIXPREC_IS_LR_SCHEDULE (self), NULL);

  params = json_object_new ();
  if (self->kind == KIND_CONSTANT)
    return params;

  if (self->kind != KIND_WARMUP)
    json_object_set_int_member (params, "total_num_steps", (gint64) self->total_num_steps);
  if (self->kind == KIND_WARMUP_COSINE)
    {
      json_object_set_double_member (params, "warmup_min_ratio", self->warmup_min_ratio);
      json_object_set_double_member (params, "cos_min_ratio", self->cos_min_ratio);
    }
  else
    {
      json_object_set_double_member (params, "warmup_min_lr", self->min_lr);
      json_object_set_double_member (params, "warmup_max_lr", self->max_lr);
    }
  json_object_set_int_member (params, "warmup_num_steps", (gint64) self->warmup_num_steps_set);
  json_object_set_string_member (params, "warmup_type",
                                 self->warmup_type == WARMUP_LOG ? "log" : "linear");
  json_object_set_int_member (params, "last_batch_iteration", self->last_batch_iteration);
  return params;
}

/* DeepSpeed's warmup fraction at last_batch_iteration @it < warmup. */
static gdouble
warmup_gamma (MixprecLrSchedule *self,
              guint64            it)
{
  if (self->warmup_type == WARMUP_LOG)
    return self->inverse_log_warm_up * log ((gdouble) (it + 1));
  return (gdouble) it / (gdouble) self->warmup_num_steps;
}

/* WarmupDecayLR's linear decay after the warmup, it >= warmup. */
static gdouble
decay_gamma (MixprecLrSchedule *self,
             guint64            it)
{
  guint64 span = self->total_num_steps - self->warmup_num_steps;
  gdouble gamma;

  /* Python's max(0.0, x) keeps 0.0 unless x > 0, so from the last step on
   * (where the quotient is 0 or negative) the fraction is 0. */
  if (it >= self->total_num_steps)
    return 0.0;
  gamma = (gdouble) (self->total_num_steps - it) / (gdouble) MAX (1, span);
  return gamma > 0.0 ? gamma : 0.0;
}

/* WarmupCosineLR's ratio after the warmup, it >= warmup. */
static gdouble
cosine_ratio (MixprecLrSchedule *self,
              guint64            it)
{
  guint64 real_last_step = it - self->warmup_num_steps + 1;
  guint64 real_total_steps = MAX (1, self->total_num_steps - self->warmup_num_steps);
  gdouble progress, ratio;

  /* min(1.0, a / b) is 1.0 exactly when a >= b, which also keeps
   * positions beyond 2^53 away from an inexact conversion. */
  if (real_last_step >= real_total_steps)
    progress = 1.0;
  else
    progress = (gdouble) real_last_step / (gdouble) real_total_steps;
  ratio = (1.0 + cos (G_PI * progress)) / 2.0;
  ratio = self->cos_min_ratio + (1.0 - self->cos_min_ratio) * ratio;
  return ratio > 0.0 ? ratio : 0.0;
}

/**
 * mixprec_lr_schedule_get_lr_at:
 * @self: a #MixprecLrSchedule
 * @position: a number of applied optimizer steps
 *
 * The learning rate of the optimizer step that follows @position applied
 * steps, whatever the schedule's own position; for printing or plotting a
 * schedule.
 *
 * Returns: the learning rate, finite. It is at least 0 but for one corner
 *   DeepSpeed shares: a warmup that falls to a `warmup_max_lr` of 0 can
 *   end a rounding error below 0.
 *
 * Since: 1.0
 */
gdouble
mixprec_lr_schedule_get_lr_at (MixprecLrSchedule *self,
                               guint64            position)
{
  guint64 it;

  g_return_val_if_fail (MIXPREC_IS_LR_SCHEDULE (self), 0.0);

  if (self->kind == KIND_CONSTANT)
    return self->base_lr;

  /* Position 0 is DeepSpeed's last_batch_iteration -1: the rate the
   * schedule's constructor writes into the optimizer. */
  if (position == 0)
    return self->kind == KIND_WARMUP_COSINE ? 0.0 : self->min_lr;
  it = position - 1;

  if (self->kind == KIND_WARMUP_COSINE)
    {
      gdouble ratio;

      if (it < self->warmup_num_steps)
        {
          ratio = warmup_gamma (self, it);
          ratio = self->warmup_min_ratio + ratio * (1.0 - self->warmup_min_ratio);
        }
      else
        ratio = cosine_ratio (self, it);
      return self->base_lr * ratio;
    }
  else
    {
      gdouble gamma;

      if (it < self->warmup_num_steps)
        gamma = warmup_gamma (self, it);
      else if (self->kind == KIND_WARMUP_DECAY)
        gamma = decay_gamma (self, it);
      else
        gamma = 1.0;
      return self->min_lr + self->delta_lr * gamma;
    }
}

/**
 * mixprec_lr_schedule_get_lr:
 * @self: a #MixprecLrSchedule
 *
 * Gives the learning rate at the schedule's current position.
 *
 * Returns: the learning rate of the next applied optimizer step.
 *
 * Since: 1.0
 */
gdouble
mixprec_lr_schedule_get_lr (MixprecLrSchedule *self)
{
  g_return_val_if_fail (MIXPREC_IS_LR_SCHEDULE (self), 0.0);

  return mixprec_lr_schedule_get_lr_at (self, self->position);
}

/**
 * mixprec_lr_schedule_advance:
 * @self: a #MixprecLrSchedule
 *
 * Moves the schedule past one applied optimizer step (DeepSpeed's
 * `lr_scheduler.step()`). Not called for a step skipped on overflow.
 *
 * Since: 1.0
 */
void
mixprec_lr_schedule_advance (MixprecLrSchedule *self)
{
  g_return_if_fail (MIXPREC_IS_LR_SCHEDULE (self));

  if (self->position == G_MAXUINT64)
    return;
  self->position++;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_POSITION]);
}

/**
 * mixprec_lr_schedule_get_position:
 * @self: a #MixprecLrSchedule
 *
 * Gives how far the schedule has advanced.
 *
 * Returns: the number of applied optimizer steps the schedule has seen
 *   (DeepSpeed's `last_batch_iteration` + 1).
 *
 * Since: 1.0
 */
guint64
mixprec_lr_schedule_get_position (MixprecLrSchedule *self)
{
  g_return_val_if_fail (MIXPREC_IS_LR_SCHEDULE (self), 0);

  return self->position;
}

/**
 * mixprec_lr_schedule_set_position:
 * @self: a #MixprecLrSchedule
 * @position: a number of applied optimizer steps
 *
 * Moves the schedule to @position, as when resuming from a checkpoint
 * (DeepSpeed's `load_state_dict` with `last_batch_iteration` =
 * @position - 1).
 *
 * Since: 1.0
 */
void
mixprec_lr_schedule_set_position (MixprecLrSchedule *self,
                                  guint64            position)
{
  g_return_if_fail (MIXPREC_IS_LR_SCHEDULE (self));

  if (self->position == position)
    return;
  self->position = position;
  g_object_notify_by_pspec (G_OBJECT (self), properties[PROP_POSITION]);
}

static void
mixprec_lr_schedule_get_property (GObject    *object,
                                  guint       prop_id,
                                  GValue     *value,
                                  GParamSpec *pspec)
{
  MixprecLrSchedule *self = MIXPREC_LR_SCHEDULE (object);

  switch (prop_id)
    {
    case PROP_TYPE_NAME:
      g_value_set_string (value, mixprec_lr_schedule_get_type_name (self));
      break;
    case PROP_BASE_LR:
      g_value_set_double (value, self->base_lr);
      break;
    case PROP_POSITION:
      g_value_set_uint64 (value, self->position);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_lr_schedule_set_property (GObject      *object,
                                  guint         prop_id,
                                  const GValue *value,
                                  GParamSpec   *pspec)
{
  MixprecLrSchedule *self = MIXPREC_LR_SCHEDULE (object);

  switch (prop_id)
    {
    case PROP_POSITION:
      mixprec_lr_schedule_set_position (self, g_value_get_uint64 (value));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_lr_schedule_class_init (MixprecLrScheduleClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->get_property = mixprec_lr_schedule_get_property;
  object_class->set_property = mixprec_lr_schedule_set_property;

  /**
   * MixprecLrSchedule:type-name:
   *
   * The schedule's name; see mixprec_lr_schedule_get_type_name().
   *
   * Since: 1.0
   */
  properties[PROP_TYPE_NAME] =
    g_param_spec_string ("type-name", NULL, NULL, "Constant",
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  /**
   * MixprecLrSchedule:base-lr:
   *
   * The optimizer learning rate the schedule was built with.
   *
   * Since: 1.0
   */
  properties[PROP_BASE_LR] =
    g_param_spec_double ("base-lr", NULL, NULL, 0.0, G_MAXDOUBLE,
                         MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR,
                         G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);

  /**
   * MixprecLrSchedule:position:
   *
   * The number of applied optimizer steps the schedule has seen.
   *
   * Since: 1.0
   */
  properties[PROP_POSITION] =
    g_param_spec_uint64 ("position", NULL, NULL, 0, G_MAXUINT64, 0,
                         G_PARAM_READWRITE | G_PARAM_EXPLICIT_NOTIFY | G_PARAM_STATIC_STRINGS);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_lr_schedule_init (MixprecLrSchedule *self)
{
  self->kind = KIND_CONSTANT;
  self->base_lr = MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR;
  self->min_lr = 0.0;
  self->max_lr = 0.001;
  self->delta_lr = self->max_lr - self->min_lr;
  self->warmup_min_ratio = 0.0;
  self->cos_min_ratio = 0.0001;
  self->warmup_type = WARMUP_LOG;
  self->warmup_num_steps_set = 1000;
  self->warmup_num_steps = 1000;
  self->last_batch_iteration = -1;
}
