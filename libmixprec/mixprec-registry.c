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
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
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
 * Both variables are read with secure_getenv(): a setuid, setgid or
 * capability-raised program ignores them. Their entries must be absolute
 * paths; a relative one is ignored with a warning naming it and the
 * variable. (A relative path a program passes to
 * mixprec_registry_new_for_paths() is taken against the current
 * directory.)
 *
 * Each directory is searched one level deep, in byte order of the names,
 * for files called `mixprec-NAME.so`; its subdirectories are not searched,
 * with one exception: its `.libs` folder, libtool's folder of uninstalled
 * modules, is searched after the directory's own files, so that a build
 * tree's `plugins/` folder may be named as it is.
 *
 * Nothing is loaded from a place others could have written to: a
 * directory, and a plugin file (for a link: its target and the target's
 * directory), must be owned by root or by the user running the program
 * (geteuid()) and be writable by its owner only. Anything else is skipped
 * with a warning naming it and the reason, and is never opened; a skipped
 * file is also kept in mixprec_registry_get_failures().
 *
 * The first file with a given NAME that loads is the plugin of that name:
 * later files with the same NAME are ignored. A file that is not a
 * loadable module, exports no entry point, was built for another plugin
 * ABI, returns a description that is not valid static data of the plugin,
 * or whose init() fails is skipped and kept in
 * mixprec_registry_get_failures() with the reason; it does not claim its
 * NAME, so a working file of the same NAME later in the search path still
 * loads.
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
  GHashTable *names;            /* names of the plugins already loaded */
  GHashTable *visited;          /* real paths of the directories searched */
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

/* Why a plugin file or directory with status @st may not be trusted, or
 * NULL when it may: it must be owned by root or by the user this process
 * runs as, and writable by its owner alone. Anyone else who can write
 * it could make this process run their code. */
static gchar *
untrusted_reason (const struct stat *st)
{
  uid_t me = geteuid ();

  if (st->st_uid != 0 && st->st_uid != me)
    return g_strdup_printf ("it is owned by uid %u, neither root nor the user running "
                            "this program (uid %u)", (guint) st->st_uid, (guint) me);
  if ((st->st_mode & S_IWOTH) != 0)
    return g_strdup_printf ("it is writable by others (mode %04o)",
                            (guint) (st->st_mode & 07777));
  if ((st->st_mode & S_IWGRP) != 0)
    return g_strdup_printf ("it is writable by its group (mode %04o)",
                            (guint) (st->st_mode & 07777));
  return NULL;
}

/* Records a plugin file that is not opened: a warning, and a failure that
 * mixprec-inspect lists. It claims no name, so a trusted file of the same
 * name later in the search path still loads. */
static void
skip_untrusted_file (Scan        *scan,
                     const gchar *filename,
                     const gchar *name,
                     const gchar *reason)
{
  MixprecPlugin *plugin = _mixprec_plugin_new (filename, name);
  GError *error = g_error_new (MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_OPEN,
                               "%s: plugin file not opened: %s; a plugin file must be owned "
                               "by root or by the user running the program and writable "
                               "by its owner only", filename, reason);

  g_warning ("%s", error->message);
  _mixprec_plugin_set_load_error (plugin, error);
  g_ptr_array_add (scan->registry->failures, plugin);
}

/* Whether the directory at @path (not followed when it is a link) may be
 * trusted; warns naming it when not. */
static gboolean
directory_is_trusted (const gchar *path,
                      const gchar *what)
{
  g_autofree gchar *reason = NULL;
  struct stat st;

  if (lstat (path, &st) != 0)
    {
      g_debug ("%s: not searched for plugins: %s", path, g_strerror (errno));
      return FALSE;
    }
  if (!S_ISDIR (st.st_mode))
    {
      g_warning ("%s: %s skipped: it is not a directory", path, what);
      return FALSE;
    }
  reason = untrusted_reason (&st);
  if (reason != NULL)
    {
      g_warning ("%s: %s skipped: %s; a plugin directory must be owned by root or by "
                 "the user running the program and writable by its owner only",
                 path, what, reason);
      return FALSE;
    }
  return TRUE;
}

/* Checks the plugin file @filename before anything opens it as a module:
 * a link is resolved and its target's directory and the target itself are
 * checked; the file is opened without following links (O_NOFOLLOW) and
 * checked through that descriptor (fstat), so what is checked is the file
 * itself. Returns the reason it may not be loaded, or NULL. */
