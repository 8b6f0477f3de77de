/* mixprec-engine-layout.c — how an engine lays out its parameters: groups,
 * ZeRO partitions, buffers, and the memory report and plan that follow
 * from the same arithmetic. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- layout */


void
_mixprec_engine_group_shape (const _MixprecParamDTypes *dt,
             guint64                    numel,
             guint                      world,
             guint                      stage,
             guint                      gas,
             gboolean                   external,
             GroupShape                *shape)
{
  guint64 align = (guint64) world * _MIXPREC_SUMSQ_BLOCK;

  memset (shape, 0, sizeof *shape);
  shape->padded = world > 1 ? (numel + align - 1) / align * align : numel;
  shape->part = shape->padded / world;
  if (!external)
    {
      shape->working = stage >= 3 ? shape->part : shape->padded;
      shape->grad = shape->padded;
    }
  /* One process reads gradients in place when a step has one micro-step
   * and the accumulation dtype would not round them; several ranks always
   * need somewhere to receive the reduction. */
  if (world > 1 || gas > 1 ||
      !(dt->accum == dt->grad || dt->accum == MIXPREC_DTYPE_FLOAT32))
    shape->accum = stage >= 2 ? shape->part : shape->padded;
  if (world > 1)
    shape->staging = shape->padded;
  if (dt->has_master)
    shape->master = stage >= 1 ? shape->part : shape->padded;
  shape->state = stage >= 1 ? shape->part : shape->padded;
  if (stage >= 3)
    shape->gathered = shape->padded;
}

/* The dtype gradients travel in: the communication dtype when they land in
 * an FP32 accumulator (which the comm fills without rounding), else the
 * accumulation dtype itself (checked to equal the communication dtype). */
MixprecDType
_mixprec_engine_wire_dtype (const _MixprecParamDTypes *dt)
{
  return dt->accum == MIXPREC_DTYPE_FLOAT32 ? dt->comm : dt->accum;
}

void
_mixprec_engine_add_shape_bytes (MixprecMemoryReport       *r,
                 const _MixprecParamDTypes *dt,
                 const GroupShape          *s,
                 guint                      n_slots)
{
  r->working += s->working * mixprec_dtype_get_size (dt->working);
  r->gradients += s->grad * mixprec_dtype_get_size (dt->grad);
  r->accumulation += s->accum * mixprec_dtype_get_size (dt->accum);
  r->masters += s->master * sizeof (gfloat);
  r->optimizer_state += s->state * sizeof (gfloat) * n_slots;
  r->communication += s->staging * mixprec_dtype_get_size (_mixprec_engine_wire_dtype (dt)) +
                      s->gathered * mixprec_dtype_get_size (dt->working);
  r->total = r->working + r->gradients + r->accumulation + r->masters +
             r->optimizer_state + r->communication;
}

gpointer
_mixprec_engine_alloc_buffer (_MixprecDevice *device,
              guint64      numel,
              gsize        elem_size,
              const gchar *what,
              GError     **error)
{
  /* Never NULL on success: an empty buffer still has an address. Zeroed:
   * padding must hold zeros, and fresh optimizer state is zero. */
  if (numel > G_MAXSIZE / MAX (elem_size, 1))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "%s: %" G_GUINT64_FORMAT " elements do not fit in memory", what, numel);
      return NULL;
    }
  return _mixprec_device_alloc (device, (gsize) MAX (numel, 1) * elem_size, what, error);
}

static gboolean
same_group (const Group *g, MixprecParam *p)
{
  return g->external == _mixprec_param_is_external (p) &&
         g->dtypes.working == mixprec_param_get_working_dtype (p) &&
         g->dtypes.accum == mixprec_param_get_accum_dtype (p) &&
         g->dtypes.comm == mixprec_param_get_comm_dtype (p) &&
         g->dtypes.has_master == mixprec_param_has_master (p) &&
         g->weight_decay_multiplier == mixprec_param_get_weight_decay_multiplier (p);
}

gpointer
_mixprec_engine_at (gpointer base, MixprecDType dtype, guint64 index)
{
  return (guint8 *) base + index * mixprec_dtype_get_size (dtype);
}

/* Where element @flat of the group's element space lives in each buffer. */
guint64
_mixprec_engine_state_index (const Group *g, guint64 flat)
{
  return g->state_sharded ? flat - g->own_begin : flat;
}

guint64
_mixprec_engine_accum_index (const Group *g, guint64 flat)
{
  return g->accum_sharded ? flat - g->own_begin : flat;
}

