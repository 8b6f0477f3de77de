/* optim-lion.c — the "lion" optimizer for the cpu device: Lion's
 * sign-of-interpolation update with decoupled weight decay, in one fused
 * pass per range. */
#include "config.h"

#include "lion-kernels.h"

enum {
  HP_LR,
  HP_BETA1,
  HP_BETA2,
  HP_WEIGHT_DECAY,
};

static const MixprecHParamSpecV1 lion_hparams[] = {
  [HP_LR] = { "lr", "base learning rate (each step uses the scheduled rate)",
              MIXPREC_HPARAM_DOUBLE, 1e-4, 0, DBL_MAX },
  [HP_BETA1] = { "beta1", "interpolation between momentum and gradient for the update's sign",
                 MIXPREC_HPARAM_DOUBLE, 0.9, 0, 1 },
  [HP_BETA2] = { "beta2", "decay of the momentum",
                 MIXPREC_HPARAM_DOUBLE, 0.99, 0, 1 },
  [HP_WEIGHT_DECAY] = { "weight_decay", "decoupled decay: p -= lr * weight_decay * p",
                        MIXPREC_HPARAM_DOUBLE, 0, 0, DBL_MAX },
};

static const char *const lion_states[] = { "exp_avg" };

static int
lion_prepare (const MixprecOptimizerStepV1 *args,
              float                        *c,
              char                         *errbuf,
              size_t                        errbuf_len)
{
  const double *h = args->hparams;

  c[LION_BETA1] = (float) h[HP_BETA1];
  c[LION_ONE_MINUS_BETA1] = (float) (1 - h[HP_BETA1]);
  c[LION_BETA2] = (float) h[HP_BETA2];
  c[LION_ONE_MINUS_BETA2] = (float) (1 - h[HP_BETA2]);
  c[LION_NEG_LR] = (float) -args->lr;
  c[LION_NEG_LR_DECAY] = (float) (-args->lr * h[HP_WEIGHT_DECAY]);
  return MIXPREC_PLUGIN_OK;
}

_MIXPREC_OPTIM_PLUGIN_DEFINE (optim_lion, "optim-lion",
                              "Fused Lion step for the cpu device (AVX2/FMA or scalar, same results)",
                              "lion",
                              "Lion (EvoLved Sign Momentum) with decoupled weight decay, fused with "
                              "unscaling and the working-copy write",
                              lion_hparams, lion_states, lion_prepare,
                              _mixprec_lion_run_scalar, _mixprec_lion_run_avx2)
