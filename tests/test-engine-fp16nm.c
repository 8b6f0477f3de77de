/* test-engine-fp16nm.c — the engine in fp16 without FP32 masters, and
 * AdamW with bf16 optimizer state, end to end. Every step is checked
 * against AdamW applied by hand here (DeepSpeed FusedAdam's formula in fp32
 * arithmetic, one fmaf() where the kernels fuse), on values chosen to be
 * exact in the low-precision dtype so that only the optimizer's own
 * roundings remain; training runs check that a least-squares loss falls. */
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

#define ROWS 4
#define COLS 8
#define N (ROWS * COLS)

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
           const gfloat  *values)
{
  g_autoptr(GError) error = NULL;
  guint64 shape[2] = { rows, cols };
  g_autoptr(GBytes) init = g_bytes_new (values, rows * cols * sizeof (gfloat));
  MixprecParam *p = mixprec_engine_register_param (engine, name, shape, 2, "Linear",
                                                   MIXPREC_DTYPE_FLOAT32, init, &error);
  g_assert_no_error (error);
  return p;
}

static MixprecStepResult *
step_with_grad (MixprecEngine *engine,
                MixprecParam  *p,
                const gfloat  *grad)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) b = g_bytes_new (grad, mixprec_param_get_numel (p) * sizeof (gfloat));
  MixprecStepResult *r;

  g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, b, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_assert_no_error (error);
  r = mixprec_engine_step (engine, &error);
  g_assert_no_error (error);
  g_assert_nonnull (r);
  return r;
}

/* The working weights (or the FP32 masters) widened to FP32. */
static void
read_f32 (GBytes *b, gfloat *out, gsize n)
{
  g_assert_cmpuint (g_bytes_get_size (b), ==, n * sizeof (gfloat));
  memcpy (out, g_bytes_get_data (b, NULL), n * sizeof (gfloat));
}

static void
working_f32 (MixprecParam *p, gfloat *out)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) b = mixprec_param_get_working (p, MIXPREC_DTYPE_FLOAT32, &error);

  g_assert_no_error (error);
  read_f32 (b, out, mixprec_param_get_numel (p));
}

static void
state_f32 (MixprecEngine *e, const gchar *slot, gfloat *out)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) b = mixprec_engine_get_optimizer_state (e, "w", slot, &error);

  g_assert_no_error (error);
  read_f32 (b, out, N);
}

/* Round FP32 values to @dtype to nearest even and widen them back. */
static void
round_to (MixprecDType dtype, gfloat *values, gsize n)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) src = g_bytes_new (values, n * sizeof (gfloat));
  g_autoptr(GBytes) low = mixprec_convert (MIXPREC_DTYPE_FLOAT32, src, dtype,
                                           MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
  g_autoptr(GBytes) back = NULL;

  g_assert_no_error (error);
  back = mixprec_convert (dtype, low, MIXPREC_DTYPE_FLOAT32, MIXPREC_ROUNDING_NEAREST_EVEN, 0,
                          &error);
  g_assert_no_error (error);
  read_f32 (back, values, n);
}

static void
assert_bits (const gfloat *got, const gfloat *expected, gsize n, const gchar *what)
{
  for (gsize i = 0; i < n; i++)
    if (memcmp (&got[i], &expected[i], sizeof (gfloat)) != 0)
      g_error ("%s[%" G_GSIZE_FORMAT "]: %.9g, by hand %.9g", what, i, got[i], expected[i]);
}

typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
} AdamW;

/* One AdamW step by hand: constants computed in double and rounded once,
 * the update in FP32 (DeepSpeed FusedAdam's formula, as adamw-scalar.c
 * writes it). */
