/* cuda-optim-args.h — a cuda optimizer's step() arguments checked and
 * turned into the launch of its kernel (cuda-optim-args.c). */
#pragma once

#include "optim-common.h"
#include "cuda-launch.h"

G_BEGIN_DECLS

G_STATIC_ASSERT (_MIXPREC_OPTIM_MAX_CONSTS == MIXPREC_CUDA_OPTIM_MAX_CONSTS);

typedef int (*MixprecCudaOptimPrepare) (const MixprecOptimizerStepV1 *args,
                                        float                        *consts,
                                        char                         *errbuf,
                                        size_t                        errbuf_len);

/* Every state format and master format of optimizer revision 3: the cuda
 * kernels decode, update and encode each of them (cuda-optim-quant.cuh). */
#define MIXPREC_CUDA_OPTIM_STATE_FORMATS \
  ((1u << MIXPREC_PLUGIN_STATE_FLOAT32) | (1u << MIXPREC_PLUGIN_STATE_BFLOAT16) | \
   (1u << MIXPREC_PLUGIN_STATE_FLOAT16_SCALED) | (1u << MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED) | \
   (1u << MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED) | (1u << MIXPREC_PLUGIN_STATE_INT8_DYNAMIC) | \
   (1u << MIXPREC_PLUGIN_STATE_INT4_DYNAMIC))
#define MIXPREC_CUDA_OPTIM_MASTER_FORMATS \
  ((1u << MIXPREC_PLUGIN_MASTER_FLOAT32) | (1u << MIXPREC_PLUGIN_MASTER_REMAINDER) | \
   (1u << MIXPREC_PLUGIN_MASTER_KAHAN))

/* A revision 1 or 2 call as the revision 3 call that means the same:
 * every slot in the format of its dtype (FLOAT32 for a V1 call), no
 * scales, a FLOAT32 master. @args_v2 is NULL for a V1 call, whose
 * struct_size the caller has checked; @out's state_formats point into
 * @formats. */
void _mixprec_cuda_optim_args_upgrade (const MixprecOptimizerStepV1 *args_v1,
                                       const MixprecOptimizerStepV2 *args_v2,
                                       unsigned                      n_states,
                                       MixprecPluginStateFormat     *formats,
                                       MixprecOptimizerStepV3       *out);

/* The checks of every step() (optim-common's, those of revision 3 and
 * those of every revision, as the cpu plugins make them), then @prepare()
 * into launch->consts, then the rest of @launch (left zeroed, launch->n 0,
 * when @n is 0). Returns a MixprecPluginStatus with a sentence in errbuf
 * on failure; touches no device. */
int _mixprec_cuda_optim_args (const MixprecOptimizerV3     *schema,
                              MixprecCudaOptimPrepare       prepare,
                              const MixprecOptimizerStepV3 *args,
                              float                        *master,
                              const void                   *grad,
                              void *const                  *states,
                              void                         *working,
                              size_t                        n,
                              MixprecCudaOptimLaunch       *launch,
                              char                         *errbuf,
                              size_t                        errbuf_len);

/* Whether @format keeps a scale per block. */
static inline int
_mixprec_cuda_state_is_scaled (int format)
{
  return format != MIXPREC_PLUGIN_STATE_FLOAT32 && format != MIXPREC_PLUGIN_STATE_BFLOAT16;
}

G_END_DECLS
