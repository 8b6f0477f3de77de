/* nccl-peer.c — comm-nccl's checks of the records other ranks send at
 * init (see nccl-peer.h). The unique id is opaque to everyone but NCCL,
 * so what can be checked is around it: the record's size and form, who
 * sent it (rank 0 alone makes the id; any other rank sending one is not
 * a rank of this job), the world it was made for, and that it is not
 * empty. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "mixprec-plugin-abi.h"
#include "mixprec-plugin-fail-private.h"
#include "nccl-peer.h"

void
nccl_peer_record_init (NcclPeerRecord *record,
                       int             status,
                       unsigned        rank,
                       unsigned        world_size,
                       const void     *id)
{
  memset (record, 0, sizeof *record);
  record->status = status;
  record->magic = NCCL_PEER_MAGIC;
  record->rank = rank;
  record->world_size = world_size;
  if (id != NULL)
    memcpy (record->id, id, NCCL_PEER_ID_BYTES);
}

static int
all_zero (const uint8_t *bytes,
          size_t         len)
{
  for (size_t i = 0; i < len; i++)
    if (bytes[i] != 0)
      return 0;
  return 1;
}

int
nccl_peer_check_records (const void *records,
                         size_t      record_len,
                         unsigned    world,
                         unsigned    me,
                         uint8_t     id[NCCL_PEER_ID_BYTES],
                         char       *err,
                         size_t      err_len)
{
  const uint8_t *bytes = records;

  if (record_len != sizeof (NcclPeerRecord))
    return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                 "the NCCL id exchange carries records of %zu bytes where this rank "
                                 "expects %zu: every rank must run the same libmixprec build",
                                 record_len, sizeof (NcclPeerRecord));
  /* First the failures that ranks report, in rank order: they explain
   * the job's end better than a malformed record would. */
  for (unsigned r = 0; r < world; r++)
    {
      NcclPeerRecord rec;

      memcpy (&rec, bytes + (size_t) r * record_len, sizeof rec);
      if (rec.status == MIXPREC_PLUGIN_OK)
        continue;
      if (rec.status < MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT ||
          rec.status > MIXPREC_PLUGIN_ERR_PEER_FAILED)
        return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                     "rank %u sent status %d in the NCCL id exchange: must be from %d to %d",
                                     r, (int) rec.status, MIXPREC_PLUGIN_OK, MIXPREC_PLUGIN_ERR_PEER_FAILED);
      if (r == me)
        continue;
      return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                   "rank %u could not %s, so the NCCL communicator was not created", r,
                                   r == 0 ? "open its CUDA device or create the NCCL id"
                                   : "open its CUDA device");
    }
  for (unsigned r = 0; r < world; r++)
    {
      NcclPeerRecord rec;

      memcpy (&rec, bytes + (size_t) r * record_len, sizeof rec);
      if (rec.status != MIXPREC_PLUGIN_OK)
        continue;
      if (rec.magic != NCCL_PEER_MAGIC)
        return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                     "rank %u sent an NCCL id record with magic 0x%08x where comm-nccl "
                                     "writes 0x%08x: the peer is not a comm-nccl rank of this build",
                                     r, rec.magic, NCCL_PEER_MAGIC);
      if (rec.rank != r || rec.world_size != world)
        return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                     "the NCCL id record in rank %u's place says rank %u of a world of %u, "
                                     "where this rank (%u) runs in a world of %u", r, rec.rank,
                                     rec.world_size, me, world);
      if (r == 0 && all_zero (rec.id, sizeof rec.id))
        return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                     "rank 0 sent an NCCL unique id of %d zero bytes: ncclGetUniqueId "
                                     "never makes one", NCCL_PEER_ID_BYTES);
      if (r != 0 && !all_zero (rec.id, sizeof rec.id))
        return _mixprec_plugin_fail (err, err_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                     "rank %u sent an NCCL unique id: only rank 0 makes the job's id, the "
                                     "others send zeros", r);
    }
  if (world > 0 && id != NULL)
    memcpy (id, bytes + offsetof (NcclPeerRecord, id), NCCL_PEER_ID_BYTES);
  return MIXPREC_PLUGIN_OK;
}
