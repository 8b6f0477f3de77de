/* mixprec-engine-memory.c — what an engine holds, buffer by buffer, what
 * a plan predicts with the same arithmetic, and DeepSpeed's formula for
 * the same configuration beside them. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"

G_DEFINE_BOXED_TYPE (MixprecMemoryBuffer, mixprec_memory_buffer,
                     mixprec_memory_buffer_copy, mixprec_memory_buffer_free)

/**
 * mixprec_memory_buffer_copy:
 * @buffer: a #MixprecMemoryBuffer
 *
 * Makes a copy of @buffer, freed with mixprec_memory_buffer_free().
 *
 * Returns: (transfer full): a copy of @buffer
 *
 * Since: 1.1
 */
MixprecMemoryBuffer *
mixprec_memory_buffer_copy (const MixprecMemoryBuffer *buffer)
{
  MixprecMemoryBuffer *copy;

  g_return_val_if_fail (buffer != NULL, NULL);
  copy = g_memdup2 (buffer, sizeof *buffer);
  copy->name = g_strdup (buffer->name);
  return copy;
}

/**
 * mixprec_memory_buffer_free:
 * @buffer: a #MixprecMemoryBuffer
 *
 * Frees @buffer.
 *
 * Since: 1.1
 */
void
mixprec_memory_buffer_free (MixprecMemoryBuffer *buffer)
{
  if (buffer == NULL)
    return;
  g_free (buffer->name);
  g_free (buffer);
}

static GPtrArray *
buffer_list (const guint64 *bytes,
             const guint64 *peak,
             const guint64 *planned)
{
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) mixprec_memory_buffer_free);

  for (guint k = 0; k < N_BUFS; k++)
    {
      MixprecMemoryBuffer *b;

      if (bytes[k] == 0 && peak[k] == 0 && planned[k] == 0)
        continue;
      b = g_new0 (MixprecMemoryBuffer, 1);
      b->name = g_strdup (_mixprec_engine_buffer_names[k]);
      b->bytes = bytes[k];
      b->peak_bytes = peak[k];
      b->planned_bytes = planned[k];
      g_ptr_array_add (out, b);
    }
  return out;
}

static MixprecMemoryReport *
report_of (const guint64 *bytes)
{
  MixprecMemoryReport r = { 0 };

  r.working = bytes[BUF_WORKING] + bytes[BUF_HOST_WORKING] + bytes[BUF_PINNED_WORKING] +
              bytes[BUF_PERSISTENT] + bytes[BUF_FP8] + bytes[BUF_FP8_SCALES] + bytes[BUF_HPZ];
  r.gradients = bytes[BUF_GRADIENTS];
  r.accumulation = bytes[BUF_ACCUM];
  r.masters = bytes[BUF_MASTERS] + bytes[BUF_HOST_MASTERS] + bytes[BUF_REMAINDERS] + bytes[BUF_KAHAN];
  r.optimizer_state = bytes[BUF_STATE] + bytes[BUF_HOST_STATE] + bytes[BUF_STATE_SCALES];
  r.communication = bytes[BUF_STAGING] + bytes[BUF_GATHERED] + bytes[BUF_FP8_GATHERED] + bytes[BUF_NORM] +
                    bytes[BUF_HOST_STAGING] + bytes[BUF_PINNED_STAGING];
  r.total = r.working + r.gradients + r.accumulation + r.masters + r.optimizer_state +
            r.communication;
  return mixprec_memory_report_copy (&r);
}

