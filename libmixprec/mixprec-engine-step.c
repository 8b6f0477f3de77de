/* mixprec-engine-step.c — the optimizer step at the accumulation boundary:
 * the sum of squares (which is also the overflow check), the scaler, skip
 * or clip, the fused optimizer over this rank's part, then the working
 * copies made whole again (mixprec-engine-whole.c). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- pieces */

/* ---------------------------------------------------------------- optimizer */

/* A run of elements the optimizer updates in one call. */
typedef struct {
  guint64 first_index;       /* position in the group's unpadded element space */
  guint64 n;
  gconstpointer grad;        /* the step's gradient dtype */
  gfloat *master;            /* NULL: no FP32 values (bf16 without masters) */
  guint64 state_at;          /* index into the state arrays */
  gpointer working;          /* NULL when it is @master */
} OptPiece;

typedef struct {
  MixprecEngine *engine;
  Group *group;
  _MixprecDevice *device;    /* where the pass's buffers are */
  MixprecOptimizerStepV1 args;
  MixprecDType grad_dtype;
  const OptPiece *pieces;
  guint n_pieces;
  guint64 *starts;           /* n_pieces + 1 prefix sums of n */
  gboolean zero_grad;        /* zero each gradient once the optimizer read it */
  GMutex lock;
  GError *error;
  _MixprecFp8Fuse *fp8;      /* an fp8 group's cast, fused into the pass */
} StepJob;

static void
step_run_range (StepJob *job, const OptPiece *p, guint64 off, guint64 n)
{
  MixprecOptimizerStepV2 args = { 0 };
  Group *g = job->group;
  MixprecDType sdtype = job->engine->state_dtype;
  MixprecPluginDType state_dtypes[16];
  gpointer states[16];
  guint n_slots = mixprec_feature_get_n_state_slots (job->engine->optimizer);
  GError *error = NULL;

  for (guint s = 0; s < n_slots && s < G_N_ELEMENTS (states); s++)
    {
      states[s] = _mixprec_engine_at (g->states[s], sdtype, p->state_at + off);
      state_dtypes[s] = (MixprecPluginDType) sdtype;
    }
  args.base = job->args;
  args.base.first_index = p->first_index + off;
  args.base.device_stream = _mixprec_device_get_stream (job->device);
  args.state_dtypes = state_dtypes;
  /* The state follows the weights' rounding, from a stream of its own. */
  args.state_rounding = job->args.rounding;
  args.state_seed = job->args.seed ^ G_GUINT64_CONSTANT (0x5851F42D4C957F2D);
  if (!_mixprec_feature_optimizer_step_v2 (job->engine->optimizer, &args, g->hparams,
                                        p->master != NULL ? p->master + off : NULL,
                                        _mixprec_engine_at ((gpointer) p->grad, job->grad_dtype, off),
                                        states,
                                        p->working != NULL ? _mixprec_engine_at (p->working, g->dtypes.working, off) : NULL,
                                        n, &error))
    {
      g_mutex_lock (&job->lock);
      if (job->error == NULL)
        job->error = g_steal_pointer (&error);
      g_mutex_unlock (&job->lock);
      g_clear_error (&error);
    }
  else if (job->fp8 != NULL)
    /* The FP8 copy of the values just written, while they are in cache. */
    _mixprec_engine_fp8_fused (job->fp8, p->first_index + off, p->master + off, n);
}

/* Elements the optimizer updates before their gradients are zeroed: few
 * enough that the gradients are still in the cache, so zeroing them costs
 * only their write-back, not a pass of its own. */
#define ZERO_TILE ((guint64) 1 << 14)

static void
step_run (StepJob *job, const OptPiece *p, guint64 off, guint64 n)
{
  gsize size = mixprec_dtype_get_size (job->grad_dtype);

  if (!job->zero_grad && job->fp8 != NULL)
    {
      /* Tiles small enough that the FP8 cast finds them in cache. */
      for (guint64 a = 0; a < n; a += ZERO_TILE)
        step_run_range (job, p, off + a, MIN (ZERO_TILE, n - a));
      return;
    }
  if (!job->zero_grad)
    {
      step_run_range (job, p, off, n);
      return;
    }
  /* The optimizer is element-wise and told each range's first index, so
   * cutting a range changes no bit. */
  for (guint64 a = 0; a < n; a += ZERO_TILE)
    {
      guint64 len = MIN (ZERO_TILE, n - a);

      step_run_range (job, p, off + a, len);
      memset (_mixprec_engine_at ((gpointer) p->grad, job->grad_dtype, off + a), 0, len * size);
    }
}