static gfloat
adamw1 (const AdamW *h, guint64 t, gfloat p, gfloat g, gfloat *m, gfloat *v)
{
  double bc1 = 1 - pow (h->beta1, (double) t), bc2 = 1 - pow (h->beta2, (double) t);
  gfloat b1 = (gfloat) h->beta1, one_b1 = (gfloat) (1 - h->beta1);
  gfloat b2 = (gfloat) h->beta2, one_b2 = (gfloat) (1 - h->beta2);
  gfloat rsqrt_bc2 = (gfloat) (1 / sqrt (bc2)), neg_step = (gfloat) (-h->lr / bc1);
  gfloat neg_lr_decay = (gfloat) (-h->lr * h->weight_decay);
  gfloat denom;

  g = fmaf (0.0f, p, g);        /* no L2 term in AdamW mode */
  *m = fmaf (one_b1, g, b1 * *m);
  *v = fmaf (one_b2, g * g, b2 * *v);
  denom = fmaf (sqrtf (*v), rsqrt_bc2, (gfloat) h->eps);
  p = fmaf (neg_lr_decay, p, p);
  return fmaf (neg_step, *m / denom, p);
}

/* Initial weights, exact in fp16 and bf16: multiples of 1/64 in [-1, 1]. */
static void
initial_weights (gfloat *w)
{
  for (guint i = 0; i < N; i++)
    w[i] = (gfloat) ((gint) ((i * 37) % 129) - 64) / 64.0f;
}

/* Scaled gradients of step @s: small integers (exact in fp16 and bf16),
 * none zero. */
static void
scaled_grads (guint s, gfloat *g)
{
  for (guint i = 0; i < N; i++)
    {
      gint k = (gint) ((i * 13 + s * 7) % 31) - 15;

      g[i] = (gfloat) (k == 0 ? 3 : k) * 4.0f;
    }
}

#define FP16NM_ADAMW \
  " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"betas\": [0.9, 0.999]," \
  "  \"eps\": 1e-8, \"weight_decay\": 0.1}}"

static const AdamW fp16nm_adamw = { 0.01, 0.9, 0.999, 1e-8, 0.1 };

/* fp16 without masters: the fp16 weights themselves are what AdamW
 * updates, from the gradients unscaled (and clipped) by one factor, and
 * the result is rounded to nearest even back into fp16. */
static void
test_fp16nm_adamw_bitwise (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true,"
    "  \"initial_scale_power\": 8, \"loss_scale_window\": 1000},"
    " \"gradient_clipping\": 0.5," FP16NM_ADAMW "}");
  gfloat w[N], p[N], m[N] = { 0 }, v[N] = { 0 }, got[N], g[N];
  MixprecParam *param;
  g_autoptr(MixprecMemoryReport) report = NULL;
  guint clipped = 0;

  initial_weights (w);
  param = add_param (e, "w", ROWS, COLS, w);
  g_assert_false (mixprec_param_has_master (param));
  g_assert_null (mixprec_param_get_master_data (param));
  g_assert_cmpint (mixprec_param_get_working_dtype (param), ==, MIXPREC_DTYPE_FLOAT16);
  report = mixprec_engine_get_memory_report (e);
  g_assert_cmpuint (report->masters, ==, 0);
  g_assert_cmpuint (report->working, ==, N * 2);
  memcpy (p, w, sizeof p);

  for (guint s = 0; s < 4; s++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      gdouble sumsq = 0, norm, factor;

      scaled_grads (s, g);
      r = step_with_grad (e, param, g);
      g_assert_true (r->applied);
      g_assert_cmpfloat (r->loss_scale, ==, 256.0);

      /* The norm is of the unscaled gradients: clipping sees what the
       * loss itself gives, whatever the scale. */
      for (guint i = 0; i < N; i++)
        sumsq += (g[i] / 256.0) * (g[i] / 256.0);
      norm = sqrt (sumsq);
      g_assert_cmpfloat_with_epsilon (r->grad_norm, norm, 1e-6 * norm);
      g_assert_cmpfloat_with_epsilon (r->clip_coef, MAX ((norm + 1e-6) / 0.5, 1.0), 1e-6 * norm);
      clipped += r->clip_coef > 1;

      factor = 1.0 / (r->loss_scale * r->clip_coef);
      for (guint i = 0; i < N; i++)
        p[i] = adamw1 (&fp16nm_adamw, s + 1, p[i], g[i] * (gfloat) factor, &m[i], &v[i]);
      round_to (MIXPREC_DTYPE_FLOAT16, p, N);

      working_f32 (param, got);
      assert_bits (got, p, N, "fp16 weight");
      state_f32 (e, "exp_avg", got);
      assert_bits (got, m, N, "exp_avg");
      state_f32 (e, "exp_avg_sq", got);
      assert_bits (got, v, N, "exp_avg_sq");
    }
  /* The gradients were large enough that clipping took part. */
  g_assert_cmpuint (clipped, >, 0);
  /* Some updates moved the weights at all (fp16 keeps 11 bits). */
  g_assert_false (memcmp (w, p, sizeof w) == 0);
}

