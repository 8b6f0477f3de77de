/* test-checkpoint.c — checkpoints: bit-exact resume in every precision
 * mode, loading across precision modes, the on-disk layout, the FP32
 * export read back by an independent parser, crash safety (a save killed
 * at every named point, at random points, and at random times), and a
 * corruption battery at the checkpoint and safetensors layers. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-safetensors-private.h"

#include "checkpoint-common.h"

#define FP16 (&ckpt_modes[1])

/* ---------------------------------------------------------------- helpers */

static void
save (MixprecEngine *engine,
      const gchar   *root)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (mixprec_engine_save_checkpoint (engine, root, &error));
  g_assert_no_error (error);
}

static void
load (MixprecEngine *engine,
      const gchar   *dir)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (mixprec_engine_load_checkpoint (engine, dir, &error));
  g_assert_no_error (error);
}

static MixprecEngine *
fresh_engine (const CkptMode *mode,
              guint           variant,
              guint64         extra)
{
  MixprecEngine *e = ckpt_engine_new (mode->json);

  ckpt_build_model (e, variant, extra);
  return e;
}

static GBytes *
read_file (const gchar *path)
{
  g_autoptr(GError) error = NULL;
  gchar *data;
  gsize length;

  g_assert_true (g_file_get_contents (path, &data, &length, &error));
  g_assert_no_error (error);
  return g_bytes_new_take (data, length);
}

static void
write_file (const gchar  *path,
            gconstpointer data,
            gsize         length)
{
  /* A new file each time, no fsync: the tests write thousands of damaged
   * copies, and ext4 flushes files truncated and rewritten in place. */
  FILE *f;

  g_unlink (path);
  f = fopen (path, "wb");

  g_assert_nonnull (f);
  g_assert_cmpuint (fwrite (data, 1, length, f), ==, length);
  g_assert_cmpint (fclose (f), ==, 0);
}

static void
copy_dir (const gchar *from,
          const gchar *to)
{
  g_autoptr(GDir) d = g_dir_open (from, 0, NULL);
  const gchar *name;

  g_assert_nonnull (d);
  g_assert_cmpint (g_mkdir_with_parents (to, 0755), ==, 0);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *src = g_build_filename (from, name, NULL);
      g_autofree gchar *dst = g_build_filename (to, name, NULL);
      g_autoptr(GBytes) bytes = read_file (src);

      write_file (dst, g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes));
    }
}

static gboolean
has_tmp_leftovers (const gchar *root)
{
  g_autoptr(GDir) d = g_dir_open (root, 0, NULL);
  const gchar *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    if (g_str_has_prefix (name, ".tmp-"))
      return TRUE;
  return FALSE;
}

static gchar *
replace (const gchar *text,
         const gchar *old,
         const gchar *new)
{
  g_auto(GStrv) parts = g_strsplit (text, old, -1);

  g_assert_cmpuint (g_strv_length (parts), >=, 2);
  return g_strjoinv (new, parts);
}

/* Round to nearest even, FP32 to BF16, written out independently of the
 * library: add half an ulp minus one plus the lowest kept bit, truncate. */
static guint16
bf16_rne (gfloat value)
{
  guint32 u;

  memcpy (&u, &value, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return (guint16) ((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1);
  return (guint16) (u >> 16);
}

static void
assert_error_names (GError      *error,
                    gint         code,
                    const gchar *needle)
{
  g_assert_nonnull (error);
  if (!g_error_matches (error, MIXPREC_CHECKPOINT_ERROR, code) ||
      strstr (error->message, needle) == NULL)
    g_error ("expected checkpoint error %d naming '%s', got %s %d: %s", code, needle,
             g_quark_to_string (error->domain), error->code, error->message);
}

/* ---------------------------------------------------------------- damage */

static gchar *
path_in (const gchar *root,
         const gchar *a,
         const gchar *b)
{
  return g_build_filename (root, a, b, NULL);
}

/* The files of the checkpoint folder @dir, by name. */
static GHashTable *
folder_bytes (const gchar *dir)
{
  GHashTable *files = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                             (GDestroyNotify) g_bytes_unref);
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *path = g_build_filename (dir, name, NULL);

      g_hash_table_insert (files, g_strdup (name), read_file (path));
    }
  return files;
}

static void
assert_folder_unchanged (const gchar *dir,
                         GHashTable  *before)
{
  g_autoptr(GHashTable) now = folder_bytes (dir);
  GHashTableIter iter;
  gpointer name, bytes;

  g_assert_cmpuint (g_hash_table_size (now), ==, g_hash_table_size (before));
  g_hash_table_iter_init (&iter, before);
  while (g_hash_table_iter_next (&iter, &name, &bytes))
    g_assert_true (g_bytes_equal (bytes, g_hash_table_lookup (now, name)));
}

/* Issue 15, item 1: step-2, -4 and -6 saved, then step-6 loses its
 * manifest. Nothing may read that as an empty folder; the fallback finds
 * step-4; a save of step-6 keeps the damaged folder; the older
 * checkpoints stay byte for byte. */
static void
test_damaged_latest (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *manifest6 = path_in (root, "step-6", "manifest.json");
  g_autofree gchar *step2 = path_in (root, "step-2", NULL);
  g_autofree gchar *step4 = path_in (root, "step-4", NULL);
  g_autofree gchar *shard6 = path_in (root, "step-6", "rank-00000.safetensors");
  g_autofree gchar *kept6 = path_in (root, "step-6.damaged", "rank-00000.safetensors");
  g_autoptr(MixprecEngine) e = fresh_engine (FP16, 0, 0);
  g_autoptr(MixprecEngine) victim = fresh_engine (FP16, 1, 0);
  g_autoptr(GPtrArray) at4 = NULL;
  g_autoptr(GHashTable) files2 = NULL;
  g_autoptr(GHashTable) files4 = NULL;
  g_autoptr(GBytes) old_shard6 = NULL;
  g_autoptr(GBytes) kept = NULL;
  g_autoptr(MixprecCheckpoint) c = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *skipped = NULL;

  ckpt_train (e, 0, 2, FALSE);
  save (e, root);
  ckpt_train (e, 2, 2, FALSE);
  save (e, root);
  at4 = ckpt_snapshot (e);
  ckpt_train (e, 4, 2, FALSE);
  save (e, root);
  files2 = folder_bytes (step2);
  files4 = folder_bytes (step4);
  old_shard6 = read_file (shard6);
  g_assert_cmpint (g_unlink (manifest6), ==, 0);

  /* The plain open and load refuse, with a code of their own. */
  c = mixprec_checkpoint_open (root, &error);
  g_assert_null (c);
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_DAMAGED, "step-6");
  g_clear_error (&error);
  g_assert_false (mixprec_engine_load_checkpoint (victim, root, &error));
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_DAMAGED, "step-6");
  g_clear_error (&error);

  /* The fallback: step-4, saying what it passed over. */
  c = mixprec_checkpoint_open_newest_intact (root, &skipped, &error);
  g_assert_no_error (error);
  g_assert_nonnull (c);
  g_assert_cmpuint (mixprec_checkpoint_get_step (c), ==, 4);
  g_assert_cmpstr (mixprec_checkpoint_get_path (c), ==, step4);
  g_assert_nonnull (skipped);
  g_assert_nonnull (strstr (skipped, "step-6"));
  load (victim, mixprec_checkpoint_get_path (c));
  {
    g_autoptr(GPtrArray) got = ckpt_snapshot (victim);

    ckpt_assert_same (got, at4);
  }
  g_clear_object (&c);

  /* The resumed run saves step-6 again: the damaged folder is kept aside,
   * the older ones are untouched, latest names the new step-6. */
  ckpt_train (victim, 4, 2, FALSE);
  save (victim, root);
  kept = read_file (kept6);
  g_assert_true (g_bytes_equal (kept, old_shard6));
  assert_folder_unchanged (step2, files2);
  assert_folder_unchanged (step4, files4);
  c = mixprec_checkpoint_open (root, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_checkpoint_get_step (c), ==, 6);
  g_clear_object (&c);

  /* A whole checkpoint a crash left aside (.tmp-TAG.old) survives the
   * cleanup of a later save; a partial one (.tmp-TAG) does not. */
  {
    g_autofree gchar *aside = path_in (root, ".tmp-step-4.old", NULL);
    g_autofree gchar *partial = path_in (root, ".tmp-step-9", NULL);

    copy_dir (step4, aside);
    copy_dir (step4, partial);
    save (victim, root);
    g_assert_true (g_file_test (aside, G_FILE_TEST_IS_DIR));
    assert_folder_unchanged (aside, files4);
    g_assert_false (g_file_test (partial, G_FILE_TEST_EXISTS));
    ckpt_remove_tree (aside);
  }

  /* No whole checkpoint left: the fallback refuses, naming each. */
  {
    const gchar *tags[] = { "step-2", "step-4", "step-6" };

    for (guint i = 0; i < G_N_ELEMENTS (tags); i++)
      {
        g_autofree gchar *m = path_in (root, tags[i], "manifest.json");

        g_assert_cmpint (g_unlink (m), ==, 0);
      }
    g_clear_pointer (&skipped, g_free);
    c = mixprec_checkpoint_open_newest_intact (root, &skipped, &error);
    g_assert_null (c);
    g_assert_null (skipped);
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_DAMAGED, "holds no whole checkpoint");
    g_assert_nonnull (strstr (error->message, "step-2"));
    g_clear_error (&error);
  }

  /* Without latest, checkpoint folders still make it damaged; a folder
   * with none of them is "no checkpoint here". */
  {
    g_autofree gchar *latest = path_in (root, "latest", NULL);
    g_autofree gchar *empty = path_in (root, "empty", NULL);

    g_assert_cmpint (g_unlink (latest), ==, 0);
    g_assert_null (mixprec_checkpoint_open (root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_DAMAGED, "latest");
    g_clear_error (&error);
    g_assert_cmpint (g_mkdir (empty, 0755), ==, 0);
    g_assert_null (mixprec_checkpoint_open_newest_intact (empty, NULL, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND, "empty");
    g_clear_error (&error);
  }
  ckpt_remove_tree (root);
}

/* Issue 15, item 8: an empty path is named as such, not as ": cannot
 * create the folder". */
static void
test_empty_path (void)
{
  g_autoptr(MixprecEngine) e = fresh_engine (FP16, 0, 0);
  g_autoptr(GError) error = NULL;

  g_assert_false (mixprec_engine_save_checkpoint (e, "", &error));
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT, "an empty path ('')");
  g_clear_error (&error);
  g_assert_false (mixprec_engine_load_checkpoint (e, "", &error));
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT, "an empty path ('')");
  g_clear_error (&error);
  g_assert_null (mixprec_checkpoint_open ("", &error));
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT, "an empty path ('')");
}

