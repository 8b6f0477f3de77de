/* charlm-data.h — the word list turned into (context, next character)
 * examples, and the random numbers the trainer draws. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Token 0 is '.', which pads the context before a word and ends it;
 * tokens 1..26 are 'a'..'z'. */
#define CHARLM_VOCAB 27

/* splitmix64 as a counter: value i of a stream is mix(state + i * gamma).
 * A counter-based generator lets charlm.py draw the same numbers with
 * vectorized numpy, so both trainers start from the same weights and see
 * the same batches. */
typedef struct
{
  guint64 state;
} CharlmRng;

void    charlm_rng_init    (CharlmRng *rng,
                            guint64    seed,
                            guint64    stream);
guint64 charlm_rng_next    (CharlmRng *rng);
gdouble charlm_rng_uniform (CharlmRng *rng);
gdouble charlm_rng_normal  (CharlmRng *rng);

typedef struct
{
  guint   block_size;
  gsize   n;
  guint8 *contexts;          /* n rows of block_size tokens, oldest first */
  guint8 *targets;           /* n tokens */
} CharlmExamples;

typedef struct
{
  CharlmExamples train;
  CharlmExamples val;
  guint n_train_words;
  guint n_val_words;
  guint n_skipped_lines;     /* uppercase, possessives, accents... */
} CharlmDataset;

gboolean charlm_dataset_load   (CharlmDataset *dataset,
                                const gchar   *path,
                                guint          block_size,
                                GError       **error);
void     charlm_dataset_clear  (CharlmDataset *dataset);
gboolean charlm_word_is_val    (const gchar   *word,
                                gsize          length);
void     charlm_examples_sample (const CharlmExamples *examples,
                                 CharlmRng            *rng,
                                 guint                 n,
                                 guint8               *contexts,
                                 guint8               *targets);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (CharlmDataset, charlm_dataset_clear)

G_END_DECLS
