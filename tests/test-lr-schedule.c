/* test-lr-schedule.c — MixprecLrSchedule against DeepSpeed's schedules:
 * hand-computed values, and a transcription of DeepSpeed 0.19's
 * runtime/lr_schedules.py (written here in terms of its
 * last_batch_iteration, with the engine's order of optimizer step and
 * scheduler step) compared bit for bit over many positions. */
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

/* ------------------------------------------------------------ reference */

typedef struct
{
  const gchar *type;
  gboolean linear;
  gdouble min_lr;          /* WarmupLR, WarmupDecayLR */
  gdouble max_lr;
  gint64 warmup;           /* as configured */
  gint64 total;
  gdouble warmup_min_ratio; /* WarmupCosineLR */
  gdouble cos_min_ratio;
  gdouble org_lr;          /* the optimizer's lr */
} Reference;

/* What DeepSpeed's scheduler.get_lr()[0] returns at last_batch_iteration
 * @lbi, written from the Python source statement by statement. */
static gdouble
reference_get_lr (const Reference *r,
                  gint64           lbi)
{
  gint64 warmup_num_steps = MAX (2, r->warmup);
  gdouble inverse_log_warm_up = 1.0 / log ((gdouble) warmup_num_steps);

  if (strcmp (r->type, "WarmupCosineLR") == 0)
    {
      gdouble ratio, ratio_delta, cosine_progress, quotient;
      gint64 real_last_step, real_total_steps;

      if (lbi < 0)
        return 0.0;
      if (lbi < warmup_num_steps)
        {
          if (!r->linear)
            ratio = inverse_log_warm_up * log ((gdouble) (lbi + 1));
          else
            ratio = (gdouble) lbi / (gdouble) warmup_num_steps;
          ratio_delta = 1. - r->warmup_min_ratio;
          ratio = r->warmup_min_ratio + ratio * ratio_delta;
        }
      else
        {
          real_last_step = lbi - warmup_num_steps + 1;
          real_total_steps = MAX (1, r->total - warmup_num_steps);
          quotient = (gdouble) real_last_step / (gdouble) real_total_steps;
          /* Python's min(1.0, q) returns 1.0 unless q < 1.0. */
          cosine_progress = quotient < 1.0 ? quotient : 1.0;
          ratio_delta = 1. - r->cos_min_ratio;
          ratio = (1 + cos (3.141592653589793 * cosine_progress)) / 2;
          ratio = r->cos_min_ratio + ratio_delta * ratio;
          /* Python's max(0.0, x) returns 0.0 unless x > 0.0. */
          ratio = ratio > 0.0 ? ratio : 0.0;
        }
      return r->org_lr * ratio;
    }
  else
    {
      gdouble delta_lr = r->max_lr - r->min_lr;
      gdouble gamma;

      if (lbi < 0)
        return r->min_lr;
      if (lbi < warmup_num_steps)
        {
          if (!r->linear)
            gamma = inverse_log_warm_up * log ((gdouble) (lbi + 1));
          else
            gamma = (gdouble) lbi / (gdouble) warmup_num_steps;
        }
      else if (strcmp (r->type, "WarmupDecayLR") == 0)
        {
          gdouble denominator = MAX (1.0, (gdouble) (r->total - warmup_num_steps));
          gdouble q = (gdouble) (r->total - lbi) / denominator;

          gamma = q > 0.0 ? q : 0.0;
        }
      else
        gamma = 1.0;
      return r->min_lr + (delta_lr * gamma);
    }
}

/* The DeepSpeed engine: the scheduler is built at last_batch_iteration -1
 * (its constructor writes get_lr() into the optimizer), and step() runs
 * after every applied optimizer step. So applied step number p (0-based)
 * runs with the rate of last_batch_iteration p - 1. */
static gdouble
reference_lr_of_applied_step (const Reference *r,
                              guint64          p)
{
  return reference_get_lr (r, (gint64) p - 1);
}

static JsonObject *
reference_params (const Reference *r)
{
  JsonObject *o = json_object_new ();

  json_object_set_string_member (o, "warmup_type", r->linear ? "linear" : "log");
  json_object_set_int_member (o, "warmup_num_steps", r->warmup);
  if (strcmp (r->type, "WarmupCosineLR") == 0)
    {
      json_object_set_double_member (o, "warmup_min_ratio", r->warmup_min_ratio);
      json_object_set_double_member (o, "cos_min_ratio", r->cos_min_ratio);
    }
  else
    {
      json_object_set_double_member (o, "warmup_min_lr", r->min_lr);
      json_object_set_double_member (o, "warmup_max_lr", r->max_lr);
    }
  if (strcmp (r->type, "WarmupLR") != 0)
    json_object_set_int_member (o, "total_num_steps", r->total);
  return o;
}

