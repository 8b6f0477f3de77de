/* mixprec-engine.c — the single-process step pipeline: parameters laid out
 * in contiguous groups, gradients folded across micro-steps, then at the
 * accumulation boundary the fused non-finite check and sum of squares,
 * the scaler update, skip-or-clip, and the fused optimizer step that also
 * refreshes the working copies. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-kernels-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-param-private.h"
#include "mixprec-registry-private.h"

/* Elements per thread work item: large enough that the pool's wake-up cost
 * is noise, small enough that two cores share uneven groups. */
#define MIN_CHUNK ((gsize) 1 << 16)

/* A run of a group's elements that share buffers: the whole group for
 * engine-owned parameters, one parameter for user-owned memory. */
typedef struct {
  guint64 offset;            /* in the group's element space */
  guint64 numel;
  gpointer working;          /* working dtype, NULL when the master is the parameter */
  gpointer grad;             /* grad dtype */
  gfloat *master;            /* FP32 values the optimizer updates; NULL without master */
} Segment;

typedef struct {
  guint index;
  _MixprecParamDTypes dtypes;
  gdouble weight_decay_multiplier;
  gboolean external;
  guint64 numel;
  GPtrArray *params;         /* MixprecParam, borrowed from the engine */
  GArray *segments;          /* Segment */
  /* Engine-owned, contiguous over the group (NULL where not needed). */
  gpointer working;
  gpointer grad;
  gpointer accum;            /* NULL when gradients are read in place */
  gfloat *master;
  gfloat **states;
  gdouble *hparams;          /* the optimizer's values for this group */
} Group;

struct _MixprecEngine
{
  GObject parent_instance;

  MixprecConfig *config;
  MixprecPrecisionPolicy *policy;
  MixprecLossScaler *scaler;
  MixprecLrSchedule *schedule;
  MixprecFeature *optimizer;
  gdouble *hparams;          /* resolved from the config, schema order */
  guint n_hparams;
  gint weight_decay_index;   /* -1 when the optimizer has none */

  GPtrArray *params;         /* MixprecParam, registration order */
  GHashTable *by_name;       /* name -> MixprecParam (borrowed) */
  GHashTable *init_values;   /* MixprecParam -> GBytes (FP32), until laid out */
  GPtrArray *groups;         /* Group */
  gboolean prepared;

  guint gas;                 /* gradient_accumulation_steps */
  guint micro_steps;         /* backward passes folded since the last step */
  guint64 steps;
  guint64 applied_steps;
  guint64 skipped_steps;
  guint64 seed;
  gboolean stochastic;
};

G_DEFINE_FINAL_TYPE (MixprecEngine, mixprec_engine, G_TYPE_OBJECT)
G_DEFINE_QUARK (mixprec-engine-error-quark, mixprec_engine_error)
G_DEFINE_BOXED_TYPE (MixprecStepResult, mixprec_step_result,
                     mixprec_step_result_copy, mixprec_step_result_free)

/**
 * mixprec_step_result_copy:
 * @result: a #MixprecStepResult
 *
 * Returns: (transfer full): a copy of @result
 *
 * Since: 1.0
 */
MixprecStepResult *
mixprec_step_result_copy (const MixprecStepResult *result)
{
  return g_memdup2 (result, sizeof *result);
}

/**
 * mixprec_step_result_free:
 * @result: a #MixprecStepResult
 *
 * Frees a result returned by mixprec_engine_step().
 *
 * Since: 1.0
 */
void
mixprec_step_result_free (MixprecStepResult *result)
{
  g_free (result);
}

static void
group_free (gpointer data)
{
  Group *g = data;
  guint n_slots = 0;

  if (g->states != NULL)
    {
      for (n_slots = 0; g->states[n_slots] != NULL; n_slots++)
        free (g->states[n_slots]);
      g_free (g->states);
    }
  free (g->working);
  free (g->grad);
  free (g->accum);
  free (g->master);
  g_free (g->hparams);
  g_clear_pointer (&g->params, g_ptr_array_unref);
  g_clear_pointer (&g->segments, g_array_unref);
  g_free (g);
}

static void
mixprec_engine_finalize (GObject *object)
{
  MixprecEngine *self = MIXPREC_ENGINE (object);

  g_clear_pointer (&self->groups, g_ptr_array_unref);
  g_clear_pointer (&self->init_values, g_hash_table_unref);
  g_clear_pointer (&self->by_name, g_hash_table_unref);
  g_clear_pointer (&self->params, g_ptr_array_unref);
  g_free (self->hparams);
  g_clear_object (&self->optimizer);
  g_clear_object (&self->schedule);
  g_clear_object (&self->scaler);
  g_clear_object (&self->policy);
  g_clear_object (&self->config);
  G_OBJECT_CLASS (mixprec_engine_parent_class)->finalize (object);
}

static void
mixprec_engine_class_init (MixprecEngineClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_engine_finalize;
}

static void
mixprec_engine_init (MixprecEngine *self)
{
  self->params = g_ptr_array_new_with_free_func (g_object_unref);
  self->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  self->init_values = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
                                             (GDestroyNotify) g_bytes_unref);
  self->groups = g_ptr_array_new_with_free_func (group_free);
  self->weight_decay_index = -1;
}

/* ---------------------------------------------------------------- optimizer */

/* DeepSpeed's optimizer type names, mapped onto plugin features. "Adam" is
 * the adamw plugin too: DeepSpeed's Adam decouples weight decay unless
 * adam_w_mode is false. */
