/* test-ucx-hint.c — comm-ucx's diagnosis of a failed connection
 * (plugins/comm-ucx/ucx-hint.c): ranks on different hosts whose
 * UCX_NET_DEVICES leaves only loopback, or that share an address, get a
 * sentence naming UCX_NET_DEVICES and the address; ranks on one host, or
 * with distinct addresses, get none. The expected sentences' facts are
 * built here from the peers the test makes up. */
#include "config.h"

#include <arpa/inet.h>
#include <glib.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ucx-hint.h"

static void
make_peer (UcxPeerInfo *info,
           const char  *host,
           const char  *net_devices,
           gboolean     loopback_only,
           ...)
{
  va_list args;
  const char *device;

  memset (info, 0, sizeof *info);
  g_strlcpy (info->host, host, sizeof info->host);
  g_strlcpy (info->net_devices, net_devices, sizeof info->net_devices);
  info->loopback_only = loopback_only;
  va_start (args, loopback_only);
  while ((device = va_arg (args, const char *)) != NULL)
    {
      const char *address = va_arg (args, const char *);
      struct in_addr in;

      g_assert_cmpint (inet_pton (AF_INET, address, &in), ==, 1);
      g_strlcpy (info->addr_devices[info->n_addrs], device, sizeof info->addr_devices[0]);
      info->addrs[info->n_addrs++] = in.s_addr;
    }
  va_end (args);
}

static void
assert_contains (const char *text,
                 const char *part)
{
  if (strstr (text, part) == NULL)
    g_error ("expected \"%s\" in \"%s\"", part, text);
}

static void
test_same_host (void)
{
  UcxPeerInfo peers[2];
  char hint[512] = "x";

  /* Loopback is right when both ranks share the host. */
  make_peer (&peers[0], "boot-a:1", "lo", TRUE, "lo", "127.0.0.1", NULL);
  make_peer (&peers[1], "boot-a:1", "lo", TRUE, "lo", "127.0.0.1", NULL);
  g_assert_false (ucx_hint_for_peer (peers, 0, 1, hint, sizeof hint));
  g_assert_cmpstr (hint, ==, "");
  g_assert_false (ucx_hint_for_world (peers, 2, 1, hint, sizeof hint));
}

static void
test_loopback_across_hosts (void)
{
  UcxPeerInfo peers[3];
  char hint[512];

  make_peer (&peers[0], "boot-a:1", "eth0", FALSE, "eth0", "10.0.0.1", NULL);
  make_peer (&peers[1], "boot-b:1", "eth0", FALSE, "eth0", "10.0.0.2", NULL);
  make_peer (&peers[2], "boot-c:1", "lo", TRUE, "lo", "127.0.0.1", NULL);
  /* Healthy pair: no hint. */
  g_assert_false (ucx_hint_for_peer (peers, 0, 1, hint, sizeof hint));
  /* The loopback rank is the peer... */
  g_assert_true (ucx_hint_for_peer (peers, 0, 2, hint, sizeof hint));
  assert_contains (hint, "UCX_NET_DEVICES=lo on rank 2");
  assert_contains (hint, "127.0.0.1");
  assert_contains (hint, "rank 0 on another host");
  /* ... or this rank. */
  g_assert_true (ucx_hint_for_world (peers, 3, 2, hint, sizeof hint));
  assert_contains (hint, "UCX_NET_DEVICES=lo on rank 2");
  assert_contains (hint, "rank 0 on another host");
}

static void
test_shared_address (void)
{
  UcxPeerInfo peers[2];
  char hint[512];

  /* Every host has docker0's address; UCX_NET_DEVICES unset admits it. */
  make_peer (&peers[0], "boot-a:1", "", FALSE, "lo", "127.0.0.1", "eth0", "192.168.1.5",
             "docker0", "172.17.0.1", NULL);
  make_peer (&peers[1], "boot-b:1", "", FALSE, "lo", "127.0.0.1", "docker0", "172.17.0.1",
             "eth0", "192.168.1.6", NULL);
  g_assert_true (ucx_hint_for_peer (peers, 1, 0, hint, sizeof hint));
  assert_contains (hint, "172.17.0.1");
  assert_contains (hint, "docker0 on rank 1");
  assert_contains (hint, "docker0 on rank 0");
  assert_contains (hint, "UCX_NET_DEVICES=(unset");
  /* 127.0.0.1 is on both too, but is no sign of a wrong choice. */
  g_assert_null (strstr (hint, "127.0.0.1"));

  /* Told to use eth0 only, the hosts differ: nothing to say. */
  make_peer (&peers[0], "boot-a:1", "eth0", FALSE, "eth0", "192.168.1.5", NULL);
  make_peer (&peers[1], "boot-b:1", "eth0", FALSE, "eth0", "192.168.1.6", NULL);
  g_assert_false (ucx_hint_for_peer (peers, 1, 0, hint, sizeof hint));
  g_assert_false (ucx_hint_for_world (peers, 2, 0, hint, sizeof hint));
}

/* The scan of this host: UCX_NET_DEVICES=lo admits only the loopback
 * device, whose address is in 127.0.0.0/8. */
static void
test_scan_loopback (void)
{
  UcxPeerInfo info;

  g_setenv ("UCX_NET_DEVICES", "lo", TRUE);
  ucx_hint_scan_devices (&info);
  g_assert_cmpstr (info.net_devices, ==, "lo");
  if (info.n_addrs == 0)
    {
      g_test_skip ("this host's lo has no IPv4 address");
      return;
    }
  g_assert_true (info.loopback_only);
  for (guint i = 0; i < info.n_addrs; i++)
    {
      g_assert_cmpstr (info.addr_devices[i], ==, "lo");
      g_assert_cmpuint (ntohl (info.addrs[i]) >> 24, ==, 127);
    }

  /* A device that does not exist admits nothing. */
  g_setenv ("UCX_NET_DEVICES", "no-such-device0", TRUE);
  ucx_hint_scan_devices (&info);
  g_assert_cmpuint (info.n_addrs, ==, 0);
  g_assert_false (info.loopback_only);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/ucx-hint/same-host", test_same_host);
  g_test_add_func ("/ucx-hint/loopback-across-hosts", test_loopback_across_hosts);
  g_test_add_func ("/ucx-hint/shared-address", test_shared_address);
  g_test_add_func ("/ucx-hint/scan-loopback", test_scan_loopback);
  return g_test_run ();
}
