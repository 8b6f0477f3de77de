/* mixprec-param.c — one registered tensor: its name, shape, dtypes and views
 * of the engine-owned (or user-owned) buffers. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-param-private.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-private.h"

/**
 * MixprecParam:
 *
 * A tensor registered with a #MixprecEngine: its name, shape, module type,
 * the dtypes the precision policy chose for it, and views of its buffers.
 *
 * The buffers exist once the engine has laid them out, which happens at
 * the first access to any buffer, at mixprec_engine_prepare(), or at the
 * first mixprec_engine_backward_done(); from then on the pointers stay
 * valid for the engine's lifetime.
 *
 * Since: 1.0
 */
struct _MixprecParam
{
  GObject parent_instance;

  gpointer engine;          /* weak: the engine owns its params */
  gchar *name;
  gchar *module_type;
  guint64 *shape;
  guint n_dims;
  guint64 numel;
  _MixprecParamDTypes dtypes;
  gdouble weight_decay_multiplier;
  gboolean external;
  _MixprecParamStorage storage;
};

G_DEFINE_FINAL_TYPE (MixprecParam, mixprec_param, G_TYPE_OBJECT)

static void
mixprec_param_dispose (GObject *object)
{
  MixprecParam *self = MIXPREC_PARAM (object);

  if (self->engine != NULL)
    {
      g_object_remove_weak_pointer (G_OBJECT (self->engine), &self->engine);
      self->engine = NULL;
    }
  g_clear_pointer (&self->storage.device, _mixprec_device_unref);
  g_clear_object (&self->storage.fp8_scaling);
  memset (&self->storage, 0, sizeof self->storage);
  G_OBJECT_CLASS (mixprec_param_parent_class)->dispose (object);
}

static void
mixprec_param_finalize (GObject *object)
{
  MixprecParam *self = MIXPREC_PARAM (object);

  g_free (self->name);
  g_free (self->module_type);
  g_free (self->shape);
  G_OBJECT_CLASS (mixprec_param_parent_class)->finalize (object);
}

static void
mixprec_param_class_init (MixprecParamClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->dispose = mixprec_param_dispose;
  object_class->finalize = mixprec_param_finalize;
}

static void
mixprec_param_init (MixprecParam *self)
{
}

MixprecParam *
_mixprec_param_new (gpointer                   engine,
                    const gchar               *name,
                    const guint64             *shape,
                    guint                      n_dims,
                    guint64                    numel,
                    const gchar               *module_type,
                    const _MixprecParamDTypes *dtypes,
                    gdouble                    weight_decay_multiplier,
                    gboolean                   external)
{
  MixprecParam *self = g_object_new (MIXPREC_TYPE_PARAM, NULL);

  self->engine = engine;
  g_object_add_weak_pointer (G_OBJECT (engine), &self->engine);
  self->name = g_strdup (name);
  self->module_type = g_strdup (module_type != NULL ? module_type : "");
  self->shape = g_memdup2 (shape, sizeof (guint64) * MAX (n_dims, 1));
  self->n_dims = n_dims;
  self->numel = numel;
  self->dtypes = *dtypes;
  self->weight_decay_multiplier = weight_decay_multiplier;
  self->external = external;
  return self;
}

_MixprecParamStorage *
_mixprec_param_get_storage (MixprecParam *self)
{
  return &self->storage;
}

void
_mixprec_param_set_dtypes (MixprecParam              *self,
                           const _MixprecParamDTypes *dtypes)
{
  self->dtypes = *dtypes;
}

gboolean
_mixprec_param_is_external (MixprecParam *self)
{
  return self->external;
}

gboolean
_mixprec_param_ensure_storage (MixprecParam *self,
                               GError      **error)
{
  if (self->engine == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': its engine no longer exists", self->name);
      return FALSE;
    }
  return _mixprec_engine_ensure_prepared (self->engine, error);
}

gpointer
_mixprec_param_get_engine (MixprecParam *self)
{
  return self->engine;
}

/* The whole gradient buffer, which ZeRO-2/3 allocate on first use. */
static gboolean
ensure_grad (MixprecParam *self,
             GError      **error)
{
  if (!_mixprec_param_ensure_storage (self, error))
    return FALSE;
  return _mixprec_engine_ensure_grad_of (self->engine, self, error);
}

/**
 * mixprec_param_get_name:
 * @self: a #MixprecParam
 *
 * Gives the parameter's name, unique in its engine.
 *
 * Returns: the name the parameter was registered under
 *
 * Since: 1.0
 */
const gchar *
mixprec_param_get_name (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  return self->name;
}

/**
 * mixprec_param_get_module_type:
 * @self: a #MixprecParam
 *
 * Gives the module type the parameter was registered with, the key of the
 * precision policy.
 *
 * Returns: the module type given at registration ("Linear", "LayerNorm"...),
 *   or "" when none was given
 *
 * Since: 1.0
 */
const gchar *
mixprec_param_get_module_type (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  return self->module_type;
}

/**
 * mixprec_param_get_shape:
 * @self: a #MixprecParam
 * @n_dims: (out): return location for the number of dimensions
 *
 * Gives the parameter's shape, as registered.
 *
 * Returns: (array length=n_dims) (transfer none): the shape
 *
 * Since: 1.0
 */
const guint64 *
mixprec_param_get_shape (MixprecParam *self,
                         guint        *n_dims)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  g_return_val_if_fail (n_dims != NULL, NULL);
  *n_dims = self->n_dims;
  return self->shape;
}

