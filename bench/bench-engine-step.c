/* bench-engine-step.c — what a whole engine step costs beside the bare
 * optimizer kernel it is built around, measured in the same run.
 *
 * The engine: 100M parameters in 1000 tensors of varied sizes, bf16
 * working copies with FP32 masters, AdamW, gradient_clipping 1.0, one
 * process, --threads threads (default 2), fed along both gradient paths:
 *
 *   whole    each micro-step the gradients are written into
 *            mixprec_param_get_grad_data() the way a backward pass does
 *            (untimed);
 *   intake   each parameter's gradient is written into a buffer of the
 *            caller's (untimed, so it is in the cache as a backward pass
 *            leaves it) and handed over at once with
 *            mixprec_param_reduce_grad() (timed on its own: the
 *            hand-over).
 *
 * What is timed as the step is what a trainer then calls:
 * mixprec_engine_backward_done() once per micro-step and
 * mixprec_engine_step(). The bare kernel: the engine's own optim-adamw
 * feature, step() over one contiguous range of as many elements, cut in
 * one part per thread on the library's thread pool (as bench-adamw does
 * with its own pool), bf16 gradient in, bf16 working copy out.
 * On a machine busy with other work the engine's small work items
 * balance across descheduled threads better than the bare kernel's one
 * part per thread, and ratios above 1 show up; quiet-machine figures are
 * the ones to compare.
 *
 * Bytes per parameter per optimizer step that cross the memory bus, from
 * what each pass reads and writes (g bf16 gradient, a FP32 accumulator,
 * w bf16 working copy, master, exp_avg, exp_avg_sq FP32; zeroing g counts
 * its 2 bytes written, the line being in the cache already):
 *
 *   bare kernel       g 2 + master/m/v 12 read + 12 written + w 2   = 28
 *   whole, GAS 1      norm pass: g 2; optimizer pass: 28 reading g in
 *                     place, zeroing each tile of g once read: 2     = 32
 *   intake, GAS 1     each tile's sums of squares taken as the
 *                     hand-over copies it in: 0; optimizer pass: 28;
 *                     no zeroing (nobody else sees g, and the next
 *                     hand-over overwrites it)                       = 28
 *   GAS N > 1         first fold: g 2 -> a 4, g zeroed 2             =  8
 *   (both paths)      each later fold: g 2 + a 4 -> a 4, g zeroed 2  = 12
 *                     the last fold also sums the squares of a while
 *                     it is in the cache: 0; optimizer reading a: 30
 *                     GAS 4: 8 + 3 * 12 + 30                         = 74
 *   hand-over         per micro-step: the caller's gradient read from
 *                     the cache: 0; g written: 2, and read for
 *                     ownership: 2                                   =  4
 *
 * Before the engine passes this bench measures, GAS 1 had 32 bytes in
 * three passes (the zeroing a pass of its own, paying a read for
 * ownership too) on either path, and GAS 4 had 78: a norm pass of its own
 * reading a.
 *
 * The figures assume the layout of mixprec-engine-layout.c (ACCUM_NONE at
 * GAS 1, ACCUM_FLAT in FP32 above) and the pass structure of
 * mixprec-engine-reduce.c and mixprec-engine-step.c.
 *
 * With --numerics-rounds N, a second table puts the step with
 * mixprec.numerics off, every step and every 100 steps side by side
 * (see telemetry_row()): what per-tensor numerics cost, with the
 * machine's load average before and after it.
 *
 *   bench-engine-step [--threads N] [--steps N] [--gas N,N]
 *                     [--params M] [--tensors N] [--numerics-rounds N]
 *
 * Defaults: 2 threads, 5 timed steps after one warm-up, GAS 1,4, 100M
 * parameters (--params in millions), 1000 tensors. Plugins come from
 * MIXPREC_PLUGIN_PATH (bench/run-bench-engine-step.sh sets it). */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

#define BARE_BYTES 28

/* ------------------------------------------------------------ helpers */

static int
compare_doubles (const void *a, const void *b)
{
  double x = *(const double *) a, y = *(const double *) b;

  return (x > y) - (x < y);
}

/* Bits of a bf16 gradient of a loss scaled by 1, small enough that the
 * step clips rarely and never overflows. */
static guint16
grad_bits (guint64 i)
{
  gfloat g = (gfloat) ((gint) (i % 2001) - 1000) * 1e-7f;
  guint32 u;

  memcpy (&u, &g, 4);
  return (guint16) (u >> 16);
}

typedef struct {
  guint16 *data;
  guint64 first;
} GradFill;

