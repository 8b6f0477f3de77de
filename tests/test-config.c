/* test-config.c — MixprecConfig against DeepSpeed's documented defaults
 * and rules (mixprec.json(5); DeepSpeed's runtime/config.py), a table of invalid documents each naming the
 * path it must report, malformed input that must fail cleanly, a corpus of
 * realistic DeepSpeed files, and the to_data round trip. */
#include <string.h>
#include <glib/gstdio.h>

#include <mixprec/mixprec.h>

static MixprecConfig *
load (const gchar *json)
{
  g_autoptr(GError) error = NULL;
  MixprecConfig *config = mixprec_config_new_from_data (json, -1, &error);

  if (config == NULL)
    g_error ("%s did not load: %s", json, error->message);
  return config;
}

static gboolean
has_line_containing (const gchar *message,
                     const gchar *a,
                     const gchar *b)
{
  g_auto(GStrv) lines = g_strsplit (message, "\n", -1);

  for (guint i = 0; lines[i] != NULL; i++)
    if (strstr (lines[i], a) != NULL && (b == NULL || strstr (lines[i], b) != NULL))
      return TRUE;
  return FALSE;
}

/* Each line of an error names a place first: "path: rule". */
static void
assert_well_formed (const GError *error)
{
  g_auto(GStrv) lines = NULL;

  g_assert_nonnull (error);
  g_assert_true (error->domain == MIXPREC_CONFIG_ERROR);
  g_assert_true (g_utf8_validate (error->message, -1, NULL));
  lines = g_strsplit (error->message, "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), >=, 1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_assert_nonnull (strstr (lines[i], ": "));
      g_assert_cmpuint (strlen (lines[i]), <, 1000);
    }
}

static guint
count_lines (const gchar *message)
{
  g_auto(GStrv) lines = g_strsplit (message, "\n", -1);

  return g_strv_length (lines);
}

/* ------------------------------------------------------------ defaults */

static void
check_reference_defaults (MixprecConfig *c)
{
  /* DeepSpeed's defaults, as mixprec.json(5) lists them. */
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP32);
  g_assert_cmpfloat (mixprec_config_get_loss_scale (c), ==, 0);
  g_assert_cmpint (mixprec_config_get_initial_scale_power (c), ==, 16);
  g_assert_cmpuint (mixprec_config_get_loss_scale_window (c), ==, 1000);
  g_assert_cmpuint (mixprec_config_get_hysteresis (c), ==, 2);
  g_assert_false (mixprec_config_get_consecutive_hysteresis (c));
  g_assert_cmpfloat (mixprec_config_get_min_loss_scale (c), ==, 1);
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 0);
  g_assert_cmpuint (mixprec_config_get_reduce_bucket_size (c), ==, 500000000);
  g_assert_cmpuint (mixprec_config_get_allgather_bucket_size (c), ==, 500000000);
  g_assert_false (mixprec_config_get_overlap_comm (c));
  g_assert_true (mixprec_config_get_contiguous_gradients (c));
  g_assert_cmpuint (mixprec_config_get_prefetch_bucket_size (c), ==, 50000000);
  g_assert_cmpuint (mixprec_config_get_param_persistence_threshold (c), ==, 100000);
  g_assert_cmpuint (mixprec_config_get_max_live_parameters (c), ==, 1000000000);
  g_assert_cmpfloat (mixprec_config_get_gradient_clipping (c), ==, 0);
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, 1);
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 0);
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, 0);
  g_assert_null (mixprec_config_get_optimizer_type (c));
  g_assert_null (mixprec_config_get_optimizer_params (c));
  g_assert_null (mixprec_config_get_scheduler_type (c));
  g_assert_null (mixprec_config_get_scheduler_params (c));
  g_assert_cmpint (mixprec_config_get_low_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_config_get_grad_accum_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_config_get_communication_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_false (mixprec_config_get_check_grad_overflow (c));
  {
    const gchar *const safe[] = { "Linear", "Conv1d", "Conv2d", "Conv3d", NULL };

    g_assert_true (g_strv_equal ((const gchar * const *) safe,
                                 mixprec_config_get_lower_precision_safe_modules (c)));
  }

  /* The mixprec section's documented defaults. */
  g_assert_cmpint (mixprec_config_get_scaler_semantics (c), ==, MIXPREC_SCALER_SEMANTICS_DEEPSPEED);
  g_assert_cmpfloat (mixprec_config_get_max_scale (c), ==, 0);
  g_assert_cmpfloat (mixprec_config_get_growth_factor (c), ==, 2);
  g_assert_cmpfloat (mixprec_config_get_backoff_factor (c), ==, 0.5);
  g_assert_true (mixprec_config_get_raise_at_min_scale (c));
  g_assert_cmpuint (g_strv_length ((gchar **) mixprec_config_get_fp32_modules (c)), ==, 0);
  g_assert_cmpuint (g_strv_length ((gchar **) mixprec_config_get_fp32_params (c)), ==, 0);
  g_assert_false (mixprec_config_get_stochastic_rounding (c));
  g_assert_cmpstr (mixprec_config_get_comm_backend (c), ==, "auto");
  g_assert_cmpstr (mixprec_config_get_device (c), ==, "cpu");
  g_assert_cmpfloat (mixprec_config_get_timeout (c), ==, 300);
  g_assert_cmpuint (mixprec_config_get_seed (c), ==, 0);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 0);
}

static void
test_config_defaults (void)
{
  g_autoptr(MixprecConfig) fresh = mixprec_config_new ();
  g_autoptr(MixprecConfig) empty = load ("{}");
  g_autoptr(MixprecConfig) spaced = load (" \n\t{ }\r\n");

  check_reference_defaults (fresh);
  check_reference_defaults (empty);
  check_reference_defaults (spaced);
}

/* The resolved dtypes of each mode: DeepSpeed's, except FP32 accumulation
 * for bf16 (mixprec.json(5), data_types; DeepSpeed issues #1800 #2352 #2768). */
static void
test_config_mode_dtypes (void)
{
  static const struct {
    const gchar *json;
    MixprecPrecisionMode mode;
    MixprecDType low, accum, comm;
    gboolean check_overflow;
  } cases[] = {
    { "{}", MIXPREC_PRECISION_MODE_FP32,
      MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, FALSE },
    { "{\"fp16\": {\"enabled\": true}}", MIXPREC_PRECISION_MODE_FP16,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, TRUE },
    { "{\"bf16\": {\"enabled\": true}}", MIXPREC_PRECISION_MODE_BF16,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"bfloat16\": {\"enabled\": true}}", MIXPREC_PRECISION_MODE_BF16,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"bf16\": {\"enabled\": true, \"check_grad_overflow\": false}}", MIXPREC_PRECISION_MODE_BF16,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, FALSE },
    { "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}}",
      MIXPREC_PRECISION_MODE_BF16_NO_MASTER,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, TRUE },
    /* fp16 without masters: DeepSpeed's fp16_master_weights_and_grads
     * keeps gradients in fp16 and accumulates in them, as bf16 without
     * masters does. */
    { "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, TRUE },
    { "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true},"
      " \"data_types\": {\"grad_accum_dtype\": \"fp32\"}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"bf16\"}}",
      MIXPREC_PRECISION_MODE_BF16,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, TRUE },
    { "{\"fp16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"float32\"}}",
      MIXPREC_PRECISION_MODE_FP16,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"fp16\": {\"enabled\": true}, \"communication_data_type\": \"fp32\"}",
      MIXPREC_PRECISION_MODE_FP16,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"communication_data_type\": \"BF16\"}", MIXPREC_PRECISION_MODE_FP32,
      MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, FALSE },
    { "{\"torch_autocast\": {\"enabled\": true}}", MIXPREC_PRECISION_MODE_AUTOCAST,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"torch.float16\"}}",
      MIXPREC_PRECISION_MODE_AUTOCAST,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
    { "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"half\"}, \"communication_data_type\": \"fp16\"}",
      MIXPREC_PRECISION_MODE_AUTOCAST,
      MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, TRUE },
    /* A disabled section does not count, whatever else it holds. */
    { "{\"fp16\": {\"enabled\": false, \"loss_scale\": 8}, \"bf16\": {\"enabled\": true}}",
      MIXPREC_PRECISION_MODE_BF16,
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, TRUE },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);

      g_test_message ("%s", cases[i].json);
      g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, cases[i].mode);
      g_assert_cmpint (mixprec_config_get_low_dtype (c), ==, cases[i].low);
      g_assert_cmpint (mixprec_config_get_grad_accum_dtype (c), ==, cases[i].accum);
      g_assert_cmpint (mixprec_config_get_communication_dtype (c), ==, cases[i].comm);
      g_assert_cmpint (mixprec_config_get_check_grad_overflow (c), ==, cases[i].check_overflow);
    }
}

/* mixprec.reduce_accumulation, as mixprec.json(5) describes it: "fp32"
 * makes the accumulation FP32 and, unless communication_data_type says
 * otherwise, sends the gradients in their own dtype; a low-precision
 * grad_accum_dtype beside it is refused; the resolved value is "fp32"
 * whenever the accumulation dtype is. */
static void
test_config_reduce_accumulation (void)
{
  static const struct {
    const gchar *json;
    MixprecDType accum;
    MixprecDType comm;
    const gchar *resolved;
  } cases[] = {
    { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"reduce_accumulation\": \"fp32\"}}",
      MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, "fp32" },
    { "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"reduce_accumulation\": \"fp32\"}}",
      MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, "fp32" },
    { "{\"bf16\": {\"enabled\": true}, \"communication_data_type\": \"fp32\","
      " \"mixprec\": {\"reduce_accumulation\": \"fp32\"}}",
      MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, "fp32" },
    { "{\"mixprec\": {\"reduce_accumulation\": \"fp32\"}}",
      MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, "fp32" },
    /* Without it: as before. */
    { "{\"bf16\": {\"enabled\": true}}", MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, "fp32" },
    { "{\"fp16\": {\"enabled\": true}}", MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16,
      "grad_accum_dtype" },
    { "{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"bf16\"},"
      " \"mixprec\": {\"reduce_accumulation\": \"grad_accum_dtype\"}}",
      MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, "grad_accum_dtype" },
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) bad = NULL;

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);
      g_autoptr(MixprecConfig) again = NULL;
      g_autofree gchar *text = mixprec_config_to_data (c, NULL);
      g_autofree gchar *member = g_strdup_printf ("\"reduce_accumulation\":\"%s\"",
                                                  cases[i].resolved);
      g_autoptr(GString) compact = g_string_new (NULL);

      for (const gchar *p = text; *p != '\0'; p++)
        if (!g_ascii_isspace (*p))
          g_string_append_c (compact, *p);

      g_test_message ("%s", cases[i].json);
      g_assert_cmpint (mixprec_config_get_grad_accum_dtype (c), ==, cases[i].accum);
      g_assert_cmpint (mixprec_config_get_communication_dtype (c), ==, cases[i].comm);
      g_assert_nonnull (strstr (compact->str, member));
      /* The printed configuration reads back to the same dtypes. */
      again = load (text);
      g_assert_cmpint (mixprec_config_get_grad_accum_dtype (again), ==, cases[i].accum);
      g_assert_cmpint (mixprec_config_get_communication_dtype (again), ==, cases[i].comm);
    }

  bad = mixprec_config_new_from_data ("{\"bf16\": {\"enabled\": true}, \"data_types\": "
                                      "{\"grad_accum_dtype\": \"bf16\"}, \"mixprec\": "
                                      "{\"reduce_accumulation\": \"fp32\"}}", -1, &error);
  g_assert_null (bad);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_CONFLICT);
  g_assert_true (has_line_containing (error->message, "data_types.grad_accum_dtype: must be fp32",
                                      "mixprec.reduce_accumulation"));
  g_clear_error (&error);
  bad = mixprec_config_new_from_data ("{\"mixprec\": {\"reduce_accumulation\": \"bf16\"}}",
                                      -1, &error);
  g_assert_null (bad);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
  g_assert_true (has_line_containing (error->message, "mixprec.reduce_accumulation", "bf16"));
}

static void
test_config_overlap_default (void)
{
  /* DeepSpeed: overlap_comm defaults to true only for stage 3. */
  for (guint stage = 0; stage <= 3; stage++)
    {
      g_autofree gchar *json = g_strdup_printf ("{\"zero_optimization\": {\"stage\": %u}}", stage);
      g_autofree gchar *json_null = g_strdup_printf ("{\"zero_optimization\": {\"stage\": %u, \"overlap_comm\": null}}", stage);
      g_autofree gchar *json_off = g_strdup_printf ("{\"zero_optimization\": {\"stage\": %u, \"overlap_comm\": false}}", stage);
      g_autoptr(MixprecConfig) c = load (json);
      g_autoptr(MixprecConfig) n = load (json_null);
      g_autoptr(MixprecConfig) off = load (json_off);

      g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, stage);
      g_assert_cmpint (mixprec_config_get_overlap_comm (c), ==, stage == 3);
      g_assert_cmpint (mixprec_config_get_overlap_comm (n), ==, stage == 3);
      g_assert_false (mixprec_config_get_overlap_comm (off));
    }
}

/* DeepSpeed's runtime/zero/config.py reads each of these under its stage3_
 * key and under the same name without the prefix; 0 is allowed (ge=0). */
static void
test_config_stage3_sizes (void)
{
  static const struct {
    const gchar *json;
    guint64 prefetch, persistence, live;
  } cases[] = {
    { "{\"zero_optimization\": {\"stage\": 3, \"stage3_prefetch_bucket_size\": 15099494,"
      " \"stage3_param_persistence_threshold\": 40960, \"stage3_max_live_parameters\": 3e8}}",
      15099494, 40960, 300000000 },
    { "{\"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": 2e7,"
      " \"param_persistence_threshold\": 1024, \"max_live_parameters\": 123456789}}",
      20000000, 1024, 123456789 },
    /* One spelling of one setting each, the others at their defaults. */
    { "{\"zero_optimization\": {\"param_persistence_threshold\": 0,"
      " \"stage3_max_live_parameters\": 0}}",
      50000000, 0, 0 },
    { "{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": 0}}",
      0, 100000, 1000000000 },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);

      g_test_message ("%s", cases[i].json);
      g_assert_cmpuint (mixprec_config_get_prefetch_bucket_size (c), ==, cases[i].prefetch);
      g_assert_cmpuint (mixprec_config_get_param_persistence_threshold (c), ==, cases[i].persistence);
      g_assert_cmpuint (mixprec_config_get_max_live_parameters (c), ==, cases[i].live);
      /* Real settings now: read, not warned about. */
      g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 0);
    }
}

static void
test_config_scaler_semantics (void)
{
  static const struct {
    const gchar *json;
    MixprecScalerSemantics semantics;
    gint power;
    guint window, hysteresis;
    gdouble min_scale;
    gboolean raise;
  } cases[] = {
    /* DeepSpeed's loss_scaler.py defaults. */
    { "{\"fp16\": {\"enabled\": true}}",
      MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 16, 1000, 2, 1, TRUE },
    /* GradScaler: init 2^16, growth_interval 2000, no hysteresis, never raises. */
    { "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"scaler\": {\"semantics\": \"torch\"}}}",
      MIXPREC_SCALER_SEMANTICS_TORCH, 16, 2000, 1, 1, FALSE },
    /* Megatron: init 2^32, window 1000, hysteresis 2, min 1. */
    { "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"scaler\": {\"semantics\": \"megatron\"}}}",
      MIXPREC_SCALER_SEMANTICS_MEGATRON, 32, 1000, 2, 1, FALSE },
    /* Values written in the file win over the semantics' defaults. */
    { "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12, \"loss_scale_window\": 50, \"hysteresis\": 1},"
      " \"mixprec\": {\"scaler\": {\"semantics\": \"torch\", \"raise_at_min_scale\": true}}}",
      MIXPREC_SCALER_SEMANTICS_TORCH, 12, 50, 1, 1, TRUE },
    { "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 20, \"hysteresis\": 4, \"min_loss_scale\": 0.25},"
      " \"mixprec\": {\"scaler\": {\"semantics\": \"megatron\"}}}",
      MIXPREC_SCALER_SEMANTICS_MEGATRON, 20, 1000, 4, 0.25, FALSE },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);

      g_test_message ("%s", cases[i].json);
      g_assert_cmpint (mixprec_config_get_scaler_semantics (c), ==, cases[i].semantics);
      g_assert_cmpint (mixprec_config_get_initial_scale_power (c), ==, cases[i].power);
      g_assert_cmpuint (mixprec_config_get_loss_scale_window (c), ==, cases[i].window);
      g_assert_cmpuint (mixprec_config_get_hysteresis (c), ==, cases[i].hysteresis);
      g_assert_cmpfloat (mixprec_config_get_min_loss_scale (c), ==, cases[i].min_scale);
      g_assert_cmpint (mixprec_config_get_raise_at_min_scale (c), ==, cases[i].raise);
    }
}

/* ------------------------------------------------------------ fronts */

static void
test_config_fronts (void)
{
  static const struct {
    const gchar *json;
    MixprecPrecisionMode mode;
    MixprecDType low;
    MixprecScalerSemantics semantics;
    gdouble loss_scale;      /* 0: dynamic */
    gint power;
    guint window, hysteresis;
    gdouble min_scale, max_scale;
    gboolean batchnorm_fp32;
  } cases[] = {
    /* Apex's opt levels (apex/amp/frontend.py): O0 FP32; O1 patches
     * functions, parameters stay FP32; O2 FP16 model, FP32 masters and
     * batch norm; O3 FP16 everything, static scale 1. */
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O0\"}}",
      MIXPREC_PRECISION_MODE_FP32, MIXPREC_DTYPE_FLOAT32, MIXPREC_SCALER_SEMANTICS_DEEPSPEED,
      0, 16, 1000, 2, 1, 0, FALSE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O1\"}}",
      MIXPREC_PRECISION_MODE_AUTOCAST, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 16, 2000, 1, 0, 16777216, FALSE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\"}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 16, 2000, 1, 0, 16777216, TRUE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\", \"loss_scale\": 512,"
      " \"keep_batchnorm_fp32\": false}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_DEEPSPEED,
      512, 16, 1000, 2, 1, 0, FALSE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\", \"master_weights\": true}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_DEEPSPEED,
      1, 16, 1000, 2, 1, 0, FALSE },
    /* O3 is pure fp16: no master unless master_weights is true, a static
     * scale of 1 unless "dynamic"; keep_batchnorm_fp32 true is Apex's
     * documented O3 speed baseline and keeps batch norm FP32 as at O2. */
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\"}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_DTYPE_FLOAT16,
      MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 1, 16, 1000, 2, 1, 0, FALSE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\", \"keep_batchnorm_fp32\": true}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_DTYPE_FLOAT16,
      MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 1, 16, 1000, 2, 1, 0, TRUE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\", \"loss_scale\": \"dynamic\"}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 16, 2000, 1, 0, 16777216, FALSE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\", \"master_weights\": false}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 16, 2000, 1, 0, 16777216, TRUE },
    { "{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\", \"max_loss_scale\": 4096}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 12, 2000, 1, 0, 4096, TRUE },
    /* A disabled amp section changes nothing. */
    { "{\"amp\": {\"enabled\": false, \"opt_level\": \"O2\"}}",
      MIXPREC_PRECISION_MODE_FP32, MIXPREC_DTYPE_FLOAT32, MIXPREC_SCALER_SEMANTICS_DEEPSPEED,
      0, 16, 1000, 2, 1, 0, FALSE },
    /* Colossal-AI (colossalai/amp): torch = autocast + GradScaler, no
     * floor; apex = apex.amp, enabled by default; naive = FP16 with FP32
     * masters and its DynamicGradScaler (2^32, window 1000, hysteresis 2,
     * min 1). */
    { "{\"colossalai\": {\"fp16\": {\"mode\": \"torch\"}}}",
      MIXPREC_PRECISION_MODE_AUTOCAST, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_TORCH,
      0, 16, 2000, 1, 0, 0, FALSE },
    { "{\"colossalai\": {\"fp16\": {\"mode\": \"apex\", \"opt_level\": \"O2\"}}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 16, 2000, 1, 0, 16777216, TRUE },
    { "{\"colossalai\": {\"fp16\": {\"mode\": \"apex\", \"opt_level\": \"O2\","
      " \"master_weights\": false}}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_APEX,
      0, 16, 2000, 1, 0, 16777216, TRUE },
    { "{\"colossalai\": {\"fp16\": {\"mode\": \"apex\", \"opt_level\": \"O3\"}}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_DTYPE_FLOAT16,
      MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 1, 16, 1000, 2, 1, 0, FALSE },
    { "{\"colossalai\": {\"fp16\": {\"mode\": \"naive\"}}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_MEGATRON,
      0, 32, 1000, 2, 1, 0, FALSE },
    { "{\"colossalai\": {\"fp16\": {\"mode\": \"parallel\", \"max_scale\": 8589934592}}}",
      MIXPREC_PRECISION_MODE_FP16, MIXPREC_DTYPE_FLOAT16, MIXPREC_SCALER_SEMANTICS_MEGATRON,
      0, 32, 1000, 2, 1, 8589934592.0, FALSE },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);
      g_autoptr(MixprecConfig) again = NULL;
      g_autofree gchar *text = mixprec_config_to_data (c, NULL);
      g_autofree gchar *text_again = NULL;
      const gchar * const *fp32_modules =
        (const gchar * const *) mixprec_config_get_fp32_modules (c);

      g_test_message ("%s", cases[i].json);
      g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, cases[i].mode);
      g_assert_cmpint (mixprec_config_get_low_dtype (c), ==, cases[i].low);
      g_assert_cmpfloat (mixprec_config_get_loss_scale (c), ==, cases[i].loss_scale);
      if (cases[i].loss_scale == 0 && cases[i].mode != MIXPREC_PRECISION_MODE_FP32)
        {
          g_assert_cmpint (mixprec_config_get_scaler_semantics (c), ==, cases[i].semantics);
          g_assert_cmpint (mixprec_config_get_initial_scale_power (c), ==, cases[i].power);
          g_assert_cmpuint (mixprec_config_get_loss_scale_window (c), ==, cases[i].window);
          g_assert_cmpuint (mixprec_config_get_hysteresis (c), ==, cases[i].hysteresis);
          g_assert_cmpfloat (mixprec_config_get_min_loss_scale (c), ==, cases[i].min_scale);
          g_assert_cmpfloat (mixprec_config_get_max_scale (c), ==, cases[i].max_scale);
          g_assert_false (mixprec_config_get_raise_at_min_scale (c));
        }
      g_assert_cmpint (g_strv_contains (fp32_modules, "BatchNorm2d"), ==, cases[i].batchnorm_fp32);
      g_assert_cmpint (g_strv_contains (fp32_modules, "SyncBatchNorm"), ==, cases[i].batchnorm_fp32);
      g_assert_null (mixprec_config_get_warnings (c)[0]);

      /* The resolved configuration says it all in libmixprec's own keys. */
      again = load (text);
      text_again = mixprec_config_to_data (again, NULL);
      g_assert_cmpstr (text, ==, text_again);
    }
}

