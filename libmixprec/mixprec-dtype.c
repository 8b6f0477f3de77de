/* mixprec-dtype.c — what each number format is: its size, its name and
 * aliases, and its limits. Conversions live in mixprec-convert.c. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-dtype-private.h"

/**
 * mixprec_dtype_error_quark:
 *
 * Gets the error domain of the dtype conversions.
 *
 * Returns: the quark behind %MIXPREC_DTYPE_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-dtype-error-quark, mixprec_dtype_error)

typedef struct {
  const gchar *name;
  const gchar *aliases[4];      /* NULL-terminated */
  guint bits;
  gint mantissa_bits;
  /* Exact values (hexadecimal floating constants) */
  gdouble max;
  gdouble min_normal;
  gdouble min_subnormal;
  gdouble epsilon;              /* 2^-mantissa_bits */
} DTypeInfo;

static const DTypeInfo dtype_info[MIXPREC_DTYPE_COUNT] = {
  [MIXPREC_DTYPE_FLOAT32] = {
    "float32", { "fp32", "float", "f32", NULL }, 32, 23,
    0x1.fffffep+127, 0x1p-126, 0x1p-149, 0x1p-23 },
  [MIXPREC_DTYPE_FLOAT16] = {
    "float16", { "fp16", "half", "f16", NULL }, 16, 10,
    65504.0, 0x1p-14, 0x1p-24, 0x1p-10 },
  [MIXPREC_DTYPE_BFLOAT16] = {
    "bfloat16", { "bf16", NULL }, 16, 7,
    0x1.fep+127, 0x1p-126, 0x1p-133, 0x1p-7 },
  [MIXPREC_DTYPE_FLOAT8_E4M3] = {
    "float8_e4m3", { "fp8_e4m3", "e4m3", "float8_e4m3fn", NULL }, 8, 3,
    448.0, 0x1p-6, 0x1p-9, 0x1p-3 },
  [MIXPREC_DTYPE_FLOAT8_E5M2] = {
    "float8_e5m2", { "fp8_e5m2", "e5m2", NULL }, 8, 2,
    57344.0, 0x1p-14, 0x1p-16, 0x1p-2 },
};

/**
 * mixprec_dtype_is_valid:
 * @dtype: any integer
 *
 * Checks whether @dtype is one of the #MixprecDType values, for code that
 * receives dtypes as plain integers (files, other languages).
 *
 * Returns: %TRUE if @dtype names a #MixprecDType
 *
 * Since: 1.0
 */
gboolean
mixprec_dtype_is_valid (gint dtype)
{
  return dtype >= 0 && dtype < MIXPREC_DTYPE_COUNT;
}

/**
 * mixprec_dtype_get_size:
 * @dtype: a #MixprecDType
 *
 * Gives the size in bytes of one element of @dtype, the unit of every
 * buffer length in the API.
 *
 * Returns: the size of one element of @dtype in bytes (4, 2, 2, 1, 1)
 *
 * Since: 1.0
 */
gsize
mixprec_dtype_get_size (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), 0);
  return dtype_info[dtype].bits / 8;
}

/**
 * mixprec_dtype_get_bits:
 * @dtype: a #MixprecDType
 *
 * Gives the width of an element of @dtype.
 *
 * Returns: the width of one element of @dtype in bits
 *
 * Since: 1.0
 */
guint
mixprec_dtype_get_bits (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), 0);
  return dtype_info[dtype].bits;
}

/**
 * mixprec_dtype_get_name:
 * @dtype: a #MixprecDType
 *
 * Returns the canonical name of @dtype: "float32", "float16", "bfloat16",
 * "float8_e4m3" or "float8_e5m2". mixprec_dtype_from_name() accepts these
 * and a few aliases.
 *
 * Returns: (transfer none): the name, a static string
 *
 * Since: 1.0
 */
const gchar *
mixprec_dtype_get_name (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), NULL);
  return dtype_info[dtype].name;
}

/**
 * mixprec_dtype_from_name:
 * @name: a dtype name
 * @dtype: (out): return location for the dtype
 * @error: return location for a #GError
 *
 * Parses a dtype name, ignoring ASCII case. Accepted: the canonical names
 * of mixprec_dtype_get_name() and the aliases "fp32", "float", "f32"
 * (float32); "fp16", "half", "f16" (float16); "bf16" (bfloat16);
 * "fp8_e4m3", "e4m3", "float8_e4m3fn" (float8_e4m3); "fp8_e5m2", "e5m2"
 * (float8_e5m2).
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_DTYPE_ERROR_UNKNOWN_NAME, whose message lists the accepted
 *   names
 *
 * Since: 1.0
 */
