/* mixprec-fp8.c — scaled float8 casts and MX block quantisation: the
 * scalar reference kernels, the choice of kernel table (once per process),
 * the engine's entry points and the public, checked API. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-fp8-private.h"
#include "mixprec-dtype-private.h"
#include "mixprec-parallel-private.h"

/**
 * mixprec_fp8_error_quark:
 *
 * The error domain of the float8 casts.
 *
 * Returns: the #GQuark of %MIXPREC_FP8_ERROR
 *
 * Since: 1.1
 */
G_DEFINE_QUARK (mixprec-fp8-error-quark, mixprec_fp8_error)

/* Elements decoded per pass of the dequantizers. */
#define DEQUANT_BLOCK 1024

/* ------------------------------------------------------------ scalar kernels */

static void
quantize_scalar (guint         format,
                 gboolean      saturate,
                 gfloat        scale,
                 const gfloat *src,
                 guint8       *dst,
                 gsize         n,
                 guint32      *amax_bits)
{
  if (amax_bits != NULL)
    {
      guint32 m = *amax_bits;

      for (gsize i = 0; i < n; i++)
        {
          m = _mixprec_fp8_amax_bits (m, src[i]);
          dst[i] = _mixprec_fp8_cast (format, saturate, src[i], scale);
        }
      *amax_bits = m;
    }
  else
    {
      for (gsize i = 0; i < n; i++)
        dst[i] = _mixprec_fp8_cast (format, saturate, src[i], scale);
    }
}

static void
amax_scalar (const gfloat *src,
             gsize         n,
             guint32      *amax_bits)
{
  guint32 m = *amax_bits;

  for (gsize i = 0; i < n; i++)
    m = _mixprec_fp8_amax_bits (m, src[i]);
  *amax_bits = m;
}

static void
mx_quantize_scalar (guint         format,
                    guint         block_size,
                    const gfloat *src,
                    gsize         n,
                    guint8       *dst,
                    guint8       *scales)
{
  for (gsize start = 0, b = 0; start < n; start += block_size, b++)
    {
      gsize len = MIN ((gsize) block_size, n - start);
      guint32 m = 0;
      gboolean has_nan = FALSE;
      gfloat inv;

      for (gsize i = 0; i < len; i++)
        {
          m = _mixprec_fp8_amax_bits (m, src[start + i]);
          has_nan |= (_mixprec_f32_bits (src[start + i]) & 0x7FFFFFFF) > 0x7F800000;
        }
      scales[b] = _mixprec_mx_scale_byte (m, has_nan, format);
      inv = _mixprec_mx_inv_scale (scales[b]);
      for (gsize i = 0; i < len; i++)
        dst[start + i] = _mixprec_mx_cast (format, src[start + i], inv);
    }
}

const _MixprecFp8Kernels _mixprec_fp8_kernels_scalar = {
  "scalar",
  quantize_scalar,
  amax_scalar,
  mx_quantize_scalar,
};

/* ------------------------------------------------------------ dispatch */

const _MixprecFp8Kernels *
_mixprec_fp8_kernels_for_level (_MixprecSimdLevel level)
{
  switch (level)
    {
    case _MIXPREC_SIMD_AVX512:
#ifdef MIXPREC_HAVE_X86_AVX512
      return &_mixprec_fp8_kernels_avx512;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_AVX2:
#ifdef MIXPREC_HAVE_X86_SIMD
      return &_mixprec_fp8_kernels_avx2;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_SCALAR:
    default:
      return &_mixprec_fp8_kernels_scalar;
    }
}

const _MixprecFp8Kernels *
_mixprec_fp8_kernels (void)
{
  static gsize kernels = 0;

  if (g_once_init_enter (&kernels))
    {
      const _MixprecFp8Kernels *k = _mixprec_fp8_kernels_for_level (_mixprec_cpu_simd_level ());

      if (k == NULL)
        k = &_mixprec_fp8_kernels_scalar;
      g_once_init_leave (&kernels, (gsize) k);
    }
  return (const _MixprecFp8Kernels *) kernels;
}

/* ------------------------------------------------------------ engine entry points
 *
 * Large arrays are split across the library's threads. Every element's
 * bits depend on that element alone (on its block, for MX, and parts
 * start on block boundaries) and the amax is an integer maximum, so any
 * split gives the same result. */

/* Elements per thread below which waking a thread costs more than it
 * saves; the casts run at about a gigabyte of input per second per core. */
