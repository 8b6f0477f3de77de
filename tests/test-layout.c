/* test-layout.c — MixprecLayout against the engine that runs it. For a table
 * of models (parameters below and above the ZeRO-3 persistence threshold,
 * and larger than a unit), world sizes 1 to 8 and stages 0 to 3: the plan
 * (mixprec_layout_new()) follows the documented rules, rebuilt here from
 * the rules alone; and a running engine — on one process, and as real
 * ranks over the comm plugin — lays its buffers out, gathers, saves
 * checkpoint pieces and reports memory exactly as the plan says. */
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

#define TIMEOUT_MS 3000
#define THRESHOLD 5000              /* stage3_param_persistence_threshold */
#define UNIT_ELEMENTS ((guint64) 1 << 20)
#define BLOCK 4096

typedef struct {
  const gchar *name;
  const gchar *mode;                /* "bf16", "fp32" */
  guint n;
  guint64 sizes[48];
} Model;

static const Model models[] = {
  /* All below the threshold: one persistent unit under ZeRO-3. */
  { "small", "bf16", 3, { 100, 200, 300 } },
  /* Classes alternate, so units break at every change of class. */
  { "mixed", "fp32", 6, { 3000, 6000, 100, 8200, 50, 7000 } },
  /* Larger than a unit, and a pair that only just does not fit together. */
  { "large", "bf16", 4, { UNIT_ELEMENTS + 5, 4000, UNIT_ELEMENTS - 10, 20 } },
  /* Many equal parameters: packed until the unit is full. */
  { "many", "bf16", 40, { 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000,
                          30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000,
                          30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000,
                          30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000, 30000 } },
};

static MixprecConfig *
model_config (const Model *m, guint stage)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json =
    g_strdup_printf ("{%s \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": 30000,"
                     "  \"allgather_bucket_size\": 30000,"
                     "  \"stage3_param_persistence_threshold\": %d},"
                     " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}",
                     g_str_equal (m->mode, "bf16") ? "\"bf16\": {\"enabled\": true}," : "",
                     stage, THRESHOLD);
  MixprecConfig *config = mixprec_config_new_from_data (json, -1, &error);

  g_assert_no_error (error);
  return config;
}

static MixprecLayout *
plan (const Model *m, guint stage, guint world)
{
  g_autoptr(MixprecConfig) config = model_config (m, stage);
  g_autoptr(GError) error = NULL;
  MixprecLayout *layout = mixprec_layout_new (config, m->sizes, m->n, world, &error);

  g_assert_no_error (error);
  g_assert_nonnull (layout);
  return layout;
}

/* ---------------------------------------------------------- the rules */

/* The layout rebuilt from the rules in the documentation: units of
 * consecutive parameters of one class (below the threshold or not), at
 * most 2^20 elements unless one parameter is larger, padded to a multiple
 * of world × 4096 and cut into world equal slices. */
typedef struct {
  guint first, n;
  guint64 offset, numel, padded;
  gboolean persistent;
} RefUnit;

static GArray *
reference_units (const Model *m, guint world, guint stage)
{
  GArray *units = g_array_new (FALSE, TRUE, sizeof (RefUnit));
  guint64 align = (guint64) world * BLOCK, offset = 0;
  gboolean small_class = FALSE;

  for (guint i = 0; i < m->n; i++)
    {
      gboolean small = m->sizes[i] < THRESHOLD;
      RefUnit *u = units->len > 0 ? &g_array_index (units, RefUnit, units->len - 1) : NULL;

      if (u == NULL || small != small_class || u->numel + m->sizes[i] > UNIT_ELEMENTS)
        {
          RefUnit fresh = { i, 0, 0, 0, 0, FALSE };

          g_array_append_val (units, fresh);
          u = &g_array_index (units, RefUnit, units->len - 1);
          small_class = small;
          u->persistent = small && stage == 3 && world > 1;
        }
      u->n++;
      u->numel += m->sizes[i];
    }
  for (guint k = 0; k < units->len; k++)
    {
      RefUnit *u = &g_array_index (units, RefUnit, k);

      u->padded = world > 1 ? (u->numel + align - 1) / align * align : u->numel;
      u->offset = offset;
      offset += u->padded;
    }
  return units;
}

