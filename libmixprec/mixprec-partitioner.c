/* mixprec-partitioner.c — DeepSpeed's ZeRO layout of one parameter group
 * (runtime/zero/stage_1_and_2.py): flatten, pad to a multiple of 2 * world,
 * cut into equal rank partitions; plus reduce buckets shaped so that one
 * reduce-scatter per bucket hands every rank a contiguous piece of its own
 * partition. Pure arithmetic, no memory of the parameters themselves.
 * Deprecated in 1.1: the engine lays parameters out in units instead
 * (mixprec-engine-layout.c), which MixprecLayout describes; this stays,
 * unchanged, for programs written against 1.0. */
#include "config.h"

#include "mixprec.h"

/**
 * MixprecPartitioner:
 *
 * The layout of one parameter group across the ranks of a data-parallel
 * group, as DeepSpeed's ZeRO stages 1 and 2 lay it out:
 *
 * - the parameters are placed one after the other in a flat buffer, in
 *   the order given (parameter i at mixprec_partitioner_get_param_offset());
 * - the buffer is padded with zeros to a multiple of the alignment,
 *   2 × world size elements unless told otherwise (DeepSpeed's
 *   `nccl_start_alignment_factor` of 2 elements per rank);
 * - rank r owns the partition [r × P, (r + 1) × P) of the padded buffer,
 *   P = padded total / world size. The padding is at the end, so it
 *   belongs to the last ranks: world 4 and 10 elements give 16, partitions
 *   of 4, and 0, 0, 2, 4 padding elements on ranks 0 to 3.
 *
 * Reduce buckets are columns across the partitions: bucket i is the same
 * range [b_i, e_i) of every rank's partition (mixprec_partitioner_get_bucket()),
 * W × (e_i − b_i) elements in all, never more than the bucket size (or the
 * alignment, when the bucket size is smaller than that):
 *
 * |[<!-- language="plain" -->
 *   flat buffer, W = 3, 3 buckets per partition:
 *
 *   | rank 0 partition  | rank 1 partition  | rank 2 partition  |
 *   | b0  | b1  | b2    | b0  | b1  | b2    | b0  | b1  | b2    |
 *
 *   bucket 1, packed rank by rank:      | r0.b1 | r1.b1 | r2.b1 |
 *   reduce-scatter of that buffer gives rank r the sum of rN.b1 slices
 *   that belong to it: exactly b1 of its own partition.
 * ]|
 *
 * So the gradient accumulation buffer, laid out bucket by bucket (bucket
 * i's W slices one after the other), needs exactly one reduce-scatter per
 * bucket, and each rank receives a contiguous, aligned piece of its own
 * partition; the same columns serve all-gathers of the working weights.
 * The price is that a bucket is ready only when the gradients of all W
 * slices are, which costs nothing when gradients arrive together at the
 * end of a micro-step.
 *
 * This is DeepSpeed's layout, not the one #MixprecEngine runs: the engine
 * cuts each group into units of at most 2^20 elements, each padded to a
 * multiple of world size × 4096 and sliced across the ranks. Its answers
 * do not say where an engine keeps anything; #MixprecLayout does
 * (mixprec_engine_get_layout(), or mixprec_layout_new() for a plan).
 *
 * Since: 1.0
 *
 * Deprecated: 1.1: Use #MixprecLayout, which describes the layout the
 *   engine runs.
 */

struct _MixprecPartitioner
{
  GObject parent_instance;

  guint world_size;
  guint64 alignment;
  guint64 bucket_size;

  guint n_params;
  /* n_params + 1 entries: offsets[i] is where parameter i starts, and
   * offsets[n_params] is the unpadded total. */
  guint64 *offsets;

  guint64 padded_total;
  guint64 partition_size;
  guint64 bucket_width;
  guint n_buckets;
};

G_DEFINE_FINAL_TYPE (MixprecPartitioner, mixprec_partitioner, G_TYPE_OBJECT)

