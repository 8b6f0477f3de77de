/* test-device-cuda.c — the device-cuda plugin: its features in the
 * registry (schemas equal to the cpu optimizers'), its failures on a host
 * without a GPU (probe, open, bad optimizer arguments: none touches the
 * device), and on a GPU every kernel bitwise against the library's CPU
 * kernels (_mixprec_device_* with a NULL device) and every optimizer
 * bitwise against the cpu feature of the same name.
 *
 * GPU tests skip with the probe's reason when there is no usable device.
 * The /device-cuda/host/ tests run everywhere: the same comparisons with
 * the kernels' element code (cuda-dtype.cuh, cuda-optim-kernel.cuh,
 * cuda-optim-quant.cuh, on libmixprec/numeric/) compiled by nvcc and run
 * on the CPU
 * (cuda-host-kernels.cu), the optimizer's launch made by the plugin's own
 * argument code (cuda-optim-args.c). */
#include "config.h"

#include <math.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <mixprec/mixprec.h>

#include "mixprec-device-private.h"
#include "mixprec-registry-private.h"
#include "device-cuda/cuda-optim-args.h"
#include "optim-adamw/adamw-kernels.h"
#include "optim-sgd/sgd-kernels.h"
#include "optim-lion/lion-kernels.h"
#include "cuda-host-kernels.h"
#include "mixprec-fp8-private.h"
#include "numeric/numeric-quant.h"

static const gchar *const optimizers[] = { "adamw", "sgd", "lion" };

static MixprecFeature *
find (MixprecFeatureKind kind,
      const gchar       *name,
      const gchar       *device)
{
  g_autoptr(GError) error = NULL;
  MixprecFeature *feature = mixprec_registry_find_feature (mixprec_registry_get_default (), kind,
                                                           name, device, &error);

  g_assert_no_error (error);
  g_assert_nonnull (feature);
  return feature;
}

/* The reason no GPU is usable here, or NULL when one is. */
static gchar *
no_gpu_reason (void)
{
  g_autoptr(MixprecFeature) feature = find (MIXPREC_FEATURE_KIND_DEVICE, "cuda", "cuda");
  g_autoptr(GError) error = NULL;
  gint n = 0;

  if (_mixprec_device_probe (feature, &n, &error))
    {
      g_assert_cmpint (n, >, 0);
      return NULL;
    }
  return g_strdup (error->message);
}

/* Opens the GPU, or skips the test (returns NULL) with the probe's reason. */
static _MixprecDevice *
open_or_skip (void)
{
  g_autofree gchar *reason = no_gpu_reason ();
  g_autoptr(GError) error = NULL;
  _MixprecDevice *device;

  if (reason != NULL)
    {
      g_test_skip (reason);
      return NULL;
    }
  device = _mixprec_device_open ("cuda", -1, &error);
  g_assert_no_error (error);
  g_assert_nonnull (device);
  return device;
}

/* ------------------------------------------------------------ host side */

static void
test_registered (void)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  g_autoptr(MixprecFeature) device = find (MIXPREC_FEATURE_KIND_DEVICE, "cuda", "cuda");

  for (GList *l = mixprec_registry_get_failures (registry); l != NULL; l = l->next)
    g_assert_cmpstr (mixprec_plugin_get_name (l->data), !=, "device-cuda");
  g_assert_cmpstr (mixprec_feature_get_plugin_name (device), ==, "device-cuda");
  g_assert_cmpuint (mixprec_feature_get_rank (device), ==, 256);
  g_assert_nonnull (_mixprec_feature_get_device_vtable (device));
  /* Revision 3: the float8 casts of FP8 working copies. */
  g_assert_cmpuint (mixprec_feature_get_abi_revision (device), ==, 3);
  g_assert_nonnull (_mixprec_feature_get_device_vtable_v3 (device)->fp8_cast);
  g_assert_nonnull (_mixprec_feature_get_device_vtable_v3 (device)->mx_cast);

  for (guint k = 0; k < G_N_ELEMENTS (optimizers); k++)
    {
      g_autoptr(MixprecFeature) gpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, optimizers[k], "cuda");
      g_autoptr(MixprecFeature) cpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, optimizers[k], "cpu");
      const gchar *const *gpu_states, *const *cpu_states;
      guint n = mixprec_feature_get_n_hparams (cpu);

      g_assert_cmpstr (mixprec_feature_get_plugin_name (gpu), ==, "device-cuda");
      g_assert_cmpstr (mixprec_feature_get_device (gpu), ==, "cuda");
      g_assert_cmpuint (mixprec_feature_get_rank (gpu), ==, 256);
      /* Revision 3 where the library registers it, else 2: bfloat16
       * state at least. */
      g_assert_cmpuint (mixprec_feature_get_abi_revision (gpu), >=, 2);
      g_assert_cmpuint (n, >, 0);
      g_assert_cmpuint (mixprec_feature_get_n_hparams (gpu), ==, n);
      for (guint h = 0; h < n; h++)
        {
          g_assert_cmpstr (mixprec_feature_get_hparam_name (gpu, h), ==,
                           mixprec_feature_get_hparam_name (cpu, h));
          g_assert_cmpstr (mixprec_feature_get_hparam_description (gpu, h), ==,
                           mixprec_feature_get_hparam_description (cpu, h));
          g_assert_cmpint (mixprec_feature_get_hparam_type (gpu, h), ==,
                           mixprec_feature_get_hparam_type (cpu, h));
          g_assert_cmpfloat (mixprec_feature_get_hparam_default (gpu, h), ==,
                             mixprec_feature_get_hparam_default (cpu, h));
          g_assert_cmpfloat (mixprec_feature_get_hparam_minimum (gpu, h), ==,
                             mixprec_feature_get_hparam_minimum (cpu, h));
          g_assert_cmpfloat (mixprec_feature_get_hparam_maximum (gpu, h), ==,
                             mixprec_feature_get_hparam_maximum (cpu, h));
        }
      g_assert_cmpuint (mixprec_feature_get_n_state_slots (gpu), ==,
                        mixprec_feature_get_n_state_slots (cpu));
      gpu_states = mixprec_feature_get_state_names (gpu);
      cpu_states = mixprec_feature_get_state_names (cpu);
      for (guint s = 0; s < mixprec_feature_get_n_state_slots (cpu); s++)
        g_assert_cmpstr (gpu_states[s], ==, cpu_states[s]);
    }
}

static void
test_probe_and_open (void)
{
  g_autoptr(MixprecFeature) feature = find (MIXPREC_FEATURE_KIND_DEVICE, "cuda", "cuda");
  const MixprecDeviceV1 *vtable = _mixprec_feature_get_device_vtable (feature);
  g_autofree gchar *reason = no_gpu_reason ();
  g_autoptr(GError) error = NULL;
  MixprecDeviceOpenV1 args = { sizeof args, -1 };
  char errbuf[512] = "";
  void *handle = NULL;
  int n = -1;
  _MixprecDevice *device;

  if (reason == NULL)
    {
      g_autofree gchar *line = NULL;

      /* A GPU: open it, describe it, refuse an ordinal it lacks. */
      g_assert_cmpint (vtable->probe (&n, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
      device = _mixprec_device_open ("cuda", 0, &error);
      g_assert_no_error (error);
      line = _mixprec_device_describe (device);
      g_assert_nonnull (strstr (line, "(cuda:0, sm_"));
      g_assert_nonnull (strstr (line, " GiB)"));
      g_assert_nonnull (_mixprec_device_get_stream (device));
      _mixprec_device_unref (device);
      g_assert_null (_mixprec_device_open ("cuda", n, &error));
      g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
      g_assert_nonnull (strstr (error->message, "does not exist"));
      return;
    }

  /* No GPU: the runtime's own words, naming the call. */
  g_assert_nonnull (strstr (reason, "cudaGetDeviceCount: "));
  g_assert_cmpint (vtable->probe (&n, errbuf, sizeof errbuf), !=, MIXPREC_PLUGIN_OK);
  g_assert_cmpint (n, ==, 0);
  g_assert_true (g_str_has_prefix (errbuf, "cudaGetDeviceCount: "));
  g_assert_nonnull (strstr (reason, errbuf));

  device = _mixprec_device_open ("cuda", -1, &error);
  g_assert_null (device);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
  g_assert_nonnull (strstr (error->message, "cudaGetDeviceCount: "));

  /* The plugin's open() on its own fails the same way. */
  errbuf[0] = '\0';
  g_assert_cmpint (vtable->open (&args, &handle, errbuf, sizeof errbuf), !=, MIXPREC_PLUGIN_OK);
  g_assert_null (handle);
  g_assert_true (g_str_has_prefix (errbuf, "cudaGetDeviceCount: "));
}

static void
test_bad_local_rank (void)
{
  g_autoptr(MixprecFeature) feature = find (MIXPREC_FEATURE_KIND_DEVICE, "cuda", "cuda");
  const MixprecDeviceV1 *vtable = _mixprec_feature_get_device_vtable (feature);
  MixprecDeviceOpenV1 args = { sizeof args, -1 };
  char errbuf[512] = "";
  void *handle = NULL;

  /* Checked before the runtime is asked anything. */
  g_setenv ("LOCAL_RANK", "two", TRUE);
  g_assert_cmpint (vtable->open (&args, &handle, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_unsetenv ("LOCAL_RANK");
  g_assert_null (handle);
  g_assert_nonnull (strstr (errbuf, "LOCAL_RANK=\"two\""));

  args.ordinal = -2;
  g_assert_cmpint (vtable->open (&args, &handle, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "ordinal -2"));
}

/* Entry points given no handle fail with a sentence instead of crashing. */
static void
test_null_handle (void)
{
  g_autoptr(MixprecFeature) feature = find (MIXPREC_FEATURE_KIND_DEVICE, "cuda", "cuda");
  const MixprecDeviceV1 *vtable = _mixprec_feature_get_device_vtable (feature);
  char errbuf[512] = "";
  void *ptr = &ptr;

  g_assert_cmpint (vtable->alloc (NULL, 64, &ptr, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_null (ptr);
  g_assert_nonnull (strstr (errbuf, "handle is NULL"));
  errbuf[0] = '\0';
  g_assert_cmpint (vtable->synchronize (NULL, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "handle is NULL"));
  g_assert_null (vtable->get_stream (NULL));
  g_assert_cmpint (vtable->close (NULL, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  errbuf[0] = '\0';
  g_assert_cmpint (_mixprec_feature_get_device_vtable_v3 (feature)->fp8_cast (
                     NULL, MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3, 1, 1.0f, NULL, NULL, 0, NULL,
                     errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "handle is NULL"));
  errbuf[0] = '\0';
  g_assert_cmpint (_mixprec_feature_get_device_vtable_v3 (feature)->mx_cast (
                     NULL, MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3, 32, NULL, NULL, NULL, 0,
                     errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "handle is NULL"));
}

/* step() rejects what the cpu feature rejects, before any CUDA call. */
static void
test_optimizer_bad_arguments (void)
{
  for (guint k = 0; k < G_N_ELEMENTS (optimizers); k++)
    {
      g_autoptr(MixprecFeature) gpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, optimizers[k], "cuda");
      const MixprecOptimizerV1 *vt = _mixprec_feature_get_optimizer_vtable (gpu);
      guint n_states = mixprec_feature_get_n_state_slots (gpu);
      gfloat master[8] = { 0 }, grad[8] = { 0 }, s0[8] = { 0 }, s1[8] = { 0 };
      gfloat *states[2] = { s0, s1 };
      MixprecOptimizerStepV1 args = { 0 };
      g_autoptr(GError) error = NULL;
      g_autofree gdouble *hparams = NULL;
      guint n_hparams;
      const gdouble *defaults = _mixprec_feature_get_hparam_defaults (gpu, &n_hparams);
      char errbuf[512] = "";

      g_assert_cmpuint (n_states, <=, 2);
      args.step = 1;
      args.lr = 1e-3;
      args.grad_factor = 1.0f;

      /* An fp8 gradient: unsupported, named with the device. */
      args.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3;
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, grad, states, NULL,
                                                       8, &error));
      g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
      g_assert_nonnull (strstr (error->message, "on cuda takes float32, float16 or bfloat16"));
      g_clear_error (&error);
      args.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;

      /* An fp8 working copy. */
      args.working_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2;
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, grad, states, grad,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "on cuda writes float32, float16 or bfloat16"));
      g_clear_error (&error);
      args.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;

      /* n elements and no parameter, no gradient, no state. */
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, NULL, grad, states, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "master and working are both NULL"));
      g_clear_error (&error);
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, NULL, states, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "gradient buffer is NULL"));
      g_clear_error (&error);
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, grad, NULL, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "state slot 0"));
      g_clear_error (&error);

      /* Step 0, a negative learning rate, a stochastic-rounding mode 7. */
      args.step = 0;
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, grad, states, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "1-based"));
      g_clear_error (&error);
      args.step = 1;
      args.lr = -1;
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, grad, states, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "learning rate"));
      g_clear_error (&error);
      args.lr = 1e-3;
      args.rounding = 7;
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, NULL, master, grad, states, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, "rounding mode 7"));
      g_clear_error (&error);
      args.rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;

      /* A hyper-parameter out of the schema's bounds (the first one past
       * its maximum, or negative for the unbounded ones). */
      hparams = g_memdup2 (defaults, n_hparams * sizeof (gdouble));
      hparams[1] = -1;
      g_assert_false (_mixprec_feature_optimizer_step (gpu, &args, hparams, master, grad, states, NULL,
                                                       8, &error));
      g_assert_nonnull (strstr (error->message, mixprec_feature_get_hparam_name (gpu, 1)));
      g_clear_error (&error);

      /* No elements: valid, and nothing to queue. */
      g_assert_true (_mixprec_feature_optimizer_step (gpu, &args, NULL, NULL, NULL, NULL, NULL, 0,
                                                      &error));
      g_assert_no_error (error);

      /* Revision 3's arguments: a block size that is no power of two in
       * 32 .. 4096, a scaled slot without scales, a remainder master
       * beside a float32 one. None reaches the device. */
      {
        MixprecPluginStateFormat formats[2] = { MIXPREC_PLUGIN_STATE_INT8_DYNAMIC,
                                                MIXPREC_PLUGIN_STATE_INT8_DYNAMIC };
        gfloat sc0[1] = { 1 }, sc1[1] = { 1 };
        gfloat *scales[2] = { sc0, sc1 };
        guint16 extra[8] = { 0 };
        MixprecOptimizerStepV3 v3 = { 0 };

        v3.v2.base = args;
        v3.v2.base.working_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
        v3.state_formats = formats;
        v3.state_scales = scales;
        v3.block_size = 48;
        g_assert_false (_mixprec_feature_optimizer_step_v3 (gpu, &v3, NULL, master, grad,
                                                            (gpointer const *) states, NULL, 8, &error));
        g_assert_nonnull (strstr (error->message, "power of two from 32 to 4096"));
        g_assert_nonnull (strstr (error->message, "got 48"));
        g_clear_error (&error);
        v3.block_size = 32;
        scales[0] = NULL;
        g_assert_false (_mixprec_feature_optimizer_step_v3 (gpu, &v3, NULL, master, grad,
                                                            (gpointer const *) states, NULL, 8, &error));
        g_assert_nonnull (strstr (error->message, "its scale array is NULL"));
        g_clear_error (&error);
        scales[0] = sc0;
        v3.master_format = MIXPREC_PLUGIN_MASTER_REMAINDER;
        v3.master_extra = extra;
        v3.v2.base.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
        g_assert_false (_mixprec_feature_optimizer_step_v3 (gpu, &v3, NULL, master, grad,
                                                            (gpointer const *) states, extra, 8, &error));
        g_assert_nonnull (strstr (error->message, "the FP32 master must be NULL"));
        g_clear_error (&error);
      }

      /* The vtable straight: a status and a sentence in errbuf. (The V1
       * form of a revision 2 or 3 registration has no step of its own:
       * the library's calls above reached it.) */
      args.struct_size = sizeof args;
      args.hparams = defaults;
      args.n_hparams = n_hparams;
      args.grad_dtype = 9;
      if (vt->step != NULL)
        {
          g_assert_cmpint (vt->step (&args, master, grad, states, NULL, 8, errbuf, sizeof errbuf), ==,
                           MIXPREC_PLUGIN_ERR_UNSUPPORTED);
          g_assert_nonnull (strstr (errbuf, "not dtype 9"));
        }
    }
}

