/* sgd-scalar.c — one element at a time: _mixprec_sgd_update() of
 * numeric/numeric-optim.h, the update the cuda plugin's kernel compiles
 * too, around the plumbing of optim-common.h; one loop per buffer mode,
 * so that the mode is a constant in each. sgd-avx2.c and sgd-avx512.c
 * give the same bits. */
#include "config.h"

#include "sgd-kernels.h"

static inline float
sgd_plain1 (const float *c, float p, float g, float *const *states, size_t i)
{
  return _mixprec_sgd_update (c, p, g, NULL, SGD_PLAIN);
}

static inline float
sgd_first1 (const float *c, float p, float g, float *const *states, size_t i)
{
  return _mixprec_sgd_update (c, p, g, states[0] + i, SGD_FIRST);
}

static inline float
sgd_momentum1 (const float *c, float p, float g, float *const *states, size_t i)
{
  return _mixprec_sgd_update (c, p, g, states[0] + i, SGD_MOMENTUM);
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
