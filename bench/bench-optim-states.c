/* bench-optim-states.c — the optim-adamw plugin's fused step for every
 * optimizer-state representation and every master representation of
 * optimizer revision 3, beside the revision-2 FP32-state kernel, in the
 * same run and on the same threads.
 *
 * The job is bench-adamw's: a bf16 gradient in (times an unscale factor),
 * a bf16 working copy out with round-to-nearest-even; what changes per row
 * is how exp_avg and exp_avg_sq are stored (fp32, bf16, fp16 / bf16 / fp8
 * e4m3 with a scale per block, int8 or int4 block-wise dynamic) and how the
 * FP32 value of the parameter is kept (an FP32 master, the bf16 working
 * copy plus an int16 remainder, the working copy plus a bf16 Kahan
 * compensation, or the working copy alone). The range is cut into one
 * contiguous part per thread on multiples of 4096 elements, so every call
 * starts at a block boundary, as the engine's calls do.
 *
 *   bench-optim-states [--plugin PATH] [--threads N] [--size M]
 *                      [--min-seconds S] [--rows a,b,...] [--tsv]
 *
 * --size is in Mi parameters (default 16). Each figure is the best of
 * repeated steps lasting at least --min-seconds (at least 3 steps). A row
 * the plugin cannot run (no revision-3 vtable, or a format it does not
 * list) is printed as skipped with the plugin's reason. The plugin defaults
 * to $MIXPREC_TOP_BUILDDIR/plugins/.libs/mixprec-optim-adamw.so, else
 * ./plugins/.libs/ under the current directory. Prints; judges nothing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <gmodule.h>
#include <mixprec/mixprec-plugin.h>

#include "bench-pool.h"

/* Elements per thread part: a multiple of every block size (32 .. 4096). */
#define PART_QUANTUM 4096

static void
part_range (gsize  n,
            guint  part,
            guint  n_parts,
            gsize *begin,
            gsize *end)
{
  pool_part_range (n, PART_QUANTUM, part, n_parts, begin, end);
}

/* ------------------------------------------------------------ the plugin */

/* Loads the plugin twice, once through a host of ABI 1.1 (its revision-2
 * vtable, the FP32-state kernel of today) and once through a host of this
 * header's ABI (its revision-3 vtable, where it has one). */
static void
load_adamw (const gchar               *path,
            const MixprecOptimizerV2 **v2,
            const MixprecOptimizerV3 **v3)
{
  const MixprecOptimizerV2 *current;

  bench_load_adamw (path, 1, v2, NULL);
  bench_load_adamw (path, MIXPREC_PLUGIN_ABI_VERSION_MINOR, &current, v3);
  if (*v2 == NULL)
    g_error ("%s: registered no revision-2 optimizer", path);
}

/* ------------------------------------------------------------ the rows */

typedef struct {
  const gchar *name;
  MixprecPluginStateFormat state;   /* both slots */
  MixprecPluginMasterFormat master;
  gboolean no_master;               /* master NULL, the working copy alone */
  gboolean revision2;               /* through the revision-2 vtable */
} Row;

static const Row rows[] = {
  { "fp32-v2", MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, TRUE },
  { "bf16-v2", MIXPREC_PLUGIN_STATE_BFLOAT16, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, TRUE },
  { "fp32", MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "bf16", MIXPREC_PLUGIN_STATE_BFLOAT16, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "fp16_scaled", MIXPREC_PLUGIN_STATE_FLOAT16_SCALED, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "bf16_scaled", MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "fp8_e4m3_scaled", MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "int8", MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "int4", MIXPREC_PLUGIN_STATE_INT4_DYNAMIC, MIXPREC_PLUGIN_MASTER_FLOAT32, FALSE, FALSE },
  { "master-remainder", MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_MASTER_REMAINDER, FALSE, FALSE },
  { "master-kahan", MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_MASTER_KAHAN, FALSE, FALSE },
  { "master-none", MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_MASTER_FLOAT32, TRUE, FALSE },
  { "int8+remainder", MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, MIXPREC_PLUGIN_MASTER_REMAINDER, FALSE, FALSE },
};

