/* test-engine-step.c — the lean step on one process, bitwise: the AVX2
 * engine kernels against the scalar ones they replace, and whole engine
 * steps at GAS 1 and 4 against the optimizer plugin applied by hand.
 *
 * The expected steps are computed here from the documented formulas
 * (mixprec.json(5); DeepSpeed FusedAdam's AdamW), not
 * from the engine's passes: gradients accumulated in FP32 one micro-step
 * at a time, the global norm of the averaged gradient, the clipping
 * coefficient max((norm + 1e-6) / clip, 1), one factor
 * 1 / (scale * gas * coef), and the adamw feature's step() over each whole
 * parameter. The sum of squares is added in a plain order here; the
 * engine's blocked order gives a norm a few ulps of a double away, which
 * the factor (an FP32 value) does not see. */
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "mixprec-cpu-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-kernels-private.h"
#include "mixprec-registry-private.h"

/* ------------------------------------------------------------ kernels */

static guint32
random_bits (GRand *rand, MixprecDType dtype)
{
  /* Finite values over the whole range, and as many small ones. */
  for (;;)
    {
      guint32 u = g_rand_int (rand);
      gfloat f;

      if (dtype == MIXPREC_DTYPE_FLOAT16)
        {
          u &= 0xffff;
          if ((u & 0x7c00) != 0x7c00)
            return u;
          continue;
        }
      if (g_rand_boolean (rand))
        u = (u & 0x80ffffffu) | (g_rand_int_range (rand, 100, 140) << 23);
      memcpy (&f, &u, 4);
      if (!isfinite (f))
        continue;
      return dtype == MIXPREC_DTYPE_BFLOAT16 ? u >> 16 : u;
    }
}

static void
fill_random (GRand *rand, gpointer data, MixprecDType dtype, gsize n)
{
  gsize size = mixprec_dtype_get_size (dtype);

  for (gsize i = 0; i < n; i++)
    {
      guint32 u = random_bits (rand, dtype);

      memcpy ((guint8 *) data + i * size, &u, size);   /* little-endian */
    }
}

static const MixprecDType kernel_dtypes[] = {
  MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_FLOAT32
};
static const gsize kernel_sizes[] = { 0, 1, 7, 8, 9, 15, 16, 17, 100, 4095, 4096 };

/* The dispatched sum of squares gives the scalar kernel's bits, at every
 * length and alignment, and is non-finite where it is. */
static void
test_kernel_sumsq (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (1);
  guint8 *buf = g_malloc (4 * (4096 + 8));

  for (guint d = 0; d < G_N_ELEMENTS (kernel_dtypes); d++)
    for (guint k = 0; k < G_N_ELEMENTS (kernel_sizes); k++)
      for (guint shift = 0; shift < 3; shift++)
        {
          MixprecDType dtype = kernel_dtypes[d];
          gsize n = kernel_sizes[k], size = mixprec_dtype_get_size (dtype);
          guint8 *src = buf + shift * size;
          gdouble want, got;

          fill_random (rand, src, dtype, n);
          want = _mixprec_kernel_sumsq (src, dtype, n);
          got = _mixprec_kernel_sumsq_best (src, dtype, n);
          g_assert_cmpmem (&got, sizeof got, &want, sizeof want);
          if (n == 0)
            continue;
          /* An infinity anywhere, the last element included. */
          {
            const guint32 inf = dtype == MIXPREC_DTYPE_FLOAT32 ? 0x7f800000u
                                : dtype == MIXPREC_DTYPE_FLOAT16 ? 0x7c00u : 0x7f80u;

            memcpy (src + (n - 1 - g_rand_int_range (rand, 0, (gint32) MIN (n, 9))) * size, &inf, size);
            g_assert_false (isfinite (_mixprec_kernel_sumsq (src, dtype, n)));
            g_assert_false (isfinite (_mixprec_kernel_sumsq_best (src, dtype, n)));
          }
        }
  g_free (buf);
}

