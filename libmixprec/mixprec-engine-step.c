/* mixprec-engine-step.c — micro-steps (folding and reducing gradients) and
 * the optimizer step at the accumulation boundary. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- pieces */


const Segment *
_mixprec_engine_segment_of (const Group *g,
                            guint64      offset)
{
  /* The last segment starting at or before @offset: empty parameters
   * (numel 0) share their offset with the next segment, and any of them
   * serves, since nothing is read through it. */
  const Segment *found = &g_array_index (g->segments, Segment, 0);

  for (guint i = 1; i < g->segments->len; i++)
    {
      const Segment *seg = &g_array_index (g->segments, Segment, i);

      if (seg->offset > offset)
        break;
      found = seg;
    }
  return found;
}

void
_mixprec_engine_for_each_piece (Group    *g,
                guint64   begin,
                guint64   end,
                PieceFunc func,
                gpointer  data)
{
  for (guint i = 0; i < g->segments->len; i++)
    {
      const Segment *seg = &g_array_index (g->segments, Segment, i);
      guint64 lo = MAX (begin, seg->offset);
      guint64 hi = MIN (end, seg->offset + seg->numel);

      if (lo < hi)
        func (g, seg, lo, hi - lo, data);
    }
}

/* Runs @func over [0, n): across the thread pool on the host, in one call
 * on a device, whose kernels queue on one stream anyway. */
static void
group_for (Group            *g,
           gsize             n,
           _MixprecRangeFunc func,
           gpointer          data)
{
  if (g->device == NULL)
    _mixprec_parallel_for (n, _MIXPREC_ENGINE_MIN_CHUNK, 64, func, data);
  else if (n > 0)
    func (0, n, data);
}

/* Keeps the first failure of a device call during a pass over @g; the
 * host's kernels do not fail. */
static void
keep_device_error (Group  *g,
                   GError *error)
{
  if (g->device_error == NULL)
    g->device_error = error;
  else
    g_error_free (error);
}

static gboolean
take_device_error (Group   *g,
                   GError **error)
{
  if (g->device_error == NULL)
    return TRUE;
  g_propagate_error (error, g_steal_pointer (&g->device_error));
  return FALSE;
}

/* The gradient buffer at @p zeroed for the next backward pass. */
static void
zero_grad (Group *g, gpointer p, guint64 n)
{
  GError *error = NULL;

  if (!_mixprec_device_zero (g->device, p, n * mixprec_dtype_get_size (g->dtypes.grad), &error))
    keep_device_error (g, error);
}

/* ---------------------------------------------------------------- micro-steps */

typedef struct {
  Group *group;
  gboolean first;
} FoldJob;

static void
fold_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  FoldJob *job = data;
  gpointer grad = _mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset);
  GError *error = NULL;

  if (!_mixprec_device_accumulate (g->device,
                                   _mixprec_engine_at (g->accum, g->dtypes.accum, _mixprec_engine_accum_index (g, begin)),
                                   g->dtypes.accum, grad, g->dtypes.grad, n, job->first, &error))
    keep_device_error (g, error);
  zero_grad (g, grad, n);
}

static void
fold_range (gsize begin, gsize end, gpointer data)
{
  FoldJob *job = data;
  _mixprec_engine_for_each_piece (job->group, begin, end, fold_piece, job);
}

/* Gradients into the staging buffer in the wire dtype, and the gradient
 * buffer zeroed for the next backward pass. From ZeRO-2 on, the staging
 * buffer is packed bucket by bucket: bucket i's slices of every rank's
 * partition lie next to each other, so one reduce-scatter per bucket gives
 * each rank its own slice. */
