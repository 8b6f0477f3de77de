/* mixprec-policy.c — MixprecPrecisionPolicy: the precision mode of a
 * configuration applied to one parameter at a time, with the FP32
 * exceptions by module type or parameter name and autocast's
 * lower-precision-safe modules. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"

/**
 * MixprecPrecisionPolicy:
 *
 * Decides, for each parameter, the dtype of its working weights and
 * gradients, whether it has an FP32 master copy, and the dtypes its
 * gradients are accumulated and communicated in.
 *
 * The rules follow the precision mode of the #MixprecConfig:
 *
 * - fp32: everything FP32, no separate master;
 * - fp16, bf16: working weights in the low dtype, an FP32 master,
 *   accumulation and communication as the configuration resolves them;
 * - bf16 without master weights: BF16 weights updated in place,
 *   accumulation in BF16 unless configured otherwise;
 * - autocast: parameters, master and accumulation FP32; gradients of the
 *   module types in `torch_autocast.lower_precision_safe_modules` are
 *   communicated in the autocast dtype, the others in the configured
 *   communication dtype (FP32 by default).
 *
 * Parameters whose module type is in `mixprec.fp32_modules`, or whose name
 * matches a pattern of `mixprec.fp32_params`, are kept entirely in FP32 in
 * every mode: this is how "LayerNorm in FP32, the rest in FP16" is said.
 * Module types match with or without a dotted package prefix
 * ("torch.nn.LayerNorm" is "LayerNorm").
 *
 * Since: 1.0
 */
struct _MixprecPrecisionPolicy
{
  GObject parent_instance;

  MixprecConfig *config;
  GPtrArray     *fp32_param_patterns;     /* GPatternSpec */
};

G_DEFINE_TYPE (MixprecPrecisionPolicy, mixprec_precision_policy, G_TYPE_OBJECT)

/**
 * mixprec_precision_policy_error_quark:
 *
 * Gets the error domain of #MixprecPrecisionPolicy.
 *
 * Returns: the quark behind %MIXPREC_PRECISION_POLICY_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-precision-policy-error-quark, mixprec_precision_policy_error)

/**
 * mixprec_param_precision_copy:
 * @precision: a #MixprecParamPrecision
 *
 * Copies @precision.
 *
 * Returns: (transfer full): a copy, freed with mixprec_param_precision_free()
 *
 * Since: 1.0
 */
MixprecParamPrecision *
mixprec_param_precision_copy (const MixprecParamPrecision *precision)
{
  g_return_val_if_fail (precision != NULL, NULL);
  return g_memdup2 (precision, sizeof *precision);
}

/**
 * mixprec_param_precision_free:
 * @precision: (nullable): a #MixprecParamPrecision
 *
 * Frees @precision.
 *
 * Since: 1.0
 */
void
mixprec_param_precision_free (MixprecParamPrecision *precision)
{
  g_free (precision);
}

G_DEFINE_BOXED_TYPE (MixprecParamPrecision, mixprec_param_precision,
                     mixprec_param_precision_copy, mixprec_param_precision_free)

static void
mixprec_precision_policy_finalize (GObject *object)
{
  MixprecPrecisionPolicy *self = MIXPREC_PRECISION_POLICY (object);

  g_clear_object (&self->config);
  g_clear_pointer (&self->fp32_param_patterns, g_ptr_array_unref);
  G_OBJECT_CLASS (mixprec_precision_policy_parent_class)->finalize (object);
}

static void
mixprec_precision_policy_class_init (MixprecPrecisionPolicyClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_precision_policy_finalize;
}

static void
mixprec_precision_policy_init (MixprecPrecisionPolicy *self)
{
  self->fp32_param_patterns = g_ptr_array_new_with_free_func ((GDestroyNotify) g_pattern_spec_free);
}

/**
 * mixprec_precision_policy_new_from_config:
 * @config: a #MixprecConfig
 * @error: return location for a #GError
 *
 * Creates the policy of @config. The policy keeps a reference to @config.
 *
 * Every combination a policy could not honour (an FP32 module type that is
 * also an autocast-safe one, FP16 accumulation of BF16 gradients...) is
 * refused when the configuration is read, so a configuration that loaded
 * always yields a policy; @error is there so that later configuration
 * keys can add checks without changing this function.
 *
 * Returns: (transfer full) (nullable): a new #MixprecPrecisionPolicy, or
 *   %NULL with @error set
 *
 * Since: 1.0
 */
