/* test-offload-ranks.c — ZeRO-Offload across ranks on the "hostdev" test
 * device (host memory the engine treats as a device's, with comm-ucx
 * registered for it by the test plugin). Every rank runs the same
 * training with the optimizer offloaded and without: the gradients are
 * reduce-scattered and the working copies all-gathered in device memory
 * either way, so the step results, masters and working copies must agree
 * bit for bit, and across the ranks. Checkpoints of either kind resume
 * the other. The DeepSpeed templates of the real-config corpus that
 * offload the optimizer build an engine and step on these ranks. Children
 * are this binary re-executed with the rank variables set; each runs every
 * case on one communicator.
 *
 * With MIXPREC_TEST_DEVICE=cuda (tests/test-offload-ranks-cuda.sh) the
 * same runs on one GPU per rank over the GPU's communicator (NCCL),
 * skipped where there are fewer GPUs than ranks. */
#include <math.h>
#include <string.h>

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "multiproc.h"

#define TIMEOUT_MS 20000

/* The device the ranks run on, and this rank's (children). */
static _MixprecDevice *rank_device;

static const gchar *
device_under_test (void)
{
  const gchar *name = g_getenv ("MIXPREC_TEST_DEVICE");

  return name != NULL && name[0] != '\0' ? name : "hostdev";
}
#define STEPS 4
#define GAS 2

typedef struct {
  const gchar *mode;         /* "fp16", "bf16" */
  guint stage;
  gint overflow_step;        /* -1, or the step whose micro-batch 1 overflows */
  gboolean param;            /* offloaded, offload_param too (ZeRO-3) */
} Case;

static const Case cases[] = {
  { "fp16", 1, 1, FALSE },
  { "fp16", 2, 1, FALSE },
  { "fp16", 3, 1, FALSE },
  { "fp16", 3, 1, TRUE },
  { "bf16", 0, -1, FALSE },
  { "bf16", 2, -1, FALSE },
  { "bf16", 3, -1, FALSE },
  { "bf16", 3, -1, TRUE },
};

/* Matrices in one group (two small ones persistent under ZeRO-3, one
 * partitioned) and a vector in a group of its own (not decayed). */
static const struct { const gchar *name; guint64 rows, cols; } model[] = {
  { "w1", 3000, 5 }, { "w2", 4100, 2 }, { "w3", 300, 400 }, { "b1", 1001, 0 },
};

static guint64
numel_of (guint p)
{
  return model[p].rows * MAX (model[p].cols, 1);
}

static gchar *
config_json (const Case *c, gboolean offload)
{
  return g_strdup_printf ("{%s \"mixprec\": {\"device\": \"cuda\"},"
                          " \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": 3000,"
                          "  \"allgather_bucket_size\": 3000%s%s},"
                          " \"gradient_accumulation_steps\": %u, \"gradient_clipping\": 1.0,"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
                          "   \"weight_decay\": 0.1}},"
                          " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 3}}}",
                          g_str_equal (c->mode, "fp16")
                          ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"hysteresis\": 1},"
                          : "\"bf16\": {\"enabled\": true},",
                          c->stage,
                          offload ? ", \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}" : "",
                          offload && c->param ? ", \"offload_param\": {\"device\": \"cpu\", \"pin_memory\": true}" : "",
                          GAS);
}

/* The config says "cuda" (the devices a config knows); the engine runs
 * on this rank's device (hostdev unless told), with the communicator made
 * for it on its stream. */
static MixprecEngine *
new_engine (MixprecConfig *config, MixprecComm *comm, GError **error)
{
  return _mixprec_engine_new_internal (config, rank_device, comm, NULL, FALSE, error);
}