static void
test_config_fronts_colossal_training (void)
{
  g_autoptr(MixprecConfig) c =
    load ("{\"colossalai\": {\"fp16\": {\"mode\": \"naive\", \"clip_grad_norm\": 1.5,"
          " \"log_num_zeros_in_grad\": false}, \"gradient_accumulation\": 4,"
          " \"parallel\": {\"tensor\": {\"size\": 2}}}}");
  const gchar * const *warnings = (const gchar * const *) mixprec_config_get_warnings (c);

  g_assert_cmpfloat (mixprec_config_get_gradient_clipping (c), ==, 1.5);
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, 4);
  /* Colossal-AI's other settings are named, not silently dropped. */
  g_assert_nonnull (warnings);
  g_assert_true (g_str_has_prefix (warnings[0], "colossalai.parallel: "));
  g_assert_null (warnings[1]);
}

/* ------------------------------------------------------------ invalid */

typedef struct
{
  const gchar *json;
  const gchar *path;         /* the line must start with this path */
  const gchar *fragment;     /* and contain this */
  MixprecConfigError code;
} InvalidCase;

static const InvalidCase invalid_cases[] = {
  { "{\"fp16\": {\"loss_scale_window\": -3}}", "fp16.loss_scale_window", "must be a positive integer, got -3", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale_window\": 0}}", "fp16.loss_scale_window", "positive integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale_window\": 2.5}}", "fp16.loss_scale_window", "got 2.5", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale\": true}}", "fp16.loss_scale", "a number >= 0", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale\": -1}}", "fp16.loss_scale", "got -1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale\": \"128\"}}", "fp16.loss_scale", "got \"128\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale\": 1e39}}", "fp16.loss_scale", "3.4e38", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale\": 1e400}}", "fp16.loss_scale", "number out of range", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"enabled\": \"true\"}}", "fp16.enabled", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"enabled\": 1}}", "fp16.enabled", "got 1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"enabled\": null}}", "fp16.enabled", "got null", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"initial_scale_power\": 128}}", "fp16.initial_scale_power", "from 0 to 127", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"initial_scale_power\": -1}}", "fp16.initial_scale_power", "got -1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"hysteresis\": 0}}", "fp16.hysteresis", "positive integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"min_loss_scale\": 0}}", "fp16.min_loss_scale", "> 0", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"min_loss_scale\": 1024, \"initial_scale_power\": 8}}", "fp16.min_loss_scale", "initial scale 2^8 = 256", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": 1}", "fp16", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}", "bf16.enabled", "fp16.enabled is also true", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"enabled\": true}, \"torch_autocast\": {\"enabled\": true}}", "torch_autocast.enabled", "fp16.enabled", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bf16\": {\"enabled\": true}, \"torch_autocast\": {\"enabled\": true}}", "torch_autocast.enabled", "bf16.enabled", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bf16\": {}, \"bfloat16\": {}}", "bfloat16", "together with bf16", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bfloat16\": {\"enabled\": \"yes\"}}", "bfloat16.enabled", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"fp16\"}}", "data_types.grad_accum_dtype", "must be bf16 or fp32 in bf16 mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"bf16\"}}", "data_types.grad_accum_dtype", "must be fp16 or fp32 in fp16 mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"data_types\": {\"grad_accum_dtype\": \"bf16\"}}", "data_types.grad_accum_dtype", "must be fp32 in fp32 mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"data_types\": {\"grad_accum_dtype\": \"fp8\"}}", "data_types.grad_accum_dtype", "FP8", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"data_types\": {\"grad_accum_dtype\": \"int8\"}}", "data_types.grad_accum_dtype", "one of \"fp32\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"data_types\": {\"grad_accum_dtype\": 32}}", "data_types.grad_accum_dtype", "got 32", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"communication_data_type\": \"fp16\"}", "communication_data_type", "must be fp32 or bf16 in fp32 mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"enabled\": true}, \"communication_data_type\": \"bf16\"}", "communication_data_type", "must be fp16 or fp32 in fp16 mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"communication_data_type\": \"float8_e5m2\"}", "communication_data_type", "FP8", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"fp32\"}}", "torch_autocast.dtype", "plain fp32 training", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"e4m3\"}}", "torch_autocast.dtype", "FP8", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"torch_autocast\": {\"lower_precision_safe_modules\": \"Linear\"}}", "torch_autocast.lower_precision_safe_modules", "an array", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"torch_autocast\": {\"lower_precision_safe_modules\": [\"Linear\", 3]}}", "torch_autocast.lower_precision_safe_modules[1]", "non-empty string", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"torch_autocast\": {\"enabled\": true}, \"mixprec\": {\"fp32_modules\": [\"torch.nn.Linear\"]}}", "mixprec.fp32_modules[0]", "lower_precision_safe_modules", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"torch_autocast\": {\"enabled\": true}, \"mixprec\": {\"stochastic_rounding\": true}}", "mixprec.stochastic_rounding", "autocast mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"zero_optimization\": {\"stage\": 4}}", "zero_optimization.stage", "from 0 to 3, got 4", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage\": 2.5}}", "zero_optimization.stage", "got 2.5", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage\": \"2\"}}", "zero_optimization.stage", "got \"2\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage\": false}}", "zero_optimization.stage", "got false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"reduce_bucket_size\": -1}}", "zero_optimization.reduce_bucket_size", "non-negative number of elements, got -1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"allgather_bucket_size\": 1e30}}", "zero_optimization.allgather_bucket_size", "non-negative", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage3_prefetch_bucket_size\": -1}}", "zero_optimization.stage3_prefetch_bucket_size", "must be a non-negative number of elements, got -1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"param_persistence_threshold\": -100}}", "zero_optimization.param_persistence_threshold", "non-negative number of elements, got -100", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"max_live_parameters\": \"1e9\"}}", "zero_optimization.max_live_parameters", "non-negative number of elements, got \"1e9\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"zero_hpz_partition_size\": -1}}", "zero_optimization.zero_hpz_partition_size", "a non-negative number of ranks", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"zero_quantized_weights\": \"yes\"}}", "zero_optimization.zero_quantized_weights", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage3_max_live_parameters\": 2.5}}", "zero_optimization.stage3_max_live_parameters", "got 2.5", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage3_max_live_parameters\": \"auto\"}}", "zero_optimization.stage3_max_live_parameters", "--set zero_optimization.stage3_max_live_parameters=VALUE", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"allgather_bucket_size\": \"auto\"}}", "zero_optimization.allgather_bucket_size", "mixprec_config_loader_set_override", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"prefetch_bucket_size\": 1, \"stage3_prefetch_bucket_size\": 1}}", "zero_optimization.prefetch_bucket_size", "the same setting as zero_optimization.stage3_prefetch_bucket_size; give only one", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"zero_optimization\": {\"stage3_param_persistence_threshold\": 10, \"param_persistence_threshold\": 20}}", "zero_optimization.param_persistence_threshold", "the same setting as zero_optimization.stage3_param_persistence_threshold", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"zero_optimization\": {\"max_live_parameters\": 1e9, \"stage3_max_live_parameters\": 1e9}}", "zero_optimization.max_live_parameters", "the same setting as zero_optimization.stage3_max_live_parameters", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"zero_optimization\": []}", "zero_optimization", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"overlap_comm\": \"yes\"}}", "zero_optimization.overlap_comm", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"gradient_clipping\": -1}", "gradient_clipping", ">= 0", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"loss_scale_window\": \"auto\"}}", "fp16.loss_scale_window", "Hugging Face", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"gradient_accumulation_steps\": 0}", "gradient_accumulation_steps", "positive integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"train_batch_size\": 4294967296}", "train_batch_size", "positive integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"train_batch_size\": 99999999999999999999}", "train_batch_size", "integer out of range", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"train_micro_batch_size_per_gpu\": -2}", "train_micro_batch_size_per_gpu", "got -2", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"train_batch_size\": 30, \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2}", "train_batch_size", "multiple of", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"optimizer\": {\"params\": {\"lr\": 1}}}", "optimizer.type", "missing", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"optimizer\": {\"type\": \"\"}}", "optimizer.type", "non-empty string", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": []}}", "optimizer.params", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"momentum\": \"auto\"}}}", "optimizer.params.momentum", "--set optimizer.params.momentum=VALUE", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [\"auto\", 0.999]}}}", "optimizer.params.betas[0]", "\"auto\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"max_grad_norm\": 1.0}}}", "optimizer.params.max_grad_norm", "gradient_clipping", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"optimizer\": \"AdamW\"}", "optimizer", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\"}}}", "scheduler.params.total_num_steps", "--set scheduler.params.total_num_steps=VALUE", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"scheduler\": {\"type\": 7}}", "scheduler.type", "got 7", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"scaler\": {\"semantics\": \"amp\"}}}", "mixprec.scaler.semantics", "one of \"deepspeed\", \"torch\", \"megatron\", \"apex\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"scaler\": {\"growth_factor\": 1}}}", "mixprec.scaler.growth_factor", "> 1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"scaler\": {\"backoff_factor\": 1}}}", "mixprec.scaler.backoff_factor", "between 0 and 1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"scaler\": {\"backoff_factor\": 0}}}", "mixprec.scaler.backoff_factor", "got 0", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"scaler\": {\"max_scale\": 100}}}", "mixprec.scaler.max_scale", "initial scale 2^16 = 65536", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"loss_scale\": 1024}, \"mixprec\": {\"scaler\": {\"max_scale\": 100}}}", "mixprec.scaler.max_scale", "static", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"mixprec\": {\"scaler\": []}}", "mixprec.scaler", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"stochastic_rounding\": true}}", "mixprec.stochastic_rounding", "must be false in fp32 mode", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"mixprec\": {\"comm\": \"mpi\"}}", "mixprec.comm", "one of \"auto\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"comm\": \"nccl\"}}", "mixprec.comm", "device \"cpu\"", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"mixprec\": {\"timeout\": 0}}", "mixprec.timeout", "seconds from 0.001", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"timeout\": \"10s\"}}", "mixprec.timeout", "seconds from 0.001", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"device\": \"tpu\"}}", "mixprec.device", "\"cuda\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"fp32_modules\": \"LayerNorm\"}}", "mixprec.fp32_modules", "an array", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"fp32_params\": [\"\"]}}", "mixprec.fp32_params[0]", "non-empty string", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"seed\": -1}}", "mixprec.seed", "from 0", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"weight_decay_exempt\": \"bias\"}}", "mixprec.weight_decay_exempt", "one of \"1d\", \"none\", \"names\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"precision_mode\": \"bf16\"}}", "mixprec.precision_mode", "select \"fp32\"", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"mixprec\": {\"precision_mode\": \"fp8\"}}", "mixprec.precision_mode", "\"bf16_no_master\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"master_weights\": \"fp64\"}}", "mixprec.master_weights", "one of \"fp32\", \"remainder\", \"kahan\", \"none\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"master_weights\": \"remainder\"}}", "mixprec.master_weights", "needs bfloat16 working copies", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"mixprec\": {\"master_weights\": \"kahan\"}}", "mixprec.master_weights", "got precision mode \"fp32\"", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}, \"mixprec\": {\"master_weights\": \"remainder\"}}", "mixprec.master_weights", "bf16_master_weights_and_grads", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}, \"mixprec\": {\"master_weights\": \"fp32\"}}", "mixprec.master_weights", "asks for none", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"master_weights\": \"kahan\", \"stochastic_rounding\": true}}", "mixprec.master_weights", "stochastic_rounding must be false", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"device\": \"cuda\", \"master_weights\": \"remainder\"}, \"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}", "mixprec.master_weights", "offload_optimizer \"cpu\"", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"mixprec\": {\"optimizer_states\": \"int2\"}}", "mixprec.optimizer_states", "\"int8\", \"int4\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"optimizer_states\": 8}}", "mixprec.optimizer_states", "got 8", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"optimizer_states\": {\"exp_avg\": \"int3\"}}}", "mixprec.optimizer_states.exp_avg", "one of \"fp32\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"optimizer_states\": {\"momentum\": \"int8\"}}}", "mixprec.optimizer_states.momentum", "its slots are exp_avg, exp_avg_sq", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"optimizer_states\": {\"exp_avg\": \"int8\", \"block_size\": 48}}}", "mixprec.optimizer_states.block_size", "power of two", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"optimizer_states\": {\"exp_avg\": \"int8\", \"block_size\": 16}}}", "mixprec.optimizer_states.block_size", "from 32 to 4096", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"mixprec\": {\"optimizer_states\": {\"exp_avg\": \"int4\", \"block_size\": 8192}}}", "mixprec.optimizer_states.block_size", "from 32 to 4096", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}, \"mixprec\": {\"optimizer_states\": {\"exp_avg\": \"int8\"}}}", "mixprec.optimizer_states", "conflicts with bf16.bf16_optimizer_states", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"hysteresis\": 2}, \"mixprec\": {\"scaler\": {\"semantics\": \"torch\"}}}", "fp16.hysteresis", "must be 1", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"consecutive_hysteresis\": true}, \"mixprec\": {\"scaler\": {\"semantics\": \"megatron\"}}}", "fp16.consecutive_hysteresis", "megatron", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"amp\": {\"enabled\": true, \"keep_batchnorm_fp32\": true}}", "amp.keep_batchnorm_fp32", "null with opt_level \"O1\"", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"amp\": {\"enabled\": true, \"master_weights\": true}}", "amp.master_weights", "null with opt_level \"O1\"", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"amp\": {\"enabled\": true}, \"fp16\": {\"enabled\": true}}", "amp", "fp16.enabled", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"amp\": {\"enabled\": true}, \"mixprec\": {\"scaler\": {\"semantics\": \"torch\"}}}", "mixprec.scaler.semantics", "selects its own scaler", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"amp\": {\"opt_level\": \"O4\"}}", "amp.opt_level", "one of \"O0\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"amp\": {\"enabled\": true, \"loss_scale\": \"auto\"}}", "amp.loss_scale", "\"dynamic\" or a number", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"amp\": {\"enabled\": true, \"max_loss_scale\": 1000}}", "amp.max_loss_scale", "power of two", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"amp\": {\"enabled\": true, \"opt_levl\": \"O2\"}}", "amp.opt_levl", "did you mean opt_level?", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"amp\": {\"enabled\": true}, \"colossalai\": {\"fp16\": {\"mode\": \"torch\"}}}", "colossalai.fp16", "amp section", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"colossalai\": {\"fp16\": {\"mode\": \"fp8\"}}}", "colossalai.fp16.mode", "one of \"torch\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"colossalai\": {\"fp16\": {}}}", "colossalai.fp16.mode", "missing", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"colossalai\": {\"fp16\": {\"mode\": \"torch\", \"init_scale\": 1000}}}", "colossalai.fp16.init_scale", "power of two", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"colossalai\": {\"fp16\": {\"mode\": \"naive\", \"growth_intervl\": 10}}}", "colossalai.fp16.growth_intervl", "did you mean growth_interval?", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"colossalai\": {\"fp16\": {\"mode\": \"naive\", \"clip_grad_norm\": 2}}, \"gradient_clipping\": 1}", "colossalai.fp16.clip_grad_norm", "gradient_clipping says 1", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"colossalai\": {\"fp16\": {\"mode\": \"torch\"}}, \"bf16\": {\"enabled\": true}}", "colossalai.fp16", "bf16.enabled", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp16\": {\"enabled\": true, \"enabled\": false}}", "fp16.enabled", "written twice", MIXPREC_CONFIG_ERROR_DUPLICATE_KEY },
  { "{\"fp16\": {}, \"fp16\": {}}", "fp16", "lines 1 and 1", MIXPREC_CONFIG_ERROR_DUPLICATE_KEY },
  { "{\"a b\": 1, \"mixprec\": {\"strict\": true}}", "[\"a b\"]", "unknown key", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"fp16\": {\"line\\nbreak\": 1}}", "fp16[\"line\\u000Abreak\"]", "unknown key", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"fp16\": {\"loss_scale_windw\": 10}}", "fp16.loss_scale_windw", "did you mean loss_scale_window?", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/local_nvme\"}}}", "zero_optimization.offload_optimizer.device", "ZeRO-Infinity", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"gpu\"}}}", "zero_optimization.offload_optimizer.device", "one of \"none\", \"cpu\", \"nvme\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": \"yes\"}}}", "zero_optimization.offload_optimizer.pin_memory", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"offload_optimizer\": \"cpu\"}}", "zero_optimization.offload_optimizer", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memroy\": true}}}", "zero_optimization.offload_optimizer.pin_memroy", "did you mean pin_memory?", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"zero_optimization\": {\"cpu_offload\": true, \"offload_optimizer\": {\"device\": \"cpu\"}}}", "zero_optimization.cpu_offload", "give only one", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"zero_optimization\": {\"cpu_offload\": 1}}", "zero_optimization.cpu_offload", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/local_nvme\"}}}", "zero_optimization.offload_param.device", "ZeRO-Infinity", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"zero_optimization\": {\"offload_param\": {\"device\": \"gpu\"}}}", "zero_optimization.offload_param.device", "one of \"none\", \"cpu\", \"nvme\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"offload_param\": \"cpu\"}}", "zero_optimization.offload_param", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"offload_param\": {\"device\": \"cpu\", \"pin_memory\": 1}}}", "zero_optimization.offload_param.pin_memory", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"cpu_offload_param\": true, \"offload_param\": {\"device\": \"cpu\"}}}", "zero_optimization.cpu_offload_param", "give only one", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"mixprec\": {\"device\": \"cuda\"}, \"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"cpu\"}}}", "zero_optimization.offload_param", "needs zero_optimization.offload_optimizer", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  /* ZeRO++ LoCo */
  { "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true, \"zeropp_loco_param\": {\"err_beta\": 1.5}}}", "zero_optimization.zeropp_loco_param.err_beta", "a number from 0 to 1", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true, \"zeropp_loco_param\": {\"reset_T\": 0}}}", "zero_optimization.zeropp_loco_param.reset_T", "a positive number of optimizer steps", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true, \"zeropp_loco_param\": {\"err_bta\": 0.5}}}", "zero_optimization.zeropp_loco_param.err_bta", "did you mean err_beta?", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true, \"zeropp_loco_param\": 0.8}}", "zero_optimization.zeropp_loco_param", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": 1}}", "zero_optimization.zero_quantized_gradients", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "[]", "(top level)", "must be a JSON object", MIXPREC_CONFIG_ERROR_PARSE },
  { "{\"fp16\": {\"enabled\": tru}}", "fp16.enabled", "line 1, column 22", MIXPREC_CONFIG_ERROR_PARSE },
  /* fp8 */
  { "{\"fp8\": 1}", "fp8", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"enabled\": \"yes\"}}", "fp8.enabled", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"recipe\": \"tensorwise\"}}", "fp8.recipe", "one of \"delayed\", \"current\", \"mx\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"format\": \"e5m2\"}}", "fp8.format", "one of \"hybrid\", \"e4m3\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"amax_history_len\": 0}}", "fp8.amax_history_len", "from 1 to 65536, got 0", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"amax_history_len\": 65537}}", "fp8.amax_history_len", "got 65537", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"amax_history_len\": 16.5}}", "fp8.amax_history_len", "got 16.5", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"amax_history_len\": \"auto\"}}", "fp8.amax_history_len", "\"auto\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"amax_compute_algo\": \"mean\"}}", "fp8.amax_compute_algo", "one of \"max\", \"most_recent\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"margin\": 65}}", "fp8.margin", "from -64 to 64 (a power-of-two headroom), got 65", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"margin\": -100}}", "fp8.margin", "got -100", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"mx_block_size\": 16}}", "fp8.mx_block_size", "32 (the block size", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"saturate\": 0}}", "fp8.saturate", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"modules\": \"Linear\"}}", "fp8.modules", "an array of module type names", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"modules\": [\"Linear\", \"\"]}}", "fp8.modules[1]", "a non-empty string", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"amax_histroy_len\": 16}}", "fp8.amax_histroy_len", "did you mean amax_history_len?", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"fp8\": {\"fp8_format\": \"hybrid\"}}", "fp8.fp8_format", "unknown key in fp8", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"fp8\": {\"enabled\": true, \"modules\": [\"Linear\"]}, \"mixprec\": {\"fp32_modules\": [\"torch.nn.Linear\"]}}", "fp8.modules[0]", "also listed in mixprec.fp32_modules", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp8\": {\"enabled\": true, \"recipe\": \"mx\", \"margin\": 2}, \"mixprec\": {\"strict\": true}}", "fp8.margin", "applies to the \"delayed\" and \"current\" recipes only", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  /* fp4 */
  { "{\"fp8\": {\"mx_scale_mode\": \"up\"}}", "fp8.mx_scale_mode", "one of \"floor\", \"rceil\", \"ceil\", \"even\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp8\": {\"enabled\": true, \"mx_scale_mode\": \"rceil\"}, \"mixprec\": {\"strict\": true}}", "fp8.mx_scale_mode", "applies to the \"mx\" recipe only", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"fp4\": []}", "fp4", "a JSON object", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"recipe\": \"fp4\"}}", "fp4.recipe", "one of \"nvfp4\", \"mxfp4\", got \"fp4\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"scale_mode\": \"round\"}}", "fp4.scale_mode", "one of \"floor\", \"rceil\", \"ceil\", \"even\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"weights_2d\": 1}}", "fp4.weights_2d", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"rht\": \"on\"}}", "fp4.rht", "true or false", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"rht_seed\": -1}}", "fp4.rht_seed", "a non-negative integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"modules\": [1]}}", "fp4.modules[0]", "a non-empty string", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"exclude_params\": \"out.*\"}}", "fp4.exclude_params", "an array of parameter name patterns", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  { "{\"fp4\": {\"scale\": \"floor\"}}", "fp4.scale", "unknown key in fp4", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  { "{\"fp4\": {\"enabled\": true}, \"mixprec\": {\"fp32_modules\": [\"Linear\"]}}", "fp4.modules[0]", "also listed in mixprec.fp32_modules", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp4\": {\"enabled\": true}, \"fp8\": {\"enabled\": true}}", "fp4.modules[0]", "also listed in fp8.modules", MIXPREC_CONFIG_ERROR_CONFLICT },
  { "{\"fp4\": {\"enabled\": true, \"scale_mode\": \"ceil\"}, \"mixprec\": {\"strict\": true}}", "fp4.scale_mode", "applies to the \"mxfp4\" recipe only", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
  { "{\"fp4\": {\"recipe\": \"mxfp4\", \"weights_2d\": false}, \"mixprec\": {\"strict\": true}}", "fp4.weights_2d", "applies to the \"nvfp4\" recipe only", MIXPREC_CONFIG_ERROR_UNSUPPORTED },
};

static void
test_config_invalid_table (void)
{
  g_assert_cmpuint (G_N_ELEMENTS (invalid_cases), >=, 40);
  for (gsize i = 0; i < G_N_ELEMENTS (invalid_cases); i++)
    {
      const InvalidCase *t = &invalid_cases[i];
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (t->json, -1, &error);
      g_autofree gchar *prefix = g_strconcat (t->path, ": ", NULL);

      g_test_message ("%s -> %s", t->json, error != NULL ? error->message : "(loaded)");
      g_assert_null (c);
      assert_well_formed (error);
      g_assert_true (g_str_has_prefix (error->message, prefix)
                     || has_line_containing (error->message, prefix, NULL));
      g_assert_true (has_line_containing (error->message, prefix, t->fragment));
      g_assert_error (error, MIXPREC_CONFIG_ERROR, (gint) t->code);
    }
}

static void
test_config_all_errors_listed (void)
{
  const gchar *json =
    "{\n"
    "  \"fp16\": {\"enabled\": true, \"loss_scale_window\": -3, \"hysteresis\": \"2\"},\n"
    "  \"zero_optimization\": {\"stage\": 7, \"stag\": 2},\n"
    "  \"gradient_clipping\": -0.5,\n"
    "  \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": [\"auto\"]}},\n"
    "  \"mixprec\": {\"device\": \"gpu\"},\n"
    "  \"zero_optimisation\": {}\n"
    "}\n";
  static const gchar *const expected[][2] = {
    { "fp16.loss_scale_window: ", "got -3" },
    { "fp16.hysteresis: ", "got \"2\"" },
    { "zero_optimization.stage: ", "got 7" },
    { "zero_optimization.stag: ", "did you mean stage?" },
    { "gradient_clipping: ", "got -0.5" },
    { "optimizer.params.lr[0]: ", "\"auto\"" },
    { "mixprec.device: ", "got \"gpu\"" },
    { "zero_optimisation: ", "did you mean zero_optimization?" },
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (json, -1, &error);
  g_autofree gchar *path = NULL;
  g_autoptr(GError) file_error = NULL;
  g_autoptr(MixprecConfig) from_file = NULL;
  gint fd;

  g_assert_null (c);
  assert_well_formed (error);
  g_assert_cmpuint (count_lines (error->message), ==, G_N_ELEMENTS (expected));
  for (gsize i = 0; i < G_N_ELEMENTS (expected); i++)
    g_assert_true (has_line_containing (error->message, expected[i][0], expected[i][1]));

  /* From a file, every line also names the file. */
  fd = g_file_open_tmp ("mixprec-config-XXXXXX.json", &path, NULL);
  g_assert_cmpint (fd, >=, 0);
  g_assert_true (g_file_set_contents (path, json, -1, NULL));
  g_close (fd, NULL);
  from_file = mixprec_config_new_from_file (path, &file_error);
  g_assert_null (from_file);
  assert_well_formed (file_error);
  g_assert_cmpuint (count_lines (file_error->message), ==, G_N_ELEMENTS (expected));
  {
    g_auto(GStrv) lines = g_strsplit (file_error->message, "\n", -1);
    g_autofree gchar *prefix = g_strconcat (path, ": ", NULL);

    for (guint i = 0; lines[i] != NULL; i++)
      g_assert_true (g_str_has_prefix (lines[i], prefix));
  }
  g_unlink (path);
}

static void
test_config_suggestions (void)
{
  static const gchar *const cases[][3] = {
    { "{\"fp16\": {\"loss_scale_windw\": 10}}", "fp16.loss_scale_windw", "loss_scale_window" },
    { "{\"fp16\": {\"enabeld\": true}}", "fp16.enabeld", "enabled" },
    { "{\"fp16\": {\"intial_scale_power\": 8}}", "fp16.intial_scale_power", "initial_scale_power" },
    { "{\"fp16\": {\"Hysteresis\": 2}}", "fp16.Hysteresis", "hysteresis" },
    { "{\"bf16\": {\"check_grad_overflw\": true}}", "bf16.check_grad_overflw", "check_grad_overflow" },
    { "{\"zero_optimization\": {\"stag\": 2}}", "zero_optimization.stag", "stage" },
    { "{\"zero_optimization\": {\"stage3_max_live_paramters\": 1}}", "zero_optimization.stage3_max_live_paramters", "stage3_max_live_parameters" },
    { "{\"zero_optimization\": {\"overlap_com\": true}}", "zero_optimization.overlap_com", "overlap_comm" },
    { "{\"torch_autocast\": {\"lower_precision_safe_module\": []}}", "torch_autocast.lower_precision_safe_module", "lower_precision_safe_modules" },
    { "{\"data_types\": {\"grad_acum_dtype\": \"fp32\"}}", "data_types.grad_acum_dtype", "grad_accum_dtype" },
    { "{\"mixprec\": {\"fp32_module\": []}}", "mixprec.fp32_module", "fp32_modules" },
    { "{\"mixprec\": {\"scaler\": {\"semantic\": \"torch\"}}}", "mixprec.scaler.semantic", "semantics" },
    { "{\"optimizer\": {\"typ\": \"AdamW\"}}", "optimizer.typ", "type" },
    { "{\"zero_optimisation\": {}}", "zero_optimisation", "zero_optimization" },
    { "{\"gradient_cliping\": 1.0}", "gradient_cliping", "gradient_clipping" },
    { "{\"fp_16\": {}}", "fp_16", "fp16" },
    { "{\"flops_profilr\": {}}", "flops_profilr", "flops_profiler" },
    { "{\"train_batch_sizes\": 8}", "train_batch_sizes", "train_batch_size" },
    { "{\"mixpec\": {}}", "mixpec", "mixprec" },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (cases[i][0], -1, &error);
      g_autofree gchar *prefix = g_strconcat (cases[i][1], ": ", NULL);
      g_autofree gchar *hint = g_strdup_printf ("did you mean %s?", cases[i][2]);

      g_test_message ("%s", cases[i][0]);
      g_assert_null (c);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY);
      g_assert_true (has_line_containing (error->message, prefix, hint));
    }

  /* Nothing close: no guess, but the section's keys are listed. */
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(MixprecConfig) c = mixprec_config_new_from_data ("{\"fp16\": {\"xyzzy\": 1}, \"frobnicate\": 2, \"mixprec\": {\"strict\": true}}", -1, &error);

    g_assert_null (c);
    g_assert_null (strstr (error->message, "did you mean"));
    g_assert_true (has_line_containing (error->message, "fp16.xyzzy: ", "loss_scale_window"));
    g_assert_true (has_line_containing (error->message, "frobnicate: ", "\"mixprec\" section"));
  }
}

/* ------------------------------------------------------------ malformed */

static void
expect_parse_failure (const gchar *data,
                      gsize        length,
                      const gchar *fragment)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (data, (gssize) length, &error);

  g_assert_null (c);
  assert_well_formed (error);
  if (fragment != NULL && strstr (error->message, fragment) == NULL)
    g_error ("expected \"%s\" in: %s", fragment, error->message);
}

static gchar *
nested (guint        depth,
        const gchar *open,
        const gchar *close)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < depth; i++)
    g_string_append (s, open);
  for (guint i = 0; i < depth; i++)
    g_string_append (s, close);
  return g_string_free (s, FALSE);
}

static void
test_config_malformed (void)
{
  static const struct { const gchar *data; const gchar *fragment; } cases[] = {
    { "", "empty" },
    { "   \n\t  ", "empty" },
    { "{", "line 1, column 2" },
    { "{\"fp16\": {\"enabled\": true}", "expected ',' or '}'" },
    { "{\"fp16\": ", "expected a value" },
    { "{\"fp16\": {\"enabled\": NaN}}", "fp16.enabled: invalid JSON" },
    { "{\"fp16\": {\"loss_scale\": Infinity}}", "fp16.loss_scale: invalid JSON" },
    { "{\"fp16\": {\"loss_scale\": -Infinity}}", "expected a digit" },
    { "{\"fp16\": {\"loss_scale\": -1e400}}", "number out of range" },
    { "{\"fp16\": {\"loss_scale\": 1e999999999999}}", "number out of range" },
    { "{\"seed\": 18446744073709551616}", "integer out of range" },
    { "{\"fp16\": {\"loss_scale\": 0x10}}", "expected ',' or '}'" },
    { "{\"fp16\": {\"loss_scale\": 010}}", "leading zeros" },
    { "{\"fp16\": {\"loss_scale\": .5}}", "expected a value" },
    { "{\"fp16\": {\"loss_scale\": 1.}}", "after the decimal point" },
    { "{\"fp16\": {\"loss_scale\": 1e}}", "exponent" },
    { "{'fp16': {}}", "member name" },
    { "{\"fp16\": {},}", "member name" },
    { "{\"a\": [1, 2,]}", "expected a value" },
    { "// comment\n{}", "no comments" },
    { "{} /* trailing */", "end of the document" },
    { "{}{}", "end of the document" },
    { "[1, 2, 3]", "must be a JSON object" },
    { "\"fp16\"", "must be a JSON object" },
    { "42", "must be a JSON object" },
    { "null", "must be a JSON object" },
    { "true", "must be a JSON object" },
    { "{\"a\": \"\\ud800\"}", "surrogate" },
    { "{\"a\": \"\\udc00\"}", "surrogate" },
    { "{\"a\": \"\\ud800\\u0041\"}", "surrogate" },
    { "{\"a\": \"\\u0000\"}", "U+0000" },
    { "{\"a\": \"\\x41\"}", "expected one of" },
    { "{\"a\": \"\\u12G4\"}", "hexadecimal" },
    { "{\"a\": \"tab\there\"}", "control characters" },
    { "{\"a\": \"unterminated", "closing" },
    { "{\"fp16\": {\"enabled\": tRUE}}", "expected a value" },
    { "{\"fp16\" {}}", "expected ':'" },
    { "\xEF\xBB\xBF", "empty" },
  };
  /* Bytes that are not UTF-8: a lone continuation byte, an overlong
   * encoding, a surrogate encoded in UTF-8, a truncated sequence, Latin-1. */
  static const gchar *const non_utf8[] = {
    "{\"a\": \"\x80\"}", "{\"a\": \"\xC0\xAF\"}", "{\"a\": \"\xED\xA0\x80\"}",
    "{\"a\": \"\xE2\x82\"}", "{\"caf\xE9\": 1}", "\xFF\xFE{\0}\0",
  };
  static const guchar garbage[] = { 0x7f, 0x45, 0x4c, 0x46, 0x02, 0x01, 0x01, 0x00, 0x00, 0xff, 0xd8 };
  const gchar with_nul[] = "{\"fp16\": {}\0}";

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_test_message ("%s", cases[i].data);
      expect_parse_failure (cases[i].data, strlen (cases[i].data), cases[i].fragment);
    }
  for (gsize i = 0; i < G_N_ELEMENTS (non_utf8); i++)
    expect_parse_failure (non_utf8[i], strlen (non_utf8[i]) + (i == 5 ? 3 : 0), "UTF-8");
  expect_parse_failure ((const gchar *) garbage, sizeof garbage, NULL);
  expect_parse_failure (with_nul, sizeof with_nul - 1, "NUL byte");

  /* The line and column of a syntax error count lines and characters. */
  {
    const gchar *doc = "{\n  \"fp16\": {\n    \"enabled\": yes\n  }\n}";

    expect_parse_failure (doc, strlen (doc), "fp16.enabled: invalid JSON at line 3, column 16");
  }
  expect_parse_failure ("{\"é\": [1, 2, x]}", strlen ("{\"é\": [1, 2, x]}"),
                        "[\"é\"][2]: invalid JSON at line 1, column 14");

  /* A byte-order mark in front of a valid document is accepted. */
  {
    g_autoptr(MixprecConfig) c = load ("\xEF\xBB\xBF{\"fp16\": {\"enabled\": true}}");

    g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP16);
  }
}

