/* cuda-optim.c — the "adamw", "sgd" and "lion" optimizers for the cuda
 * device. Their schemas, state slots, argument checks and prepare() are
 * the cpu plugins' own (adamw-schema.c, sgd-schema.c, lion-schema.c,
 * optim-common.c), so a config valid for one device is valid for the
 * other and both start from the same fp32 constants; step() then queues
 * one fused kernel (cuda-optim.cu) on the engine's stream.
 *
 * Each is registered as optimizer revision 3 (every state and master
 * format) where the library has register_optimizer_v3, else as revision 2
 * (float32 and bfloat16 state), else as revision 1 (float32 state): the
 * three vtables share one step, which sees every call as a revision 3
 * one. */
#include "config.h"

#include <string.h>

#include "cuda-plugin.h"
#include "cuda-optim-args.h"
#include "optim-adamw/adamw-kernels.h"
#include "optim-sgd/sgd-kernels.h"
#include "optim-lion/lion-kernels.h"

/* Slot k is signed (bit k) as in the widely used 8-bit optimizers: Adam's
 * first moment, Lion's and SGD's momentum; Adam's second moment is not. */
#define ADAMW_SIGNED 0x1u
#define SGD_SIGNED 0x1u
#define LION_SIGNED 0x1u

static int
cuda_step (const MixprecOptimizerV3     *schema,
           MixprecCudaOptimPrepare       prepare,
           const MixprecOptimizerStepV3 *args,
           float                        *master,
           const void                   *grad,
           void *const                  *states,
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
  stream = (cudaStream_t) args->v2.base.device_stream;
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

/* The revision 1 and 2 entry points: the same call in revision 3 form. */
static int
cuda_step_v2 (const MixprecOptimizerV3     *schema,
              MixprecCudaOptimPrepare       prepare,
              const MixprecOptimizerStepV1 *args_v1,
              const MixprecOptimizerStepV2 *args_v2,
              float                        *master,
              const void                   *grad,
              void *const                  *states,
              void                         *working,
              size_t                        n,
              char                         *errbuf,
              size_t                        errbuf_len)
{
  MixprecPluginStateFormat formats[MIXPREC_CUDA_OPTIM_MAX_STATES];
  MixprecOptimizerStepV3 v3;

  size_t have = args_v2 != NULL ? args_v2->base.struct_size : args_v1 != NULL ? args_v1->struct_size : 0;
  size_t need = args_v1 != NULL ? sizeof (MixprecOptimizerStepV1) : sizeof (MixprecOptimizerStepV2);

  if (have < need)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s needs a MixprecOptimizerStep%s of at least %zu bytes, "
                                "got %zu.", schema->name, args_v1 != NULL ? "V1" : "V2", need, have);
  _mixprec_cuda_optim_args_upgrade (args_v1, args_v2, schema->n_state_slots, formats, &v3);
  return cuda_step (schema, prepare, &v3, master, grad, states, working, n, errbuf, errbuf_len);
}

