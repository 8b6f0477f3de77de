/* mixprec-inspect.c — describes the installed libmixprec: its number
 * formats, and (as they land) plugins, configs, checkpoints and memory
 * plans. Modelled on gst-inspect-1.0. */
#include "config.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdlib.h>

#include "inspect-private.h"

/* A count given on the command line: a decimal integer, or a number with
 * an exponent that is a whole number ("1e9", "1.3e9"), from @min up to
 * 2^53 (where doubles stop counting exactly). */
static gboolean
parse_count (const gchar *option,
             const gchar *text,
             guint64      min,
             guint64      max,
             guint64     *value)
{
  gchar *end = NULL;
  gdouble d;

  if (text == NULL)
    return TRUE;
  if (g_ascii_string_to_unsigned (text, 10, min, max, value, NULL))
    return TRUE;
  errno = 0;
  d = g_ascii_strtod (text, &end);
  if (end != text && *end == '\0' && errno == 0 && isfinite (d) && d == floor (d) &&
      d >= (gdouble) min && d <= (gdouble) MIN (max, G_GUINT64_CONSTANT (1) << 53))
    {
      *value = (guint64) d;
      return TRUE;
    }
  g_printerr ("mixprec-inspect: %s: must be a whole number from %" G_GUINT64_FORMAT " to %"
              G_GUINT64_FORMAT " (digits, or with an exponent such as 7e9), got '%s'\n", option,
              min, MIN (max, G_GUINT64_CONSTANT (1) << 53), text);
  return FALSE;
}

