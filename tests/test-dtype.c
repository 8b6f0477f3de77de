/* test-dtype.c — number formats: names and limits, conversions against an
 * independent double-precision model (dtype-reference.h), the AVX2 and
 * AVX-512 kernels against the scalar ones, and the statistics and
 * reproducibility of stochastic rounding. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>
#include "mixprec-dtype-private.h"
#include "dtype-reference.h"

/* The fp32 patterns of the dense sample: every SAMPLE_STRIDE-th of 2^32
 * (a prime, so every bit position takes every value), plus the
 * neighbourhoods of every rounding boundary. */
#define SAMPLE_STRIDE 251u
#define BLOCK 65536

typedef struct {
  MixprecDType dtype;
  const RefFormat *ref;
} Narrow;

static const Narrow narrow[] = {
  { MIXPREC_DTYPE_FLOAT16, &ref_f16 },
  { MIXPREC_DTYPE_BFLOAT16, &ref_bf16 },
  { MIXPREC_DTYPE_FLOAT8_E4M3, &ref_e4m3 },
  { MIXPREC_DTYPE_FLOAT8_E5M2, &ref_e5m2 },
};

static const _MixprecConvertKernels *
scalar_kernels (void)
{
  return _mixprec_convert_kernels_for_level (_MIXPREC_SIMD_SCALAR);
}

/* The SIMD levels the tests compare with the scalar kernels. */
static const _MixprecSimdLevel simd_levels[] = { _MIXPREC_SIMD_AVX2, _MIXPREC_SIMD_AVX512 };

/* The table of @level where this process may run it, else NULL. */
static const _MixprecConvertKernels *
simd_kernels (_MixprecSimdLevel level)
{
  if (_mixprec_cpu_simd_level () < level)
    return NULL;
  return _mixprec_convert_kernels_for_level (level);
}

/* The table of @level, or NULL (and the test skipped) where it cannot run. */
static const _MixprecConvertKernels *
simd_kernels_or_skip (_MixprecSimdLevel level)
{
  const _MixprecConvertKernels *k = simd_kernels (level);

  if (k == NULL)
    g_test_skip_printf ("no %s kernels to compare: the CPU lacks them, the build has none, "
                        "or MIXPREC_SIMD=%s is set",
                        level == _MIXPREC_SIMD_AVX512 ? "AVX-512 F/BW/VL" : "AVX2/F16C/FMA",
                        level == _MIXPREC_SIMD_AVX512 ? "avx2 or scalar" : "scalar");
  return k;
}

static guint32
bits_at (MixprecDType dtype,
         gconstpointer data,
         gsize         i)
{
  switch (mixprec_dtype_get_size (dtype))
    {
    case 4: return ((const guint32 *) data)[i];
    case 2: return ((const guint16 *) data)[i];
    default: return ((const guint8 *) data)[i];
    }
}

/* ------------------------------------------------------------ inputs */

/* Patterns around every rounding boundary of every format: for each fp32
 * exponent and sign, mantissas at multiples of 2^d (d = 1..23 covers the
 * dropped-bit counts of all formats, subnormal ranges included), their
 * halfway points, and one unit either side. */
static GArray *
boundary_inputs (void)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (guint32));

  for (guint32 sign = 0; sign < 2; sign++)
    for (guint32 e = 0; e < 256; e++)
      for (guint d = 1; d <= 23; d++)
        {
          guint32 top = 1u << (23 - d);
          const guint32 ks[] = { 0, 1, 2, 3, top - 2, top - 1 };
          const guint32 offsets[] = { 0, 1, (1u << (d - 1)) - 1, 1u << (d - 1),
                                      (1u << (d - 1)) + 1, (1u << d) - 1 };

          for (guint i = 0; i < G_N_ELEMENTS (ks); i++)
            for (guint j = 0; j < G_N_ELEMENTS (offsets); j++)
              {
                guint32 m = (ks[i] % top) << d;
                guint32 u = (sign << 31) | (e << 23) | ((m + offsets[j]) & 0x7FFFFF);

                g_array_append_val (a, u);
              }
        }
  return a;
}

typedef void (*BlockFunc) (const gfloat *in,
                           gsize         n,
                           guint64       first_index,
                           gpointer      user_data);

/* Calls @func on blocks of the whole input set; first_index numbers the
 * inputs consecutively. */
static void
for_each_input_block (BlockFunc func,
                      gpointer  user_data)
{
  g_autoptr(GArray) boundaries = boundary_inputs ();
  g_autofree guint32 *block = g_new (guint32, BLOCK);
  guint64 index = 0;
  guint64 u = 0;

  for (gsize i = 0; i < boundaries->len; i += BLOCK)
    {
      gsize n = MIN (BLOCK, boundaries->len - i);

      func ((const gfloat *) &g_array_index (boundaries, guint32, i), n, index, user_data);
      index += n;
    }
  while (u < G_GUINT64_CONSTANT (1) << 32)
    {
      gsize n = 0;

      for (; n < BLOCK && u < G_GUINT64_CONSTANT (1) << 32; u += SAMPLE_STRIDE)
        block[n++] = (guint32) u;
      func ((const gfloat *) block, n, index, user_data);
      index += n;
    }
}

static void
random_inputs (gfloat *x,
               gsize   n,
               guint32 seed)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);

  for (gsize i = 0; i < n; i++)
    {
      /* Values across the ranges of all formats, some specials. */
      guint32 u = g_rand_int (rand);

      if (i % 3 == 0)
        x[i] = (gfloat) g_rand_double_range (rand, -70000, 70000);
      else if (i % 3 == 1)
        x[i] = (gfloat) ldexp (g_rand_double_range (rand, -1, 1), g_rand_int_range (rand, -30, 20));
      else
        x[i] = ref_f32 (u);
    }
}

/* ------------------------------------------------------------ names */

static void
test_dtype_names (void)
{
  const gchar *expected[] = { "float32", "float16", "bfloat16", "float8_e4m3", "float8_e5m2" };

  for (guint i = 0; i < MIXPREC_DTYPE_COUNT; i++)
    {
      MixprecDType parsed;

      g_assert_cmpstr (mixprec_dtype_get_name (i), ==, expected[i]);
      g_assert_true (mixprec_dtype_from_name (expected[i], &parsed, NULL));
      g_assert_cmpint (parsed, ==, i);
    }
  g_assert_cmpint (MIXPREC_DTYPE_COUNT, ==, G_N_ELEMENTS (expected));
}

static void
test_dtype_from_name_aliases (void)
{
  const struct { const gchar *name; MixprecDType dtype; } cases[] = {
    { "fp32", MIXPREC_DTYPE_FLOAT32 }, { "float", MIXPREC_DTYPE_FLOAT32 },
    { "f32", MIXPREC_DTYPE_FLOAT32 }, { "FLOAT32", MIXPREC_DTYPE_FLOAT32 },
    { "fp16", MIXPREC_DTYPE_FLOAT16 }, { "half", MIXPREC_DTYPE_FLOAT16 },
    { "f16", MIXPREC_DTYPE_FLOAT16 }, { "Float16", MIXPREC_DTYPE_FLOAT16 },
    { "bf16", MIXPREC_DTYPE_BFLOAT16 }, { "BF16", MIXPREC_DTYPE_BFLOAT16 },
    { "BFloat16", MIXPREC_DTYPE_BFLOAT16 },
    { "fp8_e4m3", MIXPREC_DTYPE_FLOAT8_E4M3 }, { "e4m3", MIXPREC_DTYPE_FLOAT8_E4M3 },
    { "float8_e4m3fn", MIXPREC_DTYPE_FLOAT8_E4M3 }, { "E4M3", MIXPREC_DTYPE_FLOAT8_E4M3 },
    { "fp8_e5m2", MIXPREC_DTYPE_FLOAT8_E5M2 }, { "e5m2", MIXPREC_DTYPE_FLOAT8_E5M2 },
    { "Float8_E5M2", MIXPREC_DTYPE_FLOAT8_E5M2 },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      MixprecDType parsed = -1;

      g_assert_true (mixprec_dtype_from_name (cases[i].name, &parsed, &error));
      g_assert_no_error (error);
      g_assert_cmpint (parsed, ==, cases[i].dtype);
    }
}

static void
test_dtype_from_name_unknown (void)
{
  const gchar *bad[] = { "", "fp64", "float8", "bf 16", "float16 ", "e4m3fnuz", "int8" };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      MixprecDType parsed = MIXPREC_DTYPE_BFLOAT16;

      g_assert_false (mixprec_dtype_from_name (bad[i], &parsed, &error));
      g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_UNKNOWN_NAME);
      g_assert_cmpint (parsed, ==, MIXPREC_DTYPE_BFLOAT16);
      /* The message quotes the name and lists every accepted spelling. */
      g_assert_nonnull (strstr (error->message, bad[i]));
      for (guint j = 0; j < MIXPREC_DTYPE_COUNT; j++)
        g_assert_nonnull (strstr (error->message, mixprec_dtype_get_name (j)));
      g_assert_nonnull (strstr (error->message, "bf16"));
      g_assert_nonnull (strstr (error->message, "half"));
      g_assert_nonnull (strstr (error->message, "float8_e4m3fn"));
    }
}

