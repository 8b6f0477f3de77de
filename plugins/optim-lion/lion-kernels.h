/* lion-kernels.h — the per-call constants of the Lion step and its two
 * kernels (lion-scalar.c, lion-avx2.c), which give the same bits. */
#pragma once

#include "optim-common.h"

G_BEGIN_DECLS

/* Indices into the constants prepare() computes once per call. */
enum {
  LION_BETA1,
  LION_ONE_MINUS_BETA1,
  LION_BETA2,
  LION_ONE_MINUS_BETA2,
  LION_NEG_LR,
  LION_NEG_LR_DECAY,     /* -lr * weight_decay */
  LION_N_CONSTS
};

G_STATIC_ASSERT (LION_N_CONSTS <= _MIXPREC_OPTIM_MAX_CONSTS);

_MIXPREC_OPTIM_DECLARE_KERNELS (_mixprec_lion);

G_END_DECLS