static MixprecEngine *
build_engine (const Case *c, gboolean offload, MixprecComm *comm)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = config_json (c, offload);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = new_engine (config, comm, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (engine->offload, ==, offload);
  g_assert_cmpuint (engine->offload_param, ==, offload && c->param);
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint64 n = numel_of (p);
      guint64 shape[2] = { model[p].rows, model[p].cols };
      g_autofree gfloat *init = g_new (gfloat, n);
      g_autoptr(GBytes) bytes = NULL;

      for (guint64 i = 0; i < n; i++)
        init[i] = (gfloat) cos (0.1 * (gdouble) i + p) * 0.5f;
      bytes = g_bytes_new (init, n * sizeof (gfloat));
      g_assert_nonnull (mixprec_engine_register_param (engine, model[p].name, shape,
                                                       model[p].cols ? 2 : 1, "Linear",
                                                       MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_no_error (error);
    }
  g_assert_true (mixprec_engine_prepare (engine, &error));
  g_assert_no_error (error);
  /* Buckets of 1000 elements: every rank's shard crosses several, so the
   * two host buffers alternate (the default holds millions). */
  for (guint j = 0; offload && j < engine->groups->len; j++)
    {
      Group *g = g_ptr_array_index (engine->groups, j);

      g->offload_elements = MIN (g->offload_elements, 1000);
    }
  return engine;
}

/* The gradient of global micro-batch m at step k: of both signs and
 * several magnitudes, not finite where the case says. */
static gfloat
grad_value (const Case *c, guint step, guint m, guint p, guint64 i)
{
  if ((gint) step == c->overflow_step && m == 1 && i == 7)
    return INFINITY;
  return (gfloat) (sin (0.37 * m + 0.011 * (gdouble) i + 1.3 * step + p) *
                   exp2 ((gdouble) ((i * 7 + m) % 9) - 4.0));
}

/* Steps [first, last) of the case; each step's result appended to @results
 * (applied, loss scale, norm, clipping coefficient, next scale). */
static void
train (MixprecEngine *engine, const Case *c, guint first, guint last, GByteArray *results)
{
  guint rank = mixprec_engine_get_rank (engine), world = mixprec_engine_get_world_size (engine);

  for (guint k = first; k < last; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      g_autoptr(GError) error = NULL;
      gdouble row[5];

      for (guint local = 0; local < GAS; local++)
        {
          guint m = local * world + rank;

          for (guint p = 0; p < G_N_ELEMENTS (model); p++)
            {
              MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
              guint64 n = numel_of (p);
              gfloat *g = g_new (gfloat, n);
              gdouble scale = mixprec_engine_get_loss_scale (engine);
              g_autoptr(GBytes) bytes = NULL;

              /* ZeRO-3: the layer gathered for its passes (from host
               * memory under offload_param), then released. */
              if (c->stage == 3)
                {
                  g_assert_true (mixprec_engine_gather (engine, param, &error));
                  g_assert_no_error (error);
                  g_assert_nonnull (mixprec_param_get_working_data (param));
                  mixprec_engine_release (engine, param);
                }
              for (guint64 i = 0; i < n; i++)
                g[i] = (gfloat) (grad_value (c, k, m, p, i) * scale);
              bytes = g_bytes_new_take (g, n * sizeof (gfloat));
              g_assert_true (mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, &error));
              g_assert_no_error (error);
            }
          g_assert_true (mixprec_engine_backward_done (engine, &error));
          g_assert_no_error (error);
        }
      r = mixprec_engine_step (engine, &error);
      g_assert_no_error (error);
      g_assert_nonnull (r);
      g_assert_true (r->applied == ((gint) k != c->overflow_step));
      row[0] = r->applied;
      row[1] = r->loss_scale;
      row[2] = r->grad_norm;
      row[3] = r->clip_coef;
      row[4] = r->next_loss_scale;
      g_byte_array_append (results, (const guint8 *) row, sizeof row);
    }
}