static void
step_chunk (gsize begin, gsize end, gpointer data)
{
  StepJob *job = data;
  guint lo = 0, hi = job->n_pieces;

  /* The piece holding @begin, then on through the chunk. */
  while (hi - lo > 1)
    {
      guint mid = (lo + hi) / 2;

      if (job->starts[mid] <= begin)
        lo = mid;
      else
        hi = mid;
    }
  for (guint i = lo; i < job->n_pieces && job->starts[i] < end; i++)
    {
      guint64 a = MAX (begin, job->starts[i]), b = MIN (end, job->starts[i + 1]);

      if (a < b)
        step_run (job, &job->pieces[i], a - job->starts[i], b - a);
    }
}

static gboolean run_pieces (MixprecEngine                *self,
                            Group                        *g,
                            const MixprecOptimizerStepV1 *args,
                            MixprecDType                  grad_dtype,
                            const OptPiece               *pieces,
                            guint                         n_pieces,
                            gboolean                      zero_grad,
                            gboolean                      on_host,
                            GError                      **error);

/* Offload: the optimizer over @pieces in host memory, bucket by bucket.
 * The masters and the state are the host's; each bucket's gradients come
 * down (in the dtype the step reads: the accumulation dtype, else the
 * gradient dtype, as they are, so the bits the cpu optimizer sees are
 * the device's), the step runs across the thread pool exactly as on the
 * cpu engine (element-wise and told each range's first index, so cutting
 * changes no bit), and the new working copies go up. Without a separate
 * master (fp32, or bf16 without masters) the working copy is the value
 * the optimizer updates: it comes down with the gradients.
 *
 * Transfers run on a thread of their own, in the order they are asked
 * for, while the step runs on the calling thread and the pool: bucket
 * k + 1 comes down while bucket k steps. Two buffers alternate; a buffer
 * is refilled (download k + 2) only after the upload that read it
 * (bucket k) was asked for, and the queue keeps that order. The device
 * sees one thread at a time: the engine calls nothing else on it until
 * every transfer it asked for in the step has run.
 *
 * The thread is the engine's: started by the first offloaded step, it
 * waits on its queue between steps and is joined at finalize, so a step
 * starts no thread. The buffers are in the device's pinned host memory
 * when offload_optimizer.pin_memory is true and the device plugin has it
 * (revision 2, see _mixprec_engine_offload_pinned()); otherwise they are
 * pageable and a copy runs at pageable-memory speed. */
typedef struct {
  const OptPiece *piece;
  guint64 off;
  guint64 n;
} Bucket;

/* Where a bucket's working copy is on the device, and whether it comes
 * down too (no host master: it is the value the optimizer updates, the
 * FP32 working copy, or the low-precision one). */
static gpointer
bucket_device_working (Group *g, const Bucket *b, gboolean *down)
{
  const OptPiece *p = b->piece;
  gpointer base = !g->dtypes.has_master && p->master != NULL ? (gpointer) p->master : p->working;

  *down = !g->dtypes.has_master;
  return base != NULL ? _mixprec_engine_at (base, g->dtypes.working, b->off) : NULL;
}

/* The engine's transfer thread and the step it serves. The step's fields
 * (group to buckets) are written by the stepping thread before it pushes
 * that step's first job and read by the transfer thread after it pops
 * one; the queue orders the two. */
typedef struct {
  GThread *thread;
  GAsyncQueue *queue;        /* 1 + bucket, negated for an upload; 0 quits */
  GMutex lock;
  GCond cond;
  Group *group;
  MixprecDType grad_dtype;
  GArray *buckets;           /* Bucket */
  guint downloaded;          /* buckets down so far (they come in order) */
  guint finished;            /* jobs of this step run (or skipped) so far */
  GError *error;             /* the first failure; later transfers are skipped */
} Transfers;

