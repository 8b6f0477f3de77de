/* inspect-heatmap.c — draws a numerics statistic of a run as a heat map:
 * optimizer steps across, parameters (or module types) down in layer
 * order, the value as a viridis colour, so one picture shows which layer
 * went bad and when. cairo draws and encodes the PNG or SVG file; the
 * tool builds without cairo and then says so. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "inspect-private.h"

#ifdef HAVE_CAIRO
#include <cairo.h>
#include <cairo-svg.h>
#include <fontconfig/fontconfig.h>

#include "inspect-viridis.h"

/* The most columns drawn: a longer run gives each column several steps
 * (the worst of them), so a 1000-step run still gets a pixel per step. */
#define MAX_COLUMNS 1000
#define PLOT_WIDTH 1000       /* the cells' area aims at this width... */
#define PLOT_HEIGHT 720       /* ...and this height */
#define MAX_CELL 48
#define FONT_SIZE 11.0
#define TITLE_SIZE 15.0
#define PAD 14
#define BAR_WIDTH 16

static const guint8 no_record[3] = { 217, 217, 217 };   /* light grey */
static const guint8 non_finite[3] = { 228, 26, 28 };    /* red: not in viridis */

typedef struct
{
  gdouble lo, hi;       /* the colour bar's range */
  gboolean log;
} Scale;

/* The value's place on the colour bar, from 0 to 1: values past an end
 * (and, on a log scale, zero and below) take that end's colour. */
static gdouble
scale_position (const Scale *scale,
                gdouble      v)
{
  gdouble t;

  if (scale->log)
    t = v > 0 ? (log10 (v) - log10 (scale->lo)) / (log10 (scale->hi) - log10 (scale->lo)) : 0;
  else
    t = (v - scale->lo) / (scale->hi - scale->lo);
  return CLAMP (t, 0.0, 1.0);
}

/* The colormap's entry for @t, as matplotlib picks it (floor (t * 256),
 * the top end included in the last entry). */
static const guint8 *
colour_of (gdouble t)
{
  return inspect_viridis[MIN (255, (gint) floor (t * 256))];
}

/* Linear: from 0 (or the lowest value, if below) to the highest value.
 * Log: from the lowest positive value to the highest. */
static Scale
scale_of (const InspectNumerics *run)
{
  Scale s = { G_MAXDOUBLE, -G_MAXDOUBLE, run->log_scale };

  for (guint i = 0; i < run->series->len; i++)
    {
      const InspectSeries *series = g_ptr_array_index (run->series, i);

      for (guint k = 0; k < series->values->len; k++)
        {
          gdouble v = g_array_index (series->values, gdouble, k);

          if (!isfinite (v) || (s.log && v <= 0))
            continue;
          s.lo = MIN (s.lo, v);
          s.hi = MAX (s.hi, v);
        }
    }
  if (s.log)
    {
      if (s.lo > s.hi)
        {
          s.lo = 1;
          s.hi = 10;
        }
      else if (s.hi <= s.lo)
        s.lo = s.hi / 10;
    }
  else
    {
      if (s.lo > s.hi)
        s.lo = s.hi = 0;
      s.lo = MIN (s.lo, 0);
      if (s.hi <= s.lo)
        s.hi = s.lo + 1;
    }
  return s;
}

/* ------------------------------------------------------------- the layout */

typedef struct
{
  guint n_rows, n_cols, per_col;
  guint cw, rh;                  /* a cell, in pixels */
  guint label_every;             /* rows between row labels */
  gdouble x0, y0, x1, y1;        /* the cells' area */
  gdouble bar_x, bar_y0, bar_y1; /* the colour bar */
  guint width, height;
} Layout;

static gdouble
text_width (cairo_t     *cr,
            const gchar *text)
{
  cairo_text_extents_t ext;

  cairo_text_extents (cr, text, &ext);
  return ext.x_advance;
}

