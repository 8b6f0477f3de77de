/* dtype-sweep.c — every one of the 2^32 fp32 bit patterns through the
 * fp32 -> bf16 and fp32 -> fp16 conversions, checked against the
 * independent double-precision model of tests/dtype-reference.h, and the
 * AVX2 kernels against the scalar ones (both rounding modes, all four
 * narrow formats). Too slow for `make check`, which checks a dense sample.
 *
 *   dtype-sweep [--fp8]      --fp8 also checks the float8 formats against
 *                            the model (doubles the run time)
 *
 * Threads: the library's (MIXPREC_NUM_THREADS). Exits 1 on any mismatch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <mixprec/mixprec.h>
#include "mixprec-dtype-private.h"
#include "mixprec-parallel-private.h"
#include "../tests/dtype-reference.h"

#define CHUNK_BITS 16
#define CHUNK (1u << CHUNK_BITS)
#define SEED G_GUINT64_CONSTANT (0x5EED5EED5EED)

typedef struct {
  MixprecDType dtype;
  const RefFormat *ref;
  gboolean model;               /* check against the model */
} Target;

enum { N_TARGETS = 4 };

typedef struct {
  Target targets[N_TARGETS];
  const _MixprecConvertKernels *scalar;
  const _MixprecConvertKernels *avx2;
  /* Counters, updated under the lock once per thread */
  GMutex lock;
  gint64 model_checked[N_TARGETS];
  gint64 model_mismatches[N_TARGETS];
  gint64 simd_mismatches_rne[N_TARGETS];
  gint64 simd_mismatches_sr[N_TARGETS];
  gint first_report;            /* print the first few mismatches only */
} Sweep;

static guint32
expected_nan_bits (MixprecDType dtype,
                   guint32      u)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      return ((u >> 16) & 0x8000) | 0x7E00 | ((u >> 13) & 0x3FF);
    case MIXPREC_DTYPE_BFLOAT16:
      return (u >> 16) | 0x0040;
    default:
      return ((u >> 24) & 0x80) | 0x7F;
    }
}

static guint32
bits_at (MixprecDType dtype,
         gconstpointer data,
         gsize         i)
{
  return mixprec_dtype_get_size (dtype) == 2 ? ((const guint16 *) data)[i] : ((const guint8 *) data)[i];
}

static void
report (Sweep       *sweep,
        const gchar *what,
        const gchar *format,
        guint32      input,
        guint32      got,
        guint32      other)
{
  if (g_atomic_int_add (&sweep->first_report, 1) < 20)
    fprintf (stderr, "MISMATCH %s %s: input 0x%08x gave 0x%x, expected 0x%x\n",
             what, format, input, got, other);
}

static void
sweep_chunks (gsize    begin,
              gsize    end,
              gpointer user_data)
{
  Sweep *sweep = user_data;
  g_autofree guint32 *in = g_new (guint32, CHUNK);
  g_autofree guint16 *a = g_new (guint16, CHUNK);
  g_autofree guint16 *b = g_new (guint16, CHUNK);
  gint64 checked[N_TARGETS] = { 0 }, bad[N_TARGETS] = { 0 };
  gint64 bad_rne[N_TARGETS] = { 0 }, bad_sr[N_TARGETS] = { 0 };

  for (gsize chunk = begin; chunk < end; chunk++)
    {
      guint64 first = (guint64) chunk << CHUNK_BITS;

      for (guint32 i = 0; i < CHUNK; i++)
        in[i] = (guint32) first | i;

      for (guint t = 0; t < N_TARGETS; t++)
        {
          const Target *target = &sweep->targets[t];
          gsize bytes = CHUNK * mixprec_dtype_get_size (target->dtype);

          sweep->scalar->from_f32_rne[target->dtype] (in, a, CHUNK, 0, 0);
          if (target->model)
            {
              for (guint32 i = 0; i < CHUNK; i++)
                {
                  gfloat x = ref_f32 (in[i]);
                  guint32 got = bits_at (target->dtype, a, i);
                  gboolean ok;

                  if (isnan (x))
                    ok = got == expected_nan_bits (target->dtype, in[i]);
                  else
                    ok = ref_matches (target->ref, got, ref_round_nearest (target->ref, x));
                  if (!ok)
                    {
                      bad[t]++;
                      report (sweep, "model", target->ref->name, in[i], got, 0);
                    }
                }
              checked[t] += CHUNK;
            }

          if (sweep->avx2 == NULL)
            continue;
          sweep->avx2->from_f32_rne[target->dtype] (in, b, CHUNK, 0, 0);
          if (memcmp (a, b, bytes) != 0)
            {
              for (guint32 i = 0; i < CHUNK; i++)
                if (bits_at (target->dtype, a, i) != bits_at (target->dtype, b, i))
                  {
                    bad_rne[t]++;
                    report (sweep, "avx2-rne", target->ref->name, in[i],
                            bits_at (target->dtype, b, i), bits_at (target->dtype, a, i));
                  }
            }
          sweep->scalar->from_f32_sr[target->dtype] (in, a, CHUNK, SEED, first);
          sweep->avx2->from_f32_sr[target->dtype] (in, b, CHUNK, SEED, first);
          if (memcmp (a, b, bytes) != 0)
            {
              for (guint32 i = 0; i < CHUNK; i++)
                if (bits_at (target->dtype, a, i) != bits_at (target->dtype, b, i))
                  {
                    bad_sr[t]++;
                    report (sweep, "avx2-sr", target->ref->name, in[i],
                            bits_at (target->dtype, b, i), bits_at (target->dtype, a, i));
                  }
            }
        }
    }

  g_mutex_lock (&sweep->lock);
  for (guint t = 0; t < N_TARGETS; t++)
    {
      sweep->model_checked[t] += checked[t];
      sweep->model_mismatches[t] += bad[t];
      sweep->simd_mismatches_rne[t] += bad_rne[t];
      sweep->simd_mismatches_sr[t] += bad_sr[t];
    }
  g_mutex_unlock (&sweep->lock);
}

