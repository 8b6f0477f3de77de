/* test-engine-kernels.c — the element-wise kernels of the step pipeline
 * (mixprec-engine-kernels-private.h) at every SIMD level: fold, scale and
 * the sum of squares against their definitions, computed here from the
 * decoded values, and bitwise against the scalar kernels. */
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

static const MixprecDType all_dtypes[] = {
  MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
  MIXPREC_DTYPE_FLOAT8_E4M3, MIXPREC_DTYPE_FLOAT8_E5M2,
};

/* @n values of @dtype rounded from random floats, with an Inf and a NaN
 * (NaN or Inf alone in float8_e4m3) where n allows. */
static void
fill_dtype (gpointer      dst,
            MixprecDType  dtype,
            gsize         n,
            GRand        *rand)
{
  g_autofree gfloat *x = g_new (gfloat, MAX (n, 1));

  fill (x, n, rand);
  for (gsize i = 0; i < n; i++)
    if (i % 61 == 13)
      x[i] = (gfloat) g_rand_double_range (rand, -4, 4);   /* sums that cancel */
  if (n > 20)
    {
      x[n - 3] = INFINITY;
      x[n / 2] = NAN;
    }
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, x, dtype, dst, n,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
}

static void
decode (MixprecDType   dtype,
        gconstpointer  src,
        gfloat        *out,
        gsize          n)
{
  g_assert_true (mixprec_convert_array (dtype, src, MIXPREC_DTYPE_FLOAT32, out, n,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
}

/* @got (of @dtype) rounds @x to nearest even, NaN where @x is NaN. */
static void
assert_rounds (MixprecDType   dtype,
               const gfloat  *x,
               gconstpointer  got,
               gsize          n,
               const gchar   *what)
{
  gsize size = mixprec_dtype_get_size (dtype);
  g_autofree guint8 *expected = g_malloc (MAX (n, 1) * size);
  g_autofree gfloat *e = g_new (gfloat, MAX (n, 1));
  g_autofree gfloat *g = g_new (gfloat, MAX (n, 1));

  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, x, dtype, expected, n,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  decode (dtype, expected, e, n);
  decode (dtype, got, g, n);
  for (gsize i = 0; i < n; i++)
    if (isnan (e[i]) ? !isnan (g[i]) : memcmp (&e[i], &g[i], sizeof e[i]) != 0)
      g_error ("%s (%s, %" G_GSIZE_FORMAT " elements): element %" G_GSIZE_FORMAT " is %g, "
               "expected %g", what, mixprec_dtype_get_name (dtype), n, i, g[i], e[i]);
}

/* @ref and @got, @n values of @dtype, hold the same bits, except that a
 * NaN may carry another payload: which operand's payload a NaN sum keeps
 * depends on the operand order the compiler picks for a commutative add
 * (clang swaps them where GCC does not). */
static void
assert_same_bits_or_nan (MixprecDType   dtype,
                         const guint8  *ref,
                         const guint8  *got,
                         gsize          n)
{
  gsize size = mixprec_dtype_get_size (dtype);

  for (gsize i = 0; i < n; i++)
    if (memcmp (ref + i * size, got + i * size, size) != 0)
      {
        gfloat r, g;

        decode (dtype, ref + i * size, &r, 1);
        decode (dtype, got + i * size, &g, 1);
        if (!isnan (r) || !isnan (g))
          g_assert_cmpmem (ref + i * size, size, got + i * size, size);
      }
}

static void
test_fold_levels (gconstpointer data)
{
  _MixprecSimdLevel level = GPOINTER_TO_UINT (data);
  g_autoptr(GRand) rand = g_rand_new_with_seed (777);
  const gsize max = 10007;
  g_autofree guint8 *src = g_malloc (max * 4);
  g_autofree guint8 *dst0 = g_malloc (max * 4);
  g_autofree guint8 *ref = g_malloc (max * 4);
  g_autofree guint8 *got = g_malloc (max * 4);
  g_autofree gfloat *a = g_new (gfloat, max);
  g_autofree gfloat *b = g_new (gfloat, max);
  guint n_checked = 0;

  if (!level_runs (level))
    {
      g_test_skip_printf ("no %s kernels here (the CPU or the build lacks them, or "
                          "MIXPREC_SIMD lowers the level)", level_names[level]);
      return;
    }
  for (guint d = 0; d < G_N_ELEMENTS (all_dtypes); d++)
    for (guint s = 0; s < G_N_ELEMENTS (all_dtypes); s++)
      for (guint c = 0; c < G_N_ELEMENTS (counts); c++)
        for (guint first = 0; first < 2; first++)
          {
            MixprecDType dd = all_dtypes[d], sd = all_dtypes[s];
            gsize n = counts[c], bytes = n * mixprec_dtype_get_size (dd);

            fill_dtype (src, sd, n, rand);
            fill_dtype (dst0, dd, n, rand);
            memcpy (ref, dst0, bytes);
            memcpy (got, dst0, bytes);
            _mixprec_kernel_fold_at_level (_MIXPREC_SIMD_SCALAR, ref, dd, src, sd, n, first);
            _mixprec_kernel_fold_at_level (level, got, dd, src, sd, n, first);
            assert_same_bits_or_nan (dd, ref, got, n);

            /* The definition: the sum in float32, rounded once. */
            decode (sd, src, a, n);
            decode (dd, dst0, b, n);
            for (gsize i = 0; i < n; i++)
              b[i] = first ? a[i] : b[i] + a[i];
            assert_rounds (dd, b, got, n, "fold");
            n_checked++;
          }
  g_test_message ("%s: %u folds, each bitwise equal to the scalar kernel", level_names[level], n_checked);
}

static void
test_scale_levels (gconstpointer data)
{
  _MixprecSimdLevel level = GPOINTER_TO_UINT (data);
  static const gfloat factors[] = { 1.0f, 0.5f, 3.0f, -1.0f / 3, 1e-30f, 1e30f, 0.0f };
  g_autoptr(GRand) rand = g_rand_new_with_seed (778);
  const gsize max = 10007;
  g_autofree guint8 *buf0 = g_malloc (max * 4);
  g_autofree guint8 *ref = g_malloc (max * 4);
  g_autofree guint8 *got = g_malloc (max * 4);
  g_autofree gfloat *x = g_new (gfloat, max);
  guint n_checked = 0;

  if (!level_runs (level))
    {
      g_test_skip_printf ("no %s kernels here (the CPU or the build lacks them, or "
                          "MIXPREC_SIMD lowers the level)", level_names[level]);
      return;
    }
  for (guint d = 0; d < G_N_ELEMENTS (all_dtypes); d++)
    for (guint c = 0; c < G_N_ELEMENTS (counts); c++)
      for (guint f = 0; f < G_N_ELEMENTS (factors); f++)
        {
          MixprecDType dtype = all_dtypes[d];
          gsize n = counts[c], bytes = n * mixprec_dtype_get_size (dtype);

          fill_dtype (buf0, dtype, n, rand);
          memcpy (ref, buf0, bytes);
          memcpy (got, buf0, bytes);
          _mixprec_kernel_scale_at_level (_MIXPREC_SIMD_SCALAR, ref, dtype, n, factors[f]);
          _mixprec_kernel_scale_at_level (level, got, dtype, n, factors[f]);
          g_assert_cmpmem (ref, bytes, got, bytes);

          /* The definition: the product in float32, rounded once. */
          decode (dtype, buf0, x, n);
          for (gsize i = 0; i < n; i++)
            x[i] *= factors[f];
          assert_rounds (dtype, x, got, n, "scale");
          n_checked++;
        }
  g_test_message ("%s: %u scalings, each bitwise equal to the scalar kernel", level_names[level], n_checked);
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
      g_autofree gchar *fold = g_strdup_printf ("/engine-kernels/fold/%s", level_names[l]);
      g_autofree gchar *scale = g_strdup_printf ("/engine-kernels/scale/%s", level_names[l]);
      g_autofree gchar *sumsq = g_strdup_printf ("/engine-kernels/sumsq/%s", level_names[l]);

      g_test_add_data_func (fold, GUINT_TO_POINTER (levels[l]), test_fold_levels);
      g_test_add_data_func (scale, GUINT_TO_POINTER (levels[l]), test_scale_levels);
      g_test_add_data_func (sumsq, GUINT_TO_POINTER (levels[l]), test_sumsq_levels);
    }
  g_test_add_func ("/engine-kernels/sumsq/default-level", test_sumsq_default_level);
  return g_test_run ();
}