static void
fill_range (gsize begin, gsize end, gpointer data)
{
  GradFill *f = data;

  for (gsize i = begin; i < end; i++)
    f->data[i] = grad_bits (f->first + i);
}

/* Writes every parameter's gradient, as the backward pass would. */
static void
write_grads (GPtrArray *params)
{
  guint64 first = 0;

  for (guint i = 0; i < params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (params, i);
      GradFill f = { mixprec_param_get_grad_data (p), first };

      g_assert (f.data != NULL);
      _mixprec_parallel_for (mixprec_param_get_numel (p), 1 << 16, 64, fill_range, &f);
      first += mixprec_param_get_numel (p);
    }
}

/* ------------------------------------------------------------ engine */

/* Tensor sizes of varied shapes (1 to 97 parts, scattered), summing to
 * @total exactly. */
static guint64 *
tensor_sizes (guint64 total, guint n)
{
  guint64 *sizes = g_new (guint64, n);
  guint64 weights = 0, left = total;

  for (guint i = 0; i < n; i++)
    weights += 1 + (i * 7919u) % 97;
  for (guint i = 0; i + 1 < n; i++)
    {
      sizes[i] = total * (1 + (i * 7919u) % 97) / weights;
      left -= sizes[i];
    }
  sizes[n - 1] = left;
  return sizes;
}

static MixprecEngine *
make_engine (guint gas, const guint64 *sizes, guint n, GPtrArray *params, guint numerics)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = g_strdup_printf (
    "{\"bf16\": {\"enabled\": true}, \"gradient_clipping\": 1.0,"
    " \"gradient_accumulation_steps\": %u, \"steps_per_print\": null,"
    " \"mixprec\": {\"numerics\": {\"every\": %u}},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"weight_decay\": 0.01}}}",
    gas, numerics);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;
  guint64 largest = 0;
  g_autofree gfloat *values = NULL;
  g_autoptr(GBytes) all = NULL;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < n; i++)
    largest = MAX (largest, sizes[i]);
  values = g_new (gfloat, largest);
  for (guint64 i = 0; i < largest; i++)
    values[i] = (gfloat) (i % 1000) * 1e-4f - 0.05f;
  all = g_bytes_new_take (g_steal_pointer (&values), largest * sizeof (gfloat));
  for (guint i = 0; i < n; i++)
    {
      g_autofree gchar *name = g_strdup_printf ("layer%u.weight", i);
      g_autoptr(GBytes) init = g_bytes_new_from_bytes (all, 0, sizes[i] * sizeof (gfloat));
      MixprecParam *p = mixprec_engine_register_param (engine, name, &sizes[i], 1, "Linear",
                                                       MIXPREC_DTYPE_FLOAT32, init, &error);

      g_assert_no_error (error);
      g_ptr_array_add (params, p);
    }
  g_assert_true (mixprec_engine_prepare (engine, &error));
  return engine;
}

/* ------------------------------------------------------------ bare kernel */

typedef struct {
  MixprecFeature *adamw;
  MixprecOptimizerStepV1 args;
  gsize n;
  gfloat *master;
  gfloat *m;
  gfloat *v;
  guint16 *grad;
  guint16 *working;
} Bare;

static void
bare_range (gsize begin, gsize end, gpointer data)
{
  Bare *b = data;
  MixprecOptimizerStepV1 args = b->args;
  gfloat *states[2] = { b->m + begin, b->v + begin };
  g_autoptr(GError) error = NULL;

  args.first_index = begin;
  if (!_mixprec_feature_optimizer_step (b->adamw, &args, NULL, b->master + begin, b->grad + begin,
                                        states, b->working + begin, end - begin, &error))
    g_error ("%s", error->message);
}

static void
bare_init (gsize begin, gsize end, gpointer data)
{
  Bare *b = data;

  for (gsize i = begin; i < end; i++)
    {
      b->grad[i] = grad_bits (i);
      b->master[i] = (gfloat) (i % 1000) * 1e-4f - 0.05f;
      b->m[i] = b->v[i] = 0;
      b->working[i] = 0;
    }
}

static void
bare_setup (Bare *b, MixprecFeature *adamw, gsize n)
{
  b->adamw = adamw;
  b->n = n;
  b->args.step = 1;
  b->args.lr = 1e-3;
  b->args.grad_factor = 1.0f;
  b->args.grad_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  b->args.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  b->args.rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
  b->master = g_new (gfloat, n);
  b->m = g_new (gfloat, n);
  b->v = g_new (gfloat, n);
  b->grad = g_new (guint16, n);
  b->working = g_new (guint16, n);
  _mixprec_parallel_for (n, (n + _mixprec_parallel_num_threads () - 1) / _mixprec_parallel_num_threads (), 64, bare_init, b);
}

