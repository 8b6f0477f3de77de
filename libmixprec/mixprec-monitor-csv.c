/* mixprec-monitor-csv.c — csv_monitor: each tag's scalars in a CSV file of
 * its own, laid out as DeepSpeed's csvMonitor lays them out (a header
 * "step,<name>", then one "step,value" row per record). */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "mixprec-monitor-private.h"

struct _MixprecCsvMonitor
{
  gchar *dir;
  GHashTable *files;         /* tag -> FILE * */
};

gchar *
_mixprec_monitor_make_dir (const gchar *section,
                           const gchar *output_path,
                           const gchar *job_name,
                           GError     **error)
{
  /* DeepSpeed's os.path.join (output_path, job_name): an empty
   * output_path is the current folder. */
  g_autofree gchar *dir = g_build_filename (*output_path != '\0' ? output_path : ".",
                                            job_name, NULL);
  int saved;

  if (g_mkdir_with_parents (dir, 0777) == 0 && g_access (dir, W_OK | X_OK) == 0)
    return g_steal_pointer (&dir);
  saved = errno;
  g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
               "%s.output_path: cannot write in the folder \"%s\" (output_path \"%s\" "
               "joined with job_name \"%s\"): %s", section, dir, output_path, job_name,
               g_strerror (saved));
  return NULL;
}

const gchar *
_mixprec_monitor_format_double (gchar  *buf,
                                gdouble value)
{
  if (isnan (value))
    return strcpy (buf, "nan");
  if (isinf (value))
    return strcpy (buf, value > 0 ? "inf" : "-inf");
  for (gint digits = 1; digits < 17; digits++)
    {
      gchar format[8];

      g_snprintf (format, sizeof format, "%%.%dg", digits);
      g_ascii_formatd (buf, G_ASCII_DTOSTR_BUF_SIZE, format, value);
      if (g_ascii_strtod (buf, NULL) == value)
        return buf;
    }
  return g_ascii_formatd (buf, G_ASCII_DTOSTR_BUF_SIZE, "%.17g", value);
}

static void
close_file (gpointer file)
{
  fclose (file);
}

_MixprecCsvMonitor *
_mixprec_csv_monitor_new (const gchar *dir)
{
  _MixprecCsvMonitor *self = g_new0 (_MixprecCsvMonitor, 1);

  self->dir = g_strdup (dir);
  self->files = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, close_file);
  return self;
}

/* A CSV field: quoted when it holds a separator or a quote. */
static void
append_field (GString     *line,
              const gchar *text)
{
  if (strpbrk (text, ",\"\r\n") == NULL)
    {
      g_string_append (line, text);
      return;
    }
  g_string_append_c (line, '"');
  for (const gchar *c = text; *c != '\0'; c++)
    {
      if (*c == '"')
        g_string_append_c (line, '"');
      g_string_append_c (line, *c);
    }
  g_string_append_c (line, '"');
}

static FILE *
file_for (_MixprecCsvMonitor *self,
          const gchar        *tag,
          GError            **error)
{
  FILE *file = g_hash_table_lookup (self->files, tag);
  g_autofree gchar *name = NULL;
  g_autofree gchar *path = NULL;
  const gchar *last;

  if (file != NULL)
    return file;
  /* DeepSpeed's file name: the tag with '/' and ' ' made '_'. */
  name = g_strdup_printf ("%s.csv", tag);
  g_strdelimit (name, "/ ", '_');
  path = g_build_filename (self->dir, name, NULL);
  file = g_fopen (path, "a");
  if (file == NULL || fseek (file, 0, SEEK_END) != 0)
    {
      int saved = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "csv_monitor: cannot open \"%s\" for the tag \"%s\": %s", path, tag,
                   g_strerror (saved));
      if (file != NULL)
        fclose (file);
      return NULL;
    }
  /* A new file starts with its header; a resumed job appends rows to the
   * file it wrote before. The header names the tag's last component. */
  if (ftell (file) == 0)
    {
      g_autoptr(GString) header = g_string_new ("step,");

      last = strrchr (tag, '/');
      append_field (header, last != NULL ? last + 1 : tag);
      g_string_append_c (header, '\n');
      fputs (header->str, file);
    }
  g_hash_table_insert (self->files, g_strdup (tag), file);
  return file;
}

gboolean
_mixprec_csv_monitor_add (_MixprecCsvMonitor *self,
                          const gchar        *tag,
                          gdouble             value,
                          guint64             step,
                          GError            **error)
{
  gchar buf[G_ASCII_DTOSTR_BUF_SIZE];
  FILE *file = file_for (self, tag, error);

  if (file == NULL)
    return FALSE;
  if (fprintf (file, "%" G_GUINT64_FORMAT ",%s\n", step,
               _mixprec_monitor_format_double (buf, value)) < 0)
    {
      int saved = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "csv_monitor: cannot write the tag \"%s\" in %s: %s", tag, self->dir,
                   g_strerror (saved));
      return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_csv_monitor_flush (_MixprecCsvMonitor *self,
                            GError            **error)
{
  GHashTableIter iter;
  gpointer tag, file;

  g_hash_table_iter_init (&iter, self->files);
  while (g_hash_table_iter_next (&iter, &tag, &file))
    if (fflush (file) != 0)
      {
        int saved = errno;

        g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                     "csv_monitor: cannot write the tag \"%s\" in %s: %s",
                     (const gchar *) tag, self->dir, g_strerror (saved));
        return FALSE;
      }
  return TRUE;
}

void
_mixprec_csv_monitor_free (_MixprecCsvMonitor *self)
{
  if (self == NULL)
    return;
  g_hash_table_unref (self->files);
  g_free (self->dir);
  g_free (self);
}