/**
 * mixprec_param_get_numel:
 * @self: a #MixprecParam
 *
 * Gives how many elements the parameter has.
 *
 * Returns: the number of elements (the product of the shape)
 *
 * Since: 1.0
 */
guint64
mixprec_param_get_numel (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 0);
  return self->numel;
}

/**
 * mixprec_param_get_working_dtype:
 * @self: a #MixprecParam
 *
 * Gives the data type of the parameter's working copy, the weights the
 * forward and backward passes use.
 *
 * Returns: the dtype of the working copy the forward pass reads
 *
 * Since: 1.0
 */
MixprecDType
mixprec_param_get_working_dtype (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), MIXPREC_DTYPE_FLOAT32);
  return self->dtypes.working;
}

/**
 * mixprec_param_get_grad_dtype:
 * @self: a #MixprecParam
 *
 * Gives the data type the caller writes the parameter's gradients in.
 *
 * Returns: the dtype gradients are written in (the working dtype)
 *
 * Since: 1.0
 */
MixprecDType
mixprec_param_get_grad_dtype (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), MIXPREC_DTYPE_FLOAT32);
  return self->dtypes.grad;
}

/**
 * mixprec_param_get_accum_dtype:
 * @self: a #MixprecParam
 *
 * Gives the data type of the buffer the engine sums the parameter's
 * gradients in across micro-steps.
 *
 * Returns: the dtype gradients are accumulated in across micro-steps
 *
 * Since: 1.0
 */
MixprecDType
mixprec_param_get_accum_dtype (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), MIXPREC_DTYPE_FLOAT32);
  return self->dtypes.accum;
}

/**
 * mixprec_param_get_comm_dtype:
 * @self: a #MixprecParam
 *
 * Gives the data type the parameter's gradients are reduced in between
 * ranks.
 *
 * Returns: the dtype gradients are communicated in between ranks
 *
 * Since: 1.0
 */
MixprecDType
mixprec_param_get_comm_dtype (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), MIXPREC_DTYPE_FLOAT32);
  return self->dtypes.comm;
}

/**
 * mixprec_param_has_master:
 * @self: a #MixprecParam
 *
 * Tells whether the engine keeps an FP32 master copy of the parameter
 * beside its working copy.
 *
 * Returns: %TRUE when a separate FP32 master copy is kept (fp16 and bf16
 *   modes); %FALSE when the working copy is itself FP32 or when training
 *   in bf16 without master weights
 *
 * Since: 1.0
 */
gboolean
mixprec_param_has_master (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  return self->dtypes.has_master;
}

/**
 * mixprec_param_get_weight_decay_multiplier:
 * @self: a #MixprecParam
 *
 * Tells whether the optimizer's weight decay applies to the parameter, as
 * a factor on the decay.
 *
 * Returns: 1 when the optimizer's weight decay applies to this parameter,
 *   0 when it is exempt, as `mixprec.weight_decay_exempt` says: by default
 *   ("1d") parameters of fewer than two dimensions such as biases and
 *   normalisation weights; with "none" no parameter, as DeepSpeed and
 *   torch.optim decay every parameter of a group; with "names" those
 *   Hugging Face's Trainer exempts (biases, LayerNorm modules, and names
 *   containing "layernorm" or "rmsnorm", or a component "norm" or ending
 *   in "_norm")
 *
 * Since: 1.0
 */
gdouble
mixprec_param_get_weight_decay_multiplier (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 1.0);
  return self->weight_decay_multiplier;
}

/**
 * mixprec_param_get_working_data: (skip)
 * @self: a #MixprecParam
 *
 * The working copy the forward pass reads, in
 * mixprec_param_get_working_dtype(). Lays out the engine's buffers on the
 * first call (after which no more parameters can be registered). The
 * pointer is in the memory of the engine's device (`mixprec.device`):
 * host memory for "cpu", device memory for "cuda"; mixprec_param_get_working()
 * copies to the host from either.
 *
 * Returns: (nullable): the working copy, or %NULL when the engine could
 *   not allocate its buffers (mixprec_engine_prepare() reports why)
 *
 * Since: 1.0
 */
gpointer
mixprec_param_get_working_data (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  self->storage.address_taken = TRUE;
  if (!_mixprec_param_ensure_storage (self, NULL))
    return NULL;
  return self->storage.working;
}

/**
 * mixprec_param_get_grad_data: (skip)
 * @self: a #MixprecParam
 *
 * The buffer the backward pass writes this parameter's gradient into (of
 * the scaled loss), in mixprec_param_get_grad_dtype(). The engine zeroes
 * it after consuming it in mixprec_engine_backward_done(), so a backward
 * pass may either overwrite it or add to it. Like the working copy it is
 * in the engine's device memory; mixprec_param_set_grad() writes it from
 * the host.
 *
 * Under ZeRO-2 and ZeRO-3 across ranks the engine keeps no gradient buffer
 * of the model's size unless asked: the first call of this function (or of
 * mixprec_param_set_grad() or mixprec_param_add_grad()) allocates one for
 * the parameter's whole group. Large models hand gradients over with
 * mixprec_param_reduce_grad() instead.
 *
 * Returns: (nullable): the gradient buffer, or %NULL when the engine could
 *   not allocate its buffers
 *
 * Since: 1.0
 */
gpointer
mixprec_param_get_grad_data (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  self->storage.address_taken = TRUE;
  if (!ensure_grad (self, NULL))
    return NULL;
  return self->storage.grad;
}

