/* sgd-schema.c — what every "sgd" feature shares whatever its device: the
 * hyper-parameter schema, the state slot and prepare(), which turns the
 * hyper-parameters into fp32 constants once per call. */
#include "config.h"

#include "sgd-kernels.h"

enum {
  HP_LR,
  HP_MOMENTUM,
  HP_DAMPENING,
  HP_WEIGHT_DECAY,
  HP_NESTEROV,
  HP_N
};

G_STATIC_ASSERT (HP_N == SGD_N_HPARAMS);

const MixprecHParamSpecV1 _mixprec_sgd_hparams[SGD_N_HPARAMS] = {
  [HP_LR] = { "lr", "base learning rate (each step uses the scheduled rate)",
              MIXPREC_HPARAM_DOUBLE, 1e-3, 0, DBL_MAX },
  [HP_MOMENTUM] = { "momentum", "momentum factor; 0 keeps no buffer",
                    MIXPREC_HPARAM_DOUBLE, 0, 0, DBL_MAX },
  [HP_DAMPENING] = { "dampening", "the gradient enters the buffer times 1 - dampening",
                     MIXPREC_HPARAM_DOUBLE, 0, 0, 1 },
  [HP_WEIGHT_DECAY] = { "weight_decay", "L2 penalty added to the gradient",
                        MIXPREC_HPARAM_DOUBLE, 0, 0, DBL_MAX },
  [HP_NESTEROV] = { "nesterov", "Nesterov momentum (needs momentum > 0 and dampening 0)",
                    MIXPREC_HPARAM_BOOL, 0, 0, 1 },
};

/* Always allocated, so that turning momentum on later needs no new state;
 * untouched while momentum is 0. */
const char *const _mixprec_sgd_states[1] = { "momentum_buffer" };

int
_mixprec_sgd_prepare (const MixprecOptimizerStepV1 *args,
                      float                        *c,
                      char                         *errbuf,
                      size_t                        errbuf_len)
{
  const double *h = args->hparams;
  int nesterov = h[HP_NESTEROV] != 0;

  /* torch.optim.SGD's rule, for the same reason: without a buffer that
   * keeps the whole gradient, the look-ahead is not Nesterov's. */
  if (nesterov && (h[HP_MOMENTUM] <= 0 || h[HP_DAMPENING] != 0))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer sgd: nesterov needs momentum > 0 and dampening 0, "
                                "got momentum %g and dampening %g.",
                                h[HP_MOMENTUM], h[HP_DAMPENING]);
  c[SGD_MODE] = h[HP_MOMENTUM] == 0 ? SGD_PLAIN : args->step == 1 ? SGD_FIRST : SGD_MOMENTUM;
  c[SGD_NESTEROV] = nesterov;
  c[SGD_WEIGHT_DECAY] = (float) h[HP_WEIGHT_DECAY];
  c[SGD_MOMENTUM_COEF] = (float) h[HP_MOMENTUM];
  c[SGD_ONE_MINUS_DAMPENING] = (float) (1 - h[HP_DAMPENING]);
  c[SGD_NEG_LR] = (float) -args->lr;
  return MIXPREC_PLUGIN_OK;
}

unsigned
_mixprec_sgd_states_used (const float *c)
{
  return (SgdMode) c[SGD_MODE] == SGD_PLAIN ? 0u : 1u;
}
