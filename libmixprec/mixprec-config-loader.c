/* mixprec-config-loader.c — MixprecConfigLoader: overrides by JSON path
 * (what `mixprec-inspect --set` and a trainer's command line set), written
 * into each document before its "auto" placeholders are resolved and it
 * is read. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"

/**
 * MixprecConfigLoader:
 *
 * Reads #MixprecConfig documents with overrides: values given by a dotted
 * JSON path, such as `optimizer.params.lr` or
 * `zero_optimization.reduce_bucket_size`, that replace what the document
 * holds there (a Hugging Face `"auto"` placeholder, typically) or add the
 * key when it is absent.
 *
 * ```c
 * g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
 *
 * mixprec_config_loader_set_override (loader, "optimizer.params.lr", "3e-4", NULL);
 * mixprec_config_loader_set_override (loader, "model.hidden_size", "4096", NULL);
 * config = mixprec_config_loader_load_file (loader, "ds_config.json", &error);
 * ```
 *
 * The path `model.hidden_size` is not a key of the document: it gives the
 * model's hidden size, from which the `"auto"` ZeRO sizes are derived as
 * the Hugging Face Trainer derives them (see mixprec.json(5)).
 *
 * An override whose path names no setting of the document is an error of
 * the load, %MIXPREC_CONFIG_ERROR_UNKNOWN_KEY, like a misspelt key.
 *
 * Since: 1.1
 */
struct _MixprecConfigLoader
{
  GObject parent_instance;

  GPtrArray *overrides;   /* MixprecConfigOverride, in the order set */
};

G_DEFINE_FINAL_TYPE (MixprecConfigLoader, mixprec_config_loader, G_TYPE_OBJECT)

static void
mixprec_config_loader_finalize (GObject *object)
{
  MixprecConfigLoader *self = MIXPREC_CONFIG_LOADER (object);

  g_ptr_array_unref (self->overrides);
  G_OBJECT_CLASS (mixprec_config_loader_parent_class)->finalize (object);
}

static void
mixprec_config_loader_class_init (MixprecConfigLoaderClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_config_loader_finalize;
}

static void
mixprec_config_loader_init (MixprecConfigLoader *self)
{
  self->overrides = g_ptr_array_new_with_free_func ((GDestroyNotify) _mixprec_config_override_free);
}

/**
 * mixprec_config_loader_new:
 *
 * Creates a loader with no override: it reads documents as
 * mixprec_config_new_from_file() does.
 *
 * Returns: (transfer full): a new #MixprecConfigLoader
 *
 * Since: 1.1
 */
MixprecConfigLoader *
mixprec_config_loader_new (void)
{
  return g_object_new (MIXPREC_TYPE_CONFIG_LOADER, NULL);
}

/**
 * mixprec_config_loader_set_override:
 * @self: a #MixprecConfigLoader
 * @path: JSON keys joined by dots, such as `zero_optimization.stage`
 * @value: the value: JSON text (`3e-4`, `true`, `[0.9, 0.95]`,
 *   `"AdamW"`), or else a string written without its quotes (`AdamW`)
 * @error: return location for a #GError
 *
 * Sets the value every document this loader reads holds at @path. Setting
 * the same path again replaces the value. Objects on the way that the
 * document lacks are created.
 *
 * Returns: %TRUE; %FALSE with @error set to
 *   %MIXPREC_CONFIG_ERROR_UNKNOWN_KEY when @path has an empty key, or to
 *   %MIXPREC_CONFIG_ERROR_INVALID_VALUE when @value is empty
 *
 * Since: 1.1
 */
