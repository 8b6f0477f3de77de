/* test-fp8.c — scaled float8 casts and MX block quantisation: every fp32
 * edge value and random data against an independent double-precision
 * model (dtype-reference.h plus the rules below, transcribed from the
 * OCP 8-bit and MX v1.0 specifications), both overflow modes, amax, the
 * AVX2 and AVX-512 kernels against the same expectation, dequantisation,
 * and the GErrors of bad arguments. */
#include "config.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>
#include "mixprec-fp8-private.h"
#include "dtype-reference.h"

#define N_RANDOM (1u << 19)

typedef struct {
  MixprecDType dtype;
  const RefFormat *ref;
  gint emax_elem;
} Fp8;

static const Fp8 formats[] = {
  { MIXPREC_DTYPE_FLOAT8_E4M3, &ref_e4m3, 8 },
  { MIXPREC_DTYPE_FLOAT8_E5M2, &ref_e5m2, 15 },
};

static const _MixprecSimdLevel levels[] = { _MIXPREC_SIMD_SCALAR, _MIXPREC_SIMD_AVX2, _MIXPREC_SIMD_AVX512 };

/* The kernels of @level where this process may run them, else NULL. */
static const _MixprecFp8Kernels *
kernels_at (_MixprecSimdLevel level)
{
  if (_mixprec_cpu_simd_level () < level)
    return NULL;
  return _mixprec_fp8_kernels_for_level (level);
}

static guint32
f32_bits (gfloat f)
{
  guint32 u;

  memcpy (&u, &f, sizeof u);
  return u;
}

/* ------------------------------------------------------------ the model */

/* The byte of @f whose value is @v (finite or e5m2's Inf, not NaN), found
 * by decoding: positive patterns are ordered like their values. */
static guint8
ref_encode (const RefFormat *f,
            gdouble          v)
{
  guint lo = 0, hi = f->no_inf ? 0x7E : 0x7C;
  gdouble a = fabs (v);

  while (lo < hi)
    {
      guint mid = (lo + hi) / 2;

      if (ref_decode (f, mid) < a)
        lo = mid + 1;
      else
        hi = mid;
    }
  g_assert_cmpfloat (ref_decode (f, lo), ==, a);
  return (guint8) (lo | (signbit (v) ? 0x80 : 0));
}

/* The NaN byte: sign | 0x7F in both formats. */
static guint8
ref_nan (gboolean negative)
{
  return negative ? 0xFF : 0x7F;
}

/* The expected cast of @x * @scale: the product rounded once to fp32
 * (exact in double, then one rounding), then to @f with ties to even.
 * Saturating: |y| >= max (Inf included) gives ±max before any rounding,
 * as `y.clamp(-max, max)` does; non-saturating: overflow gives Inf (e5m2)
 * or NaN (e4m3, which has no Inf), as the OCP 8-bit specification's
 * non-saturating mode says. */
static guint8
ref_cast (const RefFormat *f,
          gboolean         saturate,
          gfloat           x,
          gfloat           scale)
{
  gfloat y;
  gdouble r;

  if (isnan (x))
    return ref_nan (signbit (x));
  y = (gfloat) ((gdouble) x * (gdouble) scale);
  if (saturate && fabs ((gdouble) y) >= f->max)
    return ref_encode (f, copysign (f->max, y));
  r = ref_round_nearest (f, y);
  if (isnan (r))
    return ref_nan (signbit (y));
  return ref_encode (f, r);
}

/* max |x| over the non-NaN values, 0 for none. */
static gfloat
ref_amax (const gfloat *x,
          gsize         n)
{
  gdouble m = 0;

  for (gsize i = 0; i < n; i++)
    if (!isnan (x[i]) && fabs ((gdouble) x[i]) > m)
      m = fabs ((gdouble) x[i]);
  return (gfloat) m;
}

/* OCP MX v1.0, section 6.3, FLOOR: shared_exp = floor(log2(max |V_i|)) -
 * emax_elem, clamped to the E8M0 range; X = 2^shared_exp; P_i = V_i / X
 * quantised to the element format, clamped to its normal range. Where the
 * specification leaves the choice to the implementation: amax 0 (log2 =
 * -Inf) clamps to -127; a block with NaN gets the NaN scale 0xFF and
 * elements V_i / Inf (±0, NaN for NaN and Inf), as torchao; an infinite
 * amax takes exponent 128 (torchao reads the exponent field). */
