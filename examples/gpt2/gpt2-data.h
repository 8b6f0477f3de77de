/* gpt2-data.h — a text file as bytes: a training part, a validation part
 * (the file's last tenth), and the windows the trainer reads from them. */
#pragma once

#include <glib.h>

#include "charlm-data.h"

G_BEGIN_DECLS

typedef struct
{
  GMappedFile *file;
  const guint8 *train;
  gsize n_train;
  const guint8 *val;
  gsize n_val;
} Gpt2Text;

/* Fails with a GError naming @path when it cannot be read or holds fewer
 * than ten windows of @seq_len + 1 bytes in each part. */
gboolean gpt2_text_load   (Gpt2Text      *text,
                           const gchar   *path,
                           guint          seq_len,
                           GError       **error);
void     gpt2_text_clear  (Gpt2Text      *text);
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Gpt2Text, gpt2_text_clear)

/* @batch windows of @seq_len + 1 bytes of the training part, each at a
 * position drawn from @rng: tokens are a window's first seq_len bytes,
 * targets its last seq_len. Every rank draws the same windows. */
void     gpt2_text_sample (const Gpt2Text *text,
                           CharlmRng      *rng,
                           guint           batch,
                           guint           seq_len,
                           guint8         *tokens,
                           guint8         *targets);

/* Window @index of the validation part (consecutive, not overlapping;
 * gpt2_text_n_val_windows() of them). */
gsize    gpt2_text_n_val_windows (const Gpt2Text *text,
                                  guint           seq_len);
void     gpt2_text_val_window    (const Gpt2Text *text,
                                  gsize           index,
                                  guint           seq_len,
                                  guint8         *tokens,
                                  guint8         *targets);

G_END_DECLS
