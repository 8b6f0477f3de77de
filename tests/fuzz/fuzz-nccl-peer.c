/* fuzz-nccl-peer.c — what comm-nccl receives from other ranks at init
 * (plugins/comm-nccl/nccl-peer.c): the records of the unique-id exchange.
 * The first input byte is the world size (1 to 8), the second this rank,
 * the rest the gathered records. */
#include "config.h"

#include <string.h>

#include "mixprec-plugin.h"
#include "comm-nccl/nccl-peer.h"
#include "fuzz-common.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  fuzz_init ();
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  uint8_t id[NCCL_PEER_ID_BYTES];
  char err[512];
  size_t rec = sizeof (NcclPeerRecord), n;
  unsigned world, me;
  int status;

  if (size < 2)
    return 0;
  world = 1 + data[0] % 8;
  me = data[1] % world;
  n = size - 2;
  err[0] = '\0';
  if (n < (size_t) world * rec)
    {
      /* Short: records of another size, as a build that differs sends. */
      if (n == 0)
        return 0;
      status = nccl_peer_check_records (data + 2, n, 1, 0, id, err, sizeof err);
      g_assert (n == rec || status != MIXPREC_PLUGIN_OK);
    }
  else
    {
      status = nccl_peer_check_records (data + 2, rec, world, me, id, err, sizeof err);
      if (status == MIXPREC_PLUGIN_OK)
        {
          NcclPeerRecord first;
          int nonzero = 0;

          memcpy (&first, data + 2, sizeof first);
          g_assert (memcmp (id, first.id, sizeof id) == 0);
          for (size_t i = 0; i < sizeof id; i++)
            nonzero |= id[i] != 0;
          g_assert (nonzero || first.status != MIXPREC_PLUGIN_OK);
        }
    }
  g_assert (status >= MIXPREC_PLUGIN_OK && status <= MIXPREC_PLUGIN_ERR_PEER_FAILED);
  g_assert (memchr (err, '\0', sizeof err) != NULL);
  g_assert (status == MIXPREC_PLUGIN_OK || err[0] != '\0');
  return 0;
}
