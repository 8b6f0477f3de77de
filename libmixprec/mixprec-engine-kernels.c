/* mixprec-engine-kernels.c — element-wise CPU kernels of the step pipeline.
 * Values of any dtype are widened to FP32 a tile at a time with the
 * conversion kernels (SIMD where the CPU has it), so each kernel here is a
 * plain loop over floats. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec-engine-kernels-private.h"
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

/* The reference order: element i (of the whole range) adds its square to
 * lane i % 8, in the order of i. */
static void
sumsq_lanes_scalar (const gfloat *v,
                    gsize         n,
                    gdouble      *lane)
{
  for (gsize i = 0; i < n; i++)
    {
      gdouble x = v[i];
      lane[i & 7] += x * x;
    }
}

/* Tiles start on multiples of 8 elements, so a tile's element i lands in
 * lane i % 8 whatever the tiling, and the order of additions is fixed. */
G_STATIC_ASSERT (TILE % 8 == 0);

gdouble
_mixprec_kernel_sumsq_at_level (_MixprecSimdLevel level,
                                gconstpointer     src,
                                MixprecDType      dtype,
                                gsize             n)
{
  const _MixprecConvertKernels *k = _mixprec_convert_kernels_for_level (level);
  void (*lanes) (const gfloat *, gsize, gdouble *) = sumsq_lanes_scalar;
  gdouble lane[8] = { 0 };
  gfloat tile[TILE];

  if (k == NULL)
    k = _mixprec_convert_kernels_for_level (_MIXPREC_SIMD_SCALAR);
#ifdef MIXPREC_HAVE_X86_AVX512
  if (level >= _MIXPREC_SIMD_AVX512)
    lanes = _mixprec_avx512_sumsq_lanes;
#endif

  for (gsize off = 0; off < n; off += TILE)
    {
      gsize len = MIN ((gsize) TILE, n - off);

      lanes (widen (k, src, dtype, off, len, tile), len, lane);
    }
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

gdouble
_mixprec_kernel_sumsq (gconstpointer src,
                       MixprecDType  dtype,
                       gsize         n)
{
  return _mixprec_kernel_sumsq_at_level (_mixprec_cpu_simd_level (), src, dtype, n);
}
