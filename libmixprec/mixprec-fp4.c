/* mixprec-fp4.c — FP4 E2M1 packing and the 4-bit block recipes (NVFP4 in
 * 1x16 and 16x16 blocks, MXFP4 in four scale modes): the scalar kernels
 * over numeric/numeric-fp4.h and the public, checked API. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-dtype-private.h"
#include "mixprec-fp4-private.h"

/**
 * mixprec_block_error_quark:
 *
 * The error domain of the 4-bit block quantisation.
 *
 * Returns: the #GQuark of %MIXPREC_BLOCK_ERROR
 *
 * Since: 1.1
 */
G_DEFINE_QUARK (mixprec-block-error-quark, mixprec_block_error)

#define NVFP4_BLOCK 16
#define MXFP4_BLOCK 32

/* ------------------------------------------------------------ kernels */

static void
cast_scalar (guint         op,
             gfloat        factor,
             const gfloat *src,
             gsize         n,
             gboolean      stochastic,
             guint64       seed,
             guint64       first_index,
             guint8       *dst)
{
  for (gsize i = 0; i + 1 < n; i += 2)
    {
      guint32 r0 = stochastic ? _mixprec_sr_bits (seed, first_index + i) : 0;
      guint32 r1 = stochastic ? _mixprec_sr_bits (seed, first_index + i + 1) : 0;
      guint8 lo = _mixprec_fp4_cast_one (op, factor, src[i], stochastic, r0);
      guint8 hi = _mixprec_fp4_cast_one (op, factor, src[i + 1], stochastic, r1);

      dst[i / 2] = (guint8) (lo | (hi << 4));
    }
}

const _MixprecFp4Kernels _mixprec_fp4_kernels_scalar = {
  "scalar",
  cast_scalar,
};

const _MixprecFp4Kernels *
_mixprec_fp4_kernels_for_level (_MixprecSimdLevel level)
{
  switch (level)
    {
    case _MIXPREC_SIMD_AVX512:
#ifdef MIXPREC_HAVE_X86_AVX512
      return &_mixprec_fp4_kernels_avx512;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_AVX2:
#ifdef MIXPREC_HAVE_X86_SIMD
      return &_mixprec_fp4_kernels_avx2;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_SCALAR:
    default:
      return &_mixprec_fp4_kernels_scalar;
    }
}

const _MixprecFp4Kernels *
_mixprec_fp4_kernels (void)
{
  static gsize kernels = 0;

  if (g_once_init_enter (&kernels))
    {
      const _MixprecFp4Kernels *k = _mixprec_fp4_kernels_for_level (_mixprec_cpu_simd_level ());

      if (k == NULL)
        k = &_mixprec_fp4_kernels_scalar;
      g_once_init_leave (&kernels, (gsize) k);
    }
  return (const _MixprecFp4Kernels *) kernels;
}

/* The largest magnitude as fp32 bits, NaN propagating (a NaN's bits are
 * above every other magnitude's), as torch.amax gives it. */
static guint32
amax_bits (const gfloat *src,
           gsize         n)
{
  guint32 m = 0;

  for (gsize i = 0; i < n; i++)
    {
      guint32 a = _mixprec_f32_bits (src[i]) & 0x7FFFFFFF;

      if (a > m)
        m = a;
    }
  return m > 0x7F800000 ? 0x7FC00000 : m;
}

static void
quantize_mxfp4 (unsigned         mode,
                const gfloat    *src,
                gsize            n,
                MixprecRounding  rounding,
                guint64          seed,
                guint8          *dst,
                guint8          *scales)
{
  const _MixprecFp4Kernels *k = _mixprec_fp4_kernels ();
  guint op = mode == _MIXPREC_MX4_RCEIL ? _MIXPREC_FP4_OP_MUL_CLAMP : _MIXPREC_FP4_OP_DIV;

  for (gsize b = 0; b < n / MXFP4_BLOCK; b++)
    {
      const gfloat *x = src + b * MXFP4_BLOCK;
      guint8 e = _mixprec_mx4_scale_byte (amax_bits (x, MXFP4_BLOCK), mode);

      scales[b] = e;
      k->cast (op, _mixprec_mx4_block_factor (e, mode), x, MXFP4_BLOCK,
               rounding == MIXPREC_ROUNDING_STOCHASTIC, seed, b * MXFP4_BLOCK,
               dst + b * MXFP4_BLOCK / 2);
    }
}