/* Master weights then FP32 working copies of every parameter, whole. */
static GByteArray *
snapshot (MixprecEngine *engine)
{
  g_autoptr(GError) error = NULL;
  GByteArray *out = g_byte_array_new ();

  g_assert_true (mixprec_engine_gather_all (engine, &error));
  g_assert_no_error (error);
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, model[p].name, &error);
      g_autoptr(GBytes) working = NULL;

      g_assert_no_error (error);
      working = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (g_bytes_get_size (master), ==, numel_of (p) * sizeof (gfloat));
      g_byte_array_append (out, g_bytes_get_data (master, NULL), g_bytes_get_size (master));
      g_byte_array_append (out, g_bytes_get_data (working, NULL), g_bytes_get_size (working));
    }
  mixprec_engine_release_all (engine);
  return out;
}

static void
assert_same_bytes (const GByteArray *a, const GByteArray *b, const gchar *what)
{
  if (a->len != b->len || memcmp (a->data, b->data, a->len) != 0)
    g_error ("%s: the offloaded run differs from the all-device run", what);
}

static guint64
buffer_bytes (GPtrArray *buffers, const gchar *name, gboolean planned)
{
  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);

      if (g_str_equal (b->name, name))
        return planned ? b->planned_bytes : b->peak_bytes;
    }
  return 0;
}

/* What the offloading engine holds in host memory: the masters and
 * AdamW's two slots of the elements this rank steps (its shard from
 * ZeRO-1 on, every element at ZeRO-0), the pinned transfer buffers, and
 * nothing of theirs on the device; each as the memory plan predicts for
 * this world size. */
static void
assert_host_buffers (MixprecEngine *engine, const Case *c)
{
  g_autoptr(GPtrArray) held = mixprec_engine_list_buffers (engine);
  g_autofree gchar *json = config_json (c, TRUE);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, NULL);
  guint world = mixprec_engine_get_world_size (engine);
  static const gchar *const host[] = {
    "FP32 master weights (host)", "optimizer state (host)", "offload staging, pinned (host)",
    "working copies, pinned (host)"
  };
  gsize wsize = 2;             /* fp16 and bf16 */
  guint64 stepped = 0;

  g_assert_cmpuint (buffer_bytes (held, "FP32 master weights", FALSE), ==, 0);
  g_assert_cmpuint (buffer_bytes (held, "optimizer state", FALSE), ==, 0);
  for (guint j = 0; j < engine->groups->len; j++)
    {
      Group *g = g_ptr_array_index (engine->groups, j);

      g_assert_null (g->state_device);
      stepped += c->stage >= 1 ? g->local_n : g->padded;
    }
  g_assert_cmpuint (buffer_bytes (held, "FP32 master weights (host)", FALSE), ==, stepped * 4);
  g_assert_cmpuint (buffer_bytes (held, "optimizer state (host)", FALSE), ==, stepped * 8);
  /* offload_param: the working slices in host memory, none on the device. */
  g_assert_cmpuint (buffer_bytes (held, "working copies, pinned (host)", FALSE), ==,
                    c->param ? stepped * wsize : 0);
  if (c->param)
    g_assert_cmpuint (buffer_bytes (held, "working copies", FALSE), ==, 0);
  for (guint h = 0; h < G_N_ELEMENTS (host); h++)
    {
      guint64 planned = 0;

      /* The plan for the two groups the model forms. */
      for (guint k = 0; k < 2; k++)
        {
          guint64 sizes[G_N_ELEMENTS (model)];
          guint n = 0;
          g_autoptr(GPtrArray) plan = NULL;
          g_autoptr(GError) error = NULL;

          for (guint p = 0; p < G_N_ELEMENTS (model); p++)
            if ((model[p].cols == 0) == (k == 1))
              sizes[n++] = numel_of (p);
          plan = mixprec_memory_plan_list_buffers (config, sizes, n, world, 0, &error);
          g_assert_no_error (error);
          planned += buffer_bytes (plan, host[h], TRUE);
        }
      g_assert_cmpuint (planned > 0, ==, h < 3 || c->param);
      g_assert_cmpuint (buffer_bytes (held, host[h], TRUE), ==, planned);
      g_assert_cmpuint (buffer_bytes (held, host[h], FALSE), ==, planned);
    }
}

