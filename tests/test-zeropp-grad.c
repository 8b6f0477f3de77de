/* test-zeropp-grad.c — ZeRO++'s quantized gradients (qgZ,
 * zero_optimization.zero_quantized_gradients) in the engine, on 2 and 3
 * ranks on 127.0.0.1 through comm-ucx, bf16 at ZeRO-3.
 *
 * Each rank hands its own gradients (different on every rank: magnitudes
 * from 2^-4 to 2^4 changing every 600 elements, an outlier, a run of
 * zeros). Once the reductions are done, each rank reads its reduced
 * slices and compares them with an independent computation from the
 * same inputs: every rank's bf16 gradients cut into the slice layout,
 * each block of 512 quantized to int4 and dequantized by the quantizer
 * primitives (tests/test-zeropp-quant.py holds those against DeepSpeed's
 * arithmetic), summed in FP32 in rank order. Without qgZ the same
 * computation without the quantizer must give the engine's bits too,
 * which checks the layout this test assumes. What must hold with qgZ:
 * the same bits; within the stated bound of the exact sum (per rank, one
 * int4 step of the block plus fp16's rounding); the quantization visible;
 * an all-zero run summed to zeros; and the masters after a step the same
 * on every rank.
 *
 * LoCo (zeropp_loco_param): over two steps the reductions and this rank's
 * error buffer equal the test's own model of the error feedback, bit for
 * bit; a checkpoint saved after step 1 resumes step 2 bit for bit, and
 * resumes across LoCo switched on or off; gradient accumulation folds
 * onto the previous micro-step's sums; fp16 reduces in place into float16
 * sums, and a communication dtype other than the gradients' goes through
 * the staging windows. A communicator of comm ABI
 * revision 1 (the test plugin testcomm) is refused, naming it and qgZ. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "mixprec-engine-impl-private.h"
#include "mixprec-zeropp-private.h"
#include "dtype-reference.h"
#include "multiproc.h"

#define TIMEOUT_MS 60000

static const guint64 sizes[] = { 20000, 700, 3000, 70001 };
#define N_PARAMS G_N_ELEMENTS (sizes)

#define LOCO_BETA 0.8f

/* Gradient @i of parameter @k on @rank at @step, before its bf16
 * rounding. */
static gfloat
grad_value (guint rank, guint step, guint k, guint64 i)
{
  if (k == 3 && i >= 40000 && i < 60000)
    return 0.0f;
  if (k == 0 && i == 1234 && rank == 1)
    return 50.0f;
  return (gfloat) (sin (0.37 * (gdouble) i + 1.3 * rank + k + 0.7 * step) *
                   ldexp (1.0, (gint) ((i / 600 + rank) % 9) - 4));
}

static gfloat
bf16_of (gfloat f)
{
  return (gfloat) ref_round_nearest (&ref_bf16, f);
}

/* The gradients' dtype: bfloat16, float16 in the fp16 case, float32 in
 * the fp32 one. */
static MixprecDType grads_dtype = MIXPREC_DTYPE_BFLOAT16;

/* What qgZ moves (MIXPREC_TEST_QGZ_FORMAT, mixprec.quantized_gradients_format):
 * DeepSpeed's int4, or FP8 blocks. */
static _MixprecZeroppFormat qgz_format = _MIXPREC_ZEROPP_INT;

static gfloat
round_as (MixprecDType dtype, gfloat f)
{
  if (dtype == MIXPREC_DTYPE_FLOAT16)
    return (gfloat) ref_round_nearest (&ref_f16, f);
  return dtype == MIXPREC_DTYPE_BFLOAT16 ? bf16_of (f) : f;
}

static gfloat
grad_of (gfloat f)
{
  return round_as (grads_dtype, f);
}

/* The bf16 gradient element @e of the group's unpadded element space on
 * @rank (0 past the end). */
static gfloat
element (guint rank, guint step, guint64 e)
{
  for (guint k = 0; k < N_PARAMS; k++)
    {
      if (e < sizes[k])
        return grad_of (grad_value (rank, step, k, e));
      e -= sizes[k];
    }
  return 0.0f;
}

/* What rank @r contributes to element @i of @u's slice @slice_rank. */
/* What rank @r sends for element @i of @u's slice @slice_rank: its
 * gradient, rounded to the communication dtype where that differs. */
static gfloat
contribution (MixprecEngine *engine, const Unit *u, guint r, guint step, guint slice_rank, guint64 i)
{
  Group *g = g_ptr_array_index (engine->groups, 0);
  guint64 e = slice_rank * UNIT_SLICE (engine, u) + i;
  gfloat v = e < u->numel ? element (r, step, u->index + e) : 0.0f;

  return g->wire != g->dtypes.grad ? round_as (g->wire, v) : v;
}

