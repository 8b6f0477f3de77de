/* comm-nccl.c — the plugin "comm-nccl": the communicator "nccl" for CUDA
 * device memory, over a non-blocking NCCL communicator.
 *
 * Each rank drives the CUDA device that is current on the thread calling
 * init() (the engine has selected it). Rank 0 creates the NCCL unique id
 * and the library's bootstrap carries it to the others. Every collective is
 * queued on one stream (the engine's, or one of our own) and followed by
 * an event; test() and wait() watch that event and the communicator's
 * asynchronous error, and wait() aborts the communicator once a collective
 * has made no progress for the timeout, so a dead peer never hangs a rank.
 *
 * Determinism. The ABI's contract forms a SUM in rank order; NCCL sums in
 * the order of its ring or tree. At one rank the result is the single term;
 * at two ranks it is one IEEE addition, which commutes, so both give the
 * contract's bits. Beyond two ranks the result is deterministic for a fixed
 * topology, NCCL version and NCCL_ALGO/NCCL_PROTO, but not rank-ordered.
 * float16 and bfloat16 sums without RECV_FP32 add in their dtype inside
 * NCCL (each addition rounds, unlike the contract's single rounding);
 * with RECV_FP32 the terms are widened exactly and NCCL adds in FP32.
 * ACCUMULATE folds recv into one rank's term before NCCL adds: rank 0's for
 * all_reduce (recv is the same everywhere), the receiving rank's for
 * reduce_scatter; at two ranks that is the contract's order for all_reduce
 * and for rank 0's part of a reduce_scatter.
 *
 * MAX runs on int32 keys whose order is the contract's (nccl-kernels.cu):
 * a NaN wins over every number, which NCCL's own floating-point max does
 * not promise. Two departures: among several NaNs the one with the largest
 * payload wins (its sign dropped), not the first in rank order; and +0
 * wins over -0 where the contract keeps the earlier of the two.
 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mixprec-plugin.h"

/* The CUDA and NCCL headers are not written for this project's warnings
 * (they test undefined macros and declare `f()` without a prototype). */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#include <nccl.h>
#include "nccl-kernels.h"
#pragma GCC diagnostic pop

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_comm_nccl_get_desc (void);

#define NCCL_DTYPE_MASK ((1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | \
                         (1u << MIXPREC_PLUGIN_DTYPE_FLOAT16) | \
                         (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16))
#define KNOWN_FLAGS (MIXPREC_PLUGIN_COMM_ACCUMULATE | MIXPREC_PLUGIN_COMM_RECV_FP32)
#define DEFAULT_TIMEOUT_MS 300000u
/* A waiting rank polls this many times before it starts to sleep between
 * polls: most collectives finish within microseconds of the first poll. */
#define SPIN_POLLS 2000
#define POLL_SLEEP_NS 50000
/* The scratch buffer grows to at least this, so that small collectives do
 * not reallocate it one after the other. */
#define MIN_SCRATCH_BYTES ((size_t) 1 << 20)

typedef enum
{
  OP_ALL_REDUCE,
  OP_REDUCE_SCATTER,
  OP_ALL_GATHER,
  OP_BROADCAST,
  OP_BARRIER,
} OpKind;

static const char * const op_names[] = {
  "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier",
};

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

/* What every rank contributes to the exchange at init. */
typedef struct
{
  int32_t status;               /* this rank's device check, and rank 0's id */
  ncclUniqueId id;
} InitRecord;

static int
set_error (char       *errbuf,
           size_t      errbuf_len,
           int         status,
           const char *format,
           ...) __attribute__ ((format (printf, 4, 5)));

static int
set_error (char       *errbuf,
           size_t      errbuf_len,
           int         status,
           const char *format,
           ...)
{
  va_list args;

  if (errbuf != NULL && errbuf_len > 0)
    {
      va_start (args, format);
      vsnprintf (errbuf, errbuf_len, format, args);
      va_end (args);
    }
  return status;
}

static int
cuda_status (cudaError_t err)
{
  return err == cudaErrorMemoryAllocation ? MIXPREC_PLUGIN_ERR_NO_MEMORY
                                          : MIXPREC_PLUGIN_ERR_RUNTIME;
}

static int
nccl_status (ncclResult_t res)
{
  return res == ncclRemoteError ? MIXPREC_PLUGIN_ERR_PEER_FAILED : MIXPREC_PLUGIN_ERR_RUNTIME;
}

/* NCCL's last error text, when it has one. */
static const char *
nccl_detail (ncclComm_t comm)
{
  const char *text = ncclGetLastError (comm);

  return text != NULL && text[0] != '\0' ? text : "no further detail";
}

static int64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
pause_poll (unsigned polls)
{
  if (polls >= SPIN_POLLS)
    nanosleep (&(struct timespec) { 0, POLL_SLEEP_NS }, NULL);
}

static size_t
dtype_size (MixprecPluginDType dtype)
{
  return dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 4 : 2;
}

static ncclDataType_t
nccl_dtype (MixprecPluginDType dtype)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return ncclFloat16;
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return ncclBfloat16;
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3:
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2:
    default:
      return ncclFloat32;
    }
}

/* ------------------------------------------------------------ device */

/* Makes the communicator's device current on this thread (abort(),
 * test() and wait() may come from threads that never selected it);
 * *saved receives the device to go back to. */
