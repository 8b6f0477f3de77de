/* test-param-device-address.c — the buffers of an engine on a device, by
 * address: mixprec_param_get_device_address() says where each lies (the
 * plugin's DLPack device type and ordinal) and mixprec_param_reduce_grad_
 * device_address() takes a gradient that is already in device memory.
 *
 * The "hostdev" test plugin keeps its "device memory" in the host, so the
 * addresses can be read here: the working copy at the device address must
 * hold the bytes mixprec_param_get_working() copies out, and a run whose
 * gradients are handed over from device memory must end bit for bit where
 * the same run through host memory (mixprec_param_reduce_grad_bytes())
 * ends, on the device engine and on the cpu engine. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "recomputable-values.h"

#define CONFIG \
  "{\"train_micro_batch_size_per_gpu\": 1, \"gradient_accumulation_steps\": 2," \
  " \"gradient_clipping\": 0.5," \
  " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.1}}," \
  " \"bf16\": {\"enabled\": true}, \"mixprec\": {\"seed\": 3, \"fp32_modules\": [\"LayerNorm\"]}}"

#define N_STEPS 3

static const struct {
  const gchar *name;
  const gchar *module;
  guint64 numel;
} params[] = {
  { "embed.weight", "Embedding", 1031 },
  { "ln.weight", "LayerNorm", 64 },
  { "fc.bias", "Linear", 1 },
};

static MixprecEngine *
new_engine (_MixprecDevice *device)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (CONFIG, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = _mixprec_engine_new_internal (config, device, NULL, NULL, FALSE, &error);
  g_assert_no_error (error);
  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      g_autoptr(GBytes) init = values (100 + (guint) p, params[p].numel, 1.0f);
      guint64 shape[1] = { params[p].numel };

      g_assert_nonnull (mixprec_engine_register_param (engine, params[p].name, shape, 1,
                                                       params[p].module, MIXPREC_DTYPE_FLOAT32,
                                                       init, &error));
      g_assert_no_error (error);
    }
  return engine;
}

static _MixprecDevice *
open_hostdev (void)
{
  g_autoptr(GError) error = NULL;
  _MixprecDevice *device = _mixprec_device_open ("hostdev", -1, &error);

  g_assert_no_error (error);
  return device;
}

/* Trains @engine; gradients from device memory (@device_intake) or
 * through host bytes. */
static void
train (MixprecEngine *engine, _MixprecDevice *device, gboolean device_intake)
{
  g_autoptr(GError) error = NULL;

  for (guint step = 1; step <= N_STEPS; step++)
    {
      g_autoptr(MixprecStepResult) result = NULL;

      for (guint m = 0; m < 2; m++)
        {
          for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
            {
              MixprecParam *param = mixprec_engine_get_param (engine, params[p].name);
              g_autoptr(GBytes) grad = values (step * 31 + m * 7 + (guint) p, params[p].numel, 0.05f);
              gsize bytes = g_bytes_get_size (grad);

              if (device_intake)
                {
                  gpointer on_device = _mixprec_device_alloc (device, bytes, "test gradient", &error);

                  g_assert_no_error (error);
                  g_assert_true (_mixprec_device_copy (device, on_device, g_bytes_get_data (grad, NULL),
                                                       bytes, MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, &error));
                  g_assert_no_error (error);
                  g_assert_true (mixprec_param_reduce_grad_device_address (param, MIXPREC_DTYPE_FLOAT32,
                                                                           (guint64) GPOINTER_TO_SIZE (on_device),
                                                                           &error));
                  g_assert_no_error (error);
                  /* The call returned once the engine had read it. */
                  memset (on_device, 0xff, bytes);
                  _mixprec_device_free (device, on_device);
                }
              else
                {
                  g_assert_true (mixprec_param_reduce_grad_bytes (param, MIXPREC_DTYPE_FLOAT32, grad, &error));
                  g_assert_no_error (error);
                }
            }
          g_assert_true (mixprec_engine_backward_done (engine, &error));
          g_assert_no_error (error);
        }
      result = mixprec_engine_step (engine, &error);
      g_assert_no_error (error);
      g_assert_true (result->applied);
    }
}

static void
assert_same (MixprecEngine *a, MixprecEngine *b)
{
  g_autoptr(GError) error = NULL;

  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      MixprecParam *pa = mixprec_engine_get_param (a, params[p].name);
      MixprecParam *pb = mixprec_engine_get_param (b, params[p].name);
      g_autoptr(GBytes) ma = mixprec_param_get_master (pa, &error);
      g_autoptr(GBytes) mb = mixprec_param_get_master (pb, &error);
      g_autoptr(GBytes) wa = mixprec_param_get_working (pa, mixprec_param_get_working_dtype (pa), &error);
      g_autoptr(GBytes) wb = mixprec_param_get_working (pb, mixprec_param_get_working_dtype (pb), &error);

      g_assert_no_error (error);
      g_assert_true (g_bytes_equal (ma, mb));
      g_assert_true (g_bytes_equal (wa, wb));
    }
}