static void
test_dtype_validity_and_sizes (void)
{
  const guint bits[] = { 32, 16, 16, 8, 8 };

  g_assert_false (mixprec_dtype_is_valid (-1));
  g_assert_false (mixprec_dtype_is_valid (MIXPREC_DTYPE_COUNT));
  g_assert_false (mixprec_dtype_is_valid (G_MAXINT));
  for (guint i = 0; i < MIXPREC_DTYPE_COUNT; i++)
    {
      g_assert_true (mixprec_dtype_is_valid (i));
      g_assert_cmpuint (mixprec_dtype_get_bits (i), ==, bits[i]);
      g_assert_cmpuint (mixprec_dtype_get_size (i) * 8, ==, bits[i]);
    }
}

/* Limits against the patterns that define them, decoded by the model:
 * largest finite, smallest normal (exponent field 1), smallest subnormal
 * (pattern 1), and the gap above 1. */
static void
test_dtype_limits (void)
{
  const struct { MixprecDType dtype; const RefFormat *ref; guint32 max_bits; } cases[] = {
    { MIXPREC_DTYPE_FLOAT16, &ref_f16, 0x7BFF },
    { MIXPREC_DTYPE_BFLOAT16, &ref_bf16, 0x7F7F },
    { MIXPREC_DTYPE_FLOAT8_E4M3, &ref_e4m3, 0x7E },
    { MIXPREC_DTYPE_FLOAT8_E5M2, &ref_e5m2, 0x7B },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      const RefFormat *f = cases[i].ref;
      guint32 one = (guint32) f->bias << f->man_bits;

      g_assert_cmpfloat (mixprec_dtype_get_max (cases[i].dtype), ==, ref_decode (f, cases[i].max_bits));
      g_assert_cmpfloat (mixprec_dtype_get_min_normal (cases[i].dtype), ==, ref_decode (f, 1u << f->man_bits));
      g_assert_cmpfloat (mixprec_dtype_get_min_subnormal (cases[i].dtype), ==, ref_decode (f, 1));
      g_assert_cmpfloat (ref_decode (f, one), ==, 1.0);
      g_assert_cmpfloat (mixprec_dtype_get_epsilon (cases[i].dtype), ==, ref_decode (f, one + 1) - 1.0);
    }

  /* The numbers mixprec-inspect(1) --formats documents (IEEE 754 binary16
   * and binary32, bfloat16, and the OCP FP8 specification for E4M3/E5M2). */
  g_assert_cmpfloat (mixprec_dtype_get_max (MIXPREC_DTYPE_FLOAT16), ==, 65504.0);
  g_assert_cmpfloat (mixprec_dtype_get_max (MIXPREC_DTYPE_FLOAT8_E4M3), ==, 448.0);
  g_assert_cmpfloat (mixprec_dtype_get_max (MIXPREC_DTYPE_FLOAT8_E5M2), ==, 57344.0);
  g_assert_cmpfloat (mixprec_dtype_get_min_normal (MIXPREC_DTYPE_FLOAT8_E4M3), ==, 1.0 / 64);
  g_assert_cmpfloat (mixprec_dtype_get_min_subnormal (MIXPREC_DTYPE_FLOAT8_E4M3), ==, 1.0 / 512);
  g_assert_cmpfloat (mixprec_dtype_get_epsilon (MIXPREC_DTYPE_FLOAT8_E4M3), ==, 0.125);
  g_assert_cmpfloat (mixprec_dtype_get_min_subnormal (MIXPREC_DTYPE_FLOAT8_E5M2), ==, 1.0 / 65536);
  g_assert_cmpfloat (mixprec_dtype_get_epsilon (MIXPREC_DTYPE_FLOAT8_E5M2), ==, 0.25);
  g_assert_cmpfloat (fabs (mixprec_dtype_get_min_normal (MIXPREC_DTYPE_FLOAT16) - 6.1e-5), <, 0.01e-5);
  g_assert_cmpfloat (fabs (mixprec_dtype_get_min_subnormal (MIXPREC_DTYPE_FLOAT16) - 6.0e-8), <, 0.05e-8);
  g_assert_cmpfloat (mixprec_dtype_get_max (MIXPREC_DTYPE_FLOAT32), ==, (gdouble) G_MAXFLOAT);
  g_assert_cmpfloat (mixprec_dtype_get_min_normal (MIXPREC_DTYPE_FLOAT32), ==, (gdouble) G_MINFLOAT);
  g_assert_cmpfloat (mixprec_dtype_get_epsilon (MIXPREC_DTYPE_FLOAT32), ==, (gdouble) FLT_EPSILON);
  g_assert_cmpfloat (mixprec_dtype_get_min_subnormal (MIXPREC_DTYPE_FLOAT32), ==, (gdouble) ref_f32 (1));
  g_assert_cmpfloat (mixprec_dtype_get_min_normal (MIXPREC_DTYPE_BFLOAT16), ==, (gdouble) G_MINFLOAT);
}

/* A value that is not a dtype is a programmer error for the getters. */
static void
test_dtype_getters_reject_invalid (void)
{
  g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_CRITICAL, "*mixprec_dtype_is_valid*");
  g_assert_cmpuint (mixprec_dtype_get_size ((MixprecDType) 17), ==, 0);
  g_test_assert_expected_messages ();
  g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_CRITICAL, "*mixprec_dtype_is_valid*");
  g_assert_null (mixprec_dtype_get_name ((MixprecDType) -1));
  g_test_assert_expected_messages ();
  g_test_expect_message (G_LOG_DOMAIN, G_LOG_LEVEL_CRITICAL, "*mixprec_dtype_is_valid*");
  g_assert_cmpfloat (mixprec_dtype_get_max ((MixprecDType) MIXPREC_DTYPE_COUNT), ==, 0.0);
  g_test_assert_expected_messages ();
}

/* ------------------------------------------------------------ decoding */

static void
check_decode_exhaustive (MixprecDType     dtype,
                         const RefFormat *f)
{
  const _MixprecConvertKernels *k = scalar_kernels ();
  guint32 n = 1u << f->bits;
  g_autofree guint8 *in = g_malloc (n * (f->bits / 8));
  g_autofree guint32 *out = g_new (guint32, n);

  for (guint32 b = 0; b < n; b++)
    {
      if (f->bits == 16)
        ((guint16 *) in)[b] = (guint16) b;
      else
        in[b] = (guint8) b;
    }
  k->to_f32[dtype] (in, out, n, 0, 0);
  for (guint32 b = 0; b < n; b++)
    {
      gdouble expected = ref_decode (f, b);
      gfloat got = ref_f32 (out[b]);

      if (isnan (expected))
        {
          /* NaN keeps its sign; the narrow formats' NaNs come out quiet
           * (bfloat16's are fp32's top half, so they keep every bit). */
          g_assert_true (isnan (got));
          g_assert_cmpuint (out[b] >> 31, ==, b >> (f->bits - 1));
          if (dtype == MIXPREC_DTYPE_BFLOAT16)
            g_assert_cmphex (out[b], ==, b << 16);
          else
            g_assert_cmphex (out[b] & 0x00400000, ==, 0x00400000);
        }
      else
        {
          g_assert_cmpfloat ((gdouble) got, ==, expected);
          g_assert_cmpint (signbit (got) != 0, ==, signbit (expected) != 0);
        }
    }
}

static void
test_decode_float16_exhaustive (void)
{
  check_decode_exhaustive (MIXPREC_DTYPE_FLOAT16, &ref_f16);
  /* The NaN payload, as F16C gives it: quiet bit set, payload shifted. */
  g_assert_cmphex (_mixprec_f32_bits (_mixprec_f16_to_f32 (0x7C01)), ==, 0x7FC02000);
  g_assert_cmphex (_mixprec_f32_bits (_mixprec_f16_to_f32 (0xFE00)), ==, 0xFFC00000);
}

static void
test_decode_bfloat16_exhaustive (void)
{
  check_decode_exhaustive (MIXPREC_DTYPE_BFLOAT16, &ref_bf16);
}

static void
test_decode_float8_exhaustive (void)
{
  check_decode_exhaustive (MIXPREC_DTYPE_FLOAT8_E4M3, &ref_e4m3);
  check_decode_exhaustive (MIXPREC_DTYPE_FLOAT8_E5M2, &ref_e5m2);
  /* e4m3fn has exactly two NaNs and no Inf; e5m2 has six NaNs and ±Inf. */
  for (guint b = 0; b < 256; b++)
    {
      g_assert_cmpint (isnan (_mixprec_e4m3_to_f32 (b)), ==, (b & 0x7F) == 0x7F);
      g_assert_false (isinf (_mixprec_e4m3_to_f32 (b)));
      g_assert_cmpint (isnan (_mixprec_e5m2_to_f32 (b)), ==, (b & 0x7F) > 0x7C);
      g_assert_cmpint (isinf (_mixprec_e5m2_to_f32 (b)) != 0, ==, (b & 0x7F) == 0x7C);
    }
}

/* ------------------------------------------------------------ round trips */

/* Every 16-bit pattern comes back unchanged, except signalling NaNs, which
 * come back quiet with their sign and payload (IEEE 754 and F16C). */
static void
check_round_trip (MixprecDType dtype,
                  guint16      quiet_bit,
                  guint16      exp_mask)
{
  g_autofree guint16 *in = g_new (guint16, 65536);
  g_autofree gfloat *mid = g_new (gfloat, 65536);
  g_autofree guint16 *out = g_new (guint16, 65536);

  for (guint32 b = 0; b < 65536; b++)
    in[b] = (guint16) b;
  g_assert_true (mixprec_convert_array (dtype, in, MIXPREC_DTYPE_FLOAT32, mid, 65536,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, mid, dtype, out, 65536,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  for (guint32 b = 0; b < 65536; b++)
    {
      gboolean snan = (b & exp_mask) == exp_mask && (b & ~(exp_mask | 0x8000)) != 0 && (b & quiet_bit) == 0;

      g_assert_cmphex (out[b], ==, snan ? b | quiet_bit : b);
    }

  /* Stochastic rounding changes nothing that is already exact. */
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, mid, dtype, out, 65536,
                                        MIXPREC_ROUNDING_STOCHASTIC, 77, 0, NULL));
  for (guint32 b = 0; b < 65536; b++)
    {
      gboolean snan = (b & exp_mask) == exp_mask && (b & ~(exp_mask | 0x8000)) != 0 && (b & quiet_bit) == 0;

      g_assert_cmphex (out[b], ==, snan ? b | quiet_bit : b);
    }
}