static cudaError_t
enter_device (const NcclComm *comm,
              int            *saved)
{
  cudaError_t err = cudaGetDevice (saved);

  if (err != cudaSuccess)
    return err;
  if (*saved != comm->device)
    err = cudaSetDevice (comm->device);
  return err;
}

static cudaError_t
leave_device (const NcclComm *comm,
              int             saved)
{
  return saved != comm->device ? cudaSetDevice (saved) : cudaSuccess;
}

/* ------------------------------------------------------------ failures */

/* With comm->lock held: marks the communicator broken (the first failure
 * wins) and aborts the NCCL communicator, so that the kernels of pending
 * collectives return on this rank and peers see it as failed. */
static void
break_locked (NcclComm   *comm,
              int         status,
              const char *format,
              ...) __attribute__ ((format (printf, 3, 4)));

static void
break_locked (NcclComm   *comm,
              int         status,
              const char *format,
              ...)
{
  va_list args;

  if (!comm->broken)
    {
      comm->broken = status;
      va_start (args, format);
      vsnprintf (comm->broken_message, sizeof comm->broken_message, format, args);
      va_end (args);
    }
  if (comm->nccl != NULL)
    {
      int saved = comm->device;
      cudaError_t err = enter_device (comm, &saved);
      ncclResult_t res = ncclCommAbort (comm->nccl);
      size_t used = strlen (comm->broken_message);

      comm->nccl = NULL;
      /* Neither failure changes what happens next; the message keeps them.
       * ncclInProgress only says a non-blocking communicator finishes
       * freeing itself in the background. */
      if (err == cudaSuccess)
        err = leave_device (comm, saved);
      if (res != ncclSuccess && res != ncclInProgress)
        snprintf (comm->broken_message + used, sizeof comm->broken_message - used,
                  " (ncclCommAbort then failed too: %s)", ncclGetErrorString (res));
      else if (err != cudaSuccess)
        snprintf (comm->broken_message + used, sizeof comm->broken_message - used,
                  " (selecting device %d for ncclCommAbort failed: %s)", comm->device,
                  cudaGetErrorString (err));
    }
}

static int
broken_error (const NcclComm *comm,
              char           *errbuf,
              size_t          errbuf_len)
{
  return set_error (errbuf, errbuf_len, comm->broken,
                    "the communicator is broken by an earlier failure: %s",
                    comm->broken_message);
}

/* With comm->lock held: a CUDA call of an operation failed. Peers have
 * queued (or will queue) their side of it, so the communicator cannot go
 * on: break it. */
static int
fail_cuda (NcclComm    *comm,
           const char  *call,
           cudaError_t  err,
           OpKind       kind,
           uint32_t     seq,
           char        *errbuf,
           size_t       errbuf_len)
{
  break_locked (comm, cuda_status (err), "%s for %s #%u on rank %u failed: %s", call,
                op_names[kind], seq, comm->rank, cudaGetErrorString (err));
  return set_error (errbuf, errbuf_len, comm->broken, "%s", comm->broken_message);
}

static int
fail_nccl (NcclComm     *comm,
           const char   *call,
           ncclResult_t  res,
           OpKind        kind,
           uint32_t      seq,
           char         *errbuf,
           size_t        errbuf_len)
{
  break_locked (comm, nccl_status (res), "%s for %s #%u on rank %u failed: %s (%s)%s", call,
                op_names[kind], seq, comm->rank, ncclGetErrorString (res),
                nccl_detail (comm->nccl),
                res == ncclRemoteError ? "; a peer process failed or exited" : "");
  return set_error (errbuf, errbuf_len, comm->broken, "%s", comm->broken_message);
}

/* With comm->lock held, right after an NCCL call on the communicator:
 * a non-blocking communicator may still be queuing the call's work
 * (ncclInProgress); its state must settle before the stream may be used
 * again. Polls without holding the lock, so abort() can step in. */
static int
settle (NcclComm     *comm,
        const char   *call,
        ncclResult_t  res,
        OpKind        kind,
        uint32_t      seq,
        char         *errbuf,
        size_t        errbuf_len)
{
  int64_t deadline = now_ns () + (int64_t) comm->timeout_ms * 1000000;
  unsigned polls = 0;

  while (res == ncclInProgress)
    {
      ncclResult_t state = ncclSuccess;
      ncclResult_t got = ncclCommGetAsyncError (comm->nccl, &state);

      if (got != ncclSuccess)
        return fail_nccl (comm, "ncclCommGetAsyncError", got, kind, seq, errbuf, errbuf_len);
      res = state;
      if (res != ncclInProgress)
        break;
      if (now_ns () > deadline)
        {
          break_locked (comm, MIXPREC_PLUGIN_ERR_TIMEOUT,
                        "%s for %s #%u on rank %u was still being queued after %u ms; a "
                        "peer may have died or hung", call, op_names[kind], seq, comm->rank,
                        comm->timeout_ms);
          return set_error (errbuf, errbuf_len, comm->broken, "%s", comm->broken_message);
        }
      pthread_mutex_unlock (&comm->lock);
      pause_poll (++polls);
      pthread_mutex_lock (&comm->lock);
      if (comm->broken)
        return broken_error (comm, errbuf, errbuf_len);
    }
  if (res != ncclSuccess)
    return fail_nccl (comm, call, res, kind, seq, errbuf, errbuf_len);
  return MIXPREC_PLUGIN_OK;
}

