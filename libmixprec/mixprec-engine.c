/* mixprec-engine.c — the step pipeline: parameters laid out in contiguous
 * groups (ZeRO-partitioned across ranks), gradients folded across
 * micro-steps and reduced across ranks, then at the accumulation boundary
 * the fused non-finite check and sum of squares, the scaler update,
 * skip-or-clip, the fused optimizer step on this rank's shard, and the
 * refresh of the working copies.
 *
 * Determinism across world sizes: a global batch of M micro-batches gives
 * the same bits on one process with gradient_accumulation_steps = M as on W
 * processes with M / W each, when rank r processes micro-batches r, r + W,
 * r + 2W... Every micro-step's gradients are reduced into an FP32
 * accumulator as ((acc + x_0) + x_1) + ... in rank order (the comm
 * contract), which is exactly the fold one process makes; the sum of
 * squares is formed per fixed block of a group's element space, and
 * partitions are aligned to whole blocks, so every block is summed the same
 * way wherever it lives. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-autoprec-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"
#include "mixprec-optimizer-params-private.h"
#include "mixprec-config-private.h"

/**
 * MixprecEngine:
 *
 * The step pipeline of mixed-precision training: it owns the parameters'
 * working copies, gradients, accumulation buffers, FP32 master weights and
 * optimizer state, and the loss scaler, learning-rate schedule, optimizer
 * and communicator that act on them.
 *
 * An engine is made from a #MixprecConfig with mixprec_engine_new(). The
 * caller registers its parameters (mixprec_engine_register_param(),
 * mixprec_engine_register_external()), then for every micro-batch runs
 * its forward pass on the working copies, writes or hands over the
 * gradients of the loss multiplied by mixprec_engine_get_loss_scale(), and
 * calls mixprec_engine_backward_done(); at each accumulation boundary
 * mixprec_engine_step() checks for overflow, updates the scaler, clips,
 * runs the fused optimizer step and refreshes the working copies.
 *
 * Across ranks (see #MixprecBootstrap) the engine shards its buffers as
 * `zero_optimization.stage` says; every rank must register the same
 * parameters in the same order and make the same collective calls.
 *
 * The API reference's pages "The step pipeline", "Precision modes" and
 * "ZeRO layout and memory" describe the pipeline in detail.
 *
 * Since: 1.0
 */
G_DEFINE_FINAL_TYPE (MixprecEngine, mixprec_engine, G_TYPE_OBJECT)
/**
 * mixprec_engine_error_quark:
 *
 * Gets the error domain of #MixprecEngine.
 *
 * Returns: the quark behind %MIXPREC_ENGINE_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-engine-error-quark, mixprec_engine_error)
G_DEFINE_BOXED_TYPE (MixprecStepResult, mixprec_step_result,
                     mixprec_step_result_copy, mixprec_step_result_free)
G_DEFINE_BOXED_TYPE (MixprecMemoryReport, mixprec_memory_report,
                     mixprec_memory_report_copy, mixprec_memory_report_free)

/**
 * mixprec_step_result_copy:
 * @result: a #MixprecStepResult
 *
 * Makes a copy of @result, freed with mixprec_step_result_free().
 *
 * Returns: (transfer full): a copy of @result
 *
 * Since: 1.0
 */
MixprecStepResult *
mixprec_step_result_copy (const MixprecStepResult *result)
{
  return g_memdup2 (result, sizeof *result);
}

/**
 * mixprec_step_result_free:
 * @result: a #MixprecStepResult
 *
 * Frees a result returned by mixprec_engine_step().
 *
 * Since: 1.0
 */
void
mixprec_step_result_free (MixprecStepResult *result)
{
  g_free (result);
}

/**
 * mixprec_memory_report_copy:
 * @report: a #MixprecMemoryReport
 *
 * Makes a copy of @report, freed with mixprec_memory_report_free().
 *
 * Returns: (transfer full): a copy of @report
 *
 * Since: 1.0
 */
MixprecMemoryReport *
mixprec_memory_report_copy (const MixprecMemoryReport *report)
{
  return g_memdup2 (report, sizeof *report);
}

/**
 * mixprec_memory_report_free:
 * @report: a #MixprecMemoryReport
 *
 * Frees a report.
 *
 * Since: 1.0
 */
void
mixprec_memory_report_free (MixprecMemoryReport *report)
{
  g_free (report);
}

static void
init_values_free (gpointer data)
{
  InitValues *v = data;

  g_bytes_unref (v->values);
  g_free (v);
}

