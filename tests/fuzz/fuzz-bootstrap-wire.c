/* fuzz-bootstrap-wire.c — the bootstrap's frames as a peer sends them:
 * the input is the byte stream of one connection, read frame by frame
 * through a socketpair by the same reader rank 0 and the ranks use, and
 * each complete frame goes to the decoder of its type (hello, welcome's
 * host table, FAIL text). The first input byte picks the world size and
 * the payload bound, as the two sides use different ones. */
#include "config.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"
#include "fuzz-common.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  fuzz_init ();
  return 0;
}

static void
decode (const MixprecWireHeader *h,
        const guint8            *payload,
        guint                    world)
{
  g_autoptr(GError) error = NULL;
  MixprecWireHello hello;
  g_autofree gchar *text = NULL;

  switch (h->type)
    {
    case MIXPREC_WIRE_HELLO:
      if (_mixprec_wire_parse_hello (payload, h->length, &hello, &error))
        {
          /* what passed is safe to print */
          g_assert (strlen (hello.host) == h->length - MIXPREC_WIRE_HELLO_SIZE);
          for (const gchar *p = hello.host; *p != '\0'; p++)
            g_assert (g_ascii_isgraph (*p));
        }
      else
        g_assert (error != NULL);
      break;
    case MIXPREC_WIRE_WELCOME:
      if (_mixprec_wire_check_hosts (payload, h->length, world, &error))
        for (guint r = 0; r < world; r++)
          g_assert (_mixprec_wire_get_u32 (payload + (gsize) r * 4) <= r);
      break;
    case MIXPREC_WIRE_FAIL:
    default:
      text = _mixprec_wire_printable (payload, h->length);
      g_assert (g_utf8_validate (text, -1, NULL));
      for (const gchar *p = text; *p != '\0'; p++)
        g_assert ((guchar) *p >= 0x20 && *p != 0x7f);
      break;
    }
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GSocket) ours = NULL;
  g_autoptr(MixprecWireConn) conn = NULL;
  int fds[2];
  guint world;
  gsize max_payload;

  if (size < 1 || size > 65536)
    return 0;
  world = 1 + data[0] % 8;
  max_payload = (data[0] & 0x80) ? MIXPREC_WIRE_MAX_HELLO : MIXPREC_AUTH_REPLY_SIZE;
  data++;
  size--;

  /* one header straight into the parser, too */
  if (size >= MIXPREC_WIRE_HEADER_SIZE)
    {
      MixprecWireHeader h;
      g_autoptr(GError) error = NULL;

      if (_mixprec_wire_parse_header (data, max_payload, "fuzz", &h, &error) == MIXPREC_WIRE_OK)
        g_assert (h.length <= max_payload);
      else
        g_assert (error != NULL);
    }

  if (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
    return 0;
  if (size > 0 && write (fds[1], data, size) != (gssize) size)
    {
      close (fds[0]);
      close (fds[1]);
      return 0;
    }
  close (fds[1]);
  ours = g_socket_new_from_fd (fds[0], NULL);
  if (ours == NULL)
    {
      close (fds[0]);
      return 0;
    }
  g_socket_set_blocking (ours, FALSE);
  conn = _mixprec_wire_conn_new (ours);
  for (guint frames = 0; frames < 1024; frames++)
    {
      g_autoptr(GError) error = NULL;
      MixprecWireStatus status = _mixprec_wire_conn_read (conn, max_payload, &error);

      if (status != MIXPREC_WIRE_OK)
        {
          g_assert (status != MIXPREC_WIRE_BAD || error != NULL);
          break;
        }
      g_assert (conn->header.length <= max_payload);
      decode (&conn->header, conn->payload, world);
      _mixprec_wire_conn_reset (conn);
    }
  return 0;
}
