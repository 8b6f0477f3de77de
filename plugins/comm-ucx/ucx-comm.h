/* ucx-comm.h — the comm-ucx plugin's communicator, operations and
 * transfers, shared by its files: comm-ucx.c (the ABI entry points),
 * ucx-transport.c (UCX context, endpoints, transfers, failures),
 * ucx-ops.c (the collectives as state machines) and ucx-shm.c (the same
 * collectives through shared memory, when every rank is on this host).
 *
 * Everything runs on the caller's thread: UCX progresses only inside the
 * plugin's calls (a collective, test() or wait()), which also perform the
 * reductions. abort() only sets a flag that the next progress loop acts on. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include "mixprec-plugin-abi.h"
#include "ucx-hint.h"           /* UcxPeerInfo: what each rank tells the others at init */
#include "ucx-shm.h"            /* the same-host path */

/* The 64-bit tag of every message: which operation (sequence number), which
 * phase of it, which sender and which chunk. Collectives that are
 * outstanding at the same time never match each other's messages. */
#define UCX_TAG_SEQ_BITS   24
#define UCX_TAG_PHASE_BITS 2
#define UCX_TAG_RANK_BITS  14
#define UCX_TAG_CHUNK_BITS 24
#define UCX_MAX_WORLD      (1u << UCX_TAG_RANK_BITS)
#define UCX_MAX_CHUNKS     ((size_t) 1 << UCX_TAG_CHUNK_BITS)

typedef enum
{
  UCX_PHASE_SCATTER = 0,        /* reduce-scatter contributions */
  UCX_PHASE_GATHER = 1,         /* all-gather parts (and all-reduce results,
                                   all-to-all runs) */
  UCX_PHASE_BROADCAST = 2,
  UCX_PHASE_BARRIER = 3,
} UcxPhase;

typedef enum
{
  UCX_OP_ALL_REDUCE,
  UCX_OP_REDUCE_SCATTER,
  UCX_OP_ALL_GATHER,
  UCX_OP_BROADCAST,
  UCX_OP_BARRIER,
  UCX_OP_ALL_TO_ALL,            /* bytes: esize 1, count bytes per rank */
  UCX_OP_ALL_TO_ALL_V,          /* bytes: esize 1, a size per rank (runs) */
} UcxOpKind;

/* all_to_all_v's runs, in bytes: to and from each rank, and where. */
typedef struct
{
  const size_t *send_len;
  const size_t *send_off;
  const size_t *recv_len;
  const size_t *recv_off;
} UcxRuns;


typedef enum
{
  UCX_XFER_IDLE,
  UCX_XFER_PENDING,
  UCX_XFER_DONE,
} UcxXferState;

/* One UCX send or receive of an operation. */
typedef struct
{
  UcxOp *op;
  void *req;                    /* UCX request until the progress loop frees it */
  unsigned peer;
  unsigned is_recv : 1;
  unsigned paced : 1;           /* a reduce-scatter send, posted within the window */
  UcxXferState state;
  ucs_status_t status;
  uint32_t chunk;
  int slot;                     /* reduce-scatter receive slot, or -1 */
  size_t expected;              /* receives: bytes the peer must send */
  size_t received;
  void *next_done;              /* UcxXfer: the op's list of fresh completions */
} UcxXfer;

/* A reduce-scatter receive slot: one chunk's contributions from every peer. */
typedef struct
{
  size_t chunk;                 /* (size_t) -1 when idle */
  unsigned arrived;
  UcxXfer *xfers;               /* world_size - 1, peers in rank order without self */
  char *scratch;                /* world_size - 1 chunk buffers */
} UcxSlot;

struct UcxOp
{
  UcxComm *comm;
  UcxOp *prev, *next;           /* the communicator's active operations */
  UcxOpKind kind;
  uint32_t seq;
  MixprecPluginDType dtype;     /* of send and of the messages of the scatter phase */
  MixprecPluginDType out_dtype; /* of recv (float32 with RECV_FP32) */
  MixprecPluginReduceOp reduce;
  unsigned flags;
  size_t esize, out_esize;
  const char *send;
  char *recv;
  size_t count;
  unsigned root;
  /* all_to_all_v: this op's copy of the runs (4 x world_size: send
   * lengths, send offsets, recv lengths, recv offsets); NULL otherwise. */
  size_t *runs;

