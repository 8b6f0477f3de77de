/* example-weights.c — the example trainers' view of the working copies.
 * charlm and gpt2 both compute in fp32 buffers that hold exactly the
 * low-precision values, the way a GPU's matrix unit widens its inputs. */
#include <string.h>

#include "example-weights.h"

guint
example_mx_block_size (MixprecConfig *config)
{
  MixprecFp8Recipe *recipe = mixprec_config_get_fp8_recipe (config);

  if (recipe != NULL && mixprec_fp8_recipe_get_kind (recipe) == MIXPREC_FP8_RECIPE_MX)
    return mixprec_fp8_recipe_get_block_size (recipe);
  return 0;
}

gchar *
example_describe_fp8 (MixprecConfig *config)
{
  MixprecFp8Recipe *recipe = mixprec_config_get_fp8_recipe (config);
  g_autofree gchar *modules = NULL;
  g_autofree gchar *how = NULL;
  const gchar *format;

  if (recipe == NULL)
    return NULL;
  modules = g_strjoinv (", ", (gchar **) mixprec_config_get_fp8_modules (config));
  format = mixprec_fp8_recipe_get_format (recipe) == MIXPREC_FP8_FORMAT_HYBRID
             ? "e4m3 forward, e5m2 backward" : "e4m3";
  switch (mixprec_fp8_recipe_get_kind (recipe))
    {
    case MIXPREC_FP8_RECIPE_DELAYED:
      how = g_strdup_printf ("delayed scaling (%s amax of the last %u steps, margin %d)",
                             mixprec_fp8_recipe_get_amax_compute_algo (recipe) ==
                               MIXPREC_FP8_AMAX_MAX ? "largest" : "most recent",
                             mixprec_fp8_recipe_get_amax_history_len (recipe),
                             mixprec_fp8_recipe_get_margin (recipe));
      break;
    case MIXPREC_FP8_RECIPE_CURRENT:
      how = g_strdup_printf ("current scaling (margin %d)", mixprec_fp8_recipe_get_margin (recipe));
      break;
    case MIXPREC_FP8_RECIPE_MX:
    default:
      how = g_strdup_printf ("MX block scaling (%u elements per E8M0 scale)",
                             mixprec_fp8_recipe_get_block_size (recipe));
      break;
    }
  return g_strdup_printf ("fp8 working copies for %s: %s, %s", modules, format, how);
}

/* The fp32 weights an FP8 GEMM multiplies, from the engine's FP8 working
 * copy of @p: each byte decoded (E4M3 or E5M2, exactly, into fp32), then
 * multiplied in fp32 by the tensor's scale_inv (delayed and current
 * scaling) or by its block's E8M0 scale, 2^(e - 127) (MX). A GPU does the
 * same inside the matrix unit; here it is done once per optimizer step. */
static gboolean
dequantize_fp8 (MixprecParam *p,
                guint         mx_block_size,
                gfloat       *dst,
                gsize         n,
                GError      **error)
{
  MixprecDType dtype = mixprec_param_get_fp8_dtype (p);
  g_autoptr(GBytes) bytes = mixprec_param_get_fp8 (p, error);
  gsize n_scales = 0;
  const guint8 *scales = mixprec_param_get_fp8_block_scales (p, &n_scales);
  const guint8 *data;
  gboolean done;

  if (bytes == NULL)
    return FALSE;
  data = g_bytes_get_data (bytes, NULL);
  if (scales != NULL)
    {
      g_assert (mx_block_size > 0 && n_scales == (n + mx_block_size - 1) / mx_block_size);
      done = mixprec_mx_dequantize (dtype, data, scales, n, mx_block_size, dst, error);
    }
  else
    done = mixprec_fp8_dequantize (dtype, data, n, mixprec_param_get_fp8_scale_inv (p), dst,
                                   error);
  return done;
}

gchar *
example_describe_fp4 (MixprecConfig *config)
{
  MixprecBlockRecipe recipe;
  MixprecMxScaleMode mode;
  guint16 mask = 0;
  gboolean rht;
  g_autofree gchar *modules = NULL, *excluded = NULL, *how = NULL, *wgrad = NULL;
  static const gchar *const modes[] = { "floor", "rceil", "ceil", "even" };

  if (!mixprec_config_get_fp4_recipe (config, &recipe, &mode))
    return NULL;
  rht = mixprec_config_get_fp4_rht (config, &mask);
  modules = g_strjoinv (", ", (gchar **) mixprec_config_get_fp4_modules (config));
  excluded = g_strjoinv (", ", (gchar **) mixprec_config_get_fp4_exclude_params (config));
  switch (recipe)
    {
    case MIXPREC_BLOCK_RECIPE_NVFP4_2D:
      how = g_strdup ("NVFP4, an E4M3 scale per 16x16 tile and a per-tensor scale");
      break;
    case MIXPREC_BLOCK_RECIPE_NVFP4:
      how = g_strdup ("NVFP4, an E4M3 scale per 16 elements and a per-tensor scale");
      break;
    case MIXPREC_BLOCK_RECIPE_MXFP4:
    default:
      how = g_strdup_printf ("MXFP4, an E8M0 scale per 32 elements (%s)", modes[mode & 3]);
      break;
    }
  if (rht && recipe != MIXPREC_BLOCK_RECIPE_MXFP4)
    wgrad = g_strdup_printf ("from NVFP4 operands after the random Hadamard transform "
                             "(signs 0x%04x)", mask);
  else
    wgrad = g_strdup ("in the working dtype");
  return g_strdup_printf ("fp4 working copies for %s%s%s%s: %s; weight gradients %s", modules,
                          *excluded != '\0' ? " (except " : "", excluded,
                          *excluded != '\0' ? ")" : "", how, wgrad);
}

gboolean
example_read_working (MixprecParam  *p,
                      guint          mx_block_size,
                      gfloat        *dst,
                      gsize          n,
                      GError       **error)
{
  g_autoptr(GBytes) w = NULL;

  g_return_val_if_fail (mixprec_param_get_numel (p) == n, FALSE);

  if (mixprec_param_is_fp8 (p))
    {
      if (!dequantize_fp8 (p, mx_block_size, dst, n, error))
        goto failed;
      return TRUE;
    }
  /* The 4-bit copy decoded: E2M1 codes times their block's scale (times
   * NVFP4's tensor scale), as a GPU's FP4 GEMM reads them. */
  if (mixprec_param_is_fp4 (p))
    {
      if (!mixprec_param_dequantize_fp4 (p, dst, n, error))
        goto failed;
      return TRUE;
    }
  w = mixprec_param_get_working (p, MIXPREC_DTYPE_FLOAT32, error);
  if (w == NULL)
    goto failed;
  memcpy (dst, g_bytes_get_data (w, NULL), n * sizeof (gfloat));
  return TRUE;

failed:
  g_prefix_error (error, "reading the working copy of %s: ", mixprec_param_get_name (p));
  return FALSE;
}
