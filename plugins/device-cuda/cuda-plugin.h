/* cuda-plugin.h — what the two host-side files of the cuda plugin share:
 * turning a CUDA runtime error into a status and a sentence, and the
 * registration of the cuda optimizers (cuda-optim.c). */
#pragma once

#include <cuda_runtime_api.h>

#include "optim-common.h"

G_BEGIN_DECLS

/* Writes "<call, formatted> on cuda:<ordinal>: <CUDA's message>." into
 * errbuf and returns MIXPREC_PLUGIN_ERR_NO_MEMORY for an allocation
 * failure, MIXPREC_PLUGIN_ERR_RUNTIME otherwise. @ordinal < 0: the current
 * device, if the runtime can tell. */
int _mixprec_cuda_fail             (char                *errbuf,
                                    size_t               errbuf_len,
                                    cudaError_t          error,
                                    int                  ordinal,
                                    const char          *format,
                                    ...) G_GNUC_PRINTF (5, 6);

/* Registers the cuda "adamw", "sgd" and "lion" features. */
int _mixprec_cuda_optim_register   (MixprecPluginHostV1 *host,
                                    char                *errbuf,
                                    size_t               errbuf_len);

G_END_DECLS
