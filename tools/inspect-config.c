/* inspect-config.c — `mixprec-inspect --config FILE`: validates a
 * configuration, prints what libmixprec will do with it, and reports every
 * problem at once. */
#include "config.h"

#include "inspect-private.h"

MixprecConfig *
inspect_load_config (const gchar         *path,
                     const gchar * const *sets,
                     GError             **error)
{
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();

  for (guint i = 0; sets != NULL && sets[i] != NULL; i++)
    if (!mixprec_config_loader_parse_override (loader, sets[i], error))
      return NULL;
  if (path == NULL)
    return mixprec_config_loader_load_data (loader, "{}", error);
  return mixprec_config_loader_load_file (loader, path, error);
}

int
inspect_config (const gchar         *path,
                const gchar * const *sets)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = inspect_load_config (path, sets, &error);
  g_autoptr(MixprecPrecisionPolicy) policy = NULL;
  g_autofree gchar *display = g_filename_display_name (path);
  g_autofree gchar *text = NULL;
  GStrv warnings;

  if (config == NULL)
    {
      g_auto(GStrv) lines = g_strsplit (error->message, "\n", -1);

      for (guint i = 0; lines[i] != NULL; i++)
        g_printerr ("error: %s\n", lines[i]);
      g_printerr ("%s: %u problem%s; nothing was loaded\n", display,
                  g_strv_length (lines), g_strv_length (lines) == 1 ? "" : "s");
      return 1;
    }

  /* A configuration that loads always yields a policy; building it here
   * keeps the tool honest should that ever change. */
  policy = mixprec_precision_policy_new_from_config (config, &error);
  if (policy == NULL)
    {
      g_printerr ("error: %s: %s\n", display, error->message);
      return 1;
    }

  warnings = mixprec_config_get_warnings (config);
  for (guint i = 0; warnings[i] != NULL; i++)
    g_printerr ("warning: %s: %s\n", display, warnings[i]);

  text = mixprec_config_to_data (config, NULL);
  g_print ("%s", text);
  return 0;
}
