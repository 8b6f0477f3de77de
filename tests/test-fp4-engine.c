/* test-fp4-engine.c — 4-bit working copies (the fp4 section) in the engine.
 * After layout and after every step each fp4 parameter's packed E2M1
 * bytes, block scales and tensor scale equal mixprec_quantize_blocks() of
 * its FP32 master, bit for bit (an independent whole-tensor computation),
 * for NVFP4 with 16x16 tiles and 1D blocks and MXFP4 in two scale modes;
 * vectors and other module types keep their working copies only. Under
 * ZeRO, W real processes (micro-batch m on rank m % W) give the same
 * masters and the same 4-bit bytes as one process accumulating W
 * micro-batches, at W = 1, 2, 3 (tiles that straddle the ranks' slices
 * included); ZeRO-3 gathers the 4-bit payload plus the scales, counted.
 * Children are this binary re-executed with the rank variables set. */
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "engine-ranks-common.h"
#include "multiproc.h"

#define TIMEOUT_MS 5000

typedef struct {
  const gchar *recipe;      /* the fp4 section's recipe keys, as JSON */
  const gchar *tag;
  guint stage;
  guint world;
  guint steps;
} Scenario;

static const struct {
  const gchar *tag;
  const gchar *json;
  MixprecBlockRecipe recipe;
  MixprecMxScaleMode mode;
} recipes[] = {
  { "nvfp4-2d", "\"recipe\": \"nvfp4\"", MIXPREC_BLOCK_RECIPE_NVFP4_2D, MIXPREC_MX_SCALE_FLOOR },
  { "nvfp4-1d", "\"recipe\": \"nvfp4\", \"weights_2d\": false", MIXPREC_BLOCK_RECIPE_NVFP4, MIXPREC_MX_SCALE_FLOOR },
  { "mxfp4", "\"recipe\": \"mxfp4\"", MIXPREC_BLOCK_RECIPE_MXFP4, MIXPREC_MX_SCALE_FLOOR },
  { "mxfp4-rceil", "\"recipe\": \"mxfp4\", \"scale_mode\": \"rceil\"", MIXPREC_BLOCK_RECIPE_MXFP4, MIXPREC_MX_SCALE_RCEIL },
};

/* Two small Linear matrices (persistent under ZeRO-3; w2's 40 rows end in
 * a partial row of tiles), a LayerNorm vector and a Linear bias outside
 * FP4, and a Linear matrix above the persistence threshold, which gather()
 * brings in 4 bits (its slices cut tiles across ranks). */
static const struct { const gchar *name; guint64 rows, cols; const gchar *module; } model[] = {
  { "w1", 100, 64, "Linear" }, { "ln", 1000, 0, "LayerNorm" }, { "w2", 40, 96, "Linear" },
  { "b2", 96, 0, "Linear" }, { "w3", 300, 416, "Linear" },
};

static guint
recipe_index (const gchar *tag)
{
  for (guint i = 0; i < G_N_ELEMENTS (recipes); i++)
    if (g_str_equal (recipes[i].tag, tag))
      return i;
  g_assert_not_reached ();
}

static MixprecEngine *
build_engine (const Scenario *s, guint gas, GError **error)
{
  g_autofree gchar *json =
    g_strdup_printf ("{\"bf16\": {\"enabled\": true},"
                     " \"fp4\": {\"enabled\": true, %s, \"modules\": [\"Linear\"]},"
                     " \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": 3000,"
                     "  \"allgather_bucket_size\": 3000},"
                     " \"gradient_accumulation_steps\": %u, \"gradient_clipping\": 1.0,"
                     " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
                     "   \"weight_decay\": 0.1}}}",
                     recipes[recipe_index (s->tag)].json, s->stage, gas);
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;

  config = mixprec_config_new_from_data (json, -1, error);
  if (config == NULL)
    return NULL;
  engine = mixprec_engine_new (config, error);
  if (engine == NULL)
    return NULL;
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint64 numel = model[p].rows * MAX (model[p].cols, 1);
      guint64 shape[2] = { model[p].rows, model[p].cols };
      g_autofree gfloat *init = g_new (gfloat, numel);
      g_autoptr(GBytes) bytes = NULL;

      /* Wide dynamic range, so that blocks and tiles get distinct scales. */
      for (guint64 i = 0; i < numel; i++)
        init[i] = (gfloat) (cos (0.1 * (gdouble) i + p) * exp2 ((gdouble) ((i / 16) % 7) - 3.0));
      bytes = g_bytes_new (init, numel * sizeof (gfloat));
      if (mixprec_engine_register_param (engine, model[p].name, shape, model[p].cols ? 2 : 1,
                                         model[p].module, MIXPREC_DTYPE_FLOAT32, bytes, error) == NULL)
        return NULL;
    }
  return g_steal_pointer (&engine);
}

