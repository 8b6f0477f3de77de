/* mixprec-config.c — MixprecConfig: a DeepSpeed-style JSON configuration,
 * read strictly, validated completely, and exposed as typed settings with
 * every default resolved. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-optimizer-params-private.h"

/**
 * MixprecConfig:
 *
 * The settings of a training run, read from a DeepSpeed-style JSON
 * document (see mixprec.json(5)).
 *
 * DeepSpeed's keys mean what they mean in DeepSpeed, with the differences
 * documented in mixprec.json(5); libmixprec's own settings live in a
 * `"mixprec"` section. Reading is strict: every problem of a document is
 * reported at once, each naming its JSON path, the value and the rule;
 * DeepSpeed settings for features libmixprec does not implement are
 * accepted and listed by mixprec_config_get_warnings(). Hugging Face
 * `"auto"` placeholders are resolved (and listed there too), with values a
 * #MixprecConfigLoader can supply as overrides.
 *
 * A #MixprecConfig does not change after it is created, except that
 * mixprec_config_resolve_batch() fills in the batch sizes.
 *
 * Since: 1.0
 */
struct _MixprecConfig
{
  GObject parent_instance;

  MixprecConfigSettings settings;
  GStrv warnings;
};

G_DEFINE_TYPE (MixprecConfig, mixprec_config, G_TYPE_OBJECT)

/**
 * mixprec_config_error_quark:
 *
 * Gets the error domain of #MixprecConfig.
 *
 * Returns: the quark behind %MIXPREC_CONFIG_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-config-error-quark, mixprec_config_error)

static void
mixprec_config_finalize (GObject *object)
{
  MixprecConfig *self = MIXPREC_CONFIG (object);

  _mixprec_config_settings_clear (&self->settings);
  g_strfreev (self->warnings);
  G_OBJECT_CLASS (mixprec_config_parent_class)->finalize (object);
}

static void
mixprec_config_class_init (MixprecConfigClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_config_finalize;
}

static void
mixprec_config_init (MixprecConfig *self)
{
  _mixprec_config_settings_init_defaults (&self->settings);
  self->warnings = g_new0 (gchar *, 1);
}

/**
 * mixprec_config_new:
 *
 * Creates a configuration with every default: FP32 training, ZeRO stage 0,
 * no optimizer or scheduler section. It is what an empty object `{}` reads
 * as.
 *
 * Returns: (transfer full): a new #MixprecConfig
 *
 * Since: 1.0
 */
MixprecConfig *
mixprec_config_new (void)
{
  return g_object_new (MIXPREC_TYPE_CONFIG, NULL);
}

/* One GError for all problems: one line each, the code of the first. */
static void
set_error_from_report (GError              **error,
                       MixprecConfigReport  *report,
                       const gchar          *origin)
{
  g_autoptr(GString) message = g_string_new (NULL);
  MixprecConfigProblem *first = g_ptr_array_index (report->problems, 0);

  for (guint i = 0; i < report->problems->len; i++)
    {
      MixprecConfigProblem *problem = g_ptr_array_index (report->problems, i);

      if (i > 0)
        g_string_append_c (message, '\n');
      if (origin != NULL)
        g_string_append_printf (message, "%s: ", origin);
      g_string_append (message, problem->message);
    }
  g_set_error_literal (error, MIXPREC_CONFIG_ERROR, first->code, message->str);
}

MixprecConfig *
_mixprec_config_new_from_bytes (const gchar  *data,
                                gsize         length,
                                const gchar  *origin,
                                GPtrArray    *overrides,
                                GError      **error)
{
  g_autoptr(MixprecConfig) self = mixprec_config_new ();
  g_autoptr(JsonParser) parser = NULL;
  g_autofree gchar *text = NULL;
  g_autoptr(GError) json_error = NULL;
  MixprecConfigReport report;
  JsonNode *root;
  gint64 hidden_size = 0;
  gboolean ok;

  /* Editors on Windows write a byte-order mark; it carries no meaning. */
  if (length >= 3 && memcmp (data, "\xEF\xBB\xBF", 3) == 0)
    {
      data += 3;
      length -= 3;
    }

  _mixprec_config_report_init (&report);
  if (!_mixprec_json_scan (data, length, &report))
    {
      set_error_from_report (error, &report, origin);
      _mixprec_config_report_clear (&report);
      return NULL;
    }

  /* The scanner has checked there is no NUL in the text. */
  text = g_strndup (data, length);
  /* Mutable: overrides and resolved "auto" values are written into it. */
  parser = json_parser_new ();
  if (!json_parser_load_from_data (parser, text, -1, &json_error))
    {
      _mixprec_config_report_error (&report, MIXPREC_CONFIG_ERROR_PARSE,
                                    "(top level): invalid JSON: %s", json_error->message);
      set_error_from_report (error, &report, origin);
      _mixprec_config_report_clear (&report);
      return NULL;
    }

  root = json_parser_get_root (parser);
  _mixprec_config_apply_overrides (root, overrides, &report, &hidden_size);
  _mixprec_config_resolve_auto (root, hidden_size, &report);
  ok = _mixprec_config_settings_load (&self->settings, root, &report);
  if (!ok || report.problems->len > 0)
    {
      set_error_from_report (error, &report, origin);
      _mixprec_config_report_clear (&report);
      return NULL;
    }

  g_strfreev (self->warnings);
  g_ptr_array_add (report.warnings, NULL);
  self->warnings = (GStrv) g_ptr_array_steal (report.warnings, NULL);
  _mixprec_config_report_clear (&report);
  return g_steal_pointer (&self);
}

/**
 * mixprec_config_new_from_data:
 * @data: (array length=length) (element-type guint8): a JSON document in UTF-8
 * @length: the length of @data in bytes, or -1 when it is NUL-terminated
 *   (bindings pass the length of their byte array)
 * @error: return location for a #GError
 *
 * Reads a configuration from a string. See mixprec_config_new_from_file().
 * Bindings see mixprec_config_new_from_string() under this name, taking a
 * string.
 *
 * Returns: (transfer full) (nullable): a new #MixprecConfig, or %NULL with
 *   @error set, its message listing every problem one per line
 *
 * Since: 1.0
 */
MixprecConfig *
mixprec_config_new_from_data (const gchar  *data,
                              gssize        length,
                              GError      **error)
{
  g_return_val_if_fail (data != NULL || length == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (length < 0)
    length = strlen (data);
  return _mixprec_config_new_from_bytes (data != NULL ? data : "", (gsize) length, NULL, NULL,
                                         error);
}

/**
 * mixprec_config_new_from_string: (rename-to mixprec_config_new_from_data)
 * @data: a JSON document
 * @error: return location for a #GError
 *
 * Reads a configuration from a NUL-terminated string: the same as
 * mixprec_config_new_from_data() with a length of -1. Bindings see this
 * function as `Config.new_from_data`, taking a string; in Python it also
 * takes UTF-8 `bytes` (and a length), as it did in 1.0, through the
 * overrides of the Python package.
 *
 * Returns: (transfer full) (nullable): a new #MixprecConfig, or %NULL with
 *   @error set, its message listing every problem one per line
 *
 * Since: 1.1
 */
MixprecConfig *
mixprec_config_new_from_string (const gchar  *data,
                                GError      **error)
{
  g_return_val_if_fail (data != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_config_new_from_bytes (data, strlen (data), NULL, NULL, error);
}

static GBytes *
read_capped (const gchar  *path,
             GError      **error)
{
  g_autoptr(GFile) file = g_file_new_for_path (path);
  g_autoptr(GFileInputStream) stream = NULL;
  g_autoptr(GByteArray) buffer = g_byte_array_new ();
  g_autoptr(GError) local_error = NULL;
  g_autofree gchar *display = g_filename_display_name (path);
  guint8 chunk[65536];

  stream = g_file_read (file, NULL, &local_error);
  if (stream == NULL)
    {
      g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO,
                   "%s: cannot read the configuration: %s", display, local_error->message);
      return NULL;
    }
  while (TRUE)
    {
      gssize n = g_input_stream_read (G_INPUT_STREAM (stream), chunk, sizeof chunk,
                                      NULL, &local_error);

      if (n < 0)
        {
          g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO,
                       "%s: cannot read the configuration: %s", display, local_error->message);
          return NULL;
        }
      if (n == 0)
        break;
      if (buffer->len + (gsize) n > _MIXPREC_CONFIG_MAX_FILE_SIZE)
        {
          g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO,
                       "%s: larger than %d MiB; a configuration is a few kilobytes of JSON",
                       display, _MIXPREC_CONFIG_MAX_FILE_SIZE / (1024 * 1024));
          return NULL;
        }
      g_byte_array_append (buffer, chunk, (guint) n);
    }
  return g_byte_array_free_to_bytes (g_steal_pointer (&buffer));
}