/* Opening, verifying and reading a checkpoint many times: under
 * LeakSanitizer (the CI's sanitizer build) a leak per open, such as a
 * manifest value referenced once too often, shows up here. */
static void
test_reopen_many (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autoptr(MixprecEngine) e = fresh_engine (FP16, 0, 0);
  g_autoptr(MixprecEngine) victim = fresh_engine (FP16, 1, 0);
  g_autoptr(GPtrArray) saved = NULL;

  ckpt_train (e, 0, 3, TRUE);
  save (e, root);
  saved = ckpt_snapshot (e);
  for (guint i = 0; i < 50; i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecCheckpoint) c = mixprec_checkpoint_open (root, &error);
      g_auto(GStrv) names = NULL;
      g_autoptr(GBytes) master = NULL;
      GVariant *scaler;

      g_assert_no_error (error);
      g_assert_true (mixprec_checkpoint_verify (c, &error));
      g_assert_no_error (error);
      names = mixprec_checkpoint_get_param_names (c);
      master = mixprec_checkpoint_read_master (c, names[0], &error);
      g_assert_no_error (error);
      g_assert_nonnull (master);
      scaler = mixprec_checkpoint_get_scaler_state (c);
      g_assert_true (g_variant_is_of_type (scaler, G_VARIANT_TYPE_VARDICT));
      load (victim, root);
    }
  {
    g_autoptr(GPtrArray) got = ckpt_snapshot (victim);

    ckpt_assert_same (got, saved);
  }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- resume */

