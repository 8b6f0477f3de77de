/* test-zeropp-blocks.c — ZeRO++'s quantizer over whole buffers
 * (mixprec-zeropp.c works a block at a time: dispatched conversions,
 * SIMD code kernels, decoding tables) held bit for bit to the element-wise
 * rules of numeric/numeric-zeropp.h, which tests/test-zeropp-quant.py
 * holds to DeepSpeed's arithmetic.
 *
 * Inputs are hostile: magnitudes across fp16's whole range and beyond it
 * (to infinity), fp16 subnormals, signed zeros, NaNs, all-zero and
 * all-NaN blocks, and blocks whose length leaves a tail shorter than a
 * vector. Each check compares with this file's own element-by-element
 * loop over the header's functions:
 * - the code kernel of every SIMD level this CPU runs (scale and codes);
 * - weights: int8 and int4 codes and scales from float32, bfloat16 and
 *   float16, and their dequantization into each;
 * - FP8 blocks (E4M3, E5M2) both ways;
 * - qgZ's wire (int4 and FP8, with and without LoCo's error feedback,
 *   whose errors must match too) and its FP32 sum in rank order into each
 *   dtype, with and without accumulation;
 * - qgZ in two levels across hosts, the runs' grouping and both levels'
 *   sums. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <glib.h>

#include "mixprec-cpu-private.h"
#include "mixprec-zeropp-private.h"
#include "numeric/numeric-zeropp.h"

static const MixprecDType dtypes[] = { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT16 };

/* ------------------------------------------------------------ inputs */

/* A float32 value from the hostile mix. */
static gfloat
hostile (GRand *rand, guint64 i)
{
  gdouble m = g_rand_double (rand);
  gfloat sign = g_rand_boolean (rand) ? -1.0f : 1.0f;

  switch (g_rand_int_range (rand, 0, 40))
    {
    case 0:
      return NAN;
    case 1:
      return sign * INFINITY;
    case 2:
      return sign * 0.0f;
    case 3:
      return sign * ldexpf ((gfloat) m, -20);          /* fp16 subnormal */
    case 4:
      return sign * (gfloat) (70000.0 + m * 1e6);      /* beyond fp16 */
    default:
      /* Magnitudes 2^-12 .. 2^12, changing by block. */
      return sign * ldexpf ((gfloat) (0.5 + m), (gint) ((i / 97) % 25) - 12);
    }
}

/* @n values in @dtype: hostile, with some blocks of @per all zero or all
 * NaN. */
static gpointer
make_values (GRand *rand, MixprecDType dtype, guint64 n, guint64 per)
{
  gsize size = mixprec_dtype_get_size (dtype);
  guint8 *out = g_malloc (n * size);

  for (guint64 i = 0; i < n; i++)
    {
      guint64 block = i / per;
      gfloat v = block % 7 == 3 ? 0.0f : block % 7 == 5 ? NAN : hostile (rand, i);

      switch (dtype)
        {
        case MIXPREC_DTYPE_FLOAT16:
          ((guint16 *) out)[i] = _mixprec_f32_to_f16_rne (v);
          break;
        case MIXPREC_DTYPE_BFLOAT16:
          ((guint16 *) out)[i] = _mixprec_f32_to_bf16_rne (v);
          break;
        default:
          ((gfloat *) out)[i] = v;
          break;
        }
    }
  return out;
}

static gfloat
read_f32 (gconstpointer src, MixprecDType dtype, guint64 i)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      return _mixprec_f16_to_f32 (((const guint16 *) src)[i]);
    case MIXPREC_DTYPE_BFLOAT16:
      return _mixprec_bf16_to_f32 (((const guint16 *) src)[i]);
    default:
      return ((const gfloat *) src)[i];
    }
}

/* Element @i as DeepSpeed's quantizer reads it: fp16 to nearest even. */
static guint16
read_f16 (gconstpointer src, MixprecDType dtype, guint64 i)
{
  if (dtype == MIXPREC_DTYPE_FLOAT16)
    return ((const guint16 *) src)[i];
  return _mixprec_f32_to_f16_rne (read_f32 (src, dtype, i));
}

/* @v written as @dtype, to nearest even, into element @i of @dst. */
static void
write_f32 (gpointer dst, MixprecDType dtype, guint64 i, gfloat v)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      ((guint16 *) dst)[i] = _mixprec_f32_to_f16_rne (v);
      break;
    case MIXPREC_DTYPE_BFLOAT16:
      ((guint16 *) dst)[i] = _mixprec_f32_to_bf16_rne (v);
      break;
    default:
      ((gfloat *) dst)[i] = v;
      break;
    }
}

