/* mixprec-bootstrap-peer.c — the side of every rank but 0: reach rank 0
 * (retrying while it starts), say who we are, wait for its verdict, and
 * run each collective as one request and one answer. */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"

/* Sleeps up to @us, waking early on abort. */
static void
nap (MixprecBootstrap *self,
     gint64            us)
{
  GPollFD fd;

  if (g_cancellable_make_pollfd (self->cancellable, &fd))
    {
      g_poll (&fd, 1, (gint) ((us + 999) / 1000));
      g_cancellable_release_fd (self->cancellable);
    }
  else
    g_usleep (us);
}

/* Retrying a connect to a local port nobody listens on can, rarely, pick
 * that same port as the source and connect the socket to itself (TCP
 * simultaneous open). That is nobody, not rank 0. */
static gboolean
is_self_connection (GSocket *socket)
{
  g_autoptr(GSocketAddress) mine = g_socket_get_local_address (socket, NULL);
  g_autoptr(GSocketAddress) theirs = g_socket_get_remote_address (socket, NULL);
  GInetSocketAddress *a, *b;

  if (!G_IS_INET_SOCKET_ADDRESS (mine) || !G_IS_INET_SOCKET_ADDRESS (theirs))
    return FALSE;
  a = G_INET_SOCKET_ADDRESS (mine);
  b = G_INET_SOCKET_ADDRESS (theirs);
  return g_inet_socket_address_get_port (a) == g_inet_socket_address_get_port (b)
         && g_inet_address_equal (g_inet_socket_address_get_address (a),
                                  g_inet_socket_address_get_address (b));
}

/* Connects to rank 0, retrying until @deadline: rank 0 may start later. */
static GSocket *
client_connect (MixprecBootstrap *self,
                gint64            deadline,
                GError          **error)
{
  GList *addresses = _mixprec_bootstrap_resolve (self, error);
  g_autofree gchar *last = NULL;
  gint64 pause = 50 * 1000;
  GSocket *connected = NULL;

  if (addresses == NULL)
    return NULL;
  for (;;)
    {
      for (GList *l = addresses; l != NULL && connected == NULL; l = l->next)
        {
          GInetAddress *inet = l->data;
          g_autoptr(GSocketAddress) address = g_inet_socket_address_new (inet, self->master_port);
          g_autoptr(GSocket) socket = g_socket_new (g_inet_address_get_family (inet),
                                                    G_SOCKET_TYPE_STREAM,
                                                    G_SOCKET_PROTOCOL_TCP, NULL);
          g_autoptr(GError) local = NULL;
          gint64 left;

          if (socket == NULL)
            continue;
          g_socket_set_blocking (socket, FALSE);
          if (!g_socket_connect (socket, address, NULL, &local)
              && g_error_matches (local, G_IO_ERROR, G_IO_ERROR_PENDING))
            {
              g_clear_error (&local);
              left = MAX (deadline - g_get_monotonic_time (), 1);
              if (g_socket_condition_timed_wait (socket, G_IO_OUT, left, self->cancellable, &local))
                g_socket_check_connect_result (socket, &local);
            }
          if (local == NULL && is_self_connection (socket))
            g_set_error_literal (&local, G_IO_ERROR, G_IO_ERROR_CONNECTION_REFUSED,
                                 "Connection refused");
          if (local == NULL)
            connected = g_steal_pointer (&socket);
          else
            {
              g_free (last);
              last = g_strdup (local->message);
            }
        }
      if (connected != NULL || g_cancellable_is_cancelled (self->cancellable)
          || g_get_monotonic_time () >= deadline)
        break;
      nap (self, MIN (pause, deadline - g_get_monotonic_time ()));
      pause = MIN (pause * 2, 500 * 1000);
    }
  g_list_free_full (addresses, g_object_unref);

  if (connected != NULL)
    _mixprec_bootstrap_tune_socket (connected);
  else if (g_cancellable_is_cancelled (self->cancellable))
    _mixprec_bootstrap_set_aborted (self, error);
  else
    g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                 "rank %u could not reach rank 0 at %s:%u within %u ms (is rank 0 running? "
                 "is the port right?)%s%s", self->rank, self->master_addr, self->master_port,
                 self->timeout_ms, last != NULL ? ": " : "", last != NULL ? last : "");
  return connected;
}