/* ------------------------------------------------------------ queuing */

/* With comm->lock held and the device current: a scratch buffer of at
 * least @bytes. Growing it frees the old one in stream order, after the
 * collectives queued before that still use it. */
static int
reserve_scratch (NcclComm  *comm,
                 size_t     bytes,
                 void     **out,
                 OpKind     kind,
                 uint32_t   seq,
                 char      *errbuf,
                 size_t     errbuf_len)
{
  size_t size = comm->scratch_bytes * 2;
  cudaError_t err;
  void *p = NULL;

  if (bytes <= comm->scratch_bytes)
    {
      *out = comm->scratch;
      return MIXPREC_PLUGIN_OK;
    }
  if (comm->scratch != NULL)
    {
      err = cudaFreeAsync (comm->scratch, comm->stream);
      comm->scratch = NULL;
      comm->scratch_bytes = 0;
      if (err != cudaSuccess)
        return fail_cuda (comm, "cudaFreeAsync (scratch)", err, kind, seq, errbuf, errbuf_len);
    }
  if (size < MIN_SCRATCH_BYTES)
    size = MIN_SCRATCH_BYTES;
  if (size < bytes)
    size = bytes;
  err = cudaMallocAsync (&p, size, comm->stream);
  if (err != cudaSuccess)
    {
      char call[96];

      snprintf (call, sizeof call, "cudaMallocAsync (%zu bytes of scratch)", size);
      return fail_cuda (comm, call, err, kind, seq, errbuf, errbuf_len);
    }
  comm->scratch = p;
  comm->scratch_bytes = size;
  *out = p;
  return MIXPREC_PLUGIN_OK;
}

/* The arguments of one collective. */
typedef struct
{
  OpKind kind;
  const void *send;
  void *recv;
  size_t count;
  MixprecPluginDType dtype;
  MixprecPluginReduceOp op;
  unsigned flags;
  unsigned root;
} Call;

