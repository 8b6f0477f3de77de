/* adamw-consts.h — the per-call constants of the Adam/AdamW step, shared by
 * the cpu kernels and the cuda kernel (plain C: nvcc compiles it too). */
#pragma once

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
