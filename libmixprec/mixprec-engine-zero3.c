/* mixprec-engine-zero3.c — ZeRO-3 parameter gathering, unit by unit, with
 * a bounded prefetch window. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-comm-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- ZeRO-3 */

void
_mixprec_engine_zero3_clear (MixprecEngine *self,
                             Group         *g)
{
  for (guint k = 0; g->units != NULL && k < g->units->len; k++)
    {
      Unit *u = &g_array_index (g->units, Unit, k);

      if (u->zero3.gathering != NULL)
        mixprec_comm_request_wait (u->zero3.gathering, NULL);
      g_clear_pointer (&u->zero3.gathering, mixprec_comm_request_free);
      _mixprec_engine_zeropp_finish_gather (self, g, u, FALSE);
      _mixprec_engine_free (self, g->device, g_steal_pointer (&u->zero3.gathered));
    }
}

static void
point_params (MixprecEngine *self, Group *g, const Unit *u, gpointer base)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);

  /* FP8 groups gather their FP8 copies instead of the working copies. */
  if (g->fp8.enabled)
    {
      _mixprec_engine_fp8_point (self, g, u, base);
      return;
    }
  for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      s->working = base != NULL ? (guint8 *) base + (s->offset - u->flat) * wsize : NULL;
    }
}

static gboolean
start_gather (MixprecEngine *self,
              Group         *g,
              Unit          *u,
              GError       **error)
{
  GError *local = NULL;
  gconstpointer send;

  if (g->fp8.enabled)
    {
      /* The FP8 slices (and MX scales), at once: half the bytes of bf16. */
      u->zero3.gathered = _mixprec_engine_alloc (self, NULL, _mixprec_engine_fp8_unit_bytes (self, g, u), 1,
                                           BUF_FP8_GATHERED, error);
      if (u->zero3.gathered == NULL)
        return FALSE;
      if (!_mixprec_engine_fp8_gather_unit (self, g, u, u->zero3.gathered, error))
        {
          _mixprec_engine_free (self, NULL, g_steal_pointer (&u->zero3.gathered));
          return FALSE;
        }
      self->live_elements += u->padded;
      return TRUE;
    }
  u->zero3.gathered = _mixprec_engine_alloc (self, g->device, u->padded, mixprec_dtype_get_size (g->dtypes.working),
                                       BUF_GATHERED, error);
  if (u->zero3.gathered == NULL)
    return FALSE;
  /* hpZ: gathered once over the world this micro-step, then inside the
   * group, from the parts its ranks kept (mixprec-engine-hpz.c). */
  if (_mixprec_engine_hpz_ready (g, u))
    {
      if (!_mixprec_engine_before_comm (self, error) ||
          (u->zero3.gathering = _mixprec_engine_hpz_gather_start (self, g, u, &local)) == NULL)
        {
          _mixprec_engine_free (self, g->device, g_steal_pointer (&u->zero3.gathered));
          return local == NULL ? FALSE
                               : _mixprec_engine_comm_failed (error, local, "gathering a ZeRO-3 parameter unit "
                                                              "inside its hpZ group");
        }
      self->live_elements += u->padded;
      return TRUE;
    }
  /* offload_param: the slice comes up from host memory first. ZeRO++
   * qwZ (refused with working copies on a device, so never offloaded
   * ones): int8 codes and block scales travel instead, dequantized into
   * the gathered copy when they have arrived (finish_gather). */
  send = g->zeropp.weights ? u->zero3.gathered
                           : _mixprec_engine_offload_slice_send (self, g, u, g->working, u->zero3.gathered, error);
  if (send == NULL || !_mixprec_engine_before_comm (self, error))
    {
      _mixprec_engine_free (self, g->device, g_steal_pointer (&u->zero3.gathered));
      return FALSE;
    }
  if (g->zeropp.weights)
    u->zero3.gathering = _mixprec_engine_zeropp_gather_start (self, g, u, &local);
  else if (g->gather_host_ranks > 0)
    {
      /* over hosts, two levels (mixprec-engine-hosts.c): this rank's
       * slice at its place first */
      gsize bytes = UNIT_SLICE (self, u) * mixprec_dtype_get_size (g->dtypes.working);
      guint8 *place = (guint8 *) u->zero3.gathered + self->rank * bytes;

      if (send != place)
        memcpy (place, send, bytes);
      u->zero3.gathering = _mixprec_engine_gather2_start (self, g->gather_host_ranks, u->zero3.gathered,
                                                          bytes, &local);
      u->zero3.second_level = u->zero3.gathering != NULL;
    }
  else
    {
      _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_WEIGHTS);
      u->zero3.gathering = mixprec_comm_all_gather_start (self->comm, send, u->zero3.gathered,
                                                            UNIT_SLICE (self, u), g->dtypes.working, &local);
    }
  if (u->zero3.gathering == NULL)
    {
      _mixprec_engine_free (self, g->device, g_steal_pointer (&u->zero3.gathered));
      return _mixprec_engine_comm_failed (error, local, "gathering a ZeRO-3 parameter unit");
    }
  self->live_elements += u->padded;
  if (!g->zeropp.weights)
    self->gathered_bytes += (u->padded / self->world) * (self->world - 1) *
                            mixprec_dtype_get_size (g->dtypes.working);
  return TRUE;
}

