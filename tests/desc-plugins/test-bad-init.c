/* test-bad-init.c — a plugin whose description's init function is a
 * stray pointer: calling it would crash the host. */
#include <stdint.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_bad_init_get_desc (void);

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-bad-init",
  .init = (int (*) (MixprecPluginHostV1 *, char *, size_t)) (uintptr_t) 64,
};

const MixprecPluginDesc *
mixprec_plugin_test_bad_init_get_desc (void)
{
  return &desc;
}
