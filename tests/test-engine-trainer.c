/* test-engine-trainer.c — the short trainer API: mixprec_engine_new_from_file()
 * and mixprec_engine_micro_step(). Each is checked against the calls it
 * stands for (mixprec_config_new_from_file() + mixprec_engine_new(), and
 * backward_done() + is_accumulation_boundary() + step()), bit for bit. */
#include <math.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include <mixprec/mixprec.h>

#define N_ELEMS 96
#define N_STEPS 4

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
           const gchar   *module_type)
{
  g_autoptr(GError) error = NULL;
  guint64 shape[1] = { N_ELEMS };
  gfloat values[N_ELEMS];
  g_autoptr(GBytes) init = NULL;
  MixprecParam *p;

  for (guint i = 0; i < N_ELEMS; i++)
    values[i] = cosf ((gfloat) i * 0.37f + (name[0] == 'b' ? 1.0f : 0.0f));
  init = g_bytes_new (values, sizeof values);
  p = mixprec_engine_register_param (engine, name, shape, 1, module_type,
                                     MIXPREC_DTYPE_FLOAT32, init, &error);
  g_assert_no_error (error);
  return p;
}

/* The gradient of micro-batch @micro of optimizer step @step for parameter
 * @which; step 1 micro-batch 0 carries an infinity, so that step overflows
 * and is skipped under fp16. */
static void
set_grad (MixprecParam *p,
          guint         which,
          guint         step,
          guint         micro,
          gdouble       scale)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) b = NULL;
  gfloat g[N_ELEMS];

  for (guint i = 0; i < N_ELEMS; i++)
    g[i] = (gfloat) (scale * 0.01 * sin (0.1 * i + 1.7 * step + 0.3 * micro + which));
  if (step == 1 && micro == 0 && which == 0)
    g[5] = INFINITY;
  b = g_bytes_new (g, sizeof g);
  g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, b, &error));
  g_assert_no_error (error);
}

static void
assert_same_bytes (GBytes *a,
                   GBytes *b)
{
  gsize na, nb;
  gconstpointer da = g_bytes_get_data (a, &na);
  gconstpointer db = g_bytes_get_data (b, &nb);

  g_assert_cmpmem (da, na, db, nb);
}

static void
assert_same_results (const MixprecStepResult *a,
                     const MixprecStepResult *b)
{
  g_assert_cmpint (a->applied, ==, b->applied);
  g_assert_cmpfloat (a->loss_scale, ==, b->loss_scale);
  g_assert_cmpfloat (a->next_loss_scale, ==, b->next_loss_scale);
  g_assert_true (memcmp (&a->grad_norm, &b->grad_norm, sizeof a->grad_norm) == 0);
  g_assert_cmpfloat (a->clip_coef, ==, b->clip_coef);
  g_assert_cmpuint (a->step, ==, b->step);
  g_assert_cmpuint (a->applied_steps, ==, b->applied_steps);
  g_assert_cmpuint (a->skipped_steps, ==, b->skipped_steps);
  g_assert_cmpfloat (a->lr, ==, b->lr);
}

/* Two engines on the same config and gradients, one driven by the
 * fine-grained calls and one by micro_step(): the same step results and
 * the same masters and working copies, bit for bit, after every step. */
