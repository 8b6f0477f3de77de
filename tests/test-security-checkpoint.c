/* test-security-checkpoint.c — the checkpoint attacks of issue 25,
 * replayed against the real library and the real mixprec-inspect: a link
 * at a save's tag or under a `.tmp-*` name must never let a save delete
 * what it points to; a FIFO or a link to a device in place of a shard is
 * an error within seconds, never a hang; a manifest whose world size and
 * file list disagree is refused; a failed write leaves no `.partial`.
 *
 * The expectations come from the attack description: what a link points
 * to stays bit-identical, and every refusal names the offending path. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include <mixprec/mixprec.h>
#include "checkpoint-common.h"

/* The attack must end well inside this: a hang is what it used to do. */
#define DEADLINE_SECONDS 5

/* fp32: the mode does not matter here, only the files. */
#define MODE (&ckpt_modes[0])

static MixprecEngine *
trained_engine (guint   steps,
                guint64 extra)
{
  MixprecEngine *e = ckpt_engine_new (MODE->json);

  ckpt_build_model (e, 0, extra);
  ckpt_train (e, 0, steps, FALSE);
  return e;
}

static void
save_tag (MixprecEngine *e,
          const gchar   *root,
          const gchar   *tag)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (mixprec_engine_save_checkpoint_full (e, root, tag, 0, &error));
  g_assert_no_error (error);
}

/* name -> contents of every entry of @dir, descending into folders but
 * never through links (a link is recorded as "link:" + its target). */
static void
collect_tree (GHashTable  *tree,
              const gchar *dir,
              const gchar *prefix)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  g_assert_nonnull (d);
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *path = g_build_filename (dir, name, NULL);
      g_autofree gchar *key = g_build_filename (prefix, name, NULL);
      gchar *data = NULL;
      gsize length = 0;

      if (g_file_test (path, G_FILE_TEST_IS_SYMLINK))
        {
          g_autofree gchar *target = g_file_read_link (path, NULL);

          g_hash_table_insert (tree, g_steal_pointer (&key),
                               g_bytes_new_take (g_strconcat ("link:", target, NULL),
                                                 strlen (target) + 5));
        }
      else if (g_file_test (path, G_FILE_TEST_IS_DIR))
        collect_tree (tree, path, key);
      else
        {
          g_assert_true (g_file_get_contents (path, &data, &length, NULL));
          g_hash_table_insert (tree, g_steal_pointer (&key), g_bytes_new_take (data, length));
        }
    }
}

static GHashTable *
snapshot_tree (const gchar *dir)
{
  GHashTable *tree = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                            (GDestroyNotify) g_bytes_unref);

  collect_tree (tree, dir, "");
  return tree;
}

static void
assert_tree_unchanged (GHashTable  *before,
                       const gchar *dir)
{
  g_autoptr(GHashTable) after = snapshot_tree (dir);
  GHashTableIter it;
  gpointer key, value;

  g_hash_table_iter_init (&it, before);
  while (g_hash_table_iter_next (&it, &key, &value))
    {
      GBytes *now = g_hash_table_lookup (after, key);

      if (now == NULL)
        g_error ("%s/%s was removed", dir, (const gchar *) key);
      if (!g_bytes_equal (now, value))
        g_error ("%s/%s changed", dir, (const gchar *) key);
    }
  g_assert_cmpuint (g_hash_table_size (after), ==, g_hash_table_size (before));
}

static void
assert_link_error (const GError *error,
                   const gchar  *link_path)
{
  g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO);
  if (strstr (error->message, link_path) == NULL ||
      strstr (error->message, "symbolic link") == NULL)
    g_error ("the error does not name the link %s: %s", link_path, error->message);
}

/* ---------------------------------------------------------------- saves next to links */

/* ln -s step-2 SAVE/step-6, then a run at step 6 saves: step-2 stays
 * bit-identical and the save is refused naming the link (libmixprec
 * never replaces what it did not create). */
static void
test_save_tag_is_link (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *step2 = g_build_filename (root, "step-2", NULL);
  g_autofree gchar *link = g_build_filename (root, "step-6", NULL);
  g_autoptr(MixprecEngine) e = trained_engine (2, 0);
  g_autoptr(GHashTable) before = NULL;
  g_autoptr(GError) error = NULL;

  save_tag (e, root, NULL);
  before = snapshot_tree (root);
  g_assert_cmpint (symlink ("step-2", link), ==, 0);
  ckpt_train (e, 2, 4, FALSE);

  g_assert_false (mixprec_engine_save_checkpoint (e, root, &error));
  assert_link_error (error, link);
  /* Everything that was there is as it was (step-2, latest), and the
   * link is still a link to it. */
  g_hash_table_insert (before, g_build_filename ("", "step-6", NULL),
                       g_bytes_new ("link:step-2", 11));
  assert_tree_unchanged (before, root);
  g_assert_true (g_file_test (step2, G_FILE_TEST_IS_DIR));

  ckpt_remove_tree (root);
}

