/* test-policy.c — MixprecPrecisionPolicy: per-parameter dtypes for every
 * precision mode, checked against a table written from the rules in
 * mixprec.json(5), not from the code. */
#include <mixprec/mixprec.h>

#define F32 MIXPREC_DTYPE_FLOAT32
#define F16 MIXPREC_DTYPE_FLOAT16
#define B16 MIXPREC_DTYPE_BFLOAT16
#define MODE MIXPREC_PRECISION_REASON_MODE
#define MODULE MIXPREC_PRECISION_REASON_FP32_MODULE
#define PARAM MIXPREC_PRECISION_REASON_FP32_PARAM
#define SAFE MIXPREC_PRECISION_REASON_AUTOCAST_SAFE_MODULE

typedef struct
{
  const gchar *config;
  const gchar *name;
  const gchar *module_type;
  MixprecDType working, master;
  gboolean has_master;
  MixprecDType accum, comm;
  MixprecPrecisionReason reason;
} PolicyCase;

#define FP16_DOC "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"]," \
                 " \"fp32_params\": [\"*.bias\", \"lm_head.?eight\"]}}"
#define BF16_DOC "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"fp32_modules\": [\"torch.nn.LayerNorm\"]}}"
#define NO_MASTER_DOC "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}," \
                      " \"mixprec\": {\"fp32_modules\": [\"Embedding\"]}}"
/* Apex O3 with its documented keep_batchnorm_fp32 variant. */
#define FP16_NO_MASTER_DOC "{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\"," \
                           " \"keep_batchnorm_fp32\": true}}"
#define AUTOCAST_BF16_DOC "{\"torch_autocast\": {\"enabled\": true, \"lower_precision_safe_modules\": [\"torch.nn.Linear\"]}," \
                          " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"], \"fp32_params\": [\"head.*\"]}}"
#define AUTOCAST_FP16_DOC "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"fp16\"}}"
#define FP32_DOC "{\"communication_data_type\": \"bf16\", \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"]}}"

static const PolicyCase cases[] = {
  /* fp32: one copy, FP32 everywhere. */
  { "{}", "layers.0.fc.weight", "Linear", F32, F32, FALSE, F32, F32, MODE },
  { "{}", "layers.0.norm.weight", "LayerNorm", F32, F32, FALSE, F32, F32, MODE },
  /* fp32 with bf16-compressed communication; FP32 modules stay FP32 on the wire too. */
  { FP32_DOC, "fc.weight", "Linear", F32, F32, FALSE, F32, B16, MODE },
  { FP32_DOC, "norm.weight", "LayerNorm", F32, F32, FALSE, F32, F32, MODULE },

  /* fp16: FP16 working copy, FP32 master, DeepSpeed's FP16 accumulation. */
  { FP16_DOC, "layers.0.attn.weight", "Linear", F16, F32, TRUE, F16, F16, MODE },
  { FP16_DOC, "tok.weight", "Embedding", F16, F32, TRUE, F16, F16, MODE },
  { FP16_DOC, "layers.0.norm.weight", "LayerNorm", F32, F32, FALSE, F32, F32, MODULE },
  { FP16_DOC, "layers.0.norm.weight", "torch.nn.LayerNorm", F32, F32, FALSE, F32, F32, MODULE },
  { FP16_DOC, "layers.0.attn.bias", "Linear", F32, F32, FALSE, F32, F32, PARAM },
  { FP16_DOC, "layers.0.norm.bias", "LayerNorm", F32, F32, FALSE, F32, F32, PARAM },
  { FP16_DOC, "lm_head.weight", "Linear", F32, F32, FALSE, F32, F32, PARAM },
  { FP16_DOC, "lm_head.weights", "Linear", F16, F32, TRUE, F16, F16, MODE },
  { FP16_DOC, "x.weight", "layernorm", F16, F32, TRUE, F16, F16, MODE },
  { FP16_DOC, "x.weight", NULL, F16, F32, TRUE, F16, F16, MODE },
  { FP16_DOC, "x.weight", "", F16, F32, TRUE, F16, F16, MODE },

  /* bf16: FP32 master and FP32 accumulation (libmixprec's default). */
  { BF16_DOC, "fc.weight", "Linear", B16, F32, TRUE, F32, F32, MODE },
  { BF16_DOC, "norm.weight", "LayerNorm", F32, F32, FALSE, F32, F32, MODULE },
  { BF16_DOC, "norm.weight", "apex.normalization.LayerNorm", F32, F32, FALSE, F32, F32, MODULE },

  /* bf16 without master: one BF16 copy, BF16 accumulation. */
  { NO_MASTER_DOC, "fc.weight", "Linear", B16, B16, FALSE, B16, B16, MODE },
  { NO_MASTER_DOC, "tok.weight", "Embedding", F32, F32, FALSE, F32, F32, MODULE },

  /* fp16 without master: one FP16 copy, FP16 accumulation; batch norm
   * kept in FP32 as at O2. */
  { FP16_NO_MASTER_DOC, "fc.weight", "Linear", F16, F16, FALSE, F16, F16, MODE },
  { FP16_NO_MASTER_DOC, "bn.weight", "BatchNorm2d", F32, F32, FALSE, F32, F32, MODULE },

  /* autocast: FP32 parameters; safe modules communicate in the autocast dtype. */
  { AUTOCAST_BF16_DOC, "fc.weight", "Linear", F32, F32, FALSE, F32, B16, SAFE },
  { AUTOCAST_BF16_DOC, "conv.weight", "Conv2d", F32, F32, FALSE, F32, F32, MODE },
  { AUTOCAST_BF16_DOC, "norm.weight", "LayerNorm", F32, F32, FALSE, F32, F32, MODULE },
  { AUTOCAST_BF16_DOC, "head.weight", "Linear", F32, F32, FALSE, F32, F32, PARAM },
  { AUTOCAST_BF16_DOC, "fc.weight", NULL, F32, F32, FALSE, F32, F32, MODE },
  { AUTOCAST_FP16_DOC, "conv.weight", "Conv3d", F32, F32, FALSE, F32, F16, SAFE },
  { AUTOCAST_FP16_DOC, "fc.weight", "torch.nn.Linear", F32, F32, FALSE, F32, F16, SAFE },
  { AUTOCAST_FP16_DOC, "tok.weight", "Embedding", F32, F32, FALSE, F32, F32, MODE },
};