static void
check_plan_follows_rules (const Model *m, guint world, guint stage)
{
  g_autoptr(MixprecLayout) l = plan (m, stage, world);
  g_autoptr(GArray) ref = reference_units (m, world, stage);
  guint64 total = 0, padded = 0, persistent = 0, padding = 0;

  g_assert_cmpuint (mixprec_layout_get_world_size (l), ==, world);
  g_assert_cmpuint (mixprec_layout_get_zero_stage (l), ==, world > 1 ? stage : 0);
  g_assert_cmpuint (mixprec_layout_get_n_params (l), ==, m->n);
  g_assert_cmpuint (mixprec_layout_get_n_groups (l), ==, 1);
  g_assert_cmpuint (mixprec_layout_get_n_units (l, 0), ==, ref->len);

  for (guint k = 0; k < ref->len; k++)
    {
      const RefUnit *u = &g_array_index (ref, RefUnit, k);
      guint64 offset, numel, upadded, slice = u->padded / world, at = u->offset;
      g_autofree guint *params = NULL;
      guint n_params;

      mixprec_layout_get_unit (l, 0, k, &offset, &numel, &upadded);
      g_assert_cmpuint (offset, ==, u->offset);
      g_assert_cmpuint (numel, ==, u->numel);
      g_assert_cmpuint (upadded, ==, u->padded);
      g_assert_cmpint (mixprec_layout_unit_is_persistent (l, 0, k), ==, u->persistent);
      params = mixprec_layout_get_unit_params (l, 0, k, &n_params);
      g_assert_cmpuint (n_params, ==, u->n);
      for (guint j = 0; j < u->n; j++)
        {
          guint p = u->first + j;
          guint64 e0 = at - u->offset, covered = 0;

          g_assert_cmpuint (params[j], ==, p);
          g_assert_cmpuint (mixprec_layout_get_param_group (l, p), ==, 0);
          g_assert_cmpuint (mixprec_layout_get_param_unit (l, p), ==, k);
          g_assert_cmpuint (mixprec_layout_get_param_offset (l, p), ==, at);
          g_assert_cmpuint (mixprec_layout_get_param_size (l, p), ==, m->sizes[p]);
          /* Rank r owns the parameter's elements inside [r·S, (r+1)·S) of
           * its unit: each element once, ranks in order. */
          for (guint r = 0; r < world; r++)
            {
              guint64 begin, end;
              guint64 lo = CLAMP ((guint64) r * slice, e0, e0 + m->sizes[p]);
              guint64 hi = CLAMP ((guint64) (r + 1) * slice, e0, e0 + m->sizes[p]);

              mixprec_layout_get_rank_range (l, p, r, &begin, &end);
              if (hi > lo)
                {
                  g_assert_cmpuint (begin, ==, lo - e0);
                  g_assert_cmpuint (end, ==, hi - e0);
                  g_assert_cmpuint (begin, ==, covered);
                  g_assert_cmpuint (mixprec_layout_get_owner (l, p, begin), ==, r);
                  g_assert_cmpuint (mixprec_layout_get_owner (l, p, end - 1), ==, r);
                  covered = end;
                }
              else
                g_assert_true (begin == 0 && end == 0);
            }
          g_assert_cmpuint (covered, ==, m->sizes[p]);
          at += m->sizes[p];
        }
      total += u->numel;
      padded += u->padded;
      persistent += u->persistent ? u->padded : 0;
      if (world > 1)
        g_assert_cmpuint (u->padded % (world * BLOCK), ==, 0);
      g_assert_true (u->numel <= UNIT_ELEMENTS || u->n == 1);
    }
  g_assert_cmpuint (mixprec_layout_get_group_total (l, 0), ==, total);
  g_assert_cmpuint (mixprec_layout_get_group_padded_total (l, 0), ==, padded);
  g_assert_cmpuint (mixprec_layout_get_rank_elements (l, 0), ==, padded / world);
  g_assert_cmpuint (mixprec_layout_get_persistent_elements (l, 0), ==, persistent);

  /* Pieces: what each rank owns, adding up to the model once; padding
   * makes up the rest of its slices. */
  for (guint r = 0; r < world; r++)
    {
      g_autoptr(GPtrArray) pieces = mixprec_layout_get_rank_pieces (l, 0, r);
      guint64 owned = 0;

      for (guint i = 0; i < pieces->len; i++)
        {
          const MixprecPartitionPiece *piece = g_ptr_array_index (pieces, i);
          guint64 begin, end;

          mixprec_layout_get_rank_range (l, piece->param_index, r, &begin, &end);
          g_assert_cmpuint (piece->param_offset, ==, begin);
          g_assert_cmpuint (piece->length, ==, end - begin);
          g_assert_cmpuint (piece->flat_offset, ==,
                            mixprec_layout_get_param_offset (l, piece->param_index) + begin);
          owned += piece->length;
        }
      g_assert_cmpuint (owned + mixprec_layout_get_rank_padding (l, 0, r), ==, padded / world);
      padding += mixprec_layout_get_rank_padding (l, 0, r);
    }
  g_assert_cmpuint (padding, ==, padded - total);

  /* Staging: none on one process; under ZeRO-2/3 two slots, whose windows
   * cut every rank's slice in equal parts. */
  if (world == 1)
    g_assert_cmpuint (mixprec_layout_get_slot_size (l, 0), ==, 0);
  if (world > 1 && stage >= 2)
    {
      g_assert_cmpuint (mixprec_layout_get_n_slots (l, 0), ==, 2);
      g_assert_cmpuint (mixprec_layout_get_slot_size (l, 0), >=, (guint64) world * BLOCK);
      g_assert_cmpuint (mixprec_layout_get_window_size (l, 0), ==,
                        mixprec_layout_get_slot_size (l, 0) / world);
    }
  if (mixprec_layout_get_slot_size (l, 0) == 0)
    g_assert_cmpuint (mixprec_layout_get_window_size (l, 0), ==, 0);
}

