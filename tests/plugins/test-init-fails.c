/* test-init-fails.c — a plugin whose init() registers a valid optimizer,
 * then fails with a message: the plugin is refused and the optimizer it
 * registered must not be used. */
#include <stdio.h>

#include <mixprec/mixprec-plugin-abi.h>

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

MIXPREC_PLUGIN_DEFINE (test_init_fails, "test-init-fails", NULL,
                       failing_init, NULL, NULL, NULL)
