/* test-fp8-zero.c — FP8 working copies under ZeRO across real processes.
 * The same global batch on W ranks (micro-batch m on rank m % W) gives the
 * same masters, FP8 copies, MX block scales and FP8 scalings, bit for bit,
 * as one process with gradient_accumulation_steps W (FP32 accumulation):
 * the reference is that single-process run, computed in this process.
 * Under ZeRO-3 the FP8 copies are what gather() brings, and what it
 * received is counted: a byte per element (plus a scale per 32 under MX),
 * half what the bf16 working copies would take. Children are this binary
 * re-executed with the rank variables set. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "engine-ranks-common.h"
#include "multiproc.h"

#define TIMEOUT_MS 5000

typedef struct {
  const gchar *recipe;      /* "delayed", "current", "mx" */
  guint stage;
  guint world;
  guint steps;
} Scenario;

/* Two small Linear matrices (packed into one unit, and persistent under
 * ZeRO-3), a LayerNorm vector outside FP8, and a Linear matrix above the
 * ZeRO-3 persistence threshold, which gather() brings in FP8. */
static const struct { const gchar *name; guint64 rows, cols; const gchar *module; } model[] = {
  { "w1", 3000, 5, "Linear" }, { "ln", 1000, 0, "LayerNorm" }, { "w2", 4100, 2, "Linear" },
  { "w3", 300, 400, "Linear" },
};

static MixprecEngine *
build_engine (const Scenario *s, guint gas)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json =
    g_strdup_printf ("{\"bf16\": {\"enabled\": true},"
                     " \"fp8\": {\"enabled\": true, \"recipe\": \"%s\", \"amax_history_len\": 4,"
                     "  \"modules\": [\"Linear\"]},"
                     " \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": 3000,"
                     "  \"allgather_bucket_size\": 3000},"
                     " \"gradient_accumulation_steps\": %u, \"gradient_clipping\": 1.0,"
                     " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
                     "   \"weight_decay\": 0.1}}}", s->recipe, s->stage, gas);
  g_autoptr(MixprecConfig) config = NULL;
  MixprecEngine *engine;

  config = mixprec_config_new_from_data (json, -1, &error);
  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint64 numel = model[p].rows * MAX (model[p].cols, 1);
      guint64 shape[2] = { model[p].rows, model[p].cols };
      g_autofree gfloat *init = g_new (gfloat, numel);
      g_autoptr(GBytes) bytes = NULL;

      for (guint64 i = 0; i < numel; i++)
        init[i] = (gfloat) (cos (0.1 * (gdouble) i + p) * exp2 ((gdouble) (i % 5) - 2.0));
      bytes = g_bytes_new (init, numel * sizeof (gfloat));
      g_assert_nonnull (mixprec_engine_register_param (engine, model[p].name, shape,
                                                       model[p].cols ? 2 : 1, model[p].module,
                                                       MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_no_error (error);
    }
  return engine;
}

static gboolean
train (MixprecEngine *engine, const Scenario *s, guint rank, guint world, guint gas, GError **error)
{
  for (guint k = 0; k < s->steps; k++)
    if (!er_step (engine, k, rank, world, gas, error))
      return FALSE;
  return TRUE;
}

/* Masters, then for fp8 parameters the FP8 copy, its block scales and its
 * scaling's state, for the others the working copy. @gathered: the bytes
 * the gathers received. */
static GByteArray *
snapshot (MixprecEngine *engine, guint64 *gathered, GError **error)
{
  GByteArray *out = g_byte_array_new ();
  guint64 before = mixprec_engine_get_gathered_bytes (engine);

  if (!mixprec_engine_gather_all (engine, error))
    return NULL;
  *gathered = mixprec_engine_get_gathered_bytes (engine) - before;
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, model[p].name, error);
      g_autoptr(GBytes) copy = NULL;

      if (master == NULL)
        return NULL;
      g_byte_array_append (out, g_bytes_get_data (master, NULL), g_bytes_get_size (master));
      if (mixprec_param_is_fp8 (param))
        {
          MixprecFp8Scaling *scaling = mixprec_param_get_fp8_scaling (param);
          g_autoptr(GVariant) state = mixprec_fp8_scaling_save_state (scaling);
          g_autofree gchar *text = g_variant_print (state, TRUE);
          gsize n_scales = 0;
          const guint8 *scales = mixprec_param_get_fp8_block_scales (param, &n_scales);

          copy = mixprec_param_get_fp8 (param, error);
          if (copy == NULL)
            return NULL;
          if (scales != NULL)
            g_byte_array_append (out, scales, n_scales);
          g_byte_array_append (out, (const guint8 *) text, strlen (text));
        }
      else
        {
          copy = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, error);
          if (copy == NULL)
            return NULL;
        }
      g_byte_array_append (out, g_bytes_get_data (copy, NULL), g_bytes_get_size (copy));
    }
  mixprec_engine_release_all (engine);
  return out;
}

