/* ucx-hint.c — which network devices UCX may use on this rank, and why a
 * connection between ranks on different hosts may have failed because of
 * them (see ucx-hint.h).
 *
 * UCX's TCP transport advertises, in the worker address, the IP address
 * of every device UCX_NET_DEVICES admits (every device when it is unset
 * or "all"); a peer connects to those. Two mistakes make that fail or
 * reach the wrong process: a loopback device (UCX_NET_DEVICES=lo, as a
 * one-host test sets it) used across hosts, and an address that every
 * host has (a container bridge such as docker0's 172.17.0.1), which a
 * peer reaches on its own host. */
#include "config.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ucx-hint.h"

/* Whether the comma-separated UCX_NET_DEVICES @list admits @device. An
 * entry may carry a port ("mlx5_0:1"); netdevice names are compared whole. */
static int
list_admits (const char *list,
             const char *device)
{
  size_t n = strlen (device);

  if (list == NULL || list[0] == '\0' || strcmp (list, "all") == 0)
    return 1;
  for (const char *p = list; *p != '\0';)
    {
      size_t len = strcspn (p, ",");

      if (len == n && strncmp (p, device, n) == 0)
        return 1;
      if (len == 3 && strncmp (p, "all", 3) == 0)
        return 1;
      p += len;
      if (*p == ',')
        p++;
    }
  return 0;
}

void
ucx_hint_scan_devices (UcxPeerInfo *info)
{
  const char *list = getenv ("UCX_NET_DEVICES");
  struct ifaddrs *ifs = NULL;
  int any = 0, all_loopback = 1;

  snprintf (info->net_devices, sizeof info->net_devices, "%s", list != NULL ? list : "");
  info->n_addrs = 0;
  info->loopback_only = 0;
  if (getifaddrs (&ifs) != 0)
    return;
  for (struct ifaddrs *i = ifs; i != NULL; i = i->ifa_next)
    {
      uint32_t n = info->n_addrs;

      if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
          !(i->ifa_flags & IFF_UP) || !list_admits (list, i->ifa_name))
        continue;
      any = 1;
      all_loopback &= (i->ifa_flags & IFF_LOOPBACK) != 0;
      if (n == UCX_HINT_MAX_ADDRS)
        continue;
      info->addrs[n] = ((const struct sockaddr_in *) i->ifa_addr)->sin_addr.s_addr;
      snprintf (info->addr_devices[n], sizeof info->addr_devices[n], "%s", i->ifa_name);
      info->n_addrs = n + 1;
    }
  freeifaddrs (ifs);
  info->loopback_only = any && all_loopback;
}

int
ucx_hint_loopback_device (char   *out,
                          size_t  len)
{
  struct ifaddrs *ifs = NULL;
  int found = 0;

  if (getifaddrs (&ifs) != 0)
    return 0;
  for (struct ifaddrs *i = ifs; i != NULL && !found; i = i->ifa_next)
    if ((i->ifa_flags & IFF_LOOPBACK) && (i->ifa_flags & IFF_UP) &&
        strlen (i->ifa_name) < len)
      {
        snprintf (out, len, "%s", i->ifa_name);
        found = 1;
      }
  freeifaddrs (ifs);
  return found;
}

static void
format_address (uint32_t  addr,
                char     *out,
                size_t    len)
{
  struct in_addr in = { .s_addr = addr };

  if (inet_ntop (AF_INET, &in, out, (socklen_t) len) == NULL)
    snprintf (out, len, "?");
}

/* 127.0.0.0/8: every host has it; the loopback case above covers it. */
static int
is_loopback_address (uint32_t addr)
{
  return (ntohl (addr) >> 24) == 127;
}

static const char *
devices_value (const UcxPeerInfo *info)
{
  return info->net_devices[0] != '\0' ? info->net_devices : "(unset: every device)";
}

int
ucx_hint_for_peer (const UcxPeerInfo *peers,
                   unsigned           me,
                   unsigned           peer,
                   char              *out,
                   size_t             len)
{
  const UcxPeerInfo *a = &peers[me], *b = &peers[peer];

  if (len > 0)
    out[0] = '\0';
  if (me == peer || strncmp (a->host, b->host, sizeof a->host) == 0)
    return 0;

  for (int side = 0; side < 2; side++)
    {
      const UcxPeerInfo *lo = side == 0 ? a : b;
      unsigned rank = side == 0 ? me : peer, other = side == 0 ? peer : me;
      char address[INET_ADDRSTRLEN] = "none";

      if (!lo->loopback_only)
        continue;
      if (lo->n_addrs > 0)
        format_address (lo->addrs[0], address, sizeof address);
      snprintf (out, len, "UCX_NET_DEVICES=%s on rank %u leaves UCX only loopback "
                "(%s, address %s), which cannot reach rank %u on another host: set "
                "UCX_NET_DEVICES to the device that links the hosts",
                devices_value (lo), rank, lo->n_addrs > 0 ? lo->addr_devices[0] : "lo",
                address, other);
      return 1;
    }

  for (uint32_t i = 0; i < a->n_addrs && i < UCX_HINT_MAX_ADDRS; i++)
    for (uint32_t j = 0; j < b->n_addrs && j < UCX_HINT_MAX_ADDRS; j++)
      if (a->addrs[i] == b->addrs[j] && !is_loopback_address (a->addrs[i]))
        {
          char address[INET_ADDRSTRLEN];

          format_address (a->addrs[i], address, sizeof address);
          snprintf (out, len, "ranks %u and %u, on different hosts, both have the "
                    "address %s (%s on rank %u, %s on rank %u) among the devices that "
                    "UCX_NET_DEVICES=%s admits, so a connection to it may stay on its own "
                    "host: set UCX_NET_DEVICES to the device that links the hosts",
                    me, peer, address, a->addr_devices[i], me, b->addr_devices[j], peer,
                    devices_value (a));
          return 1;
        }
  return 0;
}

int
ucx_hint_for_world (const UcxPeerInfo *peers,
                    unsigned           world,
                    unsigned           me,
                    char              *out,
                    size_t             len)
{
  for (unsigned p = 0; p < world; p++)
    if (ucx_hint_for_peer (peers, me, p, out, len))
      return 1;
  return 0;
}