static void
test_round_trip_float16 (void)
{
  check_round_trip (MIXPREC_DTYPE_FLOAT16, 0x0200, 0x7C00);
}

static void
test_round_trip_bfloat16 (void)
{
  check_round_trip (MIXPREC_DTYPE_BFLOAT16, 0x0040, 0x7F80);
}

/* ------------------------------------------------------------ encoding */

/* Hand-derived expectations: boundaries, ties, overflow, specials. */
static void
test_encode_specials (void)
{
  const struct { guint32 in; guint16 f16, bf16; guint8 e4m3, e5m2; } cases[] = {
    /*   input     fp16    bf16   e4m3  e5m2 */
    { 0x00000000, 0x0000, 0x0000, 0x00, 0x00 },   /* +0 */
    { 0x80000000, 0x8000, 0x8000, 0x80, 0x80 },   /* -0 */
    { 0x3F800000, 0x3C00, 0x3F80, 0x38, 0x3C },   /* 1 */
    { 0xBFC00000, 0xBE00, 0xBFC0, 0xBC, 0xBE },   /* -1.5 */
    { 0x7F800000, 0x7C00, 0x7F80, 0x7F, 0x7C },   /* +Inf: e4m3 has none */
    { 0xFF800000, 0xFC00, 0xFF80, 0xFF, 0xFC },   /* -Inf */
    { 0x7FC00000, 0x7E00, 0x7FC0, 0x7F, 0x7F },   /* quiet NaN */
    { 0xFFC00001, 0xFE00, 0xFFC0, 0xFF, 0xFF },   /* -NaN, low payload */
    { 0x7F800001, 0x7E00, 0x7FC0, 0x7F, 0x7F },   /* signalling NaN, quieted */
    { 0x7FA02000, 0x7F01, 0x7FE0, 0x7F, 0x7F },   /* payload kept on top */
    { 0x477FE000, 0x7BFF, 0x4780, 0x7F, 0x7C },   /* 65504: fp16 max */
    { 0x477FEFFF, 0x7BFF, 0x4780, 0x7F, 0x7C },   /* just below the fp16 tie */
    { 0x477FF000, 0x7C00, 0x4780, 0x7F, 0x7C },   /* 65520: tie, odd max -> Inf */
    { 0x501502F9, 0x7C00, 0x5015, 0x7F, 0x7C },   /* 1e10 */
    { 0x7F7FFFFF, 0x7C00, 0x7F80, 0x7F, 0x7C },   /* fp32 max: bf16 overflows too */
    { 0x7F7F7FFF, 0x7C00, 0x7F7F, 0x7F, 0x7C },   /* just below bf16's tie at max */
    { 0x3F808000, 0x3C04, 0x3F80, 0x38, 0x3C },   /* bf16 tie to even (down) */
    { 0x3F818000, 0x3C0C, 0x3F82, 0x38, 0x3C },   /* bf16 tie to even (up) */
    { 0x33800000, 0x0001, 0x3380, 0x00, 0x00 },   /* 2^-24: fp16 min subnormal */
    { 0x33000000, 0x0000, 0x3300, 0x00, 0x00 },   /* 2^-25: tie to even 0 */
    { 0x33000001, 0x0001, 0x3300, 0x00, 0x00 },   /* just above: 1 */
    { 0x33C00000, 0x0002, 0x33C0, 0x00, 0x00 },   /* 1.5 * 2^-24: tie to even 2 */
    { 0x38800000, 0x0400, 0x3880, 0x00, 0x04 },   /* 2^-14: fp16/e5m2 min normal */
    { 0x387FC000, 0x03FF, 0x3880, 0x00, 0x04 },   /* largest fp16 subnormal */
    { 0x00000001, 0x0000, 0x0000, 0x00, 0x00 },   /* fp32 min subnormal */
    { 0x00008000, 0x0000, 0x0000, 0x00, 0x00 },   /* bf16 tie at 0 */
    { 0x00018000, 0x0000, 0x0002, 0x00, 0x00 },   /* bf16 subnormal tie up */
    { 0x007FFFFF, 0x0000, 0x0080, 0x00, 0x00 },   /* rounds to bf16 min normal */
    { 0x43E00000, 0x5F00, 0x43E0, 0x7E, 0x5F },   /* 448: e4m3 max */
    { 0x43E80000, 0x5F40, 0x43E8, 0x7E, 0x5F },   /* 464: tie, even 448 */
    { 0x43E80001, 0x5F40, 0x43E8, 0x7F, 0x5F },   /* above the tie: overflow NaN */
    { 0x43F00000, 0x5F80, 0x43F0, 0x7F, 0x60 },   /* 480 */
    { 0xC47A0000, 0xE3D0, 0xC47A, 0xFF, 0xE4 },   /* -1000 */
    { 0x3B000000, 0x1800, 0x3B00, 0x01, 0x18 },   /* 2^-9: e4m3 min subnormal */
    { 0x3A800000, 0x1400, 0x3A80, 0x00, 0x14 },   /* 2^-10: e4m3 tie to even 0 */
    { 0x3AC00000, 0x1600, 0x3AC0, 0x01, 0x16 },   /* 1.5 * 2^-10 */
    { 0x37800000, 0x0100, 0x3780, 0x00, 0x01 },   /* 2^-16: e5m2 min subnormal */
    { 0x37000000, 0x0080, 0x3700, 0x00, 0x00 },   /* 2^-17: tie to even 0 */
    { 0x47600000, 0x7B00, 0x4760, 0x7F, 0x7B },   /* 57344: e5m2 max */
    { 0x476FFFFF, 0x7B80, 0x4770, 0x7F, 0x7B },   /* below e5m2's tie */
    { 0x47700000, 0x7B80, 0x4770, 0x7F, 0x7C },   /* 61440: tie -> Inf */
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      gfloat x = ref_f32 (cases[i].in);

      g_test_message ("input 0x%08x", cases[i].in);
      g_assert_cmphex (_mixprec_f32_to_f16_rne (x), ==, cases[i].f16);
      g_assert_cmphex (_mixprec_f32_to_bf16_rne (x), ==, cases[i].bf16);
      g_assert_cmphex (_mixprec_f32_to_e4m3_rne (x), ==, cases[i].e4m3);
      g_assert_cmphex (_mixprec_f32_to_e5m2_rne (x), ==, cases[i].e5m2);
    }
}

typedef struct {
  const _MixprecConvertKernels *k;
  guint64 mismatches[G_N_ELEMENTS (narrow)];
  guint64 checked;
} EncodeCheck;

/* The exact NaN patterns the formats promise (the OCP FP8 specification, Intel's F16C). */
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

static void
encode_check_block (const gfloat *in,
                    gsize         n,
                    guint64       first_index,
                    gpointer      user_data)
{
  EncodeCheck *c = user_data;
  guint8 out[BLOCK * 2];

  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    {
      c->k->from_f32_rne[narrow[f].dtype] (in, out, n, 0, 0);
      for (gsize i = 0; i < n; i++)
        {
          guint32 got = bits_at (narrow[f].dtype, out, i);
          gboolean ok;

          if (isnan (in[i]))
            ok = got == expected_nan_bits (narrow[f].dtype, _mixprec_f32_bits (in[i]));
          else
            ok = ref_matches (narrow[f].ref, got, ref_round_nearest (narrow[f].ref, in[i]));
          if (!ok && c->mismatches[f]++ == 0)
            g_test_message ("%s: 0x%08x gave 0x%x, the model says %.9g",
                            narrow[f].ref->name, _mixprec_f32_bits (in[i]), got,
                            ref_round_nearest (narrow[f].ref, in[i]));
        }
    }
  c->checked += n;
}

/* fp32 to every narrow format, round to nearest even, against the model
 * on the dense sample and every boundary neighbourhood. */
static void
test_encode_nearest_even_sample (void)
{
  EncodeCheck c = { scalar_kernels (), { 0 }, 0 };

  for_each_input_block (encode_check_block, &c);
  g_test_message ("%" G_GUINT64_FORMAT " inputs per format", c.checked);
  g_assert_cmpuint (c.checked, >, (G_GUINT64_CONSTANT (1) << 32) / SAMPLE_STRIDE);
  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    g_assert_cmpuint (c.mismatches[f], ==, 0);
}

/* The integer fp32 -> fp16 conversion against the compiler's _Float16
 * where the platform has one with IEEE semantics. */
static void
test_encode_float16_matches_fp_conversion (void)
{
#if defined(__FLT16_MAX__) && defined(__SSE2__)
  for (guint64 u = 0; u < G_GUINT64_CONSTANT (1) << 32; u += 4099)
    {
      gfloat x = ref_f32 ((guint32) u);
      _Float16 h = (_Float16) x;
      guint16 hb;

      if (isnan (x))
        continue;
      memcpy (&hb, &h, sizeof hb);
      g_assert_cmphex (_mixprec_f32_to_f16_rne (x), ==, hb);
    }
#else
  g_test_skip ("the compiler has no _Float16");
#endif
}

