/* test-fp8-engine.c — FP8 working copies in the engine, one process: after
 * every step the FP8 copy of each fp8 parameter equals the public casts
 * (mixprec_fp8_quantize(), mixprec_mx_quantize()) of its FP32 master, bit
 * for bit, with the scale its scaling reports, and the scales follow the
 * amaxes of the masters (computed here from the masters themselves); a
 * skipped step changes nothing FP8; checkpoints carry the scalings.
 *
 * The device cases run on the "hostdev" test plugin, or on the GPU with
 * MIXPREC_TEST_DEVICE=cuda (tests/test-fp8-engine-cuda.sh; they skip with
 * the plugin's reason where no GPU is usable, and fail instead when
 * MIXPREC_REQUIRE_GPU is set). */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-impl-private.h"

#define E4M3_MAX 448.0f

typedef struct {
  const gchar *name;
  guint64 rows, cols;
  const gchar *module;
} Spec;

/* A matrix whose size is no multiple of the MX block, a small Linear
 * matrix, a LayerNorm weight and a Linear bias that stay out of FP8 (no
 * GEMM multiplies them), and a matrix the optimizer's tiles (16384
 * elements of the group) cut inside MX blocks. */
static const Spec model[] = {
  { "w", 100, 70, "Linear" }, { "b", 3, 11, "Linear" }, { "ln", 50, 0, "LayerNorm" },
  { "bias", 70, 0, "Linear" },
  { "big", 202, 100, "Linear" },
};
static const gchar *const fp8_names[] = { "w", "b", "big" };

/* fp8.amax_history_len of the engines build() makes. */
static guint history_len = 16;

static MixprecConfig *
make_config (const gchar *recipe, const gchar *mode)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *fp8 = recipe != NULL
    ? g_strdup_printf ("\"fp8\": {\"enabled\": true, \"recipe\": \"%s\", \"amax_history_len\": %u,"
                       " \"amax_compute_algo\": \"max\", \"modules\": [\"Linear\"]},", recipe,
                       history_len)
    : g_strdup ("");
  const gchar *precision = g_str_equal (mode, "fp16")
    ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"hysteresis\": 1},"
    : "\"bf16\": {\"enabled\": true},";
  g_autofree gchar *json =
    g_strdup_printf ("{%s %s \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.05}}}",
                     precision, fp8);
  MixprecConfig *config;

  config = mixprec_config_new_from_data (json, -1, &error);
  g_assert_no_error (error);
  return config;
}

/* On @device (NULL: the cpu device). */
static MixprecEngine *
build_on (const gchar *recipe, const gchar *mode, _MixprecDevice *device)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = make_config (recipe, mode);
  MixprecEngine *engine = device != NULL
    ? _mixprec_engine_new_internal (config, device, NULL, NULL, FALSE, &error)
    : mixprec_engine_new (config, &error);

  g_assert_no_error (error);
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint64 numel = model[p].rows * MAX (model[p].cols, 1);
      guint64 shape[2] = { model[p].rows, model[p].cols };
      g_autofree gfloat *init = g_new (gfloat, numel);
      g_autoptr(GBytes) bytes = NULL;

      for (guint64 i = 0; i < numel; i++)
        init[i] = (gfloat) (sin (0.37 * (gdouble) i + p) * exp2 ((gdouble) (i % 7) - 3.0));
      bytes = g_bytes_new (init, numel * sizeof (gfloat));
      g_assert_nonnull (mixprec_engine_register_param (engine, model[p].name, shape,
                                                       model[p].cols ? 2 : 1, model[p].module,
                                                       MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_no_error (error);
    }
  g_assert_true (mixprec_engine_prepare (engine, &error));
  g_assert_no_error (error);
  return engine;
}

static MixprecEngine *
build (const gchar *recipe, const gchar *mode)
{
  return build_on (recipe, mode, NULL);
}

static GBytes *
master_of (MixprecEngine *engine, const gchar *name)
{
  g_autoptr(GError) error = NULL;
  GBytes *m = mixprec_param_get_master (mixprec_engine_get_param (engine, name), &error);

  g_assert_no_error (error);
  return m;
}

static gfloat
amax_of (GBytes *values)
{
  gsize n = g_bytes_get_size (values) / sizeof (gfloat);
  const gfloat *v = g_bytes_get_data (values, NULL);
  gfloat m = 0.0f;

  for (gsize i = 0; i < n; i++)
    m = fmaxf (m, fabsf (v[i]));
  return m;
}

