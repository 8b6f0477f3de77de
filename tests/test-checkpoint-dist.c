/* test-checkpoint-dist.c — checkpoints across ranks: resuming on 2 ranks
 * continues bit for bit, and a checkpoint saved in fp16 on 2 ranks (ZeRO-2)
 * loads into bf16 on 3 ranks (ZeRO-3) and into fp32 on one process with the
 * same master weights. The expectations are the weights themselves, read
 * through mixprec_engine_gather_master() before saving and after loading. */
#include <glib/gstdio.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "checkpoint-common.h"
#include "multiproc.h"

#define TIMEOUT_MS 5000

/* A mode's configuration with a ZeRO stage added. */
static gchar *
json_with_stage (guint mode, guint stage)
{
  return g_strdup_printf ("{\"zero_optimization\": {\"stage\": %u}, %s", stage,
                          ckpt_modes[mode].json + 1);
}

/* Every parameter's FP32 weights, assembled across ranks (collective). */
static GByteArray *
gathered_weights (MixprecEngine *engine)
{
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (engine);
  GByteArray *out = g_byte_array_new ();

  for (guint i = 0; i < params->len; i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GBytes) w = mixprec_engine_gather_master (engine,
                                                          mixprec_param_get_name (g_ptr_array_index (params, i)),
                                                          &error);
      g_assert_no_error (error);
      g_byte_array_append (out, g_bytes_get_data (w, NULL), g_bytes_get_size (w));
    }
  return out;
}

/* One communicator per process, shared by the engines a rank builds one
 * after the other (each mixprec_engine_new() would meet at the rendezvous
 * again); NULL on one process. */
static MixprecComm *comm = NULL;

static MixprecComm *
process_comm (void)
{
  g_autoptr(GError) error = NULL;

  if (comm == NULL && g_getenv ("MIXPREC_RANK") != NULL)
    {
      g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);

      g_assert_no_error (error);
      comm = mixprec_comm_new (bootstrap, "auto", "cpu", TIMEOUT_MS, &error);
      g_assert_no_error (error);
    }
  return comm;
}

/* Representations (mode numbers from 100): master * 10 + state format
 * index, bf16 with LayerNorm in FP32, blocks of 64 elements. */
static const gchar * const repr_masters[] = { "fp32", "remainder", "kahan" };
static const gchar * const repr_states[] = {
  "fp32", "bf16", "fp16_scaled", "bf16_scaled", "fp8_e4m3_scaled", "int8", "int4",
};

static gchar *
json_for (guint mode, guint stage)
{
  guint master, format;

  if (mode < 100)
    return json_with_stage (mode, stage);
  master = (mode - 100) / 10;
  format = (mode - 100) % 10;
  return g_strdup_printf (
    "{\"zero_optimization\": {\"stage\": %u}, \"bf16\": {\"enabled\": true},"
    " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"], \"master_weights\": \"%s\","
    "               \"optimizer_states\": {\"default\": \"%s\"%s}},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
    " \"scheduler\": {\"type\": \"WarmupCosineLR\","
    "                 \"params\": {\"total_num_steps\": 40, \"warmup_num_steps\": 4}},"
    " \"gradient_clipping\": 1.0}",
    stage, repr_masters[master], repr_states[format], format >= 2 ? ", \"block_size\": 64" : "");
}

static gboolean
mode_overflows (guint mode)
{
  return mode < 100 && ckpt_modes[mode].overflows;
}

static MixprecEngine *
model_engine (guint mode, guint stage, guint variant)
{
  g_autofree gchar *json = json_for (mode, stage);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = mixprec_engine_new_with_comm (config, process_comm (), NULL, &error);
  g_assert_no_error (error);
  ckpt_build_model (engine, variant, 0);
  return engine;
}

/* Rank 0 writes @bytes to MIXPREC_TEST_OUT, unless it is empty (the
 * caller wants no result). Never "/dev/null": g_file_set_contents()
 * writes a new file and renames it over the old one, which as root
 * replaces the device with a regular file. */
static void
write_out (MixprecEngine *engine, GByteArray *bytes)
{
  g_autoptr(GError) error = NULL;
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");

  if (mixprec_engine_get_rank (engine) == 0 && out != NULL && *out != '\0')
    {
      g_file_set_contents (out, (const gchar *) bytes->data, bytes->len, &error);
      g_assert_no_error (error);
    }
}

