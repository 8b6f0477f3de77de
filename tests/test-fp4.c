/* test-fp4.c — FP4 E2M1 and the 4-bit block recipes without torchao: the
 * E2M1 cast against a model in double precision (nearest of the eight
 * magnitudes, ties to the even mantissa, saturating), every SIMD level's
 * kernel against the scalar one bit for bit (RNE and stochastic, each op),
 * stochastic rounding's mean, the NVFP4 2D layout, and the public API's
 * checks. The bit-for-bit comparison with torchao is test-fp4-torchao.py. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-fp4-private.h"

static const _MixprecSimdLevel levels[] = { _MIXPREC_SIMD_SCALAR, _MIXPREC_SIMD_AVX2, _MIXPREC_SIMD_AVX512 };

static const _MixprecFp4Kernels *
kernels_at (_MixprecSimdLevel level)
{
  if (_mixprec_cpu_simd_level () < level)
    return NULL;
  return _mixprec_fp4_kernels_for_level (level);
}

static gfloat
from_bits (guint32 u)
{
  gfloat f;

  memcpy (&f, &u, sizeof f);
  return f;
}

/* OCP MX v1.0 table 5: the magnitudes of E2M1, code = index. */
static const gdouble grid[8] = { 0, 0.5, 1, 1.5, 2, 3, 4, 6 };

/* The model: the nearest magnitude, ties to the even code (even mantissa
 * bit), |x| >= 6 and Inf saturating. */
static guint8
model_e2m1 (gfloat x)
{
  gdouble a = fabs ((gdouble) x);
  guint8 sign = signbit (x) ? 8 : 0;
  guint best = 0;

  if (a >= 6.0)
    return sign | 7;
  for (guint c = 1; c < 8; c++)
    {
      gdouble d = fabs (a - grid[c]), db = fabs (a - grid[best]);

      if (d < db || (d == db && (c & 1) == 0))
        best = c;
    }
  return (guint8) (sign | best);
}

/* Edge values: every fp32 exponent with mantissas around E2M1's rounding
 * points, then pseudo-random bit patterns; both signs. */
static gfloat *
edge_values (gsize *n_out)
{
  static const guint32 mant[] = { 0, 1, 0x1FFFFF, 0x200000, 0x200001, 0x3FFFFF, 0x400000,
                                  0x400001, 0x5FFFFF, 0x600000, 0x600001, 0x7FFFFF };
  gsize n = 2 * (255 * G_N_ELEMENTS (mant) + 2 + 40000);
  gfloat *x = g_new (gfloat, n);
  gsize k = 0;
  guint32 s = 12345;

  for (guint sign = 0; sign < 2; sign++)
    {
      for (guint32 e = 0; e < 255; e++)
        for (guint m = 0; m < G_N_ELEMENTS (mant); m++)
          x[k++] = from_bits ((sign << 31) | (e << 23) | mant[m]);
      x[k++] = from_bits ((sign << 31) | 0x7F800000);
      x[k++] = from_bits ((sign << 31) | 0x7FC00000);
      for (guint i = 0; i < 40000; i++)
        {
          s = s * 1664525u + 1013904223u;
          /* magnitudes mostly within E2M1's range, some beyond */
          x[k++] = from_bits ((sign << 31) | (0x3D000000u + (s >> 8) % 0x04000000u));
        }
    }
  g_assert_cmpuint (k, ==, n);
  *n_out = n;
  return x;
}

static void
test_fp4_e2m1_model (void)
{
  gsize n;
  g_autofree gfloat *x = edge_values (&n);

  for (gsize i = 0; i < n; i++)
    {
      if (isnan (x[i]))
        continue;
      if (_mixprec_f32_to_e2m1_rne (x[i]) != model_e2m1 (x[i]))
        g_error ("E2M1 of %a: got %u, the model says %u", (gdouble) x[i],
                 _mixprec_f32_to_e2m1_rne (x[i]), model_e2m1 (x[i]));
    }
  /* NaN: what torchao's bit-level cast gives (test-fp4-torchao.py checks
   * this against it); 0x7FC00000 reads as 1.5 */
  g_assert_cmpuint (_mixprec_f32_to_e2m1_rne (from_bits (0x7FC00000)), ==, 3);
  g_assert_cmpuint (_mixprec_f32_to_e2m1_rne (from_bits (0xFFC00000)), ==, 0xB);
  for (guint c = 0; c < 16; c++)
    g_assert_cmpfloat (mixprec_fp4_e2m1_to_float ((guint8) c), ==, (c & 8 ? -1 : 1) * grid[c & 7]);
}

/* Every level's kernel equals the scalar one for each op, in both
 * roundings, at odd first indices and across a key boundary. */