/* Runs of whole blocks summed at once give each block's own bits. */
static void
test_kernel_sumsq_blocks (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (3);
  guint8 *buf = g_malloc (4 * (9 * _MIXPREC_SUMSQ_BLOCK + 8));

  for (guint d = 0; d < G_N_ELEMENTS (kernel_dtypes); d++)
    for (gsize n_blocks = 0; n_blocks <= 9; n_blocks++)
      {
        MixprecDType dtype = kernel_dtypes[d];
        gsize size = mixprec_dtype_get_size (dtype);
        guint8 *src = buf + (n_blocks % 3) * size;
        gdouble want[9], got[9];

        fill_random (rand, src, dtype, n_blocks * _MIXPREC_SUMSQ_BLOCK);
        for (gsize k = 0; k < n_blocks; k++)
          want[k] = _mixprec_kernel_sumsq (src + k * _MIXPREC_SUMSQ_BLOCK * size, dtype, _MIXPREC_SUMSQ_BLOCK);
        _mixprec_kernel_sumsq_blocks_best (src, dtype, n_blocks, got);
        g_assert_cmpmem (got, n_blocks * sizeof (gdouble), want, n_blocks * sizeof (gdouble));
      }
  g_free (buf);
}

/* Folding and zeroing in one pass gives _mixprec_kernel_fold()'s bits and
 * leaves the gradient zero. */
static void
test_kernel_fold_zero (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (2);
  gfloat *acc = g_new (gfloat, 4096), *want = g_new (gfloat, 4096);
  guint8 *grad = g_malloc (4 * (4096 + 8)), *copy = g_malloc (4 * 4096), *zeros = g_malloc0 (4 * 4096);

  for (guint d = 0; d < G_N_ELEMENTS (kernel_dtypes); d++)
    for (guint k = 0; k < G_N_ELEMENTS (kernel_sizes); k++)
      for (guint first = 0; first < 2; first++)
        {
          MixprecDType dtype = kernel_dtypes[d];
          gsize n = kernel_sizes[k], size = mixprec_dtype_get_size (dtype);
          guint8 *src = grad + (k % 3) * size;

          fill_random (rand, src, dtype, n);
          fill_random (rand, acc, MIXPREC_DTYPE_FLOAT32, n);
          memcpy (want, acc, n * sizeof (gfloat));
          memcpy (copy, src, n * size);
          _mixprec_kernel_fold (want, MIXPREC_DTYPE_FLOAT32, copy, dtype, n, first);
          _mixprec_kernel_fold_zero_best (acc, MIXPREC_DTYPE_FLOAT32, src, dtype, n, first);
          g_assert_cmpmem (acc, n * sizeof (gfloat), want, n * sizeof (gfloat));
          g_assert_cmpmem (src, n * size, zeros, n * size);
        }
  g_free (acc);
  g_free (want);
  g_free (grad);
  g_free (copy);
  g_free (zeros);
}

/* ------------------------------------------------------------ steps */

/* Shapes across block (4096) and unit (2^20 elements) boundaries, with
 * lengths that leave SIMD tails. */
static const guint64 shapes[][2] = {
  { 1, 3 }, { 3, 1365 }, { 17, 241 }, { 100, 100 }, { 1, 1 }, { 7, 10001 }, { 1050, 1000 }, { 5, 9 },
};
#define N_PARAMS G_N_ELEMENTS (shapes)
#define LR 0.01
#define WEIGHT_DECAY 0.1
#define CLIP 1.0

typedef struct {
  guint64 numel;
  gfloat *master;
  gfloat *m;
  gfloat *v;
  guint16 *working;
  gfloat *acc;               /* the step's gradient, accumulated in FP32 */
  guint16 *ext_working;      /* the caller's memory, for external parameters */
  guint16 *ext_grad;
} Expected;

static gfloat
bf16_value (guint16 bits)
{
  guint32 u = (guint32) bits << 16;
  gfloat f;

  memcpy (&f, &u, 4);
  return f;
}

/* The engine's sum of squares in the order mixprec.json(5) documents for
 * gradient_clipping (so that it does not depend on the world size): parameters
 * packed into units of at most 2^20 elements (a larger one alone), each
 * unit summed in blocks of 4096 elements by the reference kernel, the
 * block sums added in order. For shapes[] the units are parameters 0-5,
 * 6 and 7. */
static gdouble
blocked_sumsq (const Expected *ex)
{
  static const guint unit_ends[] = { 6, 7, 8 };
  gdouble total = 0;
  guint p = 0;

  for (guint k = 0; k < G_N_ELEMENTS (unit_ends); k++)
    {
      g_autoptr(GArray) unit = g_array_new (FALSE, FALSE, sizeof (gfloat));

      for (; p < unit_ends[k]; p++)
        g_array_append_vals (unit, ex[p].acc, ex[p].numel);
      for (guint64 b = 0; b < unit->len; b += _MIXPREC_SUMSQ_BLOCK)
        total += _mixprec_kernel_sumsq (&g_array_index (unit, gfloat, b), MIXPREC_DTYPE_FLOAT32,
                                        MIN (_MIXPREC_SUMSQ_BLOCK, unit->len - b));
    }
  return total;
}

