/* test-short-desc.c — a plugin whose description starts with valid ABI
 * version fields in its last bytes of memory and so is cut short: the
 * rest of the structure lies past the end of the module. */
#include <stdint.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_short_desc_get_desc (void);

/* The linker's mark for the end of this module's data (and .bss); hidden,
 * so that it is this module's and not the program's. */
extern char _end[] __attribute__ ((visibility ("hidden")));

/* The only .bss object of the plugin, so the last one before _end. Its
 * own section keeps AddressSanitizer from putting a red zone after it. */
__attribute__ ((section (".bss.mixprec_tail"))) static unsigned tail[16];

const MixprecPluginDesc *
mixprec_plugin_test_short_desc_get_desc (void)
{
  uintptr_t header = (uintptr_t) _end - 2 * sizeof (unsigned);
  size_t i;

  /* Write only into this plugin's own array; should the linker have put
   * something else last, return no description (the test then fails,
   * saying that this plugin could not be built as intended). */
  if (header < (uintptr_t) tail || header + 2 * sizeof (unsigned) > (uintptr_t) (tail + 16) ||
      (header - (uintptr_t) tail) % sizeof (unsigned) != 0)
    return 0;
  i = (header - (uintptr_t) tail) / sizeof (unsigned);
  tail[i] = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
  tail[i + 1] = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
  return (const MixprecPluginDesc *) (void *) &tail[i];
}
