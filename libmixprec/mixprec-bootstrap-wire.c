/* mixprec-bootstrap-wire.c — reading and writing the bootstrap's frames
 * on non-blocking sockets. Reads never take more than one frame from the
 * socket, so a connection can be read a little at a time while others are
 * served, and every wait ends at a deadline or when the bootstrap is
 * aborted. */
#include "config.h"

#include <string.h>

#include "mixprec-bootstrap-wire-private.h"

MixprecWireConn *
_mixprec_wire_conn_new (GSocket *socket)
{
  MixprecWireConn *conn = g_new0 (MixprecWireConn, 1);

  conn->socket = g_object_ref (socket);
  conn->peer = _mixprec_wire_peer_name (socket);
  conn->rank = G_MAXUINT;
  return conn;
}

void
_mixprec_wire_conn_free (MixprecWireConn *conn)
{
  if (conn == NULL)
    return;
  g_socket_close (conn->socket, NULL);
  g_object_unref (conn->socket);
  g_free (conn->peer);
  g_free (conn->host);
  g_free (conn->payload);
  g_free (conn);
}

void
_mixprec_wire_conn_reset (MixprecWireConn *conn)
{
  g_clear_pointer (&conn->payload, g_free);
  conn->head_got = 0;
  conn->payload_got = 0;
  conn->ready = FALSE;
  memset (&conn->header, 0, sizeof conn->header);
}

gchar *
_mixprec_wire_peer_name (GSocket *socket)
{
  g_autoptr(GSocketAddress) address = g_socket_get_remote_address (socket, NULL);
  g_autofree gchar *ip = NULL;
  GInetSocketAddress *inet;

  if (!G_IS_INET_SOCKET_ADDRESS (address))
    return g_strdup ("an unknown address");
  inet = G_INET_SOCKET_ADDRESS (address);
  ip = g_inet_address_to_string (g_inet_socket_address_get_address (inet));
  return g_strdup_printf ("%s:%u", ip, g_inet_socket_address_get_port (inet));
}

guint32
_mixprec_wire_get_u32 (const guint8 *p)
{
  return ((guint32) p[0] << 24) | ((guint32) p[1] << 16) | ((guint32) p[2] << 8) | p[3];
}

void
_mixprec_wire_put_u32 (guint8 *p,
          guint32 v)
{
  p[0] = v >> 24;
  p[1] = v >> 16;
  p[2] = v >> 8;
  p[3] = v;
}

static MixprecWireStatus
status_of_io_error (GError  *io_error,
                    GError **error)
{
  MixprecWireStatus status;

  if (g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK))
    status = MIXPREC_WIRE_AGAIN;
  else if (g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
    status = MIXPREC_WIRE_CANCELLED;
  else if (g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_TIMED_OUT))
    status = MIXPREC_WIRE_TIMEOUT;
  else if (g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_CONNECTION_CLOSED)
           || g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_BROKEN_PIPE)
           || g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_NOT_CONNECTED))
    status = MIXPREC_WIRE_CLOSED;
  else
    status = MIXPREC_WIRE_FAILED;
  if (status == MIXPREC_WIRE_FAILED)
    g_propagate_error (error, io_error);
  else
    g_error_free (io_error);
  return status;
}

/* Reads up to @want bytes without blocking; 0 bytes read is AGAIN. */
static MixprecWireStatus
read_some (GSocket *socket,
           guint8  *buffer,
           gsize    want,
           gsize   *got,
           GError **error)
{
  GError *io_error = NULL;
  gssize n = g_socket_receive (socket, (gchar *) buffer, want, NULL, &io_error);

  *got = 0;
  if (n < 0)
    return status_of_io_error (io_error, error);
  if (n == 0)
    return MIXPREC_WIRE_CLOSED;
  *got = (gsize) n;
  return MIXPREC_WIRE_OK;
}

/* Checks a frame's fixed header before anything else is read: the
 * length bounds the allocation, so it must be known good first. */
