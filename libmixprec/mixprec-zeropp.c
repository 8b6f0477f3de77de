/* mixprec-zeropp.c — ZeRO++'s block quantizer over whole buffers, in the
 * engine's working dtypes; the per-element rules are those of
 * numeric/numeric-zeropp.h. Blocks are independent, so long buffers are
 * cut into runs of blocks across the thread pool; every block is
 * computed the same way wherever it runs.
 *
 * The rules are applied a block at a time, not an element at a time:
 * a block's conversions to and from fp16 go through the run-time
 * dispatched conversion kernels (bit-identical to the scalar ones), and
 * since a block has one scale, its codes decode through a table of the
 * 16 or 256 values they can take. tests/test-zeropp-blocks.c holds every
 * result to the element-wise rules, bit for bit. */
#include "config.h"

#include <string.h>

#include "mixprec-dtype-private.h"
#include "mixprec-fp8-private.h"
#include "mixprec-zeropp-private.h"
#include "mixprec-parallel-private.h"
#include "numeric/numeric-zeropp.h"

/* numeric-fp8.h's format of an FP8 _MixprecZeroppFormat. */
static inline unsigned
fp8_of (_MixprecZeroppFormat format)
{
  return format == _MIXPREC_ZEROPP_FP8_E4M3 ? _MIXPREC_FP8_E4M3 : _MIXPREC_FP8_E5M2;
}

/* ---------------------------------------------------------------- a block at a time */

/* @n elements of @src (@dtype) as fp16 into @h, rounded to nearest even
 * (beyond 65504 to infinity), as DeepSpeed's quantizer reads them. */