/* all_reduce and reduce_scatter: see the top of the file for the plan. */
static int
queue_reduction (NcclComm   *comm,
                 const Call *c,
                 uint32_t    seq,
                 char       *errbuf,
                 size_t      errbuf_len)
{
  int scatter = c->kind == OP_REDUCE_SCATTER;
  MixprecPluginDType out = (c->flags & MIXPREC_PLUGIN_COMM_RECV_FP32)
                           ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : c->dtype;
  size_t n_send = scatter ? c->count * comm->world_size : c->count;
  size_t mine = scatter ? (size_t) comm->rank * c->count : 0;
  /* The rank whose term recv joins (see the top of the file). */
  int folds = (c->flags & MIXPREC_PLUGIN_COMM_ACCUMULATE) && (scatter || comm->rank == 0);
  const void *first = folds ? c->recv : NULL;
  void *scratch = NULL;
  cudaError_t err;
  ncclResult_t res;
  int status;

  if (c->op == MIXPREC_PLUGIN_REDUCE_MAX)
    {
      int32_t *keys;

      status = reserve_scratch (comm, n_send * sizeof (int32_t), &scratch, c->kind, seq,
                                errbuf, errbuf_len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
      keys = scratch;
      err = nccl_kernel_max_encode (keys, out, c->send, c->dtype, n_send, first, mine, c->count,
                                    comm->stream);
      if (err != cudaSuccess)
        return fail_cuda (comm, "the key encoding kernel", err, c->kind, seq, errbuf, errbuf_len);
      res = scatter
        ? ncclReduceScatter (keys, keys + mine, c->count, ncclInt32, ncclMax, comm->nccl,
                             comm->stream)
        : ncclAllReduce (keys, keys, c->count, ncclInt32, ncclMax, comm->nccl, comm->stream);
      status = settle (comm, scatter ? "ncclReduceScatter" : "ncclAllReduce", res, c->kind, seq,
                       errbuf, errbuf_len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
      err = nccl_kernel_max_decode (c->recv, out, keys + mine, c->count, comm->stream);
      if (err != cudaSuccess)
        return fail_cuda (comm, "the key decoding kernel", err, c->kind, seq, errbuf, errbuf_len);
      return MIXPREC_PLUGIN_OK;
    }

  if (out != c->dtype || first != NULL)
    {
      status = reserve_scratch (comm, n_send * dtype_size (out), &scratch, c->kind, seq,
                                errbuf, errbuf_len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
      err = nccl_kernel_prepare (scratch, out, c->send, c->dtype, n_send, first, mine, c->count,
                                 comm->stream);
      if (err != cudaSuccess)
        return fail_cuda (comm, "the widening kernel", err, c->kind, seq, errbuf, errbuf_len);
    }
  res = scatter
    ? ncclReduceScatter (scratch != NULL ? scratch : c->send, c->recv, c->count,
                         nccl_dtype (out), ncclSum, comm->nccl, comm->stream)
    : ncclAllReduce (scratch != NULL ? scratch : c->send, c->recv, c->count, nccl_dtype (out),
                     ncclSum, comm->nccl, comm->stream);
  return settle (comm, scatter ? "ncclReduceScatter" : "ncclAllReduce", res, c->kind, seq,
                 errbuf, errbuf_len);
}

static int
queue_call (NcclComm   *comm,
            const Call *c,
            uint32_t    seq,
            char       *errbuf,
            size_t      errbuf_len)
{
  ncclResult_t res;

  switch (c->kind)
    {
    case OP_ALL_REDUCE:
    case OP_REDUCE_SCATTER:
      return queue_reduction (comm, c, seq, errbuf, errbuf_len);
    case OP_ALL_GATHER:
      res = ncclAllGather (c->send, c->recv, c->count, nccl_dtype (c->dtype), comm->nccl,
                           comm->stream);
      return settle (comm, "ncclAllGather", res, c->kind, seq, errbuf, errbuf_len);
    case OP_BROADCAST:
      res = ncclBroadcast (c->recv, c->recv, c->count, nccl_dtype (c->dtype), (int) c->root,
                           comm->nccl, comm->stream);
      return settle (comm, "ncclBroadcast", res, c->kind, seq, errbuf, errbuf_len);
    case OP_BARRIER:
    default:
      res = ncclAllReduce (comm->barrier_buf, comm->barrier_buf, 1, ncclFloat32, ncclSum,
                           comm->nccl, comm->stream);
      return settle (comm, "ncclAllReduce (barrier)", res, c->kind, seq, errbuf, errbuf_len);
    }
}

/* ------------------------------------------------------------ completion */

/* One look at a request: its event and the communicator's state. */
static void
poll_request (NcclComm    *comm,
              NcclRequest *req)
{
  cudaError_t err;
  ncclResult_t state = ncclSuccess, res;

  if (req->finished)
    return;
  pthread_mutex_lock (&comm->lock);
  if (comm->broken)
    {
      /* An aborted collective's kernels return early, so its event
       * completes over incomplete data: never report it done. */
      req->status = broken_error (comm, req->message, sizeof req->message);
      req->finished = 1;
    }
  else if ((err = cudaEventQuery (req->event)) == cudaSuccess)
    {
      req->status = MIXPREC_PLUGIN_OK;
      req->finished = 1;
    }
  else if (err != cudaErrorNotReady)
    {
      req->status = fail_cuda (comm, "cudaEventQuery", err, req->kind, req->seq,
                               req->message, sizeof req->message);
      req->finished = 1;
    }
  else if ((res = ncclCommGetAsyncError (comm->nccl, &state)) != ncclSuccess ||
           (state != ncclSuccess && state != ncclInProgress))
    {
      req->status = fail_nccl (comm, "ncclCommGetAsyncError", res != ncclSuccess ? res : state,
                               req->kind, req->seq, req->message, sizeof req->message);
      req->finished = 1;
    }
  pthread_mutex_unlock (&comm->lock);
}

/* Releases a finished request and hands back its outcome. */
static int
finish_request (NcclComm    *comm,
                NcclRequest *req,
                char        *errbuf,
                size_t       errbuf_len)
{
  int status = req->status;
  cudaError_t err = req->event != NULL ? cudaEventDestroy (req->event) : cudaSuccess;

  if (status != MIXPREC_PLUGIN_OK)
    set_error (errbuf, errbuf_len, status, "%s", req->message);
  else if (err != cudaSuccess)
    status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "cudaEventDestroy after %s #%u on rank %u failed: %s",
                        op_names[req->kind], req->seq, comm->rank, cudaGetErrorString (err));
  if (req->on_heap)
    free (req);
  return status;
}

/* Polls until the request finishes; a collective that has not completed
 * after the timeout aborts the communicator. The clock starts with the
 * wait: time the caller spent elsewhere does not count against peers. */
static int
wait_request (NcclComm    *comm,
              NcclRequest *req,
              char        *errbuf,
              size_t       errbuf_len)
{
  int64_t deadline = now_ns () + (int64_t) comm->timeout_ms * 1000000;
  unsigned polls = 0;

  for (poll_request (comm, req); !req->finished; poll_request (comm, req))
    {
      if (now_ns () > deadline)
        {
          pthread_mutex_lock (&comm->lock);
          break_locked (comm, MIXPREC_PLUGIN_ERR_TIMEOUT,
                        "%s #%u did not complete on rank %u within %u ms: a peer may have "
                        "died or hung, or called other collectives; the NCCL communicator "
                        "was aborted", op_names[req->kind], req->seq, comm->rank,
                        comm->timeout_ms);
          req->status = set_error (req->message, sizeof req->message, comm->broken, "%s",
                                   comm->broken_message);
          req->finished = 1;
          pthread_mutex_unlock (&comm->lock);
          break;
        }
      pause_poll (++polls);
    }
  return finish_request (comm, req, errbuf, errbuf_len);
}

/* ------------------------------------------------------------ collectives */

static int
check_call (const NcclComm *comm,
            const Call     *c,
            char           *errbuf,
            size_t          errbuf_len)
{
  const char *name = op_names[c->kind];
  int reduction = c->kind == OP_ALL_REDUCE || c->kind == OP_REDUCE_SCATTER;
  int narrow_fp32 = reduction && (c->flags & MIXPREC_PLUGIN_COMM_RECV_FP32) &&
                    c->dtype != MIXPREC_PLUGIN_DTYPE_FLOAT32;
  size_t esize, world = comm->world_size;

  if (c->kind == OP_BARRIER)
    return MIXPREC_PLUGIN_OK;
  if ((unsigned) c->dtype >= 32 || !(NCCL_DTYPE_MASK & (1u << c->dtype)))
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                      "%s: the nccl communicator does not handle dtype %d; it takes float32, "
                      "float16 and bfloat16", name, (int) c->dtype);
  esize = dtype_size (c->dtype);
  if (reduction && c->op != MIXPREC_PLUGIN_REDUCE_SUM && c->op != MIXPREC_PLUGIN_REDUCE_MAX)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: reduction %d is neither sum (0) nor max (1)", name, (int) c->op);
  if (reduction && (c->flags & ~KNOWN_FLAGS) != 0)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: flags 0x%x include bits the nccl communicator does not know",
                      name, c->flags);
  if (c->count > SIZE_MAX / 4 / world)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: %zu elements per rank, times %zu ranks, do not fit in the "
                      "address space", name, c->count, world);
  if (c->count > 0 && (c->recv == NULL || c->send == NULL))
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: the %s buffer is NULL but count is %zu elements", name,
                      c->kind == OP_BROADCAST ? "device" : c->recv == NULL ? "receive" : "send",
                      c->count);
  if (c->kind == OP_BROADCAST && c->root >= comm->world_size)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "broadcast: root %u is not a rank of a world of %u", c->root,
                      comm->world_size);
  if (c->kind == OP_ALL_REDUCE && narrow_fp32 && c->send == c->recv && c->count > 0)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "all_reduce: an in-place all_reduce cannot use RECV_FP32 with a 16-bit "
                      "dtype: the float32 results are larger than the elements they replace");
  if (c->kind == OP_REDUCE_SCATTER && c->count > 0 &&
      (const char *) c->recv == (const char *) c->send + comm->rank * c->count * esize &&
      (narrow_fp32 || (c->flags & MIXPREC_PLUGIN_COMM_ACCUMULATE)))
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "reduce_scatter: an in-place reduce_scatter (recv at this rank's part "
                      "of send) cannot use %s",
                      narrow_fp32 ? "RECV_FP32 with a 16-bit dtype" : "ACCUMULATE");
  return MIXPREC_PLUGIN_OK;
}

