/* mixprec-engine-impl-private.h — the engine's internal structures, shared
 * by the files that implement it (layout, micro-steps and step, ZeRO-3,
 * checkpoint access). Never installed. */
#pragma once

#include "mixprec.h"
#include "mixprec-comm-private.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-kernels-private.h"
#include "mixprec-monitor-private.h"
#include "mixprec-param-private.h"

G_BEGIN_DECLS

/* Elements per thread work item: large enough that the pool's wake-up cost
 * is noise, small enough that two cores share uneven groups. */
#define _MIXPREC_ENGINE_MIN_CHUNK ((gsize) 1 << 16)

/* A run of a group's elements that share buffers: the whole group for
 * engine-owned parameters, one parameter for user-owned memory (one
 * process only). Each pointer addresses the element whose index in the
 * group's element space is the matching *_base. */
typedef struct {
  guint64 offset;            /* in the group's element space */
  guint64 numel;
  gpointer working;          /* working dtype */
  guint64 working_base;
  gpointer grad;             /* grad dtype, indexed from offset */
  gfloat *master;            /* FP32 values the optimizer updates; NULL without master */
  guint64 master_base;
} Segment;

/* Parameters are partitioned in *units*: runs of consecutive parameters of
 * one group, at most _MIXPREC_UNIT_ELEMENTS elements unless one parameter
 * is larger, never mixing parameters below the ZeRO-3 persistence
 * threshold with larger ones. Across W ranks a unit is padded to a
 * multiple of W * _MIXPREC_SUMSQ_BLOCK and cut into W equal slices, slice r
 * belonging to rank r: one reduce-scatter per unit hands every rank its
 * slice, one all-gather makes it whole again, and every rank's part of a
 * parameter is one contiguous range. Units depend on the parameters and
 * the config only, never on the world size: the sum of squares is formed
 * per block of a unit, so it comes out the same at any world size. */
#define _MIXPREC_UNIT_ELEMENTS ((guint64) 1 << 20)

/* Gradient staging slots: at least a unit of several parameters, at most
 * this many elements, two of them. */
#define _MIXPREC_SLOT_MAX_ELEMENTS ((guint64) 1 << 22)
#define _MIXPREC_N_SLOTS 2

typedef struct {
  guint first_param;         /* index in the group's params */
  guint n_params;
  guint64 index;             /* first element in the unpadded element space */
  guint64 numel;             /* real elements */
  guint64 flat;              /* first element in the padded element space */
  guint64 padded;            /* numel padded to world * block (numel on one process) */
  guint64 local;             /* where this rank's slice starts in the sharded buffers */
  guint64 first_block;       /* its first sum-of-squares block among this rank's */
  gboolean persistent;       /* ZeRO-3: every rank keeps the whole working copy */
  guint64 persist_at;        /* ZeRO-3: where it lies in the persistent copies */
  /* Like a group, a unit keeps each phase's fields in a part that only
   * the phase's file writes. */
  struct {                   /* mixprec-engine-reduce.c: this micro-step's gradients */
    guint64 arrived;         /* elements handed over with reduce_grad() */
    gboolean started;        /* its reduction has been started */
    gint slot;               /* the staging slot collecting it, or -1 */
    gboolean summed;         /* one process, gradients read in place: every
                                block sum of this step taken at intake */
  } intake;
  struct {                   /* mixprec-engine-zero3.c: gathering */
    gpointer gathered;       /* the whole working copy while gathered */
    guint gather_count;
    gboolean prefetched;     /* gathering ahead, counted in the prefetch window */
    MixprecCommRequest *gathering;
    gboolean second_level;   /* over hosts: the second level is still to run
                                (mixprec-engine-hosts.c) */
  } zero3;
  /* mixprec-engine-fp8.c: FP8 groups under the MX recipe (one parameter
   * per unit): where the unit's block scales start in the group's whole
   * scale space (ZeRO-3: among the persistent units'), and among this
   * rank's slices' scales. */
  struct {
    guint64 scales_at;
    guint64 scales_local;
  } fp8;
  /* mixprec-engine-represent.c: where the block scales of this rank's part
   * of the unit start in each scaled slot's scales (Group.state_scales);
   * its scaled state starts at that times the block size. */
  struct {
    guint64 scales;
  } repr;
  /* mixprec-engine-zeropp.c: a quantized gather on its way (qwZ): every
   * rank's int8 codes and block scales, @chunk bytes each. */
  struct {
    guint8 *wire;
    guint64 chunk;
    guint64 groups;          /* blocks of one slice */
  } zeropp;
  /* mixprec-engine-hpz.c: where this rank's part of the unit's secondary
   * copy starts in Group.hpz.secondary, and whether it holds the weights
   * of this micro-step. */
  struct {
    guint64 at;
    gboolean valid;
  } hpz;
} Unit;

typedef enum {
  ACCUM_NONE,                /* one process: gradients read in place */
  ACCUM_FLAT,                /* one process: a buffer of the element space */
  ACCUM_SHARD,               /* ranks: this rank's slice of every unit */
  ACCUM_IN_GRAD,             /* ranks, one micro-step, grad dtype == accum dtype:
                                reduced in place into this rank's slices of
                                the gradient buffer */
} AccumMode;

typedef enum {
  SLOT_FREE,
  SLOT_FILLING,              /* collecting a unit's parameters */
  SLOT_IN_FLIGHT,            /* the send buffer of a started reduction */
} SlotState;

typedef struct {
  gpointer data;             /* slot_elements of the wire dtype */
  SlotState state;
} Slot;

/* A started reduction and what its completion frees. */
typedef struct {
  MixprecCommRequest *request;
  gint slot;                 /* the staging slot it sends from, or -1 */
  guint64 zero_begin;        /* gradient elements to zero once sent */
  guint64 zero_n;
  /* ZeRO++ qgZ (mixprec-engine-zeropp.c): the quantized all-to-all's
   * buffers and where its sum goes; NULL for a plain reduce-scatter. */
  struct _QgzReduce *qgz;
} Pending;

/* A group's state comes in parts, each written by one file only: the
 * others read it, or ask the owner through a function of its file
 * (docs/reference/internals.md, "Engine state and who writes it"). What
 * the buffers hold is written by the passes over them; the parts own the
 * pointers and the bookkeeping. */

/* Intake (mixprec-engine-reduce.c): the gradients handed over in the
 * current micro-steps and the reductions they started. */
typedef struct {
  GArray *slots;             /* Slot */
  GArray *pending;           /* Pending: reductions in flight */
  GError *device_error;      /* the first failure of a device kernel in a pass */
  gboolean grad_zeroed;      /* one process: the step zeroed the gradients it read
                                (_mixprec_engine_note_grad_zeroed()) */
  guint n_exposed;           /* parameters whose gradient buffer the caller
                                was given (see _mixprec_engine_grad_private()) */
  gboolean has_stale;        /* some parameter's grad_stale is set */
} GroupIntake;