static gfloat
f16_of (gdouble v)
{
  return (gfloat) ref_round_nearest (&ref_f16, v);
}

/* The int4 round trip of @n values (n <= 512) as one block. With @err
 * (LoCo), fp16 (x + e) goes through it instead, and e becomes fp16 (beta
 * e + (1 - beta) (v - dequantized v)). */
static void
round_trip (const gfloat *x, guint64 n, gfloat *err, gfloat *before, gfloat *out, gfloat *stored)
{
  gfloat pad[_MIXPREC_ZEROPP_QGZ_BLOCK + 1] = { 0 };

  if (qgz_format != _MIXPREC_ZEROPP_INT)
    {
      /* FP8 blocks (tests/test-zeropp-quant.py holds them against torch's
       * casts): the value v = x + e in float32, no fp16 step. */
      guint8 codes8[_MIXPREC_ZEROPP_QGZ_BLOCK];
      gfloat back8[_MIXPREC_ZEROPP_QGZ_BLOCK];

      for (guint64 i = 0; i < _MIXPREC_ZEROPP_QGZ_BLOCK; i++)
        {
          pad[i] = i < n ? x[i] + (err != NULL ? err[i] : 0.0f) : 0.0f;
          if (i < n)
            before[i] = err != NULL ? err[i] : 0.0f;
        }
      _mixprec_zeropp_quantize_as (pad, MIXPREC_DTYPE_FLOAT32, _MIXPREC_ZEROPP_QGZ_BLOCK, 1, qgz_format,
                                   codes8, stored);
      _mixprec_zeropp_dequantize_as (codes8, stored, _MIXPREC_ZEROPP_QGZ_BLOCK, 1, qgz_format, back8,
                                     MIXPREC_DTYPE_FLOAT32);
      memcpy (out, back8, n * sizeof (gfloat));
      for (guint64 i = 0; err != NULL && i < n; i++)
        err[i] = f16_of (LOCO_BETA * err[i] + (1.0f - LOCO_BETA) * (pad[i] - back8[i]));
      return;
    }
  {
  gint8 codes[_MIXPREC_ZEROPP_QGZ_BLOCK / 2 + 1];
  gfloat back[_MIXPREC_ZEROPP_QGZ_BLOCK + 1];
  guint64 even = n + (n & 1);

  for (guint64 i = 0; i < n; i++)
    {
      pad[i] = err != NULL ? f16_of ((gdouble) f16_of (x[i]) + err[i]) : x[i];
      before[i] = err != NULL ? err[i] : 0.0f;
    }
  _mixprec_zeropp_quantize (pad, MIXPREC_DTYPE_FLOAT32, even, 1, 4, codes, stored);
  _mixprec_zeropp_dequantize (codes, stored, even, 1, 4, back, MIXPREC_DTYPE_FLOAT32);
  memcpy (out, back, n * sizeof (gfloat));
  for (guint64 i = 0; err != NULL && i < n; i++)
    {
      gfloat fresh = pad[i] - back[i];

      err[i] = f16_of (LOCO_BETA * err[i] + (1.0f - LOCO_BETA) * fresh);
    }
  }
}

static gfloat
read_target (gconstpointer base, MixprecDType dtype, guint64 i)
{
  if (dtype == MIXPREC_DTYPE_FLOAT32)
    return ((const gfloat *) base)[i];
  g_assert (dtype == MIXPREC_DTYPE_BFLOAT16 || dtype == MIXPREC_DTYPE_FLOAT16);
  return (gfloat) ref_decode (dtype == MIXPREC_DTYPE_FLOAT16 ? &ref_f16 : &ref_bf16,
                              ((const guint16 *) base)[i]);
}

static gfloat
round_to (MixprecDType dtype, gfloat v)
{
  if (dtype == MIXPREC_DTYPE_FLOAT16)
    return (gfloat) ref_round_nearest (&ref_f16, v);
  return dtype == MIXPREC_DTYPE_FLOAT32 ? v : bf16_of (v);
}

/* The errors every rank keeps for its contributions to this rank's
 * slices, as the test follows them: unit k's rank r's at
 * [k][r * slice + i]. */
typedef struct {
  GPtrArray *units;          /* gfloat arrays */
} Errors;

/* Checks this rank's reduced slices at @step; FALSE with @why. @errors
 * (LoCo) advances. @prev (gradient accumulation): each unit's reduced
 * slice after the previous micro-step, which this one is folded onto
 * (first term of the sum); empty at the first micro-step, and filled
 * with this one's for the next. Appends the reduced values' bits, and with LoCo this
 * rank's own error buffer, to @out; @out NULL: only the test's model of
 * the step runs (the errors advance), nothing is read from the engine. */
