/* sgd-kernels.h — the SGD schema and prepare() (sgd-schema.c, shared with
 * the cuda plugin) and the two cpu kernels (sgd-scalar.c, sgd-avx2.c),
 * which give the same bits. */
#pragma once

#include "optim-common.h"
#include "numeric/numeric-optim.h"

G_BEGIN_DECLS

G_STATIC_ASSERT (SGD_N_CONSTS <= _MIXPREC_OPTIM_MAX_CONSTS);

#define SGD_N_HPARAMS 5

extern const MixprecHParamSpecV1 _mixprec_sgd_hparams[SGD_N_HPARAMS];
extern const char *const _mixprec_sgd_states[1];

int _mixprec_sgd_prepare (const MixprecOptimizerStepV1 *args,
                          float                        *consts,
                          char                         *errbuf,
                          size_t                        errbuf_len);

/* Without momentum the buffer is neither read nor written. */
unsigned _mixprec_sgd_states_used (const float *consts);

_MIXPREC_OPTIM_DECLARE_KERNELS (_mixprec_sgd);

G_END_DECLS
