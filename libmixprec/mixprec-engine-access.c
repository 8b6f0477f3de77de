/* mixprec-engine-access.c — reading optimizer state, and the private API
 * checkpoints use to reach each rank's shard. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- access */

/* Copies the FP32 values of @p's elements [begin, end) that this rank
 * holds (masters, else the working copy widened) into @out. */
static gboolean
read_owned_master (Group         *g,
                   MixprecParam  *p,
                   guint64        begin,
                   guint64        end,
                   gfloat        *out,
                   GError       **error)
{
  guint64 po = _mixprec_param_get_storage (p)->offset;
  const Segment *seg = _mixprec_engine_segment_of (g, po);

  if (seg->master != NULL)
    return _mixprec_device_download (g->device, seg->master + (po + begin - seg->master_base),
                                     MIXPREC_DTYPE_FLOAT32, out, MIXPREC_DTYPE_FLOAT32,
                                     end - begin, error);
  return _mixprec_device_download (g->device,
                                   _mixprec_engine_at (seg->working, g->dtypes.working, po + begin - seg->working_base),
                                   g->dtypes.working, out, MIXPREC_DTYPE_FLOAT32, end - begin, error);
}

/**
 * mixprec_engine_gather_master:
 * @self: a #MixprecEngine
 * @param_name: a registered parameter's name
 * @error: return location for a #GError
 *
 * The FP32 values the optimizer keeps for a parameter (its master copy, or
 * in bf16 without master weights its working copy widened), assembled from
 * every rank's partition. Collective when the state is sharded: every rank
 * must call it for the same parameters in the same order.
 *
 * Returns: (transfer full): numel FP32 values, or %NULL with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_engine_gather_master (MixprecEngine *self,
                              const gchar   *param_name,
                              GError       **error)
{
  MixprecParam *p;
  Group *g;
  guint64 numel, po, part;
  g_autofree gfloat *whole = NULL;
  g_autofree gfloat *mine = NULL;
  GError *local = NULL;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (param_name != NULL, NULL);

  p = g_hash_table_lookup (self->by_name, param_name);
  if (p == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "no parameter named '%s'", param_name);
      return NULL;
    }
  if (!mixprec_engine_prepare (self, error))
    return NULL;
  g = _mixprec_engine_group_of (self, p);
  numel = mixprec_param_get_numel (p);
  if (!g->state_sharded)
    {
      whole = g_new (gfloat, MAX (numel, 1));
      if (!read_owned_master (g, p, 0, numel, whole, error))
        return NULL;
      return g_bytes_new_take (g_steal_pointer (&whole), numel * sizeof (gfloat));
    }

  /* Every rank contributes its partition of the group; the parameter is a
   * window of the gathered element space. */
  po = _mixprec_param_get_storage (p)->offset;
  part = g->own_end - g->own_begin;
  mine = g_new0 (gfloat, MAX (part, 1));
  whole = g_new0 (gfloat, MAX (g->padded, 1));
  {
    guint64 lo = MAX (g->own_begin, po), hi = MIN (g->own_end, po + numel);

    if (lo < hi && !read_owned_master (g, p, lo - po, hi - po, mine + (lo - g->own_begin), error))
      return NULL;
  }
  if (!mixprec_comm_all_gather (self->comm, mine, whole, part, MIXPREC_DTYPE_FLOAT32, &local))
    return (_mixprec_engine_comm_failed (error, local, "gathering master weights"), NULL);
  return g_bytes_new (whole + po, numel * sizeof (gfloat));
}

/**
 * mixprec_engine_get_memory_report:
 * @self: a #MixprecEngine
 *
 * What the engine allocated on this rank, by category (ZeRO-3 gathered
 * copies counted at their full size, as while gathered). Lays out the
 * buffers if that has not happened yet.
 *
 * Returns: (transfer full): the report
 *
 * Since: 1.0
 */
MixprecMemoryReport *
mixprec_engine_get_memory_report (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  mixprec_engine_prepare (self, NULL);
  return mixprec_memory_report_copy (&self->memory);
}

