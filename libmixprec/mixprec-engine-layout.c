/* mixprec-engine-layout.c — how an engine lays out its parameters: groups,
 * units and their ZeRO slices, buffers, and the memory arithmetic the
 * report and the plan share. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "numeric/numeric-quant.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

const gchar * const _mixprec_engine_buffer_names[N_BUFS] = {
  [BUF_WORKING] = "working copies",
  [BUF_PERSISTENT] = "persistent working copies",
  [BUF_GATHERED] = "gathered working copies",
  [BUF_GRADIENTS] = "gradients",
  [BUF_ACCUM] = "gradient accumulation",
  [BUF_MASTERS] = "FP32 master weights",
  [BUF_REMAINDERS] = "master remainders",
  [BUF_KAHAN] = "Kahan compensation",
  [BUF_STATE] = "optimizer state",
  [BUF_STATE_SCALES] = "optimizer state scales",
  [BUF_STAGING] = "gradient staging",
  [BUF_NORM] = "gradient norm blocks",
  [BUF_HOST_MASTERS] = "FP32 master weights (host)",
  [BUF_HOST_STATE] = "optimizer state (host)",
  [BUF_HOST_STAGING] = "offload staging (host)",
  [BUF_PINNED_STAGING] = "offload staging, pinned (host)",
  [BUF_HOST_WORKING] = "working copies (host)",
  [BUF_PINNED_WORKING] = "working copies, pinned (host)",
  [BUF_FP8] = "FP8 working copies",
  [BUF_FP8_SCALES] = "FP8 block scales",
  [BUF_FP8_GATHERED] = "gathered FP8 working copies",
  [BUF_HPZ] = "hpZ secondary working copies",
};
G_STATIC_ASSERT (N_BUFS <= (1 << _MIXPREC_BUF_KIND_BITS));

/* ---------------------------------------------------------------- allocation */

gpointer
_mixprec_engine_alloc (MixprecEngine  *self,
                       _MixprecDevice *device,
                       guint64         numel,
                       gsize           elem_size,
                       BufferKind      kind,
                       GError        **error)
{
  const gchar *what = _mixprec_engine_buffer_names[kind];
  gsize bytes;
  gpointer p;

  /* Never NULL on success: an empty buffer still has an address. Zeroed:
   * padding must hold zeros, and fresh optimizer state is zero. */
  if (numel > G_MAXSIZE / MAX (elem_size, 1))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "%s: %" G_GUINT64_FORMAT " elements do not fit in memory", what, numel);
      return NULL;
    }
  bytes = (gsize) numel * elem_size;
  p = kind == BUF_PINNED_STAGING || kind == BUF_PINNED_WORKING
      ? _mixprec_device_host_alloc (self->device, MAX (bytes, 1), what, error)
      : _mixprec_device_alloc (device, MAX (bytes, 1), what, error);
  if (p == NULL)
    return NULL;
  g_hash_table_insert (self->allocations, p,
                       GSIZE_TO_POINTER (((gsize) bytes << _MIXPREC_BUF_KIND_BITS) | (gsize) kind));
  self->buf_bytes[kind] += bytes;
  self->buf_peak[kind] = MAX (self->buf_peak[kind], self->buf_bytes[kind]);
  return p;
}

void
_mixprec_engine_free (MixprecEngine  *self,
                      _MixprecDevice *device,
                      gpointer        buffer)
{
  gpointer value;

  if (buffer == NULL)
    return;
  if (g_hash_table_steal_extended (self->allocations, buffer, NULL, &value))
    {
      gsize packed = GPOINTER_TO_SIZE (value);

      self->buf_bytes[packed & _MIXPREC_BUF_KIND_MASK] -= packed >> _MIXPREC_BUF_KIND_BITS;
      /* Pinned memory goes back to the device that gave it. */
      if ((packed & _MIXPREC_BUF_KIND_MASK) == BUF_PINNED_STAGING ||
          (packed & _MIXPREC_BUF_KIND_MASK) == BUF_PINNED_WORKING)
        {
          _mixprec_device_host_free (self->device, buffer);
          return;
        }
    }
  _mixprec_device_free (device, buffer);
}

/* ---------------------------------------------------------------- arithmetic */

