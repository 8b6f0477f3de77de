/* mixprec-engine-whole.c — the working copies made whole again across
 * ranks after each rank wrote its slices: every unit's slices all-gathered
 * (ZeRO-1/2), or the persistent units' (ZeRO-3). */
#include "config.h"

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-comm-private.h"
#include "mixprec-engine-private.h"

/* Collectives started but not waited for, at most this many. */
#define MAX_GATHERS_IN_FLIGHT 8

gboolean
_mixprec_engine_gather_slices (MixprecEngine *self,
                               Group         *g,
                               gconstpointer  local,
                               gpointer       flat,
                               MixprecDType   dtype,
                               const gchar   *what,
                               GError       **error)
{
  g_autoptr(GPtrArray) requests = g_ptr_array_new_with_free_func ((GDestroyNotify) mixprec_comm_request_free);
  GError *failure = NULL;

  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  for (guint k = 0; k < g->units->len && failure == NULL; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 slice = UNIT_SLICE (self, u);
      gconstpointer send = local != NULL ? _mixprec_engine_at ((gpointer) local, dtype, u->local)
                                         : _mixprec_engine_flat_at (self, u, flat, dtype, self->rank * slice);
      MixprecCommRequest *req;

      if (slice == 0)
        continue;
      if (requests->len == MAX_GATHERS_IN_FLIGHT)
        {
          mixprec_comm_request_wait (g_ptr_array_index (requests, 0), &failure);
          g_ptr_array_remove_index (requests, 0);
          if (failure != NULL)
            break;
        }
      _mixprec_comm_count_next_as (self->comm, flat == g->grad ? _MIXPREC_COMM_GRADIENTS
                                                                : _MIXPREC_COMM_WEIGHTS);
      req = mixprec_comm_all_gather_start (self->comm, send, _mixprec_engine_flat_at (self, u, flat, dtype, 0),
                                           slice, dtype, &failure);
      if (req != NULL)
        g_ptr_array_add (requests, req);
    }
  for (guint i = 0; i < requests->len; i++)
    {
      GError *local_error = NULL;

      if (!mixprec_comm_request_wait (g_ptr_array_index (requests, i), &local_error))
        {
          if (failure == NULL)
            failure = local_error;
          else
            g_error_free (local_error);
        }
    }
  if (failure != NULL)
    return _mixprec_engine_comm_failed (error, failure, what);
  return TRUE;
}

/* ZeRO-3: the whole copy of persistent unit @u from every rank's slice. */
static gboolean
refresh_persistent_unit (MixprecEngine *self,
                         Group         *g,
                         const Unit    *u,
                         GError       **error)
{
  GError *local = NULL;
  gpointer whole;
  gconstpointer send;

  if (g->persistent == NULL || !u->persistent || u->padded == 0)
    return TRUE;
  whole = _mixprec_engine_at (g->persistent, g->dtypes.working, u->persist_at);
  /* offload_param: the slice comes up from host memory first. */
  send = _mixprec_engine_offload_slice_send (self, g, u, g->working, whole, error);
  if (send == NULL || !_mixprec_engine_before_comm (self, error))
    return FALSE;
  _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_WEIGHTS);
  if (!mixprec_comm_all_gather (self->comm, send, whole, UNIT_SLICE (self, u), g->dtypes.working, &local))
    return _mixprec_engine_comm_failed (error, local, "gathering persistent parameters");
  return TRUE;
}

/* ZeRO-3: the whole copies of persistent units from every rank's slice. */
static gboolean
refresh_persistent (MixprecEngine *self,
                    Group         *g,
                    GError       **error)
{
  for (guint k = 0; g->persistent != NULL && k < g->units->len; k++)
    if (!refresh_persistent_unit (self, g, &g_array_index (g->units, Unit, k), error))
      return FALSE;
  return TRUE;
}

/* After the optimizer wrote this rank's slices of the working copies:
 * every rank's copies whole again (ZeRO-1/2), or the persistent ones
 * (ZeRO-3). */
gboolean
_mixprec_engine_refresh_whole (MixprecEngine *self,
                               GError       **error)
{
  if (self->world == 1 || self->stage == 0)
    return TRUE;
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      if (g->working_local ? !refresh_persistent (self, g, error)
                           : !_mixprec_engine_gather_slices (self, g, NULL, g->working, g->dtypes.working,
                                                             "gathering the updated working copies", error))
        return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_engine_refresh_whole_unit (MixprecEngine *self,
                                    Group         *g,
                                    const Unit    *u,
                                    GError       **error)
{
  guint64 slice = UNIT_SLICE (self, u);
  GError *local = NULL;

  if (self->world == 1 || self->stage == 0)
    return TRUE;
  if (g->working_local)
    return refresh_persistent_unit (self, g, u, error);
  if (slice == 0)
    return TRUE;
  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  if (!mixprec_comm_all_gather (self->comm,
                                _mixprec_engine_flat_at (self, u, g->working, g->dtypes.working,
                                                         self->rank * slice),
                                _mixprec_engine_flat_at (self, u, g->working, g->dtypes.working, 0),
                                slice, g->dtypes.working, &local))
    return _mixprec_engine_comm_failed (error, local, "gathering the updated working copies");
  return TRUE;
}
