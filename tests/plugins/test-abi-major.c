/* test-abi-major.c — a plugin built for a future major plugin ABI: refused
 * before its init() runs. */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_abi_major_get_desc (void);

static int
abi_major_init (MixprecPluginHostV1 *host,
                char                *errbuf,
                size_t               errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR + 1,
  .abi_minor = 0,
  .name = "test-abi-major",
  .init = abi_major_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_abi_major_get_desc (void)
{
  return &desc;
}