/**
 * mixprec_engine_get_memory_report:
 * @self: a #MixprecEngine
 *
 * What the engine allocated on this rank, by category: for each buffer
 * the most it held at once, so ZeRO-3's gathered copies count as much as
 * were gathered together. Lays out the buffers if that has not happened
 * yet.
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
  return report_of (self->buf_peak);
}

/**
 * mixprec_engine_list_buffers:
 * @self: a #MixprecEngine
 *
 * Every kind of buffer the engine holds on this rank (summed over its
 * parameter groups): its bytes now, the most at once, and what the layout
 * planned for it, which mixprec_memory_plan_list_buffers() predicts for the
 * same parameters. The names:
 *
 * - "working copies": the low-precision copies the forward pass reads,
 *   whole up to ZeRO-2, this rank's slices under ZeRO-3;
 * - "persistent working copies": ZeRO-3, the whole copies of parameters
 *   below stage3_param_persistence_threshold;
 * - "gathered working copies": ZeRO-3, units gathered or prefetched;
 * - "gradients": the whole gradient buffers (one process, ZeRO-0/1, or
 *   ZeRO-2/3 once the caller asked for them);
 * - "gradient accumulation": the FP32 (or accumulation dtype) sums,
 *   this rank's slices across ranks;
 * - "FP32 master weights", "optimizer state";
 * - with `mixprec.master_weights` "remainder" or "kahan" (Since: 1.1),
 *   "master remainders" or "Kahan compensation" in place of the FP32
 *   masters: 2 bytes per element, sharded as the masters would be; with a
 *   scaled or quantized `mixprec.optimizer_states` format, "optimizer
 *   state scales": an FP32 scale per block of each such slot (its codes
 *   are in "optimizer state", each unit's last block counted whole);
 * - "gradient staging": slots gradients collect in on their way to the
 *   reduce-scatter;
 * - "gradient norm blocks": the sum-of-squares blocks of this rank and,
 *   across ranks, of every rank;
 * - with fp8 enabled (Since: 1.1), "FP8 working copies": a byte per element
 *   of the fp8 parameters, whole up to ZeRO-2 (beside the working copies),
 *   this rank's slices and the persistent units under ZeRO-3; "FP8 block
 *   scales": the MX recipe's E8M0 scales, a byte per block; "gathered FP8
 *   working copies": ZeRO-3, the FP8 units gathered (in place of gathered
 *   working copies); with fp4 enabled, the same three names hold the
 *   4-bit copies: half a byte per element, a scale byte per block of 16
 *   (NVFP4) or 32 (MXFP4), and the gathered units;
 * - with zero_optimization.offload_optimizer "cpu" on a device, "FP32
 *   master weights (host)" and "optimizer state (host)" in place of the
 *   device's, and "offload staging (host)": the two host buffers a bucket
 *   of gradients comes down into and its working copies go up from
 *   ("offload staging, pinned (host)" when offload_optimizer.pin_memory
 *   is true and the device plugin provides page-locked host memory);
 *   with zero_optimization.offload_param "cpu" as well, under ZeRO-3
 *   across ranks (Since: 1.1), "working copies (host)" in place of the
 *   device's working copies: this rank's slices, copied up as they are
 *   gathered ("working copies, pinned (host)" when offload_param.pin_memory
 *   is true and the device has pinned memory).
 *   Every other buffer is in the device's memory (on the "cpu" device,
 *   everything is host memory).
 *
 * Returns: (transfer container) (element-type MixprecMemoryBuffer): the
 *   buffers, in the order above, those never allocated nor planned left
 *   out; the array frees its buffers when it is freed, so
 *   g_ptr_array_unref() is all a caller does (bindings copy each buffer)
 *
 * Since: 1.1
 */
GPtrArray *
mixprec_engine_list_buffers (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  mixprec_engine_prepare (self, NULL);
  return buffer_list (self->buf_bytes, self->buf_peak, self->buf_plan);
}

MixprecEngine *
_mixprec_engine_probe_model (MixprecConfig       *config,
                             guint                world,
                             _MixprecParamDTypes *dt,
                             GError             **error)
{
  g_autoptr(MixprecEngine) probe = NULL;
  MixprecDType master;

  if (world == 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "world size: must be at least 1, got 0");
      return NULL;
    }
  probe = _mixprec_engine_new_internal (config, NULL, NULL, NULL, TRUE, error);
  if (probe == NULL ||
      !mixprec_precision_policy_resolve (probe->policy, "param", "Linear", &dt->working, &master,
                                         &dt->has_master, &dt->accum, &dt->comm, error))
    return NULL;
  dt->grad = dt->working;
  if (dt->working == MIXPREC_DTYPE_FLOAT32)
    dt->has_master = FALSE;
  return g_steal_pointer (&probe);
}

