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
 * and the first term (ACCUMULATE) of an unquantized reduce-scatter.
 *
 * Over several hosts of R consecutive ranks each (R > 1), qgZ runs in two
 * levels as DeepSpeed's does, so that a host sends 1/R of its one-level
 * bytes to other hosts: an all_to_all_v inside the host moves to each
 * rank of it the runs of every rank that shares its place on its host
 * (its local index j), which it sums in FP32 in local rank order into one
 * partial per host; the partials are quantized again (an FP32 value
 * rounded to fp16, then the same blocks) and an all_to_all_v among the
 * ranks of index j moves each to its rank, which sums them in FP32 in
 * host order (after what the target holds, with ACCUMULATE). The second
 * level runs when the first has arrived, inside the wait for the
 * reduction. The sums then depend on the host grouping (a second
 * rounding to the codes, of the partial); with every rank on one host,
 * or one rank on each, it is the one level above. LoCo feeds back the
 * first level's error only. mixprec.json(5) says where this differs.
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
  g->zeropp.host_ranks = 0;
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
  g->zeropp.host_ranks = _mixprec_engine_host_ranks (self);
  return _mixprec_engine_loco_layout (self, g, error);
}

gboolean
_mixprec_engine_zeropp_layout (MixprecEngine *self,
                               Group         *g,
                               GError       **error)
{
  g->zeropp.weights = FALSE;
  /* ZeRO-3's gathers of host memory over several hosts: two levels
   * (mixprec-engine-hosts.c); FP8 groups gather their own way. */
  g->gather_host_ranks = self->stage >= 3 && !g->fp8.enabled && g->device == NULL && !self->offload_param
                         ? _mixprec_engine_host_ranks (self) : 0;
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
  if (g->gather_host_ranks > 0)
    {
      request = _mixprec_engine_gather2_start (self, g->gather_host_ranks, u->zeropp.wire, u->zeropp.chunk,
                                               error);
      u->zero3.second_level = request != NULL;
    }
  else
    {
      _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_WEIGHTS);
      request = mixprec_comm_all_gather_start (self->comm, mine, u->zeropp.wire, u->zeropp.chunk / 2,
                                               MIXPREC_DTYPE_FLOAT16, error);
    }
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
  /* Two levels: what the first leaves to the second (one buffer), run
   * bytes, hosts and ranks per host. */
  guint8 *level2;
  guint64 run;
  guint hosts;
  guint per_host;
};

/* An exchange among @members (@n of them, rank order), @len bytes each
 * way: to members[i] from send + i * @len, from members[i] to recv + i *
 * @len. */
static gpointer
exchange (MixprecEngine *self,
          const guint   *members,
          guint          n,
          gconstpointer  send,
          gpointer       recv,
          guint64        len,
          gboolean       blocking,
          GError       **error)
{
  g_autofree gsize *at = g_new (gsize, MAX (n, 1));

  for (guint i = 0; i < n; i++)
    at[i] = i * len;
  return _mixprec_engine_exchange (self, _MIXPREC_COMM_GRADIENTS, send, at, recv, at, members, n, len, blocking,
                                   error);
}

/* Two levels, the first: the send buffer's runs in rank order become
 * runs grouped by the local index of their rank (index j: the runs of
 * ranks j, R + j, 2R + j, ... in host order), in the second half of
 * q->send; the group of index j goes to the host's rank of index j. */
static MixprecCommRequest *
level1_start (MixprecEngine     *self,
              Group             *g,
              struct _QgzReduce *q,
              guint64            run,
              GError           **error)
{
  guint r = g->zeropp.host_ranks, n = self->world / r, first = self->rank / r * r;
  guint8 *grouped = q->recv;
  g_autofree guint *members = g_new (guint, r);

  q->hosts = n;
  q->per_host = r;
  q->run = run;
  /* What arrives (world runs), then the second level's wire (N runs out,
   * N in) and the partial sums (N x count FP32). */
  q->level2 = _mixprec_engine_alloc (self, NULL, run * (self->world + 2 * n) + q->count * n * sizeof (gfloat),
                                     1, BUF_STAGING, error);
  if (q->level2 == NULL)
    return NULL;
  _mixprec_zeropp_qgz_group_runs (q->send, self->world, r, run, grouped);
  for (guint j = 0; j < r; j++)
    members[j] = first + j;
  return exchange (self, members, r, grouped, q->level2, n * run, FALSE, error);
}

/* Two levels, the second, once the first has arrived: level2 holds, from
 * each rank of the host in local order, its N runs for the ranks of this
 * rank's index in host order. Each host's runs are summed in FP32 in
 * local order, quantized again and sent to that host's rank of this
 * index; what arrives is summed in host order into the target. */
static gboolean
level2_finish (MixprecEngine     *self,
               Group             *g,
               struct _QgzReduce *q,
               GError           **error)
{
  guint r = q->per_host, n = q->hosts, j = self->rank % r;
  guint8 *out = q->level2 + q->run * self->world, *in = out + q->run * n;
  gfloat *partial = (gfloat *) (gpointer) (in + q->run * n);
  g_autofree guint *members = g_new (guint, n);

  _mixprec_zeropp_qgz_level2 (q->level2, r, n, q->count, g->zeropp.gradients_format, partial, out);
  for (guint h = 0; h < n; h++)
    members[h] = h * r + j;
  if (exchange (self, members, n, out, in, q->run, TRUE, error) == NULL)
    return FALSE;
  _mixprec_zeropp_qgz_reduce_as (in, n, q->count, q->accumulate, g->zeropp.gradients_format,
                                 q->target, q->target_dtype);
  return TRUE;
}

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
  if (g->zeropp.host_ranks > 0)
    request = level1_start (self, g, q, run, error);
  else
    request = _mixprec_comm_all_to_all_start (self->comm, q->send, q->recv, run, error);
  if (request == NULL)
    {
      _mixprec_engine_zeropp_finish_reduce (self, g, q, FALSE, NULL);
      return NULL;
    }
  *qgz = q;
  return request;
}

gboolean
_mixprec_engine_zeropp_finish_reduce (MixprecEngine     *self,
                                      Group             *g,
                                      struct _QgzReduce *q,
                                      gboolean           ok,
                                      GError           **error)
{
  if (ok && q->level2 != NULL)
    ok = level2_finish (self, g, q, error);
  else if (ok)
    _mixprec_zeropp_qgz_reduce_as (q->recv, self->world, q->count, q->accumulate,
                                   g->zeropp.gradients_format, q->target, q->target_dtype);
  _mixprec_engine_free (self, NULL, q->level2);
  _mixprec_engine_free (self, NULL, q->send);
  g_free (q);
  return ok;
}
