/* mixprec-dtype.h — number formats and conversions between them */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"

G_BEGIN_DECLS

/**
 * MixprecDType:
 * @MIXPREC_DTYPE_FLOAT32: IEEE 754 binary32
 * @MIXPREC_DTYPE_FLOAT16: IEEE 754 binary16 (max 65504)
 * @MIXPREC_DTYPE_BFLOAT16: brain float: binary32's range, 8 bits of precision
 * @MIXPREC_DTYPE_FLOAT8_E4M3: OCP FP8 E4M3 ("e4m3fn": no infinities, max 448)
 * @MIXPREC_DTYPE_FLOAT8_E5M2: OCP FP8 E5M2 (IEEE-like, max 57344)
 *
 * The element types libmixprec stores and converts. Values are appended
 * only, never renumbered.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_DTYPE_FLOAT32 = 0,
  MIXPREC_DTYPE_FLOAT16 = 1,
  MIXPREC_DTYPE_BFLOAT16 = 2,
  MIXPREC_DTYPE_FLOAT8_E4M3 = 3,
  MIXPREC_DTYPE_FLOAT8_E5M2 = 4,
} MixprecDType;

/**
 * MIXPREC_DTYPE_COUNT:
 *
 * The number of #MixprecDType values.
 *
 * Since: 1.0
 */
#define MIXPREC_DTYPE_COUNT 5

/**
 * MixprecRounding:
 * @MIXPREC_ROUNDING_NEAREST_EVEN: IEEE round to nearest, ties to even
 * @MIXPREC_ROUNDING_STOCHASTIC: round up with probability equal to the
 *   discarded fraction of a unit in the last place, from a counter-based
 *   random stream keyed by a seed and the element index (reproducible)
 *
 * How a value is rounded when the destination format is narrower.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_ROUNDING_NEAREST_EVEN = 0,
  MIXPREC_ROUNDING_STOCHASTIC = 1,
} MixprecRounding;

/**
 * MIXPREC_DTYPE_ERROR:
 *
 * Error domain of number-format functions. Errors in this domain are from
 * the #MixprecDTypeError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_DTYPE_ERROR (mixprec_dtype_error_quark ())

/**
 * MixprecDTypeError:
 * @MIXPREC_DTYPE_ERROR_INVALID_DTYPE: a value that is not a #MixprecDType
 * @MIXPREC_DTYPE_ERROR_UNKNOWN_NAME: a name that names no dtype
 * @MIXPREC_DTYPE_ERROR_INVALID_LENGTH: a buffer whose length is not a
 *   whole number of elements
 * @MIXPREC_DTYPE_ERROR_INVALID_ROUNDING: a value that is not a #MixprecRounding
 *
 * Errors from number-format functions.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_DTYPE_ERROR_INVALID_DTYPE,
  MIXPREC_DTYPE_ERROR_UNKNOWN_NAME,
  MIXPREC_DTYPE_ERROR_INVALID_LENGTH,
  MIXPREC_DTYPE_ERROR_INVALID_ROUNDING,
} MixprecDTypeError;

MIXPREC_AVAILABLE_IN_1_0
GQuark        mixprec_dtype_error_quark         (void);

MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_dtype_is_valid            (gint           dtype);
MIXPREC_AVAILABLE_IN_1_0
gsize         mixprec_dtype_get_size            (MixprecDType   dtype);
MIXPREC_AVAILABLE_IN_1_0
guint         mixprec_dtype_get_bits            (MixprecDType   dtype);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_dtype_get_name            (MixprecDType   dtype);
MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_dtype_from_name           (const gchar   *name,
                                                 MixprecDType  *dtype,
                                                 GError       **error);
MIXPREC_AVAILABLE_IN_1_0
gdouble       mixprec_dtype_get_max             (MixprecDType   dtype);
MIXPREC_AVAILABLE_IN_1_0
gdouble       mixprec_dtype_get_min_normal      (MixprecDType   dtype);
MIXPREC_AVAILABLE_IN_1_0
gdouble       mixprec_dtype_get_min_subnormal   (MixprecDType   dtype);
MIXPREC_AVAILABLE_IN_1_0
gdouble       mixprec_dtype_get_epsilon         (MixprecDType   dtype);

MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_convert_array             (MixprecDType    src_dtype,
                                                 gconstpointer   src,
                                                 MixprecDType    dst_dtype,
                                                 gpointer        dst,
                                                 gsize           n_elements,
                                                 MixprecRounding rounding,
                                                 guint64         seed,
                                                 guint64         first_index,
                                                 GError        **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes       *mixprec_convert                   (MixprecDType    src_dtype,
                                                 GBytes         *src,
                                                 MixprecDType    dst_dtype,
                                                 MixprecRounding rounding,
                                                 guint64         seed,
                                                 GError        **error);

G_END_DECLS
