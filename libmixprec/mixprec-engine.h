/* mixprec-engine.h — the step pipeline: from gradients to new working weights */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-config.h"
#include "mixprec-param.h"
#include "mixprec-loss-scaler.h"
#include "mixprec-comm.h"

G_BEGIN_DECLS

/**
 * MIXPREC_ENGINE_ERROR:
 *
 * Error domain of #MixprecEngine. Errors in this domain are from the
 * #MixprecEngineError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_ENGINE_ERROR (mixprec_engine_error_quark ())

/**
 * MixprecEngineError:
 * @MIXPREC_ENGINE_ERROR_INVALID_PARAM: a parameter registration was refused
 *   (duplicate name, empty shape, too large, bad buffer)
 * @MIXPREC_ENGINE_ERROR_WRONG_STATE: a call out of order (registering after
 *   the first step, stepping before any backward pass...)
 * @MIXPREC_ENGINE_ERROR_OPTIMIZER: the optimizer could not be found, its
 *   hyper-parameters are invalid, or its step failed
 * @MIXPREC_ENGINE_ERROR_SCALER: the loss scaler refused an update (the
 *   scale is already at its minimum)
 * @MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT: a wrong size, dtype or name
 * @MIXPREC_ENGINE_ERROR_COMM: communication between ranks failed (a peer
 *   died or stopped answering, or the rendezvous failed)
 *
 * Errors from #MixprecEngine.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_ENGINE_ERROR_INVALID_PARAM,
  MIXPREC_ENGINE_ERROR_WRONG_STATE,
  MIXPREC_ENGINE_ERROR_OPTIMIZER,
  MIXPREC_ENGINE_ERROR_SCALER,
  MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
  MIXPREC_ENGINE_ERROR_COMM,
} MixprecEngineError;

/**
 * MixprecStepResult:
 * @applied: %TRUE when the optimizer step ran; %FALSE when it was skipped
 *   because a gradient was not finite
 * @loss_scale: the scale the gradients of this step were computed with
 * @next_loss_scale: the scale to multiply the next loss by
 * @grad_norm: the global L2 norm of the unscaled, averaged gradients
 *   before clipping (infinite or NaN on overflow)
 * @clip_coef: the clipping divisor applied (1 when not clipped)
 * @step: optimizer steps taken so far, skipped ones included
 * @applied_steps: optimizer steps applied so far
 * @skipped_steps: optimizer steps skipped so far
 * @lr: the learning rate this step used (or would have used)
 *
 * What one call to mixprec_engine_step() did.
 *
 * Since: 1.0
 */
typedef struct {
  gboolean applied;
  gdouble loss_scale;
  gdouble next_loss_scale;
  gdouble grad_norm;
  gdouble clip_coef;
  guint64 step;
  guint64 applied_steps;
  guint64 skipped_steps;
  gdouble lr;
  /*< private >*/
  gpointer _mixprec_reserved[4];
} MixprecStepResult;

#define MIXPREC_TYPE_STEP_RESULT (mixprec_step_result_get_type ())
MIXPREC_AVAILABLE_IN_1_0
GType              mixprec_step_result_get_type (void) G_GNUC_CONST;
MIXPREC_AVAILABLE_IN_1_0
MixprecStepResult *mixprec_step_result_copy     (const MixprecStepResult *result);
MIXPREC_AVAILABLE_IN_1_0
void               mixprec_step_result_free     (MixprecStepResult       *result);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (MixprecStepResult, mixprec_step_result_free)

/**
 * MixprecMemoryReport:
 * @working: working copies resident on this rank (under ZeRO-3 the slices,
 *   plus the whole copies of persistent parameters), FP8 working copies and
 *   their MX block scales included
 * @gradients: the whole gradient buffers the backward pass writes (none
 *   under ZeRO-2/3 unless the caller asks for them)
 * @accumulation: gradient accumulation buffers (this rank's slices across
 *   ranks)
 * @masters: FP32 master weights (sharded from ZeRO-1 on)
 * @optimizer_state: optimizer state (sharded from ZeRO-1 on)
 * @communication: gradient staging, the sum-of-squares blocks and, under
 *   ZeRO-3, gathered working copies (FP8 ones included)
 * @total: the sum of the above
 *
 * Bytes per category on one rank, as the engine allocates them (the most
 * it held at once) or as mixprec_memory_plan_new() predicts them.
 * mixprec_engine_list_buffers() names every buffer behind the categories.
 *
 * Since: 1.0
 */
typedef struct {
  guint64 working;
  guint64 gradients;
  guint64 accumulation;
  guint64 masters;
  guint64 optimizer_state;
  guint64 communication;
  guint64 total;
  /*< private >*/
  gpointer _mixprec_reserved[4];
} MixprecMemoryReport;

#define MIXPREC_TYPE_MEMORY_REPORT (mixprec_memory_report_get_type ())
MIXPREC_AVAILABLE_IN_1_0
GType                mixprec_memory_report_get_type (void) G_GNUC_CONST;
MIXPREC_AVAILABLE_IN_1_0
MixprecMemoryReport *mixprec_memory_report_copy     (const MixprecMemoryReport *report);
MIXPREC_AVAILABLE_IN_1_0
void                 mixprec_memory_report_free     (MixprecMemoryReport       *report);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (MixprecMemoryReport, mixprec_memory_report_free)