/* A non-finite gradient skips the step: the fp16 weights and AdamW's
 * state stay bit-identical, the scale backs off, and the next step runs
 * at the new scale as the applied step number 2. */
static void
test_fp16nm_overflow_skips (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true,"
    "  \"initial_scale_power\": 8, \"loss_scale_window\": 1000, \"hysteresis\": 1},"
    FP16NM_ADAMW "}");
  gfloat w[N], p[N], m[N] = { 0 }, v[N] = { 0 }, got[N], g[N];
  MixprecParam *param;
  g_autoptr(MixprecStepResult) r1 = NULL;
  g_autoptr(MixprecStepResult) r2 = NULL;
  g_autoptr(MixprecStepResult) r3 = NULL;

  initial_weights (w);
  param = add_param (e, "w", ROWS, COLS, w);
  memcpy (p, w, sizeof p);

  scaled_grads (0, g);
  r1 = step_with_grad (e, param, g);
  g_assert_true (r1->applied);
  for (guint i = 0; i < N; i++)
    p[i] = adamw1 (&fp16nm_adamw, 1, p[i], g[i] * (gfloat) (1.0 / 256), &m[i], &v[i]);
  round_to (MIXPREC_DTYPE_FLOAT16, p, N);

  scaled_grads (1, g);
  g[5] = INFINITY;
  r2 = step_with_grad (e, param, g);
  g_assert_false (r2->applied);
  g_assert_false (isfinite (r2->grad_norm));
  g_assert_cmpuint (r2->skipped_steps, ==, 1);
  g_assert_cmpuint (r2->applied_steps, ==, 1);
  /* hysteresis 1: the first overflow halves the scale (DeepSpeed's
   * DynamicLossScaler; mixprec.json(5), fp16). */
  g_assert_cmpfloat (r2->loss_scale, ==, 256.0);
  g_assert_cmpfloat (r2->next_loss_scale, ==, 128.0);
  working_f32 (param, got);
  assert_bits (got, p, N, "fp16 weight after the skipped step");
  state_f32 (e, "exp_avg", got);
  assert_bits (got, m, N, "exp_avg after the skipped step");
  state_f32 (e, "exp_avg_sq", got);
  assert_bits (got, v, N, "exp_avg_sq after the skipped step");

  /* The backward pass of the next step multiplies by 128. */
  scaled_grads (2, g);
  for (guint i = 0; i < N; i++)
    g[i] /= 2;
  r3 = step_with_grad (e, param, g);
  g_assert_true (r3->applied);
  g_assert_cmpfloat (r3->loss_scale, ==, 128.0);
  for (guint i = 0; i < N; i++)
    p[i] = adamw1 (&fp16nm_adamw, 2, p[i], g[i] * (gfloat) (1.0 / 128), &m[i], &v[i]);
  round_to (MIXPREC_DTYPE_FLOAT16, p, N);
  working_f32 (param, got);
  assert_bits (got, p, N, "fp16 weight after the step that followed");
}

/* Stochastic rounding into fp16 without masters: the same seed gives the
 * same bits, a different seed other bits. */
