/* lion-avx2.c — _mixprec_lion_update() of numeric/numeric-optim.h (the
 * scalar reference, compiled by the C compiler and nvcc alike) eight
 * lanes at a time, same bits: the same operations in the same order,
 * FMA exactly where it calls _mixprec_num_fma(). */
#include "config.h"

#include "lion-kernels.h"
#include "optim-common-avx2.h"

static inline __attribute__ ((always_inline)) __m256
lion_update8 (const float  *c,
              __m256        p,
              __m256        g,
              float *const *states,
              size_t        i)
{
  float *mp = states[0] + i;
  __m256 m = _mm256_loadu_ps (mp);
  __m256 u = _mm256_fmadd_ps (_mm256_set1_ps (c[LION_ONE_MINUS_BETA1]), g,
                              _mm256_mul_ps (_mm256_set1_ps (c[LION_BETA1]), m));
  /* Ordered compares are false for NaN, so zeros and NaNs pass through. */
  __m256 s = _mm256_blendv_ps (u, _mm256_set1_ps (1.0f), _mm256_cmp_ps (u, _mm256_setzero_ps (), _CMP_GT_OQ));

  s = _mm256_blendv_ps (s, _mm256_set1_ps (-1.0f), _mm256_cmp_ps (u, _mm256_setzero_ps (), _CMP_LT_OQ));
  m = _mm256_fmadd_ps (_mm256_set1_ps (c[LION_ONE_MINUS_BETA2]), g,
                       _mm256_mul_ps (_mm256_set1_ps (c[LION_BETA2]), m));
  _mm256_storeu_ps (mp, m);
  p = _mm256_fmadd_ps (_mm256_set1_ps (c[LION_NEG_LR_DECAY]), p, p);
  return _mm256_fmadd_ps (_mm256_set1_ps (c[LION_NEG_LR]), s, p);
}

size_t
_mixprec_lion_run_avx2 (const _MixprecOptimRange *range,
                        const float              *consts)
{
  return _mixprec_optim_run_avx2 (range, consts, lion_update8);
}
