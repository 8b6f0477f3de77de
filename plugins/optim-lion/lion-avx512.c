/* lion-avx512.c — _mixprec_lion_update() of numeric/numeric-optim.h (the
 * scalar reference, compiled by the C compiler and nvcc alike) sixteen
 * lanes at a time, same bits: the same operations in the same order,
 * FMA exactly where it calls _mixprec_num_fma(). */
#include "config.h"

#include "lion-kernels.h"
#include "optim-common-avx512.h"

static inline __attribute__ ((always_inline)) __m512
lion_update16 (const float  *c,
               __m512        p,
               __m512        g,
               float *const *states,
               size_t        i,
               __mmask16     k)
{
  float *mp = states[0] + i;
  __m512 m = _mm512_maskz_loadu_ps (k, mp);
  __m512 u = _mm512_fmadd_ps (_mm512_set1_ps (c[LION_ONE_MINUS_BETA1]), g,
                              _mm512_mul_ps (_mm512_set1_ps (c[LION_BETA1]), m));
  /* Ordered compares are false for NaN, so zeros and NaNs pass through. */
  __m512 s = _mm512_mask_mov_ps (u, _mm512_cmp_ps_mask (u, _mm512_setzero_ps (), _CMP_GT_OQ),
                                 _mm512_set1_ps (1.0f));

  s = _mm512_mask_mov_ps (s, _mm512_cmp_ps_mask (u, _mm512_setzero_ps (), _CMP_LT_OQ),
                          _mm512_set1_ps (-1.0f));
  m = _mm512_fmadd_ps (_mm512_set1_ps (c[LION_ONE_MINUS_BETA2]), g,
                       _mm512_mul_ps (_mm512_set1_ps (c[LION_BETA2]), m));
  _mm512_mask_storeu_ps (mp, k, m);
  p = _mm512_fmadd_ps (_mm512_set1_ps (c[LION_NEG_LR_DECAY]), p, p);
  return _mm512_fmadd_ps (_mm512_set1_ps (c[LION_NEG_LR]), s, p);
}

size_t
_mixprec_lion_run_avx512 (const _MixprecOptimRange *range,
                          const float              *consts)
{
  return _mixprec_optim_run_avx512 (range, consts, lion_update16);
}
