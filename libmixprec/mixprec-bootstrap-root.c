/* mixprec-bootstrap-root.c — rank 0's side of the rendezvous: listen,
 * admit each rank once, then serve every collective by collecting one blob
 * per rank and answering with their concatenation. One poll loop serves the
 * listener, the connections not yet admitted and the ranks still awaited,
 * so a rank that dies is noticed at once, not after the slowest one. */
#include "config.h"

#include <string.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"

/* "rank 2" or "ranks 2, 3, 5" for the ranks whose flag is not set. */
static gchar *
describe_missing (MixprecBootstrap *self,
                  const gboolean   *have,
                  guint            *count)
{
  g_autoptr(GString) list = g_string_new (NULL);
  guint shown = 0;

  *count = 0;
  for (guint r = 0; r < self->world_size; r++)
    if (!have[r])
      {
        if (shown < 16)
          {
            g_string_append_printf (list, "%s%u", shown > 0 ? ", " : "", r);
            shown++;
          }
        (*count)++;
      }
  if (*count > shown)
    g_string_append_printf (list, " and %u more", *count - shown);
  g_string_prepend (list, *count == 1 ? "rank " : "ranks ");
  return g_string_free (g_steal_pointer (&list), FALSE);
}

/* mixprec-run bound the port and listens on it already, so that no other
 * process can take it between its choice and our start: adopt that
 * socket, after checking it is one, listening, on the port we were told. */
static gboolean
root_adopt (MixprecBootstrap *self,
            GError          **error)
{
  g_autoptr(GError) local = NULL;
  g_autoptr(GSocket) socket = g_socket_new_from_fd (self->listen_fd, &local);
  g_autoptr(GSocketAddress) bound = NULL;
  guint16 port = 0;

  if (socket != NULL)
    bound = g_socket_get_local_address (socket, &local);
  if (G_IS_INET_SOCKET_ADDRESS (bound))
    port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  if (socket == NULL || g_socket_get_socket_type (socket) != G_SOCKET_TYPE_STREAM
      || port != self->master_port)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "MIXPREC_BOOTSTRAP_LISTEN_FD=%d is not a TCP socket bound to port %u "
                   "(MIXPREC_MASTER_PORT)%s%s", self->listen_fd, self->master_port,
                   local != NULL ? ": " : "", local != NULL ? local->message : "");
      return FALSE;
    }
  if (!g_socket_listen (socket, error))
    return FALSE;
  g_socket_set_blocking (socket, FALSE);
  self->listener = g_steal_pointer (&socket);
  return TRUE;
}

static gboolean
root_listen (MixprecBootstrap *self,
             GError          **error)
{
  GList *addresses = _mixprec_bootstrap_resolve (self, error);
  g_autoptr(GError) last = NULL;

  if (self->listen_fd >= 0)
    {
      g_list_free_full (addresses, g_object_unref);
      return root_adopt (self, error);
    }
  if (addresses == NULL)
    return FALSE;
  for (GList *l = addresses; l != NULL && self->listener == NULL; l = l->next)
    {
      GInetAddress *inet = l->data;
      g_autoptr(GSocketAddress) address = g_inet_socket_address_new (inet, self->master_port);
      g_autoptr(GSocket) socket = g_socket_new (g_inet_address_get_family (inet),
                                                G_SOCKET_TYPE_STREAM,
                                                G_SOCKET_PROTOCOL_TCP, NULL);

      g_clear_error (&last);
      if (socket == NULL)
        continue;
      g_socket_set_listen_backlog (socket, (gint) MIN (self->world_size, 4096u));
      if (g_socket_bind (socket, address, TRUE, &last) && g_socket_listen (socket, &last))
        {
          g_autofree gchar *warning =
            _mixprec_bootstrap_loopback_warning (self->master_addr, inet,
                                                 self->local_from_hosts ? 1
                                                 : self->local_world_size, self->world_size);

          if (warning != NULL)
            g_warning ("%s", warning);
          g_socket_set_blocking (socket, FALSE);
          self->listener = g_steal_pointer (&socket);
        }
    }
  g_list_free_full (addresses, g_object_unref);
  if (self->listener == NULL)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                   "rank 0 cannot listen on %s:%u: %s (is another job using this port? is %s "
                   "an address of rank 0's own host?)", self->master_addr, self->master_port,
                   last != NULL ? last->message : "no usable address", self->master_addr);
      return FALSE;
    }
  return TRUE;
}