/* Gradient norm (mixprec-engine-norm.c): the block sums the agreement
 * gathers (mixprec-engine-agree.c). Their values come from the intake's
 * fold, the norm pass and the agreement's gather. */
typedef struct {
  gdouble *blocks;           /* this rank's, then (ranks) every rank's */
  guint64 n_blocks;          /* this rank's blocks */
  gboolean ready;            /* one process: the last fold summed the blocks
                                (_mixprec_engine_norm_set_ready()) */
} GroupNorm;

/* FP8 working copies (mixprec-engine-fp8.c): a group holds fp8
 * parameters only, or none. */
typedef struct {
  gboolean enabled;
  MixprecFp8RecipeKind kind;
  MixprecDType dtype;
  guint8 *data;              /* padded element space (bytes), or the slices under ZeRO-3 */
  guint8 *scales;            /* MX: the scale space, or its slices under ZeRO-3 */
  guint64 scales_n;          /* MX: bytes of scales */
  guint64 scales_whole;      /* MX, ZeRO-3: where the persistent units'
                                whole scales start in scales */
  gfloat *agreed;            /* delayed: the amaxes agreed in this step's
                                overflow agreement, one per parameter */
  struct _MixprecFp8Fuse *fuse;  /* the cast fused into the step's pass */
  gboolean fused;            /* this step's pass cast (see mixprec-engine-fp8.c) */
  gfloat *amax_device;       /* on a device: one running amax per parameter,
                                in device memory (NULL on the cpu device) */
  gboolean fp4;              /* 4-bit copies instead (mixprec-engine-fp4.c):
                                data holds two elements a byte */
  MixprecBlockRecipe fp4_recipe;
  MixprecMxScaleMode fp4_mode;
} GroupFp8;

/* Host mirrors (mixprec-engine-access.c): device buffers copied for
 * checkpoints. */
typedef struct {
  GArray *copies;            /* HostMirror */
} GroupMirrors;

typedef struct {
  /* Layout (mixprec-engine-layout.c): what the group is, its units and
   * buffers; every phase reads it. */
  struct {
    guint index;
    _MixprecParamDTypes dtypes;
    MixprecDType wire;         /* what gradients travel in */
    gdouble weight_decay_multiplier;
    gboolean external;
    guint64 numel;             /* real elements */
    guint64 padded;            /* the padded element space: sum of unit sizes */
    guint64 local_n;           /* this rank's slices: padded / world */
    guint64 persist_n;         /* ZeRO-3: elements of persistent units */
    GArray *units;             /* Unit */
    GPtrArray *params;         /* MixprecParam, borrowed from the engine */
    GArray *segments;          /* Segment (one process) */
    gboolean state_local;      /* masters and optimizer state hold the slices only */
    gboolean working_local;    /* ZeRO-3: the working copy holds the slices only */
    gboolean working_on_host;  /* ZeRO-3 with offload_param: those slices are host
                                  memory (the engine's offload_param) */
    AccumMode accum_mode;
    guint64 slot_elements;     /* wire dtype, per staging slot */
    /* Buffers (NULL where not needed). */
    gpointer working;          /* padded element space, or the slices under ZeRO-3 */
    gpointer persistent;       /* ZeRO-3: whole working copies of persistent units */
    gpointer grad;             /* padded element space; NULL until used under ZeRO-2/3 */
    gpointer accum;
    gfloat *master;
    /* REMAINDER masters: a gint16 per element, KAHAN: a bfloat16, indexed
     * as master would be (the state_at of _mixprec_engine_values_at());
     * NULL otherwise, and then there is no FP32 master either. */
    gpointer master_extra;
    gpointer *states;          /* NULL-terminated; slot k in repr.slots[k]: FLOAT32 and
                                  BFLOAT16 indexed by state_at, the scaled formats by
                                  block (see _mixprec_engine_state_index()) */
    /* n_slots entries: the FP32 block scales of each scaled slot
     * (_mixprec_engine_n_scales() of them, _mixprec_engine_scale_at()),
     * NULL for the others; NULL when no slot is scaled. */
    gfloat **state_scales;
    gdouble *hparams;          /* the optimizer's values for this group */
    _MixprecDevice *device;    /* where the buffers live (NULL: host memory) */
    _MixprecDevice *state_device;  /* where the masters and optimizer state live:
                                      @device, or NULL when offloaded */
  };
  GroupIntake intake;
  GroupNorm norm;
  GroupFp8 fp8;
  /* Offload (mixprec-engine-offload.c): host buffers a bucket of
   * gradients comes down into and its working copies go up from, two of
   * each. Reached by their prefixed names, which tests use to size the
   * buckets. */
  struct {
    gpointer offload_grad[2];
    gpointer offload_working[2];
    guint64 offload_elements;  /* per buffer */
  };
  GroupMirrors mirrors;
  /* ZeRO++ (mixprec-engine-zeropp.c): whether ZeRO-3 gathers this
   * group's working copies quantized (zero_quantized_weights). */
  struct {
    gboolean weights;
    gboolean gradients;      /* ZeRO-3's reduce-scatters travel as int4 (qgZ) */
    /* What they move (mixprec.quantized_*_format): a _MixprecZeroppFormat. */
    guint weights_format;
    guint gradients_format;
    /* qgZ in two levels (mixprec-engine-zeropp.c): ranks per host where
     * the world is several hosts of as many consecutive ranks each, more
     * than one; 0: one level over the world. */
    guint host_ranks;
    /* LoCo (zeropp_loco_param): this rank's fp16 error feedback, one per
     * element it sends (g->padded, the flat layout), err_beta, reset_T,
     * and the applied steps since the buffer was last zeroed. */
    guint16 *loco_err;
    gfloat loco_beta;
    guint loco_reset_t;
    guint64 loco_steps;
  } zeropp;
  /* ZeRO-3's gathers over the world run in two levels over hosts of this
   * many ranks (mixprec-engine-hosts.c); 0: in one. */
  guint gather_host_ranks;
  /* ZeRO++ hpZ (mixprec-engine-hpz.c): ranks per group (0: off) and this
   * rank's part of every partitioned unit's gathered working copy. */
  struct {
    guint size;
    gpointer secondary;
  } hpz;
} Group;

/* A host copy of one device buffer, which checkpoints read and write
 * through their shards. */
typedef struct {
  gpointer device;
  gpointer host;
  gsize bytes;
} HostMirror;

/* The buffers an engine holds, by name: what the memory report lists and
 * the plan predicts, in this order. */