/* Whether element @i of @p (@dtype) is a NaN. */
static gboolean
is_nan_at (gconstpointer p, MixprecDType dtype, guint64 i)
{
  guint16 h;

  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      h = ((const guint16 *) p)[i];
      return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0;
    case MIXPREC_DTYPE_BFLOAT16:
      h = ((const guint16 *) p)[i];
      return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0;
    default:
      return isnan (((const gfloat *) p)[i]);
    }
}

/* Where two buffers of @n elements of @dtype first differ, or -1. Two
 * NaNs are the same: which operand's payload a NaN sum keeps is the
 * compiler's choice (it may commute an addition), and no rule here gives
 * a payload a meaning. */
static gint64
first_difference (gconstpointer a, gconstpointer b, MixprecDType dtype, guint64 n)
{
  gsize size = mixprec_dtype_get_size (dtype);

  for (guint64 i = 0; i < n; i++)
    if (memcmp ((const guint8 *) a + i * size, (const guint8 *) b + i * size, size) != 0 &&
        !(is_nan_at (a, dtype, i) && is_nan_at (b, dtype, i)))
      return (gint64) i;
  return -1;
}

#define assert_same(a, b, dtype, n, what)                                              \
  G_STMT_START {                                                                       \
    gint64 at_ = first_difference ((a), (b), (dtype), (n));                            \
    if (at_ >= 0)                                                                      \
      g_error ("%s: element %" G_GINT64_FORMAT " differs from the element-wise rules", \
               (what), at_);                                                           \
  } G_STMT_END

/* ------------------------------------------------------------ the code kernels */

static void
test_kernels (void)
{
  static const gsize lengths[] = { 1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 512, 1000, 8000, 15998 };
  static const _MixprecSimdLevel levels[] = { _MIXPREC_SIMD_SCALAR, _MIXPREC_SIMD_AVX2, _MIXPREC_SIMD_AVX512 };
  g_autoptr(GRand) rand = g_rand_new_with_seed (11);
  guint tested = 0;

  for (guint l = 0; l < G_N_ELEMENTS (levels); l++)
    {
      const _MixprecZeroppKernels *k = _mixprec_zeropp_kernels_for_level (levels[l]);

      if (k == NULL || levels[l] > _mixprec_cpu_simd_level_supported ())
        continue;
      tested++;
      for (guint j = 0; j < G_N_ELEMENTS (lengths); j++)
        for (guint bits = 4; bits <= 8; bits += 4)
          for (guint kind = 0; kind < 4; kind++)
            {
              gsize n = lengths[j];
              g_autofree guint16 *h = g_new (guint16, n);
              g_autofree gint8 *codes = g_new (gint8, n);
              gfloat scale, want;
              int all_nan;

              for (gsize i = 0; i < n; i++)
                {
                  /* 0: hostile; 1: all zero; 2: all NaN; 3: one number among NaNs */
                  gfloat v = kind == 0 ? hostile (rand, i) : kind == 1 ? 0.0f
                             : kind == 2 || i != n / 2 ? NAN : -3.5f;

                  h[i] = _mixprec_f32_to_f16_rne (v);
                }
              scale = k->codes (h, n, bits, codes);
              want = _mixprec_zpp_block_scale (h, n, bits, &all_nan);
              g_assert_cmpmem (&scale, sizeof scale, &want, sizeof want);
              for (gsize i = 0; i < n; i++)
                if (codes[i] != _mixprec_zpp_code (h[i], want, bits))
                  g_error ("level %u, %" G_GSIZE_FORMAT " elements, %u bits, kind %u: code %" G_GSIZE_FORMAT
                           " is %d, the rules say %d", (guint) levels[l], n, bits, kind, i, codes[i],
                           _mixprec_zpp_code (h[i], want, bits));
            }
    }
  g_test_message ("%u SIMD levels checked", tested);
  g_assert_cmpuint (tested, >=, 1);
}

/* ------------------------------------------------------------ weights */

