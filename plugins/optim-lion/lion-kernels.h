/* lion-kernels.h — the Lion schema and prepare() (lion-schema.c, shared
 * with the cuda plugin) and the two cpu kernels (lion-scalar.c,
 * lion-avx2.c), which give the same bits. */
#pragma once

#include "optim-common.h"
#include "numeric/numeric-optim.h"

G_BEGIN_DECLS

G_STATIC_ASSERT (LION_N_CONSTS <= _MIXPREC_OPTIM_MAX_CONSTS);

#define LION_N_HPARAMS 4

extern const MixprecHParamSpecV1 _mixprec_lion_hparams[LION_N_HPARAMS];
extern const char *const _mixprec_lion_states[1];

int _mixprec_lion_prepare (const MixprecOptimizerStepV1 *args,
                           float                        *consts,
                           char                         *errbuf,
                           size_t                        errbuf_len);

_MIXPREC_OPTIM_DECLARE_KERNELS (_mixprec_lion);

G_END_DECLS
