/* mixprec-rht.c — the random Hadamard transform of NVFP4 training, for the
 * trainer's own tensors: the element maths is numeric/numeric-rht.h; this
 * file checks the arguments and runs it over whole groups of 16. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "numeric/numeric-rht.h"

/**
 * mixprec_rht_sign_mask:
 * @seed: the seed the ranks share (for instance the config's `fp4.rht_seed`)
 *
 * The random sign diagonal of mixprec_rht_apply() for @seed: bit i set
 * means s_i = -1. It is the low 16 bits of the first SplitMix64 output
 * for @seed, so every rank derives the same mask from the same seed
 * without communicating. (Transformer Engine fixes its weight-gradient
 * signs instead; as a mask they are 0xD7E8, which can be passed to
 * mixprec_rht_apply() directly.)
 *
 * Returns: the 16-bit sign mask
 *
 * Since: 1.1
 */
guint16
mixprec_rht_sign_mask (guint64 seed)
{
  return _mixprec_rht_sign_mask (seed);
}

/**
 * mixprec_rht_apply: (skip)
 * @src: (array length=n): @n float32 values
 * @n: the number of values, a multiple of %MIXPREC_RHT_GROUP_SIZE
 * @sign_mask: the random signs (mixprec_rht_sign_mask())
 * @inverse: apply the inverse transform
 * @dst: (array length=n): room for @n values; may be @src
 * @error: return location for a #GError
 *
 * The random Hadamard transform of NVFP4 training, on each group of 16
 * consecutive values: the group as a row vector times
 * M = diag(s) H16 / 4, H16 the Sylvester Hadamard matrix (scipy's
 * `hadamard(16)`) and s the signs of @sign_mask, as Transformer Engine
 * writes `x.reshape(-1, 16) @ rht_matrix`. M is orthogonal, so the
 * transform keeps each group's norm and spreads an outlier over the
 * group before it is quantised; with @inverse the values are multiplied
 * by M's transpose, which undoes the transform up to float32 rounding.
 *
 * The arithmetic is one fixed order of float32 operations (the signs,
 * the fast Walsh-Hadamard butterflies a + b and a - b for pairs 1, 2, 4
 * and 8 apart, then the exact product by 0.25), so every rank and build
 * gets the same bits.
 *
 * Returns: %TRUE; %FALSE with @error set
 *   (%MIXPREC_BLOCK_ERROR_INVALID_SHAPE) when @n is not a multiple of 16
 *
 * Since: 1.1
 */
gboolean
mixprec_rht_apply (const gfloat  *src,
                   gsize          n,
                   guint16        sign_mask,
                   gboolean       inverse,
                   gfloat        *dst,
                   GError       **error)
{
  g_return_val_if_fail (n == 0 || (src != NULL && dst != NULL), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (n % MIXPREC_RHT_GROUP_SIZE != 0)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SHAPE,
                   "the random Hadamard transform mixes groups of %d values, and %"
                   G_GSIZE_FORMAT " values are not a whole number of groups",
                   MIXPREC_RHT_GROUP_SIZE, n);
      return FALSE;
    }
  for (gsize i = 0; i < n; i += MIXPREC_RHT_GROUP_SIZE)
    _mixprec_rht16 (src + i, sign_mask, inverse, dst + i);
  return TRUE;
}

/**
 * mixprec_rht_apply_bytes: (rename-to mixprec_rht_apply)
 * @src_f32: float32 values in host byte order
 * @sign_mask: the random signs (mixprec_rht_sign_mask())
 * @inverse: apply the inverse transform
 * @error: return location for a #GError
 *
 * mixprec_rht_apply() on #GBytes, for bindings.
 *
 * Returns: (transfer full) (nullable): the transformed float32 values, or
 *   %NULL with @error set when @src_f32 is not a whole number of groups of
 *   16 float32 values
 *
 * Since: 1.1
 */
GBytes *
mixprec_rht_apply_bytes (GBytes    *src_f32,
                         guint16    sign_mask,
                         gboolean   inverse,
                         GError   **error)
{
  gsize size = 0;
  const guint8 *data;
  g_autofree gfloat *values = NULL;
  gsize n;

  g_return_val_if_fail (src_f32 != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  data = g_bytes_get_data (src_f32, &size);
  if (size % (sizeof (gfloat) * MIXPREC_RHT_GROUP_SIZE) != 0)
    {
      g_set_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SHAPE,
                   "the random Hadamard transform mixes groups of %d float32 values (%"
                   G_GSIZE_FORMAT " bytes), and %" G_GSIZE_FORMAT " bytes are not a whole "
                   "number of groups", MIXPREC_RHT_GROUP_SIZE,
                   sizeof (gfloat) * MIXPREC_RHT_GROUP_SIZE, size);
      return NULL;
    }
  n = size / sizeof (gfloat);
  values = g_new (gfloat, MAX (n, 1));
  if (n > 0)
    memcpy (values, data, size);
  if (!mixprec_rht_apply (values, n, sign_mask, inverse, values, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&values), size);
}