/**
 * mixprec_config_new_from_file:
 * @path: (type filename): a JSON file
 * @error: return location for a #GError
 *
 * Reads a configuration from a file. The file must be strict JSON
 * (RFC 8259) in UTF-8 whose top level is an object; its keys are described
 * in mixprec.json(5).
 *
 * Every problem in the file is reported at once: the error message has one
 * line per problem, each starting with the file name and the JSON path
 * (`ds.json: fp16.loss_scale_window: must be a positive integer, got -3`),
 * and the error code is that of the first problem. Keys libmixprec
 * accepts without acting on them are listed by
 * mixprec_config_get_warnings().
 *
 * The optimizer and the learning-rate schedule are checked as
 * mixprec_engine_new() builds them: the optimizer is looked up in the
 * default #MixprecRegistry for `mixprec.device` (a type no plugin provides
 * is %MIXPREC_CONFIG_ERROR_UNSUPPORTED) and each of its parameters is
 * checked against the plugin's hyper-parameter schema, so a configuration
 * that loads is one the engine accepts.
 *
 * Returns: (transfer full) (nullable): a new #MixprecConfig, or %NULL with
 *   @error set
 *
 * Since: 1.0
 */
MixprecConfig *
mixprec_config_new_from_file (const gchar  *path,
                              GError      **error)
{
  g_return_val_if_fail (path != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_config_new_from_file (path, NULL, error);
}

MixprecConfig *
_mixprec_config_new_from_file (const gchar  *path,
                               GPtrArray    *overrides,
                               GError      **error)
{
  g_autoptr(GBytes) bytes = NULL;
  g_autofree gchar *display = NULL;
  gsize length;
  const gchar *data;

  bytes = read_capped (path, error);
  if (bytes == NULL)
    return NULL;
  display = g_filename_display_name (path);
  data = g_bytes_get_data (bytes, &length);
  return _mixprec_config_new_from_bytes (data != NULL ? data : "", length, display, overrides,
                                         error);
}

/**
 * mixprec_config_get_warnings:
 * @self: a #MixprecConfig
 *
 * Lists what the document asked for that libmixprec accepted without acting
 * on: sections of DeepSpeed features libmixprec does not implement (such
 * as `flops_profiler` or `wandb`), ZeRO settings such as `offload_optimizer`
 * set to something other than DeepSpeed's default, keys that have no
 * effect in the selected precision mode (such as loss-scaling keys in a
 * `bf16` section), and unknown keys where DeepSpeed ignores them (the top
 * level, `optimizer`, `scheduler`, `data_types`, `colossalai`) that are close to no
 * known key. It also lists each Hugging Face `"auto"` placeholder that
 * was resolved, as `path: "auto" -> value (why)`. Each entry starts with
 * the JSON path. With `mixprec.strict` set, each of these is an error
 * instead and the list of a loaded configuration is empty.
 *
 * Returns: (transfer none) (array zero-terminated=1): the warnings, possibly
 *   none
 *
 * Since: 1.0
 */
GStrv
mixprec_config_get_warnings (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->warnings;
}

/**
 * mixprec_precision_mode_get_name:
 * @mode: a #MixprecPrecisionMode
 *
 * Gets the name a configuration uses for @mode in `mixprec.precision_mode`:
 * "fp32", "fp16", "bf16", "bf16_no_master", "autocast" or "fp16_no_master".
 *
 * Returns: (transfer none): the name, or "invalid" for a value that is not
 *   a #MixprecPrecisionMode
 *
 * Since: 1.0
 */
const gchar *
mixprec_precision_mode_get_name (MixprecPrecisionMode mode)
{
  static const gchar *const names[] = { "fp32", "fp16", "bf16", "bf16_no_master", "autocast",
                                        "fp16_no_master" };

  if ((guint) mode >= G_N_ELEMENTS (names))
    return "invalid";
  return names[mode];
}

/**
 * mixprec_master_weights_get_name:
 * @master_weights: a #MixprecMasterWeights
 *
 * Gets the name `mixprec.master_weights` uses for @master_weights:
 * "fp32", "remainder", "kahan" or "none".
 *
 * Returns: (transfer none): the name, or "invalid" for a value that is not
 *   a #MixprecMasterWeights
 *
 * Since: 1.1
 */
const gchar *
mixprec_master_weights_get_name (MixprecMasterWeights master_weights)
{
  static const gchar *const names[] = { "fp32", "remainder", "kahan", "none" };

  if ((guint) master_weights >= G_N_ELEMENTS (names))
    return "invalid";
  return names[master_weights];
}

/**
 * mixprec_state_format_get_name:
 * @format: a #MixprecStateFormat
 *
 * Gets the name `mixprec.optimizer_states` uses for @format: "fp32",
 * "bf16", "fp16_scaled", "bf16_scaled", "fp8_e4m3_scaled", "int8" or
 * "int4".
 *
 * Returns: (transfer none): the name, or "invalid" for a value that is not
 *   a #MixprecStateFormat
 *
 * Since: 1.1
 */
const gchar *
mixprec_state_format_get_name (MixprecStateFormat format)
{
  static const gchar *const names[] = { "fp32", "bf16", "fp16_scaled", "bf16_scaled",
                                        "fp8_e4m3_scaled", "int8", "int4" };

  if ((guint) format >= G_N_ELEMENTS (names))
    return "invalid";
  return names[format];
}

static void
add_strv (JsonBuilder         *b,
          const gchar         *key,
          const gchar * const *strv)
{
  json_builder_set_member_name (b, key);
  json_builder_begin_array (b);
  for (guint i = 0; strv[i] != NULL; i++)
    json_builder_add_string_value (b, strv[i]);
  json_builder_end_array (b);
}

static void
add_uint_or_null (JsonBuilder *b,
                  const gchar *key,
                  guint        value)
{
  json_builder_set_member_name (b, key);
  if (value == 0)
    json_builder_add_null_value (b);
  else
    json_builder_add_int_value (b, value);
}

static void
add_typed_section (JsonBuilder *b,
                   const gchar *key,
                   const gchar *type,
                   JsonObject  *params)
{
  json_builder_set_member_name (b, key);
  if (type == NULL)
    {
      json_builder_add_null_value (b);
      return;
    }
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, type);
  json_builder_set_member_name (b, "params");
  json_builder_add_value (b, json_node_init_object (json_node_alloc (), params));
  json_builder_end_object (b);
}

static const gchar *
semantics_name (MixprecScalerSemantics semantics)
{
  switch (semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_TORCH:
      return "torch";
    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
      return "megatron";
    case MIXPREC_SCALER_SEMANTICS_APEX:
      return "apex";
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
    default:
      return "deepspeed";
    }
}

static const gchar *
fp8_recipe_name (guint kind)
{
  switch (kind)
    {
    case MIXPREC_FP8_RECIPE_CURRENT:
      return "current";
    case MIXPREC_FP8_RECIPE_MX:
      return "mx";
    case MIXPREC_FP8_RECIPE_DELAYED:
    default:
      return "delayed";
    }
}

/**
 * mixprec_config_to_data:
 * @self: a #MixprecConfig
 * @length: (out) (optional): return location for the length of the result
 *
 * Prints the resolved configuration as indented JSON: every section
 * libmixprec implements with every key, defaults filled in, dtypes in
 * DeepSpeed's spelling ("fp32", "fp16", "bf16"), and
 * `mixprec.precision_mode` showing the mode the document selects. Batch
 * sizes not yet known print as null until mixprec_config_resolve_batch()
 * fills them in; the optimizer prints with every parameter its plugin
 * will run with (an absent section as the default AdamW the engine runs);
 * an absent scheduler section prints as null.
 * Keys that were accepted but ignored are not printed.
 *
 * The result reads back with mixprec_config_new_from_data() into a
 * configuration that prints the same text.
 *
 * Returns: (transfer full): the JSON text
 *
 * Since: 1.0
 */
