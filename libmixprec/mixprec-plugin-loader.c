/* mixprec-plugin-loader.c — opens one plugin file and walks it through the
 * ABI's checks: entry point, ABI version, description, init(), and every
 * feature init() registers. Any failure leaves a plugin object that says
 * why, never a warning or a crash. */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-plugin-compat-private.h"
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

/* The kind, name and device of an upgraded vtable (a device's device is
 * its own name). */
static void
vtable_identity (const _MixprecVTable  *vtable,
                 const gchar          **kind,
                 const gchar          **name,
                 const gchar          **device)
{
  switch (vtable->kind)
    {
    case MIXPREC_FEATURE_KIND_OPTIMIZER:
      *kind = "optimizer";
      *name = vtable->optimizer.name;
      *device = vtable->optimizer.device;
      break;
    case MIXPREC_FEATURE_KIND_COMM:
      *kind = "comm";
      *name = vtable->comm.base.name;
      *device = vtable->comm.base.device;
      break;
    default:
      *kind = "device";
      *name = *device = vtable->device.base.base.name;
      break;
    }
}

/* Whether init() already registered a feature of this kind, name and device. */
static gboolean
is_registered_twice (LoadContext           *ctx,
                     const _MixprecVTable  *vtable,
                     GError               **error)
{
  const gchar *kind, *name, *device;

  vtable_identity (vtable, &kind, &name, &device);
  for (guint i = 0; i < ctx->features->len; i++)
    {
      MixprecFeature *f = g_ptr_array_index (ctx->features, i);

      if (mixprec_feature_get_kind (f) == vtable->kind &&
          g_str_equal (mixprec_feature_get_name (f), name) &&
          g_str_equal (mixprec_feature_get_device (f), device))
        {
          g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
                       "%s '%s' (%s) is registered twice", kind, name, device);
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

/* Every register_* entry of the host table ends here, with its row of
 * the registration table (mixprec-plugin-compat.c): the vtable is checked
 * and upgraded to the newest revision of its kind, then kept. */
int
_mixprec_plugin_host_register (MixprecPluginHostV1        *host,
                               const _MixprecRegistration *registration,
                               gconstpointer               registered,
                               char                       *errbuf,
                               size_t                      errbuf_len)
{
  LoadContext *ctx;
  _MixprecVTable vtable;
  GError *error = NULL;

  if (host == NULL || host->host_data == NULL)
    {
      g_autofree gchar *message =
        g_strdup_printf ("%s() needs the host table that init() received",
                         _mixprec_registration_get_function (registration));

      write_errbuf (errbuf, errbuf_len, message);
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  ctx = host->host_data;
  if (!_mixprec_plugin_compat_upgrade (registration, registered, &vtable, &error) ||
      is_registered_twice (ctx, &vtable, &error))
    return refuse (ctx, error, errbuf, errbuf_len);

  g_ptr_array_add (ctx->features, _mixprec_feature_new (&vtable, ctx->plugin));
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
    .log = _mixprec_plugin_log,
    .log_data = _mixprec_plugin_log_data_new (mixprec_plugin_get_name (plugin)),
  };
  int status;

  _mixprec_plugin_compat_fill_host (&host);

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
      /* The reason is the plugin's text: shown escaped, so that control
       * characters in it cannot drive the user's terminal. */
      g_autofree gchar *reason = g_strescape (errbuf, NULL);

      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_INIT_FAILED,
                   "%s: plugin '%s' failed to initialise: %s (%s, status %d)",
                   filename, desc->name,
                   errbuf[0] != '\0' ? reason : "its init() gave no reason",
                   _mixprec_plugin_status_to_string (status), status);
      return FALSE;
    }

  _mixprec_plugin_set_loaded (plugin, module, features);
  return TRUE;
}

/* ------------------------------------------------------------ reading a description */

/* The longest text field of a description the loader reads (name,
 * description, version, license, origin), without its NUL. */
#define DESC_STRING_MAX 4096