/**
 * mixprec_param_get_master_data: (skip)
 * @self: a #MixprecParam
 *
 * Gives direct access to the FP32 values the optimizer updates, on the
 * host, without a copy; they change at every applied step.
 *
 * Returns: (nullable): the FP32 values the optimizer updates (the master
 *   copy, or the working copy when it is FP32), or %NULL in bf16 without
 *   master weights
 *
 * Since: 1.0
 */
const gfloat *
mixprec_param_get_master_data (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  self->storage.address_taken = TRUE;
  if (!_mixprec_param_ensure_storage (self, NULL))
    return NULL;
  return self->storage.master;
}

/**
 * mixprec_param_get_engine:
 * @self: a #MixprecParam
 *
 * The engine the parameter is registered with. A parameter does not keep
 * its engine alive (the engine owns its parameters); bindings that hand
 * out views of the engine's buffers hold a reference to the engine
 * through this.
 *
 * Returns: (transfer none) (nullable): the engine, or %NULL once it is gone
 *
 * Since: 1.1
 */
MixprecEngine *
mixprec_param_get_engine (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  return self->engine;
}

/**
 * mixprec_param_get_buffer_address:
 * @self: a #MixprecParam
 * @buffer: which buffer
 * @dtype: (out) (optional): the dtype of its elements
 * @error: return location for a #GError
 *
 * The address of one of the parameter's buffers in host memory, as an
 * integer: what mixprec_param_get_working_data(),
 * mixprec_param_get_grad_data() and mixprec_param_get_master_data() return
 * to C, for bindings that build views sharing the engine's memory (the
 * Python overrides wrap it for the buffer protocol and DLPack). The
 * buffer holds mixprec_param_get_numel() contiguous elements of @dtype and
 * stays valid as long as the engine does; lay out every parameter before
 * asking (the first call lays out the engine's buffers).
 *
 * %MIXPREC_PARAM_BUFFER_ACCUM exists on one process when gradients are
 * accumulated apart from the gradient buffer (more than one micro-step
 * per step, or an accumulation dtype other than the gradient's and FP32);
 * the engine writes it, callers only read it.
 *
 * Returns: the address, or 0 with @error set when the buffer does not
 *   exist in this engine (no master in bf16 without masters, no
 *   accumulation buffer, buffers sharded across ranks) or lies in device
 *   memory
 *
 * Since: 1.1
 */
/* Where @buffer lies, in host memory (*on_host) or in the memory of the
 * engine's device. */
static gpointer
buffer_data (MixprecParam       *self,
             MixprecParamBuffer  buffer,
             MixprecDType       *dtype,
             gboolean           *on_host,
             GError            **error)
{
  gpointer data = NULL;
  MixprecDType type = MIXPREC_DTYPE_FLOAT32;

  if (!_mixprec_param_ensure_storage (self, error))
    return NULL;
  *on_host = self->storage.device == NULL;
  switch (buffer)
    {
    case MIXPREC_PARAM_BUFFER_WORKING:
      data = self->storage.working;
      type = self->dtypes.working;
      break;
    case MIXPREC_PARAM_BUFFER_GRAD:
      if (!ensure_grad (self, error))
        return NULL;
      data = self->storage.grad;
      type = self->dtypes.grad;
      break;
    case MIXPREC_PARAM_BUFFER_MASTER:
      data = self->storage.master;
      if (data == NULL)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                       self->dtypes.has_master || self->dtypes.working == MIXPREC_DTYPE_FLOAT32
                       ? "parameter '%s': its FP32 values are sharded across ranks"
                       : "parameter '%s': the engine keeps no FP32 master of it "
                         "(a low-precision working copy without master weights)",
                       self->name);
          return NULL;
        }
      if (self->storage.master_on_host)
        *on_host = TRUE;
      break;
    case MIXPREC_PARAM_BUFFER_ACCUM:
      data = _mixprec_engine_get_accum_of (self->engine, self, &type, error);
      if (data == NULL)
        return NULL;
      break;
    case MIXPREC_PARAM_BUFFER_FP8:
    case MIXPREC_PARAM_BUFFER_FP8_SCALES:
      if (!self->storage.fp8)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                       "parameter '%s': the precision policy does not mark it fp8 "
                       "(fp8.enabled and fp8.modules, see mixprec.json(5))", self->name);
          return NULL;
        }
      type = self->storage.fp8_dtype;
      if (buffer == MIXPREC_PARAM_BUFFER_FP8)
        data = self->storage.fp8_data;
      else if (self->storage.fp8_kind != MIXPREC_FP8_RECIPE_MX)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                       "parameter '%s': its FP8 recipe scales per tensor and has no block "
                       "scales (mixprec_param_get_fp8_scale_inv())", self->name);
          return NULL;
        }
      else
        data = self->storage.fp8_scales;
      if (data == NULL)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                       "parameter '%s': under ZeRO-3 its FP8 copy is whole only between "
                       "mixprec_engine_gather() and mixprec_engine_release()", self->name);
          return NULL;
        }
      break;
    default:
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a MixprecParamBuffer", self->name, (gint) buffer);
      return NULL;
    }
  if (data == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': the buffer is not laid out on this rank", self->name);
      return NULL;
    }
  if (dtype != NULL)
    *dtype = type;
  return data;
}