static gboolean
check_reduced (MixprecEngine *engine, gboolean quantized, guint step, Errors *errors,
               GPtrArray *prev, GString *out, GString *why)
{
  Group *g = g_ptr_array_index (engine->groups, 0);
  MixprecDType dtype = g->accum_mode == ACCUM_IN_GRAD ? g->dtypes.grad : g->dtypes.accum;
  guint64 n = 0, differ = 0, zeros_ok = 0, zeros = 0;
  gdouble worst = 0;

  /* How the intake cuts a unit: in one piece where the gradients travel
   * in their own dtype, else in windows of the staging slots (a reduction
   * each, blocks starting at each window). */
  guint64 window = g->wire == g->dtypes.grad ? G_MAXUINT64 : MAX (g->slot_elements / engine->world, 1);

  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 slice = UNIT_SLICE (engine, u);
      gconstpointer target = _mixprec_engine_reduce_target (engine, g, u);
      gfloat *unit_err = NULL;
      gfloat *before = prev != NULL && prev->len > k ? g_ptr_array_index (prev, k) : NULL;

      if (errors != NULL)
        {
          if (errors->units->len <= k)
            g_ptr_array_add (errors->units, g_new0 (gfloat, slice * engine->world));
          unit_err = g_ptr_array_index (errors->units, k);
        }
      if (out != NULL)
        g_string_append_len (out, target, (gssize) (slice * mixprec_dtype_get_size (dtype)));
      for (guint64 b0 = 0; b0 < slice;)
        {
          guint64 w0 = window == G_MAXUINT64 ? 0 : b0 / window * window;
          guint64 w1 = window == G_MAXUINT64 ? slice : MIN (w0 + window, slice);
          guint64 len = MIN ((guint64) _MIXPREC_ZEROPP_QGZ_BLOCK, w1 - b0);
          gfloat x[_MIXPREC_ZEROPP_QGZ_BLOCK], d[4][_MIXPREC_ZEROPP_QGZ_BLOCK], stored[4];
          gfloat fed[4][_MIXPREC_ZEROPP_QGZ_BLOCK] = { { 0 } };

          g_assert (engine->world <= 4);
          for (guint r = 0; r < engine->world; r++)
            {
              for (guint64 i = 0; i < len; i++)
                x[i] = contribution (engine, u, r, step, engine->rank, b0 + i);
              if (quantized)
                round_trip (x, len, unit_err != NULL ? unit_err + r * slice + b0 : NULL, fed[r], d[r],
                            &stored[r]);
              else
                memcpy (d[r], x, len * sizeof (gfloat));
            }
          for (guint64 i = 0; out != NULL && i < len; i++)
            {
              gfloat want = d[0][i], exact = 0, got = read_target (target, dtype, b0 + i);
              gdouble bound = 0;
              gboolean all_zero = TRUE;

              /* Folded onto the previous micro-step's sum, its first term. */
              if (before != NULL)
                {
                  want = before[b0 + i] + want;
                  exact = before[b0 + i];
                  all_zero = before[b0 + i] == 0;
                }
              for (guint r = 1; r < engine->world; r++)
                want += d[r][i];
              want = round_to (dtype, want);
              for (guint r = 0; r < engine->world; r++)
                {
                  gfloat c = contribution (engine, u, r, step, engine->rank, b0 + i);

                  exact += c;
                  all_zero = all_zero && c == 0;
                  /* One int4 step of the block, and fp16's rounding; with
                   * LoCo also the error fed back and fp16's rounding of
                   * the sum. */
                  if (quantized && qgz_format != _MIXPREC_ZEROPP_INT)
                    /* Half an FP8 step of the value (3 or 2 mantissa
                     * bits), or of the block's subnormal spacing. */
                    bound += (fabs (c) + fabs (fed[r][i])) * (qgz_format == _MIXPREC_ZEROPP_FP8_E4M3 ? 0x1p-4 : 0x1p-3) +
                             stored[r] * (qgz_format == _MIXPREC_ZEROPP_FP8_E4M3 ? 0x1p-10 : 0x1p-17) + 0x1p-24;
                  else
                    bound += quantized ? stored[r] + fabs (c) * 0x1p-11 + 0x1p-24 : 0;
                  bound += fabs (fed[r][i]) * (1 + 0x1p-10) + 0x1p-24;
                }
              bound += fabs (exact) * (dtype == MIXPREC_DTYPE_FLOAT32 ? 0x1p-23 : 0x1p-8) * 2;
              /* What the earlier micro-step's sum already carried. */
              if (before != NULL)
                bound += fabs ((gdouble) before[b0 + i]) * 0x1p-23;
              n++;
              if (memcmp (&got, &want, sizeof got) != 0)
                {
                  g_string_append_printf (why, "unit %u element %" G_GUINT64_FORMAT " of rank "
                                          "%u's slice: the engine has %.9g, the independent "
                                          "dequantize-sum gives %.9g", k, b0 + i, engine->rank,
                                          got, want);
                  return FALSE;
                }
              if (fabs ((gdouble) got - exact) > bound)
                {
                  g_string_append_printf (why, "unit %u element %" G_GUINT64_FORMAT ": %.9g is "
                                          "%.3g from the exact sum %.9g, beyond the bound %.3g",
                                          k, b0 + i, got, fabs ((gdouble) got - exact), exact, bound);
                  return FALSE;
                }
              worst = MAX (worst, bound > 0 ? fabs ((gdouble) got - exact) / bound : 0);
              differ += got != round_to (dtype, exact);
              if (all_zero)
                {
                  zeros++;
                  zeros_ok += got == 0;
                }
            }
          b0 += len;
        }
      /* This micro-step's sums, for the next one to fold onto. */
      if (prev != NULL && out != NULL)
        {
          gfloat *now = g_new (gfloat, slice);

          for (guint64 i = 0; i < slice; i++)
            now[i] = read_target (target, dtype, i);
          if (prev->len > k)
            {
              g_free (g_ptr_array_index (prev, k));
              g_ptr_array_index (prev, k) = now;
            }
          else
            g_ptr_array_add (prev, now);
        }
      /* LoCo: the engine's own errors for this rank's contributions to
       * its slice are the ones followed here. */
      if (unit_err != NULL && out != NULL)
        {
          const guint16 *mine = g->zeropp.loco_err + u->flat + engine->rank * slice;

          g_string_append_len (out, (const gchar *) mine, (gssize) (slice * 2));
          for (guint64 i = 0; i < slice; i++)
            if (!ref_matches (&ref_f16, mine[i], unit_err[engine->rank * slice + i]) &&
                !(mine[i] == 0 && unit_err[engine->rank * slice + i] == 0))
              {
                g_string_append_printf (why, "step %u, unit %u element %" G_GUINT64_FORMAT
                                        ": the engine's LoCo error is %.9g, the test's %.9g",
                                        step, k, i, ref_decode (&ref_f16, mine[i]),
                                        unit_err[engine->rank * slice + i]);
                return FALSE;
              }
        }
    }
  if (out == NULL)
    return TRUE;
  g_printerr ("rank %u (%s gradients as %s, %s), step %u, qgZ %s%s: %" G_GUINT64_FORMAT " reduced elements (%s) equal the independent "
              "computation; %" G_GUINT64_FORMAT " differ from the exact sum, at most %.2f of the "
              "bound; %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " all-zero ones zero\n",
              engine->rank, mixprec_dtype_get_name (g->dtypes.grad), mixprec_dtype_get_name (g->wire),
              window == G_MAXUINT64 ? "whole slices" : "windows", step, quantized ? "on" : "off",
              errors != NULL ? " with LoCo" : "", n, mixprec_dtype_get_name (dtype), differ,
              worst, zeros_ok, zeros);
  /* The run of zeros lies in some ranks' slices only. */
  if (zeros_ok != zeros)
    {
      g_string_append (why, "the all-zero run did not sum to zeros");
      return FALSE;
    }
  if (quantized && differ * 10 < n)
    {
      g_string_append_printf (why, "only %" G_GUINT64_FORMAT " of %" G_GUINT64_FORMAT " sums "
                              "differ from the exact ones: is the quantizer running?", differ, n);
      return FALSE;
    }
  if (!quantized && differ != 0)
    {
      g_string_append (why, "without qgZ the sums differ from the exact ones");
      return FALSE;
    }
  return TRUE;
}