static MixprecPrecisionPolicy *
policy_for (const gchar *json)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecPrecisionPolicy *policy;

  g_assert_no_error (error);
  policy = mixprec_precision_policy_new_from_config (config, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_precision_policy_get_config (policy) == config);
  return policy;
}

static void
test_policy_table (void)
{
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const PolicyCase *t = &cases[i];
      g_autoptr(MixprecPrecisionPolicy) policy = policy_for (t->config);
      g_autoptr(MixprecParamPrecision) p = NULL;
      g_autoptr(GError) error = NULL;
      MixprecDType working, master, accum, comm;
      gboolean has_master;

      g_test_message ("%s / %s (%s)", t->config, t->name, t->module_type ? t->module_type : "NULL");
      g_assert_true (mixprec_precision_policy_resolve (policy, t->name, t->module_type,
                                                       &working, &master, &has_master,
                                                       &accum, &comm, &error));
      g_assert_no_error (error);
      g_assert_cmpint (working, ==, t->working);
      g_assert_cmpint (master, ==, t->master);
      g_assert_cmpint (has_master, ==, t->has_master);
      g_assert_cmpint (accum, ==, t->accum);
      g_assert_cmpint (comm, ==, t->comm);

      p = mixprec_precision_policy_lookup (policy, t->name, t->module_type, &error);
      g_assert_no_error (error);
      g_assert_cmpint (p->working_dtype, ==, t->working);
      g_assert_cmpint (p->master_dtype, ==, t->master);
      g_assert_cmpint (p->has_master, ==, t->has_master);
      g_assert_cmpint (p->grad_accum_dtype, ==, t->accum);
      g_assert_cmpint (p->comm_dtype, ==, t->comm);
      g_assert_cmpint (p->reason, ==, t->reason);
    }
}

static void
test_policy_optional_outputs (void)
{
  g_autoptr(MixprecPrecisionPolicy) policy = policy_for (FP16_DOC);
  MixprecDType comm = F32;

  g_assert_true (mixprec_precision_policy_resolve (policy, "fc.weight", "Linear",
                                                   NULL, NULL, NULL, NULL, &comm, NULL));
  g_assert_cmpint (comm, ==, F16);
}

