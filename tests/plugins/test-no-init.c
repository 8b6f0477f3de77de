/* test-no-init.c — a plugin description without its required init(). */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_no_init_get_desc (void);

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-no-init",
  .init = NULL,
};

const MixprecPluginDesc *
mixprec_plugin_test_no_init_get_desc (void)
{
  return &desc;
}