/* The handshake, a rank's side, on a fresh connection: our challenge,
 * rank 0's proof checked, our proof. Nothing about this process goes out
 * before rank 0 has proven the secret. FALSE with @why set means "not
 * rank 0 (yet)": the caller tries again. */
static gboolean
peer_authenticate (MixprecBootstrap *self,
                   MixprecWireConn  *conn,
                   gint64            deadline,
                   GError          **why)
{
  guint8 root_nonce[MIXPREC_AUTH_NONCE_SIZE];
  guint8 mac[MIXPREC_AUTH_MAC_SIZE];
  MixprecWireStatus status;

  if (!_mixprec_auth_random (conn->peer_nonce, sizeof conn->peer_nonce, why))
    return FALSE;
  status = _mixprec_wire_send (conn->socket, MIXPREC_WIRE_AUTH_CHALLENGE, 0, 0,
                               conn->peer_nonce, sizeof conn->peer_nonce, deadline,
                               self->cancellable, why);
  if (status == MIXPREC_WIRE_OK)
    status = _mixprec_wire_conn_receive (conn, MIXPREC_WIRE_MAX_FAIL, deadline,
                                         self->cancellable, why);
  if (status != MIXPREC_WIRE_OK)
    {
      if (why != NULL && *why == NULL)
        g_set_error (why, G_IO_ERROR, G_IO_ERROR_FAILED, "%s",
                     status == MIXPREC_WIRE_TIMEOUT ? "it did not answer the challenge in time"
                     : status == MIXPREC_WIRE_CANCELLED ? "aborted"
                     : "it closed the connection during the handshake");
      return FALSE;
    }
  if (conn->header.type == MIXPREC_WIRE_FAIL)
    {
      /* unproven, so only a hint for our own error message */
      g_autofree gchar *said = _mixprec_wire_printable (conn->payload, conn->header.length);
      g_set_error (why, G_IO_ERROR, G_IO_ERROR_FAILED, "it answered, without proving the "
                   "job secret: %s", said);
      return FALSE;
    }
  if (!_mixprec_auth_check_reply (self->secret, conn->peer_nonce, &conn->header, conn->payload,
                                  root_nonce, why))
    return FALSE;
  _mixprec_wire_conn_reset (conn);
  _mixprec_auth_mac (self->secret, MIXPREC_AUTH_ROLE_PEER, conn->peer_nonce, root_nonce, mac);
  status = _mixprec_wire_send (conn->socket, MIXPREC_WIRE_AUTH_PROOF, 0, 0, mac, sizeof mac,
                               deadline, self->cancellable, why);
  if (status != MIXPREC_WIRE_OK)
    {
      if (why != NULL && *why == NULL)
        g_set_error_literal (why, G_IO_ERROR, G_IO_ERROR_FAILED,
                             "it closed the connection during the handshake");
      return FALSE;
    }
  return TRUE;
}

/* Connects to rank 0 and, in a job with a secret, runs the handshake,
 * again and again until the timeout: a process that holds the port but
 * cannot prove the secret is not rank 0, and the real one may come. */
static MixprecWireConn *
peer_reach_root (MixprecBootstrap *self,
                 gint64            deadline,
                 GError          **error)
{
  g_autofree gchar *last = NULL;

  for (;;)
    {
      g_autoptr(GError) local = NULL;
      g_autoptr(GError) why = NULL;
      g_autoptr(GSocket) socket = client_connect (self, deadline, &local);
      g_autoptr(MixprecWireConn) conn = NULL;
      gint64 attempt;

      if (socket == NULL)
        {
          if (last == NULL || g_cancellable_is_cancelled (self->cancellable))
            g_propagate_error (error, g_steal_pointer (&local));
          else
            g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                         "rank %u found no rank 0 at %s:%u that proves the job secret within "
                         "%u ms; the last process there %s", self->rank, self->master_addr,
                         self->master_port, self->timeout_ms, last);
          return NULL;
        }
      conn = _mixprec_wire_conn_new (socket);
      conn->rank = 0;
      if (self->secret == NULL)
        return g_steal_pointer (&conn);
      attempt = MIN (deadline, g_get_monotonic_time ()
                               + (gint64) MIN (self->timeout_ms, _MIXPREC_BOOTSTRAP_PROOF_MS)
                                 * 1000);
      if (peer_authenticate (self, conn, attempt, &why))
        return g_steal_pointer (&conn);
      if (g_cancellable_is_cancelled (self->cancellable))
        {
          _mixprec_bootstrap_set_aborted (self, error);
          return NULL;
        }
      if (last == NULL || g_strcmp0 (last, why->message) != 0)
        g_message ("bootstrap: rank %u: the process at %s (%s:%u) is not rank 0 of this job: "
                   "%s; trying again", self->rank, conn->peer, self->master_addr,
                   self->master_port, why->message);
      g_free (last);
      last = g_strdup (why->message);
      if (g_get_monotonic_time () >= deadline)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                       "rank %u found no rank 0 at %s:%u that proves the job secret within "
                       "%u ms; the last process there %s", self->rank, self->master_addr,
                       self->master_port, self->timeout_ms, last);
          return NULL;
        }
      nap (self, MIN (200 * 1000, deadline - g_get_monotonic_time ()));
    }
}

