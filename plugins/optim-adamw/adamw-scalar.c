/* adamw-scalar.c — one element at a time: _mixprec_adamw_update() of
 * numeric/numeric-optim.h, the update the cuda plugin's kernel compiles
 * too, around the plumbing of optim-common.h. adamw-avx2.c and
 * adamw-avx512.c give the same bits. */
#include "config.h"

#include "adamw-kernels.h"

static inline float
adamw_update1 (const float  *c,
               float         p,
               float         g,
               float *const *states,
               size_t        i)
{
  return _mixprec_adamw_update (c, p, g, states[0] + i, states[1] + i);
}

void
_mixprec_adamw_run_scalar (const _MixprecOptimRange *range,
                           const float              *consts,
                           size_t                    start)
{
  _mixprec_optim_run_scalar (range, consts, start, adamw_update1);
}
