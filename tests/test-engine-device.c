/* test-engine-device.c — the engine with its buffers behind a device
 * plugin. The "hostdev" test plugin (tests/device-plugins/) keeps device
 * memory in the host and has kernels of its own, so this runs anywhere:
 * every training run on the device must give the cpu engine's results bit
 * for bit (masters, working copies, optimizer state, norms, scales), and
 * checkpoints must move between the two. The same comparison runs on a
 * GPU with device "cuda" when MIXPREC_TEST_DEVICE=cuda (and skips, with
 * the plugin's reason, where no GPU is usable). */
#include "config.h"

#include <dlfcn.h>
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "recomputable-values.h"

typedef struct {
  const gchar *name;
  const gchar *config;
  guint steps;
  gint overflow_step;          /* 1-based step whose gradient holds an inf; 0: none */
  gboolean offload_only;       /* a representation only the cpu optimizer keeps:
                                  compared offloaded against the cpu engine */
} Case;

static const Case cases[] = {
  { "fp16-adamw-clip",
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2,"
    " \"gradient_clipping\": 0.5,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
    " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2},"
    " \"mixprec\": {\"seed\": 7, \"fp32_modules\": [\"LayerNorm\"]}}", 5, 3 },
  { "bf16-adamw-stochastic",
    "{\"train_micro_batch_size_per_gpu\": 1,"
    " \"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}},"
    " \"bf16\": {\"enabled\": true},"
    " \"mixprec\": {\"seed\": 99, \"stochastic_rounding\": true}}", 4, 0 },
  { "bf16-sgd-accumulate-bf16",
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 3,"
    " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.05, \"momentum\": 0.9,"
    " \"nesterov\": true, \"weight_decay\": 0.001}},"
    " \"bf16\": {\"enabled\": true}, \"data_types\": {\"grad_accum_dtype\": \"bf16\"}}", 3, 0 },
  { "fp32-lion",
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 1.0,"
    " \"optimizer\": {\"type\": \"Lion\", \"params\": {\"lr\": 0.001, \"weight_decay\": 0.5}}}", 3, 0 },
  { "fp16-adamw-clip-gas1",
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 0.1,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
    " \"fp16\": {\"enabled\": true, \"initial_scale_power\": 10, \"loss_scale_window\": 2}}", 5, 2 },
  { "bf16-adamw-clip-gas2",
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2,"
    " \"gradient_clipping\": 0.5,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
    " \"bf16\": {\"enabled\": true}, \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"]}}", 4, 0 },
  { "bf16-no-master-adamw",
    "{\"train_micro_batch_size_per_gpu\": 1,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}},"
    " \"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true,"
    " \"bf16_optimizer_states\": true}}", 3, 0 },
  { "bf16-adamw-int8-int4",
    "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_clipping\": 0.5,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}},"
    " \"bf16\": {\"enabled\": true}, \"mixprec\": {\"optimizer_states\": {\"exp_avg\": \"int8\","
    " \"exp_avg_sq\": \"int4\", \"block_size\": 64}}}", 4, 0, TRUE },
};

static const struct {
  const gchar *name;
  const gchar *module;
  guint64 numel;
} params[] = {
  { "embed.weight", "Embedding", 5003 },
  { "block.ln.weight", "LayerNorm", 64 },
  { "block.fc.weight", "Linear", 4096 + 17 },
  { "block.fc.bias", "Linear", 1 },
};

static const gchar *
device_under_test (void)
{
  const gchar *name = g_getenv ("MIXPREC_TEST_DEVICE");

  return name != NULL && name[0] != '\0' ? name : "hostdev";
}

static MixprecEngine *
new_engine (const gchar *json, _MixprecDevice *device, GError **error)
{
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, error);

  if (config == NULL)
    return NULL;
  return _mixprec_engine_new_internal (config, device, NULL, NULL, FALSE, error);
}

static void
register_params (MixprecEngine *engine)
{
  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GBytes) init = values (1000 + (guint) p, params[p].numel, 1.0f);
      guint64 shape[1] = { params[p].numel };

      g_assert_nonnull (mixprec_engine_register_param (engine, params[p].name, shape, 1,
                                                       params[p].module, MIXPREC_DTYPE_FLOAT32,
                                                       init, &error));
      g_assert_no_error (error);
    }
}

/* One optimizer step of @c: gradients of the scaled loss, written through
 * the host API. */
static MixprecStepResult *
train_step (MixprecEngine *engine, const Case *c, guint step)
{
  g_autoptr(GError) error = NULL;
  MixprecStepResult *result;
  guint gas = mixprec_engine_get_gradient_accumulation_steps (engine);

  for (guint m = 0; m < gas; m++)
    {
      for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
        {
          MixprecParam *param = mixprec_engine_get_param (engine, params[p].name);
          gfloat scale = (gfloat) mixprec_engine_get_loss_scale (engine);
          g_autoptr(GBytes) grad = values (step * 131 + m * 17 + (guint) p, params[p].numel,
                                           scale * 0.01f);

          if ((gint) step == c->overflow_step && p == 2 && m == gas - 1)
            {
              gfloat *v = g_memdup2 (g_bytes_get_data (grad, NULL), params[p].numel * sizeof (gfloat));

              v[5] = INFINITY;
              g_bytes_unref (grad);
              grad = g_bytes_new_take (v, params[p].numel * sizeof (gfloat));
            }
          g_assert_true (mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, grad, &error));
          g_assert_no_error (error);
        }
      g_assert_true (mixprec_engine_backward_done (engine, &error));
      g_assert_no_error (error);
    }
  result = mixprec_engine_step (engine, &error);
  g_assert_no_error (error);
  return result;
}

static void
assert_same_bytes (GBytes *a, GBytes *b, const gchar *what, const gchar *param)
{
  gsize na, nb;
  const guint8 *pa = g_bytes_get_data (a, &na);
  const guint8 *pb = g_bytes_get_data (b, &nb);

  g_assert_cmpuint (na, ==, nb);
  for (gsize i = 0; i < na; i++)
    if (pa[i] != pb[i])
      g_error ("%s of %s differs at byte %" G_GSIZE_FORMAT ": 0x%02x on the cpu, 0x%02x on the device",
               what, param, i, pa[i], pb[i]);
}