gboolean
_mixprec_engine_plan_group (MixprecConfig         *config,
                            const guint64         *sizes,
                            guint                  n_sizes,
                            guint                  world,
                            _MixprecPlannedGroup  *pg,
                            GError               **error)
{
  pg->probe = _mixprec_engine_probe_model (config, world, &pg->dt, error);
  if (pg->probe == NULL)
    return FALSE;
  pg->stage = world > 1 ? mixprec_config_get_zero_stage (config) : 0;
  pg->recipe = mixprec_config_get_fp8_recipe (config);
  pg->fp8 = pg->recipe != NULL && mixprec_precision_policy_is_fp8 (pg->probe->policy, "param", "Linear");
  pg->mx = pg->fp8 && mixprec_fp8_recipe_get_kind (pg->recipe) == MIXPREC_FP8_RECIPE_MX;
  {
    MixprecBlockRecipe r4;

    if (mixprec_config_get_fp4_recipe (config, &r4, NULL) &&
        mixprec_precision_policy_is_fp4 (pg->probe->policy, "param", "Linear"))
      pg->fp4_block = mixprec_block_recipe_get_block_size (r4);
  }
  pg->units = _mixprec_engine_make_units_full (sizes, n_sizes, world, pg->stage,
                                               mixprec_config_get_param_persistence_threshold (config),
                                               pg->mx || pg->fp4_block > 0);
  _mixprec_engine_group_shape (&pg->dt, _mixprec_engine_wire_dtype (&pg->dt), pg->units, world,
                               pg->stage, pg->probe->gas, FALSE, _mixprec_engine_staging_budget (config),
                               &pg->shape);
  _mixprec_engine_shape_represent (&pg->shape, &pg->probe->repr, &pg->dt, pg->units, world, pg->stage);
  return TRUE;
}

void
_mixprec_engine_planned_group_clear (_MixprecPlannedGroup *pg)
{
  g_clear_object (&pg->probe);
  g_clear_pointer (&pg->units, g_array_unref);
}

/* The plan's buffers for parameters of @sizes forming one group. */
static gboolean
plan_bytes (MixprecConfig *config,
            const guint64 *sizes,
            guint          n_sizes,
            guint          world,
            guint64        gathered,
            guint64       *bytes,
            GError       **error)
{
  g_auto(_MixprecPlannedGroup) pg = { 0 };
  MixprecEngine *probe;
  const _MixprecParamDTypes *dt;
  const GroupShape *shape;
  MixprecFp8Recipe *recipe;
  GArray *units;
  guint stage;
  gboolean fp8, mx;

  if (!_mixprec_engine_plan_group (config, sizes, n_sizes, world, &pg, error))
    return FALSE;
  probe = pg.probe;
  dt = &pg.dt;
  shape = &pg.shape;
  recipe = pg.recipe;
  units = pg.units;
  stage = pg.stage;
  fp8 = pg.fp8;
  mx = pg.mx;
  /* The probe is one process; the working slices of ZeRO-3 across ranks
   * are the host's under offload_param. */
  probe->offload_param = probe->offload && stage >= 3 && _mixprec_config_get_offload_param (config);
  probe->offload_param_pinned = probe->offload_param &&
                                _mixprec_engine_offload_pinned (probe, _mixprec_config_get_offload_param_pin_memory (config),
                                                                "zero_optimization.offload_param.pin_memory", TRUE);
  _mixprec_engine_add_shape_bytes (bytes, dt, shape, mixprec_feature_get_n_state_slots (probe->optimizer),
                                   &probe->repr, probe->offload, probe->offload_pinned,
                                   _mixprec_engine_working_kind (probe));
  if (stage >= 3)
    {
      /* What the trainer holds gathered, plus the prefetch window, never
       * more than the partitioned parameters. */
      guint64 window = mixprec_config_get_prefetch_bucket_size (config);
      guint64 live = gathered > 0 ? gathered : window;

      bytes[BUF_GATHERED] = MIN (shape->padded - shape->persist_n, live + window) *
                            mixprec_dtype_get_size (dt->working);
      /* ZeRO++ qwZ: each gather's int8 codes and block scales too, while
       * they arrive (blocks of 4096 elements or more: a scale per 1024
       * bytes at most). */
      if (_mixprec_config_get_zero_quantized_weights (config) && world > 1 && !fp8)
        {
          guint64 n = bytes[BUF_GATHERED] / mixprec_dtype_get_size (dt->working);

          bytes[BUF_GATHERED] += n + n / 1024;
        }
      /* ZeRO++ LoCo: a float16 error per element each rank sends, every
       * rank's slices of every unit, kept from step to step. */
      if (_mixprec_config_get_zero_quantized_gradients (config) &&
          _mixprec_config_get_zeropp_loco (config, NULL, NULL) && world > 1)
        bytes[BUF_STAGING] += shape->padded * sizeof (guint16);
      /* ZeRO++ hpZ: this rank's part of every partitioned unit's gathered
       * copy, 1 / k of it, kept for the gathers inside its group. */
      {
        guint k = _mixprec_config_get_zero_hpz_partition_size (config);

        if (world > 1 && k > 1 && k < world && world % k == 0 && !fp8)
          bytes[BUF_HPZ] += (shape->padded - shape->persist_n) / k *
                            mixprec_dtype_get_size (dt->working);
      }
    }
  if (fp8)
    {
      /* FP8 working copies as _mixprec_engine_fp8_layout() allocates
       * them: a byte per element (ZeRO-3: the slices and the persistent
       * units), MX a scale byte per block (ZeRO-3: the slices' scales and
       * the persistent units' whole ones). ZeRO-3 gathers FP8 instead of
       * the working dtype. */
      guint b = MAX (mixprec_fp8_recipe_get_block_size (recipe), 1);
      guint64 scales = 0;

      bytes[BUF_FP8] += stage >= 3 ? shape->local_n + shape->persist_n : shape->padded;
      for (guint k = 0; mx && k < units->len; k++)
        {
          const Unit *u = &g_array_index (units, Unit, k);
          guint64 n = (u->padded + b - 1) / b;

          /* ZeRO-3: the slices' scales, and the persistent units' whole. */
          if (stage >= 3)
            scales += n / world + (u->persistent ? n : 0);
          else
            scales += n;
        }
      bytes[BUF_FP8_SCALES] += scales;
      if (stage >= 3)
        {
          guint64 n = bytes[BUF_GATHERED] / mixprec_dtype_get_size (dt->working);

          bytes[BUF_GATHERED] = 0;
          bytes[BUF_FP8_GATHERED] = n + (mx ? (n + b - 1) / b : 0);
        }
    }
  if (pg.fp4_block > 0)
    {
      /* 4-bit copies as _mixprec_engine_fp4_layout() allocates them: half
       * a byte per element and a scale byte per block, laid out as MX;
       * ZeRO-3 gathers those instead of the working dtype. */
      guint b = pg.fp4_block;
      guint64 scales = 0;

      bytes[BUF_FP8] += ((stage >= 3 ? shape->local_n + shape->persist_n : shape->padded) + 1) / 2;
      for (guint k = 0; k < units->len; k++)
        {
          const Unit *u = &g_array_index (units, Unit, k);
          guint64 n = u->padded / b;

          scales += stage >= 3 ? n / world + (u->persistent ? n : 0) : n;
        }
      bytes[BUF_FP8_SCALES] += scales;
      if (stage >= 3)
        {
          guint64 n = bytes[BUF_GATHERED] / mixprec_dtype_get_size (dt->working);

          bytes[BUF_GATHERED] = 0;
          bytes[BUF_FP8_GATHERED] = n / 2 + n / b;
        }
    }
  return TRUE;
}

