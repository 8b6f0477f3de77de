/* test-engine.c — the step pipeline end to end with scripted gradients.
 * Expected values come from the formulas of mixprec.json(5) and torch's
 * clip_grad_norm_ (clipping, unscaling, averaging), DeepSpeed's published scaler sequence, and exact
 * binary arithmetic worked out in the comments. */
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

static MixprecEngine *
engine_from_json (const gchar *json)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  return engine;
}

static MixprecParam *
add_param (MixprecEngine *engine,
           const gchar   *name,
           guint64        rows,
           guint64        cols,
           const gchar   *module_type,
           const gfloat  *values)
{
  g_autoptr(GError) error = NULL;
  guint64 shape[2] = { rows, cols };
  guint n_dims = cols > 0 ? 2 : 1;
  guint64 numel = rows * (cols > 0 ? cols : 1);
  g_autoptr(GBytes) init = g_bytes_new (values, numel * sizeof (gfloat));
  MixprecParam *p = mixprec_engine_register_param (engine, name, shape, n_dims, module_type,
                                                   MIXPREC_DTYPE_FLOAT32, init, &error);
  g_assert_no_error (error);
  return p;
}

static void
set_grad_f32 (MixprecParam *p, const gfloat *values)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) b = g_bytes_new (values, mixprec_param_get_numel (p) * sizeof (gfloat));

  g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, b, &error));
  g_assert_no_error (error);
}

static MixprecStepResult *
one_step (MixprecEngine *engine)
{
  g_autoptr(GError) error = NULL;
  MixprecStepResult *r;

  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_assert_no_error (error);
  r = mixprec_engine_step (engine, &error);
  g_assert_no_error (error);
  g_assert_nonnull (r);
  return r;
}

static gfloat
master_at (MixprecParam *p, guint i)
{
  g_autoptr(GBytes) b = mixprec_param_get_master (p, NULL);
  return ((const gfloat *) g_bytes_get_data (b, NULL))[i];
}

/* A step with one non-finite gradient changes nothing but the counters and
 * the scale: masters, working copies and optimizer state stay bit-identical. */
static void
test_engine_overflow_skips_bit_exact (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2,"
    "            \"hysteresis\": 1},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}}}");
  const gfloat w[6] = { 0.5f, -0.25f, 1.0f, 2.0f, -3.0f, 0.125f };
  const gfloat b[3] = { 0.1f, 0.2f, 0.3f };
  gfloat gw[6] = { 1, 2, 3, 4, 5, 6 };
  const gfloat gb[3] = { 1, 1, 1 };
  MixprecParam *pw = add_param (e, "fc.weight", 2, 3, "Linear", w);
  MixprecParam *pb = add_param (e, "fc.bias", 3, 0, "Linear", b);
  g_autoptr(MixprecStepResult) r1 = NULL;
  g_autoptr(MixprecStepResult) r2 = NULL;
  g_autoptr(GBytes) master_before = NULL, master_after = NULL;
  g_autoptr(GBytes) working_before = NULL, working_after = NULL;
  g_autoptr(GBytes) m_before = NULL, m_after = NULL, v_before = NULL, v_after = NULL;
  gdouble lr_before;

  /* One clean step so the optimizer state is not all zeros. */
  set_grad_f32 (pw, gw);
  set_grad_f32 (pb, gb);
  r1 = one_step (e);
  g_assert_true (r1->applied);
  g_assert_cmpfloat (r1->loss_scale, ==, 256.0);

  master_before = mixprec_param_get_master (pw, NULL);
  working_before = mixprec_param_get_working (pw, MIXPREC_DTYPE_FLOAT16, NULL);
  m_before = mixprec_engine_get_optimizer_state (e, "fc.weight", "exp_avg", NULL);
  v_before = mixprec_engine_get_optimizer_state (e, "fc.weight", "exp_avg_sq", NULL);
  lr_before = mixprec_engine_get_lr (e);

  gw[4] = INFINITY;
  set_grad_f32 (pw, gw);
  set_grad_f32 (pb, gb);
  r2 = one_step (e);
  g_assert_false (r2->applied);
  g_assert_cmpuint (r2->skipped_steps, ==, 1);
  g_assert_cmpuint (r2->applied_steps, ==, 1);
  g_assert_cmpuint (r2->step, ==, 2);
  g_assert_false (isfinite (r2->grad_norm));
  /* hysteresis 1: the first overflow halves the scale (DeepSpeed's
   * DynamicLossScaler; mixprec.json(5), fp16). */
  g_assert_cmpfloat (r2->loss_scale, ==, 256.0);
  g_assert_cmpfloat (r2->next_loss_scale, ==, 128.0);
  g_assert_cmpfloat (mixprec_engine_get_lr (e), ==, lr_before);

  master_after = mixprec_param_get_master (pw, NULL);
  working_after = mixprec_param_get_working (pw, MIXPREC_DTYPE_FLOAT16, NULL);
  m_after = mixprec_engine_get_optimizer_state (e, "fc.weight", "exp_avg", NULL);
  v_after = mixprec_engine_get_optimizer_state (e, "fc.weight", "exp_avg_sq", NULL);
  g_assert_true (g_bytes_equal (master_before, master_after));
  g_assert_true (g_bytes_equal (working_before, working_after));
  g_assert_true (g_bytes_equal (m_before, m_after));
  g_assert_true (g_bytes_equal (v_before, v_after));
}

/* The published DeepSpeed sequence (power 8, window 2, hysteresis 2, ten
 * clean steps) comes out of the engine's step results. */
static void
test_engine_scaler_sequence (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2,"
    "            \"hysteresis\": 2},"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.0}}}");
  const gdouble expected[] = { 256, 256, 512, 512, 1024, 1024, 2048, 2048, 4096, 4096 };
  const gfloat w[2] = { 1, 2 };
  MixprecParam *p = add_param (e, "w", 1, 2, "Linear", w);

  for (guint i = 0; i < G_N_ELEMENTS (expected); i++)
    {
      const gfloat g[2] = { 0.5f, 0.25f };
      g_autoptr(MixprecStepResult) r = NULL;

      set_grad_f32 (p, g);
      r = one_step (e);
      g_assert_cmpfloat (r->next_loss_scale, ==, expected[i]);
    }
}

/* Clipping and unscaling in one factor: with SGD (lr 1, no momentum) the
 * update is exactly the gradient times 1/(scale * coef), where
 * coef = max((norm + 1e-6) / clip, 1) and norm is of the unscaled gradient. */
