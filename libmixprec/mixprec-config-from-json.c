/* mixprec-config-from-json.c — reads a parsed JSON document into
 * MixprecConfigSettings: every key of every section is type- and
 * range-checked, unknown keys are reported with a suggestion, DeepSpeed keys
 * libmixprec does not act on become warnings, and combinations that make no
 * sense are refused. Every problem is collected; nothing stops at the first. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-optimizer-params-private.h"
#include "mixprec-fp8-recipe-private.h"

typedef struct
{
  const gchar *name;
  const gchar *default_json;    /* NULL: warn whenever the key is present */
  const gchar *reason;          /* NULL: the section's reason */
} IgnoredKey;

typedef struct
{
  MixprecConfigSettings *s;
  MixprecConfigReport   *report;

  /* Which defaults the document overrode: some defaults depend on other
   * keys (the scaler semantics, the precision mode, the ZeRO stage). */
  gboolean initial_scale_power_set;
  gboolean loss_scale_window_set;
  gboolean hysteresis_set;
  gboolean min_loss_scale_set;
  gboolean grad_accum_set;
  gboolean communication_set;
  gboolean overlap_comm_set;
  gboolean raise_at_min_scale_set;
  gboolean max_scale_set;
  gboolean semantics_set;
  gboolean precision_mode_set;
  MixprecPrecisionMode precision_mode_asserted;
  gboolean master_weights_set;     /* mixprec.master_weights */
  gboolean optimizer_states_set;   /* mixprec.optimizer_states */
} Loader;

/* ------------------------------------------------------------ helpers */

/* An "auto" that _mixprec_config_resolve_auto() left: nothing in the
 * document or the published defaults gives its value. */
static void
report_unresolved_auto (Loader      *l,
                        const gchar *path,
                        const gchar *rule)
{
  _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                "%s: must be %s, got \"auto\" (a Hugging Face placeholder "
                                "libmixprec cannot derive); pass the value with "
                                "--set %s=VALUE (mixprec_config_loader_set_override())",
                                path, rule, path);
}

static void
report_invalid (Loader      *l,
                const gchar *path,
                const gchar *rule,
                JsonNode    *node)
{
  g_autofree gchar *shown = _mixprec_json_show (node);

  if (_mixprec_json_is_auto (node))
    report_unresolved_auto (l, path, rule);
  else
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                  "%s: must be %s, got %s", path, rule, shown);
}

/* The member @key of @o, or NULL when it is absent or when the scanner
 * already reported it (a duplicate key, a number out of range). */
static JsonNode *
lookup (Loader      *l,
        JsonObject  *o,
        const gchar *section,
        const gchar *key,
        gchar      **path_out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node;

  if (o == NULL || (node = json_object_get_member (o, key)) == NULL)
    return NULL;
  path = _mixprec_json_join_path (section, key);
  if (g_hash_table_contains (l->report->reported, path))
    return NULL;
  *path_out = g_steal_pointer (&path);
  return node;
}

static gboolean
read_bool (Loader      *l,
           JsonObject  *o,
           const gchar *section,
           const gchar *key,
           gboolean    *out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);

  if (node == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_BOOLEAN)
    {
      report_invalid (l, path, "true or false", node);
      return FALSE;
    }
  *out = json_node_get_boolean (node);
  return TRUE;
}

/* Returns TRUE with *out set when the key holds a valid integer; FALSE when
 * it is absent, null (and @nullable), or invalid (reported). */
static gboolean
read_int (Loader      *l,
          JsonObject  *o,
          const gchar *section,
          const gchar *key,
          gint64       min,
          gint64       max,
          gboolean     nullable,
          const gchar *rule,
          gint64      *out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);
  gint64 value;

  if (node == NULL || (nullable && JSON_NODE_HOLDS_NULL (node)))
    return FALSE;
  if (!_mixprec_json_node_to_integer (node, &value) || value < min || value > max)
    {
      report_invalid (l, path, rule, node);
      return FALSE;
    }
  *out = value;
  return TRUE;
}

typedef enum { OPEN, CLOSED } Bound;

static gboolean
read_number (Loader      *l,
             JsonObject  *o,
             const gchar *section,
             const gchar *key,
             gdouble      min,
             Bound        min_bound,
             gdouble      max,
             Bound        max_bound,
             const gchar *rule,
             gdouble     *out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);
  gdouble value;

  if (node == NULL)
    return FALSE;
  if (!_mixprec_json_node_to_number (node, &value)
      || (min_bound == CLOSED ? value < min : value <= min)
      || (max_bound == CLOSED ? value > max : value >= max))
    {
      report_invalid (l, path, rule, node);
      return FALSE;
    }
  *out = value;
  return TRUE;
}

static gboolean
read_string (Loader       *l,
             JsonObject   *o,
             const gchar  *section,
             const gchar  *key,
             gboolean      nullable,
             const gchar  *rule,
             const gchar **out,
             gchar       **path_out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);

  if (node == NULL || (nullable && JSON_NODE_HOLDS_NULL (node)))
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING
      || *json_node_get_string (node) == '\0' || _mixprec_json_is_auto (node))
    {
      report_invalid (l, path, rule, node);
      return FALSE;
    }
  *out = json_node_get_string (node);
  if (path_out != NULL)
    *path_out = g_steal_pointer (&path);
  return TRUE;
}

static gboolean
read_choice (Loader              *l,
             JsonObject          *o,
             const gchar         *section,
             const gchar         *key,
             const gchar * const *choices,
             guint               *out)
{
  g_autofree gchar *path = NULL;
  g_autofree gchar *list = g_strjoinv ("\", \"", (gchar **) choices);
  g_autofree gchar *rule = g_strdup_printf ("one of \"%s\"", list);
  JsonNode *node = lookup (l, o, section, key, &path);

  if (node == NULL)
    return FALSE;
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_STRING)
    for (guint i = 0; choices[i] != NULL; i++)
      if (g_str_equal (json_node_get_string (node), choices[i]))
        {
          *out = i;
          return TRUE;
        }
  report_invalid (l, path, rule, node);
  return FALSE;
}

/* An array of non-empty strings. */
static gboolean
read_strv (Loader      *l,
           JsonObject  *o,
           const gchar *section,
           const gchar *key,
           gboolean     nullable,
           const gchar *rule,
           GStrv       *out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);
  JsonArray *array;
  g_autoptr(GStrvBuilder) builder = NULL;
  gboolean ok = TRUE;

  if (node == NULL || (nullable && JSON_NODE_HOLDS_NULL (node)))
    return FALSE;
  if (!JSON_NODE_HOLDS_ARRAY (node))
    {
      report_invalid (l, path, rule, node);
      return FALSE;
    }
  array = json_node_get_array (node);
  builder = g_strv_builder_new ();
  for (guint i = 0; i < json_array_get_length (array); i++)
    {
      JsonNode *element = json_array_get_element (array, i);
      g_autoptr(GString) element_path = g_string_new (path);

      _mixprec_json_path_append_index (element_path, i);
      if (g_hash_table_contains (l->report->reported, element_path->str))
        {
          ok = FALSE;
          continue;
        }
      if (!JSON_NODE_HOLDS_VALUE (element)
          || json_node_get_value_type (element) != G_TYPE_STRING
          || *json_node_get_string (element) == '\0')
        {
          report_invalid (l, element_path->str, "a non-empty string", element);
          ok = FALSE;
          continue;
        }
      g_strv_builder_add (builder, json_node_get_string (element));
    }
  if (!ok)
    return FALSE;
  g_strfreev (*out);
  *out = g_strv_builder_end (builder);
  return TRUE;
}

static const gchar *const fp8_prefixes[] = { "fp8", "float8", "e4m3", "e5m2", NULL };

/* DeepSpeed's spellings (DtypeEnum), case-insensitive. */
static gboolean
parse_dtype (const gchar  *name,
             MixprecDType *out)
{
  static const struct { const gchar *name; MixprecDType dtype; } names[] = {
    { "fp32", MIXPREC_DTYPE_FLOAT32 }, { "float32", MIXPREC_DTYPE_FLOAT32 },
    { "float", MIXPREC_DTYPE_FLOAT32 }, { "torch.float32", MIXPREC_DTYPE_FLOAT32 },
    { "fp16", MIXPREC_DTYPE_FLOAT16 }, { "float16", MIXPREC_DTYPE_FLOAT16 },
    { "half", MIXPREC_DTYPE_FLOAT16 }, { "torch.float16", MIXPREC_DTYPE_FLOAT16 },
    { "bf16", MIXPREC_DTYPE_BFLOAT16 }, { "bfloat16", MIXPREC_DTYPE_BFLOAT16 },
    { "torch.bfloat16", MIXPREC_DTYPE_BFLOAT16 },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (names); i++)
    if (g_ascii_strcasecmp (name, names[i].name) == 0)
      {
        *out = names[i].dtype;
        return TRUE;
      }
  return FALSE;
}

static gboolean
is_fp8_name (const gchar *name)
{
  const gchar *bare = g_str_has_prefix (name, "torch.") ? name + 6 : name;

  for (guint i = 0; fp8_prefixes[i] != NULL; i++)
    if (g_ascii_strncasecmp (bare, fp8_prefixes[i], strlen (fp8_prefixes[i])) == 0)
      return TRUE;
  return FALSE;
}

/* A dtype key: fp32, fp16 or bf16 (with DeepSpeed's aliases); fp8 is named
 * and refused with its own reason. */
static gboolean
read_dtype (Loader       *l,
            JsonObject   *o,
            const gchar  *section,
            const gchar  *key,
            const gchar  *what,
            MixprecDType *out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);
  const gchar *rule = "one of \"fp32\", \"fp16\", \"bf16\" (or \"float32\", \"float\", "
                      "\"float16\", \"half\", \"bfloat16\")";

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return FALSE;
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_STRING)
    {
      const gchar *name = json_node_get_string (node);

      if (parse_dtype (name, out))
        return TRUE;
      if (is_fp8_name (name))
        {
          _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                        "%s: must be fp32, fp16 or bf16, got \"%s\": "
                                        "FP8 has too few bits to be a %s "
                                        "(FP8 is for matrix-multiply inputs with "
                                        "per-tensor scaling)", path, name, what);
          return FALSE;
        }
    }
  report_invalid (l, path, rule, node);
  return FALSE;
}

static gboolean
in_list (const gchar         *name,
         const gchar * const *list)
{
  return list != NULL && g_strv_contains (list, name);
}

static gboolean
equals_default (JsonNode    *node,
                const gchar *default_json)
{
  g_autoptr(JsonNode) def = json_from_string (default_json, NULL);
  gdouble a, b;

  if (def == NULL)
    return FALSE;
  /* {"device": "none"} is how DeepSpeed (and the Hugging Face templates)
   * spell "no offload": it asks for what libmixprec does anyway. */
  if (JSON_NODE_HOLDS_NULL (def) && JSON_NODE_HOLDS_OBJECT (node))
    {
      JsonNode *device = json_object_get_member (json_node_get_object (node), "device");

      return device != NULL && JSON_NODE_HOLDS_VALUE (device)
             && json_node_get_value_type (device) == G_TYPE_STRING
             && g_str_equal (json_node_get_string (device), "none");
    }
  if (_mixprec_json_node_to_number (node, &a) && _mixprec_json_node_to_number (def, &b))
    return a == b;
  return json_node_equal (node, def);
}

/* Reports every member of @o that is not one of @known: DeepSpeed keys
 * libmixprec ignores become warnings, the rest errors with a suggestion.
 * In a @lenient section (one DeepSpeed reads as a plain dictionary, so
 * that it ignores what it does not know) an unknown key close to no known
 * one is a warning; a near miss stays an error, being most likely a typo
 * that would silently drop a setting. A key an override wrote must exist. */
static void
check_members (Loader              *l,
               JsonObject          *o,
               const gchar         *section,
               const gchar * const *known,
               const IgnoredKey    *ignored,
               const gchar         *ignored_reason,
               gboolean             lenient)
{
  g_autoptr(GList) members = json_object_get_members (o);

  for (GList *m = members; m != NULL; m = m->next)
    {
      const gchar *key = m->data;
      g_autofree gchar *path = _mixprec_json_join_path (section, key);
      const IgnoredKey *ig = NULL;

      if (in_list (key, known) || g_hash_table_contains (l->report->reported, path))
        continue;
      for (guint i = 0; ignored != NULL && ignored[i].name != NULL; i++)
        if (g_str_equal (key, ignored[i].name))
          ig = &ignored[i];

      if (ig != NULL)
        {
          JsonNode *node = json_object_get_member (o, key);

          if (ig->default_json == NULL || !equals_default (node, ig->default_json))
            _mixprec_config_report_warning (l->report, "%s: %s; ignored", path,
                                            ig->reason != NULL ? ig->reason : ignored_reason);
        }
      else
        {
          g_autoptr(GPtrArray) candidates = g_ptr_array_new ();
          const gchar *suggestion;

          for (guint i = 0; known[i] != NULL; i++)
            g_ptr_array_add (candidates, (gpointer) known[i]);
          for (guint i = 0; ignored != NULL && ignored[i].name != NULL; i++)
            g_ptr_array_add (candidates, (gpointer) ignored[i].name);
          g_ptr_array_add (candidates, NULL);
          suggestion = _mixprec_suggest (key, (const gchar * const *) candidates->pdata);

          if (suggestion != NULL)
            _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                          "%s: unknown key in %s (did you mean %s?)",
                                          path, *section ? section : "the top level",
                                          suggestion);
          else if (lenient && !g_hash_table_contains (l->report->overridden, path))
            _mixprec_config_report_warning_code (l->report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                                 "%s: unknown key in %s, as in %s; "
                                                 "ignored", path, section,
                                                 g_str_has_prefix (section, "colossalai")
                                                 ? "Colossal-AI" : "DeepSpeed");
          else
            {
              g_autofree gchar *list = g_strjoinv (", ", (gchar **) known);

              _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                            "%s: unknown key in %s; the keys are %s",
                                            path, *section ? section : "the top level",
                                            list);
            }
        }
    }
}

/* The object @key of the top level, or NULL (absent, or not an object:
 * reported). */
static JsonObject *
section_object (Loader      *l,
                JsonObject  *root,
                const gchar *key,
                gboolean     null_is_absent)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, root, "", key, &path);

  if (node == NULL || (null_is_absent && JSON_NODE_HOLDS_NULL (node)))
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      report_invalid (l, path, "a JSON object", node);
      return NULL;
    }
  return json_node_get_object (node);
}

/* ------------------------------------------------------------ sections */

static void
load_fp16 (Loader     *l,
           JsonObject *o)
{
  static const gchar *const known[] = {
    "enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
    "hysteresis", "consecutive_hysteresis", "min_loss_scale",
    "fp16_master_weights_and_grads", NULL
  };
  static const IgnoredKey ignored[] = {
    { "auto_cast", "false", "libmixprec does not run the forward pass, so it casts no inputs" },
    { "fused_mode", "true", "a legacy DeepSpeed switch; libmixprec always fuses" },
    { NULL, NULL, NULL }
  };
  MixprecConfigSettings *s = l->s;
  gint64 i;

  if (o == NULL)
    return;
  check_members (l, o, "fp16", known, ignored, NULL, FALSE);
  read_bool (l, o, "fp16", "enabled", &s->fp16_enabled);
  read_number (l, o, "fp16", "loss_scale", 0, CLOSED, FLT_MAX, CLOSED,
               "a number >= 0 (0 selects dynamic scaling) no larger than 3.4e38",
               &s->loss_scale);
  if (read_int (l, o, "fp16", "initial_scale_power", 0, 127, FALSE,
                "an integer from 0 to 127 (the initial scale is 2^power)", &i))
    {
      s->initial_scale_power = (gint) i;
      l->initial_scale_power_set = TRUE;
    }
  if (read_int (l, o, "fp16", "loss_scale_window", 1, G_MAXUINT, FALSE,
                "a positive integer", &i))
    {
      s->loss_scale_window = (guint) i;
      l->loss_scale_window_set = TRUE;
    }
  if (read_int (l, o, "fp16", "hysteresis", 1, G_MAXUINT, FALSE,
                "a positive integer", &i))
    {
      s->hysteresis = (guint) i;
      l->hysteresis_set = TRUE;
    }
  read_bool (l, o, "fp16", "consecutive_hysteresis", &s->consecutive_hysteresis);
  /* 0 (no floor) is PyTorch's and Apex's default, Colossal-AI's
   * min_scale=None; resolve_scaler() refuses it for DeepSpeed's scaler. */
  if (read_number (l, o, "fp16", "min_loss_scale", 0, CLOSED, FLT_MAX, CLOSED,
                   "a number > 0 (or 0, no floor, unless mixprec.scaler.semantics is "
                   "\"deepspeed\") no larger than 3.4e38", &s->min_loss_scale))
    l->min_loss_scale_set = TRUE;
  read_bool (l, o, "fp16", "fp16_master_weights_and_grads", &s->fp16_master_weights_and_grads);
}