static void
pack_range (gsize begin, gsize end, gpointer data)
{
  Group *g = data;
  MixprecDType wire = _mixprec_engine_wire_dtype (&g->dtypes);
  guint64 part = g->padded / mixprec_partitioner_get_world_size (g->partitioner);
  guint world = mixprec_partitioner_get_world_size (g->partitioner);
  guint64 width = mixprec_partitioner_get_bucket_width (g->partitioner);

  for (guint64 f = begin; f < end; )
    {
      guint64 r = f / part, within = f % part;
      guint64 bucket_begin = within / width * width;
      guint64 w = MIN (width, part - bucket_begin);
      guint64 n = MIN (end - f, bucket_begin + w - within);
      guint64 dst = f;

      GError *error = NULL;

      if (g->accum_sharded)
        dst = world * bucket_begin + r * w + (within - bucket_begin);
      if (!_mixprec_device_accumulate (g->device, _mixprec_engine_at (g->staging, wire, dst), wire,
                                       _mixprec_engine_at (g->grad, g->dtypes.grad, f), g->dtypes.grad,
                                       n, TRUE, &error))
        keep_device_error (g, error);
      zero_grad (g, _mixprec_engine_at (g->grad, g->dtypes.grad, f), n);
      f += n;
    }
}

static gboolean
reduce_group (MixprecEngine *self,
              Group         *g,
              gboolean       first,
              GError       **error)
{
  MixprecDType wire = _mixprec_engine_wire_dtype (&g->dtypes);
  guint flags = first ? 0 : MIXPREC_COMM_ACCUMULATE;
  guint64 width = mixprec_partitioner_get_bucket_width (g->partitioner);
  guint64 part = g->padded / self->world;
  GError *local = NULL;

  if (g->dtypes.accum == MIXPREC_DTYPE_FLOAT32 && wire != MIXPREC_DTYPE_FLOAT32)
    flags |= MIXPREC_COMM_RECV_FP32;

  group_for (g, g->padded, pack_range, g);
  if (!take_device_error (g, error) || !_mixprec_engine_before_comm (self, error))
    return FALSE;

  for (guint64 b = 0; b < part; b += width)
    {
      guint64 w = MIN (width, part - b);
      MixprecCommRequest *req;

      if (g->accum_sharded)
        req = mixprec_comm_reduce_scatter_start (self->comm, _mixprec_engine_at (g->staging, wire, self->world * b),
                                                 _mixprec_engine_at (g->accum, g->dtypes.accum, b), w, wire,
                                                 MIXPREC_REDUCE_SUM, flags, &local);
      else
        {
          /* The same bucket width over the whole element space. */
          guint64 lo = b * self->world, n = w * self->world;

          req = mixprec_comm_all_reduce_start (self->comm, _mixprec_engine_at (g->staging, wire, lo),
                                               _mixprec_engine_at (g->accum, g->dtypes.accum, lo), n, wire,
                                               MIXPREC_REDUCE_SUM, flags, &local);
        }
      if (req == NULL)
        {
          _mixprec_engine_wait_requests (g->pending, NULL);
          return _mixprec_engine_comm_failed (error, local, "reducing gradients");
        }
      g_ptr_array_add (g->pending, req);
    }
  return TRUE;
}

gboolean
_mixprec_engine_wait_pending (MixprecEngine *self,
              GError       **error)
{
  GError *local = NULL;

  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      _mixprec_engine_wait_requests (g->pending, &local);
    }
  if (local != NULL)
    return _mixprec_engine_comm_failed (error, local, "reducing gradients");
  return TRUE;
}