gchar *
mixprec_config_to_data (MixprecConfig *self,
                        gsize         *length)
{
  MixprecConfigSettings *s;
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  GString *text;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  s = &self->settings;

  json_builder_begin_object (b);
  add_uint_or_null (b, "train_batch_size", s->train_batch_size);
  add_uint_or_null (b, "train_micro_batch_size_per_gpu", s->train_micro_batch_size_per_gpu);
  add_uint_or_null (b, "gradient_accumulation_steps", s->gradient_accumulation_steps);
  json_builder_set_member_name (b, "gradient_clipping");
  json_builder_add_double_value (b, s->gradient_clipping);
  json_builder_set_member_name (b, "communication_data_type");
  json_builder_add_string_value (b, _mixprec_config_dtype_short_name (s->communication_dtype));

  json_builder_set_member_name (b, "fp16");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "enabled");
  json_builder_add_boolean_value (b, s->fp16_enabled);
  json_builder_set_member_name (b, "loss_scale");
  json_builder_add_double_value (b, s->loss_scale);
  json_builder_set_member_name (b, "initial_scale_power");
  json_builder_add_int_value (b, s->initial_scale_power);
  json_builder_set_member_name (b, "loss_scale_window");
  json_builder_add_int_value (b, s->loss_scale_window);
  json_builder_set_member_name (b, "hysteresis");
  json_builder_add_int_value (b, s->hysteresis);
  json_builder_set_member_name (b, "consecutive_hysteresis");
  json_builder_add_boolean_value (b, s->consecutive_hysteresis);
  json_builder_set_member_name (b, "min_loss_scale");
  json_builder_add_double_value (b, s->min_loss_scale);
  json_builder_set_member_name (b, "fp16_master_weights_and_grads");
  json_builder_add_boolean_value (b, s->fp16_master_weights_and_grads);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "bf16");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "enabled");
  json_builder_add_boolean_value (b, s->bf16_enabled);
  json_builder_set_member_name (b, "check_grad_overflow");
  json_builder_add_boolean_value (b, s->check_grad_overflow);
  json_builder_set_member_name (b, "bf16_master_weights_and_grads");
  json_builder_add_boolean_value (b, s->bf16_master_weights_and_grads);
  json_builder_set_member_name (b, "bf16_optimizer_states");
  json_builder_add_boolean_value (b, s->bf16_optimizer_states);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "data_types");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "grad_accum_dtype");
  json_builder_add_string_value (b, _mixprec_config_dtype_short_name (s->grad_accum_dtype));
  json_builder_end_object (b);

  json_builder_set_member_name (b, "torch_autocast");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "enabled");
  json_builder_add_boolean_value (b, s->autocast_enabled);
  json_builder_set_member_name (b, "dtype");
  json_builder_add_string_value (b, _mixprec_config_dtype_short_name (s->autocast_dtype));
  add_strv (b, "lower_precision_safe_modules",
            (const gchar * const *) s->lower_precision_safe_modules);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "zero_optimization");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "stage");
  json_builder_add_int_value (b, s->zero_stage);
  json_builder_set_member_name (b, "reduce_bucket_size");
  json_builder_add_int_value (b, (gint64) s->reduce_bucket_size);
  json_builder_set_member_name (b, "allgather_bucket_size");
  json_builder_add_int_value (b, (gint64) s->allgather_bucket_size);
  json_builder_set_member_name (b, "overlap_comm");
  json_builder_add_boolean_value (b, s->overlap_comm);
  json_builder_set_member_name (b, "contiguous_gradients");
  json_builder_add_boolean_value (b, s->contiguous_gradients);
  json_builder_set_member_name (b, "stage3_prefetch_bucket_size");
  json_builder_add_int_value (b, (gint64) s->prefetch_bucket_size);
  json_builder_set_member_name (b, "stage3_param_persistence_threshold");
  json_builder_add_int_value (b, (gint64) s->param_persistence_threshold);
  json_builder_set_member_name (b, "stage3_max_live_parameters");
  json_builder_add_int_value (b, (gint64) s->max_live_parameters);
  json_builder_set_member_name (b, "zero_quantized_weights");
  json_builder_add_boolean_value (b, s->zero_quantized_weights);
  json_builder_set_member_name (b, "zero_quantized_gradients");
  json_builder_add_boolean_value (b, s->zero_quantized_gradients);
  json_builder_set_member_name (b, "zeropp_loco_param");
  if (s->zeropp_loco)
    {
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "err_beta");
      json_builder_add_double_value (b, s->zeropp_loco_err_beta);
      json_builder_set_member_name (b, "reset_T");
      json_builder_add_int_value (b, s->zeropp_loco_reset_t);
      json_builder_end_object (b);
    }
  else
    json_builder_add_null_value (b);
  json_builder_set_member_name (b, "zero_hpz_partition_size");
  json_builder_add_int_value (b, s->zero_hpz_partition_size);
  json_builder_set_member_name (b, "offload_optimizer");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "device");
  /* What is in effect: on the "cpu" device nothing moves. */
  json_builder_add_string_value (b, s->offload_optimizer == _MIXPREC_OFFLOAD_CPU &&
                                    !g_str_equal (s->device, "cpu") ? "cpu" : "none");
  json_builder_set_member_name (b, "pin_memory");
  json_builder_add_boolean_value (b, s->offload_pin_memory);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "offload_param");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "device");
  /* In effect under ZeRO-3 on a device (on one process the parameters are
   * not partitioned, and stay on the device). */
  json_builder_add_string_value (b, s->offload_param == _MIXPREC_OFFLOAD_CPU && s->zero_stage == 3 &&
                                    !g_str_equal (s->device, "cpu") ? "cpu" : "none");
  json_builder_set_member_name (b, "pin_memory");
  json_builder_add_boolean_value (b, s->offload_param_pin_memory);
  json_builder_end_object (b);
  json_builder_end_object (b);

  /* The optimizer as the engine will run it, every parameter shown; an
   * absent section shows the default the engine runs. */
  add_typed_section (b, "optimizer",
                     s->optimizer_type != NULL ? s->optimizer_type
                     : s->resolved_optimizer_params != NULL ? _MIXPREC_DEFAULT_OPTIMIZER_TYPE : NULL,
                     s->resolved_optimizer_params != NULL ? s->resolved_optimizer_params
                                                          : s->optimizer_params);
  add_typed_section (b, "scheduler", s->scheduler_type, s->scheduler_params);

  json_builder_set_member_name (b, "mixprec");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "precision_mode");
  json_builder_add_string_value (b, mixprec_precision_mode_get_name (s->mode));
  add_strv (b, "fp32_modules", (const gchar * const *) s->fp32_modules);
  add_strv (b, "fp32_params", (const gchar * const *) s->fp32_params);
  json_builder_set_member_name (b, "stochastic_rounding");
  json_builder_add_boolean_value (b, s->stochastic_rounding);
  json_builder_set_member_name (b, "check_grad_overflow");
  json_builder_add_boolean_value (b, s->fp32_check_grad_overflow);
  json_builder_set_member_name (b, "seed");
  json_builder_add_int_value (b, (gint64) s->seed);
  json_builder_set_member_name (b, "scaler");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "semantics");
  json_builder_add_string_value (b, semantics_name (s->semantics));
  json_builder_set_member_name (b, "max_scale");
  json_builder_add_double_value (b, s->max_scale);
  json_builder_set_member_name (b, "growth_factor");
  json_builder_add_double_value (b, s->growth_factor);
  json_builder_set_member_name (b, "backoff_factor");
  json_builder_add_double_value (b, s->backoff_factor);
  json_builder_set_member_name (b, "raise_at_min_scale");
  json_builder_add_boolean_value (b, s->raise_at_min_scale);
  json_builder_end_object (b);
  json_builder_set_member_name (b, "comm");
  json_builder_add_string_value (b, s->comm_backend);
  json_builder_set_member_name (b, "timeout");
  json_builder_add_double_value (b, s->timeout);
  json_builder_set_member_name (b, "require_job_secret");
  json_builder_add_boolean_value (b, s->require_job_secret);
  json_builder_set_member_name (b, "device");
  json_builder_add_string_value (b, s->device);
  json_builder_set_member_name (b, "strict");
  json_builder_add_boolean_value (b, s->strict);
  json_builder_set_member_name (b, "weight_decay_exempt");
  json_builder_add_string_value (b, _mixprec_weight_decay_exempt_names[s->weight_decay_exempt]);
  json_builder_set_member_name (b, "master_weights");
  json_builder_add_string_value (b, mixprec_master_weights_get_name (s->master_weights));
  json_builder_set_member_name (b, "reduce_accumulation");
  json_builder_add_string_value (b, _mixprec_reduce_accumulation_names[s->reduce_fp32 ? 1 : 0]);
  json_builder_set_member_name (b, "quantized_weights_format");
  json_builder_add_string_value (b, _mixprec_zeropp_weights_format_names[s->zeropp_weights_format]);
  json_builder_set_member_name (b, "quantized_gradients_format");
  json_builder_add_string_value (b, _mixprec_zeropp_gradients_format_names[s->zeropp_gradients_format]);
  json_builder_set_member_name (b, "optimizer_states");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "default");
  json_builder_add_string_value (b, mixprec_state_format_get_name (s->state_format_default));
  for (guint i = 0; s->state_slot_names[i] != NULL; i++)
    {
      json_builder_set_member_name (b, s->state_slot_names[i]);
      json_builder_add_string_value (b, mixprec_state_format_get_name (
                                          g_array_index (s->state_slot_formats, MixprecStateFormat, i)));
    }
  if (s->state_block_size != 0)
    {
      json_builder_set_member_name (b, "block_size");
      json_builder_add_int_value (b, s->state_block_size);
    }
  json_builder_end_object (b);
  json_builder_set_member_name (b, "numerics");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "every");
  json_builder_add_int_value (b, (gint64) s->numerics_every);
  add_strv (b, "shadow", (const gchar * const *) s->numerics_shadow);
  json_builder_set_member_name (b, "shadow_fraction");
  json_builder_add_double_value (b, s->numerics_shadow_fraction);
  json_builder_end_object (b);
  {
    const _MixprecAutoPrecSettings *a = &s->auto_precision;
    static const MixprecDType order[] = { MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
                                          MIXPREC_DTYPE_FLOAT32 };
    static const gchar *const names[] = { "fp16", "bf16", "fp32" };

    json_builder_set_member_name (b, "auto_precision");
    json_builder_begin_object (b);
    json_builder_set_member_name (b, "enabled");
    json_builder_add_boolean_value (b, a->enabled);
    add_strv (b, "watch", (const gchar * const *) a->watch);
    json_builder_set_member_name (b, "widen_above");
    json_builder_add_double_value (b, a->widen_above);
    json_builder_set_member_name (b, "widen_patience");
    json_builder_add_int_value (b, (gint64) a->widen_patience);
    json_builder_set_member_name (b, "narrow_below");
    json_builder_add_double_value (b, a->narrow_below);
    json_builder_set_member_name (b, "narrow_patience");
    json_builder_add_int_value (b, (gint64) a->narrow_patience);
    json_builder_set_member_name (b, "max_widened_fraction");
    json_builder_add_double_value (b, a->max_widened_fraction);
    json_builder_set_member_name (b, "widen_to");
    json_builder_begin_array (b);
    for (guint i = 0; i < G_N_ELEMENTS (order); i++)
      if (a->widen_to & (1u << order[i]))
        json_builder_add_string_value (b, names[i]);
    json_builder_end_array (b);
    json_builder_end_object (b);
  }
  json_builder_end_object (b);

  json_builder_set_member_name (b, "fp8");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "enabled");
  json_builder_add_boolean_value (b, s->fp8_enabled);
  json_builder_set_member_name (b, "recipe");
  json_builder_add_string_value (b, fp8_recipe_name (s->fp8_recipe));
  json_builder_set_member_name (b, "format");
  json_builder_add_string_value (b, s->fp8_format == MIXPREC_FP8_FORMAT_E4M3 ? "e4m3" : "hybrid");
  json_builder_set_member_name (b, "amax_history_len");
  json_builder_add_int_value (b, s->fp8_amax_history_len);
  json_builder_set_member_name (b, "amax_compute_algo");
  json_builder_add_string_value (b, s->fp8_amax_compute_algo == MIXPREC_FP8_AMAX_MOST_RECENT
                                    ? "most_recent" : "max");
  json_builder_set_member_name (b, "margin");
  json_builder_add_int_value (b, s->fp8_margin);
  json_builder_set_member_name (b, "mx_block_size");
  json_builder_add_int_value (b, s->fp8_mx_block_size);
  json_builder_set_member_name (b, "mx_scale_mode");
  json_builder_add_string_value (b, (const gchar *[]) { "floor", "rceil", "ceil", "even" }[s->fp8_mx_scale_mode & 3]);
  json_builder_set_member_name (b, "saturate");
  json_builder_add_boolean_value (b, s->fp8_saturate);
  add_strv (b, "modules", (const gchar * const *) s->fp8_modules);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "fp4");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "enabled");
  json_builder_add_boolean_value (b, s->fp4_enabled);
  json_builder_set_member_name (b, "recipe");
  json_builder_add_string_value (b, s->fp4_recipe == MIXPREC_BLOCK_RECIPE_MXFP4 ? "mxfp4" : "nvfp4");
  json_builder_set_member_name (b, "weights_2d");
  json_builder_add_boolean_value (b, s->fp4_weights_2d);
  json_builder_set_member_name (b, "scale_mode");
  json_builder_add_string_value (b, (const gchar *[]) { "floor", "rceil", "ceil", "even" }[s->fp4_scale_mode & 3]);
  json_builder_set_member_name (b, "rht");
  json_builder_add_boolean_value (b, s->fp4_rht);
  json_builder_set_member_name (b, "rht_seed");
  json_builder_add_int_value (b, (gint64) s->fp4_rht_seed);
  add_strv (b, "modules", (const gchar * const *) s->fp4_modules);
  add_strv (b, "exclude_params", (const gchar * const *) s->fp4_exclude_params);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "steps_per_print");
  if (s->steps_per_print == 0)
    json_builder_add_null_value (b);
  else
    json_builder_add_int_value (b, (gint64) s->steps_per_print);
  for (guint k = 0; _mixprec_monitor_sections[k] != NULL; k++)
    {
      json_builder_set_member_name (b, _mixprec_monitor_sections[k]);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "enabled");
      json_builder_add_boolean_value (b, s->monitor_enabled[k]);
      json_builder_set_member_name (b, "output_path");
      json_builder_add_string_value (b, s->monitor_output_path[k]);
      json_builder_set_member_name (b, "job_name");
      json_builder_add_string_value (b, s->monitor_job_name[k]);
      json_builder_end_object (b);
    }
  json_builder_end_object (b);

  root = json_builder_get_root (b);
  text = g_string_new (NULL);
  _mixprec_json_write (text, root, 0);
  g_string_append_c (text, '\n');
  if (length != NULL)
    *length = text->len;
  return g_string_free (text, FALSE);
}

