/* sgd-avx2.c — _mixprec_sgd_update() of numeric/numeric-optim.h (the
 * scalar reference, compiled by the C compiler and nvcc alike) eight
 * lanes at a time, same bits: the same operations in the same order,
 * FMA exactly where it calls _mixprec_num_fma(). */
#include "config.h"

#include "sgd-kernels.h"
#include "optim-common-avx2.h"

static inline __attribute__ ((always_inline)) __m256
sgd_update8 (const float *c,
             __m256       p,
             __m256       g,
             float       *bufp,
             SgdMode      mode)
{
  const __m256 mu = _mm256_set1_ps (c[SGD_MOMENTUM_COEF]);

  g = _mm256_fmadd_ps (_mm256_set1_ps (c[SGD_WEIGHT_DECAY]), p, g);
  if (mode != SGD_PLAIN)
    {
      __m256 buf = g;

      if (mode == SGD_MOMENTUM)
        buf = _mm256_fmadd_ps (_mm256_set1_ps (c[SGD_ONE_MINUS_DAMPENING]), g,
                               _mm256_mul_ps (mu, _mm256_loadu_ps (bufp)));
      _mm256_storeu_ps (bufp, buf);
      g = c[SGD_NESTEROV] != 0 ? _mm256_fmadd_ps (mu, buf, g) : buf;
    }
  return _mm256_fmadd_ps (_mm256_set1_ps (c[SGD_NEG_LR]), g, p);
}

static inline __attribute__ ((always_inline)) __m256
sgd_plain8 (const float *c, __m256 p, __m256 g, float *const *states, size_t i)
{
  return sgd_update8 (c, p, g, NULL, SGD_PLAIN);
}

static inline __attribute__ ((always_inline)) __m256
sgd_first8 (const float *c, __m256 p, __m256 g, float *const *states, size_t i)
{
  return sgd_update8 (c, p, g, states[0] + i, SGD_FIRST);
}

static inline __attribute__ ((always_inline)) __m256
sgd_momentum8 (const float *c, __m256 p, __m256 g, float *const *states, size_t i)
{
  return sgd_update8 (c, p, g, states[0] + i, SGD_MOMENTUM);
}

size_t
_mixprec_sgd_run_avx2 (const _MixprecOptimRange *range,
                       const float              *consts)
{
  switch ((SgdMode) consts[SGD_MODE])
    {
    case SGD_PLAIN:
      return _mixprec_optim_run_avx2 (range, consts, sgd_plain8);
    case SGD_FIRST:
      return _mixprec_optim_run_avx2 (range, consts, sgd_first8);
    default:
      return _mixprec_optim_run_avx2 (range, consts, sgd_momentum8);
    }
}