/* ------------------------------------------------------------ GPU helpers */

#define N_RANDOM 1000000

static gsize
dsize (MixprecDType dtype)
{
  return mixprec_dtype_get_size (dtype);
}

static gpointer
upload (_MixprecDevice *device,
        gconstpointer   host,
        gsize           bytes)
{
  g_autoptr(GError) error = NULL;
  gpointer p = _mixprec_device_alloc (device, MAX (bytes, 1), "test buffer", &error);

  g_assert_no_error (error);
  if (bytes > 0)
    g_assert_true (_mixprec_device_copy (device, p, host, bytes, MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE,
                                         &error));
  g_assert_no_error (error);
  return p;
}

static void
download (_MixprecDevice *device,
          gpointer        host,
          gconstpointer   dev,
          gsize           bytes)
{
  g_autoptr(GError) error = NULL;

  g_assert_true (_mixprec_device_copy (device, host, dev, bytes, MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST,
                                       &error));
  g_assert_no_error (error);
}

static gfloat
decode1 (MixprecDType  dtype,
         gconstpointer buf,
         gsize         i)
{
  gfloat f;

  g_assert_true (mixprec_convert_array (dtype, (const guint8 *) buf + i * dsize (dtype),
                                        MIXPREC_DTYPE_FLOAT32, &f, 1, MIXPREC_ROUNDING_NEAREST_EVEN,
                                        0, 0, NULL));
  return f;
}

/* Bitwise, except that where arithmetic made a NaN, any NaN will do: the
 * payload of a NaN result is the hardware's (x86 propagates an operand's,
 * NVIDIA GPUs return a canonical one), not the library's; on x86 it even
 * depends on which operand of a sum the compiler put first. */
static void
assert_same (const gchar  *what,
             MixprecDType  dtype,
             gconstpointer expected,
             gconstpointer actual,
             gsize         n,
             gboolean      nan_any)
{
  gsize size = dsize (dtype);

  if (memcmp (expected, actual, n * size) == 0)
    return;
  for (gsize i = 0; i < n; i++)
    {
      const guint8 *e = (const guint8 *) expected + i * size;
      const guint8 *a = (const guint8 *) actual + i * size;

      if (memcmp (e, a, size) == 0)
        continue;
      if (nan_any && isnan (decode1 (dtype, e, 0)) && isnan (decode1 (dtype, a, 0)))
        continue;
      g_error ("%s: %s element %" G_GSIZE_FORMAT " differs: cpu %.9g, cuda %.9g", what,
               mixprec_dtype_get_name (dtype), i, decode1 (dtype, e, 0), decode1 (dtype, a, 0));
    }
}

/* fp32 values worth converting: zeros, infinities, NaNs with payloads and
 * signs, denormals of every format, ties and near-ties at each format's
 * precision, the largest finite values and just past them. */
static GArray *
special_f32 (void)
{
  static const guint32 bits[] = {
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
    0xFF800001, 0x7FA5A5A5, 0xFFDEAD01, 0x7FFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF,
    0x00800000, 0x33000000, 0x33000001, 0x337FFFFF, 0x33800000, 0x33C00000, 0x387FC000,
    0x38800000, 0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FFFFF, 0x47800000, 0x7F7FFFFF,
    0x7F7F8000, 0x7F7F7FFF, 0xFF7FFFFF, 0x3F808000, 0x3F818000, 0x3F808001, 0x3F800800,
    0x3F801000, 0x43E00000, 0x43E80000, 0x43F00000, 0x3B000000, 0x3A800000, 0x3A000000,
    0x47600000, 0x47700000, 0x37800000, 0x37000000, 0x36800000, 0x3C000000, 0x3C100000,
  };
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gfloat));

  for (guint k = 0; k < G_N_ELEMENTS (bits); k++)
    for (guint delta = 0; delta < 3; delta++)
      {
        guint32 u = bits[k] + delta - 1;
        gfloat f;

        if (bits[k] == 0 && delta == 0)
          continue;
        memcpy (&f, &u, sizeof f);
        g_array_append_val (a, f);
        u ^= 0x80000000;
        memcpy (&f, &u, sizeof f);
        g_array_append_val (a, f);
      }
  return a;
}

static gfloat
random_f32 (GRand *rand)
{
  switch (g_rand_int_range (rand, 0, 4))
    {
    case 0:
      {
        /* Any bit pattern: NaNs, denormals, huge values. */
        guint32 u = g_rand_int (rand);
        gfloat f;

        memcpy (&f, &u, sizeof f);
        return f;
      }
    case 1:
      return (gfloat) g_rand_double_range (rand, -2, 2);
    case 2:
      return (gfloat) (g_rand_double_range (rand, -1, 1) * pow (2, g_rand_int_range (rand, -30, 20)));
    default:
      return (gfloat) (g_rand_double_range (rand, -1, 1) * pow (2, g_rand_int_range (rand, -140, 128)));
    }
}

/* @n values of @dtype: every bit pattern of a narrow format first, then
 * the specials (rounded into it), then random ones. */
static gpointer
source_values (MixprecDType dtype,
               gsize        n,
               GRand       *rand)
{
  g_autoptr(GArray) specials = special_f32 ();
  g_autofree gfloat *f = g_new (gfloat, n);
  guint8 *out = g_malloc (n * dsize (dtype));
  gsize i = 0, patterns = dtype == MIXPREC_DTYPE_FLOAT32 ? 0 : (gsize) 1 << (8 * dsize (dtype));

  for (gsize k = 0; k < specials->len && k < n; k++)
    f[k] = g_array_index (specials, gfloat, k);
  for (gsize k = specials->len; k < n; k++)
    f[k] = random_f32 (rand);
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, f, dtype, out, n,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  /* Every pattern, overwriting the start (patterns < n). */
  for (i = 0; i < patterns && i < n; i++)
    {
      if (dsize (dtype) == 2)
        ((guint16 *) out)[i] = (guint16) i;
      else
        out[i] = (guint8) i;
    }
  return out;
}

/* ------------------------------------------------------------ targets
 *
 * Each comparison runs on the GPU (@device) or, with @device NULL, on the
 * host through cuda-host-kernels.cu, with buffers in host memory (what
 * the _mixprec_device_* helpers give for a NULL device). */

static void
target_convert (_MixprecDevice  *device,
                gconstpointer    src,
                MixprecDType     src_dtype,
                gpointer         dst,
                MixprecDType     dst_dtype,
                gsize            n,
                MixprecRounding  rounding,
                guint64          seed,
                guint64          first_index)
{
  g_autoptr(GError) error = NULL;

  if (device == NULL)
    {
      test_cuda_host_convert (src, src_dtype, dst, dst_dtype, n,
                              rounding == MIXPREC_ROUNDING_STOCHASTIC, seed, first_index);
      return;
    }
  g_assert_true (_mixprec_device_convert (device, src, src_dtype, dst, dst_dtype, n, rounding, seed,
                                          first_index, &error));
  g_assert_no_error (error);
}

static void
target_accumulate (_MixprecDevice *device,
                   gpointer        dst,
                   MixprecDType    dst_dtype,
                   gconstpointer   src,
                   MixprecDType    src_dtype,
                   gsize           n,
                   gboolean        first)
{
  g_autoptr(GError) error = NULL;

  if (device == NULL)
    {
      test_cuda_host_accumulate (dst, dst_dtype, src, src_dtype, n, first);
      return;
    }
  g_assert_true (_mixprec_device_accumulate (device, dst, dst_dtype, src, src_dtype, n, first, &error));
  g_assert_no_error (error);
}

static void
target_scale (_MixprecDevice *device,
              gpointer        buf,
              MixprecDType    dtype,
              gsize           n,
              gfloat          factor)
{
  g_autoptr(GError) error = NULL;

  if (device == NULL)
    {
      test_cuda_host_scale (buf, dtype, n, factor);
      return;
    }
  g_assert_true (_mixprec_device_scale (device, buf, dtype, n, factor, &error));
  g_assert_no_error (error);
}

/* ------------------------------------------------------------ GPU: kernels */

