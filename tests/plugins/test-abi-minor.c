/* test-abi-minor.c — a plugin built for a newer minor revision of the plugin
 * ABI than the library's: it may use fields this library does not know. */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_abi_minor_get_desc (void);

static int
abi_minor_init (MixprecPluginHostV1 *host,
                char                *errbuf,
                size_t               errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR + 1,
  .name = "test-abi-minor",
  .init = abi_minor_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_abi_minor_get_desc (void)
{
  return &desc;
}
