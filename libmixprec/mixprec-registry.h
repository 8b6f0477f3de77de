/* mixprec-registry.h — finds, loads and indexes the plugins */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-plugin-object.h"
#include "mixprec-feature.h"

G_BEGIN_DECLS

#define MIXPREC_TYPE_REGISTRY (mixprec_registry_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecRegistry, mixprec_registry, MIXPREC, REGISTRY, GObject)

MIXPREC_AVAILABLE_IN_1_0
MixprecRegistry     *mixprec_registry_get_default     (void);
MIXPREC_AVAILABLE_IN_1_0
MixprecRegistry     *mixprec_registry_new_for_paths   (const gchar * const *paths,
                                                       gboolean             include_system);
MIXPREC_AVAILABLE_IN_1_0
const gchar * const *mixprec_registry_get_search_path (MixprecRegistry     *self);
MIXPREC_AVAILABLE_IN_1_0
GList               *mixprec_registry_get_plugins     (MixprecRegistry     *self);
MIXPREC_AVAILABLE_IN_1_0
GList               *mixprec_registry_get_features    (MixprecRegistry     *self);
MIXPREC_AVAILABLE_IN_1_0
GList               *mixprec_registry_get_failures    (MixprecRegistry     *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecPlugin       *mixprec_registry_find_plugin     (MixprecRegistry     *self,
                                                       const gchar         *name,
                                                       GError             **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecFeature      *mixprec_registry_find_feature    (MixprecRegistry     *self,
                                                       MixprecFeatureKind   kind,
                                                       const gchar         *name,
                                                       const gchar         *device,
                                                       GError             **error);

G_END_DECLS