#define FP8_MIN_CHUNK (1u << 15)
#define FP8_ALIGN 64

typedef struct {
  const _MixprecFp8Kernels *kernels;
  guint format;
  gboolean saturate;
  gfloat scale;
  const gfloat *src;
  guint8 *dst;
  gboolean want_amax;
  gint amax_bits;               /* magnitudes are below 2^31 */
  gsize n;
  guint block_size;
  guint8 *scales;
  guint mode;                   /* MX: a MixprecMxScaleMode */
} Fp8Job;

static void
atomic_max (gint    *p,
            guint32  v)
{
  gint old;

  do
    {
      old = g_atomic_int_get (p);
      if ((guint32) old >= v)
        return;
    }
  while (!g_atomic_int_compare_and_exchange (p, old, (gint) v));
}

static void
quantize_range (gsize    begin,
                gsize    end,
                gpointer user_data)
{
  Fp8Job *job = user_data;
  guint32 m = 0;

  job->kernels->quantize (job->format, job->saturate, job->scale, job->src + begin, job->dst + begin,
                          end - begin, job->want_amax ? &m : NULL);
  if (job->want_amax)
    atomic_max (&job->amax_bits, m);
}

static void
amax_range (gsize    begin,
            gsize    end,
            gpointer user_data)
{
  Fp8Job *job = user_data;
  guint32 m = 0;

  job->kernels->amax (job->src + begin, end - begin, &m);
  atomic_max (&job->amax_bits, m);
}

/* [begin, end) counts blocks. */
static void
mx_range (gsize    begin,
          gsize    end,
          gpointer user_data)
{
  Fp8Job *job = user_data;
  gsize first = begin * job->block_size;
  gsize last = MIN (end * job->block_size, job->n);

  job->kernels->mx_quantize (job->format, job->block_size, job->src + first, last - first,
                             job->dst + first, job->scales + begin);
}

/* The blocks [begin, end) under a scale mode other than FLOOR: the scalar
 * loop of mx_quantize_scalar() with _mixprec_mx_scale_byte_mode() (the
 * SIMD kernels compute FLOOR scales). RCEIL scales a block of byte 0 by 1,
 * as torchao's RCEIL does. */
static void
mx_mode_range (gsize    begin,
               gsize    end,
               gpointer user_data)
{
  Fp8Job *job = user_data;

  for (gsize b = begin; b < end; b++)
    {
      gsize start = b * job->block_size, len = MIN ((gsize) job->block_size, job->n - start);
      guint32 m = 0;
      gboolean has_nan = FALSE;
      gfloat inv;

      for (gsize i = 0; i < len; i++)
        {
          m = _mixprec_fp8_amax_bits (m, job->src[start + i]);
          has_nan |= (_mixprec_f32_bits (job->src[start + i]) & 0x7FFFFFFF) > 0x7F800000;
        }
      job->scales[b] = _mixprec_mx_scale_byte_mode (m, has_nan, job->format, job->mode);
      inv = job->mode == _MIXPREC_MX_MODE_RCEIL && job->scales[b] == 0
            ? 1.0f : _mixprec_mx_inv_scale (job->scales[b]);
      for (gsize i = 0; i < len; i++)
        job->dst[start + i] = _mixprec_mx_cast (job->format, job->src[start + i], inv);
    }
}

void
_mixprec_mx_quantize_f32_mode (MixprecDType  dt,
                               guint         mode,
                               guint         block_size,
                               const gfloat *src,
                               gsize         n,
                               guint8       *dst,
                               guint8       *scales)
{
  Fp8Job job = { _mixprec_fp8_kernels (), _mixprec_fp8_format (dt), TRUE, 0.0f, src, dst,
                 FALSE, 0, n, block_size, scales, mode };
  gsize n_blocks = n / block_size + (n % block_size != 0);

  if (mode == _MIXPREC_MX_MODE_FLOOR)
    {
      _mixprec_mx_quantize_f32 (dt, block_size, src, n, dst, scales);
      return;
    }
  _mixprec_parallel_for (n_blocks, MAX (FP8_MIN_CHUNK / block_size, 1), 1, mx_mode_range, &job);
}

