/* cuda-optim.c — the "adamw", "sgd" and "lion" optimizers for the cuda
 * device. Their schemas, state slots, argument checks and prepare() are
 * the cpu plugins' own (adamw-schema.c, sgd-schema.c, lion-schema.c,
 * optim-common.c), so a config valid for one device is valid for the
 * other and both start from the same fp32 constants; step() then queues
 * one fused kernel (cuda-optim.cu) on the engine's stream. */
#include "config.h"

#include <string.h>

#include "cuda-plugin.h"
#include "cuda-optim-args.h"
#include "optim-adamw/adamw-kernels.h"
#include "optim-sgd/sgd-kernels.h"
#include "optim-lion/lion-kernels.h"

static int
cuda_step (const MixprecOptimizerV1     *schema,
           MixprecCudaOptimPrepare       prepare,
           const MixprecOptimizerStepV1 *args,
           float                        *master,
           const void                   *grad,
           float *const                 *states,
           void                         *working,
           size_t                        n,
           char                         *errbuf,
           size_t                        errbuf_len)
{
  MixprecCudaOptimLaunch launch;
  cudaStream_t stream;
  const char *call = "the optimizer kernel";
  cudaError_t e;
  int status;

  status = _mixprec_cuda_optim_args (schema, prepare, args, master, grad, states, working, n,
                                     &launch, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  if (n == 0)
    goto done;

  /* The calling thread may not have made the stream's device current. */
  stream = (cudaStream_t) args->device_stream;
  if (stream != NULL)
    {
      int device;

      if ((e = cudaStreamGetDevice (stream, &device)) != cudaSuccess)
        return _mixprec_cuda_fail (errbuf, errbuf_len, e, -1,
                                   "Optimizer %s: cudaStreamGetDevice", schema->name);
      if ((e = cudaSetDevice (device)) != cudaSuccess)
        return _mixprec_cuda_fail (errbuf, errbuf_len, e, device,
                                   "Optimizer %s: cudaSetDevice", schema->name);
    }
  if ((e = _mixprec_cuda_optim_step (&launch, stream, &call)) != cudaSuccess)
    return _mixprec_cuda_fail (errbuf, errbuf_len, e, -1, "Optimizer %s: %s (%zu elements)",
                               schema->name, call, n);
done:
  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';
  return MIXPREC_PLUGIN_OK;
}

#define CUDA_OPTIMIZER(sym, oname, odescription) \
  static const MixprecOptimizerV1 sym##_vtable; \
  static int \
  sym##_step (const MixprecOptimizerStepV1 *args, float *master, const void *grad, \
              float *const *states, void *working, size_t n, char *errbuf, size_t errbuf_len) \
  { \
    return cuda_step (&sym##_vtable, _mixprec_##sym##_prepare, args, master, grad, states, \
                      working, n, errbuf, errbuf_len); \
  } \
  static const MixprecOptimizerV1 sym##_vtable = { \
    .name = (oname), .device = "cuda", .rank = _MIXPREC_OPTIM_RANK, \
    .description = (odescription), \
    .hparams = _mixprec_##sym##_hparams, .n_hparams = G_N_ELEMENTS (_mixprec_##sym##_hparams), \
    .n_state_slots = G_N_ELEMENTS (_mixprec_##sym##_states), \
    .state_names = _mixprec_##sym##_states, .step = sym##_step };

CUDA_OPTIMIZER (adamw, "adamw",
                "Adam and AdamW (DeepSpeed FusedAdam semantics) in one CUDA kernel with unscaling "
                "and the working-copy write; the cpu feature's bits")
CUDA_OPTIMIZER (sgd, "sgd",
                "SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD "
                "semantics) in one CUDA kernel; the cpu feature's bits")
CUDA_OPTIMIZER (lion, "lion",
                "Lion with decoupled weight decay in one CUDA kernel; the cpu feature's bits")

int
_mixprec_cuda_optim_register (MixprecPluginHostV1 *host,
                              char                *errbuf,
                              size_t               errbuf_len)
{
  const MixprecOptimizerV1 *const optimizers[] = { &adamw_vtable, &sgd_vtable, &lion_vtable };

  for (unsigned k = 0; k < G_N_ELEMENTS (optimizers); k++)
    {
      int status = host->register_optimizer (host, optimizers[k], errbuf, errbuf_len);

      if (status != MIXPREC_PLUGIN_OK)
        return status;
    }
  return MIXPREC_PLUGIN_OK;
}
