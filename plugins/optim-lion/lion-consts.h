/* lion-consts.h — the per-call constants of the Lion step, shared by the
 * cpu kernels and the cuda kernel (plain C: nvcc compiles it too). */
#pragma once

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
