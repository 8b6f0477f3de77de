/* adamw-avx512.c — _mixprec_adamw_update() of numeric/numeric-optim.h (the
 * scalar reference, compiled by the C compiler and nvcc alike) sixteen
 * lanes at a time, same bits: the same operations in the same order,
 * FMA exactly where it calls _mixprec_num_fma(), correctly rounded
 * division and square root. */
#include "config.h"

#include "adamw-kernels.h"
#include "optim-common-avx512.h"

static inline __attribute__ ((always_inline)) __m512
adamw_update16 (const float  *c,
                __m512        p,
                __m512        g,
                float *const *states,
                size_t        i,
                __mmask16     k)
{
  float *mp = states[0] + i;
  float *vp = states[1] + i;
  __m512 m = _mm512_maskz_loadu_ps (k, mp);
  __m512 v = _mm512_maskz_loadu_ps (k, vp);
  __m512 denom;

  g = _mm512_fmadd_ps (_mm512_set1_ps (c[ADAMW_L2_DECAY]), p, g);
  m = _mm512_fmadd_ps (_mm512_set1_ps (c[ADAMW_ONE_MINUS_BETA1]), g,
                       _mm512_mul_ps (_mm512_set1_ps (c[ADAMW_BETA1]), m));
  v = _mm512_fmadd_ps (_mm512_set1_ps (c[ADAMW_ONE_MINUS_BETA2]), _mm512_mul_ps (g, g),
                       _mm512_mul_ps (_mm512_set1_ps (c[ADAMW_BETA2]), v));
  _mm512_mask_storeu_ps (mp, k, m);
  _mm512_mask_storeu_ps (vp, k, v);
  denom = _mm512_fmadd_ps (_mm512_sqrt_ps (v), _mm512_set1_ps (c[ADAMW_RSQRT_BC2]),
                           _mm512_set1_ps (c[ADAMW_EPS]));
  p = _mm512_fmadd_ps (_mm512_set1_ps (c[ADAMW_NEG_LR_DECAY]), p, p);
  return _mm512_fmadd_ps (_mm512_set1_ps (c[ADAMW_NEG_STEP_SIZE]), _mm512_div_ps (m, denom), p);
}

size_t
_mixprec_adamw_run_avx512 (const _MixprecOptimRange *range,
                           const float              *consts)
{
  return _mixprec_optim_run_avx512 (range, consts, adamw_update16);
}
