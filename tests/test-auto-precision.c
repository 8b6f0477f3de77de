/* test-auto-precision.c — mixprec.auto_precision: crafted gradients whose
 * fp16 underflow is known by construction (every element of u.weight an
 * fp16 subnormal for the first steps, then normal values) widen u.weight
 * to fp32 at exactly the measured step the patience window ends and
 * narrow it back after the longer window below the low threshold. The
 * widened run's masters and optimizer state follow the run without
 * auto-precision bit for bit (the gradients are exact in both dtypes, so
 * only the layout changed); the limits hold; 3 ranks (ZeRO-0 through
 * comm-ucx) decide as 1 rank does, and at ZeRO-1, 2 and 3 keep the
 * 1-rank run's masters, their working copies (gathered under ZeRO-3)
 * the masters rounded; a checkpoint saved right after a
 * decision resumes into the uninterrupted run's bits; bad settings are
 * errors naming their key. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

#define TIMEOUT_MS 60000
#define N_MICRO 3            /* global micro-batches per step */
#define EVERY 2              /* numerics every 2 steps */
#define WIDEN_PATIENCE 3     /* measured steps */
#define NARROW_PATIENCE 5
#define TINY_UNTIL 11        /* u.weight's gradients underflow fp16 up to this step */
#define N_STEPS 24

static const struct {
  const gchar *name;
  const gchar *type;
  guint64 numel;
} model[] = {
  { "u.weight", "Linear", 5000 },     /* underflows until TINY_UNTIL */
  { "v.weight", "Linear", 3000 },     /* never */
  { "w.weight", "Linear", 2000 },     /* with MIXPREC_TEST_W_TINY: always */
};

/* fp16 with a static loss scale of 1: gradients are what they are. */
static guint zero_stage;     /* test_world_sizes(): the children's */

static gchar *
config_json (const gchar *auto_precision, const gchar *csv_dir, guint gas)
{
  return g_strdup_printf ("{\"fp16\": {\"enabled\": true, \"loss_scale\": 1},"
                          " \"zero_optimization\": {\"stage\": %u, \"stage3_param_persistence_threshold\": 0},"
                          " \"gradient_accumulation_steps\": %u,"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.0}},"
                          " \"mixprec\": {\"numerics\": {\"every\": %u}%s%s},"
                          " \"csv_monitor\": {\"enabled\": %s, \"output_path\": \"%s\", \"job_name\": \"job\"},"
                          " \"steps_per_print\": null}",
                          zero_stage, gas, EVERY, auto_precision != NULL ? ", \"auto_precision\": " : "",
                          auto_precision != NULL ? auto_precision : "",
                          csv_dir != NULL ? "true" : "false", csv_dir != NULL ? csv_dir : "");
}

static const gchar *default_auto =
  "{\"widen_above\": 0.5, \"widen_patience\": 3, \"narrow_below\": 0.05, \"narrow_patience\": 5,"
  " \"max_widened_fraction\": 0.6}";

/* The magnitude of a tiny gradient: an fp16 subnormal, or (for bf16
 * runs) a bfloat16 one. Either is exact in every dtype the runs use. */
static gfloat tiny_grad = 0x1p-20f;

/* Micro-batch @m's gradient of element @i of parameter @p at @step: the
 * first micro-batch carries it all, so the sums are exact in fp16. An
 * fp16 subnormal (2^-20) while tiny, else a normal value. */
static gfloat
grad_value (guint p, guint64 i, guint m, gint step, gboolean w_tiny)
{
  gboolean tiny = (p == 0 && step <= TINY_UNTIL) || (p == 2 && w_tiny);

  if (m != 0)
    return 0.0f;
  if (tiny)
    return (i % 2 ? -1.0f : 1.0f) * tiny_grad;
  return (gfloat) ldexp (1.0 + (gdouble) (i % 5) / 8.0, -(gint) (i % 7)) * (i % 3 ? 1.0f : -1.0f);
}

static gboolean fp8_init;    /* test_fp8(): values FP8 flushes to zero */
static gboolean big_init;    /* test_stale(): values whose bf16 ulp is 8 */

static MixprecEngine *
build_engine_full (const gchar *json, GError **error)
{
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, error);
  g_autoptr(MixprecEngine) engine = NULL;

  if (config == NULL)
    return NULL;
  engine = mixprec_engine_new (config, error);
  if (engine == NULL)
    return NULL;
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      g_autofree gfloat *init = g_new (gfloat, model[p].numel);
      g_autoptr(GBytes) bytes = NULL;
      guint64 shape[2] = { model[p].numel / 100, 100 };

      for (guint64 i = 0; i < model[p].numel; i++)
        init[i] = big_init ? 1024.0f + (gfloat) (i % 13) * 8.0f
                  : !fp8_init ? 0.25f + (gfloat) (i % 13) / 64.0f : i % 100 == 0 ? 1000.0f : 1e-4f;
      bytes = g_bytes_new (init, model[p].numel * sizeof (gfloat));
      if (mixprec_engine_register_param (engine, model[p].name, shape, 2, model[p].type,
                                         MIXPREC_DTYPE_FLOAT32, bytes, error) == NULL)
        return NULL;
    }
  return g_steal_pointer (&engine);
}

