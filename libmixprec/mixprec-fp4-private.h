/* mixprec-fp4-private.h — the E2M1 cast kernels of the 4-bit block recipes,
 * one table per SIMD level, for mixprec-fp4.c and for the tests that hold
 * the AVX2 and AVX-512 kernels to the scalar reference. */
#pragma once

#include <glib.h>

#include "numeric/numeric-fp4.h"

#ifdef MIXPREC_COMPILATION

#include "mixprec-cpu-private.h"

G_BEGIN_DECLS

/* What is done to an element before its cast (numeric-fp4.h):
 * NONE: nothing (mixprec_fp4_pack()); DIV: x / factor (MXFP4 FLOOR, CEIL,
 * EVEN); MUL_CLAMP: x * factor clamped to ±6, NaN passing (MXFP4 RCEIL,
 * NVFP4). */
#define _MIXPREC_FP4_OP_NONE 0u
#define _MIXPREC_FP4_OP_DIV 1u
#define _MIXPREC_FP4_OP_MUL_CLAMP 2u

typedef struct {
  const gchar *name;
  /* For i < @n (even): the E2M1 code of op (src[i], factor), rounded to
   * nearest even or, when @stochastic, with the random word
   * _mixprec_sr_bits (seed, first_index + i); packed two per byte into
   * dst[i / 2], element 2j in the low nibble. */
  void (*cast) (guint         op,
                gfloat        factor,
                const gfloat *src,
                gsize         n,
                gboolean      stochastic,
                guint64       seed,
                guint64       first_index,
                guint8       *dst);
} _MixprecFp4Kernels;

extern const _MixprecFp4Kernels _mixprec_fp4_kernels_scalar;
#ifdef MIXPREC_HAVE_X86_SIMD
extern const _MixprecFp4Kernels _mixprec_fp4_kernels_avx2;
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
extern const _MixprecFp4Kernels _mixprec_fp4_kernels_avx512;
#endif

/* The table for @level, or NULL when this build has no such kernels. */
const _MixprecFp4Kernels *_mixprec_fp4_kernels_for_level (_MixprecSimdLevel level);

/* The table chosen once for this process from _mixprec_cpu_simd_level(). */
const _MixprecFp4Kernels *_mixprec_fp4_kernels (void);

/* For the engine's working copies (mixprec-engine-fp4.c), which quantise
 * ranges of a tensor's blocks with amaxes agreed across ranks; each
 * rounds to nearest even and gives the bytes mixprec_quantize_blocks()
 * gives for the same blocks under the same amaxes. */

/* The largest magnitude of @n values as fp32 bits (NaN: 0x7FC00000). */
guint32 _mixprec_fp4_amax_bits (const gfloat *src, gsize n);

/* @n_blocks NVFP4 blocks of 16 from @src: block b gets @scale_bytes[b]
 * (E4M3) under @tensor_scale; packed into @dst (8 bytes a block). */
void    _mixprec_fp4_cast_nvfp4 (const gfloat *src, gsize n_blocks, const guint8 *scale_bytes,
                                 gfloat tensor_scale, guint8 *dst);

/* @n_blocks MXFP4 blocks of 32 from @src, their E8M0 scales computed
 * under @mode into @scales, the elements packed into @dst. */
void    _mixprec_fp4_quantize_mxfp4 (guint mode, const gfloat *src, gsize n_blocks, guint8 *dst,
                                     guint8 *scales);

/* The scalar element: op (x, factor), then the cast. */
static inline guint8
_mixprec_fp4_cast_one (guint    op,
                       gfloat   factor,
                       gfloat   x,
                       gboolean stochastic,
                       guint32  r)
{
  gfloat y = op == _MIXPREC_FP4_OP_DIV ? _mixprec_num_div (x, factor)
           : op == _MIXPREC_FP4_OP_MUL_CLAMP ? _mixprec_nvfp4_scaled (x, factor)
           : x;

  return stochastic ? _mixprec_f32_to_e2m1_sr (y, r) : _mixprec_f32_to_e2m1_rne (y);
}

G_END_DECLS

#endif /* MIXPREC_COMPILATION */
