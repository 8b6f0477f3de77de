/* mixprec-config.h — a DeepSpeed-style JSON configuration, validated and
 * resolved into typed settings */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include <json-glib/json-glib.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-loss-scaler.h"
#include "mixprec-fp8-recipe.h"
#include "mixprec-fp4.h"

G_BEGIN_DECLS

/**
 * MIXPREC_CONFIG_ERROR:
 *
 * Error domain of #MixprecConfig. Errors in this domain are from the
 * #MixprecConfigError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_CONFIG_ERROR (mixprec_config_error_quark ())

/**
 * MixprecConfigError:
 * @MIXPREC_CONFIG_ERROR_PARSE: the input is not a JSON document libmixprec
 *   accepts: empty, not UTF-8, a syntax error, nesting too deep, or a top
 *   level that is not an object
 * @MIXPREC_CONFIG_ERROR_INVALID_VALUE: a value of the wrong type or outside
 *   the range its key allows
 * @MIXPREC_CONFIG_ERROR_UNKNOWN_KEY: a key that is neither a libmixprec key
 *   nor a DeepSpeed key
 * @MIXPREC_CONFIG_ERROR_CONFLICT: values that are valid one by one but make
 *   no sense together
 * @MIXPREC_CONFIG_ERROR_IO: the file could not be read
 * @MIXPREC_CONFIG_ERROR_UNSUPPORTED: a DeepSpeed setting whose meaning
 *   libmixprec cannot honour and will not silently drop
 * @MIXPREC_CONFIG_ERROR_DUPLICATE_KEY: a key written twice in one object
 *
 * Errors from parsing and validating a configuration. When a document has
 * several problems, one #GError carries all of them, one per line, with
 * the code of the first. Values are appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_CONFIG_ERROR_PARSE,
  MIXPREC_CONFIG_ERROR_INVALID_VALUE,
  MIXPREC_CONFIG_ERROR_UNKNOWN_KEY,
  MIXPREC_CONFIG_ERROR_CONFLICT,
  MIXPREC_CONFIG_ERROR_IO,
  MIXPREC_CONFIG_ERROR_UNSUPPORTED,
  MIXPREC_CONFIG_ERROR_DUPLICATE_KEY,
} MixprecConfigError;

/**
 * MixprecPrecisionMode:
 * @MIXPREC_PRECISION_MODE_FP32: everything in FP32 (no `fp16`, `bf16` or
 *   `torch_autocast` section enabled)
 * @MIXPREC_PRECISION_MODE_FP16: FP16 working weights and gradients, FP32
 *   master weights, loss scaling (`fp16.enabled`)
 * @MIXPREC_PRECISION_MODE_BF16: BF16 working weights and gradients, FP32
 *   master weights (`bf16.enabled`)
 * @MIXPREC_PRECISION_MODE_BF16_NO_MASTER: BF16 weights updated in place,
 *   no FP32 copy (`bf16.bf16_master_weights_and_grads`)
 * @MIXPREC_PRECISION_MODE_AUTOCAST: FP32 parameters; the gradients of the
 *   lower-precision-safe modules are communicated in the autocast dtype
 *   (`torch_autocast.enabled`)
 * @MIXPREC_PRECISION_MODE_FP16_NO_MASTER: FP16 weights and gradients,
 *   no FP32 copy: the optimizer computes in FP32 from the FP16 weights and
 *   the unscaled gradients and rounds the result back into the FP16
 *   weights (to nearest even, or stochastically); loss scaling as in
 *   %MIXPREC_PRECISION_MODE_FP16 (`fp16.fp16_master_weights_and_grads`,
 *   Apex opt level O3, or Apex `master_weights: false`). Since: 1.1
 *
 * How a configuration stores weights and gradients.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_PRECISION_MODE_FP32,
  MIXPREC_PRECISION_MODE_FP16,
  MIXPREC_PRECISION_MODE_BF16,
  MIXPREC_PRECISION_MODE_BF16_NO_MASTER,
  MIXPREC_PRECISION_MODE_AUTOCAST,
  MIXPREC_PRECISION_MODE_FP16_NO_MASTER,
} MixprecPrecisionMode;

MIXPREC_AVAILABLE_IN_1_0
const gchar   *mixprec_precision_mode_get_name   (MixprecPrecisionMode mode);

/**
 * MixprecMasterWeights:
 * @MIXPREC_MASTER_WEIGHTS_FP32: an FP32 master beside the low-precision
 *   working copy (DeepSpeed's and Apex's mixed precision)
 * @MIXPREC_MASTER_WEIGHTS_REMAINDER: the FP32 master kept as the bfloat16
 *   working copy plus a signed 16-bit remainder per element, which join
 *   into the FP32 value bit for bit (`"master_weights": "remainder"`)
 * @MIXPREC_MASTER_WEIGHTS_KAHAN: no FP32 master; bfloat16 weights plus a
 *   bfloat16 compensation per element that carries each update's rounding
 *   error into the next (`"master_weights": "kahan"`)
 * @MIXPREC_MASTER_WEIGHTS_NONE: no FP32 master; the weights are updated in
 *   their own dtype, rounded to nearest even or stochastically
 *   (`bf16.bf16_master_weights_and_grads`, `"master_weights": "none"`)
 *
 * How a configuration keeps the FP32 value of a low-precision parameter
 * (`mixprec.master_weights` in mixprec.json(5)).
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_MASTER_WEIGHTS_FP32,
  MIXPREC_MASTER_WEIGHTS_REMAINDER,
  MIXPREC_MASTER_WEIGHTS_KAHAN,
  MIXPREC_MASTER_WEIGHTS_NONE,
} MixprecMasterWeights;

MIXPREC_AVAILABLE_IN_1_1
const gchar   *mixprec_master_weights_get_name   (MixprecMasterWeights master_weights);

/**
 * MixprecStateFormat:
 * @MIXPREC_STATE_FORMAT_FP32: FP32, four bytes per element
 * @MIXPREC_STATE_FORMAT_BF16: bfloat16 without a scale, two bytes
 *   (DeepSpeed's `bf16.bf16_optimizer_states`)
 * @MIXPREC_STATE_FORMAT_FP16_SCALED: float16 with an FP32 scale per block
 * @MIXPREC_STATE_FORMAT_BF16_SCALED: bfloat16 with an FP32 scale per block
 * @MIXPREC_STATE_FORMAT_FP8_E4M3_SCALED: float8 e4m3 with an FP32 scale
 *   per block, one byte
 * @MIXPREC_STATE_FORMAT_INT8: one byte, an index into the 8-bit dynamic
 *   quantization map, with an FP32 absmax per block
 * @MIXPREC_STATE_FORMAT_INT4: half a byte, an index into the 4-bit map,
 *   with an FP32 absmax per block
 *
 * How the optimizer stores one state slot (`mixprec.optimizer_states` in
 * mixprec.json(5)). Every format is widened to FP32 for the update and
 * stored again in the same pass.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_STATE_FORMAT_FP32,
  MIXPREC_STATE_FORMAT_BF16,
  MIXPREC_STATE_FORMAT_FP16_SCALED,
  MIXPREC_STATE_FORMAT_BF16_SCALED,
  MIXPREC_STATE_FORMAT_FP8_E4M3_SCALED,
  MIXPREC_STATE_FORMAT_INT8,
  MIXPREC_STATE_FORMAT_INT4,
} MixprecStateFormat;

MIXPREC_AVAILABLE_IN_1_1
const gchar   *mixprec_state_format_get_name     (MixprecStateFormat format);

#define MIXPREC_TYPE_CONFIG (mixprec_config_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecConfig, mixprec_config, MIXPREC, CONFIG, GObject)

MIXPREC_AVAILABLE_IN_1_0
GQuark         mixprec_config_error_quark        (void);

MIXPREC_AVAILABLE_IN_1_0
MixprecConfig *mixprec_config_new                (void);
MIXPREC_AVAILABLE_IN_1_0
MixprecConfig *mixprec_config_new_from_file      (const gchar   *path,
                                                  GError       **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecConfig *mixprec_config_new_from_data      (const gchar   *data,
                                                  gssize         length,
                                                  GError       **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecConfig *mixprec_config_new_from_string    (const gchar   *data,
                                                  GError       **error);
MIXPREC_AVAILABLE_IN_1_0
gchar         *mixprec_config_to_data            (MixprecConfig *self,
                                                  gsize         *length);
MIXPREC_AVAILABLE_IN_1_0
GStrv          mixprec_config_get_warnings       (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
gboolean       mixprec_config_get_strict         (MixprecConfig *self);

MIXPREC_AVAILABLE_IN_1_0
MixprecPrecisionMode mixprec_config_get_precision_mode     (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType   mixprec_config_get_low_dtype                (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType   mixprec_config_get_grad_accum_dtype         (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType   mixprec_config_get_communication_dtype      (MixprecConfig *self);

MIXPREC_AVAILABLE_IN_1_0
gdouble        mixprec_config_get_loss_scale               (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gint           mixprec_config_get_initial_scale_power      (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint          mixprec_config_get_loss_scale_window        (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint          mixprec_config_get_hysteresis               (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_get_consecutive_hysteresis   (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble        mixprec_config_get_min_loss_scale           (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_get_check_grad_overflow      (MixprecConfig *self);

MIXPREC_AVAILABLE_IN_1_0
MixprecScalerSemantics mixprec_config_get_scaler_semantics (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble        mixprec_config_get_max_scale                (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble        mixprec_config_get_growth_factor            (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble        mixprec_config_get_backoff_factor           (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_get_raise_at_min_scale       (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar * const *mixprec_config_get_fp32_modules       (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar * const *mixprec_config_get_fp32_params        (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_get_stochastic_rounding      (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecDType   mixprec_config_get_optimizer_state_dtype    (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecMasterWeights mixprec_config_get_master_weights     (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecStateFormat mixprec_config_get_optimizer_state_format (MixprecConfig *self,
                                                            const gchar   *slot);
MIXPREC_AVAILABLE_IN_1_1
const gchar * const *mixprec_config_get_optimizer_state_slots (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_config_get_optimizer_state_block_size (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar   *mixprec_config_get_comm_backend             (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
gdouble        mixprec_config_get_timeout                  (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar   *mixprec_config_get_device                   (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint64        mixprec_config_get_seed                     (MixprecConfig *self);

MIXPREC_AVAILABLE_IN_1_0
guint          mixprec_config_get_zero_stage               (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint64        mixprec_config_get_reduce_bucket_size       (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint64        mixprec_config_get_allgather_bucket_size    (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_get_overlap_comm             (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_get_contiguous_gradients     (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_config_get_prefetch_bucket_size     (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_config_get_param_persistence_threshold (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_config_get_max_live_parameters      (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble        mixprec_config_get_gradient_clipping        (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint          mixprec_config_get_gradient_accumulation_steps (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint          mixprec_config_get_train_batch_size         (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
guint          mixprec_config_get_train_micro_batch_size_per_gpu (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean       mixprec_config_resolve_batch                (MixprecConfig *self,
                                                            guint          world_size,
                                                            GError       **error);

MIXPREC_AVAILABLE_IN_1_0
const gchar   *mixprec_config_get_optimizer_type           (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
JsonObject    *mixprec_config_get_optimizer_params         (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar   *mixprec_config_get_scheduler_type           (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
JsonObject    *mixprec_config_get_scheduler_params         (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar * const *mixprec_config_get_lower_precision_safe_modules (MixprecConfig *self);

MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Recipe *mixprec_config_get_fp8_recipe            (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
const gchar * const *mixprec_config_get_fp8_modules        (MixprecConfig *self);
MIXPREC_AVAILABLE_IN_1_1
gboolean          mixprec_config_get_fp4_recipe            (MixprecConfig      *self,
                                                            MixprecBlockRecipe *recipe,
                                                            MixprecMxScaleMode *scale_mode);
MIXPREC_AVAILABLE_IN_1_1
gboolean          mixprec_config_get_fp4_rht               (MixprecConfig      *self,
                                                            guint16            *sign_mask);
MIXPREC_AVAILABLE_IN_1_1
const gchar * const *mixprec_config_get_fp4_modules        (MixprecConfig      *self);
MIXPREC_AVAILABLE_IN_1_1
const gchar * const *mixprec_config_get_fp4_exclude_params (MixprecConfig      *self);

G_END_DECLS
