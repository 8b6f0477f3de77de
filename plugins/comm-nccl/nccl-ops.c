/* nccl-ops.c — the collectives of comm-nccl: each one checked, queued on
 * the communicator's stream (with the kernels and the scratch buffer it
 * needs) and followed by an event that test() and wait() watch.
 *
 * Determinism. The ABI's contract forms a SUM in rank order; NCCL sums in
 * the order of its ring or tree. At one rank the result is the single term;
 * at two ranks it is one IEEE addition, which commutes, so both give the
 * contract's bits. Beyond two ranks the result is deterministic for a fixed
 * topology, NCCL version and NCCL_ALGO/NCCL_PROTO, but not rank-ordered.
 * float16 and bfloat16 sums without RECV_FP32 add in their dtype inside
 * NCCL (each addition rounds, unlike the contract's single rounding).
 * With RECV_FP32 the terms travel in their dtype to the rank that owns
 * them (grouped ncclSend/ncclRecv, an all-to-all) and that rank adds them
 * in FP32 in rank order: the contract's bits at every world size
 * (queue_fp32_sum). MIXPREC_NCCL_FP32_SUM=widen instead widens the terms
 * exactly and lets NCCL's ring add them in FP32 (twice the bytes, NCCL's
 * order).
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

#include <stdio.h>
#include <stdlib.h>

#include "nccl-comm.h"
#include "nccl-kernels.h"

#define KNOWN_FLAGS (MIXPREC_PLUGIN_COMM_ACCUMULATE | MIXPREC_PLUGIN_COMM_RECV_FP32)
/* The scratch buffer grows to at least this, so that small collectives do
 * not reallocate it one after the other. */
#define MIN_SCRATCH_BYTES ((size_t) 1 << 20)

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
  /* all_to_all_v: send lengths, send offsets, recv lengths, recv offsets
   * (bytes, world_size each), read while the call is queued */
  const size_t *runs[4];
} Call;

/* Part @p of a reduction: an all_reduce cuts count into world parts, the
 * first count % world one element longer; a reduce_scatter's parts are
 * count long, one after the other. */
static size_t
part_len (const NcclComm *comm,
          const Call     *c,
          unsigned        p)
{
  if (c->kind == OP_REDUCE_SCATTER)
    return c->count;
  return c->count / comm->world_size + (p < c->count % comm->world_size);
}

static size_t
part_off (const NcclComm *comm,
          const Call     *c,
          unsigned        p)
{
  size_t base = c->count / comm->world_size, rem = c->count % comm->world_size;

  if (c->kind == OP_REDUCE_SCATTER)
    return (size_t) p * c->count;
  return p * base + (p < rem ? p : rem);
}

/* One group of ncclSend/ncclRecv with every other rank p, elements of
 * @esize. Out: part p of @send_base (send_parts) or all send_len elements
 * of it. In: part p's length at part p of @recv_base (recv_parts), or this
 * rank's part length at p * @recv_stride. */
static int
exchange (NcclComm       *comm,
          const Call     *c,
          uint32_t        seq,
          const char     *call,
          ncclDataType_t  type,
          size_t          esize,
          const char     *send_base,
          int             send_parts,   /* 1: part p of send_base to p; 0: all of it */
          size_t          send_len,     /* when send_parts is 0 */
          char           *recv_base,
          int             recv_parts,   /* 1: at part_off (p); 0: at p * recv_stride */
          size_t          recv_stride,
          char           *errbuf,
          size_t          errbuf_len)
{
  unsigned world = comm->world_size, me = comm->rank;
  ncclResult_t res, first_error = ncclSuccess;

  res = ncclGroupStart ();
  if (res != ncclSuccess)
    return fail_nccl (comm, "ncclGroupStart", res, c->kind, seq, errbuf, errbuf_len);
  for (unsigned i = 1; i < world; i++)
    {
      unsigned to = (me + i) % world, from = (me + world - i) % world;
      size_t out_len = send_parts ? part_len (comm, c, to) : send_len;
      size_t in_len = recv_parts ? part_len (comm, c, from) : part_len (comm, c, me);
      const char *out = send_parts ? send_base + part_off (comm, c, to) * esize : send_base;
      char *in = recv_parts ? recv_base + part_off (comm, c, from) * esize
                            : recv_base + (size_t) from * recv_stride * esize;

      if (out_len > 0 && (res = ncclSend (out, out_len, type, (int) to, comm->nccl,
                                          comm->stream)) != ncclSuccess &&
          res != ncclInProgress && first_error == ncclSuccess)
        first_error = res;
      if (in_len > 0 && (res = ncclRecv (in, in_len, type, (int) from, comm->nccl,
                                         comm->stream)) != ncclSuccess &&
          res != ncclInProgress && first_error == ncclSuccess)
        first_error = res;
    }
  res = ncclGroupEnd ();
  if (first_error != ncclSuccess)
    return fail_nccl (comm, call, first_error, c->kind, seq, errbuf, errbuf_len);
  return settle (comm, "ncclGroupEnd", res, c->kind, seq, errbuf, errbuf_len);
}

