/* bench-convert.c — conversion throughput beside memcpy bandwidth.
 *
 * For source buffers of 64 KiB to 1 GiB (powers of 4), prints the GB/s
 * (10^9 bytes read + written per second) of memcpy and of the conversions
 * fp32 -> bf16, fp32 -> fp16, bf16 -> fp32, fp16 -> fp32 (and the two
 * stochastic-rounding ones), each with its ratio to memcpy. memcpy is
 * split across the library's threads the same way the conversions are, so
 * both use every core (MIXPREC_NUM_THREADS).
 *
 *   bench-convert [--min-kib N] [--max-mib N] [--min-seconds S]
 *
 * Each figure is the best of batches of runs; each conversion's batches
 * alternate with memcpy's for at least --min-seconds, and memcpy's figure
 * is its best over all of them, so that other load on the machine does
 * not favour either side. Memory: 3 times the largest source size (the
 * widening conversions write twice what they read). */
#include <stdio.h>
#include <string.h>

#include <mixprec/mixprec.h>
#include "mixprec-parallel-private.h"

typedef struct {
  const gchar *label;
  MixprecDType src;
  MixprecDType dst;
  MixprecRounding rounding;
} Conversion;

static const Conversion conversions[] = {
  { "f32->bf16", MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, MIXPREC_ROUNDING_NEAREST_EVEN },
  { "f32->f16", MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_ROUNDING_NEAREST_EVEN },
  { "bf16->f32", MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_ROUNDING_NEAREST_EVEN },
  { "f16->f32", MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32, MIXPREC_ROUNDING_NEAREST_EVEN },
  { "f32->bf16sr", MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, MIXPREC_ROUNDING_STOCHASTIC },
  { "f32->f16sr", MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_ROUNDING_STOCHASTIC },
};

typedef struct {
  const guint8 *src;
  guint8 *dst;
} CopyJob;

static void
copy_range (gsize    begin,
            gsize    end,
            gpointer user_data)
{
  CopyJob *job = user_data;

  memcpy (job->dst + begin, job->src + begin, end - begin);
}

typedef struct {
  const Conversion *conv;     /* NULL: memcpy */
  gconstpointer src;
  gpointer dst;
  gsize src_bytes;
  guint64 step;
} Run;

static void
run_once (Run *run)
{
  if (run->conv == NULL)
    {
      /* The conversions' split: parts of >= 64 Ki fp32 elements. */
      CopyJob job = { run->src, run->dst };

      _mixprec_parallel_for (run->src_bytes, 256 * 1024, 64, copy_range, &job);
    }
  else
    {
      gsize n = run->src_bytes / mixprec_dtype_get_size (run->conv->src);

      if (!mixprec_convert_array (run->conv->src, run->src, run->conv->dst, run->dst, n,
                                  run->conv->rounding, run->step++, 0, NULL))
        g_error ("conversion failed");
    }
}

/* How many runs make a batch of at least a millisecond, so that the
 * clock's resolution does not matter for small sizes. */
static guint
batch_size (Run *run)
{
  gint64 t0;

  run_once (run);               /* warm: caches, TLB, thread pool */
  t0 = g_get_monotonic_time ();
  run_once (run);
  return (guint) CLAMP (1000.0 / MAX (g_get_monotonic_time () - t0, 1), 1, 100000);
}

/* Seconds one batch takes. */
static gdouble
time_batch (Run  *run,
            guint batch)
{
  gint64 t0 = g_get_monotonic_time ();

  for (guint i = 0; i < batch; i++)
    run_once (run);
  return MAX ((g_get_monotonic_time () - t0) / 1e6, 1e-6);
}

/* Best bytes per second of @conv and of memcpy of the same source, their
 * batches interleaved so that both see the same machine (other processes
 * come and go), for at least @min_seconds in all and 5 rounds. */
static void
measure_pair (Run     *conv,
              gsize    conv_bytes,
              Run     *copy,
              gdouble  min_seconds,
              gdouble *conv_rate,
              gdouble *copy_rate)
{
  guint conv_batch = batch_size (conv);
  guint copy_batch = batch_size (copy);
  gdouble total = 0;

  for (guint round = 0; round < 5 || total < min_seconds; round++)
    {
      gdouble s;

      s = time_batch (copy, copy_batch);
      total += s;
      *copy_rate = MAX (*copy_rate, 2.0 * copy->src_bytes * copy_batch / s);
      s = time_batch (conv, conv_batch);
      total += s;
      *conv_rate = MAX (*conv_rate, (gdouble) conv_bytes * conv_batch / s);
    }
}