/* Queues a collective and the event after it; waits when @request is NULL. */
static int
launch (NcclComm    *comm,
        const Call  *c,
        void       **request,
        char        *errbuf,
        size_t       errbuf_len)
{
  NcclRequest local = { 0 };
  NcclRequest *req = &local;
  int status = check_call (comm, c, errbuf, errbuf_len);
  int saved = comm->device;
  cudaError_t err;

  if (status != MIXPREC_PLUGIN_OK)
    return status;
  if (request != NULL)
    {
      req = calloc (1, sizeof *req);
      if (req == NULL)
        return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                          "no memory for the request of a %s", op_names[c->kind]);
      req->on_heap = 1;
    }

  pthread_mutex_lock (&comm->lock);
  if (comm->broken)
    {
      status = broken_error (comm, errbuf, errbuf_len);
      pthread_mutex_unlock (&comm->lock);
      if (req->on_heap)
        free (req);
      return status;
    }
  req->kind = c->kind;
  req->seq = comm->next_seq++;
  err = enter_device (comm, &saved);
  if (err != cudaSuccess)
    status = fail_cuda (comm, "selecting the communicator's device", err, c->kind, req->seq,
                        errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK && (c->count > 0 || c->kind == OP_BARRIER))
    status = queue_call (comm, c, req->seq, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK &&
      (err = cudaEventCreateWithFlags (&req->event, cudaEventDisableTiming)) != cudaSuccess)
    {
      req->event = NULL;
      status = fail_cuda (comm, "cudaEventCreateWithFlags", err, c->kind, req->seq,
                          errbuf, errbuf_len);
    }
  if (status == MIXPREC_PLUGIN_OK && (err = cudaEventRecord (req->event, comm->stream)) != cudaSuccess)
    status = fail_cuda (comm, "cudaEventRecord", err, c->kind, req->seq, errbuf, errbuf_len);
  if (saved != comm->device && (err = leave_device (comm, saved)) != cudaSuccess &&
      status == MIXPREC_PLUGIN_OK)
    status = fail_cuda (comm, "selecting the caller's device again", err, c->kind, req->seq,
                        errbuf, errbuf_len);
  pthread_mutex_unlock (&comm->lock);

  if (status != MIXPREC_PLUGIN_OK)
    {
      if (req->event != NULL)
        cudaEventDestroy (req->event);  /* the failure already reported is the one that counts */
      if (req->on_heap)
        free (req);
      return status;
    }
  if (request != NULL)
    {
      *request = req;
      return MIXPREC_PLUGIN_OK;
    }
  return wait_request (comm, req, errbuf, errbuf_len);
}

