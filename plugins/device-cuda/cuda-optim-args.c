/* cuda-optim-args.c — from a step() call of a cuda optimizer to the
 * MixprecCudaOptimLaunch its kernel takes: the cpu plugins' checks and
 * prepare(), revision 3's checks of formats and buffers, then which
 * update, dtypes, rounding and buffers. No CUDA call, so
 * tests/test-device-cuda builds it too and runs the kernels' per-element
 * code on the host from the very same launch. */
#include "config.h"

#include <string.h>

#include "cuda-optim-args.h"
#include "optim-sgd/sgd-kernels.h"

static const char *const format_names[] = {
  "float32", "bfloat16", "float16 with block scales", "bfloat16 with block scales",
  "float8_e4m3 with block scales", "int8 dynamic", "int4 dynamic",
};

static const char *const master_names[] = { "float32", "remainder", "kahan" };

void
_mixprec_cuda_optim_args_upgrade (const MixprecOptimizerStepV1 *args_v1,
                                  const MixprecOptimizerStepV2 *args_v2,
                                  unsigned                      n_states,
                                  MixprecPluginStateFormat     *formats,
                                  MixprecOptimizerStepV3       *out)
{
  memset (out, 0, sizeof *out);
  /* Only the bytes the caller has; its struct_size stays, for the V1
   * checks to judge. */
  if (args_v2 != NULL)
    memcpy (&out->v2, args_v2, MIN (args_v2->base.struct_size, sizeof out->v2));
  else if (args_v1 != NULL)
    memcpy (&out->v2.base, args_v1, MIN (args_v1->struct_size, sizeof out->v2.base));
  for (unsigned k = 0; k < n_states; k++)
    {
      MixprecPluginDType dtype = args_v2 != NULL && args_v2->state_dtypes != NULL
                                   ? args_v2->state_dtypes[k] : MIXPREC_PLUGIN_DTYPE_FLOAT32;

      /* Any other dtype becomes a format past the known ones, which the
       * checks refuse. */
      formats[k] = dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? MIXPREC_PLUGIN_STATE_FLOAT32
                   : dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16 ? MIXPREC_PLUGIN_STATE_BFLOAT16
                   : (MixprecPluginStateFormat) (100 + (int) dtype);
    }
  out->state_formats = formats;
  out->master_format = MIXPREC_PLUGIN_MASTER_FLOAT32;
}

/* What revision 3 adds to the checks: each slot's format and scale, the
 * block size, the master's format and buffers. */
static int
check_formats (const MixprecOptimizerV3     *schema,
               const MixprecOptimizerStepV3 *args,
               float                        *master,
               void                         *working,
               size_t                        n,
               int                          *any_scaled,
               char                         *errbuf,
               size_t                        errbuf_len)
{
  const char *name = schema->name;
  int any_bf16 = 0;

  *any_scaled = 0;
  if (args->state_formats == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: state_formats is NULL.", name);
  for (unsigned k = 0; k < schema->n_state_slots; k++)
    {
      unsigned f = (unsigned) args->state_formats[k];

      if (f >= G_N_ELEMENTS (format_names) || (schema->state_format_mask & (1u << f)) == 0)
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                    "Optimizer %s on %s cannot keep state slot %u (%s) in %s.",
                                    name, schema->device, k, schema->state_names[k],
                                    f < G_N_ELEMENTS (format_names) ? format_names[f] : "an unknown format");
      any_bf16 |= f == MIXPREC_PLUGIN_STATE_BFLOAT16;
      if (!_mixprec_cuda_state_is_scaled ((int) f))
        continue;
      *any_scaled = 1;
      if (n > 0 && (args->state_scales == NULL || args->state_scales[k] == NULL))
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: state slot %u (%s) is kept in %s but its "
                                    "scales are NULL.", name, k, schema->state_names[k], format_names[f]);
    }
  if (*any_scaled &&
      (args->block_size < 32 || args->block_size > 4096 || (args->block_size & (args->block_size - 1)) != 0))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: the block size of scaled state must be a power of two "
                                "from 32 to 4096, got %u.", name, args->block_size);
  if (any_bf16 && args->v2.state_rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN &&
      args->v2.state_rounding != MIXPREC_PLUGIN_ROUNDING_STOCHASTIC)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s: state rounding mode %d is neither nearest-even (0) "
                                "nor stochastic (1).", name, (int) args->v2.state_rounding);

  {
    unsigned m = (unsigned) args->master_format;

    if (m >= G_N_ELEMENTS (master_names) || (schema->master_format_mask & (1u << m)) == 0)
      return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                  "Optimizer %s on %s cannot keep %s masters.", name, schema->device,
                                  m < G_N_ELEMENTS (master_names) ? master_names[m] : "unknown");
    if (m == MIXPREC_PLUGIN_MASTER_FLOAT32 || n == 0)
      return MIXPREC_PLUGIN_OK;
    if (master != NULL || working == NULL || args->v2.base.working_dtype != MIXPREC_PLUGIN_DTYPE_BFLOAT16 ||
        args->master_extra == NULL)
      return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "Optimizer %s: %s masters take a bfloat16 working copy and "
                                  "master_extra, and no float32 master.", name, master_names[m]);
  }
  return MIXPREC_PLUGIN_OK;
}