static void
test_micro_step_matches (gconstpointer data)
{
  guint gas = GPOINTER_TO_UINT (data);
  g_autofree gchar *json = g_strdup_printf (
    "{\"gradient_accumulation_steps\": %u, \"gradient_clipping\": 0.05,"
    " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}", gas);
  g_autoptr(MixprecEngine) fine = engine_from_json (json);
  g_autoptr(MixprecEngine) micro = engine_from_json (json);
  MixprecParam *fine_p[2], *micro_p[2];
  guint n_results = 0, n_skipped = 0;

  fine_p[0] = add_param (fine, "a.weight", "Linear");
  fine_p[1] = add_param (fine, "b.weight", "LayerNorm");
  micro_p[0] = add_param (micro, "a.weight", "Linear");
  micro_p[1] = add_param (micro, "b.weight", "LayerNorm");

  for (guint step = 0; step < N_STEPS; step++)
    for (guint m = 0; m < gas; m++)
      {
        g_autoptr(GError) error = NULL;
        g_autoptr(MixprecStepResult) expected = NULL;
        g_autoptr(MixprecStepResult) got = NULL;

        g_assert_cmpfloat (mixprec_engine_get_loss_scale (fine), ==,
                           mixprec_engine_get_loss_scale (micro));
        for (guint k = 0; k < 2; k++)
          {
            set_grad (fine_p[k], k, step, m, mixprec_engine_get_loss_scale (fine));
            set_grad (micro_p[k], k, step, m, mixprec_engine_get_loss_scale (micro));
          }

        g_assert_true (mixprec_engine_backward_done (fine, &error));
        g_assert_no_error (error);
        if (mixprec_engine_is_accumulation_boundary (fine))
          {
            expected = mixprec_engine_step (fine, &error);
            g_assert_no_error (error);
            g_assert_nonnull (expected);
          }

        g_assert_true (mixprec_engine_micro_step (micro, &got, &error));
        g_assert_no_error (error);
        if (m + 1 < gas)
          {
            g_assert_null (expected);
            g_assert_null (got);
            continue;
          }
        g_assert_nonnull (expected);
        g_assert_nonnull (got);
        assert_same_results (expected, got);
        n_results++;
        n_skipped += !got->applied;
        for (guint k = 0; k < 2; k++)
          {
            g_autoptr(GBytes) m_fine = mixprec_param_get_master (fine_p[k], NULL);
            g_autoptr(GBytes) m_micro = mixprec_param_get_master (micro_p[k], NULL);
            g_autoptr(GBytes) w_fine = mixprec_param_get_working (fine_p[k], MIXPREC_DTYPE_FLOAT16, NULL);
            g_autoptr(GBytes) w_micro = mixprec_param_get_working (micro_p[k], MIXPREC_DTYPE_FLOAT16, NULL);

            assert_same_bytes (m_fine, m_micro);
            assert_same_bytes (w_fine, w_micro);
          }
      }
  /* one result per optimizer step; the infinity of step 1 skipped it */
  g_assert_cmpuint (n_results, ==, N_STEPS);
  g_assert_cmpuint (n_skipped, ==, 1);
}

/* Without a result location the step still runs: plain SGD moves each
 * master by -lr times the mean of the two micro-batches' gradients. */
static void
test_micro_step_no_result (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"gradient_accumulation_steps\": 2,"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}");
  MixprecParam *p = add_param (e, "a.weight", "Linear");
  g_autoptr(GBytes) before = mixprec_param_get_master (p, NULL);
  g_autoptr(GBytes) after = NULL;
  g_autoptr(GError) error = NULL;
  const gfloat *b, *a;

  for (guint m = 0; m < 2; m++)
    {
      set_grad (p, 1, 0, m, 1.0);
      g_assert_true (mixprec_engine_micro_step (e, NULL, &error));
      g_assert_no_error (error);
    }
  after = mixprec_param_get_master (p, NULL);
  b = g_bytes_get_data (before, NULL);
  a = g_bytes_get_data (after, NULL);
  for (guint i = 0; i < N_ELEMS; i++)
    {
      gdouble g0 = (gfloat) (0.01 * sin (0.1 * i + 1.0));
      gdouble g1 = (gfloat) (0.01 * sin (0.1 * i + 0.3 + 1.0));

      g_assert_cmpfloat_with_epsilon (a[i], b[i] - 0.5 * (g0 + g1) / 2, 1e-6);
    }
}

/* A micro_step() out of order reports backward_done()'s error, and leaves
 * no result behind. */
static void
test_micro_step_wrong_state (void)
{
  g_autoptr(MixprecEngine) e = engine_from_json (
    "{\"gradient_accumulation_steps\": 2,"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}");
  MixprecParam *p = add_param (e, "a.weight", "Linear");
  MixprecStepResult sentinel = { 0 };
  MixprecStepResult *r = &sentinel;   /* micro_step() sets it to NULL */
  g_autoptr(GError) error = NULL;

  set_grad (p, 1, 0, 0, 1.0);
  g_assert_true (mixprec_engine_backward_done (e, &error));
  g_assert_true (mixprec_engine_backward_done (e, &error));
  g_assert_no_error (error);
  /* a third micro-batch before the step is due is refused */
  g_assert_false (mixprec_engine_micro_step (e, &r, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "call step() first"));
  g_assert_null (r);
}

