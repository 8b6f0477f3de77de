/* mixprec-engine-step.c — the optimizer step at the accumulation boundary:
 * the ranks' agreement on the sum of squares, which is also the overflow
 * check (mixprec-engine-agree.c), the scaler, skip or clip, the fused
 * optimizer over this rank's part (offloaded: mixprec-engine-offload.c),
 * then the working copies made whole again (mixprec-engine-whole.c). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-comm-private.h"
#include "mixprec-engine-autoprec-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- optimizer */

typedef struct {
  MixprecEngine *engine;
  Group *group;
  _MixprecDevice *device;    /* where the pass's buffers are */
  MixprecOptimizerStepV1 args;
  MixprecDType grad_dtype;
  const OptPiece *pieces;
  guint n_pieces;
  guint64 *starts;           /* n_pieces + 1 prefix sums of n */
  guint64 block;             /* every call starts a block of this many (1: any element) */
  MixprecPluginMasterFormat master_format;
  gboolean zero_grad;        /* zero each gradient once the optimizer read it */
  GMutex lock;
  GError *error;
  _MixprecFp8Fuse *fp8;      /* an fp8 group's cast, fused into the pass */
  gpointer numerics;         /* a measured step's per-tensor numerics, fused
                                into the pass (mixprec-engine-numerics.c) */
  gboolean in_pass;          /* ... measured by the optimizer itself */
} StepJob;

/* @off is a multiple of the block size: calls start at block boundaries
 * (step_chunk() and the tiles below cut only there). */
