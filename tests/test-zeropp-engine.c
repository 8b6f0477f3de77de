/* test-zeropp-engine.c — ZeRO++'s quantized weight gathers (qwZ,
 * zero_optimization.zero_quantized_weights) in the engine, on 2 and 3
 * ranks on 127.0.0.1 through comm-ucx, bf16 working copies at ZeRO-3.
 *
 * What must hold: every rank gathers the same bits (the owner of a slice
 * dequantizes its own codes like everyone else, as DeepSpeed does); each
 * gathered value is within the quantizer's bound of the unquantized
 * working value, one int8 step of its block (at most absmax / 128 of the
 * unit, the block's absmax being no larger) plus the fp16 and bf16
 * roundings; the quantization is visible (values differ from the
 * unquantized ones, where an unquantized run gathers the working copies
 * exactly), an all-zero run of elements comes back zero, and the gathers
 * move about half the bytes of bf16 ones; this holds again after a step
 * has changed the working copies; a checkpoint saved with qwZ on resumes
 * with it off and the other way round; FP8 working copies refuse it. hpZ (zero_hpz_partition_size) over the
 * whole world is ZeRO-3 itself and runs; groups that do not divide the
 * world are refused. The per-element bits against DeepSpeed's
 * arithmetic are tests/test-zeropp-quant.py's. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "dtype-reference.h"
#include "multiproc.h"

#define TIMEOUT_MS 60000

/* Parameter sizes: a unit of several small ones and a larger one. */
static const guint64 sizes[] = { 20000, 700, 3000, 70001 };
#define N_PARAMS G_N_ELEMENTS (sizes)

static guint32
mix32 (guint32 x)
{
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* Initial value @i of parameter @k: magnitudes from 2^-8 to 2^4, an
 * outlier of 60 in the first, a run of zeros in the last. */
static gfloat
init_value (guint k, guint64 i)
{
  guint32 h = mix32 ((guint32) i * 0x9e3779b1u ^ mix32 (k + 7));
  gdouble v = ldexp (1.0 + (gdouble) (mix32 (h) >> 8) * 0x1p-24, (gint) (h % 13) - 8);

  if (k == 0 && i == 1234)
    return 60.0f;
  if (k == 3 && i >= 40000 && i < 60000)
    return 0.0f;
  return (gfloat) ((h >> 31) ? -v : v);
}

static guint64
total (void)
{
  guint64 n = 0;

  for (guint k = 0; k < N_PARAMS; k++)
    n += sizes[k];
  return n;
}

static gchar *
param_name (guint k)
{
  return g_strdup_printf ("p%u", k);
}

/* Every parameter's gathered bf16 bits, in order. */
static gboolean
append_gathered (MixprecEngine *engine, GString *out, GError **error)
{
  if (!mixprec_engine_gather_all (engine, error))
    return FALSE;
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      MixprecParam *p = mixprec_engine_get_param (engine, name);

      g_assert (mixprec_param_get_working_dtype (p) == MIXPREC_DTYPE_BFLOAT16);
      g_string_append_len (out, mixprec_param_get_working_data (p), (gssize) (sizes[k] * 2));
    }
  mixprec_engine_release_all (engine);
  return TRUE;
}

/* The child: gathers, steps once, gathers again. Writes the gathered
 * bytes count, the first gather, the masters after the step and the
 * second gather. */
