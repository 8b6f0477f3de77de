/* mixprec-zeropp-private.h — ZeRO++'s block quantizer over whole buffers:
 * DeepSpeed's blocks, codes and scales (numeric/numeric-zeropp.h says
 * exactly which), from and to the engine's working dtypes. The engine's
 * quantized weight gathers (mixprec-engine-zeropp.c) and the transcription
 * test (tests/test-zeropp-quant.py, through tests/zeropp-quant-dump) call
 * these. Never installed. */
#pragma once

#include <glib.h>

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

G_END_DECLS