static void
load_bf16 (Loader      *l,
           JsonObject  *o,
           const gchar *section)
{
  static const gchar *const known[] = {
    "enabled", "check_grad_overflow", "bf16_master_weights_and_grads",
    "bf16_optimizer_states", NULL
  };
  /* The fp16 scaler's keys, often copied into bf16 sections: bf16 has
   * FP32's range and DeepSpeed scales no bf16 loss. */
#define BF16_NO_SCALER "bf16 training has no loss scaling (bf16 has FP32's range)"
  static const IgnoredKey ignored[] = {
    { "immediate_grad_update", NULL,
      "libmixprec folds each micro-step's gradients into the accumulation buffer as "
      "they arrive, so the setting has no counterpart" },
    { "loss_scale", NULL, BF16_NO_SCALER },
    { "initial_scale_power", NULL, BF16_NO_SCALER },
    { "loss_scale_window", NULL, BF16_NO_SCALER },
    { "hysteresis", NULL, BF16_NO_SCALER },
    { "consecutive_hysteresis", NULL, BF16_NO_SCALER },
    { "min_loss_scale", NULL, BF16_NO_SCALER },
    { NULL, NULL, NULL }
  };
#undef BF16_NO_SCALER
  MixprecConfigSettings *s = l->s;

  if (o == NULL)
    return;
  check_members (l, o, section, known, ignored, NULL, FALSE);
  read_bool (l, o, section, "enabled", &s->bf16_enabled);
  read_bool (l, o, section, "check_grad_overflow", &s->check_grad_overflow);
  read_bool (l, o, section, "bf16_master_weights_and_grads", &s->bf16_master_weights_and_grads);
  read_bool (l, o, section, "bf16_optimizer_states", &s->bf16_optimizer_states);
}

static void
load_data_types (Loader     *l,
                 JsonObject *o)
{
  static const gchar *const known[] = { "grad_accum_dtype", NULL };

  if (o == NULL)
    return;
  check_members (l, o, "data_types", known, NULL, NULL, TRUE);
  if (read_dtype (l, o, "data_types", "grad_accum_dtype",
                  "gradient accumulation dtype", &l->s->grad_accum_dtype))
    l->grad_accum_set = TRUE;
}

static void
load_torch_autocast (Loader     *l,
                     JsonObject *o)
{
  static const gchar *const known[] = {
    "enabled", "dtype", "lower_precision_safe_modules", NULL
  };
  MixprecConfigSettings *s = l->s;
  MixprecDType dtype;

  if (o == NULL)
    return;
  check_members (l, o, "torch_autocast", known, NULL, NULL, FALSE);
  read_bool (l, o, "torch_autocast", "enabled", &s->autocast_enabled);
  if (read_dtype (l, o, "torch_autocast", "dtype", "autocast dtype", &dtype))
    {
      if (dtype == MIXPREC_DTYPE_FLOAT32)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                      "torch_autocast.dtype: must be fp16 or bf16, got \"%s\": "
                                      "autocast to fp32 is plain fp32 training; disable "
                                      "torch_autocast instead",
                                      json_object_get_string_member (o, "dtype"));
      else
        s->autocast_dtype = dtype;
    }
  read_strv (l, o, "torch_autocast", "lower_precision_safe_modules", TRUE,
             "an array of module type names such as [\"Linear\", \"Conv2d\"]",
             &s->lower_precision_safe_modules);
}

/* A ZeRO-3 size DeepSpeed reads under two names: the stage3_ key its
 * documentation uses, and @alias, the same name without the prefix
 * (runtime/zero/config.py). Both are read so that each bad value is
 * reported; a file that writes both is refused rather than one silently
 * winning. */
static void
read_stage3_elements (Loader      *l,
                      JsonObject  *o,
                      const gchar *alias,
                      guint64     *out)
{
  g_autofree gchar *key = g_strconcat ("stage3_", alias, NULL);
  gint64 i;

  if (json_object_has_member (o, key) && json_object_has_member (o, alias))
    {
      g_autofree gchar *alias_path = _mixprec_json_join_path ("zero_optimization", alias);
      g_autofree gchar *key_path = _mixprec_json_join_path ("zero_optimization", key);

      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                    "%s: the same setting as %s; give only one",
                                    alias_path, key_path);
    }
  if (read_int (l, o, "zero_optimization", key, 0, G_MAXINT64, FALSE,
                "a non-negative number of elements", &i))
    *out = (guint64) i;
  if (read_int (l, o, "zero_optimization", alias, 0, G_MAXINT64, FALSE,
                "a non-negative number of elements", &i))
    *out = (guint64) i;
}

/* zero_optimization.zeropp_loco_param: null (off) or LoCo's error
 * feedback for qgZ, {"err_beta": in [0, 1], "reset_T": steps >= 1}, each
 * defaulting as DeepSpeed documents (0.8, 1024). */
static void
load_loco (Loader     *l,
           JsonObject *zero)
{
  static const gchar *const known[] = { "err_beta", "reset_T", NULL };
  MixprecConfigSettings *s = l->s;
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, zero, "zero_optimization", "zeropp_loco_param", &path);
  gint64 t;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      report_invalid (l, path, "null, or a JSON object such as {\"err_beta\": 0.8, "
                      "\"reset_T\": 1024}", node);
      return;
    }
  check_members (l, json_node_get_object (node), path, known, NULL, NULL, FALSE);
  s->zeropp_loco = TRUE;
  read_number (l, json_node_get_object (node), path, "err_beta", 0, CLOSED, 1, CLOSED,
               "a number from 0 to 1", &s->zeropp_loco_err_beta);
  if (read_int (l, json_node_get_object (node), path, "reset_T", 1, G_MAXINT32, FALSE,
                "a positive number of optimizer steps", &t))
    s->zeropp_loco_reset_t = (guint) t;
  if (!s->zero_quantized_gradients)
    _mixprec_config_report_warning (l->report,
                                    "%s: has no effect without zero_optimization."
                                    "zero_quantized_gradients: LoCo feeds back the error of "
                                    "quantized gradients", path);
}

/* DeepSpeed's deprecated boolean @key of zero_optimization (cpu_offload,
 * cpu_offload_param): TRUE when it asks for host memory, which it then
 * records in @device and @device_path. */
static gboolean
load_offload_legacy (Loader       *l,
                     JsonObject   *zero,
                     const gchar  *key,
                     guint        *device,
                     gchar       **device_path)
{
  gboolean on = FALSE;

  if (!json_object_has_member (zero, key) ||
      !read_bool (l, zero, "zero_optimization", key, &on) || !on)
    return FALSE;
  *device = _MIXPREC_OFFLOAD_CPU;
  g_free (*device_path);
  *device_path = g_strdup_printf ("zero_optimization.%s", key);
  return TRUE;
}

/* The object zero_optimization.@key (offload_optimizer, offload_param):
 * its device and pin_memory, @ignored naming the members that serve "nvme"
 * only. @legacy_key is the deprecated boolean, a conflict when @legacy_on;
 * @what is what host memory would keep, for the "nvme" message. */
static void
load_offload_object (Loader           *l,
                     JsonObject       *zero,
                     const gchar      *key,
                     const IgnoredKey *ignored,
                     const gchar      *legacy_key,
                     gboolean          legacy_on,
                     const gchar      *what,
                     guint            *device,
                     gchar           **device_path,
                     gboolean         *pin_memory)
{
  static const gchar *const known[] = { "device", "pin_memory", NULL };
  static const gchar *const devices[] = { "none", "cpu", "nvme", NULL };
  g_autofree gchar *path = NULL;
  JsonNode *node;

  node = lookup (l, zero, "zero_optimization", key, &path);
  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      report_invalid (l, path, "a JSON object such as {\"device\": \"cpu\"}", node);
      return;
    }
  if (legacy_on)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "zero_optimization.%s: the same setting as %s; give only one",
                                  legacy_key, path);
  check_members (l, json_node_get_object (node), path, known, ignored,
                 "a DeepSpeed offload setting libmixprec does not implement", FALSE);
  if (json_object_has_member (json_node_get_object (node), "device"))
    {
      guint d = 0;

      if (read_choice (l, json_node_get_object (node), path, "device", devices, &d))
        {
          if (d == _MIXPREC_OFFLOAD_NVME)
            _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                          "%s.device: \"nvme\" (ZeRO-Infinity) is not implemented; "
                                          "use \"cpu\" to keep %s in host memory", path, what);
          else
            *device = d;
        }
    }
  read_bool (l, json_node_get_object (node), path, "pin_memory", pin_memory);
  if (*device != _MIXPREC_OFFLOAD_NONE)
    {
      g_free (*device_path);
      *device_path = g_steal_pointer (&path);
    }
}

/* zero_optimization.offload_optimizer (and DeepSpeed's deprecated
 * cpu_offload / cpu_offload_use_pin_memory): where the FP32 masters and the
 * optimizer state live. Whether "cpu" changes anything depends on
 * mixprec.device, read later: resolve_offload() says so. */
static void
load_offload_optimizer (Loader     *l,
                        JsonObject *zero)
{
  /* DeepSpeedZeroOffloadOptimizerConfig's other fields serve "nvme" only,
   * except ratio (partial offload). */
  static const IgnoredKey ignored[] = {
    { "nvme_path", "null", NULL },
    { "buffer_count", "4", NULL },
    { "pipeline_read", "false", NULL },
    { "pipeline_write", "false", NULL },
    { "pipeline", "false", NULL },
    { "fast_init", "false", NULL },
    { "ratio", "1.0", "partial optimizer offload is not implemented; all of it is offloaded" },
    { NULL, NULL, NULL }
  };
  MixprecConfigSettings *s = l->s;
  gboolean on = load_offload_legacy (l, zero, "cpu_offload", &s->offload_optimizer, &s->offload_path);

  if (json_object_has_member (zero, "cpu_offload_use_pin_memory"))
    read_bool (l, zero, "zero_optimization", "cpu_offload_use_pin_memory", &s->offload_pin_memory);
  load_offload_object (l, zero, "offload_optimizer", ignored, "cpu_offload", on, "the optimizer",
                       &s->offload_optimizer, &s->offload_path, &s->offload_pin_memory);
}

/* zero_optimization.offload_param (and DeepSpeed's deprecated
 * cpu_offload_param): ZeRO-3's partitioned working copies in host memory
 * between gathers. Whether it applies depends on the stage, the device and
 * offload_optimizer, read later: resolve_offload() says so. */
static void
load_offload_param (Loader     *l,
                    JsonObject *zero)
{
  /* DeepSpeedZeroOffloadParamConfig's other fields serve "nvme" only. */
  static const IgnoredKey ignored[] = {
    { "nvme_path", "null", NULL },
    { "buffer_count", "5", NULL },
    { "buffer_size", "100000000", NULL },
    { "max_in_cpu", "1000000000", NULL },
    { NULL, NULL, NULL }
  };
  MixprecConfigSettings *s = l->s;
  gboolean on = load_offload_legacy (l, zero, "cpu_offload_param", &s->offload_param,
                                     &s->offload_param_path);

  load_offload_object (l, zero, "offload_param", ignored, "cpu_offload_param", on, "the parameters",
                       &s->offload_param, &s->offload_param_path, &s->offload_param_pin_memory);
}

static void
load_zero (Loader     *l,
           JsonObject *root)
{
  static const gchar *const known[] = {
    "stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm",
    "contiguous_gradients",
    "stage3_prefetch_bucket_size", "prefetch_bucket_size",
    "stage3_param_persistence_threshold", "param_persistence_threshold",
    "stage3_max_live_parameters", "max_live_parameters",
    "offload_optimizer", "cpu_offload", "cpu_offload_use_pin_memory",
    "offload_param", "cpu_offload_param",
    "zero_quantized_weights", "zero_hpz_partition_size", "zero_quantized_gradients",
    "zeropp_loco_param", NULL
  };
  /* Real DeepSpeed keys (runtime/zero/config.py): accepted so that real
   * configurations load, reported when they ask for something. */
  static const IgnoredKey ignored[] = {
    { "reduce_scatter", "true", "libmixprec always reduce-scatters gradients under ZeRO-2/3" },
    { "allgather_partitions", "true", "libmixprec always all-gathers the updated partitions" },
    { "use_multi_rank_bucket_allreduce", "true", NULL },
    { "load_from_fp32_weights", "true", "libmixprec checkpoints always hold the FP32 masters" },
    { "elastic_checkpoint", "false", NULL },
    { "zenflow", "null", NULL },
    { "sub_group_size", "1000000000", NULL },
    { "model_persistence_threshold", "9223372036854775807", NULL },
    { "stage3_model_persistence_threshold", "9223372036854775807", NULL },
    { "max_reuse_distance", "1000000000", NULL },
    { "stage3_max_reuse_distance", "1000000000", NULL },
    { "gather_16bit_weights_on_model_save", "false", NULL },
    { "stage3_gather_16bit_weights_on_model_save", "false", NULL },
    { "stage3_gather_fp16_weights_on_model_save", "false", NULL },
    { "module_granularity_threshold", "0", NULL },
    { "stage3_module_granularity_threshold", "0", NULL },
    { "use_all_reduce_for_fetch_params", "false", NULL },
    { "stage3_use_all_reduce_for_fetch_params", "false", NULL },
    { "allgather_sequential", "false", NULL },
    { "stage3_allgather_sequential", "false", NULL },
    { "partition_stream_chunk_size", "0", NULL },
    { "stage3_partition_stream_chunk_size", "0", NULL },
    { "ignore_unused_parameters", "true", NULL },
    { "legacy_stage1", "false", NULL },
    { "round_robin_gradients", "false", NULL },
    { "zero_quantized_nontrainable_weights", "false", NULL },
    { "mics_shard_size", "-1", NULL },
    { "mics_hierarchical_params_gather", "false", NULL },
    { "memory_efficient_linear", "true", NULL },
    { "pipeline_loading_checkpoint", "false", NULL },
    { "override_module_apply", "true", NULL },
    { "log_trace_cache_warnings", "false", NULL },
    { "enable_sanity_checks", "false", NULL },
    { "save_muon_momentum_buffer_in_memory", "false", NULL },
    { "leaf_module", NULL, NULL },
    { NULL, NULL, NULL }
  };
  MixprecConfigSettings *s = l->s;
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, root, "", "zero_optimization", &path);
  JsonNode *overlap;
  JsonObject *o;
  gint64 i;

  if (node == NULL)
    return;
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_BOOLEAN)
    {
      /* DeepSpeed's oldest form: true means stage 1. */
      s->zero_stage = json_node_get_boolean (node) ? 1 : 0;
      _mixprec_config_report_warning (l->report,
                                      "zero_optimization: the boolean form is deprecated in "
                                      "DeepSpeed; read as {\"stage\": %u}", s->zero_stage);
      return;
    }
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      report_invalid (l, path, "a JSON object", node);
      return;
    }
  o = json_node_get_object (node);
  check_members (l, o, "zero_optimization", known, ignored,
                 "a DeepSpeed ZeRO setting libmixprec does not implement", FALSE);
  if (read_int (l, o, "zero_optimization", "stage", 0, 3, FALSE,
                "an integer from 0 to 3", &i))
    s->zero_stage = (guint) i;
  /* DeepSpeed declares both ge=0. The engine stages at least
   * world * 4096 elements per slot, so 0 asks for the smallest staging. */
  if (read_int (l, o, "zero_optimization", "reduce_bucket_size", 0, G_MAXINT64, FALSE,
                "a non-negative number of elements", &i))
    s->reduce_bucket_size = (guint64) i;
  if (read_int (l, o, "zero_optimization", "allgather_bucket_size", 0, G_MAXINT64, FALSE,
                "a non-negative number of elements", &i))
    s->allgather_bucket_size = (guint64) i;
  /* null keeps DeepSpeed's dynamic default, as an absent key does. */
  overlap = json_object_get_member (o, "overlap_comm");
  if (overlap != NULL && !JSON_NODE_HOLDS_NULL (overlap))
    l->overlap_comm_set = read_bool (l, o, "zero_optimization", "overlap_comm", &s->overlap_comm);
  read_bool (l, o, "zero_optimization", "contiguous_gradients", &s->contiguous_gradients);
  read_stage3_elements (l, o, "prefetch_bucket_size", &s->prefetch_bucket_size);
  read_stage3_elements (l, o, "param_persistence_threshold", &s->param_persistence_threshold);
  read_stage3_elements (l, o, "max_live_parameters", &s->max_live_parameters);
  /* ZeRO++ qwZ: only ZeRO-3 gathers weights; DeepSpeed ignores the key
   * below it, and so does the engine, saying so. */
  if (read_bool (l, o, "zero_optimization", "zero_quantized_weights", &s->zero_quantized_weights) &&
      s->zero_quantized_weights && s->zero_stage < 3)
    _mixprec_config_report_warning (l->report,
                                    "zero_optimization.zero_quantized_weights: has no effect at "
                                    "stage %u: only ZeRO-3 gathers the weights it quantizes",
                                    s->zero_stage);
  /* ZeRO++ qgZ: DeepSpeed reads the key in its ZeRO-3 optimizer only. */
  if (read_bool (l, o, "zero_optimization", "zero_quantized_gradients",
                 &s->zero_quantized_gradients) &&
      s->zero_quantized_gradients && s->zero_stage < 3)
    _mixprec_config_report_warning (l->report,
                                    "zero_optimization.zero_quantized_gradients: has no effect "
                                    "at stage %u: DeepSpeed quantizes the reduce-scatters of "
                                    "ZeRO-3 only", s->zero_stage);
  load_loco (l, o);
  /* ZeRO++ hpZ: DeepSpeed declares ge=0; above 1 it asks for a secondary
   * partition over groups of that many ranks, which the engine checks
   * against the world size. */
  if (read_int (l, o, "zero_optimization", "zero_hpz_partition_size", 0, G_MAXUINT, FALSE,
                "a non-negative number of ranks", &i))
    {
      s->zero_hpz_partition_size = (guint) i;
      if (i > 1 && s->zero_stage < 3)
        _mixprec_config_report_warning (l->report,
                                        "zero_optimization.zero_hpz_partition_size: has no effect "
                                        "at stage %u: only ZeRO-3 gathers the weights it "
                                        "partitions", s->zero_stage);
    }
  load_offload_optimizer (l, o);
  load_offload_param (l, o);
}

