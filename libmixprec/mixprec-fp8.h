/* mixprec-fp8.h — scaled float8 casts and MX (microscaling) block quantisation */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-fp4.h"

G_BEGIN_DECLS

/**
 * MixprecFp8Overflow:
 * @MIXPREC_FP8_OVERFLOW_NON_SATURATING: values beyond the format's largest
 *   finite value, and ±Inf, become NaN in float8_e4m3 (which has no Inf)
 *   and ±Inf in float8_e5m2: the OCP 8-bit specification's non-saturating
 *   mode, as PyTorch's `x.to(torch.float8_e5m2)` does. (PyTorch's
 *   `x.to(torch.float8_e4m3fn)` gave NaN too until its CPU cast was made
 *   to saturate in 2026; in releases since, it equals the saturating mode.)
 * @MIXPREC_FP8_OVERFLOW_SATURATING: they become ±max (448 or 57344), as
 *   `x.clamp(-max, max).to(...)` and Transformer Engine's cast kernels
 *   give; NaN stays NaN
 *
 * What a scaled float8 cast does with values it cannot represent.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_OVERFLOW_NON_SATURATING = 0,
  MIXPREC_FP8_OVERFLOW_SATURATING = 1,
} MixprecFp8Overflow;

#define MIXPREC_FP8_ERROR (mixprec_fp8_error_quark ())

/**
 * MixprecFp8Error:
 * @MIXPREC_FP8_ERROR_INVALID_DTYPE: the dtype is not a float8 format
 * @MIXPREC_FP8_ERROR_INVALID_SCALE: a scale is NaN, infinite, zero or negative
 * @MIXPREC_FP8_ERROR_INVALID_OVERFLOW: not a #MixprecFp8Overflow value
 * @MIXPREC_FP8_ERROR_INVALID_LENGTH: a buffer's length does not match
 * @MIXPREC_FP8_ERROR_INVALID_BLOCK_SIZE: an MX block size of zero
 *
 * Errors of the float8 casts, in the %MIXPREC_FP8_ERROR domain.
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_FP8_ERROR_INVALID_DTYPE,
  MIXPREC_FP8_ERROR_INVALID_SCALE,
  MIXPREC_FP8_ERROR_INVALID_OVERFLOW,
  MIXPREC_FP8_ERROR_INVALID_LENGTH,
  MIXPREC_FP8_ERROR_INVALID_BLOCK_SIZE,
} MixprecFp8Error;

/**
 * MIXPREC_MX_BLOCK_SIZE:
 *
 * The block size of the OCP MX formats (MXFP8): 32 elements share one
 * E8M0 scale.
 *
 * Since: 1.1
 */
#define MIXPREC_MX_BLOCK_SIZE 32

MIXPREC_AVAILABLE_IN_1_1
GQuark    mixprec_fp8_error_quark        (void);

MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_fp8_quantize           (MixprecDType        fp8_dtype,
                                          const gfloat       *src,
                                          gsize               n,
                                          gfloat              scale,
                                          MixprecFp8Overflow  overflow,
                                          guint8             *dst,
                                          gfloat             *amax,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_fp8_dequantize         (MixprecDType        fp8_dtype,
                                          const guint8       *src,
                                          gsize               n,
                                          gfloat              scale_inv,
                                          gfloat             *dst,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_fp8_quantize_bytes     (MixprecDType        fp8_dtype,
                                          GBytes             *src_f32,
                                          gfloat              scale,
                                          MixprecFp8Overflow  overflow,
                                          gfloat             *amax,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_fp8_dequantize_bytes   (MixprecDType        fp8_dtype,
                                          GBytes             *src,
                                          gfloat              scale_inv,
                                          GError            **error);

MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_mx_quantize            (MixprecDType        elem_dtype,
                                          const gfloat       *src,
                                          gsize               n,
                                          guint               block_size,
                                          guint8             *dst,
                                          guint8             *scales,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_mx_dequantize          (MixprecDType        elem_dtype,
                                          const guint8       *src,
                                          const guint8       *scales,
                                          gsize               n,
                                          guint               block_size,
                                          gfloat             *dst,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_mx_quantize_bytes      (MixprecDType        elem_dtype,
                                          GBytes             *src_f32,
                                          guint               block_size,
                                          GBytes            **scales,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_mx_dequantize_bytes    (MixprecDType        elem_dtype,
                                          GBytes             *src,
                                          GBytes             *scales,
                                          guint               block_size,
                                          GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gfloat    mixprec_e8m0_to_float          (guint8              scale);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_mx_quantize_with_scale_mode (MixprecDType        elem_dtype,
                                               MixprecMxScaleMode  scale_mode,
                                               const gfloat       *src,
                                               gsize               n,
                                               guint               block_size,
                                               guint8             *dst,
                                               guint8             *scales,
                                               GError            **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes   *mixprec_mx_quantize_with_scale_mode_bytes (MixprecDType        elem_dtype,
                                                     MixprecMxScaleMode  scale_mode,
                                                     GBytes             *src_f32,
                                                     guint               block_size,
                                                     GBytes            **scales,
                                                     GError            **error);

G_END_DECLS