static void
test_engine_clipping_formula (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"gradient_clipping\": 1.0,"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}");
  const gfloat w[4] = { 0, 0, 0, 0 };
  const gfloat g[4] = { 3, 4, 0, 0 };            /* norm 5 */
  MixprecParam *p = add_param (e, "w", 2, 2, "Linear", w);
  g_autoptr(MixprecStepResult) r = NULL;
  gdouble coef = MAX ((5.0 + 1e-6) / 1.0, 1.0);
  gfloat factor = (gfloat) (1.0 / coef);

  set_grad_f32 (p, g);
  r = one_step (e);
  g_assert_true (r->applied);
  g_assert_cmpfloat_with_epsilon (r->grad_norm, 5.0, 1e-12);
  g_assert_cmpfloat_with_epsilon (r->clip_coef, coef, 1e-12);
  g_assert_cmpfloat_with_epsilon (master_at (p, 0), -3.0f * factor, 1e-6);
  g_assert_cmpfloat_with_epsilon (master_at (p, 1), -4.0f * factor, 1e-6);
  /* The clipped update has norm 1 (to within the 1e-6 of the formula). */
  g_assert_cmpfloat_with_epsilon (hypot (master_at (p, 0), master_at (p, 1)), 1.0, 1e-5);
}

/* fp16 with a static scale: the user writes gradients of the scaled loss;
 * the update is the unscaled gradient. */
static void
test_engine_unscale (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"loss_scale\": 1024},"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}");
  const gfloat w[2] = { 1.0f, 1.0f };
  /* 0.25 * 1024 and 2^-10 * 1024 are exact in fp16. */
  const gfloat g[2] = { 0.25f * 1024, 0.0009765625f * 1024 };
  MixprecParam *p = add_param (e, "w", 1, 2, "Linear", w);
  g_autoptr(MixprecStepResult) r = NULL;

  g_assert_cmpint (mixprec_param_get_working_dtype (p), ==, MIXPREC_DTYPE_FLOAT16);
  g_assert_true (mixprec_param_has_master (p));
  g_assert_cmpfloat (mixprec_engine_get_loss_scale (e), ==, 1024.0);
  set_grad_f32 (p, g);
  r = one_step (e);
  g_assert_cmpfloat (master_at (p, 0), ==, 0.75f);
  g_assert_cmpfloat (master_at (p, 1), ==, 1.0f - 0.0009765625f);
  g_assert_cmpfloat_with_epsilon (r->grad_norm, hypot (0.25, 0.0009765625), 1e-12);
}

/* Gradient accumulation across two micro-steps in the configured dtype.
 * Micro-gradients 1 and 2^-11 (both exact in fp16): their fp32 sum is
 * 1 + 2^-11; in fp16 that sum is a tie between 1 and 1 + 2^-10 and rounds
 * to even, 1. The step averages over the micro-steps (factor 1/2), so SGD
 * with lr 1 moves the weight by -(1 + 2^-11)/2 or by -1/2. */
static void
check_accumulation (const gchar *json,
                    MixprecDType expected_accum,
                    gfloat       first,
                    gfloat       second,
                    gfloat       expected_delta)
{
  g_autoptr(MixprecEngine) e = engine_from_json (json);
  const gfloat w[2] = { 0, 0 };
  MixprecParam *p = add_param (e, "w", 1, 2, "Linear", w);
  const gfloat g1[2] = { first, 0 }, g2[2] = { second, 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;

  g_assert_cmpint (mixprec_param_get_accum_dtype (p), ==, expected_accum);
  set_grad_f32 (p, g1);
  g_assert_true (mixprec_engine_backward_done (e, &error));
  g_assert_false (mixprec_engine_is_accumulation_boundary (e));
  set_grad_f32 (p, g2);
  g_assert_true (mixprec_engine_backward_done (e, &error));
  g_assert_true (mixprec_engine_is_accumulation_boundary (e));
  r = mixprec_engine_step (e, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (master_at (p, 0), ==, -expected_delta);
}

static void
test_engine_accumulation_dtypes (void)
{
  const gfloat fp16_tie = 0.00048828125f;   /* 2^-11 */
  const gfloat bf16_tie = 0.00390625f;      /* 2^-8: 1 + 2^-8 ties in bf16 */

  check_accumulation ("{\"fp16\": {\"enabled\": true, \"loss_scale\": 1},"
                      " \"data_types\": {\"grad_accum_dtype\": \"fp32\"},"
                      " \"gradient_accumulation_steps\": 2,"
                      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}",
                      MIXPREC_DTYPE_FLOAT32, 1.0f, fp16_tie, (1.0f + fp16_tie) / 2);
  check_accumulation ("{\"fp16\": {\"enabled\": true, \"loss_scale\": 1},"
                      " \"data_types\": {\"grad_accum_dtype\": \"fp16\"},"
                      " \"gradient_accumulation_steps\": 2,"
                      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}",
                      MIXPREC_DTYPE_FLOAT16, 1.0f, fp16_tie, 0.5f);
  /* bf16 accumulates in fp32 by default (a deliberate difference from
   * DeepSpeed); asking for bf16 accumulation loses the small gradient. */
  check_accumulation ("{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": 2,"
                      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}",
                      MIXPREC_DTYPE_FLOAT32, 1.0f, bf16_tie, (1.0f + bf16_tie) / 2);
  check_accumulation ("{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": 2,"
                      " \"data_types\": {\"grad_accum_dtype\": \"bf16\"},"
                      " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}",
                      MIXPREC_DTYPE_BFLOAT16, 1.0f, bf16_tie, 0.5f);
}

/* mixprec.fp32_modules: LayerNorm stays FP32 end to end, so a gradient
 * that would underflow in fp16 (1e-8 < 2^-24) still moves its weight. */
static void
test_engine_fp32_modules (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"loss_scale\": 1},"
    " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"]},"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 1.0}}}");
  const gfloat w[2] = { 1, 1 };
  const gfloat g[2] = { 1e-8f, 1e-8f };
  MixprecParam *ln = add_param (e, "ln.weight", 2, 0, "LayerNorm", w);
  MixprecParam *fc = add_param (e, "fc.weight", 1, 2, "Linear", w);
  g_autoptr(MixprecStepResult) r = NULL;

  g_assert_cmpint (mixprec_param_get_working_dtype (ln), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_param_get_grad_dtype (ln), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_param_get_accum_dtype (ln), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_cmpint (mixprec_param_get_comm_dtype (ln), ==, MIXPREC_DTYPE_FLOAT32);
  g_assert_false (mixprec_param_has_master (ln));
  g_assert_cmpint (mixprec_param_get_working_dtype (fc), ==, MIXPREC_DTYPE_FLOAT16);

  set_grad_f32 (ln, g);
  set_grad_f32 (fc, g);
  r = one_step (e);
  g_assert_true (r->applied);
  g_assert_cmpfloat (master_at (ln, 0), ==, 1.0f - 1e-8f);
  /* In fp16 the gradient flushed to zero: the Linear weight did not move. */
  g_assert_cmpfloat (master_at (fc, 0), ==, 1.0f);
}

