/* mixprec-plugin-object.c — MixprecPlugin: what the registry knows about
 * one plugin file, loaded or not. Loading itself is mixprec-plugin-loader.c. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-registry-private.h"

/**
 * MixprecPlugin:
 *
 * A plugin file the #MixprecRegistry found: its name, file, version,
 * license and plugin ABI, and the features it registered.
 *
 * A plugin that could not be loaded (not a shared object, no entry point,
 * another plugin ABI, a failing init) is kept too, so that tools can say
 * why: mixprec_plugin_is_loaded() is then %FALSE and
 * mixprec_plugin_get_load_error() names the file and the reason.
 *
 * A loaded plugin's module is never unloaded.
 *
 * The features compiled into libmixprec itself (the `local` communicator)
 * belong to a plugin named "builtin", which has no file.
 *
 * Since: 1.0
 */
struct _MixprecPlugin
{
  GObject parent_instance;

  gchar *name;
  gchar *filename;
  gchar *description;
  gchar *version;
  gchar *license;
  gchar *origin;
  guint abi_major;
  guint abi_minor;

  GModule *module;              /* resident once loaded; NULL for "builtin" */
  gboolean loaded;
  GPtrArray *features;          /* MixprecFeature, registration order */
  GError *load_error;
};

G_DEFINE_FINAL_TYPE (MixprecPlugin, mixprec_plugin, G_TYPE_OBJECT)

/**
 * mixprec_plugin_error_quark:
 *
 * Gets the error domain of #MixprecPlugin and the plugin registry.
 *
 * Returns: the quark behind %MIXPREC_PLUGIN_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-plugin-error-quark, mixprec_plugin_error)

enum
{
  PROP_0,
  PROP_NAME,
  PROP_FILENAME,
  PROP_DESCRIPTION,
  PROP_VERSION,
  PROP_LICENSE,
  PROP_ORIGIN,
  PROP_LOADED,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void
mixprec_plugin_finalize (GObject *object)
{
  MixprecPlugin *self = MIXPREC_PLUGIN (object);

  g_free (self->name);
  g_free (self->filename);
  g_free (self->description);
  g_free (self->version);
  g_free (self->license);
  g_free (self->origin);
  g_ptr_array_unref (self->features);
  g_clear_error (&self->load_error);
  /* self->module stays open: the features' code lives there and another
   * registry of this process may use the same module. */

  G_OBJECT_CLASS (mixprec_plugin_parent_class)->finalize (object);
}