void
_mixprec_fp8_quantize_f32 (MixprecDType  dt,
                           gboolean      saturate,
                           gfloat        scale,
                           const gfloat *src,
                           guint8       *dst,
                           gsize         n,
                           gfloat       *amax)
{
  Fp8Job job = { _mixprec_fp8_kernels (), _mixprec_fp8_format (dt), saturate, scale, src, dst,
                 amax != NULL, 0, n, 0, NULL };

  _mixprec_parallel_for (n, FP8_MIN_CHUNK, FP8_ALIGN, quantize_range, &job);
  if (amax != NULL)
    *amax = fmaxf (*amax, _mixprec_f32_from_bits ((guint32) job.amax_bits));
}

void
_mixprec_fp8_amax_f32 (const gfloat *src,
                       gsize         n,
                       gfloat       *amax)
{
  Fp8Job job = { _mixprec_fp8_kernels (), 0, FALSE, 0.0f, src, NULL, TRUE, 0, n, 0, NULL };

  /* Eight times the chunk: the amax alone runs at memory speed. */
  _mixprec_parallel_for (n, 8 * FP8_MIN_CHUNK, FP8_ALIGN, amax_range, &job);
  *amax = fmaxf (*amax, _mixprec_f32_from_bits ((guint32) job.amax_bits));
}

void
_mixprec_mx_quantize_f32 (MixprecDType  dt,
                          guint         block_size,
                          const gfloat *src,
                          gsize         n,
                          guint8       *dst,
                          guint8       *scales)
{
  Fp8Job job = { _mixprec_fp8_kernels (), _mixprec_fp8_format (dt), TRUE, 0.0f, src, dst,
                 FALSE, 0, n, block_size, scales };
  gsize n_blocks = n / block_size + (n % block_size != 0);

  _mixprec_parallel_for (n_blocks, MAX (FP8_MIN_CHUNK / block_size, 1), 1, mx_range, &job);
}

/* Decoding is the library's float8 to float32 conversion (SIMD where the
 * CPU has it); the multiply is one fp32 product per element either way. */
void
_mixprec_fp8_dequantize_f32 (MixprecDType  dt,
                             gfloat        scale_inv,
                             const guint8 *src,
                             gfloat       *dst,
                             gsize         n)
{
  _MixprecConvertFunc decode = _mixprec_convert_kernels ()->to_f32[dt];

  decode (src, dst, n, 0, 0);
  for (gsize i = 0; i < n; i++)
    dst[i] = _mixprec_num_mul (dst[i], scale_inv);
}

void
_mixprec_mx_dequantize_f32 (MixprecDType  dt,
                            guint         block_size,
                            const guint8 *src,
                            const guint8 *scales,
                            gfloat       *dst,
                            gsize         n)
{
  _MixprecConvertFunc decode = _mixprec_convert_kernels ()->to_f32[dt];

  decode (src, dst, n, 0, 0);
  for (gsize start = 0, b = 0; start < n; start += block_size, b++)
    {
      gsize len = MIN ((gsize) block_size, n - start);
      gfloat s = _mixprec_e8m0_decode (scales[b]);

      for (gsize i = 0; i < len; i++)
        dst[start + i] = _mixprec_num_mul (dst[start + i], s);
    }
}

gfloat
_mixprec_e8m0_to_f32 (guint8 e)
{
  return _mixprec_e8m0_decode (e);
}

/* ------------------------------------------------------------ public API */