/**
 * mixprec_config_get_fp8_recipe:
 * @self: a #MixprecConfig
 *
 * Gets the FP8 recipe of the `fp8` section: the recipe its `recipe`,
 * `format`, `amax_history_len`, `amax_compute_algo`, `margin`,
 * `mx_block_size` and `saturate` keys describe (see mixprec.json(5)).
 *
 * Returns: (transfer none) (nullable): the recipe, or %NULL when
 *   `fp8.enabled` is false (the default)
 *
 * Since: 1.1
 */
MixprecFp8Recipe *
mixprec_config_get_fp8_recipe (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.fp8_recipe_object;
}

/**
 * mixprec_config_get_fp8_modules:
 * @self: a #MixprecConfig
 *
 * Gets `fp8.modules`: the module types (such as "Linear") whose
 * parameters get FP8 working copies when `fp8.enabled` is true; see
 * mixprec_precision_policy_is_fp8().
 *
 * Returns: (transfer none) (array zero-terminated=1): the module types
 *
 * Since: 1.1
 */
const gchar * const *
mixprec_config_get_fp8_modules (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.fp8_modules;
}

/**
 * mixprec_config_get_fp4_recipe:
 * @self: a #MixprecConfig
 * @recipe: (out) (optional): the block recipe of the weights' 4-bit
 *   working copies: %MIXPREC_BLOCK_RECIPE_NVFP4_2D for `"recipe":
 *   "nvfp4"` with `weights_2d` true (the default),
 *   %MIXPREC_BLOCK_RECIPE_NVFP4 with it false, %MIXPREC_BLOCK_RECIPE_MXFP4
 *   for `"mxfp4"`
 * @scale_mode: (out) (optional): `fp4.scale_mode`, how MXFP4 derives
 *   its E8M0 scales
 *
 * Gets the recipe of the `fp4` section (see mixprec.json(5)).
 *
 * Returns: %TRUE when `fp4.enabled` is true; %FALSE otherwise (the outs
 *   are set either way)
 *
 * Since: 1.1
 */