static void
test_fp16nm_stochastic_reproducible (void)
{
  g_autoptr(GBytes) first = NULL;

  for (guint run = 0; run < 3; run++)
    {
      g_autofree gchar *json = g_strdup_printf (
        "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true,"
        "  \"initial_scale_power\": 8},"
        " \"mixprec\": {\"stochastic_rounding\": true, \"seed\": %u}," FP16NM_ADAMW "}",
        run < 2 ? 1234 : 99);
      g_autoptr(MixprecEngine) e = engine_from_json (json);
      gfloat w[N], g[N];
      MixprecParam *param;
      g_autoptr(GBytes) out = NULL;

      initial_weights (w);
      param = add_param (e, "w", ROWS, COLS, w);
      for (guint s = 0; s < 3; s++)
        {
          g_autoptr(MixprecStepResult) r = NULL;

          scaled_grads (s, g);
          r = step_with_grad (e, param, g);
          g_assert_true (r->applied);
        }
      out = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT16, NULL);
      if (first == NULL)
        first = g_bytes_ref (out);
      else if (run == 1)
        g_assert_true (g_bytes_equal (first, out));
      else
        g_assert_false (g_bytes_equal (first, out));
    }
}

/* Least squares: minimise (1/2S) sum_s (x_s . w - y_s)^2 over a 4 x 8
 * weight read as one vector, with y made by a known w. The gradient is
 * worked out here in double from the working weights the engine holds and
 * multiplied by the current loss scale, as a backward pass would. */
#define SAMPLES 64

typedef struct {
  gfloat x[SAMPLES][N];
  gfloat y[SAMPLES];
} Problem;

static void
problem_init (Problem *pb)
{
  GRand *rand = g_rand_new_with_seed (42);
  gfloat target[N];

  for (guint i = 0; i < N; i++)
    target[i] = (gfloat) g_rand_double_range (rand, -1, 1);
  for (guint s = 0; s < SAMPLES; s++)
    {
      gdouble y = 0;

      for (guint i = 0; i < N; i++)
        {
          pb->x[s][i] = (gfloat) g_rand_double_range (rand, -1, 1);
          y += (gdouble) pb->x[s][i] * target[i];
        }
      pb->y[s] = (gfloat) y;
    }
  g_rand_free (rand);
}

static gdouble
problem_loss (const Problem *pb, const gfloat *w, gdouble scale, gfloat *grad)
{
  gdouble loss = 0, gd[N] = { 0 };

  for (guint s = 0; s < SAMPLES; s++)
    {
      gdouble r = -pb->y[s];

      for (guint i = 0; i < N; i++)
        r += (gdouble) pb->x[s][i] * w[i];
      loss += r * r / (2.0 * SAMPLES);
      for (guint i = 0; i < N; i++)
        gd[i] += r * pb->x[s][i] / SAMPLES;
    }
  for (guint i = 0; i < N; i++)
    grad[i] = (gfloat) (gd[i] * scale);
  return loss;
}

/* Trains for @steps and returns the first and last losses; @applied
 * counts the steps that were not skipped. */
static void
train (const gchar *json, MixprecDType working, guint steps, gdouble *first, gdouble *last,
       guint *applied)
{
  g_autoptr(MixprecEngine) e = engine_from_json (json);
  g_autofree Problem *pb = g_new0 (Problem, 1);
  gfloat w[N] = { 0 }, grad[N];
  MixprecParam *param = add_param (e, "w", ROWS, COLS, w);

  g_assert_cmpint (mixprec_param_get_working_dtype (param), ==, working);
  problem_init (pb);
  *applied = 0;
  for (guint s = 0; s < steps; s++)
    {
      gdouble scale = mixprec_loss_scaler_get_scale (mixprec_engine_get_loss_scaler (e));
      gdouble loss;
      g_autoptr(MixprecStepResult) r = NULL;

      working_f32 (param, w);
      loss = problem_loss (pb, w, scale, grad);
      if (s == 0)
        *first = loss;
      r = step_with_grad (e, param, grad);
      *applied += r->applied;
    }
  working_f32 (param, w);
  *last = problem_loss (pb, w, 1, grad);
}

