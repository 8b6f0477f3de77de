/* bench-fp8-gather.c — what ZeRO-3 parameter gathering moves per step with
 * FP8 or 4-bit working copies beside bf16 ones: a stack of Linear layers
 * trained on --ranks processes of this host, every layer gathered for the
 * forward and the backward pass, with fp8 off (bf16 gathers), with the
 * delayed and MX FP8 recipes (a byte an element, plus a block scale per 32
 * for MX), and with the fp4 section's MXFP4 and NVFP4 (16x16 tiles)
 * copies (half a byte an element plus a scale per 32 or 16). Prints, per
 * configuration, the bytes one rank received from the others per step
 * (mixprec_engine_get_gathered_bytes()) and the median step time; then
 * the throughput of each cast over the same elements against memcpy of
 * their fp32 values.
 *
 * Started without MIXPREC_RANK it is the driver: it runs itself as --ranks
 * processes per configuration and prints one table.
 *
 *   bench-fp8-gather [--ranks 2] [--layers 8] [--hidden 1024] [--steps 5]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

static gint ranks = 2;
static gint layers = 8;
static gint hidden = 1024;
static gint steps = 5;

static const gchar *const recipes[] = { "off", "delayed", "mx", "mxfp4", "nvfp4" };

static gchar *
config_json (const gchar *recipe)
{
  g_autofree gchar *fp8 = g_str_equal (recipe, "off") ? g_strdup ("")
    : g_str_has_suffix (recipe, "fp4")
    ? g_strdup_printf ("\"fp4\": {\"enabled\": true, \"recipe\": \"%s\", \"modules\": [\"Linear\"]},",
                       recipe)
    : g_strdup_printf ("\"fp8\": {\"enabled\": true, \"recipe\": \"%s\", \"modules\": [\"Linear\"]},",
                       recipe);

  return g_strdup_printf ("{\"bf16\": {\"enabled\": true}, %s"
                          " \"zero_optimization\": {\"stage\": 3,"
                          "  \"stage3_param_persistence_threshold\": 1000},"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}}", fp8);
}

static int
rank_main (void)
{
  g_autoptr(GError) error = NULL;
  const gchar *recipe = g_getenv ("BENCH_FP8_RECIPE");
  const gchar *out = g_getenv ("BENCH_FP8_OUT");
  g_autofree gchar *json = config_json (recipe);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GPtrArray) params = g_ptr_array_new ();
  g_autofree guint16 *grad = NULL;
  g_autofree gfloat *init = NULL;
  g_autoptr(GBytes) values = NULL;
  g_autofree gdouble *times = NULL;
  guint64 numel = (guint64) hidden * hidden, before;
  g_autofree gchar *line = NULL;

  if (config == NULL || (engine = mixprec_engine_new (config, &error)) == NULL)
    goto fail;
  init = g_new (gfloat, numel);
  for (guint64 i = 0; i < numel; i++)
    init[i] = (gfloat) ((gint64) (i % 201) - 100) / 1000.0f;
  values = g_bytes_new_take (g_steal_pointer (&init), numel * sizeof (gfloat));
  for (gint l = 0; l < layers; l++)
    {
      g_autofree gchar *name = g_strdup_printf ("h%d.weight", l);
      guint64 shape[2] = { (guint64) hidden, (guint64) hidden };
      MixprecParam *p = mixprec_engine_register_param (engine, name, shape, 2, "Linear",
                                                       MIXPREC_DTYPE_FLOAT32, values, &error);

      if (p == NULL)
        goto fail;
      g_ptr_array_add (params, p);
    }
  grad = g_new (guint16, numel);
  for (guint64 i = 0; i < numel; i++)
    grad[i] = (guint16) (0x3c00 + (i % 97));      /* bf16 values near 1 */
  times = g_new0 (gdouble, steps);
  before = mixprec_engine_get_gathered_bytes (engine);
  if (!mixprec_engine_prepare (engine, &error))
    goto fail;
  for (gint k = 0; k < steps; k++)
    {
      gint64 t0 = g_get_monotonic_time ();
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint l = 0; l < params->len; l++)                   /* forward */
        {
          if (!mixprec_engine_gather (engine, params->pdata[l], &error))
            goto fail;
          mixprec_engine_release (engine, params->pdata[l]);
        }
      for (guint l = params->len; l-- > 0;)                     /* backward */
        {
          if (!mixprec_engine_gather (engine, params->pdata[l], &error) ||
              !mixprec_param_reduce_grad (params->pdata[l], MIXPREC_DTYPE_BFLOAT16, grad, &error))
            goto fail;
          mixprec_engine_release (engine, params->pdata[l]);
        }
      if (!mixprec_engine_backward_done (engine, &error) ||
          (r = mixprec_engine_step (engine, &error)) == NULL)
        goto fail;
      times[k] = (g_get_monotonic_time () - t0) / 1e3;
    }
  if (mixprec_engine_get_rank (engine) != 0)
    return 0;
  {
    gdouble sorted[64];
    guint n = MIN ((guint) steps, G_N_ELEMENTS (sorted));

    memcpy (sorted, times, n * sizeof (gdouble));
    for (guint i = 1; i < n; i++)
      for (guint j = i; j > 0 && sorted[j - 1] > sorted[j]; j--)
        {
          gdouble t = sorted[j];

          sorted[j] = sorted[j - 1];
          sorted[j - 1] = t;
        }
    line = g_strdup_printf ("%s %" G_GUINT64_FORMAT " %.2f\n", recipe,
                            (mixprec_engine_get_gathered_bytes (engine) - before) / (guint64) steps,
                            sorted[n / 2]);
  }
  if (!g_file_set_contents (out, line, -1, &error))
    goto fail;
  return 0;

