/* inspect-plan.c — `mixprec-inspect --plan`: the bytes one rank needs for a
 * model of N parameters under a config's precision mode and ZeRO stage,
 * buffer by buffer, from the arithmetic the engine lays its buffers out
 * with, beside DeepSpeed's formula for the same configuration; then the
 * bytes it sends per optimizer step (mixprec_comm_bytes_plan_new()),
 * intra- and inter-host, beside DeepSpeed's ZeRO / ZeRO++ figures. */
#include "config.h"

#include <json-glib/json-glib.h>

#include "inspect-private.h"

static gchar *
human (guint64 bytes)
{
  return g_format_size_full (bytes, G_FORMAT_SIZE_IEC_UNITS);
}

static gdouble
per_param (guint64 bytes, guint64 n_params)
{
  return n_params > 0 ? (gdouble) bytes / (gdouble) n_params : 0.0;
}

static void
row (const gchar *what, guint64 bytes, guint64 n_params, gint64 deepspeed)
{
  g_autofree gchar *size = human (bytes);

  g_print ("  %-27s %16" G_GUINT64_FORMAT " bytes  %10s  %6.2f", what, bytes, size,
           per_param (bytes, n_params));
  if (deepspeed >= 0)
    g_print ("  %9.2f", per_param ((guint64) deepspeed, n_params));
  g_print ("\n");
}

/* DeepSpeed's formula counts parameters, gradients and optimizer state
 * (masters included); buffers are not in it. */
static gint64
deepspeed_share (const gchar *name, const MixprecMemoryReport *ds)
{
  if (g_str_equal (name, "working copies") || g_str_equal (name, "working copies (host)") ||
      g_str_equal (name, "working copies, pinned (host)"))
    return (gint64) ds->working;
  if (g_str_equal (name, "FP32 master weights") || g_str_equal (name, "FP32 master weights (host)") ||
      g_str_equal (name, "master remainders") || g_str_equal (name, "Kahan compensation"))
    return (gint64) ds->masters;
  if (g_str_equal (name, "optimizer state") || g_str_equal (name, "optimizer state (host)"))
    return (gint64) ds->optimizer_state;
  return -1;
}

/* The master and state representations, when not DeepSpeed's defaults. */
static void
print_representation (MixprecConfig *config)
{
  const gchar * const *slots = mixprec_config_get_optimizer_state_slots (config);
  MixprecMasterWeights mw = mixprec_config_get_master_weights (config);
  MixprecStateFormat other = mixprec_config_get_optimizer_state_format (config, NULL);
  guint block = mixprec_config_get_optimizer_state_block_size (config);
  g_autoptr(GString) line = g_string_new (NULL);

  if (mw == MIXPREC_MASTER_WEIGHTS_REMAINDER || mw == MIXPREC_MASTER_WEIGHTS_KAHAN)
    g_string_append_printf (line, "master_weights %s", mixprec_master_weights_get_name (mw));
  if (slots[0] != NULL || other != MIXPREC_STATE_FORMAT_FP32)
    {
      g_string_append_printf (line, "%soptimizer_states %s", line->len > 0 ? "; " : "",
                              mixprec_state_format_get_name (other));
      for (guint i = 0; slots[i] != NULL; i++)
        g_string_append_printf (line, ", %s %s", slots[i],
                                mixprec_state_format_get_name (
                                  mixprec_config_get_optimizer_state_format (config, slots[i])));
      if (block != 0)
        g_string_append_printf (line, ", block_size %u", block);
    }
  if (line->len > 0)
    g_print ("(%s)\n", line->str);
}

static void
wire_row (const gchar *what, guint64 ours, guint64 ours_inter, guint64 ds, guint64 ds_inter,
          gboolean with_ds)
{
  g_autofree gchar *size = human (ours);

  g_print ("  %-27s %16" G_GUINT64_FORMAT " bytes  %10s  intra %" G_GUINT64_FORMAT
           "  inter %" G_GUINT64_FORMAT, what, ours, size, ours - ours_inter, ours_inter);
  if (with_ds)
    g_print ("  DeepSpeed %" G_GUINT64_FORMAT " (intra %" G_GUINT64_FORMAT ", inter %"
             G_GUINT64_FORMAT ")", ds, ds - ds_inter, ds_inter);
  g_print ("\n");
}

