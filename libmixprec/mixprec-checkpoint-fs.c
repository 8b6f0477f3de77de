/* mixprec-checkpoint-fs.c — the file operations a crash-safe save is made
 * of (complete writes, fsync of files and folders, atomic renames), all
 * inside a folder held open by descriptor and never through a link the
 * library did not create, and the test hook that stops a save at a named
 * point (in test builds only). */
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
  ok = _mixprec_fsync_dir_fd (fd, dir, error);
  close (fd);
  return ok;
}

gboolean
_mixprec_fsync_dir_fd (int          dir_fd,
                       const gchar *dir,
                       GError     **error)
{
  /* Some filesystems cannot sync a folder and say so with EINVAL; their
   * renames are durable by other means. */
  if (fsync (dir_fd) == 0 || errno == EINVAL)
    return TRUE;
  _mixprec_set_io_error (error, errno, dir, "cannot flush the folder to storage (fsync)");
  return FALSE;
}

void
_mixprec_set_link_error (GError     **error,
                         const gchar *path)
{
  g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
               "%s: is a symbolic link, which libmixprec did not create and will not "
               "follow; remove it (or move it elsewhere) and try again", path);
}

/* Whether @name in @dir_fd is a symbolic link, looked at without following
 * it. Any other answer (missing, a folder, a file) is FALSE. */
