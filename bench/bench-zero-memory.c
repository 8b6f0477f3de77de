/* bench-zero-memory.c — peak resident memory of a ~150M-parameter GPT-like
 * model trained at ZeRO stages 0 to 3 across ranks on this host, beside
 * the engine's own accounting, its memory plan and DeepSpeed's formula;
 * and the step time of per-parameter gradient intake
 * (mixprec_param_reduce_grad()) against whole gradients
 * (mixprec_param_set_grad()) at ZeRO-2 and ZeRO-3.
 *
 * Started without MIXPREC_RANK it is the driver: for every stage and path
 * it runs itself as --ranks processes on 127.0.0.1 (a fresh set per run,
 * so one run's peak does not carry into the next), collects one line per
 * rank and prints one table. Under mixprec-run or a job launcher it is one
 * rank of the run --stage and --path name, printing its line.
 *
 * Peak memory is VmHWM from /proc/self/status at the end of the run; the
 * baseline is VmHWM right after mixprec_engine_new(), with the libraries,
 * the comm backend and this trainer's two buffers (shared initial values,
 * gradient scratch) already resident, so VmHWM - baseline is what the
 * engine added. The plan is mixprec_memory_plan_list_buffers() for the two
 * parameter groups the engine forms (matrices, and the vectors exempt from
 * weight decay), with one layer held gathered under ZeRO-3; for whole
 * gradients under ZeRO-2/3 it adds the whole gradient buffer ZeRO-1 plans.
 *
 *   bench-zero-memory [--ranks 3] [--blocks 20] [--hidden 768] [--vocab 8192]
 *                     [--warmup 2] [--steps 9] [--stages 0,1,2,3]
 *                     [--whole-stages 2,3] [--reduce-bucket-size N]
 *                     [--prefetch-bucket-size N]
 *   bench-zero-memory --stage S --path intake|whole [--out FILE] (one rank)
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

#define N_CONTEXT 1024
#define PERSISTENCE_THRESHOLD 100000
#define PATTERN_LEN 4093          /* prime: gradients do not repeat per row */

static gint ranks = 3;
static gint blocks = 20;
static gint hidden = 768;
static gint vocab = 8192;
static gint warmup = 2;
static gint steps = 9;
static gint64 reduce_bucket_size = 0;
static gint64 prefetch_bucket_size = 0;
static gchar *stages = NULL;
static gchar *whole_stages = NULL;
static gint stage = -1;
static gchar *path = NULL;
static gchar *out = NULL;

static GOptionEntry entries[] = {
  { "ranks", 0, 0, G_OPTION_ARG_INT, &ranks, "Processes per run (default 3)", "N" },
  { "blocks", 0, 0, G_OPTION_ARG_INT, &blocks, "Transformer blocks (default 20: about 149M parameters)", "N" },
  { "hidden", 0, 0, G_OPTION_ARG_INT, &hidden, "Hidden size (default 768)", "N" },
  { "vocab", 0, 0, G_OPTION_ARG_INT, &vocab, "Vocabulary size (default 8192)", "N" },
  { "warmup", 0, 0, G_OPTION_ARG_INT, &warmup, "Untimed steps (default 2)", "N" },
  { "steps", 0, 0, G_OPTION_ARG_INT, &steps, "Timed steps (default 3)", "N" },
  { "reduce-bucket-size", 0, 0, G_OPTION_ARG_INT64, &reduce_bucket_size, "zero_optimization.reduce_bucket_size (default hidden^2)", "N" },
  { "prefetch-bucket-size", 0, 0, G_OPTION_ARG_INT64, &prefetch_bucket_size, "zero_optimization.stage3_prefetch_bucket_size (default 0.9 hidden^2)", "N" },
  { "stages", 0, 0, G_OPTION_ARG_STRING, &stages, "ZeRO stages with per-parameter intake (default 0,1,2,3)", "LIST" },
  { "whole-stages", 0, 0, G_OPTION_ARG_STRING, &whole_stages, "ZeRO stages also run with whole gradients (default 2,3)", "LIST" },
  { "stage", 0, 0, G_OPTION_ARG_INT, &stage, "One rank: the ZeRO stage", "S" },
  { "path", 0, 0, G_OPTION_ARG_STRING, &path, "One rank: intake or whole", "PATH" },
  { "out", 0, 0, G_OPTION_ARG_FILENAME, &out, "One rank: write the results to FILE.RANK instead of stdout", "FILE" },
  { NULL }
};

/* ------------------------------------------------------------ the model */

typedef struct {
  gchar *name;
  guint64 shape[2];
  guint n_dims;
  const gchar *module;
  guint layer;              /* 0 embeddings, 1..blocks, blocks + 1 ln_f */
  guint64 numel;
} Tensor;

static void
tensor_clear (gpointer data)
{
  g_free (((Tensor *) data)->name);
}