/* "auto" anywhere in optimizer or scheduler params is an unfilled Hugging
 * Face placeholder: no optimizer can use it. */
static void
check_params_for_auto (Loader      *l,
                       JsonNode    *node,
                       GString     *path)
{
  gsize len = path->len;

  if (g_hash_table_contains (l->report->reported, path->str))
    return;
  if (_mixprec_json_is_auto (node))
    report_unresolved_auto (l, path->str, "an actual value");
  else if (JSON_NODE_HOLDS_OBJECT (node))
    {
      g_autoptr(GList) members = json_object_get_members (json_node_get_object (node));

      for (GList *m = members; m != NULL; m = m->next)
        {
          _mixprec_json_path_append_key (path, m->data);
          check_params_for_auto (l, json_object_get_member (json_node_get_object (node), m->data), path);
          g_string_truncate (path, len);
        }
    }
  else if (JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *array = json_node_get_array (node);

      for (guint i = 0; i < json_array_get_length (array); i++)
        {
          _mixprec_json_path_append_index (path, i);
          check_params_for_auto (l, json_array_get_element (array, i), path);
          g_string_truncate (path, len);
        }
    }
}

static void
load_typed_section (Loader      *l,
                    JsonObject  *o,
                    const gchar *section,
                    gchar      **type_out,
                    JsonObject **params_out)
{
  static const gchar *const known[] = { "type", "params", NULL };
  static const IgnoredKey ignored[] = {
    { "legacy_fusion", "false", "a legacy DeepSpeed switch with no counterpart" },
    { NULL, NULL, NULL }
  };
  const gchar *type = NULL;
  g_autofree gchar *path = NULL;
  g_autofree gchar *type_path = _mixprec_json_join_path (section, "type");
  JsonNode *params;

  if (o == NULL)
    return;
  check_members (l, o, section, known, g_str_equal (section, "optimizer") ? ignored : NULL, NULL,
                 TRUE);
  if (read_string (l, o, section, "type", FALSE, "a non-empty string naming the type, e.g. \"AdamW\"",
                   &type, NULL))
    *type_out = g_strdup (type);
  else if (!json_object_has_member (o, "type")
           && !g_hash_table_contains (l->report->reported, type_path))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                  "%s: missing; the section needs a \"type\" such as \"%s\"",
                                  type_path,
                                  g_str_equal (section, "optimizer") ? "AdamW" : "WarmupLR");

  params = lookup (l, o, section, "params", &path);
  if (params == NULL || JSON_NODE_HOLDS_NULL (params))
    *params_out = json_object_new ();
  else if (!JSON_NODE_HOLDS_OBJECT (params))
    {
      report_invalid (l, path, "a JSON object of parameters", params);
      *params_out = json_object_new ();
    }
  else
    {
      g_autoptr(GString) walk = g_string_new (path);
      JsonObject *p = json_node_get_object (params);

      check_params_for_auto (l, params, walk);
      if (g_str_equal (section, "optimizer") && json_object_has_member (p, "max_grad_norm"))
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                      "optimizer.params.max_grad_norm: not an optimizer parameter "
                                      "(DeepSpeed refuses it too); set the top-level "
                                      "\"gradient_clipping\" instead");
      *params_out = json_object_ref (p);
    }
  if (*type_out == NULL)
    g_clear_pointer (params_out, json_object_unref);
}

const gchar *const _mixprec_weight_decay_exempt_names[] = { "1d", "none", "names", NULL };
const gchar *const _mixprec_reduce_accumulation_names[] = { "grad_accum_dtype", "fp32", NULL };
/* mixprec.quantized_weights_format / quantized_gradients_format, in the
 * order of _MixprecZeroppFormat. */
const gchar *const _mixprec_zeropp_weights_format_names[] = { "int8", "fp8_e4m3", "fp8_e5m2", NULL };
const gchar *const _mixprec_zeropp_gradients_format_names[] = { "int4", "fp8_e4m3", "fp8_e5m2", NULL };

static const gchar *const semantics_names[] = {
  "deepspeed", "torch", "megatron", "apex", NULL
};

static void
load_scaler (Loader     *l,
             JsonObject *o)
{
  static const gchar *const known[] = {
    "semantics", "max_scale", "growth_factor", "backoff_factor", "raise_at_min_scale", NULL
  };
  MixprecConfigSettings *s = l->s;
  guint index;

  check_members (l, o, "mixprec.scaler", known, NULL, NULL, FALSE);
  if (read_choice (l, o, "mixprec.scaler", "semantics", semantics_names, &index))
    {
      s->semantics = (MixprecScalerSemantics) index;
      l->semantics_set = TRUE;
    }
  l->max_scale_set =
    read_number (l, o, "mixprec.scaler", "max_scale", 0, CLOSED, FLT_MAX, CLOSED,
                 "a number >= 0 (0 = no bound other than staying finite) no larger than 3.4e38",
                 &s->max_scale);
  read_number (l, o, "mixprec.scaler", "growth_factor", 1, OPEN, 65536, CLOSED,
               "a number > 1 and at most 65536", &s->growth_factor);
  read_number (l, o, "mixprec.scaler", "backoff_factor", 0, OPEN, 1, OPEN,
               "a number between 0 and 1, both excluded", &s->backoff_factor);
  l->raise_at_min_scale_set = read_bool (l, o, "mixprec.scaler", "raise_at_min_scale",
                                         &s->raise_at_min_scale);
}

static const gchar *const precision_mode_names[] = {
  "fp32", "fp16", "bf16", "bf16_no_master", "autocast", "fp16_no_master", NULL
};

/* ------------------------------------------------------------ representations */

/* mixprec.master_weights, in the order of MixprecMasterWeights; the
 * names of mixprec.optimizer_states are mixprec_state_format_get_name()'s. */
static const gchar *const master_weights_names[] = { "fp32", "remainder", "kahan", "none", NULL };

static gboolean
parse_state_format (Loader      *l,
                    const gchar *path,
                    JsonNode    *node,
                    MixprecStateFormat *out)
{
  if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_STRING)
    for (guint i = 0; i <= MIXPREC_STATE_FORMAT_INT4; i++)
      if (g_str_equal (json_node_get_string (node), mixprec_state_format_get_name ((MixprecStateFormat) i)))
        {
          *out = (MixprecStateFormat) i;
          return TRUE;
        }
  report_invalid (l, path, "one of \"fp32\", \"bf16\", \"fp16_scaled\", \"bf16_scaled\", "
                  "\"fp8_e4m3_scaled\", \"int8\", \"int4\"", node);
  return FALSE;
}

/* "optimizer_states": a format for every slot, or an object of slot names
 * (the optimizer's state_names; "default" for the slots not named) and
 * "block_size". The names are checked against the optimizer once it is
 * known (check_state_slots()). */
static void
load_optimizer_states (Loader     *l,
                       JsonObject *mixprec)
{
  MixprecConfigSettings *s = l->s;
  g_autofree gchar *path = NULL;
  g_autoptr(GPtrArray) names = NULL;
  g_autoptr(GList) members = NULL;
  JsonNode *node = lookup (l, mixprec, "mixprec", "optimizer_states", &path);
  MixprecStateFormat format;
  JsonObject *o;
  gint64 block;

  if (node == NULL)
    return;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      if (parse_state_format (l, path, node, &format))
        {
          l->optimizer_states_set = TRUE;
          s->state_format_default = format;
        }
      return;
    }
  o = json_node_get_object (node);
  l->optimizer_states_set = TRUE;
  names = g_ptr_array_new_with_free_func (g_free);
  members = json_object_get_members (o);
  for (GList *m = members; m != NULL; m = m->next)
    {
      const gchar *key = m->data;
      g_autofree gchar *key_path = _mixprec_json_join_path (path, key);

      if (g_str_equal (key, "block_size") || g_hash_table_contains (l->report->reported, key_path))
        continue;
      if (!parse_state_format (l, key_path, json_object_get_member (o, key), &format))
        continue;
      if (g_str_equal (key, "default"))
        {
          s->state_format_default = format;
          continue;
        }
      g_ptr_array_add (names, g_strdup (key));
      g_array_append_val (s->state_slot_formats, format);
    }
  g_ptr_array_add (names, NULL);
  g_strfreev (s->state_slot_names);
  s->state_slot_names = (GStrv) g_ptr_array_free (g_steal_pointer (&names), FALSE);
  if (read_int (l, o, path, "block_size", 32, 4096, FALSE,
                "a power of two from 32 to 4096", &block))
    {
      if ((block & (block - 1)) != 0)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                      "%s.block_size: must be a power of two from 32 to 4096, "
                                      "got %" G_GINT64_FORMAT, path, block);
      else
        s->state_block_size = (guint) block;
    }
}

static gboolean
format_is_scaled (MixprecStateFormat format)
{
  return format >= MIXPREC_STATE_FORMAT_FP16_SCALED;
}

/* After the mode: the master representation it allows, and the state
 * formats beside DeepSpeed's bf16_optimizer_states. */
static void
resolve_representation (Loader *l)
{
  MixprecConfigSettings *s = l->s;
  const gchar *mw = master_weights_names[s->master_weights];
  gboolean no_master = s->mode == MIXPREC_PRECISION_MODE_BF16_NO_MASTER ||
                       s->mode == MIXPREC_PRECISION_MODE_FP16_NO_MASTER;
  gboolean scaled = format_is_scaled (s->state_format_default);

  if (!l->master_weights_set)
    s->master_weights = no_master ? MIXPREC_MASTER_WEIGHTS_NONE : MIXPREC_MASTER_WEIGHTS_FP32;
  else if (s->master_weights == MIXPREC_MASTER_WEIGHTS_REMAINDER ||
           s->master_weights == MIXPREC_MASTER_WEIGHTS_KAHAN)
    {
      /* Both keep 16 bits beside a bfloat16 working copy. */
      if (!s->bf16_enabled || s->fp16_enabled)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.master_weights: \"%s\" needs bfloat16 working "
                                      "copies (bf16.enabled true), got precision mode \"%s\"",
                                      mw, precision_mode_names[s->mode]);
      else if (s->bf16_master_weights_and_grads)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.master_weights: \"%s\" keeps the FP32 value "
                                      "in 16 extra bits, but bf16.bf16_master_weights_and_grads "
                                      "asks for none; use \"master_weights\": \"none\" or drop "
                                      "one of them", mw);
      else if (s->stochastic_rounding)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.master_weights: \"%s\" rounds the working copy "
                                      "%s, not stochastically; mixprec.stochastic_rounding must "
                                      "be false", mw,
                                      s->master_weights == MIXPREC_MASTER_WEIGHTS_REMAINDER
                                      ? "to nearest from the exact FP32 value"
                                      : "to nearest and carries the error");
      else if (s->offload_optimizer == _MIXPREC_OFFLOAD_CPU && !g_str_equal (s->device, "cpu"))
        /* The offloaded step would need the working copies it reads
         * brought down as well as sent up. */
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                      "mixprec.master_weights: \"%s\" cannot be combined with "
                                      "zero_optimization.offload_optimizer \"cpu\" on device "
                                      "\"%s\": the step reads the bf16 working copies, which stay "
                                      "in device memory; use \"fp32\" masters to offload", mw,
                                      s->device);
      else
        /* The parameters have no FP32 master buffer: the extra 16 bits
         * stand in for it. */
        s->mode = MIXPREC_PRECISION_MODE_BF16_NO_MASTER;
    }
  else if (s->master_weights == MIXPREC_MASTER_WEIGHTS_NONE)
    {
      if (s->bf16_enabled && !s->fp16_enabled)
        s->mode = MIXPREC_PRECISION_MODE_BF16_NO_MASTER;
      else if (s->fp16_enabled)
        s->mode = MIXPREC_PRECISION_MODE_FP16_NO_MASTER;
      else
        {
          _mixprec_config_report_warning (l->report,
                                          "mixprec.master_weights: \"none\" has no effect in "
                                          "precision mode \"%s\", whose parameters are FP32; "
                                          "ignored", precision_mode_names[s->mode]);
          s->master_weights = MIXPREC_MASTER_WEIGHTS_FP32;
        }
    }
  else if (no_master)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "mixprec.master_weights: \"fp32\" keeps an FP32 master, but "
                                  "%s asks for none",
                                  s->mode == MIXPREC_PRECISION_MODE_BF16_NO_MASTER
                                  ? "bf16.bf16_master_weights_and_grads"
                                  : "the fp16 settings (fp16_master_weights_and_grads, or Apex "
                                    "without masters)");

  /* DeepSpeed's key means every slot in bfloat16; the mixprec key may
   * say the same, and nothing else. */
  if (s->optimizer_state_dtype == MIXPREC_DTYPE_BFLOAT16)
    {
      gboolean agree = s->state_format_default == MIXPREC_STATE_FORMAT_BF16 || !l->optimizer_states_set;

      for (guint i = 0; i < s->state_slot_formats->len; i++)
        agree = agree && g_array_index (s->state_slot_formats, MixprecStateFormat, i) ==
                         MIXPREC_STATE_FORMAT_BF16;
      if (!agree)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.optimizer_states: conflicts with "
                                      "bf16.bf16_optimizer_states, which keeps every slot in "
                                      "\"bf16\"; set one of them");
      s->state_format_default = MIXPREC_STATE_FORMAT_BF16;
      for (guint i = 0; i < s->state_slot_formats->len; i++)
        g_array_index (s->state_slot_formats, MixprecStateFormat, i) = MIXPREC_STATE_FORMAT_BF16;
    }
  for (guint i = 0; i < s->state_slot_formats->len; i++)
    scaled = scaled || format_is_scaled (g_array_index (s->state_slot_formats, MixprecStateFormat, i));
  if (l->optimizer_states_set && s->state_format_default == MIXPREC_STATE_FORMAT_BF16)
    {
      gboolean all_bf16 = TRUE;

      for (guint i = 0; i < s->state_slot_formats->len; i++)
        all_bf16 = all_bf16 && g_array_index (s->state_slot_formats, MixprecStateFormat, i) ==
                               MIXPREC_STATE_FORMAT_BF16;
      if (all_bf16)
        s->optimizer_state_dtype = MIXPREC_DTYPE_BFLOAT16;
    }
  if (s->state_block_size != 0 && !scaled)
    _mixprec_config_report_warning (l->report,
                                    "mixprec.optimizer_states.block_size: has no effect without "
                                    "a scaled or quantized slot format; ignored");
}

