/* mixprec-engine-kernels-avx512.c — the float loops of the engine's
 * kernels (fold's add, scale's multiply, the sum of squares) sixteen
 * floats or eight doubles at a time, with the bits of the scalar loops.
 * Compiled with $(MIXPREC_AVX512_CFLAGS); called only after
 * _mixprec_cpu_simd_level() said AVX-512. */
#include "config.h"

#include <immintrin.h>

#include "mixprec-engine-kernels-private.h"

/* Where two NaNs meet, x86 returns the first operand's, quieted: the
 * scalar loops' acc + g and v * factor give acc's and v's. The compiler
 * may swap the operands of a vector add or multiply, so the kernels below
 * put that payload back themselves instead of relying on the order. */
static inline __m512
first_nan (__m512 r,
           __m512 first)
{
  __m512i f = _mm512_castps_si512 (first);

  return _mm512_castsi512_ps (_mm512_mask_or_epi32 (_mm512_castps_si512 (r),
                                                    _mm512_cmp_ps_mask (first, first, _CMP_UNORD_Q),
                                                    f, _mm512_set1_epi32 (0x00400000)));
}

void
_mixprec_avx512_add_f32 (gfloat       *out,
                         const gfloat *acc,
                         const gfloat *g,
                         gsize         n)
{
  gsize i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m512 a = _mm512_loadu_ps (acc + i);

      _mm512_storeu_ps (out + i, first_nan (_mm512_add_ps (a, _mm512_loadu_ps (g + i)), a));
    }
  if (i < n)
    {
      __mmask16 m = (__mmask16) ((1u << (n - i)) - 1);
      __m512 a = _mm512_maskz_loadu_ps (m, acc + i);

      _mm512_mask_storeu_ps (out + i, m, first_nan (_mm512_add_ps (a, _mm512_maskz_loadu_ps (m, g + i)), a));
    }
}

void
_mixprec_avx512_scale_f32 (gfloat *v,
                           gsize   n,
                           gfloat  factor)
{
  const __m512 f = _mm512_set1_ps (factor);
  gsize i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m512 x = _mm512_loadu_ps (v + i);

      _mm512_storeu_ps (v + i, first_nan (_mm512_mul_ps (x, f), x));
    }
  if (i < n)
    {
      __mmask16 m = (__mmask16) ((1u << (n - i)) - 1);
      __m512 x = _mm512_maskz_loadu_ps (m, v + i);

      _mm512_mask_storeu_ps (v + i, m, first_nan (_mm512_mul_ps (x, f), x));
    }
}

/* Lane k of one vector is the scalar loop's lane[k]: element i lands in
 * lane i % 8, and each lane adds its squares in the order of i, so the
 * sums are the scalar ones bit for bit. The square of a float is exact in
 * double, so the product rounds nothing; the add stays separate all the
 * same. A NaN sum is only ever tested for being non-finite, so its
 * payload is left to the hardware. The tail adds only in its own lanes,
 * under a mask. */
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
