/* test-no-entry.c — a plugin whose entry point is misspelt: the file
 * mixprec-test-no-entry.so must export mixprec_plugin_test_no_entry_get_desc,
 * dashes turned into underscores, and exports something else. */
#include <stddef.h>

#include <mixprec/mixprec-plugin.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_noentry_get_desc (void);

static int
no_entry_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-no-entry",
  .init = no_entry_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_noentry_get_desc (void)
{
  return &desc;
}