/* Masters, working copies and every optimizer state slot, bitwise. */
static void
assert_same_state (MixprecEngine *cpu, MixprecEngine *dev)
{
  const gchar * const *slots;
  g_autoptr(GError) error = NULL;

  slots = mixprec_feature_get_state_names (_mixprec_engine_get_optimizer (cpu));
  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      MixprecParam *a = mixprec_engine_get_param (cpu, params[p].name);
      MixprecParam *b = mixprec_engine_get_param (dev, params[p].name);
      g_autoptr(GBytes) ma = mixprec_param_get_master (a, &error);
      g_autoptr(GBytes) mb = mixprec_param_get_master (b, &error);
      g_autoptr(GBytes) wa = mixprec_param_get_working (a, mixprec_param_get_working_dtype (a), &error);
      g_autoptr(GBytes) wb = mixprec_param_get_working (b, mixprec_param_get_working_dtype (b), &error);

      g_assert_no_error (error);
      assert_same_bytes (ma, mb, "the FP32 master", params[p].name);
      assert_same_bytes (wa, wb, "the working copy", params[p].name);
      for (guint s = 0; slots != NULL && slots[s] != NULL; s++)
        {
          g_autoptr(GBytes) sa = mixprec_engine_get_optimizer_state (cpu, params[p].name, slots[s], &error);
          g_autoptr(GBytes) sb = mixprec_engine_get_optimizer_state (dev, params[p].name, slots[s], &error);

          g_assert_no_error (error);
          assert_same_bytes (sa, sb, slots[s], params[p].name);
        }
    }
}

static void
assert_same_result (const MixprecStepResult *a, const MixprecStepResult *b)
{
  g_assert_cmpint (a->applied, ==, b->applied);
  g_assert_cmpfloat (a->loss_scale, ==, b->loss_scale);
  g_assert_cmpfloat (a->next_loss_scale, ==, b->next_loss_scale);
  g_assert_true (a->grad_norm == b->grad_norm || (isnan (a->grad_norm) && isnan (b->grad_norm)) ||
                 (isinf (a->grad_norm) && isinf (b->grad_norm)));
  g_assert_cmpfloat (a->clip_coef, ==, b->clip_coef);
  g_assert_cmpfloat (a->lr, ==, b->lr);
  g_assert_cmpuint (a->skipped_steps, ==, b->skipped_steps);
}

/* The device, or NULL after g_test_skip() with the plugin's reason. */
static _MixprecDevice *
open_device_or_skip (void)
{
  g_autoptr(GError) error = NULL;
  _MixprecDevice *device = _mixprec_device_open (device_under_test (), -1, &error);

  if (device == NULL)
    {
      if (g_getenv ("MIXPREC_REQUIRE_GPU") != NULL)
        g_error ("device %s required: %s", device_under_test (), error->message);
      g_test_skip (error->message);
    }
  return device;
}

/* Whether @error is the engine's refusal of a config that keeps optimizer
 * state in bfloat16 on a device whose optimizers speak revision 1 of the
 * optimizer ABI (float32 state only): a gap of that device's plugin, which
 * the test reports as incomplete rather than as a failure of the engine. */
static gboolean
is_state_dtype_gap (const GError *error)
{
  return error != NULL && g_error_matches (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_OPTIMIZER) &&
         g_str_has_prefix (error->message, "bf16.bf16_optimizer_states: ") &&
         strstr (error->message, "speaks optimizer ABI revision 1") != NULL;
}

static void
test_matches_cpu (gconstpointer data)
{
  const Case *c = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = open_device_or_skip ();
  g_autoptr(MixprecEngine) cpu = NULL;
  g_autoptr(MixprecEngine) dev = NULL;
  guint applied = 0;

  if (device == NULL)
    return;
  cpu = new_engine (c->config, NULL, &error);
  g_assert_no_error (error);
  dev = new_engine (c->config, device, &error);
  if (is_state_dtype_gap (error) && !g_str_equal (device_under_test (), "hostdev"))
    {
      g_test_incomplete (error->message);
      return;
    }
  g_assert_no_error (error);
  register_params (cpu);
  register_params (dev);
  assert_same_state (cpu, dev);

  for (guint step = 1; step <= c->steps; step++)
    {
      g_autoptr(MixprecStepResult) a = train_step (cpu, c, step);
      g_autoptr(MixprecStepResult) b = train_step (dev, c, step);

      assert_same_result (a, b);
      applied += a->applied;
      g_assert_cmpint (a->applied, ==, (gint) step != c->overflow_step);
      assert_same_state (cpu, dev);
    }
  g_assert_cmpuint (applied, ==, c->steps - (c->overflow_step > 0));
}

/* @json with zero_optimization.offload_optimizer "cpu" (pinned, as the
 * common DeepSpeed templates ask). */
static gchar *
offloaded (const gchar *json)
{
  return g_strdup_printf ("%.*s, \"zero_optimization\": {\"offload_optimizer\": "
                          "{\"device\": \"cpu\", \"pin_memory\": true}}}",
                          (int) strlen (json) - 1, json);
}

/* Buckets of @n elements, so that a few thousand parameters cross
 * several (the default is millions). */
static void
set_offload_buckets (MixprecEngine *engine, guint64 n)
{
  g_assert_true (mixprec_engine_prepare (engine, NULL));
  for (guint j = 0; j < engine->groups->len; j++)
    {
      Group *g = g_ptr_array_index (engine->groups, j);

      g_assert_cmpuint (g->offload_elements, >, 0);
      g->offload_elements = MIN (g->offload_elements, n);
    }
}

