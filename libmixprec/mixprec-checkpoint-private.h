/* mixprec-checkpoint-private.h — what the checkpoint files share: the
 * parsed manifest, durable file operations, and the crash-test hook.
 * Never installed. */
#pragma once

#include "mixprec.h"
#include "mixprec-plugin-abi.h"
#include "mixprec-safetensors-private.h"

G_BEGIN_DECLS

#define _MIXPREC_CHECKPOINT_MANIFEST "manifest.json"
#define _MIXPREC_CHECKPOINT_LATEST "latest"
#define _MIXPREC_CHECKPOINT_TMP_PREFIX ".tmp-"
/* Shard files are rank-NNNNN.safetensors (at least five digits). */
#define _MIXPREC_CHECKPOINT_SHARD_FORMAT "rank-%05u.safetensors"
/* Identifies a shard file in its safetensors metadata ("format"). */
#define _MIXPREC_CHECKPOINT_SHARD_KIND "libmixprec-shard"
#define _MIXPREC_CHECKPOINT_MANIFEST_KIND "libmixprec-checkpoint"
/* A manifest lists every parameter's pieces; even 10^5 parameters over
 * 10^3 ranks stay below this. A bigger file is damage, not a manifest. */
#define _MIXPREC_CHECKPOINT_MAX_MANIFEST (256 * 1024 * 1024)
/* No ZeRO job has more ranks; the cap keeps hostile values small. */
#define _MIXPREC_CHECKPOINT_MAX_WORLD (1u << 20)

typedef struct
{
  guint   rank;
  guint   file;              /* index into _MixprecManifest.files */
  guint64 begin;             /* element range of the parameter */
  guint64 end;
} _MixprecManifestPiece;

typedef struct
{
  gchar   *name;
  guint64 *shape;
  guint    n_dims;
  guint64  numel;
  gchar   *module_type;
  MixprecPluginMasterFormat master_format;  /* "master" (format_version 2), else FLOAT32 */
  GArray  *pieces;           /* _MixprecManifestPiece, sorted by begin, covering [0, numel) */
} _MixprecManifestParam;

typedef struct
{
  gchar  *name;              /* a file name inside the checkpoint folder */
  guint   rank;
  guint64 size;
  gchar  *sha256;            /* 64 lowercase hex digits */
} _MixprecManifestFile;

/* Checkpoints that keep a representation other than FP32 masters and
 * FP32 or BF16 state declare it in the manifest's "representation" and
 * carry this format_version; all others stay at
 * MIXPREC_CHECKPOINT_FORMAT_VERSION, byte for byte what earlier releases
 * wrote. */
#define _MIXPREC_CHECKPOINT_FORMAT_VERSION_REPR 2

/* The manifest's "representation": how each state slot is stored (see
 * mixprec-checkpoint-repr.c); each parameter then also says how its
 * master is. Absent (present FALSE): FP32 masters, and each slot FP32 or
 * BF16 as its tensors' dtype says. */
typedef struct
{
  gboolean present;
  MixprecPluginStateFormat states[16];   /* in state_names' order */
  gboolean state_signed[16];
  guint block_size;          /* elements per scale block; 0 when no slot is scaled */
} _MixprecManifestRepr;

typedef struct
{
  guint    format_version;
  gchar   *libmixprec_version;
  gchar   *tag;
  guint64  step;
  guint64  applied_steps;
  guint64  skipped_steps;
  guint64  seed;
  gchar   *precision_mode;   /* mixprec_precision_mode_get_name() */
  gchar   *low_dtype;        /* mixprec_dtype_get_name() */
  guint    world_size;
  guint    zero_stage;
  gchar   *scaler_type;
  GVariant *scaler_state;    /* a{sv} */
  gchar   *lr_schedule_type;
  guint64  lr_position;
  gdouble  base_lr;
  gchar   *optimizer_name;
  GStrv    state_names;
  JsonNode *hyper_parameters; /* an object; informational */
  GHashTable *fp8_states;    /* parameter name -> its FP8 scaling's a{sv}
                                (the manifest's optional "fp8" object) */
  GVariant *auto_precision;  /* mixprec.auto_precision's state, an a{sv}
                                (the manifest's optional "auto_precision"
                                string); NULL when absent */
  GPtrArray *params;         /* _MixprecManifestParam, registration order */
  GHashTable *param_index;   /* name -> param */
  GPtrArray *files;          /* _MixprecManifestFile */
  _MixprecManifestRepr repr;
} _MixprecManifest;