/* Writes @data to the parent's folder as NAME.RANK. */
static void
write_rank_file (const gchar *name, guint rank, const GByteArray *data)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *base = g_strdup_printf ("%s.%u", name, rank);
  g_autofree gchar *path = g_build_filename (g_getenv ("MIXPREC_TEST_OUT"), base, NULL);

  g_assert_true (g_file_set_contents (path, (const gchar *) data->data, data->len, &error));
  g_assert_no_error (error);
}

/* Every case, offloaded and not: the same results, masters and working
 * copies. */
static void
child_cases (MixprecComm *comm)
{
  guint rank = mixprec_comm_get_rank (comm);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const Case *c = &cases[i];
      g_autoptr(MixprecEngine) dev = build_engine (c, FALSE, comm);
      g_autoptr(MixprecEngine) off = build_engine (c, TRUE, comm);
      g_autoptr(GByteArray) rdev = g_byte_array_new ();
      g_autoptr(GByteArray) roff = g_byte_array_new ();
      g_autoptr(GByteArray) sdev = NULL;
      g_autoptr(GByteArray) soff = NULL;
      g_autofree gchar *name = g_strdup_printf ("%s-zero%u%s", c->mode, c->stage, c->param ? "-param" : "");

      train (dev, c, 0, STEPS, rdev);
      train (off, c, 0, STEPS, roff);
      assert_same_bytes (rdev, roff, "step results");
      sdev = snapshot (dev);
      soff = snapshot (off);
      assert_same_bytes (sdev, soff, "masters and working copies");
      assert_host_buffers (off, c);
      g_byte_array_append (sdev, rdev->data, rdev->len);
      write_rank_file (name, rank, sdev);
    }
}

static void
save (MixprecEngine *engine, const gchar *dir)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (mixprec_engine_save_checkpoint (engine, dir, &error));
  g_assert_no_error (error);
}

static MixprecEngine *
resume (const Case *c, gboolean offload, MixprecComm *comm, const gchar *dir)
{
  g_autoptr(GError) error = NULL;
  MixprecEngine *engine = build_engine (c, offload, comm);

  g_assert_true (mixprec_engine_load_checkpoint (engine, dir, &error));
  g_assert_no_error (error);
  return engine;
}

/* A checkpoint of the offloaded run resumes the all-device one, and the
 * other way round: the four runs end with the same bits. */
static void
child_checkpoint (MixprecComm *comm, const Case *c)
{
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  g_autofree gchar *dev_name = g_strdup_printf ("ckpt-device-zero%u%s", c->stage, c->param ? "-param" : "");
  g_autofree gchar *off_name = g_strdup_printf ("ckpt-offload-zero%u%s", c->stage, c->param ? "-param" : "");
  g_autofree gchar *from_dev = g_build_filename (out, dev_name, NULL);
  g_autofree gchar *from_off = g_build_filename (out, off_name, NULL);
  g_autoptr(MixprecEngine) dev = build_engine (c, FALSE, comm);
  g_autoptr(MixprecEngine) off = build_engine (c, TRUE, comm);
  g_autoptr(MixprecEngine) off_from_dev = NULL;
  g_autoptr(MixprecEngine) dev_from_off = NULL;
  GByteArray *r[4] = { g_byte_array_new (), g_byte_array_new (), g_byte_array_new (),
                       g_byte_array_new () };
  g_autoptr(GByteArray) s0 = NULL;
  g_autoptr(GByteArray) s1 = NULL;
  g_autoptr(GByteArray) s2 = NULL;
  g_autoptr(GByteArray) s3 = NULL;

  train (dev, c, 0, 2, r[0]);
  train (off, c, 0, 2, r[1]);
  save (dev, from_dev);
  save (off, from_off);
  g_byte_array_set_size (r[0], 0);
  g_byte_array_set_size (r[1], 0);
  off_from_dev = resume (c, TRUE, comm, from_dev);
  dev_from_off = resume (c, FALSE, comm, from_off);
  train (dev, c, 2, STEPS, r[0]);
  train (off, c, 2, STEPS, r[1]);
  train (off_from_dev, c, 2, STEPS, r[2]);
  train (dev_from_off, c, 2, STEPS, r[3]);
  for (guint i = 1; i < 4; i++)
    assert_same_bytes (r[0], r[i], "step results after resuming");
  s0 = snapshot (dev);
  s1 = snapshot (off);
  s2 = snapshot (off_from_dev);
  s3 = snapshot (dev_from_off);
  assert_same_bytes (s0, s1, "masters and working copies");
  assert_same_bytes (s0, s2, "offloaded run resumed from an all-device checkpoint");
  assert_same_bytes (s0, s3, "all-device run resumed from an offloaded checkpoint");
  for (guint i = 0; i < 4; i++)
    g_byte_array_unref (r[i]);
}

