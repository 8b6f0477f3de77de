/* inspect-numerics-csv.c — reads one CSV file of csv_monitor's: a header
 * "step,<stat>", then a row "step,value" per record (values as the
 * monitor writes them: shortest round-trip decimals, nan, inf, -inf).
 * Every problem names the file and the line. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inspect-private.h"

/* The whole file (csv_monitor's files are small: a row per step), as
 * text. */
static gchar *
read_text (int          fd,
           const gchar *path,
           gsize       *length,
           GError     **error)
{
  g_autoptr(GByteArray) data = g_byte_array_new ();

  if (!inspect_read_fd (fd, path, data, error))
    return NULL;
  if (data->len > 0 && memchr (data->data, '\0', data->len) != NULL)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: holds a NUL byte: not a CSV file of csv_monitor", path);
      return NULL;
    }
  *length = data->len;
  g_byte_array_append (data, (const guint8 *) "", 1);
  return (gchar *) g_byte_array_free (g_steal_pointer (&data), FALSE);
}

/* A line for a message: escaped, and cut when long. */
static gchar *
shown (const gchar *line)
{
  g_autofree gchar *cut = g_strndup (line, 60);
  g_autofree gchar *escaped = g_strescape (cut, NULL);

  return strlen (line) > 60 ? g_strdup_printf ("%s...", escaped) : g_steal_pointer (&escaped);
}

/* The statistic the header "step,<stat>" names (csv_monitor quotes a name
 * holding a comma or a quote). */
static gchar *
parse_header (const gchar *line,
              const gchar *path,
              GError     **error)
{
  const gchar *field;
  GString *stat;

  if (!g_str_has_prefix (line, "step,") || line[5] == '\0')
    {
      g_autofree gchar *text = shown (line);

      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s:1: not a csv_monitor file: the first line must be \"step,<statistic>\", "
                   "got \"%s\"", path, text);
      return NULL;
    }
  field = line + 5;
  if (*field != '"')
    return g_strdup (field);
  stat = g_string_new (NULL);
  for (const gchar *c = field + 1; *c != '\0'; c++)
    {
      if (*c == '"' && c[1] == '"')
        c++;
      else if (*c == '"')
        {
          if (c[1] == '\0')
            return g_string_free (stat, FALSE);
          break;
        }
      g_string_append_c (stat, *c);
    }
  g_string_free (stat, TRUE);
  {
    g_autofree gchar *text = shown (line);

    g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                 "%s:1: the header's quoted statistic name is not closed: \"%s\"", path, text);
  }
  return NULL;
}

/* The first line of @path, without reading the rest. */
gchar *
inspect_csv_read_header (int          dir_fd,
                         const gchar *name,
                         const gchar *path,
                         GError     **error)
{
  gchar buf[4097];
  gssize n;
  gchar *end;
  int fd = inspect_open_file (dir_fd, name, path, error);

  if (fd < 0)
    return NULL;
  do
    n = pread (fd, buf, sizeof buf - 1, 0);
  while (n < 0 && errno == EINTR);
  close (fd);
  if (n < 0)
    {
      int saved = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved), "%s: %s", path,
                   g_strerror (saved));
      return NULL;
    }
  buf[n] = '\0';
  end = strpbrk (buf, "\r\n");
  if (end == NULL)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   n == 0 ? "%s: is empty: a csv_monitor file starts with the line \"step,<statistic>\""
                          : "%s:1: no complete header line \"step,<statistic>\" in its first 4096 bytes",
                   path);
      return NULL;
    }
  *end = '\0';
  return parse_header (buf, path, error);
}

typedef InspectRecord Record;

static gint
record_compare (gconstpointer a,
                gconstpointer b)
{
  const Record *ra = a, *rb = b;

  if (ra->step != rb->step)
    return ra->step < rb->step ? -1 : 1;
  return ra->order < rb->order ? -1 : ra->order > rb->order;
}

/* @records by step, each step once: its last record. */
void
inspect_records_to_series (GArray *records,
                           GArray *steps,
                           GArray *values)
{
  g_array_sort (records, record_compare);
  for (guint i = 0; i < records->len; i++)
    {
      const Record *r = &g_array_index (records, Record, i);

      if (i + 1 < records->len && g_array_index (records, Record, i + 1).step == r->step)
        continue;
      g_array_append_val (steps, r->step);
      g_array_append_val (values, r->value);
    }
}

/* Reads the rows of one file into @steps and @values, by step; a step
 * recorded twice (a job resumed from an earlier checkpoint writes its
 * steps again) keeps its last record. A last row with no newline is one
 * the engine is still writing: it is left out with a warning. */
gboolean
inspect_csv_read_series (int          dir_fd,
                         const gchar *name,
                         const gchar *path,
                         const gchar *stat,
                         GArray      *steps,
                         GArray      *values,
                         GError     **error)
{
  g_autofree gchar *text = NULL;
  g_autofree gchar *header = NULL;
  g_autoptr(GArray) records = g_array_new (FALSE, FALSE, sizeof (Record));
  gchar *line, *next;
  gsize length = 0;
  guint lineno = 0;
  int fd = inspect_open_file (dir_fd, name, path, error);

  if (fd < 0)
    return FALSE;
  text = read_text (fd, path, &length, error);
  close (fd);
  if (text == NULL)
    return FALSE;

  for (line = text; line < text + length; line = next)
    {
      gchar *comma, *end = NULL;
      gboolean complete;
      Record r;

      lineno++;
      next = strchr (line, '\n');
      complete = next != NULL;
      if (complete)
        *next++ = '\0';
      else
        next = text + length;
      if (*line != '\0' && line[strlen (line) - 1] == '\r')
        line[strlen (line) - 1] = '\0';

      if (lineno == 1)
        {
          header = parse_header (line, path, error);
          if (header == NULL)
            return FALSE;
          if (stat != NULL && !g_str_equal (header, stat))
            {
              g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                           "%s:1: the header names the statistic \"%s\", not \"%s\"", path,
                           header, stat);
              return FALSE;
            }
          continue;
        }
      if (*line == '\0' && !complete)
        break;
      comma = strchr (line, ',');
      if (comma != NULL)
        {
          *comma = '\0';
          errno = 0;
          r.value = g_ascii_strtod (comma + 1, &end);
        }
      if (comma == NULL || !g_ascii_string_to_unsigned (line, 10, 0, G_MAXUINT64, &r.step, NULL) ||
          end == comma + 1 || *end != '\0' || g_ascii_isspace (comma[1]) ||
          (errno == ERANGE && isinf (r.value)))
        {
          g_autofree gchar *got = NULL;

          if (comma != NULL)
            *comma = ',';
          got = shown (line);
          if (!complete)
            {
              g_printerr ("warning: %s:%u: an incomplete last row \"%s\" (no newline) is left out: "
                          "is the run still writing?\n", path, lineno, got);
              break;
            }
          g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                       "%s:%u: expected \"step,value\" (a whole step number, then a number or "
                       "nan, inf, -inf), got \"%s\"", path, lineno, got);
          return FALSE;
        }
      r.order = lineno;
      g_array_append_val (records, r);
    }
  if (lineno == 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: is empty: a csv_monitor file starts with the line \"step,<statistic>\"", path);
      return FALSE;
    }

  inspect_records_to_series (records, steps, values);
  return TRUE;
}
