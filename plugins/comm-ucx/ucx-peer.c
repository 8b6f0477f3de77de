/* ucx-peer.c — comm-ucx's checks of what other ranks send (see
 * ucx-peer.h). A peer is any process that reached the bootstrap: its
 * records may be short, unterminated, out of range or made to crash UCX,
 * and a rank that trusted them would read past a field, print raw bytes,
 * map a segment of the wrong size or abort inside UCX. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "mixprec-plugin-fail-private.h"
#include "ucx-peer.h"

static int
is_printable (unsigned char c)
{
  return c >= 0x20 && c < 0x7f;
}

int
ucx_peer_string_ok (const char *field,
                    size_t      size)
{
  for (size_t i = 0; i < size; i++)
    {
      if (field[i] == '\0')
        return 1;
      if (!is_printable ((unsigned char) field[i]))
        return 0;
    }
  return 0;
}

void
ucx_peer_printable (const char *field,
                    size_t      size,
                    char       *out,
                    size_t      len)
{
  size_t n = 0;

  if (len == 0)
    return;
  for (size_t i = 0; i < size && field[i] != '\0'; i++)
    {
      unsigned char c = (unsigned char) field[i];

      if (is_printable (c) && c != '\\')
        {
          if (n + 1 >= len)
            break;
          out[n++] = (char) c;
        }
      else
        {
          if (n + 4 >= len)
            break;
          snprintf (out + n, len - n, "\\x%02x", c);
          n += 4;
        }
    }
  out[n] = '\0';
}

/* A string field of a peer's record: rejected, shown escaped, when it is
 * not NUL-terminated within the field or holds other than printable ASCII. */
static int
check_string (const char *field,
              size_t      size,
              unsigned    rank,
              const char *what,
              int         may_be_empty,
              char       *err,
              size_t      err_len)
{
  char shown[64];

  if (ucx_peer_string_ok (field, size) && (may_be_empty || field[0] != '\0'))
    return 0;
  ucx_peer_printable (field, size, shown, sizeof shown);
  if (memchr (field, '\0', size) == NULL)
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a %s that is not NUL-terminated within its "
                                 "%zu bytes (\"%s...\"): the peer is not a comm-ucx rank of this build",
                                 rank, what, size, shown);
  if (field[0] == '\0')
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent an empty %s: the peer is not a comm-ucx "
                                 "rank of this build", rank, what);
  return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a %s with bytes other than printable ASCII "
                               "(\"%s\"): the peer is not a comm-ucx rank of this build", rank, what, shown);
}

static int
check_record_length (size_t      len,
                     size_t      expected,
                     unsigned    rank,
                     const char *what,
                     char       *err,
                     size_t      err_len)
{
  if (len == expected)
    return 0;
  return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a %s of %zu bytes where this rank expects %zu: "
                               "every rank must run the same libmixprec build", rank, what, len, expected);
}

int
ucx_peer_parse_info (const void  *bytes,
                     size_t       len,
                     unsigned     rank,
                     UcxPeerInfo *out,
                     char        *err,
                     size_t       err_len)
{
  UcxPeerInfo info;

  if (check_record_length (len, sizeof info, rank, "process identity", err, err_len) != 0)
    return -1;
  memcpy (&info, bytes, sizeof info);
  /* pid_t is an int; 0 and below name no process (kill() and /proc would
   * read them as a group or as this process). */
  if (info.pid <= 0 || info.pid > INT32_MAX)
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent process id %lld: must be from 1 to %d",
                                 rank, (long long) info.pid, INT32_MAX);
  if (check_string (info.host, sizeof info.host, rank, "host identity", 0, err, err_len) != 0 ||
      check_string (info.netns, sizeof info.netns, rank, "network namespace identity", 0,
                    err, err_len) != 0 ||
      check_string (info.net_devices, sizeof info.net_devices, rank, "UCX_NET_DEVICES value", 1,
                    err, err_len) != 0)
    return -1;
  if (info.n_addrs > UCX_HINT_MAX_ADDRS)
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent %u network addresses: at most %u fit its record",
                                 rank, info.n_addrs, UCX_HINT_MAX_ADDRS);
  if (info.loopback_only > 1)
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent loopback_only = %u: must be 0 or 1",
                                 rank, info.loopback_only);
  for (uint32_t i = 0; i < info.n_addrs; i++)
    if (check_string (info.addr_devices[i], sizeof info.addr_devices[i], rank,
                      "network device name", 0, err, err_len) != 0)
      return -1;
  *out = info;
  return 0;
}

