/* mixprec-checkpoint.c — MixprecCheckpoint: a saved checkpoint opened for
 * inspection, verification, reading and export, without an engine. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"

/**
 * MixprecCheckpoint:
 *
 * A checkpoint on disk, opened from its `manifest.json`.
 *
 * mixprec_engine_save_checkpoint() writes a checkpoint into a folder of
 * its own, `DIR/TAG` (`TAG` is `step-N` by default), and then points
 * `DIR/latest` at it:
 *
 * - `manifest.json`: the format name and `format_version` (1; 2 when the
 *   run kept a remainder or Kahan master or scaled or quantized state,
 *   which the `representation` key and each parameter's `master` then
 *   describe), the
 *   libmixprec version, the step counters, the stochastic-rounding seed,
 *   the precision mode and low dtype, the world size and ZeRO stage at save
 *   time, the loss scaler state (GVariant text), the learning-rate schedule
 *   type and position, the optimizer name, its state slot names and
 *   hyper-parameters; per parameter its name, shape, element count, module
 *   type and *pieces* (which rank saved which element range into which
 *   file); per file its name, size and SHA-256.
 * - `rank-NNNNN.safetensors`, one per rank: for each piece the rank owns,
 *   a tensor `PARAM/master` (the FP32 master weights of that range, 1-D)
 *   and one F32 tensor `PARAM/SLOT` per optimizer state slot (in
 *   format_version 2, each as the engine kept it, with
 *   `PARAM/master/remainder`, `PARAM/master/compensation` and
 *   `PARAM/SLOT/scales` beside them; mixprec-checkpoint(5) lists them). Its
 *   `__metadata__` holds `format` ("libmixprec-shard"), `format_version`,
 *   `rank`, `world_size`, `step` and, per parameter, `PARAM/range`
 *   ("begin:end") and `PARAM/shape` ("d0,d1,...").
 *
 * Opening a checkpoint reads and validates its manifest only;
 * mixprec_checkpoint_verify() checks every file's size and SHA-256, and
 * the read functions validate each shard file's header before reading it.
 * Nothing in the files is executed, and no length read from them is used
 * before it is checked against the file's size.
 *
 * Since: 1.0
 */

struct _MixprecCheckpoint
{
  GObject parent_instance;

  gchar *path;               /* the checkpoint folder (holding manifest.json) */
  gchar *manifest_path;
  _MixprecManifest manifest;
  GPtrArray *shards;         /* _MixprecSafetensors or NULL, per manifest file */
  guint8 *verified;          /* per file: 1 once its checksum matched */
};

G_DEFINE_FINAL_TYPE (MixprecCheckpoint, mixprec_checkpoint, G_TYPE_OBJECT)
/**
 * mixprec_checkpoint_error_quark:
 *
 * Gets the error domain of #MixprecCheckpoint and of saving and loading checkpoints.
 *
 * Returns: the quark behind %MIXPREC_CHECKPOINT_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-checkpoint-error-quark, mixprec_checkpoint_error)

static void
mixprec_checkpoint_finalize (GObject *object)
{
  MixprecCheckpoint *self = MIXPREC_CHECKPOINT (object);

  g_clear_pointer (&self->shards, g_ptr_array_unref);
  _mixprec_manifest_clear (&self->manifest);
  g_free (self->verified);
  g_free (self->manifest_path);
  g_free (self->path);
  G_OBJECT_CLASS (mixprec_checkpoint_parent_class)->finalize (object);
}

static void
mixprec_checkpoint_class_init (MixprecCheckpointClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_checkpoint_finalize;
}

static void
mixprec_checkpoint_init (MixprecCheckpoint *self)
{
  _mixprec_manifest_init (&self->manifest);
}

/* The first entry of @dir that a save leaves behind: a folder holding a
 * `manifest.json` or a shard file, or a whole checkpoint a save set aside
 * (`.tmp-TAG.old`). %NULL when there is none. */
static gchar *
find_saved_entry (const gchar *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  if (d == NULL)
    return NULL;
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *path = g_build_filename (dir, name, NULL);
      g_autoptr(GDir) sub = NULL;
      const gchar *inner;

      if (g_str_has_prefix (name, _MIXPREC_CHECKPOINT_TMP_PREFIX) && g_str_has_suffix (name, ".old"))
        return g_strdup (name);
      if (name[0] == '.' || (sub = g_dir_open (path, 0, NULL)) == NULL)
        continue;
      while ((inner = g_dir_read_name (sub)) != NULL)
        if (g_str_equal (inner, _MIXPREC_CHECKPOINT_MANIFEST) ||
            (g_str_has_prefix (inner, "rank-") && g_str_has_suffix (inner, ".safetensors")))
          return g_strdup (name);
    }
  return NULL;
}

/* A checkpoint folder, or a save root whose `latest` names one. A root
 * that holds checkpoints but not the one `latest` should name is damaged,
 * never empty: a caller that took it for empty would start over and save
 * over the checkpoints still there. */
