/* charlm.c — trains a character-level language model on a word list with
 * libmixprec doing the precision side: master weights, loss scaling,
 * clipping, AdamW and the learning-rate schedule. The model's forward and
 * backward (charlm-model.c) are ordinary C loops; the DeepSpeed-style JSON
 * config picks fp32, bf16 or fp16.
 *
 *   charlm --config examples/configs/fp16.json
 *
 * prints a progress line on stderr, writes one CSV row per evaluation and
 * ends with "val_loss=<loss on the whole val split>" on stdout. With
 * --save-every N it checkpoints into --save-dir every N steps; --resume
 * continues from the latest checkpoint there, bit for bit. */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include <mixprec/mixprec.h>

#include "charlm-config.h"
#include "charlm-data.h"
#include "charlm-model.h"
#include "example-resume.h"
#include "example-weights.h"

#define DEFAULT_WORDS "/usr/share/dict/american-english"
#define DEFAULT_STEPS 3000
#define DEFAULT_EVAL_EVERY 250
#define DEFAULT_SAVE_DIR "charlm-checkpoints"
/* The evaluations during training use about this many val examples (a
 * fixed, evenly spread subset); the final one uses all of them. */
#define EVAL_SUBSET 4096
/* What an integer option holds when it was not on the command line. */
#define NOT_GIVEN G_MININT

static const CharlmShape default_shape = {
  .block_size = 5,
  .n_embd = 16,
  .n_hidden = 192,
  .out_init_scale = 0.1,
};

typedef struct
{
  gchar *config_path;
  gint steps;
  gint batch;
  gint accumulation;
  gint zero_stage;
  gchar *device;
  CharlmOverrides overrides;
  gchar *csv_path;
  gint eval_every;
  gchar *words_path;
  gdouble loss_weight;
  gchar **grad_multipliers;
  gboolean quiet;
  gint save_every;
  gchar *save_dir;
  gboolean resume;
} Options;

static void
options_clear (Options *o)
{
  g_free (o->config_path);
  g_free (o->device);
  g_free (o->csv_path);
  g_free (o->words_path);
  g_free (o->save_dir);
  g_strfreev (o->grad_multipliers);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Options, options_clear)