/* Masters and optimizer state in host memory, the rest on the device. */
static void
assert_offloaded_buffers (MixprecEngine *engine)
{
  g_autoptr(GPtrArray) buffers = mixprec_engine_list_buffers (engine);
  gboolean host_masters = FALSE, host_state = FALSE;

  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

      g_assert_cmpstr (b->name, !=, "FP32 master weights");
      g_assert_cmpstr (b->name, !=, "optimizer state");
      host_masters |= g_str_equal (b->name, "FP32 master weights (host)");
      host_state |= g_str_equal (b->name, "optimizer state (host)");
      g_assert_cmpuint (b->bytes, ==, b->planned_bytes);
    }
  g_assert_true (host_state);
  g_assert_true (host_masters == mixprec_param_has_master (mixprec_engine_get_param (engine, params[0].name)));
  for (guint j = 0; j < engine->groups->len; j++)
    {
      Group *g = g_ptr_array_index (engine->groups, j);

      g_assert_null (g->state_device);
      g_assert_nonnull (g->device);
    }
}

/* ZeRO-Offload: the same run with the masters and optimizer state in host
 * memory, stepped by the cpu optimizer bucket by bucket, gives the
 * all-device engine's bits (and the cpu engine's). */
/* Scaled state: the working copies, and every slot's codes and scales as
 * laid out in memory (the same layout on one process whatever the
 * device). */
static void
assert_same_representation (MixprecEngine *a, MixprecEngine *b)
{
  guint n_slots = mixprec_feature_get_n_state_slots (_mixprec_engine_get_optimizer (a));

  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      g_autoptr(GBytes) wa = mixprec_param_get_working (mixprec_engine_get_param (a, params[p].name),
                                                        MIXPREC_DTYPE_FLOAT32, NULL);
      g_autoptr(GBytes) wb = mixprec_param_get_working (mixprec_engine_get_param (b, params[p].name),
                                                        MIXPREC_DTYPE_FLOAT32, NULL);

      g_assert_true (g_bytes_equal (wa, wb));
    }
  g_assert_cmpuint (a->groups->len, ==, b->groups->len);
  for (guint i = 0; i < a->groups->len; i++)
    {
      Group *ga = g_ptr_array_index (a->groups, i), *gb = g_ptr_array_index (b->groups, i);
      guint64 n_scales = _mixprec_engine_n_scales (a, ga);

      g_assert_cmpuint (n_scales, ==, _mixprec_engine_n_scales (b, gb));
      for (guint k = 0; k < n_slots; k++)
        {
          MixprecPluginStateFormat f = a->repr.slots[k];
          guint64 bytes = _mixprec_engine_format_is_scaled (f)
                          ? _mixprec_engine_format_bytes (f, n_scales * a->repr.block_size)
                          : _mixprec_engine_format_bytes (f, ga->padded);

          g_assert_cmpmem (ga->states[k], bytes, gb->states[k], bytes);
          if (_mixprec_engine_format_is_scaled (f))
            g_assert_cmpmem (ga->state_scales[k], n_scales * 4, gb->state_scales[k], n_scales * 4);
        }
    }
}

static void
test_offload_matches (gconstpointer data)
{
  const Case *c = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = open_device_or_skip ();
  g_autofree gchar *json = offloaded (c->config);
  g_autoptr(MixprecEngine) cpu = NULL;
  g_autoptr(MixprecEngine) dev = NULL;
  g_autoptr(MixprecEngine) off = NULL;

  if (device == NULL)
    return;
  cpu = new_engine (c->config, NULL, &error);
  g_assert_no_error (error);
  if (c->offload_only)
    {
      off = new_engine (json, device, &error);
      g_assert_no_error (error);
      register_params (cpu);
      register_params (off);
      set_offload_buckets (off, 1024);
      assert_offloaded_buffers (off);
      for (guint step = 1; step <= c->steps; step++)
        {
          g_autoptr(MixprecStepResult) a = train_step (cpu, c, step);
          g_autoptr(MixprecStepResult) r = train_step (off, c, step);

          assert_same_result (a, r);
          assert_same_representation (cpu, off);
        }
      return;
    }
  dev = new_engine (c->config, device, &error);
  if (is_state_dtype_gap (error) && !g_str_equal (device_under_test (), "hostdev"))
    {
      g_test_incomplete (error->message);
      return;
    }
  g_assert_no_error (error);
  off = new_engine (json, device, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_feature_get_device (_mixprec_engine_get_optimizer (off)), ==, "cpu");
  register_params (cpu);
  register_params (dev);
  register_params (off);
  set_offload_buckets (off, 1000);
  assert_offloaded_buffers (off);
  assert_same_state (dev, off);

  for (guint step = 1; step <= c->steps; step++)
    {
      g_autoptr(MixprecStepResult) a = train_step (cpu, c, step);
      g_autoptr(MixprecStepResult) b = train_step (dev, c, step);
      g_autoptr(MixprecStepResult) r = train_step (off, c, step);

      assert_same_result (b, r);
      assert_same_result (a, r);
      g_assert_cmpint (r->applied, ==, (gint) step != c->overflow_step);
      assert_same_state (dev, off);
      assert_same_state (cpu, off);
    }
}

static void
remove_tree (const gchar *dir)
{
  g_autoptr(GDir) listing = g_dir_open (dir, 0, NULL);
  const gchar *name;

  while (listing != NULL && (name = g_dir_read_name (listing)) != NULL)
    {
      g_autofree gchar *path = g_build_filename (dir, name, NULL);

      if (g_file_test (path, G_FILE_TEST_IS_DIR))
        remove_tree (path);
      else
        g_unlink (path);
    }
  g_rmdir (dir);
}

/* Checkpoints of an offloading engine: saved, loaded by the all-device
 * engine and by another offloading one, and the other way round; every
 * run continues identically. */
