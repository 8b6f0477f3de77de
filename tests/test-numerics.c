/* test-numerics.c — mixprec.numerics: per-tensor statistics of crafted
 * gradients and updates whose counts are known by construction (so many
 * elements underflow fp16, so many overflow it, so many updates are lost
 * to rounding), measured at 1 rank and at 3 ranks (ZeRO-0 and ZeRO-2 on
 * 127.0.0.1 through comm-ucx) on the same global micro-batches: every
 * value is checked against its construction and must be the same bits at
 * both world sizes. The csv monitor gets the series under Numerics/ and
 * NumericsByType/; the config rejects malformed settings by path. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"
#include "mixprec-cpu-private.h"
#include "mixprec-numerics-kernels-private.h"

#define TIMEOUT_MS 60000
#define N_MICRO 3            /* global micro-batches per step */
#define LR 0.01

static const struct {
  const gchar *name;
  const gchar *type;
  guint64 numel;
} model[] = {
  { "a.weight", "Linear", 5000 },     /* two sum-of-squares blocks */
  { "b.bias", "Linear", 300 },        /* shares a's second block */
  { "n.weight", "LayerNorm", 9000 },  /* FP32 (fp32_modules): no working copy of its own */
  /* Only with MIXPREC_TEST_BIG=threads: long enough that two threads
   * share its slots (see n_params()). */
  { "c.weight", "Linear", 300000 },
};

/* The parameters of this run: c.weight only under MIXPREC_TEST_BIG. On one
 * process a thread adds up the statistics of the slots it measures in
 * order; two threads split c.weight, one adding up its first slots, the
 * other leaving records, which the step's end continues from where the
 * first stopped: the same bits as one thread and as three ranks. */
static guint
n_params (void)
{
  return g_getenv ("MIXPREC_TEST_BIG") != NULL ? G_N_ELEMENTS (model) : G_N_ELEMENTS (model) - 1;
}

/* fp16 gradients summed into an FP32 accumulation buffer (and, across
 * ranks, reduced in fp16 into FP32 sums): the FP32 sums are what the
 * underflow and overflow fractions judge against fp16. @states: int8
 * optimizer states in blocks of 256, which one process steps in staged
 * blocks (measured in passes of their own) and ranks in their slices
 * (measured in the optimizer's pass). */
static gchar *
config_json (guint stage, guint gas, guint every, const gchar *csv_dir, gboolean states, const gchar *fp8)
{
  return g_strdup_printf ("{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 1}, %s"
                          " \"data_types\": {\"grad_accum_dtype\": \"fp32\"},"
                          " \"gradient_accumulation_steps\": %u,"
                          " \"zero_optimization\": {\"stage\": %u},"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %g, \"weight_decay\": 0.0}},"
                          " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"], \"numerics\": {\"every\": %u, \"shadow\": %s}%s},"
                          " \"csv_monitor\": {\"enabled\": %s, \"output_path\": \"%s\", \"job_name\": \"job\"},"
                          " \"steps_per_print\": null}",
                          fp8 != NULL ? (g_str_equal (fp8, "mx")
                                         ? "\"fp8\": {\"enabled\": true, \"recipe\": \"mx\", \"modules\": [\"Linear\"]},"
                                         : "\"fp8\": {\"enabled\": true, \"recipe\": \"delayed\", \"modules\": [\"Linear\"]},")
                                      : "",
                          gas, stage, LR, every,
                          g_getenv ("MIXPREC_TEST_SHADOW") != NULL ? g_getenv ("MIXPREC_TEST_SHADOW")
                                                                   : "[\"a.*\", \"n.weight\"]",
                          states ? ", \"optimizer_states\": {\"default\": \"int8\", \"block_size\": 256}" : "",
                          csv_dir != NULL ? "true" : "false", csv_dir != NULL ? csv_dir : "");
}

/* Element i's category in a.weight and b.bias (by i % 10): 0 a zero
 * gradient, 1 an fp16 subnormal (2^-20) that stays one, 2 a sum of two
 * 40000s (80000 in FP32, beyond fp16's 65504), others normal. */
static gfloat
grad_value (guint p, guint64 i, guint m, gint step)
{
  guint c = (guint) (i % 10);

  if (step == 2 && p == 0 && i == 3 && m == 0)
    return INFINITY;
  if (p == 2)
    {
      /* FP32 parameters, FP32 wire: FP32 subnormals underflow. */
      if (c == 1)
        return m == 0 ? 0x1p-130f : 0.0f;
      return m == 0 ? (gfloat) ldexp (1.0 + (gdouble) (i % 5) / 8.0, -(gint) (i % 7)) : 0.25f * (gfloat) m;
    }
  switch (c)
    {
    case 0:
      return 0.0f;
    case 1:
      return m == 0 ? 0x1p-20f : 0.0f;
    case 2:
      return m < 2 ? 40000.0f : 0.0f;
    default:
      return (gfloat) ldexp ((gdouble) ((i % 7) + 1), -(gint) (i % 9)) * (m == 1 ? -1.0f : 1.0f) * (1.0f + m);
    }
}

/* a.weight and b.bias: every fourth value large enough that an update of
 * about lr is below half an fp16 ulp (1024: ulp 1), the rest small. */
static gfloat
init_value (guint p, guint64 i)
{
  if (p < 2 && i % 4 == 0)
    return 1024.0f;
  return 0.25f + (gfloat) (i % 13) / 64.0f;
}

/* The caller's buffers of @external parameters (one process), which
 * live as long as the process. */
static gpointer external_memory[G_N_ELEMENTS (model)][2];

