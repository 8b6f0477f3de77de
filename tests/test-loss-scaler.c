/* test-loss-scaler.c — the loss scalers against DeepSpeed's published
 * sequences, hand-derived PyTorch and Megatron-LM sequences, and a second
 * implementation of DeepSpeed's DynamicLossScaler and torch's GradScaler
 * written here from their documented update rules. */
#include <float.h>
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

#define O TRUE  /* an overflowing step */
#define C FALSE /* a clean step */

/* Feeds @pattern and checks the scale after every step. */
static void
check_sequence (MixprecLossScaler *s,
                const gboolean    *pattern,
                const gdouble     *expected,
                guint              n)
{
  for (guint i = 0; i < n; i++)
    {
      g_autoptr(GError) error = NULL;

      g_assert_true (mixprec_loss_scaler_update (s, pattern[i], &error));
      g_assert_no_error (error);
      if (mixprec_loss_scaler_get_scale (s) != expected[i])
        g_error ("step %u: scale %.17g, expected %.17g", i, mixprec_loss_scaler_get_scale (s),
                 expected[i]);
    }
}

#define CHECK_SEQUENCE(s, pattern, expected)                                     \
  G_STMT_START {                                                                 \
    G_STATIC_ASSERT (G_N_ELEMENTS (pattern) == G_N_ELEMENTS (expected));         \
    check_sequence ((s), (pattern), (expected), G_N_ELEMENTS (pattern));         \
  } G_STMT_END

/* ------------------------------------------------------------------ DeepSpeed,
 * The table of DeepSpeed's tests/unit/runtime/half_precision/test_dynamic_loss_scale.py. */

/* Issue 15, item 8: values from a user are checked with a GError. */
static void
test_new_full_errors (void)
{
  const struct {
    gdouble init, min;
    guint window, hysteresis;
    const gchar *needle;
  } bad[] = {
    { -1.0, 1, 2, 2, "init_scale: must be a finite number of at least" },
    { 0.0, 1, 2, 2, "got 0" },
    { INFINITY, 1, 2, 2, "got inf" },
    { 256, 1, 0, 2, "scale_window: must be at least 1" },
    { 256, 1, 2, 0, "hysteresis: must be at least 1" },
    { 256, -1, 2, 2, "min_scale: must be a finite number, not negative, got -1" },
    { 256, NAN, 2, 2, "min_scale" },
  };
  g_autoptr(MixprecLossScaler) good = NULL;
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_assert_null (mixprec_dynamic_scaler_new_deepspeed_full (bad[i].init, bad[i].window,
                                                                bad[i].hysteresis, bad[i].min,
                                                                &error));
      g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG);
      g_assert_nonnull (strstr (error->message, bad[i].needle));
      g_clear_error (&error);
    }
  good = mixprec_dynamic_scaler_new_deepspeed_full (256, 2, 2, 1, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (good), ==, 256);
  g_clear_object (&good);

  g_assert_null (mixprec_static_scaler_new_full (-1.0, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG);
  g_assert_nonnull (strstr (error->message, "scale: must be a finite number"));
  g_clear_error (&error);
  good = mixprec_static_scaler_new_full (4, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (good), ==, 4);
}

static void
test_deepspeed_no_overflow (void)
{
  /* power 8, window 2, hysteresis 2, 10 clean steps. */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (256, 2, 2, 1);
  const gboolean pattern[] = { C, C, C, C, C, C, C, C, C, C };
  const gdouble expected[] = { 256, 256, 512, 512, 1024, 1024, 2048, 2048, 4096, 4096 };

  CHECK_SEQUENCE (s, pattern, expected);
  g_assert_cmpuint (mixprec_loss_scaler_get_steps (s), ==, 10);
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, 0);
}

static void
test_deepspeed_all_overflow (void)
{
  /* power 8, window 2, hysteresis 1: inf, -inf, then nan six times. */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (256, 2, 1, 1);
  const gboolean pattern[] = { O, O, O, O, O, O, O, O };
  const gdouble expected[] = { 128, 64, 32, 16, 8, 4, 2, 1 };

  CHECK_SEQUENCE (s, pattern, expected);
  g_assert_cmpuint (mixprec_loss_scaler_get_steps (s), ==, 8);
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, 8);
}

static void
test_deepspeed_some_overflow (void)
{
  /* power 8, window 2, hysteresis 1: [inf nan] -> 64 after 2; three clean
   * steps -> 64 64 128; [inf] -> 64. */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (256, 2, 1, 1);
  const gboolean pattern[] = { O, O, C, C, C, O };
  const gdouble expected[] = { 128, 64, 64, 64, 128, 64 };

  CHECK_SEQUENCE (s, pattern, expected);
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, 3);
}

