/* test-bad-ptr.c — a plugin whose entry point returns (void *) 1 instead
 * of a description: reading it in place would crash the host. */
#include <stdint.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_bad_ptr_get_desc (void);

const MixprecPluginDesc *
mixprec_plugin_test_bad_ptr_get_desc (void)
{
  return (const MixprecPluginDesc *) (uintptr_t) 1;
}