/* Hands every parameter its gradients of @step. */
static gboolean
set_grads (MixprecEngine *engine, guint step, GError **error)
{
  guint rank = mixprec_engine_get_rank (engine);

  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", k);
      g_autofree gfloat *gv = g_new (gfloat, sizes[k]);
      g_autoptr(GBytes) grad = NULL;

      for (guint64 i = 0; i < sizes[k]; i++)
        gv[i] = grad_value (rank, step, k, i);
      grad = g_bytes_new_take (g_steal_pointer (&gv), sizes[k] * sizeof (gfloat));
      if (!mixprec_param_set_grad (mixprec_engine_get_param (engine, name), MIXPREC_DTYPE_FLOAT32,
                                   grad, error))
        return FALSE;
    }
  return TRUE;
}

/* The child: steps 1 and 2 (or, resuming from MIXPREC_TEST_LOAD saved
 * after step 1, step 2 alone), each reduction checked. Writes the last
 * step's reduced values (and LoCo errors), then the masters. With
 * MIXPREC_TEST_SAVE it saves a checkpoint after step 1. MIXPREC_TEST_LOCO:
 * 1 the engine runs LoCo; MIXPREC_TEST_LOCO_LOADED: the errors the
 * checkpoint carries in (1: LoCo's after step 1, 0: none). */
