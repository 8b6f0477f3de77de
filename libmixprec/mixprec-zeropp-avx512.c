/* mixprec-zeropp-avx512.c — ZeRO++'s block codes sixteen lanes at a time,
 * bit-identical to the scalar kernel of mixprec-zeropp.c (the rules of
 * numeric/numeric-zeropp.h). Compiled with AVX-512 enabled; called only
 * after _mixprec_cpu_simd_level() said the CPU runs it. */
#include "config.h"

#include "mixprec-avx512-private.h"
#include "mixprec-zeropp-private.h"
#include "numeric/numeric-zeropp.h"

static gfloat
codes_avx512 (const guint16 *h,
              gsize          n,
              guint          bits,
              gint8         *codes)
{
  const __m512i nan_from = _MIXPREC_AVX512_I32 (0x7C00), none = _MIXPREC_AVX512_I32 (-1);
  const __m512 hi = _mm512_set1_ps ((gfloat) ((1 << (bits - 1)) - 1));
  const __m512 lo = _mm512_set1_ps ((gfloat) -(1 << (bits - 1)));
  __m512i best = none;
  __m512 scale;
  gfloat s;

  /* The largest magnitude, as bits: fp16 NaNs (above 0x7C00) count -1. */
  for (gsize i = 0; i < n; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (n - i);
      __m512i a = _mm512_and_si512 (_mm512_cvtepu16_epi32 (_mm256_maskz_loadu_epi16 (m, h + i)),
                                    _MIXPREC_AVX512_I32 (0x7FFF));

      a = _mm512_mask_mov_epi32 (a, _mm512_cmpgt_epi32_mask (a, nan_from), none);
      best = _mm512_mask_max_epi32 (best, m, best, a);
    }
  s = _mixprec_zpp_scale_of_mag (_mm512_reduce_max_epi32 (best), bits);
  scale = _mm512_set1_ps (s);
  /* rint, then the clamp; a NaN product codes as 0. */
  for (gsize i = 0; i < n; i += 16)
    {
      __mmask16 m = _mixprec_avx512_mask (n - i);
      __m512 v = _mm512_mul_ps (_mm512_cvtph_ps (_mm256_maskz_loadu_epi16 (m, h + i)), scale);
      __mmask16 number = _mm512_cmp_ps_mask (v, v, _CMP_ORD_Q);
      __m512 r = _mm512_roundscale_ps (v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);

      r = _mm512_min_ps (_mm512_max_ps (r, lo), hi);
      _mm512_mask_cvtepi32_storeu_epi8 (codes + i, m, _mm512_maskz_cvtps_epi32 (number, r));
    }
  return s;
}

const _MixprecZeroppKernels _mixprec_zeropp_kernels_avx512 = { codes_avx512 };
