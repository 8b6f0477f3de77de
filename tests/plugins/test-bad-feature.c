/* test-bad-feature.c — a plugin that registers an optimizer without a step
 * function. Its init() reports success only when the registration was
 * refused with a message, so a plugin that ignores the refusal must still
 * be refused as a whole. */
#include <stdio.h>

#include <mixprec/mixprec-plugin-abi.h>

static const MixprecOptimizerV1 badopt = {
  .name = "badopt",
  .device = "cpu",
  .rank = 100,
  .step = NULL,
};

static int
bad_feature_init (MixprecPluginHostV1 *host,
                  char                *errbuf,
                  size_t               errbuf_len)
{
  int status;

  errbuf[0] = '\0';
  status = host->register_optimizer (host, &badopt, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT && errbuf[0] != '\0')
    return MIXPREC_PLUGIN_OK;
  snprintf (errbuf, errbuf_len, "register_optimizer() returned %d and no message "
            "for an optimizer without a step function", status);
  return MIXPREC_PLUGIN_ERR_RUNTIME;
}

MIXPREC_PLUGIN_DEFINE (test_bad_feature, "test-bad-feature", NULL,
                       bad_feature_init, NULL, NULL, NULL)