static gchar *
resolve (const gchar *dir,
         GError     **error)
{
  g_autofree gchar *manifest = g_build_filename (dir, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
  g_autofree gchar *latest = g_build_filename (dir, _MIXPREC_CHECKPOINT_LATEST, NULL);
  g_autofree gchar *text = NULL;
  g_autofree gchar *target = NULL;
  g_autofree gchar *target_manifest = NULL;
  gsize length;

  if (dir[0] == '\0')
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "the checkpoint folder is an empty path (''); name a folder, such as "
                   "'checkpoints' or '.'");
      return NULL;
    }
  if (g_file_test (manifest, G_FILE_TEST_EXISTS))
    return g_strdup (dir);
  if (!g_file_test (dir, G_FILE_TEST_IS_DIR))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND,
                   "%s: %s", dir, g_file_test (dir, G_FILE_TEST_EXISTS) ? "not a folder"
                                                                       : "no such folder");
      return NULL;
    }
  if (!g_file_test (latest, G_FILE_TEST_EXISTS))
    {
      g_autofree gchar *saved = find_saved_entry (dir);

      if (saved != NULL)
        g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_DAMAGED,
                     "%s: holds checkpoints (such as %s) but no %s file naming the one to "
                     "load; write the tag of the one to load into it", dir, saved,
                     _MIXPREC_CHECKPOINT_LATEST);
      else
        g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND,
                     "%s: holds neither %s (a checkpoint) nor %s (a folder of checkpoints)",
                     dir, _MIXPREC_CHECKPOINT_MANIFEST, _MIXPREC_CHECKPOINT_LATEST);
      return NULL;
    }
  text = _mixprec_read_small_file (latest, 4096, &length, error);
  if (text == NULL)
    return NULL;
  /* One line: the tag and a newline. A NUL inside makes strlen differ. */
  if (length > 0 && text[length - 1] == '\n')
    text[--length] = '\0';
  if (strlen (text) != length || !_mixprec_checkpoint_name_is_valid (text))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: must hold the tag of a checkpoint in this folder (a plain name such "
                   "as step-100), got something else", latest);
      return NULL;
    }
  target = g_build_filename (dir, text, NULL);
  target_manifest = g_build_filename (target, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
  if (!g_file_test (target_manifest, G_FILE_TEST_EXISTS))
    {
      g_autofree gchar *aside_name = g_strconcat (_MIXPREC_CHECKPOINT_TMP_PREFIX, text, ".old", NULL);
      g_autofree gchar *aside = g_build_filename (dir, aside_name, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
      gboolean has_aside = g_file_test (aside, G_FILE_TEST_EXISTS);

      /* Where a filesystem cannot swap folders atomically, a crash while
       * re-saving a tag leaves the old checkpoint under this name; saves
       * never remove it (see remove_stale()). */
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_DAMAGED,
                   "%s names '%s', but %s does not exist%s%s%s", latest, text, target_manifest,
                   has_aside ? "; the previous checkpoint of that tag is whole in " : "; "
                   "mixprec_checkpoint_open_newest_intact() (charlm --resume) falls back to the "
                   "newest checkpoint that is whole",
                   has_aside ? aside_name : "",
                   has_aside ? ": rename it to the tag to load it" : "");
      return NULL;
    }
  return g_steal_pointer (&target);
}

/* A shard file the manifest does not list means the folder mixes files of
 * two saves (or a hand-made copy went wrong): nothing in it can be trusted
 * to belong together. */
static gboolean
check_no_stray_shards (MixprecCheckpoint *self,
                       GError           **error)
{
  g_autoptr(GDir) d = g_dir_open (self->path, 0, NULL);
  const gchar *name;

  if (d == NULL)
    return TRUE;
  while ((name = g_dir_read_name (d)) != NULL)
    {
      gboolean listed = FALSE;

      if (!g_str_has_prefix (name, "rank-") || !g_str_has_suffix (name, ".safetensors"))
        continue;
      for (guint i = 0; i < self->manifest.files->len && !listed; i++)
        listed = g_str_equal (name, ((_MixprecManifestFile *) g_ptr_array_index (self->manifest.files, i))->name);
      if (!listed)
        {
          g_autofree gchar *path = g_build_filename (self->path, name, NULL);

          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                       "%s: a shard file that %s does not list (world size %u): the folder "
                       "mixes files of different saves", path, _MIXPREC_CHECKPOINT_MANIFEST,
                       self->manifest.world_size);
          return FALSE;
        }
    }
  return TRUE;
}

/**
 * mixprec_checkpoint_open:
 * @dir: a checkpoint folder (holding `manifest.json`), or a folder of
 *   checkpoints whose `latest` file names one
 * @error: return location for a #GError
 *
 * Opens a checkpoint and validates its manifest: strict JSON, every key
 * present with the right type and range, each parameter's pieces covering
 * it exactly once, every piece in a listed file. The shard files are not
 * read yet.
 *
 * %MIXPREC_CHECKPOINT_ERROR_NOT_FOUND means there is no checkpoint at
 * @dir at all. A folder of checkpoints whose `latest` names a folder or a
 * `manifest.json` that does not exist, or that holds checkpoint folders
 * but no `latest`, fails with %MIXPREC_CHECKPOINT_ERROR_DAMAGED instead:
 * a trainer must not take it for an empty folder and start afresh.
 * mixprec_checkpoint_open_newest_intact() falls back to the newest whole
 * checkpoint there.
 *
 * Returns: (transfer full): the checkpoint, or %NULL with @error set:
 *   %MIXPREC_CHECKPOINT_ERROR_NOT_FOUND, %MIXPREC_CHECKPOINT_ERROR_DAMAGED,
 *   %MIXPREC_CHECKPOINT_ERROR_IO, %MIXPREC_CHECKPOINT_ERROR_CORRUPT or
 *   %MIXPREC_CHECKPOINT_ERROR_VERSION
 *
 * Since: 1.0
 */