/* The child of /zeropp/qgz/v1-comm-refused: an engine on testcomm (a
 * revision 1 communicator, no all-to-all) refuses qgZ, naming it. */
static int
child_v1 (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_autoptr(MixprecComm) comm = NULL;
  g_autoptr(MixprecConfig) config =
    mixprec_config_new_from_data ("{\"bf16\": {\"enabled\": true}, \"zero_optimization\": "
                                  "{\"stage\": 3, \"zero_quantized_gradients\": true}, "
                                  "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.25}}}",
                                  -1, NULL);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autofree gfloat *v = g_new0 (gfloat, sizes[0]);
  g_autoptr(GBytes) init = g_bytes_new_take (g_steal_pointer (&v), sizes[0] * sizeof (gfloat));
  g_autofree gchar *file = NULL;

  if (config == NULL || bootstrap == NULL ||
      (comm = mixprec_comm_new (bootstrap, "testcomm", "cpu", TIMEOUT_MS, &error)) == NULL ||
      (engine = mixprec_engine_new_with_comm (config, comm, NULL, &error)) == NULL)
    goto fail;
  if (mixprec_engine_register_param (engine, "p0", &sizes[0], 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                     init, &error) != NULL &&
      mixprec_engine_prepare (engine, &error))
    {
      g_printerr ("the engine took qgZ on a communicator without an all-to-all\n");
      return 1;
    }
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), mixprec_bootstrap_get_rank (bootstrap));
  return g_file_set_contents (file, error->message, -1, NULL) ? 0 : 1;

fail:
  g_printerr ("v1 child: %s\n", error != NULL ? error->message : config == NULL ? "no config" : "?");
  return 1;
}

static int
child_main (void)
{
  gboolean quantized = g_strcmp0 (g_getenv ("MIXPREC_TEST_QGZ"), "1") == 0;
  gboolean loco = g_strcmp0 (g_getenv ("MIXPREC_TEST_LOCO"), "1") == 0;
  guint gas = g_strcmp0 (g_getenv ("MIXPREC_TEST_GAS"), "2") == 0 ? 2 : 1;
  g_autoptr(GPtrArray) prev = g_ptr_array_new_with_free_func (g_free);
  const gchar *load = g_getenv ("MIXPREC_TEST_LOAD");
  const gchar *save = g_getenv ("MIXPREC_TEST_SAVE");
  /* fp16 with a static scale of 1: float16 gradients reduced in place
   * into float16 sums. fp32 with a bfloat16 communication dtype: float32
   * gradients travel as bfloat16, through the staging slots' windows. */
  const gchar *prec = g_getenv ("MIXPREC_TEST_PREC");
  gboolean fp16 = g_strcmp0 (prec, "fp16") == 0;
  gboolean wide = g_strcmp0 (prec, "fp32-bf16-comm") == 0;
  g_autofree gchar *json =
    g_strdup_printf ("{%s, \"zero_optimization\": {\"stage\": 3, "
                     "\"stage3_param_persistence_threshold\": 0, "
                     "\"zero_quantized_gradients\": %s, \"zeropp_loco_param\": %s}, "
                     "\"gradient_accumulation_steps\": %u, "
                     "\"mixprec\": {\"quantized_gradients_format\": \"%s\"}, "
                     "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.25}}}",
                     fp16 ? "\"fp16\": {\"enabled\": true, \"loss_scale\": 1}"
                          : wide ? "\"communication_data_type\": \"bf16\""
                                 : "\"bf16\": {\"enabled\": true}",
                     quantized ? "true" : "false",
                     loco ? "{\"err_beta\": 0.8, \"reset_T\": 100}" : "null", gas,
                     qgz_format == _MIXPREC_ZEROPP_FP8_E4M3 ? "fp8_e4m3"
                     : qgz_format == _MIXPREC_ZEROPP_FP8_E5M2 ? "fp8_e5m2" : "int4");
  g_autoptr(GError) error = NULL;
  g_autoptr(GString) why = g_string_new (NULL);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  g_autofree gchar *file = NULL;
  Errors errors = { g_ptr_array_new_with_free_func (g_free) };
  guint rank;

  if (config == NULL || (engine = mixprec_engine_new (config, &error)) == NULL)
    goto fail;
  rank = mixprec_engine_get_rank (engine);
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", k);
      g_autofree gfloat *v = g_new0 (gfloat, sizes[k]);
      g_autoptr(GBytes) init = g_bytes_new_take (g_steal_pointer (&v), sizes[k] * sizeof (gfloat));

      if (mixprec_engine_register_param (engine, name, &sizes[k], 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                         init, &error) == NULL)
        goto fail;
    }
  if (load != NULL && !mixprec_engine_load_checkpoint (engine, load, &error))
    goto fail;
  for (guint step = 1; step <= 2; step++)
    {
      g_autoptr(MixprecStepResult) result = NULL;

      g_string_truncate (out, 0);
      /* Resumed after step 1: the test follows step 1's LoCo errors on its
       * own where the checkpoint brings them in. */
      if (load != NULL && step == 1)
        {
          if (loco && g_strcmp0 (g_getenv ("MIXPREC_TEST_LOCO_LOADED"), "1") == 0)
            for (guint micro = 0; micro < gas; micro++)
              check_reduced (engine, quantized, step * 4 + micro, &errors, NULL, NULL, why);
          continue;
        }
      /* With gradient_accumulation_steps 2, the second micro-step folds
       * onto the first one's sums; a step starts afresh. */
      g_ptr_array_set_size (prev, 0);
      for (guint micro = 0; micro < gas; micro++)
        {
          if (!set_grads (engine, step * 4 + micro, &error) ||
              !mixprec_engine_backward_done (engine, &error) ||
              !_mixprec_engine_wait_pending (engine, &error))
            goto fail;
          if (micro + 1 == gas)
            g_string_truncate (out, 0);
          if (!check_reduced (engine, quantized, step * 4 + micro, loco ? &errors : NULL,
                              gas > 1 ? prev : NULL, out, why))
            {
              g_printerr ("rank %u: %s\n", rank, why->str);
              return 1;
            }
        }
      if ((result = mixprec_engine_step (engine, &error)) == NULL)
        goto fail;
      if (step == 1 && save != NULL && !mixprec_engine_save_checkpoint (engine, save, &error))
        goto fail;
    }
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", k);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, name, &error);

      if (master == NULL)
        goto fail;
      g_string_append_len (out, g_bytes_get_data (master, NULL), (gssize) g_bytes_get_size (master));
    }
  g_ptr_array_unref (errors.units);
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), rank);
  return g_file_set_contents (file, out->str, (gssize) out->len, NULL) ? 0 : 1;