MixprecPrecisionPolicy *
mixprec_precision_policy_new_from_config (MixprecConfig  *config,
                                          GError        **error)
{
  MixprecPrecisionPolicy *self;
  const gchar * const *patterns;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = g_object_new (MIXPREC_TYPE_PRECISION_POLICY, NULL);
  self->config = g_object_ref (config);
  patterns = mixprec_config_get_fp32_params (config);
  for (guint i = 0; patterns[i] != NULL; i++)
    g_ptr_array_add (self->fp32_param_patterns, g_pattern_spec_new (patterns[i]));
  return self;
}

/**
 * mixprec_precision_policy_get_config:
 * @self: a #MixprecPrecisionPolicy
 *
 * Gets the configuration the policy applies.
 *
 * Returns: (transfer none): the configuration
 *
 * Since: 1.0
 */
MixprecConfig *
mixprec_precision_policy_get_config (MixprecPrecisionPolicy *self)
{
  g_return_val_if_fail (MIXPREC_IS_PRECISION_POLICY (self), NULL);
  return self->config;
}

static gboolean
type_listed (const gchar         *module_type,
             const gchar * const *list)
{
  if (*module_type == '\0')
    return FALSE;
  for (guint i = 0; list[i] != NULL; i++)
    if (_mixprec_module_type_matches (module_type, list[i]))
      return TRUE;
  return FALSE;
}

static gboolean
name_listed (MixprecPrecisionPolicy *self,
             const gchar            *param_name)
{
  for (guint i = 0; i < self->fp32_param_patterns->len; i++)
    if (g_pattern_spec_match_string (g_ptr_array_index (self->fp32_param_patterns, i),
                                     param_name))
      return TRUE;
  return FALSE;
}

static gboolean
compute (MixprecPrecisionPolicy *self,
         const gchar            *param_name,
         const gchar            *module_type,
         MixprecParamPrecision  *p,
         GError                **error)
{
  MixprecConfig *config = self->config;

  if (param_name == NULL || *param_name == '\0' || !g_utf8_validate (param_name, -1, NULL))
    {
      g_set_error_literal (error, MIXPREC_PRECISION_POLICY_ERROR,
                           MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME,
                           "a parameter needs a non-empty UTF-8 name, such as "
                           "\"layers.0.attn.weight\"");
      return FALSE;
    }
  if (module_type == NULL)
    module_type = "";
  if (!g_utf8_validate (module_type, -1, NULL))
    {
      g_set_error (error, MIXPREC_PRECISION_POLICY_ERROR,
                   MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME,
                   "parameter %s: the module type is not UTF-8 text", param_name);
      return FALSE;
    }

  p->grad_accum_dtype = mixprec_config_get_grad_accum_dtype (config);
  p->comm_dtype = mixprec_config_get_communication_dtype (config);
  p->reason = MIXPREC_PRECISION_REASON_MODE;

  if (name_listed (self, param_name)
      || type_listed (module_type, mixprec_config_get_fp32_modules (config)))
    {
      p->working_dtype = MIXPREC_DTYPE_FLOAT32;
      p->master_dtype = MIXPREC_DTYPE_FLOAT32;
      p->has_master = FALSE;
      p->grad_accum_dtype = MIXPREC_DTYPE_FLOAT32;
      p->comm_dtype = MIXPREC_DTYPE_FLOAT32;
      p->reason = name_listed (self, param_name) ? MIXPREC_PRECISION_REASON_FP32_PARAM
                                                 : MIXPREC_PRECISION_REASON_FP32_MODULE;
      return TRUE;
    }

  switch (mixprec_config_get_precision_mode (config))
    {
    case MIXPREC_PRECISION_MODE_FP16:
    case MIXPREC_PRECISION_MODE_BF16:
      p->working_dtype = mixprec_config_get_low_dtype (config);
      p->master_dtype = MIXPREC_DTYPE_FLOAT32;
      p->has_master = TRUE;
      break;
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      p->working_dtype = mixprec_config_get_low_dtype (config);
      p->master_dtype = p->working_dtype;
      p->has_master = FALSE;
      break;
    case MIXPREC_PRECISION_MODE_AUTOCAST:
      p->working_dtype = MIXPREC_DTYPE_FLOAT32;
      p->master_dtype = MIXPREC_DTYPE_FLOAT32;
      p->has_master = FALSE;
      if (type_listed (module_type, mixprec_config_get_lower_precision_safe_modules (config)))
        {
          p->comm_dtype = mixprec_config_get_low_dtype (config);
          p->reason = MIXPREC_PRECISION_REASON_AUTOCAST_SAFE_MODULE;
        }
      break;
    case MIXPREC_PRECISION_MODE_FP32:
    default:
      p->working_dtype = MIXPREC_DTYPE_FLOAT32;
      p->master_dtype = MIXPREC_DTYPE_FLOAT32;
      p->has_master = FALSE;
      break;
    }
  return TRUE;
}

