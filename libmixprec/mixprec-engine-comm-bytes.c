/* mixprec-engine-comm-bytes.c — the bytes on the wire: what the engine's
 * communicator sent during each optimizer step, by what it carried, and
 * what a plan predicts for a configuration from the same layout, beside
 * DeepSpeed's figures for ZeRO and ZeRO++. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-comm-private.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-kernels-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-zeropp-private.h"

G_STATIC_ASSERT (_MIXPREC_COMM_N_CLASSES == G_N_ELEMENTS (((MixprecEngine *) NULL)->comm_mark));

G_DEFINE_BOXED_TYPE (MixprecCommBytes, mixprec_comm_bytes,
                     mixprec_comm_bytes_copy, mixprec_comm_bytes_free)

/**
 * mixprec_comm_bytes_copy:
 * @bytes: a #MixprecCommBytes
 *
 * Makes a copy of @bytes, freed with mixprec_comm_bytes_free().
 *
 * Returns: (transfer full): a copy of @bytes
 *
 * Since: 1.1
 */
MixprecCommBytes *
mixprec_comm_bytes_copy (const MixprecCommBytes *bytes)
{
  g_return_val_if_fail (bytes != NULL, NULL);

  return g_memdup2 (bytes, sizeof *bytes);
}

/**
 * mixprec_comm_bytes_free:
 * @bytes: (nullable): a #MixprecCommBytes
 *
 * Frees @bytes.
 *
 * Since: 1.1
 */
void
mixprec_comm_bytes_free (MixprecCommBytes *bytes)
{
  g_free (bytes);
}

/* Fills @out from per-class [intra, inter] counts. */
static void
fill (MixprecCommBytes *out,
      guint64           sent[_MIXPREC_COMM_N_CLASSES][2])
{
  memset (out, 0, sizeof *out);
  out->all_gather = sent[_MIXPREC_COMM_WEIGHTS][0] + sent[_MIXPREC_COMM_WEIGHTS][1];
  out->reduce_scatter = sent[_MIXPREC_COMM_GRADIENTS][0] + sent[_MIXPREC_COMM_GRADIENTS][1];
  out->scalars = sent[_MIXPREC_COMM_SCALARS][0] + sent[_MIXPREC_COMM_SCALARS][1];
  out->other = sent[_MIXPREC_COMM_OTHER][0] + sent[_MIXPREC_COMM_OTHER][1];
  out->total = out->all_gather + out->reduce_scatter + out->scalars + out->other;
  out->inter_host_all_gather = sent[_MIXPREC_COMM_WEIGHTS][1];
  out->inter_host_reduce_scatter = sent[_MIXPREC_COMM_GRADIENTS][1];
  for (guint c = 0; c < _MIXPREC_COMM_N_CLASSES; c++)
    out->inter_host += sent[c][1];
}

/* At the end of a step: what the communicator sent since the last one
 * becomes the step's count. */
void
_mixprec_engine_take_comm_bytes (MixprecEngine *self)
{
  guint64 now[_MIXPREC_COMM_N_CLASSES][2], step[_MIXPREC_COMM_N_CLASSES][2];

  if (self->comm == NULL)
    return;
  _mixprec_comm_get_sent (self->comm, now);
  for (guint c = 0; c < _MIXPREC_COMM_N_CLASSES; c++)
    for (guint h = 0; h < 2; h++)
      {
        step[c][h] = now[c][h] - self->comm_mark[c][h];
        self->comm_mark[c][h] = now[c][h];
      }
  fill (&self->comm_bytes, step);
}

/**
 * mixprec_engine_get_comm_bytes:
 * @self: a #MixprecEngine
 *
 * The bytes this rank sent to the other data-parallel ranks during the
 * last optimizer step: everything its communicator moved between the end
 * of the step before (or the engine's creation) and the end of the last
 * mixprec_engine_step(), the forward and backward gathers of ZeRO-3 and
 * the gradient reductions of every micro-step included. #MixprecCommBytes
 * says how each collective counts. The monitors record the same numbers
 * under "Comm/" (see mixprec.json(5)).
 *
 * Returns: (transfer full): the last step's bytes; all 0 before the first
 *   step and on one process
 *
 * Since: 1.1
 */