static void
mixprec_engine_finalize (GObject *object)
{
  MixprecEngine *self = MIXPREC_ENGINE (object);

  _mixprec_engine_offload_stop (self);
  for (guint j = 0; self->groups != NULL && j < self->groups->len; j++)
    _mixprec_engine_group_free (self, g_ptr_array_index (self->groups, j));
  g_clear_pointer (&self->groups, g_ptr_array_unref);
  g_clear_pointer (&self->init_values, g_hash_table_unref);
  g_clear_pointer (&self->by_name, g_hash_table_unref);
  g_clear_pointer (&self->params, g_ptr_array_unref);
  g_free (self->hparams);
  _mixprec_engine_close_monitors (self);
  _mixprec_engine_numerics_free (self);
  _mixprec_engine_autoprec_free (self);
  g_clear_object (&self->optimizer);
  g_clear_object (&self->schedule);
  g_clear_object (&self->scaler);
  g_clear_object (&self->policy);
  g_clear_object (&self->fp8_recipe);
  /* Communicators go before the device whose stream they may use. */
  g_clear_object (&self->comm);
  g_clear_object (&self->mp_comm);
  _mixprec_engine_free (self, self->device, self->norm_sums);
  g_clear_pointer (&self->allocations, g_hash_table_unref);
  g_clear_pointer (&self->device, _mixprec_device_unref);
  g_clear_object (&self->config);
  G_OBJECT_CLASS (mixprec_engine_parent_class)->finalize (object);
}

static void
mixprec_engine_class_init (MixprecEngineClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_engine_finalize;
}

static void
mixprec_engine_init (MixprecEngine *self)
{
  self->params = g_ptr_array_new_with_free_func (g_object_unref);
  self->by_name = g_hash_table_new (g_str_hash, g_str_equal);
  self->init_values = g_hash_table_new_full (g_direct_hash, g_direct_equal, NULL,
                                             init_values_free);
  self->groups = g_ptr_array_new ();
  self->allocations = g_hash_table_new (g_direct_hash, g_direct_equal);
  self->weight_decay_index = -1;
  self->world = 1;
}

gboolean
_mixprec_engine_comm_failed (GError **error, GError *cause, const gchar *what)
{
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_COMM,
               "%s: %s", what, cause->message);
  g_error_free (cause);
  return FALSE;
}

/* ---------------------------------------------------------------- optimizer */

/* bf16 optimizer state needs an optimizer that declares it: revision 2
 * of the plugin ABI. Said at setup, not at the first step. */
static gboolean
check_state_dtype (MixprecEngine *self,
                   GError       **error)
{
  gsize n = 0;
  const MixprecDType *dtypes;

  self->state_dtype = mixprec_config_get_optimizer_state_dtype (self->config);
  dtypes = mixprec_feature_get_state_dtypes (self->optimizer, &n);
  for (gsize i = 0; i < n; i++)
    if (dtypes[i] == self->state_dtype)
      return TRUE;
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_OPTIMIZER,
               "bf16.bf16_optimizer_states: optimizer '%s' (%s, plugin %s) speaks optimizer "
               "ABI revision %u and cannot keep its state in %s%s",
               mixprec_feature_get_name (self->optimizer), mixprec_feature_get_device (self->optimizer),
               mixprec_feature_get_plugin_name (self->optimizer),
               mixprec_feature_get_abi_revision (self->optimizer),
               mixprec_dtype_get_name (self->state_dtype),
               mixprec_feature_get_abi_revision (self->optimizer) < 2
               ? " (revision 1 keeps float32 state only)" : "");
  return FALSE;
}

/* The optimizer, found and checked as the configuration checked it
 * (mixprec-optimizer-params.c). */
static gboolean
setup_optimizer (MixprecEngine *self,
                 GError       **error)
{
  g_autoptr(GString) errors = g_string_new (NULL);

  /* The optimizer runs where the masters and the state are: the device's
   * memory, or the host's when they are offloaded (a plan has no device
   * open and asks about the configured one). */
  self->optimizer = _mixprec_optimizer_resolve (mixprec_config_get_optimizer_type (self->config),
                                                mixprec_config_get_optimizer_params (self->config),
                                                self->offload ? "cpu"
                                                : self->device != NULL
                                                ? _mixprec_device_get_name (self->device)
                                                : mixprec_config_get_device (self->config),
                                                &self->hparams, &self->n_hparams, errors,
                                                NULL);
  if (self->optimizer != NULL)
    self->weight_decay_index = mixprec_feature_find_hparam (self->optimizer, "weight_decay");
  if (errors->len > 0)
    {
      g_string_truncate (errors, errors->len - 1);
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_OPTIMIZER,
                   "%s", errors->str);
      return FALSE;
    }
  /* DeepSpeed's keys alone keep the message that names them. */
  return check_state_dtype (self, error) && _mixprec_engine_resolve_representation (self, error);
}