static void
test_offload_checkpoint (void)
{
  const Case *c = &cases[0];
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = open_device_or_skip ();
  g_autofree gchar *json = offloaded (c->config);
  g_autofree gchar *dir = NULL;
  g_autofree gchar *from_off = NULL;
  g_autofree gchar *from_dev = NULL;
  g_autoptr(MixprecEngine) dev = NULL;
  g_autoptr(MixprecEngine) off = NULL;
  g_autoptr(MixprecEngine) dev2 = NULL;
  g_autoptr(MixprecEngine) off2 = NULL;
  g_autoptr(MixprecEngine) off3 = NULL;

  if (device == NULL)
    return;
  dir = g_dir_make_tmp ("mixprec-engine-offload-XXXXXX", &error);
  g_assert_no_error (error);
  from_off = g_build_filename (dir, "from-offload", NULL);
  from_dev = g_build_filename (dir, "from-device", NULL);

  dev = new_engine (c->config, device, &error);
  g_assert_no_error (error);
  off = new_engine (json, device, &error);
  g_assert_no_error (error);
  register_params (dev);
  register_params (off);
  for (guint step = 1; step <= 2; step++)
    {
      G_GNUC_UNUSED g_autoptr(MixprecStepResult) a = train_step (dev, c, step);
      G_GNUC_UNUSED g_autoptr(MixprecStepResult) b = train_step (off, c, step);
    }
  g_assert_true (mixprec_engine_save_checkpoint (off, from_off, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_save_checkpoint (dev, from_dev, &error));
  g_assert_no_error (error);

  dev2 = new_engine (c->config, device, &error);
  off2 = new_engine (json, device, &error);
  off3 = new_engine (json, device, &error);
  g_assert_no_error (error);
  register_params (dev2);
  register_params (off2);
  register_params (off3);
  g_assert_true (mixprec_engine_load_checkpoint (dev2, from_off, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (off2, from_dev, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (off3, from_off, &error));
  g_assert_no_error (error);
  assert_same_state (dev, off2);
  assert_same_state (dev, off3);
  assert_same_state (off, dev2);
  for (guint step = 3; step <= c->steps; step++)
    {
      g_autoptr(MixprecStepResult) a = train_step (dev, c, step);
      g_autoptr(MixprecStepResult) b = train_step (dev2, c, step);
      g_autoptr(MixprecStepResult) r = train_step (off2, c, step);
      g_autoptr(MixprecStepResult) q = train_step (off3, c, step);

      assert_same_result (a, b);
      assert_same_result (a, r);
      assert_same_result (a, q);
    }
  assert_same_state (dev, dev2);
  assert_same_state (dev, off2);
  assert_same_state (dev, off3);
  remove_tree (dir);
}

/* The plan of an offloading engine: masters and state in host memory, on
 * one process and, across ranks, each rank's partition of them (the
 * engine's own buffers across ranks: tests/test-offload-ranks.c). */
static void
test_offload_plan (void)
{
  g_autofree gchar *json = offloaded ("{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                                      " \"mixprec\": {\"device\": \"cuda\"}}");
  g_autofree gchar *json2 = g_strdup_printf ("%.*s, \"stage\": 2}}", (int) strlen (json) - 2, json);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecConfig) config2 = mixprec_config_new_from_data (json2, -1, &error);
  /* One unit, padded to a multiple of 2 ranks * 4096, halved. */
  guint64 part = (1000000 + 8191) / 8192 * 8192 / 2;
  guint found = 0;
  g_autoptr(GPtrArray) one = NULL;
  g_autoptr(GPtrArray) two = NULL;
  guint64 n = 1000000;

  g_assert_no_error (error);
  one = mixprec_memory_plan_list_buffers (config, &n, 1, 1, 0, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < one->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (one, i);

      if (g_str_equal (b->name, "FP32 master weights (host)"))
        g_assert_cmpuint (b->planned_bytes, ==, n * 4);
      else if (g_str_equal (b->name, "optimizer state (host)"))
        g_assert_cmpuint (b->planned_bytes, ==, n * 8);
      else if (g_str_equal (b->name, "offload staging, pinned (host)"))
        g_assert_cmpuint (b->planned_bytes, ==, 2 * n * (2 + 2));
      else
        g_assert_false (g_str_has_suffix (b->name, "(host)"));
    }
  g_assert_no_error (error);
  two = mixprec_memory_plan_list_buffers (config2, &n, 1, 2, 0, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < two->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (two, i);

      if (g_str_equal (b->name, "FP32 master weights (host)"))
        g_assert_cmpuint (b->planned_bytes, ==, part * 4);
      else if (g_str_equal (b->name, "optimizer state (host)"))
        g_assert_cmpuint (b->planned_bytes, ==, part * 8);
      else if (g_str_equal (b->name, "offload staging, pinned (host)"))
        /* FP32 accumulated gradients and bf16 working copies. */
        g_assert_cmpuint (b->planned_bytes, ==, 2 * part * (4 + 2));
      else
        {
          g_assert_false (g_str_has_suffix (b->name, "(host)"));
          continue;
        }
      found++;
    }
  g_assert_cmpuint (found, ==, 3);
}

/* The staging buffers the plan names: pinned when pin_memory is true (the
 * cuda plugin is of revision 2, and a plan for a device this machine
 * lacks takes pin_memory at its word), pageable when it is false; the
 * bytes are the same. (The config knows devices "cpu" and "cuda" only;
 * the engine's own report for a revision-1 device is checked below.) */
static void
test_offload_plan_pinned (void)
{
  static const struct {
    const gchar *device;
    gboolean pin;
    const gchar *staging;
  } rows[] = {
    { "cuda", TRUE, "offload staging, pinned (host)" },
    { "cuda", FALSE, "offload staging (host)" },
  };
  guint64 n = 300000;

  for (gsize r = 0; r < G_N_ELEMENTS (rows); r++)
    {
      g_autofree gchar *json =
        g_strdup_printf ("{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                         " \"mixprec\": {\"device\": \"%s\"}, \"zero_optimization\": {\"offload_optimizer\":"
                         " {\"device\": \"cpu\", \"pin_memory\": %s}}}",
                         rows[r].device, rows[r].pin ? "true" : "false");
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
      g_autoptr(GPtrArray) buffers = NULL;
      guint64 staging = 0;

      g_assert_no_error (error);
      buffers = mixprec_memory_plan_list_buffers (config, &n, 1, 1, 0, &error);
      g_assert_no_error (error);
      for (guint i = 0; i < buffers->len; i++)
        {
          MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

          if (g_str_has_prefix (b->name, "offload staging"))
            {
              g_assert_cmpstr (b->name, ==, rows[r].staging);
              staging += b->planned_bytes;
            }
        }
      /* Two buffers of bf16 gradients and two of bf16 working copies. */
      g_assert_cmpuint (staging, ==, 2 * n * (2 + 2));
    }
}

static gpointer
hostdev_symbol (const gchar *name)
{
  g_autofree gchar *file = g_build_filename (g_getenv ("MIXPREC_TOP_BUILDDIR"), "tests",
                                             "device-plugins", ".libs", "mixprec-test-hostdev.so", NULL);
  void *module = dlopen (file, RTLD_NOW | RTLD_NOLOAD);
  gpointer symbol;

  g_assert_nonnull (module);
  symbol = dlsym (module, name);
  g_assert_nonnull (symbol);
  /* The registry keeps the module loaded; this drops our reference only. */
  dlclose (module);
  return symbol;
}

/* The bytes of the buffer named @name in @engine's list (0 if absent). */
static guint64
buffer_bytes (MixprecEngine *engine, const gchar *name)
{
  g_autoptr(GPtrArray) buffers = mixprec_engine_list_buffers (engine);

  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

      if (g_str_equal (b->name, name))
        {
          g_assert_cmpuint (b->bytes, ==, b->planned_bytes);
          return b->bytes;
        }
    }
  return 0;
}

/* offload_param on one process: the engine partitions nothing, so it
 * cannot keep the parameters in host memory between uses as DeepSpeed's
 * one-GPU ZeRO-3 does; the engine refuses it naming the key, the device
 * and what to do, and offload_optimizer alone is accepted (parameter
 * offload across ranks: test-offload-ranks.c). */
static void
test_offload_param_one_process (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = open_device_or_skip ();
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GPtrArray) buffers = NULL;

  if (device == NULL)
    return;
  engine = new_engine ("{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                       " \"mixprec\": {\"device\": \"cuda\"}, \"zero_optimization\": {\"stage\": 3,"
                       " \"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}}}",
                       device, &error);
  g_assert_null (engine);
  g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
  g_assert_nonnull (strstr (error->message, "zero_optimization.offload_param"));
  g_assert_nonnull (strstr (error->message, "one process"));
  g_assert_nonnull (strstr (error->message, _mixprec_device_get_name (device)));
  g_clear_error (&error);

  engine = new_engine ("{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true},"
                       " \"mixprec\": {\"device\": \"cuda\"}, \"zero_optimization\": {\"stage\": 3,"
                       " \"offload_optimizer\": {\"device\": \"cpu\"}}}",
                       device, &error);
  g_assert_no_error (error);
  g_assert_true (engine->offload);
  g_assert_false (engine->offload_param);
  register_params (engine);
  buffers = mixprec_engine_list_buffers (engine);
  for (guint i = 0; i < buffers->len; i++)
    g_assert_false (g_str_has_prefix (((MixprecMemoryBuffer *) g_ptr_array_index (buffers, i))->name,
                                      "working copies,"));
  g_assert_cmpuint (buffer_bytes (engine, "working copies"), >, 0);
  g_assert_cmpuint (buffer_bytes (engine, "working copies (host)"), ==, 0);
}

