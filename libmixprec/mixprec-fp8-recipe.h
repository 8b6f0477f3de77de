/* mixprec-fp8-recipe.h — FP8 scaling recipes and per-tensor scaling state */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-fp4.h"

G_BEGIN_DECLS

/**
 * MixprecFp8RecipeKind:
 * @MIXPREC_FP8_RECIPE_DELAYED: delayed scaling: each tensor's scale comes
 *   from a history of the amaxes of its earlier casts (Transformer Engine's
 *   `DelayedScaling`)
 * @MIXPREC_FP8_RECIPE_CURRENT: current scaling: the scale comes from the
 *   amax of the tensor being cast (Transformer Engine's
 *   `Float8CurrentScaling`, torchao's tensorwise dynamic scaling)
 * @MIXPREC_FP8_RECIPE_MX: MXFP8 block scaling: blocks of 32 consecutive
 *   elements share one E8M0 power-of-two scale (OCP Microscaling Formats
 *   v1.0; Transformer Engine's `MXFP8BlockScaling`, torchao's MX); there is
 *   no per-tensor state
 *
 * How the scale of an FP8 tensor is chosen. See #MixprecFp8Scaling for the
 * exact arithmetic of each. Values are appended only.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_RECIPE_DELAYED = 0,
  MIXPREC_FP8_RECIPE_CURRENT = 1,
  MIXPREC_FP8_RECIPE_MX = 2,
} MixprecFp8RecipeKind;

/**
 * MixprecFp8Format:
 * @MIXPREC_FP8_FORMAT_HYBRID: E4M3 for the forward tensors (weights,
 *   activations), E5M2 for the backward ones (gradients), as Transformer
 *   Engine's `Format.HYBRID`
 * @MIXPREC_FP8_FORMAT_E4M3: E4M3 everywhere (`Format.E4M3`)
 *
 * Which FP8 encodings a recipe uses for each #MixprecFp8Role. Values are
 * appended only.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_FORMAT_HYBRID = 0,
  MIXPREC_FP8_FORMAT_E4M3 = 1,
} MixprecFp8Format;

/**
 * MixprecFp8AmaxAlgo:
 * @MIXPREC_FP8_AMAX_MAX: the largest amax of the whole history window
 *   (Transformer Engine's `amax_compute_algo="max"`); a NaN anywhere in the
 *   window makes the amax NaN, as torch.max() does
 * @MIXPREC_FP8_AMAX_MOST_RECENT: the amax recorded since the last update
 *   (slot 0 of the history, `amax_compute_algo="most_recent"`)
 *
 * Which amax of the history delayed scaling computes the scale from.
 * Values are appended only.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_AMAX_MAX = 0,
  MIXPREC_FP8_AMAX_MOST_RECENT = 1,
} MixprecFp8AmaxAlgo;

/**
 * MixprecFp8Role:
 * @MIXPREC_FP8_ROLE_FORWARD: a tensor of the forward pass: weights and
 *   activations
 * @MIXPREC_FP8_ROLE_BACKWARD: a tensor of the backward pass: gradients
 *
 * What an FP8 tensor is used for; with the recipe's #MixprecFp8Format it
 * decides the tensor's FP8 dtype. Values are appended only.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_ROLE_FORWARD = 0,
  MIXPREC_FP8_ROLE_BACKWARD = 1,
} MixprecFp8Role;

/**
 * MIXPREC_FP8_RECIPE_ERROR:
 *
 * Error domain of FP8 recipes and scalings. Errors in this domain are from
 * the #MixprecFp8RecipeError enumeration.
 *
 * Since: 1.1
 */
#define MIXPREC_FP8_RECIPE_ERROR (mixprec_fp8_recipe_error_quark ())

/**
 * MixprecFp8RecipeError:
 * @MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE: a recipe parameter out of its
 *   range (a history length of 0, a margin too large, an MX block size
 *   other than 32, a value that is not of its enumeration)
 * @MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE: a saved scaling state that is
 *   malformed or does not belong to this scaling (another recipe, another
 *   dtype, another history length, a missing key, a value of the wrong
 *   type or out of range)
 *
 * Errors from FP8 recipes and scalings. Values are appended only.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE,
  MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE,
} MixprecFp8RecipeError;

/**
 * MIXPREC_FP8_MAX_AMAX_HISTORY_LEN:
 *
 * The longest amax history a delayed-scaling recipe accepts (Transformer
 * Engine's default is 1024).
 *
 * Since: 1.1
 */
#define MIXPREC_FP8_MAX_AMAX_HISTORY_LEN 65536

