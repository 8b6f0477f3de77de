/* mixprec-engine-norm.c — this rank's contribution to the gradient norm:
 * the sum of squares of each fixed block of its reduced gradients, for
 * the groups whose intake did not sum them already. The blocks are what
 * the agreement (mixprec-engine-agree.c) gathers from every rank. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"

typedef struct {
  MixprecEngine *engine;
  Group *group;
  GError *error;             /* the first failure of the device's kernels */
} NormJob;

static void
keep_error (NormJob *job, GError *error)
{
  if (!g_atomic_pointer_compare_and_exchange (&job->error, NULL, error))
    g_error_free (error);
}

static void
sumsq_piece (Group *g, const Segment *seg, guint64 begin, guint64 n, gpointer data)
{
  gdouble *sum = data;

  *sum += _mixprec_kernel_sumsq_best (_mixprec_engine_at (seg->grad, g->dtypes.grad, begin - seg->offset),
                                      g->dtypes.grad, n);
}

/* Gradients read in place on one process, in memory the caller owns (a
 * buffer per parameter): a block may span several buffers, summed piece
 * by piece. Host memory only (caller-owned memory is refused on a device). */
static void
sumsq_pieces (Group *g, const Unit *u, guint64 b, guint64 n, gdouble *out)
{
  gdouble sum = 0.0;

  _mixprec_engine_for_each_piece (g, u->flat + b, u->flat + b + n, sumsq_piece, &sum);
  *out = sum;
}

/* Blocks [first, end) of the group: each unit's run of them in one call
 * of the device's multi-block kernel over the real elements of this
 * rank's slice (so each block is the one a single process sums), zeros
 * for blocks of padding only. */
static void
sumsq_blocks (gsize first, gsize end, gpointer data)
{
  NormJob *job = data;
  MixprecEngine *self = job->engine;
  Group *g = job->group;
  _MixprecDevice *device = g->device;
  gboolean in_place = self->world == 1 && g->accum == NULL;

  for (gsize j = first; j < end; j++)
    {
      const Unit *u = _mixprec_engine_unit_of_block (g, j);
      guint k = (guint) (u - &g_array_index (g->units, Unit, 0));
      guint64 next = k + 1 < g->units->len ? g_array_index (g->units, Unit, k + 1).first_block : g->norm.n_blocks;
      guint64 run = MIN ((guint64) end, next) - j;
      guint64 b = (j - u->first_block) * _MIXPREC_SUMSQ_BLOCK;
      guint64 real = _mixprec_engine_real_in_slice (self, u);
      guint64 n = real > b ? MIN (run * _MIXPREC_SUMSQ_BLOCK, real - b) : 0;
      guint64 summed = (n + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      MixprecDeviceRangeV1 range = { NULL, 0, 0 };
      GError *error = NULL;
      MixprecDType dtype;

      /* Summed at intake (see mixprec-engine-reduce.c). */
      if (in_place && u->intake.summed)
        {
          j += run - 1;
          continue;
        }
      if (in_place && g->segments->len > 1)
        {
          for (guint64 i = 0; i < summed; i++)
            sumsq_pieces (g, u, b + i * _MIXPREC_SUMSQ_BLOCK,
                          MIN (_MIXPREC_SUMSQ_BLOCK, n - i * _MIXPREC_SUMSQ_BLOCK), g->norm.blocks + j + i);
        }
      else if (n > 0)
        {
          if (in_place)
            {
              const Segment *seg = &g_array_index (g->segments, Segment, 0);

              dtype = g->dtypes.grad;
              range.data = _mixprec_engine_at (seg->grad, dtype, u->flat + b - seg->offset);
            }
          else
            {
              gconstpointer src = _mixprec_engine_slice_source (self, g, u, &dtype);

              range.data = _mixprec_engine_at ((gpointer) src, dtype, b);
            }
          range.dtype = (MixprecPluginDType) dtype;
          range.n = n;
          if (!_mixprec_device_sumsq_blocks (device, &range, 1, _MIXPREC_SUMSQ_BLOCK, g->norm.blocks + j, &error))
            keep_error (job, error);
        }
      if (summed < run &&
          !_mixprec_device_zero (device, g->norm.blocks + j + summed, (run - summed) * sizeof (gdouble), &error))
        keep_error (job, error);
      j += run - 1;
    }
}

gboolean
_mixprec_engine_norm_blocks (MixprecEngine *self,
                             Group         *g,
                             GError       **error)
{
  NormJob job = { self, g, NULL };

  /* Summed by the last micro-step's fold. */
  if (g->norm.ready)
    return TRUE;
  _mixprec_device_dispatch (g->device, g->norm.n_blocks, 1, 1, sumsq_blocks, &job);
  if (job.error != NULL)
    {
      g_propagate_error (error, job.error);
      return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- the norm's part */

gboolean
_mixprec_engine_norm_layout (MixprecEngine *self,
                             Group         *g,
                             guint64        n_doubles,
                             GError       **error)
{
  /* Across ranks the buffer holds this rank's blocks, then every rank's. */
  g->norm.n_blocks = self->world > 1 ? n_doubles / (1 + self->world) : n_doubles;
  g->norm.blocks = _mixprec_engine_alloc (self, self->device, n_doubles, sizeof (gdouble), BUF_NORM, error);
  return g->norm.blocks != NULL;
}

void
_mixprec_engine_norm_set_ready (Group    *g,
                                gboolean  ready)
{
  g->norm.ready = ready;
}

void
_mixprec_engine_norm_free (MixprecEngine *self,
                           Group         *g)
{
  _mixprec_engine_free (self, g->device, g_steal_pointer (&g->norm.blocks));
}
