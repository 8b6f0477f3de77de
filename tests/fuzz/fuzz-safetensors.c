/* fuzz-safetensors.c — a safetensors file as the checkpoint loader opens
 * it: the 8-byte length, the JSON header (dtypes, shapes, offsets, the
 * tiling of the data), then every float32 tensor read back. The input is
 * the whole file, written to a file of a private temporary folder (a real
 * file: the loader refuses links, /proc/self/fd/N among them). */
#include "config.h"

#include <fcntl.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "mixprec.h"
#include "mixprec-safetensors-private.h"
#include "fuzz-common.h"

/* The largest tensor read back: the header may claim more, within a file
 * that is no longer than the input. */
#define MAX_READ_BYTES (1u << 20)

static gchar *shard_path;

static void
remove_shard (void)
{
  g_autofree gchar *dir = g_path_get_dirname (shard_path);

  g_unlink (shard_path);
  g_rmdir (dir);
}

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  g_autofree gchar *dir = g_dir_make_tmp ("fuzz-safetensors-XXXXXX", NULL);

  fuzz_init ();
  g_assert (dir != NULL);
  shard_path = g_build_filename (dir, "shard.safetensors", NULL);
  atexit (remove_shard);
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GError) error = NULL;
  _MixprecSafetensors *st;
  GPtrArray *tensors;
  int fd = open (shard_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

  g_assert (fd >= 0);
  g_assert (write (fd, data, size) == (ssize_t) size);
  close (fd);
  st = _mixprec_safetensors_open (shard_path, &error);
  if (st == NULL)
    {
      g_assert (error != NULL && error->message != NULL);
      return 0;
    }
  tensors = _mixprec_safetensors_get_tensors (st);
  for (guint i = 0; i < tensors->len; i++)
    {
      const _MixprecSafetensorsTensor *t = g_ptr_array_index (tensors, i);
      g_autoptr(GError) read_error = NULL;
      gsize n = MIN (t->numel, MAX_READ_BYTES / sizeof (gfloat));
      g_autofree gfloat *values = NULL;

      g_assert (_mixprec_safetensors_lookup (st, t->name) == t);
      if (!g_str_equal (t->dtype, "F32"))
        continue;
      values = g_new (gfloat, MAX (n, 1));
      if (!_mixprec_safetensors_read_f32 (st, t, 0, n, values, &read_error))
        g_assert (read_error != NULL);
    }
  _mixprec_safetensors_get_metadata (st, "format");
  _mixprec_safetensors_free (st);
  return 0;
}