#define CUDA_OPTIMIZER_SCHEMA(sym, oname, odescription) \
  .name = (oname), .device = "cuda", .rank = _MIXPREC_OPTIM_RANK, \
  .description = (odescription), \
  .hparams = _mixprec_##sym##_hparams, .n_hparams = G_N_ELEMENTS (_mixprec_##sym##_hparams), \
  .n_state_slots = G_N_ELEMENTS (_mixprec_##sym##_states), \
  .state_names = _mixprec_##sym##_states

#define CUDA_OPTIMIZER(sym, oname, odescription, osigned) \
  static const MixprecOptimizerV3 sym##_vtable; \
  static int \
  sym##_step_v1 (const MixprecOptimizerStepV1 *args, float *master, const void *grad, \
                 float *const *states, void *working, size_t n, char *errbuf, size_t errbuf_len) \
  { \
    return cuda_step_v2 (&sym##_vtable, _mixprec_##sym##_prepare, args, NULL, master, grad, \
                         (void *const *) states, working, n, errbuf, errbuf_len); \
  } \
  static int \
  sym##_step_v2 (const MixprecOptimizerStepV2 *args, float *master, const void *grad, \
                 void *const *states, void *working, size_t n, char *errbuf, size_t errbuf_len) \
  { \
    return cuda_step_v2 (&sym##_vtable, _mixprec_##sym##_prepare, NULL, args, master, grad, \
                         states, working, n, errbuf, errbuf_len); \
  } \
  static int \
  sym##_step_v3 (const MixprecOptimizerStepV3 *args, float *master, const void *grad, \
                 void *const *states, void *working, size_t n, char *errbuf, size_t errbuf_len) \
  { \
    return cuda_step (&sym##_vtable, _mixprec_##sym##_prepare, args, master, grad, states, \
                      working, n, errbuf, errbuf_len); \
  } \
  static const MixprecOptimizerV1 sym##_vtable_v1 = { \
    CUDA_OPTIMIZER_SCHEMA (sym, oname, odescription), .step = sym##_step_v1 }; \
  static const MixprecOptimizerV2 sym##_vtable_v2 = { \
    CUDA_OPTIMIZER_SCHEMA (sym, oname, odescription), \
    .state_dtype_mask = _MIXPREC_OPTIM_STATE_DTYPES, .step = sym##_step_v2 }; \
  static const MixprecOptimizerV3 sym##_vtable = { \
    CUDA_OPTIMIZER_SCHEMA (sym, oname, odescription), \
    .state_dtype_mask = _MIXPREC_OPTIM_STATE_DTYPES, \
    .state_format_mask = MIXPREC_CUDA_OPTIM_STATE_FORMATS, \
    .master_format_mask = MIXPREC_CUDA_OPTIM_MASTER_FORMATS, \
    .state_signed_mask = (osigned), .step = sym##_step_v3 };

CUDA_OPTIMIZER (adamw, "adamw",
                "Adam and AdamW (DeepSpeed FusedAdam semantics) in one CUDA kernel with unscaling, "
                "the state's formats and the working-copy write; the cpu feature's bits", ADAMW_SIGNED)
CUDA_OPTIMIZER (sgd, "sgd",
                "SGD with momentum, dampening, Nesterov and weight decay (torch.optim.SGD "
                "semantics) in one CUDA kernel; the cpu feature's bits", SGD_SIGNED)
CUDA_OPTIMIZER (lion, "lion",
                "Lion with decoupled weight decay in one CUDA kernel; the cpu feature's bits",
                LION_SIGNED)

#define HOST_HAS(host, field) \
  ((host)->struct_size >= offsetof (MixprecPluginHostV1, field) + sizeof (host)->field && \
   (host)->field != NULL)

int
_mixprec_cuda_optim_register (MixprecPluginHostV1 *host,
                              char                *errbuf,
                              size_t               errbuf_len)
{
  const MixprecOptimizerV3 *const v3[] = { &adamw_vtable, &sgd_vtable, &lion_vtable };
  const MixprecOptimizerV2 *const v2[] = { &adamw_vtable_v2, &sgd_vtable_v2, &lion_vtable_v2 };
  const MixprecOptimizerV1 *const v1[] = { &adamw_vtable_v1, &sgd_vtable_v1, &lion_vtable_v1 };
  int revision = HOST_HAS (host, register_optimizer_v3) ? 3
                 : HOST_HAS (host, register_optimizer_v2) ? 2 : 1;

  for (unsigned k = 0; k < G_N_ELEMENTS (v3); k++)
    {
      int status = revision == 3 ? host->register_optimizer_v3 (host, v3[k], errbuf, errbuf_len)
                   : revision == 2 ? host->register_optimizer_v2 (host, v2[k], errbuf, errbuf_len)
                   : host->register_optimizer (host, v1[k], errbuf, errbuf_len);

      if (status != MIXPREC_PLUGIN_OK)
        return status;
    }
  MIXPREC_PLUGIN_LOG (MIXPREC_PLUGIN_LOG_DEBUG, "registered the cuda optimizers as revision %d of 3",
                      revision);
  return MIXPREC_PLUGIN_OK;
}
