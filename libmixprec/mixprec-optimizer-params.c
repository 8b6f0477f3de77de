/* mixprec-optimizer-params.c — finds a configuration's optimizer in the
 * plugin registry and checks its parameters against the plugin's schema,
 * reporting every problem; the engine and the configuration both use it,
 * so that what a configuration accepts is what the engine runs. */
#include "config.h"

#include <math.h>

#include "mixprec.h"
#include "mixprec-optimizer-params-private.h"

gchar *
_mixprec_optimizer_feature_name (const gchar *type)
{
  g_autofree gchar *lower = g_ascii_strdown (type, -1);

  if (g_str_equal (lower, "adam") || g_str_equal (lower, "fusedadam"))
    return g_strdup ("adamw");
  return g_steal_pointer (&lower);
}

static gboolean
set_hparam (MixprecFeature *feature,
            gdouble        *hparams,
            const gchar    *path,
            const gchar    *name,
            JsonNode       *node,
            GString        *errors)
{
  gint index = mixprec_feature_find_hparam (feature, name);
  guint n = mixprec_feature_get_n_hparams (feature);
  MixprecHyperParamType type;
  gdouble value, lo, hi;

  if (index < 0)
    {
      g_autoptr(GString) known = g_string_new (NULL);

      for (guint i = 0; i < n; i++)
        g_string_append_printf (known, "%s%s", i ? ", " : "",
                                mixprec_feature_get_hparam_name (feature, i));
      g_string_append_printf (errors, "%s: not a hyper-parameter of the '%s' optimizer (it has: %s)\n",
                              path, mixprec_feature_get_name (feature), known->str);
      return FALSE;
    }
  type = mixprec_feature_get_hparam_type (feature, index);
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
  lo = mixprec_feature_get_hparam_minimum (feature, index);
  hi = mixprec_feature_get_hparam_maximum (feature, index);
  if (!isfinite (value) || value < lo || value > hi)
    {
      g_string_append_printf (errors, "%s: must be between %g and %g, got %g\n",
                              path, lo, hi, value);
      return FALSE;
    }
  hparams[index] = value;
  return TRUE;
}

/* Keys of DeepSpeed's Adam section (runtime/config.py, ops/adam) and
 * torch.optim.AdamW that choose how Adam runs rather than what it
 * computes: accepted where the choice makes no difference to the result,
 * refused where it asks for another algorithm. Returns TRUE when @key is
 * one of them (handled). */
static gboolean
is_implementation_key (MixprecFeature *feature,
                       const gchar    *key,
                       JsonNode       *node,
                       const gchar    *path,
                       GString        *errors,
                       GString        *warnings)
{
  gboolean is_bool = JSON_NODE_HOLDS_VALUE (node)
                     && json_node_get_value_type (node) == G_TYPE_BOOLEAN;

  if (!g_str_equal (mixprec_feature_get_name (feature), "adamw"))
    return FALSE;
  if (g_str_equal (key, "torch_adam") || g_str_equal (key, "fused")
      || g_str_equal (key, "foreach"))
    {
      if (!is_bool && !JSON_NODE_HOLDS_NULL (node))
        g_string_append_printf (errors, "%s: must be true or false\n", path);
      else if (warnings != NULL && is_bool && json_node_get_boolean (node)
               == g_str_equal (key, "torch_adam"))
        g_string_append_printf (warnings, "%s: chooses an Adam implementation; libmixprec "
                                "runs its own fused one, with the same arithmetic; ignored\n",
                                path);
      return TRUE;
    }
  if (g_str_equal (key, "amsgrad"))
    {
      if (!is_bool)
        g_string_append_printf (errors, "%s: must be true or false\n", path);
      else if (json_node_get_boolean (node))
        g_string_append_printf (errors, "%s: must be false, got true: the AMSGrad variant is "
                                "not implemented (DeepSpeed's FusedAdam refuses it too)\n", path);
      return TRUE;
    }
  return FALSE;
}

/* DeepSpeed's own optimizers (runtime/config.py, DEEPSPEED_OPTIMIZERS)
 * that no libmixprec plugin provides: a type naming one is refused with
 * what it is, not only with the plugin that is missing. Keyed by feature
 * name (the type lower-cased). */
static const struct
{
  const gchar *feature;
  const gchar *what;
} deepspeed_only_optimizers[] = {
  { "lamb", "LAMB, the layer-wise adaptive large-batch optimizer" },
  { "onebitadam", "1-bit Adam, Adam with error-compensated 1-bit compressed communication" },
  { "zerooneadam", "0/1 Adam, Adam with 1-bit compressed communication and local steps" },
  { "onebitlamb", "1-bit LAMB, LAMB with error-compensated 1-bit compressed communication" },
  { "adagrad", "Adagrad" },
  { "muadam", "MuAdam, Adam with muP's per-layer learning rates" },
  { "muadamw", "MuAdamW, AdamW with muP's per-layer learning rates" },
  { "musgd", "MuSGD, SGD with muP's per-layer learning rates" },
};