  /* Layout in elements: part p starts at part_off[p] (of send for the
   * scatter phase, of recv for the gather phase) and is chunked in
   * chunk_elems pieces. */
  size_t *part_off;
  size_t *part_len;
  size_t chunk_elems;
  char *result;                 /* where this rank's reduced part goes */

  /* Every transfer of the operation. */
  UcxXfer *xfers;
  size_t n_xfers;
  size_t n_unfinished;          /* transfers posted and not yet complete */
  UcxXfer *done_head;           /* completed since the op last advanced */
  UcxXfer *gather_sends;        /* n_chunks(me) * (world - 1), posted per reduced chunk */

  /* Reduce-scatter sends, per other rank (index in rank order without
   * self): their transfers, how many are posted, how many are in flight.
   * Each is a synchronous send, complete once the receiver matched it, so
   * at most a window of them waits unmatched at any receiver. */
  UcxXfer **paced;
  size_t *paced_posted;
  size_t *paced_total;
  unsigned *paced_in_flight;
  size_t paced_left;            /* not posted yet, all peers */

  /* Reduce-scatter receive window. */
  UcxSlot *slots;
  unsigned n_slots;
  size_t next_chunk;            /* next chunk of my part to assign to a slot */
  size_t chunks_reduced;
  char *scratch;                /* from the communicator's pool, while receiving */

  /* Waits for another operation's receive window: started in order once
   * fewer than max_reducing operations hold one. */
  int queued;
  int finished;
  int status;
  char message[1024];
  int64_t stall_ns;             /* time polled without progress */
  int progressed;

  /* The same-host path (ucx-shm.c): no transfers, steps instead. */
  int shm;
  uint64_t shm_ticket;          /* its turn among the shared-memory operations */
  size_t shm_chunk_elems;
  size_t shm_chunks;
  size_t shm_steps;             /* chunks, plus all_reduce's last barrier */
  size_t shm_step;              /* the next one */
  int shm_arrived;              /* at that step's barrier */
  uint64_t shm_first_step;      /* the segment's step count at its start */
  const void **shm_terms;       /* world, for the folds */
};

struct UcxComm
{
  ucp_context_h context;
  ucp_worker_h worker;
  ucp_ep_h *eps;                /* world_size; NULL for self and after a forced close */
  UcxPeerInfo *peers;
  unsigned rank;
  unsigned world_size;
  int64_t timeout_ns;
  int error_mode_peer;          /* endpoints created with UCP_ERR_HANDLING_MODE_PEER */
  size_t chunk_bytes;
  unsigned window;
  int64_t spin_ns;              /* polling before yielding, when idle */
  int64_t yield_ns;             /* polling and yielding before blocking */
  int efd;                      /* the worker's event fd (UCP_FEATURE_WAKEUP), or -1 */
  int64_t busy_since_ns;        /* since when arms say busy, progress finding nothing; or 0 */

  uint32_t next_seq;
  UcxOp *active;                /* started, not yet waited for */

  /* Peers whose endpoint reported an error (status per rank, UCS_OK if fine). */
  ucs_status_t *peer_status;
  /* Once set, every operation fails with this status and sentence. */
  int broken;
  char broken_message[1024];
  int aborted;                  /* atomic */

  /* Reusable reduce-scatter scratch buffers: at most max_reducing
   * operations receive contributions at once (reducing), so that a
   * trainer that starts a reduction per layer does not hold a window of
   * scratch per layer. */
  unsigned reducing;
  unsigned max_reducing;
  unsigned n_queued;            /* operations waiting for a receive window */
  char **scratch_pool;
  unsigned n_scratch_pool;
  unsigned scratch_pool_size;
  size_t scratch_bytes;

  int64_t liveness_checked_ns;
  int64_t last_poll_ns;         /* end of the last progress loop */

  UcxShm *shm;                  /* the same-host segment, or NULL */
};

/* ---- comm-ucx.c */
/* Reads the integer setting @name (default @fallback, from @min to @max). */
int      ucx_env_size          (const char                 *name,
                                size_t                      fallback,
                                size_t                      min,
                                size_t                      max,
                                size_t                     *out,
                                char                       *errbuf,
                                size_t                      errbuf_len);