guint64
mixprec_param_get_buffer_address (MixprecParam       *self,
                                  MixprecParamBuffer  buffer,
                                  MixprecDType       *dtype,
                                  GError            **error)
{
  gboolean on_host = TRUE;
  gpointer data;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 0);
  self->storage.address_taken = TRUE;

  if (!_mixprec_param_ensure_storage (self, error))
    return 0;
  if (self->storage.device != NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': its buffers are in the memory of device '%s', "
                   "not in host memory (mixprec_param_get_device_address() gives "
                   "their device addresses)", self->name,
                   _mixprec_device_get_name (self->storage.device));
      return 0;
    }
  data = buffer_data (self, buffer, dtype, &on_host, error);
  return (guint64) GPOINTER_TO_SIZE (data);
}

/**
 * mixprec_param_get_device_address:
 * @self: a #MixprecParam
 * @buffer: which buffer
 * @dtype: (out) (optional): the dtype of its elements
 * @device_type: (out) (optional): the DLPack device type (DLDeviceType of
 *   dlpack.h) of the memory the buffer lies in: 1 (kDLCPU) for host
 *   memory, 2 (kDLCUDA) on the "cuda" device, 10 (kDLROCM) on "rocm", and
 *   12 (kDLExtDev) on a device plugin no framework knows
 * @device_id: (out) (optional): the device's ordinal (0 for host memory)
 * @error: return location for a #GError
 *
 * mixprec_param_get_buffer_address() for engines on any device: the
 * address of one of the parameter's buffers in the memory of the engine's
 * device (mixprec.device of the config, see mixprec.json(5)), or in host
 * memory on the cpu device and for the FP32 master an engine offloads to
 * the host, with where it lies in DLPack's terms. Bindings build views of
 * device memory from it (the Python overrides export it through DLPack,
 * so that torch.from_dlpack() gives a CUDA tensor on the cuda device).
 *
 * The engine queues its work on the device plugin's stream (the step's
 * writes of the new values included); on a device this call waits for
 * that stream before it returns, so that a binding that reads or writes
 * the buffer from another stream calls it again after each
 * mixprec_engine_step() and then sees complete values. On the cpu device
 * the result is the one of mixprec_param_get_buffer_address().
 *
 * Returns: the address, or 0 with @error set when the buffer does not
 *   exist in this engine (see mixprec_param_get_buffer_address())
 *
 * Since: 1.1
 */
guint64
mixprec_param_get_device_address (MixprecParam       *self,
                                  MixprecParamBuffer  buffer,
                                  MixprecDType       *dtype,
                                  gint               *device_type,
                                  gint               *device_id,
                                  GError            **error)
{
  gboolean on_host = TRUE;
  gpointer data;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 0);
  self->storage.address_taken = TRUE;

  data = buffer_data (self, buffer, dtype, &on_host, error);
  if (data == NULL ||
      (self->storage.device != NULL && !_mixprec_device_synchronize (self->storage.device, error)))
    return 0;
  if (device_type != NULL)
    *device_type = on_host ? 1 : _mixprec_device_get_dlpack_type (self->storage.device);
  if (device_id != NULL)
    *device_id = on_host ? 0 : _mixprec_device_get_ordinal (self->storage.device);
  return (guint64) GPOINTER_TO_SIZE (data);
}

/**
 * mixprec_param_reduce_grad_device_address:
 * @self: a #MixprecParam
 * @dtype: the dtype of the gradient
 * @address: where the gradient starts in the memory of the engine's
 *   device (host memory on the cpu device): numel contiguous elements of
 *   @dtype that stay valid for the duration of the call
 * @error: return location for a #GError
 *
 * mixprec_param_reduce_grad_address() for a gradient that already lies on
 * the engine's device, as a framework's device tensor does: the engine
 * reads it there with the device's kernels, without a trip through host
 * memory. The gradient must be complete when the call is made (a binding
 * waits for the framework's stream first: the engine reads it on the
 * device plugin's stream); the call returns once the engine has read it,
 * so that the caller may free or reuse the memory. On the cpu device it is
 * mixprec_param_reduce_grad_address().
 *
 * Returns: %TRUE on success
 *
 * Since: 1.1
 */
gboolean
mixprec_param_reduce_grad_device_address (MixprecParam  *self,
                                          MixprecDType   dtype,
                                          guint64        address,
                                          GError       **error)
{
  guint64 numel;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);

  if (!_mixprec_param_ensure_storage (self, error))
    return FALSE;
  if (self->storage.device == NULL)
    return mixprec_param_reduce_grad_address (self, dtype, address, error);
  numel = mixprec_param_get_numel (self);
  if (!mixprec_dtype_is_valid (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a dtype", self->name, (gint) dtype);
      return FALSE;
    }
  if (address == 0 && numel > 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': gradient at device address 0", self->name);
      return FALSE;
    }
  return mixprec_param_reduce_grad (self, dtype, GSIZE_TO_POINTER ((gsize) address), error) &&
         _mixprec_device_synchronize (self->storage.device, error);
}

