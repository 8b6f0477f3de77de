/* test-hpz-engine.c — ZeRO++ hpZ (zero_optimization.
 * zero_hpz_partition_size) in the engine: 4 ranks on 127.0.0.1 through
 * comm-ucx, bf16 working copies at ZeRO-3, groups of 2.
 *
 * Each rank gathers every parameter for a forward pass, releases them,
 * gathers them again for the backward pass, steps, and does both again.
 * What must hold, against the same run without hpZ (qwZ on and off):
 * every gathered bit and every master after the step are the same (the
 * backward gathers come from the parts the forward gather left, which are
 * its bits; after the step the forward gathers the new weights over the
 * world again); the forward gathers move what they move without hpZ, and
 * the backward gathers move (k - 1) / k of each unit in bf16 inside the
 * group (with the unquantized run's forward bytes, (W - 1) / W of the
 * units, that is 2/3 of them at W = 4, k = 2), all of it to ranks of the
 * group, as mixprec_comm_bytes_plan_new() plans them; the secondary
 * partition takes what the layout planned, half the units in bf16. Sizes that do not divide the world are refused on every
 * rank, naming the setting. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

#define TIMEOUT_MS 60000
#define WORLD 4

/* A unit of several small parameters and a larger one. */
static const guint64 sizes[] = { 20000, 700, 3000, 70001 };
#define N_PARAMS G_N_ELEMENTS (sizes)

/* What a rank writes: six counters, then each gather's bits and the
 * masters after the first step. */
enum
{
  FORWARD_BYTES,                /* gathered bytes of the first forward pass */
  BACKWARD_BYTES,               /* ... of the backward pass after it */
  HPZ_BYTES,                    /* the secondary partition's buffer */
  HPZ_PLANNED,                  /* ... as the layout planned it */
  WEIGHT_BYTES_INTRA,           /* mixprec_engine_get_comm_bytes (): the first
                                   step's all-gathers */
  WEIGHT_BYTES_INTER,
  PLANNED_ALL_GATHER,           /* mixprec_comm_bytes_plan_new (): the same */
  N_COUNTERS
};

static guint64
total (void)
{
  guint64 n = 0;

  for (guint k = 0; k < N_PARAMS; k++)
    n += sizes[k];
  return n;
}

static gfloat
init_value (guint k, guint64 i)
{
  return (gfloat) (sin (0.37 * (gdouble) i + 1.3 * k) * ldexp (1.0, (gint) ((i * 7 + k) % 11) - 5));
}

static gchar *
param_name (guint k)
{
  return g_strdup_printf ("p%u", k);
}

static gboolean
append_gathered (MixprecEngine *engine, GString *out, GError **error)
{
  if (!mixprec_engine_gather_all (engine, error))
    return FALSE;
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);

      g_string_append_len (out, mixprec_param_get_working_data (mixprec_engine_get_param (engine, name)),
                           (gssize) (sizes[k] * 2));
    }
  mixprec_engine_release_all (engine);
  return TRUE;
}

static gboolean
train_step (MixprecEngine *engine, guint step, GError **error)
{
  g_autoptr(MixprecStepResult) result = NULL;

  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      g_autofree gfloat *g = g_new (gfloat, sizes[k]);
      g_autoptr(GBytes) grad = NULL;

      for (guint64 i = 0; i < sizes[k]; i++)
        g[i] = (gfloat) cos (0.001 * (gdouble) i + k + step);
      grad = g_bytes_new_take (g_steal_pointer (&g), sizes[k] * sizeof (gfloat));
      if (!mixprec_param_set_grad (mixprec_engine_get_param (engine, name), MIXPREC_DTYPE_FLOAT32,
                                   grad, error))
        return FALSE;
    }
  return mixprec_engine_backward_done (engine, error) &&
         (result = mixprec_engine_step (engine, error)) != NULL;
}