/* pin_memory on a device of revision 2: the four staging buffers of each
 * group come from the plugin's pinned memory (and go back to it at
 * finalize), every transfer of every step goes through them on one
 * thread, the engine's own, not the caller's, and the run is the
 * all-device engine's bit for bit. */
static void
test_offload_pinned (void)
{
  const Case *c = &cases[0];
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = _mixprec_device_open ("hostdev", -1, &error);
  g_autofree gchar *json = offloaded (c->config);
  unsigned *live = hostdev_symbol ("mixprec_test_hostdev_live_pinned");
  gsize *bytes = hostdev_symbol ("mixprec_test_hostdev_pinned_bytes");
  unsigned *copies = hostdev_symbol ("mixprec_test_hostdev_pinned_copies");
  unsigned *threads = hostdev_symbol ("mixprec_test_hostdev_pinned_copy_threads");
  unsigned *by_opener = hostdev_symbol ("mixprec_test_hostdev_pinned_copies_by_opener");
  g_autoptr(MixprecFeature) feature = NULL;

  g_assert_no_error (error);
  feature = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                           "hostdev", "hostdev", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (feature), ==, 3);
  g_assert_cmpuint (*live, ==, 0);
  *threads = 0;
  *copies = 0;
  *by_opener = 0;
  {
    g_autoptr(MixprecEngine) dev = new_engine (c->config, device, &error);
    g_autoptr(MixprecEngine) off = new_engine (json, device, &error);
    guint64 pinned;

    g_assert_no_error (error);
    register_params (dev);
    register_params (off);
    set_offload_buckets (off, 1000);
    pinned = buffer_bytes (off, "offload staging, pinned (host)");
    g_assert_cmpuint (pinned, >, 0);
    g_assert_cmpuint (buffer_bytes (off, "offload staging (host)"), ==, 0);
    g_assert_cmpuint (*live, ==, 4 * off->groups->len);
    g_assert_cmpuint (*bytes, ==, pinned);
    for (guint step = 1; step <= c->steps; step++)
      {
        g_autoptr(MixprecStepResult) a = train_step (dev, c, step);
        g_autoptr(MixprecStepResult) r = train_step (off, c, step);
        unsigned before = *copies;

        assert_same_result (a, r);
        assert_same_state (dev, off);
        /* Reading the state back made no pinned copy. */
        g_assert_cmpuint (*copies, ==, before);
      }
    /* Buckets of 1000 elements: each step moved several both ways. */
    g_assert_cmpuint (*copies, >=, 2 * c->steps * (5003 / 1000 + 1));
    g_assert_cmpuint (*threads, ==, 1);
    g_assert_cmpuint (*by_opener, ==, 0);
  }
  g_assert_cmpuint (*live, ==, 0);
  g_assert_cmpuint (*bytes, ==, 0);
}