/* ------------------------------------------------------------ SIMD == scalar */

static void
test_simd_decode_exhaustive (gconstpointer data)
{
  const _MixprecConvertKernels *simd = simd_kernels_or_skip (GPOINTER_TO_UINT (data));
  const _MixprecConvertKernels *scalar = scalar_kernels ();
  const MixprecDType dtypes[] = { MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
                                  MIXPREC_DTYPE_FLOAT8_E4M3, MIXPREC_DTYPE_FLOAT8_E5M2 };
  /* A count that is not a multiple of the vector width exercises the tail. */
  const gsize n = 65536 + 5;
  g_autofree guint16 *in = g_new (guint16, n);
  g_autofree guint32 *a = g_new (guint32, n);
  g_autofree guint32 *b = g_new (guint32, n);

  if (simd == NULL)
    return;
  for (gsize i = 0; i < n; i++)
    in[i] = (guint16) (i * 40503u);    /* a permutation of all 2^16 */
  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    {
      /* For the 8-bit formats the same buffer reads as every byte value. */
      scalar->to_f32[dtypes[d]] (in, a, n, 0, 0);
      simd->to_f32[dtypes[d]] (in, b, n, 0, 0);
      g_assert_cmpmem (a, n * 4, b, n * 4);
    }
}

typedef struct {
  const _MixprecConvertKernels *scalar;
  const _MixprecConvertKernels *simd;
  guint64 mismatches;
} SimdCheck;

static void
simd_check_block (const gfloat *in,
                  gsize         n,
                  guint64       first_index,
                  gpointer      user_data)
{
  SimdCheck *c = user_data;
  guint8 a[BLOCK * 2], b[BLOCK * 2];
  /* Odd offsets and lengths: the vector loops start and end mid-way. */
  gsize skip = first_index % 7;

  if (n <= skip)
    return;
  in += skip;
  n -= skip;
  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    {
      MixprecDType dtype = narrow[f].dtype;
      gsize bytes = n * mixprec_dtype_get_size (dtype);
      guint64 seed = first_index * 0x9E3779B97F4A7C15u;

      c->scalar->from_f32_rne[dtype] (in, a, n, 0, 0);
      c->simd->from_f32_rne[dtype] (in, b, n, 0, 0);
      if (memcmp (a, b, bytes) != 0 && c->mismatches++ == 0)
        g_test_message ("%s nearest-even: %s differs in block %" G_GUINT64_FORMAT,
                        narrow[f].ref->name, c->simd->name, first_index);
      c->scalar->from_f32_sr[dtype] (in, a, n, seed, first_index);
      c->simd->from_f32_sr[dtype] (in, b, n, seed, first_index);
      if (memcmp (a, b, bytes) != 0 && c->mismatches++ == 0)
        g_test_message ("%s stochastic: %s differs in block %" G_GUINT64_FORMAT,
                        narrow[f].ref->name, c->simd->name, first_index);
    }
}

static void
test_simd_encode_sample (gconstpointer data)
{
  SimdCheck c = { scalar_kernels (), simd_kernels_or_skip (GPOINTER_TO_UINT (data)), 0 };

  if (c.simd == NULL)
    return;
  for_each_input_block (simd_check_block, &c);
  g_assert_cmpuint (c.mismatches, ==, 0);
}

/* The non-temporal-store kernels give the bits of the scalar ones for
 * every destination offset within a 64-byte line (they stream only from a
 * 32- or 64-byte boundary on) and any length. */
static void
test_simd_streaming (gconstpointer data)
{
  const _MixprecConvertKernels *simd = simd_kernels_or_skip (GPOINTER_TO_UINT (data));
  const _MixprecConvertKernels *scalar = scalar_kernels ();
  const gsize n = 4099;
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree guint8 *a = g_malloc (n * 4 + 128);
  g_autofree guint8 *b = g_malloc (n * 4 + 128);
  g_autofree guint8 *e = g_malloc (n * 4);
  guint with_stream = 0;

  if (simd == NULL)
    return;
  random_inputs (in, n, 41);
  for (guint d = 0; d < MIXPREC_DTYPE_COUNT; d++)
    for (gsize offset = 0; offset < 68; offset++)
      for (gsize len = n - 40; len <= n; len += 13)
        {
          gsize size = mixprec_dtype_get_size (d);

          if (simd->from_f32_rne_stream[d] != NULL && offset % size == 0)
            {
              scalar->from_f32_rne[d] (in, a + offset, len, 0, 0);
              simd->from_f32_rne_stream[d] (in, b + offset, len, 0, 0);
              g_assert_cmpmem (a + offset, len * size, b + offset, len * size);
              with_stream++;
            }
          if (simd->from_f32_sr_stream[d] != NULL && offset % size == 0)
            {
              /* Even and odd first indices, and one where the key of the
               * stream changes inside the array. */
              guint64 first = offset % 3 == 0 ? offset : (G_GUINT64_CONSTANT (1) << 33) - 2 * offset - 1;

              scalar->from_f32_sr[d] (in, a + offset, len, 77, first);
              simd->from_f32_sr_stream[d] (in, b + offset, len, 77, first);
              g_assert_cmpmem (a + offset, len * size, b + offset, len * size);
              with_stream++;
            }
          if (simd->to_f32_stream[d] != NULL && offset % 4 == 0)
            {
              /* Decode the bits just encoded (random bits for 16-bit
               * formats: NaNs of every payload too). */
              memcpy (e, in, len * size);
              scalar->to_f32[d] (e, a + offset, len, 0, 0);
              simd->to_f32_stream[d] (e, b + offset, len, 0, 0);
              g_assert_cmpmem (a + offset, len * 4, b + offset, len * 4);
              with_stream++;
            }
        }
  g_assert_cmpuint (with_stream, >, 0);
}

/* ------------------------------------------------------------ stochastic */

typedef struct {
  guint64 mismatches[G_N_ELEMENTS (narrow)];
} NeighbourCheck;

static void
neighbour_check_block (const gfloat *in,
                       gsize         n,
                       guint64       first_index,
                       gpointer      user_data)
{
  NeighbourCheck *c = user_data;
  const _MixprecConvertKernels *k = scalar_kernels ();
  guint8 out[BLOCK * 2];

  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    {
      const RefFormat *rf = narrow[f].ref;

      k->from_f32_sr[narrow[f].dtype] (in, out, n, 1234, first_index);
      for (gsize i = 0; i < n; i++)
        {
          guint32 got = bits_at (narrow[f].dtype, out, i);
          gdouble lo, hi;
          gboolean ok;

          ref_neighbours (rf, in[i], &lo, &hi);
          if (isnan (in[i]))
            ok = got == expected_nan_bits (narrow[f].dtype, _mixprec_f32_bits (in[i]));
          else
            ok = ref_matches (rf, got, lo) || ref_matches (rf, got, hi);
          if (!ok && c->mismatches[f]++ == 0)
            g_test_message ("%s: 0x%08x gave 0x%x, not %.9g or %.9g", rf->name,
                            _mixprec_f32_bits (in[i]), got, lo, hi);
        }
    }
}

/* Stochastic rounding only ever gives one of the two neighbours. */
static void
test_stochastic_neighbours (void)
{
  NeighbourCheck c = { { 0 } };

  for_each_input_block (neighbour_check_block, &c);
  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    g_assert_cmpuint (c.mismatches[f], ==, 0);
}

/* The mean of many stochastic roundings of x is x. Each draw is lo or hi;
 * the count of hi is binomial with p = (|x| - lo) / (hi - lo), so its
 * mean over N draws lies within 6 standard deviations of p. Below the
 * smallest subnormal the probability is truncated to 32 bits (2^-32
 * allowed besides). */
static void
check_unbiased_with (const _MixprecConvertKernels *k,
                     const Narrow                 *fmt,
                     gfloat                        x,
                     guint64                       seed)
{
  const gsize n = 200000;
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree guint8 *out = g_malloc (n * 2);
  gdouble lo, hi, p, mean, sigma;
  gsize n_hi = 0;

  for (gsize i = 0; i < n; i++)
    in[i] = x;
  _mixprec_convert_run (k, MIXPREC_DTYPE_FLOAT32, in, fmt->dtype, out, n,
                        MIXPREC_ROUNDING_STOCHASTIC, seed, 0);
  ref_neighbours (fmt->ref, x, &lo, &hi);
  if (lo == hi)
    {
      /* Exact: every draw gives x itself. */
      for (gsize i = 0; i < n; i++)
        g_assert_true (ref_matches (fmt->ref, bits_at (fmt->dtype, out, i), lo));
      return;
    }
  for (gsize i = 0; i < n; i++)
    {
      guint32 bits = bits_at (fmt->dtype, out, i);

      if (ref_matches (fmt->ref, bits, hi))
        n_hi++;
      else
        g_assert_true (ref_matches (fmt->ref, bits, lo));
    }
  p = (fabs ((gdouble) x) - fabs (lo)) / ref_quantum (fmt->ref, x);
  mean = (gdouble) n_hi / n;
  sigma = sqrt (p * (1 - p) / n);
  g_test_message ("%s %s x=%.9g p=%.6f observed %.6f (6 sigma = %.6f)",
                  k->name, fmt->ref->name, x, p, mean, 6 * sigma);
  g_assert_cmpfloat (fabs (mean - p), <=, 6 * sigma + 0x1p-31);
}

