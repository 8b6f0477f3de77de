/* test-heap-desc.c — a plugin whose description is well formed but lives
 * on the heap, not in the plugin's static data as the ABI asks: the host
 * cannot tell it from a stray pointer and must refuse it. */
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec-plugin-abi.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_heap_desc_get_desc (void);

static int
heap_init (MixprecPluginHostV1 *host,
           char                *errbuf,
           size_t               errbuf_len)
{
  (void) host;
  (void) errbuf;
  (void) errbuf_len;
  return MIXPREC_PLUGIN_OK;
}

static MixprecPluginDesc *desc;

/* The host closes a plugin it refused; free the description then, so that
 * LeakSanitizer builds stay quiet. */
__attribute__ ((destructor)) static void
heap_desc_free (void)
{
  free (desc);
}

const MixprecPluginDesc *
mixprec_plugin_test_heap_desc_get_desc (void)
{
  if (desc == NULL)
    {
      desc = calloc (1, sizeof *desc);
      if (desc == NULL)
        return NULL;
      desc->abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
      desc->abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
      desc->name = "test-heap-desc";
      desc->init = heap_init;
    }
  return desc;
}