/* An old device plugin (revision 1, no pinned memory): pin_memory falls
 * back to pageable staging with a warning naming the key and the device,
 * and the run is still the all-device engine's bit for bit. pin_memory
 * false on a revision-2 device asks for nothing and warns of nothing. */
static void
test_offload_pageable (void)
{
  const Case *c = &cases[1];
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) old = _mixprec_device_open ("hostdev-v1", -1, &error);
  g_autoptr(_MixprecDevice) device = _mixprec_device_open ("hostdev", -1, &error);
  g_autofree gchar *json = offloaded (c->config);
  g_autofree gchar *unpinned = NULL;
  unsigned *live = hostdev_symbol ("mixprec_test_hostdev_live_pinned");
  unsigned *copies = hostdev_symbol ("mixprec_test_hostdev_pinned_copies");
  g_autoptr(MixprecFeature) feature = NULL;
  g_autoptr(MixprecEngine) dev = NULL;
  g_autoptr(MixprecEngine) off = NULL;
  g_autoptr(MixprecEngine) off2 = NULL;
  gchar *at;

  g_assert_no_error (error);
  feature = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                           "hostdev-v1", "hostdev-v1", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (feature), ==, 1);
  *copies = 0;

  g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING,
                         "zero_optimization.offload_optimizer.pin_memory: device 'hostdev-v1' comes "
                         "from a plugin of device revision 1, which has no pinned host memory; the "
                         "offloaded buffers are pageable");
  off = new_engine (json, old, &error);
  g_test_assert_expected_messages ();
  g_assert_no_error (error);
  unpinned = g_strdup (json);
  at = strstr (unpinned, "\"pin_memory\": true");
  g_assert_nonnull (at);
  memcpy (at, "\"pin_memory\":false", strlen ("\"pin_memory\":false"));
  /* No warning expected: an unexpected one fails the test. */
  off2 = new_engine (unpinned, device, &error);
  g_assert_no_error (error);
  dev = new_engine (c->config, device, &error);
  g_assert_no_error (error);
  register_params (dev);
  register_params (off);
  register_params (off2);
  set_offload_buckets (off, 1000);
  set_offload_buckets (off2, 1000);
  g_assert_cmpuint (buffer_bytes (off, "offload staging (host)"), >, 0);
  g_assert_cmpuint (buffer_bytes (off, "offload staging, pinned (host)"), ==, 0);
  g_assert_cmpuint (buffer_bytes (off2, "offload staging (host)"), >, 0);
  g_assert_cmpuint (buffer_bytes (off2, "offload staging, pinned (host)"), ==, 0);
  g_assert_cmpuint (*live, ==, 0);
  for (guint step = 1; step <= c->steps; step++)
    {
      g_autoptr(MixprecStepResult) a = train_step (dev, c, step);
      g_autoptr(MixprecStepResult) r = train_step (off, c, step);
      g_autoptr(MixprecStepResult) q = train_step (off2, c, step);

      assert_same_result (a, r);
      assert_same_result (a, q);
      assert_same_state (dev, off);
      assert_same_state (dev, off2);
    }
  g_assert_cmpuint (*copies, ==, 0);
}

/* What register_device_v3 refuses: a V3 vtable without one of the float8
 * casts (or the pinned memory functions under it), or with reserved space
 * of either revision in use; a whole one ("hostdev") passes, and the
 * registry says revision 3 for it and 2 for "hostdev-v2". */
static void
test_device_v3_check (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFeature) feature =
    mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                   "hostdev", "hostdev", &error);
  g_autoptr(MixprecFeature) old = NULL;
  MixprecDeviceV3 v3;

  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (feature), ==, 3);
  old = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                       "hostdev-v2", "hostdev-v2", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (old), ==, 2);
  g_assert_null (_mixprec_feature_get_device_vtable_v3 (old)->fp8_cast);
  g_assert_null (_mixprec_feature_get_device_vtable_v3 (old)->mx_cast);

  v3 = *_mixprec_feature_get_device_vtable_v3 (feature);
  g_assert_true (_mixprec_device_v3_vtable_check (&v3, &error));
  g_assert_no_error (error);

  v3.mx_cast = NULL;
  g_assert_false (_mixprec_device_v3_vtable_check (&v3, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "device 'hostdev': its mx_cast function is NULL; "
                                            "a device implements every function of MixprecDeviceV3"));
  g_clear_error (&error);

  v3 = *_mixprec_feature_get_device_vtable_v3 (feature);
  v3.base.host_alloc = NULL;
  g_assert_false (_mixprec_device_v3_vtable_check (&v3, &error));
  g_assert_nonnull (strstr (error->message, "its host_alloc function is NULL"));
  g_clear_error (&error);

  v3 = *_mixprec_feature_get_device_vtable_v3 (feature);
  v3.reserved[5] = &v3;
  g_assert_false (_mixprec_device_v3_vtable_check (&v3, &error));
  g_assert_nonnull (strstr (error->message, "reserved fields are not zero"));
  g_clear_error (&error);

  v3 = *_mixprec_feature_get_device_vtable_v3 (feature);
  v3.base.reserved[0] = &v3;
  g_assert_false (_mixprec_device_v3_vtable_check (&v3, &error));
  g_assert_nonnull (strstr (error->message, "reserved fields are not zero"));
  g_clear_error (&error);

  g_assert_false (_mixprec_device_v3_vtable_check (NULL, &error));
  g_assert_nonnull (strstr (error->message, "the device vtable is NULL"));
}

/* What register_device_v2 refuses: a V2 vtable without one of the pinned
 * memory functions, or with reserved space in use; a whole one passes. */