static void
bare_clear (Bare *b)
{
  g_free (b->master);
  g_free (b->m);
  g_free (b->v);
  g_free (b->grad);
  g_free (b->working);
}

/* Seconds of one bare step: one contiguous part per thread, like
 * bench-adamw. */
static double
bare_step (Bare *b)
{
  gsize part = (b->n + _mixprec_parallel_num_threads () - 1) / _mixprec_parallel_num_threads ();
  gint64 t0 = g_get_monotonic_time ();

  _mixprec_parallel_for (b->n, part, 64, bare_range, b);
  b->args.step++;
  return (g_get_monotonic_time () - t0) * 1e-6;
}

/* Seconds of one engine step, the gradient writes left out. */
static double
engine_step (MixprecEngine *engine, GPtrArray *params, guint gas)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;
  double t = 0;
  gint64 t0;

  for (guint m = 0; m < gas; m++)
    {
      write_grads (params);
      t0 = g_get_monotonic_time ();
      g_assert_true (mixprec_engine_backward_done (engine, &error));
      t += (g_get_monotonic_time () - t0) * 1e-6;
    }
  t0 = g_get_monotonic_time ();
  r = mixprec_engine_step (engine, &error);
  t += (g_get_monotonic_time () - t0) * 1e-6;
  g_assert_no_error (error);
  g_assert_true (r->applied);
  return t;
}

/* Seconds of one engine step fed through the intake, the hand-overs
 * (mixprec_param_reduce_grad() calls) apart in @handover. */
static double
engine_step_intake (MixprecEngine *engine, GPtrArray *params, guint gas, guint16 *scratch,
                    double *handover)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecStepResult) r = NULL;
  double t = 0;
  gint64 t0;

  *handover = 0;
  for (guint m = 0; m < gas; m++)
    {
      guint64 first = 0;

      /* In the order of a backward pass: the last layer first. */
      for (guint i = params->len; i-- > 0;)
        first += mixprec_param_get_numel (g_ptr_array_index (params, i));
      for (guint i = params->len; i-- > 0;)
        {
          MixprecParam *p = g_ptr_array_index (params, i);
          GradFill f = { scratch, 0 };

          first -= mixprec_param_get_numel (p);
          f.first = first;
          _mixprec_parallel_for (mixprec_param_get_numel (p), 1 << 16, 64, fill_range, &f);
          t0 = g_get_monotonic_time ();
          if (!mixprec_param_reduce_grad (p, MIXPREC_DTYPE_BFLOAT16, scratch, &error))
            g_error ("%s", error->message);
          *handover += (g_get_monotonic_time () - t0) * 1e-6;
        }
      t0 = g_get_monotonic_time ();
      g_assert_true (mixprec_engine_backward_done (engine, &error));
      t += (g_get_monotonic_time () - t0) * 1e-6;
    }
  t0 = g_get_monotonic_time ();
  r = mixprec_engine_step (engine, &error);
  t += (g_get_monotonic_time () - t0) * 1e-6;
  g_assert_no_error (error);
  g_assert_true (r->applied);
  return t;
}

static void
best_median (double *seconds, guint n, double *best, double *median)
{
  qsort (seconds, n, sizeof *seconds, compare_doubles);
  *best = seconds[0];
  *median = n % 2 ? seconds[n / 2] : (seconds[n / 2 - 1] + seconds[n / 2]) / 2;
}

/* ------------------------------------------------------------ telemetry */

/* mixprec.numerics off, every step and every 100 steps, side by side:
 * three engines of the same model step in turn, @rounds rounds (each
 * engine one step per round, the order rotating), after a warm-up step
 * each, so that a busy machine slows all three alike; the warm-up is step
 * 1, so with every 100 round 98 is the one measured step of the first
 * 100 rounds. Prints the median parameters per second of off and every
 * step and what every step costs on the median step; for every 100, the
 * mean over the window (the amortized cost, the measured step being the
 * outlier it is made of, but as noisy as the machine) and the measured
 * step's own extra time over the median step, spread over 100 steps. */