typedef enum {
  BUF_WORKING,
  BUF_PERSISTENT,
  BUF_GATHERED,
  BUF_GRADIENTS,
  BUF_ACCUM,
  BUF_MASTERS,
  BUF_REMAINDERS,            /* REMAINDER masters' low halves */
  BUF_KAHAN,                 /* KAHAN masters' compensations */
  BUF_STATE,
  BUF_STATE_SCALES,          /* block scales of the scaled state formats */
  BUF_STAGING,
  BUF_NORM,
  /* Offload: the same buffers in host memory, and the transfer buffers. */
  BUF_HOST_MASTERS,
  BUF_HOST_STATE,
  BUF_HOST_STAGING,
  BUF_PINNED_STAGING,        /* the transfer buffers in the device's pinned memory */
  BUF_HOST_WORKING,          /* offload_param: ZeRO-3's working slices */
  BUF_PINNED_WORKING,        /* the same in the device's pinned memory */
  BUF_FP8,                   /* FP8 working copies */
  BUF_FP8_SCALES,            /* their MX block scales */
  BUF_FP8_GATHERED,          /* ZeRO-3: FP8 copies (and scales) gathered */
  BUF_HPZ,                   /* ZeRO++ hpZ: the secondary partition of the working copies */
  N_BUFS                     /* at most 32: allocations pack the kind in 5 bits */
} BufferKind;

#define _MIXPREC_BUF_KIND_BITS 5
#define _MIXPREC_BUF_KIND_MASK ((1u << _MIXPREC_BUF_KIND_BITS) - 1)

extern const gchar * const _mixprec_engine_buffer_names[N_BUFS];

/* How the optimizer keeps what it updates (mixprec.master_weights,
 * mixprec.optimizer_states), resolved against the optimizer
 * (mixprec-engine-represent.c). @master applies to the groups of bfloat16
 * parameters without an FP32 master (_mixprec_engine_master_format());
 * @block_size is 0 when no slot is scaled. */
typedef struct {
  MixprecPluginMasterFormat master;
  MixprecPluginStateFormat slots[16];
  guint block_size;
} _MixprecRepresentation;

struct _MixprecEngine
{
  GObject parent_instance;

  MixprecConfig *config;
  MixprecPrecisionPolicy *policy;
  MixprecLossScaler *scaler;
  MixprecLrSchedule *schedule;
  MixprecFeature *optimizer;
  MixprecDType state_dtype;  /* of every slot when they are all FLOAT32 or all
                                BFLOAT16 (DeepSpeed's keys); else see repr */
  _MixprecRepresentation repr;
  gdouble *hparams;          /* resolved from the config, schema order */
  guint n_hparams;
  gint weight_decay_index;   /* -1 when the optimizer has none */

  _MixprecDevice *device;    /* mixprec.device; NULL for "cpu" */
  gdouble *norm_sums;        /* block sums of every group, then the total */
  gsize n_norm_sums;
  gboolean comm_on_stream;   /* the communicator queues on the device's stream */
  MixprecComm *comm;         /* data-parallel group; NULL on one process */
  MixprecComm *mp_comm;      /* optional model-parallel group */
  guint rank;
  guint world;
  guint stage;               /* effective ZeRO stage: 0 on one process */

  GPtrArray *params;         /* MixprecParam, registration order */
  GHashTable *by_name;       /* name -> MixprecParam (borrowed) */
  GHashTable *init_values;   /* MixprecParam -> InitValues, until laid out */
  GPtrArray *groups;         /* Group */
  gboolean prepared;

  /* What is allocated, by buffer kind: now, and the most at once. */
  GHashTable *allocations;   /* address -> (kind, bytes) */
  guint64 buf_bytes[N_BUFS];
  guint64 buf_peak[N_BUFS];
  guint64 buf_plan[N_BUFS];  /* what the layout planned */

  /* ZeRO-3 gathering, in elements. */
  guint64 live_elements;     /* gathered units, prefetches included */
  guint64 prefetching;       /* units being gathered ahead */

  guint gas;                 /* gradient_accumulation_steps */
  guint micro_steps;         /* backward passes folded since the last step */
  guint intake_step;         /* micro-step whose gradients reduce_grad() takes */
  guint64 steps;
  guint64 applied_steps;
  guint64 skipped_steps;
  guint64 seed;
  gboolean stochastic;
  gboolean overlap;
  gboolean offload;          /* masters and optimizer state in host memory */
  gboolean offload_pinned;   /* its transfer buffers in the device's pinned memory */
  gboolean offload_param;    /* ZeRO-3 across ranks on a device: the working
                                slices in host memory between gathers */
  gboolean offload_param_pinned;  /* ... in the device's pinned memory */
  gpointer offload_transfers;  /* the transfer thread, from the first offloaded
                                  step to finalize (mixprec-engine-offload.c) */

  /* FP8 (mixprec-engine-fp8.c). */
  MixprecFp8Recipe *fp8_recipe;  /* the config's, or NULL */
  guint64 gathered_bytes;    /* ZeRO-3: bytes every gather() assembled */
  guint64 comm_mark[4][2];   /* the communicator's sent counts at the last step
                                (mixprec-engine-comm-bytes.c) */
  MixprecCommBytes comm_bytes;  /* what the last step sent */

  /* What the steps tell (mixprec-engine-monitor.c); monitors on rank 0. */
  guint64 steps_per_print;   /* 0: no progress messages */
  _MixprecCsvMonitor *csv;
  _MixprecTbMonitor *tb;

  /* Per-tensor numerics (mixprec-engine-numerics.c); NULL when off. */
  struct _MixprecEngineNumerics *numerics;

  /* Closed-loop precision (mixprec-engine-autoprec.c); NULL when off. */
  struct _MixprecEngineAutoPrec *autoprec;
};

/* Elements of each buffer one group needs on this rank, from its units.
 * The engine allocates exactly these, and the memory plan reports them,
 * so the plan and the engine's report agree by construction. */
typedef struct {
  guint64 padded;            /* padded element space */
  guint64 local_n;           /* this rank's slices */
  guint64 persist_n;         /* ZeRO-3 persistent units */
  guint64 working;           /* working dtype */
  guint64 persistent;        /* working dtype */
  guint64 grad;              /* grad dtype */
  AccumMode accum_mode;
  guint64 accum;             /* accum dtype */
  guint64 master;            /* FP32 */
  guint64 master_extra;      /* 16 bits: REMAINDER or KAHAN masters */
  MixprecPluginMasterFormat master_format;
  guint64 state;             /* elements of an unscaled slot */
  guint64 scales;            /* FP32 scales of a scaled slot; its elements are
                                scales * block_size */
  guint64 slot_elements;     /* wire dtype, per staging slot */
  guint64 n_slots;
  guint64 norm_blocks;       /* doubles (host) */
  MixprecDType step_grad;    /* the dtype the optimizer reads gradients in */
} GroupShape;

/* A run of elements the optimizer updates in one call. */
typedef struct {
  guint64 first_index;       /* position in the group's unpadded element space */
  guint64 n;
  gconstpointer grad;        /* the step's gradient dtype */
  gfloat *master;            /* NULL: no FP32 values (bf16 without masters) */
  guint64 state_at;          /* index into the unscaled state arrays and master_extra */
  gpointer working;          /* NULL when it is @master */
  guint64 scale_at;          /* the scale of its first block (scaled slots' data
                                at scale_at * block_size); it starts a block */
  gpointer const *states;    /* NULL: the group's unscaled slots and master_extra;
                                else staged copies of them (mixprec-engine-step.c) */
  gpointer extra;
} OptPiece;