/* Each fp4 parameter's copy against mixprec_quantize_blocks() of @master
 * (@what names the moment); the whole copy must be on this rank. */
static gboolean
copy_matches (MixprecParam *param, GBytes *master, MixprecBlockRecipe recipe, MixprecMxScaleMode mode,
              const gchar *what)
{
  g_autoptr(GError) error = NULL;
  guint64 numel = mixprec_param_get_numel (param), cols = mixprec_param_get_fp4_cols (param);
  guint b = mixprec_block_recipe_get_block_size (recipe);
  g_autofree guint8 *want = g_new (guint8, numel / 2);
  g_autofree guint8 *want_scales = g_new (guint8, numel / b);
  g_autofree gfloat *want_values = g_new (gfloat, numel);
  g_autofree gfloat *got_values = g_new (gfloat, numel);
  gfloat want_ts = 0.0f;
  gsize n_bytes = 0, n_scales = 0;
  const guint8 *data = mixprec_param_get_fp4_data (param, &n_bytes);
  const guint8 *scales = mixprec_param_get_fp4_block_scales (param, &n_scales);

  g_assert_true (mixprec_quantize_blocks (recipe, mode, g_bytes_get_data (master, NULL), numel / cols,
                                          cols, MIXPREC_ROUNDING_NEAREST_EVEN, 0, want, want_scales,
                                          &want_ts, &error));
  g_assert_no_error (error);
  if (data == NULL || n_bytes != numel / 2 || scales == NULL || n_scales != numel / b ||
      memcmp (data, want, numel / 2) != 0 || memcmp (scales, want_scales, numel / b) != 0 ||
      mixprec_param_get_fp4_tensor_scale (param) != want_ts)
    {
      g_printerr ("%s: parameter '%s' differs from mixprec_quantize_blocks() of its master "
                  "(tensor scale %a, want %a)\n", what, mixprec_param_get_name (param),
                  mixprec_param_get_fp4_tensor_scale (param), want_ts);
      return FALSE;
    }
  /* And it decodes as mixprec_dequantize_blocks() does. */
  g_assert_true (mixprec_dequantize_blocks (recipe, want, want_scales, want_ts, numel / cols, cols,
                                            want_values, &error));
  g_assert_true (mixprec_param_dequantize_fp4 (param, got_values, numel, &error));
  g_assert_no_error (error);
  return memcmp (want_values, got_values, numel * sizeof (gfloat)) == 0;
}

/* Masters, then for fp4 parameters the 4-bit copy, its scales and its
 * tensor scale (each checked against the masters), for the others the
 * working copy. @gathered: the bytes the gathers received. */
static GByteArray *
snapshot (MixprecEngine *engine, const Scenario *s, guint64 *gathered, GError **error)
{
  GByteArray *out = g_byte_array_new ();
  guint64 before = mixprec_engine_get_gathered_bytes (engine);
  guint ri = recipe_index (s->tag);

  if (!mixprec_engine_gather_all (engine, error))
    return NULL;
  *gathered = mixprec_engine_get_gathered_bytes (engine) - before;
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, model[p].name, error);
      g_autoptr(GBytes) copy = NULL;

      if (master == NULL)
        return NULL;
      g_byte_array_append (out, g_bytes_get_data (master, NULL), g_bytes_get_size (master));
      if (mixprec_param_is_fp4 (param) != (model[p].cols > 0 && g_str_equal (model[p].module, "Linear")))
        {
          g_printerr ("parameter '%s': is_fp4 is wrong\n", model[p].name);
          return NULL;
        }
      if (mixprec_param_is_fp4 (param))
        {
          gsize n = 0, n_scales = 0;
          const guint8 *data = mixprec_param_get_fp4_data (param, &n);
          const guint8 *scales = mixprec_param_get_fp4_block_scales (param, &n_scales);
          gfloat ts = mixprec_param_get_fp4_tensor_scale (param);

          if (mixprec_param_is_fp8 (param) ||
              !copy_matches (param, master, recipes[ri].recipe, recipes[ri].mode, "snapshot"))
            return NULL;
          g_byte_array_append (out, data, n);
          g_byte_array_append (out, scales, n_scales);
          g_byte_array_append (out, (const guint8 *) &ts, sizeof ts);
          continue;
        }
      copy = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, error);
      if (copy == NULL)
        return NULL;
      g_byte_array_append (out, g_bytes_get_data (copy, NULL), g_bytes_get_size (copy));
    }
  mixprec_engine_release_all (engine);
  return out;
}