gboolean
_mixprec_bootstrap_peer_join (MixprecBootstrap *self,
                              GError          **error)
{
  gint64 deadline = _mixprec_bootstrap_deadline (self);
  const gchar *host = g_get_host_name ();
  gsize host_len = MIN (strlen (host), MIXPREC_WIRE_MAX_HOST);
  guint8 hello[MIXPREC_WIRE_HELLO_SIZE + MIXPREC_WIRE_MAX_HOST];
  g_autoptr(GError) local = NULL;
  MixprecWireStatus status;
  MixprecWireConn *conn;
  GSocket *socket;

  conn = peer_reach_root (self, deadline, error);
  if (conn == NULL)
    return FALSE;
  self->root = conn;
  socket = conn->socket;

  _mixprec_wire_put_u32 (hello, self->rank);
  _mixprec_wire_put_u32 (hello + 4, self->world_size);
  _mixprec_wire_put_u32 (hello + 8, self->local_rank);
  _mixprec_wire_put_u32 (hello + 12, self->local_world_size);
  _mixprec_wire_put_u32 (hello + 16, (guint32) getpid ());
  memcpy (hello + MIXPREC_WIRE_HELLO_SIZE, host, host_len);

  /* rank 0 answers within its own timeout, which began before we could
   * connect: waiting a little longer lets its verdict arrive first */
  deadline = _mixprec_bootstrap_deadline (self) + _mixprec_bootstrap_slack_us (self);
  status = _mixprec_wire_send (socket, MIXPREC_WIRE_HELLO, 0, 0, hello,
                               MIXPREC_WIRE_HELLO_SIZE + host_len,
                               deadline, self->cancellable, &local);
  if (status == MIXPREC_WIRE_OK)
    status = _mixprec_wire_conn_receive (conn, MAX (MIXPREC_WIRE_MAX_HELLO,
                                                    (gsize) self->world_size * 4),
                                         deadline, self->cancellable, &local);
  switch (status)
    {
    case MIXPREC_WIRE_OK:
      break;
    case MIXPREC_WIRE_CANCELLED:
      _mixprec_bootstrap_set_aborted (self, error);
      return FALSE;
    case MIXPREC_WIRE_TIMEOUT:
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                   "rank 0 at %s:%u accepted rank %u's connection but did not confirm "
                   "within %u ms that all %u ranks joined", self->master_addr,
                   self->master_port, self->rank, self->timeout_ms, self->world_size);
      return FALSE;
    case MIXPREC_WIRE_CLOSED:
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                   "rank 0 at %s:%u closed the connection before all %u ranks joined "
                   "(did rank 0 fail? its output says why)", self->master_addr,
                   self->master_port, self->world_size);
      return FALSE;
    case MIXPREC_WIRE_BAD:
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                   "rank %u reached %s:%u, but %s", self->rank, self->master_addr,
                   self->master_port, local->message);
      return FALSE;
    case MIXPREC_WIRE_AGAIN:
    case MIXPREC_WIRE_FAILED:
    default:
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                   "the connection of rank %u to rank 0 at %s:%u failed: %s", self->rank,
                   self->master_addr, self->master_port,
                   local != NULL ? local->message : "unknown error");
      return FALSE;
    }

  if (conn->header.type == MIXPREC_WIRE_FAIL)
    {
      g_autofree gchar *message = _mixprec_wire_printable (conn->payload, conn->header.length);
      guint code = conn->header.aux <= MIXPREC_BOOTSTRAP_ERROR_CLOSED
                   ? conn->header.aux : MIXPREC_BOOTSTRAP_ERROR_PROTOCOL;
      g_set_error_literal (error, MIXPREC_BOOTSTRAP_ERROR, code, message);
      return FALSE;
    }
  if (conn->header.type != MIXPREC_WIRE_WELCOME)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                   "rank 0 at %s:%u answered rank %u's hello with message type %u",
                   self->master_addr, self->master_port, self->rank, conn->header.type);
      return FALSE;
    }
  if (!_mixprec_wire_check_hosts (conn->payload, conn->header.length, self->world_size,
                                  &local))
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                   "rank 0 at %s:%u sent rank %u %s", self->master_addr, self->master_port,
                   self->rank, local->message);
      return FALSE;
    }
  _mixprec_bootstrap_apply_hosts (self, conn->payload, conn->header.length);
  _mixprec_wire_conn_reset (conn);
  return TRUE;
}