/**
 * mixprec_partitioner_error_quark:
 *
 * Gets the error domain of #MixprecPartitioner.
 *
 * Returns: the quark behind %MIXPREC_PARTITIONER_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-partitioner-error-quark, mixprec_partitioner_error)

G_DEFINE_BOXED_TYPE (MixprecPartitionPiece, mixprec_partition_piece,
                     mixprec_partition_piece_copy, mixprec_partition_piece_free)

enum
{
  PROP_0,
  PROP_WORLD_SIZE,
  PROP_ALIGNMENT,
  PROP_BUCKET_SIZE,
  PROP_N_PARAMS,
  PROP_TOTAL,
  PROP_PADDED_TOTAL,
  PROP_PARTITION_SIZE,
  PROP_N_BUCKETS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/**
 * mixprec_partition_piece_copy:
 * @piece: a #MixprecPartitionPiece
 *
 * Makes a copy of @piece, freed with mixprec_partition_piece_free().
 *
 * Returns: (transfer full): a copy of @piece.
 *
 * Since: 1.0
 */
MixprecPartitionPiece *
mixprec_partition_piece_copy (const MixprecPartitionPiece *piece)
{
  g_return_val_if_fail (piece != NULL, NULL);

  return g_memdup2 (piece, sizeof *piece);
}

/**
 * mixprec_partition_piece_free:
 * @piece: (transfer full): a #MixprecPartitionPiece from
 *   mixprec_partition_piece_copy()
 *
 * Frees @piece.
 *
 * Since: 1.0
 */
void
mixprec_partition_piece_free (MixprecPartitionPiece *piece)
{
  g_free (piece);
}

/* Fills in everything that follows from the sizes and the three numbers. */
static gboolean
compute_layout (MixprecPartitioner *self,
                GError            **error)
{
  guint64 total = self->offsets[self->n_params];
  guint64 unit = self->alignment / self->world_size;
  guint64 remainder = total % self->alignment;
  guint64 n_buckets;

  self->padded_total = total;
  if (remainder != 0
      && !g_uint64_checked_add (&self->padded_total, total, self->alignment - remainder))
    {
      g_set_error (error, MIXPREC_PARTITIONER_ERROR, MIXPREC_PARTITIONER_ERROR_OVERFLOW,
                   "%" G_GUINT64_FORMAT " elements padded to a multiple of %" G_GUINT64_FORMAT
                   " do not fit in 64 bits", total, self->alignment);
      return FALSE;
    }
  self->partition_size = self->padded_total / self->world_size;

  /* A whole number of alignment units per rank, so every bucket slice
   * starts as aligned as a partition does. */
  self->bucket_width = MAX (1, self->bucket_size / self->alignment) * unit;
  n_buckets = self->partition_size / self->bucket_width
              + (self->partition_size % self->bucket_width != 0);
  if (n_buckets > G_MAXUINT)
    {
      g_set_error (error, MIXPREC_PARTITIONER_ERROR, MIXPREC_PARTITIONER_ERROR_OVERFLOW,
                   "partitions of %" G_GUINT64_FORMAT " elements need %" G_GUINT64_FORMAT
                   " buckets of %" G_GUINT64_FORMAT " elements per rank, more than %u; "
                   "use a larger bucket size",
                   self->partition_size, n_buckets, self->bucket_width, G_MAXUINT);
      return FALSE;
    }
  self->n_buckets = (guint) n_buckets;
  return TRUE;
}