/**
 * mixprec_memory_plan_new:
 * @config: a training configuration
 * @n_params: the number of parameters (elements) of the model
 * @world_size: the number of data-parallel ranks
 * @error: return location for a #GError
 *
 * Predicts the bytes one rank allocates for a model of @n_params elements
 * under @config's precision mode, ZeRO stage, accumulation and optimizer
 * (its state slots), laid out as one parameter group, with the same
 * arithmetic the engine uses (padding included). An engine whose
 * parameters form one group reports exactly this.
 *
 * Returns: (transfer full): the plan, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecMemoryReport *
mixprec_memory_plan_new (MixprecConfig *config,
                         guint64        n_params,
                         guint          world_size,
                         GError       **error)
{
  g_autoptr(MixprecEngine) probe = NULL;
  _MixprecParamDTypes dt = { 0 };
  MixprecDType master;
  GroupShape shape;
  MixprecMemoryReport report = { 0 };
  guint stage;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);

  if (world_size == 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "world size: must be at least 1, got 0");
      return NULL;
    }
  /* A local engine resolves the policy and the optimizer exactly as
   * training would. */
  probe = _mixprec_engine_new_internal (config, NULL, NULL, NULL, TRUE, error);
  if (probe == NULL)
    return NULL;
  if (!mixprec_precision_policy_resolve (probe->policy, "param", "Linear", &dt.working, &master,
                                         &dt.has_master, &dt.accum, &dt.comm, error))
    return NULL;
  dt.grad = dt.working;
  if (dt.working == MIXPREC_DTYPE_FLOAT32)
    dt.has_master = FALSE;
  stage = world_size > 1 ? mixprec_config_get_zero_stage (config) : 0;
  _mixprec_engine_group_shape (&dt, n_params, world_size, stage, probe->gas, FALSE, &shape);
  _mixprec_engine_add_shape_bytes (&report, &dt, &shape, mixprec_feature_get_n_state_slots (probe->optimizer));
  return mixprec_memory_report_copy (&report);
}

/**
 * mixprec_engine_get_optimizer_state_names:
 * @self: a #MixprecEngine
 *
 * Returns: (transfer full): the names of the optimizer's FP32 state slots
 *   per element, e.g. "exp_avg" and "exp_avg_sq" for adamw
 *
 * Since: 1.0
 */
GStrv
mixprec_engine_get_optimizer_state_names (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return g_strdupv ((GStrv) mixprec_feature_get_state_names (self->optimizer));
}

/**
 * mixprec_engine_get_optimizer_state:
 * @self: a #MixprecEngine
 * @param_name: a registered parameter's name
 * @slot: a state slot name from mixprec_engine_get_optimizer_state_names()
 * @error: return location for a #GError
 *
 * Copies one optimizer state slot of one parameter. Under ZeRO-1 and above
 * the state is sharded and only the checkpoint functions see all of it.
 *
 * Returns: (transfer full): numel FP32 values, or %NULL with @error set
 *   (unknown parameter or slot, or sharded state)
 *
 * Since: 1.0
 */
GBytes *
mixprec_engine_get_optimizer_state (MixprecEngine *self,
                                    const gchar   *param_name,
                                    const gchar   *slot,
                                    GError       **error)
{
  MixprecParam *param;
  const gchar * const *names;
  _MixprecParamStorage *s;
  Group *g;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (param_name != NULL && slot != NULL, NULL);

  param = g_hash_table_lookup (self->by_name, param_name);
  if (param == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "no parameter named '%s'", param_name);
      return NULL;
    }
  if (!mixprec_engine_prepare (self, error))
    return NULL;
  s = _mixprec_param_get_storage (param);
  g = g_ptr_array_index (self->groups, s->group);
  if (g->state_sharded)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': optimizer state is sharded across %u ranks (ZeRO-%u)",
                   param_name, self->world, self->stage);
      return NULL;
    }
  names = mixprec_feature_get_state_names (self->optimizer);
  for (guint i = 0; names != NULL && names[i] != NULL; i++)
    if (g_str_equal (names[i], slot))
      {
        guint64 numel = mixprec_param_get_numel (param);
        g_autofree gfloat *out = g_new (gfloat, MAX (numel, 1));

        if (!_mixprec_device_download (g->device, g->states[i] + s->offset, MIXPREC_DTYPE_FLOAT32,
                                       out, MIXPREC_DTYPE_FLOAT32, numel, error))
          return NULL;
        return g_bytes_new_take (g_steal_pointer (&out), numel * sizeof (gfloat));
      }
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
               "the '%s' optimizer has no state slot '%s'",
               mixprec_feature_get_name (self->optimizer), slot);
  return NULL;
}