static void
add_tensor (GArray *model, guint layer, const gchar *name, const gchar *module,
            guint64 rows, guint64 cols)
{
  Tensor t = { g_strdup (name), { rows, cols }, cols ? 2 : 1, module, layer, rows * MAX (cols, 1) };

  g_array_append_val (model, t);
}

/* GPT-2's layout: token and position embeddings, pre-norm blocks of
 * attention and MLP, a final norm. */
static GArray *
make_model (void)
{
  GArray *model = g_array_new (FALSE, FALSE, sizeof (Tensor));
  guint64 h = hidden;

  g_array_set_clear_func (model, tensor_clear);
  add_tensor (model, 0, "wte.weight", "Embedding", vocab, h);
  add_tensor (model, 0, "wpe.weight", "Embedding", N_CONTEXT, h);
  for (gint b = 0; b < blocks; b++)
    {
      static const struct { const gchar *name, *module; guint rows, cols; } per_block[] = {
        /* rows and columns in multiples of hidden (0: a vector) */
        { "ln1.weight", "LayerNorm", 1, 0 }, { "ln1.bias", "LayerNorm", 1, 0 },
        { "attn.qkv.weight", "Linear", 3, 1 }, { "attn.qkv.bias", "Linear", 3, 0 },
        { "attn.proj.weight", "Linear", 1, 1 }, { "attn.proj.bias", "Linear", 1, 0 },
        { "ln2.weight", "LayerNorm", 1, 0 }, { "ln2.bias", "LayerNorm", 1, 0 },
        { "mlp.fc.weight", "Linear", 4, 1 }, { "mlp.fc.bias", "Linear", 4, 0 },
        { "mlp.proj.weight", "Linear", 1, 4 }, { "mlp.proj.bias", "Linear", 1, 0 },
      };

      for (guint i = 0; i < G_N_ELEMENTS (per_block); i++)
        {
          g_autofree gchar *name = g_strdup_printf ("h.%d.%s", b, per_block[i].name);

          add_tensor (model, b + 1, name, per_block[i].module, per_block[i].rows * h,
                      per_block[i].cols * h);
        }
    }
  add_tensor (model, blocks + 1, "ln_f.weight", "LayerNorm", h, 0);
  add_tensor (model, blocks + 1, "ln_f.bias", "LayerNorm", h, 0);
  return model;
}

static guint64
model_numel (GArray *model, guint64 *largest)
{
  guint64 total = 0;

  *largest = 0;
  for (guint i = 0; i < model->len; i++)
    {
      const Tensor *t = &g_array_index (model, Tensor, i);

      total += t->numel;
      *largest = MAX (*largest, t->numel);
    }
  return total;
}

static gchar *
config_json (guint zero_stage)
{
  guint64 h2 = (guint64) hidden * hidden;
  guint64 reduce = reduce_bucket_size > 0 ? (guint64) reduce_bucket_size : h2;
  guint64 prefetch = prefetch_bucket_size > 0 ? (guint64) prefetch_bucket_size : h2 * 9 / 10;

  /* By default Hugging Face's "auto" values for this hidden size. */
  return g_strdup_printf ("{\"bf16\": {\"enabled\": true},"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-4}},"
                          " \"gradient_clipping\": 1.0,"
                          " \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": %" G_GUINT64_FORMAT ","
                          " \"overlap_comm\": true, \"stage3_prefetch_bucket_size\": %" G_GUINT64_FORMAT ","
                          " \"stage3_param_persistence_threshold\": %d}}",
                          zero_stage, reduce, prefetch, PERSISTENCE_THRESHOLD);
}

/* ------------------------------------------------------------ one rank */

static gboolean
read_status (guint64 *hwm_kb,
             guint64 *rss_kb)
{
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;

  if (!g_file_get_contents ("/proc/self/status", &text, NULL, NULL))
    return FALSE;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      if (g_str_has_prefix (lines[i], "VmHWM:"))
        *hwm_kb = g_ascii_strtoull (lines[i] + 6, NULL, 10);
      else if (g_str_has_prefix (lines[i], "VmRSS:"))
        *rss_kb = g_ascii_strtoull (lines[i] + 6, NULL, 10);
    }
  return TRUE;
}

/* bf16 by truncation: the upper half of the float. */
static guint16
bf16_of (gfloat v)
{
  guint32 bits;

  memcpy (&bits, &v, sizeof bits);
  return (guint16) (bits >> 16);
}

static guint16 pattern[PATTERN_LEN];

static void
make_pattern (guint step, guint rank, gdouble scale)
{
  for (guint j = 0; j < PATTERN_LEN; j++)
    pattern[j] = bf16_of ((gfloat) ((gdouble) ((gint) ((j * 7 + step * 3 + rank) % 19) - 9) * 1e-4 * scale));
}

/* The backward pass's gradient of one tensor: the pattern from an offset
 * of its own, written element by element as a kernel would. */
