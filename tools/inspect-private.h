/* inspect-private.h — the parts of mixprec-inspect, one file each. Every
 * part prints to stdout, reports problems on stderr and returns the exit
 * status. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

int inspect_formats (void);
int inspect_list    (void);
int inspect_name    (const gchar *name);
int inspect_config  (const gchar         *path,
                     const gchar * const *sets);
int inspect_plan    (const gchar         *config_path,
                     const gchar * const *sets,
                     guint64              n_params,
                     guint                world_size,
                     guint64              gathered,
                     guint                ranks_per_host);
int inspect_checkpoint (const gchar *dir,
                        gboolean     verify);

/* --numerics: @stat and @heatmap may be NULL; @by_type reads the series
 * of module types instead of parameters; @top 0 lists every series. */
int inspect_numerics (const gchar *source,
                      const gchar *stat,
                      gboolean     by_type,
                      guint        top,
                      const gchar *heatmap);

/* One statistic's series of a run, as csv_monitor wrote them
 * (inspect-numerics-read.c). */
typedef struct
{
  gchar  *name;       /* the parameter or module type */
  gchar  *path;       /* the file it was read from, for messages */
  GArray *steps;      /* guint64, ascending, each once */
  GArray *values;     /* gdouble, one per step; NaN and infinities kept */
} InspectSeries;

typedef struct
{
  gchar     *run;       /* the run's name: the folder's (or file's) base name */
  gchar     *stat;      /* the statistic, as the files' headers name it */
  gboolean   by_type;   /* series per module type, not per parameter */
  gboolean   log_scale; /* magnitudes drawn on a log scale; fractions linear */
  GPtrArray *series;    /* InspectSeries, in natural order of their names */
  GArray    *steps;     /* guint64: every step any series records, ascending */
  GArray    *skipped;   /* guint64: the steps the loss scaler skipped, ascending */
} InspectNumerics;

/* Reads the statistic @stat (NULL: the only one there is) of the folder
 * or file @source; on a problem sets @error naming the file and line. */
InspectNumerics *inspect_numerics_read (const gchar *source,
                                        const gchar *stat,
                                        gboolean     by_type,
                                        GError     **error);
void             inspect_numerics_free (InspectNumerics *run);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (InspectNumerics, inspect_numerics_free)

/* One record of a series, in the order it was read (a later record of
 * the same step replaces an earlier one). */
typedef struct
{
  guint64 step;
  gdouble value;
  guint   order;
} InspectRecord;

/* Opens @name in @dir_fd (or the path @name when @dir_fd is AT_FDCWD)
 * for reading: a regular file, a link inside a folder not followed. -1
 * with @error set, naming @path, otherwise (inspect-numerics-read.c). */
int      inspect_open_file         (int          dir_fd,
                                    const gchar *name,
                                    const gchar *path,
                                    GError     **error);
/* Appends the rest of @fd to @out; @path names it in @error. */
gboolean inspect_read_fd           (int          fd,
                                    const gchar *path,
                                    GByteArray  *out,
                                    GError     **error);

/* A CSV file of csv_monitor's (inspect-numerics-csv.c): the statistic its
 * header names, or its rows by step (each step once, its last record),
 * checking that the header names @stat. A link is not followed when
 * @dir_fd is a folder's. */
gchar   *inspect_csv_read_header   (int          dir_fd,
                                    const gchar *name,
                                    const gchar *path,
                                    GError     **error);
gboolean inspect_csv_read_series   (int          dir_fd,
                                    const gchar *name,
                                    const gchar *path,
                                    const gchar *stat,
                                    GArray      *steps,
                                    GArray      *values,
                                    GError     **error);
/* @records (InspectRecord) sorted by step, each step once: its last
 * record, into @steps and @values. */
void     inspect_records_to_series (GArray      *records,
                                    GArray      *steps,
                                    GArray      *values);

/* Reads every scalar summary of the TensorBoard event file @name (in
 * @dir_fd, or a path when AT_FDCWD) into @tags: tag -> GArray of
 * InspectRecord (inspect-numerics-tb.c). FALSE with @error set when the
 * tool was built without protobuf-c or the file is damaged. */
gboolean inspect_tb_read (int          dir_fd,
                          const gchar *name,
                          const gchar *path,
                          GHashTable  *tags,
                          GError     **error);
/* The protobuf-c version event files are read with, or NULL. */
const gchar *inspect_tb_backend (void);

/* Orders names as a model registers its layers: runs of digits compare as
 * numbers ("h.2" before "h.10"), the rest byte by byte. */
gint inspect_natural_compare (const gchar *a,
                              const gchar *b);

/* Where the heat map drew its cells, so a reader can find them. */
typedef struct
{
  guint width, height;        /* of the image, in pixels (SVG: points) */
  guint x0, y0, x1, y1;       /* the cells' area */
  guint n_columns;
  guint steps_per_column;
} InspectHeatmapGeometry;

/* Draws @run as a heat map into @path (PNG or SVG by its extension).
 * Returns FALSE with @error set when the tool was built without cairo or
 * the file cannot be written. */
gboolean inspect_heatmap_write (const InspectNumerics  *run,
                                const gchar            *path,
                                InspectHeatmapGeometry *geometry,
                                GError                **error);
/* The cairo version the heat maps are drawn with, or NULL when the tool
 * was built without cairo. */
const gchar *inspect_heatmap_backend (void);

/* Reads @path (NULL: every default) with the --set overrides @sets
 * (path=VALUE each, may be NULL). */
MixprecConfig *inspect_load_config (const gchar         *path,
                                    const gchar * const *sets,
                                    GError             **error);

G_END_DECLS