static void
test_weights (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (12);
  const guint64 n = 8 * 3000;

  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    for (guint bits = 4; bits <= 8; bits += 4)
      {
        guint64 groups = _mixprec_zeropp_weight_groups (n), per = n / groups;
        g_autofree gpointer src = make_values (rand, dtypes[d], n, per);
        g_autofree gint8 *codes = g_new (gint8, _mixprec_zeropp_code_bytes (n, bits));
        g_autofree gint8 *want_codes = g_new (gint8, _mixprec_zeropp_code_bytes (n, bits));
        g_autofree gfloat *scales = g_new (gfloat, groups);
        g_autofree gfloat *want_scales = g_new (gfloat, groups);
        g_autofree guint16 *h = g_new (guint16, per);

        g_assert_cmpuint (groups, >, 1);
        _mixprec_zeropp_quantize (src, dtypes[d], n, groups, bits, codes, scales);
        for (guint64 b = 0; b < groups; b++)
          {
            for (guint64 i = 0; i < per; i++)
              h[i] = read_f16 (src, dtypes[d], b * per + i);
            want_scales[b] = _mixprec_zpp_quantize_block (h, per, bits,
                                                          want_codes + _mixprec_zeropp_code_bytes (b * per, bits));
          }
        g_assert_cmpmem (codes, _mixprec_zeropp_code_bytes (n, bits), want_codes,
                         _mixprec_zeropp_code_bytes (n, bits));
        g_assert_cmpmem (scales, groups * sizeof (gfloat), want_scales, groups * sizeof (gfloat));

        for (guint o = 0; o < G_N_ELEMENTS (dtypes); o++)
          {
            gsize size = mixprec_dtype_get_size (dtypes[o]);
            g_autofree gpointer back = g_malloc (n * size);
            g_autofree gpointer want = g_malloc (n * size);

            _mixprec_zeropp_dequantize (codes, scales, n, groups, bits, back, dtypes[o]);
            for (guint64 b = 0; b < groups; b++)
              for (guint64 i = 0; i < per; i++)
                {
                  guint16 y = _mixprec_zpp_dequantize (codes + _mixprec_zeropp_code_bytes (b * per, bits), i, bits,
                                                       scales[b]);

                  if (dtypes[o] == MIXPREC_DTYPE_FLOAT16)
                    ((guint16 *) want)[b * per + i] = y;
                  else
                    write_f32 (want, dtypes[o], b * per + i, _mixprec_f16_to_f32 (y));
                }
            assert_same (back, want, dtypes[o], n, "dequantized weights");
          }
      }
}

static void
test_weights_fp8 (void)
{
  static const _MixprecZeroppFormat formats[] = { _MIXPREC_ZEROPP_FP8_E4M3, _MIXPREC_ZEROPP_FP8_E5M2 };
  g_autoptr(GRand) rand = g_rand_new_with_seed (13);
  const guint64 n = 8 * 3000, groups = _mixprec_zeropp_weight_groups (n), per = n / groups;

  for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
    for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
      {
        unsigned format = formats[f] == _MIXPREC_ZEROPP_FP8_E4M3 ? _MIXPREC_FP8_E4M3 : _MIXPREC_FP8_E5M2;
        g_autofree gpointer src = make_values (rand, dtypes[d], n, per);
        g_autofree guint8 *codes = g_new (guint8, n);
        g_autofree guint8 *want_codes = g_new (guint8, n);
        g_autofree gfloat *scales = g_new (gfloat, groups);
        g_autofree gfloat *want_scales = g_new (gfloat, groups);
        g_autofree gfloat *x = g_new (gfloat, per);

        _mixprec_zeropp_quantize_as (src, dtypes[d], n, groups, formats[f], codes, scales);
        for (guint64 b = 0; b < groups; b++)
          {
            for (guint64 i = 0; i < per; i++)
              x[i] = read_f32 (src, dtypes[d], b * per + i);
            want_scales[b] = _mixprec_zpp_fp8_quantize_block (x, per, format, want_codes + b * per);
          }
        g_assert_cmpmem (codes, n, want_codes, n);
        g_assert_cmpmem (scales, groups * sizeof (gfloat), want_scales, groups * sizeof (gfloat));
        for (guint o = 0; o < G_N_ELEMENTS (dtypes); o++)
          {
            gsize size = mixprec_dtype_get_size (dtypes[o]);
            g_autofree gpointer back = g_malloc (n * size);
            g_autofree gpointer want = g_malloc (n * size);

            _mixprec_zeropp_dequantize_as (codes, scales, n, groups, formats[f], back, dtypes[o]);
            for (guint64 i = 0; i < n; i++)
              write_f32 (want, dtypes[o], i, _mixprec_zpp_fp8_dequantize (codes[i], format, scales[i / per]));
            assert_same (back, want, dtypes[o], n, "dequantized FP8 weights");
          }
      }
}