static void
ref_mx (const Fp8    *fmt,
        const gfloat *src,
        gsize         n,
        guint         block_size,
        guint8       *dst,
        guint8       *scales)
{
  for (gsize start = 0, b = 0; start < n; start += block_size, b++)
    {
      gsize len = MIN ((gsize) block_size, n - start);
      gboolean has_nan = FALSE;
      gdouble amax = 0;
      gint e;

      for (gsize i = 0; i < len; i++)
        {
          gfloat v = src[start + i];

          if (isnan (v))
            has_nan = TRUE;
          else
            amax = MAX (amax, fabs ((gdouble) v));
        }
      if (has_nan)
        {
          scales[b] = 0xFF;
          for (gsize i = 0; i < len; i++)
            {
              gfloat v = src[start + i];

              dst[start + i] = isnan (v) || isinf (v) ? ref_nan (signbit (v)) : (signbit (v) ? 0x80 : 0);
            }
          continue;
        }
      if (amax == 0)
        e = -127;
      else if (isinf (amax))
        e = 128 - fmt->emax_elem;
      else
        {
          gint k;

          frexp (amax, &k);     /* amax in [2^(k-1), 2^k) */
          e = (k - 1) - fmt->emax_elem;
        }
      e = CLAMP (e, -127, 127);
      scales[b] = (guint8) (e + 127);
      for (gsize i = 0; i < len; i++)
        {
          gdouble p = ldexp ((gdouble) src[start + i], -e);   /* exact */

          if (fabs (p) >= fmt->ref->max)
            dst[start + i] = ref_encode (fmt->ref, copysign (fmt->ref->max, p));
          else
            dst[start + i] = ref_encode (fmt->ref, ref_round_nearest (fmt->ref, p));
        }
    }
}

/* ------------------------------------------------------------ inputs */

static void
add (GArray *a,
     gfloat  v)
{
  gfloat neg = -v;

  g_array_append_val (a, v);
  g_array_append_val (a, neg);
}

static void
add_bits (GArray  *a,
          guint32  u)
{
  add (a, ref_f32 (u));
}

/* The fp32 values y around every rounding boundary of @f: each value, its
 * fp32 neighbours, each midpoint between neighbours (the ties) and its
 * neighbours, the tie above max and the values around it, and fp32's own
 * special values: ±0, subnormals, min normal, max, Inf, NaNs with payloads. */
static GArray *
edge_values (const RefFormat *f)
{
  GArray *a = g_array_new (FALSE, FALSE, sizeof (gfloat));
  guint top = f->no_inf ? 0x7E : 0x7B;
  static const guint32 specials[] = {
    0x00000000, 0x00000001, 0x00000002, 0x003FFFFF, 0x00400000, 0x007FFFFF,
    0x00800000, 0x00800001, 0x3F800000, 0x7F7FFFFF, 0x7F800000,
    0x7F800001, 0x7FA5A5A5, 0x7FC00000, 0x7FC00001, 0x7FFFFFFF,
  };

  for (guint b = 0; b <= top; b++)
    {
      gfloat v = (gfloat) ref_decode (f, b);
      gfloat next = (gfloat) (b < top ? ref_decode (f, b + 1) : f->max + ref_quantum (f, f->max));
      gfloat mid = (gfloat) (((gdouble) v + next) / 2);    /* exact: one more bit */

      add (a, v);
      add (a, nextafterf (v, INFINITY));
      if (v > 0)
        add (a, nextafterf (v, 0));
      add (a, mid);
      add (a, nextafterf (mid, 0));
      add (a, nextafterf (mid, INFINITY));
      add (a, next);
      add (a, nextafterf (next, INFINITY));
    }
  add (a, (gfloat) (2 * f->max));
  add (a, 480.0f);
  add (a, 65536.0f);
  for (guint i = 0; i < G_N_ELEMENTS (specials); i++)
    add_bits (a, specials[i]);
  return a;
}

/* N_RANDOM values: a quarter uniform over all fp32 bit patterns (every
 * exponent, NaN and Inf included), a quarter uniform over twice the
 * format's range divided by @scale, a quarter with exponents spread over
 * the format's subnormals and normals, and a quarter spread over fp32's
 * whole exponent range. */
static gfloat *
random_values (GRand           *rand,
               const RefFormat *f,
               gfloat           scale)
{
  gfloat *x = g_new (gfloat, N_RANDOM);

  for (guint i = 0; i < N_RANDOM; i++)
    {
      gdouble sign = g_rand_boolean (rand) ? -1 : 1;

      switch (i % 4)
        {
        case 0:
          x[i] = ref_f32 (g_rand_int (rand));
          break;
        case 1:
          x[i] = (gfloat) (g_rand_double_range (rand, -2 * f->max, 2 * f->max) / scale);
          break;
        case 2:
          x[i] = (gfloat) (sign * ldexp (g_rand_double_range (rand, 1, 2),
                                         g_rand_int_range (rand, -20, 18)) / scale);
          break;
        default:
          x[i] = (gfloat) (sign * ldexp (g_rand_double_range (rand, 1, 2), g_rand_int_range (rand, -149, 128)));
          break;
        }
    }
  return x;
}