int
ucx_peer_check_address_length (uint64_t  length,
                               unsigned  rank,
                               char     *err,
                               size_t    err_len)
{
  if (length >= 1 && length <= UCX_PEER_ADDRESS_MAX)
    return 0;
  return _mixprec_plugin_fail (err, err_len, -1, "rank %u announced a UCX worker address of %llu bytes: must be "
                               "from 1 to %zu", rank, (unsigned long long) length, UCX_PEER_ADDRESS_MAX);
}

/* ucp_address_pack's header: byte 0's low nibble is the version. Version
 * 1 keeps its flags in the high nibble; version 2 has a second byte of
 * flags (four defined) and the UCX release in byte 0's high nibble. A
 * worker unique id (8 bytes) and a client id (8 bytes) follow when their
 * flags are set. */
#define ADDRESS_FLAG_WORKER_UUID 0x2u
#define ADDRESS_FLAG_CLIENT_ID   0x4u
#define ADDRESS_FLAGS_KNOWN      0xfu

int
ucx_peer_check_address (const uint8_t *address,
                        size_t         len,
                        unsigned       rank,
                        char          *err,
                        size_t         err_len)
{
  unsigned version, flags;
  size_t need;

  if (ucx_peer_check_address_length (len, rank, err, err_len) != 0)
    return -1;
  version = address[0] & 0xfu;
  if (version == UCX_PEER_ADDRESS_V1)
    {
      flags = address[0] >> 4;
      need = 1;
    }
  else if (version == UCX_PEER_ADDRESS_V2)
    {
      if (len < 2)
        return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a UCX worker address of version 2 in %zu "
                                     "byte: its header alone takes 2", rank, len);
      flags = address[1];
      need = 2;
      if (flags & ~ADDRESS_FLAGS_KNOWN)
        return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a UCX worker address with header flags "
                                     "0x%02x: UCX defines only 0x%02x", rank, flags, ADDRESS_FLAGS_KNOWN);
    }
  else
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a UCX worker address whose first byte 0x%02x "
                                 "names version %u: UCX knows %u (v1) and %u (v2) only, so the peer is not "
                                 "a UCX worker", rank, address[0], version, UCX_PEER_ADDRESS_V1,
                                 UCX_PEER_ADDRESS_V2);
  need += (flags & ADDRESS_FLAG_WORKER_UUID) ? 8 : 0;
  need += (flags & ADDRESS_FLAG_CLIENT_ID) ? 8 : 0;
  /* One more byte at least: the list of devices (or its end marker). */
  need += 1;
  if (len < need)
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent a UCX worker address of %zu bytes whose header "
                                 "(flags 0x%02x) needs at least %zu", rank, len, flags, need);
  return 0;
}

int
ucx_peer_parse_offer (const void  *bytes,
                      size_t       len,
                      unsigned     rank,
                      UcxShmOffer *out,
                      char        *err,
                      size_t       err_len)
{
  UcxShmOffer offer;

  if (check_record_length (len, sizeof offer, rank, "shared-memory offer", err, err_len) != 0)
    return -1;
  memcpy (&offer, bytes, sizeof offer);
  if (check_string (offer.domain, sizeof offer.domain, rank, "shared-memory domain", 0,
                    err, err_len) != 0)
    return -1;
  if (offer.mode < 0 || offer.mode > 2)
    return _mixprec_plugin_fail (err, err_len, -1, "rank %u sent shared-memory mode %d: must be 0 (off), 1 "
                                 "(auto) or 2 (required)", rank, (int) offer.mode);
  *out = offer;
  return 0;
}

size_t
ucx_peer_shm_chunk_for_world (size_t   wanted,
                              unsigned world)
{
  size_t cap = UCX_PEER_SHM_BUFFER_MAX / (2 * (size_t) world + 2);

  return wanted > cap ? cap & ~(size_t) 4095 : wanted;
}

/* The header and one cache line per rank, on whole pages; the buffers
 * follow. */
size_t
ucx_peer_shm_segment_bytes (unsigned world,
                            size_t   chunk_bytes)
{
  size_t lines = (sizeof (UcxShmHeader) + 63) & ~(size_t) 63;
  size_t header = (lines + (size_t) world * 64 + 4095) & ~(size_t) 4095;

  return header + (2 * (size_t) world + 2) * chunk_bytes;
}

