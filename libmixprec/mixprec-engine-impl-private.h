/* mixprec-engine-impl-private.h — the engine's internal structures, shared
 * by the files that implement it (layout, micro-steps and step, ZeRO-3,
 * checkpoint access). Never installed. */
#pragma once

#include "mixprec.h"
#include "mixprec-comm-private.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-kernels-private.h"
#include "mixprec-param-private.h"

G_BEGIN_DECLS

/* Elements per thread work item: large enough that the pool's wake-up cost
 * is noise, small enough that two cores share uneven groups. */
#define _MIXPREC_ENGINE_MIN_CHUNK ((gsize) 1 << 16)

/* How long a peer may stay silent before a collective fails, unless
 * MIXPREC_COMM_TIMEOUT_MS says otherwise. */
#define _MIXPREC_ENGINE_DEFAULT_TIMEOUT_MS 300000

/* A run of a group's elements that share buffers: the whole group for
 * engine-owned parameters, one parameter for user-owned memory. Each
 * pointer addresses the element whose index in the group's element space
 * is the matching *_base. */
typedef struct {
  guint64 offset;            /* in the group's element space */
  guint64 numel;
  gpointer working;          /* working dtype */
  guint64 working_base;
  gpointer grad;             /* grad dtype, indexed from offset */
  gfloat *master;            /* FP32 values the optimizer updates; NULL without master */
  guint64 master_base;
} Segment;

typedef struct {
  guint index;
  _MixprecParamDTypes dtypes;
  gdouble weight_decay_multiplier;
  gboolean external;
  guint64 numel;             /* real elements */
  guint64 padded;            /* the element space: numel padded by the partitioner */
  guint64 own_begin;         /* this rank's partition of the element space */
  guint64 own_end;
  gboolean state_sharded;    /* masters and optimizer state hold the partition only */
  gboolean accum_sharded;    /* the accumulation buffer holds the partition only */
  gboolean working_sharded;  /* ZeRO-3: the working copy holds the partition only */
  GPtrArray *params;         /* MixprecParam, borrowed from the engine */
  GArray *segments;          /* Segment */
  MixprecPartitioner *partitioner;   /* NULL on one process */
  /* Buffers (NULL where not needed). */
  gpointer working;
  gpointer grad;             /* always the whole element space */
  gpointer accum;            /* NULL when gradients are read in place */
  gpointer staging;          /* gradients in the comm dtype, bucket-packed */
  gpointer gathered;         /* ZeRO-3: the whole working copy while gathered */
  guint gather_count;
  gfloat *master;
  gfloat **states;
  gdouble *hparams;          /* the optimizer's values for this group */
  GPtrArray *pending;        /* MixprecCommRequest: gradient reductions in flight */
  MixprecCommRequest *prefetch;
  _MixprecDevice *device;    /* where the buffers live (NULL: host memory) */
  GError *device_error;      /* the first failure of a device kernel in a pass */
  GArray *mirrors;           /* HostMirror: device buffers copied for checkpoints */
} Group;

/* A host copy of one device buffer, which checkpoints read and write
 * through their shards. */
typedef struct {
  gpointer device;
  gpointer host;
  gsize bytes;
} HostMirror;

struct _MixprecEngine
{
  GObject parent_instance;

  MixprecConfig *config;
  MixprecPrecisionPolicy *policy;
  MixprecLossScaler *scaler;
  MixprecLrSchedule *schedule;
  MixprecFeature *optimizer;
  gdouble *hparams;          /* resolved from the config, schema order */
  guint n_hparams;
  gint weight_decay_index;   /* -1 when the optimizer has none */

  _MixprecDevice *device;    /* mixprec.device; NULL for "cpu" */
  gdouble *norm_sums;        /* device: block sums of every group, then the total */
  gsize n_norm_sums;
  gboolean comm_on_stream;   /* the communicator queues on the device's stream */
  MixprecComm *comm;         /* data-parallel group; NULL on one process */
  MixprecComm *mp_comm;      /* optional model-parallel group */
  guint rank;
  guint world;
  guint stage;               /* effective ZeRO stage: 0 on one process */