/**
 * mixprec_memory_plan_new:
 * @config: a training configuration
 * @n_params: the number of parameters (elements) of the model
 * @world_size: the number of data-parallel ranks
 * @error: return location for a #GError
 *
 * Predicts the bytes one rank needs for a model of @n_params elements
 * under @config's precision mode, ZeRO stage, accumulation and optimizer
 * (its state slots), laid out as one parameter, with the arithmetic the
 * engine uses (padding included). Under ZeRO-2/3 gradients are assumed
 * to arrive through mixprec_param_reduce_grad(); under ZeRO-3 the trainer
 * is assumed to hold one stage3_prefetch_bucket_size of parameters
 * gathered besides the prefetch window (see
 * mixprec_memory_plan_list_buffers() to say otherwise).
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
  guint64 bytes[N_BUFS] = { 0 };

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);

  if (!plan_bytes (config, &n_params, 1, world_size, 0, bytes, error))
    return NULL;
  return report_of (bytes);
}

/**
 * mixprec_memory_plan_list_buffers:
 * @config: a training configuration
 * @param_sizes: (array length=n_params): the element count of every
 *   parameter, in registration order
 * @n_params: the number of parameters
 * @world_size: the number of data-parallel ranks
 * @gathered: under ZeRO-3, the most elements of parameters the trainer
 *   holds gathered at once besides the prefetch window; 0 for one
 *   stage3_prefetch_bucket_size
 * @error: return location for a #GError
 *
 * Predicts, buffer by buffer (see mixprec_engine_list_buffers()), what
 * one rank holds for these parameters registered as one group (the same
 * module type), as the engine lays them out (for mixprec.device, which
 * this machine need not have: offloaded buffers carry the " (host)"
 * suffix). Every field of each buffer holds the prediction.
 *
 * Returns: (transfer container) (element-type MixprecMemoryBuffer): the
 *   buffers, or %NULL with @error set; the array frees its buffers when
 *   it is freed (bindings copy each buffer)
 *
 * Since: 1.1
 */