static int
child_main (void)
{
  gboolean quantized = g_strcmp0 (g_getenv ("MIXPREC_TEST_QWZ"), "1") == 0;
  g_autofree gchar *json =
    g_strdup_printf ("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3, "
                     "\"stage3_param_persistence_threshold\": 0, \"zero_quantized_weights\": %s, "
                     "\"zero_hpz_partition_size\": %s}, %s"
                     "\"mixprec\": {\"quantized_weights_format\": \"%s\"}, "
                     "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.25}}}",
                     quantized ? "true" : "false", g_getenv ("MIXPREC_TEST_HPZ"),
                     g_getenv ("MIXPREC_TEST_FP8") != NULL
                       ? "\"fp8\": {\"enabled\": true, \"recipe\": \"delayed\", \"modules\": [\"Linear\"]}, "
                       : "",
                     g_getenv ("MIXPREC_TEST_QWZ_FORMAT") != NULL ? g_getenv ("MIXPREC_TEST_QWZ_FORMAT") : "int8");
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(MixprecStepResult) result = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  g_autofree gchar *file = NULL;
  guint64 bytes;

  if (config == NULL || (engine = mixprec_engine_new (config, &error)) == NULL)
    goto fail;
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      g_autofree gfloat *v = g_new (gfloat, sizes[k]);
      g_autoptr(GBytes) init = NULL;

      for (guint64 i = 0; i < sizes[k]; i++)
        v[i] = init_value (k, i);
      init = g_bytes_new_take (g_steal_pointer (&v), sizes[k] * sizeof (gfloat));
      /* FP8 copies go to matrices: the first parameter is one then. */
      if (g_getenv ("MIXPREC_TEST_FP8") != NULL && k == 0)
        {
          guint64 matrix[2] = { 100, sizes[0] / 100 };

          if (mixprec_engine_register_param (engine, name, matrix, 2, "Linear", MIXPREC_DTYPE_FLOAT32,
                                             init, &error) == NULL)
            goto fail;
        }
      else if (mixprec_engine_register_param (engine, name, &sizes[k], 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                              init, &error) == NULL)
        goto fail;
    }
  /* A checkpoint saved under the other setting resumes here. */
  if (g_getenv ("MIXPREC_TEST_LOAD") != NULL &&
      !mixprec_engine_load_checkpoint (engine, g_getenv ("MIXPREC_TEST_LOAD"), &error))
    goto fail;
  g_string_append_len (out, "        ", 8);
  if (!append_gathered (engine, out, &error))
    goto fail;
  bytes = mixprec_engine_get_gathered_bytes (engine);
  memcpy (out->str, &bytes, 8);
  /* One step: every rank hands the same gradient, a smooth one. */
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      g_autofree gfloat *g = g_new (gfloat, sizes[k]);
      g_autoptr(GBytes) grad = NULL;

      for (guint64 i = 0; i < sizes[k]; i++)
        g[i] = (gfloat) sin (0.001 * (gdouble) i + k);
      grad = g_bytes_new_take (g_steal_pointer (&g), sizes[k] * sizeof (gfloat));
      if (!mixprec_param_set_grad (mixprec_engine_get_param (engine, name), MIXPREC_DTYPE_FLOAT32,
                                   grad, &error))
        goto fail;
    }
  if (!mixprec_engine_backward_done (engine, &error) ||
      (result = mixprec_engine_step (engine, &error)) == NULL)
    goto fail;
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = param_name (k);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, name, &error);

      if (master == NULL)
        goto fail;
      g_string_append_len (out, g_bytes_get_data (master, NULL), (gssize) g_bytes_get_size (master));
    }
  if (!append_gathered (engine, out, &error))
    goto fail;
  if (g_getenv ("MIXPREC_TEST_SAVE") != NULL &&
      !mixprec_engine_save_checkpoint (engine, g_getenv ("MIXPREC_TEST_SAVE"), &error))
    goto fail;
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), mixprec_engine_get_rank (engine));
  return g_file_set_contents (file, out->str, (gssize) out->len, NULL) ? 0 : 1;

fail:
  /* A refusal the test expects is its output. */
  if (error != NULL && g_getenv ("MIXPREC_TEST_EXPECT_ERROR") != NULL)
    {
      file = g_strdup_printf ("%s.%s", g_getenv ("MIXPREC_TEST_OUT"), g_getenv ("MIXPREC_RANK"));
      return g_file_set_contents (file, error->message, -1, NULL) ? 0 : 1;
    }
  g_printerr ("zeropp child: %s\n", error != NULL ? error->message : "?");
  return 1;
}

typedef struct {
  gchar *data[3];
  gsize len[3];
} Run;

static void
run_clear (Run *r)
{
  for (guint i = 0; i < G_N_ELEMENTS (r->data); i++)
    g_free (r->data[i]);
}

/* Runs the child on @world ranks with zero_hpz_partition_size @hpz;
 * @expect_error: each rank writes the error that refused it. */