static void
test_deepspeed_at_minimum (void)
{
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (4, 2, 1, 1);
  g_autoptr(MixprecLossScaler) t = mixprec_dynamic_scaler_new_deepspeed (3, 1000, 1, 2);
  g_autoptr(MixprecLossScaler) u = mixprec_dynamic_scaler_new_deepspeed (1.5, 1000, 1, 1);
  g_autoptr(GVariant) before = NULL;
  g_autoptr(GVariant) after = NULL;
  g_autoptr(GError) error = NULL;

  /* 4 -> 2 -> 1 reach the minimum without complaint; the error comes only
   * with the next overflow, the one that finds the scale already at 1. */
  g_assert_true (mixprec_loss_scaler_update (s, TRUE, NULL));
  g_assert_true (mixprec_loss_scaler_update (s, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 1);
  before = mixprec_loss_scaler_save_state (s);
  g_assert_false (mixprec_loss_scaler_update (s, TRUE, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);
  g_assert_nonnull (strstr (error->message,
                            "Current loss scale already at minimum - cannot decrease scale anymore"));
  g_clear_error (&error);
  /* DeepSpeed raises before touching its state: nothing moved, counters
   * included. */
  after = mixprec_loss_scaler_save_state (s);
  g_assert_true (g_variant_equal (before, after));
  g_assert_cmpuint (mixprec_loss_scaler_get_steps (s), ==, 2);
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, 2);

  /* A clean step is fine at the minimum. */
  g_assert_true (mixprec_loss_scaler_update (s, FALSE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 1);

  /* Without raise-at-min-scale the step is accepted, the scale stays. */
  g_object_set (s, "raise-at-min-scale", FALSE, NULL);
  g_assert_true (mixprec_loss_scaler_update (s, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 1);
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, 3);

  /* 3 / 2 = 1.5 is clamped to the minimum 2: halving below the minimum is
   * not an error, only starting from it is. */
  g_assert_true (mixprec_loss_scaler_update (t, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (t), ==, 2);
  g_assert_false (mixprec_loss_scaler_update (t, TRUE, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);
  g_clear_error (&error);

  /* 1.5 / 2 = 0.75 -> clamped to 1; then the error. */
  g_assert_true (mixprec_loss_scaler_update (u, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (u), ==, 1);
  g_assert_false (mixprec_loss_scaler_update (u, TRUE, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);
}

static void
test_deepspeed_at_minimum_hysteresis (void)
{
  /* At the minimum with hysteresis 2 the first overflow only uses up the
   * hysteresis (no error); the second finds cur_hysteresis == 1. */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (1, 1000, 2, 1);
  g_autoptr(GError) error = NULL;

  g_assert_true (mixprec_loss_scaler_update (s, TRUE, &error));
  g_assert_no_error (error);
  g_assert_false (mixprec_loss_scaler_update (s, TRUE, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);
}

static void
test_deepspeed_hysteresis_refill (void)
{
  /* init 256, window 2, hysteresis 2, not consecutive:
   * it0 O: cur_hysteresis 2 -> 1, scale kept            256
   * it1 C: stable = 1 - 0 - 1 = 0                       256
   * it2 C: stable 1                                     256
   * it3 C: stable 2, 2 % 2 == 0: refill to 2, x2        512
   * it4 O: 2 -> 1 (the refill saved this step)          512
   * it5 O: cur_hysteresis == 1: halve                   256 */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (256, 2, 2, 1);
  const gboolean pattern[] = { O, C, C, C, O, O };
  const gdouble expected[] = { 256, 256, 256, 512, 512, 256 };

  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_deepspeed_hysteresis_not_refilled_by_clean_step (void)
{
  /* init 256, window 2, hysteresis 2, not consecutive: a clean step between
   * two overflows does not refill.
   * it0 O: 2 -> 1          256
   * it1 C: stable 0        256
   * it2 O: == 1: halve     128 */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (256, 2, 2, 1);
  const gboolean pattern[] = { O, C, O };
  const gdouble expected[] = { 256, 256, 128 };

  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_deepspeed_consecutive_hysteresis (void)
{
  /* init 256, window 3, hysteresis 3, consecutive:
   * it0 O: 3 -> 2             256
   * it1 O: 2 -> 1             256
   * it2 C: refill to 3        256
   * it3 O: 3 -> 2             256
   * it4 O: 2 -> 1             256
   * it5 O: == 1: halve        128
   * Not consecutive, the clean step refills nothing:
   * it0 O 3->2 256, it1 O 2->1 256, it2 C 256, it3 O halve 128,
   * it4 O 64, it5 O 32. */
  const gboolean pattern[] = { O, O, C, O, O, O };
  const gdouble expected_consecutive[] = { 256, 256, 256, 256, 256, 128 };
  const gdouble expected_plain[] = { 256, 256, 256, 128, 64, 32 };
  g_autoptr(MixprecLossScaler) s = NULL;
  g_autoptr(MixprecLossScaler) t = NULL;

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "init-scale", 256.0, "scale-window", 3, "hysteresis", 3,
                    "consecutive-hysteresis", TRUE, NULL);
  CHECK_SEQUENCE (s, pattern, expected_consecutive);

  t = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "init-scale", 256.0, "scale-window", 3, "hysteresis", 3, NULL);
  CHECK_SEQUENCE (t, pattern, expected_plain);
}

static void
test_deepspeed_growth_counts_from_last_overflow (void)
{
  /* init 64, window 3, hysteresis 1: growth when (it - last_overflow - 1)
   * is a positive multiple of 3.
   * it0 C: stable 0 -> 64; it1 1; it2 2; it3 3: x2 -> 128
   * it4 O: halve -> 64, last = 4
   * it5 C: stable 0; it6 1; it7 2; it8 3: x2 -> 128
   * it9..it10 C: 4, 5; it11: 6 -> 256 */
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (64, 3, 1, 1);
  const gboolean pattern[] = { C, C, C, C, O, C, C, C, C, C, C, C };
  const gdouble expected[] = { 64, 64, 64, 128, 64, 64, 64, 64, 128, 128, 128, 256 };

  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_deepspeed_growth_factor (void)
{
  /* DeepSpeed divides by the same scale_factor it multiplies by; the
   * backoff factor is not used. init 81, factor 3, window 1, hysteresis 1,
   * min 1: O 27, O 9, C (stable 0) 9, C (stable 1) 27, O 9. */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { O, O, C, C, O };
  const gdouble expected[] = { 27, 9, 9, 27, 9 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "init-scale", 81.0, "growth-factor", 3.0, "backoff-factor", 0.9,
                    "scale-window", 1, "hysteresis", 1, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

/* ------------------------------------------------------------------ PyTorch */

static void
test_torch_sequence (void)
{
  /* GradScaler(init_scale=1024, growth_interval=3):
   * C t1, C t2, C t3 == 3: x2 -> 2048, t0
   * O x0.5 -> 1024, t0; C t1; C t2
   * O -> 512, t0; C t1; C t2; C t3: -> 1024 */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { C, C, C, O, C, C, O, C, C, C };
  const gdouble expected[] = { 1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 512, 1024 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                    "init-scale", 1024.0, "scale-window", 3, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_torch_no_hysteresis (void)
{
  /* PyTorch backs off on every overflow whatever hysteresis says, and has
   * no minimum: 4 -> 2 -> 1 -> 0.5 -> 0.25. */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { O, O, O, O };
  const gdouble expected[] = { 2, 1, 0.5, 0.25 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                    "init-scale", 4.0, "hysteresis", 5, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_torch_single_precision (void)
{
  /* The scale is a float32 tensor; each product is formed in double (a
   * float times a double) and rounded to float.
   * 1000 * 0.7: 0.7 is 0.69999999999999995559, the product rounds to the
   *   double 700 -> float 700;
   * 700 * 0.7 = 489.999999999999969 -> double 489.99999999999994 -> float
   *   490 (float ulp near 490 is 2^-15);
   * 490 * 1.1 = 539.0000000000000435 -> double 539 -> float 539;
   * 100 * 0.3 = 29.99999999999999889 -> double 30 -> float 30 (Megatron's
   *   float product gives 30.0000019073486328125 here, see below).
   * init 0.1 is stored as float 0.1 = 0.100000001490116119384765625. */
  g_autoptr(MixprecLossScaler) s = NULL;
  g_autoptr(MixprecLossScaler) t = NULL;
  g_autoptr(MixprecLossScaler) u = NULL;
  const gboolean pattern[] = { O, O, C };
  const gdouble expected[] = { 700, 490, 539 };
  const gboolean pattern_u[] = { O };
  const gdouble expected_u[] = { 30 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                    "init-scale", 1000.0, "scale-window", 1,
                    "growth-factor", 1.1, "backoff-factor", 0.7, NULL);
  CHECK_SEQUENCE (s, pattern, expected);

  t = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                    "init-scale", 0.1, NULL);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (t), ==, 0.100000001490116119384765625);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (t), !=, 0.1);

  u = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                    "init-scale", 100.0, "backoff-factor", 0.3, NULL);
  CHECK_SEQUENCE (u, pattern_u, expected_u);
}

/* ------------------------------------------------------------------ Apex */

static void
test_apex_sequence (void)
{
  /* apex.amp LossScaler("dynamic", init_scale=1024, scale_window=3,
   * min_loss_scale=None, max_loss_scale=4096), by hand:
   * C C C: _unskipped 3 == 3 -> x2                 1024 1024 2048
   * O: /2, _unskipped 0 (no hysteresis)             1024
   * C C: 1 2; O: /2 restarts the count              1024 1024 512
   * C C C: x2                                       512 512 1024
   * C C C: x2; C C C: min(4096, 4096); C C C: cap   ... 2048 ... 4096 ... 4096 */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { C, C, C, O, C, C, O, C, C, C, C, C, C, C, C, C, C, C, C };
  const gdouble expected[] = { 1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 512, 1024,
                               1024, 1024, 2048, 2048, 2048, 4096, 4096, 4096, 4096 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_APEX,
                    "init-scale", 1024.0, "scale-window", 3, "max-scale", 4096.0, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_apex_minimum (void)
{
  /* min_loss_scale 0.75: max(0.75, 1.5 / 2) = 0.75, then it stays;
   * without a minimum Apex keeps halving (in double precision, below
   * float's smallest normal number). */
  g_autoptr(MixprecLossScaler) s = NULL;
  g_autoptr(MixprecLossScaler) none = NULL;
  const gboolean pattern[] = { O, O, O, O };
  const gdouble expected[] = { 3, 1.5, 0.75, 0.75 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_APEX,
                    "init-scale", 6.0, "min-scale", 0.75, NULL);
  CHECK_SEQUENCE (s, pattern, expected);

  none = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", MIXPREC_SCALER_SEMANTICS_APEX,
                       "init-scale", 0x1p-120, NULL);
  for (guint i = 0; i < 20; i++)
    g_assert_true (mixprec_loss_scaler_update (none, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (none), ==, 0x1p-140);
}

/* ------------------------------------------------------------------ Megatron */

static void
test_megatron_sequence (void)
{
  /* init 1024, window 3, hysteresis 2, min 1:
   * O growth 0, hyst 2 -> 1 (> 0): kept     1024
   * O hyst 0 <= 0: x0.5                      512
   * O hyst -1: x0.5                          256
   * C growth 1; C growth 2                   256 256
   * C growth 3 == 3: growth 0, hyst 2, x2    512
   * O growth 0, hyst 1: kept                 512
   * C growth 1                               512
   * O growth 0, hyst 0: x0.5                 256
   * DeepSpeed semantics would have halved already at the second step and
   * not grown at the sixth. */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { O, O, O, C, C, C, O, C, O };
  const gdouble expected[] = { 1024, 512, 256, 256, 256, 512, 512, 512, 256 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                    "init-scale", 1024.0, "scale-window", 3, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_megatron_minimum (void)
{
  /* init 4, hysteresis 1, min 1: 2, 1, then max(0.5, 1) = 1 with no
   * error, as Megatron-LM has none. */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { O, O, O, O };
  const gdouble expected[] = { 2, 1, 1, 1 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                    "init-scale", 4.0, "hysteresis", 1, "raise-at-min-scale", TRUE, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_megatron_single_precision (void)
{
  /* A float32 tensor times a Python number is computed in float32: the
   * factor is rounded to float first. (float) 0.3 = 0.300000011920928955078125;
   * 100 * that = 30.0000011920928955078125 exactly; float neighbours are 30
   * and 30 + 2^-19 = 30.0000019073486328125, and the product is nearer the
   * latter (0.715e-6 against 1.192e-6). PyTorch semantics give 30. */
  g_autoptr(MixprecLossScaler) s = NULL;
  const gboolean pattern[] = { O };
  const gdouble expected[] = { 30.0000019073486328125 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                    "init-scale", 100.0, "hysteresis", 1, "min-scale", 1.0,
                    "backoff-factor", 0.3, NULL);
  CHECK_SEQUENCE (s, pattern, expected);
}

/* ------------------------------------------------------------------ limits */

static void
test_max_scale (void)
{
  /* DeepSpeed, init 256, window 1, max 1000:
   * it0 stable 0: 256; it1: 512; it2: 1024 capped to 1000; it3: 1000. */
  g_autoptr(MixprecLossScaler) s = NULL;
  g_autoptr(MixprecLossScaler) t = NULL;
  g_autoptr(MixprecLossScaler) u = NULL;
  const gboolean pattern[] = { C, C, C, C };
  const gdouble expected[] = { 256, 512, 1000, 1000 };
  const gboolean torch_pattern[] = { C, C, O, C };
  const gdouble torch_expected[] = { 16, 24, 12, 24 };
  const gboolean above_pattern[] = { C, C, O, C };
  const gdouble above_expected[] = { 4096, 4096, 2048, 2048 };

  s = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "init-scale", 256.0, "scale-window", 1, "max-scale", 1000.0, NULL);
  CHECK_SEQUENCE (s, pattern, expected);

  /* PyTorch, init 8, interval 1, max 24: 16, 32 -> 24, 12, 24. */
  t = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                    "init-scale", 8.0, "scale-window", 1, "max-scale", 24.0, NULL);
  CHECK_SEQUENCE (t, torch_pattern, torch_expected);

  /* A scale above the cap is not lowered by growth, only by overflows; once
   * at or below the cap it is held there: Megatron, init 4096, max 2048,
   * window 1, hysteresis 1: C (growth, capped at max(2048, 4096)) 4096,
   * C 4096, O 2048, C 2048. */
  u = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                    "init-scale", 4096.0, "scale-window", 1, "hysteresis", 1,
                    "max-scale", 2048.0, NULL);
  CHECK_SEQUENCE (u, above_pattern, above_expected);
}

static void
test_never_infinite (void)
{
  const gdouble big_double = ldexp (1.0, 1023);
  const gdouble big_float = ldexp (1.0, 127);
  g_autoptr(MixprecLossScaler) ds = NULL;
  g_autoptr(MixprecLossScaler) torch = NULL;
  g_autoptr(MixprecLossScaler) mega = NULL;
  g_autoptr(MixprecLossScaler) huge = NULL;

  /* DeepSpeed: 2^1023 * 2 is inf in double: the growth keeps 2^1023. */
  ds = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                     "init-scale", big_double, "scale-window", 1, NULL);
  for (guint i = 0; i < 5; i++)
    {
      g_assert_true (mixprec_loss_scaler_update (ds, FALSE, NULL));
      g_assert_cmpfloat (mixprec_loss_scaler_get_scale (ds), ==, big_double);
    }
  g_assert_true (mixprec_loss_scaler_update (ds, TRUE, NULL));
  g_assert_true (mixprec_loss_scaler_update (ds, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (ds), ==, ldexp (1.0, 1022));

  /* PyTorch: 2^127 * 2 is inf in float: not finite, the scale is kept. */
  torch = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                        "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                        "init-scale", big_float, "scale-window", 1, NULL);
  for (guint i = 0; i < 5; i++)
    {
      g_assert_true (mixprec_loss_scaler_update (torch, FALSE, NULL));
      g_assert_cmpfloat (mixprec_loss_scaler_get_scale (torch), ==, big_float);
    }

  /* Megatron-LM would reach inf; libmixprec keeps the scale. */
  mega = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                       "init-scale", big_float, "scale-window", 1, NULL);
  for (guint i = 0; i < 5; i++)
    {
      g_assert_true (mixprec_loss_scaler_update (mega, FALSE, NULL));
      g_assert_cmpfloat (mixprec_loss_scaler_get_scale (mega), ==, big_float);
    }

  /* An init scale beyond FLT_MAX is held at FLT_MAX in single precision. */
  huge = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                       "init-scale", 1e300, NULL);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (huge), ==, FLT_MAX);
}

static void
test_never_zero (void)
{
  g_autoptr(MixprecLossScaler) ds = NULL;
  g_autoptr(MixprecLossScaler) ds_quiet = NULL;
  g_autoptr(MixprecLossScaler) torch = NULL;
  g_autoptr(MixprecLossScaler) mega = NULL;
  g_autoptr(GError) error = NULL;

  /* DeepSpeed with min-scale 0: 4*DBL_MIN -> 2*DBL_MIN -> DBL_MIN, where the
   * scale stops; the next overflow finds it at its (effective) minimum. */
  ds = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                     "init-scale", 4 * DBL_MIN, "min-scale", 0.0, "hysteresis", 1, NULL);
  g_assert_true (mixprec_loss_scaler_update (ds, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (ds), ==, 2 * DBL_MIN);
  g_assert_true (mixprec_loss_scaler_update (ds, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (ds), ==, DBL_MIN);
  g_assert_false (mixprec_loss_scaler_update (ds, TRUE, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);

  ds_quiet = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                           "init-scale", 1.0, "min-scale", 0.0, "hysteresis", 1,
                           "raise-at-min-scale", FALSE, NULL);
  for (guint i = 0; i < 1100; i++)
    g_assert_true (mixprec_loss_scaler_update (ds_quiet, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (ds_quiet), ==, DBL_MIN);
  g_assert_cmpfloat (1.0 / mixprec_loss_scaler_get_scale (ds_quiet), <, INFINITY);

  /* PyTorch (no minimum): 2^-125 -> 2^-126 = FLT_MIN, then held there
   * instead of going subnormal and finally to zero. */
  torch = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                        "semantics", MIXPREC_SCALER_SEMANTICS_TORCH,
                        "init-scale", ldexp (1.0, -125), NULL);
  g_assert_true (mixprec_loss_scaler_update (torch, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (torch), ==, FLT_MIN);
  for (guint i = 0; i < 200; i++)
    g_assert_true (mixprec_loss_scaler_update (torch, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (torch), ==, FLT_MIN);
  g_assert_cmpfloat ((float) (1.0 / mixprec_loss_scaler_get_scale (torch)), <, INFINITY);

  mega = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                       "init-scale", 1.0, "min-scale", 0.0, "hysteresis", 1, NULL);
  for (guint i = 0; i < 300; i++)
    g_assert_true (mixprec_loss_scaler_update (mega, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (mega), ==, FLT_MIN);
}

/* ------------------------------------------------------------------ static */

static void
test_static (void)
{
  g_autoptr(MixprecLossScaler) s = mixprec_static_scaler_new (128);
  g_autoptr(MixprecLossScaler) one = g_object_new (MIXPREC_TYPE_STATIC_SCALER, NULL);
  const gboolean pattern[] = { O, C, O, O, C, C, C, C, C, O };
  gdouble scale = 0;

  g_assert_true (MIXPREC_IS_STATIC_SCALER (s));
  for (guint i = 0; i < G_N_ELEMENTS (pattern); i++)
    {
      g_assert_true (mixprec_loss_scaler_update (s, pattern[i], NULL));
      g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 128);
    }
  g_assert_cmpuint (mixprec_loss_scaler_get_steps (s), ==, 10);
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, 4);
  g_object_get (s, "scale", &scale, NULL);
  g_assert_cmpfloat (scale, ==, 128);
  g_object_get (s, "init-scale", &scale, NULL);
  g_assert_cmpfloat (scale, ==, 128);

  /* The default is 1: bf16 and fp32 training. */
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (one), ==, 1);
}

/* ------------------------------------------------------------------ properties */

static void
test_properties_defaults (void)
{
  struct
  {
    MixprecScalerSemantics semantics;
    gdouble init_scale;
    guint window;
    guint hysteresis;
    gdouble min_scale;
    gboolean raise;
    gdouble max_scale;
  } cases[] = {
    /* DeepSpeed's defaults (mixprec.json(5)): 2^16, 1000, 2, 1,
     * raise_error_at_min_scale True. */
    { MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 65536.0, 1000, 2, 1.0, TRUE },
    /* PyTorch's GradScaler (torch/amp/grad_scaler.py): 2^16,
     * growth_interval 2000, no hysteresis, no minimum. */
    { MIXPREC_SCALER_SEMANTICS_TORCH, 65536.0, 2000, 1, 0.0, FALSE },
    /* Megatron-LM's DynamicGradScaler as its training arguments set it up
     * (megatron/core/optimizer/grad_scaler.py): 2^32, window 1000,
     * hysteresis 2, min 1. */
    { MIXPREC_SCALER_SEMANTICS_MEGATRON, 4294967296.0, 1000, 2, 1.0, FALSE },
    /* Apex amp's LossScaler: 2^16, scale_window 2000, min_loss_scale None,
     * max_loss_scale 2^24. */
    { MIXPREC_SCALER_SEMANTICS_APEX, 65536.0, 2000, 1, 0.0, FALSE, 16777216.0 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new (cases[i].semantics);
      MixprecScalerSemantics semantics;
      gdouble init_scale, min_scale, max_scale, growth, backoff, scale;
      guint window, hysteresis;
      gboolean consecutive, raise;

      g_object_get (s, "semantics", &semantics, "init-scale", &init_scale,
                    "scale-window", &window, "hysteresis", &hysteresis,
                    "consecutive-hysteresis", &consecutive, "min-scale", &min_scale,
                    "max-scale", &max_scale, "growth-factor", &growth,
                    "backoff-factor", &backoff, "raise-at-min-scale", &raise,
                    "scale", &scale, NULL);
      g_assert_cmpint (semantics, ==, cases[i].semantics);
      g_assert_cmpint (mixprec_dynamic_scaler_get_semantics (MIXPREC_DYNAMIC_SCALER (s)), ==,
                       cases[i].semantics);
      g_assert_cmpfloat (init_scale, ==, cases[i].init_scale);
      g_assert_cmpfloat (scale, ==, cases[i].init_scale);
      g_assert_cmpuint (window, ==, cases[i].window);
      g_assert_cmpuint (hysteresis, ==, cases[i].hysteresis);
      g_assert_false (consecutive);
      g_assert_cmpfloat (min_scale, ==, cases[i].min_scale);
      g_assert_cmpfloat (max_scale, ==, cases[i].max_scale);
      g_assert_cmpfloat (growth, ==, 2);
      g_assert_cmpfloat (backoff, ==, 0.5);
      g_assert_cmpint (raise, ==, cases[i].raise);
    }
}

static void
test_properties_keywords_override_defaults (void)
{
  /* Given in either order, explicit values win over the semantics'
   * defaults. */
  g_autoptr(MixprecLossScaler) a = NULL;
  g_autoptr(MixprecLossScaler) b = NULL;
  guint window_a, window_b;
  gdouble min_a, min_b;

  a = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "scale-window", 7, "min-scale", 0.25,
                    "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON, NULL);
  b = g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                    "semantics", MIXPREC_SCALER_SEMANTICS_MEGATRON,
                    "min-scale", 0.25, "scale-window", 7, NULL);
  g_object_get (a, "scale-window", &window_a, "min-scale", &min_a, NULL);
  g_object_get (b, "scale-window", &window_b, "min-scale", &min_b, NULL);
  g_assert_cmpuint (window_a, ==, 7);
  g_assert_cmpuint (window_b, ==, 7);
  g_assert_cmpfloat (min_a, ==, 0.25);
  g_assert_cmpfloat (min_b, ==, 0.25);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (a), ==, 4294967296.0);
}

static void
count_notify (GObject    *object,
              GParamSpec *pspec,
              gpointer    user_data)
{
  (*(guint *) user_data)++;
}

static void
test_properties_round_trip (void)
{
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new (MIXPREC_SCALER_SEMANTICS_DEEPSPEED);
  guint scale_notes = 0, window_notes = 0;
  gdouble d;
  guint u;
  gboolean b;

  g_signal_connect (s, "notify::scale", G_CALLBACK (count_notify), &scale_notes);
  g_signal_connect (s, "notify::scale-window", G_CALLBACK (count_notify), &window_notes);

  g_object_set (s, "init-scale", 512.0, "scale-window", 3, "hysteresis", 4,
                "consecutive-hysteresis", TRUE, "min-scale", 0.5, "max-scale", 1e6,
                "growth-factor", 4.0, "backoff-factor", 0.25, "raise-at-min-scale", FALSE,
                NULL);
  g_object_get (s, "init-scale", &d, NULL);
  g_assert_cmpfloat (d, ==, 512);
  g_object_get (s, "scale-window", &u, NULL);
  g_assert_cmpuint (u, ==, 3);
  g_object_get (s, "hysteresis", &u, NULL);
  g_assert_cmpuint (u, ==, 4);
  g_object_get (s, "consecutive-hysteresis", &b, NULL);
  g_assert_true (b);
  g_object_get (s, "min-scale", &d, NULL);
  g_assert_cmpfloat (d, ==, 0.5);
  g_object_get (s, "max-scale", &d, NULL);
  g_assert_cmpfloat (d, ==, 1e6);
  g_object_get (s, "growth-factor", &d, NULL);
  g_assert_cmpfloat (d, ==, 4);
  g_object_get (s, "backoff-factor", &d, NULL);
  g_assert_cmpfloat (d, ==, 0.25);
  g_object_get (s, "raise-at-min-scale", &b, NULL);
  g_assert_false (b);

  /* Before the first update init-scale is the scale. */
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 512);
  g_assert_cmpuint (scale_notes, ==, 1);
  g_assert_cmpuint (window_notes, ==, 1);
  g_object_set (s, "scale-window", 3, NULL);
  g_assert_cmpuint (window_notes, ==, 1);

  /* hysteresis 4 was set before the first update: four overflows are
   * needed (consecutive) before the scale divides by the growth factor 4. */
  for (guint i = 0; i < 3; i++)
    g_assert_true (mixprec_loss_scaler_update (s, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 512);
  g_assert_true (mixprec_loss_scaler_update (s, TRUE, NULL));
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 128);
  g_assert_cmpuint (scale_notes, ==, 2);

  /* After the first update init-scale no longer moves the scale. */
  g_object_set (s, "init-scale", 8.0, NULL);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, 128);
  g_object_get (s, "init-scale", &d, NULL);
  g_assert_cmpfloat (d, ==, 8);
}

/* ------------------------------------------------------------------ a second
 * implementation, transcribed from DeepSpeed's DynamicLossScaler and torch's
 * GradScaler update rules plus libmixprec's
 * documented limits (growth that is not finite keeps the scale; the scale
 * stays at least the smallest normal number; optional max-scale). */

typedef struct
{
  MixprecScalerSemantics semantics;
  double init_scale;
  unsigned window;
  unsigned hysteresis;
  gboolean consecutive;
  double min_scale;
  double max_scale;
  double growth;
  double backoff;
  gboolean raise;
} RefParams;

typedef struct
{
  double cur_scale;          /* DeepSpeed */
  float scale;               /* PyTorch, Megatron: a float32 tensor */
  long long cur_iter;
  long long last_overflow_iter;
  long long cur_hysteresis;  /* also Megatron's _hysteresis_tracker */
  long long growth_tracker;
} RefState;

static void
ref_init (RefState        *r,
          const RefParams *p)
{
  memset (r, 0, sizeof *r);
  r->cur_scale = p->init_scale;
  r->scale = p->init_scale > FLT_MAX ? FLT_MAX : (float) p->init_scale;
  if (r->scale < FLT_MIN)
    r->scale = FLT_MIN;
  r->last_overflow_iter = -1;
  r->cur_hysteresis = p->hysteresis;
}

static double
ref_scale (const RefState  *r,
           const RefParams *p)
{
  return p->semantics == MIXPREC_SCALER_SEMANTICS_DEEPSPEED
         || p->semantics == MIXPREC_SCALER_SEMANTICS_APEX ? r->cur_scale : (double) r->scale;
}

/* Floor and cap in float for the two tensor-based scalers. */
static float
ref_float_min (const RefParams *p)
{
  float m = (float) p->min_scale;

  return m < FLT_MIN ? FLT_MIN : m;
}

static float
ref_float_grow (const RefParams *p,
                float            before,
                float            grown)
{
  if (isinf (grown))
    return before;
  if (p->max_scale > 0 && grown > (float) p->max_scale)
    return before > (float) p->max_scale ? before : (float) p->max_scale;
  return grown;
}

/* Returns FALSE where DeepSpeed raises (state untouched). */
static gboolean
ref_update (RefState        *r,
            const RefParams *p,
            gboolean         overflow)
{
  switch (p->semantics)
    {
    case MIXPREC_SCALER_SEMANTICS_DEEPSPEED:
      {
        double min_scale = p->min_scale < DBL_MIN ? DBL_MIN : p->min_scale;

        if (overflow)
          {
            if (p->hysteresis == 1 || r->cur_hysteresis == 1)
              {
                double halved;

                if (r->cur_scale == min_scale && p->raise)
                  return FALSE;
                halved = r->cur_scale / p->growth;
                r->cur_scale = halved > min_scale ? halved : min_scale;
              }
            else
              {
                r->cur_hysteresis -= 1;
              }
            r->last_overflow_iter = r->cur_iter;
          }
        else
          {
            long long stable;

            if (p->consecutive)
              r->cur_hysteresis = p->hysteresis;
            stable = (r->cur_iter - r->last_overflow_iter) - 1;
            if (stable > 0 && stable % p->window == 0)
              {
                double grown = r->cur_scale * p->growth;

                if (!p->consecutive)
                  r->cur_hysteresis = p->hysteresis;
                if (isinf (grown))
                  grown = r->cur_scale;
                if (p->max_scale > 0 && grown > p->max_scale)
                  grown = r->cur_scale > p->max_scale ? r->cur_scale : p->max_scale;
                r->cur_scale = grown;
              }
          }
        r->cur_iter += 1;
        return TRUE;
      }

    case MIXPREC_SCALER_SEMANTICS_APEX:
      /* apex/amp/scaler.py, update_scale(): a Python float, _unskipped
       * counting clean steps; plus the library's floor at the smallest
       * normal double and no infinite growth. */
      if (overflow)
        {
          double lowered = r->cur_scale * p->backoff;
          double floor = p->min_scale > DBL_MIN ? p->min_scale : DBL_MIN;

          r->cur_scale = lowered > floor ? lowered : floor;
          r->growth_tracker = 0;
        }
      else
        {
          r->growth_tracker += 1;
          if (r->growth_tracker == (long long) p->window)
            {
              double grown = r->cur_scale * p->growth;

              if (isinf (grown))
                grown = r->cur_scale;
              if (p->max_scale > 0 && grown > p->max_scale)
                grown = r->cur_scale > p->max_scale ? r->cur_scale : p->max_scale;
              r->cur_scale = grown;
              r->growth_tracker = 0;
            }
        }
      return TRUE;

    case MIXPREC_SCALER_SEMANTICS_TORCH:
      if (overflow)
        {
          float lowered = (float) ((double) r->scale * p->backoff);

          r->scale = lowered < ref_float_min (p) ? ref_float_min (p) : lowered;
          r->growth_tracker = 0;
        }
      else
        {
          r->growth_tracker += 1;
          if (r->growth_tracker == (long long) p->window)
            {
              float grown = (float) ((double) r->scale * p->growth);

              if (isfinite (grown))
                r->scale = ref_float_grow (p, r->scale, grown);
              r->growth_tracker = 0;
            }
        }
      return TRUE;

    case MIXPREC_SCALER_SEMANTICS_MEGATRON:
    default:
      if (overflow)
        {
          r->growth_tracker = 0;
          r->cur_hysteresis -= 1;
          if (r->cur_hysteresis <= 0)
            {
              float lowered = r->scale * (float) p->backoff;

              r->scale = lowered > ref_float_min (p) ? lowered : ref_float_min (p);
            }
        }
      else
        {
          r->growth_tracker += 1;
          if (r->growth_tracker == (long long) p->window)
            {
              r->growth_tracker = 0;
              r->cur_hysteresis = p->hysteresis;
              r->scale = ref_float_grow (p, r->scale, r->scale * (float) p->growth);
            }
        }
      return TRUE;
    }
}

static MixprecLossScaler *
scaler_from_params (const RefParams *p)
{
  return g_object_new (MIXPREC_TYPE_DYNAMIC_SCALER,
                       "semantics", p->semantics,
                       "init-scale", p->init_scale,
                       "scale-window", p->window,
                       "hysteresis", p->hysteresis,
                       "consecutive-hysteresis", p->consecutive,
                       "min-scale", p->min_scale,
                       "max-scale", p->max_scale,
                       "growth-factor", p->growth,
                       "backoff-factor", p->backoff,
                       "raise-at-min-scale", p->raise,
                       NULL);
}

static gint64
state_int64 (GVariant    *state,
             const gchar *key)
{
  gint64 v = 0;

  g_assert_true (g_variant_lookup (state, key, "x", &v));
  return v;
}

#define DS MIXPREC_SCALER_SEMANTICS_DEEPSPEED
#define TORCH MIXPREC_SCALER_SEMANTICS_TORCH
#define MEGATRON MIXPREC_SCALER_SEMANTICS_MEGATRON
#define APEX MIXPREC_SCALER_SEMANTICS_APEX

static const RefParams long_run_params[] = {
  /* semantics  init          window hyst consec min     max      growth backoff raise */
  { DS,       65536.0,        1000,  2,   FALSE, 1.0,    0,       2.0,   0.5,    TRUE },
  { DS,       256.0,          2,     1,   FALSE, 1.0,    0,       2.0,   0.5,    TRUE },
  { DS,       1048576.0,      7,     3,   TRUE,  0.25,   16777216, 2.0,  0.5,    TRUE },
  { DS,       1000.0,         5,     2,   FALSE, 1e-3,   0,       3.0,   0.5,    FALSE },
  { DS,       0x1p1000,       1,     1,   FALSE, 0.0,    0,       2.0,   0.5,    FALSE },
  { DS,       0x1p1020,       3,     4,   TRUE,  1.0,    0,       1.7,   0.5,    TRUE },
  { TORCH,    65536.0,        2000,  1,   FALSE, 0.0,    0,       2.0,   0.5,    FALSE },
  { TORCH,    1024.0,         3,     1,   FALSE, 0.0,    0,       1.1,   0.7,    FALSE },
  { TORCH,    0x1p120,        1,     1,   FALSE, 0.0,    0,       2.0,   0.5,    FALSE },
  { TORCH,    1.0,            50,    1,   FALSE, 0.0,    0,       2.0,   0.3,    FALSE },
  { TORCH,    3.0,            4,     1,   FALSE, 0.01,   1e6,     1.5,   0.5,    FALSE },
  { MEGATRON, 4294967296.0,   1000,  2,   FALSE, 1.0,    0,       2.0,   0.5,    FALSE },
  { MEGATRON, 1024.0,         3,     2,   FALSE, 0.5,    0,       1.3,   0.6,    FALSE },
  { MEGATRON, 0x1p120,        1,     1,   FALSE, 1.0,    0,       2.0,   0.5,    FALSE },
  { MEGATRON, 1.0,            100,   1,   FALSE, 0.0,    0,       2.0,   0.5,    FALSE },
  { MEGATRON, 77.0,           9,     3,   FALSE, 2.0,    5000,    1.9,   0.45,   FALSE },
  { APEX,     65536.0,        2000,  1,   FALSE, 0.0,    16777216, 2.0,  0.5,    FALSE },
  { APEX,     1024.0,         3,     1,   FALSE, 0.3,    1e6,     2.0,   0.5,    FALSE },
  { APEX,     0x1p1000,       1,     1,   FALSE, 0.0,    0,       2.0,   0.5,    FALSE },
  { APEX,     1.0,            50,    1,   FALSE, 0.0,    0,       1.5,   0.25,   FALSE },
};

static const gdouble long_run_probabilities[] = { 0.0005, 0.01, 0.2, 0.6 };

#define LONG_RUN_STEPS 100000

static void
test_long_runs (void)
{
  guint64 total_steps = 0, total_refused = 0;

  for (guint k = 0; k < G_N_ELEMENTS (long_run_params); k++)
    for (guint q = 0; q < G_N_ELEMENTS (long_run_probabilities); q++)
      {
        const RefParams *p = &long_run_params[k];
        g_autoptr(GRand) rand = g_rand_new_with_seed (1000 * k + q + 1);
        g_autoptr(MixprecLossScaler) s = scaler_from_params (p);
        guint64 overflows = 0, accepted = 0;
        RefState r;

        ref_init (&r, p);
        g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, ref_scale (&r, p));

        for (guint i = 0; i < LONG_RUN_STEPS; i++)
          {
            gboolean overflow = g_rand_double (rand) < long_run_probabilities[q];
            g_autoptr(GError) error = NULL;
            gboolean expected_ok = ref_update (&r, p, overflow);
            gboolean ok = mixprec_loss_scaler_update (s, overflow, &error);
            gdouble scale = mixprec_loss_scaler_get_scale (s);

            if (ok != expected_ok || scale != ref_scale (&r, p))
              g_error ("params %u, p %g, step %u (%s): library %s scale %.17g, "
                       "reference %s scale %.17g", k, long_run_probabilities[q], i,
                       overflow ? "overflow" : "clean", ok ? "accepted" : "refused", scale,
                       expected_ok ? "accepted" : "refused", ref_scale (&r, p));
            if (ok)
              {
                g_assert_no_error (error);
                accepted++;
                overflows += overflow;
              }
            else
              {
                g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);
                total_refused++;
              }
            g_assert_true (isfinite (scale) && scale > 0);

            /* The hidden counters too, now and then. */
            if (i % 4099 == 0)
              {
                g_autoptr(GVariant) state = mixprec_loss_scaler_save_state (s);

                g_assert_cmpint (state_int64 (state, "hysteresis-left"), ==, r.cur_hysteresis);
                if (p->semantics == DS)
                  g_assert_cmpint (state_int64 (state, "last-overflow-iteration"), ==,
                                   r.last_overflow_iter);
              }
          }
        g_assert_cmpuint (mixprec_loss_scaler_get_steps (s), ==, accepted);
        g_assert_cmpuint (mixprec_loss_scaler_get_overflows (s), ==, overflows);
        total_steps += LONG_RUN_STEPS;
      }

  g_test_message ("%" G_GUINT64_FORMAT " steps compared, %" G_GUINT64_FORMAT
                  " refused at the minimum", total_steps, total_refused);
  /* The parameter sets are chosen so that the refusal path is exercised. */
  g_assert_cmpuint (total_refused, >, 0);
}

/* ------------------------------------------------------------------ state */

static void
check_resume (MixprecLossScaler *a,
              MixprecLossScaler *fresh,
              guint              seed)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);
  g_autoptr(GVariant) state = NULL;
  g_autoptr(GVariant) state_again = NULL;
  g_autoptr(GError) error = NULL;
  MixprecLossScaler *b = fresh;

  for (guint i = 0; i < 237; i++)
    (void) mixprec_loss_scaler_update (a, g_rand_double (rand) < 0.3, NULL);

  state = mixprec_loss_scaler_save_state (a);
  g_assert_false (g_variant_is_floating (state));
  g_assert_true (g_variant_is_of_type (state, G_VARIANT_TYPE_VARDICT));
  g_assert_true (mixprec_loss_scaler_restore_state (b, state, &error));
  g_assert_no_error (error);
  state_again = mixprec_loss_scaler_save_state (b);
  g_assert_true (g_variant_equal (state, state_again));
  g_assert_cmpuint (mixprec_loss_scaler_get_steps (b), ==, mixprec_loss_scaler_get_steps (a));
  g_assert_cmpuint (mixprec_loss_scaler_get_overflows (b), ==,
                    mixprec_loss_scaler_get_overflows (a));

  for (guint i = 0; i < 5000; i++)
    {
      gboolean overflow = g_rand_double (rand) < 0.3;
      g_autoptr(GError) error_a = NULL;
      g_autoptr(GError) error_b = NULL;
      gboolean ok_a = mixprec_loss_scaler_update (a, overflow, &error_a);
      gboolean ok_b = mixprec_loss_scaler_update (b, overflow, &error_b);
      gdouble sa = mixprec_loss_scaler_get_scale (a);
      gdouble sb = mixprec_loss_scaler_get_scale (b);

      g_assert_cmpint (ok_a, ==, ok_b);
      g_assert_cmpmem (&sa, sizeof sa, &sb, sizeof sb);
    }
  g_assert_cmpuint (mixprec_loss_scaler_get_steps (b), ==, mixprec_loss_scaler_get_steps (a));
}

static void
test_state_resume (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (long_run_params); k++)
    {
      g_autoptr(MixprecLossScaler) a = scaler_from_params (&long_run_params[k]);
      /* Different parameters on purpose: the state carries them. */
      g_autoptr(MixprecLossScaler) b = mixprec_dynamic_scaler_new (long_run_params[k].semantics);

      check_resume (a, b, 77 + k);
    }

  {
    g_autoptr(MixprecLossScaler) a = mixprec_static_scaler_new (64);
    g_autoptr(MixprecLossScaler) b = mixprec_static_scaler_new (1);

    check_resume (a, b, 5);
    g_assert_cmpfloat (mixprec_loss_scaler_get_scale (b), ==, 64);
  }
}

/* Replaces (or with @value NULL removes) one key of a saved state. */
static GVariant *
edit_state (GVariant    *state,
            const gchar *key,
            GVariant    *value)
{
  g_autoptr(GVariantDict) dict = g_variant_dict_new (state);

  if (value != NULL)
    g_variant_dict_insert_value (dict, key, value);
  else
    g_variant_dict_remove (dict, key);
  return g_variant_ref_sink (g_variant_dict_end (dict));
}

static void
check_refused (MixprecLossScaler *s,
               GVariant          *bad,
               const gchar       *words)
{
  g_autoptr(GVariant) before = mixprec_loss_scaler_save_state (s);
  g_autoptr(GVariant) after = NULL;
  g_autoptr(GVariant) owned = g_variant_take_ref (bad);
  g_autoptr(GError) error = NULL;

  g_assert_false (mixprec_loss_scaler_restore_state (s, owned, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_STATE);
  if (strstr (error->message, words) == NULL)
    g_error ("message “%s” does not mention “%s”", error->message, words);
  after = mixprec_loss_scaler_save_state (s);
  g_assert_true (g_variant_equal (before, after));
}

static void
test_state_errors (void)
{
  g_autoptr(MixprecLossScaler) s = mixprec_dynamic_scaler_new_deepspeed (256, 2, 2, 1);
  g_autoptr(MixprecLossScaler) torch = mixprec_dynamic_scaler_new (MIXPREC_SCALER_SEMANTICS_TORCH);
  g_autoptr(MixprecLossScaler) stat = mixprec_static_scaler_new (8);
  g_autoptr(MixprecLossScaler) target = mixprec_dynamic_scaler_new_deepspeed (4, 5, 1, 1);
  g_autoptr(GVariant) good = NULL;
  g_autoptr(GVariant) torch_state = NULL;

  for (guint i = 0; i < 9; i++)
    g_assert_true (mixprec_loss_scaler_update (s, i % 4 == 0, NULL));
  mixprec_loss_scaler_update (target, FALSE, NULL);
  good = mixprec_loss_scaler_save_state (s);
  torch_state = mixprec_loss_scaler_save_state (torch);

  check_refused (target, g_variant_new_int32 (3), "a{sv}");
  check_refused (target, edit_state (good, "type", g_variant_new_string ("MixprecStaticScaler")),
                 "MixprecStaticScaler");
  check_refused (target, edit_state (good, "type", NULL), "“type” is missing");
  check_refused (stat, g_variant_ref (good), "MixprecDynamicScaler");
  check_refused (target, g_variant_ref (torch_state), "torch");
  check_refused (target, edit_state (good, "hysteresis-left", NULL), "“hysteresis-left” is missing");
  check_refused (target, edit_state (good, "scale", g_variant_new_int32 (256)), "“scale” must hold a value of type “d”");
  check_refused (target, edit_state (good, "steps", g_variant_new_int64 (9)), "“steps” must hold a value of type “t”");
  check_refused (target, edit_state (good, "scale", g_variant_new_double (NAN)), "“scale”");
  check_refused (target, edit_state (good, "scale", g_variant_new_double (-1)), "“scale”");
  check_refused (target, edit_state (good, "scale-window", g_variant_new_uint32 (0)), "“scale-window”");
  check_refused (target, edit_state (good, "growth-factor", g_variant_new_double (1.0)), "“growth-factor”");
  check_refused (target, edit_state (good, "backoff-factor", g_variant_new_double (1.0)), "“backoff-factor”");
  check_refused (target, edit_state (good, "hysteresis-left", g_variant_new_int64 (0)), "“hysteresis-left”");
  check_refused (target, edit_state (good, "last-overflow-iteration", g_variant_new_int64 (9)),
                 "“last-overflow-iteration”");
  check_refused (target, edit_state (good, "overflows", g_variant_new_uint64 (10)), "“overflows”");
  check_refused (torch, edit_state (torch_state, "scale", g_variant_new_double (0.1)), "single-precision");

  /* Unknown keys are ignored. */
  {
    g_autoptr(GVariant) extra = edit_state (good, "from-the-future", g_variant_new_string ("x"));
    g_autoptr(GError) error = NULL;

    g_assert_true (mixprec_loss_scaler_restore_state (target, extra, &error));
    g_assert_no_error (error);
    g_assert_cmpfloat (mixprec_loss_scaler_get_scale (target), ==,
                       mixprec_loss_scaler_get_scale (s));
  }
}

/* ------------------------------------------------------------------ config */

static MixprecLossScaler *
scaler_from_json (const gchar *json)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecLossScaler *s;

  g_assert_no_error (error);
  s = mixprec_loss_scaler_new_from_config (config, &error);
  g_assert_no_error (error);
  g_assert_nonnull (s);
  return s;
}

static void
check_dynamic (MixprecLossScaler     *s,
               MixprecScalerSemantics semantics,
               gdouble                init_scale,
               guint                  window,
               guint                  hysteresis,
               gdouble                min_scale)
{
  MixprecScalerSemantics got_semantics;
  gdouble got_init, got_min;
  guint got_window, got_hysteresis;

  g_assert_true (MIXPREC_IS_DYNAMIC_SCALER (s));
  g_object_get (s, "semantics", &got_semantics, "init-scale", &got_init,
                "scale-window", &got_window, "hysteresis", &got_hysteresis,
                "min-scale", &got_min, NULL);
  g_assert_cmpint (got_semantics, ==, semantics);
  g_assert_cmpfloat (got_init, ==, init_scale);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, init_scale);
  g_assert_cmpuint (got_window, ==, window);
  g_assert_cmpuint (got_hysteresis, ==, hysteresis);
  g_assert_cmpfloat (got_min, ==, min_scale);
}

static void
test_config_mapping (void)
{
  struct
  {
    const gchar *json;
    gdouble static_scale;     /* 0: dynamic */
  } statics[] = {
    /* No precision section: fp32, scale 1. */
    { "{}", 1 },
    { "{\"fp16\": {\"enabled\": true, \"loss_scale\": 128}}", 128 },
    { "{\"fp16\": {\"enabled\": true, \"loss_scale\": 0.5}}", 0.5 },
    { "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true,"
      " \"loss_scale\": 64}}", 64 },
    /* bf16 needs no scaling; fp16 keys are irrelevant there. */
    { "{\"bf16\": {\"enabled\": true}}", 1 },
    { "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true}}", 1 },
    { "{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"bf16\"}}", 1 },
    { "{\"fp16\": {\"enabled\": false, \"loss_scale\": 64}}", 1 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (statics); i++)
    {
      g_autoptr(MixprecLossScaler) s = scaler_from_json (statics[i].json);

      g_test_message ("%s", statics[i].json);
      g_assert_true (MIXPREC_IS_STATIC_SCALER (s));
      g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, statics[i].static_scale);
    }

  {
    /* DeepSpeed's defaults (mixprec.json(5)). */
    g_autoptr(MixprecLossScaler) s = scaler_from_json ("{\"fp16\": {\"enabled\": true}}");
    gboolean raise, consecutive;

    check_dynamic (s, MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 65536, 1000, 2, 1);
    g_object_get (s, "raise-at-min-scale", &raise, "consecutive-hysteresis", &consecutive, NULL);
    g_assert_true (raise);
    g_assert_false (consecutive);
  }
  {
    /* fp16 without masters scales as fp16 does. */
    g_autoptr(MixprecLossScaler) s =
      scaler_from_json ("{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true}}");

    check_dynamic (s, MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 65536, 1000, 2, 1);
  }
  {
    g_autoptr(MixprecLossScaler) s =
      scaler_from_json ("{\"torch_autocast\": {\"enabled\": true, \"dtype\": \"fp16\"}}");

    check_dynamic (s, MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 65536, 1000, 2, 1);
  }
  {
    g_autoptr(MixprecLossScaler) s =
      scaler_from_json ("{\"fp16\": {\"enabled\": true}, "
                        "\"mixprec\": {\"scaler\": {\"semantics\": \"torch\"}}}");

    check_dynamic (s, MIXPREC_SCALER_SEMANTICS_TORCH, 65536, 2000, 1, 1);
  }
  {
    g_autoptr(MixprecLossScaler) s =
      scaler_from_json ("{\"fp16\": {\"enabled\": true}, "
                        "\"mixprec\": {\"scaler\": {\"semantics\": \"megatron\"}}}");

    check_dynamic (s, MIXPREC_SCALER_SEMANTICS_MEGATRON, 4294967296.0, 1000, 2, 1);
  }
  {
    g_autoptr(MixprecLossScaler) s =
      scaler_from_json ("{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 10, "
                        "\"consecutive_hysteresis\": true, \"min_loss_scale\": 0.25}, "
                        "\"mixprec\": {\"scaler\": {\"max_scale\": 65536, "
                        "\"growth_factor\": 4, \"backoff_factor\": 0.125, "
                        "\"raise_at_min_scale\": false}}}");
    gdouble max_scale, growth, backoff;
    gboolean raise, consecutive;

    check_dynamic (s, MIXPREC_SCALER_SEMANTICS_DEEPSPEED, 1024, 1000, 2, 0.25);
    g_object_get (s, "max-scale", &max_scale, "growth-factor", &growth,
                  "backoff-factor", &backoff, "raise-at-min-scale", &raise,
                  "consecutive-hysteresis", &consecutive, NULL);
    g_assert_cmpfloat (max_scale, ==, 65536);
    g_assert_cmpfloat (growth, ==, 4);
    g_assert_cmpfloat (backoff, ==, 0.125);
    g_assert_false (raise);
    g_assert_true (consecutive);
  }
}

static void
test_config_published_sequence (void)
{
  /* The second row of DeepSpeed's test_dynamic_loss_scale.py table,
   * configured the way a DeepSpeed user
   * would write it. */
  g_autoptr(MixprecLossScaler) s =
    scaler_from_json ("{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, "
                      "\"loss_scale_window\": 2, \"hysteresis\": 1}}");
  const gboolean pattern[] = { O, O, O, O, O, O, O, O };
  const gdouble expected[] = { 128, 64, 32, 16, 8, 4, 2, 1 };
  g_autoptr(GError) error = NULL;

  CHECK_SEQUENCE (s, pattern, expected);
  g_assert_false (mixprec_loss_scaler_update (s, TRUE, &error));
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_AT_MINIMUM);
}