static void
test_resume (gconstpointer data)
{
  const CkptMode *mode = data;
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autoptr(MixprecEngine) a = fresh_engine (mode, 0, 0);
  g_autoptr(MixprecEngine) b = fresh_engine (mode, 1, 0);
  g_autoptr(GPtrArray) at_save = NULL;
  g_autoptr(GPtrArray) end_a = NULL;
  g_autoptr(GPtrArray) before_load = NULL;
  g_autoptr(GPtrArray) after_load = NULL;
  g_autoptr(GPtrArray) end_b = NULL;
  const guint n = 9, m = 6;

  ckpt_train (a, 0, n, mode->overflows);
  at_save = ckpt_snapshot (a);
  save (a, root);
  ckpt_train (a, n, m, mode->overflows);
  end_a = ckpt_snapshot (a);

  before_load = ckpt_snapshot (b);
  g_assert_false (ckpt_same (before_load, at_save));
  load (b, root);
  after_load = ckpt_snapshot (b);
  ckpt_assert_same (at_save, after_load);
  /* ckpt_train checks each step's number: the counters came back. */
  ckpt_train (b, n, m, mode->overflows);
  end_b = ckpt_snapshot (b);
  ckpt_assert_same (end_a, end_b);

  if (mode->overflows)
    {
      g_autoptr(MixprecCheckpoint) ckpt = mixprec_checkpoint_open (root, NULL);
      g_autoptr(MixprecEngine) c = fresh_engine (mode, 1, 0);
      g_autoptr(GPtrArray) end_c = NULL;
      g_autoptr(GError) error = NULL;

      /* The scaler state mattered: two steps were skipped before the save,
       * and an engine whose scaler starts fresh ends elsewhere. */
      g_assert_nonnull (ckpt);
      g_assert_cmpuint (mixprec_checkpoint_get_skipped_steps (ckpt), ==, 2);
      g_assert_true (mixprec_engine_load_checkpoint_full (c, root, MIXPREC_CHECKPOINT_LOAD_RESET_SCALER,
                                                          &error));
      g_assert_no_error (error);
      g_assert_cmpfloat (mixprec_engine_get_loss_scale (c), !=, mixprec_engine_get_loss_scale (b));
      ckpt_train (c, n, m, mode->overflows);
      end_c = ckpt_snapshot (c);
      g_assert_false (ckpt_same (end_a, end_c));
    }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- cross-precision */

static void
assert_states_equal (MixprecEngine *a,
                     MixprecEngine *b)
{
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (a);
  g_auto(GStrv) slots = mixprec_engine_get_optimizer_state_names (a);

  for (guint k = 0; k < params->len; k++)
    for (guint s = 0; slots[s] != NULL; s++)
      {
        const gchar *name = mixprec_param_get_name (g_ptr_array_index (params, k));
        g_autoptr(GBytes) x = mixprec_engine_get_optimizer_state (a, name, slots[s], NULL);
        g_autoptr(GBytes) y = mixprec_engine_get_optimizer_state (b, name, slots[s], NULL);

        g_assert_true (g_bytes_equal (x, y));
      }
}

/* The bf16 mode's config with bf16.bf16_optimizer_states on. */
static MixprecEngine *
bf16_state_engine (guint variant)
{
  g_autoptr(GString) json = g_string_new (ckpt_modes[2].json);
  MixprecEngine *e;

  g_assert_cmpuint (g_string_replace (json, "\"bf16\": {\"enabled\": true}",
                                      "\"bf16\": {\"enabled\": true, \"bf16_optimizer_states\": true}", 1),
                    ==, 1);
  e = ckpt_engine_new (json->str);
  ckpt_build_model (e, variant, 0);
  return e;
}

/* Every state value of @e, widened from bfloat16 or rounded to it by
 * bf16_rne(), in a map from "param/slot" to the bits. */
static void
assert_states_are_bf16 (MixprecEngine *e,
                        MixprecEngine *fp32_source)
{
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (e);
  g_auto(GStrv) slots = mixprec_engine_get_optimizer_state_names (e);

  for (guint k = 0; k < params->len; k++)
    for (guint s = 0; slots[s] != NULL; s++)
      {
        const gchar *name = mixprec_param_get_name (g_ptr_array_index (params, k));
        g_autoptr(GBytes) x = mixprec_engine_get_optimizer_state (e, name, slots[s], NULL);
        g_autoptr(GBytes) y = fp32_source != NULL
          ? mixprec_engine_get_optimizer_state (fp32_source, name, slots[s], NULL) : NULL;
        gsize n;
        const gfloat *v = g_bytes_get_data (x, &n);

        n /= sizeof (gfloat);
        for (gsize i = 0; i < n; i++)
          {
            guint32 bits;

            memcpy (&bits, &v[i], 4);
            g_assert_cmphex (bits & 0xFFFF, ==, 0);
            if (y != NULL)
              g_assert_cmphex (bits >> 16, ==, bf16_rne (((const gfloat *) g_bytes_get_data (y, NULL))[i]));
          }
      }
}

/* bf16.bf16_optimizer_states: the state is saved as BF16 tensors and
 * resumes bit for bit; an FP32-state engine loads it widened exactly, and
 * an FP32-state checkpoint loads into a bf16-state engine rounded to
 * nearest even. */
static void
test_bf16_optimizer_states (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *root32 = g_build_filename (root, "fp32-state", NULL);
  g_autoptr(MixprecEngine) src = bf16_state_engine (0);
  g_autoptr(MixprecEngine) resumed = bf16_state_engine (1);
  g_autoptr(MixprecEngine) wide = fresh_engine (&ckpt_modes[2], 1, 0);
  g_autoptr(MixprecEngine) src32 = fresh_engine (&ckpt_modes[2], 0, 0);
  g_autoptr(MixprecEngine) narrow = bf16_state_engine (1);
  g_autoptr(GPtrArray) a = NULL;
  g_autoptr(GPtrArray) b = NULL;

  g_assert_cmpint (mixprec_config_get_optimizer_state_dtype (mixprec_engine_get_config (src)), ==,
                   MIXPREC_DTYPE_BFLOAT16);
  ckpt_train (src, 0, 6, FALSE);
  assert_states_are_bf16 (src, NULL);
  save (src, root);

  load (wide, root);
  assert_states_equal (src, wide);
  load (resumed, root);
  assert_states_equal (src, resumed);
  ckpt_train (src, 6, 3, FALSE);
  ckpt_train (resumed, 6, 3, FALSE);
  a = ckpt_weights (src);
  b = ckpt_weights (resumed);
  for (guint k = 0; k < a->len; k++)
    g_assert_true (g_bytes_equal (g_ptr_array_index (a, k), g_ptr_array_index (b, k)));
  assert_states_equal (src, resumed);

  ckpt_train (src32, 0, 6, FALSE);
  save (src32, root32);
  load (narrow, root32);
  assert_states_are_bf16 (narrow, src32);
}

static void
test_cross_precision (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *root2 = g_build_filename (root, "from-no-master", NULL);
  g_autoptr(MixprecEngine) src = fresh_engine (FP16, 0, 0);
  g_autoptr(GPtrArray) saved = NULL;
  const guint n = 9;

  ckpt_train (src, 0, n, TRUE);
  saved = ckpt_weights (src);
  save (src, root);

  for (guint t = 0; t < G_N_ELEMENTS (ckpt_modes); t++)
    {
      g_autoptr(MixprecEngine) e = NULL;
      g_autoptr(GPtrArray) params = NULL;

      if (&ckpt_modes[t] == FP16)
        continue;
      e = fresh_engine (&ckpt_modes[t], 1, 0);
      load (e, root);
      params = mixprec_engine_get_params (e);
      for (guint k = 0; k < params->len; k++)
        {
          MixprecParam *p = g_ptr_array_index (params, k);
          GBytes *expected = g_ptr_array_index (saved, k);

          if (mixprec_param_has_master (p) ||
              mixprec_param_get_working_dtype (p) == MIXPREC_DTYPE_FLOAT32)
            {
              g_autoptr(GBytes) master = mixprec_param_get_working (p, MIXPREC_DTYPE_FLOAT32, NULL);

              if (mixprec_param_has_master (p))
                {
                  g_bytes_unref (master);
                  master = mixprec_param_get_master (p, NULL);
                }
              g_assert_true (g_bytes_equal (master, expected));
            }
          else if (mixprec_param_get_working_dtype (p) == MIXPREC_DTYPE_FLOAT16)
            {
              /* The saved FP32 masters rounded to nearest even into the
               * fp16 weights. */
              g_autoptr(GBytes) working = mixprec_param_get_working (p, MIXPREC_DTYPE_FLOAT16, NULL);
              g_autoptr(GBytes) rounded = mixprec_convert (MIXPREC_DTYPE_FLOAT32, expected,
                                                           MIXPREC_DTYPE_FLOAT16,
                                                           MIXPREC_ROUNDING_NEAREST_EVEN, 0, NULL);

              g_assert_true (g_bytes_equal (working, rounded));
            }
          else
            {
              g_autoptr(GBytes) working = mixprec_param_get_working (p, MIXPREC_DTYPE_BFLOAT16, NULL);
              const gfloat *v = g_bytes_get_data (expected, NULL);
              const guint16 *w = g_bytes_get_data (working, NULL);

              g_assert_cmpuint (mixprec_param_get_working_dtype (p), ==, MIXPREC_DTYPE_BFLOAT16);
              for (guint64 i = 0; i < mixprec_param_get_numel (p); i++)
                g_assert_cmphex (w[i], ==, bf16_rne (v[i]));
            }
        }
      assert_states_equal (src, e);
      /* A mode without FP16 loss scaling starts its own scaler; fp16
       * without masters takes fp16's over. */
      if (ckpt_modes[t].overflows)
        g_assert_cmpfloat (mixprec_engine_get_loss_scale (e), ==,
                           mixprec_engine_get_loss_scale (src));
      else
        g_assert_cmpfloat (mixprec_engine_get_loss_scale (e), ==, 1.0);
      ckpt_train (e, n, 1, FALSE);
    }

  /* And back: bf16 without master weights into fp16. */
  {
    g_autoptr(MixprecEngine) nm = fresh_engine (&ckpt_modes[3], 0, 0);
    g_autoptr(MixprecEngine) e = fresh_engine (FP16, 1, 0);
    g_autoptr(GPtrArray) widened = NULL;
    g_autoptr(GPtrArray) loaded = NULL;

    ckpt_train (nm, 0, 5, FALSE);
    widened = ckpt_weights (nm);
    save (nm, root2);
    load (e, root2);
    loaded = ckpt_weights (e);
    ckpt_assert_same (widened, loaded);
    g_assert_cmpfloat (mixprec_engine_get_loss_scale (e), ==, 1024.0);
  }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- layout */

static void
test_layout (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *latest = g_build_filename (root, "latest", NULL);
  g_autofree gchar *step3 = g_build_filename (root, "step-3", NULL);
  g_autofree gchar *stale = g_build_filename (root, ".tmp-step-99", NULL);
  g_autofree gchar *stale_file = g_build_filename (stale, "rank-00000.safetensors.partial", NULL);
  g_autoptr(MixprecEngine) e = fresh_engine (&ckpt_modes[3], 0, 0);
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (e);
  g_autoptr(GPtrArray) at3 = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) text = NULL;
  g_auto(GStrv) names = NULL;
  g_auto(GStrv) files = NULL;
  g_auto(GStrv) slots = mixprec_engine_get_optimizer_state_names (e);
  const gchar *bad_tags[] = { "", ".hidden", "a/b", "latest", "x y", "..", "tag\n" };

  ckpt_train (e, 0, 3, FALSE);
  at3 = ckpt_snapshot (e);
  save (e, root);
  ckpt_train (e, 3, 2, FALSE);
  g_assert_cmpint (g_mkdir (stale, 0755), ==, 0);
  write_file (stale_file, "x", 1);
  save (e, root);
  g_assert_false (g_file_test (stale, G_FILE_TEST_EXISTS));
  g_assert_false (has_tmp_leftovers (root));

  text = read_file (latest);
  g_assert_cmpmem (g_bytes_get_data (text, NULL), g_bytes_get_size (text), "step-5\n", 7);
  g_assert_true (g_file_test (step3, G_FILE_TEST_IS_DIR));

  ckpt = mixprec_checkpoint_open (root, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_checkpoint_get_tag (ckpt), ==, "step-5");
  g_assert_true (g_str_has_suffix (mixprec_checkpoint_get_path (ckpt), "step-5"));
  g_assert_cmpuint (mixprec_checkpoint_get_format_version (ckpt), ==, 1);
  g_assert_cmpstr (mixprec_checkpoint_get_libmixprec_version (ckpt), ==, MIXPREC_VERSION_S);
  g_assert_cmpuint (mixprec_checkpoint_get_step (ckpt), ==, 5);
  g_assert_cmpuint (mixprec_checkpoint_get_applied_steps (ckpt), ==, 5);
  g_assert_cmpuint (mixprec_checkpoint_get_skipped_steps (ckpt), ==, 0);
  g_assert_cmpuint (mixprec_checkpoint_get_seed (ckpt), ==, 77);
  g_assert_cmpstr (mixprec_checkpoint_get_precision_mode (ckpt), ==,
                   mixprec_precision_mode_get_name (MIXPREC_PRECISION_MODE_BF16_NO_MASTER));
  g_assert_cmpuint (mixprec_checkpoint_get_world_size (ckpt), ==, 1);
  g_assert_cmpuint (mixprec_checkpoint_get_zero_stage (ckpt), ==, 0);
  g_assert_cmpstr (mixprec_checkpoint_get_scaler_type (ckpt), ==, "MixprecStaticScaler");
  g_assert_true (g_variant_is_of_type (mixprec_checkpoint_get_scaler_state (ckpt), G_VARIANT_TYPE_VARDICT));
  g_assert_cmpstr (mixprec_checkpoint_get_lr_schedule_type (ckpt), ==, "WarmupCosineLR");
  g_assert_cmpuint (mixprec_checkpoint_get_lr_position (ckpt), ==, 5);
  g_assert_cmpstr (mixprec_checkpoint_get_optimizer_name (ckpt), ==, "adamw");
  g_assert_cmpstrv (mixprec_checkpoint_get_state_names (ckpt), slots);

  files = mixprec_checkpoint_get_file_names (ckpt);
  g_assert_cmpuint (g_strv_length (files), ==, 1);
  g_assert_cmpstr (files[0], ==, "rank-00000.safetensors");
  names = mixprec_checkpoint_get_param_names (ckpt);
  g_assert_cmpuint (g_strv_length (names), ==, params->len);
  for (guint k = 0; k < params->len; k++)
    {
      MixprecParam *p = g_ptr_array_index (params, k);
      const guint64 *shape, *saved;
      guint n_dims, n_saved, rank = 99;
      guint64 begin = 1, end = 0;
      const gchar *file = NULL;
      g_autoptr(GBytes) master = NULL;
      g_autoptr(GBytes) expected = mixprec_param_get_working (p, MIXPREC_DTYPE_FLOAT32, NULL);

      g_assert_cmpstr (names[k], ==, mixprec_param_get_name (p));
      shape = mixprec_param_get_shape (p, &n_dims);
      saved = mixprec_checkpoint_get_param_shape (ckpt, names[k], &n_saved);
      g_assert_cmpmem (saved, n_saved * sizeof (guint64), shape, n_dims * sizeof (guint64));
      g_assert_cmpstr (mixprec_checkpoint_get_param_module_type (ckpt, names[k]), ==,
                       mixprec_param_get_module_type (p));
      g_assert_cmpuint (mixprec_checkpoint_get_param_n_pieces (ckpt, names[k]), ==, 1);
      g_assert_true (mixprec_checkpoint_get_param_piece (ckpt, names[k], 0, &rank, &begin, &end, &file));
      g_assert_false (mixprec_checkpoint_get_param_piece (ckpt, names[k], 1, NULL, NULL, NULL, NULL));
      g_assert_cmpuint (rank, ==, 0);
      g_assert_cmpuint (begin, ==, 0);
      g_assert_cmpuint (end, ==, mixprec_param_get_numel (p));
      g_assert_cmpstr (file, ==, "rank-00000.safetensors");

      /* bf16 without master weights saves its working values, widened. */
      master = mixprec_checkpoint_read_master (ckpt, names[k], &error);
      g_assert_no_error (error);
      g_assert_true (g_bytes_equal (master, expected));
      for (guint s = 0; slots[s] != NULL; s++)
        {
          g_autoptr(GBytes) state = mixprec_checkpoint_read_state (ckpt, names[k], slots[s], &error);
          g_autoptr(GBytes) live = mixprec_engine_get_optimizer_state (e, names[k], slots[s], NULL);

          g_assert_no_error (error);
          g_assert_true (g_bytes_equal (state, live));
        }
    }
  g_assert_null (mixprec_checkpoint_get_param_shape (ckpt, "nope", (guint[]) { 0 }));
  g_assert_null (mixprec_checkpoint_read_master (ckpt, "nope", &error));
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_MISSING_PARAM, "nope");
  g_clear_error (&error);
  g_assert_null (mixprec_checkpoint_read_state (ckpt, names[0], "momentum_buffer", &error));
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT, "momentum_buffer");
  g_clear_error (&error);
  g_assert_true (mixprec_checkpoint_verify (ckpt, &error));
  g_assert_no_error (error);

  /* A snapshot kept aside leaves latest alone; a re-save of a tag
   * replaces it; older checkpoints stay. */
  g_assert_true (mixprec_engine_save_checkpoint_full (e, root, "best", MIXPREC_CHECKPOINT_SAVE_NO_LATEST,
                                                      &error));
  g_assert_no_error (error);
  g_clear_pointer (&text, g_bytes_unref);
  text = read_file (latest);
  g_assert_cmpmem (g_bytes_get_data (text, NULL), g_bytes_get_size (text), "step-5\n", 7);
  {
    g_autofree gchar *best = g_build_filename (root, "best", NULL);
    g_autoptr(MixprecCheckpoint) b = mixprec_checkpoint_open (best, &error);

    g_assert_no_error (error);
    g_assert_cmpuint (mixprec_checkpoint_get_step (b), ==, 5);
  }
  ckpt_train (e, 5, 1, FALSE);
  g_assert_true (mixprec_engine_save_checkpoint_full (e, root, "step-3", MIXPREC_CHECKPOINT_SAVE_NONE,
                                                      &error));
  g_assert_no_error (error);
  g_assert_false (has_tmp_leftovers (root));
  {
    g_autoptr(MixprecCheckpoint) again = mixprec_checkpoint_open (root, &error);

    g_assert_no_error (error);
    g_assert_cmpstr (mixprec_checkpoint_get_tag (again), ==, "step-3");
    g_assert_cmpuint (mixprec_checkpoint_get_step (again), ==, 6);
  }
  {
    g_autoptr(MixprecEngine) f = fresh_engine (&ckpt_modes[3], 1, 0);
    g_autofree gchar *step5 = g_build_filename (root, "step-5", NULL);
    g_autoptr(MixprecCheckpoint) c5 = mixprec_checkpoint_open (step5, &error);
    g_autoptr(GPtrArray) fresh = ckpt_snapshot (f);

    g_assert_no_error (error);
    g_assert_cmpuint (mixprec_checkpoint_get_step (c5), ==, 5);
    g_assert_false (ckpt_same (fresh, at3));
  }

  for (guint i = 0; i < G_N_ELEMENTS (bad_tags); i++)
    {
      g_assert_false (mixprec_engine_save_checkpoint_full (e, root, bad_tags[i], 0, &error));
      g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- export */

/* Reads an exported file with json-glib and plain byte offsets, not with
 * the library's reader, and compares it with the engine's weights. */
static void
check_export (const gchar   *path,
              MixprecEngine *e,
              guint64        step)
{
  g_autoptr(GBytes) file = read_file (path);
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (e);
  g_autoptr(GPtrArray) weights = ckpt_weights (e);
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(GError) error = NULL;
  g_autofree gchar *step_text = g_strdup_printf ("%" G_GUINT64_FORMAT, step);
  gsize size;
  const guint8 *bytes = g_bytes_get_data (file, &size);
  guint64 n = 0, data_size, covered = 0;
  JsonObject *header, *meta;

  for (guint i = 0; i < 8; i++)
    n |= (guint64) bytes[i] << (8 * i);
  g_assert_cmpuint (n % 8, ==, 0);
  g_assert_cmpuint (8 + n, <=, size);
  data_size = size - 8 - n;
  g_assert_true (json_parser_load_from_data (parser, (const gchar *) bytes + 8, n, &error));
  g_assert_no_error (error);
  header = json_node_get_object (json_parser_get_root (parser));
  g_assert_cmpuint (json_object_get_size (header), ==, params->len + 1);
  meta = json_object_get_object_member (header, "__metadata__");
  g_assert_cmpstr (json_object_get_string_member (meta, "format"), ==, "pt");
  g_assert_cmpstr (json_object_get_string_member (meta, "step"), ==, step_text);

  for (guint k = 0; k < params->len; k++)
    {
      MixprecParam *p = g_ptr_array_index (params, k);
      JsonObject *t = json_object_get_object_member (header, mixprec_param_get_name (p));
      JsonArray *shape = json_object_get_array_member (t, "shape");
      JsonArray *offsets = json_object_get_array_member (t, "data_offsets");
      const guint64 *expected_shape;
      guint n_dims;
      guint64 begin = json_array_get_int_element (offsets, 0);
      guint64 end = json_array_get_int_element (offsets, 1);
      GBytes *w = g_ptr_array_index (weights, k);

      g_assert_cmpstr (json_object_get_string_member (t, "dtype"), ==, "F32");
      expected_shape = mixprec_param_get_shape (p, &n_dims);
      g_assert_cmpuint (json_array_get_length (shape), ==, n_dims);
      for (guint d = 0; d < n_dims; d++)
        g_assert_cmpint (json_array_get_int_element (shape, d), ==, expected_shape[d]);
      g_assert_cmpuint (end - begin, ==, g_bytes_get_size (w));
      g_assert_cmpuint (end, <=, data_size);
      g_assert_cmpmem (bytes + 8 + n + begin, end - begin, g_bytes_get_data (w, NULL), g_bytes_get_size (w));
      covered += end - begin;
    }
  g_assert_cmpuint (covered, ==, data_size);
}

static void
test_export (gconstpointer data)
{
  const CkptMode *mode = data;
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *direct = g_build_filename (root, "direct.safetensors", NULL);
  g_autofree gchar *offline = g_build_filename (root, "offline.safetensors", NULL);
  g_autoptr(MixprecEngine) e = fresh_engine (mode, 0, 3000);
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) a = NULL;
  g_autoptr(GBytes) b = NULL;
  g_autofree gchar *tmp = g_strconcat (direct, ".tmp", NULL);

  ckpt_train (e, 0, 4, mode->overflows);
  g_assert_true (mixprec_engine_export_fp32 (e, direct, &error));
  g_assert_no_error (error);
  g_assert_false (g_file_test (tmp, G_FILE_TEST_EXISTS));
  check_export (direct, e, 4);

  /* Offline, from the checkpoint: the same bytes. */
  save (e, root);
  ckpt = mixprec_checkpoint_open (root, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_checkpoint_export_fp32 (ckpt, offline, &error));
  g_assert_no_error (error);
  a = read_file (direct);
  b = read_file (offline);
  g_assert_true (g_bytes_equal (a, b));

  /* The library's own reader agrees. */
  {
    g_autoptr(_MixprecSafetensors) st = _mixprec_safetensors_open (offline, &error);

    g_assert_no_error (error);
    g_assert_cmpstr (_mixprec_safetensors_get_metadata (st, "producer"), ==, "libmixprec " MIXPREC_VERSION_S);
    g_assert_cmpuint (_mixprec_safetensors_get_tensors (st)->len, ==, 6);
  }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- crash safety */

typedef struct
{
  gchar *root;
  MixprecEngine *engine;     /* at state B, not saved yet */
  GPtrArray *a;              /* saved as step-4 */
  GPtrArray *b;
  guint64 extra;
} Crash;

static void
crash_setup (Crash  *c,
             guint64 extra)
{
  c->root = ckpt_make_tmpdir ();
  c->extra = extra;
  c->engine = fresh_engine (FP16, 0, extra);
  ckpt_train (c->engine, 0, 4, TRUE);
  c->a = ckpt_snapshot (c->engine);
  save (c->engine, c->root);
  ckpt_train (c->engine, 4, 4, TRUE);
  c->b = ckpt_snapshot (c->engine);
}

static void
crash_teardown (Crash *c)
{
  ckpt_remove_tree (c->root);
  g_free (c->root);
  g_object_unref (c->engine);
  g_ptr_array_unref (c->a);
  g_ptr_array_unref (c->b);
}

/* A child process that saves state B and exits 0 unless something kills
 * it first. The save writes with plain system calls, so it runs safely
 * in a child forked from this threaded process. */
static GPid
crash_child (Crash       *c,
             const gchar *tag,
             const gchar *hook,
             const gchar *marker)
{
  pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      gboolean ok;

      if (hook != NULL)
        g_setenv ("MIXPREC_CHECKPOINT_TEST_HOOK", hook, TRUE);
      if (marker != NULL)
        g_setenv ("MIXPREC_CHECKPOINT_TEST_HOOK_MARKER", marker, TRUE);
      ok = mixprec_engine_save_checkpoint_full (c->engine, c->root, tag, 0, NULL);
      _exit (ok ? 0 : 1);
    }
  return pid;
}