static gboolean
parse_options (Options  *o,
               int      *argc,
               char   ***argv,
               GError  **error)
{
  g_autoptr(GOptionContext) context = NULL;
  GOptionGroup *group;
  const GOptionEntry entries[] = {
    { "config", 'c', 0, G_OPTION_ARG_FILENAME, &o->config_path,
      "DeepSpeed-style JSON config (default: the bf16 example)", "FILE" },
    { "steps", 's', 0, G_OPTION_ARG_INT, &o->steps,
      "Optimizer steps; also the schedule's total_num_steps (default: that, else 3000)", "N" },
    { "accumulation", 0, 0, G_OPTION_ARG_INT, &o->accumulation,
      "Micro-batches per optimizer step on each rank (replaces gradient_accumulation_steps)", "N" },
    { "zero-stage", 0, 0, G_OPTION_ARG_INT, &o->zero_stage,
      "ZeRO stage when run on several ranks with mixprec-run (replaces zero_optimization.stage)", "0-3" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &o->device,
      "Where the engine keeps master weights, gradients and optimizer state: cpu or "
      "cuda (replaces mixprec.device); the model itself always runs on the CPU", "DEVICE" },
    { "batch", 'b', 0, G_OPTION_ARG_INT, &o->batch,
      "Micro-batch size, overriding train_micro_batch_size_per_gpu", "N" },
    { "seed", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) charlm_option_seed,
      "Seed of the initial weights and batch order, overriding mixprec.seed", "N" },
    { "fp8", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) charlm_option_fp8,
      "Keep FP8 working copies of the Linear layers' parameters, scaled by RECIPE (delayed, "
      "current or mx), and multiply with them; off turns the config's fp8 section off",
      "RECIPE" },
    { "csv", 0, 0, G_OPTION_ARG_FILENAME, &o->csv_path,
      "Where to write the per-evaluation CSV (default charlm.csv)", "FILE" },
    { "eval-every", 'e', 0, G_OPTION_ARG_INT, &o->eval_every,
      "Steps between evaluations, CSV rows and log lines (default 250)", "N" },
    { "words", 'w', 0, G_OPTION_ARG_FILENAME, &o->words_path,
      "Word list, one word a line (default " DEFAULT_WORDS ")", "FILE" },
    { "loss-weight", 0, 0, G_OPTION_ARG_DOUBLE, &o->loss_weight,
      "Multiply the loss by W before backward (default 1); W << 1 makes the "
      "gradients as small as in a model averaging over far more tokens", "W" },
    { "grad-multiplier", 0, 0, G_OPTION_ARG_STRING_ARRAY, &o->grad_multipliers,
      "Multiply parameter NAME's gradient by FACTOR before it is stored in its gradient dtype, "
      "as a gradient hook would (repeatable); with Adam a constant factor hardly changes an "
      "fp32 or bf16 run, while in fp16 a small one makes that module's gradients underflow",
      "NAME=FACTOR" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o->quiet,
      "Print only the final val_loss line", NULL },
    { "save-every", 0, 0, G_OPTION_ARG_INT, &o->save_every,
      "Save a checkpoint every N optimizer steps (default: never)", "N" },
    { "save-dir", 0, 0, G_OPTION_ARG_FILENAME, &o->save_dir,
      "Where checkpoints go, one folder per step plus 'latest' (default " DEFAULT_SAVE_DIR ")",
      "DIR" },
    { "resume", 0, 0, G_OPTION_ARG_NONE, &o->resume,
      "Continue from the latest checkpoint in the save folder (from scratch when it has none; "
      "from the newest whole one, with a warning, when the latest is damaged)",
      NULL },
    G_OPTION_ENTRY_NULL
  };

  context = g_option_context_new ("- train a character-level language model with libmixprec");
  g_option_context_set_summary (context,
                                "A Bengio-style MLP over characters, trained on a word list in the "
                                "precision the config asks for.\nThe last line on stdout is "
                                "val_loss=<mean cross-entropy on the validation words, in nats>.");
  /* The callbacks of --seed and --fp8 set the overrides. */
  group = g_option_group_new (NULL, NULL, NULL, &o->overrides, NULL);
  g_option_group_add_entries (group, entries);
  g_option_context_set_main_group (context, group);

  o->steps = NOT_GIVEN;
  o->batch = NOT_GIVEN;
  o->accumulation = NOT_GIVEN;
  o->zero_stage = NOT_GIVEN;
  o->eval_every = DEFAULT_EVAL_EVERY;
  o->loss_weight = 1.0;
  if (!g_option_context_parse (context, argc, argv, error))
    return FALSE;
  if ((o->steps <= 0 && o->steps != NOT_GIVEN) || (o->batch <= 0 && o->batch != NOT_GIVEN) ||
      (o->accumulation <= 0 && o->accumulation != NOT_GIVEN) ||
      (o->zero_stage != NOT_GIVEN && (o->zero_stage < 0 || o->zero_stage > 3)) ||
      o->eval_every <= 0 || o->save_every < 0 || !(o->loss_weight > 0 && isfinite (o->loss_weight)))
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "--steps, --batch, --accumulation, --eval-every, --save-every and --loss-weight "
                   "must be positive, --zero-stage between 0 and 3");
      return FALSE;
    }

  if (o->config_path == NULL)
    o->config_path = g_build_filename (CHARLM_CONFIG_DIR, "bf16.json", NULL);
  if (o->csv_path == NULL)
    o->csv_path = g_strdup ("charlm.csv");
  if (o->words_path == NULL)
    o->words_path = g_strdup (DEFAULT_WORDS);
  if (o->save_dir == NULL)
    o->save_dir = g_strdup (DEFAULT_SAVE_DIR);
  o->overrides.steps = MAX (o->steps, 0);
  o->overrides.micro_batch = (guint) MAX (o->batch, 0);
  o->overrides.accumulation = (guint) MAX (o->accumulation, 0);
  o->overrides.zero_stage = o->zero_stage == NOT_GIVEN ? -1 : o->zero_stage;
  o->overrides.device = o->device;
  return TRUE;
}