/* ------------------------------------------------------------ one process */

static void
test_single (gconstpointer data)
{
  const gchar *tag = data;
  Scenario s = { NULL, tag, 0, 1, 3 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = build_engine (&s, 1, &error);
  guint ri = recipe_index (tag);

  g_assert_no_error (error);
  for (guint k = 0; k <= s.steps; k++)
    {
      g_autofree gchar *what = g_strdup_printf ("%s after %u steps", tag, k);

      if (k > 0)
        {
          g_assert_true (er_step (engine, k, 0, 1, 1, &error));
          g_assert_no_error (error);
        }
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
          g_autoptr(GBytes) master = mixprec_param_get_master (param, &error);
          g_autoptr(GBytes) working = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, &error);

          g_assert_no_error (error);
          /* The high-precision working copy stays beside the 4-bit one. */
          g_assert_nonnull (working);
          if (!mixprec_param_is_fp4 (param))
            {
              g_assert_null (mixprec_param_get_fp4_data (param, NULL));
              continue;
            }
          g_assert_cmpint (mixprec_param_get_fp4_recipe (param), ==, recipes[ri].recipe);
          g_assert_cmpuint (mixprec_param_get_fp4_cols (param), ==, model[p].cols);
          g_assert_true (copy_matches (param, master, recipes[ri].recipe, recipes[ri].mode, what));
          /* The addresses bindings make views from are those buffers. */
          {
            guint64 scales_address = 0;
            gsize n_scales = 0, n_scales_c = 0;
            gint device_type = -1, device_id = -1;
            guint64 address = mixprec_param_get_fp4_address (param, &scales_address, &n_scales,
                                                             &device_type, &device_id, &error);
            const guint8 *scales = mixprec_param_get_fp4_block_scales (param, &n_scales_c);

            g_assert_no_error (error);
            g_assert_cmphex (address, ==, (guint64) GPOINTER_TO_SIZE (mixprec_param_get_fp4_data (param, NULL)));
            g_assert_cmphex (scales_address, ==, (guint64) GPOINTER_TO_SIZE (scales));
            g_assert_cmpuint (n_scales, ==, n_scales_c);
            g_assert_cmpuint (n_scales, ==, mixprec_param_get_numel (param) /
                                            mixprec_block_recipe_get_block_size (recipes[ri].recipe));
            g_assert_cmpint (device_type, ==, 1);
            g_assert_cmpint (device_id, ==, 0);
          }
        }
    }
}

