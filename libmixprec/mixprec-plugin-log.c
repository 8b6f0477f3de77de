/* mixprec-plugin-log.c — the logger the host table hands every plugin:
 * its messages go to GLib's structured log under the plugin's own log
 * domain, "Mixprec-NAME", with its name in the field MIXPREC_PLUGIN. */
#include "config.h"

#include <stdarg.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-registry-private.h"

#define DOMAIN_PREFIX "Mixprec-"

gpointer
_mixprec_plugin_log_data_new (const gchar *name)
{
  g_autofree gchar *domain = g_strconcat (DOMAIN_PREFIX, name, NULL);

  /* Interned: it outlives the plugin object, as the ABI promises a plugin
   * that keeps its logger. */
  return (gpointer) g_intern_string (domain);
}

static GLogLevelFlags
glib_level (MixprecPluginLogLevel level)
{
  switch (level)
    {
    case MIXPREC_PLUGIN_LOG_WARNING:
      return G_LOG_LEVEL_WARNING;
    case MIXPREC_PLUGIN_LOG_MESSAGE:
      return G_LOG_LEVEL_MESSAGE;
    case MIXPREC_PLUGIN_LOG_INFO:
      return G_LOG_LEVEL_INFO;
    default:
      return G_LOG_LEVEL_DEBUG;
    }
}

/* The plugin's text as a terminal may show it: valid UTF-8 without
 * control characters, which could otherwise drive the user's terminal. */
static gchar *
printable (const gchar *text)
{
  gchar *shown = g_utf8_make_valid (text, -1);

  for (gchar *c = shown; *c != '\0'; c++)
    if ((guchar) *c < 0x20 || *c == 0x7f)
      *c = '?';
  return shown;
}

void
_mixprec_plugin_log (void                 *log_data,
                     MixprecPluginLogLevel level,
                     const char           *file,
                     int                   line,
                     const char           *func,
                     const char           *format,
                     ...)
{
  const gchar *domain = log_data;
  g_autofree gchar *text = NULL;
  g_autofree gchar *message = NULL;
  g_autofree gchar *shown_file = printable (file != NULL ? file : "");
  g_autofree gchar *shown_func = printable (func != NULL ? func : "");
  gchar line_text[16];
  va_list args;

  g_return_if_fail (domain != NULL && g_str_has_prefix (domain, DOMAIN_PREFIX));
  if (format == NULL)
    return;

  va_start (args, format);
  text = g_strdup_vprintf (format, args);
  va_end (args);
  message = printable (text);
  g_snprintf (line_text, sizeof line_text, "%d", line);

  /* Every value but MESSAGE's is a plain string, not a format. */
  g_log_structured (domain, glib_level (level),
                    "MIXPREC_PLUGIN", domain + strlen (DOMAIN_PREFIX),
                    "CODE_FILE", shown_file,
                    "CODE_LINE", line_text,
                    "CODE_FUNC", shown_func,
                    "MESSAGE", "%s", message);
}