int
ucx_peer_parse_invite (const void   *bytes,
                       size_t        len,
                       unsigned      me,
                       unsigned      world,
                       size_t        local_chunk_bytes,
                       UcxShmInvite *out,
                       char         *err,
                       size_t        err_len)
{
  UcxShmInvite invite;
  size_t prefix = strlen (UCX_PEER_SHM_PREFIX);

  if (check_record_length (len, sizeof invite, 0, "shared-memory invite", err, err_len) != 0)
    return -1;
  memcpy (&invite, bytes, sizeof invite);
  if (invite.ok != 0 && invite.ok != 1)
    return _mixprec_plugin_fail (err, err_len, -1, "rank 0 sent shared-memory ok = %d: must be 0 or 1",
                                 (int) invite.ok);
  if (!invite.ok)
    {
      /* Nothing to map: the other fields are not read. */
      memset (out, 0, sizeof *out);
      return 0;
    }
  if (check_string (invite.name, sizeof invite.name, 0, "shared-memory segment name", 0,
                    err, err_len) != 0)
    return -1;
  /* Only a name of the plugin's own form: no other object of /dev/shm,
   * no path. */
  if (strncmp (invite.name, UCX_PEER_SHM_PREFIX, prefix) != 0 ||
      invite.name[prefix] == '\0' || strchr (invite.name + 1, '/') != NULL)
    return _mixprec_plugin_fail (err, err_len, -1, "rank 0 sent the shared-memory segment name \"%s\": it must "
                                 "start with \"%s\" and hold no other '/'", invite.name, UCX_PEER_SHM_PREFIX);
  if (invite.chunk_bytes < UCX_PEER_SHM_CHUNK_MIN || invite.chunk_bytes > UCX_PEER_SHM_CHUNK_MAX ||
      invite.chunk_bytes > ucx_peer_shm_chunk_for_world (UCX_PEER_SHM_CHUNK_MAX, world))
    return _mixprec_plugin_fail (err, err_len, -1, "rank 0 sent a shared-memory chunk of %llu bytes: for %u ranks "
                                 "it must be from %zu to %zu", (unsigned long long) invite.chunk_bytes, world,
                                 UCX_PEER_SHM_CHUNK_MIN,
                                 ucx_peer_shm_chunk_for_world (UCX_PEER_SHM_CHUNK_MAX, world));
  if (invite.chunk_bytes != local_chunk_bytes)
    return _mixprec_plugin_fail (err, err_len, -1, "rank 0 sent a shared-memory chunk of %llu bytes where rank %u's "
                                 "settings give %zu: set MIXPREC_UCX_SHM_CHUNK_BYTES alike on every rank",
                                 (unsigned long long) invite.chunk_bytes, me, local_chunk_bytes);
  *out = invite;
  return 0;
}

int
ucx_peer_check_shm_header (const void *bytes,
                           size_t      len,
                           const char *name,
                           unsigned    world,
                           uint64_t    chunk_bytes,
                           char       *err,
                           size_t      err_len)
{
  UcxShmHeader h;

  if (len < sizeof h)
    return _mixprec_plugin_fail (err, err_len, -1, "shared-memory segment %s: %zu bytes hold no header of %zu",
                                 name, len, sizeof h);
  memcpy (&h, bytes, sizeof h);
  if (h.magic != UCX_SHM_MAGIC || h.version != UCX_SHM_VERSION)
    return _mixprec_plugin_fail (err, err_len, -1, "shared-memory segment %s: magic 0x%08x version %u, where "
                                 "comm-ucx writes 0x%08x version %u", name, h.magic, h.version,
                                 UCX_SHM_MAGIC, UCX_SHM_VERSION);
  if (h.world != world || h.chunk_bytes != chunk_bytes)
    return _mixprec_plugin_fail (err, err_len, -1, "shared-memory segment %s is laid out for %u ranks and chunks "
                                 "of %llu bytes, not %u and %llu as rank 0 announced", name, h.world,
                                 (unsigned long long) h.chunk_bytes, world, (unsigned long long) chunk_bytes);
  return 0;
}

int
ucx_peer_check_segment_stat (const char *name,
                             uid_t       owner,
                             mode_t      mode,
                             uint64_t    size,
                             uid_t       euid,
                             uint64_t    expected,
                             char       *err,
                             size_t      err_len)
{
  if (owner != euid)
    return _mixprec_plugin_fail (err, err_len, -1, "shared-memory segment %s belongs to uid %lu, not to this "
                                 "rank's uid %lu: refusing to map memory another user controls", name,
                                 (unsigned long) owner, (unsigned long) euid);
  if (mode & (S_IRWXG | S_IRWXO))
    return _mixprec_plugin_fail (err, err_len, -1, "shared-memory segment %s has mode %04o: refusing a segment "
                                 "that group or others may open (comm-ucx makes it 0600)", name,
                                 (unsigned) (mode & 07777));
  if (size != expected)
    return _mixprec_plugin_fail (err, err_len, -1, "shared-memory segment %s has %llu bytes where this rank's "
                                 "settings need %llu", name, (unsigned long long) size,
                                 (unsigned long long) expected);
  return 0;
}

unsigned
ucx_peer_broken_rank (uint32_t broken,
                      unsigned world)
{
  if (broken == 0 || broken - 1 >= world)
    return world;
  return broken - 1;
}