/**
 * mixprec_partitioner_new:
 * @sizes: (array length=n_sizes) (nullable): the number of elements of
 *   each parameter, in flattening order; sizes of 0 are allowed
 * @n_sizes: the number of parameters
 * @world_size: the number of ranks the group is partitioned over, at
 *   least 1
 * @alignment: the padded total is a multiple of this many elements; a
 *   multiple of @world_size, or 0 for DeepSpeed's 2 × @world_size
 * @bucket_size: the most elements one reduce bucket holds across all
 *   ranks (`zero_optimization.reduce_bucket_size`), at least 1; raised to
 *   the alignment when smaller, since a bucket holds at least one
 *   alignment unit per rank
 * @error: return location for a #GError
 *
 * Computes DeepSpeed's flat layout of one parameter group (see
 * #MixprecPartitioner), which is not the layout #MixprecEngine runs.
 *
 * Returns: (transfer full): a new #MixprecPartitioner, or %NULL with
 *   @error set to %MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT or
 *   %MIXPREC_PARTITIONER_ERROR_OVERFLOW.
 *
 * Since: 1.0
 *
 * Deprecated: 1.1: Use mixprec_layout_new() to plan the layout an engine
 *   runs, or mixprec_engine_get_layout() to read a running engine's.
 */
MixprecPartitioner *
mixprec_partitioner_new (const guint64  *sizes,
                         guint           n_sizes,
                         guint           world_size,
                         guint64         alignment,
                         guint64         bucket_size,
                         GError        **error)
{
  g_autoptr(MixprecPartitioner) self = NULL;

  g_return_val_if_fail (sizes != NULL || n_sizes == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (world_size == 0)
    {
      g_set_error (error, MIXPREC_PARTITIONER_ERROR, MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT,
                   "world size: must be at least 1, got 0");
      return NULL;
    }
  if (bucket_size == 0)
    {
      g_set_error (error, MIXPREC_PARTITIONER_ERROR, MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT,
                   "bucket size: must be at least 1 element, got 0");
      return NULL;
    }
  if (alignment == 0)
    alignment = 2 * (guint64) world_size;
  if (alignment % world_size != 0)
    {
      g_set_error (error, MIXPREC_PARTITIONER_ERROR, MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT,
                   "alignment: must be a multiple of the world size %u so that every rank "
                   "gets an equal partition, got %" G_GUINT64_FORMAT, world_size, alignment);
      return NULL;
    }

  self = g_object_new (MIXPREC_TYPE_PARTITIONER, NULL);
  self->world_size = world_size;
  self->alignment = alignment;
  self->bucket_size = bucket_size;
  self->n_params = n_sizes;
  g_free (self->offsets);
  self->offsets = g_new (guint64, (gsize) n_sizes + 1);
  self->offsets[0] = 0;
  for (guint i = 0; i < n_sizes; i++)
    if (!g_uint64_checked_add (&self->offsets[i + 1], self->offsets[i], sizes[i]))
      {
        g_set_error (error, MIXPREC_PARTITIONER_ERROR, MIXPREC_PARTITIONER_ERROR_OVERFLOW,
                     "parameter %u: the group's element count passes 2^64 - 1 at this "
                     "parameter (%" G_GUINT64_FORMAT " elements)", i, sizes[i]);
        return NULL;
      }

  if (!compute_layout (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

/**
 * mixprec_partitioner_get_world_size:
 * @self: a #MixprecPartitioner
 *
 * Gives the number of ranks the flat buffer is partitioned over.
 *
 * Returns: the number of ranks.
 *
 * Since: 1.0
 */
guint
mixprec_partitioner_get_world_size (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->world_size;
}

/**
 * mixprec_partitioner_get_alignment:
 * @self: a #MixprecPartitioner
 *
 * Gives the alignment of the flat buffer's length: it is padded to a
 * multiple of this many elements, so that every rank's partition has the
 * same length.
 *
 * Returns: the alignment in use, in elements (2 × world size when 0 was
 *   given).
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_alignment (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->alignment;
}

/**
 * mixprec_partitioner_get_bucket_size:
 * @self: a #MixprecPartitioner
 *
 * Gives the reduce bucket size the partitioner was built with, which
 * mixprec_partitioner_get_bucket_width() derives the buckets from.
 *
 * Returns: the bucket size given at construction, in elements.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_bucket_size (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->bucket_size;
}

/**
 * mixprec_partitioner_get_n_params:
 * @self: a #MixprecPartitioner
 *
 * Gives how many parameters the partitioner lays out.
 *
 * Returns: the number of parameters in the group.
 *
 * Since: 1.0
 */
guint
mixprec_partitioner_get_n_params (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->n_params;
}

/**
 * mixprec_partitioner_get_param_size:
 * @self: a #MixprecPartitioner
 * @index: a parameter index, less than mixprec_partitioner_get_n_params()
 *
 * Gives the size of one of the parameters laid out.
 *
 * Returns: the number of elements of parameter @index.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_param_size (MixprecPartitioner *self,
                                    guint               index)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);
  g_return_val_if_fail (index < self->n_params, 0);

  return self->offsets[index + 1] - self->offsets[index];
}

/**
 * mixprec_partitioner_get_param_offset:
 * @self: a #MixprecPartitioner
 * @index: a parameter index, at most mixprec_partitioner_get_n_params()
 *
 * Gives where a parameter begins in the flat buffer, which holds the
 * parameters one after another in their order.
 *
 * Returns: where parameter @index starts in the flat buffer; for @index
 *   equal to the number of parameters, the unpadded total.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_param_offset (MixprecPartitioner *self,
                                      guint               index)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);
  g_return_val_if_fail (index <= self->n_params, 0);

  return self->offsets[index];
}

/**
 * mixprec_partitioner_get_total:
 * @self: a #MixprecPartitioner
 *
 * Gives how many parameter elements the flat buffer holds.
 *
 * Returns: the number of parameter elements, without padding.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_total (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->offsets[self->n_params];
}

/**
 * mixprec_partitioner_get_padded_total:
 * @self: a #MixprecPartitioner
 *
 * Gives the length of the flat buffer, padding included.
 *
 * Returns: the length of the flat buffer: the total rounded up to a
 *   multiple of the alignment.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_padded_total (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->padded_total;
}

/**
 * mixprec_partitioner_get_partition_size:
 * @self: a #MixprecPartitioner
 *
 * Gives the length of each rank's partition of the flat buffer; all ranks'
 * partitions have this length.
 *
 * Returns: the number of elements each rank owns, padding included: the
 *   padded total divided by the world size.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_partition_size (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->partition_size;
}

/**
 * mixprec_partitioner_get_rank_range:
 * @self: a #MixprecPartitioner
 * @rank: a rank, less than the world size
 * @begin: (out) (optional): the first element @rank owns, in the flat buffer
 * @end: (out) (optional): one past the last element @rank owns
 *
 * Gives the partition of @rank.
 *
 * Since: 1.0
 */
void
mixprec_partitioner_get_rank_range (MixprecPartitioner *self,
                                    guint               rank,
                                    guint64            *begin,
                                    guint64            *end)
{
  g_return_if_fail (MIXPREC_IS_PARTITIONER (self));
  g_return_if_fail (rank < self->world_size);

  if (begin != NULL)
    *begin = rank * self->partition_size;
  if (end != NULL)
    *end = (rank + (guint64) 1) * self->partition_size;
}

/**
 * mixprec_partitioner_get_rank_padding:
 * @self: a #MixprecPartitioner
 * @rank: a rank, less than the world size
 *
 * Gives how much of a rank's partition is padding. Only the last ranks'
 * partitions hold any.
 *
 * Returns: how many elements of @rank's partition are padding rather than
 *   parameter elements.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_rank_padding (MixprecPartitioner *self,
                                      guint               rank)
{
  guint64 begin, end, total;

  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);
  g_return_val_if_fail (rank < self->world_size, 0);

  mixprec_partitioner_get_rank_range (self, rank, &begin, &end);
  total = self->offsets[self->n_params];
  return end - MIN (end, MAX (begin, total));
}

/**
 * mixprec_partitioner_get_owner:
 * @self: a #MixprecPartitioner
 * @flat_offset: an element of the flat buffer, less than the padded total
 *
 * Says which rank owns an element of the flat buffer.
 *
 * Returns: the rank whose partition holds @flat_offset.
 *
 * Since: 1.0
 */
guint
mixprec_partitioner_get_owner (MixprecPartitioner *self,
                               guint64             flat_offset)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);
  g_return_val_if_fail (flat_offset < self->padded_total, 0);

  return (guint) (flat_offset / self->partition_size);
}

/* The first parameter that ends after @offset: the one holding it, or,
 * when @offset is in padding, n_params. Zero-size parameters end where
 * they start, so they are never the answer for an offset they precede. */
static guint
first_param_after (MixprecPartitioner *self,
                   guint64             offset)
{
  guint lo = 0, hi = self->n_params;

  while (lo < hi)
    {
      guint mid = lo + (hi - lo) / 2;

      if (self->offsets[mid + 1] > offset)
        hi = mid;
      else
        lo = mid + 1;
    }
  return lo;
}

/**
 * mixprec_partitioner_get_pieces:
 * @self: a #MixprecPartitioner
 * @begin: the start of a range of the flat buffer
 * @end: the end of the range, at least @begin and at most the padded total
 *
 * The parts of parameters that lie in [@begin, @end), in flat order; the
 * padding and parameters of size 0 contribute none.
 *
 * Returns: (transfer container) (element-type MixprecPartitionPiece): the
 *   pieces, possibly none; the array frees them when it is freed.
 *
 * Since: 1.0
 */
GPtrArray *
mixprec_partitioner_get_pieces (MixprecPartitioner *self,
                                guint64             begin,
                                guint64             end)
{
  GPtrArray *pieces;

  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), NULL);
  g_return_val_if_fail (begin <= end && end <= self->padded_total, NULL);

  pieces = g_ptr_array_new_with_free_func ((GDestroyNotify) mixprec_partition_piece_free);
  for (guint i = first_param_after (self, begin); i < self->n_params && self->offsets[i] < end; i++)
    {
      guint64 from = MAX (begin, self->offsets[i]);
      guint64 to = MIN (end, self->offsets[i + 1]);
      MixprecPartitionPiece *piece;

      if (to <= from)
        continue;
      piece = g_new0 (MixprecPartitionPiece, 1);
      piece->param_index = i;
      piece->param_offset = from - self->offsets[i];
      piece->flat_offset = from;
      piece->length = to - from;
      g_ptr_array_add (pieces, piece);
    }
  return pieces;
}