MixprecFeature *
_mixprec_optimizer_resolve (const gchar *type,
                            JsonObject  *params,
                            const gchar *device,
                            gdouble    **hparams_out,
                            guint       *n_hparams_out,
                            GString     *errors,
                            GString     *warnings)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  g_autofree gchar *feature_name =
    _mixprec_optimizer_feature_name (type != NULL ? type : _MIXPREC_DEFAULT_OPTIMIZER_TYPE);
  g_autoptr(MixprecFeature) feature = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GList) members = NULL;
  gdouble *hparams;
  guint n;

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                           feature_name, device, &error);
  if (feature == NULL)
    {
      for (gsize i = 0; i < G_N_ELEMENTS (deepspeed_only_optimizers); i++)
        if (g_str_equal (feature_name, deepspeed_only_optimizers[i].feature))
          {
            g_string_append_printf (errors, "optimizer.type: \"%s\" is DeepSpeed's %s, which "
                                    "libmixprec does not implement (%s)\n", type,
                                    deepspeed_only_optimizers[i].what, error->message);
            return NULL;
          }
      g_string_append_printf (errors, "optimizer.type: %s\n", error->message);
      return NULL;
    }

  n = mixprec_feature_get_n_hparams (feature);
  hparams = g_new0 (gdouble, MAX (n, 1));
  for (guint i = 0; i < n; i++)
    hparams[i] = mixprec_feature_get_hparam_default (feature, i);

  if (params != NULL)
    members = json_object_get_members (params);
  for (GList *l = members; l != NULL; l = l->next)
    {
      const gchar *key = l->data;
      JsonNode *node = json_object_get_member (params, key);
      g_autofree gchar *path = g_strdup_printf ("optimizer.params.%s", key);

      if (is_implementation_key (feature, key, node, path, errors, warnings))
        continue;
      if (g_str_equal (key, "betas"))
        {
          JsonArray *betas = JSON_NODE_HOLDS_ARRAY (node) ? json_node_get_array (node) : NULL;

          if (betas == NULL || json_array_get_length (betas) != 2)
            {
              g_string_append_printf (errors, "%s: must be an array of two numbers [beta1, beta2]\n", path);
              continue;
            }
          set_hparam (feature, hparams, "optimizer.params.betas[0]", "beta1",
                      json_array_get_element (betas, 0), errors);
          set_hparam (feature, hparams, "optimizer.params.betas[1]", "beta2",
                      json_array_get_element (betas, 1), errors);
          continue;
        }
      set_hparam (feature, hparams, path, key, node, errors);
    }

  /* DeepSpeed's AdamW type always decouples weight decay. */
  if (type != NULL && g_ascii_strcasecmp (type, "AdamW") == 0)
    {
      gint mode = mixprec_feature_find_hparam (feature, "adam_w_mode");

      if (mode >= 0 && hparams[mode] == 0.0)
        g_string_append (errors, "optimizer.params.adam_w_mode: must be true for type AdamW "
                                 "(use type Adam for L2 regularisation), got false\n");
    }

  *hparams_out = hparams;
  *n_hparams_out = n;
  return g_steal_pointer (&feature);
}

JsonObject *
_mixprec_optimizer_params_to_json (MixprecFeature *feature,
                                   const gdouble  *hparams)
{
  JsonObject *params = json_object_new ();
  gint beta1 = mixprec_feature_find_hparam (feature, "beta1");
  gint beta2 = mixprec_feature_find_hparam (feature, "beta2");

  for (guint i = 0; i < mixprec_feature_get_n_hparams (feature); i++)
    {
      if ((gint) i == beta1 && beta2 >= 0)
        {
          JsonArray *betas = json_array_new ();

          json_array_add_double_element (betas, hparams[beta1]);
          json_array_add_double_element (betas, hparams[beta2]);
          json_object_set_array_member (params, "betas", betas);
          continue;
        }
      if ((gint) i == beta2 && beta1 >= 0)
        continue;
      switch (mixprec_feature_get_hparam_type (feature, i))
        {
        case MIXPREC_HYPER_PARAM_TYPE_BOOL:
          json_object_set_boolean_member (params, mixprec_feature_get_hparam_name (feature, i),
                                          hparams[i] != 0.0);
          break;
        case MIXPREC_HYPER_PARAM_TYPE_INT:
          json_object_set_int_member (params, mixprec_feature_get_hparam_name (feature, i),
                                      (gint64) hparams[i]);
          break;
        default:
          json_object_set_double_member (params, mixprec_feature_get_hparam_name (feature, i),
                                         hparams[i]);
          break;
        }
    }
  return params;
}