static void
test_device_v2_check (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFeature) feature =
    mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                   "hostdev", "hostdev", &error);
  MixprecDeviceV2 v2;

  g_assert_no_error (error);
  v2 = *_mixprec_feature_get_device_vtable_v2 (feature);
  g_assert_true (_mixprec_device_v2_vtable_check (&v2, &error));
  g_assert_no_error (error);

  v2.host_free = NULL;
  g_assert_false (_mixprec_device_v2_vtable_check (&v2, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "device 'hostdev': its host_free function is NULL; "
                                            "a device implements every function of MixprecDeviceV2"));
  g_clear_error (&error);

  v2 = *_mixprec_feature_get_device_vtable_v2 (feature);
  v2.reserved[3] = &v2;
  g_assert_false (_mixprec_device_v2_vtable_check (&v2, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "reserved fields are not zero"));
  g_clear_error (&error);

  g_assert_false (_mixprec_device_v2_vtable_check (NULL, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "the device vtable is NULL"));
}

/* A checkpoint saved on the device loads on the cpu and the other way
 * round; both continue identically. */
static void
test_checkpoint (void)
{
  const Case *c = &cases[0];
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = open_device_or_skip ();
  g_autofree gchar *dir = NULL;
  g_autofree gchar *from_dev = NULL;
  g_autofree gchar *from_cpu = NULL;
  g_autoptr(MixprecEngine) cpu = NULL;
  g_autoptr(MixprecEngine) dev = NULL;
  g_autoptr(MixprecEngine) cpu2 = NULL;
  g_autoptr(MixprecEngine) dev2 = NULL;

  if (device == NULL)
    return;
  dir = g_dir_make_tmp ("mixprec-engine-device-XXXXXX", &error);
  g_assert_no_error (error);
  from_dev = g_build_filename (dir, "from-device", NULL);
  from_cpu = g_build_filename (dir, "from-cpu", NULL);

  cpu = new_engine (c->config, NULL, &error);
  dev = new_engine (c->config, device, &error);
  g_assert_no_error (error);
  register_params (cpu);
  register_params (dev);
  for (guint step = 1; step <= 2; step++)
    {
      G_GNUC_UNUSED g_autoptr(MixprecStepResult) a = train_step (cpu, c, step);
      G_GNUC_UNUSED g_autoptr(MixprecStepResult) b = train_step (dev, c, step);
    }
  g_assert_true (mixprec_engine_save_checkpoint (dev, from_dev, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_save_checkpoint (cpu, from_cpu, &error));
  g_assert_no_error (error);

  /* Swapped: the cpu resumes the device's run and the device the cpu's. */
  cpu2 = new_engine (c->config, NULL, &error);
  dev2 = new_engine (c->config, device, &error);
  g_assert_no_error (error);
  register_params (cpu2);
  register_params (dev2);
  g_assert_true (mixprec_engine_load_checkpoint (cpu2, from_dev, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_load_checkpoint (dev2, from_cpu, &error));
  g_assert_no_error (error);
  assert_same_state (cpu, dev2);
  assert_same_state (cpu2, dev);
  for (guint step = 3; step <= c->steps; step++)
    {
      g_autoptr(MixprecStepResult) a = train_step (cpu2, c, step);
      g_autoptr(MixprecStepResult) b = train_step (dev2, c, step);
      g_autoptr(MixprecStepResult) r = train_step (cpu, c, step);

      assert_same_result (a, b);
      assert_same_result (a, r);
    }
  assert_same_state (cpu2, dev2);
  assert_same_state (cpu, dev2);

  for (const gchar *const *d = (const gchar *const[]) { from_dev, from_cpu, NULL }; *d != NULL; d++)
    {
      g_autoptr(GDir) listing = g_dir_open (*d, 0, NULL);
      const gchar *name;

      while (listing != NULL && (name = g_dir_read_name (listing)) != NULL)
        {
          g_autofree gchar *path = g_build_filename (*d, name, NULL);

          g_unlink (path);
        }
      g_rmdir (*d);
    }
  g_rmdir (dir);
}

/* What the engine refuses on a device, and how. */
static void
test_errors (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(MixprecComm) comm = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecFeature) feature = NULL;
  gint n_devices = 0;
  guint64 shape[1] = { 4 };
  gfloat w[4] = { 0 }, g[4] = { 0 };

  /* The public probe: usable, and then not, with the plugin's reason. */
  feature = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_DEVICE,
                                           "hostdev", "hostdev", &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_feature_get_device (feature), ==, "hostdev");
  g_assert_true (mixprec_feature_probe_device (feature, &n_devices, &error));
  g_assert_no_error (error);
  g_assert_cmpint (n_devices, ==, 1);
  g_setenv ("MIXPREC_TEST_HOSTDEV_ABSENT", "1", TRUE);
  g_assert_false (mixprec_feature_probe_device (feature, NULL, &error));
  g_unsetenv ("MIXPREC_TEST_HOSTDEV_ABSENT");
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
  g_assert_cmpstr (error->message, ==, "no hostdev device is usable: hostdevGetCount: no host device (test)");
  g_clear_error (&error);

  /* A plugin that finds no usable device says why, under the config key. */
  g_setenv ("MIXPREC_TEST_HOSTDEV_ABSENT", "1", TRUE);
  g_assert_null (_mixprec_device_open ("hostdev", -1, &error));
  g_unsetenv ("MIXPREC_TEST_HOSTDEV_ABSENT");
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
  g_assert_cmpstr (error->message, ==, "no hostdev device is usable: hostdevGetCount: no host device (test)");
  g_clear_error (&error);

  g_assert_null (_mixprec_device_open ("nonesuch", -1, &error));
  g_assert_nonnull (error);
  g_assert_nonnull (strstr (error->message, "nonesuch"));
  g_clear_error (&error);

  /* "cpu" is the host: no device, no error. */
  g_assert_null (_mixprec_device_open ("cpu", -1, &error));
  g_assert_no_error (error);

  device = _mixprec_device_open ("hostdev", -1, &error);
  g_assert_no_error (error);
  engine = new_engine (cases[1].config, device, &error);
  g_assert_no_error (error);
  g_assert_null (mixprec_engine_register_external (engine, "ext", shape, 1, "Linear", w, g, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM);
  g_assert_nonnull (strstr (error->message, "parameter 'ext': memory the caller owns can only be "
                                            "registered with mixprec.device \"cpu\""));
  g_clear_error (&error);

  /* A communicator of host memory cannot move device buffers. */
  comm = mixprec_comm_new (NULL, "local", "cpu", 0, &error);
  g_assert_no_error (error);
  config = mixprec_config_new_from_data (cases[1].config, -1, &error);
  g_assert_no_error (error);
  g_assert_null (_mixprec_engine_new_internal (config, device, comm, NULL, FALSE, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (error->message, ==, "the data-parallel communicator moves 'cpu' memory "
                   "(backend 'local'), but the engine's buffers are on device 'hostdev' "
                   "(mixprec.device); use a backend for 'hostdev' (e.g. ucx)");
}

/* Across ranks the engine opens the device of the bootstrap's local
 * rank, modulo the devices the plugin sees (mixprec-run and mpirun set no
 * LOCAL_RANK for the plugin to read). Two host devices here. */
static void
test_local_ordinal (void)
{
  if (g_test_subprocess ())
    {
      g_autofree gchar *file = g_build_filename (g_getenv ("MIXPREC_TOP_BUILDDIR"), "tests",
                                                 "device-plugins", ".libs",
                                                 "mixprec-test-hostdev.so", NULL);
      const guint local_rank[] = { 0, 1, 2, 5 };
      const gint expected[] = { 0, 1, 0, 1 };
      int *last;
      void *module;

      g_setenv ("MIXPREC_TEST_HOSTDEV_COUNT", "2", TRUE);
      for (guint i = 0; i < G_N_ELEMENTS (local_rank); i++)
        {
          g_autoptr(GError) error = NULL;
          G_GNUC_UNUSED g_autoptr(_MixprecDevice) device =
            _mixprec_device_open_local ("hostdev", local_rank[i], &error);

          g_assert_no_error (error);
          module = dlopen (file, RTLD_NOW | RTLD_NOLOAD);
          g_assert_nonnull (module);
          last = dlsym (module, "mixprec_test_hostdev_last_ordinal");
          g_assert_nonnull (last);
          g_assert_cmpint (*last, ==, expected[i]);
          dlclose (module);
        }
      g_assert_null (_mixprec_device_open_local ("cpu", 3, NULL));
      return;
    }
  g_test_trap_subprocess (NULL, 0, 0);
  g_test_trap_assert_passed ();
}

/* The device path really ran on the device: kernels and optimizer calls
 * went through the plugin, and every allocation was given back. */
static void
test_accounting (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = NULL;
  g_autofree gchar *file = g_build_filename (g_getenv ("MIXPREC_TOP_BUILDDIR"), "tests",
                                             "device-plugins", ".libs", "mixprec-test-hostdev.so", NULL);
  void *module;
  unsigned *live, *kernels, *steps;
  unsigned kernels_before, steps_before;

  device = _mixprec_device_open ("hostdev", -1, &error);
  g_assert_no_error (error);
  module = dlopen (file, RTLD_NOW | RTLD_NOLOAD);
  g_assert_nonnull (module);
  live = dlsym (module, "mixprec_test_hostdev_live_allocations");
  kernels = dlsym (module, "mixprec_test_hostdev_kernel_calls");
  steps = dlsym (module, "mixprec_test_hostdev_optimizer_calls");
  g_assert_true (live != NULL && kernels != NULL && steps != NULL);
  g_assert_cmpuint (*live, ==, 0);
  kernels_before = *kernels;
  steps_before = *steps;
  {
    g_autoptr(MixprecEngine) engine = new_engine (cases[0].config, device, &error);
    g_autoptr(MixprecStepResult) result = NULL;
    MixprecParam *param;

    g_assert_no_error (error);
    register_params (engine);
    result = train_step (engine, &cases[0], 1);
    g_assert_true (result->applied);
    g_assert_cmpuint (*live, >, 0);
    /* The pointers users write gradients to are the device's. */
    param = mixprec_engine_get_param (engine, params[0].name);
    g_assert_nonnull (mixprec_param_get_grad_data (param));
  }
  g_assert_cmpuint (*kernels, >, kernels_before);
  g_assert_cmpuint (*steps, >, steps_before);
  g_assert_cmpuint (*live, ==, 0);
  dlclose (module);
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

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree gchar *name = g_strdup_printf ("/engine-device/matches-cpu/%s", cases[i].name);

      if (!cases[i].offload_only)
        g_test_add_data_func (name, &cases[i], test_matches_cpu);
    }
  g_test_add_func ("/engine-device/checkpoint", test_checkpoint);
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree gchar *name = g_strdup_printf ("/engine-device/offload/matches/%s", cases[i].name);

      g_test_add_data_func (name, &cases[i], test_offload_matches);
    }
  g_test_add_func ("/engine-device/offload/checkpoint", test_offload_checkpoint);
  g_test_add_func ("/engine-device/offload/plan", test_offload_plan);
  g_test_add_func ("/engine-device/offload/param-one-process", test_offload_param_one_process);
  /* The error paths and the allocation counts are the hostdev plugin's. */
  if (g_str_equal (device_under_test (), "hostdev"))
    {
      g_test_add_func ("/engine-device/errors", test_errors);
      g_test_add_func ("/engine-device/accounting", test_accounting);
      g_test_add_func ("/engine-device/local-ordinal", test_local_ordinal);
      g_test_add_func ("/engine-device/offload/plan-pinned", test_offload_plan_pinned);
      g_test_add_func ("/engine-device/offload/pinned", test_offload_pinned);
      g_test_add_func ("/engine-device/offload/pageable", test_offload_pageable);
      g_test_add_func ("/engine-device/device-v2-check", test_device_v2_check);
      g_test_add_func ("/engine-device/device-v3-check", test_device_v3_check);
    }
  return g_test_run ();
}