static gchar *
write_temp (const gchar *contents)
{
  g_autoptr(GError) error = NULL;
  gchar *path = NULL;
  gint fd = g_file_open_tmp ("mixprec-trainer-XXXXXX.json", &path, &error);

  g_assert_no_error (error);
  g_assert_cmpint (fd, >=, 0);
  close (fd);
  g_assert_true (g_file_set_contents (path, contents, -1, &error));
  g_assert_no_error (error);
  return path;
}

/* new_from_file() builds the engine mixprec_engine_new() builds from the
 * same file: same settings, same first step. */
static void
test_new_from_file (void)
{
  const gchar *json =
    "{\"gradient_accumulation_steps\": 3,"
    " \"bf16\": {\"enabled\": true},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.02}}}";
  g_autofree gchar *path = write_temp (json);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) from_file = mixprec_engine_new_from_file (path, &error);
  g_autoptr(MixprecEngine) two_calls = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  MixprecParam *p1, *p2;

  g_assert_no_error (error);
  g_assert_true (MIXPREC_IS_ENGINE (from_file));
  config = mixprec_config_new_from_file (path, &error);
  g_assert_no_error (error);
  two_calls = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_engine_get_gradient_accumulation_steps (from_file), ==, 3);
  g_assert_cmpint (mixprec_config_get_precision_mode (mixprec_engine_get_config (from_file)), ==,
                   mixprec_config_get_precision_mode (config));

  p1 = add_param (from_file, "a.weight", "Linear");
  p2 = add_param (two_calls, "a.weight", "Linear");
  for (guint m = 0; m < 3; m++)
    {
      g_autoptr(MixprecStepResult) r1 = NULL;
      g_autoptr(MixprecStepResult) r2 = NULL;

      set_grad (p1, 1, 0, m, 1.0);
      set_grad (p2, 1, 0, m, 1.0);
      g_assert_true (mixprec_engine_micro_step (from_file, &r1, &error));
      g_assert_true (mixprec_engine_micro_step (two_calls, &r2, &error));
      g_assert_no_error (error);
      g_assert_true ((r1 == NULL) == (r2 == NULL));
    }
  {
    g_autoptr(GBytes) w1 = mixprec_param_get_working (p1, MIXPREC_DTYPE_BFLOAT16, NULL);
    g_autoptr(GBytes) w2 = mixprec_param_get_working (p2, MIXPREC_DTYPE_BFLOAT16, NULL);

    assert_same_bytes (w1, w2);
  }
  g_unlink (path);
}

/* Every failure of new_from_file() names the file. */
static void
test_new_from_file_errors (void)
{
  struct { const gchar *contents; gint code; const gchar *also; } cases[] = {
    { NULL, MIXPREC_CONFIG_ERROR_IO, "cannot read" },
    { "{\"gradient_accumulation_steps\": 2,", MIXPREC_CONFIG_ERROR_PARSE, NULL },
    { "{\"gradient_accumulation_steps\": -3}", MIXPREC_CONFIG_ERROR_INVALID_VALUE,
      "gradient_accumulation_steps" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree gchar *path = NULL;
      g_autofree gchar *base = NULL;
      MixprecEngine *e;

      if (cases[i].contents != NULL)
        path = write_temp (cases[i].contents);
      else
        path = g_build_filename (g_get_tmp_dir (), "mixprec-no-such-dir", "missing.json", NULL);
      base = g_path_get_basename (path);
      e = mixprec_engine_new_from_file (path, &error);
      g_assert_null (e);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, cases[i].code);
      g_test_message ("%s", error->message);
      g_assert_nonnull (strstr (error->message, base));
      if (cases[i].also != NULL)
        g_assert_nonnull (strstr (error->message, cases[i].also));
      if (cases[i].contents != NULL)
        g_unlink (path);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_data_func ("/engine/trainer/micro-step/gas-1", GUINT_TO_POINTER (1),
                        test_micro_step_matches);
  g_test_add_data_func ("/engine/trainer/micro-step/gas-4", GUINT_TO_POINTER (4),
                        test_micro_step_matches);
  g_test_add_func ("/engine/trainer/micro-step/no-result", test_micro_step_no_result);
  g_test_add_func ("/engine/trainer/micro-step/wrong-state", test_micro_step_wrong_state);
  g_test_add_func ("/engine/trainer/new-from-file", test_new_from_file);
  g_test_add_func ("/engine/trainer/new-from-file/errors", test_new_from_file_errors);
  return g_test_run ();
}