/* Once the optimizer is known: every slot named in optimizer_states is
 * one of its state slots. */
static void
check_state_slots (Loader         *l,
                   MixprecFeature *feature)
{
  MixprecConfigSettings *s = l->s;
  const gchar * const *slots = mixprec_feature_get_state_names (feature);

  for (guint i = 0; s->state_slot_names[i] != NULL; i++)
    if (slots == NULL || !g_strv_contains (slots, s->state_slot_names[i]))
      {
        g_autofree gchar *list = slots != NULL && slots[0] != NULL
                                 ? g_strjoinv (", ", (gchar **) slots) : g_strdup ("none");

        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                      "mixprec.optimizer_states.%s: optimizer \"%s\" has no "
                                      "state slot of that name; its slots are %s",
                                      s->state_slot_names[i], mixprec_feature_get_name (feature),
                                      list);
      }
}

/* "numerics": per-tensor statistics of gradients and updates (see
 * mixprec-engine-numerics.c), measured every "every" steps; 0 is off. */
static void
load_numerics (Loader     *l,
               JsonObject *mixprec)
{
  static const gchar *const known[] = { "every", "shadow", "shadow_fraction", NULL };
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, mixprec, "mixprec", "numerics", &path);
  MixprecConfigSettings *s = l->s;
  JsonObject *o;
  gint64 every;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      report_invalid (l, path, "a JSON object such as {\"every\": 100}", node);
      return;
    }
  o = json_node_get_object (node);
  check_members (l, o, path, known, NULL, NULL, FALSE);
  if (read_int (l, o, path, "every", 0, G_MAXINT64, FALSE,
                "a non-negative integer (steps between measurements; 0: off)", &every))
    s->numerics_every = (guint64) every;
  read_strv (l, o, path, "shadow", FALSE,
             "an array of parameter names or glob patterns such as [\"*.attn.weight\"]",
             &s->numerics_shadow);
  read_number (l, o, path, "shadow_fraction", 0.0, CLOSED, 1.0, CLOSED, "a number from 0 to 1",
               &s->numerics_shadow_fraction);
  /* The shadow is what the drift is measured against, at the measured
   * steps. */
  if (s->numerics_every == 0 &&
      ((s->numerics_shadow != NULL && s->numerics_shadow[0] != NULL) || s->numerics_shadow_fraction > 0))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.shadow: an FP32 shadow needs %s.every above 0, the steps "
                                  "that measure its drift", path, path);
}

/* "auto_precision": closed-loop precision from the measured numerics
 * (mixprec-engine-autoprec.c). */
static void
load_auto_precision (Loader     *l,
                     JsonObject *mixprec)
{
  static const gchar *const known[] = {
    "enabled", "watch", "widen_above", "widen_patience", "narrow_below", "narrow_patience",
    "max_widened_fraction", "widen_to", NULL
  };
  static const gchar *const stats[] = {
    "grad_underflow", "stale", "fp8_saturation", "fp8_underflow", NULL
  };
  static const gchar *const dtypes[] = { "fp16", "bf16", "fp32", NULL };
  static const MixprecDType dtype_values[] = {
    MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32
  };
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, mixprec, "mixprec", "auto_precision", &path);
  _MixprecAutoPrecSettings *a = &l->s->auto_precision;
  g_auto(GStrv) widen_to = NULL;
  JsonObject *o;
  gint64 n;

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      report_invalid (l, path, "a JSON object such as {\"enabled\": true}", node);
      return;
    }
  o = json_node_get_object (node);
  check_members (l, o, path, known, NULL, NULL, FALSE);
  /* A section present is on unless it says otherwise. */
  a->enabled = TRUE;
  read_bool (l, o, path, "enabled", &a->enabled);
  if (read_strv (l, o, path, "watch", FALSE,
                 "an array of statistics such as [\"grad_underflow\", \"fp8_saturation\"]",
                 &a->watch))
    {
      for (guint i = 0; a->watch[i] != NULL; i++)
        if (!g_strv_contains (stats, a->watch[i]))
          _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                        "%s.watch[%u]: must be one of \"grad_underflow\", "
                                        "\"stale\", \"fp8_saturation\", \"fp8_underflow\", "
                                        "got \"%s\"", path, i, a->watch[i]);
      if (a->watch[0] == NULL)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                      "%s.watch: must name at least one statistic, got []", path);
    }
  read_number (l, o, path, "widen_above", 0.0, CLOSED, 1.0, OPEN, "a fraction from 0 to below 1",
               &a->widen_above);
  if (read_int (l, o, path, "widen_patience", 1, G_MAXINT32, FALSE,
                "a positive integer (measured steps)", &n))
    a->widen_patience = (guint64) n;
  read_number (l, o, path, "narrow_below", 0.0, CLOSED, 1.0, CLOSED, "a fraction from 0 to 1",
               &a->narrow_below);
  if (read_int (l, o, path, "narrow_patience", 0, G_MAXINT32, FALSE,
                "a non-negative integer (measured steps; 0: never narrow)", &n))
    a->narrow_patience = (guint64) n;
  read_number (l, o, path, "max_widened_fraction", 0.0, CLOSED, 1.0, CLOSED,
               "a fraction from 0 to 1", &a->max_widened_fraction);
  if (read_strv (l, o, path, "widen_to", FALSE, "an array of dtypes such as [\"bf16\", \"fp32\"]",
                 &widen_to))
    {
      a->widen_to = 0;
      for (guint i = 0; widen_to[i] != NULL; i++)
        {
          guint k;

          for (k = 0; dtypes[k] != NULL && !g_str_equal (dtypes[k], widen_to[i]); k++)
            ;
          if (dtypes[k] == NULL)
            _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                          "%s.widen_to[%u]: must be one of \"fp16\", \"bf16\", "
                                          "\"fp32\", got \"%s\"", path, i, widen_to[i]);
          else
            a->widen_to |= 1u << dtype_values[k];
        }
    }
  if (!a->enabled)
    return;
  if (a->narrow_below >= a->widen_above)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.narrow_below: must be below %s.widen_above (%g), got %g: "
                                  "the gap between them is the hysteresis", path, path,
                                  a->widen_above, a->narrow_below);
  if (a->narrow_patience != 0 && a->narrow_patience < a->widen_patience)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.narrow_patience: must be 0 (never narrow) or at least "
                                  "%s.widen_patience (%" G_GUINT64_FORMAT "), got %" G_GUINT64_FORMAT,
                                  path, path, a->widen_patience, a->narrow_patience);
  /* The decisions are taken from the measured steps' statistics. */
  if (l->s->numerics_every == 0)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s: needs mixprec.numerics.every above 0, the steps whose "
                                  "statistics it decides from; got %s.every 0 (or no "
                                  "mixprec.numerics)", path, "mixprec.numerics");
}

static void
load_mixprec (Loader     *l,
              JsonObject *o)
{
  static const gchar *const known[] = {
    "precision_mode", "fp32_modules", "fp32_params", "stochastic_rounding", "seed",
    "scaler", "comm", "device", "strict", "weight_decay_exempt", "check_grad_overflow",
    "timeout", "require_job_secret", "master_weights", "optimizer_states",
    "reduce_accumulation", "numerics", "auto_precision", "quantized_weights_format",
    "quantized_gradients_format", NULL
  };
  static const gchar *const comms[] = { "auto", "local", "ucx", "nccl", NULL };
  static const gchar *const devices[] = { "cpu", "cuda", NULL };
  MixprecConfigSettings *s = l->s;
  g_autofree gchar *path = NULL;
  JsonNode *scaler;
  guint index;
  gint64 seed;

  if (o == NULL)
    return;
  check_members (l, o, "mixprec", known, NULL, NULL, FALSE);
  if (read_choice (l, o, "mixprec", "precision_mode", precision_mode_names, &index))
    {
      l->precision_mode_set = TRUE;
      l->precision_mode_asserted = (MixprecPrecisionMode) index;
    }
  read_strv (l, o, "mixprec", "fp32_modules", FALSE,
             "an array of module type names such as [\"LayerNorm\"]", &s->fp32_modules);
  read_strv (l, o, "mixprec", "fp32_params", FALSE,
             "an array of parameter names or glob patterns such as [\"*.norm.weight\"]",
             &s->fp32_params);
  read_bool (l, o, "mixprec", "stochastic_rounding", &s->stochastic_rounding);
  read_bool (l, o, "mixprec", "strict", &s->strict);
  read_bool (l, o, "mixprec", "check_grad_overflow", &s->fp32_check_grad_overflow);
  read_bool (l, o, "mixprec", "require_job_secret", &s->require_job_secret);
  if (read_choice (l, o, "mixprec", "weight_decay_exempt", _mixprec_weight_decay_exempt_names,
                   &index))
    s->weight_decay_exempt = index;
  if (read_int (l, o, "mixprec", "seed", 0, G_MAXINT64, FALSE,
                "an integer from 0 to 9223372036854775807", &seed))
    s->seed = (guint64) seed;
  scaler = lookup (l, o, "mixprec", "scaler", &path);
  if (scaler != NULL)
    {
      if (JSON_NODE_HOLDS_OBJECT (scaler))
        load_scaler (l, json_node_get_object (scaler));
      else
        report_invalid (l, path, "a JSON object", scaler);
    }
  if (read_choice (l, o, "mixprec", "reduce_accumulation", _mixprec_reduce_accumulation_names,
                   &index))
    s->reduce_fp32 = index == 1;
  if (read_choice (l, o, "mixprec", "quantized_weights_format", _mixprec_zeropp_weights_format_names,
                   &index))
    s->zeropp_weights_format = index;
  if (read_choice (l, o, "mixprec", "quantized_gradients_format", _mixprec_zeropp_gradients_format_names,
                   &index))
    s->zeropp_gradients_format = index;
  if (read_choice (l, o, "mixprec", "comm", comms, &index))
    {
      g_free (s->comm_backend);
      s->comm_backend = g_strdup (comms[index]);
    }
  read_number (l, o, "mixprec", "timeout", 0.001, CLOSED, (gdouble) (G_MAXUINT / 1000), CLOSED,
               "a number of seconds from 0.001 to 4294967", &s->timeout);
  if (read_choice (l, o, "mixprec", "device", devices, &index))
    {
      g_free (s->device);
      s->device = g_strdup (devices[index]);
    }
  if (read_choice (l, o, "mixprec", "master_weights", master_weights_names, &index))
    {
      l->master_weights_set = TRUE;
      s->master_weights = (MixprecMasterWeights) index;
    }
  load_optimizer_states (l, o);
  load_numerics (l, o);
  load_auto_precision (l, o);
}

/* ------------------------------------------------------------ monitors */

const gchar *const _mixprec_monitor_sections[] = { "csv_monitor", "tensorboard", NULL };

/* A string that may be empty (output_path "" is DeepSpeed's default: the
 * current folder); null keeps the default. */
static void
read_monitor_string (Loader      *l,
                     JsonObject  *o,
                     const gchar *section,
                     const gchar *key,
                     gchar      **out)
{
  g_autofree gchar *path = NULL;
  JsonNode *node = lookup (l, o, section, key, &path);

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING
      || _mixprec_json_is_auto (node))
    {
      report_invalid (l, path, "a string (a folder name; \"\" is the current folder)", node);
      return;
    }
  g_free (*out);
  *out = g_strdup (json_node_get_string (node));
}

/* csv_monitor and tensorboard: DeepSpeed's three keys, checked strictly
 * (its own model of these sections refuses unknown keys too). */
static void
load_monitor (Loader             *l,
              JsonObject         *root,
              _MixprecMonitorKind kind)
{
  static const gchar *const known[] = { "enabled", "output_path", "job_name", NULL };
  const gchar *section = _mixprec_monitor_sections[kind];
  JsonObject *o = section_object (l, root, section, TRUE);
  MixprecConfigSettings *s = l->s;

  if (o == NULL)
    return;
  check_members (l, o, section, known, NULL, NULL, FALSE);
  read_bool (l, o, section, "enabled", &s->monitor_enabled[kind]);
  read_monitor_string (l, o, section, "output_path", &s->monitor_output_path[kind]);
  read_monitor_string (l, o, section, "job_name", &s->monitor_job_name[kind]);
}

static void
load_monitors (Loader     *l,
               JsonObject *root)
{
  gint64 i;

  /* null: never, as DeepSpeed's newer releases default to. */
  /* Files set 1e10 to mean "hardly ever": any exact integer is taken. */
  if (read_int (l, root, "", "steps_per_print", 1, G_MAXINT64, TRUE,
                "a positive integer (or null: no progress messages)", &i))
    l->s->steps_per_print = (guint64) i;
  else if (json_object_has_member (root, "steps_per_print")
           && JSON_NODE_HOLDS_NULL (json_object_get_member (root, "steps_per_print")))
    l->s->steps_per_print = 0;
  load_monitor (l, root, _MIXPREC_MONITOR_CSV);
  load_monitor (l, root, _MIXPREC_MONITOR_TENSORBOARD);
}

/* ------------------------------------------------------------ fp8 */

/* In the order of the enumerations they name. */
static const gchar *const fp8_recipe_names[] = { "delayed", "current", "mx", NULL };
static const gchar *const fp8_format_names[] = { "hybrid", "e4m3", NULL };
static const gchar *const fp8_amax_algo_names[] = { "max", "most_recent", NULL };
/* MixprecMxScaleMode's order; fp8.mx_scale_mode and fp4.scale_mode. */
static const gchar *const mx_scale_mode_names[] = { "floor", "rceil", "ceil", "even", NULL };

/* A key the chosen recipe does not use, set to something other than its
 * default: most likely a recipe changed without its keys. */
static void
warn_fp8_unused (Loader      *l,
                 JsonObject  *o,
                 const gchar *key,
                 gboolean     is_default,
                 const gchar *used_by)
{
  if (!json_object_has_member (o, key) || is_default)
    return;
  _mixprec_config_report_warning (l->report,
                                  "fp8.%s: applies to %s only, and fp8.recipe is \"%s\"; "
                                  "ignored", key, used_by, fp8_recipe_names[l->s->fp8_recipe]);
}