static MixprecEngine *
build_engine (const gchar *auto_precision, const gchar *csv_dir, guint world)
{
  g_autoptr(GError) error = NULL;
  /* Across ranks the N_MICRO global micro-batches are shared out. */
  g_autofree gchar *json = config_json (auto_precision, csv_dir, N_MICRO / world);
  MixprecEngine *engine;

  engine = build_engine_full (json, &error);
  g_assert_no_error (error);
  g_assert_nonnull (engine);
  return engine;
}

/* One step of the N_MICRO global micro-batches, this rank's share. */
static MixprecStepResult *
train_step (MixprecEngine *engine, gint step, gboolean w_tiny, GError **error)
{
  guint rank = mixprec_engine_get_rank (engine), world = mixprec_engine_get_world_size (engine);

  for (guint local = 0; local < N_MICRO / world; local++)
    {
      guint m = local * world + rank;

      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
          g_autofree gfloat *g = g_new (gfloat, model[p].numel);
          g_autoptr(GBytes) bytes = NULL;

          for (guint64 i = 0; i < model[p].numel; i++)
            g[i] = grad_value (p, i, m, step, w_tiny);
          bytes = g_bytes_new_take (g_steal_pointer (&g), model[p].numel * sizeof (gfloat));
          if (!mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, error))
            return NULL;
        }
      if (!mixprec_engine_backward_done (engine, error))
        return NULL;
    }
  return mixprec_engine_step (engine, error);
}

/* After a step: each parameter's working dtype, and a checksum-free
 * dump of its masters and optimizer state (as hex floats of a few
 * elements and FNV-1a over all bytes). */
static gboolean dump_states = TRUE;  /* FALSE: sharded state, masters only */

static void
dump_step (MixprecEngine *engine, gint step, GString *out)
{
  g_auto(GStrv) slots = dump_states ? mixprec_engine_get_optimizer_state_names (engine) : g_new0 (gchar *, 1);

  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      g_autoptr(GError) error = NULL;
      MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, model[p].name, &error);
      gsize n;
      const guint8 *bytes;
      guint32 h = 2166136261u;

      g_assert_no_error (error);
      bytes = g_bytes_get_data (master, &n);
      for (gsize k = 0; k < n; k++)
        h = (h ^ bytes[k]) * 16777619u;
      for (guint s = 0; slots[s] != NULL; s++)
        {
          g_autoptr(GBytes) state = mixprec_engine_get_optimizer_state (engine, model[p].name, slots[s], &error);

          g_assert_no_error (error);
          bytes = g_bytes_get_data (state, &n);
          for (gsize k = 0; k < n; k++)
            h = (h ^ bytes[k]) * 16777619u;
        }
      g_string_append_printf (out, "%d %s %s %08x\n", step, model[p].name,
                              mixprec_dtype_get_name (mixprec_param_get_working_dtype (param)), h);
    }
}

/* The working copy of @name equals its masters rounded to its dtype. */
static void
assert_working_follows (MixprecEngine *engine, const gchar *name)
{
  g_autoptr(GError) error = NULL;
  MixprecParam *param = mixprec_engine_get_param (engine, name);
  g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, name, &error);
  guint64 numel = mixprec_param_get_numel (param);
  g_autofree gfloat *rounded = g_new (gfloat, numel);
  g_autofree guint8 *low = g_malloc (numel * 4);
  MixprecDType dt = mixprec_param_get_working_dtype (param);
  g_autoptr(GBytes) working = NULL;

  g_assert_no_error (error);
  working = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, g_bytes_get_data (master, NULL), dt, low, numel,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error));
  g_assert_true (mixprec_convert_array (dt, low, MIXPREC_DTYPE_FLOAT32, rounded, numel,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error));
  g_assert_cmpmem (g_bytes_get_data (working, NULL), g_bytes_get_size (working), rounded, numel * 4);
}

/* A whole run: the dump of every step. */
static gchar *
run (const gchar *auto_precision, const gchar *csv_dir, gboolean w_tiny)
{
  g_autoptr(MixprecEngine) engine = build_engine (auto_precision, csv_dir, 1);
  GString *out = g_string_new (NULL);

  for (gint step = 1; step <= N_STEPS; step++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecStepResult) r = train_step (engine, step, w_tiny, &error);

      g_assert_no_error (error);
      g_assert_true (r->applied);
      dump_step (engine, step, out);
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        assert_working_follows (engine, model[p].name);
      /* The buffers follow the dtypes: fp16 copies (2 bytes) and FP32
       * masters (4) of the fp16 parameters, FP32 values (4, no master)
       * of the widened ones; the layout's plan says the same. */
      {
        g_autoptr(GPtrArray) buffers = mixprec_engine_list_buffers (engine);
        guint64 working = 0, masters = 0;

        for (guint p = 0; p < G_N_ELEMENTS (model); p++)
          {
            MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
            gboolean wide = mixprec_param_get_working_dtype (param) == MIXPREC_DTYPE_FLOAT32;

            working += model[p].numel * (wide ? 4 : 2);
            masters += wide ? 0 : model[p].numel * 4;
          }
        for (guint b = 0; b < buffers->len; b++)
          {
            MixprecMemoryBuffer *buffer = g_ptr_array_index (buffers, b);

            g_assert_cmpuint (buffer->planned_bytes, ==, buffer->bytes);
            if (g_str_equal (buffer->name, "working copies"))
              g_assert_cmpuint (buffer->bytes, ==, working);
            else if (g_str_equal (buffer->name, "FP32 master weights"))
              g_assert_cmpuint (buffer->bytes, ==, masters);
          }
      }
    }
  return g_string_free (out, FALSE);
}