MixprecWireStatus
_mixprec_wire_parse_header (const guint8      *head,
                            gsize              max_payload,
                            const gchar       *peer,
                            MixprecWireHeader *h,
                            GError           **error)
{
  h->magic = _mixprec_wire_get_u32 (head);
  h->version = (head[4] << 8) | head[5];
  h->type = (head[6] << 8) | head[7];
  h->aux = _mixprec_wire_get_u32 (head + 8);
  h->seq = _mixprec_wire_get_u32 (head + 12);
  h->length = _mixprec_wire_get_u32 (head + 16);
  if (h->magic != MIXPREC_WIRE_MAGIC)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s does not speak the mixprec bootstrap protocol "
                   "(another program on this port?)", peer);
      return MIXPREC_WIRE_BAD;
    }
  if (h->version != MIXPREC_WIRE_VERSION)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s speaks bootstrap protocol version %u, this process "
                   "version %u; every rank must run the same libmixprec",
                   peer, h->version, MIXPREC_WIRE_VERSION);
      return MIXPREC_WIRE_BAD;
    }
  if (h->length > max_payload)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "%s announced a %u-byte message, more than the %" G_GSIZE_FORMAT
                   " bytes allowed here", peer, h->length, max_payload);
      return MIXPREC_WIRE_BAD;
    }
  return MIXPREC_WIRE_OK;
}

/* Host names are shown in messages and compared: printable ASCII only,
 * no NUL inside (a name with one would compare equal to its prefix). */
static gboolean
is_host_name (const guint8 *p,
              gsize         len)
{
  for (gsize i = 0; i < len; i++)
    if (p[i] < 0x21 || p[i] > 0x7e)
      return FALSE;
  return TRUE;
}

gboolean
_mixprec_wire_parse_hello (const guint8     *payload,
                           gsize             len,
                           MixprecWireHello *hello,
                           GError          **error)
{
  gsize host_len;

  memset (hello, 0, sizeof *hello);
  if (len < MIXPREC_WIRE_HELLO_SIZE || len > MIXPREC_WIRE_HELLO_SIZE + MIXPREC_WIRE_MAX_HOST)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "sent a %" G_GSIZE_FORMAT "-byte hello; a hello is %u to %u bytes", len,
                   MIXPREC_WIRE_HELLO_SIZE, MIXPREC_WIRE_HELLO_SIZE + MIXPREC_WIRE_MAX_HOST);
      return FALSE;
    }
  host_len = len - MIXPREC_WIRE_HELLO_SIZE;
  if (!is_host_name (payload + MIXPREC_WIRE_HELLO_SIZE, host_len))
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                           "sent a hello whose host name is not printable ASCII");
      return FALSE;
    }
  hello->rank = _mixprec_wire_get_u32 (payload);
  hello->world_size = _mixprec_wire_get_u32 (payload + 4);
  hello->local_rank = _mixprec_wire_get_u32 (payload + 8);
  hello->local_world_size = _mixprec_wire_get_u32 (payload + 12);
  hello->pid = _mixprec_wire_get_u32 (payload + 16);
  memcpy (hello->host, payload + MIXPREC_WIRE_HELLO_SIZE, host_len);
  hello->host[host_len] = '\0';
  return TRUE;
}

/* A WELCOME's host table: for every rank, the lowest rank on its host,
 * which is never above the rank itself. */
gboolean
_mixprec_wire_check_hosts (const guint8 *ids,
                           gsize         len,
                           guint         world_size,
                           GError      **error)
{
  if (len != (gsize) world_size * 4)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "a welcome of %" G_GSIZE_FORMAT " bytes where %" G_GSIZE_FORMAT
                   " belong for %u ranks", len, (gsize) world_size * 4, world_size);
      return FALSE;
    }
  for (guint r = 0; r < world_size; r++)
    if (_mixprec_wire_get_u32 (ids + (gsize) r * 4) > r)
      {
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                     "a welcome whose host table gives rank %u the first rank %u", r,
                     _mixprec_wire_get_u32 (ids + (gsize) r * 4));
        return FALSE;
      }
  return TRUE;
}

/* Peer bytes made safe to print: cut at MIXPREC_WIRE_MAX_FAIL, valid
 * UTF-8, control characters (a terminal's escape sequences) as '?'. */
gchar *
_mixprec_wire_printable (const guint8 *bytes,
                         gsize         len)
{
  g_autofree gchar *valid = g_utf8_make_valid ((const gchar *) bytes,
                                               (gssize) MIN (len, MIXPREC_WIRE_MAX_FAIL));

  for (gchar *p = valid; *p != '\0'; p++)
    if ((guchar) *p < 0x20 || *p == 0x7f)
      *p = '?';
  return g_steal_pointer (&valid);
}

/* Advances the frame in @conn with whatever the socket holds now. OK means
 * a whole frame is ready; AGAIN that more bytes are needed. */
