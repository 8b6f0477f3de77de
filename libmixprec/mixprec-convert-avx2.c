/* mixprec-convert-avx2.c — the AVX2/F16C kernel table: the scalar kernels
 * of mixprec-convert.c eight lanes at a time, the same bits for every
 * input. Compiled with -mavx2 -mf16c -mfma; reached only through
 * _mixprec_convert_kernels() after the CPU check. Leftover elements go
 * through the scalar helpers, which agree lane for lane. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-dtype-private.h"
#include "mixprec-avx2-private.h"

#define LOAD_16x8(p) _mm_loadu_si128 ((const __m128i *) (p))
#define LOAD_8x8(p) _mm_loadl_epi64 ((const __m128i *) (p))
#define STORE_16x8(p, v) _mm_storeu_si128 ((__m128i *) (p), (v))
#define STORE_8x8(p, v) _mm_storel_epi64 ((__m128i *) (p), (v))

static void
copy_f32 (gconstpointer src,
          gpointer      dst,
          gsize         n,
          guint64       seed,
          guint64       first_index)
{
  memcpy (dst, src, n * sizeof (gfloat));
}

#define DEFINE_DECODE(fname, type, load, convert, scalar) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const type *s = src; \
    gfloat *d = dst; \
    gsize i = 0; \
    for (; i + 8 <= n; i += 8) \
      _mm256_storeu_ps (d + i, convert (load (s + i))); \
    for (; i < n; i++) \
      d[i] = scalar (s[i]); \
  }

#define DEFINE_ENCODE_RNE(fname, type, store, convert, scalar) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const gfloat *s = src; \
    type *d = dst; \
    gsize i = 0; \
    for (; i + 8 <= n; i += 8) \
      store (d + i, convert (_mm256_loadu_ps (s + i))); \
    for (; i < n; i++) \
      d[i] = scalar (s[i]); \
  }

/* Runs stop where the key of the random stream changes (every 2^32
 * indices), so eight consecutive indices never straddle two keys. */
#define DEFINE_ENCODE_SR(fname, type, store, convert, scalar) \
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
        for (; j + 8 <= run; j += 8) \
          store (d + i + j, convert (_mm256_loadu_ps (s + i + j), \
                                     _mixprec_avx2_sr_bits_keyed (key, lo + (guint32) j))); \
        for (; j < run; j++) \
          d[i + j] = scalar (s[i + j], _mixprec_sr_bits_keyed (key, lo + (guint32) j)); \
        i += run; \
      } \
  }

DEFINE_DECODE (bf16_to_f32, guint16, LOAD_16x8, _mixprec_avx2_bf16_to_f32, _mixprec_bf16_to_f32)
DEFINE_DECODE (f16_to_f32, guint16, LOAD_16x8, _mixprec_avx2_f16_to_f32, _mixprec_f16_to_f32)
DEFINE_DECODE (e4m3_to_f32, guint8, LOAD_8x8, _mixprec_avx2_e4m3_to_f32, _mixprec_e4m3_to_f32)
DEFINE_DECODE (e5m2_to_f32, guint8, LOAD_8x8, _mixprec_avx2_e5m2_to_f32, _mixprec_e5m2_to_f32)
DEFINE_ENCODE_RNE (f32_to_f16_rne, guint16, STORE_16x8, _mixprec_avx2_f32_to_f16_rne, _mixprec_f32_to_f16_rne)
DEFINE_ENCODE_RNE (f32_to_e4m3_rne, guint8, STORE_8x8, _mixprec_avx2_f32_to_e4m3_rne, _mixprec_f32_to_e4m3_rne)
DEFINE_ENCODE_RNE (f32_to_e5m2_rne, guint8, STORE_8x8, _mixprec_avx2_f32_to_e5m2_rne, _mixprec_f32_to_e5m2_rne)
DEFINE_ENCODE_SR (f32_to_f16_sr, guint16, STORE_16x8, _mixprec_avx2_f32_to_f16_sr, _mixprec_f32_to_f16_sr)
DEFINE_ENCODE_SR (f32_to_e4m3_sr, guint8, STORE_8x8, _mixprec_avx2_f32_to_e4m3_sr, _mixprec_f32_to_e4m3_sr)
DEFINE_ENCODE_SR (f32_to_e5m2_sr, guint8, STORE_8x8, _mixprec_avx2_f32_to_e5m2_sr, _mixprec_f32_to_e5m2_sr)