static gboolean
layout_group (MixprecEngine *self,
              Group         *g,
              GError       **error)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  GroupShape shape;
  guint64 offset = 0;

  _mixprec_engine_group_shape (&g->dtypes, g->numel, self->world, self->stage, self->gas, g->external, &shape);
  g->padded = shape.padded;
  g->own_begin = self->world > 1 ? (guint64) self->rank * shape.part : 0;
  g->own_end = g->own_begin + shape.part;
  g->state_sharded = self->stage >= 1;
  g->accum_sharded = self->stage >= 2;
  g->working_sharded = self->stage >= 3;
  if (self->world > 1)
    {
      g_autofree guint64 *sizes = g_new (guint64, MAX (g->params->len, 1));

      for (guint i = 0; i < g->params->len; i++)
        sizes[i] = mixprec_param_get_numel (g_ptr_array_index (g->params, i));
      g->partitioner = mixprec_partitioner_new (sizes, g->params->len, self->world,
                                                (guint64) self->world * _MIXPREC_SUMSQ_BLOCK,
                                                MAX (mixprec_config_get_reduce_bucket_size (self->config), 1),
                                                error);
      if (g->partitioner == NULL)
        return FALSE;
      g_assert (mixprec_partitioner_get_padded_total (g->partitioner) == g->padded);
    }

  if (shape.working &&
      (g->working = _mixprec_engine_alloc_buffer (self->device, shape.working, wsize, "working copies", error)) == NULL)
    return FALSE;
  if (shape.grad &&
      (g->grad = _mixprec_engine_alloc_buffer (self->device, shape.grad, wsize, "gradients", error)) == NULL)
    return FALSE;
  if (shape.master &&
      (g->master = _mixprec_engine_alloc_buffer (self->device, shape.master, sizeof (gfloat), "FP32 master weights", error)) == NULL)
    return FALSE;
  if (shape.accum &&
      (g->accum = _mixprec_engine_alloc_buffer (self->device, shape.accum, mixprec_dtype_get_size (g->dtypes.accum),
                                "gradient accumulation", error)) == NULL)
    return FALSE;
  if (shape.staging &&
      (g->staging = _mixprec_engine_alloc_buffer (self->device, shape.staging, mixprec_dtype_get_size (_mixprec_engine_wire_dtype (&g->dtypes)),
                                  "gradient communication", error)) == NULL)
    return FALSE;
  g->states = g_new0 (gfloat *, n_slots + 1);
  for (guint s = 0; s < n_slots; s++)
    if ((g->states[s] = _mixprec_engine_alloc_buffer (self->device, shape.state, sizeof (gfloat), "optimizer state", error)) == NULL)
      return FALSE;
  _mixprec_engine_add_shape_bytes (&self->memory, &g->dtypes, &shape, n_slots);

  g->hparams = g_memdup2 (self->hparams, sizeof (gdouble) * MAX (self->n_hparams, 1));
  if (self->weight_decay_index >= 0)
    g->hparams[self->weight_decay_index] *= g->weight_decay_multiplier;

  for (guint i = 0; i < g->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (g->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);
      guint64 numel = mixprec_param_get_numel (p);
      GBytes *init = g_hash_table_lookup (self->init_values, p);
      Segment seg = { offset, numel, NULL, offset, NULL, NULL, offset };

      s->group = g->index;
      if (s->device == NULL)
        s->device = _mixprec_device_ref (self->device);
      s->offset = offset;
      if (!g->external)
        {
          s->working = g->working_sharded ? NULL : (guint8 *) g->working + offset * wsize;
          s->grad = (guint8 *) g->grad + offset * wsize;
        }
      /* The FP32 values the optimizer updates, addressed from the group's
       * element space: a separate master, the FP32 working copy, or none. */
      if (g->dtypes.has_master)
        {
          seg.master = g->master;
          seg.master_base = g->state_sharded ? g->own_begin : 0;
        }
      else if (g->dtypes.working == MIXPREC_DTYPE_FLOAT32)
        {
          seg.master = g->external ? s->working : g->working;
          seg.master_base = g->external ? offset : (g->working_sharded ? g->own_begin : 0);
        }
      seg.working = g->external ? s->working : g->working;
      seg.working_base = g->external ? offset : (g->working_sharded ? g->own_begin : 0);
      seg.grad = g->external ? s->grad : g->grad;
      s->master = (seg.master != NULL && !g->state_sharded) ? seg.master + (offset - seg.master_base) : NULL;

      /* Initial values (every rank registers the same ones): from the
       * registration copy, or (external memory) the caller's working copy.
       * Each rank keeps the parts of its buffers it holds. */
      if (init != NULL)
        {
          const gfloat *v = g_bytes_get_data (init, NULL);
          gboolean separate = seg.master != NULL && seg.master != (gpointer) seg.working;
          guint64 mlo = MAX (offset, g->state_sharded ? g->own_begin : 0);
          guint64 mhi = MIN (offset + numel, g->state_sharded ? g->own_end : G_MAXUINT64);
          guint64 wlo = MAX (offset, g->working_sharded ? g->own_begin : 0);
          guint64 whi = MIN (offset + numel, g->working_sharded ? g->own_end : G_MAXUINT64);

          if (separate && mlo < mhi &&
              !_mixprec_device_upload (self->device, v + (mlo - offset), MIXPREC_DTYPE_FLOAT32,
                                       seg.master + (mlo - seg.master_base), MIXPREC_DTYPE_FLOAT32,
                                       mhi - mlo, error))
            return FALSE;
          if (wlo < whi &&
              !_mixprec_device_upload (self->device, v + (wlo - offset), MIXPREC_DTYPE_FLOAT32,
                                       _mixprec_engine_at (seg.working, g->dtypes.working, wlo - seg.working_base),
                                       g->dtypes.working, whi - wlo, error))
            return FALSE;
        }
      if (init == NULL && seg.master != NULL && seg.master != (gpointer) seg.working &&
          !_mixprec_device_convert (self->device, s->working, g->dtypes.working, s->master,
                                    MIXPREC_DTYPE_FLOAT32, numel, MIXPREC_ROUNDING_NEAREST_EVEN,
                                    0, 0, error))
        return FALSE;

      if (g->external || i == 0)
        g_array_append_val (g->segments, seg);
      else
        g_array_index (g->segments, Segment, 0).numel += numel;
      offset += numel;
    }
  return TRUE;
}