/**
 * mixprec_partitioner_get_rank_pieces:
 * @self: a #MixprecPartitioner
 * @rank: a rank, less than the world size
 *
 * The parts of parameters @rank owns: what it saves to and loads from a
 * checkpoint, and contributes to a gather. See
 * mixprec_partitioner_get_pieces().
 *
 * Returns: (transfer container) (element-type MixprecPartitionPiece): the
 *   pieces, possibly none; the array frees them when it is freed.
 *
 * Since: 1.0
 */
GPtrArray *
mixprec_partitioner_get_rank_pieces (MixprecPartitioner *self,
                                     guint               rank)
{
  guint64 begin, end;

  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), NULL);
  g_return_val_if_fail (rank < self->world_size, NULL);

  mixprec_partitioner_get_rank_range (self, rank, &begin, &end);
  return mixprec_partitioner_get_pieces (self, begin, end);
}

/**
 * mixprec_partitioner_get_bucket_width:
 * @self: a #MixprecPartitioner
 *
 * Gives the width of the reduce buckets, the ranges of every rank's
 * partition whose gradients are reduced together.
 *
 * Returns: how many elements of each rank's partition a bucket covers
 *   (the last bucket may cover fewer): the bucket size divided by the
 *   alignment, rounded down but at least 1, times the alignment per rank.
 *
 * Since: 1.0
 */
