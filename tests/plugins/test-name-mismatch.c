/* test-name-mismatch.c — a plugin whose description names another plugin
 * than its file name (mixprec-test-name-mismatch.so). */
#include <stddef.h>

#include <mixprec/mixprec-plugin-abi.h>

static int
mismatch_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

MIXPREC_PLUGIN_DEFINE (test_name_mismatch, "test-renamed", NULL,
                       mismatch_init, NULL, NULL, NULL)