MixprecCheckpoint *
mixprec_checkpoint_open (const gchar *dir,
                         GError     **error)
{
  g_autoptr(MixprecCheckpoint) self = NULL;
  g_autofree gchar *path = NULL;
  g_autofree gchar *data = NULL;
  gsize length;

  g_return_val_if_fail (dir != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  path = resolve (dir, error);
  if (path == NULL)
    return NULL;
  self = g_object_new (MIXPREC_TYPE_CHECKPOINT, NULL);
  self->path = g_steal_pointer (&path);
  self->manifest_path = g_build_filename (self->path, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
  data = _mixprec_read_small_file (self->manifest_path, _MIXPREC_CHECKPOINT_MAX_MANIFEST,
                                   &length, error);
  if (data == NULL ||
      !_mixprec_manifest_parse (&self->manifest, self->manifest_path, data, length, error))
    return NULL;
  if (!check_no_stray_shards (self, error))
    return NULL;
  self->shards = g_ptr_array_new_full (self->manifest.files->len,
                                       (GDestroyNotify) _mixprec_safetensors_free);
  g_ptr_array_set_size (self->shards, self->manifest.files->len);
  self->verified = g_new0 (guint8, MAX (self->manifest.files->len, 1));
  return g_steal_pointer (&self);
}

static gint
compare_names (gconstpointer a,
               gconstpointer b)
{
  return strcmp (*(const gchar * const *) a, *(const gchar * const *) b);
}

/* Opens @dir and checks every file's size and SHA-256. */
static MixprecCheckpoint *
open_verified (const gchar *dir,
               GError     **error)
{
  g_autoptr(MixprecCheckpoint) self = mixprec_checkpoint_open (dir, error);

  if (self == NULL || !mixprec_checkpoint_verify (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * mixprec_checkpoint_open_newest_intact:
 * @dir: a folder of checkpoints (the @dir of
 *   mixprec_engine_save_checkpoint()), or one checkpoint folder
 * @skipped: (out) (optional) (nullable) (transfer full): return location
 *   for the checkpoints passed over, one line each naming the folder and
 *   what is wrong with it; %NULL when the one `latest` names was whole
 * @error: return location for a #GError
 *
 * Opens the checkpoint that `@dir/latest` names, like
 * mixprec_checkpoint_open(), and verifies it (mixprec_checkpoint_verify());
 * when that fails for any reason but %MIXPREC_CHECKPOINT_ERROR_NOT_FOUND,
 * opens and verifies every checkpoint folder in @dir instead and returns
 * the whole one with the highest step. This is how a trainer resumes after
 * the newest checkpoint was damaged; it should tell its user which
 * checkpoint it fell back to and print @skipped.
 *
 * Every file of every candidate is read and hashed.
 *
 * Returns: (transfer full): the newest whole checkpoint, or %NULL with
 *   @error set: %MIXPREC_CHECKPOINT_ERROR_NOT_FOUND when @dir holds no
 *   checkpoint at all, %MIXPREC_CHECKPOINT_ERROR_DAMAGED (listing what was
 *   wrong with each) when it holds no whole one, or the error of @dir
 *   itself when @dir is a single checkpoint folder
 *
 * Since: 1.1
 */
MixprecCheckpoint *
mixprec_checkpoint_open_newest_intact (const gchar *dir,
                                       gchar      **skipped,
                                       GError     **error)
{
  g_autoptr(MixprecCheckpoint) best = NULL;
  g_autoptr(GError) latest_error = NULL;
  g_autoptr(GString) report = NULL;
  g_autoptr(GPtrArray) names = NULL;
  g_autofree gchar *manifest = NULL;
  g_autoptr(GDir) d = NULL;
  const gchar *name;

  g_return_val_if_fail (dir != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (skipped != NULL)
    *skipped = NULL;
  best = open_verified (dir, &latest_error);
  if (best != NULL)
    return g_steal_pointer (&best);
  manifest = g_build_filename (dir, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
  if (g_error_matches (latest_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND) ||
      g_file_test (manifest, G_FILE_TEST_EXISTS))
    {
      g_propagate_error (error, g_steal_pointer (&latest_error));
      return NULL;
    }

  report = g_string_new (NULL);
  g_string_append_printf (report, "%s\n", latest_error->message);
  d = g_dir_open (dir, 0, NULL);
  names = g_ptr_array_new_with_free_func (g_free);
  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    g_ptr_array_add (names, g_strdup (name));
  /* Sorted, so that the report and the choice between equal steps do not
   * depend on the order of the folder. */
  g_ptr_array_sort (names, compare_names);
  for (guint i = 0; i < names->len; i++)
    {
      const gchar *entry = g_ptr_array_index (names, i);
      g_autofree gchar *path = g_build_filename (dir, entry, NULL);
      g_autofree gchar *inner = g_build_filename (path, _MIXPREC_CHECKPOINT_MANIFEST, NULL);
      g_autoptr(MixprecCheckpoint) candidate = NULL;
      g_autoptr(GError) local_error = NULL;

      if (entry[0] == '.' || !g_file_test (path, G_FILE_TEST_IS_DIR))
        continue;
      /* A folder without a manifest but with shards is a damaged
       * checkpoint; one with neither is none of ours. */
      if (!g_file_test (inner, G_FILE_TEST_EXISTS))
        {
          g_autoptr(GDir) sub = g_dir_open (path, 0, NULL);
          const gchar *file;
          gboolean shards = FALSE;

          while (sub != NULL && !shards && (file = g_dir_read_name (sub)) != NULL)
            shards = g_str_has_prefix (file, "rank-") && g_str_has_suffix (file, ".safetensors");
          if (shards)
            g_string_append_printf (report, "%s: holds shard files but no %s\n", path,
                                    _MIXPREC_CHECKPOINT_MANIFEST);
          continue;
        }
      candidate = open_verified (path, &local_error);
      if (candidate == NULL)
        {
          g_string_append_printf (report, "%s\n", local_error->message);
          continue;
        }
      if (best == NULL || mixprec_checkpoint_get_step (candidate) > mixprec_checkpoint_get_step (best))
        g_set_object (&best, candidate);
    }
  if (report->len > 0 && report->str[report->len - 1] == '\n')
    g_string_truncate (report, report->len - 1);
  if (best == NULL)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_DAMAGED,
                   "%s: holds no whole checkpoint:\n%s", dir, report->str);
      return NULL;
    }
  if (skipped != NULL)
    *skipped = g_string_free (g_steal_pointer (&report), FALSE);
  return g_steal_pointer (&best);
}

const _MixprecManifest *
_mixprec_checkpoint_get_manifest (MixprecCheckpoint *self)
{
  return &self->manifest;
}

/* ---------------------------------------------------------------- getters */

/**
 * mixprec_checkpoint_get_path:
 * @self: a #MixprecCheckpoint
 *
 * Gives the folder this checkpoint was read from.
 *
 * Returns: the checkpoint's folder (the one holding `manifest.json`, after
 *   following `latest`)
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_path (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->path;
}

/**
 * mixprec_checkpoint_get_tag:
 * @self: a #MixprecCheckpoint
 *
 * Gives the tag (the folder name under the checkpoint root) the checkpoint
 * was saved under.
 *
 * Returns: the tag the checkpoint was saved under, such as "step-100"
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_tag (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.tag;
}

/**
 * mixprec_checkpoint_get_format_version:
 * @self: a #MixprecCheckpoint
 *
 * Gives the version of the checkpoint format the manifest declares; a
 * checkpoint of a newer format than this library reads is refused when
 * opened.
 *
 * Returns: the manifest's format version
 *   (%MIXPREC_CHECKPOINT_FORMAT_VERSION)
 *
 * Since: 1.0
 */
guint
mixprec_checkpoint_get_format_version (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.format_version;
}

/**
 * mixprec_checkpoint_get_libmixprec_version:
 * @self: a #MixprecCheckpoint
 *
 * Gives the version string of the libmixprec that wrote the checkpoint, as
 * recorded in its manifest.
 *
 * Returns: the version of the libmixprec that saved the checkpoint
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_libmixprec_version (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.libmixprec_version;
}

/**
 * mixprec_checkpoint_get_step:
 * @self: a #MixprecCheckpoint
 *
 * Gives the optimizer step count at the save, skipped steps included.
 *
 * Returns: optimizer steps taken before the save, skipped ones included
 *
 * Since: 1.0
 */
guint64
mixprec_checkpoint_get_step (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.step;
}

/**
 * mixprec_checkpoint_get_applied_steps:
 * @self: a #MixprecCheckpoint
 *
 * Gives how many optimizer steps had changed the weights when the
 * checkpoint was saved, that is mixprec_checkpoint_get_step() less the
 * skipped steps.
 *
 * Returns: optimizer steps applied before the save
 *
 * Since: 1.0
 */
guint64
mixprec_checkpoint_get_applied_steps (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.applied_steps;
}

/**
 * mixprec_checkpoint_get_skipped_steps:
 * @self: a #MixprecCheckpoint
 *
 * Gives how many optimizer steps were skipped because of an overflow
 * before the save.
 *
 * Returns: optimizer steps skipped (overflow) before the save
 *
 * Since: 1.0
 */
guint64
mixprec_checkpoint_get_skipped_steps (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.skipped_steps;
}

/**
 * mixprec_checkpoint_get_seed:
 * @self: a #MixprecCheckpoint
 *
 * Gives the seed of the stochastic-rounding random streams at the save, so
 * that a resumed run rounds as the uninterrupted one would have.
 *
 * Returns: the seed of the stochastic-rounding streams (`mixprec.seed`)
 *
 * Since: 1.0
 */
guint64
mixprec_checkpoint_get_seed (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.seed;
}

/**
 * mixprec_checkpoint_get_precision_mode:
 * @self: a #MixprecCheckpoint
 *
 * Gives the precision mode of the engine that saved the checkpoint.
 * Loading works under another mode; this is for reports.
 *
 * Returns: the saving engine's precision mode, as
 *   mixprec_precision_mode_get_name() spells it
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_precision_mode (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.precision_mode;
}

/**
 * mixprec_checkpoint_get_world_size:
 * @self: a #MixprecCheckpoint
 *
 * Gives the number of ranks of the job that saved the checkpoint. A job of
 * another world size loads it too.
 *
 * Returns: the number of ranks that saved the checkpoint (one shard file
 *   each)
 *
 * Since: 1.0
 */
guint
mixprec_checkpoint_get_world_size (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.world_size;
}

/**
 * mixprec_checkpoint_get_zero_stage:
 * @self: a #MixprecCheckpoint
 *
 * Gives the ZeRO stage of the engine that saved the checkpoint. An engine
 * of another stage loads it too.
 *
 * Returns: the ZeRO stage of the saving engine
 *
 * Since: 1.0
 */
guint
mixprec_checkpoint_get_zero_stage (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.zero_stage;
}

/**
 * mixprec_checkpoint_get_scaler_type:
 * @self: a #MixprecCheckpoint
 *
 * Gives the GType name of the loss scaler the saving engine used.
 *
 * Returns: the type name of the saving engine's loss scaler
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_scaler_type (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.scaler_type;
}

/**
 * mixprec_checkpoint_get_scaler_state:
 * @self: a #MixprecCheckpoint
 *
 * Gives the loss scaler's saved state, which
 * mixprec_loss_scaler_restore_state() accepts.
 *
 * Returns: (transfer none): the loss scaler's state as
 *   mixprec_loss_scaler_save_state() gave it (`a{sv}`)
 *
 * Since: 1.0
 */
GVariant *
mixprec_checkpoint_get_scaler_state (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.scaler_state;
}

/**
 * mixprec_checkpoint_get_lr_schedule_type:
 * @self: a #MixprecCheckpoint
 *
 * Gives the type of learning-rate schedule the saving engine ran.
 *
 * Returns: the learning-rate schedule's type, such as "WarmupCosineLR"
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_lr_schedule_type (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.lr_schedule_type;
}

/**
 * mixprec_checkpoint_get_lr_position:
 * @self: a #MixprecCheckpoint
 *
 * Gives the position of the learning-rate schedule at the save, from which
 * a loading engine resumes the schedule.
 *
 * Returns: how many times the schedule had advanced (one per applied step)
 *
 * Since: 1.0
 */
guint64
mixprec_checkpoint_get_lr_position (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.lr_position;
}

/**
 * mixprec_checkpoint_get_optimizer_name:
 * @self: a #MixprecCheckpoint
 *
 * Gives the name of the optimizer whose state the checkpoint holds.
 *
 * Returns: the optimizer feature of the saving engine, such as "adamw"
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_optimizer_name (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return self->manifest.optimizer_name;
}

/**
 * mixprec_checkpoint_get_state_names:
 * @self: a #MixprecCheckpoint
 *
 * Lists the optimizer state slots the checkpoint holds for every parameter
 * element.
 *
 * Returns: (transfer none) (array zero-terminated=1): the optimizer state
 *   slots saved per element, in the optimizer's order
 *
 * Since: 1.0
 */
const gchar * const *
mixprec_checkpoint_get_state_names (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  return (const gchar * const *) self->manifest.state_names;
}

/**
 * mixprec_checkpoint_get_param_names:
 * @self: a #MixprecCheckpoint
 *
 * Lists the names of the parameters the checkpoint holds.
 *
 * Returns: (transfer full): the saved parameters' names, in the order the
 *   saving engine registered them
 *
 * Since: 1.0
 */
GStrv
mixprec_checkpoint_get_param_names (MixprecCheckpoint *self)
{
  GStrv names;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  names = g_new0 (gchar *, self->manifest.params->len + 1);
  for (guint i = 0; i < self->manifest.params->len; i++)
    names[i] = g_strdup (((_MixprecManifestParam *) g_ptr_array_index (self->manifest.params, i))->name);
  return names;
}

static const _MixprecManifestParam *
find_param (MixprecCheckpoint *self,
            const gchar       *name,
            GError           **error)
{
  const _MixprecManifestParam *p = g_hash_table_lookup (self->manifest.param_index, name);

  if (p == NULL)
    g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_MISSING_PARAM,
                 "%s: the checkpoint holds no parameter named '%s'", self->manifest_path, name);
  return p;
}

/**
 * mixprec_checkpoint_get_state_format:
 * @self: a #MixprecCheckpoint
 * @slot: an optimizer state slot from mixprec_checkpoint_get_state_names()
 *
 * Tells how a state slot is stored: "fp32", "bf16", "fp16_scaled",
 * "bf16_scaled", "fp8_e4m3_scaled", "int8" or "int4", the names of
 * `mixprec.optimizer_states` in mixprec.json(5). The scaled and quantized
 * formats keep one FP32 scale per block of
 * mixprec_checkpoint_get_block_size() elements.
 *
 * Returns: (nullable): the format's name, or %NULL when the checkpoint has
 *   no such slot
 *
 * Since: 1.1
 */
const gchar *
mixprec_checkpoint_get_state_format (MixprecCheckpoint *self,
                                     const gchar       *slot)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  g_return_val_if_fail (slot != NULL, NULL);

  for (guint s = 0; self->manifest.state_names[s] != NULL; s++)
    {
      if (!g_str_equal (self->manifest.state_names[s], slot))
        continue;
      if (self->manifest.repr.present)
        return _mixprec_checkpoint_state_format_name (self->manifest.repr.states[s]);
      /* Earlier checkpoints say it with the tensors' dtype: FP32, or BF16
       * for bf16.bf16_optimizer_states. */
      for (guint i = 0; i < self->manifest.params->len; i++)
        {
          const _MixprecManifestParam *p = g_ptr_array_index (self->manifest.params, i);
          const _MixprecSafetensorsTensor *t;
          _MixprecSafetensors *st;

          if (p->pieces->len == 0)
            continue;
          t = _mixprec_checkpoint_piece_tensor (self, p, &g_array_index (p->pieces, _MixprecManifestPiece, 0),
                                                slot, &st, NULL);
          return _mixprec_checkpoint_state_format_name (_mixprec_checkpoint_slot_format (&self->manifest, s, t));
        }
      return _mixprec_checkpoint_state_format_name (MIXPREC_PLUGIN_STATE_FLOAT32);
    }
  return NULL;
}

/**
 * mixprec_checkpoint_get_block_size:
 * @self: a #MixprecCheckpoint
 *
 * Gives the number of elements that share one FP32 scale in the state
 * slots stored in a scaled or quantized format.
 *
 * Returns: elements per scale block, or 0 when no slot is scaled
 *
 * Since: 1.1
 */
guint
mixprec_checkpoint_get_block_size (MixprecCheckpoint *self)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  return self->manifest.repr.block_size;
}

/**
 * mixprec_checkpoint_get_param_master_format:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 *
 * Tells how a parameter's FP32 master is stored: "fp32", "remainder" (the
 * bfloat16 working copy and a 16-bit remainder, exactly the FP32 value) or
 * "kahan" (the bfloat16 working copy and a bfloat16 compensation), the
 * names of `mixprec.master_weights` in mixprec.json(5).
 *
 * Returns: (nullable): the format's name, or %NULL when the checkpoint
 *   holds no such parameter
 *
 * Since: 1.1
 */
const gchar *
mixprec_checkpoint_get_param_master_format (MixprecCheckpoint *self,
                                            const gchar       *name)
{
  const _MixprecManifestParam *p;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);

  p = g_hash_table_lookup (self->manifest.param_index, name);
  return p != NULL ? _mixprec_checkpoint_master_format_name (p->master_format) : NULL;
}

/**
 * mixprec_checkpoint_get_param_shape:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 * @n_dims: (out): return location for the number of dimensions
 *
 * Looks up the shape of a saved parameter.
 *
 * Returns: (array length=n_dims) (transfer none) (nullable): the
 *   parameter's shape, or %NULL when the checkpoint has no such parameter
 *
 * Since: 1.0
 */
const guint64 *
mixprec_checkpoint_get_param_shape (MixprecCheckpoint *self,
                                    const gchar       *name,
                                    guint             *n_dims)
{
  const _MixprecManifestParam *p;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  g_return_val_if_fail (name != NULL && n_dims != NULL, NULL);
  p = find_param (self, name, NULL);
  *n_dims = p != NULL ? p->n_dims : 0;
  return p != NULL ? p->shape : NULL;
}

/**
 * mixprec_checkpoint_get_param_module_type:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 *
 * Looks up the module type a saved parameter was registered with.
 *
 * Returns: (nullable): the module type the parameter was registered with,
 *   or %NULL when the checkpoint has no such parameter
 *
 * Since: 1.0
 */
const gchar *
mixprec_checkpoint_get_param_module_type (MixprecCheckpoint *self,
                                          const gchar       *name)
{
  const _MixprecManifestParam *p;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  p = find_param (self, name, NULL);
  return p != NULL ? p->module_type : NULL;
}

/**
 * mixprec_checkpoint_get_param_n_pieces:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 *
 * Gives how many pieces a saved parameter is split into across the shard
 * files.
 *
 * Returns: how many element ranges (one per owning rank) the parameter
 *   was saved in; 0 when the checkpoint has no such parameter
 *
 * Since: 1.0
 */
guint
mixprec_checkpoint_get_param_n_pieces (MixprecCheckpoint *self,
                                       const gchar       *name)
{
  const _MixprecManifestParam *p;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), 0);
  g_return_val_if_fail (name != NULL, 0);
  p = find_param (self, name, NULL);
  return p != NULL ? p->pieces->len : 0;
}