/* What rank 0 waits for: hellos (setup) or one collective's blobs. */
typedef struct
{
  gboolean setup;
  guint kind;
  gsize len;
  guint8 *out;
  gboolean *have;               /* world_size flags; [0] set */
  guint missing;
} Round;

static gchar *
describe_conn (MixprecWireConn *conn)
{
  return g_strdup_printf ("pid %u on %s, from %s", conn->pid,
                          conn->host != NULL ? conn->host : "an unknown host", conn->peer);
}

/* A hello arrived on a pending connection: admit the rank, or fail the
 * whole job with the reason (a misconfigured launch must not half-run). */
static gboolean
root_admit (MixprecBootstrap *self,
            Round            *round,
            MixprecWireConn  *conn,
            GError          **error)
{
  MixprecWireHello hello;
  g_autoptr(GError) local = NULL;
  guint rank, world;
  g_autofree gchar *who = NULL;

  if (conn->header.type != MIXPREC_WIRE_HELLO)
    {
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                    "a process at %s sent message type %u where a hello "
                                    "belongs", conn->peer, conn->header.type);
      return FALSE;
    }
  if (!_mixprec_wire_parse_hello (conn->payload, conn->header.length, &hello, &local))
    {
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                    "a process at %s %s", conn->peer, local->message);
      return FALSE;
    }
  rank = hello.rank;
  world = hello.world_size;
  conn->pid = hello.pid;
  conn->host = g_strdup (hello.host);
  who = describe_conn (conn);

  if (world != self->world_size)
    _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                  "rank %u (%s) was started with world size %u, but rank 0 "
                                  "with world size %u; every rank must be given the same "
                                  "world size", rank, who, world, self->world_size);
  else if (rank == 0)
    _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                  "rank 0 was started twice: pid %u on %s, and %s; each rank "
                                  "must be started exactly once", (guint) getpid (),
                                  g_get_host_name (), who);
  else if (rank >= self->world_size)
    _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                  "a process (%s) claims rank %u, but the ranks of a world of "
                                  "%u run from 0 to %u", who, rank, self->world_size,
                                  self->world_size - 1);
  else if (self->peers[rank] != NULL)
    {
      g_autofree gchar *first = describe_conn (self->peers[rank]);
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                    "rank %u was started twice (%s; and %s); each rank must "
                                    "be started exactly once", rank, first, who);
    }
  else
    {
      /* (once the job runs every rank is in, so only setup gets here) */
      guint index = 0;

      _mixprec_wire_conn_reset (conn);
      conn->rank = rank;
      conn->state = MIXPREC_WIRE_ADMITTED;
      /* the connection moves from pending (which frees) to peers */
      g_ptr_array_find (self->pending, conn, &index);
      g_ptr_array_steal_index (self->pending, index);
      self->peers[rank] = conn;
      round->have[rank] = TRUE;
      round->missing--;
      return TRUE;
    }
  /* the rejected process hears why too: failing told every connection */
  return FALSE;
}

/* Forgets a connection that never proved itself, logging why: once per
 * connection, and no more than a few per job, so that a flood of
 * strangers cannot flood the log either. Never fails the job. */
static void
root_drop (MixprecBootstrap *self,
           MixprecWireConn  *conn,
           const gchar      *why)
{
  if (self->drops_logged < _MIXPREC_BOOTSTRAP_MAX_DROP_LOGS)
    g_message ("bootstrap: rank 0 dropped the connection from %s: %s", conn->peer, why);
  else if (self->drops_logged == _MIXPREC_BOOTSTRAP_MAX_DROP_LOGS)
    g_message ("bootstrap: rank 0 dropped more connections; not logging them any more");
  self->drops_logged++;
  g_ptr_array_remove (self->pending, conn);
}

/* A fixed answer to a process that skipped the handshake: it is told the
 * job needs a secret and nothing else, so a rank launched without one
 * fails at once with a useful message instead of timing out. */
