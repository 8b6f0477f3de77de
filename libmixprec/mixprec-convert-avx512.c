/* mixprec-convert-avx512.c — the AVX-512 kernel table: the scalar kernels
 * of mixprec-convert.c sixteen lanes at a time, the same bits for every
 * input. Compiled with $(MIXPREC_AVX512_CFLAGS); reached only through
 * _mixprec_convert_kernels() after the CPU check. A tail shorter than a
 * vector goes through the same lanes under a mask. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-dtype-private.h"
#include "mixprec-avx512-private.h"

/* Sixteen elements of each width, whole or the first MIN (n, 16). */
#define LOAD_16(p) _mm256_loadu_si256 ((const __m256i *) (p))
#define LOAD_8(p) _mm_loadu_si128 ((const __m128i *) (p))
#define LOAD_16_MASK(m, p) _mm256_maskz_loadu_epi16 ((m), (p))
#define LOAD_8_MASK(m, p) _mm_maskz_loadu_epi8 ((m), (p))
#define STORE_16(p, v) _mm256_storeu_si256 ((__m256i *) (p), (v))
#define STORE_8(p, v) _mm_storeu_si128 ((__m128i *) (p), (v))
#define STORE_16_MASK(p, m, v) _mm256_mask_storeu_epi16 ((p), (m), (v))
#define STORE_8_MASK(p, m, v) _mm_mask_storeu_epi8 ((p), (m), (v))

static void
copy_f32 (gconstpointer src,
          gpointer      dst,
          gsize         n,
          guint64       seed,
          guint64       first_index)
{
  memcpy (dst, src, n * sizeof (gfloat));
}

#define DEFINE_DECODE(fname, type, load, load_mask, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const type *s = src; \
    gfloat *d = dst; \
    gsize i = 0; \
    for (; i + 16 <= n; i += 16) \
      _mm512_storeu_ps (d + i, convert (load (s + i))); \
    if (i < n) \
      { \
        __mmask16 m = _mixprec_avx512_mask (n - i); \
        _mm512_mask_storeu_ps (d + i, m, convert (load_mask (m, s + i))); \
      } \
  }

#define DEFINE_ENCODE_RNE(fname, type, store, store_mask, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const gfloat *s = src; \
    type *d = dst; \
    gsize i = 0; \
    for (; i + 16 <= n; i += 16) \
      store (d + i, convert (_mm512_loadu_ps (s + i))); \
    if (i < n) \
      { \
        __mmask16 m = _mixprec_avx512_mask (n - i); \
        store_mask (d + i, m, convert (_mm512_maskz_loadu_ps (m, s + i))); \
      } \
  }

/* Runs stop where the key of the random stream changes (every 2^32
 * indices), so sixteen consecutive indices never straddle two keys. */
#define DEFINE_ENCODE_SR(fname, type, store, store_mask, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const gfloat *s = src; \
    type *d = dst; \
    for (gsize i = 0; i < n; ) \
      { \
        guint64 index = first_index + i; \
        guint64 key = _mixprec_sr_key (seed, (guint32) (index >> 32)); \
        guint32 lo = (guint32) index; \
        gsize run = _mixprec_sr_run_length (index, n - i); \
        gsize j = 0; \
        for (; j + 16 <= run; j += 16) \
          store (d + i + j, \
                 convert (_mm512_loadu_ps (s + i + j), \
                          _mixprec_avx512_sr_bits_keyed (key, lo + (guint32) j))); \
        if (j < run) \
          { \
            __mmask16 m = _mixprec_avx512_mask (run - j); \
            store_mask (d + i + j, m, \
                        convert (_mm512_maskz_loadu_ps (m, s + i + j), \
                                 _mixprec_avx512_sr_bits_keyed (key, lo + (guint32) j))); \
          } \
        i += run; \
      } \
  }

DEFINE_DECODE (bf16_to_f32, guint16, LOAD_16, LOAD_16_MASK, _mixprec_avx512_bf16_to_f32)
DEFINE_DECODE (f16_to_f32, guint16, LOAD_16, LOAD_16_MASK, _mixprec_avx512_f16_to_f32)
DEFINE_DECODE (e4m3_to_f32, guint8, LOAD_8, LOAD_8_MASK, _mixprec_avx512_e4m3_to_f32)
DEFINE_DECODE (e5m2_to_f32, guint8, LOAD_8, LOAD_8_MASK, _mixprec_avx512_e5m2_to_f32)