gboolean
mixprec_config_loader_set_override (MixprecConfigLoader  *self,
                                    const gchar          *path,
                                    const gchar          *value,
                                    GError              **error)
{
  g_auto(GStrv) keys = NULL;
  g_autoptr(JsonNode) node = NULL;
  g_autofree gchar *stripped = NULL;
  MixprecConfigOverride *override;

  g_return_val_if_fail (MIXPREC_IS_CONFIG_LOADER (self), FALSE);
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (value != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  keys = _mixprec_config_override_split (path, error);
  if (keys == NULL)
    return FALSE;
  stripped = g_strstrip (g_strdup (value));
  if (*stripped == '\0')
    {
      g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                   "%s: the override has no value; write path=VALUE with VALUE in JSON, "
                   "such as %s=true or %s=\"text\"", path, path, path);
      return FALSE;
    }
  /* Strict JSON first (with its own scanner's rules); anything else is
   * the text of a string, so that --set optimizer.type=AdamW works. */
  {
    MixprecConfigReport report;

    _mixprec_config_report_init (&report);
    if (_mixprec_json_scan (value, strlen (value), &report) && report.problems->len == 0)
      node = json_from_string (value, NULL);
    _mixprec_config_report_clear (&report);
  }
  if (node == NULL)
    node = json_node_init_string (json_node_alloc (), value);

  for (guint i = 0; i < self->overrides->len; i++)
    {
      MixprecConfigOverride *old = g_ptr_array_index (self->overrides, i);

      if (g_str_equal (old->path, path))
        {
          g_ptr_array_remove_index (self->overrides, i);
          break;
        }
    }
  override = g_new0 (MixprecConfigOverride, 1);
  override->path = g_strdup (path);
  override->value = g_steal_pointer (&node);
  g_ptr_array_add (self->overrides, override);
  return TRUE;
}

/**
 * mixprec_config_loader_parse_override:
 * @self: a #MixprecConfigLoader
 * @assignment: `path=VALUE`, as `mixprec-inspect --set` takes it
 * @error: return location for a #GError
 *
 * Splits @assignment at its first `=` and calls
 * mixprec_config_loader_set_override().
 *
 * Returns: %TRUE; %FALSE with @error set when @assignment has no `=` or
 *   mixprec_config_loader_set_override() refuses it
 *
 * Since: 1.1
 */
gboolean
mixprec_config_loader_parse_override (MixprecConfigLoader  *self,
                                      const gchar          *assignment,
                                      GError              **error)
{
  const gchar *eq;
  g_autofree gchar *path = NULL;

  g_return_val_if_fail (MIXPREC_IS_CONFIG_LOADER (self), FALSE);
  g_return_val_if_fail (assignment != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  eq = strchr (assignment, '=');
  if (eq == NULL)
    {
      g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                   "%s: not an override; write path=VALUE, such as "
                   "optimizer.params.lr=3e-4", assignment);
      return FALSE;
    }
  path = g_strndup (assignment, eq - assignment);
  return mixprec_config_loader_set_override (self, path, eq + 1, error);
}

/**
 * mixprec_config_loader_list_overrides:
 * @self: a #MixprecConfigLoader
 *
 * Lists the overrides in the order they were first set, each as
 * `path=JSON`.
 *
 * Returns: (transfer full): the overrides, possibly none
 *
 * Since: 1.1
 */
GStrv
mixprec_config_loader_list_overrides (MixprecConfigLoader *self)
{
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();

  g_return_val_if_fail (MIXPREC_IS_CONFIG_LOADER (self), NULL);

  for (guint i = 0; i < self->overrides->len; i++)
    {
      MixprecConfigOverride *override = g_ptr_array_index (self->overrides, i);
      g_autoptr(GString) line = g_string_new (override->path);

      g_string_append_c (line, '=');
      _mixprec_json_write (line, override->value, 0);
      g_strv_builder_add (builder, line->str);
    }
  return g_strv_builder_end (builder);
}

/**
 * mixprec_config_loader_load_file:
 * @self: a #MixprecConfigLoader
 * @path: (type filename): a JSON file
 * @error: return location for a #GError
 *
 * Reads a configuration from a file with the overrides applied. See
 * mixprec_config_new_from_file() for how problems are reported.
 *
 * Returns: (transfer full) (nullable): a new #MixprecConfig, or %NULL with
 *   @error set
 *
 * Since: 1.1
 */
MixprecConfig *
mixprec_config_loader_load_file (MixprecConfigLoader  *self,
                                 const gchar          *path,
                                 GError              **error)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG_LOADER (self), NULL);
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_config_new_from_file (path, self->overrides, error);
}

/**
 * mixprec_config_loader_load_data:
 * @self: a #MixprecConfigLoader
 * @data: a JSON document
 * @error: return location for a #GError
 *
 * Reads a configuration from a string with the overrides applied.
 *
 * Returns: (transfer full) (nullable): a new #MixprecConfig, or %NULL with
 *   @error set
 *
 * Since: 1.1
 */
MixprecConfig *
mixprec_config_loader_load_data (MixprecConfigLoader  *self,
                                 const gchar          *data,
                                 GError              **error)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG_LOADER (self), NULL);
  g_return_val_if_fail (data != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_config_new_from_bytes (data, strlen (data), NULL, self->overrides, error);
}