/* Every kernel table the CPU runs. */
static void
check_unbiased (const Narrow *fmt,
                gfloat        x,
                guint64       seed)
{
  check_unbiased_with (scalar_kernels (), fmt, x, seed);
  for (guint l = 0; l < G_N_ELEMENTS (simd_levels); l++)
    if (simd_kernels (simd_levels[l]) != NULL)
      check_unbiased_with (simd_kernels (simd_levels[l]), fmt, x, seed);
}

static void
test_stochastic_unbiased (void)
{
  const gdouble fractions[] = { 0.5, 0.25, 0.1, 0.9, 0.01, 1.0 / 3, 0.0 };

  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    {
      const RefFormat *rf = narrow[f].ref;
      gdouble min_sub = ldexp (1.0, ref_emin (rf) - rf->man_bits);
      gdouble min_normal = ldexp (1.0, ref_emin (rf));

      for (guint i = 0; i < G_N_ELEMENTS (fractions); i++)
        {
          gdouble fr = fractions[i];
          /* x = lo + fr * quantum: normal range (around 1 and 3), the
           * subnormal range, and below the smallest subnormal. */
          const gdouble xs[] = {
            1.0 + fr * ldexp (1.0, -rf->man_bits),
            -(3.0 + fr * ldexp (2.0, -rf->man_bits)),
            min_normal / 2 + fr * min_sub,
            -(3 * min_sub + fr * min_sub),
            fr * min_sub,
            -fr * min_sub / 64,
          };

          /* p is measured from the fp32 value actually converted. */
          for (guint j = 0; j < G_N_ELEMENTS (xs); j++)
            check_unbiased (&narrow[f], (gfloat) xs[j], 1000 + i * 10 + j);
        }
    }
  /* Where the upper neighbour overflows: Inf (NaN for e4m3) half the time. */
  check_unbiased (&narrow[0], 65520.0f, 5);
  check_unbiased (&narrow[2], 464.0f, 5);
  check_unbiased (&narrow[3], -61440.0f, 5);
  /* fp32 subnormals to bf16. */
  check_unbiased (&narrow[1], ref_f32 (0x00012345), 6);
}

/* The random bits are uniform: over many consecutive indices each of the
 * 32 bits is set half the time (6 sigma), and consecutive values do not
 * repeat the same low 16 bits more than chance allows. */
static void
test_stochastic_bits_uniform (void)
{
  const guint64 n = 1 << 20;
  guint64 ones[32] = { 0 };
  guint64 same_low = 0;
  guint32 prev = 0;

  for (guint64 i = 0; i < n; i++)
    {
      guint32 r = _mixprec_sr_bits (42, (G_GUINT64_CONSTANT (1) << 32) - n / 2 + i);

      for (guint b = 0; b < 32; b++)
        ones[b] += (r >> b) & 1;
      same_low += i > 0 && (r & 0xFFFF) == (prev & 0xFFFF);
      prev = r;
    }
  for (guint b = 0; b < 32; b++)
    g_assert_cmpfloat (fabs ((gdouble) ones[b] / n - 0.5), <=, 6 * sqrt (0.25 / n));
  /* Expected n / 65536 = 16. */
  g_assert_cmpuint (same_low, <=, 16 + 6 * 4);
}

/* bfloat16 elements 2k and 2k + 1 take the two halves of one word of the
 * stream. Those halves, and the halves of neighbouring words, must be as
 * independent as two uniform draws: the top (then the bottom) four bits
 * of units i and i + 1, over 2^20 values of i, fill the 256 cells of
 * their joint table with a chi-square statistic (255 degrees of freedom:
 * mean 255, standard deviation sqrt (510)) below 6 standard deviations
 * above its mean; for i even (one word) and odd (two words), across the
 * change of key at 2^33. */
static void
test_stochastic_bits16_pairs (void)
{
  const guint64 n = 1 << 20;
  const guint64 first = (G_GUINT64_CONSTANT (1) << 33) - n;

  for (guint parity = 0; parity < 2; parity++)
    for (guint shift = 0; shift <= 12; shift += 12)
      {
        guint64 cells[256] = { 0 };
        gdouble expected = (gdouble) n / 256;
        gdouble chi2 = 0;

        for (guint64 k = 0; k < n; k++)
          {
            guint64 i = first + 2 * k + parity;
            guint32 a = (_mixprec_sr_bits16 (5, i) >> shift) & 0xF;
            guint32 b = (_mixprec_sr_bits16 (5, i + 1) >> shift) & 0xF;

            cells[a << 4 | b]++;
          }
        for (guint c = 0; c < 256; c++)
          chi2 += (cells[c] - expected) * (cells[c] - expected) / expected;
        g_test_message ("units i, i + 1 (i %s), bits %u..%u: chi-square %.1f",
                        parity == 0 ? "even" : "odd", shift, shift + 3, chi2);
        g_assert_cmpfloat (chi2, <=, 255 + 6 * sqrt (2 * 255));
      }
}

/* The same at the level of rounding, through every kernel table: with x
 * at even indices rounding up with probability p and y at odd ones with
 * probability q, a pair of neighbours rounds up together with probability
 * p q, within 6 binomial standard deviations; for pairs that share a word
 * (first index 0) and pairs that straddle two (first index 1). */
static void
check_bfloat16_pairs (const _MixprecConvertKernels *k,
                      gfloat                        x,
                      gfloat                        y,
                      guint64                       first_index)
{
  const gsize n = 1 << 20;
  const gsize pairs = n / 2;
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree guint16 *out = g_new (guint16, n);
  guint16 x_lo = (guint16) (_mixprec_f32_bits (x) >> 16), y_lo = (guint16) (_mixprec_f32_bits (y) >> 16);
  /* Both are positive and inexact: the fraction of a quantum of 2^-16 of
   * the fp32 bits that lies above the lower neighbour. */
  gdouble p = (_mixprec_f32_bits (x) & 0xFFFF) / 65536.0;
  gdouble q = (_mixprec_f32_bits (y) & 0xFFFF) / 65536.0;
  gsize n_x = 0, n_y = 0, n_both = 0;

  for (gsize i = 0; i < n; i++)
    in[i] = i % 2 == 0 ? x : y;
  _mixprec_convert_run (k, MIXPREC_DTYPE_FLOAT32, in, MIXPREC_DTYPE_BFLOAT16, out, n,
                        MIXPREC_ROUNDING_STOCHASTIC, 314, first_index);
  for (gsize i = 0; i < n; i += 2)
    {
      gboolean up_x = out[i] != x_lo, up_y = out[i + 1] != y_lo;

      g_assert_true (out[i] == x_lo || out[i] == x_lo + 1);
      g_assert_true (out[i + 1] == y_lo || out[i + 1] == y_lo + 1);
      n_x += up_x;
      n_y += up_y;
      n_both += up_x && up_y;
    }
  g_test_message ("%s first %" G_GUINT64_FORMAT ": p %.4f (%.4f) q %.4f (%.4f) pq %.4f (%.4f)",
                  k->name, first_index, p, (gdouble) n_x / pairs, q, (gdouble) n_y / pairs,
                  p * q, (gdouble) n_both / pairs);
  g_assert_cmpfloat (fabs ((gdouble) n_x / pairs - p), <=, 6 * sqrt (p * (1 - p) / pairs));
  g_assert_cmpfloat (fabs ((gdouble) n_y / pairs - q), <=, 6 * sqrt (q * (1 - q) / pairs));
  g_assert_cmpfloat (fabs ((gdouble) n_both / pairs - p * q), <=, 6 * sqrt (p * q * (1 - p * q) / pairs));
}

static void
test_stochastic_bfloat16_pairs (void)
{
  /* Fractions 1/4 and 5/8, 21845/65536 (about 1/3) and 1/2 of a quantum. */
  const gfloat xs[] = { 1.0f + 0x4000p-23f, 3.0f + 0x5555p-22f };
  const gfloat ys[] = { 1.0f + 0xA000p-23f, 0.75f + 0x8000p-24f };

  for (guint v = 0; v < G_N_ELEMENTS (xs); v++)
    for (guint64 first = 0; first < 2; first++)
      {
        check_bfloat16_pairs (scalar_kernels (), xs[v], ys[v], first);
        for (guint l = 0; l < G_N_ELEMENTS (simd_levels); l++)
          if (simd_kernels (simd_levels[l]) != NULL)
            check_bfloat16_pairs (simd_kernels (simd_levels[l]), xs[v], ys[v], first);
      }
}

static void
test_stochastic_reproducible (void)
{
  const gsize n = 300001;
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree guint16 *a = g_new (guint16, n);
  g_autofree guint16 *b = g_new (guint16, n);
  g_autofree guint16 *c = g_new (guint16, n);

  random_inputs (in, n, 7);
  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    {
      MixprecDType dtype = narrow[f].dtype;
      gsize size = mixprec_dtype_get_size (dtype);
      gsize differ = 0, inexact = 0;
      gdouble expected = 0, variance = 0;

      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in, dtype, a, n,
                                            MIXPREC_ROUNDING_STOCHASTIC, 99, 0, NULL));
      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in, dtype, b, n,
                                            MIXPREC_ROUNDING_STOCHASTIC, 99, 0, NULL));
      g_assert_cmpmem (a, n * size, b, n * size);

      /* Another seed: an inexact value rounding up with probability p
       * differs between two independent streams with probability
       * 2p(1 - p); the count of differences must match the sum of those
       * within 6 standard deviations. */
      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in, dtype, c, n,
                                            MIXPREC_ROUNDING_STOCHASTIC, 100, 0, NULL));
      for (gsize i = 0; i < n; i++)
        {
          gdouble lo, hi;

          ref_neighbours (narrow[f].ref, in[i], &lo, &hi);
          if (lo != hi && !isnan (lo) && !isnan (hi))
            {
              gdouble p = (fabs ((gdouble) in[i]) - fabs (lo)) / ref_quantum (narrow[f].ref, in[i]);
              gdouble q = 2 * p * (1 - p);

              inexact++;
              expected += q;
              variance += q * (1 - q);
            }
          if (bits_at (dtype, a, i) != bits_at (dtype, c, i))
            differ++;
        }
      g_test_message ("%s: %" G_GSIZE_FORMAT " of %" G_GSIZE_FORMAT " inexact values differ "
                      "between seeds, %.0f expected", narrow[f].ref->name, differ, inexact, expected);
      g_assert_cmpuint (inexact, >, n / 10);
      g_assert_cmpfloat (fabs (differ - expected), <=, 6 * sqrt (variance) + 1);
    }
}