static void
root_refuse (MixprecBootstrap *self,
             MixprecWireConn  *conn)
{
  static const gchar message[] =
    "rank 0 requires the job secret: set MIXPREC_JOB_SECRET (or MIXPREC_JOB_SECRET_FILE) "
    "to the same value on every rank";
  gint64 deadline = g_get_monotonic_time () + 100 * 1000;

  _mixprec_wire_send (conn->socket, MIXPREC_WIRE_FAIL, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT, 0,
                      message, sizeof message - 1, deadline, NULL, NULL);
  (void) self;
}

/* The handshake, rank 0's side: the peer's challenge is answered with our
 * nonce and our proof, the peer's proof checked. Returns FALSE with @why
 * set when the connection is to be dropped. */
static gboolean
root_authenticate (MixprecBootstrap *self,
                   MixprecWireConn  *conn,
                   GError          **why)
{
  if (conn->state == MIXPREC_WIRE_AWAIT_CHALLENGE)
    {
      guint8 reply[MIXPREC_AUTH_REPLY_SIZE];
      gint64 deadline = MIN (conn->deadline, _mixprec_bootstrap_deadline (self));

      if (!_mixprec_auth_parse_challenge (&conn->header, conn->payload, conn->peer_nonce, why))
        {
          if (conn->header.type == MIXPREC_WIRE_HELLO)
            root_refuse (self, conn);
          return FALSE;
        }
      if (!_mixprec_auth_random (conn->root_nonce, sizeof conn->root_nonce, why))
        return FALSE;
      memcpy (reply, conn->root_nonce, MIXPREC_AUTH_NONCE_SIZE);
      _mixprec_auth_mac (self->secret, MIXPREC_AUTH_ROLE_ROOT, conn->peer_nonce,
                         conn->root_nonce, reply + MIXPREC_AUTH_NONCE_SIZE);
      if (_mixprec_wire_send (conn->socket, MIXPREC_WIRE_AUTH_REPLY, 0, 0, reply, sizeof reply,
                              deadline, self->cancellable, why) != MIXPREC_WIRE_OK)
        {
          if (why != NULL && *why == NULL)
            g_set_error_literal (why, G_IO_ERROR, G_IO_ERROR_FAILED,
                                 "it did not take rank 0's answer");
          return FALSE;
        }
      conn->state = MIXPREC_WIRE_AWAIT_PROOF;
      return TRUE;
    }
  if (!_mixprec_auth_check_proof (self->secret, conn->peer_nonce, conn->root_nonce,
                                  &conn->header, conn->payload, why))
    return FALSE;
  conn->state = MIXPREC_WIRE_AWAIT_HELLO;
  return TRUE;
}

/* Reads whatever a not-yet-admitted connection sent. Until it has proven
 * the job secret, nothing it does (junk, another protocol version, a
 * huge length, silence, hanging up) harms the job: it is dropped. */
static gboolean
root_read_pending (MixprecBootstrap *self,
                   Round            *round,
                   MixprecWireConn  *conn,
                   GError          **error)
{
  for (;;)
    {
      g_autoptr(GError) local = NULL;
      gboolean proven = conn->state == MIXPREC_WIRE_AWAIT_HELLO;
      MixprecWireStatus status =
        _mixprec_wire_conn_read (conn, proven ? MIXPREC_WIRE_MAX_HELLO : MIXPREC_AUTH_REPLY_SIZE,
                                 &local);

      if (status == MIXPREC_WIRE_AGAIN)
        return TRUE;
      if (status != MIXPREC_WIRE_OK)
        {
          if (proven && self->secret != NULL && status == MIXPREC_WIRE_BAD)
            {
              /* it holds the secret: a broken installation, not a stranger */
              _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                            "a process that holds the job secret sent a "
                                            "malformed hello: %s", local->message);
              return FALSE;
            }
          root_drop (self, conn, local != NULL ? local->message
                                 : "it closed before saying who it is");
          return TRUE;
        }
      if (proven && self->secret == NULL && conn->header.type != MIXPREC_WIRE_HELLO)
        {
          static const gchar message[] =
            "rank 0 has no job secret, but this process started the secret handshake: set "
            "MIXPREC_JOB_SECRET (or MIXPREC_JOB_SECRET_FILE) on every rank, or on none";
          gint64 deadline = g_get_monotonic_time () + 100 * 1000;

          _mixprec_wire_send (conn->socket, MIXPREC_WIRE_FAIL,
                              MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT, 0, message,
                              sizeof message - 1, deadline, NULL, NULL);
          root_drop (self, conn, "it offered a job secret, and rank 0 has none");
          return TRUE;
        }
      if (proven)
        return root_admit (self, round, conn, error);
      if (!root_authenticate (self, conn, &local))
        {
          root_drop (self, conn, local != NULL ? local->message : "it failed the handshake");
          return TRUE;
        }
      _mixprec_wire_conn_reset (conn);
    }
}

