/* mixprec-engine-reduce.c — micro-steps: gradients taken from the caller
 * (whole, or one parameter at a time as the backward pass produces them),
 * folded on one process, reduce-scattered unit by unit across ranks. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- helpers */

/* Keeps the first failure of a device call during a pass over @g; the
 * host's kernels do not fail. */
static void
keep_device_error (Group  *g,
                   GError *error)
{
  if (g->intake.device_error == NULL)
    g->intake.device_error = error;
  else
    g_error_free (error);
}

static gboolean
take_device_error (Group   *g,
                   GError **error)
{
  if (g->intake.device_error == NULL)
    return TRUE;
  g_propagate_error (error, g_steal_pointer (&g->intake.device_error));
  return FALSE;
}

typedef struct {
  Group *group;
  gpointer dst;
  MixprecDType dst_dtype;
  gconstpointer src;         /* NULL: zeros */
  MixprecDType src_dtype;
} CopyJob;

static void
copy_range (gsize begin, gsize end, gpointer data)
{
  CopyJob *job = data;
  GError *error = NULL;
  gboolean ok;

  if (job->src == NULL)
    ok = _mixprec_device_zero (job->group->device, _mixprec_engine_at (job->dst, job->dst_dtype, begin),
                               (end - begin) * mixprec_dtype_get_size (job->dst_dtype), &error);
  else
    ok = _mixprec_device_accumulate (job->group->device, _mixprec_engine_at (job->dst, job->dst_dtype, begin),
                                     job->dst_dtype,
                                     _mixprec_engine_at ((gpointer) job->src, job->src_dtype, begin),
                                     job->src_dtype, end - begin, TRUE, &error);
  if (!ok)
    keep_device_error (job->group, error);
}

/* dst[0, n) = src[0, n) converted (zeros when @src is NULL), dispatched
 * the way @g's device runs work. */
static void
copy_into (Group        *g,
           gpointer      dst,
           MixprecDType  dst_dtype,
           gconstpointer src,
           MixprecDType  src_dtype,
           guint64       n)
{
  CopyJob job = { g, dst, dst_dtype, src, src_dtype };

  _mixprec_device_dispatch (g->device, n, _MIXPREC_ENGINE_MIN_CHUNK, 64, copy_range, &job);
}

/* ---------------------------------------------------------------- the intake's part */

gboolean
_mixprec_engine_intake_layout (MixprecEngine *self,
                               Group         *g,
                               guint64        n_slots,
                               GError       **error)
{
  g->intake.slots = g_array_new (FALSE, TRUE, sizeof (Slot));
  g->intake.pending = g_array_new (FALSE, TRUE, sizeof (Pending));
  for (guint k = 0; k < g->units->len; k++)
    g_array_index (g->units, Unit, k).intake.slot = -1;
  for (guint64 k = 0; k < n_slots; k++)
    {
      Slot slot = { NULL, SLOT_FREE };

      slot.data = _mixprec_engine_alloc (self, self->device, g->slot_elements,
                                         mixprec_dtype_get_size (g->wire), BUF_STAGING, error);
      if (slot.data == NULL)
        return FALSE;
      g_array_append_val (g->intake.slots, slot);
    }
  return TRUE;
}

void
_mixprec_engine_intake_clear (MixprecEngine *self,
                              Group         *g)
{
  if (g->intake.pending != NULL)
    _mixprec_engine_wait_group (self, g, NULL);
  for (guint i = 0; g->intake.slots != NULL && i < g->intake.slots->len; i++)
    _mixprec_engine_free (self, g->device, g_array_index (g->intake.slots, Slot, i).data);
  g_clear_error (&g->intake.device_error);
  g_clear_pointer (&g->intake.pending, g_array_unref);
  g_clear_pointer (&g->intake.slots, g_array_unref);
}

void
_mixprec_engine_note_grad_zeroed (Group    *g,
                                  gboolean  zeroed)
{
  g->intake.grad_zeroed = zeroed;
}

/* ---------------------------------------------------------------- requests */

