/* mixprec-engine-kernels-avx2.c — AVX2 versions of the engine's kernels
 * that bound a step: folding gradients into an FP32 accumulator, and the
 * sum of squares of _mixprec_kernel_sumsq() (the same eight double lanes
 * in two four-lane registers, so the same additions in the same order).
 * Compiled with -mavx2 -mf16c -mfma; called only on a CPU that has them. */
#include "config.h"

#include <immintrin.h>
#include <string.h>

#include "mixprec-engine-kernels-private.h"
#include "mixprec-dtype-private.h"

/* Eight values of @dtype at @p widened to FP32 (exactly, as the scalar
 * conversions do: every bf16, fp16 and fp32 value is an FP32 value). */
static inline __m256
load8 (const guint8 *p, MixprecDType dtype)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_BFLOAT16:
      return _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) p)), 16));
    case MIXPREC_DTYPE_FLOAT16:
      return _mm256_cvtph_ps (_mm_loadu_si128 ((const __m128i *) p));
    default:
      return _mm256_loadu_ps ((const float *) p);
    }
}

gdouble
_mixprec_kernel_sumsq_avx2 (gconstpointer src,
                            MixprecDType  dtype,
                            gsize         n)
{
  const guint8 *p = src;
  gsize size = mixprec_dtype_get_size (dtype);
  __m256d lo = _mm256_setzero_pd (), hi = _mm256_setzero_pd ();
  gdouble lane[8];
  gfloat tail[8];
  gsize i = 0;

  if (dtype != MIXPREC_DTYPE_BFLOAT16 && dtype != MIXPREC_DTYPE_FLOAT16 && dtype != MIXPREC_DTYPE_FLOAT32)
    return _mixprec_kernel_sumsq (src, dtype, n);

  /* Element i goes to lane i % 8: lanes 0-3 in @lo, 4-7 in @hi. Squares of
   * FP32 values are exact in double, so fusing the multiply into the add
   * cannot change a bit, and no FMA is used anyway. */
  for (; i + 8 <= n; i += 8)
    {
      __m256 v = load8 (p + i * size, dtype);
      __m256d a = _mm256_cvtps_pd (_mm256_castps256_ps128 (v));
      __m256d b = _mm256_cvtps_pd (_mm256_extractf128_ps (v, 1));

      lo = _mm256_add_pd (lo, _mm256_mul_pd (a, a));
      hi = _mm256_add_pd (hi, _mm256_mul_pd (b, b));
    }
  _mm256_storeu_pd (lane, lo);
  _mm256_storeu_pd (lane + 4, hi);
  if (i < n)
    {
      const gfloat *v = tail;

      if (dtype == MIXPREC_DTYPE_FLOAT32)
        v = (const gfloat *) (p + i * size);
      else
        _mixprec_convert_kernels ()->to_f32[dtype] (p + i * size, tail, n - i, 0, 0);
      for (gsize k = 0; i + k < n; k++)
        {
          gdouble x = v[k];

          lane[k] += x * x;
        }
    }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

gboolean
_mixprec_kernel_fold_zero_avx2 (gfloat       *dst,
                                gpointer      src,
                                MixprecDType  src_dtype,
                                gsize         n,
                                gboolean      first)
{
  guint8 *p = src;
  gsize size = mixprec_dtype_get_size (src_dtype);
  gsize i = 0;

  if (src_dtype != MIXPREC_DTYPE_BFLOAT16 && src_dtype != MIXPREC_DTYPE_FLOAT16 &&
      src_dtype != MIXPREC_DTYPE_FLOAT32)
    return FALSE;
  /* One FP32 addition per element, as in _mixprec_kernel_fold(); the
   * gradient is zeroed as soon as it is read. */
  for (; i + 8 <= n; i += 8)
    {
      __m256 v = load8 (p + i * size, src_dtype);

      if (!first)
        v = _mm256_add_ps (_mm256_loadu_ps (dst + i), v);
      _mm256_storeu_ps (dst + i, v);
      if (size == 2)
        _mm_storeu_si128 ((__m128i *) (p + i * size), _mm_setzero_si128 ());
      else
        _mm256_storeu_si256 ((__m256i *) (p + i * size), _mm256_setzero_si256 ());
    }
  if (i < n)
    {
      _mixprec_kernel_fold (dst + i, MIXPREC_DTYPE_FLOAT32, p + i * size, src_dtype, n - i, first);
      memset (p + i * size, 0, (n - i) * size);
    }
  return TRUE;
}

/* Sums of squares of four whole blocks at once: each block keeps its own
 * eight lanes and order, and the four interleaved chains of additions
 * keep the core busy where one block's two would wait on each other. */
static void
sumsq4 (const guint8 *p, MixprecDType dtype, gsize size, gdouble *out)
{
  const gsize stride = _MIXPREC_SUMSQ_BLOCK * size;
  __m256d lo[4], hi[4];

  for (guint b = 0; b < 4; b++)
    lo[b] = hi[b] = _mm256_setzero_pd ();
  for (gsize i = 0; i < _MIXPREC_SUMSQ_BLOCK; i += 8)
    for (guint b = 0; b < 4; b++)
      {
        __m256 v = load8 (p + b * stride + i * size, dtype);
        __m256d x = _mm256_cvtps_pd (_mm256_castps256_ps128 (v));
        __m256d y = _mm256_cvtps_pd (_mm256_extractf128_ps (v, 1));

        lo[b] = _mm256_add_pd (lo[b], _mm256_mul_pd (x, x));
        hi[b] = _mm256_add_pd (hi[b], _mm256_mul_pd (y, y));
      }
  for (guint b = 0; b < 4; b++)
    {
      gdouble lane[8];

      _mm256_storeu_pd (lane, lo[b]);
      _mm256_storeu_pd (lane + 4, hi[b]);
      out[b] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
               ((lane[4] + lane[5]) + (lane[6] + lane[7]));
    }
}

void
_mixprec_kernel_sumsq_blocks_avx2 (gconstpointer src,
                                   MixprecDType  dtype,
                                   gsize         n_blocks,
                                   gdouble      *out)
{
  const guint8 *p = src;
  gsize size = mixprec_dtype_get_size (dtype);
  gsize k = 0;

  if (dtype == MIXPREC_DTYPE_BFLOAT16 || dtype == MIXPREC_DTYPE_FLOAT16 || dtype == MIXPREC_DTYPE_FLOAT32)
    for (; k + 4 <= n_blocks; k += 4)
      sumsq4 (p + k * _MIXPREC_SUMSQ_BLOCK * size, dtype, size, out + k);
  for (; k < n_blocks; k++)
    out[k] = _mixprec_kernel_sumsq_avx2 (p + k * _MIXPREC_SUMSQ_BLOCK * size, dtype, _MIXPREC_SUMSQ_BLOCK);
}
