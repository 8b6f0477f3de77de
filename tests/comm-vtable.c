/* comm-vtable.c — see comm-vtable.h. */
#include "config.h"

#include <glib.h>
#include <gmodule.h>

#include "comm-vtable.h"

static const MixprecCommV1 *registered;

static int
capture_comm (MixprecPluginHostV1 *host,
              const MixprecCommV1 *comm,
              char                *errbuf,
              size_t               errbuf_len)
{
  registered = comm;
  return MIXPREC_PLUGIN_OK;
}

/* Revision 2 begins with the whole revision 1. */
static int
capture_comm_v2 (MixprecPluginHostV1 *host,
                 const MixprecCommV2 *comm,
                 char                *errbuf,
                 size_t               errbuf_len)
{
  registered = &comm->base;
  return MIXPREC_PLUGIN_OK;
}

const MixprecCommV1 *
test_comm_plugin_vtable (const char *plugin)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *file = g_strdup_printf ("mixprec-%s.so", plugin);
  g_autofree gchar *path = NULL;
  g_autofree gchar *symbol = NULL;
  MixprecPluginGetDescFunc get_desc = NULL;
  MixprecPluginHostV1 host = { 0 };
  char errbuf[256] = "";
  GModule *module;

  /* A test program uses one comm plugin; its module stays loaded. */
  if (registered != NULL)
    return registered;
  g_assert_nonnull (top);
  path = g_build_filename (top, "plugins", ".libs", file, NULL);
  module = g_module_open (path, G_MODULE_BIND_LOCAL);
  if (module == NULL)
    g_error ("%s", g_module_error ());
  g_module_make_resident (module);
  symbol = g_strdelimit (g_strdup_printf ("mixprec_plugin_%s_get_desc", plugin), "-", '_');
  g_assert_true (g_module_symbol (module, symbol, (gpointer *) &get_desc));
  host.struct_size = sizeof host;
  host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
  host.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
  host.register_comm = capture_comm;
  host.register_comm_v2 = capture_comm_v2;
  g_assert_cmpint (get_desc ()->init (&host, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_nonnull (registered);
  return registered;
}