static MixprecEngine *
build_engine (guint stage, guint gas, const gchar *csv_dir, gboolean external, gboolean states,
              const gchar *fp8)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = config_json (stage, gas, 1, csv_dir, states, fp8);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint p = 0; p < n_params (); p++)
    {
      g_autofree gfloat *init = g_new (gfloat, model[p].numel);
      g_autoptr(GBytes) bytes = NULL;
      /* a.weight a matrix: the one FP8 parameter of the fp8 runs. */
      guint64 shape[2] = { p == 0 ? 50 : model[p].numel, 100 };
      guint n_dims = p == 0 ? 2 : 1;

      for (guint64 i = 0; i < model[p].numel; i++)
        init[i] = init_value (p, i);
      if (external)
        {
          /* fp16 working copies for Linear, FP32 for LayerNorm; the
           * initial values are exact in fp16, so the masters start where
           * the engine's own buffers start. */
          MixprecDType dt = p < 2 ? MIXPREC_DTYPE_FLOAT16 : MIXPREC_DTYPE_FLOAT32;
          gsize size = model[p].numel * mixprec_dtype_get_size (dt);

          external_memory[p][0] = g_malloc (size);
          external_memory[p][1] = g_malloc0 (size);
          g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, init, dt, external_memory[p][0],
                                                model[p].numel, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error));
          g_assert_nonnull (mixprec_engine_register_external (engine, model[p].name, shape, n_dims, model[p].type,
                                                              external_memory[p][0], external_memory[p][1],
                                                              &error));
          g_assert_no_error (error);
          continue;
        }
      bytes = g_bytes_new (init, model[p].numel * sizeof (gfloat));
      g_assert_nonnull (mixprec_engine_register_param (engine, model[p].name, shape, n_dims, model[p].type,
                                                       MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_no_error (error);
    }
  return engine;
}

/* One step of the N_MICRO global micro-batches, this rank's share. */
static MixprecStepResult *
train_step (MixprecEngine *engine, guint rank, guint world, gint step, GError **error)
{
  for (guint local = 0; local < N_MICRO / world; local++)
    {
      guint m = local * world + rank;

      for (guint p = 0; p < n_params (); p++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
          g_autofree gfloat *g = g_new (gfloat, model[p].numel);
          g_autoptr(GBytes) bytes = NULL;

          for (guint64 i = 0; i < model[p].numel; i++)
            g[i] = grad_value (p, i, m, step);
          bytes = g_bytes_new_take (g_steal_pointer (&g), model[p].numel * sizeof (gfloat));
          if (!mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, error))
            return NULL;
        }
      if (!mixprec_engine_backward_done (engine, error))
        return NULL;
    }
  return mixprec_engine_step (engine, error);
}

/* Every statistic of every row as "kind name stat hex-value" lines. */
static void
dump (MixprecNumerics *n, GString *out)
{
  g_auto(GStrv) params = mixprec_numerics_list_params (n);
  g_auto(GStrv) types = mixprec_numerics_list_module_types (n);

  g_string_append_printf (out, "step %" G_GUINT64_FORMAT " applied %d\n", mixprec_numerics_get_step (n),
                          mixprec_numerics_get_applied (n));
  for (guint i = 0; params[i] != NULL; i++)
    {
      g_auto(GStrv) stats = mixprec_numerics_list_stats (n, params[i]);

      for (guint s = 0; stats[s] != NULL; s++)
        {
          gdouble v;

          g_assert_true (mixprec_numerics_get_stat (n, params[i], stats[s], &v));
          g_string_append_printf (out, "param %s %s %a\n", params[i], stats[s], v);
        }
    }
  for (guint i = 0; types[i] != NULL; i++)
    {
      g_auto(GStrv) stats = mixprec_numerics_list_module_stats (n, types[i]);

      for (guint s = 0; stats[s] != NULL; s++)
        {
          gdouble v;

          g_assert_true (mixprec_numerics_get_module_stat (n, types[i], stats[s], &v));
          g_string_append_printf (out, "type %s %s %a\n", types[i], stats[s], v);
        }
    }
}

/* The update ratio from the masters themselves: |new - old| / |old|. */
static gdouble
ratio_of (GBytes *before, GBytes *after)
{
  gsize n;
  const gfloat *a = g_bytes_get_data (before, &n), *b = g_bytes_get_data (after, NULL);
  gdouble d = 0, w = 0;

  for (gsize i = 0; i < n / sizeof (gfloat); i++)
    {
      d += ((gdouble) b[i] - a[i]) * ((gdouble) b[i] - a[i]);
      w += (gdouble) a[i] * a[i];
    }
  return sqrt (d) / sqrt (w);
}

/* A rank: two steps (the second overflows and is skipped), the numerics
 * of each dumped, and (rank 0) the update ratios from the masters. With
 * MIXPREC_TEST_STEPS=3 a third, applied step; MIXPREC_TEST_SAVE=DIR saves
 * a checkpoint after step 1, MIXPREC_TEST_LOAD=DIR loads one and starts
 * at step 2; MIXPREC_TEST_SHADOW replaces the shadow's patterns. */
