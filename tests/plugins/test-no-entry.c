/* test-no-entry.c — a plugin whose entry point is misspelt: the file
 * mixprec-test-no-entry.so must export mixprec_plugin_test_no_entry_get_desc,
 * dashes turned into underscores, and exports something else. */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

static int
no_entry_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

MIXPREC_PLUGIN_DEFINE (test_noentry, "test-no-entry", NULL,
                       no_entry_init, NULL, NULL, NULL)