/* The dtype of @name after @step in a dump. */
static gchar *
dtype_at (const gchar *dump, gint step, const gchar *name)
{
  g_autofree gchar *key = g_strdup_printf ("\n%d %s ", step, name);
  g_autofree gchar *text = g_strconcat ("\n", dump, NULL);
  const gchar *at = strstr (text, key);

  g_assert_nonnull (at);
  at += strlen (key);
  return g_strndup (at, strcspn (at, " "));
}

/* The dump with the dtypes left out: what the masters and state hold. */
static gchar *
values_only (const gchar *dump)
{
  g_auto(GStrv) lines = g_strsplit (dump, "\n", -1);
  GString *out = g_string_new (NULL);

  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) f = g_strsplit (lines[i], " ", -1);

      if (g_strv_length (f) == 4)
        g_string_append_printf (out, "%s %s %s\n", f[0], f[1], f[3]);
    }
  return g_string_free (out, FALSE);
}

static void
test_widen_narrow (void)
{
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-autoprec-XXXXXX", NULL);
  g_autofree gchar *with = run (default_auto, dir, FALSE);
  g_autofree gchar *without = run (NULL, NULL, FALSE);
  g_autofree gchar *a = values_only (with), *b = values_only (without);
  /* Widened at the measured step that ends the window: steps EVERY,
   * 2 EVERY, ... WIDEN_PATIENCE EVERY all above. */
  gint widen_at = EVERY * WIDEN_PATIENCE;
  /* Narrowed at the NARROW_PATIENCE-th measured step after the last tiny
   * one. */
  gint first_below = (TINY_UNTIL / EVERY + 1) * EVERY;
  gint narrow_at = first_below + EVERY * (NARROW_PATIENCE - 1);
  g_autofree gchar *file = g_build_filename (dir, "job", "AutoPrecision_u.weight_bits.csv", NULL);
  g_autofree gchar *series = NULL;
  g_autoptr(GString) expected = g_string_new ("step,bits\n");

  for (gint step = 1; step <= N_STEPS; step++)
    {
      g_autofree gchar *u = dtype_at (with, step, "u.weight");
      g_autofree gchar *v = dtype_at (with, step, "v.weight");
      g_autofree gchar *w = dtype_at (with, step, "w.weight");
      const gchar *u_expected = step >= widen_at && step < narrow_at ? "float32" : "float16";

      g_test_message ("step %d: u.weight %s", step, u);
      g_assert_cmpstr (u, ==, u_expected);
      g_assert_cmpstr (v, ==, "float16");
      g_assert_cmpstr (w, ==, "float16");
      if (step % EVERY == 0)
        g_string_append_printf (expected, "%d,%d\n", step, g_str_equal (u_expected, "float32") ? 32 : 16);
    }
  /* The layout changed, not the values: the gradients are exact in fp16
   * and fp32 alike, so masters and state are the run's without
   * auto-precision. */
  g_assert_cmpstr (a, ==, b);
  /* The monitor series at each measured step. */
  g_assert_true (g_file_get_contents (file, &series, NULL, NULL));
  g_assert_cmpstr (series, ==, expected->str);
}

/* max_widened_fraction: u.weight (half the elements) and w.weight (a
 * fifth) both underflow; a quarter leaves room for w.weight alone, and
 * the worst-first order skips u.weight rather than stopping. widen_to
 * without fp32: an fp16 parameter has nowhere to go. */
static void
test_limits (void)
{
  g_autofree gchar *quarter = run ("{\"widen_patience\": 3, \"narrow_patience\": 0, \"max_widened_fraction\": 0.25}",
                                   NULL, TRUE);
  g_autofree gchar *no_fp32 = run ("{\"widen_patience\": 3, \"widen_to\": [\"bf16\"]}", NULL, TRUE);
  g_autofree gchar *half = run ("{\"widen_patience\": 3, \"narrow_patience\": 0, \"max_widened_fraction\": 0.7}",
                                NULL, TRUE);

  for (gint step = 1; step <= N_STEPS; step++)
    {
      g_autofree gchar *u = dtype_at (quarter, step, "u.weight");
      g_autofree gchar *w = dtype_at (quarter, step, "w.weight");
      g_autofree gchar *u2 = dtype_at (no_fp32, step, "u.weight");
      g_autofree gchar *w2 = dtype_at (no_fp32, step, "w.weight");
      g_autofree gchar *u3 = dtype_at (half, step, "u.weight");
      g_autofree gchar *w3 = dtype_at (half, step, "w.weight");
      gboolean widened = step >= EVERY * WIDEN_PATIENCE;

      g_assert_cmpstr (u, ==, "float16");
      g_assert_cmpstr (w, ==, widened ? "float32" : "float16");
      g_assert_cmpstr (u2, ==, "float16");
      g_assert_cmpstr (w2, ==, "float16");
      /* 0.7: both fit (7000 of 10000 elements), and narrow_patience 0
       * keeps them wide. */
      g_assert_cmpstr (u3, ==, widened ? "float32" : "float16");
      g_assert_cmpstr (w3, ==, widened ? "float32" : "float16");
    }
}