/* Every file of the corpus that offloads the optimizer to the CPU and
 * loads (EXPECTED: ok, or needs-override with the values given there),
 * on the hostdev device: an engine that offloads, and a step. */
static GString *
child_corpus (MixprecComm *comm)
{
  g_autofree gchar *dir = g_test_build_filename (G_TEST_DIST, "configs", "real", NULL);
  g_autofree gchar *expected = g_build_filename (dir, "EXPECTED", NULL);
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;
  g_autoptr(GError) error = NULL;
  GString *built = g_string_new (NULL);

  g_assert_true (g_file_get_contents (expected, &text, NULL, &error));
  g_assert_no_error (error);
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      g_auto(GStrv) f = g_strsplit (lines[i], " ", 3);
      g_autoptr(MixprecConfigLoader) loader = NULL;
      g_autoptr(MixprecConfig) config = NULL;
      g_autoptr(MixprecEngine) engine = NULL;
      g_autofree gchar *path = NULL;
      g_auto(GStrv) sets = NULL;
      guint64 shape[2] = { 64, 48 };
      g_autofree gfloat *init = g_new0 (gfloat, 64 * 48);
      g_autoptr(GBytes) values = NULL;
      g_autoptr(MixprecStepResult) r = NULL;
      MixprecParam *param;
      guint gas;

      if (f[0] == NULL || f[1] == NULL ||
          !(g_str_equal (f[1], "ok") || g_str_equal (f[1], "needs-override")))
        continue;
      path = g_build_filename (dir, f[0], NULL);
      loader = mixprec_config_loader_new ();
      sets = g_strsplit (f[2] != NULL ? f[2] : "", " ", -1);
      for (guint j = 0; sets[j] != NULL; j++)
        if (*sets[j] != '\0')
          {
            g_assert_true (mixprec_config_loader_parse_override (loader, sets[j], &error));
            g_assert_no_error (error);
          }
      g_assert_true (mixprec_config_loader_parse_override (loader, "mixprec.device=cuda", &error));
      g_assert_no_error (error);
      config = mixprec_config_loader_load_file (loader, path, &error);
      if (config == NULL && strstr (error->message, "zero_optimization.offload_param: parameter offload "
                                                    "needs zero_optimization.offload_optimizer") != NULL)
        {
          /* Parameters offloaded without the optimizer: refused on a
           * device, naming both keys. */
          g_assert_error (error, MIXPREC_CONFIG_ERROR, MIXPREC_CONFIG_ERROR_UNSUPPORTED);
          g_string_append_printf (built, "refused %s\n", f[0]);
          g_clear_error (&error);
          continue;
        }
      g_assert_no_error (error);
      if (!_mixprec_config_get_offload_optimizer (config))
        continue;
      engine = new_engine (config, comm, &error);
      if (engine == NULL)
        g_error ("%s: no engine on %u ranks: %s", f[0], mixprec_comm_get_world_size (comm), error->message);
      g_assert_true (engine->offload);
      g_assert_cmpuint (engine->offload_param, ==,
                        _mixprec_config_get_offload_param (config) && mixprec_config_get_zero_stage (config) == 3);
      param = mixprec_engine_register_param (engine, "w", shape, 2, "Linear", MIXPREC_DTYPE_FLOAT32,
                                             (values = g_bytes_new (init, 64 * 48 * sizeof (gfloat))), &error);
      g_assert_no_error (error);
      g_assert_nonnull (param);
      gas = mixprec_config_get_gradient_accumulation_steps (config);
      for (guint m = 0; m < MAX (gas, 1); m++)
        {
          g_autofree gfloat *g = g_new (gfloat, 64 * 48);
          g_autoptr(GBytes) bytes = NULL;

          for (guint j = 0; j < 64 * 48; j++)
            /* Small enough for fp16 at any scale the templates start at. */
            g[j] = (gfloat) (ldexp (sin (0.1 * j + m), -20) * mixprec_engine_get_loss_scale (engine));
          bytes = g_bytes_new (g, 64 * 48 * sizeof (gfloat));
          g_assert_true (mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, &error));
          g_assert_no_error (error);
          g_assert_true (mixprec_engine_backward_done (engine, &error));
          g_assert_no_error (error);
        }
      r = mixprec_engine_step (engine, &error);
      if (r == NULL)
        g_error ("%s: step on %u ranks: %s", f[0], mixprec_comm_get_world_size (comm), error->message);
      g_assert_true (r->applied);
      g_printerr ("rank %u: %s: offloaded engine built and stepped\n", mixprec_comm_get_rank (comm), f[0]);
      g_string_append_printf (built, "%s\n", f[0]);
    }
  return built;
}

