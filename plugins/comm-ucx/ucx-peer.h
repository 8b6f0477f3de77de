/* ucx-peer.h — the checks that every byte comm-ucx receives from another
 * rank passes before the plugin uses or prints it: the identity record of
 * the first exchange, the UCX worker addresses and their lengths, the
 * shared-memory offer and invite, and the segment's header and owner.
 *
 * Pure functions of bytes in, a verdict and a sentence out: no UCX and no
 * system calls, so that the fuzzers (tests/fuzz/fuzz-ucx-peer.c) and the
 * tests build ucx-peer.c on its own. Each returns 0 when the input is
 * acceptable, or -1 with a sentence naming the rank, the field, the value
 * and the rule in @err. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ucx-hint.h"

/* A UCX worker address is a few hundred bytes (a header and one entry per
 * transport and device); 64 KiB leaves room for hosts with many devices
 * and keeps a peer from making every rank allocate world × anything. */
#define UCX_PEER_ADDRESS_MAX ((size_t) 64 << 10)

/* The version nibble of a packed UCX worker address (the low four bits of
 * its first byte; ucp_address_pack in UCX's src/ucp/wireup/address.c):
 * UCP_OBJECT_VERSION_V1 and V2, the only two UCX 1.13 to 1.18 know. UCX
 * asserts on any other value, aborting the process. */
#define UCX_PEER_ADDRESS_V1 0u
#define UCX_PEER_ADDRESS_V2 1u

/* Bounds of a shared-memory chunk: MIXPREC_UCX_SHM_CHUNK_BYTES's range. */
#define UCX_PEER_SHM_CHUNK_MIN ((size_t) 4096)
#define UCX_PEER_SHM_CHUNK_MAX ((size_t) 64 << 20)
/* The buffers of a segment share at most this much; chunks shrink to fit. */
#define UCX_PEER_SHM_BUFFER_MAX ((size_t) 256 << 20)
/* Every segment's name starts so (and rank 0 makes it). */
#define UCX_PEER_SHM_PREFIX "/mixprec-ucx-"

#define UCX_SHM_MAGIC   0x6d787368u    /* "mxsh" */
#define UCX_SHM_VERSION 1u

/* What each rank says at the shared-memory agreement. */
typedef struct
{
  char domain[160];             /* boot and IPC, mount, network namespaces */
  int32_t mode;                 /* ShmMode: 0 off, 1 auto, 2 required */
  int32_t pad;
} UcxShmOffer;

/* Rank 0's answer: the segment to map. */
typedef struct
{
  char name[64];
  uint64_t chunk_bytes;
  int32_t ok;
  int32_t pad;
} UcxShmInvite;

/* The start of the segment, as rank 0 writes it. */
typedef struct
{
  uint32_t magic;
  uint32_t version;
  uint32_t world;
  uint32_t pad;
  uint64_t chunk_bytes;
  /* The futex word: bumped by every arrival (and by abort), so that a
   * sleeping rank wakes to look at the barrier again. */
  uint32_t arrivals;
  uint32_t sleepers;
  /* 0, or 1 + the rank that gave up; then status and message say why. */
  uint32_t broken;
  int32_t status;
  char message[960];
} UcxShmHeader;

/* Whether @field (@size bytes) holds a NUL-terminated string of printable
 * ASCII. */
int    ucx_peer_string_ok          (const char          *field,
                                    size_t               size);

/* Copies the text of @field (@size bytes, up to its first NUL) into @out
 * for a message: printable ASCII as is, any other byte as \xNN; always
 * NUL-terminated. */
void   ucx_peer_printable          (const char          *field,
                                    size_t               size,
                                    char                *out,
                                    size_t               len);

/* Rank @rank's identity record (@len bytes) into @out. */
int    ucx_peer_parse_info         (const void          *bytes,
                                    size_t               len,
                                    unsigned             rank,
                                    UcxPeerInfo         *out,
                                    char                *err,
                                    size_t               err_len);

/* The length rank @rank announced for its worker address. */
int    ucx_peer_check_address_length (uint64_t           length,
                                      unsigned           rank,
                                      char              *err,
                                      size_t             err_len);

/* Rank @rank's worker address, @len bytes (its announced length): the
 * header that UCX reads before anything else. What follows the header is
 * UCX's to parse. */
int    ucx_peer_check_address      (const uint8_t       *address,
                                    size_t               len,
                                    unsigned             rank,
                                    char                *err,
                                    size_t               err_len);

/* Rank @rank's shared-memory offer (@len bytes) into @out. */
int    ucx_peer_parse_offer        (const void          *bytes,
                                    size_t               len,
                                    unsigned             rank,
                                    UcxShmOffer         *out,
                                    char                *err,
                                    size_t               err_len);

/* The largest chunk of a segment for @world ranks (a multiple of 4096 when
 * the buffer cap shrinks it), given the chunk @wanted by the settings. */
size_t ucx_peer_shm_chunk_for_world (size_t             wanted,
                                     unsigned           world);

/* The segment's size for @world ranks and @chunk_bytes. */
size_t ucx_peer_shm_segment_bytes  (unsigned             world,
                                    size_t               chunk_bytes);

/* Rank 0's invite (@len bytes) into @out, as rank @me of @world reads it;
 * @local_chunk_bytes is the chunk this rank's own settings give for the
 * world (ucx_peer_shm_chunk_for_world): a segment of another size would
 * be mapped with other offsets than rank 0 writes. */
int    ucx_peer_parse_invite       (const void          *bytes,
                                    size_t               len,
                                    unsigned             me,
                                    unsigned             world,
                                    size_t               local_chunk_bytes,
                                    UcxShmInvite        *out,
                                    char                *err,
                                    size_t               err_len);

/* The header of segment @name (@len bytes of it mapped). */
int    ucx_peer_check_shm_header   (const void          *bytes,
                                    size_t               len,
                                    const char          *name,
                                    unsigned             world,
                                    uint64_t             chunk_bytes,
                                    char                *err,
                                    size_t               err_len);

/* What fstat said of segment @name before this rank maps it: owned by
 * @euid, no access for group or others, @expected bytes. */
int    ucx_peer_check_segment_stat (const char          *name,
                                    uid_t                owner,
                                    mode_t               mode,
                                    uint64_t             size,
                                    uid_t                euid,
                                    uint64_t             expected,
                                    char                *err,
                                    size_t               err_len);

/* The rank that the segment's broken word names (1 + rank), as a rank
 * number; @world when the word names none of the world's ranks. */
unsigned ucx_peer_broken_rank      (uint32_t             broken,
                                    unsigned             world);