gboolean
mixprec_config_get_fp4_recipe (MixprecConfig      *self,
                               MixprecBlockRecipe *recipe,
                               MixprecMxScaleMode *scale_mode)
{
  const MixprecConfigSettings *s;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  s = &self->settings;
  if (recipe != NULL)
    *recipe = s->fp4_recipe == MIXPREC_BLOCK_RECIPE_MXFP4 ? MIXPREC_BLOCK_RECIPE_MXFP4
              : s->fp4_weights_2d ? MIXPREC_BLOCK_RECIPE_NVFP4_2D : MIXPREC_BLOCK_RECIPE_NVFP4;
  if (scale_mode != NULL)
    *scale_mode = s->fp4_scale_mode;
  return s->fp4_enabled;
}

/**
 * mixprec_config_get_fp4_rht:
 * @self: a #MixprecConfig
 * @sign_mask: (out) (optional): the random signs of the transform,
 *   mixprec_rht_sign_mask() of `fp4.rht_seed`
 *
 * Whether the `fp4` section asks the trainer to apply the random Hadamard
 * transform (mixprec_rht_apply()) to the 16-element groups of the
 * operands of its weight-gradient GEMMs before quantising them to NVFP4,
 * as Transformer Engine's NVFP4 recipe does. The engine's weight copies
 * are never transformed: the transform belongs to the tensors the trainer
 * quantises along the batch dimension; every rank derives the same
 * @sign_mask from the config.
 *
 * Returns: %TRUE when `fp4.enabled` and `fp4.rht` are true
 *
 * Since: 1.1
 */
gboolean
mixprec_config_get_fp4_rht (MixprecConfig *self,
                            guint16       *sign_mask)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  if (sign_mask != NULL)
    *sign_mask = mixprec_rht_sign_mask (self->settings.fp4_rht_seed);
  return self->settings.fp4_enabled && self->settings.fp4_rht;
}

/**
 * mixprec_config_get_fp4_modules:
 * @self: a #MixprecConfig
 *
 * Gets `fp4.modules`: the module types (such as "Linear") whose
 * parameters get 4-bit working copies when `fp4.enabled` is true; see
 * mixprec_precision_policy_is_fp4().
 *
 * Returns: (transfer none) (array zero-terminated=1): the module types
 *
 * Since: 1.1
 */
const gchar * const *
mixprec_config_get_fp4_modules (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.fp4_modules;
}

/**
 * mixprec_config_get_fp4_exclude_params:
 * @self: a #MixprecConfig
 *
 * Gets `fp4.exclude_params`: glob patterns (as `mixprec.fp32_params`) of
 * parameter names that keep their working dtype although their module
 * type is in `fp4.modules`, such as the first and last layers, which
 * Transformer Engine's NVFP4 recipe leaves in higher precision.
 *
 * Returns: (transfer none) (array zero-terminated=1): the patterns
 *
 * Since: 1.1
 */
const gchar * const *
mixprec_config_get_fp4_exclude_params (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.fp4_exclude_params;
}

gboolean
_mixprec_config_get_offload_optimizer (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.offload_optimizer == _MIXPREC_OFFLOAD_CPU;
}

gboolean
_mixprec_config_get_offload_pin_memory (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.offload_pin_memory;
}

gboolean
_mixprec_config_get_offload_param (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.offload_param == _MIXPREC_OFFLOAD_CPU;
}

gboolean
_mixprec_config_get_offload_param_pin_memory (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.offload_param_pin_memory;
}

guint
_mixprec_config_get_zero_hpz_partition_size (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.zero_hpz_partition_size;
}

gboolean
_mixprec_config_get_zero_quantized_weights (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.zero_quantized_weights;
}

gboolean
_mixprec_config_get_zero_quantized_gradients (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.zero_quantized_gradients;
}

guint
_mixprec_config_get_zeropp_weights_format (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.zeropp_weights_format;
}

guint
_mixprec_config_get_zeropp_gradients_format (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.zeropp_gradients_format;
}

gboolean
_mixprec_config_get_zeropp_loco (MixprecConfig *self,
                                 gdouble       *err_beta,
                                 guint         *reset_t)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  if (err_beta != NULL)
    *err_beta = self->settings.zeropp_loco_err_beta;
  if (reset_t != NULL)
    *reset_t = self->settings.zeropp_loco_reset_t;
  return self->settings.zeropp_loco;
}

guint64
_mixprec_config_get_steps_per_print (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.steps_per_print;
}

guint64
_mixprec_config_get_numerics_every (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.numerics_every;
}

const _MixprecAutoPrecSettings *
_mixprec_config_get_auto_precision (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return &self->settings.auto_precision;
}

const gchar * const *
_mixprec_config_get_numerics_shadow (MixprecConfig *self,
                                     gdouble       *fraction)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  *fraction = self->settings.numerics_shadow_fraction;
  return (const gchar * const *) self->settings.numerics_shadow;
}

gboolean
_mixprec_config_get_monitor (MixprecConfig      *self,
                             _MixprecMonitorKind kind,
                             const gchar       **output_path,
                             const gchar       **job_name)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  g_return_val_if_fail (kind <= _MIXPREC_MONITOR_TENSORBOARD, FALSE);
  *output_path = self->settings.monitor_output_path[kind];
  *job_name = self->settings.monitor_job_name[kind];
  return self->settings.monitor_enabled[kind];
}

gboolean
_mixprec_config_get_require_job_secret (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.require_job_secret;
}

guint
_mixprec_config_get_weight_decay_exempt (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), _MIXPREC_WEIGHT_DECAY_EXEMPT_1D);
  return self->settings.weight_decay_exempt;
}

/**
 * mixprec_config_get_strict:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.strict`: whether the document asked for every warning
 * (see mixprec_config_get_warnings()) to be an error.
 *
 * Returns: %TRUE when the configuration was read strictly
 *
 * Since: 1.1
 */
gboolean
mixprec_config_get_strict (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.strict;
}

/**
 * mixprec_config_get_precision_mode:
 * @self: a #MixprecConfig
 *
 * Gets the precision mode the `fp16`, `bf16` and `torch_autocast`
 * sections select.
 *
 * Returns: the mode
 *
 * Since: 1.0
 */
MixprecPrecisionMode
mixprec_config_get_precision_mode (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_PRECISION_MODE_FP32);
  return self->settings.mode;
}

/**
 * mixprec_config_get_low_dtype:
 * @self: a #MixprecConfig
 *
 * Gets the low-precision dtype of the mode: %MIXPREC_DTYPE_FLOAT16 in fp16
 * mode, %MIXPREC_DTYPE_BFLOAT16 in both bf16 modes, `torch_autocast.dtype`
 * under autocast, and %MIXPREC_DTYPE_FLOAT32 in fp32 mode.
 *
 * Returns: the dtype
 *
 * Since: 1.0
 */
MixprecDType
mixprec_config_get_low_dtype (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_DTYPE_FLOAT32);

  switch (self->settings.mode)
    {
    case MIXPREC_PRECISION_MODE_FP16:
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      return MIXPREC_DTYPE_FLOAT16;
    case MIXPREC_PRECISION_MODE_BF16:
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
      return MIXPREC_DTYPE_BFLOAT16;
    case MIXPREC_PRECISION_MODE_AUTOCAST:
      return self->settings.autocast_dtype;
    case MIXPREC_PRECISION_MODE_FP32:
    default:
      return MIXPREC_DTYPE_FLOAT32;
    }
}