void      _mixprec_manifest_init   (_MixprecManifest *m);
void      _mixprec_manifest_clear  (_MixprecManifest *m);
/* Validates @data (the contents of @path) completely: strict JSON, every
 * key with its type and range, pieces that cover each parameter exactly,
 * files that exist in the list. */
gboolean  _mixprec_manifest_parse  (_MixprecManifest *m,
                                    const gchar      *path,
                                    const gchar      *data,
                                    gsize             length,
                                    GError          **error);
gchar    *_mixprec_manifest_to_json (const _MixprecManifest *m);
/* Checks pieces of one parameter cover [0, numel) once; @where prefixes
 * the message. */
gboolean  _mixprec_manifest_check_pieces (const _MixprecManifestParam *p,
                                          const gchar                 *where,
                                          GError                     **error);

/* Tags and file names a checkpoint may use: 1..200 bytes of [A-Za-z0-9._-],
 * not starting with '.'. */
gboolean  _mixprec_checkpoint_name_is_valid (const gchar *name);

/* Whether an engine in @mode with low dtype @low scales FP16 losses. */
gboolean  _mixprec_checkpoint_mode_scales (const gchar *mode,
                                           const gchar *low);

/* Metadata keys of a shard file for parameter @name: its element range
 * "begin:end" and its full shape "d0,d1,...". */
gchar    *_mixprec_checkpoint_range_key (const gchar *name);
gchar    *_mixprec_checkpoint_shape_key (const gchar *name);
gchar    *_mixprec_checkpoint_format_shape (const guint64 *shape,
                                            guint          n_dims,
                                            const gchar   *separator);

/* ---------------------------------------------------------------- MixprecCheckpoint */

const _MixprecManifest *_mixprec_checkpoint_get_manifest (MixprecCheckpoint *self);
/* The shard rank @rank wrote, opened and its header checked (owned by
 * @self); NULL with @error when the manifest has none or it is damaged. */
_MixprecSafetensors    *_mixprec_checkpoint_get_rank_shard (MixprecCheckpoint *self,
                                                            guint              rank,
                                                            GError           **error);
/* Checks file @file's size and SHA-256 against the manifest (once; the
 * result is remembered). */
gboolean  _mixprec_checkpoint_verify_file (MixprecCheckpoint *self,
                                           guint              file,
                                           GError           **error);
/* The tensor that holds @slot ("master" or a state slot) of @piece of
 * @param, checked against the manifest: present, F32, one dimension of
 * the piece's length, the range metadata equal to the piece's. The shard
 * file is opened (and its header validated) once. */
const _MixprecSafetensorsTensor *
          _mixprec_checkpoint_piece_tensor (MixprecCheckpoint           *self,
                                            const _MixprecManifestParam *param,
                                            const _MixprecManifestPiece *piece,
                                            const gchar                 *slot,
                                            _MixprecSafetensors        **shard,
                                            GError                     **error);

/* ---------------------------------------------------------------- representations
 * (mixprec-checkpoint-repr.c) */

const gchar *_mixprec_checkpoint_master_format_name (MixprecPluginMasterFormat format);
gboolean     _mixprec_checkpoint_master_format_parse (const gchar               *name,
                                                      MixprecPluginMasterFormat *format);
const gchar *_mixprec_checkpoint_state_format_name  (MixprecPluginStateFormat format);
gboolean     _mixprec_checkpoint_state_format_parse (const gchar              *name,
                                                     MixprecPluginStateFormat *format);
/* The safetensors dtype and element count of @n elements stored in @format. */
const gchar *_mixprec_checkpoint_state_st_dtype     (MixprecPluginStateFormat format);
guint64      _mixprec_checkpoint_state_stored       (MixprecPluginStateFormat format,
                                                     guint64                  n);
gboolean     _mixprec_checkpoint_state_is_scaled    (MixprecPluginStateFormat format);
/* Blocks of @block_size touched by @n elements whose first is element
 * @phase of its block. */
guint64      _mixprec_checkpoint_n_blocks           (guint64 phase,
                                                     guint64 n,
                                                     guint   block_size);
/* Names of a piece's extra tensors and metadata. */
#define _MIXPREC_CHECKPOINT_REMAINDER "master/remainder"
#define _MIXPREC_CHECKPOINT_COMPENSATION "master/compensation"
gchar       *_mixprec_checkpoint_scales_name        (const gchar *slot);
gchar       *_mixprec_checkpoint_phase_key          (const gchar *param);

