/* mixprec-plugin-loader.c — opens one plugin file and walks it through the
 * ABI's checks: entry point, ABI version, description, init(), and every
 * feature init() registers. Any failure leaves a plugin object that says
 * why, never a warning or a crash. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-registry-private.h"

/* The library's plugin ABI has two spellings (configure's, in
 * mixprec-version.h, and the ABI header's); they must agree. */
G_STATIC_ASSERT (MIXPREC_PLUGIN_ABI_MAJOR == MIXPREC_PLUGIN_ABI_VERSION_MAJOR);
G_STATIC_ASSERT (MIXPREC_PLUGIN_ABI_MINOR == MIXPREC_PLUGIN_ABI_VERSION_MINOR);

#define PLUGIN_PREFIX "mixprec-"
#define PLUGIN_SUFFIX ".so"

/* What init() is registering into; reached through host->host_data. */
typedef struct
{
  MixprecPlugin *plugin;
  GPtrArray *features;
  GError *refused;              /* the first registration refused */
} LoadContext;

gchar *
_mixprec_plugin_name_from_filename (const gchar *filename)
{
  g_autofree gchar *base = g_path_get_basename (filename);
  gsize len = strlen (base);

  if (len <= strlen (PLUGIN_PREFIX) + strlen (PLUGIN_SUFFIX) ||
      !g_str_has_prefix (base, PLUGIN_PREFIX) || !g_str_has_suffix (base, PLUGIN_SUFFIX))
    return NULL;
  return g_strndup (base + strlen (PLUGIN_PREFIX),
                    len - strlen (PLUGIN_PREFIX) - strlen (PLUGIN_SUFFIX));
}

static gboolean
plugin_name_is_valid (const gchar *name)
{
  for (const gchar *p = name; *p != '\0'; p++)
    if (!g_ascii_isalnum (*p) && *p != '-' && *p != '_')
      return FALSE;
  return name[0] != '\0';
}

static void
write_errbuf (char        *errbuf,
              size_t       errbuf_len,
              const gchar *message)
{
  if (errbuf != NULL && errbuf_len > 0)
    g_strlcpy (errbuf, message, errbuf_len);
}

/* Whether init() already registered a feature of this kind, name and device. */
static gboolean
is_registered_twice (LoadContext        *ctx,
                     MixprecFeatureKind  kind,
                     const char         *name,
                     const char         *device,
                     GError            **error)
{
  for (guint i = 0; i < ctx->features->len; i++)
    {
      MixprecFeature *f = g_ptr_array_index (ctx->features, i);

      if (mixprec_feature_get_kind (f) == kind &&
          g_str_equal (mixprec_feature_get_name (f), name) &&
          g_str_equal (mixprec_feature_get_device (f), device))
        {
          g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
                       "%s '%s' (%s) is registered twice",
                       kind == MIXPREC_FEATURE_KIND_COMM ? "comm" : "optimizer",
                       name, device);
          return TRUE;
        }
    }
  return FALSE;
}

/* Answers a refused registration: the sentence for the plugin, and the
 * first refusal kept for the load error. */
static int
refuse (LoadContext *ctx,
        GError      *error,
        char        *errbuf,
        size_t       errbuf_len)
{
  write_errbuf (errbuf, errbuf_len, error->message);
  g_debug ("%s: refused a feature: %s", mixprec_plugin_get_name (ctx->plugin), error->message);
  if (ctx->refused == NULL)
    ctx->refused = error;
  else
    g_error_free (error);
  return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
}

static LoadContext *
host_context (MixprecPluginHostV1 *host,
              const gchar         *function,
              char                *errbuf,
              size_t               errbuf_len)
{
  if (host == NULL || host->host_data == NULL)
    {
      g_autofree gchar *message = g_strdup_printf ("%s() needs the host table that init() "
                                                   "received", function);

      write_errbuf (errbuf, errbuf_len, message);
      return NULL;
    }
  return host->host_data;
}

