/* mixprec-zeropp-private.h — ZeRO++'s block quantizer over whole buffers:
 * DeepSpeed's blocks, codes and scales (numeric/numeric-zeropp.h says
 * exactly which), from and to the engine's working dtypes. The engine's
 * quantized weight gathers (mixprec-engine-zeropp.c) and the transcription
 * test (tests/test-zeropp-quant.py, through tests/zeropp-quant-dump) call
 * these. Never installed. */
#pragma once

#include <glib.h>

#include "mixprec-cpu-private.h"
#include "mixprec-dtype.h"

G_BEGIN_DECLS

/* The blocks DeepSpeed cuts a weight partition of @n elements into, or 0
 * where it refuses (n not a multiple of 8 blocks, blocks of 16000 or
 * more). */
guint64  _mixprec_zeropp_weight_groups (guint64 n);

/* Bytes of codes of @n elements at @bits (8 or 4). */
guint64  _mixprec_zeropp_code_bytes    (guint64 n,
                                        guint   bits);

/* Quantizes the @n elements at @src (float32, float16 or bfloat16,
 * rounded to fp16 first as DeepSpeed does) in @groups equal blocks to
 * @bits (8, or 4 with even blocks): the codes into @codes
 * (_mixprec_zeropp_code_bytes()), one stored scale (1 / scale) per block
 * into @scales. @n must be a multiple of @groups. */
void     _mixprec_zeropp_quantize      (const void   *src,
                                        MixprecDType  dtype,
                                        guint64       n,
                                        guint64       groups,
                                        guint         bits,
                                        gint8        *codes,
                                        gfloat       *scales);

/* The inverse: fp16 (code * scale) per element, then converted to @dtype
 * (float32, float16 or bfloat16) into @dst. */
void     _mixprec_zeropp_dequantize    (const gint8  *codes,
                                        const gfloat *scales,
                                        guint64       n,
                                        guint64       groups,
                                        guint         bits,
                                        void         *dst,
                                        MixprecDType  dtype);

/* DeepSpeed's dequant_reduce (quant_reduce.cu): @n_tensors tensors of
 * @elems elements, tensor j's codes at code_bytes (j * elems), each in
 * @in_groups blocks with scales[j * in_groups + b]; their fp16 sum (see
 * numeric-zeropp.h) requantized to @bits in @out_groups blocks into
 * @out_codes and @out_scales. */
void     _mixprec_zeropp_quant_reduce  (const gint8  *codes,
                                        const gfloat *scales,
                                        guint         n_tensors,
                                        guint64       elems,
                                        guint64       in_groups,
                                        guint64       out_groups,
                                        guint         bits,
                                        gint8        *out_codes,
                                        gfloat       *out_scales);

/* qgZ's wire (mixprec-engine-zeropp.c): a reduce-scatter's send buffer
 * of world runs of @count elements, each run cut into blocks of
 * _MIXPREC_ZEROPP_QGZ_BLOCK elements (the last one shorter, padded with
 * zeros) and quantized to int4: the run's packed codes, block after
 * block, then its stored scales; _mixprec_zeropp_qgz_run_bytes() bytes a
 * run. */
#define _MIXPREC_ZEROPP_QGZ_BLOCK 512u

guint64  _mixprec_zeropp_qgz_blocks    (guint64 count);
guint64  _mixprec_zeropp_qgz_run_bytes (guint64 count);
/* Quantizes the @world runs at @src (@dtype, rounded to fp16 first) into
 * @wire (world * run_bytes). With @err (LoCo's fp16 error feedback, run
 * r's @count errors at err + r * @err_stride): each value v = fp16 (x +
 * e) is quantized instead of x, and e becomes fp16 (beta e + (1 - beta)
 * (v - dequantized v)) in FP32 arithmetic, as DeepSpeed's
 * loco_swizzled_quant_kernel computes it. */
void     _mixprec_zeropp_qgz_quantize  (const void   *src,
                                        MixprecDType  dtype,
                                        guint64       count,
                                        guint         world,
                                        guint16      *err,
                                        guint64       err_stride,
                                        gfloat        err_beta,
                                        guint8       *wire);
/* The world runs the all-to-all delivered at @wire (rank r's at r *
 * run_bytes), dequantized and summed in FP32 in rank order into @dst:
 * dst[i] = ((dst[i] + x_0[i]) + x_1[i]) + ... with @accumulate, else
 * (x_0[i] + x_1[i]) + ..., rounded once to @dst_dtype. */
void     _mixprec_zeropp_qgz_reduce    (const guint8 *wire,
                                        guint         world,
                                        guint64       count,
                                        gboolean      accumulate,
                                        void         *dst,
                                        MixprecDType  dst_dtype);

/* What a quantized collective moves (mixprec.quantized_weights_format and
 * quantized_gradients_format): DeepSpeed's integer codes (int8 weights,
 * int4 gradients, the functions above) or the FP8 blocks of
 * numeric-zeropp.h, one byte per element, in the same blocks. */
