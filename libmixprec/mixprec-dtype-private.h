/* mixprec-dtype-private.h — one value at a time: fp32 to and from the
 * narrow formats, and the random bits of stochastic rounding. These inline
 * helpers are the reference that every SIMD kernel, here and in optimizer
 * plugins, reproduces bit for bit. The first part needs only GLib, so
 * plugins can include this header on its own. */
#pragma once

#include <string.h>
#include <glib.h>

G_BEGIN_DECLS

/* ------------------------------------------------------------ bit views */

static inline guint32
_mixprec_f32_bits (gfloat f)
{
  guint32 u;

  memcpy (&u, &f, sizeof u);
  return u;
}

static inline gfloat
_mixprec_f32_from_bits (guint32 u)
{
  gfloat f;

  memcpy (&f, &u, sizeof f);
  return f;
}

/* ------------------------------------------------------------ rounding
 *
 * A narrow format is described by its number of mantissa bits @man_bits and
 * by @emin_b, the fp32 biased exponent of its smallest normal number (113
 * for fp16 and e5m2, 121 for e4m3, 1 for bf16). Its magnitude bits are
 * (biased exponent << man_bits | mantissa), the exponent field of its
 * smallest normal being 1, so fp32 exponent e maps to field e - emin_b + 1.
 */

/* Rounds the finite fp32 magnitude @a (sign bit clear) to nearest, ties to
 * even. Returns the format's magnitude bits; a result above the format's
 * largest finite pattern means overflow, which the caller maps to its
 * format's Inf or NaN. Integer arithmetic only, so the result does not
 * depend on MXCSR (flush-to-zero, denormals-are-zero). */
static inline guint32
_mixprec_round_rne_bits (guint32 a,
                         guint   man_bits,
                         guint32 emin_b)
{
  guint32 e = a >> 23;
  guint d = 23 - man_bits;

  if (e >= emin_b)
    {
      guint32 r = a - ((emin_b - 1) << 23);

      /* A carry out of the mantissa bumps the exponent: still right. */
      return (r + ((1u << (d - 1)) - 1) + ((r >> d) & 1)) >> d;
    }
  else
    {
      /* Below the format's normal range the quantum is fixed: shift the
       * full significand (fp32 subnormals have no hidden bit) so that one
       * unit is the format's smallest subnormal. */
      guint32 sig = e != 0 ? (a & 0x7FFFFF) | 0x800000 : a;
      guint shift = d + emin_b - MAX (e, 1);

      if (shift > 24)
        return 0;               /* below half the smallest subnormal */
      return (sig + ((1u << (shift - 1)) - 1) + ((sig >> shift) & 1)) >> shift;
    }
}

/* Stochastic rounding of the finite fp32 magnitude @a with random bits @r.
 *
 * d is the number of fp32 mantissa bits the format drops at this value:
 * 23 - man_bits in its normal range, more below it so that the randomness
 * always spans exactly one unit in the last place of the format. When
 * d <= 23, the low d bits of @r are added to @a and the low d bits of the
 * sum cleared: the result is the neighbour above with probability equal to
 * the dropped fraction, and is exactly representable, so the final
 * conversion rounds nothing. Below the smallest subnormal s (d > 23) the
 * result is s with probability |x| / s, decided by comparing all 32 bits of
 * @r with that probability scaled by 2^32 and truncated (a bias below
 * 2^-32 s), else zero. */
static inline guint32
_mixprec_round_sr_bits (guint32 a,
                        guint32 r,
                        guint   man_bits,
                        guint32 emin_b)
{
  guint32 e = a >> 23;
  guint32 e1 = MAX (e, 1);
  guint d = 23 - man_bits + (e1 < emin_b ? emin_b - e1 : 0);

  if (d <= 23)
    {
      guint32 mask = (1u << d) - 1;

      return _mixprec_round_rne_bits ((a + (r & mask)) & ~mask, man_bits, emin_b);
    }
  else
    {
      guint32 sig = e != 0 ? (a & 0x7FFFFF) | 0x800000 : a;
      guint32 threshold;

      if (d <= 32)
        threshold = sig << (32 - d);
      else if (d < 64)
        threshold = sig >> (d - 32);
      else
        threshold = 0;
      return r < threshold ? 1 : 0;
    }
}

/* ------------------------------------------------------------ bfloat16 */

static inline gfloat
_mixprec_bf16_to_f32 (guint16 b)
{
  return _mixprec_f32_from_bits ((guint32) b << 16);
}