static const gchar *
describe_mode (MixprecConfig *config)
{
  switch (mixprec_config_get_precision_mode (config))
    {
    case MIXPREC_PRECISION_MODE_FP32:
      return "fp32";
    case MIXPREC_PRECISION_MODE_FP16:
      return mixprec_config_get_loss_scale (config) > 0 ? "fp16 (static loss scale)"
                                                        : "fp16 (dynamic loss scale)";
    case MIXPREC_PRECISION_MODE_BF16:
      return "bf16";
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
      return "bf16 (no fp32 master)";
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      return mixprec_config_get_loss_scale (config) > 0
               ? "fp16 (no fp32 master, static loss scale)"
               : "fp16 (no fp32 master, dynamic loss scale)";
    case MIXPREC_PRECISION_MODE_AUTOCAST:
      return "autocast";
    default:
      return "unknown";
    }
}

typedef struct
{
  gboolean tty;
  gboolean quiet;
  gboolean line_open;            /* a \r line waits to be finished */
  gint64 last_draw;
} Progress;

/* What happened since the last evaluation. */
typedef struct
{
  gdouble loss_sum;
  guint micro_steps;
  guint64 examples;
  gint64 us;
} Interval;

static void
progress_print (Progress                *progress,
                gboolean                 final,
                gint                     steps,
                const MixprecStepResult *r,
                const Interval          *interval,
                gdouble                  val_loss,
                gdouble                  underflow)
{
  g_autoptr(GString) line = g_string_new (NULL);
  gdouble per_s = interval->us > 0 ? interval->examples * 1e6 / interval->us : 0;

  if (progress->quiet)
    return;
  g_string_append_printf (line, "step %5" G_GUINT64_FORMAT "/%d | loss %.4f",
                          r->step, steps, interval->loss_sum / interval->micro_steps);
  if (!isnan (val_loss))
    g_string_append_printf (line, " | val %.4f", val_loss);
  g_string_append_printf (line, " | scale %g | grad norm %.3g | skipped %" G_GUINT64_FORMAT
                          " | underflow %.1f%% | lr %.2e | %.0f tok/s",
                          r->loss_scale, r->grad_norm, r->skipped_steps, 100 * underflow, r->lr,
                          per_s);
  if (progress->tty)
    {
      /* \033[K clears what a longer previous line left behind. */
      fprintf (stderr, "\r%s\033[K%s", line->str, final ? "\n" : "");
      progress->line_open = !final;
    }
  else if (final)
    fprintf (stderr, "%s\n", line->str);
  fflush (stderr);
  progress->last_draw = g_get_monotonic_time ();
}

static void
print_setup (MixprecConfig       *config,
             CharlmModel         *model,
             const CharlmDataset *data,
             gint                 steps)
{
  const CharlmParamId shown[] = { CHARLM_WTE, CHARLM_H1_W, CHARLM_LN1_W };
  g_autofree gchar *fp8 = NULL;
  g_autofree gchar *fp4 = NULL;

  g_printerr ("charlm: %s, %" G_GUINT64_FORMAT " parameters, %u train / %u val words "
              "(%zu / %zu examples), micro-batch %u x %u, %d steps, seed %" G_GUINT64_FORMAT "\n",
              describe_mode (config), charlm_model_get_n_params (model),
              data->n_train_words, data->n_val_words, data->train.n, data->val.n,
              mixprec_config_get_train_micro_batch_size_per_gpu (config),
              mixprec_config_get_gradient_accumulation_steps (config), steps,
              mixprec_config_get_seed (config));

  fp8 = example_describe_fp8 (config);
  if (fp8 != NULL)
    g_printerr ("charlm: %s\n", fp8);
  fp4 = example_describe_fp4 (config);
  if (fp4 != NULL)
    g_printerr ("charlm: %s\n", fp4);

  g_printerr ("charlm: working / gradient dtypes:");
  for (guint i = 0; i < G_N_ELEMENTS (shown); i++)
    {
      MixprecParam *p = charlm_model_get_param (model, shown[i]);

      g_printerr ("%s %s %s / %s", i > 0 ? "," : "", mixprec_param_get_module_type (p),
                  mixprec_dtype_get_name (mixprec_param_get_working_dtype (p)),
                  mixprec_dtype_get_name (mixprec_param_get_grad_dtype (p)));
    }
  g_printerr ("\n");
}

