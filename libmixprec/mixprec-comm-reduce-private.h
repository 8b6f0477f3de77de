/* mixprec-comm-reduce-private.h — the reduction every communicator performs, in
 * the order the comm ABI's determinism contract fixes: terms folded in rank
 * order in FP32, the result rounded to the buffer's dtype once. The library's
 * local backend and the comm plugins include this header, so that every
 * backend produces the same bits. Needs only GLib's types and the ABI header. */
#pragma once

#include <stddef.h>
#include <string.h>

#include "mixprec-dtype-private.h"
#include "mixprec-plugin.h"

G_BEGIN_DECLS

/* Elements folded per pass: small enough for the FP32 accumulator to stay
 * in L1, large enough for the loops to vectorise. */
#define _MIXPREC_REDUCE_BLOCK 1024

/* Bytes per element of the dtypes a communicator can reduce; 0 otherwise. */
static inline size_t
_mixprec_reduce_dtype_size (MixprecPluginDType dtype)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
      return 4;
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return 2;
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3:
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2:
      return 1;
    default:
      return 0;
    }
}

static inline void
_mixprec_reduce_load (float                *acc,
                      const void           *src,
                      MixprecPluginDType    dtype,
                      size_t                n)
{
  const guint16 *h = src;

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      for (size_t i = 0; i < n; i++)
        acc[i] = _mixprec_f16_to_f32 (h[i]);
      break;
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      for (size_t i = 0; i < n; i++)
        acc[i] = _mixprec_bf16_to_f32 (h[i]);
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
    default:
      memcpy (acc, src, n * sizeof (float));
      break;
    }
}

/* dst[i] = a[i] op b[i]. The MAX keeps the earlier value (a) on ties and
 * lets a NaN win, so the fold is as order-defined as the sum. @dst may be
 * @a or @b: each element is read before it is written. Four lanes at a
 * time where the compiler has vector extensions (the same operations in
 * the same order per element, so the same bits as the scalar loop). */
static inline void
_mixprec_reduce_op_f32 (float                 *dst,
                        const float           *a,
                        const float           *b,
                        MixprecPluginReduceOp  op,
                        size_t                 n)
{
  size_t i = 0;

#if defined(__GNUC__)
  typedef float v4f __attribute__ ((vector_size (16)));
  typedef int v4i __attribute__ ((vector_size (16)));

  for (; i + 4 <= n; i += 4)
    {
      v4f x, y;

      memcpy (&x, a + i, sizeof x);
      memcpy (&y, b + i, sizeof y);
      if (op == MIXPREC_PLUGIN_REDUCE_MAX)
        {
          v4i keep = (x >= y) | (x != x);

          x = (v4f) (((v4i) x & keep) | ((v4i) y & ~keep));
        }
      else
        x = x + y;
      memcpy (dst + i, &x, sizeof x);
    }
#endif
  if (op == MIXPREC_PLUGIN_REDUCE_MAX)
    {
      for (; i < n; i++)
        dst[i] = (a[i] >= b[i] || a[i] != a[i]) ? a[i] : b[i];
    }
  else
    {
      for (; i < n; i++)
        dst[i] = a[i] + b[i];
    }
}

/* acc[i] = acc[i] op term[i], the term in @dtype. */
static inline void
_mixprec_reduce_fold (float                 *acc,
                      const void            *src,
                      MixprecPluginDType     dtype,
                      MixprecPluginReduceOp  op,
                      size_t                 n)
{
  float term[_MIXPREC_REDUCE_BLOCK];
  const float *t = src;

  if (dtype != MIXPREC_PLUGIN_DTYPE_FLOAT32)
    {
      _mixprec_reduce_load (term, src, dtype, n);
      t = term;
    }
  _mixprec_reduce_op_f32 (acc, acc, t, op, n);
}

static inline void
_mixprec_reduce_store (void                 *dst,
                       const float          *acc,
                       MixprecPluginDType    dtype,
                       size_t                n)
{
  guint16 *h = dst;

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      for (size_t i = 0; i < n; i++)
        h[i] = _mixprec_f32_to_f16_rne (acc[i]);
      break;
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      for (size_t i = 0; i < n; i++)
        h[i] = _mixprec_f32_to_bf16_rne (acc[i]);
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
    default:
      memcpy (dst, acc, n * sizeof (float));
      break;
    }
}

/* dst = (((first op terms[0]) op terms[1]) op ...) over n elements, or
 * without @first (NULL) starting from terms[0]. The terms are in @dtype,
 * @dst and @first in @out_dtype: @dtype again, or float32 for a result
 * kept unrounded (MIXPREC_PLUGIN_COMM_RECV_FP32). Each block is read in
 * full before it is written, so @dst may be @first or one of @terms (the
 * same address, not a shifted one). Dtypes: float32, float16, bfloat16. */
static inline void
_mixprec_reduce_terms (void                 *dst,
                       MixprecPluginDType    out_dtype,
                       const void           *first,
                       const void *const    *terms,
                       unsigned              n_terms,
                       size_t                n,
                       MixprecPluginDType    dtype,
                       MixprecPluginReduceOp op)
{
  size_t esize = _mixprec_reduce_dtype_size (dtype);
  size_t out_esize = _mixprec_reduce_dtype_size (out_dtype);
  float acc[_MIXPREC_REDUCE_BLOCK];

  /* Two float32 operands (two ranks, or one rank and ACCUMULATE): one pass. */
  if (dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 && out_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 &&
      n_terms + (first != NULL) == 2)
    {
      const float *x = first != NULL ? first : terms[0];
      const float *y = first != NULL ? terms[0] : terms[1];

      _mixprec_reduce_op_f32 (dst, x, y, op, n);
      return;
    }

  for (size_t start = 0; start < n; start += _MIXPREC_REDUCE_BLOCK)
    {
      size_t len = n - start < _MIXPREC_REDUCE_BLOCK ? n - start : _MIXPREC_REDUCE_BLOCK;
      unsigned t = 0;

      if (first != NULL)
        _mixprec_reduce_load (acc, (const char *) first + start * out_esize, out_dtype, len);
      else
        _mixprec_reduce_load (acc, (const char *) terms[t++] + start * esize, dtype, len);
      for (; t < n_terms; t++)
        _mixprec_reduce_fold (acc, (const char *) terms[t] + start * esize, dtype, op, len);
      _mixprec_reduce_store ((char *) dst + start * out_esize, acc, out_dtype, len);
    }
}

G_END_DECLS