static void
test_config_megatron_sequence (void)
{
  /* The Megatron sequence of /scaler/megatron/sequence, from JSON. */
  g_autoptr(MixprecLossScaler) s =
    scaler_from_json ("{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 10, "
                      "\"loss_scale_window\": 3}, "
                      "\"mixprec\": {\"scaler\": {\"semantics\": \"megatron\"}}}");
  const gboolean pattern[] = { O, O, O, C, C, C, O, C, O };
  const gdouble expected[] = { 1024, 512, 256, 256, 256, 512, 512, 512, 256 };

  CHECK_SEQUENCE (s, pattern, expected);
}

static void
test_config_invalid (void)
{
  /* A positive static scale below the smallest normal double would make the
   * inverse scale infinite. */
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config =
    mixprec_config_new_from_data ("{\"fp16\": {\"enabled\": true, \"loss_scale\": 1e-320}}",
                                  -1, &error);
  g_autoptr(MixprecLossScaler) s = NULL;

  g_assert_no_error (error);
  s = mixprec_loss_scaler_new_from_config (config, &error);
  g_assert_null (s);
  g_assert_error (error, MIXPREC_SCALER_ERROR, MIXPREC_SCALER_ERROR_INVALID_CONFIG);
  g_assert_nonnull (strstr (error->message, "fp16.loss_scale"));
}