static gchar *
check_plugin_file (const gchar *filename)
{
  g_autofree gchar *target = NULL;
  g_autofree gchar *target_dir = NULL;
  g_autofree gchar *reason = NULL;
  struct stat st;
  int fd;

  if (lstat (filename, &st) != 0)
    return g_strdup_printf ("it cannot be examined: %s", g_strerror (errno));
  if (S_ISLNK (st.st_mode))
    {
      struct stat dir_st;

      target = realpath (filename, NULL);
      if (target == NULL)
        return g_strdup_printf ("it is a link that cannot be resolved: %s", g_strerror (errno));
      target_dir = g_path_get_dirname (target);
      if (stat (target_dir, &dir_st) != 0)
        return g_strdup_printf ("the directory of its target %s cannot be examined: %s",
                                target, g_strerror (errno));
      reason = untrusted_reason (&dir_st);
      if (reason != NULL)
        return g_strdup_printf ("it links to %s, whose directory %s is not trusted: %s",
                                target, target_dir, reason);
    }

  fd = open (target != NULL ? target : filename,
             O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return g_strdup_printf ("it cannot be opened: %s", g_strerror (errno));
  if (fstat (fd, &st) != 0)
    {
      int saved = errno;

      close (fd);
      return g_strdup_printf ("it cannot be examined: %s", g_strerror (saved));
    }
  close (fd);
  if (!S_ISREG (st.st_mode))
    return target != NULL ? g_strdup_printf ("it links to %s, which is not a regular file", target)
                          : g_strdup ("it is not a regular file");
  reason = untrusted_reason (&st);
  if (reason != NULL && target != NULL)
    return g_strdup_printf ("its target %s is not trusted: %s", target, reason);
  return g_steal_pointer (&reason);
}

static void
scan_candidate (Scan        *scan,
                const gchar *filename,
                const gchar *name)
{
  g_autofree gchar *untrusted = NULL;

  if (g_hash_table_contains (scan->names, name))
    {
      g_debug ("%s: ignored: plugin '%s' was already loaded from earlier in the search path",
               filename, name);
      return;
    }

  /* Never dlopen() a file that fails the checks: opening runs its code. */
  untrusted = check_plugin_file (filename);
  if (untrusted != NULL)
    {
      skip_untrusted_file (scan, filename, name, untrusted);
      return;
    }

  {
    MixprecPlugin *plugin = _mixprec_plugin_load (filename, name);

    /* Only a plugin that loaded owns its name: a broken file must not
     * hide a working one of the same name found later. */
    if (mixprec_plugin_is_loaded (plugin))
      g_hash_table_add (scan->names, g_strdup (name));
    add_plugin (scan->registry, plugin);
  }
}

static gint
compare_names (gconstpointer a,
               gconstpointer b)
{
  return strcmp (*(const gchar * const *) a, *(const gchar * const *) b);
}

/* libtool's folder of uninstalled shared objects: a build tree's
 * `plugins/` holds `.la` files and the modules sit in `plugins/.libs/`. */
#define LIBTOOL_OBJDIR ".libs"

/* Searches one directory, one level deep: the plugin files directly in
 * it, in byte order of their names. Subdirectories are not searched —
 * except, when @libtool_too, the `.libs` folder of a libtool build tree,
 * after the directory's own files (a fixed second level, not recursion).
 * The directory itself must be trusted. */
static void
scan_directory (Scan        *scan,
                const gchar *dirname,
                gboolean     libtool_too)
{
  g_autoptr(GDir) dir = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) entries = g_ptr_array_new_with_free_func (g_free);
  g_autofree gchar *real = realpath (dirname, NULL);
  g_autofree gchar *libtool_dir = NULL;
  const gchar *entry;

  /* A directory named twice (or a .libs reached as an entry of its own)
   * is searched once. */
  if (real == NULL || !g_hash_table_add (scan->visited, g_strdup (real)))
    {
      g_debug ("%s: already searched or gone", dirname);
      return;
    }
  if (!directory_is_trusted (real, "plugin directory"))
    return;

  dir = g_dir_open (real, 0, &error);
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
        {
          if (libtool_too && g_str_equal (base, LIBTOOL_OBJDIR))
            libtool_dir = g_steal_pointer (&path);
          else
            g_debug ("%s: not searched: plugin directories are searched one level deep", path);
        }
      else if (S_ISREG (child.st_mode) && (name = _mixprec_plugin_name_from_filename (base)) != NULL)
        scan_candidate (scan, path, name);
    }
  if (libtool_dir != NULL)
    scan_directory (scan, libtool_dir, FALSE);
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
    scan_directory (scan, path, TRUE);
  else
    {
      g_autofree gchar *name = _mixprec_plugin_name_from_filename (path);
      g_autofree gchar *dir = g_path_get_dirname (path);
      g_autofree gchar *real_dir = realpath (dir, NULL);

      /* A file named on its own is checked with its directory. */
      if (real_dir == NULL || !directory_is_trusted (real_dir, "directory of a plugin file"))
        return;
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
append_path (GStrvBuilder *builder,
             const gchar  *entry,
             const gchar  *variable)
{
  if (g_path_is_absolute (entry))
    g_strv_builder_add (builder, entry);
  else if (variable != NULL)
    g_warning ("%s: relative entry '%s' ignored: plugin directories must be absolute paths",
               variable, entry);
  else
    {
      g_autofree gchar *absolute = g_canonicalize_filename (entry, NULL);

      g_strv_builder_add (builder, absolute);
    }
}

/* Adds the absolute entries of the colon-separated @list, read from the
 * environment variable @variable (NULL: given by the program). A relative
 * entry would be resolved against whatever the current directory is, so
 * one from the environment is ignored with a warning; one a program
 * passes is made absolute against the current directory now. */
static void
append_path_list (GStrvBuilder *builder,
                  const gchar  *list,
                  const gchar  *variable)
{
  g_auto(GStrv) dirs = g_strsplit (list, G_SEARCHPATH_SEPARATOR_S, -1);

  for (guint i = 0; dirs[i] != NULL; i++)
    if (dirs[i][0] != '\0')
      append_path (builder, dirs[i], variable);
}

/* The plugins/ folder of the build tree this copy of libmixprec lies in,
 * or NULL for an installed copy. libtool leaves the uninstalled library in
 * TOP/libmixprec/.libs, and configure writes TOP/mixprec-uninstalled.pc;
 * the shared object holding this function (found with dladdr) must be
 * there and TOP must hold both that file and plugins/. The build tree is
 * found from the library's own location rather than a path compiled in,
 * so that the installed binary carries no build folder (reproducible
 * builds) and a moved build tree still finds its plugins. An installed
 * copy lies in a libdir, never in a .libs folder; a copy taken out of the
 * tree, or the code linked statically into a program, lies elsewhere. */
static gchar *
find_uninstalled_plugin_dir (void)
{
  Dl_info info;
  g_autofree gchar *file = NULL;
  g_autofree gchar *libs = NULL;
  g_autofree gchar *lib_base = NULL;
  g_autofree gchar *subdir = NULL;
  g_autofree gchar *subdir_base = NULL;
  g_autofree gchar *libs_base = NULL;
  g_autofree gchar *top = NULL;
  g_autofree gchar *pc = NULL;
  g_autofree gchar *plugins = NULL;

  if (dladdr ((const void *) find_uninstalled_plugin_dir, &info) == 0 || info.dli_fname == NULL)
    return NULL;
  /* A relative name (LD_LIBRARY_PATH=relative) is taken against the
   * current directory, as the loader took it moments ago. */
  file = g_canonicalize_filename (info.dli_fname, NULL);
  lib_base = g_path_get_basename (file);
  if (!g_str_has_prefix (lib_base, "libmixprec.so"))
    return NULL;
  libs = g_path_get_dirname (file);
  libs_base = g_path_get_basename (libs);
  subdir = g_path_get_dirname (libs);
  subdir_base = g_path_get_basename (subdir);
  if (strcmp (libs_base, ".libs") != 0 || strcmp (subdir_base, "libmixprec") != 0)
    return NULL;
  top = g_path_get_dirname (subdir);
  pc = g_build_filename (top, "mixprec-uninstalled.pc", NULL);
  plugins = g_build_filename (top, "plugins", NULL);
  if (!g_file_test (pc, G_FILE_TEST_IS_REGULAR) || !g_file_test (plugins, G_FILE_TEST_IS_DIR))
    return NULL;
  return g_steal_pointer (&plugins);
}

/* The system part of the search path when MIXPREC_PLUGIN_SYSTEM_PATH is
 * not set: the build tree's plugins for an uninstalled library, else the
 * installed plugin directory. */
static const gchar *
default_system_path (void)
{
  static gchar *uninstalled_plugin_dir = NULL;
  static gsize once = 0;

  if (g_once_init_enter (&once))
    {
      uninstalled_plugin_dir = find_uninstalled_plugin_dir ();
      g_once_init_leave (&once, 1);
    }
  return uninstalled_plugin_dir != NULL ? uninstalled_plugin_dir : MIXPREC_PLUGIN_DIR;
}

static MixprecRegistry *
registry_new_scanned (GStrvBuilder *builder,
                      gboolean      include_system)
{
  MixprecRegistry *self = g_object_new (MIXPREC_TYPE_REGISTRY, NULL);
  Scan scan = { self, NULL, NULL };

  if (include_system)
    {
      /* secure_getenv(): a setuid, setgid or capability-raised program
       * must not load code named by whoever started it. */
      const gchar *system = secure_getenv ("MIXPREC_PLUGIN_SYSTEM_PATH");

      if (system != NULL)
        append_path_list (builder, system, "MIXPREC_PLUGIN_SYSTEM_PATH");
      else
        append_path_list (builder, default_system_path (), NULL);
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
      const gchar *path = secure_getenv ("MIXPREC_PLUGIN_PATH");

      if (path != NULL)
        append_path_list (builder, path, "MIXPREC_PLUGIN_PATH");
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
      append_path (builder, paths[i], NULL);
  return registry_new_scanned (builder, include_system);
}

/**
 * mixprec_registry_get_search_path:
 * @self: a #MixprecRegistry
 *
 * Gives the directories and files the registry searched for plugins (from
 * `MIXPREC_PLUGIN_PATH`, then the system plugin directory).
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
 * Lists the plugins the registry loaded.
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
 * Lists the features of all loaded plugins.
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
 * Looks up a loaded plugin by name.
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
