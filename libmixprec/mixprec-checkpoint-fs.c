/* mixprec-checkpoint-fs.c — the file operations a crash-safe save is made
 * of (complete writes, fsync of files and folders, atomic renames), and
 * the test hook that stops a save at a named point (in test builds only). */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/syscall.h>
#include <linux/fs.h>
#endif

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"

void
_mixprec_set_io_error (GError     **error,
                       int          saved_errno,
                       const gchar *path,
                       const gchar *action)
{
  g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
               "%s: %s: %s", path, action, g_strerror (saved_errno));
}

gboolean
_mixprec_write_all (int           fd,
                    gconstpointer data,
                    gsize         length,
                    const gchar  *path,
                    GError      **error)
{
  const guint8 *p = data;

  while (length > 0)
    {
      gssize n = write (fd, p, MIN (length, (gsize) G_MAXSSIZE));

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          _mixprec_set_io_error (error, n < 0 ? errno : ENOSPC, path, "cannot write");
          return FALSE;
        }
      p += n;
      length -= (gsize) n;
    }
  return TRUE;
}

gboolean
_mixprec_pwrite_all (int           fd,
                     gconstpointer data,
                     gsize         length,
                     guint64       offset,
                     const gchar  *path,
                     GError      **error)
{
  const guint8 *p = data;

  while (length > 0)
    {
      gssize n = pwrite (fd, p, MIN (length, (gsize) G_MAXSSIZE), (off_t) offset);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        {
          _mixprec_set_io_error (error, n < 0 ? errno : ENOSPC, path, "cannot write");
          return FALSE;
        }
      p += n;
      offset += (guint64) n;
      length -= (gsize) n;
    }
  return TRUE;
}

gboolean
_mixprec_pread_all (int          fd,
                    gpointer     data,
                    gsize        length,
                    guint64      offset,
                    const gchar *path,
                    GError     **error)
{
  guint8 *p = data;

  while (length > 0)
    {
      gssize n = pread (fd, p, MIN (length, (gsize) G_MAXSSIZE), (off_t) offset);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          _mixprec_set_io_error (error, errno, path, "cannot read");
          return FALSE;
        }
      if (n == 0)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                       "%s: the file ends at byte %" G_GUINT64_FORMAT " while it was being "
                       "read (it shrank after it was opened)", path, offset);
          return FALSE;
        }
      p += n;
      offset += (guint64) n;
      length -= (gsize) n;
    }
  return TRUE;
}

gboolean
_mixprec_fsync_fd (int          fd,
                   const gchar *path,
                   GError     **error)
{
  while (fsync (fd) != 0)
    if (errno != EINTR)
      {
        _mixprec_set_io_error (error, errno, path, "cannot flush to storage (fsync)");
        return FALSE;
      }
  return TRUE;
}

gboolean
_mixprec_fsync_dir (const gchar *dir,
                    GError     **error)
{
  int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  gboolean ok;

  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, dir, "cannot open the folder to flush it");
      return FALSE;
    }
  /* Some filesystems cannot sync a folder and say so with EINVAL; their
   * renames are durable by other means. */
  ok = fsync (fd) == 0 || errno == EINVAL;
  if (!ok)
    _mixprec_set_io_error (error, errno, dir, "cannot flush the folder to storage (fsync)");
  close (fd);
  return ok;
}

gboolean
_mixprec_write_file_synced (const gchar *dir,
                            const gchar *name,
                            const gchar *data,
                            gsize        length,
                            GFunc        halfway,
                            gpointer     halfway_data,
                            GError     **error)
{
  g_autofree gchar *path = g_build_filename (dir, name, NULL);
  gboolean ok;
  int fd;

  if (unlink (path) != 0 && errno != ENOENT)
    {
      _mixprec_set_io_error (error, errno, path, "cannot remove the stale file");
      return FALSE;
    }
  fd = open (path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot create");
      return FALSE;
    }
  ok = _mixprec_write_all (fd, data, length / 2, path, error);
  if (ok && halfway != NULL)
    halfway (halfway_data, NULL);
  ok = ok && _mixprec_write_all (fd, data + length / 2, length - length / 2, path, error) &&
       _mixprec_fsync_fd (fd, path, error);
  if (close (fd) != 0 && ok)
    {
      _mixprec_set_io_error (error, errno, path, "cannot close");
      ok = FALSE;
    }
  return ok;
}

