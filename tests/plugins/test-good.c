/* test-good.c — a valid test plugin: optimizer "testopt" (cpu, rank 100), a
 * momentum SGD whose schema and arithmetic tests/test-registry.c checks
 * against its own expectations, and "otheropt" (cpu, rank 20). */
#include <math.h>
#include <stdio.h>

#include <mixprec/mixprec-plugin-abi.h>

static const MixprecHParamSpecV1 testopt_hparams[] = {
  { .name = "lr", .description = "step size", .type = MIXPREC_HPARAM_DOUBLE,
    .default_value = 1e-3, .min_value = 0.0, .max_value = HUGE_VAL },
  { .name = "momentum", .description = "weight of the previous update", .type = MIXPREC_HPARAM_DOUBLE,
    .default_value = 0.9, .min_value = 0.0, .max_value = 1.0 },
  { .name = "nesterov", .description = "look-ahead momentum", .type = MIXPREC_HPARAM_BOOL,
    .default_value = 0.0, .min_value = 0.0, .max_value = 1.0 },
  { .name = "warmup", .description = "steps before momentum applies", .type = MIXPREC_HPARAM_INT,
    .default_value = 10.0, .min_value = 0.0, .max_value = 1000.0 },
};

static const char *const testopt_states[] = { "momentum_buffer" };

/* buf = momentum * buf + g;  master -= lr * buf, with g = grad * grad_factor.
 * FP32 gradients only, so that the unsupported path can be tested too. */
static int
testopt_step (const MixprecOptimizerStepV1 *args,
              float                        *master,
              const void                   *grad,
              float *const                 *states,
              void                         *working,
              size_t                        n,
              char                         *errbuf,
              size_t                        errbuf_len)
{
  const float *g = grad;
  float momentum = (float) args->hparams[1];

  if (args->grad_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT32)
    {
      snprintf (errbuf, errbuf_len, "testopt takes float32 gradients only, got dtype %d",
                (int) args->grad_dtype);
      return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
    }
  for (size_t i = 0; i < n; i++)
    {
      states[0][i] = momentum * states[0][i] + g[i] * args->grad_factor;
      master[i] -= (float) args->lr * states[0][i];
    }
  (void) working;
  return MIXPREC_PLUGIN_OK;
}

static const MixprecOptimizerV1 testopt = {
  .name = "testopt",
  .device = "cpu",
  .rank = 100,
  .description = "momentum SGD for the registry tests",
  .hparams = testopt_hparams,
  .n_hparams = sizeof testopt_hparams / sizeof testopt_hparams[0],
  .n_state_slots = 1,
  .state_names = testopt_states,
  .step = testopt_step,
};

static const MixprecOptimizerV1 otheropt = {
  .name = "otheropt",
  .device = "cpu",
  .rank = 20,
  .description = "the higher-ranked otheropt, found first",
  .step = testopt_step,
};

static int
good_init (MixprecPluginHostV1 *host,
           char                *errbuf,
           size_t               errbuf_len)
{
  int status = host->register_optimizer (host, &testopt, errbuf, errbuf_len);

  if (status != MIXPREC_PLUGIN_OK)
    return status;
  status = host->register_optimizer (host, &otheropt, errbuf, errbuf_len);
  /* For /registry/plugin-log: the logger works during init() already.
   * The control character must not reach a terminal. */
  if (status == MIXPREC_PLUGIN_OK)
    MIXPREC_PLUGIN_LOG (MIXPREC_PLUGIN_LOG_INFO, "registered %s and %s\a", testopt.name,
                        otheropt.name);
  return status;
}

MIXPREC_PLUGIN_DEFINE (test_good, "test-good", "a valid plugin for the registry tests",
                       good_init, "1.2.3", "LGPL-2.1-or-later", "libmixprec tests")
