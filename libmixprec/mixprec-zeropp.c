/* mixprec-zeropp.c — ZeRO++'s block quantizer over whole buffers, in the
 * engine's working dtypes; the per-element rules are those of
 * numeric/numeric-zeropp.h. Blocks are independent, so long buffers are
 * cut into runs of blocks across the thread pool; every block is
 * computed the same way wherever it runs. */
#include "config.h"

#include "mixprec-zeropp-private.h"
#include "mixprec-parallel-private.h"
#include "numeric/numeric-zeropp.h"

/* fp16 bits of element @i of @src. */
static inline guint16
to_f16 (const void *src, MixprecDType dtype, guint64 i)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      return ((const guint16 *) src)[i];
    case MIXPREC_DTYPE_BFLOAT16:
      return _mixprec_f32_to_f16_rne (_mixprec_bf16_to_f32 (((const guint16 *) src)[i]));
    case MIXPREC_DTYPE_FLOAT32:
    default:
      return _mixprec_f32_to_f16_rne (((const gfloat *) src)[i]);
    }
}

static inline void
from_f16 (void *dst, MixprecDType dtype, guint64 i, guint16 h)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      ((guint16 *) dst)[i] = h;
      break;
    case MIXPREC_DTYPE_BFLOAT16:
      ((guint16 *) dst)[i] = _mixprec_f32_to_bf16_rne (_mixprec_f16_to_f32 (h));
      break;
    case MIXPREC_DTYPE_FLOAT32:
    default:
      ((gfloat *) dst)[i] = _mixprec_f16_to_f32 (h);
      break;
    }
}

static inline gfloat
read_f32 (const void *src, MixprecDType dtype, guint64 i)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      return _mixprec_f16_to_f32 (((const guint16 *) src)[i]);
    case MIXPREC_DTYPE_BFLOAT16:
      return _mixprec_bf16_to_f32 (((const guint16 *) src)[i]);
    case MIXPREC_DTYPE_FLOAT32:
    default:
      return ((const gfloat *) src)[i];
    }
}

static inline void
write_f32 (void *dst, MixprecDType dtype, guint64 i, gfloat v)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      ((guint16 *) dst)[i] = _mixprec_f32_to_f16_rne (v);
      break;
    case MIXPREC_DTYPE_BFLOAT16:
      ((guint16 *) dst)[i] = _mixprec_f32_to_bf16_rne (v);
      break;
    case MIXPREC_DTYPE_FLOAT32:
    default:
      ((gfloat *) dst)[i] = v;
      break;
    }
}

/* numeric-fp8.h's format of an FP8 _MixprecZeroppFormat. */
static inline unsigned
fp8_of (_MixprecZeroppFormat format)
{
  return format == _MIXPREC_ZEROPP_FP8_E4M3 ? _MIXPREC_FP8_E4M3 : _MIXPREC_FP8_E5M2;
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
  guint16 *h = job->format == _MIXPREC_ZEROPP_INT ? g_new (guint16, job->per) : NULL;
  gfloat *x = job->format != _MIXPREC_ZEROPP_INT ? g_new (gfloat, job->per) : NULL;

  for (gsize b = begin; b < end; b++)
    {
      guint64 first = b * job->per;

      if (job->format != _MIXPREC_ZEROPP_INT)
        {
          for (guint64 i = 0; i < job->per; i++)
            x[i] = read_f32 (job->src, job->dtype, first + i);
          job->scales[b] = _mixprec_zpp_fp8_quantize_block (x, job->per, fp8_of (job->format),
                                                            (guint8 *) job->codes + first);
          continue;
        }
      for (guint64 i = 0; i < job->per; i++)
        h[i] = to_f16 (job->src, job->dtype, first + i);
      job->scales[b] = _mixprec_zpp_quantize_block (h, job->per, job->bits,
                                                    job->codes + _mixprec_zeropp_code_bytes (first, job->bits));
    }
  g_free (h);
  g_free (x);
}

