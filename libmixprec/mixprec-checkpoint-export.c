/* mixprec-checkpoint-export.c — mixprec_engine_export_fp32(): one FP32
 * safetensors file of every parameter, written straight from the engine.
 * The layout depends only on the parameters' names and shapes, so every
 * rank computes it alone and writes its own ranges into the one file. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-engine-private.h"

#define STAGE_ELEMENTS ((guint64) 1 << 18)

static gchar *
done_marker (const gchar *tmp_path,
             guint        rank)
{
  return g_strdup_printf ("%s.rank-%u.done", tmp_path, rank);
}

/* Elements [begin, end) of a shard as little-endian FP32 at @offset. */
static gboolean
write_range (int                        fd,
             const gchar               *path,
             const _MixprecEngineShard *sh,
             guint64                    offset,
             GError                   **error)
{
  g_autofree gfloat *stage = NULL;
  gsize wsize = mixprec_dtype_get_size (sh->working_dtype);
  guint64 n = sh->end - sh->begin;

  if (sh->master != NULL && G_BYTE_ORDER == G_LITTLE_ENDIAN)
    return _mixprec_pwrite_all (fd, sh->master, n * sizeof (gfloat), offset, path, error);

  stage = g_new (gfloat, MIN (n, STAGE_ELEMENTS));
  for (guint64 at = 0; at < n; at += STAGE_ELEMENTS)
    {
      guint64 count = MIN (n - at, STAGE_ELEMENTS);

      if (sh->master != NULL)
        memcpy (stage, sh->master + at, count * sizeof (gfloat));
      else if (sh->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32)
        _mixprec_checkpoint_split_master_f32 (sh->master_format, (const guint16 *) sh->working + at,
                                              (const guint16 *) sh->master_extra + at, count, stage);
      else if (!mixprec_convert_array (sh->working_dtype, (const guint8 *) sh->working + at * wsize,
                                       MIXPREC_DTYPE_FLOAT32, stage, count,
                                       MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
        return FALSE;
#if G_BYTE_ORDER == G_BIG_ENDIAN
      for (guint64 i = 0; i < count; i++)
        {
          guint32 bits;

          memcpy (&bits, &stage[i], 4);
          bits = GUINT32_TO_LE (bits);
          memcpy (&stage[i], &bits, 4);
        }
#endif
      if (!_mixprec_pwrite_all (fd, stage, count * sizeof (gfloat),
                                offset + at * sizeof (gfloat), path, error))
        return FALSE;
    }
  return TRUE;
}

static gboolean
create_file (const gchar *tmp_path,
             GBytes      *header,
             guint64      file_size,
             GError     **error)
{
  gboolean ok;
  int fd;

  unlink (tmp_path);
  fd = open (tmp_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, tmp_path, "cannot create");
      return FALSE;
    }
  ok = _mixprec_write_all (fd, g_bytes_get_data (header, NULL), g_bytes_get_size (header),
                           tmp_path, error);
  if (ok && ftruncate (fd, (off_t) file_size) != 0)
    {
      _mixprec_set_io_error (error, errno, tmp_path, "cannot extend");
      ok = FALSE;
    }
  close (fd);
  return ok;
}

static gboolean
write_ranges (MixprecEngine             *engine,
              GArray                    *shards,
              _MixprecSafetensorsWriter *w,
              const gchar               *tmp_path,
              GError                   **error)
{
  gboolean ok = TRUE;
  int fd;

  /* Every rank writes its own (disjoint) shards into the shared file. */
  fd = open (tmp_path, O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, tmp_path, "cannot open for writing");
      return FALSE;
    }
  for (guint i = 0; i < shards->len && ok; i++)
    {
      const _MixprecEngineShard *sh = &g_array_index (shards, _MixprecEngineShard, i);

      if (sh->end > sh->begin)
        ok = write_range (fd, tmp_path, sh,
                          _mixprec_safetensors_writer_get_offset (w, mixprec_param_get_name (sh->param)) +
                          sh->begin * sizeof (gfloat), error);
    }
  ok = ok && _mixprec_fsync_fd (fd, tmp_path, error);
  close (fd);
  return ok;
}

