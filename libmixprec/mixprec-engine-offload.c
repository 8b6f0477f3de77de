/* mixprec-engine-offload.c — ZeRO-Offload: the optimizer's pass over
 * masters and state in host memory, the gradients brought down and the
 * working copies sent up bucket by bucket on a transfer thread of the
 * engine's, and the host buffers those buckets use. Across ranks the pass
 * covers this rank's part only (its partition from ZeRO-1 on): the
 * collectives stay in device memory. With offload_param (ZeRO-3) the
 * working partition is host memory too: the pass writes it in place, and
 * a gather sends it up first (_mixprec_engine_offload_slice_send()). */
#include "config.h"

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-registry-private.h"

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
 * FP32 working copy, or the low-precision one). NULL with offload_param:
 * the working copy is host memory, which the step updates in place. */
static gpointer
bucket_device_working (Group *g, const Bucket *b, gboolean *down)
{
  const OptPiece *p = b->piece;
  gpointer base = !g->dtypes.has_master && p->master != NULL ? (gpointer) p->master : p->working;

  *down = !g->dtypes.has_master && !g->working_on_host;
  if (g->working_on_host)
    return NULL;
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
                                gboolean       pin_memory,
                                const gchar   *key,
                                gboolean       plan_only)
{
  const gchar *name = mixprec_config_get_device (self->config);

  if (!pin_memory)
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
  g_warning ("%s: device '%s' comes from a plugin of device revision 1, which has no pinned "
             "host memory; the offloaded buffers are pageable", key,
             _mixprec_device_get_name (self->device));
  return FALSE;
}

gboolean
_mixprec_engine_offload_run (MixprecEngine     *self,
                             Group             *g,
                             MixprecDType       grad_dtype,
                             const OptPiece    *pieces,
                             guint              n_pieces,
                             OffloadedStepFunc  step,
                             gpointer           data,
                             GError           **error)
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
      /* Buckets are multiples of any block size (or a whole piece). */
      if (self->repr.block_size > 0)
        host.scale_at = p->scale_at + b->off / self->repr.block_size;
      if (g->working_on_host)
        {
          /* offload_param: every buffer of the piece is the host's. */
          host.master = p->master != NULL ? p->master + b->off : NULL;
          host.working = p->working != NULL ? _mixprec_engine_at (p->working, g->dtypes.working, b->off) : NULL;
        }
      else if (g->dtypes.has_master)
        {
          host.master = p->master + b->off;
          host.working = p->working != NULL ? hwork : NULL;
        }
      else
        {
          host.master = p->master != NULL ? hwork : NULL;
          host.working = p->master != NULL ? NULL : hwork;
        }
      if (!step (self, g, &host, data, &local))
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

gconstpointer
_mixprec_engine_offload_slice_send (MixprecEngine *self,
                                    Group         *g,
                                    const Unit    *u,
                                    gconstpointer  local,
                                    gpointer       dst,
                                    GError       **error)
{
  MixprecDType dtype = g->dtypes.working;
  guint64 slice = UNIT_SLICE (self, u);
  gpointer mine;

  if (!g->working_on_host)
    return _mixprec_engine_at ((gpointer) local, dtype, u->local);
  mine = _mixprec_engine_at (dst, dtype, (guint64) self->rank * slice);
  if (!_mixprec_device_copy (g->device, mine, _mixprec_engine_at ((gpointer) local, dtype, u->local),
                             slice * mixprec_dtype_get_size (dtype), MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE,
                             error))
    return NULL;
  return mine;
}

/* ---------------------------------------------------------------- the offload's part */

gboolean
_mixprec_engine_offload_layout (MixprecEngine    *self,
                                Group            *g,
                                const GroupShape *shape,
                                GError          **error)
{
  BufferKind staging = self->offload_pinned ? BUF_PINNED_STAGING : BUF_HOST_STAGING;
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);

  g->offload_elements = _mixprec_engine_offload_elements (shape);
  for (guint b = 0; b < G_N_ELEMENTS (g->offload_grad); b++)
    if ((g->offload_grad[b] = _mixprec_engine_alloc (self, NULL, g->offload_elements,
                                                     mixprec_dtype_get_size (shape->step_grad),
                                                     staging, error)) == NULL ||
        (g->offload_working[b] = _mixprec_engine_alloc (self, NULL, g->offload_elements, wsize,
                                                        staging, error)) == NULL)
      return FALSE;
  return TRUE;
}

void
_mixprec_engine_offload_free_group (MixprecEngine *self,
                                    Group         *g)
{
  for (guint b = 0; b < G_N_ELEMENTS (g->offload_grad); b++)
    {
      _mixprec_engine_free (self, NULL, g_steal_pointer (&g->offload_grad[b]));
      _mixprec_engine_free (self, NULL, g_steal_pointer (&g->offload_working[b]));
    }
}