/* A `.tmp-*` link to a folder outside: neither the clean-up before the
 * save (its own `.tmp-TAG`) nor the one after it (any `.tmp-*`) may
 * delete a file in that folder. */
static void
check_tmp_link (const gchar *link_name)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *victim = ckpt_make_tmpdir ();
  g_autofree gchar *link = g_build_filename (root, link_name, NULL);
  g_autofree gchar *file = g_build_filename (victim, "precious.txt", NULL);
  g_autofree gchar *shard = g_build_filename (victim, "rank-00000.safetensors", NULL);
  g_autoptr(MixprecEngine) e = trained_engine (4, 0);
  g_autoptr(GHashTable) before = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_set_contents (file, "not yours\n", -1, NULL));
  g_assert_true (g_file_set_contents (shard, "looks like a shard\n", -1, NULL));
  before = snapshot_tree (victim);
  g_assert_cmpint (symlink (victim, link), ==, 0);

  g_assert_false (mixprec_engine_save_checkpoint (e, root, &error));
  assert_link_error (error, link);
  assert_tree_unchanged (before, victim);
  g_assert_true (g_file_test (link, G_FILE_TEST_IS_SYMLINK));

  ckpt_remove_tree (root);
  ckpt_remove_tree (victim);
}

static void
test_save_own_tmp_is_link (void)
{
  check_tmp_link (".tmp-step-4");
}

static void
test_save_other_tmp_is_link (void)
{
  check_tmp_link (".tmp-step-99");
}

/* The same save succeeds once the link is gone, and its leftovers
 * clean-up removes only real leftovers. */
static void
test_save_after_link_removed (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *link = g_build_filename (root, ".tmp-step-4", NULL);
  g_autofree gchar *stale = g_build_filename (root, ".tmp-step-1", NULL);
  g_autofree gchar *stale_file = g_build_filename (stale, "rank-00000.safetensors", NULL);
  g_autoptr(MixprecEngine) e = trained_engine (4, 0);
  g_autoptr(GError) error = NULL;

  g_assert_cmpint (symlink ("/", link), ==, 0);
  g_assert_false (mixprec_engine_save_checkpoint (e, root, &error));
  g_clear_error (&error);
  g_assert_cmpint (g_unlink (link), ==, 0);
  g_assert_cmpint (g_mkdir (stale, 0755), ==, 0);
  g_assert_true (g_file_set_contents (stale_file, "half a shard", -1, NULL));

  save_tag (e, root, NULL);
  g_assert_false (g_file_test (stale, G_FILE_TEST_EXISTS));
  {
    g_autoptr(MixprecCheckpoint) ckpt = mixprec_checkpoint_open (root, &error);

    g_assert_no_error (error);
    g_assert_true (mixprec_checkpoint_verify (ckpt, &error));
    g_assert_no_error (error);
  }
  ckpt_remove_tree (root);
}

/* ---------------------------------------------------------------- manifests */

static void
rewrite_manifest (const gchar *manifest,
                  const gchar *member,
                  gint64       value)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(GError) error = NULL;
  g_autofree gchar *text = NULL;

  g_assert_true (json_parser_load_from_file (parser, manifest, &error));
  g_assert_no_error (error);
  json_object_set_int_member (json_node_get_object (json_parser_get_root (parser)), member, value);
  json_generator_set_root (gen, json_parser_get_root (parser));
  text = json_generator_to_data (gen, NULL);
  g_assert_true (g_file_set_contents (manifest, text, -1, NULL));
}

static void
check_world_size_refused (gint64 world_size)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *manifest = g_build_filename (root, "step-3", "manifest.json", NULL);
  g_autofree gchar *shown = g_strdup_printf ("%" G_GINT64_FORMAT, world_size);
  g_autoptr(MixprecEngine) e = trained_engine (3, 0);
  g_autoptr(MixprecEngine) fresh = NULL;
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GError) error = NULL;

  save_tag (e, root, NULL);
  rewrite_manifest (manifest, "world_size", world_size);

  ckpt = mixprec_checkpoint_open (root, &error);
  g_assert_null (ckpt);
  g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT);
  /* Both numbers and the file: the one file listed, the world size claimed. */
  if (strstr (error->message, manifest) == NULL || strstr (error->message, shown) == NULL ||
      strstr (error->message, "1 file") == NULL)
    g_error ("the error does not name %s, world size %s and its 1 file: %s", manifest, shown,
             error->message);
  g_clear_error (&error);

  /* What --resume does: the engine refuses it too, and stays as it was. */
  fresh = ckpt_engine_new (MODE->json);
  ckpt_build_model (fresh, 1, 0);
  g_assert_false (mixprec_engine_load_checkpoint (fresh, root, &error));
  g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT);
  ckpt_remove_tree (root);
}