static gboolean
bucket_down (Transfers *t, guint k, GError **error)
{
  Group *g = t->group;
  const Bucket *b = &g_array_index (t->buckets, Bucket, k);
  gboolean down;
  gpointer dwork = bucket_device_working (g, b, &down);

  return _mixprec_device_copy (g->device, g->offload_grad[k % 2],
                               _mixprec_engine_at ((gpointer) b->piece->grad, t->grad_dtype, b->off),
                               b->n * mixprec_dtype_get_size (t->grad_dtype),
                               MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error) &&
         (!down || dwork == NULL ||
          _mixprec_device_copy (g->device, g->offload_working[k % 2], dwork,
                                b->n * mixprec_dtype_get_size (g->dtypes.working),
                                MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error));
}

static gboolean
bucket_up (Transfers *t, guint k, GError **error)
{
  Group *g = t->group;
  const Bucket *b = &g_array_index (t->buckets, Bucket, k);
  gboolean down;
  gpointer dwork = bucket_device_working (g, b, &down);

  return dwork == NULL ||
         _mixprec_device_copy (g->device, dwork, g->offload_working[k % 2],
                               b->n * mixprec_dtype_get_size (g->dtypes.working),
                               MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error);
}

static gpointer
transfer_thread (gpointer data)
{
  Transfers *t = data;

  for (;;)
    {
      gintptr job = (gintptr) GPOINTER_TO_SIZE (g_async_queue_pop (t->queue)) - G_MAXINT;
      GError *local = NULL;
      gboolean failed;

      if (job == 0)
        break;
      g_mutex_lock (&t->lock);
      failed = t->error != NULL;
      g_mutex_unlock (&t->lock);
      if (!failed)
        {
          if (job > 0)
            bucket_down (t, (guint) (job - 1), &local);
          else
            bucket_up (t, (guint) (-job - 1), &local);
        }
      g_mutex_lock (&t->lock);
      if (local != NULL && t->error == NULL)
        t->error = local;
      else
        g_clear_error (&local);
      if (job > 0)
        t->downloaded++;
      t->finished++;
      g_cond_broadcast (&t->cond);
      g_mutex_unlock (&t->lock);
    }
  return NULL;
}

/* Asks the transfer thread for job @job (see Transfers.queue), offset so
 * that no job is a NULL pointer, which the queue refuses. */
static void
transfer_push (Transfers *t, gintptr job)
{
  g_async_queue_push (t->queue, GSIZE_TO_POINTER ((gsize) (job + G_MAXINT)));
}

/* The engine's transfer thread, started on first use. */
static Transfers *
transfers_get (MixprecEngine  *self,
               GError        **error)
{
  Transfers *t = self->offload_transfers;

  if (t != NULL)
    return t;
  t = g_new0 (Transfers, 1);
  t->queue = g_async_queue_new ();
  g_mutex_init (&t->lock);
  g_cond_init (&t->cond);
  t->thread = g_thread_try_new ("mixprec-offload", transfer_thread, t, error);
  if (t->thread == NULL)
    {
      g_async_queue_unref (t->queue);
      g_mutex_clear (&t->lock);
      g_cond_clear (&t->cond);
      g_free (t);
      return NULL;
    }
  self->offload_transfers = t;
  return t;
}

void
_mixprec_engine_offload_stop (MixprecEngine *self)
{
  Transfers *t = g_steal_pointer (&self->offload_transfers);

  if (t == NULL)
    return;
  transfer_push (t, 0);
  g_thread_join (t->thread);
  g_async_queue_unref (t->queue);
  g_mutex_clear (&t->lock);
  g_cond_clear (&t->cond);
  g_clear_error (&t->error);
  g_free (t);
}

gboolean
_mixprec_engine_offload_pinned (MixprecEngine *self,
                                gboolean       plan_only)
{
  const gchar *name = mixprec_config_get_device (self->config);

  if (!_mixprec_config_get_offload_pin_memory (self->config))
    return FALSE;
  if (plan_only)
    {
      /* The plan is for a device this machine need not have: asked of its
       * plugin when it is here, else taken at pin_memory's word. */
      g_autoptr(MixprecFeature) feature =
        mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                       name, name, NULL);

      return feature == NULL || mixprec_feature_get_abi_revision (feature) >= 2;
    }
  if (_mixprec_device_has_pinned (self->device))
    return TRUE;
  g_warning ("zero_optimization.offload_optimizer.pin_memory: device '%s' comes from a plugin "
             "of device revision 1, which has no pinned host memory; the offloaded buffers are "
             "pageable", _mixprec_device_get_name (self->device));
  return FALSE;
}

