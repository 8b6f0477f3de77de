/* mixprec-param-fp4.c — what a trainer reads of a parameter's 4-bit
 * working copy (written by mixprec-engine-fp4.c): the packed E2M1 bytes,
 * the block scales, NVFP4's tensor scale, and the values decoded. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-param-private.h"

/**
 * mixprec_param_is_fp4:
 * @self: a #MixprecParam
 *
 * Whether the engine keeps a 4-bit (NVFP4 or MXFP4) working copy of
 * @self: the precision policy marks it fp4
 * (mixprec_precision_policy_is_fp4()) and it has two dimensions or more.
 *
 * Returns: %TRUE when @self has a 4-bit working copy
 *
 * Since: 1.1
 */
gboolean
mixprec_param_is_fp4 (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  return _mixprec_param_get_storage (self)->fp4;
}

/**
 * mixprec_param_get_fp4_recipe:
 * @self: a #MixprecParam
 *
 * The block recipe of @self's 4-bit working copy (the config's
 * mixprec_config_get_fp4_recipe()); meaningful when
 * mixprec_param_is_fp4() is %TRUE.
 *
 * Returns: the recipe
 *
 * Since: 1.1
 */
MixprecBlockRecipe
mixprec_param_get_fp4_recipe (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), MIXPREC_BLOCK_RECIPE_NVFP4);
  return _mixprec_param_get_storage (self)->fp4_recipe;
}

/**
 * mixprec_param_get_fp4_cols:
 * @self: a #MixprecParam
 *
 * The row length of @self's 4-bit working copy: its last dimension,
 * along which the blocks run (the rows are the product of the others).
 *
 * Returns: the number of columns, 0 when @self is not fp4
 *
 * Since: 1.1
 */
guint64
mixprec_param_get_fp4_cols (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 0);
  return _mixprec_param_get_storage (self)->fp4 ? _mixprec_param_get_storage (self)->fp4_cols : 0;
}

/* The whole copy on this rank, or NULL with @error set. */
static _MixprecParamStorage *
whole_storage (MixprecParam *self, GError **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (self);

  if (!s->fp4)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': the precision policy does not mark it fp4 "
                   "(fp4.enabled and fp4.modules, see mixprec.json(5))",
                   mixprec_param_get_name (self));
      return NULL;
    }
  if (!_mixprec_param_ensure_storage (self, error))
    return NULL;
  if (s->fp8_data == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': under ZeRO-3 its 4-bit copy is whole only between "
                   "mixprec_engine_gather() and mixprec_engine_release()",
                   mixprec_param_get_name (self));
      return NULL;
    }
  return s;
}

/**
 * mixprec_param_get_fp4_data: (skip)
 * @self: a #MixprecParam
 * @n_bytes: (out) (optional): the number of bytes, mixprec_param_get_numel() / 2
 *
 * The 4-bit working copy the optimizer step writes from the FP32 master:
 * packed E2M1, two elements a byte (element 2i in the low nibble of byte
 * i), row-major over mixprec_param_get_fp4_cols() columns, exactly as
 * mixprec_quantize_blocks() of the FP32 values with
 * mixprec_param_get_fp4_recipe() gives it (at any world size). Lays out
 * the engine's buffers on first use; under ZeRO-3 whole only while @self
 * is gathered.
 *
 * Returns: (nullable): the bytes, or %NULL when @self is not fp4 or its
 *   copy is not whole on this rank
 *
 * Since: 1.1
 */
const guint8 *
mixprec_param_get_fp4_data (MixprecParam *self,
                            gsize        *n_bytes)
{
  _MixprecParamStorage *s;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  if (n_bytes != NULL)
    *n_bytes = 0;
  s = whole_storage (self, NULL);
  if (s == NULL)
    return NULL;
  if (n_bytes != NULL)
    *n_bytes = mixprec_param_get_numel (self) / 2;
  return s->fp8_data;
}

/**
 * mixprec_param_get_fp4_block_scales: (skip)
 * @self: a #MixprecParam
 * @n_scales: (out) (optional): the number of scales, one per block of 16
 *   (NVFP4) or 32 (MXFP4) elements of a row
 *
 * The block scales of @self's 4-bit working copy, row-major: E4M3 bytes
 * for NVFP4 (under 16x16 tiles the tile's scale is repeated for each of
 * its rows), E8M0 bytes for MXFP4; see mixprec_quantize_blocks().
 *
 * Returns: (nullable): the scales, or %NULL when @self is not fp4 or its
 *   copy is not whole on this rank
 *
 * Since: 1.1
 */
const guint8 *
mixprec_param_get_fp4_block_scales (MixprecParam *self,
                                    gsize        *n_scales)
{
  _MixprecParamStorage *s;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  if (n_scales != NULL)
    *n_scales = 0;
  s = whole_storage (self, NULL);
  if (s == NULL)
    return NULL;
  if (n_scales != NULL)
    *n_scales = s->n_fp8_scales;
  return s->fp8_scales;
}

/**
 * mixprec_param_get_fp4_tensor_scale:
 * @self: a #MixprecParam
 *
 * NVFP4's per-tensor float32 scale of the current 4-bit copy: the amax
 * of the FP32 values over 448 * 6, agreed by every rank (1 for MXFP4, and
 * for an all-zero tensor).
 *
 * Returns: the tensor scale, 1 when @self is not fp4
 *
 * Since: 1.1
 */
