/* test-engine-kernels.c — the element-wise kernels of the step pipeline
 * (mixprec-engine-kernels-private.h): the sum of squares at every SIMD
 * level against the order the header defines, computed here from the
 * decoded values, and bitwise against each other. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>
#include "mixprec-dtype-private.h"
#include "mixprec-engine-kernels-private.h"

static const _MixprecSimdLevel levels[] = {
  _MIXPREC_SIMD_SCALAR, _MIXPREC_SIMD_AVX2, _MIXPREC_SIMD_AVX512,
};

static const gchar *const level_names[] = { "scalar", "avx2", "avx512" };

/* Counts around the vector widths (8 and 16), the tile (2048) and the
 * engine's block (4096). */
static const gsize counts[] = {
  0, 1, 7, 8, 9, 15, 16, 17, 31, 100, 2047, 2048, 2049, 4095, 4096, 4103, 10007,
};

/* Random values across float32's range, with zeros, subnormals and
 * values whose squares overflow float32 but not double. */
static void
fill (gfloat  *x,
      gsize    n,
      GRand   *rand)
{
  static const gfloat specials[] = { 0.0f, -0.0f, 1e-40f, -3e-39f, 1e-45f, 3e38f, -65504.0f };

  for (gsize i = 0; i < n; i++)
    {
      if (i % 89 < G_N_ELEMENTS (specials))
        x[i] = specials[i % 89];
      else
        x[i] = (gfloat) (g_rand_double_range (rand, -1, 1) *
                         ldexp (1, g_rand_int_range (rand, -140, 120)));
    }
}

/* The definition: element i adds (double) x_i^2 to lane i % 8 in order;
 * the lanes are combined pairwise. */
static gdouble
reference_sumsq (const gfloat *x,
                 gsize         n)
{
  gdouble lane[8] = { 0 };

  for (gsize i = 0; i < n; i++)
    lane[i % 8] += (gdouble) x[i] * (gdouble) x[i];
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
         ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

static gboolean
level_runs (_MixprecSimdLevel level)
{
  return _mixprec_cpu_simd_level () >= level && _mixprec_convert_kernels_for_level (level) != NULL;
}

static void
test_sumsq_levels (gconstpointer data)
{
  _MixprecSimdLevel level = GPOINTER_TO_UINT (data);
  static const MixprecDType dtypes[] = {
    MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
    MIXPREC_DTYPE_FLOAT8_E4M3, MIXPREC_DTYPE_FLOAT8_E5M2,
  };
  g_autoptr(GRand) rand = g_rand_new_with_seed (4242);
  const gsize max = 10007 + 1;
  g_autofree gfloat *x = g_new (gfloat, max);
  g_autofree gfloat *decoded = g_new (gfloat, max);
  g_autofree guint8 *buf = g_malloc (max * 4);
  guint n_checked = 0;

  if (!level_runs (level))
    {
      g_test_skip_printf ("no %s kernels here (the CPU or the build lacks them, or "
                          "MIXPREC_SIMD lowers the level)", level_names[level]);
      return;
    }
  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    for (guint c = 0; c < G_N_ELEMENTS (counts); c++)
      for (guint special = 0; special < 3; special++)
        {
          gsize n = counts[c];
          /* Odd starting addresses: the vector loops start mid-way. */
          gsize shift = c % 3;
          guint8 *src = buf + shift * mixprec_dtype_get_size (dtypes[d]);
          gdouble expected, scalar, got;

          fill (x, n, rand);
          /* One Inf, or one NaN, somewhere in the tail half. */
          if (n > 0 && special == 1)
            x[n - 1 - n / 3] = INFINITY;
          if (n > 0 && special == 2)
            x[n - 1 - n / 5] = NAN;
          g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, x, dtypes[d], src, n,
                                                MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
          g_assert_true (mixprec_convert_array (dtypes[d], src, MIXPREC_DTYPE_FLOAT32, decoded, n,
                                                MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
          expected = reference_sumsq (decoded, n);
          scalar = _mixprec_kernel_sumsq_at_level (_MIXPREC_SIMD_SCALAR, src, dtypes[d], n);
          got = _mixprec_kernel_sumsq_at_level (level, src, dtypes[d], n);
          if (isnan (expected))
            {
              g_assert_true (isnan (scalar));
              g_assert_true (isnan (got));
            }
          else
            {
              g_assert_cmpmem (&expected, sizeof expected, &scalar, sizeof scalar);
              g_assert_cmpmem (&expected, sizeof expected, &got, sizeof got);
            }
          n_checked++;
        }
  g_test_message ("%s: %u arrays, each bitwise equal to the reference order", level_names[level], n_checked);
}

/* What the engine calls uses the process's level. */
static void
test_sumsq_default_level (void)
{
  gfloat x[37];

  for (guint i = 0; i < G_N_ELEMENTS (x); i++)
    x[i] = (gfloat) i / 3;
  g_assert_cmpfloat (_mixprec_kernel_sumsq (x, MIXPREC_DTYPE_FLOAT32, G_N_ELEMENTS (x)), ==,
                     reference_sumsq (x, G_N_ELEMENTS (x)));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  for (guint l = 0; l < G_N_ELEMENTS (levels); l++)
    {
      g_autofree gchar *path = g_strdup_printf ("/engine-kernels/sumsq/%s", level_names[l]);

      g_test_add_data_func (path, GUINT_TO_POINTER (levels[l]), test_sumsq_levels);
    }
  g_test_add_func ("/engine-kernels/sumsq/default-level", test_sumsq_default_level);
  return g_test_run ();
}