static void
mixprec_plugin_get_property (GObject    *object,
                             guint       prop_id,
                             GValue     *value,
                             GParamSpec *pspec)
{
  MixprecPlugin *self = MIXPREC_PLUGIN (object);

  switch (prop_id)
    {
    case PROP_NAME:
      g_value_set_string (value, self->name);
      break;
    case PROP_FILENAME:
      g_value_set_string (value, self->filename);
      break;
    case PROP_DESCRIPTION:
      g_value_set_string (value, self->description);
      break;
    case PROP_VERSION:
      g_value_set_string (value, self->version);
      break;
    case PROP_LICENSE:
      g_value_set_string (value, self->license);
      break;
    case PROP_ORIGIN:
      g_value_set_string (value, self->origin);
      break;
    case PROP_LOADED:
      g_value_set_boolean (value, mixprec_plugin_is_loaded (self));
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_plugin_class_init (MixprecPluginClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags flags = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->finalize = mixprec_plugin_finalize;
  object_class->get_property = mixprec_plugin_get_property;

  /**
   * MixprecPlugin:name:
   *
   * The plugin's name, from its file name: mixprec-NAME.so.
   *
   * Since: 1.0
   */
  properties[PROP_NAME] = g_param_spec_string ("name", NULL, NULL, NULL, flags);
  /**
   * MixprecPlugin:filename:
   *
   * The file the plugin was found in; %NULL for the plugin "builtin",
   * whose features are part of libmixprec.
   *
   * Since: 1.0
   */
  properties[PROP_FILENAME] = g_param_spec_string ("filename", NULL, NULL, NULL, flags);
  /**
   * MixprecPlugin:description:
   *
   * What the plugin provides, in its own words, or %NULL.
   *
   * Since: 1.0
   */
  properties[PROP_DESCRIPTION] = g_param_spec_string ("description", NULL, NULL, NULL, flags);
  /**
   * MixprecPlugin:version:
   *
   * The plugin's version, or %NULL.
   *
   * Since: 1.0
   */
  properties[PROP_VERSION] = g_param_spec_string ("version", NULL, NULL, NULL, flags);
  /**
   * MixprecPlugin:license:
   *
   * The plugin's license as an SPDX identifier, or %NULL.
   *
   * Since: 1.0
   */
  properties[PROP_LICENSE] = g_param_spec_string ("license", NULL, NULL, NULL, flags);
  /**
   * MixprecPlugin:origin:
   *
   * Where the plugin comes from (a URL or a package), or %NULL.
   *
   * Since: 1.0
   */
  properties[PROP_ORIGIN] = g_param_spec_string ("origin", NULL, NULL, NULL, flags);
  /**
   * MixprecPlugin:loaded:
   *
   * Whether the plugin loaded and its features are available.
   *
   * Since: 1.0
   */
  properties[PROP_LOADED] = g_param_spec_boolean ("loaded", NULL, NULL, FALSE, flags);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_plugin_init (MixprecPlugin *self)
{
  self->features = g_ptr_array_new_with_free_func (g_object_unref);
}

/* ------------------------------------------------------------ internal */

MixprecPlugin *
_mixprec_plugin_new (const gchar *filename,
                     const gchar *name)
{
  MixprecPlugin *self = g_object_new (MIXPREC_TYPE_PLUGIN, NULL);

  self->filename = g_strdup (filename);
  self->name = g_strdup (name);
  return self;
}

void
_mixprec_plugin_set_abi (MixprecPlugin *self,
                         guint          abi_major,
                         guint          abi_minor)
{
  self->abi_major = abi_major;
  self->abi_minor = abi_minor;
}

void
_mixprec_plugin_set_description (MixprecPlugin           *self,
                                 const MixprecPluginDesc *desc)
{
  _mixprec_plugin_set_abi (self, desc->abi_major, desc->abi_minor);
  g_free (self->description);
  self->description = g_strdup (desc->description);
  g_free (self->version);
  self->version = g_strdup (desc->version);
  g_free (self->license);
  self->license = g_strdup (desc->license);
  g_free (self->origin);
  self->origin = g_strdup (desc->origin);
}

void
_mixprec_plugin_set_loaded (MixprecPlugin *self,
                            GModule       *module,
                            GPtrArray     *features)
{
  self->module = module;
  self->loaded = TRUE;
  for (guint i = 0; i < features->len; i++)
    g_ptr_array_add (self->features, g_object_ref (g_ptr_array_index (features, i)));
}

void
_mixprec_plugin_set_load_error (MixprecPlugin *self,
                                GError        *error)
{
  g_clear_error (&self->load_error);
  self->load_error = error;
}

GPtrArray *
_mixprec_plugin_peek_features (MixprecPlugin *self)
{
  return self->features;
}

const gchar *
_mixprec_plugin_status_to_string (int status)
{
  switch (status)
    {
    case MIXPREC_PLUGIN_OK:
      return "success";
    case MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT:
      return "invalid argument";
    case MIXPREC_PLUGIN_ERR_UNSUPPORTED:
      return "unsupported";
    case MIXPREC_PLUGIN_ERR_RUNTIME:
      return "runtime error";
    case MIXPREC_PLUGIN_ERR_TIMEOUT:
      return "timeout";
    case MIXPREC_PLUGIN_ERR_NO_MEMORY:
      return "out of memory";
    case MIXPREC_PLUGIN_ERR_PEER_FAILED:
      return "peer failed";
    default:
      return "unknown status";
    }
}

/* ------------------------------------------------------------ public API */

/**
 * mixprec_plugin_get_name:
 * @self: a #MixprecPlugin
 *
 * Gives the plugin's name, derived from its file name.
 *
 * Returns: the plugin's name, e.g. "optim-adamw" (from its file name
 *   mixprec-optim-adamw.so)
 *
 * Since: 1.0
 */
const gchar *
mixprec_plugin_get_name (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->name;
}

/**
 * mixprec_plugin_get_filename:
 * @self: a #MixprecPlugin
 *
 * Gives the path of the module file the plugin was loaded from.
 *
 * Returns: (type filename) (nullable): the file the plugin was found in;
 *   %NULL for the plugin "builtin", whose features are part of libmixprec
 *
 * Since: 1.0
 */
const gchar *
mixprec_plugin_get_filename (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->filename;
}

/**
 * mixprec_plugin_get_description:
 * @self: a #MixprecPlugin
 *
 * Gives the plugin's description of itself.
 *
 * Returns: (nullable): what the plugin provides, in its own words; %NULL
 *   when it gave no description or its description could not be read
 *
 * Since: 1.0
 */
const gchar *
mixprec_plugin_get_description (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->description;
}

/**
 * mixprec_plugin_get_version:
 * @self: a #MixprecPlugin
 *
 * Gives the version the plugin declares for itself (not the libmixprec
 * version).
 *
 * Returns: (nullable): the plugin's version, or %NULL when unknown
 *
 * Since: 1.0
 */
const gchar *
mixprec_plugin_get_version (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->version;
}

/**
 * mixprec_plugin_get_license:
 * @self: a #MixprecPlugin
 *
 * Gives the license the plugin declares.
 *
 * Returns: (nullable): the plugin's license as an SPDX identifier, or
 *   %NULL when unknown
 *
 * Since: 1.0
 */
const gchar *
mixprec_plugin_get_license (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->license;
}

/**
 * mixprec_plugin_get_origin:
 * @self: a #MixprecPlugin
 *
 * Gives where the plugin says it comes from.
 *
 * Returns: (nullable): where the plugin comes from (a URL or a package), or
 *   %NULL when unknown
 *
 * Since: 1.0
 */
const gchar *
mixprec_plugin_get_origin (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->origin;
}

/**
 * mixprec_plugin_get_abi_major:
 * @self: a #MixprecPlugin
 *
 * Gives the major version of the plugin ABI the plugin declares; it loads
 * only when that equals %MIXPREC_PLUGIN_ABI_MAJOR.
 *
 * Returns: the major version of the plugin ABI the plugin was built for;
 *   0 when its description could not be read
 *
 * Since: 1.0
 */
guint
mixprec_plugin_get_abi_major (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), 0);

  return self->abi_major;
}

/**
 * mixprec_plugin_get_abi_minor:
 * @self: a #MixprecPlugin
 *
 * Gives the minor version of the plugin ABI the plugin declares; it loads
 * only when that is at most %MIXPREC_PLUGIN_ABI_MINOR.
 *
 * Returns: the minor version of the plugin ABI the plugin was built for;
 *   0 when its description could not be read
 *
 * Since: 1.0
 */
guint
mixprec_plugin_get_abi_minor (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), 0);

  return self->abi_minor;
}