static void
test_fp4_simd_levels (void)
{
  static const struct { guint op; gfloat factor; } ops[] = {
    { _MIXPREC_FP4_OP_NONE, 1.0f },
    { _MIXPREC_FP4_OP_DIV, 0x1p-3f },
    { _MIXPREC_FP4_OP_DIV, 0x1p-126f },
    { _MIXPREC_FP4_OP_DIV, INFINITY },
    { _MIXPREC_FP4_OP_MUL_CLAMP, 0.37f },
    { _MIXPREC_FP4_OP_MUL_CLAMP, 0x1p-127f },
    { _MIXPREC_FP4_OP_MUL_CLAMP, NAN },
  };
  static const guint64 firsts[] = { 0, 7, G_MAXUINT32 - 20 };
  const _MixprecFp4Kernels *scalar = _mixprec_fp4_kernels_for_level (_MIXPREC_SIMD_SCALAR);
  gsize n;
  g_autofree gfloat *x = edge_values (&n);
  g_autofree guint8 *want = g_malloc (n / 2);
  g_autofree guint8 *got = g_malloc (n / 2);
  guint compared = 0;

  for (guint l = 1; l < G_N_ELEMENTS (levels); l++)
    {
      const _MixprecFp4Kernels *k = kernels_at (levels[l]);

      if (k == NULL)
        {
          g_test_message ("level %u: not available on this CPU or build", levels[l]);
          continue;
        }
      for (guint o = 0; o < G_N_ELEMENTS (ops); o++)
        for (guint sr = 0; sr < 2; sr++)
          for (guint f = 0; f < G_N_ELEMENTS (firsts); f++)
            {
              /* lengths that leave tails of every size */
              for (gsize len = n - 14; len <= n; len += 2)
                {
                  scalar->cast (ops[o].op, ops[o].factor, x, len, sr, 99, firsts[f], want);
                  memset (got, 0xA5, len / 2);
                  k->cast (ops[o].op, ops[o].factor, x, len, sr, 99, firsts[f], got);
                  for (gsize i = 0; i < len / 2; i++)
                    if (got[i] != want[i])
                      g_error ("%s, op %u factor %a, %s, first %" G_GUINT64_FORMAT ", n %" G_GSIZE_FORMAT
                               ": byte %" G_GSIZE_FORMAT " is 0x%02x, scalar 0x%02x (x = %a, %a)",
                               k->name, ops[o].op, (gdouble) ops[o].factor, sr ? "stochastic" : "RNE",
                               firsts[f], len, i, got[i], want[i], (gdouble) x[2 * i], (gdouble) x[2 * i + 1]);
                }
            }
      compared++;
    }
  if (compared == 0)
    g_test_skip ("this CPU runs only the scalar kernels");
}

/* Stochastic rounding is unbiased: the mean of many roundings of one value
 * approaches it (0.2 between 0 and 0.5, 2.6 between 2 and 3, 0.01). */
static void
test_fp4_stochastic_mean (void)
{
  static const gfloat values[] = { 0.2f, 2.6f, 0.01f, -4.9f };
  enum { N = 1 << 16 };
  g_autofree gfloat *x = g_new (gfloat, N);
  g_autofree guint8 *q = g_malloc (N / 2);

  for (guint v = 0; v < G_N_ELEMENTS (values); v++)
    {
      gdouble sum = 0, p, lo, hi, sd;
      guint c;

      for (gsize i = 0; i < N; i++)
        x[i] = values[v];
      g_assert_true (mixprec_fp4_pack (x, N, MIXPREC_ROUNDING_STOCHASTIC, 1234 + v, 0, q, NULL));
      for (gsize i = 0; i < N; i++)
        sum += mixprec_fp4_e2m1_to_float ((q[i / 2] >> (4 * (i & 1))) & 0xF);
      for (c = 0; grid[c + 1] < fabs (values[v]); c++)
        ;
      lo = grid[c];
      hi = grid[c + 1];
      p = (fabs (values[v]) - lo) / (hi - lo);
      sd = (hi - lo) * sqrt (p * (1 - p) / N);
      g_assert_cmpfloat (fabs (sum / N - values[v]), <, 5 * sd);
    }
}

/* 16x16 tiles: the scales of a tile repeat over its rows, and a matrix
 * and its transpose get the same codes (and the same tensor scale). */
