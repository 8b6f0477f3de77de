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
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

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

static gfloat
grad_value (guint step, guint m, guint p, guint64 i)
{
  return (gfloat) (sin (0.37 * m + 0.011 * (gdouble) i + 1.3 * step + p) *
                   exp2 ((gdouble) ((i * 7 + m) % 9) - 4.0));
}

static gboolean
train (MixprecEngine *engine, const Scenario *s, guint rank, guint world, guint gas, GError **error)
{
  for (guint k = 0; k < s->steps; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint local = 0; local < gas; local++)
        {
          guint m = local * world + rank;

          for (guint p = 0; p < G_N_ELEMENTS (model); p++)
            {
              MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
              guint64 numel = mixprec_param_get_numel (param);
              gfloat *g = g_new (gfloat, numel);
              g_autoptr(GBytes) bytes = NULL;

              for (guint64 i = 0; i < numel; i++)
                g[i] = grad_value (k, m, p, i);
              bytes = g_bytes_new_take (g, numel * sizeof (gfloat));
              if (!mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, error))
                return FALSE;
            }
          if (!mixprec_engine_backward_done (engine, error))
            return FALSE;
        }
      r = mixprec_engine_step (engine, error);
      if (r == NULL)
        return FALSE;
    }
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
          g_autoptr(GVariant) state = g_variant_ref_sink (mixprec_fp8_scaling_save_state (scaling));
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

static gboolean
parse_scenario (const gchar *text, Scenario *s)
{
  g_auto(GStrv) f = g_strsplit (text, ":", -1);

  if (g_strv_length (f) != 4)
    return FALSE;
  s->recipe = g_intern_string (f[0]);
  s->stage = atoi (f[1]);
  s->world = atoi (f[2]);
  s->steps = atoi (f[3]);
  return TRUE;
}

static int
child_main (void)
{
  Scenario s;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GByteArray) snap = NULL;
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  g_autofree gchar *bytes_file = NULL;
  g_autofree gchar *bytes_text = NULL;
  guint64 gathered = 0;
  guint rank;

  if (!parse_scenario (g_getenv ("MIXPREC_TEST_SCENARIO"), &s))
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
  bytes_text = g_strdup_printf ("%" G_GUINT64_FORMAT, gathered);
  bytes_file = g_strdup_printf ("%s.gathered%u", out, rank);
  if (!g_file_set_contents (bytes_file, bytes_text, -1, &error))
    return 1;
  if (rank == 0 && !g_file_set_contents (out, (const gchar *) snap->data, snap->len, &error))
    return 1;
  return 0;
}

static guint64
padded_numel (guint64 numel, guint world)
{
  guint64 align = (guint64) world * 4096;   /* the sum-of-squares block is 4096 */

  return (numel + align - 1) / align * align;
}

static void
test_scenario (gconstpointer data)
{
  const Scenario *s = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) ref = NULL;
  g_autoptr(GByteArray) expected = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-fp8-zero-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "snapshot", NULL);
  g_autofree gchar *scenario = g_strdup_printf ("MIXPREC_TEST_SCENARIO=%s:%u:%u:%u", s->recipe,
                                                s->stage, s->world, s->steps);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  const gchar *env[] = { "MIXPREC_TEST_FP8_ZERO_CHILD=1", scenario, out_var, NULL };
  g_autofree gchar *got = NULL;
  gsize got_len = 0;
  guint64 ref_gathered = 0;
  gint status[4];

  /* The reference: one process, every micro-batch in order. */
  ref = build_engine (s, s->world);
  g_assert_true (train (ref, s, 0, 1, s->world, &error));
  g_assert_no_error (error);
  expected = snapshot (ref, &ref_gathered, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (ref_gathered, ==, 0);

  mp_run_ranks (s->world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < s->world; r++)
    g_assert_cmpint (status[r], ==, 0);
  g_assert_true (g_file_get_contents (out, &got, &got_len, &error));
  g_assert_cmpuint (got_len, ==, expected->len);
  g_assert_true (memcmp (got, expected->data, got_len) == 0);

  for (guint r = 0; r < s->world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.gathered%u", out, r);
      g_autofree gchar *text = NULL;
      guint64 padded = padded_numel (model[3].rows * model[3].cols, s->world), want = 0;

      g_assert_true (g_file_get_contents (file, &text, NULL, &error));
      /* ZeRO-3 gathers w3 alone (the rest is persistent): its FP8 bytes
       * (and MX scales) from the other ranks; bf16 would be twice the
       * elements' share. */
      if (s->stage == 3)
        want = padded / s->world * (s->world - 1) +
               (g_str_equal (s->recipe, "mx") ? padded / 32 / s->world * (s->world - 1) : 0);
      g_assert_cmpuint (g_ascii_strtoull (text, NULL, 10), ==, want);
      g_remove (file);
    }
  g_remove (out);
  g_rmdir (dir);
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

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (scenarios); i++)
    {
      const Scenario *s = &scenarios[i];
      g_autofree gchar *path = g_strdup_printf ("/fp8-zero/%s/stage%u/world%u", s->recipe, s->stage,
                                                s->world);

      g_test_add_data_func (path, s, test_scenario);
    }
  return g_test_run ();
}