MixprecCommBytes *
mixprec_engine_get_comm_bytes (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  return mixprec_comm_bytes_copy (&self->comm_bytes);
}

/* ---------------------------------------------------------------- plans */

/* Bytes per peer, by class, that one step sends; the caller multiplies by
 * the peers on and off the host. */
static gboolean
plan_per_peer (MixprecConfig *config,
               const guint64 *sizes,
               guint          n_sizes,
               guint          world,
               guint64        per_peer[_MIXPREC_COMM_N_CLASSES],
               guint         *hpz,
               guint64       *hpz_per_peer,
               guint64       *gather_per_peer,
               GError       **error)
{
  g_auto(_MixprecPlannedGroup) pg = { 0 };
  MixprecDType wire;
  gsize wsize, esize;
  guint64 width, gas, blocks = 0;
  gboolean qwz, qgz;

  memset (per_peer, 0, sizeof (guint64) * _MIXPREC_COMM_N_CLASSES);
  *hpz = 0;
  *hpz_per_peer = 0;
  *gather_per_peer = 0;
  if (!_mixprec_engine_plan_group (config, sizes, n_sizes, world, &pg, error))
    return FALSE;
  if (world < 2)
    return TRUE;
  /* hpZ: groups of k consecutive ranks, refused as the engine refuses
   * them; a group of the world is ZeRO-3 itself. */
  if (pg.stage >= 3 && _mixprec_config_get_zero_hpz_partition_size (config) > 1 &&
      _mixprec_config_get_zero_hpz_partition_size (config) != world)
    {
      *hpz = _mixprec_config_get_zero_hpz_partition_size (config);
      if (*hpz > world || world % *hpz != 0)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                       "zero_optimization.zero_hpz_partition_size: %u: the groups of the "
                       "secondary partition must divide the world of %u ranks", *hpz, world);
          return FALSE;
        }
    }
  if (pg.fp8 || pg.fp4_block > 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "comm plan: FP8 and 4-bit working copies are not planned yet");
      return FALSE;
    }
  wire = _mixprec_engine_wire_dtype (&pg.dt);
  wsize = mixprec_dtype_get_size (wire);
  esize = mixprec_dtype_get_size (pg.dt.working);
  gas = MAX (pg.probe->gas, 1);
  width = MAX (pg.shape.slot_elements / world, 1);
  qwz = pg.stage >= 3 && _mixprec_config_get_zero_quantized_weights (config);
  qgz = pg.stage >= 3 && _mixprec_config_get_zero_quantized_gradients (config);
  for (guint k = 0; k < pg.units->len; k++)
    {
      const Unit *u = &g_array_index (pg.units, Unit, k);
      guint64 slice = u->padded / world, grads = 0;

      if (slice == 0)
        continue;
      blocks += (slice + _MIXPREC_SUMSQ_BLOCK - 1) / _MIXPREC_SUMSQ_BLOCK;
      /* Gradients: every micro-step reduces every unit, window by window
       * of the staging slots; qgZ sends each window as int4 (or FP8)
       * blocks. */
      for (guint64 a = 0; a < slice; a += width)
        {
          guint64 w = MIN (width, slice - a);

          grads += qgz ? _mixprec_zeropp_qgz_run_bytes_as (w, _mixprec_config_get_zeropp_gradients_format (config))
                       : w * wsize;
        }
      per_peer[_MIXPREC_COMM_GRADIENTS] += gas * grads;
      if (pg.stage == 0)
        /* ZeRO-0: the reduced slices gathered back, once per step, in the
         * dtype the optimizer reads. */
        per_peer[_MIXPREC_COMM_GRADIENTS] += slice * mixprec_dtype_get_size (pg.shape.step_grad);
      else if (pg.stage < 3 || u->persistent)
        /* The updated working copies made whole after the step. */
        per_peer[_MIXPREC_COMM_WEIGHTS] += slice * esize;
      else
        {
          /* ZeRO-3: gathered for the forward and again for the backward
           * pass of every micro-step; qwZ: int8 codes and FP32 scales.
           * hpZ: the backward's inside the group, in the working dtype,
           * 1 / k of the unit to each other member. */
          guint64 gather = qwz ? slice + _mixprec_zeropp_weight_groups (slice) * sizeof (gfloat)
                               : slice * esize;

          *gather_per_peer += (*hpz > 0 ? 1 : 2) * gas * gather;
          if (*hpz > 0)
            *hpz_per_peer += gas * (u->padded / *hpz) * esize;
        }
    }
  /* The step's agreement: every rank's gradient-norm blocks, as doubles. */
  per_peer[_MIXPREC_COMM_SCALARS] = blocks * sizeof (gdouble);
  return TRUE;
}

