/* test-partitioner.c — MixprecPartitioner: DeepSpeed's flat ZeRO
 * partition worked by hand (world 4, 10 elements),
 * hand-computed edge cases, and thousands of random layouts checked
 * against an element-by-element model built here. */
#include <string.h>

#include <mixprec/mixprec.h>

static MixprecPartitioner *
new_ok (const guint64 *sizes,
        guint          n_sizes,
        guint          world,
        guint64        alignment,
        guint64        bucket_size)
{
  g_autoptr(GError) error = NULL;
  MixprecPartitioner *p = mixprec_partitioner_new (sizes, n_sizes, world, alignment, bucket_size, &error);

  g_assert_no_error (error);
  g_assert_nonnull (p);
  return p;
}

static void
assert_paddings (MixprecPartitioner *p,
                 const guint64      *expected)
{
  for (guint r = 0; r < mixprec_partitioner_get_world_size (p); r++)
    g_assert_cmpuint (mixprec_partitioner_get_rank_padding (p, r), ==, expected[r]);
}

/* ---------------------------------------------------------- literal cases */

/* DeepSpeed's flat partition by hand: world 4, 10 elements -> 16; partitions of 4; padding
 * per rank 0 0 2 4. */
static void
test_reference_example (void)
{
  const guint64 sizes[] = { 10 };
  const guint64 split[] = { 3, 7 };
  const guint64 padding[] = { 0, 0, 2, 4 };
  g_autoptr(MixprecPartitioner) p = new_ok (sizes, 1, 4, 0, MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE);
  g_autoptr(MixprecPartitioner) q = new_ok (split, 2, 4, 0, MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE);
  g_autoptr(GPtrArray) pieces = NULL;
  const MixprecPartitionPiece *piece;
  guint64 begin, end;

  g_assert_cmpuint (mixprec_partitioner_get_total (p), ==, 10);
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, 16);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, 4);
  g_assert_cmpuint (mixprec_partitioner_get_alignment (p), ==, 8);
  assert_paddings (p, padding);
  assert_paddings (q, padding);
  for (guint r = 0; r < 4; r++)
    {
      mixprec_partitioner_get_rank_range (p, r, &begin, &end);
      g_assert_cmpuint (begin, ==, 4 * r);
      g_assert_cmpuint (end, ==, 4 * r + 4);
    }

  /* Rank 2 of the two-parameter group owns [8, 10) of the data: elements
   * 5 and 6 of parameter 1, which starts at 3. */
  pieces = mixprec_partitioner_get_rank_pieces (q, 2);
  g_assert_cmpuint (pieces->len, ==, 1);
  piece = g_ptr_array_index (pieces, 0);
  g_assert_cmpuint (piece->param_index, ==, 1);
  g_assert_cmpuint (piece->param_offset, ==, 5);
  g_assert_cmpuint (piece->flat_offset, ==, 8);
  g_assert_cmpuint (piece->length, ==, 2);
  g_clear_pointer (&pieces, g_ptr_array_unref);

  /* Rank 0 owns all of parameter 0 and the first element of parameter 1. */
  pieces = mixprec_partitioner_get_rank_pieces (q, 0);
  g_assert_cmpuint (pieces->len, ==, 2);
  piece = g_ptr_array_index (pieces, 0);
  g_assert_cmpuint (piece->param_index, ==, 0);
  g_assert_cmpuint (piece->length, ==, 3);
  piece = g_ptr_array_index (pieces, 1);
  g_assert_cmpuint (piece->param_index, ==, 1);
  g_assert_cmpuint (piece->param_offset, ==, 0);
  g_assert_cmpuint (piece->flat_offset, ==, 3);
  g_assert_cmpuint (piece->length, ==, 1);
  g_clear_pointer (&pieces, g_ptr_array_unref);

  /* Rank 3 is all padding. */
  pieces = mixprec_partitioner_get_rank_pieces (q, 3);
  g_assert_cmpuint (pieces->len, ==, 0);
}