static gboolean
check_fp8_dtype (MixprecDType   dt,
                 const gchar   *what,
                 GError       **error)
{
  if (dt != MIXPREC_DTYPE_FLOAT8_E4M3 && dt != MIXPREC_DTYPE_FLOAT8_E5M2)
    {
      const gchar *name = mixprec_dtype_is_valid (dt) ? mixprec_dtype_get_name (dt) : NULL;

      if (name != NULL)
        g_set_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE,
                     "%s: must be float8_e4m3 or float8_e5m2, got %s", what, name);
      else
        g_set_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE,
                     "%s: must be float8_e4m3 or float8_e5m2, got the value %d, "
                     "which is no MixprecDType", what, (gint) dt);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_scale (gfloat        scale,
             const gchar  *what,
             GError      **error)
{
  if (!(isfinite (scale) && scale > 0.0f))
    {
      g_set_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_SCALE,
                   "%s: must be finite and greater than zero, got %g", what, (gdouble) scale);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_overflow (MixprecFp8Overflow   overflow,
                GError             **error)
{
  if (overflow != MIXPREC_FP8_OVERFLOW_NON_SATURATING && overflow != MIXPREC_FP8_OVERFLOW_SATURATING)
    {
      g_set_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_OVERFLOW,
                   "overflow: must be MIXPREC_FP8_OVERFLOW_NON_SATURATING (0) or "
                   "MIXPREC_FP8_OVERFLOW_SATURATING (1), got %d", (gint) overflow);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_block_size (guint     block_size,
                  GError  **error)
{
  if (block_size == 0)
    {
      g_set_error_literal (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_BLOCK_SIZE,
                           "block_size: must be at least 1 (MX formats use 32), got 0");
      return FALSE;
    }
  return TRUE;
}

static gsize
n_blocks (gsize n,
          guint block_size)
{
  return n / block_size + (n % block_size != 0);
}

/**
 * mixprec_fp8_quantize: (skip)
 * @fp8_dtype: %MIXPREC_DTYPE_FLOAT8_E4M3 or %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src: (nullable) (array length=n): @n float32 values
 * @n: the number of elements
 * @scale: the factor each value is multiplied by before the cast; finite
 *   and greater than zero
 * @overflow: what values beyond the format's range become
 * @dst: (nullable) (array length=n): room for @n bytes
 * @amax: (out) (optional): the largest magnitude of @src
 * @error: return location for a #GError
 *
 * Casts @n float32 values to a float8 format with a per-tensor scale, as
 * FP8 training casts weights, activations and gradients.
 *
 * Each element is the product `src[i] * scale`, one float32
 * multiplication rounded to nearest even, converted to @fp8_dtype with
 * round to nearest, ties to even, and gradual underflow: bit for bit what
 * PyTorch computes as `(x * scale).to(torch.float8_e4m3fn)` (or
 * `torch.float8_e5m2`) with %MIXPREC_FP8_OVERFLOW_NON_SATURATING, and as
 * `(x * scale).clamp(-max, max).to(...)` with
 * %MIXPREC_FP8_OVERFLOW_SATURATING, max being 448 (e4m3) or 57344 (e5m2).
 * Non-saturating: a product that rounds past max, and ±Inf, gives NaN
 * (0x7F with the sign) in e4m3, which has no infinity, and ±Inf in e5m2.
 * Saturating: they give ±max. NaN gives NaN (sign | 0x7F) either way.
 *
 * @amax receives the largest |src[i]| over the inputs, before scaling:
 * the amax of Transformer Engine's delayed and current scaling recipes.
 * NaN inputs are skipped (as fmaxf() skips them); an infinite input makes
 * it +Inf; it is 0 when @n is 0 or every input is NaN.
 *
 * Large arrays are split across the library's threads
 * (mixprec_get_num_threads()); the kernels use AVX-512 or AVX2 when the
 * CPU has them (mixprec_get_simd_name()), bit-identical to the scalar
 * ones, so neither changes a bit of the result or the amax. The product
 * follows the CPU's floating-point mode, which keeps subnormals unless the
 * process changed MXCSR.
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_FP8_ERROR)
 *   when @fp8_dtype is not a float8 dtype, @scale is not finite and
 *   positive, or @overflow is not a #MixprecFp8Overflow
 *
 * Since: 1.1
 */
gboolean
mixprec_fp8_quantize (MixprecDType        fp8_dtype,
                      const gfloat       *src,
                      gsize               n,
                      gfloat              scale,
                      MixprecFp8Overflow  overflow,
                      guint8             *dst,
                      gfloat             *amax,
                      GError            **error)
{
  g_return_val_if_fail (n == 0 || (src != NULL && dst != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_fp8_dtype (fp8_dtype, "fp8_dtype", error) ||
      !check_scale (scale, "scale", error) ||
      !check_overflow (overflow, error))
    return FALSE;
  if (amax != NULL)
    *amax = 0.0f;
  if (n == 0)
    return TRUE;
  _mixprec_fp8_quantize_f32 (fp8_dtype, overflow == MIXPREC_FP8_OVERFLOW_SATURATING, scale,
                             src, dst, n, amax);
  return TRUE;
}

/**
 * mixprec_fp8_dequantize: (skip)
 * @fp8_dtype: %MIXPREC_DTYPE_FLOAT8_E4M3 or %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src: (nullable) (array length=n): @n float8 bytes
 * @n: the number of elements
 * @scale_inv: the factor each decoded value is multiplied by: the
 *   reciprocal of the scale the values were cast with; finite and greater
 *   than zero
 * @dst: (nullable) (array length=n): room for @n float32 values
 * @error: return location for a #GError
 *
 * Decodes float8 values cast by mixprec_fp8_quantize(): `dst[i] =
 * float32 (src[i]) * scale_inv`, one float32 multiplication rounded to
 * nearest even. That is Transformer Engine's dequantisation, which keeps
 * `scale_inv = 1 / scale` beside each FP8 tensor and multiplies by it, and
 * PyTorch's `x.to(torch.float32) * scale_inv`. NaN bytes give NaN, e5m2's
 * infinities ±Inf.
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_FP8_ERROR)
 *   when @fp8_dtype is not a float8 dtype or @scale_inv is not finite and
 *   positive
 *
 * Since: 1.1
 */
gboolean
mixprec_fp8_dequantize (MixprecDType   fp8_dtype,
                        const guint8  *src,
                        gsize          n,
                        gfloat         scale_inv,
                        gfloat        *dst,
                        GError       **error)
{
  g_return_val_if_fail (n == 0 || (src != NULL && dst != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_fp8_dtype (fp8_dtype, "fp8_dtype", error) ||
      !check_scale (scale_inv, "scale_inv", error))
    return FALSE;
  if (n > 0)
    _mixprec_fp8_dequantize_f32 (fp8_dtype, scale_inv, src, dst, n);
  return TRUE;
}

/**
 * mixprec_fp8_quantize_bytes: (rename-to mixprec_fp8_quantize)
 * @fp8_dtype: %MIXPREC_DTYPE_FLOAT8_E4M3 or %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src_f32: float32 values in host byte order
 * @scale: the factor each value is multiplied by before the cast; finite
 *   and greater than zero
 * @overflow: what values beyond the format's range become
 * @amax: (out) (optional): the largest magnitude of @src_f32, NaN skipped
 * @error: return location for a #GError
 *
 * mixprec_fp8_quantize() on #GBytes, for bindings.
 *
 * Returns: (transfer full) (nullable): one byte per element, or %NULL
 *   with @error set, also when the length of @src_f32 is not a multiple
 *   of 4 (%MIXPREC_FP8_ERROR_INVALID_LENGTH)
 *
 * Since: 1.1
 */
GBytes *
mixprec_fp8_quantize_bytes (MixprecDType        fp8_dtype,
                            GBytes             *src_f32,
                            gfloat              scale,
                            MixprecFp8Overflow  overflow,
                            gfloat             *amax,
                            GError            **error)
{
  g_autofree gpointer copy = NULL;
  const gfloat *src;
  guint8 *out;
  gsize n = 0;

  g_return_val_if_fail (src_f32 != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_fp8_dtype (fp8_dtype, "fp8_dtype", error) ||
      !check_scale (scale, "scale", error) ||
      !check_overflow (overflow, error))
    return NULL;
  src = _mixprec_bytes_get_f32 (src_f32, &n, &copy, MIXPREC_FP8_ERROR,
                                MIXPREC_FP8_ERROR_INVALID_LENGTH, error);
  if (src == NULL)
    return NULL;
  out = g_malloc (MAX (n, 1));
  mixprec_fp8_quantize (fp8_dtype, src, n, scale, overflow, out, amax, NULL);
  return g_bytes_new_take (out, n);
}

/**
 * mixprec_fp8_dequantize_bytes: (rename-to mixprec_fp8_dequantize)
 * @fp8_dtype: %MIXPREC_DTYPE_FLOAT8_E4M3 or %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src: float8 bytes
 * @scale_inv: the factor each decoded value is multiplied by; finite and
 *   greater than zero
 * @error: return location for a #GError
 *
 * mixprec_fp8_dequantize() on #GBytes, for bindings.
 *
 * Returns: (transfer full) (nullable): float32 values in host byte order,
 *   or %NULL with @error set
 *
 * Since: 1.1
 */
GBytes *
mixprec_fp8_dequantize_bytes (MixprecDType   fp8_dtype,
                              GBytes        *src,
                              gfloat         scale_inv,
                              GError       **error)
{
  gsize n;
  const guint8 *data;
  gfloat *out;

  g_return_val_if_fail (src != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  data = g_bytes_get_data (src, &n);
  out = g_new (gfloat, MAX (n, 1));
  if (!mixprec_fp8_dequantize (fp8_dtype, data, n, scale_inv, out, error))
    {
      g_free (out);
      return NULL;
    }
  return g_bytes_new_take (out, n * sizeof (gfloat));
}

/**
 * mixprec_mx_quantize: (skip)
 * @elem_dtype: the element format, %MIXPREC_DTYPE_FLOAT8_E4M3 (MXFP8
 *   E4M3) or %MIXPREC_DTYPE_FLOAT8_E5M2 (MXFP8 E5M2)
 * @src: (nullable) (array length=n): @n float32 values
 * @n: the number of elements
 * @block_size: elements per scale; %MIXPREC_MX_BLOCK_SIZE (32) in the MX
 *   formats
 * @dst: (nullable) (array length=n): room for @n element bytes
 * @scales: (nullable): room for ceil (@n / @block_size) E8M0 scale bytes
 * @error: return location for a #GError
 *
 * Quantises to an OCP Microscaling (MX v1.0) format: consecutive blocks of
 * @block_size elements (the last one may be shorter) share one power-of-two
 * scale, stored as an E8M0 byte (an exponent biased by 127; 0xFF is NaN).
 *
 * The scale follows section 6.3 of the MX specification with the FLOOR
 * rule, torchao's default (`to_mx()`): the block's shared exponent is
 * floor(log2(amax)) - emax_elem, amax being the largest magnitude in the
 * block and emax_elem the exponent of the element format's largest
 * binade (8 for e4m3, 15 for e5m2), clamped to [-127, 127]. A block of
 * zeros (or of values below 2^-126) gets -127 (byte 0); a block holding
 * ±Inf and no NaN gets 128 - emax_elem, as reading the exponent field of
 * its amax gives in torchao; a block holding NaN gets the NaN scale 0xFF.
 *
 * Each element is the saturating float8 cast (round to nearest even,
 * ±max for values beyond the range) of `src[i] / 2^exp`, computed as one
 * exactly rounded float32 operation. With the FLOOR rule a block's amax
 * may round past max, which saturation absorbs. In a block with the NaN
 * scale the elements are those of `src[i] / Inf` (±0, and NaN for NaN and
 * ±Inf), as in torchao; every element of such a block decodes to NaN.
 * torchao raises a scale of 2^-127 to 2^-126 before dividing (a float32
 * subnormal); the elements here divide by 2^-127, as the specification
 * says. Threads and SIMD kernels are used as in mixprec_fp8_quantize().
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_FP8_ERROR)
 *   when @elem_dtype is not a float8 dtype or @block_size is 0
 *
 * Since: 1.1
 */
gboolean
mixprec_mx_quantize (MixprecDType   elem_dtype,
                     const gfloat  *src,
                     gsize          n,
                     guint          block_size,
                     guint8        *dst,
                     guint8        *scales,
                     GError       **error)
{
  return mixprec_mx_quantize_with_scale_mode (elem_dtype, MIXPREC_MX_SCALE_FLOOR, src, n, block_size, dst,
                                              scales, error);
}

/**
 * mixprec_mx_dequantize: (skip)
 * @elem_dtype: the element format, %MIXPREC_DTYPE_FLOAT8_E4M3 or
 *   %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src: (nullable) (array length=n): @n element bytes
 * @scales: (nullable): ceil (@n / @block_size) E8M0 scale bytes
 * @n: the number of elements
 * @block_size: elements per scale, as they were quantised
 * @dst: (nullable) (array length=n): room for @n float32 values
 * @error: return location for a #GError
 *
 * Decodes MX blocks: `dst[i] = float32 (src[i]) * 2^(scales[i / block_size]
 * - 127)`, one float32 multiplication (exact unless the product leaves
 * the normal range). A scale of 0xFF makes its whole block NaN, as the MX
 * specification says.
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_FP8_ERROR)
 *   when @elem_dtype is not a float8 dtype or @block_size is 0
 *
 * Since: 1.1
 */
gboolean
mixprec_mx_dequantize (MixprecDType   elem_dtype,
                       const guint8  *src,
                       const guint8  *scales,
                       gsize          n,
                       guint          block_size,
                       gfloat        *dst,
                       GError       **error)
{
  g_return_val_if_fail (n == 0 || (src != NULL && dst != NULL && scales != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_fp8_dtype (elem_dtype, "elem_dtype", error) || !check_block_size (block_size, error))
    return FALSE;
  if (n > 0)
    _mixprec_mx_dequantize_f32 (elem_dtype, block_size, src, scales, dst, n);
  return TRUE;
}

/**
 * mixprec_mx_quantize_bytes: (rename-to mixprec_mx_quantize)
 * @elem_dtype: the element format, %MIXPREC_DTYPE_FLOAT8_E4M3 or
 *   %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src_f32: float32 values in host byte order
 * @block_size: elements per scale; %MIXPREC_MX_BLOCK_SIZE (32) in the MX
 *   formats
 * @scales: (out) (transfer full): the E8M0 scale bytes, one per block
 * @error: return location for a #GError
 *
 * mixprec_mx_quantize() on #GBytes, for bindings.
 *
 * Returns: (transfer full) (nullable): one element byte per value, or
 *   %NULL with @error set (and @scales untouched)
 *
 * Since: 1.1
 */
GBytes *
mixprec_mx_quantize_bytes (MixprecDType   elem_dtype,
                           GBytes        *src_f32,
                           guint          block_size,
                           GBytes       **scales,
                           GError       **error)
{
  return mixprec_mx_quantize_with_scale_mode_bytes (elem_dtype, MIXPREC_MX_SCALE_FLOOR, src_f32,
                                                    block_size, scales, error);
}

/**
 * mixprec_mx_quantize_with_scale_mode: (skip)
 * @elem_dtype: the element format, %MIXPREC_DTYPE_FLOAT8_E4M3 or
 *   %MIXPREC_DTYPE_FLOAT8_E5M2
 * @scale_mode: how each block's E8M0 scale comes from its amax
 * @src: (nullable) (array length=n): @n float32 values
 * @n: the number of values
 * @block_size: elements per scale; 32 in the MX formats
 * @dst: (nullable) (array length=n): room for @n element bytes
 * @scales: (nullable): room for ceil (@n / @block_size) scale bytes
 * @error: return location for a #GError
 *
 * mixprec_mx_quantize() with the block scales of one of torchao's four
 * `ScaleCalculationMode`s (MXFP8): %MIXPREC_MX_SCALE_FLOOR is
 * mixprec_mx_quantize(); %MIXPREC_MX_SCALE_CEIL adds one to FLOOR's
 * exponent (before emax_elem and the clamp) unless the amax is a power of
 * two; %MIXPREC_MX_SCALE_EVEN takes FLOOR of the amax first rounded to
 * the element's mantissa bits (3 for e4m3, 2 for e5m2; ties away from
 * zero); %MIXPREC_MX_SCALE_RCEIL takes ceil(log2(amax / max_elem)), 448
 * or 57344, NVIDIA's `cvt.rp.satfinite.ue8m0` rule, and scales a block of
 * byte 0 by 1 as torchao does. The exponents are clamped to [-127, 127];
 * a block holding NaN gets 0xFF in every mode. The elements are the
 * saturating casts of the values divided by the scale, as in
 * mixprec_mx_quantize(); modes other than FLOOR run a scalar loop.
 *
 * Returns: %TRUE on success; %FALSE with @error set when @elem_dtype is
 *   not a float8 dtype or @block_size is 0 (%MIXPREC_FP8_ERROR), or
 *   @scale_mode is not a #MixprecMxScaleMode
 *   (%MIXPREC_BLOCK_ERROR_INVALID_SCALE_MODE)
 *
 * Since: 1.1
 */
gboolean
mixprec_mx_quantize_with_scale_mode (MixprecDType        elem_dtype,
                                     MixprecMxScaleMode  scale_mode,
                                     const gfloat       *src,
                                     gsize               n,
                                     guint               block_size,
                                     guint8             *dst,
                                     guint8             *scales,
                                     GError            **error)
{
  g_return_val_if_fail (n == 0 || (src != NULL && dst != NULL && scales != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_fp8_dtype (elem_dtype, "elem_dtype", error) || !check_block_size (block_size, error))
    return FALSE;
  if ((guint) scale_mode > MIXPREC_MX_SCALE_EVEN)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SCALE_MODE,
                   "scale_mode: %d is not a MixprecMxScaleMode (FLOOR, RCEIL, CEIL or EVEN)",
                   (gint) scale_mode);
      return FALSE;
    }
  if (n > 0)
    _mixprec_mx_quantize_f32_mode (elem_dtype, scale_mode, block_size, src, n, dst, scales);
  return TRUE;
}

/**
 * mixprec_mx_quantize_with_scale_mode_bytes: (rename-to mixprec_mx_quantize_with_scale_mode)
 * @elem_dtype: the element format, %MIXPREC_DTYPE_FLOAT8_E4M3 or
 *   %MIXPREC_DTYPE_FLOAT8_E5M2
 * @scale_mode: how each block's E8M0 scale comes from its amax
 * @src_f32: float32 values in host byte order
 * @block_size: elements per scale; 32 in the MX formats
 * @scales: (out) (transfer full): the E8M0 scale bytes, one per block
 * @error: return location for a #GError
 *
 * mixprec_mx_quantize_with_scale_mode() on #GBytes, for bindings.
 *
 * Returns: (transfer full) (nullable): one element byte per value, or
 *   %NULL with @error set (and @scales untouched)
 *
 * Since: 1.1
 */
GBytes *
mixprec_mx_quantize_with_scale_mode_bytes (MixprecDType        elem_dtype,
                                           MixprecMxScaleMode  scale_mode,
                                           GBytes             *src_f32,
                                           guint               block_size,
                                           GBytes            **scales,
                                           GError            **error)
{
  g_autofree gpointer copy = NULL;
  const gfloat *src;
  guint8 *out, *sc;
  gsize n = 0, nb;

  g_return_val_if_fail (src_f32 != NULL, NULL);
  g_return_val_if_fail (scales != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_fp8_dtype (elem_dtype, "elem_dtype", error) || !check_block_size (block_size, error))
    return NULL;
  src = _mixprec_bytes_get_f32 (src_f32, &n, &copy, MIXPREC_FP8_ERROR,
                                MIXPREC_FP8_ERROR_INVALID_LENGTH, error);
  if (src == NULL)
    return NULL;
  nb = n_blocks (n, block_size);
  out = g_malloc (MAX (n, 1));
  sc = g_malloc (MAX (nb, 1));
  if (!mixprec_mx_quantize_with_scale_mode (elem_dtype, scale_mode, src, n, block_size, out, sc,
                                            error))
    {
      g_free (out);
      g_free (sc);
      return NULL;
    }
  *scales = g_bytes_new_take (sc, nb);
  return g_bytes_new_take (out, n);
}

/**
 * mixprec_mx_dequantize_bytes: (rename-to mixprec_mx_dequantize)
 * @elem_dtype: the element format, %MIXPREC_DTYPE_FLOAT8_E4M3 or
 *   %MIXPREC_DTYPE_FLOAT8_E5M2
 * @src: element bytes
 * @scales: E8M0 scale bytes, one per block of @src
 * @block_size: elements per scale, as they were quantised
 * @error: return location for a #GError
 *
 * mixprec_mx_dequantize() on #GBytes, for bindings.
 *
 * Returns: (transfer full) (nullable): float32 values in host byte order,
 *   or %NULL with @error set, also when @scales does not hold exactly one
 *   byte per block (%MIXPREC_FP8_ERROR_INVALID_LENGTH)
 *
 * Since: 1.1
 */
GBytes *
mixprec_mx_dequantize_bytes (MixprecDType   elem_dtype,
                             GBytes        *src,
                             GBytes        *scales,
                             guint          block_size,
                             GError       **error)
{
  gsize n, nb;
  const guint8 *data, *sc;
  gfloat *out;

  g_return_val_if_fail (src != NULL, NULL);
  g_return_val_if_fail (scales != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_fp8_dtype (elem_dtype, "elem_dtype", error) || !check_block_size (block_size, error))
    return NULL;
  data = g_bytes_get_data (src, &n);
  sc = g_bytes_get_data (scales, &nb);
  if (nb != n_blocks (n, block_size))
    {
      g_set_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_LENGTH,
                   "scales: %" G_GSIZE_FORMAT " elements in blocks of %u need %" G_GSIZE_FORMAT
                   " scale bytes, got %" G_GSIZE_FORMAT, n, block_size, n_blocks (n, block_size), nb);
      return NULL;
    }
  out = g_new (gfloat, MAX (n, 1));
  mixprec_mx_dequantize (elem_dtype, data, sc, n, block_size, out, NULL);
  return g_bytes_new_take (out, n * sizeof (gfloat));
}

/**
 * mixprec_e8m0_to_float:
 * @scale: an E8M0 byte, as mixprec_mx_quantize() writes them
 *
 * The value of an MX scale: 2^(@scale - 127), the float32 subnormal
 * 2^-127 for 0, NaN for 0xFF.
 *
 * Returns: the scale as a float32
 *
 * Since: 1.1
 */
gfloat
mixprec_e8m0_to_float (guint8 scale)
{
  return _mixprec_e8m0_to_f32 (scale);
}