static int
host_register_optimizer (MixprecPluginHostV1      *host,
                         const MixprecOptimizerV1 *optimizer,
                         char                     *errbuf,
                         size_t                    errbuf_len)
{
  LoadContext *ctx = host_context (host, "register_optimizer", errbuf, errbuf_len);
  GError *error = NULL;

  if (ctx == NULL)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  if (!_mixprec_optimizer_vtable_check (optimizer, &error) ||
      is_registered_twice (ctx, MIXPREC_FEATURE_KIND_OPTIMIZER, optimizer->name,
                           optimizer->device, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new_optimizer (optimizer, ctx->plugin));
  return MIXPREC_PLUGIN_OK;
}

static int
host_register_optimizer_v2 (MixprecPluginHostV1      *host,
                            const MixprecOptimizerV2 *optimizer,
                            char                     *errbuf,
                            size_t                    errbuf_len)
{
  LoadContext *ctx = host_context (host, "register_optimizer_v2", errbuf, errbuf_len);
  GError *error = NULL;

  if (ctx == NULL)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  if (!_mixprec_optimizer_v2_vtable_check (optimizer, &error) ||
      is_registered_twice (ctx, MIXPREC_FEATURE_KIND_OPTIMIZER, optimizer->name,
                           optimizer->device, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new_optimizer_v2 (optimizer, ctx->plugin));
  return MIXPREC_PLUGIN_OK;
}

static int
host_register_comm (MixprecPluginHostV1 *host,
                    const MixprecCommV1 *comm,
                    char                *errbuf,
                    size_t               errbuf_len)
{
  LoadContext *ctx = host_context (host, "register_comm", errbuf, errbuf_len);
  GError *error = NULL;

  if (ctx == NULL)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  if (!_mixprec_comm_vtable_check (comm, &error) ||
      is_registered_twice (ctx, MIXPREC_FEATURE_KIND_COMM, comm->name, comm->device, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new_comm (comm, ctx->plugin));
  return MIXPREC_PLUGIN_OK;
}

static int
host_register_device (MixprecPluginHostV1   *host,
                      const MixprecDeviceV1 *device,
                      char                  *errbuf,
                      size_t                 errbuf_len)
{
  LoadContext *ctx = host_context (host, "register_device", errbuf, errbuf_len);
  GError *error = NULL;

  if (ctx == NULL)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  if (!_mixprec_device_vtable_check (device, &error) ||
      is_registered_twice (ctx, MIXPREC_FEATURE_KIND_DEVICE, device->name, device->name, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new_device (device, ctx->plugin));
  return MIXPREC_PLUGIN_OK;
}

static int
host_register_device_v2 (MixprecPluginHostV1   *host,
                         const MixprecDeviceV2 *device,
                         char                  *errbuf,
                         size_t                 errbuf_len)
{
  LoadContext *ctx = host_context (host, "register_device_v2", errbuf, errbuf_len);
  GError *error = NULL;

  if (ctx == NULL)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  if (!_mixprec_device_v2_vtable_check (device, &error) ||
      is_registered_twice (ctx, MIXPREC_FEATURE_KIND_DEVICE, device->base.name,
                           device->base.name, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new_device_v2 (device, ctx->plugin));
  return MIXPREC_PLUGIN_OK;
}

static int
host_register_device_v3 (MixprecPluginHostV1   *host,
                         const MixprecDeviceV3 *device,
                         char                  *errbuf,
                         size_t                 errbuf_len)
{
  LoadContext *ctx = host_context (host, "register_device_v3", errbuf, errbuf_len);
  GError *error = NULL;

  if (ctx == NULL)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  if (!_mixprec_device_v3_vtable_check (device, &error) ||
      is_registered_twice (ctx, MIXPREC_FEATURE_KIND_DEVICE, device->base.base.name,
                           device->base.base.name, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new_device_v3 (device, ctx->plugin));
  return MIXPREC_PLUGIN_OK;
}

/* dlerror() strings usually repeat the file name; the message has it once. */
static const gchar *
strip_filename (const gchar *message,
                const gchar *filename)
{
  if (message == NULL)
    return "the dynamic loader gave no reason";
  if (g_str_has_prefix (message, filename) &&
      g_str_has_prefix (message + strlen (filename), ": "))
    return message + strlen (filename) + 2;
  return message;
}

static gboolean
pointers_are_null (void * const *p,
                   gsize         n)
{
  for (gsize i = 0; i < n; i++)
    if (p[i] != NULL)
      return FALSE;
  return TRUE;
}

/* Runs init() and keeps its features only when it succeeded and every
 * registration was accepted. */
static gboolean
plugin_init (MixprecPlugin            *plugin,
             const MixprecPluginDesc  *desc,
             GModule                  *module,
             GError                  **error)
{
  const gchar *filename = mixprec_plugin_get_filename (plugin) != NULL
    ? mixprec_plugin_get_filename (plugin) : "libmixprec";
  char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
  g_autoptr(GPtrArray) features = g_ptr_array_new_with_free_func (g_object_unref);
  LoadContext ctx = { plugin, features, NULL };
  MixprecPluginHostV1 host = {
    .struct_size = sizeof host,
    .abi_major = MIXPREC_PLUGIN_ABI_MAJOR,
    .abi_minor = MIXPREC_PLUGIN_ABI_MINOR,
    .host_data = &ctx,
    .register_optimizer = host_register_optimizer,
    .register_comm = host_register_comm,
    .register_device = host_register_device,
    .register_optimizer_v2 = host_register_optimizer_v2,
    .register_device_v2 = host_register_device_v2,
    .register_device_v3 = host_register_device_v3,
  };
  int status;

  status = desc->init (&host, errbuf, sizeof errbuf);
  errbuf[sizeof errbuf - 1] = '\0';

  if (ctx.refused != NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
                   "%s: plugin '%s' registered an invalid feature: %s",
                   filename, desc->name, ctx.refused->message);
      g_error_free (ctx.refused);
      return FALSE;
    }
  if (status != MIXPREC_PLUGIN_OK)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_INIT_FAILED,
                   "%s: plugin '%s' failed to initialise: %s (%s, status %d)",
                   filename, desc->name,
                   errbuf[0] != '\0' ? errbuf : "its init() gave no reason",
                   _mixprec_plugin_status_to_string (status), status);
      return FALSE;
    }

  _mixprec_plugin_set_loaded (plugin, module, features);
  return TRUE;
}

/* Everything before init(): entry point, ABI version and description. */
static const MixprecPluginDesc *
plugin_describe (MixprecPlugin  *plugin,
                 GModule        *module,
                 GError        **error)
{
  const gchar *filename = mixprec_plugin_get_filename (plugin);
  const gchar *name = mixprec_plugin_get_name (plugin);
  g_autofree gchar *symbol = g_strdup_printf ("mixprec_plugin_%s_get_desc", name);
  MixprecPluginGetDescFunc get_desc = NULL;
  const MixprecPluginDesc *desc;

  g_strdelimit (symbol, "-", '_');
  if (!g_module_symbol (module, symbol, (gpointer *) &get_desc) || get_desc == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
                   "%s: not a libmixprec plugin: it does not export the entry point %s()",
                   filename, symbol);
      return NULL;
    }

  desc = get_desc ();
  if (desc == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: %s() returned no plugin description", filename, symbol);
      return NULL;
    }

  /* Only the two version fields are common to every ABI revision; nothing
   * else of the description is read before they are checked. */
  _mixprec_plugin_set_abi (plugin, desc->abi_major, desc->abi_minor);
  if (desc->abi_major != MIXPREC_PLUGIN_ABI_MAJOR || desc->abi_minor > MIXPREC_PLUGIN_ABI_MINOR)
    {
      g_autofree gchar *supported = MIXPREC_PLUGIN_ABI_MINOR == 0
        ? g_strdup_printf ("%d.0", MIXPREC_PLUGIN_ABI_MAJOR)
        : g_strdup_printf ("%d.0 to %d.%d", MIXPREC_PLUGIN_ABI_MAJOR,
                           MIXPREC_PLUGIN_ABI_MAJOR, MIXPREC_PLUGIN_ABI_MINOR);

      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_ABI_MISMATCH,
                   "%s: built for plugin ABI %u.%u, this libmixprec supports %s; "
                   "rebuild the plugin against this libmixprec's <mixprec/mixprec-plugin.h>",
                   filename, desc->abi_major, desc->abi_minor, supported);
      return NULL;
    }

  if (desc->name == NULL || desc->init == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the plugin description has no %s; both name and init are required",
                   filename, desc->name == NULL ? "name" : "init function");
      return NULL;
    }
  if (!g_str_equal (desc->name, name))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the plugin calls itself '%s' but its file name says '%s'; "
                   "a plugin named NAME must be installed as mixprec-NAME.so",
                   filename, desc->name, name);
      return NULL;
    }
  if (!pointers_are_null (desc->reserved, G_N_ELEMENTS (desc->reserved)))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the reserved fields of the plugin description are not zero "
                   "(was the plugin built against another mixprec-plugin.h?)", filename);
      return NULL;
    }

  _mixprec_plugin_set_description (plugin, desc);
  return desc;
}