static int
child_main (void)
{
  g_autoptr(GError) error = NULL;
  guint stage = (guint) atoi (g_getenv ("MIXPREC_TEST_STAGE"));
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  const gchar *csv = g_getenv ("MIXPREC_TEST_CSV");
  gboolean external = g_getenv ("MIXPREC_TEST_EXTERNAL") != NULL;
  gboolean states = g_getenv ("MIXPREC_TEST_STATES") != NULL;
  const gchar *fp8 = g_getenv ("MIXPREC_TEST_FP8");
  const gchar *save = g_getenv ("MIXPREC_TEST_SAVE");
  const gchar *load = g_getenv ("MIXPREC_TEST_LOAD");
  gint steps = g_getenv ("MIXPREC_TEST_STEPS") != NULL ? atoi (g_getenv ("MIXPREC_TEST_STEPS")) : 2;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GString) text = g_string_new (NULL);
  guint rank, world;

  /* Before the thread pool starts. */
  if (g_getenv ("MIXPREC_TEST_BIG") != NULL)
    g_setenv ("MIXPREC_NUM_THREADS", g_getenv ("MIXPREC_TEST_BIG"), TRUE);
  world = (guint) atoi (g_getenv ("MIXPREC_WORLD_SIZE"));
  engine = build_engine (stage, N_MICRO / world, csv != NULL && *csv != '\0' ? csv : NULL, external, states, fp8);
  rank = mixprec_engine_get_rank (engine);
  g_assert_cmpuint (mixprec_engine_get_world_size (engine), ==, world);
  if (load != NULL && !mixprec_engine_load_checkpoint (engine, load, &error))
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }
  for (gint step = load != NULL ? 2 : 1; step <= steps; step++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      g_autoptr(MixprecNumerics) n = NULL;
      GBytes *before[G_N_ELEMENTS (model)] = { NULL };

      for (guint p = 0; p < n_params (); p++)
        {
          before[p] = mixprec_engine_gather_master (engine, model[p].name, &error);
          g_assert_no_error (error);
        }
      r = train_step (engine, rank, world, step, &error);
      if (r == NULL)
        {
          g_printerr ("rank %u: %s\n", rank, error->message);
          return 1;
        }
      if (step == 1 && save != NULL && !mixprec_engine_save_checkpoint (engine, save, &error))
        {
          g_printerr ("rank %u: %s\n", rank, error->message);
          return 1;
        }
      n = mixprec_engine_get_numerics (engine);
      g_assert_nonnull (n);
      dump (n, text);
      for (guint p = 0; p < n_params (); p++)
        {
          g_autoptr(GBytes) after = mixprec_engine_gather_master (engine, model[p].name, &error);

          g_assert_no_error (error);
          if (r->applied)
            g_string_append_printf (text, "masters %s %.17g\n", model[p].name, ratio_of (before[p], after));
          g_bytes_unref (before[p]);
        }
    }
  if (rank == 0 && !g_file_set_contents (out, text->str, -1, &error))
    return 1;
  return 0;
}

/* The ranks' run with the variables @vars (NULL-terminated) set. */
static gchar *
run_world_with (guint world, guint stage, const gchar *dir, const gchar *csv, const gchar *const *vars)
{
  g_autofree gchar *out = g_build_filename (dir, "numerics.txt", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *stage_var = g_strdup_printf ("MIXPREC_TEST_STAGE=%u", stage);
  g_autofree gchar *csv_var = g_strdup_printf ("MIXPREC_TEST_CSV=%s", csv != NULL ? csv : "");
  g_autoptr(GPtrArray) env = g_ptr_array_new ();
  gint status[3] = { -1, -1, -1 };
  gchar *text = NULL;

  g_ptr_array_add (env, (gpointer) "MIXPREC_TEST_NUMERICS_CHILD=1");
  g_ptr_array_add (env, out_var);
  g_ptr_array_add (env, stage_var);
  g_ptr_array_add (env, csv_var);
  for (guint i = 0; vars != NULL && vars[i] != NULL; i++)
    g_ptr_array_add (env, (gpointer) vars[i]);
  g_ptr_array_add (env, NULL);
  mp_run_ranks (world, TIMEOUT_MS, (const gchar * const *) env->pdata, status);
  for (guint r = 0; r < world; r++)
    g_assert_cmpint (status[r], ==, 0);
  g_assert_true (g_file_get_contents (out, &text, NULL, NULL));
  return text;
}

/* @variant: NULL, "MIXPREC_TEST_EXTERNAL=1", "MIXPREC_TEST_STATES=1" or
 * "MIXPREC_TEST_FP8=1". */
static gchar *
run_world (guint world, guint stage, const gchar *dir, const gchar *csv, const gchar *variant)
{
  const gchar *vars[] = { variant, NULL };

  return run_world_with (world, stage, dir, csv, vars);
}

/* "kind name stat" -> value of the first step's dump (the second step's
 * under "@2" after the stat). */
static GHashTable *
parse (const gchar *text)
{
  GHashTable *t = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_auto(GStrv) lines = g_strsplit (text, "\n", -1);
  guint step = 0;

  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) f = g_strsplit (lines[i], " ", -1);

      if (g_strv_length (f) == 4 && g_str_equal (f[0], "step"))
        step = (guint) atoi (f[1]);
      else if (g_strv_length (f) == 4)
        {
          gdouble *v = g_new (gdouble, 1);

          *v = g_ascii_strtod (f[3], NULL);
          g_hash_table_insert (t, g_strdup_printf ("%s %s %s@%u", f[0], f[1], f[2], step), v);
        }
      else if (g_strv_length (f) == 3 && g_str_equal (f[0], "masters"))
        {
          gdouble *v = g_new (gdouble, 1);

          *v = g_ascii_strtod (f[2], NULL);
          g_hash_table_insert (t, g_strdup_printf ("masters %s@%u", f[1], step), v);
        }
    }
  return t;
}

static gdouble
value (GHashTable *t, const gchar *key)
{
  gdouble *v = g_hash_table_lookup (t, key);

  if (v == NULL)
    g_error ("no value for %s", key);
  return *v;
}

