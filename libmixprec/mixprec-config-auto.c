/* mixprec-config-auto.c — what happens to a document before it is read:
 * overrides are written into it, then each Hugging Face "auto" placeholder
 * that can be derived from the document, or that has a published default,
 * is replaced by its value and reported as 'path: "auto" -> value (why)'.
 * The reader refuses whatever "auto" is left, naming the override to pass. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"

/* The Hugging Face Trainer's defaults (TrainingArguments): the values it
 * writes over "auto" when its command line does not say otherwise. */
#define HF_LEARNING_RATE    5e-5
#define HF_ADAM_BETA1       0.9
#define HF_ADAM_BETA2       0.999
#define HF_ADAM_EPSILON     1e-8
#define HF_WEIGHT_DECAY     0.0
#define HF_MAX_GRAD_NORM    1.0
#define HF_MICRO_BATCH      8
#define HF_GRAD_ACCUM_STEPS 1
#define HF_WARMUP_STEPS     0

/* DeepSpeed's own defaults of the sizes the Trainer derives from the
 * model's hidden size (runtime/zero/config.py). */
#define DS_REDUCE_BUCKET_SIZE          500000000
#define DS_PREFETCH_BUCKET_SIZE        50000000
#define DS_PARAM_PERSISTENCE_THRESHOLD 100000

/* hidden_size^2 must stay exact in a gint64. */
#define MAX_HIDDEN_SIZE G_MAXINT32

#define HIDDEN_SIZE_PATH "model.hidden_size"

void
_mixprec_config_override_free (MixprecConfigOverride *override)
{
  g_free (override->path);
  g_clear_pointer (&override->value, json_node_unref);
  g_free (override);
}

GStrv
_mixprec_config_override_split (const gchar  *path,
                                GError      **error)
{
  g_auto(GStrv) keys = NULL;

  if (path == NULL || *path == '\0')
    {
      g_set_error_literal (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                           "(override): the path is empty; write it as JSON keys joined "
                           "by dots, such as zero_optimization.reduce_bucket_size");
      return NULL;
    }
  keys = g_strsplit (path, ".", -1);
  for (guint i = 0; keys[i] != NULL; i++)
    if (*keys[i] == '\0')
      {
        g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                     "%s: not a path: key %u is empty; write it as JSON keys joined by "
                     "dots, such as zero_optimization.reduce_bucket_size", path, i + 1);
        return NULL;
      }
  return g_steal_pointer (&keys);
}

static gboolean
read_hidden_size (JsonNode            *value,
                  MixprecConfigReport *report,
                  gint64              *hidden_size)
{
  gdouble d;

  if (JSON_NODE_HOLDS_VALUE (value))
    {
      GType type = json_node_get_value_type (value);

      d = type == G_TYPE_INT64 ? (gdouble) json_node_get_int (value)
          : type == G_TYPE_DOUBLE ? json_node_get_double (value) : NAN;
      if (isfinite (d) && d == floor (d) && d >= 1 && d <= MAX_HIDDEN_SIZE)
        {
          *hidden_size = (gint64) d;
          return TRUE;
        }
    }
  {
    g_autofree gchar *shown = _mixprec_json_show_whole (value);

    _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                  "%s: must be a positive integer no larger than %d (the "
                                  "model's hidden size), got %s",
                                  HIDDEN_SIZE_PATH, MAX_HIDDEN_SIZE, shown);
  }
  return FALSE;
}

