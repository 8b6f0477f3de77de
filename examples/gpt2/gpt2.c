/* gpt2.c — trains a GPT-2 over the bytes of a text file, the way a C
 * trainer in the llm.c mould would use libmixprec: the model's forward
 * and backward are its own (gpt2-model.c, or gpt2-cuda.cu on a GPU), and
 * the engine does everything between "gradients are ready" and "the new
 * working weights are ready": FP32 masters and their bf16/fp16/FP8
 * working copies, loss scaling, accumulation, clipping, AdamW, the
 * schedule, ZeRO across the ranks of mixprec-run, checkpoints and the
 * monitors. Each gradient is handed over (mixprec_param_reduce_grad())
 * the moment the backward pass has finished it, in the working dtype.
 *
 *   gpt2 --config examples/configs/gpt2-bf16.json
 *
 * prints a progress line on stderr, one CSV row per evaluation, and ends
 * with "val_loss=<loss on the validation windows>" on stdout. */
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <glib/gstdio.h>

#include <mixprec/mixprec.h>

#include "charlm-config.h"
#include "example-resume.h"
#include "example-weights.h"
#include "gpt2-data.h"
#include "gpt2-model.h"
#ifdef HAVE_GPT2_CUDA
# include "gpt2-cuda.h"
#endif

#define DEFAULT_TEXT "/usr/share/dict/american-english"
#define DEFAULT_STEPS 500
#define DEFAULT_EVAL_EVERY 50
#define DEFAULT_VAL_WINDOWS 32
#define DEFAULT_SAVE_DIR "gpt2-checkpoints"
#define NOT_GIVEN G_MININT

typedef struct
{
  gchar *config_path;
  gint steps;
  gint batch;
  gint accumulation;
  gint zero_stage;
  gchar *device;
  CharlmOverrides overrides;
  gint n_layer, n_head, n_embd, n_ctx;
  gchar *csv_path;
  gint eval_every;
  gint val_windows;
  gchar *text_path;
  gboolean quiet;
  gint save_every;
  gchar *save_dir;
  gboolean resume;
  gchar *export_init;
  gchar *export_final;
  gchar *dump_dir;
} Options;