static gchar *
optimizer_feature_name (const gchar *type)
{
  g_autofree gchar *lower = g_ascii_strdown (type, -1);

  if (g_str_equal (lower, "adam") || g_str_equal (lower, "fusedadam"))
    return g_strdup ("adamw");
  return g_steal_pointer (&lower);
}

static gboolean
set_hparam (MixprecEngine *self,
            const gchar   *path,
            const gchar   *name,
            JsonNode      *node,
            GString       *errors)
{
  gint index = mixprec_feature_find_hparam (self->optimizer, name);
  MixprecHyperParamType type;
  gdouble value, lo, hi;

  if (index < 0)
    {
      GString *known = g_string_new (NULL);

      for (guint i = 0; i < self->n_hparams; i++)
        g_string_append_printf (known, "%s%s", i ? ", " : "",
                                mixprec_feature_get_hparam_name (self->optimizer, i));
      g_string_append_printf (errors, "%s: not a hyper-parameter of the '%s' optimizer (it has: %s)\n",
                              path, mixprec_feature_get_name (self->optimizer), known->str);
      g_string_free (known, TRUE);
      return FALSE;
    }
  type = mixprec_feature_get_hparam_type (self->optimizer, index);
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_BOOLEAN)
    {
      if (type != MIXPREC_HYPER_PARAM_TYPE_BOOL)
        {
          g_string_append_printf (errors, "%s: must be a number, got %s\n", path,
                                  json_node_get_boolean (node) ? "true" : "false");
          return FALSE;
        }
      value = json_node_get_boolean (node) ? 1.0 : 0.0;
    }
  else if (JSON_NODE_HOLDS_VALUE (node) &&
           (json_node_get_value_type (node) == G_TYPE_DOUBLE ||
            json_node_get_value_type (node) == G_TYPE_INT64))
    {
      value = json_node_get_double (node);
      if (type == MIXPREC_HYPER_PARAM_TYPE_BOOL)
        {
          g_string_append_printf (errors, "%s: must be true or false, got %g\n", path, value);
          return FALSE;
        }
      if (type == MIXPREC_HYPER_PARAM_TYPE_INT && value != floor (value))
        {
          g_string_append_printf (errors, "%s: must be an integer, got %g\n", path, value);
          return FALSE;
        }
    }
  else
    {
      g_string_append_printf (errors, "%s: must be a %s\n", path,
                              type == MIXPREC_HYPER_PARAM_TYPE_BOOL ? "boolean" : "number");
      return FALSE;
    }
  lo = mixprec_feature_get_hparam_minimum (self->optimizer, index);
  hi = mixprec_feature_get_hparam_maximum (self->optimizer, index);
  if (!isfinite (value) || value < lo || value > hi)
    {
      g_string_append_printf (errors, "%s: must be between %g and %g, got %g\n",
                              path, lo, hi, value);
      return FALSE;
    }
  self->hparams[index] = value;
  return TRUE;
}