/**
 * MixprecMemoryBuffer:
 * @name: what the buffer holds, e.g. "working copies", "gradient staging"
 * @bytes: bytes held now (for a plan: predicted)
 * @peak_bytes: the most bytes held at once since the engine was made
 *   (for a plan: predicted)
 * @planned_bytes: what the layout (or the plan) predicts
 *
 * One kind of buffer of an engine on one rank, summed over its parameter
 * groups.
 *
 * Since: 1.1
 */
typedef struct {
  gchar *name;
  guint64 bytes;
  guint64 peak_bytes;
  guint64 planned_bytes;
  /*< private >*/
  gpointer _mixprec_reserved[4];
} MixprecMemoryBuffer;

#define MIXPREC_TYPE_MEMORY_BUFFER (mixprec_memory_buffer_get_type ())
MIXPREC_AVAILABLE_IN_1_1
GType                mixprec_memory_buffer_get_type (void) G_GNUC_CONST;
MIXPREC_AVAILABLE_IN_1_1
MixprecMemoryBuffer *mixprec_memory_buffer_copy     (const MixprecMemoryBuffer *buffer);
MIXPREC_AVAILABLE_IN_1_1
void                 mixprec_memory_buffer_free     (MixprecMemoryBuffer       *buffer);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (MixprecMemoryBuffer, mixprec_memory_buffer_free)

/**
 * MixprecCommBytes:
 * @all_gather: all-gathers of working weights (ZeRO-3's forward and
 *   backward gathers, qwZ's int8 codes and block scales, the updated
 *   weights made whole after a ZeRO-1/2 step, persistent parameters)
 * @reduce_scatter: reduce-scatters of gradients, and qgZ's all-to-alls of
 *   int4 codes and block scales
 * @scalars: the step's agreement (gradient-norm blocks, FP8 amaxes),
 *   all-reduces, numerics statistics
 * @other: every other collective (broadcasts, mixprec_engine_gather_master()
 *   and the like)
 * @total: the sum of the above
 * @inter_host: the part of @total sent to ranks on other hosts
 * @inter_host_all_gather: the part of @all_gather sent to ranks on other
 *   hosts
 * @inter_host_reduce_scatter: the part of @reduce_scatter sent to ranks on
 *   other hosts
 *
 * Bytes one rank sends to the other ranks of its data-parallel
 * communicator, by what they carry. A collective counts what it makes
 * this rank send when data moves directly between ranks, whatever
 * algorithm the backend runs: an all-gather or reduce-scatter of n bytes
 * per rank (W ranks) (W - 1) n, an all-to-all of n bytes per rank
 * (W - 1) n, an all-reduce of n bytes 2 (W - 1) n / W, a broadcast of
 * n bytes (W - 1) n on its root and 0 elsewhere. The bytes sent to ranks
 * on the same host (by host name, as the rendezvous found them) are
 * intra-host, the others inter-host.
 *
 * Since: 1.1
 */
typedef struct {
  guint64 all_gather;
  guint64 reduce_scatter;
  guint64 scalars;
  guint64 other;
  guint64 total;
  guint64 inter_host;
  guint64 inter_host_all_gather;
  guint64 inter_host_reduce_scatter;
  /*< private >*/
  gpointer _mixprec_reserved[4];
} MixprecCommBytes;

#define MIXPREC_TYPE_COMM_BYTES (mixprec_comm_bytes_get_type ())
MIXPREC_AVAILABLE_IN_1_1
GType             mixprec_comm_bytes_get_type (void) G_GNUC_CONST;
MIXPREC_AVAILABLE_IN_1_1
MixprecCommBytes *mixprec_comm_bytes_copy     (const MixprecCommBytes *bytes);
MIXPREC_AVAILABLE_IN_1_1
void              mixprec_comm_bytes_free     (MixprecCommBytes       *bytes);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (MixprecCommBytes, mixprec_comm_bytes_free)