/* Copies @n bytes at @src into @dst when every one of them is mapped
 * readable. The kernel does the reading, so an unmapped or unreadable
 * address is an EFAULT answer rather than a SIGSEGV in the library.
 * process_vm_readv() on this process needs no privilege, but a seccomp
 * filter may forbid it; then a pipe does the same: write() reads the
 * bytes in the kernel too. */
static gboolean
read_memory (gpointer      dst,
             gconstpointer src,
             gsize         n)
{
  struct iovec local = { dst, n };
  struct iovec remote = { (gpointer) src, n };
  ssize_t got;
  int fds[2];
  gboolean ok;

  got = process_vm_readv (getpid (), &local, 1, &remote, 1, 0);
  if (got == (ssize_t) n)
    return TRUE;
  if (got >= 0 || (errno != ENOSYS && errno != EPERM))
    return FALSE;

  g_assert (n <= PIPE_BUF);     /* one write() and one read() of the whole */
  if (pipe2 (fds, O_CLOEXEC) != 0)
    return FALSE;
  ok = write (fds[1], src, n) == (ssize_t) n && read (fds[0], dst, n) == (ssize_t) n;
  close (fds[0]);
  close (fds[1]);
  return ok;
}

/* Whether @p lies inside the loaded object whose base address is @base
 * (the plugin's own module): dladdr() knows the address range each loaded
 * object was mapped at. */
static gboolean
is_inside_module (gconstpointer p,
                  gconstpointer base)
{
  Dl_info info;

  return p != NULL && dladdr (p, &info) != 0 && info.dli_fbase == base;
}

/* A copy of the NUL-terminated text at @p, a field of the description of
 * the plugin whose module starts at @base: NULL with @error set unless it
 * lies in that module, ends within DESC_STRING_MAX bytes and is printable
 * UTF-8 (what a terminal shows as it is). @what names the field. */
static gchar *
read_desc_string (const gchar   *filename,
                  const gchar   *what,
                  const gchar   *p,
                  gconstpointer  base,
                  GError       **error)
{
  g_autoptr(GString) text = g_string_new (NULL);
  const gsize page = (gsize) sysconf (_SC_PAGESIZE);
  gboolean ended = FALSE;

  if (!is_inside_module (p, base))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the %s of the plugin description points to %p, outside the "
                   "plugin's own memory", filename, what, (gconstpointer) p);
      return NULL;
    }
  /* In pieces that never cross a page boundary: the text may end just
   * before an unreadable page. */
  while (!ended && text->len <= DESC_STRING_MAX)
    {
      const gchar *at = p + text->len;
      gsize chunk = MIN (64, page - ((guintptr) at % page));
      gchar buf[64];

      if (!is_inside_module (at, base) || !read_memory (buf, at, chunk))
        {
          g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                       "%s: the %s of the plugin description runs out of the plugin's "
                       "readable memory before its end", filename, what);
          return NULL;
        }
      for (gsize i = 0; i < chunk && !ended; i++)
        if (buf[i] == '\0')
          ended = TRUE;
        else
          g_string_append_c (text, buf[i]);
    }
  if (!ended)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the %s of the plugin description is longer than %d bytes "
                   "(is it text at all?)", filename, what, DESC_STRING_MAX);
      return NULL;
    }
  if (!g_utf8_validate_len (text->str, text->len, NULL))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the %s of the plugin description is not UTF-8 text", filename, what);
      return NULL;
    }
  for (const gchar *c = text->str; *c != '\0'; c = g_utf8_next_char (c))
    if (!g_unichar_isprint (g_utf8_get_char (c)))
      {
        g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                     "%s: the %s of the plugin description is not printable text "
                     "(character U+%04X at byte %td)", filename, what,
                     (guint) g_utf8_get_char (c), c - text->str);
        return NULL;
      }
  return g_string_free (g_steal_pointer (&text), FALSE);
}

/* The texts of a description, copied out of the plugin once checked. */
typedef struct
{
  gchar *name;
  gchar *description;
  gchar *version;
  gchar *license;
  gchar *origin;
} DescStrings;

