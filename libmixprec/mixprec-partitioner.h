/* mixprec-partitioner.h — DeepSpeed's flat ZeRO layout arithmetic (which
 * rank owns which elements of a flattened parameter group, and the reduce
 * buckets). Deprecated in 1.1: the engine never ran it; MixprecLayout
 * (mixprec-layout.h) describes the layout it runs. */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"

G_BEGIN_DECLS

/**
 * MIXPREC_PARTITIONER_ERROR:
 *
 * Error domain of #MixprecPartitioner. Errors in this domain are from the
 * #MixprecPartitionerError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_PARTITIONER_ERROR (mixprec_partitioner_error_quark ())

/**
 * MixprecPartitionerError:
 * @MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT: a world size or bucket size
 *   of 0, or an alignment that is not a multiple of the world size
 * @MIXPREC_PARTITIONER_ERROR_OVERFLOW: the layout does not fit in 64-bit
 *   element counts (or needs more than 2^32 - 1 buckets)
 *
 * Errors from building a layout. Values are appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT,
  MIXPREC_PARTITIONER_ERROR_OVERFLOW,
} MixprecPartitionerError;

/**
 * MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE:
 *
 * DeepSpeed's default `reduce_bucket_size`: 5e8 elements.
 *
 * Since: 1.0
 */
#define MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE G_GUINT64_CONSTANT (500000000)

/**
 * MixprecPartitionPiece:
 * @param_index: the index of the parameter in the group
 * @param_offset: the first element of the piece, counted inside the
 *   parameter
 * @flat_offset: where that element lies in the flat, padded buffer
 * @length: the number of elements, at least 1
 *
 * A run of consecutive elements of one parameter inside a range of the
 * flat buffer: what a rank copies out of (or into) a parameter when it
 * saves, loads, reduces or gathers its part.
 *
 * Since: 1.0
 */
typedef struct _MixprecPartitionPiece MixprecPartitionPiece;

struct _MixprecPartitionPiece
{
  guint   param_index;
  guint64 param_offset;
  guint64 flat_offset;
  guint64 length;
};

#define MIXPREC_TYPE_PARTITION_PIECE (mixprec_partition_piece_get_type ())
MIXPREC_AVAILABLE_IN_1_0
GType                  mixprec_partition_piece_get_type (void) G_GNUC_CONST;
MIXPREC_AVAILABLE_IN_1_0
MixprecPartitionPiece *mixprec_partition_piece_copy     (const MixprecPartitionPiece *piece);
MIXPREC_AVAILABLE_IN_1_0
void                   mixprec_partition_piece_free     (MixprecPartitionPiece       *piece);

#define MIXPREC_TYPE_PARTITIONER (mixprec_partitioner_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecPartitioner, mixprec_partitioner, MIXPREC, PARTITIONER, GObject)

MIXPREC_AVAILABLE_IN_1_0
GQuark              mixprec_partitioner_error_quark        (void);

MIXPREC_AVAILABLE_IN_1_0
MIXPREC_DEPRECATED_IN_1_1_FOR (mixprec_layout_new)
MixprecPartitioner *mixprec_partitioner_new                (const guint64      *sizes,
                                                            guint               n_sizes,
                                                            guint               world_size,
                                                            guint64             alignment,
                                                            guint64             bucket_size,
                                                            GError            **error);

MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_partitioner_get_world_size     (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_alignment      (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_bucket_size    (MixprecPartitioner *self);

MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_partitioner_get_n_params       (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_param_size     (MixprecPartitioner *self,
                                                            guint               index);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_param_offset   (MixprecPartitioner *self,
                                                            guint               index);

MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_total          (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_padded_total   (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_partition_size (MixprecPartitioner *self);

MIXPREC_AVAILABLE_IN_1_0
void                mixprec_partitioner_get_rank_range     (MixprecPartitioner *self,
                                                            guint               rank,
                                                            guint64            *begin,
                                                            guint64            *end);
MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_rank_padding   (MixprecPartitioner *self,
                                                            guint               rank);
MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_partitioner_get_owner          (MixprecPartitioner *self,
                                                            guint64             flat_offset);

MIXPREC_AVAILABLE_IN_1_0
GPtrArray          *mixprec_partitioner_get_pieces         (MixprecPartitioner *self,
                                                            guint64             begin,
                                                            guint64             end);
MIXPREC_AVAILABLE_IN_1_0
GPtrArray          *mixprec_partitioner_get_rank_pieces    (MixprecPartitioner *self,
                                                            guint               rank);

MIXPREC_AVAILABLE_IN_1_0
guint64             mixprec_partitioner_get_bucket_width   (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
guint               mixprec_partitioner_get_n_buckets      (MixprecPartitioner *self);
MIXPREC_AVAILABLE_IN_1_0
void                mixprec_partitioner_get_bucket         (MixprecPartitioner *self,
                                                            guint               index,
                                                            guint64            *begin,
                                                            guint64            *end);
MIXPREC_AVAILABLE_IN_1_0
void                mixprec_partitioner_get_bucket_range   (MixprecPartitioner *self,
                                                            guint               index,
                                                            guint               rank,
                                                            guint64            *begin,
                                                            guint64            *end);

G_END_DECLS