static void
test_plan_rules (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (models); i++)
    for (guint world = 1; world <= 8; world++)
      for (guint stage = 0; stage <= 3; stage++)
        check_plan_follows_rules (&models[i], world, stage);
}

static void
test_plan_errors (void)
{
  g_autoptr(MixprecConfig) config = model_config (&models[0], 2);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecLayout) empty = mixprec_layout_new (config, NULL, 0, 4, &error);

  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_layout_get_n_params (empty), ==, 0);
  g_assert_cmpuint (mixprec_layout_get_n_groups (empty), ==, 0);
  g_assert_null (mixprec_layout_new (config, models[0].sizes, models[0].n, 0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------- engine == plan */

/* Every answer of @a equals @b's (group @ga of @a against group @gb of @b
 * when only groups are compared; params then map through the units). */
static void
assert_groups_equal (MixprecLayout *a, guint ga, MixprecLayout *b, guint gb)
{
  guint world = mixprec_layout_get_world_size (a);

  g_assert_cmpuint (mixprec_layout_get_group_total (a, ga), ==, mixprec_layout_get_group_total (b, gb));
  g_assert_cmpuint (mixprec_layout_get_group_padded_total (a, ga), ==,
                    mixprec_layout_get_group_padded_total (b, gb));
  g_assert_cmpuint (mixprec_layout_get_persistent_elements (a, ga), ==,
                    mixprec_layout_get_persistent_elements (b, gb));
  g_assert_cmpuint (mixprec_layout_get_slot_size (a, ga), ==, mixprec_layout_get_slot_size (b, gb));
  g_assert_cmpuint (mixprec_layout_get_n_slots (a, ga), ==, mixprec_layout_get_n_slots (b, gb));
  g_assert_cmpuint (mixprec_layout_get_window_size (a, ga), ==, mixprec_layout_get_window_size (b, gb));
  g_assert_cmpuint (mixprec_layout_get_n_units (a, ga), ==, mixprec_layout_get_n_units (b, gb));
  for (guint r = 0; r < world; r++)
    g_assert_cmpuint (mixprec_layout_get_rank_padding (a, ga, r), ==,
                      mixprec_layout_get_rank_padding (b, gb, r));
  for (guint k = 0; k < mixprec_layout_get_n_units (a, ga); k++)
    {
      guint64 ua[3], ub[3];
      g_autofree guint *pa = NULL, *pb = NULL;
      guint na, nb;

      mixprec_layout_get_unit (a, ga, k, &ua[0], &ua[1], &ua[2]);
      mixprec_layout_get_unit (b, gb, k, &ub[0], &ub[1], &ub[2]);
      g_assert_cmpmem (ua, sizeof ua, ub, sizeof ub);
      g_assert_cmpint (mixprec_layout_unit_is_persistent (a, ga, k), ==,
                       mixprec_layout_unit_is_persistent (b, gb, k));
      pa = mixprec_layout_get_unit_params (a, ga, k, &na);
      pb = mixprec_layout_get_unit_params (b, gb, k, &nb);
      g_assert_cmpuint (na, ==, nb);
      for (guint j = 0; j < na; j++)
        {
          g_assert_cmpuint (mixprec_layout_get_param_size (a, pa[j]), ==, mixprec_layout_get_param_size (b, pb[j]));
          g_assert_cmpuint (mixprec_layout_get_param_offset (a, pa[j]), ==,
                            mixprec_layout_get_param_offset (b, pb[j]));
          g_assert_cmpuint (mixprec_layout_get_param_unit (a, pa[j]), ==, k);
          g_assert_cmpuint (mixprec_layout_get_param_unit (b, pb[j]), ==, k);
          for (guint r = 0; r < world; r++)
            {
              guint64 ra[2], rb[2];

              mixprec_layout_get_rank_range (a, pa[j], r, &ra[0], &ra[1]);
              mixprec_layout_get_rank_range (b, pb[j], r, &rb[0], &rb[1]);
              g_assert_cmpmem (ra, sizeof ra, rb, sizeof rb);
            }
        }
    }
}

static void
assert_layouts_equal (MixprecLayout *a, MixprecLayout *b)
{
  g_assert_cmpuint (mixprec_layout_get_world_size (a), ==, mixprec_layout_get_world_size (b));
  g_assert_cmpuint (mixprec_layout_get_zero_stage (a), ==, mixprec_layout_get_zero_stage (b));
  g_assert_cmpuint (mixprec_layout_get_n_params (a), ==, mixprec_layout_get_n_params (b));
  g_assert_cmpuint (mixprec_layout_get_n_groups (a), ==, mixprec_layout_get_n_groups (b));
  for (guint j = 0; j < mixprec_layout_get_n_groups (a); j++)
    assert_groups_equal (a, j, b, j);
  for (guint p = 0; p < mixprec_layout_get_n_params (a); p++)
    g_assert_cmpuint (mixprec_layout_get_param_group (a, p), ==, mixprec_layout_get_param_group (b, p));
}

static MixprecParam *
register_zeros (MixprecEngine *engine, const gchar *name, const guint64 *shape, guint n_dims)
{
  g_autoptr(GError) error = NULL;
  guint64 numel = 1;
  g_autoptr(GBytes) init = NULL;
  MixprecParam *p;

  for (guint d = 0; d < n_dims; d++)
    numel *= shape[d];
  init = g_bytes_new_take (g_malloc0 (numel * sizeof (gfloat)), numel * sizeof (gfloat));
  p = mixprec_engine_register_param (engine, name, shape, n_dims, "Linear", MIXPREC_DTYPE_FLOAT32,
                                     init, &error);
  g_assert_no_error (error);
  return p;
}

/* An engine for @m, every parameter a matrix of the same module type (one
 * group), registered in order. */
static MixprecEngine *
model_engine (const Model *m, guint stage, MixprecComm *comm)
{
  g_autoptr(MixprecConfig) config = model_config (m, stage);
  g_autoptr(GError) error = NULL;
  MixprecEngine *engine = comm != NULL ? mixprec_engine_new_with_comm (config, comm, NULL, &error)
                                       : mixprec_engine_new (config, &error);

  g_assert_no_error (error);
  for (guint i = 0; i < m->n; i++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", i);
      guint64 shape[2] = { m->sizes[i], 1 };

      g_assert_nonnull (register_zeros (engine, name, shape, 2));
    }
  return engine;
}

static guint64
buffer_bytes (MixprecEngine *engine, const gchar *name)
{
  g_autoptr(GPtrArray) buffers = mixprec_engine_list_buffers (engine);

  for (guint i = 0; i < buffers->len; i++)
    {
      const MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

      if (g_str_equal (b->name, name))
        return b->bytes;
    }
  return 0;
}

/* What @engine does, seen through its public accessors, against @l. */
static void
check_engine_follows (MixprecEngine *engine, const Model *m, MixprecLayout *l)
{
  guint world = mixprec_layout_get_world_size (l), stage = mixprec_layout_get_zero_stage (l);
  gsize wsize = g_str_equal (m->mode, "bf16") ? 2 : 4;
  g_autoptr(GError) error = NULL;

  /* Optimizer state: AdamW's two FP32 slots over this rank's slices (the
   * whole padded group at stage 0). */
  g_assert_cmpuint (buffer_bytes (engine, "optimizer state"), ==,
                    (stage >= 1 ? mixprec_layout_get_rank_elements (l, 0)
                                : mixprec_layout_get_group_padded_total (l, 0)) * 2 * 4);
  /* Working copies: whole below ZeRO-3 (each parameter at its offset),
   * this rank's slices and the persistent units under it. */
  if (stage < 3)
    {
      const guint8 *base = mixprec_param_get_working_data (mixprec_engine_get_param (engine, "p0"));

      for (guint i = 0; i < m->n; i++)
        {
          g_autofree gchar *name = g_strdup_printf ("p%u", i);
          const guint8 *at = mixprec_param_get_working_data (mixprec_engine_get_param (engine, name));

          g_assert_cmpuint ((guint64) (at - base), ==, mixprec_layout_get_param_offset (l, i) * wsize);
        }
      g_assert_cmpuint (buffer_bytes (engine, "working copies"), ==,
                        mixprec_layout_get_group_padded_total (l, 0) * wsize);
    }
  else
    {
      g_assert_cmpuint (buffer_bytes (engine, "working copies"), ==,
                        mixprec_layout_get_rank_elements (l, 0) * wsize);
      g_assert_cmpuint (buffer_bytes (engine, "persistent working copies"), ==,
                        mixprec_layout_get_persistent_elements (l, 0) * wsize);
      /* A gather brings in the whole unit: its parameters become whole,
       * and the other ranks' slices of it arrive. */
      for (guint k = 0; k < mixprec_layout_get_n_units (l, 0); k++)
        {
          guint64 padded, before = mixprec_engine_get_gathered_bytes (engine);
          g_autofree guint *params = NULL;
          g_autofree gchar *first = NULL;
          guint n;

          params = mixprec_layout_get_unit_params (l, 0, k, &n);
          first = g_strdup_printf ("p%u", params[0]);
          mixprec_layout_get_unit (l, 0, k, NULL, NULL, &padded);
          g_assert_true (mixprec_engine_gather (engine, mixprec_engine_get_param (engine, first), &error));
          g_assert_no_error (error);
          for (guint i = 0; i < m->n; i++)
            {
              g_autofree gchar *name = g_strdup_printf ("p%u", i);
              gboolean whole = mixprec_layout_get_param_unit (l, i) == k ||
                               mixprec_layout_unit_is_persistent (l, 0, mixprec_layout_get_param_unit (l, i));

              g_assert_cmpint (mixprec_param_get_working_data (mixprec_engine_get_param (engine, name)) != NULL,
                               ==, whole);
            }
          g_assert_cmpuint (mixprec_engine_get_gathered_bytes (engine) - before, ==,
                            mixprec_layout_unit_is_persistent (l, 0, k) ? 0
                            : padded / world * (world - 1) * wsize);
          mixprec_engine_release (engine, mixprec_engine_get_param (engine, first));
        }
    }
}

/* The pieces a checkpoint of @m saved at @dir against @l's rank ranges. */
static void
check_checkpoint_follows (const gchar *dir, const Model *m, MixprecLayout *l)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecCheckpoint) ck = mixprec_checkpoint_open (dir, &error);
  guint world = mixprec_layout_get_world_size (l);

  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_checkpoint_get_world_size (ck), ==, world);
  if (world > 1)
    g_assert_cmpuint (mixprec_checkpoint_get_zero_stage (ck), ==, mixprec_layout_get_zero_stage (l));
  for (guint i = 0; i < m->n; i++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", i);
      guint k = 0;

      for (guint r = 0; r < world; r++)
        {
          guint64 begin, end, got_begin, got_end;
          guint rank;

          mixprec_layout_get_rank_range (l, i, r, &begin, &end);
          if (end == begin)
            continue;
          g_assert_true (mixprec_checkpoint_get_param_piece (ck, name, k++, &rank, &got_begin, &got_end, NULL));
          g_assert_cmpuint (rank, ==, r);
          g_assert_cmpuint (got_begin, ==, begin);
          g_assert_cmpuint (got_end, ==, end);
        }
      g_assert_cmpuint (mixprec_checkpoint_get_param_n_pieces (ck, name), ==, k);
    }
}

