/* test-bad-string.c — a plugin whose description is valid but for its
 * description text, a stray pointer. */
#include <stdint.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_bad_string_get_desc (void);

static int
bad_string_init (MixprecPluginHostV1 *host,
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
  .name = "test-bad-string",
  .description = (const char *) (uintptr_t) 16,
  .init = bad_string_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_bad_string_get_desc (void)
{
  return &desc;
}