static void
options_clear (Options *o)
{
  g_free (o->config_path);
  g_free (o->device);
  g_free (o->csv_path);
  g_free (o->text_path);
  g_free (o->save_dir);
  g_free (o->export_init);
  g_free (o->export_final);
  g_free (o->dump_dir);
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
      "DeepSpeed-style JSON config (default: examples/configs/gpt2-bf16.json)", "FILE" },
    { "steps", 's', 0, G_OPTION_ARG_INT, &o->steps,
      "Optimizer steps; also the schedule's total_num_steps (default: that, else 500)", "N" },
    { "batch", 'b', 0, G_OPTION_ARG_INT, &o->batch,
      "Sequences per micro-batch (replaces train_micro_batch_size_per_gpu)", "N" },
    { "accumulation", 0, 0, G_OPTION_ARG_INT, &o->accumulation,
      "Micro-batches per optimizer step on each rank (replaces gradient_accumulation_steps)", "N" },
    { "zero-stage", 0, 0, G_OPTION_ARG_INT, &o->zero_stage,
      "ZeRO stage (replaces zero_optimization.stage)", "0-3" },
    { "device", 0, 0, G_OPTION_ARG_STRING, &o->device,
      "cpu, or cuda: the model and the engine's buffers on the GPU (replaces mixprec.device)",
      "DEVICE" },
    { "seed", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) charlm_option_seed,
      "Seed of the initial weights and the batch order (replaces mixprec.seed)", "N" },
    { "fp8", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) charlm_option_fp8,
      "FP8 working copies of the Linear layers, scaled by RECIPE (delayed, current or mx); "
      "off turns the config's fp8 section off", "RECIPE" },
    { "layers", 0, 0, G_OPTION_ARG_INT, &o->n_layer, "Transformer blocks (default 6)", "N" },
    { "heads", 0, 0, G_OPTION_ARG_INT, &o->n_head, "Attention heads (default 6)", "N" },
    { "embd", 0, 0, G_OPTION_ARG_INT, &o->n_embd, "Width, a multiple of --heads (default 384)", "N" },
    { "ctx", 0, 0, G_OPTION_ARG_INT, &o->n_ctx, "Context: bytes per sequence (default 128)", "N" },
    { "text", 't', 0, G_OPTION_ARG_FILENAME, &o->text_path,
      "Text to train on; its last tenth is the validation text (default " DEFAULT_TEXT ")",
      "FILE" },
    { "csv", 0, 0, G_OPTION_ARG_FILENAME, &o->csv_path,
      "Where to write the per-evaluation CSV (default gpt2.csv)", "FILE" },
    { "eval-every", 'e', 0, G_OPTION_ARG_INT, &o->eval_every,
      "Steps between evaluations, CSV rows and log lines (default 50)", "N" },
    { "val-windows", 0, 0, G_OPTION_ARG_INT, &o->val_windows,
      "Validation windows of --ctx bytes each evaluation reads (default 32)", "N" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o->quiet, "Print only the final val_loss line", NULL },
    { "save-every", 0, 0, G_OPTION_ARG_INT, &o->save_every,
      "Save a checkpoint every N optimizer steps (default: never)", "N" },
    { "save-dir", 0, 0, G_OPTION_ARG_FILENAME, &o->save_dir,
      "Where checkpoints go (default " DEFAULT_SAVE_DIR ")", "DIR" },
    { "resume", 0, 0, G_OPTION_ARG_NONE, &o->resume,
      "Continue from the latest checkpoint in the save folder (from scratch when it has none)",
      NULL },
    { "export-init", 0, 0, G_OPTION_ARG_FILENAME, &o->export_init,
      "Write the initial weights as one FP32 safetensors file (Hugging Face names) first", "FILE" },
    { "export", 0, 0, G_OPTION_ARG_FILENAME, &o->export_final,
      "Write the trained FP32 master weights as one safetensors file (Hugging Face names) at "
      "the end", "FILE" },
    { "dump", 0, 0, G_OPTION_ARG_FILENAME, &o->dump_dir,
      "Run one forward and backward of the first micro-batch, write the tokens, logits and "
      "gradients (raw little-endian float32 / bytes, one file each) into DIR, and stop", "DIR" },
    G_OPTION_ENTRY_NULL
  };

  context = g_option_context_new ("- train a GPT-2 over bytes with libmixprec");
  g_option_context_set_summary (context,
                                "A GPT-2 written in C, trained on the bytes of a text file in the "
                                "precision the config asks for.\nThe last line on stdout is "
                                "val_loss=<mean cross-entropy on the validation windows, in nats>.");
  /* The callbacks of --seed and --fp8 set the overrides. */
  group = g_option_group_new (NULL, NULL, NULL, &o->overrides, NULL);
  g_option_group_add_entries (group, entries);
  g_option_context_set_main_group (context, group);

  o->steps = NOT_GIVEN;
  o->batch = NOT_GIVEN;
  o->accumulation = NOT_GIVEN;
  o->zero_stage = NOT_GIVEN;
  o->n_layer = 6;
  o->n_head = 6;
  o->n_embd = 384;
  o->n_ctx = 128;
  o->eval_every = DEFAULT_EVAL_EVERY;
  o->val_windows = DEFAULT_VAL_WINDOWS;
  if (!g_option_context_parse (context, argc, argv, error))
    return FALSE;
  if ((o->steps <= 0 && o->steps != NOT_GIVEN) || (o->batch <= 0 && o->batch != NOT_GIVEN) ||
      (o->accumulation <= 0 && o->accumulation != NOT_GIVEN) ||
      (o->zero_stage != NOT_GIVEN && (o->zero_stage < 0 || o->zero_stage > 3)) ||
      o->eval_every <= 0 || o->save_every < 0 || o->val_windows <= 0 ||
      o->n_layer <= 0 || o->n_head <= 0 || o->n_embd <= 0 || o->n_ctx <= 0)
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "--steps, --batch, --accumulation, --eval-every, --val-windows, --layers, "
                   "--heads, --embd and --ctx must be positive, --save-every not negative, "
                   "--zero-stage between 0 and 3");
      return FALSE;
    }
  if (*argc > 1)
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   "unexpected argument \"%s\"", (*argv)[1]);
      return FALSE;
    }

  if (o->config_path == NULL)
    o->config_path = g_build_filename (GPT2_CONFIG_DIR, "gpt2-bf16.json", NULL);
  if (o->csv_path == NULL)
    o->csv_path = g_strdup ("gpt2.csv");
  if (o->text_path == NULL)
    o->text_path = g_strdup (DEFAULT_TEXT);
  if (o->save_dir == NULL)
    o->save_dir = g_strdup (DEFAULT_SAVE_DIR);
  o->overrides.steps = MAX (o->steps, 0);
  o->overrides.micro_batch = (guint) MAX (o->batch, 0);
  o->overrides.accumulation = (guint) MAX (o->accumulation, 0);
  o->overrides.zero_stage = o->zero_stage == NOT_GIVEN ? -1 : o->zero_stage;
  o->overrides.device = o->device;
  return TRUE;
}