MixprecWireStatus
_mixprec_wire_conn_read (MixprecWireConn *conn,
                         gsize            max_payload,
                         GError         **error)
{
  MixprecWireStatus status;
  gsize got;

  if (conn->ready)
    return MIXPREC_WIRE_OK;

  while (conn->head_got < MIXPREC_WIRE_HEADER_SIZE)
    {
      status = read_some (conn->socket, conn->head + conn->head_got,
                          MIXPREC_WIRE_HEADER_SIZE - conn->head_got, &got, error);
      if (status != MIXPREC_WIRE_OK)
        return status;
      conn->head_got += got;
      if (conn->head_got == MIXPREC_WIRE_HEADER_SIZE)
        {
          MixprecWireHeader *h = &conn->header;

          status = _mixprec_wire_parse_header (conn->head, max_payload, conn->peer, h, error);
          if (status != MIXPREC_WIRE_OK)
            return status;
          conn->payload = g_malloc (MAX (h->length, 1));
        }
    }

  while (conn->payload_got < conn->header.length)
    {
      status = read_some (conn->socket, conn->payload + conn->payload_got,
                          conn->header.length - conn->payload_got, &got, error);
      if (status != MIXPREC_WIRE_OK)
        return status;
      conn->payload_got += got;
    }
  conn->ready = TRUE;
  return MIXPREC_WIRE_OK;
}

static gint64
remaining_us (gint64 deadline)
{
  return MAX (deadline - g_get_monotonic_time (), 0);
}

static MixprecWireStatus
wait_for (GSocket      *socket,
          GIOCondition  condition,
          gint64        deadline,
          GCancellable *cancellable,
          GError      **error)
{
  GError *io_error = NULL;
  gint64 left = remaining_us (deadline);

  if (g_cancellable_is_cancelled (cancellable))
    return MIXPREC_WIRE_CANCELLED;
  if (left == 0)
    return MIXPREC_WIRE_TIMEOUT;
  if (!g_socket_condition_timed_wait (socket, condition, left, cancellable, &io_error))
    return status_of_io_error (io_error, error);
  return MIXPREC_WIRE_OK;
}

/* Blocks until a whole frame is in @conn, the deadline passes or the
 * bootstrap is aborted. */
MixprecWireStatus
_mixprec_wire_conn_receive (MixprecWireConn *conn,
                            gsize            max_payload,
                            gint64           deadline,
                            GCancellable    *cancellable,
                            GError         **error)
{
  for (;;)
    {
      MixprecWireStatus status = _mixprec_wire_conn_read (conn, max_payload, error);

      if (status != MIXPREC_WIRE_AGAIN)
        return status;
      status = wait_for (conn->socket, G_IO_IN, deadline, cancellable, error);
      if (status != MIXPREC_WIRE_OK)
        return status;
    }
}

static MixprecWireStatus
send_all (GSocket      *socket,
          const guint8 *data,
          gsize         len,
          gint64        deadline,
          GCancellable *cancellable,
          GError      **error)
{
  while (len > 0)
    {
      GError *io_error = NULL;
      gssize n = g_socket_send (socket, (const gchar *) data, len, NULL, &io_error);

      if (n < 0)
        {
          MixprecWireStatus status = status_of_io_error (io_error, error);

          if (status != MIXPREC_WIRE_AGAIN)
            return status;
          status = wait_for (socket, G_IO_OUT, deadline, cancellable, error);
          if (status != MIXPREC_WIRE_OK)
            return status;
          continue;
        }
      data += n;
      len -= (gsize) n;
    }
  return MIXPREC_WIRE_OK;
}

MixprecWireStatus
_mixprec_wire_send (GSocket        *socket,
                    MixprecWireType type,
                    guint32         aux,
                    guint32         seq,
                    gconstpointer   payload,
                    gsize           len,
                    gint64          deadline,
                    GCancellable   *cancellable,
                    GError        **error)
{
  guint8 head[MIXPREC_WIRE_HEADER_SIZE];
  MixprecWireStatus status;

  g_return_val_if_fail (len <= MIXPREC_WIRE_MAX_PAYLOAD, MIXPREC_WIRE_BAD);

  _mixprec_wire_put_u32 (head, MIXPREC_WIRE_MAGIC);
  head[4] = MIXPREC_WIRE_VERSION >> 8;
  head[5] = MIXPREC_WIRE_VERSION & 0xff;
  head[6] = (guint) type >> 8;
  head[7] = (guint) type & 0xff;
  _mixprec_wire_put_u32 (head + 8, aux);
  _mixprec_wire_put_u32 (head + 12, seq);
  _mixprec_wire_put_u32 (head + 16, (guint32) len);
  status = send_all (socket, head, sizeof head, deadline, cancellable, error);
  if (status == MIXPREC_WIRE_OK && len > 0)
    status = send_all (socket, payload, len, deadline, cancellable, error);
  return status;
}