/**
 * mixprec_engine_get_loss_scale:
 * @self: a #MixprecEngine
 *
 * Returns: the factor to multiply the loss by before the backward pass
 *
 * Since: 1.0
 */
gdouble
mixprec_engine_get_loss_scale (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1.0);
  return mixprec_loss_scaler_get_scale (self->scaler);
}

/**
 * mixprec_engine_get_lr:
 * @self: a #MixprecEngine
 *
 * Returns: the learning rate the next applied step will use
 *
 * Since: 1.0
 */
gdouble
mixprec_engine_get_lr (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 0.0);
  return mixprec_lr_schedule_get_lr (self->schedule);
}

/**
 * mixprec_engine_get_gradient_accumulation_steps:
 * @self: a #MixprecEngine
 *
 * Returns: the number of backward passes per optimizer step
 *
 * Since: 1.0
 */
guint
mixprec_engine_get_gradient_accumulation_steps (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1);
  return self->gas;
}

/**
 * mixprec_engine_is_accumulation_boundary:
 * @self: a #MixprecEngine
 *
 * Returns: %TRUE when gradient_accumulation_steps backward passes have been
 *   folded and mixprec_engine_step() is due
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_is_accumulation_boundary (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  return self->micro_steps == self->gas;
}

/* ---------------------------------------------------------------- private API */

void
_mixprec_engine_drop_mirrors (Group *g)
{
  if (g->mirrors == NULL)
    return;
  for (guint i = 0; i < g->mirrors->len; i++)
    g_free (g_array_index (g->mirrors, HostMirror, i).host);
  g_clear_pointer (&g->mirrors, g_array_unref);
}

/* Copies @bytes of device buffer @buffer to the host, for the shards. */
static gboolean
add_mirror (Group        *g,
            gpointer      buffer,
            gsize         bytes,
            GError      **error)
{
  HostMirror m = { buffer, NULL, bytes };

  if (buffer == NULL)
    return TRUE;
  for (guint i = 0; i < g->mirrors->len; i++)
    if (g_array_index (g->mirrors, HostMirror, i).device == buffer)
      return TRUE;
  m.host = g_try_malloc (MAX (bytes, 1));
  if (m.host == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "out of memory copying %" G_GSIZE_FORMAT " bytes of device buffers "
                   "to the host for a checkpoint", bytes);
      return FALSE;
    }
  g_array_append_val (g->mirrors, m);
  return _mixprec_device_copy (g->device, m.host, buffer, bytes,
                               MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error);
}

/* Host copies of every buffer a checkpoint reads or writes: the working
 * copy, the masters and the optimizer state. */
static gboolean
mirror_group (MixprecEngine *self,
              Group         *g,
              GError       **error)
{
  guint64 part = g->own_end - g->own_begin;
  guint64 n_state = g->state_sharded ? part : g->padded;
  guint64 n_working = g->working_sharded ? part : g->padded;

  _mixprec_engine_drop_mirrors (g);
  g->mirrors = g_array_new (FALSE, FALSE, sizeof (HostMirror));
  if (!add_mirror (g, g->working, n_working * mixprec_dtype_get_size (g->dtypes.working), error) ||
      !add_mirror (g, g->master, n_state * sizeof (gfloat), error))
    return FALSE;
  for (guint k = 0; k < mixprec_feature_get_n_state_slots (self->optimizer); k++)
    if (!add_mirror (g, g->states[k], n_state * sizeof (gfloat), error))
      return FALSE;
  return TRUE;
}

/* The host address of device address @p inside one of @g's mirrors;
 * @p itself on the host. */