/**
 * mixprec_checkpoint_get_param_piece:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 * @index: which piece, below mixprec_checkpoint_get_param_n_pieces()
 * @rank: (out) (optional): the rank that saved it
 * @begin: (out) (optional): its first element
 * @end: (out) (optional): one past its last element
 * @file: (out) (optional) (transfer none): the shard file holding it
 *
 * Describes one piece of a parameter. Pieces come in element order and
 * cover the parameter exactly once.
 *
 * Returns: %TRUE when the parameter and piece exist
 *
 * Since: 1.0
 */
gboolean
mixprec_checkpoint_get_param_piece (MixprecCheckpoint *self,
                                    const gchar       *name,
                                    guint              index,
                                    guint             *rank,
                                    guint64           *begin,
                                    guint64           *end,
                                    const gchar      **file)
{
  const _MixprecManifestParam *p;
  const _MixprecManifestPiece *piece;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), FALSE);
  g_return_val_if_fail (name != NULL, FALSE);
  p = find_param (self, name, NULL);
  if (p == NULL || index >= p->pieces->len)
    return FALSE;
  piece = &g_array_index (p->pieces, _MixprecManifestPiece, index);
  if (rank != NULL)
    *rank = piece->rank;
  if (begin != NULL)
    *begin = piece->begin;
  if (end != NULL)
    *end = piece->end;
  if (file != NULL)
    *file = ((_MixprecManifestFile *) g_ptr_array_index (self->manifest.files, piece->file))->name;
  return TRUE;
}

