/* inspect-numerics-read.c — gathers a run's per-tensor numerics series:
 * from csv_monitor's folder, a file per tag ("Numerics/<parameter>/<stat>"
 * in Numerics_<parameter>_<stat>.csv, NumericsByType_ for module types;
 * inspect-numerics-csv.c reads each), or from TensorBoard event files
 * (inspect-numerics-tb.c); then picks the statistic and orders the series
 * in layer order. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "inspect-private.h"

/* A link inside the folder is not followed: the engine writes plain
 * files there, and a link is not one of them. */
int
inspect_open_file (int          dir_fd,
                   const gchar *name,
                   const gchar *path,
                   GError     **error)
{
  struct stat st;
  int fd = openat (dir_fd, name, O_RDONLY | O_NONBLOCK | O_CLOEXEC |
                   (dir_fd != AT_FDCWD ? O_NOFOLLOW : 0));
  int saved;

  if (fd < 0)
    {
      saved = errno;
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved), "%s: %s", path,
                   saved == ELOOP ? "is a symbolic link, which is not followed"
                                  : g_strerror (saved));
      return -1;
    }
  if (fstat (fd, &st) != 0 || !S_ISREG (st.st_mode))
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s: not a regular file", path);
      close (fd);
      return -1;
    }
  return fd;
}

gboolean
inspect_read_fd (int          fd,
                 const gchar *path,
                 GByteArray  *out,
                 GError     **error)
{
  guint8 buf[65536];

  for (;;)
    {
      gssize n = read (fd, buf, sizeof buf);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int saved = errno;

          g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved), "%s: %s", path,
                       g_strerror (saved));
          return FALSE;
        }
      if (n == 0)
        return TRUE;
      g_byte_array_append (out, buf, n);
    }
}

#define PREFIX_PARAM "Numerics_"
#define PREFIX_TYPE "NumericsByType_"
#define SKIPPED_FILE "Train_Steps_skipped_steps.csv"

/* Magnitudes span decades and are drawn on a log scale; the other
 * statistics are fractions or counts, drawn linearly. */
static const gchar * const log_stats[] = {
  "grad_amax", "grad_norm", "update_ratio", "fp8_scale", "shadow_rel_l2", "shadow_max_ulp", NULL
};

gint
inspect_natural_compare (const gchar *a,
                         const gchar *b)
{
  while (*a != '\0' && *b != '\0')
    {
      if (g_ascii_isdigit (*a) && g_ascii_isdigit (*b))
        {
          const gchar *ea, *eb;
          gsize la, lb;
          gint c;

          while (*a == '0' && g_ascii_isdigit (a[1]))
            a++;
          while (*b == '0' && g_ascii_isdigit (b[1]))
            b++;
          for (ea = a; g_ascii_isdigit (*ea); ea++)
            ;
          for (eb = b; g_ascii_isdigit (*eb); eb++)
            ;
          la = ea - a;
          lb = eb - b;
          if (la != lb)
            return la < lb ? -1 : 1;
          c = strncmp (a, b, la);
          if (c != 0)
            return c;
          a = ea;
          b = eb;
          continue;
        }
      if (*a != *b)
        return (guchar) *a < (guchar) *b ? -1 : 1;
      a++;
      b++;
    }
  return *a == *b ? 0 : *a == '\0' ? -1 : 1;
}

static void
series_free (gpointer data)
{
  InspectSeries *s = data;

  g_free (s->name);
  g_free (s->path);
  g_array_unref (s->steps);
  g_array_unref (s->values);
  g_free (s);
}

void
inspect_numerics_free (InspectNumerics *run)
{
  if (run == NULL)
    return;
  g_free (run->run);
  g_free (run->stat);
  g_ptr_array_unref (run->series);
  g_clear_pointer (&run->steps, g_array_unref);
  g_array_unref (run->skipped);
  g_free (run);
}


static gint
series_compare (gconstpointer a,
                gconstpointer b)
{
  const InspectSeries *sa = *(InspectSeries * const *) a;
  const InspectSeries *sb = *(InspectSeries * const *) b;

  return inspect_natural_compare (sa->name, sb->name);
}

