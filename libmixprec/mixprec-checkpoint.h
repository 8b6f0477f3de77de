/* mixprec-checkpoint.h — sharded, precision-agnostic checkpoints that
 * survive crashes, and their export to one FP32 safetensors file */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-engine.h"

G_BEGIN_DECLS

/**
 * MIXPREC_CHECKPOINT_ERROR:
 *
 * Error domain of checkpoints. Errors in this domain are from the
 * #MixprecCheckpointError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_CHECKPOINT_ERROR (mixprec_checkpoint_error_quark ())

/**
 * MixprecCheckpointError:
 * @MIXPREC_CHECKPOINT_ERROR_IO: a file or folder could not be created,
 *   read, written, synced or renamed (the message carries the system's
 *   reason)
 * @MIXPREC_CHECKPOINT_ERROR_CORRUPT: a file is not what libmixprec wrote:
 *   truncated or grown, a malformed safetensors header, a manifest that is
 *   not valid JSON or lacks a key, a tensor of the wrong dtype or size
 * @MIXPREC_CHECKPOINT_ERROR_CHECKSUM: a shard file has the size the
 *   manifest records but not its SHA-256
 * @MIXPREC_CHECKPOINT_ERROR_VERSION: the manifest's `format_version` is
 *   one this libmixprec cannot read
 * @MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD: a shard file the manifest lists
 *   does not exist
 * @MIXPREC_CHECKPOINT_ERROR_MISSING_PARAM: the engine registered a
 *   parameter the checkpoint does not hold, or a query named one
 * @MIXPREC_CHECKPOINT_ERROR_SHAPE_MISMATCH: a parameter's shape in the
 *   checkpoint differs from the one the engine registered
 * @MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE: the checkpoint cannot continue
 *   this engine's training as it is: the optimizers keep different state
 *   slots, or the saved loss scaler state does not fit the engine's scaler
 * @MIXPREC_CHECKPOINT_ERROR_UNKNOWN_PARAM: the checkpoint holds a
 *   parameter the engine did not register (see
 *   %MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS)
 * @MIXPREC_CHECKPOINT_ERROR_NOT_FOUND: there is no checkpoint here: the
 *   folder does not exist, or holds no `manifest.json`, no `latest`
 *   pointer and nothing else a save leaves behind
 * @MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT: a tag that is not a plain
 *   file name, an unknown state slot name, or an empty folder path
 * @MIXPREC_CHECKPOINT_ERROR_DAMAGED: the folder holds checkpoints, but
 *   not the one it should: `latest` names a folder or a `manifest.json`
 *   that does not exist, or `latest` is missing beside checkpoint folders.
 *   Not the same as %MIXPREC_CHECKPOINT_ERROR_NOT_FOUND: a run must not
 *   start afresh over it (see mixprec_checkpoint_open_newest_intact()).
 *   Since: 1.1
 *
 * Errors from saving, loading, inspecting and exporting checkpoints. Every
 * message names the file (and, inside it, the parameter, tensor or JSON
 * key) and what is wrong with it. Values are appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_CHECKPOINT_ERROR_IO,
  MIXPREC_CHECKPOINT_ERROR_CORRUPT,
  MIXPREC_CHECKPOINT_ERROR_CHECKSUM,
  MIXPREC_CHECKPOINT_ERROR_VERSION,
  MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD,
  MIXPREC_CHECKPOINT_ERROR_MISSING_PARAM,
  MIXPREC_CHECKPOINT_ERROR_SHAPE_MISMATCH,
  MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE,
  MIXPREC_CHECKPOINT_ERROR_UNKNOWN_PARAM,
  MIXPREC_CHECKPOINT_ERROR_NOT_FOUND,
  MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
  MIXPREC_CHECKPOINT_ERROR_DAMAGED,
} MixprecCheckpointError;

/**
 * MixprecCheckpointSaveFlags:
 * @MIXPREC_CHECKPOINT_SAVE_NONE: save and make the new checkpoint the one
 *   that `latest` names
 * @MIXPREC_CHECKPOINT_SAVE_NO_LATEST: save, but leave `latest` as it is
 *   (a snapshot kept aside, such as the best model so far)
 *
 * Options of mixprec_engine_save_checkpoint_full().
 *
 * Since: 1.0
 */
typedef enum /*< flags >*/ {
  MIXPREC_CHECKPOINT_SAVE_NONE = 0,
  MIXPREC_CHECKPOINT_SAVE_NO_LATEST = 1 << 0,
} MixprecCheckpointSaveFlags;

/**
 * MixprecCheckpointLoadFlags:
 * @MIXPREC_CHECKPOINT_LOAD_NONE: restore everything: weights, optimizer
 *   state, step counters, rounding seed, learning-rate position and (when
 *   both engines scale FP16 losses, or neither does) the loss scaler
 * @MIXPREC_CHECKPOINT_LOAD_WEIGHTS_ONLY: restore the master weights alone;
 *   optimizer state, counters, schedule and scaler stay as the engine has
 *   them (fine-tuning from a checkpoint, or a different optimizer)
 * @MIXPREC_CHECKPOINT_LOAD_RESET_SCALER: do not restore the loss scaler;
 *   it continues from the engine's configuration (a changed
 *   `mixprec.scaler` section)
 * @MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS: parameters in the
 *   checkpoint that the engine did not register are skipped instead of
 *   refused
 *
 * Options of mixprec_engine_load_checkpoint_full().
 *
 * Since: 1.0
 */