static void
set_font (cairo_t *cr,
          gdouble  size,
          gboolean bold)
{
  cairo_select_font_face (cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL,
                          bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size (cr, size);
}

/* Nice numbers for ticks: 1, 2 or 5 times a power of ten, at least @raw. */
static gdouble
nice_step (gdouble raw)
{
  gdouble p = pow (10, floor (log10 (raw)));

  if (raw <= p)
    return p;
  if (raw <= 2 * p)
    return 2 * p;
  if (raw <= 5 * p)
    return 5 * p;
  return 10 * p;
}

/* The colour bar's ticks: decades on a log scale (with 2 and 5 when the
 * range spans less than two), nice numbers on a linear one. */
static GArray *
bar_ticks (const Scale *scale)
{
  GArray *ticks = g_array_new (FALSE, FALSE, sizeof (gdouble));

  if (scale->log)
    {
      static const gdouble mantissas[] = { 1, 2, 5 };
      gdouble lo = log10 (scale->lo), hi = log10 (scale->hi);
      guint n_mantissas = hi - lo < 2 ? 3 : 1;
      gint stride = MAX (1, (gint) ceil ((hi - lo) / 8));

      for (gint e = (gint) floor (lo); e <= (gint) ceil (hi); e++)
        for (guint m = 0; m < n_mantissas; m++)
          {
            gdouble v = mantissas[m] * pow (10, e);

            if (v >= scale->lo * (1 - 1e-9) && v <= scale->hi * (1 + 1e-9) && e % stride == 0)
              g_array_append_val (ticks, v);
          }
      if (ticks->len < 2)
        {
          g_array_set_size (ticks, 0);
          g_array_append_val (ticks, scale->lo);
          g_array_append_val (ticks, scale->hi);
        }
    }
  else
    {
      gdouble step = nice_step ((scale->hi - scale->lo) / 5);

      for (gdouble v = ceil (scale->lo / step) * step; v <= scale->hi + step * 1e-9; v += step)
        {
          gdouble shown = fabs (v) < step * 1e-9 ? 0 : v;

          g_array_append_val (ticks, shown);
        }
    }
  return ticks;
}

static void
format_tick (gchar  *buf,
             gdouble v,
             gboolean log)
{
  g_ascii_formatd (buf, G_ASCII_DTOSTR_BUF_SIZE, log ? "%.3g" : "%.4g", v);
}

static Layout
layout_of (cairo_t               *cr,
           const InspectNumerics *run,
           const Scale           *scale)
{
  g_autoptr(GArray) ticks = bar_ticks (scale);
  Layout l = { 0 };
  gdouble label_w = 0, tick_w = 0, plot_h;

  l.n_rows = run->series->len;
  l.per_col = (run->steps->len + MAX_COLUMNS - 1) / MAX_COLUMNS;
  l.per_col = MAX (l.per_col, 1);
  l.n_cols = MAX ((run->steps->len + l.per_col - 1) / l.per_col, 1);
  l.cw = CLAMP (PLOT_WIDTH / l.n_cols, 1, MAX_CELL);
  l.rh = CLAMP (PLOT_HEIGHT / MAX (l.n_rows, 1), 1, 24);
  l.label_every = (guint) ceil ((FONT_SIZE + 2) / l.rh);

  set_font (cr, FONT_SIZE, FALSE);
  for (guint i = 0; i < l.n_rows; i++)
    label_w = MAX (label_w, text_width (cr, ((InspectSeries *) g_ptr_array_index (run->series, i))->name));
  label_w = MAX (label_w, text_width (cr, "skipped steps"));
  for (guint i = 0; i < ticks->len; i++)
    {
      gchar buf[G_ASCII_DTOSTR_BUF_SIZE];

      format_tick (buf, g_array_index (ticks, gdouble, i), scale->log);
      tick_w = MAX (tick_w, text_width (cr, buf));
    }

  l.x0 = PAD + ceil (label_w) + 8;
  l.y0 = PAD + 20 + 16 + 8 + 14;     /* title, subtitle, the skipped steps' marks */
  l.x1 = l.x0 + l.n_cols * l.cw;
  l.y1 = l.y0 + l.n_rows * l.rh;
  plot_h = l.y1 - l.y0;
  l.bar_x = l.x1 + 24;
  l.bar_y0 = l.y0;
  l.bar_y1 = l.y0 + MAX (plot_h, 160);
  l.width = (guint) ceil (l.bar_x + BAR_WIDTH + 6 + tick_w + PAD);
  l.height = (guint) ceil (MAX (l.y1, l.bar_y1) + 6 + FONT_SIZE + 8 + FONT_SIZE + 12 + FONT_SIZE + PAD);
  return l;
}

/* -------------------------------------------------------------- drawing */

/* The column of each step: its place among all the run's steps, binned. */
static guint
column_of (const InspectNumerics *run,
           const Layout          *l,
           guint64                step)
{
  guint lo = 0, hi = run->steps->len;

  while (lo < hi)
    {
      guint mid = lo + (hi - lo) / 2;

      if (g_array_index (run->steps, guint64, mid) < step)
        lo = mid + 1;
      else
        hi = mid;
    }
  return lo / l->per_col;
}

/* Draws the cells into an image of the cells' area, a pixel of the image
 * per pixel of the picture, so that the PNG holds each cell's exact
 * colour and the SVG embeds it unscaled. A column holding several steps
 * shows the worst of them: a non-finite value, else the highest. */
static cairo_surface_t *
draw_cells (const InspectNumerics *run,
            const Layout          *l,
            const Scale           *scale)
{
  guint w = l->n_cols * l->cw, h = l->n_rows * l->rh;
  cairo_surface_t *image = cairo_image_surface_create (CAIRO_FORMAT_RGB24, w, h);
  g_autofree gdouble *cols = g_new (gdouble, l->n_cols);
  g_autofree gboolean *present = g_new (gboolean, l->n_cols);
  guchar *data;
  gint stride;

  if (cairo_surface_status (image) != CAIRO_STATUS_SUCCESS)
    return image;
  cairo_surface_flush (image);
  data = cairo_image_surface_get_data (image);
  stride = cairo_image_surface_get_stride (image);
  for (guint r = 0; r < l->n_rows; r++)
    {
      const InspectSeries *s = g_ptr_array_index (run->series, r);

      memset (present, 0, sizeof (gboolean) * l->n_cols);
      for (guint k = 0; k < s->steps->len; k++)
        {
          guint c = column_of (run, l, g_array_index (s->steps, guint64, k));
          gdouble v = g_array_index (s->values, gdouble, k);

          if (!present[c] || (isfinite (cols[c]) && (!isfinite (v) || v > cols[c])))
            cols[c] = v;
          present[c] = TRUE;
        }
      for (guint c = 0; c < l->n_cols; c++)
        {
          const guint8 *rgb = !present[c] ? no_record : !isfinite (cols[c]) ? non_finite
                              : colour_of (scale_position (scale, cols[c]));
          guint32 pixel = 0xff000000u | (guint32) rgb[0] << 16 | (guint32) rgb[1] << 8 | rgb[2];

          for (guint y = r * l->rh; y < (r + 1) * l->rh; y++)
            for (guint x = c * l->cw; x < (c + 1) * l->cw; x++)
              *(guint32 *) (data + (gsize) y * stride + x * 4) = pixel;
        }
    }
  cairo_surface_mark_dirty (image);
  return image;
}

static void
set_rgb (cairo_t      *cr,
         const guint8 *rgb)
{
  cairo_set_source_rgb (cr, rgb[0] / 255.0, rgb[1] / 255.0, rgb[2] / 255.0);
}

static void
show_text_at (cairo_t     *cr,
              const gchar *text,
              gdouble      x,
              gdouble      y,
              gdouble      align)   /* 0 left, 0.5 centred, 1 right */
{
  cairo_move_to (cr, x - align * text_width (cr, text), y);
  cairo_show_text (cr, text);
}

static void
draw_rows (cairo_t               *cr,
           const InspectNumerics *run,
           const Layout          *l)
{
  set_font (cr, FONT_SIZE, FALSE);
  cairo_set_source_rgb (cr, 0, 0, 0);
  for (guint r = 0; r < l->n_rows; r += l->label_every)
    {
      const InspectSeries *s = g_ptr_array_index (run->series, r);
      gdouble y = l->y0 + (r + 0.5) * l->rh;

      show_text_at (cr, s->name, l->x0 - 6, y + FONT_SIZE * 0.35, 1);
      cairo_move_to (cr, l->x0 - 4, y);
      cairo_line_to (cr, l->x0, y);
    }
  cairo_set_line_width (cr, 1);
  cairo_stroke (cr);
}

/* Step numbers along the bottom, at nice steps, each under the column
 * that holds it. */
static void
draw_steps (cairo_t               *cr,
            const InspectNumerics *run,
            const Layout          *l)
{
  guint64 first = g_array_index (run->steps, guint64, 0);
  guint64 last = g_array_index (run->steps, guint64, run->steps->len - 1);
  guint64 step = (guint64) nice_step (MAX ((gdouble) (last - first) / 8, 1));
  gdouble free_from = -G_MAXDOUBLE;
  const gchar *axis;
  g_autofree gchar *binned = NULL;

  set_font (cr, FONT_SIZE, FALSE);
  cairo_set_source_rgb (cr, 0, 0, 0);
  cairo_set_line_width (cr, 1);
  for (guint64 v = (first + step - 1) / step * step; v <= last; v += step)
    {
      gchar text[32];
      guint c = column_of (run, l, v);
      gdouble x = l->x0 + (c + 0.5) * l->cw;
      gdouble w;

      g_snprintf (text, sizeof text, "%" G_GUINT64_FORMAT, v);
      w = text_width (cr, text);
      if (x - w / 2 < free_from)
        continue;
      cairo_move_to (cr, floor (x) + 0.5, l->y1);
      cairo_line_to (cr, floor (x) + 0.5, l->y1 + 4);
      cairo_stroke (cr);
      show_text_at (cr, text, x, l->y1 + 6 + FONT_SIZE, 0.5);
      free_from = x + w / 2 + 8;
    }
  if (l->per_col > 1)
    axis = binned = g_strdup_printf ("optimizer step (a column shows the worst of %u steps)",
                                     l->per_col);
  else
    axis = "optimizer step";
  show_text_at (cr, axis, (l->x0 + l->x1) / 2, l->y1 + 6 + 2 * FONT_SIZE + 8, 0.5);
}

/* A mark above each column that holds a step the loss scaler skipped. */
static void
draw_skipped (cairo_t               *cr,
              const InspectNumerics *run,
              const Layout          *l)
{
  gdouble y = l->y0 - 3;

  if (run->skipped->len == 0)
    return;
  set_font (cr, FONT_SIZE, FALSE);
  cairo_set_source_rgb (cr, 0, 0, 0);
  show_text_at (cr, "skipped steps", l->x0 - 6, y - 1, 1);
  for (guint i = 0; i < run->skipped->len; i++)
    {
      guint64 step = g_array_index (run->skipped, guint64, i);
      guint c = column_of (run, l, step);
      gdouble x = l->x0 + (c + 0.5) * l->cw;

      if (c >= l->n_cols)
        continue;
      cairo_move_to (cr, x, y);
      cairo_line_to (cr, x - 3.5, y - 7);
      cairo_line_to (cr, x + 3.5, y - 7);
      cairo_close_path (cr);
    }
  cairo_fill (cr);
}

static void
draw_bar (cairo_t      *cr,
          const Layout *l,
          const Scale  *scale)
{
  g_autoptr(GArray) ticks = bar_ticks (scale);
  gdouble h = l->bar_y1 - l->bar_y0;

  /* A band per colormap entry, the highest at the top. */
  for (guint i = 0; i < 256; i++)
    {
      gdouble top = l->bar_y1 - h * (i + 1) / 256, bottom = l->bar_y1 - h * i / 256;

      set_rgb (cr, inspect_viridis[i]);
      cairo_rectangle (cr, l->bar_x, floor (top), BAR_WIDTH, ceil (bottom) - floor (top));
      cairo_fill (cr);
    }
  cairo_set_source_rgb (cr, 0, 0, 0);
  cairo_set_line_width (cr, 1);
  cairo_rectangle (cr, l->bar_x - 0.5, l->bar_y0 - 0.5, BAR_WIDTH + 1, h + 1);
  cairo_stroke (cr);
  set_font (cr, FONT_SIZE, FALSE);
  for (guint i = 0; i < ticks->len; i++)
    {
      gdouble v = g_array_index (ticks, gdouble, i);
      gdouble y = floor (l->bar_y1 - h * scale_position (scale, v)) + 0.5;
      gchar buf[G_ASCII_DTOSTR_BUF_SIZE];

      cairo_move_to (cr, l->bar_x + BAR_WIDTH, y);
      cairo_line_to (cr, l->bar_x + BAR_WIDTH + 4, y);
      cairo_stroke (cr);
      format_tick (buf, v, scale->log);
      show_text_at (cr, buf, l->bar_x + BAR_WIDTH + 6, y + FONT_SIZE * 0.35, 0);
    }
}

/* What the two colours outside the colormap mean. */
static void
draw_legend (cairo_t      *cr,
             const Layout *l)
{
  gdouble x = l->x0, y = l->height - PAD - FONT_SIZE;

  set_font (cr, FONT_SIZE, FALSE);
  set_rgb (cr, non_finite);
  cairo_rectangle (cr, x, y, 12, 12);
  cairo_fill (cr);
  cairo_set_source_rgb (cr, 0, 0, 0);
  show_text_at (cr, "nan or inf", x + 16, y + 10, 0);
  x += 16 + text_width (cr, "nan or inf") + 18;
  set_rgb (cr, no_record);
  cairo_rectangle (cr, x, y, 12, 12);
  cairo_fill (cr);
  cairo_set_source_rgb (cr, 0, 0, 0);
  show_text_at (cr, "no record", x + 16, y + 10, 0);
}

static void
draw (cairo_t               *cr,
      cairo_surface_t       *cells,
      const InspectNumerics *run,
      const Layout          *l,
      const Scale           *scale)
{
  g_autofree gchar *title = g_strdup_printf ("%s per %s, run %s", run->stat,
                                             run->by_type ? "module type" : "parameter", run->run);
  gchar lo[G_ASCII_DTOSTR_BUF_SIZE], hi[G_ASCII_DTOSTR_BUF_SIZE];
  g_autofree gchar *subtitle = NULL;

  cairo_set_source_rgb (cr, 1, 1, 1);
  cairo_paint (cr);

  format_tick (lo, scale->lo, scale->log);
  format_tick (hi, scale->hi, scale->log);
  subtitle = g_strdup_printf ("colour: %s scale from %s to %s; %u %s%s in layer order, "
                              "top to bottom", scale->log ? "log" : "linear", lo, hi, l->n_rows,
                              run->by_type ? "module type" : "parameter", l->n_rows == 1 ? "" : "s");
  cairo_set_source_rgb (cr, 0, 0, 0);
  set_font (cr, TITLE_SIZE, TRUE);
  show_text_at (cr, title, PAD, PAD + TITLE_SIZE, 0);
  set_font (cr, FONT_SIZE, FALSE);
  show_text_at (cr, subtitle, PAD, PAD + 20 + FONT_SIZE + 2, 0);

  cairo_set_source_surface (cr, cells, l->x0, l->y0);
  cairo_pattern_set_filter (cairo_get_source (cr), CAIRO_FILTER_NEAREST);
  cairo_rectangle (cr, l->x0, l->y0, l->x1 - l->x0, l->y1 - l->y0);
  cairo_fill (cr);
  cairo_set_source_rgb (cr, 0, 0, 0);
  cairo_set_line_width (cr, 1);
  cairo_rectangle (cr, l->x0 - 0.5, l->y0 - 0.5, l->x1 - l->x0 + 1, l->y1 - l->y0 + 1);
  cairo_stroke (cr);

  draw_rows (cr, run, l);
  draw_steps (cr, run, l);
  draw_skipped (cr, run, l);
  draw_bar (cr, l, scale);
  draw_legend (cr, l);
}

/* ---------------------------------------------------------------- files */

typedef struct
{
  int fd;
  int error;
} Sink;

static cairo_status_t
sink_write (void                *closure,
            const unsigned char *data,
            unsigned int         length)
{
  Sink *sink = closure;

  while (length > 0)
    {
      gssize n = write (sink->fd, data, length);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          sink->error = errno;
          return CAIRO_STATUS_WRITE_ERROR;
        }
      data += n;
      length -= n;
    }
  return CAIRO_STATUS_SUCCESS;
}