MixprecPlugin *
_mixprec_plugin_load (const gchar *filename,
                      const gchar *name)
{
  g_autoptr(MixprecPlugin) plugin = NULL;
  g_autoptr(GError) error = NULL;
  const MixprecPluginDesc *desc;
  GModule *module;

  g_return_val_if_fail (filename != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);

  plugin = _mixprec_plugin_new (filename, name);

  if (!plugin_name_is_valid (name))
    {
      _mixprec_plugin_set_load_error (plugin,
          g_error_new (MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
                       "%s: '%s' is not a plugin name (only letters, digits, '-' and '_'), "
                       "so the file can have no entry point", filename, name));
      return g_steal_pointer (&plugin);
    }

  module = g_module_open (filename, G_MODULE_BIND_LOCAL | G_MODULE_BIND_LAZY);
  if (module == NULL)
    {
      _mixprec_plugin_set_load_error (plugin,
          g_error_new (MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_OPEN,
                       "%s: not a loadable module: %s",
                       filename, strip_filename (g_module_error (), filename)));
      g_debug ("%s", mixprec_plugin_get_load_error (plugin)->message);
      return g_steal_pointer (&plugin);
    }

  desc = plugin_describe (plugin, module, &error);
  if (desc == NULL || !plugin_init (plugin, desc, module, &error))
    {
      g_debug ("%s", error->message);
      _mixprec_plugin_set_load_error (plugin, g_steal_pointer (&error));
      /* Its features, if any were registered, are already gone. */
      g_module_close (module);
      return g_steal_pointer (&plugin);
    }

  g_module_make_resident (module);
  g_debug ("%s: loaded plugin '%s' with %u features", filename, name,
           _mixprec_plugin_peek_features (plugin)->len);
  return g_steal_pointer (&plugin);
}

MixprecPlugin *
_mixprec_plugin_load_builtin (void)
{
  const MixprecPluginDesc *desc = _mixprec_builtin_get_desc ();
  g_autoptr(GError) error = NULL;
  MixprecPlugin *plugin = _mixprec_plugin_new (NULL, desc->name);

  _mixprec_plugin_set_description (plugin, desc);
  /* The built-in features pass the same checks as a plugin file's; failing
   * them is a bug of the library, reported like any plugin's failure. */
  if (!plugin_init (plugin, desc, NULL, &error))
    _mixprec_plugin_set_load_error (plugin, g_steal_pointer (&error));
  return plugin;
}