/**
 * mixprec_checkpoint_get_file_names:
 * @self: a #MixprecCheckpoint
 *
 * Lists the shard files named by the checkpoint's manifest, one per saving
 * rank.
 *
 * Returns: (transfer full): the shard files the manifest lists, in rank
 *   order
 *
 * Since: 1.0
 */
GStrv
mixprec_checkpoint_get_file_names (MixprecCheckpoint *self)
{
  GStrv names;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  names = g_new0 (gchar *, self->manifest.files->len + 1);
  for (guint i = 0; i < self->manifest.files->len; i++)
    names[i] = g_strdup (((_MixprecManifestFile *) g_ptr_array_index (self->manifest.files, i))->name);
  return names;
}

/* ---------------------------------------------------------------- files */

static gboolean
check_size (MixprecCheckpoint *self,
            guint              file,
            const gchar       *path,
            GError           **error)
{
  const _MixprecManifestFile *f = g_ptr_array_index (self->manifest.files, file);
  struct stat sb;

  /* lstat: a link is refused, not measured through; a FIFO or a device
   * is refused here, before any open could block on it. */
  if (lstat (path, &sb) != 0)
    {
      int saved = errno;

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR,
                   saved == ENOENT ? MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD
                                   : MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: %s; %s lists it as the shard of rank %u",
                   path, saved == ENOENT ? "missing" : g_strerror (saved),
                   _MIXPREC_CHECKPOINT_MANIFEST, f->rank);
      return FALSE;
    }
  if (!_mixprec_check_regular (path, &sb, error))
    return FALSE;
  if ((guint64) sb.st_size != f->size)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: the file is %" G_GUINT64_FORMAT " bytes, %s records %" G_GUINT64_FORMAT
                   " (%s)", path, (guint64) sb.st_size, _MIXPREC_CHECKPOINT_MANIFEST, f->size,
                   (guint64) sb.st_size < f->size ? "truncated" : "data was appended");
      return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_checkpoint_verify_file (MixprecCheckpoint *self,
                                 guint              file,
                                 GError           **error)
{
  const _MixprecManifestFile *f = g_ptr_array_index (self->manifest.files, file);
  g_autofree gchar *path = g_build_filename (self->path, f->name, NULL);
  g_autofree gchar *sum = NULL;
  guint64 size = 0;

  if (self->verified[file])
    return TRUE;
  if (!check_size (self, file, path, error))
    return FALSE;
  sum = _mixprec_file_sha256 (path, &size, error);
  if (sum == NULL)
    return FALSE;
  if (size != f->size)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: the file changed size while it was read", path);
      return FALSE;
    }
  if (!g_str_equal (sum, f->sha256))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CHECKSUM,
                   "%s: SHA-256 is %s, but %s records %s: the file is damaged", path, sum,
                   _MIXPREC_CHECKPOINT_MANIFEST, f->sha256);
      return FALSE;
    }
  self->verified[file] = 1;
  return TRUE;
}