/* ------------------------------------------------------------ checking */

static const gfloat test_scales[] = {
  1.0f, 0.5f, 0x1p-20f, 0x1p20f, 0x1p126f, 0x1p-126f, 3.0f, 0.448f, 1.0f / 3.0f, 6.5e-30f, 1.7e30f,
};

/* Runs every level's kernel on @x and compares each byte and the amax
 * with the model. */
static void
check_quantize (const Fp8    *fmt,
                gboolean      saturate,
                gfloat        scale,
                const gfloat *x,
                gsize         n,
                const gchar  *what)
{
  g_autofree guint8 *expected = g_new (guint8, n + 1);
  g_autofree guint8 *got = g_new (guint8, n + 1);
  guint32 amax_expected = f32_bits (ref_amax (x, n));

  for (gsize i = 0; i < n; i++)
    expected[i] = ref_cast (fmt->ref, saturate, x[i], scale);

  for (guint l = 0; l < G_N_ELEMENTS (levels); l++)
    {
      const _MixprecFp8Kernels *k = kernels_at (levels[l]);
      guint32 amax = 0;

      if (k == NULL)
        continue;
      memset (got, 0xA5, n + 1);
      k->quantize (_mixprec_fp8_format (fmt->dtype), saturate, scale, x, got, n, &amax);
      for (gsize i = 0; i < n; i++)
        if (got[i] != expected[i])
          g_error ("%s, %s, %s, scale %a, %s kernels: x = %a (0x%08x): got 0x%02x, expected 0x%02x",
                   what, mixprec_dtype_get_name (fmt->dtype), saturate ? "saturating" : "non-saturating",
                   (gdouble) scale, k->name, (gdouble) x[i], f32_bits (x[i]), got[i], expected[i]);
      g_assert_cmphex (got[n], ==, 0xA5);
      g_assert_cmphex (amax, ==, amax_expected);

      /* Without the amax: the same bytes. */
      memset (got, 0, n);
      k->quantize (_mixprec_fp8_format (fmt->dtype), saturate, scale, x, got, n, NULL);
      g_assert_cmpmem (got, n, expected, n);

      amax = 0;
      k->amax (x, n, &amax);
      g_assert_cmphex (amax, ==, amax_expected);
    }
}

static void
test_quantize_edges (void)
{
  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    {
      g_autoptr(GArray) edges = edge_values (formats[f].ref);
      g_autoptr(GArray) x = g_array_new (FALSE, FALSE, sizeof (gfloat));

      for (guint s = 0; s < G_N_ELEMENTS (test_scales); s++)
        {
          /* Inputs whose products are the edge values (exactly for the
           * power-of-two scales), and the edge values themselves. */
          g_array_set_size (x, 0);
          for (guint i = 0; i < edges->len; i++)
            {
              gfloat y = g_array_index (edges, gfloat, i);
              gfloat xi = (gfloat) ((gdouble) y / test_scales[s]);

              g_array_append_val (x, xi);
              g_array_append_val (x, y);
            }
          for (gint sat = 0; sat <= 1; sat++)
            check_quantize (&formats[f], sat, test_scales[s], (const gfloat *) x->data, x->len, "edges");
        }
    }
}

/* A few hand-checked bytes, so that the model itself is held to the
 * specification's tables. */