/* Drops unproven connections past their deadline; returns the earliest
 * deadline still to come (G_MAXINT64 for none). */
static gint64
root_expire (MixprecBootstrap *self)
{
  gint64 now = g_get_monotonic_time ();
  gint64 next = G_MAXINT64;

  for (guint i = self->pending->len; i-- > 0;)
    {
      MixprecWireConn *conn = g_ptr_array_index (self->pending, i);

      if (conn->state == MIXPREC_WIRE_AWAIT_HELLO && self->secret != NULL)
        continue;
      if (conn->deadline <= now)
        root_drop (self, conn, "it did not complete the handshake in time");
      else
        next = MIN (next, conn->deadline);
    }
  return next;
}

static void
root_accept (MixprecBootstrap *self)
{
  for (;;)
    {
      g_autoptr(GSocket) socket = g_socket_accept (self->listener, NULL, NULL);
      MixprecWireConn *conn;

      if (socket == NULL)
        return;
      _mixprec_bootstrap_tune_socket (socket);
      /* the oldest stranger makes room: a real rank is never locked out
       * for long by connections that say nothing */
      if (self->pending->len >= _MIXPREC_BOOTSTRAP_MAX_UNPROVEN)
        root_drop (self, g_ptr_array_index (self->pending, 0),
                   "too many connections are waiting to prove the job secret");
      conn = _mixprec_wire_conn_new (socket);
      conn->state = self->secret != NULL ? MIXPREC_WIRE_AWAIT_CHALLENGE
                                         : MIXPREC_WIRE_AWAIT_HELLO;
      conn->deadline = g_get_monotonic_time ()
                       + (gint64) MIN (self->timeout_ms, _MIXPREC_BOOTSTRAP_PROOF_MS) * 1000;
      g_ptr_array_add (self->pending, conn);
    }
}

/* One collective's blob from rank @r arrived (or did not). */
static gboolean
root_read_peer (MixprecBootstrap *self,
                Round            *round,
                guint             r,
                GError          **error)
{
  MixprecWireConn *conn = self->peers[r];
  g_autoptr(GError) local = NULL;
  MixprecWireStatus status = _mixprec_wire_conn_read (conn, MIXPREC_WIRE_MAX_PAYLOAD, &local);
  const gchar *what = _mixprec_bootstrap_kind_name (round->kind);
  const MixprecWireHeader *h = &conn->header;

  switch (status)
    {
    case MIXPREC_WIRE_AGAIN:
      return TRUE;
    case MIXPREC_WIRE_OK:
      break;
    case MIXPREC_WIRE_CLOSED:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                                    "rank %u closed its connection during %s #%u (did it "
                                    "exit, crash or abort?)", r, what, self->seq);
      return FALSE;
    case MIXPREC_WIRE_BAD:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                    "rank %u sent a malformed message during %s #%u: %s", r,
                                    what, self->seq, local->message);
      return FALSE;
    case MIXPREC_WIRE_TIMEOUT:
    case MIXPREC_WIRE_CANCELLED:
    case MIXPREC_WIRE_FAILED:
    default:
      _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                                    "the connection to rank %u failed during %s #%u: %s", r,
                                    what, self->seq,
                                    local != NULL ? local->message : "unknown error");
      return FALSE;
    }

  if (h->type != MIXPREC_WIRE_GATHER || h->seq != self->seq)
    _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                  "rank %u sent message type %u for collective #%u while rank "
                                  "0 runs %s #%u", r, h->type, h->seq, what, self->seq);
  else if (h->aux != round->kind)
    _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                  "rank %u called %s #%u while rank 0 called %s #%u; every "
                                  "rank must make the same calls in the same order", r,
                                  _mixprec_bootstrap_kind_name (h->aux), self->seq, what,
                                  self->seq);
  else if (h->length != round->len)
    _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                                  "ranks disagree on the length of %s #%u: rank 0 passed "
                                  "%" G_GSIZE_FORMAT " bytes, rank %u passed %u; every rank "
                                  "must pass the same length", what, self->seq, round->len,
                                  r, h->length);
  else
    {
      if (round->len > 0)
        memcpy (round->out + (gsize) r * round->len, conn->payload, round->len);
      _mixprec_wire_conn_reset (conn);
      round->have[r] = TRUE;
      round->missing--;
      return TRUE;
    }
  return FALSE;
}