static void
assert_bytes_equal (GBytes *actual, gconstpointer expected, gsize size)
{
  gsize len = 0;
  gconstpointer data = g_bytes_get_data (actual, &len);

  g_assert_cmpmem (data, len, expected, size);
}

/* The parameter the intake runs stop handing over from step 3 on, and
 * write into mixprec_param_get_grad_data() instead. */
#define EXPOSED_LATE 2

/* Whether parameter @p's gradient is handed over in micro-step @micro of
 * step @s of an intake run (when not, it counts as zero): every one in odd
 * steps, so that units of several parameters are complete. */
static gboolean
handed_over (guint p, guint s, guint micro)
{
  return s % 2 == 1 || (p + s + micro) % 3 != 0;
}

/* @steps engine steps of @gas micro-steps each with random bf16
 * gradients written where a backward pass writes them, against the same
 * steps by hand. With @intake, most gradients are handed over with
 * mixprec_param_reduce_grad() instead, and some not at all (they count as
 * zero, whatever an earlier hand-over left in the engine's buffers); from
 * step 3 on parameter EXPOSED_LATE is written in place again, and its
 * buffer must read zero then, as after every step: the engine may keep
 * stale gradients only where the caller cannot see them. */
static void
check_steps (guint gas, guint steps, gboolean external, gboolean intake)
{
  g_autofree gchar *json = g_strdup_printf (
    "{\"bf16\": {\"enabled\": true}, \"gradient_clipping\": %g, \"gradient_accumulation_steps\": %u,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %g, \"weight_decay\": %g}}}",
    CLIP, gas, LR, WEIGHT_DECAY);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (gas);
  MixprecFeature *adamw;
  MixprecParam *params[N_PARAMS];
  Expected ex[N_PARAMS];
  g_autofree gdouble *hparams = NULL;
  guint clipped = 0;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  adamw = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_OPTIMIZER,
                                         "adamw", "cpu", &error);
  g_assert_no_error (error);
  hparams = g_new (gdouble, mixprec_feature_get_n_hparams (adamw));
  for (guint i = 0; i < mixprec_feature_get_n_hparams (adamw); i++)
    hparams[i] = mixprec_feature_get_hparam_default (adamw, i);
  hparams[mixprec_feature_find_hparam (adamw, "lr")] = LR;
  hparams[mixprec_feature_find_hparam (adamw, "weight_decay")] = WEIGHT_DECAY;

  for (guint p = 0; p < N_PARAMS; p++)
    {
      g_autofree gchar *name = g_strdup_printf ("layer%u.weight", p);
      Expected *e = &ex[p];
      g_autoptr(GBytes) init = NULL;

      e->numel = shapes[p][0] * shapes[p][1];
      e->master = g_new (gfloat, e->numel);
      e->m = g_new0 (gfloat, e->numel);
      e->v = g_new0 (gfloat, e->numel);
      e->working = g_new (guint16, e->numel);
      e->acc = g_new (gfloat, e->numel);
      e->ext_working = external ? g_new (guint16, e->numel) : NULL;
      e->ext_grad = external ? g_new0 (guint16, e->numel) : NULL;
      for (guint64 i = 0; i < e->numel; i++)
        {
          gfloat f = (gfloat) g_rand_double_range (rand, -1, 1);
          guint32 u;

          /* External memory starts from its bf16 working copy. */
          memcpy (&u, &f, 4);
          e->master[i] = external ? bf16_value ((guint16) (u >> 16)) : f;
          if (external)
            e->ext_working[i] = (guint16) (u >> 16);
        }
      if (external)
        params[p] = mixprec_engine_register_external (engine, name, shapes[p], 2, "Linear",
                                                      e->ext_working, e->ext_grad, &error);
      else
        {
          init = g_bytes_new (e->master, e->numel * sizeof (gfloat));
          params[p] = mixprec_engine_register_param (engine, name, shapes[p], 2, "Linear",
                                                     MIXPREC_DTYPE_FLOAT32, init, &error);
        }
      g_assert_no_error (error);
    }
  g_assert_true (mixprec_engine_prepare (engine, &error));
  g_assert_no_error (error);

  for (guint s = 1; s <= steps; s++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      gdouble scale = mixprec_engine_get_loss_scale (engine);
      gdouble sumsq = 0, norm, coef, divisor = scale * gas;
      gfloat factor;

      /* Odd steps clip (a norm near 10), even steps do not (near 0.01). */
      gdouble spread = s % 2 ? 1e-1 : 1e-4;

      for (guint micro = 0; micro < gas; micro++)
        {
          for (guint p = 0; p < N_PARAMS; p++)
            {
              gboolean in_place = !intake || (p == EXPOSED_LATE && s >= 3);
              gboolean handed = !in_place && handed_over (p, s, micro);
              g_autofree guint16 *mine = in_place ? NULL : g_new (guint16, MAX (ex[p].numel, 1));
              guint16 *grad = in_place ? mixprec_param_get_grad_data (params[p]) : mine;

              g_assert_cmpint (mixprec_param_get_grad_dtype (params[p]), ==, MIXPREC_DTYPE_BFLOAT16);
              for (guint64 i = 0; i < ex[p].numel; i++)
                {
                  /* Magnitudes over 2^40: sums of their squares round,
                   * so their order shows in the bits. */
                  gfloat f = (gfloat) ldexp (g_rand_double_range (rand, -spread, spread),
                                             -g_rand_int_range (rand, 0, 40));
                  guint32 u;

                  memcpy (&u, &f, 4);
                  /* The engine zeroed what it read: a backward pass may add. */
                  if (in_place)
                    g_assert_cmpuint (grad[i], ==, 0);
                  grad[i] = in_place || handed ? (guint16) (u >> 16) : 0;
                  ex[p].acc[i] = micro == 0 ? bf16_value (grad[i]) : ex[p].acc[i] + bf16_value (grad[i]);
                }
              if (handed)
                {
                  g_assert_true (mixprec_param_reduce_grad (params[p], MIXPREC_DTYPE_BFLOAT16, mine, &error));
                  g_assert_no_error (error);
                }
            }
          g_assert_true (mixprec_engine_backward_done (engine, &error));
          g_assert_no_error (error);
        }
      r = mixprec_engine_step (engine, &error);
      g_assert_no_error (error);
      g_assert_true (r->applied);

      for (guint p = 0; p < N_PARAMS; p++)
        for (guint64 i = 0; i < ex[p].numel; i++)
          sumsq += (gdouble) ex[p].acc[i] * ex[p].acc[i];
      norm = sqrt (sumsq) / divisor;
      coef = MAX ((norm + 1e-6) / CLIP, 1.0);
      factor = (gfloat) (1.0 / (divisor * coef));
      clipped += coef > 1.0;
      g_assert_cmpfloat_with_epsilon (r->grad_norm, norm, 1e-12 * norm);
      g_assert_cmpfloat_with_epsilon (r->clip_coef, coef, 1e-12 * coef);
      /* The norm itself to the bit, in the blocked order. */
      g_assert_cmpfloat (r->grad_norm, ==, sqrt (blocked_sumsq (ex)) / divisor);

      for (guint p = 0; p < N_PARAMS; p++)
        {
          g_autofree gchar *name = g_strdup_printf ("layer%u.weight", p);
          MixprecOptimizerStepV1 args = { 0 };
          gfloat *states[2] = { ex[p].m, ex[p].v };
          g_autoptr(GBytes) master = mixprec_param_get_master (params[p], NULL);
          g_autoptr(GBytes) working = mixprec_param_get_working (params[p], MIXPREC_DTYPE_BFLOAT16, NULL);
          g_autoptr(GBytes) m = mixprec_engine_get_optimizer_state (engine, name, "exp_avg", NULL);
          g_autoptr(GBytes) v = mixprec_engine_get_optimizer_state (engine, name, "exp_avg_sq", NULL);
          /* Intake runs look at the gradient buffers at the end only:
           * asking for one hands it to the caller for good. */
          const guint16 *grad = !intake || s == steps ? mixprec_param_get_grad_data (params[p]) : NULL;

          args.step = s;
          args.lr = LR;
          args.grad_factor = factor;
          args.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
          args.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
          args.rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
          g_assert_true (_mixprec_feature_optimizer_step (adamw, &args, hparams, ex[p].master, ex[p].acc,
                                                          states, ex[p].working, ex[p].numel, &error));
          g_assert_no_error (error);
          assert_bytes_equal (master, ex[p].master, ex[p].numel * sizeof (gfloat));
          assert_bytes_equal (working, ex[p].working, ex[p].numel * sizeof (guint16));
          assert_bytes_equal (m, ex[p].m, ex[p].numel * sizeof (gfloat));
          assert_bytes_equal (v, ex[p].v, ex[p].numel * sizeof (gfloat));
          for (guint64 i = 0; grad != NULL && i < ex[p].numel; i++)
            g_assert_cmpuint (grad[i], ==, 0);
        }
    }
  /* Both sides of the clipping formula were exercised. */
  g_assert_cmpuint (clipped, >, 0);
  g_assert_cmpuint (clipped, <, steps);
  for (guint p = 0; p < N_PARAMS; p++)
    {
      g_free (ex[p].master);
      g_free (ex[p].m);
      g_free (ex[p].v);
      g_free (ex[p].working);
      g_free (ex[p].acc);
      g_free (ex[p].ext_working);
      g_free (ex[p].ext_grad);
    }
}