static void
test_quantize_known (void)
{
  static const struct {
    MixprecDType dt;
    gboolean sat;
    gfloat x;
    guint8 byte;
  } known[] = {
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 448.0f, 0x7E },
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 464.0f, 0x7E },        /* tie: to even 448 */
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 464.00003f, 0x7F },    /* past the tie: NaN */
    { MIXPREC_DTYPE_FLOAT8_E4M3, TRUE, 464.00003f, 0x7E },
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, -INFINITY, 0xFF },
    { MIXPREC_DTYPE_FLOAT8_E4M3, TRUE, -INFINITY, 0xFE },
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 0x1p-9f, 0x01 },       /* smallest subnormal */
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 0x1p-10f, 0x00 },      /* tie: to even 0 */
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 0x1.8p-9f, 0x02 },     /* tie: to even 2^-8 */
    { MIXPREC_DTYPE_FLOAT8_E4M3, FALSE, 0x1p-6f, 0x08 },       /* smallest normal */
    { MIXPREC_DTYPE_FLOAT8_E5M2, FALSE, 57344.0f, 0x7B },
    { MIXPREC_DTYPE_FLOAT8_E5M2, FALSE, 61440.0f, 0x7C },      /* tie: to even, Inf */
    { MIXPREC_DTYPE_FLOAT8_E5M2, TRUE, 61440.0f, 0x7B },
    { MIXPREC_DTYPE_FLOAT8_E5M2, FALSE, -1e30f, 0xFC },
    { MIXPREC_DTYPE_FLOAT8_E5M2, TRUE, INFINITY, 0x7B },
    { MIXPREC_DTYPE_FLOAT8_E5M2, FALSE, 0x1p-16f, 0x01 },
    { MIXPREC_DTYPE_FLOAT8_E5M2, TRUE, -NAN, 0xFF },
  };

  for (guint i = 0; i < G_N_ELEMENTS (known); i++)
    {
      guint8 b = 0;
      gfloat amax = -1;

      g_assert_true (mixprec_fp8_quantize (known[i].dt, &known[i].x, 1, 1.0f,
                                           known[i].sat ? MIXPREC_FP8_OVERFLOW_SATURATING
                                                        : MIXPREC_FP8_OVERFLOW_NON_SATURATING,
                                           &b, &amax, NULL));
      g_assert_cmphex (b, ==, known[i].byte);
      g_assert_cmphex (b, ==, ref_cast (known[i].dt == MIXPREC_DTYPE_FLOAT8_E4M3 ? &ref_e4m3 : &ref_e5m2,
                                        known[i].sat, known[i].x, 1.0f));
    }
}

static void
test_quantize_random (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (20260517);

  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    for (guint s = 0; s < G_N_ELEMENTS (test_scales); s += 3)
      {
        g_autofree gfloat *x = random_values (rand, formats[f].ref, test_scales[s]);

        for (gint sat = 0; sat <= 1; sat++)
          {
            check_quantize (&formats[f], sat, test_scales[s], x, N_RANDOM, "random");
            /* Short and misaligned runs: every tail length. */
            for (gsize n = 0; n < 70; n++)
              check_quantize (&formats[f], sat, test_scales[s], x + 1 + n, n, "tail");
          }
      }
}

/* ------------------------------------------------------------ amax */

static void
test_amax (void)
{
  const gfloat with_nan[] = { 1.0f, NAN, -3.0f, 2.0f, -NAN };
  const gfloat all_nan[] = { NAN, -NAN };
  const gfloat with_inf[] = { 1.0f, -INFINITY, NAN };
  const gfloat zeros[] = { -0.0f, 0.0f };
  gfloat amax;
  guint8 out[8];

  g_assert_true (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, with_nan, 5, 1, 0, out, &amax, NULL));
  g_assert_cmpfloat (amax, ==, 3.0f);
  g_assert_true (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, all_nan, 2, 1, 0, out, &amax, NULL));
  g_assert_cmpfloat (amax, ==, 0.0f);
  g_assert_true (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E5M2, with_inf, 3, 1, 0, out, &amax, NULL));
  g_assert_cmpfloat (amax, ==, INFINITY);
  g_assert_true (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E5M2, zeros, 2, 1, 0, out, &amax, NULL));
  g_assert_cmphex (f32_bits (amax), ==, 0);
  amax = 7.0f;
  g_assert_true (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E5M2, NULL, 0, 1, 0, NULL, &amax, NULL));
  g_assert_cmpfloat (amax, ==, 0.0f);
  /* The amax is of the inputs, before the scale. */
  g_assert_true (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, with_nan, 5, 0.25f, 1, out, &amax, NULL));
  g_assert_cmpfloat (amax, ==, 3.0f);

  /* The engine's forms keep a running maximum (fmaxf). */
  amax = 5.0f;
  _mixprec_fp8_amax_f32 (with_nan, 5, &amax);
  g_assert_cmpfloat (amax, ==, 5.0f);
  _mixprec_fp8_amax_f32 (with_inf, 3, &amax);
  g_assert_cmpfloat (amax, ==, INFINITY);
  amax = 2.5f;
  _mixprec_fp8_quantize_f32 (MIXPREC_DTYPE_FLOAT8_E4M3, TRUE, 1.0f, with_nan, out, 5, &amax);
  g_assert_cmpfloat (amax, ==, 3.0f);
  _mixprec_fp8_quantize_f32 (MIXPREC_DTYPE_FLOAT8_E4M3, TRUE, 1.0f, with_nan, out, 5, NULL);
  g_assert_cmphex (out[1], ==, 0x7F);
  g_assert_cmphex (out[4], ==, 0xFF);
}

