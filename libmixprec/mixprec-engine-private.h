/* mixprec-engine-private.h — what checkpoints (and later the distributed
 * parts) need from the engine's internals. Never installed. */
#pragma once

#include "mixprec.h"
#include "mixprec-plugin-abi.h"

G_BEGIN_DECLS

/* The part of one parameter this rank owns: the element range
 * [begin, end) of the parameter (the whole parameter on one process; a
 * ZeRO shard otherwise) with pointers to the values of that range. */
typedef struct {
  MixprecParam *param;
  guint64 begin;
  guint64 end;
  /* FP32 values the optimizer updates for [begin, end): the master copy,
   * or the working copy when that is FP32; NULL in bf16 without master
   * weights, where @working holds the only copy. */
  gfloat *master;
  /* The working copy for [begin, end) in the parameter's working dtype;
   * equal to @master when the working dtype is FP32. */
  gpointer working;
  MixprecDType working_dtype;
  /* n_state_slots arrays of state_dtype (float32 or bfloat16) for
   * [begin, end), in the optimizer's order. */
  gpointer states[16];
  guint n_state_slots;
  MixprecDType state_dtype;
  /* How the values are represented (mixprec-plugin-abi.h, optimizer
   * revision 3). master_format is MIXPREC_PLUGIN_MASTER_FLOAT32 for FP32
   * masters and for working copies without masters; REMAINDER and KAHAN
   * keep @working in bfloat16 and @master NULL, and @master_extra holds an
   * int16 remainder or a bfloat16 compensation per element of
   * [begin, end). */
  MixprecPluginMasterFormat master_format;
  gpointer master_extra;
  /* Per slot: its format (FLOAT32 or BFLOAT16 for @state_dtype's slots).
   * states[k] addresses the code of element @begin, which for INT4 is
   * nibble @code_phase (0: low, 1: high) of the first byte. For a scaled
   * format, state_scales[k] addresses the FP32 scale of the block that
   * holds element @begin; blocks are @block_size elements of the
   * parameter's unit (unit-relative), and element @begin is element
   * @block_phase of its block. */
  MixprecPluginStateFormat state_formats[16];
  gfloat *state_scales[16];
  gboolean state_signed[16];
  guint block_size;
  guint64 block_phase;
  guint code_phase;
} _MixprecEngineShard;

typedef struct {
  guint64 steps;             /* optimizer steps taken, skipped ones included */
  guint64 applied_steps;
  guint64 skipped_steps;
  guint64 seed;              /* mixprec.seed, for stochastic rounding */
} _MixprecEngineCounters;

/* One shard per registered parameter, in registration order (empty ranges
 * where this rank owns nothing). Lays out the buffers if needed. The
 * pointers stay valid while the engine lives. */
GArray            *_mixprec_engine_get_shards        (MixprecEngine                *self,
                                                      GError                      **error);
/* The shards a load writes: as _mixprec_engine_get_shards(), except that
 * under ZeRO-0 across ranks, where every rank keeps every value, each
 * rank's shards are whole parameters (blocks of scaled state cannot be
 * gathered slice by slice as plain values are). */
GArray            *_mixprec_engine_get_load_shards   (MixprecEngine                *self,
                                                      GError                      **error);
void               _mixprec_engine_get_counters      (MixprecEngine                *self,
                                                      _MixprecEngineCounters       *counters);
void               _mixprec_engine_set_counters      (MixprecEngine                *self,
                                                      const _MixprecEngineCounters *counters);
MixprecLrSchedule *_mixprec_engine_get_schedule      (MixprecEngine                *self);
MixprecFeature    *_mixprec_engine_get_optimizer     (MixprecEngine                *self);
guint              _mixprec_engine_get_rank          (MixprecEngine                *self);
guint              _mixprec_engine_get_world_size    (MixprecEngine                *self);
guint              _mixprec_engine_get_zero_stage    (MixprecEngine                *self);
/* Collective over the engine's ranks (a no-op on one process). */
gboolean           _mixprec_engine_barrier           (MixprecEngine                *self,
                                                      GError                      **error);
/* Writes the FP32 values @values[0, n) as elements [@e, @e + n) of
 * @shard's range (shard-relative) in the engine's representation: FP32
 * masters as they are; a working copy without masters, or a bfloat16
 * working copy with a remainder, rounded to nearest even (the remainder
 * exact); a Kahan pair as x rounded to nearest even and the rounding's
 * error. */
gboolean           _mixprec_engine_shard_store_f32   (const _MixprecEngineShard    *shard,
                                                      guint64                       e,
                                                      const gfloat                 *values,
                                                      guint64                       n,
                                                      GError                      **error);
/* After masters (or, without masters, working values) were written through
 * the shards: rounds every working copy from its master with nearest-even
 * rounding and makes the copies whole again on every rank. Also clears any
 * half-accumulated gradients. */
gboolean           _mixprec_engine_refresh_working   (MixprecEngine                *self,
                                                      GError                      **error);

