/* mixprec-convert.c — array conversion between any two number formats:
 * the scalar reference kernels, the choice of kernel table (once per
 * process), the split across threads, and the public entry points. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-dtype-private.h"
#include "mixprec-parallel-private.h"

/* Elements per thread below which waking a thread costs more than it
 * saves (a few microseconds): memory-bound kernels run at tens of GB/s,
 * stochastic rounding hashes each element (each pair for bfloat16) and is
 * several times slower.
 * Parts start on multiples of CONVERT_ALIGN elements: whole cache lines for
 * every dtype, whole SIMD vectors for every kernel. */
#define CONVERT_MIN_CHUNK (1u << 17)
#define CONVERT_MIN_CHUNK_SR (1u << 14)
#define CONVERT_ALIGN 64

/* Conversions moving more bytes than this (about the last-level cache of
 * current x86 parts) write with non-temporal stores where a kernel has
 * them: the output would leave the cache before anyone reads it, and
 * streaming saves the read of each destination line that an ordinary
 * store costs. Measured with bench/bench-convert. */
#define CONVERT_STREAM_MIN_BYTES ((gsize) 32 << 20)

/* Elements per pass of a conversion that goes through an fp32 buffer. */
#define CONVERT_BLOCK 1024

/* ------------------------------------------------------------ scalar kernels */

static void
copy_f32 (gconstpointer src,
          gpointer      dst,
          gsize         n,
          guint64       seed,
          guint64       first_index)
{
  memcpy (dst, src, n * sizeof (gfloat));
}

#define DEFINE_DECODE(fname, type, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const type *s = src; \
    gfloat *d = dst; \
    for (gsize i = 0; i < n; i++) \
      d[i] = convert (s[i]); \
  }

#define DEFINE_ENCODE_RNE(fname, type, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const gfloat *s = src; \
    type *d = dst; \
    for (gsize i = 0; i < n; i++) \
      d[i] = convert (s[i]); \
  }

/* The random-bit key changes every 2^32 indices: runs stop there. */
#define DEFINE_ENCODE_SR(fname, type, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const gfloat *s = src; \
    type *d = dst; \
    for (gsize i = 0; i < n; ) \
      { \
        guint64 index = first_index + i; \
        guint64 key = _mixprec_sr_key (seed, (guint32) (index >> 32)); \
        gsize run = _mixprec_sr_run_length (index, n - i); \
        for (gsize j = 0; j < run; j++) \
          d[i + j] = convert (s[i + j], _mixprec_sr_bits_keyed (key, (guint32) index + (guint32) j)); \
        i += run; \
      } \
  }

/* bfloat16 takes 16 random bits per element, half a word of the stream;
 * its key changes every 2^33 indices. */
static void
f32_to_bf16_sr (gconstpointer src,
                gpointer      dst,
                gsize         n,
                guint64       seed,
                guint64       first_index)
{
  const gfloat *s = src;
  guint16 *d = dst;

  for (gsize i = 0; i < n; )
    {
      guint64 index = first_index + i;
      guint64 key = _mixprec_sr_key (seed, (guint32) (index >> 33));
      gsize run = _mixprec_sr_run_length16 (index, n - i);

      for (gsize j = 0; j < run; j++)
        d[i + j] = _mixprec_f32_to_bf16_sr (s[i + j], _mixprec_sr_half_keyed (key, index + j));
      i += run;
    }
}

DEFINE_DECODE (bf16_to_f32, guint16, _mixprec_bf16_to_f32)
DEFINE_DECODE (f16_to_f32, guint16, _mixprec_f16_to_f32)
DEFINE_DECODE (e4m3_to_f32, guint8, _mixprec_e4m3_to_f32)
DEFINE_DECODE (e5m2_to_f32, guint8, _mixprec_e5m2_to_f32)
DEFINE_ENCODE_RNE (f32_to_bf16_rne, guint16, _mixprec_f32_to_bf16_rne)
DEFINE_ENCODE_RNE (f32_to_f16_rne, guint16, _mixprec_f32_to_f16_rne)
DEFINE_ENCODE_RNE (f32_to_e4m3_rne, guint8, _mixprec_f32_to_e4m3_rne)
DEFINE_ENCODE_RNE (f32_to_e5m2_rne, guint8, _mixprec_f32_to_e5m2_rne)
DEFINE_ENCODE_SR (f32_to_f16_sr, guint16, _mixprec_f32_to_f16_sr)
DEFINE_ENCODE_SR (f32_to_e4m3_sr, guint8, _mixprec_f32_to_e4m3_sr)
DEFINE_ENCODE_SR (f32_to_e5m2_sr, guint8, _mixprec_f32_to_e5m2_sr)