/* ------------------------------------------------------------ dequantize */

static void
test_dequantize (void)
{
  static const gfloat scale_invs[] = { 1.0f, 0.5f, 1.0f / 3.0f, 0x1p-140f / 0x1p-20f, 1e30f, 0x1p100f };

  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    for (guint s = 0; s < G_N_ELEMENTS (scale_invs); s++)
      {
        guint8 all[256];
        gfloat out[256];

        for (guint b = 0; b < 256; b++)
          all[b] = (guint8) b;
        g_assert_true (mixprec_fp8_dequantize (formats[f].dtype, all, 256, scale_invs[s], out, NULL));
        for (guint b = 0; b < 256; b++)
          {
            gdouble v = ref_decode (formats[f].ref, b);
            /* The product of two floats is exact in double; one rounding. */
            gfloat expected = (gfloat) (v * scale_invs[s]);

            if (isnan (v))
              g_assert_true (isnan (out[b]));
            else
              g_assert_cmphex (f32_bits (out[b]), ==, f32_bits (expected));
          }
      }
}

/* ------------------------------------------------------------ MX */

static void
check_mx (const Fp8    *fmt,
          const gfloat *x,
          gsize         n,
          guint         block_size)
{
  gsize nb = (n + block_size - 1) / block_size;
  g_autofree guint8 *expected = g_new (guint8, n + 1);
  g_autofree guint8 *expected_scales = g_new (guint8, nb + 1);
  g_autofree guint8 *got = g_new (guint8, n + 1);
  g_autofree guint8 *got_scales = g_new (guint8, nb + 1);
  g_autofree gfloat *back = g_new (gfloat, n + 1);

  ref_mx (fmt, x, n, block_size, expected, expected_scales);
  for (guint l = 0; l < G_N_ELEMENTS (levels); l++)
    {
      const _MixprecFp8Kernels *k = kernels_at (levels[l]);

      if (k == NULL)
        continue;
      memset (got, 0xA5, n + 1);
      memset (got_scales, 0xA5, nb + 1);
      k->mx_quantize (_mixprec_fp8_format (fmt->dtype), block_size, x, n, got, got_scales);
      for (gsize b = 0; b < nb; b++)
        if (got_scales[b] != expected_scales[b])
          g_error ("MX %s, blocks of %u, %s kernels: block %" G_GSIZE_FORMAT ": scale 0x%02x, expected 0x%02x",
                   mixprec_dtype_get_name (fmt->dtype), block_size, k->name, b, got_scales[b], expected_scales[b]);
      for (gsize i = 0; i < n; i++)
        if (got[i] != expected[i])
          g_error ("MX %s, blocks of %u, %s kernels: x[%" G_GSIZE_FORMAT "] = %a (scale 0x%02x): got 0x%02x, expected 0x%02x",
                   mixprec_dtype_get_name (fmt->dtype), block_size, k->name, i, (gdouble) x[i],
                   expected_scales[i / block_size], got[i], expected[i]);
      g_assert_cmphex (got[n], ==, 0xA5);
      g_assert_cmphex (got_scales[nb], ==, 0xA5);
    }

  /* Decoding: element value times 2^(scale - 127), NaN for the NaN scale. */
  g_assert_true (mixprec_mx_dequantize (fmt->dtype, expected, expected_scales, n, block_size, back, NULL));
  for (gsize i = 0; i < n; i++)
    {
      guint8 e = expected_scales[i / block_size];
      gdouble v = ref_decode (fmt->ref, expected[i]);

      if (e == 0xFF || isnan (v))
        g_assert_true (isnan (back[i]));
      else
        g_assert_cmphex (f32_bits (back[i]), ==, f32_bits ((gfloat) ldexp (v, (gint) e - 127)));
    }
}

static void
test_mx_random (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (4242);
  static const guint block_sizes[] = { 32, 1, 7, 16, 33, 100 };

  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    {
      g_autofree gfloat *x = random_values (rand, formats[f].ref, 1.0f);
      g_autofree gfloat *y = g_new (gfloat, N_RANDOM);

      /* Blocks of one binade's spread, of random patterns (NaN and Inf
       * included), and of the model's structured inputs. */
      for (guint i = 0; i < N_RANDOM; i++)
        {
          guint block = i / 32;

          if (block % 3 == 0)
            y[i] = (gfloat) ldexp (g_rand_double_range (rand, -1, 1), (gint) (block % 280) - 150);
          else
            y[i] = x[i];
        }
      for (guint b = 0; b < G_N_ELEMENTS (block_sizes); b++)
        {
          check_mx (&formats[f], y, N_RANDOM - 5, block_sizes[b]);
          for (gsize n = 0; n < 70; n++)
            check_mx (&formats[f], y + 3 + n * 32, n, block_sizes[b]);
        }
    }
}