static void
rm_rf (const gchar *path)
{
  g_autoptr(GFile) file = g_file_new_for_path (path);
  g_autoptr(GFileEnumerator) children = g_file_enumerate_children (file, G_FILE_ATTRIBUTE_STANDARD_NAME,
                                                                   G_FILE_QUERY_INFO_NOFOLLOW_SYMLINKS,
                                                                   NULL, NULL);
  GFileInfo *info;

  while (children != NULL && (info = g_file_enumerator_next_file (children, NULL, NULL)) != NULL)
    {
      g_autofree gchar *child = g_build_filename (path, g_file_info_get_name (info), NULL);

      if (g_file_info_get_file_type (info) == G_FILE_TYPE_DIRECTORY)
        rm_rf (child);
      else
        g_remove (child);
      g_object_unref (info);
    }
  g_rmdir (path);
}

static void
test_engine_one_process (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-layout-XXXXXX", &error);

  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (models); i++)
    for (guint stage = 0; stage <= 3; stage++)
      {
        const Model *m = &models[i];
        g_autoptr(MixprecEngine) engine = model_engine (m, stage, NULL);
        g_autoptr(MixprecLayout) running = mixprec_engine_get_layout (engine, &error);
        g_autoptr(MixprecLayout) planned = plan (m, stage, 1);
        g_autofree gchar *ck = g_strdup_printf ("%s/%s-%u", dir, m->name, stage);

        g_assert_no_error (error);
        assert_layouts_equal (running, planned);
        check_engine_follows (engine, m, running);
        g_assert_true (mixprec_engine_save_checkpoint (engine, ck, &error));
        g_assert_no_error (error);
        check_checkpoint_follows (ck, m, planned);
      }
  rm_rf (dir);
}