/* One NVFP4 block of 16 elements at @i with scale byte @e. */
static void
cast_nvfp4_block (const gfloat    *src,
                  gsize            i,
                  guint8           e,
                  gfloat           tensor_scale,
                  MixprecRounding  rounding,
                  guint64          seed,
                  guint8          *dst)
{
  _mixprec_fp4_kernels ()->cast (_MIXPREC_FP4_OP_MUL_CLAMP, _mixprec_nvfp4_block_factor (e, tensor_scale),
                                 src + i, NVFP4_BLOCK, rounding == MIXPREC_ROUNDING_STOCHASTIC, seed, i,
                                 dst + i / 2);
}

static void
quantize_nvfp4 (gboolean         two_d,
                const gfloat    *src,
                gsize            rows,
                gsize            cols,
                MixprecRounding  rounding,
                guint64          seed,
                guint8          *dst,
                guint8          *scales,
                gfloat          *tensor_scale)
{
  gsize bpr = cols / NVFP4_BLOCK;
  gfloat ts = _mixprec_nvfp4_tensor_scale (amax_bits (src, rows * cols));

  *tensor_scale = ts;
  if (!two_d)
    {
      for (gsize b = 0; b < rows * bpr; b++)
        {
          guint8 e = _mixprec_nvfp4_scale_byte (amax_bits (src + b * NVFP4_BLOCK, NVFP4_BLOCK), ts);

          scales[b] = e;
          cast_nvfp4_block (src, b * NVFP4_BLOCK, e, ts, rounding, seed, dst);
        }
      return;
    }

  /* 16x16 tiles (the last row of tiles may be shorter): one amax, one
   * scale, written for each of the tile's rows so that the scales keep
   * the 1x16 layout and decode alike. */
  for (gsize r0 = 0; r0 < rows; r0 += NVFP4_BLOCK)
    {
      gsize r1 = MIN (rows, r0 + NVFP4_BLOCK);

      for (gsize cb = 0; cb < bpr; cb++)
        {
          guint32 m = 0;
          guint8 e;

          for (gsize r = r0; r < r1; r++)
            m = MAX (m, amax_bits (src + r * cols + cb * NVFP4_BLOCK, NVFP4_BLOCK));
          e = _mixprec_nvfp4_scale_byte (m, ts);
          for (gsize r = r0; r < r1; r++)
            {
              scales[r * bpr + cb] = e;
              cast_nvfp4_block (src, r * cols + cb * NVFP4_BLOCK, e, ts, rounding, seed, dst);
            }
        }
    }
}

guint32
_mixprec_fp4_amax_bits (const gfloat *src, gsize n)
{
  return amax_bits (src, n);
}

void
_mixprec_fp4_cast_nvfp4 (const gfloat *src, gsize n_blocks, const guint8 *scale_bytes,
                         gfloat tensor_scale, guint8 *dst)
{
  for (gsize b = 0; b < n_blocks; b++)
    cast_nvfp4_block (src, b * NVFP4_BLOCK, scale_bytes[b], tensor_scale,
                      MIXPREC_ROUNDING_NEAREST_EVEN, 0, dst);
}

void
_mixprec_fp4_quantize_mxfp4 (guint mode, const gfloat *src, gsize n_blocks, guint8 *dst,
                             guint8 *scales)
{
  quantize_mxfp4 (mode, src, n_blocks * MXFP4_BLOCK, MIXPREC_ROUNDING_NEAREST_EVEN, 0, dst, scales);
}

/* ------------------------------------------------------------ checks */

static gboolean
check_recipe (MixprecBlockRecipe   recipe,
              MixprecMxScaleMode   scale_mode,
              GError             **error)
{
  if ((guint) recipe > MIXPREC_BLOCK_RECIPE_MXFP4)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_RECIPE,
                   "recipe: must be a MixprecBlockRecipe (0 to %d), got %d",
                   MIXPREC_BLOCK_RECIPE_MXFP4, (gint) recipe);
      return FALSE;
    }
  if ((guint) scale_mode > MIXPREC_MX_SCALE_EVEN)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SCALE_MODE,
                   "scale_mode: must be a MixprecMxScaleMode (0 to %d), got %d",
                   MIXPREC_MX_SCALE_EVEN, (gint) scale_mode);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_rounding (MixprecRounding   rounding,
                GError          **error)
{
  if (rounding != MIXPREC_ROUNDING_NEAREST_EVEN && rounding != MIXPREC_ROUNDING_STOCHASTIC)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_ROUNDING,
                   "rounding: must be a MixprecRounding (0 or 1), got %d", (gint) rounding);
      return FALSE;
    }
  return TRUE;
}