static void
step_run_range (StepJob *job, const OptPiece *p, guint64 off, guint64 n)
{
  MixprecOptimizerStepV3 args = { 0 };
  Group *g = job->group;
  const _MixprecRepresentation *repr = &job->engine->repr;
  gpointer states[G_N_ELEMENTS (repr->slots)];
  gfloat *scales[G_N_ELEMENTS (repr->slots)];
  guint n_slots = mixprec_feature_get_n_state_slots (job->engine->optimizer);
  guint64 scale_at = repr->block_size > 0 ? p->scale_at + off / repr->block_size : 0;
  GError *error = NULL;

  for (guint s = 0; s < n_slots && s < G_N_ELEMENTS (states); s++)
    {
      MixprecPluginStateFormat f = repr->slots[s];

      if (_mixprec_engine_format_is_scaled (f))
        {
          states[s] = (guint8 *) g->states[s] + _mixprec_engine_format_bytes (f, scale_at * repr->block_size);
          scales[s] = g->state_scales[s] + scale_at;
        }
      else
        {
          states[s] = _mixprec_engine_at (p->states != NULL ? p->states[s] : g->states[s],
                                          _mixprec_engine_format_dtype (f), p->state_at + off);
          scales[s] = NULL;
        }
    }
  args.v2.base = job->args;
  args.v2.base.first_index = p->first_index + off;
  args.v2.base.device_stream = _mixprec_device_get_stream (job->device);
  /* The state follows the weights' rounding, from a stream of its own. */
  args.v2.state_rounding = job->args.rounding;
  args.v2.state_seed = job->args.seed ^ G_GUINT64_CONSTANT (0x5851F42D4C957F2D);
  args.state_formats = repr->slots;
  args.state_scales = scales;
  args.block_size = repr->block_size;
  args.master_format = job->master_format;
  args.master_extra = g->master_extra == NULL ? NULL
                      : (guint16 *) (p->states != NULL ? p->extra : g->master_extra) + p->state_at + off;
  if (job->in_pass)
    _mixprec_engine_numerics_in_pass (job->numerics, job->engine, g, p->first_index + off, n, &args);
  else if (job->numerics != NULL)
    _mixprec_engine_numerics_fused_before (job->numerics, g, p->master != NULL ? p->master + off : NULL, n);
  if (!_mixprec_feature_optimizer_step_v3 (job->engine->optimizer, &args, g->hparams,
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
  else
    {
      if (job->fp8 != NULL)
        /* The FP8 copy of the values just written, while they are in cache. */
        _mixprec_engine_fp8_fused (job->fp8, p->first_index + off, p->master + off, n);
      if (job->in_pass)
        _mixprec_engine_numerics_in_pass_after (job->numerics, job->engine, g, &args,
                                                _mixprec_engine_at ((gpointer) p->grad, job->grad_dtype, off),
                                                job->grad_dtype, p->master != NULL ? p->master + off : NULL);
      else if (job->numerics != NULL)
        /* The gradients read and the values written, still in cache. */
        _mixprec_engine_numerics_fused_after (job->numerics, job->engine, g, p->first_index + off,
                                              _mixprec_engine_at ((gpointer) p->grad, job->grad_dtype, off),
                                              job->grad_dtype, p->master != NULL ? p->master + off : NULL,
                                              p->working != NULL ? _mixprec_engine_at (p->working, g->dtypes.working, off)
                                                                 : NULL,
                                              n);
    }
}

/* Elements the optimizer updates before their gradients are zeroed: few
 * enough that the gradients are still in the cache, so zeroing them costs
 * only their write-back, not a pass of its own. */
#define ZERO_TILE ((guint64) 1 << 14)

static void
step_run (StepJob *job, const OptPiece *p, guint64 off, guint64 n)
{
  gsize size = mixprec_dtype_get_size (job->grad_dtype);

  if (!job->zero_grad && (job->fp8 != NULL || (job->numerics != NULL && !job->in_pass)))
    {
      /* Tiles small enough that the FP8 cast and the numerics find them
       * in cache. */
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
  /* A chunk takes the blocks of each piece that start inside it, so
   * every call starts a block wherever the pool cuts. */
  for (guint i = lo; i < job->n_pieces && job->starts[i] < end; i++)
    {
      guint64 n = job->pieces[i].n;
      guint64 a = begin > job->starts[i] ? begin - job->starts[i] : 0;
      guint64 b = end - job->starts[i];

      a = (a + job->block - 1) / job->block * job->block;
      b = MIN ((b + job->block - 1) / job->block * job->block, n);
      if (a < b)
        step_run (job, &job->pieces[i], a, b - a);
    }
  if (job->numerics != NULL)
    _mixprec_engine_numerics_chunk_end (job->numerics);
}

/* Offload: the pass over one bucket of host buffers, which
 * mixprec-engine-offload.c brought down. */
typedef struct {
  const MixprecOptimizerStepV1 *args;
  MixprecDType grad_dtype;
} HostStep;

static gboolean run_pieces (MixprecEngine                *self,
                            Group                        *g,
                            const MixprecOptimizerStepV1 *args,
                            MixprecDType                  grad_dtype,
                            const OptPiece               *pieces,
                            guint                         n_pieces,
                            gboolean                      zero_grad,
                            gboolean                      on_host,
                            GError                      **error);

static gboolean
step_on_host (MixprecEngine  *self,
              Group          *g,
              const OptPiece *piece,
              gpointer        data,
              GError        **error)
{
  HostStep *host = data;

  return run_pieces (self, g, host->args, host->grad_dtype, piece, 1, FALSE, TRUE, error);
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
  StepJob job = { self, g, on_host ? NULL : g->device, *args, grad_dtype, pieces, n_pieces, NULL,
                  MAX (self->repr.block_size, 1), _mixprec_engine_master_format (&self->repr, &g->dtypes),
                  zero_grad, { 0 }, NULL, NULL, NULL };
  g_autofree guint64 *starts = NULL;
  guint64 align;

  /* FP8 groups in host memory: the pass casts as it goes (NULL on a
   * device, where the cast follows the pass). */
  job.fp8 = g->fp8.fuse;

  if (self->offload && !on_host)
    {
      HostStep host = { args, grad_dtype };

      return _mixprec_engine_offload_run (self, g, grad_dtype, pieces, n_pieces, step_on_host, &host, error);
    }
  /* A measured step: the pieces start at block boundaries of their units
   * (see apply_optimizer()), and the pass cuts only at others, so that
   * each block's piece of a parameter is measured in one call. */
  job.numerics = on_host ? NULL : _mixprec_engine_numerics_fuse (self, g);
  job.in_pass = job.numerics != NULL && _mixprec_engine_numerics_by_optimizer (job.numerics, self, job.master_format);
  align = job.numerics != NULL ? _MIXPREC_SUMSQ_BLOCK : 1;
  starts = g_new (guint64, n_pieces + 1);

  starts[0] = 0;
  for (guint i = 0; i < n_pieces; i++)
    starts[i + 1] = (starts[i] + pieces[i].n + align - 1) / align * align;
  align = MAX (align, 64);
  job.starts = starts;
  g_mutex_init (&job.lock);
  /* Element-wise and told each range's first index: however the device
   * cuts the range, the same bits. */
  _mixprec_device_dispatch (job.device, starts[n_pieces], _MIXPREC_ENGINE_MIN_CHUNK, align, step_chunk, &job);
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
  p->scale_at = self->repr.block_size > 0 ? _mixprec_engine_scale_at (self, g, u, e) : 0;
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

/* A measured step on one process (mixprec.numerics): @pieces cut where
 * the blocks of their units start, so that the pass measures each block's
 * piece of a parameter in one call. */
static void
cut_for_numerics (Group *g, GArray *pieces, MixprecDType grad_dtype)
{
  g_autoptr(GArray) cut = g_array_new (FALSE, TRUE, sizeof (OptPiece));

  for (guint i = 0; i < pieces->len; i++)
    {
      const OptPiece *p = &g_array_index (pieces, OptPiece, i);

      for (guint64 a = 0; a < p->n;)
        {
          guint64 b = MIN (_mixprec_engine_numerics_cut (g, p->first_index + a) - p->first_index, p->n);
          OptPiece q = *p;

          q.first_index += a;
          q.n = b - a;
          q.grad = _mixprec_engine_at ((gpointer) p->grad, grad_dtype, a);
          q.master = p->master != NULL ? p->master + a : NULL;
          q.working = p->working != NULL ? _mixprec_engine_at (p->working, g->dtypes.working, a) : NULL;
          q.state_at += a;
          g_array_append_val (cut, q);
          a = b;
        }
    }
  g_array_set_size (pieces, 0);
  g_array_append_vals (pieces, cut->data, cut->len);
}

/* One process with scaled state: calls start at a unit's block
 * boundaries. Engine buffers give one piece per unit. A parameter in
 * memory of its own may start inside a block: the blocks of a unit that
 * lie in one parameter are a piece on its buffers, and each block that
 * spans parameters is staged: its elements copied into small contiguous
 * buffers (working copy, gradient, master or remainder, unscaled state),
 * stepped there in one call, and copied back. A unit's last block of odd
 * length is staged too when a slot is INT4, one zero element added: INT4
 * calls cover whole bytes, and a zero element with a zero gradient
 * changes neither the block's scale nor the other elements, as the
 * padding of ZeRO's units does not. */
typedef struct {
  guint64 begin, end;        /* the block in the group's element space */
} Straddle;

typedef struct {
  GArray *straddles;         /* Straddle */
  guint64 stride;            /* elements per staged block (block size, even) */
  gpointer working;          /* working dtype (FP32 parameters: their values) */
  gpointer grad;             /* the step's gradient dtype */
  gfloat *master;            /* FP32 masters, when the group has them */
  guint16 *extra;            /* remainders or compensations */
  gpointer states[16];       /* the unscaled slots (NULL for scaled ones) */
  MixprecDType grad_dtype;
} Staged;

/* The working copy and the gradient are staged where they live (the
 * device), the masters and state where those live (the host when
 * offloaded). */
static void
staged_clear (MixprecEngine *self, Group *g, Staged *st)
{
  g_clear_pointer (&st->straddles, g_array_unref);
  _mixprec_device_free (g->device, st->working);
  _mixprec_device_free (g->device, st->grad);
  _mixprec_device_free (g->state_device, st->master);
  _mixprec_device_free (g->state_device, st->extra);
  st->working = st->grad = NULL;
  st->master = NULL;
  st->extra = NULL;
  for (guint k = 0; k < G_N_ELEMENTS (st->states); k++)
    {
      _mixprec_device_free (g->state_device, st->states[k]);
      st->states[k] = NULL;
    }
}

/* The piece of @seg's buffers that starts at @o of the group's element
 * space, in unit @u. */
static OptPiece
segment_piece (MixprecEngine *self, Group *g, const Unit *u, const Segment *seg, guint64 o, guint64 n)
{
  OptPiece p = { 0 };

  p.first_index = u->index + (o - u->flat);
  p.n = n;
  p.grad = g->accum != NULL ? _mixprec_engine_at (g->accum, g->dtypes.accum, o)
                            : _mixprec_engine_at (seg->grad, g->dtypes.grad, o - seg->offset);
  p.master = seg->master != NULL ? seg->master + (o - seg->master_base) : NULL;
  if (seg->working != (gpointer) seg->master)
    p.working = _mixprec_engine_at (seg->working, g->dtypes.working, o - seg->working_base);
  p.state_at = o;
  p.scale_at = u->repr.scales + (o - u->flat) / self->repr.block_size;
  return p;
}

/* Copies one contiguous run between a buffer and a staged one, both in
 * @device's memory. */
static gboolean
staged_run (_MixprecDevice *device, gpointer buffer, gpointer staged, gsize size, guint64 n,
            gboolean back, GError **error)
{
  return _mixprec_device_copy (device, back ? buffer : staged, back ? staged : buffer, n * size,
                               MIXPREC_PLUGIN_COPY_DEVICE_TO_DEVICE, error);
}

/* Copies the elements [begin, end) of staged block @j between the group's
 * buffers and the staging buffers (@back: into the group's; the
 * gradients, which are not copied back, then zeroed when @zero_grad, only
 * ever on the host). */
static gboolean
staged_copy (MixprecEngine *self, Group *g, Staged *st, guint j, gboolean back, gboolean zero_grad,
             GError **error)
{
  const Straddle *sd = &g_array_index (st->straddles, Straddle, j);
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  guint64 n = sd->end - sd->begin, at = (guint64) j * st->stride;
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);

  for (guint i = 0; i < g->segments->len; i++)
    {
      const Segment *seg = &g_array_index (g->segments, Segment, i);
      guint64 a = MAX (sd->begin, seg->offset), b = MIN (sd->end, seg->offset + seg->numel);

      if (a >= b)
        continue;
      if (!staged_run (g->device, _mixprec_engine_at (seg->working, g->dtypes.working, a - seg->working_base),
                       _mixprec_engine_at (st->working, g->dtypes.working, at + (a - sd->begin)), wsize, b - a,
                       back, error))
        return FALSE;
      if (g->accum == NULL)
        {
          gpointer mine = _mixprec_engine_at (seg->grad, g->dtypes.grad, a - seg->offset);

          if (!back &&
              !staged_run (g->device, mine, _mixprec_engine_at (st->grad, g->dtypes.grad, at + (a - sd->begin)),
                           mixprec_dtype_get_size (g->dtypes.grad), b - a, FALSE, error))
            return FALSE;
          if (back && zero_grad)
            memset (mine, 0, (b - a) * mixprec_dtype_get_size (g->dtypes.grad));
        }
    }
  if (g->accum != NULL && !back &&
      !staged_run (g->device, _mixprec_engine_at (g->accum, g->dtypes.accum, sd->begin),
                   _mixprec_engine_at (st->grad, g->dtypes.accum, at), mixprec_dtype_get_size (g->dtypes.accum),
                   n, FALSE, error))
    return FALSE;
  if (st->master != NULL &&
      !staged_run (g->state_device, g->master + sd->begin, st->master + at, sizeof (gfloat), n, back, error))
    return FALSE;
  if (st->extra != NULL &&
      !staged_run (g->state_device, (guint16 *) g->master_extra + sd->begin, st->extra + at,
                   sizeof (guint16), n, back, error))
    return FALSE;
  for (guint k = 0; k < n_slots; k++)
    if (st->states[k] != NULL)
      {
        MixprecDType d = _mixprec_engine_format_dtype (self->repr.slots[k]);

        if (!staged_run (g->state_device, _mixprec_engine_at (g->states[k], d, sd->begin),
                         _mixprec_engine_at (st->states[k], d, at), mixprec_dtype_get_size (d), n, back, error))
          return FALSE;
      }
  return TRUE;
}

static void
note_staged (GArray *straddles, guint64 begin, guint64 end)
{
  Straddle sd = { begin, end };

  if (straddles->len > 0 && g_array_index (straddles, Straddle, straddles->len - 1).begin == begin)
    return;
  g_array_append_val (straddles, sd);
}

static GArray *
pieces_one_process_blocks (MixprecEngine *self, Group *g, Staged *st, GError **error)
{
  GArray *pieces = g_array_new (FALSE, TRUE, sizeof (OptPiece));
  guint64 bs = self->repr.block_size;
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  gboolean int4 = FALSE;
  guint next = 0;

  for (guint k = 0; k < n_slots; k++)
    int4 = int4 || self->repr.slots[k] == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC;
  st->straddles = g_array_new (FALSE, FALSE, sizeof (Straddle));
  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      /* Where the blocks stepped in place end: an odd last block of an
       * INT4 unit is staged. */
      guint64 tail = int4 && u->numel % 2 != 0 ? (u->numel - 1) / bs * bs : u->numel;

      if (u->numel == 0)
        continue;
      /* Segments are in element order; find the first one in @u. */
      while (next < g->segments->len &&
             g_array_index (g->segments, Segment, next).offset + g_array_index (g->segments, Segment, next).numel <= u->flat)
        next++;
      for (guint i = next; i < g->segments->len; i++)
        {
          const Segment *seg = &g_array_index (g->segments, Segment, i);
          guint64 s0, s1, lo, hi;

          if (seg->offset >= u->flat + u->numel)
            break;
          s0 = MAX (seg->offset, u->flat) - u->flat;
          s1 = MIN (seg->offset + seg->numel, u->flat + u->numel) - u->flat;
          if (s0 >= s1)
            continue;
          lo = (s0 + bs - 1) / bs * bs;
          hi = MIN (s1 == u->numel ? s1 : s1 / bs * bs, tail);
          if (lo < hi)
            {
              OptPiece p = segment_piece (self, g, u, seg, u->flat + lo, hi - lo);

              g_array_append_val (pieces, p);
            }
          /* A block this segment starts inside of, that began before it. */
          if (s0 % bs != 0)
            note_staged (st->straddles, u->flat + s0 / bs * bs, u->flat + MIN (s0 / bs * bs + bs, u->numel));
        }
      if (tail < u->numel)
        note_staged (st->straddles, u->flat + tail, u->flat + u->numel);
    }
  if (st->straddles->len == 0)
    return pieces;

  /* Small buffers for the staged blocks, one block each; zeroed, so an
   * INT4 block's added element is a zero. */
  st->stride = bs;
  st->grad_dtype = g->accum != NULL ? g->dtypes.accum : g->dtypes.grad;
  if ((st->working = _mixprec_device_alloc (g->device, st->straddles->len * bs *
                                            mixprec_dtype_get_size (g->dtypes.working),
                                            "staged blocks", error)) == NULL ||
      (st->grad = _mixprec_device_alloc (g->device, st->straddles->len * bs *
                                         mixprec_dtype_get_size (st->grad_dtype),
                                         "staged blocks", error)) == NULL ||
      (g->master != NULL &&
       (st->master = _mixprec_device_alloc (g->state_device, st->straddles->len * bs * sizeof (gfloat),
                                            "staged blocks", error)) == NULL) ||
      (g->master_extra != NULL &&
       (st->extra = _mixprec_device_alloc (g->state_device, st->straddles->len * bs * sizeof (guint16),
                                           "staged blocks", error)) == NULL))
    goto fail;
  for (guint k = 0; k < n_slots; k++)
    if (!_mixprec_engine_format_is_scaled (self->repr.slots[k]) &&
        (st->states[k] = _mixprec_device_alloc (g->state_device, st->straddles->len * bs *
                                                mixprec_dtype_get_size (_mixprec_engine_format_dtype (self->repr.slots[k])),
                                                "staged blocks", error)) == NULL)
      goto fail;
  for (guint j = 0; j < st->straddles->len; j++)
    {
      const Straddle *sd = &g_array_index (st->straddles, Straddle, j);
      guint64 at = (guint64) j * bs;
      const Unit *u = &g_array_index (g->units, Unit, 0);
      OptPiece p = { 0 };

      /* The unit holding the block: the last starting at or before it. */
      for (guint k = 0; k < g->units->len; k++)
        if (g_array_index (g->units, Unit, k).flat <= sd->begin)
          u = &g_array_index (g->units, Unit, k);
      if (!staged_copy (self, g, st, j, FALSE, FALSE, error))
        goto fail;
      p.first_index = u->index + (sd->begin - u->flat);
      p.n = sd->end - sd->begin;
      if (int4)
        p.n += p.n % 2;
      p.grad = _mixprec_engine_at (st->grad, st->grad_dtype, at);
      p.scale_at = u->repr.scales + (sd->begin - u->flat) / bs;
      p.state_at = at;       /* into the staged unscaled slots and extras */
      p.states = st->states;
      p.extra = st->extra;
      if (st->master != NULL)
        {
          p.master = st->master + at;
          p.working = _mixprec_engine_at (st->working, g->dtypes.working, at);
        }
      else if (g->dtypes.working == MIXPREC_DTYPE_FLOAT32)
        p.master = (gfloat *) st->working + at;   /* FP32 parameters are their own masters */
      else
        p.working = _mixprec_engine_at (st->working, g->dtypes.working, at);
      g_array_append_val (pieces, p);
    }
  return pieces;

fail:
  g_array_unref (pieces);
  return NULL;
}

/* After the pass: the staged blocks back in the group's buffers. */
static gboolean
staged_finish (MixprecEngine *self, Group *g, Staged *st, gboolean zero_grad, GError **error)
{
  for (guint j = 0; st->straddles != NULL && j < st->straddles->len; j++)
    if (!staged_copy (self, g, st, j, TRUE, zero_grad, error))
      return FALSE;
  return TRUE;
}

/* Across ranks an INT4 call covers whole bytes: an odd count of a unit's
 * real elements takes the padding element after them too (zero, with a
 * zero gradient, so it stays zero and changes no scale). */
static guint64
even_for_int4 (MixprecEngine *self, guint64 n)
{
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);

  for (guint k = 0; k < n_slots; k++)
    if (self->repr.slots[k] == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC)
      return n + n % 2;
  return n;
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

      p.n = even_for_int4 (self, whole ? u->numel : _mixprec_engine_real_in_slice (self, u));
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
  guint64 block = MAX (self->repr.block_size, 1);
  gpointer scratch = g->grad;
  GError *local = NULL;

  if (g->padded == 0)
    return TRUE;
  /* Windows start at block boundaries of every rank's slice. */
  room = room / block * block;
  if (room == 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "mixprec.optimizer_states.block_size: %" G_GUINT64_FORMAT " elements do not fit "
                   "the gradient window of this group (%" G_GUINT64_FORMAT " elements per rank); "
                   "use a smaller block_size", block,
                   g->padded * mixprec_dtype_get_size (g->dtypes.grad) / asize / self->world);
      return FALSE;
    }
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
          _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_GRADIENTS);
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
              p.n = even_for_int4 (self, MIN (w, u->numel - e));
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
      Staged staged = { 0 };
      gboolean zero_grad, ok;

      args.step = self->applied_steps;
      args.lr = lr;
      args.grad_factor = factor;
      args.grad_dtype = (MixprecPluginDType) grad_dtype;
      args.working_dtype = (MixprecPluginDType) g->dtypes.working;
      args.rounding = self->stochastic ? MIXPREC_PLUGIN_ROUNDING_STOCHASTIC
                                       : MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
      args.seed = _mixprec_engine_step_seed (self, g->index);

      if (self->world == 1 && self->repr.block_size > 0)
        {
          pieces = pieces_one_process_blocks (self, g, &staged, error);
          if (pieces == NULL)
            {
              staged_clear (self, g, &staged);
              return FALSE;
            }
        }
      else if (self->world == 1)
        {
          pieces = pieces_one_process (self, g);
          if (_mixprec_engine_numerics_fuse (self, g) != NULL)
            cut_for_numerics (g, pieces, grad_dtype);
        }
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
      ok = run_pieces (self, g, &args, grad_dtype, (const OptPiece *) pieces->data, pieces->len,
                       zero_grad, FALSE, error) &&
           staged_finish (self, g, &staged, zero_grad, error);
      staged_clear (self, g, &staged);
      _mixprec_engine_fp8_fuse_end (self, g);
      if (!ok)
        return FALSE;
      _mixprec_engine_note_grad_zeroed (g, zero_grad);
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

  if (!mixprec_engine_prepare (self, error) || !_mixprec_engine_autoprec_check_step (self, error))
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
  /* mixprec.numerics: measured in the optimizer's pass, or here for what
   * it does not read (the gradients of a skipped step). */
  _mixprec_engine_numerics_begin (self, divisor, overflow && mixprec_config_get_check_grad_overflow (self->config));

  if (!mixprec_loss_scaler_update (self->scaler, overflow, &local_error))
    {
      _mixprec_engine_clear_gradients (self);
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_SCALER,
                   "step %" G_GUINT64_FORMAT ": %s", self->steps + 1, local_error->message);
      return NULL;
    }

  _mixprec_engine_zeropp_after_scaler (self, overflow,
                                       !(overflow && mixprec_config_get_check_grad_overflow (self->config)),
                                       scale, mixprec_loss_scaler_get_scale (self->scaler));
  self->steps++;
  result->loss_scale = scale;
  result->grad_norm = norm;
  result->lr = mixprec_lr_schedule_get_lr (self->schedule);
  mixprec_engine_release_all (self);
  /* The weights change: the next gathers go over the world. */
  _mixprec_engine_hpz_forget (self);

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
          !_mixprec_engine_numerics_shadow (self, result->lr, (gfloat) (1.0 / (divisor * coef)), error) ||
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
      _mixprec_engine_numerics_after_update (self);
    }
  _mixprec_engine_clear_gradients (self);

  result->step = self->steps;
  result->applied_steps = self->applied_steps;
  result->skipped_steps = self->skipped_steps;
  result->next_loss_scale = mixprec_loss_scaler_get_scale (self->scaler);
  _mixprec_engine_report_step (self, result, overflow);
  if (!_mixprec_engine_numerics_finish (self, result->step, result->applied, error))
    return NULL;
  /* mixprec.auto_precision: the dtypes of the next step, from this
   * step's numerics. */
  if (!_mixprec_engine_autoprec_step (self, error))
    return NULL;
  return g_steal_pointer (&result);
}