static gint
wait_child (GPid pid)
{
  int status = 0;

  while (waitpid (pid, &status, 0) < 0)
    g_assert_cmpint (errno, ==, EINTR);
  return status;
}

/* 0: state A must load, 1: state B, -1: either. */
static void
crash_check (Crash *c,
             gint   expect)
{
  g_autoptr(MixprecEngine) e = fresh_engine (FP16, 1, c->extra);
  g_autoptr(MixprecEngine) old = fresh_engine (FP16, 1, c->extra);
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GPtrArray) got = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *step4 = g_build_filename (c->root, "step-4", NULL);

  load (e, c->root);
  got = ckpt_snapshot (e);
  if (expect == 0)
    ckpt_assert_same (got, c->a);
  else if (expect == 1)
    ckpt_assert_same (got, c->b);
  else
    g_assert_true (ckpt_same (got, c->a) || ckpt_same (got, c->b));
  ckpt = mixprec_checkpoint_open (c->root, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_checkpoint_verify (ckpt, &error));
  g_assert_no_error (error);

  /* The previous checkpoint itself is untouched (unless this save
   * replaced its very tag). */
  g_clear_pointer (&got, g_ptr_array_unref);
  load (old, step4);
  got = ckpt_snapshot (old);
  g_assert_true (ckpt_same (got, c->a) || ckpt_same (got, c->b));
}