/**
 * mixprec_plugin_is_loaded:
 * @self: a #MixprecPlugin
 *
 * Tells whether the plugin loaded. The registry keeps plugins that failed,
 * so that tools can say why.
 *
 * Returns: %TRUE when the plugin loaded and its features are available;
 *   %FALSE when it failed (see mixprec_plugin_get_load_error())
 *
 * Since: 1.0
 */
gboolean
mixprec_plugin_is_loaded (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), FALSE);

  return self->load_error == NULL && self->loaded;
}

/**
 * mixprec_plugin_get_load_error:
 * @self: a #MixprecPlugin
 *
 * Why the plugin was not loaded. The message begins with the file name and
 * says what is wrong; the code is a #MixprecPluginError in the
 * %MIXPREC_PLUGIN_ERROR domain.
 *
 * Returns: (transfer none) (nullable): the reason, or %NULL for a loaded
 *   plugin
 *
 * Since: 1.0
 */
const GError *
mixprec_plugin_get_load_error (MixprecPlugin *self)
{
  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  return self->load_error;
}

/**
 * mixprec_plugin_get_features:
 * @self: a #MixprecPlugin
 *
 * Lists the features the plugin registered.
 *
 * Returns: (transfer full) (element-type MixprecFeature): the features the
 *   plugin registered, in registration order; empty for a plugin that
 *   failed to load. Free with `g_list_free_full (list, g_object_unref)`.
 *
 * Since: 1.0
 */
GList *
mixprec_plugin_get_features (MixprecPlugin *self)
{
  GList *list = NULL;

  g_return_val_if_fail (MIXPREC_IS_PLUGIN (self), NULL);

  for (guint i = self->features->len; i > 0; i--)
    list = g_list_prepend (list, g_object_ref (g_ptr_array_index (self->features, i - 1)));
  return list;
}