/* A zero matrix decodes to zeros (tensor scale 1, not mixprec_quantize_blocks()'s NaN scales). */
static void
test_zero_matrix (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config =
    mixprec_config_new_from_data ("{\"bf16\": {\"enabled\": true}, \"fp4\": {\"enabled\": true}}", -1, &error);
  g_autoptr(MixprecEngine) engine = mixprec_engine_new (config, &error);
  guint64 shape[2] = { 32, 32 };
  gfloat values[32 * 32] = { 0 };
  g_autoptr(GBytes) zeros = g_bytes_new (values, sizeof values);
  MixprecParam *p = mixprec_engine_register_param (engine, "w", shape, 2, "Linear",
                                                   MIXPREC_DTYPE_FLOAT32, zeros, &error);

  g_assert_no_error (error);
  g_assert_true (mixprec_param_dequantize_fp4 (p, values, G_N_ELEMENTS (values), &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_param_get_fp4_tensor_scale (p), ==, 1.0f);
  for (guint i = 0; i < G_N_ELEMENTS (values); i++)
    g_assert_cmpfloat (values[i], ==, 0.0f);
}

/* Errors name the parameter and the rule. */
static void
test_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config =
    mixprec_config_new_from_data ("{\"bf16\": {\"enabled\": true}, \"fp4\": {\"enabled\": true, "
                                  "\"recipe\": \"mxfp4\"}}", -1, &error);
  g_autoptr(MixprecEngine) engine = mixprec_engine_new (config, &error);
  guint64 shape[2] = { 4, 48 };
  gfloat values[4 * 64] = { 0 };
  g_autoptr(GBytes) init48 = g_bytes_new (values, 4 * 48 * sizeof (gfloat));
  g_autoptr(GBytes) init64 = g_bytes_new (values, 4 * 64 * sizeof (gfloat));
  g_autoptr(GBytes) init4 = g_bytes_new (values, 4 * sizeof (gfloat));

  g_assert_no_error (error);
  g_assert_null (mixprec_engine_register_param (engine, "odd", shape, 2, "Linear",
                                                MIXPREC_DTYPE_FLOAT32, init48, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "'odd'"));
  g_assert_nonnull (strstr (error->message, "rows of 48 elements"));
  g_assert_nonnull (strstr (error->message, "MXFP4 blocks of 32"));
  g_clear_error (&error);

  shape[1] = 64;
  g_assert_nonnull (mixprec_engine_register_param (engine, "w", shape, 2, "Linear",
                                                   MIXPREC_DTYPE_FLOAT32, init64, &error));
  g_assert_nonnull (mixprec_engine_register_param (engine, "v", shape, 1, "LayerNorm",
                                                   MIXPREC_DTYPE_FLOAT32, init4, &error));
  g_assert_no_error (error);
  g_assert_false (mixprec_param_dequantize_fp4 (mixprec_engine_get_param (engine, "w"), values, 4, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (mixprec_param_dequantize_fp4 (mixprec_engine_get_param (engine, "v"), values, 4, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "does not mark it fp4"));
  g_clear_error (&error);
  g_assert_cmpuint (mixprec_param_get_fp4_address (mixprec_engine_get_param (engine, "v"), NULL, NULL, NULL,
                                                   NULL, &error), ==, 0);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "'v'"));
  g_assert_nonnull (strstr (error->message, "does not mark it fp4"));
}

/* A checkpoint of a trained fp4 engine, loaded into a fresh one (whose
 * copies are those of the initial values until then): the 4-bit copies
 * come back from the loaded masters, byte for byte, and the next steps
 * give the same bytes in both. */