static MixprecLrSchedule *
schedule_from_json (const gchar  *type,
                    const gchar  *params_json,
                    gdouble       base_lr,
                    GError      **error)
{
  g_autoptr(JsonNode) node = json_from_string (params_json, NULL);

  g_assert_nonnull (node);
  return mixprec_lr_schedule_new (type, json_node_get_object (node), base_lr, error);
}

static void
assert_lr (MixprecLrSchedule *s,
           guint64            position,
           gdouble            expected)
{
  gdouble got = mixprec_lr_schedule_get_lr_at (s, position);

  if (got != expected)
    g_error ("%s at position %" G_GUINT64_FORMAT ": got %.17g, expected %.17g",
             mixprec_lr_schedule_get_type_name (s), position, got, expected);
}

/* Within one unit in the last place, for hand-computed values that come
 * out of a log or a cosine. */
static void
assert_lr_near (MixprecLrSchedule *s,
                guint64            position,
                gdouble            expected)
{
  gdouble got = mixprec_lr_schedule_get_lr_at (s, position);

  if (fabs (got - expected) > fabs (nextafter (expected, INFINITY) - expected))
    g_error ("%s at position %" G_GUINT64_FORMAT ": got %.17g, expected %.17g (1 ulp)",
             mixprec_lr_schedule_get_type_name (s), position, got, expected);
}

/* ------------------------------------------------------- hand-computed */

static void
test_warmup_linear_literal (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupLR", "{\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.01,"
                        " \"warmup_num_steps\": 10, \"warmup_type\": \"linear\"}", 0.5, &error);

  g_assert_no_error (error);
  /* Steps 1 and 2 both run at warmup_min_lr (last_batch_iteration -1, 0). */
  assert_lr (s, 0, 0.0);
  assert_lr (s, 1, 0.0);
  /* Step at position 6: last_batch_iteration 5, 5/10 of the way. */
  assert_lr (s, 6, 0.005);
  /* 10 steps after the first one, the warmup is over. */
  assert_lr (s, 11, 0.01);
  assert_lr (s, 12, 0.01);
  assert_lr (s, 1000000, 0.01);
  assert_lr (s, G_MAXUINT64, 0.01);
  g_assert_cmpstr (mixprec_lr_schedule_get_type_name (s), ==, "WarmupLR");
}

static void
test_warmup_log_literal (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupLR", "{\"warmup_min_lr\": 0.25, \"warmup_max_lr\": 1.25,"
                        " \"warmup_num_steps\": 4}", 0.5, &error);

  g_assert_no_error (error);
  /* log(1) = 0: the first two steps run at the minimum. */
  assert_lr (s, 0, 0.25);
  assert_lr (s, 1, 0.25);
  /* last_batch_iteration 1: log 2 / log 4 = 1/2, so 0.25 + 1 * 0.5. */
  assert_lr_near (s, 2, 0.75);
  /* last_batch_iteration 3: log 4 / log 4 = 1. */
  assert_lr_near (s, 4, 1.25);
  assert_lr (s, 5, 1.25);
}

static void
test_warmup_max_defaults_to_base_lr (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupLR", "{\"warmup_type\": \"linear\", \"warmup_num_steps\": 2}",
                        0.125, &error);
  g_autoptr(MixprecLrSchedule) n =
    schedule_from_json ("WarmupLR", "{\"warmup_max_lr\": null, \"warmup_num_steps\": 2}",
                        0.375, &error);
  g_autoptr(MixprecLrSchedule) d =
    schedule_from_json ("WarmupDecayLR", "{\"warmup_type\": \"linear\", \"warmup_num_steps\": 2,"
                        " \"total_num_steps\": 100}", 0.125, &error);

  g_assert_no_error (error);
  /* DeepSpeed 0.19: WarmupLR warms up to the optimizer's lr when
   * warmup_max_lr is unset or None; WarmupDecayLR keeps its 0.001. */
  assert_lr (s, 1, 0.0);
  assert_lr (s, 2, 0.0625);
  assert_lr (s, 3, 0.125);
  assert_lr (n, 100, 0.375);
  assert_lr (d, 3, 0.001);
}

