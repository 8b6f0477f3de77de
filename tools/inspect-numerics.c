/* inspect-numerics.c — `mixprec-inspect --numerics RUN`: the tensors whose
 * numerics statistic was worst over a run, ranked, and with --heatmap a
 * picture of the statistic over steps and layers (inspect-heatmap.c). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "inspect-private.h"

typedef struct
{
  const InspectSeries *series;
  guint   order;        /* natural order of the name, to break ties */
  gdouble worst;
  guint64 worst_step;
  gdouble mean;         /* over the finite values */
  gdouble last;
  guint   n_nonfinite;
  guint   n_records;
} Summary;

/* How bad a value is: NaN worst, then the infinities, then the highest
 * number. */
static gint
badness_compare (gdouble a,
                 gdouble b)
{
  gint ka = isnan (a) ? 2 : isinf (a) ? 1 : 0;
  gint kb = isnan (b) ? 2 : isinf (b) ? 1 : 0;

  if (ka != kb)
    return ka < kb ? -1 : 1;
  if (ka != 0 || a == b)
    return 0;
  return a < b ? -1 : 1;
}

static void
summarize (const InspectSeries *s,
           guint                order,
           Summary             *out)
{
  gdouble sum = 0;
  guint n_finite = 0;

  out->series = s;
  out->order = order;
  out->n_records = s->values->len;
  out->n_nonfinite = 0;
  out->worst = NAN;
  out->worst_step = 0;
  out->mean = NAN;
  out->last = NAN;
  for (guint i = 0; i < s->values->len; i++)
    {
      gdouble v = g_array_index (s->values, gdouble, i);

      if (i == 0 || badness_compare (v, out->worst) > 0)
        {
          out->worst = v;
          out->worst_step = g_array_index (s->steps, guint64, i);
        }
      if (isfinite (v))
        {
          sum += v;
          n_finite++;
        }
      else
        out->n_nonfinite++;
    }
  if (n_finite > 0)
    out->mean = sum / n_finite;
  if (s->values->len > 0)
    out->last = g_array_index (s->values, gdouble, s->values->len - 1);
}

/* Worst first; equal worsts by the higher mean, then in layer order. */
static gint
summary_compare (gconstpointer a,
                 gconstpointer b)
{
  const Summary *sa = a, *sb = b;
  gint c;

  /* A series with no record yet (a header alone) has no worst: last. */
  if ((sa->n_records == 0) != (sb->n_records == 0))
    return sa->n_records == 0 ? 1 : -1;
  c = badness_compare (sb->worst, sa->worst);
  if (c == 0)
    c = badness_compare (sb->mean, sa->mean);
  if (c == 0)
    c = sa->order < sb->order ? -1 : sa->order > sb->order;
  return c;
}

/* Numbers as the CSV files write them, whatever the locale. */
static const gchar *
number (gchar  *buf,
        gdouble value)
{
  if (isnan (value))
    return "nan";
  if (isinf (value))
    return value > 0 ? "inf" : "-inf";
  return g_ascii_formatd (buf, G_ASCII_DTOSTR_BUF_SIZE, "%.4g", value);
}

static void
print_table (const InspectNumerics *run,
             guint                  top)
{
  g_autofree Summary *rows = g_new0 (Summary, MAX (run->series->len, 1));
  const gchar *kind = run->by_type ? "module type" : "parameter";
  guint n = run->series->len;
  gsize width = strlen (kind);

  for (guint i = 0; i < n; i++)
    {
      summarize (g_ptr_array_index (run->series, i), i, &rows[i]);
      width = MAX (width, strlen (rows[i].series->name));
    }
  qsort (rows, n, sizeof (Summary), summary_compare);

  g_print ("Numerics %s per %s of run %s: %u %s%s, %u step%s", run->stat, kind, run->run, n, kind,
           n == 1 ? "" : "s", run->steps->len, run->steps->len == 1 ? "" : "s");
  if (run->steps->len > 0)
    g_print (" (%" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT ")",
             g_array_index (run->steps, guint64, 0),
             g_array_index (run->steps, guint64, run->steps->len - 1));
  if (run->skipped->len > 0)
    g_print (", %u skipped by the loss scaler", run->skipped->len);
  g_print ("\n");
  if (top == 0 || top > n)
    top = n;
  g_print ("%s %u, worst first (the highest %s; nan, then inf, rank above any number):\n",
           top == n ? "All" : "The worst", top, run->stat);
  g_print ("  %4s  %-*s  %10s  %10s  %10s  %10s  %10s\n", "rank", (int) width, kind, "worst",
           "at step", "mean", "last", "non-finite");
  for (guint i = 0; i < top; i++)
    {
      gchar worst[G_ASCII_DTOSTR_BUF_SIZE], mean[G_ASCII_DTOSTR_BUF_SIZE],
            last[G_ASCII_DTOSTR_BUF_SIZE];

      if (rows[i].n_records == 0)
        {
          g_print ("  %4u  %-*s  %10s  %10s  %10s  %10s  %10s\n", i + 1, (int) width,
                   rows[i].series->name, "-", "-", "-", "-", "-");
          continue;
        }
      g_print ("  %4u  %-*s  %10s  %10" G_GUINT64_FORMAT "  %10s  %10s  %10u\n", i + 1,
               (int) width, rows[i].series->name, number (worst, rows[i].worst),
               rows[i].worst_step, number (mean, rows[i].mean), number (last, rows[i].last),
               rows[i].n_nonfinite);
    }
}

int
inspect_numerics (const gchar *source,
                  const gchar *stat,
                  gboolean     by_type,
                  guint        top,
                  const gchar *heatmap)
{
  g_autoptr(InspectNumerics) run = NULL;
  g_autoptr(GError) error = NULL;
  InspectHeatmapGeometry geometry;

  if (heatmap != NULL)
    {
      g_autofree gchar *lower = g_ascii_strdown (heatmap, -1);

      if (inspect_heatmap_backend () == NULL)
        {
          g_printerr ("mixprec-inspect: --heatmap: this mixprec-inspect was built without cairo, "
                      "so it draws no heat maps (install cairo's development files, such as "
                      "Debian's libcairo2-dev, and configure again)\n");
          return 2;
        }
      if (!g_str_has_suffix (lower, ".png") && !g_str_has_suffix (lower, ".svg"))
        {
          g_printerr ("mixprec-inspect: --heatmap: the heat map is a PNG or an SVG file, chosen "
                      "by the name's extension; got '%s'\n", heatmap);
          return 2;
        }
    }

  run = inspect_numerics_read (source, stat, by_type, &error);
  if (run == NULL)
    {
      g_printerr ("error: %s\n", error->message);
      return 1;
    }
  print_table (run, top);

  if (heatmap != NULL && run->steps->len == 0)
    {
      g_printerr ("error: %s: no step recorded yet (the files hold their header only): no heat "
                  "map to draw\n", source);
      return 1;
    }
  if (heatmap != NULL)
    {
      if (!inspect_heatmap_write (run, heatmap, &geometry, &error))
        {
          g_printerr ("error: %s\n", error->message);
          return 1;
        }
      g_print ("Heat map %s: %ux%u, cells at (%u,%u)-(%u,%u): %u row%s by %u column%s of %u step%s\n",
               heatmap, geometry.width, geometry.height, geometry.x0, geometry.y0, geometry.x1,
               geometry.y1, run->series->len, run->series->len == 1 ? "" : "s",
               geometry.n_columns, geometry.n_columns == 1 ? "" : "s",
               geometry.steps_per_column, geometry.steps_per_column == 1 ? "" : "s");
    }
  return 0;
}