/* One optimizer step: the configured number of micro-batches, each
 * forward, backward and handed to the engine, then the engine's step. */
static MixprecStepResult *
train_step (MixprecEngine       *engine,
            CharlmModel         *model,
            const CharlmExamples *train,
            CharlmRng           *rng,
            guint                micro_batch,
            guint                accumulation,
            gdouble              loss_weight,
            guint8              *contexts,
            guint8              *targets,
            Interval            *interval,
            GError             **error)
{
  guint rank = mixprec_engine_get_rank (engine);
  guint world = mixprec_engine_get_world_size (engine);
  gdouble step_loss = 0.0;
  guint step_micro = 0;
  MixprecStepResult *result = NULL;

  /* Every rank draws the whole global batch (world * accumulation
   * micro-batches) from the same stream and computes micro-batch m when
   * m % world is its rank: one process with world times the accumulation
   * steps sees the same micro-batches in the same order, and the engine
   * then gives it the same weights bit for bit. */
  for (guint m = 0; m < accumulation * world; m++)
    {
      gdouble loss;

      charlm_examples_sample (train, rng, micro_batch, contexts, targets);
      if (m % world != rank)
        continue;
      loss = charlm_model_forward (model, contexts, targets, micro_batch);
      interval->loss_sum += loss;
      step_loss += loss;
      step_micro++;
      interval->micro_steps++;
      interval->examples += micro_batch;
      /* The engine wants the gradients of the scaled loss. */
      charlm_model_backward (model, loss_weight * mixprec_engine_get_loss_scale (engine));
      /* The step's training loss, beside what the engine records of it, in
       * the monitors the config enables (this rank's micro-batches; rank 0
       * writes): reported before this rank's last micro-batch, whose
       * micro_step() runs the step the report belongs to. */
      if (m + world >= accumulation * world &&
          !mixprec_engine_report_scalar (engine, "Train/Steps/train_loss", step_loss / step_micro,
                                         error))
        return NULL;
      /* Hands the micro-batch's gradients over; after the last one of the
       * accumulation window it also runs the optimizer step. */
      if (!mixprec_engine_micro_step (engine, &result, error))
        return NULL;
    }
  g_assert (result != NULL);
  return result;
}

/* --resume: the engine continues from the latest checkpoint in @dir (or
 * the newest whole one when that is damaged), and
 * the batch order from the same place: the draws of the steps already
 * taken are replayed and thrown away. Returns the number of steps the
 * checkpoint had taken (0 when @dir holds none), or -1 on error. */
static gint64
resume (MixprecEngine        *engine,
        CharlmModel          *model,
        const gchar          *dir,
        const CharlmExamples *train,
        CharlmRng            *rng,
        guint                 micro_batch,
        guint                 accumulation,
        guint8               *contexts,
        guint8               *targets,
        GError              **error)
{
  g_autoptr(MixprecCheckpoint) checkpoint = NULL;
  g_autoptr(GError) local_error = NULL;
  guint64 steps;

  checkpoint = example_open_resume ("charlm", dir, &local_error);
  if (checkpoint == NULL && local_error == NULL)
    return 0;
  if (checkpoint == NULL)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return -1;
    }
  if (!mixprec_engine_load_checkpoint (engine, mixprec_checkpoint_get_path (checkpoint), error))
    return -1;
  charlm_model_load_weights (model);
  steps = mixprec_checkpoint_get_step (checkpoint);
  for (guint64 i = 0; i < steps * accumulation * mixprec_engine_get_world_size (engine); i++)
    charlm_examples_sample (train, rng, micro_batch, contexts, targets);
  return (gint64) MIN (steps, (guint64) G_MAXINT);
}