  GPtrArray *params;         /* MixprecParam, registration order */
  GHashTable *by_name;       /* name -> MixprecParam (borrowed) */
  GHashTable *init_values;   /* MixprecParam -> GBytes (FP32), until laid out */
  GPtrArray *groups;         /* Group */
  gboolean prepared;
  MixprecMemoryReport memory;

  guint gas;                 /* gradient_accumulation_steps */
  guint micro_steps;         /* backward passes folded since the last step */
  guint64 steps;
  guint64 applied_steps;
  guint64 skipped_steps;
  guint64 seed;
  gboolean stochastic;
  gboolean overlap;
};


/* Elements of each buffer one group needs on this rank. The engine
 * allocates exactly these, and mixprec_memory_plan_new() reports them, so
 * the plan and the engine's report agree by construction. */
typedef struct {
  guint64 padded;            /* element space */
  guint64 part;              /* partition size */
  guint64 working;           /* working dtype */
  guint64 grad;              /* grad dtype */
  guint64 accum;             /* accum dtype */
  guint64 staging;           /* comm (or accum) dtype */
  guint64 master;            /* FP32 */
  guint64 state;             /* FP32, per slot */
  guint64 gathered;          /* working dtype, ZeRO-3 while gathered */
} GroupShape;

/* Calls @func on every piece of @g's segments inside [begin, end). */
typedef void (*PieceFunc) (Group         *g,
                           const Segment *seg,
                           guint64        begin,   /* group element index */
                           guint64        n,
                           gpointer       data);

void _mixprec_engine_wait_requests (GPtrArray *requests, GError **error);

gboolean _mixprec_engine_comm_failed (GError **error, GError *cause, const gchar *what);

gpointer _mixprec_engine_at (gpointer base, MixprecDType dtype, guint64 index);

guint64 _mixprec_engine_state_index (const Group *g, guint64 flat);

guint64 _mixprec_engine_accum_index (const Group *g, guint64 flat);

void _mixprec_engine_for_each_piece (Group    *g,
                guint64   begin,
                guint64   end,
                PieceFunc func,
                gpointer  data);

void _mixprec_engine_clear_gradients (MixprecEngine *self);

gpointer _mixprec_engine_alloc_buffer (_MixprecDevice *device,
              guint64      numel,
              gsize        elem_size,
              const gchar *what,
              GError     **error);

void _mixprec_engine_group_shape (const _MixprecParamDTypes *dt,
             guint64                    numel,
             guint                      world,
             guint                      stage,
             guint                      gas,
             gboolean                   external,
             GroupShape                *shape);

MixprecDType _mixprec_engine_wire_dtype (const _MixprecParamDTypes *dt);

void _mixprec_engine_add_shape_bytes (MixprecMemoryReport       *r,
                 const _MixprecParamDTypes *dt,
                 const GroupShape          *s,
                 guint                      n_slots);

/* @device: the engine's device when the caller opened it (NULL: open
 * mixprec.device). @plan_only: an engine that only resolves the policy and
 * the optimizer (memory plans for a device this machine may lack). */
MixprecEngine * _mixprec_engine_new_internal (MixprecConfig *config,
            _MixprecDevice *device,
            MixprecComm   *comm,
            MixprecComm   *mp_comm,
            gboolean       plan_only,
            GError       **error);

/* Frees @g's host mirrors. */
void _mixprec_engine_drop_mirrors (Group *g);

/* Before a collective on device buffers: a communicator with a stream of
 * its own must find the device's work done. */
gboolean _mixprec_engine_before_comm (MixprecEngine *self,
              GError       **error);

gboolean _mixprec_engine_wait_pending (MixprecEngine *self,
              GError       **error);

Group * _mixprec_engine_group_of (MixprecEngine *self, MixprecParam *param);

/* The stochastic-rounding seed of @group for the step that made the
 * current applied-step count (the working copies it wrote can be rounded
 * again from the masters with it, element index = position in the group). */
guint64 _mixprec_engine_step_seed (MixprecEngine *self,
                                   guint          group);

/* The segment holding element @offset of @g's element space (the one
 * starting at a parameter's offset, for a parameter's first element). */
const Segment *_mixprec_engine_segment_of (const Group *g,
                                           guint64      offset);

G_END_DECLS