static void
run_to_f16 (const _MixprecConvertKernels *k, const void *src, MixprecDType dtype, guint64 n, guint16 *h)
{
  _mixprec_convert_run (k, dtype, src, MIXPREC_DTYPE_FLOAT16, h, n, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
}

/* The scalar kernel: the element-wise rules themselves. */
static gfloat
codes_scalar (const guint16 *h,
              gsize          n,
              guint          bits,
              gint8         *codes)
{
  int all_nan;
  gfloat scale = _mixprec_zpp_block_scale (h, n, bits, &all_nan);

  for (gsize i = 0; i < n; i++)
    codes[i] = (gint8) _mixprec_zpp_code (h[i], scale, bits);
  return scale;
}

const _MixprecZeroppKernels _mixprec_zeropp_kernels_scalar = { codes_scalar };

const _MixprecZeroppKernels *
_mixprec_zeropp_kernels_for_level (_MixprecSimdLevel level)
{
  switch (level)
    {
    case _MIXPREC_SIMD_AVX512:
#ifdef MIXPREC_HAVE_X86_AVX512
      return &_mixprec_zeropp_kernels_avx512;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_AVX2:
#ifdef MIXPREC_HAVE_X86_SIMD
      return &_mixprec_zeropp_kernels_avx2;
#else
      return NULL;
#endif
    case _MIXPREC_SIMD_SCALAR:
    default:
      return &_mixprec_zeropp_kernels_scalar;
    }
}

const _MixprecZeroppKernels *
_mixprec_zeropp_kernels (void)
{
  static gsize kernels = 0;

  if (g_once_init_enter (&kernels))
    {
      const _MixprecZeroppKernels *k = _mixprec_zeropp_kernels_for_level (_mixprec_cpu_simd_level ());

      g_once_init_leave (&kernels, (gsize) (k != NULL ? k : &_mixprec_zeropp_kernels_scalar));
    }
  return (const _MixprecZeroppKernels *) kernels;
}

/* _mixprec_zpp_quantize_block() of the @n fp16 values at @h; returns
 * the stored scale. */
static gfloat
quantize_f16_block (const guint16 *h, guint64 n, guint bits, gint8 *codes)
{
  const _MixprecZeroppKernels *k = _mixprec_zeropp_kernels ();
  gint8 on_stack[_MIXPREC_ZPP_MAX_GROUP];
  gint8 *unpacked = on_stack;
  gfloat scale;

  if (bits == 8)
    return 1.0f / k->codes (h, n, 8, codes);
  /* Blocks of other callers than the engine's can be longer. */
  if (n > G_N_ELEMENTS (on_stack))
    unpacked = g_new (gint8, n);
  scale = k->codes (h, n, 4, unpacked);
  for (guint64 i = 0; i + 1 < n; i += 2)
    codes[i / 2] = (gint8) (guint8) (((guint32) unpacked[i] & 0xFu) << 4 | ((guint32) unpacked[i + 1] & 0xFu));
  if (unpacked != on_stack)
    g_free (unpacked);
  return 1.0f / scale;
}

/* _mixprec_zpp_fp8_quantize_block() through the dispatched FP8 cast
 * kernels: the block's amax, its multiplier, the unsaturated casts. */
static gfloat
fp8_quantize_block (const gfloat *x, guint64 n, _MixprecZeroppFormat format, guint8 *codes)
{
  const _MixprecFp8Kernels *f = _mixprec_fp8_kernels ();
  guint32 amax = 0;
  gfloat mult;

  f->amax (x, n, &amax);
  mult = _mixprec_zpp_fp8_mult (amax, fp8_of (format));
  f->quantize (fp8_of (format), FALSE, mult, x, codes, n, NULL);
  return _mixprec_num_div (1.0f, mult);
}

/* A block's decoding table: entry c (a code as an unsigned byte, or a
 * nibble) holds _mixprec_zpp_dequantize()'s fp16 for code c converted to
 * @dtype (exactly, or rounded to nearest even for bfloat16); for FP8
 * codes, _mixprec_zpp_fp8_dequantize()'s float32 value rounded to
 * @dtype. */
typedef union {
  guint16 h[256];
  gfloat f[256];
} Table;

static void
table_fill (Table *t, gfloat stored, guint bits, _MixprecZeroppFormat format, MixprecDType dtype)
{
  guint n = format != _MIXPREC_ZEROPP_INT || bits == 8 ? 256 : 16;

  for (guint c = 0; c < n; c++)
    {
      gfloat v;

      if (format != _MIXPREC_ZEROPP_INT)
        v = _mixprec_zpp_fp8_dequantize ((guint8) c, fp8_of (format), stored);
      else
        {
          gint32 code = bits == 8 ? (gint32) (gint8) (guint8) c : (gint32) c - (c >= 8 ? 16 : 0);
          guint16 h = _mixprec_f32_to_f16_rne ((gfloat) code * stored);

          if (dtype == MIXPREC_DTYPE_FLOAT16)
            {
              t->h[c] = h;
              continue;
            }
          v = _mixprec_f16_to_f32 (h);
        }
      switch (dtype)
        {
        case MIXPREC_DTYPE_FLOAT16:
          t->h[c] = _mixprec_f32_to_f16_rne (v);
          break;
        case MIXPREC_DTYPE_BFLOAT16:
          t->h[c] = _mixprec_f32_to_bf16_rne (v);
          break;
        case MIXPREC_DTYPE_FLOAT32:
        default:
          t->f[c] = v;
          break;
        }
    }
}

/* The @n codes of a block at @codes (@bits; FP8 codes are bytes) through
 * @t into @dst (@dtype). */
static void
table_decode (const Table *t, const guint8 *codes, guint64 n, guint bits, void *dst, MixprecDType dtype)
{
  gboolean wide = dtype != MIXPREC_DTYPE_FLOAT16 && dtype != MIXPREC_DTYPE_BFLOAT16;

  if (bits == 8)
    {
      for (guint64 i = 0; i < n; i++)
        if (wide)
          ((gfloat *) dst)[i] = t->f[codes[i]];
        else
          ((guint16 *) dst)[i] = t->h[codes[i]];
      return;
    }
  for (guint64 i = 0; i + 1 < n; i += 2)
    {
      guint8 byte = codes[i / 2];

      if (wide)
        {
          ((gfloat *) dst)[i] = t->f[byte >> 4];
          ((gfloat *) dst)[i + 1] = t->f[byte & 0xFu];
        }
      else
        {
          ((guint16 *) dst)[i] = t->h[byte >> 4];
          ((guint16 *) dst)[i + 1] = t->h[byte & 0xFu];
        }
    }
}

guint64
_mixprec_zeropp_weight_groups (guint64 n)
{
  return _mixprec_zpp_weight_groups (n);
}

guint64
_mixprec_zeropp_code_bytes (guint64 n,
                            guint   bits)
{
  return bits == 8 ? n : (n + 1) / 2;
}

typedef struct {
  const void *src;
  MixprecDType dtype;
  guint64 per;               /* elements per block */
  guint bits;
  _MixprecZeroppFormat format;
  gint8 *codes;
  gfloat *scales;
  const gint8 *in_codes;
  const gfloat *in_scales;
  void *dst;
} Job;

static void
quantize_blocks (gsize begin, gsize end, gpointer data)
{
  const Job *job = data;
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  guint16 *h = job->format == _MIXPREC_ZEROPP_INT ? g_new (guint16, job->per) : NULL;
  gfloat *x = job->format != _MIXPREC_ZEROPP_INT ? g_new (gfloat, job->per) : NULL;

  for (gsize b = begin; b < end; b++)
    {
      guint64 first = b * job->per;
      const void *src = (const guint8 *) job->src + first * mixprec_dtype_get_size (job->dtype);

      if (job->format != _MIXPREC_ZEROPP_INT)
        {
          _mixprec_convert_run (k, job->dtype, src, MIXPREC_DTYPE_FLOAT32, x, job->per,
                                MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
          job->scales[b] = fp8_quantize_block (x, job->per, job->format, (guint8 *) job->codes + first);
          continue;
        }
      run_to_f16 (k, src, job->dtype, job->per, h);
      job->scales[b] = quantize_f16_block (h, job->per, job->bits,
                                           job->codes + _mixprec_zeropp_code_bytes (first, job->bits));
    }
  g_free (h);
  g_free (x);
}

static void
dequantize_blocks (gsize begin, gsize end, gpointer data)
{
  const Job *job = data;
  gsize size = mixprec_dtype_get_size (job->dtype);
  Table t;

  for (gsize b = begin; b < end; b++)
    {
      guint64 first = b * job->per;
      guint bits = job->format != _MIXPREC_ZEROPP_INT ? 8 : job->bits;

      table_fill (&t, job->in_scales[b], bits, job->format, job->dtype);
      table_decode (&t, (const guint8 *) job->in_codes + _mixprec_zeropp_code_bytes (first, bits), job->per, bits,
                    (guint8 *) job->dst + first * size, job->dtype);
    }
}

/* Blocks per work item: about the engine's chunk of elements. */
static gsize
blocks_per_item (guint64 per)
{
  return MAX ((gsize) 1, ((gsize) 1 << 16) / MAX (per, 1));
}

/* Both directions of every format: blocks of n / groups elements across
 * the pool; @bits is 8 or 4 for the integer codes (8 for FP8). */
static void
run_blocks (const void          *src,
            MixprecDType         dtype,
            guint64              n,
            guint64              groups,
            guint                bits,
            _MixprecZeroppFormat format,
            gint8               *codes,
            gfloat              *scales,
            const gint8         *in_codes,
            const gfloat        *in_scales,
            void                *dst)
{
  Job job = { src, dtype, groups > 0 ? n / groups : 0, bits, format, codes, scales, in_codes, in_scales, dst };

  g_return_if_fail (bits == 8 || bits == 4);
  g_return_if_fail (groups > 0 && n % groups == 0);
  g_return_if_fail (bits == 8 || job.per % 2 == 0);
  _mixprec_parallel_for (groups, blocks_per_item (job.per), 1, src != NULL ? quantize_blocks : dequantize_blocks,
                         &job);
}

void
_mixprec_zeropp_quantize (const void   *src,
                          MixprecDType  dtype,
                          guint64       n,
                          guint64       groups,
                          guint         bits,
                          gint8        *codes,
                          gfloat       *scales)
{
  run_blocks (src, dtype, n, groups, bits, _MIXPREC_ZEROPP_INT, codes, scales, NULL, NULL, NULL);
}

void
_mixprec_zeropp_dequantize (const gint8  *codes,
                            const gfloat *scales,
                            guint64       n,
                            guint64       groups,
                            guint         bits,
                            void         *dst,
                            MixprecDType  dtype)
{
  run_blocks (NULL, dtype, n, groups, bits, _MIXPREC_ZEROPP_INT, NULL, NULL, codes, scales, dst);
}

void
_mixprec_zeropp_quantize_as (const void          *src,
                             MixprecDType         dtype,
                             guint64              n,
                             guint64              groups,
                             _MixprecZeroppFormat format,
                             guint8              *codes,
                             gfloat              *scales)
{
  run_blocks (src, dtype, n, groups, 8, format, (gint8 *) codes, scales, NULL, NULL, NULL);
}

void
_mixprec_zeropp_dequantize_as (const guint8        *codes,
                               const gfloat        *scales,
                               guint64              n,
                               guint64              groups,
                               _MixprecZeroppFormat format,
                               void                *dst,
                               MixprecDType         dtype)
{
  run_blocks (NULL, dtype, n, groups, 8, format, NULL, NULL, (const gint8 *) codes, scales, dst);
}

/* ---------------------------------------------------------------- quant_reduce */

typedef struct {
  const gint8 *codes;
  const gfloat *scales;
  guint n_tensors;
  guint64 elems;             /* per tensor */
  guint64 in_per;            /* elements per input block */
  guint64 in_groups;         /* input blocks per tensor */
  guint64 out_per;
  guint bits;
  gint8 *out_codes;
  gfloat *out_scales;
} ReduceJob;

static void
quant_reduce_blocks (gsize begin, gsize end, gpointer data)
{
  const ReduceJob *job = data;
  guint16 *h = g_new (guint16, job->out_per);

  for (gsize o = begin; o < end; o++)
    {
      guint64 first = o * job->out_per;

      for (guint64 i = 0; i < job->out_per; i++)
        {
          guint64 e = first + i;
          /* reduce::init<Add> for __half2: +0, then one fp16 addition per
           * tensor in tensor order. */
          guint16 acc = 0;

          for (guint j = 0; j < job->n_tensors; j++)
            {
              const gint8 *codes = job->codes + _mixprec_zeropp_code_bytes (j * job->elems, job->bits);
              guint64 b = e / job->in_per;
              guint16 d = _mixprec_zpp_dequantize (codes + _mixprec_zeropp_code_bytes (b * job->in_per, job->bits),
                                                   e - b * job->in_per, job->bits,
                                                   job->scales[j * job->in_groups + b]);

              acc = _mixprec_zpp_f16_add (acc, d);
            }
          h[i] = acc;
        }
      job->out_scales[o] = _mixprec_zpp_quantize_block (h, job->out_per, job->bits,
                                                        job->out_codes + _mixprec_zeropp_code_bytes (first, job->bits));
    }
  g_free (h);
}

void
_mixprec_zeropp_quant_reduce (const gint8  *codes,
                              const gfloat *scales,
                              guint         n_tensors,
                              guint64       elems,
                              guint64       in_groups,
                              guint64       out_groups,
                              guint         bits,
                              gint8        *out_codes,
                              gfloat       *out_scales)
{
  ReduceJob job = { codes, scales, n_tensors, elems, 0, in_groups, 0, bits, out_codes, out_scales };

  g_return_if_fail (bits == 8 || bits == 4);
  g_return_if_fail (in_groups > 0 && elems % in_groups == 0);
  g_return_if_fail (out_groups > 0 && elems % out_groups == 0);
  job.in_per = elems / in_groups;
  job.out_per = elems / out_groups;
  g_return_if_fail (bits == 8 || (job.in_per % 2 == 0 && job.out_per % 2 == 0));
  _mixprec_parallel_for (out_groups, blocks_per_item (job.out_per * MAX (n_tensors, 1)), 1,
                         quant_reduce_blocks, &job);
}

/* ---------------------------------------------------------------- qgZ's wire */

guint64
_mixprec_zeropp_qgz_blocks (guint64 count)
{
  return (count + _MIXPREC_ZEROPP_QGZ_BLOCK - 1) / _MIXPREC_ZEROPP_QGZ_BLOCK;
}

/* Code bytes of one qgZ block in @format. */
static inline guint64
qgz_block_code_bytes (_MixprecZeroppFormat format)
{
  return format == _MIXPREC_ZEROPP_INT ? _MIXPREC_ZEROPP_QGZ_BLOCK / 2 : _MIXPREC_ZEROPP_QGZ_BLOCK;
}

guint64
_mixprec_zeropp_qgz_run_bytes_as (guint64              count,
                                  _MixprecZeroppFormat format)
{
  return _mixprec_zeropp_qgz_blocks (count) * (qgz_block_code_bytes (format) + sizeof (gfloat));
}

guint64
_mixprec_zeropp_qgz_run_bytes (guint64 count)
{
  return _mixprec_zeropp_qgz_run_bytes_as (count, _MIXPREC_ZEROPP_INT);
}

typedef struct {
  const void *src;
  MixprecDType dtype;
  guint64 count;
  guint64 blocks;            /* per run */
  guint8 *wire;
  guint64 run_bytes;
  /* LoCo: run r's errors at err + r * err_stride (NULL: none) */
  guint16 *err;
  guint64 err_stride;
  gfloat beta;
  /* reduce */
  guint world;
  gboolean accumulate;
  void *dst;
  MixprecDType dst_dtype;
  _MixprecZeroppFormat format;
  guint64 run_stride;        /* reduce: bytes from one run to the next */
} WireJob;

/* Block @k of every run in FP8: LoCo's value v = x + e in float32. */
static void
qgz_quantize_fp8_block (const WireJob *job,
                        guint64        first,
                        guint64        len,
                        guint8        *codes,
                        gfloat        *stored,
                        guint16       *err)
{
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  gfloat v[_MIXPREC_ZEROPP_QGZ_BLOCK], e[_MIXPREC_ZEROPP_QGZ_BLOCK];
  Table t;

  /* A shorter last block is padded with zeros, which change neither its
   * absmax nor its other codes. */
  _mixprec_convert_run (k, job->dtype, (const guint8 *) job->src + first * mixprec_dtype_get_size (job->dtype),
                        MIXPREC_DTYPE_FLOAT32, v, len, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
  memset (v + len, 0, (_MIXPREC_ZEROPP_QGZ_BLOCK - len) * sizeof v[0]);
  if (err != NULL)
    {
      k->to_f32[MIXPREC_DTYPE_FLOAT16] (err, e, len, 0, 0);
      for (guint64 i = 0; i < len; i++)
        v[i] += e[i];
    }
  *stored = fp8_quantize_block (v, _MIXPREC_ZEROPP_QGZ_BLOCK, job->format, codes);
  if (err == NULL)
    return;
  table_fill (&t, *stored, 8, job->format, MIXPREC_DTYPE_FLOAT32);
  for (guint64 i = 0; i < len; i++)
    {
      gfloat fresh = v[i] - t.f[codes[i]];

      e[i] = job->beta * e[i] + (1.0f - job->beta) * fresh;
    }
  k->from_f32_rne[MIXPREC_DTYPE_FLOAT16] (e, err, len, 0, 0);
}

/* Block @k of every run: run k / blocks, block k % blocks. */
static void
qgz_quantize_blocks (gsize begin, gsize end, gpointer data)
{
  const WireJob *job = data;
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  gsize size = mixprec_dtype_get_size (job->dtype);
  guint16 h[_MIXPREC_ZEROPP_QGZ_BLOCK];
  gfloat x[_MIXPREC_ZEROPP_QGZ_BLOCK], e[_MIXPREC_ZEROPP_QGZ_BLOCK];
  Table t;

  for (gsize kk = begin; kk < end; kk++)
    {
      guint64 r = kk / job->blocks, b = kk % job->blocks;
      guint64 first = r * job->count + b * _MIXPREC_ZEROPP_QGZ_BLOCK;
      guint64 len = MIN ((guint64) _MIXPREC_ZEROPP_QGZ_BLOCK, job->count - b * _MIXPREC_ZEROPP_QGZ_BLOCK);
      guint8 *run = job->wire + r * job->run_bytes;
      guint64 code_bytes = qgz_block_code_bytes (job->format);
      gint8 *codes = (gint8 *) run + b * code_bytes;
      gfloat *scales = (gfloat *) (gpointer) (run + job->blocks * code_bytes);
      guint16 *err = job->err != NULL ? job->err + r * job->err_stride + b * _MIXPREC_ZEROPP_QGZ_BLOCK : NULL;
      gfloat stored;

      if (job->format != _MIXPREC_ZEROPP_INT)
        {
          qgz_quantize_fp8_block (job, first, len, (guint8 *) codes, &scales[b], err);
          continue;
        }
      /* A shorter last block is padded with zeros, which change neither
       * its absmax nor its other codes. */
      run_to_f16 (k, (const guint8 *) job->src + first * size, job->dtype, len, h);
      memset (h + len, 0, (_MIXPREC_ZEROPP_QGZ_BLOCK - len) * sizeof h[0]);
      /* LoCo: the fed-back error joins the gradient in fp16 (__hadd2, the
       * float32 sum rounded once: _mixprec_zpp_f16_add()). */
      if (err != NULL)
        {
          k->to_f32[MIXPREC_DTYPE_FLOAT16] (h, x, len, 0, 0);
          k->to_f32[MIXPREC_DTYPE_FLOAT16] (err, e, len, 0, 0);
          for (guint64 i = 0; i < len; i++)
            x[i] = x[i] + e[i];
          k->from_f32_rne[MIXPREC_DTYPE_FLOAT16] (x, h, len, 0, 0);
        }
      stored = quantize_f16_block (h, _MIXPREC_ZEROPP_QGZ_BLOCK, 4, codes);
      scales[b] = stored;
      if (err == NULL)
        continue;
      /* ...and the new error, what the codes miss, is averaged into it in
       * FP32: e = fp16 (beta e + (1 - beta) (v - dequantized v)), v the
       * fp16 value quantized. */
      k->to_f32[MIXPREC_DTYPE_FLOAT16] (h, x, len, 0, 0);
      table_fill (&t, stored, 4, _MIXPREC_ZEROPP_INT, MIXPREC_DTYPE_FLOAT32);
      for (guint64 i = 0; i < len; i++)
        {
          guint8 byte = (guint8) codes[i / 2];
          gfloat d = t.f[i % 2 == 0 ? byte >> 4 : byte & 0xFu];
          gfloat fresh = x[i] - d;

          e[i] = job->beta * e[i] + (1.0f - job->beta) * fresh;
        }
      k->from_f32_rne[MIXPREC_DTYPE_FLOAT16] (e, err, len, 0, 0);
    }
}

void
_mixprec_zeropp_qgz_quantize_as (const void          *src,
                                 MixprecDType         dtype,
                                 guint64              count,
                                 guint                world,
                                 guint16             *err,
                                 guint64              err_stride,
                                 gfloat               err_beta,
                                 _MixprecZeroppFormat format,
                                 guint8              *wire)
{
  WireJob job = { src, dtype, count, _mixprec_zeropp_qgz_blocks (count), wire,
                  _mixprec_zeropp_qgz_run_bytes_as (count, format), err, err_stride, err_beta,
                  world, FALSE, NULL, 0, format };

  _mixprec_parallel_for (job.blocks * world, 16, 1, qgz_quantize_blocks, &job);
}

void
_mixprec_zeropp_qgz_quantize (const void   *src,
                              MixprecDType  dtype,
                              guint64       count,
                              guint         world,
                              guint16      *err,
                              guint64       err_stride,
                              gfloat        err_beta,
                              guint8       *wire)
{
  _mixprec_zeropp_qgz_quantize_as (src, dtype, count, world, err, err_stride, err_beta,
                                   _MIXPREC_ZEROPP_INT, wire);
}

/* Elements [begin, end) of the sum, a block at a time: each run's block
 * decodes through its table (_mixprec_zpp_dequantize()'s fp16 as FP32,
 * or _mixprec_zpp_fp8_dequantize()), and
 * the element's sum is acc = run 0 (+ what dst holds, first), then + run
 * 1, + run 2, ... in FP32 in rank order. */
static void
qgz_reduce_range (gsize begin, gsize end, gpointer data)
{
  const WireJob *job = data;
  const _MixprecConvertKernels *k = _mixprec_convert_kernels ();
  guint bits = job->format == _MIXPREC_ZEROPP_INT ? 4 : 8;
  guint64 code_bytes = qgz_block_code_bytes (job->format);
  gfloat acc[_MIXPREC_ZEROPP_QGZ_BLOCK];
  Table t;

  for (gsize i = begin; i < end;)
    {
      guint64 b = i / _MIXPREC_ZEROPP_QGZ_BLOCK, at = i - b * _MIXPREC_ZEROPP_QGZ_BLOCK;
      guint64 n = MIN ((guint64) end - i, _MIXPREC_ZEROPP_QGZ_BLOCK - at);

      for (guint r = 0; r < job->world; r++)
        {
          const guint8 *run = job->wire + r * job->run_stride;
          const guint8 *codes = run + b * code_bytes;
          const gfloat *scales = (const gfloat *) (gconstpointer) (run + job->blocks * code_bytes);

          table_fill (&t, scales[b], bits, job->format, MIXPREC_DTYPE_FLOAT32);
          for (guint64 j = 0; j < n; j++)
            {
              guint64 e = at + j;
              gfloat v = bits == 8 ? t.f[codes[e]] : t.f[e % 2 == 0 ? codes[e / 2] >> 4 : codes[e / 2] & 0xFu];

              acc[j] = r == 0 ? v : acc[j] + v;
            }
          if (r == 0 && job->accumulate)
            {
              gfloat was[_MIXPREC_ZEROPP_QGZ_BLOCK];

              _mixprec_convert_run (k, job->dst_dtype, (const guint8 *) job->dst + i * mixprec_dtype_get_size (job->dst_dtype),
                                    MIXPREC_DTYPE_FLOAT32, was, n, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
              for (guint64 j = 0; j < n; j++)
                acc[j] = was[j] + acc[j];
            }
        }
      _mixprec_convert_run (k, MIXPREC_DTYPE_FLOAT32, acc, job->dst_dtype,
                            (guint8 *) job->dst + i * mixprec_dtype_get_size (job->dst_dtype), n,
                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
      i += n;
    }
}

void
_mixprec_zeropp_qgz_reduce_as (const guint8        *wire,
                               guint                world,
                               guint64              count,
                               gboolean             accumulate,
                               _MixprecZeroppFormat format,
                               void                *dst,
                               MixprecDType         dst_dtype)
{
  _mixprec_zeropp_qgz_reduce_strided_as (wire, world, _mixprec_zeropp_qgz_run_bytes_as (count, format),
                                         count, accumulate, format, dst, dst_dtype);
}

void
_mixprec_zeropp_qgz_reduce_strided_as (const guint8        *wire,
                                       guint                n_runs,
                                       guint64              run_stride,
                                       guint64              count,
                                       gboolean             accumulate,
                                       _MixprecZeroppFormat format,
                                       void                *dst,
                                       MixprecDType         dst_dtype)
{
  WireJob job = { NULL, 0, count, _mixprec_zeropp_qgz_blocks (count), (guint8 *) wire,
                  _mixprec_zeropp_qgz_run_bytes_as (count, format), NULL, 0, 0.0f, n_runs, accumulate, dst,
                  dst_dtype, format, run_stride };

  _mixprec_parallel_for (count, (gsize) 1 << 14, 1, qgz_reduce_range, &job);
}

void
_mixprec_zeropp_qgz_reduce (const guint8 *wire,
                            guint         world,
                            guint64       count,
                            gboolean      accumulate,
                            void         *dst,
                            MixprecDType  dst_dtype)
{
  _mixprec_zeropp_qgz_reduce_as (wire, world, count, accumulate, _MIXPREC_ZEROPP_INT, dst, dst_dtype);
}

void
_mixprec_zeropp_qgz_group_runs (const guint8 *wire,
                                guint         world,
                                guint         per_host,
                                guint64       run_bytes,
                                guint8       *grouped)
{
  guint hosts = world / per_host;

  for (guint j = 0; j < per_host; j++)
    for (guint h = 0; h < hosts; h++)
      memcpy (grouped + ((guint64) j * hosts + h) * run_bytes, wire + ((guint64) h * per_host + j) * run_bytes,
              run_bytes);
}

void
_mixprec_zeropp_qgz_level2 (const guint8        *arrived,
                            guint                per_host,
                            guint                hosts,
                            guint64              count,
                            _MixprecZeroppFormat format,
                            gfloat              *partial,
                            guint8              *out)
{
  guint64 run = _mixprec_zeropp_qgz_run_bytes_as (count, format);

  for (guint h = 0; h < hosts; h++)
    _mixprec_zeropp_qgz_reduce_strided_as (arrived + h * run, per_host, (guint64) hosts * run, count, FALSE,
                                           format, partial + (guint64) h * count, MIXPREC_DTYPE_FLOAT32);
  _mixprec_zeropp_qgz_quantize_as (partial, MIXPREC_DTYPE_FLOAT32, count, hosts, NULL, 0, 0.0f, format, out);
}