static int
child_main (void)
{
  g_autofree gchar *json =
    g_strdup_printf ("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                     "\"stage3_param_persistence_threshold\": 0, \"zero_quantized_weights\": %s, "
                     "\"zero_hpz_partition_size\": %s}, "
                     "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}",
                     g_getenv ("MIXPREC_TEST_QWZ"), g_getenv ("MIXPREC_TEST_HPZ"));
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  g_autoptr(GPtrArray) buffers = NULL;
  g_autoptr(MixprecCommBytes) bytes = NULL;
  g_autofree gchar *file = NULL;
  guint64 counters[N_COUNTERS] = { 0 };

  if (config == NULL || (engine = mixprec_engine_new (config, &error)) == NULL)
    goto fail;
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      g_autofree gfloat *v = g_new (gfloat, sizes[k]);
      g_autoptr(GBytes) init = NULL;

      for (guint64 i = 0; i < sizes[k]; i++)
        v[i] = init_value (k, i);
      init = g_bytes_new_take (g_steal_pointer (&v), sizes[k] * sizeof (gfloat));
      if (mixprec_engine_register_param (engine, name, &sizes[k], 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                         init, &error) == NULL)
        goto fail;
    }
  g_string_append_len (out, (const gchar *) counters, sizeof counters);
  if (!append_gathered (engine, out, &error))         /* forward */
    goto fail;
  counters[FORWARD_BYTES] = mixprec_engine_get_gathered_bytes (engine);
  if (!append_gathered (engine, out, &error))         /* backward */
    goto fail;
  counters[BACKWARD_BYTES] = mixprec_engine_get_gathered_bytes (engine) - counters[FORWARD_BYTES];
  if (!train_step (engine, 0, &error))
    goto fail;
  /* the step's bytes: those two gathers' */
  bytes = mixprec_engine_get_comm_bytes (engine);
  counters[WEIGHT_BYTES_INTRA] = bytes->all_gather - bytes->inter_host_all_gather;
  counters[WEIGHT_BYTES_INTER] = bytes->inter_host_all_gather;
  {
    g_autoptr(MixprecCommBytes) plan = mixprec_comm_bytes_plan_new (config, sizes, N_PARAMS,
                                                                    mixprec_engine_get_world_size (engine),
                                                                    0, &error);

    if (plan == NULL)
      goto fail;
    counters[PLANNED_ALL_GATHER] = plan->all_gather;
  }
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, name, &error);

      if (master == NULL)
        goto fail;
      g_string_append_len (out, g_bytes_get_data (master, NULL), (gssize) g_bytes_get_size (master));
    }
  /* The new weights, forward and backward, and a second step. */
  if (!append_gathered (engine, out, &error) || !append_gathered (engine, out, &error) ||
      !train_step (engine, 1, &error) || !append_gathered (engine, out, &error))
    goto fail;
  buffers = mixprec_engine_list_buffers (engine);
  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

      if (g_str_equal (b->name, "hpZ secondary working copies"))
        {
          counters[HPZ_BYTES] = b->bytes;
          counters[HPZ_PLANNED] = b->planned_bytes;
        }
    }
  memcpy (out->str, counters, sizeof counters);
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), mixprec_engine_get_rank (engine));
  return g_file_set_contents (file, out->str, (gssize) out->len, NULL) ? 0 : 1;

fail:
  if (error != NULL && g_getenv ("MIXPREC_TEST_EXPECT_ERROR") != NULL)
    {
      file = g_strdup_printf ("%s.%s", g_getenv ("MIXPREC_TEST_OUT"), g_getenv ("MIXPREC_RANK"));
      return g_file_set_contents (file, error->message, -1, NULL) ? 0 : 1;
    }
  g_printerr ("hpz child: %s\n", error != NULL ? error->message : "?");
  return 1;
}

typedef struct {
  gchar *data[WORLD];
  gsize len[WORLD];
} Run;

static void
run_clear (Run *r)
{
  for (guint i = 0; i < WORLD; i++)
    g_free (r->data[i]);
}

static void
run_world (guint world, gboolean qwz, guint hpz, gboolean expect_error, Run *run)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-hpz-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "out", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *hpz_var = g_strdup_printf ("MIXPREC_TEST_HPZ=%u", hpz);
  const gchar *env[] = { "MIXPREC_TEST_HPZ_CHILD=1", qwz ? "MIXPREC_TEST_QWZ=true" : "MIXPREC_TEST_QWZ=false",
                         "UCX_NET_DEVICES=lo", out_var, hpz_var,
                         expect_error ? "MIXPREC_TEST_EXPECT_ERROR=1" : NULL, NULL };
  gint status[WORLD];

  g_assert_no_error (error);
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);

      g_assert_cmpint (status[r], ==, 0);
      g_assert_true (g_file_get_contents (file, &run->data[r], &run->len[r], &error));
      g_assert_no_error (error);
      if (!expect_error)
        g_assert_cmpuint (run->len[r], ==, N_COUNTERS * 8 + total () * (5 * 2 + 4));
      g_remove (file);
    }
  g_rmdir (dir);
}

static guint64
counter (const Run *run, guint r, guint which)
{
  guint64 v;

  memcpy (&v, run->data[r] + which * 8, 8);
  return v;
}