int
_mixprec_cuda_optim_args (const MixprecOptimizerV3     *schema,
                          MixprecCudaOptimPrepare       prepare,
                          const MixprecOptimizerStepV3 *args,
                          float                        *master,
                          const void                   *grad,
                          void *const                  *states,
                          void                         *working,
                          size_t                        n,
                          MixprecCudaOptimLaunch       *launch,
                          char                         *errbuf,
                          size_t                        errbuf_len)
{
  /* The revision 1 checks see the schema in V1 form and no state dtypes:
   * the formats are checked here. */
  const MixprecOptimizerV1 v1 = { .name = schema->name, .device = schema->device,
                                  .hparams = schema->hparams, .n_hparams = schema->n_hparams,
                                  .n_state_slots = schema->n_state_slots,
                                  .state_names = schema->state_names };
  _MixprecOptimRange range = { args != NULL ? &args->v2.base : NULL, master, grad, states, working,
                               n, schema->n_state_slots, NULL, 0, 0 };
  int status, any_scaled;

  memset (launch, 0, sizeof *launch);
  status = _mixprec_optim_check_args (&v1, &range, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = check_formats (schema, args, master, working, n, &any_scaled, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = prepare (&args->v2.base, launch->consts, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK || n == 0)
    return status;     /* n == 0: the buffers may be NULL, nothing to launch */

  if (strcmp (schema->name, "adamw") == 0)
    launch->kind = MIXPREC_CUDA_OPTIM_ADAMW;
  else if (strcmp (schema->name, "lion") == 0)
    launch->kind = MIXPREC_CUDA_OPTIM_LION;
  else
    switch ((SgdMode) launch->consts[SGD_MODE])
      {
      case SGD_PLAIN: launch->kind = MIXPREC_CUDA_OPTIM_SGD_PLAIN; break;
      case SGD_FIRST: launch->kind = MIXPREC_CUDA_OPTIM_SGD_FIRST; break;
      default: launch->kind = MIXPREC_CUDA_OPTIM_SGD_MOMENTUM; break;
      }
  launch->grad_factor = args->v2.base.grad_factor;
  launch->grad_dtype = args->v2.base.grad_dtype;
  launch->working_dtype = working != NULL ? (int) args->v2.base.working_dtype : -1;
  launch->stochastic = args->v2.base.rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  launch->seed = args->v2.base.seed;
  launch->first_index = args->v2.base.first_index;
  launch->master = master;
  launch->grad = grad;
  for (unsigned k = 0; k < schema->n_state_slots && k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
    {
      launch->states[k] = states[k];
      launch->state_formats[k] = (int) args->state_formats[k];
      if (_mixprec_cuda_state_is_scaled (launch->state_formats[k]))
        launch->state_scales[k] = args->state_scales[k];
    }
  launch->state_signed = schema->state_signed_mask;
  launch->state_stochastic = args->v2.state_rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  launch->state_seed = args->v2.state_seed;
  launch->block_size = any_scaled ? args->block_size : 0;
  launch->master_format = (int) args->master_format;
  launch->master_extra = launch->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? args->master_extra : NULL;
  launch->working = working;
  launch->n = n;
  return MIXPREC_PLUGIN_OK;
}