static void
run_convert (_MixprecDevice *device)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (1234);
  /* Sizes not a multiple of anything, and windows crossing 2^32 and 2^33
   * in the random stream, where the key of stochastic rounding changes
   * (for bfloat16, which takes half a word per element, at 2^33). */
  static const guint64 first_indices[] = { 0, 7, G_GUINT64_CONSTANT (0xFFFFFFFF) - 1000,
                                           G_GUINT64_CONSTANT (0x1FFFFFFFF) - 1001 };
  const gsize n = N_RANDOM + 77;

  for (MixprecDType s = 0; s < MIXPREC_DTYPE_COUNT; s++)
    {
      g_autofree gpointer src = source_values (s, n, rand);
      gpointer dev_src = upload (device, src, n * dsize (s));

      for (MixprecDType d = 0; d < MIXPREC_DTYPE_COUNT; d++)
        for (MixprecRounding r = 0; r <= MIXPREC_ROUNDING_STOCHASTIC; r++)
          for (guint f = 0; f < G_N_ELEMENTS (first_indices); f++)
            {
              g_autofree gpointer expected = g_malloc (n * dsize (d));
              g_autofree gpointer actual = g_malloc (n * dsize (d));
              g_autoptr(GError) error = NULL;
              gpointer dev_dst;
              g_autofree gchar *what = g_strdup_printf ("convert %s -> %s, rounding %d, index %"
                                                        G_GUINT64_FORMAT, mixprec_dtype_get_name (s),
                                                        mixprec_dtype_get_name (d), r, first_indices[f]);

              dev_dst = _mixprec_device_alloc (device, n * dsize (d), "dst", &error);
              g_assert_no_error (error);
              g_assert_true (mixprec_convert_array (s, src, d, expected, n, r, 99, first_indices[f],
                                                    &error));
              g_assert_no_error (error);
              /* Misaligned too: start one element in. */
              target_convert (device, (guint8 *) dev_src + dsize (s), s, (guint8 *) dev_dst + dsize (d),
                              d, n - 1, r, 99, first_indices[f] + 1);
              target_convert (device, dev_src, s, dev_dst, d, 1, r, 99, first_indices[f]);
              download (device, actual, dev_dst, n * dsize (d));
              assert_same (what, d, expected, actual, n, FALSE);
              _mixprec_device_free (device, dev_dst);
              if (f > 0 && r == MIXPREC_ROUNDING_NEAREST_EVEN)
                break;          /* the index matters to stochastic rounding only */
            }
      _mixprec_device_free (device, dev_src);
    }
}

static void
test_convert (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();

  if (device != NULL)
    run_convert (device);
}

static void
test_host_convert (void)
{
  run_convert (NULL);
}

static void
run_accumulate_scale (_MixprecDevice *device)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (99);
  const gsize n = 300007;

  for (MixprecDType d = 0; d < MIXPREC_DTYPE_COUNT; d++)
    {
      g_autofree gpointer dst0 = source_values (d, n, rand);

      for (MixprecDType s = 0; s < MIXPREC_DTYPE_COUNT; s++)
        for (gint first = 0; first <= 1; first++)
          {
            g_autofree gpointer src = source_values (s, n, rand);
            g_autofree gpointer expected = g_memdup2 (dst0, n * dsize (d));
            g_autofree gpointer actual = g_malloc (n * dsize (d));
            gpointer dev_src = upload (device, src, n * dsize (s));
            gpointer dev_dst = upload (device, dst0, n * dsize (d));
            g_autoptr(GError) error = NULL;
            g_autofree gchar *what = g_strdup_printf ("accumulate %s into %s, first %d",
                                                      mixprec_dtype_get_name (s),
                                                      mixprec_dtype_get_name (d), first);

            g_assert_true (_mixprec_device_accumulate (NULL, expected, d, src, s, n, first, &error));
            g_assert_no_error (error);
            target_accumulate (device, dev_dst, d, dev_src, s, n, first);
            download (device, actual, dev_dst, n * dsize (d));
            /* first: a conversion, every bit counts; else a sum. */
            assert_same (what, d, expected, actual, n, !first);
            _mixprec_device_free (device, dev_src);
            _mixprec_device_free (device, dev_dst);
          }

      for (guint k = 0; k < 3; k++)
        {
          static const gfloat factors[] = { 0.3713f, 1e30f, -65536.5f };
          g_autofree gpointer expected = g_memdup2 (dst0, n * dsize (d));
          g_autofree gpointer actual = g_malloc (n * dsize (d));
          gpointer dev_buf = upload (device, dst0, n * dsize (d));
          g_autoptr(GError) error = NULL;
          g_autofree gchar *what = g_strdup_printf ("scale %s by %g", mixprec_dtype_get_name (d),
                                                    factors[k]);

          g_assert_true (_mixprec_device_scale (NULL, expected, d, n, factors[k], &error));
          g_assert_no_error (error);
          target_scale (device, (guint8 *) dev_buf + dsize (d), d, n - 1, factors[k]);
          target_scale (device, dev_buf, d, 1, factors[k]);
          download (device, actual, dev_buf, n * dsize (d));
          assert_same (what, d, expected, actual, n, TRUE);
          _mixprec_device_free (device, dev_buf);
        }
    }
}

static void
test_accumulate_scale (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();

  if (device != NULL)
    run_accumulate_scale (device);
}

static void
test_host_accumulate_scale (void)
{
  run_accumulate_scale (NULL);
}

static void
test_sumsq_blocks (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  /* More ranges than the plugin's first table holds (64), some empty, some
   * shorter than a block, dtypes mixed, data one element off alignment. */
  const guint n_ranges = 150;
  const gsize block_size = 1000;
  g_autofree MixprecDeviceRangeV1 *host_ranges = g_new0 (MixprecDeviceRangeV1, n_ranges);
  g_autofree MixprecDeviceRangeV1 *dev_ranges = g_new0 (MixprecDeviceRangeV1, n_ranges);
  g_autoptr(GPtrArray) host_data = g_ptr_array_new_with_free_func (g_free);
  gsize n_blocks = 0;

  if (device == NULL)
    return;
  for (guint r = 0; r < n_ranges; r++)
    {
      MixprecDType dtype = r % MIXPREC_DTYPE_COUNT;
      gsize n = r % 7 == 3 ? 0 : (gsize) g_rand_int_range (rand, 1, 20000);
      g_autofree gfloat *f = g_new (gfloat, n + 1);
      guint8 *data = g_malloc ((n + 1) * dsize (dtype));

      for (gsize i = 0; i <= n; i++)
        f[i] = (gfloat) (g_rand_double_range (rand, -1, 1) * pow (2, g_rand_int_range (rand, -20, 8)));
      mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, f, dtype, data, n + 1,
                             MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL);
      g_ptr_array_add (host_data, data);
      host_ranges[r] = (MixprecDeviceRangeV1) { data + dsize (dtype), (MixprecPluginDType) dtype, n };
      dev_ranges[r] = (MixprecDeviceRangeV1) {
        (guint8 *) upload (device, data, (n + 1) * dsize (dtype)) + dsize (dtype), (MixprecPluginDType) dtype, n };
      n_blocks += (n + block_size - 1) / block_size;
    }

  for (guint pass = 0; pass < 2; pass++)
    {
      g_autofree gdouble *expected = g_new (gdouble, n_blocks);
      g_autofree gdouble *actual = g_new (gdouble, n_blocks);
      g_autoptr(GError) error = NULL;
      gdouble *dev_sums = _mixprec_device_alloc (device, n_blocks * sizeof (gdouble), "sums", &error);
      gdouble *dev_total = _mixprec_device_alloc (device, sizeof (gdouble), "total", &error);
      gdouble total_cpu, total_gpu;
      /* The second pass uses a prefix: the table is reused, not regrown. */
      guint used = pass == 0 ? n_ranges : 40;
      gsize used_blocks = 0;

      for (guint r = 0; r < used; r++)
        used_blocks += (host_ranges[r].n + block_size - 1) / block_size;
      g_assert_true (_mixprec_device_sumsq_blocks (NULL, host_ranges, used, block_size, expected,
                                                   &error));
      g_assert_true (_mixprec_device_sumsq_blocks (device, dev_ranges, used, block_size, dev_sums,
                                                   &error));
      g_assert_no_error (error);
      download (device, actual, dev_sums, used_blocks * sizeof (gdouble));
      g_assert_cmpmem (expected, used_blocks * sizeof (gdouble), actual, used_blocks * sizeof (gdouble));

      g_assert_true (_mixprec_device_sum_ordered (NULL, expected, used_blocks, &total_cpu, &error));
      g_assert_true (_mixprec_device_sum_ordered (device, dev_sums, used_blocks, dev_total, &error));
      g_assert_no_error (error);
      download (device, &total_gpu, dev_total, sizeof total_gpu);
      g_assert_cmpmem (&total_cpu, sizeof total_cpu, &total_gpu, sizeof total_gpu);
      g_assert_cmpfloat (total_cpu, >, 0);
      _mixprec_device_free (device, dev_sums);
      _mixprec_device_free (device, dev_total);
    }
  for (guint r = 0; r < n_ranges; r++)
    _mixprec_device_free (device, (guint8 *) dev_ranges[r].data - dsize ((MixprecDType) dev_ranges[r].dtype));
}

/* ------------------------------------------------------------ GPU: optimizers */

typedef struct {
  const gchar *name;
  const gchar *label;
  /* Values for the schema's leading hyper-parameters; NAN keeps the default. */
  gdouble hparams[8];
} OptCase;

static const OptCase opt_cases[] = {
  { "adamw", "adamw", { NAN, 0.9, 0.999, 1e-8, 0.01, 1, 1 } },
  { "adamw", "adam-l2", { NAN, 0.8, 0.99, 1e-6, 0.05, 1, 0 } },
  { "adamw", "adamw-no-bias-correction", { NAN, 0.9, 0.95, 1e-8, 0.1, 0, 1 } },
  { "sgd", "sgd-plain", { NAN, 0, 0, 0, 0 } },
  { "sgd", "sgd-momentum-dampening-wd", { NAN, 0.9, 0.1, 0.01, 0 } },
  { "sgd", "sgd-nesterov", { NAN, 0.9, 0, 0.001, 1 } },
  { "lion", "lion", { NAN, 0.9, 0.99, 0.1 } },
};

typedef struct {
  MixprecDType grad;
  gint working;          /* a MixprecDType, or -1 for none */
  gboolean master;
  MixprecRounding rounding;
} OptLayout;

static const OptLayout layouts[] = {
  { MIXPREC_DTYPE_FLOAT32, -1, TRUE, MIXPREC_ROUNDING_NEAREST_EVEN },
  { MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, TRUE, MIXPREC_ROUNDING_NEAREST_EVEN },
  { MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, TRUE, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, TRUE, MIXPREC_ROUNDING_NEAREST_EVEN },
  { MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, TRUE, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, TRUE, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, FALSE, MIXPREC_ROUNDING_NEAREST_EVEN },
  { MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, FALSE, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, FALSE, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT32, FALSE, MIXPREC_ROUNDING_NEAREST_EVEN },
};

typedef struct {
  gsize n;
  gsize offset;          /* elements into each allocation */
  guint64 first_index;
  gsize grad_shift;      /* further elements into the gradient's */
} OptShape;

static const OptShape shapes[] = {
  /* Aligned groups of four and a tail; the random key changes inside a
   * group. */
  { 40963, 0, G_GUINT64_CONSTANT (0xFFFFFFFF) - 2001, 0 },
  /* Every array one, two or three elements off: a head before the groups. */
  { 1037, 1, 12345, 0 },
  { 4102, 2, G_GUINT64_CONSTANT (0xFFFFFFFF) - 2000, 0 },
  { 999, 3, 3, 0 },
  /* The gradient misaligned against the rest: one element at a time. */
  { 2051, 0, 5, 1 },
  { 2051, 2, G_GUINT64_CONSTANT (0xFFFFFFFF) - 1000, 3 },
  /* bfloat16's key (half a word per element) changes at 2^33. */
  { 4099, 1, G_GUINT64_CONSTANT (0x1FFFFFFFF) - 2001, 0 },
};

/* The cuda feature @name's step() with the kernel's element code run on
 * the host: the plugin's argument code turns the call into the kernel's
 * launch, and the threads of a grid of @n_threads run one after the other.
 * Returns the kernel's head (-1: one element at a time). */