/* A rank. Actions: resume:MODE:STAGE, save:MODE:STAGE, load:MODE:STAGE. */
static int
child_action (const gchar *action)
{
  g_auto(GStrv) f = g_strsplit (action, ":", 3);
  guint mode = atoi (f[1]), stage = atoi (f[2]);
  const gchar *dir = g_getenv ("MIXPREC_TEST_DIR");
  g_autoptr(GError) error = NULL;

  if (g_str_equal (f[0], "resume"))
    {
      g_autoptr(MixprecEngine) a = model_engine (mode, stage, 0);
      g_autoptr(MixprecEngine) b = NULL;
      g_autoptr(GByteArray) wa = NULL, wb = NULL;

      ckpt_train (a, 0, 5, mode_overflows (mode));
      g_assert_true (mixprec_engine_save_checkpoint (a, dir, &error));
      g_assert_no_error (error);
      ckpt_train (a, 5, 4, mode_overflows (mode));
      wa = gathered_weights (a);

      b = model_engine (mode, stage, 1);
      g_assert_true (mixprec_engine_load_checkpoint (b, dir, &error));
      g_assert_no_error (error);
      ckpt_train (b, 5, 4, mode_overflows (mode));
      wb = gathered_weights (b);
      return wa->len == wb->len && memcmp (wa->data, wb->data, wa->len) == 0 ? 0 : 5;
    }
  else if (g_str_equal (f[0], "save"))
    {
      g_autoptr(MixprecEngine) e = model_engine (mode, stage, 0);
      g_autoptr(GByteArray) w = NULL;

      ckpt_train (e, 0, 6, mode_overflows (mode));
      g_assert_true (mixprec_engine_save_checkpoint (e, dir, &error));
      g_assert_no_error (error);
      w = gathered_weights (e);
      write_out (e, w);
      return 0;
    }
  else if (g_str_equal (f[0], "resave"))
    {
      /* Loads DIR and saves it again under DIR/again, then trains on:
       * what a resumed run holds, as its own checkpoint says. */
      g_autoptr(MixprecEngine) e = model_engine (mode, stage, 1);
      g_autofree gchar *again = g_build_filename (dir, "again", NULL);

      g_assert_true (mixprec_engine_load_checkpoint (e, dir, &error));
      g_assert_no_error (error);
      g_assert_true (mixprec_engine_save_checkpoint (e, again, &error));
      g_assert_no_error (error);
      ckpt_train (e, 6, 2, FALSE);
      return 0;
    }
  else if (g_str_equal (f[0], "load"))
    {
      g_autoptr(MixprecEngine) e = model_engine (mode, stage, 1);
      g_autoptr(GByteArray) w = NULL;

      g_assert_true (mixprec_engine_load_checkpoint (e, dir, &error));
      g_assert_no_error (error);
      w = gathered_weights (e);
      write_out (e, w);
      return 0;
    }
  return 2;
}

static void
run (guint world, const gchar *action, const gchar *dir, const gchar *out, gint *status)
{
  g_autofree gchar *a = g_strdup_printf ("MIXPREC_TEST_CKPT=%s", action);
  g_autofree gchar *d = g_strdup_printf ("MIXPREC_TEST_DIR=%s", dir);
  g_autofree gchar *o = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  const gchar *env[] = { a, d, o, NULL };

  mp_run_ranks (world, TIMEOUT_MS, env, status);
}