static int
child_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_autoptr(MixprecComm) comm = NULL;
  g_autoptr(GByteArray) names = g_byte_array_new ();
  g_autoptr(GString) built = NULL;

  g_assert_no_error (error);
  /* hostdev is one device for every rank; a GPU per local rank. */
  rank_device = g_str_equal (device_under_test (), "hostdev")
                ? _mixprec_device_open ("hostdev", -1, &error)
                : _mixprec_device_open_local (device_under_test (), mixprec_bootstrap_get_local_rank (bootstrap),
                                              &error);
  g_assert_no_error (error);
  comm = _mixprec_comm_new_on_stream (bootstrap, "auto", device_under_test (), TIMEOUT_MS,
                                      _mixprec_device_get_stream (rank_device), &error);
  g_assert_no_error (error);
  child_cases (comm);
  child_checkpoint (comm, &cases[1]);
  child_checkpoint (comm, &cases[3]);
  built = child_corpus (comm);
  g_byte_array_append (names, (const guint8 *) built->str, built->len);
  write_rank_file ("corpus", mixprec_comm_get_rank (comm), names);
  g_clear_object (&comm);
  g_clear_pointer (&rank_device, _mixprec_device_unref);
  return 0;
}

/* Whether @world ranks can run here: a communicator for the device (for
 * hostdev, comm-ucx registered by its plugin), and for a real device one
 * of its own per rank. Sets @why when not. */
static gboolean
can_run (guint world, gchar **why)
{
  const gchar *name = device_under_test ();
  g_autolist(MixprecFeature) features = mixprec_registry_get_features (mixprec_registry_get_default ());
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) last = NULL;
  gboolean comm = FALSE;

  for (GList *l = features; l != NULL; l = l->next)
    comm |= mixprec_feature_get_kind (l->data) == MIXPREC_FEATURE_KIND_COMM &&
            g_str_equal (mixprec_feature_get_device (l->data), name) &&
            !g_str_equal (mixprec_feature_get_name (l->data), "local");
  if (!comm)
    {
      *why = g_strdup_printf ("no communicator for device '%s' in this build", name);
      return FALSE;
    }
  if (g_str_equal (name, "hostdev"))
    return TRUE;
  last = _mixprec_device_open (name, (gint) world - 1, &error);
  if (last == NULL)
    {
      *why = g_strdup_printf ("%u ranks need %u devices '%s': %s", world, world, name, error->message);
      return FALSE;
    }
  return TRUE;
}

