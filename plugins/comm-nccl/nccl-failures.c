/* nccl-failures.c — how comm-nccl reports and survives failures: CUDA and
 * NCCL results as the ABI's statuses, sentences in the caller's errbuf,
 * and the breakdown path that aborts the NCCL communicator (the first
 * failure wins, and every later call reports it). With them, the device
 * switching and the clock that this path and the waits share. */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nccl-comm.h"

/* A waiting rank polls this many times before it starts to sleep between
 * polls: most collectives finish within microseconds of the first poll. */
#define SPIN_POLLS 2000
#define POLL_SLEEP_NS 50000

const char * const op_names[] = {
  "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "all_to_all",
  "all_to_all_v",
};

int
cuda_status (cudaError_t err)
{
  return err == cudaErrorMemoryAllocation ? MIXPREC_PLUGIN_ERR_NO_MEMORY
                                          : MIXPREC_PLUGIN_ERR_RUNTIME;
}

int
nccl_status (ncclResult_t res)
{
  return res == ncclRemoteError ? MIXPREC_PLUGIN_ERR_PEER_FAILED : MIXPREC_PLUGIN_ERR_RUNTIME;
}

/* NCCL's last error text, when it has one. */
const char *
nccl_detail (ncclComm_t comm)
{
  const char *text = ncclGetLastError (comm);

  return text != NULL && text[0] != '\0' ? text : "no further detail";
}

int64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void
pause_poll (unsigned polls)
{
  if (polls >= SPIN_POLLS)
    nanosleep (&(struct timespec) { 0, POLL_SLEEP_NS }, NULL);
}


/* ------------------------------------------------------------ device */

/* Makes the communicator's device current on this thread (abort(),
 * test() and wait() may come from threads that never selected it);
 * *saved receives the device to go back to. */
cudaError_t
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

cudaError_t
leave_device (const NcclComm *comm,
              int             saved)
{
  return saved != comm->device ? cudaSetDevice (saved) : cudaSuccess;
}

/* ------------------------------------------------------------ failures */

/* With comm->lock held: marks the communicator broken (the first failure
 * wins) and aborts the NCCL communicator, so that the kernels of pending
 * collectives return on this rank and peers see it as failed. */
void
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

int
broken_error (const NcclComm *comm,
              char           *errbuf,
              size_t          errbuf_len)
{
  return _mixprec_plugin_fail (errbuf, errbuf_len, comm->broken,
                    "the communicator is broken by an earlier failure: %s",
                    comm->broken_message);
}

/* With comm->lock held: a CUDA call of an operation failed. Peers have
 * queued (or will queue) their side of it, so the communicator cannot go
 * on: break it. */
int
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
  return _mixprec_plugin_fail (errbuf, errbuf_len, comm->broken, "%s", comm->broken_message);
}

int
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
  return _mixprec_plugin_fail (errbuf, errbuf_len, comm->broken, "%s", comm->broken_message);
}

/* With comm->lock held, right after an NCCL call on the communicator:
 * a non-blocking communicator may still be queuing the call's work
 * (ncclInProgress); its state must settle before the stream may be used
 * again. Polls without holding the lock, so abort() can step in. */
int
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
          return _mixprec_plugin_fail (errbuf, errbuf_len, comm->broken, "%s", comm->broken_message);
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
