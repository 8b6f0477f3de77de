/* nccl-peer.h — the record every rank of comm-nccl contributes to the
 * exchange at init, and the checks the records of other ranks pass before
 * the unique id reaches NCCL (see nccl-peer.c). No CUDA or NCCL here: the
 * tests and the fuzzers build nccl-peer.c without them. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* NCCL_UNIQUE_ID_BYTES: comm-nccl.c asserts that ncclUniqueId has it. */
#define NCCL_PEER_ID_BYTES 128
#define NCCL_PEER_MAGIC    0x6d786e63u  /* "mxnc" */

typedef struct
{
  /* First, where a record of a rank whose device failed has it: this
   * rank's device check, and for rank 0 the creation of the id. */
  int32_t status;
  /* ncclUniqueId: rank 0's; all zero from every other rank. */
  uint8_t id[NCCL_PEER_ID_BYTES];
  uint32_t magic;
  uint32_t rank;                /* the sender's rank and world, as it sees them */
  uint32_t world_size;
} NcclPeerRecord;

/* Fills @record for rank @rank of @world_size (@id: rank 0's unique id,
 * NULL for the others). */
void nccl_peer_record_init    (NcclPeerRecord *record,
                               int             status,
                               unsigned        rank,
                               unsigned        world_size,
                               const void     *id);

/* Checks the @world records of the exchange (@record_len bytes each,
 * rank r's at r * record_len) as rank @me reads them, and copies rank
 * 0's id into @id. Returns MIXPREC_PLUGIN_OK, or a status with a
 * sentence naming the rank, the field, the value and the rule in @err:
 * MIXPREC_PLUGIN_ERR_PEER_FAILED for a rank that reported a failure or
 * sent a record that breaks the rules. */
int  nccl_peer_check_records  (const void     *records,
                               size_t          record_len,
                               unsigned        world,
                               unsigned        me,
                               uint8_t         id[NCCL_PEER_ID_BYTES],
                               char           *err,
                               size_t          err_len);
