/* sgd-avx512.c — _mixprec_sgd_update() of numeric/numeric-optim.h (the
 * scalar reference, compiled by the C compiler and nvcc alike) sixteen
 * lanes at a time, same bits: the same operations in the same order,
 * FMA exactly where it calls _mixprec_num_fma(). */
#include "config.h"

#include "sgd-kernels.h"
#include "optim-common-avx512.h"

static inline __attribute__ ((always_inline)) __m512
sgd_update16 (const float *c,
              __m512       p,
              __m512       g,
              float       *bufp,
              __mmask16    k,
              SgdMode      mode)
{
  const __m512 mu = _mm512_set1_ps (c[SGD_MOMENTUM_COEF]);

  g = _mm512_fmadd_ps (_mm512_set1_ps (c[SGD_WEIGHT_DECAY]), p, g);
  if (mode != SGD_PLAIN)
    {
      __m512 buf = g;

      if (mode == SGD_MOMENTUM)
        buf = _mm512_fmadd_ps (_mm512_set1_ps (c[SGD_ONE_MINUS_DAMPENING]), g,
                               _mm512_mul_ps (mu, _mm512_maskz_loadu_ps (k, bufp)));
      _mm512_mask_storeu_ps (bufp, k, buf);
      g = c[SGD_NESTEROV] != 0 ? _mm512_fmadd_ps (mu, buf, g) : buf;
    }
  return _mm512_fmadd_ps (_mm512_set1_ps (c[SGD_NEG_LR]), g, p);
}

static inline __attribute__ ((always_inline)) __m512
sgd_plain16 (const float *c, __m512 p, __m512 g, float *const *states, size_t i, __mmask16 k)
{
  return sgd_update16 (c, p, g, NULL, k, SGD_PLAIN);
}

static inline __attribute__ ((always_inline)) __m512
sgd_first16 (const float *c, __m512 p, __m512 g, float *const *states, size_t i, __mmask16 k)
{
  return sgd_update16 (c, p, g, states[0] + i, k, SGD_FIRST);
}

static inline __attribute__ ((always_inline)) __m512
sgd_momentum16 (const float *c, __m512 p, __m512 g, float *const *states, size_t i, __mmask16 k)
{
  return sgd_update16 (c, p, g, states[0] + i, k, SGD_MOMENTUM);
}

size_t
_mixprec_sgd_run_avx512 (const _MixprecOptimRange *range,
                         const float              *consts)
{
  switch ((SgdMode) consts[SGD_MODE])
    {
    case SGD_PLAIN:
      return _mixprec_optim_run_avx512 (range, consts, sgd_plain16);
    case SGD_FIRST:
      return _mixprec_optim_run_avx512 (range, consts, sgd_first16);
    default:
      return _mixprec_optim_run_avx512 (range, consts, sgd_momentum16);
    }
}