static gboolean
is_link_at (int          dir_fd,
            const gchar *name)
{
  struct stat sb;

  return fstatat (dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK (sb.st_mode);
}

gboolean
_mixprec_refuse_link_at (int          dir_fd,
                         const gchar *dir,
                         const gchar *name,
                         GError     **error)
{
  g_autofree gchar *path = NULL;

  if (!is_link_at (dir_fd, name))
    return TRUE;
  path = g_build_filename (dir, name, NULL);
  _mixprec_set_link_error (error, path);
  return FALSE;
}

int
_mixprec_open_dir (const gchar *dir,
                   GError     **error)
{
  /* The folder the caller named is theirs to name, links included; what
   * the library finds inside it is opened relative to this descriptor. */
  int fd = open (dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

  if (fd < 0)
    _mixprec_set_io_error (error, errno, dir, "cannot open the folder");
  return fd;
}

int
_mixprec_open_subdir (int          dir_fd,
                      const gchar *dir,
                      const gchar *name,
                      GError     **error)
{
  int fd = openat (dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

  if (fd < 0)
    {
      int saved = errno;
      g_autofree gchar *path = g_build_filename (dir, name, NULL);

      /* O_NOFOLLOW reports a link as ELOOP, O_DIRECTORY as ENOTDIR. */
      if (is_link_at (dir_fd, name))
        _mixprec_set_link_error (error, path);
      else
        _mixprec_set_io_error (error, saved, path, "cannot open the folder");
    }
  return fd;
}

gboolean
_mixprec_check_regular (const gchar       *path,
                        const struct stat *sb,
                        GError           **error)
{
  if (S_ISREG (sb->st_mode))
    return TRUE;
  if (S_ISLNK (sb->st_mode))
    _mixprec_set_link_error (error, path);
  else
    g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                 "%s: not a regular file (a %s); libmixprec writes only regular files "
                 "into a checkpoint and reads nothing else", path,
                 S_ISFIFO (sb->st_mode) ? "FIFO" : S_ISDIR (sb->st_mode) ? "folder"
                 : S_ISCHR (sb->st_mode) || S_ISBLK (sb->st_mode) ? "device" : "special file");
  return FALSE;
}

int
_mixprec_open_regular (const gchar *path,
                       gint         missing_code,
                       GError     **error)
{
  /* O_NONBLOCK: opening a FIFO for reading would wait for a writer
   * forever; a device or a FIFO must be an error, not a hang. */
  int fd = open (path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct stat sb;
  int flags;

  if (fd < 0)
    {
      int saved = errno;
      struct stat lsb;

      if (saved == ELOOP && lstat (path, &lsb) == 0 && S_ISLNK (lsb.st_mode))
        _mixprec_set_link_error (error, path);
      else
        g_set_error (error, MIXPREC_CHECKPOINT_ERROR,
                     saved == ENOENT ? missing_code : MIXPREC_CHECKPOINT_ERROR_IO,
                     "%s: cannot open: %s", path, g_strerror (saved));
      return -1;
    }
  if (fstat (fd, &sb) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot read its size");
      close (fd);
      return -1;
    }
  if (!_mixprec_check_regular (path, &sb, error))
    {
      close (fd);
      return -1;
    }
  /* A regular file never blocks; clearing the flag keeps reads plain. */
  flags = fcntl (fd, F_GETFL);
  if (flags < 0 || fcntl (fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot set up reading");
      close (fd);
      return -1;
    }
  return fd;
}

/* Writes one half, runs @halfway, writes the other half and fsyncs. */
static gboolean
write_halves_synced (int          fd,
                     const gchar *path,
                     const gchar *data,
                     gsize        length,
                     GFunc        halfway,
                     gpointer     halfway_data,
                     GError     **error)
{
  if (!_mixprec_write_all (fd, data, length / 2, path, error))
    return FALSE;
  if (halfway != NULL)
    halfway (halfway_data, NULL);
  return _mixprec_write_all (fd, data + length / 2, length - length / 2, path, error) &&
         _mixprec_fsync_fd (fd, path, error);
}

gboolean
_mixprec_write_file_synced_at (int          dir_fd,
                               const gchar *dir,
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

  /* unlinkat removes a link itself, never what it points to; O_EXCL and
   * O_NOFOLLOW then refuse anything that appeared in between. */
  if (unlinkat (dir_fd, name, 0) != 0 && errno != ENOENT)
    {
      _mixprec_set_io_error (error, errno, path, "cannot remove the stale file");
      return FALSE;
    }
  fd = openat (dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot create");
      return FALSE;
    }
  ok = write_halves_synced (fd, path, data, length, halfway, halfway_data, error);
  if (close (fd) != 0 && ok)
    {
      _mixprec_set_io_error (error, errno, path, "cannot close");
      ok = FALSE;
    }
  /* A half-written file is nobody's: a failed write leaves nothing. */
  if (!ok)
    unlinkat (dir_fd, name, 0);
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
  int fd = _mixprec_open_regular (path, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND, error);
  gboolean ok;

  if (fd < 0)
    return NULL;
  if (fstat (fd, &sb) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot read its size");
      close (fd);
      return NULL;
    }
  if ((guint64) sb.st_size > max)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: larger than any file libmixprec writes there", path);
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
  int fd = _mixprec_open_regular (path, MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD, error);

  if (fd < 0)
    return NULL;
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
_mixprec_remove_flat_dir_at (int          dir_fd,
                             const gchar *dir,
                             const gchar *name)
{
  g_autofree gchar *path = g_build_filename (dir, name, NULL);
  int fd = openat (dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct dirent *entry;
  DIR *d;

  if (fd < 0)
    {
      /* A link (or a file) under a name a save uses is not a folder a save
       * made: it stays, and so does whatever it points to. */
      if (errno != ENOENT)
        g_message ("%s: not removed: not a folder libmixprec created (%s)", path,
                   is_link_at (dir_fd, name) ? "a symbolic link" : g_strerror (errno));
      return;
    }
  d = fdopendir (fd);
  if (d == NULL)
    {
      close (fd);
      return;
    }
  while ((entry = readdir (d)) != NULL)
    {
      struct stat sb;

      /* Only regular files, as saves leave them; a link, a folder or
       * anything else someone put there stays, and so does the folder. */
      if (fstatat (dirfd (d), entry->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
          !S_ISREG (sb.st_mode))
        continue;
      if (unlinkat (dirfd (d), entry->d_name, 0) != 0)
        g_debug ("%s/%s: not removed: %s", path, entry->d_name, g_strerror (errno));
    }
  closedir (d);
  if (unlinkat (dir_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
    g_debug ("%s: not removed: %s", path, g_strerror (errno));
}

static gboolean
exists_at (int          dir_fd,
           const gchar *name)
{
  struct stat sb;

  return fstatat (dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Without an atomic swap, the old folder goes aside first: a crash
 * between the two renames leaves it whole as @from.old. */
static gboolean
rename_dir_aside (int          dir_fd,
                  const gchar *dir,
                  const gchar *from,
                  const gchar *to,
                  GError     **error)
{
  g_autofree gchar *aside = g_strconcat (from, ".old", NULL);
  g_autofree gchar *to_path = g_build_filename (dir, to, NULL);

  /* A folder already there is a whole checkpoint an earlier crash left
   * aside, maybe the only copy of its tag: never removed. */
  if (exists_at (dir_fd, aside))
    {
      g_autofree gchar *aside_path = g_build_filename (dir, aside, NULL);

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                   "%s: cannot move the old checkpoint aside: %s holds a checkpoint an "
                   "interrupted save left aside; rename or remove it first", to_path, aside_path);
      return FALSE;
    }
  if (renameat (dir_fd, to, dir_fd, aside) != 0)
    {
      _mixprec_set_io_error (error, errno, to_path, "cannot move the old checkpoint aside");
      return FALSE;
    }
  if (renameat (dir_fd, from, dir_fd, to) != 0)
    {
      _mixprec_set_io_error (error, errno, to_path, "cannot move the new checkpoint in place");
      renameat (dir_fd, aside, dir_fd, to);
      return FALSE;
    }
  if (renameat (dir_fd, aside, dir_fd, from) != 0)
    g_debug ("%s/%s: not renamed: %s", dir, aside, g_strerror (errno));
  return TRUE;
}

gboolean
_mixprec_rename_dir_at (int          dir_fd,
                        const gchar *dir,
                        const gchar *from,
                        const gchar *to,
                        gboolean    *swapped,
                        GError     **error)
{
  g_autofree gchar *to_path = g_build_filename (dir, to, NULL);

  *swapped = FALSE;
  /* Renames move directory entries and never follow a link; but what is
   * swapped out is later removed as the previous checkpoint, so a link
   * must never be swapped out in the first place. */
  if (!_mixprec_refuse_link_at (dir_fd, dir, to, error) ||
      !_mixprec_refuse_link_at (dir_fd, dir, from, error))
    return FALSE;
  if (exists_at (dir_fd, to))
    {
#if defined(__linux__) && defined(SYS_renameat2) && defined(RENAME_EXCHANGE)
      if (syscall (SYS_renameat2, dir_fd, from, dir_fd, to, RENAME_EXCHANGE) == 0)
        {
          *swapped = TRUE;
          return TRUE;
        }
      if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
        {
          _mixprec_set_io_error (error, errno, to_path, "cannot swap in the new checkpoint");
          return FALSE;
        }
#endif
      if (!rename_dir_aside (dir_fd, dir, from, to, error))
        return FALSE;
      *swapped = TRUE;
      return TRUE;
    }
  if (renameat (dir_fd, from, dir_fd, to) != 0)
    {
      _mixprec_set_io_error (error, errno, to_path,
                             "cannot rename the finished checkpoint into place");
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