/* Serves the listener, the pending connections and the ranks @round waits
 * for until it is complete, a rank fails it, or the timeout passes. */
static gboolean
root_pump (MixprecBootstrap *self,
           Round            *round,
           GError          **error)
{
  gint64 deadline = _mixprec_bootstrap_deadline (self);
  g_autoptr(GArray) fds = g_array_new (FALSE, FALSE, sizeof (GPollFD));
  g_autoptr(GPtrArray) owners = g_ptr_array_new ();

  while (round->missing > 0)
    {
      GPollFD fd;
      gint64 left;
      gboolean cancel_fd;
      guint first_conn;
      gint64 wake = deadline;
      guint n_pending;

      if (self->pending != NULL && self->pending->len > 0)
        wake = MIN (wake, root_expire (self));
      left = wake - g_get_monotonic_time ();

      g_array_set_size (fds, 0);
      g_ptr_array_set_size (owners, 0);
      cancel_fd = g_cancellable_make_pollfd (self->cancellable, &fd);
      if (cancel_fd)
        g_array_append_val (fds, fd);
      /* the listener is closed once every rank is in */
      fd.fd = self->listener != NULL ? g_socket_get_fd (self->listener) : -1;
      fd.events = G_IO_IN;
      fd.revents = 0;
      g_array_append_val (fds, fd);
      first_conn = fds->len;
      n_pending = self->pending->len;
      for (guint i = 0; i < self->pending->len; i++)
        {
          MixprecWireConn *conn = g_ptr_array_index (self->pending, i);
          fd.fd = g_socket_get_fd (conn->socket);
          g_array_append_val (fds, fd);
          g_ptr_array_add (owners, conn);
        }
      for (guint r = 1; !round->setup && r < self->world_size; r++)
        if (!round->have[r])
          {
            fd.fd = g_socket_get_fd (self->peers[r]->socket);
            g_array_append_val (fds, fd);
            g_ptr_array_add (owners, self->peers[r]);
          }

      if (left > 0 || wake < deadline)
        g_poll ((GPollFD *) fds->data, fds->len,
                (gint) CLAMP ((left + 999) / 1000, 0, G_MAXINT));
      if (cancel_fd)
        g_cancellable_release_fd (self->cancellable);

      if (g_cancellable_is_cancelled (self->cancellable))
        {
          _mixprec_bootstrap_fail_aborted (self, error);
          return FALSE;
        }

      if (self->listener != NULL && g_array_index (fds, GPollFD, first_conn - 1).revents != 0)
        root_accept (self);
      for (guint i = 0; i < owners->len; i++)
        {
          MixprecWireConn *conn = g_ptr_array_index (owners, i);
          GPollFD *pfd = &g_array_index (fds, GPollFD, first_conn + i);

          if (pfd->revents == 0)
            continue;
          if (i < n_pending)
            {
              /* dropped meanwhile (to make room, or failed): freed */
              if (!g_ptr_array_find (self->pending, conn, NULL))
                continue;
              if (!root_read_pending (self, round, conn, error))
                return FALSE;
            }
          else if (!root_read_peer (self, round, conn->rank, error))
            return FALSE;
        }
      /* connections accepted just now may hold their hello already */
      for (guint i = 0; i < self->pending->len; i++)
        {
          MixprecWireConn *conn = g_ptr_array_index (self->pending, i);

          if (g_ptr_array_find (owners, conn, NULL))
            continue;
          if (!root_read_pending (self, round, conn, error))
            return FALSE;
          if (i < self->pending->len && g_ptr_array_index (self->pending, i) != conn)
            i--;
        }

      if (round->missing > 0 && g_get_monotonic_time () >= deadline)
        {
          guint count;
          g_autofree gchar *missing = describe_missing (self, round->have, &count);

          /* a batch script that runs the program without srun is one
           * task of SLURM_NTASKS: the others never come */
          const gchar *hint = g_str_equal (self->source, "slurm")
                              ? "; under Slurm, start the program with srun" : "";

          if (round->setup)
            _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                                          "%s of %u did not join within %u ms (were they "
                                          "started, with the rendezvous address %s:%u?%s)",
                                          missing, self->world_size, self->timeout_ms,
                                          self->master_addr, self->master_port, hint);
          else
            _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                                          "%s of %u did not reach %s #%u within %u ms (stuck, "
                                          "or skipped the call?)", missing, self->world_size,
                                          _mixprec_bootstrap_kind_name (round->kind), self->seq,
                                          self->timeout_ms);
          return FALSE;
        }
    }
  return TRUE;
}

