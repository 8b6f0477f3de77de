/* test-init-fails.c — a plugin whose init() registers a valid optimizer,
 * then fails with a message: the plugin is refused and the optimizer it
 * registered must not be used. */
#include <stdio.h>

#include <mixprec/mixprec-plugin.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_init_fails_get_desc (void);

static int
noop_step (const MixprecOptimizerStepV1 *args,
           float                        *master,
           const void                   *grad,
           float *const                 *states,
           void                         *working,
           size_t                        n,
           char                         *errbuf,
           size_t                        errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecOptimizerV1 failopt = {
  .name = "failopt",
  .device = "cpu",
  .rank = 100,
  .step = noop_step,
};

static int
failing_init (MixprecPluginHostV1 *host,
              char                *errbuf,
              size_t               errbuf_len)
{
  int status = host->register_optimizer (host, &failopt, errbuf, errbuf_len);

  if (status != MIXPREC_PLUGIN_OK)
    return status;
  snprintf (errbuf, errbuf_len, "the test accelerator is not present");
  return MIXPREC_PLUGIN_ERR_RUNTIME;
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-init-fails",
  .init = failing_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_init_fails_get_desc (void)
{
  return &desc;
}