fail:
  g_printerr ("bench-fp8-gather: %s\n", error != NULL ? error->message : "failed");
  return 1;
}

/* Milliseconds of the fastest of 5 runs of @what over @n values. */
typedef enum { CAST_MEMCPY, CAST_FP8, CAST_MXFP8, CAST_MXFP4, CAST_NVFP4, CAST_NVFP4_2D } Cast;

static gdouble
time_cast (Cast what, const gfloat *src, gsize n, gsize cols, gpointer dst, guint8 *scales)
{
  gdouble best = G_MAXDOUBLE;

  for (guint k = 0; k < 5; k++)
    {
      gint64 t0 = g_get_monotonic_time ();
      gboolean ok = TRUE;
      gfloat amax, ts;

      switch (what)
        {
        case CAST_MEMCPY:
          memcpy (dst, src, n * sizeof (gfloat));
          break;
        case CAST_FP8:
          ok = mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, src, n, 1.0f,
                                     MIXPREC_FP8_OVERFLOW_SATURATING, dst, &amax, NULL);
          break;
        case CAST_MXFP8:
          ok = mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, src, n, 32, dst, scales, NULL);
          break;
        case CAST_MXFP4:
        case CAST_NVFP4:
        case CAST_NVFP4_2D:
          ok = mixprec_quantize_blocks (what == CAST_MXFP4 ? MIXPREC_BLOCK_RECIPE_MXFP4
                                        : what == CAST_NVFP4 ? MIXPREC_BLOCK_RECIPE_NVFP4
                                        : MIXPREC_BLOCK_RECIPE_NVFP4_2D, MIXPREC_MX_SCALE_FLOOR,
                                        src, n / cols, cols, MIXPREC_ROUNDING_NEAREST_EVEN, 0,
                                        dst, scales, &ts, NULL);
          break;
        }
      if (!ok)
        return -1.0;
      best = MIN (best, (g_get_monotonic_time () - t0) / 1e3);
    }
  return best;
}

/* The casts' throughput against memcpy, over every layer's elements. */
static void
print_casts (void)
{
  static const struct { Cast what; const gchar *name; } casts[] = {
    { CAST_MEMCPY, "memcpy f32" }, { CAST_FP8, "fp8 e4m3" }, { CAST_MXFP8, "mxfp8" },
    { CAST_MXFP4, "mxfp4" }, { CAST_NVFP4, "nvfp4 1x16" }, { CAST_NVFP4_2D, "nvfp4 16x16" },
  };
  gsize n = (gsize) layers * hidden * hidden;
  g_autofree gfloat *src = g_new (gfloat, n);
  g_autofree gfloat *dst = g_new (gfloat, n);
  g_autofree guint8 *scales = g_new (guint8, n / 16 + 1);
  gdouble memcpy_ms = 0.0;

  for (gsize i = 0; i < n; i++)
    src[i] = (gfloat) ((gint64) (i % 2011) - 1005) / 997.0f;
  memset (dst, 0, n * sizeof (gfloat));     /* fault the pages in before timing */
  g_print ("\n# casts of %zu fp32 values (the layers' elements), best of 5, GB/s of fp32 read;\n"
           "# the fp8 casts run on the library's thread pool (%u processors here), the\n"
           "# 4-bit ones (mixprec_quantize_blocks()) on one thread\n", n, g_get_num_processors ());
  g_print ("%-12s %10s %10s %10s\n", "cast", "ms", "GB/s", "vs memcpy");
  for (guint i = 0; i < G_N_ELEMENTS (casts); i++)
    {
      gdouble ms = hidden % 32 == 0 || casts[i].what <= CAST_MXFP8
                   ? time_cast (casts[i].what, src, n, (gsize) hidden, dst, scales) : -1.0;

      if (i == 0)
        memcpy_ms = ms;
      if (ms < 0)
        {
          g_print ("%-12s %10s\n", casts[i].name, "n/a");
          continue;
        }
      g_print ("%-12s %10.2f %10.2f %10.3f\n", casts[i].name, ms,
               n * sizeof (gfloat) / (ms * 1e6), memcpy_ms / ms);
    }
}

