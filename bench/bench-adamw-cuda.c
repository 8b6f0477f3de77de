/* bench-adamw-cuda.c — the fused AdamW step of the device-cuda plugin
 * against the GPU's own copy bandwidth, measured in the same run.
 *
 * The job is the one the engine gives the step on a GPU: FP32 master,
 * exp_avg and exp_avg_sq updated in place, a gradient read (bf16, or FP32
 * in the fp32 rows) times an unscale factor, and a bf16 working copy
 * written with round-to-nearest-even in the same pass. Bytes per
 * parameter: master 4 + 4, m 4 + 4, v 4 + 4, gradient 2 (or 4), working
 * 2: 28 (or 30).
 *
 * The reference is cudaMemcpyAsync from one device buffer to another,
 * counting its read and its write (2 x size), the best of runs before and
 * after the steps. A step over a whole tensor is one call of the plugin's
 * step() on the benchmark's stream, timed with CUDA events around
 * --steps calls after --warmup calls; each figure is the best of
 * --trials such runs.
 *
 *   bench-adamw-cuda [--plugin-path DIR] [--device N] [--sizes S,S,...]
 *                    [--grad-dtypes bf16,fp32] [--steps N] [--warmup N]
 *                    [--trials N] [--copy-mib N] [--json FILE]
 *
 * Sizes are counts of parameters with an optional decimal suffix: K (1e3),
 * M (1e6), G or B (1e9); default 10M,100M,1B. A size whose buffers do not
 * fit in the device's free memory is reported as skipped. Without a usable
 * CUDA device the program says why and exits with 77 (skipped).
 *
 * Plugins come from --plugin-path, else from $MIXPREC_PLUGIN_PATH, else
 * from $MIXPREC_TOP_BUILDDIR/plugins (./plugins when that is unset). The
 * JSON lines, one per size and gradient dtype and one for the copy, go to
 * --json FILE, or after the table on standard output. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <json-glib/json-glib.h>
#include <mixprec/mixprec.h>

#include "mixprec-registry-private.h"

#define EXIT_SKIPPED 77
/* Left free beside the buffers of a size: the runtime's own allocations. */
#define HEADROOM_BYTES ((gsize) 256 << 20)
/* Elements of the host pattern tiled over the device buffers. */
#define PATTERN_ELEMENTS ((gsize) 1 << 22)

static const gchar *prgname = "bench-adamw-cuda";

static void
cuda_check (cudaError_t  status,
            const gchar *call)
{
  if (status == cudaSuccess)
    return;
  g_printerr ("%s: %s failed: %s (%s)\n", prgname, call,
              cudaGetErrorString (status), cudaGetErrorName (status));
  exit (EXIT_FAILURE);
}

static G_GNUC_NORETURN void
skip (const gchar *reason)
{
  g_print ("%s: skipped: %s\n", prgname, reason);
  exit (EXIT_SKIPPED);
}

/* "10M" -> 10000000; 0 for anything that is not a positive count. */
static guint64
parse_size (const gchar *text)
{
  gchar *end = NULL;
  gdouble value;
  gdouble unit = 1;

  errno = 0;
  value = g_ascii_strtod (text, &end);
  if (errno != 0 || end == text)
    return 0;
  if (g_ascii_strcasecmp (end, "K") == 0)
    unit = 1e3;
  else if (g_ascii_strcasecmp (end, "M") == 0)
    unit = 1e6;
  else if (g_ascii_strcasecmp (end, "G") == 0 || g_ascii_strcasecmp (end, "B") == 0)
    unit = 1e9;
  else if (*end != '\0')
    return 0;
  value *= unit;
  if (!(value >= 1 && value < 1e15))
    return 0;
  return (guint64) value;
}

static gchar *
format_size (guint64 n)
{
  if (n >= 1000000000 && n % 1000000000 == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT "B", n / 1000000000);
  if (n >= 1000000 && n % 1000000 == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT "M", n / 1000000);
  if (n >= 1000 && n % 1000 == 0)
    return g_strdup_printf ("%" G_GUINT64_FORMAT "K", n / 1000);
  return g_strdup_printf ("%" G_GUINT64_FORMAT, n);
}