static void
test_policy_invalid_names (void)
{
  g_autoptr(MixprecPrecisionPolicy) policy = policy_for (FP16_DOC);
  static const struct { const gchar *name, *type; } bad[] = {
    { NULL, "Linear" }, { "", "Linear" }, { "w\xFF", "Linear" }, { "w", "Lin\xC0\xAF" },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecParamPrecision) p = NULL;
      MixprecDType working = MIXPREC_DTYPE_FLOAT8_E4M3;

      g_assert_false (mixprec_precision_policy_resolve (policy, bad[i].name, bad[i].type,
                                                        &working, NULL, NULL, NULL, NULL, &error));
      g_assert_error (error, MIXPREC_PRECISION_POLICY_ERROR, MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME);
      /* Nothing is written on failure. */
      g_assert_cmpint (working, ==, MIXPREC_DTYPE_FLOAT8_E4M3);
      g_clear_error (&error);
      p = mixprec_precision_policy_lookup (policy, bad[i].name, bad[i].type, &error);
      g_assert_null (p);
      g_assert_error (error, MIXPREC_PRECISION_POLICY_ERROR, MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME);
    }
}

static void
test_policy_boxed (void)
{
  g_autoptr(MixprecPrecisionPolicy) policy = policy_for (BF16_DOC);
  g_autoptr(MixprecParamPrecision) p = mixprec_precision_policy_lookup (policy, "fc.weight", "Linear", NULL);
  MixprecParamPrecision *copy = g_boxed_copy (MIXPREC_TYPE_PARAM_PRECISION, p);

  g_assert_true (copy != p);
  g_assert_cmpint (copy->working_dtype, ==, B16);
  g_assert_cmpint (copy->master_dtype, ==, F32);
  g_assert_true (copy->has_master);
  g_boxed_free (MIXPREC_TYPE_PARAM_PRECISION, copy);
}

/* A policy holds its configuration: dropping the caller's reference first
 * must leave the policy working. */
static void
test_policy_keeps_config (void)
{
  MixprecConfig *config = mixprec_config_new_from_data (NO_MASTER_DOC, -1, NULL);
  g_autoptr(MixprecPrecisionPolicy) policy = mixprec_precision_policy_new_from_config (config, NULL);
  MixprecDType working;

  g_object_unref (config);
  g_assert_true (mixprec_precision_policy_resolve (policy, "fc.weight", "Linear",
                                                   &working, NULL, NULL, NULL, NULL, NULL));
  g_assert_cmpint (working, ==, B16);
}

/* fp8.modules by module type (with or without a package prefix), minus
 * what mixprec.fp32_modules and mixprec.fp32_params keep in FP32; nothing
 * while fp8.enabled is false. */
static void
test_policy_fp8 (void)
{
  g_autoptr(MixprecPrecisionPolicy) policy =
    policy_for ("{\"bf16\": {\"enabled\": true},"
                " \"fp8\": {\"enabled\": true, \"modules\": [\"Linear\", \"torch.nn.Conv1d\"]},"
                " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"], \"fp32_params\": [\"head.*\"]}}");
  g_autoptr(MixprecPrecisionPolicy) off =
    policy_for ("{\"bf16\": {\"enabled\": true}, \"fp8\": {\"modules\": [\"Linear\"]}}");
  static const struct {
    const gchar *name;
    const gchar *type;
    gboolean fp8;
  } fp8_cases[] = {
    { "fc.weight", "Linear", TRUE },
    { "fc.bias", "torch.nn.Linear", TRUE },
    { "conv.weight", "Conv1d", TRUE },
    { "conv.weight", "torch.nn.Conv1d", TRUE },
    { "conv.weight", "Conv2d", FALSE },
    { "ln.weight", "LayerNorm", FALSE },
    { "head.weight", "Linear", FALSE },        /* fp32_params */
    { "fc.weight", NULL, FALSE },
    { "fc.weight", "", FALSE },
    { "", "Linear", FALSE },
    { "tok.weight", "Embedding", FALSE },
  };

  for (guint i = 0; i < G_N_ELEMENTS (fp8_cases); i++)
    {
      g_test_message ("%s (%s)", fp8_cases[i].name, fp8_cases[i].type);
      g_assert_cmpint (mixprec_precision_policy_is_fp8 (policy, fp8_cases[i].name, fp8_cases[i].type), ==,
                       fp8_cases[i].fp8);
      g_assert_false (mixprec_precision_policy_is_fp8 (off, fp8_cases[i].name, fp8_cases[i].type));
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/policy/table", test_policy_table);
  g_test_add_func ("/policy/optional-outputs", test_policy_optional_outputs);
  g_test_add_func ("/policy/invalid-names", test_policy_invalid_names);
  g_test_add_func ("/policy/boxed", test_policy_boxed);
  g_test_add_func ("/policy/keeps-config", test_policy_keeps_config);
  g_test_add_func ("/policy/fp8", test_policy_fp8);
  return g_test_run ();
}