/* ------------------------------------------------------------ other ranks */

gboolean
_mixprec_bootstrap_peer_gather (MixprecBootstrap *self,
                                guint             kind,
                                gconstpointer     in,
                                gsize             len,
                                guint8           *out,
                                GError          **error)
{
  MixprecWireConn *conn = self->root;
  const gchar *what = _mixprec_bootstrap_kind_name (kind);
  g_autoptr(GError) local = NULL;
  gint64 deadline = _mixprec_bootstrap_deadline (self);
  MixprecWireStatus status;
  const MixprecWireHeader *h = &conn->header;

  status = _mixprec_wire_send (conn->socket, MIXPREC_WIRE_GATHER, kind, self->seq, in, len,
                               deadline, self->cancellable, &local);
  if (status == MIXPREC_WIRE_OK)
    status = _mixprec_wire_conn_receive (conn, MIXPREC_WIRE_MAX_PAYLOAD,
                                         deadline + _mixprec_bootstrap_slack_us (self),
                                         self->cancellable,
                                         &local);
  switch (status)
    {
    case MIXPREC_WIRE_OK:
      break;
    case MIXPREC_WIRE_CANCELLED:
      _mixprec_bootstrap_fail_aborted (self, error);
      return FALSE;
    case MIXPREC_WIRE_TIMEOUT:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                                    "rank 0 did not answer %s #%u of rank %u within %u ms",
                                    what, self->seq, self->rank, self->timeout_ms);
      return FALSE;
    case MIXPREC_WIRE_CLOSED:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                                    "rank 0 closed its connection during %s #%u (did it exit, "
                                    "crash or abort?)", what, self->seq);
      return FALSE;
    case MIXPREC_WIRE_BAD:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                    "rank 0 sent a malformed message during %s #%u: %s", what,
                                    self->seq, local->message);
      return FALSE;
    case MIXPREC_WIRE_AGAIN:
    case MIXPREC_WIRE_FAILED:
    default:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                                    "the connection to rank 0 failed during %s #%u: %s", what,
                                    self->seq,
                                    local != NULL ? local->message : "unknown error");
      return FALSE;
    }

  if (h->type == MIXPREC_WIRE_FAIL)
    {
      g_autofree gchar *message = _mixprec_wire_printable (conn->payload, h->length);
      guint code = h->aux <= MIXPREC_BOOTSTRAP_ERROR_CLOSED ? h->aux
                                                            : MIXPREC_BOOTSTRAP_ERROR_PROTOCOL;
      _mixprec_wire_conn_reset (conn);
      _mixprec_bootstrap_fail_with (self, error, code, "%s", message);
      return FALSE;
    }
  if (h->type != MIXPREC_WIRE_RESULT || h->seq != self->seq || h->aux != kind
      || h->length != len * self->world_size)
    {
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                    "rank 0 answered %s #%u of rank %u with message type %u "
                                    "for #%u (%u bytes where %" G_GSIZE_FORMAT " belong)",
                                    what, self->seq, self->rank, h->type, h->seq, h->length,
                                    len * self->world_size);
      return FALSE;
    }
  if (h->length > 0)
    memcpy (out, conn->payload, h->length);
  _mixprec_wire_conn_reset (conn);
  return TRUE;
}