/**
 * MIXPREC_FP8_MAX_MARGIN:
 *
 * The largest magnitude of a recipe's margin: margins lie in
 * [-%MIXPREC_FP8_MAX_MARGIN, %MIXPREC_FP8_MAX_MARGIN], so that 2^margin is
 * an exact, normal single-precision number.
 *
 * Since: 1.1
 */
#define MIXPREC_FP8_MAX_MARGIN 64

/**
 * MIXPREC_FP8_MX_BLOCK_SIZE:
 *
 * The number of consecutive elements that share one E8M0 scale in MXFP8
 * (the OCP MX specification's k = 32).
 *
 * Since: 1.1
 */
#define MIXPREC_FP8_MX_BLOCK_SIZE 32

MIXPREC_AVAILABLE_IN_1_1
GQuark mixprec_fp8_recipe_error_quark (void);

#define MIXPREC_TYPE_FP8_SCALING (mixprec_fp8_scaling_get_type ())
MIXPREC_AVAILABLE_IN_1_1
G_DECLARE_FINAL_TYPE (MixprecFp8Scaling, mixprec_fp8_scaling, MIXPREC, FP8_SCALING, GObject)

#define MIXPREC_TYPE_FP8_RECIPE (mixprec_fp8_recipe_get_type ())
MIXPREC_AVAILABLE_IN_1_1
G_DECLARE_FINAL_TYPE (MixprecFp8Recipe, mixprec_fp8_recipe, MIXPREC, FP8_RECIPE, GObject)

MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Recipe     *mixprec_fp8_recipe_new_delayed           (MixprecFp8Format    format,
                                                                guint               amax_history_len,
                                                                MixprecFp8AmaxAlgo  amax_compute_algo,
                                                                gint                margin,
                                                                GError            **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Recipe     *mixprec_fp8_recipe_new_current           (MixprecFp8Format    format,
                                                                gint                margin,
                                                                GError            **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Recipe     *mixprec_fp8_recipe_new_mx                (MixprecFp8Format    format,
                                                                guint               block_size,
                                                                GError            **error);

MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Recipe     *mixprec_fp8_recipe_new_mx_with_scale_mode (MixprecFp8Format    format,
                                                                 guint               block_size,
                                                                 MixprecMxScaleMode  scale_mode,
                                                                 GError            **error);

MIXPREC_AVAILABLE_IN_1_1
MixprecFp8RecipeKind  mixprec_fp8_recipe_get_kind              (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecMxScaleMode    mixprec_fp8_recipe_get_mx_scale_mode     (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Format      mixprec_fp8_recipe_get_format            (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
guint                 mixprec_fp8_recipe_get_amax_history_len  (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8AmaxAlgo    mixprec_fp8_recipe_get_amax_compute_algo (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
gint                  mixprec_fp8_recipe_get_margin            (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
guint                 mixprec_fp8_recipe_get_block_size        (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
gboolean              mixprec_fp8_recipe_get_saturate          (MixprecFp8Recipe   *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecDType          mixprec_fp8_recipe_get_dtype             (MixprecFp8Recipe   *self,
                                                                MixprecFp8Role      role);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Scaling    *mixprec_fp8_recipe_new_scaling           (MixprecFp8Recipe   *self,
                                                                MixprecFp8Role      role);

MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Recipe     *mixprec_fp8_scaling_get_recipe           (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Role        mixprec_fp8_scaling_get_role             (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecDType          mixprec_fp8_scaling_get_dtype            (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
gfloat                mixprec_fp8_scaling_get_scale            (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
gfloat                mixprec_fp8_scaling_get_scale_inv        (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
void                  mixprec_fp8_scaling_record_amax          (MixprecFp8Scaling  *self,
                                                                gfloat              amax);
MIXPREC_AVAILABLE_IN_1_1
gboolean              mixprec_fp8_scaling_update               (MixprecFp8Scaling  *self,
                                                                GError            **error);
MIXPREC_AVAILABLE_IN_1_1
const gfloat         *mixprec_fp8_scaling_get_amax_history     (MixprecFp8Scaling  *self,
                                                                guint              *n);
MIXPREC_AVAILABLE_IN_1_1
GBytes               *mixprec_fp8_scaling_dup_amax_history     (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
GVariant             *mixprec_fp8_scaling_save_state           (MixprecFp8Scaling  *self);
MIXPREC_AVAILABLE_IN_1_1
gboolean              mixprec_fp8_scaling_restore_state        (MixprecFp8Scaling  *self,
                                                                GVariant           *state,
                                                                GError            **error);

G_END_DECLS
