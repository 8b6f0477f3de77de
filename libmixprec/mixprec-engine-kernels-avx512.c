/* mixprec-engine-kernels-avx512.c — the inner loop of the engine's sum of
 * squares, eight doubles at a time. Compiled with $(MIXPREC_AVX512_CFLAGS);
 * called only after _mixprec_cpu_simd_level() said AVX-512. */
#include "config.h"

#include <immintrin.h>

#include "mixprec-engine-kernels-private.h"

/* Lane k of one vector is the scalar loop's lane[k]: element i lands in
 * lane i % 8, and each lane adds its squares in the order of i, so the
 * sums are the scalar ones bit for bit. The square of a float is exact in
 * double, so the product rounds nothing; the add stays separate (and
 * keeps the scalar code's operand order) all the same. The tail adds only
 * in its own lanes, under a mask. */
void
_mixprec_avx512_sumsq_lanes (const gfloat *v,
                             gsize         n,
                             gdouble      *lane)
{
  __m512d acc = _mm512_loadu_pd (lane);
  gsize i = 0;

  for (; i + 8 <= n; i += 8)
    {
      __m512d x = _mm512_cvtps_pd (_mm256_loadu_ps (v + i));

      acc = _mm512_add_pd (acc, _mm512_mul_pd (x, x));
    }
  if (i < n)
    {
      __mmask8 m = (__mmask8) ((1u << (n - i)) - 1);
      __m512d x = _mm512_cvtps_pd (_mm256_maskz_loadu_ps (m, v + i));

      acc = _mm512_mask_add_pd (acc, m, acc, _mm512_mul_pd (x, x));
    }
  _mm512_storeu_pd (lane, acc);
}