static void
test_hpz (gconstpointer data)
{
  gboolean qwz = GPOINTER_TO_UINT (data);
  Run off = { 0 }, on = { 0 }, plain = { 0 };
  guint64 fwd_plain;

  run_world (WORLD, qwz, 1, FALSE, &off);
  run_world (WORLD, qwz, 2, FALSE, &on);
  if (qwz)
    run_world (WORLD, FALSE, 1, FALSE, &plain);
  fwd_plain = counter (qwz ? &plain : &off, 0, FORWARD_BYTES);
  for (guint r = 0; r < WORLD; r++)
    {
      guint64 fwd = counter (&on, r, FORWARD_BYTES), bwd = counter (&on, r, BACKWARD_BYTES);

      /* The same bits as without hpZ: gathers, masters, later gathers. */
      g_assert_cmpmem (on.data[r] + N_COUNTERS * 8, on.len[r] - N_COUNTERS * 8,
                       off.data[r] + N_COUNTERS * 8, off.len[r] - N_COUNTERS * 8);
      g_assert_cmpmem (on.data[r] + N_COUNTERS * 8, on.len[r] - N_COUNTERS * 8,
                       on.data[0] + N_COUNTERS * 8, on.len[0] - N_COUNTERS * 8);
      /* The forward gathers as without hpZ; the backward ones move
       * (k - 1) / k of the units in bf16, that is 2/3 of what the
       * unquantized forward's (W - 1) / W moved. */
      g_assert_cmpuint (fwd, ==, counter (&off, r, FORWARD_BYTES));
      g_assert_cmpuint (counter (&off, r, BACKWARD_BYTES), ==, counter (&off, r, FORWARD_BYTES));
      g_assert_cmpuint (fwd_plain % 3, ==, 0);
      g_assert_cmpuint (bwd, ==, fwd_plain / 3 * 2);
      /* The communicator counted the same all-gather bytes, on this host. */
      g_assert_cmpuint (counter (&on, r, WEIGHT_BYTES_INTRA), ==, fwd + bwd);
      g_assert_cmpuint (counter (&on, r, WEIGHT_BYTES_INTER), ==, 0);
      /* ... as mixprec-inspect --plan plans them */
      g_assert_cmpuint (counter (&on, r, PLANNED_ALL_GATHER), ==, fwd + bwd);
      g_assert_cmpuint (counter (&off, r, PLANNED_ALL_GATHER), ==,
                        counter (&off, r, WEIGHT_BYTES_INTRA));
      /* The secondary partition: half of every unit in bf16 (= the
       * backward bytes at k = 2), as planned; none without hpZ. */
      g_assert_cmpuint (counter (&on, r, HPZ_BYTES), ==, bwd);
      g_assert_cmpuint (counter (&on, r, HPZ_PLANNED), ==, bwd);
      g_assert_cmpuint (counter (&off, r, HPZ_BYTES), ==, 0);
    }
  g_test_message ("%s, 4 ranks, groups of 2: forward %" G_GUINT64_FORMAT " bytes, backward %"
                  G_GUINT64_FORMAT " inside the group (%" G_GUINT64_FORMAT " without hpZ)",
                  qwz ? "qwZ" : "bf16", counter (&on, 0, FORWARD_BYTES), counter (&on, 0, BACKWARD_BYTES),
                  counter (&off, 0, BACKWARD_BYTES));
  run_clear (&off);
  run_clear (&on);
  run_clear (&plain);
}

/* Groups that do not divide the world are refused on every rank. */
static void
test_refused (void)
{
  Run refused = { 0 };

  run_world (3, TRUE, 2, TRUE, &refused);
  for (guint r = 0; r < 3; r++)
    {
      if (!g_str_has_prefix (refused.data[r], "zero_optimization.zero_hpz_partition_size: 2: "))
        g_error ("rank %u: %s", r, refused.data[r]);
      g_assert_nonnull (strstr (refused.data[r], "must divide the world of 3 ranks"));
    }
  run_clear (&refused);
}

int
main (int argc, char **argv)
{
  if (g_getenv ("MIXPREC_TEST_HPZ_CHILD") != NULL)
    return child_main ();

  g_test_init (&argc, &argv, NULL);
  g_setenv ("MIXPREC_JOB_SECRET", MP_JOB_SECRET, TRUE);
  g_setenv ("UCX_LOG_LEVEL", "error", FALSE);
  g_test_add_data_func ("/hpz/bf16", GUINT_TO_POINTER (FALSE), test_hpz);
  g_test_add_data_func ("/hpz/qwz", GUINT_TO_POINTER (TRUE), test_hpz);
  g_test_add_func ("/hpz/refused", test_refused);
  return g_test_run ();
}
