/* sgd-consts.h — the per-call constants of the SGD step, shared by the cpu
 * kernels and the cuda kernel (plain C: nvcc compiles it too). */
#pragma once

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