static void
fill_grad (guint16 *dst, guint64 numel, guint seed)
{
  guint64 off = (seed * 131u) % PATTERN_LEN;

  for (guint64 i = 0; i < numel;)
    {
      guint64 n = MIN (PATTERN_LEN - off, numel - i);

      memcpy (dst + i, pattern + off, n * sizeof (guint16));
      i += n;
      off = 0;
    }
}

typedef struct {
  MixprecEngine *engine;
  GPtrArray *params;        /* MixprecParam, in registration order */
  guint n_layers;
  guint *first;             /* first tensor of each layer, n_layers + 1 */
  guint zero_stage;
  gboolean whole;
  guint16 *scratch;
  volatile guint16 sink;
} Trainer;

static gboolean
gather_layer (Trainer *t, guint layer, GError **error)
{
  for (guint i = t->first[layer]; i < t->first[layer + 1]; i++)
    if (!mixprec_engine_gather (t->engine, g_ptr_array_index (t->params, i), error))
      return FALSE;
  return TRUE;
}

static gboolean
prefetch_layer (Trainer *t, guint layer, GError **error)
{
  for (guint i = t->first[layer]; i < t->first[layer + 1]; i++)
    if (!mixprec_engine_prefetch (t->engine, g_ptr_array_index (t->params, i), error))
      return FALSE;
  return TRUE;
}

static void
release_layer (Trainer *t, guint layer)
{
  for (guint i = t->first[layer]; i < t->first[layer + 1]; i++)
    mixprec_engine_release (t->engine, g_ptr_array_index (t->params, i));
}

static gboolean
forward (Trainer *t, GError **error)
{
  for (guint l = 0; l < t->n_layers; l++)
    {
      if (!gather_layer (t, l, error))
        return FALSE;
      /* The next layer on its way while this one computes. */
      if (t->zero_stage >= 3 && l + 1 < t->n_layers && !prefetch_layer (t, l + 1, error))
        {
          release_layer (t, l);
          return FALSE;
        }
      for (guint i = t->first[l]; i < t->first[l + 1]; i++)
        {
          MixprecParam *p = g_ptr_array_index (t->params, i);
          const guint16 *w = mixprec_param_get_working_data (p);

          if (w == NULL)
            {
              g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                           "forward pass: parameter '%s' has no working copy",
                           mixprec_param_get_name (p));
              release_layer (t, l);
              return FALSE;
            }
          t->sink ^= w[0] ^ w[mixprec_param_get_numel (p) - 1];
        }
      release_layer (t, l);
    }
  return TRUE;
}

static gboolean
backward (Trainer *t, guint step, GError **error)
{
  make_pattern (step, mixprec_engine_get_rank (t->engine), mixprec_engine_get_loss_scale (t->engine));
  for (guint l = t->n_layers; l-- > 0;)
    {
      if (!gather_layer (t, l, error))
        return FALSE;
      if (t->zero_stage >= 3 && l > 0 && !prefetch_layer (t, l - 1, error))
        {
          release_layer (t, l);
          return FALSE;
        }
      for (guint i = t->first[l + 1]; i-- > t->first[l];)
        {
          MixprecParam *p = g_ptr_array_index (t->params, i);
          guint64 numel = mixprec_param_get_numel (p);
          gboolean ok;

          fill_grad (t->scratch, numel, i + step);
          if (t->whole)
            {
              g_autoptr(GBytes) bytes = g_bytes_new_static (t->scratch, numel * sizeof (guint16));

              ok = mixprec_param_set_grad (p, MIXPREC_DTYPE_BFLOAT16, bytes, error);
            }
          else
            ok = mixprec_param_reduce_grad (p, MIXPREC_DTYPE_BFLOAT16, t->scratch, error);
          if (!ok)
            {
              g_prefix_error (error, "parameter '%s': ", mixprec_param_get_name (p));
              release_layer (t, l);
              return FALSE;
            }
        }
      release_layer (t, l);
    }
  return mixprec_engine_backward_done (t->engine, error);
}

static gint
compare_doubles (gconstpointer a,
                 gconstpointer b)
{
  gdouble x = *(const gdouble *) a, y = *(const gdouble *) b;

  return (x > y) - (x < y);
}

static gdouble
median (gdouble *v, guint n)
{
  qsort (v, n, sizeof *v, compare_doubles);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Adds @buffers' planned bytes (or only the one named @only) into @sums. */
static void
add_planned (GHashTable *sums, GPtrArray *buffers, const gchar *only)
{
  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (buffers, i);
      guint64 *sum;

      if (only != NULL && !g_str_equal (b->name, only))
        continue;
      sum = g_hash_table_lookup (sums, b->name);
      if (sum == NULL)
        {
          sum = g_new0 (guint64, 1);
          g_hash_table_insert (sums, g_strdup (b->name), sum);
        }
      *sum += b->planned_bytes;
    }
}

/* The a-priori plan, buffer by buffer: the matrices and the vectors are
 * groups of their own (vectors are not decayed); under ZeRO-3 the trainer
 * holds one layer's gathered matrices at once. */