static void
test_decay_literal (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupDecayLR", "{\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.01,"
                        " \"warmup_num_steps\": 10, \"warmup_type\": \"linear\","
                        " \"total_num_steps\": 20}", 1.0, &error);

  g_assert_no_error (error);
  assert_lr (s, 0, 0.0);
  assert_lr (s, 6, 0.005);
  /* last_batch_iteration 10: (20 - 10) / (20 - 10) = 1. */
  assert_lr (s, 11, 0.01);
  /* last_batch_iteration 15: 5 / 10. */
  assert_lr (s, 16, 0.005);
  /* last_batch_iteration 20 and beyond: 0, back at warmup_min_lr. */
  assert_lr (s, 21, 0.0);
  assert_lr (s, 22, 0.0);
  assert_lr (s, G_MAXUINT64, 0.0);
}

static void
test_cosine_literal (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupCosineLR", "{\"warmup_num_steps\": 10, \"warmup_type\": \"linear\","
                        " \"total_num_steps\": 20, \"cos_min_ratio\": 0}", 0.5, &error);
  g_autoptr(MixprecLrSchedule) floor_ =
    schedule_from_json ("WarmupCosineLR", "{\"warmup_num_steps\": 10, \"warmup_type\": \"linear\","
                        " \"total_num_steps\": 20, \"warmup_min_ratio\": 0.5}", 0.5, &error);

  g_assert_no_error (error);
  /* DeepSpeed's WarmupCosineLR writes 0 into the optimizer at -1. */
  assert_lr (s, 0, 0.0);
  assert_lr (s, 1, 0.0);
  assert_lr (s, 6, 0.25);
  /* last_batch_iteration 10: progress 1/10, (1 + cos(pi/10)) / 2. */
  assert_lr_near (s, 11, 0.5 * (1 + 0.95105651629515357) / 2);
  /* last_batch_iteration 14: progress 1/2, cos(pi/2) ~ 6e-17 vanishes. */
  assert_lr (s, 15, 0.25);
  /* last_batch_iteration 19: progress 1, the end. */
  assert_lr (s, 20, 0.0);
  assert_lr (s, 1000, 0.0);

  /* The warmup starts at warmup_min_ratio; the floor is the default
   * cos_min_ratio 0.0001. */
  assert_lr (floor_, 0, 0.0);
  assert_lr (floor_, 1, 0.25);
  assert_lr (floor_, 6, 0.5 * (0.5 + 0.5 * 0.5));
  assert_lr_near (floor_, 20, 0.5 * 0.0001);
  assert_lr_near (floor_, G_MAXUINT64, 0.5 * 0.0001);
}

static void
test_constant (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s = mixprec_lr_schedule_new (NULL, NULL, 3e-4, &error);
  g_autoptr(MixprecLrSchedule) named = mixprec_lr_schedule_new ("Constant", NULL, 0.0, &error);
  g_autoptr(MixprecLrSchedule) bare = g_object_new (MIXPREC_TYPE_LR_SCHEDULE, NULL);

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_lr_schedule_get_type_name (s), ==, "Constant");
  for (guint64 p = 0; p < 100; p += 7)
    assert_lr (s, p, 3e-4);
  assert_lr (s, G_MAXUINT64, 3e-4);
  assert_lr (named, 5, 0.0);
  assert_lr (bare, 5, 1e-3);
  g_assert_cmpfloat (mixprec_lr_schedule_get_base_lr (s), ==, 3e-4);
}

/* -------------------------------------------------- against reference */

static void
check_against_reference (const Reference *r)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonObject) params = reference_params (r);
  g_autoptr(MixprecLrSchedule) s = mixprec_lr_schedule_new (r->type, params, r->org_lr, &error);
  guint64 last = (guint64) MAX (r->total, MAX (2, r->warmup)) + 50;

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_lr_schedule_get_type_name (s), ==, r->type);

  /* Every position through the warmup, the decay and past the end, by
   * advancing as the engine would. */
  for (guint64 p = 0; p <= last; p++)
    {
      gdouble expected = reference_lr_of_applied_step (r, p);

      g_assert_cmpuint (mixprec_lr_schedule_get_position (s), ==, p);
      if (mixprec_lr_schedule_get_lr (s) != expected)
        g_error ("%s (%s, warmup %" G_GINT64_FORMAT ", total %" G_GINT64_FORMAT ") at "
                 "position %" G_GUINT64_FORMAT ": got %.17g, DeepSpeed %.17g",
                 r->type, r->linear ? "linear" : "log", r->warmup, r->total, p,
                 mixprec_lr_schedule_get_lr (s), expected);
      mixprec_lr_schedule_advance (s);
    }
}