/* GAS 1: the optimizer reads the bf16 gradients in place (their FP32
 * accumulation would be an exact conversion) and zeroes them as it goes. */
static void
test_step_gas1 (void)
{
  check_steps (1, 6, FALSE, FALSE);
}

/* GAS 1 through the intake: each block's sum of squares is taken as its
 * gradients are copied in, the step zeroes nothing, and the results are
 * those by hand, bit for bit. */
static void
test_step_gas1_intake (void)
{
  check_steps (1, 6, FALSE, TRUE);
}

static void
test_step_gas4_intake (void)
{
  check_steps (4, 4, FALSE, TRUE);
}

static void
test_step_gas1_external_intake (void)
{
  check_steps (1, 4, TRUE, TRUE);
}

/* GAS 4: the last micro-step's fold also sums the blocks the step's norm
 * is made of. */
static void
test_step_gas4 (void)
{
  check_steps (4, 4, FALSE, FALSE);
}

/* The same with the caller's memory: one segment per parameter, blocks
 * that span several of them. */
static void
test_step_gas1_external (void)
{
  check_steps (1, 4, TRUE, FALSE);
}

static void
test_step_gas4_external (void)
{
  check_steps (4, 4, TRUE, FALSE);
}

/* The intake against the whole-gradient path on a second engine, through
 * an overflow: a non-finite gradient handed over makes the step skip
 * (the sum of squares taken at intake is non-finite too), and when that
 * parameter is not handed over in the next step it counts as zero, not
 * as what the engine kept of it. Masters and results agree bit for bit
 * after every step. */