/* ---------------------------------------------------------------- the engine object
 * (mixprec-engine.c) */

/* @device: the engine's device when the caller opened it (NULL: open
 * mixprec.device). @plan_only: an engine that only resolves the policy and
 * the optimizer (memory plans for a device this machine may lack). */
MixprecEngine * _mixprec_engine_new_internal (MixprecConfig *config,
            _MixprecDevice *device,
            MixprecComm   *comm,
            MixprecComm   *mp_comm,
            gboolean       plan_only,
            GError       **error);

/* A plan-only engine that resolves the policy and the optimizer exactly as
 * training would, and the dtypes of a "Linear" parameter under it
 * (@dt): what memory plans and planned layouts start from
 * (mixprec-engine-memory.c). */
void           _mixprec_engine_take_comm_bytes (MixprecEngine *self);
MixprecEngine * _mixprec_engine_probe_model (MixprecConfig       *config,
                                             guint                world,
                                             _MixprecParamDTypes *dt,
                                             GError             **error);

/* One group of parameters of @sizes as a planned engine lays it out on
 * @world ranks: the probe engine, a "Linear" parameter's dtypes, the ZeRO
 * stage, FP8 (and MX) as the config gives them, the units and the
 * group's shape. Memory plans and planned layouts both start here, so
 * they describe the same layout (mixprec-engine-memory.c). */
typedef struct {
  MixprecEngine *probe;
  _MixprecParamDTypes dt;
  guint stage;
  MixprecFp8Recipe *recipe;  /* the config's, borrowed; NULL without FP8 */
  gboolean fp8;              /* the parameters are FP8 under the recipe */
  gboolean mx;               /* ... the MX recipe: every parameter a unit alone */
  guint fp4_block;           /* 4-bit copies (fp4 section): the block size; 0
                                without (every parameter a unit alone too) */
  GArray *units;             /* Unit */
  GroupShape shape;
} _MixprecPlannedGroup;

gboolean _mixprec_engine_plan_group          (MixprecConfig         *config,
                                              const guint64         *sizes,
                                              guint                  n_sizes,
                                              guint                  world,
                                              _MixprecPlannedGroup  *pg,
                                              GError               **error);
void     _mixprec_engine_planned_group_clear (_MixprecPlannedGroup  *pg);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (_MixprecPlannedGroup, _mixprec_engine_planned_group_clear)

gboolean _mixprec_engine_comm_failed (GError **error, GError *cause, const gchar *what);

/* Before a collective on device buffers: a communicator with a stream of
 * its own must find the device's work done. */
gboolean _mixprec_engine_before_comm (MixprecEngine *self,
              GError       **error);

/* ---------------------------------------------------------------- layout: arithmetic and allocation
 * (mixprec-engine-layout.c) */

typedef struct {
  MixprecDType dtype;
  GBytes *values;
} InitValues;

/* The units of a group of parameters of @sizes (group order). */
GArray *_mixprec_engine_make_units (const guint64 *sizes,
                                    guint          n_sizes,
                                    guint          world,
                                    guint          stage,
                                    guint64        persistence_threshold);
/* The same with every parameter a unit alone (@alone), so that each
 * starts its unit: FP8 groups under the MX recipe, whose 32-element
 * blocks then never straddle two ranks' slices. */
GArray *_mixprec_engine_make_units_full (const guint64 *sizes,
                                         guint          n_sizes,
                                         guint          world,
                                         guint          stage,
                                         guint64        persistence_threshold,
                                         gboolean       alone);

void _mixprec_engine_group_shape (const _MixprecParamDTypes *dt,
                                  MixprecDType               wire,
                                  GArray                    *units,
                                  guint                      world,
                                  guint                      stage,
                                  guint                      gas,
                                  gboolean                   external,
                                  guint64                    staging_budget,
                                  GroupShape                *shape);
/* Elements of staging allowed by the config's bucket sizes. */
guint64 _mixprec_engine_staging_budget (MixprecConfig *config);

/* The dtype gradients travel in between ranks. */
MixprecDType _mixprec_engine_wire_dtype (const _MixprecParamDTypes *dt);

/* Adds the bytes of @s to @bytes, indexed by BufferKind. */
void _mixprec_engine_add_shape_bytes (guint64                      *bytes,
                                      const _MixprecParamDTypes    *dt,
                                      const GroupShape             *s,
                                      guint                         n_slots,
                                      const _MixprecRepresentation *repr,
                                      gboolean                      offload,
                                      gboolean                      pinned,
                                      BufferKind                    working_kind);

/* ---------------------------------------------------------------- representations
 * (mixprec-engine-represent.c) */

/* Resolves self->repr from the config for self->optimizer and checks the
 * optimizer can keep it. */
gboolean _mixprec_engine_resolve_representation (MixprecEngine *self,
                                                 GError       **error);
/* The master format of a group of parameters of @dt: the configured
 * REMAINDER or KAHAN for bfloat16 parameters without an FP32 master, else
 * FLOAT32 (an FP32 master, or none). */
MixprecPluginMasterFormat _mixprec_engine_master_format (const _MixprecRepresentation *repr,
                                                         const _MixprecParamDTypes    *dt);
/* Whether state format @format keeps block scales, and the bytes of @n
 * elements of it (INT4: two per byte). */
gboolean _mixprec_engine_format_is_scaled (MixprecPluginStateFormat format);
guint64  _mixprec_engine_format_bytes     (MixprecPluginStateFormat format,
                                           guint64                  n);
/* The element size of an unscaled slot, and the dtype of its elements. */
MixprecDType _mixprec_engine_format_dtype (MixprecPluginStateFormat format);
/* Sets every unit's repr.scales for this rank (@rank of @world, state in
 * slices when @state_local) and returns the number of scales per scaled
 * slot: blocks of @block_size start at element 0 of every unit (under
 * ZeRO at a slice's start, a multiple of 4096); one process packs the
 * units' blocks one after another, each unit's last one possibly short. */
guint64  _mixprec_engine_units_scales (GArray  *units,
                                       guint    world,
                                       gboolean state_local,
                                       guint    block_size);
/* Fills @shape's master_format, master_extra and scales for @units (after
 * _mixprec_engine_group_shape()), setting every unit's repr.scales. */
void     _mixprec_engine_shape_represent (GroupShape                   *shape,
                                          const _MixprecRepresentation *repr,
                                          const _MixprecParamDTypes    *dt,
                                          GArray                       *units,
                                          guint                         world,
                                          guint                         stage);
/* Index into @g's state_scales of the block holding element @e
 * (unit-relative, a multiple of the block size) of @u on this rank, and
 * the number of scales of each scaled slot of @g. */
guint64  _mixprec_engine_scale_at (MixprecEngine *self,
                                   Group         *g,
                                   const Unit    *u,
                                   guint64        e);
guint64  _mixprec_engine_n_scales (MixprecEngine *self,
                                   Group         *g);
/* The element of g->states[@slot] holding element @e of @u on this rank:
 * state_at for FLOAT32 and BFLOAT16 slots, the block's scale index times
 * the block size plus the place in the block for scaled ones. */
