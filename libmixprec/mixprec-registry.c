/* mixprec-registry.c — MixprecRegistry: walks the plugin search path, loads
 * each plugin file once, and answers "which feature serves this name on
 * this device". */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <glib/gstdio.h>

#include "mixprec.h"
#include "mixprec-registry-private.h"

/**
 * MixprecRegistry:
 *
 * The plugins found on the plugin search path and the features they
 * registered.
 *
 * The search path is every directory in the `MIXPREC_PLUGIN_PATH`
 * environment variable (separated by colons, in order), then the system
 * plugin directories: those in `MIXPREC_PLUGIN_SYSTEM_PATH` when that
 * variable is set (an empty value means none), otherwise the directory
 * libmixprec was installed with (`$libdir/mixprec-1.0`) — or, when this
 * libmixprec is the uninstalled one of a build tree (it was loaded from
 * that tree's `libmixprec/.libs/`), the tree's `plugins/` folder instead,
 * so that the tools, the examples and scripts run from a build tree find
 * the plugins built with them and never mix in installed ones.
 *
 * Each directory is searched recursively, in byte order of the names, for
 * files called `mixprec-NAME.so`; directory links are followed, loops are
 * not. The first file with a given NAME is the plugin of that name: later
 * files with the same NAME are ignored, even when the first one fails to
 * load. A file that is not a loadable module, exports no entry point, was
 * built for another plugin ABI, or whose init() fails is skipped and kept
 * in mixprec_registry_get_failures() with the reason.
 *
 * A registry that includes the system directories (the default registry
 * does) also holds the features compiled into libmixprec, as the plugin
 * "builtin" listed first: the `local` communicator of a single process.
 * A plugin file called `mixprec-builtin.so` is ignored there.
 *
 * A registry never changes after it is created, so one may be used from
 * several threads at once.
 *
 * Since: 1.0
 */
struct _MixprecRegistry
{
  GObject parent_instance;

  GStrv search_path;
  GPtrArray *plugins;           /* loaded, in search order */
  GPtrArray *failures;          /* not loaded, in search order */
  GPtrArray *features;          /* of the loaded plugins, in search order */
};

G_DEFINE_FINAL_TYPE (MixprecRegistry, mixprec_registry, G_TYPE_OBJECT)

/* State of one scan. */
typedef struct
{
  MixprecRegistry *registry;
  GHashTable *names;            /* plugin names already claimed */
  GHashTable *visited;          /* "dev:inode" of directories entered */
} Scan;

static void
mixprec_registry_finalize (GObject *object)
{
  MixprecRegistry *self = MIXPREC_REGISTRY (object);

  g_strfreev (self->search_path);
  g_ptr_array_unref (self->plugins);
  g_ptr_array_unref (self->failures);
  g_ptr_array_unref (self->features);

  G_OBJECT_CLASS (mixprec_registry_parent_class)->finalize (object);
}

static void
mixprec_registry_class_init (MixprecRegistryClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->finalize = mixprec_registry_finalize;
}

static void
mixprec_registry_init (MixprecRegistry *self)
{
  self->plugins = g_ptr_array_new_with_free_func (g_object_unref);
  self->failures = g_ptr_array_new_with_free_func (g_object_unref);
  self->features = g_ptr_array_new_with_free_func (g_object_unref);
}

/* ------------------------------------------------------------ scanning */

/* Takes @plugin, loaded or failed. */
static void
add_plugin (MixprecRegistry *self,
            MixprecPlugin   *plugin)
{
  if (mixprec_plugin_is_loaded (plugin))
    {
      GPtrArray *features = _mixprec_plugin_peek_features (plugin);

      for (guint i = 0; i < features->len; i++)
        g_ptr_array_add (self->features, g_object_ref (g_ptr_array_index (features, i)));
      g_ptr_array_add (self->plugins, plugin);
    }
  else
    g_ptr_array_add (self->failures, plugin);
}

static void
scan_candidate (Scan        *scan,
                const gchar *filename,
                const gchar *name)
{
  if (g_hash_table_contains (scan->names, name))
    {
      g_debug ("%s: ignored: plugin '%s' was already found earlier in the search path",
               filename, name);
      return;
    }
  g_hash_table_add (scan->names, g_strdup (name));

  add_plugin (scan->registry, _mixprec_plugin_load (filename, name));
}