static GHashTable *
plan_buffers (GArray *model, guint zero_stage, gboolean whole, guint world, GError **error)
{
  g_autoptr(GHashTable) sums = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_autofree gchar *json = config_json (zero_stage);
  g_autofree gchar *json1 = config_json (1);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, error);
  g_autoptr(MixprecConfig) config1 = NULL;
  g_autofree guint64 *sizes = g_new (guint64, model->len);
  g_autofree guint64 *per_layer = g_new0 (guint64, blocks + 2);
  guint64 gathered = 0;

  if (config == NULL)
    return NULL;
  config1 = mixprec_config_new_from_data (json1, -1, error);
  if (config1 == NULL)
    return NULL;
  for (guint i = 0; i < model->len; i++)
    {
      const Tensor *t = &g_array_index (model, Tensor, i);

      if (t->n_dims == 2 && t->numel >= PERSISTENCE_THRESHOLD)
        per_layer[t->layer] += t->numel;
    }
  for (gint l = 0; l < blocks + 2; l++)
    gathered = MAX (gathered, per_layer[l]);
  for (guint matrices = 0; matrices < 2; matrices++)
    {
      g_autoptr(GPtrArray) plan = NULL;
      guint n = 0;

      for (guint i = 0; i < model->len; i++)
        {
          const Tensor *t = &g_array_index (model, Tensor, i);

          if ((t->n_dims == 2) == (matrices == 1))
            sizes[n++] = t->numel;
        }
      plan = mixprec_memory_plan_list_buffers (config, sizes, n, world, gathered, error);
      if (plan == NULL)
        return NULL;
      add_planned (sums, plan, NULL);
      if (whole && zero_stage >= 2)
        {
          /* Gradients written whole take the whole buffer ZeRO-1 has. */
          g_autoptr(GPtrArray) plan1 = mixprec_memory_plan_list_buffers (config1, sizes, n, world,
                                                                         gathered, error);

          if (plan1 == NULL)
            return NULL;
          add_planned (sums, plan1, "gradients");
        }
    }
  return g_steal_pointer (&sums);
}

