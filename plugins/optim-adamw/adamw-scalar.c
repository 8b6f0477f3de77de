/* adamw-scalar.c — one element at a time, the form DeepSpeed's
 * FusedAdam (multi_tensor_adam) gives in fp32 arithmetic:
 *
 *   g += wd * p                                  (Adam, L2 mode)
 *   m = b1 * m + (1 - b1) * g;  v = b2 * v + (1 - b2) * g * g
 *   p -= lr * wd * p                             (AdamW, decoupled)
 *   p -= lr / bc1 * m / (sqrt (v) / sqrt (bc2) + eps)
 *
 * Every fmaf() stands where adamw-avx2.c has an FMA instruction. */
#include "config.h"

#include <math.h>

#include "adamw-kernels.h"

static inline float
adamw_update1 (const float  *c,
               float         p,
               float         g,
               float *const *states,
               size_t        i)
{
  float *m = states[0] + i;
  float *v = states[1] + i;
  float denom;

  g = fmaf (c[ADAMW_L2_DECAY], p, g);
  *m = fmaf (c[ADAMW_ONE_MINUS_BETA1], g, c[ADAMW_BETA1] * *m);
  *v = fmaf (c[ADAMW_ONE_MINUS_BETA2], g * g, c[ADAMW_BETA2] * *v);
  denom = fmaf (sqrtf (*v), c[ADAMW_RSQRT_BC2], c[ADAMW_EPS]);
  p = fmaf (c[ADAMW_NEG_LR_DECAY], p, p);
  return fmaf (c[ADAMW_NEG_STEP_SIZE], *m / denom, p);
}

void
_mixprec_adamw_run_scalar (const _MixprecOptimRange *range,
                           const float              *consts,
                           size_t                    start)
{
  _mixprec_optim_run_scalar (range, consts, start, adamw_update1);
}