static gchar *
read_rank_file (const gchar *dir, const gchar *name, guint rank, gsize *len)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *base = g_strdup_printf ("%s.%u", name, rank);
  g_autofree gchar *path = g_build_filename (dir, base, NULL);
  gchar *data = NULL;

  g_assert_true (g_file_get_contents (path, &data, len, &error));
  g_assert_no_error (error);
  return data;
}

static void
remove_tree (const gchar *path)
{
  g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
  const gchar *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree gchar *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR))
        remove_tree (child);
      else
        g_unlink (child);
    }
  g_rmdir (path);
}

/* @data: the world size. */
static void
test_offload_ranks (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data);
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = NULL;
  g_autofree gchar *out = NULL;
  g_autofree gint *status = g_new0 (gint, world);
  const gchar *env[] = { "MIXPREC_TEST_OFFLOAD_CHILD=1", NULL, NULL };
  g_autofree gchar *built0 = NULL;
  g_autofree gchar *why = NULL;

  if (!can_run (world, &why))
    {
      if (g_getenv ("MIXPREC_REQUIRE_GPU") != NULL && !g_str_equal (device_under_test (), "hostdev"))
        g_error ("%s", why);
      g_test_skip (why);
      return;
    }
  dir = g_dir_make_tmp ("mixprec-offload-ranks-XXXXXX", &error);
  g_assert_no_error (error);
  out = g_strdup_printf ("MIXPREC_TEST_OUT=%s", dir);
  env[1] = out;
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    g_assert_cmpint (status[r], ==, 0);

  /* Every rank ended with the same whole values and results. */
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree gchar *name = g_strdup_printf ("%s-zero%u%s", cases[i].mode, cases[i].stage,
                                                cases[i].param ? "-param" : "");
      gsize len0, len;
      g_autofree gchar *first = read_rank_file (dir, name, 0, &len0);

      for (guint r = 1; r < world; r++)
        {
          g_autofree gchar *other = read_rank_file (dir, name, r, &len);

          g_assert_cmpuint (len, ==, len0);
          g_assert_true (memcmp (first, other, len) == 0);
        }
    }
  /* Every rank built an engine from the same files, the accelerate
   * templates that offload (ZeRO-2 and ZeRO-3) among them. */
  for (guint r = 0; r < world; r++)
    {
      gsize len;
      gchar *built = read_rank_file (dir, "corpus", r, &len);

      if (r == 0)
        built0 = built;
      else
        {
          g_assert_cmpstr (built, ==, built0);
          g_free (built);
        }
    }
  g_test_message ("offloading corpus files built on %u ranks:\n%s", world, built0);
  g_assert_nonnull (strstr (built0, "accelerate-zero_stage2_offload_config.json\n"));
  g_assert_nonnull (strstr (built0, "accelerate-zero_stage3_offload_config.json\n"));
  g_assert_nonnull (strstr (built0, "refused accelerate-ds_config_zero3_model_only.json\n"));
  remove_tree (dir);
}

int
main (int argc, char **argv)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");

  /* Before the default registry exists: the hostdev plugin sits beside the
   * library's own plugins. */
  if (top != NULL)
    {
      g_autofree gchar *path = g_strdup_printf ("%s/plugins:%s/tests/device-plugins", top, top);

      g_setenv ("MIXPREC_PLUGIN_PATH", path, TRUE);
    }
  g_test_init (&argc, &argv, NULL);
  if (g_getenv ("MIXPREC_TEST_OFFLOAD_CHILD") != NULL)
    return child_main ();
  g_test_add_data_func ("/offload/ranks/2", GUINT_TO_POINTER (2), test_offload_ranks);
  g_test_add_data_func ("/offload/ranks/3", GUINT_TO_POINTER (3), test_offload_ranks);
  return g_test_run ();
}