static int
rank_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GArray) model = make_model ();
  g_autoptr(GPtrArray) params = g_ptr_array_new ();
  g_autoptr(GPtrArray) held = NULL;
  g_autoptr(GHashTable) planned = NULL;
  g_autoptr(MixprecMemoryReport) ds = NULL;
  g_autoptr(GString) report = g_string_new (NULL);
  g_autofree guint16 *init = NULL;
  g_autofree guint16 *scratch = NULL;
  g_autofree gdouble *t_iter = g_new (gdouble, steps);
  g_autofree gdouble *t_fwd = g_new (gdouble, steps);
  g_autofree gdouble *t_bwd = g_new (gdouble, steps);
  g_autofree gdouble *t_opt = g_new (gdouble, steps);
  g_autofree guint *first = NULL;
  guint64 base_hwm = 0, base_rss = 0, prep_hwm = 0, prep_rss = 0, hwm = 0, rss = 0;
  guint64 total, largest, held_peak = 0, held_layout = 0, plan_sum = 0;
  guint rank, world;
  Trainer t = { 0 };

  if (path == NULL || (!g_str_equal (path, "intake") && !g_str_equal (path, "whole")) ||
      stage < 0 || stage > 3)
    {
      g_printerr ("bench-zero-memory: a rank needs --stage 0..3 and --path intake|whole\n");
      return 2;
    }
  total = model_numel (model, &largest);

  /* The trainer's own buffers, resident before the baseline: one set of
   * initial values every registration points into, one gradient scratch. */
  init = g_new (guint16, largest);
  for (guint64 i = 0; i < largest; i++)
    init[i] = bf16_of ((gfloat) ((gint) (i % 251) - 125) * 1e-4f);
  scratch = g_new (guint16, largest);
  memset (scratch, 0, largest * sizeof (guint16));

  json = config_json (stage);
  config = mixprec_config_new_from_data (json, -1, &error);
  if (config == NULL)
    {
      g_printerr ("bench-zero-memory: config: %s\n", error->message);
      return 1;
    }
  engine = mixprec_engine_new (config, &error);
  if (engine == NULL)
    {
      g_printerr ("bench-zero-memory: %s\n", error->message);
      return 1;
    }
  rank = mixprec_engine_get_rank (engine);
  world = mixprec_engine_get_world_size (engine);
  if (!read_status (&base_hwm, &base_rss))
    {
      g_printerr ("bench-zero-memory: rank %u: cannot read /proc/self/status\n", rank);
      return 1;
    }

  first = g_new0 (guint, blocks + 3);
  for (guint i = 0; i < model->len; i++)
    {
      const Tensor *te = &g_array_index (model, Tensor, i);
      g_autoptr(GBytes) bytes = g_bytes_new_static (init, te->numel * sizeof (guint16));
      MixprecParam *p = mixprec_engine_register_param (engine, te->name, te->shape, te->n_dims,
                                                       te->module, MIXPREC_DTYPE_BFLOAT16, bytes,
                                                       &error);

      if (p == NULL)
        {
          g_printerr ("bench-zero-memory: rank %u: registering '%s': %s\n", rank, te->name,
                      error->message);
          return 1;
        }
      g_ptr_array_add (params, p);
      first[te->layer + 1] = i + 1;
    }
  if (!mixprec_engine_prepare (engine, &error))
    {
      g_printerr ("bench-zero-memory: rank %u: prepare: %s\n", rank, error->message);
      return 1;
    }
  read_status (&prep_hwm, &prep_rss);

  t.engine = engine;
  t.params = params;
  t.n_layers = blocks + 2;
  t.first = first;
  t.zero_stage = mixprec_engine_get_zero_stage (engine);
  t.whole = g_str_equal (path, "whole");
  t.scratch = scratch;
  for (gint k = 0; k < warmup + steps; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;
      gint64 t0, t1, t2, t3;

      t0 = g_get_monotonic_time ();
      if (!forward (&t, &error))
        {
          g_printerr ("bench-zero-memory: rank %u: step %d: forward: %s\n", rank, k, error->message);
          return 1;
        }
      t1 = g_get_monotonic_time ();
      if (!backward (&t, k, &error))
        {
          g_printerr ("bench-zero-memory: rank %u: step %d: backward: %s\n", rank, k, error->message);
          return 1;
        }
      t2 = g_get_monotonic_time ();
      r = mixprec_engine_step (engine, &error);
      if (r == NULL)
        {
          g_printerr ("bench-zero-memory: rank %u: step %d: %s\n", rank, k, error->message);
          return 1;
        }
      t3 = g_get_monotonic_time ();
      if (k >= warmup)
        {
          t_iter[k - warmup] = (t3 - t0) / 1e3;
          t_fwd[k - warmup] = (t1 - t0) / 1e3;
          t_bwd[k - warmup] = (t2 - t1) / 1e3;
          t_opt[k - warmup] = (t3 - t2) / 1e3;
        }
    }
  read_status (&hwm, &rss);

  held = mixprec_engine_list_buffers (engine);
  planned = plan_buffers (model, stage, t.whole, world, &error);
  if (planned == NULL)
    {
      g_printerr ("bench-zero-memory: rank %u: memory plan: %s\n", rank, error->message);
      return 1;
    }
  ds = mixprec_memory_plan_new_deepspeed (config, total, world, &error);
  if (ds == NULL)
    {
      g_printerr ("bench-zero-memory: rank %u: DeepSpeed's formula: %s\n", rank, error->message);
      return 1;
    }
  {
    GHashTableIter iter;
    gpointer value;

    g_hash_table_iter_init (&iter, planned);
    while (g_hash_table_iter_next (&iter, NULL, &value))
      plan_sum += *(guint64 *) value;
  }
  for (guint i = 0; i < held->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (held, i);
      guint64 *plan = g_hash_table_lookup (planned, b->name);

      held_peak += b->peak_bytes;
      held_layout += b->planned_bytes;
      g_string_append_printf (report, "buffer\t%s\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT "\t%"
                              G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT "\n", b->name, b->bytes,
                              b->peak_bytes, b->planned_bytes, plan != NULL ? *plan : 0);
      g_hash_table_remove (planned, b->name);
    }
  {
    GHashTableIter iter;
    gpointer key, value;

    /* Planned but never allocated. */
    g_hash_table_iter_init (&iter, planned);
    while (g_hash_table_iter_next (&iter, &key, &value))
      if (*(guint64 *) value != 0)
        g_string_append_printf (report, "buffer\t%s\t0\t0\t0\t%" G_GUINT64_FORMAT "\n",
                                (const gchar *) key, *(guint64 *) value);
  }

  {
    g_autofree gchar *line =
      g_strdup_printf ("rank\t%d\t%s\t%u\t%u\t%" G_GUINT64_FORMAT "\t%u"
                       "\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT
                       "\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT
                       "\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT "\t%" G_GUINT64_FORMAT
                       "\t%.2f\t%.2f\t%.2f\t%.2f\t%u\n",
                       stage, path, rank, world, total, model->len,
                       base_hwm, base_rss, prep_hwm, hwm, rss,
                       held_peak, held_layout, plan_sum, ds->total,
                       median (t_iter, steps), median (t_fwd, steps), median (t_bwd, steps),
                       median (t_opt, steps), mixprec_get_num_threads ());

    g_string_prepend (report, line);
  }

  if (out != NULL)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, rank);

      if (!g_file_set_contents (file, report->str, report->len, &error))
        {
          g_printerr ("bench-zero-memory: rank %u: %s\n", rank, error->message);
          return 1;
        }
    }
  else
    g_print ("%s", report->str);
  return 0;
}

/* ------------------------------------------------------------ the driver */

/* One run: --ranks copies of this program at @zero_stage on @which path;
 * when one fails the others are stopped rather than left waiting for it. */
