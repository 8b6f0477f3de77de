/* ucx-hint.h — what each rank of comm-ucx tells the others before UCX
 * starts, and the diagnosis of a failed connection that it allows: which
 * network devices UCX may use (UCX_NET_DEVICES) and their addresses, so
 * that a failure caused by the device choice says so. No UCX here: the
 * tests build ucx-hint.c on its own. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define UCX_HINT_MAX_ADDRS 8

typedef struct
{
  int64_t pid;
  char host[96];                /* boot id and pid namespace: same value = same host */
  /* Boot id and network namespace: same value = loopback reaches the rank. */
  char netns[96];
  /* UCX_NET_DEVICES as this rank read it, "" when unset. */
  char net_devices[64];
  /* IPv4 addresses (network byte order) of the up network devices that
   * UCX_NET_DEVICES admits, and their device names. */
  uint32_t n_addrs;
  uint32_t loopback_only;       /* every one of them is a loopback device */
  uint32_t addrs[UCX_HINT_MAX_ADDRS];
  char addr_devices[UCX_HINT_MAX_ADDRS][16];
} UcxPeerInfo;

/* Fills @info's device fields from UCX_NET_DEVICES and the host's
 * interfaces (getifaddrs). */
void ucx_hint_scan_devices (UcxPeerInfo *info);

/* Writes the name of an up loopback device ("lo") into @out; returns 0
 * when there is none. */
int  ucx_hint_loopback_device (char   *out,
                               size_t  len);

/* When the device choice likely explains why rank @me cannot talk to rank
 * @peer (on another host: @me or @peer has only loopback devices, or both
 * have the same address), writes a sentence naming UCX_NET_DEVICES and the
 * address into @out and returns non-zero; otherwise returns 0 and leaves
 * @out empty. */
int  ucx_hint_for_peer     (const UcxPeerInfo *peers,
                            unsigned           me,
                            unsigned           peer,
                            char              *out,
                            size_t             len);

/* The first hint for any peer of rank @me among @world ranks. */
int  ucx_hint_for_world    (const UcxPeerInfo *peers,
                            unsigned           world,
                            unsigned           me,
                            char              *out,
                            size_t             len);