static void
test_config_deep_nesting (void)
{
  /* json-glib recurses once per level: these must be refused before it
   * sees them, without exhausting the stack. */
  g_autofree gchar *arrays = nested (100000, "[", "]");
  g_autofree gchar *objects = nested (100000, "{\"a\":", "}");
  g_autofree gchar *open_only = nested (100000, "[", "");
  g_autofree gchar *in_params = NULL;
  g_autofree gchar *shallow_body = nested (60, "[", "]");
  g_autofree gchar *shallow = NULL;

  expect_parse_failure (arrays, strlen (arrays), "nesting deeper than 64 levels");
  expect_parse_failure (objects, strlen (objects), "nesting deeper than 64 levels");
  expect_parse_failure (open_only, strlen (open_only), "nesting deeper than 64 levels");
  /* The path of the refusal points into the document. */
  {
    g_autofree gchar *deep = nested (70, "[", "]");

    in_params = g_strdup_printf ("{\"optimizer\": {\"type\": \"X\", \"params\": {\"p\": %s}}}", deep);
    expect_parse_failure (in_params, strlen (in_params), "optimizer.params.p[0][0]");
  }

  /* Moderate nesting inside optimizer params passes the scanner; the
   * optimizer check then refuses the document for what it says, not for
   * its depth. */
  shallow = g_strdup_printf ("{\"optimizer\": {\"type\": \"X\", \"params\": {\"p\": %s}}}", shallow_body);
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (shallow, -1, &error);

    g_assert_null (c);
    g_assert_true (g_str_has_prefix (error->message, "optimizer.type: no optimizer 'x'"));
    g_assert_null (strstr (error->message, "nesting"));
  }
}

/* Random mutations of a valid document: every outcome is a config or a
 * well-formed error, never a crash, a hang or a stray g_warning. */
static void
test_config_fuzz (void)
{
  const gchar *seed_doc =
    "{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4,"
    " \"fp16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 16},"
    " \"zero_optimization\": {\"stage\": 2, \"reduce_bucket_size\": 5e8},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"betas\": [0.9, 0.999]}},"
    " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"], \"scaler\": {\"semantics\": \"torch\"}}}";
  static const gchar interesting[] = "{}[]\",:0123456789.eE+-\\ntfu\xC3\xFF\x00 ";
  g_autoptr(GRand) rand = g_rand_new_with_seed (20240611);
  gsize n = strlen (seed_doc);
  guint loaded = 0, refused = 0;

  for (guint iteration = 0; iteration < 3000; iteration++)
    {
      g_autofree gchar *doc = g_memdup2 (seed_doc, n + 1);
      guint edits = g_rand_int_range (rand, 1, 4);
      gsize length = n;
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = NULL;

      for (guint e = 0; e < edits && length > 0; e++)
        {
          gsize at = g_rand_int_range (rand, 0, (gint32) length);

          switch (g_rand_int_range (rand, 0, 3))
            {
            case 0:
              doc[at] = interesting[g_rand_int_range (rand, 0, sizeof interesting - 1)];
              break;
            case 1:
              doc[at] = (gchar) g_rand_int_range (rand, 0, 256);
              break;
            default:
              length = at;
              break;
            }
        }
      c = mixprec_config_new_from_data (doc, (gssize) length, &error);
      if (c != NULL)
        {
          g_autofree gchar *text = mixprec_config_to_data (c, NULL);

          g_assert_no_error (error);
          g_assert_nonnull (text);
          loaded++;
        }
      else
        {
          assert_well_formed (error);
          refused++;
        }
    }
  g_test_message ("fuzz: %u loaded, %u refused", loaded, refused);
  g_assert_cmpuint (refused, >, 0);
}