/* Saved right after the decision (and once more later), loaded into a
 * fresh engine: the rest of the run is the uninterrupted one's bits,
 * the later narrowing included. */
static void
test_resume (void)
{
  g_autofree gchar *whole = run (default_auto, NULL, FALSE);
  static const gint save_at[] = { EVERY * WIDEN_PATIENCE, EVERY * WIDEN_PATIENCE + 3 };

  for (guint k = 0; k < G_N_ELEMENTS (save_at); k++)
    {
      g_autofree gchar *dir = g_dir_make_tmp ("mixprec-autoprec-ckpt-XXXXXX", NULL);
      g_autoptr(GString) out = g_string_new (NULL);
      g_autoptr(MixprecEngine) first = build_engine (default_auto, NULL, 1);
      g_autoptr(MixprecEngine) second = build_engine (default_auto, NULL, 1);
      g_autoptr(GError) error = NULL;

      for (gint step = 1; step <= save_at[k]; step++)
        {
          g_autoptr(MixprecStepResult) r = train_step (first, step, FALSE, &error);

          g_assert_no_error (error);
          g_assert_true (r->applied);
          dump_step (first, step, out);
        }
      g_assert_cmpint (mixprec_param_get_working_dtype (mixprec_engine_get_param (first, "u.weight")), ==,
                       MIXPREC_DTYPE_FLOAT32);
      g_assert_true (mixprec_engine_save_checkpoint_full (first, dir, "ckpt", 0, &error));
      g_assert_no_error (error);
      {
        g_autofree gchar *ckpt = g_build_filename (dir, "ckpt", NULL);

        g_assert_true (mixprec_engine_load_checkpoint (second, ckpt, &error));
        g_assert_no_error (error);
      }
      g_assert_cmpint (mixprec_param_get_working_dtype (mixprec_engine_get_param (second, "u.weight")), ==,
                       MIXPREC_DTYPE_FLOAT32);
      assert_working_follows (second, "u.weight");
      for (gint step = save_at[k] + 1; step <= N_STEPS; step++)
        {
          g_autoptr(MixprecStepResult) r = train_step (second, step, FALSE, &error);

          g_assert_no_error (error);
          g_assert_true (r->applied);
          dump_step (second, step, out);
        }
      g_assert_cmpstr (out->str, ==, whole);
    }
}

/* A caller holding a buffer's address (as mixprec.torch does) would read
 * freed memory once the buffers move: refused at the next step. */
static void
test_refused_address (void)
{
  g_autoptr(MixprecEngine) engine = build_engine (default_auto, NULL, 1);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;

  g_autoptr(GBytes) before = NULL, after = NULL;

  g_assert_nonnull (mixprec_param_get_working_data (mixprec_engine_get_param (engine, "v.weight")));
  before = mixprec_engine_gather_master (engine, "u.weight", &error);
  g_assert_no_error (error);
  r = train_step (engine, 1, FALSE, &error);
  g_assert_null (r);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "mixprec.auto_precision"));
  g_assert_nonnull (strstr (error->message, "'v.weight'"));
  /* Refused before the step did anything. */
  g_clear_error (&error);
  after = mixprec_engine_gather_master (engine, "u.weight", &error);
  g_assert_no_error (error);
  g_assert_true (g_bytes_equal (before, after));
}

/* @engine's run continued in a fresh engine of @json: a checkpoint saved
 * into @dir and loaded there. Frees @engine. */
static MixprecEngine *
resumed (MixprecEngine *engine, const gchar *json, const gchar *dir)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) fresh = build_engine_full (json, &error);
  g_autofree gchar *ckpt = g_build_filename (dir, "ckpt", NULL);

  g_assert_no_error (error);
  g_assert_true (mixprec_engine_save_checkpoint_full (engine, dir, "ckpt", 0, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (fresh, ckpt, &error));
  g_assert_no_error (error);
  g_object_unref (engine);
  return g_steal_pointer (&fresh);
}

/* bf16 with delayed-scaling FP8 copies of the Linear weights, most of
 * whose values (1e-4 beside a 1000 in each row) the FP8 cast flushes to
 * zero: fp8_underflow near 1 widens each to bf16 after 2 measured steps
 * (widen_to leaves fp32 out); with the FP8 statistics gone, 3 measured
 * steps later the copy is tried again with a fresh scaling, and widened
 * again 2 steps after that. A checkpoint saved while widened resumes
 * into the same bits. */
static gchar *
run_fp8 (gint save_at, const gchar *dir)
{
  static const gchar *json =
    "{\"bf16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true, \"recipe\": \"delayed\","
    " \"modules\": [\"Linear\"]}, \"gradient_accumulation_steps\": 3,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-7, \"weight_decay\": 0.0}},"
    " \"mixprec\": {\"numerics\": {\"every\": 1}, \"auto_precision\": {\"watch\": [\"fp8_underflow\"],"
    " \"widen_patience\": 2, \"narrow_patience\": 3, \"widen_to\": [\"bf16\"], \"max_widened_fraction\": 1}},"
    " \"steps_per_print\": null}";
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  GString *out = g_string_new (NULL);

  fp8_init = TRUE;
  engine = build_engine_full (json, &error);
  g_assert_no_error (error);
  for (gint step = 1; step <= 8; step++)
    {
      g_autoptr(MixprecStepResult) r = NULL;

      if (step == save_at + 1)
        engine = resumed (engine, json, dir);
      r = train_step (engine, 100, FALSE, &error);
      g_assert_no_error (error);
      g_assert_true (r->applied);
      dump_step (engine, step, out);
      g_string_append_printf (out, "%d fp8 %d\n", step,
                              mixprec_param_is_fp8 (mixprec_engine_get_param (engine, "u.weight")));
    }
  fp8_init = FALSE;
  return g_string_free (out, FALSE);
}