/* ------------------------------------------------------------------ fronts */

/* Apex amp, Colossal-AI's three fp16 modes: each configuration is read,
 * its scaler driven through a run of clean and overflowing steps, and
 * every scale compared with a transcription of the framework's own update
 * rule, written here from the frameworks' sources and nothing else. */

typedef enum { FRONT_STATIC, FRONT_APEX, FRONT_GRADSCALER, FRONT_COLOSSAL_NAIVE } FrontRule;

typedef struct
{
  FrontRule rule;
  double init_scale;   /* as the framework is given it */
  double min_scale;    /* 0: None */
  double max_scale;    /* 0: None */
  double growth;
  double backoff;
  int interval;
  int hysteresis;
} FrontParams;

typedef struct
{
  double apex_scale;   /* apex: self._loss_scale, a Python float */
  float scale;         /* torch, Colossal-AI: a float32 tensor */
  int unskipped;       /* apex _unskipped; GradScaler _growth_tracker;
                        * Colossal-AI _growth_step */
  int hysteresis_step; /* Colossal-AI _hysteresis_step */
} FrontState;

static void
front_init (FrontState        *r,
            const FrontParams *p)
{
  memset (r, 0, sizeof *r);
  /* apex/amp/scaler.py: self._loss_scale = min(max_loss_scale, init_scale) */
  r->apex_scale = p->max_scale > 0 && p->max_scale < p->init_scale ? p->max_scale : p->init_scale;
  r->scale = (float) p->init_scale;
}

