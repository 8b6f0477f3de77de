/* inspect-plan.c — `mixprec-inspect --plan`: the bytes one rank needs for a
 * model of N parameters under a config's precision mode and ZeRO stage,
 * from the same arithmetic the engine lays its buffers out with. */
#include "config.h"

#include "inspect-private.h"

static gchar *
human (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

static void
row (const gchar *what, guint64 bytes, guint64 n_params)
{
  g_autofree gchar *size = human (bytes);

  g_print ("  %-18s %16" G_GUINT64_FORMAT " bytes  %12s  %6.2f bytes/param\n", what, bytes, size,
           n_params > 0 ? (gdouble) bytes / (gdouble) n_params : 0.0);
}

int
inspect_plan (const gchar *config_path,
              guint64      n_params,
              guint        world_size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecMemoryReport) plan = NULL;

  if (n_params == 0 || world_size == 0)
    {
      g_printerr ("mixprec-inspect: --plan needs --params N (N > 0) and --world W (W > 0)\n");
      return 2;
    }
  config = config_path != NULL ? mixprec_config_new_from_file (config_path, &error)
                               : mixprec_config_new ();
  if (config == NULL)
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  plan = mixprec_memory_plan_new (config, n_params, world_size, &error);
  if (plan == NULL)
    {
      g_printerr ("mixprec-inspect: %s\n", error->message);
      return 1;
    }
  g_print ("Memory plan per rank: %" G_GUINT64_FORMAT " parameters, %u rank%s, %s, ZeRO stage %u\n",
           n_params, world_size, world_size == 1 ? "" : "s",
           mixprec_precision_mode_get_name (mixprec_config_get_precision_mode (config)),
           world_size > 1 ? mixprec_config_get_zero_stage (config) : 0);
  row ("working params", plan->working, n_params);
  row ("gradients", plan->gradients, n_params);
  row ("accumulation", plan->accumulation, n_params);
  row ("masters", plan->masters, n_params);
  row ("optimizer state", plan->optimizer_state, n_params);
  row ("communication", plan->communication, n_params);
  row ("total", plan->total, n_params);
  return 0;
}