/* Fills @bytes of device memory by tiling @pattern (@pattern_bytes). */
static void
fill_device (gpointer      dst,
             gconstpointer pattern,
             gsize         pattern_bytes,
             gsize         bytes)
{
  for (gsize done = 0; done < bytes; done += pattern_bytes)
    cuda_check (cudaMemcpy ((guint8 *) dst + done, pattern, MIN (pattern_bytes, bytes - done),
                            cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
}

typedef struct {
  cudaStream_t stream;
  cudaEvent_t start;
  cudaEvent_t stop;
  guint warmup;
  guint steps;
  guint trials;
} Timer;

/* ------------------------------------------------------------ copy */

/* Best bytes per second (read + write) of device-to-device copies of
 * @bytes, or 0 when two such buffers do not fit. */
static gdouble
measure_copy (const Timer *timer,
              gsize        bytes)
{
  gpointer src = NULL, dst = NULL;
  gdouble best_ms = INFINITY;

  if (cudaMalloc (&src, bytes) != cudaSuccess || cudaMalloc (&dst, bytes) != cudaSuccess)
    {
      cudaFree (src);
      (void) cudaGetLastError ();
      return 0;
    }
  cuda_check (cudaMemsetAsync (src, 0x3c, bytes, timer->stream), "cudaMemsetAsync");
  for (guint k = 0; k < timer->warmup; k++)
    cuda_check (cudaMemcpyAsync (dst, src, bytes, cudaMemcpyDeviceToDevice, timer->stream),
                "cudaMemcpyAsync (device to device)");
  for (guint t = 0; t < timer->trials; t++)
    {
      gfloat ms;

      cuda_check (cudaEventRecord (timer->start, timer->stream), "cudaEventRecord");
      for (guint k = 0; k < timer->steps; k++)
        cuda_check (cudaMemcpyAsync (dst, src, bytes, cudaMemcpyDeviceToDevice, timer->stream),
                    "cudaMemcpyAsync (device to device)");
      cuda_check (cudaEventRecord (timer->stop, timer->stream), "cudaEventRecord");
      cuda_check (cudaEventSynchronize (timer->stop), "cudaEventSynchronize");
      cuda_check (cudaEventElapsedTime (&ms, timer->start, timer->stop), "cudaEventElapsedTime");
      best_ms = MIN (best_ms, ms / timer->steps);
    }
  cuda_check (cudaFree (src), "cudaFree");
  cuda_check (cudaFree (dst), "cudaFree");
  return 2.0 * bytes / (best_ms * 1e-3);
}

/* ------------------------------------------------------------ the step */

typedef struct {
  guint64 n;
  MixprecDType grad_dtype;
  gboolean skipped;
  gchar *skip_reason;
  gdouble ms;                  /* best per step */
} Row;

static void
row_free (gpointer data)
{
  Row *row = data;

  g_free (row->skip_reason);
  g_free (row);
}

static gsize
dtype_size (MixprecDType dtype)
{
  return dtype == MIXPREC_DTYPE_FLOAT32 ? 4 : 2;
}

static const gchar *
dtype_short_name (MixprecDType dtype)
{
  return dtype == MIXPREC_DTYPE_FLOAT32 ? "fp32" : "bf16";
}

static gsize
bytes_per_param (MixprecDType grad_dtype)
{
  /* master r+w, m r+w, v r+w, gradient r, working w */
  return 8 + 8 + 8 + dtype_size (grad_dtype) + 2;
}

/* Gradients of a loss scaled by 1024 (unscaled by grad_factor), masters
 * spread over [-0.05, 0.05): values like a model's, so no step runs into
 * denormals or infinities however many steps are taken. */
static void
make_patterns (MixprecDType grad_dtype,
               gfloat      *master,
               gpointer     grad)
{
  for (gsize i = 0; i < PATTERN_ELEMENTS; i++)
    {
      gfloat g = (gfloat) ((gint) (i % 2001) - 1000);
      guint32 bits;

      master[i] = (gfloat) (i % 1000) * 1e-4f - 0.05f;
      if (grad_dtype == MIXPREC_DTYPE_FLOAT32)
        ((gfloat *) grad)[i] = g;
      else
        {
          memcpy (&bits, &g, sizeof bits);
          ((guint16 *) grad)[i] = (guint16) (bits >> 16);
        }
    }
}

static void
measure_step (const Timer    *timer,
              MixprecFeature *adamw,
              const gdouble  *hparams,
              gdouble         lr,
              Row            *row)
{
  gsize n = row->n;
  gsize grad_size = dtype_size (row->grad_dtype);
  gsize free_bytes = 0, total_bytes = 0;
  gsize need = n * (3 * sizeof (gfloat) + grad_size + 2);
  g_autofree gfloat *master_pattern = g_new (gfloat, PATTERN_ELEMENTS);
  g_autofree gpointer grad_pattern = g_malloc (PATTERN_ELEMENTS * grad_size);
  gfloat *master = NULL, *m = NULL, *v = NULL;
  gpointer grad = NULL, working = NULL;
  gfloat *states[2];
  MixprecOptimizerStepV1 args = { 0 };
  gdouble best_ms = INFINITY;

  cuda_check (cudaMemGetInfo (&free_bytes, &total_bytes), "cudaMemGetInfo");
  if (need + HEADROOM_BYTES > free_bytes)
    {
      row->skipped = TRUE;
      row->skip_reason = g_strdup_printf ("needs %.1f GiB, %.1f GiB of %.1f GiB free",
                                          (need + HEADROOM_BYTES) / 1073741824.0,
                                          free_bytes / 1073741824.0, total_bytes / 1073741824.0);
      return;
    }

  cuda_check (cudaMalloc ((gpointer *) &master, n * sizeof (gfloat)), "cudaMalloc (master)");
  cuda_check (cudaMalloc ((gpointer *) &m, n * sizeof (gfloat)), "cudaMalloc (exp_avg)");
  cuda_check (cudaMalloc ((gpointer *) &v, n * sizeof (gfloat)), "cudaMalloc (exp_avg_sq)");
  cuda_check (cudaMalloc (&grad, n * grad_size), "cudaMalloc (gradient)");
  cuda_check (cudaMalloc (&working, n * 2), "cudaMalloc (working)");
  make_patterns (row->grad_dtype, master_pattern, grad_pattern);
  fill_device (master, master_pattern, PATTERN_ELEMENTS * sizeof (gfloat), n * sizeof (gfloat));
  fill_device (grad, grad_pattern, PATTERN_ELEMENTS * grad_size, n * grad_size);
  cuda_check (cudaMemset (m, 0, n * sizeof (gfloat)), "cudaMemset");
  cuda_check (cudaMemset (v, 0, n * sizeof (gfloat)), "cudaMemset");
  cuda_check (cudaMemset (working, 0, n * 2), "cudaMemset");
  states[0] = m;
  states[1] = v;

  args.step = 1;
  args.lr = lr;
  args.grad_factor = 1.0f / 1024;
  args.grad_dtype = (MixprecPluginDType) row->grad_dtype;
  args.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  args.rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
  args.seed = 0;
  args.first_index = 0;
  args.device_stream = timer->stream;

  for (guint t = 0; t <= timer->trials; t++)
    {
      /* Run 0 is the warm-up. */
      guint steps = t == 0 ? timer->warmup : timer->steps;
      gfloat ms;

      cuda_check (cudaEventRecord (timer->start, timer->stream), "cudaEventRecord");
      for (guint k = 0; k < steps; k++, args.step++)
        {
          g_autoptr(GError) error = NULL;

          if (!_mixprec_feature_optimizer_step (adamw, &args, hparams, master, grad,
                                                states, working, n, &error))
            {
              g_printerr ("%s: %s\n", prgname, error->message);
              exit (EXIT_FAILURE);
            }
        }
      cuda_check (cudaEventRecord (timer->stop, timer->stream), "cudaEventRecord");
      cuda_check (cudaEventSynchronize (timer->stop), "cudaEventSynchronize");
      cuda_check (cudaGetLastError (), "the optimizer step's kernels");
      cuda_check (cudaEventElapsedTime (&ms, timer->start, timer->stop), "cudaEventElapsedTime");
      if (t > 0)
        best_ms = MIN (best_ms, ms / steps);
    }
  row->ms = best_ms;

  cuda_check (cudaFree (master), "cudaFree");
  cuda_check (cudaFree (m), "cudaFree");
  cuda_check (cudaFree (v), "cudaFree");
  cuda_check (cudaFree (grad), "cudaFree");
  cuda_check (cudaFree (working), "cudaFree");
}

/* ------------------------------------------------------------ output */

static void
json_line (FILE    *out,
           JsonNode *node)
{
  g_autoptr(JsonGenerator) generator = json_generator_new ();
  g_autofree gchar *text = NULL;

  json_generator_set_root (generator, node);
  text = json_generator_to_data (generator, NULL);
  fprintf (out, "%s\n", text);
  json_node_unref (node);
}

static JsonNode *
row_to_json (const Row   *row,
             const gchar *device,
             gdouble      copy_bps,
             const Timer *timer)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  gsize bpp = bytes_per_param (row->grad_dtype);

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "bench");
  json_builder_add_string_value (b, "adamw-cuda");
  json_builder_set_member_name (b, "impl");
  json_builder_add_string_value (b, "libmixprec");
  json_builder_set_member_name (b, "device");
  json_builder_add_string_value (b, device);
  json_builder_set_member_name (b, "params");
  json_builder_add_int_value (b, (gint64) row->n);
  json_builder_set_member_name (b, "grad_dtype");
  json_builder_add_string_value (b, dtype_short_name (row->grad_dtype));
  json_builder_set_member_name (b, "working_dtype");
  json_builder_add_string_value (b, "bf16");
  json_builder_set_member_name (b, "rounding");
  json_builder_add_string_value (b, "nearest-even");
  json_builder_set_member_name (b, "bytes_per_param");
  json_builder_add_int_value (b, (gint64) bpp);
  if (row->skipped)
    {
      json_builder_set_member_name (b, "skipped");
      json_builder_add_string_value (b, row->skip_reason);
    }
  else
    {
      gdouble bps = (gdouble) bpp * row->n / (row->ms * 1e-3);

      json_builder_set_member_name (b, "ms_per_step");
      json_builder_add_double_value (b, row->ms);
      json_builder_set_member_name (b, "gb_per_s");
      json_builder_add_double_value (b, bps / 1e9);
      json_builder_set_member_name (b, "copy_gb_per_s");
      json_builder_add_double_value (b, copy_bps / 1e9);
      json_builder_set_member_name (b, "fraction_of_copy");
      json_builder_add_double_value (b, copy_bps > 0 ? bps / copy_bps : 0);
      json_builder_set_member_name (b, "steps");
      json_builder_add_int_value (b, timer->steps);
      json_builder_set_member_name (b, "trials");
      json_builder_add_int_value (b, timer->trials);
    }
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

static JsonNode *
copy_to_json (const gchar *device,
              gdouble      copy_bps,
              gsize        copy_bytes)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "bench");
  json_builder_add_string_value (b, "copy-cuda");
  json_builder_set_member_name (b, "impl");
  json_builder_add_string_value (b, "cudaMemcpyAsync");
  json_builder_set_member_name (b, "device");
  json_builder_add_string_value (b, device);
  json_builder_set_member_name (b, "bytes");
  json_builder_add_int_value (b, (gint64) copy_bytes);
  json_builder_set_member_name (b, "copy_gb_per_s");
  json_builder_add_double_value (b, copy_bps / 1e9);
  json_builder_end_object (b);
  return json_builder_get_root (b);
}