static void
test_odd_worlds (void)
{
  const guint64 w3[] = { 5, 5 };
  const guint64 w3_padding[] = { 0, 0, 2 };
  const guint64 w5[] = { 11 };
  const guint64 w5_padding[] = { 0, 0, 1, 4, 4 };
  const guint64 w7[] = { 1, 2, 3 };
  const guint64 w7_padding[] = { 0, 0, 0, 2, 2, 2, 2 };
  g_autoptr(MixprecPartitioner) a = new_ok (w3, 2, 3, 0, 100);
  g_autoptr(MixprecPartitioner) b = new_ok (w5, 1, 5, 0, 100);
  g_autoptr(MixprecPartitioner) c = new_ok (w7, 3, 7, 0, 100);

  /* 10 -> 12 (multiple of 6), 11 -> 20 (of 10), 6 -> 14 (of 14). */
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (a), ==, 12);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (a), ==, 4);
  assert_paddings (a, w3_padding);
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (b), ==, 20);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (b), ==, 4);
  assert_paddings (b, w5_padding);
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (c), ==, 14);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (c), ==, 2);
  assert_paddings (c, w7_padding);
  g_assert_cmpuint (mixprec_partitioner_get_owner (c, 5), ==, 2);
  g_assert_cmpuint (mixprec_partitioner_get_owner (c, 13), ==, 6);
}

static void
test_world_one (void)
{
  const guint64 sizes[] = { 3 };
  const guint64 padding[] = { 1 };
  g_autoptr(MixprecPartitioner) p = new_ok (sizes, 1, 1, 0, 1);
  guint64 begin, end;

  g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, 4);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, 4);
  assert_paddings (p, padding);
  /* A bucket size of 1 is raised to the alignment, 2: two buckets. */
  g_assert_cmpuint (mixprec_partitioner_get_bucket_width (p), ==, 2);
  g_assert_cmpuint (mixprec_partitioner_get_n_buckets (p), ==, 2);
  mixprec_partitioner_get_bucket (p, 1, &begin, &end);
  g_assert_cmpuint (begin, ==, 2);
  g_assert_cmpuint (end, ==, 4);
}

static void
test_empty (void)
{
  const guint64 zeros[] = { 0, 0, 0 };
  const guint64 no_padding[] = { 0, 0, 0, 0, 0 };
  g_autoptr(MixprecPartitioner) none = new_ok (NULL, 0, 5, 0, 64);
  g_autoptr(MixprecPartitioner) all_zero = new_ok (zeros, 3, 5, 0, 64);
  g_autoptr(MixprecPartitioner) bare = g_object_new (MIXPREC_TYPE_PARTITIONER, NULL);
  MixprecPartitioner *layouts[] = { none, all_zero, bare };

  for (guint i = 0; i < G_N_ELEMENTS (layouts); i++)
    {
      MixprecPartitioner *p = layouts[i];
      g_autoptr(GPtrArray) pieces = NULL;

      g_assert_cmpuint (mixprec_partitioner_get_total (p), ==, 0);
      g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, 0);
      g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, 0);
      g_assert_cmpuint (mixprec_partitioner_get_n_buckets (p), ==, 0);
      assert_paddings (p, no_padding);
      pieces = mixprec_partitioner_get_rank_pieces (p, 0);
      g_assert_cmpuint (pieces->len, ==, 0);
    }
  g_assert_cmpuint (mixprec_partitioner_get_n_params (all_zero), ==, 3);
  g_assert_cmpuint (mixprec_partitioner_get_param_offset (all_zero, 3), ==, 0);
  g_assert_cmpuint (mixprec_partitioner_get_world_size (bare), ==, 1);
}

/* Fewer elements than ranks: one element, eight ranks. */
static void
test_tiny (void)
{
  const guint64 sizes[] = { 0, 1, 0 };
  const guint64 padding[] = { 1, 2, 2, 2, 2, 2, 2, 2 };
  g_autoptr(MixprecPartitioner) p = new_ok (sizes, 3, 8, 0, 1000);
  g_autoptr(GPtrArray) pieces = NULL;
  const MixprecPartitionPiece *piece;

  g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, 16);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, 2);
  assert_paddings (p, padding);
  pieces = mixprec_partitioner_get_rank_pieces (p, 0);
  g_assert_cmpuint (pieces->len, ==, 1);
  piece = g_ptr_array_index (pieces, 0);
  g_assert_cmpuint (piece->param_index, ==, 1);
  g_assert_cmpuint (piece->length, ==, 1);
  g_assert_cmpuint (mixprec_partitioner_get_param_offset (p, 2), ==, 1);
}