static void
telemetry_row (const guint64 *sizes, guint n_tensors, guint64 total, guint gas, gboolean intake,
               guint rounds)
{
  static const guint every[3] = { 0, 1, 100 };
  MixprecEngine *engines[3];
  GPtrArray *params[3];
  g_autofree double *t[3] = { g_new (double, rounds), g_new (double, rounds), g_new (double, rounds) };
  g_autofree double *sorted = g_new (double, rounds);
  double sum[3] = { 0, 0, 0 }, median[3], dummy, measured = 0;
  g_autofree guint16 *scratch = NULL;
  g_autofree gchar *label = NULL;
  guint n_other = 0;

  if (intake)
    {
      guint64 largest = 0;

      for (guint i = 0; i < n_tensors; i++)
        largest = MAX (largest, sizes[i]);
      scratch = g_new (guint16, largest);
    }
  for (guint k = 0; k < 3; k++)
    {
      params[k] = g_ptr_array_new ();
      engines[k] = make_engine (gas, sizes, n_tensors, params[k], every[k]);
      if (intake)
        engine_step_intake (engines[k], params[k], gas, scratch, &dummy);
      else
        engine_step (engines[k], params[k], gas);
    }
  for (guint r = 0; r < rounds; r++)
    for (guint j = 0; j < 3; j++)
      {
        guint k = (r + j) % 3;

        t[k][r] = intake ? engine_step_intake (engines[k], params[k], gas, scratch, &dummy)
                         : engine_step (engines[k], params[k], gas);
        sum[k] += t[k][r];
      }
  for (guint k = 0; k < 3; k++)
    {
      double best;

      n_other = 0;
      for (guint r = 0; r < rounds; r++)
        if (k < 2 || (r + 2) % 100 != 0)
          sorted[n_other++] = t[k][r];
        else
          measured = t[k][r];
      best_median (sorted, n_other, &best, &median[k]);
    }
  label = g_strdup_printf ("GAS %u %s", gas, intake ? "intake" : "whole");
  g_print ("%-15s %12.4g %12.4g %12.4g %+9.2f%% %+9.2f%% %+9.2f%%\n", label, total / median[0],
           total / median[1], total * rounds / sum[2], (median[1] / median[0] - 1) * 100,
           (sum[2] / sum[0] - 1) * 100,
           rounds >= 99 ? (measured - median[2]) / median[2] : NAN);
  for (guint k = 0; k < 3; k++)
    {
      g_object_unref (engines[k]);
      g_ptr_array_unref (params[k]);
    }
}

/* ------------------------------------------------------------ main */

/* The machine's load as /proc/loadavg gives it (1, 5 and 15 minutes),
 * printed beside the telemetry table: its columns mean little on a
 * machine whose other work comes and goes. */
static void
print_load (const gchar *when)
{
  g_autofree gchar *text = NULL;
  g_auto(GStrv) fields = NULL;

  if (!g_file_get_contents ("/proc/loadavg", &text, NULL, NULL))
    return;
  fields = g_strsplit (text, " ", 4);
  if (g_strv_length (fields) >= 3)
    g_print ("load average %s: %s %s %s\n", when, fields[0], fields[1], fields[2]);
}


/* Bytes per parameter per step of the engine's passes, and of the
 * hand-overs of the intake path (see the top of this file). */
static guint
engine_bytes (guint gas, gboolean intake)
{
  if (gas == 1)
    return intake ? 28 : 32;
  return 8 + (gas - 1) * 12 + 30;
}

#define HANDOVER_BYTES 4