/* ------------------------------------------------------------ qgZ's wire */

/* The element-wise model of one run's wire and LoCo errors. */
static void
model_quantize (gconstpointer src, MixprecDType dtype, guint64 count, _MixprecZeroppFormat format,
                guint16 *err, gfloat beta, guint8 *run)
{
  const guint64 B = _MIXPREC_ZEROPP_QGZ_BLOCK, blocks = _mixprec_zeropp_qgz_blocks (count);
  guint64 code_bytes = format == _MIXPREC_ZEROPP_INT ? B / 2 : B;
  gfloat *scales = (gfloat *) (gpointer) (run + blocks * code_bytes);
  unsigned fp8 = format == _MIXPREC_ZEROPP_FP8_E4M3 ? _MIXPREC_FP8_E4M3 : _MIXPREC_FP8_E5M2;

  for (guint64 b = 0; b < blocks; b++)
    {
      guint64 len = MIN (B, count - b * B);
      guint8 *codes = run + b * code_bytes;
      guint16 *e = err != NULL ? err + b * B : NULL;
      guint16 h[_MIXPREC_ZEROPP_QGZ_BLOCK];
      gfloat v[_MIXPREC_ZEROPP_QGZ_BLOCK];

      if (format != _MIXPREC_ZEROPP_INT)
        {
          for (guint64 i = 0; i < B; i++)
            v[i] = i < len ? read_f32 (src, dtype, b * B + i) : 0.0f;
          for (guint64 i = 0; e != NULL && i < len; i++)
            v[i] += _mixprec_f16_to_f32 (e[i]);
          scales[b] = _mixprec_zpp_fp8_quantize_block (v, B, fp8, codes);
          for (guint64 i = 0; e != NULL && i < len; i++)
            e[i] = _mixprec_f32_to_f16_rne (beta * _mixprec_f16_to_f32 (e[i]) +
                                            (1.0f - beta) * (v[i] - _mixprec_zpp_fp8_dequantize (codes[i], fp8,
                                                                                                 scales[b])));
          continue;
        }
      for (guint64 i = 0; i < B; i++)
        h[i] = i < len ? read_f16 (src, dtype, b * B + i) : 0;
      for (guint64 i = 0; e != NULL && i < len; i++)
        h[i] = _mixprec_zpp_f16_add (h[i], e[i]);
      scales[b] = _mixprec_zpp_quantize_block (h, B, 4, (gint8 *) codes);
      for (guint64 i = 0; e != NULL && i < len; i++)
        {
          gfloat fresh = _mixprec_f16_to_f32 (h[i]) -
                         _mixprec_f16_to_f32 (_mixprec_zpp_dequantize ((const gint8 *) codes, i, 4, scales[b]));

          e[i] = _mixprec_f32_to_f16_rne (beta * _mixprec_f16_to_f32 (e[i]) + (1.0f - beta) * fresh);
        }
    }
}

/* Element @i of a run, dequantized to FP32. */
static gfloat
model_value (const guint8 *run, guint64 count, _MixprecZeroppFormat format, guint64 i)
{
  const guint64 B = _MIXPREC_ZEROPP_QGZ_BLOCK, blocks = _mixprec_zeropp_qgz_blocks (count), b = i / B;
  guint64 code_bytes = format == _MIXPREC_ZEROPP_INT ? B / 2 : B;
  const gfloat *scales = (const gfloat *) (gconstpointer) (run + blocks * code_bytes);

  if (format != _MIXPREC_ZEROPP_INT)
    return _mixprec_zpp_fp8_dequantize (run[i], format == _MIXPREC_ZEROPP_FP8_E4M3 ? _MIXPREC_FP8_E4M3
                                                                                    : _MIXPREC_FP8_E5M2, scales[b]);
  return _mixprec_f16_to_f32 (_mixprec_zpp_dequantize ((const gint8 *) run + b * code_bytes, i - b * B, 4,
                                                       scales[b]));
}

