/* cuda-optim-args.c — from a step() call of a cuda optimizer to the
 * MixprecCudaOptimLaunch its kernel takes: the cpu plugins' checks and
 * prepare(), then which update, dtypes, rounding and buffers. No CUDA
 * call, so tests/test-device-cuda builds it too and runs the kernel's
 * per-element code on the host from the very same launch. */
#include "config.h"

#include <string.h>

#include "cuda-optim-args.h"
#include "optim-sgd/sgd-kernels.h"

int
_mixprec_cuda_optim_args (const MixprecOptimizerV1     *schema,
                          MixprecCudaOptimPrepare       prepare,
                          const MixprecOptimizerStepV1 *args,
                          float                        *master,
                          const void                   *grad,
                          float *const                 *states,
                          void                         *working,
                          size_t                        n,
                          MixprecCudaOptimLaunch       *launch,
                          char                         *errbuf,
                          size_t                        errbuf_len)
{
  _MixprecOptimRange range = { args, master, grad, (void *const *) states, working, n,
                               schema->n_state_slots, NULL, 0, 0 };
  int status;

  memset (launch, 0, sizeof *launch);
  status = _mixprec_optim_check_args (schema, &range, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = prepare (args, launch->consts, errbuf, errbuf_len);
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
  launch->grad_factor = args->grad_factor;
  launch->grad_dtype = args->grad_dtype;
  launch->working_dtype = working != NULL ? (int) args->working_dtype : -1;
  launch->stochastic = args->rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  launch->seed = args->seed;
  launch->first_index = args->first_index;
  launch->master = master;
  launch->grad = grad;
  for (unsigned k = 0; k < schema->n_state_slots && k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
    launch->states[k] = states[k];
  launch->working = working;
  launch->n = n;
  return MIXPREC_PLUGIN_OK;
}