static gboolean
check_shape (MixprecBlockRecipe   recipe,
             gsize                rows,
             gsize                cols,
             GError             **error)
{
  guint bs = mixprec_block_recipe_get_block_size (recipe);

  if (rows > 0 && (cols == 0 || cols % bs != 0))
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SHAPE,
                   "cols: rows must be a positive multiple of the block size %u, got %" G_GSIZE_FORMAT,
                   bs, cols);
      return FALSE;
    }
  if (cols > 0 && rows > G_MAXSIZE / cols)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SHAPE,
                   "rows: %" G_GSIZE_FORMAT " rows of %" G_GSIZE_FORMAT " elements overflow a size",
                   rows, cols);
      return FALSE;
    }
  return TRUE;
}

/* The rows of @n values in rows of @cols (the GBytes forms), checked as
 * check_shape() checks them. */
static gboolean
check_rows (MixprecBlockRecipe   recipe,
            gsize                n,
            gsize                cols,
            gsize               *rows,
            GError             **error)
{
  if (cols == 0 || n % cols != 0)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SHAPE,
                   "cols: %" G_GSIZE_FORMAT " values are not a whole number of rows of %"
                   G_GSIZE_FORMAT, n, cols);
      return FALSE;
    }
  *rows = n / cols;
  return check_shape (recipe, *rows, cols, error);
}

/* ------------------------------------------------------------ public API */

/**
 * mixprec_block_recipe_get_block_size:
 * @recipe: a #MixprecBlockRecipe
 *
 * The number of consecutive elements of a row that share one scale: 16
 * for NVFP4 (whose 2D tiles are 16 rows of such blocks), 32 for MXFP4.
 *
 * Returns: the block size, or 0 when @recipe is no #MixprecBlockRecipe
 *
 * Since: 1.1
 */
guint
mixprec_block_recipe_get_block_size (MixprecBlockRecipe recipe)
{
  switch (recipe)
    {
    case MIXPREC_BLOCK_RECIPE_NVFP4:
    case MIXPREC_BLOCK_RECIPE_NVFP4_2D:
      return NVFP4_BLOCK;
    case MIXPREC_BLOCK_RECIPE_MXFP4:
      return MXFP4_BLOCK;
    default:
      return 0;
    }
}

/**
 * mixprec_quantize_blocks: (skip)
 * @recipe: the block recipe
 * @scale_mode: how MXFP4 derives its E8M0 scales; ignored by NVFP4
 * @src: (nullable) (array): @rows * @cols float32 values, row-major
 * @rows: the number of rows
 * @cols: the length of a row, a multiple of the recipe's block size
 * @rounding: how the scaled elements are rounded to E2M1; the scales are
 *   always computed as the recipe defines them
 * @seed: the seed of stochastic rounding; element i (row-major) takes
 *   word i of its stream, as mixprec_convert_array() does
 * @dst: (nullable) (array): room for @rows * @cols / 2 bytes of packed E2M1
 * @scales: (nullable) (array): room for @rows * @cols / block size scale
 *   bytes, row-major: E4M3 for NVFP4, E8M0 for MXFP4
 * @tensor_scale: (out) (optional): NVFP4's per-tensor float32 scale
 *   (1.0 for MXFP4)
 * @error: return location for a #GError
 *
 * Quantises a row-major matrix to one of the 4-bit block formats, as
 * torchao's CPU emulation does, bit for bit (`NVFP4Tensor.to_nvfp4()`
 * with a per-tensor scale, `MXTensor.to_mx()` with
 * `torch.float4_e2m1fn_x2` elements).
 *
 * NVFP4: the per-tensor scale is amax / (448 * 6), amax being the largest
 * magnitude of @src. Each block's scale is the E4M3 cast (round to
 * nearest even) of ((block amax / 6) / tensor scale) clamped to [2^-6,
 * 448]; its elements are multiplied by ((1 / tensor scale) / block
 * scale), clamped to ±6 and cast to E2M1. Every step is one float32
 * operation rounded to nearest even. Under %MIXPREC_BLOCK_RECIPE_NVFP4_2D
 * the amax is taken over 16x16 tiles (the last tile row may be shorter)
 * and the tile's scale is written for each of its 16 rows, so @scales
 * keeps the 1x16 layout; the elements of a matrix and of its transpose
 * then get the same codes.
 *
 * MXFP4: each block of 32 gets an E8M0 scale as @scale_mode says (0xFF
 * for a block holding NaN). FLOOR, CEIL and EVEN divide the elements by
 * the scale (by 2^-126 where the byte is 0, as torchao does), RCEIL
 * multiplies them by its reciprocal and clamps to ±6; values beyond 6
 * saturate to 6.
 *
 * E2M1 has no NaN or Inf: ±Inf gives ±6, and NaN gives what torchao's
 * cast gives (1.5 for the usual NaN); the NaN scale of MXFP4 marks such
 * blocks. An all-zero tensor has the NVFP4 tensor scale 0, which makes
 * every block scale NaN, as in torchao.
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_BLOCK_ERROR)
 *   for an invalid recipe, scale mode or rounding, or when @cols is not a
 *   positive multiple of the block size
 *
 * Since: 1.1
 */