/* Sends every rank the same frame; a rank that cannot be reached fails
 * the job. */
static gboolean
root_broadcast (MixprecBootstrap *self,
                MixprecWireType   type,
                guint32           aux,
                gconstpointer     payload,
                gsize             len,
                const gchar      *what,
                GError          **error)
{
  gint64 deadline = _mixprec_bootstrap_deadline (self);

  for (guint r = 1; r < self->world_size; r++)
    {
      g_autoptr(GError) local = NULL;
      MixprecWireStatus status = _mixprec_wire_send (self->peers[r]->socket, type, aux,
                                                     self->seq, payload, len, deadline,
                                                     self->cancellable, &local);

      if (status == MIXPREC_WIRE_CANCELLED)
        {
          _mixprec_bootstrap_fail_aborted (self, error);
          return FALSE;
        }
      if (status == MIXPREC_WIRE_TIMEOUT)
        {
          _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                                        "rank %u did not take the result of %s within %u ms", r,
                                        what, self->timeout_ms);
          return FALSE;
        }
      if (status != MIXPREC_WIRE_OK)
        {
          _mixprec_bootstrap_fail_with (self, error, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                                        "rank %u closed its connection before the end of %s "
                                        "(did it exit, crash or abort?)%s%s", r, what,
                                        local != NULL ? ": " : "",
                                        local != NULL ? local->message : "");
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
_mixprec_bootstrap_root_setup (MixprecBootstrap *self,
                               GError          **error)
{
  g_autofree gboolean *have = g_new0 (gboolean, self->world_size);
  Round round = { TRUE, 0, 0, NULL, have, self->world_size - 1 };
  g_autofree guint8 *ids = NULL;
  gsize ids_len = (gsize) self->world_size * 4;

  if (!root_listen (self, error))
    return FALSE;
  self->pending = g_ptr_array_new_with_free_func ((GDestroyNotify) _mixprec_wire_conn_free);
  self->peers = g_new0 (MixprecWireConn *, self->world_size);
  have[0] = TRUE;
  if (!root_pump (self, &round, error))
    return FALSE;
  /* every rank is in: nobody else may join, so nobody need reach us */
  g_socket_close (self->listener, NULL);
  g_clear_object (&self->listener);
  while (self->pending->len > 0)
    root_drop (self, g_ptr_array_index (self->pending, 0),
               "every rank had joined; the rendezvous is closed");
  /* every rank's host, as the lowest rank on it */
  ids = g_malloc (ids_len);
  for (guint r = 0; r < self->world_size; r++)
    {
      const gchar *host = r == 0 ? g_get_host_name () : self->peers[r]->host;
      guint first = r;

      for (guint q = 0; q < r && first == r; q++)
        if (g_strcmp0 (q == 0 ? g_get_host_name () : self->peers[q]->host, host) == 0)
          first = q;
      _mixprec_wire_put_u32 (ids + (gsize) r * 4, first);
    }
  _mixprec_bootstrap_apply_hosts (self, ids, ids_len);
  return root_broadcast (self, MIXPREC_WIRE_WELCOME, 0, ids, ids_len, "the rendezvous", error);
}

gboolean
_mixprec_bootstrap_root_gather (MixprecBootstrap *self,
                                guint             kind,
                                gconstpointer     in,
                                gsize             len,
                                guint8           *out,
                                GError          **error)
{
  g_autofree gboolean *have = g_new0 (gboolean, self->world_size);
  Round round = { FALSE, kind, len, out, have, self->world_size - 1 };
  g_autofree gchar *what = g_strdup_printf ("%s #%u", _mixprec_bootstrap_kind_name (kind),
                                            self->seq);

  have[0] = TRUE;
  if (len > 0)
    memcpy (out, in, len);
  if (!root_pump (self, &round, error))
    return FALSE;
  return root_broadcast (self, MIXPREC_WIRE_RESULT, kind, out, len * self->world_size,
                         what, error);
}

/* Tells every connected process why the job failed, and closes politely:
 * the message goes out before our FIN, and we read (and drop) whatever the
 * peers still send until they hang up. Closing with unread bytes would
 * send a reset instead, and a reset can destroy the message in flight. */
void
_mixprec_bootstrap_root_tell_failure (MixprecBootstrap *self,
                                      const GError     *error)
{
  /* short and fixed: the message fits in the socket buffers, and a peer
   * busy elsewhere will find it there when it next reads */
  gint64 deadline = g_get_monotonic_time () + 250 * 1000;
  gsize len = strlen (error->message);
  g_autoptr(GPtrArray) open = g_ptr_array_new ();
  g_autoptr(GArray) fds = g_array_new (FALSE, FALSE, sizeof (GPollFD));

  for (guint r = 1; self->peers != NULL && r < self->world_size; r++)
    if (self->peers[r] != NULL)
      g_ptr_array_add (open, self->peers[r]->socket);
  /* a connection that has not proven the job secret hears nothing: the
   * message names pids, hosts and addresses of the job */
  for (guint i = 0; self->pending != NULL && i < self->pending->len; i++)
    {
      MixprecWireConn *conn = g_ptr_array_index (self->pending, i);

      if (conn->state == MIXPREC_WIRE_AWAIT_HELLO)
        g_ptr_array_add (open, conn->socket);
    }

  for (guint i = 0; i < open->len; i++)
    {
      GSocket *socket = g_ptr_array_index (open, i);

      _mixprec_wire_send (socket, MIXPREC_WIRE_FAIL, error->code, self->seq, error->message,
                          len, deadline, NULL, NULL);
      g_socket_shutdown (socket, FALSE, TRUE, NULL);
    }

  while (open->len > 0 && g_get_monotonic_time () < deadline)
    {
      gint64 left = deadline - g_get_monotonic_time ();

      g_array_set_size (fds, 0);
      for (guint i = 0; i < open->len; i++)
        {
          GPollFD fd = { g_socket_get_fd (g_ptr_array_index (open, i)), G_IO_IN, 0 };
          g_array_append_val (fds, fd);
        }
      if (g_poll ((GPollFD *) fds->data, fds->len, (gint) MAX ((left + 999) / 1000, 1)) <= 0)
        continue;
      for (guint i = fds->len; i-- > 0;)
        {
          g_autoptr(GError) io_error = NULL;
          guint8 scratch[4096];
          gssize n;

          if (g_array_index (fds, GPollFD, i).revents == 0)
            continue;
          n = g_socket_receive (g_ptr_array_index (open, i), (gchar *) scratch,
                                sizeof scratch, NULL, &io_error);
          if (n == 0
              || (n < 0 && !g_error_matches (io_error, G_IO_ERROR, G_IO_ERROR_WOULD_BLOCK)))
            g_ptr_array_remove_index_fast (open, i);
        }
    }
}
