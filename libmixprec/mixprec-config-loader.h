/* mixprec-config-loader.h — reads configurations with values set from
 * outside the document: overrides by JSON path */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-config.h"

G_BEGIN_DECLS

#define MIXPREC_TYPE_CONFIG_LOADER (mixprec_config_loader_get_type ())
MIXPREC_AVAILABLE_IN_1_1
G_DECLARE_FINAL_TYPE (MixprecConfigLoader, mixprec_config_loader, MIXPREC, CONFIG_LOADER, GObject)

MIXPREC_AVAILABLE_IN_1_1
MixprecConfigLoader *mixprec_config_loader_new            (void);
MIXPREC_AVAILABLE_IN_1_1
gboolean       mixprec_config_loader_set_override         (MixprecConfigLoader *self,
                                                           const gchar         *path,
                                                           const gchar         *value,
                                                           GError             **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean       mixprec_config_loader_parse_override       (MixprecConfigLoader *self,
                                                           const gchar         *assignment,
                                                           GError             **error);
MIXPREC_AVAILABLE_IN_1_1
GStrv          mixprec_config_loader_list_overrides       (MixprecConfigLoader *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecConfig *mixprec_config_loader_load_file            (MixprecConfigLoader *self,
                                                           const gchar         *path,
                                                           GError             **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecConfig *mixprec_config_loader_load_data            (MixprecConfigLoader *self,
                                                           const gchar         *data,
                                                           GError             **error);

G_END_DECLS