static void
test_mx_edges (void)
{
  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    {
      g_autoptr(GArray) edges = edge_values (formats[f].ref);
      gfloat block[32];

      /* Every edge value as the amax of a block, with values down to the
       * bottom of the element range below it, and in a block of zeros. */
      for (guint i = 0; i < edges->len; i++)
        {
          gfloat v = g_array_index (edges, gfloat, i);

          for (guint j = 0; j < 32; j++)
            block[j] = (gfloat) (v * ldexp (1.0, -(gint) j)) * (j % 2 ? -1 : 1);
          check_mx (&formats[f], block, 32, 32);
          memset (block, 0, sizeof block);
          block[5] = v;
          check_mx (&formats[f], block, 32, 32);
        }
      check_mx (&formats[f], (const gfloat *) edges->data, edges->len, 32);
    }
}

static void
test_mx_known (void)
{
  /* A block of e4m3 whose amax is 1000: floor(log2 1000) = 9, exponent
   * 9 - 8 = 1, scale byte 128; 1000 / 2 = 500 saturates to 448. */
  gfloat x[32] = { 1000.0f, -3.0f, 0.5f };
  guint8 q[32], s[1];
  gfloat back[32];

  g_assert_true (mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, x, 32, 32, q, s, NULL));
  g_assert_cmphex (s[0], ==, 128);
  g_assert_cmphex (q[0], ==, 0x7E);
  g_assert_true (mixprec_mx_dequantize (MIXPREC_DTYPE_FLOAT8_E4M3, q, s, 32, 32, back, NULL));
  g_assert_cmpfloat (back[0], ==, 896.0f);
  g_assert_cmpfloat (back[1], ==, -3.0f);
  g_assert_cmpfloat (back[2], ==, 0.5f);
  g_assert_cmpfloat (back[3], ==, 0.0f);

  /* All zeros: exponent -127, byte 0; a NaN: byte 0xFF, all NaN back. */
  memset (x, 0, sizeof x);
  g_assert_true (mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E5M2, x, 32, 32, q, s, NULL));
  g_assert_cmphex (s[0], ==, 0);
  x[7] = NAN;
  x[8] = 1.0f;
  g_assert_true (mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E5M2, x, 32, 32, q, s, NULL));
  g_assert_cmphex (s[0], ==, 0xFF);
  g_assert_true (mixprec_mx_dequantize (MIXPREC_DTYPE_FLOAT8_E5M2, q, s, 32, 32, back, NULL));
  for (guint i = 0; i < 32; i++)
    g_assert_true (isnan (back[i]));
}

static void
test_e8m0 (void)
{
  for (guint e = 0; e < 256; e++)
    {
      gfloat v = mixprec_e8m0_to_float ((guint8) e);

      if (e == 255)
        g_assert_true (isnan (v));
      else
        g_assert_cmphex (f32_bits (v), ==, f32_bits ((gfloat) ldexp (1.0, (gint) e - 127)));
    }
}

/* ------------------------------------------------------------ threads */

/* Large arrays, split across four threads by the library (main() sets
 * MIXPREC_NUM_THREADS), give the bits and the amax of the scalar table run
 * on one thread. */