static void
finish_pending (MixprecEngine *self,
                Group         *g,
                guint          k,
                GError       **error)
{
  Pending p = g_array_index (g->intake.pending, Pending, k);
  g_autoptr(GError) local = NULL;

  gboolean ok;

  g_array_remove_index (g->intake.pending, k);
  ok = mixprec_comm_request_wait (p.request, &local);
  if (!ok && error != NULL && *error == NULL)
    *error = g_steal_pointer (&local);
  mixprec_comm_request_free (p.request);
  /* over several hosts, qgZ's second level runs here and may fail */
  if (p.qgz != NULL && !_mixprec_engine_zeropp_finish_reduce (self, g, p.qgz, ok, &local) && ok &&
      error != NULL && *error == NULL)
    *error = g_steal_pointer (&local);
  if (p.slot >= 0)
    g_array_index (g->intake.slots, Slot, p.slot).state = SLOT_FREE;
  if (p.zero_n > 0)
    copy_into (g, _mixprec_engine_at (g->grad, g->dtypes.grad, p.zero_begin), g->dtypes.grad,
               NULL, g->dtypes.grad, p.zero_n);
}

void
_mixprec_engine_wait_group (MixprecEngine *self,
                            Group         *g,
                            GError       **error)
{
  /* Wait for every request even after a failure: none may be left running
   * over buffers that are about to change. */
  while (g->intake.pending->len > 0)
    finish_pending (self, g, 0, error);
}

gboolean
_mixprec_engine_wait_pending (MixprecEngine *self,
                              GError       **error)
{
  GError *local = NULL;

  for (guint j = 0; j < self->groups->len; j++)
    _mixprec_engine_wait_group (self, g_ptr_array_index (self->groups, j), &local);
  if (local != NULL)
    return _mixprec_engine_comm_failed (error, local, "reducing gradients");
  return TRUE;
}

/* A free staging slot: a free one, else the oldest one in flight once its
 * reduction is done, else (every slot collecting a unit whose parameters
 * arrive apart) a new one. */
static gint
acquire_slot (MixprecEngine *self,
              Group         *g,
              GError       **error)
{
  Slot fresh = { NULL, SLOT_FREE };

  for (guint i = 0; i < g->intake.slots->len; i++)
    if (g_array_index (g->intake.slots, Slot, i).state == SLOT_FREE)
      return (gint) i;
  for (guint k = 0; k < g->intake.pending->len; k++)
    {
      gint slot = g_array_index (g->intake.pending, Pending, k).slot;
      GError *local = NULL;

      if (slot < 0)
        continue;
      finish_pending (self, g, k, &local);
      if (local != NULL)
        return (_mixprec_engine_comm_failed (error, local, "reducing gradients"), -1);
      return slot;
    }
  fresh.data = _mixprec_engine_alloc (self, self->device, g->slot_elements,
                                      mixprec_dtype_get_size (g->wire), BUF_STAGING, error);
  if (fresh.data == NULL)
    return -1;
  g_array_append_val (g->intake.slots, fresh);
  return (gint) g->intake.slots->len - 1;
}

/* ---------------------------------------------------------------- reducing a unit */

static gboolean
start_reduce (MixprecEngine *self,
              Group         *g,
              const Unit    *u,
              guint64        window,
              gconstpointer  send,
              gpointer       recv,
              guint64        count,
              gint           slot,
              guint64        zero_begin,
              guint64        zero_n,
              GError       **error)
{
  guint flags = self->micro_steps == 0 ? 0 : MIXPREC_COMM_ACCUMULATE;
  Pending p = { NULL, slot, zero_begin, zero_n, NULL };
  GError *local = NULL;

  if (g->dtypes.accum == MIXPREC_DTYPE_FLOAT32 && g->wire != MIXPREC_DTYPE_FLOAT32)
    flags |= MIXPREC_COMM_RECV_FP32;
  if (!take_device_error (g, error) || !_mixprec_engine_before_comm (self, error))
    return FALSE;
  /* ZeRO++ qgZ: int4 blocks through an all-to-all, summed on arrival. */
  if (g->zeropp.gradients)
    p.request = _mixprec_engine_zeropp_reduce_start (self, g, u, window, send, recv, count, flags,
                                                     &p.qgz, &local);
  else
    p.request = mixprec_comm_reduce_scatter_start (self->comm, send, recv, count, g->wire,
                                                   MIXPREC_REDUCE_SUM, flags, &local);
  if (p.request == NULL)
    {
      if (slot >= 0)
        g_array_index (g->intake.slots, Slot, slot).state = SLOT_FREE;
      return _mixprec_engine_comm_failed (error, local, "reducing gradients");
    }
  if (slot >= 0)
    g_array_index (g->intake.slots, Slot, slot).state = SLOT_IN_FLIGHT;
  g_array_append_val (g->intake.pending, p);
  return TRUE;
}

