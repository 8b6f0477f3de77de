/* mixprec-policy.h — which dtypes each parameter is stored, accumulated and
 * communicated in */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-config.h"

G_BEGIN_DECLS

/**
 * MIXPREC_PRECISION_POLICY_ERROR:
 *
 * Error domain of #MixprecPrecisionPolicy. Errors in this domain are from
 * the #MixprecPrecisionPolicyError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_PRECISION_POLICY_ERROR (mixprec_precision_policy_error_quark ())

/**
 * MixprecPrecisionPolicyError:
 * @MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME: a parameter name that is
 *   missing, empty or not UTF-8, or a module type that is not UTF-8
 *
 * Errors from resolving per-parameter precision. Values are appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_PRECISION_POLICY_ERROR_INVALID_NAME,
} MixprecPrecisionPolicyError;

/**
 * MixprecPrecisionReason:
 * @MIXPREC_PRECISION_REASON_MODE: the precision mode's rule for every
 *   parameter
 * @MIXPREC_PRECISION_REASON_FP32_MODULE: the module type is listed in
 *   `mixprec.fp32_modules`
 * @MIXPREC_PRECISION_REASON_FP32_PARAM: the parameter name matches a
 *   pattern of `mixprec.fp32_params`
 * @MIXPREC_PRECISION_REASON_AUTOCAST_SAFE_MODULE: the module type is listed
 *   in `torch_autocast.lower_precision_safe_modules`
 *
 * Why a parameter got the dtypes it got.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_PRECISION_REASON_MODE,
  MIXPREC_PRECISION_REASON_FP32_MODULE,
  MIXPREC_PRECISION_REASON_FP32_PARAM,
  MIXPREC_PRECISION_REASON_AUTOCAST_SAFE_MODULE,
} MixprecPrecisionReason;

/**
 * MixprecParamPrecision:
 * @working_dtype: the dtype of the weights the forward and backward passes
 *   read, and of the gradients they write
 * @master_dtype: the dtype of the weights the optimizer updates; equal to
 *   @working_dtype when @has_master is %FALSE
 * @has_master: whether a separate master copy is kept
 * @grad_accum_dtype: the dtype gradients are accumulated in across
 *   micro-steps
 * @comm_dtype: the dtype gradients are reduced in across ranks
 * @reason: why the parameter got these dtypes
 *
 * The dtypes of one parameter, as mixprec_precision_policy_lookup()
 * resolves them.
 *
 * Since: 1.0
 */
typedef struct _MixprecParamPrecision MixprecParamPrecision;

struct _MixprecParamPrecision
{
  MixprecDType working_dtype;
  MixprecDType master_dtype;
  gboolean has_master;
  MixprecDType grad_accum_dtype;
  MixprecDType comm_dtype;
  MixprecPrecisionReason reason;

  /*< private >*/
  gpointer _mixprec_reserved[4];
};

#define MIXPREC_TYPE_PARAM_PRECISION (mixprec_param_precision_get_type ())
MIXPREC_AVAILABLE_IN_1_0
GType                  mixprec_param_precision_get_type (void) G_GNUC_CONST;
MIXPREC_AVAILABLE_IN_1_0
MixprecParamPrecision *mixprec_param_precision_copy     (const MixprecParamPrecision *precision);
MIXPREC_AVAILABLE_IN_1_0
void                   mixprec_param_precision_free     (MixprecParamPrecision       *precision);

#define MIXPREC_TYPE_PRECISION_POLICY (mixprec_precision_policy_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecPrecisionPolicy, mixprec_precision_policy, MIXPREC, PRECISION_POLICY, GObject)

MIXPREC_AVAILABLE_IN_1_0
GQuark                  mixprec_precision_policy_error_quark      (void);
MIXPREC_AVAILABLE_IN_1_0
MixprecPrecisionPolicy *mixprec_precision_policy_new_from_config  (MixprecConfig          *config,
                                                                   GError                **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecConfig          *mixprec_precision_policy_get_config       (MixprecPrecisionPolicy *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean                mixprec_precision_policy_resolve          (MixprecPrecisionPolicy *self,
                                                                   const gchar            *param_name,
                                                                   const gchar            *module_type,
                                                                   MixprecDType           *working_dtype,
                                                                   MixprecDType           *master_dtype,
                                                                   gboolean               *has_master,
                                                                   MixprecDType           *grad_accum_dtype,
                                                                   MixprecDType           *comm_dtype,
                                                                   GError                **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecParamPrecision  *mixprec_precision_policy_lookup           (MixprecPrecisionPolicy *self,
                                                                   const gchar            *param_name,
                                                                   const gchar            *module_type,
                                                                   GError                **error);

MIXPREC_AVAILABLE_IN_1_1
gboolean                mixprec_precision_policy_is_fp8           (MixprecPrecisionPolicy *self,
                                                                   const gchar            *param_name,
                                                                   const gchar            *module_type);
MIXPREC_AVAILABLE_IN_1_1
gboolean                mixprec_precision_policy_is_fp4           (MixprecPrecisionPolicy *self,
                                                                   const gchar            *param_name,
                                                                   const gchar            *module_type);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (MixprecParamPrecision, mixprec_param_precision_free)

G_END_DECLS