static void
test_fp4_nvfp4_2d (void)
{
  enum { R = 48, C = 32 };
  gfloat a[R * C], t[C * R];
  guint8 qa[R * C / 2], qt[C * R / 2], sa[R * C / 16], st[C * R / 16];
  gfloat tsa, tst;
  guint32 s = 99;

  for (guint i = 0; i < R * C; i++)
    {
      s = s * 1664525u + 1013904223u;
      a[i] = ((gfloat) (s >> 8) / 16777216.0f - 0.5f) * exp2f ((gfloat) (i / C % 16) - 8);
    }
  for (guint r = 0; r < R; r++)
    for (guint c = 0; c < C; c++)
      t[c * R + r] = a[r * C + c];
  g_assert_true (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_NVFP4_2D, MIXPREC_MX_SCALE_FLOOR, a, R, C,
                                          MIXPREC_ROUNDING_NEAREST_EVEN, 0, qa, sa, &tsa, NULL));
  g_assert_true (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_NVFP4_2D, MIXPREC_MX_SCALE_FLOOR, t, C, R,
                                          MIXPREC_ROUNDING_NEAREST_EVEN, 0, qt, st, &tst, NULL));
  g_assert_cmpfloat (tsa, ==, tst);
  for (guint r = 0; r < R; r++)
    for (guint cb = 0; cb < C / 16; cb++)
      g_assert_cmpuint (sa[r * (C / 16) + cb], ==, sa[(r / 16 * 16) * (C / 16) + cb]);
  for (guint r = 0; r < R; r++)
    for (guint c = 0; c < C; c++)
      {
        guint i = r * C + c, j = c * R + r;

        g_assert_cmpuint ((qa[i / 2] >> (4 * (i & 1))) & 0xF, ==, (qt[j / 2] >> (4 * (j & 1))) & 0xF);
      }
  /* 1D blocks of the same matrix differ: the 2D recipe is not a no-op */
  {
    guint8 q1[R * C / 2], s1[R * C / 16];

    g_assert_true (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_NVFP4, MIXPREC_MX_SCALE_FLOOR, a, R, C,
                                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, q1, s1, NULL, NULL));
    g_assert_true (memcmp (s1, sa, sizeof s1) != 0);
  }
}

static void
test_fp4_errors (void)
{
  gfloat x[32] = { 0 };
  guint8 q[16], s[2];
  g_autoptr(GError) error = NULL;

  g_assert_cmpuint (mixprec_block_recipe_get_block_size (MIXPREC_BLOCK_RECIPE_NVFP4), ==, 16);
  g_assert_cmpuint (mixprec_block_recipe_get_block_size (MIXPREC_BLOCK_RECIPE_NVFP4_2D), ==, 16);
  g_assert_cmpuint (mixprec_block_recipe_get_block_size (MIXPREC_BLOCK_RECIPE_MXFP4), ==, 32);
  g_assert_cmpuint (mixprec_block_recipe_get_block_size ((MixprecBlockRecipe) 9), ==, 0);

  g_assert_false (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_MXFP4, MIXPREC_MX_SCALE_FLOOR, x, 2, 16,
                                           MIXPREC_ROUNDING_NEAREST_EVEN, 0, q, s, NULL, &error));
  g_assert_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SHAPE);
  g_assert_nonnull (strstr (error->message, "32"));
  g_clear_error (&error);
  g_assert_false (mixprec_quantize_blocks ((MixprecBlockRecipe) 3, MIXPREC_MX_SCALE_FLOOR, x, 1, 32,
                                           MIXPREC_ROUNDING_NEAREST_EVEN, 0, q, s, NULL, &error));
  g_assert_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_RECIPE);
  g_clear_error (&error);
  g_assert_false (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_MXFP4, (MixprecMxScaleMode) 4, x, 1, 32,
                                           MIXPREC_ROUNDING_NEAREST_EVEN, 0, q, s, NULL, &error));
  g_assert_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_SCALE_MODE);
  g_clear_error (&error);
  g_assert_false (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_MXFP4, MIXPREC_MX_SCALE_FLOOR, x, 1, 32,
                                           (MixprecRounding) 2, 0, q, s, NULL, &error));
  g_assert_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_ROUNDING);
  g_clear_error (&error);
  g_assert_false (mixprec_fp4_pack (x, 3, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, q, &error));
  g_assert_error (error, MIXPREC_BLOCK_ERROR, MIXPREC_BLOCK_ERROR_INVALID_LENGTH);
  g_clear_error (&error);

  /* an all-zero MXFP4 block: scale 2^-127 (byte 0), elements +0 */
  g_assert_true (mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_MXFP4, MIXPREC_MX_SCALE_FLOOR, x, 1, 32,
                                          MIXPREC_ROUNDING_NEAREST_EVEN, 0, q, s, NULL, NULL));
  g_assert_cmpuint (s[0], ==, 0);
  for (guint i = 0; i < 16; i++)
    g_assert_cmpuint (q[i], ==, 0);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/fp4/e2m1/model", test_fp4_e2m1_model);
  g_test_add_func ("/fp4/e2m1/simd-levels", test_fp4_simd_levels);
  g_test_add_func ("/fp4/e2m1/stochastic-mean", test_fp4_stochastic_mean);
  g_test_add_func ("/fp4/nvfp4/2d-transpose", test_fp4_nvfp4_2d);
  g_test_add_func ("/fp4/errors", test_fp4_errors);
  return g_test_run ();
}