/* The one timeout of the rendezvous and of every collective:
 * MIXPREC_TIMEOUT (what mixprec-run --timeout sets) or the deprecated
 * MIXPREC_COMM_TIMEOUT_MS, else mixprec.timeout. The environment wins so
 * that a launcher can shorten the timeout of a job without editing its
 * config file. */
static gboolean
engine_timeout (MixprecConfig *config,
                guint         *timeout_ms,
                GError       **error)
{
  GError *local = NULL;

  if (!_mixprec_bootstrap_timeout_from_environ (NULL, timeout_ms, &local))
    return _mixprec_engine_comm_failed (error, local, "timeout");
  if (*timeout_ms == 0)
    *timeout_ms = (guint) (mixprec_config_get_timeout (config) * 1000.0 + 0.5);
  return TRUE;
}

static gboolean
check_distributed_config (MixprecEngine *self,
                          GError       **error)
{
  MixprecDType accum = mixprec_config_get_grad_accum_dtype (self->config);
  MixprecDType comm = mixprec_config_get_communication_dtype (self->config);

  if (self->world > 1 && accum != MIXPREC_DTYPE_FLOAT32 && comm != accum)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "communication_data_type: must equal the gradient accumulation dtype "
                   "(%s) when accumulating in a low-precision dtype across %u ranks, got %s",
                   mixprec_dtype_get_name (accum), self->world, mixprec_dtype_get_name (comm));
      return FALSE;
    }
  return TRUE;
}

/* Opens mixprec.device into *@device (NULL for "cpu"). Across ranks the
 * device is the one of the bootstrap's local rank (@local_rank, -1 for
 * the plugin's default): launchers such as mixprec-run and mpirun set no
 * LOCAL_RANK for the plugin to read. */
static gboolean
open_config_device (MixprecConfig   *config,
                    gint             local_rank,
                    _MixprecDevice **device,
                    GError         **error)
{
  const gchar *name = mixprec_config_get_device (config);
  GError *local = NULL;

  *device = local_rank < 0 ? _mixprec_device_open (name != NULL ? name : "cpu", -1, &local)
                           : _mixprec_device_open_local (name != NULL ? name : "cpu",
                                                         (guint) local_rank, &local);
  if (local == NULL)
    return TRUE;
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
               "mixprec.device: cannot use device '%s': %s", name, local->message);
  g_error_free (local);
  return FALSE;
}

/* The engine's device, unless the caller opened it already. */
static gboolean
open_device (MixprecEngine  *self,
             _MixprecDevice *device,
             GError        **error)
{
  if (device == NULL)
    return open_config_device (self->config, -1, &self->device, error);
  self->device = _mixprec_device_ref (device);
  return TRUE;
}

gboolean
_mixprec_engine_before_comm (MixprecEngine *self,
                             GError       **error)
{
  if (_mixprec_device_memory_is_host (self->device) || self->comm_on_stream)
    return TRUE;
  return _mixprec_device_synchronize (self->device, error);
}

/* Collectives move the engine's buffers, so they must run where those
 * live. */
static gboolean
check_comm_device (MixprecEngine *self,
                   MixprecComm   *comm,
                   const gchar   *which,
                   GError       **error)
{
  const gchar *mine = _mixprec_device_get_name (self->device);

  if (comm == NULL || g_strcmp0 (mixprec_comm_get_device (comm), mine) == 0)
    return TRUE;
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
               "the %s communicator moves '%s' memory (backend '%s'), but the engine's "
               "buffers are on device '%s' (mixprec.device); use a backend for '%s' "
               "(e.g. %s)", which, mixprec_comm_get_device (comm),
               mixprec_comm_get_backend (comm), mine, mine,
               g_str_equal (mine, "cuda") ? "nccl" : "ucx");
  return FALSE;
}

/* zero_optimization.offload_optimizer "cpu" on a device: the masters and
 * the optimizer state in host memory, stepped by the cpu optimizer. (A
 * plan has no device open and asks about the configured one.) Across
 * ranks nothing else changes: the gradients are reduced and the working
 * copies gathered in device memory, as without offload; each rank's
 * masters and state are those of the elements it steps (its shard from
 * ZeRO-1 on), and only they live on the host. */
