/* mixprec-json-scan.c — a strict RFC 8259 check that runs before json-glib.
 *
 * json-glib is lenient where a configuration must not be: it accepts
 * comments, single quotes, hexadecimal and leading-zero numbers, wraps
 * integers beyond 64 bits around (99999999999999999999 reads as -1), turns
 * 1e400 into infinity, keeps the last of two equal keys, and recurses once
 * per nesting level. This scanner refuses all of that, with the JSON path
 * and the line and column of the problem, so that json-glib only ever sees
 * documents it reads exactly. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"

typedef struct
{
  gboolean    is_object;
  gchar      *key;           /* the member being read, in an object */
  guint       index;         /* the element being read, in an array */
  GHashTable *keys;          /* key -> line of first occurrence */
} Frame;

typedef struct
{
  const guchar *p;
  const guchar *end;
  const guchar *line_start;
  guint         line;
  guint         depth;
  Frame         frames[_MIXPREC_CONFIG_MAX_DEPTH + 1];
  MixprecConfigReport *report;
} Scanner;

static gchar *
current_path (Scanner *s)
{
  GString *path = g_string_new (NULL);

  for (guint i = 0; i < s->depth; i++)
    {
      Frame *f = &s->frames[i];

      if (f->is_object && f->key != NULL)
        _mixprec_json_path_append_key (path, f->key);
      else if (!f->is_object)
        _mixprec_json_path_append_index (path, f->index);
    }
  if (path->len == 0)
    g_string_assign (path, "(top level)");
  return g_string_free (path, FALSE);
}

static guint
current_column (Scanner *s)
{
  guint column = 1;

  /* Columns count characters, not bytes: skip UTF-8 continuation bytes. */
  for (const guchar *q = s->line_start; q < s->p; q++)
    if ((*q & 0xC0) != 0x80)
      column++;
  return column;
}

static gchar *
describe_here (Scanner *s)
{
  if (s->p >= s->end)
    return g_strdup ("end of input");
  if (*s->p >= 0x20 && *s->p < 0x7f)
    return g_strdup_printf ("'%c'", *s->p);
  return g_strdup_printf ("byte 0x%02X", *s->p);
}

/* A syntax problem: the scan cannot go on. */
static gboolean
syntax_error (Scanner     *s,
              const gchar *expected)
{
  g_autofree gchar *path = current_path (s);
  g_autofree gchar *got = describe_here (s);

  _mixprec_config_report_error (s->report, MIXPREC_CONFIG_ERROR_PARSE,
                                "%s: invalid JSON at line %u, column %u: %s, got %s",
                                path, s->line, current_column (s), expected, got);
  return FALSE;
}

static void
skip_whitespace (Scanner *s)
{
  while (s->p < s->end)
    {
      if (*s->p == '\n')
        {
          s->line++;
          s->line_start = s->p + 1;
        }
      else if (*s->p != ' ' && *s->p != '\t' && *s->p != '\r')
        return;
      s->p++;
    }
}