/* One step with gradients from @k; @overflow puts an Inf in "w". */
static MixprecStepResult *
step (MixprecEngine *engine, guint k, gboolean overflow)
{
  g_autoptr(GError) error = NULL;
  MixprecStepResult *r;

  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
      guint64 numel = mixprec_param_get_numel (param);
      gfloat *g = g_new (gfloat, numel);
      g_autoptr(GBytes) bytes = NULL;

      for (guint64 i = 0; i < numel; i++)
        g[i] = (gfloat) (cos (0.13 * (gdouble) i + 1.7 * k + p) * (1.0 + (gdouble) (i % 5)) *
                         mixprec_engine_get_loss_scale (engine));
      if (overflow && p == 0)
        g[3] = INFINITY;
      bytes = g_bytes_new_take (g, numel * sizeof (gfloat));
      g_assert_true (mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_no_error (error);
    }
  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_assert_no_error (error);
  r = mixprec_engine_step (engine, &error);
  g_assert_no_error (error);
  return r;
}

/* The FP8 copy of @name is the saturating cast of its master with the
 * scale its scaling reports. */
static void
assert_scaled_copy (MixprecEngine *engine, const gchar *name)
{
  g_autoptr(GError) error = NULL;
  MixprecParam *param = mixprec_engine_get_param (engine, name);
  g_autoptr(GBytes) master = master_of (engine, name);
  gsize n = mixprec_param_get_numel (param);
  g_autofree guint8 *expected = g_new (guint8, n);
  MixprecFp8Scaling *scaling = mixprec_param_get_fp8_scaling (param);
  gfloat scale = mixprec_fp8_scaling_get_scale (scaling);

  g_assert_true (mixprec_fp8_quantize (mixprec_param_get_fp8_dtype (param),
                                       g_bytes_get_data (master, NULL), n, scale,
                                       MIXPREC_FP8_OVERFLOW_SATURATING, expected, NULL, &error));
  g_assert_no_error (error);
  g_assert_nonnull (mixprec_param_get_fp8_data (param));
  g_assert_cmpmem (mixprec_param_get_fp8_data (param), n, expected, n);
  g_assert_cmpfloat (mixprec_param_get_fp8_scale_inv (param), ==,
                     mixprec_fp8_scaling_get_scale_inv (scaling));
}

static gfloat
max_of_history (MixprecParam *param)
{
  guint n = 0;
  const gfloat *h = mixprec_fp8_scaling_get_amax_history (mixprec_param_get_fp8_scaling (param), &n);
  gfloat m = 0.0f;

  for (guint i = 0; i < n; i++)
    m = fmaxf (m, h[i]);
  return m;
}

static void
test_delayed (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = build ("delayed", "bf16");
  MixprecParam *w = mixprec_engine_get_param (engine, "w");
  MixprecParam *ln = mixprec_engine_get_param (engine, "ln");
  MixprecParam *bias = mixprec_engine_get_param (engine, "bias");
  gfloat seen[3] = { 0.0f, 0.0f, 0.0f };

  g_assert_true (mixprec_param_is_fp8 (w));
  g_assert_false (mixprec_param_is_fp8 (ln));
  /* A Linear's vector is added, not multiplied: no FP8 copy. */
  g_assert_false (mixprec_param_is_fp8 (bias));
  g_assert_null (mixprec_param_get_fp8_data (bias));
  g_assert_cmpint (mixprec_param_get_fp8_dtype (w), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  /* Before any step: the initial values with scale 1. */
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (w)), ==, 1.0f);
  for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
    assert_scaled_copy (engine, fp8_names[i]);

  for (guint k = 0; k < 5; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      const gchar *const *names = fp8_names;

      /* The amax the step records is that of the copy cast last: of the
       * masters before it. */
      for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
        {
          g_autoptr(GBytes) before = master_of (engine, names[i]);

          seen[i] = fmaxf (seen[i], amax_of (before));
        }
      r = step (engine, k, FALSE);
      g_assert_true (r->applied);
      for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, names[i]);
          gfloat expected = E4M3_MAX / seen[i];

          /* History of 16 > the steps: its maximum is every amax seen. */
          g_assert_cmpfloat (max_of_history (param), ==, seen[i]);
          g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (param)), ==,
                             expected);
          assert_scaled_copy (engine, names[i]);
        }
    }

  /* The buffers through the address API, and what a non-fp8 one says. */
  g_assert_cmpuint (mixprec_param_get_buffer_address (w, MIXPREC_PARAM_BUFFER_FP8, NULL, &error), ==,
                    (guint64) GPOINTER_TO_SIZE (mixprec_param_get_fp8_data (w)));
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_param_get_buffer_address (w, MIXPREC_PARAM_BUFFER_FP8_SCALES, NULL, &error), ==, 0);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "'w'"));
  g_clear_error (&error);
  g_assert_null (mixprec_param_get_fp8 (ln, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "'ln'"));
  g_clear_error (&error);
  g_assert_null (mixprec_param_get_fp8_data (ln));
  g_assert_null (mixprec_param_get_fp8_scaling (ln));
  g_assert_cmpfloat (mixprec_param_get_fp8_scale_inv (ln), ==, 1.0f);
}