/**
 * mixprec_param_get_working:
 * @self: a #MixprecParam
 * @dtype: the dtype to return the values in
 * @error: return location for a #GError
 *
 * Copies the working copy, converted to @dtype (round to nearest even when
 * narrowing). Under ZeRO stage 3 across ranks a sharded parameter's
 * working copy is whole only while gathered (mixprec_engine_gather());
 * otherwise this fails with %MIXPREC_ENGINE_ERROR_WRONG_STATE.
 *
 * Returns: (transfer full): the values, or %NULL with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_param_get_working (MixprecParam *self,
                           MixprecDType  dtype,
                           GError      **error)
{
  gsize bytes;
  g_autofree gpointer out = NULL;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  if (!mixprec_dtype_is_valid (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a dtype", self->name, (gint) dtype);
      return NULL;
    }
  if (!_mixprec_param_ensure_storage (self, error))
    return NULL;
  /* Under ZeRO-3 a sharded working copy is whole only while gathered. */
  if (self->storage.working == NULL && self->numel > 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': its working copy is sharded (ZeRO stage 3) and is whole only "
                   "between mixprec_engine_gather() and mixprec_engine_release(); gather it first",
                   self->name);
      return NULL;
    }
  /* A copy, never a view: the engine's buffers change with every step and
   * go away with the engine (and may be in device memory). */
  bytes = self->numel * mixprec_dtype_get_size (dtype);
  out = g_malloc (MAX (bytes, 1));
  if (!_mixprec_device_download (self->storage.device, self->storage.working,
                                 self->dtypes.working, out, dtype, self->numel, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), bytes);
}

/**
 * mixprec_param_get_master:
 * @self: a #MixprecParam
 * @error: return location for a #GError
 *
 * Copies the parameter's FP32 values to the host: its FP32 master weights
 * when it has them, the working copy itself when it is trained in FP32,
 * and, in a mode without master weights (`bf16_master_weights_and_grads`,
 * `fp16_master_weights_and_grads`), the low-precision weights widened to
 * FP32 (exact). With `"master_weights": "remainder"` or `"kahan"` (Since:
 * 1.1) it is the FP32 value those keep: the working copy joined with its
 * remainder (exact), or plus its compensation. What is returned is a copy
 * taken now, not a view: it does not change with later steps.
 *
 * Under ZeRO across ranks a rank holds only its part of the masters;
 * mixprec_engine_gather_master() assembles the whole parameter.
 *
 * Returns: (transfer full): numel FP32 values, or %NULL with @error set
 *   (%MIXPREC_ENGINE_ERROR_WRONG_STATE when the masters are sharded across
 *   ranks, or an allocation or device copy failure)
 *
 * Since: 1.0
 */
GBytes *
mixprec_param_get_master (MixprecParam *self,
                          GError      **error)
{
  g_autofree gfloat *out = NULL;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  if (!_mixprec_param_ensure_storage (self, error))
    return NULL;
  if (self->storage.master == NULL && (self->dtypes.has_master ||
                                       self->dtypes.working == MIXPREC_DTYPE_FLOAT32))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': its FP32 values are sharded across ranks; "
                   "mixprec_engine_gather_master() assembles them", self->name);
      return NULL;
    }
  if (self->storage.master == NULL)
    {
      MixprecEngine *engine = mixprec_param_get_engine (self);
      gboolean split = FALSE;
      GBytes *joined;

      /* Remainder and Kahan masters: the FP32 values they stand for. */
      if (engine != NULL)
        {
          joined = _mixprec_engine_split_master_of (engine, self, &split, error);
          if (split)
            return joined;
        }
      return mixprec_param_get_working (self, MIXPREC_DTYPE_FLOAT32, error);
    }
  out = g_new (gfloat, MAX (self->numel, 1));
  if (!_mixprec_device_download (self->storage.master_on_host ? NULL : self->storage.device,
                                 self->storage.master, MIXPREC_DTYPE_FLOAT32,
                                 out, MIXPREC_DTYPE_FLOAT32, self->numel, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), self->numel * sizeof (gfloat));
}

static gboolean
store_grad (MixprecParam *self,
            MixprecDType  dtype,
            GBytes       *grad,
            gboolean      add,
            GError      **error)
{
  gsize len = 0;
  gconstpointer data;
  g_autofree gfloat *sum = NULL;

  if (!mixprec_dtype_is_valid (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a dtype", self->name, (gint) dtype);
      return FALSE;
    }
  data = g_bytes_get_data (grad, &len);
  if (len != self->numel * mixprec_dtype_get_size (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': gradient of %" G_GSIZE_FORMAT " bytes, expected %"
                   G_GUINT64_FORMAT " elements of %s (%" G_GUINT64_FORMAT " bytes)",
                   self->name, len, self->numel, mixprec_dtype_get_name (dtype),
                   self->numel * mixprec_dtype_get_size (dtype));
      return FALSE;
    }
  if (!ensure_grad (self, error))
    return FALSE;
  if (!add)
    return _mixprec_device_upload (self->storage.device, data, dtype, self->storage.grad,
                                   self->dtypes.grad, self->numel, error);

  /* Add in FP32, then round once into the gradient dtype. */
  sum = g_try_new (gfloat, MAX (self->numel, 1) * 2);
  if (sum == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': out of memory adding a gradient", self->name);
      return FALSE;
    }
  if (!mixprec_convert_array (dtype, data, MIXPREC_DTYPE_FLOAT32, sum, self->numel,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error) ||
      !_mixprec_device_download (self->storage.device, self->storage.grad, self->dtypes.grad,
                                 sum + self->numel, MIXPREC_DTYPE_FLOAT32, self->numel, error))
    return FALSE;
  for (guint64 i = 0; i < self->numel; i++)
    sum[i] += sum[self->numel + i];
  return _mixprec_device_upload (self->storage.device, sum, MIXPREC_DTYPE_FLOAT32,
                                 self->storage.grad, self->dtypes.grad, self->numel, error);
}

/**
 * mixprec_param_set_grad:
 * @self: a #MixprecParam
 * @dtype: the dtype of @grad
 * @grad: this micro-batch's gradient of the parameter (of the scaled loss),
 *   mixprec_param_get_numel() elements of @dtype
 * @error: return location for a #GError
 *
 * Replaces the contents of the gradient buffer (mixprec_param_get_grad_data())
 * with @grad, converted to mixprec_param_get_grad_dtype() (round to nearest
 * even when narrowing), copying it to the engine's device when the engine
 * lives on one. This is the way to write a gradient from the host, and from
 * languages that cannot write through a pointer; mixprec_param_add_grad()
 * adds instead, and mixprec_param_reduce_grad() hands the gradient over
 * without a gradient buffer of the model's size under ZeRO-2 and ZeRO-3.
 *
 * The gradient counts once mixprec_engine_backward_done() ends the
 * micro-step.
 *
 * Returns: %TRUE on success; %FALSE with @error set when @dtype is not a
 *   dtype, @grad does not hold exactly numel elements of @dtype, or the
 *   gradient buffer cannot be allocated or written
 *
 * Since: 1.0
 */
gboolean
mixprec_param_set_grad (MixprecParam *self,
                        MixprecDType  dtype,
                        GBytes       *grad,
                        GError      **error)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  g_return_val_if_fail (grad != NULL, FALSE);
  return store_grad (self, dtype, grad, FALSE, error);
}