static void
test_custom_alignment (void)
{
  const guint64 sizes[] = { 100 };
  g_autoptr(MixprecPartitioner) p = new_ok (sizes, 1, 4, 64, 100);
  guint64 begin, end;

  /* 100 -> 128; 16 elements per rank per alignment unit; a bucket of 100
   * holds one unit (64 elements across the ranks). */
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, 128);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, 32);
  g_assert_cmpuint (mixprec_partitioner_get_bucket_width (p), ==, 16);
  g_assert_cmpuint (mixprec_partitioner_get_n_buckets (p), ==, 2);
  mixprec_partitioner_get_bucket_range (p, 1, 2, &begin, &end);
  g_assert_cmpuint (begin, ==, 2 * 32 + 16);
  g_assert_cmpuint (end, ==, 3 * 32);
}

/* Sizes near 2^40: the arithmetic stays in 64 bits. */
static void
test_huge (void)
{
  const guint64 t40 = G_GUINT64_CONSTANT (1) << 40;
  const guint64 sizes[] = { t40 + 1, t40 - 3, 7 };
  g_autoptr(MixprecPartitioner) p = new_ok (sizes, 3, 8, 0, MIXPREC_PARTITIONER_DEFAULT_BUCKET_SIZE);
  g_autoptr(GPtrArray) pieces = NULL;
  const MixprecPartitionPiece *a, *b;
  guint64 partition = (G_GUINT64_CONSTANT (1) << 38) + 2;

  /* 2^41 + 5 elements -> 2^41 + 16 (a multiple of 16). */
  g_assert_cmpuint (mixprec_partitioner_get_total (p), ==, 2 * t40 + 5);
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, 2 * t40 + 16);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, partition);
  g_assert_cmpuint (mixprec_partitioner_get_rank_padding (p, 7), ==, 11);
  g_assert_cmpuint (mixprec_partitioner_get_rank_padding (p, 6), ==, 0);

  /* Rank 3 holds [3P, 4P) with 4P = 2^40 + 8: the end of parameter 0
   * (which ends at 2^40 + 1) and the first 7 elements of parameter 1. */
  pieces = mixprec_partitioner_get_rank_pieces (p, 3);
  g_assert_cmpuint (pieces->len, ==, 2);
  a = g_ptr_array_index (pieces, 0);
  b = g_ptr_array_index (pieces, 1);
  g_assert_cmpuint (a->param_index, ==, 0);
  g_assert_cmpuint (a->param_offset, ==, 3 * partition);
  g_assert_cmpuint (a->length, ==, t40 + 1 - 3 * partition);
  g_assert_cmpuint (b->param_index, ==, 1);
  g_assert_cmpuint (b->param_offset, ==, 0);
  g_assert_cmpuint (b->flat_offset, ==, t40 + 1);
  g_assert_cmpuint (b->length, ==, 7);

  /* 5e8 / 16 = 31250000 units of 2: 62500000 elements per rank per
   * bucket; (2^38 + 2) / 62500000 = 4398.05 -> 4399 buckets. */
  g_assert_cmpuint (mixprec_partitioner_get_bucket_width (p), ==, 62500000);
  g_assert_cmpuint (mixprec_partitioner_get_n_buckets (p), ==, 4399);
}

static void
test_errors (void)
{
  const guint64 sizes[] = { 10 };
  const guint64 wrap[] = { G_MAXUINT64, 1 };
  const guint64 pad_wrap[] = { G_MAXUINT64 - 3 };
  const guint64 many_buckets[] = { G_GUINT64_CONSTANT (1) << 62 };
  struct
  {
    const guint64 *sizes;
    guint n_sizes;
    guint world;
    guint64 alignment;
    guint64 bucket;
    MixprecPartitionerError code;
    const gchar *part;
  } cases[] = {
    { sizes, 1, 0, 0, 100, MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT, "world size: must be at least 1" },
    { sizes, 1, 4, 0, 0, MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT, "bucket size: must be at least 1" },
    { sizes, 1, 4, 6, 100, MIXPREC_PARTITIONER_ERROR_INVALID_ARGUMENT, "multiple of the world size 4" },
    { wrap, 2, 4, 0, 100, MIXPREC_PARTITIONER_ERROR_OVERFLOW, "parameter 1" },
    { pad_wrap, 1, 4, 0, 100, MIXPREC_PARTITIONER_ERROR_OVERFLOW, "do not fit in 64 bits" },
    { many_buckets, 1, 1, 0, 1, MIXPREC_PARTITIONER_ERROR_OVERFLOW, "use a larger bucket size" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecPartitioner) p =
        mixprec_partitioner_new (cases[i].sizes, cases[i].n_sizes, cases[i].world,
                                 cases[i].alignment, cases[i].bucket, &error);

      g_assert_null (p);
      g_assert_error (error, MIXPREC_PARTITIONER_ERROR, (gint) cases[i].code);
      if (strstr (error->message, cases[i].part) == NULL)
        g_error ("case %u: \"%s\" does not contain \"%s\"", i, error->message, cases[i].part);
    }
}