static double
front_scale (const FrontState  *r,
             const FrontParams *p)
{
  return p->rule == FRONT_APEX || p->rule == FRONT_STATIC ? r->apex_scale : (double) r->scale;
}

static void
front_update (FrontState        *r,
              const FrontParams *p,
              gboolean           overflow)
{
  switch (p->rule)
    {
    case FRONT_STATIC:
      break;

    case FRONT_APEX:
      /* LossScaler.update_scale() */
      if (overflow)
        {
          if (p->min_scale > 0)
            r->apex_scale = MAX (p->min_scale, r->apex_scale / 2.);
          else
            r->apex_scale = r->apex_scale / 2.;
          r->unskipped = 0;
        }
      else
        r->unskipped += 1;
      if (r->unskipped == p->interval)
        {
          r->apex_scale = MIN (p->max_scale, r->apex_scale * 2.);
          r->unskipped = 0;
        }
      break;

    case FRONT_GRADSCALER:
      /* _amp_update_scale_: float scale, double factors */
      if (overflow)
        {
          r->scale = (float) (r->scale * p->backoff);
          r->unskipped = 0;
        }
      else
        {
          int successful = r->unskipped + 1;

          if (successful == p->interval)
            {
              float grown = (float) (r->scale * p->growth);

              if (isfinite (grown))
                r->scale = grown;
              r->unskipped = 0;
            }
          else
            r->unskipped = successful;
        }
      break;

    case FRONT_COLOSSAL_NAIVE:
      /* colossalai DynamicGradScaler.update(): float32 tensors */
      if (overflow)
        {
          r->hysteresis_step += 1;
          r->unskipped = 0;
          if (r->hysteresis_step >= p->hysteresis)
            {
              r->scale = r->scale * (float) p->backoff;
              if (p->min_scale > 0 && r->scale < (float) p->min_scale)
                r->scale = (float) p->min_scale;
            }
        }
      else
        {
          r->unskipped += 1;
          if (r->unskipped == p->interval)
            {
              r->unskipped = 0;
              r->hysteresis_step = 0;
              r->scale = r->scale * (float) p->growth;
              if (p->max_scale > 0 && r->scale > (float) p->max_scale)
                r->scale = (float) p->max_scale;
            }
        }
      break;
    }
}