GArray *
_mixprec_engine_make_units (const guint64 *sizes,
                            guint          n_sizes,
                            guint          world,
                            guint          stage,
                            guint64        persistence_threshold)
{
  return _mixprec_engine_make_units_full (sizes, n_sizes, world, stage, persistence_threshold, FALSE);
}

GArray *
_mixprec_engine_make_units_full (const guint64 *sizes,
                                 guint          n_sizes,
                                 guint          world,
                                 guint          stage,
                                 guint64        persistence_threshold,
                                 gboolean       alone)
{
  GArray *units = g_array_new (FALSE, TRUE, sizeof (Unit));
  guint64 align = (guint64) world * _MIXPREC_SUMSQ_BLOCK;
  guint64 index = 0, flat = 0, local = 0, persist = 0, block = 0;
  Unit *u = NULL;

  for (guint i = 0; i < n_sizes; i++)
    {
      gboolean small = sizes[i] < persistence_threshold;

      /* Packed with the unit before while the class matches and the unit
       * stays within the unit size; a larger parameter is a unit alone. */
      if (u == NULL || small != u->persistent || alone ||
          u->numel + sizes[i] > _MIXPREC_UNIT_ELEMENTS)
        {
          Unit fresh = { 0 };

          fresh.first_param = i;
          fresh.index = index;
          fresh.persistent = small;
          g_array_append_val (units, fresh);
          u = &g_array_index (units, Unit, units->len - 1);
        }
      u->n_params++;
      u->numel += sizes[i];
      index += sizes[i];
    }
  for (guint k = 0; k < units->len; k++)
    {
      u = &g_array_index (units, Unit, k);
      u->padded = world > 1 ? (u->numel + align - 1) / align * align : u->numel;
      u->flat = flat;
      u->local = local;
      u->first_block = block;
      flat += u->padded;
      local += u->padded / world;
      block += (u->padded / world + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      /* The class shapes units at every stage (so units do not depend on
       * the stage); only ZeRO-3 keeps small parameters whole. */
      if (stage < 3 || world == 1)
        u->persistent = FALSE;
      if (u->persistent)
        {
          u->persist_at = persist;
          persist += u->padded;
        }
    }
  return units;
}

/* The dtype gradients travel in: where they land in an FP32 accumulator
 * and the communication dtype is FP32, the gradient dtype itself (the
 * backend widens each value exactly before adding, so the sums are those
 * of FP32 gradients, for half the bytes); else the communication dtype
 * into an FP32 accumulator, or the accumulation dtype itself (checked to
 * equal the communication dtype). */
MixprecDType
_mixprec_engine_wire_dtype (const _MixprecParamDTypes *dt)
{
  if (dt->accum != MIXPREC_DTYPE_FLOAT32)
    return dt->accum;
  if (dt->comm == MIXPREC_DTYPE_FLOAT32)
    return dt->grad;
  return dt->comm;
}

/* Elements of communication staging a group may hold: DeepSpeed's
 * reduce_bucket_size plus allgather_bucket_size. Working copies are
 * all-gathered in place, so the all-gather's share goes to the
 * reduction's two slots: fewer, larger reduce-scatters, which is what
 * keeps per-parameter intake as fast as whole gradients. */
guint64
_mixprec_engine_staging_budget (MixprecConfig *config)
{
  guint64 reduce = mixprec_config_get_reduce_bucket_size (config);
  guint64 gather = mixprec_config_get_allgather_bucket_size (config);

  return reduce > G_MAXUINT64 - gather ? G_MAXUINT64 : reduce + gather;
}

void
_mixprec_engine_group_shape (const _MixprecParamDTypes *dt,
                             MixprecDType               wire,
                             GArray                    *units,
                             guint                      world,
                             guint                      stage,
                             guint                      gas,
                             gboolean                   external,
                             guint64                    staging_budget,
                             GroupShape                *shape)
{
  guint64 max_packed = 0, max_unit = 0;

  memset (shape, 0, sizeof *shape);
  for (guint k = 0; k < units->len; k++)
    {
      const Unit *u = &g_array_index (units, Unit, k);

      shape->padded += u->padded;
      shape->local_n += u->padded / world;
      shape->norm_blocks += (u->padded / world + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      if (u->persistent)
        shape->persist_n += u->padded;
      if (u->n_params > 1)
        max_packed = MAX (max_packed, u->padded);
      max_unit = MAX (max_unit, u->padded);
    }
  /* Block sums of this rank's slices, then of every rank's. */
  if (world > 1)
    shape->norm_blocks *= 1 + world;

  if (!external)
    {
      shape->working = stage >= 3 ? shape->local_n : shape->padded;
      shape->persistent = stage >= 3 ? shape->persist_n : 0;
      /* Under ZeRO-2/3 gradients arrive one parameter at a time; a whole
       * gradient buffer exists only when the caller asks for one. */
      shape->grad = world > 1 && stage >= 2 ? 0 : shape->padded;
    }

  if (world == 1)
    {
      /* One process reads gradients in place when a step has one
       * micro-step and the accumulation dtype would not round them. */
      shape->accum_mode = gas > 1 || !(dt->accum == dt->grad || dt->accum == MIXPREC_DTYPE_FLOAT32)
                          ? ACCUM_FLAT : ACCUM_NONE;
      shape->accum = shape->accum_mode == ACCUM_FLAT ? shape->padded : 0;
    }
  else if (gas == 1 && dt->grad == dt->accum && stage <= 1)
    shape->accum_mode = ACCUM_IN_GRAD;
  else
    {
      shape->accum_mode = ACCUM_SHARD;
      shape->accum = shape->local_n;
    }

  shape->step_grad = world == 1 && shape->accum_mode == ACCUM_NONE ? dt->grad : dt->accum;
  if (dt->has_master)
    shape->master = stage >= 1 ? shape->local_n : shape->padded;
  shape->state = stage >= 1 ? shape->local_n : shape->padded;

  /* Staging: where gradients collect between the caller and the wire
   * (ZeRO-2/3), or get converted on their way out of the gradient
   * buffer (a wire dtype other than the gradients'). */
  if (world > 1 && (stage >= 2 || wire != dt->grad))
    {
      guint64 window = CLAMP (staging_budget / _MIXPREC_N_SLOTS,
                              (guint64) world * _MIXPREC_SUMSQ_BLOCK, _MIXPREC_SLOT_MAX_ELEMENTS);

      shape->slot_elements = MIN (MAX (window, max_packed), max_unit);
      shape->slot_elements = MAX (shape->slot_elements, 1);
      shape->n_slots = _MIXPREC_N_SLOTS;
    }
}

BufferKind
_mixprec_engine_working_kind (MixprecEngine *self)
{
  if (!self->offload_param)
    return BUF_WORKING;
  return self->offload_param_pinned ? BUF_PINNED_WORKING : BUF_HOST_WORKING;
}

guint64
_mixprec_engine_offload_elements (const GroupShape *shape)
{
  /* The elements this rank steps: its slices from ZeRO-1 on. */
  return MAX (MIN (shape->state, _MIXPREC_OFFLOAD_BUCKET_ELEMENTS), 1);
}

void
_mixprec_engine_add_shape_bytes (guint64                      *bytes,
                                 const _MixprecParamDTypes    *dt,
                                 const GroupShape             *s,
                                 guint                         n_slots,
                                 const _MixprecRepresentation *repr,
                                 gboolean                      offload,
                                 gboolean                      pinned,
                                 BufferKind                    working_kind)
{
  gsize wsize = mixprec_dtype_get_size (dt->working);

  for (guint k = 0; k < n_slots; k++)
    if (_mixprec_engine_format_is_scaled (repr->slots[k]))
      {
        bytes[offload ? BUF_HOST_STATE : BUF_STATE] +=
          _mixprec_engine_format_bytes (repr->slots[k], s->scales * repr->block_size);
        /* Offloaded, the scales are host memory with the state. */
        bytes[offload ? BUF_HOST_STATE : BUF_STATE_SCALES] += s->scales * sizeof (gfloat);
      }
    else
      bytes[offload ? BUF_HOST_STATE : BUF_STATE] += _mixprec_engine_format_bytes (repr->slots[k], s->state);
  bytes[s->master_format == MIXPREC_PLUGIN_MASTER_KAHAN ? BUF_KAHAN : BUF_REMAINDERS] +=
    s->master_extra * sizeof (guint16);

  bytes[working_kind] += s->working * wsize;
  bytes[BUF_PERSISTENT] += s->persistent * wsize;
  bytes[BUF_GRADIENTS] += s->grad * mixprec_dtype_get_size (dt->grad);
  bytes[BUF_ACCUM] += s->accum * mixprec_dtype_get_size (dt->accum);
  bytes[offload ? BUF_HOST_MASTERS : BUF_MASTERS] += s->master * sizeof (gfloat);
  if (offload)
    bytes[pinned ? BUF_PINNED_STAGING : BUF_HOST_STAGING] += 2 * _mixprec_engine_offload_elements (s) *
                               (mixprec_dtype_get_size (s->step_grad) + wsize);
  bytes[BUF_STAGING] += s->n_slots * s->slot_elements *
                        mixprec_dtype_get_size (_mixprec_engine_wire_dtype (dt));
  bytes[BUF_NORM] += s->norm_blocks * sizeof (gdouble);
}

/* ---------------------------------------------------------------- addressing */

gpointer
_mixprec_engine_at (gpointer base, MixprecDType dtype, guint64 index)
{
  return (guint8 *) base + index * mixprec_dtype_get_size (dtype);
}

gpointer
_mixprec_engine_flat_at (MixprecEngine *self, const Unit *u, gpointer base,
                         MixprecDType dtype, guint64 e)
{
  return _mixprec_engine_at (base, dtype, u->flat + e);
}

gpointer
_mixprec_engine_local_at (MixprecEngine *self, const Unit *u, gpointer base,
                          MixprecDType dtype, guint64 e)
{
  return _mixprec_engine_at (base, dtype, u->local + (e - self->rank * UNIT_SLICE (self, u)));
}

/* ---------------------------------------------------------------- lookups */

Group *
_mixprec_engine_group_of (MixprecEngine *self, MixprecParam *param)
{
  return g_ptr_array_index (self->groups, _mixprec_param_get_storage (param)->group);
}

Unit *
_mixprec_engine_unit_of (MixprecEngine *self, MixprecParam *param)
{
  Group *g = _mixprec_engine_group_of (self, param);

  return &g_array_index (g->units, Unit, _mixprec_param_get_storage (param)->unit);
}

/* Where this rank's reduced slice of @u goes. */
gpointer
_mixprec_engine_reduce_target (MixprecEngine *self, Group *g, const Unit *u)
{
  if (g->accum_mode == ACCUM_IN_GRAD)
    return _mixprec_engine_flat_at (self, u, g->grad, g->dtypes.grad, self->rank * UNIT_SLICE (self, u));
  return _mixprec_engine_at (g->accum, g->dtypes.accum, u->local);
}

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
  guint first = 0, last = g->segments->len;

  /* From the first segment ending after @begin (segments lie in order):
   * callers go block by block over groups of many parameters. */
  while (first < last)
    {
      guint mid = first + (last - first) / 2;
      const Segment *seg = &g_array_index (g->segments, Segment, mid);

      if (seg->offset + seg->numel <= begin)
        first = mid + 1;
      else
        last = mid;
    }
  for (guint i = first; i < g->segments->len; i++)
    {
      const Segment *seg = &g_array_index (g->segments, Segment, i);
      guint64 lo = MAX (begin, seg->offset);
      guint64 hi = MIN (end, seg->offset + seg->numel);

      if (seg->offset >= end)
        break;
      if (lo < hi)
        func (g, seg, lo, hi - lo, data);
    }
}

/* This rank's real elements of @u's slice: [rank * slice, + the result). */
guint64
_mixprec_engine_real_in_slice (MixprecEngine *self, const Unit *u)
{
  guint64 slice = UNIT_SLICE (self, u), begin = self->rank * slice;

  return u->numel > begin ? MIN (u->numel - begin, slice) : 0;
}

const Unit *
_mixprec_engine_unit_of_block (const Group *g, guint64 j)
{
  guint lo = 0, hi = g->units->len;

  while (hi - lo > 1)
    {
      guint mid = (lo + hi) / 2;

      if (g_array_index (g->units, Unit, mid).first_block <= j)
        lo = mid;
      else
        hi = mid;
    }
  return &g_array_index (g->units, Unit, lo);
}

/* Where this rank's reduced gradients of @u's slice start, and in what
 * dtype. */
gconstpointer
_mixprec_engine_slice_source (MixprecEngine *self, Group *g, const Unit *u, MixprecDType *dtype)
{
  if (self->world == 1)
    {
      *dtype = g->accum != NULL ? g->dtypes.accum : g->dtypes.grad;
      return g->accum != NULL ? _mixprec_engine_at (g->accum, g->dtypes.accum, u->flat)
                              : _mixprec_engine_at (g->grad, g->dtypes.grad, u->flat);
    }
  *dtype = g->dtypes.accum;
  if (g->accum_mode == ACCUM_IN_GRAD)
    return _mixprec_engine_flat_at (self, u, g->grad, g->dtypes.grad, self->rank * UNIT_SLICE (self, u));
  return _mixprec_engine_at (g->accum, g->dtypes.accum, u->local);
}

void
_mixprec_engine_values_at (MixprecEngine *self,
                           Group         *g,
                           const Unit    *u,
                           guint64        e,
                           gfloat       **master,
                           guint64       *state_at,
                           gpointer      *working)
{
  gpointer w = g->working_local
               ? _mixprec_engine_local_at (self, u, g->working, g->dtypes.working, e)
               : _mixprec_engine_flat_at (self, u, g->working, g->dtypes.working, e);

  *state_at = g->state_local ? u->local + (e - self->rank * UNIT_SLICE (self, u)) : u->flat + e;
  if (g->dtypes.has_master)
    *master = g->master + *state_at;
  else if (g->dtypes.working == MIXPREC_DTYPE_FLOAT32)
    *master = w;
  else
    *master = NULL;
  *working = (gpointer) *master == w ? NULL : w;
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

/* ---------------------------------------------------------------- layout */

/* ---------------------------------------------------------------- a group's layout */

Group *
_mixprec_engine_group_new (MixprecEngine *self,
                           MixprecParam  *p)
{
  Group *g = g_new0 (Group, 1);

  g->index = self->groups->len;
  g->dtypes.working = mixprec_param_get_working_dtype (p);
  g->dtypes.grad = mixprec_param_get_grad_dtype (p);
  g->dtypes.accum = mixprec_param_get_accum_dtype (p);
  g->dtypes.comm = mixprec_param_get_comm_dtype (p);
  g->dtypes.has_master = mixprec_param_has_master (p);
  g->weight_decay_multiplier = mixprec_param_get_weight_decay_multiplier (p);
  g->external = _mixprec_param_is_external (p);
  g->device = _mixprec_device_ref (self->device);
  g->state_device = self->offload ? NULL : _mixprec_device_ref (self->device);
  g->working_on_host = self->offload_param;
  g->params = g_ptr_array_new ();
  g->segments = g_array_new (FALSE, FALSE, sizeof (Segment));
  return g;
}

void
_mixprec_engine_group_add_param (Group        *g,
                                 MixprecParam *p)
{
  g_ptr_array_add (g->params, p);
  g->numel += mixprec_param_get_numel (p);
}

void
_mixprec_engine_layout_free (MixprecEngine *self,
                             Group         *g)
{
  if (g->states != NULL)
    {
      for (guint s = 0; g->states[s] != NULL; s++)
        _mixprec_engine_free (self, g->state_device, g->states[s]);
      g_free (g->states);
    }
  if (g->state_scales != NULL)
    {
      for (guint s = 0; s < mixprec_feature_get_n_state_slots (self->optimizer); s++)
        _mixprec_engine_free (self, g->state_device, g->state_scales[s]);
      g_free (g->state_scales);
    }
  _mixprec_engine_free (self, g->state_device, g->master_extra);
  _mixprec_engine_free (self, g->working_on_host ? NULL : g->device, g->working);
  _mixprec_engine_free (self, g->device, g->persistent);
  _mixprec_engine_free (self, g->device, g->grad);
  _mixprec_engine_free (self, g->device, g->accum);
  _mixprec_engine_free (self, g->state_device, g->master);
  g_clear_pointer (&g->device, _mixprec_device_unref);
  g_clear_pointer (&g->state_device, _mixprec_device_unref);
  g_free (g->hparams);
  g_clear_pointer (&g->units, g_array_unref);
  g_clear_pointer (&g->params, g_ptr_array_unref);
  g_clear_pointer (&g->segments, g_array_unref);
  g_free (g);
}


/* REMAINDER masters: the initial FP32 values split into the working copy
 * and the remainders, so the master starts exact (a working copy rounded
 * on its own would lose the low halves). Writes the working copy where
 * this rank holds it and the remainders of its slice. */
static gboolean
init_remainders (MixprecEngine *self, Group *g, MixprecParam *p, const Unit *u, InitValues *init,
                 guint64 e0, guint64 lo, guint64 hi, GError **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  guint64 numel = mixprec_param_get_numel (p);
  g_autofree gfloat *f = g_new (gfloat, numel);
  g_autofree guint16 *work = g_new (guint16, numel);
  g_autofree gint16 *rem = g_new (gint16, numel);
  guint64 a = g->state_local ? lo : e0, b = g->state_local ? hi : e0 + numel;
  guint64 state_at;
  gfloat *m;
  gpointer w;

  if (!mixprec_convert_array (init->dtype, g_bytes_get_data (init->values, NULL), MIXPREC_DTYPE_FLOAT32, f,
                              numel, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
    return FALSE;
  for (guint64 i = 0; i < numel; i++)
    _mixprec_remainder_split (f[i], &work[i], &rem[i]);
  if (a < b)
    {
      _mixprec_engine_values_at (self, g, u, a, &m, &state_at, &w);
      if (!_mixprec_device_copy (g->state_device, (gint16 *) g->master_extra + state_at, rem + (a - e0),
                                 (b - a) * sizeof (gint16), MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error))
        return FALSE;
    }
  if (g->working_local)
    {
      if (lo < hi &&
          !_mixprec_device_upload (g->working_on_host ? NULL : self->device, work + (lo - e0), MIXPREC_DTYPE_BFLOAT16,
                                   _mixprec_engine_local_at (self, u, g->working, g->dtypes.working, lo),
                                   g->dtypes.working, hi - lo, error))
        return FALSE;
      if (u->persistent &&
          !_mixprec_device_upload (self->device, work, MIXPREC_DTYPE_BFLOAT16,
                                   _mixprec_engine_at (g->persistent, g->dtypes.working, u->persist_at + e0),
                                   g->dtypes.working, numel, error))
        return FALSE;
      return TRUE;
    }
  return _mixprec_device_upload (self->device, work, MIXPREC_DTYPE_BFLOAT16, s->working, g->dtypes.working,
                                 numel, error);
}

/* Writes @p's initial values into the parts of the buffers this rank
 * holds: the master (or FP32 working) values of its slice, and the
 * working copy (whole below ZeRO-3, the slice under it). */
static gboolean
init_param (MixprecEngine *self,
            Group         *g,
            MixprecParam  *p,
            GError       **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  InitValues *init = g_hash_table_lookup (self->init_values, p);
  const Unit *u = &g_array_index (g->units, Unit, s->unit);
  guint64 numel = mixprec_param_get_numel (p);
  guint64 e0 = s->offset - u->flat;          /* the parameter inside its unit */
  guint64 slice = UNIT_SLICE (self, u);
  guint64 lo = MAX (e0, self->rank * slice), hi = MIN (e0 + numel, (self->rank + 1) * slice);
  gsize isize;
  const guint8 *v;

  if (init == NULL || numel == 0)
    return TRUE;
  v = g_bytes_get_data (init->values, NULL);
  isize = mixprec_dtype_get_size (init->dtype);
  if (self->world == 1)
    lo = e0, hi = e0 + numel;

  if (g->master_extra != NULL &&
      _mixprec_engine_master_format (&self->repr, &g->dtypes) == MIXPREC_PLUGIN_MASTER_REMAINDER)
    return init_remainders (self, g, p, u, init, e0, lo, hi, error);
  if (g->master != NULL)
    {
      gboolean whole = !g->state_local;
      guint64 a = whole ? e0 : lo, b = whole ? e0 + numel : hi;

      if (a < b &&
          !_mixprec_device_upload (g->state_device, v + (a - e0) * isize, init->dtype,
                                   whole ? (gpointer) _mixprec_engine_flat_at (self, u, g->master, MIXPREC_DTYPE_FLOAT32, a)
                                         : _mixprec_engine_local_at (self, u, g->master, MIXPREC_DTYPE_FLOAT32, a),
                                   MIXPREC_DTYPE_FLOAT32, b - a, error))
        return FALSE;
    }
  if (g->working_local)
    {
      if (lo < hi &&
          !_mixprec_device_upload (g->working_on_host ? NULL : self->device, v + (lo - e0) * isize, init->dtype,
                                   _mixprec_engine_local_at (self, u, g->working, g->dtypes.working, lo),
                                   g->dtypes.working, hi - lo, error))
        return FALSE;
      if (u->persistent &&
          !_mixprec_device_upload (self->device, v, init->dtype,
                                   _mixprec_engine_at (g->persistent, g->dtypes.working, u->persist_at + e0),
                                   g->dtypes.working, numel, error))
        return FALSE;
      return TRUE;
    }
  return _mixprec_device_upload (self->device, v, init->dtype, s->working, g->dtypes.working,
                                 numel, error);
}

gboolean
_mixprec_engine_layout_group (MixprecEngine *self,
                              Group         *g,
                              GroupShape    *shape_out,
                              GError       **error)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  g_autofree guint64 *sizes = g_new (guint64, MAX (g->params->len, 1));
  GroupShape shape;

  for (guint i = 0; i < g->params->len; i++)
    sizes[i] = mixprec_param_get_numel (g_ptr_array_index (g->params, i));
  g->units = _mixprec_engine_make_units_full (sizes, g->params->len, self->world, self->stage,
                                              mixprec_config_get_param_persistence_threshold (self->config),
                                              g->fp8.enabled && g->fp8.kind == MIXPREC_FP8_RECIPE_MX);
  g->wire = _mixprec_engine_wire_dtype (&g->dtypes);
  _mixprec_engine_group_shape (&g->dtypes, g->wire, g->units, self->world, self->stage, self->gas,
                               g->external, _mixprec_engine_staging_budget (self->config), &shape);
  _mixprec_engine_shape_represent (&shape, &self->repr, &g->dtypes, g->units, self->world, self->stage);
  *shape_out = shape;
  g->padded = shape.padded;
  g->local_n = shape.local_n;
  g->persist_n = shape.persist_n;
  g->state_local = self->stage >= 1;
  g->working_local = self->stage >= 3;
  if (!_mixprec_engine_zeropp_layout (self, g, error))
    return FALSE;
  g->accum_mode = shape.accum_mode;
  g->slot_elements = shape.slot_elements;

  if (shape.working &&
      (g->working = _mixprec_engine_alloc (self, g->working_on_host ? NULL : self->device, shape.working, wsize,
                                           _mixprec_engine_working_kind (self), error)) == NULL)
    return FALSE;
  if (shape.persistent &&
      (g->persistent = _mixprec_engine_alloc (self, self->device, shape.persistent, wsize, BUF_PERSISTENT, error)) == NULL)
    return FALSE;
  if (shape.grad &&
      (g->grad = _mixprec_engine_alloc (self, self->device, shape.grad, wsize, BUF_GRADIENTS, error)) == NULL)
    return FALSE;
  if (shape.master &&
      (g->master = _mixprec_engine_alloc (self, g->state_device, shape.master, sizeof (gfloat),
                                          self->offload ? BUF_HOST_MASTERS : BUF_MASTERS, error)) == NULL)
    return FALSE;
  if (shape.accum &&
      (g->accum = _mixprec_engine_alloc (self, self->device, shape.accum,
                                         mixprec_dtype_get_size (g->dtypes.accum), BUF_ACCUM, error)) == NULL)
    return FALSE;
  if (shape.master_extra &&
      (g->master_extra = _mixprec_engine_alloc (self, g->state_device, shape.master_extra, sizeof (guint16),
                                                shape.master_format == MIXPREC_PLUGIN_MASTER_KAHAN
                                                ? BUF_KAHAN : BUF_REMAINDERS, error)) == NULL)
    return FALSE;
  g->states = g_new0 (gpointer, n_slots + 1);
  if (self->repr.block_size > 0)
    g->state_scales = g_new0 (gfloat *, MAX (n_slots, 1));
  for (guint k = 0; k < n_slots; k++)
    {
      MixprecPluginStateFormat f = self->repr.slots[k];
      gboolean scaled = _mixprec_engine_format_is_scaled (f);

      /* Scaled slots are laid out by block: every block whole, so each
       * call hands the plugin whole blocks (and INT4 whole bytes). */
      if ((g->states[k] = _mixprec_engine_alloc (self, g->state_device,
                                                 _mixprec_engine_format_bytes (f, scaled ? shape.scales * self->repr.block_size
                                                                                         : shape.state),
                                                 1, self->offload ? BUF_HOST_STATE : BUF_STATE, error)) == NULL)
        return FALSE;
      if (scaled &&
          (g->state_scales[k] = _mixprec_engine_alloc (self, g->state_device, shape.scales, sizeof (gfloat),
                                                       self->offload ? BUF_HOST_STATE : BUF_STATE_SCALES,
                                                       error)) == NULL)
        return FALSE;
    }
  _mixprec_engine_add_shape_bytes (self->buf_plan, &g->dtypes, &shape, n_slots, &self->repr,
                                   self->offload, self->offload_pinned, _mixprec_engine_working_kind (self));

  g->hparams = g_memdup2 (self->hparams, sizeof (gdouble) * MAX (self->n_hparams, 1));
  if (self->weight_decay_index >= 0)
    g->hparams[self->weight_decay_index] *= g->weight_decay_multiplier;

  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 flat = u->flat, index = u->index;

      for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
        {
          MixprecParam *p = g_ptr_array_index (g->params, i);
          _MixprecParamStorage *s = _mixprec_param_get_storage (p);
          guint64 numel = mixprec_param_get_numel (p);

          s->group = g->index;
          s->unit = k;
          s->offset = flat;
          s->index = index;
          if (s->device == NULL)
            s->device = _mixprec_device_ref (self->device);
          if (!g->external)
            {
              if (!g->working_local)
                s->working = (guint8 *) g->working + flat * wsize;
              else if (u->persistent)
                s->working = (guint8 *) g->persistent + (u->persist_at + (flat - u->flat)) * wsize;
              else
                s->working = NULL;
              s->grad = g->grad != NULL ? (guint8 *) g->grad + flat * wsize : NULL;
            }
          flat += numel;
          index += numel;
        }
    }

  /* One process keeps segments: runs that share buffers, so external
   * memory (one buffer per parameter) and engine buffers read alike. */
  for (guint i = 0; i < g->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (g->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);
      guint64 numel = mixprec_param_get_numel (p);
      Segment seg = { s->offset, numel, NULL, s->offset, NULL, NULL, s->offset };

      if (g->dtypes.has_master)
        {
          seg.master = g->master;
          seg.master_base = 0;
        }
      else if (g->dtypes.working == MIXPREC_DTYPE_FLOAT32)
        {
          seg.master = g->external ? s->working : g->working;
          seg.master_base = g->external ? s->offset : 0;
        }
      seg.working = g->external ? s->working : g->working;
      seg.working_base = g->external ? s->offset : 0;
      seg.grad = g->external ? s->grad : g->grad;
      s->master = (seg.master != NULL && !g->state_local && !g->working_local)
                  ? seg.master + (s->offset - seg.master_base) : NULL;
      s->master_on_host = self->offload && g->dtypes.has_master;

      if (g->external || i == 0)
        g_array_append_val (g->segments, seg);
      else
        g_array_index (g->segments, Segment, 0).numel = s->offset + numel;

      if (!init_param (self, g, p, error))
        return FALSE;
      /* External memory holds the initial values in its working copy. */
      if (g_hash_table_lookup (self->init_values, p) == NULL && g->external &&
          seg.master != NULL && seg.master != (gpointer) seg.working &&
          (self->offload
           ? !_mixprec_device_download (self->device, s->working, g->dtypes.working, s->master,
                                        MIXPREC_DTYPE_FLOAT32, numel, error)
           : !_mixprec_device_convert (self->device, s->working, g->dtypes.working, s->master,
                                       MIXPREC_DTYPE_FLOAT32, numel, MIXPREC_ROUNDING_NEAREST_EVEN,
                                       0, 0, error)))
        return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_engine_ensure_grad (MixprecEngine *self,
                             Group         *g,
                             GError       **error)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);

  if (g->grad != NULL || g->external)
    return TRUE;
  g->grad = _mixprec_engine_alloc (self, self->device, g->padded, wsize, BUF_GRADIENTS, error);
  if (g->grad == NULL)
    return FALSE;
  for (guint i = 0; i < g->params->len; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      s->grad = (guint8 *) g->grad + s->offset * wsize;
    }
  for (guint i = 0; i < g->segments->len; i++)
    g_array_index (g->segments, Segment, i).grad = g->grad;
  return TRUE;
}