/* A SUM of float16 or bfloat16 terms into a float32 recv (RECV_FP32), the
 * way Megatron's reduce_scatter_with_fp32_accumulation forms it: each rank
 * sends every other rank that rank's part in the narrow dtype (an
 * all-to-all in one group of ncclSend/ncclRecv), then folds the world's
 * terms for its own part in rank order in FP32 (nccl_kernel_fold_fp32).
 * That is the contract's order and bits at every world size, with half
 * the bytes of widening the terms for NCCL's FP32 ring. An all_reduce then
 * sends its FP32 part to every rank (a second group). */
static int
queue_fp32_sum (NcclComm   *comm,
                const Call *c,
                uint32_t    seq,
                char       *errbuf,
                size_t      errbuf_len)
{
  unsigned me = comm->rank;
  size_t esize = dtype_size (c->dtype), mine = part_len (comm, c, me);
  int scatter = c->kind == OP_REDUCE_SCATTER;
  float *dst = (float *) c->recv + (scatter ? 0 : part_off (comm, c, me));
  const char *own = (const char *) c->send + part_off (comm, c, me) * esize;
  void *scratch = NULL;
  cudaError_t err;
  int status;

  status = reserve_scratch (comm, (size_t) comm->world_size * mine * esize, &scratch, c->kind,
                            seq, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = exchange (comm, c, seq, "ncclSend/ncclRecv (contributions)", nccl_dtype (c->dtype),
                       esize, c->send, 1, 0, scratch, 0, mine, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  err = nccl_kernel_fold_fp32 (dst, (c->flags & MIXPREC_PLUGIN_COMM_ACCUMULATE) ? dst : NULL,
                               scratch, mine, own, me, comm->world_size, c->dtype, mine,
                               comm->stream);
  if (err != cudaSuccess)
    return fail_cuda (comm, "the FP32 fold kernel", err, c->kind, seq, errbuf, errbuf_len);
  if (scatter)
    return MIXPREC_PLUGIN_OK;
  return exchange (comm, c, seq, "ncclSend/ncclRecv (sums)", ncclFloat32, sizeof (float),
                   (const char *) dst, 0, mine, c->recv, 1, 0, errbuf, errbuf_len);
}

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

  if (out != c->dtype && comm->world_size > 1 && !comm->fp32_sum_widen)
    return queue_fp32_sum (comm, c, seq, errbuf, errbuf_len);
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

/* all_to_all_v: run p of send, of its own size, to rank p in one group
 * of ncclSend/ncclRecv (bytes, as ncclUint8), nothing for an empty run;
 * this rank's own run copied on the stream. */
static int
queue_all_to_all_v (NcclComm   *comm,
                    const Call *c,
                    uint32_t    seq,
                    char       *errbuf,
                    size_t      errbuf_len)
{
  unsigned world = comm->world_size, me = comm->rank;
  const size_t *send_len = c->runs[0], *send_off = c->runs[1];
  const size_t *recv_len = c->runs[2], *recv_off = c->runs[3];
  const char *send = c->send;
  char *recv = c->recv;
  ncclResult_t res, first_error = ncclSuccess;
  cudaError_t err;

  if (recv_len[me] > 0 &&
      (err = cudaMemcpyAsync (recv + recv_off[me], send + send_off[me], recv_len[me],
                              cudaMemcpyDeviceToDevice, comm->stream)) != cudaSuccess)
    return fail_cuda (comm, "cudaMemcpyAsync (this rank's run)", err, c->kind, seq,
                      errbuf, errbuf_len);
  if (world == 1)
    return MIXPREC_PLUGIN_OK;
  res = ncclGroupStart ();
  if (res != ncclSuccess)
    return fail_nccl (comm, "ncclGroupStart", res, c->kind, seq, errbuf, errbuf_len);
  for (unsigned i = 1; i < world; i++)
    {
      unsigned to = (me + i) % world, from = (me + world - i) % world;

      if (send_len[to] > 0 &&
          (res = ncclSend (send + send_off[to], send_len[to], ncclUint8, (int) to,
                           comm->nccl, comm->stream)) != ncclSuccess &&
          res != ncclInProgress && first_error == ncclSuccess)
        first_error = res;
      if (recv_len[from] > 0 &&
          (res = ncclRecv (recv + recv_off[from], recv_len[from], ncclUint8, (int) from,
                           comm->nccl, comm->stream)) != ncclSuccess &&
          res != ncclInProgress && first_error == ncclSuccess)
        first_error = res;
    }
  res = ncclGroupEnd ();
  if (first_error != ncclSuccess)
    return fail_nccl (comm, "ncclSend/ncclRecv", first_error, c->kind, seq,
                      errbuf, errbuf_len);
  return settle (comm, "ncclGroupEnd", res, c->kind, seq, errbuf, errbuf_len);
}

/* all_to_all: the runs of all_to_all_v, every one @count bytes, run p
 * at p * count on both sides. */
static int
queue_all_to_all (NcclComm   *comm,
                  const Call *c,
                  uint32_t    seq,
                  char       *errbuf,
                  size_t      errbuf_len)
{
  unsigned world = comm->world_size;
  size_t *runs = malloc (4 * (size_t) world * sizeof *runs);
  Call v = *c;
  int status;

  if (runs == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                                 "no memory for an all_to_all of %u ranks", world);
  for (unsigned p = 0; p < world; p++)
    {
      runs[p] = runs[2 * (size_t) world + p] = c->count;
      runs[world + p] = runs[3 * (size_t) world + p] = (size_t) p * c->count;
    }
  for (unsigned k = 0; k < 4; k++)
    v.runs[k] = runs + (size_t) k * world;
  status = queue_all_to_all_v (comm, &v, seq, errbuf, errbuf_len);
  free (runs);
  return status;
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
    case OP_ALL_TO_ALL:
      return queue_all_to_all (comm, c, seq, errbuf, errbuf_len);
    case OP_ALL_TO_ALL_V:
      return queue_all_to_all_v (comm, c, seq, errbuf, errbuf_len);
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
    _mixprec_plugin_fail (errbuf, errbuf_len, status, "%s", req->message);
  else if (err != cudaSuccess)
    status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
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
          req->status = _mixprec_plugin_fail (req->message, sizeof req->message, comm->broken, "%s",
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
  if (c->kind == OP_ALL_TO_ALL_V)
    {
      if (c->runs[0] == NULL || c->runs[1] == NULL || c->runs[2] == NULL || c->runs[3] == NULL)
        return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                          "all_to_all_v needs its four arrays of sizes and offsets");
      return MIXPREC_PLUGIN_OK;
    }
  if (c->kind == OP_ALL_TO_ALL)
    {
      if (c->count > SIZE_MAX / world)
        return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                          "all_to_all: %zu bytes per rank, times %zu ranks, do not fit in "
                          "the address space", c->count, world);
      if (c->count > 0 && (c->recv == NULL || c->send == NULL))
        return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                          "all_to_all: the %s buffer is NULL but there are %zu bytes per rank",
                          c->recv == NULL ? "receive" : "send", c->count);
      return MIXPREC_PLUGIN_OK;
    }
  if ((unsigned) c->dtype >= 32 || !(NCCL_DTYPE_MASK & (1u << c->dtype)))
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                      "%s: the nccl communicator does not handle dtype %d; it takes float32, "
                      "float16 and bfloat16", name, (int) c->dtype);
  esize = dtype_size (c->dtype);
  if (reduction && c->op != MIXPREC_PLUGIN_REDUCE_SUM && c->op != MIXPREC_PLUGIN_REDUCE_MAX)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: reduction %d is neither sum (0) nor max (1)", name, (int) c->op);
  if (reduction && (c->flags & ~KNOWN_FLAGS) != 0)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: flags 0x%x include bits the nccl communicator does not know",
                      name, c->flags);
  if (c->count > SIZE_MAX / 4 / world)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: %zu elements per rank, times %zu ranks, do not fit in the "
                      "address space", name, c->count, world);
  if (c->count > 0 && (c->recv == NULL || c->send == NULL))
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s: the %s buffer is NULL but count is %zu elements", name,
                      c->kind == OP_BROADCAST ? "device" : c->recv == NULL ? "receive" : "send",
                      c->count);
  if (c->kind == OP_BROADCAST && c->root >= comm->world_size)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "broadcast: root %u is not a rank of a world of %u", c->root,
                      comm->world_size);
  if (c->kind == OP_ALL_REDUCE && narrow_fp32 && c->send == c->recv && c->count > 0)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "all_reduce: an in-place all_reduce cannot use RECV_FP32 with a 16-bit "
                      "dtype: the float32 results are larger than the elements they replace");
  if (c->kind == OP_REDUCE_SCATTER && c->count > 0 &&
      (const char *) c->recv == (const char *) c->send + comm->rank * c->count * esize &&
      (narrow_fp32 || (c->flags & MIXPREC_PLUGIN_COMM_ACCUMULATE)))
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
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
        return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
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