static gboolean
check_offload (MixprecEngine *self,
               gboolean       plan_only,
               GError       **error)
{
  gboolean on_device = plan_only ? g_strcmp0 (mixprec_config_get_device (self->config), "cpu") != 0
                                 : !_mixprec_device_memory_is_host (self->device);

  self->offload = on_device && _mixprec_config_get_offload_optimizer (self->config);
  self->offload_pinned = self->offload &&
                         _mixprec_engine_offload_pinned (self, _mixprec_config_get_offload_pin_memory (self->config),
                                                         "zero_optimization.offload_optimizer.pin_memory",
                                                         plan_only);
  /* offload_param: ZeRO-3's partitions of the working copies in host
   * memory too (the loader accepts it only beside offload_optimizer). On
   * one process the engine partitions nothing: the working copies are
   * whole on the device, where DeepSpeed's one-GPU ZeRO-3 would keep its
   * (whole) partitions in host memory and bring each up for its use.
   * Refused rather than ignored, since a script asks for it to fit a
   * model the device cannot hold. */
  self->offload_param = self->offload && self->stage >= 3 && _mixprec_config_get_offload_param (self->config);
  if (!plan_only && self->offload && self->world == 1 && _mixprec_config_get_offload_param (self->config) &&
      mixprec_config_get_zero_stage (self->config) == 3)
    {
      g_set_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED,
                   "zero_optimization.offload_param: on one process ZeRO-3 partitions nothing and "
                   "the working copies stay whole on device '%s', so they cannot be kept in host "
                   "memory between uses as DeepSpeed keeps them; remove offload_param "
                   "(offload_optimizer alone still moves the masters and the optimizer state to "
                   "host memory) or run on several ranks",
                   _mixprec_device_get_name (self->device));
      return FALSE;
    }
  self->offload_param_pinned = self->offload_param &&
                               _mixprec_engine_offload_pinned (self,
                                                               _mixprec_config_get_offload_param_pin_memory (self->config),
                                                               "zero_optimization.offload_param.pin_memory",
                                                               plan_only);
  return TRUE;
}