/* ------------------------------------------------------------ the model */

/* The model, wherever it runs, and the engine's parameters beside it. */
typedef struct
{
  MixprecEngine *engine;       /* borrowed */
  Gpt2Model *cpu;              /* the tensor list always; the compute on the CPU */
#ifdef HAVE_GPT2_CUDA
  Gpt2Cuda *cuda;
#endif
  GPtrArray *params;           /* MixprecParam, in gpt2_model_get_tensor() order */
  guint mx_block_size;
  MixprecDType matmul_dtype;   /* what autocast would multiply in */
  guint16 *grad_scratch;       /* a gradient in its working dtype */
  gboolean gathered;           /* the GPU model reads gathered copies */
} Trainer;

static void
trainer_clear (Trainer *t)
{
  g_clear_pointer (&t->cpu, gpt2_model_free);
#ifdef HAVE_GPT2_CUDA
  g_clear_pointer (&t->cuda, gpt2_cuda_free);
#endif
  g_clear_pointer (&t->params, g_ptr_array_unref);
  g_clear_pointer (&t->grad_scratch, g_free);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Trainer, trainer_clear)

/* Rounds through the library's conversion to @dtype and back, a chunk at
 * a time on the stack: the model may call this from several threads. */
static void
round_through (gpt2_real *x,
               gsize      n,
               gpointer   user_data)
{
  MixprecDType dtype = GPOINTER_TO_INT (user_data);
  guint16 chunk[2048];

  for (gsize at = 0; at < n; at += G_N_ELEMENTS (chunk))
    {
      gsize len = MIN (n - at, G_N_ELEMENTS (chunk));

      if (!mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, x + at, dtype, chunk, len,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL) ||
          !mixprec_convert_array (dtype, chunk, MIXPREC_DTYPE_FLOAT32, x + at, len,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL))
        g_error ("rounding activations to %s failed", mixprec_dtype_get_name (dtype));
    }
}

/* The working weights as forward reads them, after every step (and under
 * ZeRO-3 gathered for the read, then released). */
static gboolean
trainer_load_weights (Trainer  *t,
                      GError  **error)
{
  gboolean ok = TRUE;

  /* Under ZeRO-3 the GPU model reads the gathered working copies in
   * place, so they stay gathered until the next step has written new
   * ones. */
  if (t->gathered)
    mixprec_engine_release_all (t->engine);
  t->gathered = FALSE;
  if (!mixprec_engine_gather_all (t->engine, error))
    return FALSE;
  for (guint i = 0; ok && i < t->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (t->params, i);

#ifdef HAVE_GPT2_CUDA
      if (t->cuda != NULL)
        {
          char message[256] = "";
          MixprecDType dtype;
          gint device_type;
          g_autoptr(GError) local_error = NULL;
          guint64 address = mixprec_param_get_device_address (p, MIXPREC_PARAM_BUFFER_WORKING,
                                                              &dtype, &device_type, NULL,
                                                              &local_error);

          if (address == 0 && local_error != NULL)
            {
              g_propagate_prefixed_error (error, g_steal_pointer (&local_error), "%s: ",
                                          mixprec_param_get_name (p));
              ok = FALSE;
            }
          else if (address == 0 || device_type != 2 ||
              !gpt2_cuda_set_weight (t->cuda, i, GSIZE_TO_POINTER (address),
                                     dtype == MIXPREC_DTYPE_BFLOAT16 ? GPT2_CUDA_BFLOAT16 :
                                     dtype == MIXPREC_DTYPE_FLOAT16 ? GPT2_CUDA_FLOAT16 :
                                     GPT2_CUDA_FLOAT32, message, sizeof message))
            {
              g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "%s: %s",
                           mixprec_param_get_name (p),
                           address == 0 || device_type != 2 ? "its working copy is not in CUDA memory"
                                                            : message);
              ok = FALSE;
            }
          continue;
        }
#endif
      ok = example_read_working (p, t->mx_block_size, gpt2_model_get_weights (t->cpu, i),
                                 mixprec_param_get_numel (p), error);
    }
