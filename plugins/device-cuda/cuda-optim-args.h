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

/* The checks of every step() against @schema, then @prepare() into
 * launch->consts, then the rest of @launch (left zeroed, launch->n 0,
 * when @n is 0). Returns a MixprecPluginStatus with a sentence in errbuf
 * on failure; touches no device. */
int _mixprec_cuda_optim_args (const MixprecOptimizerV1     *schema,
                              MixprecCudaOptimPrepare       prepare,
                              const MixprecOptimizerStepV1 *args,
                              float                        *master,
                              const void                   *grad,
                              float *const                 *states,
                              void                         *working,
                              size_t                        n,
                              MixprecCudaOptimLaunch       *launch,
                              char                         *errbuf,
                              size_t                        errbuf_len);

G_END_DECLS
