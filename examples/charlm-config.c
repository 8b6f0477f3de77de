/* charlm-config.c — reads the DeepSpeed-style config and lets the command
 * line win over it. The options are written into the JSON before
 * libmixprec reads it a second time, so the engine, its schedule and the
 * model all see one configuration. */
#include "charlm-config.h"

/* The member @name of @object when it is an object, else NULL. */
static JsonObject *
object_member (JsonObject  *object,
               const gchar *name)
{
  JsonNode *node = json_object_get_member (object, name);

  return node != NULL && JSON_NODE_HOLDS_OBJECT (node) ? json_node_get_object (node) : NULL;
}

/* json-glib 1.6 writes some doubles as invalid JSON (1e-08 becomes
 * "1e-08.0"), so numbers are written here with g_ascii_dtostr(), which
 * gives the shortest text that reads back as the same double. Everything
 * else is written by json-glib. */
static void
write_node (GString  *out,
            JsonNode *node)
{
  if (JSON_NODE_HOLDS_OBJECT (node))
    {
      JsonObjectIter iter;
      const gchar *name;
      JsonNode *member;
      gboolean first = TRUE;

      g_string_append_c (out, '{');
      json_object_iter_init_ordered (&iter, json_node_get_object (node));
      while (json_object_iter_next_ordered (&iter, &name, &member))
        {
          g_autoptr(JsonNode) key = json_node_init_string (json_node_alloc (), name);
          g_autofree gchar *text = json_to_string (key, FALSE);

          g_string_append_printf (out, "%s%s:", first ? "" : ",", text);
          write_node (out, member);
          first = FALSE;
        }
      g_string_append_c (out, '}');
    }
  else if (JSON_NODE_HOLDS_ARRAY (node))
    {
      JsonArray *array = json_node_get_array (node);

      g_string_append_c (out, '[');
      for (guint i = 0; i < json_array_get_length (array); i++)
        {
          if (i > 0)
            g_string_append_c (out, ',');
          write_node (out, json_array_get_element (array, i));
        }
      g_string_append_c (out, ']');
    }
  else if (JSON_NODE_HOLDS_VALUE (node) && json_node_get_value_type (node) == G_TYPE_DOUBLE)
    {
      gchar text[G_ASCII_DTOSTR_BUF_SIZE];

      g_string_append (out, g_ascii_dtostr (text, sizeof text, json_node_get_double (node)));
    }
  else
    {
      g_autofree gchar *text = json_to_string (node, FALSE);

      g_string_append (out, text);
    }
}

/* The positive integer at @name in @object, or 0. */
static gint64
positive_int_member (JsonObject  *object,
                     const gchar *name)
{
  JsonNode *node = object != NULL ? json_object_get_member (object, name) : NULL;

  if (node == NULL || !JSON_NODE_HOLDS_VALUE (node) ||
      json_node_get_value_type (node) != G_TYPE_INT64 || json_node_get_int (node) <= 0)
    return 0;
  return json_node_get_int (node);
}

/* A decaying schedule ends where the run ends: a length given on the
 * command line stretches the schedule (warmup included) to it, and
 * without one the run is as long as the schedule. */
static void
fit_schedule (JsonObject *root,
              gint       *steps)
{
  JsonObject *scheduler = object_member (root, "scheduler");
  JsonObject *params = scheduler != NULL ? object_member (scheduler, "params") : NULL;
  gint64 total = positive_int_member (params, "total_num_steps");
  gint64 warmup = positive_int_member (params, "warmup_num_steps");

  if (total == 0 || total > G_MAXINT)
    return;
  if (*steps <= 0)
    {
      *steps = (gint) total;
      return;
    }
  json_object_set_int_member (params, "total_num_steps", *steps);
  if (warmup > 0)
    json_object_set_int_member (params, "warmup_num_steps",
                                MAX ((warmup * *steps + total / 2) / total, 1));
}