/* The statistics every world size must give, from the construction. */
static void
check_expected (GHashTable *t)
{
  /* a.weight: 5000 elements, 500 of each category 0, 1, 2; the FP32
   * sums of categories 3-9 are at most 7 (1 - 2 + 3) = 14, so the
   * largest magnitude is 80000, unscaled by the loss scale 2 times 3
   * micro-batches. */
  gdouble nonzero_a = 4500, nonzero_b = 270;
  gdouble amax_ln = 0, sumsq_a = 0;

  g_assert_cmpfloat (value (t, "param a.weight grad_amax@1"), ==, 80000.0 / 6.0);
  g_assert_cmpfloat (value (t, "param a.weight grad_nonfinite@1"), ==, 0.0);
  g_assert_cmpfloat (value (t, "param a.weight grad_underflow@1"), ==, 500 / nonzero_a);
  g_assert_cmpfloat (value (t, "param a.weight grad_overflow@1"), ==, 500 / nonzero_a);
  g_assert_cmpfloat (value (t, "param b.bias grad_underflow@1"), ==, 30 / nonzero_b);
  g_assert_cmpfloat (value (t, "param b.bias grad_overflow@1"), ==, 30 / nonzero_b);
  /* Linear: a and b together. */
  g_assert_cmpfloat (value (t, "type Linear grad_underflow@1"), ==, 530 / (nonzero_a + nonzero_b));
  g_assert_cmpfloat (value (t, "type Linear grad_amax@1"), ==, 80000.0 / 6.0);
  /* The norm: the FP32 sums' squares added in double. */
  for (guint64 i = 0; i < 5000; i++)
    {
      gfloat s = 0;

      for (guint m = 0; m < N_MICRO; m++)
        s += grad_value (0, i, m, 1);
      sumsq_a += (gdouble) s * s;
    }
  g_assert_cmpfloat_with_epsilon (value (t, "param a.weight grad_norm@1"), sqrt (sumsq_a) / 6.0,
                                  1e-12 * sqrt (sumsq_a));
  /* Stale: 1024 (ulp 1) moved by about lr, or a zero gradient with no
   * weight decay: i % 4 == 0 or i % 10 == 0, 1500 of 5000. */
  g_assert_cmpfloat (value (t, "param a.weight stale@1"), ==, 1500.0 / 5000.0);
  g_assert_cmpfloat (value (t, "param b.bias stale@1"), ==, 90.0 / 300.0);
  g_assert_cmpfloat (value (t, "type Linear stale@1"), ==, 1590.0 / 5300.0);
  /* n.weight: FP32 values, an FP32 wire: 900 FP32 subnormals. */
  g_assert_false (g_hash_table_contains (t, "param n.weight stale@1"));
  g_assert_cmpfloat (value (t, "param n.weight grad_underflow@1"), ==, 900.0 / 9000.0);
  g_assert_cmpfloat (value (t, "param n.weight grad_overflow@1"), ==, 0.0);
  for (guint64 i = 0; i < 9000; i++)
    {
      gfloat s = 0;

      for (guint m = 0; m < N_MICRO; m++)
        s += grad_value (2, i, m, 1);
      amax_ln = MAX (amax_ln, fabs (s));
    }
  g_assert_cmpfloat (value (t, "param n.weight grad_amax@1"), ==, amax_ln / 6.0);
  /* The update ratios agree with the masters gathered around the step
   * (the engine sums the update's squares in FP32 within each block). */
  for (guint p = 0; p < n_params (); p++)
    {
      g_autofree gchar *k = g_strdup_printf ("param %s update_ratio@1", model[p].name);
      g_autofree gchar *m = g_strdup_printf ("masters %s@1", model[p].name);

      g_assert_cmpfloat_with_epsilon (value (t, k), value (t, m), 1e-5 * value (t, m));
    }
  /* The FP32 shadow steps as the FP32 masters and state do: the working
   * copies are the masters rounded, 0 ulps from the shadow rounded. */
  g_assert_cmpfloat (value (t, "param a.weight shadow_max_ulp@1"), ==, 0.0);
  g_assert_cmpfloat (value (t, "param n.weight shadow_max_ulp@1"), ==, 0.0);
  g_assert_cmpfloat (value (t, "param n.weight shadow_rel_l2@1"), ==, 0.0);
  g_assert_cmpfloat (value (t, "param a.weight shadow_rel_l2@1"), >, 0.0);
  g_assert_false (g_hash_table_contains (t, "param b.bias shadow_rel_l2@1"));
  /* Step 2: one infinite element of a.weight; skipped, gradients only. */
  g_assert_cmpfloat (value (t, "param a.weight grad_nonfinite@2"), ==, 1.0 / 5000.0);
  g_assert_cmpfloat (value (t, "param b.bias grad_nonfinite@2"), ==, 0.0);
  g_assert_false (g_hash_table_contains (t, "param a.weight stale@2"));
  g_assert_false (g_hash_table_contains (t, "param a.weight update_ratio@2"));
}