/* Round to nearest even; subnormals kept; NaN stays NaN, made quiet, with
 * its sign and the top of its payload. */
static inline guint16
_mixprec_f32_to_bf16_rne (gfloat f)
{
  guint32 u = _mixprec_f32_bits (f);

  if ((u & 0x7FFFFFFF) > 0x7F800000)
    return (guint16) ((u >> 16) | 0x0040);
  return (guint16) ((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

/* llm.c's rule: add 16 random bits below the kept ones, truncate. bf16 has
 * fp32's exponent range, so d is 16 everywhere, subnormals included. */
static inline guint16
_mixprec_f32_to_bf16_sr (gfloat  f,
                         guint32 r)
{
  guint32 u = _mixprec_f32_bits (f);

  if ((u & 0x7FFFFFFF) >= 0x7F800000)
    return _mixprec_f32_to_bf16_rne (f);
  return (guint16) ((u + (r & 0xFFFF)) >> 16);
}

/* ------------------------------------------------------------ float16 */

/* Matches F16C's VCVTPH2PS, which quiets signalling NaNs. */
static inline gfloat
_mixprec_f16_to_f32 (guint16 h)
{
  guint32 sign = (guint32) (h & 0x8000) << 16;
  guint32 e = (h >> 10) & 0x1F;
  guint32 m = h & 0x3FF;

  if (e == 0x1F)
    return _mixprec_f32_from_bits (sign | 0x7F800000 | (m != 0 ? 0x400000 | (m << 13) : 0));
  if (e == 0)
    {
      /* m * 2^-24 is an fp32 normal (or zero): exact, whatever MXCSR says. */
      gfloat v = (gfloat) m * 0x1p-24f;

      return sign != 0 ? -v : v;
    }
  return _mixprec_f32_from_bits (sign | ((e + 112) << 23) | (m << 13));
}

/* IEEE round to nearest even, gradual underflow, overflow to Inf. NaN as
 * F16C's VCVTPS2PH: sign | 0x7E00 | the top ten payload bits. */
static inline guint16
_mixprec_f32_to_f16_rne (gfloat f)
{
  guint32 u = _mixprec_f32_bits (f);
  guint32 sign = (u >> 16) & 0x8000;
  guint32 a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (guint16) (sign | 0x7E00 | ((a >> 13) & 0x3FF));
  return (guint16) (sign | MIN (_mixprec_round_rne_bits (a, 10, 113), 0x7C00));
}

static inline guint16
_mixprec_f32_to_f16_sr (gfloat  f,
                        guint32 r)
{
  guint32 u = _mixprec_f32_bits (f);
  guint32 sign = (u >> 16) & 0x8000;
  guint32 a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return _mixprec_f32_to_f16_rne (f);
  return (guint16) (sign | MIN (_mixprec_round_sr_bits (a, r, 10, 113), 0x7C00));
}

/* ------------------------------------------------------------ float8 e4m3
 *
 * The "fn" variant: no infinities, S.1111.111 is NaN, max 448. Overflow and
 * ±Inf give NaN (as PyTorch's float8_e4m3fn cast), NaN gives sign | 0x7F.
 */

static inline gfloat
_mixprec_e4m3_to_f32 (guint8 b)
{
  guint32 sign = (guint32) (b & 0x80) << 24;
  guint32 e = (b >> 3) & 0xF;
  guint32 m = b & 0x7;

  if (e == 0xF && m == 0x7)
    return _mixprec_f32_from_bits (sign | 0x7FC00000);
  if (e == 0)
    {
      gfloat v = (gfloat) m * 0x1p-9f;

      return sign != 0 ? -v : v;
    }
  return _mixprec_f32_from_bits (sign | ((e + 120) << 23) | (m << 20));
}

static inline guint8
_mixprec_e4m3_finish (guint32 sign,
                      guint32 bits)
{
  return (guint8) ((sign >> 24) | (bits > 0x7E ? 0x7F : bits));
}

static inline guint8
_mixprec_f32_to_e4m3_rne (gfloat f)
{
  guint32 u = _mixprec_f32_bits (f);
  guint32 a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return (guint8) (((u >> 24) & 0x80) | 0x7F);
  return _mixprec_e4m3_finish (u & 0x80000000, _mixprec_round_rne_bits (a, 3, 121));
}

static inline guint8
_mixprec_f32_to_e4m3_sr (gfloat  f,
                         guint32 r)
{
  guint32 u = _mixprec_f32_bits (f);
  guint32 a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return _mixprec_f32_to_e4m3_rne (f);
  return _mixprec_e4m3_finish (u & 0x80000000, _mixprec_round_sr_bits (a, r, 3, 121));
}

/* ------------------------------------------------------------ float8 e5m2
 *
 * IEEE-like: the top byte of an fp16. Overflow and ±Inf give ±Inf, NaN
 * gives sign | 0x7F.
 */

static inline gfloat
_mixprec_e5m2_to_f32 (guint8 b)
{
  return _mixprec_f16_to_f32 ((guint16) ((guint16) b << 8));
}

static inline guint8
_mixprec_f32_to_e5m2_rne (gfloat f)
{
  guint32 u = _mixprec_f32_bits (f);
  guint32 sign = (u >> 24) & 0x80;
  guint32 a = u & 0x7FFFFFFF;

  if (a > 0x7F800000)
    return (guint8) (sign | 0x7F);
  return (guint8) (sign | MIN (_mixprec_round_rne_bits (a, 2, 113), 0x7C));
}

static inline guint8
_mixprec_f32_to_e5m2_sr (gfloat  f,
                         guint32 r)
{
  guint32 u = _mixprec_f32_bits (f);
  guint32 a = u & 0x7FFFFFFF;

  if (a >= 0x7F800000)
    return _mixprec_f32_to_e5m2_rne (f);
  return (guint8) (((u >> 24) & 0x80) | MIN (_mixprec_round_sr_bits (a, r, 2, 113), 0x7C));
}

/* ------------------------------------------------------------ random bits
 *
 * The bits for element @index of a tensor are a hash of (seed, index): a
 * counter-based stream, so a result never depends on how the work was split
 * across threads, SIMD lanes or calls. The seed and the high half of the
 * index make a 64-bit key (two splitmix64 finalisers, computed once per 2^32
 * elements); the low half of the index goes through two lowbias32 rounds
 * (Wellons' hash-prospector constants), with half of the key mixed in
 * before each, so streams of different seeds are not shifted or permuted
 * copies of each other. Four 32-bit multiplies per 32-bit word: cheap in
 * 8-lane AVX2.
 *
 * float16 and the float8 formats take one whole word per element (element
 * i: word i), since below their normal range they can use all 32 bits.
 * bfloat16 only ever uses 16 bits per element, so it takes half a word:
 * element i gets 16-bit unit i of the word stream read as little-endian
 * 16-bit units, i.e. the low half of word i / 2 for even i and its high
 * half for odd i (_mixprec_sr_bits16()). That halves the hashing of the
 * conversion that matters most. For a fixed key the word hash is a
 * bijection of the word index, so over each block of 2^32 words every
 * (low, high) pair of halves occurs exactly once: the two elements that
 * share a word are as independent as two uniform 16-bit draws.
 */

static inline guint64
_mixprec_sr_mix64 (guint64 z)
{
  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static inline guint64
_mixprec_sr_key (guint64 seed,
                 guint32 index_hi)
{
  return _mixprec_sr_mix64 (_mixprec_sr_mix64 (seed + G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)) ^ index_hi);
}

static inline guint32
_mixprec_sr_round32 (guint32 x)
{
  x ^= x >> 16;
  x *= 0x21F0AAADu;
  x ^= x >> 15;
  x *= 0xD35A2D97u;
  x ^= x >> 15;
  return x;
}

static inline guint32
_mixprec_sr_bits_keyed (guint64 key,
                        guint32 index_lo)
{
  return _mixprec_sr_round32 (_mixprec_sr_round32 (index_lo ^ (guint32) key) + (guint32) (key >> 32));
}

static inline guint32
_mixprec_sr_bits (guint64 seed,
                  guint64 index)
{
  return _mixprec_sr_bits_keyed (_mixprec_sr_key (seed, (guint32) (index >> 32)), (guint32) index);
}

/* How many of @n elements starting at @index share its key, i.e. lie
 * before the next multiple of 2^32. */
static inline gsize
_mixprec_sr_run_length (guint64 index,
                        gsize   n)
{
  guint64 left = (G_GUINT64_CONSTANT (1) << 32) - (guint32) index;

  return (gsize) MIN ((guint64) n, left);
}

/* The 16 random bits of bfloat16 element @index: half (@index & 1) of
 * word @index / 2, whose key is _mixprec_sr_key (seed, @index >> 33). */
static inline guint32
_mixprec_sr_half_keyed (guint64 key,
                        guint64 index)
{
  return (_mixprec_sr_bits_keyed (key, (guint32) (index >> 1)) >> ((guint) (index & 1) * 16)) & 0xFFFF;
}

static inline guint32
_mixprec_sr_bits16 (guint64 seed,
                    guint64 index)
{
  return (_mixprec_sr_bits (seed, index >> 1) >> ((guint) (index & 1) * 16)) & 0xFFFF;
}

/* How many of @n bfloat16 elements starting at @index share its key, i.e.
 * lie before the next multiple of 2^33 (two elements per word). */
static inline gsize
_mixprec_sr_run_length16 (guint64 index,
                          gsize   n)
{
  guint64 left = (G_GUINT64_CONSTANT (1) << 33) - (index & ((G_GUINT64_CONSTANT (1) << 33) - 1));

  return (gsize) MIN ((guint64) n, left);
}

G_END_DECLS

/* ------------------------------------------------------------ kernels
 *
 * Array kernels of the library itself, for mixprec-convert*.c and the
 * tests that compare the scalar and SIMD tables.
 */
#ifdef MIXPREC_COMPILATION

#include "mixprec-dtype.h"
#include "mixprec-cpu-private.h"

G_BEGIN_DECLS

/* Converts @n elements; element k has index @first_index + k in the random
 * stream of @seed (rounding kernels only). */
typedef void (*_MixprecConvertFunc) (gconstpointer src,
                                     gpointer      dst,
                                     gsize         n,
                                     guint64       seed,
                                     guint64       first_index);

typedef struct {
  const gchar        *name;
  /* Indexed by MixprecDType; the FLOAT32 entries copy. */
  _MixprecConvertFunc to_f32[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_rne[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_sr[MIXPREC_DTYPE_COUNT];
  /* The same results with non-temporal stores, for arrays far beyond the
   * last-level cache; NULL where there is no such kernel. */
  _MixprecConvertFunc to_f32_stream[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_rne_stream[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_sr_stream[MIXPREC_DTYPE_COUNT];
} _MixprecConvertKernels;

extern const _MixprecConvertKernels _mixprec_convert_kernels_scalar;
#ifdef MIXPREC_HAVE_X86_SIMD
extern const _MixprecConvertKernels _mixprec_convert_kernels_avx2;

/* Stores _mixprec_avx2_sr_bits (seed, index0) to @out[0..7], so that tests
 * compiled without AVX2 flags can check it. Needs an AVX2 CPU. */
void _mixprec_avx2_sr_bits_store (guint64  seed,
                                  guint64  index0,
                                  guint32 *out);

/* Stores _mixprec_avx2_sr_bits16 (seed, index) to @out[0..7]. */
void _mixprec_avx2_sr_bits16_store (guint64  seed,
                                    guint64  index,
                                    guint32 *out);
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
extern const _MixprecConvertKernels _mixprec_convert_kernels_avx512;

/* Stores _mixprec_avx512_sr_bits (seed, index0) to @out[0..15], for the
 * tests. Needs an AVX-512 CPU. */
void _mixprec_avx512_sr_bits_store (guint64  seed,
                                    guint64  index0,
                                    guint32 *out);

/* Stores _mixprec_avx512_sr_bits16 (seed, index) to @out[0..15]. */
void _mixprec_avx512_sr_bits16_store (guint64  seed,
                                      guint64  index,
                                      guint32 *out);
#endif

/* The table for @level, or NULL when this build has no such kernels. */
const _MixprecConvertKernels *_mixprec_convert_kernels_for_level (_MixprecSimdLevel level);

/* The table chosen once for this process from _mixprec_cpu_simd_level(). */
const _MixprecConvertKernels *_mixprec_convert_kernels (void);

/* Whether every @src value is exactly representable in @dst, so that the
 * rounding mode cannot matter. */
gboolean _mixprec_dtype_is_exact_in (MixprecDType src,
                                     MixprecDType dst);

/* Converts on the calling thread with the kernels of @kernels; arguments
 * already validated. */
void     _mixprec_convert_run (const _MixprecConvertKernels *kernels,
                               MixprecDType                  src_dtype,
                               gconstpointer                 src,
                               MixprecDType                  dst_dtype,
                               gpointer                      dst,
                               gsize                         n_elements,
                               MixprecRounding               rounding,
                               guint64                       seed,
                               guint64                       first_index);

G_END_DECLS

#endif /* MIXPREC_COMPILATION */