static void
test_fp16nm_loss_decreases (void)
{
  gdouble first, last;
  guint applied;

  /* A start at 2^20 overflows fp16 with these gradients (of order 1):
   * the first steps are skipped while the scale backs off, and the rest
   * train. */
  train ("{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true,"
         "  \"initial_scale_power\": 20, \"hysteresis\": 1},"
         " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.02}}}",
         MIXPREC_DTYPE_FLOAT16, 300, &first, &last, &applied);
  g_test_message ("fp16 no master: loss %g -> %g, %u of 300 steps applied", first, last, applied);
  g_assert_cmpuint (applied, <, 300);
  g_assert_cmpuint (applied, >, 250);
  g_assert_cmpfloat (last, <, first / 50);
}

/* bf16.bf16_optimizer_states: AdamW's moments live in bf16. Each step
 * widens them, updates in FP32 exactly as with FP32 state, and rounds them
 * back to nearest even; the FP32 master takes the unrounded update and the
 * bf16 working copy is the master rounded. */
static void
test_bf16_states_adamw_bitwise (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}," FP16NM_ADAMW "}");
  gfloat w[N], p[N], m[N] = { 0 }, v[N] = { 0 }, got[N], g[N], rounded[N];
  MixprecParam *param;

  initial_weights (w);
  param = add_param (e, "w", ROWS, COLS, w);
  g_assert_true (mixprec_param_has_master (param));
  memcpy (p, w, sizeof p);

  for (guint s = 0; s < 4; s++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      g_autoptr(GBytes) master = NULL;

      /* bf16 has no loss scale: the gradients are the loss's own. */
      scaled_grads (s, g);
      for (guint i = 0; i < N; i++)
        g[i] /= 64;
      r = step_with_grad (e, param, g);
      g_assert_true (r->applied);
      g_assert_cmpfloat (r->loss_scale, ==, 1.0);

      for (guint i = 0; i < N; i++)
        p[i] = adamw1 (&fp16nm_adamw, s + 1, p[i], g[i], &m[i], &v[i]);
      round_to (MIXPREC_DTYPE_BFLOAT16, m, N);
      round_to (MIXPREC_DTYPE_BFLOAT16, v, N);

      master = mixprec_param_get_master (param, NULL);
      read_f32 (master, got, N);
      assert_bits (got, p, N, "fp32 master");
      memcpy (rounded, p, sizeof rounded);
      round_to (MIXPREC_DTYPE_BFLOAT16, rounded, N);
      working_f32 (param, got);
      assert_bits (got, rounded, N, "bf16 weight");
      state_f32 (e, "exp_avg", got);
      assert_bits (got, m, N, "bf16 exp_avg");
      state_f32 (e, "exp_avg_sq", got);
      assert_bits (got, v, N, "bf16 exp_avg_sq");
    }
}

static void
test_bf16_states_loss_decreases (void)
{
  gdouble first, last, first32, last32;
  guint applied, applied32;

  train ("{\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true},"
         " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.02}}}",
         MIXPREC_DTYPE_BFLOAT16, 300, &first, &last, &applied);
  train ("{\"bf16\": {\"enabled\": true},"
         " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.02}}}",
         MIXPREC_DTYPE_BFLOAT16, 300, &first32, &last32, &applied32);
  g_test_message ("bf16, bf16 AdamW state: loss %g -> %g; FP32 state: %g -> %g",
                  first, last, first32, last32);
  g_assert_cmpuint (applied, ==, 300);
  g_assert_cmpfloat (first, ==, first32);
  g_assert_cmpfloat (last, <, first / 50);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/engine/fp16-no-master/adamw-bitwise", test_fp16nm_adamw_bitwise);
  g_test_add_func ("/engine/fp16-no-master/overflow-skips", test_fp16nm_overflow_skips);
  g_test_add_func ("/engine/fp16-no-master/stochastic-reproducible",
                   test_fp16nm_stochastic_reproducible);
  g_test_add_func ("/engine/fp16-no-master/loss-decreases", test_fp16nm_loss_decreases);
  g_test_add_func ("/engine/bf16-optimizer-states/adamw-bitwise", test_bf16_states_adamw_bitwise);
  g_test_add_func ("/engine/bf16-optimizer-states/loss-decreases", test_bf16_states_loss_decreases);
  return g_test_run ();
}