int
main (int argc, char **argv)
{
  gboolean fp8 = FALSE;
  const GOptionEntry entries[] = {
    { "fp8", 0, 0, G_OPTION_ARG_NONE, &fp8, "Also check float8_e4m3 and float8_e5m2 against the model", NULL },
    { NULL, 0, 0, 0, NULL, NULL, NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("— all 2^32 fp32 inputs through the converters");
  g_autoptr(GError) error = NULL;
  Sweep sweep = {
    {
      { MIXPREC_DTYPE_BFLOAT16, &ref_bf16, TRUE },
      { MIXPREC_DTYPE_FLOAT16, &ref_f16, TRUE },
      { MIXPREC_DTYPE_FLOAT8_E4M3, &ref_e4m3, FALSE },
      { MIXPREC_DTYPE_FLOAT8_E5M2, &ref_e5m2, FALSE },
    },
  };
  gint64 start, failures = 0;
  gdouble seconds;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      fprintf (stderr, "%s\n", error->message);
      return 2;
    }
  sweep.targets[2].model = sweep.targets[3].model = fp8;
  sweep.scalar = _mixprec_convert_kernels_for_level (_MIXPREC_SIMD_SCALAR);
  if (_mixprec_cpu_simd_level () == _MIXPREC_SIMD_AVX2)
    sweep.avx2 = _mixprec_convert_kernels_for_level (_MIXPREC_SIMD_AVX2);

  printf ("dtype-sweep: 2^32 fp32 inputs, %u threads, AVX2 comparison %s\n",
          mixprec_get_num_threads (), sweep.avx2 != NULL ? "on" : "off (no AVX2 kernels on this CPU)");
  start = g_get_monotonic_time ();
  _mixprec_parallel_for ((gsize) 1 << (32 - CHUNK_BITS), 1, 1, sweep_chunks, &sweep);
  seconds = (g_get_monotonic_time () - start) / 1e6;

  printf ("%-12s %14s %12s %14s %14s\n", "format", "model-checked", "model-bad", "avx2-rne-bad", "avx2-sr-bad");
  for (guint t = 0; t < N_TARGETS; t++)
    {
      printf ("%-12s %14" G_GINT64_FORMAT " %12" G_GINT64_FORMAT " %14" G_GINT64_FORMAT " %14" G_GINT64_FORMAT "\n",
              sweep.targets[t].ref->name, sweep.model_checked[t], sweep.model_mismatches[t],
              sweep.simd_mismatches_rne[t], sweep.simd_mismatches_sr[t]);
      failures += sweep.model_mismatches[t] + sweep.simd_mismatches_rne[t] + sweep.simd_mismatches_sr[t];
    }
  printf ("%s in %.1f s\n", failures == 0 ? "PASS" : "FAIL", seconds);
  return failures == 0 ? 0 : 1;
}