static gboolean
run_ranks (guint zero_stage, const gchar *which, const gchar *file)
{
  g_autofree gchar *self = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree gchar *port = g_strdup_printf ("%u", mp_free_port ());
  g_autofree gchar *world = g_strdup_printf ("%d", ranks);
  g_autofree gchar *s_stage = g_strdup_printf ("%u", zero_stage);
  g_autofree gchar *s_blocks = g_strdup_printf ("%d", blocks);
  g_autofree gchar *s_hidden = g_strdup_printf ("%d", hidden);
  g_autofree gchar *s_vocab = g_strdup_printf ("%d", vocab);
  g_autofree gchar *s_warmup = g_strdup_printf ("%d", warmup);
  g_autofree gchar *s_steps = g_strdup_printf ("%d", steps);
  g_autofree gchar *s_reduce = g_strdup_printf ("%" G_GINT64_FORMAT, reduce_bucket_size);
  g_autofree gchar *s_prefetch = g_strdup_printf ("%" G_GINT64_FORMAT, prefetch_bucket_size);
  gchar *argv[] = { self, "--stage", s_stage, "--path", (gchar *) which, "--out", (gchar *) file,
                    "--blocks", s_blocks, "--hidden", s_hidden, "--vocab", s_vocab,
                    "--warmup", s_warmup, "--steps", s_steps, "--reduce-bucket-size", s_reduce,
                    "--prefetch-bucket-size", s_prefetch, NULL };
  g_autofree GPid *pids = g_new0 (GPid, ranks);
  gint left = 0;
  gboolean ok = TRUE;

  for (gint r = 0; r < ranks; r++)
    {
      g_auto(GStrv) env = g_get_environ ();
      g_autofree gchar *rank = g_strdup_printf ("%d", r);
      g_autoptr(GError) error = NULL;

      env = g_environ_setenv (env, "MIXPREC_RANK", rank, TRUE);
      env = g_environ_setenv (env, "MIXPREC_WORLD_SIZE", world, TRUE);
      env = g_environ_setenv (env, "MIXPREC_MASTER_ADDR", "127.0.0.1", TRUE);
      env = g_environ_setenv (env, "MIXPREC_MASTER_PORT", port, TRUE);
      env = g_environ_setenv (env, "MIXPREC_COMM_TIMEOUT_MS", "120000", FALSE);
      if (!g_spawn_async (NULL, argv, env, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL, &pids[r], &error))
        {
          g_printerr ("bench-zero-memory: starting rank %d: %s\n", r, error->message);
          ok = FALSE;
          break;
        }
      left++;
    }
  if (!ok)
    for (gint r = 0; r < left; r++)
      kill (pids[r], SIGTERM);
  while (left > 0)
    {
      int status = 0;
      pid_t pid = waitpid (-1, &status, 0);
      gint r;

      if (pid < 0)
        break;
      for (r = 0; r < ranks && pids[r] != pid; r++)
        ;
      if (r == ranks)
        continue;
      pids[r] = 0;
      left--;
      if (WIFEXITED (status) && WEXITSTATUS (status) == 0)
        continue;
      if (WIFSIGNALED (status))
        g_printerr ("bench-zero-memory: stage %u %s: rank %d killed by signal %d\n",
                    zero_stage, which, r, WTERMSIG (status));
      else
        g_printerr ("bench-zero-memory: stage %u %s: rank %d exited with status %d\n",
                    zero_stage, which, r, WEXITSTATUS (status));
      if (ok)
        for (gint o = 0; o < ranks; o++)
          if (pids[o] != 0)
            kill (pids[o], SIGTERM);
      ok = FALSE;
    }
  return ok;
}

typedef struct {
  guint stage;
  gchar *path;
  gchar **fields;           /* the "rank" line */
  GPtrArray *buffers;       /* GStrv of "buffer" lines */
} Row;

static void
row_free (gpointer data)
{
  Row *row = data;

  g_free (row->path);
  g_strfreev (row->fields);
  g_ptr_array_unref (row->buffers);
  g_free (row);
}

static Row *
read_row (const gchar *file, guint zero_stage, const gchar *which)
{
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;
  Row *row;

  if (!g_file_get_contents (file, &text, NULL, NULL))
    return NULL;
  row = g_new0 (Row, 1);
  row->stage = zero_stage;
  row->path = g_strdup (which);
  row->buffers = g_ptr_array_new_with_free_func ((GDestroyNotify) g_strfreev);
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    {
      gchar **f = g_strsplit (lines[i], "\t", -1);

      if (g_str_equal (f[0] != NULL ? f[0] : "", "rank") && g_strv_length (f) >= 21 && row->fields == NULL)
        row->fields = f;
      else if (g_str_equal (f[0] != NULL ? f[0] : "", "buffer") && g_strv_length (f) >= 6)
        g_ptr_array_add (row->buffers, f);
      else
        g_strfreev (f);
    }
  if (row->fields == NULL)
    {
      row_free (row);
      return NULL;
    }
  return row;
}