/* Two groups (vectors are not decayed, so they group apart): each of the
 * engine's groups is the plan of its own parameters. */
static void
test_engine_groups (void)
{
  static const struct { guint64 rows, cols; } shapes[] = {
    { 3000, 5 }, { 1000, 0 }, { 4100, 2 }, { 300, 400 }, { 70, 0 },
  };
  g_autoptr(MixprecConfig) config = model_config (&models[0], 3);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = mixprec_engine_new (config, &error);
  g_autoptr(MixprecLayout) running = NULL;

  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", i);
      guint64 shape[2] = { shapes[i].rows, shapes[i].cols };

      g_assert_nonnull (register_zeros (engine, name, shape, shapes[i].cols ? 2 : 1));
    }
  running = mixprec_engine_get_layout (engine, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_layout_get_n_groups (running), ==, 2);
  g_assert_cmpuint (mixprec_layout_get_param_group (running, 0), ==, 0);
  g_assert_cmpuint (mixprec_layout_get_param_group (running, 1), ==, 1);
  g_assert_cmpuint (mixprec_layout_get_param_group (running, 4), ==, 1);
  for (guint j = 0; j < 2; j++)
    {
      guint64 sizes[G_N_ELEMENTS (shapes)];
      guint n = 0;
      g_autoptr(MixprecLayout) planned = NULL;

      for (guint i = 0; i < G_N_ELEMENTS (shapes); i++)
        if (mixprec_layout_get_param_group (running, i) == j)
          sizes[n++] = mixprec_layout_get_param_size (running, i);
      planned = mixprec_layout_new (config, sizes, n, 1, &error);
      g_assert_no_error (error);
      assert_groups_equal (running, j, planned, 0);
    }
}