/**
 * mixprec_engine_backward_done:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Tells the engine that every parameter's gradient buffer holds the
 * gradient of this micro-batch's loss multiplied by
 * mixprec_engine_get_loss_scale(). The engine folds the gradients into
 * its accumulation buffers (in each parameter's accumulation dtype) and
 * zeroes the gradient buffers, or, with one micro-step per step on one
 * process, reads them in place at mixprec_engine_step(). Across ranks it
 * reduces them (all-reduce up to ZeRO-1, reduce-scatter bucket by bucket
 * from ZeRO-2, in the communication dtype); with overlap_comm the reduction
 * runs while the caller computes the next micro-batch. Call it
 * gradient_accumulation_steps times, then mixprec_engine_step().
 *
 * Returns: %TRUE on success
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_backward_done (MixprecEngine *self,
                              GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  if (self->micro_steps >= self->gas)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "backward_done() called %u times since the last step(), but "
                   "gradient_accumulation_steps is %u: call step() first",
                   self->micro_steps + 1, self->gas);
      return FALSE;
    }
  /* The previous micro-step's reductions accumulate into the same buffers. */
  if (!_mixprec_engine_wait_pending (self, error))
    return FALSE;
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      FoldJob job = { g, self->micro_steps == 0 };

      if (self->world > 1)
        {
          if (!reduce_group (self, g, self->micro_steps == 0, error))
            return FALSE;
        }
      else if (g->accum != NULL)
        {
          group_for (g, g->numel, fold_range, &job);
          if (!take_device_error (g, error))
            return FALSE;
        }
    }
  self->micro_steps++;
  if (!self->overlap)
    return _mixprec_engine_wait_pending (self, error);
  return TRUE;
}

/* ---------------------------------------------------------------- step */

/* The gradients the step reads: the accumulation buffer, or the user's
 * gradient buffers in place. */
static MixprecDType
source_dtype (const Group *g)
{
  return g->accum != NULL ? g->dtypes.accum : g->dtypes.grad;
}

/* The part of the element space whose gradients this rank reads at the
 * step: its partition when state is sharded, else everything real. */
static void
step_range (const Group *g, guint64 *begin, guint64 *end)
{
  *begin = g->state_sharded ? g->own_begin : 0;
  *end = MIN (g->state_sharded ? g->own_end : g->padded, g->numel);
  if (*end < *begin)
    *end = *begin;
}

typedef struct {
  Group *group;
  gdouble *block_sums;
  guint64 first_block;
} SumsqJob;

static void
sumsq_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  gdouble *sum = data;

  if (g->accum != NULL)
    *sum += _mixprec_kernel_sumsq (_mixprec_engine_at (g->accum, g->dtypes.accum, _mixprec_engine_accum_index (g, begin)),
                                   g->dtypes.accum, n);
  else
    *sum += _mixprec_kernel_sumsq (_mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset),
                                   g->dtypes.grad, n);
}

static void
sumsq_blocks (gsize first, gsize end, gpointer data)
{
  SumsqJob *job = data;

  for (gsize b = first; b < end; b++)
    {
      guint64 begin = (job->first_block + b) * _MIXPREC_SUMSQ_BLOCK;
      guint64 stop = MIN (begin + _MIXPREC_SUMSQ_BLOCK, job->group->numel);
      gdouble sum = 0.0;

      if (begin < stop)
        _mixprec_engine_for_each_piece (job->group, begin, stop, sumsq_piece, &sum);
      job->block_sums[b] = sum;
    }
}

/* Sums @n doubles that every rank contributes, in rank order, over @comm:
 * gathered as raw bytes (the comm moves floats, and gathering is exact). */