gchar *
_mixprec_read_small_file (const gchar *path,
                          gsize        max,
                          gsize       *length,
                          GError     **error)
{
  g_autofree gchar *data = NULL;
  struct stat sb;
  int fd = open (path, O_RDONLY | O_CLOEXEC);
  gboolean ok;

  if (fd < 0)
    {
      int saved = errno;

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR,
                   saved == ENOENT ? MIXPREC_CHECKPOINT_ERROR_NOT_FOUND : MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: cannot open: %s", path, g_strerror (saved));
      return NULL;
    }
  if (fstat (fd, &sb) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot read its size");
      close (fd);
      return NULL;
    }
  if (!S_ISREG (sb.st_mode) || (guint64) sb.st_size > max)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: %s", path, !S_ISREG (sb.st_mode) ? "not a regular file"
                   : "larger than any file libmixprec writes there");
      close (fd);
      return NULL;
    }
  data = g_malloc ((gsize) sb.st_size + 1);
  ok = _mixprec_pread_all (fd, data, (gsize) sb.st_size, 0, path, error);
  close (fd);
  if (!ok)
    return NULL;
  data[sb.st_size] = '\0';
  *length = (gsize) sb.st_size;
  return g_steal_pointer (&data);
}

gchar *
_mixprec_file_sha256 (const gchar *path,
                      guint64     *size,
                      GError     **error)
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);
  g_autofree guint8 *buffer = g_malloc (1 << 20);
  guint64 total = 0;
  int fd = open (path, O_RDONLY | O_CLOEXEC);

  if (fd < 0)
    {
      int saved = errno;

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR,
                   saved == ENOENT ? MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD
                                   : MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: cannot open: %s", path, g_strerror (saved));
      return NULL;
    }
  for (;;)
    {
      gssize n = read (fd, buffer, 1 << 20);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          _mixprec_set_io_error (error, errno, path, "cannot read");
          close (fd);
          return NULL;
        }
      if (n == 0)
        break;
      g_checksum_update (sum, buffer, n);
      total += (guint64) n;
    }
  close (fd);
  if (size != NULL)
    *size = total;
  return g_strdup (g_checksum_get_string (sum));
}

void
_mixprec_remove_flat_dir (const gchar *dir)
{
  DIR *d = opendir (dir);
  struct dirent *entry;

  if (d == NULL)
    return;
  while ((entry = readdir (d)) != NULL)
    if (!g_str_equal (entry->d_name, ".") && !g_str_equal (entry->d_name, ".."))
      {
        /* unlinkat without AT_REMOVEDIR never removes a folder: whatever
         * else someone put there stays, and so does the folder. */
        if (unlinkat (dirfd (d), entry->d_name, 0) != 0)
          g_debug ("%s/%s: not removed: %s", dir, entry->d_name, g_strerror (errno));
      }
  closedir (d);
  if (rmdir (dir) != 0 && errno != ENOENT)
    g_debug ("%s: not removed: %s", dir, g_strerror (errno));
}