/* A non-finite gradient that is not checked (fp32 mode, whose
 * mixprec.check_grad_overflow defaults to false) is applied the way
 * torch.nn.utils.clip_grad_norm_() applies it: the clip coefficient
 * max_norm / (norm + 1e-6), clamped to at most 1, is NaN for a NaN norm
 * (every gradient becomes NaN) and 0 for an infinite one (every gradient
 * 0, NaN where it was infinite). Without clipping each value is applied
 * as it is. Checked, the step is skipped. SGD with lr 0.5 makes each
 * expectation exact: p - 0.5 * g. */
static void
test_engine_nonfinite_unchecked (void)
{
  static const struct {
    const gchar *extra;
    gfloat bad;
    gboolean applied;
    gboolean all_nan;        /* every element NaN */
    gfloat other;            /* else the clean elements' value after the step */
  } cases[] = {
    { ", \"gradient_clipping\": 1.0", NAN, TRUE, TRUE, 0 },
    { ", \"gradient_clipping\": 1.0", INFINITY, TRUE, FALSE, 2.0f },
    { "", NAN, TRUE, FALSE, 2.0f - 0.5f * 0.25f },
    { ", \"gradient_clipping\": 1.0, \"mixprec\": {\"check_grad_overflow\": true}", NAN,
      FALSE, FALSE, 2.0f },
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree gchar *json = g_strdup_printf (
        "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}%s}", cases[c].extra);
      g_autoptr(MixprecEngine) e = engine_from_json (json);
      const gfloat w[4] = { 2, 2, 2, 2 };
      const gfloat gw[4] = { cases[c].bad, 0.25f, 0.25f, 0.25f };
      const gfloat gv[4] = { 0.25f, 0.25f, 0.25f, 0.25f };
      MixprecParam *a = add_param (e, "a", 2, 2, "Linear", w);
      MixprecParam *b = add_param (e, "b", 2, 2, "Linear", w);
      g_autoptr(MixprecStepResult) r = NULL;

      set_grad_f32 (a, gw);
      set_grad_f32 (b, gv);
      r = one_step (e);
      g_assert_cmpint (r->applied, ==, cases[c].applied);
      for (guint i = 0; i < 4; i++)
        {
          gfloat va = master_at (a, i), vb = master_at (b, i);

          if (cases[c].all_nan)
            {
              g_assert_true (isnan (va));
              g_assert_true (isnan (vb));
              continue;
            }
          /* The bad element itself: NaN once applied (NaN, or inf * 0). */
          if (i == 0 && cases[c].applied)
            g_assert_true (isnan (va));
          else
            g_assert_cmpfloat (va, ==, cases[c].other);
          g_assert_cmpfloat (vb, ==, cases[c].other);
        }
    }
}

/* The LR schedule advances on applied steps only. WarmupLR linear from 0
 * to 0.01 over 10 steps: DeepSpeed's rate for iteration i is 0.001 * i, and
 * the step after p applied steps uses iteration p - 1 (the schedule's
 * constructor already wrote the rate of iteration -1, warmup_min_lr), so the
 * applied steps see 0, 0, 0.001, ... and skipped steps repeat the rate. */
static void
test_engine_lr_not_advanced_on_skip (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 4, \"hysteresis\": 1},"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01}},"
    " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0,"
    "     \"warmup_max_lr\": 0.01, \"warmup_num_steps\": 10, \"warmup_type\": \"linear\"}}}");
  const gfloat w[2] = { 0, 0 };
  MixprecParam *p = add_param (e, "w", 1, 2, "Linear", w);
  const gboolean overflow[] = { FALSE, TRUE, FALSE, TRUE, TRUE, FALSE };
  const gdouble expected_lr[] = { 0.0, 0.0, 0.0, 0.001, 0.001, 0.001 };

  for (guint i = 0; i < G_N_ELEMENTS (overflow); i++)
    {
      const gfloat g[2] = { overflow[i] ? NAN : 1.0f, 1.0f };
      g_autoptr(MixprecStepResult) r = NULL;

      set_grad_f32 (p, g);
      r = one_step (e);
      g_assert_cmpint (r->applied, ==, !overflow[i]);
      g_assert_cmpfloat_with_epsilon (r->lr, expected_lr[i], 1e-15);
    }
}

/* One-dimensional parameters are exempt from weight decay: with zero
 * gradients AdamW's update is pure decay, p *= (1 - lr * wd) for matrices
 * (p -= lr * wd * p) and nothing for vectors. */
static void
test_engine_no_decay_for_vectors (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.1, \"weight_decay\": 0.5}}}");
  const gfloat w[4] = { 1, 2, 3, 4 };
  const gfloat zero[4] = { 0 };
  MixprecParam *mat = add_param (e, "w", 2, 2, "Linear", w);
  MixprecParam *vec = add_param (e, "b", 4, 0, "Linear", w);
  g_autoptr(MixprecStepResult) r = NULL;

  g_assert_cmpfloat (mixprec_param_get_weight_decay_multiplier (mat), ==, 1.0);
  g_assert_cmpfloat (mixprec_param_get_weight_decay_multiplier (vec), ==, 0.0);
  set_grad_f32 (mat, zero);
  set_grad_f32 (vec, zero);
  r = one_step (e);
  g_assert_cmpfloat_with_epsilon (master_at (mat, 1), 2.0f - 0.1f * 0.5f * 2.0f, 1e-6);
  g_assert_cmpfloat (master_at (vec, 1), ==, 2.0f);
}

/* mixprec.weight_decay_exempt: which parameters decay. With zero
 * gradients AdamW's step is pure decay, p = fmaf (-lr * wd, p, p) in the
 * fp32 kernel; lr 0.25 and wd 0.5 make that p - p / 8, exact. An exempt
 * parameter keeps its bits. */