/* ZeRO++ LoCo's error buffers in checkpoints (mixprec-engine-loco.c):
 * the @index-th group that keeps one (FALSE past the last), its index
 * among the groups, its fp16 errors, their count (the padded flat layout,
 * which depends on the world size) and the applied steps since they were
 * last zeroed; and restoring them from this rank's shard of @ckpt where
 * it holds them for the same layout, zeroing them where it does not (a
 * checkpoint saved without LoCo, or at another world size). */
gboolean _mixprec_engine_zeropp_loco_buffer  (MixprecEngine   *engine,
                                              guint            index,
                                              guint           *group,
                                              const guint16  **err,
                                              guint64         *n,
                                              guint64         *steps);
gboolean _mixprec_engine_zeropp_restore_loco (MixprecEngine     *engine,
                                              MixprecCheckpoint *ckpt,
                                              GError           **error);

/* Per-tensor numerics' FP32 shadow in checkpoints
 * (mixprec-engine-numerics-shadow.c): whether this rank has a started
 * shadow to save, and if so its elements, its optimizer state slots,
 * their count, the element count, the tensor to save the elements as
 * (the slots as _mixprec_engine_numerics_shadow_state_name()), and the
 * metadata key and value (free it) that describe its layout; and
 * restoring it from this rank's shard of @ckpt where the shard holds one
 * of this layout, dropping it for a fresh start where not (and where
 * @ckpt is NULL: a load of the weights alone). */
gboolean _mixprec_engine_numerics_shadow_saved      (MixprecEngine        *engine,
                                                     const gfloat        **shadow,
                                                     const gfloat *const **states,
                                                     guint                *n_states,
                                                     guint64              *n,
                                                     const gchar         **tensor,
                                                     const gchar         **layout_key,
                                                     gchar               **layout);
gchar   *_mixprec_engine_numerics_shadow_state_name (guint                 k);
gboolean _mixprec_engine_numerics_restore_shadow    (MixprecEngine        *engine,
                                                     MixprecCheckpoint    *ckpt,
                                                     GError              **error);

/* Restores the FP8 scaling of every fp8 parameter of @engine from @states
 * (parameter name -> saved a{sv}); one without a saved state starts
 * fresh; states of parameters that are not fp8 here are ignored. Checks
 * every state before it changes any. @path names the checkpoint in errors. */
gboolean _mixprec_engine_restore_fp8 (MixprecEngine *engine,
                                      const gchar   *path,
                                      GHashTable    *states,
                                      GError       **error);

/* mixprec.auto_precision in checkpoints (mixprec-engine-autoprec.c): the
 * state as an a{sv} (NULL when off), and restoring it (NULL @state: every
 * parameter back at the policy's precision) before the values are
 * loaded: the buffers are laid out again for the saved dtypes, keeping
 * the values they held until the load writes its own. @path names the
 * checkpoint in errors. */
GVariant *_mixprec_engine_autoprec_save_state (MixprecEngine *self);
gboolean  _mixprec_engine_autoprec_restore    (MixprecEngine *self,
                                               const gchar   *path,
                                               GVariant      *state,
                                               GError       **error);

/* The engine's part of mixprec_param_reduce_grad(), for @param of
 * @engine with its storage in place (mixprec-engine-reduce.c). */
gboolean _mixprec_engine_reduce_grad (MixprecEngine *engine,
                                      MixprecParam  *param,
                                      MixprecDType   dtype,
                                      gconstpointer  grad,
                                      GError       **error);

/* The save behind mixprec_engine_save_checkpoint_full(), arguments
 * checked (mixprec-checkpoint-save.c). */
gboolean _mixprec_checkpoint_save (MixprecEngine              *engine,
                                   const gchar                *dir,
                                   const gchar                *tag,
                                   MixprecCheckpointSaveFlags  flags,
                                   GError                    **error);

/* The load behind mixprec_engine_load_checkpoint_full()
 * (mixprec-checkpoint-load.c). */
gboolean _mixprec_checkpoint_load (MixprecEngine              *engine,
                                   const gchar                *dir,
                                   MixprecCheckpointLoadFlags  flags,
                                   GError                    **error);

/* The export behind mixprec_engine_export_fp32()
 * (mixprec-checkpoint-export.c). */
gboolean _mixprec_checkpoint_export_fp32 (MixprecEngine *engine,
                                          const gchar   *path,
                                          GError       **error);

/* mixprec_param_get_master() of a parameter whose FP32 value is kept as a
 * remainder or Kahan pair beside its bfloat16 working copy
 * (mixprec-engine-access.c): sets *@split and returns the joined values
 * (mixprec_engine_gather_master()'s) when they are whole on this rank,
 * or fails with WRONG_STATE when they are sharded across ranks; leaves
 * *@split FALSE and returns %NULL for every other parameter. */
GBytes * _mixprec_engine_split_master_of (MixprecEngine *self,
                                          MixprecParam  *param,
                                          gboolean      *split,
                                          GError       **error);

G_END_DECLS
