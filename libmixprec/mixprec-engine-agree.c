/* mixprec-engine-agree.c — the step's one agreement across ranks: each
 * phase's contribution (the gradient norm's block sums from the intake or
 * the norm pass, the FP8 amaxes of delayed scaling) gathered from every
 * data-parallel rank, then over the model-parallel ranks, giving every
 * rank the same sum of squares, hence the same overflow flag. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-comm-private.h"

/* Gathers @n doubles from every rank, in rank order, over @comm (as raw
 * bytes: the comm moves floats, and gathering is exact). */
static gboolean
gather_doubles (MixprecEngine *self,
                MixprecComm   *comm,
                const gdouble *mine,
                gsize          n,
                gdouble       *all,
                GError       **error)
{
  GError *local = NULL;

  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  _mixprec_comm_count_next_as (comm, _MIXPREC_COMM_SCALARS);
  if (!mixprec_comm_all_gather (comm, mine, all, n * 2, MIXPREC_DTYPE_FLOAT32, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the gradient norm");
  return TRUE;
}

/* Delayed FP8 scaling: this rank's amaxes ride in the blocks' all-gather,
 * after its blocks. They are host values, so they ride only where the
 * blocks are host memory (on a device they are agreed in a MAX all-reduce
 * of their own, _mixprec_engine_fp8_agree_device()). */
static gboolean
gather_blocks_and_amaxes (MixprecEngine *self,
                          Group         *g,
                          GError       **error)
{
  gsize na = _mixprec_engine_fp8_n_amax (g), stride = g->norm.n_blocks + na;
  g_autofree gdouble *mine = g_new (gdouble, stride);
  g_autofree gdouble *every = g_new (gdouble, stride * self->world);

  memcpy (mine, g->norm.blocks, g->norm.n_blocks * sizeof (gdouble));
  _mixprec_engine_fp8_put_amax (g, mine + g->norm.n_blocks);
  if (self->world > 1)
    {
      if (!gather_doubles (self, self->comm, mine, stride, every, error))
        return FALSE;
      for (guint r = 0; r < self->world; r++)
        memcpy (g->norm.blocks + g->norm.n_blocks + (gsize) r * g->norm.n_blocks, every + (gsize) r * stride,
                g->norm.n_blocks * sizeof (gdouble));
    }
  else
    memcpy (every, mine, stride * sizeof (gdouble));
  _mixprec_engine_fp8_take_amax (g, every, self->world, stride, g->norm.n_blocks);
  return TRUE;
}

/* @g's blocks from every data-parallel rank added to @total in the order
 * of the units, and of the blocks inside them, rank after rank: the same
 * sum at every world size. */
static gboolean
agree_group (MixprecEngine *self,
             Group         *g,
             gboolean       on_host,
             gdouble       *total,
             GError       **error)
{
  guint64 n_all = self->world > 1 ? g->norm.n_blocks * self->world : g->norm.n_blocks;
  g_autofree gdouble *host = NULL;
  const gdouble *all;

  if (!_mixprec_engine_norm_blocks (self, g, error))
    return FALSE;
  if (on_host && _mixprec_engine_fp8_n_amax (g) > 0)
    {
      if (!gather_blocks_and_amaxes (self, g, error))
        return FALSE;
    }
  else if (self->world > 1 &&
           !gather_doubles (self, self->comm, g->norm.blocks, g->norm.n_blocks, g->norm.blocks + g->norm.n_blocks, error))
    return FALSE;
  all = self->world > 1 ? g->norm.blocks + g->norm.n_blocks : g->norm.blocks;
  if (!on_host)
    {
      GError *local = NULL;

      host = g_new (gdouble, MAX (n_all, 1));
      if (!_mixprec_device_copy (self->device, host, all, n_all * sizeof (gdouble),
                                 MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, &local))
        {
          g_propagate_prefixed_error (error, local, "reading the gradient norm: ");
          return FALSE;
        }
      all = host;
    }
  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 nb = (UNIT_SLICE (self, u) + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;

      for (guint r = 0; r < self->world; r++)
        for (guint64 b = 0; b < nb; b++)
          *total += all[r * g->norm.n_blocks + u->first_block + b];
    }
  return TRUE;
}

/* Over the model-parallel group: every rank's @total added in rank order,
 * and the agreed FP8 amaxes (none without fp8) MAX-ed, riding after each
 * rank's total where the values can be host memory (every
 * model-parallel rank holds the same number of them, see
 * mixprec-engine-fp8.c). */
static gboolean
agree_model_parallel (MixprecEngine *self,
                      gboolean       on_host,
                      gdouble       *total,
                      GError       **error)
{
  guint n = mixprec_comm_get_world_size (self->mp_comm);
  g_autofree gdouble *all = g_new0 (gdouble, n);
  gsize na = 0;

  for (guint j = 0; j < self->groups->len; j++)
    na += _mixprec_engine_fp8_n_amax (g_ptr_array_index (self->groups, j));
  if (on_host)
    {
      g_autofree gdouble *mine = g_new (gdouble, 1 + na);
      g_autofree gdouble *every = g_new (gdouble, (1 + na) * n);
      gsize at = 1;

      mine[0] = *total;
      for (guint j = 0; j < self->groups->len; j++)
        {
          Group *g = g_ptr_array_index (self->groups, j);

          for (guint i = 0; i < _mixprec_engine_fp8_n_amax (g); i++)
            mine[at++] = g->fp8.agreed[i];
        }
      if (!gather_doubles (self, self->mp_comm, mine, 1 + na, every, error))
        return FALSE;
      at = 1;
      for (guint j = 0; j < self->groups->len; j++)
        {
          Group *g = g_ptr_array_index (self->groups, j);

          _mixprec_engine_fp8_take_amax (g, every, n, 1 + na, at);
          at += _mixprec_engine_fp8_n_amax (g);
        }
      for (guint r = 0; r < n; r++)
        all[r] = every[(gsize) r * (1 + na)];
    }
  else
    {
      /* The communicator moves device memory. */
      if (self->norm_sums == NULL &&
          (self->norm_sums = _mixprec_engine_alloc (self, self->device, 1 + n, sizeof (gdouble),
                                                    BUF_NORM, error)) == NULL)
        return FALSE;
      if (!_mixprec_device_copy (self->device, self->norm_sums, total, sizeof *total,
                                 MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error) ||
          !gather_doubles (self, self->mp_comm, self->norm_sums, 1, self->norm_sums + 1, error) ||
          !_mixprec_device_copy (self->device, all, self->norm_sums + 1, n * sizeof (gdouble),
                                 MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error))
        return FALSE;
    }
  *total = 0.0;
  for (guint r = 0; r < n; r++)
    *total += all[r];
  return TRUE;
}

gboolean
_mixprec_engine_agree (MixprecEngine *self,
                       gdouble       *sumsq,
                       gboolean      *overflow,
                       GError       **error)
{
  /* Where the blocks live decides how they travel: host values ride
   * together in one gather; device memory moves through the device. */
  gboolean on_host = _mixprec_device_memory_is_host (self->device);
  gdouble total = 0.0;

  for (guint j = 0; j < self->groups->len; j++)
    if (!agree_group (self, g_ptr_array_index (self->groups, j), on_host, &total, error))
      return FALSE;
  if (!on_host && !_mixprec_engine_fp8_agree_device (self, error))
    return FALSE;
  if (self->mp_comm != NULL && !agree_model_parallel (self, on_host, &total, error))
    return FALSE;
  *sumsq = total;
  /* Non-finite exactly when some gradient is, on every rank alike. */
  *overflow = !isfinite (total);
  return TRUE;
}