/* Waits for @u's gather, if one is on its way. */
static gboolean
finish_gather (MixprecEngine *self,
               Group         *g,
               Unit          *u,
               GError       **error)
{
  GError *local = NULL;
  gboolean ok;

  if (u->zero3.gathering == NULL)
    return TRUE;
  ok = mixprec_comm_request_wait (u->zero3.gathering, &local);
  g_clear_pointer (&u->zero3.gathering, mixprec_comm_request_free);
  if (u->zero3.prefetched)
    {
      self->prefetching -= u->padded;
      u->zero3.prefetched = FALSE;
    }
  /* over hosts: the second level, inside the host */
  if (u->zero3.second_level)
    {
      u->zero3.second_level = FALSE;
      if (ok)
        ok = g->zeropp.weights
             ? _mixprec_engine_gather2_finish (self, g->gather_host_ranks, u->zeropp.wire, u->zeropp.chunk, &local)
             : _mixprec_engine_gather2_finish (self, g->gather_host_ranks, u->zero3.gathered,
                                               UNIT_SLICE (self, u) * mixprec_dtype_get_size (g->dtypes.working),
                                               &local);
    }
  _mixprec_engine_zeropp_finish_gather (self, g, u, ok);
  if (!ok)
    return _mixprec_engine_comm_failed (error, local, "gathering a ZeRO-3 parameter unit");
  _mixprec_engine_hpz_keep (self, g, u);
  return TRUE;
}

static void
drop_unit (MixprecEngine *self, Group *g, Unit *u)
{
  finish_gather (self, g, u, NULL);
  if (u->zero3.gathered == NULL)
    return;
  point_params (self, g, u, NULL);
  _mixprec_engine_free (self, g->device, g_steal_pointer (&u->zero3.gathered));
  self->live_elements -= u->padded;
  u->zero3.gather_count = 0;
}

/* The unit to gather for @param, or NULL when there is nothing to gather
 * (below ZeRO-3, or a persistent parameter every rank holds whole). */
static Unit *
gatherable (MixprecEngine *self, MixprecParam *param)
{
  Unit *u;

  if (self->stage < 3)
    return NULL;
  u = _mixprec_engine_unit_of (self, param);
  return u->persistent ? NULL : u;
}

/**
 * mixprec_engine_prefetch:
 * @self: a #MixprecEngine
 * @param: a parameter of @self
 * @error: return location for a #GError
 *
 * Under ZeRO-3, starts gathering the unit @param belongs to (the
 * parameter, or it and its small neighbours) in the background, so a
 * later mixprec_engine_gather() finds it ready. Prefetches stay within
 * `stage3_prefetch_bucket_size` elements on their way and
 * `stage3_max_live_parameters` gathered in all; one beyond either is left
 * to mixprec_engine_gather(). Collective: every rank prefetches the same
 * parameters in the same order. Does nothing below ZeRO-3, for parameters
 * below `stage3_param_persistence_threshold` (every rank keeps them
 * whole), or when the unit is gathered or on its way.
 *
 * Returns: %TRUE on success
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_prefetch (MixprecEngine *self,
                         MixprecParam  *param,
                         GError       **error)
{
  Unit *u;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (MIXPREC_IS_PARAM (param), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  u = gatherable (self, param);
  if (u == NULL || u->zero3.gathered != NULL)
    return TRUE;
  /* The prefetch window and the live limit bound what is gathered ahead;
   * a prefetch beyond them is left to gather(). */
  if (self->prefetching + u->padded > mixprec_config_get_prefetch_bucket_size (self->config) ||
      self->live_elements + u->padded > mixprec_config_get_max_live_parameters (self->config))
    return TRUE;
  if (!start_gather (self, _mixprec_engine_group_of (self, param), u, error))
    return FALSE;
  u->zero3.prefetched = TRUE;
  self->prefetching += u->padded;
  return TRUE;
}

