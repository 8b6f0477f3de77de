/* mixprec-feature.h — one capability a plugin registers (an optimizer, a
 * communication backend, a device) */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-plugin-object.h"

G_BEGIN_DECLS

/**
 * MixprecFeatureKind:
 * @MIXPREC_FEATURE_KIND_OPTIMIZER: a fused optimizer step (a
 *   `MixprecOptimizerV1` vtable)
 * @MIXPREC_FEATURE_KIND_COMM: collectives between ranks (a `MixprecCommV1`
 *   vtable)
 * @MIXPREC_FEATURE_KIND_DEVICE: memory, copies and kernels of a device (a
 *   `MixprecDeviceV1` vtable); its device is its own name
 *
 * What a #MixprecFeature provides. Values are appended only, never
 * renumbered.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_FEATURE_KIND_OPTIMIZER = 0,
  MIXPREC_FEATURE_KIND_COMM = 1,
  MIXPREC_FEATURE_KIND_DEVICE = 2,
} MixprecFeatureKind;

/**
 * MixprecHyperParamType:
 * @MIXPREC_HYPER_PARAM_TYPE_DOUBLE: a real number
 * @MIXPREC_HYPER_PARAM_TYPE_BOOL: a truth value, carried as 0.0 or 1.0
 * @MIXPREC_HYPER_PARAM_TYPE_INT: an integer, carried as an integral double
 *
 * The type of one optimizer hyper-parameter. Every value travels to the
 * plugin as a double; the type says which doubles are valid. Numerically
 * equal to `MixprecHParamType` of the plugin ABI.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_HYPER_PARAM_TYPE_DOUBLE = 0,
  MIXPREC_HYPER_PARAM_TYPE_BOOL = 1,
  MIXPREC_HYPER_PARAM_TYPE_INT = 2,
} MixprecHyperParamType;

#define MIXPREC_TYPE_FEATURE (mixprec_feature_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecFeature, mixprec_feature, MIXPREC, FEATURE, GObject)

MIXPREC_AVAILABLE_IN_1_0
MixprecFeatureKind    mixprec_feature_get_kind              (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar          *mixprec_feature_get_name              (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar          *mixprec_feature_get_device            (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
guint                 mixprec_feature_get_rank              (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar          *mixprec_feature_get_description       (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar          *mixprec_feature_get_plugin_name       (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecPlugin        *mixprec_feature_get_plugin            (MixprecFeature *self);

MIXPREC_AVAILABLE_IN_1_0
guint                 mixprec_feature_get_n_hparams         (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
gint                  mixprec_feature_find_hparam           (MixprecFeature *self,
                                                             const gchar    *name);
MIXPREC_AVAILABLE_IN_1_0
const gchar          *mixprec_feature_get_hparam_name       (MixprecFeature *self,
                                                             guint           index);
MIXPREC_AVAILABLE_IN_1_0
const gchar          *mixprec_feature_get_hparam_description (MixprecFeature *self,
                                                              guint           index);
MIXPREC_AVAILABLE_IN_1_0
MixprecHyperParamType mixprec_feature_get_hparam_type       (MixprecFeature *self,
                                                             guint           index);
MIXPREC_AVAILABLE_IN_1_0
gdouble               mixprec_feature_get_hparam_default    (MixprecFeature *self,
                                                             guint           index);
MIXPREC_AVAILABLE_IN_1_0
gdouble               mixprec_feature_get_hparam_minimum    (MixprecFeature *self,
                                                             guint           index);
MIXPREC_AVAILABLE_IN_1_0
gdouble               mixprec_feature_get_hparam_maximum    (MixprecFeature *self,
                                                             guint           index);

MIXPREC_AVAILABLE_IN_1_0
guint                 mixprec_feature_get_n_state_slots     (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar * const  *mixprec_feature_get_state_names       (MixprecFeature *self);

MIXPREC_AVAILABLE_IN_1_0
const MixprecDType   *mixprec_feature_get_grad_dtypes       (MixprecFeature *self,
                                                             gsize          *n_dtypes);
MIXPREC_AVAILABLE_IN_1_0
const MixprecDType   *mixprec_feature_get_working_dtypes    (MixprecFeature *self,
                                                             gsize          *n_dtypes);
MIXPREC_AVAILABLE_IN_1_1
const MixprecDType   *mixprec_feature_get_state_dtypes      (MixprecFeature *self,
                                                             gsize          *n_dtypes);
MIXPREC_AVAILABLE_IN_1_1
guint                 mixprec_feature_get_abi_revision      (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_1
guint                 mixprec_feature_get_state_format_mask (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_1
guint                 mixprec_feature_get_master_format_mask (MixprecFeature *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean              mixprec_feature_probe_device          (MixprecFeature *self,
                                                             gint           *n_devices,
                                                             GError        **error);
MIXPREC_AVAILABLE_IN_1_0
const MixprecDType   *mixprec_feature_get_comm_dtypes       (MixprecFeature *self,
                                                             gsize          *n_dtypes);

G_END_DECLS