static void
test_reference_sweep (void)
{
  static const gchar *const types[] = { "WarmupLR", "WarmupDecayLR", "WarmupCosineLR" };
  static const gint64 warmups[] = { 1, 2, 3, 7, 10, 100, 1000 };
  static const gdouble min_lrs[] = { 0.0, 1e-5, 3e-4 };
  static const gdouble max_lrs[] = { 1e-3, 6e-4, 0.1, 1e-5 };
  static const gdouble ratios[] = { 0.0, 0.0001, 0.1, 0.37 };
  static const gdouble org_lrs[] = { 1e-3, 3e-4, 0.1, 2.5e-5 };
  guint checked = 0;

  for (guint t = 0; t < G_N_ELEMENTS (types); t++)
    for (guint w = 0; w < G_N_ELEMENTS (warmups); w++)
      for (guint linear = 0; linear < 2; linear++)
        for (guint k = 0; k < 4; k++)
          {
            Reference r = { 0 };
            gint64 warmup_used = MAX (2, warmups[w]);
            /* Decays of length 0, 1, a few and many steps. */
            const gint64 extra[] = { 0, 1, 13, 997 };

            r.type = types[t];
            r.linear = linear;
            r.warmup = warmups[w];
            r.total = warmup_used + extra[k];
            r.min_lr = min_lrs[(w + k) % G_N_ELEMENTS (min_lrs)];
            r.max_lr = max_lrs[(w + 2 * k + linear) % G_N_ELEMENTS (max_lrs)];
            r.warmup_min_ratio = ratios[(w + k) % G_N_ELEMENTS (ratios)];
            r.cos_min_ratio = ratios[(w + 3 * k + linear) % G_N_ELEMENTS (ratios)];
            r.org_lr = org_lrs[(t + w + k) % G_N_ELEMENTS (org_lrs)];
            check_against_reference (&r);
            checked++;
          }
  g_assert_cmpuint (checked, ==, 3 * 7 * 2 * 4);
}

/* DeepSpeed's defaults, with only the required parameter given. */
static void
test_reference_defaults (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) w = schedule_from_json ("WarmupLR", "{}", 0.002, &error);
  g_autoptr(MixprecLrSchedule) d =
    schedule_from_json ("WarmupDecayLR", "{\"total_num_steps\": 5000}", 0.002, &error);
  g_autoptr(MixprecLrSchedule) c =
    schedule_from_json ("WarmupCosineLR", "{\"total_num_steps\": 5000}", 0.002, &error);
  const Reference rw = { "WarmupLR", FALSE, 0.0, 0.002, 1000, 0, 0, 0, 0.002 };
  const Reference rd = { "WarmupDecayLR", FALSE, 0.0, 0.001, 1000, 5000, 0, 0, 0.002 };
  const Reference rc = { "WarmupCosineLR", FALSE, 0, 0, 1000, 5000, 0.0, 0.0001, 0.002 };

  g_assert_no_error (error);
  for (guint64 p = 0; p < 5100; p++)
    {
      assert_lr (w, p, reference_lr_of_applied_step (&rw, p));
      assert_lr (d, p, reference_lr_of_applied_step (&rd, p));
      assert_lr (c, p, reference_lr_of_applied_step (&rc, p));
    }
}