#ifdef HAVE_GPT2_CUDA
  if (t->cuda != NULL)
    {
      t->gathered = TRUE;
      return ok;
    }
#endif
  mixprec_engine_release_all (t->engine);
  return ok;
}

static gboolean
trainer_init (Trainer          *t,
              MixprecEngine    *engine,
              const Gpt2Shape  *shape,
              guint             max_batch,
              GError          **error)
{
  MixprecConfig *config = mixprec_engine_get_config (engine);
  gsize widest = 0;

  t->engine = engine;
  t->cpu = gpt2_model_new (shape, max_batch, error);
  if (t->cpu == NULL)
    return FALSE;
  gpt2_model_init_weights (t->cpu, mixprec_config_get_seed (config));
  t->params = g_ptr_array_new_with_free_func (g_object_unref);
  for (guint i = 0; i < gpt2_model_get_n_tensors (t->cpu); i++)
    {
      const Gpt2TensorInfo *info = gpt2_model_get_tensor (t->cpu, i);
      g_autoptr(GBytes) init = g_bytes_new (gpt2_model_get_weights (t->cpu, i),
                                            info->numel * sizeof (gfloat));
      MixprecParam *p = mixprec_engine_register_param (engine, info->name, info->shape,
                                                       info->n_dims, info->module_type,
                                                       MIXPREC_DTYPE_FLOAT32, init, error);

      if (p == NULL)
        return FALSE;
      g_ptr_array_add (t->params, g_object_ref (p));
      widest = MAX (widest, info->numel);
    }
  if (!mixprec_engine_prepare (engine, error))
    return FALSE;

  t->mx_block_size = example_mx_block_size (config);
  t->grad_scratch = g_new (guint16, widest);
  /* The Linear layers' working dtype (bf16 or fp16 when their copies are
   * FP8: the dtype the mode keeps) is the dtype autocast multiplies in. */
  t->matmul_dtype = mixprec_param_get_working_dtype (g_ptr_array_index (t->params,
                                                                        gpt2_model_layer_tensor (0, GPT2_ATTN_W)));
  if (t->matmul_dtype != MIXPREC_DTYPE_FLOAT32)
    gpt2_model_set_rounding (t->cpu, round_through, GINT_TO_POINTER (t->matmul_dtype));

#ifdef HAVE_GPT2_CUDA
  if (g_strcmp0 (mixprec_config_get_device (config), "cuda") == 0)
    {
      char message[256] = "";

      if (t->mx_block_size > 0 || mixprec_param_is_fp8 (g_ptr_array_index (t->params,
                                                                            gpt2_model_layer_tensor (0, GPT2_ATTN_W))))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                       "--device cuda: the GPU model multiplies bf16, fp16 or fp32 working "
                       "copies, not FP8 ones (turn the config's fp8 section off, or --fp8 off)");
          return FALSE;
        }
      t->cuda = gpt2_cuda_new (shape->n_layer, shape->n_head, shape->n_embd, shape->n_ctx,
                               max_batch,
                               t->matmul_dtype == MIXPREC_DTYPE_BFLOAT16 ? GPT2_CUDA_BFLOAT16 :
                               t->matmul_dtype == MIXPREC_DTYPE_FLOAT16 ? GPT2_CUDA_FLOAT16 :
                               GPT2_CUDA_FLOAT32, message, sizeof message);
      if (t->cuda == NULL)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED, "--device cuda: %s", message);
          return FALSE;
        }
    }
#else
  if (g_strcmp0 (mixprec_config_get_device (config), "cuda") == 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                   "--device cuda: this gpt2 was built without CUDA (configure found no nvcc)");
      return FALSE;
    }
#endif
  return trainer_load_weights (t, error);
}

/* Hands one finished gradient to the engine, in the parameter's gradient
 * dtype (its working dtype: fp32 for the fp32_modules). */