/* CPUs this process may run on. */
unsigned ucx_cpus_available    (void);

/* ---- ucx-transport.c */
int64_t  ucx_now_ns            (void);
/* "boot id:inode:inode...", the inodes of /proc/self/ns/@spaces: equal in
 * two processes that share the boot and those namespaces; unique to this
 * process ("unknown:pid") when any of it cannot be read. */
void     ucx_namespace_identity (const char * const        *spaces,
                                 size_t                      n_spaces,
                                 char                       *out,
                                 size_t                      len);
int      ucx_comm_open         (UcxComm                    *comm,
                                const MixprecBootstrapV1   *bootstrap,
                                char                       *errbuf,
                                size_t                      errbuf_len);
void     ucx_comm_close        (UcxComm                    *comm);
uint64_t ucx_tag               (uint32_t                    seq,
                                UcxPhase                    phase,
                                unsigned                    sender,
                                size_t                      chunk);
/* The bootstrap's all_gather, with its sentence prefixed on failure. */
int      ucx_exchange          (const MixprecBootstrapV1   *bootstrap,
                                const void                 *in,
                                size_t                      len,
                                void                       *out,
                                const char                 *what,
                                char                       *errbuf,
                                size_t                      errbuf_len);
/* Posts a transfer; a failure to post completes it with an error status. */
void     ucx_xfer_send         (UcxXfer                    *xfer,
                                const void                 *buffer,
                                size_t                      length,
                                uint64_t                    tag,
                                int                         sync);
void     ucx_xfer_recv         (UcxXfer                    *xfer,
                                void                       *buffer,
                                size_t                      length,
                                uint64_t                    tag);
/* Frees the UCX request of a completed transfer. */
void     ucx_xfer_release      (UcxXfer                    *xfer);
/* Marks the communicator broken and brings every transfer of every active
 * operation to completion (cancelled receives, force-closed endpoints), so
 * that no buffer stays in UCX's hands. */
void     ucx_comm_break        (UcxComm                    *comm,
                                int                         status,
                                const char                 *format,
                                ...) __attribute__ ((format (printf, 3, 4)));
/* Whether rank @peer, running on this host, has exited. */
int      ucx_peer_has_exited   (UcxComm                    *comm,
                                unsigned                    peer);
/* Arms the worker and blocks on its event file descriptor until UCX has
 * an event or @timeout_ns pass; returns at once when events are pending.
 * Call it only after ucp_worker_progress() returned 0. */
void     ucx_worker_wait       (UcxComm                    *comm,
                                int64_t                     timeout_ns);
char    *ucx_scratch_take      (UcxComm                    *comm);
void     ucx_scratch_give      (UcxComm                    *comm,
                                char                       *scratch);

/* ---- ucx-ops.c */
UcxOp   *ucx_op_new            (UcxComm                    *comm,
                                UcxOpKind                   kind,
                                const void                 *send,
                                void                       *recv,
                                size_t                      count,
                                MixprecPluginDType          dtype,
                                MixprecPluginReduceOp       reduce,
                                unsigned                    flags,
                                unsigned                    root,
                                const UcxRuns              *runs);
/* Makes @op active: starts it, or queues it behind the operations that
 * hold the receive windows; fails (NO_MEMORY) only when it needed scratch
 * it could not get, and then leaves @op unlinked. */
int      ucx_op_start          (UcxOp                      *op);
/* Advances every active operation once; returns non-zero when anything
 * happened. */
int      ucx_comm_progress     (UcxComm                    *comm);
/* Fails operations silent for longer than the timeout; @elapsed_ns is
 * the polling time since the previous call. */
void     ucx_comm_check_stalls (UcxComm                    *comm,
                                int64_t                     elapsed_ns);
void     ucx_op_fail           (UcxOp                      *op,
                                int                         status,
                                const char                 *message);
void     ucx_op_free           (UcxOp                      *op);
const char *ucx_op_name        (const UcxOp                *op);
/* The name of a UcxOpKind, as a number read from a peer. */
const char *ucx_op_kind_name   (uint64_t                    kind);