gboolean
mixprec_quantize_blocks (MixprecBlockRecipe  recipe,
                         MixprecMxScaleMode  scale_mode,
                         const gfloat       *src,
                         gsize               rows,
                         gsize               cols,
                         MixprecRounding     rounding,
                         guint64             seed,
                         guint8             *dst,
                         guint8             *scales,
                         gfloat             *tensor_scale,
                         GError            **error)
{
  gfloat ts = 1.0f;

  g_return_val_if_fail (rows == 0 || cols == 0 || (src != NULL && dst != NULL && scales != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_recipe (recipe, scale_mode, error) ||
      !check_rounding (rounding, error) ||
      !check_shape (recipe, rows, cols, error))
    return FALSE;
  if (rows > 0)
    {
      if (recipe == MIXPREC_BLOCK_RECIPE_MXFP4)
        quantize_mxfp4 ((unsigned) scale_mode, src, rows * cols, rounding, seed, dst, scales);
      else
        quantize_nvfp4 (recipe == MIXPREC_BLOCK_RECIPE_NVFP4_2D, src, rows, cols,
                        rounding, seed, dst, scales, &ts);
    }
  if (tensor_scale != NULL)
    *tensor_scale = ts;
  return TRUE;
}

/**
 * mixprec_quantize_blocks_bytes: (rename-to mixprec_quantize_blocks)
 * @recipe: the block recipe
 * @scale_mode: how MXFP4 derives its E8M0 scales; ignored by NVFP4
 * @src_f32: a row-major matrix of float32 values in host byte order
 * @cols: the length of a row, a multiple of the recipe's block size
 * @rounding: how the scaled elements are rounded to E2M1
 * @seed: the seed of stochastic rounding
 * @scales: (out) (transfer full): the scale bytes, one per block
 * @tensor_scale: (out) (optional): NVFP4's per-tensor scale (1.0 for MXFP4)
 * @error: return location for a #GError
 *
 * mixprec_quantize_blocks() on #GBytes, for bindings; the number of rows
 * is the number of values over @cols.
 *
 * Returns: (transfer full) (nullable): the packed E2M1 bytes, two values
 *   per byte, or %NULL with @error set (and @scales untouched), also when
 *   @src_f32 is not a whole number of rows (%MIXPREC_BLOCK_ERROR_INVALID_SHAPE)
 *
 * Since: 1.1
 */
GBytes *
mixprec_quantize_blocks_bytes (MixprecBlockRecipe  recipe,
                               MixprecMxScaleMode  scale_mode,
                               GBytes             *src_f32,
                               gsize               cols,
                               MixprecRounding     rounding,
                               guint64             seed,
                               GBytes            **scales,
                               gfloat             *tensor_scale,
                               GError            **error)
{
  g_autofree gpointer copy = NULL;
  const gfloat *src;
  gsize n = 0, rows, nb;
  guint8 *out, *sc;

  g_return_val_if_fail (src_f32 != NULL, NULL);
  g_return_val_if_fail (scales != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_recipe (recipe, scale_mode, error) || !check_rounding (rounding, error))
    return NULL;
  src = _mixprec_bytes_get_f32 (src_f32, &n, &copy, MIXPREC_BLOCK_ERROR,
                                MIXPREC_BLOCK_ERROR_INVALID_LENGTH, error);
  if (src == NULL)
    return NULL;
  if (!check_rows (recipe, n, cols, &rows, error))
    return NULL;
  nb = n / mixprec_block_recipe_get_block_size (recipe);
  out = g_malloc (MAX (n / 2, 1));
  sc = g_malloc (MAX (nb, 1));
  mixprec_quantize_blocks (recipe, scale_mode, src, rows, cols, rounding, seed, out, sc, tensor_scale, NULL);
  *scales = g_bytes_new_take (sc, nb);
  return g_bytes_new_take (out, n / 2);
}

/**
 * mixprec_dequantize_blocks: (skip)
 * @recipe: the block recipe the values were quantised with
 * @src: (nullable) (array): @rows * @cols / 2 bytes of packed E2M1
 * @scales: (nullable) (array): @rows * @cols / block size scale bytes, as
 *   mixprec_quantize_blocks() wrote them
 * @tensor_scale: NVFP4's per-tensor scale (ignored by MXFP4)
 * @rows: the number of rows
 * @cols: the length of a row, a multiple of the recipe's block size
 * @dst: (nullable) (array): room for @rows * @cols float32 values
 * @error: return location for a #GError
 *
 * Decodes 4-bit blocks as torchao's dequantisers do: each element's E2M1
 * value times its block's factor, one float32 multiplication. NVFP4's
 * factor is @tensor_scale times the E4M3 scale (one float32
 * multiplication, as `NVFP4Tensor.dequantize()` computes it); MXFP4's is
 * 2^(scale - 127), NaN for the scale 0xFF (torchao's `to_dtype()`).
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_BLOCK_ERROR)
 *   for an invalid recipe or a @cols that is not a positive multiple of the
 *   block size
 *
 * Since: 1.1
 */
gboolean
mixprec_dequantize_blocks (MixprecBlockRecipe  recipe,
                           const guint8       *src,
                           const guint8       *scales,
                           gfloat              tensor_scale,
                           gsize               rows,
                           gsize               cols,
                           gfloat             *dst,
                           GError            **error)
{
  guint bs;

  g_return_val_if_fail (rows == 0 || cols == 0 || (src != NULL && dst != NULL && scales != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_recipe (recipe, MIXPREC_MX_SCALE_FLOOR, error) || !check_shape (recipe, rows, cols, error))
    return FALSE;
  bs = mixprec_block_recipe_get_block_size (recipe);
  for (gsize b = 0; b < rows * cols / bs; b++)
    {
      gfloat f = recipe == MIXPREC_BLOCK_RECIPE_MXFP4 ? _mixprec_mx4_decode_scale (scales[b])
                                                      : _mixprec_nvfp4_decode_scale (scales[b], tensor_scale);

      for (gsize i = b * bs; i < (b + 1) * bs; i++)
        dst[i] = _mixprec_num_mul (_mixprec_e2m1_to_f32 ((src[i / 2] >> (4 * (i & 1))) & 0xF), f);
    }
  return TRUE;
}

/**
 * mixprec_dequantize_blocks_bytes: (rename-to mixprec_dequantize_blocks)
 * @recipe: the block recipe the values were quantised with
 * @src: packed E2M1 bytes, two values each
 * @scales: the scale bytes, one per block
 * @tensor_scale: NVFP4's per-tensor scale (ignored by MXFP4)
 * @cols: the length of a row, a multiple of the recipe's block size
 * @error: return location for a #GError
 *
 * mixprec_dequantize_blocks() on #GBytes, for bindings; the number of
 * rows is the number of values (twice the bytes of @src) over @cols.
 *
 * Returns: (transfer full) (nullable): float32 values in host byte order,
 *   or %NULL with @error set, also when @src is not a whole number of rows
 *   (%MIXPREC_BLOCK_ERROR_INVALID_SHAPE) or @scales does not hold one byte
 *   per block (%MIXPREC_BLOCK_ERROR_INVALID_LENGTH)
 *
 * Since: 1.1
 */
GBytes *
mixprec_dequantize_blocks_bytes (MixprecBlockRecipe  recipe,
                                 GBytes             *src,
                                 GBytes             *scales,
                                 gfloat              tensor_scale,
                                 gsize               cols,
                                 GError            **error)
{
  gsize nbytes, nb, n, rows;
  const guint8 *data, *sc;
  gfloat *out;

  g_return_val_if_fail (src != NULL, NULL);
  g_return_val_if_fail (scales != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_recipe (recipe, MIXPREC_MX_SCALE_FLOOR, error))
    return NULL;
  data = g_bytes_get_data (src, &nbytes);
  sc = g_bytes_get_data (scales, &nb);
  n = nbytes * 2;
  if (!check_rows (recipe, n, cols, &rows, error))
    return NULL;
  if (nb != n / mixprec_block_recipe_get_block_size (recipe))
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_LENGTH,
                   "scales: %" G_GSIZE_FORMAT " values in blocks of %u need %" G_GSIZE_FORMAT
                   " scale bytes, got %" G_GSIZE_FORMAT, n, mixprec_block_recipe_get_block_size (recipe),
                   n / mixprec_block_recipe_get_block_size (recipe), nb);
      return NULL;
    }
  out = g_new (gfloat, MAX (n, 1));
  mixprec_dequantize_blocks (recipe, data, sc, tensor_scale, rows, cols, out, NULL);
  return g_bytes_new_take (out, n * sizeof (gfloat));
}