gfloat
mixprec_param_get_fp4_tensor_scale (MixprecParam *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 1.0f);
  return _mixprec_param_get_storage (self)->fp4 ? _mixprec_param_get_storage (self)->fp4_tensor_scale
                                                 : 1.0f;
}

/**
 * mixprec_param_dequantize_fp4: (skip)
 * @self: a #MixprecParam
 * @dst: (array length=n): room for @n float32 values
 * @n: mixprec_param_get_numel()
 * @error: return location for a #GError
 *
 * Decodes @self's 4-bit working copy into the float32 values a GEMM
 * multiplies with (mixprec_dequantize_blocks()).
 *
 * Returns: %TRUE; %FALSE with @error set when @self is not fp4, its copy
 *   is not whole on this rank (ZeRO-3 outside gather()), or @n is not its
 *   number of elements
 *
 * Since: 1.1
 */
gboolean
mixprec_param_dequantize_fp4 (MixprecParam *self,
                              gfloat       *dst,
                              gsize         n,
                              GError      **error)
{
  _MixprecParamStorage *s;
  guint64 numel;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  s = whole_storage (self, error);
  if (s == NULL)
    return FALSE;
  numel = mixprec_param_get_numel (self);
  if (n != numel)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': has %" G_GUINT64_FORMAT " elements, not %" G_GSIZE_FORMAT,
                   mixprec_param_get_name (self), numel, n);
      return FALSE;
    }
  return mixprec_dequantize_blocks (s->fp4_recipe, s->fp8_data, s->fp8_scales, s->fp4_tensor_scale,
                                    numel / s->fp4_cols, s->fp4_cols, dst, error);
}

/**
 * mixprec_param_dequantize_fp4_bytes: (rename-to mixprec_param_dequantize_fp4)
 * @self: a #MixprecParam
 * @error: return location for a #GError
 *
 * mixprec_param_dequantize_fp4() for bindings.
 *
 * Returns: (transfer full): the float32 values in host byte order, or
 *   %NULL with @error set
 *
 * Since: 1.1
 */
GBytes *
mixprec_param_dequantize_fp4_bytes (MixprecParam *self,
                                    GError      **error)
{
  gsize n;
  gfloat *values;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), NULL);
  n = mixprec_param_get_numel (self);
  values = g_new (gfloat, MAX (n, 1));
  if (!mixprec_param_dequantize_fp4 (self, values, n, error))
    {
      g_free (values);
      return NULL;
    }
  return g_bytes_new_take (values, n * sizeof (gfloat));
}

/**
 * mixprec_param_get_fp4_address:
 * @self: a #MixprecParam
 * @scales_address: (out) (optional): where its block scales start
 *   (mixprec_param_get_fp4_block_scales())
 * @n_scales: (out) (optional): the number of block scales: the rows
 *   (mixprec_param_get_numel() over mixprec_param_get_fp4_cols()) times
 *   the columns over the recipe's block size
 *   (mixprec_block_recipe_get_block_size())
 * @device_type: (out) (optional): the DLPack device type of the memory
 *   both lie in: 1 (kDLCPU), as a device engine refuses fp4 parameters
 * @device_id: (out) (optional): the device's ordinal (0 for host memory)
 * @error: return location for a #GError
 *
 * The addresses of @self's 4-bit working copy and of its block scales,
 * for bindings that build zero-copy views of them (the Python overrides
 * export both through DLPack as `uint8` tensors: `param.fp4`). The copy
 * is mixprec_param_get_fp4_data(): packed E2M1, mixprec_param_get_numel()
 * / 2 bytes, a row of mixprec_param_get_fp4_cols() elements taking cols /
 * 2 bytes, element 2i in the low nibble of byte i. The scales are one
 * byte per block, row-major: E4M3 codes for NVFP4 (a 16x16 tile's scale
 * repeated for each of its rows), E8M0 codes for MXFP4. NVFP4's values
 * are the E2M1 value times (mixprec_param_get_fp4_tensor_scale() times
 * the decoded E4M3 scale), MXFP4's the E2M1 value times 2^(scale - 127)
 * (mixprec_dequantize_blocks() gives the exact float32 arithmetic).
 *
 * The memory is the engine's: each mixprec_engine_step() rewrites it in
 * place, and it lives as long as the engine does.
 *
 * Returns: the address of the packed copy, or 0 with @error set when
 *   @self is not fp4 or its copy is not whole on this rank (ZeRO-3
 *   outside mixprec_engine_gather())
 *
 * Since: 1.1
 */
guint64
mixprec_param_get_fp4_address (MixprecParam *self,
                               guint64      *scales_address,
                               gsize        *n_scales,
                               gint         *device_type,
                               gint         *device_id,
                               GError      **error)
{
  _MixprecParamStorage *s;

  g_return_val_if_fail (MIXPREC_IS_PARAM (self), 0);
  g_return_val_if_fail (error == NULL || *error == NULL, 0);

  s = whole_storage (self, error);
  if (s == NULL)
    return 0;
  if (scales_address != NULL)
    *scales_address = (guint64) GPOINTER_TO_SIZE (s->fp8_scales);
  if (n_scales != NULL)
    *n_scales = s->n_fp8_scales;
  if (device_type != NULL)
    *device_type = 1;
  if (device_id != NULL)
    *device_id = 0;
  return (guint64) GPOINTER_TO_SIZE (s->fp8_data);
}