/* ------------------------------------------------------------ main */

static MixprecRegistry *
open_registry (const gchar *plugin_path)
{
  g_autofree gchar *fallback = NULL;
  g_auto(GStrv) paths = NULL;

  if (plugin_path == NULL && g_getenv ("MIXPREC_PLUGIN_PATH") != NULL)
    return g_object_ref (mixprec_registry_get_default ());
  if (plugin_path == NULL)
    {
      const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");

      fallback = g_build_filename (top != NULL ? top : ".", "plugins", NULL);
      plugin_path = fallback;
    }
  paths = g_strsplit (plugin_path, G_SEARCHPATH_SEPARATOR_S, -1);
  return mixprec_registry_new_for_paths ((const gchar * const *) paths, FALSE);
}

static void
set_hparam (MixprecFeature *feature,
            gdouble        *hparams,
            const gchar    *name,
            gdouble         value)
{
  gint index = mixprec_feature_find_hparam (feature, name);

  if (index >= 0)
    hparams[index] = value;
}

int
main (int    argc,
      char **argv)
{
  g_autofree gchar *plugin_path = NULL;
  g_autofree gchar *sizes_arg = NULL;
  g_autofree gchar *dtypes_arg = NULL;
  g_autofree gchar *json_path = NULL;
  gint device_ordinal = 0;
  gint steps = 50, warmup = 10, trials = 5, copy_mib = 1024;
  GOptionEntry entries[] = {
    { "plugin-path", 0, 0, G_OPTION_ARG_FILENAME, &plugin_path,
      "plugin directories, colon-separated (default: $MIXPREC_PLUGIN_PATH, else $MIXPREC_TOP_BUILDDIR/plugins)", "DIR" },
    { "device", 0, 0, G_OPTION_ARG_INT, &device_ordinal, "CUDA device ordinal (default 0)", "N" },
    { "sizes", 0, 0, G_OPTION_ARG_STRING, &sizes_arg, "parameters, suffix K, M, G or B (default 10M,100M,1B)", "S,S" },
    { "grad-dtypes", 0, 0, G_OPTION_ARG_STRING, &dtypes_arg, "gradient dtypes, bf16 and/or fp32 (default bf16,fp32)", "D,D" },
    { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "timed steps per trial (default 50)", "N" },
    { "warmup", 0, 0, G_OPTION_ARG_INT, &warmup, "untimed steps first (default 10)", "N" },
    { "trials", 0, 0, G_OPTION_ARG_INT, &trials, "trials; the best counts (default 5)", "N" },
    { "copy-mib", 0, 0, G_OPTION_ARG_INT, &copy_mib, "size of the copied buffer (default 1024)", "N" },
    { "json", 0, 0, G_OPTION_ARG_FILENAME, &json_path, "write the JSON lines to FILE", "FILE" },
    { NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("- fused AdamW step on a CUDA device against its copy bandwidth");
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) rows = g_ptr_array_new_with_free_func (row_free);
  g_autoptr(MixprecRegistry) registry = NULL;
  g_auto(GStrv) sizes = NULL;
  g_auto(GStrv) dtypes = NULL;
  g_autofree gdouble *hparams = NULL;
  g_autofree gchar *device_line = NULL;
  g_autoptr(MixprecFeature) adamw = NULL;
  struct cudaDeviceProp prop;
  gint n_devices = 0;
  gsize free_bytes = 0, total_bytes = 0;
  gsize copy_bytes;
  gdouble copy_bps;
  cudaError_t status;
  Timer timer = { 0 };
  FILE *json_out = stdout;
  guint n_hparams;

  g_set_prgname (prgname);
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s: %s\n", prgname, error->message);
      return 2;
    }
  if (steps < 1 || warmup < 0 || trials < 1 || copy_mib < 1 || device_ordinal < 0)
    {
      g_printerr ("%s: --steps, --trials and --copy-mib must be positive, --warmup and --device not negative\n",
                  prgname);
      return 2;
    }
  timer.steps = steps;
  timer.warmup = warmup;
  timer.trials = trials;

  sizes = g_strsplit (sizes_arg != NULL ? sizes_arg : "10M,100M,1B", ",", -1);
  dtypes = g_strsplit (dtypes_arg != NULL ? dtypes_arg : "bf16,fp32", ",", -1);
  for (guint k = 0; sizes[k] != NULL; k++)
    {
      guint64 n = parse_size (sizes[k]);

      if (n == 0)
        {
          g_printerr ("%s: --sizes: '%s' is not a count of parameters like 100M or 1B\n",
                      prgname, sizes[k]);
          return 2;
        }
      for (guint d = 0; dtypes[d] != NULL; d++)
        {
          Row *row = g_new0 (Row, 1);

          row->n = n;
          if (g_strcmp0 (dtypes[d], "bf16") == 0)
            row->grad_dtype = MIXPREC_DTYPE_BFLOAT16;
          else if (g_strcmp0 (dtypes[d], "fp32") == 0)
            row->grad_dtype = MIXPREC_DTYPE_FLOAT32;
          else
            {
              g_printerr ("%s: --grad-dtypes: '%s' is neither bf16 nor fp32\n", prgname, dtypes[d]);
              row_free (row);
              return 2;
            }
          g_ptr_array_add (rows, row);
        }
    }

  /* A machine without a usable GPU is a skip, not a failure. */
  status = cudaGetDeviceCount (&n_devices);
  if (status != cudaSuccess)
    {
      g_autofree gchar *reason = g_strdup_printf ("no usable CUDA device: cudaGetDeviceCount: %s (%s)",
                                                  cudaGetErrorString (status), cudaGetErrorName (status));
      skip (reason);
    }
  if (n_devices == 0)
    skip ("no CUDA device: cudaGetDeviceCount found none");
  if (device_ordinal >= n_devices)
    {
      g_printerr ("%s: --device %d: this machine has %d CUDA devices (0 to %d)\n",
                  prgname, device_ordinal, n_devices, n_devices - 1);
      return 2;
    }
  cuda_check (cudaSetDevice (device_ordinal), "cudaSetDevice");
  cuda_check (cudaGetDeviceProperties (&prop, device_ordinal), "cudaGetDeviceProperties");
  cuda_check (cudaMemGetInfo (&free_bytes, &total_bytes), "cudaMemGetInfo");
  device_line = g_strdup (prop.name);

  registry = open_registry (plugin_path);
  adamw = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER, "adamw", "cuda", &error);
  if (adamw == NULL)
    {
      GList *failures = mixprec_registry_get_failures (registry);

      g_autofree gchar *search_path = g_strjoinv (G_SEARCHPATH_SEPARATOR_S,
                                                  (gchar **) mixprec_registry_get_search_path (registry));

      g_printerr ("%s: %s\n", prgname, error->message);
      g_printerr ("  plugins were searched in %s: was the device-cuda plugin built (make)?\n",
                  search_path);
      for (GList *l = failures; l != NULL; l = l->next)
        {
          const GError *load_error = mixprec_plugin_get_load_error (l->data);

          g_printerr ("  plugin %s: %s\n", mixprec_plugin_get_name (l->data),
                      load_error != NULL ? load_error->message : "failed to load");
        }
      g_list_free_full (failures, g_object_unref);
      return EXIT_FAILURE;
    }
  n_hparams = mixprec_feature_get_n_hparams (adamw);
  hparams = g_new0 (gdouble, MAX (n_hparams, 1));
  for (guint i = 0; i < n_hparams; i++)
    hparams[i] = mixprec_feature_get_hparam_default (adamw, i);
  /* torch.optim.AdamW's defaults, which the PyTorch peer uses. */
  set_hparam (adamw, hparams, "lr", 1e-3);
  set_hparam (adamw, hparams, "beta1", 0.9);
  set_hparam (adamw, hparams, "beta2", 0.999);
  set_hparam (adamw, hparams, "eps", 1e-8);
  set_hparam (adamw, hparams, "weight_decay", 0.01);

  if (json_path != NULL)
    {
      json_out = fopen (json_path, "w");
      if (json_out == NULL)
        {
          g_printerr ("%s: --json: cannot write %s: %s\n", prgname, json_path, g_strerror (errno));
          return EXIT_FAILURE;
        }
    }

  cuda_check (cudaStreamCreateWithFlags (&timer.stream, cudaStreamNonBlocking), "cudaStreamCreate");
  cuda_check (cudaEventCreate (&timer.start), "cudaEventCreate");
  cuda_check (cudaEventCreate (&timer.stop), "cudaEventCreate");

  /* The copy before and after the steps, the best of both: a GPU whose
   * clocks settle during the run is judged by its best moments on both
   * sides. A buffer that does not fit is halved until it does. */
  copy_bytes = (gsize) copy_mib << 20;
  copy_bps = 0;
  while (copy_bytes >= ((gsize) 1 << 20) && (copy_bps = measure_copy (&timer, copy_bytes)) == 0)
    copy_bytes /= 2;
  for (guint k = 0; k < rows->len; k++)
    measure_step (&timer, adamw, hparams, 1e-3, g_ptr_array_index (rows, k));
  if (copy_bytes >= ((gsize) 1 << 20))
    copy_bps = MAX (copy_bps, measure_copy (&timer, copy_bytes));

  g_print ("device %d: %s, %.1f GiB, %.1f GiB free at start\n", device_ordinal, prop.name,
           total_bytes / 1073741824.0, free_bytes / 1073741824.0);
  g_print ("copy bandwidth: %.1f GB/s (cudaMemcpyAsync device to device, %" G_GSIZE_FORMAT " MiB, "
           "read + write counted)\n", copy_bps / 1e9, copy_bytes >> 20);
  g_print ("fused AdamW step (\"adamw\" for cuda, plugin %s): fp32 master, exp_avg, exp_avg_sq; "
           "bf16 working out, round to nearest even; best of %d x %d steps\n",
           mixprec_feature_get_plugin_name (adamw), trials, steps);
  g_print ("%10s %5s %8s %10s %10s %10s\n", "params", "grad", "B/param", "ms/step", "GB/s", "% of copy");
  for (guint k = 0; k < rows->len; k++)
    {
      const Row *row = g_ptr_array_index (rows, k);
      g_autofree gchar *size = format_size (row->n);
      gsize bpp = bytes_per_param (row->grad_dtype);

      if (row->skipped)
        g_print ("%10s %5s %8" G_GSIZE_FORMAT " skipped: %s\n", size,
                 dtype_short_name (row->grad_dtype), bpp, row->skip_reason);
      else
        {
          gdouble bps = (gdouble) bpp * row->n / (row->ms * 1e-3);

          g_print ("%10s %5s %8" G_GSIZE_FORMAT " %10.4f %10.1f %9.1f%%\n", size,
                   dtype_short_name (row->grad_dtype), bpp, row->ms, bps / 1e9,
                   copy_bps > 0 ? 100 * bps / copy_bps : 0.0);
        }
    }

  json_line (json_out, copy_to_json (device_line, copy_bps, copy_bytes));
  for (guint k = 0; k < rows->len; k++)
    json_line (json_out, row_to_json (g_ptr_array_index (rows, k), device_line, copy_bps, &timer));
  if (json_out != stdout && fclose (json_out) != 0)
    {
      g_printerr ("%s: --json: cannot write %s: %s\n", prgname, json_path, g_strerror (errno));
      return EXIT_FAILURE;
    }

  cuda_check (cudaEventDestroy (timer.start), "cudaEventDestroy");
  cuda_check (cudaEventDestroy (timer.stop), "cudaEventDestroy");
  cuda_check (cudaStreamDestroy (timer.stream), "cudaStreamDestroy");
  return 0;
}
