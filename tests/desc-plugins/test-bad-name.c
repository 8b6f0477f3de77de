/* test-bad-name.c — a plugin whose description's name holds a terminal
 * escape sequence: printed as it is, it would drive the user's terminal. */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_bad_name_get_desc (void);

static int
bad_name_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  (void) host;
  (void) errbuf;
  (void) errbuf_len;
  return MIXPREC_PLUGIN_OK;
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-bad\033[2Jname",
  .init = bad_name_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_bad_name_get_desc (void)
{
  return &desc;
}
