/* optim-sgd.c — the "sgd" optimizer for the cpu device: torch.optim.SGD's
 * rule (momentum, dampening, Nesterov, L2 weight decay) in one fused pass
 * per range. */
#include "config.h"

#include "sgd-kernels.h"

enum {
  HP_LR,
  HP_MOMENTUM,
  HP_DAMPENING,
  HP_WEIGHT_DECAY,
  HP_NESTEROV,
};

static const MixprecHParamSpecV1 sgd_hparams[] = {
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
static const char *const sgd_states[] = { "momentum_buffer" };

static int
sgd_prepare (const MixprecOptimizerStepV1 *args,
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

_MIXPREC_OPTIM_PLUGIN_DEFINE (optim_sgd, "optim-sgd",
                              "Fused SGD step for the cpu device (AVX2/FMA or scalar, same results)",
                              "sgd",
                              "SGD with momentum, dampening, Nesterov and weight decay "
                              "(torch.optim.SGD semantics) fused with unscaling and the working-copy write",
                              sgd_hparams, sgd_states, sgd_prepare,
                              _mixprec_sgd_run_scalar, _mixprec_sgd_run_avx2)