/* Reduces @u through staging slots, window by window: window [a, a + w) of
 * every rank's slice, packed rank after rank, is one reduce-scatter that
 * leaves [a, a + w) of this rank's slice reduced. @src holds the unit's
 * elements [e0, e0 + n) in @src_dtype (NULL: zeros); the rest are zero. */
static gboolean
reduce_windows (MixprecEngine *self,
                Group         *g,
                Unit          *u,
                gconstpointer  src,
                MixprecDType   src_dtype,
                guint64        e0,
                guint64        n,
                GError       **error)
{
  guint64 slice = UNIT_SLICE (self, u);
  guint64 width = MAX (g->slot_elements / self->world, 1);
  gpointer target = _mixprec_engine_reduce_target (self, g, u);

  for (guint64 a = 0; a < slice; a += width)
    {
      guint64 w = MIN (width, slice - a);
      gint slot = acquire_slot (self, g, error);
      gpointer data;

      if (slot < 0)
        return FALSE;
      data = g_array_index (g->intake.slots, Slot, slot).data;
      for (guint r = 0; r < self->world; r++)
        {
          guint64 lo = r * slice + a, hi = lo + w;
          guint64 clo = src != NULL ? CLAMP (e0, lo, hi) : hi;
          guint64 chi = src != NULL ? CLAMP (e0 + n, lo, hi) : hi;
          gpointer dst = _mixprec_engine_at (data, g->wire, (guint64) r * w);

          /* zeros, the caller's values, zeros */
          copy_into (g, dst, g->wire, NULL, g->wire, clo - lo);
          if (chi > clo)
            copy_into (g, _mixprec_engine_at (dst, g->wire, clo - lo), g->wire,
                       _mixprec_engine_at ((gpointer) src, src_dtype, clo - e0), src_dtype, chi - clo);
          copy_into (g, _mixprec_engine_at (dst, g->wire, MAX (chi, clo) - lo), g->wire,
                     NULL, g->wire, hi - MAX (chi, clo));
        }
      if (!start_reduce (self, g, u, a, data, _mixprec_engine_at (target, g->dtypes.accum, a),
                         w, slot, 0, 0, error))
        return FALSE;
    }
  return TRUE;
}

/* Starts this micro-step's reduction of @u from wherever its gradients
 * are: the gradient buffer, the slot collecting it, or nowhere (zeros). */
static gboolean
reduce_unit (MixprecEngine *self,
             Group         *g,
             Unit          *u,
             GError       **error)
{
  guint64 slice = UNIT_SLICE (self, u);
  gboolean zero_at_clear = self->stage == 0 || g->accum_mode == ACCUM_IN_GRAD;

  u->intake.started = TRUE;
  if (slice == 0)
    return TRUE;
  if (g->grad != NULL)
    {
      gpointer grad = _mixprec_engine_flat_at (self, u, g->grad, g->dtypes.grad, 0);

      if (g->wire == g->dtypes.grad)
        return start_reduce (self, g, u, 0, grad, _mixprec_engine_reduce_target (self, g, u), slice, -1,
                             u->flat, zero_at_clear ? 0 : u->padded, error);
      if (!reduce_windows (self, g, u, grad, g->dtypes.grad, 0, u->padded, error))
        return FALSE;
      if (!zero_at_clear)
        copy_into (g, grad, g->dtypes.grad, NULL, g->dtypes.grad, u->padded);
      return take_device_error (g, error);
    }
  if (u->intake.slot >= 0)
    {
      gint slot = u->intake.slot;

      u->intake.slot = -1;
      return start_reduce (self, g, u, 0, g_array_index (g->intake.slots, Slot, slot).data,
                           _mixprec_engine_reduce_target (self, g, u), slice, slot, 0, 0, error);
    }
  return reduce_windows (self, g, u, NULL, g->wire, 0, 0, error);
}

/* Before the first reduction of a micro-step: the previous micro-step's
 * reductions accumulate into the same buffers. */
