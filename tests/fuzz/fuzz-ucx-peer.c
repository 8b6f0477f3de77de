/* fuzz-ucx-peer.c — what comm-ucx receives from other ranks
 * (plugins/comm-ucx/ucx-peer.c): identity records (and the connection
 * hints printed from two of them), worker addresses and their lengths,
 * shared-memory offers, invites, segment headers and the broken word.
 * The first input byte picks the structure, the rest is its bytes; for
 * the invite and the segment header, the byte after it sets the world
 * (2 + byte % 200 ranks). */
#include "config.h"

#include <string.h>

#include "comm-ucx/ucx-hint.h"
#include "comm-ucx/ucx-peer.h"
#include "fuzz-common.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  fuzz_init ();
  return 0;
}

/* A rejection always says why, in a terminated sentence. */
static void
check_verdict (int         verdict,
               const char *err,
               size_t      len)
{
  g_assert (verdict == 0 || verdict == -1);
  g_assert (memchr (err, '\0', len) != NULL);
  g_assert (verdict == 0 || err[0] != '\0');
}

/* An accepted string field is terminated and printable. */
static void
check_field (const char *field,
             size_t      size)
{
  g_assert (ucx_peer_string_ok (field, size));
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  char err[512];
  const uint8_t *in = data + 1;
  size_t n = size > 0 ? size - 1 : 0;
  unsigned world = n > 0 ? 2 + in[0] % 200 : 2;
  int v;

  if (size == 0)
    return 0;
  err[0] = '\0';
  switch (data[0] % 7)
    {
    case 0:
      {
        UcxPeerInfo peers[2];
        char hint[512];
        size_t one = sizeof peers[0];

        memset (peers, 0, sizeof peers);
        v = ucx_peer_parse_info (in, n < one ? n : one, 1, &peers[1], err, sizeof err);
        check_verdict (v, err, sizeof err);
        if (v == 0)
          {
            check_field (peers[1].host, sizeof peers[1].host);
            check_field (peers[1].net_devices, sizeof peers[1].net_devices);
            g_assert (peers[1].n_addrs <= UCX_HINT_MAX_ADDRS);
            /* The second record, or a copy: the hints print both. */
            if (n >= 2 * one && ucx_peer_parse_info (in + one, one, 0, &peers[0], err,
                                                     sizeof err) == 0)
              {
                ucx_hint_for_peer (peers, 0, 1, hint, sizeof hint);
                g_assert (memchr (hint, '\0', sizeof hint) != NULL);
                ucx_hint_for_world (peers, 2, 1, hint, sizeof hint);
              }
          }
        break;
      }
    case 1:
      v = ucx_peer_check_address (in, n, 3, err, sizeof err);
      check_verdict (v, err, sizeof err);
      g_assert (v != 0 || (n >= 2 && (in[0] & 0xf) <= 1));
      break;
    case 2:
      {
        uint64_t length = 0;

        memcpy (&length, in, n < sizeof length ? n : sizeof length);
        v = ucx_peer_check_address_length (length, 1, err, sizeof err);
        check_verdict (v, err, sizeof err);
        g_assert (v != 0 || (length >= 1 && length <= UCX_PEER_ADDRESS_MAX));
        break;
      }
    case 3:
      {
        UcxShmOffer offer;

        v = ucx_peer_parse_offer (in, n < sizeof offer ? n : sizeof offer, 2, &offer,
                                  err, sizeof err);
        check_verdict (v, err, sizeof err);
        if (v == 0)
          {
            check_field (offer.domain, sizeof offer.domain);
            g_assert (offer.mode >= 0 && offer.mode <= 2);
          }
        break;
      }
    case 4:
      {
        UcxShmInvite invite;
        size_t local = ucx_peer_shm_chunk_for_world ((size_t) 1 << 20, world);

        if (n > 0)
          {
            in++;
            n--;
          }
        v = ucx_peer_parse_invite (in, n < sizeof invite ? n : sizeof invite, 1, world, local,
                                   &invite, err, sizeof err);
        check_verdict (v, err, sizeof err);
        if (v == 0 && invite.ok)
          {
            check_field (invite.name, sizeof invite.name);
            g_assert (strncmp (invite.name, UCX_PEER_SHM_PREFIX,
                               strlen (UCX_PEER_SHM_PREFIX)) == 0);
            g_assert (strchr (invite.name + 1, '/') == NULL);
            g_assert (invite.chunk_bytes == local);
            g_assert (ucx_peer_shm_segment_bytes (world, local) <=
                      UCX_PEER_SHM_BUFFER_MAX + ((size_t) 1 << 20));
          }
        break;
      }
    case 5:
      {
        char shown[128];
        UcxShmHeader h;

        if (n > 0)
          {
            in++;
            n--;
          }
        v = ucx_peer_check_shm_header (in, n, "/mixprec-ucx-fuzz", world, (uint64_t) 1 << 20,
                                       err, sizeof err);
        check_verdict (v, err, sizeof err);
        if (n >= sizeof h)
          {
            memcpy (&h, in, sizeof h);
            g_assert (ucx_peer_broken_rank (h.broken, world) <= world);
            ucx_peer_printable (h.message, sizeof h.message, shown, sizeof shown);
            g_assert (strlen (shown) < sizeof shown);
            for (const char *c = shown; *c != '\0'; c++)
              g_assert (*c >= 0x20 && *c < 0x7f);
          }
        break;
      }
    default:
      {
        char shown[64];

        ucx_peer_printable ((const char *) in, n, shown, sizeof shown);
        g_assert (strlen (shown) < sizeof shown);
        for (const char *c = shown; *c != '\0'; c++)
          g_assert (*c >= 0x20 && *c < 0x7f);
        break;
      }
    }
  return 0;
}
