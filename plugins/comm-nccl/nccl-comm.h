/* nccl-comm.h — the comm-nccl plugin's communicator and requests, shared
 * by its three files: comm-nccl.c (life cycle, vtable and the plugin's
 * entry point), nccl-failures.c (statuses, messages and the breakdown
 * path) and nccl-ops.c (the collectives: queued on the stream, then
 * watched to completion).
 *
 * The module is built with hidden visibility, so the functions below are
 * shared between its files and never exported. */
#pragma once

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mixprec-plugin-abi.h"
#include "mixprec-plugin-fail-private.h"

/* The CUDA and NCCL headers are not written for this project's warnings
 * (they test undefined macros and declare `f()` without a prototype). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#pragma GCC diagnostic pop

#define NCCL_DTYPE_MASK ((1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | \
                         (1u << MIXPREC_PLUGIN_DTYPE_FLOAT16) | \
                         (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16))

typedef enum
{
  OP_ALL_REDUCE,
  OP_REDUCE_SCATTER,
  OP_ALL_GATHER,
  OP_BROADCAST,
  OP_BARRIER,
  OP_ALL_TO_ALL,               /* bytes: count is bytes per rank */
  OP_ALL_TO_ALL_V,             /* bytes: runs of their own size (Call.runs) */
} OpKind;

/* Indexed by OpKind: the names that messages give the collectives. */
extern const char * const op_names[];

typedef struct
{
  /* Guards nccl and broken: abort() may come from another thread, and
   * ncclCommAbort frees the communicator under the feet of any other
   * NCCL call on it. Held only around calls that return at once. */
  pthread_mutex_t lock;
  ncclComm_t nccl;              /* NULL once aborted */
  int broken;                   /* a MixprecPluginStatus once broken, else 0 */
  char broken_message[512];

  int device;
  cudaStream_t stream;
  int own_stream;
  unsigned rank;
  unsigned world_size;
  unsigned timeout_ms;
  uint32_t next_seq;
  float *barrier_buf;           /* one float on the device */
  void *scratch;                /* stream-ordered; reused by every collective */
  size_t scratch_bytes;
  /* MIXPREC_NCCL_FP32_SUM=widen: RECV_FP32 sums of a narrower dtype widen
   * the terms and run NCCL's FP32 ring (FP32 on the wire) instead of the
   * all-to-all in the narrower dtype and a local sum (nccl-ops.c). */
  int fp32_sum_widen;
} NcclComm;

typedef struct
{
  cudaEvent_t event;            /* recorded after the collective's last step */
  OpKind kind;
  uint32_t seq;
  int on_heap;
  int finished;
  int status;
  char message[512];
} NcclRequest;

/* ---- nccl-failures.c */
int          cuda_status  (cudaError_t   err);
int          nccl_status  (ncclResult_t  res);
const char  *nccl_detail  (ncclComm_t    comm);
int64_t      now_ns       (void);
/* Sleeps a little once a waiting rank has polled SPIN_POLLS times. */
void         pause_poll   (unsigned      polls);
cudaError_t  enter_device (const NcclComm *comm,
                           int            *saved);
cudaError_t  leave_device (const NcclComm *comm,
                           int             saved);
/* With comm->lock held: marks the communicator broken and aborts NCCL. */
void         break_locked (NcclComm     *comm,
                           int           status,
                           const char   *format,
                           ...) __attribute__ ((format (printf, 3, 4)));
int          broken_error (const NcclComm *comm,
                           char           *errbuf,
                           size_t          errbuf_len);
/* A CUDA or NCCL call of collective @kind #@seq failed: with comm->lock
 * held, they break the communicator and return its status and sentence. */
int          fail_cuda    (NcclComm *comm, const char *call, cudaError_t err, OpKind kind,
                           uint32_t seq, char *errbuf, size_t errbuf_len);
int          fail_nccl    (NcclComm *comm, const char *call, ncclResult_t res, OpKind kind,
                           uint32_t seq, char *errbuf, size_t errbuf_len);
/* With comm->lock held, right after an NCCL call: waits out ncclInProgress. */
int          settle       (NcclComm *comm, const char *call, ncclResult_t res, OpKind kind,
                           uint32_t seq, char *errbuf, size_t errbuf_len);

/* ---- nccl-ops.c: the vtable's collectives, test, wait and abort, declared
 * with the very types the ABI gives the vtable's members. */
#define NCCL_VTABLE_ENTRY(member) __typeof__ (*((MixprecCommV1 *) NULL)->member)

NCCL_VTABLE_ENTRY (all_reduce)     nccl_all_reduce;
NCCL_VTABLE_ENTRY (reduce_scatter) nccl_reduce_scatter;
NCCL_VTABLE_ENTRY (all_gather)     nccl_all_gather;
NCCL_VTABLE_ENTRY (broadcast)      nccl_broadcast;
NCCL_VTABLE_ENTRY (barrier)        nccl_barrier;
__typeof__ (*((MixprecCommV2 *) NULL)->all_to_all) nccl_all_to_all;
__typeof__ (*((MixprecCommV2 *) NULL)->all_to_all_v) nccl_all_to_all_v;
NCCL_VTABLE_ENTRY (test)           nccl_test;
NCCL_VTABLE_ENTRY (wait)           nccl_wait;
NCCL_VTABLE_ENTRY (abort)          nccl_abort;