static void
test_manifest_world_size_huge (void)
{
  check_world_size_refused (1 << 20);
}

static void
test_manifest_world_size_two (void)
{
  check_world_size_refused (2);
}

/* ---------------------------------------------------------------- shards that are not files */

typedef struct
{
  gint    status;            /* waitpid's, or -1 when it ran past the deadline */
  gdouble seconds;
  gchar  *out;               /* stdout + stderr */
} Run;

static void
run_clear (Run *r)
{
  g_free (r->out);
}

/* Runs @argv (or, with @argv NULL, @child in a fork) with its output in a
 * file, killing it at the deadline. */
static void
run_with_deadline (const gchar * const *argv,
                   void               (*child) (gconstpointer data),
                   gconstpointer        data,
                   const gchar         *output,
                   Run                 *r)
{
  gint64 start = g_get_monotonic_time ();
  pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0)
    {
      int fd = open (output, O_WRONLY | O_CREAT | O_TRUNC, 0644);

      dup2 (fd, 1);
      dup2 (fd, 2);
      if (argv != NULL)
        execv (argv[0], (gchar **) argv);
      else
        child (data);
      _exit (127);
    }
  r->status = -1;
  while (g_get_monotonic_time () - start < DEADLINE_SECONDS * G_USEC_PER_SEC)
    {
      int status;
      pid_t got = waitpid (pid, &status, WNOHANG);

      g_assert_cmpint (got, >=, 0);
      if (got == pid)
        {
          r->status = status;
          break;
        }
      g_usleep (10000);
    }
  r->seconds = (g_get_monotonic_time () - start) / (gdouble) G_USEC_PER_SEC;
  if (r->status == -1)
    {
      kill (pid, SIGKILL);
      waitpid (pid, NULL, 0);
    }
  g_assert_true (g_file_get_contents (output, &r->out, NULL, NULL));
}

/* The child's part of a resume: load into a fresh engine; exits 0 when
 * the load was refused with an error (printed), 1 when it loaded. */
static void
resume_child (gconstpointer data)
{
  g_autoptr(MixprecEngine) e = ckpt_engine_new (MODE->json);
  g_autoptr(GError) error = NULL;

  ckpt_build_model (e, 1, 0);
  if (mixprec_engine_load_checkpoint (e, data, &error))
    _exit (1);
  g_printerr ("%s\n", error->message);
  _exit (0);
}

static void
assert_refused_in_time (const Run   *r,
                        gboolean     want_exit_code,
                        const gchar *shard,
                        const gchar *why)
{
  if (r->status == -1)
    g_error ("still running after %d s (it hangs): %s", DEADLINE_SECONDS, r->out);
  g_assert_cmpfloat (r->seconds, <, DEADLINE_SECONDS);
  g_assert_true (WIFEXITED (r->status));
  if (want_exit_code)
    g_assert_cmpint (WEXITSTATUS (r->status), !=, 0);
  else
    g_assert_cmpint (WEXITSTATUS (r->status), ==, 0);
  if (strstr (r->out, shard) == NULL || strstr (r->out, why) == NULL)
    g_error ("the error does not name %s (%s): %s", shard, why, r->out);
}

/* A checkpoint of step 3 whose shard is replaced by @replace (which
 * makes @shard something else), then inspected, verified and resumed. */
static void
check_shard_not_a_file (void        (*replace) (const gchar *shard, const gchar *manifest),
                        const gchar  *why)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *tool = NULL;
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *out = g_build_filename (root, "output.txt", NULL);
  g_autofree gchar *dir = g_build_filename (root, "step-3", NULL);
  g_autofree gchar *shard = g_build_filename (dir, "rank-00000.safetensors", NULL);
  g_autofree gchar *manifest = g_build_filename (dir, "manifest.json", NULL);
  g_autoptr(MixprecEngine) e = trained_engine (3, 0);
  Run r = { 0 };

  save_tag (e, root, NULL);
  g_assert_cmpint (g_unlink (shard), ==, 0);
  replace (shard, manifest);

  if (top != NULL)
    {
      const gchar *verify[] = { NULL, "--checkpoint", dir, "--verify", NULL };

      tool = g_build_filename (top, "tools", "mixprec-inspect", NULL);
      verify[0] = tool;
      run_with_deadline (verify, NULL, NULL, out, &r);
      assert_refused_in_time (&r, TRUE, shard, why);
      run_clear (&r);
    }
  else
    g_test_message ("MIXPREC_TOP_BUILDDIR is not set: mixprec-inspect is not run");

  run_with_deadline (NULL, resume_child, root, out, &r);
  assert_refused_in_time (&r, FALSE, shard, why);
  run_clear (&r);
  ckpt_remove_tree (root);
}