guint64  _mixprec_engine_state_index (MixprecEngine *self,
                                      Group         *g,
                                      const Unit    *u,
                                      guint64        e,
                                      guint          slot);

/* Allocations through these are what the memory report counts. */
gpointer _mixprec_engine_alloc (MixprecEngine  *self,
                                _MixprecDevice *device,
                                guint64         numel,
                                gsize           elem_size,
                                BufferKind      kind,
                                GError        **error);
void     _mixprec_engine_free  (MixprecEngine  *self,
                                _MixprecDevice *device,
                                gpointer        buffer);

/* The slice size of @u on @self's ranks. */
#define UNIT_SLICE(self, u) ((u)->padded / (self)->world)

/* Allocates @g's whole gradient buffer if it has none (ZeRO-2/3 allocate
 * it only when the caller writes whole gradients). */
gboolean _mixprec_engine_ensure_grad (MixprecEngine *self,
                                      Group         *g,
                                      GError       **error);

/* The stochastic-rounding seed of @group for the step that made the
 * current applied-step count (the working copies it wrote can be rounded
 * again from the masters with it, element index = position in the group). */
guint64 _mixprec_engine_step_seed (MixprecEngine *self,
                                   guint          group);

/* ---------------------------------------------------------------- intake
 * (mixprec-engine-reduce.c) */

gboolean _mixprec_engine_wait_pending (MixprecEngine *self,
              GError       **error);
/* Waits for @g's reductions in flight and frees what they held; keeps the
 * first failure in @error. */
void _mixprec_engine_wait_group (MixprecEngine *self,
                                 Group         *g,
                                 GError       **error);

void _mixprec_engine_clear_gradients (MixprecEngine *self);

/* Gradient buffers only the engine writes (see mixprec-engine-reduce.c):
 * @g's step reads its gradients in place on the host, and no parameter of
 * it has had its gradient buffer exposed to the caller. */
gboolean _mixprec_engine_grad_private (MixprecEngine *self,
                                       Group         *g);

/* The caller is given @param's gradient buffer: from now on it is zeroed
 * after every step, and a stale value in it is zeroed now. */
gboolean _mixprec_engine_expose_grad (MixprecEngine *self,
                                      MixprecParam  *param,
                                      GError       **error);

/* ---------------------------------------------------------------- working copies whole again
 * (mixprec-engine-whole.c) */

/* All-gathers every unit's slices of @local (a sharded buffer of @dtype)
 * into the padded element space at @flat, unit by unit, in place when
 * @flat already holds this rank's slices at their places. */
gboolean _mixprec_engine_gather_slices (MixprecEngine *self,
                                        Group         *g,
                                        gconstpointer  local,
                                        gpointer       flat,
                                        MixprecDType   dtype,
                                        const gchar   *what,
                                        GError       **error);

/* After the optimizer wrote this rank's slices: the working copies whole
 * again on every rank (ZeRO-1/2), or the persistent ones (ZeRO-3). */
gboolean _mixprec_engine_refresh_whole (MixprecEngine *self,
                                        GError       **error);

/* The same for one unit @u of @g, whose slice on this rank changed. */
gboolean _mixprec_engine_refresh_whole_unit (MixprecEngine *self,
                                             Group         *g,
                                             const Unit    *u,
                                             GError       **error);

/* ---------------------------------------------------------------- offload
 * (mixprec-engine-offload.c) */

/* The optimizer's pass over @piece, whose buffers are host memory. */
typedef gboolean (*OffloadedStepFunc) (MixprecEngine  *self,
                                       Group          *g,
                                       const OptPiece *piece,
                                       gpointer        data,
                                       GError        **error);
/* The optimizer over @pieces of an offloading engine: each bucket of
 * gradients (in @grad_dtype) brought down to the host, stepped there by
 * @step, its working copies sent up; transfers overlap the steps. */
gboolean _mixprec_engine_offload_run (MixprecEngine     *self,
                                      Group             *g,
                                      MixprecDType       grad_dtype,
                                      const OptPiece    *pieces,
                                      guint              n_pieces,
                                      OffloadedStepFunc  step,
                                      gpointer           data,
                                      GError           **error);

/* Elements per offload transfer buffer: a bucket the size of a staging
 * slot, so that one bucket's transfer is long enough to run at full
 * bandwidth and two of them stay small beside the model. */
#define _MIXPREC_OFFLOAD_BUCKET_ELEMENTS _MIXPREC_SLOT_MAX_ELEMENTS
guint64 _mixprec_engine_offload_elements (const GroupShape *shape);
/* The kind of the working copies' buffer: the device's, or host memory
 * (pinned or not) with offload_param. */
BufferKind _mixprec_engine_working_kind (MixprecEngine *self);
/* Whether the offload transfer buffers come from the device's pinned host
 * memory: offload_optimizer.pin_memory on a device of plugin revision 2
 * (for a plan, on the configured device when this registry has it, else
 * as pin_memory says). Warns, on a real engine, when pin_memory asks for
 * what the device lacks. */
gboolean _mixprec_engine_offload_pinned (MixprecEngine *self,
                                         gboolean       pin_memory,
                                         const gchar   *key,
                                         gboolean       plan_only);
/* What an all-gather of @u's slices of @local (a sharded buffer of @g's
 * working dtype) into @dst (@u's padded elements on the device) sends
 * from: the slice itself in device memory; a slice of offloaded
 * parameters (host memory, which the device's communicator does not
 * take) is copied up to its place in @dst first, and gathered in place.
 * NULL with @error set when that copy failed. */
gconstpointer _mixprec_engine_offload_slice_send (MixprecEngine *self,
                                                  Group         *g,
                                                  const Unit    *u,
                                                  gconstpointer  local,
                                                  gpointer       dst,
                                                  GError       **error);
/* Joins the offload transfer thread, if one was started. */
void _mixprec_engine_offload_stop (MixprecEngine *self);

/* ---------------------------------------------------------------- host mirrors
 * (mixprec-engine-access.c) */

/* Frees @g's host mirrors. */
void _mixprec_engine_drop_mirrors (Group *g);

/* ---------------------------------------------------------------- monitors
 * (mixprec-engine-monitor.c) */

/* Opens the monitors the config enables (rank 0), and closes them. */
gboolean _mixprec_engine_open_monitors  (MixprecEngine *self,
                                         GError       **error);
void     _mixprec_engine_close_monitors (MixprecEngine *self);
/* Logs what step @r did (@overflow: its gradients were not finite) and
 * records it in the monitors. */
void     _mixprec_engine_report_step    (MixprecEngine           *self,
                                         const MixprecStepResult *r,
                                         gboolean                 overflow);

/* Records every value of @numerics in the monitors at its step, under
 * Numerics/<parameter>/<stat> and NumericsByType/<module type>/<stat>. */
void     _mixprec_engine_record_numerics (MixprecEngine   *self,
                                          MixprecNumerics *numerics);

/* ---------------------------------------------------------------- per-tensor numerics
 * (mixprec-engine-numerics.c), every mixprec.numerics.every steps */

