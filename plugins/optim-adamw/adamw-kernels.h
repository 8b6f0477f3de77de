/* adamw-kernels.h — the per-call constants of the Adam/AdamW step and its
 * two kernels (adamw-scalar.c, adamw-avx2.c), which give the same bits. */
#pragma once

#include "optim-common.h"

G_BEGIN_DECLS

/* Indices into the constants prepare() computes in double, once per call. */
enum {
  ADAMW_BETA1,
  ADAMW_ONE_MINUS_BETA1,
  ADAMW_BETA2,
  ADAMW_ONE_MINUS_BETA2,
  ADAMW_EPS,
  ADAMW_RSQRT_BC2,        /* 1 / sqrt(1 - beta2^t), or 1 */
  ADAMW_NEG_STEP_SIZE,    /* -lr / (1 - beta1^t), or -lr */
  ADAMW_L2_DECAY,         /* weight_decay in Adam (L2) mode, else 0 */
  ADAMW_NEG_LR_DECAY,     /* -lr * weight_decay in AdamW mode, else 0 */
  ADAMW_N_CONSTS
};

G_STATIC_ASSERT (ADAMW_N_CONSTS <= _MIXPREC_OPTIM_MAX_CONSTS);

_MIXPREC_OPTIM_DECLARE_KERNELS (_mixprec_adamw);

G_END_DECLS