const _MixprecConvertKernels _mixprec_convert_kernels_scalar = {
  "scalar",
  { copy_f32, f16_to_f32, bf16_to_f32, e4m3_to_f32, e5m2_to_f32 },
  { copy_f32, f32_to_f16_rne, f32_to_bf16_rne, f32_to_e4m3_rne, f32_to_e5m2_rne },
  { copy_f32, f32_to_f16_sr, f32_to_bf16_sr, f32_to_e4m3_sr, f32_to_e5m2_sr },
  { NULL, NULL, NULL, NULL, NULL },
  { NULL, NULL, NULL, NULL, NULL },
  { NULL, NULL, NULL, NULL, NULL },
};

/* ------------------------------------------------------------ dispatch */

const _MixprecConvertKernels *
_mixprec_convert_kernels_for_level (_MixprecSimdLevel level)
{
  switch (level)
    {
    case _MIXPREC_SIMD_AVX512:
#ifdef MIXPREC_HAVE_X86_AVX512
      return &_mixprec_convert_kernels_avx512;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_AVX2:
#ifdef MIXPREC_HAVE_X86_SIMD
      return &_mixprec_convert_kernels_avx2;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_SCALAR:
    default:
      return &_mixprec_convert_kernels_scalar;
    }
}

const _MixprecConvertKernels *
_mixprec_convert_kernels (void)
{
  static gsize kernels = 0;

  if (g_once_init_enter (&kernels))
    {
      const _MixprecConvertKernels *k = _mixprec_convert_kernels_for_level (_mixprec_cpu_simd_level ());

      if (k == NULL)
        k = &_mixprec_convert_kernels_scalar;
      g_once_init_leave (&kernels, (gsize) k);
    }
  return (const _MixprecConvertKernels *) kernels;
}

static void
convert_run (const _MixprecConvertKernels *kernels,
             MixprecDType                  src_dtype,
             gconstpointer                 src,
             MixprecDType                  dst_dtype,
             gpointer                      dst,
             gsize                         n_elements,
             MixprecRounding               rounding,
             guint64                       seed,
             guint64                       first_index,
             gboolean                      stream)
{
  const guint8 *s = src;
  guint8 *d = dst;
  gsize src_size = mixprec_dtype_get_size (src_dtype);
  gsize dst_size = mixprec_dtype_get_size (dst_dtype);
  _MixprecConvertFunc encode;
  gfloat buffer[CONVERT_BLOCK];

  if (src_dtype == dst_dtype)
    {
      if (src != dst)
        memcpy (dst, src, n_elements * src_size);
      return;
    }

  /* Values that fit exactly round the same either way; skip the hashing. */
  if (rounding == MIXPREC_ROUNDING_STOCHASTIC && !_mixprec_dtype_is_exact_in (src_dtype, dst_dtype))
    encode = stream && kernels->from_f32_sr_stream[dst_dtype] != NULL
             ? kernels->from_f32_sr_stream[dst_dtype] : kernels->from_f32_sr[dst_dtype];
  else if (stream && kernels->from_f32_rne_stream[dst_dtype] != NULL)
    encode = kernels->from_f32_rne_stream[dst_dtype];
  else
    encode = kernels->from_f32_rne[dst_dtype];

  if (src_dtype == MIXPREC_DTYPE_FLOAT32)
    {
      encode (src, dst, n_elements, seed, first_index);
      return;
    }
  if (dst_dtype == MIXPREC_DTYPE_FLOAT32)
    {
      if (stream && kernels->to_f32_stream[src_dtype] != NULL)
        kernels->to_f32_stream[src_dtype] (src, dst, n_elements, seed, first_index);
      else
        kernels->to_f32[src_dtype] (src, dst, n_elements, seed, first_index);
      return;
    }

  /* Every format is exact in fp32, so going through it rounds once. */
  for (gsize i = 0; i < n_elements; i += CONVERT_BLOCK)
    {
      gsize m = MIN (n_elements - i, CONVERT_BLOCK);

      kernels->to_f32[src_dtype] (s + i * src_size, buffer, m, seed, first_index + i);
      encode (buffer, d + i * dst_size, m, seed, first_index + i);
    }
}

void
_mixprec_convert_run (const _MixprecConvertKernels *kernels,
                      MixprecDType                  src_dtype,
                      gconstpointer                 src,
                      MixprecDType                  dst_dtype,
                      gpointer                      dst,
                      gsize                         n_elements,
                      MixprecRounding               rounding,
                      guint64                       seed,
                      guint64                       first_index)
{
  convert_run (kernels, src_dtype, src, dst_dtype, dst, n_elements, rounding, seed,
               first_index, FALSE);
}