gboolean
_mixprec_rename_dir (const gchar *from,
                     const gchar *to,
                     gboolean    *swapped,
                     GError     **error)
{
  struct stat sb;

  *swapped = FALSE;
  if (lstat (to, &sb) == 0)
    {
#if defined(__linux__) && defined(SYS_renameat2) && defined(RENAME_EXCHANGE)
      if (syscall (SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE) == 0)
        {
          *swapped = TRUE;
          return TRUE;
        }
      if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        {
          _mixprec_set_io_error (error, errno, to, "cannot swap in the new checkpoint");
          return FALSE;
        }
#endif
      /* Without an atomic swap, the old folder goes aside first: a crash
       * between the two renames leaves it whole as @from.old. */
      {
        g_autofree gchar *aside = g_strconcat (from, ".old", NULL);

        /* A folder already there is a whole checkpoint an earlier crash
         * left aside, maybe the only copy of its tag: never removed. */
        if (g_file_test (aside, G_FILE_TEST_EXISTS))
          {
            g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                         "%s: cannot move the old checkpoint aside: %s holds a checkpoint an "
                         "interrupted save left aside; rename or remove it first", to, aside);
            return FALSE;
          }
        if (rename (to, aside) != 0)
          {
            _mixprec_set_io_error (error, errno, to, "cannot move the old checkpoint aside");
            return FALSE;
          }
        if (rename (from, to) != 0)
          {
            _mixprec_set_io_error (error, errno, to, "cannot move the new checkpoint in place");
            rename (aside, to);
            return FALSE;
          }
        if (rename (aside, from) != 0)
          g_debug ("%s: not renamed: %s", aside, g_strerror (errno));
        *swapped = TRUE;
        return TRUE;
      }
    }
  if (rename (from, to) != 0)
    {
      _mixprec_set_io_error (error, errno, to, "cannot rename the finished checkpoint into place");
      return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- test hook */

const gchar * const _mixprec_checkpoint_hook_points[] = {
  "after-tmpdir",
  "mid-shard-write",
  "after-shard-write",
  "after-shard-fsync",
  "before-manifest",
  "mid-manifest",
  "after-manifest",
  "before-rename",
  "after-rename",
  "before-latest",
  "mid-latest",
  "after-latest-tmp",
  "after-latest",
  "before-cleanup",
  NULL
};

#ifndef MIXPREC_ENABLE_TEST_HOOKS

/* An installed library must not let an environment variable kill or
 * freeze the process in the middle of a save: without
 * --enable-test-hooks the hook does nothing. */
void
_mixprec_checkpoint_hook (const gchar *point,
                          guint        rank,
                          const gchar *root)
{
}

#else

void
_mixprec_checkpoint_hook (const gchar *point,
                          guint        rank,
                          const gchar *root)
{
  const gchar *spec = g_getenv ("MIXPREC_CHECKPOINT_TEST_HOOK");
  g_auto(GStrv) parts = NULL;
  const gchar *at;
  gsize point_len;
  guint64 only_rank;

  if (spec == NULL || *spec == '\0')
    return;
  parts = g_strsplit (spec, ":", 2);
  if (parts[0] == NULL || parts[1] == NULL)
    return;
  at = strchr (parts[1], '@');
  point_len = at != NULL ? (gsize) (at - parts[1]) : strlen (parts[1]);
  if (strlen (point) != point_len || strncmp (parts[1], point, point_len) != 0)
    return;
  if (at != NULL &&
      (!g_ascii_string_to_unsigned (at + 1, 10, 0, G_MAXUINT, &only_rank, NULL) ||
       only_rank != rank))
    return;

  if (g_str_equal (parts[0], "abort"))
    {
      /* SIGKILL: no handler, no atexit, no buffered output; as close to a
       * crash as a process can do to itself. */
      raise (SIGKILL);
    }
  else if (g_str_equal (parts[0], "pause"))
    {
      const gchar *marker = g_getenv ("MIXPREC_CHECKPOINT_TEST_HOOK_MARKER");
      g_autofree gchar *fallback = g_build_filename (root, ".mixprec-test-hook-paused", NULL);
      g_autofree gchar *text = g_strdup_printf ("%s %u %d\n", point, rank, (int) getpid ());

      g_file_set_contents (marker != NULL && *marker ? marker : fallback, text, -1, NULL);
      for (;;)
        pause ();
    }
}

#endif /* MIXPREC_ENABLE_TEST_HOOKS */