gboolean
_mixprec_engine_ensure_prepared (gpointer  engine,
                                 GError  **error)
{
  return mixprec_engine_prepare (MIXPREC_ENGINE (engine), error);
}

/**
 * mixprec_engine_prepare:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Lays out the buffers of every registered parameter: contiguous groups of
 * parameters that share their dtypes and optimizer settings, each with its
 * working copies, gradients, FP32 masters, accumulation buffer and
 * optimizer state, partitioned across ranks as the ZeRO stage says. Called
 * implicitly by the first buffer access, mixprec_engine_backward_done() or
 * mixprec_engine_step(); calling it explicitly reports allocation failures
 * where they happen. Afterwards no more parameters can be registered. Every
 * rank must register the same parameters in the same order.
 *
 * Returns: %TRUE on success (also when already prepared)
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_prepare (MixprecEngine *self,
                        GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);

  if (self->prepared)
    return TRUE;

  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      Group *g = NULL;

      for (guint j = 0; j < self->groups->len && g == NULL; j++)
        if (same_group (g_ptr_array_index (self->groups, j), p))
          g = g_ptr_array_index (self->groups, j);
      if (g == NULL)
        {
          g = g_new0 (Group, 1);
          g->index = self->groups->len;
          g->dtypes.working = mixprec_param_get_working_dtype (p);
          g->dtypes.grad = mixprec_param_get_grad_dtype (p);
          g->dtypes.accum = mixprec_param_get_accum_dtype (p);
          g->dtypes.comm = mixprec_param_get_comm_dtype (p);
          g->dtypes.has_master = mixprec_param_has_master (p);
          g->weight_decay_multiplier = mixprec_param_get_weight_decay_multiplier (p);
          g->external = _mixprec_param_is_external (p);
          g->device = _mixprec_device_ref (self->device);
          g->params = g_ptr_array_new ();
          g->segments = g_array_new (FALSE, FALSE, sizeof (Segment));
          g->pending = g_ptr_array_new_with_free_func ((GDestroyNotify) mixprec_comm_request_free);
          g_ptr_array_add (self->groups, g);
        }
      g_ptr_array_add (g->params, p);
      g->numel += mixprec_param_get_numel (p);
    }

  memset (&self->memory, 0, sizeof self->memory);
  for (guint j = 0; j < self->groups->len; j++)
    if (!layout_group (self, g_ptr_array_index (self->groups, j), error))
      {
        g_ptr_array_set_size (self->groups, 0);
        return FALSE;
      }
  g_hash_table_remove_all (self->init_values);
  self->prepared = TRUE;
  return TRUE;
}