/* fp8: FP8 working copies (see mixprec.json(5) and MixprecFp8Recipe). */
static void
load_fp8 (Loader     *l,
          JsonObject *o)
{
  static const gchar *const known[] = {
    "enabled", "recipe", "format", "amax_history_len", "amax_compute_algo", "margin",
    "mx_block_size", "mx_scale_mode", "saturate", "modules", NULL
  };
  MixprecConfigSettings *s = l->s;
  g_autofree gchar *rule = NULL;
  guint index;
  gint64 i;

  if (o == NULL)
    return;
  check_members (l, o, "fp8", known, NULL, NULL, FALSE);
  read_bool (l, o, "fp8", "enabled", &s->fp8_enabled);
  if (read_choice (l, o, "fp8", "recipe", fp8_recipe_names, &index))
    s->fp8_recipe = index;
  if (read_choice (l, o, "fp8", "format", fp8_format_names, &index))
    s->fp8_format = index;
  rule = g_strdup_printf ("an integer from 1 to %d", MIXPREC_FP8_MAX_AMAX_HISTORY_LEN);
  if (read_int (l, o, "fp8", "amax_history_len", 1, MIXPREC_FP8_MAX_AMAX_HISTORY_LEN, FALSE,
                rule, &i))
    s->fp8_amax_history_len = (guint) i;
  if (read_choice (l, o, "fp8", "amax_compute_algo", fp8_amax_algo_names, &index))
    s->fp8_amax_compute_algo = index;
  g_clear_pointer (&rule, g_free);
  rule = g_strdup_printf ("an integer from %d to %d (a power-of-two headroom)",
                          -MIXPREC_FP8_MAX_MARGIN, MIXPREC_FP8_MAX_MARGIN);
  if (read_int (l, o, "fp8", "margin", -MIXPREC_FP8_MAX_MARGIN, MIXPREC_FP8_MAX_MARGIN, FALSE,
                rule, &i))
    s->fp8_margin = (gint) i;
  if (read_int (l, o, "fp8", "mx_block_size", MIXPREC_FP8_MX_BLOCK_SIZE,
                MIXPREC_FP8_MX_BLOCK_SIZE, FALSE,
                "32 (the block size of the OCP MX formats)", &i))
    s->fp8_mx_block_size = (guint) i;
  if (read_choice (l, o, "fp8", "mx_scale_mode", mx_scale_mode_names, &index))
    s->fp8_mx_scale_mode = index;
  read_bool (l, o, "fp8", "saturate", &s->fp8_saturate);
  read_strv (l, o, "fp8", "modules", FALSE,
             "an array of module type names such as [\"Linear\"]", &s->fp8_modules);

  if (s->fp8_recipe != MIXPREC_FP8_RECIPE_DELAYED)
    {
      warn_fp8_unused (l, o, "amax_history_len", s->fp8_amax_history_len == 1024,
                       "the \"delayed\" recipe");
      warn_fp8_unused (l, o, "amax_compute_algo", s->fp8_amax_compute_algo == MIXPREC_FP8_AMAX_MAX,
                       "the \"delayed\" recipe");
    }
  if (s->fp8_recipe == MIXPREC_FP8_RECIPE_MX)
    warn_fp8_unused (l, o, "margin", s->fp8_margin == 0,
                     "the \"delayed\" and \"current\" recipes");
  else
    warn_fp8_unused (l, o, "mx_scale_mode", s->fp8_mx_scale_mode == MIXPREC_MX_SCALE_FLOOR,
                     "the \"mx\" recipe");
}

/* After every section: the recipe the settings describe, and module types
 * that cannot be both FP8 and FP32. */
static void
resolve_fp8 (Loader *l)
{
  MixprecConfigSettings *s = l->s;
  g_autoptr(GError) error = NULL;

  if (!s->fp8_enabled)
    return;

  for (guint i = 0; s->fp8_modules[i] != NULL; i++)
    for (guint j = 0; s->fp32_modules[j] != NULL; j++)
      if (_mixprec_module_type_matches (s->fp8_modules[i], s->fp32_modules[j]))
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "fp8.modules[%u]: \"%s\" is also listed in "
                                      "mixprec.fp32_modules; a module type is either kept in "
                                      "FP32 or given FP8 working copies, not both (to keep "
                                      "single parameters out of FP8, list them in "
                                      "mixprec.fp32_params)", i, s->fp8_modules[i]);

  s->fp8_recipe_object = _mixprec_fp8_recipe_new_full (s->fp8_recipe, s->fp8_format,
                                                       s->fp8_amax_history_len,
                                                       s->fp8_amax_compute_algo, s->fp8_margin,
                                                       s->fp8_mx_block_size, s->fp8_saturate,
                                                       s->fp8_mx_scale_mode, &error);
  if (s->fp8_recipe_object == NULL)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                  "fp8: %s", error->message);
}

/* ------------------------------------------------------------ fp4 */

/* In the order of the choices (the recipe's index is not the enum's). */
static const gchar *const fp4_recipe_names[] = { "nvfp4", "mxfp4", NULL };

/* fp4: 4-bit working copies (see mixprec.json(5), the fp4 section). */
static void
load_fp4 (Loader     *l,
          JsonObject *o)
{
  static const gchar *const known[] = {
    "enabled", "recipe", "weights_2d", "scale_mode", "rht", "rht_seed", "modules",
    "exclude_params", NULL
  };
  MixprecConfigSettings *s = l->s;
  guint index;
  gint64 i;

  if (o == NULL)
    return;
  check_members (l, o, "fp4", known, NULL, NULL, FALSE);
  read_bool (l, o, "fp4", "enabled", &s->fp4_enabled);
  if (read_choice (l, o, "fp4", "recipe", fp4_recipe_names, &index))
    s->fp4_recipe = index == 0 ? MIXPREC_BLOCK_RECIPE_NVFP4 : MIXPREC_BLOCK_RECIPE_MXFP4;
  read_bool (l, o, "fp4", "weights_2d", &s->fp4_weights_2d);
  if (read_choice (l, o, "fp4", "scale_mode", mx_scale_mode_names, &index))
    s->fp4_scale_mode = index;
  read_bool (l, o, "fp4", "rht", &s->fp4_rht);
  if (read_int (l, o, "fp4", "rht_seed", 0, G_MAXINT64, FALSE,
                "a non-negative integer (the seed of the random signs every rank derives)", &i))
    s->fp4_rht_seed = (guint64) i;
  read_strv (l, o, "fp4", "modules", FALSE,
             "an array of module type names such as [\"Linear\"]", &s->fp4_modules);
  read_strv (l, o, "fp4", "exclude_params", FALSE,
             "an array of parameter name patterns such as [\"lm_head.*\"]",
             &s->fp4_exclude_params);

  /* Keys the recipe does not read, set away from their defaults. */
  if (s->fp4_recipe == MIXPREC_BLOCK_RECIPE_NVFP4 && json_object_has_member (o, "scale_mode") &&
      s->fp4_scale_mode != MIXPREC_MX_SCALE_FLOOR)
    _mixprec_config_report_warning (l->report,
                                    "fp4.scale_mode: applies to the \"mxfp4\" recipe only, and "
                                    "fp4.recipe is \"nvfp4\" (its block scales are E4M3); ignored");
  if (s->fp4_recipe == MIXPREC_BLOCK_RECIPE_MXFP4 && json_object_has_member (o, "weights_2d") &&
      !s->fp4_weights_2d)
    _mixprec_config_report_warning (l->report,
                                    "fp4.weights_2d: applies to the \"nvfp4\" recipe only, and "
                                    "fp4.recipe is \"mxfp4\" (its blocks are 32 elements of a "
                                    "row); ignored");
}

/* After every section: module types cannot be both FP4 and FP32, or both
 * FP4 and FP8. */
static void
resolve_fp4 (Loader *l)
{
  MixprecConfigSettings *s = l->s;

  if (!s->fp4_enabled)
    return;
  for (guint i = 0; s->fp4_modules[i] != NULL; i++)
    {
      for (guint j = 0; s->fp32_modules[j] != NULL; j++)
        if (_mixprec_module_type_matches (s->fp4_modules[i], s->fp32_modules[j]))
          _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                        "fp4.modules[%u]: \"%s\" is also listed in "
                                        "mixprec.fp32_modules; a module type is either kept in "
                                        "FP32 or given 4-bit working copies, not both (to keep "
                                        "single parameters out of FP4, list them in "
                                        "fp4.exclude_params)", i, s->fp4_modules[i]);
      for (guint j = 0; s->fp8_enabled && s->fp8_modules[j] != NULL; j++)
        if (_mixprec_module_type_matches (s->fp4_modules[i], s->fp8_modules[j]))
          _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                        "fp4.modules[%u]: \"%s\" is also listed in fp8.modules "
                                        "(fp8.enabled is true); a module type gets FP8 or 4-bit "
                                        "working copies, not both", i, s->fp4_modules[i]);
    }
}

/* ------------------------------------------------------------ top level */

/* Top-level DeepSpeed sections for features outside libmixprec's scope:
 * accepted, so that real DeepSpeed files load, and named in a warning. */
static const gchar *const deepspeed_only_sections[] = {
  "activation_checkpointing", "aio", "autotuning", "checkpoint", "comet",
  "comms_logger", "compile", "compression_training",
  "curriculum_learning", "data_efficiency", "dataloader_drop_last",
  "disable_allgather", "dump_state", "eigenvalue", "elasticity", "flops_profiler",
  "gradient_predivide_factor", "graph_harvesting", "hybrid_engine",
  "load_universal_checkpoint", "memory_breakdown", "monitor_config", "nebula",
  "pipeline", "prescale_gradients", "progressive_layer_drop", "quantize_training",
  "seq_parallel_communication_data_type", "sequence_parallel_size",
  "sparse_attention", "sparse_gradients", "tensor_parallel",
  "timers", "use_data_before_expert_parallelism",
  "use_node_local_storage", "vocabulary_size", "wall_clock_breakdown", "wandb",
  "weight_quantization", "zero_allow_untested_optimizer",
  "zero_force_ds_cpu_optimizer", NULL
};

static const gchar *const top_level_keys[] = {
  "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
  "gradient_clipping", "communication_data_type", "fp16", "bf16", "bfloat16",
  "data_types", "torch_autocast", "zero_optimization", "optimizer", "scheduler",
  "mixprec", "amp", "colossalai", "steps_per_print", "csv_monitor", "tensorboard",
  "fp8", "fp4", NULL
};

/* TRUE when @o holds true at the path @keys (objects all the way). */
static gboolean
holds_true (JsonObject          *o,
            const gchar * const *keys)
{
  JsonNode *node = NULL;

  for (guint i = 0; keys[i] != NULL; i++)
    {
      if (o == NULL || (node = json_object_get_member (o, keys[i])) == NULL)
        return FALSE;
      o = JSON_NODE_HOLDS_OBJECT (node) ? json_node_get_object (node) : NULL;
    }
  return node != NULL && JSON_NODE_HOLDS_VALUE (node)
         && json_node_get_value_type (node) == G_TYPE_BOOLEAN && json_node_get_boolean (node);
}

/* MoQ, DeepSpeed's weight quantization in the optimizer step
 * (runtime/quantize.py): after every step the working weights are
 * quantized, which changes what training computes, so a file that asks
 * for it is refused rather than trained without it. DeepSpeed reads it
 * from compression_training's weight quantization when
 * quantize_weight_in_forward is false (its default), older releases from
 * quantize_training.enabled. Quantizing in the model's forward pass is
 * the model's business: those sections stay warnings. Returns TRUE when
 * @key asks for MoQ (reported). */
static gboolean
check_moq (Loader      *l,
           JsonObject  *root,
           const gchar *key)
{
  static const gchar *const legacy[] = { "quantize_training", "enabled", NULL };
  static const gchar *const weights[] = {
    "compression_training", "weight_quantization", "shared_parameters", "enabled", NULL
  };
  static const gchar *const in_forward[] = {
    "compression_training", "weight_quantization", "shared_parameters",
    "quantize_weight_in_forward", NULL
  };
  const gchar *const *asked;
  g_autoptr(GString) path = g_string_new (NULL);

  if (g_str_equal (key, legacy[0]) && holds_true (root, legacy))
    asked = legacy;
  else if (g_str_equal (key, weights[0]) && holds_true (root, weights)
           && !holds_true (root, in_forward))
    asked = weights;
  else
    return FALSE;
  for (guint i = 0; asked[i] != NULL; i++)
    _mixprec_json_path_append_key (path, asked[i]);
  _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                "%s: must be false, got true: it asks for MoQ, DeepSpeed's "
                                "quantization of the working weights after every optimizer "
                                "step, which libmixprec does not implement%s", path->str,
                                asked == weights
                                  ? " (quantize_weight_in_forward true leaves the "
                                    "quantization to the model's forward pass)"
                                  : "");
  return TRUE;
}

static void
check_top_level (Loader     *l,
                 JsonObject *root)
{
  g_autoptr(GList) members = json_object_get_members (root);
  g_autoptr(GPtrArray) candidates = g_ptr_array_new ();

  for (guint i = 0; top_level_keys[i] != NULL; i++)
    g_ptr_array_add (candidates, (gpointer) top_level_keys[i]);
  for (guint i = 0; deepspeed_only_sections[i] != NULL; i++)
    g_ptr_array_add (candidates, (gpointer) deepspeed_only_sections[i]);
  g_ptr_array_add (candidates, NULL);

  for (GList *m = members; m != NULL; m = m->next)
    {
      const gchar *key = m->data;
      g_autoptr(GString) path = g_string_new (NULL);
      const gchar *suggestion;

      _mixprec_json_path_append_key (path, key);
      if (in_list (key, top_level_keys) || g_hash_table_contains (l->report->reported, path->str))
        continue;
      if (in_list (key, deepspeed_only_sections))
        {
          if (check_moq (l, root, key))
            continue;
          _mixprec_config_report_warning (l->report,
                                          "%s: a DeepSpeed setting for a feature libmixprec "
                                          "does not implement; ignored", path->str);
          continue;
        }
      suggestion = _mixprec_suggest (key, (const gchar * const *) candidates->pdata);
      if (suggestion != NULL)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                      "%s: unknown key in the top level (did you mean %s?)",
                                      path->str, suggestion);
      else if (!g_hash_table_contains (l->report->overridden, path->str))
        /* DeepSpeed reads the top level as a dictionary and ignores what
         * it does not know (launchers leave keys such as
         * cuda_visible_devices there). */
        _mixprec_config_report_warning_code (l->report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                             "%s: unknown key in the top level, neither a "
                                             "DeepSpeed nor a libmixprec setting; ignored "
                                             "(libmixprec's own settings go in the "
                                             "\"mixprec\" section)", path->str);
      else
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                      "%s: set by an override but unknown in the top level; it "
                                      "is neither a DeepSpeed nor a libmixprec setting "
                                      "(libmixprec's own settings go in the \"mixprec\" "
                                      "section)", path->str);
    }
}

static void
load_training (Loader     *l,
               JsonObject *root)
{
  MixprecConfigSettings *s = l->s;
  MixprecDType dtype;
  gint64 i;

  if (read_int (l, root, "", "train_batch_size", 1, G_MAXUINT, TRUE,
                "a positive integer (or null: derived from the other two)", &i))
    s->train_batch_size = (guint) i;
  if (read_int (l, root, "", "train_micro_batch_size_per_gpu", 1, G_MAXUINT, TRUE,
                "a positive integer (or null: derived from the other two)", &i))
    s->train_micro_batch_size_per_gpu = (guint) i;
  if (read_int (l, root, "", "gradient_accumulation_steps", 1, G_MAXUINT, TRUE,
                "a positive integer (or null: derived from the other two)", &i))
    s->gradient_accumulation_steps = (guint) i;
  read_number (l, root, "", "gradient_clipping", 0, CLOSED, G_MAXDOUBLE, CLOSED,
               "a finite number >= 0 (0 turns clipping off)", &s->gradient_clipping);
  if (read_dtype (l, root, "", "communication_data_type", "communication dtype", &dtype))
    {
      s->communication_dtype = dtype;
      l->communication_set = TRUE;
    }
}

/* ------------------------------------------------------------ fronts */

/* Apex amp (DeepSpeed's "amp" section, Colossal-AI's fp16 mode "apex")
 * and Colossal-AI's fp16 modes "torch" and "naive" are other spellings of
 * a precision mode and a loss scaler: each is read into the settings the
 * equivalent fp16 / torch_autocast / mixprec.scaler keys would give, so
 * that the resolved configuration shows what runs. */

/* The module types Apex's keep_batchnorm_fp32 keeps in FP32: every
 * subclass of torch.nn.modules.batchnorm._BatchNorm. */
static const gchar *const batchnorm_types[] = {
  "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", NULL
};

static void
add_fp32_modules (MixprecConfigSettings *s,
                  const gchar * const   *types)
{
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();

  g_strv_builder_addv (builder, (const gchar **) s->fp32_modules);
  for (guint i = 0; types[i] != NULL; i++)
    if (!g_strv_contains ((const gchar * const *) s->fp32_modules, types[i]))
      g_strv_builder_add (builder, types[i]);
  g_strfreev (s->fp32_modules);
  s->fp32_modules = g_strv_builder_end (builder);
}