static gboolean
setup_optimizer (MixprecEngine *self,
                 GError       **error)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  const gchar *type = mixprec_config_get_optimizer_type (self->config);
  JsonObject *params = mixprec_config_get_optimizer_params (self->config);
  g_autofree gchar *feature_name = optimizer_feature_name (type != NULL ? type : "adamw");
  g_autoptr(GString) errors = g_string_new (NULL);
  g_autoptr(GList) members = NULL;

  self->optimizer = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                                   feature_name,
                                                   mixprec_config_get_device (self->config),
                                                   error);
  if (self->optimizer == NULL)
    {
      g_prefix_error (error, "optimizer.type: ");
      return FALSE;
    }

  self->n_hparams = mixprec_feature_get_n_hparams (self->optimizer);
  self->hparams = g_new0 (gdouble, MAX (self->n_hparams, 1));
  for (guint i = 0; i < self->n_hparams; i++)
    self->hparams[i] = mixprec_feature_get_hparam_default (self->optimizer, i);
  self->weight_decay_index = mixprec_feature_find_hparam (self->optimizer, "weight_decay");

  if (params != NULL)
    members = json_object_get_members (params);
  for (GList *l = members; l != NULL; l = l->next)
    {
      const gchar *key = l->data;
      JsonNode *node = json_object_get_member (params, key);
      g_autofree gchar *path = g_strdup_printf ("optimizer.params.%s", key);

      if (g_str_equal (key, "betas"))
        {
          JsonArray *betas = JSON_NODE_HOLDS_ARRAY (node) ? json_node_get_array (node) : NULL;

          if (betas == NULL || json_array_get_length (betas) != 2)
            {
              g_string_append_printf (errors, "%s: must be an array of two numbers [beta1, beta2]\n", path);
              continue;
            }
          set_hparam (self, "optimizer.params.betas[0]", "beta1",
                      json_array_get_element (betas, 0), errors);
          set_hparam (self, "optimizer.params.betas[1]", "beta2",
                      json_array_get_element (betas, 1), errors);
          continue;
        }
      set_hparam (self, path, key, node, errors);
    }

  /* DeepSpeed's AdamW type always decouples weight decay. */
  if (type != NULL && g_ascii_strcasecmp (type, "AdamW") == 0)
    {
      gint mode = mixprec_feature_find_hparam (self->optimizer, "adam_w_mode");

      if (mode >= 0 && self->hparams[mode] == 0.0)
        g_string_append (errors, "optimizer.params.adam_w_mode: must be true for type AdamW "
                                 "(use type Adam for L2 regularisation), got false\n");
    }

  if (errors->len > 0)
    {
      g_string_truncate (errors, errors->len - 1);
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_OPTIMIZER,
                   "%s", errors->str);
      return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_engine_new:
 * @config: the resolved training configuration
 * @error: return location for a #GError
 *
 * Creates an engine: the precision policy, the loss scaler, the
 * learning-rate schedule and the optimizer named by @config (found through
 * the plugin registry for the config's device). DeepSpeed optimizer types
 * map onto plugin features: Adam and AdamW onto adamw, SGD onto sgd, Lion
 * onto lion; any other name is looked up as a feature name.
 *
 * Returns: (transfer full): a new engine, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecEngine *
mixprec_engine_new (MixprecConfig *config,
                    GError       **error)
{
  g_autoptr(MixprecEngine) self = NULL;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = g_object_new (MIXPREC_TYPE_ENGINE, NULL);
  self->config = g_object_ref (config);
  self->gas = MAX (mixprec_config_get_gradient_accumulation_steps (config), 1);
  self->seed = mixprec_config_get_seed (config);
  self->stochastic = mixprec_config_get_stochastic_rounding (config);

  self->policy = mixprec_precision_policy_new_from_config (config, error);
  if (self->policy == NULL)
    return NULL;
  self->scaler = mixprec_loss_scaler_new_from_config (config, error);
  if (self->scaler == NULL)
    return NULL;
  self->schedule = mixprec_lr_schedule_new_from_config (config, error);
  if (self->schedule == NULL)
    return NULL;
  if (!setup_optimizer (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * mixprec_engine_get_config:
 * @self: a #MixprecEngine
 *
 * Returns: (transfer none): the configuration the engine was built from
 *
 * Since: 1.0
 */
MixprecConfig *
mixprec_engine_get_config (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return self->config;
}

/**
 * mixprec_engine_get_loss_scaler:
 * @self: a #MixprecEngine
 *
 * Returns: (transfer none): the loss scaler the engine updates each step
 *
 * Since: 1.0
 */
MixprecLossScaler *
mixprec_engine_get_loss_scaler (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return self->scaler;
}

/* ---------------------------------------------------------------- registration */

static gboolean
check_registration (MixprecEngine  *self,
                    const gchar    *name,
                    const guint64  *shape,
                    guint           n_dims,
                    guint64        *numel,
                    GError        **error)
{
  guint64 count = 1;

  if (self->prepared)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': parameters must be registered before the engine lays out "
                   "its buffers (the first buffer access, prepare(), backward_done() or step())",
                   name != NULL ? name : "(null)");
      return FALSE;
    }
  if (name == NULL || *name == '\0' || !g_utf8_validate (name, -1, NULL))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter name: must be a non-empty UTF-8 string");
      return FALSE;
    }
  if (g_hash_table_contains (self->by_name, name))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': already registered", name);
      return FALSE;
    }
  if (n_dims > 0 && shape == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': %u dimensions but no shape", name, n_dims);
      return FALSE;
    }
  for (guint i = 0; i < n_dims; i++)
    {
      /* 2^48 elements is far beyond any memory; it keeps byte counts of
       * every dtype within 64 bits. */
      if (shape[i] != 0 && count > (G_GUINT64_CONSTANT (1) << 48) / shape[i])
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                       "parameter '%s': shape too large (more than 2^48 elements)", name);
          return FALSE;
        }
      count *= shape[i];
    }
  *numel = count;
  return TRUE;
}

static MixprecParam *
add_param (MixprecEngine  *self,
           const gchar    *name,
           const guint64  *shape,
           guint           n_dims,
           guint64         numel,
           const gchar    *module_type,
           gboolean        external,
           GError        **error)
{
  _MixprecParamDTypes dtypes = { 0 };
  MixprecDType master_dtype;
  MixprecParam *param;
  gdouble decay;

  if (!mixprec_precision_policy_resolve (self->policy, name, module_type,
                                         &dtypes.working, &master_dtype, &dtypes.has_master,
                                         &dtypes.accum, &dtypes.comm, error))
    {
      g_prefix_error (error, "parameter '%s': ", name);
      return NULL;
    }
  /* Gradients arrive in the dtype the backward pass computes in: the
   * working dtype. A separate master exists only when it is wider. */
  dtypes.grad = dtypes.working;
  if (dtypes.working == MIXPREC_DTYPE_FLOAT32)
    dtypes.has_master = FALSE;

  /* nanoGPT's rule: one-dimensional tensors (biases, norm weights) and
   * scalars are not decayed. */
  decay = n_dims >= 2 ? 1.0 : 0.0;

  param = _mixprec_param_new (self, name, shape, n_dims, numel, module_type,
                              &dtypes, decay, external);
  g_ptr_array_add (self->params, param);
  g_hash_table_insert (self->by_name, (gpointer) mixprec_param_get_name (param), param);
  return param;
}