/* Long clean stretches (so that windows of 1000 and 2000 complete),
 * then a rate of overflows that lowers the scale without reaching the
 * floor libmixprec adds at the smallest normal number,
 * isolated overflows, and bursts of them. */
static gboolean
front_overflow (GRand *rand,
                guint  step)
{
  if (step % 5000 >= 4990)
    return TRUE;
  return g_rand_double (rand) < (step < 15000 ? 0.0002 : 0.002);
}

static void
check_front (const gchar       *json,
             const FrontParams *p)
{
  g_autoptr(MixprecLossScaler) s = scaler_from_json (json);
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  FrontState r;
  guint grown = 0, lowered = 0;

  g_test_message ("%s", json);
  front_init (&r, p);
  g_assert_cmpfloat (mixprec_loss_scaler_get_scale (s), ==, front_scale (&r, p));
  if (p->rule == FRONT_STATIC)
    g_assert_true (MIXPREC_IS_STATIC_SCALER (s));
  for (guint i = 0; i < 30000; i++)
    {
      gboolean overflow = front_overflow (rand, i);
      double before = front_scale (&r, p);
      g_autoptr(GError) error = NULL;

      front_update (&r, p, overflow);
      g_assert_true (mixprec_loss_scaler_update (s, overflow, &error));
      g_assert_no_error (error);
      if (mixprec_loss_scaler_get_scale (s) != front_scale (&r, p))
        g_error ("%s: step %u (%s): scale %.17g, the framework's %.17g", json, i,
                 overflow ? "overflow" : "clean", mixprec_loss_scaler_get_scale (s),
                 front_scale (&r, p));
      grown += front_scale (&r, p) > before;
      lowered += front_scale (&r, p) < before;
    }
  /* The run exercised both directions (a static scale neither). */
  if (p->rule != FRONT_STATIC)
    g_assert_true (grown > 0 && lowered > 0);
}