static void
run_world_env (guint world, gboolean quantized, guint hpz, gboolean expect_error,
               const gchar *save, const gchar *load, const gchar *extra, Run *run)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-zeropp-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "gathered", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *hpz_var = g_strdup_printf ("MIXPREC_TEST_HPZ=%u", hpz);
  g_autofree gchar *save_var = save != NULL ? g_strdup_printf ("MIXPREC_TEST_SAVE=%s", save) : NULL;
  g_autofree gchar *load_var = load != NULL ? g_strdup_printf ("MIXPREC_TEST_LOAD=%s", load) : NULL;
  const gchar *env[9] = { "MIXPREC_TEST_ZEROPP_CHILD=1", quantized ? "MIXPREC_TEST_QWZ=1" : "MIXPREC_TEST_QWZ=0",
                          "UCX_NET_DEVICES=lo", out_var, hpz_var, NULL };
  guint n_env = 5;

  if (expect_error)
    env[n_env++] = "MIXPREC_TEST_EXPECT_ERROR=1";
  if (save_var != NULL)
    env[n_env++] = save_var;
  if (load_var != NULL)
    env[n_env++] = load_var;
  if (extra != NULL)
    env[n_env++] = extra;
  gint status[3];

  g_assert_no_error (error);
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);

      g_assert_cmpint (status[r], ==, 0);
      g_assert_true (g_file_get_contents (file, &run->data[r], &run->len[r], &error));
      g_assert_no_error (error);
      if (!expect_error)
        g_assert_cmpuint (run->len[r], ==, 8 + total () * (2 + 4 + 2));
      g_remove (file);
    }
  g_rmdir (dir);
}

static void
run_world_ckpt (guint world, gboolean quantized, guint hpz, gboolean expect_error,
                const gchar *save, const gchar *load, Run *run)
{
  run_world_env (world, quantized, hpz, expect_error, save, load, NULL, run);
}

static void
run_world_full (guint world, gboolean quantized, guint hpz, gboolean expect_error, Run *run)
{
  run_world_ckpt (world, quantized, hpz, expect_error, NULL, NULL, run);
}

static void
run_world (guint world, gboolean quantized, Run *run)
{
  /* The unquantized runs also ask for hpZ over the whole world: ZeRO-3's
   * own partition, so they must gather the working copies exactly. */
  run_world_full (world, quantized, quantized ? 1 : world, FALSE, run);
}

static void
rm_rf (const gchar *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr(GDir) d = g_dir_open (path, 0, NULL);
      const gchar *name;

      while (d != NULL && (name = g_dir_read_name (d)) != NULL)
        {
          g_autofree gchar *child = g_build_filename (path, name, NULL);

          rm_rf (child);
        }
      g_rmdir (path);
    }
  else
    g_remove (path);
}

static gfloat
bf16_value (const guint8 *p)
{
  guint32 b = (guint32) (p[0] | p[1] << 8) << 16;
  gfloat f;

  memcpy (&f, &b, sizeof f);
  return f;
}

/* Compares gathered bf16 values with the unquantized @want (per
 * parameter in order, FP32 values whose bf16 is the working copy): the
 * bound, and how many differ. A block is a run of fewer than 16000
 * elements of one unit, and a unit's parameters lie in this order, so
 * the block of element j holds only elements within 16000 of j: their
 * largest magnitude bounds the block's absmax, whatever the layout. */
#define WINDOW 16000
#define CHUNK 1000

/* Element @i of FP32 values that may sit at any byte offset of a
 * result file (after its bf16 part). */
static gfloat
f32_at (gconstpointer values, guint64 i)
{
  gfloat f;

  memcpy (&f, (const guint8 *) values + i * sizeof f, sizeof f);
  return f;
}

