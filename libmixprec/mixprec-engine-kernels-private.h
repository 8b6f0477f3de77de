/* mixprec-engine-kernels-private.h — the element-wise CPU kernels of the
 * step pipeline (folding gradients, the fused non-finite check and sum of
 * squares). Single-threaded over a range; the engine splits ranges. */
#pragma once

#include "mixprec.h"
#include "mixprec-cpu-private.h"

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

/* _mixprec_kernel_sumsq() with the fastest kernel this CPU runs: the same
 * lanes and additions, so the same bits. */
gdouble _mixprec_kernel_sumsq_best (gconstpointer src,
                                    MixprecDType  dtype,
                                    gsize         n);

/* out[k] = _mixprec_kernel_sumsq (block k, dtype, _MIXPREC_SUMSQ_BLOCK)
 * for the @n_blocks whole blocks that follow each other from @src. */
void    _mixprec_kernel_sumsq_blocks_best (gconstpointer src,
                                           MixprecDType  dtype,
                                           gsize         n_blocks,
                                           gdouble      *out);

/* _mixprec_kernel_fold (dst, dst_dtype, src, src_dtype, n, first), then
 * src zeroed, in one pass where the CPU has a kernel for the dtypes. */
void    _mixprec_kernel_fold_zero_best (gpointer      dst,
                                        MixprecDType  dst_dtype,
                                        gpointer      src,
                                        MixprecDType  src_dtype,
                                        gsize         n,
                                        gboolean      first);

#ifdef MIXPREC_HAVE_X86_SIMD
gdouble  _mixprec_kernel_sumsq_avx2     (gconstpointer src,
                                         MixprecDType  dtype,
                                         gsize         n);
void     _mixprec_kernel_sumsq_blocks_avx2 (gconstpointer src,
                                            MixprecDType  dtype,
                                            gsize         n_blocks,
                                            gdouble      *out);
/* FALSE (nothing done) for a source dtype other than fp32, fp16, bf16. */
gboolean _mixprec_kernel_fold_zero_avx2 (gfloat       *dst,
                                         gpointer      src,
                                         MixprecDType  src_dtype,
                                         gsize         n,
                                         gboolean      first);
#endif

/* The three kernels with those of @level (the scalar ones where the build
 * has none for it) rather than the process's choice, so that the tests
 * can compare levels. The results are the same for every level. */
void    _mixprec_kernel_fold_at_level  (_MixprecSimdLevel level,
                                        gpointer          dst,
                                        MixprecDType      dst_dtype,
                                        gconstpointer     src,
                                        MixprecDType      src_dtype,
                                        gsize             n,
                                        gboolean          first);
void    _mixprec_kernel_scale_at_level (_MixprecSimdLevel level,
                                        gpointer          buf,
                                        MixprecDType      dtype,
                                        gsize             n,
                                        gfloat            factor);
gdouble _mixprec_kernel_sumsq_at_level (_MixprecSimdLevel level,
                                        gconstpointer     src,
                                        MixprecDType      dtype,
                                        gsize             n);

#ifdef MIXPREC_HAVE_X86_AVX512
/* The float loops of mixprec-engine-kernels-avx512.c, which give the bits
 * of the scalar ones in mixprec-engine-kernels.c. */
/* out[i] = acc[i] + g[i]; @out may be @acc. */
void    _mixprec_avx512_add_f32     (gfloat       *out,
                                     const gfloat *acc,
                                     const gfloat *g,
                                     gsize         n);
/* v[i] *= factor. */
void    _mixprec_avx512_scale_f32   (gfloat       *v,
                                     gsize         n,
                                     gfloat        factor);
/* lane[i % 8] += (double) v[i] * v[i] for i = 0 .. n-1, in order. */
void    _mixprec_avx512_sumsq_lanes (const gfloat *v,
                                     gsize         n,
                                     gdouble      *lane);
#endif

G_END_DECLS