/* The bytes on the wire per step per rank, ours beside DeepSpeed's. */
static int
print_wire (MixprecConfig *config,
            guint64        n_params,
            guint          world_size,
            guint          ranks_per_host)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecCommBytes) ours = NULL;
  g_autoptr(MixprecCommBytes) ds = NULL;
  guint per_host = ranks_per_host > 0 ? ranks_per_host : world_size;
  guint hosts = world_size / per_host;

  g_print ("\nBytes on the wire per optimizer step per rank: %u rank%s on %u host%s (%u per host), "
           "gradient_accumulation_steps %u\n", world_size, world_size == 1 ? "" : "s", hosts,
           hosts == 1 ? "" : "s", per_host, mixprec_config_get_gradient_accumulation_steps (config));
  if (world_size < 2)
    {
      g_print ("(one rank: nothing moves)\n");
      return 0;
    }
  ds = mixprec_comm_bytes_plan_new_deepspeed (config, n_params, world_size, per_host, &error);
  if (ds == NULL)
    {
      g_printerr ("mixprec-inspect: %s\n", error->message);
      return 1;
    }
  ours = mixprec_comm_bytes_plan_new (config, &n_params, 1, world_size, per_host, &error);
  if (ours == NULL)
    {
      g_print ("(not planned: %s)\n", error->message);
      g_print ("  DeepSpeed: all-gather %" G_GUINT64_FORMAT " (inter %" G_GUINT64_FORMAT
               "), reduce-scatter %" G_GUINT64_FORMAT " (inter %" G_GUINT64_FORMAT ")\n",
               ds->all_gather, ds->inter_host_all_gather, ds->reduce_scatter,
               ds->inter_host_reduce_scatter);
      return 0;
    }
  g_print ("(bytes this rank sends; under ZeRO-3 the forward and the backward pass each gather "
           "every unit once per micro-step)\n");
  wire_row ("all-gather (weights)", ours->all_gather, ours->inter_host_all_gather,
            ds->all_gather, ds->inter_host_all_gather, TRUE);
  wire_row ("reduce-scatter (gradients)", ours->reduce_scatter, ours->inter_host_reduce_scatter,
            ds->reduce_scatter, ds->inter_host_reduce_scatter, TRUE);
  wire_row ("scalars (norm agreement)", ours->scalars,
            ours->inter_host - ours->inter_host_all_gather - ours->inter_host_reduce_scatter,
            0, 0, FALSE);
  wire_row ("wire total", ours->total, ours->inter_host, ds->total, ds->inter_host, TRUE);
  return 0;
}

/* mixprec.auto_precision at its limit: max_widened_fraction of the
 * parameters planned wider (fp32, or without their FP8 copies when
 * widen_to leaves fp32 out), the rest as the config plans them. */
static void
print_auto_precision (MixprecConfig       *config,
                      const gchar         *config_path,
                      const gchar * const *sets,
                      guint64              n_params,
                      guint                world_size,
                      guint64              gathered)
{
  g_autofree gchar *text = mixprec_config_to_data (config, NULL);
  g_autoptr(JsonNode) root = json_from_string (text, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) wide_config = NULL;
  g_autoptr(GPtrArray) narrow = NULL, wide = NULL;
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();
  g_auto(GStrv) wide_sets = NULL;
  JsonObject *a;
  JsonArray *to;
  gboolean fp32 = FALSE;
  gdouble fraction;
  guint64 n_wide, total = 0;

  a = root != NULL ? json_object_get_object_member (json_node_get_object (root), "mixprec") : NULL;
  a = a != NULL && json_object_has_member (a, "auto_precision")
      ? json_object_get_object_member (a, "auto_precision") : NULL;
  if (a == NULL || !json_object_get_boolean_member (a, "enabled"))
    return;
  fraction = json_object_get_double_member (a, "max_widened_fraction");
  to = json_object_get_array_member (a, "widen_to");
  for (guint i = 0; i < json_array_get_length (to); i++)
    fp32 |= g_str_equal (json_array_get_string_element (to, i), "fp32");
  n_wide = (guint64) (fraction * (gdouble) n_params);
  if (n_wide == 0)
    return;
  if (sets != NULL)
    g_strv_builder_addv (builder, (const gchar **) sets);
  g_strv_builder_add (builder, fp32 ? "mixprec.fp32_modules=[\"Linear\"]" : "fp8.enabled=false");
  wide_sets = g_strv_builder_end (builder);
  wide_config = inspect_load_config (config_path, (const gchar * const *) wide_sets, &error);
  if (wide_config != NULL)
    wide = mixprec_memory_plan_list_buffers (wide_config, &n_wide, 1, world_size, gathered, &error);
  if (wide != NULL && n_wide < n_params)
    {
      guint64 rest = n_params - n_wide;

      narrow = mixprec_memory_plan_list_buffers (config, &rest, 1, world_size, gathered, &error);
    }
  if (wide == NULL || (n_wide < n_params && narrow == NULL))
    {
      g_printerr ("mixprec-inspect: planning auto_precision's limit: %s\n", error->message);
      return;
    }
  g_print ("With mixprec.auto_precision at its limit: %" G_GUINT64_FORMAT " parameters "
           "(max_widened_fraction %g) %s, the rest as above\n", n_wide, fraction,
           fp32 ? "widened to fp32" : "without their FP8 copies");
  for (guint i = 0; i < wide->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (wide, i);
      guint64 bytes = b->planned_bytes;

      for (guint k = 0; narrow != NULL && k < narrow->len; k++)
        if (g_str_equal (((MixprecMemoryBuffer *) g_ptr_array_index (narrow, k))->name, b->name))
          bytes += ((MixprecMemoryBuffer *) g_ptr_array_index (narrow, k))->planned_bytes;
      if (bytes > 0)
        row (b->name, bytes, n_params, -1);
      total += bytes;
    }
  for (guint k = 0; narrow != NULL && k < narrow->len; k++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (narrow, k);
      gboolean seen = FALSE;

      for (guint i = 0; i < wide->len; i++)
        seen |= g_str_equal (((MixprecMemoryBuffer *) g_ptr_array_index (wide, i))->name, b->name);
      if (!seen && b->planned_bytes > 0)
        {
          row (b->name, b->planned_bytes, n_params, -1);
          total += b->planned_bytes;
        }
    }
  row ("total", total, n_params, -1);
}