static gboolean
check_hosts (guint   world_size,
             guint  *ranks_per_host,
             GError **error)
{
  if (world_size == 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "world size: must be at least 1, got 0");
      return FALSE;
    }
  if (*ranks_per_host == 0)
    *ranks_per_host = world_size;
  if (world_size % *ranks_per_host != 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "ranks per host: %u does not divide the world size %u into whole hosts",
                   *ranks_per_host, world_size);
      return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_comm_bytes_plan_new:
 * @config: a training configuration
 * @param_sizes: (array length=n_params): the element count of each
 *   parameter, in registration order (module type "Linear")
 * @n_params: the number of parameters
 * @world_size: the number of data-parallel ranks
 * @ranks_per_host: ranks on each host (the world is @world_size /
 *   @ranks_per_host hosts of consecutive ranks); 0 for one host
 * @error: return location for a #GError
 *
 * The bytes one rank sends per optimizer step under @config, counted as
 * mixprec_engine_get_comm_bytes() counts them, from the layout the engine
 * would make: every micro-step (`gradient_accumulation_steps` of them)
 * reduces every unit's gradients through the staging windows (qgZ: int4
 * blocks of 512 with an FP32 scale each); under ZeRO-3 the forward and the
 * backward pass of every micro-step each gather every non-persistent unit
 * once (qwZ: int8 codes with DeepSpeed's FP32 block scales), and under
 * hpZ (`zero_hpz_partition_size` k) the backward pass's inside groups of
 * k consecutive ranks, 1 / k of each unit in the working dtype to each
 * other member, counted for rank 0's group; over several hosts of more
 * than one rank qgZ's reductions and (mixprec.device "cpu") ZeRO-3's
 * gathers run in two levels, a window's (a slice's) copies for every
 * host to each other rank of the host, then one to the rank of the same
 * place on each other host; after the
 * step ZeRO-1/2 gather the updated working copies once, ZeRO-3 the
 * persistent units, and without ZeRO every rank gathers the reduced
 * gradients back in the dtype the optimizer reads; and the step agrees on the gradient norm by gathering
 * each rank's sum-of-squares blocks (8 bytes per 4096 elements of a
 * slice). A trainer that keeps units gathered from the forward to the
 * backward pass (`stage3_max_reuse_distance`) sends fewer. The intra- and
 * inter-host shares follow from @ranks_per_host.
 *
 * Returns: (transfer full): the planned bytes, or %NULL with @error set
 *   (an invalid configuration or world, FP8 or 4-bit working copies, hpZ
 *   groups that do not divide the world, which the engine refuses)
 *
 * Since: 1.1
 */