static gboolean
begin_intake (MixprecEngine *self,
              GError       **error)
{
  if (self->intake_step == self->micro_steps)
    return TRUE;
  self->intake_step = self->micro_steps;
  return _mixprec_engine_wait_pending (self, error);
}

static void
reset_units (MixprecEngine *self)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      for (guint k = 0; k < g->units->len; k++)
        {
          Unit *u = &g_array_index (g->units, Unit, k);

          u->intake.arrived = 0;
          u->intake.started = FALSE;
          u->intake.slot = -1;
        }
    }
}

/* ---------------------------------------------------------------- one process */

typedef struct {
  Group *group;
  gboolean first;
  gboolean sum;              /* the last micro-step: sum the blocks too */
} FoldJob;

static void
fold_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  FoldJob *job = data;
  gpointer grad = _mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset);
  GError *error = NULL;

  if (!_mixprec_device_accumulate (g->device, _mixprec_engine_at (g->accum, g->dtypes.accum, begin),
                                   g->dtypes.accum, grad, g->dtypes.grad, n, job->first, &error) ||
      !_mixprec_device_zero (g->device, grad, n * mixprec_dtype_get_size (g->dtypes.grad), &error))
    keep_device_error (g, error);
}

static void
fold_range (gsize begin, gsize end, gpointer data)
{
  FoldJob *job = data;
  _mixprec_engine_for_each_piece (job->group, begin, end, fold_piece, job);
}

static void
fold_piece_host (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  FoldJob *job = data;

  _mixprec_kernel_fold_zero_best (_mixprec_engine_at (g->accum, g->dtypes.accum, begin), g->dtypes.accum,
                                  _mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset),
                                  g->dtypes.grad, n, job->first);
}

/* On the host: block by block of the sum of squares, so that each block's
 * gradients are zeroed, and on the last micro-step its accumulated sums
 * squared, while they are in the cache. The step then reads the block
 * sums instead of the accumulation buffer: the same kernel over the same
 * values, so the same bits as a pass of its own. */
static void
fold_blocks (gsize first, gsize end, gpointer data)
{
  FoldJob *job = data;
  Group *g = job->group;

  for (gsize j = first; j < end; j++)
    {
      const Unit *u = _mixprec_engine_unit_of_block (g, j);
      guint64 b = (j - u->first_block) * _MIXPREC_SUMSQ_BLOCK;
      guint64 n = u->numel > b ? MIN (_MIXPREC_SUMSQ_BLOCK, u->numel - b) : 0;
      /* Up to four whole blocks at once (64 KiB of FP32 sums, still in the
       * cache) for the multi-block sum of squares. */
      guint64 whole = MIN (MIN ((u->numel - MIN (u->numel, b)) / _MIXPREC_SUMSQ_BLOCK, end - j), 4);
      gpointer acc = _mixprec_engine_at (g->accum, g->dtypes.accum, u->flat + b);

      if (job->sum && whole > 1)
        {
          _mixprec_engine_for_each_piece (g, u->flat + b, u->flat + b + whole * _MIXPREC_SUMSQ_BLOCK,
                                          fold_piece_host, job);
          _mixprec_kernel_sumsq_blocks_best (acc, g->dtypes.accum, whole, g->norm.blocks + j);
          j += whole - 1;
          continue;
        }
      _mixprec_engine_for_each_piece (g, u->flat + b, u->flat + b + n, fold_piece_host, job);
      if (job->sum)
        g->norm.blocks[j] = n > 0 ? _mixprec_kernel_sumsq_best (acc, g->dtypes.accum, n) : 0.0;
    }
}

/* One process: this micro-step's gradients folded into the accumulation
 * buffer and zeroed. In host memory block by block, with the block sums
 * of the last micro-step (fold_blocks()); elsewhere through the device's
 * accumulate and zero, segment by segment, the step's norm pass summing
 * the blocks. */
static gboolean
fold_group (MixprecEngine *self,
            Group         *g,
            GError       **error)
{
  FoldJob job = { g, self->micro_steps == 0, self->micro_steps + 1 == self->gas };

  if (_mixprec_device_memory_is_host (g->device))
    {
      _mixprec_device_dispatch (g->device, g->norm.n_blocks, 1, 1, fold_blocks, &job);
      _mixprec_engine_norm_set_ready (g, job.sum);
    }
  else
    _mixprec_device_dispatch (g->device, g->numel, _MIXPREC_ENGINE_MIN_CHUNK, 64, fold_range, &job);
  return take_device_error (g, error);
}