static guint
point_index (const gchar *point)
{
  for (guint i = 0; _mixprec_checkpoint_hook_points[i] != NULL; i++)
    if (g_str_equal (_mixprec_checkpoint_hook_points[i], point))
      return i;
  g_assert_not_reached ();
}

/* Whether a save stopped at @point has made the new state the one that
 * loads: once latest was renamed, or (same tag) once the folder was. */
static gint
expected_after (const gchar *point,
                gboolean     same_tag)
{
  return point_index (point) >= point_index (same_tag ? "after-rename" : "after-latest");
}

/* The hook is compiled into the library only with --enable-test-hooks
 * (CI's ASan and clang builds); an installed-style build skips these. */
static gboolean
skip_without_test_hooks (void)
{
#ifndef MIXPREC_ENABLE_TEST_HOOKS
  g_test_skip ("the checkpoint test hook is not compiled in: configure with "
               "--enable-test-hooks to run the crash tests");
  return TRUE;
#else
  return FALSE;
#endif
}

static void
test_crash_abort (void)
{
  if (skip_without_test_hooks ())
    return;
  for (guint same_tag = 0; same_tag < 2; same_tag++)
    for (guint i = 0; _mixprec_checkpoint_hook_points[i] != NULL; i++)
      {
        const gchar *point = _mixprec_checkpoint_hook_points[i];
        g_autofree gchar *hook = g_strconcat ("abort:", point, NULL);
        Crash c;
        gint status;

        g_test_message ("abort at %s%s", point, same_tag ? " (same tag)" : "");
        crash_setup (&c, 0);
        status = wait_child (crash_child (&c, same_tag ? "step-4" : NULL, hook, NULL));
        /* Killed at the point: the hook was reached. */
        g_assert_true (WIFSIGNALED (status));
        g_assert_cmpint (WTERMSIG (status), ==, SIGKILL);
        crash_check (&c, expected_after (point, same_tag));

        /* The next save succeeds and sweeps the leftovers. */
        save (c.engine, c.root);
        g_assert_false (has_tmp_leftovers (c.root));
        crash_check (&c, 1);
        crash_teardown (&c);
      }
}

static void
test_crash_pause_kill (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (20261122);
  guint n_points = g_strv_length ((GStrv) _mixprec_checkpoint_hook_points);

  if (skip_without_test_hooks ())
    return;
  for (guint round = 0; round < 6; round++)
    {
      const gchar *point = _mixprec_checkpoint_hook_points[g_rand_int_range (rand, 0, n_points)];
      g_autofree gchar *hook = g_strconcat ("pause:", point, "@0", NULL);
      g_autofree gchar *marker = NULL;
      Crash c;
      GPid pid;
      gint status;
      guint waited = 0;

      g_test_message ("pause at %s, then SIGKILL", point);
      crash_setup (&c, 0);
      marker = g_build_filename (c.root, "paused", NULL);
      pid = crash_child (&c, NULL, hook, marker);
      while (!g_file_test (marker, G_FILE_TEST_EXISTS))
        {
          g_assert_cmpuint (waited++, <, 20000);
          g_usleep (1000);
        }
      g_assert_cmpint (kill (pid, SIGKILL), ==, 0);
      status = wait_child (pid);
      g_assert_true (WIFSIGNALED (status));
      g_unlink (marker);
      crash_check (&c, expected_after (point, FALSE));
      crash_teardown (&c);
    }
}

static void
test_crash_random_time (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  Crash c;
  gint64 start, duration;
  guint completed = 0;

  crash_setup (&c, 1 << 19);
  /* How long a whole save takes here, to spread the kills over it. */
  {
    g_autofree gchar *scratch = g_build_filename (c.root, "timing", NULL);

    start = g_get_monotonic_time ();
    save (c.engine, scratch);
    duration = g_get_monotonic_time () - start;
    ckpt_remove_tree (scratch);
  }
  for (guint round = 0; round < 8; round++)
    {
      GPid pid = crash_child (&c, NULL, NULL, NULL);
      gint status;

      g_usleep ((gulong) g_rand_double_range (rand, 0, 1.2 * (gdouble) duration));
      kill (pid, SIGKILL);
      status = wait_child (pid);
      completed += WIFEXITED (status) && WEXITSTATUS (status) == 0;
      crash_check (&c, -1);
    }
  g_test_message ("%u of 8 saves finished before the kill (a save takes %" G_GINT64_FORMAT " us)",
                  completed, duration);
  crash_teardown (&c);
}

/* ---------------------------------------------------------------- corruption */

typedef struct
{
  gchar *root;
  gchar *good;               /* root/step-3 */
  gchar *scratch;            /* a damaged copy, remade per case */
  MixprecEngine *victim;     /* every failing load goes into it */
  GPtrArray *victim_before;
} Battery;

static void
battery_setup (Battery *b)
{
  g_autoptr(MixprecEngine) e = fresh_engine (FP16, 0, 0);

  b->root = ckpt_make_tmpdir ();
  ckpt_train (e, 0, 3, TRUE);
  save (e, b->root);
  b->good = g_build_filename (b->root, "step-3", NULL);
  b->scratch = g_build_filename (b->root, "damaged", NULL);
  b->victim = fresh_engine (FP16, 1, 0);
  b->victim_before = ckpt_snapshot (b->victim);
}

static void
battery_teardown (Battery *b)
{
  g_autoptr(GPtrArray) after = ckpt_snapshot (b->victim);

  /* No failed load changed the engine. */
  ckpt_assert_same (b->victim_before, after);
  ckpt_remove_tree (b->root);
  g_free (b->root);
  g_free (b->good);
  g_free (b->scratch);
  g_object_unref (b->victim);
  g_ptr_array_unref (b->victim_before);
}

static gchar *
fresh_copy (Battery     *b,
            const gchar *file)
{
  ckpt_remove_tree (b->scratch);
  copy_dir (b->good, b->scratch);
  return file != NULL ? g_build_filename (b->scratch, file, NULL) : NULL;
}

static void
expect_load_error (Battery     *b,
                   gint         code,
                   const gchar *needle)
{
  g_autoptr(GError) error = NULL;

  g_assert_false (mixprec_engine_load_checkpoint (b->victim, b->scratch, &error));
  assert_error_names (error, code, needle);
  g_test_message ("%s", error->message);
}

static guint64
header_end (const gchar *shard)
{
  g_autoptr(GBytes) bytes = read_file (shard);
  const guint8 *p = g_bytes_get_data (bytes, NULL);
  guint64 n = 0;

  for (guint i = 0; i < 8; i++)
    n |= (guint64) p[i] << (8 * i);
  return 8 + n;
}

/* Rewrites a manifest's recorded size and SHA-256 of the shard so the
 * checksums pass and the structural checks behind them are reached. */
static void
reseal (Battery *b)
{
  g_autofree gchar *manifest = g_build_filename (b->scratch, "manifest.json", NULL);
  g_autofree gchar *shard = g_build_filename (b->scratch, "rank-00000.safetensors", NULL);
  g_autofree gchar *good_manifest = g_build_filename (b->good, "manifest.json", NULL);
  g_autofree gchar *good_shard = g_build_filename (b->good, "rank-00000.safetensors", NULL);
  g_autoptr(GBytes) text = read_file (good_manifest);
  g_autoptr(GBytes) old = read_file (good_shard);
  g_autoptr(GBytes) new = read_file (shard);
  g_autofree gchar *old_sum = g_compute_checksum_for_bytes (G_CHECKSUM_SHA256, old);
  g_autofree gchar *new_sum = g_compute_checksum_for_bytes (G_CHECKSUM_SHA256, new);
  g_autofree gchar *old_size = g_strdup_printf ("\"size\": %" G_GSIZE_FORMAT, g_bytes_get_size (old));
  g_autofree gchar *new_size = g_strdup_printf ("\"size\": %" G_GSIZE_FORMAT, g_bytes_get_size (new));
  g_autofree gchar *s1 = g_strndup (g_bytes_get_data (text, NULL), g_bytes_get_size (text));
  g_autofree gchar *s2 = replace (s1, old_sum, new_sum);
  g_autofree gchar *s3 = replace (s2, old_size, new_size);

  write_file (manifest, s3, strlen (s3));
}

/* Replaces text in a shard's header and re-pads it as the format wants. */
static void
edit_shard_header (const gchar *shard,
                   const gchar *old,
                   const gchar *new)
{
  g_autoptr(GBytes) bytes = read_file (shard);
  gsize size;
  const guint8 *p = g_bytes_get_data (bytes, &size);
  guint64 end = header_end (shard);
  g_autofree gchar *header = g_strndup ((const gchar *) p + 8, end - 8);
  g_autofree gchar *edited = replace (g_strchomp (header), old, new);
  GString *out = g_string_new (NULL);
  guint64 n;
  guint8 prefix[8];

  g_string_append (out, edited);
  while (out->len % 8 != 0)
    g_string_append_c (out, ' ');
  n = out->len;
  for (guint i = 0; i < 8; i++)
    prefix[i] = (guint8) (n >> (8 * i));
  g_string_prepend_len (out, (const gchar *) prefix, 8);
  g_string_append_len (out, (const gchar *) p + end, size - end);
  write_file (shard, out->str, out->len);
  g_string_free (out, TRUE);
}

static void
edit_manifest (Battery     *b,
               const gchar *old,
               const gchar *new)
{
  g_autofree gchar *path = g_build_filename (b->scratch, "manifest.json", NULL);
  g_autoptr(GBytes) text = read_file (path);
  g_autofree gchar *s = g_strndup (g_bytes_get_data (text, NULL), g_bytes_get_size (text));
  g_autofree gchar *edited = replace (s, old, new);

  write_file (path, edited, strlen (edited));
}