static void
test_step_intake_overflow (void)
{
  static const guint64 sizes[] = { 5000, 3, 9000, 4096 };
  const gchar *json = "{\"bf16\": {\"enabled\": true}, \"gradient_clipping\": 0.5,"
                      " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01}}}";
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) a = NULL;
  g_autoptr(MixprecEngine) b = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  MixprecParam *pa[G_N_ELEMENTS (sizes)], *pb[G_N_ELEMENTS (sizes)];
  guint skipped = 0;

  g_assert_no_error (error);
  a = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  b = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint p = 0; p < G_N_ELEMENTS (sizes); p++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", p);
      g_autofree gfloat *w = g_new (gfloat, sizes[p]);
      g_autoptr(GBytes) init = NULL;

      for (guint64 i = 0; i < sizes[p]; i++)
        w[i] = (gfloat) g_rand_double_range (rand, -1, 1);
      init = g_bytes_new (w, sizes[p] * sizeof (gfloat));
      pa[p] = mixprec_engine_register_param (a, name, &sizes[p], 1, "Linear", MIXPREC_DTYPE_FLOAT32, init, &error);
      g_assert_no_error (error);
      pb[p] = mixprec_engine_register_param (b, name, &sizes[p], 1, "Linear", MIXPREC_DTYPE_FLOAT32, init, &error);
      g_assert_no_error (error);
    }

  for (guint s = 0; s < 6; s++)
    {
      g_autoptr(MixprecStepResult) ra = NULL;
      g_autoptr(MixprecStepResult) rb = NULL;

      for (guint p = 0; p < G_N_ELEMENTS (sizes); p++)
        {
          g_autofree guint16 *g = g_new (guint16, sizes[p]);
          guint16 *in_place = mixprec_param_get_grad_data (pb[p]);
          /* Step 2: an infinity in p0; step 3: p0 not handed over; p1
           * every other step. */
          gboolean hand = !(s == 3 && p == 0) && !(p == 1 && s % 2);

          for (guint64 i = 0; i < sizes[p]; i++)
            {
              gfloat f = (gfloat) g_rand_double_range (rand, -0.3, 0.3) * (gfloat) mixprec_engine_get_loss_scale (a);
              guint32 u;

              if (s == 2 && p == 0 && i == 4095)
                f = INFINITY;
              memcpy (&u, &f, 4);
              g[i] = (guint16) (u >> 16);
            }
          if (!hand)
            continue;
          g_assert_true (mixprec_param_reduce_grad (pa[p], MIXPREC_DTYPE_BFLOAT16, g, &error));
          g_assert_no_error (error);
          memcpy (in_place, g, sizes[p] * sizeof (guint16));
        }
      g_assert_true (mixprec_engine_backward_done (a, &error));
      g_assert_true (mixprec_engine_backward_done (b, &error));
      g_assert_no_error (error);
      ra = mixprec_engine_step (a, &error);
      g_assert_no_error (error);
      rb = mixprec_engine_step (b, &error);
      g_assert_no_error (error);
      g_assert_cmpint (ra->applied, ==, rb->applied);
      g_assert_cmpint (ra->applied, ==, s != 2);
      skipped += !ra->applied;
      g_assert_cmpfloat (ra->loss_scale, ==, rb->loss_scale);
      if (ra->applied)
        {
          g_assert_cmpfloat (ra->grad_norm, ==, rb->grad_norm);
          g_assert_cmpfloat (ra->clip_coef, ==, rb->clip_coef);
        }
      for (guint p = 0; p < G_N_ELEMENTS (sizes); p++)
        {
          g_autoptr(GBytes) ma = mixprec_param_get_master (pa[p], NULL);
          g_autoptr(GBytes) mb = mixprec_param_get_master (pb[p], NULL);

          g_assert_true (g_bytes_equal (ma, mb));
        }
    }
  g_assert_cmpuint (skipped, ==, 1);
  /* Every buffer the caller is given reads zero after a step. */
  for (guint p = 0; p < G_N_ELEMENTS (sizes); p++)
    {
      const guint16 *grad = mixprec_param_get_grad_data (pa[p]);

      for (guint64 i = 0; i < sizes[p]; i++)
        g_assert_cmpuint (grad[i], ==, 0);
    }
}