static _MixprecSafetensors *
get_shard (MixprecCheckpoint *self,
           guint              file,
           GError           **error)
{
  const _MixprecManifestFile *f = g_ptr_array_index (self->manifest.files, file);
  g_autofree gchar *path = NULL;
  _MixprecSafetensors *st = g_ptr_array_index (self->shards, file);
  const gchar *kind, *version, *rank;
  g_autofree gchar *rank_text = NULL;
  g_autofree gchar *version_text = g_strdup_printf ("%u", self->manifest.format_version);

  if (st != NULL)
    return st;
  path = g_build_filename (self->path, f->name, NULL);
  if (!check_size (self, file, path, error))
    return NULL;
  st = _mixprec_safetensors_open (path, error);
  if (st == NULL)
    return NULL;
  kind = _mixprec_safetensors_get_metadata (st, "format");
  version = _mixprec_safetensors_get_metadata (st, "format_version");
  rank = _mixprec_safetensors_get_metadata (st, "rank");
  rank_text = g_strdup_printf ("%u", f->rank);
  if (g_strcmp0 (kind, _MIXPREC_CHECKPOINT_SHARD_KIND) != 0 ||
      g_strcmp0 (version, version_text) != 0 ||
      g_strcmp0 (rank, rank_text) != 0)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: not the version %u libmixprec shard of rank %u: its metadata says "
                   "format '%s', format_version '%s', rank '%s'", path,
                   self->manifest.format_version, f->rank, kind ? kind : "(none)",
                   version ? version : "(none)", rank ? rank : "(none)");
      _mixprec_safetensors_free (st);
      return NULL;
    }
  g_ptr_array_index (self->shards, file) = st;
  return st;
}

_MixprecSafetensors *
_mixprec_checkpoint_get_rank_shard (MixprecCheckpoint *self,
                                    guint              rank,
                                    GError           **error)
{
  for (guint i = 0; i < self->manifest.files->len; i++)
    {
      const _MixprecManifestFile *f = g_ptr_array_index (self->manifest.files, i);

      if (f->rank == rank && g_str_has_prefix (f->name, "rank-") &&
          g_str_has_suffix (f->name, ".safetensors"))
        return get_shard (self, i, error);
    }
  g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
               "%s: the manifest lists no shard of rank %u", self->path, rank);
  return NULL;
}