int
main (int    argc,
      char **argv)
{
  g_auto(Options) options = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(CharlmModel) model = NULL;
  g_auto(CharlmDataset) data = { { 0 } };
  g_autofree guint8 *contexts = NULL;
  g_autofree guint8 *targets = NULL;
  CharlmShape shape = default_shape;
  CharlmRng batch_rng;
  Progress progress = { 0 };
  Interval interval = { 0 };
  gint64 start = g_get_monotonic_time ();
  guint micro_batch, accumulation;
  gdouble val_loss = NAN, underflow = 0;
  gsize eval_stride;
  GStrv warnings;
  FILE *csv;
  gint steps;
  gint64 first_step = 1;

  /* Messages in the terminal's character set; numbers stay in the C
   * locale so that val_loss=2.1 reads the same everywhere. */
  setlocale (LC_CTYPE, "");

  if (!parse_options (&options, &argc, &argv, &error) ||
      (config = charlm_config_load (options.config_path, &options.overrides, &error)) == NULL ||
      !charlm_dataset_load (&data, options.words_path, shape.block_size, &error))
    {
      g_printerr ("charlm: %s\n", error->message);
      return 1;
    }
  warnings = mixprec_config_get_warnings (config);
  for (guint i = 0; warnings != NULL && warnings[i] != NULL; i++)
    g_printerr ("charlm: %s: warning: %s\n", options.config_path, warnings[i]);

  steps = options.overrides.steps > 0 ? options.overrides.steps : DEFAULT_STEPS;
  micro_batch = mixprec_config_get_train_micro_batch_size_per_gpu (config);
  accumulation = mixprec_config_get_gradient_accumulation_steps (config);
  engine = mixprec_engine_new (config, &error);
  if (engine == NULL ||
      (model = charlm_model_new (engine, &shape, MAX (micro_batch, 256),
                                 mixprec_config_get_seed (config), &error)) == NULL)
    {
      g_printerr ("charlm: %s\n", error->message);
      return 1;
    }

  for (guint i = 0; options.grad_multipliers != NULL && options.grad_multipliers[i] != NULL; i++)
    {
      const gchar *arg = options.grad_multipliers[i];
      const gchar *eq = strrchr (arg, '=');
      g_autofree gchar *name = eq != NULL ? g_strndup (arg, eq - arg) : NULL;
      gchar *end = NULL;
      gdouble factor = eq != NULL ? g_ascii_strtod (eq + 1, &end) : 0.0;

      if (eq == NULL || end == eq + 1 || *end != '\0' || !(factor > 0) || !isfinite (factor))
        {
          g_printerr ("charlm: --grad-multiplier: expected NAME=FACTOR with a positive factor, "
                      "got '%s'\n", arg);
          return 1;
        }
      if (!charlm_model_set_grad_multiplier (model, name, factor, &error))
        {
          g_printerr ("charlm: %s\n", error->message);
          return 1;
        }
    }

  /* Across ranks every rank trains and evaluates (and prints its val_loss,
   * the same on all), but only rank 0 reports progress and writes the CSV. */
  if (mixprec_engine_get_rank (engine) != 0)
    {
      options.quiet = TRUE;
      g_free (options.csv_path);
      options.csv_path = g_strdup ("/dev/null");
    }
  csv = g_fopen (options.csv_path, "w");
  if (csv == NULL)
    {
      int saved_errno = errno;

      g_printerr ("charlm: cannot write %s: %s\n", options.csv_path, g_strerror (saved_errno));
      return 1;
    }
  fprintf (csv, "step,train_loss,val_loss,loss_scale,grad_norm,skipped_steps,lr,tokens_per_s,"
           "grad_underflow\n");

  progress.tty = isatty (fileno (stderr));
  progress.quiet = options.quiet;
  if (!options.quiet)
    print_setup (config, model, &data, steps);

  contexts = g_new (guint8, (gsize) micro_batch * shape.block_size);
  targets = g_new (guint8, micro_batch);
  charlm_rng_init (&batch_rng, mixprec_config_get_seed (config), 1);
  eval_stride = MAX (data.val.n / EVAL_SUBSET, 1);

  if (options.resume)
    {
      first_step = resume (engine, model, options.save_dir, &data.train, &batch_rng, micro_batch,
                           accumulation, contexts, targets, &error) + 1;
      if (first_step == 0)
        {
          g_printerr ("charlm: --resume: %s\n", error->message);
          fclose (csv);
          return 1;
        }
      if (!options.quiet)
        g_printerr ("charlm: %s step %" G_GINT64_FORMAT "\n",
                    first_step > 1 ? "resuming after" : "no checkpoint in the save folder; starting at",
                    first_step > 1 ? first_step - 1 : first_step);
    }

  for (gint step = (gint) first_step; step <= steps; step++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      gint64 t0 = g_get_monotonic_time ();
      gboolean eval_now = step % options.eval_every == 0 || step == steps;

      r = train_step (engine, model, &data.train, &batch_rng, micro_batch, accumulation,
                      options.loss_weight, contexts, targets, &interval, &error);
      if (r == NULL)
        {
          g_printerr ("%scharlm: step %d: %s\n", progress.line_open ? "\n" : "", step,
                      error->message);
          fclose (csv);
          return 1;
        }
      charlm_model_load_weights (model);
      interval.us += g_get_monotonic_time () - t0;

      if (options.save_every > 0 && step % options.save_every == 0)
        {
          if (!mixprec_engine_save_checkpoint (engine, options.save_dir, &error))
            {
              g_printerr ("%scharlm: step %d: %s\n", progress.line_open ? "\n" : "", step,
                          error->message);
              fclose (csv);
              return 1;
            }
          if (!options.quiet && !progress.tty)
            g_printerr ("charlm: saved step %d in %s\n", step, options.save_dir);
        }

      if (eval_now)
        {
          underflow = charlm_model_take_underflow (model);
          val_loss = charlm_model_evaluate (model, &data.val, eval_stride);
          fprintf (csv, "%d,%.6f,%.6f,%g,%.6g,%" G_GUINT64_FORMAT ",%.6g,%.1f,%.6f\n",
                   step, interval.loss_sum / interval.micro_steps, val_loss, r->loss_scale,
                   r->grad_norm, r->skipped_steps, r->lr,
                   interval.us > 0 ? interval.examples * 1e6 / interval.us : 0, underflow);
          progress_print (&progress, TRUE, steps, r, &interval, val_loss, underflow);
          interval = (Interval) { 0 };
        }
      else if (progress.tty && g_get_monotonic_time () - progress.last_draw > G_USEC_PER_SEC / 10)
        progress_print (&progress, FALSE, steps, r, &interval, val_loss, underflow);
    }
  if (ferror (csv) | fclose (csv))
    {
      g_printerr ("charlm: cannot write %s\n", options.csv_path);
      return 1;
    }

  val_loss = charlm_model_evaluate (model, &data.val, 1);
  if (!options.quiet)
    {
      g_autofree gchar *weights = charlm_model_describe_linear_weights (model);
      g_auto(GStrv) lines = g_strsplit (weights, "\n", -1);

      g_printerr ("charlm: %d steps in %.1f s, CSV in %s\n", steps,
                  (g_get_monotonic_time () - start) / 1e6, options.csv_path);
      g_printerr ("charlm: the Linear weights the last evaluation multiplied with:\n");
      for (guint i = 0; lines[i] != NULL && lines[i][0] != '\0'; i++)
        g_printerr ("charlm:   %s\n", lines[i]);
    }
  printf ("val_loss=%.6f\n", val_loss);
  return 0;
}
