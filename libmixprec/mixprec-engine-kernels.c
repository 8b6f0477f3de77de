/* mixprec-engine-kernels.c — element-wise CPU kernels of the step pipeline.
 * Values of any dtype are widened to FP32 a tile at a time with the
 * conversion kernels (SIMD where the CPU has it), so each kernel here is a
 * plain loop over floats. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec-engine-kernels-private.h"
#include "mixprec-cpu-private.h"
#include "mixprec-dtype-private.h"

#define TILE 2048

static const gfloat *
widen (const _MixprecConvertKernels *k,
       gconstpointer                 src,
       MixprecDType                  dtype,
       gsize                         offset,
       gsize                         n,
       gfloat                       *tile)
{
  const guint8 *base = (const guint8 *) src + offset * mixprec_dtype_get_size (dtype);

  if (dtype == MIXPREC_DTYPE_FLOAT32)
    return (const gfloat *) base;
  k->to_f32[dtype] (base, tile, n, 0, 0);
  return tile;
}

void
_mixprec_kernel_fold (gpointer      dst,
                      MixprecDType  dst_dtype,
                      gconstpointer src,
                      MixprecDType  src_dtype,
                      gsize         n,
                      gboolean      first)
{
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  gsize dst_size = mixprec_dtype_get_size (dst_dtype);
  gfloat a[TILE], b[TILE];

  /* A first term of the same dtype is a copy: widening and rounding back
   * would give the same bits at a third of memcpy's speed. */
  if (first && dst_dtype == src_dtype)
    {
      if (dst != src)
        memmove (dst, src, n * dst_size);
      return;
    }

  for (gsize off = 0; off < n; off += TILE)
    {
      gsize len = MIN ((gsize) TILE, n - off);
      guint8 *out = (guint8 *) dst + off * dst_size;
      const gfloat *g = widen (k, src, src_dtype, off, len, a);

      if (!first)
        {
          const gfloat *acc = widen (k, dst, dst_dtype, off, len, b);

          for (gsize i = 0; i < len; i++)
            b[i] = acc[i] + g[i];
          g = b;
        }
      if (dst_dtype == MIXPREC_DTYPE_FLOAT32)
        {
          if ((gconstpointer) g != (gconstpointer) out)
            memmove (out, g, len * sizeof (gfloat));
        }
      else
        k->from_f32_rne[dst_dtype] (g, out, len, 0, 0);
    }
}

void
_mixprec_kernel_scale (gpointer      buf,
                       MixprecDType  dtype,
                       gsize         n,
                       gfloat        factor)
{
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  gsize size = mixprec_dtype_get_size (dtype);
  gfloat tile[TILE];

  for (gsize off = 0; off < n; off += TILE)
    {
      gsize len = MIN ((gsize) TILE, n - off);
      guint8 *p = (guint8 *) buf + off * size;
      gfloat *v = (gfloat *) widen (k, buf, dtype, off, len, tile);

      if (v != tile)
        {
          memcpy (tile, v, len * sizeof (gfloat));
          v = tile;
        }
      for (gsize i = 0; i < len; i++)
        v[i] *= factor;
      if (dtype == MIXPREC_DTYPE_FLOAT32)
        memcpy (p, v, len * sizeof (gfloat));
      else
        k->from_f32_rne[dtype] (v, p, len, 0, 0);
    }
}

gdouble
_mixprec_kernel_sumsq (gconstpointer src,
                       MixprecDType  dtype,
                       gsize         n)
{
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  gdouble lane[8] = { 0 };
  gfloat tile[TILE];
  gsize j = 0;

  for (gsize off = 0; off < n; off += TILE)
    {
      gsize len = MIN ((gsize) TILE, n - off);
      const gfloat *v = widen (k, src, dtype, off, len, tile);

      /* Element i always lands in lane i % 8 of the whole range, whatever
       * the tiling, so the order of additions is fixed. */
      for (gsize i = 0; i < len; i++, j++)
        {
          gdouble x = v[i];
          lane[j & 7] += x * x;
        }
    }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

typedef gdouble (*SumsqFunc) (gconstpointer src, MixprecDType dtype, gsize n);

gdouble
_mixprec_kernel_sumsq_best (gconstpointer src,
                            MixprecDType  dtype,
                            gsize         n)
{
  static gsize chosen = 0;

  if (g_once_init_enter (&chosen))
    {
      SumsqFunc f = _mixprec_kernel_sumsq;

#ifdef MIXPREC_HAVE_X86_SIMD
      if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2)
        f = _mixprec_kernel_sumsq_avx2;
#endif
      g_once_init_leave (&chosen, (gsize) f);
    }
  return ((SumsqFunc) chosen) (src, dtype, n);
}

void
_mixprec_kernel_sumsq_blocks_best (gconstpointer src,
                                   MixprecDType  dtype,
                                   gsize         n_blocks,
                                   gdouble      *out)
{
  gsize stride = _MIXPREC_SUMSQ_BLOCK * mixprec_dtype_get_size (dtype);

#ifdef MIXPREC_HAVE_X86_SIMD
  if (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2)
    {
      _mixprec_kernel_sumsq_blocks_avx2 (src, dtype, n_blocks, out);
      return;
    }
#endif
  for (gsize k = 0; k < n_blocks; k++)
    out[k] = _mixprec_kernel_sumsq ((const guint8 *) src + k * stride, dtype, _MIXPREC_SUMSQ_BLOCK);
}

void
_mixprec_kernel_fold_zero_best (gpointer      dst,
                                MixprecDType  dst_dtype,
                                gpointer      src,
                                MixprecDType  src_dtype,
                                gsize         n,
                                gboolean      first)
{
#ifdef MIXPREC_HAVE_X86_SIMD
  static gsize avx2 = 0;

  if (g_once_init_enter (&avx2))
    g_once_init_leave (&avx2, 1 + (_mixprec_cpu_simd_level () >= _MIXPREC_SIMD_AVX2));
  if (avx2 == 2 && dst_dtype == MIXPREC_DTYPE_FLOAT32 &&
      _mixprec_kernel_fold_zero_avx2 (dst, src, src_dtype, n, first))
    return;
#endif
  _mixprec_kernel_fold (dst, dst_dtype, src, src_dtype, n, first);
  memset (src, 0, n * mixprec_dtype_get_size (src_dtype));
}