static gboolean
hand_over (guint            index,
           const gpt2_real *grad,
           gpointer         user_data,
           GError         **error)
{
  Trainer *t = user_data;
  MixprecParam *p = g_ptr_array_index (t->params, index);
  MixprecDType dtype = mixprec_param_get_grad_dtype (p);
  gsize n = mixprec_param_get_numel (p);

  if (dtype == MIXPREC_DTYPE_FLOAT32)
    return mixprec_param_reduce_grad (p, dtype, grad, error);
  if (!mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, grad, dtype, t->grad_scratch, n,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
    return FALSE;
  return mixprec_param_reduce_grad (p, dtype, t->grad_scratch, error);
}

#ifdef HAVE_GPT2_CUDA
typedef struct
{
  Trainer *t;
  GError *error;
} CudaHandOver;

static int
hand_over_device (unsigned       index,
                  const void    *device_grad,
                  Gpt2CudaDType  dtype,
                  void          *user)
{
  CudaHandOver *h = user;
  MixprecParam *p = g_ptr_array_index (h->t->params, index);
  MixprecDType d = dtype == GPT2_CUDA_BFLOAT16 ? MIXPREC_DTYPE_BFLOAT16 :
                   dtype == GPT2_CUDA_FLOAT16 ? MIXPREC_DTYPE_FLOAT16 : MIXPREC_DTYPE_FLOAT32;

  return mixprec_param_reduce_grad_device_address (p, d, (guint64) (guintptr) device_grad,
                                                   &h->error);
}
#endif

static gdouble
trainer_forward (Trainer      *t,
                 const guint8 *tokens,
                 const guint8 *targets,
                 guint         batch,
                 guint         seq_len,
                 GError      **error)
{
#ifdef HAVE_GPT2_CUDA
  if (t->cuda != NULL)
    {
      char message[256] = "";
      gdouble loss = gpt2_cuda_forward (t->cuda, tokens, targets, batch, seq_len, message,
                                        sizeof message);

      if (isnan (loss))
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "forward on the GPU: %s", message);
      return loss;
    }
#endif
  (void) error;
  return gpt2_model_forward (t->cpu, tokens, targets, batch, seq_len);
}

static gboolean
trainer_backward (Trainer  *t,
                  gdouble   loss_scale,
                  GError  **error)
{
#ifdef HAVE_GPT2_CUDA
  if (t->cuda != NULL)
    {
      char message[256] = "";
      CudaHandOver h = { t, NULL };

      if (gpt2_cuda_backward (t->cuda, loss_scale, hand_over_device, &h, message, sizeof message))
        return TRUE;
      if (h.error != NULL)
        g_propagate_error (error, h.error);
      else
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "backward on the GPU: %s", message);
      return FALSE;
    }
#endif
  return gpt2_model_backward (t->cpu, loss_scale, hand_over, t, error);
}

/* ------------------------------------------------------------ training */

typedef struct
{
  gdouble loss_sum;
  guint micro_steps;
  guint64 tokens;
  gint64 us;
} Interval;

typedef struct
{
  guint micro_batch;
  guint accumulation;
  guint seq_len;
  guint8 *tokens;
  guint8 *targets;
} Batches;

static void
batches_clear (Batches *b)
{
  g_free (b->tokens);
  g_free (b->targets);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Batches, batches_clear)

/* One optimizer step. Every rank draws the whole global batch (world x
 * accumulation micro-batches) from the same stream and computes
 * micro-batch m when m % world is its rank: one process taking world
 * times the accumulation steps sees the same micro-batches, in the same
 * order, and the engine then gives it the same weights bit for bit. */
static MixprecStepResult *
train_step (Trainer        *t,
            const Gpt2Text *text,
            CharlmRng      *rng,
            Batches        *b,
            Interval       *interval,
            GError        **error)
{
  guint rank = mixprec_engine_get_rank (t->engine);
  guint world = mixprec_engine_get_world_size (t->engine);
  MixprecStepResult *result = NULL;
  gdouble step_loss = 0;
  guint step_micro = 0;

  for (guint m = 0; m < b->accumulation * world; m++)
    {
      gdouble loss;

      gpt2_text_sample (text, rng, b->micro_batch, b->seq_len, b->tokens, b->targets);
      if (m % world != rank)
        continue;
      loss = trainer_forward (t, b->tokens, b->targets, b->micro_batch, b->seq_len, error);
      if (isnan (loss) && error != NULL && *error != NULL)
        return NULL;
      interval->loss_sum += loss;
      interval->micro_steps++;
      interval->tokens += (guint64) b->micro_batch * b->seq_len;
      step_loss += loss;
      step_micro++;
      /* The engine wants the gradients of the scaled loss. */
      if (!trainer_backward (t, mixprec_engine_get_loss_scale (t->engine), error))
        return NULL;
      if (m + world >= b->accumulation * world &&
          !mixprec_engine_report_scalar (t->engine, "Train/Steps/train_loss", step_loss / step_micro,
                                         error))
        return NULL;
      if (!mixprec_engine_micro_step (t->engine, &result, error))
        return NULL;
    }
  g_assert (result != NULL);
  return result;
}

