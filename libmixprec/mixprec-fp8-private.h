/* mixprec-fp8-private.h — the float8 cast kernels for the rest of the
 * library (the engine writes FP8 working copies with them) and for the
 * tests that hold the AVX2 and AVX-512 kernels to the scalar reference.
 * No GError: arguments are checked by the callers. */
#pragma once

#include <glib.h>

#include "numeric/numeric-fp8.h"

#ifdef MIXPREC_COMPILATION

#include "mixprec-dtype.h"
#include "mixprec-cpu-private.h"

G_BEGIN_DECLS

/* One SIMD level's kernels. @format is _MIXPREC_FP8_E4M3 or
 * _MIXPREC_FP8_E5M2; amaxes are running maxima of magnitudes as fp32 bits
 * (_mixprec_fp8_amax_bits()), NaN skipped. */
typedef struct {
  const gchar *name;
  /* dst[i] = _mixprec_fp8_cast (format, saturate, src[i], scale); when
   * @amax_bits is not NULL, it also takes the running maximum of |src[i]|. */
  void (*quantize)    (guint         format,
                       gboolean      saturate,
                       gfloat        scale,
                       const gfloat *src,
                       guint8       *dst,
                       gsize         n,
                       guint32      *amax_bits);
  void (*amax)        (const gfloat *src,
                       gsize         n,
                       guint32      *amax_bits);
  /* Blocks of @block_size (> 0) elements, the last one possibly partial:
   * scales[b] and the elements of block b, as numeric-fp8.h defines them. */
  void (*mx_quantize) (guint         format,
                       guint         block_size,
                       const gfloat *src,
                       gsize         n,
                       guint8       *dst,
                       guint8       *scales);
} _MixprecFp8Kernels;

extern const _MixprecFp8Kernels _mixprec_fp8_kernels_scalar;
#ifdef MIXPREC_HAVE_X86_SIMD
extern const _MixprecFp8Kernels _mixprec_fp8_kernels_avx2;
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
extern const _MixprecFp8Kernels _mixprec_fp8_kernels_avx512;
#endif

/* The table for @level, or NULL when this build has no such kernels. */
const _MixprecFp8Kernels *_mixprec_fp8_kernels_for_level (_MixprecSimdLevel level);

/* The table chosen once for this process from _mixprec_cpu_simd_level(). */
const _MixprecFp8Kernels *_mixprec_fp8_kernels (void);

/* _MIXPREC_FP8_E4M3 or _MIXPREC_FP8_E5M2 for a float8 @dt. */
static inline guint
_mixprec_fp8_format (MixprecDType dt)
{
  return dt == MIXPREC_DTYPE_FLOAT8_E5M2 ? _MIXPREC_FP8_E5M2 : _MIXPREC_FP8_E4M3;
}

/* The entry points of the engine, dispatched at run time, bit-identical
 * at every SIMD level. @dt must be a float8 dtype, @scale finite and
 * positive, @block_size positive. */

/* dst[i] = float8 (src[i] * scale), saturating or as torch's cast; when
 * @amax is not NULL, *amax = fmaxf (*amax, max |src[i]|), NaN skipped. */
void   _mixprec_fp8_quantize_f32   (MixprecDType  dt,
                                    gboolean      saturate,
                                    gfloat        scale,
                                    const gfloat *src,
                                    guint8       *dst,
                                    gsize         n,
                                    gfloat       *amax);

/* *amax = fmaxf (*amax, max |src[i]|), NaN skipped. */
void   _mixprec_fp8_amax_f32       (const gfloat *src,
                                    gsize         n,
                                    gfloat       *amax);

/* MX blocks: dst[n] elements and scales[ceil (n / block_size)]. */
void   _mixprec_mx_quantize_f32    (MixprecDType  dt,
                                    guint         block_size,
                                    const gfloat *src,
                                    gsize         n,
                                    guint8       *dst,
                                    guint8       *scales);

/* _mixprec_mx_quantize_f32() with the scales of @mode (a
 * MixprecMxScaleMode; FLOOR is _mixprec_mx_quantize_f32()). */
void   _mixprec_mx_quantize_f32_mode (MixprecDType  dt,
                                      guint         mode,
                                      guint         block_size,
                                      const gfloat *src,
                                      gsize         n,
                                      guint8       *dst,
                                      guint8       *scales);

/* dst[i] = decode (src[i]) * scale_inv. */
void   _mixprec_fp8_dequantize_f32 (MixprecDType  dt,
                                    gfloat        scale_inv,
                                    const guint8 *src,
                                    gfloat       *dst,
                                    gsize         n);

/* dst[i] = decode (src[i]) * 2^(scales[i / block_size] - 127). */
void   _mixprec_mx_dequantize_f32  (MixprecDType  dt,
                                    guint         block_size,
                                    const guint8 *src,
                                    const guint8 *scales,
                                    gfloat       *dst,
                                    gsize         n);

/* The value of an E8M0 scale byte: 2^(e - 127), NaN for 0xFF. */
gfloat _mixprec_e8m0_to_f32        (guint8        e);

G_END_DECLS

#endif /* MIXPREC_COMPILATION */