/* ------------------------------------------------------------ representations */

/* The engine against the optimizer called once per unit (the units of
 * shapes[]: parameters 0-5, 6, 7) on contiguous copies: blocks start at
 * each unit's first element, so however the engine cuts its calls (pool
 * chunks, tiles, parameters in memory of their own, whose blocks may span
 * two parameters), it must write the same bits: working copies, every
 * slot's codes and scales, and every remainder or compensation. */
static const guint unit_first[] = { 0, 6, 7, 8 };

static guint16
to_bf16 (gfloat f)
{
  guint16 out;

  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, &f, MIXPREC_DTYPE_BFLOAT16, &out, 1,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  return out;
}

static void
check_representation (const gchar *master, const gchar *format, guint block, gboolean external)
{
  g_autofree gchar *json = g_strdup_printf (
    "{\"bf16\": {\"enabled\": true}, \"gradient_clipping\": %g,"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": %g, \"weight_decay\": %g}},"
    " \"mixprec\": {\"master_weights\": \"%s\", \"weight_decay_exempt\": \"none\","
    "  \"optimizer_states\": {\"exp_avg\": \"%s\", \"exp_avg_sq\": \"%s\", \"block_size\": %u}}}",
    CLIP, LR, WEIGHT_DECAY, master, format, format, block);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (block);
  MixprecFeature *adamw;
  MixprecParam *params[N_PARAMS];
  guint16 *ext_working[N_PARAMS], *ext_grad[N_PARAMS];
  g_autofree gdouble *hparams = NULL;
  const _MixprecRepresentation *repr;
  Group *g;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  adamw = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_OPTIMIZER,
                                         "adamw", "cpu", &error);
  g_assert_no_error (error);
  hparams = g_new (gdouble, mixprec_feature_get_n_hparams (adamw));
  for (guint i = 0; i < mixprec_feature_get_n_hparams (adamw); i++)
    hparams[i] = mixprec_feature_get_hparam_default (adamw, i);
  hparams[mixprec_feature_find_hparam (adamw, "lr")] = LR;
  hparams[mixprec_feature_find_hparam (adamw, "weight_decay")] = WEIGHT_DECAY;

  for (guint p = 0; p < N_PARAMS; p++)
    {
      g_autofree gchar *name = g_strdup_printf ("layer%u.weight", p);
      guint64 numel = shapes[p][0] * shapes[p][1];

      ext_working[p] = g_new (guint16, numel);
      ext_grad[p] = g_new0 (guint16, numel);
      for (guint64 i = 0; i < numel; i++)
        ext_working[p][i] = to_bf16 ((gfloat) g_rand_double_range (rand, -1, 1));
      if (external)
        params[p] = mixprec_engine_register_external (engine, name, shapes[p], 2, "Linear",
                                                      ext_working[p], ext_grad[p], &error);
      else
        {
          g_autoptr(GBytes) init = g_bytes_new (ext_working[p], numel * sizeof (guint16));

          params[p] = mixprec_engine_register_param (engine, name, shapes[p], 2, "Linear",
                                                     MIXPREC_DTYPE_BFLOAT16, init, &error);
        }
      g_assert_no_error (error);
    }
  g_assert_true (mixprec_engine_prepare (engine, &error));
  g_assert_no_error (error);
  repr = &engine->repr;
  g_assert_cmpuint (repr->block_size, ==, block);
  g_assert_cmpuint (engine->groups->len, ==, 1);
  g = g_ptr_array_index (engine->groups, 0);
  g_assert_cmpuint (g->units->len, ==, G_N_ELEMENTS (unit_first) - 1);

  {
    /* The reference: per unit, the working copies, gradients, state
     * codes, scales and extras, contiguous. */
    guint64 total = 0;
    g_autofree guint16 *work = NULL, *extra = NULL;
    g_autofree gfloat *grad = NULL;
    guint8 *codes[2];
    gfloat *scales[2];
    guint64 blocks = 0;

    /* Each unit padded to an even count with a zero element, which an
     * INT4 call needs (the engine adds the same). */
    guint64 param_at[N_PARAMS];

    for (guint k = 0; k + 1 < G_N_ELEMENTS (unit_first); k++)
      {
        guint64 n = 0;

        for (guint p = unit_first[k]; p < unit_first[k + 1]; p++)
          {
            param_at[p] = total + n;
            n += shapes[p][0] * shapes[p][1];
          }
        blocks += (n + block - 1) / block;
        total += n + n % 2;
      }
    work = g_new0 (guint16, total);
    extra = g_new0 (guint16, total);
    grad = g_new0 (gfloat, total);
    for (guint j = 0; j < 2; j++)
      {
        codes[j] = g_malloc0 (blocks * block * 4);
        scales[j] = g_new0 (gfloat, blocks);
      }
    for (guint p = 0; p < N_PARAMS; p++)
      memcpy (work + param_at[p], ext_working[p], shapes[p][0] * shapes[p][1] * sizeof (guint16));

    for (guint step = 1; step <= 3; step++)
      {
        g_autoptr(MixprecStepResult) r = NULL;
        guint64 at = 0, block_at = 0;

        for (guint p = 0; p < N_PARAMS; p++)
          {
            guint16 *gd = mixprec_param_get_grad_data (params[p]);

            for (guint64 i = 0; i < shapes[p][0] * shapes[p][1]; i++)
              {
                gd[i] = to_bf16 ((gfloat) g_rand_double_range (rand, -0.05, 0.05));
                grad[param_at[p] + i] = bf16_value (gd[i]);
              }
          }
        g_assert_true (mixprec_engine_backward_done (engine, &error));
        r = mixprec_engine_step (engine, &error);
        g_assert_no_error (error);
        g_assert_true (r->applied);

        at = 0;
        for (guint k = 0; k + 1 < G_N_ELEMENTS (unit_first); k++)
          {
            MixprecOptimizerStepV3 args = { 0 };
            guint64 n = 0;
            gpointer states[2];
            gfloat *sc[2];

            for (guint p = unit_first[k]; p < unit_first[k + 1]; p++)
              n += shapes[p][0] * shapes[p][1];
            for (guint j = 0; j < 2; j++)
              {
                states[j] = codes[j] + _mixprec_engine_format_bytes (repr->slots[j], block_at * block);
                sc[j] = scales[j] + block_at;
              }
            args.v2.base.step = step;
            args.v2.base.lr = LR;
            args.v2.base.grad_factor = (gfloat) (1.0 / (r->loss_scale * r->clip_coef));
            args.v2.base.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
            args.v2.base.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
            args.v2.base.rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
            args.v2.base.first_index = at;
            args.v2.state_rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
            args.state_formats = repr->slots;
            args.state_scales = sc;
            args.block_size = block;
            args.master_format = _mixprec_engine_master_format (repr, &g->dtypes);
            args.master_extra = args.master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? extra + at : NULL;
            g_assert_true (_mixprec_feature_optimizer_step_v3 (adamw, &args, hparams, NULL, grad + at,
                                                               states, work + at, n + n % 2, &error));
            g_assert_no_error (error);
            at += n + n % 2;
            block_at += (n + block - 1) / block;
          }

        /* The engine's bits, element by element. */
        for (guint p = 0; p < N_PARAMS; p++)
          {
            g_autoptr(GBytes) w = mixprec_param_get_working (params[p], MIXPREC_DTYPE_BFLOAT16, &error);

            g_assert_no_error (error);
            assert_bytes_equal (w, work + param_at[p], shapes[p][0] * shapes[p][1] * sizeof (guint16));
          }
        block_at = 0;
        for (guint k = 0; k < g->units->len; k++)
          {
            const Unit *u = &g_array_index (g->units, Unit, k);

            for (guint64 e = 0; e < u->numel; e++)
              {
                gfloat *m;
                gpointer wp;
                guint64 state_at;

                for (guint j = 0; j < 2; j++)
                  {
                    guint64 idx = _mixprec_engine_state_index (engine, g, u, e, j);
                    guint64 ref = (block_at + e / block) * block + e % block;
                    const guint8 *mine = g->states[j];

                    if (repr->slots[j] == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC)
                      g_assert_cmpuint ((mine[idx / 2] >> (4 * (idx & 1))) & 0xf, ==,
                                        (codes[j][ref / 2] >> (4 * (ref & 1))) & 0xf);
                    else
                      {
                        gsize size = _mixprec_engine_format_bytes (repr->slots[j], 1);

                        g_assert_cmpmem (mine + idx * size, size, codes[j] + ref * size, size);
                      }
                    if (e % block == 0)
                      g_assert_cmpmem (&g->state_scales[j][_mixprec_engine_scale_at (engine, g, u, e)], 4,
                                       &scales[j][block_at + e / block], 4);
                  }
                _mixprec_engine_values_at (engine, g, u, e, &m, &state_at, &wp);
                if (g->master_extra != NULL)
                  g_assert_cmpuint (((guint16 *) g->master_extra)[state_at], ==,
                                    extra[param_at[unit_first[k]] + e]);
              }
            block_at += (u->numel + block - 1) / block;
          }
      }
    for (guint j = 0; j < 2; j++)
      {
        g_free (codes[j]);
        g_free (scales[j]);
      }
  }
  for (guint p = 0; p < N_PARAMS; p++)
    {
      g_free (ext_working[p]);
      g_free (ext_grad[p]);
    }
}