static gint
compare_names (gconstpointer a,
               gconstpointer b)
{
  return strcmp (*(const gchar * const *) a, *(const gchar * const *) b);
}

static void
scan_directory (Scan          *scan,
                const gchar   *dirname,
                const GStatBuf *st)
{
  g_autofree gchar *key = g_strdup_printf ("%ju:%ju", (uintmax_t) st->st_dev,
                                           (uintmax_t) st->st_ino);
  g_autoptr(GDir) dir = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) entries = g_ptr_array_new_with_free_func (g_free);
  const gchar *entry;

  if (!g_hash_table_add (scan->visited, g_steal_pointer (&key)))
    {
      g_debug ("%s: already searched (a link back into the search path)", dirname);
      return;
    }

  dir = g_dir_open (dirname, 0, &error);
  if (dir == NULL)
    {
      g_debug ("plugin directory skipped: %s", error->message);
      return;
    }
  while ((entry = g_dir_read_name (dir)) != NULL)
    g_ptr_array_add (entries, g_strdup (entry));
  g_ptr_array_sort (entries, compare_names);

  for (guint i = 0; i < entries->len; i++)
    {
      const gchar *base = g_ptr_array_index (entries, i);
      g_autofree gchar *path = g_build_filename (dirname, base, NULL);
      g_autofree gchar *name = NULL;
      GStatBuf child;

      if (g_stat (path, &child) != 0)
        continue;               /* a dangling link */
      if (S_ISDIR (child.st_mode))
        scan_directory (scan, path, &child);
      else if (S_ISREG (child.st_mode) && (name = _mixprec_plugin_name_from_filename (base)) != NULL)
        scan_candidate (scan, path, name);
    }
}

/* An element of the search path: a directory, or one plugin file. */
static void
scan_path (Scan        *scan,
           const gchar *path)
{
  GStatBuf st;

  if (g_stat (path, &st) != 0)
    {
      g_debug ("%s: not searched for plugins: %s", path, g_strerror (errno));
      return;
    }
  if (S_ISDIR (st.st_mode))
    scan_directory (scan, path, &st);
  else
    {
      g_autofree gchar *name = _mixprec_plugin_name_from_filename (path);

      if (name != NULL)
        scan_candidate (scan, path, name);
      else
        {
          g_autofree gchar *base = g_path_get_basename (path);
          MixprecPlugin *plugin = _mixprec_plugin_new (path, base);

          _mixprec_plugin_set_load_error (plugin,
              g_error_new (MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
                           "%s: not a plugin file name: a plugin named NAME is a file "
                           "called mixprec-NAME.so", path));
          g_ptr_array_add (scan->registry->failures, plugin);
        }
    }
}

static void
append_path_list (GStrvBuilder *builder,
                  const gchar  *list)
{
  g_auto(GStrv) dirs = g_strsplit (list, G_SEARCHPATH_SEPARATOR_S, -1);

  for (guint i = 0; dirs[i] != NULL; i++)
    if (dirs[i][0] != '\0')
      g_strv_builder_add (builder, dirs[i]);
}

/* Whether this copy of libmixprec is the uninstalled one of the build tree
 * it was compiled in: the shared object holding this function lies in that
 * tree's libmixprec/.libs (the same directory once links are resolved).
 * An installed copy, or the code linked statically into a program, lies
 * elsewhere. */
static gboolean
library_is_uninstalled (void)
{
#if defined(MIXPREC_UNINSTALLED_LIBDIR) && defined(MIXPREC_UNINSTALLED_PLUGIN_DIR)
  static gsize answer = 0;

  if (g_once_init_enter (&answer))
    {
      gboolean uninstalled = FALSE;
      Dl_info info;

      if (dladdr ((const void *) library_is_uninstalled, &info) != 0 && info.dli_fname != NULL)
        {
          g_autofree gchar *dir = g_path_get_dirname (info.dli_fname);
          g_autofree gchar *real_dir = realpath (dir, NULL);
          g_autofree gchar *real_build = realpath (MIXPREC_UNINSTALLED_LIBDIR, NULL);

          uninstalled = real_dir != NULL && real_build != NULL
                        && strcmp (real_dir, real_build) == 0;
        }
      g_once_init_leave (&answer, uninstalled ? 2 : 1);
    }
  return answer == 2;
#else
  return FALSE;
#endif
}