int
main (int argc, char **argv)
{
  gboolean show_version = FALSE;
  gboolean show_formats = FALSE;
  g_autofree gchar *config_path = NULL;
  g_auto(GStrv) sets = NULL;
  g_autofree gchar *checkpoint_dir = NULL;
  gboolean plan = FALSE;
  g_autofree gchar *params_text = NULL;
  g_autofree gchar *world_text = NULL;
  g_autofree gchar *gathered_text = NULL;
  g_autofree gchar *hosts_text = NULL;
  g_autofree gchar *per_host_text = NULL;
  guint64 plan_hosts = 0, plan_per_host = 0;
  guint64 plan_params = 0;
  guint64 plan_world = 1;
  guint64 plan_gathered = 0;
  gboolean verify = FALSE;
  g_autofree gchar *numerics = NULL;
  g_autofree gchar *stat = NULL;
  g_autofree gchar *top_text = NULL;
  g_autofree gchar *heatmap = NULL;
  g_autofree gchar *by = NULL;
  guint64 top = 10;
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  const GOptionEntry entries[] = {
    { "version", 0, 0, G_OPTION_ARG_NONE, &show_version,
      "Print the version of the tool and of the library it runs with", NULL },
    { "formats", 0, 0, G_OPTION_ARG_NONE, &show_formats,
      "Print a table of the number formats: bits, max, min normal, min subnormal, epsilon", NULL },
    { "config", 0, 0, G_OPTION_ARG_FILENAME, &config_path,
      "Validate a DeepSpeed-style JSON configuration and print it resolved (see mixprec.json(5))", "FILE" },
    { "set", 0, 0, G_OPTION_ARG_STRING_ARRAY, &sets,
      "With --config or --plan, set the value at a JSON path, such as optimizer.params.lr=3e-4 "
      "or model.hidden_size=4096 (repeatable; VALUE is JSON, or else a string)", "PATH=VALUE" },
    { "plan", 0, 0, G_OPTION_ARG_NONE, &plan,
      "Print the bytes one rank needs for a model of --params N over --world W ranks "
      "under --config FILE (default: FP32, no ZeRO)", NULL },
    { "params", 0, 0, G_OPTION_ARG_STRING, &params_text,
      "With --plan, the number of parameters (elements) of the model, such as 7000000000 or 7e9",
      "N" },
    { "world", 0, 0, G_OPTION_ARG_STRING, &world_text,
      "With --plan, the number of data-parallel ranks (default 1)", "W" },
    { "gathered", 0, 0, G_OPTION_ARG_STRING, &gathered_text,
      "With --plan under ZeRO-3, the most elements of parameters the trainer holds gathered at "
      "once besides the prefetch window (default: one stage3_prefetch_bucket_size)", "N" },
    { "hosts", 0, 0, G_OPTION_ARG_STRING, &hosts_text,
      "With --plan, the number of hosts the --world ranks are spread over, equally (default 1): "
      "the bytes on the wire split into intra-host and inter-host", "H" },
    { "ranks-per-host", 0, 0, G_OPTION_ARG_STRING, &per_host_text,
      "With --plan, the ranks on each host (default: all of them), another way to give --hosts",
      "R" },
    { "checkpoint", 0, 0, G_OPTION_ARG_FILENAME, &checkpoint_dir,
      "Describe a checkpoint (a folder with manifest.json, or one whose 'latest' names one)", "DIR" },
    { "verify", 0, 0, G_OPTION_ARG_NONE, &verify,
      "With --checkpoint, recompute every file's SHA-256 and check it against the manifest", NULL },
    { "numerics", 0, 0, G_OPTION_ARG_FILENAME, &numerics,
      "Rank the tensors whose numerics statistic was worst over a run, from csv_monitor's folder "
      "(output_path/job_name), one of its Numerics_*.csv files, or TensorBoard event files", "RUN" },
    { "stat", 0, 0, G_OPTION_ARG_STRING, &stat,
      "With --numerics, the statistic, such as grad_underflow or grad_amax (needed when the "
      "run recorded several)", "NAME" },
    { "top", 0, 0, G_OPTION_ARG_STRING, &top_text,
      "With --numerics, how many tensors the table lists, worst first (default 10; 0: all)", "N" },
    { "by", 0, 0, G_OPTION_ARG_STRING, &by,
      "With --numerics, 'param' (default) for a series per parameter, 'type' per module type",
      "param|type" },
    { "heatmap", 0, 0, G_OPTION_ARG_FILENAME, &heatmap,
      "With --numerics, draw the statistic over steps and layers into FILE, a .png or .svg",
      "FILE" },
    G_OPTION_ENTRY_NULL
  };

  setlocale (LC_ALL, "");
  context = g_option_context_new ("[PLUGIN | FEATURE | FILE.so] - describe libmixprec");
  g_option_context_set_summary (context,
      "Prints what the installed libmixprec provides. Without an argument, lists\n"
      "every plugin and feature (and the plugins that failed to load, with why);\n"
      "with a plugin or feature name or a plugin file, prints its details.");
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("mixprec-inspect: %s\n", error->message);
      g_printerr ("Run 'mixprec-inspect --help' to see the options.\n");
      return 2;
    }

  if (!plan && (params_text != NULL || world_text != NULL || gathered_text != NULL ||
                hosts_text != NULL || per_host_text != NULL))
    {
      g_printerr ("mixprec-inspect: --%s only applies to --plan; add --plan to estimate the "
                  "memory of a model of that size\n",
                  params_text != NULL ? "params" : world_text != NULL ? "world" :
                  gathered_text != NULL ? "gathered" : hosts_text != NULL ? "hosts" : "ranks-per-host");
      return 2;
    }
  if (numerics == NULL && (stat != NULL || top_text != NULL || by != NULL || heatmap != NULL))
    {
      g_printerr ("mixprec-inspect: --%s only applies to --numerics RUN\n",
                  stat != NULL ? "stat" : top_text != NULL ? "top" : by != NULL ? "by" : "heatmap");
      return 2;
    }
  if (sets != NULL && config_path == NULL && !plan)
    {
      g_printerr ("mixprec-inspect: --set needs --config FILE or --plan\n");
      return 2;
    }
  if (show_version)
    {
      g_print ("mixprec-inspect %s\n", MIXPREC_VERSION_S);
      g_print ("libmixprec %u.%u.%u (kernels: %s, threads: %u)\n",
               mixprec_get_major_version (), mixprec_get_minor_version (),
               mixprec_get_micro_version (), mixprec_get_simd_name (),
               mixprec_get_num_threads ());
      if (inspect_heatmap_backend () != NULL)
        g_print ("heat maps: cairo %s\n", inspect_heatmap_backend ());
      else
        g_print ("heat maps: none (built without cairo)\n");
      if (inspect_tb_backend () != NULL)
        g_print ("event files: protobuf-c %s\n", inspect_tb_backend ());
      else
        g_print ("event files: none (built without protobuf-c)\n");
      return 0;
    }
  if (show_formats)
    return inspect_formats ();
  if (plan)
    {
      if (!parse_count ("--params", params_text, 1, G_MAXUINT64, &plan_params) ||
          !parse_count ("--world", world_text, 1, G_MAXUINT, &plan_world) ||
          !parse_count ("--gathered", gathered_text, 0, G_MAXUINT64, &plan_gathered) ||
          !parse_count ("--hosts", hosts_text, 1, G_MAXUINT, &plan_hosts) ||
          !parse_count ("--ranks-per-host", per_host_text, 1, G_MAXUINT, &plan_per_host))
        return 2;
      if (hosts_text != NULL)
        {
          if (plan_world % plan_hosts != 0 ||
              (per_host_text != NULL && plan_per_host * plan_hosts != plan_world))
            {
              g_printerr ("mixprec-inspect: --hosts %" G_GUINT64_FORMAT " does not spread "
                          "--world %" G_GUINT64_FORMAT " ranks equally%s\n", plan_hosts, plan_world,
                          per_host_text != NULL ? " at --ranks-per-host" : "");
              return 2;
            }
          plan_per_host = plan_world / plan_hosts;
        }
      else if (per_host_text != NULL && plan_world % plan_per_host != 0)
        {
          g_printerr ("mixprec-inspect: --ranks-per-host %" G_GUINT64_FORMAT " does not divide "
                      "--world %" G_GUINT64_FORMAT " into whole hosts\n", plan_per_host, plan_world);
          return 2;
        }
      if (argc > 1 || params_text == NULL)
        {
          g_printerr ("mixprec-inspect: --plan needs --params N and optionally --world W "
                      "(both positive) and --config FILE, nothing else\n");
          return 2;
        }
      return inspect_plan (config_path, (const gchar * const *) sets, plan_params, (guint) plan_world,
                           plan_gathered, (guint) plan_per_host);
    }
  if (numerics != NULL)
    {
      if (argc > 1)
        {
          g_printerr ("mixprec-inspect: unexpected argument '%s' after --numerics\n", argv[1]);
          return 2;
        }
      if (by != NULL && !g_str_equal (by, "param") && !g_str_equal (by, "type"))
        {
          g_printerr ("mixprec-inspect: --by: must be 'param' (a series per parameter) or "
                      "'type' (per module type), got '%s'\n", by);
          return 2;
        }
      if (!parse_count ("--top", top_text, 0, G_MAXUINT, &top))
        return 2;
      return inspect_numerics (numerics, stat, g_strcmp0 (by, "type") == 0, (guint) top, heatmap);
    }
  if (checkpoint_dir != NULL)
    {
      if (argc > 1)
        {
          g_printerr ("mixprec-inspect: unexpected argument '%s' after --checkpoint\n", argv[1]);
          return 2;
        }
      return inspect_checkpoint (checkpoint_dir, verify);
    }
  if (verify)
    {
      g_printerr ("mixprec-inspect: --verify needs --checkpoint DIR\n");
      return 2;
    }
  if (config_path != NULL)
    {
      if (argc > 1)
        {
          g_printerr ("mixprec-inspect: unexpected argument '%s' after --config\n", argv[1]);
          return 2;
        }
      return inspect_config (config_path, (const gchar * const *) sets);
    }

  if (argc > 2)
    {
      g_printerr ("mixprec-inspect: unexpected argument '%s'\n", argv[2]);
      return 2;
    }
  if (argc == 2)
    return inspect_name (argv[1]);
  return inspect_list ();
}
