/* run-relay.c — mixprec-run's output relay: reads a rank's stdout or
 * stderr pipe and writes it on with the rank in front of every line.
 * Each line goes out in one write(2), so lines of different ranks never
 * interleave mid-line. Bytes pass through unchanged (no encoding is
 * assumed); only a final line without a newline gets one. */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "run-private.h"

/* A line longer than this is written in pieces, each with the prefix, so
 * a child printing progress bars without newlines cannot grow us without
 * bound. */
#define MAX_LINE (64 * 1024)
#define READ_SIZE (16 * 1024)

struct _RunRelay
{
  GInputStream *stream;
  int fd;
  GString *line;                /* prefix + the current partial line */
  gsize prefix_len;
  gboolean eof;
  RunRelayDone done;
  gpointer user_data;
  GCancellable *cancellable;
};

void
run_write_all (int          fd,
               const gchar *data,
               gsize        len)
{
  while (len > 0)
    {
      gssize n = write (fd, data, len);

      if (n < 0 && errno == EINTR)
        continue;
      /* a reader that went away (EPIPE; SIGPIPE is ignored) or a full
       * disk: the ranks' output is lost, but supervising them goes on */
      if (n <= 0)
        return;
      data += n;
      len -= (gsize) n;
    }
}

static void
emit_line (RunRelay *relay)
{
  g_string_append_c (relay->line, '\n');
  run_write_all (relay->fd, relay->line->str, relay->line->len);
  g_string_truncate (relay->line, relay->prefix_len);
}

static void
take (RunRelay    *relay,
      const gchar *data,
      gsize        len)
{
  while (len > 0)
    {
      const gchar *newline = memchr (data, '\n', len);
      gsize piece = newline != NULL ? (gsize) (newline - data) : len;
      gsize room = MAX_LINE - (relay->line->len - relay->prefix_len);

      if (piece >= room)
        {
          g_string_append_len (relay->line, data, room);
          emit_line (relay);
          data += room;
          len -= room;
          continue;
        }
      g_string_append_len (relay->line, data, piece);
      if (newline == NULL)
        return;
      emit_line (relay);
      data += piece + 1;
      len -= piece + 1;
    }
}

static void
read_done (GObject      *source,
           GAsyncResult *result,
           gpointer      user_data)
{
  RunRelay *relay = user_data;
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) bytes = g_input_stream_read_bytes_finish (G_INPUT_STREAM (source), result,
                                                               &error);
  gsize len = 0;
  const gchar *data;

  if (g_error_matches (error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    return;
  data = bytes != NULL ? g_bytes_get_data (bytes, &len) : NULL;
  if (len == 0)
    {
      /* end of file, or a read error, which ends the stream all the same */
      run_relay_flush (relay);
      relay->eof = TRUE;
      relay->done (relay, relay->user_data);
      return;
    }
  take (relay, data, len);
  run_relay_start (relay);
}

RunRelay *
run_relay_new (GInputStream *stream,
               int           fd,
               const gchar  *prefix,
               RunRelayDone  done,
               gpointer      user_data)
{
  RunRelay *relay = g_new0 (RunRelay, 1);

  relay->stream = g_object_ref (stream);
  relay->fd = fd;
  relay->line = g_string_new (prefix);
  relay->prefix_len = relay->line->len;
  relay->done = done;
  relay->user_data = user_data;
  relay->cancellable = g_cancellable_new ();
  return relay;
}

void
run_relay_start (RunRelay *relay)
{
  g_input_stream_read_bytes_async (relay->stream, READ_SIZE, G_PRIORITY_DEFAULT,
                                   relay->cancellable, read_done, relay);
}

gboolean
run_relay_is_eof (RunRelay *relay)
{
  return relay->eof;
}

/* Writes out a partial last line, ending it with a newline. */
void
run_relay_flush (RunRelay *relay)
{
  if (relay->line->len > relay->prefix_len)
    emit_line (relay);
}

void
run_relay_free (RunRelay *relay)
{
  if (relay == NULL)
    return;
  g_cancellable_cancel (relay->cancellable);
  g_object_unref (relay->cancellable);
  g_object_unref (relay->stream);
  g_string_free (relay->line, TRUE);
  g_free (relay);
}