/* Nibble @i of packed int4 codes at @base (the even one low). */
guint        _mixprec_checkpoint_load_nibble        (gconstpointer base,
                                                     guint64       i);
/* The representation of an engine's shards (_MixprecEngineShard), and the
 * format_version a checkpoint of them carries. */
void         _mixprec_checkpoint_shards_repr        (GArray               *shards,
                                                     _MixprecManifestRepr *repr);
guint        _mixprec_checkpoint_shards_version     (GArray *shards);

/* The FP32 values of @n masters kept as a bfloat16 working copy and a
 * REMAINDER or KAHAN second half: joined exactly, or working +
 * compensation added in FP32. */
void         _mixprec_checkpoint_split_master_f32   (MixprecPluginMasterFormat format,
                                                     const guint16            *working,
                                                     const guint16            *extra,
                                                     guint64                   n,
                                                     gfloat                   *out);

/* The format of @slot ("master" included) as @m stores it; for a slot of
 * a manifest without representation, from the tensor's dtype. */
MixprecPluginStateFormat
             _mixprec_checkpoint_slot_format        (const _MixprecManifest         *m,
                                                     guint                           slot,
                                                     const _MixprecSafetensorsTensor *t);

/* Checks every tensor and metadata key of @piece that a load reads:
 * master, remainder or compensation, each slot (unless @weights_only) and
 * its scales, and the block phase. */
gboolean     _mixprec_checkpoint_check_piece        (MixprecCheckpoint           *self,
                                                     const _MixprecManifestParam *param,
                                                     const _MixprecManifestPiece *piece,
                                                     gboolean                     weights_only,
                                                     GError                     **error);
/* Element @piece->begin's position in its scale block. */
gboolean     _mixprec_checkpoint_piece_phase        (MixprecCheckpoint           *self,
                                                     const _MixprecManifestParam *param,
                                                     const _MixprecManifestPiece *piece,
                                                     guint64                     *phase,
                                                     GError                     **error);
/* Elements [first, first + count) of @piece (piece-relative) of @slot
 * ("master" or a state slot index's name) decoded to FP32: the exact
 * value of every stored representation (see mixprec-checkpoint-repr.c). */
gboolean     _mixprec_checkpoint_read_piece         (MixprecCheckpoint           *self,
                                                     const _MixprecManifestParam *param,
                                                     const _MixprecManifestPiece *piece,
                                                     const gchar                 *slot,
                                                     guint64                      first,
                                                     guint64                      count,
                                                     gfloat                      *dest,
                                                     GError                     **error);
/* Raw stored bytes of a piece's tensor @suffix: elements
 * [first, first + count) of it (int4: codes, see the ranges in bytes). */
const _MixprecSafetensorsTensor *
             _mixprec_checkpoint_piece_tensor_as    (MixprecCheckpoint           *self,
                                                     const _MixprecManifestParam *param,
                                                     const _MixprecManifestPiece *piece,
                                                     const gchar                 *suffix,
                                                     const gchar                 *dtype,
                                                     guint64                      length,
                                                     _MixprecSafetensors        **shard,
                                                     GError                     **error);

/* The safetensors metadata both FP32 exports carry, so that exporting an
 * engine and exporting its checkpoint give the same bytes. */
void      _mixprec_checkpoint_export_metadata (_MixprecSafetensorsWriter *w,
                                               guint64                    step);
/* Moves a finished file at @tmp_path to @path and makes the rename
 * durable. */
gboolean  _mixprec_checkpoint_commit_file (const gchar *tmp_path,
                                           const gchar *path,
                                           GError     **error);

/* ---------------------------------------------------------------- files */

gboolean  _mixprec_write_all       (int           fd,
                                    gconstpointer data,
                                    gsize         length,
                                    const gchar  *path,
                                    GError      **error);
gboolean  _mixprec_pwrite_all      (int           fd,
                                    gconstpointer data,
                                    gsize         length,
                                    guint64       offset,
                                    const gchar  *path,
                                    GError      **error);
/* A short read is an error naming @path: the file shrank under us. */
gboolean  _mixprec_pread_all       (int           fd,
                                    gpointer      data,
                                    gsize         length,
                                    guint64       offset,
                                    const gchar  *path,
                                    GError      **error);
gboolean  _mixprec_fsync_fd        (int           fd,
                                    const gchar  *path,
                                    GError      **error);
gboolean  _mixprec_fsync_dir       (const gchar  *dir,
                                    GError      **error);