static void
test_dup_params (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) c =
    schedule_from_json ("WarmupCosineLR", "{\"total_num_steps\": 5000, \"warmup_num_steps\": 1}",
                        0.002, &error);
  g_autoptr(MixprecLrSchedule) w = schedule_from_json ("WarmupLR", "{}", 0.002, &error);
  g_autoptr(JsonObject) cp = NULL;
  g_autoptr(JsonObject) wp = NULL;
  g_autoptr(MixprecLrSchedule) again = NULL;

  g_assert_no_error (error);
  cp = mixprec_lr_schedule_dup_params (c);
  g_assert_cmpint (json_object_get_int_member (cp, "total_num_steps"), ==, 5000);
  g_assert_cmpint (json_object_get_int_member (cp, "warmup_num_steps"), ==, 1);
  g_assert_cmpfloat (json_object_get_double_member (cp, "warmup_min_ratio"), ==, 0.0);
  g_assert_cmpfloat (json_object_get_double_member (cp, "cos_min_ratio"), ==, 0.0001);
  g_assert_cmpstr (json_object_get_string_member (cp, "warmup_type"), ==, "log");
  g_assert_cmpint (json_object_get_int_member (cp, "last_batch_iteration"), ==, -1);
  g_assert_cmpuint (json_object_get_size (cp), ==, 6);

  wp = mixprec_lr_schedule_dup_params (w);
  g_assert_cmpfloat (json_object_get_double_member (wp, "warmup_min_lr"), ==, 0.0);
  g_assert_cmpfloat (json_object_get_double_member (wp, "warmup_max_lr"), ==, 0.002);
  g_assert_false (json_object_has_member (wp, "total_num_steps"));

  /* Building from the printed parameters gives the same schedule. */
  again = mixprec_lr_schedule_new ("WarmupCosineLR", cp, 0.002, &error);
  g_assert_no_error (error);
  for (guint64 p = 0; p < 5100; p += 3)
    assert_lr (again, p, mixprec_lr_schedule_get_lr_at (c, p));
}

/* ------------------------------------------------------------ position */

static void
count_notify (GObject    *object,
              GParamSpec *pspec,
              gpointer    user_data)
{
  (*(guint *) user_data)++;
}

static void
test_position (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupDecayLR", "{\"warmup_type\": \"linear\", \"warmup_num_steps\": 10,"
                        " \"warmup_max_lr\": 0.01, \"total_num_steps\": 20}", 1.0, &error);
  g_autoptr(MixprecLrSchedule) resumed = NULL;
  guint notified = 0;
  guint64 position = 0;

  g_assert_no_error (error);
  g_signal_connect (s, "notify::position", G_CALLBACK (count_notify), &notified);
  g_assert_cmpuint (mixprec_lr_schedule_get_position (s), ==, 0);

  /* A run of 30 optimizer steps in which steps 3, 4 and 17 overflow: the
   * engine does not advance on those, so the applied steps see exactly
   * the uninterrupted sequence. */
  for (guint step = 0, applied = 0; step < 30; step++)
    {
      gboolean overflow = step == 3 || step == 4 || step == 17;

      g_assert_cmpfloat (mixprec_lr_schedule_get_lr (s), ==,
                         mixprec_lr_schedule_get_lr_at (s, applied));
      if (!overflow)
        {
          mixprec_lr_schedule_advance (s);
          applied++;
        }
      g_assert_cmpuint (mixprec_lr_schedule_get_position (s), ==, applied);
    }
  g_assert_cmpuint (notified, ==, 27);

  /* Resume: a new schedule moved to the saved position continues with
   * the same rates. */
  resumed = schedule_from_json ("WarmupDecayLR", "{\"warmup_type\": \"linear\","
                                " \"warmup_num_steps\": 10, \"warmup_max_lr\": 0.01,"
                                " \"total_num_steps\": 20}", 1.0, &error);
  g_assert_no_error (error);
  mixprec_lr_schedule_set_position (resumed, 16);
  g_assert_cmpuint (mixprec_lr_schedule_get_position (resumed), ==, 16);
  g_assert_cmpfloat (mixprec_lr_schedule_get_lr (resumed), ==, 0.005);

  /* The property is the same position. */
  g_object_set (resumed, "position", (guint64) 11, NULL);
  g_object_get (resumed, "position", &position, NULL);
  g_assert_cmpuint (position, ==, 11);
  g_assert_cmpfloat (mixprec_lr_schedule_get_lr (resumed), ==, 0.01);

  /* Setting the same position again is not a change. */
  notified = 0;
  mixprec_lr_schedule_set_position (s, mixprec_lr_schedule_get_position (s));
  g_assert_cmpuint (notified, ==, 0);

  /* The end of the counter is a ceiling, not a wrap to 0. */
  mixprec_lr_schedule_set_position (s, G_MAXUINT64);
  mixprec_lr_schedule_advance (s);
  g_assert_cmpuint (mixprec_lr_schedule_get_position (s), ==, G_MAXUINT64);
}