guint64
mixprec_partitioner_get_bucket_width (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->bucket_width;
}

/**
 * mixprec_partitioner_get_n_buckets:
 * @self: a #MixprecPartitioner
 *
 * Gives how many reduce buckets cover a rank's partition.
 *
 * Returns: the number of reduce buckets; 0 when the group is empty.
 *
 * Since: 1.0
 */
guint
mixprec_partitioner_get_n_buckets (MixprecPartitioner *self)
{
  g_return_val_if_fail (MIXPREC_IS_PARTITIONER (self), 0);

  return self->n_buckets;
}

/**
 * mixprec_partitioner_get_bucket:
 * @self: a #MixprecPartitioner
 * @index: a bucket index, less than mixprec_partitioner_get_n_buckets()
 * @begin: (out) (optional): the start of the bucket inside every rank's
 *   partition
 * @end: (out) (optional): the end of the bucket inside every rank's
 *   partition
 *
 * Gives bucket @index as a range of partition offsets: the bucket is that
 * range of every rank's partition, world size × (@end − @begin) elements
 * in all. Buckets tile each partition in order. Reduce-scattering a
 * buffer that holds the W slices one after the other (rank 0's first)
 * leaves rank r with its own slice reduced.
 *
 * Since: 1.0
 */
void
mixprec_partitioner_get_bucket (MixprecPartitioner *self,
                                guint               index,
                                guint64            *begin,
                                guint64            *end)
{
  g_return_if_fail (MIXPREC_IS_PARTITIONER (self));
  g_return_if_fail (index < self->n_buckets);

  if (begin != NULL)
    *begin = index * self->bucket_width;
  if (end != NULL)
    *end = MIN ((index + (guint64) 1) * self->bucket_width, self->partition_size);
}

