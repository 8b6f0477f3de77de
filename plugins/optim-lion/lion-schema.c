/* lion-schema.c — what every "lion" feature shares whatever its device:
 * the hyper-parameter schema, the state slot and prepare(), which turns
 * the hyper-parameters into fp32 constants once per call. */
#include "config.h"

#include "lion-kernels.h"

enum {
  HP_LR,
  HP_BETA1,
  HP_BETA2,
  HP_WEIGHT_DECAY,
  HP_N
};

G_STATIC_ASSERT (HP_N == LION_N_HPARAMS);

const MixprecHParamSpecV1 _mixprec_lion_hparams[LION_N_HPARAMS] = {
  [HP_LR] = { "lr", "base learning rate (each step uses the scheduled rate)",
              MIXPREC_HPARAM_DOUBLE, 1e-4, 0, DBL_MAX },
  [HP_BETA1] = { "beta1", "interpolation between momentum and gradient for the update's sign",
                 MIXPREC_HPARAM_DOUBLE, 0.9, 0, 1 },
  [HP_BETA2] = { "beta2", "decay of the momentum",
                 MIXPREC_HPARAM_DOUBLE, 0.99, 0, 1 },
  [HP_WEIGHT_DECAY] = { "weight_decay", "decoupled decay: p -= lr * weight_decay * p",
                        MIXPREC_HPARAM_DOUBLE, 0, 0, DBL_MAX },
};

const char *const _mixprec_lion_states[1] = { "exp_avg" };

int
_mixprec_lion_prepare (const MixprecOptimizerStepV1 *args,
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