static void
test_large_threaded (void)
{
  const gsize n = (1 << 20) + 77;
  g_autoptr(GRand) rand = g_rand_new_with_seed (77);
  g_autofree gfloat *x = random_values (rand, &ref_e4m3, 1.0f);
  g_autofree gfloat *big = g_new (gfloat, n);
  g_autofree guint8 *a = g_malloc (n);
  g_autofree guint8 *b = g_malloc (n);
  g_autofree guint8 *sa = g_malloc (n);
  g_autofree guint8 *sb = g_malloc (n);
  const _MixprecFp8Kernels *scalar = _mixprec_fp8_kernels_for_level (_MIXPREC_SIMD_SCALAR);

  g_assert_cmpuint (mixprec_get_num_threads (), ==, 4);
  for (gsize i = 0; i < n; i++)
    big[i] = x[(i * 7919) % N_RANDOM];
  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    {
      guint format = _mixprec_fp8_format (formats[f].dtype);
      static const guint block_sizes[] = { 32, 7 };

      for (gint sat = 0; sat <= 1; sat++)
        {
          gfloat amax = 0;
          guint32 m = 0;
          gfloat amax2 = 0;

          g_assert_true (mixprec_fp8_quantize (formats[f].dtype, big, n, 0.75f, sat, a, &amax, NULL));
          scalar->quantize (format, sat, 0.75f, big, b, n, &m);
          g_assert_cmpmem (a, n, b, n);
          g_assert_cmphex (f32_bits (amax), ==, m);
          _mixprec_fp8_amax_f32 (big, n, &amax2);
          g_assert_cmphex (f32_bits (amax2), ==, m);
        }
      for (guint k = 0; k < G_N_ELEMENTS (block_sizes); k++)
        {
          gsize nb = (n + block_sizes[k] - 1) / block_sizes[k];

          g_assert_true (mixprec_mx_quantize (formats[f].dtype, big, n, block_sizes[k], a, sa, NULL));
          scalar->mx_quantize (format, block_sizes[k], big, n, b, sb);
          g_assert_cmpmem (sa, nb, sb, nb);
          g_assert_cmpmem (a, n, b, n);
        }
    }
}

/* ------------------------------------------------------------ public API */

static void
test_bytes (void)
{
  const gfloat x[5] = { 1.0f, -2.5f, 500.0f, 0.01f, NAN };
  g_autoptr(GBytes) src = g_bytes_new (x, sizeof x);
  g_autoptr(GBytes) q = NULL, back = NULL, mx = NULL, scales = NULL, mxback = NULL;
  g_autoptr(GError) error = NULL;
  gfloat amax = 0;
  const guint8 *qb;
  const gfloat *bf;
  gsize len;

  q = mixprec_fp8_quantize_bytes (MIXPREC_DTYPE_FLOAT8_E4M3, src, 0.5f,
                                  MIXPREC_FP8_OVERFLOW_SATURATING, &amax, &error);
  g_assert_no_error (error);
  qb = g_bytes_get_data (q, &len);
  g_assert_cmpuint (len, ==, 5);
  for (guint i = 0; i < 5; i++)
    g_assert_cmphex (qb[i], ==, ref_cast (&ref_e4m3, TRUE, x[i], 0.5f));
  g_assert_cmpfloat (amax, ==, 500.0f);

  back = mixprec_fp8_dequantize_bytes (MIXPREC_DTYPE_FLOAT8_E4M3, q, 2.0f, &error);
  g_assert_no_error (error);
  bf = g_bytes_get_data (back, &len);
  g_assert_cmpuint (len, ==, 20);
  g_assert_cmpfloat (bf[0], ==, 1.0f);
  g_assert_cmpfloat (bf[1], ==, -2.5f);
  g_assert_cmpfloat (bf[2], ==, 512.0f);   /* 250 rounds to 256 in e4m3, times 2 */
  g_assert_true (isnan (bf[4]));

  mx = mixprec_mx_quantize_bytes (MIXPREC_DTYPE_FLOAT8_E5M2, src, 2, &scales, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (mx), ==, 5);
  g_assert_cmpuint (g_bytes_get_size (scales), ==, 3);
  mxback = mixprec_mx_dequantize_bytes (MIXPREC_DTYPE_FLOAT8_E5M2, mx, scales, 2, &error);
  g_assert_no_error (error);
  bf = g_bytes_get_data (mxback, &len);
  g_assert_cmpuint (len, ==, 20);
  g_assert_cmpfloat (bf[0], ==, 1.0f);
  g_assert_true (isnan (bf[4]));
}