/* Converting a slice with first_index = its offset gives the bits of
 * converting the whole array, for every kernel table and any split. */
static void
test_stochastic_slices (void)
{
  const gsize n = 200003;
  const gsize cuts[] = { 0, 1, 7, 8, 13, 4096, 65536 + 3, 131072, 199999, n };
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree guint16 *whole = g_new (guint16, n);
  g_autofree guint16 *parts = g_new (guint16, n);
  const _MixprecConvertKernels *tables[] = {
    scalar_kernels (), simd_kernels (_MIXPREC_SIMD_AVX2), simd_kernels (_MIXPREC_SIMD_AVX512),
  };
  /* The slices straddle a multiple of 2^32, where the key changes. */
  const guint64 first = (G_GUINT64_CONSTANT (1) << 33) - 100000;

  random_inputs (in, n, 11);
  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    {
      MixprecDType dtype = narrow[f].dtype;
      gsize size = mixprec_dtype_get_size (dtype);

      /* The whole array through the public, threaded entry point. */
      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in, dtype, whole, n,
                                            MIXPREC_ROUNDING_STOCHASTIC, 3, first, NULL));
      for (guint t = 0; t < G_N_ELEMENTS (tables); t++)
        {
          if (tables[t] == NULL)
            continue;
          memset (parts, 0xAA, n * size);
          for (guint c = 0; c + 1 < G_N_ELEMENTS (cuts); c++)
            _mixprec_convert_run (tables[t], MIXPREC_DTYPE_FLOAT32, in + cuts[c], dtype,
                                  (guint8 *) parts + cuts[c] * size, cuts[c + 1] - cuts[c],
                                  MIXPREC_ROUNDING_STOCHASTIC, 3, first + cuts[c]);
          g_assert_cmpmem (whole, n * size, parts, n * size);
        }
      /* Slices through the public API too. */
      memset (parts, 0x55, n * size);
      for (guint c = 0; c + 1 < G_N_ELEMENTS (cuts); c++)
        g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in + cuts[c], dtype,
                                              (guint8 *) parts + cuts[c] * size,
                                              cuts[c + 1] - cuts[c], MIXPREC_ROUNDING_STOCHASTIC,
                                              3, first + cuts[c], NULL));
      g_assert_cmpmem (whole, n * size, parts, n * size);
    }
}

/* The 16 random bits of bfloat16 element @index, as documented: the low
 * half of word index / 2 of the stream for an even index, its high half
 * for an odd one. */
static guint32
bits16_of_words (guint64 seed,
                 guint64 index)
{
  guint32 word = _mixprec_sr_bits (seed, index / 2);

  return index % 2 == 0 ? word & 0xFFFF : word >> 16;
}

/* Element i uses exactly word first_index + i of the stream (half of word
 * (first_index + i) / 2 for bfloat16), also where the word index crosses
 * a multiple of 2^32 (where the key changes), from even and odd first
 * indices, and near the top of the 64-bit range. */
static void
test_stochastic_index_boundaries (void)
{
  const guint64 firsts[] = { 0, 1, (G_GUINT64_CONSTANT (1) << 32) - 37,
                             (G_GUINT64_CONSTANT (7) << 32) - 3,
                             (G_GUINT64_CONSTANT (1) << 33) - 37, (G_GUINT64_CONSTANT (1) << 33) - 70,
                             (G_GUINT64_CONSTANT (5) << 33) - 1, G_MAXUINT64 - 100, G_MAXUINT64 - 101 };
  const gsize n = 101;
  gfloat in[101];
  guint16 out[101];
  const _MixprecConvertKernels *tables[] = {
    scalar_kernels (), simd_kernels (_MIXPREC_SIMD_AVX2), simd_kernels (_MIXPREC_SIMD_AVX512),
  };

  for (gsize i = 0; i < n; i++)
    in[i] = 1.0f + (gfloat) i / 1024 + 1.0f / 4096;
  for (guint t = 0; t < G_N_ELEMENTS (tables); t++)
    for (guint j = 0; j < G_N_ELEMENTS (firsts); j++)
      {
        if (tables[t] == NULL)
          continue;
        tables[t]->from_f32_sr[MIXPREC_DTYPE_FLOAT16] (in, out, n, 8, firsts[j]);
        for (gsize i = 0; i < n; i++)
          g_assert_cmphex (out[i], ==, _mixprec_f32_to_f16_sr (in[i], _mixprec_sr_bits (8, firsts[j] + i)));
        tables[t]->from_f32_sr[MIXPREC_DTYPE_BFLOAT16] (in, out, n, 8, firsts[j]);
        for (gsize i = 0; i < n; i++)
          g_assert_cmphex (out[i], ==, _mixprec_f32_to_bf16_sr (in[i], bits16_of_words (8, firsts[j] + i)));
        for (gsize i = 0; i < n; i++)
          g_assert_cmphex (_mixprec_sr_bits16 (8, firsts[j] + i), ==, bits16_of_words (8, firsts[j] + i));
      }
}

/* The 8- and 16-lane random bits plugins use equal the scalar ones (whole
 * words, and bfloat16's half words), also where the lanes' indices
 * straddle a change of key. */
static void
test_simd_random_bits (gconstpointer data)
{
#ifdef MIXPREC_HAVE_X86_SIMD
  const guint64 starts[] = { 0, 1, 12345, (G_GUINT64_CONSTANT (1) << 32) - 16,
                             (G_GUINT64_CONSTANT (1) << 32) - 15, (G_GUINT64_CONSTANT (1) << 32) - 8,
                             (G_GUINT64_CONSTANT (1) << 32) - 7, (G_GUINT64_CONSTANT (1) << 32) - 1,
                             (G_GUINT64_CONSTANT (9) << 32) - 3, G_MAXUINT64 - 15, G_MAXUINT64 - 7 };
  const guint64 seeds[] = { 0, 1, G_GUINT64_CONSTANT (0xDEADBEEFCAFEF00D) };
  _MixprecSimdLevel level = GPOINTER_TO_UINT (data);
  guint width = level == _MIXPREC_SIMD_AVX512 ? 16 : 8;

  if (simd_kernels_or_skip (level) == NULL)
    return;
  for (guint s = 0; s < G_N_ELEMENTS (seeds); s++)
    for (guint j = 0; j < G_N_ELEMENTS (starts); j++)
      {
        guint32 lanes[16];

        if (level == _MIXPREC_SIMD_AVX2)
          _mixprec_avx2_sr_bits_store (seeds[s], starts[j], lanes);
#ifdef MIXPREC_HAVE_X86_AVX512
        else
          _mixprec_avx512_sr_bits_store (seeds[s], starts[j], lanes);
#endif
        for (guint i = 0; i < width; i++)
          g_assert_cmphex (lanes[i], ==, _mixprec_sr_bits (seeds[s], starts[j] + i));

        /* The bfloat16 halves, from even and odd indices. */
        for (guint64 o = 0; o < 2; o++)
          {
            guint64 start = starts[j] - MIN (starts[j], o);

            if (level == _MIXPREC_SIMD_AVX2)
              _mixprec_avx2_sr_bits16_store (seeds[s], start, lanes);
#ifdef MIXPREC_HAVE_X86_AVX512
            else
              _mixprec_avx512_sr_bits16_store (seeds[s], start, lanes);
#endif
            for (guint i = 0; i < width && start + i >= start; i++)
              g_assert_cmphex (lanes[i], ==, bits16_of_words (seeds[s], start + i));
          }
      }
#else
  g_test_skip ("this build has no x86-64 SIMD kernels");
#endif
}