static gint
step_compare (gconstpointer a,
              gconstpointer b)
{
  guint64 x = *(const guint64 *) a, y = *(const guint64 *) b;

  return x < y ? -1 : x > y;
}

/* The steps of every series, each once. */
static GArray *
union_of_steps (GPtrArray *series)
{
  GArray *all = g_array_new (FALSE, FALSE, sizeof (guint64));
  guint kept = 0;

  for (guint i = 0; i < series->len; i++)
    {
      const InspectSeries *s = g_ptr_array_index (series, i);

      g_array_append_vals (all, s->steps->data, s->steps->len);
    }
  g_array_sort (all, step_compare);
  for (guint i = 0; i < all->len; i++)
    if (kept == 0 || g_array_index (all, guint64, i) != g_array_index (all, guint64, kept - 1))
      g_array_index (all, guint64, kept++) = g_array_index (all, guint64, i);
  g_array_set_size (all, kept);
  return all;
}

/* The steps the loss scaler skipped: those where the engine's running
 * count of skipped steps went up. */
static void
mark_skipped (InspectNumerics *run,
              GArray          *steps,
              GArray          *counts)
{
  gdouble before = 0;

  for (guint i = 0; i < steps->len; i++)
    {
      gdouble count = g_array_index (counts, gdouble, i);

      if (count > before)
        g_array_append_val (run->skipped, g_array_index (steps, guint64, i));
      before = count;
    }
}

static gboolean
read_skipped (int              dir_fd,
              const gchar     *dir,
              InspectNumerics *run,
              GError         **error)
{
  g_autofree gchar *path = g_build_filename (dir, SKIPPED_FILE, NULL);
  g_autoptr(GArray) steps = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_autoptr(GArray) counts = g_array_new (FALSE, FALSE, sizeof (gdouble));

  if (faccessat (dir_fd, SKIPPED_FILE, F_OK, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
    return TRUE;
  if (!inspect_csv_read_series (dir_fd, SKIPPED_FILE, path, "skipped_steps", steps, counts,
                                error))
    return FALSE;
  mark_skipped (run, steps, counts);
  return TRUE;
}

typedef struct
{
  gchar *file;
  gchar *name;
  gchar *stat;
} Entry;

static void
entry_clear (gpointer data)
{
  Entry *e = data;

  g_free (e->file);
  g_free (e->name);
  g_free (e->stat);
}

/* The parameter (or module type) of the file @file whose header names
 * @stat: the file name less @prefix and "_<stat>.csv". */
static gchar *
name_of (const gchar *file,
         const gchar *prefix,
         const gchar *stat,
         const gchar *path,
         gboolean     strict,
         GError     **error)
{
  g_autofree gchar *suffix = g_strdup_printf ("_%s.csv", stat);
  gsize start = g_str_has_prefix (file, prefix) ? strlen (prefix) : 0;
  gsize len = strlen (file);

  if (g_str_has_suffix (file, suffix) && len > start + strlen (suffix))
    return g_strndup (file + start, len - start - strlen (suffix));
  if (!strict && g_str_has_suffix (file, ".csv") && len > start + 4)
    return g_strndup (file + start, len - start - 4);
  g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
               "%s:1: the header names the statistic \"%s\", but the file name does not end in "
               "\"%s\" after a parameter name", path, stat, suffix);
  return NULL;
}

static gboolean
is_log_stat (const gchar *stat)
{
  return g_strv_contains (log_stats, stat);
}

static gint
string_compare (gconstpointer a,
                gconstpointer b)
{
  return strcmp (*(const gchar * const *) a, *(const gchar * const *) b);
}

/* The statistics the folder holds, for messages. */
static gchar *
list_stats (GArray *entries)
{
  g_autoptr(GPtrArray) seen = g_ptr_array_new ();

  for (guint i = 0; i < entries->len; i++)
    {
      const Entry *e = &g_array_index (entries, Entry, i);
      gboolean found = FALSE;

      for (guint k = 0; k < seen->len && !found; k++)
        found = g_str_equal (g_ptr_array_index (seen, k), e->stat);
      if (!found)
        g_ptr_array_add (seen, e->stat);
    }
  g_ptr_array_sort (seen, string_compare);
  g_ptr_array_add (seen, NULL);
  return g_strjoinv (", ", (gchar **) seen->pdata);
}

/* @stat, or the only statistic @entries hold. */
static const gchar *
choose_stat (const gchar *source,
             GArray      *entries,
             const gchar *stat,
             const gchar *available,
             GError     **error)
{
  if (stat != NULL)
    return stat;
  if (strchr (available, ',') != NULL)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s holds several statistics: choose one with --stat (%s)", source, available);
      return NULL;
    }
  return g_array_index (entries, Entry, 0).stat;
}