static void
test_current (void)
{
  g_autoptr(MixprecEngine) engine = build ("current", "bf16");

  for (guint k = 0; k < 3; k++)
    {
      g_autoptr(MixprecStepResult) r = step (engine, k, FALSE);
      const gchar *const *names = fp8_names;

      g_assert_true (r->applied);
      for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, names[i]);
          g_autoptr(GBytes) now = master_of (engine, names[i]);

          /* Current scaling: the amax of the values cast. */
          g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (param)), ==,
                             E4M3_MAX / amax_of (now));
          assert_scaled_copy (engine, names[i]);
        }
    }
}

static void
assert_mx_copy (MixprecEngine *engine, const gchar *name)
{
  g_autoptr(GError) error = NULL;
  MixprecParam *param = mixprec_engine_get_param (engine, name);
  g_autoptr(GBytes) master = master_of (engine, name);
  gsize n = mixprec_param_get_numel (param), n_scales = 0;
  g_autofree guint8 *data = g_new (guint8, n);
  g_autofree guint8 *scales = g_new (guint8, (n + 31) / 32);
  const guint8 *got_scales = mixprec_param_get_fp8_block_scales (param, &n_scales);
  g_autoptr(GBytes) copy = NULL;

  g_assert_true (mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, g_bytes_get_data (master, NULL), n, 32,
                                      data, scales, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (n_scales, ==, (n + 31) / 32);
  g_assert_cmpmem (mixprec_param_get_fp8_data (param), n, data, n);
  g_assert_cmpmem (got_scales, n_scales, scales, n_scales);
  copy = mixprec_param_get_fp8_block_scales_bytes (param, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (g_bytes_get_data (copy, NULL), g_bytes_get_size (copy), scales, n_scales);
  g_assert_cmpfloat (mixprec_param_get_fp8_scale_inv (param), ==, 1.0f);
}

static void
test_mx (void)
{
  g_autoptr(MixprecEngine) engine = build ("mx", "bf16");

  for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
    assert_mx_copy (engine, fp8_names[i]);
  for (guint k = 0; k < 3; k++)
    {
      g_autoptr(MixprecStepResult) r = step (engine, k, FALSE);

      g_assert_true (r->applied);
      for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
        assert_mx_copy (engine, fp8_names[i]);
    }
}

/* A skipped step leaves the copy, its scale and the amax history alone;
 * the amax still pending is agreed at the next applied step. */
static void
test_skipped_step (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = build ("delayed", "fp16");
  MixprecParam *w = mixprec_engine_get_param (engine, "w");
  MixprecFp8Scaling *scaling = mixprec_param_get_fp8_scaling (w);
  g_autoptr(MixprecStepResult) r1 = step (engine, 0, FALSE);
  g_autoptr(MixprecStepResult) r2 = NULL;
  g_autoptr(MixprecStepResult) r3 = NULL;
  g_autoptr(GBytes) data = mixprec_param_get_fp8 (w, &error);
  g_autoptr(GVariant) state = mixprec_fp8_scaling_save_state (scaling);
  g_autoptr(GVariant) after = NULL;
  g_autoptr(GBytes) data_after = NULL;
  g_autoptr(GBytes) before_next = NULL;
  gfloat pending;

  g_assert_no_error (error);
  g_assert_true (r1->applied);
  before_next = master_of (engine, "w");
  pending = amax_of (before_next);
  r2 = step (engine, 1, TRUE);
  g_assert_false (r2->applied);
  after = mixprec_fp8_scaling_save_state (scaling);
  g_assert_true (g_variant_equal (state, after));
  data_after = mixprec_param_get_fp8 (w, &error);
  g_assert_no_error (error);
  g_assert_true (g_bytes_equal (data, data_after));

  /* The next applied step records the amax of the unchanged masters. */
  r3 = step (engine, 2, FALSE);
  g_assert_true (r3->applied);
  g_assert_cmpfloat (max_of_history (w), >=, pending);
  assert_scaled_copy (engine, "w");
}

static void
test_memory (void)
{
  g_autoptr(MixprecEngine) engine = build ("mx", "bf16");
  g_autoptr(GPtrArray) buffers = mixprec_engine_list_buffers (engine);
  guint64 fp8 = 0, scales = 0, planned_fp8 = 0, planned_scales = 0;

  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

      if (g_str_equal (b->name, "FP8 working copies"))
        fp8 = b->bytes, planned_fp8 = b->planned_bytes;
      if (g_str_equal (b->name, "FP8 block scales"))
        scales = b->bytes, planned_scales = b->planned_bytes;
    }
  /* One byte per element of the two Linear parameters; one scale per
   * block of each, the MX parameters being units of their own. */
  g_assert_cmpuint (fp8, ==, 100 * 70 + 33 + 202 * 100);
  g_assert_cmpuint (planned_fp8, ==, fp8);
  g_assert_cmpuint (scales, ==, (100 * 70 + 31) / 32 + (33 + 31) / 32 + (202 * 100 + 31) / 32);
  g_assert_cmpuint (planned_scales, ==, scales);
}

static gchar *
tmp_dir (void)
{
  g_autoptr(GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("mixprec-fp8-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

static void
remove_tree (const gchar *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr(GDir) d = g_dir_open (path, 0, NULL);
      const gchar *name;

      while (d != NULL && (name = g_dir_read_name (d)) != NULL)
        {
          g_autofree gchar *child = g_build_filename (path, name, NULL);

          remove_tree (child);
        }
    }
  g_remove (path);
}

/* Saved and restored: the scalings, and from them the same next steps as
 * an uninterrupted run. */
static void
test_checkpoint (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = tmp_dir ();
  g_autoptr(MixprecEngine) a = build ("delayed", "bf16");
  g_autoptr(MixprecEngine) b = build ("delayed", "bf16");
  g_autoptr(MixprecEngine) plain = build (NULL, "bf16");
  g_autoptr(MixprecEngine) fresh = build ("delayed", "bf16");

  for (guint k = 0; k < 3; k++)
    {
      g_autoptr(MixprecStepResult) r = step (a, k, FALSE);

      g_assert_true (r->applied);
    }
  g_assert_true (mixprec_engine_save_checkpoint (a, dir, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (b, dir, &error));
  g_assert_no_error (error);
  for (guint k = 3; k < 5; k++)
    {
      const gchar *const *names = fp8_names;

      for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
        {
          MixprecParam *pa = mixprec_engine_get_param (a, names[i]);
          MixprecParam *pb = mixprec_engine_get_param (b, names[i]);
          g_autoptr(GVariant) sa = mixprec_fp8_scaling_save_state (mixprec_param_get_fp8_scaling (pa));
          g_autoptr(GVariant) sb = mixprec_fp8_scaling_save_state (mixprec_param_get_fp8_scaling (pb));
          g_autoptr(GBytes) da = mixprec_param_get_fp8 (pa, &error);
          g_autoptr(GBytes) db = mixprec_param_get_fp8 (pb, &error);

          g_assert_no_error (error);
          g_assert_true (g_variant_equal (sa, sb));
          g_assert_true (g_bytes_equal (da, db));
        }
      {
        g_autoptr(MixprecStepResult) ra = step (a, k, FALSE);
        g_autoptr(MixprecStepResult) rb = step (b, k, FALSE);

        g_assert_true (ra->applied && rb->applied);
      }
    }

  /* An engine without fp8 takes the same checkpoint, FP8 state ignored. */
  g_assert_true (mixprec_engine_load_checkpoint (plain, dir, &error));
  g_assert_no_error (error);
  g_assert_false (mixprec_param_is_fp8 (mixprec_engine_get_param (plain, "w")));
  remove_tree (dir);

  /* A checkpoint without FP8 state: fresh scalings, copies from the
   * restored masters. */
  g_assert_true (mixprec_engine_save_checkpoint (plain, dir, &error));
  g_assert_no_error (error);
  {
    g_autoptr(MixprecStepResult) r = step (fresh, 0, FALSE);

    g_assert_true (r->applied);
  }
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (mixprec_engine_get_param (fresh, "w"))), !=, 1.0f);
  g_assert_true (mixprec_engine_load_checkpoint (fresh, dir, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (mixprec_engine_get_param (fresh, "w"))), ==, 1.0f);
  g_assert_cmpfloat (max_of_history (mixprec_engine_get_param (fresh, "w")), ==, 0.0f);
  for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
    assert_scaled_copy (fresh, fp8_names[i]);
  remove_tree (dir);
}

/* The device the device cases run on: "hostdev" unless
 * MIXPREC_TEST_DEVICE names another. */
static const gchar *
device_under_test (void)
{
  const gchar *name = g_getenv ("MIXPREC_TEST_DEVICE");

  return name != NULL && name[0] != '\0' ? name : "hostdev";
}

static gboolean
on_hostdev (void)
{
  return g_str_equal (device_under_test (), "hostdev");
}

static gboolean
have_hostdev (void)
{
  if (g_getenv ("MIXPREC_TOP_BUILDDIR") != NULL)
    return TRUE;
  g_test_skip ("needs MIXPREC_TOP_BUILDDIR to find the hostdev test plugin");
  return FALSE;
}

/* A counter of the hostdev plugin, loaded by the registry once a device
 * of it is open. */
static gpointer
hostdev_symbol (const gchar *name)
{
  g_autofree gchar *file = g_build_filename (g_getenv ("MIXPREC_TOP_BUILDDIR"), "tests",
                                             "device-plugins", ".libs", "mixprec-test-hostdev.so",
                                             NULL);
  void *module = dlopen (file, RTLD_NOW | RTLD_NOLOAD);
  gpointer symbol;

  g_assert_nonnull (module);
  symbol = dlsym (module, name);
  g_assert_nonnull (symbol);
  /* The registry keeps the module loaded; this drops our reference only. */
  dlclose (module);
  return symbol;
}

/* The device under test, or NULL after g_test_skip() with the reason. */
static _MixprecDevice *
open_device_or_skip (void)
{
  g_autoptr(GError) error = NULL;
  _MixprecDevice *device;

  if (on_hostdev () && !have_hostdev ())
    return NULL;
  device = _mixprec_device_open (device_under_test (), -1, &error);
  if (device == NULL)
    {
      if (g_getenv ("MIXPREC_REQUIRE_GPU") != NULL)
        g_error ("device %s required: %s", device_under_test (), error->message);
      g_test_skip (error->message);
    }
  return device;
}

static void
assert_same_bytes (GBytes *a, GBytes *b)
{
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_cmpmem (g_bytes_get_data (a, NULL), g_bytes_get_size (a),
                   g_bytes_get_data (b, NULL), g_bytes_get_size (b));
}

/* On a device of plugin revision 3 ("hostdev": a GPU whose memory is host
 * memory; its fp8_cast and mx_cast are its own, from the element functions
 * of numeric-fp8.h) the FP8 copies are cast on the device after the
 * device optimizer's pass, and after several steps (a skipped one among
 * them under fp16) the masters, the FP8 copies, the block scales and the
 * scalings (scale and amax history) are bit for bit those of the engine on
 * "cpu", which casts fused into its optimizer's pass. The FP8 copy is in
 * device memory, as the working copy is. */
static void
test_device_case (const gchar *recipe, const gchar *mode)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = NULL;
  g_autoptr(MixprecEngine) cpu = NULL, dev = NULL;
  g_autofree gchar *named = g_strdup_printf ("device '%s'", device_under_test ());
  /* The hostdev plugin counts its kernels' calls; a GPU's are not counted. */
  unsigned *casts = NULL, *amax_passes = NULL, *mx_casts = NULL;
  unsigned casts0 = 0, amax0 = 0, mx0 = 0;
  gboolean fp16 = g_str_equal (mode, "fp16");

  device = open_device_or_skip ();
  if (device == NULL)
    return;
  if (on_hostdev ())
    {
      casts = hostdev_symbol ("mixprec_test_hostdev_fp8_casts");
      amax_passes = hostdev_symbol ("mixprec_test_hostdev_fp8_amax_passes");
      mx_casts = hostdev_symbol ("mixprec_test_hostdev_mx_casts");
      casts0 = *casts;
      amax0 = *amax_passes;
      mx0 = *mx_casts;
    }
  cpu = build (recipe, mode);
  dev = build_on (recipe, mode, device);
  for (guint k = 0; k < 6; k++)
    {
      g_autoptr(MixprecStepResult) a = step (cpu, k, fp16 && k == 2);
      g_autoptr(MixprecStepResult) b = step (dev, k, fp16 && k == 2);

      g_assert_cmpint (a->applied, ==, b->applied);
      g_assert_cmpint (a->applied, ==, !(fp16 && k == 2));
      for (guint p = 0; p < G_N_ELEMENTS (model); p++)
        {
          g_autoptr(GBytes) ma = master_of (cpu, model[p].name);
          g_autoptr(GBytes) mb = master_of (dev, model[p].name);

          assert_same_bytes (ma, mb);
        }
      for (guint f = 0; f < G_N_ELEMENTS (fp8_names); f++)
        {
          MixprecParam *pa = mixprec_engine_get_param (cpu, fp8_names[f]);
          MixprecParam *pb = mixprec_engine_get_param (dev, fp8_names[f]);
          g_autoptr(GBytes) ca = mixprec_param_get_fp8 (pa, &error);
          g_autoptr(GBytes) cb = mixprec_param_get_fp8 (pb, &error);
          MixprecFp8Scaling *sa = mixprec_param_get_fp8_scaling (pa);
          MixprecFp8Scaling *sb = mixprec_param_get_fp8_scaling (pb);
          gfloat scale_a = mixprec_fp8_scaling_get_scale (sa), scale_b = mixprec_fp8_scaling_get_scale (sb);
          guint na = 0, nb = 0;
          const gfloat *ha = mixprec_fp8_scaling_get_amax_history (sa, &na);
          const gfloat *hb = mixprec_fp8_scaling_get_amax_history (sb, &nb);

          g_assert_no_error (error);
          g_assert_true (mixprec_param_is_fp8 (pb));
          assert_same_bytes (ca, cb);
          g_assert_cmpmem (&scale_a, sizeof scale_a, &scale_b, sizeof scale_b);
          g_assert_cmpmem (ha, na * sizeof (gfloat), hb, nb * sizeof (gfloat));
          if (g_str_equal (recipe, "mx"))
            {
              g_autoptr(GBytes) xa = mixprec_param_get_fp8_block_scales_bytes (pa, &error);
              g_autoptr(GBytes) xb = mixprec_param_get_fp8_block_scales_bytes (pb, &error);

              g_assert_no_error (error);
              assert_same_bytes (xa, xb);
            }
          /* Device memory, as the working copy's: its address through
           * mixprec_param_get_device_address(), not as a host buffer. */
          {
            guint64 address;
            gint device_type = 0, device_id = -1;

            address = mixprec_param_get_device_address (pb, MIXPREC_PARAM_BUFFER_FP8, NULL,
                                                        &device_type, &device_id, &error);
            g_assert_no_error (error);
            g_assert_cmpuint (address, ==, (guint64) (guintptr) mixprec_param_get_fp8_data (pb));
            g_assert_cmpint (device_type, ==, _mixprec_device_get_dlpack_type (device));
            g_assert_cmpuint (mixprec_param_get_buffer_address (pb, MIXPREC_PARAM_BUFFER_FP8, NULL,
                                                                &error), ==, 0);
            g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
            g_assert_nonnull (strstr (error->message, named));
            g_clear_error (&error);
          }
        }
      /* The scales moved: the test compares more than the initial state. */
      if (k == 5 && !g_str_equal (recipe, "mx"))
        g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mixprec_param_get_fp8_scaling (
                             mixprec_engine_get_param (dev, "w"))), !=, 1.0f);
    }
  /* The device's kernels did the casts. */
  if (casts == NULL)
    return;
  if (g_str_equal (recipe, "mx"))
    g_assert_cmpuint (*mx_casts, >, mx0);
  else
    g_assert_cmpuint (*casts, >, casts0);
  if (g_str_equal (recipe, "current"))
    g_assert_cmpuint (*amax_passes, >, amax0);
  else
    g_assert_cmpuint (*amax_passes, ==, amax0);
}