/* The bf16 rule is llm.c's: add the low 16 random bits, truncate. */
static void
test_stochastic_bfloat16_rule (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (17);

  for (guint i = 0; i < 100000; i++)
    {
      guint32 u = g_rand_int (rand) & 0x7F7FFFFF;   /* finite */
      guint32 r = g_rand_int (rand);

      u |= (i & 1) << 31;
      g_assert_cmphex (_mixprec_f32_to_bf16_sr (ref_f32 (u), r), ==, (u + (r & 0xFFFF)) >> 16);
    }
  /* Extreme random bits decide the neighbour deterministically. */
  g_assert_cmphex (_mixprec_f32_to_f16_sr (1.0f + 0x1p-11f, 0), ==, 0x3C00);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (1.0f + 0x1p-11f, 0x1FFF), ==, 0x3C01);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (1.0f + 0x1p-11f, 0xFFF), ==, 0x3C00);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (1.0f + 0x1p-11f, 0x1000), ==, 0x3C01);
  /* Below the smallest subnormal: s with probability |x| / s. */
  g_assert_cmphex (_mixprec_f32_to_f16_sr (0x1p-26f, 0x3FFFFFFF), ==, 0x0001);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (0x1p-26f, 0x40000000), ==, 0x0000);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (-0x1p-26f, 0x40000000), ==, 0x8000);
  g_assert_cmphex (_mixprec_f32_to_e4m3_sr (0x1p-12f, 0x1FFFFFFF), ==, 0x01);
  g_assert_cmphex (_mixprec_f32_to_e4m3_sr (0x1p-12f, 0x20000000), ==, 0x00);
  /* Overflow and specials follow round to nearest whatever the bits. */
  g_assert_cmphex (_mixprec_f32_to_f16_sr (INFINITY, 0xFFFFFFFF), ==, 0x7C00);
  g_assert_cmphex (_mixprec_f32_to_bf16_sr (-INFINITY, 0xFFFFFFFF), ==, 0xFF80);
  g_assert_cmphex (_mixprec_f32_to_e4m3_sr (INFINITY, 0), ==, 0x7F);
  g_assert_cmphex (_mixprec_f32_to_e5m2_sr (-INFINITY, 0xFFFFFFFF), ==, 0xFC);
  g_assert_cmphex (_mixprec_f32_to_bf16_sr (ref_f32 (0x7F800001), 0xFFFFFFFF), ==, 0x7FC0);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (65504.0f, 0xFFFFFFFF), ==, 0x7BFF);
  g_assert_cmphex (_mixprec_f32_to_f16_sr (65505.0f, 0xFFFFFFFF), ==, 0x7C00);
  g_assert_cmphex (_mixprec_f32_to_e4m3_sr (449.0f, 0xFFFFFFFF), ==, 0x7F);
  g_assert_cmphex (_mixprec_f32_to_e4m3_sr (449.0f, 0), ==, 0x7E);
  g_assert_cmphex (_mixprec_f32_to_bf16_sr (ref_f32 (0x7F7FFFFF), 0), ==, 0x7F7F);
  g_assert_cmphex (_mixprec_f32_to_bf16_sr (ref_f32 (0x7F7FFFFF), 1), ==, 0x7F80);
}

/* ------------------------------------------------------------ GBytes API */

/* Every source pattern of every 8- and 16-bit format, converted to every
 * other format through the public GBytes entry point, against the model
 * (decode exactly, round once). */
static void
test_convert_all_pairs (void)
{
  const struct { MixprecDType dtype; const RefFormat *ref; } all[] = {
    { MIXPREC_DTYPE_FLOAT32, NULL },
    { MIXPREC_DTYPE_FLOAT16, &ref_f16 },
    { MIXPREC_DTYPE_BFLOAT16, &ref_bf16 },
    { MIXPREC_DTYPE_FLOAT8_E4M3, &ref_e4m3 },
    { MIXPREC_DTYPE_FLOAT8_E5M2, &ref_e5m2 },
  };
  g_autofree gfloat *fp32_in = g_new (gfloat, 65536);

  random_inputs (fp32_in, 65536, 23);
  for (guint s = 0; s < G_N_ELEMENTS (all); s++)
    for (guint d = 0; d < G_N_ELEMENTS (all); d++)
      {
        g_autoptr(GBytes) src = NULL;
        g_autoptr(GBytes) dst = NULL;
        g_autoptr(GError) error = NULL;
        gsize n, dst_len;
        gconstpointer src_data, dst_data;
        gsize mismatches = 0;

        if (all[s].ref == NULL)
          src = g_bytes_new (fp32_in, 65536 * 4);
        else
          {
            gsize count = (gsize) 1 << all[s].ref->bits;
            g_autofree guint8 *buf = g_malloc (count * (all[s].ref->bits / 8));

            for (gsize i = 0; i < count; i++)
              {
                if (all[s].ref->bits == 16)
                  ((guint16 *) buf)[i] = (guint16) i;
                else
                  buf[i] = (guint8) i;
              }
            src = g_bytes_new (buf, count * (all[s].ref->bits / 8));
          }
        src_data = g_bytes_get_data (src, NULL);
        n = g_bytes_get_size (src) / mixprec_dtype_get_size (all[s].dtype);

        dst = mixprec_convert (all[s].dtype, src, all[d].dtype, MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
        g_assert_no_error (error);
        g_assert_nonnull (dst);
        dst_data = g_bytes_get_data (dst, &dst_len);
        g_assert_cmpuint (dst_len, ==, n * mixprec_dtype_get_size (all[d].dtype));

        for (gsize i = 0; i < n; i++)
          {
            guint32 in_bits = bits_at (all[s].dtype, src_data, i);
            guint32 out_bits = bits_at (all[d].dtype, dst_data, i);
            gdouble v = all[s].ref != NULL ? ref_decode (all[s].ref, in_bits) : (gdouble) ref_f32 (in_bits);
            gboolean ok;

            if (all[d].ref == NULL)
              {
                gdouble got = ref_f32 (out_bits);

                ok = (isnan (v) ? isnan (got) : got == v) && (signbit (got) != 0) == (signbit (v) != 0);
              }
            else if (isnan (v))
              ok = isnan (ref_decode (all[d].ref, out_bits)) &&
                   (out_bits >> (all[d].ref->bits - 1)) == (signbit (v) != 0);
            else
              ok = ref_matches (all[d].ref, out_bits, ref_round_nearest (all[d].ref, v));
            if (!ok && mismatches++ == 0)
              g_test_message ("%s -> %s: 0x%x gave 0x%x", mixprec_dtype_get_name (all[s].dtype),
                              mixprec_dtype_get_name (all[d].dtype), in_bits, out_bits);
          }
        g_assert_cmpuint (mismatches, ==, 0);
      }
}

/* Conversions where every value fits give the same bits whatever the
 * rounding mode or seed. */
static void
test_convert_widening_ignores_rounding (void)
{
  const MixprecDType pairs[][2] = {
    { MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32 },
    { MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32 },
    { MIXPREC_DTYPE_FLOAT8_E4M3, MIXPREC_DTYPE_FLOAT16 },
    { MIXPREC_DTYPE_FLOAT8_E5M2, MIXPREC_DTYPE_FLOAT16 },
    { MIXPREC_DTYPE_FLOAT8_E4M3, MIXPREC_DTYPE_BFLOAT16 },
    { MIXPREC_DTYPE_FLOAT8_E5M2, MIXPREC_DTYPE_BFLOAT16 },
  };
  guint16 in[65536];

  for (guint32 i = 0; i < 65536; i++)
    in[i] = (guint16) i;
  for (guint p = 0; p < G_N_ELEMENTS (pairs); p++)
    {
      g_autoptr(GBytes) src = g_bytes_new (in, sizeof in);
      g_autoptr(GBytes) a = mixprec_convert (pairs[p][0], src, pairs[p][1], MIXPREC_ROUNDING_NEAREST_EVEN, 0, NULL);
      g_autoptr(GBytes) b = mixprec_convert (pairs[p][0], src, pairs[p][1], MIXPREC_ROUNDING_STOCHASTIC, 1, NULL);

      g_assert_true (g_bytes_equal (a, b));
    }
}

static void
test_convert_same_dtype (void)
{
  const guint8 data[] = { 1, 2, 3, 4, 5, 6, 7, 8, 0xFF, 0x7F, 0x80, 0x00 };
  g_autoptr(GBytes) src = g_bytes_new (data, sizeof data);

  for (guint d = 0; d < MIXPREC_DTYPE_COUNT; d++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GBytes) out = mixprec_convert (d, src, d, MIXPREC_ROUNDING_STOCHASTIC, 5, &error);

      g_assert_no_error (error);
      g_assert_true (g_bytes_equal (out, src));
    }
}

/* A GBytes that is an odd slice of another converts like an aligned one. */
static void
test_convert_unaligned_bytes (void)
{
  const guint16 halves[] = { 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x7E00 };
  guint8 raw[1 + sizeof halves];
  g_autoptr(GBytes) whole = NULL;
  g_autoptr(GBytes) slice = NULL;
  g_autoptr(GBytes) out = NULL;
  const gfloat *f;

  memcpy (raw + 1, halves, sizeof halves);
  whole = g_bytes_new (raw, sizeof raw);
  slice = g_bytes_new_from_bytes (whole, 1, sizeof halves);
  out = mixprec_convert (MIXPREC_DTYPE_FLOAT16, slice, MIXPREC_DTYPE_FLOAT32,
                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, NULL);
  g_assert_cmpuint (g_bytes_get_size (out), ==, 5 * 4);
  f = g_bytes_get_data (out, NULL);
  g_assert_cmpfloat (f[0], ==, 1.0f);
  g_assert_cmpfloat (f[1], ==, -2.0f);
  g_assert_cmpfloat (f[2], ==, 65504.0f);
  g_assert_cmpfloat (f[3], ==, 0x1p-24f);
  g_assert_true (isnan (f[4]));
}

static void
test_convert_empty (void)
{
  g_autoptr(GBytes) empty = g_bytes_new (NULL, 0);
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) out = mixprec_convert (MIXPREC_DTYPE_FLOAT32, empty, MIXPREC_DTYPE_BFLOAT16,
                                           MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);

  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (out), ==, 0);
  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, NULL, MIXPREC_DTYPE_FLOAT16, NULL, 0,
                                        MIXPREC_ROUNDING_STOCHASTIC, 0, 0, &error));
  g_assert_no_error (error);
}