/* The engine's FP8 buffers are those mixprec_memory_plan_list_buffers()
 * predicts for its Linear parameters (one group). */
static gboolean
plan_matches (MixprecEngine *engine, guint world)
{
  static const guint64 sizes[3] = { 3000 * 5, 4100 * 2, 300 * 400 };
  static const gchar * const names[2] = { "FP8 working copies", "FP8 block scales" };

  return er_buffers_match_plan (engine, sizes, 3, world, names, 2, 1);
}

static int
child_main (void)
{
  Scenario s;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GByteArray) snap = NULL;
  guint64 gathered = 0;
  guint rank;

  if (!er_parse_scenario (g_getenv ("MIXPREC_TEST_SCENARIO"), &s.recipe, &s.stage, &s.world, &s.steps))
    return 2;
  engine = build_engine (&s, 1);
  rank = mixprec_engine_get_rank (engine);
  if (mixprec_engine_get_world_size (engine) != s.world)
    return 2;
  if (!train (engine, &s, rank, s.world, 1, &error) ||
      (snap = snapshot (engine, &gathered, &error)) == NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }
  if (!plan_matches (engine, s.world))
    return 4;
  if (!er_write_rank_result (g_getenv ("MIXPREC_TEST_OUT"), rank, gathered, snap, &error))
    return 1;
  return 0;
}

static void
test_scenario (gconstpointer data)
{
  const Scenario *s = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) ref = NULL;
  g_autoptr(GByteArray) expected = NULL;
  g_autofree gchar *scenario = g_strdup_printf ("%s:%u:%u:%u", s->recipe, s->stage, s->world, s->steps);
  guint64 ref_gathered = 0, gathered[4];

  /* The reference: one process, every micro-batch in order. */
  ref = build_engine (s, s->world);
  g_assert_true (train (ref, s, 0, 1, s->world, &error));
  g_assert_no_error (error);
  expected = snapshot (ref, &ref_gathered, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ref_gathered, ==, 0);

  er_run_ranks ("MIXPREC_TEST_FP8_ZERO_CHILD", scenario, s->world, TIMEOUT_MS, expected, gathered);
  for (guint r = 0; r < s->world; r++)
    {
      guint64 padded = er_padded_numel (model[3].rows * model[3].cols, s->world), want = 0;

      /* ZeRO-3 gathers w3 alone (the rest is persistent): its FP8 bytes
       * (and MX scales) from the other ranks; bf16 would be twice the
       * elements' share. */
      if (s->stage == 3)
        want = padded / s->world * (s->world - 1) +
               (g_str_equal (s->recipe, "mx") ? padded / 32 / s->world * (s->world - 1) : 0);
      g_assert_cmpuint (gathered[r], ==, want);
    }
}

/* Model parallelism: two processes, each its own data-parallel world of
 * one, joined by a model-parallel communicator, each holding a different
 * shard ("w") of one Linear weight. Their amaxes are agreed (MAX) over the
 * model-parallel group: both ranks end with the same scale, that of the
 * largest amax either saw. */
#define MP_STEPS 4
#define MP_NUMEL 64

static int
mp_child_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_autoptr(MixprecComm) mp = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  g_autofree gchar *file = NULL;
  g_autofree gchar *json = NULL;
  gfloat init[MP_NUMEL];
  guint64 shape[2] = { 8, MP_NUMEL / 8 };
  g_autoptr(GBytes) bytes = NULL;
  MixprecParam *p;
  guint rank;

  if (bootstrap == NULL)
    return 1;
  rank = mixprec_bootstrap_get_rank (bootstrap);
  for (guint i = 0; i < MP_NUMEL; i++)
    init[i] = (gfloat) (sin (0.7 * i + rank) * (1.0 + 3.0 * rank));
  bytes = g_bytes_new (init, sizeof init);
  mp = mixprec_comm_new (bootstrap, "auto", "cpu", TIMEOUT_MS, &error);
  json = g_strdup_printf ("{\"bf16\": {\"enabled\": true},"
                          " \"fp8\": {\"enabled\": true, \"recipe\": \"%s\", \"modules\": [\"Linear\"]},"
                          " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5}}}",
                          g_getenv ("MIXPREC_TEST_MP_RECIPE"));
  config = mixprec_config_new_from_data (json, -1, &error);
  if (mp == NULL || config == NULL)
    return 1;
  engine = mixprec_engine_new_with_comm (config, NULL, mp, &error);
  if (engine == NULL || mixprec_engine_get_world_size (engine) != 1)
    return 1;
  p = mixprec_engine_register_param (engine, "w", shape, 2, "Linear", MIXPREC_DTYPE_FLOAT32,
                                     bytes, &error);
  for (guint k = 0; k < MP_STEPS && p != NULL; k++)
    {
      gfloat g[MP_NUMEL];
      g_autoptr(GBytes) gb = NULL;
      g_autoptr(GBytes) before = mixprec_param_get_master (p, &error);
      g_autoptr(GBytes) after = NULL;
      g_autoptr(MixprecStepResult) r = NULL;
      const gfloat *m;
      gfloat amax_before = 0.0f, amax_after = 0.0f;

      if (before == NULL)
        break;
      m = g_bytes_get_data (before, NULL);
      for (guint i = 0; i < MP_NUMEL; i++)
        {
          amax_before = fmaxf (amax_before, fabsf (m[i]));
          g[i] = (gfloat) cos (0.3 * i + k + rank) * (gfloat) (k + 1);
        }
      gb = g_bytes_new (g, sizeof g);
      if (!mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, gb, &error) ||
          !mixprec_engine_backward_done (engine, &error) ||
          (r = mixprec_engine_step (engine, &error)) == NULL ||
          (after = mixprec_param_get_master (p, &error)) == NULL)
        break;
      m = g_bytes_get_data (after, NULL);
      for (guint i = 0; i < MP_NUMEL; i++)
        amax_after = fmaxf (amax_after, fabsf (m[i]));
      g_string_append_printf (out, "%a %a %a\n", amax_before, amax_after,
                              mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (p)));
    }
  if (error != NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), rank);
  return g_file_set_contents (file, out->str, -1, NULL) ? 0 : 1;
}