static gboolean
run_pieces_offloaded (MixprecEngine                *self,
                      Group                        *g,
                      const MixprecOptimizerStepV1 *args,
                      MixprecDType                  grad_dtype,
                      const OptPiece               *pieces,
                      guint                         n_pieces,
                      GError                      **error)
{
  g_autoptr(GArray) buckets = g_array_new (FALSE, FALSE, sizeof (Bucket));
  GError *local = NULL;
  Transfers *t;
  guint pushed = 0;

  for (guint i = 0; i < n_pieces; i++)
    for (guint64 off = 0; off < pieces[i].n; off += g->offload_elements)
      {
        Bucket b = { &pieces[i], off, MIN (g->offload_elements, pieces[i].n - off) };

        g_array_append_val (buckets, b);
      }
  if (buckets->len == 0)
    return TRUE;
  t = transfers_get (self, &local);
  if (t == NULL)
    {
      g_propagate_prefixed_error (error, local, "step %" G_GUINT64_FORMAT ": offload transfers: ",
                                  self->steps);
      return FALSE;
    }
  /* The thread is idle (the last step waited for all its jobs). */
  g_mutex_lock (&t->lock);
  t->group = g;
  t->grad_dtype = grad_dtype;
  t->buckets = buckets;
  t->downloaded = 0;
  t->finished = 0;
  g_clear_error (&t->error);
  g_mutex_unlock (&t->lock);

  transfer_push (t, 1);
  pushed++;
  for (guint k = 0; k < buckets->len && local == NULL; k++)
    {
      const Bucket *b = &g_array_index (buckets, Bucket, k);
      const OptPiece *p = b->piece;
      gpointer hwork = g->offload_working[k % 2];
      OptPiece host = *p;
      gboolean failed;

      if (k + 1 < buckets->len)
        {
          transfer_push (t, (gintptr) k + 2);
          pushed++;
        }
      g_mutex_lock (&t->lock);
      while (t->downloaded <= k && t->error == NULL)
        g_cond_wait (&t->cond, &t->lock);
      failed = t->error != NULL;
      g_mutex_unlock (&t->lock);
      if (failed)
        break;
      host.first_index = p->first_index + b->off;
      host.n = b->n;
      host.grad = g->offload_grad[k % 2];
      host.state_at = p->state_at + b->off;
      if (g->dtypes.has_master)
        {
          host.master = p->master + b->off;
          host.working = p->working != NULL ? hwork : NULL;
        }
      else
        {
          host.master = p->master != NULL ? hwork : NULL;
          host.working = p->master != NULL ? NULL : hwork;
        }
      if (!run_pieces (self, g, args, grad_dtype, &host, 1, FALSE, TRUE, &local))
        break;
      transfer_push (t, -(gintptr) k - 1);
      pushed++;
    }
  /* Every job of this step has run before the device sees another call
   * and before @buckets goes. */
  g_mutex_lock (&t->lock);
  while (t->finished < pushed)
    g_cond_wait (&t->cond, &t->lock);
  t->group = NULL;
  t->buckets = NULL;
  if (local == NULL && t->error != NULL)
    {
      local = g_steal_pointer (&t->error);
      g_prefix_error (&local, "step %" G_GUINT64_FORMAT ": offload transfers: ", self->steps);
    }
  g_clear_error (&t->error);
  g_mutex_unlock (&t->lock);
  if (local != NULL)
    {
      g_propagate_error (error, local);
      return FALSE;
    }
  return TRUE;
}

/* Runs the optimizer over @pieces the way the buffers' device runs work
 * (_mixprec_device_dispatch()): across the thread pool on the host (also
 * for @on_host: host buffers of an offloading engine), a call per piece
 * on a device. */