static gint
host_optimizer_step (const gchar                  *name,
                     const MixprecOptimizerStepV1 *args,
                     const gdouble                *hparams,
                     guint                         n_hparams,
                     gfloat                       *master,
                     gconstpointer                 grad,
                     gfloat *const                *states,
                     gpointer                      working,
                     gsize                         n,
                     gsize                         n_threads)
{
  MixprecOptimizerV3 schema = { .name = name, .device = "cuda",
                                .state_format_mask = MIXPREC_CUDA_OPTIM_STATE_FORMATS,
                                .master_format_mask = MIXPREC_CUDA_OPTIM_MASTER_FORMATS };
  MixprecOptimizerStepV1 a = *args;
  MixprecPluginStateFormat formats[MIXPREC_CUDA_OPTIM_MAX_STATES];
  MixprecOptimizerStepV3 v3;
  MixprecCudaOptimPrepare prepare;
  MixprecCudaOptimLaunch launch;
  char errbuf[256];

  if (g_str_equal (name, "adamw"))
    {
      schema.hparams = _mixprec_adamw_hparams;
      schema.n_hparams = G_N_ELEMENTS (_mixprec_adamw_hparams);
      schema.n_state_slots = G_N_ELEMENTS (_mixprec_adamw_states);
      prepare = _mixprec_adamw_prepare;
    }
  else if (g_str_equal (name, "sgd"))
    {
      schema.hparams = _mixprec_sgd_hparams;
      schema.n_hparams = G_N_ELEMENTS (_mixprec_sgd_hparams);
      schema.n_state_slots = G_N_ELEMENTS (_mixprec_sgd_states);
      prepare = _mixprec_sgd_prepare;
    }
  else
    {
      g_assert_cmpstr (name, ==, "lion");
      schema.hparams = _mixprec_lion_hparams;
      schema.n_hparams = G_N_ELEMENTS (_mixprec_lion_hparams);
      schema.n_state_slots = G_N_ELEMENTS (_mixprec_lion_states);
      prepare = _mixprec_lion_prepare;
    }
  g_assert_cmpuint (n_hparams, ==, schema.n_hparams);
  a.struct_size = sizeof a;
  a.hparams = hparams;
  a.n_hparams = n_hparams;
  _mixprec_cuda_optim_args_upgrade (&a, NULL, schema.n_state_slots, formats, &v3);
  g_assert_cmpint (_mixprec_cuda_optim_args (&schema, prepare, &v3, master, grad, (void *const *) states,
                                             working, n, &launch, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_OK);
  return test_cuda_host_optim_step (&launch, n_threads);
}

static void
run_optimizer_case (_MixprecDevice  *device,
                    const OptCase   *oc,
                    const OptLayout *lay,
                    const OptShape  *shape,
                    GRand           *rand)
{
  g_autoptr(MixprecFeature) cpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, oc->name, "cpu");
  g_autoptr(MixprecFeature) gpu = device != NULL ? find (MIXPREC_FEATURE_KIND_OPTIMIZER, oc->name, "cuda")
                                                 : NULL;
  guint n_hparams, n_states = mixprec_feature_get_n_state_slots (cpu);
  const gdouble *defaults = _mixprec_feature_get_hparam_defaults (cpu, &n_hparams);
  g_autofree gdouble *hparams = g_memdup2 (defaults, n_hparams * sizeof (gdouble));
  const gsize n = shape->n, total = shape->n + shape->offset + shape->grad_shift;
  const gsize off = shape->offset, goff = shape->offset + shape->grad_shift;
  gsize wsize = lay->working >= 0 ? dsize (lay->working) : 0;
  g_autofree gfloat *master = g_new (gfloat, total);
  g_autofree gfloat *f = g_new (gfloat, total);
  g_autofree guint8 *working = g_malloc (4 * total);
  g_autofree guint8 *grad = g_malloc (dsize (lay->grad) * total);
  g_autofree guint8 *check = g_malloc (4 * total);
  gfloat *states[2] = { NULL, NULL }, *dev_states[2] = { NULL, NULL };
  gfloat *dev_master;
  gpointer dev_working, dev_grad;
  g_autoptr(GError) error = NULL;

  for (guint h = 0; h < n_hparams && h < G_N_ELEMENTS (oc->hparams); h++)
    if (!isnan (oc->hparams[h]))
      hparams[h] = oc->hparams[h];
  for (gsize i = 0; i < total; i++)
    master[i] = (gfloat) g_rand_double_range (rand, -1, 1);
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, master, MAX (lay->working, 0), working,
                                        total, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  if (!lay->master && lay->working != MIXPREC_DTYPE_FLOAT32)
    {
      /* The parameter lives in the working copy: start from its values. */
      mixprec_convert_array (lay->working, working, MIXPREC_DTYPE_FLOAT32, master, total,
                             MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL);
    }
  for (guint s = 0; s < n_states; s++)
    {
      states[s] = g_new (gfloat, total);
      for (gsize i = 0; i < total; i++)
        /* The second moment of adamw must not be negative. */
        states[s][i] = (gfloat) (s == 1 ? g_rand_double_range (rand, 0, 0.01)
                                        : g_rand_double_range (rand, -0.1, 0.1));
      dev_states[s] = upload (device, states[s], 4 * total);
    }
  dev_master = upload (device, master, 4 * total);
  dev_working = upload (device, working, 4 * total);

  for (guint64 step = 1; step <= 3; step++)
    {
      MixprecOptimizerStepV1 cpu_args = { 0 }, gpu_args;
      gfloat *const cpu_states[2] = { states[0] != NULL ? states[0] + off : NULL,
                                      states[1] != NULL ? states[1] + off : NULL };
      gfloat *const gpu_states[2] = { dev_states[0] != NULL ? dev_states[0] + off : NULL,
                                      dev_states[1] != NULL ? dev_states[1] + off : NULL };
      g_autofree gchar *what = g_strdup_printf ("%s, grad %s, working %s, master %d, rounding %d, "
                                                "n %" G_GSIZE_FORMAT "+%" G_GSIZE_FORMAT ", step %"
                                                G_GUINT64_FORMAT, oc->label,
                                                mixprec_dtype_get_name (lay->grad),
                                                lay->working >= 0 ? mixprec_dtype_get_name (lay->working)
                                                                  : "none",
                                                lay->master, lay->rounding, off, n, step);

      /* Gradients of every size, a few zero, scaled by a loss scale. */
      for (gsize i = 0; i < total; i++)
        f[i] = g_rand_int_range (rand, 0, 50) == 0 ? 0.0f
                                                   : (gfloat) (g_rand_double_range (rand, -1, 1) *
                                                               pow (2, g_rand_int_range (rand, -6, 10)));
      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, f, lay->grad, grad, total,
                                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
      dev_grad = upload (device, grad, dsize (lay->grad) * total);

      cpu_args.step = step;
      cpu_args.lr = 1e-2 / (gdouble) step;
      cpu_args.grad_factor = 1.0f / 1024.0f * 3.0f;
      cpu_args.grad_dtype = (MixprecPluginDType) lay->grad;
      cpu_args.working_dtype = (MixprecPluginDType) MAX (lay->working, 0);
      cpu_args.rounding = (MixprecPluginRounding) lay->rounding;
      cpu_args.seed = 0x5EED0000 + step;
      cpu_args.first_index = shape->first_index;
      gpu_args = cpu_args;
      gpu_args.device_stream = _mixprec_device_get_stream (device);

      g_assert_true (_mixprec_feature_optimizer_step (cpu, &cpu_args, hparams,
                                                      lay->master ? master + off : NULL, grad + goff * dsize (lay->grad),
                                                      cpu_states,
                                                      lay->working >= 0 ? working + off * wsize : NULL,
                                                      n, &error));
      g_assert_no_error (error);
      if (device != NULL)
        {
          g_assert_true (_mixprec_feature_optimizer_step (gpu, &gpu_args, hparams,
                                                          lay->master ? dev_master + off : NULL,
                                                          (guint8 *) dev_grad + goff * dsize (lay->grad),
                                                          gpu_states,
                                                          lay->working >= 0 ? (guint8 *) dev_working + off * wsize
                                                                            : NULL,
                                                          n, &error));
          g_assert_no_error (error);
        }
      else
        {
          /* One element (or group) per thread, then grids small enough
           * that threads loop. */
          const gsize n_threads[] = { n / 4 + 4, 256, 8 };
          /* malloc'd arrays are 16-byte aligned: the groups start where
           * the offset leaves off, unless the gradient disagrees. */
          gint head = shape->grad_shift != 0 ? -1 : (gint) ((4 - off % 4) % 4);

          g_assert_cmpint (host_optimizer_step (oc->name, &gpu_args, hparams, n_hparams,
                                                lay->master ? dev_master + off : NULL,
                                                (guint8 *) dev_grad + goff * dsize (lay->grad),
                                                gpu_states,
                                                lay->working >= 0 ? (guint8 *) dev_working + off * wsize
                                                                  : NULL,
                                                n, n_threads[step - 1]), ==, head);
        }

      download (device, check, dev_master, 4 * total);
      assert_same (what, MIXPREC_DTYPE_FLOAT32, master, check, total, FALSE);
      for (guint s = 0; s < n_states; s++)
        {
          download (device, check, dev_states[s], 4 * total);
          assert_same (what, MIXPREC_DTYPE_FLOAT32, states[s], check, total, FALSE);
        }
      if (lay->working >= 0)
        {
          download (device, check, dev_working, wsize * total);
          assert_same (what, lay->working, working, check, total, FALSE);
        }
      _mixprec_device_free (device, dev_grad);
    }

  for (guint s = 0; s < n_states; s++)
    {
      _mixprec_device_free (device, dev_states[s]);
      g_free (states[s]);
    }
  _mixprec_device_free (device, dev_master);
  _mixprec_device_free (device, dev_working);
}

static void
run_optimizers (_MixprecDevice *device)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (2024);

  for (guint c = 0; c < G_N_ELEMENTS (opt_cases); c++)
    for (guint l = 0; l < G_N_ELEMENTS (layouts); l++)
      for (guint s = 0; s < G_N_ELEMENTS (shapes); s++)
        run_optimizer_case (device, &opt_cases[c], &layouts[l], &shapes[s], rand);
}

static void
test_optimizers (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();

  if (device != NULL)
    run_optimizers (device);
}

static void
test_host_optimizers (void)
{
  run_optimizers (NULL);
}

/* The default stream (NULL) of the current device works too. */
static void
test_optimizer_default_stream (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();
  g_autoptr(MixprecFeature) gpu = NULL;
  gfloat master[5] = { 1, 2, 3, 4, 5 }, grad[5] = { 1, -1, 0, 2, -2 }, out[5];
  gfloat *dev_master, *dev_grad, *dev_buf;
  MixprecOptimizerStepV1 args = { 0 };
  g_autoptr(GError) error = NULL;

  if (device == NULL)
    return;
  gpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, "sgd", "cuda");
  dev_master = upload (device, master, sizeof master);
  dev_grad = upload (device, grad, sizeof grad);
  dev_buf = upload (device, grad, sizeof grad);
  args.step = 1;
  args.lr = 0.5;
  args.grad_factor = 1.0f;
  g_assert_true (_mixprec_feature_optimizer_step (gpu, &args, NULL, dev_master, dev_grad,
                                                  (gfloat *const[]) { dev_buf }, NULL, 5, &error));
  g_assert_no_error (error);
  /* The legacy default stream does not order the handle's non-blocking
   * one: wait for the whole device. */
  g_assert_cmpint (cudaDeviceSynchronize (), ==, cudaSuccess);
  /* Plain SGD: p - lr * g, exactly (the products are exact here). */
  download (device, out, dev_master, sizeof out);
  for (guint i = 0; i < 5; i++)
    g_assert_cmpfloat (out[i], ==, master[i] - 0.5f * grad[i]);
  _mixprec_device_free (device, dev_master);
  _mixprec_device_free (device, dev_grad);
  _mixprec_device_free (device, dev_buf);
}

