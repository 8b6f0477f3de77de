/* gpt2-data.c — bytes of a text file as training and validation windows.
 * The file is mapped, never copied: any text will do, and the default is
 * one that every Debian system with the wamerican package has. */
#include <string.h>

#include "gpt2-data.h"

#define MIN_WINDOWS 10

gboolean
gpt2_text_load (Gpt2Text    *text,
                const gchar *path,
                guint        seq_len,
                GError     **error)
{
  const guint8 *bytes;
  gsize n, window = (gsize) seq_len + 1;

  memset (text, 0, sizeof *text);
  text->file = g_mapped_file_new (path, FALSE, error);
  if (text->file == NULL)
    return FALSE;
  bytes = (const guint8 *) g_mapped_file_get_contents (text->file);
  n = g_mapped_file_get_length (text->file);
  text->n_val = n / 10;
  text->n_train = n - text->n_val;
  text->train = bytes;
  text->val = bytes + text->n_train;
  if (text->n_val < MIN_WINDOWS * window)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: %zu bytes is too short for a context of %u: its last tenth, the "
                   "validation text, must hold %d windows of %zu bytes", path, n, seq_len,
                   MIN_WINDOWS, window);
      gpt2_text_clear (text);
      return FALSE;
    }
  return TRUE;
}

void
gpt2_text_clear (Gpt2Text *text)
{
  g_clear_pointer (&text->file, g_mapped_file_unref);
  memset (text, 0, sizeof *text);
}

void
gpt2_text_sample (const Gpt2Text *text,
                  CharlmRng      *rng,
                  guint           batch,
                  guint           seq_len,
                  guint8         *tokens,
                  guint8         *targets)
{
  gsize starts = text->n_train - seq_len;

  for (guint b = 0; b < batch; b++)
    {
      gsize at = (gsize) (charlm_rng_next (rng) % starts);

      memcpy (tokens + (gsize) b * seq_len, text->train + at, seq_len);
      memcpy (targets + (gsize) b * seq_len, text->train + at + 1, seq_len);
    }
}

gsize
gpt2_text_n_val_windows (const Gpt2Text *text,
                         guint           seq_len)
{
  return (text->n_val - 1) / seq_len;
}

void
gpt2_text_val_window (const Gpt2Text *text,
                      gsize           index,
                      guint           seq_len,
                      guint8         *tokens,
                      guint8         *targets)
{
  const guint8 *at = text->val + index * seq_len;

  g_return_if_fail (index < gpt2_text_n_val_windows (text, seq_len));
  memcpy (tokens, at, seq_len);
  memcpy (targets, at + 1, seq_len);
}