static gboolean
gather_doubles (MixprecComm   *comm,
                const gdouble *mine,
                gsize          n,
                gdouble       *all,
                GError       **error)
{
  GError *local = NULL;

  if (!mixprec_comm_all_gather (comm, mine, all, n * 2, MIXPREC_DTYPE_FLOAT32, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the gradient norm");
  return TRUE;
}

static gsize
n_blocks (guint64 n)
{
  return (n + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
}

/* gradient_sumsq() on a device, with the same blocks and the same order:
 * one multi-tensor launch per group writes its block sums into one device
 * array holding every group's, which the device adds up in order; the
 * host reads back the total alone, the step's one round trip. The array:
 * every group's block sums, then room for this rank's partition, the
 * total, and the model-parallel ranks' totals. */
static gboolean
gradient_sumsq_device (MixprecEngine *self,
                       gdouble       *total_out,
                       GError       **error)
{
  guint mp_world = self->mp_comm != NULL ? mixprec_comm_get_world_size (self->mp_comm) : 0;
  gsize n_all = 0, n_mine_max = 0, at = 0;
  gdouble *mine, *total;
  GError *local = NULL;

  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      n_all += n_blocks (g->padded);
      n_mine_max = MAX (n_mine_max, n_blocks (g->own_end - g->own_begin));
    }
  if (self->norm_sums == NULL)
    {
      self->n_norm_sums = n_all + n_mine_max + 1 + mp_world;
      self->norm_sums = _mixprec_engine_alloc_buffer (self->device, self->n_norm_sums, sizeof (gdouble),
                                                      "gradient norm", error);
      if (self->norm_sums == NULL)
        return FALSE;
    }
  mine = self->norm_sums + n_all;
  total = mine + n_mine_max;
  if (!_mixprec_device_zero (self->device, self->norm_sums, self->n_norm_sums * sizeof (gdouble), error))
    return FALSE;

  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      guint64 begin = g->state_sharded ? g->own_begin : 0;
      guint64 end = MIN (g->state_sharded ? g->own_end : g->padded, g->numel);
      MixprecDeviceRangeV1 range = { NULL, (MixprecPluginDType) source_dtype (g), 0 };
      gsize n_group = n_blocks (g->padded);

      range.n = end > begin ? end - begin : 0;
      range.data = g->accum != NULL
        ? _mixprec_engine_at (g->accum, g->dtypes.accum, _mixprec_engine_accum_index (g, begin))
        : _mixprec_engine_at (g->grad, g->dtypes.grad, begin);
      if (!_mixprec_device_sumsq_blocks (self->device, &range, 1, _MIXPREC_SUMSQ_BLOCK,
                                         g->state_sharded ? mine : self->norm_sums + at, error) ||
          (g->state_sharded && !_mixprec_engine_before_comm (self, error)))
        return FALSE;
      if (g->state_sharded &&
          !gather_doubles (self->comm, mine, n_blocks (g->own_end - g->own_begin),
                           self->norm_sums + at, error))
        return FALSE;
      at += n_group;
    }
  if (!_mixprec_device_sum_ordered (self->device, self->norm_sums, n_all, total, error))
    return FALSE;
  if (self->mp_comm != NULL &&
      (!_mixprec_engine_before_comm (self, error) ||
       !gather_doubles (self->mp_comm, total, 1, total + 1, error) ||
       !_mixprec_device_sum_ordered (self->device, total + 1, mp_world, total, error)))
    return FALSE;
  if (!_mixprec_device_copy (self->device, total_out, total, sizeof (gdouble),
                             MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, &local))
    {
      g_propagate_prefixed_error (error, local, "reading the gradient norm: ");
      return FALSE;
    }
  return TRUE;
}

/* The sum of squares of every gradient the step will read, identical on
 * every rank and at every world size: fixed-size blocks of each group's
 * element space, their sums added in index order. */
static gboolean
gradient_sumsq (MixprecEngine *self,
                gdouble       *total_out,
                GError       **error)
{
  gdouble total = 0.0;

  if (self->device != NULL)
    return gradient_sumsq_device (self, total_out, error);

  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      gsize n_all = (g->padded + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      g_autofree gdouble *all = g_new0 (gdouble, MAX (n_all, 1));
      SumsqJob job = { g, all, 0 };

      if (g->state_sharded)
        {
          /* Each rank sums the blocks of its partition (whole blocks, by the
           * partition alignment), then everyone gathers every block sum. */
          gsize n_mine = (g->own_end - g->own_begin) / _MIXPREC_SUMSQ_BLOCK;
          g_autofree gdouble *mine = g_new0 (gdouble, MAX (n_mine, 1));

          job.block_sums = mine;
          job.first_block = g->own_begin / _MIXPREC_SUMSQ_BLOCK;
          _mixprec_parallel_for (n_mine, 1, 1, sumsq_blocks, &job);
          if (!gather_doubles (self->comm, mine, n_mine, all, error))
            return FALSE;
        }
      else
        _mixprec_parallel_for (n_all, 1, 1, sumsq_blocks, &job);
      for (gsize b = 0; b < n_all; b++)
        total += all[b];
    }

  if (self->mp_comm != NULL)
    {
      guint n = mixprec_comm_get_world_size (self->mp_comm);
      g_autofree gdouble *all = g_new0 (gdouble, n);

      if (!gather_doubles (self->mp_comm, &total, 1, all, error))
        return FALSE;
      total = 0.0;
      for (guint r = 0; r < n; r++)
        total += all[r];
    }
  *total_out = total;
  return TRUE;
}

typedef struct {
  MixprecEngine *engine;
  Group *group;
  MixprecOptimizerStepV1 args;
  GMutex lock;
  GError *error;
} StepJob;

static void
step_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  StepJob *job = data;
  MixprecOptimizerStepV1 args = job->args;
  gfloat *states[16];
  guint n_slots = mixprec_feature_get_n_state_slots (job->engine->optimizer);
  gconstpointer grad;
  gpointer working = NULL;
  gfloat *master = seg->master != NULL ? seg->master + (begin - seg->master_base) : NULL;
  GError *error = NULL;

  for (guint s = 0; s < n_slots && s < G_N_ELEMENTS (states); s++)
    states[s] = g->states[s] + _mixprec_engine_state_index (g, begin);
  grad = g->accum != NULL ? _mixprec_engine_at (g->accum, g->dtypes.accum, _mixprec_engine_accum_index (g, begin))
                          : _mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset);
  if (seg->working != (gpointer) seg->master)
    working = _mixprec_engine_at (seg->working, g->dtypes.working, begin - seg->working_base);
  args.first_index = begin;
  args.device_stream = _mixprec_device_get_stream (g->device);

  if (!_mixprec_feature_optimizer_step (job->engine->optimizer, &args, g->hparams,
                                        master, grad, states, working, n, &error))
    {
      g_mutex_lock (&job->lock);
      if (job->error == NULL)
        job->error = g_steal_pointer (&error);
      g_mutex_unlock (&job->lock);
      g_clear_error (&error);
    }
}