/* ---------------------------------------------------------- ranks */

/* One rank: for every model and stage, the engine's layout equals the
 * plan, its buffers and gathers follow it, and a checkpoint records its
 * pieces (checked by the parent). */
static int
child_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_autoptr(MixprecComm) comm = NULL;
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  guint world;

  if (bootstrap == NULL || out == NULL)
    return 1;
  comm = mixprec_comm_new (bootstrap, "auto", "cpu", TIMEOUT_MS, &error);
  if (comm == NULL)
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  world = mixprec_bootstrap_get_world_size (bootstrap);
  for (guint i = 0; i < G_N_ELEMENTS (models); i++)
    for (guint stage = 0; stage <= 3; stage++)
      {
        const Model *m = &models[i];
        g_autoptr(MixprecEngine) engine = model_engine (m, stage, comm);
        g_autoptr(MixprecLayout) running = mixprec_engine_get_layout (engine, &error);
        g_autoptr(MixprecLayout) planned = plan (m, stage, world);
        g_autofree gchar *ck = g_strdup_printf ("%s/%s-%u", out, m->name, stage);

        g_assert_no_error (error);
        assert_layouts_equal (running, planned);
        check_engine_follows (engine, m, running);
        if (!mixprec_engine_save_checkpoint (engine, ck, &error))
          {
            g_printerr ("%s\n", error->message);
            return 1;
          }
      }
  return 0;
}

