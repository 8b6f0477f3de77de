/* optim-sgd.c — the "sgd" optimizer for the cpu device: torch.optim.SGD's
 * rule (momentum, dampening, Nesterov, L2 weight decay) in one fused pass
 * per range. The schema and prepare() live in sgd-schema.c, shared with
 * the cuda plugin. */
#include "config.h"

#include "sgd-kernels.h"

_MIXPREC_OPTIM_PLUGIN_DEFINE (optim_sgd, "optim-sgd",
                              "Fused SGD step for the cpu device (AVX-512, AVX2/FMA or scalar, same results)",
                              "sgd",
                              "SGD with momentum, dampening, Nesterov and weight decay "
                              "(torch.optim.SGD semantics) fused with unscaling and the working-copy write",
                              _mixprec_sgd_hparams, _mixprec_sgd_states, 0x1u, _mixprec_sgd_prepare,
                              _mixprec_sgd_run_scalar, _mixprec_sgd_run_avx2,
                              _mixprec_sgd_run_avx512, _mixprec_sgd_states_used)