static void
test_repr (gconstpointer data)
{
  g_auto(GStrv) f = g_strsplit (data, "/", -1);

  check_representation (f[0], f[1], atoi (f[2]), g_str_equal (f[3], "external"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/engine-step/kernels/sumsq", test_kernel_sumsq);
  g_test_add_func ("/engine-step/kernels/sumsq-blocks", test_kernel_sumsq_blocks);
  g_test_add_func ("/engine-step/kernels/fold-zero", test_kernel_fold_zero);
  g_test_add_func ("/engine-step/gas1/by-hand", test_step_gas1);
  g_test_add_func ("/engine-step/gas4/by-hand", test_step_gas4);
  g_test_add_func ("/engine-step/gas1/external", test_step_gas1_external);
  g_test_add_func ("/engine-step/gas4/external", test_step_gas4_external);
  g_test_add_func ("/engine-step/gas1/intake", test_step_gas1_intake);
  g_test_add_func ("/engine-step/gas4/intake", test_step_gas4_intake);
  g_test_add_func ("/engine-step/gas1/external-intake", test_step_gas1_external_intake);
  g_test_add_func ("/engine-step/gas1/intake-overflow", test_step_intake_overflow);
  {
    static const gchar *const reprs[] = {
      "remainder/int8/256/engine", "remainder/int8/256/external",
      "kahan/int4/128/engine", "kahan/int4/32/external",
      "remainder/fp8_e4m3_scaled/4096/external", "none/fp16_scaled/64/external",
      "remainder/bf16_scaled/1024/engine", "remainder/int8/32/external",
    };

    for (guint i = 0; i < G_N_ELEMENTS (reprs); i++)
      {
        g_autofree gchar *path = g_strdup_printf ("/engine-step/representation/%s", reprs[i]);

        g_test_add_data_func (path, reprs[i], test_repr);
      }
  }
  return g_test_run ();
}