/**
 * mixprec_config_get_grad_accum_dtype:
 * @self: a #MixprecConfig
 *
 * Gets the dtype gradients are accumulated in across micro-steps:
 * `data_types.grad_accum_dtype` when set, otherwise FP32 in fp32, bf16 and
 * autocast modes, FP16 in fp16 mode and BF16 in bf16 mode without master
 * weights. FP32 for bf16 is a deliberate difference from DeepSpeed, which
 * accumulates bf16 gradients in bf16.
 *
 * Returns: the dtype
 *
 * Since: 1.0
 */
MixprecDType
mixprec_config_get_grad_accum_dtype (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_DTYPE_FLOAT32);
  return self->settings.grad_accum_dtype;
}

/**
 * mixprec_config_get_communication_dtype:
 * @self: a #MixprecConfig
 *
 * Gets the dtype gradients are reduced in: `communication_data_type` when
 * set, otherwise the gradient accumulation dtype. Under autocast this is
 * the dtype of the parameters outside `lower_precision_safe_modules`; the
 * safe modules communicate in the autocast dtype (see
 * #MixprecPrecisionPolicy).
 *
 * Returns: the dtype
 *
 * Since: 1.0
 */
MixprecDType
mixprec_config_get_communication_dtype (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_DTYPE_FLOAT32);
  return self->settings.communication_dtype;
}

/**
 * mixprec_config_get_loss_scale:
 * @self: a #MixprecConfig
 *
 * Gets `fp16.loss_scale`.
 *
 * Returns: the static loss scale, or 0 for dynamic loss scaling
 *
 * Since: 1.0
 */
gdouble
mixprec_config_get_loss_scale (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.loss_scale;
}

/**
 * mixprec_config_get_initial_scale_power:
 * @self: a #MixprecConfig
 *
 * Gets `fp16.initial_scale_power`: the dynamic scaler starts at
 * 2^power. Defaults to 16, or 32 under Megatron scaler semantics.
 *
 * Returns: the power
 *
 * Since: 1.0
 */
gint
mixprec_config_get_initial_scale_power (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 16);
  return self->settings.initial_scale_power;
}

/**
 * mixprec_config_get_loss_scale_window:
 * @self: a #MixprecConfig
 *
 * Gets `fp16.loss_scale_window`: how many overflow-free steps grow the
 * scale. Defaults to 1000, or 2000 (GradScaler's growth_interval) under
 * torch scaler semantics.
 *
 * Returns: the window in steps
 *
 * Since: 1.0
 */
guint
mixprec_config_get_loss_scale_window (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 1000);
  return self->settings.loss_scale_window;
}

/**
 * mixprec_config_get_hysteresis:
 * @self: a #MixprecConfig
 *
 * Gets `fp16.hysteresis` (DeepSpeed's `delayed_shift`): how many overflows
 * in a row the scale tolerates before it backs off. Defaults to 2, or 1
 * under torch scaler semantics.
 *
 * Returns: the hysteresis
 *
 * Since: 1.0
 */
guint
mixprec_config_get_hysteresis (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 2);
  return self->settings.hysteresis;
}

/**
 * mixprec_config_get_consecutive_hysteresis:
 * @self: a #MixprecConfig
 *
 * Gets `fp16.consecutive_hysteresis`: whether every overflow-free step
 * refills the hysteresis.
 *
 * Returns: the flag
 *
 * Since: 1.0
 */
gboolean
mixprec_config_get_consecutive_hysteresis (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.consecutive_hysteresis;
}

/**
 * mixprec_config_get_min_loss_scale:
 * @self: a #MixprecConfig
 *
 * Gets `fp16.min_loss_scale`, the floor of the dynamic scale.
 *
 * Returns: the minimum scale
 *
 * Since: 1.0
 */
gdouble
mixprec_config_get_min_loss_scale (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 1);
  return self->settings.min_loss_scale;
}

/**
 * mixprec_config_get_check_grad_overflow:
 * @self: a #MixprecConfig
 *
 * Gets whether a step with a non-finite gradient is skipped: always in
 * fp16 mode and under fp16 autocast (the loss scaler needs it),
 * `bf16.check_grad_overflow` in the bf16 modes and under bf16 autocast,
 * `mixprec.check_grad_overflow` (default false, as in DeepSpeed) in fp32
 * mode. An unchecked non-finite gradient is applied the way
 * torch.nn.utils.clip_grad_norm_() and DeepSpeed's fp32 path do: with
 * gradient clipping on, a NaN norm makes every gradient NaN and an
 * infinite one makes every gradient 0 (NaN where it was infinite).
 *
 * Returns: whether gradients are checked
 *
 * Since: 1.0
 */
gboolean
mixprec_config_get_check_grad_overflow (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), TRUE);

  switch (self->settings.mode)
    {
    case MIXPREC_PRECISION_MODE_FP16:
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      return TRUE;
    case MIXPREC_PRECISION_MODE_AUTOCAST:
      return self->settings.autocast_dtype == MIXPREC_DTYPE_FLOAT16
             || self->settings.check_grad_overflow;
    case MIXPREC_PRECISION_MODE_BF16:
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
      return self->settings.check_grad_overflow;
    case MIXPREC_PRECISION_MODE_FP32:
    default:
      return self->settings.fp32_check_grad_overflow;
    }
}

/**
 * mixprec_config_get_scaler_semantics:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.scaler.semantics`: which published dynamic loss scaler the
 * run reproduces.
 *
 * Returns: the semantics (DeepSpeed's by default)
 *
 * Since: 1.0
 */
MixprecScalerSemantics
mixprec_config_get_scaler_semantics (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_SCALER_SEMANTICS_DEEPSPEED);
  return self->settings.semantics;
}

/**
 * mixprec_config_get_max_scale:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.scaler.max_scale`, a ceiling for the dynamic scale.
 *
 * Returns: the ceiling, or 0 when the scale is bounded only by staying
 *   finite
 *
 * Since: 1.0
 */
gdouble
mixprec_config_get_max_scale (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.max_scale;
}

/**
 * mixprec_config_get_growth_factor:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.scaler.growth_factor`, what the scale is multiplied by
 * after a window of overflow-free steps.
 *
 * Returns: the factor (2 by default)
 *
 * Since: 1.0
 */
gdouble
mixprec_config_get_growth_factor (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 2);
  return self->settings.growth_factor;
}

/**
 * mixprec_config_get_backoff_factor:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.scaler.backoff_factor`, what the scale is multiplied by
 * when it backs off after an overflow.
 *
 * Returns: the factor (0.5 by default)
 *
 * Since: 1.0
 */
gdouble
mixprec_config_get_backoff_factor (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0.5);
  return self->settings.backoff_factor;
}

/**
 * mixprec_config_get_raise_at_min_scale:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.scaler.raise_at_min_scale`: whether an overflow while the
 * scale already equals its minimum is an error. Defaults to %TRUE
 * (DeepSpeed's behaviour) under DeepSpeed semantics and %FALSE under torch
 * and Megatron semantics, whose scalers never raise.
 *
 * Returns: the flag
 *
 * Since: 1.0
 */
gboolean
mixprec_config_get_raise_at_min_scale (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), TRUE);
  return self->settings.raise_at_min_scale;
}

/**
 * mixprec_config_get_fp32_modules:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.fp32_modules`: module types (such as "LayerNorm") kept
 * entirely in FP32 in every precision mode.
 *
 * Returns: (transfer none) (array zero-terminated=1): the module types
 *
 * Since: 1.0
 */
const gchar * const *
mixprec_config_get_fp32_modules (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.fp32_modules;
}

/**
 * mixprec_config_get_fp32_params:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.fp32_params`: parameter names or glob patterns (`*` and
 * `?`, as g_pattern_match_simple()) of parameters kept entirely in FP32.
 *
 * Returns: (transfer none) (array zero-terminated=1): the patterns
 *
 * Since: 1.0
 */
const gchar * const *
mixprec_config_get_fp32_params (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.fp32_params;
}