MixprecCommBytes *
mixprec_comm_bytes_plan_new (MixprecConfig *config,
                             const guint64 *param_sizes,
                             guint          n_params,
                             guint          world_size,
                             guint          ranks_per_host,
                             GError       **error)
{
  guint64 per_peer[_MIXPREC_COMM_N_CLASSES], sent[_MIXPREC_COMM_N_CLASSES][2], hpz_per_peer, gather_per_peer;
  guint hpz, shared, hosts;
  gboolean two_levels;
  MixprecCommBytes out;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (param_sizes != NULL || n_params == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_hosts (world_size, &ranks_per_host, error) ||
      !plan_per_peer (config, param_sizes, n_params, world_size, per_peer, &hpz, &hpz_per_peer,
                      &gather_per_peer, error))
    return NULL;
  /* Several hosts of more than one rank: qgZ's reductions, and ZeRO-3's
   * gathers of host memory, run in two levels, a window's (a slice's) N
   * runs to each other rank of the host and one to the rank of the same
   * place on each other host. */
  hosts = world_size / ranks_per_host;
  two_levels = ranks_per_host > 1 && ranks_per_host < world_size;
  for (guint c = 0; c < _MIXPREC_COMM_N_CLASSES; c++)
    {
      sent[c][0] = per_peer[c] * (ranks_per_host - 1);
      sent[c][1] = per_peer[c] * (world_size - ranks_per_host);
    }
  if (_mixprec_config_get_zero_quantized_gradients (config) && mixprec_config_get_zero_stage (config) >= 3 &&
      two_levels)
    {
      sent[_MIXPREC_COMM_GRADIENTS][0] = per_peer[_MIXPREC_COMM_GRADIENTS] * hosts * (ranks_per_host - 1);
      sent[_MIXPREC_COMM_GRADIENTS][1] = per_peer[_MIXPREC_COMM_GRADIENTS] * (hosts - 1);
    }
  if (two_levels && g_strcmp0 (mixprec_config_get_device (config), "cpu") == 0)
    {
      sent[_MIXPREC_COMM_WEIGHTS][0] += gather_per_peer * hosts * (ranks_per_host - 1);
      sent[_MIXPREC_COMM_WEIGHTS][1] += gather_per_peer * (hosts - 1);
    }
  else
    {
      sent[_MIXPREC_COMM_WEIGHTS][0] += gather_per_peer * (ranks_per_host - 1);
      sent[_MIXPREC_COMM_WEIGHTS][1] += gather_per_peer * (world_size - ranks_per_host);
    }
  /* hpZ's group of rank 0, ranks 0 .. k - 1: those of them on its host
   * (0 .. ranks_per_host - 1) and the others. */
  shared = MIN (hpz, ranks_per_host);
  if (hpz > 0)
    {
      sent[_MIXPREC_COMM_WEIGHTS][0] += hpz_per_peer * (shared - 1);
      sent[_MIXPREC_COMM_WEIGHTS][1] += hpz_per_peer * (hpz - shared);
    }
  fill (&out, sent);
  return mixprec_comm_bytes_copy (&out);
}

/**
 * mixprec_comm_bytes_plan_new_deepspeed:
 * @config: a training configuration
 * @n_params: the number of parameters (elements) of the model, Ψ
 * @world_size: the number of data-parallel ranks, W
 * @ranks_per_host: ranks on each host, R (0: one host)
 * @error: return location for a #GError
 *
 * DeepSpeed's figures for the same configuration, per rank and optimizer
 * step, from the ZeRO and ZeRO++ papers' accounting: each collective over
 * the world moves (W - 1) / W Ψ elements per rank, (R - 1) / W Ψ of it to
 * the own host. Without ZeRO the gradients are all-reduced once per step,
 * twice that volume (a reduce-scatter and an all-gather). ZeRO-1 reduces
 * the gradients once per step, ZeRO-2 and 3
 * every micro-step, in the communication dtype; ZeRO-1/2 all-gather the
 * updated working weights once; ZeRO-3 all-gathers them in the forward
 * and in the backward pass of every micro-step, in the working dtype.
 * `zero_quantized_weights` (qwZ) gathers 1 byte per element (int8),
 * `zero_quantized_gradients` (qgZ) reduces half a byte (int4) in two
 * levels, (R - 1) / R Ψ inside the host and (W - R) / (W R) Ψ of the
 * host's partial sums across hosts, and
 * `zero_hpz_partition_size` (hpZ, taken as one host per group) gathers
 * the backward pass's weights from the secondary partition inside the
 * host (int8 under qwZ too): (R - 1) / R Ψ, none across hosts.
 * Block scales and the norm agreement are not in the figures:
 * @scalars and @other stay 0.
 *
 * Returns: (transfer full): the figures, or %NULL with @error set
 *
 * Since: 1.1
 */