static void
test_engine_weight_decay_exempt (void)
{
  static const struct {
    const gchar *name;
    guint64 rows, cols;
    const gchar *module_type;
    gboolean decays[3];      /* "1d" (default), "none", "names" */
  } params[] = {
    { "h.0.attn.c_attn.weight", 4, 2, "Linear", { TRUE, TRUE, TRUE } },
    { "h.0.attn.c_attn.bias", 8, 0, "Linear", { FALSE, TRUE, FALSE } },
    { "h.0.ln_1.weight", 8, 0, "LayerNorm", { FALSE, TRUE, FALSE } },
    { "encoder.LayerNorm.weight", 8, 0, "BertLayerNorm", { FALSE, TRUE, FALSE } },
    { "layers.0.norm.weight", 8, 0, "RMSNorm", { FALSE, TRUE, FALSE } },
    { "model.final_norm.weight", 8, 0, "LlamaRMSNorm", { FALSE, TRUE, FALSE } },
    { "h.0.rmsnorm_scale", 8, 0, NULL, { FALSE, TRUE, FALSE } },
    /* One-dimensional but neither a bias nor a norm: Hugging Face decays it. */
    { "h.0.attn.gate", 8, 0, "Gate", { FALSE, TRUE, TRUE } },
    /* Two-dimensional under a norm-like name: Hugging Face exempts it. */
    { "proj.bias_table", 4, 2, "Linear", { TRUE, TRUE, FALSE } },
    { "normalizer.weight", 4, 2, "Linear", { TRUE, TRUE, TRUE } },
  };
  static const gchar *const modes[] = { NULL, "none", "names" };
  const gfloat w[8] = { 1, -2, 3, -4, 0.5f, 6, -7, 8 };
  const gfloat zero[8] = { 0 };

  for (guint m = 0; m < G_N_ELEMENTS (modes); m++)
    {
      g_autofree gchar *json = g_strdup_printf (
        "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.25, \"weight_decay\": 0.5}}"
        "%s%s%s}", modes[m] != NULL ? ", \"mixprec\": {\"weight_decay_exempt\": \"" : "",
        modes[m] != NULL ? modes[m] : "", modes[m] != NULL ? "\"}" : "");
      g_autoptr(MixprecEngine) e = engine_from_json (json);
      MixprecParam *p[G_N_ELEMENTS (params)];
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint i = 0; i < G_N_ELEMENTS (params); i++)
        {
          p[i] = add_param (e, params[i].name, params[i].rows, params[i].cols,
                            params[i].module_type, w);
          g_assert_cmpfloat (mixprec_param_get_weight_decay_multiplier (p[i]), ==,
                             params[i].decays[m] ? 1.0 : 0.0);
        }
      for (guint i = 0; i < G_N_ELEMENTS (params); i++)
        set_grad_f32 (p[i], zero);
      r = one_step (e);
      g_assert_true (r->applied);
      for (guint i = 0; i < G_N_ELEMENTS (params); i++)
        for (guint k = 0; k < 8; k++)
          {
            gfloat expected = params[i].decays[m] ? w[k] - w[k] / 8 : w[k];
            gfloat got = master_at (p[i], k);

            if (memcmp (&got, &expected, sizeof got) != 0)
              g_error ("%s: %s[%u] = %.9g, expected %.9g", json, params[i].name, k, got, expected);
          }
    }
}

/* In bf16 the working copy is the master rounded to nearest even, checked
 * through the conversion API (a separate code path from the fused step). */
static void
test_engine_working_copy_is_rounded_master (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"bf16\": {\"enabled\": true},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}}}");
  gfloat w[256], g[256];
  MixprecParam *p;
  GRand *rand = g_rand_new_with_seed (7);

  for (guint i = 0; i < 256; i++)
    w[i] = (gfloat) g_rand_double_range (rand, -1, 1);
  p = add_param (e, "w", 16, 16, "Linear", w);
  for (guint s = 0; s < 5; s++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      g_autoptr(GBytes) master = NULL, expected = NULL, working = NULL;

      for (guint i = 0; i < 256; i++)
        g[i] = (gfloat) g_rand_double_range (rand, -1, 1);
      set_grad_f32 (p, g);
      r = one_step (e);
      master = mixprec_param_get_master (p, NULL);
      expected = mixprec_convert (MIXPREC_DTYPE_FLOAT32, master, MIXPREC_DTYPE_BFLOAT16,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, NULL);
      working = mixprec_param_get_working (p, MIXPREC_DTYPE_BFLOAT16, NULL);
      g_assert_true (g_bytes_equal (expected, working));
    }
  g_rand_free (rand);
}

/* bf16 without master weights and stochastic rounding: the parameters live
 * only in bf16, and a rerun with the same seed gives the same bits. */
static void
test_engine_bf16_no_master_reproducible (void)
{
  const gchar *json =
    "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true},"
    " \"mixprec\": {\"stochastic_rounding\": true, \"seed\": 1234},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.001}}}";
  g_autoptr(GBytes) first = NULL;

  for (guint run = 0; run < 2; run++)
    {
      g_autoptr(MixprecEngine) e = engine_from_json (json);
      gfloat w[300], g[300];
      MixprecParam *p;
      g_autoptr(GBytes) out = NULL;

      for (guint i = 0; i < 300; i++)
        w[i] = 1.0f + i * 1e-3f;
      p = add_param (e, "w", 10, 30, "Linear", w);
      g_assert_false (mixprec_param_has_master (p));
      g_assert_null (mixprec_param_get_master_data (p));
      for (guint s = 0; s < 3; s++)
        {
          g_autoptr(MixprecStepResult) r = NULL;

          for (guint i = 0; i < 300; i++)
            g[i] = sinf ((gfloat) (i + 7 * s));
          set_grad_f32 (p, g);
          r = one_step (e);
        }
      out = mixprec_param_get_working (p, MIXPREC_DTYPE_BFLOAT16, NULL);
      if (first == NULL)
        first = g_bytes_ref (out);
      else
        g_assert_true (g_bytes_equal (first, out));
    }
}

/* Memory the caller owns: the engine reads gradients from it and writes the
 * new working values back into it. */
static void
test_engine_external_memory (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}");
  gfloat working[3] = { 1, 2, 3 };
  gfloat grad[3] = { 0 };
  guint64 shape[1] = { 3 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;
  MixprecParam *p = mixprec_engine_register_external (e, "ext", shape, 1, "Linear",
                                                      working, grad, &error);

  g_assert_no_error (error);
  g_assert_nonnull (p);
  grad[0] = 2;
  grad[1] = 4;
  grad[2] = -2;
  r = one_step (e);
  g_assert_cmpfloat (working[0], ==, 0.0f);
  g_assert_cmpfloat (working[1], ==, 0.0f);
  g_assert_cmpfloat (working[2], ==, 4.0f);
  /* Consumed gradients are zeroed for backward passes that add. */
  g_assert_cmpfloat (grad[0], ==, 0.0f);
}

/* The addresses bindings build views from are the pointers C callers get;
 * the accumulation buffer exists with more than one micro-step per step. */