static void
make_fifo (const gchar *shard,
           const gchar *manifest)
{
  g_assert_cmpint (mkfifo (shard, 0644), ==, 0);
}

/* The manifest is made to agree (size 0), so only the file's kind can
 * stop the reader. */
static void
make_dev_zero_link (const gchar *shard,
                    const gchar *manifest)
{
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autofree gchar *text = NULL;
  JsonArray *files;

  g_assert_cmpint (symlink ("/dev/zero", shard), ==, 0);
  g_assert_true (json_parser_load_from_file (parser, manifest, NULL));
  files = json_object_get_array_member (json_node_get_object (json_parser_get_root (parser)),
                                        "files");
  json_object_set_int_member (json_array_get_object_element (files, 0), "size", 0);
  json_generator_set_root (gen, json_parser_get_root (parser));
  text = json_generator_to_data (gen, NULL);
  g_assert_true (g_file_set_contents (manifest, text, -1, NULL));
}

static void
test_shard_fifo (void)
{
  check_shard_not_a_file (make_fifo, "FIFO");
}

static void
test_shard_dev_zero_link (void)
{
  check_shard_not_a_file (make_dev_zero_link, "symbolic link");
}

/* ---------------------------------------------------------------- failed writes */

static gboolean
tree_has_partial (const gchar *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *path = g_build_filename (dir, name, NULL);

      if (g_str_has_suffix (name, ".partial"))
        return TRUE;
      if (!g_file_test (path, G_FILE_TEST_IS_SYMLINK) && g_file_test (path, G_FILE_TEST_IS_DIR) &&
          tree_has_partial (path))
        return TRUE;
    }
  return FALSE;
}

typedef struct
{
  MixprecEngine *engine;
  const gchar   *root;
} SaveJob;

/* A full disk, as far as write() can tell: past RLIMIT_FSIZE (with
 * SIGXFSZ ignored) it fails with EFBIG, as it fails with ENOSPC on a full
 * filesystem; unlike a small tmpfs this needs no privileges. */
static void
save_with_small_disk (gconstpointer data)
{
  const SaveJob *job = data;
  struct rlimit limit = { 64 * 1024, 64 * 1024 };
  g_autoptr(GError) error = NULL;

  signal (SIGXFSZ, SIG_IGN);
  g_assert_cmpint (setrlimit (RLIMIT_FSIZE, &limit), ==, 0);
  if (mixprec_engine_save_checkpoint (job->engine, job->root, &error))
    _exit (1);
  g_printerr ("%s\n", error->message);
  _exit (0);
}

static void
test_no_partial_after_failed_write (void)
{
  g_autofree gchar *root = ckpt_make_tmpdir ();
  g_autofree gchar *out_dir = ckpt_make_tmpdir ();
  g_autofree gchar *out = g_build_filename (out_dir, "output.txt", NULL);
  g_autofree gchar *shard = g_build_filename (root, ".tmp-step-2", "rank-00000.safetensors",
                                              NULL);
  g_autofree gchar *latest = g_build_filename (root, "latest", NULL);
  /* 2^17 extra elements: a shard of more than 1 MiB, far past the limit. */
  g_autoptr(MixprecEngine) e = trained_engine (2, 1 << 17);
  SaveJob job = { e, root };
  Run r = { 0 };

  run_with_deadline (NULL, save_with_small_disk, &job, out, &r);
  assert_refused_in_time (&r, FALSE, shard, g_strerror (EFBIG));
  g_assert_false (tree_has_partial (root));
  /* Nothing was committed either: there is no checkpoint to load. */
  g_assert_false (g_file_test (latest, G_FILE_TEST_EXISTS));
  run_clear (&r);
  ckpt_remove_tree (root);
  ckpt_remove_tree (out_dir);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/security/checkpoint/save/tag-is-link-to-other-checkpoint",
                   test_save_tag_is_link);
  g_test_add_func ("/security/checkpoint/save/own-tmp-is-link-to-victim",
                   test_save_own_tmp_is_link);
  g_test_add_func ("/security/checkpoint/save/other-tmp-is-link-to-victim",
                   test_save_other_tmp_is_link);
  g_test_add_func ("/security/checkpoint/save/after-link-removed", test_save_after_link_removed);
  g_test_add_func ("/security/checkpoint/manifest/world-size-huge", test_manifest_world_size_huge);
  g_test_add_func ("/security/checkpoint/manifest/world-size-two", test_manifest_world_size_two);
  g_test_add_func ("/security/checkpoint/shard/fifo", test_shard_fifo);
  g_test_add_func ("/security/checkpoint/shard/link-to-dev-zero", test_shard_dev_zero_link);
  g_test_add_func ("/security/checkpoint/save/no-partial-after-failed-write",
                   test_no_partial_after_failed_write);
  return g_test_run ();
}