static gpointer
host_view (Group *g, gconstpointer p)
{
  if (g->mirrors == NULL || p == NULL)
    return (gpointer) p;
  for (guint i = 0; i < g->mirrors->len; i++)
    {
      HostMirror *m = &g_array_index (g->mirrors, HostMirror, i);
      const guint8 *base = m->device;

      if ((const guint8 *) p >= base && (const guint8 *) p <= base + m->bytes)
        return (guint8 *) m->host + ((const guint8 *) p - base);
    }
  g_return_val_if_reached (NULL);
}

/* Writes the mirrors back to the device (after a checkpoint was loaded
 * into them) and drops them. */
static gboolean
upload_mirrors (Group   *g,
                GError **error)
{
  gboolean ok = TRUE;

  for (guint i = 0; g->mirrors != NULL && i < g->mirrors->len && ok; i++)
    {
      HostMirror *m = &g_array_index (g->mirrors, HostMirror, i);

      ok = _mixprec_device_copy (g->device, m->device, m->host, m->bytes,
                                 MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error);
    }
  _mixprec_engine_drop_mirrors (g);
  return ok;
}

GArray *
_mixprec_engine_get_shards (MixprecEngine *self,
                            GError       **error)
{
  GArray *shards;
  guint n_slots;

  if (!mixprec_engine_prepare (self, error))
    return NULL;
  /* Fresh host copies for every call: the device's values move on. */
  for (guint j = 0; j < self->groups->len; j++)
    _mixprec_engine_drop_mirrors (g_ptr_array_index (self->groups, j));
  n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  shards = g_array_sized_new (FALSE, TRUE, sizeof (_MixprecEngineShard), self->params->len);
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);
      Group *g = g_ptr_array_index (self->groups, s->group);
      const Segment *seg = _mixprec_engine_segment_of (g, s->offset);
      guint64 numel = mixprec_param_get_numel (p);
      /* A checkpoint stores each element once: across ranks, each saves its
       * partition, whatever the stage keeps besides. */
      guint64 lo = self->world > 1 ? MAX (g->own_begin, s->offset) : s->offset;
      guint64 hi = self->world > 1 ? MIN (g->own_end, s->offset + numel) : s->offset + numel;
      _MixprecEngineShard shard = { 0 };

      if (hi < lo)
        hi = lo;
      if (g->device != NULL && g->mirrors == NULL && !mirror_group (self, g, error))
        {
          g_array_unref (shards);
          return NULL;
        }
      shard.param = p;
      shard.begin = lo - s->offset;
      shard.end = hi - s->offset;
      shard.master = seg->master != NULL ? host_view (g, seg->master + (lo - seg->master_base)) : NULL;
      shard.working = host_view (g, _mixprec_engine_at (seg->working, g->dtypes.working, lo - seg->working_base));
      shard.working_dtype = g->dtypes.working;
      shard.n_state_slots = MIN (n_slots, G_N_ELEMENTS (shard.states));
      for (guint k = 0; k < shard.n_state_slots; k++)
        shard.states[k] = host_view (g, g->states[k] + _mixprec_engine_state_index (g, lo));
      g_array_append_val (shards, shard);
    }
  return shards;
}

void
_mixprec_engine_get_counters (MixprecEngine          *self,
                              _MixprecEngineCounters *counters)
{
  counters->steps = self->steps;
  counters->applied_steps = self->applied_steps;
  counters->skipped_steps = self->skipped_steps;
  counters->seed = self->seed;
}

void
_mixprec_engine_set_counters (MixprecEngine                *self,
                              const _MixprecEngineCounters *counters)
{
  self->steps = counters->steps;
  self->applied_steps = counters->applied_steps;
  self->skipped_steps = counters->skipped_steps;
  self->seed = counters->seed;
}

MixprecLrSchedule *
_mixprec_engine_get_schedule (MixprecEngine *self)
{
  return self->schedule;
}

MixprecFeature *
_mixprec_engine_get_optimizer (MixprecEngine *self)
{
  return self->optimizer;
}