static void
test_world_sizes (void)
{
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-numerics-XXXXXX", NULL);
  g_autofree gchar *csv = g_build_filename (dir, "monitors", NULL);
  g_autofree gchar *one = run_world (1, 0, dir, csv, NULL);
  g_autofree gchar *external = run_world (1, 0, dir, NULL, "MIXPREC_TEST_EXTERNAL=1");
  g_autofree gchar *zero0 = run_world (3, 0, dir, NULL, NULL);
  g_autofree gchar *zero2 = run_world (3, 2, dir, NULL, NULL);
  g_autofree gchar *zero3 = run_world (3, 3, dir, NULL, NULL);
  g_autofree gchar *states1 = run_world (1, 0, dir, NULL, "MIXPREC_TEST_STATES=1");
  g_autofree gchar *states3 = run_world (3, 1, dir, NULL, "MIXPREC_TEST_STATES=1");
  g_autofree gchar *fp8_1 = run_world (1, 0, dir, NULL, "MIXPREC_TEST_FP8=1");
  g_autofree gchar *fp8_3 = run_world (3, 2, dir, NULL, "MIXPREC_TEST_FP8=1");
  /* MX copies: each element saturates by its own block's scale, and the
   * scales sit in rank slices under ZeRO-3. */
  g_autofree gchar *mx_1 = run_world (1, 0, dir, NULL, "MIXPREC_TEST_FP8=mx");
  g_autofree gchar *mx_3 = run_world (3, 3, dir, NULL, "MIXPREC_TEST_FP8=mx");
  /* Measured by the library around the optimizer instead of by the
   * optimizer in its pass (ABI 1.6), and by the optimizer's scalar and
   * AVX2 kernels. */
  g_autofree gchar *around_1 = run_world (1, 0, dir, NULL, "MIXPREC_NUMERICS_IN_PASS=0");
  g_autofree gchar *around_3 = run_world (3, 2, dir, NULL, "MIXPREC_NUMERICS_IN_PASS=0");
  g_autofree gchar *scalar_1 = run_world (1, 0, dir, NULL, "MIXPREC_SIMD=scalar");
  g_autofree gchar *avx2_3 = run_world (3, 2, dir, NULL, "MIXPREC_SIMD=avx2");
  g_autofree gchar *big_1 = run_world (1, 0, dir, NULL, "MIXPREC_TEST_BIG=1");
  g_autofree gchar *big_2 = run_world (1, 0, dir, NULL, "MIXPREC_TEST_BIG=2");
  g_autofree gchar *big_3 = run_world (3, 2, dir, NULL, "MIXPREC_TEST_BIG=1");
  g_autoptr(GHashTable) t = parse (one);
  g_autofree gchar *file = NULL, *amax = NULL, *expected = NULL;
  g_autofree gchar *by_type = NULL;

  check_expected (t);
  /* The same bits at every world size and stage, measured in the
   * optimizer's pass (1 rank, caller's memory, ZeRO-2 and 3) or in passes
   * of their own (ZeRO-0's gathered windows; one process's staged
   * blocks of int8 state, against 3 ranks' slices). */
  g_assert_cmpstr (external, ==, one);
  g_assert_cmpstr (zero0, ==, one);
  g_assert_cmpstr (zero2, ==, one);
  g_assert_cmpstr (zero3, ==, one);
  g_assert_cmpstr (states3, ==, states1);
  /* The first step reads zero state and stores it in int8 after stepping
   * in FP32: the same step as FP32 state. */
  g_assert_cmpstr (states1, ==, one);
  g_assert_cmpstr (around_1, ==, one);
  g_assert_cmpstr (around_3, ==, one);
  g_assert_cmpstr (scalar_1, ==, one);
  g_assert_cmpstr (avx2_3, ==, one);
  /* A parameter two threads share: the same bits as one thread and as
   * three ranks, whose records are all agreed on. */
  g_assert_nonnull (strstr (big_1, "param c.weight grad_norm "));
  g_assert_cmpstr (big_2, ==, big_1);
  g_assert_cmpstr (big_3, ==, big_1);
  /* FP8 copies of a.weight: its FP8 statistics too. */
  g_assert_nonnull (strstr (fp8_1, "param a.weight fp8_underflow "));
  g_assert_nonnull (strstr (fp8_1, "param a.weight fp8_scale "));
  g_assert_cmpstr (fp8_3, ==, fp8_1);
  g_assert_nonnull (strstr (mx_1, "param a.weight fp8_saturation "));
  g_assert_null (strstr (mx_1, "param a.weight fp8_scale "));
  g_assert_cmpstr (mx_3, ==, mx_1);

  /* The csv monitor: one file per series, recorded at the step. */
  file = g_build_filename (csv, "job", "Numerics_a.weight_grad_amax.csv", NULL);
  g_assert_true (g_file_get_contents (file, &amax, NULL, NULL));
  g_assert_true (g_str_has_prefix (amax, "step,grad_amax\n1,13333.333333333334\n2,"));
  g_free (file);
  file = g_build_filename (csv, "job", "NumericsByType_Linear_stale.csv", NULL);
  g_assert_true (g_file_get_contents (file, &by_type, NULL, NULL));
  /* 1590 / 5300 in the monitors' shortest decimal form. */
  expected = g_strdup ("step,stale\n1,0.3\n");
  g_assert_cmpfloat (g_ascii_strtod (expected + strlen ("step,stale\n1,"), NULL), ==, 1590.0 / 5300.0);
  g_assert_cmpstr (by_type, ==, expected);
  g_free (file);
  file = g_build_filename (csv, "job", "Train_Steps_grad_norm.csv", NULL);
  g_assert_true (g_file_test (file, G_FILE_TEST_EXISTS));
}