MixprecEngine *
_mixprec_engine_new_internal (MixprecConfig  *config,
            _MixprecDevice *device,
            MixprecComm   *comm,
            MixprecComm   *mp_comm,
            gboolean       plan_only,
            GError       **error)
{
  g_autoptr(MixprecEngine) self = g_object_new (MIXPREC_TYPE_ENGINE, NULL);

  self->config = g_object_ref (config);
  /* A device the caller opened had the communicator made on its stream. */
  self->comm_on_stream = device != NULL;
  if ((!plan_only && !open_device (self, device, error)) ||
      !check_comm_device (self, comm, "data-parallel", error) ||
      !check_comm_device (self, mp_comm, "model-parallel", error))
    return NULL;
  self->gas = MAX (mixprec_config_get_gradient_accumulation_steps (config), 1);
  self->seed = mixprec_config_get_seed (config);
  self->stochastic = mixprec_config_get_stochastic_rounding (config);
  if (comm != NULL)
    {
      self->comm = g_object_ref (comm);
      self->rank = mixprec_comm_get_rank (comm);
      self->world = mixprec_comm_get_world_size (comm);
    }
  if (mp_comm != NULL && mixprec_comm_get_world_size (mp_comm) > 1)
    self->mp_comm = g_object_ref (mp_comm);
  /* Sharding means nothing on one process: stage 0 keeps the simple path. */
  self->stage = self->world > 1 ? mixprec_config_get_zero_stage (config) : 0;
  self->overlap = self->stage >= 2 && mixprec_config_get_overlap_comm (config);

  if (!check_distributed_config (self, error) || !check_offload (self, plan_only, error))
    return NULL;
  self->policy = mixprec_precision_policy_new_from_config (config, error);
  if (self->policy == NULL)
    return NULL;
  self->scaler = mixprec_loss_scaler_new_from_config (config, error);
  if (self->scaler == NULL)
    return NULL;
  self->schedule = mixprec_lr_schedule_new_from_config (config, error);
  if (self->schedule == NULL)
    return NULL;
  if (!setup_optimizer (self, error))
    return NULL;
  if (!plan_only && !_mixprec_engine_open_monitors (self, error))
    return NULL;
  if (!plan_only && !_mixprec_engine_numerics_setup (self, error))
    return NULL;
  if (!plan_only && !_mixprec_engine_autoprec_setup (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * mixprec_engine_new:
 * @config: the resolved training configuration
 * @error: return location for a #GError
 *
 * Creates an engine: the precision policy, the loss scaler, the
 * learning-rate schedule and the optimizer named by @config (found through
 * the plugin registry for the config's device). DeepSpeed optimizer types
 * map onto plugin features: Adam and AdamW onto adamw, SGD onto sgd, Lion
 * onto lion; any other name is looked up as a feature name.
 *
 * With mixprec.comm "local" the engine is one process and reads no
 * launcher variables at all. Otherwise the ranks come from the
 * environment (see #MixprecBootstrap): with a world
 * size above 1 the engine joins the rendezvous and opens a communicator of
 * the config's mixprec.comm backend, and shards according to
 * zero_optimization.stage. The rendezvous, and every collective that makes
 * no progress, fail instead of hanging after the timeout: the environment
 * variable `MIXPREC_TIMEOUT` (seconds; `mixprec-run --timeout` sets it),
 * else the deprecated `MIXPREC_COMM_TIMEOUT_MS` (milliseconds), else
 * mixprec.timeout (default 300 seconds).
 *
 * Returns: (transfer full): a new engine, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecEngine *
mixprec_engine_new (MixprecConfig *config,
                    GError       **error)
{
  g_autoptr(MixprecBootstrap) bootstrap = NULL;
  g_autoptr(MixprecComm) comm = NULL;
  g_autoptr(_MixprecDevice) device = NULL;
  GError *local = NULL;
  guint timeout = 0;

  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  /* comm "local" is one process whatever the environment says: an engine
   * private to each process of a job that something else distributes
   * (torch.distributed, an MPI program) must not join a rendezvous */
  if (g_strcmp0 (mixprec_config_get_comm_backend (config), "local") == 0)
    {
      if (!open_config_device (config, -1, &device, error))
        return NULL;
      return _mixprec_engine_new_internal (config, device, NULL, NULL, FALSE, error);
    }
  if (!engine_timeout (config, &timeout, error))
    return NULL;
  bootstrap = _mixprec_bootstrap_new_from_environ_full (NULL, timeout,
                                                       _mixprec_config_get_require_job_secret (config),
                                                       &local);
  if (bootstrap == NULL)
    return (_mixprec_engine_comm_failed (error, local, "rendezvous"), NULL);
  /* The device first: a device communicator joins its stream (and the
   * device of this rank's local rank). */
  if (!open_config_device (config, mixprec_bootstrap_get_world_size (bootstrap) > 1
                                   ? (gint) mixprec_bootstrap_get_local_rank (bootstrap) : -1,
                           &device, error))
    return NULL;
  if (mixprec_bootstrap_get_world_size (bootstrap) > 1)
    {
      comm = _mixprec_comm_new_on_stream (bootstrap, mixprec_config_get_comm_backend (config),
                                          _mixprec_device_get_name (device), timeout,
                                          _mixprec_device_get_stream (device), &local);
      if (comm == NULL)
        return (_mixprec_engine_comm_failed (error, local, "communicator"), NULL);
    }
  return _mixprec_engine_new_internal (config, device, comm, NULL, FALSE, error);
}

/**
 * mixprec_engine_new_with_comm:
 * @config: the resolved training configuration
 * @comm: (nullable): the data-parallel communicator to shard over, or
 *   %NULL for one process
 * @model_parallel_comm: (nullable): a model-parallel (tensor-parallel)
 *   group whose ranks hold other parts of the model: the overflow flag and
 *   the gradient norm are agreed over it too, as in Megatron's AMP
 * @error: return location for a #GError
 *
 * Creates an engine on communicators the caller made, e.g. when data and
 * model parallelism split the ranks into groups.
 *
 * Returns: (transfer full): a new engine, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecEngine *
mixprec_engine_new_with_comm (MixprecConfig *config,
                              MixprecComm   *comm,
                              MixprecComm   *model_parallel_comm,
                              GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (comm == NULL || MIXPREC_IS_COMM (comm), NULL);
  g_return_val_if_fail (model_parallel_comm == NULL || MIXPREC_IS_COMM (model_parallel_comm), NULL);
  return _mixprec_engine_new_internal (config, NULL, comm, model_parallel_comm, FALSE, error);
}

/**
 * mixprec_engine_new_from_file: (constructor)
 * @filename: (type filename): a JSON configuration file (see mixprec.json(5))
 * @error: return location for a #GError
 *
 * Reads @filename with mixprec_config_new_from_file() and creates an
 * engine on it with mixprec_engine_new(): the two calls every trainer
 * starts with. mixprec_engine_get_config() returns the configuration.
 *
 * Returns: (transfer full): a new engine, or %NULL with @error set; an
 *   error in the file (one it cannot read, invalid JSON, a wrong value)
 *   is #MIXPREC_CONFIG_ERROR with a message naming the file
 *
 * Since: 1.1
 */
MixprecEngine *
mixprec_engine_new_from_file (const gchar  *filename,
                              GError      **error)
{
  g_autoptr(MixprecConfig) config = NULL;

  g_return_val_if_fail (filename != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  config = mixprec_config_new_from_file (filename, error);
  if (config == NULL)
    return NULL;
  return mixprec_engine_new (config, error);
}

/**
 * mixprec_engine_micro_step:
 * @self: a #MixprecEngine
 * @result: (out) (optional) (nullable) (transfer full): where to store
 *   what the optimizer step did when this micro-step completed an
 *   accumulation window, else %NULL
 * @error: return location for a #GError
 *
 * Ends one micro-batch: call it once the backward pass has written the
 * gradients of the scaled loss (mixprec_engine_get_loss_scale()) into the
 * parameters' gradient buffers, or handed them over with
 * mixprec_param_reduce_grad(). It runs mixprec_engine_backward_done() and,
 * when that completes gradient_accumulation_steps micro-batches, also
 * mixprec_engine_step(): a trainer loop needs no other call per
 * micro-batch. The two calls stay available for trainers that want to act
 * between them.
 *
 * Returns: (skip): %TRUE on success (with @result %NULL when no step was
 *   due); %FALSE with @error set when backward_done() or step() failed
 *
 * Since: 1.1
 */
gboolean
mixprec_engine_micro_step (MixprecEngine      *self,
                           MixprecStepResult **result,
                           GError            **error)
{
  g_autoptr(MixprecStepResult) step = NULL;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (result != NULL)
    *result = NULL;
  if (!mixprec_engine_backward_done (self, error))
    return FALSE;
  if (!mixprec_engine_is_accumulation_boundary (self))
    return TRUE;
  step = mixprec_engine_step (self, error);
  if (step == NULL)
    return FALSE;
  if (result != NULL)
    *result = g_steal_pointer (&step);
  return TRUE;
}

/**
 * mixprec_engine_get_config:
 * @self: a #MixprecEngine
 *
 * Gives the configuration the engine was created with.
 *
 * Returns: (transfer none): the configuration the engine was built from
 *
 * Since: 1.0
 */
MixprecConfig *
mixprec_engine_get_config (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return self->config;
}

/**
 * mixprec_engine_get_rank:
 * @self: a #MixprecEngine
 *
 * Gives this process's rank among the engine's data-parallel ranks.
 *
 * Returns: this process's rank in the data-parallel group
 *
 * Since: 1.0
 */
guint
mixprec_engine_get_rank (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 0);
  return self->rank;
}

/**
 * mixprec_engine_get_world_size:
 * @self: a #MixprecEngine
 *
 * Gives the number of data-parallel ranks the engine shards and reduces
 * over.
 *
 * Returns: the number of data-parallel ranks
 *
 * Since: 1.0
 */
guint
mixprec_engine_get_world_size (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1);
  return self->world;
}

/**
 * mixprec_engine_get_zero_stage:
 * @self: a #MixprecEngine
 *
 * Gives the ZeRO stage the engine runs.
 *
 * Returns: the ZeRO stage in effect: the configured one across several
 *   ranks, 0 on one process (there is nothing to shard)
 *
 * Since: 1.0
 */
guint
mixprec_engine_get_zero_stage (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 0);
  return self->stage;
}

/**
 * mixprec_engine_get_loss_scaler:
 * @self: a #MixprecEngine
 *
 * Gives the loss scaler the engine consults and updates at every step.
 *
 * Returns: (transfer none): the loss scaler the engine updates each step
 *
 * Since: 1.0
 */
MixprecLossScaler *
mixprec_engine_get_loss_scaler (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return self->scaler;
}

/* ---------------------------------------------------------------- registration */

static gboolean
check_registration (MixprecEngine  *self,
                    const gchar    *name,
                    const guint64  *shape,
                    guint           n_dims,
                    guint64        *numel,
                    GError        **error)
{
  guint64 count = 1;

  if (self->prepared)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': parameters must be registered before the engine lays out "
                   "its buffers (the first buffer access, prepare(), backward_done() or step())",
                   name != NULL ? name : "(null)");
      return FALSE;
    }
  if (name == NULL || *name == '\0' || !g_utf8_validate (name, -1, NULL))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter name: must be a non-empty UTF-8 string");
      return FALSE;
    }
  if (g_hash_table_contains (self->by_name, name))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': already registered", name);
      return FALSE;
    }
  if (n_dims > 0 && shape == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': %u dimensions but no shape", name, n_dims);
      return FALSE;
    }
  for (guint i = 0; i < n_dims; i++)
    {
      /* 2^48 elements is far beyond any memory; it keeps byte counts of
       * every dtype within 64 bits. */
      if (shape[i] != 0 && count > (G_GUINT64_CONSTANT (1) << 48) / shape[i])
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                       "parameter '%s': shape too large (more than 2^48 elements)", name);
          return FALSE;
        }
      count *= shape[i];
    }
  *numel = count;
  return TRUE;
}