static void
test_config_file_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-config-XXXXXX", NULL);
  g_autofree gchar *big = g_build_filename (dir, "big.json", NULL);
  g_autofree gchar *empty = g_build_filename (dir, "empty.json", NULL);
  g_autofree gchar *missing = g_build_filename (dir, "missing.json", NULL);
  g_autofree gchar *padding = NULL;
  gsize big_size = 17 * 1024 * 1024;

  c = mixprec_config_new_from_file (missing, &error);
  g_assert_null (c);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO);
  g_assert_nonnull (strstr (error->message, "missing.json"));
  g_clear_error (&error);

  c = mixprec_config_new_from_file (dir, &error);
  g_assert_null (c);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO);
  g_clear_error (&error);

  g_assert_true (g_file_set_contents (empty, "", 0, NULL));
  c = mixprec_config_new_from_file (empty, &error);
  g_assert_null (c);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_PARSE);
  g_assert_true (g_str_has_prefix (error->message, empty));
  g_clear_error (&error);

  /* Larger than any configuration: refused without reading it all. */
  padding = g_malloc (big_size);
  memset (padding, ' ', big_size);
  padding[0] = '{';
  padding[big_size - 1] = '}';
  g_assert_true (g_file_set_contents (big, padding, big_size, NULL));
  c = mixprec_config_new_from_file (big, &error);
  g_assert_null (c);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO);
  g_assert_nonnull (strstr (error->message, "MiB"));
  g_clear_error (&error);

  /* An endless device must not hang the reader. */
  if (g_file_test ("/dev/zero", G_FILE_TEST_EXISTS))
    {
      c = mixprec_config_new_from_file ("/dev/zero", &error);
      g_assert_null (c);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_IO);
      g_clear_error (&error);
    }

  g_unlink (big);
  g_unlink (empty);
  g_rmdir (dir);
}

/* ------------------------------------------------------------ warnings */

static gboolean
warned (MixprecConfig *c,
        const gchar   *prefix)
{
  GStrv warnings = mixprec_config_get_warnings (c);

  for (guint i = 0; warnings[i] != NULL; i++)
    if (g_str_has_prefix (warnings[i], prefix))
      return TRUE;
  return FALSE;
}

/* zero_optimization.offload_optimizer: "cpu" moves the masters and the
 * optimizer state of an engine on a device to host memory; on the cpu
 * device they are there already, which a warning says rather than
 * claiming an offload. "none" and DeepSpeed's defaults ask for nothing. */
static void
test_config_offload_optimizer (void)
{
  static const gchar *const on_cpu[] = {
    "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}}",
    "{\"zero_optimization\": {\"cpu_offload\": true, \"cpu_offload_use_pin_memory\": true}}",
  };
  static const gchar *const quiet[] = {
    "{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"none\", \"pin_memory\": false}}}",
    "{\"zero_optimization\": {\"offload_optimizer\": null, \"cpu_offload\": false}}",
    ("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"none\", \"nvme_path\": null,"
     " \"buffer_count\": 4, \"pipeline_read\": false, \"pipeline_write\": false, \"fast_init\": false}}}"),
  };
  const gchar *device_json =
    "{\"mixprec\": {\"device\": \"cuda\"}, \"bf16\": {\"enabled\": true},"
    " \"zero_optimization\": {\"stage\": 0, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}}";
  g_autoptr(MixprecConfig) dev = NULL;
  g_autoptr(MixprecConfig) ratio = NULL;
  g_autofree gchar *text = NULL;

  for (gsize i = 0; i < G_N_ELEMENTS (on_cpu); i++)
    {
      g_autoptr(MixprecConfig) c = load (on_cpu[i]);
      const gchar *path = i == 0 ? "zero_optimization.offload_optimizer: " : "zero_optimization.cpu_offload: ";
      const gchar * const *w = (const gchar * const *) mixprec_config_get_warnings (c);
      g_autofree gchar *data = mixprec_config_to_data (c, NULL);

      g_assert_cmpuint (g_strv_length ((gchar **) w), ==, 1);
      g_assert_true (g_str_has_prefix (w[0], path));
      g_assert_nonnull (strstr (w[0], "nothing to offload"));
      /* In effect: nothing moves. */
      g_assert_true (g_regex_match_simple ("\"offload_optimizer\" *: *\\{\\s*\"device\" *: *\"none\"",
                                           data, 0, 0));
    }
  for (gsize i = 0; i < G_N_ELEMENTS (quiet); i++)
    {
      g_autoptr(MixprecConfig) c = load (quiet[i]);

      g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 0);
    }

  /* On a device: offloaded, the optimizer checked against the cpu one's
   * schema, and pin_memory kept: whether the device has pinned memory is
   * the engine's to find out (tests/test-engine-device.c). */
  dev = load (device_json);
  g_assert_false (warned (dev, "zero_optimization.offload_optimizer: "));
  g_assert_false (warned (dev, "zero_optimization.offload_optimizer.pin_memory: "));
  text = mixprec_config_to_data (dev, NULL);
  g_assert_true (g_regex_match_simple ("\"offload_optimizer\" *: *\\{\\s*\"device\" *: *\"cpu\",\\s*"
                                       "\"pin_memory\" *: *true", text, 0, 0));

  ratio = load ("{\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0.3}}}");
  g_assert_true (warned (ratio, "zero_optimization.offload_optimizer.ratio: "));
}

/* zero_optimization.offload_param: "cpu" keeps ZeRO-3's partitions of the
 * working copies in host memory on a device, beside an offloaded
 * optimizer (which the loader requires: refused above without it). On the
 * cpu device, or below ZeRO-3 (DeepSpeed's rule), a warning says that
 * nothing moves, and the resolved config shows "none". */
static void
test_config_offload_param (void)
{
  static const struct {
    const gchar *json;
    const gchar *warning;      /* NULL: none about offload_param */
    const gchar *in_effect;
  } cases[] = {
    { "{\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"},"
      " \"offload_param\": {\"device\": \"cpu\"}}}", "nothing to offload", "none" },
    { "{\"zero_optimization\": {\"stage\": 3, \"cpu_offload_param\": true}}", "nothing to offload", "none" },
    { "{\"mixprec\": {\"device\": \"cuda\"}, \"zero_optimization\": {\"stage\": 2,"
      " \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}}",
      "ZeRO stage 3 only", "none" },
    { "{\"mixprec\": {\"device\": \"cuda\"}, \"zero_optimization\": {\"stage\": 3,"
      " \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\","
      " \"pin_memory\": true}}}", NULL, "cpu" },
    { "{\"mixprec\": {\"device\": \"cuda\"}, \"zero_optimization\": {\"stage\": 3,"
      " \"offload_param\": {\"device\": \"none\", \"nvme_path\": null, \"buffer_count\": 5,"
      " \"buffer_size\": 100000000, \"max_in_cpu\": 1000000000}}}", NULL, "none" },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);
      g_autofree gchar *data = mixprec_config_to_data (c, NULL);
      g_autofree gchar *pattern = g_strdup_printf ("\"offload_param\" *: *\\{\\s*\"device\" *: *\"%s\"",
                                                   cases[i].in_effect);
      GStrv w = mixprec_config_get_warnings (c);
      gboolean found = FALSE;

      for (guint k = 0; w[k] != NULL; k++)
        if (strstr (w[k], "offload_param") != NULL)
          {
            g_assert_nonnull (cases[i].warning);
            g_assert_nonnull (strstr (w[k], cases[i].warning));
            found = TRUE;
          }
      g_assert_true (found == (cases[i].warning != NULL));
      g_assert_true (g_regex_match_simple (pattern, data, 0, 0));
    }
}

static void
test_config_warnings (void)
{
  g_autoptr(MixprecConfig) c = load (
    "{\"flops_profiler\": {\"enabled\": true}, \"wandb\": {\"enabled\": false},"
    " \"steps_per_print\": 10, \"amp\": {\"enabled\": false},"
    " \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\"},"
    "   \"offload_param\": {\"device\": \"none\"}, \"reduce_scatter\": true,"
    "   \"round_robin_gradients\": true, \"stage3_max_live_parameters\": 1e9,"
    "   \"stage3_prefetch_bucket_size\": 1000, \"stage3_max_reuse_distance\": 0},"
    " \"fp16\": {\"auto_cast\": true, \"fp16_master_weights_and_grads\": true},"
    " \"bf16\": {\"bf16_master_weights_and_grads\": true}}");
  g_autoptr(MixprecConfig) z = load ("{\"zero_optimization\": true}");

  g_assert_true (warned (c, "flops_profiler: "));
  g_assert_true (warned (c, "wandb: "));
  /* steps_per_print is read now (mixprec.json(5)). */
  g_assert_false (warned (c, "steps_per_print"));
  /* Apex amp is read now; a disabled one asks for nothing. */
  g_assert_false (warned (c, "amp"));
  g_assert_true (warned (c, "zero_optimization.offload_optimizer: "));
  g_assert_true (warned (c, "zero_optimization.round_robin_gradients: "));
  g_assert_true (warned (c, "zero_optimization.stage3_max_reuse_distance: "));
  g_assert_true (warned (c, "fp16.auto_cast: "));
  g_assert_true (warned (c, "fp16.fp16_master_weights_and_grads: "));
  g_assert_true (warned (c, "bf16.bf16_master_weights_and_grads: "));
  /* DeepSpeed's own defaults ask for nothing: no warning. */
  g_assert_false (warned (c, "zero_optimization.reduce_scatter"));
  g_assert_false (warned (c, "zero_optimization.offload_param"));
  /* Settings libmixprec reads are never warned about, whatever their value. */
  g_assert_false (warned (c, "zero_optimization.stage3_max_live_parameters"));
  g_assert_false (warned (c, "zero_optimization.stage3_prefetch_bucket_size"));
  g_assert_cmpuint (mixprec_config_get_prefetch_bucket_size (c), ==, 1000);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 8);
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP32);

  /* DeepSpeed's oldest form of the ZeRO section. */
  g_assert_cmpuint (mixprec_config_get_zero_stage (z), ==, 1);
  g_assert_true (warned (z, "zero_optimization: "));
}

/* ------------------------------------------------------------ optimizer */

/* The configuration checks the optimizer and the schedule as the engine
 * builds them, and reports every problem of the file in one error. */
static void
test_config_optimizer_all_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (
    "{\"fp16\": {\"enabled\": true, \"loss_scale_window\": -3},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4, \"amsgrad\": true,"
    "   \"momentum\": 0.9, \"betas\": [0.9, 1.5]}},"
    " \"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"warmup_num_steps\": 10,"
    "   \"warmup_type\": \"cosine\"}}}",
    -1, &error);
  static const gchar *const lines[] = {
    "fp16.loss_scale_window: must be a positive integer, got -3",
    "optimizer.params.amsgrad: must be false, got true",
    "optimizer.params.momentum: not a hyper-parameter of the 'adamw' optimizer",
    "optimizer.params.betas[1]: must be between 0 and 1, got 1.5",
    "scheduler.params.warmup_type: must be \"log\" or \"linear\"",
    "scheduler.params.total_num_steps: WarmupDecayLR needs it",
  };
  g_auto(GStrv) got = NULL;

  g_assert_null (c);
  g_assert_nonnull (error);
  got = g_strsplit (error->message, "\n", -1);
  g_assert_cmpuint (g_strv_length (got), ==, G_N_ELEMENTS (lines));
  for (guint i = 0; i < G_N_ELEMENTS (lines); i++)
    {
      gboolean found = FALSE;

      for (guint j = 0; got[j] != NULL; j++)
        found |= g_str_has_prefix (got[j], lines[i]);
      if (!found)
        g_error ("no line starts with \"%s\" in:\n%s", lines[i], error->message);
    }
}

static void
test_config_optimizer_implementation_keys (void)
{
  /* DeepSpeed's torch_adam and torch's amsgrad=false change nothing the
   * step computes: accepted, torch_adam with a warning; neither is shown
   * in the resolved parameters. */
  g_autoptr(MixprecConfig) c = load (
    "{\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 2e-5, \"torch_adam\": true,"
    " \"amsgrad\": false, \"weight_decay\": 0.01}}}");
  g_autofree gchar *text = mixprec_config_to_data (c, NULL);
  g_autoptr(JsonNode) root = json_from_string (text, NULL);
  JsonObject *params = json_object_get_object_member (
    json_object_get_object_member (json_node_get_object (root), "optimizer"), "params");

  g_assert_true (warned (c, "optimizer.params.torch_adam: "));
  g_assert_null (mixprec_config_get_warnings (c)[1]);
  g_assert_false (json_object_has_member (params, "torch_adam"));
  g_assert_false (json_object_has_member (params, "amsgrad"));
  g_assert_cmpfloat (json_object_get_double_member (params, "lr"), ==, 2e-5);
  g_assert_cmpfloat (json_object_get_double_member (params, "weight_decay"), ==, 0.01);
  g_assert_cmpfloat (json_object_get_double_member (params, "eps"), ==, 1e-8);
}

static void
test_config_optimizer_deepspeed_only (void)
{
  /* DeepSpeed's optimizers that no plugin provides (runtime/config.py,
   * DEEPSPEED_OPTIMIZERS): refused with what each one is. */
  static const struct { const gchar *type; const gchar *named; } cases[] = {
    { "Lamb", "optimizer.type: \"Lamb\" is DeepSpeed's LAMB, " },
    { "OneBitAdam", "optimizer.type: \"OneBitAdam\" is DeepSpeed's 1-bit Adam, " },
    { "ZeroOneAdam", "optimizer.type: \"ZeroOneAdam\" is DeepSpeed's 0/1 Adam, " },
    { "OneBitLamb", "optimizer.type: \"OneBitLamb\" is DeepSpeed's 1-bit LAMB, " },
    { "Adagrad", "optimizer.type: \"Adagrad\" is DeepSpeed's Adagrad, " },
    { "MuAdamW", "optimizer.type: \"MuAdamW\" is DeepSpeed's MuAdamW, " },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree gchar *json = g_strdup_printf ("{\"optimizer\": {\"type\": \"%s\", "
                                                "\"params\": {\"lr\": 1e-3}}}", cases[i].type);
      g_autofree gchar *feature = g_ascii_strdown (cases[i].type, -1);
      g_autofree gchar *missing = g_strdup_printf ("which libmixprec does not implement "
                                                   "(no optimizer '%s' for device 'cpu'; "
                                                   "available: ", feature);
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (json, -1, &error);

      g_test_message ("%s", json);
      g_assert_null (c);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
      g_assert_cmpuint (count_lines (error->message), ==, 1);
      g_assert_true (g_str_has_prefix (error->message, cases[i].named));
      g_assert_nonnull (strstr (error->message, missing));
    }
}

/* ------------------------------------------------------------ corpus */

static MixprecConfig *
load_corpus (const gchar *name)
{
  g_autofree gchar *path = g_test_build_filename (G_TEST_DIST, "configs", name, NULL);
  g_autoptr(GError) error = NULL;
  MixprecConfig *c = mixprec_config_new_from_file (path, &error);

  g_assert_no_error (error);
  g_assert_nonnull (c);
  return c;
}

static void assert_round_trip (MixprecConfig *c);

/* mixprec.timeout: seconds, fractions allowed; printed back by to_data(). */
static void
test_config_timeout (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = mixprec_config_new_from_string ("{\"mixprec\": {\"timeout\": 2.5}}",
                                                               &error);
  g_autofree gchar *data = NULL;

  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_config_get_timeout (c), ==, 2.5);
  data = mixprec_config_to_data (c, NULL);
  g_assert_nonnull (strstr (data, "\"timeout\": 2.5"));
  assert_round_trip (c);
}

static void
assert_round_trip (MixprecConfig *c)
{
  g_autofree gchar *text = mixprec_config_to_data (c, NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) again = mixprec_config_new_from_data (text, -1, &error);
  g_autofree gchar *text_again = NULL;

  g_assert_no_error (error);
  text_again = mixprec_config_to_data (again, NULL);
  g_assert_cmpstr (text, ==, text_again);
  /* The printed form reads back without a warning of its own. A warning
   * the original had too may stay: which optimizer plugins exist for a
   * config's device depends on the build (no CUDA plugins, no cuda adamw). */
  for (GStrv w = mixprec_config_get_warnings (again); *w != NULL; w++)
    if (!g_strv_contains ((const gchar *const *) mixprec_config_get_warnings (c), *w))
      g_error ("the printed config reads back with a new warning: %s", *w);
  g_assert_cmpint (mixprec_config_get_precision_mode (again), ==, mixprec_config_get_precision_mode (c));
}

/* ZeRO++: zero_quantized_weights is read (no "not implemented" warning),
 * printed, and said to do nothing below stage 3. */
static void
test_config_zeropp (void)
{
  g_autoptr(MixprecConfig) on = load ("{\"zero_optimization\": {\"stage\": 3, "
                                      "\"zero_quantized_weights\": true}}");
  g_autoptr(MixprecConfig) low = load ("{\"zero_optimization\": {\"stage\": 2, "
                                       "\"zero_quantized_weights\": true}}");
  g_autoptr(MixprecConfig) off = load ("{\"zero_optimization\": {\"stage\": 1, "
                                       "\"zero_quantized_weights\": false}}");
  g_autofree gchar *text = mixprec_config_to_data (on, NULL);

  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (on)), ==, 0);
  g_assert_nonnull (strstr (text, "\"zero_quantized_weights\": true"));
  assert_round_trip (on);
  g_assert_true (warned (low, "zero_optimization.zero_quantized_weights: has no effect at stage 2"));
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (low)), ==, 1);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (off)), ==, 0);
  g_assert_nonnull (strstr (text, "\"zero_hpz_partition_size\": 1"));
}

/* qgZ and LoCo: read (no "not implemented" warning), printed with LoCo's
 * defaults filled in, read back; said to do nothing below stage 3, and
 * LoCo without qgZ. */
static void
test_config_qgz (void)
{
  g_autoptr(MixprecConfig) on = load ("{\"zero_optimization\": {\"stage\": 3, "
                                      "\"zero_quantized_gradients\": true, "
                                      "\"zeropp_loco_param\": {\"reset_T\": 64}}}");
  g_autoptr(MixprecConfig) plain = load ("{\"zero_optimization\": {\"stage\": 3, "
                                         "\"zero_quantized_gradients\": true}}");
  g_autoptr(MixprecConfig) low = load ("{\"zero_optimization\": {\"stage\": 2, "
                                       "\"zero_quantized_gradients\": true}}");
  g_autoptr(MixprecConfig) alone = load ("{\"zero_optimization\": {\"stage\": 3, "
                                         "\"zeropp_loco_param\": {\"err_beta\": 0.5}}}");
  g_autofree gchar *text = mixprec_config_to_data (on, NULL);
  g_autofree gchar *plain_text = mixprec_config_to_data (plain, NULL);

  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (on)), ==, 0);
  g_assert_nonnull (strstr (text, "\"zero_quantized_gradients\": true"));
  g_assert_true (g_regex_match_simple ("\"zeropp_loco_param\" *: *\\{\\s*\"err_beta\" *: *0.8,\\s*"
                                       "\"reset_T\" *: *64\\s*\\}", text, 0, 0));
  g_assert_nonnull (strstr (plain_text, "\"zeropp_loco_param\": null"));
  assert_round_trip (on);
  assert_round_trip (plain);
  g_assert_true (warned (low, "zero_optimization.zero_quantized_gradients: has no effect at stage 2"));
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (low)), ==, 1);
  g_assert_true (warned (alone, "zero_optimization.zeropp_loco_param: has no effect without "
                         "zero_optimization.zero_quantized_gradients"));
}