/**
 * mixprec_config_get_optimizer_state_dtype:
 * @self: a #MixprecConfig
 *
 * Gets the data type the optimizer keeps its state slots in (Adam's
 * moments, SGD's momentum): %MIXPREC_DTYPE_BFLOAT16 when
 * `bf16.bf16_optimizer_states` is true in bf16 mode, or
 * `mixprec.optimizer_states` makes every slot "bf16", else
 * %MIXPREC_DTYPE_FLOAT32. Slots in other formats (scaled, quantized, or
 * one slot's own): see mixprec_config_get_optimizer_state_format(). The update is computed in FP32 either way; a
 * bfloat16 slot is widened when read and rounded when written, to nearest
 * even or stochastically as mixprec_config_get_stochastic_rounding() says.
 *
 * Returns: the optimizer state dtype
 *
 * Since: 1.1
 */
MixprecDType
mixprec_config_get_optimizer_state_dtype (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_DTYPE_FLOAT32);

  return self->settings.optimizer_state_dtype;
}

/**
 * mixprec_config_get_master_weights:
 * @self: a #MixprecConfig
 *
 * Gets how the FP32 values of low-precision parameters are kept:
 * `mixprec.master_weights` when set, else %MIXPREC_MASTER_WEIGHTS_NONE in
 * the modes without masters (%MIXPREC_PRECISION_MODE_BF16_NO_MASTER,
 * %MIXPREC_PRECISION_MODE_FP16_NO_MASTER) and %MIXPREC_MASTER_WEIGHTS_FP32
 * otherwise. %MIXPREC_MASTER_WEIGHTS_REMAINDER and
 * %MIXPREC_MASTER_WEIGHTS_KAHAN need bf16 working copies; with either the
 * precision mode is %MIXPREC_PRECISION_MODE_BF16_NO_MASTER, since no FP32
 * master buffer is kept, and the 16 extra bits per element stand in for
 * it. The remainder reconstructs the FP32 master bit for bit, and the
 * working copy is its rounding to nearest with ties away from zero (a
 * 16-bit remainder cannot keep ties to even). Parameters kept in FP32
 * (mixprec.fp32_modules) are their own master under every setting.
 *
 * Returns: the master representation
 *
 * Since: 1.1
 */
MixprecMasterWeights
mixprec_config_get_master_weights (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_MASTER_WEIGHTS_FP32);
  return self->settings.master_weights;
}

/**
 * mixprec_config_get_optimizer_state_format:
 * @self: a #MixprecConfig
 * @slot: (nullable): the name of an optimizer state slot, as the
 *   optimizer's mixprec_feature_get_state_names() spells it ("exp_avg"),
 *   or %NULL for the slots `mixprec.optimizer_states` does not name
 *
 * Gets the format the optimizer keeps @slot in: what
 * `mixprec.optimizer_states` gives it (a string gives every slot the same
 * format), %MIXPREC_STATE_FORMAT_BF16 for every slot with
 * `bf16.bf16_optimizer_states` in bf16 mode, else
 * %MIXPREC_STATE_FORMAT_FP32.
 *
 * Returns: the slot's format
 *
 * Since: 1.1
 */
MixprecStateFormat
mixprec_config_get_optimizer_state_format (MixprecConfig *self,
                                           const gchar   *slot)
{
  const MixprecConfigSettings *s;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), MIXPREC_STATE_FORMAT_FP32);

  s = &self->settings;
  for (guint i = 0; slot != NULL && s->state_slot_names[i] != NULL; i++)
    if (g_str_equal (s->state_slot_names[i], slot))
      return g_array_index (s->state_slot_formats, MixprecStateFormat, i);
  return s->state_format_default;
}

/**
 * mixprec_config_get_optimizer_state_slots:
 * @self: a #MixprecConfig
 *
 * Gets the slot names `mixprec.optimizer_states` gives a format of their
 * own, in the document's order (each is one of the optimizer's state
 * names; see mixprec_config_get_optimizer_state_format()).
 *
 * Returns: (transfer none) (array zero-terminated=1): the names, possibly
 *   none
 *
 * Since: 1.1
 */
const gchar * const *
mixprec_config_get_optimizer_state_slots (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.state_slot_names;
}

/**
 * mixprec_config_get_optimizer_state_block_size:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.optimizer_states.block_size`: how many elements share one
 * FP32 scale in the scaled and quantized state formats, a power of two
 * from 32 to 4096; 0 when the document leaves it to the formats' defaults
 * (128 when a slot is %MIXPREC_STATE_FORMAT_INT4, else 256). Blocks are
 * counted from the first element of each parameter unit, so they are the
 * same at every world size and ZeRO stage.
 *
 * Returns: the block size, or 0
 *
 * Since: 1.1
 */
guint
mixprec_config_get_optimizer_state_block_size (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.state_block_size;
}

/**
 * mixprec_config_get_stochastic_rounding:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.stochastic_rounding`: whether low-precision weights are
 * written with stochastic rounding (seeded by mixprec_config_get_seed())
 * instead of round-to-nearest-even.
 *
 * Returns: the flag
 *
 * Since: 1.0
 */
gboolean
mixprec_config_get_stochastic_rounding (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.stochastic_rounding;
}

/**
 * mixprec_config_get_comm_backend:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.comm`: "auto", "local", "ucx" or "nccl".
 *
 * Returns: (transfer none): the communication backend
 *
 * Since: 1.0
 */
const gchar *
mixprec_config_get_comm_backend (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.comm_backend;
}

/**
 * mixprec_config_get_timeout:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.timeout`: how long, in seconds, the rendezvous may take
 * and a collective may go without progress before it fails (default 300).
 * mixprec_engine_new() uses it unless the environment variable
 * `MIXPREC_TIMEOUT` (what `mixprec-run --timeout` sets) overrides it.
 *
 * Returns: the timeout in seconds
 *
 * Since: 1.1
 */
gdouble
mixprec_config_get_timeout (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.timeout;
}

/**
 * mixprec_config_get_device:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.device`: "cpu" or "cuda".
 *
 * Returns: (transfer none): the device
 *
 * Since: 1.0
 */
const gchar *
mixprec_config_get_device (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.device;
}

/**
 * mixprec_config_get_seed:
 * @self: a #MixprecConfig
 *
 * Gets `mixprec.seed`, the seed of stochastic rounding.
 *
 * Returns: the seed (0 by default)
 *
 * Since: 1.0
 */
guint64
mixprec_config_get_seed (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.seed;
}

/**
 * mixprec_config_get_zero_stage:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.stage`, 0 to 3.
 *
 * Returns: the ZeRO stage
 *
 * Since: 1.0
 */
guint
mixprec_config_get_zero_stage (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.zero_stage;
}

/**
 * mixprec_config_get_reduce_bucket_size:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.reduce_bucket_size`, in elements.
 *
 * Returns: the bucket size (5e8 by default)
 *
 * Since: 1.0
 */
guint64
mixprec_config_get_reduce_bucket_size (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.reduce_bucket_size;
}

/**
 * mixprec_config_get_allgather_bucket_size:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.allgather_bucket_size`, in elements.
 *
 * Returns: the bucket size (5e8 by default)
 *
 * Since: 1.0
 */
guint64
mixprec_config_get_allgather_bucket_size (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.allgather_bucket_size;
}

/**
 * mixprec_config_get_overlap_comm:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.overlap_comm`; by default %TRUE in stage 3 and
 * %FALSE otherwise, as in DeepSpeed.
 *
 * Returns: the flag
 *
 * Since: 1.0
 */
gboolean
mixprec_config_get_overlap_comm (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  return self->settings.overlap_comm;
}

/**
 * mixprec_config_get_contiguous_gradients:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.contiguous_gradients`.
 *
 * Returns: the flag (%TRUE by default)
 *
 * Since: 1.0
 */
gboolean
mixprec_config_get_contiguous_gradients (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), TRUE);
  return self->settings.contiguous_gradients;
}

/**
 * mixprec_config_get_prefetch_bucket_size:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.stage3_prefetch_bucket_size` (also read as
 * `prefetch_bucket_size`): under ZeRO-3, the most elements of parameters
 * being gathered ahead of use (mixprec_engine_prefetch()) at any time.
 *
 * Returns: the number of elements (5e7 by default)
 *
 * Since: 1.1
 */
guint64
mixprec_config_get_prefetch_bucket_size (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.prefetch_bucket_size;
}