static void
test_addresses (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(_MixprecDevice) device = open_hostdev ();
  g_autoptr(MixprecEngine) dev = new_engine (device);
  g_autoptr(MixprecEngine) cpu = new_engine (NULL);

  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      MixprecParam *param = mixprec_engine_get_param (dev, params[p].name);
      MixprecParam *host = mixprec_engine_get_param (cpu, params[p].name);
      MixprecDType dtype = MIXPREC_DTYPE_FLOAT32;
      gint type = -1, id = -1;
      guint64 address;
      g_autoptr(GBytes) working = NULL;

      address = mixprec_param_get_device_address (param, MIXPREC_PARAM_BUFFER_WORKING, &dtype,
                                                  &type, &id, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (address, ==, GPOINTER_TO_SIZE (mixprec_param_get_working_data (param)));
      g_assert_cmpint (dtype, ==, mixprec_param_get_working_dtype (param));
      g_assert_cmpint (dtype, ==, p == 1 ? MIXPREC_DTYPE_FLOAT32 : MIXPREC_DTYPE_BFLOAT16);
      /* A device no framework knows: DLPack's kDLExtDev, ordinal 0. */
      g_assert_cmpint (type, ==, 12);
      g_assert_cmpint (id, ==, 0);
      working = mixprec_param_get_working (param, dtype, &error);
      g_assert_no_error (error);
      g_assert_cmpmem (GSIZE_TO_POINTER ((gsize) address), g_bytes_get_size (working),
                       g_bytes_get_data (working, NULL), g_bytes_get_size (working));

      address = mixprec_param_get_device_address (param, MIXPREC_PARAM_BUFFER_MASTER, &dtype,
                                                  &type, &id, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (address, ==, GPOINTER_TO_SIZE (mixprec_param_get_master_data (param)));
      g_assert_cmpint (dtype, ==, MIXPREC_DTYPE_FLOAT32);
      g_assert_cmpint (type, ==, 12);

      address = mixprec_param_get_device_address (param, MIXPREC_PARAM_BUFFER_GRAD, &dtype,
                                                  &type, &id, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (address, ==, GPOINTER_TO_SIZE (mixprec_param_get_grad_data (param)));
      g_assert_cmpint (dtype, ==, mixprec_param_get_grad_dtype (param));
      g_assert_cmpint (type, ==, 12);

      /* The host-memory form refuses device buffers, naming the way out. */
      g_assert_cmpuint (mixprec_param_get_buffer_address (param, MIXPREC_PARAM_BUFFER_WORKING,
                                                          NULL, &error), ==, 0);
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, "mixprec_param_get_device_address"));
      g_clear_error (&error);

      /* On the cpu engine: host memory, the host-memory address. */
      address = mixprec_param_get_device_address (host, MIXPREC_PARAM_BUFFER_GRAD, &dtype,
                                                  &type, &id, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (address, ==, mixprec_param_get_buffer_address (host, MIXPREC_PARAM_BUFFER_GRAD,
                                                                       NULL, &error));
      g_assert_cmpint (type, ==, 1);
      g_assert_cmpint (id, ==, 0);

      /* Bad input. */
      g_assert_cmpuint (mixprec_param_get_device_address (param, (MixprecParamBuffer) 42, NULL,
                                                          NULL, NULL, &error), ==, 0);
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
      g_assert_false (mixprec_param_reduce_grad_device_address (param, MIXPREC_DTYPE_FLOAT32, 0, &error));
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
      g_assert_nonnull (strstr (error->message, params[p].name));
      g_clear_error (&error);
      g_assert_false (mixprec_param_reduce_grad_device_address (param, (MixprecDType) 99, 64, &error));
      g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
      g_clear_error (&error);
    }
}

/* The same run, gradients from device memory and through the host. */
static void
test_reduce_matches_host (void)
{
  g_autoptr(_MixprecDevice) device = open_hostdev ();
  g_autoptr(MixprecEngine) from_device = new_engine (device);
  g_autoptr(MixprecEngine) from_host = new_engine (device);
  g_autoptr(MixprecEngine) cpu = new_engine (NULL);

  train (from_device, device, TRUE);
  train (from_host, device, FALSE);
  train (cpu, NULL, FALSE);
  assert_same (from_device, from_host);
  assert_same (from_device, cpu);
}

/* On the cpu engine the device address is a host address. */
static void
test_reduce_cpu (void)
{
  g_autoptr(MixprecEngine) a = new_engine (NULL);
  g_autoptr(MixprecEngine) b = new_engine (NULL);
  g_autoptr(GError) error = NULL;

  for (gsize p = 0; p < G_N_ELEMENTS (params); p++)
    {
      g_autoptr(GBytes) grad = values (5 + (guint) p, params[p].numel, 0.05f);

      g_assert_true (mixprec_param_reduce_grad_device_address (
          mixprec_engine_get_param (a, params[p].name), MIXPREC_DTYPE_FLOAT32,
          (guint64) GPOINTER_TO_SIZE (g_bytes_get_data (grad, NULL)), &error));
      g_assert_no_error (error);
      g_assert_true (mixprec_param_reduce_grad_bytes (mixprec_engine_get_param (b, params[p].name),
                                                      MIXPREC_DTYPE_FLOAT32, grad, &error));
      g_assert_no_error (error);
    }
  for (guint m = 0; m < 2; m++)
    {
      g_assert_true (mixprec_engine_backward_done (a, &error));
      g_assert_true (mixprec_engine_backward_done (b, &error));
      g_assert_no_error (error);
    }
  {
    g_autoptr(MixprecStepResult) ra = mixprec_engine_step (a, &error);
    g_autoptr(MixprecStepResult) rb = mixprec_engine_step (b, &error);

    g_assert_no_error (error);
    g_assert_cmpfloat (ra->grad_norm, ==, rb->grad_norm);
    g_assert_cmpfloat (ra->grad_norm, >, 0.0);
  }
  assert_same (a, b);
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
  g_test_add_func ("/param-device-address/addresses", test_addresses);
  g_test_add_func ("/param-device-address/reduce-matches-host", test_reduce_matches_host);
  g_test_add_func ("/param-device-address/reduce-cpu", test_reduce_cpu);
  return g_test_run ();
}