static void
test_device_delayed (void)
{
  test_device_case ("delayed", "bf16");
}

static void
test_device_delayed_fp16 (void)
{
  test_device_case ("delayed", "fp16");
}

static void
test_device_current (void)
{
  test_device_case ("current", "bf16");
}

static void
test_device_mx (void)
{
  test_device_case ("mx", "bf16");
}

/* An engine on device @name with the optimizer offloaded to the host (the
 * old test devices have no optimizer of their own), a LayerNorm vector
 * registered; NULL when the test device plugins are not built. */
static MixprecEngine *
offloaded_engine (const gchar *name)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(_MixprecDevice) device = NULL;
  MixprecEngine *engine;
  gfloat init[8] = { 0 };
  guint64 shape[1] = { 8 };
  g_autoptr(GBytes) bytes = g_bytes_new (init, sizeof init);

  if (!have_hostdev ())
    return NULL;
  device = _mixprec_device_open (name, -1, &error);
  g_assert_no_error (error);
  config = mixprec_config_new_from_data ("{\"bf16\": {\"enabled\": true},"
                                         " \"fp8\": {\"enabled\": true, \"modules\": [\"Linear\"]},"
                                         " \"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}",
                                         -1, &error);
  g_assert_no_error (error);
  engine = _mixprec_engine_new_internal (config, device, NULL, NULL, FALSE, &error);
  g_assert_no_error (error);
  g_assert_nonnull (mixprec_engine_register_param (engine, "ln", shape, 1, "LayerNorm",
                                                   MIXPREC_DTYPE_FLOAT32, bytes, &error));
  g_assert_no_error (error);
  return engine;
}

