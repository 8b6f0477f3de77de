/* mixprec-json-read.c — the helpers every JSON reader of the library
 * shares: the config's reader and its "auto" resolver, and the checkpoint
 * manifest's. One copy, so that a path or a value reads the same in every
 * message. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec-config-private.h"
#include "mixprec-json-read-private.h"

/* ---------------------------------------------------------------- paths */

static gboolean
is_plain_key (const gchar *key)
{
  if (*key == '\0')
    return FALSE;
  for (const gchar *p = key; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '_' && *p != '-')
      return FALSE;
  return TRUE;
}

void
_mixprec_json_path_append_key (GString     *path,
                               const gchar *key)
{
  if (is_plain_key (key))
    {
      if (path->len > 0)
        g_string_append_c (path, '.');
      g_string_append (path, key);
      return;
    }

  /* Keys with dots, spaces or control characters are quoted so that a
   * message stays on one line and the path stays unambiguous. */
  g_string_append (path, "[\"");
  for (const gchar *p = key; *p; p = g_utf8_next_char (p))
    {
      gunichar c = g_utf8_get_char (p);

      if (c == '"' || c == '\\')
        g_string_append_printf (path, "\\%c", (gchar) c);
      else if (c < 0x20 || c == 0x7f || (c >= 0x80 && !g_unichar_isprint (c)))
        g_string_append_printf (path, "\\u%04X", c);
      else
        g_string_append_unichar (path, c);
    }
  g_string_append (path, "\"]");
}

void
_mixprec_json_path_append_index (GString *path,
                                 guint    index)
{
  g_string_append_printf (path, "[%u]", index);
}

gchar *
_mixprec_json_join_path (const gchar *prefix,
                         const gchar *key)
{
  GString *path = g_string_new (prefix);

  _mixprec_json_path_append_key (path, key);
  return g_string_free (path, FALSE);
}

gchar *
_mixprec_json_index_path (const gchar *prefix,
                          guint        index)
{
  GString *path = g_string_new (prefix);

  _mixprec_json_path_append_index (path, index);
  return g_string_free (path, FALSE);
}

/* ---------------------------------------------------------------- values */

gchar *
_mixprec_json_show (JsonNode *node)
{
  g_autofree gchar *text = json_to_string (node, FALSE);

  /* A message quotes the start of a long value: enough to recognise it,
   * short enough to keep the message on one line. */
  if (g_utf8_strlen (text, -1) > 60)
    {
      gchar *cut = g_utf8_offset_to_pointer (text, 57);

      return g_strdup_printf ("%.*s...", (gint) (cut - text), text);
    }
  return g_steal_pointer (&text);
}

gchar *
_mixprec_json_show_whole (JsonNode *node)
{
  g_autoptr(GString) text = g_string_new (NULL);

  _mixprec_json_write (text, node, 0);
  return g_string_free (g_steal_pointer (&text), FALSE);
}

gboolean
_mixprec_json_is_auto (JsonNode *node)
{
  return node != NULL && JSON_NODE_HOLDS_VALUE (node)
         && json_node_get_value_type (node) == G_TYPE_STRING
         && g_str_equal (json_node_get_string (node), "auto");
}

gboolean
_mixprec_json_node_to_integer (JsonNode *node,
                               gint64   *out)
{
  GType type;

  if (!JSON_NODE_HOLDS_VALUE (node))
    return FALSE;
  type = json_node_get_value_type (node);
  if (type == G_TYPE_INT64)
    {
      *out = json_node_get_int (node);
      return TRUE;
    }
  if (type == G_TYPE_DOUBLE)
    {
      gdouble d = json_node_get_double (node);

      if (isfinite (d) && d == floor (d) && fabs (d) <= 9007199254740992.0)
        {
          *out = (gint64) d;
          return TRUE;
        }
    }
  return FALSE;
}

gboolean
_mixprec_json_node_to_number (JsonNode *node,
                              gdouble  *out)
{
  GType type;

  if (!JSON_NODE_HOLDS_VALUE (node))
    return FALSE;
  type = json_node_get_value_type (node);
  if (type == G_TYPE_INT64)
    *out = (gdouble) json_node_get_int (node);
  else if (type == G_TYPE_DOUBLE)
    *out = json_node_get_double (node);
  else
    return FALSE;
  return isfinite (*out);
}