/**
 * mixprec_param_add_grad:
 * @self: a #MixprecParam
 * @dtype: the dtype of @grad
 * @grad: a gradient contribution, numel elements of @dtype
 * @error: return location for a #GError
 *
 * Adds to the gradient buffer (in FP32, rounded once into the gradient
 * dtype), for backward passes that produce a parameter's gradient in
 * several pieces.
 *
 * Returns: %TRUE on success
 *
 * Since: 1.0
 */
gboolean
mixprec_param_add_grad (MixprecParam *self,
                        MixprecDType  dtype,
                        GBytes       *grad,
                        GError      **error)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  g_return_val_if_fail (grad != NULL, FALSE);
  return store_grad (self, dtype, grad, TRUE, error);
}

/**
 * mixprec_param_is_fp8:
 * @self: a #MixprecParam
 *
 * Whether the engine keeps an FP8 working copy of @self: the config's
 * `fp8` section is enabled and @self's module type is one of fp8.modules
 * (see mixprec_precision_policy_is_fp8() and mixprec.json(5)).
 *
 * Returns: %TRUE for an fp8 parameter
 *
 * Since: 1.1
 */
gboolean
mixprec_param_is_fp8 (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);

  return self->storage.fp8;
}

/**
 * mixprec_param_get_fp8_dtype:
 * @self: a #MixprecParam
 *
 * The dtype of @self's FP8 working copy: the recipe's forward dtype
 * (%MIXPREC_DTYPE_FLOAT8_E4M3 for both formats).
 *
 * Returns: the FP8 dtype, or %MIXPREC_DTYPE_FLOAT32 when @self is not fp8
 *
 * Since: 1.1
 */
MixprecDType
mixprec_param_get_fp8_dtype (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), MIXPREC_DTYPE_FLOAT32);

  return self->storage.fp8 ? self->storage.fp8_dtype : MIXPREC_DTYPE_FLOAT32;
}

/**
 * mixprec_param_get_fp8_data: (skip)
 * @self: a #MixprecParam
 *
 * The FP8 working copy the optimizer step writes from the FP32 master:
 * mixprec_param_get_numel() bytes, each an element of
 * mixprec_param_get_fp8_dtype(). A per-tensor recipe's element decodes to
 * `decode(byte) * mixprec_param_get_fp8_scale_inv()`; an MX element to
 * `decode(byte) * 2^(scale - 127)` with the scale byte of its block
 * (mixprec_param_get_fp8_block_scales()). Lays out the engine's buffers
 * on first use. Under ZeRO-3 the copy is whole only while @self is
 * gathered (mixprec_engine_gather()). On an engine whose device is not
 * "cpu" the bytes lie in the device's memory, as the working copy's do
 * (mixprec_param_get_device_address() with %MIXPREC_PARAM_BUFFER_FP8
 * says so); mixprec_param_get_fp8() copies them to the host.
 *
 * Returns: (nullable): the bytes, or %NULL when @self is not fp8, the
 *   engine failed to lay out its buffers, or the copy is not gathered
 *
 * Since: 1.1
 */
const guint8 *
mixprec_param_get_fp8_data (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);

  if (!self->storage.fp8 || !_mixprec_param_ensure_storage (self, NULL))
    return NULL;
  return self->storage.fp8_data;
}

/**
 * mixprec_param_get_fp8_block_scales: (skip)
 * @self: a #MixprecParam
 * @n_scales: (out) (optional): the number of scales, one per block of the
 *   recipe's block size (the last block may be partial)
 *
 * The E8M0 block scales of an MX FP8 working copy (OCP MX: the byte e
 * stands for 2^(e - 127); 0xFF for a block holding NaN). In device
 * memory on an engine whose device is not "cpu", as the FP8 copy
 * (mixprec_param_get_fp8_data()).
 *
 * Returns: (nullable): the scales, or %NULL when @self is not fp8 under
 *   the MX recipe or its copy is not gathered
 *
 * Since: 1.1
 */