gboolean
mixprec_dtype_from_name (const gchar   *name,
                         MixprecDType  *dtype,
                         GError       **error)
{
  g_autoptr(GString) accepted = NULL;

  g_return_val_if_fail (name != NULL, FALSE);
  g_return_val_if_fail (dtype != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  for (guint i = 0; i < MIXPREC_DTYPE_COUNT; i++)
    {
      const DTypeInfo *info = &dtype_info[i];

      if (g_ascii_strcasecmp (name, info->name) == 0)
        {
          *dtype = (MixprecDType) i;
          return TRUE;
        }
      for (guint j = 0; info->aliases[j] != NULL; j++)
        if (g_ascii_strcasecmp (name, info->aliases[j]) == 0)
          {
            *dtype = (MixprecDType) i;
            return TRUE;
          }
    }

  accepted = g_string_new (NULL);
  for (guint i = 0; i < MIXPREC_DTYPE_COUNT; i++)
    {
      const DTypeInfo *info = &dtype_info[i];

      g_string_append_printf (accepted, "%s%s (", i > 0 ? ", " : "", info->name);
      for (guint j = 0; info->aliases[j] != NULL; j++)
        g_string_append_printf (accepted, "%s%s", j > 0 ? ", " : "", info->aliases[j]);
      g_string_append_c (accepted, ')');
    }
  g_set_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_UNKNOWN_NAME,
               "Unknown dtype name “%s”: expected one of %s (case is ignored)",
               name, accepted->str);
  return FALSE;
}

/**
 * mixprec_dtype_get_max:
 * @dtype: a #MixprecDType
 *
 * Gives the largest finite value @dtype represents; larger values
 * overflow.
 *
 * Returns: the largest finite value of @dtype: 3.4028235e38 (float32),
 *   65504 (float16), 3.3895314e38 (bfloat16), 448 (float8_e4m3), 57344
 *   (float8_e5m2)
 *
 * Since: 1.0
 */
gdouble
mixprec_dtype_get_max (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), 0.0);
  return dtype_info[dtype].max;
}

/**
 * mixprec_dtype_get_min_normal:
 * @dtype: a #MixprecDType
 *
 * Gives the smallest positive normal value of @dtype; below it values lose
 * precision as subnormals.
 *
 * Returns: the smallest positive normal value of @dtype: 2^-126 (float32,
 *   bfloat16), 2^-14 (float16, float8_e5m2), 2^-6 (float8_e4m3)
 *
 * Since: 1.0
 */
gdouble
mixprec_dtype_get_min_normal (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), 0.0);
  return dtype_info[dtype].min_normal;
}

/**
 * mixprec_dtype_get_min_subnormal:
 * @dtype: a #MixprecDType
 *
 * Gives the smallest positive value @dtype represents; smaller magnitudes
 * round to zero.
 *
 * Returns: the smallest positive value of @dtype: 2^-149 (float32), 2^-24
 *   (float16), 2^-133 (bfloat16), 2^-9 (float8_e4m3), 2^-16 (float8_e5m2)
 *
 * Since: 1.0
 */
gdouble
mixprec_dtype_get_min_subnormal (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), 0.0);
  return dtype_info[dtype].min_subnormal;
}

/**
 * mixprec_dtype_get_epsilon:
 * @dtype: a #MixprecDType
 *
 * Gives the machine epsilon of @dtype, a measure of its relative
 * precision.
 *
 * Returns: the machine epsilon of @dtype, 2^-mantissa_bits (the gap between
 *   1 and the next larger value): 2^-23, 2^-10, 2^-7, 2^-3, 2^-2
 *
 * Since: 1.0
 */
gdouble
mixprec_dtype_get_epsilon (MixprecDType dtype)
{
  g_return_val_if_fail (mixprec_dtype_is_valid (dtype), 0.0);
  return dtype_info[dtype].epsilon;
}

const gfloat *
_mixprec_bytes_get_f32 (GBytes    *bytes,
                        gsize     *n,
                        gpointer  *copy,
                        GQuark     domain,
                        gint       code,
                        GError   **error)
{
  gsize length;
  gconstpointer data = g_bytes_get_data (bytes, &length);

  if (length % sizeof (gfloat) != 0)
    {
      g_set_error (error, domain, code,
                   "src_f32: %" G_GSIZE_FORMAT " bytes are not a whole number of "
                   "float32 elements (4 bytes each)", length);
      return NULL;
    }
  *n = length / sizeof (gfloat);
  if ((guintptr) data % sizeof (gfloat) != 0)
    data = *copy = g_memdup2 (data, length);
  return data;
}

gboolean
_mixprec_dtype_is_exact_in (MixprecDType src,
                            MixprecDType dst)
{
  const DTypeInfo *s = &dtype_info[src];
  const DTypeInfo *d = &dtype_info[dst];

  /* Every value fits when the destination has at least the mantissa bits,
   * the largest exponent and the smallest quantum of the source. */
  return d->mantissa_bits >= s->mantissa_bits &&
         d->max >= s->max &&
         d->min_subnormal <= s->min_subnormal;
}