static void
test_engine_ranks (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data);
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-layout-XXXXXX", &error);
  g_autofree gchar *out = g_strdup_printf ("MIXPREC_TEST_OUT=%s", dir);
  const gchar *env[] = { "MIXPREC_TEST_LAYOUT_CHILD=1", out, NULL };
  gint status[8];

  g_assert_no_error (error);
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    g_assert_cmpint (status[r], ==, 0);
  for (guint i = 0; i < G_N_ELEMENTS (models); i++)
    for (guint stage = 0; stage <= 3; stage++)
      {
        g_autoptr(MixprecLayout) planned = plan (&models[i], stage, world);
        g_autofree gchar *ck = g_strdup_printf ("%s/%s-%u", dir, models[i].name, stage);

        check_checkpoint_follows (ck, &models[i], planned);
      }
  rm_rf (dir);
}

int
main (int argc, char **argv)
{
  static const guint worlds[] = { 2, 3, 5, 8 };

  if (g_getenv ("MIXPREC_TEST_LAYOUT_CHILD") != NULL)
    return child_main ();

  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/layout/plan/rules", test_plan_rules);
  g_test_add_func ("/layout/plan/errors", test_plan_errors);
  g_test_add_func ("/layout/engine/one-process", test_engine_one_process);
  g_test_add_func ("/layout/engine/groups", test_engine_groups);
  for (guint i = 0; i < G_N_ELEMENTS (worlds); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/layout/engine/ranks/world%u", worlds[i]);

      g_test_add_data_func (path, GUINT_TO_POINTER (worlds[i]), test_engine_ranks);
    }
  return g_test_run ();
}