/* At creation: mixprec.numerics read (refused on a device whose memory
 * the CPU cannot read); and freed at finalize. */
gboolean _mixprec_engine_numerics_setup  (MixprecEngine *self,
                                          GError       **error);
void     _mixprec_engine_numerics_free   (MixprecEngine *self);
/* In the step: after the agreement, whether the step is measured
 * (@divisor unscales the gradients; @skipped: it applies nothing), the
 * gradients and masters of the groups the optimizer's pass will not
 * measure read then; the update's statistics of those groups once the
 * working copies are written; and everything agreed, kept and recorded at
 * the end (collective on a measured step). */
gboolean _mixprec_engine_numerics_begin  (MixprecEngine *self,
                                          gdouble        divisor,
                                          gboolean       skipped);
void     _mixprec_engine_numerics_after_update  (MixprecEngine *self);
/* Every applied step, before the optimizer: the FP32 shadow of the
 * parameters mixprec.numerics.shadow names stepped with the step's
 * gradients, learning rate and gradient factor. */
gboolean _mixprec_engine_numerics_shadow (MixprecEngine *self,
                                          gdouble        lr,
                                          gfloat         factor,
                                          GError       **error);
/* In the optimizer's pass (mixprec-engine-step.c): for a measured step
 * and a group it can measure, a handle (else NULL); with one, the pass
 * cuts its pieces at _mixprec_engine_numerics_cut() (from @index, in the
 * group's unpadded element space: the end of its unit, or of its block
 * when @index is inside one) and starts every call at a block boundary, and each call, given the
 * first element's @index, keeps its masters before the optimizer
 * (fused_before) and measures its slots after it (fused_after). */
gpointer _mixprec_engine_numerics_fuse   (MixprecEngine *self,
                                          Group         *g);
guint64  _mixprec_engine_numerics_cut    (Group         *g,
                                          guint64        index);
void     _mixprec_engine_numerics_fused_before (gpointer      fuse,
                                                Group        *g,
                                                const gfloat *master,
                                                guint64       n);
void     _mixprec_engine_numerics_fused_after  (gpointer       fuse,
                                                MixprecEngine *self,
                                                Group         *g,
                                                guint64        index,
                                                gconstpointer  grad,
                                                MixprecDType   grad_dtype,
                                                const gfloat  *master,
                                                gconstpointer  working,
                                                guint64        n);
/* Whether the optimizer measures the pass's calls itself: its
 * numerics_master_mask has @master_format and every slot is FLOAT32 or
 * BFLOAT16 (ABI 1.6). Then before each call in_pass sets @args' numerics
 * runs for the slots of [@index, @index + @n), fused_before is not
 * needed, and after the call in_pass_after records what the optimizer
 * measured. */
gboolean _mixprec_engine_numerics_by_optimizer  (gpointer                      fuse,
                                                 MixprecEngine                *self,
                                                 MixprecPluginMasterFormat     master_format);
void     _mixprec_engine_numerics_in_pass       (gpointer                      fuse,
                                                 MixprecEngine                *self,
                                                 Group                        *g,
                                                 guint64                       index,
                                                 guint64                       n,
                                                 MixprecOptimizerStepV3       *args);
void     _mixprec_engine_numerics_in_pass_after (gpointer                      fuse,
                                                 MixprecEngine                *self,
                                                 Group                        *g,
                                                 const MixprecOptimizerStepV3 *args,
                                                 gconstpointer                 grad,
                                                 MixprecDType                  grad_dtype,
                                                 const gfloat                 *master);
/* The end of a thread's part of a measured pass (step_chunk()), after
 * fused_after or in_pass_after calls: what it was adding up of a
 * parameter the part ends inside of is left for the step's finish. */
void     _mixprec_engine_numerics_chunk_end     (gpointer                      fuse);
gboolean _mixprec_engine_numerics_finish (MixprecEngine *self,
                                          guint64        step,
                                          gboolean       applied,
                                          GError       **error);

/* ---------------------------------------------------------------- the parts
 * Each part's owner sets up and frees its fields, and sets those another
 * phase decides. */

/* Frees @g: each part, then the layout (mixprec-engine-group.c). */
void     _mixprec_engine_group_free        (MixprecEngine *self, Group *g);
/* Layout (mixprec-engine-layout.c): a new group of @p's kind, and @p
 * added to it; its units and buffers, with the @shape the parts are sized
 * from; and the layout freed with @g. */
Group   *_mixprec_engine_group_new         (MixprecEngine *self, MixprecParam *p);
void     _mixprec_engine_group_add_param   (Group *g, MixprecParam *p);
gboolean _mixprec_engine_layout_group      (MixprecEngine *self, Group *g, GroupShape *shape,
                                            GError **error);
void     _mixprec_engine_layout_free       (MixprecEngine *self, Group *g);
/* Intake (mixprec-engine-reduce.c): its @n_slots staging slots; waits for
 * what is in flight and frees them; the step zeroed the gradients it read. */
gboolean _mixprec_engine_intake_layout     (MixprecEngine *self, Group *g, guint64 n_slots,
                                            GError **error);
void     _mixprec_engine_intake_clear      (MixprecEngine *self, Group *g);
void     _mixprec_engine_note_grad_zeroed  (Group *g, gboolean zeroed);
/* Norm (mixprec-engine-norm.c): its block buffer of @n_doubles; the
 * intake's fold summed the blocks. */
gboolean _mixprec_engine_norm_layout       (MixprecEngine *self, Group *g, guint64 n_doubles,
                                            GError **error);
void     _mixprec_engine_norm_set_ready    (Group *g, gboolean ready);
void     _mixprec_engine_norm_free         (MixprecEngine *self, Group *g);
/* Offload (mixprec-engine-offload.c): its transfer buffers. */
gboolean _mixprec_engine_offload_layout    (MixprecEngine *self, Group *g, const GroupShape *shape,
                                            GError **error);
void     _mixprec_engine_offload_free_group (MixprecEngine *self, Group *g);
/* FP8 (mixprec-engine-fp8.c): whether @g holds fp8 parameters, from its
 * first parameter @p, and in which recipe and dtype. */
void     _mixprec_engine_fp8_init_group    (Group *g, MixprecParam *p);
/* ZeRO-3 (mixprec-engine-zero3.c): every gathered unit waited for and freed. */
void     _mixprec_engine_zero3_clear       (MixprecEngine *self, Group *g);
/* ZeRO++ (mixprec-engine-zeropp.c): whether @g's ZeRO-3 gathers are
 * quantized, refusing a group they cannot serve (and hpZ sizes it cannot
 * run); a unit's quantized gather started, returning its request (NULL
 * with @error set: the caller frees nothing of it); and once the request
 * completed (@ok) the arrived codes dequantized into u->zero3.gathered.
 * Without @ok, or for a unit without a quantized gather, finish only
 * frees what the gather held. */
