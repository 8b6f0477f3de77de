/* lion-scalar.c — one element at a time, Lion (Chen et al. 2023) in fp32:
 *
 *   c = b1 * m + (1 - b1) * g
 *   p = p - lr * wd * p - lr * sign (c)       (sign (0) = 0)
 *   m = b2 * m + (1 - b2) * g
 *
 * Every fmaf() stands where lion-avx2.c has an FMA instruction. */
#include "config.h"

#include <math.h>

#include "lion-kernels.h"

static inline float
lion_update1 (const float  *c,
              float         p,
              float         g,
              float *const *states,
              size_t        i)
{
  float *m = states[0] + i;
  float u = fmaf (c[LION_ONE_MINUS_BETA1], g, c[LION_BETA1] * *m);
  /* A zero keeps its sign and a NaN stays NaN (as torch.sign), so a
   * non-finite gradient is not hidden from the parameter. */
  float s = u > 0 ? 1.0f : u < 0 ? -1.0f : u;

  *m = fmaf (c[LION_ONE_MINUS_BETA2], g, c[LION_BETA2] * *m);
  p = fmaf (c[LION_NEG_LR_DECAY], p, p);
  return fmaf (c[LION_NEG_LR], s, p);
}

void
_mixprec_lion_run_scalar (const _MixprecOptimRange *range,
                          const float              *consts,
                          size_t                    start)
{
  _mixprec_optim_run_scalar (range, consts, start, lion_update1);
}