/* ---------------------------------------------------------------- lean intake */

/* One process with the gradients read in place on the host (GAS 1, see
 * mixprec-engine-layout.c) and engine-owned buffers: a gradient handed
 * over with mixprec_param_reduce_grad() is copied into the gradient
 * buffer tile by tile, and each tile's blocks of the sum of squares that
 * lie inside the parameter are summed while the tile is in the cache.
 * The blocks a parameter shares with its neighbours are summed once its
 * unit is complete; a unit complete through the intake is marked summed
 * and the step's norm pass skips it. The kernels are those of the step's
 * pass over the same values (_mixprec_kernel_sumsq_blocks_best() gives
 * the bits of _mixprec_kernel_sumsq_best() per block), so the sum of
 * squares keeps the order mixprec.json(5) documents, bit for bit. */
static gboolean
intake_on_host (MixprecEngine *self, Group *g)
{
  return self->world == 1 && _mixprec_device_memory_is_host (g->device) && !g->external && g->grad != NULL;
}

static gboolean
intake_sums (MixprecEngine *self, Group *g)
{
  return intake_on_host (self, g) && g->accum == NULL;
}

/* While no parameter of such a group has had its gradient buffer handed
 * to the caller, nobody but the engine reads or writes the buffer: the
 * step does not zero what it read (2 bytes per parameter less), and the
 * buffers keep their stale values instead. The intake overwrites them; a
 * parameter not handed over in a micro-step is zeroed at
 * backward_done() (it counts as zero); and a stale buffer is zeroed when
 * its address is first handed out (_mixprec_engine_expose_grad()), so
 * every buffer the caller can see reads zero after a step, as
 * mixprec_param_get_grad_data() documents. */
gboolean
_mixprec_engine_grad_private (MixprecEngine *self,
                              Group         *g)
{
  return intake_sums (self, g) && g->intake.n_exposed == 0;
}

gboolean
_mixprec_engine_expose_grad (MixprecEngine *self,
                             MixprecParam  *param,
                             GError       **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (param);
  Group *g = _mixprec_engine_group_of (self, param);

  if (!s->grad_exposed)
    {
      s->grad_exposed = TRUE;
      g->intake.n_exposed++;
    }
  /* Whatever the caller writes from now on is not what the intake summed. */
  _mixprec_engine_unit_of (self, param)->intake.summed = FALSE;
  if (s->grad_stale)
    {
      if (!_mixprec_device_zero (s->device, s->grad,
                                 mixprec_param_get_numel (param) * mixprec_dtype_get_size (g->dtypes.grad),
                                 error))
        return FALSE;
      s->grad_stale = FALSE;
    }
  return TRUE;
}

/* Elements per intake tile: a multiple of the sum-of-squares block, small
 * enough to stay in the cache between the copy and the sum. */
#define INTAKE_TILE ((guint64) 16 * _MIXPREC_SUMSQ_BLOCK)

/* Tiles per thread of the intake. */
#define INTAKE_MIN_TILES 4

typedef struct {
  Group *group;
  const Unit *unit;
  gpointer dst;              /* the unit's gradients, unit element 0 */
  gconstpointer src;         /* the parameter's, its element 0 */
  MixprecDType src_dtype;
  guint64 begin;             /* the parameter's elements in the unit */
  guint64 end;
  guint64 first_tile;        /* the tile holding @begin */
  gboolean sum;
} IntakeJob;