static void
check_gathered (const guint8 *got, gconstpointer want, guint64 *n_differ, gdouble *worst)
{
  guint64 n = total (), n_chunks = (n + CHUNK - 1) / CHUNK;
  g_autofree gdouble *chunk_max = g_new0 (gdouble, n_chunks);

  for (guint64 i = 0; i < n; i++)
    chunk_max[i / CHUNK] = MAX (chunk_max[i / CHUNK], fabs (ref_round_nearest (&ref_bf16, f32_at (want, i))));
  *n_differ = 0;
  *worst = 0;
  for (guint64 j = 0; j < n; j++)
    {
      gdouble x = ref_round_nearest (&ref_bf16, f32_at (want, j));
      gdouble y = bf16_value (got + 2 * j);
      guint64 lo = j >= WINDOW ? (j - WINDOW) / CHUNK : 0;
      guint64 hi = MIN (n - 1, j + WINDOW) / CHUNK;
      gdouble absmax = 0, step, err = fabs (y - x);

      for (guint64 c = lo; c <= hi; c++)
        absmax = MAX (absmax, chunk_max[c]);
      step = absmax / 128;
      if (y != x)
        (*n_differ)++;
      if (x == 0)
        g_assert_cmpfloat (y, ==, 0);
      *worst = MAX (*worst, err / step);
      /* One step, then fp16's and bf16's roundings of the result. */
      if (err > step * (1 + 0x1p-10) + fabs (x) * 0x1p-8)
        g_error ("element %" G_GUINT64_FORMAT ": gathered %.9g, unquantized %.9g, step %.9g",
                 j, y, x, step);
    }
}

/* The FP8 blocks of mixprec.quantized_weights_format against the
 * unquantized @want: half an FP8 step of the value (3 or 2 mantissa
 * bits) or of the block's subnormal spacing (absmax / max times 2^-9 or
 * 2^-16), then bf16's rounding. */
static void
check_gathered_fp8 (const guint8 *got, gconstpointer want, gboolean e4m3, guint64 *n_differ)
{
  guint64 n = total (), n_chunks = (n + CHUNK - 1) / CHUNK;
  g_autofree gdouble *chunk_max = g_new0 (gdouble, n_chunks);
  gdouble rel = e4m3 ? 0x1p-4 : 0x1p-3, sub = e4m3 ? 0x1p-10 / 448 : 0x1p-17 / 57344;

  for (guint64 i = 0; i < n; i++)
    chunk_max[i / CHUNK] = MAX (chunk_max[i / CHUNK], fabs (ref_round_nearest (&ref_bf16, f32_at (want, i))));
  *n_differ = 0;
  for (guint64 j = 0; j < n; j++)
    {
      gdouble x = ref_round_nearest (&ref_bf16, f32_at (want, j));
      gdouble y = bf16_value (got + 2 * j);
      guint64 lo = j >= WINDOW ? (j - WINDOW) / CHUNK : 0;
      guint64 hi = MIN (n - 1, j + WINDOW) / CHUNK;
      gdouble absmax = 0;

      for (guint64 c = lo; c <= hi; c++)
        absmax = MAX (absmax, chunk_max[c]);
      *n_differ += y != x;
      if (x == 0)
        g_assert_cmpfloat (y, ==, 0);
      if (fabs (y - x) > fabs (x) * rel * (1 + 0x1p-7) + absmax * sub * 2 + fabs (x) * 0x1p-8)
        g_error ("element %" G_GUINT64_FORMAT ": gathered %.9g, unquantized %.9g (FP8 %s)", j, y, x,
                 e4m3 ? "E4M3" : "E5M2");
    }
}

/* qwZ with FP8 blocks: the same bits on every rank, within the bound of
 * the working copies before and after a step, the quantization visible,
 * and the bytes of int8 gathers (a byte a code, a scale a block). */
