/* comm-nccl.c — the plugin "comm-nccl": the communicator "nccl" for CUDA
 * device memory, over a non-blocking NCCL communicator. This file holds
 * its life cycle (init, finalize), the vtable and the plugin's entry
 * point; nccl-ops.c queues and completes the collectives and says how
 * their sums relate to the ABI's contract, and nccl-failures.c turns CUDA
 * and NCCL failures into statuses and sentences.
 *
 * Each rank drives the CUDA device that is current on the thread calling
 * init() (the engine has selected it). Rank 0 creates the NCCL unique id
 * and the library's bootstrap carries it to the others. Every collective is
 * queued on one stream (the engine's, or one of our own) and followed by
 * an event; test() and wait() watch that event and the communicator's
 * asynchronous error, and wait() aborts the communicator once a collective
 * has made no progress for the timeout, so a dead peer never hangs a rank. */
#include "config.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "nccl-comm.h"
#include "nccl-peer.h"

#define DEFAULT_TIMEOUT_MS 300000u

/* What every rank contributes to the exchange at init: NcclPeerRecord
 * (nccl-peer.h), whose id field holds an ncclUniqueId. */
_Static_assert (sizeof (ncclUniqueId) == NCCL_PEER_ID_BYTES,
                "NcclPeerRecord.id must hold an ncclUniqueId");

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
    status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "cudaFreeAsync (scratch) on rank %u failed: %s", comm->rank,
                        cudaGetErrorString (err));
  if (comm->barrier_buf != NULL &&
      (err = cudaFreeAsync (comm->barrier_buf, comm->stream)) != cudaSuccess &&
      status == MIXPREC_PLUGIN_OK)
    status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "cudaFreeAsync (barrier buffer) on rank %u failed: %s", comm->rank,
                        cudaGetErrorString (err));
  if (comm->own_stream)
    {
      if ((err = cudaStreamSynchronize (comm->stream)) != cudaSuccess &&
          status == MIXPREC_PLUGIN_OK)
        status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                            "cudaStreamSynchronize on rank %u failed: %s", comm->rank,
                            cudaGetErrorString (err));
      if ((err = cudaStreamDestroy (comm->stream)) != cudaSuccess && status == MIXPREC_PLUGIN_OK)
        status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
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
    return _mixprec_plugin_fail (errbuf, errbuf_len, cuda_status (err), "cudaGetDevice: %s",
                      cudaGetErrorString (err));
  /* Makes the runtime create the device's context now, so that a broken
   * device fails here rather than inside NCCL. */
  err = cudaFree (NULL);
  if (err != cudaSuccess)
    return _mixprec_plugin_fail (errbuf, errbuf_len, cuda_status (err),
                      "cudaFree (NULL), creating the context of device %d: %s", comm->device,
                      cudaGetErrorString (err));
  if (args->struct_size >= offsetof (MixprecCommInitV1, device_stream) + sizeof (void *) &&
      args->device_stream != NULL)
    comm->stream = args->device_stream;
  else
    {
      err = cudaStreamCreateWithFlags (&comm->stream, cudaStreamNonBlocking);
      if (err != cudaSuccess)
        return _mixprec_plugin_fail (errbuf, errbuf_len, cuda_status (err),
                          "cudaStreamCreateWithFlags on device %d: %s", comm->device,
                          cudaGetErrorString (err));
      comm->own_stream = 1;
    }
  err = cudaMallocAsync ((void **) &comm->barrier_buf, sizeof (float), comm->stream);
  if (err != cudaSuccess)
    {
      comm->barrier_buf = NULL;
      return _mixprec_plugin_fail (errbuf, errbuf_len, cuda_status (err),
                        "cudaMallocAsync (barrier buffer) on device %d: %s", comm->device,
                        cudaGetErrorString (err));
    }
  err = cudaMemsetAsync (comm->barrier_buf, 0, sizeof (float), comm->stream);
  if (err != cudaSuccess)
    return _mixprec_plugin_fail (errbuf, errbuf_len, cuda_status (err),
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
  NcclPeerRecord mine;
  NcclPeerRecord *all = calloc (comm->world_size, sizeof *all);
  ncclUniqueId made;
  uint8_t chosen[NCCL_PEER_ID_BYTES];
  char inner[512] = "";
  int status;

  if (all == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                      "no memory to exchange the NCCL id of %u ranks", comm->world_size);
  nccl_peer_record_init (&mine, local_status, comm->rank, comm->world_size, NULL);
  if (comm->rank == 0 && local_status == MIXPREC_PLUGIN_OK)
    {
      ncclResult_t res = ncclGetUniqueId (&made);

      if (res != ncclSuccess)
        {
          mine.status = nccl_status (res);
          _mixprec_plugin_fail (errbuf, errbuf_len, mine.status, "ncclGetUniqueId: %s (%s)",
                     ncclGetErrorString (res), nccl_detail (NULL));
        }
      else
        memcpy (mine.id, &made, sizeof mine.id);
    }
  status = bootstrap->all_gather (bootstrap->ctx, &mine, sizeof mine, all, inner, sizeof inner);
  if (status != MIXPREC_PLUGIN_OK)
    {
      free (all);
      return _mixprec_plugin_fail (errbuf, errbuf_len, status,
                        "exchanging the NCCL id through the bootstrap failed: %s", inner);
    }
  status = mine.status;         /* this rank's own reason is already in errbuf */
  /* Every other record is a peer's word: its size, form and sender are
   * checked before rank 0's id reaches NCCL. */
  if (status == MIXPREC_PLUGIN_OK)
    status = nccl_peer_check_records (all, sizeof *all, comm->world_size, comm->rank, chosen,
                                      errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    memcpy (id, chosen, sizeof *id);
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
  const char *fp32_sum;
  NcclComm *comm;
  int status;

  if (args == NULL || args->struct_size < offsetof (MixprecCommInitV1, device_stream) ||
      args->bootstrap == NULL || args->bootstrap->all_gather == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "init() needs its arguments and a bootstrap");
  bootstrap = args->bootstrap;
  if (bootstrap->world_size == 0 || bootstrap->world_size > (unsigned) INT32_MAX ||
      bootstrap->rank >= bootstrap->world_size)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "rank %u of a world of %u is not a rank the nccl communicator can serve",
                      bootstrap->rank, bootstrap->world_size);

  fp32_sum = getenv ("MIXPREC_NCCL_FP32_SUM");
  if (fp32_sum != NULL && fp32_sum[0] != '\0' && strcmp (fp32_sum, "alltoall") != 0 &&
      strcmp (fp32_sum, "widen") != 0)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "MIXPREC_NCCL_FP32_SUM=%s: must be \"alltoall\" or \"widen\"", fp32_sum);

  comm = calloc (1, sizeof *comm);
  if (comm == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                      "no memory for a communicator");
  comm->fp32_sum_widen = fp32_sum != NULL && strcmp (fp32_sum, "widen") == 0;
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
        status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_TIMEOUT,
                            "ncclCommInitRankConfig on rank %u of %u did not finish within "
                            "%u ms: a peer may have died or hung", comm->rank,
                            comm->world_size, comm->timeout_ms);
      else
        status = _mixprec_plugin_fail (errbuf, errbuf_len, nccl_status (res),
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
      status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
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
            status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                                "ncclCommDestroy on rank %u failed: %s", comm->rank,
                                ncclGetErrorString (res));
        }
      else
        {
          if (res == ncclInProgress)
            status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_TIMEOUT,
                                "ncclCommFinalize on rank %u did not finish within %u ms: a "
                                "peer may have died or hung", comm->rank, comm->timeout_ms);
          else
            status = _mixprec_plugin_fail (errbuf, errbuf_len, nccl_status (res),
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
    status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                        "selecting the caller's device %d again failed: %s", saved,
                        cudaGetErrorString (err));
  return status;
}

static const MixprecCommV2 nccl_comm = {
  .base = {
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
  },
  .all_to_all = nccl_all_to_all,
  .all_to_all_v = nccl_all_to_all_v,
};

/* Revision 2 (the all-to-all) where the library takes it, else the
 * revision 1 part, as the ABI asks a plugin to check. */
static int
nccl_register (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  if (host->struct_size >= offsetof (MixprecPluginHostV1, register_comm_v2) +
                          sizeof host->register_comm_v2 &&
      host->register_comm_v2 != NULL)
    return host->register_comm_v2 (host, &nccl_comm, errbuf, errbuf_len);
  return host->register_comm (host, &nccl_comm.base, errbuf, errbuf_len);
}

MIXPREC_PLUGIN_DEFINE (comm_nccl, "comm-nccl", "collectives between CUDA devices over NCCL", nccl_register,
                       PACKAGE_VERSION, "LGPL-2.1-or-later", "libmixprec")
