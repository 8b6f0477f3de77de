/* bench-zeropp-bytes.c — bytes on the wire per optimizer step per rank
 * (mixprec_engine_get_comm_bytes()) and the step time of ZeRO-3 on
 * several ranks, for FP32, bf16 with FP32 sums (mixprec.reduce_accumulation
 * "fp32"), ZeRO++ qwZ + qgZ, and qwZ + qgZ + hpZ, with each mode's ratio
 * to the bf16 run measured in the same invocation beside the ratio of
 * DeepSpeed's figures for the same modes
 * (mixprec_comm_bytes_plan_new_deepspeed()). A stack of Linear layers,
 * every layer gathered for the forward and again for the backward pass.
 *
 * Started without BENCH_ZPP_RANK it is the driver: it runs itself as
 * --ranks processes of this host per mode and prints one table. With
 * --from DIR it starts nothing and prints the table from the files that
 * ranks started elsewhere (bench/run-bench-zeropp-bytes.sh, on network
 * namespaces) wrote there as MODE.RANK.
 *
 *   bench-zeropp-bytes [--ranks 3] [--layers 8] [--hidden 1024] [--steps 5]
 *                      [--ranks-per-host R] [--modes M,M] [--from DIR]
 *   BENCH_ZPP_RANK=layers:hidden:steps BENCH_ZPP_MODE=M BENCH_ZPP_OUT_PREFIX=DIR/M
 *   [BENCH_ZPP_HPZ=K]
 *     bench-zeropp-bytes      (one rank of mode M, with MIXPREC_RANK etc.;
 *                              writes DIR/M.RANK)
 *
 * hpZ's groups are the hosts (--ranks-per-host R, when it puts more than
 * one rank but not every rank on a host; BENCH_ZPP_HPZ for a rank),
 * else the world, where hpZ is ZeRO-3's own partition and moves what
 * qwZ+qgZ moves.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

static gint ranks = 3;
static gint layers = 8;
static gint hidden = 1024;
static gint steps = 5;
static gint ranks_per_host = 0;
static gchar *from = NULL;
static gchar *mode_list = NULL;

/* The bf16 baseline first: the ratios are against it. */
static const gchar *const modes[] = { "bf16+fp32sum", "fp32", "qwZ+qgZ", "qwZ+qgZ+hpZ", "qwZ+qgZ-fp8" };

/* hpZ's group: a host's ranks where a host holds several but not all. */
static guint
hpz_group (guint world, guint per_host)
{
  return per_host > 1 && per_host < world ? per_host : world;
}

static gchar *
config_json (const gchar *mode, guint world, guint hpz_size)
{
  gboolean fp32 = g_str_equal (mode, "fp32");
  gboolean zpp = g_str_has_prefix (mode, "qwZ");
  gboolean hpz = g_str_has_suffix (mode, "hpZ");
  /* mixprec.quantized_*_format: FP8 E4M3 blocks for both (no DeepSpeed
   * counterpart). */
  gboolean fp8 = g_str_has_suffix (mode, "fp8");

  return g_strdup_printf ("{\"bf16\": {\"enabled\": %s}, "
                          "\"mixprec\": {\"reduce_accumulation\": \"%s\"%s}, "
                          "\"zero_optimization\": {\"stage\": 3, "
                          "\"stage3_param_persistence_threshold\": 0, "
                          "\"stage3_max_reuse_distance\": 0, "
                          "\"zero_quantized_weights\": %s, \"zero_quantized_gradients\": %s, "
                          "\"zero_hpz_partition_size\": %u}, "
                          "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}}",
                          fp32 ? "false" : "true", fp32 ? "grad_accum_dtype" : "fp32",
                          fp8 ? ", \"quantized_weights_format\": \"fp8_e4m3\", "
                                "\"quantized_gradients_format\": \"fp8_e4m3\"" : "",
                          zpp ? "true" : "false", zpp ? "true" : "false", hpz ? hpz_size : 1);
}

/* Whether --modes names @mode. */
static gboolean
mode_listed (const gchar *mode)
{
  g_auto(GStrv) names = g_strsplit (mode_list, ",", -1);

  return g_strv_contains ((const gchar * const *) names, mode);
}

