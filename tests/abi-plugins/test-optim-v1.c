/* test-optim-v1.c — an optimizer plugin built against the frozen ABI 1.0
 * header (mixprec-plugin-abi-1.0.h), not the library's: it registers a
 * MixprecOptimizerV1 through register_optimizer, as every plugin released
 * before MixprecOptimizerV2 does, and must keep loading and stepping
 * through the library's V1 shim.
 *
 * "sgdv1" is torch.optim.SGD with momentum and weight decay (dampening 0,
 * no Nesterov), written as the in-tree sgd's scalar kernel writes it
 * (plugins/optim-sgd/sgd-scalar.c) so that tests/test-registry.c can
 * compare the two bit for bit. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mixprec-plugin-abi-1.0.h"

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_optim_v1_get_desc (void);

enum { HP_LR, HP_MOMENTUM, HP_WEIGHT_DECAY, N_HPARAMS };

static const MixprecHParamSpecV1 sgdv1_hparams[N_HPARAMS] = {
  [HP_LR] = { "lr", "base learning rate", MIXPREC_HPARAM_DOUBLE, 1e-3, 0, 1e30, { 0 } },
  [HP_MOMENTUM] = { "momentum", "momentum factor", MIXPREC_HPARAM_DOUBLE, 0.9, 0, 1, { 0 } },
  [HP_WEIGHT_DECAY] = { "weight_decay", "L2 penalty added to the gradient",
                        MIXPREC_HPARAM_DOUBLE, 0, 0, 1e30, { 0 } },
};

static const char *const sgdv1_states[1] = { "momentum_buffer" };

/* Nearest-even bfloat16 of a finite or infinite float; NaN stays NaN. */
static uint16_t
bf16_rne (float v)
{
  uint32_t bits;

  memcpy (&bits, &v, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t) ((bits >> 16) | 0x40);
  return (uint16_t) ((bits + 0x7FFFu + ((bits >> 16) & 1)) >> 16);
}

static int
sgdv1_step (const MixprecOptimizerStepV1 *args,
            float                        *master,
            const void                   *grad,
            float *const                 *states,
            void                         *working,
            size_t                        n,
            char                         *errbuf,
            size_t                        errbuf_len)
{
  float wd, momentum, neg_lr;

  if (args == NULL || args->struct_size < sizeof *args)
    {
      snprintf (errbuf, errbuf_len, "sgdv1 needs a MixprecOptimizerStepV1");
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  if (args->grad_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT32 || master == NULL ||
      (working != NULL && args->working_dtype != MIXPREC_PLUGIN_DTYPE_BFLOAT16) ||
      args->rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN)
    {
      snprintf (errbuf, errbuf_len, "sgdv1 takes float32 gradients and masters and writes "
                "bfloat16 working copies to nearest even only");
      return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
    }
  if (n > 0 && (grad == NULL || states == NULL || states[0] == NULL))
    {
      snprintf (errbuf, errbuf_len, "sgdv1: a buffer is NULL");
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  wd = (float) args->hparams[HP_WEIGHT_DECAY];
  momentum = (float) args->hparams[HP_MOMENTUM];
  neg_lr = (float) -args->lr;
  for (size_t i = 0; i < n; i++)
    {
      float p = master[i];
      float g = ((const float *) grad)[i] * args->grad_factor;
      float *buf = states[0] + i;

      g = fmaf (wd, p, g);
      *buf = args->step == 1 ? g : fmaf (1.0f, g, momentum * *buf);
      p = fmaf (neg_lr, *buf, p);
      master[i] = p;
      if (working != NULL)
        ((uint16_t *) working)[i] = bf16_rne (p);
    }
  return MIXPREC_PLUGIN_OK;
}

static const MixprecOptimizerV1 sgdv1 = {
  .name = "sgdv1",
  .device = "cpu",
  .rank = 1,
  .description = "SGD with momentum, built against plugin ABI 1.0",
  .hparams = sgdv1_hparams,
  .n_hparams = N_HPARAMS,
  .n_state_slots = 1,
  .state_names = sgdv1_states,
  .step = sgdv1_step,
};

static int
optim_v1_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  if (host->struct_size < offsetof (MixprecPluginHostV1, register_optimizer) + sizeof host->register_optimizer ||
      host->register_optimizer == NULL)
    {
      snprintf (errbuf, errbuf_len, "the host table has no register_optimizer");
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  return host->register_optimizer (host, &sgdv1, errbuf, errbuf_len);
}

static const MixprecPluginDesc desc = {
  MIXPREC_PLUGIN_ABI_VERSION_MAJOR, MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  "test-optim-v1", "an optimizer plugin of plugin ABI 1.0 (MixprecOptimizerV1)",
  "1.0.0", "LGPL-2.1-or-later", "libmixprec tests", optim_v1_init, { NULL },
};

const MixprecPluginDesc *
mixprec_plugin_test_optim_v1_get_desc (void)
{
  return &desc;
}
