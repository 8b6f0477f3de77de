/* numeric-optim.h — the per-element updates of the adamw, sgd and lion
 * optimizers and the per-call constants they read. The scalar kernels of
 * the cpu plugins (plugins/optim-*) and the fused kernel of the cuda
 * plugin (plugins/device-cuda/cuda-optim-kernel.cuh) both compile these
 * lines (see numeric-base.h); the AVX2 and AVX-512 kernels are separate
 * and held to them bit for bit by tests/test-optim.
 *
 * Each update takes the parameter p, the gradient g (already decoded and
 * multiplied by grad_factor) and pointers to this element's FP32 state
 * values, updates the states in place and returns the new parameter.
 * Every _mixprec_num_fma() stands where the SIMD kernels have an FMA
 * instruction; nothing else is fused. */
#pragma once

#include "numeric-base.h"

/* ------------------------------------------------------------ adamw
 *
 * The form DeepSpeed's FusedAdam (multi_tensor_adam) gives in fp32:
 *
 *   g += wd * p                                  (Adam, L2 mode)
 *   m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
 *   p -= lr * wd * p                             (AdamW, decoupled)
 *   p -= lr / bc1 * m / (sqrt (v) / sqrt (bc2) + eps)
 */

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

MIXPREC_NUMERIC_FN float
_mixprec_adamw_update (const float *c,
                       float        p,
                       float        g,
                       float       *m,
                       float       *v)
{
  float denom;

  g = _mixprec_num_fma (c[ADAMW_L2_DECAY], p, g);
  *m = _mixprec_num_fma (c[ADAMW_ONE_MINUS_BETA1], g, c[ADAMW_BETA1] * *m);
  *v = _mixprec_num_fma (c[ADAMW_ONE_MINUS_BETA2], g * g, c[ADAMW_BETA2] * *v);
  denom = _mixprec_num_fma (_mixprec_num_sqrt (*v), c[ADAMW_RSQRT_BC2], c[ADAMW_EPS]);
  p = _mixprec_num_fma (c[ADAMW_NEG_LR_DECAY], p, p);
  return _mixprec_num_fma (c[ADAMW_NEG_STEP_SIZE], _mixprec_num_div (*m, denom), p);
}

/* ------------------------------------------------------------ sgd
 *
 * torch.optim.SGD's rule in fp32:
 *
 *   g += wd * p
 *   buf = g                                   (first step)
 *   buf = momentum * buf + (1 - dampening) * g
 *   g = nesterov ? g + momentum * buf : buf   (when momentum is on)
 *   p -= lr * g
 */

/* What the momentum buffer does this call. */
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

/* @mode is a constant at every call site, so each caller's copy keeps
 * one branch; @buf is not touched (and may be NULL) for SGD_PLAIN. */
MIXPREC_NUMERIC_FN float
_mixprec_sgd_update (const float *c,
                     float        p,
                     float        g,
                     float       *buf,
                     SgdMode      mode)
{
  g = _mixprec_num_fma (c[SGD_WEIGHT_DECAY], p, g);
  if (mode != SGD_PLAIN)
    {
      *buf = mode == SGD_FIRST ? g
                               : _mixprec_num_fma (c[SGD_ONE_MINUS_DAMPENING], g,
                                                   c[SGD_MOMENTUM_COEF] * *buf);
      g = c[SGD_NESTEROV] != 0 ? _mixprec_num_fma (c[SGD_MOMENTUM_COEF], *buf, g) : *buf;
    }
  return _mixprec_num_fma (c[SGD_NEG_LR], g, p);
}

/* ------------------------------------------------------------ lion
 *
 * Lion (Chen et al. 2023) in fp32:
 *
 *   c = b1 * m + (1 - b1) * g
 *   p = p - lr * wd * p - lr * sign (c)       (sign (0) = 0)
 *   m = b2 * m + (1 - b2) * g
 */

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

MIXPREC_NUMERIC_FN float
_mixprec_lion_update (const float *c,
                      float        p,
                      float        g,
                      float       *m)
{
  float u = _mixprec_num_fma (c[LION_ONE_MINUS_BETA1], g, c[LION_BETA1] * *m);
  /* A zero keeps its sign and a NaN stays NaN (as torch.sign), so a
   * non-finite gradient is not hidden from the parameter. */
  float s = u > 0 ? 1.0f : u < 0 ? -1.0f : u;

  *m = _mixprec_num_fma (c[LION_ONE_MINUS_BETA2], g, c[LION_BETA2] * *m);
  p = _mixprec_num_fma (c[LION_NEG_LR_DECAY], p, p);
  return _mixprec_num_fma (c[LION_NEG_LR], s, p);
}
