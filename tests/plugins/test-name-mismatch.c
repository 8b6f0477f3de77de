/* test-name-mismatch.c — a plugin whose description names another plugin
 * than its file name (mixprec-test-name-mismatch.so). */
#include <stddef.h>

#include <mixprec/mixprec-plugin.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_name_mismatch_get_desc (void);

static int
mismatch_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-renamed",
  .init = mismatch_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_name_mismatch_get_desc (void)
{
  return &desc;
}