/**
 * mixprec_fp4_pack: (skip)
 * @src: (nullable) (array length=n): @n float32 values
 * @n: the number of values, even
 * @rounding: round to nearest even, or stochastically
 * @seed: the seed of stochastic rounding
 * @first_index: the index of @src[0] in the random stream, as in
 *   mixprec_convert_array()
 * @dst: (nullable) (array): room for @n / 2 bytes
 * @error: return location for a #GError
 *
 * Converts float32 values to FP4 E2M1 without scaling, two per byte
 * (element 2i in the low nibble). Values of magnitude 6 and above, and
 * ±Inf, saturate to ±6; below the smallest magnitude 0.5 the rounding is
 * to 0 or ±0.5 (stochastically: with probability |x| / 0.5). NaN is
 * converted as in mixprec_quantize_blocks().
 *
 * Returns: %TRUE on success; %FALSE with @error set (%MIXPREC_BLOCK_ERROR)
 *   for an invalid rounding or an odd @n
 *
 * Since: 1.1
 */
gboolean
mixprec_fp4_pack (const gfloat     *src,
                  gsize             n,
                  MixprecRounding   rounding,
                  guint64           seed,
                  guint64           first_index,
                  guint8           *dst,
                  GError          **error)
{
  g_return_val_if_fail (n == 0 || (src != NULL && dst != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_rounding (rounding, error))
    return FALSE;
  if (n % 2 != 0)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_LENGTH,
                   "n: FP4 packs two values per byte, got an odd count %" G_GSIZE_FORMAT, n);
      return FALSE;
    }
  if (n > 0)
    _mixprec_fp4_kernels ()->cast (_MIXPREC_FP4_OP_NONE, 1.0f, src, n,
                                   rounding == MIXPREC_ROUNDING_STOCHASTIC, seed, first_index, dst);
  return TRUE;
}

