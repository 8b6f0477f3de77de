/* test-stack-desc.c — a plugin whose entry point returns the address of a
 * description on its own stack, gone once it returns. */
#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_stack_desc_get_desc (void);

/* volatile, so that the compiler neither warns about nor "fixes" the
 * dangling pointer this plugin means to return. */
static const MixprecPluginDesc *volatile escaped;

const MixprecPluginDesc *
mixprec_plugin_test_stack_desc_get_desc (void)
{
  MixprecPluginDesc local = {
    .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
    .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
    .name = "test-stack-desc",
  };

  escaped = &local;
  return escaped;
}
