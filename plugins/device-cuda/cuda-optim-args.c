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

void
_mixprec_cuda_optim_args_upgrade (const MixprecOptimizerStepV1 *args_v1,
                                  const MixprecOptimizerStepV2 *args_v2,
                                  unsigned                      n_states,
                                  MixprecPluginStateFormat     *formats,
                                  MixprecOptimizerStepV3       *out)
{
  memset (out, 0, sizeof *out);
  if (args_v2 != NULL)
    out->v2 = *args_v2;
  else
    out->v2.base = *args_v1;
  out->v2.base.struct_size = sizeof *out;
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
  _MixprecOptimRange range = { NULL, master, grad, states, working, n, schema->n_state_slots, NULL, 0, 0 };
  MixprecPluginDType dtypes[_MIXPREC_OPTIM_MAX_STATES];
  int formats[MIXPREC_CUDA_OPTIM_MAX_STATES] = { 0 };
  int status, any_scaled = 0, any_bf16 = 0;

  G_STATIC_ASSERT (MIXPREC_CUDA_OPTIM_MAX_STATES <= _MIXPREC_OPTIM_MAX_STATES);
  memset (launch, 0, sizeof *launch);
  if (schema->n_state_slots > MIXPREC_CUDA_OPTIM_MAX_STATES)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s keeps more state slots than the cuda kernels hold.",
                                schema->name);
  /* The cpu plugins' checks, in their order: revision 3's (formats,
   * scales, block size, even int4 calls, master buffers), the state
   * rounding, then those of every revision. */
  status = _mixprec_optim_check_args_v3 (&v1, args, master, working, n, dtypes, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  for (unsigned k = 0; k < schema->n_state_slots; k++)
    {
      /* No formats: every slot float32. */
      formats[k] = args->state_formats != NULL ? (int) args->state_formats[k] : MIXPREC_PLUGIN_STATE_FLOAT32;
      any_scaled |= _mixprec_cuda_state_is_scaled (formats[k]);
      any_bf16 |= formats[k] == MIXPREC_PLUGIN_STATE_BFLOAT16;
    }
  if (any_bf16 &&
      args->v2.state_rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN &&
      args->v2.state_rounding != MIXPREC_PLUGIN_ROUNDING_STOCHASTIC)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s: state rounding mode %d is neither nearest-even (0) "
                                "nor stochastic (1).", schema->name, (int) args->v2.state_rounding);
  range.args = &args->v2.base;
  range.state_dtypes = any_bf16 ? dtypes : NULL;
  status = _mixprec_optim_check_args (&v1, &range, errbuf, errbuf_len);
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
      launch->state_formats[k] = formats[k];
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