static guint
block_size_of (MixprecPluginStateFormat f)
{
  switch (f)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT32:
    case MIXPREC_PLUGIN_STATE_BFLOAT16:
      return 0;
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
      return 128;
    default:
      return 256;
    }
}

/* Bytes one element of a slot occupies, its block's scale included. */
static double
state_bytes (MixprecPluginStateFormat f)
{
  guint b = block_size_of (f);
  double scale = b ? 4.0 / b : 0;

  switch (f)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT32:
      return 4;
    case MIXPREC_PLUGIN_STATE_BFLOAT16:
      return 2;
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return 2 + scale;
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
    case MIXPREC_PLUGIN_STATE_INT8_DYNAMIC:
      return 1 + scale;
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
      return 0.5 + scale;
    }
  return 4;
}

/* Bytes read and written per parameter: the gradient (2) and the working
 * copy (2) in any case, the master's (4 or 2 and read + write) and both
 * slots' (read + write). */
static double
bytes_per_param (const Row *r)
{
  double master = r->no_master ? 0 : r->master == MIXPREC_PLUGIN_MASTER_FLOAT32 ? 8 : 4;

  /* The working copy is read too where it is the parameter's high half. */
  double working = r->no_master || r->master != MIXPREC_PLUGIN_MASTER_FLOAT32 ? 4 : 2;

  return 2 + working + master + 4 * state_bytes (r->state);
}

static gsize
slot_bytes (MixprecPluginStateFormat f,
            gsize                    n)
{
  switch (f)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT32:
      return n * 4;
    case MIXPREC_PLUGIN_STATE_BFLOAT16:
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return n * 2;
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
    case MIXPREC_PLUGIN_STATE_INT8_DYNAMIC:
      return n;
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
      return (n + 1) / 2;
    }
  return n * 4;
}

static MixprecPluginDType
state_dtype_of (MixprecPluginStateFormat f)
{
  switch (f)
    {
    case MIXPREC_PLUGIN_STATE_BFLOAT16:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return MIXPREC_PLUGIN_DTYPE_BFLOAT16;
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
      return MIXPREC_PLUGIN_DTYPE_FLOAT16;
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
      return MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3;
    default:
      return MIXPREC_PLUGIN_DTYPE_FLOAT32;
    }
}

typedef struct {
  const Row *row;
  const MixprecOptimizerV2 *v2;
  const MixprecOptimizerV3 *v3;
  MixprecOptimizerStepV3 args;
  MixprecPluginStateFormat formats[2];
  MixprecPluginDType dtypes[2];
  double hparams[7];
  gsize n;
  guint block;
  float *master;
  guint8 *extra;                    /* int16 remainder or bf16 compensation */
  guint8 *states[2];
  float *scales[2];
  guint16 *grad;
  guint16 *working;
  gboolean failed;
  gchar errbuf[256];
} Step;

static void
step_part (gpointer data,
           guint    part,
           guint    n_parts)
{
  Step *s = data;
  MixprecOptimizerStepV3 args = s->args;
  char errbuf[256];
  void *states[2];
  float *scales[2] = { NULL, NULL };
  gsize begin, end;
  int rc;

  part_range (s->n, part, n_parts, &begin, &end);
  if (begin == end)
    return;
  args.v2.base.first_index = begin;
  for (guint k = 0; k < 2; k++)
    {
      states[k] = s->states[k] + slot_bytes (s->formats[k], begin);
      if (s->scales[k] != NULL)
        scales[k] = s->scales[k] + begin / s->block;
    }
  args.state_scales = (float *const *) scales;
  args.master_extra = s->extra ? s->extra + begin * 2 : NULL;
  if (s->row->revision2)
    rc = s->v2->step (&args.v2, s->master + begin, s->grad + begin, states, s->working + begin,
                      end - begin, errbuf, sizeof errbuf);
  else
    rc = s->v3->step (&args, s->master ? s->master + begin : NULL, s->grad + begin, states,
                      s->working + begin, end - begin, errbuf, sizeof errbuf);
  if (rc != MIXPREC_PLUGIN_OK && !s->failed)
    {
      s->failed = TRUE;
      g_strlcpy (s->errbuf, errbuf, sizeof s->errbuf);
    }
}