/* true, false or null (Apex's None: the opt level's default). Returns
 * TRUE with *out set for true or false. */
static gboolean
read_optional_bool (Loader      *l,
                    JsonObject  *o,
                    const gchar *section,
                    const gchar *key,
                    gboolean    *out)
{
  JsonNode *node = json_object_get_member (o, key);

  if (node == NULL || JSON_NODE_HOLDS_NULL (node))
    return FALSE;
  return read_bool (l, o, section, key, out);
}

/* An initial scale written as a number: libmixprec's is 2^power. */
static gboolean
read_power_of_two (Loader      *l,
                   JsonObject  *o,
                   const gchar *section,
                   const gchar *key,
                   gint        *power)
{
  g_autofree gchar *path = _mixprec_json_join_path (section, key);
  gdouble value;
  gint exponent;

  if (!read_number (l, o, section, key, 0, OPEN, FLT_MAX, CLOSED,
                    "a number > 0 no larger than 3.4e38", &value))
    return FALSE;
  if (frexp (value, &exponent) != 0.5 || exponent - 1 < 0 || exponent - 1 > 127)
    {
      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                    "%s: must be a power of two from 1 to 2^127, got %g: "
                                    "libmixprec's dynamic scale starts at 2^power "
                                    "(fp16.initial_scale_power)", path, value);
      return FALSE;
    }
  *power = exponent - 1;
  return TRUE;
}

static void
set_dynamic_scaler (Loader                 *l,
                    MixprecScalerSemantics  semantics,
                    gint                    power,
                    guint                   window,
                    guint                   hysteresis,
                    gdouble                 min_scale,
                    gdouble                 max_scale,
                    gdouble                 growth,
                    gdouble                 backoff)
{
  MixprecConfigSettings *s = l->s;

  s->loss_scale = 0;
  s->semantics = semantics;
  s->initial_scale_power = power;
  s->loss_scale_window = window;
  s->hysteresis = hysteresis;
  s->consecutive_hysteresis = FALSE;
  s->min_loss_scale = min_scale;
  s->max_scale = max_scale;
  s->growth_factor = growth;
  s->backoff_factor = backoff;
  s->raise_at_min_scale = FALSE;
  l->initial_scale_power_set = l->loss_scale_window_set = l->hysteresis_set = TRUE;
  l->min_loss_scale_set = l->max_scale_set = l->raise_at_min_scale_set = TRUE;
}

/* apex.amp.initialize()'s keywords. @enabled_default: DeepSpeed's amp
 * section is off unless enabled, Colossal-AI's apex mode on. */
static void
load_apex (Loader      *l,
           JsonObject  *o,
           const gchar *section,
           gboolean     enabled_default)
{
  static const gchar *const amp_known[] = {
    "enabled", "opt_level", "keep_batchnorm_fp32", "master_weights", "loss_scale",
    "min_loss_scale", "max_loss_scale", NULL
  };
  /* Colossal-AI's fp16 dict also holds its mode. */
  static const gchar *const colossal_known[] = {
    "mode", "enabled", "opt_level", "keep_batchnorm_fp32", "master_weights", "loss_scale",
    "min_loss_scale", "max_loss_scale", NULL
  };
  static const IgnoredKey ignored[] = {
    { "cast_model_type", "null",
      "libmixprec casts as opt_level says; choose the opt level instead" },
    { "patch_torch_functions", "null",
      "libmixprec casts as opt_level says; choose the opt level instead" },
    { "cast_model_outputs", "null", "libmixprec does not run the forward pass" },
    { "num_losses", "1", "libmixprec keeps one loss scaler per engine" },
    { "verbosity", NULL, "libmixprec reports through GLib's log instead" },
    { NULL, NULL, NULL }
  };
  static const gchar *const levels[] = { "O0", "O1", "O2", "O3", NULL };
  MixprecConfigSettings *s = l->s;
  gboolean enabled = enabled_default, keep_bn, master, keep_bn_set, master_set;
  guint level = 1;
  gdouble min_scale = 0, max_scale = 16777216.0, static_scale = 0;
  gint power = 16;
  g_autofree gchar *scale_path = NULL;
  JsonNode *loss_scale;

  check_members (l, o, section, enabled_default ? colossal_known : amp_known, ignored, NULL,
                 FALSE);
  read_bool (l, o, section, "enabled", &enabled);
  read_choice (l, o, section, "opt_level", levels, &level);
  keep_bn_set = read_optional_bool (l, o, section, "keep_batchnorm_fp32", &keep_bn);
  master_set = read_optional_bool (l, o, section, "master_weights", &master);

  /* Apex's defaults: O0 and O3 a static scale of 1, O1 and O2 dynamic. */
  if (level == 0 || level == 3)
    static_scale = 1;
  loss_scale = lookup (l, o, section, "loss_scale", &scale_path);
  if (loss_scale != NULL && !JSON_NODE_HOLDS_NULL (loss_scale))
    {
      if (JSON_NODE_HOLDS_VALUE (loss_scale)
          && json_node_get_value_type (loss_scale) == G_TYPE_STRING
          && g_str_equal (json_node_get_string (loss_scale), "dynamic"))
        static_scale = 0;
      else
        read_number (l, o, section, "loss_scale", 0, OPEN, FLT_MAX, CLOSED,
                     "\"dynamic\" or a number > 0 (a static scale) no larger than 3.4e38",
                     &static_scale);
    }
  if (json_object_get_member (o, "min_loss_scale") != NULL
      && !JSON_NODE_HOLDS_NULL (json_object_get_member (o, "min_loss_scale")))
    read_number (l, o, section, "min_loss_scale", 0, OPEN, FLT_MAX, CLOSED,
                 "a number > 0, or null (no floor)", &min_scale);
  read_number (l, o, section, "max_loss_scale", 0, OPEN, FLT_MAX, CLOSED,
               "a number > 0 no larger than 3.4e38", &max_scale);

  if (!enabled)
    return;

  /* Apex refuses these rather than ignoring them (frontend.py). */
  if (level == 1 && keep_bn_set)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.keep_batchnorm_fp32: must be null with opt_level \"O1\", "
                                  "got %s: O1 keeps the parameters in FP32 (as Apex says)",
                                  section, keep_bn ? "true" : "false");
  if (level == 1 && master_set)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.master_weights: must be null with opt_level \"O1\", got "
                                  "%s: O1 keeps the parameters themselves in FP32 (as Apex says)",
                                  section, master ? "true" : "false");
  if (level == 0)
    {
      /* Pure FP32: nothing to scale; a loss scale only multiplies and
       * divides back. */
      if (static_scale != 1)
        _mixprec_config_report_warning (l->report,
                                        "%s: opt_level \"O0\" trains in FP32, where libmixprec "
                                        "scales no loss; the loss_scale is ignored", scale_path);
      s->loss_scale = 0;
      return;
    }
  if (!keep_bn_set)
    keep_bn = level == 2;
  if (!master_set)
    master = level != 3;

  if (level == 1)
    {
      s->autocast_enabled = TRUE;
      s->autocast_dtype = MIXPREC_DTYPE_FLOAT16;
    }
  else
    {
      /* O3's pure fp16, or O2 told to keep no master: the optimizer
       * updates the fp16 weights themselves. */
      s->fp16_master_weights_and_grads = !master;
      s->fp16_enabled = TRUE;
      if (keep_bn)
        add_fp32_modules (s, batchnorm_types);
    }

  if (static_scale > 0)
    {
      s->loss_scale = static_scale;
      return;
    }
  /* Apex starts at min(max_loss_scale, 2^16). */
  if (max_scale < 65536.0)
    {
      gint exponent;

      if (frexp (max_scale, &exponent) != 0.5 || exponent - 1 < 0)
        {
          _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                        "%s.max_loss_scale: must be at least 65536 or a power "
                                        "of two from 1 to 2^15, got %g: Apex then starts at "
                                        "max_loss_scale, and libmixprec's dynamic scale starts "
                                        "at a power of two", section, max_scale);
          return;
        }
      power = exponent - 1;
    }
  if (min_scale > ldexp (1.0, power))
    {
      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                    "%s.min_loss_scale: must not exceed the initial scale %g, "
                                    "got %g", section, ldexp (1.0, power), min_scale);
      return;
    }
  set_dynamic_scaler (l, MIXPREC_SCALER_SEMANTICS_APEX, power, 2000, 1, min_scale, max_scale,
                      2, 0.5);
}

/* Colossal-AI's fp16=dict(mode=AMP_TYPE.TORCH, ...): torch.cuda.amp's
 * autocast and GradScaler. */
static void
load_colossal_torch (Loader      *l,
                     JsonObject  *o,
                     const gchar *section)
{
  static const gchar *const known[] = {
    "mode", "enabled", "init_scale", "growth_factor", "backoff_factor", "growth_interval", NULL
  };
  MixprecConfigSettings *s = l->s;
  gboolean enabled = TRUE;
  gint power = 16;
  gdouble growth = 2, backoff = 0.5;
  gint64 interval = 2000;

  check_members (l, o, section, known, NULL, NULL, FALSE);
  read_bool (l, o, section, "enabled", &enabled);
  read_power_of_two (l, o, section, "init_scale", &power);
  read_number (l, o, section, "growth_factor", 1, OPEN, 65536, CLOSED,
               "a number > 1 and at most 65536", &growth);
  read_number (l, o, section, "backoff_factor", 0, OPEN, 1, OPEN,
               "a number between 0 and 1, both excluded", &backoff);
  read_int (l, o, section, "growth_interval", 1, G_MAXUINT, FALSE, "a positive integer",
            &interval);

  s->autocast_enabled = TRUE;
  s->autocast_dtype = MIXPREC_DTYPE_FLOAT16;
  /* GradScaler(enabled=False) scales nothing; autocast still runs. */
  if (!enabled)
    {
      s->loss_scale = 1;
      return;
    }
  set_dynamic_scaler (l, MIXPREC_SCALER_SEMANTICS_TORCH, power, (guint) interval, 1, 0, 0,
                      growth, backoff);
}

/* Colossal-AI's fp16=dict(mode=AMP_TYPE.NAIVE, ...): FP16 parameters with
 * FP32 masters and its DynamicGradScaler, Megatron-LM's rule. */
static void
load_colossal_naive (Loader      *l,
                     JsonObject  *o,
                     const gchar *section)
{
  static const gchar *const known[] = {
    "mode", "initial_scale", "min_scale", "max_scale", "growth_factor", "backoff_factor",
    "growth_interval", "hysteresis", "clip_grad_norm", NULL
  };
  static const IgnoredKey ignored[] = {
    { "log_num_zeros_in_grad", "false", "libmixprec does not count zero gradients" },
    { "verbose", NULL, "libmixprec reports through GLib's log instead" },
    { NULL, NULL, NULL }
  };
  MixprecConfigSettings *s = l->s;
  gint power = 32;
  gdouble min_scale = 1, max_scale = 0, growth = 2, backoff = 0.5, clip;
  gint64 interval = 1000, hysteresis = 2;
  JsonNode *node;

  check_members (l, o, section, known, ignored, NULL, FALSE);
  read_power_of_two (l, o, section, "initial_scale", &power);
  /* null is Colossal-AI's None: no floor, no cap. */
  node = json_object_get_member (o, "min_scale");
  if (node != NULL && JSON_NODE_HOLDS_NULL (node))
    min_scale = 0;
  else
    read_number (l, o, section, "min_scale", 0, OPEN, FLT_MAX, CLOSED,
                 "a number > 0, or null (no floor)", &min_scale);
  node = json_object_get_member (o, "max_scale");
  if (node != NULL && !JSON_NODE_HOLDS_NULL (node))
    read_number (l, o, section, "max_scale", 0, OPEN, FLT_MAX, CLOSED,
                 "a number > 0, or null (no cap)", &max_scale);
  read_number (l, o, section, "growth_factor", 1, OPEN, 65536, CLOSED,
               "a number > 1 and at most 65536", &growth);
  read_number (l, o, section, "backoff_factor", 0, OPEN, 1, OPEN,
               "a number between 0 and 1, both excluded", &backoff);
  read_int (l, o, section, "growth_interval", 1, G_MAXUINT, FALSE, "a positive integer",
            &interval);
  read_int (l, o, section, "hysteresis", 1, G_MAXUINT, FALSE, "a positive integer",
            &hysteresis);
  if (read_number (l, o, section, "clip_grad_norm", 0, CLOSED, G_MAXDOUBLE, CLOSED,
                   "a finite number >= 0 (0 turns clipping off)", &clip) && clip > 0)
    {
      if (s->gradient_clipping > 0 && s->gradient_clipping != clip)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "%s.clip_grad_norm: says %g but gradient_clipping says "
                                      "%g; give one", section, clip, s->gradient_clipping);
      else
        s->gradient_clipping = clip;
    }

  if (min_scale > ldexp (1.0, power))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.min_scale: must not exceed the initial scale %g, got %g",
                                  section, ldexp (1.0, power), min_scale);
  if (max_scale > 0 && max_scale < MAX (min_scale, ldexp (1.0, power)))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "%s.max_scale: must be at least the initial scale %g and "
                                  "min_scale, got %g", section, ldexp (1.0, power), max_scale);
  s->fp16_enabled = TRUE;
  set_dynamic_scaler (l, MIXPREC_SCALER_SEMANTICS_MEGATRON, power, (guint) interval,
                      (guint) hysteresis, min_scale, max_scale, growth, backoff);
}

static void
load_colossalai (Loader     *l,
                 JsonObject *o)
{
  static const gchar *const known[] = { "fp16", "clip_grad_norm", "gradient_accumulation", NULL };
  static const gchar *const modes[] = { "torch", "apex", "naive", "parallel", NULL };
  MixprecConfigSettings *s = l->s;
  g_autofree gchar *path = NULL;
  JsonNode *fp16;
  JsonObject *f;
  gdouble clip;
  gint64 steps;
  guint mode;

  /* Colossal-AI's configuration holds much else (parallel, zero, ...);
   * like DeepSpeed's top level, what is not known is warned about. */
  check_members (l, o, "colossalai", known, NULL, NULL, TRUE);
  if (read_number (l, o, "colossalai", "clip_grad_norm", 0, CLOSED, G_MAXDOUBLE, CLOSED,
                   "a finite number >= 0 (0 turns clipping off)", &clip) && clip > 0)
    {
      if (s->gradient_clipping > 0 && s->gradient_clipping != clip)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "colossalai.clip_grad_norm: says %g but "
                                      "gradient_clipping says %g; give one",
                                      clip, s->gradient_clipping);
      else
        s->gradient_clipping = clip;
    }
  if (read_int (l, o, "colossalai", "gradient_accumulation", 1, G_MAXUINT, FALSE,
                "a positive integer", &steps))
    {
      if (s->gradient_accumulation_steps != 0 && s->gradient_accumulation_steps != steps)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "colossalai.gradient_accumulation: says %" G_GINT64_FORMAT
                                      " but gradient_accumulation_steps says %u; give one",
                                      steps, s->gradient_accumulation_steps);
      else
        s->gradient_accumulation_steps = (guint) steps;
    }

  fp16 = lookup (l, o, "colossalai", "fp16", &path);
  if (fp16 == NULL || JSON_NODE_HOLDS_NULL (fp16))
    return;
  if (!JSON_NODE_HOLDS_OBJECT (fp16))
    {
      report_invalid (l, path, "a JSON object such as {\"mode\": \"torch\"}", fp16);
      return;
    }
  f = json_node_get_object (fp16);
  if (!json_object_has_member (f, "mode"))
    {
      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                    "colossalai.fp16.mode: missing; one of \"torch\", \"apex\", "
                                    "\"naive\" (Colossal-AI's AMP_TYPE)");
      return;
    }
  if (!read_choice (l, f, "colossalai.fp16", "mode", modes, &mode))
    return;
  switch (mode)
    {
    case 0:
      load_colossal_torch (l, f, "colossalai.fp16");
      break;
    case 1:
      load_apex (l, f, "colossalai.fp16", TRUE);
      break;
    default:
      load_colossal_naive (l, f, "colossalai.fp16");
      break;
    }
}