static void
test_qgz (void)
{
  static const _MixprecZeroppFormat formats[] = { _MIXPREC_ZEROPP_INT, _MIXPREC_ZEROPP_FP8_E4M3,
                                                  _MIXPREC_ZEROPP_FP8_E5M2 };
  g_autoptr(GRand) rand = g_rand_new_with_seed (14);
  const guint world = 3;
  /* Runs whose last block is short, and long enough for several work
   * items of the reduction. */
  const guint64 count = 40 * _MIXPREC_ZEROPP_QGZ_BLOCK + 77;
  const gfloat beta = 0.8f;

  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    for (guint d = 0; d < G_N_ELEMENTS (dtypes); d++)
      for (guint loco = 0; loco < 2; loco++)
        {
          guint64 run_bytes = _mixprec_zeropp_qgz_run_bytes_as (count, formats[f]);
          g_autofree gpointer src = make_values (rand, dtypes[d], count * world, 3 * _MIXPREC_ZEROPP_QGZ_BLOCK);
          g_autofree guint8 *wire = g_malloc0 (world * run_bytes);
          g_autofree guint8 *want = g_malloc0 (world * run_bytes);
          g_autofree guint16 *err = g_new (guint16, world * count);
          g_autofree guint16 *want_err = NULL;

          for (guint64 i = 0; i < world * count; i++)
            err[i] = _mixprec_f32_to_f16_rne ((gfloat) g_rand_double_range (rand, -0.01, 0.01));
          want_err = g_memdup2 (err, world * count * sizeof (guint16));
          _mixprec_zeropp_qgz_quantize_as (src, dtypes[d], count, world, loco ? err : NULL, count, beta,
                                           formats[f], wire);
          for (guint r = 0; r < world; r++)
            model_quantize ((const guint8 *) src + r * count * mixprec_dtype_get_size (dtypes[d]), dtypes[d], count,
                            formats[f], loco ? want_err + r * count : NULL, beta, want + r * run_bytes);
          g_assert_cmpmem (wire, world * run_bytes, want, world * run_bytes);
          assert_same (err, want_err, MIXPREC_DTYPE_FLOAT16, world * count, "LoCo's errors");

          if (loco)
            continue;
          /* The sum, into each dtype, onto what dst holds or not. */
          for (guint o = 0; o < G_N_ELEMENTS (dtypes); o++)
            for (guint accumulate = 0; accumulate < 2; accumulate++)
              {
                gsize size = mixprec_dtype_get_size (dtypes[o]);
                g_autofree gpointer dst = make_values (rand, dtypes[o], count, 1000);
                g_autofree gpointer model = g_memdup2 (dst, count * size);

                _mixprec_zeropp_qgz_reduce_as (wire, world, count, accumulate, formats[f], dst, dtypes[o]);
                for (guint64 i = 0; i < count; i++)
                  {
                    gfloat acc = model_value (wire, count, formats[f], i);

                    if (accumulate)
                      acc = read_f32 (model, dtypes[o], i) + acc;
                    for (guint r = 1; r < world; r++)
                      acc += model_value (wire + r * run_bytes, count, formats[f], i);
                    write_f32 (model, dtypes[o], i, acc);
                  }
                assert_same (dst, model, dtypes[o], count, "qgZ's sum");
              }
        }
}

/* qgZ in two levels, 2 hosts of 2 ranks (and 3 of 2): each rank's runs
 * quantized, grouped by local index (_mixprec_zeropp_qgz_group_runs())
 * and delivered as the first all_to_all_v delivers them, each rank's
 * second level (_mixprec_zeropp_qgz_level2()) and the second exchange,
 * and the final sum: against this file's model, which for destination
 * rank d sums every host's runs for d in FP32 in local rank order,
 * quantizes that partial from float32 element by element, and sums the
 * partials' values in host order onto what dst holds. */