static MixprecParam *
add_param (MixprecEngine  *self,
           const gchar    *name,
           const guint64  *shape,
           guint           n_dims,
           guint64         numel,
           const gchar    *module_type,
           gboolean        external,
           GError        **error)
{
  _MixprecParamDTypes dtypes = { 0 };
  MixprecDType master_dtype;
  MixprecParam *param;
  gdouble decay;

  if (!mixprec_precision_policy_resolve (self->policy, name, module_type,
                                         &dtypes.working, &master_dtype, &dtypes.has_master,
                                         &dtypes.accum, &dtypes.comm, error))
    {
      g_prefix_error (error, "parameter '%s': ", name);
      return NULL;
    }
  /* Gradients arrive in the dtype the backward pass computes in: the
   * working dtype. A separate master exists only when it is wider. */
  dtypes.grad = dtypes.working;
  if (dtypes.working == MIXPREC_DTYPE_FLOAT32)
    dtypes.has_master = FALSE;

  /* mixprec.weight_decay_exempt decides (mixprec-policy.c). */
  decay = _mixprec_weight_decay_multiplier (self->config, name, module_type, n_dims);

  param = _mixprec_param_new (self, name, shape, n_dims, numel, module_type,
                              &dtypes, decay, external);
  if (!_mixprec_engine_fp8_register (self, param, error))
    {
      g_object_unref (param);
      return NULL;
    }
  g_ptr_array_add (self->params, param);
  g_hash_table_insert (self->by_name, (gpointer) mixprec_param_get_name (param), param);
  return param;
}