static gdouble
evaluate (Trainer        *t,
          const Gpt2Text *text,
          Batches        *b,
          guint           n_windows,
          GError        **error)
{
  gsize available = gpt2_text_n_val_windows (text, b->seq_len);
  gsize n = MIN (available, n_windows);
  gdouble sum = 0;

  for (gsize w = 0; w < n; w += b->micro_batch)
    {
      guint rows = (guint) MIN (b->micro_batch, n - w);
      gdouble loss;

      for (guint r = 0; r < rows; r++)
        gpt2_text_val_window (text, w + r, b->seq_len, b->tokens + (gsize) r * b->seq_len,
                              b->targets + (gsize) r * b->seq_len);
      loss = trainer_forward (t, b->tokens, b->targets, rows, b->seq_len, error);
      if (isnan (loss))
        return NAN;
      sum += loss * rows;
    }
  return sum / n;
}

/* --dump: one forward and backward of the first micro-batch, its inputs
 * and outputs as raw files a test reads with numpy. */
static gboolean
dump_tensors (const gchar *path,
              gconstpointer data,
              gsize       size,
              GError    **error)
{
  return g_file_set_contents (path, data, (gssize) size, error);
}

static gboolean
dump (Trainer        *t,
      const Gpt2Text *text,
      CharlmRng      *rng,
      Batches        *b,
      const gchar    *dir,
      GError        **error)
{
  const Gpt2Shape *shape = gpt2_model_get_shape (t->cpu);
  gsize rows = (gsize) b->micro_batch * b->seq_len;
  g_autofree gchar *loss_text = NULL;
  g_autofree gchar *path = NULL;
  gdouble loss;

  if (g_mkdir_with_parents (dir, 0700) != 0)
    {
      int saved_errno = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved_errno),
                   "--dump: cannot make %s: %s", dir, g_strerror (saved_errno));
      return FALSE;
    }
  gpt2_text_sample (text, rng, b->micro_batch, b->seq_len, b->tokens, b->targets);
  loss = gpt2_model_forward (t->cpu, b->tokens, b->targets, b->micro_batch, b->seq_len);
  if (!gpt2_model_backward (t->cpu, 1.0, NULL, NULL, error))
    return FALSE;

#define DUMP(name, data, size) \
  do { \
    g_free (path); \
    path = g_build_filename (dir, name, NULL); \
    if (!dump_tensors (path, data, size, error)) \
      return FALSE; \
  } while (0)
  DUMP ("tokens.bin", b->tokens, rows);
  DUMP ("targets.bin", b->targets, rows);
  DUMP ("logits.bin", gpt2_model_get_logits (t->cpu), rows * GPT2_VOCAB * sizeof (gfloat));
  for (guint i = 0; i < gpt2_model_get_n_tensors (t->cpu); i++)
    {
      const Gpt2TensorInfo *info = gpt2_model_get_tensor (t->cpu, i);
      g_autofree gchar *name = g_strconcat (info->name, ".grad.bin", NULL);

      DUMP (name, gpt2_model_get_grad (t->cpu, i), info->numel * sizeof (gfloat));
    }
  loss_text = g_strdup_printf ("batch %u\nseq_len %u\nn_layer %u\nn_head %u\nn_embd %u\n"
                               "n_ctx %u\nloss %.9g\n", b->micro_batch, b->seq_len,
                               shape->n_layer, shape->n_head, shape->n_embd, shape->n_ctx, loss);
  DUMP ("meta.txt", loss_text, strlen (loss_text));
#undef DUMP
  return TRUE;
}

/* --resume: the engine continues from the latest checkpoint in @dir (or
 * the newest whole one when that is damaged) and the batch order from the
 * same place (the draws of the steps already
 * taken are replayed and thrown away). Returns the steps the checkpoint
 * had taken (0 when there is none), or -1 on error. */