/* Sixteen lanes per step: one pack and one lane fix-up for two vectors. */
static void
f32_to_bf16_rne (gconstpointer src,
                 gpointer      dst,
                 gsize         n,
                 guint64       seed,
                 guint64       first_index)
{
  const gfloat *s = src;
  guint16 *d = dst;
  gsize i = 0;

  for (; i + 16 <= n; i += 16)
    {
      __m256i lo = _mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_loadu_ps (s + i));
      __m256i hi = _mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_loadu_ps (s + i + 8));

      /* packus works within 128-bit halves: lo0-3 hi0-3 | lo4-7 hi4-7. */
      _mm256_storeu_si256 ((__m256i *) (d + i),
                           _mm256_permute4x64_epi64 (_mm256_packus_epi32 (lo, hi), 0xD8));
    }
  for (; i < n; i++)
    d[i] = _mixprec_f32_to_bf16_rne (s[i]);
}

/* ------------------------------------------------------------ bfloat16 SR
 *
 * bfloat16 takes half a word of the random stream per element
 * (_mixprec_sr_bits16()), so sixteen elements need one 8-lane hash.
 * Elements from index 2k + o (o = 0 or 1) use the 16-bit units o, o + 1,
 * ... of words k, k + 1, ...: with o = 1 the last element of a step reads
 * the first word of the next step, so each step hashes the next eight
 * words and keeps them.
 */

static inline __attribute__ ((always_inline)) __m256i
bf16_sr_16 (const gfloat *s,
            __m256i       cur,
            __m256i       next,
            guint         o)
{
  __m256i units = cur;
  __m256i lo, hi;

  if (o != 0)
    {
      /* Units 1 .. 16 of cur:next; alignr works within 128-bit halves. */
      __m256i mid = _mm256_permute2x128_si256 (cur, next, 0x21);

      units = _mm256_alignr_epi8 (mid, cur, 2);
    }
  lo = _mixprec_avx2_f32_to_bf16_sr16_epi32 (_mm256_loadu_ps (s),
                                           _mm256_cvtepu16_epi32 (_mm256_castsi256_si128 (units)));
  hi = _mixprec_avx2_f32_to_bf16_sr16_epi32 (_mm256_loadu_ps (s + 8),
                                           _mm256_cvtepu16_epi32 (_mm256_extracti128_si256 (units, 1)));
  /* packus works within 128-bit halves: lo0-3 hi0-3 | lo4-7 hi4-7. */
  return _mm256_permute4x64_epi64 (_mm256_packus_epi32 (lo, hi), 0xD8);
}

/* Whole steps whose destination is 32-byte aligned are streamed when
 * @stream is set; the tail goes through the scalar helpers. */
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
      guint o = (guint) (index & 1);
      gsize j = 0;

      if (run >= 16)
        {
          /* Word indices k .. k + 7, advanced by 8 per step; lanes past
           * the run (and past 2^32 words) are hashed but unused. */
          __m256i words = _mm256_add_epi32 (_mm256_setr_epi32 (0, 1, 2, 3, 4, 5, 6, 7),
                                            _MIXPREC_AVX2_I32 (k));
          __m256i cur = _mixprec_avx2_sr_hash (words, key);

          for (; j + 16 <= run; j += 16)
            {
              __m256i next;
              __m256i v;

              words = _mm256_add_epi32 (words, _MIXPREC_AVX2_I32 (8));
              next = _mixprec_avx2_sr_hash (words, key);
              v = o != 0 ? bf16_sr_16 (s + i + j, cur, next, 1)
                         : bf16_sr_16 (s + i + j, cur, next, 0);

              if (stream && ((guintptr) (d + i + j) & 31) == 0)
                _mm256_stream_si256 ((__m256i *) (d + i + j), v);
              else
                _mm256_storeu_si256 ((__m256i *) (d + i + j), v);
              cur = next;
            }
        }
      for (; j < run; j++)
        d[i + j] = _mixprec_f32_to_bf16_sr (s[i + j], _mixprec_sr_half_keyed (key, index + j));
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
 * For arrays far larger than the last-level cache: the same lanes, written
 * with non-temporal stores, so the destination is not read into the cache
 * first (a write-allocate would add its size again to the memory traffic).
 * The stores need 32-byte alignment: a head with ordinary stores gets
 * there, and a destination not even aligned to its element size streams
 * nothing. The closing sfence orders the streamed lines before whatever
 * tells another thread the work is done.
 */

