/* mixprec-engine-kernels.c — element-wise CPU kernels of the step pipeline.
 * Values of any dtype are widened to FP32 a tile at a time with the
 * conversion kernels (SIMD where the CPU has it), so each kernel here is a
 * plain loop over floats (AVX-512 where the CPU has it). */
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

/* ------------------------------------------------------------ float loops
 *
 * The scalar references; the AVX-512 ones of
 * mixprec-engine-kernels-avx512.c give the same bits, including which
 * NaN's payload survives where two meet (the first operand's, on x86).
 * The sum of squares is only ever tested for being finite: where it is
 * not, its NaN payload is unspecified. */

static void
add_scalar (gfloat       *out,
            const gfloat *acc,
            const gfloat *g,
            gsize         n)
{
  for (gsize i = 0; i < n; i++)
    out[i] = acc[i] + g[i];
}

static void
scale_scalar (gfloat *v,
              gsize   n,
              gfloat  factor)
{
  for (gsize i = 0; i < n; i++)
    v[i] *= factor;
}

/* The element-wise sum of squares: element i (of the whole range) adds
 * its square to lane i % 8, in the order of i. */
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

typedef struct {
  const _MixprecConvertKernels *convert;
  void (*add)         (gfloat *out, const gfloat *acc, const gfloat *g, gsize n);
  void (*scale)       (gfloat *v, gsize n, gfloat factor);
  void (*sumsq_lanes) (const gfloat *v, gsize n, gdouble *lane);
} Kernels;

static void
kernels_for_level (_MixprecSimdLevel level,
                   Kernels          *k)
{
  k->convert = _mixprec_convert_kernels_for_level (level);
  if (k->convert == NULL)
    k->convert = _mixprec_convert_kernels_for_level (_MIXPREC_SIMD_SCALAR);
  k->add = add_scalar;
  k->scale = scale_scalar;
  k->sumsq_lanes = sumsq_lanes_scalar;
#ifdef MIXPREC_HAVE_X86_AVX512
  if (level >= _MIXPREC_SIMD_AVX512)
    {
      k->add = _mixprec_avx512_add_f32;
      k->scale = _mixprec_avx512_scale_f32;
      k->sumsq_lanes = _mixprec_avx512_sumsq_lanes;
    }
#endif
}

/* ------------------------------------------------------------ kernels */

void
_mixprec_kernel_fold_at_level (_MixprecSimdLevel level,
                               gpointer          dst,
                               MixprecDType      dst_dtype,
                               gconstpointer     src,
                               MixprecDType      src_dtype,
                               gsize             n,
                               gboolean          first)
{
  Kernels kernels;
  const _MixprecConvertKernels *k;
  gsize dst_size = mixprec_dtype_get_size (dst_dtype);
  gfloat a[TILE], b[TILE];

  kernels_for_level (level, &kernels);
  k = kernels.convert;

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

          kernels.add (b, acc, g, len);
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
_mixprec_kernel_fold (gpointer      dst,
                      MixprecDType  dst_dtype,
                      gconstpointer src,
                      MixprecDType  src_dtype,
                      gsize         n,
                      gboolean      first)
{
  _mixprec_kernel_fold_at_level (_mixprec_cpu_simd_level (), dst, dst_dtype, src, src_dtype, n, first);
}

void
_mixprec_kernel_scale_at_level (_MixprecSimdLevel level,
                                gpointer          buf,
                                MixprecDType      dtype,
                                gsize             n,
                                gfloat            factor)
{
  Kernels kernels;
  const _MixprecConvertKernels *k;
  gsize size = mixprec_dtype_get_size (dtype);
  gfloat tile[TILE];

  kernels_for_level (level, &kernels);
  k = kernels.convert;

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
      kernels.scale (v, len, factor);
      if (dtype == MIXPREC_DTYPE_FLOAT32)
        memcpy (p, v, len * sizeof (gfloat));
      else
        k->from_f32_rne[dtype] (v, p, len, 0, 0);
    }
}

void
_mixprec_kernel_scale (gpointer      buf,
                       MixprecDType  dtype,
                       gsize         n,
                       gfloat        factor)
{
  _mixprec_kernel_scale_at_level (_mixprec_cpu_simd_level (), buf, dtype, n, factor);
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
  Kernels kernels;
  gdouble lane[8] = { 0 };
  gfloat tile[TILE];

  kernels_for_level (level, &kernels);

  for (gsize off = 0; off < n; off += TILE)
    {
      gsize len = MIN ((gsize) TILE, n - off);

      kernels.sumsq_lanes (widen (kernels.convert, src, dtype, off, len, tile), len, lane);
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