static void
test_engine_fp8 (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data) & 0xff;
  gboolean e4m3 = (GPOINTER_TO_UINT (data) >> 8) == 1;
  Run quant = { 0 }, int8 = { 0 };
  g_autofree gfloat *init = g_new (gfloat, total ());
  guint64 at = 0, n_differ = 0, n2 = 0, fp8_bytes = 0, int8_bytes = 0;

  for (guint k = 0; k < N_PARAMS; k++)
    for (guint64 i = 0; i < sizes[k]; i++)
      init[at++] = init_value (k, i);
  run_world_env (world, TRUE, 1, FALSE, NULL, NULL,
                 e4m3 ? "MIXPREC_TEST_QWZ_FORMAT=fp8_e4m3" : "MIXPREC_TEST_QWZ_FORMAT=fp8_e5m2", &quant);
  run_world (world, TRUE, &int8);
  for (guint r = 1; r < world; r++)
    g_assert_cmpmem (quant.data[r] + 8, quant.len[r] - 8, quant.data[0] + 8, quant.len[0] - 8);
  for (guint r = 0; r < world; r++)
    {
      const guint8 *q = (const guint8 *) quant.data[r] + 8;

      check_gathered_fp8 (q, init, e4m3, &n_differ);
      g_assert_cmpuint (n_differ, >, total () / 4);
      check_gathered_fp8 (q + 6 * total (), q + 2 * total (), e4m3, &n2);
      g_assert_cmpuint (n2, >, total () / 4);
      /* Not the int8 gathers' bits. */
      g_assert_true (memcmp (q, (const guint8 *) int8.data[r] + 8, 2 * total ()) != 0);
      memcpy (&fp8_bytes, quant.data[r], 8);
      memcpy (&int8_bytes, int8.data[r], 8);
      g_assert_cmpuint (fp8_bytes, ==, int8_bytes);
    }
  g_test_message ("%u ranks, FP8 %s: %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " gathered values "
                  "differ from the working copies; %" G_GUINT64_FORMAT " bytes gathered",
                  world, e4m3 ? "E4M3" : "E5M2", n_differ, total (), fp8_bytes);
  run_clear (&quant);
  run_clear (&int8);
}

static void
test_engine (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data);
  Run plain = { 0 }, quant = { 0 };
  g_autofree gfloat *init = g_new (gfloat, total ());
  guint64 at = 0, n_differ = 0, plain_bytes = 0, quant_bytes = 0;
  gdouble worst = 0;

  for (guint k = 0; k < N_PARAMS; k++)
    for (guint64 i = 0; i < sizes[k]; i++)
      init[at++] = init_value (k, i);
  run_world (world, FALSE, &plain);
  run_world (world, TRUE, &quant);
  for (guint r = 1; r < world; r++)
    {
      /* Every rank gathers the same bits, quantized or not. */
      g_assert_cmpmem (quant.data[r] + 8, quant.len[r] - 8, quant.data[0] + 8, quant.len[0] - 8);
      g_assert_cmpmem (plain.data[r] + 8, plain.len[r] - 8, plain.data[0] + 8, plain.len[0] - 8);
    }
  for (guint r = 0; r < world; r++)
    {
      const guint8 *q = (const guint8 *) quant.data[r] + 8;
      const guint8 *p = (const guint8 *) plain.data[r] + 8;
      gconstpointer masters = q + 2 * total ();
      guint64 n;
      gdouble w;

      /* Unquantized gathers are the working copies exactly. */
      for (at = 0; at < total (); at++)
        g_assert_cmpfloat (bf16_value (p + 2 * at), ==, ref_round_nearest (&ref_bf16, init[at]));
      /* Quantized: within the bound, and the quantization shows. */
      check_gathered (q, init, &n_differ, &worst);
      g_assert_cmpuint (n_differ, >, total () / 4);
      check_gathered (q + 6 * total (), masters, &n, &w);
      g_assert_cmpuint (n, >, total () / 4);
      worst = MAX (worst, w);
      /* int8 codes and a scale per block of up to 16000: about half
       * the bytes of bf16. */
      memcpy (&plain_bytes, plain.data[r], 8);
      memcpy (&quant_bytes, quant.data[r], 8);
      g_assert_cmpuint (quant_bytes * 2, <, plain_bytes + plain_bytes / 50);
      g_assert_cmpuint (quant_bytes * 2, >, plain_bytes);
    }
  g_test_message ("%u ranks: %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " gathered values "
                  "differ from the working copies, worst error %.3f of a step; %" G_GUINT64_FORMAT
                  " bytes gathered against %" G_GUINT64_FORMAT " in bf16",
                  world, n_differ, total (), worst, quant_bytes, plain_bytes);
  run_clear (&plain);
  run_clear (&quant);
}

/* A checkpoint carries no quantized value: one saved with qwZ on resumes
 * with it off, gathering exactly the bf16 working copies of the saved
 * masters, and one saved with it off resumes with it on, within the
 * quantizer's bound of them. */
