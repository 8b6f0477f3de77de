/* test-bad-feature.c — a plugin that registers an optimizer without a step
 * function. Its init() reports success only when the registration was
 * refused with a message, so a plugin that ignores the refusal must still
 * be refused as a whole. */
#include <stdio.h>

#include <mixprec/mixprec-plugin.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_bad_feature_get_desc (void);

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

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-bad-feature",
  .init = bad_feature_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_bad_feature_get_desc (void)
{
  return &desc;
}