static gint64
resume (Trainer        *t,
        const gchar    *dir,
        const Gpt2Text *text,
        CharlmRng      *rng,
        Batches        *b,
        GError        **error)
{
  g_autoptr(MixprecCheckpoint) checkpoint = NULL;
  g_autoptr(GError) local_error = NULL;
  guint64 steps;

  checkpoint = example_open_resume ("gpt2", dir, &local_error);
  if (checkpoint == NULL && local_error == NULL)
    return 0;
  if (checkpoint == NULL)
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return -1;
    }
  if (!mixprec_engine_load_checkpoint (t->engine, mixprec_checkpoint_get_path (checkpoint), error) ||
      !trainer_load_weights (t, error))
    return -1;
  steps = mixprec_checkpoint_get_step (checkpoint);
  for (guint64 i = 0; i < steps * b->accumulation * mixprec_engine_get_world_size (t->engine); i++)
    gpt2_text_sample (text, rng, b->micro_batch, b->seq_len, b->tokens, b->targets);
  return (gint64) MIN (steps, (guint64) G_MAXINT);
}

static const gchar *
describe_mode (MixprecConfig *config)
{
  switch (mixprec_config_get_precision_mode (config))
    {
    case MIXPREC_PRECISION_MODE_FP32:
      return "fp32";
    case MIXPREC_PRECISION_MODE_FP16:
      return "fp16";
    case MIXPREC_PRECISION_MODE_BF16:
      return "bf16";
    case MIXPREC_PRECISION_MODE_BF16_NO_MASTER:
      return "bf16 (no fp32 master)";
    case MIXPREC_PRECISION_MODE_FP16_NO_MASTER:
      return "fp16 (no fp32 master)";
    case MIXPREC_PRECISION_MODE_AUTOCAST:
      return "autocast";
    default:
      return "unknown";
    }
}

static gboolean
fail (const gchar *what,
      GError      *error)
{
  g_printerr ("gpt2: %s%s%s\n", what != NULL ? what : "", what != NULL ? ": " : "",
              error->message);
  return FALSE;
}