static gpointer
alloc_touched (gsize bytes,
               guint8 fill)
{
  /* 64-byte aligned, every page touched so that timing excludes faults. */
  gpointer p = g_aligned_alloc (bytes, 1, 64);

  memset (p, fill, bytes);
  return p;
}

static void
fill_values (gpointer     buffer,
             MixprecDType dtype,
             gsize        bytes)
{
  gsize n = bytes / mixprec_dtype_get_size (dtype);
  g_autoptr(GRand) rand = g_rand_new_with_seed (1);
  gfloat block[4096];

  /* Normal-range values, converted to the source format in blocks. */
  for (gsize i = 0; i < n; i += G_N_ELEMENTS (block))
    {
      gsize m = MIN (n - i, G_N_ELEMENTS (block));

      for (gsize j = 0; j < m; j++)
        block[j] = (gfloat) g_rand_double_range (rand, -4.0, 4.0);
      mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, block, dtype,
                             (guint8 *) buffer + i * mixprec_dtype_get_size (dtype), m,
                             MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL);
    }
}

static gchar *
format_size (gsize bytes)
{
  if (bytes >= 1 << 30)
    return g_strdup_printf ("%" G_GSIZE_FORMAT " GiB", bytes >> 30);
  if (bytes >= 1 << 20)
    return g_strdup_printf ("%" G_GSIZE_FORMAT " MiB", bytes >> 20);
  return g_strdup_printf ("%" G_GSIZE_FORMAT " KiB", bytes >> 10);
}

int
main (int argc, char **argv)
{
  gint min_kib = 64;
  gint max_mib = 1024;
  gdouble min_seconds = 0.5;
  const GOptionEntry entries[] = {
    { "min-kib", 0, 0, G_OPTION_ARG_INT, &min_kib, "Smallest source buffer in KiB (default 64)", "N" },
    { "max-mib", 0, 0, G_OPTION_ARG_INT, &max_mib, "Largest source buffer in MiB (default 1024)", "N" },
    { "min-seconds", 0, 0, G_OPTION_ARG_DOUBLE, &min_seconds, "Time per measurement (default 0.5)", "S" },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("— conversion throughput beside memcpy");
  g_autoptr(GError) error = NULL;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 2;
    }

  printf ("bench-convert: %u threads, %s kernels; GB/s = 1e9 (bytes read + written) / s, best run\n",
          mixprec_get_num_threads (), mixprec_get_simd_name ());
  printf ("%-8s %8s", "source", "memcpy");
  for (guint c = 0; c < G_N_ELEMENTS (conversions); c++)
    printf (" %11s %5s", conversions[c].label, "ratio");
  printf ("\n");

  for (gsize size = (gsize) MAX (min_kib, 1) << 10; size <= (gsize) max_mib << 20; size *= 4)
    {
      g_autofree gchar *label = format_size (size);
      /* One source and one destination big enough for every conversion. */
      gpointer src = alloc_touched (size, 0);
      gpointer dst = alloc_touched (2 * size, 0);
      Run copy = { NULL, src, dst, size, 0 };
      gdouble copy_rate = 0;
      gdouble rates[G_N_ELEMENTS (conversions)] = { 0 };

      for (guint c = 0; c < G_N_ELEMENTS (conversions); c++)
        {
          const Conversion *conv = &conversions[c];
          gsize n = size / mixprec_dtype_get_size (conv->src);
          Run run = { conv, src, dst, size, 0 };

          fill_values (src, conv->src, size);
          measure_pair (&run, size + n * mixprec_dtype_get_size (conv->dst), &copy,
                        min_seconds, &rates[c], &copy_rate);
        }

      printf ("%-8s %8.1f", label, copy_rate / 1e9);
      for (guint c = 0; c < G_N_ELEMENTS (conversions); c++)
        printf (" %11.1f %5.2f", rates[c] / 1e9, rates[c] / copy_rate);
      printf ("\n");
      fflush (stdout);
      g_aligned_free (dst);
      g_aligned_free (src);
    }
  return 0;
}
