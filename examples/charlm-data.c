/* charlm-data.c — reads the word list (one word a line, as Debian's
 * wamerican ships it), keeps the plain lowercase words, splits them into
 * train and val by a hash of the word, and cuts each word into
 * makemore-style examples. */
#include <math.h>
#include <string.h>

#include "charlm-data.h"

#define SPLITMIX_GAMMA G_GUINT64_CONSTANT (0x9E3779B97F4A7C15)

void
charlm_rng_init (CharlmRng *rng,
                 guint64    seed,
                 guint64    stream)
{
  /* Streams are far apart so that the initial weights and the batch
   * order never share numbers, whatever the seed. */
  rng->state = seed + stream * G_GUINT64_CONSTANT (0xD1B54A32D192ED03);
}

guint64
charlm_rng_next (CharlmRng *rng)
{
  guint64 z;

  rng->state += SPLITMIX_GAMMA;
  z = rng->state;
  z = (z ^ (z >> 30)) * G_GUINT64_CONSTANT (0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * G_GUINT64_CONSTANT (0x94D049BB133111EB);
  return z ^ (z >> 31);
}

gdouble
charlm_rng_uniform (CharlmRng *rng)
{
  /* The top 53 bits: every double in [0, 1) on a 2^-53 grid. */
  return (gdouble) (charlm_rng_next (rng) >> 11) * 0x1p-53;
}

gdouble
charlm_rng_normal (CharlmRng *rng)
{
  /* Box-Muller, one normal per pair of uniforms; 1 - u keeps log away
   * from 0. */
  gdouble u1 = charlm_rng_uniform (rng);
  gdouble u2 = charlm_rng_uniform (rng);

  return sqrt (-2.0 * log (1.0 - u1)) * cos (2.0 * G_PI * u2);
}

/* One word in ten goes to val, chosen by its 32-bit FNV-1a hash: the split
 * depends on nothing but the word, so it survives reordering or trimming
 * the list and charlm.py can reproduce it. */
gboolean
charlm_word_is_val (const gchar *word,
                    gsize        length)
{
  guint32 h = 2166136261u;

  for (gsize i = 0; i < length; i++)
    {
      h ^= (guint8) word[i];
      h *= 16777619u;
    }
  return h % 10 == 0;
}

static gboolean
word_is_plain (const gchar *line,
               gsize        length)
{
  if (length == 0)
    return FALSE;
  for (gsize i = 0; i < length; i++)
    if (line[i] < 'a' || line[i] > 'z')
      return FALSE;
  return TRUE;
}

static void
examples_alloc (CharlmExamples *examples,
                guint           block_size,
                gsize           n)
{
  examples->block_size = block_size;
  examples->n = 0;
  examples->contexts = g_new (guint8, n * block_size);
  examples->targets = g_new (guint8, n);
}

/* "cat" with block 3 gives ... -> c, ..c -> a, .ca -> t, cat -> '.'. */
static void
examples_add_word (CharlmExamples *examples,
                   const gchar    *word,
                   gsize           length)
{
  guint block = examples->block_size;
  guint8 context[256];

  memset (context, 0, block);
  for (gsize i = 0; i <= length; i++)
    {
      guint8 next = i < length ? (guint8) (word[i] - 'a' + 1) : 0;

      memcpy (examples->contexts + examples->n * block, context, block);
      examples->targets[examples->n] = next;
      examples->n++;
      memmove (context, context + 1, block - 1);
      context[block - 1] = next;
    }
}

/* Calls @func for every accepted word; returns the number of lines
 * refused. */
static guint
for_each_word (const gchar *text,
               gsize        text_length,
               void       (*func) (const gchar *word, gsize length, gpointer data),
               gpointer     data)
{
  const gchar *p = text;
  const gchar *end = text + text_length;
  guint skipped = 0;

  while (p < end)
    {
      const gchar *nl = memchr (p, '\n', end - p);
      const gchar *line_end = nl ? nl : end;
      gsize length = line_end - p;

      if (length > 0 && p[length - 1] == '\r')
        length--;
      if (word_is_plain (p, length))
        func (p, length, data);
      else if (length > 0)
        skipped++;
      p = line_end + 1;
    }
  return skipped;
}

typedef struct
{
  CharlmDataset *dataset;
  gsize n_train;
  gsize n_val;
} Counts;

static void
count_word (const gchar *word,
            gsize        length,
            gpointer     data)
{
  Counts *counts = data;

  if (charlm_word_is_val (word, length))
    {
      counts->n_val += length + 1;
      counts->dataset->n_val_words++;
    }
  else
    {
      counts->n_train += length + 1;
      counts->dataset->n_train_words++;
    }
}

static void
add_word (const gchar *word,
          gsize        length,
          gpointer     data)
{
  CharlmDataset *dataset = data;

  examples_add_word (charlm_word_is_val (word, length) ? &dataset->val : &dataset->train,
                     word, length);
}

gboolean
charlm_dataset_load (CharlmDataset *dataset,
                     const gchar   *path,
                     guint          block_size,
                     GError       **error)
{
  g_autofree gchar *text = NULL;
  gsize text_length = 0;
  Counts counts = { dataset, 0, 0 };

  g_return_val_if_fail (block_size > 0 && block_size <= 256, FALSE);

  memset (dataset, 0, sizeof *dataset);
  if (!g_file_get_contents (path, &text, &text_length, error))
    {
      g_prefix_error (error, "cannot read the word list (install Debian's wamerican "
                      "package or pass --words FILE): ");
      return FALSE;
    }

  dataset->n_skipped_lines = for_each_word (text, text_length, count_word, &counts);
  if (dataset->n_train_words == 0 || dataset->n_val_words == 0)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: found %u training and %u validation words; the trainer needs "
                   "both, so the file must hold lines of lowercase a-z letters only "
                   "(other lines are skipped)",
                   path, dataset->n_train_words, dataset->n_val_words);
      return FALSE;
    }

  examples_alloc (&dataset->train, block_size, counts.n_train);
  examples_alloc (&dataset->val, block_size, counts.n_val);
  for_each_word (text, text_length, add_word, dataset);
  g_assert (dataset->train.n == counts.n_train && dataset->val.n == counts.n_val);
  return TRUE;
}

/* @n examples drawn uniformly with replacement: one number from @rng
 * each, taken modulo the count (the bias is below 2^-40). */
void
charlm_examples_sample (const CharlmExamples *examples,
                        CharlmRng            *rng,
                        guint                 n,
                        guint8               *contexts,
                        guint8               *targets)
{
  guint block = examples->block_size;

  for (guint i = 0; i < n; i++)
    {
      gsize k = charlm_rng_next (rng) % examples->n;

      memcpy (contexts + (gsize) i * block, examples->contexts + k * block, block);
      targets[i] = examples->targets[k];
    }
}

void
charlm_dataset_clear (CharlmDataset *dataset)
{
  g_clear_pointer (&dataset->train.contexts, g_free);
  g_clear_pointer (&dataset->train.targets, g_free);
  g_clear_pointer (&dataset->val.contexts, g_free);
  g_clear_pointer (&dataset->val.targets, g_free);
}