static void
apply_one (JsonNode              *root,
           MixprecConfigOverride *override,
           MixprecConfigReport   *report)
{
  g_auto(GStrv) keys = g_strsplit (override->path, ".", -1);
  g_autoptr(GString) path = g_string_new (NULL);
  JsonObject *o = json_node_get_object (root);
  guint n = g_strv_length (keys);

  for (guint i = 0; i + 1 < n; i++)
    {
      JsonNode *member = json_object_get_member (o, keys[i]);

      _mixprec_json_path_append_key (path, keys[i]);
      if (member == NULL || JSON_NODE_HOLDS_NULL (member))
        {
          json_object_set_object_member (o, keys[i], json_object_new ());
          member = json_object_get_member (o, keys[i]);
          g_hash_table_add (report->overridden, g_strdup (path->str));
        }
      else if (!JSON_NODE_HOLDS_OBJECT (member))
        {
          g_autofree gchar *shown = _mixprec_json_show_whole (member);

          _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                        "%s: cannot be set: %s holds %s, not an object",
                                        override->path, path->str, shown);
          return;
        }
      o = json_node_get_object (member);
    }
  _mixprec_json_path_append_key (path, keys[n - 1]);
  json_object_set_member (o, keys[n - 1], json_node_copy (override->value));
  g_hash_table_add (report->overridden, g_strdup (path->str));
}

void
_mixprec_config_apply_overrides (JsonNode            *root,
                                 GPtrArray           *overrides,
                                 MixprecConfigReport *report,
                                 gint64              *hidden_size)
{
  *hidden_size = 0;
  if (overrides == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    return;
  for (guint i = 0; i < overrides->len; i++)
    {
      MixprecConfigOverride *override = g_ptr_array_index (overrides, i);

      if (g_str_equal (override->path, HIDDEN_SIZE_PATH))
        read_hidden_size (override->value, report, hidden_size);
      else if (g_str_has_prefix (override->path, "model."))
        _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
                                      "%s: unknown override; the model's only setting is %s",
                                      override->path, HIDDEN_SIZE_PATH);
      else
        apply_one (root, override, report);
    }
}

/* ------------------------------------------------------------ "auto" */

typedef struct
{
  JsonNode            *root;
  MixprecConfigReport *report;
  gint64               hidden_size;
} Resolver;

/* The member at @section.@key (@section NULL: the top level, or two keys
 * such as "optimizer.params"), or NULL. */
static JsonObject *
object_at (JsonNode    *root,
           const gchar *section)
{
  g_auto(GStrv) keys = NULL;
  JsonObject *o = json_node_get_object (root);

  if (section == NULL)
    return o;
  keys = g_strsplit (section, ".", -1);
  for (guint i = 0; keys[i] != NULL; i++)
    {
      JsonNode *member = json_object_get_member (o, keys[i]);

      if (member == NULL || !JSON_NODE_HOLDS_OBJECT (member))
        return NULL;
      o = json_node_get_object (member);
    }
  return o;
}

/* Whether @section.@key holds "auto" that the scanner did not already
 * report (a duplicate key). */
static gboolean
auto_at (Resolver    *r,
         const gchar *section,
         const gchar *key)
{
  JsonObject *o = object_at (r->root, section);
  g_autofree gchar *path = NULL;

  if (o == NULL || !_mixprec_json_is_auto (json_object_get_member (o, key)))
    return FALSE;
  path = _mixprec_json_join_path (section, key);
  return !g_hash_table_contains (r->report->reported, path);
}

/* A number written at @section.@key, or NAN. */
static gdouble
number_at (Resolver    *r,
           const gchar *section,
           const gchar *key)
{
  JsonObject *o = object_at (r->root, section);
  JsonNode *node = o != NULL ? json_object_get_member (o, key) : NULL;

  if (node == NULL || !JSON_NODE_HOLDS_VALUE (node))
    return NAN;
  if (json_node_get_value_type (node) == G_TYPE_INT64)
    return (gdouble) json_node_get_int (node);
  if (json_node_get_value_type (node) == G_TYPE_DOUBLE)
    return json_node_get_double (node);
  return NAN;
}

/* Writes @value (transfer full) over the "auto" at @section.@key. */
static void
resolve (Resolver    *r,
         const gchar *section,
         const gchar *key,
         JsonNode    *value,
         const gchar *why)
{
  g_autofree gchar *path = _mixprec_json_join_path (section, key);
  g_autofree gchar *shown = _mixprec_json_show_whole (value);

  json_object_set_member (object_at (r->root, section), key, value);
  _mixprec_config_report_warning_code (r->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                       "%s: \"auto\" -> %s (%s)", path, shown, why);
}