/**
 * mixprec_engine_register_param:
 * @self: a #MixprecEngine
 * @name: a unique name, e.g. "h1.weight"
 * @shape: (array length=n_dims): the shape
 * @n_dims: the number of dimensions (0 for a scalar)
 * @module_type: (nullable): the module type the precision policy keys on,
 *   e.g. "Linear", "LayerNorm", "Embedding"
 * @init_dtype: the dtype of @init
 * @init: the initial values, numel elements of @init_dtype
 * @error: return location for a #GError
 *
 * Registers a parameter whose buffers the engine owns and lays out with
 * the others of the same precision and optimizer settings. The initial
 * values are taken when the engine lays out its buffers (widened to FP32
 * for the master, rounded to nearest even for a low-precision working
 * copy; under ZeRO each rank keeps only the parts it holds); until then
 * the engine keeps a reference to @init, not a copy.
 *
 * Returns: (transfer none): the parameter, owned by the engine, or %NULL
 *   with @error set
 *
 * Since: 1.0
 */
MixprecParam *
mixprec_engine_register_param (MixprecEngine  *self,
                               const gchar    *name,
                               const guint64  *shape,
                               guint           n_dims,
                               const gchar    *module_type,
                               MixprecDType    init_dtype,
                               GBytes         *init,
                               GError        **error)
{
  guint64 numel = 0;
  gsize len = 0;
  MixprecParam *param;
  g_autofree InitValues *values = NULL;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (init != NULL, NULL);

  if (!check_registration (self, name, shape, n_dims, &numel, error))
    return NULL;
  if (!mixprec_dtype_is_valid (init_dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': %d is not a dtype", name, (gint) init_dtype);
      return NULL;
    }
  g_bytes_get_data (init, &len);
  if (len != numel * mixprec_dtype_get_size (init_dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': initial values of %" G_GSIZE_FORMAT " bytes, expected %"
                   G_GUINT64_FORMAT " elements of %s (%" G_GUINT64_FORMAT " bytes)",
                   name, len, numel, mixprec_dtype_get_name (init_dtype),
                   numel * mixprec_dtype_get_size (init_dtype));
      return NULL;
    }
  param = add_param (self, name, shape, n_dims, numel, module_type, FALSE, error);
  if (param == NULL)
    return NULL;
  /* A reference, not a copy: GBytes never change, and a model registered
   * parameter by parameter then costs no second copy of itself. */
  values = g_new (InitValues, 1);
  values->dtype = init_dtype;
  values->values = g_bytes_ref (init);
  g_hash_table_insert (self->init_values, param, g_steal_pointer (&values));
  return param;
}

/**
 * mixprec_engine_register_external: (skip)
 * @self: a #MixprecEngine
 * @name: a unique name
 * @shape: (array length=n_dims): the shape
 * @n_dims: the number of dimensions
 * @module_type: (nullable): the module type the precision policy keys on
 * @working: the caller's working copy, in the dtype the precision policy
 *   gives this module type, holding the initial values; it must stay valid
 *   while the engine lives
 * @grad: the caller's gradient buffer (same dtype and size)
 * @error: return location for a #GError
 *
 * Registers a parameter whose working copy and gradient live in memory the
 * caller owns (e.g. a framework's tensors). The engine keeps the FP32
 * master (when the policy wants one), the accumulation buffer and the
 * optimizer state, and writes new values into @working after each applied
 * step. Check the dtypes with mixprec_param_get_working_dtype() on the
 * result, or resolve them beforehand with the precision policy.
 *
 * Returns: (transfer none): the parameter, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecParam *
mixprec_engine_register_external (MixprecEngine  *self,
                                  const gchar    *name,
                                  const guint64  *shape,
                                  guint           n_dims,
                                  const gchar    *module_type,
                                  gpointer        working,
                                  gpointer        grad,
                                  GError        **error)
{
  guint64 numel = 0;
  MixprecParam *param;
  _MixprecParamStorage *storage;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);

  if (!check_registration (self, name, shape, n_dims, &numel, error))
    return NULL;
  if (self->world > 1)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': memory the caller owns can only be registered on one "
                   "process; across %u ranks the engine shards its own buffers",
                   name, self->world);
      return NULL;
    }
  if (!_mixprec_device_memory_is_host (self->device))
    {
      /* The device's sum of squares runs over whole blocks of one buffer;
       * per-parameter buffers would cut blocks apart. */
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': memory the caller owns can only be registered with "
                   "mixprec.device \"cpu\"; on '%s' register the parameter with "
                   "mixprec_engine_register_param() and write its gradient into "
                   "mixprec_param_get_grad_data()", name, _mixprec_device_get_name (self->device));
      return NULL;
    }
  if (numel > 0 && (working == NULL || grad == NULL))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': external memory needs both a working and a gradient buffer",
                   name);
      return NULL;
    }
  param = add_param (self, name, shape, n_dims, numel, module_type, TRUE, error);
  if (param == NULL)
    return NULL;
  storage = _mixprec_param_get_storage (param);
  storage->working = working;
  storage->grad = grad;
  return param;
}