const guint8 *
mixprec_param_get_fp8_block_scales (MixprecParam *self,
                                    gsize        *n_scales)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);

  if (n_scales != NULL)
    *n_scales = 0;
  if (!self->storage.fp8 || !_mixprec_param_ensure_storage (self, NULL) ||
      self->storage.fp8_scales == NULL)
    return NULL;
  if (n_scales != NULL)
    *n_scales = self->storage.n_fp8_scales;
  return self->storage.fp8_scales;
}

/* A copy of @n bytes of an FP8 buffer, from the device when it lies
 * there. */
static GBytes *
fp8_bytes (MixprecParam *self, gconstpointer data, gsize n, gboolean on_host, GError **error)
{
  guint8 *copy;

  if (on_host)
    return g_bytes_new (data, n);
  copy = g_malloc (MAX (n, 1));
  if (!_mixprec_device_copy (self->storage.device, copy, data, n,
                             MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error))
    {
      g_free (copy);
      return NULL;
    }
  return g_bytes_new_take (copy, n);
}

/**
 * mixprec_param_get_fp8: (rename-to mixprec_param_get_fp8_data)
 * @self: a #MixprecParam
 * @error: return location for a #GError
 *
 * A copy of @self's FP8 working copy (see mixprec_param_get_fp8_data()),
 * for bindings.
 *
 * Returns: (transfer full): mixprec_param_get_numel() bytes, or %NULL with
 *   @error set when @self is not fp8 or its copy is not whole on this rank
 *
 * Since: 1.1
 */
GBytes *
mixprec_param_get_fp8 (MixprecParam *self,
                       GError      **error)
{
  gboolean on_host = TRUE;
  gpointer data;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);

  data = buffer_data (self, MIXPREC_PARAM_BUFFER_FP8, NULL, &on_host, error);
  if (data == NULL)
    return NULL;
  return fp8_bytes (self, data, self->numel, on_host, error);
}

/**
 * mixprec_param_get_fp8_block_scales_bytes: (rename-to mixprec_param_get_fp8_block_scales)
 * @self: a #MixprecParam
 * @error: return location for a #GError
 *
 * A copy of @self's MX block scales (see
 * mixprec_param_get_fp8_block_scales()), for bindings.
 *
 * Returns: (transfer full): one byte per block, or %NULL with @error set
 *   when @self is not fp8 under the MX recipe or its copy is not whole
 *
 * Since: 1.1
 */
GBytes *
mixprec_param_get_fp8_block_scales_bytes (MixprecParam *self,
                                          GError      **error)
{
  gboolean on_host = TRUE;
  gpointer data;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);

  data = buffer_data (self, MIXPREC_PARAM_BUFFER_FP8_SCALES, NULL, &on_host, error);
  if (data == NULL)
    return NULL;
  return fp8_bytes (self, data, self->storage.n_fp8_scales, on_host, error);
}

/**
 * mixprec_param_get_fp8_scale_inv:
 * @self: a #MixprecParam
 *
 * What a decoded element of a per-tensor FP8 copy is multiplied by to give
 * the value the copy stands for: 1 / the scale it was cast with (as
 * Transformer Engine's `scale_inv`).
 *
 * Returns: the inverse scale; 1 for MX copies (see
 *   mixprec_param_get_fp8_block_scales()) and for parameters that are not fp8
 *
 * Since: 1.1
 */
gfloat
mixprec_param_get_fp8_scale_inv (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 1.0f);

  if (!self->storage.fp8 || self->storage.fp8_scaling == NULL ||
      self->storage.fp8_kind == MIXPREC_FP8_RECIPE_MX)
    return 1.0f;
  return mixprec_fp8_scaling_get_scale_inv (self->storage.fp8_scaling);
}

/**
 * mixprec_param_get_fp8_scaling:
 * @self: a #MixprecParam
 *
 * The scaling state of @self's FP8 working copy (its amax history and
 * scale), which the engine updates at every applied step and saves in
 * checkpoints.
 *
 * Returns: (transfer none) (nullable): the scaling, or %NULL when @self is
 *   not fp8 or the engine has not laid out its buffers yet
 *
 * Since: 1.1
 */
MixprecFp8Scaling *
mixprec_param_get_fp8_scaling (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);

  return self->storage.fp8_scaling;
}

/* ---------------------------------------------------------------- gradients handed over */

/**
 * mixprec_param_reduce_grad: (skip)
 * @self: a #MixprecParam
 * @dtype: the dtype of @grad
 * @grad: this micro-batch's gradient of the parameter (of the scaled
 *   loss), mixprec_param_get_numel() elements of @dtype, in the memory of
 *   the engine's device
 * @error: return location for a #GError
 *
 * Hands over one parameter's gradient as the backward pass produces it.
 * The engine copies it (converted to the gradient dtype, or straight into
 * the dtype it travels in) and, across ranks, starts the reduce-scatter
 * of the parameter's unit as soon as the unit's last parameter arrived,
 * while the caller goes on with the rest of the backward pass. @grad may
 * be freed or reused when the call returns.
 *
 * On one process with one micro-step per step, the engine also sums the
 * squares the step's gradient norm is made of as it copies, while the
 * gradient is in the cache. A trainer that hands every gradient over and
 * never asks for the gradient buffers (mixprec_param_get_grad_data() and
 * the like) saves the step a pass over the gradients and their zeroing.
 *
 * Under ZeRO-2 and ZeRO-3 this is how gradients reach the engine without
 * a gradient buffer the size of the model: only two staging slots exist
 * (see mixprec_engine_list_buffers()). A parameter whose gradient is not
 * handed over before mixprec_engine_backward_done() counts as zero, or,
 * when the caller wrote it into mixprec_param_get_grad_data(), as what it
 * wrote.
 *
 * Collective across ranks: every rank hands over the same parameters in
 * the same order. Handing parameters over in the order of the backward
 * pass (the reverse of registration) or of registration keeps the
 * staging within its two slots; parameters of one unit that arrive far
 * apart hold a slot each until their unit is complete.
 *
 * Returns: %TRUE on success; %FALSE with @error set when the parameter
 *   was already handed over in this micro-step, the engine expects step(),
 *   or a reduction failed
 *
 * Since: 1.1
 */
