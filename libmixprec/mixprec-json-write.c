/* mixprec-json-write.c — prints a JSON tree as indented text that reads
 * back to the same values.
 *
 * json-glib 1.6's generator appends ".0" to every double whose text has no
 * '.', exponents included, and writes 1e-08 as the invalid "1e-08.0"; it
 * also prints 3e-4 as 0.00029999999999999997. This writer prints each
 * double with the fewest digits that read back to the same bits. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-config-private.h"

static void
write_double (GString *out,
              gdouble  value)
{
  gchar buffer[G_ASCII_DTOSTR_BUF_SIZE];
  gboolean looks_integral = TRUE;

  /* The shortest of %.1g ... %.17g that reads back exactly; %.17g always does. */
  for (gint digits = 1; digits <= 17; digits++)
    {
      gchar format[8];

      g_snprintf (format, sizeof format, "%%.%dg", digits);
      g_ascii_formatd (buffer, sizeof buffer, format, value);
      if (g_ascii_strtod (buffer, NULL) == value)
        break;
    }
  for (const gchar *p = buffer; *p; p++)
    if (*p == '.' || *p == 'e' || *p == 'E')
      looks_integral = FALSE;
  g_string_append (out, buffer);
  /* Keep it a double when read back: 1.0, not 1. */
  if (looks_integral)
    g_string_append (out, ".0");
}

static void
write_string (GString     *out,
              const gchar *s)
{
  g_string_append_c (out, '"');
  for (const guchar *p = (const guchar *) s; *p; p++)
    {
      switch (*p)
        {
        case '"':
          g_string_append (out, "\\\"");
          break;
        case '\\':
          g_string_append (out, "\\\\");
          break;
        case '\n':
          g_string_append (out, "\\n");
          break;
        case '\r':
          g_string_append (out, "\\r");
          break;
        case '\t':
          g_string_append (out, "\\t");
          break;
        case '\b':
          g_string_append (out, "\\b");
          break;
        case '\f':
          g_string_append (out, "\\f");
          break;
        default:
          if (*p < 0x20 || *p == 0x7f)
            g_string_append_printf (out, "\\u%04x", *p);
          else
            g_string_append_c (out, (gchar) *p);
        }
    }
  g_string_append_c (out, '"');
}

static void
newline (GString *out,
         guint    level)
{
  g_string_append_c (out, '\n');
  for (guint i = 0; i < level; i++)
    g_string_append (out, "  ");
}

void
_mixprec_json_write (GString  *out,
                     JsonNode *node,
                     guint     level)
{
  switch (json_node_get_node_type (node))
    {
    case JSON_NODE_OBJECT:
      {
        JsonObject *o = json_node_get_object (node);
        g_autoptr(GList) members = json_object_get_members (o);

        if (members == NULL)
          {
            g_string_append (out, "{}");
            break;
          }
        g_string_append_c (out, '{');
        for (GList *m = members; m != NULL; m = m->next)
          {
            newline (out, level + 1);
            write_string (out, m->data);
            g_string_append (out, ": ");
            _mixprec_json_write (out, json_object_get_member (o, m->data), level + 1);
            if (m->next != NULL)
              g_string_append_c (out, ',');
          }
        newline (out, level);
        g_string_append_c (out, '}');
        break;
      }
    case JSON_NODE_ARRAY:
      {
        JsonArray *a = json_node_get_array (node);
        guint n = json_array_get_length (a);
        gboolean flat = TRUE;

        /* Short arrays of scalars stay on one line: [0.9, 0.999]. */
        for (guint i = 0; i < n; i++)
          if (!JSON_NODE_HOLDS_VALUE (json_array_get_element (a, i))
              && !JSON_NODE_HOLDS_NULL (json_array_get_element (a, i)))
            flat = FALSE;
        g_string_append_c (out, '[');
        for (guint i = 0; i < n; i++)
          {
            if (flat)
              g_string_append (out, i > 0 ? ", " : "");
            else
              newline (out, level + 1);
            _mixprec_json_write (out, json_array_get_element (a, i), level + 1);
            if (!flat && i + 1 < n)
              g_string_append_c (out, ',');
          }
        if (!flat && n > 0)
          newline (out, level);
        g_string_append_c (out, ']');
        break;
      }
    case JSON_NODE_NULL:
      g_string_append (out, "null");
      break;
    case JSON_NODE_VALUE:
    default:
      {
        GType type = json_node_get_value_type (node);

        if (type == G_TYPE_BOOLEAN)
          g_string_append (out, json_node_get_boolean (node) ? "true" : "false");
        else if (type == G_TYPE_INT64)
          g_string_append_printf (out, "%" G_GINT64_FORMAT, json_node_get_int (node));
        else if (type == G_TYPE_DOUBLE)
          write_double (out, json_node_get_double (node));
        else if (type == G_TYPE_STRING)
          write_string (out, json_node_get_string (node));
        else
          g_string_append (out, "null");
        break;
      }
    }
}
