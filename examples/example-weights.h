/* example-weights.h — what the example trainers multiply with: a
 * parameter's working copy widened to fp32, read through the engine. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

/* The MX block size of @config's fp8 recipe, 0 when it has none. */
guint    example_mx_block_size (MixprecConfig *config);

/* The config's fp8 section in words ("fp8 working copies for Linear:
 * e4m3, delayed scaling ..."), or %NULL when it is off. */
gchar   *example_describe_fp8  (MixprecConfig *config);

/* The config's fp4 section in words ("fp4 working copies for Linear
 * (except ...): NVFP4, 16x16 tiles ..."), or %NULL when it is off. */
gchar   *example_describe_fp4  (MixprecConfig *config);

/* Writes the @n values the forward pass of @p multiplies with into @dst:
 * its FP8 working copy decoded and scaled when the config's fp8 section
 * covers it, its 4-bit copy decoded when the fp4 section does, else its fp16/bf16/fp32 working copy widened (exactly) to
 * fp32. A copy through the engine, whose buffers may be in GPU memory. */
gboolean example_read_working  (MixprecParam  *p,
                                guint          mx_block_size,
                                gfloat        *dst,
                                gsize          n,
                                GError       **error);

G_END_DECLS