gboolean  _mixprec_fsync_dir_fd    (int           dir_fd,
                                    const gchar  *dir,
                                    GError      **error);

/* Checkpoint folders are worked on through descriptors: the folder the
 * caller names is opened once (it may be a link: the caller named it),
 * and everything inside it is reached with openat()/renameat()/unlinkat()
 * and never through a symbolic link, which libmixprec never creates. */
int       _mixprec_open_dir        (const gchar  *dir,
                                    GError      **error);
/* Opens @dir/@name as a folder, refusing a link with
 * _mixprec_set_link_error(). */
int       _mixprec_open_subdir     (int           dir_fd,
                                    const gchar  *dir,
                                    const gchar  *name,
                                    GError      **error);
/* FALSE with the link error when @name in @dir_fd is a symbolic link. */
gboolean  _mixprec_refuse_link_at  (int           dir_fd,
                                    const gchar  *dir,
                                    const gchar  *name,
                                    GError      **error);
void      _mixprec_set_link_error  (GError      **error,
                                    const gchar  *path);
/* FALSE with an error naming @path unless @sb (from fstat or lstat) is a
 * regular file's: a link, a FIFO, a device or a folder is not a
 * checkpoint file. */
struct stat;
gboolean  _mixprec_check_regular   (const gchar       *path,
                                    const struct stat *sb,
                                    GError           **error);
/* Opens a file of a checkpoint for reading: never through a link, never
 * blocking (a FIFO or a device is an error at once), and only when it is
 * a regular file. @missing_code is the error code for ENOENT. */
int       _mixprec_open_regular    (const gchar  *path,
                                    gint          missing_code,
                                    GError      **error);
/* Writes @data to @dir_fd/@name with O_EXCL after removing a stale one,
 * then fsyncs it (not the folder); on failure nothing is left under
 * @name. @halfway runs after half the bytes; @dir names the folder in
 * messages. */
gboolean  _mixprec_write_file_synced_at (int          dir_fd,
                                         const gchar *dir,
                                         const gchar *name,
                                         const gchar *data,
                                         gsize        length,
                                         GFunc        halfway,
                                         gpointer     halfway_data,
                                         GError     **error);
/* Reads a whole regular file of at most @max bytes (NUL-terminated). */
gchar    *_mixprec_read_small_file (const gchar  *path,
                                    gsize         max,
                                    gsize        *length,
                                    GError      **error);
/* SHA-256 (hex) and size of a whole regular file. */
gchar    *_mixprec_file_sha256     (const gchar  *path,
                                    guint64      *size,
                                    GError      **error);
/* Removes @dir_fd/@name when it is a real folder (not a link), and in it
 * only regular files, as saves leave them; what cannot be removed, or is
 * anything else, is left in place. */
void      _mixprec_remove_flat_dir_at (int          dir_fd,
                                       const gchar *dir,
                                       const gchar *name);
/* Renames @from to @to inside @dir_fd; when @to exists the two are
 * swapped atomically where the filesystem can (so @to never goes
 * missing) and @from then holds the old @to. Sets *swapped accordingly.
 * Either name being a symbolic link is refused. */
gboolean  _mixprec_rename_dir_at   (int           dir_fd,
                                    const gchar  *dir,
                                    const gchar  *from,
                                    const gchar  *to,
                                    gboolean     *swapped,
                                    GError      **error);
void      _mixprec_set_io_error    (GError      **error,
                                    int           saved_errno,
                                    const gchar  *path,
                                    const gchar  *action);

/* ---------------------------------------------------------------- test hook */

/* The points of a save, in order, at which MIXPREC_CHECKPOINT_TEST_HOOK
 * can stop it; NULL-terminated. */
extern const gchar * const _mixprec_checkpoint_hook_points[];

/* In a library configured with --enable-test-hooks
 * (MIXPREC_ENABLE_TEST_HOOKS), with MIXPREC_CHECKPOINT_TEST_HOOK="abort:POINT[@RANK]" the process
 * kills itself with SIGKILL at POINT; with "pause:POINT[@RANK]" it
 * creates the file named by MIXPREC_CHECKPOINT_TEST_HOOK_MARKER (default
 * ROOT/.mixprec-test-hook-paused) and sleeps until killed. A testing aid;
 * otherwise it does nothing. */
void      _mixprec_checkpoint_hook (const gchar *point,
                                    guint        rank,
                                    const gchar *root);

G_END_DECLS