static void
test_fp8 (void)
{
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-autoprec-fp8-XXXXXX", NULL);
  g_autofree gchar *whole = run_fp8 (-1, NULL);
  g_autofree gchar *resumed = run_fp8 (3, dir);
  static const gboolean fp8_after[] = { FALSE, TRUE, FALSE, FALSE, FALSE, TRUE, TRUE, FALSE, FALSE };

  for (gint step = 1; step <= 8; step++)
    {
      g_autofree gchar *line = g_strdup_printf ("\n%d fp8 %d\n", step, fp8_after[step]);
      g_autofree gchar *text = g_strconcat ("\n", whole, NULL);
      g_autofree gchar *dt = dtype_at (whole, step, "u.weight");

      g_test_message ("step %d: %s", step, line + 1);
      g_assert_nonnull (strstr (text, line));
      g_assert_cmpstr (dt, ==, "bfloat16");
    }
  g_assert_cmpstr (resumed, ==, whole);
}

/* bf16 weights near 1024 (ulp 8) moved by about 0.01 a step: every
 * update is lost to rounding (stale 1), so with "stale" watched each is
 * widened to fp32 after 2 measured steps, tried in bf16 again 3 measured
 * steps later (FP32 values measure no stale) and widened again. The
 * gradients are exact in bf16, so the masters and state follow the run
 * without auto-precision bit for bit. */
static gchar *
run_stale (gboolean with_auto)
{
  g_autofree gchar *json = g_strdup_printf (
    "{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": 3,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.0}},"
    " \"mixprec\": {\"numerics\": {\"every\": 1}%s}, \"steps_per_print\": null}",
    with_auto ? ", \"auto_precision\": {\"watch\": [\"stale\"], \"widen_patience\": 2,"
                " \"narrow_patience\": 3, \"max_widened_fraction\": 1}" : "");
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  GString *out = g_string_new (NULL);

  big_init = TRUE;
  engine = build_engine_full (json, &error);
  g_assert_no_error (error);
  for (gint step = 1; step <= 8; step++)
    {
      g_autoptr(MixprecStepResult) r = train_step (engine, 100, FALSE, &error);

      g_assert_no_error (error);
      g_assert_true (r->applied);
      dump_step (engine, step, out);
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        assert_working_follows (engine, model[p].name);
    }
  big_init = FALSE;
  return g_string_free (out, FALSE);
}

static void
test_stale (void)
{
  g_autofree gchar *with = run_stale (TRUE);
  g_autofree gchar *without = run_stale (FALSE);
  g_autofree gchar *a = values_only (with), *b = values_only (without);
  static const gchar *const after[] = { NULL, "bfloat16", "float32", "float32", "float32", "bfloat16",
                                        "bfloat16", "float32", "float32" };

  for (gint step = 1; step <= 8; step++)
    for (guint p = 0; p < G_N_ELEMENTS (model); p++)
      {
        g_autofree gchar *dt = dtype_at (with, step, model[p].name);

        g_assert_cmpstr (dt, ==, after[step]);
      }
  g_assert_cmpstr (a, ==, b);
}

/* bf16 without FP32 masters: mixprec.master_weights "remainder" (the
 * working copy and a 16-bit remainder that stand for the FP32 master) or
 * "none". u.weight's gradients are bfloat16 subnormals (2^-130) up to
 * TINY_UNTIL, so it widens to fp32 and narrows back at the steps the fp16
 * run does. A change carries the values over exactly: with remainders
 * the masters and state follow the run without auto-precision bit for
 * bit (the gradients are exact in bf16 and fp32 alike); without masters
 * the parameters never widened do, while u.weight, stepped in FP32 while
 * widened, keeps the small updates bf16 loses. A checkpoint saved while
 * widened resumes into the same bits. */
static gchar *
run_masters (const gchar *masters, gboolean with_auto, gint save_at, const gchar *dir)
{
  g_autofree gchar *json = g_strdup_printf (
    "{\"bf16\": {\"enabled\": true}, \"gradient_accumulation_steps\": %u,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.0}},"
    " \"mixprec\": {\"master_weights\": \"%s\", \"numerics\": {\"every\": %u}%s%s},"
    " \"steps_per_print\": null}",
    N_MICRO, masters, EVERY, with_auto ? ", \"auto_precision\": " : "", with_auto ? default_auto : "");
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  GString *out = g_string_new (NULL);

  tiny_grad = 0x1p-130f;
  engine = build_engine_full (json, &error);
  g_assert_no_error (error);
  /* Neither keeps an FP32 master buffer. */
  g_assert_false (mixprec_param_has_master (mixprec_engine_get_param (engine, "v.weight")));
  for (gint step = 1; step <= N_STEPS; step++)
    {
      g_autoptr(MixprecStepResult) r = NULL;

      if (step == save_at + 1)
        engine = resumed (engine, json, dir);
      r = train_step (engine, step, FALSE, &error);
      g_assert_no_error (error);
      g_assert_true (r->applied);
      dump_step (engine, step, out);
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        assert_working_follows (engine, model[p].name);
    }
  tiny_grad = 0x1p-20f;
  return g_string_free (out, FALSE);
}