/* Registering the Linear matrix "w" on @engine fails: the error. */
static GError *
register_fp8_fails (MixprecEngine *engine)
{
  GError *error = NULL;
  gfloat init[8] = { 0 };
  guint64 matrix[2] = { 2, 4 };
  g_autoptr(GBytes) bytes = g_bytes_new (init, sizeof init);

  g_assert_null (mixprec_engine_register_param (engine, "w", matrix, 2, "Linear",
                                                MIXPREC_DTYPE_FLOAT32, bytes, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "'w'"));
  g_assert_null (mixprec_engine_get_param (engine, "w"));
  return error;
}

/* A device whose plugin registered an older revision (no float8 casts):
 * registering an fp8 parameter fails naming the parameter, the device and
 * the revision; others register. */
static void
test_old_device (gconstpointer data)
{
  const gchar *name = data;
  g_autoptr(MixprecEngine) engine = offloaded_engine (name);
  g_autoptr(GError) error = NULL;
  g_autofree gchar *quoted = g_strdup_printf ("'%s'", name);
  g_autofree gchar *revision = g_strdup_printf ("as revision %c", name[strlen (name) - 1]);

  if (engine == NULL)
    return;
  error = register_fp8_fails (engine);
  g_assert_nonnull (strstr (error->message, quoted));
  g_assert_nonnull (strstr (error->message, "revision 3"));
  g_assert_nonnull (strstr (error->message, revision));
}