static void
step_chunk (gsize begin, gsize end, gpointer data)
{
  StepJob *job = data;
  guint64 lo, hi;

  step_range (job->group, &lo, &hi);
  _mixprec_engine_for_each_piece (job->group, lo + begin, lo + end, step_piece, job);
}

static void
zero_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  zero_grad (g, _mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset), n);
}

static void
zero_range (gsize begin, gsize end, gpointer data)
{
  _mixprec_engine_for_each_piece (data, begin, end, zero_piece, NULL);
}

void
_mixprec_engine_clear_gradients (MixprecEngine *self)
{
  _mixprec_engine_wait_pending (self, NULL);
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      /* Accumulation buffers are overwritten by the next first fold;
       * gradients read in place must be zeroed for backward passes that add. */
      if (g->accum == NULL)
        group_for (g, g->numel, zero_range, g);
      /* Nothing to report it to: the next pass meets a broken device. */
      g_clear_error (&g->device_error);
    }
  self->micro_steps = 0;
}

/* ZeRO-1/2: every rank updated the working copy of its partition; gather
 * the partitions so each rank has the whole copy again. */
static gboolean
gather_working (MixprecEngine *self,
                GError       **error)
{
  GError *local = NULL;

  if (self->world == 1 || self->stage == 0 || self->stage >= 3)
    return TRUE;
  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      guint64 part = g->own_end - g->own_begin;

      if (!mixprec_comm_all_gather (self->comm, _mixprec_engine_at (g->working, g->dtypes.working, g->own_begin),
                                    g->working, part, g->dtypes.working, &local))
        return _mixprec_engine_comm_failed (error, local, "gathering the updated working copies");
    }
  return TRUE;
}