static void
test_object (void)
{
  const guint64 sizes[] = { 10, 20 };
  g_autoptr(MixprecPartitioner) p = new_ok (sizes, 2, 3, 0, 12);
  MixprecPartitionPiece piece = { 4, 5, 6, 7 };
  MixprecPartitionPiece *copy;
  guint world, n_params, n_buckets;
  guint64 alignment, bucket_size, total, padded, partition;

  g_object_get (p, "world-size", &world, "alignment", &alignment, "bucket-size", &bucket_size,
                "n-params", &n_params, "total", &total, "padded-total", &padded,
                "partition-size", &partition, "n-buckets", &n_buckets, NULL);
  g_assert_cmpuint (world, ==, 3);
  g_assert_cmpuint (alignment, ==, 6);
  g_assert_cmpuint (bucket_size, ==, 12);
  g_assert_cmpuint (n_params, ==, 2);
  g_assert_cmpuint (total, ==, 30);
  g_assert_cmpuint (padded, ==, 30);
  g_assert_cmpuint (partition, ==, 10);
  /* 12 / 6 = 2 units of 2 per rank: widths 4, 4, 2. */
  g_assert_cmpuint (n_buckets, ==, 3);
  g_assert_cmpuint (mixprec_partitioner_get_param_size (p, 1), ==, 20);

  copy = g_boxed_copy (MIXPREC_TYPE_PARTITION_PIECE, &piece);
  g_assert_true (copy != &piece);
  g_assert_cmpuint (copy->param_index, ==, 4);
  g_assert_cmpuint (copy->param_offset, ==, 5);
  g_assert_cmpuint (copy->flat_offset, ==, 6);
  g_assert_cmpuint (copy->length, ==, 7);
  g_boxed_free (MIXPREC_TYPE_PARTITION_PIECE, copy);
}

/* ------------------------------------------------------ random layouts */

/* The layout spelled out element by element, from the rules alone. */
typedef struct
{
  guint64 padded;
  guint64 partition;
  gint *param_of;    /* padded entries: parameter index, or -1 for padding */
  guint64 *index_in; /* padded entries: element index inside its parameter */
} Model;

static void
model_build (Model         *m,
             const guint64 *sizes,
             guint          n_sizes,
             guint          world,
             guint64        alignment)
{
  guint64 total = 0, x = 0;

  for (guint i = 0; i < n_sizes; i++)
    total += sizes[i];
  /* Smallest multiple of the alignment that holds the data. */
  m->padded = 0;
  while (m->padded < total)
    m->padded += alignment;
  m->partition = m->padded / world;
  m->param_of = g_new (gint, m->padded + 1);
  m->index_in = g_new (guint64, m->padded + 1);
  for (guint i = 0; i < n_sizes; i++)
    for (guint64 k = 0; k < sizes[i]; k++, x++)
      {
        m->param_of[x] = (gint) i;
        m->index_in[x] = k;
      }
  for (; x < m->padded; x++)
    m->param_of[x] = -1;
}

static void
model_clear (Model *m)
{
  g_free (m->param_of);
  g_free (m->index_in);
}

/* Checks pieces of [begin, end) against the model: they list exactly the
 * data elements of the range, in order. */
static void
check_pieces (MixprecPartitioner *p,
              const Model        *m,
              guint64             begin,
              guint64             end,
              guint8             *seen)
{
  g_autoptr(GPtrArray) pieces = mixprec_partitioner_get_pieces (p, begin, end);
  guint64 x = begin;

  for (guint j = 0; j < pieces->len; j++)
    {
      const MixprecPartitionPiece *piece = g_ptr_array_index (pieces, j);

      g_assert_cmpuint (piece->length, >, 0);
      g_assert_cmpuint (piece->flat_offset, >=, x);
      /* Whatever the pieces skip is padding. */
      for (; x < piece->flat_offset; x++)
        g_assert_cmpint (m->param_of[x], ==, -1);
      for (guint64 k = 0; k < piece->length; k++, x++)
        {
          g_assert_cmpuint (x, <, end);
          g_assert_cmpint (m->param_of[x], ==, (gint) piece->param_index);
          g_assert_cmpuint (m->index_in[x], ==, piece->param_offset + k);
          if (seen != NULL)
            seen[x]++;
        }
    }
  for (; x < end; x++)
    g_assert_cmpint (m->param_of[x], ==, -1);
}