static void
test_resume (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-zeropp-ckpt-XXXXXX", &error);
  g_autofree gchar *with = g_build_filename (dir, "qwz", NULL);
  g_autofree gchar *without = g_build_filename (dir, "plain", NULL);
  Run saved_q = { 0 }, saved_p = { 0 }, resumed_p = { 0 }, resumed_q = { 0 };
  guint64 n_differ;
  gdouble worst;

  g_assert_no_error (error);
  run_world_ckpt (2, TRUE, 1, FALSE, with, NULL, &saved_q);
  run_world_ckpt (2, FALSE, 1, FALSE, without, NULL, &saved_p);
  run_world_ckpt (2, FALSE, 1, FALSE, NULL, with, &resumed_p);
  run_world_ckpt (2, TRUE, 1, FALSE, NULL, without, &resumed_q);
  for (guint r = 0; r < 2; r++)
    {
      gconstpointer masters_q = (const guint8 *) saved_q.data[r] + 8 + 2 * total ();
      gconstpointer masters_p = (const guint8 *) saved_p.data[r] + 8 + 2 * total ();
      const guint8 *got_p = (const guint8 *) resumed_p.data[r] + 8;

      for (guint64 at = 0; at < total (); at++)
        g_assert_cmpfloat (bf16_value (got_p + 2 * at), ==, ref_round_nearest (&ref_bf16, f32_at (masters_q, at)));
      check_gathered ((const guint8 *) resumed_q.data[r] + 8, masters_p, &n_differ, &worst);
      g_assert_cmpuint (n_differ, >, total () / 4);
    }
  run_clear (&saved_q);
  run_clear (&saved_p);
  run_clear (&resumed_p);
  run_clear (&resumed_q);
  rm_rf (dir);
}

/* hpZ groups that do not divide the world are refused on every rank,
 * naming the setting and the sizes (tests/test-hpz-engine.c runs the
 * groups that do). */
static void
test_hpz_refused (void)
{
  Run refused = { 0 };

  run_world_full (3, TRUE, 2, TRUE, &refused);
  for (guint r = 0; r < 3; r++)
    {
      g_assert_true (g_str_has_prefix (refused.data[r], "zero_optimization.zero_hpz_partition_size: 2: "));
      g_assert_nonnull (strstr (refused.data[r], "2 consecutive ranks each, which must divide the world of 3 ranks"));
    }
  run_clear (&refused);
}

/* qwZ with FP8 working copies, whose gathers move FP8 already, is
 * refused on every rank, saying what to change. */
static void
test_fp8_refused (void)
{
  Run refused = { 0 };

  run_world_env (2, TRUE, 1, TRUE, NULL, NULL, "MIXPREC_TEST_FP8=1", &refused);
  for (guint r = 0; r < 2; r++)
    {
      if (!g_str_has_prefix (refused.data[r], "zero_optimization.zero_quantized_weights: "))
        g_error ("rank %u: %s", r, refused.data[r]);
      g_assert_nonnull (strstr (refused.data[r], "fp8"));
      g_assert_nonnull (strstr (refused.data[r], "turn zero_quantized_weights off"));
    }
  run_clear (&refused);
}

int
main (int argc, char **argv)
{
  if (g_getenv ("MIXPREC_TEST_ZEROPP_CHILD") != NULL)
    return child_main ();

  g_test_init (&argc, &argv, NULL);
  g_setenv ("MIXPREC_JOB_SECRET", MP_JOB_SECRET, TRUE);
  g_setenv ("UCX_LOG_LEVEL", "error", FALSE);
  g_test_add_data_func ("/zeropp/qwz/ranks-2", GUINT_TO_POINTER (2), test_engine);
  g_test_add_data_func ("/zeropp/qwz/ranks-3", GUINT_TO_POINTER (3), test_engine);
  g_test_add_data_func ("/zeropp/qwz/fp8-e4m3/ranks-3", GUINT_TO_POINTER (0x100 | 3), test_engine_fp8);
  g_test_add_data_func ("/zeropp/qwz/fp8-e5m2/ranks-2", GUINT_TO_POINTER (0x200 | 2), test_engine_fp8);
  g_test_add_func ("/zeropp/qwz/resume-across-setting", test_resume);
  g_test_add_func ("/zeropp/qwz/fp8-refused", test_fp8_refused);
  g_test_add_func ("/zeropp/hpz/refused", test_hpz_refused);
  return g_test_run ();
}