MIXPREC_AVAILABLE_IN_1_1
MixprecCommBytes *mixprec_comm_bytes_plan_new (MixprecConfig *config,
                                               const guint64 *param_sizes,
                                               guint          n_params,
                                               guint          world_size,
                                               guint          ranks_per_host,
                                               GError       **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecCommBytes *mixprec_comm_bytes_plan_new_deepspeed (MixprecConfig *config,
                                                         guint64        n_params,
                                                         guint          world_size,
                                                         guint          ranks_per_host,
                                                         GError       **error);

MIXPREC_AVAILABLE_IN_1_0
MixprecMemoryReport *mixprec_memory_plan_new        (MixprecConfig  *config,
                                                     guint64         n_params,
                                                     guint           world_size,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
GPtrArray           *mixprec_memory_plan_list_buffers (MixprecConfig *config,
                                                     const guint64  *param_sizes,
                                                     guint           n_params,
                                                     guint           world_size,
                                                     guint64         gathered,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecMemoryReport *mixprec_memory_plan_new_deepspeed (MixprecConfig *config,
                                                     guint64         n_params,
                                                     guint           world_size,
                                                     GError        **error);

#define MIXPREC_TYPE_ENGINE (mixprec_engine_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecEngine, mixprec_engine, MIXPREC, ENGINE, GObject)

MIXPREC_AVAILABLE_IN_1_0
GQuark             mixprec_engine_error_quark       (void);

MIXPREC_AVAILABLE_IN_1_0
MixprecEngine     *mixprec_engine_new               (MixprecConfig  *config,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecEngine     *mixprec_engine_new_with_comm     (MixprecConfig  *config,
                                                     MixprecComm    *comm,
                                                     MixprecComm    *model_parallel_comm,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecEngine     *mixprec_engine_new_from_file     (const gchar    *filename,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecConfig     *mixprec_engine_get_config        (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
guint              mixprec_engine_get_rank          (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
guint              mixprec_engine_get_world_size    (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
guint              mixprec_engine_get_zero_stage    (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecLossScaler *mixprec_engine_get_loss_scaler   (MixprecEngine  *self);

MIXPREC_AVAILABLE_IN_1_0
MixprecParam      *mixprec_engine_register_param    (MixprecEngine  *self,
                                                     const gchar    *name,
                                                     const guint64  *shape,
                                                     guint           n_dims,
                                                     const gchar    *module_type,
                                                     MixprecDType    init_dtype,
                                                     GBytes         *init,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecParam      *mixprec_engine_register_external (MixprecEngine  *self,
                                                     const gchar    *name,
                                                     const guint64  *shape,
                                                     guint           n_dims,
                                                     const gchar    *module_type,
                                                     gpointer        working,
                                                     gpointer        grad,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecParam      *mixprec_engine_register_external_address (MixprecEngine  *self,
                                                     const gchar    *name,
                                                     const guint64  *shape,
                                                     guint           n_dims,
                                                     const gchar    *module_type,
                                                     MixprecDType    dtype,
                                                     guint64         working,
                                                     guint64         grad,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecEngine     *mixprec_param_get_engine         (MixprecParam   *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean           mixprec_engine_prepare           (MixprecEngine  *self,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecParam      *mixprec_engine_get_param         (MixprecEngine  *self,
                                                     const gchar    *name);
MIXPREC_AVAILABLE_IN_1_0
GPtrArray         *mixprec_engine_get_params        (MixprecEngine  *self);

MIXPREC_AVAILABLE_IN_1_0
GStrv              mixprec_engine_get_optimizer_state_names (MixprecEngine *self);
MIXPREC_AVAILABLE_IN_1_0
GBytes            *mixprec_engine_get_optimizer_state (MixprecEngine  *self,
                                                     const gchar    *param_name,
                                                     const gchar    *slot,
                                                     GError        **error);

MIXPREC_AVAILABLE_IN_1_0
gdouble            mixprec_engine_get_loss_scale    (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble            mixprec_engine_get_lr            (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
guint              mixprec_engine_get_gradient_accumulation_steps (MixprecEngine *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean           mixprec_engine_is_accumulation_boundary (MixprecEngine *self);

MIXPREC_AVAILABLE_IN_1_0
gboolean           mixprec_engine_gather            (MixprecEngine  *self,
                                                     MixprecParam   *param,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean           mixprec_engine_prefetch          (MixprecEngine  *self,
                                                     MixprecParam   *param,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
void               mixprec_engine_release           (MixprecEngine  *self,
                                                     MixprecParam   *param);
MIXPREC_AVAILABLE_IN_1_0
gboolean           mixprec_engine_gather_all        (MixprecEngine  *self,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
void               mixprec_engine_release_all       (MixprecEngine  *self);
MIXPREC_AVAILABLE_IN_1_0
GBytes            *mixprec_engine_gather_master     (MixprecEngine  *self,
                                                     const gchar    *param_name,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean           mixprec_engine_set_master        (MixprecEngine  *self,
                                                     const gchar    *param_name,
                                                     GBytes         *values,
                                                     guint           root,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecMemoryReport *mixprec_engine_get_memory_report (MixprecEngine *self);
MIXPREC_AVAILABLE_IN_1_1
GPtrArray         *mixprec_engine_list_buffers      (MixprecEngine  *self);

MIXPREC_AVAILABLE_IN_1_0
gboolean           mixprec_engine_backward_done     (MixprecEngine  *self,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecStepResult *mixprec_engine_step              (MixprecEngine  *self,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean           mixprec_engine_micro_step        (MixprecEngine      *self,
                                                     MixprecStepResult **result,
                                                     GError            **error);

MIXPREC_AVAILABLE_IN_1_1
gboolean           mixprec_engine_report_scalar     (MixprecEngine  *self,
                                                     const gchar    *tag,
                                                     gdouble         value,
                                                     GError        **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecNumerics   *mixprec_engine_get_numerics      (MixprecEngine  *self);

MIXPREC_AVAILABLE_IN_1_1
guint64            mixprec_engine_get_gathered_bytes (MixprecEngine *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecCommBytes  *mixprec_engine_get_comm_bytes    (MixprecEngine *self);

G_END_DECLS