static void
test_last_batch_iteration (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) s =
    schedule_from_json ("WarmupLR", "{\"warmup_type\": \"linear\", \"warmup_num_steps\": 10,"
                        " \"warmup_max_lr\": 0.01, \"last_batch_iteration\": 4}", 1.0, &error);

  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_lr_schedule_get_position (s), ==, 5);
  mixprec_lr_schedule_advance (s);
  /* DeepSpeed: step() moves last_batch_iteration to 5. */
  g_assert_cmpfloat (mixprec_lr_schedule_get_lr (s), ==, 0.005);
}

static void
test_integral_float_counts (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) a =
    schedule_from_json ("WarmupCosineLR", "{\"total_num_steps\": 2e3, \"warmup_num_steps\": 1e2}",
                        0.1, &error);
  g_autoptr(MixprecLrSchedule) b =
    schedule_from_json ("WarmupCosineLR", "{\"total_num_steps\": 2000, \"warmup_num_steps\": 100}",
                        0.1, &error);

  g_assert_no_error (error);
  for (guint64 p = 0; p < 2100; p++)
    assert_lr (a, p, mixprec_lr_schedule_get_lr_at (b, p));
}

static void
test_single_element_lists (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) a =
    schedule_from_json ("WarmupLR", "{\"warmup_min_lr\": [0.001], \"warmup_max_lr\": [0.002]}",
                        0.1, &error);

  g_assert_no_error (error);
  assert_lr (a, 0, 0.001);
  assert_lr (a, 5000, 0.001 + (0.002 - 0.001) * 1.0);
}

/* --------------------------------------------------------------- config */

static MixprecLrSchedule *
schedule_from_config (const gchar  *json,
                      GError      **error)
{
  g_autoptr(GError) config_error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &config_error);

  g_assert_no_error (config_error);
  return mixprec_lr_schedule_new_from_config (config, error);
}

static void
test_from_config (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLrSchedule) none = schedule_from_config ("{}", &error);
  g_autoptr(MixprecLrSchedule) lr_only =
    schedule_from_config ("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 3e-4}}}",
                          &error);
  g_autoptr(MixprecLrSchedule) cosine =
    schedule_from_config ("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.5}},"
                          " \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\":"
                          " {\"total_num_steps\": 20, \"warmup_num_steps\": 10,"
                          " \"warmup_type\": \"linear\", \"cos_min_ratio\": 0}}}", &error);
  g_autoptr(MixprecLrSchedule) default_lr =
    schedule_from_config ("{\"scheduler\": {\"type\": \"WarmupLR\", \"params\":"
                          " {\"warmup_type\": \"linear\", \"warmup_num_steps\": 2}}}", &error);

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_lr_schedule_get_type_name (none), ==, "Constant");
  assert_lr (none, 0, MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR);
  assert_lr (lr_only, 7, 3e-4);
  g_assert_cmpstr (mixprec_lr_schedule_get_type_name (cosine), ==, "WarmupCosineLR");
  assert_lr (cosine, 6, 0.25);
  assert_lr (cosine, 15, 0.25);
  /* No optimizer lr: DeepSpeed's Adam default of 1e-3. */
  assert_lr (default_lr, 3, 1e-3);
}

/* --------------------------------------------------------------- errors */

typedef struct
{
  const gchar *type;
  const gchar *params;
  MixprecLrScheduleError code;
  const gchar *message_part;
} BadCase;