/* The "rank" line's fields. */
enum {
  F_STAGE = 1, F_PATH, F_RANK, F_WORLD, F_PARAMS, F_TENSORS, F_BASE_HWM, F_BASE_RSS,
  F_PREP_HWM, F_HWM, F_RSS, F_HELD_PEAK, F_HELD_LAYOUT, F_PLAN, F_DS,
  F_ITER, F_FWD, F_BWD, F_OPT, F_THREADS,
};

static gdouble
num (Row *row, guint field)
{
  return g_ascii_strtod (row->fields[field], NULL);
}

#define MIB (1024.0 * 1024.0)

static void
print_table (GPtrArray *rows, guint64 n_params, guint n_tensors, guint64 largest)
{
  g_autofree gchar *json = config_json (3);

  g_print ("# GPT-like model: %d blocks, hidden %d, vocab %d, context %d: %" G_GUINT64_FORMAT
           " parameters in %u tensors; %d ranks on this host (UCX), bf16 + FP32 master, AdamW,\n"
           "# %d warm-up + %d timed steps, one micro-step each; %s threads per rank\n"
           "# config (stage varies): %s\n",
           blocks, hidden, vocab, N_CONTEXT, n_params, n_tensors, ranks, warmup, steps,
           rows->len > 0 ? ((Row *) g_ptr_array_index (rows, 0))->fields[F_THREADS] : "?", json);
  g_print ("# MiB per rank. VmHWM: peak resident; base: VmHWM after mixprec_engine_new() (libraries,\n"
           "# UCX, the trainer's 2 buffers of %.1f MiB each); prepared: VmHWM after mixprec_engine_prepare()\n"
           "# - base; engine = VmHWM - base, the engine's peak; acct: the sum of the\n"
           "# engine's buffers' peak_bytes; plan: mixprec_memory_plan_list_buffers() (2 groups, 1 layer\n"
           "# gathered); DS: mixprec_memory_plan_new_deepspeed(); B/p: bytes per parameter (of %" G_GUINT64_FORMAT ");\n"
           "# ms: median of the timed steps (iter = fwd + bwd, backward_done() included, + opt = step())\n\n",
           (gdouble) (largest * sizeof (guint16)) / MIB, n_params);
  g_print ("%-5s %-6s %4s %8s %7s %8s %8s %8s %8s %6s %8s %6s %6s %6s %8s %7s %8s %7s\n",
           "stage", "path", "rank", "VmHWM", "base", "prepared", "engine", "acct", "plan", "ratio",
           "DS", "B/p", "B/p", "B/p", "iter-ms", "fwd-ms", "bwd-ms", "opt-ms");
  g_print ("%-5s %-6s %4s %8s %7s %8s %8s %8s %8s %6s %8s %6s %6s %6s %8s %7s %8s %7s\n",
           "", "", "", "", "", "", "", "", "", "eng/pl", "", "engine", "plan", "DS", "", "", "", "");
  for (guint i = 0; i < rows->len; i++)
    {
      Row *row = g_ptr_array_index (rows, i);
      gdouble hwm = num (row, F_HWM) * 1024, base = num (row, F_BASE_HWM) * 1024;
      gdouble engine = hwm - base, plan = num (row, F_PLAN), ds = num (row, F_DS);

      g_print ("%-5u %-6s %4s %8.1f %7.1f %8.1f %8.1f %8.1f %8.1f %6.3f %8.1f %6.2f %6.2f %6.2f %8.1f %7.1f %8.1f %7.1f\n",
               row->stage, row->path, row->fields[F_RANK], hwm / MIB, base / MIB,
               num (row, F_PREP_HWM) * 1024 / MIB - base / MIB, engine / MIB,
               num (row, F_HELD_PEAK) / MIB, plan / MIB, plan > 0 ? engine / plan : 0, ds / MIB,
               engine / n_params, plan / n_params, ds / n_params, num (row, F_ITER),
               num (row, F_FWD), num (row, F_BWD), num (row, F_OPT));
    }

  g_print ("\n# rank 0's buffers, MiB: held at the end, the most held at once (peak_bytes), the layout's\n"
           "# planned_bytes, the a-priori plan\n");
  for (guint i = 0; i < rows->len; i++)
    {
      Row *row = g_ptr_array_index (rows, i);

      if (!g_str_equal (row->fields[F_RANK], "0"))
        continue;
      g_print ("stage %u %s:\n", row->stage, row->path);
      for (guint j = 0; j < row->buffers->len; j++)
        {
          gchar **b = g_ptr_array_index (row->buffers, j);

          g_print ("  %-28s %9.2f %9.2f %9.2f %9.2f\n", b[1], g_ascii_strtod (b[2], NULL) / MIB,
                   g_ascii_strtod (b[3], NULL) / MIB, g_ascii_strtod (b[4], NULL) / MIB,
                   g_ascii_strtod (b[5], NULL) / MIB);
        }
      g_print ("  %-28s %9s %9.2f %9.2f %9.2f\n", "sum", "", num (row, F_HELD_PEAK) / MIB,
               num (row, F_HELD_LAYOUT) / MIB, num (row, F_PLAN) / MIB);
    }

  g_print ("\n# step time, per-parameter intake against whole gradients (slowest rank's median)\n");
  for (guint s = 0; s <= 3; s++)
    {
      gdouble iter[2] = { 0, 0 }, bwd[2] = { 0, 0 };
      gboolean seen[2] = { FALSE, FALSE };

      for (guint i = 0; i < rows->len; i++)
        {
          Row *row = g_ptr_array_index (rows, i);
          guint k = g_str_equal (row->path, "whole");

          if (row->stage != s)
            continue;
          seen[k] = TRUE;
          iter[k] = MAX (iter[k], num (row, F_ITER));
          bwd[k] = MAX (bwd[k], num (row, F_BWD));
        }
      if (seen[0] && seen[1])
        g_print ("stage %u: iteration %.1f ms intake, %.1f ms whole (whole / intake %.2fx); "
                 "backward %.1f ms intake, %.1f ms whole (%.2fx)\n",
                 s, iter[0], iter[1], iter[1] / iter[0], bwd[0], bwd[1], bwd[1] / bwd[0]);
    }
}