DEFINE_ENCODE_RNE (f32_to_bf16_rne, guint16, STORE_16, STORE_16_MASK, _mixprec_avx512_f32_to_bf16_rne)
DEFINE_ENCODE_RNE (f32_to_f16_rne, guint16, STORE_16, STORE_16_MASK, _mixprec_avx512_f32_to_f16_rne)
DEFINE_ENCODE_RNE (f32_to_e4m3_rne, guint8, STORE_8, STORE_8_MASK, _mixprec_avx512_f32_to_e4m3_rne)
DEFINE_ENCODE_RNE (f32_to_e5m2_rne, guint8, STORE_8, STORE_8_MASK, _mixprec_avx512_f32_to_e5m2_rne)
DEFINE_ENCODE_SR (f32_to_f16_sr, guint16, STORE_16, STORE_16_MASK, _mixprec_avx512_f32_to_f16_sr)
DEFINE_ENCODE_SR (f32_to_e4m3_sr, guint8, STORE_8, STORE_8_MASK, _mixprec_avx512_f32_to_e4m3_sr)
DEFINE_ENCODE_SR (f32_to_e5m2_sr, guint8, STORE_8, STORE_8_MASK, _mixprec_avx512_f32_to_e5m2_sr)

/* ------------------------------------------------------------ bfloat16 SR
 *
 * bfloat16 takes half a word of the random stream per element
 * (_mixprec_sr_bits16()), so thirty-two elements need one 16-lane hash.
 * Elements from index 2k + o (o = 0 or 1) use the 16-bit units o, o + 1,
 * ... of words k, k + 1, ...: with o = 1 the last element of a step reads
 * the first word of the next step, so each step hashes the next sixteen
 * words and keeps them. vpermt2w spreads the units over 32-bit lanes
 * (once per sixteen elements) and packs the high halves of the thirty-two
 * results into one vector.
 */

static inline __attribute__ ((always_inline)) __m512i
bf16_sr_32 (__m512  x0,
            __m512  x1,
            __m512i cur,
            __m512i next,
            __m512i units0)
{
  const __m512i units1 = _mm512_add_epi32 (units0, _MIXPREC_AVX512_I32 (16));
  /* The high halves of 32 lanes: 16-bit units 1, 3, ..., 63. */
  const __m512i odd = _mm512_setr_epi32 (0x00030001, 0x00070005, 0x000B0009, 0x000F000D,
                                         0x00130011, 0x00170015, 0x001B0019, 0x001F001D,
                                         0x00230021, 0x00270025, 0x002B0029, 0x002F002D,
                                         0x00330031, 0x00370035, 0x003B0039, 0x003F003D);
  __m512i r0 = _mm512_maskz_permutex2var_epi16 ((__mmask32) 0x55555555, cur, units0, next);
  __m512i r1 = _mm512_maskz_permutex2var_epi16 ((__mmask32) 0x55555555, cur, units1, next);

  return _mm512_permutex2var_epi16 (_mixprec_avx512_f32_to_bf16_sr16_hi16 (x0, r0), odd,
                                    _mixprec_avx512_f32_to_bf16_sr16_hi16 (x1, r1));
}

/* Whole steps whose destination is 64-byte aligned are streamed when
 * @stream is set. */
static inline __attribute__ ((always_inline)) void
bf16_sr_body (const gfloat *s,
              guint16      *d,
              gsize         n,
              guint64       seed,
              guint64       first_index,
              gboolean      stream)
{
  for (gsize i = 0; i < n; )
    {
      guint64 index = first_index + i;
      guint64 key = _mixprec_sr_key (seed, (guint32) (index >> 33));
      gsize run = _mixprec_sr_run_length16 (index, n - i);
      guint32 k = (guint32) (index >> 1);
      __m512i units0 = _mm512_add_epi32 (_mm512_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7,
                                                            8, 9, 10, 11, 12, 13, 14, 15),
                                         _MIXPREC_AVX512_I32 (index & 1));
      /* Word indices k .. k + 15, advanced by 16 per step; lanes past the
       * run (and past 2^32 words) are hashed but unused. */
      __m512i words = _mm512_add_epi32 (_mm512_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7,
                                                           8, 9, 10, 11, 12, 13, 14, 15),
                                        _MIXPREC_AVX512_I32 (k));
      __m512i cur = _mixprec_avx512_sr_hash (words, key);
      gsize j = 0;

      for (; j + 32 <= run; j += 32)
        {
          __m512i next;
          __m512i v;

          words = _mm512_add_epi32 (words, _MIXPREC_AVX512_I32 (16));
          next = _mixprec_avx512_sr_hash (words, key);
          v = bf16_sr_32 (_mm512_loadu_ps (s + i + j), _mm512_loadu_ps (s + i + j + 16),
                          cur, next, units0);

          if (stream && ((guintptr) (d + i + j) & 63) == 0)
            _mm512_stream_si512 ((void *) (d + i + j), v);
          else
            _mm512_storeu_si512 (d + i + j, v);
          cur = next;
        }
      if (j < run)
        {
          gsize left = run - j;
          __mmask16 m0 = _mixprec_avx512_mask (left);
          __mmask16 m1 = _mixprec_avx512_mask (left > 16 ? left - 16 : 0);
          __m512i next = _mixprec_avx512_sr_hash (_mm512_add_epi32 (words, _MIXPREC_AVX512_I32 (16)), key);
          __m512i v = bf16_sr_32 (_mm512_maskz_loadu_ps (m0, s + i + j),
                                  _mm512_maskz_loadu_ps (m1, s + i + j + MIN (left, 16)),
                                  cur, next, units0);

          _mm512_mask_storeu_epi16 (d + i + j, (__mmask32) (((guint64) 1 << left) - 1), v);
        }
      i += run;
    }
}