static int
rank_main (void)
{
  g_autoptr(GError) error = NULL;
  const gchar *mode = g_getenv ("BENCH_ZPP_MODE");
  const gchar *prefix = g_getenv ("BENCH_ZPP_OUT_PREFIX");
  g_autofree gchar *out = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GPtrArray) params = g_ptr_array_new ();
  g_autoptr(MixprecCommBytes) b = NULL;
  g_autofree gchar *json = NULL;
  g_autofree guint16 *grad = NULL;
  g_autofree gfloat *init = NULL;
  g_autoptr(GBytes) values = NULL;
  g_autofree gdouble *times = NULL;
  g_autofree gchar *line = NULL;
  guint64 numel = (guint64) hidden * hidden;
  const gchar *world_text = g_getenv ("MIXPREC_WORLD_SIZE");

  if (mode == NULL || prefix == NULL)
    return 2;
  out = g_strdup_printf ("%s.%s", prefix, g_getenv ("MIXPREC_RANK") != NULL ? g_getenv ("MIXPREC_RANK") : "0");
  json = config_json (mode, world_text != NULL ? (guint) atoi (world_text) : 1,
                      g_getenv ("BENCH_ZPP_HPZ") != NULL ? (guint) atoi (g_getenv ("BENCH_ZPP_HPZ"))
                      : world_text != NULL ? (guint) atoi (world_text) : 1);
  if ((config = mixprec_config_new_from_data (json, -1, &error)) == NULL ||
      (engine = mixprec_engine_new (config, &error)) == NULL)
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
    grad[i] = (guint16) (0x3c00 + (i % 97) - 48);      /* bf16 values near 0.01 */
  times = g_new0 (gdouble, steps);
  if (!mixprec_engine_prepare (engine, &error))
    goto fail;
  for (gint k = 0; k < steps; k++)
    {
      gint64 t0 = g_get_monotonic_time ();
      g_autoptr(MixprecStepResult) r = NULL;

      /* forward, then backward: each gathers every unit once */
      if (!mixprec_engine_gather_all (engine, &error))
        goto fail;
      mixprec_engine_release_all (engine);
      if (!mixprec_engine_gather_all (engine, &error))
        goto fail;
      for (guint l = params->len; l-- > 0;)
        if (!mixprec_param_reduce_grad (params->pdata[l], MIXPREC_DTYPE_BFLOAT16, grad, &error))
          goto fail;
      mixprec_engine_release_all (engine);
      if (!mixprec_engine_backward_done (engine, &error) ||
          (r = mixprec_engine_step (engine, &error)) == NULL)
        goto fail;
      times[k] = (g_get_monotonic_time () - t0) / 1e3;
    }
  /* the median step time */
  for (gint i = 1; i < steps; i++)
    for (gint j = i; j > 0 && times[j - 1] > times[j]; j--)
      {
        gdouble t = times[j];

        times[j] = times[j - 1];
        times[j - 1] = t;
      }
  b = mixprec_engine_get_comm_bytes (engine);
  line = g_strdup_printf ("%" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT
                          " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT
                          " %.2f\n", b->all_gather, b->reduce_scatter, b->scalars, b->other,
                          b->total, b->inter_host, times[steps / 2]);
  if (!g_file_set_contents (out, line, -1, &error))
    goto fail;
  return 0;

fail:
  g_printerr ("bench-zeropp-bytes: %s\n", error != NULL ? error->message : "failed");
  return 1;
}

typedef struct {
  guint64 all_gather, reduce_scatter, scalars, other, total, inter;
  gdouble ms;
} Row;

static gboolean
read_row (const gchar *file, Row *row, GError **error)
{
  g_autofree gchar *text = NULL;

  if (!g_file_get_contents (file, &text, NULL, error))
    return FALSE;
  if (sscanf (text, "%" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT
              " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %lf",
              &row->all_gather, &row->reduce_scatter, &row->scalars, &row->other, &row->total,
              &row->inter, &row->ms) != 7)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL, "%s: not a rank's line", file);
      return FALSE;
    }
  return TRUE;
}