static gint
hex_value (guchar c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

static gboolean
read_hex4 (Scanner  *s,
           gunichar *out)
{
  gunichar value = 0;

  for (guint i = 0; i < 4; i++)
    {
      gint h = s->p < s->end ? hex_value (*s->p) : -1;

      if (h < 0)
        return syntax_error (s, "expected four hexadecimal digits after \\u");
      value = value * 16 + (gunichar) h;
      s->p++;
    }
  *out = value;
  return TRUE;
}

/* Reads a string; appends its decoded text to @out when not NULL. */
static gboolean
scan_string (Scanner *s,
             GString *out)
{
  s->p++;                       /* the opening quote */
  while (TRUE)
    {
      guchar c;

      if (s->p >= s->end)
        return syntax_error (s, "expected the closing '\"' of a string");
      c = *s->p;
      if (c == '"')
        {
          s->p++;
          return TRUE;
        }
      if (c < 0x20)
        return syntax_error (s, "control characters in strings must be escaped");
      if (c != '\\')
        {
          /* The whole input was UTF-8-validated up front. */
          const guchar *next = (const guchar *) g_utf8_next_char (s->p);

          if (out != NULL)
            g_string_append_len (out, (const gchar *) s->p, next - s->p);
          s->p = next;
          continue;
        }

      s->p++;
      if (s->p >= s->end)
        return syntax_error (s, "expected an escape character after '\\'");
      c = *s->p;
      if (c == 'u')
        {
          gunichar u;

          s->p++;
          if (!read_hex4 (s, &u))
            return FALSE;
          if (u >= 0xDC00 && u <= 0xDFFF)
            return syntax_error (s, "a \\u escape names a lone low surrogate");
          if (u >= 0xD800 && u <= 0xDBFF)
            {
              gunichar low;

              if (s->end - s->p < 2 || s->p[0] != '\\' || s->p[1] != 'u')
                return syntax_error (s, "a \\u high surrogate must be followed by a \\u low surrogate");
              s->p += 2;
              if (!read_hex4 (s, &low))
                return FALSE;
              if (low < 0xDC00 || low > 0xDFFF)
                return syntax_error (s, "a \\u high surrogate must be followed by a \\u low surrogate");
              u = 0x10000 + ((u - 0xD800) << 10) + (low - 0xDC00);
            }
          if (u == 0)
            return syntax_error (s, "strings may not contain U+0000");
          if (out != NULL)
            g_string_append_unichar (out, u);
          continue;
        }
      if (strchr ("\"\\/bfnrt", c) == NULL)
        return syntax_error (s, "expected one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u");
      if (out != NULL)
        {
          static const gchar from[] = "\"\\/bfnrt";
          static const gchar to[] = "\"\\/\b\f\n\r\t";

          g_string_append_c (out, to[strchr (from, c) - from]);
        }
      s->p++;
    }
}

static void
range_error (Scanner     *s,
             const gchar *rule,
             const gchar *text,
             gsize        length)
{
  g_autofree gchar *path = current_path (s);
  g_autofree gchar *shown = g_strndup (text, MIN (length, 40));

  _mixprec_config_report_error (s->report, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                                "%s: %s, got %s%s", path, rule, shown,
                                length > 40 ? "..." : "");
  g_hash_table_add (s->report->reported, g_strdup (path));
}

static gboolean
is_digit (Scanner *s)
{
  return s->p < s->end && *s->p >= '0' && *s->p <= '9';
}

static gboolean
scan_number (Scanner *s)
{
  const guchar *start = s->p;
  gboolean integral = TRUE;
  g_autofree gchar *text = NULL;

  if (*s->p == '-')
    s->p++;
  if (!is_digit (s))
    return syntax_error (s, "expected a digit");
  if (*s->p == '0')
    {
      s->p++;
      if (is_digit (s))
        return syntax_error (s, "numbers may not have leading zeros");
    }
  else
    while (is_digit (s))
      s->p++;
  if (s->p < s->end && *s->p == '.')
    {
      integral = FALSE;
      s->p++;
      if (!is_digit (s))
        return syntax_error (s, "expected a digit after the decimal point");
      while (is_digit (s))
        s->p++;
    }
  if (s->p < s->end && (*s->p == 'e' || *s->p == 'E'))
    {
      integral = FALSE;
      s->p++;
      if (s->p < s->end && (*s->p == '+' || *s->p == '-'))
        s->p++;
      if (!is_digit (s))
        return syntax_error (s, "expected a digit in the exponent");
      while (is_digit (s))
        s->p++;
    }

  text = g_strndup ((const gchar *) start, s->p - start);
  if (integral)
    {
      gint64 value;

      /* json-glib stores integers in 64 bits and wraps larger ones. */
      if (!g_ascii_string_to_signed (text, 10, G_MININT64, G_MAXINT64, &value, NULL))
        range_error (s, "integer out of range (it must fit in 64 bits)",
                     text, s->p - start);
    }
  else
    {
      gdouble value = g_ascii_strtod (text, NULL);

      if (!isfinite (value))
        range_error (s, "number out of range (it must be a finite double)",
                     text, s->p - start);
    }
  return TRUE;
}

static gboolean
scan_literal (Scanner     *s,
              const gchar *word)
{
  gsize n = strlen (word);

  if ((gsize) (s->end - s->p) < n || memcmp (s->p, word, n) != 0)
    return syntax_error (s, "expected a value (object, array, string, number, true, false or null)");
  s->p += n;
  return TRUE;
}

static gboolean scan_value (Scanner *s);

static Frame *
push_frame (Scanner  *s,
            gboolean  is_object)
{
  Frame *f;

  if (s->depth >= _MIXPREC_CONFIG_MAX_DEPTH)
    {
      g_autofree gchar *path = current_path (s);

      _mixprec_config_report_error (s->report, MIXPREC_CONFIG_ERROR_PARSE,
                                    "%s: invalid JSON at line %u, column %u: nesting deeper than %d levels",
                                    path, s->line, current_column (s),
                                    _MIXPREC_CONFIG_MAX_DEPTH);
      return NULL;
    }
  f = &s->frames[s->depth++];
  f->is_object = is_object;
  f->key = NULL;
  f->index = 0;
  f->keys = NULL;
  return f;
}

static void
pop_frame (Scanner *s)
{
  Frame *f = &s->frames[--s->depth];

  g_clear_pointer (&f->key, g_free);
  g_clear_pointer (&f->keys, g_hash_table_unref);
}

static void
check_duplicate (Scanner *s,
                 Frame   *f,
                 guint    line)
{
  gpointer first_line;

  if (f->keys == NULL)
    f->keys = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  if (g_hash_table_lookup_extended (f->keys, f->key, NULL, &first_line))
    {
      g_autofree gchar *path = current_path (s);

      /* DeepSpeed refuses duplicates too (dict_raise_error_on_duplicate_keys):
       * whichever value won would be a silent guess. */
      _mixprec_config_report_error (s->report, MIXPREC_CONFIG_ERROR_DUPLICATE_KEY,
                                    "%s: key written twice in the same object "
                                    "(lines %u and %u); each key may appear once",
                                    path, GPOINTER_TO_UINT (first_line), line);
      g_hash_table_add (s->report->reported, g_steal_pointer (&path));
      return;
    }
  g_hash_table_insert (f->keys, g_strdup (f->key), GUINT_TO_POINTER (line));
}

static gboolean
scan_object (Scanner *s)
{
  Frame *f;

  s->p++;                       /* '{' */
  skip_whitespace (s);
  if (s->p < s->end && *s->p == '}')
    {
      s->p++;
      return TRUE;
    }
  if ((f = push_frame (s, TRUE)) == NULL)
    return FALSE;
  while (TRUE)
    {
      GString *key;
      guint line;

      skip_whitespace (s);
      if (s->p >= s->end || *s->p != '"')
        return syntax_error (s, "expected a '\"'-quoted member name");
      line = s->line;
      key = g_string_new (NULL);
      if (!scan_string (s, key))
        {
          g_string_free (key, TRUE);
          return FALSE;
        }
      g_free (f->key);
      f->key = g_string_free (key, FALSE);
      check_duplicate (s, f, line);
      skip_whitespace (s);
      if (s->p >= s->end || *s->p != ':')
        return syntax_error (s, "expected ':' after the member name");
      s->p++;
      if (!scan_value (s))
        return FALSE;
      skip_whitespace (s);
      if (s->p < s->end && *s->p == ',')
        {
          s->p++;
          continue;
        }
      if (s->p < s->end && *s->p == '}')
        {
          s->p++;
          pop_frame (s);
          return TRUE;
        }
      return syntax_error (s, "expected ',' or '}' after a member");
    }
}

static gboolean
scan_array (Scanner *s)
{
  Frame *f;

  s->p++;                       /* '[' */
  skip_whitespace (s);
  if (s->p < s->end && *s->p == ']')
    {
      s->p++;
      return TRUE;
    }
  if ((f = push_frame (s, FALSE)) == NULL)
    return FALSE;
  while (TRUE)
    {
      if (!scan_value (s))
        return FALSE;
      skip_whitespace (s);
      if (s->p < s->end && *s->p == ',')
        {
          s->p++;
          f->index++;
          continue;
        }
      if (s->p < s->end && *s->p == ']')
        {
          s->p++;
          pop_frame (s);
          return TRUE;
        }
      return syntax_error (s, "expected ',' or ']' after an array element");
    }
}

static gboolean
scan_value (Scanner *s)
{
  skip_whitespace (s);
  if (s->p >= s->end)
    return syntax_error (s, "expected a value");
  switch (*s->p)
    {
    case '{':
      return scan_object (s);
    case '[':
      return scan_array (s);
    case '"':
      return scan_string (s, NULL);
    case 't':
      return scan_literal (s, "true");
    case 'f':
      return scan_literal (s, "false");
    case 'n':
      return scan_literal (s, "null");
    default:
      if (*s->p == '-' || (*s->p >= '0' && *s->p <= '9'))
        return scan_number (s);
      if (*s->p == '/')
        return syntax_error (s, "JSON has no comments; expected a value");
      return syntax_error (s, "expected a value (object, array, string, number, true, false or null)");
    }
}

static gboolean
check_encoding (const gchar         *data,
                gsize                length,
                MixprecConfigReport *report)
{
  const gchar *bad;
  guint line = 1, column = 1;

  if (g_utf8_validate_len (data, length, &bad))
    return TRUE;
  for (const gchar *q = data; q < bad; q++)
    {
      if (*q == '\n')
        {
          line++;
          column = 1;
        }
      else if ((*q & 0xC0) != 0x80)
        column++;
    }
  if (*bad == '\0')
    _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_PARSE,
                                  "(top level): invalid JSON at line %u, column %u: "
                                  "a NUL byte; a configuration is UTF-8 text",
                                  line, column);
  else
    _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_PARSE,
                                  "(top level): invalid JSON at line %u, column %u: "
                                  "not UTF-8 text, got byte 0x%02X",
                                  line, column, (guchar) *bad);
  return FALSE;
}

gboolean
_mixprec_json_scan (const gchar         *data,
                    gsize                length,
                    MixprecConfigReport *report)
{
  Scanner s = { 0 };
  gboolean ok;

  if (!check_encoding (data, length, report))
    return FALSE;

  s.p = (const guchar *) data;
  s.end = s.p + length;
  s.line_start = s.p;
  s.line = 1;
  s.report = report;

  skip_whitespace (&s);
  if (s.p >= s.end)
    {
      _mixprec_config_report_error (report, MIXPREC_CONFIG_ERROR_PARSE,
                                    "(top level): the document is empty; a configuration "
                                    "is a JSON object such as {\"fp16\": {\"enabled\": true}}");
      return FALSE;
    }

  ok = scan_value (&s);
  if (ok)
    {
      skip_whitespace (&s);
      if (s.p < s.end)
        ok = syntax_error (&s, "expected the end of the document after the top-level value");
    }
  while (s.depth > 0)
    pop_frame (&s);
  return ok;
}
