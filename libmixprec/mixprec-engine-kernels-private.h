/* mixprec-engine-kernels-private.h — the element-wise CPU kernels of the
 * step pipeline (folding gradients, the fused non-finite check and sum of
 * squares). Single-threaded over a range; the engine splits ranges. */
#pragma once

#include "mixprec.h"

G_BEGIN_DECLS

/* Elements per block of the sum of squares. The engine sums each block on
 * its own and then adds the block sums in order, so the result does not
 * depend on how blocks are spread across threads. */
#define _MIXPREC_SUMSQ_BLOCK ((gsize) 4096)

/* dst (dst_dtype) = src when @first, else round(dst + src), elementwise;
 * the sum is formed in FP32 and rounded to nearest even once. */
void    _mixprec_kernel_fold  (gpointer      dst,
                               MixprecDType  dst_dtype,
                               gconstpointer src,
                               MixprecDType  src_dtype,
                               gsize         n,
                               gboolean      first);

/* buf (dtype) = round(buf * factor), elementwise; the product is formed in
 * FP32 and rounded to nearest even once. */
void    _mixprec_kernel_scale (gpointer      buf,
                               MixprecDType  dtype,
                               gsize         n,
                               gfloat        factor);

/* The sum of squares of @n values in double precision, in a fixed order
 * (eight interleaved partial sums, combined pairwise); non-finite when any
 * value is non-finite. */
gdouble _mixprec_kernel_sumsq (gconstpointer src,
                               MixprecDType  dtype,
                               gsize         n);

G_END_DECLS