static const BadCase bad_cases[] = {
  { "WarmupLr", "{}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE, "did you mean \"WarmupLR\"" },
  { "WarmupCosine", "{}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE, "did you mean \"WarmupCosineLR\"" },
  { "OneCycle", "{}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE, "DeepSpeed's \"OneCycle\"" },
  { "LRRangeTest", "{}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE, "not implemented" },
  { "StepLR", "{}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE, "supported: WarmupLR" },
  { "WarmupLR", "{\"warmup_typ\": \"log\"}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM,
    "scheduler.params.warmup_typ: not a parameter of WarmupLR; did you mean \"warmup_type\"" },
  { "WarmupLR", "{\"total_num_steps\": 10}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM,
    "scheduler.params.total_num_steps: not a parameter of WarmupLR" },
  { "WarmupDecayLR", "{\"total_num_steps\": 5000, \"cos_min_ratio\": 0.1}",
    MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM, "scheduler.params.cos_min_ratio" },
  { "WarmupCosineLR", "{\"total_num_steps\": 5000, \"warmup_max_lr\": 0.1}",
    MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM, "scheduler.params.warmup_max_lr" },
  { "Constant", "{\"lr\": 0.1}", MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM, "it takes: none" },
  { "WarmupDecayLR", "{}", MIXPREC_LR_SCHEDULE_ERROR_MISSING_PARAM,
    "scheduler.params.total_num_steps: WarmupDecayLR needs it" },
  { "WarmupCosineLR", "{\"warmup_num_steps\": 10}", MIXPREC_LR_SCHEDULE_ERROR_MISSING_PARAM,
    "scheduler.params.total_num_steps" },
  { "WarmupDecayLR", "{\"total_num_steps\": 999}", MIXPREC_LR_SCHEDULE_ERROR_CONFLICT,
    "must be at least warmup_num_steps (1000), got 999" },
  { "WarmupCosineLR", "{\"total_num_steps\": 1, \"warmup_num_steps\": 1}",
    MIXPREC_LR_SCHEDULE_ERROR_CONFLICT, "(2, DeepSpeed's smallest warmup), got 1" },
  { "WarmupLR", "{\"warmup_num_steps\": -1}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "scheduler.params.warmup_num_steps: must be a non-negative integer (DeepSpeed warms up "
    "over at least 2 steps) (at most 2^53), got -1" },
  { "WarmupLR", "{\"warmup_num_steps\": -5}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "got -5" },
  { "WarmupLR", "{\"warmup_num_steps\": 1.5}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "got 1.5" },
  { "WarmupLR", "{\"warmup_num_steps\": \"auto\"}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "got \"auto\"" },
  { "WarmupLR", "{\"warmup_num_steps\": true}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "got true" },
  { "WarmupLR", "{\"warmup_num_steps\": 9007199254740993}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "at most 2^53" },
  { "WarmupDecayLR", "{\"total_num_steps\": 0}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "scheduler.params.total_num_steps: must be a positive integer" },
  { "WarmupLR", "{\"warmup_min_lr\": -1e-4}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "scheduler.params.warmup_min_lr: must be a finite number >= 0, got -0.0001" },
  { "WarmupLR", "{\"warmup_max_lr\": \"1e-3\"}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "scheduler.params.warmup_max_lr: must be a finite number >= 0, got \"1e-3\"" },
  { "WarmupLR", "{\"warmup_min_lr\": null}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "got null" },
  { "WarmupDecayLR", "{\"total_num_steps\": 5000, \"warmup_max_lr\": null}",
    MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "only WarmupLR reads null" },
  { "WarmupLR", "{\"warmup_min_lr\": [0.1, 0.2]}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "one parameter group, so a list must hold exactly one such number), got [0.1, 0.2]" },
  { "WarmupLR", "{\"warmup_max_lr\": {\"a\": 1}}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "got {\"a\":1}" },
  { "WarmupCosineLR", "{\"total_num_steps\": 5000, \"cos_min_ratio\": -0.5}",
    MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "scheduler.params.cos_min_ratio" },
  { "WarmupCosineLR", "{\"total_num_steps\": 5000, \"warmup_min_ratio\": [0.1]}",
    MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "scheduler.params.warmup_min_ratio" },
  { "WarmupLR", "{\"warmup_type\": \"cosine\"}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "must be \"log\" or \"linear\", got \"cosine\"" },
  { "WarmupLR", "{\"warmup_type\": \"Linear\"}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "did you mean \"linear\"" },
  { "WarmupLR", "{\"warmup_type\": 1}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM, "got 1" },
  { "WarmupLR", "{\"last_batch_iteration\": -2}", MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
    "scheduler.params.last_batch_iteration: must be an integer >= -1" },
};

static void
test_errors (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (bad_cases); i++)
    {
      const BadCase *c = &bad_cases[i];
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecLrSchedule) s = schedule_from_json (c->type, c->params, 1e-3, &error);

      g_test_message ("%s %s -> %s", c->type, c->params, error != NULL ? error->message : "(none)");
      g_assert_null (s);
      g_assert_error (error, MIXPREC_LR_SCHEDULE_ERROR, (gint) c->code);
      if (strstr (error->message, c->message_part) == NULL)
        g_error ("case %u: \"%s\" does not contain \"%s\"", i, error->message, c->message_part);
    }
}

static void
test_errors_base_lr (void)
{
  const gdouble bad[] = { -1e-3, NAN, INFINITY };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecLrSchedule) s = mixprec_lr_schedule_new ("WarmupLR", NULL, bad[i], &error);

      g_assert_null (s);
      g_assert_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM);
      g_assert_nonnull (strstr (error->message, "optimizer.params.lr"));
    }
}

static void
test_errors_from_config (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) a =
    mixprec_config_new_from_data ("{\"scheduler\": {\"type\": \"WarmupDecayLR\", \"params\":"
                                  " {\"warmup_num_steps\": 10}}}", -1, &error);
  g_autoptr(MixprecConfig) b = NULL;

  /* The configuration refuses what the schedule would, with its reason. */
  g_assert_null (a);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
  g_assert_true (g_str_has_prefix (error->message, "scheduler.params.total_num_steps: "
                                                   "WarmupDecayLR needs it"));
  g_clear_error (&error);

  b = mixprec_config_new_from_data ("{\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": -1}},"
                                    " \"scheduler\": {\"type\": \"WarmupLR\"}}", -1, &error);
  g_assert_null (b);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_INVALID_VALUE);
  g_assert_true (g_str_has_prefix (error->message, "optimizer.params.lr: "));
}

static void
test_every_problem (void)
{
  /* Every problem of the parameters in one error, one line each, the
   * code of the first. */
  g_autoptr(GError) error = NULL;
  g_autoptr(JsonNode) node = json_from_string (
    "{\"warmup_num_steps\": -1, \"warmup_type\": \"cosine\", \"warmup_max_lr\": \"x\","
    " \"decay_rate\": 2}", NULL);
  g_autoptr(MixprecLrSchedule) s =
    mixprec_lr_schedule_new ("WarmupDecayLR", json_node_get_object (node), 1e-3, &error);
  g_auto(GStrv) lines = NULL;

  g_assert_null (s);
  g_assert_error (error, MIXPREC_LR_SCHEDULE_ERROR, MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM);
  lines = g_strsplit (error->message, "\n", -1);
  g_assert_cmpuint (g_strv_length (lines), ==, 5);
  g_assert_true (g_str_has_prefix (lines[0], "scheduler.params.decay_rate: not a parameter"));
  g_assert_true (g_str_has_prefix (lines[1], "scheduler.params.warmup_num_steps: "));
  g_assert_true (g_str_has_prefix (lines[2], "scheduler.params.warmup_type: "));
  g_assert_true (g_str_has_prefix (lines[3], "scheduler.params.total_num_steps: WarmupDecayLR needs it"));
  g_assert_true (g_str_has_prefix (lines[4], "scheduler.params.warmup_max_lr: "));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/lr-schedule/warmup/linear-literal", test_warmup_linear_literal);
  g_test_add_func ("/lr-schedule/params/every-problem", test_every_problem);
  g_test_add_func ("/lr-schedule/warmup/log-literal", test_warmup_log_literal);
  g_test_add_func ("/lr-schedule/warmup/max-defaults-to-base-lr", test_warmup_max_defaults_to_base_lr);
  g_test_add_func ("/lr-schedule/decay/literal", test_decay_literal);
  g_test_add_func ("/lr-schedule/cosine/literal", test_cosine_literal);
  g_test_add_func ("/lr-schedule/constant", test_constant);
  g_test_add_func ("/lr-schedule/reference/sweep", test_reference_sweep);
  g_test_add_func ("/lr-schedule/reference/defaults", test_reference_defaults);
  g_test_add_func ("/lr-schedule/params/dup", test_dup_params);
  g_test_add_func ("/lr-schedule/params/last-batch-iteration", test_last_batch_iteration);
  g_test_add_func ("/lr-schedule/params/integral-float-counts", test_integral_float_counts);
  g_test_add_func ("/lr-schedule/params/single-element-lists", test_single_element_lists);
  g_test_add_func ("/lr-schedule/position", test_position);
  g_test_add_func ("/lr-schedule/config/build", test_from_config);
  g_test_add_func ("/lr-schedule/errors/params", test_errors);
  g_test_add_func ("/lr-schedule/errors/base-lr", test_errors_base_lr);
  g_test_add_func ("/lr-schedule/errors/config", test_errors_from_config);

  return g_test_run ();
}
