/* sgd-scalar.c — one element at a time, torch.optim.SGD's rule in fp32:
 *
 *   g += wd * p
 *   buf = g                                   (first step)
 *   buf = momentum * buf + (1 - dampening) * g
 *   g = nesterov ? g + momentum * buf : buf   (when momentum is on)
 *   p -= lr * g
 *
 * Every fmaf() stands where sgd-avx2.c has an FMA instruction. */
#include "config.h"

#include <math.h>

#include "sgd-kernels.h"

static inline __attribute__ ((always_inline)) float
sgd_update1 (const float  *c,
             float         p,
             float         g,
             float        *buf,
             SgdMode       mode)
{
  g = fmaf (c[SGD_WEIGHT_DECAY], p, g);
  if (mode != SGD_PLAIN)
    {
      *buf = mode == SGD_FIRST ? g
                               : fmaf (c[SGD_ONE_MINUS_DAMPENING], g, c[SGD_MOMENTUM_COEF] * *buf);
      g = c[SGD_NESTEROV] != 0 ? fmaf (c[SGD_MOMENTUM_COEF], *buf, g) : *buf;
    }
  return fmaf (c[SGD_NEG_LR], g, p);
}

static inline float
sgd_plain1 (const float *c, float p, float g, float *const *states, size_t i)
{
  return sgd_update1 (c, p, g, NULL, SGD_PLAIN);
}

static inline float
sgd_first1 (const float *c, float p, float g, float *const *states, size_t i)
{
  return sgd_update1 (c, p, g, states[0] + i, SGD_FIRST);
}

static inline float
sgd_momentum1 (const float *c, float p, float g, float *const *states, size_t i)
{
  return sgd_update1 (c, p, g, states[0] + i, SGD_MOMENTUM);
}

void
_mixprec_sgd_run_scalar (const _MixprecOptimRange *range,
                         const float              *consts,
                         size_t                    start)
{
  switch ((SgdMode) consts[SGD_MODE])
    {
    case SGD_PLAIN:
      _mixprec_optim_run_scalar (range, consts, start, sgd_plain1);
      break;
    case SGD_FIRST:
      _mixprec_optim_run_scalar (range, consts, start, sgd_first1);
      break;
    default:
      _mixprec_optim_run_scalar (range, consts, start, sgd_momentum1);
      break;
    }
}