/* hpZ: read, printed, checked against the world by the engine, said to
 * do nothing below stage 3. */
static void
test_config_hpz (void)
{
  g_autoptr(MixprecConfig) on = load ("{\"zero_optimization\": {\"stage\": 3, "
                                      "\"zero_hpz_partition_size\": 8}}");
  g_autoptr(MixprecConfig) low = load ("{\"zero_optimization\": {\"stage\": 1, "
                                       "\"zero_hpz_partition_size\": 8}}");
  g_autofree gchar *text = mixprec_config_to_data (on, NULL);

  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (on)), ==, 0);
  g_assert_nonnull (strstr (text, "\"zero_hpz_partition_size\": 8"));
  assert_round_trip (on);
  g_assert_true (warned (low, "zero_optimization.zero_hpz_partition_size: has no effect at stage 1"));
}

static void
test_config_corpus_zero2_fp16 (void)
{
  g_autoptr(MixprecConfig) c = load_corpus ("zero2-fp16-warmup.json");
  JsonObject *params;
  JsonArray *betas;

  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP16);
  g_assert_cmpint (mixprec_config_get_grad_accum_dtype (c), ==, MIXPREC_DTYPE_FLOAT16);
  g_assert_cmpint (mixprec_config_get_communication_dtype (c), ==, MIXPREC_DTYPE_FLOAT16);
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 2);
  g_assert_cmpuint (mixprec_config_get_reduce_bucket_size (c), ==, 200000000);
  g_assert_cmpuint (mixprec_config_get_allgather_bucket_size (c), ==, 200000000);
  g_assert_true (mixprec_config_get_overlap_comm (c));
  g_assert_cmpfloat (mixprec_config_get_gradient_clipping (c), ==, 1.0);
  g_assert_cmpfloat (mixprec_config_get_loss_scale (c), ==, 0);
  g_assert_cmpint (mixprec_config_get_initial_scale_power (c), ==, 16);
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 64);
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, 4);
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, 2);
  g_assert_cmpstr (mixprec_config_get_optimizer_type (c), ==, "AdamW");
  params = mixprec_config_get_optimizer_params (c);
  g_assert_cmpfloat (json_object_get_double_member (params, "lr"), ==, 3e-4);
  betas = json_object_get_array_member (params, "betas");
  g_assert_cmpfloat (json_array_get_double_element (betas, 1), ==, 0.95);
  g_assert_cmpstr (mixprec_config_get_scheduler_type (c), ==, "WarmupLR");
  g_assert_cmpint (json_object_get_int_member (mixprec_config_get_scheduler_params (c), "warmup_num_steps"), ==, 500);
  /* Only the DeepSpeed-only top-level key (steps_per_print is read);
   * default-valued ignored keys are silent. */
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 1);
  g_assert_true (warned (c, "wall_clock_breakdown: "));
  /* 64 = 4 * 2 * world: world 8 fits, world 4 does not. */
  g_assert_true (mixprec_config_resolve_batch (c, 8, NULL));
  g_assert_false (mixprec_config_resolve_batch (c, 4, NULL));
  assert_round_trip (c);
}

static void
test_config_corpus_zero3_bf16 (void)
{
  g_autoptr(MixprecConfig) c = load_corpus ("zero3-bf16-offload.json");
  static const gchar *const expected_warnings[] = {
    "zero_optimization.offload_optimizer: ", "zero_optimization.offload_param: ",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save: ",
    "wall_clock_breakdown: ",
  };

  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_BF16);
  g_assert_cmpint (mixprec_config_get_low_dtype (c), ==, MIXPREC_DTYPE_BFLOAT16);
  g_assert_cmpint (mixprec_config_get_grad_accum_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_config_get_communication_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_true (mixprec_config_get_check_grad_overflow (c));
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 3);
  g_assert_true (mixprec_config_get_overlap_comm (c));
  g_assert_cmpuint (mixprec_config_get_reduce_bucket_size (c), ==, 16777216);
  g_assert_cmpuint (mixprec_config_get_allgather_bucket_size (c), ==, 500000000);
  g_assert_cmpuint (mixprec_config_get_prefetch_bucket_size (c), ==, 15099494);
  g_assert_cmpuint (mixprec_config_get_param_persistence_threshold (c), ==, 40960);
  g_assert_cmpuint (mixprec_config_get_max_live_parameters (c), ==, 1000000000);
  g_assert_cmpstr (mixprec_config_get_scheduler_type (c), ==, "WarmupDecayLR");
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, G_N_ELEMENTS (expected_warnings));
  for (gsize i = 0; i < G_N_ELEMENTS (expected_warnings); i++)
    g_assert_true (warned (c, expected_warnings[i]));

  /* micro 2, gas 4 on 8 ranks: train_batch_size = 64. */
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 0);
  g_assert_true (mixprec_config_resolve_batch (c, 8, NULL));
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 64);
  assert_round_trip (c);
}

static void
test_config_corpus_autocast (void)
{
  g_autoptr(MixprecConfig) c = load_corpus ("autocast-bf16.json");
  const gchar *const safe[] = { "torch.nn.Linear", "torch.nn.Conv2d", NULL };
  const gchar *const fp32[] = { "LayerNorm", "Embedding", NULL };

  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_AUTOCAST);
  g_assert_cmpint (mixprec_config_get_low_dtype (c), ==, MIXPREC_DTYPE_BFLOAT16);
  g_assert_cmpint (mixprec_config_get_grad_accum_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_config_get_communication_dtype (c), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_true (g_strv_equal (safe, mixprec_config_get_lower_precision_safe_modules (c)));
  g_assert_true (g_strv_equal (fp32, mixprec_config_get_fp32_modules (c)));
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 1);
  g_assert_cmpstr (mixprec_config_get_optimizer_type (c), ==, "Adam");
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 0);
  assert_round_trip (c);
}

static void
test_config_corpus_hf_trainer (void)
{
  g_autoptr(MixprecConfig) c = load_corpus ("hf-trainer-resolved.json");

  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_BF16);
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 2);
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 32);
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, 1);
  /* offload_optimizer {"device": "none"} asks for nothing; round_robin_gradients does. */
  g_assert_false (warned (c, "zero_optimization.offload_optimizer"));
  g_assert_true (warned (c, "zero_optimization.round_robin_gradients: "));
  g_assert_true (mixprec_config_resolve_batch (c, 4, NULL));
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, 8);
  assert_round_trip (c);
  /* hf-trainer-auto.json, its "auto" twin, is /config/auto/trainer-defaults. */
}

static void
test_config_corpus_monitors (void)
{
  g_autofree gchar *path = g_test_build_filename (G_TEST_DIST, "configs", "monitors-profiler.json",
                                                 NULL);
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
  g_autoptr(MixprecConfig) c = NULL;
  g_autoptr(MixprecConfig) lamb = NULL;
  g_autoptr(GError) error = NULL;
  static const gchar *const sections[] = {
    "activation_checkpointing: ", "flops_profiler: ", "wandb: ",
    "comms_logger: ", "wall_clock_breakdown: ", "zero_optimization: ",
  };

  /* No plugin provides DeepSpeed's Lamb: refused as the engine would,
   * and only that. */
  lamb = mixprec_config_new_from_file (path, &error);
  g_assert_null (lamb);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "monitors-profiler.json: optimizer.type: \"Lamb\" is "
                                            "DeepSpeed's LAMB"));
  g_assert_nonnull (strstr (error->message, "(no optimizer 'lamb' for device 'cpu'"));
  g_assert_null (strchr (error->message, '\n'));
  g_clear_error (&error);

  g_assert_true (mixprec_config_loader_set_override (loader, "optimizer", "null", &error));
  c = mixprec_config_loader_load_file (loader, path, &error);
  g_assert_no_error (error);
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP16);
  g_assert_cmpfloat (mixprec_config_get_loss_scale (c), ==, 128);
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 1);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, G_N_ELEMENTS (sections));
  for (gsize i = 0; i < G_N_ELEMENTS (sections); i++)
    g_assert_true (warned (c, sections[i]));
  /* 256 = 16 * gas * world: 3 ranks do not divide it, 16 ranks need gas 1. */
  g_assert_false (mixprec_config_resolve_batch (c, 3, NULL));
  g_assert_true (mixprec_config_resolve_batch (c, 16, NULL));
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, 1);
  assert_round_trip (c);
}

static void
test_config_corpus_mixprec_sections (void)
{
  g_autoptr(MixprecConfig) t = load_corpus ("fp16-torch-scaler.json");
  g_autoptr(MixprecConfig) b = load_corpus ("bf16-no-master.json");
  const gchar *const fp32_params[] = { "lm_head.*", "*.router.weight", NULL };

  g_assert_cmpint (mixprec_config_get_precision_mode (t), ==, MIXPREC_PRECISION_MODE_FP16);
  g_assert_cmpint (mixprec_config_get_grad_accum_dtype (t), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_config_get_communication_dtype (t), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_config_get_scaler_semantics (t), ==, MIXPREC_SCALER_SEMANTICS_TORCH);
  g_assert_cmpuint (mixprec_config_get_loss_scale_window (t), ==, 2000);
  g_assert_cmpuint (mixprec_config_get_hysteresis (t), ==, 1);
  g_assert_cmpfloat (mixprec_config_get_max_scale (t), ==, 16777216);
  g_assert_false (mixprec_config_get_raise_at_min_scale (t));
  g_assert_true (g_strv_equal (fp32_params, mixprec_config_get_fp32_params (t)));
  g_assert_cmpstr (mixprec_config_get_comm_backend (t), ==, "nccl");
  g_assert_cmpstr (mixprec_config_get_device (t), ==, "cuda");
  assert_round_trip (t);

  g_assert_cmpint (mixprec_config_get_precision_mode (b), ==, MIXPREC_PRECISION_MODE_BF16_NO_MASTER);
  g_assert_cmpint (mixprec_config_get_grad_accum_dtype (b), ==, MIXPREC_DTYPE_BFLOAT16);
  g_assert_cmpint (mixprec_config_get_communication_dtype (b), ==, MIXPREC_DTYPE_BFLOAT16);
  g_assert_false (mixprec_config_get_check_grad_overflow (b));
  g_assert_true (mixprec_config_get_stochastic_rounding (b));
  g_assert_cmpuint (mixprec_config_get_seed (b), ==, 1234);
  g_assert_cmpstr (mixprec_config_get_comm_backend (b), ==, "ucx");
  g_assert_cmpint (mixprec_config_get_optimizer_state_dtype (b), ==, MIXPREC_DTYPE_FLOAT32);
  assert_round_trip (b);
}

/* bf16.bf16_optimizer_states: bfloat16 state in bf16 mode; elsewhere a
 * warning, as DeepSpeed ignores the bf16 section while it is off. */
static void
test_config_bf16_optimizer_states (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) on = mixprec_config_new_from_data (
    "{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}}", -1, &error);
  g_autoptr(MixprecConfig) off = NULL;
  g_autofree gchar *data = NULL;

  g_assert_no_error (error);
  g_assert_cmpint (mixprec_config_get_optimizer_state_dtype (on), ==, MIXPREC_DTYPE_BFLOAT16);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (on)), ==, 0);
  data = mixprec_config_to_data (on, NULL);
  g_assert_nonnull (strstr (data, "\"bf16_optimizer_states\""));
  assert_round_trip (on);

  off = mixprec_config_new_from_data ("{\"bf16\": {\"bf16_optimizer_states\": true}}", -1, &error);
  g_assert_no_error (error);
  g_assert_cmpint (mixprec_config_get_optimizer_state_dtype (off), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_true (g_str_has_prefix (mixprec_config_get_warnings (off)[0], "bf16.bf16_optimizer_states: "));
}

/* ------------------------------------------------------------ fp8 */

static void
test_config_fp8_defaults (void)
{
  g_autoptr(MixprecConfig) off = load ("{}");
  g_autoptr(MixprecConfig) on = load ("{\"bf16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true}}");
  g_autofree gchar *text = mixprec_config_to_data (off, NULL);
  g_autoptr(JsonNode) root = json_from_string (text, NULL);
  JsonObject *fp8 = json_object_get_object_member (json_node_get_object (root), "fp8");
  JsonArray *modules = json_object_get_array_member (fp8, "modules");
  MixprecFp8Recipe *recipe;

  /* Disabled by default: no recipe, the defaults still printed. */
  g_assert_null (mixprec_config_get_fp8_recipe (off));
  g_assert_cmpstrv (mixprec_config_get_fp8_modules (off), ((const gchar *[]) { "Linear", NULL }));
  g_assert_false (json_object_get_boolean_member (fp8, "enabled"));
  g_assert_cmpstr (json_object_get_string_member (fp8, "recipe"), ==, "delayed");
  g_assert_cmpstr (json_object_get_string_member (fp8, "format"), ==, "hybrid");
  g_assert_cmpint (json_object_get_int_member (fp8, "amax_history_len"), ==, 1024);
  g_assert_cmpstr (json_object_get_string_member (fp8, "amax_compute_algo"), ==, "max");
  g_assert_cmpint (json_object_get_int_member (fp8, "margin"), ==, 0);
  g_assert_cmpint (json_object_get_int_member (fp8, "mx_block_size"), ==, 32);
  g_assert_true (json_object_get_boolean_member (fp8, "saturate"));
  g_assert_cmpuint (json_array_get_length (modules), ==, 1);
  g_assert_cmpstr (json_array_get_string_element (modules, 0), ==, "Linear");
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (off)), ==, 0);

  /* Enabled: Transformer Engine's DelayedScaling defaults. */
  recipe = mixprec_config_get_fp8_recipe (on);
  g_assert_nonnull (recipe);
  g_assert_cmpint (mixprec_fp8_recipe_get_kind (recipe), ==, MIXPREC_FP8_RECIPE_DELAYED);
  g_assert_cmpint (mixprec_fp8_recipe_get_format (recipe), ==, MIXPREC_FP8_FORMAT_HYBRID);
  g_assert_cmpuint (mixprec_fp8_recipe_get_amax_history_len (recipe), ==, 1024);
  g_assert_cmpint (mixprec_fp8_recipe_get_amax_compute_algo (recipe), ==, MIXPREC_FP8_AMAX_MAX);
  g_assert_cmpint (mixprec_fp8_recipe_get_margin (recipe), ==, 0);
  g_assert_true (mixprec_fp8_recipe_get_saturate (recipe));
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (on)), ==, 0);
}

/* fp4: off by default with TE's NVFP4 weight recipe printed; each key
 * read through the getters and printed back. */
static void
test_config_fp4 (void)
{
  g_autoptr(MixprecConfig) off = load ("{}");
  g_autoptr(MixprecConfig) nv = load ("{\"bf16\": {\"enabled\": true}, \"fp4\": {\"enabled\": true, "
                                      "\"rht\": true, \"rht_seed\": 99, \"modules\": [\"Linear\", \"Conv1D\"]}}");
  g_autoptr(MixprecConfig) nv1d = load ("{\"fp4\": {\"enabled\": true, \"weights_2d\": false}}");
  g_autoptr(MixprecConfig) mx = load ("{\"fp4\": {\"enabled\": true, \"recipe\": \"mxfp4\", \"scale_mode\": \"even\"}}");
  g_autofree gchar *text = mixprec_config_to_data (off, NULL);
  g_autofree gchar *text_mx = mixprec_config_to_data (mx, NULL);
  g_autoptr(JsonNode) root = json_from_string (text, NULL);
  g_autoptr(JsonNode) root_mx = json_from_string (text_mx, NULL);
  JsonObject *fp4 = json_object_get_object_member (json_node_get_object (root), "fp4");
  JsonObject *fp4_mx = json_object_get_object_member (json_node_get_object (root_mx), "fp4");
  MixprecBlockRecipe recipe = 99;
  MixprecMxScaleMode mode = 99;
  guint16 mask = 0;

  g_assert_false (mixprec_config_get_fp4_recipe (off, &recipe, &mode));
  g_assert_cmpint (recipe, ==, MIXPREC_BLOCK_RECIPE_NVFP4_2D);
  g_assert_cmpint (mode, ==, MIXPREC_MX_SCALE_FLOOR);
  g_assert_false (mixprec_config_get_fp4_rht (off, NULL));
  g_assert_false (json_object_get_boolean_member (fp4, "enabled"));
  g_assert_cmpstr (json_object_get_string_member (fp4, "recipe"), ==, "nvfp4");
  g_assert_true (json_object_get_boolean_member (fp4, "weights_2d"));
  g_assert_cmpstr (json_object_get_string_member (fp4, "scale_mode"), ==, "floor");
  g_assert_false (json_object_get_boolean_member (fp4, "rht"));
  g_assert_cmpint (json_object_get_int_member (fp4, "rht_seed"), ==, 0);
  g_assert_cmpstrv (mixprec_config_get_fp4_modules (off), ((const gchar *[]) { "Linear", NULL }));

  g_assert_true (mixprec_config_get_fp4_recipe (nv, &recipe, NULL));
  g_assert_cmpint (recipe, ==, MIXPREC_BLOCK_RECIPE_NVFP4_2D);
  g_assert_true (mixprec_config_get_fp4_rht (nv, &mask));
  g_assert_cmpuint (mask, ==, mixprec_rht_sign_mask (99));
  g_assert_cmpstrv (mixprec_config_get_fp4_modules (nv), ((const gchar *[]) { "Linear", "Conv1D", NULL }));
  g_assert_true (mixprec_config_get_fp4_recipe (nv1d, &recipe, NULL));
  g_assert_cmpint (recipe, ==, MIXPREC_BLOCK_RECIPE_NVFP4);
  g_assert_true (mixprec_config_get_fp4_recipe (mx, &recipe, &mode));
  g_assert_cmpint (recipe, ==, MIXPREC_BLOCK_RECIPE_MXFP4);
  g_assert_cmpint (mode, ==, MIXPREC_MX_SCALE_EVEN);
  g_assert_false (mixprec_config_get_fp4_rht (mx, NULL));
  g_assert_cmpstr (json_object_get_string_member (fp4_mx, "recipe"), ==, "mxfp4");
  g_assert_cmpstr (json_object_get_string_member (fp4_mx, "scale_mode"), ==, "even");
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (mx)), ==, 0);

  /* fp8.mx_scale_mode reaches the MX recipe. */
  {
    g_autoptr(MixprecConfig) c = load ("{\"fp8\": {\"enabled\": true, \"recipe\": \"mx\", \"mx_scale_mode\": \"rceil\"}}");
    g_autoptr(MixprecConfig) d = load ("{\"fp8\": {\"enabled\": true, \"recipe\": \"mx\"}}");

    g_assert_cmpint (mixprec_fp8_recipe_get_mx_scale_mode (mixprec_config_get_fp8_recipe (c)), ==,
                     MIXPREC_MX_SCALE_RCEIL);
    g_assert_cmpint (mixprec_fp8_recipe_get_mx_scale_mode (mixprec_config_get_fp8_recipe (d)), ==,
                     MIXPREC_MX_SCALE_FLOOR);
  }

  /* The policy: Linear is fp4, a name in fp32_params is not. */
  {
    g_autoptr(MixprecConfig) c = load ("{\"fp4\": {\"enabled\": true, \"exclude_params\": [\"first.*\"]}, "
                                       "\"mixprec\": {\"fp32_params\": [\"head.*\"]}}");
    g_autoptr(MixprecPrecisionPolicy) p = mixprec_precision_policy_new_from_config (c, NULL);

    g_assert_true (mixprec_precision_policy_is_fp4 (p, "blocks.0.w", "Linear"));
    g_assert_false (mixprec_precision_policy_is_fp4 (p, "head.weight", "Linear"));
    g_assert_false (mixprec_precision_policy_is_fp4 (p, "emb.weight", "Embedding"));
    g_assert_false (mixprec_precision_policy_is_fp4 (p, "first.weight", "Linear"));
    g_assert_true (mixprec_precision_policy_is_fp4 (p, "firsts.weight", "Linear"));
    g_assert_cmpstrv (mixprec_config_get_fp4_exclude_params (c), ((const gchar *[]) { "first.*", NULL }));
    g_assert_false (mixprec_precision_policy_is_fp8 (p, "blocks.0.w", "Linear"));
  }
}