/**
 * mixprec_engine_register_param:
 * @self: a #MixprecEngine
 * @name: a unique name, e.g. "h1.weight"
 * @shape: (array length=n_dims): the shape
 * @n_dims: the number of dimensions (0 for a scalar)
 * @module_type: (nullable): the module type the precision policy keys on,
 *   e.g. "Linear", "LayerNorm", "Embedding"
 * @init_dtype: the dtype of @init
 * @init: the initial values, numel elements of @init_dtype
 * @error: return location for a #GError
 *
 * Registers a parameter whose buffers the engine owns and lays out with
 * the others of the same precision and optimizer settings. The initial
 * values are copied (widened to FP32 for the master, rounded to nearest
 * even for a low-precision working copy).
 *
 * Returns: (transfer none): the parameter, owned by the engine, or %NULL
 *   with @error set
 *
 * Since: 1.0
 */
MixprecParam *
mixprec_engine_register_param (MixprecEngine  *self,
                               const gchar    *name,
                               const guint64  *shape,
                               guint           n_dims,
                               const gchar    *module_type,
                               MixprecDType    init_dtype,
                               GBytes         *init,
                               GError        **error)
{
  guint64 numel = 0;
  gsize len = 0;
  gconstpointer data;
  MixprecParam *param;
  g_autofree gfloat *values = NULL;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (init != NULL, NULL);

  if (!check_registration (self, name, shape, n_dims, &numel, error))
    return NULL;
  if (!mixprec_dtype_is_valid (init_dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': %d is not a dtype", name, (gint) init_dtype);
      return NULL;
    }
  data = g_bytes_get_data (init, &len);
  if (len != numel * mixprec_dtype_get_size (init_dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': initial values of %" G_GSIZE_FORMAT " bytes, expected %"
                   G_GUINT64_FORMAT " elements of %s (%" G_GUINT64_FORMAT " bytes)",
                   name, len, numel, mixprec_dtype_get_name (init_dtype),
                   numel * mixprec_dtype_get_size (init_dtype));
      return NULL;
    }
  values = g_try_malloc (MAX (numel, 1) * sizeof (gfloat));
  if (values == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': out of memory copying %" G_GUINT64_FORMAT " initial values",
                   name, numel);
      return NULL;
    }
  if (!mixprec_convert_array (init_dtype, data, MIXPREC_DTYPE_FLOAT32, values, numel,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
    return NULL;

  param = add_param (self, name, shape, n_dims, numel, module_type, FALSE, error);
  if (param == NULL)
    return NULL;
  g_hash_table_insert (self->init_values, param,
                       g_bytes_new_take (g_steal_pointer (&values), numel * sizeof (gfloat)));
  return param;
}

/**
 * mixprec_engine_register_external: (skip)
 * @self: a #MixprecEngine
 * @name: a unique name
 * @shape: (array length=n_dims): the shape
 * @n_dims: the number of dimensions
 * @module_type: (nullable): the module type the precision policy keys on
 * @working: the caller's working copy, in the dtype the precision policy
 *   gives this module type, holding the initial values; it must stay valid
 *   while the engine lives
 * @grad: the caller's gradient buffer (same dtype and size)
 * @error: return location for a #GError
 *
 * Registers a parameter whose working copy and gradient live in memory the
 * caller owns (e.g. a framework's tensors). The engine keeps the FP32
 * master (when the policy wants one), the accumulation buffer and the
 * optimizer state, and writes new values into @working after each applied
 * step. Check the dtypes with mixprec_param_get_working_dtype() on the
 * result, or resolve them beforehand with the precision policy.
 *
 * Returns: (transfer none): the parameter, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecParam *
mixprec_engine_register_external (MixprecEngine  *self,
                                  const gchar    *name,
                                  const guint64  *shape,
                                  guint           n_dims,
                                  const gchar    *module_type,
                                  gpointer        working,
                                  gpointer        grad,
                                  GError        **error)
{
  guint64 numel = 0;
  MixprecParam *param;
  _MixprecParamStorage *storage;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  if (!check_registration (self, name, shape, n_dims, &numel, error))
    return NULL;
  if (numel > 0 && (working == NULL || grad == NULL))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': external memory needs both a working and a gradient buffer",
                   name);
      return NULL;
    }
  param = add_param (self, name, shape, n_dims, numel, module_type, TRUE, error);
  if (param == NULL)
    return NULL;
  storage = _mixprec_param_get_storage (param);
  storage->working = working;
  storage->grad = grad;
  return param;
}

/**
 * mixprec_engine_get_param:
 * @self: a #MixprecEngine
 * @name: a parameter name
 *
 * Returns: (transfer none) (nullable): the parameter registered as @name
 *
 * Since: 1.0
 */
MixprecParam *
mixprec_engine_get_param (MixprecEngine *self,
                          const gchar   *name)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return g_hash_table_lookup (self->by_name, name);
}

/**
 * mixprec_engine_get_params:
 * @self: a #MixprecEngine
 *
 * Returns: (transfer container) (element-type MixprecParam): the parameters
 *   in registration order
 *
 * Since: 1.0
 */
GPtrArray *
mixprec_engine_get_params (MixprecEngine *self)
{
  GPtrArray *out;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  out = g_ptr_array_new_full (self->params->len, g_object_unref);
  for (guint i = 0; i < self->params->len; i++)
    g_ptr_array_add (out, g_object_ref (g_ptr_array_index (self->params, i)));
  return out;
}

/* ---------------------------------------------------------------- layout */

static gpointer
alloc_buffer (guint64 numel,
              gsize   elem_size,
              gboolean zero,
              const gchar *what,
              GError **error)
{
  gpointer p = NULL;
  gsize bytes = (gsize) MAX (numel, 1) * elem_size;

  /* 64-byte alignment: whole cache lines per thread chunk, aligned SIMD. */
  bytes = (bytes + 63) & ~(gsize) 63;
  if (posix_memalign (&p, 64, bytes) != 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "out of memory allocating %" G_GSIZE_FORMAT " bytes for %s", bytes, what);
      return NULL;
    }
  if (zero)
    memset (p, 0, bytes);
  return p;
}