guint
_mixprec_engine_get_rank (MixprecEngine *self)
{
  return self->rank;
}

guint
_mixprec_engine_get_world_size (MixprecEngine *self)
{
  return self->world;
}

guint
_mixprec_engine_get_zero_stage (MixprecEngine *self)
{
  return mixprec_config_get_zero_stage (self->config);
}

gboolean
_mixprec_engine_barrier (MixprecEngine *self,
                         GError       **error)
{
  GError *local = NULL;

  if (self->comm == NULL)
    return TRUE;
  if (!mixprec_comm_barrier (self->comm, &local))
    return _mixprec_engine_comm_failed (error, local, "barrier");
  return TRUE;
}

/* Makes a buffer of the group's element space whole on every rank after
 * each rank wrote its partition of it (ZeRO-0 keeps whole copies). */
static gboolean
gather_partitions (MixprecEngine *self,
                   Group         *g,
                   gpointer       buffer,
                   MixprecDType   dtype,
                   GError       **error)
{
  GError *local = NULL;

  if (!mixprec_comm_all_gather (self->comm, _mixprec_engine_at (buffer, dtype, g->own_begin), buffer,
                                g->own_end - g->own_begin, dtype, &local))
    return _mixprec_engine_comm_failed (error, local, "gathering restored values");
  return TRUE;
}

gboolean
_mixprec_engine_refresh_working (MixprecEngine *self,
                                 GError       **error)
{
  gboolean stochastic = self->stochastic && self->applied_steps > 0;

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  mixprec_engine_release_all (self);
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      const Segment *seg = &g_array_index (g->segments, Segment, 0);
      guint64 lo = self->world > 1 ? g->own_begin : 0;
      guint64 hi = self->world > 1 ? MIN (g->own_end, g->numel) : g->numel;

      /* On a device, what was restored sits in the host mirrors. */
      if (!upload_mirrors (g, error))
        return FALSE;

      if (self->world > 1 && !g->state_sharded)
        {
          /* ZeRO-0 across ranks: masters and state are whole everywhere,
           * but each rank restored only its partition. */
          if (g->master != NULL &&
              !gather_partitions (self, g, g->master, MIXPREC_DTYPE_FLOAT32, error))
            return FALSE;
          for (guint k = 0; g->states[k] != NULL; k++)
            if (!gather_partitions (self, g, g->states[k], MIXPREC_DTYPE_FLOAT32, error))
              return FALSE;
        }
      if (g->external)
        {
          for (guint k = 0; k < g->segments->len; k++)
            {
              const Segment *c = &g_array_index (g->segments, Segment, k);

              if (c->master != NULL && c->master != (gpointer) c->working &&
                  !mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, c->master, g->dtypes.working,
                                          c->working, c->numel,
                                          MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
                return FALSE;
            }
          continue;
        }
      if (self->world > 1 && !g->state_sharded)
        hi = g->numel, lo = 0;
      /* Round as the last applied step did, so a resumed run continues
       * bit for bit: with stochastic rounding its seed and the element's
       * position in the group pick the same random bits. */
      if (seg->master != NULL && seg->master != (gpointer) seg->working && lo < hi &&
          !_mixprec_device_convert (g->device, seg->master + (lo - seg->master_base), MIXPREC_DTYPE_FLOAT32,
                                    _mixprec_engine_at (seg->working, g->dtypes.working, lo - seg->working_base),
                                    g->dtypes.working, hi - lo,
                                    stochastic ? MIXPREC_ROUNDING_STOCHASTIC : MIXPREC_ROUNDING_NEAREST_EVEN,
                                    stochastic ? _mixprec_engine_step_seed (self, g->index) : 0, lo, error))
        return FALSE;
      /* Without a separate master (FP32 or bf16-only working copies) each
       * rank restored its partition of the working copy itself. */
      if (self->world > 1 && !g->working_sharded &&
          (g->state_sharded || seg->master == NULL || seg->master == (gpointer) seg->working) &&
          !gather_partitions (self, g, g->working, g->dtypes.working, error))
        return FALSE;
    }
  _mixprec_engine_clear_gradients (self);
  return TRUE;
}