int
inspect_plan (const gchar         *config_path,
              const gchar * const *sets,
              guint64              n_params,
              guint                world_size,
              guint64              gathered,
              guint                ranks_per_host)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(GPtrArray) buffers = NULL;
  g_autoptr(MixprecMemoryReport) ds = NULL;
  guint64 total = 0, host = 0;
  gboolean grads_shown = FALSE, offloaded = FALSE, params_offloaded = FALSE;
  guint stage;

  if (n_params == 0 || world_size == 0)
    {
      g_printerr ("mixprec-inspect: --plan needs --params N (N > 0) and --world W (W > 0)\n");
      return 2;
    }
  config = inspect_load_config (config_path, sets, &error);
  if (config == NULL)
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  buffers = mixprec_memory_plan_list_buffers (config, &n_params, 1, world_size, gathered, &error);
  if (buffers == NULL ||
      (ds = mixprec_memory_plan_new_deepspeed (config, n_params, world_size, &error)) == NULL)
    {
      g_printerr ("mixprec-inspect: %s\n", error->message);
      return 1;
    }
  stage = world_size > 1 ? mixprec_config_get_zero_stage (config) : 0;
  g_print ("Memory plan per rank: %" G_GUINT64_FORMAT " parameters, %u rank%s, %s, ZeRO stage %u\n",
           n_params, world_size, world_size == 1 ? "" : "s",
           mixprec_precision_mode_get_name (mixprec_config_get_precision_mode (config)), stage);
  if (stage >= 2)
    g_print ("(gradients handed over per parameter with mixprec_param_reduce_grad())\n");
  print_representation (config);
  if (mixprec_config_get_fp8_recipe (config) != NULL)
    g_print ("(fp8: the parameters planned are of module type Linear; FP8 working copies as "
             "fp8.modules says)\n");
  for (guint i = 0; i < buffers->len; i++)
    {
      const gchar *name = ((MixprecMemoryBuffer *) g_ptr_array_index (buffers, i))->name;

      if (!offloaded && g_str_has_suffix (name, " (host)"))
        {
          g_print ("(optimizer offloaded: FP32 masters and optimizer state in host memory, "
                   "stepped on the CPU%s)\n", stage >= 1 ? ", this rank's partition" : "");
          offloaded = TRUE;
        }
      if (g_str_has_prefix (name, "working copies") && g_str_has_suffix (name, " (host)"))
        g_print ("(parameters offloaded: this rank's partition of the working copies in host "
                 "memory between gathers)\n");
    }
  g_print ("  %-27s %16s        %10s  %6s  %9s\n", "buffer", "", "", "B/param", "DeepSpeed");
  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);
      gint64 share = deepspeed_share (b->name, ds);

      /* DeepSpeed's gradients stand beside whatever holds ours, except
       * offloaded: its FP32 gradient partition is in host memory, counted
       * in the host row below. */
      if (!offloaded && !grads_shown && (g_str_equal (b->name, "gradients") ||
                                         g_str_equal (b->name, "gradient accumulation")))
        {
          share = (gint64) ds->gradients;
          grads_shown = TRUE;
        }
      row (b->name, b->planned_bytes, n_params, share);
      total += b->planned_bytes;
      /* Offloaded buffers are named for where they are. */
      if (g_str_has_suffix (b->name, " (host)"))
        host += b->planned_bytes;
      if (g_str_has_prefix (b->name, "working copies") && g_str_has_suffix (b->name, " (host)"))
        params_offloaded = TRUE;
    }
  row ("total", total, n_params, (gint64) ds->total);
  if (host > 0)
    {
      /* ZeRO-Offload's split: the working copies on the device (in host
       * memory too with offload_param); masters, state and FP32 gradients
       * in host memory. */
      row ("  on the device", total - host, n_params, params_offloaded ? 0 : (gint64) ds->working);
      row ("  in host memory", host, n_params,
           (gint64) (ds->masters + ds->optimizer_state + ds->gradients +
                     (params_offloaded ? ds->working : 0)));
    }
  print_auto_precision (config, config_path, sets, n_params, world_size, gathered);
  return print_wire (config, n_params, world_size, ranks_per_host);
}