static void
test_corrupt_files (void)
{
  Battery b;
  g_autofree gchar *shard = NULL;
  g_autoptr(GBytes) good = NULL;
  guint64 size, hend;

  battery_setup (&b);
  shard = fresh_copy (&b, "rank-00000.safetensors");
  good = read_file (shard);
  size = g_bytes_get_size (good);
  hend = header_end (shard);

  /* Truncated shards: refused by size before anything is parsed. */
  {
    const guint64 cuts[] = { 0, 1, 7, 8, hend - 1, hend, hend + 1, (hend + size) / 2, size - 1 };

    for (guint i = 0; i < G_N_ELEMENTS (cuts); i++)
      {
        fresh_copy (&b, NULL);
        write_file (shard, g_bytes_get_data (good, NULL), cuts[i]);
        expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "rank-00000.safetensors");
        expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "truncated");
      }
  }
  /* Grown. */
  {
    g_autofree guint8 *longer = g_malloc0 (size + 1);

    fresh_copy (&b, NULL);
    memcpy (longer, g_bytes_get_data (good, NULL), size);
    write_file (shard, longer, size + 1);
    expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "appended");
  }
  /* Single flipped bytes, in the length, the header and the data. */
  {
    const guint64 flips[] = { 0, 3, 8, hend / 2, hend - 1, hend, (hend + size) / 2, size - 1 };

    for (guint i = 0; i < G_N_ELEMENTS (flips); i++)
      {
        g_autofree guint8 *copy = g_memdup2 (g_bytes_get_data (good, NULL), size);

        fresh_copy (&b, NULL);
        copy[flips[i]] ^= 0x10;
        write_file (shard, copy, size);
        expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CHECKSUM, "rank-00000.safetensors");
      }
  }
  /* Missing and stray shards. */
  fresh_copy (&b, NULL);
  g_assert_cmpint (g_unlink (shard), ==, 0);
  expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD, "rank-00000.safetensors");
  {
    g_autofree gchar *stray = fresh_copy (&b, "rank-00001.safetensors");

    write_file (stray, g_bytes_get_data (good, NULL), size);
    expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "rank-00001.safetensors");
  }

  /* Damage behind valid checksums: the structural checks. */
  {
    const struct
    {
      const gchar *old;
      const gchar *new;
      const gchar *needle;
    } edits[] = {
      /* a master saved as F16: twice the elements for the same bytes */
      { "\"head.weight/master\":{\"dtype\":\"F32\",\"shape\":[24]",
        "\"head.weight/master\":{\"dtype\":\"F16\",\"shape\":[48]", "F16" },
      { "\"head.weight/exp_avg\"", "\"head.weight/exp_avgX\"", "head.weight/exp_avg" },
      { "\"head.weight/range\":\"0:24\"", "\"head.weight/range\":\"1:24\"", "head.weight" },
      { "\"format\":\"libmixprec-shard\"", "\"format\":\"something-else\"", "something-else" },
      { "\"dtype\":\"F32\"", "\"dtype\":\"F31\"", "unknown dtype 'F31'" },
      { "\"shape\":[24]", "\"shape\":[25]", "data_offsets span" },
    };

    for (guint i = 0; i < G_N_ELEMENTS (edits); i++)
      {
        fresh_copy (&b, NULL);
        edit_shard_header (shard, edits[i].old, edits[i].new);
        reseal (&b);
        expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "rank-00000.safetensors");
        expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, edits[i].needle);
      }
  }
  /* One tensor's data_offsets moved 4 bytes back: it overlaps the one
   * before it. */
  {
    const gchar *key = "\"head.weight/master\":{\"dtype\":\"F32\",\"shape\":[24],\"data_offsets\":[";
    g_autoptr(GBytes) bytes = NULL;
    g_autofree gchar *text = NULL;
    g_autofree gchar *old = NULL;
    g_autofree gchar *new = NULL;
    const gchar *at;
    gchar *next;
    guint64 begin, end;

    fresh_copy (&b, NULL);
    bytes = read_file (shard);
    text = g_strndup ((const gchar *) g_bytes_get_data (bytes, NULL) + 8, hend - 8);
    at = strstr (text, key);
    g_assert_nonnull (at);
    begin = g_ascii_strtoull (at + strlen (key), &next, 10);
    end = g_ascii_strtoull (next + 1, NULL, 10);
    old = g_strdup_printf ("%s%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]", key, begin, end);
    new = g_strdup_printf ("%s%" G_GUINT64_FORMAT ",%" G_GUINT64_FORMAT "]", key, begin - 4, end - 4);
    edit_shard_header (shard, old, new);
    reseal (&b);
    expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "overlaps");
  }
  battery_teardown (&b);
}