static gboolean
run_pieces (MixprecEngine                *self,
            Group                        *g,
            const MixprecOptimizerStepV1 *args,
            MixprecDType                  grad_dtype,
            const OptPiece               *pieces,
            guint                         n_pieces,
            gboolean                      zero_grad,
            gboolean                      on_host,
            GError                      **error)
{
  /* The host's buffers of an offloaded step run on the host. */
  StepJob job = { self, g, on_host ? NULL : g->device, *args, grad_dtype, pieces, n_pieces, NULL, zero_grad,
                  { 0 }, NULL, NULL };
  g_autofree guint64 *starts = NULL;

  /* FP8 groups in host memory: the pass casts as it goes (NULL on a
   * device, where the cast follows the pass). */
  job.fp8 = g->fp8_fuse;

  if (self->offload && !on_host)
    return run_pieces_offloaded (self, g, args, grad_dtype, pieces, n_pieces, error);
  starts = g_new (guint64, n_pieces + 1);

  starts[0] = 0;
  for (guint i = 0; i < n_pieces; i++)
    starts[i + 1] = starts[i] + pieces[i].n;
  job.starts = starts;
  g_mutex_init (&job.lock);
  /* Element-wise and told each range's first index: however the device
   * cuts the range, the same bits. */
  _mixprec_device_dispatch (job.device, starts[n_pieces], _MIXPREC_ENGINE_MIN_CHUNK, 64, step_chunk, &job);
  g_mutex_clear (&job.lock);
  if (job.error != NULL)
    {
      g_propagate_prefixed_error (error, job.error, "step %" G_GUINT64_FORMAT ": ", self->steps);
      return FALSE;
    }
  return TRUE;
}

static void
values_at (MixprecEngine *self, Group *g, const Unit *u, guint64 e, OptPiece *p)
{
  _mixprec_engine_values_at (self, g, u, e, &p->master, &p->state_at, &p->working);
  p->first_index = u->index + e;
}

/* One process: one piece per segment (engine buffers, or each parameter's
 * external memory). */
static GArray *
pieces_one_process (MixprecEngine *self, Group *g)
{
  GArray *pieces = g_array_new (FALSE, TRUE, sizeof (OptPiece));

  for (guint i = 0; i < g->segments->len; i++)
    {
      const Segment *seg = &g_array_index (g->segments, Segment, i);
      OptPiece p = { seg->offset, seg->numel, NULL, NULL, seg->offset, NULL };

      p.grad = g->accum != NULL ? _mixprec_engine_at (g->accum, g->dtypes.accum, seg->offset)
                                : seg->grad;
      p.master = seg->master != NULL ? seg->master + (seg->offset - seg->master_base) : NULL;
      if (seg->working != (gpointer) seg->master)
        p.working = _mixprec_engine_at (seg->working, g->dtypes.working, seg->offset - seg->working_base);
      g_array_append_val (pieces, p);
    }
  return pieces;
}

/* Every unit's part this rank updates: its slice (sharded state), or,
 * @whole, every element (ZeRO-0 across ranks with the gradients reduced in
 * place and gathered into the whole gradient buffer). */
static GArray *
pieces_of_units (MixprecEngine *self, Group *g, gboolean whole)
{
  GArray *pieces = g_array_new (FALSE, TRUE, sizeof (OptPiece));

  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 e = whole ? 0 : self->rank * UNIT_SLICE (self, u);
      OptPiece p = { 0 };
      MixprecDType dtype;

      p.n = whole ? u->numel : _mixprec_engine_real_in_slice (self, u);
      if (p.n == 0)
        continue;
      values_at (self, g, u, e, &p);
      p.grad = whole ? _mixprec_engine_flat_at (self, u, g->grad, g->dtypes.grad, 0)
                     : _mixprec_engine_slice_source (self, g, u, &dtype);
      g_array_append_val (pieces, p);
    }
  return pieces;
}

/* ZeRO-0 across ranks, gradients reduced into slices: every rank needs
 * every gradient, so window [a, a + w) of each rank's slice of each unit
 * is gathered into the gradient buffer, which the step no longer needs,
 * and the optimizer runs over those W pieces. */
static gboolean
step_gathered_windows (MixprecEngine                *self,
                       Group                        *g,
                       const MixprecOptimizerStepV1 *args,
                       GError                      **error)
{
  gsize asize = mixprec_dtype_get_size (g->dtypes.accum);
  guint64 room = g->padded * mixprec_dtype_get_size (g->dtypes.grad) / asize / self->world;
  gpointer scratch = g->grad;
  GError *local = NULL;

  if (room == 0)
    return TRUE;
  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 slice = UNIT_SLICE (self, u);

      for (guint64 a = 0; a < slice; a += room)
        {
          guint64 w = MIN (room, slice - a);
          OptPiece pieces[G_MAXUINT8];
          g_autofree OptPiece *many = self->world > G_N_ELEMENTS (pieces) ? g_new0 (OptPiece, self->world) : NULL;
          OptPiece *at = many != NULL ? many : pieces;
          guint n = 0;

          if (!_mixprec_engine_before_comm (self, error))
            return FALSE;
          if (!mixprec_comm_all_gather (self->comm, _mixprec_engine_at (g->accum, g->dtypes.accum, u->local + a),
                                        scratch, w, g->dtypes.accum, &local))
            return _mixprec_engine_comm_failed (error, local, "gathering the reduced gradients");
          for (guint r = 0; r < self->world; r++)
            {
              guint64 e = r * slice + a;
              OptPiece p = { 0 };

              if (e >= u->numel)
                break;
              values_at (self, g, u, e, &p);
              p.n = MIN (w, u->numel - e);
              p.grad = _mixprec_engine_at (scratch, g->dtypes.accum, (guint64) r * w);
              at[n++] = p;
            }
          if (!run_pieces (self, g, args, g->dtypes.accum, at, n, FALSE, FALSE, error))
            return FALSE;
        }
    }
  return TRUE;
}