static void
dequantize_blocks (gsize begin, gsize end, gpointer data)
{
  const Job *job = data;

  for (gsize b = begin; b < end; b++)
    {
      guint64 first = b * job->per;
      const gint8 *codes = job->in_codes + _mixprec_zeropp_code_bytes (first, job->bits);

      if (job->format != _MIXPREC_ZEROPP_INT)
        {
          for (guint64 i = 0; i < job->per; i++)
            write_f32 (job->dst, job->dtype, first + i,
                       _mixprec_zpp_fp8_dequantize (((const guint8 *) job->in_codes)[first + i],
                                                    fp8_of (job->format), job->in_scales[b]));
          continue;
        }
      for (guint64 i = 0; i < job->per; i++)
        from_f16 (job->dst, job->dtype, first + i,
                  _mixprec_zpp_dequantize (codes, i, job->bits, job->in_scales[b]));
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
  gfloat v[_MIXPREC_ZEROPP_QGZ_BLOCK];
  unsigned format = fp8_of (job->format);

  /* A shorter last block is padded with zeros, which change neither its
   * absmax nor its other codes. */
  for (guint64 i = 0; i < _MIXPREC_ZEROPP_QGZ_BLOCK; i++)
    v[i] = i < len ? read_f32 (job->src, job->dtype, first + i) : 0.0f;
  for (guint64 i = 0; err != NULL && i < len; i++)
    v[i] += _mixprec_f16_to_f32 (err[i]);
  *stored = _mixprec_zpp_fp8_quantize_block (v, _MIXPREC_ZEROPP_QGZ_BLOCK, format, codes);
  for (guint64 i = 0; err != NULL && i < len; i++)
    {
      gfloat fresh = v[i] - _mixprec_zpp_fp8_dequantize (codes[i], format, *stored);

      err[i] = _mixprec_f32_to_f16_rne (job->beta * _mixprec_f16_to_f32 (err[i]) + (1.0f - job->beta) * fresh);
    }
}

/* Block @k of every run: run k / blocks, block k % blocks. */
static void
qgz_quantize_blocks (gsize begin, gsize end, gpointer data)
{
  const WireJob *job = data;
  guint16 h[_MIXPREC_ZEROPP_QGZ_BLOCK];

  for (gsize k = begin; k < end; k++)
    {
      guint64 r = k / job->blocks, b = k % job->blocks;
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
      for (guint64 i = 0; i < _MIXPREC_ZEROPP_QGZ_BLOCK; i++)
        h[i] = i < len ? to_f16 (job->src, job->dtype, first + i) : 0;
      /* LoCo: the fed-back error joins the gradient in fp16 (__hadd2). */
      for (guint64 i = 0; err != NULL && i < len; i++)
        h[i] = _mixprec_zpp_f16_add (h[i], err[i]);
      stored = _mixprec_zpp_quantize_block (h, _MIXPREC_ZEROPP_QGZ_BLOCK, 4, codes);
      scales[b] = stored;
      /* ...and the new error, what the codes miss, is averaged into it in
       * FP32: e = fp16 (beta e + (1 - beta) (v - dequantized v)). */
      for (guint64 i = 0; err != NULL && i < len; i++)
        {
          gfloat v = _mixprec_f16_to_f32 (h[i]);
          gfloat d = _mixprec_f16_to_f32 (_mixprec_zpp_dequantize (codes, i, 4, stored));
          gfloat fresh = v - d;

          err[i] = _mixprec_f32_to_f16_rne (job->beta * _mixprec_f16_to_f32 (err[i]) +
                                            (1.0f - job->beta) * fresh);
        }
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

/* The FP32 value of element @i of @run's dequantized block. */
static inline gfloat
qgz_value (const guint8         *run,
           guint64               blocks,
           _MixprecZeroppFormat  format,
           guint64               i)
{
  guint64 b = i / _MIXPREC_ZEROPP_QGZ_BLOCK, code_bytes = qgz_block_code_bytes (format);
  const gfloat *scales = (const gfloat *) (gconstpointer) (run + blocks * code_bytes);

  if (format != _MIXPREC_ZEROPP_INT)
    return _mixprec_zpp_fp8_dequantize (run[i], fp8_of (format), scales[b]);
  return _mixprec_f16_to_f32 (_mixprec_zpp_dequantize ((const gint8 *) run + b * code_bytes,
                                                       i - b * _MIXPREC_ZEROPP_QGZ_BLOCK, 4, scales[b]));
}

static void
qgz_reduce_range (gsize begin, gsize end, gpointer data)
{
  const WireJob *job = data;

  for (gsize i = begin; i < end; i++)
    {
      gfloat acc = qgz_value (job->wire, job->blocks, job->format, i);

      if (job->accumulate)
        acc = read_f32 (job->dst, job->dst_dtype, i) + acc;
      for (guint r = 1; r < job->world; r++)
        acc += qgz_value (job->wire + r * job->run_bytes, job->blocks, job->format, i);
      switch (job->dst_dtype)
        {
        case MIXPREC_DTYPE_FLOAT16:
          ((guint16 *) job->dst)[i] = _mixprec_f32_to_f16_rne (acc);
          break;
        case MIXPREC_DTYPE_BFLOAT16:
          ((guint16 *) job->dst)[i] = _mixprec_f32_to_bf16_rne (acc);
          break;
        case MIXPREC_DTYPE_FLOAT32:
        default:
          ((gfloat *) job->dst)[i] = acc;
          break;
        }
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
  WireJob job = { NULL, 0, count, _mixprec_zeropp_qgz_blocks (count), (guint8 *) wire,
                  _mixprec_zeropp_qgz_run_bytes_as (count, format), NULL, 0, 0.0f, world, accumulate, dst,
                  dst_dtype, format };

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