const _MixprecSafetensorsTensor *
_mixprec_checkpoint_piece_tensor_as (MixprecCheckpoint           *self,
                                     const _MixprecManifestParam *param,
                                     const _MixprecManifestPiece *piece,
                                     const gchar                 *suffix,
                                     const gchar                 *dtype,
                                     guint64                      length,
                                     _MixprecSafetensors        **shard,
                                     GError                     **error)
{
  _MixprecSafetensors *st = get_shard (self, piece->file, error);
  g_autofree gchar *name = NULL;
  g_autofree gchar *range_key = NULL;
  g_autofree gchar *range = NULL;
  const _MixprecSafetensorsTensor *t;
  const gchar *saved_range;
  gboolean dtype_ok;

  if (st == NULL)
    return NULL;
  name = g_strconcat (param->name, "/", suffix, NULL);
  range_key = _mixprec_checkpoint_range_key (param->name);
  range = g_strdup_printf ("%" G_GUINT64_FORMAT ":%" G_GUINT64_FORMAT, piece->begin, piece->end);
  saved_range = _mixprec_safetensors_get_metadata (st, range_key);
  if (g_strcmp0 (saved_range, range) != 0)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: holds elements %s of parameter '%s', but %s places elements %s there",
                   _mixprec_safetensors_get_path (st), saved_range ? saved_range : "(none)",
                   param->name, _MIXPREC_CHECKPOINT_MANIFEST, range);
      return NULL;
    }
  t = _mixprec_safetensors_lookup (st, name);
  if (t == NULL)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: has no tensor '%s', but %s places elements %s of '%s' there",
                   _mixprec_safetensors_get_path (st), name, _MIXPREC_CHECKPOINT_MANIFEST,
                   range, param->name);
      return NULL;
    }
  /* @dtype NULL: FP32, or BF16 for optimizer state saved in bfloat16
   * (bf16.bf16_optimizer_states) by a checkpoint without representation. */
  if (dtype != NULL)
    dtype_ok = g_str_equal (t->dtype, dtype);
  else
    dtype_ok = g_str_equal (t->dtype, "F32") ||
               (!g_str_equal (suffix, "master") && g_str_equal (t->dtype, "BF16"));
  if (!dtype_ok || t->n_dims != 1 || t->shape[0] != length)
    {
      g_autofree gchar *shape = _mixprec_checkpoint_format_shape (t->shape, t->n_dims, ", ");

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: tensor '%s' is %s of shape [%s]; for elements %s it must be %s of shape "
                   "[%" G_GUINT64_FORMAT "]", _mixprec_safetensors_get_path (st), name,
                   t->dtype, shape, range,
                   dtype != NULL ? dtype : g_str_equal (suffix, "master") ? "F32" : "F32 or BF16",
                   length);
      return NULL;
    }
  *shard = st;
  return t;
}

const _MixprecSafetensorsTensor *
_mixprec_checkpoint_piece_tensor (MixprecCheckpoint           *self,
                                  const _MixprecManifestParam *param,
                                  const _MixprecManifestPiece *piece,
                                  const gchar                 *slot,
                                  _MixprecSafetensors        **shard,
                                  GError                     **error)
{
  const _MixprecManifestRepr *repr = &self->manifest.repr;
  guint64 n = piece->end - piece->begin;
  const gchar *dtype = NULL;

  if (repr->present)
    {
      if (g_str_equal (slot, "master"))
        dtype = param->master_format == MIXPREC_PLUGIN_MASTER_FLOAT32 ? "F32" : "BF16";
      else
        for (guint s = 0; self->manifest.state_names[s] != NULL; s++)
          if (g_str_equal (self->manifest.state_names[s], slot))
            {
              dtype = _mixprec_checkpoint_state_st_dtype (repr->states[s]);
              n = _mixprec_checkpoint_state_stored (repr->states[s], n);
            }
    }
  return _mixprec_checkpoint_piece_tensor_as (self, param, piece, slot, dtype, n, shard, error);
}

/**
 * mixprec_checkpoint_verify:
 * @self: a #MixprecCheckpoint
 * @error: return location for a #GError
 *
 * Recomputes the SHA-256 of every shard file and compares it, and the
 * size, with the manifest; then validates each file's safetensors header
 * and that it holds every tensor the manifest places in it.
 *
 * Returns: %TRUE when everything matches; %FALSE with @error set
 *   (%MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD,
 *   %MIXPREC_CHECKPOINT_ERROR_CORRUPT, %MIXPREC_CHECKPOINT_ERROR_CHECKSUM
 *   or %MIXPREC_CHECKPOINT_ERROR_IO) naming the first file that does not
 *
 * Since: 1.0
 */
gboolean
mixprec_checkpoint_verify (MixprecCheckpoint *self,
                           GError           **error)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  for (guint i = 0; i < self->manifest.files->len; i++)
    {
      /* Recompute even what was verified before: the files may have
       * changed since. */
      self->verified[i] = 0;
      if (!_mixprec_checkpoint_verify_file (self, i, error))
        return FALSE;
    }
  for (guint i = 0; i < self->manifest.params->len; i++)
    {
      const _MixprecManifestParam *p = g_ptr_array_index (self->manifest.params, i);

      for (guint k = 0; k < p->pieces->len; k++)
        {
          const _MixprecManifestPiece *piece = &g_array_index (p->pieces, _MixprecManifestPiece, k);

          if (!_mixprec_checkpoint_check_piece (self, p, piece, FALSE, error))
            return FALSE;
        }
    }
  return TRUE;
}

/* Elements [first, first + count) of @slot of @p, from whichever pieces
 * hold them, in host order. */
static gboolean
read_range (MixprecCheckpoint           *self,
            const _MixprecManifestParam *p,
            const gchar                 *slot,
            guint64                      first,
            guint64                      count,
            gfloat                      *dest,
            GError                     **error)
{
  for (guint k = 0; k < p->pieces->len; k++)
    {
      const _MixprecManifestPiece *piece = &g_array_index (p->pieces, _MixprecManifestPiece, k);
      guint64 lo = MAX (first, piece->begin);
      guint64 hi = MIN (first + count, piece->end);

      if (lo >= hi)
        continue;
      if (!_mixprec_checkpoint_read_piece (self, p, piece, slot, lo - piece->begin, hi - lo,
                                           dest + (lo - first), error))
        return FALSE;
    }
  return TRUE;
}

static GBytes *
read_whole (MixprecCheckpoint *self,
            const gchar       *name,
            const gchar       *slot,
            GError           **error)
{
  const _MixprecManifestParam *p = find_param (self, name, error);
  gfloat *data;

  if (p == NULL)
    return NULL;
  /* Every piece's tensor is checked against its file first, so the
   * allocation below is bounded by what is really on disk. */
  for (guint k = 0; k < p->pieces->len; k++)
    if (!_mixprec_checkpoint_check_piece (self, p, &g_array_index (p->pieces, _MixprecManifestPiece, k),
                                          g_str_equal (slot, "master"), error))
      return NULL;
  data = g_try_malloc (MAX (p->numel, 1) * sizeof (gfloat));
  if (data == NULL)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: out of memory reading the %" G_GUINT64_FORMAT " elements of '%s'",
                   self->path, p->numel, name);
      return NULL;
    }
  if (!read_range (self, p, slot, 0, p->numel, data, error))
    {
      g_free (data);
      return NULL;
    }
  return g_bytes_new_take (data, p->numel * sizeof (gfloat));
}

