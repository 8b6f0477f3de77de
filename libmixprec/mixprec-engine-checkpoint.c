/* mixprec-engine-checkpoint.c — the engine's checkpoint calls: saves
 * (which mixprec-checkpoint-save.c writes), loads (mixprec-checkpoint-load.c)
 * and the FP32 export (mixprec-checkpoint-export.c). */
#include "config.h"

#include "mixprec.h"
#include "mixprec-engine-private.h"

/**
 * mixprec_engine_save_checkpoint_full:
 * @engine: a #MixprecEngine
 * @dir: the folder that holds the checkpoints (created if needed)
 * @tag: (nullable): the new checkpoint's folder name inside @dir, a
 *   plain name of `[A-Za-z0-9._-]` not starting with '.'; %NULL for
 *   `step-N` with N the engine's step count
 * @flags: #MixprecCheckpointSaveFlags
 * @error: return location for a #GError
 *
 * Saves the engine's training state into `@dir/@tag`: the FP32 master
 * weights (the working values widened to FP32 for bf16 without master
 * weights) and every optimizer state slot, one safetensors file per rank,
 * and a `manifest.json` with the counters, the loss scaler, the
 * learning-rate position, the seed, the precision mode and the partition
 * layout. See #MixprecCheckpoint for the format. Gradients are not saved:
 * save between optimizer steps.
 *
 * Every rank of the engine calls this (it is collective), with the same
 * @dir on a filesystem all ranks share. The save is crash-safe:
 *
 * 1. rank 0 creates `@dir/.tmp-@tag/`; each rank writes and fsyncs its
 *    shard there;
 * 2. rank 0 checks every shard, hashes it, writes and fsyncs
 *    `manifest.json`, fsyncs the folder and renames it to `@dir/@tag`
 *    (swapping atomically with an existing checkpoint of the same tag
 *    where the filesystem allows), then fsyncs @dir;
 * 3. unless %MIXPREC_CHECKPOINT_SAVE_NO_LATEST, rank 0 writes
 *    `@dir/latest.tmp` holding the tag, fsyncs it, renames it to
 *    `@dir/latest` and fsyncs @dir;
 * 4. leftovers of crashed saves (`@dir/.tmp-*`, but never a whole
 *    checkpoint set aside as `@dir/.tmp-TAG.old`) are removed.
 *
 * An existing `@dir/@tag` is replaced only when it is a whole checkpoint
 * (its `manifest.json` is valid). A damaged folder there (a crash or a
 * person removed its manifest) is not the caller's to overwrite: it is
 * renamed to `@dir/@tag.damaged` (`.damaged-2`, ...), a message says so,
 * and the save goes on.
 *
 * A crash at any point leaves `latest` naming a complete checkpoint, and
 * every earlier checkpoint untouched. (Re-saving an existing tag swaps
 * the folders with renameat2()'s RENAME_EXCHANGE; on a filesystem without
 * it the old folder is moved aside first, and a crash between the two
 * renames leaves it whole as `@dir/.tmp-@tag.old`, which the error of
 * loading then points to, and which no later save removes.) Earlier checkpoints are kept;
 * removing old ones is left to the caller. One job saves into a @dir at a
 * time.
 *
 * The save never follows a symbolic link inside @dir (@dir itself may be
 * one): @dir is opened once and the save works relative to it. A link at
 * `@dir/@tag` or at any `@dir/.tmp-*` name, which a save would otherwise
 * replace or empty, is not something libmixprec created: the save is
 * refused with %MIXPREC_CHECKPOINT_ERROR_IO naming the link, before it
 * writes anything. Leftovers are removed only when they are real
 * folders, and in them only regular files.
 *
 * In a library configured with `--enable-test-hooks` (never an installed
 * one), the environment variable `MIXPREC_CHECKPOINT_TEST_HOOK` set
 * to `abort:POINT` makes the process kill itself (SIGKILL) at POINT of
 * the save, and `pause:POINT` makes it create the file named by
 * `MIXPREC_CHECKPOINT_TEST_HOOK_MARKER` (default
 * `@dir/.mixprec-test-hook-paused`) and sleep until killed; `@RANK` after
 * POINT limits it to one rank. The points, in order: after-tmpdir,
 * mid-shard-write, after-shard-write, after-shard-fsync, before-manifest,
 * mid-manifest, after-manifest, before-rename, after-rename,
 * before-latest, mid-latest, after-latest-tmp, after-latest,
 * before-cleanup.
 *
 * Returns: %TRUE once the checkpoint is durable; %FALSE with @error set
 *   (%MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT for a bad tag or an empty @dir,
 *   %MIXPREC_CHECKPOINT_ERROR_IO naming the file and the system's reason or
 *   the symbolic link that was not followed,
 *   %MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD when a rank did not write its
 *   shard), in which case `latest` still names the previous checkpoint
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_save_checkpoint_full (MixprecEngine              *engine,
                                     const gchar                *dir,
                                     const gchar                *tag,
                                     MixprecCheckpointSaveFlags  flags,
                                     GError                    **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (engine), FALSE);
  g_return_val_if_fail (dir != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return _mixprec_checkpoint_save (engine, dir, tag, flags, error);
}

/**
 * mixprec_engine_save_checkpoint:
 * @engine: a #MixprecEngine
 * @dir: the folder that holds the checkpoints (created if needed)
 * @error: return location for a #GError
 *
 * Saves a checkpoint into `@dir/step-N` and points `@dir/latest` at it;
 * mixprec_engine_save_checkpoint_full() with a %NULL tag and no flags.
 *
 * Returns: %TRUE once the checkpoint is durable; %FALSE with @error set
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_save_checkpoint (MixprecEngine *engine,
                                const gchar   *dir,
                                GError       **error)
{
  return mixprec_engine_save_checkpoint_full (engine, dir, NULL, MIXPREC_CHECKPOINT_SAVE_NONE, error);
}

/**
 * mixprec_engine_load_checkpoint_full:
 * @engine: a #MixprecEngine with every parameter registered
 * @dir: a checkpoint folder, or a folder of checkpoints whose `latest`
 *   names one
 * @flags: #MixprecCheckpointLoadFlags
 * @error: return location for a #GError
 *
 * Puts a saved training state into the engine, whatever the world size,
 * ZeRO stage and precision mode of the engine that saved it: each rank
 * reads, from the pieces that overlap the ranges it owns, the FP32
 * master weights (rounded to nearest even into the working copy in bf16
 * without master weights) and every optimizer state slot; then the step
 * counters, the stochastic-rounding seed and the learning-rate position.
 * The loss scaler is restored when both engines scale FP16 losses or
 * neither does; across that line (fp16 to bf16, say) the engine's own
 * scaler starts fresh. Working copies are then recomputed from the
 * masters and accumulated gradients are dropped.
 *
 * Loading into an engine of the same world size and mode continues the
 * training exactly: the following steps produce the same bits as if the
 * run had not stopped.
 *
 * Before writing anything the load checks: the manifest (format version,
 * every key), that every parameter the engine registered is in the
 * checkpoint with the same shape (and, unless
 * %MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS, no other), that the
 * optimizer keeps the same state slots (unless
 * %MIXPREC_CHECKPOINT_LOAD_WEIGHTS_ONLY), and the size, SHA-256 and
 * safetensors header of every file this rank reads. A failed check
 * leaves the engine as it was; a read error during the copy may leave it
 * partly loaded. Every rank of the engine calls this.
 *
 * Returns: %TRUE on success; %FALSE with @error set to a
 *   #MixprecCheckpointError naming the file and the problem
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_load_checkpoint_full (MixprecEngine              *engine,
                                     const gchar                *dir,
                                     MixprecCheckpointLoadFlags  flags,
                                     GError                    **error)
{
  return _mixprec_checkpoint_load (engine, dir, flags, error);
}

/**
 * mixprec_engine_load_checkpoint:
 * @engine: a #MixprecEngine with every parameter registered
 * @dir: a checkpoint folder, or a folder of checkpoints whose `latest`
 *   names one
 * @error: return location for a #GError
 *
 * Restores everything a checkpoint holds;
 * mixprec_engine_load_checkpoint_full() without flags.
 *
 * Returns: %TRUE on success; %FALSE with @error set
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_load_checkpoint (MixprecEngine *engine,
                                const gchar   *dir,
                                GError       **error)
{
  return mixprec_engine_load_checkpoint_full (engine, dir, MIXPREC_CHECKPOINT_LOAD_NONE, error);
}

/**
 * mixprec_engine_export_fp32:
 * @engine: a #MixprecEngine
 * @path: the safetensors file to write
 * @error: return location for a #GError
 *
 * Writes every parameter's FP32 master weights (the working values widened
 * to FP32 in bf16 without master weights), with its registered shape and
 * named after it, into one safetensors file that any safetensors reader
 * loads: the file to hand to other frameworks. Its metadata holds
 * `format` ("pt"), `producer` and `step`; it is byte for byte the file
 * mixprec_checkpoint_export_fp32() makes from a checkpoint of the same
 * state.
 *
 * Every rank calls this with the same @path on a shared filesystem; each
 * writes the ranges it owns into the one file. The file is written under
 * `@path.tmp`, synced, and renamed, so @path appears complete or not at
 * all.
 *
 * Returns: %TRUE on success; %FALSE with @error set
 *   (%MIXPREC_CHECKPOINT_ERROR_IO naming the file)
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_export_fp32 (MixprecEngine *engine,
                            const gchar   *path,
                            GError       **error)
{
  return _mixprec_checkpoint_export_fp32 (engine, path, error);
}
