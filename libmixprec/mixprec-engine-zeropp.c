/* mixprec-engine-zeropp.c — ZeRO++ under ZeRO-3: quantized weight
 * gathers (qwZ, zero_optimization.zero_quantized_weights) and quantized
 * gradient reduce-scatters (qgZ, zero_quantized_gradients).
 *
 * qwZ.
 * As DeepSpeed's partition_parameters.py does: each rank quantizes its
 * slice of a unit to int8 (or, with mixprec.quantized_weights_format, to
 * FP8 in the same blocks) with one FP32 scale per block (the blocks and
 * the arithmetic of numeric/numeric-zeropp.h, sized from the slice's
 * element count), one all-gather moves every rank's codes and scales,
 * and every rank dequantizes all of them, its own slice included, into
 * the gathered working copy. So every rank computes with the same bits,
 * and those bits are what the owner's slice would give anywhere. The
 * sharded working copy, the FP32 masters and the optimizer never see the
 * quantization: only the gathered copies the forward and backward
 * passes read do, and the next step's gather quantizes the updated
 * slice afresh.
 *
 * The blocks are cut within each rank's slice, so they depend on the
 * world size: at a given world size the gathered bits depend only on the
 * working values, and a checkpoint resumed at another world size (or
 * with qwZ switched on or off) resumes the same masters and working
 * copies — nothing quantized is saved — while its later gathers round
 * into other blocks.
 *
 * qgZ. Each reduce-scatter of the intake (a unit, or a window of one)
 * becomes: the send buffer's world runs quantized to int4 (or FP8, with
 * mixprec.quantized_gradients_format) in blocks of 512 (mixprec-zeropp.c), the communicator's all-to-all (comm ABI
 * revision 2), and on arrival the world's runs for this rank dequantized
 * and summed in FP32 in rank order into the reduce target — the order
 * and the first term (ACCUMULATE) of an unquantized reduce-scatter. One
 * level over every rank, on one host or several: DeepSpeed's hierarchy
 * (an intra-host all-to-all, a float16 sum requantized to int4, then an
 * inter-host all-to-all) is not run; with every rank on one host its
 * second level has one member. mixprec.json(5) says where this differs.
 *
 * LoCo, qgZ's error feedback, is mixprec-engine-loco.c. */
#include "config.h"

#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-config-private.h"
#include "mixprec-zeropp-private.h"
#include "mixprec-comm-private.h"

/* qgZ needs the communicator's all-to-all (comm ABI revision 2) and the
 * gradients in host memory, as qwZ its working copies. */
static gboolean
zeropp_gradients_layout (MixprecEngine *self,
                         Group         *g,
                         GError       **error)
{
  g_autoptr(GError) local = NULL;

  g->zeropp.gradients = FALSE;
  g->zeropp.loco_err = NULL;
  if (!_mixprec_config_get_zero_quantized_gradients (self->config) || self->stage < 3 ||
      self->world < 2)
    return TRUE;
  if (g->device != NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "zero_optimization.zero_quantized_gradients: quantized reduce-scatters run "
                   "on gradients in host memory (mixprec.device \"cpu\"); on a device they "
                   "are not implemented yet");
      return FALSE;
    }
  if (!_mixprec_comm_has_all_to_all (self->comm, &local))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "zero_optimization.zero_quantized_gradients: qgZ reduce-scatters gradients "
                   "through an all-to-all, which this communicator lacks: %s; use a "
                   "communicator of revision 2 (comm-ucx, comm-nccl) or turn "
                   "zero_quantized_gradients off", local->message);
      return FALSE;
    }
  g->zeropp.gradients = TRUE;
  g->zeropp.gradients_format = _mixprec_config_get_zeropp_gradients_format (self->config);
  return _mixprec_engine_loco_layout (self, g, error);
}

gboolean
_mixprec_engine_zeropp_layout (MixprecEngine *self,
                               Group         *g,
                               GError       **error)
{
  g->zeropp.weights = FALSE;
  /* hpZ: the secondary partition (mixprec-engine-hpz.c) */
  if (!_mixprec_engine_hpz_layout (self, g, error))
    return FALSE;
  if (!zeropp_gradients_layout (self, g, error))
    return FALSE;
  if (!_mixprec_config_get_zero_quantized_weights (self->config) || self->stage < 3 ||
      self->world < 2)
    return TRUE;
  if (g->fp8.enabled)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "zero_optimization.zero_quantized_weights: parameter group %u holds fp8 "
                   "parameters, whose ZeRO-3 gathers already move FP8 copies; quantizing "
                   "them again to int8 is not supported (turn zero_quantized_weights off, "
                   "or leave these parameters' modules out of the fp8 section)",
                   g->index);
      return FALSE;
    }
  if (g->device != NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "zero_optimization.zero_quantized_weights: quantized gathers run on "
                   "working copies in host memory (mixprec.device \"cpu\"); on a device "
                   "they are not implemented yet");
      return FALSE;
    }
  g->zeropp.weights = TRUE;
  g->zeropp.weights_format = _mixprec_config_get_zeropp_weights_format (self->config);
  return TRUE;
}

