/* lion-scalar.c — one element at a time: _mixprec_lion_update() of
 * numeric/numeric-optim.h, the update the cuda plugin's kernel compiles
 * too, around the plumbing of optim-common.h. lion-avx2.c and
 * lion-avx512.c give the same bits. */
#include "config.h"

#include "lion-kernels.h"

static inline float
lion_update1 (const float  *c,
              float         p,
              float         g,
              float *const *states,
              size_t        i)
{
  return _mixprec_lion_update (c, p, g, states[0] + i);
}

void
_mixprec_lion_run_scalar (const _MixprecOptimRange *range,
                          const float              *consts,
                          size_t                    start)
{
  _mixprec_optim_run_scalar (range, consts, start, lion_update1);
}