static JsonNode *
new_int (gint64 value)
{
  return json_node_init_int (json_node_alloc (), value);
}

static JsonNode *
new_double (gdouble value)
{
  return json_node_init_double (json_node_alloc (), value);
}

static void
resolve_precision (Resolver *r)
{
  static const gchar *const sections[] = { "fp16", "bf16", "bfloat16" };

  for (gsize i = 0; i < G_N_ELEMENTS (sections); i++)
    if (auto_at (r, sections[i], "enabled"))
      resolve (r, sections[i], "enabled", json_node_init_boolean (json_node_alloc (), FALSE),
               i == 0 ? "DeepSpeed's default; the Trainer enables it only for --fp16"
                      : "DeepSpeed's default; the Trainer enables it only for --bf16");
}

/* train_batch_size = micro * steps * world size (DeepSpeed's rule): a
 * value the other two and the world size fix is left null for
 * mixprec_config_resolve_batch(), which knows the world size. */
static void
resolve_batch (Resolver *r)
{
  gboolean batch_auto = auto_at (r, NULL, "train_batch_size");
  gboolean micro_auto = auto_at (r, NULL, "train_micro_batch_size_per_gpu");
  gboolean steps_auto = auto_at (r, NULL, "gradient_accumulation_steps");
  gboolean batch_known = !isnan (number_at (r, NULL, "train_batch_size"));
  gboolean micro_known = !isnan (number_at (r, NULL, "train_micro_batch_size_per_gpu"));

  if (micro_auto)
    {
      if (batch_known)
        resolve (r, NULL, "train_micro_batch_size_per_gpu", json_node_init_null (json_node_alloc ()),
                 "derived from train_batch_size / (gradient_accumulation_steps * world size) "
                 "once the world size is known");
      else
        {
          resolve (r, NULL, "train_micro_batch_size_per_gpu", new_int (HF_MICRO_BATCH),
                   "the Trainer's default --per_device_train_batch_size");
          micro_known = TRUE;
        }
    }
  if (steps_auto)
    {
      if (batch_known && micro_known)
        resolve (r, NULL, "gradient_accumulation_steps", json_node_init_null (json_node_alloc ()),
                 "derived from train_batch_size / (train_micro_batch_size_per_gpu * world size) "
                 "once the world size is known");
      else
        resolve (r, NULL, "gradient_accumulation_steps", new_int (HF_GRAD_ACCUM_STEPS),
                 "the Trainer's default --gradient_accumulation_steps");
    }
  if (batch_auto)
    resolve (r, NULL, "train_batch_size", json_node_init_null (json_node_alloc ()),
             "derived as train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
             "world size once the world size is known");
}

static void
resolve_clipping (Resolver *r)
{
  if (auto_at (r, NULL, "gradient_clipping"))
    resolve (r, NULL, "gradient_clipping", new_double (HF_MAX_GRAD_NORM),
             "the Trainer's default --max_grad_norm");
}

static void
resolve_optimizer (Resolver *r)
{
  const gchar *params = "optimizer.params";

  if (auto_at (r, params, "lr"))
    resolve (r, params, "lr", new_double (HF_LEARNING_RATE), "the Trainer's default --learning_rate");
  if (auto_at (r, params, "betas"))
    {
      JsonArray *betas = json_array_new ();

      json_array_add_double_element (betas, HF_ADAM_BETA1);
      json_array_add_double_element (betas, HF_ADAM_BETA2);
      resolve (r, params, "betas", json_node_init_array (json_node_alloc (), betas),
               "the Trainer's defaults --adam_beta1 and --adam_beta2");
      json_array_unref (betas);
    }
  if (auto_at (r, params, "eps"))
    resolve (r, params, "eps", new_double (HF_ADAM_EPSILON), "the Trainer's default --adam_epsilon");
  if (auto_at (r, params, "weight_decay"))
    resolve (r, params, "weight_decay", new_double (HF_WEIGHT_DECAY),
             "the Trainer's default --weight_decay");
}