MixprecCommRequest *
_mixprec_engine_zeropp_gather_start (MixprecEngine *self,
                                     Group         *g,
                                     Unit          *u,
                                     GError       **error)
{
  guint64 slice = UNIT_SLICE (self, u);
  guint64 groups = _mixprec_zeropp_weight_groups (slice);
  MixprecCommRequest *request;
  guint8 *mine;

  if (groups == 0)
    {
      /* Slices are multiples of 4096 elements, which DeepSpeed's sizing
       * always cuts; this guards the rule, not a reachable input. */
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "zero_optimization.zero_quantized_weights: a slice of %" G_GUINT64_FORMAT
                   " elements cannot be cut into DeepSpeed's quantization blocks", slice);
      return NULL;
    }
  u->zeropp.groups = groups;
  /* Codes then scales; slices are even, so the chunk is whole 16-bit words. */
  u->zeropp.chunk = slice + groups * sizeof (gfloat);
  u->zeropp.wire = _mixprec_engine_alloc (self, NULL, u->zeropp.chunk * self->world, 1,
                                          BUF_GATHERED, error);
  if (u->zeropp.wire == NULL)
    return NULL;
  mine = u->zeropp.wire + self->rank * u->zeropp.chunk;
  _mixprec_zeropp_quantize_as (_mixprec_engine_at (g->working, g->dtypes.working, u->local),
                               g->dtypes.working, slice, groups, g->zeropp.weights_format, mine,
                               (gfloat *) (gpointer) (mine + slice));
  /* Bytes, carried as 16-bit words: nothing converts them. */
  _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_WEIGHTS);
  request = mixprec_comm_all_gather_start (self->comm, mine, u->zeropp.wire, u->zeropp.chunk / 2,
                                           MIXPREC_DTYPE_FLOAT16, error);
  if (request == NULL)
    {
      _mixprec_engine_zeropp_finish_gather (self, g, u, FALSE);
      return NULL;
    }
  self->gathered_bytes += u->zeropp.chunk * (self->world - 1);
  return request;
}

void
_mixprec_engine_zeropp_finish_gather (MixprecEngine *self,
                                      Group         *g,
                                      Unit          *u,
                                      gboolean       ok)
{
  guint64 slice = UNIT_SLICE (self, u);

  if (u->zeropp.wire == NULL)
    return;
  for (guint r = 0; ok && r < self->world; r++)
    {
      const guint8 *chunk = u->zeropp.wire + r * u->zeropp.chunk;

      _mixprec_zeropp_dequantize_as (chunk, (const gfloat *) (gconstpointer) (chunk + slice),
                                     slice, u->zeropp.groups, g->zeropp.weights_format,
                                     _mixprec_engine_at (u->zero3.gathered, g->dtypes.working, r * slice),
                                     g->dtypes.working);
    }
  _mixprec_engine_free (self, NULL, g_steal_pointer (&u->zeropp.wire));
}

/* ---------------------------------------------------------------- qgZ */

/* A quantized reduce-scatter in flight: what this rank sends (world runs
 * of int4 blocks), what arrives, and where the sum goes. */
struct _QgzReduce
{
  guint8 *send;
  guint8 *recv;
  guint64 count;
  gpointer target;
  MixprecDType target_dtype;
  gboolean accumulate;
};

MixprecCommRequest *
_mixprec_engine_zeropp_reduce_start (MixprecEngine       *self,
                                     Group               *g,
                                     const Unit          *u,
                                     guint64              window,
                                     gconstpointer        send,
                                     gpointer             recv,
                                     guint64              count,
                                     guint                flags,
                                     struct _QgzReduce  **qgz,
                                     GError             **error)
{
  guint64 run = _mixprec_zeropp_qgz_run_bytes_as (count, g->zeropp.gradients_format);
  struct _QgzReduce *q = g_new0 (struct _QgzReduce, 1);
  MixprecCommRequest *request;

  q->count = count;
  q->target = recv;
  q->target_dtype = (flags & MIXPREC_COMM_RECV_FP32) ? MIXPREC_DTYPE_FLOAT32 : g->wire;
  q->accumulate = (flags & MIXPREC_COMM_ACCUMULATE) != 0;
  q->send = _mixprec_engine_alloc (self, NULL, run * self->world * 2, 1, BUF_STAGING, error);
  if (q->send == NULL)
    {
      g_free (q);
      return NULL;
    }
  q->recv = q->send + run * self->world;
  /* Every run is quantized before anything is sent, so @recv may be this
   * rank's part of @send (an in-place reduce-scatter). With LoCo, run r's
   * errors are at rank r's slice of the unit, from this window on. */
  _mixprec_zeropp_qgz_quantize_as (send, g->wire, count, self->world,
                                   g->zeropp.loco_err != NULL ? g->zeropp.loco_err + u->flat + window : NULL,
                                   UNIT_SLICE (self, u), g->zeropp.loco_beta, g->zeropp.gradients_format,
                                   q->send);
  request = _mixprec_comm_all_to_all_start (self->comm, q->send, q->recv, run, error);
  if (request == NULL)
    {
      _mixprec_engine_zeropp_finish_reduce (self, g, q, FALSE);
      return NULL;
    }
  *qgz = q;
  return request;
}

void
_mixprec_engine_zeropp_finish_reduce (MixprecEngine     *self,
                                      Group             *g,
                                      struct _QgzReduce *q,
                                      gboolean           ok)
{
  if (ok)
    _mixprec_zeropp_qgz_reduce_as (q->recv, self->world, q->count, q->accumulate,
                                   g->zeropp.gradients_format, q->target, q->target_dtype);
  _mixprec_engine_free (self, NULL, q->send);
  g_free (q);
}