fail:
  g_printerr ("zeropp-grad child: %s\n", error != NULL ? error->message : "?");
  return 1;
}

static void
rm_rf (const gchar *path)
{
  g_autoptr(GDir) d = g_dir_open (path, 0, NULL);
  const gchar *name;

  if (d == NULL)
    {
      g_remove (path);
      return;
    }
  while ((name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *child = g_build_filename (path, name, NULL);

      if (g_file_test (child, G_FILE_TEST_IS_DIR) && !g_file_test (child, G_FILE_TEST_IS_SYMLINK))
        rm_rf (child);
      else
        g_remove (child);
    }
  g_rmdir (path);
}

/* Runs the child on @world ranks with the "NAME=VALUE" strings of @extra
 * and returns rank 0's output after checking that every rank's masters
 * (the end of each output) agree. */
static gchar *
run_world (guint world, const gchar * const *extra, gsize *len_out)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-qgz-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "out", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  const gchar *env[12] = { "MIXPREC_TEST_QGZ_CHILD=1", "UCX_NET_DEVICES=lo", out_var, NULL };
  guint n_env = 3;
  gchar *first = NULL;
  gsize first_len = 0;
  guint64 masters = 0;
  gint status[3];

  g_assert_no_error (error);
  for (guint i = 0; extra[i] != NULL; i++)
    env[n_env++] = extra[i];
  for (guint k = 0; k < N_PARAMS; k++)
    masters += sizes[k] * 4;
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
      g_autofree gchar *data_r = NULL;
      gsize len = 0;

      g_assert_cmpint (status[r], ==, 0);
      g_assert_true (g_file_get_contents (file, &data_r, &len, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (len, >=, masters);
      /* Ranks agree on the stepped masters. */
      if (r == 0)
        {
          first = g_steal_pointer (&data_r);
          first_len = len;
        }
      else
        g_assert_cmpmem (data_r + len - masters, masters, first + first_len - masters, masters);
      g_remove (file);
    }
  g_rmdir (dir);
  *len_out = first_len;
  return first;
}

static void
test_engine (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data) & 0xff;
  guint mode = (GPOINTER_TO_UINT (data) >> 8) & 0xff;
  /* bits 16 and 17: qgZ moves FP8 E4M3 or E5M2 blocks */
  guint fp8 = GPOINTER_TO_UINT (data) >> 16;
  /* mode: 0 unquantized, 1 qgZ, 2 qgZ and LoCo, 3 qgZ and LoCo with
   * gradient accumulation, 4 unquantized with it; 5: qgZ and LoCo in
   * fp16; 6 and 7: 0 and 2 in fp32 with a bfloat16 communication dtype */
  gboolean qgz = (mode >= 1 && mode <= 3) || mode == 5 || mode == 7;
  gboolean loco = mode == 2 || mode == 3 || mode == 5 || mode == 7;
  const gchar *env[] = { qgz ? "MIXPREC_TEST_QGZ=1" : "MIXPREC_TEST_QGZ=0",
                         loco ? "MIXPREC_TEST_LOCO=1" : "MIXPREC_TEST_LOCO=0",
                         mode == 3 || mode == 4 ? "MIXPREC_TEST_GAS=2" : "MIXPREC_TEST_GAS=1",
                         fp8 == 1 ? "MIXPREC_TEST_QGZ_FORMAT=fp8_e4m3"
                                  : fp8 == 2 ? "MIXPREC_TEST_QGZ_FORMAT=fp8_e5m2" : "MIXPREC_TEST_QGZ_FORMAT=int4",
                         mode == 5 ? "MIXPREC_TEST_PREC=fp16"
                                   : mode >= 6 ? "MIXPREC_TEST_PREC=fp32-bf16-comm" : NULL, NULL };
  gsize len;
  g_autofree gchar *got = run_world (world, env, &len);

  g_assert_nonnull (got);
}