/**
 * mixprec_engine_register_external_address: (rename-to mixprec_engine_register_external)
 * @self: a #MixprecEngine
 * @name: a unique name
 * @shape: (array length=n_dims): the shape
 * @n_dims: the number of dimensions
 * @module_type: (nullable): the module type the precision policy keys on
 * @dtype: the dtype of the caller's memory; it must be the working dtype
 *   the precision policy gives @module_type
 * @working: the address of the caller's working copy in host memory,
 *   holding the initial values
 * @grad: the address of the caller's gradient buffer (same dtype and size)
 * @error: return location for a #GError
 *
 * mixprec_engine_register_external() for bindings, with the buffers as
 * addresses (the Python overrides pass a NumPy array's or a DLPack
 * tensor's data pointer) and the dtype checked against the precision
 * policy before anything is registered. Both buffers must stay valid while
 * the engine lives: the caller keeps the objects that own them.
 *
 * Returns: (transfer none): the parameter, or %NULL with @error set
 *
 * Since: 1.1
 */
MixprecParam *
mixprec_engine_register_external_address (MixprecEngine  *self,
                                          const gchar    *name,
                                          const guint64  *shape,
                                          guint           n_dims,
                                          const gchar    *module_type,
                                          MixprecDType    dtype,
                                          guint64         working,
                                          guint64         grad,
                                          GError        **error)
{
  MixprecDType policy_dtype, master_dtype, accum, comm;
  gboolean has_master;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);

  if (!mixprec_dtype_is_valid (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a dtype", name, (gint) dtype);
      return NULL;
    }
  if (!mixprec_precision_policy_resolve (self->policy, name, module_type, &policy_dtype,
                                         &master_dtype, &has_master, &accum, &comm, error))
    {
      g_prefix_error (error, "parameter '%s': ", name);
      return NULL;
    }
  if (policy_dtype != dtype)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': the precision policy keeps module type '%s' in %s, "
                   "the caller's memory holds %s", name, module_type != NULL ? module_type : "",
                   mixprec_dtype_get_name (policy_dtype), mixprec_dtype_get_name (dtype));
      return NULL;
    }
  return mixprec_engine_register_external (self, name, shape, n_dims, module_type,
                                           GSIZE_TO_POINTER ((gsize) working),
                                           GSIZE_TO_POINTER ((gsize) grad), error);
}

/**
 * mixprec_engine_get_param:
 * @self: a #MixprecEngine
 * @name: a parameter name
 *
 * Looks up a registered parameter by name.
 *
 * Returns: (transfer none) (nullable): the parameter registered as @name
 *
 * Since: 1.0
 */
MixprecParam *
mixprec_engine_get_param (MixprecEngine *self,
                          const gchar   *name)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  return g_hash_table_lookup (self->by_name, name);
}

/**
 * mixprec_engine_get_params:
 * @self: a #MixprecEngine
 *
 * Lists the parameters registered with the engine.
 *
 * Returns: (transfer container) (element-type MixprecParam): the parameters
 *   in registration order
 *
 * Since: 1.0
 */
GPtrArray *
mixprec_engine_get_params (MixprecEngine *self)
{
  GPtrArray *out;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  out = g_ptr_array_new_full (self->params->len, g_object_unref);
  for (guint i = 0; i < self->params->len; i++)
    g_ptr_array_add (out, g_object_ref (g_ptr_array_index (self->params, i)));
  return out;
}

