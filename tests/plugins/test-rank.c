/* test-rank.c — a valid test plugin found after test-good: a higher-ranked
 * "testopt" for cpu (it must win although found later), a lower-ranked
 * "otheropt" (it must lose although found later), and "testopt" for
 * another device. */
#include <stddef.h>

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

static const MixprecOptimizerV1 optimizers[] = {
  { .name = "testopt", .device = "cpu", .rank = 200,
    .description = "the higher-ranked testopt, found later", .step = noop_step },
  { .name = "otheropt", .device = "cpu", .rank = 10,
    .description = "the lower-ranked otheropt, found later", .step = noop_step },
  { .name = "testopt", .device = "testdev", .rank = 5,
    .description = "testopt for another device", .step = noop_step },
};

static int
rank_init (MixprecPluginHostV1 *host,
           char                *errbuf,
           size_t               errbuf_len)
{
  for (size_t i = 0; i < sizeof optimizers / sizeof optimizers[0]; i++)
    {
      int status = host->register_optimizer (host, &optimizers[i], errbuf, errbuf_len);

      if (status != MIXPREC_PLUGIN_OK)
        return status;
    }
  return MIXPREC_PLUGIN_OK;
}

MIXPREC_PLUGIN_DEFINE (test_rank, "test-rank", "features that compete with test-good's by rank",
                       rank_init, "1.0", "LGPL-2.1-or-later", "libmixprec tests")