static gboolean
same_group (const Group *g, MixprecParam *p)
{
  return g->external == _mixprec_param_is_external (p) &&
         g->dtypes.working == mixprec_param_get_working_dtype (p) &&
         g->dtypes.accum == mixprec_param_get_accum_dtype (p) &&
         g->dtypes.comm == mixprec_param_get_comm_dtype (p) &&
         g->dtypes.has_master == mixprec_param_has_master (p) &&
         g->weight_decay_multiplier == mixprec_param_get_weight_decay_multiplier (p);
}

/* Gradients can be read where the user wrote them when each step has a
 * single micro-step and the accumulation dtype would not round them. */
static gboolean
needs_accum_buffer (MixprecEngine *self, const Group *g)
{
  if (self->gas > 1)
    return TRUE;
  if (g->dtypes.accum == g->dtypes.grad || g->dtypes.accum == MIXPREC_DTYPE_FLOAT32)
    return FALSE;
  return TRUE;
}

static gboolean
layout_group (MixprecEngine *self,
              Group         *g,
              GError       **error)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  guint64 offset = 0;

  if (!g->external)
    {
      g->working = alloc_buffer (g->numel, wsize, FALSE, "working copies", error);
      g->grad = g->working ? alloc_buffer (g->numel, wsize, TRUE, "gradients", error) : NULL;
      if (g->grad == NULL)
        return FALSE;
    }
  if (g->dtypes.has_master &&
      (g->master = alloc_buffer (g->numel, sizeof (gfloat), FALSE, "FP32 master weights", error)) == NULL)
    return FALSE;
  if (needs_accum_buffer (self, g) &&
      (g->accum = alloc_buffer (g->numel, mixprec_dtype_get_size (g->dtypes.accum), TRUE,
                                "gradient accumulation", error)) == NULL)
    return FALSE;
  g->states = g_new0 (gfloat *, n_slots + 1);
  for (guint s = 0; s < n_slots; s++)
    if ((g->states[s] = alloc_buffer (g->numel, sizeof (gfloat), TRUE, "optimizer state", error)) == NULL)
      return FALSE;

  g->hparams = g_memdup2 (self->hparams, sizeof (gdouble) * MAX (self->n_hparams, 1));
  if (self->weight_decay_index >= 0)
    g->hparams[self->weight_decay_index] *= g->weight_decay_multiplier;

  for (guint i = 0; i < g->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (g->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);
      guint64 numel = mixprec_param_get_numel (p);
      GBytes *init = g_hash_table_lookup (self->init_values, p);
      Segment seg = { offset, numel, NULL, NULL, NULL };

      s->group = g->index;
      s->offset = offset;
      if (!g->external)
        {
          s->working = (guint8 *) g->working + offset * wsize;
          s->grad = (guint8 *) g->grad + offset * wsize;
        }
      if (g->dtypes.has_master)
        s->master = g->master + offset;
      else if (g->dtypes.working == MIXPREC_DTYPE_FLOAT32)
        s->master = s->working;
      else
        s->master = NULL;

      /* Initial values: from the registration copy, or (external memory)
       * from the caller's working copy. */
      if (init != NULL)
        {
          const gfloat *v = g_bytes_get_data (init, NULL);

          if (s->master != NULL)
            memcpy (s->master, v, numel * sizeof (gfloat));
          if (s->working != (gpointer) s->master &&
              !mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, v, g->dtypes.working, s->working,
                                      numel, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
            return FALSE;
        }
      else if (s->master != NULL && s->working != (gpointer) s->master &&
               !mixprec_convert_array (g->dtypes.working, s->working, MIXPREC_DTYPE_FLOAT32,
                                       s->master, numel, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
        return FALSE;

      if (g->external || i == 0)
        {
          seg.working = s->working;
          seg.grad = s->grad;
          seg.master = s->master;
          g_array_append_val (g->segments, seg);
        }
      else
        g_array_index (g->segments, Segment, 0).numel += numel;
      offset += numel;
    }
  return TRUE;
}

gboolean
_mixprec_engine_ensure_prepared (gpointer  engine,
                                 GError  **error)
{
  return mixprec_engine_prepare (MIXPREC_ENGINE (engine), error);
}

/**
 * mixprec_engine_prepare:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Lays out the buffers of every registered parameter: contiguous groups of
 * parameters that share their dtypes and optimizer settings, each with its
 * working copies, gradients, FP32 masters, accumulation buffer and
 * optimizer state. Called implicitly by the first buffer access,
 * mixprec_engine_backward_done() or mixprec_engine_step(); calling it
 * explicitly reports allocation failures where they happen. Afterwards no
 * more parameters can be registered.
 *
 * Returns: %TRUE on success (also when already prepared)
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_prepare (MixprecEngine *self,
                        GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);

  if (self->prepared)
    return TRUE;

  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      Group *g = NULL;

      for (guint j = 0; j < self->groups->len && g == NULL; j++)
        if (same_group (g_ptr_array_index (self->groups, j), p))
          g = g_ptr_array_index (self->groups, j);
      if (g == NULL)
        {
          g = g_new0 (Group, 1);
          g->index = self->groups->len;
          g->dtypes.working = mixprec_param_get_working_dtype (p);
          g->dtypes.grad = mixprec_param_get_grad_dtype (p);
          g->dtypes.accum = mixprec_param_get_accum_dtype (p);
          g->dtypes.comm = mixprec_param_get_comm_dtype (p);
          g->dtypes.has_master = mixprec_param_has_master (p);
          g->weight_decay_multiplier = mixprec_param_get_weight_decay_multiplier (p);
          g->external = _mixprec_param_is_external (p);
          g->params = g_ptr_array_new ();
          g->segments = g_array_new (FALSE, FALSE, sizeof (Segment));
          g_ptr_array_add (self->groups, g);
        }
      g_ptr_array_add (g->params, p);
      g->numel += mixprec_param_get_numel (p);
    }

  for (guint j = 0; j < self->groups->len; j++)
    if (!layout_group (self, g_ptr_array_index (self->groups, j), error))
      {
        g_ptr_array_set_size (self->groups, 0);
        return FALSE;
      }
  g_hash_table_remove_all (self->init_values);
  self->prepared = TRUE;
  return TRUE;
}

/* ---------------------------------------------------------------- pieces */

/* Calls @func on every piece of @g's segments inside [begin, end). */
typedef void (*PieceFunc) (Group         *g,
                           const Segment *seg,
                           guint64        begin,   /* group element index */
                           guint64        n,
                           gpointer       data);

static void
for_each_piece (Group    *g,
                guint64   begin,
                guint64   end,
                PieceFunc func,
                gpointer  data)
{
  for (guint i = 0; i < g->segments->len; i++)
    {
      const Segment *seg = &g_array_index (g->segments, Segment, i);
      guint64 lo = MAX (begin, seg->offset);
      guint64 hi = MIN (end, seg->offset + seg->numel);

      if (lo < hi)
        func (g, seg, lo, hi - lo, data);
    }
}

static gpointer
at (gpointer base, MixprecDType dtype, guint64 index)
{
  return (guint8 *) base + index * mixprec_dtype_get_size (dtype);
}

/* ---------------------------------------------------------------- micro-steps */

typedef struct {
  Group *group;
  gboolean first;
} FoldJob;

static void
fold_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  FoldJob *job = data;
  gpointer grad = at (seg->grad, g->dtypes.grad, begin - seg->offset);

  _mixprec_kernel_fold (at (g->accum, g->dtypes.accum, begin), g->dtypes.accum,
                        grad, g->dtypes.grad, n, job->first);
  memset (grad, 0, n * mixprec_dtype_get_size (g->dtypes.grad));
}

static void
fold_range (gsize begin, gsize end, gpointer data)
{
  FoldJob *job = data;
  for_each_piece (job->group, begin, end, fold_piece, job);
}

static void
zero_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  memset (at (seg->grad, g->dtypes.grad, begin - seg->offset), 0,
          n * mixprec_dtype_get_size (g->dtypes.grad));
}

