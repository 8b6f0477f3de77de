/* adamw-kernels.h — the Adam/AdamW schema and prepare() (adamw-schema.c,
 * shared with the cuda plugin) and the two cpu kernels (adamw-scalar.c,
 * adamw-avx2.c), which give the same bits. */
#pragma once

#include "optim-common.h"
#include "numeric/numeric-optim.h"

G_BEGIN_DECLS

G_STATIC_ASSERT (ADAMW_N_CONSTS <= _MIXPREC_OPTIM_MAX_CONSTS);

#define ADAMW_N_HPARAMS 7

extern const MixprecHParamSpecV1 _mixprec_adamw_hparams[ADAMW_N_HPARAMS];
extern const char *const _mixprec_adamw_states[2];

int _mixprec_adamw_prepare (const MixprecOptimizerStepV1 *args,
                            float                        *consts,
                            char                         *errbuf,
                            size_t                        errbuf_len);

_MIXPREC_OPTIM_DECLARE_KERNELS (_mixprec_adamw);

G_END_DECLS