static InspectNumerics *
numerics_new (const gchar *source,
              const gchar *stat,
              gboolean     by_type)
{
  InspectNumerics *run = g_new0 (InspectNumerics, 1);
  g_autofree gchar *canonical = g_canonicalize_filename (source, NULL);

  run->run = g_path_get_basename (canonical);
  run->stat = g_strdup (stat);
  run->by_type = by_type;
  run->log_scale = is_log_stat (stat);
  run->series = g_ptr_array_new_with_free_func (series_free);
  run->skipped = g_array_new (FALSE, FALSE, sizeof (guint64));
  return run;
}

static InspectSeries *
series_new (const gchar *name,
            const gchar *path)
{
  InspectSeries *s = g_new0 (InspectSeries, 1);

  s->name = g_strdup (name);
  s->path = g_strdup (path);
  s->steps = g_array_new (FALSE, FALSE, sizeof (guint64));
  s->values = g_array_new (FALSE, FALSE, sizeof (gdouble));
  return s;
}

/* One CSV file given by name: its statistic is its header's. */
static InspectNumerics *
read_one_file (const gchar *path,
               const gchar *stat,
               GError     **error)
{
  g_autofree gchar *header = inspect_csv_read_header (AT_FDCWD, path, path, error);
  g_autofree gchar *base = g_path_get_basename (path);
  g_autoptr(InspectNumerics) run = NULL;
  g_autofree gchar *name = NULL;
  InspectSeries *s;
  gboolean by_type = g_str_has_prefix (base, PREFIX_TYPE);

  if (header == NULL)
    return NULL;
  if (stat != NULL && !g_str_equal (stat, header))
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: holds the statistic \"%s\", not \"%s\" (leave out --stat, or name the "
                   "folder to choose among its statistics)", path, header, stat);
      return NULL;
    }
  name = name_of (base, by_type ? PREFIX_TYPE : PREFIX_PARAM, header, path, FALSE, error);
  if (name == NULL)
    return NULL;
  run = numerics_new (path, header, by_type);
  s = series_new (name, path);
  g_ptr_array_add (run->series, s);
  if (!inspect_csv_read_series (AT_FDCWD, path, path, header, s->steps, s->values, error))
    return NULL;
  run->steps = union_of_steps (run->series);
  return g_steal_pointer (&run);
}

/* The scalars of TensorBoard event files (@names, in @dir_fd): the tags
 * Numerics/<parameter>/<stat> (NumericsByType/<type>/<stat>), which keep
 * the '/' and ' ' that csv_monitor's file names turn into '_'. Files are
 * read in the order given; a step recorded again keeps its last value. */