static gboolean
apply_optimizer (MixprecEngine *self,
                 gdouble        lr,
                 gfloat         factor,
                 GError       **error)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      MixprecOptimizerStepV1 args = { 0 };
      MixprecDType grad_dtype = self->world == 1 && g->accum == NULL ? g->dtypes.grad : g->dtypes.accum;
      g_autoptr(GArray) pieces = NULL;
      gboolean zero_grad;

      args.step = self->applied_steps;
      args.lr = lr;
      args.grad_factor = factor;
      args.grad_dtype = (MixprecPluginDType) grad_dtype;
      args.working_dtype = (MixprecPluginDType) g->dtypes.working;
      args.rounding = self->stochastic ? MIXPREC_PLUGIN_ROUNDING_STOCHASTIC
                                       : MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
      args.seed = _mixprec_engine_step_seed (self, g->index);

      if (self->world == 1)
        pieces = pieces_one_process (self, g);
      else if (self->stage >= 1)
        pieces = pieces_of_units (self, g, FALSE);
      else if (g->accum_mode == ACCUM_IN_GRAD)
        {
          if (!_mixprec_engine_gather_slices (self, g, NULL, g->grad, g->dtypes.grad,
                                              "gathering the reduced gradients", error))
            return FALSE;
          pieces = pieces_of_units (self, g, TRUE);
        }
      else
        {
          gboolean ok;

          _mixprec_engine_fp8_fuse_begin (self, g);
          ok = step_gathered_windows (self, g, &args, error);
          _mixprec_engine_fp8_fuse_end (self, g);
          if (!ok)
            return FALSE;
          continue;
        }
      /* Gradients read in place on the host are zeroed as the optimizer
       * goes, while they are in the cache (clearing skips them), unless
       * only the engine ever sees them (_mixprec_engine_grad_private()). */
      /* Where the memory is not the host's the FP8 cast is a pass of its
       * own after the optimizer's (_mixprec_engine_fp8_write(), see
       * mixprec-engine-fp8.c): the device optimizer's kernels do not cast. */
      _mixprec_engine_fp8_fuse_begin (self, g);
      zero_grad = self->world == 1 && g->accum == NULL && _mixprec_device_memory_is_host (g->device) &&
                  !_mixprec_engine_grad_private (self, g);
      if (!run_pieces (self, g, &args, grad_dtype, (const OptPiece *) pieces->data, pieces->len,
                       zero_grad, FALSE, error))
        {
          _mixprec_engine_fp8_fuse_end (self, g);
          return FALSE;
        }
      _mixprec_engine_fp8_fuse_end (self, g);
      g->grad_zeroed = zero_grad;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- step */