/* ------------------------------------------------------------ public API */

typedef struct {
  const _MixprecConvertKernels *kernels;
  MixprecDType src_dtype;
  const guint8 *src;
  MixprecDType dst_dtype;
  guint8 *dst;
  MixprecRounding rounding;
  guint64 seed;
  guint64 first_index;
  gboolean stream;
} ConvertJob;

static void
convert_range (gsize    begin,
               gsize    end,
               gpointer user_data)
{
  const ConvertJob *job = user_data;

  convert_run (job->kernels, job->src_dtype,
               job->src + begin * mixprec_dtype_get_size (job->src_dtype),
               job->dst_dtype,
               job->dst + begin * mixprec_dtype_get_size (job->dst_dtype),
               end - begin, job->rounding, job->seed, job->first_index + begin, job->stream);
}

static gboolean
check_dtype (gint         dtype,
             const gchar *which,
             GError     **error)
{
  if (mixprec_dtype_is_valid (dtype))
    return TRUE;
  g_set_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_DTYPE,
               "%s dtype %d is not a MixprecDType: valid values are 0 (float32) "
               "to %d (float8_e5m2)", which, dtype, MIXPREC_DTYPE_COUNT - 1);
  return FALSE;
}

static gboolean
check_arguments (MixprecDType      src_dtype,
                 MixprecDType      dst_dtype,
                 MixprecRounding   rounding,
                 GError          **error)
{
  if (!check_dtype (src_dtype, "Source", error) ||
      !check_dtype (dst_dtype, "Destination", error))
    return FALSE;
  if (rounding != MIXPREC_ROUNDING_NEAREST_EVEN && rounding != MIXPREC_ROUNDING_STOCHASTIC)
    {
      g_set_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_ROUNDING,
                   "Rounding mode %d is not a MixprecRounding: valid values are "
                   "0 (nearest-even) and 1 (stochastic)", (gint) rounding);
      return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_convert_array: (skip)
 * @src_dtype: the format of @src
 * @src: (nullable): @n_elements values of @src_dtype, in host byte order,
 *   aligned to the element size
 * @dst_dtype: the format to write
 * @dst: (nullable): room for @n_elements values of @dst_dtype, aligned to
 *   the element size; must not overlap @src unless it is @src and the two
 *   dtypes are equal
 * @n_elements: the number of elements
 * @rounding: how to round when @dst_dtype cannot hold a value exactly
 * @seed: the seed of the random stream of %MIXPREC_ROUNDING_STOCHASTIC
 * @first_index: the index of the first element in that stream
 * @error: return location for a #GError
 *
 * Converts an array between any two number formats.
 *
 * Every format is exactly representable in float32, so a conversion
 * decodes to float32 and encodes once, rounding once. A conversion
 * between equal dtypes copies; one where every source value fits (float8
 * to float16 or bfloat16, anything to float32) ignores @rounding.
 *
 * Narrowing with %MIXPREC_ROUNDING_NEAREST_EVEN follows IEEE 754: ties to
 * even, gradual underflow, no flush to zero; float16 and float8_e5m2
 * overflow to ±Inf, bfloat16 rounds past its largest value to ±Inf, and
 * float8_e4m3 (which has no Inf) gives NaN for overflow and for ±Inf, the
 * OCP specification's non-saturating conversion (PyTorch's float8_e4m3fn
 * cast now saturates instead; mixprec_fp8_quantize() offers both). NaN stays NaN with its sign: quiet, with
 * the top of its payload, in bfloat16 and float16 (the bits F16C
 * produces), 0x7F or 0xFF in the float8 formats.
 *
 * With %MIXPREC_ROUNDING_STOCHASTIC a value between two neighbours of
 * @dst_dtype becomes the upper one with probability equal to its distance
 * from the lower one, in units of their gap, so the result is unbiased.
 * The random bits come from a counter-based stream of 32-bit words, word
 * k being a hash of @seed and k. Element i of a conversion to float16 or
 * a float8 format takes word @first_index + i. bfloat16 needs only 16
 * bits per element and takes half a word: the low 16 bits of word
 * (@first_index + i) / 2 when @first_index + i is even, the high 16 bits
 * when it is odd. So the same inputs give the same bits whatever the
 * number of threads or the SIMD level, and converting a slice of a larger
 * array with @first_index set to the slice's offset gives the bits that
 * converting the whole array gives. Values below the smallest subnormal s
 * become s with probability |x|/s (to 32 bits) and zero otherwise.
 * Overflow, Inf and NaN are treated as in round to nearest.
 *
 * Large arrays are split across the library's threads
 * (mixprec_get_num_threads()); the kernels use AVX-512 or AVX2/F16C when
 * the CPU has them (mixprec_get_simd_name()), bit-identical to the scalar
 * ones.
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_DTYPE_ERROR_INVALID_DTYPE or
 *   %MIXPREC_DTYPE_ERROR_INVALID_ROUNDING for values outside the enums
 *
 * Since: 1.0
 */