typedef enum /*< flags >*/ {
  MIXPREC_CHECKPOINT_LOAD_NONE = 0,
  MIXPREC_CHECKPOINT_LOAD_WEIGHTS_ONLY = 1 << 0,
  MIXPREC_CHECKPOINT_LOAD_RESET_SCALER = 1 << 1,
  MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS = 1 << 2,
} MixprecCheckpointLoadFlags;

/**
 * MIXPREC_CHECKPOINT_FORMAT_VERSION:
 *
 * The `format_version` this libmixprec writes into a checkpoint's
 * `manifest.json`, and the newest it reads.
 *
 * Since: 1.0
 */
#define MIXPREC_CHECKPOINT_FORMAT_VERSION 1

MIXPREC_AVAILABLE_IN_1_0
GQuark   mixprec_checkpoint_error_quark       (void);

MIXPREC_AVAILABLE_IN_1_0
gboolean mixprec_engine_save_checkpoint       (MixprecEngine              *engine,
                                               const gchar                *dir,
                                               GError                    **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean mixprec_engine_save_checkpoint_full  (MixprecEngine              *engine,
                                               const gchar                *dir,
                                               const gchar                *tag,
                                               MixprecCheckpointSaveFlags  flags,
                                               GError                    **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean mixprec_engine_load_checkpoint       (MixprecEngine              *engine,
                                               const gchar                *dir,
                                               GError                    **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean mixprec_engine_load_checkpoint_full  (MixprecEngine              *engine,
                                               const gchar                *dir,
                                               MixprecCheckpointLoadFlags  flags,
                                               GError                    **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean mixprec_engine_export_fp32           (MixprecEngine              *engine,
                                               const gchar                *path,
                                               GError                    **error);

#define MIXPREC_TYPE_CHECKPOINT (mixprec_checkpoint_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecCheckpoint, mixprec_checkpoint, MIXPREC, CHECKPOINT, GObject)

MIXPREC_AVAILABLE_IN_1_0
MixprecCheckpoint   *mixprec_checkpoint_open                  (const gchar       *dir,
                                                               GError           **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecCheckpoint   *mixprec_checkpoint_open_newest_intact    (const gchar       *dir,
                                                               gchar            **skipped,
                                                               GError           **error);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_path              (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_tag               (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint                mixprec_checkpoint_get_format_version    (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_libmixprec_version (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint64              mixprec_checkpoint_get_step              (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint64              mixprec_checkpoint_get_applied_steps     (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint64              mixprec_checkpoint_get_skipped_steps     (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint64              mixprec_checkpoint_get_seed              (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_precision_mode    (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint                mixprec_checkpoint_get_world_size        (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint                mixprec_checkpoint_get_zero_stage        (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_scaler_type       (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
GVariant            *mixprec_checkpoint_get_scaler_state      (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_lr_schedule_type  (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
guint64              mixprec_checkpoint_get_lr_position       (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_optimizer_name    (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar * const *mixprec_checkpoint_get_state_names       (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_1
const gchar         *mixprec_checkpoint_get_state_format      (MixprecCheckpoint *self,
                                                               const gchar       *slot);
MIXPREC_AVAILABLE_IN_1_1
guint                mixprec_checkpoint_get_block_size        (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_1
const gchar         *mixprec_checkpoint_get_param_master_format (MixprecCheckpoint *self,
                                                                 const gchar       *name);

MIXPREC_AVAILABLE_IN_1_0
GStrv                mixprec_checkpoint_get_param_names       (MixprecCheckpoint *self);
MIXPREC_AVAILABLE_IN_1_0
const guint64       *mixprec_checkpoint_get_param_shape       (MixprecCheckpoint *self,
                                                               const gchar       *name,
                                                               guint             *n_dims);
MIXPREC_AVAILABLE_IN_1_0
const gchar         *mixprec_checkpoint_get_param_module_type (MixprecCheckpoint *self,
                                                               const gchar       *name);
MIXPREC_AVAILABLE_IN_1_0
guint                mixprec_checkpoint_get_param_n_pieces    (MixprecCheckpoint *self,
                                                               const gchar       *name);
MIXPREC_AVAILABLE_IN_1_0
gboolean             mixprec_checkpoint_get_param_piece       (MixprecCheckpoint *self,
                                                               const gchar       *name,
                                                               guint              index,
                                                               guint             *rank,
                                                               guint64           *begin,
                                                               guint64           *end,
                                                               const gchar      **file);
MIXPREC_AVAILABLE_IN_1_0
GStrv                mixprec_checkpoint_get_file_names        (MixprecCheckpoint *self);

MIXPREC_AVAILABLE_IN_1_0
gboolean             mixprec_checkpoint_verify                (MixprecCheckpoint *self,
                                                               GError           **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes              *mixprec_checkpoint_read_master           (MixprecCheckpoint *self,
                                                               const gchar       *name,
                                                               GError           **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes              *mixprec_checkpoint_read_state            (MixprecCheckpoint *self,
                                                               const gchar       *name,
                                                               const gchar       *slot,
                                                               GError           **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean             mixprec_checkpoint_export_fp32           (MixprecCheckpoint *self,
                                                               const gchar       *path,
                                                               GError           **error);

G_END_DECLS