static void
test_corrupt_manifest (void)
{
  Battery b;
  g_autofree gchar *manifest = NULL;
  g_autoptr(GBytes) good = NULL;
  g_autofree gchar *deep = NULL;
  GString *nest = g_string_new ("\"format\": \"libmixprec-checkpoint\", \"deep\": ");
  const struct
  {
    const gchar *old;
    const gchar *new;
    gint code;
    const gchar *needle;
  } edits[] = {
    /* 2 is the version of checkpoints with a representation: one that
     * claims it must declare it; 3 is newer than this library. */
    { "\"format_version\": 1", "\"format_version\": 3", MIXPREC_CHECKPOINT_ERROR_VERSION, "format_version 3" },
    { "\"format_version\": 1", "\"format_version\": 2", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "'representation' is missing" },
    { "\"format_version\": 1", "\"format_version\": 1, \"representation\": {}", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "needs format_version 2" },
    { "\"format_version\": 1", "\"format_version\": \"1\"", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "format_version" },
    { "\"format_version\": 1,", "", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "'format_version' is missing" },
    { "\"world_size\": 1,", "", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "'world_size' is missing" },
    { "\"world_size\": 1", "\"world_size\": 0", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "world_size" },
    { "\"zero_stage\": 0", "\"zero_stage\": 7", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "zero_stage" },
    { "\"step\": 3", "\"step\": 4", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "applied_steps + skipped_steps" },
    { "\"end\": 24", "\"end\": 23", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "head.weight" },
    { "\"begin\": 0", "\"begin\": 1", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "no rank" },
    { "\"numel\": 24", "\"numel\": 25", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "numel" },
    { "\"rank\": 0,\n      \"size\"", "\"rank\": 1,\n      \"size\"", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "files[0].rank" },
    { "\"sha256\": \"", "\"sha256\": \"z", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "sha256" },
    { "\"file\": \"rank-00000.safetensors\"", "\"file\": \"../etc/passwd\"", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "file" },
    { "\"name\": \"rank-00000.safetensors\"", "\"name\": \"../rank-00000.safetensors\"", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "files[0].name" },
    { "\"state\": \"", "\"state\": \"{'type': <1>\"", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "loss_scaler.state" },
    { "\"seed\": \"", "\"seed\": \"-", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "seed" },
    { "\"format\": \"libmixprec-checkpoint\"", "\"format\": \"libmixprec-checkpoint\", \"format\": \"x\"",
      MIXPREC_CHECKPOINT_ERROR_CORRUPT, "format" },
    { "\"tag\": \"step-3\"", "\"tag\": \"step-3\" /* */", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "manifest.json" },
    { "\"step\": 3", "\"step\": 99999999999999999999", MIXPREC_CHECKPOINT_ERROR_CORRUPT, "64 bits" },
  };

  battery_setup (&b);
  manifest = fresh_copy (&b, "manifest.json");
  good = read_file (manifest);

  for (guint i = 0; i < G_N_ELEMENTS (edits); i++)
    {
      fresh_copy (&b, NULL);
      edit_manifest (&b, edits[i].old, edits[i].new);
      expect_load_error (&b, edits[i].code, "manifest.json");
      expect_load_error (&b, edits[i].code, edits[i].needle);
    }

  /* Not JSON at all, cut short, empty, not an object, not UTF-8, nested
   * deeper than any parser should recurse. */
  for (guint i = 0; i < 6; i++)
    {
      fresh_copy (&b, NULL);
      switch (i)
        {
        case 0:
          write_file (manifest, g_bytes_get_data (good, NULL), g_bytes_get_size (good) / 2);
          break;
        case 1:
          write_file (manifest, "", 0);
          break;
        case 2:
          write_file (manifest, "[1, 2]", 6);
          break;
        case 3:
          write_file (manifest, "{\"format\": \"\xff\"}", 16);
          break;
        case 4:
          for (guint d = 0; d < 5000; d++)
            g_string_append_c (nest, '[');
          for (guint d = 0; d < 5000; d++)
            g_string_append_c (nest, ']');
          deep = g_strdup_printf ("{%s}", nest->str);
          write_file (manifest, deep, strlen (deep));
          break;
        case 5:
          write_file (manifest, "{\"format\": \"libmixprec-checkpoint\"}", 35);
          break;
        }
      expect_load_error (&b, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "manifest.json");
    }
  g_string_free (nest, TRUE);

  /* The latest pointer. */
  {
    g_autofree gchar *latest = g_build_filename (b.root, "latest", NULL);
    g_autoptr(GError) error = NULL;

    write_file (latest, "../step-3\n", 10);
    g_assert_false (mixprec_engine_load_checkpoint (b.victim, b.root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "latest");
    g_clear_error (&error);
    write_file (latest, "step-3\0x\n", 9);
    g_assert_false (mixprec_engine_load_checkpoint (b.victim, b.root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "latest");
    g_clear_error (&error);
    /* A latest naming nothing, or no latest beside checkpoints: damaged,
     * never "no checkpoint here". */
    write_file (latest, "step-8\n", 7);
    g_assert_false (mixprec_engine_load_checkpoint (b.victim, b.root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_DAMAGED, "step-8");
    g_clear_error (&error);
    g_unlink (latest);
    g_assert_false (mixprec_engine_load_checkpoint (b.victim, b.root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_DAMAGED, b.root);
    g_clear_error (&error);
    write_file (latest, "step-3\n", 7);
  }
  battery_teardown (&b);
}

static void
register_zeros (MixprecEngine *e,
                const gchar   *name,
                const guint64 *shape,
                guint          n_dims,
                const gchar   *module_type)
{
  guint64 numel = 1;
  g_autoptr(GBytes) init = NULL;
  g_autoptr(GError) error = NULL;

  for (guint d = 0; d < n_dims; d++)
    numel *= shape[d];
  init = g_bytes_new_take (g_new0 (gfloat, numel), numel * sizeof (gfloat));
  g_assert_nonnull (mixprec_engine_register_param (e, name, shape, n_dims, module_type,
                                                   MIXPREC_DTYPE_FLOAT32, init, &error));
  g_assert_no_error (error);
}

/* Engines that do not match the checkpoint. */
static void
test_mismatch (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autoptr(MixprecEngine) src = fresh_engine (FP16, 0, 0);
  g_autoptr(GPtrArray) saved = NULL;
  g_autoptr(GError) error = NULL;
  const guint64 wrong[2] = { 8, 3 };
  const guint64 extra[1] = { 5 };

  ckpt_train (src, 0, 3, TRUE);
  saved = ckpt_weights (src);
  save (src, root);

  {
    g_autoptr(MixprecEngine) e = fresh_engine (FP16, 1, 0);
    g_autoptr(GPtrArray) before = NULL;
    g_autoptr(GPtrArray) after = NULL;

    register_zeros (e, "extra.weight", extra, 1, "Linear");
    before = ckpt_snapshot (e);
    g_assert_false (mixprec_engine_load_checkpoint (e, root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_MISSING_PARAM, "extra.weight");
    g_clear_error (&error);
    after = ckpt_snapshot (e);
    ckpt_assert_same (before, after);
  }
  {
    /* The model with head.weight transposed. */
    g_autoptr(MixprecEngine) e = ckpt_engine_new (FP16->json);
    g_autoptr(MixprecEngine) model = fresh_engine (FP16, 1, 0);
    g_autoptr(GPtrArray) params = mixprec_engine_get_params (model);

    for (guint k = 0; k < params->len; k++)
      {
        MixprecParam *p = g_ptr_array_index (params, k);
        guint n_dims;
        const guint64 *shape = mixprec_param_get_shape (p, &n_dims);
        gboolean head = g_str_equal (mixprec_param_get_name (p), "head.weight");

        register_zeros (e, mixprec_param_get_name (p), head ? wrong : shape, n_dims,
                        mixprec_param_get_module_type (p));
      }
    g_assert_false (mixprec_engine_load_checkpoint (e, root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_SHAPE_MISMATCH, "head.weight");
    g_assert_nonnull (strstr (error->message, "[3, 8]"));
    g_clear_error (&error);
  }
  {
    /* An engine without head.weight. */
    g_autoptr(MixprecEngine) e = ckpt_engine_new (FP16->json);
    g_autoptr(MixprecEngine) model = fresh_engine (FP16, 1, 0);
    g_autoptr(GPtrArray) params = mixprec_engine_get_params (model);

    for (guint k = 0; k < params->len; k++)
      {
        MixprecParam *p = g_ptr_array_index (params, k);
        guint n_dims;
        const guint64 *shape = mixprec_param_get_shape (p, &n_dims);

        if (!g_str_equal (mixprec_param_get_name (p), "head.weight"))
          register_zeros (e, mixprec_param_get_name (p), shape, n_dims,
                          mixprec_param_get_module_type (p));
      }
    g_assert_false (mixprec_engine_load_checkpoint (e, root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_UNKNOWN_PARAM, "head.weight");
    g_clear_error (&error);
    g_assert_true (mixprec_engine_load_checkpoint_full (e, root, MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS,
                                                        &error));
    g_assert_no_error (error);
  }
  {
    /* Another optimizer: its state cannot continue, the weights can. */
    g_autoptr(MixprecEngine) e = fresh_engine (&(CkptMode) {
        "sgd", "{\"fp16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"SGD\","
        " \"params\": {\"lr\": 0.1, \"momentum\": 0.9}}}", FALSE }, 1, 0);
    g_autoptr(GPtrArray) loaded = NULL;

    g_assert_false (mixprec_engine_load_checkpoint (e, root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE, "momentum_buffer");
    g_clear_error (&error);
    g_assert_true (mixprec_engine_load_checkpoint_full (e, root, MIXPREC_CHECKPOINT_LOAD_WEIGHTS_ONLY,
                                                        &error));
    g_assert_no_error (error);
    loaded = ckpt_weights (e);
    ckpt_assert_same (saved, loaded);
    /* The counters stay the engine's own: its next step is step 1. */
    ckpt_train (e, 0, 1, FALSE);
  }
  {
    /* The same mode with other scaler semantics: the saved state does not fit. */
    g_autoptr(MixprecEngine) e = fresh_engine (&(CkptMode) {
        "torch", "{\"fp16\": {\"enabled\": true}, \"mixprec\": {\"scaler\": {\"semantics\": \"torch\"}},"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}", FALSE }, 1, 0);

    g_assert_false (mixprec_engine_load_checkpoint (e, root, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE, "manifest.json");
    g_clear_error (&error);
    g_assert_true (mixprec_engine_load_checkpoint_full (e, root, MIXPREC_CHECKPOINT_LOAD_RESET_SCALER,
                                                        &error));
    g_assert_no_error (error);
  }
  {
    g_autoptr(MixprecEngine) e = fresh_engine (FP16, 1, 0);
    g_autofree gchar *nowhere = g_build_filename (root, "nowhere", NULL);

    g_assert_false (mixprec_engine_load_checkpoint (e, nowhere, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND, "nowhere");
    g_clear_error (&error);
  }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- safetensors reader */

static void
write_st (const gchar *path,
          const gchar *header,
          gsize        header_len,
          guint64      claimed_len,
          gsize        data_len)
{
  GString *out = g_string_new (NULL);

  for (guint i = 0; i < 8; i++)
    g_string_append_c (out, (gchar) (claimed_len >> (8 * i)));
  g_string_append_len (out, header, header_len);
  for (gsize i = 0; i < data_len; i++)
    g_string_append_c (out, (gchar) i);
  write_file (path, out->str, out->len);
  g_string_free (out, TRUE);
}

static void
expect_st_error (const gchar *path,
                 const gchar *needle)
{
  g_autoptr(GError) error = NULL;
  _MixprecSafetensors *st = _mixprec_safetensors_open (path, &error);

  if (st != NULL)
    g_error ("%s opened, but should fail with '%s'", path, needle);
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_CORRUPT, path);
  assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_CORRUPT, needle);
}

static void
test_safetensors_crafted (void)
{
  g_autofree gchar *dir = ckpt_make_tmpdir ();
  g_autofree gchar *path = g_build_filename (dir, "t.safetensors", NULL);
  g_autoptr(GError) error = NULL;
  g_autofree gchar *deep = NULL;
  const struct
  {
    const gchar *header;
    gsize data;
    const gchar *needle;
    gsize length;              /* 0: strlen (header) */
  } bad[] = {
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "overlaps" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "gap" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "belong to no tensor" },
    { "{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "unknown dtype" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "span" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.0],\"data_offsets\":[0,4]}}", 4, "shape[0]" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,4]}}", 4, "overflows" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "end before" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 2, "past" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4, "data_offsets" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "a" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4],\"x\":1}}", 4, "unknown key" },
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "lacks" },
    { "{\"__metadata__\":{\"k\":1}}", 0, "__metadata__" },
    { "{\"a\":[]}", 0, "JSON object" },
    { "[]", 0, "'{'" },
    { " {}", 0, "'{'" },
    { "{\"a\xff\":{}}", 0, "UTF-8" },
    { "{\"a\":{} /* comment */}", 0, "header JSON" },
    /* a NUL where padding would be */
    { "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}\0", 4, "UTF-8", 55 },
  };

  /* A valid file first, as a control: padding, metadata, an empty tensor. */
  {
    const gchar *header = "{\"__metadata__\":{\"k\":\"v\"},"
                          "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
                          "\"h\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[8,8]}}   ";
    const gfloat values[2] = { 1.5f, -2.0f };
    g_autoptr(_MixprecSafetensors) st = NULL;
    GString *file = g_string_new (NULL);
    guint64 n = strlen (header);
    gfloat got[2];

    for (guint i = 0; i < 8; i++)
      g_string_append_c (file, (gchar) (n >> (8 * i)));
    g_string_append (file, header);
    g_string_append_len (file, (const gchar *) values, 8);
    write_file (path, file->str, file->len);
    g_string_free (file, TRUE);
    st = _mixprec_safetensors_open (path, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (_mixprec_safetensors_get_metadata (st, "k"), ==, "v");
    g_assert_true (_mixprec_safetensors_read_f32 (st, _mixprec_safetensors_lookup (st, "a"), 0, 2, got, &error));
    g_assert_no_error (error);
    g_assert_cmpmem (got, 8, values, 8);
    g_assert_false (_mixprec_safetensors_read_f32 (st, _mixprec_safetensors_lookup (st, "a"), 1, 2, got, &error));
    g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT);
    g_clear_error (&error);
    /* BF16 (optimizer state saved in bf16) reads widened; other dtypes not. */
    g_assert_true (_mixprec_safetensors_read_f32 (st, _mixprec_safetensors_lookup (st, "z"), 0, 0, got, &error));
    g_assert_no_error (error);
    g_assert_false (_mixprec_safetensors_read_f32 (st, _mixprec_safetensors_lookup (st, "h"), 0, 0, got, &error));
    assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_CORRUPT, "F16");
    g_clear_error (&error);
  }

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      gsize len = bad[i].length > 0 ? bad[i].length : strlen (bad[i].header);

      write_st (path, bad[i].header, len, len, bad[i].data);
      expect_st_error (path, bad[i].needle);
    }

  /* Lengths that lie. */
  write_st (path, "{}", 2, 3, 0);
  expect_st_error (path, "larger than");
  write_st (path, "{}", 2, G_MAXUINT64, 0);
  expect_st_error (path, "larger than");
  write_st (path, "", 0, 0, 0);
  expect_st_error (path, "'{'");
  write_file (path, "\x02\0\0", 3);
  expect_st_error (path, "shorter than");
  {
    g_autofree gchar *big = g_strnfill (_MIXPREC_SAFETENSORS_MAX_HEADER + 8, ' ');

    big[0] = '{';
    big[1] = '}';
    write_st (path, big, _MIXPREC_SAFETENSORS_MAX_HEADER + 8, _MIXPREC_SAFETENSORS_MAX_HEADER + 8, 0);
    expect_st_error (path, "limit");
  }
  /* Nesting far deeper than json-glib should ever recurse. */
  {
    GString *s = g_string_new ("{\"__metadata__\":");

    for (guint d = 0; d < 100000; d++)
      g_string_append_c (s, '[');
    for (guint d = 0; d < 100000; d++)
      g_string_append_c (s, ']');
    g_string_append_c (s, '}');
    deep = g_string_free (s, FALSE);
    write_st (path, deep, strlen (deep), strlen (deep), 0);
    expect_st_error (path, "header JSON");
  }
  ckpt_remove_tree (dir);
}

/* A real shard, cut at many places and with every header byte flipped:
 * the reader must refuse or accept, never crash or read out of bounds
 * (the ASan build runs this too). */
static void
test_safetensors_damage (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *shard = g_build_filename (root, "step-2", "rank-00000.safetensors", NULL);
  g_autofree gchar *path = g_build_filename (root, "damaged.safetensors", NULL);
  g_autoptr(MixprecEngine) e = fresh_engine (FP16, 0, 0);
  g_autoptr(GBytes) good = NULL;
  g_autofree guint8 *copy = NULL;
  gsize size;
  guint64 hend;
  guint refused = 0, accepted = 0;

  ckpt_train (e, 0, 2, FALSE);
  save (e, root);
  good = read_file (shard);
  size = g_bytes_get_size (good);
  hend = header_end (shard);
  copy = g_memdup2 (g_bytes_get_data (good, NULL), size);

  for (gsize cut = 0; cut < size; cut += (cut < 80 || (cut > hend - 40 && cut < hend + 40)) ? 1 : 97)
    {
      write_file (path, copy, cut);
      expect_st_error (path, "safetensors");
    }

  for (gsize at = 0; at < hend; at++)
    for (guint mask = 0x01; mask <= 0x80; mask <<= 7)
      {
        g_autoptr(GError) error = NULL;
        _MixprecSafetensors *st;

        copy[at] ^= (guint8) mask;
        write_file (path, copy, size);
        copy[at] ^= (guint8) mask;
        st = _mixprec_safetensors_open (path, &error);
        if (st == NULL)
          {
            assert_error_names (error, MIXPREC_CHECKPOINT_ERROR_CORRUPT, path);
            refused++;
          }
        else
          accepted++;
        /* A byte outside ASCII can never be valid in the JSON header. */
        if (mask == 0x80 && at >= 8)
          g_assert_null (st);
        g_clear_pointer (&st, _mixprec_safetensors_free);
      }
  g_test_message ("header flips: %u refused, %u accepted", refused, accepted);
  g_assert_cmpuint (refused, >, accepted);
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- mixprec-inspect */

static gint
run_inspect (const gchar  *tool,
             const gchar  *dir,
             gboolean      verify,
             gchar       **out,
             gchar       **err)
{
  const gchar *argv[] = { tool, "--checkpoint", dir, verify ? "--verify" : NULL, NULL };
  g_autoptr(GError) error = NULL;
  gint status = 0;

  g_assert_true (g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                               out, err, &status, &error));
  g_assert_no_error (error);
  return WIFEXITED (status) ? WEXITSTATUS (status) : -1;
}

static void
test_inspect_tool (void)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *tool = NULL;
  g_autofree gchar *root = NULL;
  g_autofree gchar *shard = NULL;
  g_autofree gchar *missing = NULL;
  g_autoptr(MixprecEngine) e = NULL;
  const gchar *expected[] = {
    "(tag step-9)", "format version   1 (saved by libmixprec " MIXPREC_VERSION_S ")",
    "step             9 (7 applied, 2 skipped)", "precision mode   fp16", "world size       1",
    "ZeRO stage       0", "optimizer        adamw (state: exp_avg, exp_avg_sq)",
    "LR schedule      WarmupCosineLR at position 7", "loss scaler      MixprecDynamicScaler",
    "rank-00000.safetensors", "head.weight", "[3, 8]", "Linear", "rank 0 [0, 24)",
    "embed.weight", "[23, 8]", "Embedding", "rank 0 [0, 184)", "verify: 1 file match",
  };

  if (top == NULL)
    {
      g_test_skip ("MIXPREC_TOP_BUILDDIR is not set: run the test through make check");
      return;
    }
  tool = g_build_filename (top, "tools", "mixprec-inspect", NULL);
  root = ckpt_make_tmpdir ();
  e = fresh_engine (FP16, 0, 0);
  ckpt_train (e, 0, 9, TRUE);
  save (e, root);

  {
    g_autofree gchar *out = NULL;
    g_autofree gchar *err = NULL;

    g_assert_cmpint (run_inspect (tool, root, TRUE, &out, &err), ==, 0);
    for (guint i = 0; i < G_N_ELEMENTS (expected); i++)
      if (strstr (out, expected[i]) == NULL)
        g_error ("mixprec-inspect --checkpoint printed no '%s':\n%s", expected[i], out);
  }
  /* A damaged shard: described without --verify, refused with it. */
  shard = g_build_filename (root, "step-9", "rank-00000.safetensors", NULL);
  {
    g_autoptr(GBytes) bytes = read_file (shard);
    g_autofree guint8 *copy = g_memdup2 (g_bytes_get_data (bytes, NULL), g_bytes_get_size (bytes));
    g_autofree gchar *out = NULL;
    g_autofree gchar *err = NULL;

    copy[g_bytes_get_size (bytes) - 3] ^= 0x01;
    write_file (shard, copy, g_bytes_get_size (bytes));
    g_assert_cmpint (run_inspect (tool, root, FALSE, &out, &err), ==, 0);
    g_clear_pointer (&out, g_free);
    g_clear_pointer (&err, g_free);
    g_assert_cmpint (run_inspect (tool, root, TRUE, &out, &err), ==, 1);
    g_assert_nonnull (strstr (err, "rank-00000.safetensors"));
    g_assert_nonnull (strstr (err, "SHA-256"));
    g_assert_nonnull (strstr (out, "verify: FAILED"));
  }
  missing = g_build_filename (root, "missing", NULL);
  {
    g_autofree gchar *out = NULL;
    g_autofree gchar *err = NULL;

    g_assert_cmpint (run_inspect (tool, missing, FALSE, &out, &err), ==, 1);
    g_assert_nonnull (strstr (err, missing));
  }
  ckpt_remove_tree (root);
}

int
main (int argc, char **argv)
{
  /* GLib's slice allocator keeps what a leak loses reachable from its own
   * slabs, out of LeakSanitizer's sight, so this program runs with every
   * slice a malloc() of its own (then /checkpoint/reopen-many catches a
   * manifest leaked per open). Only here: set for the whole suite it made
   * LeakSanitizer's tracer crash at the exit of the multi-process tests'
   * ranks. The allocator reads the variable once, before main(), so the
   * program starts itself again with it. */
  if (g_strcmp0 (g_getenv ("G_SLICE"), "always-malloc") != 0)
    {
      g_autofree gchar *self = g_file_read_link ("/proc/self/exe", NULL);

      if (self != NULL && g_setenv ("G_SLICE", "always-malloc", TRUE))
        execv (self, argv);
    }
  g_test_init (&argc, &argv, NULL);

  for (guint i = 0; i < G_N_ELEMENTS (ckpt_modes); i++)
    {
      g_autofree gchar *resume = g_strdup_printf ("/checkpoint/resume/%s", ckpt_modes[i].name);

      g_test_add_data_func (resume, &ckpt_modes[i], test_resume);
    }
  g_test_add_func ("/checkpoint/cross-precision", test_cross_precision);
  g_test_add_func ("/checkpoint/bf16-optimizer-states", test_bf16_optimizer_states);
  g_test_add_func ("/checkpoint/layout", test_layout);
  g_test_add_data_func ("/checkpoint/export/fp16", &ckpt_modes[1], test_export);
  g_test_add_data_func ("/checkpoint/export/bf16-no-master", &ckpt_modes[3], test_export);
  g_test_add_data_func ("/checkpoint/export/fp16-no-master", &ckpt_modes[5], test_export);
  g_test_add_func ("/checkpoint/crash/abort-at-each-point", test_crash_abort);
  g_test_add_func ("/checkpoint/crash/pause-then-kill", test_crash_pause_kill);
  g_test_add_func ("/checkpoint/crash/kill-at-random-time", test_crash_random_time);
  g_test_add_func ("/checkpoint/corrupt/files", test_corrupt_files);
  g_test_add_func ("/checkpoint/corrupt/manifest", test_corrupt_manifest);
  g_test_add_func ("/checkpoint/mismatch", test_mismatch);
  g_test_add_func ("/checkpoint/damaged/latest", test_damaged_latest);
  g_test_add_func ("/checkpoint/reopen-many", test_reopen_many);
  g_test_add_func ("/checkpoint/empty-path", test_empty_path);
  g_test_add_func ("/checkpoint/safetensors/crafted", test_safetensors_crafted);
  g_test_add_func ("/checkpoint/safetensors/damage", test_safetensors_damage);
  g_test_add_func ("/checkpoint/inspect-tool", test_inspect_tool);
  return g_test_run ();
}
