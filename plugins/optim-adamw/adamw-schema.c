/* adamw-schema.c — what every "adamw" feature shares whatever its device:
 * the hyper-parameter schema, the state slots and prepare(), which turns
 * the hyper-parameters into fp32 constants (computed in double, rounded
 * once) so that the cpu and cuda kernels start from the same bits. */
#include "config.h"

#include <math.h>

#include "adamw-kernels.h"

enum {
  HP_LR,
  HP_BETA1,
  HP_BETA2,
  HP_EPS,
  HP_WEIGHT_DECAY,
  HP_BIAS_CORRECTION,
  HP_ADAM_W_MODE,
  HP_N
};

G_STATIC_ASSERT (HP_N == ADAMW_N_HPARAMS);

const MixprecHParamSpecV1 _mixprec_adamw_hparams[ADAMW_N_HPARAMS] = {
  [HP_LR] = { "lr", "base learning rate (each step uses the scheduled rate)",
              MIXPREC_HPARAM_DOUBLE, 1e-3, 0, DBL_MAX },
  [HP_BETA1] = { "beta1", "decay of the first moment (betas[0]); below 1",
                 MIXPREC_HPARAM_DOUBLE, 0.9, 0, 1 },
  [HP_BETA2] = { "beta2", "decay of the second moment (betas[1]); below 1",
                 MIXPREC_HPARAM_DOUBLE, 0.999, 0, 1 },
  [HP_EPS] = { "eps", "added to the bias-corrected root of the second moment",
               MIXPREC_HPARAM_DOUBLE, 1e-8, 0, DBL_MAX },
  [HP_WEIGHT_DECAY] = { "weight_decay", "decoupled decay (AdamW) or L2 penalty (Adam)",
                        MIXPREC_HPARAM_DOUBLE, 0, 0, DBL_MAX },
  [HP_BIAS_CORRECTION] = { "bias_correction", "divide the moments by 1 - beta^t",
                           MIXPREC_HPARAM_BOOL, 1, 0, 1 },
  [HP_ADAM_W_MODE] = { "adam_w_mode", "decoupled weight decay (AdamW); false: L2 (Adam)",
                       MIXPREC_HPARAM_BOOL, 1, 0, 1 },
};

const char *const _mixprec_adamw_states[2] = { "exp_avg", "exp_avg_sq" };

int
_mixprec_adamw_prepare (const MixprecOptimizerStepV1 *args,
                        float                        *c,
                        char                         *errbuf,
                        size_t                        errbuf_len)
{
  const double *h = args->hparams;
  double lr = args->lr, wd = h[HP_WEIGHT_DECAY];
  double bc1 = 1, bc2 = 1;

  if (h[HP_BETA1] >= 1 || h[HP_BETA2] >= 1)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer adamw: beta1 and beta2 must be below 1, got %g and %g.",
                                h[HP_BETA1], h[HP_BETA2]);
  if (h[HP_BIAS_CORRECTION] != 0)
    {
      bc1 = 1 - pow (h[HP_BETA1], (double) args->step);
      bc2 = 1 - pow (h[HP_BETA2], (double) args->step);
    }
  c[ADAMW_BETA1] = (float) h[HP_BETA1];
  c[ADAMW_ONE_MINUS_BETA1] = (float) (1 - h[HP_BETA1]);
  c[ADAMW_BETA2] = (float) h[HP_BETA2];
  c[ADAMW_ONE_MINUS_BETA2] = (float) (1 - h[HP_BETA2]);
  c[ADAMW_EPS] = (float) h[HP_EPS];
  c[ADAMW_RSQRT_BC2] = (float) (1 / sqrt (bc2));
  c[ADAMW_NEG_STEP_SIZE] = (float) (-lr / bc1);
  c[ADAMW_L2_DECAY] = h[HP_ADAM_W_MODE] != 0 ? 0.0f : (float) wd;
  c[ADAMW_NEG_LR_DECAY] = h[HP_ADAM_W_MODE] != 0 ? (float) (-lr * wd) : 0.0f;
  return MIXPREC_PLUGIN_OK;
}
