/* mixprec-fp4.h — FP4 E2M1 and the 4-bit block recipes (NVFP4, MXFP4) */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"

G_BEGIN_DECLS

/**
 * MixprecBlockRecipe:
 * @MIXPREC_BLOCK_RECIPE_NVFP4: NVFP4: blocks of 16 consecutive elements of
 *   a row, each with an E4M3 scale, under one float32 scale for the whole
 *   tensor (torchao's `NVFP4Tensor` with a per-tensor scale; Transformer
 *   Engine's `NVFP4BlockScaling` for activations and gradients)
 * @MIXPREC_BLOCK_RECIPE_NVFP4_2D: NVFP4 with 16x16 tiles sharing one E4M3
 *   scale, so that a matrix and its transpose quantise alike (Transformer
 *   Engine's 2D quantisation of weights)
 * @MIXPREC_BLOCK_RECIPE_MXFP4: MXFP4 (OCP Microscaling v1.0): blocks of 32
 *   consecutive elements of a row, each with an E8M0 power-of-two scale
 *   computed as the #MixprecMxScaleMode says (torchao's `MXTensor` with
 *   `torch.float4_e2m1fn_x2` elements)
 *
 * The 4-bit block recipes of mixprec_quantize_blocks(). Elements are FP4
 * E2M1 (magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6), two per byte: element 2i
 * in the low nibble of byte i, element 2i + 1 in the high nibble, the
 * sign in bit 3 of each nibble (torchao's and Transformer Engine's
 * `float4_e2m1fn_x2` packing).
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_BLOCK_RECIPE_NVFP4 = 0,
  MIXPREC_BLOCK_RECIPE_NVFP4_2D = 1,
  MIXPREC_BLOCK_RECIPE_MXFP4 = 2,
} MixprecBlockRecipe;

/**
 * MixprecMxScaleMode:
 * @MIXPREC_MX_SCALE_FLOOR: 2^(floor(log2(amax)) - 2): the MX
 *   specification's rule and torchao's default; values of the block that
 *   land beyond 6 saturate
 * @MIXPREC_MX_SCALE_RCEIL: 2^ceil(log2(amax / 6)), the rule of NVIDIA's
 *   `cvt.rp.satfinite.ue8m0` (cuBLAS, Transformer Engine's MXFP8): no
 *   element exceeds 6 but by the rounding of amax / 6, which a clamp
 *   absorbs
 * @MIXPREC_MX_SCALE_CEIL: the FLOOR exponent plus one when amax is not a
 *   power of two
 * @MIXPREC_MX_SCALE_EVEN: the FLOOR rule applied to amax first rounded to
 *   E2M1's precision (one mantissa bit, ties away from zero)
 *
 * How an MXFP4 block's E8M0 scale is derived from the largest magnitude
 * amax of the block, as torchao's `ScaleCalculationMode` defines the four
 * modes. NVFP4 ignores it.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_MX_SCALE_FLOOR = 0,
  MIXPREC_MX_SCALE_RCEIL = 1,
  MIXPREC_MX_SCALE_CEIL = 2,
  MIXPREC_MX_SCALE_EVEN = 3,
} MixprecMxScaleMode;

/**
 * MIXPREC_BLOCK_ERROR:
 *
 * Error domain of the 4-bit block quantisation. Errors in this domain are
 * from the #MixprecBlockError enumeration.
 *
 * Since: 1.1
 */
#define MIXPREC_BLOCK_ERROR (mixprec_block_error_quark ())

/**
 * MixprecBlockError:
 * @MIXPREC_BLOCK_ERROR_INVALID_RECIPE: not a #MixprecBlockRecipe value
 * @MIXPREC_BLOCK_ERROR_INVALID_SCALE_MODE: not a #MixprecMxScaleMode value
 * @MIXPREC_BLOCK_ERROR_INVALID_ROUNDING: not a #MixprecRounding value
 * @MIXPREC_BLOCK_ERROR_INVALID_SHAPE: the row length is not a whole
 *   number of blocks, or the buffer is not a whole number of rows
 * @MIXPREC_BLOCK_ERROR_INVALID_LENGTH: a buffer's length does not match
 *
 * Errors of the 4-bit block quantisation, in the %MIXPREC_BLOCK_ERROR
 * domain.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_BLOCK_ERROR_INVALID_RECIPE,
  MIXPREC_BLOCK_ERROR_INVALID_SCALE_MODE,
  MIXPREC_BLOCK_ERROR_INVALID_ROUNDING,
  MIXPREC_BLOCK_ERROR_INVALID_SHAPE,
  MIXPREC_BLOCK_ERROR_INVALID_LENGTH,
} MixprecBlockError;

MIXPREC_AVAILABLE_IN_1_1
GQuark    mixprec_block_error_quark         (void);

MIXPREC_AVAILABLE_IN_1_1
guint     mixprec_block_recipe_get_block_size (MixprecBlockRecipe  recipe);

MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_quantize_blocks           (MixprecBlockRecipe  recipe,
                                             MixprecMxScaleMode  scale_mode,
                                             const gfloat       *src,
                                             gsize               rows,
                                             gsize               cols,
                                             MixprecRounding     rounding,
                                             guint64             seed,
                                             guint8             *dst,
                                             guint8             *scales,
                                             gfloat             *tensor_scale,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_quantize_blocks_bytes     (MixprecBlockRecipe  recipe,
                                             MixprecMxScaleMode  scale_mode,
                                             GBytes             *src_f32,
                                             gsize               cols,
                                             MixprecRounding     rounding,
                                             guint64             seed,
                                             GBytes            **scales,
                                             gfloat             *tensor_scale,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_dequantize_blocks         (MixprecBlockRecipe  recipe,
                                             const guint8       *src,
                                             const guint8       *scales,
                                             gfloat              tensor_scale,
                                             gsize               rows,
                                             gsize               cols,
                                             gfloat             *dst,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_dequantize_blocks_bytes   (MixprecBlockRecipe  recipe,
                                             GBytes             *src,
                                             GBytes             *scales,
                                             gfloat              tensor_scale,
                                             gsize               cols,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_fp4_pack                  (const gfloat       *src,
                                             gsize               n,
                                             MixprecRounding     rounding,
                                             guint64             seed,
                                             guint64             first_index,
                                             guint8             *dst,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_fp4_pack_bytes            (GBytes             *src_f32,
                                             MixprecRounding     rounding,
                                             guint64             seed,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gfloat    mixprec_fp4_e2m1_to_float         (guint8              code);

/**
 * MIXPREC_RHT_GROUP_SIZE:
 *
 * The number of consecutive values the random Hadamard transform mixes
 * (mixprec_rht_apply()): 16, NVFP4's block size.
 *
 * Since: 1.1
 */
#define MIXPREC_RHT_GROUP_SIZE 16

MIXPREC_AVAILABLE_IN_1_1
guint16   mixprec_rht_sign_mask             (guint64             seed);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_rht_apply                 (const gfloat       *src,
                                             gsize               n,
                                             guint16             sign_mask,
                                             gboolean            inverse,
                                             gfloat             *dst,
                                             GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_rht_apply_bytes           (GBytes             *src_f32,
                                             guint16             sign_mask,
                                             gboolean            inverse,
                                             GError            **error);

G_END_DECLS
