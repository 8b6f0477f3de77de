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
  guint16 *h = g_new (guint16, job->per);

  for (gsize b = begin; b < end; b++)
    {
      guint64 first = b * job->per;

      for (guint64 i = 0; i < job->per; i++)
        h[i] = to_f16 (job->src, job->dtype, first + i);
      job->scales[b] = _mixprec_zpp_quantize_block (h, job->per, job->bits,
                                                    job->codes + _mixprec_zeropp_code_bytes (first, job->bits));
    }
  g_free (h);
}

static void
dequantize_blocks (gsize begin, gsize end, gpointer data)
{
  const Job *job = data;

  for (gsize b = begin; b < end; b++)
    {
      guint64 first = b * job->per;
      const gint8 *codes = job->in_codes + _mixprec_zeropp_code_bytes (first, job->bits);

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

void
_mixprec_zeropp_quantize (const void   *src,
                          MixprecDType  dtype,
                          guint64       n,
                          guint64       groups,
                          guint         bits,
                          gint8        *codes,
                          gfloat       *scales)
{
  Job job = { src, dtype, groups > 0 ? n / groups : 0, bits, codes, scales, NULL, NULL, NULL };

  g_return_if_fail (bits == 8 || bits == 4);
  g_return_if_fail (groups > 0 && n % groups == 0);
  g_return_if_fail (bits == 8 || job.per % 2 == 0);
  _mixprec_parallel_for (groups, blocks_per_item (job.per), 1, quantize_blocks, &job);
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
  Job job = { NULL, dtype, groups > 0 ? n / groups : 0, bits, NULL, NULL, codes, scales, dst };

  g_return_if_fail (bits == 8 || bits == 4);
  g_return_if_fail (groups > 0 && n % groups == 0);
  g_return_if_fail (bits == 8 || job.per % 2 == 0);
  _mixprec_parallel_for (groups, blocks_per_item (job.per), 1, dequantize_blocks, &job);
}