static void
load_fronts (Loader     *l,
             JsonObject *root)
{
  MixprecConfigSettings *s = l->s;
  JsonObject *amp = section_object (l, root, "amp", TRUE);
  JsonObject *colossal = section_object (l, root, "colossalai", TRUE);
  const gchar *own = s->fp16_enabled ? "fp16" : s->bf16_enabled ? "bf16"
                     : s->autocast_enabled ? "torch_autocast" : NULL;
  gboolean amp_on = FALSE, colossal_on;
  JsonNode *enabled;

  if (amp != NULL)
    {
      enabled = json_object_get_member (amp, "enabled");
      amp_on = enabled != NULL && JSON_NODE_HOLDS_VALUE (enabled)
               && json_node_get_value_type (enabled) == G_TYPE_BOOLEAN
               && json_node_get_boolean (enabled);
    }
  colossal_on = colossal != NULL && json_object_get_member (colossal, "fp16") != NULL
                && !JSON_NODE_HOLDS_NULL (json_object_get_member (colossal, "fp16"));

  /* Each front chooses the precision mode and the scaler by itself. */
  if (amp_on && colossal_on)
    {
      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                    "colossalai.fp16: cannot be given together with an enabled "
                                    "amp section; each selects the precision and the loss "
                                    "scaler, keep one");
      return;
    }
  if ((amp_on || colossal_on) && own != NULL)
    {
      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                    "%s: cannot be enabled together with %s.enabled; the %s "
                                    "section selects the precision and the loss scaler itself "
                                    "(DeepSpeed refuses amp with fp16 or bf16 too)",
                                    amp_on ? "amp" : "colossalai.fp16", own,
                                    amp_on ? "amp" : "colossalai.fp16");
      return;
    }
  if ((amp_on || colossal_on) && l->semantics_set)
    {
      _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                    "mixprec.scaler.semantics: cannot be given with %s, which "
                                    "selects its own scaler", amp_on ? "amp" : "colossalai.fp16");
      return;
    }
  if (amp != NULL)
    load_apex (l, amp, "amp", FALSE);
  if (colossal != NULL)
    load_colossalai (l, colossal);
}

/* ------------------------------------------------------------ cross-checks */

static MixprecDType
gradient_dtype (MixprecConfigSettings *s)
{
  switch (s->mode)
    {
    case MIXPREC_PRECISION_MODE_FP16:
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      return MIXPREC_DTYPE_FLOAT16;
    case MIXPREC_PRECISION_MODE_BF16:
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
      return MIXPREC_DTYPE_BFLOAT16;
    case MIXPREC_PRECISION_MODE_FP32:
    case MIXPREC_PRECISION_MODE_AUTOCAST:
    default:
      return MIXPREC_DTYPE_FLOAT32;
    }
}

static MixprecDType
low_dtype (MixprecConfigSettings *s)
{
  if (s->mode == MIXPREC_PRECISION_MODE_AUTOCAST)
    return s->autocast_dtype;
  return gradient_dtype (s);
}

static void
resolve_mode (Loader *l)
{
  MixprecConfigSettings *s = l->s;

  if (s->fp16_enabled && s->bf16_enabled)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "bf16.enabled: cannot be true while fp16.enabled is also "
                                  "true; enable one of fp16 and bf16");
  if (s->autocast_enabled && (s->fp16_enabled || s->bf16_enabled))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "torch_autocast.enabled: cannot be true while %s.enabled is "
                                  "also true: autocast keeps the parameters in FP32 and lowers "
                                  "precision per operation, %s stores the parameters "
                                  "themselves in low precision; enable one",
                                  s->fp16_enabled ? "fp16" : "bf16",
                                  s->fp16_enabled ? "fp16" : "bf16");

  if (s->fp16_enabled)
    s->mode = s->fp16_master_weights_and_grads ? MIXPREC_PRECISION_MODE_FP16_NO_MASTER
                                               : MIXPREC_PRECISION_MODE_FP16;
  else if (s->bf16_enabled)
    s->mode = s->bf16_master_weights_and_grads ? MIXPREC_PRECISION_MODE_BF16_NO_MASTER
                                               : MIXPREC_PRECISION_MODE_BF16;
  else if (s->autocast_enabled)
    s->mode = MIXPREC_PRECISION_MODE_AUTOCAST;
  else
    s->mode = MIXPREC_PRECISION_MODE_FP32;

  if (s->bf16_master_weights_and_grads && !s->bf16_enabled)
    _mixprec_config_report_warning (l->report,
                                    "bf16.bf16_master_weights_and_grads: has no effect while "
                                    "bf16.enabled is false; ignored");
  /* DeepSpeed's bf16 optimizer keeps its moments in bf16 on request: half
   * the state memory, at the cost of moments rounded at every step. */
  s->optimizer_state_dtype = MIXPREC_DTYPE_FLOAT32;
  if (s->bf16_optimizer_states && s->bf16_enabled && !s->fp16_enabled)
    s->optimizer_state_dtype = MIXPREC_DTYPE_BFLOAT16;
  else if (s->bf16_optimizer_states)
    _mixprec_config_report_warning (l->report,
                                    "bf16.bf16_optimizer_states: has no effect while "
                                    "bf16.enabled is false; ignored");
  if (s->fp16_master_weights_and_grads && !s->fp16_enabled)
    _mixprec_config_report_warning (l->report,
                                    "fp16.fp16_master_weights_and_grads: has no effect while "
                                    "fp16.enabled is false; ignored");

  /* mixprec.master_weights may take the master away. */
  resolve_representation (l);

  if (l->precision_mode_set && l->precision_mode_asserted != s->mode)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "mixprec.precision_mode: says \"%s\" but the fp16, bf16 and "
                                  "torch_autocast sections select \"%s\"; the mode is chosen "
                                  "by those sections and this key only asserts it",
                                  precision_mode_names[l->precision_mode_asserted],
                                  precision_mode_names[s->mode]);
}

static void
resolve_dtypes (Loader *l)
{
  MixprecConfigSettings *s = l->s;
  MixprecDType grad = gradient_dtype (s);
  MixprecDType low = low_dtype (s);
  const gchar *mode = precision_mode_names[s->mode];

  /* DeepSpeed accumulates in the gradient dtype. For bf16 with FP32
   * masters (also kept as remainders, or compensated) libmixprec
   * accumulates in FP32: bf16's 8 bits of precision
   * lose most of each micro-batch's contribution (DeepSpeed issues #1800,
   * #2352, #2768). */
  if (!l->grad_accum_set)
    s->grad_accum_dtype = s->mode == MIXPREC_PRECISION_MODE_BF16 ||
                          s->master_weights == MIXPREC_MASTER_WEIGHTS_REMAINDER ||
                          s->master_weights == MIXPREC_MASTER_WEIGHTS_KAHAN
                          ? MIXPREC_DTYPE_FLOAT32 : grad;
  else if (s->grad_accum_dtype != grad && s->grad_accum_dtype != MIXPREC_DTYPE_FLOAT32)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "data_types.grad_accum_dtype: must be %s%s in %s mode, "
                                  "got \"%s\": gradients are %s, and accumulating them in a "
                                  "format with %s loses them",
                                  _mixprec_config_dtype_short_name (grad),
                                  grad == MIXPREC_DTYPE_FLOAT32 ? "" : " or fp32", mode,
                                  _mixprec_config_dtype_short_name (s->grad_accum_dtype),
                                  _mixprec_config_dtype_short_name (grad),
                                  s->grad_accum_dtype == MIXPREC_DTYPE_FLOAT16
                                    ? "less range (max 65504)" : "fewer bits of precision");

  /* mixprec.reduce_accumulation "fp32": the reductions land in an FP32
   * accumulation buffer, so no partial sum is rounded below FP32, while
   * the contributions travel in the gradient dtype. */
  if (s->reduce_fp32 && !l->grad_accum_set)
    s->grad_accum_dtype = MIXPREC_DTYPE_FLOAT32;
  else if (s->reduce_fp32 && s->grad_accum_dtype != MIXPREC_DTYPE_FLOAT32)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "data_types.grad_accum_dtype: must be fp32 when "
                                  "mixprec.reduce_accumulation is \"fp32\", got \"%s\": the "
                                  "reduced gradients are summed into the accumulation buffer, "
                                  "and a %s one rounds every partial sum",
                                  _mixprec_config_dtype_short_name (s->grad_accum_dtype),
                                  _mixprec_config_dtype_short_name (s->grad_accum_dtype));

  /* DeepSpeed communicates in the gradient dtype; libmixprec communicates
   * what it accumulated unless told otherwise, or, when it sums in FP32
   * whatever travels, the gradients as they are. */
  if (!l->communication_set)
    s->communication_dtype = s->reduce_fp32 ? grad : s->grad_accum_dtype;
  else if (s->communication_dtype == MIXPREC_DTYPE_FLOAT16 && low != MIXPREC_DTYPE_FLOAT16)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "communication_data_type: must be fp32 or bf16 in %s mode, "
                                  "got \"fp16\": only loss-scaled fp16 training keeps "
                                  "gradients inside fp16's range (max 65504)", mode);
  else if (s->communication_dtype == MIXPREC_DTYPE_BFLOAT16 && low == MIXPREC_DTYPE_FLOAT16)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "communication_data_type: must be fp16 or fp32 in %s mode, "
                                  "got \"bf16\": fp16 gradients sent as bf16 lose 3 bits of "
                                  "precision and gain range the loss scale already provides",
                                  mode);

  /* Resolved: an FP32 accumulation buffer receives FP32 sums whatever
   * the communication dtype (MIXPREC_COMM_RECV_FP32). */
  s->reduce_fp32 = s->grad_accum_dtype == MIXPREC_DTYPE_FLOAT32;

  if (s->stochastic_rounding
      && (s->mode == MIXPREC_PRECISION_MODE_FP32 || s->mode == MIXPREC_PRECISION_MODE_AUTOCAST))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "mixprec.stochastic_rounding: must be false in %s mode, got "
                                  "true: %s, so no weight is ever rounded to a lower precision",
                                  mode,
                                  s->mode == MIXPREC_PRECISION_MODE_FP32
                                    ? "every value stays FP32"
                                    : "autocast keeps the parameters in FP32");

  if (s->mode == MIXPREC_PRECISION_MODE_AUTOCAST)
    for (guint i = 0; s->fp32_modules[i] != NULL; i++)
      for (guint j = 0; s->lower_precision_safe_modules[j] != NULL; j++)
        if (_mixprec_module_type_matches (s->fp32_modules[i], s->lower_precision_safe_modules[j]))
          _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                        "mixprec.fp32_modules[%u]: \"%s\" is also listed in "
                                        "torch_autocast.lower_precision_safe_modules; a module "
                                        "type is either kept in FP32 or communicated in %s, "
                                        "not both", i, s->fp32_modules[i],
                                        _mixprec_config_dtype_short_name (s->autocast_dtype));
}

static void
resolve_scaler (Loader *l)
{
  MixprecConfigSettings *s = l->s;
  gdouble initial;

  /* Each published scaler's own defaults, where the document is silent. */
  switch (s->semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_TORCH:
      if (!l->loss_scale_window_set)
        s->loss_scale_window = 2000;
      if (!l->hysteresis_set)
        s->hysteresis = 1;
      else if (s->hysteresis != 1)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "fp16.hysteresis: must be 1 with mixprec.scaler.semantics "
                                      "\"torch\", got %u: PyTorch's GradScaler backs off on "
                                      "every overflow", s->hysteresis);
      if (!l->raise_at_min_scale_set)
        s->raise_at_min_scale = FALSE;
      break;
    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
      if (!l->initial_scale_power_set)
        s->initial_scale_power = 32;
      if (!l->raise_at_min_scale_set)
        s->raise_at_min_scale = FALSE;
      break;
    case MIXPREC_SCALER_SEMANTICS_APEX:
      if (!l->loss_scale_window_set)
        s->loss_scale_window = 2000;
      if (!l->hysteresis_set)
        s->hysteresis = 1;
      else if (s->hysteresis != 1)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "fp16.hysteresis: must be 1 with mixprec.scaler.semantics "
                                      "\"apex\", got %u: Apex's LossScaler halves the scale on "
                                      "every overflow", s->hysteresis);
      if (!l->max_scale_set)
        s->max_scale = 16777216.0;
      if (!l->raise_at_min_scale_set)
        s->raise_at_min_scale = FALSE;
      break;
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
    default:
      break;
    }
  if (s->consecutive_hysteresis && s->semantics != MIXPREC_SCALER_SEMANTICS_DEEPSPEED)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "fp16.consecutive_hysteresis: must be false with "
                                  "mixprec.scaler.semantics \"%s\", got true: only DeepSpeed's "
                                  "scaler refills the hysteresis on clean steps",
                                  semantics_names[s->semantics]);
  if (s->min_loss_scale == 0 && s->semantics == MIXPREC_SCALER_SEMANTICS_DEEPSPEED)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                  "fp16.min_loss_scale: must be a number > 0 with "
                                  "mixprec.scaler.semantics \"deepspeed\", got 0 (no floor "
                                  "is for semantics \"torch\", \"megatron\" or \"apex\")");

  initial = ldexp (1.0, s->initial_scale_power);
  if (s->loss_scale == 0 && s->min_loss_scale > initial)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "fp16.min_loss_scale: must not exceed the initial scale "
                                  "2^%d = %g, got %g", s->initial_scale_power, initial,
                                  s->min_loss_scale);
  if (s->max_scale > 0)
    {
      if (s->max_scale < s->min_loss_scale)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.scaler.max_scale: must be at least "
                                      "fp16.min_loss_scale (%g), got %g",
                                      s->min_loss_scale, s->max_scale);
      else if (s->loss_scale == 0 && s->max_scale < initial)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.scaler.max_scale: must be at least the initial "
                                      "scale 2^%d = %g, got %g", s->initial_scale_power,
                                      initial, s->max_scale);
      else if (s->loss_scale > s->max_scale)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "mixprec.scaler.max_scale: must be at least the static "
                                      "fp16.loss_scale (%g), got %g", s->loss_scale, s->max_scale);
    }
}

/* What offload_optimizer "cpu" means depends on the device. */
static void
resolve_offload (Loader *l)
{
  MixprecConfigSettings *s = l->s;

  if (s->offload_optimizer != _MIXPREC_OFFLOAD_CPU)
    return;
  if (g_str_equal (s->device, "cpu"))
    _mixprec_config_report_warning (l->report,
                                    "%s: mixprec.device is \"cpu\", so the FP32 masters and the "
                                    "optimizer state are in host memory and step on the CPU already; "
                                    "there is nothing to offload", s->offload_path);
  /* pin_memory on a device: the engine asks the device plugin for pinned
   * host memory and warns when it has none (a plugin of revision 1). */
}

/* What offload_param "cpu" means depends on the stage, the device and
 * offload_optimizer: the partitions of ZeRO-3 in host memory, which the
 * offloaded optimizer updates where they are. */
static void
resolve_offload_param (Loader *l)
{
  MixprecConfigSettings *s = l->s;

  if (s->offload_param != _MIXPREC_OFFLOAD_CPU)
    return;
  if (g_str_equal (s->device, "cpu"))
    _mixprec_config_report_warning (l->report,
                                    "%s: mixprec.device is \"cpu\", so the parameters are in host "
                                    "memory already; there is nothing to offload", s->offload_param_path);
  else if (s->zero_stage != 3)
    /* DeepSpeed's rule: parameters are partitioned, and offloaded, by
     * ZeRO-3 only. */
    _mixprec_config_report_warning (l->report,
                                    "%s: parameter offload applies to ZeRO stage 3 only, and "
                                    "zero_optimization.stage is %u; the parameters stay on device "
                                    "\"%s\"", s->offload_param_path, s->zero_stage, s->device);
  else if (s->offload_optimizer != _MIXPREC_OFFLOAD_CPU)
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                                  "%s: parameter offload needs zero_optimization.offload_optimizer "
                                  "{\"device\": \"cpu\"} as well: the optimizer on device \"%s\" "
                                  "cannot update working copies kept in host memory",
                                  s->offload_param_path, s->device);
}