static void
test_checkpoint (void)
{
  Scenario s = { NULL, "nvfp4-2d", 0, 1, 2 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) a = build_engine (&s, 1, &error);
  g_autoptr(MixprecEngine) b = build_engine (&s, 1, &error);
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-fp4-ckpt-XXXXXX", &error);
  g_autofree gchar *cmd = NULL;

  g_assert_no_error (error);
  for (guint k = 0; k < 2; k++)
    g_assert_true (er_step (a, k, 0, 1, 1, &error));
  g_assert_true (mixprec_engine_save_checkpoint (a, dir, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (b, dir, &error));
  g_assert_no_error (error);
  for (guint round = 0; round < 2; round++)
    {
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        {
          MixprecParam *pa = mixprec_engine_get_param (a, model[p].name);
          MixprecParam *pb = mixprec_engine_get_param (b, model[p].name);
          gsize na = 0, nb = 0, sa = 0, sb = 0;
          const guint8 *da, *db, *ca, *cb;

          if (!mixprec_param_is_fp4 (pa))
            continue;
          g_assert_true (mixprec_param_is_fp4 (pb));
          da = mixprec_param_get_fp4_data (pa, &na);
          db = mixprec_param_get_fp4_data (pb, &nb);
          ca = mixprec_param_get_fp4_block_scales (pa, &sa);
          cb = mixprec_param_get_fp4_block_scales (pb, &sb);
          g_assert_cmpmem (da, na, db, nb);
          g_assert_cmpmem (ca, sa, cb, sb);
          g_assert_cmpfloat (mixprec_param_get_fp4_tensor_scale (pa), ==,
                             mixprec_param_get_fp4_tensor_scale (pb));
        }
      g_assert_true (er_step (a, 2 + round, 0, 1, 1, &error));
      g_assert_true (er_step (b, 2 + round, 0, 1, 1, &error));
      g_assert_no_error (error);
    }
  cmd = g_strdup_printf ("rm -rf '%s'", dir);
  g_assert_cmpint (system (cmd), ==, 0);
}

/* fp8.mx_scale_mode: the engine's MXFP8 copies carry the mode's scales,
 * those of mixprec_mx_quantize_with_scale_mode() on the masters, after
 * layout and after each step (the fused cast included). */
static void
test_mxfp8_scale_mode (gconstpointer data)
{
  MixprecMxScaleMode mode = GPOINTER_TO_INT (data);
  static const gchar *const names[] = { "floor", "rceil", "ceil", "even" };
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json =
    g_strdup_printf ("{\"bf16\": {\"enabled\": true}, \"fp8\": {\"enabled\": true, \"recipe\": \"mx\","
                     " \"format\": \"e4m3\", \"mx_scale_mode\": \"%s\"},"
                     " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}", names[mode]);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = mixprec_engine_new (config, &error);
  guint64 shape[2] = { 70, 96 };
  gsize numel = 70 * 96;
  g_autofree gfloat *init = g_new (gfloat, numel);
  g_autofree guint8 *want = g_new (guint8, numel);
  g_autofree guint8 *want_scales = g_new (guint8, numel / 32);
  g_autoptr(GBytes) bytes = NULL;
  MixprecParam *p;
  gboolean differs_from_floor = FALSE;

  g_assert_no_error (error);
  for (gsize i = 0; i < numel; i++)
    init[i] = (gfloat) (sin (0.3 * i) * exp2 ((gdouble) (i % 11) - 5.0));
  bytes = g_bytes_new (init, numel * sizeof (gfloat));
  p = mixprec_engine_register_param (engine, "w", shape, 2, "Linear", MIXPREC_DTYPE_FLOAT32, bytes, &error);
  g_assert_no_error (error);
  for (guint k = 0; k < 3; k++)
    {
      g_autoptr(GBytes) master = NULL;
      gsize n_scales = 0;
      const guint8 *scales;

      if (k > 0)
        {
          g_autoptr(MixprecStepResult) r = NULL;
          g_autofree gfloat *g = g_new (gfloat, numel);
          g_autoptr(GBytes) gb = NULL;

          for (gsize i = 0; i < numel; i++)
            g[i] = (gfloat) cos (0.7 * i + k);
          gb = g_bytes_new_take (g_steal_pointer (&g), numel * sizeof (gfloat));
          g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, gb, &error));
          g_assert_true (mixprec_engine_backward_done (engine, &error));
          r = mixprec_engine_step (engine, &error);
          g_assert_no_error (error);
        }
      master = mixprec_param_get_master (p, &error);
      g_assert_no_error (error);
      g_assert_true (mixprec_mx_quantize_with_scale_mode (MIXPREC_DTYPE_FLOAT8_E4M3, mode,
                                                          g_bytes_get_data (master, NULL), numel, 32,
                                                          want, want_scales, &error));
      scales = mixprec_param_get_fp8_block_scales (p, &n_scales);
      g_assert_cmpuint (n_scales, ==, numel / 32);
      g_assert_cmpmem (scales, n_scales, want_scales, numel / 32);
      g_assert_cmpmem (mixprec_param_get_fp8_data (p), numel, want, numel);
      /* The mode mattered: FLOOR's scales differ somewhere. */
      g_assert_true (mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, g_bytes_get_data (master, NULL),
                                          numel, 32, want, want_scales, &error));
      differs_from_floor |= memcmp (scales, want_scales, numel / 32) != 0;
    }
  g_assert_true (differs_from_floor == (mode != MIXPREC_MX_SCALE_FLOOR));
}

/* ------------------------------------------------------------ ranks */

/* The engine's 4-bit buffers are those mixprec_memory_plan_list_buffers()
 * predicts for its fp4 matrices (one group). */
static gboolean
plan_matches (MixprecEngine *engine, guint world)
{
  static const guint64 sizes[3] = { 100 * 64, 40 * 96, 300 * 416 };
  static const gchar * const names[2] = { "FP8 working copies", "FP8 block scales" };

  return er_buffers_match_plan (engine, sizes, 3, world, names, 2, 2);
}

static int
child_main (void)
{
  Scenario s;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GByteArray) snap = NULL;
  guint64 gathered = 0;
  guint rank = 0;

  if (!er_parse_scenario (g_getenv ("MIXPREC_TEST_SCENARIO"), &s.tag, &s.stage, &s.world, &s.steps))
    return 2;
  engine = build_engine (&s, 1, &error);
  if (engine != NULL)
    {
      rank = mixprec_engine_get_rank (engine);
      if (mixprec_engine_get_world_size (engine) != s.world)
        return 2;
      for (guint k = 0; k < s.steps && error == NULL; k++)
        er_step (engine, k, rank, s.world, 1, &error);
      if (error == NULL)
        snap = snapshot (engine, &s, &gathered, &error);
    }
  if (snap == NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error != NULL ? error->message : "mismatch");
      return 1;
    }
  if (!plan_matches (engine, s.world))
    return 4;
  if (!er_write_rank_result (g_getenv ("MIXPREC_TEST_OUT"), rank, gathered, snap, &error))
    return 1;
  return 0;
}