gboolean
mixprec_param_reduce_grad (MixprecParam  *self,
                           MixprecDType   dtype,
                           gconstpointer  grad,
                           GError       **error)
{
  guint64 numel;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  numel = mixprec_param_get_numel (self);
  g_return_val_if_fail (grad != NULL || numel == 0, FALSE);

  if (!mixprec_dtype_is_valid (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a dtype", mixprec_param_get_name (self), (gint) dtype);
      return FALSE;
    }
  if (!_mixprec_param_ensure_storage (self, error))
    return FALSE;
  return _mixprec_engine_reduce_grad (MIXPREC_ENGINE (_mixprec_param_get_engine (self)), self, dtype, grad,
                                      error);
}

/**
 * mixprec_param_reduce_grad_bytes: (rename-to mixprec_param_reduce_grad)
 * @self: a #MixprecParam
 * @dtype: the dtype of @grad
 * @grad: this micro-batch's gradient, numel elements of @dtype (host memory)
 * @error: return location for a #GError
 *
 * mixprec_param_reduce_grad() for bindings: the gradient as bytes in host
 * memory (copied to the engine's device when it has one).
 *
 * Returns: %TRUE on success
 *
 * Since: 1.1
 */
gboolean
mixprec_param_reduce_grad_bytes (MixprecParam  *self,
                                 MixprecDType   dtype,
                                 GBytes        *grad,
                                 GError       **error)
{
  gsize len = 0;
  gconstpointer data;
  g_autofree gpointer staged = NULL;
  _MixprecParamStorage *s;
  guint64 numel;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  g_return_val_if_fail (grad != NULL, FALSE);

  numel = mixprec_param_get_numel (self);
  data = g_bytes_get_data (grad, &len);
  if (!mixprec_dtype_is_valid (dtype) || len != numel * mixprec_dtype_get_size (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': gradient of %" G_GSIZE_FORMAT " bytes, expected %"
                   G_GUINT64_FORMAT " elements of %s", mixprec_param_get_name (self), len, numel,
                   mixprec_dtype_is_valid (dtype) ? mixprec_dtype_get_name (dtype) : "a valid dtype");
      return FALSE;
    }
  if (!_mixprec_param_ensure_storage (self, error))
    return FALSE;
  s = _mixprec_param_get_storage (self);
  if (!_mixprec_device_memory_is_host (s->device) && numel > 0)
    {
      /* Device memory for the device's kernels. */
      staged = _mixprec_device_alloc (s->device, len, "gradient upload", error);
      if (staged == NULL ||
          !_mixprec_device_upload (s->device, data, dtype, staged, dtype, numel, error))
        {
          if (staged != NULL)
            _mixprec_device_free (s->device, g_steal_pointer (&staged));
          return FALSE;
        }
      {
        gboolean ok = mixprec_param_reduce_grad (self, dtype, staged, error) &&
                      _mixprec_device_synchronize (s->device, error);

        _mixprec_device_free (s->device, g_steal_pointer (&staged));
        return ok;
      }
    }
  return mixprec_param_reduce_grad (self, dtype, data, error);
}

/**
 * mixprec_param_reduce_grad_address:
 * @self: a #MixprecParam
 * @dtype: the dtype of the gradient
 * @address: where the gradient starts in host memory: numel contiguous
 *   elements of @dtype that stay valid for the duration of the call
 * @error: return location for a #GError
 *
 * mixprec_param_reduce_grad_bytes() without the copy into a #GBytes: the
 * engine reads the caller's gradient where it lies. For bindings that
 * hold the address of a framework's tensor (the Python overrides pass a
 * NumPy array's or a DLPack tensor's data pointer); C callers use
 * mixprec_param_reduce_grad().
 *
 * Returns: %TRUE on success
 *
 * Since: 1.1
 */
gboolean
mixprec_param_reduce_grad_address (MixprecParam  *self,
                                   MixprecDType   dtype,
                                   guint64        address,
                                   GError       **error)
{
  g_autoptr(GBytes) grad = NULL;
  guint64 numel;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);

  numel = mixprec_param_get_numel (self);
  if (!mixprec_dtype_is_valid (dtype))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': %d is not a dtype", mixprec_param_get_name (self), (gint) dtype);
      return FALSE;
    }
  if (address == 0 && numel > 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': gradient at address 0", mixprec_param_get_name (self));
      return FALSE;
    }
  /* A static GBytes borrows the caller's memory for the call. */
  grad = g_bytes_new_static (GSIZE_TO_POINTER ((gsize) address),
                             numel * mixprec_dtype_get_size (dtype));
  return mixprec_param_reduce_grad_bytes (self, dtype, grad, error);
}