static guint16
bf16_rne (float f)
{
  guint32 u;

  memcpy (&u, &f, 4);
  return (guint16) ((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static void
step_init (gpointer data,
           guint    part,
           guint    n_parts)
{
  Step *s = data;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i++)
    {
      float w = (float) (i % 1000) * 1e-4f - 0.05f;

      s->grad[i] = bench_grad_bf16 (i);
      if (s->master)
        s->master[i] = w;
      s->working[i] = bf16_rne (w);
    }
  for (guint k = 0; k < 2; k++)
    {
      gsize a = slot_bytes (s->formats[k], begin), b = slot_bytes (s->formats[k], end);

      memset (s->states[k] + a, 0, b - a);
      if (s->scales[k])
        for (gsize j = begin / s->block; j < (end + s->block - 1) / s->block; j++)
          s->scales[k][j] = 1e-12f;
    }
  if (s->extra)
    memset (s->extra + begin * 2, 0, (end - begin) * 2);
}

/* Before each timed step: the next step number, unless one has failed. */
static gboolean
next_step (gpointer data)
{
  Step *s = data;

  if (s->failed)
    return FALSE;
  s->args.v2.base.step++;
  return TRUE;
}

/* Best seconds of one step of @row over @n parameters, or a negative
 * number with @why set when the plugin cannot run it. */
static double
measure_row (Pool                     *pool,
             const Row                *row,
             const MixprecOptimizerV2 *v2,
             const MixprecOptimizerV3 *v3,
             gsize                     n,
             double                    min_seconds,
             gchar                   **why)
{
  Step s = { 0 };
  double best;

  if (!row->revision2)
    {
      if (v3 == NULL)
        {
          *why = g_strdup ("the plugin registers no revision-3 optimizer");
          return -1;
        }
      if (!(v3->state_format_mask & (1u << row->state)))
        {
          *why = g_strdup_printf ("the plugin's state_format_mask 0x%x lacks format %d", v3->state_format_mask,
                                  row->state);
          return -1;
        }
      if (!(v3->master_format_mask & (1u << row->master)))
        {
          *why = g_strdup_printf ("the plugin's master_format_mask 0x%x lacks format %d", v3->master_format_mask,
                                  row->master);
          return -1;
        }
    }
  s.row = row;
  s.v2 = v2;
  s.v3 = v3;
  s.n = n;
  s.block = block_size_of (row->state);
  bench_step_base_init (&s.args.v2.base, row->revision2 ? sizeof s.args.v2 : sizeof s.args, s.hparams);
  s.args.v2.state_rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
  for (guint k = 0; k < 2; k++)
    {
      s.formats[k] = row->state;
      s.dtypes[k] = state_dtype_of (row->state);
      s.states[k] = g_malloc (slot_bytes (row->state, n) + 1);
      if (s.block)
        s.scales[k] = g_new (float, (n + s.block - 1) / s.block);
    }
  s.args.v2.state_dtypes = s.dtypes;
  s.args.state_formats = s.formats;
  s.args.block_size = s.block;
  s.args.master_format = row->master;
  if (!row->no_master && row->master == MIXPREC_PLUGIN_MASTER_FLOAT32)
    s.master = g_new (float, n);
  if (row->master != MIXPREC_PLUGIN_MASTER_FLOAT32)
    s.extra = g_malloc (n * 2);
  s.grad = g_new (guint16, n);
  s.working = g_new (guint16, n);
  pool_run (pool, step_init, &s);
  pool_run (pool, step_part, &s);      /* warm-up */
  best = pool_best_seconds (pool, step_part, &s, min_seconds, next_step);
  if (s.failed)
    {
      *why = g_strdup_printf ("step() failed: %s", s.errbuf);
      best = -1;
    }
  for (guint k = 0; k < 2; k++)
    {
      g_free (s.states[k]);
      g_free (s.scales[k]);
    }
  g_free (s.master);
  g_free (s.extra);
  g_free (s.grad);
  g_free (s.working);
  return best;
}

int
main (int    argc,
      char **argv)
{
  g_autofree gchar *plugin = NULL;
  g_autofree gchar *rows_arg = NULL;
  gint threads = 2;
  double size = 16;
  double min_seconds = 1.0;
  gboolean tsv = FALSE;
  GOptionEntry entries[] = {
    { "plugin", 0, 0, G_OPTION_ARG_FILENAME, &plugin, "the optim-adamw module", "PATH" },
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "threads (default 2)", "N" },
    { "size", 0, 0, G_OPTION_ARG_DOUBLE, &size, "Mi parameters (default 16)", "M" },
    { "min-seconds", 0, 0, G_OPTION_ARG_DOUBLE, &min_seconds, "time per figure (default 1)", "S" },
    { "rows", 0, 0, G_OPTION_ARG_STRING, &rows_arg, "rows to run (default all)", "a,b" },
    { "tsv", 0, 0, G_OPTION_ARG_NONE, &tsv, "tab-separated output for scripts", NULL },
    { NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("- AdamW step per state and master representation");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) wanted = NULL;
  const MixprecOptimizerV2 *v2 = NULL;
  const MixprecOptimizerV3 *v3 = NULL;
  double rate[G_N_ELEMENTS (rows)];
  gchar *why[G_N_ELEMENTS (rows)] = { NULL };
  double base = 0, bf16 = 0;
  Pool *pool;
  gsize n;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  n = (gsize) (size * (1 << 20));
  if (threads < 1 || n == 0)
    {
      g_printerr ("--threads and --size must be positive\n");
      return 2;
    }
  if (plugin == NULL)
    plugin = bench_default_adamw_path ();
  if (rows_arg != NULL)
    wanted = g_strsplit (rows_arg, ",", -1);
  load_adamw (plugin, &v2, &v3);
  pool = pool_new (threads);
  for (guint r = 0; r < G_N_ELEMENTS (rows); r++)
    {
      double sec;

      rate[r] = -1;
      if (wanted != NULL && !g_strv_contains ((const gchar * const *) wanted, rows[r].name))
        continue;
      sec = measure_row (pool, &rows[r], v2, v3, n, min_seconds, &why[r]);
      if (sec > 0)
        rate[r] = n / sec;
      if (g_str_equal (rows[r].name, "fp32-v2"))
        base = rate[r];
      if (g_str_equal (rows[r].name, "bf16"))
        bf16 = rate[r];
    }
  pool_free (pool);

  if (!tsv)
    g_print ("optim-adamw, %" G_GSIZE_FORMAT " parameters, %d threads, bf16 gradient in, bf16 working copy out\n"
             "%-17s %13s %9s %8s %12s %12s\n", n, threads,
             "row", "params/s", "B/param", "GB/s", "/ fp32-v2", "/ bf16");
  for (guint r = 0; r < G_N_ELEMENTS (rows); r++)
    {
      double bpp = bytes_per_param (&rows[r]);

      if (wanted != NULL && !g_strv_contains ((const gchar * const *) wanted, rows[r].name))
        continue;
      if (tsv && rate[r] > 0)
        g_print ("%s\t%" G_GSIZE_FORMAT "\t%.6g\t%.3f\n", rows[r].name, n, rate[r], bpp);
      else if (tsv)
        g_print ("%s\t%" G_GSIZE_FORMAT "\tskipped: %s\t%.3f\n", rows[r].name, n, why[r], bpp);
      else if (rate[r] > 0)
        g_print ("%-17s %13.4g %9.3f %8.2f %11.3fx %11.3fx\n", rows[r].name, rate[r], bpp,
                 rate[r] * bpp / 1e9, base > 0 ? rate[r] / base : 0, bf16 > 0 ? rate[r] / bf16 : 0);
      else
        g_print ("%-17s skipped: %s\n", rows[r].name, why[r]);
    }
  for (guint r = 0; r < G_N_ELEMENTS (rows); r++)
    g_free (why[r]);
  return 0;
}