static MixprecEngine *
build_with_history (guint len)
{
  MixprecEngine *engine;

  history_len = len;
  engine = build ("delayed", "bf16");
  history_len = 16;
  return engine;
}

static void
steps (MixprecEngine *engine, guint first, guint end)
{
  for (guint k = first; k < end; k++)
    {
      g_autoptr(MixprecStepResult) r = step (engine, k, FALSE);

      g_assert_true (r->applied);
    }
}

/* A run that changes fp8.amax_history_len and resumes goes on as a run
 * that had the new length from the start: the FP8 copies do not feed back
 * into the masters, so the amaxes are the same whatever the length, and
 * the resumed history holds the newest of them. Growing keeps all of them
 * (here fewer steps than either length), so the scale is the same at once;
 * shrinking keeps the newest and the scales meet at the next update. */
static void
test_checkpoint_history_len (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = tmp_dir ();
  g_autoptr(MixprecEngine) saved = build_with_history (16);
  const guint lens[] = { 32, 3 };

  steps (saved, 0, 6);
  g_assert_true (mixprec_engine_save_checkpoint (saved, dir, &error));
  g_assert_no_error (error);
  for (guint l = 0; l < G_N_ELEMENTS (lens); l++)
    {
      g_autoptr(MixprecEngine) resumed = build_with_history (lens[l]);
      g_autoptr(MixprecEngine) from_start = build_with_history (lens[l]);

      g_assert_true (mixprec_engine_load_checkpoint (resumed, dir, &error));
      g_assert_no_error (error);
      steps (from_start, 0, 6);
      for (guint k = 6; k < 8; k++)
        {
          for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
            {
              MixprecFp8Scaling *a = mixprec_param_get_fp8_scaling (mixprec_engine_get_param (resumed, fp8_names[i]));
              MixprecFp8Scaling *b = mixprec_param_get_fp8_scaling (mixprec_engine_get_param (from_start, fp8_names[i]));
              guint na = 0, nb = 0;
              const gfloat *ha = mixprec_fp8_scaling_get_amax_history (a, &na);
              const gfloat *hb = mixprec_fp8_scaling_get_amax_history (b, &nb);

              g_assert_cmpuint (na, ==, lens[l]);
              g_assert_cmpmem (ha, na * sizeof (gfloat), hb, nb * sizeof (gfloat));
              if (lens[l] > 16 || k > 6)
                g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (a), ==, mixprec_fp8_scaling_get_scale (b));
            }
          steps (resumed, k, k + 1);
          steps (from_start, k, k + 1);
        }
    }
  remove_tree (dir);
}