static void
apply_overrides (JsonObject      *root,
                 CharlmOverrides *overrides)
{
  if (overrides->micro_batch > 0)
    {
      json_object_set_int_member (root, "train_micro_batch_size_per_gpu", overrides->micro_batch);
      /* libmixprec derives train_batch_size from micro * gas * world. */
      if (json_object_has_member (root, "train_batch_size"))
        json_object_remove_member (root, "train_batch_size");
    }

  if (overrides->accumulation > 0)
    {
      json_object_set_int_member (root, "gradient_accumulation_steps", overrides->accumulation);
      if (json_object_has_member (root, "train_batch_size"))
        json_object_remove_member (root, "train_batch_size");
    }
  if (overrides->zero_stage >= 0)
    {
      JsonObject *zero = object_member (root, "zero_optimization");

      if (zero == NULL)
        {
          zero = json_object_new ();
          json_object_set_object_member (root, "zero_optimization", zero);
        }
      json_object_set_int_member (zero, "stage", overrides->zero_stage);
    }

  if (overrides->device != NULL)
    {
      JsonObject *mixprec = object_member (root, "mixprec");

      if (mixprec == NULL)
        {
          mixprec = json_object_new ();
          json_object_set_object_member (root, "mixprec", mixprec);
        }
      json_object_set_string_member (mixprec, "device", overrides->device);
    }

  if (overrides->fp8_recipe != NULL)
    {
      JsonObject *fp8 = object_member (root, "fp8");

      if (fp8 == NULL)
        {
          fp8 = json_object_new ();
          json_object_set_object_member (root, "fp8", fp8);
        }
      if (g_str_equal (overrides->fp8_recipe, "off"))
        json_object_set_boolean_member (fp8, "enabled", FALSE);
      else
        {
          json_object_set_boolean_member (fp8, "enabled", TRUE);
          json_object_set_string_member (fp8, "recipe", overrides->fp8_recipe);
        }
    }

  fit_schedule (root, &overrides->steps);

  if (overrides->seed_set)
    {
      JsonObject *section = object_member (root, "mixprec");

      if (section == NULL)
        {
          section = json_object_new ();
          json_object_set_object_member (root, "mixprec", section);
        }
      json_object_set_int_member (section, "seed", (gint64) overrides->seed);
    }
}

gboolean
charlm_option_seed (const gchar *option_name,
                    const gchar *value,
                    gpointer     data,
                    GError     **error)
{
  CharlmOverrides *overrides = data;
  guint64 seed;

  if (!g_ascii_string_to_unsigned (value, 10, 0, G_MAXINT64, &seed, error))
    {
      g_prefix_error (error, "%s: ", option_name);
      return FALSE;
    }
  overrides->seed = seed;
  overrides->seed_set = TRUE;
  return TRUE;
}

gboolean
charlm_option_fp8 (const gchar *option_name,
                   const gchar *value,
                   gpointer     data,
                   GError     **error)
{
  CharlmOverrides *overrides = data;
  /* Static strings: the overrides keep a pointer to one. */
  static const gchar *const recipes[] = { "delayed", "current", "mx", "off", NULL };

  for (guint i = 0; recipes[i] != NULL; i++)
    if (g_str_equal (value, recipes[i]))
      {
        overrides->fp8_recipe = recipes[i];
        return TRUE;
      }
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
               "%s: unknown recipe \"%s\" (delayed, current, mx or off)", option_name, value);
  return FALSE;
}

/* Returns the config of @path with @overrides applied; on return
 * overrides->steps is the length of the run when the file or the command
 * line gave one, else left as it was. */
MixprecConfig *
charlm_config_load (const gchar     *path,
                    CharlmOverrides *overrides,
                    GError         **error)
{
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GString) data = NULL;

  /* libmixprec reads the file first: its checks are stricter than
   * json-glib's and its messages name the file. */
  config = mixprec_config_new_from_file (path, error);
  if (config == NULL)
    return NULL;

  parser = json_parser_new ();
  if (!json_parser_load_from_mapped_file (parser, path, error))
    {
      g_prefix_error (error, "%s: ", path);
      return NULL;
    }
  apply_overrides (json_node_get_object (json_parser_get_root (parser)), overrides);
  data = g_string_new (NULL);
  write_node (data, json_parser_get_root (parser));

  g_clear_object (&config);
  config = mixprec_config_new_from_data (data->str, data->len, error);
  if (config == NULL || !mixprec_config_resolve_batch (config, 1, error))
    {
      g_prefix_error (error, "%s: ", path);
      return NULL;
    }
  return g_steal_pointer (&config);
}