static void
test_resume_two_ranks (gconstpointer data)
{
  guint stage = GPOINTER_TO_UINT (data);
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *action = g_strdup_printf ("resume:1:%u", stage);   /* fp16 with overflows */
  gint status[2];

  run (2, action, dir, "", status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  ckpt_remove_tree (dir);
}

/* fp16 without masters (mode 5), with overflows, sharded by ZeRO: the
 * fp16 weights are the state that is partitioned and gathered. */
static void
test_resume_two_ranks_fp16_no_master (gconstpointer data)
{
  guint stage = GPOINTER_TO_UINT (data);
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *action = g_strdup_printf ("resume:5:%u", stage);
  gint status[2];

  run (2, action, dir, "", status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  ckpt_remove_tree (dir);
}

static void
test_across_precisions_and_world_sizes (void)
{
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *saved = g_build_filename (dir, "saved.bin", NULL);
  g_autofree gchar *loaded = g_build_filename (dir, "loaded.bin", NULL);
  g_autofree gchar *ckpt = g_build_filename (dir, "ckpt", NULL);
  g_autofree gchar *a = NULL, *b = NULL;
  gsize alen = 0, blen = 0;
  gint status[3];
  g_autoptr(GError) error = NULL;

  /* fp16 (mode 1) on 2 ranks, ZeRO-2. */
  run (2, "save:1:2", ckpt, saved, status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  g_assert_true (g_file_get_contents (saved, &a, &alen, &error));

  /* bf16 (mode 2) on 3 ranks, ZeRO-3. */
  run (3, "load:2:3", ckpt, loaded, status);
  for (guint r = 0; r < 3; r++)
    g_assert_cmpint (status[r], ==, 0);
  g_assert_true (g_file_get_contents (loaded, &b, &blen, &error));
  g_assert_cmpmem (a, alen, b, blen);

  /* fp32 (mode 0) on this one process. */
  {
    g_autoptr(MixprecEngine) e = model_engine (0, 0, 1);
    g_autoptr(GByteArray) w = NULL;

    g_assert_true (mixprec_engine_load_checkpoint (e, ckpt, &error));
    g_assert_no_error (error);
    w = gathered_weights (e);
    g_assert_cmpmem (a, alen, w->data, w->len);
  }
  ckpt_remove_tree (dir);
}

/* Every parameter's master and state slots as a checkpoint reads them
 * (FP32, decoded exactly), one after the other. */
static GByteArray *
checkpoint_values (const gchar *dir,
                   gboolean     masters_only)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecCheckpoint) ckpt = mixprec_checkpoint_open (dir, &error);
  g_auto(GStrv) names = NULL;
  GByteArray *out = g_byte_array_new ();

  g_assert_no_error (error);
  names = mixprec_checkpoint_get_param_names (ckpt);
  for (guint i = 0; names[i] != NULL; i++)
    {
      g_autoptr(GBytes) m = mixprec_checkpoint_read_master (ckpt, names[i], &error);
      const gchar * const *slots = mixprec_checkpoint_get_state_names (ckpt);

      g_assert_no_error (error);
      g_byte_array_append (out, g_bytes_get_data (m, NULL), g_bytes_get_size (m));
      for (guint k = 0; !masters_only && slots[k] != NULL; k++)
        {
          g_autoptr(GBytes) v = mixprec_checkpoint_read_state (ckpt, names[i], slots[k], &error);

          g_assert_no_error (error);
          g_byte_array_append (out, g_bytes_get_data (v, NULL), g_bytes_get_size (v));
        }
    }
  return out;
}

typedef struct
{
  guint mode;
  guint world_a, stage_a;    /* saved */
  guint world_b, stage_b;    /* loaded and saved again */
} ReprMove;

/* A representation saved at one world size and stage, loaded at another
 * and saved again: the same values, bit for bit (blocks are unit-relative,
 * so codes and scales move as they are). */
static void
test_repr_move (gconstpointer data)
{
  const ReprMove *m = data;
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *again = g_build_filename (dir, "again", NULL);
  g_autofree gchar *save = g_strdup_printf ("save:%u:%u", m->mode, m->stage_a);
  g_autofree gchar *resave = g_strdup_printf ("resave:%u:%u", m->mode, m->stage_b);
  g_autoptr(GByteArray) a = NULL, b = NULL;
  gint status[3];

  run (m->world_a, save, dir, "", status);
  for (guint r = 0; r < m->world_a; r++)
    g_assert_cmpint (status[r], ==, 0);
  run (m->world_b, resave, dir, "", status);
  for (guint r = 0; r < m->world_b; r++)
    g_assert_cmpint (status[r], ==, 0);
  a = checkpoint_values (dir, FALSE);
  b = checkpoint_values (again, FALSE);
  g_assert_cmpmem (a->data, a->len, b->data, b->len);
  ckpt_remove_tree (dir);
}

/* Resumes in a representation on 2 ranks continue bit for bit. */
static void
test_repr_resume (gconstpointer data)
{
  const guint *mode_stage = data;
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *action = g_strdup_printf ("resume:%u:%u", mode_stage[0], mode_stage[1]);
  gint status[2];

  run (2, action, dir, "", status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  ckpt_remove_tree (dir);
}

/* int8 state and remainder masters saved on 2 ranks (ZeRO-2) resume with
 * FP32 state and masters on 3 ranks (ZeRO-3): exactly the saved values;
 * and back from there into int8 on one process at ZeRO-1. */
static void
test_repr_across (void)
{
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *again = g_build_filename (dir, "again", NULL);
  g_autoptr(GByteArray) a = NULL, b = NULL;
  gint status[3];

  run (2, "save:115:2", dir, "", status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  run (3, "resave:100:3", dir, "", status);
  for (guint r = 0; r < 3; r++)
    g_assert_cmpint (status[r], ==, 0);
  a = checkpoint_values (dir, FALSE);
  b = checkpoint_values (again, FALSE);
  g_assert_cmpmem (a->data, a->len, b->data, b->len);

  /* And back into int8 and remainder masters on one process: the masters
   * split exactly (the state is encoded again by the block rule, which
   * test-checkpoint-repr recomputes). */
  {
    g_autofree gchar *third = g_build_filename (again, "again", NULL);
    g_autoptr(GByteArray) am = checkpoint_values (dir, TRUE);
    g_autoptr(GByteArray) cm = NULL;

    run (1, "resave:115:1", again, "", status);
    g_assert_cmpint (status[0], ==, 0);
    cm = checkpoint_values (third, TRUE);
    g_assert_cmpmem (am->data, am->len, cm->data, cm->len);
  }
  ckpt_remove_tree (dir);
}

/* Runs a rank's action, then closes the communicator, so the transport's
 * threads are gone before the process exits (LeakSanitizer's exit check
 * cannot stop them). */
static int
child_main (const gchar *action)
{
  int status = child_action (action);

  g_clear_object (&comm);
  return status;
}

int
main (int argc, char **argv)
{
  const gchar *action = g_getenv ("MIXPREC_TEST_CKPT");

  if (action != NULL)
    return child_main (action);

  g_test_init (&argc, &argv, NULL);
  g_test_add_data_func ("/checkpoint-dist/resume/world2/stage0", GUINT_TO_POINTER (0), test_resume_two_ranks);
  g_test_add_data_func ("/checkpoint-dist/resume/world2/stage2", GUINT_TO_POINTER (2), test_resume_two_ranks);
  g_test_add_data_func ("/checkpoint-dist/resume/world2/stage3", GUINT_TO_POINTER (3), test_resume_two_ranks);
  g_test_add_data_func ("/checkpoint-dist/resume/world2/stage1/fp16-no-master", GUINT_TO_POINTER (1),
                        test_resume_two_ranks_fp16_no_master);
  g_test_add_data_func ("/checkpoint-dist/resume/world2/stage3/fp16-no-master", GUINT_TO_POINTER (3),
                        test_resume_two_ranks_fp16_no_master);
  g_test_add_func ("/checkpoint-dist/fp16-world2-to-bf16-world3-and-fp32-world1",
                   test_across_precisions_and_world_sizes);
  {
    /* Each master and state format moves between world sizes 1, 2 and 3
     * and stages 0 to 3 at least once. */
    static const ReprMove moves[] = {
      { 115, 2, 1, 3, 1 },   /* remainder + int8 */
      { 126, 3, 2, 2, 2 },   /* kahan + int4 */
      { 104, 2, 3, 1, 0 },   /* fp32 + fp8_e4m3_scaled */
      { 112, 1, 0, 2, 3 },   /* remainder + fp16_scaled */
      { 123, 2, 0, 3, 3 },   /* kahan + bf16_scaled */
      { 111, 3, 3, 2, 1 },   /* remainder + bf16 */
      { 125, 2, 2, 1, 0 },   /* kahan + int8 */
      { 126, 1, 0, 3, 0 },   /* kahan + int4, ZeRO-0 across ranks */
    };
    static const guint resumes[][2] = { { 115, 0 }, { 126, 1 }, { 104, 2 }, { 125, 3 } };

    for (guint i = 0; i < G_N_ELEMENTS (moves); i++)
      {
        g_autofree gchar *path = g_strdup_printf ("/checkpoint-dist/repr/%s+%s/world%u-stage%u-to-world%u-stage%u",
                                                  repr_masters[(moves[i].mode - 100) / 10],
                                                  repr_states[(moves[i].mode - 100) % 10],
                                                  moves[i].world_a, moves[i].stage_a,
                                                  moves[i].world_b, moves[i].stage_b);

        g_test_add_data_func (path, &moves[i], test_repr_move);
      }
    for (guint i = 0; i < G_N_ELEMENTS (resumes); i++)
      {
        g_autofree gchar *path = g_strdup_printf ("/checkpoint-dist/repr/%s+%s/resume-world2-stage%u",
                                                  repr_masters[(resumes[i][0] - 100) / 10],
                                                  repr_states[(resumes[i][0] - 100) % 10],
                                                  resumes[i][1]);

        g_test_add_data_func (path, resumes[i], test_repr_resume);
      }
    g_test_add_func ("/checkpoint-dist/repr/remainder+int8-world2-to-fp32-world3-and-back",
                     test_repr_across);
  }
  return g_test_run ();
}