/* The title's width, which the picture must be wide enough for. */
static guint
title_width (const InspectNumerics *run)
{
  cairo_surface_t *s = cairo_image_surface_create (CAIRO_FORMAT_RGB24, 1, 1);
  cairo_t *cr = cairo_create (s);
  g_autofree gchar *title = g_strdup_printf ("%s per %s, run %s", run->stat,
                                             run->by_type ? "module type" : "parameter", run->run);
  gdouble w;

  set_font (cr, TITLE_SIZE, TRUE);
  w = text_width (cr, title);
  cairo_destroy (cr);
  cairo_surface_destroy (s);
  return (guint) ceil (w) + 2 * PAD;
}

gboolean
inspect_heatmap_write (const InspectNumerics  *run,
                       const gchar            *path,
                       InspectHeatmapGeometry *geometry,
                       GError                **error)
{
  g_autofree gchar *lower = g_ascii_strdown (path, -1);
  gboolean svg = g_str_has_suffix (lower, ".svg");
  Scale scale = scale_of (run);
  cairo_surface_t *measure, *target, *cells = NULL;
  cairo_status_t status;
  cairo_t *cr;
  Layout l;
  Sink sink = { -1, 0 };

  measure = cairo_image_surface_create (CAIRO_FORMAT_RGB24, 1, 1);
  cr = cairo_create (measure);
  l = layout_of (cr, run, &scale);
  cairo_destroy (cr);
  cairo_surface_destroy (measure);
  l.width = MAX (l.width, title_width (run));

  /* The picture replaces a file of that name, but is never written
   * through a link someone left there. */
  sink.fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0644);
  if (sink.fd < 0)
    {
      int saved = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "--heatmap %s: cannot write the heat map: %s", path,
                   saved == ELOOP ? "it is a symbolic link, which is not followed"
                                  : g_strerror (saved));
      return FALSE;
    }

  cells = draw_cells (run, &l, &scale);
  if (svg)
    target = cairo_svg_surface_create_for_stream (sink_write, &sink, l.width, l.height);
  else
    target = cairo_image_surface_create (CAIRO_FORMAT_RGB24, l.width, l.height);
  cr = cairo_create (target);
  draw (cr, cells, run, &l, &scale);
  status = cairo_status (cr);
  cairo_destroy (cr);
  if (status == CAIRO_STATUS_SUCCESS && !svg)
    status = cairo_surface_write_to_png_stream (target, sink_write, &sink);
  cairo_surface_finish (target);
  if (status == CAIRO_STATUS_SUCCESS)
    status = cairo_surface_status (target);
  cairo_surface_destroy (target);
  cairo_surface_destroy (cells);
  /* cairo and fontconfig keep the fonts and the font configuration they
   * loaded until told; the tool draws one picture, so it hands them back
   * (and leak checkers see no leak). */
  cairo_debug_reset_static_data ();
  FcFini ();
  if (close (sink.fd) != 0 && sink.error == 0 && status == CAIRO_STATUS_SUCCESS)
    {
      sink.error = errno;
      status = CAIRO_STATUS_WRITE_ERROR;
    }
  if (status != CAIRO_STATUS_SUCCESS)
    {
      g_set_error (error, G_FILE_ERROR,
                   sink.error != 0 ? g_file_error_from_errno (sink.error) : G_FILE_ERROR_FAILED,
                   "--heatmap %s: cannot write the heat map: %s", path,
                   sink.error != 0 ? g_strerror (sink.error) : cairo_status_to_string (status));
      unlink (path);
      return FALSE;
    }

  geometry->width = l.width;
  geometry->height = l.height;
  geometry->x0 = (guint) l.x0;
  geometry->y0 = (guint) l.y0;
  geometry->x1 = (guint) l.x1;
  geometry->y1 = (guint) l.y1;
  geometry->n_columns = l.n_cols;
  geometry->steps_per_column = l.per_col;
  return TRUE;
}

const gchar *
inspect_heatmap_backend (void)
{
  return cairo_version_string ();
}

#else /* !HAVE_CAIRO */

gboolean
inspect_heatmap_write (const InspectNumerics  *run,
                       const gchar            *path,
                       InspectHeatmapGeometry *geometry,
                       GError                **error)
{
  g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_NOSYS,
               "--heatmap %s: this mixprec-inspect was built without cairo, so it draws no "
               "heat maps", path);
  return FALSE;
}

const gchar *
inspect_heatmap_backend (void)
{
  return NULL;
}

#endif /* HAVE_CAIRO */