static void
f32_to_bf16_sr (gconstpointer src,
                gpointer      dst,
                gsize         n,
                guint64       seed,
                guint64       first_index)
{
  bf16_sr_body (src, dst, n, seed, first_index, FALSE);
}

/* ------------------------------------------------------------ streaming
 *
 * As in mixprec-convert-avx2.c: for arrays far beyond the last-level
 * cache, the same lanes written with non-temporal stores, which need
 * 64-byte alignment here (a head with ordinary stores gets there; a
 * destination not even aligned to its element size streams nothing). The
 * narrowing ones take 32 elements per step so that each store fills a
 * whole cache line.
 */

static gsize
stream_head (gconstpointer dst,
             gsize         elem_size,
             gsize         n)
{
  guintptr a = (guintptr) dst;

  if (a % elem_size != 0)
    return n;
  return MIN (n, ((64 - (a & 63)) & 63) / elem_size);
}

#define DEFINE_DECODE_STREAM(fname, plain, type, load, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const type *s = src; \
    gfloat *d = dst; \
    gsize i = stream_head (d, sizeof (gfloat), n); \
    plain (s, d, i, 0, 0); \
    for (; i + 16 <= n; i += 16) \
      _mm512_stream_ps (d + i, convert (load (s + i))); \
    plain (s + i, d + i, n - i, 0, 0); \
    _mm_sfence (); \
  }

#define DEFINE_ENCODE_STREAM(fname, plain, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const gfloat *s = src; \
    guint16 *d = dst; \
    gsize i = stream_head (d, sizeof (guint16), n); \
    plain (s, d, i, 0, 0); \
    for (; i + 32 <= n; i += 32) \
      { \
        __m256i lo = convert (_mm512_loadu_ps (s + i)); \
        __m256i hi = convert (_mm512_loadu_ps (s + i + 16)); \
        _mm512_stream_si512 ((void *) (d + i), \
                             _mm512_inserti64x4 (_mm512_castsi256_si512 (lo), hi, 1)); \
      } \
    plain (s + i, d + i, n - i, 0, 0); \
    _mm_sfence (); \
  }

DEFINE_DECODE_STREAM (bf16_to_f32_stream, bf16_to_f32, guint16, LOAD_16, _mixprec_avx512_bf16_to_f32)
DEFINE_DECODE_STREAM (f16_to_f32_stream, f16_to_f32, guint16, LOAD_16, _mixprec_avx512_f16_to_f32)
DEFINE_ENCODE_STREAM (f32_to_bf16_rne_stream, f32_to_bf16_rne, _mixprec_avx512_f32_to_bf16_rne)
DEFINE_ENCODE_STREAM (f32_to_f16_rne_stream, f32_to_f16_rne, _mixprec_avx512_f32_to_f16_rne)

static void
f32_to_bf16_sr_stream (gconstpointer src,
                       gpointer      dst,
                       gsize         n,
                       guint64       seed,
                       guint64       first_index)
{
  const gfloat *s = src;
  guint16 *d = dst;
  gsize h = stream_head (d, sizeof (guint16), n);

  bf16_sr_body (s, d, h, seed, first_index, FALSE);
  bf16_sr_body (s + h, d + h, n - h, seed, first_index + h, TRUE);
  _mm_sfence ();
}

const _MixprecConvertKernels _mixprec_convert_kernels_avx512 = {
  "avx512",
  { copy_f32, f16_to_f32, bf16_to_f32, e4m3_to_f32, e5m2_to_f32 },
  { copy_f32, f32_to_f16_rne, f32_to_bf16_rne, f32_to_e4m3_rne, f32_to_e5m2_rne },
  { copy_f32, f32_to_f16_sr, f32_to_bf16_sr, f32_to_e4m3_sr, f32_to_e5m2_sr },
  { NULL, f16_to_f32_stream, bf16_to_f32_stream, NULL, NULL },
  { NULL, f32_to_f16_rne_stream, f32_to_bf16_rne_stream, NULL, NULL },
  { NULL, NULL, f32_to_bf16_sr_stream, NULL, NULL },
};

void
_mixprec_avx512_sr_bits_store (guint64  seed,
                               guint64  index0,
                               guint32 *out)
{
  _mm512_storeu_si512 (out, _mixprec_avx512_sr_bits (seed, index0));
}

void
_mixprec_avx512_sr_bits16_store (guint64  seed,
                                 guint64  index,
                                 guint32 *out)
{
  _mm512_storeu_si512 (out, _mixprec_avx512_sr_bits16 (seed, index));
}