gboolean
mixprec_convert_array (MixprecDType    src_dtype,
                       gconstpointer   src,
                       MixprecDType    dst_dtype,
                       gpointer        dst,
                       gsize           n_elements,
                       MixprecRounding rounding,
                       guint64         seed,
                       guint64         first_index,
                       GError        **error)
{
  ConvertJob job;

  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (!check_arguments (src_dtype, dst_dtype, rounding, error))
    return FALSE;
  if (n_elements == 0)
    return TRUE;
  g_return_val_if_fail (src != NULL && dst != NULL, FALSE);
  g_return_val_if_fail (n_elements <= G_MAXSIZE / sizeof (gfloat), FALSE);

  job.kernels = _mixprec_convert_kernels ();
  job.src_dtype = src_dtype;
  job.src = src;
  job.dst_dtype = dst_dtype;
  job.dst = dst;
  job.rounding = rounding;
  job.seed = seed;
  job.first_index = first_index;
  job.stream = n_elements * (mixprec_dtype_get_size (src_dtype) + mixprec_dtype_get_size (dst_dtype))
               >= CONVERT_STREAM_MIN_BYTES;
  _mixprec_parallel_for (n_elements,
                         rounding == MIXPREC_ROUNDING_STOCHASTIC ? CONVERT_MIN_CHUNK_SR : CONVERT_MIN_CHUNK,
                         CONVERT_ALIGN, convert_range, &job);
  return TRUE;
}

/**
 * mixprec_convert:
 * @src_dtype: the format of @src
 * @src: whole elements of @src_dtype, packed, in host byte order
 * @dst_dtype: the format to return
 * @rounding: how to round when @dst_dtype cannot hold a value exactly
 * @seed: the seed of the random stream of %MIXPREC_ROUNDING_STOCHASTIC
 * @error: return location for a #GError
 *
 * Converts a buffer of elements between any two number formats, as
 * mixprec_convert_array() with a first index of 0 (which describes the
 * rounding). This is the form for language bindings.
 *
 * Returns: (transfer full) (nullable): the converted elements, or %NULL
 *   with @error set: %MIXPREC_DTYPE_ERROR_INVALID_LENGTH when the length
 *   of @src is not a multiple of the size of @src_dtype,
 *   %MIXPREC_DTYPE_ERROR_INVALID_DTYPE or
 *   %MIXPREC_DTYPE_ERROR_INVALID_ROUNDING for values outside the enums
 *
 * Since: 1.0
 */
GBytes *
mixprec_convert (MixprecDType    src_dtype,
                 GBytes         *src,
                 MixprecDType    dst_dtype,
                 MixprecRounding rounding,
                 guint64         seed,
                 GError        **error)
{
  gsize length, n, src_size;
  gconstpointer data;
  g_autofree gpointer copy = NULL;
  gpointer out;

  g_return_val_if_fail (src != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!check_arguments (src_dtype, dst_dtype, rounding, error))
    return NULL;

  data = g_bytes_get_data (src, &length);
  src_size = mixprec_dtype_get_size (src_dtype);
  if (length % src_size != 0)
    {
      g_set_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_LENGTH,
                   "Source buffer of %" G_GSIZE_FORMAT " bytes is not a whole number "
                   "of %s elements (%" G_GSIZE_FORMAT " bytes each)",
                   length, mixprec_dtype_get_name (src_dtype), src_size);
      return NULL;
    }
  if (src_dtype == dst_dtype)
    return g_bytes_ref (src);     /* immutable: sharing is a copy */

  /* A slice of another GBytes may start anywhere; the kernels read whole
   * aligned elements. */
  if ((guintptr) data % src_size != 0)
    data = copy = g_memdup2 (data, length);

  n = length / src_size;
  out = g_malloc (n * mixprec_dtype_get_size (dst_dtype));
  mixprec_convert_array (src_dtype, data, dst_dtype, out, n, rounding, seed, 0, NULL);
  return g_bytes_new_take (out, n * mixprec_dtype_get_size (dst_dtype));
}