static void
test_config_fp8_values (void)
{
  static const struct {
    const gchar *json;
    MixprecFp8RecipeKind kind;
    MixprecFp8Format format;
    guint history_len;
    MixprecFp8AmaxAlgo algo;
    gint margin;
    guint block_size;
    gboolean saturate;
  } cases[] = {
    { "{\"fp8\": {\"enabled\": true, \"recipe\": \"delayed\", \"format\": \"e4m3\", \"amax_history_len\": 16,"
      " \"amax_compute_algo\": \"most_recent\", \"margin\": -3, \"saturate\": false}}",
      MIXPREC_FP8_RECIPE_DELAYED, MIXPREC_FP8_FORMAT_E4M3, 16, MIXPREC_FP8_AMAX_MOST_RECENT, -3, 0, FALSE },
    { "{\"fp8\": {\"enabled\": true, \"recipe\": \"delayed\", \"amax_history_len\": 1, \"margin\": 64}}",
      MIXPREC_FP8_RECIPE_DELAYED, MIXPREC_FP8_FORMAT_HYBRID, 1, MIXPREC_FP8_AMAX_MAX, 64, 0, TRUE },
    { "{\"fp8\": {\"enabled\": true, \"recipe\": \"current\", \"margin\": 1}}",
      MIXPREC_FP8_RECIPE_CURRENT, MIXPREC_FP8_FORMAT_HYBRID, 1, MIXPREC_FP8_AMAX_MOST_RECENT, 1, 0, TRUE },
    { "{\"fp8\": {\"enabled\": true, \"recipe\": \"mx\", \"format\": \"e4m3\", \"mx_block_size\": 32.0}}",
      MIXPREC_FP8_RECIPE_MX, MIXPREC_FP8_FORMAT_E4M3, 0, MIXPREC_FP8_AMAX_MOST_RECENT, 0, 32, TRUE },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);
      g_autoptr(MixprecConfig) again = NULL;
      g_autofree gchar *text = mixprec_config_to_data (c, NULL);
      g_autofree gchar *text_again = NULL;
      MixprecFp8Recipe *r = mixprec_config_get_fp8_recipe (c);

      g_test_message ("%s", cases[i].json);
      g_assert_nonnull (r);
      g_assert_cmpint (mixprec_fp8_recipe_get_kind (r), ==, cases[i].kind);
      g_assert_cmpint (mixprec_fp8_recipe_get_format (r), ==, cases[i].format);
      g_assert_cmpuint (mixprec_fp8_recipe_get_amax_history_len (r), ==, cases[i].history_len);
      g_assert_cmpint (mixprec_fp8_recipe_get_amax_compute_algo (r), ==, cases[i].algo);
      g_assert_cmpint (mixprec_fp8_recipe_get_margin (r), ==, cases[i].margin);
      g_assert_cmpuint (mixprec_fp8_recipe_get_block_size (r), ==, cases[i].block_size);
      g_assert_cmpint (mixprec_fp8_recipe_get_saturate (r), ==, cases[i].saturate);
      g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 0);

      /* to_data() prints the section; it reads back to the same text and
       * the same recipe. */
      again = load (text);
      text_again = mixprec_config_to_data (again, NULL);
      g_assert_cmpstr (text, ==, text_again);
      r = mixprec_config_get_fp8_recipe (again);
      g_assert_cmpint (mixprec_fp8_recipe_get_kind (r), ==, cases[i].kind);
      g_assert_cmpint (mixprec_fp8_recipe_get_margin (r), ==, cases[i].margin);
      g_assert_cmpint (mixprec_fp8_recipe_get_saturate (r), ==, cases[i].saturate);
    }
}

static void
test_config_fp8_modules (void)
{
  g_autoptr(MixprecConfig) c =
    load ("{\"fp8\": {\"enabled\": true, \"modules\": [\"Linear\", \"torch.nn.Conv1d\"]},"
          " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"]}}");
  g_autoptr(MixprecConfig) none = load ("{\"fp8\": {\"enabled\": true, \"modules\": []}}");
  g_autofree gchar *text = mixprec_config_to_data (c, NULL);
  g_autoptr(MixprecConfig) again = load (text);

  g_assert_cmpstrv (mixprec_config_get_fp8_modules (c),
                    ((const gchar *[]) { "Linear", "torch.nn.Conv1d", NULL }));
  g_assert_cmpstrv (mixprec_config_get_fp8_modules (again),
                    ((const gchar *[]) { "Linear", "torch.nn.Conv1d", NULL }));
  g_assert_cmpuint (g_strv_length ((gchar **) mixprec_config_get_fp8_modules (none)), ==, 0);
  g_assert_nonnull (mixprec_config_get_fp8_recipe (none));
}

/* Keys the chosen recipe does not use: a warning when they differ from
 * their default (a recipe changed without its keys), none at the default,
 * so that what to_data() prints reads back quietly. */
static void
test_config_fp8_unused_keys (void)
{
  static const struct {
    const gchar *json;
    const gchar *warning;   /* NULL: none */
  } cases[] = {
    { "{\"fp8\": {\"recipe\": \"current\", \"amax_history_len\": 16}}", "fp8.amax_history_len: applies to the \"delayed\" recipe only, and fp8.recipe is \"current\"; ignored" },
    { "{\"fp8\": {\"recipe\": \"mx\", \"amax_compute_algo\": \"most_recent\"}}", "fp8.amax_compute_algo: applies to the \"delayed\" recipe only, and fp8.recipe is \"mx\"; ignored" },
    { "{\"fp8\": {\"recipe\": \"mx\", \"margin\": -1}}", "fp8.margin: applies to the \"delayed\" and \"current\" recipes only, and fp8.recipe is \"mx\"; ignored" },
    { "{\"fp8\": {\"recipe\": \"mx\", \"margin\": 0, \"amax_history_len\": 1024, \"amax_compute_algo\": \"max\"}}", NULL },
    { "{\"fp8\": {\"recipe\": \"current\", \"margin\": 2, \"mx_block_size\": 32}}", NULL },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) c = load (cases[i].json);
      const gchar * const *warnings = (const gchar * const *) mixprec_config_get_warnings (c);

      g_test_message ("%s", cases[i].json);
      if (cases[i].warning == NULL)
        g_assert_null (warnings[0]);
      else
        {
          g_assert_cmpstr (warnings[0], ==, cases[i].warning);
          g_assert_null (warnings[1]);
        }
    }
}

/* ------------------------------------------------------------ to_data */

static void
test_config_to_data (void)
{
  g_autoptr(MixprecConfig) c = load ("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3}}");
  gsize length = 0;
  g_autofree gchar *text = mixprec_config_to_data (c, &length);
  g_autoptr(JsonNode) root = json_from_string (text, NULL);
  JsonObject *o, *fp16, *zero, *mixprec, *scaler;

  g_assert_cmpuint (length, ==, strlen (text));
  g_assert_nonnull (root);
  o = json_node_get_object (root);
  /* Every section, resolved. */
  g_assert_true (json_object_get_null_member (o, "train_batch_size"));
  g_assert_cmpstr (json_object_get_string_member (o, "communication_data_type"), ==, "fp32");
  g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (o, "data_types"), "grad_accum_dtype"), ==, "fp32");
  fp16 = json_object_get_object_member (o, "fp16");
  g_assert_cmpint (json_object_get_int_member (fp16, "initial_scale_power"), ==, 16);
  g_assert_cmpint (json_object_get_int_member (fp16, "loss_scale_window"), ==, 1000);
  g_assert_cmpint (json_object_get_int_member (fp16, "hysteresis"), ==, 2);
  g_assert_cmpfloat (json_object_get_double_member (fp16, "min_loss_scale"), ==, 1);
  g_assert_true (json_object_get_boolean_member (json_object_get_object_member (o, "bf16"), "check_grad_overflow"));
  g_assert_true (json_object_get_boolean_member (json_object_get_object_member (o, "zero_optimization"), "overlap_comm"));
  zero = json_object_get_object_member (o, "zero_optimization");
  g_assert_cmpint (json_object_get_int_member (zero, "reduce_bucket_size"), ==, 500000000);
  /* The ZeRO-3 sizes under DeepSpeed's stage3_ names, after contiguous_gradients. */
  g_assert_cmpint (json_object_get_int_member (zero, "stage3_prefetch_bucket_size"), ==, 50000000);
  g_assert_cmpint (json_object_get_int_member (zero, "stage3_param_persistence_threshold"), ==, 100000);
  g_assert_cmpint (json_object_get_int_member (zero, "stage3_max_live_parameters"), ==, 1000000000);
  g_assert_false (json_object_has_member (zero, "prefetch_bucket_size"));
  g_assert_false (json_object_has_member (zero, "param_persistence_threshold"));
  g_assert_false (json_object_has_member (zero, "max_live_parameters"));
  g_assert_true (strstr (text, "\"contiguous_gradients\"") < strstr (text, "\"stage3_prefetch_bucket_size\""));
  g_assert_true (strstr (text, "\"stage3_prefetch_bucket_size\"") < strstr (text, "\"stage3_param_persistence_threshold\""));
  g_assert_true (strstr (text, "\"stage3_param_persistence_threshold\"") < strstr (text, "\"stage3_max_live_parameters\""));
  g_assert_cmpstr (json_object_get_string_member (json_object_get_object_member (o, "torch_autocast"), "dtype"), ==, "bf16");
  /* No optimizer section: the engine's default AdamW, shown with every
   * parameter (mixprec.json(5): lr 1e-3, betas 0.9/0.999, eps 1e-8, no decay). */
  {
    JsonObject *opt = json_object_get_object_member (o, "optimizer");
    JsonObject *params = json_object_get_object_member (opt, "params");
    JsonArray *betas = json_object_get_array_member (params, "betas");

    g_assert_cmpstr (json_object_get_string_member (opt, "type"), ==, "AdamW");
    g_assert_cmpfloat (json_object_get_double_member (params, "lr"), ==, 1e-3);
    g_assert_cmpfloat (json_array_get_double_element (betas, 0), ==, 0.9);
    g_assert_cmpfloat (json_array_get_double_element (betas, 1), ==, 0.999);
    g_assert_cmpfloat (json_object_get_double_member (params, "eps"), ==, 1e-8);
    g_assert_cmpfloat (json_object_get_double_member (params, "weight_decay"), ==, 0);
    g_assert_true (json_object_get_boolean_member (params, "adam_w_mode"));
  }
  g_assert_true (json_object_get_null_member (o, "scheduler"));
  mixprec = json_object_get_object_member (o, "mixprec");
  g_assert_cmpstr (json_object_get_string_member (mixprec, "precision_mode"), ==, "bf16");
  g_assert_cmpstr (json_object_get_string_member (mixprec, "comm"), ==, "auto");
  scaler = json_object_get_object_member (mixprec, "scaler");
  g_assert_cmpstr (json_object_get_string_member (scaler, "semantics"), ==, "deepspeed");
  g_assert_cmpfloat (json_object_get_double_member (scaler, "backoff_factor"), ==, 0.5);
  assert_round_trip (c);

  /* Round trips across modes and semantics. */
  {
    static const gchar *const docs[] = {
      "{}",
      "{\"fp16\": {\"enabled\": true, \"loss_scale\": 512}}",
      "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"fp16\"}, \"communication_data_type\": \"fp16\"}",
      "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"scaler\": {\"semantics\": \"megatron\", \"growth_factor\": 1.5}}}",
      "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}, \"data_types\": {\"grad_accum_dtype\": \"fp32\"}}",
      "{\"train_micro_batch_size_per_gpu\": 3, \"gradient_accumulation_steps\": 5, \"mixprec\": {\"seed\": 9223372036854775807}}",
      "{\"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": 0, \"param_persistence_threshold\": 4096, \"max_live_parameters\": 9223372036854775807}}",
    };

    for (gsize i = 0; i < G_N_ELEMENTS (docs); i++)
      {
        g_autoptr(MixprecConfig) d = load (docs[i]);

        assert_round_trip (d);
      }
  }
}

/* A value read under the short alias comes back under its stage3_ name. */
static void
test_config_to_data_stage3_names (void)
{
  g_autoptr(MixprecConfig) c = load ("{\"zero_optimization\": {\"stage\": 3, \"prefetch_bucket_size\": 7,"
                                     " \"param_persistence_threshold\": 8, \"max_live_parameters\": 9}}");
  g_autofree gchar *text = mixprec_config_to_data (c, NULL);
  g_autoptr(JsonNode) root = json_from_string (text, NULL);
  JsonObject *zero;

  g_assert_nonnull (root);
  zero = json_object_get_object_member (json_node_get_object (root), "zero_optimization");
  g_assert_cmpint (json_object_get_int_member (zero, "stage3_prefetch_bucket_size"), ==, 7);
  g_assert_cmpint (json_object_get_int_member (zero, "stage3_param_persistence_threshold"), ==, 8);
  g_assert_cmpint (json_object_get_int_member (zero, "stage3_max_live_parameters"), ==, 9);
  g_assert_false (json_object_has_member (zero, "prefetch_bucket_size"));
  g_assert_false (json_object_has_member (zero, "param_persistence_threshold"));
  g_assert_false (json_object_has_member (zero, "max_live_parameters"));
  assert_round_trip (c);
}

/* ------------------------------------------------------------ leniency */

static void
assert_warnings (MixprecConfig       *c,
                 const gchar * const *expected,
                 gsize                n)
{
  GStrv warnings = mixprec_config_get_warnings (c);

  for (guint i = 0; warnings[i] != NULL; i++)
    g_test_message ("warning: %s", warnings[i]);
  g_assert_cmpuint (g_strv_length (warnings), ==, n);
  for (gsize i = 0; i < n; i++)
    g_assert_cmpstr (warnings[i], ==, expected[i]);
}

/* DeepSpeed reads the top level, optimizer, scheduler and data_types as
 * dictionaries and ignores what it does not know; its pydantic sections
 * (zero_optimization, fp16, bf16) forbid extra keys. */
static void
test_config_unknown_keys_lenient (void)
{
  g_autoptr(MixprecConfig) c = load (
    "{\"cuda_visible_devices\": \"0,1,2,3\", \"train_micro_batch_size_per_gpu\": 2,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}, \"comment\": \"tuned\"},"
    " \"data_types\": {\"grad_accum_dtype\": \"fp32\", \"custom_field\": 1}}");
  static const gchar *const expected[] = {
    ("cuda_visible_devices: unknown key in the top level, neither a DeepSpeed nor a libmixprec "
     "setting; ignored (libmixprec's own settings go in the \"mixprec\" section)"),
    "data_types.custom_field: unknown key in data_types, as in DeepSpeed; ignored",
    "optimizer.comment: unknown key in optimizer, as in DeepSpeed; ignored",
  };
  /* Close to a known key: still the typo it most likely is. */
  static const gchar *const errors[][3] = {
    { "{\"cuda_visible_devices\": 1, \"gradient_cliping\": 1}", "gradient_cliping: ", "did you mean gradient_clipping?" },
    { "{\"optimizer\": {\"type\": \"AdamW\", \"parms\": {}}}", "optimizer.parms: ", "did you mean params?" },
    { "{\"zero_optimization\": {\"custom_field\": 1}}", "zero_optimization.custom_field: ", "the keys are" },
    { "{\"fp16\": {\"custom_field\": 1}}", "fp16.custom_field: ", "the keys are" },
    { "{\"mixprec\": {\"custom_field\": 1}}", "mixprec.custom_field: ", "the keys are" },
  };

  assert_warnings (c, expected, G_N_ELEMENTS (expected));
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, 2);
  assert_round_trip (c);

  for (gsize i = 0; i < G_N_ELEMENTS (errors); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) bad = mixprec_config_new_from_data (errors[i][0], -1, &error);

      g_test_message ("%s", errors[i][0]);
      g_assert_null (bad);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY);
      g_assert_cmpuint (count_lines (error->message), ==, 1);
      g_assert_true (has_line_containing (error->message, errors[i][1], errors[i][2]));
    }
}

/* MoQ quantizes the working weights after every optimizer step
 * (DeepSpeed's runtime/quantize.py), which libmixprec does not do: asking
 * for it is refused; quantizing in the model's forward pass, or a
 * section that does not enable it, stays a warning. */
static void
test_config_moq (void)
{
  static const struct { const gchar *json; const gchar *refusal; } cases[] = {
    { "{\"fp16\": {\"enabled\": true}, \"compression_training\": {\"weight_quantization\":"
      " {\"shared_parameters\": {\"enabled\": true, \"quantize_groups\": 64}}}}",
      "compression_training.weight_quantization.shared_parameters.enabled: must be false, "
      "got true: it asks for MoQ, " },
    { "{\"fp16\": {\"enabled\": true}, \"compression_training\": {\"weight_quantization\":"
      " {\"shared_parameters\": {\"enabled\": true, \"quantize_weight_in_forward\": false}}}}",
      "compression_training.weight_quantization.shared_parameters.enabled: must be false, "
      "got true: it asks for MoQ, " },
    { "{\"fp16\": {\"enabled\": true}, \"quantize_training\": {\"enabled\": true,"
      " \"quantize_groups\": 8}}",
      "quantize_training.enabled: must be false, got true: it asks for MoQ, " },
    { "{\"compression_training\": {\"weight_quantization\": {\"shared_parameters\":"
      " {\"enabled\": true, \"quantize_weight_in_forward\": true}}}}", NULL },
    { "{\"compression_training\": {\"weight_quantization\": {\"shared_parameters\":"
      " {\"enabled\": false}}}}", NULL },
    { "{\"fp16\": {\"enabled\": true}, \"quantize_training\": {\"quantize_groups\": 8}}", NULL },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (cases[i].json, -1, &error);

      g_test_message ("%s", cases[i].json);
      if (cases[i].refusal == NULL)
        {
          g_assert_no_error (error);
          g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 1);
          g_assert_true (strstr (cases[i].json, "compression_training")
                         ? warned (c, "compression_training: a DeepSpeed setting for a feature")
                         : warned (c, "quantize_training: a DeepSpeed setting for a feature"));
          continue;
        }
      g_assert_null (c);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
      g_assert_cmpuint (count_lines (error->message), ==, 1);
      g_assert_true (g_str_has_prefix (error->message, cases[i].refusal));
      g_assert_nonnull (strstr (error->message, "which libmixprec does not implement"));
    }
}

static void
test_config_bf16_scaler_keys (void)
{
  /* An fp16 section copied into bf16: DeepSpeed scales no bf16 loss. */
  g_autoptr(MixprecConfig) c = load (
    "{\"bf16\": {\"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 16,"
    " \"loss_scale_window\": 1000, \"hysteresis\": 2, \"consecutive_hysteresis\": false,"
    " \"min_loss_scale\": 1}}");
  static const gchar *const expected[] = {
    "bf16.loss_scale: bf16 training has no loss scaling (bf16 has FP32's range); ignored",
    "bf16.initial_scale_power: bf16 training has no loss scaling (bf16 has FP32's range); ignored",
    "bf16.loss_scale_window: bf16 training has no loss scaling (bf16 has FP32's range); ignored",
    "bf16.hysteresis: bf16 training has no loss scaling (bf16 has FP32's range); ignored",
    "bf16.consecutive_hysteresis: bf16 training has no loss scaling (bf16 has FP32's range); ignored",
    "bf16.min_loss_scale: bf16 training has no loss scaling (bf16 has FP32's range); ignored",
  };

  assert_warnings (c, expected, G_N_ELEMENTS (expected));
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_BF16);
  /* The fp16 scaler keeps DeepSpeed's defaults: nothing was read from bf16. */
  g_assert_cmpint (mixprec_config_get_initial_scale_power (c), ==, 16);
  g_assert_cmpuint (mixprec_config_get_hysteresis (c), ==, 2);
  assert_round_trip (c);
}

