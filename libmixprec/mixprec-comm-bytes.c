/* mixprec-comm-bytes.c — the collectives on GBytes, for languages that
 * reach libmixprec through GObject Introspection: each call copies its
 * input and returns a new buffer. */
#include "config.h"

#include <string.h>

#include "mixprec.h"

/* The element count of @bytes, which must hold whole groups of @group
 * elements of @dtype. */
static gboolean
count_elements (MixprecComm   *self,
                const gchar   *what,
                GBytes        *bytes,
                MixprecDType   dtype,
                gsize          group,
                gsize         *count,
                GError       **error)
{
  gsize size = g_bytes_get_size (bytes);
  gsize esize;

  if (!mixprec_comm_supports_dtype (self, dtype))
    {
      /* Let the collective itself word the error. */
      *count = 0;
      return TRUE;
    }
  esize = mixprec_dtype_get_size (dtype);
  if (size % (esize * group) != 0)
    {
      if (group == 1)
        g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT,
                     "%s: %" G_GSIZE_FORMAT " bytes is not a whole number of %s elements "
                     "(%" G_GSIZE_FORMAT " bytes each)",
                     what, size, mixprec_dtype_get_name (dtype), esize);
      else
        g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT,
                     "%s: %" G_GSIZE_FORMAT " bytes is not %" G_GSIZE_FORMAT " equal parts "
                     "(one per rank) of whole %s elements (%" G_GSIZE_FORMAT " bytes each)",
                     what, size, group, mixprec_dtype_get_name (dtype), esize);
      return FALSE;
    }
  *count = size / esize / group;
  return TRUE;
}

/**
 * mixprec_comm_all_reduce_bytes: (rename-to mixprec_comm_all_reduce)
 * @self: a #MixprecComm
 * @send: this rank's elements of @dtype
 * @dtype: the elements' data type
 * @op: how the ranks' values combine
 * @error: return location for a #GError
 *
 * mixprec_comm_all_reduce() on a copy of @send.
 *
 * Returns: (transfer full): the reduced elements, as many as in @send, or
 *   %NULL with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_comm_all_reduce_bytes (MixprecComm      *self,
                               GBytes           *send,
                               MixprecDType      dtype,
                               MixprecReduceOp   op,
                               GError          **error)
{
  gsize count, size;
  g_autofree guint8 *out = NULL;

  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);
  g_return_val_if_fail (send != NULL, NULL);

  if (!count_elements (self, "all_reduce", send, dtype, 1, &count, error))
    return NULL;
  size = g_bytes_get_size (send);
  out = g_malloc (MAX (size, 1));
  if (size > 0)
    memcpy (out, g_bytes_get_data (send, NULL), size);
  if (!mixprec_comm_all_reduce (self, out, out, count, dtype, op, MIXPREC_COMM_NONE, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), size);
}

/**
 * mixprec_comm_reduce_scatter_bytes: (rename-to mixprec_comm_reduce_scatter)
 * @self: a #MixprecComm
 * @send: world size equal parts of elements of @dtype
 * @dtype: the elements' data type
 * @op: how the ranks' values combine
 * @error: return location for a #GError
 *
 * mixprec_comm_reduce_scatter() of @send.
 *
 * Returns: (transfer full): this rank's part of the reduction (the size of
 *   @send divided by the world size), or %NULL with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_comm_reduce_scatter_bytes (MixprecComm      *self,
                                   GBytes           *send,
                                   MixprecDType      dtype,
                                   MixprecReduceOp   op,
                                   GError          **error)
{
  gsize count, size;
  g_autofree guint8 *out = NULL;

  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);
  g_return_val_if_fail (send != NULL, NULL);

  if (!count_elements (self, "reduce_scatter", send, dtype,
                       mixprec_comm_get_world_size (self), &count, error))
    return NULL;
  size = g_bytes_get_size (send) / mixprec_comm_get_world_size (self);
  out = g_malloc (MAX (size, 1));
  if (!mixprec_comm_reduce_scatter (self, g_bytes_get_data (send, NULL), out, count, dtype,
                                    op, MIXPREC_COMM_NONE, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), size);
}

/**
 * mixprec_comm_all_gather_bytes: (rename-to mixprec_comm_all_gather)
 * @self: a #MixprecComm
 * @send: this rank's elements of @dtype, as many on every rank
 * @dtype: the elements' data type
 * @error: return location for a #GError
 *
 * mixprec_comm_all_gather() of @send.
 *
 * Returns: (transfer full): every rank's elements in rank order, or %NULL
 *   with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_comm_all_gather_bytes (MixprecComm   *self,
                               GBytes        *send,
                               MixprecDType   dtype,
                               GError       **error)
{
  gsize count, size, world;
  g_autofree guint8 *out = NULL;

  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);
  g_return_val_if_fail (send != NULL, NULL);

  if (!count_elements (self, "all_gather", send, dtype, 1, &count, error))
    return NULL;
  world = mixprec_comm_get_world_size (self);
  size = g_bytes_get_size (send);
  if (size > G_MAXSIZE / world)
    {
      g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT,
                   "all_gather: %" G_GSIZE_FORMAT " bytes from each of %" G_GSIZE_FORMAT
                   " ranks do not fit in the address space", size, world);
      return NULL;
    }
  out = g_malloc (MAX (size * world, 1));
  if (!mixprec_comm_all_gather (self, g_bytes_get_data (send, NULL), out, count, dtype, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), size * world);
}

/**
 * mixprec_comm_broadcast_bytes: (rename-to mixprec_comm_broadcast)
 * @self: a #MixprecComm
 * @data: elements of @dtype, as many on every rank; only @root's are read
 * @dtype: the elements' data type
 * @root: the rank whose elements every rank receives
 * @error: return location for a #GError
 *
 * mixprec_comm_broadcast() of a copy of @data.
 *
 * Returns: (transfer full): @root's elements, or %NULL with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_comm_broadcast_bytes (MixprecComm   *self,
                              GBytes        *data,
                              MixprecDType   dtype,
                              guint          root,
                              GError       **error)
{
  gsize count, size;
  g_autofree guint8 *out = NULL;

  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);
  g_return_val_if_fail (data != NULL, NULL);

  if (!count_elements (self, "broadcast", data, dtype, 1, &count, error))
    return NULL;
  size = g_bytes_get_size (data);
  out = g_malloc (MAX (size, 1));
  if (size > 0)
    memcpy (out, g_bytes_get_data (data, NULL), size);
  if (!mixprec_comm_broadcast (self, out, count, dtype, root, error))
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), size);
}