/**
 * mixprec_checkpoint_read_master:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 * @error: return location for a #GError
 *
 * Assembles a parameter's FP32 master weights from the pieces of every
 * rank. The shard files' headers are validated; their checksums are not
 * recomputed (see mixprec_checkpoint_verify()).
 *
 * Returns: (transfer full): numel FP32 values in host order, or %NULL
 *   with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_checkpoint_read_master (MixprecCheckpoint *self,
                                const gchar       *name,
                                GError           **error)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return read_whole (self, name, "master", error);
}

/**
 * mixprec_checkpoint_read_state:
 * @self: a #MixprecCheckpoint
 * @name: a parameter name
 * @slot: an optimizer state slot from mixprec_checkpoint_get_state_names()
 * @error: return location for a #GError
 *
 * Assembles one optimizer state slot of a parameter, as
 * mixprec_checkpoint_read_master() does for the weights.
 *
 * Returns: (transfer full): numel FP32 values in host order, or %NULL
 *   with @error set (%MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT for an
 *   unknown slot)
 *
 * Since: 1.0
 */
GBytes *
mixprec_checkpoint_read_state (MixprecCheckpoint *self,
                               const gchar       *name,
                               const gchar       *slot,
                               GError           **error)
{
  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), NULL);
  g_return_val_if_fail (name != NULL && slot != NULL, NULL);

  if (!g_strv_contains ((const gchar * const *) self->manifest.state_names, slot))
    {
      g_autofree gchar *known = g_strjoinv (", ", self->manifest.state_names);

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "%s: the '%s' optimizer saved no state slot '%s' (it saved: %s)",
                   self->manifest_path, self->manifest.optimizer_name, slot,
                   *known ? known : "none");
      return NULL;
    }
  return read_whole (self, name, slot, error);
}

/* ---------------------------------------------------------------- export */

void
_mixprec_checkpoint_export_metadata (_MixprecSafetensorsWriter *w,
                                     guint64                    step)
{
  g_autofree gchar *text = g_strdup_printf ("%" G_GUINT64_FORMAT, step);

  /* "pt": PyTorch's loaders (transformers among them) expect it of a
   * state dict saved as safetensors. */
  _mixprec_safetensors_writer_add_metadata (w, "format", "pt");
  _mixprec_safetensors_writer_add_metadata (w, "producer", "libmixprec " MIXPREC_VERSION_S);
  _mixprec_safetensors_writer_add_metadata (w, "step", text);
}

gboolean
_mixprec_checkpoint_commit_file (const gchar *tmp_path,
                                 const gchar *path,
                                 GError     **error)
{
  g_autofree gchar *dir = g_path_get_dirname (path);

  if (rename (tmp_path, path) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot rename the finished file into place");
      unlink (tmp_path);
      return FALSE;
    }
  return _mixprec_fsync_dir (dir, error);
}

typedef struct
{
  MixprecCheckpoint *self;
  const _MixprecManifestParam *param;
} ExportSource;

static gboolean
fill_master (gpointer   user_data,
             guint64    offset,
             gsize      n_bytes,
             guint8    *dest,
             GError   **error)
{
  ExportSource *src = user_data;

  if (!read_range (src->self, src->param, "master", offset / sizeof (gfloat),
                   n_bytes / sizeof (gfloat), (gfloat *) dest, error))
    return FALSE;
#if G_BYTE_ORDER == G_BIG_ENDIAN
  for (gsize i = 0; i < n_bytes; i += 4)
    {
      guint32 bits;

      memcpy (&bits, dest + i, 4);
      bits = GUINT32_TO_LE (bits);
      memcpy (dest + i, &bits, 4);
    }
#endif
  return TRUE;
}

/**
 * mixprec_checkpoint_export_fp32:
 * @self: a #MixprecCheckpoint
 * @path: the safetensors file to write
 * @error: return location for a #GError
 *
 * Writes every parameter's FP32 master weights, assembled from all ranks'
 * pieces and with its registered shape, into one safetensors file that
 * any safetensors reader loads (the equivalent of DeepSpeed's
 * `zero_to_fp32.py`, without the engine that saved it). Tensors are named
 * after the parameters; the metadata holds `format` ("pt"), `producer` and
 * `step`. Every shard file is verified first. The file appears at @path
 * complete or not at all.
 *
 * Returns: %TRUE on success; %FALSE with @error set
 *
 * Since: 1.0
 */
gboolean
mixprec_checkpoint_export_fp32 (MixprecCheckpoint *self,
                                const gchar       *path,
                                GError           **error)
{
  g_autoptr(_MixprecSafetensorsWriter) w = _mixprec_safetensors_writer_new ();
  g_autofree ExportSource *sources = NULL;
  g_autofree gchar *tmp_path = NULL;
  gboolean ok;
  int fd;

  g_return_val_if_fail (MIXPREC_IS_CHECKPOINT (self), FALSE);
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  for (guint i = 0; i < self->manifest.files->len; i++)
    if (!_mixprec_checkpoint_verify_file (self, i, error))
      return FALSE;

  _mixprec_checkpoint_export_metadata (w, self->manifest.step);
  sources = g_new0 (ExportSource, MAX (self->manifest.params->len, 1));
  for (guint i = 0; i < self->manifest.params->len; i++)
    {
      const _MixprecManifestParam *p = g_ptr_array_index (self->manifest.params, i);

      for (guint k = 0; k < p->pieces->len; k++)
        {
          _MixprecSafetensors *st;

          if (_mixprec_checkpoint_piece_tensor (self, p, &g_array_index (p->pieces, _MixprecManifestPiece, k),
                                                "master", &st, error) == NULL)
            return FALSE;
        }
      sources[i].self = self;
      sources[i].param = p;
      if (!_mixprec_safetensors_writer_add_filled (w, p->name, "F32", p->shape, p->n_dims,
                                                   fill_master, &sources[i], error))
        return FALSE;
    }

  tmp_path = g_strconcat (path, ".tmp", NULL);
  unlink (tmp_path);
  fd = open (tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, tmp_path, "cannot create");
      return FALSE;
    }
  ok = _mixprec_safetensors_writer_write (w, fd, tmp_path, NULL, NULL, NULL, error) &&
       _mixprec_fsync_fd (fd, tmp_path, error);
  close (fd);
  if (!ok)
    {
      unlink (tmp_path);
      return FALSE;
    }
  return _mixprec_checkpoint_commit_file (tmp_path, path, error);
}