static void
zero_range (gsize begin, gsize end, gpointer data)
{
  for_each_piece (data, begin, end, zero_piece, NULL);
}

/**
 * mixprec_engine_backward_done:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Tells the engine that every parameter's gradient buffer holds the
 * gradient of this micro-batch's loss multiplied by
 * mixprec_engine_get_loss_scale(). The engine folds the gradients into
 * its accumulation buffers (in each parameter's accumulation dtype) and
 * zeroes the gradient buffers, or, with one micro-step per step, reads
 * them in place at mixprec_engine_step(). Call it
 * gradient_accumulation_steps times, then mixprec_engine_step().
 *
 * Returns: %TRUE on success
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_backward_done (MixprecEngine *self,
                              GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  if (self->micro_steps >= self->gas)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "backward_done() called %u times since the last step(), but "
                   "gradient_accumulation_steps is %u: call step() first",
                   self->micro_steps + 1, self->gas);
      return FALSE;
    }
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      FoldJob job = { g, self->micro_steps == 0 };

      if (g->accum != NULL)
        _mixprec_parallel_for (g->numel, MIN_CHUNK, 64, fold_range, &job);
    }
  self->micro_steps++;
  return TRUE;
}

/* ---------------------------------------------------------------- step */

/* The gradients the step reads: the accumulation buffer, or the user's
 * gradient buffers in place. */
static MixprecDType
source_dtype (const Group *g)
{
  return g->accum != NULL ? g->dtypes.accum : g->dtypes.grad;
}

typedef struct {
  Group *group;
  gdouble *block_sums;
} SumsqJob;

static void
sumsq_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  gdouble *sum = data;

  if (g->accum != NULL)
    *sum += _mixprec_kernel_sumsq (at (g->accum, g->dtypes.accum, begin), g->dtypes.accum, n);
  else
    *sum += _mixprec_kernel_sumsq (at (seg->grad, g->dtypes.grad, begin - seg->offset),
                                   g->dtypes.grad, n);
}

static void
sumsq_blocks (gsize first_block, gsize end_block, gpointer data)
{
  SumsqJob *job = data;

  for (gsize b = first_block; b < end_block; b++)
    {
      guint64 begin = (guint64) b * _MIXPREC_SUMSQ_BLOCK;
      guint64 end = MIN (begin + _MIXPREC_SUMSQ_BLOCK, job->group->numel);
      gdouble sum = 0.0;

      for_each_piece (job->group, begin, end, sumsq_piece, &sum);
      job->block_sums[b] = sum;
    }
}