MixprecCommBytes *
mixprec_comm_bytes_plan_new_deepspeed (MixprecConfig *config,
                                       guint64        n_params,
                                       guint          world_size,
                                       guint          ranks_per_host,
                                       GError       **error)
{
  g_autoptr(MixprecEngine) probe = NULL;
  _MixprecParamDTypes dt = { 0 };
  guint64 sent[_MIXPREC_COMM_N_CLASSES][2] = { { 0 } };
  MixprecCommBytes out;
  gdouble psi = (gdouble) n_params, w = world_size, r, intra, inter, gas;
  gdouble grad, weight;
  guint stage;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_hosts (world_size, &ranks_per_host, error))
    return NULL;
  probe = _mixprec_engine_probe_model (config, world_size, &dt, error);
  if (probe == NULL)
    return NULL;
  stage = world_size > 1 ? mixprec_config_get_zero_stage (config) : 0;
  r = ranks_per_host;
  intra = (r - 1) / w * psi;
  inter = (w - r) / w * psi;
  gas = stage >= 2 ? MAX (probe->gas, 1) : 1;
  grad = mixprec_dtype_get_size (_mixprec_engine_wire_dtype (&dt));
  weight = mixprec_dtype_get_size (dt.working);
  if (stage >= 3 && _mixprec_config_get_zero_quantized_gradients (config))
    grad = 0.5;
  if (stage == 0)
    {
      /* data parallelism: one all-reduce of the gradients per step */
      sent[_MIXPREC_COMM_GRADIENTS][0] = (guint64) (2 * grad * intra);
      sent[_MIXPREC_COMM_GRADIENTS][1] = (guint64) (2 * grad * inter);
      fill (&out, sent);
      return mixprec_comm_bytes_copy (&out);
    }
  sent[_MIXPREC_COMM_GRADIENTS][0] = (guint64) (gas * grad * intra);
  sent[_MIXPREC_COMM_GRADIENTS][1] = (guint64) (gas * grad * inter);
  if (stage >= 3 && _mixprec_config_get_zero_quantized_gradients (config))
    {
      /* qgZ's two levels: (R - 1) / R of the model inside the host, then
       * (N - 1) / N of the host's 1 / R partial sums across hosts */
      sent[_MIXPREC_COMM_GRADIENTS][0] = (guint64) (gas * grad * (r - 1) / r * psi);
      sent[_MIXPREC_COMM_GRADIENTS][1] = (guint64) (gas * grad * (w - r) / (w * r) * psi);
    }
  if (stage < 3)
    {
      sent[_MIXPREC_COMM_WEIGHTS][0] = (guint64) (weight * intra);
      sent[_MIXPREC_COMM_WEIGHTS][1] = (guint64) (weight * inter);
    }
  else
    {
      gboolean hpz = _mixprec_config_get_zero_hpz_partition_size (config) > 1;
      gdouble q = _mixprec_config_get_zero_quantized_weights (config) ? 1 : weight;

      /* forward */
      sent[_MIXPREC_COMM_WEIGHTS][0] = (guint64) (gas * q * intra);
      sent[_MIXPREC_COMM_WEIGHTS][1] = (guint64) (gas * q * inter);
      /* backward: over the world, or under hpZ from the secondary
       * partition inside the host (quantized like the forward's) */
      if (hpz)
        sent[_MIXPREC_COMM_WEIGHTS][0] += (guint64) (gas * q * (r - 1) / r * psi);
      else
        {
          sent[_MIXPREC_COMM_WEIGHTS][0] += (guint64) (gas * q * intra);
          sent[_MIXPREC_COMM_WEIGHTS][1] += (guint64) (gas * q * inter);
        }
    }
  fill (&out, sent);
  return mixprec_comm_bytes_copy (&out);
}