/* The system part of the search path when MIXPREC_PLUGIN_SYSTEM_PATH is
 * not set: the build tree's plugins for an uninstalled library, else the
 * installed plugin directory. */
static const gchar *
default_system_path (void)
{
#ifdef MIXPREC_UNINSTALLED_PLUGIN_DIR
  if (library_is_uninstalled ())
    return MIXPREC_UNINSTALLED_PLUGIN_DIR;
#endif
  return MIXPREC_PLUGIN_DIR;
}

static MixprecRegistry *
registry_new_scanned (GStrvBuilder *builder,
                      gboolean      include_system)
{
  MixprecRegistry *self = g_object_new (MIXPREC_TYPE_REGISTRY, NULL);
  Scan scan = { self, NULL, NULL };

  if (include_system)
    {
      const gchar *system = g_getenv ("MIXPREC_PLUGIN_SYSTEM_PATH");

      append_path_list (builder, system != NULL ? system : default_system_path ());
    }
  self->search_path = g_strv_builder_end (builder);
  {
    g_autofree gchar *joined = g_strjoinv (G_SEARCHPATH_SEPARATOR_S, self->search_path);

    g_debug ("plugin search path: %s", joined);
  }

  scan.names = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  scan.visited = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  if (include_system)
    {
      MixprecPlugin *builtin = _mixprec_plugin_load_builtin ();

      g_hash_table_add (scan.names, g_strdup (mixprec_plugin_get_name (builtin)));
      add_plugin (self, builtin);
    }
  for (guint i = 0; self->search_path[i] != NULL; i++)
    scan_path (&scan, self->search_path[i]);
  g_hash_table_unref (scan.names);
  g_hash_table_unref (scan.visited);

  g_debug ("plugin registry: %u plugins, %u features, %u failures",
           self->plugins->len, self->features->len, self->failures->len);
  return self;
}

/* ------------------------------------------------------------ public API */

/**
 * mixprec_registry_get_default:
 *
 * Returns the registry of this process, built from `MIXPREC_PLUGIN_PATH`
 * and the system plugin directories the first time it is asked for (from
 * any thread), and kept until the process exits.
 *
 * Returns: (transfer none): the default registry
 *
 * Since: 1.0
 */
MixprecRegistry *
mixprec_registry_get_default (void)
{
  static MixprecRegistry *default_registry = NULL;

  if (g_once_init_enter (&default_registry))
    {
      g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();
      const gchar *path = g_getenv ("MIXPREC_PLUGIN_PATH");

      if (path != NULL)
        append_path_list (builder, path);
      g_once_init_leave (&default_registry, registry_new_scanned (builder, TRUE));
    }
  return default_registry;
}

/**
 * mixprec_registry_new_for_paths:
 * @paths: (array zero-terminated=1) (nullable) (element-type filename):
 *   directories to search, in order (a plugin file may be named instead of
 *   a directory); `MIXPREC_PLUGIN_PATH` is not read
 * @include_system: whether to search the system plugin directories after
 *   @paths and to include the features built into libmixprec (see
 *   #MixprecRegistry)
 *
 * Creates a registry of the plugins in @paths, for tools and tests that
 * must not depend on the environment. The plugins are loaded before this
 * function returns.
 *
 * Returns: (transfer full): a new registry
 *
 * Since: 1.0
 */
MixprecRegistry *
mixprec_registry_new_for_paths (const gchar * const *paths,
                                gboolean             include_system)
{
  g_autoptr(GStrvBuilder) builder = g_strv_builder_new ();

  for (guint i = 0; paths != NULL && paths[i] != NULL; i++)
    if (paths[i][0] != '\0')
      g_strv_builder_add (builder, paths[i]);
  return registry_new_scanned (builder, include_system);
}

/**
 * mixprec_registry_get_search_path:
 * @self: a #MixprecRegistry
 *
 * Returns: (transfer none) (array zero-terminated=1) (element-type filename):
 *   the directories and files searched, in order
 *
 * Since: 1.0
 */
const gchar * const *
mixprec_registry_get_search_path (MixprecRegistry *self)
{
  g_return_val_if_fail (MIXPREC_IS_REGISTRY (self), NULL);

  return (const gchar * const *) self->search_path;
}