static gboolean
run (Options *o)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_auto(Trainer) t = { 0 };
  g_auto(Gpt2Text) text = { 0 };
  g_auto(Batches) b = { 0 };
  Gpt2Shape shape = { o->n_layer, o->n_head, o->n_embd, o->n_ctx };
  CharlmRng rng;
  Interval interval = { 0 };
  gint64 start = g_get_monotonic_time (), first_step = 1;
  gdouble val_loss = NAN;
  GStrv warnings;
  FILE *csv;
  gint steps;

  config = charlm_config_load (o->config_path, &o->overrides, &error);
  if (config == NULL || !gpt2_text_load (&text, o->text_path, shape.n_ctx, &error))
    return fail (NULL, error);
  warnings = mixprec_config_get_warnings (config);
  for (guint i = 0; warnings != NULL && warnings[i] != NULL; i++)
    g_printerr ("gpt2: %s: warning: %s\n", o->config_path, warnings[i]);

  steps = o->overrides.steps > 0 ? o->overrides.steps : DEFAULT_STEPS;
  b.micro_batch = mixprec_config_get_train_micro_batch_size_per_gpu (config);
  b.accumulation = mixprec_config_get_gradient_accumulation_steps (config);
  b.seq_len = shape.n_ctx;
  b.tokens = g_new (guint8, (gsize) b.micro_batch * b.seq_len);
  b.targets = g_new (guint8, (gsize) b.micro_batch * b.seq_len);

  engine = mixprec_engine_new (config, &error);
  if (engine == NULL || !trainer_init (&t, engine, &shape, b.micro_batch, &error))
    return fail (NULL, error);
  charlm_rng_init (&rng, mixprec_config_get_seed (config), 1);

  if (o->export_init != NULL && !mixprec_engine_export_fp32 (engine, o->export_init, &error))
    return fail ("--export-init", error);
  if (o->dump_dir != NULL)
    return dump (&t, &text, &rng, &b, o->dump_dir, &error) || fail ("--dump", error);

  if (mixprec_engine_get_rank (engine) != 0)
    {
      o->quiet = TRUE;
      g_free (o->csv_path);
      o->csv_path = g_strdup ("/dev/null");
    }
  if (!o->quiet)
    g_printerr ("gpt2: %s, %zu parameters (%u layers, %u heads, width %u, context %u), "
                "micro-batch %u x %u on %u rank%s, %d steps, %s, text %s (%zu train / %zu val "
                "bytes)\n", describe_mode (config), gpt2_model_get_n_params (t.cpu),
                shape.n_layer, shape.n_head, shape.n_embd, shape.n_ctx, b.micro_batch,
                b.accumulation, mixprec_engine_get_world_size (engine),
                mixprec_engine_get_world_size (engine) == 1 ? "" : "s", steps,
                mixprec_dtype_get_name (t.matmul_dtype), o->text_path, text.n_train,
                text.n_val);

  if (!o->quiet)
    {
      g_autofree gchar *fp8 = example_describe_fp8 (config);

      if (fp8 != NULL)
        g_printerr ("gpt2: %s\n", fp8);
    }

  if (o->resume)
    {
      first_step = resume (&t, o->save_dir, &text, &rng, &b, &error) + 1;
      if (first_step == 0)
        return fail ("--resume", error);
      if (!o->quiet && first_step > 1)
        g_printerr ("gpt2: resuming after step %" G_GINT64_FORMAT "\n", first_step - 1);
    }

  csv = g_fopen (o->csv_path, "w");
  if (csv == NULL)
    {
      int saved_errno = errno;

      g_printerr ("gpt2: cannot write %s: %s\n", o->csv_path, g_strerror (saved_errno));
      return FALSE;
    }
  fprintf (csv, "step,train_loss,val_loss,loss_scale,grad_norm,skipped_steps,lr,tokens_per_s\n");

  for (gint step = (gint) first_step; step <= steps; step++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      gint64 t0 = g_get_monotonic_time ();

      r = train_step (&t, &text, &rng, &b, &interval, &error);
      if (r == NULL || !trainer_load_weights (&t, &error))
        {
          fclose (csv);
          g_printerr ("gpt2: step %d: %s\n", step, error->message);
          return FALSE;
        }
      interval.us += g_get_monotonic_time () - t0;

      if (o->save_every > 0 && step % o->save_every == 0 &&
          !mixprec_engine_save_checkpoint (engine, o->save_dir, &error))
        {
          fclose (csv);
          g_printerr ("gpt2: step %d: %s\n", step, error->message);
          return FALSE;
        }

      if (step % o->eval_every == 0 || step == steps)
        {
          gdouble per_s = interval.us > 0 ? interval.tokens * 1e6 / interval.us : 0;

          val_loss = evaluate (&t, &text, &b, (guint) o->val_windows, &error);
          if (isnan (val_loss) && error != NULL)
            {
              fclose (csv);
              return fail ("evaluating", error);
            }
          fprintf (csv, "%d,%.6f,%.6f,%g,%.6g,%" G_GUINT64_FORMAT ",%.6g,%.1f\n", step,
                   interval.loss_sum / interval.micro_steps, val_loss, r->loss_scale, r->grad_norm,
                   r->skipped_steps, r->lr, per_s);
          if (!o->quiet)
            g_printerr ("step %5d/%d | loss %.4f | val %.4f | scale %g | grad norm %.3g | "
                        "skipped %" G_GUINT64_FORMAT " | lr %.2e | %.0f tok/s\n", step, steps,
                        interval.loss_sum / interval.micro_steps, val_loss, r->loss_scale,
                        r->grad_norm, r->skipped_steps, r->lr, per_s);
          interval = (Interval) { 0 };
        }
    }
  if (ferror (csv) | fclose (csv))
    {
      g_printerr ("gpt2: cannot write %s\n", o->csv_path);
      return FALSE;
    }
  if (first_step > steps)
    {
      val_loss = evaluate (&t, &text, &b, (guint) o->val_windows, &error);
      if (isnan (val_loss) && error != NULL)
        return fail ("evaluating", error);
    }
  if (o->export_final != NULL && !mixprec_engine_export_fp32 (engine, o->export_final, &error))
    return fail ("--export", error);
  if (!o->quiet)
    g_printerr ("gpt2: %d steps in %.1f s, CSV in %s\n", steps,
                (g_get_monotonic_time () - start) / 1e6, o->csv_path);
  printf ("val_loss=%.6f\n", val_loss);
  return TRUE;
}

int
main (int    argc,
      char **argv)
{
  g_auto(Options) options = { 0 };
  g_autoptr(GError) error = NULL;

  /* Messages in the terminal's character set; numbers stay in the C
   * locale so that val_loss=2.1 reads the same everywhere. */
  setlocale (LC_CTYPE, "");
  if (!parse_options (&options, &argc, &argv, &error))
    {
      g_printerr ("gpt2: %s\n", error->message);
      return 1;
    }
  return run (&options) ? 0 : 1;
}
