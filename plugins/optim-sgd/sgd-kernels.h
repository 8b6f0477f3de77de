/* sgd-kernels.h — the per-call constants of the SGD step and its two
 * kernels (sgd-scalar.c, sgd-avx2.c), which give the same bits. */
#pragma once

#include "optim-common.h"

G_BEGIN_DECLS

/* What the momentum buffer does this call (torch.optim.SGD). */
typedef enum {
  SGD_PLAIN,           /* momentum 0: no buffer */
  SGD_FIRST,           /* first step: buf = g */
  SGD_MOMENTUM,        /* buf = momentum * buf + (1 - dampening) * g */
} SgdMode;

/* Indices into the constants prepare() computes once per call. */
enum {
  SGD_MODE,            /* an SgdMode, as a float */
  SGD_NESTEROV,        /* 1: step along g + momentum * buf; 0: along buf */
  SGD_WEIGHT_DECAY,
  SGD_MOMENTUM_COEF,
  SGD_ONE_MINUS_DAMPENING,
  SGD_NEG_LR,
  SGD_N_CONSTS
};

G_STATIC_ASSERT (SGD_N_CONSTS <= _MIXPREC_OPTIM_MAX_CONSTS);

_MIXPREC_OPTIM_DECLARE_KERNELS (_mixprec_sgd);

G_END_DECLS