/* A checkpoint saved after step 1 resumes step 2 bit for bit with LoCo's
 * errors; one saved without LoCo resumes with LoCo on (its errors from
 * zero), one saved with LoCo resumes with it off, and on 3 ranks (its
 * errors from zero). Each child checks
 * each step against the test's model. */
static void
test_resume (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-loco-ckpt-XXXXXX", &error);
  g_autofree gchar *with = g_build_filename (dir, "with-loco", NULL);
  g_autofree gchar *without = g_build_filename (dir, "without-loco", NULL);
  g_autofree gchar *save_with = g_strdup_printf ("MIXPREC_TEST_SAVE=%s", with);
  g_autofree gchar *load_with = g_strdup_printf ("MIXPREC_TEST_LOAD=%s", with);
  g_autofree gchar *save_without = g_strdup_printf ("MIXPREC_TEST_SAVE=%s", without);
  g_autofree gchar *load_without = g_strdup_printf ("MIXPREC_TEST_LOAD=%s", without);
  const gchar *straight_env[] = { "MIXPREC_TEST_QGZ=1", "MIXPREC_TEST_LOCO=1", save_with, NULL };
  const gchar *resumed_env[] = { "MIXPREC_TEST_QGZ=1", "MIXPREC_TEST_LOCO=1", load_with,
                                 "MIXPREC_TEST_LOCO_LOADED=1", NULL };
  const gchar *plain_env[] = { "MIXPREC_TEST_QGZ=1", "MIXPREC_TEST_LOCO=0", save_without, NULL };
  const gchar *switch_on_env[] = { "MIXPREC_TEST_QGZ=1", "MIXPREC_TEST_LOCO=1", load_without,
                                   "MIXPREC_TEST_LOCO_LOADED=0", NULL };
  const gchar *switch_off_env[] = { "MIXPREC_TEST_QGZ=1", "MIXPREC_TEST_LOCO=0", load_with, NULL };
  const gchar *switch_on_env_with[] = { "MIXPREC_TEST_QGZ=1", "MIXPREC_TEST_LOCO=1", load_with,
                                        "MIXPREC_TEST_LOCO_LOADED=0", NULL };
  g_autofree gchar *straight = NULL, *resumed = NULL, *plain = NULL, *on = NULL, *off = NULL;
  gsize straight_len, resumed_len, plain_len, on_len, off_len;

  g_assert_no_error (error);
  straight = run_world (2, straight_env, &straight_len);
  resumed = run_world (2, resumed_env, &resumed_len);
  /* Step 2's reduced values, LoCo errors and masters, bit for bit. */
  g_assert_cmpmem (resumed, resumed_len, straight, straight_len);
  plain = run_world (2, plain_env, &plain_len);
  on = run_world (2, switch_on_env, &on_len);
  g_assert_nonnull (on);
  off = run_world (2, switch_off_env, &off_len);
  /* LoCo's errors dropped: step 2 as the run that never had them. */
  g_assert_cmpmem (off, off_len, plain, plain_len);
  /* At another world size the saved errors are other ranks' and another
   * layout's: LoCo starts from zero (the child's model says so). */
  g_free (on);
  on = run_world (3, switch_on_env_with, &on_len);
  g_assert_nonnull (on);
  rm_rf (dir);
}