/**
 * mixprec_config_get_param_persistence_threshold:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.stage3_param_persistence_threshold` (also
 * `param_persistence_threshold`): parameters with fewer elements are not
 * partitioned under ZeRO-3; every rank keeps their whole working copy.
 *
 * Returns: the number of elements (1e5 by default)
 *
 * Since: 1.1
 */
guint64
mixprec_config_get_param_persistence_threshold (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.param_persistence_threshold;
}

/**
 * mixprec_config_get_max_live_parameters:
 * @self: a #MixprecConfig
 *
 * Gets `zero_optimization.stage3_max_live_parameters` (also
 * `max_live_parameters`): under ZeRO-3, prefetching stops when gathered
 * parameters and prefetches would exceed this many elements.
 *
 * Returns: the number of elements (1e9 by default)
 *
 * Since: 1.1
 */
guint64
mixprec_config_get_max_live_parameters (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.max_live_parameters;
}

/**
 * mixprec_config_get_gradient_clipping:
 * @self: a #MixprecConfig
 *
 * Gets `gradient_clipping`, the maximum global gradient norm.
 *
 * Returns: the norm, or 0 (the default) when clipping is off
 *
 * Since: 1.0
 */
gdouble
mixprec_config_get_gradient_clipping (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.gradient_clipping;
}

/**
 * mixprec_config_get_gradient_accumulation_steps:
 * @self: a #MixprecConfig
 *
 * Gets `gradient_accumulation_steps`, as written or as
 * mixprec_config_resolve_batch() derived it.
 *
 * Returns: the number of micro-steps per optimizer step; 1 when unset
 *
 * Since: 1.0
 */
guint
mixprec_config_get_gradient_accumulation_steps (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 1);
  return self->settings.gradient_accumulation_steps != 0
         ? self->settings.gradient_accumulation_steps : 1;
}

/**
 * mixprec_config_get_train_batch_size:
 * @self: a #MixprecConfig
 *
 * Gets `train_batch_size`, as written or as mixprec_config_resolve_batch()
 * derived it.
 *
 * Returns: the global batch size, or 0 when not known yet
 *
 * Since: 1.0
 */
guint
mixprec_config_get_train_batch_size (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.train_batch_size;
}

/**
 * mixprec_config_get_train_micro_batch_size_per_gpu:
 * @self: a #MixprecConfig
 *
 * Gets `train_micro_batch_size_per_gpu`, as written or as
 * mixprec_config_resolve_batch() derived it.
 *
 * Returns: the per-rank micro-batch size, or 0 when not known yet
 *
 * Since: 1.0
 */
guint
mixprec_config_get_train_micro_batch_size_per_gpu (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), 0);
  return self->settings.train_micro_batch_size_per_gpu;
}

static gboolean
batch_mismatch (GError **error,
                guint    batch,
                guint    micro,
                guint    steps,
                guint    world_size)
{
  g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_CONFLICT,
               "train_batch_size: must equal train_micro_batch_size_per_gpu * "
               "gradient_accumulation_steps * world size = %u * %u * %u = %" G_GUINT64_FORMAT
               ", got %u",
               micro, steps, world_size, (guint64) micro * steps * world_size, batch);
  return FALSE;
}

/**
 * mixprec_config_resolve_batch:
 * @self: a #MixprecConfig
 * @world_size: the number of data-parallel ranks, at least 1
 * @error: return location for a #GError
 *
 * Applies DeepSpeed's batch-size rule, `train_batch_size ==
 * train_micro_batch_size_per_gpu * gradient_accumulation_steps *
 * world_size`: when all three are set it checks them; when two are set it
 * derives the third; when only one of the batch sizes is set,
 * gradient_accumulation_steps is 1 and the other batch size follows.
 *
 * Returns: %TRUE with the three values filled in; %FALSE with @error set
 *   and nothing changed when neither batch size is set
 *   (%MIXPREC_CONFIG_ERROR_INVALID_VALUE), the values disagree or do not
 *   divide (%MIXPREC_CONFIG_ERROR_CONFLICT), or a product overflows
 *
 * Since: 1.0
 */
gboolean
mixprec_config_resolve_batch (MixprecConfig  *self,
                              guint           world_size,
                              GError        **error)
{
  MixprecConfigSettings *s;
  guint batch, micro, steps;
  guint64 product;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), FALSE);
  g_return_val_if_fail (world_size > 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  s = &self->settings;
  batch = s->train_batch_size;
  micro = s->train_micro_batch_size_per_gpu;
  steps = s->gradient_accumulation_steps;

  if (batch == 0 && micro == 0)
    {
      g_set_error_literal (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                           "train_batch_size: missing, and so is "
                           "train_micro_batch_size_per_gpu; set at least one of them");
      return FALSE;
    }

  if (batch != 0 && micro != 0 && steps == 0)
    {
      guint64 per_step = (guint64) micro * world_size;

      steps = (guint) MAX (batch / per_step, 1);
    }
  else if (batch != 0 && micro == 0)
    {
      guint64 per_micro;

      if (steps == 0)
        steps = 1;
      per_micro = (guint64) steps * world_size;
      micro = (guint) (batch / per_micro);
      if (micro == 0)
        micro = 1;
    }
  else if (batch == 0)
    {
      if (steps == 0)
        steps = 1;
      product = (guint64) micro * steps * world_size;
      if (product > G_MAXUINT)
        {
          g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE,
                       "train_batch_size: train_micro_batch_size_per_gpu * "
                       "gradient_accumulation_steps * world size = %u * %u * %u "
                       "= %" G_GUINT64_FORMAT " exceeds %u",
                       micro, steps, world_size, product, G_MAXUINT);
          return FALSE;
        }
      batch = (guint) product;
    }

  product = (guint64) micro * steps * world_size;
  if (product != batch)
    return batch_mismatch (error, batch, micro, steps, world_size);

  s->train_batch_size = batch;
  s->train_micro_batch_size_per_gpu = micro;
  s->gradient_accumulation_steps = steps;
  return TRUE;
}

/**
 * mixprec_config_get_optimizer_type:
 * @self: a #MixprecConfig
 *
 * Gets `optimizer.type` as written, for example "AdamW".
 *
 * Returns: (transfer none) (nullable): the type, or %NULL without an
 *   optimizer section
 *
 * Since: 1.0
 */
const gchar *
mixprec_config_get_optimizer_type (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.optimizer_type;
}

/**
 * mixprec_config_get_optimizer_params:
 * @self: a #MixprecConfig
 *
 * Gets `optimizer.params` as written, read-only (sealed); the optimizer
 * checks them.
 *
 * Returns: (transfer none) (nullable): the parameters (an empty object when
 *   the section has none), or %NULL without an optimizer section
 *
 * Since: 1.0
 */
JsonObject *
mixprec_config_get_optimizer_params (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.optimizer_params;
}

/**
 * mixprec_config_get_scheduler_type:
 * @self: a #MixprecConfig
 *
 * Gets `scheduler.type` as written, for example "WarmupLR".
 *
 * Returns: (transfer none) (nullable): the type, or %NULL without a
 *   scheduler section
 *
 * Since: 1.0
 */
const gchar *
mixprec_config_get_scheduler_type (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.scheduler_type;
}

/**
 * mixprec_config_get_scheduler_params:
 * @self: a #MixprecConfig
 *
 * Gets `scheduler.params` as written, read-only (sealed); the scheduler
 * checks them.
 *
 * Returns: (transfer none) (nullable): the parameters (an empty object when
 *   the section has none), or %NULL without a scheduler section
 *
 * Since: 1.0
 */
JsonObject *
mixprec_config_get_scheduler_params (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return self->settings.scheduler_params;
}

/**
 * mixprec_config_get_lower_precision_safe_modules:
 * @self: a #MixprecConfig
 *
 * Gets `torch_autocast.lower_precision_safe_modules`: the module types
 * whose gradients autocast communicates in the autocast dtype. Defaults to
 * Linear, Conv1d, Conv2d and Conv3d. A dotted prefix ("torch.nn.Linear")
 * is allowed and ignored when matching.
 *
 * Returns: (transfer none) (array zero-terminated=1): the module types
 *
 * Since: 1.0
 */
const gchar * const *
mixprec_config_get_lower_precision_safe_modules (MixprecConfig *self)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (self), NULL);
  return (const gchar * const *) self->settings.lower_precision_safe_modules;
}