guint64
_mixprec_engine_step_seed (MixprecEngine *self, guint group)
{
  /* splitmix64 over (seed, group, step): one stream per tensor group and
   * step, the same at any world size since the index is global. */
  guint64 z = self->seed ^ (G_GUINT64_CONSTANT (0x9E3779B97F4A7C15) * (group + 1)) ^
              (G_GUINT64_CONSTANT (0xD1B54A32D192ED03) * (self->applied_steps + 1));

  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
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
      StepJob job = { self, g, { 0 }, { 0 }, NULL };
      guint64 lo, hi;

      step_range (g, &lo, &hi);
      job.args.step = self->applied_steps;
      job.args.lr = lr;
      job.args.grad_factor = factor;
      job.args.grad_dtype = (MixprecPluginDType) source_dtype (g);
      job.args.working_dtype = (MixprecPluginDType) g->dtypes.working;
      job.args.rounding = self->stochastic ? MIXPREC_PLUGIN_ROUNDING_STOCHASTIC
                                           : MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
      job.args.seed = _mixprec_engine_step_seed (self, g->index);
      g_mutex_init (&job.lock);
      group_for (g, hi - lo, step_chunk, &job);
      g_mutex_clear (&job.lock);
      if (job.error != NULL)
        {
          g_propagate_prefixed_error (error, job.error, "step %" G_GUINT64_FORMAT ": ",
                                      self->steps);
          return FALSE;
        }
    }
  return TRUE;
}

/**
 * mixprec_engine_step:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Runs the optimizer step at the accumulation boundary:
 *
 * 1. the sum of squares of every gradient, which is non-finite exactly when
 *    some gradient is (one pass over the gradients; across ranks each sums
 *    its partition and all agree on the total, so an overflow on one rank
 *    makes every rank skip);
 * 2. the loss scaler's update with that overflow flag;
 * 3. on overflow (when overflow checking applies), the step is skipped: the
 *    weights, optimizer state and learning-rate schedule stay as they are
 *    and the gradients are cleared;
 * 4. otherwise the global norm of the averaged, unscaled gradients, the
 *    clipping coefficient `max((norm + 1e-6) / gradient_clipping, 1)`, and
 *    one combined factor `1 / (scale * gradient_accumulation_steps * world
 *    * coef)` using the scale the backward passes used;
 * 5. the fused optimizer step over this rank's part, which also writes the
 *    new working copies (round to nearest even, or stochastic rounding when
 *    mixprec.stochastic_rounding is set), then under ZeRO-1/2 the working
 *    copies are gathered from all ranks. Under ZeRO-3 every gathered
 *    parameter is released.
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
  if (!_mixprec_engine_wait_pending (self, error) || !gradient_sumsq (self, &sumsq, error))
    {
      _mixprec_engine_clear_gradients (self);
      return NULL;
    }

  result = g_new0 (MixprecStepResult, 1);
  scale = mixprec_loss_scaler_get_scale (self->scaler);
  divisor = scale * self->gas * self->world;
  overflow = !isfinite (sumsq);
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
      if (clip > 0.0)
        coef = MAX ((norm + 1e-6) / clip, 1.0);
      self->applied_steps++;
      if (!apply_optimizer (self, result->lr, (gfloat) (1.0 / (divisor * coef)), error))
        {
          self->applied_steps--;
          _mixprec_engine_clear_gradients (self);
          return NULL;
        }
      mixprec_lr_schedule_advance (self->schedule);
      result->applied = TRUE;
      result->clip_coef = coef;
      if (!gather_working (self, error))
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
  return g_steal_pointer (&result);
}