/* ------------------------------------------------------------ revision 3 formats
 *
 * Every state format and master format of optimizer revision 3, at block
 * sizes 32 .. 4096 with a short last block (odd where no slot is int4),
 * against a plain reference written here from numeric/numeric-quant.h and
 * numeric-optim.h: each element decoded, updated and its parameter
 * written in order, then each block's absmax, scale and codes. The cuda
 * kernel must give its bits whether run on the host (the blocked kernel's
 * phases, group by group) or on the GPU (the registered feature's
 * step()), and so must the cpu feature wherever it speaks the formats
 * (_mixprec_feature_optimizer_step_v3 on host memory). */

typedef struct {
  gint master_format;    /* a MixprecPluginMasterFormat */
  MixprecDType grad;
  gint working;          /* a MixprecDType, or -1 for none */
  gboolean master;       /* a float32 master buffer (master_format FLOAT32 only) */
  MixprecRounding rounding;
  MixprecRounding state_rounding;
} FmtLayout;

static const FmtLayout fmt_layouts[] = {
  { MIXPREC_PLUGIN_MASTER_FLOAT32, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, TRUE,
    MIXPREC_ROUNDING_NEAREST_EVEN, MIXPREC_ROUNDING_NEAREST_EVEN },
  { MIXPREC_PLUGIN_MASTER_FLOAT32, MIXPREC_DTYPE_FLOAT32, -1, TRUE,
    MIXPREC_ROUNDING_NEAREST_EVEN, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_PLUGIN_MASTER_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT16, FALSE,
    MIXPREC_ROUNDING_STOCHASTIC, MIXPREC_ROUNDING_NEAREST_EVEN },
  { MIXPREC_PLUGIN_MASTER_REMAINDER, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_BFLOAT16, FALSE,
    MIXPREC_ROUNDING_NEAREST_EVEN, MIXPREC_ROUNDING_STOCHASTIC },
  { MIXPREC_PLUGIN_MASTER_KAHAN, MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, FALSE,
    MIXPREC_ROUNDING_NEAREST_EVEN, MIXPREC_ROUNDING_NEAREST_EVEN },
};

static const OptCase fmt_cases[] = {
  { "adamw", "adamw", { NAN, 0.9, 0.999, 1e-8, 0.01, 1, 1 } },
  { "sgd", "sgd-momentum-dampening-wd", { NAN, 0.9, 0.1, 0.01, 0 } },
  { "sgd", "sgd-plain", { NAN, 0, 0, 0, 0 } },
  { "lion", "lion", { NAN, 0.9, 0.99, 0.1 } },
};

/* Slot formats: each format in both slots, then mixtures. */
static const MixprecPluginStateFormat fmt_pairs[][2] = {
  { MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_STATE_FLOAT32 },
  { MIXPREC_PLUGIN_STATE_BFLOAT16, MIXPREC_PLUGIN_STATE_BFLOAT16 },
  { MIXPREC_PLUGIN_STATE_FLOAT16_SCALED, MIXPREC_PLUGIN_STATE_FLOAT16_SCALED },
  { MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED, MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED },
  { MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED, MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED },
  { MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, MIXPREC_PLUGIN_STATE_INT8_DYNAMIC },
  { MIXPREC_PLUGIN_STATE_INT4_DYNAMIC, MIXPREC_PLUGIN_STATE_INT4_DYNAMIC },
  { MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, MIXPREC_PLUGIN_STATE_BFLOAT16 },
  { MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED, MIXPREC_PLUGIN_STATE_INT4_DYNAMIC },
  { MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_STATE_INT8_DYNAMIC },
};

static gboolean
fmt_blocked (MixprecPluginStateFormat f)
{
  return _mixprec_state_is_blocked ((unsigned) f);
}

typedef struct {
  const gchar *name;
  guint n_states;
  MixprecCudaOptimPrepare prepare;
  const MixprecHParamSpecV1 *hparams;
  guint n_hparams;
  guint signed_mask;
} FmtOptimizer;

static FmtOptimizer
fmt_optimizer (const gchar *name)
{
  if (g_str_equal (name, "adamw"))
    return (FmtOptimizer) { "adamw", 2, _mixprec_adamw_prepare, _mixprec_adamw_hparams,
                            G_N_ELEMENTS (_mixprec_adamw_hparams), 0x1 };
  if (g_str_equal (name, "sgd"))
    return (FmtOptimizer) { "sgd", 1, _mixprec_sgd_prepare, _mixprec_sgd_hparams,
                            G_N_ELEMENTS (_mixprec_sgd_hparams), 0x1 };
  return (FmtOptimizer) { "lion", 1, _mixprec_lion_prepare, _mixprec_lion_hparams,
                          G_N_ELEMENTS (_mixprec_lion_hparams), 0x1 };
}

