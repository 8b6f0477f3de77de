/* optim-lion.c — the "lion" optimizer for the cpu device: Lion's
 * sign-of-interpolation update with decoupled weight decay, in one fused
 * pass per range. The schema and prepare() live in lion-schema.c, shared
 * with the cuda plugin. */
#include "config.h"

#include "lion-kernels.h"

_MIXPREC_OPTIM_PLUGIN_DEFINE (optim_lion, "optim-lion",
                              "Fused Lion step for the cpu device (AVX-512, AVX2/FMA or scalar, same results)",
                              "lion",
                              "Lion (EvoLved Sign Momentum) with decoupled weight decay, fused with "
                              "unscaling and the working-copy write",
                              _mixprec_lion_hparams, _mixprec_lion_states, 0x1u, _mixprec_lion_prepare,
                              _mixprec_lion_run_scalar, _mixprec_lion_run_avx2,
                              _mixprec_lion_run_avx512, NULL)
