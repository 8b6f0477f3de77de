/* mixprec-engine-hpz.c — ZeRO++ hpZ (zero_optimization.
 * zero_hpz_partition_size = k): a secondary partition of the working
 * weights over groups of k consecutive ranks (a host's, as the ranks of
 * a host are numbered together), so that ZeRO-3's later gathers of a
 * micro-step stay inside the group.
 *
 * The first gather of a unit in a micro-step runs over the world, as
 * without hpZ (quantized under qwZ). When it completes, each rank keeps
 * part r % k of the gathered copy: the k ranks of a group hold the whole
 * unit between them. A later gather of the unit in the same micro-step
 * (the backward pass's) is then one all_to_all_v inside the group: each
 * rank sends its part to the other k - 1 and receives theirs. The parts
 * are the very bits the first gather gave, so the weights a backward pass
 * reads are those of its forward pass, with or without qwZ, and the run
 * computes exactly what it computes without hpZ; only where the bytes go
 * changes. DeepSpeed gathers the secondary partition again in int8 under
 * qwZ, which rounds the weights a second time in other blocks; here they
 * travel unquantized, inside the host.
 *
 * The parts are forgotten when a micro-step ends
 * (mixprec_engine_backward_done()) and wherever the working copies may
 * change (the step, setting masters, restoring a checkpoint), so the
 * next forward pass gathers over the world again, as DeepSpeed's does. */
#include "config.h"

#include <string.h>

#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-config-private.h"
#include "mixprec-comm-private.h"

static gboolean
refuse (GError      **error,
        const gchar  *format,
        ...) G_GNUC_PRINTF (2, 3);

static gboolean
refuse (GError      **error,
        const gchar  *format,
        ...)
{
  va_list args;
  g_autofree gchar *why = NULL;

  va_start (args, format);
  why = g_strdup_vprintf (format, args);
  va_end (args);
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
               "zero_optimization.zero_hpz_partition_size: %s", why);
  return FALSE;
}

gboolean
_mixprec_engine_hpz_layout (MixprecEngine *self,
                            Group         *g,
                            GError       **error)
{
  guint k = _mixprec_config_get_zero_hpz_partition_size (self->config);
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
  guint64 n = 0;

  g->hpz.size = 0;
  g->hpz.secondary = NULL;
  /* 0 and 1 are off; a group of the whole world is ZeRO-3's own
   * partition, whose gathers stay inside it already. */
  if (self->stage < 3 || self->world < 2 || k <= 1 || k == self->world)
    return TRUE;
  if (k > self->world || self->world % k != 0)
    return refuse (error, "%u: the groups of the secondary partition are %u consecutive ranks "
                   "each, which must divide the world of %u ranks", k, k, self->world);
  if (g->fp8.enabled)
    return refuse (error, "parameter group %u holds fp8 parameters, whose ZeRO-3 gathers move "
                   "FP8 copies; a secondary partition of them is not implemented (set it to "
                   "1, or leave these parameters' modules out of the fp8 section)", g->index);
  if (g->device != NULL)
    return refuse (error, "the secondary partition is kept for working copies in host memory "
                   "(mixprec.device \"cpu\"); on a device it is not implemented yet");
  if (!_mixprec_comm_has_all_to_all_v (self->comm))
    return refuse (error, "%u: the gathers inside a group need the communicator's "
                   "all_to_all_v (plugin ABI 1.7), which comm '%s' lacks; use comm-ucx or "
                   "comm-nccl of this release, or set it to 1", k,
                   mixprec_comm_get_backend (self->comm));
  for (guint i = 0; i < g->units->len; i++)
    {
      Unit *u = &g_array_index (g->units, Unit, i);

      u->hpz.valid = FALSE;
      u->hpz.at = n;
      if (!u->persistent)
        n += u->padded / k;
    }
  if (n > 0)
    {
      g->hpz.secondary = _mixprec_engine_alloc (self, NULL, n, wsize, BUF_HPZ, error);
      if (g->hpz.secondary == NULL)
        return FALSE;
    }
  self->buf_plan[BUF_HPZ] += n * wsize;
  g->hpz.size = k;
  return TRUE;
}

gboolean
_mixprec_engine_hpz_ready (const Group *g,
                           const Unit  *u)
{
  return g->hpz.size > 0 && u->hpz.valid;
}

void
_mixprec_engine_hpz_keep (MixprecEngine *self,
                          Group         *g,
                          Unit          *u)
{
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
  guint64 part = u->padded / MAX (g->hpz.size, 1);

  if (g->hpz.size == 0 || u->hpz.valid || u->persistent || u->zero3.gathered == NULL)
    return;
  memcpy ((guint8 *) g->hpz.secondary + u->hpz.at * wsize,
          (const guint8 *) u->zero3.gathered + (self->rank % g->hpz.size) * part * wsize,
          part * wsize);
  u->hpz.valid = TRUE;
}

MixprecCommRequest *
_mixprec_engine_hpz_gather_start (MixprecEngine *self,
                                  Group         *g,
                                  Unit          *u,
                                  GError       **error)
{
  guint k = g->hpz.size, first = self->rank / k * k;
  gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
  gsize part = u->padded / k * wsize;
  g_autofree guint *members = g_new (guint, k);
  g_autofree gsize *at = g_new (gsize, k);
  MixprecCommRequest *request;

  /* This rank's part, whole, to each member of the group (itself
   * included); member j's part is part j of the unit. */
  for (guint j = 0; j < k; j++)
    {
      members[j] = first + j;
      at[j] = j * part;
    }
  request = _mixprec_engine_exchange (self, _MIXPREC_COMM_WEIGHTS, (guint8 *) g->hpz.secondary + u->hpz.at * wsize,
                                      NULL, u->zero3.gathered, at, members, k, part, FALSE, error);
  if (request != NULL)
    self->gathered_bytes += (guint64) part * (k - 1);
  return request;
}

void
_mixprec_engine_hpz_forget (MixprecEngine *self)
{
  for (guint j = 0; self->groups != NULL && j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      for (guint i = 0; g->hpz.size > 0 && i < g->units->len; i++)
        g_array_index (g->units, Unit, i).hpz.valid = FALSE;
    }
}

void
_mixprec_engine_hpz_free_group (MixprecEngine *self,
                                Group         *g)
{
  _mixprec_engine_free (self, NULL, g_steal_pointer (&g->hpz.secondary));
  g->hpz.size = 0;
}