/**
 * mixprec_fp4_pack_bytes: (rename-to mixprec_fp4_pack)
 * @src_f32: float32 values in host byte order, an even number of them
 * @rounding: round to nearest even, or stochastically
 * @seed: the seed of stochastic rounding
 * @error: return location for a #GError
 *
 * mixprec_fp4_pack() on #GBytes, for bindings (the stream starts at
 * index 0).
 *
 * Returns: (transfer full) (nullable): the packed bytes, or %NULL with
 *   @error set
 *
 * Since: 1.1
 */
GBytes *
mixprec_fp4_pack_bytes (GBytes           *src_f32,
                        MixprecRounding   rounding,
                        guint64           seed,
                        GError          **error)
{
  g_autofree gpointer copy = NULL;
  const gfloat *src;
  gsize n = 0;
  guint8 *out;

  g_return_val_if_fail (src_f32 != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  src = _mixprec_bytes_get_f32 (src_f32, &n, &copy, MIXPREC_BLOCK_ERROR,
                                MIXPREC_BLOCK_ERROR_INVALID_LENGTH, error);
  if (src == NULL)
    return NULL;
  out = g_malloc (MAX (n / 2, 1));
  if (!mixprec_fp4_pack (src, n, rounding, seed, 0, out, error))
    {
      g_free (out);
      return NULL;
    }
  return g_bytes_new_take (out, n / 2);
}

/**
 * mixprec_fp4_e2m1_to_float:
 * @code: an FP4 E2M1 code in the low 4 bits (the high 4 are ignored)
 *
 * The value of an E2M1 element: ±0, 0.5, 1, 1.5, 2, 3, 4 or 6.
 *
 * Returns: the value as a float32
 *
 * Since: 1.1
 */
gfloat
mixprec_fp4_e2m1_to_float (guint8 code)
{
  return _mixprec_e2m1_to_f32 (code & 0xF);
}