/* The sum of squares of every gradient the step will read, in a fixed
 * order: fixed-size blocks, their sums added in index order. */
static gdouble
gradient_sumsq (MixprecEngine *self)
{
  gdouble total = 0.0;

  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      gsize n_blocks = (g->numel + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      g_autofree gdouble *sums = g_new0 (gdouble, MAX (n_blocks, 1));
      SumsqJob job = { g, sums };

      _mixprec_parallel_for (n_blocks, 1, 1, sumsq_blocks, &job);
      for (gsize b = 0; b < n_blocks; b++)
        total += sums[b];
    }
  return total;
}

typedef struct {
  MixprecEngine *engine;
  Group *group;
  MixprecOptimizerStepV1 args;
  GMutex lock;
  GError *error;
} StepJob;

static void
step_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  StepJob *job = data;
  MixprecOptimizerStepV1 args = job->args;
  guint64 local = begin - seg->offset;
  gfloat *states[16];
  guint n_slots = mixprec_feature_get_n_state_slots (job->engine->optimizer);
  gconstpointer grad;
  gpointer working = NULL;
  gfloat *master = seg->master != NULL ? seg->master + local : NULL;
  GError *error = NULL;

  for (guint s = 0; s < n_slots && s < G_N_ELEMENTS (states); s++)
    states[s] = g->states[s] + begin;
  grad = g->accum != NULL ? at (g->accum, g->dtypes.accum, begin)
                          : at (seg->grad, g->dtypes.grad, local);
  if (seg->working != (gpointer) seg->master)
    working = at (seg->working, g->dtypes.working, local);
  args.first_index = begin;

  if (!_mixprec_feature_optimizer_step (job->engine->optimizer, &args, g->hparams,
                                        master, grad, states, working, n, &error))
    {
      g_mutex_lock (&job->lock);
      if (job->error == NULL)
        job->error = g_steal_pointer (&error);
      g_mutex_unlock (&job->lock);
      g_clear_error (&error);
    }
}

static void
step_range (gsize begin, gsize end, gpointer data)
{
  StepJob *job = data;
  for_each_piece (job->group, begin, end, step_piece, job);
}

static void
clear_gradients (MixprecEngine *self)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      /* Accumulation buffers are overwritten by the next first fold;
       * gradients read in place must be zeroed for backward passes that add. */
      if (g->accum == NULL)
        _mixprec_parallel_for (g->numel, MIN_CHUNK, 64, zero_range, g);
    }
  self->micro_steps = 0;
}

static guint64
step_seed (MixprecEngine *self, guint group)
{
  /* splitmix64 over (seed, group, step): one stream per tensor group and
   * step, the same at any world size since the index is global. */
  guint64 z = self->seed ^ (G_GUINT64_CONSTANT (0x9E3779B97F4A7C15) * (group + 1)) ^
              (G_GUINT64_CONSTANT (0xD1B54A32D192ED03) * (self->applied_steps + 1));

  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/**
 * mixprec_engine_step:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Runs the optimizer step at the accumulation boundary:
 *
 * 1. the sum of squares of every gradient, which is non-finite exactly when
 *    some gradient is (one pass over the gradients);
 * 2. the loss scaler's update with that overflow flag;
 * 3. on overflow (when overflow checking applies), the step is skipped: the
 *    weights, optimizer state and learning-rate schedule stay as they are
 *    and the gradients are cleared;
 * 4. otherwise the global norm of the averaged, unscaled gradients, the
 *    clipping coefficient `max((norm + 1e-6) / gradient_clipping, 1)`, and
 *    one combined factor `1 / (scale * gradient_accumulation_steps * coef)`
 *    using the scale the backward passes used;
 * 5. the fused optimizer step over every group, which also writes the new
 *    working copies (round to nearest even, or stochastic rounding when
 *    mixprec.stochastic_rounding is set).
 *
 * Returns: (transfer full): what the step did, or %NULL with @error set
 *   (called before gradient_accumulation_steps backward passes, the scaler
 *   already at its minimum, or an optimizer failure)
 *
 * Since: 1.0
 */
MixprecStepResult *
mixprec_engine_step (MixprecEngine *self,
                     GError       **error)
{
  g_autoptr(MixprecStepResult) result = NULL;
  g_autoptr(GError) local_error = NULL;
  gdouble scale, sumsq, norm, coef = 1.0, clip;
  gboolean overflow;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  if (!mixprec_engine_prepare (self, error))
    return NULL;
  if (self->micro_steps != self->gas)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "step() called after %u backward_done() calls, but "
                   "gradient_accumulation_steps is %u", self->micro_steps, self->gas);
      return NULL;
    }

  result = g_new0 (MixprecStepResult, 1);
  scale = mixprec_loss_scaler_get_scale (self->scaler);
  sumsq = gradient_sumsq (self);
  overflow = !isfinite (sumsq);
  norm = sqrt (sumsq) / (scale * self->gas);

  if (!mixprec_loss_scaler_update (self->scaler, overflow, &local_error))
    {
      clear_gradients (self);
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_SCALER,
                   "step %" G_GUINT64_FORMAT ": %s", self->steps + 1, local_error->message);
      return NULL;
    }

  self->steps++;
  result->loss_scale = scale;
  result->grad_norm = norm;
  result->lr = mixprec_lr_schedule_get_lr (self->schedule);

  if (overflow && mixprec_config_get_check_grad_overflow (self->config))
    {
      self->skipped_steps++;
      clear_gradients (self);
      result->applied = FALSE;
      result->clip_coef = 1.0;
    }
  else
    {
      clip = mixprec_config_get_gradient_clipping (self->config);
      if (clip > 0.0)
        coef = MAX ((norm + 1e-6) / clip, 1.0);
      self->applied_steps++;

      for (guint j = 0; j < self->groups->len; j++)
        {
          Group *g = g_ptr_array_index (self->groups, j);
          StepJob job = { self, g, { 0 }, { 0 }, NULL };

          job.args.step = self->applied_steps;
          job.args.lr = result->lr;
          job.args.grad_factor = (gfloat) (1.0 / (scale * self->gas * coef));
          job.args.grad_dtype = (MixprecPluginDType) source_dtype (g);
          job.args.working_dtype = (MixprecPluginDType) g->dtypes.working;
          job.args.rounding = self->stochastic ? MIXPREC_PLUGIN_ROUNDING_STOCHASTIC
                                               : MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
          job.args.seed = step_seed (self, g->index);
          g_mutex_init (&job.lock);
          _mixprec_parallel_for (g->numel, MIN_CHUNK, 64, step_range, &job);
          g_mutex_clear (&job.lock);
          if (job.error != NULL)
            {
              self->applied_steps--;
              clear_gradients (self);
              g_propagate_prefixed_error (error, job.error, "step %" G_GUINT64_FORMAT ": ",
                                          self->steps);
              return NULL;
            }
        }
      mixprec_lr_schedule_advance (self->schedule);
      clear_gradients (self);
      result->applied = TRUE;
      result->clip_coef = coef;
    }

  result->step = self->steps;
  result->applied_steps = self->applied_steps;
  result->skipped_steps = self->skipped_steps;
  result->next_loss_scale = mixprec_loss_scaler_get_scale (self->scaler);
  return g_steal_pointer (&result);
}

