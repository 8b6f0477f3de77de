/* mixprec-engine-zero3.c — ZeRO-3 parameter gathering, and gathering the
 * master weights of sharded state. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

/* ---------------------------------------------------------------- ZeRO-3 */

Group *
_mixprec_engine_group_of (MixprecEngine *self, MixprecParam *param)
{
  return g_ptr_array_index (self->groups, _mixprec_param_get_storage (param)->group);
}

static gboolean
start_gather (MixprecEngine *self,
              Group         *g,
              GError       **error)
{
  guint64 part = g->own_end - g->own_begin;
  GError *local = NULL;

  if (g->gathered == NULL &&
      (g->gathered = _mixprec_engine_alloc_buffer (g->device, g->padded, mixprec_dtype_get_size (g->dtypes.working),
                                   "gathered working copies", error)) == NULL)
    return FALSE;
  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  g->prefetch = mixprec_comm_all_gather_start (self->comm, g->working, g->gathered, part,
                                               g->dtypes.working, &local);
  if (g->prefetch == NULL)
    return _mixprec_engine_comm_failed (error, local, "gathering a ZeRO-3 parameter group");
  return TRUE;
}

static void
point_params (Group *g, gpointer base)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);

  for (guint i = 0; i < g->params->len; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      s->working = base != NULL ? (guint8 *) base + s->offset * wsize : NULL;
    }
}

/**
 * mixprec_engine_prefetch:
 * @self: a #MixprecEngine
 * @param: a parameter of @self
 * @error: return location for a #GError
 *
 * Under ZeRO-3, starts gathering the group of parameters @param belongs to
 * in the background, so a later mixprec_engine_gather() finds it ready.
 * Collective: every rank prefetches the same groups in the same order. Does
 * nothing below ZeRO-3 or when the group is gathered or on its way.
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
  Group *g;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (MIXPREC_IS_PARAM (param), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  if (self->stage < 3)
    return TRUE;
  g = _mixprec_engine_group_of (self, param);
  if (g->gather_count > 0 || g->prefetch != NULL)
    return TRUE;
  return start_gather (self, g, error);
}

/**
 * mixprec_engine_gather:
 * @self: a #MixprecEngine
 * @param: a parameter of @self
 * @error: return location for a #GError
 *
 * Under ZeRO-3, makes the whole working copy of @param (and of the other
 * parameters of its group) available through
 * mixprec_param_get_working_data() until the matching
 * mixprec_engine_release(). Collective: every rank gathers the same
 * parameters in the same order. Gathers nest; below ZeRO-3 the working
 * copies are always whole and this does nothing.
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
  GError *local = NULL;
  gboolean ok;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (MIXPREC_IS_PARAM (param), FALSE);

  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  if (self->stage < 3)
    return TRUE;
  g = _mixprec_engine_group_of (self, param);
  if (g->gather_count == 0)
    {
      if (g->prefetch == NULL && !start_gather (self, g, error))
        return FALSE;
      ok = mixprec_comm_request_wait (g->prefetch, &local);
      g_clear_pointer (&g->prefetch, mixprec_comm_request_free);
      if (!ok)
        return _mixprec_engine_comm_failed (error, local, "gathering a ZeRO-3 parameter group");
      point_params (g, g->gathered);
    }
  g->gather_count++;
  return TRUE;
}

/**
 * mixprec_engine_release:
 * @self: a #MixprecEngine
 * @param: a parameter gathered with mixprec_engine_gather()
 *
 * Ends one mixprec_engine_gather() of @param's group; when the last one
 * ends, the whole working copy is freed and only this rank's partition
 * stays. Does nothing below ZeRO-3.
 *
 * Since: 1.0
 */
void
mixprec_engine_release (MixprecEngine *self,
                        MixprecParam  *param)
{
  Group *g;

  g_return_if_fail (MIXPREC_IS_ENGINE (self));
  g_return_if_fail (MIXPREC_IS_PARAM (param));

  if (self->stage < 3 || !self->prepared)
    return;
  g = _mixprec_engine_group_of (self, param);
  if (g->gather_count == 0)
    return;
  if (--g->gather_count == 0)
    {
      point_params (g, NULL);
      g_clear_pointer (&g->gathered, free);
    }
}

/**
 * mixprec_engine_gather_all:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Gathers every parameter group (see mixprec_engine_gather()); for models
 * small enough to hold whole during the forward and backward passes.
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
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      if (g->params->len > 0 && !mixprec_engine_gather (self, g_ptr_array_index (g->params, 0), error))
        return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_engine_release_all:
 * @self: a #MixprecEngine
 *
 * Releases every gathered parameter group completely; mixprec_engine_step()
 * does this itself, since the step changes the working copies.
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

      if (g->prefetch != NULL)
        {
          mixprec_comm_request_wait (g->prefetch, NULL);
          g_clear_pointer (&g->prefetch, mixprec_comm_request_free);
        }
      g->gather_count = 0;
      point_params (g, NULL);
      g_clear_pointer (&g->gathered, free);
    }
}