static void
resolve_scheduler (Resolver *r)
{
  const gchar *params = "scheduler.params";

  if (auto_at (r, params, "warmup_min_lr"))
    resolve (r, params, "warmup_min_lr", new_int (0), "the value the Trainer writes");
  if (auto_at (r, params, "warmup_max_lr"))
    {
      gdouble lr = number_at (r, "optimizer.params", "lr");

      if (!isnan (lr))
        resolve (r, params, "warmup_max_lr", new_double (lr),
                 "optimizer.params.lr: the Trainer sets both from --learning_rate");
      else
        resolve (r, params, "warmup_max_lr", new_double (HF_LEARNING_RATE),
                 "the Trainer's default --learning_rate");
    }
  if (auto_at (r, params, "warmup_num_steps"))
    resolve (r, params, "warmup_num_steps", new_int (HF_WARMUP_STEPS),
             "the Trainer's default --warmup_steps");
  /* total_num_steps needs the length of the run: left for an override. */
}

static void
resolve_sizes (Resolver *r)
{
  const gchar *zero = "zero_optimization";
  static const struct {
    const gchar *key;
    gint64       fallback;
  } sizes[] = {
    { "reduce_bucket_size", DS_REDUCE_BUCKET_SIZE },
    { "stage3_prefetch_bucket_size", DS_PREFETCH_BUCKET_SIZE },
    { "prefetch_bucket_size", DS_PREFETCH_BUCKET_SIZE },
    { "stage3_param_persistence_threshold", DS_PARAM_PERSISTENCE_THRESHOLD },
    { "param_persistence_threshold", DS_PARAM_PERSISTENCE_THRESHOLD },
  };
  gint64 h = r->hidden_size;

  for (gsize i = 0; i < G_N_ELEMENTS (sizes); i++)
    {
      const gchar *key = sizes[i].key;
      gint64 value;
      g_autofree gchar *why = NULL;

      if (!auto_at (r, zero, key))
        continue;
      if (h == 0)
        {
          resolve (r, zero, key, new_int (sizes[i].fallback),
                   "DeepSpeed's default; pass " HIDDEN_SIZE_PATH " to size it from the "
                   "model as the Trainer does");
          continue;
        }
      /* The Trainer's formulas (integrations/deepspeed.py). */
      if (i == 0)
        {
          value = h * h;
          why = g_strdup_printf ("%s^2, %s = %" G_GINT64_FORMAT,
                                 HIDDEN_SIZE_PATH, HIDDEN_SIZE_PATH, h);
        }
      else if (i <= 2)
        {
          value = (gint64) (0.9 * (gdouble) h * (gdouble) h);
          why = g_strdup_printf ("0.9 * %s^2, %s = %" G_GINT64_FORMAT,
                                 HIDDEN_SIZE_PATH, HIDDEN_SIZE_PATH, h);
        }
      else
        {
          value = 10 * h;
          why = g_strdup_printf ("10 * %s, %s = %" G_GINT64_FORMAT,
                                 HIDDEN_SIZE_PATH, HIDDEN_SIZE_PATH, h);
        }
      resolve (r, zero, key, new_int (value), why);
    }
}

void
_mixprec_config_resolve_auto (JsonNode            *root,
                              gint64               hidden_size,
                              MixprecConfigReport *report)
{
  Resolver r = { root, report, hidden_size };

  if (!JSON_NODE_HOLDS_OBJECT (root))
    return;
  resolve_precision (&r);
  resolve_batch (&r);
  resolve_clipping (&r);
  resolve_sizes (&r);
  resolve_optimizer (&r);
  resolve_scheduler (&r);
}