/* A checkpoint of the cpu engine loaded into an engine on a device: the
 * scalings restored and the FP8 copies cast on the device from the loaded
 * masters are those of the cpu engine, and so are the next steps'. */
static void
test_device_checkpoint (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = NULL;
  g_autoptr(_MixprecDevice) device = NULL;
  g_autoptr(MixprecEngine) cpu = NULL, dev = NULL;

  device = open_device_or_skip ();
  if (device == NULL)
    return;
  dir = tmp_dir ();
  cpu = build ("delayed", "bf16");
  dev = build_on ("delayed", "bf16", device);
  for (guint k = 0; k < 3; k++)
    {
      g_autoptr(MixprecStepResult) r = step (cpu, k, FALSE);

      g_assert_true (r->applied);
    }
  g_assert_true (mixprec_engine_save_checkpoint (cpu, dir, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (dev, dir, &error));
  g_assert_no_error (error);
  for (guint k = 3; k < 6; k++)
    {
      for (guint i = 0; i < G_N_ELEMENTS (fp8_names); i++)
        {
          MixprecParam *pa = mixprec_engine_get_param (cpu, fp8_names[i]);
          MixprecParam *pb = mixprec_engine_get_param (dev, fp8_names[i]);
          g_autoptr(GVariant) sa = mixprec_fp8_scaling_save_state (mixprec_param_get_fp8_scaling (pa));
          g_autoptr(GVariant) sb = mixprec_fp8_scaling_save_state (mixprec_param_get_fp8_scaling (pb));
          g_autoptr(GBytes) da = mixprec_param_get_fp8 (pa, &error);
          g_autoptr(GBytes) db = mixprec_param_get_fp8 (pb, &error);

          g_assert_no_error (error);
          g_assert_true (g_variant_equal (sa, sb));
          assert_same_bytes (da, db);
        }
      {
        g_autoptr(MixprecStepResult) ra = step (cpu, k, FALSE);
        g_autoptr(MixprecStepResult) rb = step (dev, k, FALSE);

        g_assert_true (ra->applied && rb->applied);
      }
    }
  remove_tree (dir);
}

/* On a device the cast covers whole parameters: with the masters
 * offloaded to the host registering an fp8 parameter fails naming the
 * parameter, the device and the reason. */
static void
test_device_offloaded (void)
{
  g_autoptr(MixprecEngine) engine = offloaded_engine ("hostdev");
  g_autoptr(GError) error = NULL;

  if (engine == NULL)
    return;
  error = register_fp8_fails (engine);
  g_assert_nonnull (strstr (error->message, "'hostdev'"));
  g_assert_nonnull (strstr (error->message, "offloaded"));
}

int
main (int argc, char **argv)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *path = NULL;

  g_test_init (&argc, &argv, NULL);
  /* Before the default registry exists: the hostdev plugin sits beside the
   * build's own plugins. */
  if (top != NULL)
    {
      path = g_strdup_printf ("%s/plugins:%s/tests/device-plugins", top, top);
      g_setenv ("MIXPREC_PLUGIN_PATH", path, TRUE);
    }
  /* On another device than hostdev only the cases that compare it with
   * the cpu engine: the rest would repeat the hostdev run. */
  if (on_hostdev ())
    {
      g_test_add_func ("/fp8-engine/delayed", test_delayed);
      g_test_add_func ("/fp8-engine/current", test_current);
      g_test_add_func ("/fp8-engine/mx", test_mx);
      g_test_add_func ("/fp8-engine/skipped-step", test_skipped_step);
      g_test_add_func ("/fp8-engine/memory", test_memory);
      g_test_add_func ("/fp8-engine/checkpoint", test_checkpoint);
      g_test_add_func ("/fp8-engine/checkpoint-history-len", test_checkpoint_history_len);
    }
  g_test_add_func ("/fp8-engine/device/delayed", test_device_delayed);
  g_test_add_func ("/fp8-engine/device/delayed-fp16", test_device_delayed_fp16);
  g_test_add_func ("/fp8-engine/device/current", test_device_current);
  g_test_add_func ("/fp8-engine/device/mx", test_device_mx);
  if (on_hostdev ())
    {
      g_test_add_data_func ("/fp8-engine/device/old-revision-1", "hostdev-v1", test_old_device);
      g_test_add_data_func ("/fp8-engine/device/old-revision-2", "hostdev-v2", test_old_device);
      g_test_add_func ("/fp8-engine/device/offloaded", test_device_offloaded);
    }
  g_test_add_func ("/fp8-engine/device/checkpoint", test_device_checkpoint);
  return g_test_run ();
}