static void
test_v1_refused (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-qgz-v1-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "out", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *plugins = g_test_build_filename (G_TEST_BUILT, "plugins", NULL);
  const gchar *old = g_getenv ("MIXPREC_PLUGIN_PATH");
  /* The test plugins (testcomm) join the build tree's. */
  g_autofree gchar *path_var = old != NULL && old[0] != '\0'
    ? g_strdup_printf ("MIXPREC_PLUGIN_PATH=%s:%s", plugins, old)
    : g_strdup_printf ("MIXPREC_PLUGIN_PATH=%s", plugins);
  const gchar *env[] = { "MIXPREC_TEST_V1_CHILD=1", "MIXPREC_TEST_COMM_ANY_WORLD=1", out_var,
                         path_var, NULL };
  gint status[2];

  g_assert_no_error (error);
  mp_run_ranks (2, TIMEOUT_MS, env, status);
  for (guint r = 0; r < 2; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
      g_autofree gchar *message = NULL;

      g_assert_cmpint (status[r], ==, 0);
      g_assert_true (g_file_get_contents (file, &message, NULL, &error));
      g_assert_no_error (error);
      g_test_message ("rank %u: %s", r, message);
      g_assert_nonnull (strstr (message, "zero_optimization.zero_quantized_gradients: qgZ"));
      g_assert_nonnull (strstr (message, "comm 'testcomm' (cpu, plugin test-comm)"));
      g_assert_nonnull (strstr (message, "revision 1, which has no all-to-all"));
      g_remove (file);
    }
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  if (g_getenv ("MIXPREC_TEST_V1_CHILD") != NULL)
    return child_v1 ();
  if (g_getenv ("MIXPREC_TEST_QGZ_CHILD") != NULL)
    {
      const gchar *prec = g_getenv ("MIXPREC_TEST_PREC");

      const gchar *format = g_getenv ("MIXPREC_TEST_QGZ_FORMAT");

      qgz_format = g_strcmp0 (format, "fp8_e4m3") == 0 ? _MIXPREC_ZEROPP_FP8_E4M3
                   : g_strcmp0 (format, "fp8_e5m2") == 0 ? _MIXPREC_ZEROPP_FP8_E5M2 : _MIXPREC_ZEROPP_INT;
      grads_dtype = g_strcmp0 (prec, "fp16") == 0 ? MIXPREC_DTYPE_FLOAT16
                    : g_strcmp0 (prec, "fp32-bf16-comm") == 0 ? MIXPREC_DTYPE_FLOAT32
                    : MIXPREC_DTYPE_BFLOAT16;
      return child_main ();
    }

  g_test_init (&argc, &argv, NULL);
  g_test_add_data_func ("/zeropp/qgz/unquantized-layout/ranks-2", GUINT_TO_POINTER (2), test_engine);
  g_test_add_data_func ("/zeropp/qgz/ranks-2", GUINT_TO_POINTER (0x100 | 2), test_engine);
  g_test_add_data_func ("/zeropp/qgz/ranks-3", GUINT_TO_POINTER (0x100 | 3), test_engine);
  g_test_add_data_func ("/zeropp/loco/ranks-3", GUINT_TO_POINTER (0x200 | 3), test_engine);
  g_test_add_data_func ("/zeropp/loco/accumulation/ranks-2", GUINT_TO_POINTER (0x300 | 2), test_engine);
  g_test_add_data_func ("/zeropp/qgz/unquantized-layout/accumulation/ranks-2", GUINT_TO_POINTER (0x400 | 2), test_engine);
  g_test_add_data_func ("/zeropp/loco/fp16-in-place/ranks-3", GUINT_TO_POINTER (0x500 | 3), test_engine);
  g_test_add_data_func ("/zeropp/qgz/unquantized-layout/bf16-comm-windows/ranks-2", GUINT_TO_POINTER (0x600 | 2), test_engine);
  g_test_add_data_func ("/zeropp/loco/bf16-comm-windows/ranks-2", GUINT_TO_POINTER (0x700 | 2), test_engine);
  g_test_add_data_func ("/zeropp/qgz/fp8-e4m3/ranks-3", GUINT_TO_POINTER (0x10000 | 0x100 | 3), test_engine);
  g_test_add_data_func ("/zeropp/qgz/fp8-e5m2/ranks-2", GUINT_TO_POINTER (0x20000 | 0x100 | 2), test_engine);
  g_test_add_data_func ("/zeropp/loco/fp8-e4m3/ranks-2", GUINT_TO_POINTER (0x10000 | 0x200 | 2), test_engine);
  g_test_add_data_func ("/zeropp/loco/fp8-e5m2/fp16-in-place/ranks-3",
                        GUINT_TO_POINTER (0x20000 | 0x500 | 3), test_engine);
  g_test_add_func ("/zeropp/loco/resume", test_resume);
  g_test_add_func ("/zeropp/qgz/v1-comm-refused", test_v1_refused);
  return g_test_run ();
}