int
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

int
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

int
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

int
nccl_all_to_all (void       *comm,
                 const void *send,
                 void       *recv,
                 size_t      bytes,
                 void      **request,
                 char       *errbuf,
                 size_t      errbuf_len)
{
  Call c = { OP_ALL_TO_ALL, send, recv, bytes, MIXPREC_PLUGIN_DTYPE_FLOAT32,
             MIXPREC_PLUGIN_REDUCE_SUM, 0, 0 };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

int
nccl_all_to_all_v (void         *comm,
                   const void   *send,
                   const size_t *send_bytes,
                   const size_t *send_offsets,
                   void         *recv,
                   const size_t *recv_bytes,
                   const size_t *recv_offsets,
                   void        **request,
                   char         *errbuf,
                   size_t        errbuf_len)
{
  /* count 1: queued even when this rank moves nothing, so the group's
   * calls stay paired on every rank */
  Call c = { OP_ALL_TO_ALL_V, send, recv, 1, MIXPREC_PLUGIN_DTYPE_FLOAT32,
             MIXPREC_PLUGIN_REDUCE_SUM, 0, 0,
             { send_bytes, send_offsets, recv_bytes, recv_offsets } };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

int
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

int
nccl_barrier (void   *comm,
              void  **request,
              char   *errbuf,
              size_t  errbuf_len)
{
  Call c = { OP_BARRIER, NULL, NULL, 0, MIXPREC_PLUGIN_DTYPE_FLOAT32,
             MIXPREC_PLUGIN_REDUCE_SUM, 0, 0 };

  return launch (comm, &c, request, errbuf, errbuf_len);
}

int
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

int
nccl_wait (void   *comm,
           void   *request,
           char   *errbuf,
           size_t  errbuf_len)
{
  return wait_request (comm, request, errbuf, errbuf_len);
}

void
nccl_abort (void *handle)
{
  NcclComm *comm = handle;

  pthread_mutex_lock (&comm->lock);
  break_locked (comm, MIXPREC_PLUGIN_ERR_RUNTIME, "the communicator was aborted");
  pthread_mutex_unlock (&comm->lock);
}