int
main (int argc, char **argv)
{
  gint threads = 2, steps = 5, n_tensors = 1000, numerics_rounds = 0;
  gdouble millions = 100;
  g_autofree gchar *gas_arg = NULL;
  GOptionEntry entries[] = {
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "threads (default 2)", "N" },
    { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "timed steps (default 5)", "N" },
    { "gas", 0, 0, G_OPTION_ARG_STRING, &gas_arg, "gradient_accumulation_steps (default 1,4)", "N,N" },
    { "params", 0, 0, G_OPTION_ARG_DOUBLE, &millions, "millions of parameters (default 100)", "M" },
    { "tensors", 0, 0, G_OPTION_ARG_INT, &n_tensors, "tensors (default 1000)", "N" },
    { "numerics-rounds", 0, 0, G_OPTION_ARG_INT, &numerics_rounds,
      "rounds of the mixprec.numerics table (off, every 1, every 100; default 0: no table)", "N" },
    { NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("- engine step against the bare optimizer kernel");
  g_autoptr(GError) error = NULL;
  g_autofree gchar *threads_env = NULL;
  g_auto(GStrv) gases = NULL;
  g_autofree guint64 *sizes = NULL;
  g_autofree double *seconds = NULL;
  g_autofree double *bare_seconds = NULL;
  g_autofree double *handover = NULL;
  g_autofree double *with_handover = NULL;
  Bare bare = { NULL };
  MixprecFeature *adamw;
  guint64 total;
  double bare_best, bare_median;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  if (threads < 1 || steps < 1 || n_tensors < 1 || millions <= 0 || numerics_rounds < 0)
    {
      g_printerr ("--threads, --steps, --tensors and --params must be positive\n");
      return 2;
    }
  /* Before the pool starts: the engine and the bare kernel share it. */
  threads_env = g_strdup_printf ("%d", threads);
  g_setenv ("MIXPREC_NUM_THREADS", threads_env, TRUE);
  total = (guint64) (millions * 1e6);
  sizes = tensor_sizes (total, n_tensors);
  seconds = g_new (double, steps);
  bare_seconds = g_new (double, steps);
  handover = g_new (double, steps);
  with_handover = g_new (double, steps);
  gases = g_strsplit (gas_arg != NULL ? gas_arg : "1,4", ",", -1);

  adamw = mixprec_registry_find_feature (mixprec_registry_get_default (), MIXPREC_FEATURE_KIND_OPTIMIZER,
                                         "adamw", "cpu", &error);
  if (adamw == NULL)
    {
      g_printerr ("%s\n", error->message);
      return 1;
    }
  bare_setup (&bare, adamw, total);

  g_print ("%" G_GUINT64_FORMAT " params in %d tensors, bf16 + FP32 masters, AdamW, clipping 1.0, "
           "%u threads; best (median) of %d steps, bare and engine alternating\n", total, n_tensors,
           _mixprec_parallel_num_threads (), steps);
  g_print ("%-15s %12s %12s %12s %12s %7s %8s\n", "", "engine p/s", "(median)", "bare p/s", "(median)",
           "ratio", "B/param");
  for (guint k = 0; gases[k] != NULL; k++)
    for (guint intake = 0; intake < 2; intake++)
      {
        guint gas = (guint) g_ascii_strtoull (gases[k], NULL, 10);
        g_autoptr(GPtrArray) params = g_ptr_array_new ();
        g_autoptr(MixprecEngine) engine = NULL;
        g_autofree guint16 *scratch = NULL;
        double best, median, hbest, hmedian, dummy;
        g_autofree gchar *label = NULL;

        if (gas == 0)
          continue;
        engine = make_engine (gas, sizes, n_tensors, params, 0);
        if (intake)
          {
            guint64 largest = 0;

            for (gint i = 0; i < n_tensors; i++)
              largest = MAX (largest, sizes[i]);
            scratch = g_new (guint16, largest);
          }
        /* Bare and engine steps alternate, after a warm-up of each, so a
         * machine shared with other work slows both alike. */
        bare_step (&bare);
        if (intake)
          engine_step_intake (engine, params, gas, scratch, &dummy);
        else
          engine_step (engine, params, gas);
        for (gint s = 0; s < steps; s++)
          {
            bare_seconds[s] = bare_step (&bare);
            if (intake)
              {
                seconds[s] = engine_step_intake (engine, params, gas, scratch, &handover[s]);
                with_handover[s] = seconds[s] + handover[s];
              }
            else
              seconds[s] = engine_step (engine, params, gas);
          }
        best_median (bare_seconds, steps, &bare_best, &bare_median);
        best_median (seconds, steps, &best, &median);
        label = g_strdup_printf ("GAS %u %s", gas, intake ? "intake" : "whole");
        g_print ("%-15s %12.4g %12.4g %12.4g %12.4g %7.3f %5u/%u\n", label, total / best, total / median,
                 total / bare_best, total / bare_median, bare_best / best, engine_bytes (gas, intake),
                 BARE_BYTES);
        if (intake)
          {
            best_median (with_handover, steps, &hbest, &hmedian);
            g_print ("%-15s %12.4g %12.4g %12s %12s %7.3f %5u/%u\n", "  + hand-over", total / hbest,
                     total / hmedian, "", "", bare_best / hbest,
                     engine_bytes (gas, intake) + gas * HANDOVER_BYTES, BARE_BYTES);
          }
      }
  bare_clear (&bare);

  if (numerics_rounds > 0)
    {
      g_print ("\nmixprec.numerics: %d rounds of the three engines in turn; p/s of the median step "
               "(off, every 1) and of the whole window (every 100)\n", numerics_rounds);
      print_load ("before");
      g_print ("%-15s %12s %12s %12s %10s %10s %10s\n", "", "off p/s", "every 1", "every 100", "cost 1",
               "cost 100", "1 step/100");
      for (guint k = 0; gases[k] != NULL; k++)
        for (guint intake = 0; intake < 2; intake++)
          {
            guint gas = (guint) g_ascii_strtoull (gases[k], NULL, 10);

            if (gas > 0)
              telemetry_row (sizes, n_tensors, total, gas, intake, (guint) numerics_rounds);
          }
      print_load ("after");
    }
  return 0;
}