static int
driver_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = from != NULL ? g_strdup (from) : g_dir_make_tmp ("bench-zeropp-bytes-XXXXXX", &error);
  guint64 n_params = (guint64) layers * hidden * hidden;
  guint per_host = ranks_per_host > 0 ? (guint) ranks_per_host : (guint) ranks;
  Row base = { 0 };
  gdouble ds_base = 0, ds_inter_base = 0, qq_ratio = -1;

  if (dir == NULL)
    {
      g_printerr ("bench-zeropp-bytes: %s\n", error->message);
      return 1;
    }
  g_print ("# ZeRO-3, %d ranks (%u per host), %d Linear layers of %dx%d (%" G_GUINT64_FORMAT
           " parameters), %d steps;\n# every layer gathered for the forward and the backward pass. "
           "Bytes one rank sends per step\n# (mixprec_engine_get_comm_bytes(), rank 0; every rank "
           "is checked to send the same),\n# median step time of rank 0; ratios against the "
           "bf16+fp32sum run above: of the total bytes (vs bf16),\n# of the inter-host bytes (inter); "
           "DS: the same ratios of DeepSpeed's figures for this model and hosts.\n",
           ranks, per_host, layers, hidden, hidden, n_params, steps);
  g_print ("%-13s %12s %12s %12s %12s %7s %7s %7s %7s %9s\n", "mode", "all-gather",
           "reduce-scat", "total", "inter-host", "vs bf16", "DS", "inter", "DS", "step ms");
  for (guint i = 0; i < G_N_ELEMENTS (modes); i++)
    {
      g_autofree gchar *json = config_json (modes[i], (guint) ranks, hpz_group ((guint) ranks, per_host));
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
      g_autoptr(MixprecCommBytes) ds = NULL;
      Row row0 = { 0 };

      if (mode_list != NULL && !mode_listed (modes[i]))
        continue;
      if (config == NULL ||
          (ds = mixprec_comm_bytes_plan_new_deepspeed (config, n_params, (guint) ranks, per_host,
                                                       &error)) == NULL)
        {
          g_printerr ("bench-zeropp-bytes: %s\n", error->message);
          return 1;
        }
      if (from == NULL)
        {
          g_autofree gchar *mvar = g_strdup_printf ("BENCH_ZPP_MODE=%s", modes[i]);
          g_autofree gchar *prefix = g_build_filename (dir, modes[i], NULL);
          g_autofree gchar *shape = g_strdup_printf ("BENCH_ZPP_RANK=%d:%d:%d", layers, hidden, steps);
          g_autofree gchar *hvar = g_strdup_printf ("BENCH_ZPP_HPZ=%u", hpz_group ((guint) ranks, per_host));
          gint status[16] = { 0 };

          /* each rank writes PREFIX.RANK */
          {
            g_autofree gchar *ovar = g_strdup_printf ("BENCH_ZPP_OUT_PREFIX=%s", prefix);
            const gchar *env[] = { shape, mvar, ovar, hvar, NULL };

            mp_run_ranks ((guint) ranks, 600000, env, status);
          }
          for (gint r = 0; r < ranks; r++)
            if (status[r] != 0)
              {
                g_printerr ("bench-zeropp-bytes: rank %d of '%s' exited with %d\n", r, modes[i],
                            status[r]);
                return 1;
              }
        }
      for (gint r = 0; r < ranks; r++)
        {
          g_autofree gchar *file = g_strdup_printf ("%s/%s.%d", dir, modes[i], r);
          Row row = { 0 };

          if (!read_row (file, &row, &error))
            {
              g_printerr ("bench-zeropp-bytes: %s\n", error->message);
              return 1;
            }
          if (r == 0)
            row0 = row;
          else if (row.total != row0.total)
            g_print ("# %s: rank %d sent %" G_GUINT64_FORMAT " bytes, rank 0 %" G_GUINT64_FORMAT "\n",
                     modes[i], r, row.total, row0.total);
          if (from == NULL)
            g_remove (file);
        }
      if (base.total == 0)
        {
          base = row0;
          ds_base = (gdouble) ds->total;
          ds_inter_base = (gdouble) ds->inter_host;
        }
      if (g_str_equal (modes[i], "qwZ+qgZ"))
        qq_ratio = (gdouble) row0.total / (gdouble) base.total;
      {
        g_autofree gchar *inter = base.inter > 0
          ? g_strdup_printf ("%.3f", (gdouble) row0.inter / (gdouble) base.inter) : g_strdup ("-");
        /* DeepSpeed has no FP8 ZeRO++: no figures of its own to print. */
        gboolean ours_only = g_str_has_suffix (modes[i], "fp8");
        g_autofree gchar *ds_inter = ds_inter_base > 0 && !ours_only
          ? g_strdup_printf ("%.3f", (gdouble) ds->inter_host / ds_inter_base) : g_strdup ("-");
        g_autofree gchar *ds_total = !ours_only ? g_strdup_printf ("%.3f", (gdouble) ds->total / ds_base)
                                                : g_strdup ("-");

        g_print ("%-13s %12" G_GUINT64_FORMAT " %12" G_GUINT64_FORMAT " %12" G_GUINT64_FORMAT
                 " %12" G_GUINT64_FORMAT " %7.3f %7s %7s %7s %9.2f\n", modes[i], row0.all_gather,
                 row0.reduce_scatter, row0.total, row0.inter,
                 (gdouble) row0.total / (gdouble) base.total, ds_total, inter, ds_inter, row0.ms);
      }
    }
  if (from == NULL)
    g_rmdir (dir);
  g_print ("# DeepSpeed's published ratios: qwZ halves the weight all-gather (int8), qgZ cuts the\n"
           "# gradient bytes to about a quarter (int4), hpZ removes the cross-host all-gather in\n"
           "# the backward pass (its column: the same figures computed for this model and hosts).\n"
           "# hpZ here: zero_hpz_partition_size = %u, %s.\n"
           "# Its backward gathers move bf16 inside the group (DeepSpeed's move int8 again).\n"
           "# qwZ+qgZ-fp8: FP8 E4M3 blocks for both (mixprec.quantized_*_format; DeepSpeed has none).\n",
           hpz_group ((guint) ranks, per_host),
           hpz_group ((guint) ranks, per_host) == (guint) ranks
             ? "the world: ZeRO-3's own partition,\n# so it moves what qwZ+qgZ moves"
             : "the ranks of a host");
  if (qq_ratio >= 0)
    g_print ("goal: qwZ+qgZ bytes <= 0.35x of bf16: measured %.3fx\n", qq_ratio);
  return 0;
}