static void
intake_tiles (gsize first, gsize last, gpointer data)
{
  IntakeJob *job = data;
  Group *g = job->group;
  const Unit *u = job->unit;

  for (guint64 t = job->first_tile + first; t < job->first_tile + last; t++)
    {
      guint64 lo = MAX (job->begin, t * INTAKE_TILE);
      guint64 hi = MIN (job->end, (t + 1) * INTAKE_TILE);
      guint64 j = (lo + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      guint64 whole = 0;
      GError *error = NULL;

      if (!_mixprec_device_accumulate (NULL, _mixprec_engine_at (job->dst, g->dtypes.grad, lo), g->dtypes.grad,
                                       _mixprec_engine_at ((gpointer) job->src, job->src_dtype, lo - job->begin),
                                       job->src_dtype, hi - lo, TRUE, &error))
        {
          keep_device_error (g, error);
          continue;
        }
      if (!job->sum)
        continue;
      /* The blocks inside [lo, hi): whole ones together, then the unit's
       * last one when it is short and ends here. */
      while ((j + whole + 1) * _MIXPREC_SUMSQ_BLOCK <= hi)
        whole++;
      if (whole > 0)
        _mixprec_kernel_sumsq_blocks_best (_mixprec_engine_at (job->dst, g->dtypes.grad, j * _MIXPREC_SUMSQ_BLOCK),
                                           g->dtypes.grad, whole, g->norm.blocks + u->first_block + j);
      j += whole;
      if (j * _MIXPREC_SUMSQ_BLOCK < hi && hi == u->numel)
        g->norm.blocks[u->first_block + j] =
          _mixprec_kernel_sumsq_best (_mixprec_engine_at (job->dst, g->dtypes.grad, j * _MIXPREC_SUMSQ_BLOCK),
                                      g->dtypes.grad, hi - j * _MIXPREC_SUMSQ_BLOCK);
    }
}

/* Copies @param's gradient in, summing the blocks inside it where the
 * step reads the gradients in place. */
static void
intake_copy (MixprecEngine *self,
             Group         *g,
             Unit          *u,
             MixprecParam  *param,
             gconstpointer  grad,
             MixprecDType   dtype)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (param);
  guint64 numel = mixprec_param_get_numel (param);
  IntakeJob job = { g, u, _mixprec_engine_at (g->grad, g->dtypes.grad, u->flat), grad, dtype,
                    s->offset - u->flat, s->offset - u->flat + numel, 0,
                    intake_sums (self, g) && !s->grad_exposed };

  if (numel == 0)
    return;
  job.first_tile = job.begin / INTAKE_TILE;
  /* Parameters of a few tiles are copied on the calling thread: waking
   * the pool costs about as much as the copy, and a backward pass hands
   * over a parameter while the other threads compute the next. */
  _mixprec_parallel_for ((job.end + INTAKE_TILE - 1) / INTAKE_TILE - job.first_tile, INTAKE_MIN_TILES, 1,
                         intake_tiles, &job);
}

/* @u is complete: the blocks no single parameter holds whole, then the
 * unit marked summed (unless some parameter's buffer is the caller's to
 * write). */
