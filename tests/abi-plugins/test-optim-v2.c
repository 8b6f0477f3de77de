/* test-optim-v2.c — an optimizer plugin of plugin ABI 1.1 that registers a
 * MixprecOptimizerV2 through register_optimizer_v2, as every plugin
 * released before MixprecOptimizerV3 does: the library must reach it
 * through its revision 2 shim with float32 and bfloat16 state, and refuse
 * any other representation before the plugin sees the call.
 *
 * "sgdv2" is plain momentum SGD (buf = momentum * buf + g; p -= lr * buf)
 * with its buffer in float32 or bfloat16 (nearest even). Written against
 * the library's header, but using nothing of ABI 1.2 or later. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mixprec/mixprec-plugin.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_optim_v2_get_desc (void);

static const MixprecHParamSpecV1 sgdv2_hparams[2] = {
  { "lr", "base learning rate", MIXPREC_HPARAM_DOUBLE, 1e-3, 0, 1e30, { 0 } },
  { "momentum", "momentum factor", MIXPREC_HPARAM_DOUBLE, 0.9, 0, 1, { 0 } },
};

static const char *const sgdv2_states[1] = { "momentum_buffer" };

static uint16_t
bf16_rne (float v)
{
  uint32_t bits;

  memcpy (&bits, &v, 4);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
    return (uint16_t) ((bits >> 16) | 0x40);
  return (uint16_t) ((bits + 0x7FFFu + ((bits >> 16) & 1)) >> 16);
}

static float
bf16_widen (uint16_t b)
{
  uint32_t bits = (uint32_t) b << 16;
  float v;

  memcpy (&v, &bits, 4);
  return v;
}

static int
sgdv2_step (const MixprecOptimizerStepV2 *args,
            float                        *master,
            const void                   *grad,
            void *const                  *states,
            void                         *working,
            size_t                        n,
            char                         *errbuf,
            size_t                        errbuf_len)
{
  int bf16;
  float momentum, neg_lr;

  if (args == NULL || args->base.struct_size != sizeof *args)
    {
      snprintf (errbuf, errbuf_len, "sgdv2 needs exactly a MixprecOptimizerStepV2");
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  if (args->base.grad_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT32 || master == NULL || working != NULL)
    {
      snprintf (errbuf, errbuf_len, "sgdv2 takes float32 gradients and masters, no working copy");
      return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
    }
  bf16 = args->state_dtypes != NULL && args->state_dtypes[0] == MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  momentum = (float) args->base.hparams[1];
  neg_lr = (float) -args->base.lr;
  for (size_t i = 0; i < n; i++)
    {
      float g = ((const float *) grad)[i];
      float b = bf16 ? bf16_widen (((const uint16_t *) states[0])[i]) : ((const float *) states[0])[i];

      b = momentum * b + g;
      master[i] = fmaf (neg_lr, b, master[i]);
      if (bf16)
        ((uint16_t *) states[0])[i] = bf16_rne (b);
      else
        ((float *) states[0])[i] = b;
    }
  return MIXPREC_PLUGIN_OK;
}

static const MixprecOptimizerV2 sgdv2 = {
  .name = "sgdv2",
  .device = "cpu",
  .rank = 1,
  .description = "momentum SGD registered as a MixprecOptimizerV2",
  .hparams = sgdv2_hparams,
  .n_hparams = 2,
  .n_state_slots = 1,
  .state_names = sgdv2_states,
  .state_dtype_mask = (1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16),
  .step = sgdv2_step,
};

static int
optim_v2_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  if (host->struct_size < offsetof (MixprecPluginHostV1, register_optimizer_v2) + sizeof host->register_optimizer_v2 ||
      host->register_optimizer_v2 == NULL)
    {
      snprintf (errbuf, errbuf_len, "the host table has no register_optimizer_v2");
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  return host->register_optimizer_v2 (host, &sgdv2, errbuf, errbuf_len);
}

static const MixprecPluginDesc desc = {
  MIXPREC_PLUGIN_ABI_VERSION_MAJOR, 1,
  "test-optim-v2", "an optimizer plugin of plugin ABI 1.1 (MixprecOptimizerV2)",
  "1.0.0", "LGPL-2.1-or-later", "libmixprec tests", optim_v2_init, { NULL },
};

const MixprecPluginDesc *
mixprec_plugin_test_optim_v2_get_desc (void)
{
  return &desc;
}