gboolean _mixprec_engine_zeropp_layout        (MixprecEngine *self, Group *g, GError **error);
MixprecCommRequest *
         _mixprec_engine_zeropp_gather_start  (MixprecEngine *self, Group *g, Unit *u,
                                               GError **error);
void     _mixprec_engine_zeropp_finish_gather (MixprecEngine *self, Group *g, Unit *u,
                                               gboolean ok);
/* ZeRO++ qgZ: a reduce-scatter's window (@send: world * @count elements
 * of g->wire; @recv: @count elements of FP32 with MIXPREC_COMM_RECV_FP32
 * in @flags, else of g->wire, folded into with MIXPREC_COMM_ACCUMULATE)
 * quantized and started as an all-to-all, its state in *@qgz; and once
 * the request completed (@ok) the arrived runs dequantized and summed
 * into @recv (over several hosts after the second level's exchange,
 * which can fail: FALSE with @error); without @ok only freed. */
MixprecCommRequest *
         _mixprec_engine_zeropp_reduce_start  (MixprecEngine *self, Group *g,
                                               const Unit *u, guint64 window,
                                               gconstpointer send, gpointer recv,
                                               guint64 count, guint flags,
                                               struct _QgzReduce **qgz, GError **error);
gboolean _mixprec_engine_zeropp_finish_reduce (MixprecEngine *self, Group *g,
                                               struct _QgzReduce *qgz, gboolean ok,
                                               GError **error);
/* LoCo (mixprec-engine-loco.c) after the loss scaler's update
 * (mixprec-engine-step.c): an
 * overflow zeroes the error buffers, a new scale rescales them (they hold
 * scaled gradients), an applied step counts towards reset_T, which
 * zeroes them. Group teardown frees them. */
void     _mixprec_engine_zeropp_after_scaler  (MixprecEngine *self, gboolean overflow,
                                               gboolean applied, gdouble prev_scale,
                                               gdouble scale);
void     _mixprec_engine_zeropp_free_group    (MixprecEngine *self, Group *g);
/* LoCo (mixprec-engine-loco.c): @g's error buffer, zeroed, when the
 * config asks for LoCo (called by the qgZ layout). */
gboolean _mixprec_engine_loco_layout          (MixprecEngine *self, Group *g, GError **error);
/* ZeRO++ hpZ (mixprec-engine-hpz.c), zero_hpz_partition_size k of 2 up
 * to below the world: @g's secondary partition laid out (or refused,
 * saying why); whether @u's gather can come from it; that gather
 * started, inside this rank's group of k; this rank's part of a gathered
 * copy kept once a gather over the world completed; every secondary
 * part forgotten, where the working copies may change or a micro-step
 * ended; and the buffer freed with the group. */
/* Over hosts (mixprec-engine-hosts.c): the ranks of each host where the
 * world is several hosts of as many consecutive ranks each, more than
 * one, and the communicator has all_to_all_v; 0 otherwise. A gather over
 * the world of @buf (W places of @chunk bytes, this rank's own filled) in
 * two levels: the first, across hosts, started; the second, inside the
 * host, run once the first has completed. */
guint    _mixprec_engine_host_ranks           (MixprecEngine *self);
/* An all_to_all_v of @len-byte runs among @n @peers: the run to peers[i]
 * from @send + send_at[i] (NULL @send_at: all from @send), the one from
 * peers[i] to @recv + recv_at[i], counted as @cls. Started (a request),
 * or with @blocking run to the end (@recv stands for success); NULL with
 * @error set on failure. */
gpointer _mixprec_engine_exchange             (MixprecEngine *self, _MixprecCommClass cls,
                                               gconstpointer send, const gsize *send_at,
                                               gpointer recv, const gsize *recv_at,
                                               const guint *peers, guint n, gsize len,
                                               gboolean blocking, GError **error);
MixprecCommRequest *
         _mixprec_engine_gather2_start        (MixprecEngine *self, guint per_host, guint8 *buf,
                                               guint64 chunk, GError **error);
gboolean _mixprec_engine_gather2_finish       (MixprecEngine *self, guint per_host, guint8 *buf,
                                               guint64 chunk, GError **error);
gboolean _mixprec_engine_hpz_layout           (MixprecEngine *self, Group *g, GError **error);
gboolean _mixprec_engine_hpz_ready            (const Group *g, const Unit *u);
MixprecCommRequest *
         _mixprec_engine_hpz_gather_start     (MixprecEngine *self, Group *g, Unit *u,
                                               GError **error);
void     _mixprec_engine_hpz_keep             (MixprecEngine *self, Group *g, Unit *u);
void     _mixprec_engine_hpz_forget           (MixprecEngine *self);
void     _mixprec_engine_hpz_free_group       (MixprecEngine *self, Group *g);

/* ---------------------------------------------------------------- lookups
 * (mixprec-engine-layout.c): where a parameter, a unit, a block or an
 * element lives. Every phase finds its data through these. */

/* The group and the unit of @param. */
Group * _mixprec_engine_group_of (MixprecEngine *self, MixprecParam *param);
Unit *  _mixprec_engine_unit_of  (MixprecEngine *self, MixprecParam *param);

/* Element @index of a buffer of @dtype at @base. */
gpointer _mixprec_engine_at (gpointer base, MixprecDType dtype, guint64 index);

/* Address of element @e (unit-relative) of @u in a padded-space buffer,
 * and of element @e of this rank's slice in a sharded buffer. */
gpointer _mixprec_engine_flat_at  (MixprecEngine *self, const Unit *u, gpointer base,
                                   MixprecDType dtype, guint64 e);
gpointer _mixprec_engine_local_at (MixprecEngine *self, const Unit *u, gpointer base,
                                   MixprecDType dtype, guint64 e);

/* This rank's real elements of @u's slice: [rank * slice, + the result). */
guint64 _mixprec_engine_real_in_slice (MixprecEngine *self, const Unit *u);

/* Where this rank's reduced slice of @u is written (ranks), and where the
 * step reads this rank's reduced gradients of @u's slice, in what dtype. */
gpointer      _mixprec_engine_reduce_target (MixprecEngine *self, Group *g, const Unit *u);
gconstpointer _mixprec_engine_slice_source  (MixprecEngine *self, Group *g, const Unit *u,
                                             MixprecDType *dtype);

/* The unit holding this rank's block @j of sums of squares (the last one
 * starting at or before it: units without blocks share the next one's
 * first block). */
const Unit *_mixprec_engine_unit_of_block (const Group *g,
                                           guint64      j);

/* The segment holding element @offset of @g's element space (the one
 * starting at a parameter's offset, for a parameter's first element). */
const Segment *_mixprec_engine_segment_of (const Group *g,
                                           guint64      offset);

/* Calls @func on every piece of @g's segments inside [begin, end). */
typedef void (*PieceFunc) (Group         *g,
                           const Segment *seg,
                           guint64        begin,   /* group element index */
                           guint64        n,
                           gpointer       data);

void _mixprec_engine_for_each_piece (Group    *g,
                guint64   begin,
                guint64   end,
                PieceFunc func,
                gpointer  data);