/* The lines of @dump about parameter @name. */
static gchar *
lines_of (const gchar *dump, const gchar *name)
{
  g_auto(GStrv) lines = g_strsplit (dump, "\n", -1);
  g_autofree gchar *key = g_strdup_printf (" %s ", name);
  GString *out = g_string_new (NULL);

  for (guint i = 0; lines[i] != NULL; i++)
    if (strstr (lines[i], key) != NULL)
      g_string_append_printf (out, "%s\n", lines[i]);
  return g_string_free (out, FALSE);
}

static void
test_masters (void)
{
  static const gchar *const kinds[] = { "remainder", "none" };
  gint widen_at = EVERY * WIDEN_PATIENCE;
  gint narrow_at = (TINY_UNTIL / EVERY + 1) * EVERY + EVERY * (NARROW_PATIENCE - 1);

  for (guint k = 0; k < G_N_ELEMENTS (kinds); k++)
    {
      g_autofree gchar *dir = g_dir_make_tmp ("mixprec-autoprec-masters-XXXXXX", NULL);
      g_autofree gchar *with = run_masters (kinds[k], TRUE, -1, NULL);
      g_autofree gchar *without = run_masters (kinds[k], FALSE, -1, NULL);
      /* Saved while u.weight is widened, resumed: the same bits. */
      g_autofree gchar *resumed = run_masters (kinds[k], TRUE, widen_at + 1, dir);

      g_test_message ("master_weights \"%s\"", kinds[k]);
      for (gint step = 1; step <= N_STEPS; step++)
        {
          g_autofree gchar *u = dtype_at (with, step, "u.weight");
          g_autofree gchar *v = dtype_at (with, step, "v.weight");

          g_assert_cmpstr (u, ==, step >= widen_at && step < narrow_at ? "float32" : "bfloat16");
          g_assert_cmpstr (v, ==, "bfloat16");
        }
      g_assert_cmpstr (resumed, ==, with);
      if (g_str_equal (kinds[k], "remainder"))
        {
          g_autofree gchar *a = values_only (with), *b = values_only (without);

          g_assert_cmpstr (a, ==, b);
        }
      else
        {
          g_autofree gchar *v_with = lines_of (with, "v.weight"), *v_without = lines_of (without, "v.weight");
          g_autofree gchar *w_with = lines_of (with, "w.weight"), *w_without = lines_of (without, "w.weight");
          g_autofree gchar *u_with = lines_of (with, "u.weight"), *u_without = lines_of (without, "u.weight");
          g_autofree gchar *a = values_only (u_with), *b = values_only (u_without);

          g_assert_cmpstr (v_with, ==, v_without);
          g_assert_cmpstr (w_with, ==, w_without);
          g_assert_cmpstr (a, !=, b);
        }
    }
}

/* A rank: the run's dump, written by every rank to its own file. */
static int
child_main (void)
{
  g_autoptr(GError) error = NULL;
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  guint world = (guint) atoi (g_getenv ("MIXPREC_WORLD_SIZE"));
  g_autoptr(MixprecEngine) engine = NULL;

  zero_stage = (guint) atoi (g_getenv ("MIXPREC_TEST_STAGE"));
  /* ZeRO-1 and 2 shard the optimizer state, which only checkpoints see
   * whole: the masters, gathered, then carry the check. */
  dump_states = g_getenv ("MIXPREC_TEST_NO_STATE") == NULL;
  engine = build_engine (default_auto, NULL, world);
  g_autoptr(GString) text = g_string_new (NULL);
  g_autofree gchar *mine = g_strdup_printf ("%s.%u", out, mixprec_engine_get_rank (engine));

  for (gint step = 1; step <= N_STEPS; step++)
    {
      g_autoptr(MixprecStepResult) r = train_step (engine, step, FALSE, &error);

      if (r == NULL)
        {
          g_printerr ("rank %u: %s\n", mixprec_engine_get_rank (engine), error->message);
          return 1;
        }
      dump_step (engine, step, text);
      /* The working copies, gathered under ZeRO-3 as a forward pass
       * gathers them, are the masters rounded to the dtype of the step,
       * before and after each change of layout. */
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);

          /* Not gathered: an error saying so, not a read of a shard. */
          if (zero_stage == 3 && world > 1)
            {
              g_autoptr(GBytes) none = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, &error);

              g_assert_null (none);
              g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
              g_assert_nonnull (strstr (error->message, "mixprec_engine_gather()"));
              g_clear_error (&error);
            }
          g_assert_true (mixprec_engine_gather (engine, param, &error));
          g_assert_no_error (error);
          assert_working_follows (engine, model[p].name);
          mixprec_engine_release (engine, param);
        }
    }
  return g_file_set_contents (mine, text->str, -1, &error) ? 0 : 1;
}