static void
test_convert_errors (void)
{
  const guint8 data[7] = { 0 };
  g_autoptr(GBytes) seven = g_bytes_new (data, sizeof data);
  g_autoptr(GBytes) six = g_bytes_new (data, 6);
  g_autoptr(GError) error = NULL;
  GBytes *out;
  guint16 dst[4];

  /* 7 bytes are not whole fp32, fp16 or bf16 elements. */
  out = mixprec_convert (MIXPREC_DTYPE_FLOAT32, seven, MIXPREC_DTYPE_FLOAT16,
                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
  g_assert_null (out);
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_LENGTH);
  g_assert_nonnull (strstr (error->message, "7 bytes"));
  g_assert_nonnull (strstr (error->message, "float32"));
  g_assert_nonnull (strstr (error->message, "4 bytes"));
  g_clear_error (&error);
  out = mixprec_convert (MIXPREC_DTYPE_BFLOAT16, seven, MIXPREC_DTYPE_FLOAT32,
                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
  g_assert_null (out);
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_LENGTH);
  g_clear_error (&error);
  /* ... but they are 8-bit elements. */
  out = mixprec_convert (MIXPREC_DTYPE_FLOAT8_E4M3, seven, MIXPREC_DTYPE_FLOAT32,
                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (out), ==, 28);
  g_bytes_unref (out);

  /* Dtypes and rounding modes outside the enums, from either side. */
  out = mixprec_convert ((MixprecDType) 5, six, MIXPREC_DTYPE_FLOAT32,
                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
  g_assert_null (out);
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_DTYPE);
  g_assert_nonnull (strstr (error->message, "Source dtype 5"));
  g_clear_error (&error);
  out = mixprec_convert (MIXPREC_DTYPE_FLOAT16, six, (MixprecDType) -3,
                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, &error);
  g_assert_null (out);
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_DTYPE);
  g_assert_nonnull (strstr (error->message, "Destination dtype -3"));
  g_clear_error (&error);
  out = mixprec_convert (MIXPREC_DTYPE_FLOAT16, six, MIXPREC_DTYPE_BFLOAT16,
                         (MixprecRounding) 2, 0, &error);
  g_assert_null (out);
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_ROUNDING);
  g_assert_nonnull (strstr (error->message, "Rounding mode 2"));
  g_clear_error (&error);
  /* The array form checks the enums too, before touching memory. */
  g_assert_false (mixprec_convert_array (MIXPREC_DTYPE_FLOAT16, data, (MixprecDType) 99, dst, 2,
                                         MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error));
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_DTYPE);
  g_clear_error (&error);
  g_assert_false (mixprec_convert_array (MIXPREC_DTYPE_FLOAT16, data, MIXPREC_DTYPE_FLOAT32, dst, 2,
                                         (MixprecRounding) -1, 0, 0, &error));
  g_assert_error (error, MIXPREC_DTYPE_ERROR, MIXPREC_DTYPE_ERROR_INVALID_ROUNDING);
}

/* A large array, split across threads by the library, gives the bits of
 * the scalar table run on one thread. */
static void
test_convert_large_threaded (void)
{
  const gsize n = (1 << 20) + 77;
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree guint8 *a = g_malloc (n * 2);
  g_autofree guint8 *b = g_malloc (n * 2);

  random_inputs (in, n, 31);
  for (guint f = 0; f < G_N_ELEMENTS (narrow); f++)
    for (guint r = 0; r < 2; r++)
      {
        MixprecDType dtype = narrow[f].dtype;
        gsize size = mixprec_dtype_get_size (dtype);

        g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in, dtype, a, n, r, 9, 1, NULL));
        _mixprec_convert_run (scalar_kernels (), MIXPREC_DTYPE_FLOAT32, in, dtype, b, n, r, 9, 1);
        g_assert_cmpmem (a, n * size, b, n * size);

        /* And back, and between two narrow formats through the buffer. */
        g_assert_true (mixprec_convert_array (dtype, a, MIXPREC_DTYPE_FLOAT8_E5M2, b, n, r, 9, 1, NULL));
        _mixprec_convert_run (scalar_kernels (), dtype, a, MIXPREC_DTYPE_FLOAT8_E5M2, b + n, n / 2, r, 9, 1);
        g_assert_cmpmem (b, n / 2, b + n, n / 2);
      }
}

/* Arrays beyond the cache take the streaming path inside the library. */
static void
test_convert_huge (void)
{
  const gsize n = (gsize) 6 << 20;    /* 36 MiB moved to bf16, 48 MiB back */
  g_autofree gfloat *in = g_new (gfloat, n);
  g_autofree gfloat *back = g_new (gfloat, n);
  g_autofree guint16 *a = g_new0 (guint16, n);  /* a[0] is decoded too */
  g_autofree guint16 *b = g_new (guint16, n);

  random_inputs (in, n, 43);
  for (guint f = 0; f < 2; f++)
    {
      MixprecDType dtype = narrow[f].dtype;

      g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, in + 1, dtype, a + 1, n - 1,
                                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
      _mixprec_convert_run (scalar_kernels (), MIXPREC_DTYPE_FLOAT32, in + 1, dtype, b + 1, n - 1,
                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
      g_assert_cmpmem (a + 1, (n - 1) * 2, b + 1, (n - 1) * 2);
      g_assert_true (mixprec_convert_array (dtype, a, MIXPREC_DTYPE_FLOAT32, back, n,
                                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
      _mixprec_convert_run (scalar_kernels (), dtype, a, MIXPREC_DTYPE_FLOAT32, in, n,
                            MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0);
      g_assert_cmpmem (back, n * 4, in, n * 4);
      random_inputs (in, n, 43);
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/dtype/names", test_dtype_names);
  g_test_add_func ("/dtype/from-name/aliases", test_dtype_from_name_aliases);
  g_test_add_func ("/dtype/from-name/unknown", test_dtype_from_name_unknown);
  g_test_add_func ("/dtype/validity-and-sizes", test_dtype_validity_and_sizes);
  g_test_add_func ("/dtype/limits", test_dtype_limits);
  g_test_add_func ("/dtype/getters-reject-invalid", test_dtype_getters_reject_invalid);

  g_test_add_func ("/dtype/decode/float16-exhaustive", test_decode_float16_exhaustive);
  g_test_add_func ("/dtype/decode/bfloat16-exhaustive", test_decode_bfloat16_exhaustive);
  g_test_add_func ("/dtype/decode/float8-exhaustive", test_decode_float8_exhaustive);
  g_test_add_func ("/dtype/round-trip/float16", test_round_trip_float16);
  g_test_add_func ("/dtype/round-trip/bfloat16", test_round_trip_bfloat16);

  g_test_add_func ("/dtype/encode/specials", test_encode_specials);
  g_test_add_func ("/dtype/encode/nearest-even-sample", test_encode_nearest_even_sample);
  g_test_add_func ("/dtype/encode/float16-matches-fp-conversion", test_encode_float16_matches_fp_conversion);

  for (guint l = 0; l < G_N_ELEMENTS (simd_levels); l++)
    {
      const gchar *level = simd_levels[l] == _MIXPREC_SIMD_AVX512 ? "avx512" : "avx2";
      gpointer data = GUINT_TO_POINTER (simd_levels[l]);
      g_autofree gchar *decode = g_strdup_printf ("/dtype/simd/%s/decode-exhaustive", level);
      g_autofree gchar *encode = g_strdup_printf ("/dtype/simd/%s/encode-sample", level);
      g_autofree gchar *streaming = g_strdup_printf ("/dtype/simd/%s/streaming", level);
      g_autofree gchar *bits = g_strdup_printf ("/dtype/simd/%s/random-bits", level);

      g_test_add_data_func (decode, data, test_simd_decode_exhaustive);
      g_test_add_data_func (encode, data, test_simd_encode_sample);
      g_test_add_data_func (streaming, data, test_simd_streaming);
      g_test_add_data_func (bits, data, test_simd_random_bits);
    }

  g_test_add_func ("/dtype/stochastic/neighbours", test_stochastic_neighbours);
  g_test_add_func ("/dtype/stochastic/unbiased", test_stochastic_unbiased);
  g_test_add_func ("/dtype/stochastic/bits-uniform", test_stochastic_bits_uniform);
  g_test_add_func ("/dtype/stochastic/bits16-pairs", test_stochastic_bits16_pairs);
  g_test_add_func ("/dtype/stochastic/bfloat16-pairs", test_stochastic_bfloat16_pairs);
  g_test_add_func ("/dtype/stochastic/reproducible", test_stochastic_reproducible);
  g_test_add_func ("/dtype/stochastic/slices", test_stochastic_slices);
  g_test_add_func ("/dtype/stochastic/index-boundaries", test_stochastic_index_boundaries);
  g_test_add_func ("/dtype/stochastic/rules", test_stochastic_bfloat16_rule);

  g_test_add_func ("/dtype/convert/all-pairs", test_convert_all_pairs);
  g_test_add_func ("/dtype/convert/widening-ignores-rounding", test_convert_widening_ignores_rounding);
  g_test_add_func ("/dtype/convert/same-dtype", test_convert_same_dtype);
  g_test_add_func ("/dtype/convert/empty", test_convert_empty);
  g_test_add_func ("/dtype/convert/unaligned-bytes", test_convert_unaligned_bytes);
  g_test_add_func ("/dtype/convert/errors", test_convert_errors);
  g_test_add_func ("/dtype/convert/large-threaded", test_convert_large_threaded);
  g_test_add_func ("/dtype/convert/huge", test_convert_huge);

  return g_test_run ();
}