static void
intake_finish_unit (MixprecEngine *self,
                    Group         *g,
                    Unit          *u)
{
  gconstpointer grad = _mixprec_engine_at (g->grad, g->dtypes.grad, u->flat);
  guint64 n_blocks = (u->numel + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
  guint i = u->first_param;

  for (guint k = 0; k < u->n_params; k++)
    if (_mixprec_param_get_storage (g_ptr_array_index (g->params, u->first_param + k))->grad_exposed)
      return;
  for (guint64 j = 0; j < n_blocks; j++)
    {
      guint64 lo = j * _MIXPREC_SUMSQ_BLOCK, hi = MIN (lo + _MIXPREC_SUMSQ_BLOCK, u->numel);
      guint64 p_begin = 0, p_end = 0;

      /* The parameter holding the block's first element (parameters lie
       * in order; empty ones hold nothing). */
      for (; i < u->first_param + u->n_params; i++)
        {
          MixprecParam *p = g_ptr_array_index (g->params, i);

          p_begin = _mixprec_param_get_storage (p)->offset - u->flat;
          p_end = p_begin + mixprec_param_get_numel (p);
          if (p_end > lo)
            break;
        }
      if (p_begin <= lo && hi <= p_end)
        continue;            /* summed at the parameter's intake */
      g->norm.blocks[u->first_block + j] = _mixprec_kernel_sumsq_best (_mixprec_engine_at ((gpointer) grad, g->dtypes.grad, lo),
                                                                g->dtypes.grad, hi - lo);
    }
  u->intake.summed = TRUE;
}

/* ---------------------------------------------------------------- intake */

/* The engine's part of mixprec_param_reduce_grad() (mixprec-param.c),
 * once the parameter has its storage. */
gboolean
_mixprec_engine_reduce_grad (MixprecEngine *engine,
                             MixprecParam  *self,
                             MixprecDType   dtype,
                             gconstpointer  grad,
                             GError       **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (self);
  guint64 numel = mixprec_param_get_numel (self);
  Group *g;
  Unit *u;

  if (engine->micro_steps >= engine->gas)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': gradient handed over after %u backward_done() calls, but "
                   "gradient_accumulation_steps is %u: call step() first",
                   mixprec_param_get_name (self), engine->micro_steps, engine->gas);
      return FALSE;
    }
  if (s->handed == engine->micro_steps + 1)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': gradient already handed over in micro-step %u; "
                   "add partial gradients up before handing them over",
                   mixprec_param_get_name (self), engine->micro_steps + 1);
      return FALSE;
    }
  if (!begin_intake (engine, error))
    return FALSE;
  s->handed = engine->micro_steps + 1;
  g = _mixprec_engine_group_of (engine, self);
  u = &g_array_index (g->units, Unit, s->unit);

  if (g->grad != NULL || engine->world == 1)
    {
      /* Into the gradient buffer (the caller's, for external memory). */
      if (intake_on_host (engine, g))
        intake_copy (engine, g, u, self, grad, dtype);
      else
        copy_into (g, s->grad, g->dtypes.grad, grad, dtype, numel);
      if (!take_device_error (g, error))
        return FALSE;
      s->grad_stale = FALSE;
      u->intake.arrived += numel;
      if (intake_sums (engine, g) && u->intake.arrived == u->numel)
        intake_finish_unit (engine, g, u);
      if (engine->world == 1 || u->intake.arrived < u->numel)
        return TRUE;
      return reduce_unit (engine, g, u, error);
    }

  if (numel == u->numel)
    {
      /* A unit of its own (empty neighbours aside): straight from the
       * caller's memory into the wire, window by window. */
      u->intake.arrived = numel;
      u->intake.started = TRUE;
      return reduce_windows (engine, g, u, grad, dtype, s->offset - u->flat, numel, error) &&
             take_device_error (g, error);
    }

  /* A unit of several parameters collects in a slot until complete. */
  if (u->intake.slot < 0)
    {
      gint slot = acquire_slot (engine, g, error);

      if (slot < 0)
        return FALSE;
      u->intake.slot = slot;
      g_array_index (g->intake.slots, Slot, slot).state = SLOT_FILLING;
      copy_into (g, g_array_index (g->intake.slots, Slot, slot).data, g->wire, NULL, g->wire, u->padded);
    }
  copy_into (g, _mixprec_engine_at (g_array_index (g->intake.slots, Slot, u->intake.slot).data, g->wire, s->offset - u->flat),
             g->wire, grad, dtype, numel);
  if (!take_device_error (g, error))
    return FALSE;
  u->intake.arrived += numel;
  if (u->intake.arrived < u->numel)
    return TRUE;
  return reduce_unit (engine, g, u, error);
}


/* ---------------------------------------------------------------- micro-step */

/* Before the step reads @g's gradients in place: a stale buffer whose
 * parameter was not handed over in this micro-step counts as zero. */
static void
zero_stale (MixprecEngine *self,
            Group         *g)
{
  for (guint i = 0; i < g->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (g->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);

      if (s->grad_stale && s->handed != self->micro_steps + 1)
        memset (s->grad, 0, mixprec_param_get_numel (p) * mixprec_dtype_get_size (g->dtypes.grad));
      s->grad_stale = FALSE;
    }
  g->intake.has_stale = FALSE;
}

/**
 * mixprec_engine_backward_done:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Ends a micro-step. Every parameter's gradient is what the caller handed
 * over with mixprec_param_reduce_grad(), or else what it wrote into the
 * gradient buffer (mixprec_param_get_grad_data(), mixprec_param_set_grad()),
 * or zero: the gradient of this micro-batch's loss multiplied by
 * mixprec_engine_get_loss_scale().
 *
 * On one process the engine folds the gradients into its accumulation
 * buffers (in each parameter's accumulation dtype) and zeroes the
 * gradient buffers, or, with one micro-step per step, reads them in place
 * at mixprec_engine_step(). Across ranks it reduce-scatters every unit not
 * yet on its way, so each rank receives the sum over the ranks of its
 * slice of the gradients, accumulated in FP32 (or the accumulation dtype)
 * in rank order. With overlap_comm the reductions run on while the caller
 * computes the next micro-batch. Call it gradient_accumulation_steps
 * times, then mixprec_engine_step().
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
  if (!begin_intake (self, error))
    return FALSE;
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      if (g->intake.has_stale)
        zero_stale (self, g);
      if (self->world > 1)
        {
          for (guint k = 0; k < g->units->len; k++)
            {
              Unit *u = &g_array_index (g->units, Unit, k);

              if (!u->intake.started && !reduce_unit (self, g, u, error))
                return FALSE;
            }
        }
      else if (g->accum != NULL)
        {
          if (!fold_group (self, g, error))
            return FALSE;
        }
    }
  reset_units (self);
  self->micro_steps++;
  /* hpZ: the next micro-step's forward pass gathers over the world. */
  _mixprec_engine_hpz_forget (self);
  if (!self->overlap)
    return _mixprec_engine_wait_pending (self, error);
  return TRUE;
}