static gchar *
run_world (guint world, guint stage, const gchar *dir, guint rank)
{
  g_autofree gchar *out = g_build_filename (dir, "dump", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *stage_var = g_strdup_printf ("MIXPREC_TEST_STAGE=%u", stage);
  g_autofree gchar *mine = g_strdup_printf ("%s.%u", out, rank);
  const gchar *env[] = { "MIXPREC_TEST_AUTOPREC_CHILD=1", out_var, stage_var, NULL };
  gint status[3] = { -1, -1, -1 };
  gchar *text = NULL;

  if (rank == 0)
    {
      mp_run_ranks (world, TIMEOUT_MS, env, status);
      for (guint r = 0; r < world; r++)
        g_assert_cmpint (status[r], ==, 0);
    }
  g_assert_true (g_file_get_contents (mine, &text, NULL, NULL));
  return text;
}

/* Each rank decides from the agreed statistics alone: 3 ranks take the
 * 1-rank run's decisions at the same steps, with the same values. */
static void
test_world_sizes (void)
{
  g_autofree gchar *dir1 = g_dir_make_tmp ("mixprec-autoprec-w1-XXXXXX", NULL);
  g_autofree gchar *dir3 = g_dir_make_tmp ("mixprec-autoprec-w3-XXXXXX", NULL);
  g_autofree gchar *one = run_world (1, 0, dir1, 0);
  g_autofree gchar *three0 = run_world (3, 0, dir3, 0);
  g_autofree gchar *three1 = run_world (3, 0, dir3, 1);
  g_autofree gchar *three2 = run_world (3, 0, dir3, 2);
  g_autofree gchar *u = dtype_at (one, EVERY * WIDEN_PATIENCE, "u.weight");
  g_autofree gchar *one_masters = NULL;

  g_assert_cmpstr (u, ==, "float32");
  g_assert_cmpstr (three0, ==, one);
  g_assert_cmpstr (three1, ==, one);
  g_assert_cmpstr (three2, ==, one);
  /* ZeRO-1 and 2 across 3 ranks: the masters move between ranks' slices
   * with each change; the dtypes and masters of every step are the
   * 1-rank run's (whose state the masters of the later steps depend
   * on). */
  {
    g_autofree gchar *dir1m = g_dir_make_tmp ("mixprec-autoprec-w1m-XXXXXX", NULL);
    g_setenv ("MIXPREC_TEST_NO_STATE", "1", TRUE);
    one_masters = run_world (1, 1, dir1m, 0);
    for (guint stage = 1; stage <= 3; stage++)
      {
        g_autofree gchar *dir = g_dir_make_tmp ("mixprec-autoprec-z-XXXXXX", NULL);
        g_autofree gchar *r0 = run_world (3, stage, dir, 0);
        g_autofree gchar *r2 = run_world (3, stage, dir, 2);

        g_test_message ("ZeRO-%u across 3 ranks", stage);
        g_assert_cmpstr (r0, ==, one_masters);
        g_assert_cmpstr (r2, ==, one_masters);
      }
    g_unsetenv ("MIXPREC_TEST_NO_STATE");
  }
}

/* Every bad value is an error naming its key. */
static void
test_config_errors (void)
{
  static const struct {
    const gchar *auto_precision;
    guint every;
    const gchar *names;
  } cases[] = {
    { "{\"widen_above\": 1.5}", 1, "mixprec.auto_precision.widen_above" },
    { "{\"widen_above\": \"high\"}", 1, "mixprec.auto_precision.widen_above" },
    { "{\"widen_patience\": 0}", 1, "mixprec.auto_precision.widen_patience" },
    { "{\"narrow_below\": 0.6}", 1, "mixprec.auto_precision.narrow_below" },
    { "{\"narrow_below\": -0.1}", 1, "mixprec.auto_precision.narrow_below" },
    { "{\"widen_patience\": 10, \"narrow_patience\": 4}", 1, "mixprec.auto_precision.narrow_patience" },
    { "{\"max_widened_fraction\": 2}", 1, "mixprec.auto_precision.max_widened_fraction" },
    { "{\"widen_to\": [\"fp8\"]}", 1, "mixprec.auto_precision.widen_to[0]" },
    { "{\"watch\": [\"grad_norm\"]}", 1, "mixprec.auto_precision.watch[0]" },
    { "{\"watch\": []}", 1, "mixprec.auto_precision.watch" },
    { "{\"enabled\": \"yes\"}", 1, "mixprec.auto_precision.enabled" },
    { "{\"patience\": 3}", 1, "mixprec.auto_precision.patience" },
    { "[]", 1, "mixprec.auto_precision" },
    { "{}", 0, "mixprec.numerics.every" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree gchar *json = g_strdup_printf ("{\"fp16\": {\"enabled\": true}, \"mixprec\": "
                                                "{\"numerics\": {\"every\": %u}, \"auto_precision\": %s}}",
                                                cases[i].every, cases[i].auto_precision);
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);

      g_test_message ("%s", json);
      g_assert_null (config);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, error->code);
      g_assert_nonnull (strstr (error->message, cases[i].names));
    }
  /* Off: no conditions. */
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(MixprecConfig) config =
      mixprec_config_new_from_data ("{\"mixprec\": {\"auto_precision\": {\"enabled\": false}}}", -1, &error);
    g_autofree gchar *text = NULL;

    g_assert_no_error (error);
    text = mixprec_config_to_data (config, NULL);
    g_assert_nonnull (strstr (text, "\"auto_precision\""));
    g_assert_nonnull (strstr (text, "\"widen_patience\""));
  }
}

