/* test-null-desc.c — a plugin whose entry point returns no description. */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_null_desc_get_desc (void);

const MixprecPluginDesc *
mixprec_plugin_test_null_desc_get_desc (void)
{
  return NULL;
}