static int
nccl_all_reduce (void                 *comm,
                 const void           *send,
                 void                 *recv,
                 size_t                count,
                 MixprecPluginDType    dtype,
                 MixprecPluginReduceOp op,
                 unsigned              flags,
                 void                **request,
                 char                 *errbuf,
                 size_t                errbuf_len)
{
  Call c = { OP_ALL_REDUCE, send, recv, count, dtype, op, flags, 0 };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

static int
nccl_reduce_scatter (void                 *comm,
                     const void           *send,
                     void                 *recv,
                     size_t                count,
                     MixprecPluginDType    dtype,
                     MixprecPluginReduceOp op,
                     unsigned              flags,
                     void                **request,
                     char                 *errbuf,
                     size_t                errbuf_len)
{
  Call c = { OP_REDUCE_SCATTER, send, recv, count, dtype, op, flags, 0 };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

static int
nccl_all_gather (void              *comm,
                 const void        *send,
                 void              *recv,
                 size_t             count,
                 MixprecPluginDType dtype,
                 void             **request,
                 char              *errbuf,
                 size_t             errbuf_len)
{
  Call c = { OP_ALL_GATHER, send, recv, count, dtype, MIXPREC_PLUGIN_REDUCE_SUM, 0, 0 };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

static int
nccl_broadcast (void              *comm,
                void              *buf,
                size_t             count,
                MixprecPluginDType dtype,
                unsigned           root,
                void             **request,
                char              *errbuf,
                size_t             errbuf_len)
{
  Call c = { OP_BROADCAST, buf, buf, count, dtype, MIXPREC_PLUGIN_REDUCE_SUM, 0, root };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

static int
nccl_barrier (void   *comm,
              void  **request,
              char   *errbuf,
              size_t  errbuf_len)
{
  Call c = { OP_BARRIER, NULL, NULL, 0, MIXPREC_PLUGIN_DTYPE_FLOAT32,
             MIXPREC_PLUGIN_REDUCE_SUM, 0, 0 };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

static int
nccl_test (void   *comm,
           void   *request,
           int    *done,
           char   *errbuf,
           size_t  errbuf_len)
{
  NcclRequest *req = request;

  poll_request (comm, req);
  *done = req->finished;
  return MIXPREC_PLUGIN_OK;
}

static int
nccl_wait (void   *comm,
           void   *request,
           char   *errbuf,
           size_t  errbuf_len)
{
  return wait_request (comm, request, errbuf, errbuf_len);
}

static void
nccl_abort (void *handle)
{
  NcclComm *comm = handle;

  pthread_mutex_lock (&comm->lock);
  break_locked (comm, MIXPREC_PLUGIN_ERR_RUNTIME, "the communicator was aborted");
  pthread_mutex_unlock (&comm->lock);
}

/* ------------------------------------------------------------ life cycle */

/* Frees the device resources of a communicator whose NCCL side is gone;
 * returns the first failure (and keeps going after it). */
static int
release_resources (NcclComm *comm,
                   int       status,
                   char     *errbuf,
                   size_t    errbuf_len)
{
  cudaError_t err;

  if (comm->scratch != NULL && (err = cudaFreeAsync (comm->scratch, comm->stream)) != cudaSuccess &&
      status == MIXPREC_PLUGIN_OK)
    status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "cudaFreeAsync (scratch) on rank %u failed: %s", comm->rank,
                        cudaGetErrorString (err));
  if (comm->barrier_buf != NULL &&
      (err = cudaFreeAsync (comm->barrier_buf, comm->stream)) != cudaSuccess &&
      status == MIXPREC_PLUGIN_OK)
    status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "cudaFreeAsync (barrier buffer) on rank %u failed: %s", comm->rank,
                        cudaGetErrorString (err));
  if (comm->own_stream)
    {
      if ((err = cudaStreamSynchronize (comm->stream)) != cudaSuccess &&
          status == MIXPREC_PLUGIN_OK)
        status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                            "cudaStreamSynchronize on rank %u failed: %s", comm->rank,
                            cudaGetErrorString (err));
      if ((err = cudaStreamDestroy (comm->stream)) != cudaSuccess && status == MIXPREC_PLUGIN_OK)
        status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                            "cudaStreamDestroy on rank %u failed: %s", comm->rank,
                            cudaGetErrorString (err));
    }
  pthread_mutex_destroy (&comm->lock);
  free (comm);
  return status;
}

/* Waits for a non-blocking communicator's state to leave ncclInProgress,
 * at most the timeout; returns the state (ncclInProgress when timed out). */
static ncclResult_t
await_state (ncclComm_t    nccl,
             unsigned      timeout_ms,
             ncclResult_t *query)
{
  int64_t deadline = now_ns () + (int64_t) timeout_ms * 1000000;
  ncclResult_t state = ncclInProgress;
  unsigned polls = 0;

  *query = ncclSuccess;
  while (state == ncclInProgress && now_ns () <= deadline)
    {
      *query = ncclCommGetAsyncError (nccl, &state);
      if (*query != ncclSuccess)
        return *query;
      if (state == ncclInProgress)
        pause_poll (++polls);
    }
  return state;
}

/* The CUDA side of init: the device and the stream, and the barrier's
 * buffer. Returns the status with the reason in errbuf. */
static int
open_device (NcclComm               *comm,
             const MixprecCommInitV1 *args,
             char                    *errbuf,
             size_t                   errbuf_len)
{
  cudaError_t err = cudaGetDevice (&comm->device);

  if (err != cudaSuccess)
    return set_error (errbuf, errbuf_len, cuda_status (err), "cudaGetDevice: %s",
                      cudaGetErrorString (err));
  /* Makes the runtime create the device's context now, so that a broken
   * device fails here rather than inside NCCL. */
  err = cudaFree (NULL);
  if (err != cudaSuccess)
    return set_error (errbuf, errbuf_len, cuda_status (err),
                      "cudaFree (NULL), creating the context of device %d: %s", comm->device,
                      cudaGetErrorString (err));
  if (args->struct_size >= offsetof (MixprecCommInitV1, device_stream) + sizeof (void *) &&
      args->device_stream != NULL)
    comm->stream = args->device_stream;
  else
    {
      err = cudaStreamCreateWithFlags (&comm->stream, cudaStreamNonBlocking);
      if (err != cudaSuccess)
        return set_error (errbuf, errbuf_len, cuda_status (err),
                          "cudaStreamCreateWithFlags on device %d: %s", comm->device,
                          cudaGetErrorString (err));
      comm->own_stream = 1;
    }
  err = cudaMallocAsync ((void **) &comm->barrier_buf, sizeof (float), comm->stream);
  if (err != cudaSuccess)
    {
      comm->barrier_buf = NULL;
      return set_error (errbuf, errbuf_len, cuda_status (err),
                        "cudaMallocAsync (barrier buffer) on device %d: %s", comm->device,
                        cudaGetErrorString (err));
    }
  err = cudaMemsetAsync (comm->barrier_buf, 0, sizeof (float), comm->stream);
  if (err != cudaSuccess)
    return set_error (errbuf, errbuf_len, cuda_status (err),
                      "cudaMemsetAsync (barrier buffer) on device %d: %s", comm->device,
                      cudaGetErrorString (err));
  return MIXPREC_PLUGIN_OK;
}

/* Swaps every rank's device status and rank 0's unique id, so that a rank
 * whose device failed makes every rank fail at once instead of leaving
 * them waiting in NCCL's own rendezvous. */
static int
exchange_id (NcclComm                 *comm,
             const MixprecBootstrapV1 *bootstrap,
             int                       local_status,
             ncclUniqueId             *id,
             char                     *errbuf,
             size_t                    errbuf_len)
{
  InitRecord mine = { 0 };
  InitRecord *all = calloc (comm->world_size, sizeof *all);
  char inner[512] = "";
  int status;

  if (all == NULL)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                      "no memory to exchange the NCCL id of %u ranks", comm->world_size);
  mine.status = local_status;
  if (comm->rank == 0 && local_status == MIXPREC_PLUGIN_OK)
    {
      ncclResult_t res = ncclGetUniqueId (&mine.id);

      if (res != ncclSuccess)
        {
          mine.status = nccl_status (res);
          set_error (errbuf, errbuf_len, mine.status, "ncclGetUniqueId: %s (%s)",
                     ncclGetErrorString (res), nccl_detail (NULL));
        }
    }
  status = bootstrap->all_gather (bootstrap->ctx, &mine, sizeof mine, all, inner, sizeof inner);
  if (status != MIXPREC_PLUGIN_OK)
    {
      free (all);
      return set_error (errbuf, errbuf_len, status,
                        "exchanging the NCCL id through the bootstrap failed: %s", inner);
    }
  status = mine.status;         /* this rank's own reason is already in errbuf */
  for (unsigned r = 0; r < comm->world_size && status == MIXPREC_PLUGIN_OK; r++)
    if (all[r].status != MIXPREC_PLUGIN_OK)
      status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                          "rank %u could not %s, so the NCCL communicator was not created", r,
                          r == 0 ? "open its CUDA device or create the NCCL id"
                                 : "open its CUDA device");
  if (status == MIXPREC_PLUGIN_OK)
    *id = all[0].id;
  free (all);
  return status;
}