/* Rank 0 renames the file only when every rank left its marker. */
static gboolean
all_done (const gchar *tmp_path,
          guint        world,
          GError     **error)
{
  gboolean ok = TRUE;

  for (guint r = 1; r < world; r++)
    {
      g_autofree gchar *marker = done_marker (tmp_path, r);

      if (!g_file_test (marker, G_FILE_TEST_EXISTS) && ok)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                       "%s: rank %u did not finish writing its ranges (see its error)",
                       tmp_path, r);
          ok = FALSE;
        }
      unlink (marker);
    }
  return ok;
}

gboolean
_mixprec_checkpoint_export_fp32 (MixprecEngine *engine,
                                 const gchar   *path,
                                 GError       **error)
{
  g_autoptr(_MixprecSafetensorsWriter) w = NULL;
  g_autoptr(GArray) shards = NULL;
  g_autoptr(GBytes) header = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autofree gchar *tmp_path = NULL;
  _MixprecEngineCounters counters;
  guint rank, world;
  guint64 file_size;
  gboolean ok = TRUE;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (engine), FALSE);
  g_return_val_if_fail (path != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  shards = _mixprec_engine_get_shards (engine, error);
  if (shards == NULL)
    return FALSE;
  rank = _mixprec_engine_get_rank (engine);
  world = _mixprec_engine_get_world_size (engine);
  _mixprec_engine_get_counters (engine, &counters);

  w = _mixprec_safetensors_writer_new ();
  _mixprec_checkpoint_export_metadata (w, counters.steps);
  for (guint i = 0; i < shards->len; i++)
    {
      MixprecParam *p = g_array_index (shards, _MixprecEngineShard, i).param;
      const guint64 *shape;
      guint n_dims;

      shape = mixprec_param_get_shape (p, &n_dims);
      /* Only the layout is needed: the data goes in by pwrite below. */
      if (!_mixprec_safetensors_writer_add_filled (w, mixprec_param_get_name (p), "F32", shape,
                                                   n_dims, NULL, NULL, error))
        return FALSE;
    }
  header = _mixprec_safetensors_writer_get_header (w, &file_size);
  tmp_path = g_strconcat (path, ".tmp", NULL);

  /* Failures do not return early: the other ranks wait at the barriers. */
  if (rank == 0 && !create_file (tmp_path, header, file_size, &local_error))
    ok = FALSE;
  if (!_mixprec_engine_barrier (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (ok && !write_ranges (engine, shards, w, tmp_path, &local_error))
    ok = FALSE;
  if (ok && rank != 0)
    {
      g_autofree gchar *marker = done_marker (tmp_path, rank);
      int fd = open (marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

      if (fd < 0)
        {
          _mixprec_set_io_error (&local_error, errno, marker, "cannot create");
          ok = FALSE;
        }
      else
        close (fd);
    }
  if (!_mixprec_engine_barrier (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (rank == 0)
    {
      ok = all_done (tmp_path, world, ok ? &local_error : NULL) && ok;
      if (ok && !_mixprec_checkpoint_commit_file (tmp_path, path, &local_error))
        ok = FALSE;
      if (!ok)
        unlink (tmp_path);
    }
  if (!_mixprec_engine_barrier (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (ok && rank != 0 && !g_file_test (path, G_FILE_TEST_EXISTS))
    {
      g_set_error (&local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: rank 0 did not complete the export (see its error)", path);
      ok = FALSE;
    }
  if (!ok)
    {
      if (local_error == NULL)
        g_set_error (&local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                     "%s: a rank could not write its part of the export", path);
      g_propagate_error (error, g_steal_pointer (&local_error));
    }
  return ok;
}