static InspectNumerics *
read_events (const gchar *source,
             int          dir_fd,
             GPtrArray   *names,
             const gchar *stat,
             gboolean     by_type,
             GError     **error)
{
  const gchar *prefix = by_type ? "NumericsByType/" : "Numerics/";
  g_autoptr(GHashTable) tags = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                                      (GDestroyNotify) g_array_unref);
  g_autoptr(GArray) entries = g_array_new (FALSE, TRUE, sizeof (Entry));
  g_autoptr(InspectNumerics) run = NULL;
  g_autofree gchar *available = NULL;
  GArray *skipped;
  GHashTableIter iter;
  gpointer key;

  g_array_set_clear_func (entries, entry_clear);
  for (guint i = 0; i < names->len; i++)
    {
      const gchar *name = g_ptr_array_index (names, i);
      g_autofree gchar *path = dir_fd == AT_FDCWD ? g_strdup (name)
                                                  : g_build_filename (source, name, NULL);

      if (!inspect_tb_read (dir_fd, name, path, tags, error))
        return NULL;
    }
  g_hash_table_iter_init (&iter, tags);
  while (g_hash_table_iter_next (&iter, &key, NULL))
    {
      const gchar *tag = key, *last = strrchr (tag, '/');
      Entry e;

      if (!g_str_has_prefix (tag, prefix) || last == NULL || last <= tag + strlen (prefix) ||
          last[1] == '\0')
        continue;
      e.file = g_strdup (tag);
      e.name = g_strndup (tag + strlen (prefix), last - tag - strlen (prefix));
      e.stat = g_strdup (last + 1);
      g_array_append_val (entries, e);
    }
  if (entries->len == 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                   "%s: no scalar tagged %s<%s>/<statistic> in its TensorBoard event file%s%s",
                   source, prefix, by_type ? "module type" : "parameter", names->len == 1 ? "" : "s",
                   by_type ? "" : " (for the series per module type, add --by type)");
      return NULL;
    }
  available = list_stats (entries);
  stat = choose_stat (source, entries, stat, available, error);
  if (stat == NULL)
    return NULL;
  run = numerics_new (source, stat, by_type);
  for (guint i = 0; i < entries->len; i++)
    {
      const Entry *e = &g_array_index (entries, Entry, i);
      InspectSeries *s;

      if (!g_str_equal (e->stat, stat))
        continue;
      s = series_new (e->name, e->file);
      g_ptr_array_add (run->series, s);
      inspect_records_to_series (g_hash_table_lookup (tags, e->file), s->steps, s->values);
    }
  if (run->series->len == 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                   "%s: no series of the statistic \"%s\"; the event file%s hold%s: %s", source,
                   stat, names->len == 1 ? "" : "s", names->len == 1 ? "s" : "", available);
      return NULL;
    }
  g_ptr_array_sort (run->series, series_compare);
  run->steps = union_of_steps (run->series);
  skipped = g_hash_table_lookup (tags, "Train/Steps/skipped_steps");
  if (skipped != NULL)
    {
      g_autoptr(GArray) steps = g_array_new (FALSE, FALSE, sizeof (guint64));
      g_autoptr(GArray) counts = g_array_new (FALSE, FALSE, sizeof (gdouble));

      inspect_records_to_series (skipped, steps, counts);
      mark_skipped (run, steps, counts);
    }
  return g_steal_pointer (&run);
}

static gboolean
is_event_file (const gchar *name)
{
  return strstr (name, "tfevents") != NULL;
}