static guint64
staging_bytes (MixprecConfig *config)
{
  static const guint64 sizes[] = { 1 << 20, 1 << 20, 3 << 18 };
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) plan = mixprec_memory_plan_list_buffers (config, sizes, G_N_ELEMENTS (sizes),
                                                                4, 0, &error);

  g_assert_no_error (error);
  for (guint i = 0; i < plan->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (plan, i);

      if (g_str_equal (b->name, "gradient staging"))
        return b->planned_bytes;
    }
  return 0;
}

/* DeepSpeed declares the bucket sizes ge=0. A 0 asks for the smallest
 * staging the engine lays out: each slot is still at least
 * world * 4096 elements, so 0 plans exactly as 1 does. */
static void
test_config_bucket_size_zero (void)
{
  g_autoptr(MixprecConfig) zero = load ("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": "
                                        "{\"stage\": 2, \"reduce_bucket_size\": 0, \"allgather_bucket_size\": 0}}");
  g_autoptr(MixprecConfig) one = load ("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": "
                                       "{\"stage\": 2, \"reduce_bucket_size\": 1, \"allgather_bucket_size\": 0}}");
  guint64 staged;

  g_assert_cmpuint (mixprec_config_get_reduce_bucket_size (zero), ==, 0);
  g_assert_cmpuint (mixprec_config_get_allgather_bucket_size (zero), ==, 0);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (zero)), ==, 0);
  assert_round_trip (zero);

  staged = staging_bytes (zero);
  /* Two slots of at least 4 ranks * 4096 elements of bf16 gradients. */
  g_assert_cmpuint (staged, >=, 2 * 4 * 4096 * 2);
  g_assert_cmpuint (staged, ==, staging_bytes (one));
}

/* ------------------------------------------------------------ strict */

static void
test_config_strict (void)
{
#define LENIENT_DOC "{\"cuda_visible_devices\": \"0\", \"bf16\": {\"enabled\": true, \"hysteresis\": 2}," \
                    " \"wandb\": {\"enabled\": false}, \"gradient_clipping\": \"auto\""
  const gchar *plain = LENIENT_DOC "}";
  const gchar *strict = LENIENT_DOC ", \"mixprec\": {\"strict\": true}}";
#undef LENIENT_DOC
  g_autoptr(MixprecConfig) c = load (plain);
  g_autoptr(MixprecConfig) clean = load ("{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"strict\": true}}");
  g_autoptr(MixprecConfig) refused = NULL;
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
  g_autoptr(GError) error = NULL;
  GStrv warnings = mixprec_config_get_warnings (c);

  g_assert_false (mixprec_config_get_strict (c));
  g_assert_cmpuint (g_strv_length (warnings), ==, 4);

  /* Strict: each warning is an error line, the same text, the code of
   * its kind (the first: an "auto" resolution, an invalid value). */
  refused = mixprec_config_new_from_data (strict, -1, &error);
  g_assert_null (refused);
  assert_well_formed (error);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
  g_assert_cmpuint (count_lines (error->message), ==, 4);
  for (guint i = 0; warnings[i] != NULL; i++)
    {
      g_autofree gchar *line = g_strdup_printf ("%s (refused: mixprec.strict is true)", warnings[i]);

      g_assert_true (has_line_containing (error->message, line, NULL));
    }
  g_clear_error (&error);

  /* Only the unknown key: its code. */
  g_clear_object (&refused);
  refused = mixprec_config_new_from_data ("{\"cuda_visible_devices\": 0, \"mixprec\": {\"strict\": true}}", -1, &error);
  g_assert_null (refused);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNKNOWN_KEY);
  g_assert_true (g_str_has_prefix (error->message, "cuda_visible_devices: "));
  g_clear_error (&error);

  /* A document with nothing to warn about loads, and says it was strict. */
  g_assert_true (mixprec_config_get_strict (clean));
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (clean)), ==, 0);
  assert_round_trip (clean);

  /* Strict from an override; an override replacing the "auto" makes the
   * document acceptable. */
  g_assert_true (mixprec_config_loader_set_override (loader, "mixprec.strict", "true", NULL));
  g_clear_object (&refused);
  refused = mixprec_config_loader_load_data (loader, "{\"gradient_clipping\": \"auto\"}", &error);
  g_assert_null (refused);
  g_assert_true (has_line_containing (error->message, "gradient_clipping: \"auto\" -> 1.0", "mixprec.strict"));
  g_clear_error (&error);
  g_assert_true (mixprec_config_loader_set_override (loader, "gradient_clipping", "0.5", NULL));
  g_clear_object (&refused);
  refused = mixprec_config_loader_load_data (loader, "{\"gradient_clipping\": \"auto\"}", &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_config_get_gradient_clipping (refused), ==, 0.5);
  g_assert_true (mixprec_config_get_strict (refused));
}

/* ------------------------------------------------------------ "auto" */

static JsonArray *
optimizer_betas (MixprecConfig *c)
{
  return json_object_get_array_member (mixprec_config_get_optimizer_params (c), "betas");
}

/* The Trainer's defaults (TrainingArguments: learning_rate 5e-5,
 * adam_beta1 0.9, adam_beta2 0.999, adam_epsilon 1e-8, weight_decay 0,
 * max_grad_norm 1, per_device_train_batch_size 8, warmup_steps 0) and
 * DeepSpeed's bucket sizes where no hidden size is given. */
static void
test_config_auto_trainer_defaults (void)
{
  g_autoptr(MixprecConfig) c = load_corpus ("hf-trainer-auto.json");
  static const gchar *const expected[] = {
    "fp16.enabled: \"auto\" -> false (DeepSpeed's default; the Trainer enables it only for --fp16)",
    "bf16.enabled: \"auto\" -> false (DeepSpeed's default; the Trainer enables it only for --bf16)",
    "train_micro_batch_size_per_gpu: \"auto\" -> 8 (the Trainer's default --per_device_train_batch_size)",
    "gradient_accumulation_steps: \"auto\" -> 1 (the Trainer's default --gradient_accumulation_steps)",
    "train_batch_size: \"auto\" -> null (derived as train_micro_batch_size_per_gpu * "
    "gradient_accumulation_steps * world size once the world size is known)",
    "gradient_clipping: \"auto\" -> 1.0 (the Trainer's default --max_grad_norm)",
    "zero_optimization.reduce_bucket_size: \"auto\" -> 500000000 (DeepSpeed's default; pass "
    "model.hidden_size to size it from the model as the Trainer does)",
    "zero_optimization.stage3_prefetch_bucket_size: \"auto\" -> 50000000 (DeepSpeed's default; "
    "pass model.hidden_size to size it from the model as the Trainer does)",
    "zero_optimization.stage3_param_persistence_threshold: \"auto\" -> 100000 (DeepSpeed's "
    "default; pass model.hidden_size to size it from the model as the Trainer does)",
    "optimizer.params.lr: \"auto\" -> 5e-05 (the Trainer's default --learning_rate)",
    "optimizer.params.betas: \"auto\" -> [0.9, 0.999] (the Trainer's defaults --adam_beta1 and "
    "--adam_beta2)",
    "optimizer.params.eps: \"auto\" -> 1e-08 (the Trainer's default --adam_epsilon)",
    "optimizer.params.weight_decay: \"auto\" -> 0.0 (the Trainer's default --weight_decay)",
    "scheduler.params.warmup_min_lr: \"auto\" -> 0 (the value the Trainer writes)",
    "scheduler.params.warmup_max_lr: \"auto\" -> 5e-05 (optimizer.params.lr: the Trainer sets "
    "both from --learning_rate)",
    "scheduler.params.warmup_num_steps: \"auto\" -> 0 (the Trainer's default --warmup_steps)",
    "wall_clock_breakdown: a DeepSpeed setting for a feature libmixprec does not implement; ignored",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save: a DeepSpeed ZeRO setting "
    "libmixprec does not implement; ignored",
  };
  JsonObject *params, *sched;
  g_autofree gchar *text = NULL;

  assert_warnings (c, expected, G_N_ELEMENTS (expected));
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP32);
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, 8);
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, 1);
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 0);
  g_assert_cmpfloat (mixprec_config_get_gradient_clipping (c), ==, 1.0);
  g_assert_cmpuint (mixprec_config_get_reduce_bucket_size (c), ==, 500000000);
  g_assert_cmpuint (mixprec_config_get_prefetch_bucket_size (c), ==, 50000000);
  g_assert_cmpuint (mixprec_config_get_param_persistence_threshold (c), ==, 100000);
  params = mixprec_config_get_optimizer_params (c);
  g_assert_cmpfloat (json_object_get_double_member (params, "lr"), ==, 5e-5);
  g_assert_cmpfloat (json_array_get_double_element (optimizer_betas (c), 0), ==, 0.9);
  g_assert_cmpfloat (json_array_get_double_element (optimizer_betas (c), 1), ==, 0.999);
  g_assert_cmpfloat (json_object_get_double_member (params, "eps"), ==, 1e-8);
  g_assert_cmpfloat (json_object_get_double_member (params, "weight_decay"), ==, 0.0);
  sched = mixprec_config_get_scheduler_params (c);
  g_assert_cmpint (json_object_get_int_member (sched, "warmup_min_lr"), ==, 0);
  g_assert_cmpfloat (json_object_get_double_member (sched, "warmup_max_lr"), ==, 5e-5);
  g_assert_cmpint (json_object_get_int_member (sched, "warmup_num_steps"), ==, 0);

  /* The resolved values are what to_data() prints: no "auto" is left
   * but mixprec.comm's own. */
  text = mixprec_config_to_data (c, NULL);
  g_assert_nonnull (strstr (text, "\"comm\": \"auto\""));
  g_assert_null (strstr (strstr (text, "\"auto\"") + 1, "\"auto\""));
  g_assert_nonnull (strstr (text, "\"lr\": 5e-05"));
  assert_round_trip (c);

  /* The world size completes the batch: 8 * 1 * 4. */
  g_assert_true (mixprec_config_resolve_batch (c, 4, NULL));
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 32);
}

/* What the Trainer's command line would pass, as overrides. */
static void
test_config_auto_overrides (void)
{
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
  g_autofree gchar *path = g_test_build_filename (G_TEST_DIST, "configs", "hf-trainer-auto.json", NULL);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = NULL;
  g_auto(GStrv) listed = NULL;
  static const gchar *const sets[] = {
    "model.hidden_size=4096", "optimizer.params.lr=3e-4", "bf16.enabled=true",
    "train_micro_batch_size_per_gpu=4", "gradient_accumulation_steps=2",
    "optimizer.params.betas=[0.9, 0.95]", "scheduler.params.warmup_num_steps=100",
    "optimizer.params.lr=2e-4",
  };
  static const gchar *const expected[] = {
    "fp16.enabled: \"auto\" -> false (DeepSpeed's default; the Trainer enables it only for --fp16)",
    "train_batch_size: \"auto\" -> null (derived as train_micro_batch_size_per_gpu * "
    "gradient_accumulation_steps * world size once the world size is known)",
    "gradient_clipping: \"auto\" -> 1.0 (the Trainer's default --max_grad_norm)",
    /* The Trainer's formulas: hidden^2, 0.9 * hidden^2, 10 * hidden. */
    "zero_optimization.reduce_bucket_size: \"auto\" -> 16777216 (model.hidden_size^2, "
    "model.hidden_size = 4096)",
    "zero_optimization.stage3_prefetch_bucket_size: \"auto\" -> 15099494 (0.9 * "
    "model.hidden_size^2, model.hidden_size = 4096)",
    "zero_optimization.stage3_param_persistence_threshold: \"auto\" -> 40960 (10 * "
    "model.hidden_size, model.hidden_size = 4096)",
    "optimizer.params.eps: \"auto\" -> 1e-08 (the Trainer's default --adam_epsilon)",
    "optimizer.params.weight_decay: \"auto\" -> 0.0 (the Trainer's default --weight_decay)",
    "scheduler.params.warmup_min_lr: \"auto\" -> 0 (the value the Trainer writes)",
    "scheduler.params.warmup_max_lr: \"auto\" -> 0.0002 (optimizer.params.lr: the Trainer sets "
    "both from --learning_rate)",
    "wall_clock_breakdown: a DeepSpeed setting for a feature libmixprec does not implement; ignored",
    "zero_optimization.stage3_gather_16bit_weights_on_model_save: a DeepSpeed ZeRO setting "
    "libmixprec does not implement; ignored",
  };
  static const gchar *const expected_list[] = {
    "model.hidden_size=4096", "bf16.enabled=true", "train_micro_batch_size_per_gpu=4",
    "gradient_accumulation_steps=2", "optimizer.params.betas=[0.9, 0.95]",
    "scheduler.params.warmup_num_steps=100", "optimizer.params.lr=0.0002", NULL,
  };

  for (gsize i = 0; i < G_N_ELEMENTS (sets); i++)
    {
      g_assert_true (mixprec_config_loader_parse_override (loader, sets[i], &error));
      g_assert_no_error (error);
    }
  /* Setting a path again replaces its value. */
  listed = mixprec_config_loader_list_overrides (loader);
  g_assert_true (g_strv_equal ((const gchar * const *) listed, expected_list));

  c = mixprec_config_loader_load_file (loader, path, &error);
  g_assert_no_error (error);
  assert_warnings (c, expected, G_N_ELEMENTS (expected));
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_BF16);
  g_assert_cmpuint (mixprec_config_get_reduce_bucket_size (c), ==, 4096 * 4096);
  g_assert_cmpuint (mixprec_config_get_prefetch_bucket_size (c), ==, 15099494);
  g_assert_cmpuint (mixprec_config_get_param_persistence_threshold (c), ==, 40960);
  g_assert_cmpfloat (json_object_get_double_member (mixprec_config_get_optimizer_params (c), "lr"), ==, 2e-4);
  g_assert_cmpfloat (json_array_get_double_element (optimizer_betas (c), 1), ==, 0.95);
  g_assert_cmpint (json_object_get_int_member (mixprec_config_get_scheduler_params (c), "warmup_num_steps"), ==, 100);
  g_assert_true (mixprec_config_resolve_batch (c, 8, NULL));
  g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, 64);
  assert_round_trip (c);
}

/* A batch value the other two fix is left for resolve_batch(). */
static void
test_config_auto_batch (void)
{
  g_autoptr(MixprecConfig) micro = load ("{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": \"auto\","
                                         " \"gradient_accumulation_steps\": 2}");
  g_autoptr(MixprecConfig) steps = load ("{\"train_batch_size\": 64, \"train_micro_batch_size_per_gpu\": 4,"
                                         " \"gradient_accumulation_steps\": \"auto\"}");
  g_autoptr(MixprecConfig) batch = load ("{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": 4,"
                                         " \"gradient_accumulation_steps\": 2}");

  g_assert_true (warned (micro, "train_micro_batch_size_per_gpu: \"auto\" -> null (derived from train_batch_size"));
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (micro), ==, 0);
  g_assert_true (mixprec_config_resolve_batch (micro, 4, NULL));
  g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (micro), ==, 8);

  g_assert_true (warned (steps, "gradient_accumulation_steps: \"auto\" -> null (derived from train_batch_size"));
  g_assert_true (mixprec_config_resolve_batch (steps, 8, NULL));
  g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (steps), ==, 2);

  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (batch)), ==, 1);
  g_assert_true (mixprec_config_resolve_batch (batch, 2, NULL));
  g_assert_cmpuint (mixprec_config_get_train_batch_size (batch), ==, 16);
}

/* An "auto" with neither a derivation nor a default names the override. */
static void
test_config_auto_unresolved (void)
{
  const gchar *json = "{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\": {\"total_num_steps\": \"auto\","
                      " \"warmup_num_steps\": \"auto\"}}, \"zero_optimization\": {\"allgather_bucket_size\": \"auto\"}}";
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();

  g_assert_null (c);
  assert_well_formed (error);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
  g_assert_cmpuint (count_lines (error->message), ==, 2);
  g_assert_true (has_line_containing (error->message, "zero_optimization.allgather_bucket_size: ",
                                      "pass the value with --set zero_optimization.allgather_bucket_size=VALUE "
                                      "(mixprec_config_loader_set_override())"));
  g_assert_true (has_line_containing (error->message, "scheduler.params.total_num_steps: ",
                                      "--set scheduler.params.total_num_steps=VALUE"));
  g_clear_error (&error);

  g_assert_true (mixprec_config_loader_set_override (loader, "scheduler.params.total_num_steps", "1000", NULL));
  g_assert_true (mixprec_config_loader_set_override (loader, "zero_optimization.allgather_bucket_size", "2e8", NULL));
  c = mixprec_config_loader_load_data (loader, json, &error);
  g_assert_no_error (error);
  g_assert_cmpint (json_object_get_int_member (mixprec_config_get_scheduler_params (c), "total_num_steps"), ==, 1000);
  g_assert_cmpuint (mixprec_config_get_allgather_bucket_size (c), ==, 200000000);
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 1);
}

/* ------------------------------------------------------------ overrides */

static void
test_config_overrides_values (void)
{
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) c = NULL;

  /* JSON values, a bare word as a string, objects created on the way. */
  g_assert_true (mixprec_config_loader_set_override (loader, "optimizer.type", "AdamW", NULL));
  g_assert_true (mixprec_config_loader_set_override (loader, "optimizer.params.lr", "1e-3", NULL));
  g_assert_true (mixprec_config_loader_set_override (loader, "zero_optimization.stage", "2", NULL));
  g_assert_true (mixprec_config_loader_set_override (loader, "mixprec.fp32_modules", "[\"LayerNorm\"]", NULL));
  g_assert_true (mixprec_config_loader_set_override (loader, "fp16", "{\"enabled\": true}", NULL));
  g_assert_true (mixprec_config_loader_set_override (loader, "fp16.loss_scale_window", "500", NULL));
  c = mixprec_config_loader_load_data (loader, "{\"zero_optimization\": {\"stage\": 1}, \"optimizer\": null}", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_config_get_optimizer_type (c), ==, "AdamW");
  g_assert_cmpfloat (json_object_get_double_member (mixprec_config_get_optimizer_params (c), "lr"), ==, 1e-3);
  g_assert_cmpuint (mixprec_config_get_zero_stage (c), ==, 2);
  g_assert_cmpstr (mixprec_config_get_fp32_modules (c)[0], ==, "LayerNorm");
  g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, MIXPREC_PRECISION_MODE_FP16);
  g_assert_cmpuint (mixprec_config_get_loss_scale_window (c), ==, 500);
  /* Overrides are not warnings. */
  g_assert_cmpuint (g_strv_length (mixprec_config_get_warnings (c)), ==, 0);
}