typedef enum {
  _MIXPREC_ZEROPP_INT = 0,
  _MIXPREC_ZEROPP_FP8_E4M3 = 1,
  _MIXPREC_ZEROPP_FP8_E5M2 = 2,
} _MixprecZeroppFormat;

/* _mixprec_zeropp_quantize() and _dequantize() of 8 bits, or FP8 blocks:
 * @codes holds one byte per element either way. */
void     _mixprec_zeropp_quantize_as   (const void          *src,
                                        MixprecDType         dtype,
                                        guint64              n,
                                        guint64              groups,
                                        _MixprecZeroppFormat format,
                                        guint8              *codes,
                                        gfloat              *scales);
void     _mixprec_zeropp_dequantize_as (const guint8        *codes,
                                        const gfloat        *scales,
                                        guint64              n,
                                        guint64              groups,
                                        _MixprecZeroppFormat format,
                                        void                *dst,
                                        MixprecDType         dtype);

/* qgZ's wire in @format: int4 as above, or FP8 blocks (a byte a code);
 * the same blocks, the same layout (a run's codes, then its scales), the
 * same LoCo rule with the value v = x + e in float32. */
guint64  _mixprec_zeropp_qgz_run_bytes_as (guint64              count,
                                           _MixprecZeroppFormat format);
void     _mixprec_zeropp_qgz_quantize_as  (const void          *src,
                                           MixprecDType         dtype,
                                           guint64              count,
                                           guint                world,
                                           guint16             *err,
                                           guint64              err_stride,
                                           gfloat               err_beta,
                                           _MixprecZeroppFormat format,
                                           guint8              *wire);
void     _mixprec_zeropp_qgz_reduce_as    (const guint8        *wire,
                                           guint                world,
                                           guint64              count,
                                           gboolean             accumulate,
                                           _MixprecZeroppFormat format,
                                           void                *dst,
                                           MixprecDType         dst_dtype);
/* qgZ in two levels, over hosts of @per_host consecutive ranks each:
 * group_runs orders a rank's @world quantized runs (rank order) by the
 * local index of their rank, the runs of ranks j, R + j, 2R + j, ... for
 * index j, which the first level sends to the host's rank of index j;
 * level2 takes what that exchange delivered to a rank (@per_host ranks'
 * groups of @hosts runs, in local order), sums each host's runs in FP32
 * in local order into @partial (@hosts x @count), and quantizes the
 * partials (rounded to fp16, then the same blocks) into @out, the
 * second level's @hosts runs in host order. */
void     _mixprec_zeropp_qgz_group_runs   (const guint8        *wire,
                                           guint                world,
                                           guint                per_host,
                                           guint64              run_bytes,
                                           guint8              *grouped);
void     _mixprec_zeropp_qgz_level2       (const guint8        *arrived,
                                           guint                per_host,
                                           guint                hosts,
                                           guint64              count,
                                           _MixprecZeroppFormat format,
                                           gfloat              *partial,
                                           guint8              *out);
/* The same sum over @n_runs runs that lie @run_stride bytes apart (a
 * run of every host's, in hierarchical qgZ's first-level buffer). */
void     _mixprec_zeropp_qgz_reduce_strided_as (const guint8        *wire,
                                                guint                n_runs,
                                                guint64              run_stride,
                                                guint64              count,
                                                gboolean             accumulate,
                                                _MixprecZeroppFormat format,
                                                void                *dst,
                                                MixprecDType         dst_dtype);

/* ---------------------------------------------------------------- kernels
 *
 * A block's codes, the one step of the quantizer that is arithmetic on
 * every element: the scale of the @n fp16 values at @h for @bits
 * (_mixprec_zpp_block_scale()), returned, and each value's code
 * (_mixprec_zpp_code()) into @codes, one byte each, unpacked. Every level
 * gives the scalar one's bits. */
typedef gfloat (*_MixprecZeroppCodesFunc) (const guint16 *h,
                                           gsize          n,
                                           guint          bits,
                                           gint8         *codes);

typedef struct {
  _MixprecZeroppCodesFunc codes;
} _MixprecZeroppKernels;

extern const _MixprecZeroppKernels _mixprec_zeropp_kernels_scalar;
#ifdef MIXPREC_HAVE_X86_SIMD
extern const _MixprecZeroppKernels _mixprec_zeropp_kernels_avx2;
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
extern const _MixprecZeroppKernels _mixprec_zeropp_kernels_avx512;
#endif

/* The kernels of @level, or NULL where this build has none. */
const _MixprecZeroppKernels *_mixprec_zeropp_kernels_for_level (_MixprecSimdLevel level);
/* Those of _mixprec_cpu_simd_level(). */
const _MixprecZeroppKernels *_mixprec_zeropp_kernels (void);

G_END_DECLS