/* Elements before @dst reaches a 32-byte boundary, or @n when it never
 * can. */
static gsize
stream_head (gconstpointer dst,
             gsize         elem_size,
             gsize         n)
{
  guintptr a = (guintptr) dst;

  if (a % elem_size != 0)
    return n;
  return MIN (n, ((32 - (a & 31)) & 31) / elem_size);
}

#define DEFINE_DECODE_STREAM(fname, plain, type, load, convert) \
  static void \
  fname (gconstpointer src, gpointer dst, gsize n, guint64 seed, guint64 first_index) \
  { \
    const type *s = src; \
    gfloat *d = dst; \
    gsize i = stream_head (d, sizeof (gfloat), n); \
    plain (s, d, i, 0, 0); \
    for (; i + 8 <= n; i += 8) \
      _mm256_stream_ps (d + i, convert (load (s + i))); \
    plain (s + i, d + i, n - i, 0, 0); \
    _mm_sfence (); \
  }

DEFINE_DECODE_STREAM (bf16_to_f32_stream, bf16_to_f32, guint16, LOAD_16x8, _mixprec_avx2_bf16_to_f32)
DEFINE_DECODE_STREAM (f16_to_f32_stream, f16_to_f32, guint16, LOAD_16x8, _mixprec_avx2_f16_to_f32)

static void
f32_to_bf16_rne_stream (gconstpointer src,
                        gpointer      dst,
                        gsize         n,
                        guint64       seed,
                        guint64       first_index)
{
  const gfloat *s = src;
  guint16 *d = dst;
  gsize i = stream_head (d, sizeof (guint16), n);

  f32_to_bf16_rne (s, d, i, 0, 0);
  for (; i + 16 <= n; i += 16)
    {
      __m256i lo = _mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_loadu_ps (s + i));
      __m256i hi = _mixprec_avx2_f32_to_bf16_rne_epi32 (_mm256_loadu_ps (s + i + 8));

      _mm256_stream_si256 ((__m256i *) (d + i),
                           _mm256_permute4x64_epi64 (_mm256_packus_epi32 (lo, hi), 0xD8));
    }
  f32_to_bf16_rne (s + i, d + i, n - i, 0, 0);
  _mm_sfence ();
}

static void
f32_to_f16_rne_stream (gconstpointer src,
                       gpointer      dst,
                       gsize         n,
                       guint64       seed,
                       guint64       first_index)
{
  const gfloat *s = src;
  guint16 *d = dst;
  gsize i = stream_head (d, sizeof (guint16), n);

  f32_to_f16_rne (s, d, i, 0, 0);
  for (; i + 16 <= n; i += 16)
    {
      __m128i lo = _mixprec_avx2_f32_to_f16_rne (_mm256_loadu_ps (s + i));
      __m128i hi = _mixprec_avx2_f32_to_f16_rne (_mm256_loadu_ps (s + i + 8));

      _mm256_stream_si256 ((__m256i *) (d + i),
                           _mm256_inserti128_si256 (_mm256_castsi128_si256 (lo), hi, 1));
    }
  f32_to_f16_rne (s + i, d + i, n - i, 0, 0);
  _mm_sfence ();
}

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

const _MixprecConvertKernels _mixprec_convert_kernels_avx2 = {
  "avx2",
  { copy_f32, f16_to_f32, bf16_to_f32, e4m3_to_f32, e5m2_to_f32 },
  { copy_f32, f32_to_f16_rne, f32_to_bf16_rne, f32_to_e4m3_rne, f32_to_e5m2_rne },
  { copy_f32, f32_to_f16_sr, f32_to_bf16_sr, f32_to_e4m3_sr, f32_to_e5m2_sr },
  { NULL, f16_to_f32_stream, bf16_to_f32_stream, NULL, NULL },
  { NULL, f32_to_f16_rne_stream, f32_to_bf16_rne_stream, NULL, NULL },
  { NULL, NULL, f32_to_bf16_sr_stream, NULL, NULL },
};

void
_mixprec_avx2_sr_bits_store (guint64  seed,
                             guint64  index0,
                             guint32 *out)
{
  _mm256_storeu_si256 ((__m256i *) out, _mixprec_avx2_sr_bits (seed, index0));
}

void
_mixprec_avx2_sr_bits16_store (guint64  seed,
                               guint64  index,
                               guint32 *out)
{
  _mm256_storeu_si256 ((__m256i *) out, _mixprec_avx2_sr_bits16 (seed, index));
}