static void
test_errors (void)
{
  const gfloat x[4] = { 1, 2, 3, 4 };
  guint8 q[4], s[4];
  gfloat out[4];
  static const gfloat bad_scales[] = { 0.0f, -0.0f, -1.0f, NAN, INFINITY, -INFINITY };
  g_autoptr(GBytes) odd = g_bytes_new (x, 7);
  g_autoptr(GBytes) four = g_bytes_new (q, 4);
  g_autoptr(GBytes) one = g_bytes_new (s, 1);
  GBytes *scales = NULL;
  GError *error = NULL;

  for (gint dt = -1; dt <= 6; dt++)
    {
      if (dt == MIXPREC_DTYPE_FLOAT8_E4M3 || dt == MIXPREC_DTYPE_FLOAT8_E5M2)
        continue;
      g_assert_false (mixprec_fp8_quantize (dt, x, 4, 1.0f, 0, q, NULL, &error));
      g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE);
      g_assert_nonnull (strstr (error->message, "fp8_dtype"));
      g_clear_error (&error);
      g_assert_false (mixprec_fp8_dequantize (dt, q, 4, 1.0f, out, &error));
      g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE);
      g_clear_error (&error);
      g_assert_false (mixprec_mx_quantize (dt, x, 4, 32, q, s, &error));
      g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE);
      g_assert_nonnull (strstr (error->message, "elem_dtype"));
      g_clear_error (&error);
      g_assert_false (mixprec_mx_dequantize (dt, q, s, 4, 32, out, &error));
      g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE);
      g_clear_error (&error);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad_scales); i++)
    {
      g_assert_false (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, x, 4, bad_scales[i], 0, q, NULL, &error));
      g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_SCALE);
      g_assert_nonnull (strstr (error->message, "scale"));
      g_clear_error (&error);
      g_assert_false (mixprec_fp8_dequantize (MIXPREC_DTYPE_FLOAT8_E5M2, q, 4, bad_scales[i], out, &error));
      g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_SCALE);
      g_assert_nonnull (strstr (error->message, "scale_inv"));
      g_clear_error (&error);
    }
  g_assert_false (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, x, 4, 1.0f, 2, q, NULL, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_OVERFLOW);
  g_clear_error (&error);
  g_assert_false (mixprec_fp8_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, x, 4, 1.0f, -1, q, NULL, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_OVERFLOW);
  g_clear_error (&error);
  g_assert_false (mixprec_mx_quantize (MIXPREC_DTYPE_FLOAT8_E4M3, x, 4, 0, q, s, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_BLOCK_SIZE);
  g_clear_error (&error);
  g_assert_false (mixprec_mx_dequantize (MIXPREC_DTYPE_FLOAT8_E4M3, q, s, 4, 0, out, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_BLOCK_SIZE);
  g_clear_error (&error);

  g_assert_null (mixprec_fp8_quantize_bytes (MIXPREC_DTYPE_FLOAT8_E4M3, odd, 1.0f, 0, NULL, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_LENGTH);
  g_assert_nonnull (strstr (error->message, "7 bytes"));
  g_clear_error (&error);
  g_assert_null (mixprec_mx_quantize_bytes (MIXPREC_DTYPE_FLOAT8_E4M3, odd, 32, &scales, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_LENGTH);
  g_assert_null (scales);
  g_clear_error (&error);
  /* Four elements in blocks of 3 need two scales, not one. */
  g_assert_null (mixprec_mx_dequantize_bytes (MIXPREC_DTYPE_FLOAT8_E4M3, four, one, 3, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_LENGTH);
  g_assert_nonnull (strstr (error->message, "need 2 scale bytes, got 1"));
  g_clear_error (&error);
  g_assert_null (mixprec_fp8_dequantize_bytes (MIXPREC_DTYPE_BFLOAT16, four, 1.0f, &error));
  g_assert_error (error, MIXPREC_FP8_ERROR, MIXPREC_FP8_ERROR_INVALID_DTYPE);
  g_clear_error (&error);
}

static void
test_overflow_enum (void)
{
  GEnumClass *klass = g_type_class_ref (MIXPREC_TYPE_FP8_OVERFLOW);
  GEnumValue *v = g_enum_get_value (klass, MIXPREC_FP8_OVERFLOW_SATURATING);

  g_assert_nonnull (v);
  g_assert_cmpstr (v->value_nick, ==, "saturating");
  g_assert_cmpuint (klass->n_values, ==, 2);
  g_type_class_unref (klass);
}

int
main (int    argc,
      char **argv)
{
  /* More threads than this machine may have cores: the split is tested. */
  g_setenv ("MIXPREC_NUM_THREADS", "4", TRUE);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/fp8/quantize/known", test_quantize_known);
  g_test_add_func ("/fp8/quantize/edges", test_quantize_edges);
  g_test_add_func ("/fp8/quantize/random", test_quantize_random);
  g_test_add_func ("/fp8/quantize/amax", test_amax);
  g_test_add_func ("/fp8/dequantize", test_dequantize);
  g_test_add_func ("/fp8/mx/known", test_mx_known);
  g_test_add_func ("/fp8/mx/edges", test_mx_edges);
  g_test_add_func ("/fp8/mx/random", test_mx_random);
  g_test_add_func ("/fp8/mx/e8m0", test_e8m0);
  g_test_add_func ("/fp8/large-threaded", test_large_threaded);
  g_test_add_func ("/fp8/bytes", test_bytes);
  g_test_add_func ("/fp8/errors", test_errors);
  g_test_add_func ("/fp8/overflow-enum", test_overflow_enum);
  return g_test_run ();
}