static void
resolve_rest (Loader *l)
{
  MixprecConfigSettings *s = l->s;

  /* DeepSpeed's dynamic default: overlap only where it pays, in stage 3. */
  if (!l->overlap_comm_set)
    s->overlap_comm = s->zero_stage == 3;

  if (s->zeropp_weights_format != 0 && !s->zero_quantized_weights)
    _mixprec_config_report_warning (l->report,
                                    "mixprec.quantized_weights_format: \"%s\" has no effect "
                                    "without zero_optimization.zero_quantized_weights, the "
                                    "quantized ZeRO-3 gathers it shapes",
                                    _mixprec_zeropp_weights_format_names[s->zeropp_weights_format]);
  if (s->zeropp_gradients_format != 0 && !s->zero_quantized_gradients)
    _mixprec_config_report_warning (l->report,
                                    "mixprec.quantized_gradients_format: \"%s\" has no effect "
                                    "without zero_optimization.zero_quantized_gradients, the "
                                    "quantized ZeRO-3 reduce-scatters it shapes",
                                    _mixprec_zeropp_gradients_format_names[s->zeropp_gradients_format]);

  if (g_str_equal (s->comm_backend, "nccl") && g_str_equal (s->device, "cpu"))
    _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "mixprec.comm: \"nccl\" needs mixprec.device \"cuda\", got "
                                  "device \"cpu\": NCCL moves device memory only");

  if (s->train_batch_size != 0 && s->train_micro_batch_size_per_gpu != 0
      && s->gradient_accumulation_steps != 0)
    {
      guint64 per_rank = (guint64) s->train_micro_batch_size_per_gpu * s->gradient_accumulation_steps;

      if (s->train_batch_size % per_rank != 0)
        _mixprec_config_report_error (l->report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                      "train_batch_size: must be a multiple of "
                                      "train_micro_batch_size_per_gpu * "
                                      "gradient_accumulation_steps = %u * %u = %" G_GUINT64_FORMAT
                                      " (the world size is their quotient), got %u",
                                      s->train_micro_batch_size_per_gpu,
                                      s->gradient_accumulation_steps, per_rank,
                                      s->train_batch_size);
    }
}

/* The optimizer and the schedule, checked as the engine builds them:
 * the optimizer's parameters against its plugin's schema (each problem
 * reported), the schedule's by building it. Sections that already failed
 * their own checks (a missing type, an unresolved "auto") are not checked
 * again. */
static void
check_optimizer_and_scheduler (Loader   *l,
                               gboolean  optimizer_ok,
                               gboolean  scheduler_ok)
{
  MixprecConfigSettings *s = l->s;
  g_autoptr(GString) errors = g_string_new (NULL);
  g_autoptr(GString) warnings = g_string_new (NULL);
  g_autoptr(MixprecFeature) feature = NULL;
  g_autofree gdouble *hparams = NULL;
  gdouble base_lr = MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR;
  guint n = 0;

  if (optimizer_ok)
    {
      /* Offloaded, the optimizer is the cpu one whatever the device. */
      const gchar *where = s->offload_optimizer == _MIXPREC_OFFLOAD_CPU ? "cpu" : s->device;

      feature = _mixprec_optimizer_resolve (s->optimizer_type, s->optimizer_params, where,
                                            &hparams, &n, errors, warnings);
      /* A plugin for another device is not loadable on every machine
       * that checks a configuration; its schema is the cpu one's. */
      if (feature == NULL && !g_str_equal (where, "cpu"))
        {
          g_autoptr(GString) cpu_errors = g_string_new (NULL);

          g_string_truncate (warnings, 0);
          feature = _mixprec_optimizer_resolve (s->optimizer_type, s->optimizer_params, "cpu",
                                                &hparams, &n, cpu_errors, warnings);
          if (feature != NULL)
            {
              g_autoptr(GString) reason = g_string_new (errors->str);

              g_string_truncate (reason, reason->len - 1);
              _mixprec_config_report_warning (l->report, "%s; checked the parameters against "
                                              "the cpu plugin's", reason->str);
              g_string_assign (errors, cpu_errors->str);
            }
        }
      /* Without an optimizer section nothing in the file is wrong: a
       * machine without the plugins can still check it. */
      if (feature == NULL && s->optimizer_type == NULL)
        {
          g_string_truncate (errors, errors->len - 1);
          _mixprec_config_report_warning (l->report, "optimizer: absent, so the engine runs "
                                          "%s with its defaults, which no plugin provides here "
                                          "(%s)", _MIXPREC_DEFAULT_OPTIMIZER_TYPE,
                                          errors->str + strlen ("optimizer.type: "));
        }
      else if (errors->len > 0)
        {
          g_auto(GStrv) lines = NULL;

          g_string_truncate (errors, errors->len - 1);
          lines = g_strsplit (errors->str, "\n", -1);
          for (guint i = 0; lines[i] != NULL; i++)
            _mixprec_config_report_error (l->report,
                                          feature == NULL ? MIXPREC_CONFIG_ERROR_UNSUPPORTED
                                                          : MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                          "%s", lines[i]);
        }
      else if (feature != NULL)
        s->resolved_optimizer_params = _mixprec_optimizer_params_to_json (feature, hparams);
      if (feature != NULL)
        check_state_slots (l, feature);
      if (warnings->len > 0)
        {
          g_auto(GStrv) lines = NULL;

          g_string_truncate (warnings, warnings->len - 1);
          lines = g_strsplit (warnings->str, "\n", -1);
          for (guint i = 0; lines[i] != NULL; i++)
            _mixprec_config_report_warning (l->report, "%s", lines[i]);
        }
    }

  if (scheduler_ok && s->scheduler_type != NULL)
    {
      g_autoptr(MixprecLrSchedule) schedule = NULL;
      g_autoptr(GError) error = NULL;
      JsonNode *lr = s->optimizer_params != NULL
                     ? json_object_get_member (s->optimizer_params, "lr") : NULL;

      if (lr != NULL && JSON_NODE_HOLDS_VALUE (lr)
          && (json_node_get_value_type (lr) == G_TYPE_DOUBLE
              || json_node_get_value_type (lr) == G_TYPE_INT64)
          && isfinite (json_node_get_double (lr)) && json_node_get_double (lr) >= 0)
        base_lr = json_node_get_double (lr);
      schedule = mixprec_lr_schedule_new (s->scheduler_type, s->scheduler_params, base_lr, &error);
      if (schedule == NULL)
        {
          g_auto(GStrv) lines = g_strsplit (error->message, "\n", -1);

          for (guint i = 0; lines[i] != NULL; i++)
            _mixprec_config_report_error (l->report,
                                          error->code == MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE
                                          ? MIXPREC_CONFIG_ERROR_UNSUPPORTED
                                          : MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                          "%s", lines[i]);
        }
    }
}

gboolean
_mixprec_config_settings_load (MixprecConfigSettings *settings,
                               JsonNode              *root,
                               MixprecConfigReport   *report)
{
  Loader l = { .s = settings, .report = report };
  JsonObject *o;
  gboolean has_bf16, has_bfloat16, optimizer_ok, scheduler_ok;
  guint before;

  if (!JSON_NODE_HOLDS_OBJECT (root))
    {
      g_autofree gchar *shown = _mixprec_json_show (root);

      _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_PARSE,
                                    "(top level): must be a JSON object such as "
                                    "{\"fp16\": {\"enabled\": true}}, got %s", shown);
      return FALSE;
    }
  o = json_node_get_object (root);

  check_top_level (&l, o);
  load_training (&l, o);
  load_fp16 (&l, section_object (&l, o, "fp16", FALSE));
  has_bf16 = json_object_has_member (o, "bf16");
  has_bfloat16 = json_object_has_member (o, "bfloat16");
  if (has_bf16 && has_bfloat16)
    _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_CONFLICT,
                                  "bfloat16: cannot appear together with bf16; \"bfloat16\" is "
                                  "DeepSpeed's old name for the same section, keep one");
  else if (has_bfloat16)
    load_bf16 (&l, section_object (&l, o, "bfloat16", FALSE), "bfloat16");
  if (has_bf16)
    load_bf16 (&l, section_object (&l, o, "bf16", FALSE), "bf16");
  load_data_types (&l, section_object (&l, o, "data_types", FALSE));
  load_torch_autocast (&l, section_object (&l, o, "torch_autocast", FALSE));
  load_zero (&l, o);
  before = report->problems->len;
  load_typed_section (&l, section_object (&l, o, "optimizer", TRUE), "optimizer",
                      &settings->optimizer_type, &settings->optimizer_params);
  optimizer_ok = report->problems->len == before;
  before = report->problems->len;
  load_typed_section (&l, section_object (&l, o, "scheduler", TRUE), "scheduler",
                      &settings->scheduler_type, &settings->scheduler_params);
  scheduler_ok = report->problems->len == before;
  load_mixprec (&l, section_object (&l, o, "mixprec", FALSE));
  load_monitors (&l, o);
  load_fp8 (&l, section_object (&l, o, "fp8", FALSE));
  load_fp4 (&l, section_object (&l, o, "fp4", FALSE));
  load_fronts (&l, o);

  resolve_mode (&l);
  resolve_dtypes (&l);
  resolve_scaler (&l);
  resolve_rest (&l);
  resolve_offload (&l);
  resolve_offload_param (&l);
  resolve_fp8 (&l);
  resolve_fp4 (&l);
  check_optimizer_and_scheduler (&l, optimizer_ok, scheduler_ok);

  /* Strict: whatever would only have been warned about refuses the
   * document, each with the code of its kind. */
  if (settings->strict)
    for (guint i = 0; i < report->warnings->len; i++)
      _mixprec_config_report_error (report,
                                    g_array_index (report->warning_codes, MixprecConfigError, i),
                                    "%s (refused: mixprec.strict is true)",
                                    (const gchar *) g_ptr_array_index (report->warnings, i));

  return report->problems->len == 0;
}

void
_mixprec_config_settings_init_defaults (MixprecConfigSettings *s)
{
  static const gchar *const safe_modules[] = { "Linear", "Conv1d", "Conv2d", "Conv3d", NULL };

  memset (s, 0, sizeof *s);
  s->mode = MIXPREC_PRECISION_MODE_FP32;

  s->loss_scale = 0;
  s->initial_scale_power = 16;
  s->loss_scale_window = 1000;
  s->hysteresis = 2;
  s->consecutive_hysteresis = FALSE;
  s->min_loss_scale = 1;

  s->check_grad_overflow = TRUE;

  s->grad_accum_dtype = MIXPREC_DTYPE_FLOAT32;
  s->communication_dtype = MIXPREC_DTYPE_FLOAT32;

  s->autocast_dtype = MIXPREC_DTYPE_BFLOAT16;
  s->lower_precision_safe_modules = g_strdupv ((gchar **) safe_modules);

  s->zero_stage = 0;
  s->reduce_bucket_size = 500000000;
  s->allgather_bucket_size = 500000000;
  s->overlap_comm = FALSE;
  s->contiguous_gradients = TRUE;
  s->prefetch_bucket_size = 50000000;
  s->param_persistence_threshold = 100000;
  s->max_live_parameters = 1000000000;
  s->zero_hpz_partition_size = 1;
  s->zeropp_loco_err_beta = 0.8;
  s->zeropp_loco_reset_t = 1024;

  s->gradient_clipping = 0;

  s->fp32_modules = g_new0 (gchar *, 1);
  s->fp32_params = g_new0 (gchar *, 1);
  s->numerics_shadow = g_new0 (gchar *, 1);
  s->auto_precision.watch = g_strdupv ((gchar **) (const gchar *const[]) {
                                         "grad_underflow", "fp8_saturation", "fp8_underflow", NULL });
  s->auto_precision.widen_above = 0.5;
  s->auto_precision.widen_patience = 3;
  s->auto_precision.narrow_below = 0.05;
  s->auto_precision.narrow_patience = 30;
  s->auto_precision.max_widened_fraction = 0.25;
  s->auto_precision.widen_to = (1u << MIXPREC_DTYPE_BFLOAT16) | (1u << MIXPREC_DTYPE_FLOAT32);
  s->semantics = MIXPREC_SCALER_SEMANTICS_DEEPSPEED;
  s->max_scale = 0;
  s->growth_factor = 2;
  s->backoff_factor = 0.5;
  s->raise_at_min_scale = TRUE;
  s->comm_backend = g_strdup ("auto");
  s->timeout = MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS / 1000.0;
  s->device = g_strdup ("cpu");
  s->offload_optimizer = _MIXPREC_OFFLOAD_NONE;

  /* DeepSpeed's defaults (runtime/constants.py, monitor/config.py). */
  s->steps_per_print = 10;
  for (guint k = 0; k < G_N_ELEMENTS (s->monitor_enabled); k++)
    {
      s->monitor_output_path[k] = g_strdup ("");
      s->monitor_job_name[k] = g_strdup ("DeepSpeedJobName");
    }

  /* Transformer Engine's DelayedScaling defaults; Linear layers in FP8. */
  s->fp8_enabled = FALSE;
  s->fp8_recipe = MIXPREC_FP8_RECIPE_DELAYED;
  s->fp8_format = MIXPREC_FP8_FORMAT_HYBRID;
  s->fp8_amax_history_len = 1024;
  s->fp8_amax_compute_algo = MIXPREC_FP8_AMAX_MAX;
  s->fp8_margin = 0;
  s->fp8_mx_block_size = MIXPREC_FP8_MX_BLOCK_SIZE;
  s->fp8_mx_scale_mode = MIXPREC_MX_SCALE_FLOOR;
  s->fp8_saturate = TRUE;
  s->fp8_modules = g_strsplit ("Linear", ",", -1);

  /* Transformer Engine's NVFP4BlockScaling: 16x16 tiles for weights. */
  s->fp4_enabled = FALSE;
  s->fp4_recipe = MIXPREC_BLOCK_RECIPE_NVFP4;
  s->fp4_weights_2d = TRUE;
  s->fp4_scale_mode = MIXPREC_MX_SCALE_FLOOR;
  s->fp4_rht = FALSE;
  s->fp4_rht_seed = 0;
  s->fp4_modules = g_strsplit ("Linear", ",", -1);
  s->fp4_exclude_params = g_new0 (gchar *, 1);

  s->master_weights = MIXPREC_MASTER_WEIGHTS_FP32;
  s->state_format_default = MIXPREC_STATE_FORMAT_FP32;
  s->state_slot_names = g_new0 (gchar *, 1);
  s->state_slot_formats = g_array_new (FALSE, FALSE, sizeof (MixprecStateFormat));
}

void
_mixprec_config_settings_clear (MixprecConfigSettings *s)
{
  g_clear_pointer (&s->lower_precision_safe_modules, g_strfreev);
  g_clear_pointer (&s->optimizer_type, g_free);
  g_clear_pointer (&s->optimizer_params, json_object_unref);
  g_clear_pointer (&s->scheduler_type, g_free);
  g_clear_pointer (&s->scheduler_params, json_object_unref);
  g_clear_pointer (&s->resolved_optimizer_params, json_object_unref);
  g_clear_pointer (&s->fp32_modules, g_strfreev);
  g_clear_pointer (&s->fp32_params, g_strfreev);
  g_clear_pointer (&s->numerics_shadow, g_strfreev);
  g_clear_pointer (&s->auto_precision.watch, g_strfreev);
  g_clear_pointer (&s->comm_backend, g_free);
  g_clear_pointer (&s->device, g_free);
  g_clear_pointer (&s->offload_path, g_free);
  g_clear_pointer (&s->offload_param_path, g_free);
  for (guint k = 0; k < G_N_ELEMENTS (s->monitor_enabled); k++)
    {
      g_clear_pointer (&s->monitor_output_path[k], g_free);
      g_clear_pointer (&s->monitor_job_name[k], g_free);
    }
  g_clear_pointer (&s->fp8_modules, g_strfreev);
  g_clear_object (&s->fp8_recipe_object);
  g_clear_pointer (&s->fp4_modules, g_strfreev);
  g_clear_pointer (&s->fp4_exclude_params, g_strfreev);
  g_clear_pointer (&s->state_slot_names, g_strfreev);
  g_clear_pointer (&s->state_slot_formats, g_array_unref);
}