static void
test_qgz_two_levels (gconstpointer data)
{
  guint hosts = GPOINTER_TO_UINT (data), per_host = 2, world = hosts * per_host;
  g_autoptr(GRand) rand = g_rand_new_with_seed (27 + hosts);
  const guint64 count = 9 * _MIXPREC_ZEROPP_QGZ_BLOCK + 301;
  static const _MixprecZeroppFormat formats[] = { _MIXPREC_ZEROPP_INT, _MIXPREC_ZEROPP_FP8_E4M3 };

  for (guint f = 0; f < G_N_ELEMENTS (formats); f++)
    {
      _MixprecZeroppFormat fmt = formats[f];
      guint64 run = _mixprec_zeropp_qgz_run_bytes_as (count, fmt);
      g_autofree guint8 *wire = g_malloc0 (world * world * run);      /* rank r's runs at r * world * run */
      g_autofree guint8 *grouped = g_malloc0 (world * world * run);
      g_autofree guint8 *arrived = g_malloc0 (world * world * run);
      g_autofree guint8 *out = g_malloc0 (world * hosts * run);
      g_autofree guint8 *in = g_malloc0 (hosts * run);
      g_autofree gfloat *partial = g_new (gfloat, hosts * count);
      g_autofree gfloat *mpartial = g_new (gfloat, count);
      g_autofree guint8 *mrun = g_malloc0 (hosts * run);

      for (guint r = 0; r < world; r++)
        {
          g_autofree gpointer src = make_values (rand, MIXPREC_DTYPE_BFLOAT16, count * world,
                                                 2 * _MIXPREC_ZEROPP_QGZ_BLOCK);

          _mixprec_zeropp_qgz_quantize_as (src, MIXPREC_DTYPE_BFLOAT16, count, world, NULL, 0, 0.0f, fmt,
                                           wire + r * world * run);
          _mixprec_zeropp_qgz_group_runs (wire + r * world * run, world, per_host, run,
                                          grouped + r * world * run);
        }
      /* First level: rank (h, j) gets from each rank (h, j'') of its host,
       * in local order, that rank's group for index j (hosts runs). */
      for (guint r = 0; r < world; r++)
        for (guint jj = 0; jj < per_host; jj++)
          memcpy (arrived + r * world * run + (guint64) jj * hosts * run,
                  grouped + (r / per_host * per_host + jj) * world * run + (guint64) (r % per_host) * hosts * run,
                  hosts * run);
      for (guint r = 0; r < world; r++)
        _mixprec_zeropp_qgz_level2 (arrived + r * world * run, per_host, hosts, count, fmt, partial,
                                    out + r * hosts * run);
      for (guint d = 0; d < world; d++)
        {
          g_autofree gpointer dst = make_values (rand, MIXPREC_DTYPE_FLOAT32, count, 1000);
          g_autofree gpointer model = g_memdup2 (dst, count * sizeof (gfloat));

          /* Second level: from rank (h'', j) in host order, its run for
           * host h of d = (h, j). */
          for (guint hh = 0; hh < hosts; hh++)
            memcpy (in + hh * run, out + (hh * per_host + d % per_host) * hosts * run + (d / per_host) * run, run);
          _mixprec_zeropp_qgz_reduce_as (in, hosts, count, TRUE, fmt, dst, MIXPREC_DTYPE_FLOAT32);

          /* The model. */
          for (guint hh = 0; hh < hosts; hh++)
            {
              for (guint64 i = 0; i < count; i++)
                {
                  gfloat acc = 0;

                  for (guint jj = 0; jj < per_host; jj++)
                    {
                      gfloat v = model_value (wire + (hh * per_host + jj) * world * run + d * run, count, fmt, i);

                      acc = jj == 0 ? v : acc + v;
                    }
                  mpartial[i] = acc;
                }
              model_quantize (mpartial, MIXPREC_DTYPE_FLOAT32, count, fmt, NULL, 0.0f, mrun + hh * run);
            }
          for (guint64 i = 0; i < count; i++)
            {
              gfloat acc = read_f32 (model, MIXPREC_DTYPE_FLOAT32, i);

              for (guint hh = 0; hh < hosts; hh++)
                acc += model_value (mrun + hh * run, count, fmt, i);
              write_f32 (model, MIXPREC_DTYPE_FLOAT32, i, acc);
            }
          assert_same (dst, model, MIXPREC_DTYPE_FLOAT32, count, "qgZ's two-level sum");
        }
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/zeropp/blocks/code-kernels", test_kernels);
  g_test_add_func ("/zeropp/blocks/weights", test_weights);
  g_test_add_func ("/zeropp/blocks/weights-fp8", test_weights_fp8);
  g_test_add_func ("/zeropp/blocks/qgz", test_qgz);
  g_test_add_data_func ("/zeropp/blocks/qgz-two-levels/hosts-2", GUINT_TO_POINTER (2), test_qgz_two_levels);
  g_test_add_data_func ("/zeropp/blocks/qgz-two-levels/hosts-3", GUINT_TO_POINTER (3), test_qgz_two_levels);
  return g_test_run ();
}
