/* adamw-avx2.c — _mixprec_adamw_update() of numeric/numeric-optim.h (the
 * scalar reference, compiled by the C compiler and nvcc alike) eight
 * lanes at a time, same bits: the same operations in the same order,
 * FMA exactly where it calls _mixprec_num_fma(), correctly rounded
 * division and square root. */
#include "config.h"

#include "adamw-kernels.h"
#include "optim-common-avx2.h"

static inline __attribute__ ((always_inline)) __m256
adamw_update8 (const float  *c,
               __m256        p,
               __m256        g,
               float *const *states,
               size_t        i)
{
  float *mp = states[0] + i;
  float *vp = states[1] + i;
  __m256 m = _mm256_loadu_ps (mp);
  __m256 v = _mm256_loadu_ps (vp);
  __m256 denom;

  g = _mm256_fmadd_ps (_mm256_set1_ps (c[ADAMW_L2_DECAY]), p, g);
  m = _mm256_fmadd_ps (_mm256_set1_ps (c[ADAMW_ONE_MINUS_BETA1]), g,
                       _mm256_mul_ps (_mm256_set1_ps (c[ADAMW_BETA1]), m));
  v = _mm256_fmadd_ps (_mm256_set1_ps (c[ADAMW_ONE_MINUS_BETA2]), _mm256_mul_ps (g, g),
                       _mm256_mul_ps (_mm256_set1_ps (c[ADAMW_BETA2]), v));
  _mm256_storeu_ps (mp, m);
  _mm256_storeu_ps (vp, v);
  denom = _mm256_fmadd_ps (_mm256_sqrt_ps (v), _mm256_set1_ps (c[ADAMW_RSQRT_BC2]),
                           _mm256_set1_ps (c[ADAMW_EPS]));
  p = _mm256_fmadd_ps (_mm256_set1_ps (c[ADAMW_NEG_LR_DECAY]), p, p);
  return _mm256_fmadd_ps (_mm256_set1_ps (c[ADAMW_NEG_STEP_SIZE]), _mm256_div_ps (m, denom), p);
}

size_t
_mixprec_adamw_run_avx2 (const _MixprecOptimRange *range,
                         const float              *consts)
{
  return _mixprec_optim_run_avx2 (range, consts, adamw_update8);
}