/**
 * mixprec_engine_step:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Runs the optimizer step at the accumulation boundary:
 *
 * 1. the sum of squares of every gradient, which is non-finite exactly when
 *    some gradient is (one pass over the gradients; across ranks each sums
 *    its slices and all agree on the total, so an overflow on one rank
 *    makes every rank skip);
 * 2. the loss scaler's update with that overflow flag;
 * 3. on overflow (when overflow checking applies), the step is skipped: the
 *    weights, optimizer state and learning-rate schedule stay as they are
 *    and the gradients are cleared;
 * 4. otherwise the global norm of the averaged, unscaled gradients, the
 *    clipping coefficient `max((norm + 1e-6) / gradient_clipping, 1)`
 *    (NaN for a NaN norm, see mixprec_config_get_check_grad_overflow()), and
 *    one combined factor `1 / (scale * gradient_accumulation_steps * world
 *    * coef)` using the scale the backward passes used;
 * 5. the fused optimizer step over this rank's part, which also writes the
 *    new working copies (round to nearest even, or stochastic rounding when
 *    mixprec.stochastic_rounding is set), then under ZeRO-1/2 the working
 *    copies are gathered from all ranks. Under ZeRO-3 every gathered
 *    parameter is released;
 * 6. with fp8 enabled (see mixprec.json(5)), the FP8 working copies of the
 *    fp8 parameters are cast from the new FP32 values: delayed scaling
 *    with the scales updated (before the optimizer) from the amaxes the
 *    ranks agreed on in step 1, which carries them; current scaling after
 *    a MAX all-reduce of the new values' amaxes; MX with block scales. A
 *    skipped step leaves the FP8 copies, their scales and amax histories
 *    as they are (see mixprec_param_get_fp8_data()).
 *
 * Returns: (transfer full): what the step did, or %NULL with @error set
 *   (called before gradient_accumulation_steps backward passes, the scaler
 *   already at its minimum, a failed peer, or an optimizer failure)
 *
 * Since: 1.0
 */
MixprecStepResult *
mixprec_engine_step (MixprecEngine *self,
                     GError       **error)
{
  g_autoptr(MixprecStepResult) result = NULL;
  g_autoptr(GError) local_error = NULL;
  gdouble scale, sumsq, norm, coef = 1.0, clip, divisor;
  gboolean overflow;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  if (!mixprec_engine_prepare (self, error))
    return NULL;
  if (self->micro_steps != self->gas)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "step() called after %u backward_done() calls, but "
                   "gradient_accumulation_steps is %u", self->micro_steps, self->gas);
      return NULL;
    }
  if (!_mixprec_engine_wait_pending (self, error) || !_mixprec_engine_agree (self, &sumsq, &overflow, error))
    {
      _mixprec_engine_clear_gradients (self);
      return NULL;
    }

  result = g_new0 (MixprecStepResult, 1);
  scale = mixprec_loss_scaler_get_scale (self->scaler);
  divisor = scale * self->gas * self->world;
  norm = sqrt (sumsq) / divisor;

  if (!mixprec_loss_scaler_update (self->scaler, overflow, &local_error))
    {
      _mixprec_engine_clear_gradients (self);
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_SCALER,
                   "step %" G_GUINT64_FORMAT ": %s", self->steps + 1, local_error->message);
      return NULL;
    }

  self->steps++;
  result->loss_scale = scale;
  result->grad_norm = norm;
  result->lr = mixprec_lr_schedule_get_lr (self->schedule);
  mixprec_engine_release_all (self);

  if (overflow && mixprec_config_get_check_grad_overflow (self->config))
    {
      self->skipped_steps++;
      result->applied = FALSE;
      result->clip_coef = 1.0;
    }
  else
    {
      clip = mixprec_config_get_gradient_clipping (self->config);
      /* A NaN norm (an unchecked NaN gradient) stays NaN, as torch's clamp
       * keeps it: every gradient becomes NaN rather than some parameters
       * stepping and others not. */
      if (clip > 0.0)
        coef = isnan (norm) ? norm : MAX ((norm + 1e-6) / clip, 1.0);
      self->applied_steps++;
      /* Delayed FP8 scaling: the scales the new copies are cast with, from
       * the amaxes just agreed. */
      if (!_mixprec_engine_fp8_update (self, error) ||
          !apply_optimizer (self, result->lr, (gfloat) (1.0 / (divisor * coef)), error))
        {
          self->applied_steps--;
          _mixprec_engine_clear_gradients (self);
          return NULL;
        }
      mixprec_lr_schedule_advance (self->schedule);
      result->applied = TRUE;
      result->clip_coef = coef;
      if (!_mixprec_engine_refresh_whole (self, error) ||
          !_mixprec_engine_fp8_write (self, TRUE, error))
        {
          _mixprec_engine_clear_gradients (self);
          return NULL;
        }
    }
  _mixprec_engine_clear_gradients (self);

  result->step = self->steps;
  result->applied_steps = self->applied_steps;
  result->skipped_steps = self->skipped_steps;
  result->next_loss_scale = mixprec_loss_scaler_get_scale (self->scaler);
  _mixprec_engine_report_step (self, result, overflow);
  return g_steal_pointer (&result);
}