static void
test_front_apex_o0 (void)
{
  /* O0: FP32, loss_scale 1.0. */
  const FrontParams p = { FRONT_STATIC, 1, 0, 0, 0, 0, 0, 0 };

  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O0\"}}", &p);
}

static void
test_front_apex_o1 (void)
{
  /* O1: loss_scale "dynamic", init 2^16, window 2000, max 2^24. */
  const FrontParams p = { FRONT_APEX, 65536, 0, 16777216, 2, 0.5, 2000, 1 };
  const FrontParams q = { FRONT_APEX, 65536, 512, 131072, 2, 0.5, 2000, 1 };
  const FrontParams st = { FRONT_STATIC, 128, 0, 0, 0, 0, 0, 0 };

  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O1\"}}", &p);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O1\", \"loss_scale\": \"dynamic\","
               " \"min_loss_scale\": 512, \"max_loss_scale\": 131072}}", &q);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O1\", \"loss_scale\": 128}}", &st);
}

static void
test_front_apex_o2 (void)
{
  const FrontParams p = { FRONT_APEX, 65536, 0, 16777216, 2, 0.5, 2000, 1 };
  /* max_loss_scale below 2^16: Apex starts at it. */
  const FrontParams q = { FRONT_APEX, 65536, 0, 1024, 2, 0.5, 2000, 1 };

  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\"}}", &p);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\", \"max_loss_scale\": 1024,"
               " \"min_loss_scale\": null, \"keep_batchnorm_fp32\": false}}", &q);
}