/* What the engine cannot serve is refused by name, never ignored. */
static void
test_refused (void)
{
  static const struct {
    const gchar *json;
    const gchar *names;
  } cases[] = {
    { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"master_weights\": \"kahan\", \"numerics\": {\"every\": 1},"
      " \"auto_precision\": {}}}", "mixprec.master_weights \"kahan\"" },
    { "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"numerics\": {\"every\": 1}, \"auto_precision\": {},"
      " \"optimizer_states\": {\"default\": \"int8\", \"block_size\": 256}},"
      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}", "optimizer states" },
  };
  g_autoptr(GError) error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (cases[i].json, -1, &error);
      g_autoptr(MixprecEngine) engine = NULL;

      g_assert_no_error (error);
      engine = mixprec_engine_new (config, &error);
      g_test_message ("%s", cases[i].json);
      g_assert_null (engine);
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, "mixprec.auto_precision"));
      g_assert_nonnull (strstr (error->message, cases[i].names));
      g_clear_error (&error);
    }
  /* Memory the caller owns: refused when the buffers are laid out. */
  {
    g_autofree gchar *json = config_json (default_auto, NULL, 1);
    g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
    g_autoptr(MixprecEngine) engine = mixprec_engine_new (config, &error);
    guint64 shape[1] = { 16 };
    g_autofree guint16 *working = g_new0 (guint16, 16), *grad = g_new0 (guint16, 16);

    g_assert_no_error (error);
    g_assert_nonnull (mixprec_engine_register_external (engine, "x", shape, 1, "Linear", working, grad, &error));
    g_assert_no_error (error);
    g_assert_false (mixprec_engine_prepare (engine, &error));
    g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
    g_assert_nonnull (strstr (error->message, "parameter 'x'"));
    g_assert_nonnull (strstr (error->message, "mixprec.auto_precision"));
  }
}

/* Bytes of buffer @name in the part of mixprec-inspect's output after
 * @after (NULL: from the start): its first row there. */
static guint64
plan_bytes (const gchar *text, const gchar *after, const gchar *name)
{
  g_autofree gchar *key = g_strdup_printf ("\n  %s ", name);
  const gchar *from = after != NULL ? strstr (text, after) : text;
  const gchar *at;

  g_assert_nonnull (from);
  at = strstr (from, key);
  if (at == NULL)
    return 0;
  return g_ascii_strtoull (at + strlen (key) + strspn (at + strlen (key), " "), NULL, 10);
}

/* mixprec-inspect --plan adds auto-precision's limit: 400 of 1000 fp16
 * parameters in fp32 (4 bytes of values, 4 of gradient, no master), the
 * other 600 as before (2 + 2 + 4 bytes). */
static void
test_plan (void)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-autoprec-plan-XXXXXX", NULL);
  g_autofree gchar *file = g_build_filename (dir, "c.json", NULL);
  g_autofree gchar *tool = NULL, *out = NULL, *err = NULL;
  g_autoptr(GError) error = NULL;
  const gchar *limit = "With mixprec.auto_precision at its limit";
  gint status = -1;

  if (top == NULL)
    {
      g_test_skip ("MIXPREC_TOP_BUILDDIR is not set (run through make check)");
      return;
    }
  tool = g_build_filename (top, "tools", "mixprec-inspect", NULL);
  g_assert_true (g_file_set_contents (file, "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"numerics\": "
                                      "{\"every\": 1}, \"auto_precision\": {\"max_widened_fraction\": 0.4}}}",
                                      -1, &error));
  {
    const gchar *argv[] = { tool, "--plan", "--params", "1000", "--config", file, NULL };

    g_assert_true (g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out, &err,
                                 &status, &error));
  }
  g_assert_no_error (error);
  g_test_message ("%s%s", out, err);
  g_assert_cmpint (status, ==, 0);
  g_assert_cmpuint (plan_bytes (out, NULL, "working copies"), ==, 2000);
  g_assert_cmpuint (plan_bytes (out, NULL, "FP32 master weights"), ==, 4000);
  g_assert_nonnull (strstr (out, limit));
  g_assert_cmpuint (plan_bytes (out, limit, "working copies"), ==, 400 * 4 + 600 * 2);
  g_assert_cmpuint (plan_bytes (out, limit, "gradients"), ==, 400 * 4 + 600 * 2);
  g_assert_cmpuint (plan_bytes (out, limit, "FP32 master weights"), ==, 600 * 4);
  g_assert_cmpuint (plan_bytes (out, limit, "optimizer state"), ==, 1000 * 8);
}

int
main (int argc, char **argv)
{
  if (g_getenv ("MIXPREC_TEST_AUTOPREC_CHILD") != NULL)
    return child_main ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/auto-precision/config/errors", test_config_errors);
  g_test_add_func ("/auto-precision/refused", test_refused);
  g_test_add_func ("/auto-precision/refused/address", test_refused_address);
  g_test_add_func ("/auto-precision/widen-narrow", test_widen_narrow);
  g_test_add_func ("/auto-precision/limits", test_limits);
  g_test_add_func ("/auto-precision/resume", test_resume);
  g_test_add_func ("/auto-precision/fp8", test_fp8);
  g_test_add_func ("/auto-precision/stale", test_stale);
  g_test_add_func ("/auto-precision/masters", test_masters);
  g_test_add_func ("/auto-precision/plan", test_plan);
  g_test_add_func ("/auto-precision/world-sizes", test_world_sizes);
  return g_test_run ();
}