/* The reference: one element at a time, then one block at a time. */
static void
fmt_reference (const FmtOptimizer             *opt,
               const MixprecOptimizerStepV3   *a,
               gfloat                         *master,
               gconstpointer                   grad,
               gpointer const                 *states,
               gpointer                        working,
               gsize                           n)
{
  const MixprecOptimizerStepV1 *b = &a->v2.base;
  gfloat consts[_MIXPREC_OPTIM_MAX_CONSTS];
  g_autofree gfloat *staged = g_new0 (gfloat, 2 * n);
  gsize bs = a->block_size != 0 ? a->block_size : n;
  SgdMode mode = SGD_MOMENTUM;
  gboolean writes = TRUE;
  char errbuf[256];

  g_assert_cmpint (opt->prepare (b, consts, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  if (g_str_equal (opt->name, "sgd"))
    {
      mode = (SgdMode) consts[SGD_MODE];
      writes = mode != SGD_PLAIN;
    }
  for (gsize i = 0; i < n; i++)
    {
      gfloat s[2] = { 0, 0 }, p, g;
      guint16 *w16 = working;

      for (guint k = 0; k < opt->n_states; k++)
        {
          unsigned f = a->state_formats[k];

          s[k] = _mixprec_state_decode1 (f, (opt->signed_mask >> k) & 1,
                                         _mixprec_state_load_code (f, states[k], i),
                                         fmt_blocked (f) ? a->state_scales[k][i / bs] : 1.0f);
        }
      switch (b->grad_dtype)
        {
        case MIXPREC_PLUGIN_DTYPE_BFLOAT16: g = _mixprec_bf16_to_f32 (((const guint16 *) grad)[i]); break;
        case MIXPREC_PLUGIN_DTYPE_FLOAT16: g = _mixprec_f16_to_f32 (((const guint16 *) grad)[i]); break;
        default: g = ((const gfloat *) grad)[i]; break;
        }
      g *= b->grad_factor;
      if (a->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER)
        p = _mixprec_remainder_join (w16[i], ((const gint16 *) a->master_extra)[i]);
      else if (a->master_format == MIXPREC_PLUGIN_MASTER_KAHAN || (master == NULL && b->working_dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16))
        p = _mixprec_bf16_to_f32 (w16[i]);
      else if (master == NULL && b->working_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT16)
        p = _mixprec_f16_to_f32 (w16[i]);
      else
        p = master != NULL ? master[i] : ((gfloat *) working)[i];

      if (g_str_equal (opt->name, "adamw"))
        p = _mixprec_adamw_update (consts, p, g, &s[0], &s[1]);
      else if (g_str_equal (opt->name, "lion"))
        p = _mixprec_lion_update (consts, p, g, &s[0]);
      else
        p = _mixprec_sgd_update (consts, p, g, &s[0], mode);

      if (a->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER)
        _mixprec_remainder_split (p, &w16[i], (gint16 *) a->master_extra + i);
      else if (a->master_format == MIXPREC_PLUGIN_MASTER_KAHAN)
        _mixprec_kahan_step (p, &w16[i], (guint16 *) a->master_extra + i);
      else
        {
          gboolean sr = b->rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;

          if (master != NULL)
            master[i] = p;
          if (working != NULL && b->working_dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
            w16[i] = sr ? _mixprec_f32_to_bf16_sr (p, _mixprec_sr_bits16 (b->seed, b->first_index + i))
                        : _mixprec_f32_to_bf16_rne (p);
          else if (working != NULL && b->working_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT16)
            w16[i] = sr ? _mixprec_f32_to_f16_sr (p, _mixprec_sr_bits (b->seed, b->first_index + i))
                        : _mixprec_f32_to_f16_rne (p);
          else if (working != NULL)
            ((gfloat *) working)[i] = p;
        }
      staged[i] = s[0];
      staged[n + i] = s[1];
    }
  for (guint k = 0; k < opt->n_states && writes; k++)
    {
      unsigned f = a->state_formats[k];
      int sgn = (opt->signed_mask >> k) & 1;
      const gfloat *v = staged + k * n;

      if (f == MIXPREC_PLUGIN_STATE_FLOAT32)
        memcpy (states[k], v, 4 * n);
      else if (f == MIXPREC_PLUGIN_STATE_BFLOAT16)
        for (gsize i = 0; i < n; i++)
          ((guint16 *) states[k])[i] =
            a->v2.state_rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC
              ? _mixprec_f32_to_bf16_sr (v[i], _mixprec_sr_bits16 (a->v2.state_seed + k, b->first_index + i))
              : _mixprec_f32_to_bf16_rne (v[i]);
      else
        for (gsize first = 0; first < n; first += bs)
          {
            gsize end = MIN (first + bs, n);
            guint32 amax = 0;
            gfloat scale;

            for (gsize i = first; i < end; i++)
              amax = _mixprec_absmax_bits (amax, v[i]);
            scale = _mixprec_state_block_scale (f, amax);
            a->state_scales[k][first / bs] = scale;
            for (gsize i = first; i < end; i++)
              _mixprec_state_store_code (f, states[k], i, _mixprec_state_encode1 (f, sgn, v[i], scale));
          }
    }
}

/* The cuda kernel on @device (NULL: its phases on the host, from the
 * launch the plugin's own argument code makes) over the same call. */
static void
fmt_kernel (_MixprecDevice               *device,
            const FmtOptimizer           *opt,
            const MixprecOptimizerStepV3 *a,
            gfloat                       *master,
            gconstpointer                 grad,
            gpointer const               *states,
            gpointer                      working,
            gsize                         n)
{
  MixprecOptimizerV3 schema = { .name = opt->name, .device = "cuda", .hparams = opt->hparams,
                                .n_hparams = opt->n_hparams, .n_state_slots = opt->n_states,
                                .state_names = (const char *const[]) { "s0", "s1" },
                                .state_format_mask = MIXPREC_CUDA_OPTIM_STATE_FORMATS,
                                .master_format_mask = MIXPREC_CUDA_OPTIM_MASTER_FORMATS,
                                .state_signed_mask = opt->signed_mask };
  MixprecCudaOptimLaunch launch;
  char errbuf[256];

  g_assert_cmpint (_mixprec_cuda_optim_args (&schema, opt->prepare, a, master, grad, states, working, n,
                                             &launch, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  if (device == NULL)
    test_cuda_host_optim_step (&launch, 8);
  else
    {
      /* On the GPU: the registered feature's own step(). */
      g_autoptr(MixprecFeature) gpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, opt->name, "cuda");
      MixprecOptimizerStepV3 args = *a;
      g_autoptr(GError) error = NULL;

      args.v2.base.device_stream = _mixprec_device_get_stream (device);
      g_assert_true (_mixprec_feature_optimizer_step_v3 (gpu, &args, a->v2.base.hparams, master, grad, states,
                                                         working, n, &error));
      g_assert_no_error (error);
    }
}

/* The buffers of one side (reference on the host, or the kernel's). */
typedef struct {
  gfloat *master;
  gpointer working, extra, grad;
  gpointer states[2];
  gfloat *scales[2];
} FmtBuffers;

/* Every buffer of @side (in @device's memory; NULL: the host's) against
 * the reference's, bit for bit. */
static void
fmt_compare (_MixprecDevice                 *device,
             const gchar                    *what,
             const gchar                    *who,
             const FmtBuffers               *ref,
             const FmtBuffers               *side,
             const FmtLayout                *lay,
             guint                           n_states,
             const MixprecPluginStateFormat *pair,
             gsize                           n,
             gsize                           n_blocks)
{
  g_autofree guint8 *check = g_malloc (4 * n + 4 * n_blocks);
  g_autofree gchar *label = g_strdup_printf ("%s (%s)", what, who);

  if (lay->master)
    {
      download (device, check, side->master, 4 * n);
      assert_same (label, MIXPREC_DTYPE_FLOAT32, ref->master, check, n, FALSE);
    }
  if (lay->working >= 0)
    {
      download (device, check, side->working, dsize (lay->working) * n);
      assert_same (label, lay->working, ref->working, check, n, FALSE);
    }
  if (lay->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32)
    {
      download (device, check, side->extra, 2 * n);
      if (memcmp (check, ref->extra, 2 * n) != 0)
        g_error ("%s: the master's second half differs", label);
    }
  for (guint k = 0; k < n_states; k++)
    {
      gsize bytes = _mixprec_state_bytes (pair[k], n);

      download (device, check, side->states[k], bytes);
      for (gsize i = 0; i < bytes; i++)
        if (check[i] != ((const guint8 *) ref->states[k])[i])
          g_error ("%s: state slot %u differs at byte %" G_GSIZE_FORMAT ": reference 0x%02x, got 0x%02x",
                   label, k, i, ((const guint8 *) ref->states[k])[i], check[i]);
      if (fmt_blocked (pair[k]))
        {
          download (device, check, side->scales[k], 4 * n_blocks);
          assert_same (label, MIXPREC_DTYPE_FLOAT32, ref->scales[k], check, n_blocks, FALSE);
        }
    }
}

/* A copy of @ref's buffers in @device's memory (NULL: the host's). */
static void
fmt_upload (_MixprecDevice   *device,
            const FmtBuffers *ref,
            FmtBuffers       *side,
            guint             n_states,
            gsize             n,
            gsize             n_blocks)
{
  side->master = upload (device, ref->master, 4 * n);
  side->working = upload (device, ref->working, 4 * n);
  side->extra = upload (device, ref->extra, 2 * n);
  for (guint k = 0; k < n_states; k++)
    {
      side->states[k] = upload (device, ref->states[k], 4 * n);
      side->scales[k] = upload (device, ref->scales[k], 4 * n_blocks);
    }
}

static void
fmt_free (_MixprecDevice *device,
          FmtBuffers     *side,
          guint           n_states)
{
  for (guint k = 0; k < n_states; k++)
    {
      _mixprec_device_free (device, side->states[k]);
      _mixprec_device_free (device, side->scales[k]);
    }
  _mixprec_device_free (device, side->master);
  _mixprec_device_free (device, side->working);
  _mixprec_device_free (device, side->extra);
}

/* Whether the cpu feature speaks @pair and @master (once the cpu plugins
 * register revision 3; until then the reference stands alone). */
static gboolean
cpu_speaks (MixprecFeature                 *cpu,
            guint                           n_states,
            const MixprecPluginStateFormat *pair,
            gint                            master)
{
  if ((mixprec_feature_get_master_format_mask (cpu) & (1u << master)) == 0)
    return FALSE;
  for (guint k = 0; k < n_states; k++)
    if ((mixprec_feature_get_state_format_mask (cpu) & (1u << pair[k])) == 0)
      return FALSE;
  return TRUE;
}

/* How many cases the cpu feature joined, for the log. */
static guint fmt_cpu_cases, fmt_cases_run;

static void
run_formats_case (_MixprecDevice                 *device,
                  const OptCase                  *oc,
                  const FmtLayout                *lay,
                  const MixprecPluginStateFormat *pair,
                  guint                           block_size,
                  gsize                           n,
                  GRand                          *rand)
{
  FmtOptimizer opt = fmt_optimizer (oc->name);
  g_autoptr(MixprecFeature) cpu = find (MIXPREC_FEATURE_KIND_OPTIMIZER, oc->name, "cpu");
  guint n_hparams;
  const gdouble *defaults = _mixprec_feature_get_hparam_defaults (cpu, &n_hparams);
  g_autofree gdouble *hparams = g_memdup2 (defaults, n_hparams * sizeof (gdouble));
  gboolean any_blocked = FALSE;
  gsize n_blocks = n / block_size + 1;
  FmtBuffers ref = { 0 }, dev = { 0 }, host = { 0 };
  g_autofree gfloat *f = g_new (gfloat, n + 1);     /* n may grow by one below */
  gboolean with_cpu;

  for (guint h = 0; h < n_hparams && h < G_N_ELEMENTS (oc->hparams); h++)
    if (!isnan (oc->hparams[h]))
      hparams[h] = oc->hparams[h];
  for (guint k = 0; k < opt.n_states; k++)
    {
      any_blocked |= fmt_blocked (pair[k]);
      /* int4 codes go two to a byte: calls cover even counts. */
      if (pair[k] == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC)
        n += n % 2;
    }

  /* The starting point: a master, its working copy (and remainder or
   * compensation), and states encoded from random FP32 values. */
  ref.master = g_new (gfloat, n);
  for (gsize i = 0; i < n; i++)
    ref.master[i] = (gfloat) g_rand_double_range (rand, -1, 1);
  ref.working = g_malloc0 (4 * n);
  ref.extra = g_malloc0 (2 * n);
  if (lay->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER)
    for (gsize i = 0; i < n; i++)
      _mixprec_remainder_split (ref.master[i], (guint16 *) ref.working + i, (gint16 *) ref.extra + i);
  else
    {
      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, ref.master, MAX (lay->working, 0),
                                            ref.working, n, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
      if (lay->master_format == MIXPREC_PLUGIN_MASTER_KAHAN)
        for (gsize i = 0; i < n; i++)
          ((guint16 *) ref.extra)[i] = _mixprec_f32_to_bf16_rne ((gfloat) g_rand_double_range (rand, -1e-3, 1e-3));
    }
  for (guint k = 0; k < opt.n_states; k++)
    {
      unsigned fm = pair[k];
      int sgn = (opt.signed_mask >> k) & 1;
      gsize bs = any_blocked ? block_size : n;

      ref.states[k] = g_malloc0 (4 * n);
      ref.scales[k] = g_new0 (gfloat, n_blocks);
      for (gsize i = 0; i < n; i++)
        f[i] = (gfloat) (k == 1 ? g_rand_double_range (rand, 0, 0.01) : g_rand_double_range (rand, -0.1, 0.1));
      for (gsize first = 0; first < n; first += bs)
        {
          gsize end = MIN (first + bs, n);
          guint32 amax = 0;
          gfloat scale;

          for (gsize i = first; i < end; i++)
            amax = _mixprec_absmax_bits (amax, f[i]);
          scale = _mixprec_state_block_scale (fm, amax);
          ref.scales[k][first / bs] = scale;
          for (gsize i = first; i < end; i++)
            _mixprec_state_store_code (fm, ref.states[k], i, _mixprec_state_encode1 (fm, sgn, f[i], scale));
        }
    }
  ref.grad = g_malloc (4 * n);
  fmt_upload (device, &ref, &dev, opt.n_states, n, n_blocks);
  with_cpu = cpu_speaks (cpu, opt.n_states, pair, lay->master_format);
  fmt_cpu_cases += with_cpu;
  fmt_cases_run++;
  if (with_cpu)
    fmt_upload (NULL, &ref, &host, opt.n_states, n, n_blocks);

  for (guint64 step = 1; step <= 2; step++)
    {
      MixprecOptimizerStepV3 a = { 0 };
      MixprecOptimizerStepV1 *b = &a.v2.base;
      gfloat *ref_scales[2] = { NULL, NULL }, *dev_scales[2] = { NULL, NULL };
      g_autofree gchar *what = NULL;

      for (gsize i = 0; i < n; i++)
        f[i] = g_rand_int_range (rand, 0, 50) == 0 ? 0.0f
                                                   : (gfloat) (g_rand_double_range (rand, -1, 1) *
                                                               pow (2, g_rand_int_range (rand, -6, 10)));
      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, f, lay->grad, ref.grad, n,
                                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
      dev.grad = upload (device, ref.grad, dsize (lay->grad) * n);

      b->struct_size = sizeof a;
      b->hparams = hparams;
      b->n_hparams = n_hparams;
      b->step = step;
      b->lr = 1e-2 / (gdouble) step;
      b->grad_factor = 1.0f / 1024.0f * 3.0f;
      b->grad_dtype = (MixprecPluginDType) lay->grad;
      b->working_dtype = (MixprecPluginDType) MAX (lay->working, 0);
      b->rounding = (MixprecPluginRounding) lay->rounding;
      b->seed = 0x5EED0000 + step;
      b->first_index = G_GUINT64_CONSTANT (0xFFFFFFFF) - 1000;
      a.v2.state_rounding = (MixprecPluginRounding) lay->state_rounding;
      a.v2.state_seed = 0xABCD0000 + step;
      a.state_formats = pair;
      a.block_size = any_blocked ? block_size : 0;
      a.master_format = (MixprecPluginMasterFormat) lay->master_format;
      what = g_strdup_printf ("%s, master %d, grad %s, working %d, formats %d/%d, block %u, n %"
                              G_GSIZE_FORMAT ", step %" G_GUINT64_FORMAT, oc->label, lay->master_format,
                              mixprec_dtype_get_name (lay->grad), lay->working, (gint) pair[0],
                              opt.n_states > 1 ? (gint) pair[1] : -1, a.block_size, n, step);

      for (guint k = 0; k < opt.n_states; k++)
        if (fmt_blocked (pair[k]))
          {
            ref_scales[k] = ref.scales[k];
            dev_scales[k] = dev.scales[k];
          }
      a.state_scales = ref_scales;
      a.master_extra = lay->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? ref.extra : NULL;
      fmt_reference (&opt, &a, lay->master ? ref.master : NULL, ref.grad, ref.states,
                     lay->working >= 0 ? ref.working : NULL, n);
      a.state_scales = dev_scales;
      a.master_extra = lay->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? dev.extra : NULL;
      fmt_kernel (device, &opt, &a, lay->master ? dev.master : NULL, dev.grad, dev.states,
                  lay->working >= 0 ? dev.working : NULL, n);

      fmt_compare (device, what, device != NULL ? "cuda" : "cuda kernel on the host", &ref, &dev, lay,
                   opt.n_states, pair, n, n_blocks);
      if (with_cpu)
        {
          gfloat *cpu_scales[2] = { NULL, NULL };
          g_autoptr(GError) error = NULL;
          gboolean ok;

          for (guint k = 0; k < opt.n_states; k++)
            cpu_scales[k] = fmt_blocked (pair[k]) ? host.scales[k] : NULL;
          a.state_scales = cpu_scales;
          a.master_extra = lay->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? host.extra : NULL;
          ok = _mixprec_feature_optimizer_step_v3 (cpu, &a, hparams, lay->master ? host.master : NULL, ref.grad,
                                                   host.states, lay->working >= 0 ? host.working : NULL, n,
                                                   &error);
          g_assert_no_error (error);
          g_assert_true (ok);
          fmt_compare (NULL, what, "cpu feature", &ref, &host, lay, opt.n_states, pair, n, n_blocks);
        }
      _mixprec_device_free (device, dev.grad);
    }

  fmt_free (device, &dev, opt.n_states);
  if (with_cpu)
    fmt_free (NULL, &host, opt.n_states);
  for (guint k = 0; k < opt.n_states; k++)
    {
      g_free (ref.states[k]);
      g_free (ref.scales[k]);
    }
  g_free (ref.master);
  g_free (ref.working);
  g_free (ref.extra);
  g_free (ref.grad);
}

static void
run_formats (_MixprecDevice *device)
{
  static const guint block_sizes[] = { 32, 64, 128, 256, 512, 1024, 2048, 4096 };
  g_autoptr(GRand) rand = g_rand_new_with_seed (2026);

  fmt_cpu_cases = fmt_cases_run = 0;

  /* Every optimizer, master layout and slot format pair at 128 and 4096,
   * with a short last block. */
  for (guint c = 0; c < G_N_ELEMENTS (fmt_cases); c++)
    for (guint l = 0; l < G_N_ELEMENTS (fmt_layouts); l++)
      for (guint p = 0; p < G_N_ELEMENTS (fmt_pairs); p++)
        {
          run_formats_case (device, &fmt_cases[c], &fmt_layouts[l], fmt_pairs[p], 128, 3 * 128 + 77, rand);
          run_formats_case (device, &fmt_cases[c], &fmt_layouts[l], fmt_pairs[p], 4096, 4096 + 1001, rand);
        }
  /* Every block size for the quantized formats: whole blocks, and a
   * short even last block. */
  for (guint s = 0; s < G_N_ELEMENTS (block_sizes); s++)
    for (guint p = 4; p <= 8; p++)
      {
        guint bs = block_sizes[s];

        run_formats_case (device, &fmt_cases[0], &fmt_layouts[s % G_N_ELEMENTS (fmt_layouts)], fmt_pairs[p],
                          bs, 3 * bs, rand);
        run_formats_case (device, &fmt_cases[0], &fmt_layouts[(s + 1) % G_N_ELEMENTS (fmt_layouts)],
                          fmt_pairs[p], bs, 2 * bs + bs / 2 + 2, rand);
      }
  g_test_message ("%u cases, %u of them also on the cpu feature (the formats it speaks)", fmt_cases_run,
                  fmt_cpu_cases);
}

static void
test_host_formats (void)
{
  run_formats (NULL);
}

static void
test_formats (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();

  if (device != NULL)
    run_formats (device);
}

/* ------------------------------------------------------------ float8 casts
 *
 * The kernels of cuda-fp8.cu are not reached through the plugin ABI (yet):
 * their element code, compiled by nvcc, runs on the host against the
 * library's scalar kernels. */

static gfloat *
fp8_source (GRand *rand,
            gsize  n)
{
  gfloat *x = g_new (gfloat, n);

  for (gsize i = 0; i < n; i++)
    {
      guint32 u = g_rand_int (rand);

      if (i % 2 == 0)
        memcpy (&x[i], &u, sizeof u);       /* every exponent, NaN and Inf */
      else
        x[i] = (gfloat) ldexp (g_rand_double_range (rand, -2, 2), g_rand_int_range (rand, -30, 20));
    }
  return x;
}

static void
test_host_fp8 (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (808);
  const _MixprecFp8Kernels *ref = _mixprec_fp8_kernels_for_level (_MIXPREC_SIMD_SCALAR);
  const gsize n = 200003;
  g_autofree gfloat *x = fp8_source (rand, n);
  g_autofree guint8 *expected = g_malloc (n);
  g_autofree guint8 *actual = g_malloc (n);
  g_autofree gfloat *back_expected = g_new (gfloat, n);
  g_autofree gfloat *back_actual = g_new (gfloat, n);
  static const gfloat scales[] = { 1.0f, 0.37f, 0x1p-12f, 3.5e20f };

  for (guint format = 0; format <= 1; format++)
    for (gint sat = 0; sat <= 1; sat++)
      for (guint s = 0; s < G_N_ELEMENTS (scales); s++)
        {
          MixprecDType dt = format == 0 ? MIXPREC_DTYPE_FLOAT8_E4M3 : MIXPREC_DTYPE_FLOAT8_E5M2;
          guint32 amax_expected = 0, amax_actual = 0;

          ref->quantize (format, sat, scales[s], x, expected, n, &amax_expected);
          test_cuda_host_fp8_quantize (x, actual, n, (int) format, sat, scales[s], &amax_actual);
          g_assert_cmpmem (actual, n, expected, n);
          g_assert_cmphex (amax_actual, ==, amax_expected);

          g_assert_true (mixprec_fp8_dequantize (dt, expected, n, 1.0f / scales[s], back_expected, NULL));
          test_cuda_host_fp8_dequantize (expected, back_actual, n, (int) format, 1.0f / scales[s]);
          for (gsize i = 0; i < n; i++)
            g_assert_true (memcmp (&back_actual[i], &back_expected[i], 4) == 0 ||
                           (isnan (back_actual[i]) && isnan (back_expected[i])));
        }
}

static void
test_host_mx (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (809);
  const _MixprecFp8Kernels *ref = _mixprec_fp8_kernels_for_level (_MIXPREC_SIMD_SCALAR);
  const gsize n = 100000 + 13;
  g_autofree gfloat *x = fp8_source (rand, n);
  g_autofree guint8 *expected = g_malloc (n);
  g_autofree guint8 *actual = g_malloc (n);
  g_autofree gfloat *back_expected = g_new (gfloat, n);
  g_autofree gfloat *back_actual = g_new (gfloat, n);
  static const guint block_sizes[] = { 32, 7 };

  /* Blocks of small values too, so that every shared exponent occurs. */
  for (gsize i = 0; i < n; i++)
    if ((i / 32) % 3 == 0)
      x[i] = (gfloat) ldexp (g_rand_double_range (rand, -1, 1), (gint) ((i / 32) % 280) - 150);

  for (guint format = 0; format <= 1; format++)
    for (guint b = 0; b < G_N_ELEMENTS (block_sizes); b++)
      {
        MixprecDType dt = format == 0 ? MIXPREC_DTYPE_FLOAT8_E4M3 : MIXPREC_DTYPE_FLOAT8_E5M2;
        gsize nb = (n + block_sizes[b] - 1) / block_sizes[b];
        g_autofree guint8 *scales_expected = g_malloc (nb);
        g_autofree guint8 *scales_actual = g_malloc (nb);

        ref->mx_quantize (format, block_sizes[b], x, n, expected, scales_expected);
        test_cuda_host_mx_quantize (x, n, (int) format, block_sizes[b], actual, scales_actual);
        g_assert_cmpmem (scales_actual, nb, scales_expected, nb);
        g_assert_cmpmem (actual, n, expected, n);

        g_assert_true (mixprec_mx_dequantize (dt, expected, scales_expected, n, block_sizes[b],
                                              back_expected, NULL));
        test_cuda_host_mx_dequantize (expected, scales_expected, back_actual, n, (int) format, block_sizes[b]);
        for (gsize i = 0; i < n; i++)
          g_assert_true (memcmp (&back_actual[i], &back_expected[i], 4) == 0 ||
                         (isnan (back_actual[i]) && isnan (back_expected[i])));
      }
}

/* The device ABI 1.3 entry points on the GPU against the library's CPU
 * casts (_mixprec_device_fp8_cast() and _mixprec_device_mx_cast() with no
 * device): the bytes, the running amax in device memory (started from a
 * value already there, then an amax-only pass) and the MX scales. */
static void
test_fp8_entry_points (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();
  g_autoptr(GRand) rand = g_rand_new_with_seed (909);
  const gsize n = 300007;
  g_autofree gfloat *x = NULL;
  g_autofree guint8 *expected = NULL, *actual = NULL, *scales_expected = NULL, *scales_actual = NULL;
  gpointer dev_x, dev_dst, dev_scales, dev_amax;

  if (device == NULL)
    return;
  x = fp8_source (rand, n);
  expected = g_malloc0 (n);
  actual = g_malloc (n);
  scales_expected = g_malloc0 (n / 32 + 1);
  scales_actual = g_malloc (n / 32 + 1);
  dev_x = upload (device, x, n * sizeof (gfloat));
  dev_dst = upload (device, expected, n);
  dev_scales = upload (device, scales_expected, n / 32 + 1);
  for (guint format = 0; format <= 1; format++)
    {
      MixprecDType dt = format == 0 ? MIXPREC_DTYPE_FLOAT8_E4M3 : MIXPREC_DTYPE_FLOAT8_E5M2;

      for (gint sat = 0; sat <= 1; sat++)
        {
          g_autoptr(GError) error = NULL;
          gfloat amax_expected = 0.25f, amax_actual = 0.25f, only = 0.0f;

          dev_amax = upload (device, &amax_actual, sizeof amax_actual);
          g_assert_true (_mixprec_device_fp8_cast (NULL, dt, sat, 0.37f, x, expected, n,
                                                   &amax_expected, &error));
          g_assert_true (_mixprec_device_fp8_cast (device, dt, sat, 0.37f, dev_x, dev_dst, n,
                                                   dev_amax, &error));
          g_assert_no_error (error);
          download (device, actual, dev_dst, n);
          download (device, &amax_actual, dev_amax, sizeof amax_actual);
          g_assert_cmpmem (actual, n, expected, n);
          g_assert_cmpmem (&amax_actual, 4, &amax_expected, 4);
          /* The amax only: the slot zeroed, no bytes written. */
          amax_expected = 0.0f;
          g_assert_true (_mixprec_device_zero (device, dev_amax, sizeof (gfloat), &error));
          g_assert_true (_mixprec_device_fp8_cast (device, dt, sat, 0.37f, dev_x, NULL, n, dev_amax,
                                                   &error));
          g_assert_no_error (error);
          download (device, &only, dev_amax, sizeof only);
          g_assert_true (_mixprec_device_fp8_cast (NULL, dt, sat, 1.0f, x, NULL, n, &amax_expected,
                                                   &error));
          g_assert_cmpmem (&only, 4, &amax_expected, 4);
          _mixprec_device_free (device, dev_amax);
        }
      {
        g_autoptr(GError) error = NULL;

        g_assert_true (_mixprec_device_mx_cast (NULL, dt, 32, x, expected, scales_expected, n, &error));
        g_assert_true (_mixprec_device_mx_cast (device, dt, 32, dev_x, dev_dst, dev_scales, n, &error));
        g_assert_no_error (error);
        download (device, actual, dev_dst, n);
        download (device, scales_actual, dev_scales, (n + 31) / 32);
        g_assert_cmpmem (actual, n, expected, n);
        g_assert_cmpmem (scales_actual, (n + 31) / 32, scales_expected, (n + 31) / 32);
      }
    }
  _mixprec_device_free (device, dev_x);
  _mixprec_device_free (device, dev_dst);
  _mixprec_device_free (device, dev_scales);
}

/* ------------------------------------------------------------ 4-bit blocks
 *
 * The kernels of cuda-fp4.cu are not reached through the plugin ABI: the
 * engine keeps its 4-bit copies on the CPU. Their bodies, compiled by
 * nvcc, run on the host against mixprec_quantize_blocks(),
 * mixprec_dequantize_blocks() and mixprec_rht_apply() here, and on a GPU
 * in test_fp4_gpu(). */

#define FP4_ROWS 401            /* the last 16x16 tile row is one row */
#define FP4_COLS 256

/* A matrix whose 32-element blocks (and so 16-element ones) take turns:
 * all zeros, one NaN, ±Inf, subnormals only, huge values beside tiny ones
 * (E4M3 and E8M0 saturate, elements clamp to ±6), every exponent, random
 * bits (NaN and Inf of any payload included), and ordinary values. */
static gfloat *
fp4_source (GRand *rand)
{
  const gsize n = (gsize) FP4_ROWS * FP4_COLS;
  gfloat *x = g_new (gfloat, n);

  for (gsize i = 0; i < n; i++)
    {
      gsize b = i / 32;
      guint32 u = g_rand_int (rand);
      gdouble v = g_rand_double_range (rand, -2, 2);

      switch (b % 9)
        {
        case 0:
          x[i] = (i & 1) ? -0.0f : 0.0f;
          break;
        case 1:
          x[i] = i % 32 == 5 ? NAN : (gfloat) v;
          break;
        case 2:
          x[i] = i % 32 == 7 ? INFINITY : i % 32 == 8 ? -INFINITY : (gfloat) v;
          break;
        case 3:
          x[i] = (gfloat) ldexp (v, -140);
          break;
        case 4:
          x[i] = i % 32 == 3 ? (gfloat) ldexp (v, 126) : (gfloat) ldexp (v, -100);
          break;
        case 5:
          x[i] = (gfloat) ldexp (v, (gint) (b % 260) - 130);
          break;
        case 6:
          memcpy (&x[i], &u, sizeof u);
          break;
        default:
          x[i] = (gfloat) ldexp (v, g_rand_int_range (rand, -8, 8));
        }
    }
  return x;
}

static gboolean
same_f32 (gfloat a,
          gfloat b)
{
  return memcmp (&a, &b, sizeof a) == 0 || (isnan (a) && isnan (b));
}

/* Recipe r of the five cases: NVFP4, NVFP4 16x16, MXFP4 in each mode. */
static void
fp4_case (guint               r,
          MixprecBlockRecipe *recipe,
          MixprecMxScaleMode *mode)
{
  *recipe = r < 2 ? (MixprecBlockRecipe) r : MIXPREC_BLOCK_RECIPE_MXFP4;
  *mode = r < 2 ? MIXPREC_MX_SCALE_FLOOR : (MixprecMxScaleMode) (r - 2);
}

static void
check_host_fp4 (const gfloat *x,
                gsize         rows)
{
  const gsize n = rows * FP4_COLS;
  g_autofree guint8 *expected = g_malloc (n / 2), *actual = g_malloc (n / 2);
  g_autofree guint8 *sc_expected = g_malloc (n / 16), *sc_actual = g_malloc (n / 16);
  g_autofree gfloat *back_expected = g_new (gfloat, n), *back_actual = g_new (gfloat, n);

  for (guint r = 0; r < 6; r++)
    for (guint stochastic = 0; stochastic <= 1; stochastic++)
      {
        g_autoptr(GError) error = NULL;
        MixprecBlockRecipe recipe;
        MixprecMxScaleMode mode;
        gfloat ts_expected = 0.0f, ts_actual = -1.0f;
        gsize nb;

        fp4_case (r, &recipe, &mode);
        nb = n / mixprec_block_recipe_get_block_size (recipe);
        g_assert_true (mixprec_quantize_blocks (recipe, mode, x, rows, FP4_COLS,
                                                stochastic ? MIXPREC_ROUNDING_STOCHASTIC
                                                           : MIXPREC_ROUNDING_NEAREST_EVEN,
                                                0x5EED4ull, expected, sc_expected, &ts_expected, &error));
        g_assert_no_error (error);
        test_cuda_host_fp4_quantize ((gint) recipe, (gint) mode, x, rows, FP4_COLS, (gint) stochastic,
                                     0x5EED4ull, actual, sc_actual, &ts_actual);
        g_assert_cmpmem (sc_actual, nb, sc_expected, nb);
        g_assert_cmpmem (actual, n / 2, expected, n / 2);
        g_assert_cmpmem (&ts_actual, 4, &ts_expected, 4);

        g_assert_true (mixprec_dequantize_blocks (recipe, expected, sc_expected, ts_expected, rows,
                                                  FP4_COLS, back_expected, &error));
        test_cuda_host_fp4_dequantize ((gint) recipe, expected, sc_expected, ts_expected, n, back_actual);
        for (gsize i = 0; i < n; i++)
          g_assert_true (same_f32 (back_actual[i], back_expected[i]));
      }
}

static void
test_host_fp4 (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (404);
  g_autofree gfloat *x = fp4_source (rand);
  const gsize n = (gsize) FP4_ROWS * FP4_COLS;

  check_host_fp4 (x, FP4_ROWS);
  /* A tensor of zeros (NVFP4's tensor scale 0, every block scale NaN)
   * and one whose amax is NaN, on fewer rows. */
  memset (x, 0, 32 * FP4_COLS * sizeof (gfloat));
  check_host_fp4 (x, 32);
  x[100] = NAN;
  check_host_fp4 (x, 32);
  g_assert_cmpuint (n, >=, 100000);
}

/* The random Hadamard transform, both ways, in place too, against
 * mixprec_rht_apply() on the same matrix (its NaN, Inf, subnormal and
 * huge groups included: sums that overflow give Inf, Inf - Inf NaN). */
static void
test_host_rht (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (406);
  g_autofree gfloat *x = fp4_source (rand);
  const gsize n = (gsize) FP4_ROWS * FP4_COLS;
  g_autofree gfloat *expected = g_new (gfloat, n), *actual = g_new (gfloat, n);

  for (gint inverse = 0; inverse <= 1; inverse++)
    for (guint s = 0; s < 3; s++)
      {
        guint16 mask = s == 0 ? 0 : s == 1 ? 0xFFFF : mixprec_rht_sign_mask (1234);

        g_assert_true (mixprec_rht_apply (x, n, mask, inverse, expected, NULL));
        test_cuda_host_rht (x, n, mask, inverse, actual);
        for (gsize i = 0; i < n; i++)
          g_assert_true (same_f32 (actual[i], expected[i]));
        memcpy (actual, x, n * sizeof (gfloat));
        test_cuda_host_rht (actual, n, mask, inverse, actual);
        for (gsize i = 0; i < n; i++)
          g_assert_true (same_f32 (actual[i], expected[i]));
      }
}

/* The same cases on the GPU through cuda-fp4.cu's launchers, against the
 * library on the CPU. */
static void
test_fp4_gpu (void)
{
  g_autoptr(_MixprecDevice) device = open_or_skip ();
  g_autoptr(GRand) rand = g_rand_new_with_seed (405);
  const gsize n = (gsize) FP4_ROWS * FP4_COLS;
  g_autofree gfloat *x = NULL, *back_expected = NULL, *back_actual = NULL;
  g_autofree guint8 *expected = NULL, *actual = NULL, *sc_expected = NULL, *sc_actual = NULL;
  gfloat *d_x, *d_back, *d_ts;
  guint8 *d_dst, *d_sc;
  guint32 *d_amax;

  if (device == NULL)
    return;
  x = fp4_source (rand);
  expected = g_malloc (n / 2);
  actual = g_malloc (n / 2);
  sc_expected = g_malloc (n / 16);
  sc_actual = g_malloc (n / 16);
  back_expected = g_new (gfloat, n);
  back_actual = g_new (gfloat, n);
  g_assert_cmpint (cudaMalloc ((void **) &d_x, n * sizeof (gfloat)), ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &d_back, n * sizeof (gfloat)), ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &d_ts, sizeof (gfloat)), ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &d_dst, n / 2), ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &d_sc, n / 16), ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &d_amax, sizeof (guint32)), ==, cudaSuccess);
  /* The matrix, then 32 rows of zeros, then those with a NaN. */
  for (guint t = 0; t < 3; t++)
    for (guint r = 0; r < 6; r++)
      for (guint stochastic = 0; stochastic <= 1; stochastic++)
        {
          g_autoptr(GError) error = NULL;
          MixprecBlockRecipe recipe;
          MixprecMxScaleMode mode;
          gfloat ts_expected = 0.0f, ts_actual = -1.0f;
          const char *call = NULL;
          gsize rows = t == 0 ? FP4_ROWS : 32, m = rows * FP4_COLS, nb;

          if (r == 0 && stochastic == 0)
            {
              if (t == 1)
                memset (x, 0, m * sizeof (gfloat));
              else if (t == 2)
                x[100] = NAN;
              g_assert_cmpint (cudaMemcpy (d_x, x, m * sizeof (gfloat), cudaMemcpyHostToDevice), ==,
                               cudaSuccess);
            }
          fp4_case (r, &recipe, &mode);
          nb = m / mixprec_block_recipe_get_block_size (recipe);
          g_assert_true (mixprec_quantize_blocks (recipe, mode, x, rows, FP4_COLS,
                                                  stochastic ? MIXPREC_ROUNDING_STOCHASTIC
                                                             : MIXPREC_ROUNDING_NEAREST_EVEN,
                                                  0x5EED4ull, expected, sc_expected, &ts_expected, &error));
          g_assert_cmpint (cudaMemcpy (d_ts, &ts_actual, sizeof ts_actual, cudaMemcpyHostToDevice), ==,
                           cudaSuccess);
          g_assert_cmpint (_mixprec_cuda_fp4_quantize ((gint) recipe, (gint) mode, d_x, rows, FP4_COLS,
                                                       (gint) stochastic, 0x5EED4ull, d_dst, d_sc, d_amax,
                                                       recipe == MIXPREC_BLOCK_RECIPE_MXFP4 ? NULL : d_ts,
                                                       0, &call), ==, cudaSuccess);
          g_assert_cmpint (_mixprec_cuda_fp4_dequantize ((gint) recipe, d_dst, d_sc, d_ts, m, d_back, 0, &call),
                           ==, cudaSuccess);
          g_assert_cmpint (cudaDeviceSynchronize (), ==, cudaSuccess);
          g_assert_cmpint (cudaMemcpy (actual, d_dst, m / 2, cudaMemcpyDeviceToHost), ==, cudaSuccess);
          g_assert_cmpint (cudaMemcpy (sc_actual, d_sc, nb, cudaMemcpyDeviceToHost), ==, cudaSuccess);
          g_assert_cmpint (cudaMemcpy (back_actual, d_back, m * sizeof (gfloat), cudaMemcpyDeviceToHost), ==,
                           cudaSuccess);
          g_assert_cmpmem (sc_actual, nb, sc_expected, nb);
          g_assert_cmpmem (actual, m / 2, expected, m / 2);
          if (recipe != MIXPREC_BLOCK_RECIPE_MXFP4)
            {
              g_assert_cmpint (cudaMemcpy (&ts_actual, d_ts, sizeof ts_actual, cudaMemcpyDeviceToHost), ==,
                               cudaSuccess);
              g_assert_cmpmem (&ts_actual, 4, &ts_expected, 4);
            }
          g_assert_true (mixprec_dequantize_blocks (recipe, expected, sc_expected, ts_expected, rows,
                                                    FP4_COLS, back_expected, &error));
          for (gsize i = 0; i < m; i++)
            g_assert_true (same_f32 (back_actual[i], back_expected[i]));
        }
  /* The random Hadamard transform, into d_back and in place, on a fresh
   * matrix. */
  g_free (x);
  x = fp4_source (rand);
  g_assert_cmpint (cudaMemcpy (d_x, x, n * sizeof (gfloat), cudaMemcpyHostToDevice), ==, cudaSuccess);
  for (gint inverse = 0; inverse <= 1; inverse++)
    {
      guint16 mask = mixprec_rht_sign_mask (1234);
      const char *call = NULL;

      g_assert_true (mixprec_rht_apply (x, n, mask, inverse, back_expected, NULL));
      g_assert_cmpint (_mixprec_cuda_rht (d_x, n, mask, inverse, d_back, 0, &call), ==, cudaSuccess);
      g_assert_cmpint (cudaMemcpy (back_actual, d_back, n * sizeof (gfloat), cudaMemcpyDeviceToHost), ==,
                       cudaSuccess);
      for (gsize i = 0; i < n; i++)
        g_assert_true (same_f32 (back_actual[i], back_expected[i]));
      g_assert_cmpint (cudaMemcpy (d_back, x, n * sizeof (gfloat), cudaMemcpyHostToDevice), ==, cudaSuccess);
      g_assert_cmpint (_mixprec_cuda_rht (d_back, n, mask, inverse, d_back, 0, &call), ==, cudaSuccess);
      g_assert_cmpint (cudaMemcpy (back_actual, d_back, n * sizeof (gfloat), cudaMemcpyDeviceToHost), ==,
                       cudaSuccess);
      for (gsize i = 0; i < n; i++)
        g_assert_true (same_f32 (back_actual[i], back_expected[i]));
    }
  cudaFree (d_x);
  cudaFree (d_back);
  cudaFree (d_ts);
  cudaFree (d_dst);
  cudaFree (d_sc);
  cudaFree (d_amax);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/device-cuda/registered", test_registered);
  g_test_add_func ("/device-cuda/probe-and-open", test_probe_and_open);
  g_test_add_func ("/device-cuda/bad-local-rank", test_bad_local_rank);
  g_test_add_func ("/device-cuda/null-handle", test_null_handle);
  g_test_add_func ("/device-cuda/optimizer/bad-arguments", test_optimizer_bad_arguments);
  g_test_add_func ("/device-cuda/host/convert", test_host_convert);
  g_test_add_func ("/device-cuda/host/accumulate-scale", test_host_accumulate_scale);
  g_test_add_func ("/device-cuda/host/optimizers", test_host_optimizers);
  g_test_add_func ("/device-cuda/host/optimizer-formats", test_host_formats);
  g_test_add_func ("/device-cuda/host/fp8", test_host_fp8);
  g_test_add_func ("/device-cuda/host/mx", test_host_mx);
  g_test_add_func ("/device-cuda/host/fp4", test_host_fp4);
  g_test_add_func ("/device-cuda/host/rht", test_host_rht);
  g_test_add_func ("/device-cuda/gpu/convert", test_convert);
  g_test_add_func ("/device-cuda/gpu/accumulate-scale", test_accumulate_scale);
  g_test_add_func ("/device-cuda/gpu/sumsq-blocks", test_sumsq_blocks);
  g_test_add_func ("/device-cuda/gpu/optimizers", test_optimizers);
  g_test_add_func ("/device-cuda/gpu/optimizer-formats", test_formats);
  g_test_add_func ("/device-cuda/gpu/optimizer-default-stream", test_optimizer_default_stream);
  g_test_add_func ("/device-cuda/gpu/fp8-entry-points", test_fp8_entry_points);
  g_test_add_func ("/device-cuda/gpu/fp4", test_fp4_gpu);
  return g_test_run ();
}