static GList *
list_from_array (GPtrArray *array)
{
  GList *list = NULL;

  for (guint i = array->len; i > 0; i--)
    list = g_list_prepend (list, g_object_ref (g_ptr_array_index (array, i - 1)));
  return list;
}

/**
 * mixprec_registry_get_plugins:
 * @self: a #MixprecRegistry
 *
 * Returns: (transfer full) (element-type MixprecPlugin): the plugins that
 *   loaded, in search order. Free with `g_list_free_full (list, g_object_unref)`.
 *
 * Since: 1.0
 */
GList *
mixprec_registry_get_plugins (MixprecRegistry *self)
{
  g_return_val_if_fail (MIXPREC_IS_REGISTRY (self), NULL);

  return list_from_array (self->plugins);
}

/**
 * mixprec_registry_get_features:
 * @self: a #MixprecRegistry
 *
 * Returns: (transfer full) (element-type MixprecFeature): the features of
 *   every loaded plugin, in search order and then registration order.
 *   Free with `g_list_free_full (list, g_object_unref)`.
 *
 * Since: 1.0
 */
GList *
mixprec_registry_get_features (MixprecRegistry *self)
{
  g_return_val_if_fail (MIXPREC_IS_REGISTRY (self), NULL);

  return list_from_array (self->features);
}

/**
 * mixprec_registry_get_failures:
 * @self: a #MixprecRegistry
 *
 * The plugin files that were found but not loaded; for each,
 * mixprec_plugin_get_load_error() says why.
 *
 * Returns: (transfer full) (element-type MixprecPlugin): the plugins that
 *   failed, in search order. Free with `g_list_free_full (list, g_object_unref)`.
 *
 * Since: 1.0
 */
GList *
mixprec_registry_get_failures (MixprecRegistry *self)
{
  g_return_val_if_fail (MIXPREC_IS_REGISTRY (self), NULL);

  return list_from_array (self->failures);
}

static gchar *
failures_note (MixprecRegistry *self)
{
  if (self->failures->len == 0)
    return g_strdup ("");
  return g_strdup_printf ("; %u plugin file%s failed to load (run mixprec-inspect to see why)",
                          self->failures->len, self->failures->len == 1 ? "" : "s");
}

static gchar *
search_path_string (MixprecRegistry *self)
{
  g_autofree gchar *joined = NULL;

  if (self->search_path[0] == NULL)
    return g_strdup ("the plugin search path is empty");
  joined = g_strjoinv (G_SEARCHPATH_SEPARATOR_S, self->search_path);
  return g_strdup_printf ("searched: %s", joined);
}

/**
 * mixprec_registry_find_plugin:
 * @self: a #MixprecRegistry
 * @name: a plugin name, e.g. "optim-adamw"
 * @error: return location for a #GError
 *
 * Returns: (transfer full): the loaded plugin called @name, or %NULL with
 *   @error set to %MIXPREC_PLUGIN_ERROR_NOT_FOUND (saying why the plugin
 *   did not load, when it was found but failed)
 *
 * Since: 1.0
 */
MixprecPlugin *
mixprec_registry_find_plugin (MixprecRegistry  *self,
                              const gchar      *name,
                              GError          **error)
{
  g_autoptr(GString) loaded = NULL;

  g_return_val_if_fail (MIXPREC_IS_REGISTRY (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  for (guint i = 0; i < self->plugins->len; i++)
    {
      MixprecPlugin *plugin = g_ptr_array_index (self->plugins, i);

      if (g_str_equal (mixprec_plugin_get_name (plugin), name))
        return g_object_ref (plugin);
    }
  for (guint i = 0; i < self->failures->len; i++)
    {
      MixprecPlugin *plugin = g_ptr_array_index (self->failures, i);

      if (g_str_equal (mixprec_plugin_get_name (plugin), name))
        {
          g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND,
                       "plugin '%s' failed to load: %s",
                       name, mixprec_plugin_get_load_error (plugin)->message);
          return NULL;
        }
    }

  loaded = g_string_new (NULL);
  for (guint i = 0; i < self->plugins->len; i++)
    g_string_append_printf (loaded, "%s%s", i > 0 ? ", " : "",
                            mixprec_plugin_get_name (g_ptr_array_index (self->plugins, i)));
  if (self->plugins->len > 0)
    g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND,
                 "no plugin '%s'; loaded plugins: %s", name, loaded->str);
  else
    {
      g_autofree gchar *searched = search_path_string (self);

      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND,
                   "no plugin '%s'; no plugins loaded (%s)", name, searched);
    }
  return NULL;
}