static void
check_random_layout (GRand *rand)
{
  guint world = g_rand_int_range (rand, 1, 9);
  guint n_sizes = g_rand_int_range (rand, 0, 21);
  g_autofree guint64 *sizes = g_new0 (guint64, MAX (n_sizes, 1));
  guint64 alignment = 0, effective_alignment, unit, total = 0, bucket_size, padding_sum = 0;
  g_autoptr(MixprecPartitioner) p = NULL;
  g_autofree guint8 *seen = NULL;
  g_autofree guint8 *in_bucket = NULL;
  Model m;

  for (guint i = 0; i < n_sizes; i++)
    {
      /* One parameter in five is empty; sizes spread over 1..10000. */
      sizes[i] = g_rand_int_range (rand, 0, 5) == 0 ? 0 : (guint64) g_rand_int_range (rand, 1, 10001);
      total += sizes[i];
    }
  /* Mostly DeepSpeed's alignment, sometimes a larger multiple of world. */
  if (g_rand_int_range (rand, 0, 4) == 0)
    alignment = world * (guint64) g_rand_int_range (rand, 1, 33);
  effective_alignment = alignment != 0 ? alignment : 2 * (guint64) world;
  unit = effective_alignment / world;
  /* Bucket sizes from below the alignment to beyond the whole group. */
  switch (g_rand_int_range (rand, 0, 3))
    {
    case 0:
      bucket_size = g_rand_int_range (rand, 1, 40);
      break;
    case 1:
      bucket_size = g_rand_int_range (rand, 1, 5000);
      break;
    default:
      bucket_size = g_rand_int_range (rand, 1, 500000);
      break;
    }

  p = new_ok (sizes, n_sizes, world, alignment, bucket_size);
  model_build (&m, sizes, n_sizes, world, effective_alignment);

  g_assert_cmpuint (mixprec_partitioner_get_alignment (p), ==, effective_alignment);
  g_assert_cmpuint (mixprec_partitioner_get_total (p), ==, total);
  g_assert_cmpuint (mixprec_partitioner_get_padded_total (p), ==, m.padded);
  g_assert_cmpuint (m.padded % effective_alignment, ==, 0);
  g_assert_cmpuint (mixprec_partitioner_get_partition_size (p), ==, m.partition);
  g_assert_cmpuint (m.partition * world, ==, m.padded);

  for (guint64 i = 0, x = 0; i < n_sizes; x += sizes[i], i++)
    {
      g_assert_cmpuint (mixprec_partitioner_get_param_offset (p, i), ==, x);
      g_assert_cmpuint (mixprec_partitioner_get_param_size (p, i), ==, sizes[i]);
    }

  /* Every element is owned by exactly one rank, rank r by rank r's range;
   * the pieces of all ranks together cover every parameter element once. */
  seen = g_new0 (guint8, m.padded + 1);
  for (guint r = 0; r < world; r++)
    {
      guint64 begin, end, padding = 0;

      mixprec_partitioner_get_rank_range (p, r, &begin, &end);
      g_assert_cmpuint (begin, ==, r * m.partition);
      g_assert_cmpuint (end - begin, ==, m.partition);
      for (guint64 x = begin; x < end; x++)
        {
          g_assert_cmpuint (mixprec_partitioner_get_owner (p, x), ==, r);
          padding += m.param_of[x] == -1;
        }
      g_assert_cmpuint (mixprec_partitioner_get_rank_padding (p, r), ==, padding);
      padding_sum += padding;
      check_pieces (p, &m, begin, end, seen);
    }
  g_assert_cmpuint (padding_sum, ==, m.padded - total);
  for (guint64 x = 0; x < m.padded; x++)
    g_assert_cmpuint (seen[x], ==, m.param_of[x] == -1 ? 0 : 1);

  /* Rank pieces are the pieces of the rank's range. */
  for (guint r = 0; r < world; r++)
    {
      g_autoptr(GPtrArray) a = NULL;
      g_autoptr(GPtrArray) b = NULL;
      guint64 begin, end;

      mixprec_partitioner_get_rank_range (p, r, &begin, &end);
      a = mixprec_partitioner_get_rank_pieces (p, r);
      b = mixprec_partitioner_get_pieces (p, begin, end);
      g_assert_cmpuint (a->len, ==, b->len);
      for (guint j = 0; j < a->len; j++)
        {
          const MixprecPartitionPiece *pa = g_ptr_array_index (a, j);
          const MixprecPartitionPiece *pb = g_ptr_array_index (b, j);

          g_assert_cmpuint (pa->param_index, ==, pb->param_index);
          g_assert_cmpuint (pa->param_offset, ==, pb->param_offset);
          g_assert_cmpuint (pa->flat_offset, ==, pb->flat_offset);
          g_assert_cmpuint (pa->length, ==, pb->length);
        }
    }

  /* Arbitrary sub-ranges, including empty ones and ones in padding. */
  for (guint k = 0; k < 5 && m.padded > 0; k++)
    {
      guint64 a = g_rand_int_range (rand, 0, (gint32) m.padded + 1);
      guint64 b = g_rand_int_range (rand, 0, (gint32) m.padded + 1);

      check_pieces (p, &m, MIN (a, b), MAX (a, b), NULL);
    }

  /* Buckets tile every partition in order, within the size bound, aligned
   * as partitions are, as wide as the bound allows; their per-rank slices
   * cover the flat buffer exactly once. */
  {
    guint n_buckets = mixprec_partitioner_get_n_buckets (p);
    guint64 width = mixprec_partitioner_get_bucket_width (p);
    guint64 next = 0;

    g_assert_cmpuint (width % unit, ==, 0);
    g_assert_cmpuint (width * world, <=, MAX (bucket_size, effective_alignment));
    g_assert_cmpuint ((width + unit) * world, >, MAX (bucket_size, effective_alignment));
    in_bucket = g_new0 (guint8, m.padded + 1);
    for (guint i = 0; i < n_buckets; i++)
      {
        guint64 begin, end;

        mixprec_partitioner_get_bucket (p, i, &begin, &end);
        g_assert_cmpuint (begin, ==, next);
        g_assert_cmpuint (end, >, begin);
        g_assert_cmpuint (end, <=, m.partition);
        g_assert_cmpuint ((end - begin) * world, <=, MAX (bucket_size, effective_alignment));
        g_assert_cmpuint (begin % unit, ==, 0);
        g_assert_cmpuint ((end - begin) % unit, ==, 0);
        if (i + 1 < n_buckets)
          g_assert_cmpuint (end - begin, ==, width);
        next = end;
        for (guint r = 0; r < world; r++)
          {
            guint64 flat_begin, flat_end;

            mixprec_partitioner_get_bucket_range (p, i, r, &flat_begin, &flat_end);
            g_assert_cmpuint (flat_begin, ==, r * m.partition + begin);
            g_assert_cmpuint (flat_end - flat_begin, ==, end - begin);
            for (guint64 x = flat_begin; x < flat_end; x++)
              {
                g_assert_cmpuint (mixprec_partitioner_get_owner (p, x), ==, r);
                in_bucket[x]++;
              }
          }
      }
    g_assert_cmpuint (next, ==, m.partition);
    for (guint64 x = 0; x < m.padded; x++)
      g_assert_cmpuint (in_bucket[x], ==, 1);
  }

  model_clear (&m);
}

static void
test_random_layouts (void)
{
  /* A fixed seed keeps `make check` reproducible; -m thorough draws a new
   * one (printed, and repeatable with --seed). */
  guint32 seed = g_test_thorough () ? g_test_rand_int () : 20240611;
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);
  guint n = g_test_thorough () ? 30000 : 3000;

  g_test_message ("seed %u", seed);
  for (guint i = 0; i < n; i++)
    check_random_layout (rand);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/partitioner/reference-example", test_reference_example);
  g_test_add_func ("/partitioner/odd-worlds", test_odd_worlds);
  g_test_add_func ("/partitioner/world-one", test_world_one);
  g_test_add_func ("/partitioner/empty", test_empty);
  g_test_add_func ("/partitioner/tiny", test_tiny);
  g_test_add_func ("/partitioner/custom-alignment", test_custom_alignment);
  g_test_add_func ("/partitioner/huge", test_huge);
  g_test_add_func ("/partitioner/errors", test_errors);
  g_test_add_func ("/partitioner/object", test_object);
  g_test_add_func ("/partitioner/random-layouts", test_random_layouts);

  return g_test_run ();
}
