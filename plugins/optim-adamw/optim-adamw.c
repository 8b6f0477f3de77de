/* optim-adamw.c — the "adamw" optimizer for the cpu device: Adam with L2
 * decay or AdamW with decoupled decay, DeepSpeed FusedAdam's semantics
 * (its multi_tensor_adam kernel), in one fused pass per range. The schema
 * and prepare() live in adamw-schema.c, shared with the cuda plugin. */
#include "config.h"

#include "adamw-kernels.h"

_MIXPREC_OPTIM_PLUGIN_DEFINE (optim_adamw, "optim-adamw",
                              "Fused Adam/AdamW step for the cpu device (AVX-512, AVX2/FMA or scalar, same results)",
                              "adamw",
                              "Adam and AdamW (DeepSpeed FusedAdam semantics) fused with unscaling "
                              "and the working-copy write",
                              _mixprec_adamw_hparams, _mixprec_adamw_states, 0x1u, _mixprec_adamw_prepare,
                              _mixprec_adamw_run_scalar, _mixprec_adamw_run_avx2,
                              _mixprec_adamw_run_avx512, NULL)