int
main (int argc, char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GOptionContext) context = g_option_context_new ("- ZeRO-3 bytes on the wire with ZeRO++");
  GOptionEntry entries[] = {
    { "ranks", 0, 0, G_OPTION_ARG_INT, &ranks, "Processes (default 3)", "N" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &layers, "Linear layers (default 8)", "N" },
    { "hidden", 0, 0, G_OPTION_ARG_INT, &hidden, "Layer width (default 1024)", "N" },
    { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "Steps (default 5)", "N" },
    { "ranks-per-host", 0, 0, G_OPTION_ARG_INT, &ranks_per_host,
      "Ranks per host, for DeepSpeed's figures (default: all on one)", "R" },
    { "modes", 0, 0, G_OPTION_ARG_STRING, &mode_list,
      "Only these modes, in the table's order; the first of them is the baseline (default: all)", "M,M" },
    { "from", 0, 0, G_OPTION_ARG_FILENAME, &from,
      "Start no ranks: read the ranks' MODE.RANK files from DIR", "DIR" },
    { NULL }
  };

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("bench-zeropp-bytes: %s\n", error->message);
      return 2;
    }
  if (ranks < 2 || ranks > 16 || layers < 1 || hidden < 1 || steps < 1 ||
      ranks_per_host < 0 || (ranks_per_host > 0 && ranks % ranks_per_host != 0))
    {
      g_printerr ("bench-zeropp-bytes: --ranks 2..16, --layers, --hidden and --steps >= 1, "
                  "--ranks-per-host dividing --ranks\n");
      return 2;
    }
  if (g_getenv ("BENCH_ZPP_RANK") != NULL)
    {
      if (sscanf (g_getenv ("BENCH_ZPP_RANK"), "%d:%d:%d", &layers, &hidden, &steps) != 3 ||
          layers < 1 || hidden < 1 || steps < 1)
        return 2;
      return rank_main ();
    }
  return driver_main ();
}