static void
test_model_parallel (gconstpointer data)
{
  const gchar *recipe = data;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-fp8-mp-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "mp", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *recipe_var = g_strdup_printf ("MIXPREC_TEST_MP_RECIPE=%s", recipe);
  const gchar *env[] = { "MIXPREC_TEST_FP8_MP_CHILD=1", out_var, recipe_var, NULL };
  gfloat before[2][MP_STEPS], after[2][MP_STEPS], scale[2][MP_STEPS];
  gfloat seen = 0.0f;
  gint status[2];

  mp_run_ranks (2, TIMEOUT_MS, env, status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  for (guint r = 0; r < 2; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
      g_autofree gchar *text = NULL;
      g_auto(GStrv) lines = NULL;

      g_assert_true (g_file_get_contents (file, &text, NULL, &error));
      lines = g_strsplit (text, "\n", -1);
      for (guint k = 0; k < MP_STEPS; k++)
        {
          g_auto(GStrv) f = g_strsplit (lines[k], " ", -1);

          g_assert_cmpuint (g_strv_length (f), ==, 3);
          before[r][k] = strtof (f[0], NULL);
          after[r][k] = strtof (f[1], NULL);
          scale[r][k] = strtof (f[2], NULL);
        }
      g_remove (file);
    }
  g_rmdir (dir);
  for (guint k = 0; k < MP_STEPS; k++)
    {
      /* Delayed: the largest amax of the copies cast before (history of
       * 1024); current: of the values just cast; over both shards. */
      seen = fmaxf (seen, fmaxf (before[0][k], before[1][k]));
      g_assert_cmpfloat (scale[0][k], ==, scale[1][k]);
      if (g_str_equal (recipe, "delayed"))
        g_assert_cmpfloat (scale[0][k], ==, 448.0f / seen);
      else
        g_assert_cmpfloat (scale[0][k], ==, 448.0f / fmaxf (after[0][k], after[1][k]));
    }
  /* The shards differ, so the agreement mattered. */
  g_assert_cmpfloat (before[0][0], !=, before[1][0]);
}

int
main (int argc, char **argv)
{
  static const Scenario scenarios[] = {
    { "delayed", 3, 2, 4 }, { "delayed", 3, 3, 4 },
    { "mx", 3, 2, 3 }, { "mx", 3, 3, 3 },
    { "current", 3, 2, 3 },
    { "delayed", 1, 2, 3 }, { "mx", 2, 3, 3 }, { "delayed", 0, 2, 2 },
  };

  if (g_getenv ("MIXPREC_TEST_FP8_ZERO_CHILD") != NULL)
    return child_main ();
  if (g_getenv ("MIXPREC_TEST_FP8_MP_CHILD") != NULL)
    return mp_child_main ();

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (scenarios); i++)
    {
      const Scenario *s = &scenarios[i];
      g_autofree gchar *path = g_strdup_printf ("/fp8-zero/%s/stage%u/world%u", s->recipe, s->stage,
                                                s->world);

      g_test_add_data_func (path, s, test_scenario);
    }
  g_test_add_data_func ("/fp8-zero/model-parallel/delayed", "delayed", test_model_parallel);
  g_test_add_data_func ("/fp8-zero/model-parallel/current", "current", test_model_parallel);
  return g_test_run ();
}