static int
nccl_init (const MixprecCommInitV1 *args,
           void                   **out,
           char                    *errbuf,
           size_t                   errbuf_len)
{
  const MixprecBootstrapV1 *bootstrap;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId id;
  ncclResult_t res, query;
  NcclComm *comm;
  int status;

  if (args == NULL || args->struct_size < offsetof (MixprecCommInitV1, device_stream) ||
      args->bootstrap == NULL || args->bootstrap->all_gather == NULL)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "init() needs its arguments and a bootstrap");
  bootstrap = args->bootstrap;
  if (bootstrap->world_size == 0 || bootstrap->world_size > (unsigned) INT32_MAX ||
      bootstrap->rank >= bootstrap->world_size)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "rank %u of a world of %u is not a rank the nccl communicator can serve",
                      bootstrap->rank, bootstrap->world_size);

  comm = calloc (1, sizeof *comm);
  if (comm == NULL)
    return set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                      "no memory for a communicator");
  pthread_mutex_init (&comm->lock, NULL);
  comm->rank = bootstrap->rank;
  comm->world_size = bootstrap->world_size;
  comm->timeout_ms = args->timeout_ms > 0 ? args->timeout_ms : DEFAULT_TIMEOUT_MS;

  status = open_device (comm, args, errbuf, errbuf_len);
  /* Even a rank whose device failed takes part in the exchange, so that
   * its peers fail too instead of waiting for it. */
  status = exchange_id (comm, bootstrap, status, &id, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    {
      /* The reason in errbuf is what the caller needs; the release of a
       * device that never worked adds nothing to it. */
      release_resources (comm, status, NULL, 0);
      return status;
    }

  config.blocking = 0;
  res = ncclCommInitRankConfig (&comm->nccl, (int) comm->world_size, id, (int) comm->rank,
                                &config);
  query = ncclSuccess;
  if (res == ncclInProgress)
    res = await_state (comm->nccl, comm->timeout_ms, &query);
  if (res != ncclSuccess)
    {
      if (res == ncclInProgress)
        status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_TIMEOUT,
                            "ncclCommInitRankConfig on rank %u of %u did not finish within "
                            "%u ms: a peer may have died or hung", comm->rank,
                            comm->world_size, comm->timeout_ms);
      else
        status = set_error (errbuf, errbuf_len, nccl_status (res),
                            "%s on rank %u of %u (device %d): %s (%s)",
                            query != ncclSuccess ? "ncclCommGetAsyncError" : "ncclCommInitRankConfig",
                            comm->rank, comm->world_size, comm->device,
                            ncclGetErrorString (res), nccl_detail (comm->nccl));
      if (comm->nccl != NULL)
        ncclCommAbort (comm->nccl);     /* gone either way; the failure above is the news */
      comm->nccl = NULL;
      release_resources (comm, status, NULL, 0);
      return status;
    }
  *out = comm;
  return MIXPREC_PLUGIN_OK;
}