/* Off by default; every N measures steps N, 2N, ... */
static void
test_every (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) off = mixprec_config_new_from_data ("{}", -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autofree gchar *json = NULL;
  g_autoptr(MixprecNumerics) n = NULL;

  g_assert_no_error (error);
  engine = mixprec_engine_new (off, &error);
  g_assert_no_error (error);
  g_assert_null (mixprec_engine_get_numerics (engine));
  g_clear_object (&engine);

  json = g_strdup_printf ("{\"gradient_accumulation_steps\": 1, \"mixprec\": {\"numerics\": {\"every\": 2}}}");
  config = mixprec_config_new_from_data (json, -1, &error);
  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  {
    guint64 shape[1] = { 10 };
    gfloat init[10] = { 0 };
    g_autoptr(GBytes) bytes = g_bytes_new (init, sizeof init);

    g_assert_nonnull (mixprec_engine_register_param (engine, "w", shape, 1, NULL, MIXPREC_DTYPE_FLOAT32,
                                                     bytes, &error));
  }
  for (guint step = 1; step <= 3; step++)
    {
      MixprecParam *w = mixprec_engine_get_param (engine, "w");
      gfloat g[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
      g_autoptr(GBytes) bytes = g_bytes_new (g, sizeof g);
      g_autoptr(MixprecStepResult) r = NULL;

      g_assert_true (mixprec_param_set_grad (w, MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_true (mixprec_engine_backward_done (engine, &error));
      r = mixprec_engine_step (engine, &error);
      g_assert_no_error (error);
      g_clear_object (&n);
      n = mixprec_engine_get_numerics (engine);
      if (step == 1)
        g_assert_null (n);
      else if (step == 3)
        g_assert_cmpuint (mixprec_numerics_get_step (n), ==, 2);
      else
        {
          gdouble v;

          g_assert_nonnull (n);
          g_assert_cmpuint (mixprec_numerics_get_step (n), ==, 2);
          /* FP32 parameters: no working copy of their own, no type row. */
          g_assert_false (mixprec_numerics_get_stat (n, "w", "stale", NULL));
          g_assert_true (mixprec_numerics_get_stat (n, "w", "grad_amax", &v));
          g_assert_cmpfloat (v, ==, 10.0);
          g_assert_true (mixprec_numerics_get_stat (n, "w", "update_ratio", &v));
          g_assert_cmpfloat (v, >, 0.0);
          g_assert_true (isfinite (v));
          {
            /* Parameters of no module type are in no type's row. */
            g_auto(GStrv) types = mixprec_numerics_list_module_types (n);

            g_assert_cmpuint (g_strv_length (types), ==, 0);
          }
        }
    }
}

/* MIXPREC_NUMERICS_IN_PASS takes 0 or 1; anything else is ignored with a
 * warning naming it, and the step is measured as by default. */
static void
test_in_pass_variable (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config =
    mixprec_config_new_from_data ("{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"numerics\": {\"every\": 1}}}",
                                  -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(MixprecStepResult) r = NULL;
  g_autoptr(MixprecNumerics) n = NULL;
  guint64 shape[1] = { 10 };
  gfloat init[10] = { 0 }, g[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 };
  g_autoptr(GBytes) bytes = g_bytes_new (init, sizeof init);
  g_autoptr(GBytes) grad = g_bytes_new (g, sizeof g);
  MixprecParam *w;
  gdouble v;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  w = mixprec_engine_register_param (engine, "w", shape, 1, NULL, MIXPREC_DTYPE_FLOAT32, bytes, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_param_set_grad (w, MIXPREC_DTYPE_FLOAT32, grad, &error));
  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_setenv ("MIXPREC_NUMERICS_IN_PASS", "yes", TRUE);
  g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING, "MIXPREC_NUMERICS_IN_PASS=\"yes\" is neither 0 nor 1; ignored");
  r = mixprec_engine_step (engine, &error);
  g_test_assert_expected_messages ();
  g_unsetenv ("MIXPREC_NUMERICS_IN_PASS");
  g_assert_no_error (error);
  n = mixprec_engine_get_numerics (engine);
  g_assert_nonnull (n);
  g_assert_true (mixprec_numerics_get_stat (n, "w", "grad_amax", &v));
  g_assert_cmpfloat (v, ==, 10.0);
}

static void
test_config_errors (void)
{
  static const struct {
    const gchar *json;
    const gchar *message;
  } cases[] = {
    { "{\"mixprec\": {\"numerics\": {\"every\": -1}}}",
      "mixprec.numerics.every: must be a non-negative integer (steps between measurements; 0: off), got -1" },
    { "{\"mixprec\": {\"numerics\": {\"every\": 1.5}}}",
      "mixprec.numerics.every: must be a non-negative integer (steps between measurements; 0: off), got 1.5" },
    { "{\"mixprec\": {\"numerics\": 100}}",
      "mixprec.numerics: must be a JSON object such as {\"every\": 100}, got 100" },
    { "{\"mixprec\": {\"numerics\": {\"evry\": 1}}}",
      "mixprec.numerics.evry: unknown key in mixprec.numerics (did you mean every?)" },
    { "{\"mixprec\": {\"numerics\": {\"every\": 1, \"shadow\": \"w\"}}}",
      "mixprec.numerics.shadow: must be an array of parameter names or glob patterns such as [\"*.attn.weight\"], got \"w\"" },
    { "{\"mixprec\": {\"numerics\": {\"every\": 1, \"shadow_fraction\": 1.5}}}",
      "mixprec.numerics.shadow_fraction: must be a number from 0 to 1, got 1.5" },
    { "{\"mixprec\": {\"numerics\": {\"shadow\": [\"*\"]}}}",
      "mixprec.numerics.shadow: an FP32 shadow needs mixprec.numerics.every above 0" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (cases[i].json, -1, &error);

      g_assert_null (config);
      g_assert_error (error, MIXPREC_CONFIG_ERROR, error->code);
      if (strstr (error->message, cases[i].message) == NULL)
        g_error ("%s: got \"%s\", expected it to hold \"%s\"", cases[i].json, error->message,
                 cases[i].message);
    }
}

/* The resolved config shows the setting, 0 by default. */
static void
test_config_printed (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data ("{\"mixprec\": {\"numerics\": {\"every\": 7}}}",
                                                                  -1, &error);
  g_autoptr(MixprecConfig) plain = mixprec_config_new_from_data ("{}", -1, &error);
  g_autofree gchar *text = NULL, *plain_text = NULL;

  g_assert_no_error (error);
  text = mixprec_config_to_data (config, NULL);
  plain_text = mixprec_config_to_data (plain, NULL);
  g_assert_nonnull (strstr (text, "\"numerics\""));
  g_assert_nonnull (strstr (text, "\"every\": 7"));
  g_assert_nonnull (strstr (plain_text, "\"every\": 0"));
}

/* The AVX2 kernels give the scalar references' bits, on every kind of
 * value (zeros, subnormals, the bounds and their neighbours, infinities,
 * NaNs) and lengths that leave tails. */
static void
test_kernels (void)
{
  static const MixprecDType dtypes[] = { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16 };
  const gsize n = 4096 + 5;
  g_autofree gfloat *f = g_new (gfloat, n), *old = g_new (gfloat, n), *now = g_new (gfloat, n);
  g_autofree guint8 *raw = g_malloc (n * 4);
  g_autoptr(GRand) rand = g_rand_new_with_seed (28);

  if (_mixprec_cpu_simd_level () < _MIXPREC_SIMD_AVX2)
    {
      g_test_skip ("this CPU runs the scalar kernels only");
      return;
    }
  for (gsize i = 0; i < n; i++)
    {
      static const gfloat special[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-24f, 0x1p-14f,
                                        0x1.ffcp-15f, 65504.0f, 65520.0f, 65519.0f, 0x1p-130f, 0x1p-126f };
      guint r = g_rand_int_range (rand, 0, 4);

      f[i] = r == 0 ? special[g_rand_int_range (rand, 0, G_N_ELEMENTS (special))]
                    : (gfloat) ldexp (g_rand_double_range (rand, -1, 1), g_rand_int_range (rand, -30, 20));
      old[i] = (gfloat) ldexp (g_rand_double_range (rand, -1, 1), g_rand_int_range (rand, -20, 12));
      now[i] = r == 1 ? old[i] : old[i] + (gfloat) ldexp (g_rand_double_range (rand, -1, 1),
                                                           g_rand_int_range (rand, -40, 0));
    }
  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    for (gsize len = 0; len <= n; len += len < 40 ? 1 : 1021)
      {
        _MixprecGradCounts a, b;
        _MixprecUpdateSums u, v;
        guint32 under = 0x387fc000u, over = 0x477ff000u;   /* fp16's bounds */

        g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, f, dtypes[d], raw, n,
                                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
        /* Padding compares equal. */
        memset (&a, 0, sizeof a);
        memset (&b, 0, sizeof b);
        memset (&u, 0, sizeof u);
        memset (&v, 0, sizeof v);
        _mixprec_numerics_grad (raw, dtypes[d], len, under, over, &a);
        _mixprec_numerics_grad_avx2 (raw, dtypes[d], len, under, over, &b);
        g_assert_cmpmem (&a, sizeof a, &b, sizeof b);
        {
          _MixprecGradCounts z = a, y;

          z.sumsq = 0.0;
          memset (&y, 0, sizeof y);
          _mixprec_numerics_counts (raw, dtypes[d], len, under, over, &y);
          g_assert_cmpmem (&z, sizeof z, &y, sizeof y);
          memset (&y, 0, sizeof y);
          _mixprec_numerics_counts_best (raw, dtypes[d], len, under, over, &y);
          g_assert_cmpmem (&z, sizeof z, &y, sizeof y);
        }
        _mixprec_numerics_update (old, now, raw, dtypes[d], len, 11, -14, &u);
        _mixprec_numerics_update_avx2 (old, now, raw, dtypes[d], len, 11, -14, &v);
        g_assert_cmpmem (&u, sizeof u, &v, sizeof v);
        _mixprec_numerics_update (old, now, NULL, dtypes[d], len, 8, -126, &u);
        _mixprec_numerics_update_avx2 (old, now, NULL, dtypes[d], len, 8, -126, &v);
        g_assert_cmpmem (&u, sizeof u, &v, sizeof v);
#ifdef MIXPREC_HAVE_X86_AVX512
        if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX512)
          {
            memset (&b, 0, sizeof b);
            memset (&v, 0, sizeof v);
            _mixprec_numerics_grad_avx512 (raw, dtypes[d], len, under, over, &b);
            g_assert_cmpmem (&a, sizeof a, &b, sizeof b);
            /* The counts alone: the gradient kernel's, with no sum. */
            a.sumsq = 0.0;
            memset (&b, 0, sizeof b);
            _mixprec_numerics_counts_avx512 (raw, dtypes[d], len, under, over, &b);
            g_assert_cmpmem (&a, sizeof a, &b, sizeof b);
            _mixprec_numerics_update (old, now, raw, dtypes[d], len, 11, -14, &u);
            _mixprec_numerics_update_avx512 (old, now, raw, dtypes[d], len, 11, -14, &v);
            g_assert_cmpmem (&u, sizeof u, &v, sizeof v);
            _mixprec_numerics_update (old, now, NULL, dtypes[d], len, 8, -126, &u);
            _mixprec_numerics_update_avx512 (old, now, NULL, dtypes[d], len, 8, -126, &v);
            g_assert_cmpmem (&u, sizeof u, &v, sizeof v);
          }
#endif
      }
}

/* The one shard's SHA-256 that the one-process manifest @manifest
 * records (a pointer into it, 64 hex digits). */
static const gchar *
saved_sum (const gchar *manifest)
{
  static gchar sum[65];
  const gchar *at = strstr (manifest, "\"sha256\"");

  g_assert_nonnull (at);
  at = strchr (at + strlen ("\"sha256\""), '"');
  g_assert_nonnull (at);
  memcpy (sum, at + 1, 64);
  sum[64] = '\0';
  return sum;
}

/* The lines of @text from step @step's on. */
static const gchar *
from_step (const gchar *text, guint step)
{
  g_autofree gchar *head = g_strdup_printf ("step %u applied", step);
  const gchar *at = strstr (text, head);

  g_assert_nonnull (at);
  return at;
}

/* The FP32 shadow in checkpoints: saved after step 1 and loaded, steps 2
 * and 3 give every statistic (the shadow's drift included) bit for bit as
 * the run that went on, at 1 and 3 ranks; loaded into another selection
 * of shadowed parameters, or at another world size, the shadow starts
 * afresh at step 3: its drift is then that of one step, the same at
 * either (and not the continuing run's), and nothing else changes. */
static void
test_shadow_resume (void)
{
  static const struct {
    guint world, stage;
  } runs[] = { { 1, 0 }, { 3, 2 } };
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-numerics-XXXXXX", NULL);
  g_autofree gchar *fresh_text = NULL;

  for (guint r = 0; r < G_N_ELEMENTS (runs); r++)
    {
      g_autofree gchar *ckpt = g_build_filename (dir, r == 0 ? "ckpt1" : "ckpt3", NULL);
      g_autofree gchar *save_var = g_strdup_printf ("MIXPREC_TEST_SAVE=%s", ckpt);
      g_autofree gchar *load_var = g_strdup_printf ("MIXPREC_TEST_LOAD=%s", ckpt);
      const gchar *go_on[] = { "MIXPREC_TEST_STEPS=3", save_var, NULL };
      const gchar *resume[] = { "MIXPREC_TEST_STEPS=3", load_var, NULL };
      const gchar *other[] = { "MIXPREC_TEST_STEPS=3", load_var, "MIXPREC_TEST_SHADOW=[\"a.*\"]", NULL };
      g_autofree gchar *full = run_world_with (runs[r].world, runs[r].stage, dir, NULL, go_on);
      g_autofree gchar *resumed = run_world_with (runs[r].world, runs[r].stage, dir, NULL, resume);
      g_autofree gchar *fresh = run_world_with (runs[r].world, runs[r].stage, dir, NULL, other);
      g_autoptr(GHashTable) t_full = parse (from_step (full, 3));
      g_autoptr(GHashTable) t_fresh = parse (fresh);

      g_test_message ("%u ranks: resumed after step 1", runs[r].world);
      g_assert_cmpstr (resumed, ==, from_step (full, 2));
      g_assert_cmpfloat (value (t_full, "param a.weight shadow_rel_l2@3"), >, 0.0);
      g_assert_cmpfloat (value (t_fresh, "param a.weight shadow_rel_l2@3"), >, 0.0);
      g_assert_cmpfloat (value (t_fresh, "param a.weight shadow_rel_l2@3"), !=,
                         value (t_full, "param a.weight shadow_rel_l2@3"));
      g_assert_false (g_hash_table_contains (t_fresh, "param n.weight shadow_rel_l2@3"));
      g_assert_cmpfloat (value (t_fresh, "param a.weight grad_norm@3"), ==, value (t_full, "param a.weight grad_norm@3"));
      g_assert_cmpfloat (value (t_fresh, "param a.weight stale@3"), ==, value (t_full, "param a.weight stale@3"));
      if (r == 0)
        fresh_text = g_strdup (fresh);
    }
  /* The one-process checkpoint at 3 ranks: a fresh shadow, as the other
   * selection's at one process. */
  {
    g_autofree gchar *ckpt = g_build_filename (dir, "ckpt1", NULL);
    g_autofree gchar *load_var = g_strdup_printf ("MIXPREC_TEST_LOAD=%s", ckpt);
    const gchar *across[] = { "MIXPREC_TEST_STEPS=3", load_var, NULL };
    g_autofree gchar *moved = run_world_with (3, 2, dir, NULL, across);
    g_autoptr(GHashTable) t_moved = parse (moved);
    g_autoptr(GHashTable) t_fresh = parse (fresh_text);

    g_assert_cmpfloat (value (t_moved, "param a.weight shadow_rel_l2@3"), ==,
                       value (t_fresh, "param a.weight shadow_rel_l2@3"));
    g_assert_cmpfloat (value (t_moved, "param a.weight shadow_max_ulp@3"), ==,
                       value (t_fresh, "param a.weight shadow_max_ulp@3"));
  }
  /* A shard whose shadow is not what its layout says: the load fails,
   * naming the file and the tensor. */
  {
    g_autofree gchar *ckpt = g_build_filename (dir, "ckpt1", NULL);
    g_autofree gchar *shard = g_build_filename (ckpt, "step-1", "rank-00000.safetensors", NULL);
    g_autoptr(GError) error = NULL;
    g_autoptr(MixprecEngine) engine = NULL;
    gchar *bytes = NULL, *at;
    gsize len;

    g_assert_true (g_file_get_contents (shard, &bytes, &len, NULL));
    /* After the 8-byte header length (which holds zero bytes). */
    g_assert_cmpuint (len, >, 8);
    at = strstr (bytes + 8, "\"numerics/shadow_state/1\":{\"dtype\":\"F32\"");
    g_assert_nonnull (at);
    /* The same header length: the file stays a valid safetensors file. */
    memcpy (strstr (at, "F32"), "I32", 3);
    g_assert_true (g_file_set_contents (shard, bytes, (gssize) len, NULL));
    /* ...and the manifest records the new file, as a save that wrote it
     * so would have. */
    {
      g_autofree gchar *manifest_path = g_build_filename (ckpt, "step-1", "manifest.json", NULL);
      g_autofree gchar *manifest = NULL;
      g_autoptr(GString) fixed = NULL;
      gchar *now_sum = g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) bytes, len);

      g_assert_true (g_file_get_contents (manifest_path, &manifest, NULL, NULL));
      fixed = g_string_new (manifest);
      g_assert_cmpuint (g_string_replace (fixed, saved_sum (manifest), now_sum, 0), ==, 1);
      g_assert_true (g_file_set_contents (manifest_path, fixed->str, (gssize) fixed->len, NULL));
      g_free (now_sum);
    }
    g_free (bytes);
    engine = build_engine (0, N_MICRO, NULL, FALSE, FALSE, NULL);
    g_assert_false (mixprec_engine_load_checkpoint (engine, ckpt, &error));
    g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT);
    g_assert_nonnull (strstr (error->message, "rank-00000.safetensors"));
    g_assert_nonnull (strstr (error->message, "'numerics/shadow_state/1'"));
    g_test_message ("%s", error->message);
  }
}

int
main (int argc, char **argv)
{
  if (g_getenv ("MIXPREC_TEST_NUMERICS_CHILD") != NULL)
    return child_main ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/numerics/config/errors", test_config_errors);
  g_test_add_func ("/numerics/config/printed", test_config_printed);
  g_test_add_func ("/numerics/every", test_every);
  g_test_add_func ("/numerics/in-pass-variable", test_in_pass_variable);
  g_test_add_func ("/numerics/kernels", test_kernels);
  g_test_add_func ("/numerics/world-sizes", test_world_sizes);
  g_test_add_func ("/numerics/shadow/resume", test_shadow_resume);
  return g_test_run ();
}