/**
 * mixprec_engine_get_optimizer_state_names:
 * @self: a #MixprecEngine
 *
 * Returns: (transfer full): the names of the optimizer's FP32 state slots
 *   per element, e.g. "exp_avg" and "exp_avg_sq" for adamw
 *
 * Since: 1.0
 */
GStrv
mixprec_engine_get_optimizer_state_names (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return g_strdupv ((GStrv) mixprec_feature_get_state_names (self->optimizer));
}

/**
 * mixprec_engine_get_optimizer_state:
 * @self: a #MixprecEngine
 * @param_name: a registered parameter's name
 * @slot: a state slot name from mixprec_engine_get_optimizer_state_names()
 * @error: return location for a #GError
 *
 * Copies one optimizer state slot of one parameter.
 *
 * Returns: (transfer full): numel FP32 values, or %NULL with @error set
 *   (unknown parameter or slot)
 *
 * Since: 1.0
 */
GBytes *
mixprec_engine_get_optimizer_state (MixprecEngine *self,
                                    const gchar   *param_name,
                                    const gchar   *slot,
                                    GError       **error)
{
  MixprecParam *param;
  const gchar * const *names;
  _MixprecParamStorage *s;
  Group *g;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (param_name != NULL && slot != NULL, NULL);

  param = g_hash_table_lookup (self->by_name, param_name);
  if (param == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "no parameter named '%s'", param_name);
      return NULL;
    }
  if (!mixprec_engine_prepare (self, error))
    return NULL;
  names = mixprec_feature_get_state_names (self->optimizer);
  s = _mixprec_param_get_storage (param);
  g = g_ptr_array_index (self->groups, s->group);
  for (guint i = 0; names != NULL && names[i] != NULL; i++)
    if (g_str_equal (names[i], slot))
      return g_bytes_new (g->states[i] + s->offset,
                          mixprec_param_get_numel (param) * sizeof (gfloat));
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
               "the '%s' optimizer has no state slot '%s'",
               mixprec_feature_get_name (self->optimizer), slot);
  return NULL;
}

/**
 * mixprec_engine_get_loss_scale:
 * @self: a #MixprecEngine
 *
 * Returns: the factor to multiply the loss by before the backward pass
 *
 * Since: 1.0
 */
gdouble
mixprec_engine_get_loss_scale (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1.0);
  return mixprec_loss_scaler_get_scale (self->scaler);
}

/**
 * mixprec_engine_get_lr:
 * @self: a #MixprecEngine
 *
 * Returns: the learning rate the next applied step will use
 *
 * Since: 1.0
 */
gdouble
mixprec_engine_get_lr (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 0.0);
  return mixprec_lr_schedule_get_lr (self->schedule);
}

/**
 * mixprec_engine_get_gradient_accumulation_steps:
 * @self: a #MixprecEngine
 *
 * Returns: the number of backward passes per optimizer step
 *
 * Since: 1.0
 */
guint
mixprec_engine_get_gradient_accumulation_steps (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1);
  return self->gas;
}

/**
 * mixprec_engine_is_accumulation_boundary:
 * @self: a #MixprecEngine
 *
 * Returns: %TRUE when gradient_accumulation_steps backward passes have been
 *   folded and mixprec_engine_step() is due
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_is_accumulation_boundary (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  return self->micro_steps == self->gas;
}