static int
driver_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("bench-fp8-gather-XXXXXX", &error);
  guint64 bf16_bytes = 0;

  if (dir == NULL)
    {
      g_printerr ("bench-fp8-gather: %s\n", error->message);
      return 1;
    }
  g_print ("# ZeRO-3 gathers per step, %d ranks, %d Linear layers of %dx%d (bf16 working copies),\n"
           "# each gathered for the forward and the backward pass; bytes one rank received\n",
           ranks, layers, hidden, hidden);
  g_print ("%-10s %16s %8s %12s\n", "copies", "bytes/step", "vs bf16", "step ms");
  for (guint i = 0; i < G_N_ELEMENTS (recipes); i++)
    {
      g_autofree gchar *file = g_build_filename (dir, recipes[i], NULL);
      g_autofree gchar *rvar = g_strdup_printf ("BENCH_FP8_RECIPE=%s", recipes[i]);
      g_autofree gchar *ovar = g_strdup_printf ("BENCH_FP8_OUT=%s", file);
      g_autofree gchar *text = NULL;
      g_autofree gchar *shape = g_strdup_printf ("BENCH_FP8_RANK=%d:%d:%d", layers, hidden, steps);
      const gchar *env[] = { shape, rvar, ovar, NULL };
      gint status[16] = { 0 };
      g_auto(GStrv) f = NULL;
      guint64 bytes;

      mp_run_ranks ((guint) ranks, 600000, env, status);
      for (gint r = 0; r < ranks; r++)
        if (status[r] != 0)
          {
            g_printerr ("bench-fp8-gather: rank %d of '%s' exited with %d\n", r, recipes[i], status[r]);
            return 1;
          }
      if (!g_file_get_contents (file, &text, NULL, &error))
        {
          g_printerr ("bench-fp8-gather: %s\n", error->message);
          return 1;
        }
      f = g_strsplit (g_strstrip (text), " ", -1);
      bytes = g_ascii_strtoull (f[1], NULL, 10);
      if (i == 0)
        bf16_bytes = bytes;
      g_print ("%-10s %16" G_GUINT64_FORMAT " %8.3f %12s\n", recipes[i], bytes,
               bf16_bytes > 0 ? (gdouble) bytes / bf16_bytes : 0.0, f[2]);
      g_remove (file);
    }
  g_rmdir (dir);
  print_casts ();
  return 0;
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GOptionContext) context = g_option_context_new ("- ZeRO-3 gather bytes, FP8 and FP4 beside bf16");
  GOptionEntry entries[] = {
    { "ranks", 0, 0, G_OPTION_ARG_INT, &ranks, "Processes (default 2)", "N" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &layers, "Linear layers (default 8)", "N" },
    { "hidden", 0, 0, G_OPTION_ARG_INT, &hidden, "Layer width (default 1024)", "N" },
    { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "Steps (default 5)", "N" },
    { NULL }
  };

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("bench-fp8-gather: %s\n", error->message);
      return 2;
    }
  if (ranks < 1 || ranks > 16 || layers < 1 || hidden < 1 || steps < 1 || steps > 64)
    {
      g_printerr ("bench-fp8-gather: --ranks 1..16, --steps 1..64, --layers and --hidden >= 1\n");
      return 2;
    }
  if (g_getenv ("BENCH_FP8_RANK") != NULL)
    {
      /* The driver's options. */
      if (sscanf (g_getenv ("BENCH_FP8_RANK"), "%d:%d:%d", &layers, &hidden, &steps) != 3)
        return 2;
      return rank_main ();
    }
  return driver_main ();
}