static int
nccl_finalize (void   *handle,
               char   *errbuf,
               size_t  errbuf_len)
{
  NcclComm *comm = handle;
  int status = MIXPREC_PLUGIN_OK;
  int device = comm->device, saved = comm->device;
  cudaError_t err;

  pthread_mutex_lock (&comm->lock);
  err = enter_device (comm, &saved);
  if (err != cudaSuccess)
    {
      status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                          "selecting device %d to finalize rank %u failed: %s", comm->device,
                          comm->rank, cudaGetErrorString (err));
      break_locked (comm, status, "finalize could not select the device");
    }
  if (comm->nccl != NULL)
    {
      ncclResult_t query = ncclSuccess;
      ncclResult_t res = ncclCommFinalize (comm->nccl);

      /* Finalizing flushes pending work with the peers; it may take as
       * long as a collective. */
      if (res == ncclInProgress)
        res = await_state (comm->nccl, comm->timeout_ms, &query);
      if (res == ncclSuccess)
        {
          res = ncclCommDestroy (comm->nccl);
          comm->nccl = NULL;
          if (res != ncclSuccess && res != ncclInProgress)
            status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                                "ncclCommDestroy on rank %u failed: %s", comm->rank,
                                ncclGetErrorString (res));
        }
      else
        {
          if (res == ncclInProgress)
            status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_TIMEOUT,
                                "ncclCommFinalize on rank %u did not finish within %u ms: a "
                                "peer may have died or hung", comm->rank, comm->timeout_ms);
          else
            status = set_error (errbuf, errbuf_len, nccl_status (res),
                                "%s on rank %u failed: %s (%s)",
                                query != ncclSuccess ? "ncclCommGetAsyncError" : "ncclCommFinalize",
                                comm->rank, ncclGetErrorString (res), nccl_detail (comm->nccl));
          break_locked (comm, status, "finalizing the communicator failed");
        }
    }
  pthread_mutex_unlock (&comm->lock);
  status = release_resources (comm, status, errbuf, errbuf_len);
  if (saved != device && (err = cudaSetDevice (saved)) != cudaSuccess &&
      status == MIXPREC_PLUGIN_OK)
    status = set_error (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "selecting the caller's device %d again failed: %s", saved,
                        cudaGetErrorString (err));
  return status;
}

static const MixprecCommV1 nccl_comm = {
  .name = "nccl",
  .device = "cuda",
  .rank = 256,
  .description = "collectives in CUDA device memory over NCCL. Sums follow NCCL's ring or "
                 "tree order, not rank order: the contract's bits at 1 and 2 ranks, "
                 "deterministic for a fixed topology and NCCL version beyond. float16 and "
                 "bfloat16 sums add in their dtype inside NCCL unless RECV_FP32 asks for "
                 "FP32. MAX lets NaN win (the largest payload among several) and +0 beat -0",
  .dtype_mask = NCCL_DTYPE_MASK,
  .init = nccl_init,
  .all_reduce = nccl_all_reduce,
  .reduce_scatter = nccl_reduce_scatter,
  .all_gather = nccl_all_gather,
  .broadcast = nccl_broadcast,
  .barrier = nccl_barrier,
  .test = nccl_test,
  .wait = nccl_wait,
  .abort = nccl_abort,
  .finalize = nccl_finalize,
};

static int
comm_nccl_init (MixprecPluginHostV1 *host,
                char                *errbuf,
                size_t               errbuf_len)
{
  return host->register_comm (host, &nccl_comm, errbuf, errbuf_len);
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "comm-nccl",
  .description = "collectives between CUDA devices over NCCL",
  .version = PACKAGE_VERSION,
  .license = "LGPL-2.1-or-later",
  .origin = "libmixprec",
  .init = comm_nccl_init,
};

const MixprecPluginDesc *
mixprec_plugin_comm_nccl_get_desc (void)
{
  return &desc;
}