/**
 * mixprec_partitioner_get_bucket_range:
 * @self: a #MixprecPartitioner
 * @index: a bucket index, less than mixprec_partitioner_get_n_buckets()
 * @rank: a rank, less than the world size
 * @begin: (out) (optional): the start of @rank's slice of the bucket, in
 *   the flat buffer
 * @end: (out) (optional): the end of that slice
 *
 * Gives the slice of bucket @index that lies in @rank's partition, in
 * flat coordinates: mixprec_partitioner_get_bucket() shifted by the start
 * of the partition.
 *
 * Since: 1.0
 */
void
mixprec_partitioner_get_bucket_range (MixprecPartitioner *self,
                                      guint               index,
                                      guint               rank,
                                      guint64            *begin,
                                      guint64            *end)
{
  guint64 bucket_begin, bucket_end, base;

  g_return_if_fail (MIXPREC_IS_PARTITIONER (self));
  g_return_if_fail (index < self->n_buckets);
  g_return_if_fail (rank < self->world_size);

  mixprec_partitioner_get_bucket (self, index, &bucket_begin, &bucket_end);
  base = rank * self->partition_size;
  if (begin != NULL)
    *begin = base + bucket_begin;
  if (end != NULL)
    *end = base + bucket_end;
}

static void
mixprec_partitioner_get_property (GObject    *object,
                                  guint       prop_id,
                                  GValue     *value,
                                  GParamSpec *pspec)
{
  MixprecPartitioner *self = MIXPREC_PARTITIONER (object);

  switch (prop_id)
    {
    case PROP_WORLD_SIZE:
      g_value_set_uint (value, self->world_size);
      break;
    case PROP_ALIGNMENT:
      g_value_set_uint64 (value, self->alignment);
      break;
    case PROP_BUCKET_SIZE:
      g_value_set_uint64 (value, self->bucket_size);
      break;
    case PROP_N_PARAMS:
      g_value_set_uint (value, self->n_params);
      break;
    case PROP_TOTAL:
      g_value_set_uint64 (value, self->offsets[self->n_params]);
      break;
    case PROP_PADDED_TOTAL:
      g_value_set_uint64 (value, self->padded_total);
      break;
    case PROP_PARTITION_SIZE:
      g_value_set_uint64 (value, self->partition_size);
      break;
    case PROP_N_BUCKETS:
      g_value_set_uint (value, self->n_buckets);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_partitioner_finalize (GObject *object)
{
  MixprecPartitioner *self = MIXPREC_PARTITIONER (object);

  g_free (self->offsets);

  G_OBJECT_CLASS (mixprec_partitioner_parent_class)->finalize (object);
}

static void
mixprec_partitioner_class_init (MixprecPartitionerClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags flags = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->get_property = mixprec_partitioner_get_property;
  object_class->finalize = mixprec_partitioner_finalize;

  /**
   * MixprecPartitioner:world-size:
   *
   * The number of ranks the group is partitioned over.
   *
   * Since: 1.0
   */
  properties[PROP_WORLD_SIZE] =
    g_param_spec_uint ("world-size", NULL, NULL, 1, G_MAXUINT, 1, flags);

  /**
   * MixprecPartitioner:alignment:
   *
   * The padded total is a multiple of this many elements.
   *
   * Since: 1.0
   */
  properties[PROP_ALIGNMENT] =
    g_param_spec_uint64 ("alignment", NULL, NULL, 1, G_MAXUINT64, 2, flags);

  /**
   * MixprecPartitioner:bucket-size:
   *
   * The most elements one reduce bucket holds across all ranks, as given.
   *
   * Since: 1.0
   */
  properties[PROP_BUCKET_SIZE] =
    g_param_spec_uint64 ("bucket-size", NULL, NULL, 1, G_MAXUINT64,
                         MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE, flags);

  /**
   * MixprecPartitioner:n-params:
   *
   * The number of parameters in the group.
   *
   * Since: 1.0
   */
  properties[PROP_N_PARAMS] =
    g_param_spec_uint ("n-params", NULL, NULL, 0, G_MAXUINT, 0, flags);

  /**
   * MixprecPartitioner:total:
   *
   * The number of parameter elements, without padding.
   *
   * Since: 1.0
   */
  properties[PROP_TOTAL] =
    g_param_spec_uint64 ("total", NULL, NULL, 0, G_MAXUINT64, 0, flags);

  /**
   * MixprecPartitioner:padded-total:
   *
   * The length of the flat buffer, padding included.
   *
   * Since: 1.0
   */
  properties[PROP_PADDED_TOTAL] =
    g_param_spec_uint64 ("padded-total", NULL, NULL, 0, G_MAXUINT64, 0, flags);

  /**
   * MixprecPartitioner:partition-size:
   *
   * The number of elements each rank owns, padding included.
   *
   * Since: 1.0
   */
  properties[PROP_PARTITION_SIZE] =
    g_param_spec_uint64 ("partition-size", NULL, NULL, 0, G_MAXUINT64, 0, flags);

  /**
   * MixprecPartitioner:n-buckets:
   *
   * The number of reduce buckets.
   *
   * Since: 1.0
   */
  properties[PROP_N_BUCKETS] =
    g_param_spec_uint ("n-buckets", NULL, NULL, 0, G_MAXUINT, 0, flags);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

/* An object made with g_object_new() alone is a valid empty layout for a
 * single rank with DeepSpeed's defaults. */
static void
mixprec_partitioner_init (MixprecPartitioner *self)
{
  self->world_size = 1;
  self->alignment = 2;
  self->bucket_size = MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE;
  self->n_params = 0;
  self->offsets = g_new0 (guint64, 1);
  self->padded_total = 0;
  self->partition_size = 0;
  self->bucket_width = MAX (1, self->bucket_size / self->alignment) * (self->alignment / self->world_size);
  self->n_buckets = 0;
}