/* Where the optimizer's values for element @e of @u live on this rank (an
 * element this rank updates): the FP32 values (NULL in bf16 without
 * masters), the index into the state arrays, and the working copy (NULL
 * when the FP32 values are the working copy). */
void _mixprec_engine_values_at (MixprecEngine *self,
                                Group         *g,
                                const Unit    *u,
                                guint64        e,
                                gfloat       **master,
                                guint64       *state_at,
                                gpointer      *working);

/* ---------------------------------------------------------------- agreement
 * (mixprec-engine-norm.c, mixprec-engine-agree.c) */

/* This rank's block sums of @g's reduced gradients into g->norm.blocks,
 * unless the intake's fold summed them (g->norm.ready). */
gboolean _mixprec_engine_norm_blocks (MixprecEngine *self,
                                      Group         *g,
                                      GError       **error);
/* The step's one agreement: every group's gradient norm blocks and FP8
 * amaxes from every data-parallel rank, then the model-parallel ranks;
 * @sumsq, identical on every rank and at every world size, and
 * @overflow, whether it is not finite. Collective. */
gboolean _mixprec_engine_agree (MixprecEngine *self,
                                gdouble       *sumsq,
                                gboolean      *overflow,
                                GError       **error);

/* ---------------------------------------------------------------- FP8
 * (mixprec-engine-fp8.c) */

/* Marks @storage fp8 when the policy says so; fails for a parameter
 * without FP32 values. */
gboolean _mixprec_engine_fp8_register (MixprecEngine        *self,
                                       MixprecParam         *param,
                                       GError              **error);
/* Whether @p belongs in @g as far as FP8 goes. */
gboolean _mixprec_engine_fp8_same_group (const Group *g, MixprecParam *p);
/* Allocates @g's FP8 buffers and scalings (after its units); fails on a
 * device other than the cpu. */
gboolean _mixprec_engine_fp8_layout (MixprecEngine *self,
                                     Group         *g,
                                     GError       **error);
/* Writes the FP8 copies of every fp8 group from the FP32 values: casts this
 * rank's part (current scaling: after agreeing on the amaxes; delayed:
 * with the scalings' current scales, recording the amaxes), then gathers
 * the FP8 slices under ZeRO-1/2. Collective across ranks. @after_step:
 * right after the optimizer's pass, which cast the copies already (see
 * _mixprec_engine_fp8_fuse_begin()).
 * _mixprec_engine_fp8_write_initial(): at layout, every rank casts whole
 * parameters from the initial values (no collective). */
gboolean _mixprec_engine_fp8_write (MixprecEngine *self,
                                    gboolean       after_step,
                                    GError       **error);
gboolean _mixprec_engine_fp8_write_initial (MixprecEngine *self,
                                            GError       **error);
/* The number of amaxes group @g adds to the overflow agreement (delayed
 * scaling: one per parameter), and writes them (as doubles) to @out. */
guint    _mixprec_engine_fp8_n_amax (const Group *g);
void     _mixprec_engine_fp8_put_amax (const Group *g, gdouble *out);
/* Takes the agreed amaxes (MAX over @n_ranks rows of @stride doubles at
 * @all + @at) into g->fp8.agreed. */
void     _mixprec_engine_fp8_take_amax (Group *g, const gdouble *all, guint n_ranks,
                                        gsize stride, gsize at);
/* An applied step: every delayed scaling records its agreed amax and
 * updates. */
/* On a device: the delayed amaxes of every fp8 group agreed (MAX over the
 * data-parallel and model-parallel ranks, through device memory) into
 * g->fp8.agreed, in place of riding in the gradient-norm all-gather. */
gboolean _mixprec_engine_fp8_agree_device (MixprecEngine *self,
                                           GError       **error);
gboolean _mixprec_engine_fp8_update (MixprecEngine *self,
                                     GError       **error);
/* The cast fused into the optimizer's pass (mixprec-engine-step.c): begun
 * before the pass over @g (sets g->fp8.fuse for an fp8 group in host
 * memory, else nothing), called by every thread for each range the
 * optimizer wrote (@index: the first element's position in @g's unpadded
 * element space; @master: its FP32 values), ended after it (which keeps
 * the amaxes and notes the blocks still to cast). */
typedef struct _MixprecFp8Fuse _MixprecFp8Fuse;
void     _mixprec_engine_fp8_fuse_begin (MixprecEngine *self, Group *g);
void     _mixprec_engine_fp8_fused      (_MixprecFp8Fuse *fuse, guint64 index,
                                         const gfloat *master, guint64 n);
void     _mixprec_engine_fp8_fuse_end   (MixprecEngine *self, Group *g);
/* Frees @g's FP8 buffers. */
void     _mixprec_engine_fp8_free_group (MixprecEngine *self, Group *g);
/* ZeRO-3: points @u's parameters at the FP8 copy gathered into @base
 * (NULL: none). */
void     _mixprec_engine_fp8_point (MixprecEngine *self, Group *g, const Unit *u, guint8 *base);
/* ZeRO-3: bytes of @u's gathered FP8 copy and scales. */
guint64  _mixprec_engine_fp8_unit_bytes (MixprecEngine *self, const Group *g, const Unit *u);
/* ZeRO-3: gathers @u's FP8 slices and scales into @dst (of
 * _mixprec_engine_fp8_unit_bytes()). */
gboolean _mixprec_engine_fp8_gather_unit (MixprecEngine *self, Group *g, const Unit *u,
                                          guint8 *dst, GError **error);
/* All-gathers @n_per_rank bytes of every rank from @local into @whole as
 * 2-byte elements (the communicators move no 8-bit or 4-bit dtype): an
 * odd count is an error naming @what. The fp4 copies use it too. */
gboolean _mixprec_engine_gather_bytes (MixprecEngine *self, const guint8 *local, guint8 *whole,
                                       guint64 n_per_rank, const gchar *what, GError **error);

/* 4-bit working copies (mixprec-engine-fp4.c): a group of fp4 parameters
 * is an fp8 group (g->fp8.enabled) with g->fp8.fp4 set, whose functions
 * the fp8 ones above hand over to. _register() sets *@taken when the
 * policy marks @param fp4. */
gboolean _mixprec_engine_fp4_register (MixprecEngine *self, MixprecParam *param,
                                       gboolean *taken, GError **error);
gboolean _mixprec_engine_fp4_layout (MixprecEngine *self, Group *g, GError **error);
gboolean _mixprec_engine_fp4_write (MixprecEngine *self, Group *g, gboolean collective,
                                    GError **error);
gboolean _mixprec_engine_fp4_write_initial (MixprecEngine *self, Group *g, GError **error);
guint64  _mixprec_engine_fp4_unit_bytes (MixprecEngine *self, const Group *g, const Unit *u);
void     _mixprec_engine_fp4_point (MixprecEngine *self, Group *g, const Unit *u, guint8 *base);
gboolean _mixprec_engine_fp4_gather_unit (MixprecEngine *self, Group *g, const Unit *u,
                                          guint8 *dst, GError **error);

G_END_DECLS