static gboolean
feature_matches (MixprecFeature     *feature,
                 MixprecFeatureKind  kind,
                 const gchar        *name,
                 const gchar        *device)
{
  return mixprec_feature_get_kind (feature) == kind &&
         (name == NULL || g_str_equal (mixprec_feature_get_name (feature), name)) &&
         (device == NULL || g_str_equal (mixprec_feature_get_device (feature), device));
}

/* "adamw (cpu), sgd (cpu)": each name and device once, sorted. */
static gchar *
available_features (MixprecRegistry    *self,
                    MixprecFeatureKind  kind)
{
  g_autoptr(GPtrArray) items = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GString) out = g_string_new (NULL);

  for (guint i = 0; i < self->features->len; i++)
    {
      MixprecFeature *f = g_ptr_array_index (self->features, i);
      gchar *item;

      if (!feature_matches (f, kind, NULL, NULL))
        continue;
      item = g_strdup_printf ("%s (%s)", mixprec_feature_get_name (f),
                              mixprec_feature_get_device (f));
      if (g_ptr_array_find_with_equal_func (items, item, g_str_equal, NULL))
        g_free (item);
      else
        g_ptr_array_add (items, item);
    }
  g_ptr_array_sort (items, compare_names);
  for (guint i = 0; i < items->len; i++)
    g_string_append_printf (out, "%s%s", i > 0 ? ", " : "",
                            (const gchar *) g_ptr_array_index (items, i));
  return g_string_free (g_steal_pointer (&out), FALSE);
}

/**
 * mixprec_registry_find_feature:
 * @self: a #MixprecRegistry
 * @kind: the kind of feature
 * @name: the feature's name, e.g. "adamw"
 * @device: (nullable): the device, e.g. "cpu"; %NULL for any device
 * @error: return location for a #GError
 *
 * Finds the feature of @kind called @name for @device. When several
 * plugins register one, the feature with the highest rank wins; among
 * equal ranks, the one found first on the search path.
 *
 * Returns: (transfer full): the feature, or %NULL with @error set to
 *   %MIXPREC_PLUGIN_ERROR_NOT_FOUND, whose message lists the features of
 *   @kind that are available
 *
 * Since: 1.0
 */
MixprecFeature *
mixprec_registry_find_feature (MixprecRegistry     *self,
                               MixprecFeatureKind   kind,
                               const gchar         *name,
                               const gchar         *device,
                               GError             **error)
{
  MixprecFeature *best = NULL;
  g_autoptr(GEnumClass) kinds = NULL;
  g_autofree gchar *available = NULL;
  g_autofree gchar *failures = NULL;
  g_autofree gchar *wanted = NULL;
  const GEnumValue *kind_value;

  g_return_val_if_fail (MIXPREC_IS_REGISTRY (self), NULL);
  g_return_val_if_fail (name != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  for (guint i = 0; i < self->features->len; i++)
    {
      MixprecFeature *f = g_ptr_array_index (self->features, i);

      if (feature_matches (f, kind, name, device) &&
          (best == NULL || mixprec_feature_get_rank (f) > mixprec_feature_get_rank (best)))
        best = f;
    }
  if (best != NULL)
    return g_object_ref (best);

  kinds = g_type_class_ref (MIXPREC_TYPE_FEATURE_KIND);
  kind_value = g_enum_get_value (kinds, kind);
  g_return_val_if_fail (kind_value != NULL, NULL);

  wanted = device != NULL
    ? g_strdup_printf ("no %s '%s' for device '%s'", kind_value->value_nick, name, device)
    : g_strdup_printf ("no %s '%s' for any device", kind_value->value_nick, name);
  available = available_features (self, kind);
  failures = failures_note (self);
  if (available[0] != '\0')
    g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND,
                 "%s; available: %s%s", wanted, available, failures);
  else
    {
      g_autofree gchar *searched = search_path_string (self);

      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND,
                   "%s; no plugin provides any %s (%s)%s",
                   wanted, kind_value->value_nick, searched, failures);
    }
  return NULL;
}
