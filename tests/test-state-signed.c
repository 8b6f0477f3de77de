/* test-state-signed.c — the sign of an optimizer state slot, which picks
 * the signed or unsigned quantization map of its int8 / int4 codes, is the
 * plugin's own (state_signed_mask), not a rule of names.
 *
 * tests/optim-plugins/test-optim-renamed.c is the cpu adamw with its
 * slots named "m" and "v"; "v" is unsigned. One AdamW step with int8
 * states is compared with the same step with float32 states: each
 * decoded value lies within half a step of the unsigned (or, for "m",
 * signed) map times its block's absmax, as read through the engine, a
 * checkpoint and a float32 engine resumed from it. Read with the other
 * map the values of "v" would be off by most of their size. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#define N 1024
#define BLOCK 256

static MixprecEngine *
engine_new (const gchar *states)
{
  g_autofree gchar *json = g_strdup_printf ("{\"bf16\": {\"enabled\": true},"
                                            " \"optimizer\": {\"type\": \"adamw-renamed\","
                                            "  \"params\": {\"lr\": 0.001}},"
                                            " \"mixprec\": {\"optimizer_states\": {\"m\": \"%s\","
                                            "  \"v\": \"%s\", \"block_size\": %d}}}",
                                            states, states, BLOCK);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;
  guint64 shape[1] = { N };
  g_autofree gfloat *w = g_new (gfloat, N);
  g_autoptr(GBytes) init = NULL;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < N; i++)
    w[i] = 0.01f * (gfloat) ((i * 7919) % 200) - 1.0f;
  init = g_bytes_new (w, N * sizeof (gfloat));
  mixprec_engine_register_param (engine, "w", shape, 1, "Linear", MIXPREC_DTYPE_FLOAT32, init, &error);
  g_assert_no_error (error);
  return engine;
}

/* One step on gradients of both signs over five decades. */
static void
step (MixprecEngine *engine)
{
  g_autoptr(GError) error = NULL;
  g_autofree gfloat *g = g_new (gfloat, N);
  g_autoptr(GBytes) b = NULL;
  MixprecStepResult *r;

  for (guint i = 0; i < N; i++)
    g[i] = (i % 2 ? -1.0f : 1.0f) * (gfloat) (1 + (i * 37) % 100) * powf (10.0f, -(gfloat) (i % 5));
  b = g_bytes_new (g, N * sizeof (gfloat));
  g_assert_true (mixprec_param_set_grad (mixprec_engine_get_param (engine, "w"), MIXPREC_DTYPE_FLOAT32,
                                         b, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_assert_no_error (error);
  r = mixprec_engine_step (engine, &error);
  g_assert_no_error (error);
  g_assert_nonnull (r);
  mixprec_step_result_free (r);
}

static GBytes *
state (MixprecEngine *engine,
       const gchar   *slot)
{
  g_autoptr(GError) error = NULL;
  GBytes *b = mixprec_engine_get_optimizer_state (engine, "w", slot, &error);

  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (b), ==, N * sizeof (gfloat));
  return b;
}

/* @got within @half_step times each block's absmax of @exact. */
static void
assert_quantized (GBytes      *got,
                  GBytes      *exact,
                  float        half_step,
                  const gchar *what)
{
  const gfloat *a = g_bytes_get_data (got, NULL), *e = g_bytes_get_data (exact, NULL);

  for (guint b = 0; b < N / BLOCK; b++)
    {
      float absmax = 0;

      for (guint i = b * BLOCK; i < (b + 1) * BLOCK; i++)
        absmax = fmaxf (absmax, fabsf (e[i]));
      g_assert_cmpfloat (absmax, >, 0);
      for (guint i = b * BLOCK; i < (b + 1) * BLOCK; i++)
        if (!(fabsf (a[i] - e[i]) <= half_step * absmax))
          g_error ("%s: element %u is %g, the float32 step gives %g (block absmax %g)", what, i,
                   a[i], e[i], absmax);
    }
}

static void
test_renamed_slots (void)
{
  g_autoptr(MixprecEngine) low = engine_new ("int8");
  g_autoptr(MixprecEngine) exact = engine_new ("fp32");
  g_autoptr(MixprecEngine) resumed = engine_new ("fp32");
  g_autoptr(GError) error = NULL;
  g_autofree gchar *tmp = g_dir_make_tmp ("mixprec-state-signed-XXXXXX", &error);
  g_autofree gchar *dir = NULL;
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  static const gchar *const slots[2] = { "m", "v" };
  /* Half the widest step of each map's top decade, 0.1 .. 1: 64 values
   * of the signed map, 128 of the unsigned one. */
  static const float half_step[2] = { 0.9f / 64 / 2 * 1.01f, 0.9f / 128 / 2 * 1.01f };

  g_assert_no_error (error);
  step (low);
  step (exact);
  for (guint k = 0; k < 2; k++)
    {
      g_autoptr(GBytes) got = state (low, slots[k]);
      g_autoptr(GBytes) want = state (exact, slots[k]);

      assert_quantized (got, want, half_step[k], slots[k]);
    }

  /* The checkpoint keeps the codes and says which slots are signed; a
   * float32 engine resumed from it decodes them into the same values. */
  mixprec_engine_save_checkpoint_full (low, tmp, "low", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  dir = g_build_filename (tmp, "low", NULL);
  ckpt = mixprec_checkpoint_open (dir, &error);
  g_assert_no_error (error);
  mixprec_engine_load_checkpoint (resumed, dir, &error);
  g_assert_no_error (error);
  for (guint k = 0; k < 2; k++)
    {
      g_autoptr(GBytes) decoded = state (low, slots[k]);
      g_autoptr(GBytes) read = mixprec_checkpoint_read_state (ckpt, "w", slots[k], &error);
      g_autoptr(GBytes) converted = NULL;

      g_assert_no_error (error);
      g_assert_true (g_bytes_equal (read, decoded));
      converted = state (resumed, slots[k]);
      g_assert_true (g_bytes_equal (converted, decoded));
    }
  g_clear_object (&ckpt);
  {
    g_autoptr(GDir) d = NULL;
    const gchar *name;

    /* remove the checkpoint: tmp/low/<files> */
    d = g_dir_open (dir, 0, NULL);
    while (d != NULL && (name = g_dir_read_name (d)) != NULL)
      {
        g_autofree gchar *path = g_build_filename (dir, name, NULL);

        g_remove (path);
      }
    g_rmdir (dir);
    g_rmdir (tmp);
  }
}

int
main (int argc, char **argv)
{
  g_autofree gchar *plugins = NULL;

  g_test_init (&argc, &argv, NULL);
  plugins = g_test_build_filename (G_TEST_BUILT, "optim-plugins", NULL);
  g_setenv ("MIXPREC_PLUGIN_PATH", plugins, TRUE);
  g_test_add_func ("/state-signed/renamed-slots", test_renamed_slots);
  return g_test_run ();
}