static void
test_config_overrides_errors (void)
{
  /* Refused when set: the path or the assignment is malformed. */
  static const struct { const gchar *path, *value, *fragment; MixprecConfigError code; } set_errors[] = {
    { "", "1", "(override): the path is empty", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "fp16..enabled", "true", "fp16..enabled: not a path: key 2 is empty", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { ".fp16", "true", ".fp16: not a path: key 1 is empty", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "fp16.enabled", " ", "fp16.enabled: the override has no value", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
  };
  /* Refused when a document is read: the path names no setting, or the
   * value breaks the key's rule. */
  static const struct { const gchar *assignment, *fragment; MixprecConfigError code; } load_errors[] = {
    { "cuda_visible_devices=0", "cuda_visible_devices: set by an override but unknown in the top level", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "gradient_cliping=1", "gradient_cliping: unknown key in the top level (did you mean gradient_clipping?)", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "zero_optimization.bucket=1", "zero_optimization.bucket: unknown key in zero_optimization", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "optimizer.extra=1", "optimizer.extra: unknown key in optimizer; the keys are type, params", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "fp16.enabled.value=1", "fp16.enabled.value: cannot be set: fp16.enabled holds true, not an object", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
    { "fp16.loss_scale_window=-3", "fp16.loss_scale_window: must be a positive integer, got -3", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
    { "zero_optimization.stage=three", "zero_optimization.stage: must be an integer from 0 to 3, got \"three\"", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
    { "model.hidden_size=0", "model.hidden_size: must be a positive integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
    { "model.hidden_size=64.5", "model.hidden_size: must be a positive integer", MIXPREC_CONFIG_ERROR_INVALID_VALUE },
    { "model.layers=12", "model.layers: unknown override; the model's only setting is model.hidden_size", MIXPREC_CONFIG_ERROR_UNKNOWN_KEY },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (set_errors); i++)
    {
      g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
      g_autoptr(GError) error = NULL;
      g_auto(GStrv) listed = NULL;

      g_assert_false (mixprec_config_loader_set_override (loader, set_errors[i].path, set_errors[i].value, &error));
      g_assert_error (error, MIXPREC_CONFIG_ERROR, (gint) set_errors[i].code);
      g_assert_true (g_str_has_prefix (error->message, set_errors[i].fragment));
      listed = mixprec_config_loader_list_overrides (loader);
      g_assert_cmpuint (g_strv_length (listed), ==, 0);
    }
  {
    g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
    g_autoptr(GError) error = NULL;

    g_assert_false (mixprec_config_loader_parse_override (loader, "fp16.enabled", &error));
    g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
    g_assert_cmpstr (error->message, ==, "fp16.enabled: not an override; write path=VALUE, such as "
                     "optimizer.params.lr=3e-4");
  }

  for (gsize i = 0; i < G_N_ELEMENTS (load_errors); i++)
    {
      g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = NULL;

      g_test_message ("--set %s", load_errors[i].assignment);
      g_assert_true (mixprec_config_loader_parse_override (loader, load_errors[i].assignment, NULL));
      c = mixprec_config_loader_load_data (loader, "{\"fp16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"SGD\"}}", &error);
      g_assert_null (c);
      assert_well_formed (error);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, (gint) load_errors[i].code);
      g_assert_cmpuint (count_lines (error->message), ==, 1);
      g_assert_true (g_str_has_prefix (error->message, load_errors[i].fragment));
    }
}

/* ------------------------------------------------------------ real files */

/* configs/real/ holds DeepSpeed configuration files as their projects
 * publish them (README gives each one's origin) and EXPECTED, what each
 * must do, one line per file:
 *
 *   NAME ok                           loads with no error
 *   NAME needs-override PATH=VALUE... fails only with errors that each name
 *                                     one of the PATHs to --set (an "auto"
 *                                     nothing resolves), then loads with
 *                                     those overrides
 *   NAME refused TEXT                 fails as unsupported, with TEXT (which
 *                                     names the missing feature) in the error
 *   NAME invalid TEXT                 fails with TEXT in the error: a file
 *                                     today's DeepSpeed refuses too
 *
 * Every file has a line and every line a file, so that a file added
 * without an expectation, or left out of the distribution, fails. */

static void
check_real_needs_override (const gchar *path,
                           const gchar *assignments)
{
  g_auto(GStrv) sets = g_strsplit (assignments, " ", -1);
  g_autofree gboolean *named = g_new0 (gboolean, g_strv_length (sets));
  g_autoptr(MixprecConfigLoader) loader = mixprec_config_loader_new ();
  g_autoptr(MixprecConfig) c = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) lines = NULL;

  c = mixprec_config_new_from_file (path, &error);
  g_assert_null (c);
  assert_well_formed (error);
  lines = g_strsplit (error->message, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      const gchar *set = strstr (lines[i], "--set ");
      g_autofree gchar *prefix = NULL;
      gboolean found = FALSE;

      g_test_message ("  %s", lines[i]);
      g_assert_nonnull (set);
      set += strlen ("--set ");
      prefix = g_strndup (set, strchr (set, '=') + 1 - set);
      for (guint j = 0; sets[j] != NULL; j++)
        if (g_str_has_prefix (sets[j], prefix))
          found = named[j] = TRUE;
      if (!found)
        g_error ("%s: the error names %s, which EXPECTED does not list", path, prefix);
    }
  g_clear_error (&error);
  for (guint j = 0; sets[j] != NULL; j++)
    {
      gboolean parsed;

      if (!named[j])
        g_error ("%s: no error names the override %s", path, sets[j]);
      parsed = mixprec_config_loader_parse_override (loader, sets[j], &error);

      g_assert_no_error (error);
      g_assert_true (parsed);
    }
  c = mixprec_config_loader_load_file (loader, path, &error);
  g_assert_no_error (error);
  assert_round_trip (c);
}

static void
test_config_real_files (void)
{
  g_autofree gchar *dir_path = g_test_build_filename (G_TEST_DIST, "configs", "real", NULL);
  g_autofree gchar *expected_path = g_build_filename (dir_path, "EXPECTED", NULL);
  g_autoptr(GHashTable) listed = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GDir) dir = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;
  guint n_ok = 0, n_override = 0, n_refused = 0, n_invalid = 0;
  const gchar *name;

  g_assert_true (g_file_get_contents (expected_path, &text, NULL, &error));
  g_assert_no_error (error);
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) fields = NULL;
      g_autofree gchar *path = NULL;
      g_autoptr(MixprecConfig) c = NULL;

      g_strstrip (lines[i]);
      if (*lines[i] == '\0' || *lines[i] == '#')
        continue;
      fields = g_strsplit (lines[i], " ", 3);
      g_assert_nonnull (fields[1]);
      g_test_message ("%s", lines[i]);
      g_assert_true (g_str_has_suffix (fields[0], ".json"));
      g_assert_false (g_hash_table_contains (listed, fields[0]));
      g_hash_table_add (listed, g_strdup (fields[0]));
      path = g_build_filename (dir_path, fields[0], NULL);
      g_assert_true (g_file_test (path, G_FILE_TEST_IS_REGULAR));

      if (g_str_equal (fields[1], "ok"))
        {
          g_assert_null (fields[2]);
          c = mixprec_config_new_from_file (path, &error);
          g_assert_no_error (error);
          assert_round_trip (c);
          n_ok++;
        }
      else if (g_str_equal (fields[1], "needs-override"))
        {
          g_assert_nonnull (fields[2]);
          check_real_needs_override (path, fields[2]);
          n_override++;
        }
      else if (g_str_equal (fields[1], "refused") || g_str_equal (fields[1], "invalid"))
        {
          gboolean refused = g_str_equal (fields[1], "refused");

          g_assert_nonnull (fields[2]);
          c = mixprec_config_new_from_file (path, &error);
          g_assert_null (c);
          assert_well_formed (error);
          g_test_message ("  %s", error->message);
          if (refused)
            g_assert_cmpint (error->code, ==, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
          else
            g_assert_cmpint (error->code, !=, MIXPREC_CONFIG_ERROR_PARSE);
          if (strstr (error->message, fields[2]) == NULL)
            g_error ("%s: expected \"%s\" in: %s", fields[0], fields[2], error->message);
          g_clear_error (&error);
          if (refused)
            n_refused++;
          else
            n_invalid++;
        }
      else
        g_error ("EXPECTED: %s: unknown outcome %s", fields[0], fields[1]);
    }

  dir = g_dir_open (dir_path, 0, &error);
  g_assert_no_error (error);
  while ((name = g_dir_read_name (dir)) != NULL)
    if (g_str_has_suffix (name, ".json") && !g_hash_table_contains (listed, name))
      g_error ("configs/real/%s: no line in EXPECTED", name);

  g_test_message ("%u files: %u load, %u need overrides, %u refused (missing feature), "
                  "%u invalid", g_hash_table_size (listed), n_ok, n_override, n_refused,
                  n_invalid);
  g_assert_cmpuint (g_hash_table_size (listed), >=, 40);
}

/* ------------------------------------------------------------ batch */

static void
test_config_resolve_batch (void)
{
  /* DeepSpeed's _configure_train_batch_size: train = micro * gas * world;
   * the missing one is derived, gas defaults to 1. 0 means unset. */
  static const struct {
    guint batch, micro, gas, world;
    gboolean ok;
    guint want_batch, want_micro, want_gas;
  } cases[] = {
    { 64, 4, 2, 8, TRUE, 64, 4, 2 },
    { 64, 4, 0, 8, TRUE, 64, 4, 2 },
    { 64, 0, 2, 8, TRUE, 64, 4, 2 },
    { 0, 4, 2, 8, TRUE, 64, 4, 2 },
    { 64, 0, 0, 8, TRUE, 64, 8, 1 },
    { 0, 4, 0, 8, TRUE, 32, 4, 1 },
    { 7, 7, 0, 1, TRUE, 7, 7, 1 },
    { 64, 4, 2, 4, FALSE, 0, 0, 0 },
    { 30, 4, 0, 2, FALSE, 0, 0, 0 },
    { 2, 0, 0, 4, FALSE, 0, 0, 0 },
    { 12, 0, 5, 1, FALSE, 0, 0, 0 },
    { 0, 0, 2, 8, FALSE, 0, 0, 0 },
    { 0, 0, 0, 1, FALSE, 0, 0, 0 },
    { 0, 65536, 65536, 2, FALSE, 0, 0, 0 },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GString) json = g_string_new ("{");
      g_autoptr(MixprecConfig) c = NULL;
      g_autoptr(GError) error = NULL;

      if (cases[i].batch)
        g_string_append_printf (json, "\"train_batch_size\": %u,", cases[i].batch);
      if (cases[i].micro)
        g_string_append_printf (json, "\"train_micro_batch_size_per_gpu\": %u,", cases[i].micro);
      if (cases[i].gas)
        g_string_append_printf (json, "\"gradient_accumulation_steps\": %u,", cases[i].gas);
      g_string_append (json, "\"fp16\": {}}");
      c = load (json->str);

      g_test_message ("%s on %u ranks", json->str, cases[i].world);
      if (cases[i].ok)
        {
          g_assert_true (mixprec_config_resolve_batch (c, cases[i].world, &error));
          g_assert_no_error (error);
          g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, cases[i].want_batch);
          g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, cases[i].want_micro);
          g_assert_cmpuint (mixprec_config_get_gradient_accumulation_steps (c), ==, cases[i].want_gas);
          /* Resolving again with the same world size agrees with itself. */
          g_assert_true (mixprec_config_resolve_batch (c, cases[i].world, NULL));
          assert_round_trip (c);
        }
      else
        {
          g_assert_false (mixprec_config_resolve_batch (c, cases[i].world, &error));
          g_assert_nonnull (error);
          g_assert_true (error->domain == MIXPREC_CONFIG_ERROR);
          g_assert_true (g_str_has_prefix (error->message, "train_batch_size: "));
          /* A failed resolution changes nothing. */
          g_assert_cmpuint (mixprec_config_get_train_batch_size (c), ==, cases[i].batch);
          g_assert_cmpuint (mixprec_config_get_train_micro_batch_size_per_gpu (c), ==, cases[i].micro);
        }
    }
}

/* mixprec.master_weights and mixprec.optimizer_states: what each spelling
 * resolves to, DeepSpeed's keys keeping their meaning, and the resolved
 * document reading back to the same. */
static void
test_config_representation (void)
{
  static const struct {
    const gchar *json;
    MixprecPrecisionMode mode;
    MixprecMasterWeights master;
    MixprecStateFormat exp_avg, exp_avg_sq, other;
    guint block_size;
  } cases[] = {
    { "{}", MIXPREC_PRECISION_MODE_FP32, MIXPREC_MASTER_WEIGHTS_FP32,
      MIXPREC_STATE_FORMAT_FP32, MIXPREC_STATE_FORMAT_FP32, MIXPREC_STATE_FORMAT_FP32, 0 },
    { "{\"bf16\": {\"enabled\": true}}", MIXPREC_PRECISION_MODE_BF16, MIXPREC_MASTER_WEIGHTS_FP32,
      MIXPREC_STATE_FORMAT_FP32, MIXPREC_STATE_FORMAT_FP32, MIXPREC_STATE_FORMAT_FP32, 0 },
    { "{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true,"
      " \"bf16_master_weights_and_grads\": true}}",
      MIXPREC_PRECISION_MODE_BF16_NO_MASTER, MIXPREC_MASTER_WEIGHTS_NONE,
      MIXPREC_STATE_FORMAT_BF16, MIXPREC_STATE_FORMAT_BF16, MIXPREC_STATE_FORMAT_BF16, 0 },
    { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"master_weights\": \"remainder\","
      " \"optimizer_states\": {\"exp_avg\": \"int8\", \"exp_avg_sq\": \"int8\", \"block_size\": 256}}}",
      MIXPREC_PRECISION_MODE_BF16_NO_MASTER, MIXPREC_MASTER_WEIGHTS_REMAINDER,
      MIXPREC_STATE_FORMAT_INT8, MIXPREC_STATE_FORMAT_INT8, MIXPREC_STATE_FORMAT_FP32, 256 },
    { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"master_weights\": \"kahan\","
      " \"optimizer_states\": \"int4\"}}",
      MIXPREC_PRECISION_MODE_BF16_NO_MASTER, MIXPREC_MASTER_WEIGHTS_KAHAN,
      MIXPREC_STATE_FORMAT_INT4, MIXPREC_STATE_FORMAT_INT4, MIXPREC_STATE_FORMAT_INT4, 0 },
    { "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"master_weights\": \"none\","
      " \"optimizer_states\": {\"default\": \"bf16_scaled\", \"exp_avg\": \"fp8_e4m3_scaled\","
      " \"block_size\": 4096}}}",
      MIXPREC_PRECISION_MODE_FP16_NO_MASTER, MIXPREC_MASTER_WEIGHTS_NONE,
      MIXPREC_STATE_FORMAT_FP8_E4M3_SCALED, MIXPREC_STATE_FORMAT_BF16_SCALED,
      MIXPREC_STATE_FORMAT_BF16_SCALED, 4096 },
    /* The mixprec key may repeat what DeepSpeed's says. */
    { "{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}, \"mixprec\":"
      " {\"optimizer_states\": \"bf16\", \"master_weights\": \"fp32\"}}",
      MIXPREC_PRECISION_MODE_BF16, MIXPREC_MASTER_WEIGHTS_FP32,
      MIXPREC_STATE_FORMAT_BF16, MIXPREC_STATE_FORMAT_BF16, MIXPREC_STATE_FORMAT_BF16, 0 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (cases[i].json, -1, &error);
      g_autoptr(MixprecConfig) again = NULL;
      g_autofree gchar *text = NULL;

      g_test_message ("%s", cases[i].json);
      g_assert_no_error (error);
      g_assert_cmpint (mixprec_config_get_precision_mode (c), ==, cases[i].mode);
      g_assert_cmpint (mixprec_config_get_master_weights (c), ==, cases[i].master);
      g_assert_cmpint (mixprec_config_get_optimizer_state_format (c, "exp_avg"), ==, cases[i].exp_avg);
      g_assert_cmpint (mixprec_config_get_optimizer_state_format (c, "exp_avg_sq"), ==, cases[i].exp_avg_sq);
      g_assert_cmpint (mixprec_config_get_optimizer_state_format (c, NULL), ==, cases[i].other);
      g_assert_cmpuint (mixprec_config_get_optimizer_state_block_size (c), ==, cases[i].block_size);

      text = mixprec_config_to_data (c, NULL);
      again = mixprec_config_new_from_data (text, -1, &error);
      g_assert_no_error (error);
      g_assert_cmpint (mixprec_config_get_master_weights (again), ==, cases[i].master);
      g_assert_cmpint (mixprec_config_get_optimizer_state_format (again, "exp_avg"), ==, cases[i].exp_avg);
      g_assert_cmpint (mixprec_config_get_optimizer_state_format (again, "exp_avg_sq"), ==, cases[i].exp_avg_sq);
      g_assert_cmpuint (mixprec_config_get_optimizer_state_block_size (again), ==, cases[i].block_size);
    }
  g_assert_cmpstr (mixprec_master_weights_get_name (MIXPREC_MASTER_WEIGHTS_REMAINDER), ==, "remainder");
  g_assert_cmpstr (mixprec_state_format_get_name (MIXPREC_STATE_FORMAT_FP8_E4M3_SCALED), ==, "fp8_e4m3_scaled");
  g_assert_cmpstr (mixprec_state_format_get_name (99), ==, "invalid");
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/config/bf16-optimizer-states", test_config_bf16_optimizer_states);
  g_test_add_func ("/config/defaults", test_config_defaults);
  g_test_add_func ("/config/timeout", test_config_timeout);
  g_test_add_func ("/config/mode-dtypes", test_config_mode_dtypes);
  g_test_add_func ("/config/reduce-accumulation", test_config_reduce_accumulation);
  g_test_add_func ("/config/overlap-default", test_config_overlap_default);
  g_test_add_func ("/config/stage3-sizes", test_config_stage3_sizes);
  g_test_add_func ("/config/scaler-semantics", test_config_scaler_semantics);
  g_test_add_func ("/config/fronts/mapping", test_config_fronts);
  g_test_add_func ("/config/optimizer/all-errors", test_config_optimizer_all_errors);
  g_test_add_func ("/config/optimizer/implementation-keys",
                   test_config_optimizer_implementation_keys);
  g_test_add_func ("/config/optimizer/deepspeed-only", test_config_optimizer_deepspeed_only);
  g_test_add_func ("/config/fronts/colossalai-training", test_config_fronts_colossal_training);
  g_test_add_func ("/config/invalid/table", test_config_invalid_table);
  g_test_add_func ("/config/invalid/all-errors-listed", test_config_all_errors_listed);
  g_test_add_func ("/config/invalid/suggestions", test_config_suggestions);
  g_test_add_func ("/config/malformed/battery", test_config_malformed);
  g_test_add_func ("/config/malformed/deep-nesting", test_config_deep_nesting);
  g_test_add_func ("/config/malformed/fuzz", test_config_fuzz);
  g_test_add_func ("/config/malformed/files", test_config_file_errors);
  g_test_add_func ("/config/warnings", test_config_warnings);
  g_test_add_func ("/config/zeropp", test_config_zeropp);
  g_test_add_func ("/config/zeropp/qgz-loco", test_config_qgz);
  g_test_add_func ("/config/hpz", test_config_hpz);
  g_test_add_func ("/config/offload-optimizer", test_config_offload_optimizer);
  g_test_add_func ("/config/offload-param", test_config_offload_param);
  g_test_add_func ("/config/corpus/zero2-fp16-warmup", test_config_corpus_zero2_fp16);
  g_test_add_func ("/config/corpus/zero3-bf16-offload", test_config_corpus_zero3_bf16);
  g_test_add_func ("/config/corpus/autocast-bf16", test_config_corpus_autocast);
  g_test_add_func ("/config/corpus/hf-trainer", test_config_corpus_hf_trainer);
  g_test_add_func ("/config/corpus/monitors-profiler", test_config_corpus_monitors);
  g_test_add_func ("/config/corpus/mixprec-sections", test_config_corpus_mixprec_sections);
  g_test_add_func ("/config/to-data", test_config_to_data);
  g_test_add_func ("/config/to-data/stage3-names", test_config_to_data_stage3_names);
  g_test_add_func ("/config/resolve-batch", test_config_resolve_batch);
  g_test_add_func ("/config/unknown-keys/lenient", test_config_unknown_keys_lenient);
  g_test_add_func ("/config/bf16-scaler-keys", test_config_bf16_scaler_keys);
  g_test_add_func ("/config/deepspeed-only/moq", test_config_moq);
  g_test_add_func ("/config/bucket-size-zero", test_config_bucket_size_zero);
  g_test_add_func ("/config/strict", test_config_strict);
  g_test_add_func ("/config/auto/trainer-defaults", test_config_auto_trainer_defaults);
  g_test_add_func ("/config/auto/overrides", test_config_auto_overrides);
  g_test_add_func ("/config/auto/batch", test_config_auto_batch);
  g_test_add_func ("/config/auto/unresolved", test_config_auto_unresolved);
  g_test_add_func ("/config/overrides/values", test_config_overrides_values);
  g_test_add_func ("/config/overrides/errors", test_config_overrides_errors);
  g_test_add_func ("/config/corpus/real", test_config_real_files);
  g_test_add_func ("/config/representation/values", test_config_representation);
  g_test_add_func ("/config/fp8/defaults", test_config_fp8_defaults);
  g_test_add_func ("/config/fp4", test_config_fp4);
  g_test_add_func ("/config/fp8/values", test_config_fp8_values);
  g_test_add_func ("/config/fp8/modules", test_config_fp8_modules);
  g_test_add_func ("/config/fp8/unused-keys", test_config_fp8_unused_keys);
  return g_test_run ();
}
