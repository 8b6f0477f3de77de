/* mixprec-plugin-object.h — one plugin file the registry found: loaded, or
 * refused with the reason (the ABI itself is in mixprec-plugin.h) */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"

G_BEGIN_DECLS

/**
 * MIXPREC_PLUGIN_ERROR:
 *
 * Error domain of plugin loading and of registry look-ups. Errors in this
 * domain are from the #MixprecPluginError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_PLUGIN_ERROR (mixprec_plugin_error_quark ())

/**
 * MixprecPluginError:
 * @MIXPREC_PLUGIN_ERROR_OPEN: the file is not a shared object the dynamic
 *   loader can open (not ELF, wrong architecture, missing dependency), or
 *   it failed the trust checks (owner, permissions) and was not opened
 * @MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT: the file does not export
 *   `mixprec_plugin_NAME_get_desc`, or its name does not form a plugin name
 * @MIXPREC_PLUGIN_ERROR_ABI_MISMATCH: the plugin was built for a plugin ABI
 *   this libmixprec does not implement (another major version, or a newer
 *   minor version)
 * @MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION: the plugin description is missing,
 *   lacks a required field, has non-zero reserved fields, or names another
 *   plugin than its file
 * @MIXPREC_PLUGIN_ERROR_INIT_FAILED: the plugin's init() returned an error
 * @MIXPREC_PLUGIN_ERROR_BAD_FEATURE: the plugin tried to register a feature
 *   whose vtable is invalid
 * @MIXPREC_PLUGIN_ERROR_NOT_FOUND: no loaded plugin or feature has the
 *   requested name (and device)
 * @MIXPREC_PLUGIN_ERROR_CALL_FAILED: a function of a loaded feature
 *   reported a failure
 *
 * Why a plugin was not loaded, or why a look-up failed. Values are appended
 * only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_PLUGIN_ERROR_OPEN,
  MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
  MIXPREC_PLUGIN_ERROR_ABI_MISMATCH,
  MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
  MIXPREC_PLUGIN_ERROR_INIT_FAILED,
  MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
  MIXPREC_PLUGIN_ERROR_NOT_FOUND,
  MIXPREC_PLUGIN_ERROR_CALL_FAILED,
} MixprecPluginError;

MIXPREC_AVAILABLE_IN_1_0
GQuark mixprec_plugin_error_quark (void);

#define MIXPREC_TYPE_PLUGIN (mixprec_plugin_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecPlugin, mixprec_plugin, MIXPREC, PLUGIN, GObject)

MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_plugin_get_name        (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_plugin_get_filename    (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_plugin_get_description (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_plugin_get_version     (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_plugin_get_license     (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_plugin_get_origin      (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
guint         mixprec_plugin_get_abi_major   (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
guint         mixprec_plugin_get_abi_minor   (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_plugin_is_loaded       (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
const GError *mixprec_plugin_get_load_error  (MixprecPlugin *self);
MIXPREC_AVAILABLE_IN_1_0
GList        *mixprec_plugin_get_features    (MixprecPlugin *self);

G_END_DECLS