/**
 * mixprec_precision_policy_resolve:
 * @self: a #MixprecPrecisionPolicy
 * @param_name: the parameter's name, e.g. "layers.0.norm.weight"
 * @module_type: (nullable): the type of the module that owns it, e.g.
 *   "LayerNorm"; %NULL or "" when unknown
 * @working_dtype: (out) (optional): the dtype of the working weights and
 *   their gradients
 * @master_dtype: (out) (optional): the dtype of the weights the optimizer
 *   updates (the working dtype when there is no separate master)
 * @has_master: (out) (optional): whether a separate master copy is kept
 * @grad_accum_dtype: (out) (optional): the accumulation dtype
 * @comm_dtype: (out) (optional): the communication dtype
 * @error: return location for a #GError
 *
 * Resolves the dtypes of one parameter. A name or type that matches no
 * rule gets the precision mode's dtypes.
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME when @param_name is empty
 *   or either string is not UTF-8
 *
 * Since: 1.0
 */
gboolean
mixprec_precision_policy_resolve (MixprecPrecisionPolicy *self,
                                  const gchar            *param_name,
                                  const gchar            *module_type,
                                  MixprecDType           *working_dtype,
                                  MixprecDType           *master_dtype,
                                  gboolean               *has_master,
                                  MixprecDType           *grad_accum_dtype,
                                  MixprecDType           *comm_dtype,
                                  GError                **error)
{
  MixprecParamPrecision p = { 0 };

  g_return_val_if_fail (MIXPREC_IS_PRECISION_POLICY (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!compute (self, param_name, module_type, &p, error))
    return FALSE;
  if (working_dtype != NULL)
    *working_dtype = p.working_dtype;
  if (master_dtype != NULL)
    *master_dtype = p.master_dtype;
  if (has_master != NULL)
    *has_master = p.has_master;
  if (grad_accum_dtype != NULL)
    *grad_accum_dtype = p.grad_accum_dtype;
  if (comm_dtype != NULL)
    *comm_dtype = p.comm_dtype;
  return TRUE;
}

/**
 * mixprec_precision_policy_lookup:
 * @self: a #MixprecPrecisionPolicy
 * @param_name: the parameter's name
 * @module_type: (nullable): the type of the module that owns it, or %NULL
 * @error: return location for a #GError
 *
 * Resolves the dtypes of one parameter, as mixprec_precision_policy_resolve()
 * does, into a struct that also says which rule decided.
 *
 * Returns: (transfer full) (nullable): the dtypes, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecParamPrecision *
mixprec_precision_policy_lookup (MixprecPrecisionPolicy *self,
                                 const gchar            *param_name,
                                 const gchar            *module_type,
                                 GError                **error)
{
  MixprecParamPrecision p = { 0 };

  g_return_val_if_fail (MIXPREC_IS_PRECISION_POLICY (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!compute (self, param_name, module_type, &p, error))
    return NULL;
  return mixprec_param_precision_copy (&p);
}

/**
 * mixprec_precision_policy_is_fp8:
 * @self: a #MixprecPrecisionPolicy
 * @param_name: the parameter's name
 * @module_type: (nullable): the type of the module that owns it, or %NULL
 *
 * Whether the parameter gets an FP8 working copy: `fp8.enabled` is true,
 * @module_type is one of `fp8.modules` (with or without a dotted package
 * prefix, as for `mixprec.fp32_modules`), and the parameter is not kept in
 * FP32 by `mixprec.fp32_modules` or `mixprec.fp32_params` (so that, for
 * instance, an output projection can stay out of FP8 by name). The FP8
 * dtype and scaling follow mixprec_config_get_fp8_recipe().
 *
 * The engine gives FP8 copies to such parameters only when they have two
 * dimensions or more (the matrices a GEMM multiplies); a bias keeps the
 * working dtype.
 *
 * Returns: %TRUE when the parameter is FP8; %FALSE otherwise, also for an
 *   empty or non-UTF-8 name or type
 *
 * Since: 1.1
 */
gboolean
mixprec_precision_policy_is_fp8 (MixprecPrecisionPolicy *self,
                                 const gchar            *param_name,
                                 const gchar            *module_type)
{
  MixprecParamPrecision p = { 0 };

  g_return_val_if_fail (MIXPREC_IS_PRECISION_POLICY (self), FALSE);

  if (mixprec_config_get_fp8_recipe (self->config) == NULL || module_type == NULL)
    return FALSE;
  if (!compute (self, param_name, module_type, &p, NULL))
    return FALSE;
  if (p.reason == MIXPREC_PRECISION_REASON_FP32_MODULE
      || p.reason == MIXPREC_PRECISION_REASON_FP32_PARAM)
    return FALSE;
  return type_listed (module_type, mixprec_config_get_fp8_modules (self->config));
}

/**
 * mixprec_precision_policy_is_fp4:
 * @self: a #MixprecPrecisionPolicy
 * @param_name: the parameter's name
 * @module_type: (nullable): the type of the module that owns it, or %NULL
 *
 * Whether the parameter gets a 4-bit (NVFP4 or MXFP4) working copy:
 * `fp4.enabled` is true, @module_type is one of `fp4.modules` (matched as
 * `mixprec.fp32_modules` is), and the parameter is not kept in FP32 by
 * `mixprec.fp32_modules` or `mixprec.fp32_params`, and its name matches no
 * pattern of `fp4.exclude_params` (which is how the first and last layers
 * keep their bf16 working copies, as Transformer Engine keeps them in
 * higher precision). The recipe follows mixprec_config_get_fp4_recipe(). As for
 * FP8, the engine gives the copies to parameters of two dimensions or
 * more only.
 *
 * Returns: %TRUE when the parameter is FP4; %FALSE otherwise
 *
 * Since: 1.1
 */
gboolean
mixprec_precision_policy_is_fp4 (MixprecPrecisionPolicy *self,
                                 const gchar            *param_name,
                                 const gchar            *module_type)
{
  MixprecParamPrecision p = { 0 };
  const gchar * const *excluded;

  g_return_val_if_fail (MIXPREC_IS_PRECISION_POLICY (self), FALSE);

  if (!mixprec_config_get_fp4_recipe (self->config, NULL, NULL) || module_type == NULL)
    return FALSE;
  if (!compute (self, param_name, module_type, &p, NULL))
    return FALSE;
  if (p.reason == MIXPREC_PRECISION_REASON_FP32_MODULE
      || p.reason == MIXPREC_PRECISION_REASON_FP32_PARAM)
    return FALSE;
  if (!type_listed (module_type, mixprec_config_get_fp4_modules (self->config)))
    return FALSE;
  excluded = mixprec_config_get_fp4_exclude_params (self->config);
  for (guint i = 0; excluded[i] != NULL; i++)
    if (g_pattern_match_simple (excluded[i], param_name))
      return FALSE;
  return TRUE;
}

/* Hugging Face's Trainer (get_decay_parameter_names): parameters of
 * LayerNorm modules, and those whose lower-cased name contains "bias",
 * "layernorm" or "rmsnorm", has a dotted component "norm" or one ending
 * in "_norm", are not decayed. */
static gboolean
hf_exempt (const gchar *name,
           const gchar *module_type)
{
  g_autofree gchar *lower = g_ascii_strdown (name, -1);
  g_auto(GStrv) parts = NULL;

  if (module_type != NULL && _mixprec_module_type_matches (module_type, "LayerNorm"))
    return TRUE;
  if (strstr (lower, "bias") != NULL || strstr (lower, "layernorm") != NULL
      || strstr (lower, "rmsnorm") != NULL)
    return TRUE;
  parts = g_strsplit (lower, ".", -1);
  for (guint i = 0; parts[i] != NULL; i++)
    if (g_str_equal (parts[i], "norm") || g_str_has_suffix (parts[i], "_norm"))
      return TRUE;
  return FALSE;
}

gdouble
_mixprec_weight_decay_multiplier (MixprecConfig *config,
                                  const gchar   *name,
                                  const gchar   *module_type,
                                  guint          n_dims)
{
  switch (_mixprec_config_get_weight_decay_exempt (config))
    {
    case _MIXPREC_WEIGHT_DECAY_EXEMPT_NONE:
      return 1.0;
    case _MIXPREC_WEIGHT_DECAY_EXEMPT_NAMES:
      return hf_exempt (name, module_type) ? 0.0 : 1.0;
    case _MIXPREC_WEIGHT_DECAY_EXEMPT_1D:
    default:
      /* nanoGPT's rule: one-dimensional tensors (biases, norm weights)
       * and scalars are not decayed. */
      return n_dims >= 2 ? 1.0 : 0.0;
    }
}