static void
test_engine_buffer_addresses (void)
{
  const gfloat init[4] = { 1, 2, 3, 4 };
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": 2,"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}");
  g_autoptr(MixprecEngine) one = engine_from_json ("{}");
  MixprecParam *p = add_param (e, "w", 2, 2, "Linear", init);
  MixprecParam *q = add_param (one, "w", 4, 0, "Linear", init);
  g_autoptr(GError) error = NULL;
  MixprecDType dtype = MIXPREC_DTYPE_FLOAT8_E5M2;
  guint64 address;

  g_assert_true (mixprec_param_get_engine (p) == e);
  address = mixprec_param_get_buffer_address (p, MIXPREC_PARAM_BUFFER_WORKING, &dtype, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (address, ==, GPOINTER_TO_SIZE (mixprec_param_get_working_data (p)));
  g_assert_cmpint (dtype, ==, MIXPREC_DTYPE_BFLOAT16);
  address = mixprec_param_get_buffer_address (p, MIXPREC_PARAM_BUFFER_GRAD, &dtype, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (address, ==, GPOINTER_TO_SIZE (mixprec_param_get_grad_data (p)));
  g_assert_cmpint (dtype, ==, MIXPREC_DTYPE_BFLOAT16);
  address = mixprec_param_get_buffer_address (p, MIXPREC_PARAM_BUFFER_MASTER, NULL, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (address, ==, GPOINTER_TO_SIZE (mixprec_param_get_master_data (p)));
  address = mixprec_param_get_buffer_address (p, MIXPREC_PARAM_BUFFER_ACCUM, &dtype, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (address, !=, 0);
  g_assert_cmpint (dtype, ==, mixprec_param_get_accum_dtype (p));

  /* One micro-step in FP32: gradients are read in place, no accumulation
   * buffer; the master is the working copy. */
  g_assert_cmpuint (mixprec_param_get_buffer_address (q, MIXPREC_PARAM_BUFFER_ACCUM, NULL, &error),
                    ==, 0);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_clear_error (&error);
  g_assert_cmpuint (mixprec_param_get_buffer_address (q, MIXPREC_PARAM_BUFFER_MASTER, NULL, &error),
                    ==, GPOINTER_TO_SIZE (mixprec_param_get_working_data (q)));
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_param_get_buffer_address (q, (MixprecParamBuffer) 17, NULL, &error),
                    ==, 0);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
}

/* Registration by address checks the dtype against the policy first;
 * reduce_grad by address reads the caller's gradient in place (SGD, lr 0.5:
 * w - 0.5 * g, exact). */
static void
test_engine_external_address (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}");
  gfloat working[2] = { 1, 2 };
  gfloat grad[2] = { 0 };
  const gfloat reduced[2] = { 4, -2 };
  guint64 shape[1] = { 2 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;
  MixprecParam *p;

  p = mixprec_engine_register_external_address (e, "x", shape, 1, "Linear", MIXPREC_DTYPE_FLOAT16,
                                                GPOINTER_TO_SIZE (working), GPOINTER_TO_SIZE (grad),
                                                &error);
  g_assert_null (p);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "float32"));
  g_assert_null (mixprec_engine_get_param (e, "x"));
  g_clear_error (&error);

  p = mixprec_engine_register_external_address (e, "x", shape, 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                                GPOINTER_TO_SIZE (working), GPOINTER_TO_SIZE (grad),
                                                &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_param_get_buffer_address (p, MIXPREC_PARAM_BUFFER_WORKING, NULL, &error),
                    ==, GPOINTER_TO_SIZE (working));
  g_assert_true (mixprec_param_reduce_grad_address (p, MIXPREC_DTYPE_FLOAT32,
                                                    GPOINTER_TO_SIZE (reduced), &error));
  g_assert_no_error (error);
  r = one_step (e);
  g_assert_true (r->applied);
  g_assert_cmpfloat (working[0], ==, -1.0f);
  g_assert_cmpfloat (working[1], ==, 3.0f);
  g_assert_false (mixprec_param_reduce_grad_address (p, MIXPREC_DTYPE_FLOAT32, 0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
}

/* Several caller-owned parameters: each is read from its own memory (the
 * second one's master after an SGD step with lr 0.5 is w - 0.5 * g). */
static void
test_engine_external_memory_second_param (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}");
  gfloat w1[2] = { 1, 2 }, g1[2] = { 0 };
  gfloat w2[3] = { 10, 20, 30 }, g2[3] = { 0 };
  guint64 s1[1] = { 2 }, s2[1] = { 3 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;
  g_autoptr(GBytes) master = NULL;
  const gfloat *m;

  g_assert_nonnull (mixprec_engine_register_external (e, "first", s1, 1, "Linear", w1, g1, &error));
  g_assert_nonnull (mixprec_engine_register_external (e, "second", s2, 1, "Linear", w2, g2, &error));
  g_assert_no_error (error);
  g2[0] = 2;
  g2[1] = 4;
  g2[2] = 8;
  r = one_step (e);
  master = mixprec_engine_gather_master (e, "second", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (master), ==, 3 * sizeof (gfloat));
  m = g_bytes_get_data (master, NULL);
  g_assert_cmpfloat (m[0], ==, 9.0f);
  g_assert_cmpfloat (m[1], ==, 18.0f);
  g_assert_cmpfloat (m[2], ==, 26.0f);
}

static void
test_engine_errors (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json ("{}");
  const gfloat w[2] = { 1, 2 };
  guint64 shape[1] = { 2 };
  g_autoptr(GBytes) init = g_bytes_new (w, sizeof w);
  g_autoptr(GBytes) short_init = g_bytes_new (w, 4);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) bad_opt = NULL;

  g_assert_nonnull (mixprec_engine_register_param (e, "a", shape, 1, NULL,
                                                   MIXPREC_DTYPE_FLOAT32, init, &error));
  g_assert_null (mixprec_engine_register_param (e, "a", shape, 1, NULL,
                                                MIXPREC_DTYPE_FLOAT32, init, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "'a'"));
  g_clear_error (&error);

  g_assert_null (mixprec_engine_register_param (e, "b", shape, 1, NULL,
                                                MIXPREC_DTYPE_FLOAT32, short_init, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "'b'"));
  g_clear_error (&error);

  g_assert_null (mixprec_engine_step (e, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_clear_error (&error);

  g_assert_true (mixprec_engine_backward_done (e, &error));
  g_assert_false (mixprec_engine_backward_done (e, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_clear_error (&error);

  g_assert_null (mixprec_engine_register_param (e, "c", shape, 1, NULL,
                                                MIXPREC_DTYPE_FLOAT32, init, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_clear_error (&error);

  g_assert_null (mixprec_engine_get_optimizer_state (e, "a", "no_such_slot", &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);

  /* The configuration checks the optimizer's parameters as the engine
   * does, so it is the configuration that refuses them. */
  bad_opt = mixprec_config_new_from_data (
    "{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}}",
    -1, &error);
  g_assert_null (bad_opt);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
  g_assert_nonnull (strstr (error->message, "optimizer.params.momentum"));
}

/* The memory plan predicts what an engine of one group allocates:
 * bf16 with two accumulation steps keeps a bf16 working copy and gradient
 * (2 + 2 bytes), an FP32 accumulation buffer, master and AdamW's two
 * state slots (4 + 4 + 8 bytes) per element, and one double per 4096
 * elements of a unit for the sum of squares (the two matrices, both
 * small, share a unit). */
static void
test_engine_memory_plan (void)
{
  const gchar *json = "{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": 2,"
                      " \"optimizer\": {\"type\": \"AdamW\"}}";
  g_autoptr(MixprecEngine) e = engine_from_json (json);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecMemoryReport) report = NULL;
  g_autoptr(MixprecMemoryReport) plan = NULL;
  g_autoptr(GPtrArray) held = NULL;
  g_autoptr(GPtrArray) planned = NULL;
  const guint64 sizes[] = { 1500, 200 };
  g_autofree gfloat *w = g_new0 (gfloat, 300 * 7);

  add_param (e, "a", 300, 5, "Linear", w);
  add_param (e, "b", 100, 2, "Linear", w);
  report = mixprec_engine_get_memory_report (e);
  plan = mixprec_memory_plan_new (config, 1700, 1, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (report->working, ==, 1700 * 2);
  g_assert_cmpuint (report->gradients, ==, 1700 * 2);
  g_assert_cmpuint (report->accumulation, ==, 1700 * 4);
  g_assert_cmpuint (report->masters, ==, 1700 * 4);
  g_assert_cmpuint (report->optimizer_state, ==, 1700 * 8);
  g_assert_cmpuint (report->communication, ==, 8);
  g_assert_cmpuint (report->total, ==, 1700 * 20 + 8);
  g_assert_cmpmem (report, G_STRUCT_OFFSET (MixprecMemoryReport, _mixprec_reserved),
                   plan, G_STRUCT_OFFSET (MixprecMemoryReport, _mixprec_reserved));

  /* Buffer by buffer: held now, the most at once, the layout's plan and
   * the plan made without an engine all agree. */
  held = mixprec_engine_list_buffers (e);
  planned = mixprec_memory_plan_list_buffers (config, sizes, G_N_ELEMENTS (sizes), 1, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (held->len, ==, planned->len);
  g_assert_cmpuint (held->len, ==, 6);
  for (guint i = 0; i < held->len; i++)
    {
      MixprecMemoryBuffer *h = g_ptr_array_index (held, i);
      MixprecMemoryBuffer *p = g_ptr_array_index (planned, i);

      g_assert_cmpstr (h->name, ==, p->name);
      g_assert_cmpuint (h->bytes, ==, p->planned_bytes);
      g_assert_cmpuint (h->peak_bytes, ==, p->planned_bytes);
      g_assert_cmpuint (h->planned_bytes, ==, p->planned_bytes);
    }
}

/* The same agreement for the representations of mixprec.master_weights
 * and mixprec.optimizer_states on one process (across ranks test-zero
 * checks every rank): remainders or compensations of 2 bytes, a state
 * slot laid out in whole blocks per unit (here one unit of 1700 elements:
 * ceil (1700 / B) blocks), an FP32 scale per block. */
static void
test_engine_memory_plan_representations (void)
{
  static const struct {
    const gchar *mixprec;
    guint block;
    guint64 extra;          /* bytes of remainders or compensations */
    const gchar *extra_name;
    guint64 state;          /* bytes of both slots */
    guint64 scales;
  } cases[] = {
    { "\"master_weights\": \"remainder\", \"optimizer_states\": {\"exp_avg\": \"int8\","
      " \"exp_avg_sq\": \"int8\", \"block_size\": 256}", 256, 3400, "master remainders",
      2 * 7 * 256, 2 * 7 * 4 },
    { "\"master_weights\": \"kahan\", \"optimizer_states\": \"int4\"", 128, 3400, "Kahan compensation",
      2 * 14 * 128 / 2, 2 * 14 * 4 },
    { "\"optimizer_states\": {\"exp_avg\": \"fp8_e4m3_scaled\", \"exp_avg_sq\": \"fp32\","
      " \"block_size\": 4096}", 4096, 0, NULL, 4096 + 1700 * 4, 4 },
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autofree gchar *json = g_strdup_printf ("{\"bf16\": {\"enabled\": true},"
                                                " \"optimizer\": {\"type\": \"AdamW\"},"
                                                " \"mixprec\": {%s}}", cases[c].mixprec);
      g_autoptr(MixprecEngine) e = engine_from_json (json);
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
      g_autoptr(GPtrArray) held = NULL;
      g_autoptr(GPtrArray) planned = NULL;
      const guint64 sizes[] = { 1500, 200 };
      g_autofree gfloat *w = g_new0 (gfloat, 300 * 7);
      guint64 want_extra = 0, want_state = 0, want_scales = 0, masters = 0;

      g_test_message ("%s", json);
      g_assert_no_error (error);
      add_param (e, "a", 300, 5, "Linear", w);
      add_param (e, "b", 100, 2, "Linear", w);
      held = mixprec_engine_list_buffers (e);
      planned = mixprec_memory_plan_list_buffers (config, sizes, G_N_ELEMENTS (sizes), 1, 0, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (held->len, ==, planned->len);
      for (guint i = 0; i < held->len; i++)
        {
          MixprecMemoryBuffer *h = g_ptr_array_index (held, i);
          MixprecMemoryBuffer *p = g_ptr_array_index (planned, i);

          g_assert_cmpstr (h->name, ==, p->name);
          g_assert_cmpuint (h->bytes, ==, p->planned_bytes);
          g_assert_cmpuint (h->peak_bytes, ==, p->planned_bytes);
          g_assert_cmpuint (h->planned_bytes, ==, p->planned_bytes);
          if (cases[c].extra_name != NULL && g_str_equal (h->name, cases[c].extra_name))
            want_extra = h->bytes;
          if (g_str_equal (h->name, "optimizer state"))
            want_state = h->bytes;
          if (g_str_equal (h->name, "optimizer state scales"))
            want_scales = h->bytes;
          if (g_str_equal (h->name, "FP32 master weights"))
            masters = h->bytes;
        }
      g_assert_cmpuint (want_extra, ==, cases[c].extra);
      g_assert_cmpuint (want_state, ==, cases[c].state);
      g_assert_cmpuint (want_scales, ==, cases[c].scales);
      g_assert_cmpuint (masters, ==, cases[c].extra != 0 ? 0 : 1700 * 4);
    }
}

/* mixprec_param_get_master() of a remainder master is the FP32 value it
 * stands for: the initial values exactly, and after steps the FP32-master
 * engine's masters bit for bit (the remainder loses nothing, and both
 * read the same gradients). A Kahan master is its working copy plus its
 * compensation, as mixprec_engine_gather_master() gives it. */
static void
test_engine_split_master_get_master (void)
{
  const gchar *fp32 = "{\"bf16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"AdamW\"}}";
  const gchar *rem = "{\"bf16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"AdamW\"},"
                     " \"mixprec\": {\"master_weights\": \"remainder\"}}";
  const gchar *kahan = "{\"bf16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"AdamW\"},"
                       " \"mixprec\": {\"master_weights\": \"kahan\"}}";
  g_autoptr(MixprecEngine) a = engine_from_json (fp32);
  g_autoptr(MixprecEngine) b = engine_from_json (rem);
  g_autoptr(MixprecEngine) k = engine_from_json (kahan);
  g_autofree gfloat *w = g_new (gfloat, 640);
  g_autofree gfloat *g = g_new (gfloat, 640);
  g_autoptr(GBytes) first = NULL;
  g_autoptr(GError) error = NULL;
  MixprecParam *pa, *pb, *pk;

  for (guint i = 0; i < 640; i++)
    w[i] = 1.2345678f * sinf ((gfloat) i + 0.5f);
  pa = add_param (a, "w", 40, 16, "Linear", w);
  pb = add_param (b, "w", 40, 16, "Linear", w);
  pk = add_param (k, "w", 40, 16, "Linear", w);
  first = mixprec_param_get_master (pb, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (g_bytes_get_data (first, NULL), g_bytes_get_size (first), w, 640 * sizeof (gfloat));
  for (guint step = 0; step < 3; step++)
    {
      g_autoptr(GBytes) grad = NULL;
      g_autoptr(GBytes) ma = NULL;
      g_autoptr(GBytes) mb = NULL;
      g_autoptr(GBytes) mk = NULL;
      g_autoptr(GBytes) gk = NULL;

      for (guint i = 0; i < 640; i++)
        g[i] = cosf ((gfloat) (i * (step + 3)));
      grad = g_bytes_new (g, 640 * sizeof (gfloat));
      for (guint e = 0; e < 3; e++)
        {
          MixprecEngine *engine = e == 0 ? a : e == 1 ? b : k;
          MixprecParam *p = e == 0 ? pa : e == 1 ? pb : pk;
          g_autoptr(MixprecStepResult) r = NULL;

          g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, grad, &error));
          g_assert_no_error (error);
          g_assert_true (mixprec_engine_backward_done (engine, &error));
          r = mixprec_engine_step (engine, &error);
          g_assert_no_error (error);
          g_assert_true (r->applied);
        }
      ma = mixprec_param_get_master (pa, &error);
      mb = mixprec_param_get_master (pb, &error);
      mk = mixprec_param_get_master (pk, &error);
      gk = mixprec_engine_gather_master (k, "w", &error);
      g_assert_no_error (error);
      g_assert_true (g_bytes_equal (ma, mb));
      g_assert_true (g_bytes_equal (mk, gk));
    }
}

/* A gradient handed over with mixprec_param_reduce_grad() is the same
 * gradient as one written with mixprec_param_set_grad(): two engines fed
 * both ways end with the same master weights, bit for bit. */
static void
test_engine_reduce_grad_matches_set_grad (void)
{
  const gchar *json = "{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": 2,"
                      " \"gradient_clipping\": 1.0, \"optimizer\": {\"type\": \"AdamW\"}}";
  g_autoptr(MixprecEngine) a = engine_from_json (json);
  g_autoptr(MixprecEngine) b = engine_from_json (json);
  g_autofree gfloat *w = g_new0 (gfloat, 640);
  g_autofree gfloat *g = g_new (gfloat, 640);
  g_autoptr(GError) error = NULL;
  MixprecParam *pa, *pb;

  for (guint i = 0; i < 640; i++)
    w[i] = sinf ((gfloat) i);
  pa = add_param (a, "w", 40, 16, "Linear", w);
  pb = add_param (b, "w", 40, 16, "Linear", w);
  for (guint step = 0; step < 3; step++)
    {
      g_autoptr(MixprecStepResult) ra = NULL;
      g_autoptr(MixprecStepResult) rb = NULL;

      for (guint micro = 0; micro < 2; micro++)
        {
          g_autoptr(GBytes) bytes = NULL;

          for (guint i = 0; i < 640; i++)
            g[i] = cosf ((gfloat) (i + 7 * step + 3 * micro)) * (gfloat) mixprec_engine_get_loss_scale (a);
          bytes = g_bytes_new (g, 640 * sizeof (gfloat));
          g_assert_true (mixprec_param_reduce_grad (pa, MIXPREC_DTYPE_FLOAT32, g, &error));
          g_assert_no_error (error);
          g_assert_true (mixprec_param_set_grad (pb, MIXPREC_DTYPE_FLOAT32, bytes, &error));
          g_assert_true (mixprec_engine_backward_done (a, &error));
          g_assert_true (mixprec_engine_backward_done (b, &error));
          g_assert_no_error (error);
        }
      ra = mixprec_engine_step (a, &error);
      rb = mixprec_engine_step (b, &error);
      g_assert_no_error (error);
      g_assert_cmpfloat (ra->grad_norm, ==, rb->grad_norm);
    }
  g_assert_cmpmem (mixprec_param_get_master_data (pa), 640 * sizeof (gfloat),
                   mixprec_param_get_master_data (pb), 640 * sizeof (gfloat));
}

/* Misuse of the per-parameter intake is an error naming the parameter. */
static void
test_engine_reduce_grad_errors (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json ("{\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}");
  gfloat w[8] = { 0 }, g[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
  g_autoptr(GBytes) short_grad = g_bytes_new (g, 3 * sizeof (gfloat));
  g_autoptr(GError) error = NULL;
  MixprecParam *p = add_param (e, "w", 8, 0, "Linear", w);

  g_assert_false (mixprec_param_reduce_grad_bytes (p, MIXPREC_DTYPE_FLOAT32, short_grad, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "'w'"));
  g_clear_error (&error);

  g_assert_true (mixprec_param_reduce_grad (p, MIXPREC_DTYPE_FLOAT32, g, &error));
  g_assert_false (mixprec_param_reduce_grad (p, MIXPREC_DTYPE_FLOAT32, g, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "'w'"));
  g_assert_nonnull (strstr (error->message, "already handed over"));
  g_clear_error (&error);

  g_assert_true (mixprec_engine_backward_done (e, &error));
  g_assert_false (mixprec_param_reduce_grad (p, MIXPREC_DTYPE_FLOAT32, g, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "call step() first"));
}

static void
test_engine_unknown_optimizer (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (
    "{\"optimizer\": {\"type\": \"OneBitLamb\", \"params\": {}}}", -1, &error);

  /* The configuration refuses what the engine could not run, with the
   * engine's reason. */
  g_assert_null (config);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "optimizer.type"));
  g_assert_nonnull (strstr (error->message, "onebitlamb"));
}

/* mixprec.comm "local": one process, whatever launcher variables the
 * process inherited (a single-process engine inside a torch.distributed
 * program). Without it the same variables are read, and a bad one fails. */
static void
test_engine_comm_local_ignores_launchers (void)
{
  if (g_test_subprocess ())
    {
      const gchar *config_local = "{\"train_micro_batch_size_per_gpu\": 1, "
                                  "\"mixprec\": {\"comm\": \"local\"}}";
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) local = mixprec_config_new_from_string (config_local, &error);
      g_autoptr(MixprecConfig) automatic = mixprec_config_new ();
      g_autoptr(MixprecEngine) engine = NULL;
      g_autoptr(MixprecEngine) refused = NULL;

      g_assert_no_error (error);
      /* torchrun's variables, set by hand, half of them, and pointing nowhere */
      g_setenv ("RANK", "1", TRUE);
      g_setenv ("WORLD_SIZE", "2", TRUE);
      g_setenv ("LOCAL_RANK", "1", TRUE);
      g_setenv ("MASTER_ADDR", "127.0.0.1", TRUE);
      g_setenv ("MASTER_PORT", "1", TRUE);
      g_setenv ("MIXPREC_TIMEOUT", "soon", TRUE);
      engine = mixprec_engine_new (local, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (mixprec_engine_get_rank (engine), ==, 0);
      g_assert_cmpuint (mixprec_engine_get_world_size (engine), ==, 1);

      refused = mixprec_engine_new (automatic, &error);
      g_assert_null (refused);
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_COMM);
      g_assert_nonnull (strstr (error->message, "MIXPREC_TIMEOUT=soon"));
      return;
    }
  g_test_trap_subprocess (NULL, 0, 0);
  g_test_trap_assert_passed ();
}

/* "mixprec": {"require_job_secret": true} makes a job of several ranks
 * without a secret fail before it reaches the rendezvous, naming the key;
 * with a secret the same config gets past that check (here to the
 * rendezvous' own failure: MASTER_PORT 1 answers nobody). */
static void
test_engine_require_job_secret (void)
{
  if (g_test_subprocess ())
    {
      const gchar *json = "{\"train_micro_batch_size_per_gpu\": 1, "
                          "\"mixprec\": {\"require_job_secret\": true, \"timeout\": 1}}";
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_string (json, &error);
      g_autoptr(MixprecEngine) refused = NULL;
      g_autoptr(MixprecEngine) unreachable = NULL;
      gint64 start;

      g_assert_no_error (error);
      g_unsetenv ("MIXPREC_JOB_SECRET");
      g_unsetenv ("MIXPREC_JOB_SECRET_FILE");
      g_unsetenv ("MIXPREC_REQUIRE_JOB_SECRET");
      g_setenv ("RANK", "1", TRUE);
      g_setenv ("WORLD_SIZE", "2", TRUE);
      g_setenv ("LOCAL_RANK", "1", TRUE);
      g_setenv ("MASTER_ADDR", "127.0.0.1", TRUE);
      g_setenv ("MASTER_PORT", "1", TRUE);
      start = g_get_monotonic_time ();
      refused = mixprec_engine_new (config, &error);
      g_assert_null (refused);
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_COMM);
      g_assert_nonnull (strstr (error->message, "mixprec.require_job_secret"));
      g_assert_nonnull (strstr (error->message, "MIXPREC_JOB_SECRET"));
      /* refused at once, not after the rendezvous timed out */
      g_assert_cmpint (g_get_monotonic_time () - start, <, G_USEC_PER_SEC / 2);
      g_clear_error (&error);

      g_setenv ("MIXPREC_JOB_SECRET", "00112233445566778899aabbccddeeff", TRUE);
      unreachable = mixprec_engine_new (config, &error);
      g_assert_null (unreachable);
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_COMM);
      g_assert_null (strstr (error->message, "require_job_secret"));
      return;
    }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, 0);
  g_test_trap_assert_passed ();
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/engine/overflow-skips-bit-exact", test_engine_overflow_skips_bit_exact);
  g_test_add_func ("/engine/scaler-sequence", test_engine_scaler_sequence);
  g_test_add_func ("/engine/clipping-formula", test_engine_clipping_formula);
  g_test_add_func ("/engine/nonfinite-unchecked", test_engine_nonfinite_unchecked);
  g_test_add_func ("/engine/unscale", test_engine_unscale);
  g_test_add_func ("/engine/accumulation-dtypes", test_engine_accumulation_dtypes);
  g_test_add_func ("/engine/fp32-modules", test_engine_fp32_modules);
  g_test_add_func ("/engine/lr-not-advanced-on-skip", test_engine_lr_not_advanced_on_skip);
  g_test_add_func ("/engine/no-decay-for-vectors", test_engine_no_decay_for_vectors);
  g_test_add_func ("/engine/weight-decay-exempt", test_engine_weight_decay_exempt);
  g_test_add_func ("/engine/comm-local-ignores-launchers", test_engine_comm_local_ignores_launchers);
  g_test_add_func ("/engine/require-job-secret", test_engine_require_job_secret);
  g_test_add_func ("/engine/working-copy-is-rounded-master", test_engine_working_copy_is_rounded_master);
  g_test_add_func ("/engine/bf16-no-master-reproducible", test_engine_bf16_no_master_reproducible);
  g_test_add_func ("/engine/external-memory", test_engine_external_memory);
  g_test_add_func ("/engine/external-memory-second-param", test_engine_external_memory_second_param);
  g_test_add_func ("/engine/buffer-addresses", test_engine_buffer_addresses);
  g_test_add_func ("/engine/external-address", test_engine_external_address);
  g_test_add_func ("/engine/errors", test_engine_errors);
  g_test_add_func ("/engine/unknown-optimizer", test_engine_unknown_optimizer);
  g_test_add_func ("/engine/memory-plan", test_engine_memory_plan);
  g_test_add_func ("/engine/memory-plan/representations", test_engine_memory_plan_representations);
  g_test_add_func ("/engine/split-master/get-master", test_engine_split_master_get_master);
  g_test_add_func ("/engine/reduce-grad/matches-set-grad", test_engine_reduce_grad_matches_set_grad);
  g_test_add_func ("/engine/reduce-grad/errors", test_engine_reduce_grad_errors);
  return g_test_run ();
}