static void
test_front_apex_o3 (void)
{
  /* O3 keeps no FP32 master by default (fp16 no-master mode), with or
   * without one at Apex's static scale of 1 unless asked for "dynamic",
   * which is then Apex's LossScaler exactly as at O2. */
  const FrontParams st = { FRONT_STATIC, 1, 0, 0, 0, 0, 0, 0 };
  const FrontParams p = { FRONT_APEX, 65536, 0, 16777216, 2, 0.5, 2000, 1 };

  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\"}}", &st);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\", \"loss_scale\": \"dynamic\"}}",
               &p);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\", \"master_weights\": true}}",
               &st);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O3\", \"master_weights\": true,"
               " \"loss_scale\": \"dynamic\"}}", &p);
  check_front ("{\"amp\": {\"enabled\": true, \"opt_level\": \"O2\", \"master_weights\": false}}",
               &p);
  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"apex\", \"opt_level\": \"O2\","
               " \"master_weights\": false}}}", &p);
}

static void
test_front_colossal_torch (void)
{
  const FrontParams p = { FRONT_GRADSCALER, 65536, 0, 0, 2, 0.5, 2000, 1 };
  const FrontParams q = { FRONT_GRADSCALER, 8, 0, 0, 4, 0.25, 3, 1 };

  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"torch\"}}}", &p);
  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"torch\", \"init_scale\": 8,"
               " \"growth_factor\": 4, \"backoff_factor\": 0.25, \"growth_interval\": 3}}}", &q);
}

static void
test_front_colossal_apex (void)
{
  /* Colossal-AI's apex mode is enabled by default. */
  const FrontParams p = { FRONT_APEX, 65536, 0, 16777216, 2, 0.5, 2000, 1 };
  const FrontParams q = { FRONT_APEX, 65536, 4, 16777216, 2, 0.5, 2000, 1 };

  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"apex\"}}}", &p);
  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"apex\", \"opt_level\": \"O2\","
               " \"min_loss_scale\": 4}}}", &q);
}

static void
test_front_colossal_naive (void)
{
  /* initial_scale 2^32, min_scale 1, growth 2, backoff 0.5, interval
   * 1000, hysteresis 2. */
  const FrontParams p = { FRONT_COLOSSAL_NAIVE, 4294967296.0, 1, 0, 2, 0.5, 1000, 2 };
  const FrontParams q = { FRONT_COLOSSAL_NAIVE, 1024, 0, 65536, 3, 0.75, 5, 3 };

  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"naive\"}}}", &p);
  check_front ("{\"colossalai\": {\"fp16\": {\"mode\": \"naive\", \"initial_scale\": 1024,"
               " \"min_scale\": null, \"max_scale\": 65536, \"growth_factor\": 3,"
               " \"backoff_factor\": 0.75, \"growth_interval\": 5, \"hysteresis\": 3}}}", &q);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/scaler/new-full/errors", test_new_full_errors);
  g_test_add_func ("/scaler/deepspeed/no-overflow", test_deepspeed_no_overflow);
  g_test_add_func ("/scaler/deepspeed/all-overflow", test_deepspeed_all_overflow);
  g_test_add_func ("/scaler/deepspeed/some-overflow", test_deepspeed_some_overflow);
  g_test_add_func ("/scaler/deepspeed/at-minimum", test_deepspeed_at_minimum);
  g_test_add_func ("/scaler/deepspeed/at-minimum-hysteresis", test_deepspeed_at_minimum_hysteresis);
  g_test_add_func ("/scaler/deepspeed/hysteresis-refill", test_deepspeed_hysteresis_refill);
  g_test_add_func ("/scaler/deepspeed/hysteresis-not-refilled-by-clean-step",
                   test_deepspeed_hysteresis_not_refilled_by_clean_step);
  g_test_add_func ("/scaler/deepspeed/consecutive-hysteresis", test_deepspeed_consecutive_hysteresis);
  g_test_add_func ("/scaler/deepspeed/growth-counts-from-last-overflow",
                   test_deepspeed_growth_counts_from_last_overflow);
  g_test_add_func ("/scaler/deepspeed/growth-factor", test_deepspeed_growth_factor);
  g_test_add_func ("/scaler/torch/sequence", test_torch_sequence);
  g_test_add_func ("/scaler/torch/no-hysteresis", test_torch_no_hysteresis);
  g_test_add_func ("/scaler/torch/single-precision", test_torch_single_precision);
  g_test_add_func ("/scaler/megatron/sequence", test_megatron_sequence);
  g_test_add_func ("/scaler/megatron/minimum", test_megatron_minimum);
  g_test_add_func ("/scaler/megatron/single-precision", test_megatron_single_precision);
  g_test_add_func ("/scaler/apex/sequence", test_apex_sequence);
  g_test_add_func ("/scaler/apex/minimum", test_apex_minimum);
  g_test_add_func ("/scaler/limits/max-scale", test_max_scale);
  g_test_add_func ("/scaler/limits/never-infinite", test_never_infinite);
  g_test_add_func ("/scaler/limits/never-zero", test_never_zero);
  g_test_add_func ("/scaler/static", test_static);
  g_test_add_func ("/scaler/properties/defaults", test_properties_defaults);
  g_test_add_func ("/scaler/properties/keywords-override-defaults",
                   test_properties_keywords_override_defaults);
  g_test_add_func ("/scaler/properties/round-trip", test_properties_round_trip);
  g_test_add_func ("/scaler/long-runs", test_long_runs);
  g_test_add_func ("/scaler/state/resume", test_state_resume);
  g_test_add_func ("/scaler/state/errors", test_state_errors);
  g_test_add_func ("/scaler/config/mapping", test_config_mapping);
  g_test_add_func ("/scaler/config/published-sequence", test_config_published_sequence);
  g_test_add_func ("/scaler/config/megatron-sequence", test_config_megatron_sequence);
  g_test_add_func ("/scaler/config/invalid", test_config_invalid);
  g_test_add_func ("/scaler/fronts/apex-O0", test_front_apex_o0);
  g_test_add_func ("/scaler/fronts/apex-O1", test_front_apex_o1);
  g_test_add_func ("/scaler/fronts/apex-O2", test_front_apex_o2);
  g_test_add_func ("/scaler/fronts/apex-O3", test_front_apex_o3);
  g_test_add_func ("/scaler/fronts/colossalai-torch", test_front_colossal_torch);
  g_test_add_func ("/scaler/fronts/colossalai-apex", test_front_colossal_apex);
  g_test_add_func ("/scaler/fronts/colossalai-naive", test_front_colossal_naive);

  return g_test_run ();
}