/* Forgets @g's stale gradients: every buffer the step is about to read
 * (or has zeroed) holds this micro-step's gradient or zero. */
static void
forget_stale (Group *g)
{
  for (guint i = 0; g->intake.has_stale && i < g->params->len; i++)
    _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->grad_stale = FALSE;
  g->intake.has_stale = FALSE;
}

static void
zero_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  GError *error = NULL;

  if (!_mixprec_device_zero (g->device, _mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset),
                             n * mixprec_dtype_get_size (g->dtypes.grad), &error))
    keep_device_error (g, error);
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
       * gradients read in place (unless the step zeroed them as it went),
       * reduced in place or used as scratch by the step must be zeroed for
       * backward passes that add. */
      if (_mixprec_engine_grad_private (self, g))
        {
          /* Nobody else sees these buffers: what was handed over stays
           * there, stale, for the next intake to overwrite. */
          for (guint i = 0; i < g->params->len; i++)
            {
              _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

              if (s->handed != 0 && mixprec_param_get_numel (g_ptr_array_index (g->params, i)) > 0)
                {
                  s->grad_stale = TRUE;
                  g->intake.has_stale = TRUE;
                }
            }
        }
      else if (self->world == 1 && g->accum == NULL && !g->intake.grad_zeroed)
        _mixprec_device_dispatch (g->device, g->numel, _MIXPREC_ENGINE_MIN_CHUNK, 64, zero_range, g);
      else if (self->world > 1 && g->grad != NULL &&
               (self->stage == 0 || g->accum_mode == ACCUM_IN_GRAD))
        copy_into (g, g->grad, g->dtypes.grad, NULL, g->dtypes.grad, g->padded);
      if (!_mixprec_engine_grad_private (self, g))
        forget_stale (g);
      g->intake.grad_zeroed = FALSE;
      _mixprec_engine_norm_set_ready (g, FALSE);
      for (guint k = 0; k < g->units->len; k++)
        g_array_index (g->units, Unit, k).intake.summed = FALSE;
      for (guint i = 0; i < g->intake.slots->len; i++)
        g_array_index (g->intake.slots, Slot, i).state = SLOT_FREE;
      /* Nothing to report it to: the next pass meets a broken device. */
      g_clear_error (&g->intake.device_error);
    }
  for (guint i = 0; i < self->params->len; i++)
    _mixprec_param_get_storage (g_ptr_array_index (self->params, i))->handed = 0;
  reset_units (self);
  self->micro_steps = 0;
  self->intake_step = 0;
}

gboolean
_mixprec_engine_ensure_grad_of (gpointer      engine,
                                MixprecParam *param,
                                GError      **error)
{
  MixprecEngine *self = MIXPREC_ENGINE (engine);
  Group *g = _mixprec_engine_group_of (self, param);
  GError *local = NULL;

  /* With overlap_comm the previous micro-step's reductions may still
   * send straight from the gradient buffer, and zero it once done: the
   * caller about to write this micro-step's gradient waits for them
   * first, or it would send a mix and lose what it wrote. */
  for (guint k = 0; g->intake.pending != NULL && k < g->intake.pending->len;)
    {
      if (g_array_index (g->intake.pending, Pending, k).slot >= 0)
        {
          k++;
          continue;
        }
      finish_pending (self, g, k, &local);
    }
  if (local != NULL)
    return _mixprec_engine_comm_failed (error, local, "reducing gradients");
  return _mixprec_engine_ensure_grad (self, g, error) &&
         _mixprec_engine_expose_grad (self, param, error);
}