InspectNumerics *
inspect_numerics_read (const gchar *source,
                       const gchar *stat,
                       gboolean     by_type,
                       GError     **error)
{
  const gchar *prefix = by_type ? PREFIX_TYPE : PREFIX_PARAM;
  g_autoptr(GArray) entries = g_array_new (FALSE, TRUE, sizeof (Entry));
  g_autoptr(InspectNumerics) run = NULL;
  g_autofree gchar *available = NULL;
  g_autoptr(GPtrArray) events = g_ptr_array_new_with_free_func (g_free);
  struct stat st;
  struct dirent *de;
  DIR *dir;
  int fd, dir_fd, saved;

  g_array_set_clear_func (entries, entry_clear);
  fd = open (source, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || fstat (fd, &st) != 0)
    {
      saved = errno;
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "%s: %s (give the csv_monitor folder, output_path/job_name, one of its "
                   "CSV files, or a TensorBoard event file)", source, g_strerror (saved));
      if (fd >= 0)
        close (fd);
      return NULL;
    }
  if (S_ISREG (st.st_mode))
    {
      g_autofree gchar *base = g_path_get_basename (source);
      g_autoptr(GPtrArray) names = g_ptr_array_new ();

      close (fd);
      if (!is_event_file (base))
        return read_one_file (source, stat, error);
      g_ptr_array_add (names, (gpointer) source);
      return read_events (source, AT_FDCWD, names, stat, by_type, error);
    }
  if (!S_ISDIR (st.st_mode) || (dir = fdopendir (fd)) == NULL)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: neither a folder nor a regular file", source);
      close (fd);
      return NULL;
    }
  dir_fd = dirfd (dir);

  /* First the headers of every file of the kind, to know the statistics
   * the folder holds. */
  while ((errno = 0, de = readdir (dir)) != NULL)
    {
      Entry e = { NULL, NULL, NULL };
      g_autofree gchar *path = NULL;

      if (is_event_file (de->d_name))
        g_ptr_array_add (events, g_strdup (de->d_name));
      if (!g_str_has_prefix (de->d_name, prefix) || !g_str_has_suffix (de->d_name, ".csv"))
        continue;
      path = g_build_filename (source, de->d_name, NULL);
      e.stat = inspect_csv_read_header (dir_fd, de->d_name, path, error);
      if (e.stat == NULL ||
          (e.name = name_of (de->d_name, prefix, e.stat, path, TRUE, error)) == NULL)
        {
          g_free (e.stat);
          closedir (dir);
          return NULL;
        }
      e.file = g_strdup (de->d_name);
      g_array_append_val (entries, e);
    }
  if (errno != 0)
    {
      saved = errno;
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved), "%s: %s", source,
                   g_strerror (saved));
      closedir (dir);
      return NULL;
    }
  /* A folder of csv_monitor's is read for its CSV files; one of the
   * tensorboard monitor's, for its event files, oldest name first (a
   * resumed job starts a new file). */
  if (entries->len == 0 && events->len > 0)
    {
      g_ptr_array_sort (events, string_compare);
      run = read_events (source, dir_fd, events, stat, by_type, error);
      closedir (dir);
      return g_steal_pointer (&run);
    }
  if (entries->len == 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                   "%s: no %s*.csv files (nor TensorBoard event files): csv_monitor writes them "
                   "when the engine records numerics%s", source, prefix,
                   by_type ? "" : " (for the series per module type, add --by type)");
      closedir (dir);
      return NULL;
    }

  available = list_stats (entries);
  stat = choose_stat (source, entries, stat, available, error);
  if (stat == NULL)
    {
      closedir (dir);
      return NULL;
    }
  run = numerics_new (source, stat, by_type);
  for (guint i = 0; i < entries->len; i++)
    {
      const Entry *e = &g_array_index (entries, Entry, i);
      g_autofree gchar *path = NULL;
      InspectSeries *s;

      if (!g_str_equal (e->stat, stat))
        continue;
      path = g_build_filename (source, e->file, NULL);
      for (guint k = 0; k < run->series->len; k++)
        if (g_str_equal (((InspectSeries *) g_ptr_array_index (run->series, k))->name, e->name))
          {
            /* Two tags that differ only in '/' or ' ' share a file name
             * prefix but not a file; the names would be ambiguous. */
            g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                         "%s: a second series named \"%s\"", path, e->name);
            closedir (dir);
            return NULL;
          }
      s = series_new (e->name, path);
      g_ptr_array_add (run->series, s);
      if (!inspect_csv_read_series (dir_fd, e->file, path, stat, s->steps, s->values, error))
        {
          closedir (dir);
          return NULL;
        }
    }
  if (run->series->len == 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_NOENT,
                   "%s: no series of the statistic \"%s\"; the folder holds: %s", source, stat,
                   available);
      closedir (dir);
      return NULL;
    }
  g_ptr_array_sort (run->series, series_compare);
  run->steps = union_of_steps (run->series);
  if (!read_skipped (dir_fd, source, run, error))
    {
      closedir (dir);
      return NULL;
    }
  closedir (dir);
  return g_steal_pointer (&run);
}