static void
desc_strings_clear (DescStrings *strings)
{
  g_free (strings->name);
  g_free (strings->description);
  g_free (strings->version);
  g_free (strings->license);
  g_free (strings->origin);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (DescStrings, desc_strings_clear)

/* Copies the optional text field @p into @out (NULL stays NULL). */
static gboolean
read_optional_string (const gchar   *filename,
                      const gchar   *what,
                      const gchar   *p,
                      gconstpointer  base,
                      gchar        **out,
                      GError       **error)
{
  if (p == NULL)
    return TRUE;
  *out = read_desc_string (filename, what, p, base, error);
  return *out != NULL;
}

/* Everything before init(): entry point, ABI version and description.
 * A plugin's get_desc() may return anything, so the description is never
 * read in place: it must lie inside the plugin's own module (static data,
 * as the ABI asks; a heap, stack or stray pointer is refused), and it is
 * copied out through read_memory() into @copy, the two version fields
 * first, the whole structure only once they are known. Its texts are
 * checked and copied into @strings, which @copy then points to. The
 * module's code (constructors, get_desc) has already run by then: these
 * checks catch a broken plugin, they do not make a hostile one safe; the
 * trust checks on the file (mixprec-registry.c) are for that. */
static gboolean
plugin_describe (MixprecPlugin      *plugin,
                 GModule            *module,
                 MixprecPluginDesc  *copy,
                 DescStrings        *strings,
                 GError            **error)
{
  const gchar *filename = mixprec_plugin_get_filename (plugin);
  const gchar *name = mixprec_plugin_get_name (plugin);
  g_autofree gchar *symbol = g_strdup_printf ("mixprec_plugin_%s_get_desc", name);
  MixprecPluginGetDescFunc get_desc = NULL;
  const MixprecPluginDesc *desc;
  Dl_info info;
  gconstpointer base;
  struct {
    unsigned abi_major;
    unsigned abi_minor;
  } header;

  G_STATIC_ASSERT (G_STRUCT_OFFSET (MixprecPluginDesc, abi_major) == 0);
  G_STATIC_ASSERT (G_STRUCT_OFFSET (MixprecPluginDesc, abi_minor) == sizeof (unsigned));

  g_strdelimit (symbol, "-", '_');
  if (!g_module_symbol (module, symbol, (gpointer *) &get_desc) || get_desc == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
                   "%s: not a libmixprec plugin: it does not export the entry point %s()",
                   filename, symbol);
      return FALSE;
    }
  /* The module the entry point lives in: with RTLD_LOCAL the symbol is the
   * plugin's own, so this is the plugin's base address. */
  if (dladdr ((gconstpointer) get_desc, &info) == 0)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
                   "%s: the entry point %s() lies in no loaded object", filename, symbol);
      return FALSE;
    }
  base = info.dli_fbase;

  desc = get_desc ();
  if (desc == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: %s() returned no plugin description", filename, symbol);
      return FALSE;
    }
  if (!is_inside_module (desc, base) ||
      !is_inside_module ((const gchar *) desc + sizeof header - 1, base) ||
      !read_memory (&header, desc, sizeof header))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: %s() returned %p, which is not readable memory of the plugin "
                   "(a stray, heap or stack pointer?); the description must be static "
                   "data of the plugin", filename, symbol, (gconstpointer) desc);
      return FALSE;
    }

  /* Only the two version fields are common to every ABI revision; nothing
   * else of the description is read before they are checked. */
  _mixprec_plugin_set_abi (plugin, header.abi_major, header.abi_minor);
  if (header.abi_major != MIXPREC_PLUGIN_ABI_MAJOR || header.abi_minor > MIXPREC_PLUGIN_ABI_MINOR)
    {
      g_autofree gchar *supported = MIXPREC_PLUGIN_ABI_MINOR == 0
        ? g_strdup_printf ("%d.0", MIXPREC_PLUGIN_ABI_MAJOR)
        : g_strdup_printf ("%d.0 to %d.%d", MIXPREC_PLUGIN_ABI_MAJOR,
                           MIXPREC_PLUGIN_ABI_MAJOR, MIXPREC_PLUGIN_ABI_MINOR);

      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_ABI_MISMATCH,
                   "%s: built for plugin ABI %u.%u, this libmixprec supports %s; "
                   "rebuild the plugin against this libmixprec's <mixprec/mixprec-plugin-abi.h>",
                   filename, header.abi_major, header.abi_minor, supported);
      return FALSE;
    }

  /* MixprecPluginDesc has no size field; its size is the one every
   * revision of ABI 1 shares, and all of it must be the plugin's. */
  if (!is_inside_module ((const gchar *) desc + sizeof *desc - 1, base) ||
      !read_memory (copy, desc, sizeof *desc))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the plugin description at %p is cut short: a description of "
                   "plugin ABI %u.%u is %zu bytes, and not all of them lie in the "
                   "plugin's readable memory", filename, (gconstpointer) desc,
                   header.abi_major, header.abi_minor, sizeof *desc);
      return FALSE;
    }

  if (copy->name == NULL || copy->init == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the plugin description has no %s; both name and init are required",
                   filename, copy->name == NULL ? "name" : "init function");
      return FALSE;
    }
  strings->name = read_desc_string (filename, "name", copy->name, base, error);
  if (strings->name == NULL)
    return FALSE;
  if (!g_str_equal (strings->name, name))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the plugin calls itself '%s' but its file name says '%s'; "
                   "a plugin named NAME must be installed as mixprec-NAME.so",
                   filename, strings->name, name);
      return FALSE;
    }
  /* Calling a stray pointer would crash; code outside the module is not
   * the plugin's init(). */
  if (!is_inside_module ((gconstpointer) copy->init, base))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the init function of the plugin description points to %p, "
                   "outside the plugin", filename, (gconstpointer) copy->init);
      return FALSE;
    }
  if (!_mixprec_pointers_are_null (copy->reserved, G_N_ELEMENTS (copy->reserved)))
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
                   "%s: the reserved fields of the plugin description are not zero "
                   "(was the plugin built against another mixprec-plugin.h?)", filename);
      return FALSE;
    }
  if (!read_optional_string (filename, "description text", copy->description, base,
                             &strings->description, error) ||
      !read_optional_string (filename, "version", copy->version, base,
                             &strings->version, error) ||
      !read_optional_string (filename, "license", copy->license, base,
                             &strings->license, error) ||
      !read_optional_string (filename, "origin", copy->origin, base,
                             &strings->origin, error))
    return FALSE;

  copy->name = strings->name;
  copy->description = strings->description;
  copy->version = strings->version;
  copy->license = strings->license;
  copy->origin = strings->origin;
  _mixprec_plugin_set_description (plugin, copy);
  return TRUE;
}

MixprecPlugin *
_mixprec_plugin_load (const gchar *filename,
                      const gchar *name)
{
  g_autoptr(MixprecPlugin) plugin = NULL;
  g_autoptr(GError) error = NULL;
  g_auto(DescStrings) strings = { NULL, };
  MixprecPluginDesc desc;
  GModule *module;

  g_return_val_if_fail (filename != NULL, NULL);
  g_return_val_if_fail (name != NULL, NULL);

  plugin = _mixprec_plugin_new (filename, name);

  if (!plugin_name_is_valid (name))
    {
      /* Escaped: a file name may hold any byte but '/' and NUL. */
      g_autofree gchar *shown = g_strescape (name, NULL);

      _mixprec_plugin_set_load_error (plugin,
          g_error_new (MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
                       "%s: '%s' is not a plugin name (only letters, digits, '-' and '_'), "
                       "so the file can have no entry point", filename, shown));
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

  if (!plugin_describe (plugin, module, &desc, &strings, &error) ||
      !plugin_init (plugin, &desc, module, &error))
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