/**
 * mixprec_engine_gather:
 * @self: a #MixprecEngine
 * @param: a parameter of @self
 * @error: return location for a #GError
 *
 * Under ZeRO-3, makes the whole working copy of @param (and of the other
 * parameters of its unit) available through
 * mixprec_param_get_working_data() until the matching
 * mixprec_engine_release(); for an fp8 parameter (mixprec_param_is_fp8())
 * the whole FP8 copy and its MX block scales instead, through
 * mixprec_param_get_fp8_data(), in half the bytes of bf16 (the working
 * copy stays sharded): one all-gather of the unit's slices, so the
 * memory it takes is the unit's, not the model's. Collective: every rank
 * gathers the same parameters in the same order. Gathers nest; below
 * ZeRO-3, and for persistent parameters, the working copies are always
 * whole and this does nothing.
 *
 * Returns: %TRUE on success
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_gather (MixprecEngine *self,
                       MixprecParam  *param,
                       GError       **error)
{
  Group *g;
  Unit *u;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (MIXPREC_IS_PARAM (param), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  u = gatherable (self, param);
  if (u == NULL)
    return TRUE;
  g = _mixprec_engine_group_of (self, param);
  if (u->zero3.gather_count == 0)
    {
      if (u->zero3.gathered == NULL && !start_gather (self, g, u, error))
        return FALSE;
      if (!finish_gather (self, g, u, error))
        {
          drop_unit (self, g, u);
          return FALSE;
        }
      point_params (self, g, u, u->zero3.gathered);
    }
  u->zero3.gather_count++;
  return TRUE;
}

/**
 * mixprec_engine_release:
 * @self: a #MixprecEngine
 * @param: a parameter gathered with mixprec_engine_gather()
 *
 * Ends one mixprec_engine_gather() of @param's unit; when the last one
 * ends, the whole working copy is freed and only this rank's slice stays.
 * Does nothing below ZeRO-3.
 *
 * Since: 1.0
 */
void
mixprec_engine_release (MixprecEngine *self,
                        MixprecParam  *param)
{
  Unit *u;

  g_return_if_fail (MIXPREC_IS_ENGINE (self));
  g_return_if_fail (MIXPREC_IS_PARAM (param));

  if (!self->prepared)
    return;
  u = gatherable (self, param);
  if (u == NULL || u->zero3.gather_count == 0)
    return;
  if (--u->zero3.gather_count == 0)
    drop_unit (self, _mixprec_engine_group_of (self, param), u);
}

/**
 * mixprec_engine_gather_all:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Gathers every parameter (see mixprec_engine_gather()); for models small
 * enough to hold whole during the forward and backward passes.
 *
 * Returns: %TRUE on success
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_gather_all (MixprecEngine *self,
                           GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      Unit *u = gatherable (self, p);

      /* Once per unit: its first parameter stands for it. */
      if (u != NULL && _mixprec_engine_group_of (self, p)->params->pdata[u->first_param] == p &&
          !mixprec_engine_gather (self, p, error))
        return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_engine_release_all:
 * @self: a #MixprecEngine
 *
 * Releases every gathered parameter completely, prefetches included;
 * mixprec_engine_step() does this itself, since the step changes the
 * working copies.
 *
 * Since: 1.0
 */
void
mixprec_engine_release_all (MixprecEngine *self)
{
  g_return_if_fail (MIXPREC_IS_ENGINE (self));

  if (self->stage < 3 || !self->prepared)
    return;
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      for (guint k = 0; k < g->units->len; k++)
        drop_unit (self, g, &g_array_index (g->units, Unit, k));
    }
}

/**
 * mixprec_engine_get_gathered_bytes:
 * @self: a #MixprecEngine
 *
 * The bytes this rank has received from the other ranks in ZeRO-3
 * gathers (mixprec_engine_gather() and mixprec_engine_prefetch()) since
 * @self was made: (world - 1) / world of each gathered unit, in the
 * working dtype, or for fp8 parameters (mixprec_param_is_fp8()) in FP8
 * with their MX block scales, or under `zero_quantized_weights` as int8
 * codes with their FP32 block scales; a gather inside an hpZ group
 * (`zero_hpz_partition_size` k) receives (k - 1) / k of the unit in the
 * working dtype. Benchmarks divide it by the steps.
 *
 * Returns: the bytes; 0 below ZeRO-3 and on one process
 *
 * Since: 1.1
 */
guint64
mixprec_engine_get_gathered_bytes (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 0);

  return self->gathered_bytes;
}
