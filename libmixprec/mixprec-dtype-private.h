/* mixprec-dtype-private.h — the library's conversion kernels and, for
 * everything that includes it (the library, the cpu optimizer plugins),
 * the one-value conversions and random bits of numeric/numeric-dtype.h:
 * the reference that every SIMD kernel reproduces bit for bit, and the
 * very lines the cuda plugin's kernels compile. Outside
 * MIXPREC_COMPILATION it needs no library, only GLib's headers, so
 * plugins can include it on its own. */
#pragma once

#include <glib.h>

#include "numeric/numeric-dtype.h"

/* ------------------------------------------------------------ kernels
 *
 * Array kernels of the library itself, for mixprec-convert*.c and the
 * tests that compare the scalar and SIMD tables.
 */
#ifdef MIXPREC_COMPILATION

#include "mixprec-dtype.h"
#include "mixprec-cpu-private.h"

G_BEGIN_DECLS

/* Converts @n elements; element k has index @first_index + k in the random
 * stream of @seed (rounding kernels only). */
typedef void (*_MixprecConvertFunc) (gconstpointer src,
                                     gpointer      dst,
                                     gsize         n,
                                     guint64       seed,
                                     guint64       first_index);

typedef struct {
  const gchar        *name;
  /* Indexed by MixprecDType; the FLOAT32 entries copy. */
  _MixprecConvertFunc to_f32[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_rne[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_sr[MIXPREC_DTYPE_COUNT];
  /* The same results with non-temporal stores, for arrays far beyond the
   * last-level cache; NULL where there is no such kernel. */
  _MixprecConvertFunc to_f32_stream[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_rne_stream[MIXPREC_DTYPE_COUNT];
  _MixprecConvertFunc from_f32_sr_stream[MIXPREC_DTYPE_COUNT];
} _MixprecConvertKernels;

extern const _MixprecConvertKernels _mixprec_convert_kernels_scalar;
#ifdef MIXPREC_HAVE_X86_SIMD
extern const _MixprecConvertKernels _mixprec_convert_kernels_avx2;

/* Stores _mixprec_avx2_sr_bits (seed, index0) to @out[0..7], so that tests
 * compiled without AVX2 flags can check it. Needs an AVX2 CPU. */
void _mixprec_avx2_sr_bits_store (guint64  seed,
                                  guint64  index0,
                                  guint32 *out);

/* Stores _mixprec_avx2_sr_bits16 (seed, index) to @out[0..7]. */
void _mixprec_avx2_sr_bits16_store (guint64  seed,
                                    guint64  index,
                                    guint32 *out);
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
extern const _MixprecConvertKernels _mixprec_convert_kernels_avx512;

/* Stores _mixprec_avx512_sr_bits (seed, index0) to @out[0..15], for the
 * tests. Needs an AVX-512 CPU. */
void _mixprec_avx512_sr_bits_store (guint64  seed,
                                    guint64  index0,
                                    guint32 *out);

/* Stores _mixprec_avx512_sr_bits16 (seed, index) to @out[0..15]. */
void _mixprec_avx512_sr_bits16_store (guint64  seed,
                                      guint64  index,
                                      guint32 *out);
#endif

/* The table for @level, or NULL when this build has no such kernels. */
const _MixprecConvertKernels *_mixprec_convert_kernels_for_level (_MixprecSimdLevel level);

/* The table chosen once for this process from _mixprec_cpu_simd_level(). */
const _MixprecConvertKernels *_mixprec_convert_kernels (void);

/* Whether every @src value is exactly representable in @dst, so that the
 * rounding mode cannot matter. */
gboolean _mixprec_dtype_is_exact_in (MixprecDType src,
                                     MixprecDType dst);

/* The float32 elements of @bytes (their count in *n), copied into *copy
 * (the caller frees it) when the slice is not aligned; NULL with an error
 * in @domain, @code naming src_f32 when its length is not a whole number
 * of elements. */
const gfloat *_mixprec_bytes_get_f32 (GBytes    *bytes,
                                      gsize     *n,
                                      gpointer  *copy,
                                      GQuark     domain,
                                      gint       code,
                                      GError   **error);

/* Converts on the calling thread with the kernels of @kernels; arguments
 * already validated. */
void     _mixprec_convert_run (const _MixprecConvertKernels *kernels,
                               MixprecDType                  src_dtype,
                               gconstpointer                 src,
                               MixprecDType                  dst_dtype,
                               gpointer                      dst,
                               gsize                         n_elements,
                               MixprecRounding               rounding,
                               guint64                       seed,
                               guint64                       first_index);

G_END_DECLS

#endif /* MIXPREC_COMPILATION */