static gboolean
parse_stages (const gchar *text, gboolean *wanted)
{
  g_auto(GStrv) items = g_strsplit (text, ",", -1);

  for (guint i = 0; items[i] != NULL; i++)
    {
      gchar *end = NULL;
      guint64 s;

      if (items[i][0] == '\0')
        continue;
      s = g_ascii_strtoull (items[i], &end, 10);
      if (end == items[i] || *end != '\0' || s > 3)
        return FALSE;
      wanted[s] = TRUE;
    }
  return TRUE;
}

static int
driver_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GArray) model = make_model ();
  g_autoptr(GPtrArray) rows = g_ptr_array_new_with_free_func (row_free);
  g_autofree gchar *dir = g_dir_make_tmp ("bench-zero-memory-XXXXXX", &error);
  gboolean intake[4] = { FALSE }, whole[4] = { FALSE };
  guint64 total, largest;
  int result = 0;

  if (dir == NULL)
    {
      g_printerr ("bench-zero-memory: %s\n", error->message);
      return 1;
    }
  if (!parse_stages (stages != NULL ? stages : "0,1,2,3", intake) ||
      !parse_stages (whole_stages != NULL ? whole_stages : "2,3", whole))
    {
      g_printerr ("bench-zero-memory: --stages and --whole-stages take stages 0 to 3, comma-separated\n");
      return 2;
    }
  total = model_numel (model, &largest);
  g_printerr ("# %" G_GUINT64_FORMAT " parameters in %u tensors, %d ranks per run\n", total,
              model->len, ranks);
  for (guint s = 0; s <= 3; s++)
    for (guint k = 0; k < 2; k++)
      {
        const gchar *which = k ? "whole" : "intake";
        g_autofree gchar *file = NULL;
        gint64 start = g_get_monotonic_time ();

        if (!(k ? whole : intake)[s])
          continue;
        file = g_strdup_printf ("%s/stage%u-%s", dir, s, which);
        g_printerr ("# stage %u, %s ...", s, which);
        if (!run_ranks (s, which, file))
          {
            g_printerr ("bench-zero-memory: stage %u %s failed\n", s, which);
            result = 1;
          }
        g_printerr (" %.0f s\n", (g_get_monotonic_time () - start) / 1e6);
        for (gint r = 0; r < ranks; r++)
          {
            g_autofree gchar *rank_file = g_strdup_printf ("%s.%d", file, r);
            Row *row = read_row (rank_file, s, which);

            if (row != NULL)
              g_ptr_array_add (rows, row);
            else if (result == 0)
              {
                g_printerr ("bench-zero-memory: stage %u %s: no results from rank %d\n", s, which, r);
                result = 1;
              }
            g_unlink (rank_file);
          }
      }
  g_rmdir (dir);
  print_table (rows, total, model->len, largest);
  return result;
}

int
main (int argc, char **argv)
{
  g_autoptr(GOptionContext) context = g_option_context_new ("— peak memory per ZeRO stage");
  g_autoptr(GError) error = NULL;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("bench-zero-memory: %s\n", error->message);
      return 2;
    }
  if (ranks < 1 || blocks < 1 || hidden < 1 || vocab < 1 || warmup < 0 || steps < 1 ||
      reduce_bucket_size < 0 || prefetch_bucket_size < 0)
    {
      g_printerr ("bench-zero-memory: --ranks, --blocks, --hidden, --vocab and --steps must be "
                  "positive, --warmup and the bucket sizes at least 0 (0: the default)\n");
      return 2;
    }
  if (g_getenv ("MIXPREC_RANK") == NULL)
    return driver_main ();
  return rank_main ();
}