GPtrArray *
mixprec_memory_plan_list_buffers (MixprecConfig *config,
                                  const guint64 *param_sizes,
                                  guint          n_params,
                                  guint          world_size,
                                  guint64        gathered,
                                  GError       **error)
{
  guint64 bytes[N_BUFS] = { 0 };

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (param_sizes != NULL || n_params == 0, NULL);

  if (!plan_bytes (config, param_sizes, n_params, world_size, gathered, bytes, error))
    return NULL;
  return buffer_list (bytes, bytes, bytes);
}

/**
 * mixprec_memory_plan_new_deepspeed:
 * @config: a training configuration
 * @n_params: the number of parameters (elements) of the model
 * @world_size: the number of data-parallel ranks
 * @error: return location for a #GError
 *
 * DeepSpeed's formula for the same configuration (the ZeRO paper's model
 * states, without buffers): Ψ parameters of P bytes (the working dtype),
 * gradients of P bytes, and K bytes of optimizer state per parameter (4
 * for an FP32 master when there is one, also where `mixprec.master_weights`
 * keeps it as a remainder or compensates instead; 4 per state slot, 2 with
 * `bf16.bf16_optimizer_states`: DeepSpeed has no scaled or quantized
 * state). ZeRO-1 divides
 * K by the world size, ZeRO-2 the gradients and K, ZeRO-3 all three:
 * (2 + 2 + 12) Ψ / N for Adam in bf16 under ZeRO-3. The master bytes go to
 * @masters, the state slots to @optimizer_state; @accumulation and
 * @communication stay 0.
 *
 * With zero_optimization.offload_optimizer "cpu" on a device, ZeRO-Offload's
 * split (the model states of DeepSpeed's
 * estimate_zero2_model_states_mem_needs() and
 * estimate_zero3_model_states_mem_needs(), without their buffer factor):
 * the device holds the working copies only (2 Ψ, ZeRO-3 2 Ψ / N), and host
 * memory the rank's partition of the masters, the optimizer state and an
 * FP32 copy of the gradients, which @gradients then counts (4 Ψ / N): 16 Ψ
 * / N for Adam. With offload_param "cpu" under ZeRO-3 the working
 * partition (@working, 2 Ψ / N) is in host memory too: 18 Ψ / N there.
 * Since 1.1.
 *
 * Returns: (transfer full): the formula's bytes per rank, or %NULL with
 *   @error set
 *
 * Since: 1.1
 */
MixprecMemoryReport *
mixprec_memory_plan_new_deepspeed (MixprecConfig *config,
                                   guint64        n_params,
                                   guint          world_size,
                                   GError       **error)
{
  g_autoptr(MixprecEngine) probe = NULL;
  _MixprecParamDTypes dt = { 0 };
  MixprecMemoryReport r = { 0 };
  guint stage;
  gdouble psi = (gdouble) n_params, n;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);

  probe = _mixprec_engine_probe_model (config, world_size, &dt, error);
  if (probe == NULL)
    return NULL;
  stage = world_size > 1 ? mixprec_config_get_zero_stage (config) : 0;
  n = world_size;
  r.working = (guint64) (psi * mixprec_dtype_get_size (dt.working) / (stage >= 3 ? n : 1));
  /* Offloaded, DeepSpeed reduces the gradients bucket by bucket into an
   * FP32 partition in host memory, beside the masters. */
  if (probe->offload)
    r.gradients = (guint64) (psi * sizeof (gfloat) / (stage >= 1 ? n : 1));
  else
    r.gradients = (guint64) (psi * mixprec_dtype_get_size (dt.working) / (stage >= 2 ? n : 1));
  /* DeepSpeed keeps FP32 masters where libmixprec keeps them as
   * remainders or compensates instead. */
  r.masters = (guint64) (psi * (dt.has_master || _mixprec_engine_master_format (&probe->repr, &dt) !=
                                                MIXPREC_PLUGIN_MASTER_FLOAT32 ? 4 : 0) /
                         (stage >= 1 ? n : 1));
  r.optimizer_state = (guint64) (psi * mixprec_dtype_get_size (probe->state_dtype) *
                                 mixprec_feature_get_n_state_slots (probe->optimizer) /
                                 (stage >= 1 ? n : 1));
  r.total = r.working + r.gradients + r.masters + r.optimizer_state;
  return mixprec_memory_report_copy (&r);
}