static void
test_scenario (gconstpointer data)
{
  const Scenario *s = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) ref = NULL;
  g_autoptr(GByteArray) expected = NULL;
  g_autofree gchar *scenario = g_strdup_printf ("%s:%u:%u:%u", s->tag, s->stage, s->world, s->steps);
  guint64 ref_gathered = 0, gathered[4];

  /* The reference: one process, every micro-batch in order. */
  ref = build_engine (s, s->world, &error);
  g_assert_no_error (error);
  for (guint k = 0; k < s->steps; k++)
    g_assert_true (er_step (ref, k, 0, 1, s->world, &error));
  g_assert_no_error (error);
  expected = snapshot (ref, s, &ref_gathered, &error);
  g_assert_no_error (error);
  g_assert_nonnull (expected);

  er_run_ranks ("MIXPREC_TEST_FP4_ZERO_CHILD", scenario, s->world, TIMEOUT_MS, expected, gathered);
  for (guint r = 0; r < s->world; r++)
    {
      guint64 padded = er_padded_numel (model[4].rows * model[4].cols, s->world), want = 0;
      guint b = mixprec_block_recipe_get_block_size (recipes[recipe_index (s->tag)].recipe);

      /* ZeRO-3 gathers w3 alone (the rest is persistent): half a byte an
       * element and a scale byte a block, from the other ranks. */
      if (s->stage == 3 && s->world > 1)
        want = (padded / 2 + padded / b) / s->world * (s->world - 1);
      g_assert_cmpuint (gathered[r], ==, want);
    }
}

int
main (int argc, char **argv)
{
  static const Scenario scenarios[] = {
    { NULL, "nvfp4-2d", 3, 1, 2 }, { NULL, "nvfp4-2d", 3, 2, 3 }, { NULL, "nvfp4-2d", 3, 3, 3 },
    { NULL, "nvfp4-1d", 3, 3, 2 }, { NULL, "mxfp4", 3, 2, 2 }, { NULL, "mxfp4-rceil", 3, 3, 2 },
    { NULL, "nvfp4-2d", 1, 3, 2 }, { NULL, "mxfp4", 2, 2, 2 }, { NULL, "nvfp4-2d", 0, 2, 2 },
  };

  if (g_getenv ("MIXPREC_TEST_FP4_ZERO_CHILD") != NULL)
    return child_main ();

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (recipes); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/fp4-engine/single/%s", recipes[i].tag);

      g_test_add_data_func (path, recipes[i].tag, test_single);
    }
  g_test_add_func ("/fp4-engine/zero-matrix", test_zero_matrix);
  g_test_add_func ("/fp4-engine/checkpoint", test_checkpoint);
  g_test_add_data_func ("/fp4-engine/mxfp8-scale-mode/floor", GINT_TO_POINTER (MIXPREC_MX_SCALE_FLOOR),
                        test_mxfp8_scale_mode);
  g_test_add_data_func ("/fp4-engine/mxfp8-scale-mode/rceil", GINT_TO_POINTER (MIXPREC_MX_SCALE_RCEIL),
                        test_mxfp8_scale_mode);
  g_test_add_data_func ("/fp4-engine/mxfp8-scale-mode/ceil", GINT_TO_POINTER (MIXPREC_MX_SCALE_CEIL),
                        test_mxfp8_scale_mode);
  g_test_add_data_func ("/fp4-engine/mxfp8-scale-mode/even", GINT_TO_POINTER (MIXPREC_MX_SCALE_EVEN),
                        test_mxfp8_scale_mode);
  g_test_add_func ("/fp4-engine/errors", test_errors);
  for (guint i = 0; i < G_N_ELEMENTS (scenarios); i++)
    {
      const Scenario *s = &scenarios[i];
      g_autofree gchar *path = g_strdup_printf ("/fp4-engine/zero/%s/stage%u/world%u", s->tag,
                                                s->stage, s->world);

      g_test_add_data_func (path, s, test_scenario);
    }
  return g_test_run ();
}
