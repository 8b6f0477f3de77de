/* comm-ucx.c — the plugin "comm-ucx": the communicator "ucx" for host
 * memory, over UCX's tag-matching API. Every rank opens one UCP worker,
 * swaps worker addresses through the library's bootstrap and keeps an
 * endpoint to every other rank.
 *
 * When every rank runs on this host, all_reduce, reduce_scatter and
 * all_gather go through a shared-memory segment instead (ucx-shm.c).
 *
 * Progress happens on the caller's thread, inside the collectives, test()
 * and wait(); a started collective whose request is never tested advances
 * only while the rank runs other collectives of the communicator.
 *
 * Settings (environment, read at init):
 *   MIXPREC_UCX_CHUNK_BYTES  pipeline chunk of the collectives (default
 *                            256 KiB; 4 KiB to 64 MiB)
 *   MIXPREC_UCX_WINDOW       reduce-scatter chunks received at once per
 *                            peer (default 4; 1 to 64)
 *   MIXPREC_UCX_SPIN_US      how long a waiting rank polls UCX before it
 *                            starts yielding its core (default 0; 0 to
 *                            1000000)
 *   MIXPREC_UCX_YIELD_US     how long it then polls, yielding its core
 *                            between polls, before it arms the UCX worker
 *                            and blocks on its event file descriptor
 *                            (default 1000; 0 to 1000000). See
 *                            mixprec-run(1).
 *   MIXPREC_UCX_SHM          "auto" (default), "0" or "1": the
 *                            same-host path of ucx-shm.c; with
 *                            MIXPREC_UCX_SHM_CHUNK_BYTES (default 1 MiB)
 *                            and MIXPREC_UCX_SHM_SPIN_US (default 50).
 *   MIXPREC_UCX_ERROR_MODE   "none" (default) or "peer": UCX's
 *                            UCP_ERR_HANDLING_MODE for the endpoints.
 *                            UCX 1.13 gives up its shared-memory
 *                            transports under "peer" and falls back to
 *                            TCP; the plugin detects dead peers on the
 *                            same host from the process table and silent
 *                            ones by the timeout in either mode.
 *   UCX_*                    UCX's own (UCX_TLS, UCX_NET_DEVICES, ...).
 *                            When every rank runs on one host and
 *                            UCX_RNDV_THRESH is unset, the plugin sets it
 *                            to "inf" for its context: copying through
 *                            shared memory measured faster than CMA's
 *                            single copy (see ucx-transport.c). When
 *                            they also share one network namespace and
 *                            neither UCX_NET_DEVICES nor UCX_TLS is set,
 *                            it gives UCX the loopback device only, so
 *                            that no UCX listener is on an address of
 *                            the network.
 *
 * Whatever other ranks send through the bootstrap is checked by
 * ucx-peer.c before it is used or printed.
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mixprec-plugin-fail-private.h"
#include "mixprec-comm-reduce-private.h"
#include "ucx-comm.h"

#define UCX_DTYPE_MASK ((1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | \
                        (1u << MIXPREC_PLUGIN_DTYPE_FLOAT16) | \
                        (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16))

#define DEFAULT_CHUNK_BYTES ((size_t) 256 << 10)
#define DEFAULT_WINDOW 4
/* Reductions receiving at once: two keep the links busy while one folds
 * its last chunks. */
#define DEFAULT_REDUCTIONS 2
#define DEFAULT_SPIN_US 0
#define DEFAULT_YIELD_US 1000
/* The longest a waiting rank blocks before it looks at the stall clock,
 * its peers' processes and the abort flag again (abort() also wakes it). */
#define WAIT_SLICE_NS INT64_C(100000000)

/* The same, while both a shared-memory barrier and UCX transfers are
 * waited for: a barrier's futex does not see UCX's events. */
#define SHARED_WAIT_SLICE_NS INT64_C(100000)

/* Time spent away from the communicator (the caller computing between two
 * calls) counts at most this much towards a stall: a rank that computes
 * for a minute does not time out its own pending collective. */
#define MAX_CREDITED_GAP_NS INT64_C(100000000)

int
ucx_env_size (const char *name,
              size_t      fallback,
              size_t      min,
              size_t      max,
              size_t     *out,
              char       *errbuf,
              size_t      errbuf_len)
{
  const char *value = getenv (name);
  char *end = NULL;
  unsigned long long v;

  *out = fallback;
  if (value == NULL || value[0] == '\0')
    return MIXPREC_PLUGIN_OK;
  errno = 0;
  v = strtoull (value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < min || v > max)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "%s=%s: must be an integer from %zu to %zu", name, value, min, max);
  *out = (size_t) v;
  return MIXPREC_PLUGIN_OK;
}

/* ------------------------------------------------------------ progress */

/* Whether any active operation waits for UCX transfers. */
static int
transfers_active (UcxComm *comm)
{
  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    if (!op->finished && !op->shm)
      return 1;
  return 0;
}

/* A rank with nothing to do polls UCX for spin_ns, then for yield_ns
 * more with sched_yield() between polls, then blocks on the UCX worker's
 * event file descriptor until a message or completion arrives.
 *
 * On a quiet host a yield returns at once, so the yield phase is a spin:
 * the next chunk of a collective, microseconds away, is taken without a
 * wake-up. On a host whose cores are busy with other processes, a yield
 * hands the core over (to the peer this rank waits for, or to the work
 * that delays it) yet keeps the rank runnable, so it does not pay a
 * wake-up's scheduling delay per message; a pure spin instead holds the
 * core for its whole slice. Past the yield phase the wait is a long one
 * (a peer computing), and blocking frees the core entirely. */
static void
idle (UcxComm *comm,
      int64_t  idle_since,
      int64_t  now)
{
  if (ucx_shm_waiting (comm))
    {
      /* Nothing but the shared-memory barrier to wait for: sleep on it.
       * With UCX transfers in flight as well, look at both in turn. */
      if (!transfers_active (comm))
        ucx_shm_wait (comm, idle_since + ucx_shm_spin_ns (comm), WAIT_SLICE_NS);
      else if (now - idle_since < comm->spin_ns + comm->yield_ns)
        sched_yield ();
      else
        ucx_shm_wait (comm, 0, SHARED_WAIT_SLICE_NS);
      return;
    }
  if (now - idle_since < comm->spin_ns)
    return;
  if (now - idle_since < comm->spin_ns + comm->yield_ns)
    {
      sched_yield ();
      return;
    }
  ucx_worker_wait (comm, WAIT_SLICE_NS);
}

/* Where the stall clock of a new progress loop starts: at the end of the
 * previous loop, but at most MAX_CREDITED_GAP_NS back. */
static int64_t
poll_start (UcxComm *comm)
{
  int64_t now = ucx_now_ns ();

  if (comm->last_poll_ns == 0)
    return now;
  if (now - comm->last_poll_ns > MAX_CREDITED_GAP_NS)
    return now - MAX_CREDITED_GAP_NS;
  return comm->last_poll_ns;
}

/* One round: abort check, UCX progress, operations, stalls. */
static int
poll_once (UcxComm *comm,
           int64_t *t_prev)
{
  int busy;
  int64_t now;

  if (__atomic_load_n (&comm->aborted, __ATOMIC_ACQUIRE) && !comm->broken)
    ucx_comm_break (comm, MIXPREC_PLUGIN_ERR_RUNTIME, "the communicator was aborted");
  busy = ucx_comm_progress (comm);
  now = ucx_now_ns ();
  ucx_comm_check_stalls (comm, now - *t_prev);
  *t_prev = now;
  comm->last_poll_ns = now;
  return busy;
}

static void
run_until_finished (UcxComm *comm,
                    UcxOp   *op)
{
  int64_t t_prev = poll_start (comm);
  int64_t idle_since = ucx_now_ns ();

  while (!op->finished)
    {
      if (poll_once (comm, &t_prev))
        idle_since = t_prev;
      else if (!op->finished)
        idle (comm, idle_since, t_prev);
    }
}

static void
unlink_op (UcxOp *op)
{
  UcxComm *comm = op->comm;

  if (op->prev != NULL)
    op->prev->next = op->next;
  else if (comm->active == op)
    comm->active = op->next;
  if (op->next != NULL)
    op->next->prev = op->prev;
  op->prev = op->next = NULL;
}

/* Releases a finished operation and hands back its outcome. */
static int
finish_op (UcxOp  *op,
           char   *errbuf,
           size_t  errbuf_len)
{
  int status = op->status;

  /* Drain completions that arrived after the operation finished. */
  while (op->done_head != NULL)
    {
      UcxXfer *x = op->done_head;

      op->done_head = x->next_done;
      ucx_xfer_release (x);
    }
  if (status != MIXPREC_PLUGIN_OK)
    _mixprec_plugin_fail (errbuf, errbuf_len, status, "%s", op->message);
  unlink_op (op);
  ucx_op_free (op);
  return status;
}

/* ------------------------------------------------------------ collectives */

static int
check_dtype (MixprecPluginDType  dtype,
             char               *errbuf,
             size_t              errbuf_len)
{
  if ((unsigned) dtype >= 32 || !(UCX_DTYPE_MASK & (1u << dtype)))
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                      "the ucx communicator does not handle dtype %d", (int) dtype);
  return MIXPREC_PLUGIN_OK;
}

/* Starts an operation; blocks until it finishes when @request is NULL. */
static int
launch (UcxComm               *comm,
        UcxOpKind              kind,
        const void            *send,
        void                  *recv,
        size_t                 count,
        MixprecPluginDType     dtype,
        MixprecPluginReduceOp  reduce,
        unsigned               flags,
        unsigned               root,
        const UcxRuns         *runs,
        void                 **request,
        char                  *errbuf,
        size_t                 errbuf_len)
{
  UcxOp *op;
  int status = check_dtype (dtype, errbuf, errbuf_len);

  if (status != MIXPREC_PLUGIN_OK)
    return status;
  if (__atomic_load_n (&comm->aborted, __ATOMIC_ACQUIRE) && !comm->broken)
    ucx_comm_break (comm, MIXPREC_PLUGIN_ERR_RUNTIME, "the communicator was aborted");
  if (comm->broken)
    return _mixprec_plugin_fail (errbuf, errbuf_len, comm->broken,
                      "the communicator is broken by an earlier failure: %s",
                      comm->broken_message);
  if (root >= comm->world_size)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "root %u is not a rank of a world of %u", root, comm->world_size);

  op = ucx_op_new (comm, kind, send, recv, count, dtype, reduce, flags, root, runs);
  if (op == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                      "no memory to start a %s of %zu elements",
                      kind == UCX_OP_BARRIER ? "barrier" : "collective", count);
  if (ucx_op_start (op) != MIXPREC_PLUGIN_OK)
    {
      ucx_op_free (op);
      return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                        "no memory for the receive window of a %s of %zu elements",
                        kind == UCX_OP_ALL_REDUCE ? "all_reduce" : "reduce_scatter", count);
    }
  if (request != NULL)
    {
      *request = op;
      return MIXPREC_PLUGIN_OK;
    }
  run_until_finished (comm, op);
  return finish_op (op, errbuf, errbuf_len);
}

static int
ucx_all_reduce (void                 *comm,
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
  return launch (comm, UCX_OP_ALL_REDUCE, send, recv, count, dtype, op, flags, 0,
                 NULL, request, errbuf, errbuf_len);
}

static int
ucx_reduce_scatter (void                 *comm,
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
  return launch (comm, UCX_OP_REDUCE_SCATTER, send, recv, count, dtype, op, flags, 0,
                 NULL, request, errbuf, errbuf_len);
}

static int
ucx_all_gather (void              *comm,
                const void        *send,
                void              *recv,
                size_t             count,
                MixprecPluginDType dtype,
                void             **request,
                char              *errbuf,
                size_t             errbuf_len)
{
  return launch (comm, UCX_OP_ALL_GATHER, send, recv, count, dtype,
                 MIXPREC_PLUGIN_REDUCE_SUM, 0, 0, NULL, request, errbuf, errbuf_len);
}

static int
ucx_broadcast (void              *comm,
               void              *buf,
               size_t             count,
               MixprecPluginDType dtype,
               unsigned           root,
               void             **request,
               char              *errbuf,
               size_t             errbuf_len)
{
  return launch (comm, UCX_OP_BROADCAST, buf, buf, count, dtype,
                 MIXPREC_PLUGIN_REDUCE_SUM, 0, root, NULL, request, errbuf, errbuf_len);
}

static int
ucx_barrier (void   *comm,
             void  **request,
             char   *errbuf,
             size_t  errbuf_len)
{
  return launch (comm, UCX_OP_BARRIER, NULL, NULL, 0, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                 MIXPREC_PLUGIN_REDUCE_SUM, 0, 0, NULL, request, errbuf, errbuf_len);
}

static int
ucx_all_to_all (void       *comm,
                const void *send,
                void       *recv,
                size_t      bytes,
                void      **request,
                char       *errbuf,
                size_t      errbuf_len)
{
  return launch (comm, UCX_OP_ALL_TO_ALL, send, recv, bytes, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                 MIXPREC_PLUGIN_REDUCE_SUM, 0, 0, NULL, request, errbuf, errbuf_len);
}

static int
ucx_all_to_all_v (void         *comm,
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
  UcxRuns runs = { send_bytes, send_offsets, recv_bytes, recv_offsets };

  if (send_bytes == NULL || send_offsets == NULL || recv_bytes == NULL || recv_offsets == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                 "all_to_all_v needs its four arrays of sizes and offsets");
  return launch (comm, UCX_OP_ALL_TO_ALL_V, send, recv, 0, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                 MIXPREC_PLUGIN_REDUCE_SUM, 0, 0, &runs, request, errbuf, errbuf_len);
}

static int
ucx_test (void   *comm,
          void   *request,
          int    *done,
          char   *errbuf,
          size_t  errbuf_len)
{
  UcxOp *op = request;

  if (!op->finished)
    {
      int64_t t_prev = poll_start (comm);

      poll_once (comm, &t_prev);
    }
  *done = op->finished;
  return MIXPREC_PLUGIN_OK;
}

static int
ucx_wait (void   *comm,
          void   *request,
          char   *errbuf,
          size_t  errbuf_len)
{
  UcxOp *op = request;

  run_until_finished (comm, op);
  return finish_op (op, errbuf, errbuf_len);
}

static void
ucx_abort (void *handle)
{
  UcxComm *comm = handle;

  __atomic_store_n (&comm->aborted, 1, __ATOMIC_RELEASE);
  /* Wakes a rank blocked in ucx_worker_wait(); safe from any thread. */
  if (comm->worker != NULL && comm->efd >= 0)
    ucp_worker_signal (comm->worker);
  ucx_shm_wake (comm);
}

/* ------------------------------------------------------------ life cycle */

static void
comm_free (UcxComm *comm)
{
  ucx_comm_close (comm);
  free (comm->eps);
  free (comm->peers);
  free (comm->peer_status);
  free (comm);
}

static int
env_is_set (const char *name)
{
  const char *value = getenv (name);

  return value != NULL && value[0] != '\0';
}

unsigned
ucx_cpus_available (void)
{
  cpu_set_t set;

  if (sched_getaffinity (0, sizeof set, &set) != 0)
    return 1;
  return (unsigned) CPU_COUNT (&set);
}

/* Ranks on this host, this one included. When they outnumber the CPUs, a
 * waiting rank that spins holds the core a peer needs to send what it
 * waits for, so it blocks at once instead. */
static unsigned
ranks_on_this_host (const UcxComm *comm)
{
  unsigned n = 0;

  for (unsigned p = 0; p < comm->world_size; p++)
    n += strcmp (comm->peers[p].host, comm->peers[comm->rank].host) == 0;
  return n;
}

static int
ucx_init (const MixprecCommInitV1 *args,
          void                   **out,
          char                    *errbuf,
          size_t                   errbuf_len)
{
  const MixprecBootstrapV1 *bootstrap;
  const char *mode = getenv ("MIXPREC_UCX_ERROR_MODE");
  size_t window, reductions, spin_us, yield_us;
  UcxComm *comm;
  int status;

  if (args == NULL || args->struct_size < offsetof (MixprecCommInitV1, device_stream) ||
      args->bootstrap == NULL || args->bootstrap->all_gather == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "init() needs its arguments and a bootstrap");
  bootstrap = args->bootstrap;
  if (bootstrap->world_size == 0 || bootstrap->world_size > UCX_MAX_WORLD ||
      bootstrap->rank >= bootstrap->world_size)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                      "rank %u of a world of %u: the ucx communicator serves 1 to %u ranks",
                      bootstrap->rank, bootstrap->world_size, UCX_MAX_WORLD);
  if (mode != NULL && mode[0] != '\0' && strcmp (mode, "none") != 0 && strcmp (mode, "peer") != 0)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                      "MIXPREC_UCX_ERROR_MODE=%s: must be \"none\" or \"peer\"", mode);

  comm = calloc (1, sizeof *comm);
  if (comm == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                      "no memory for a communicator");
  comm->efd = -1;
  comm->rank = bootstrap->rank;
  comm->world_size = bootstrap->world_size;
  comm->timeout_ns = (int64_t) (args->timeout_ms > 0 ? args->timeout_ms : 300000) * 1000000;
  comm->error_mode_peer = mode != NULL && strcmp (mode, "peer") == 0;
  status = ucx_env_size ("MIXPREC_UCX_CHUNK_BYTES", DEFAULT_CHUNK_BYTES, 4096, (size_t) 64 << 20,
                     &comm->chunk_bytes, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = ucx_env_size ("MIXPREC_UCX_WINDOW", DEFAULT_WINDOW, 1, 64, &window, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = ucx_env_size ("MIXPREC_UCX_REDUCTIONS", DEFAULT_REDUCTIONS, 1, 64, &reductions,
                       errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = ucx_env_size ("MIXPREC_UCX_SPIN_US", DEFAULT_SPIN_US, 0, 1000000, &spin_us,
                       errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = ucx_env_size ("MIXPREC_UCX_YIELD_US", DEFAULT_YIELD_US, 0, 1000000, &yield_us,
                       errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    {
      free (comm);
      return status;
    }
  comm->window = (unsigned) window;
  comm->max_reducing = (unsigned) reductions;
  comm->spin_ns = (int64_t) spin_us * 1000;
  comm->yield_ns = (int64_t) yield_us * 1000;
  comm->scratch_bytes = comm->window * (comm->world_size > 1 ? comm->world_size - 1 : 1) *
                        comm->chunk_bytes;
  comm->eps = calloc (comm->world_size, sizeof *comm->eps);
  comm->peers = calloc (comm->world_size, sizeof *comm->peers);
  comm->peer_status = calloc (comm->world_size, sizeof *comm->peer_status);
  if (comm->eps == NULL || comm->peers == NULL || comm->peer_status == NULL)
    {
      comm_free (comm);
      return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                        "no memory for %u peers", bootstrap->world_size);
    }
  for (unsigned p = 0; p < comm->world_size; p++)
    comm->peer_status[p] = UCS_OK;

  status = ucx_comm_open (comm, bootstrap, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK && !env_is_set ("MIXPREC_UCX_SPIN_US") &&
      ranks_on_this_host (comm) > ucx_cpus_available ())
    comm->spin_ns = 0;
  /* A first barrier proves that every endpoint carries messages. */
  if (status == MIXPREC_PLUGIN_OK && comm->world_size > 1)
    {
      char inner[1024] = "", hint[512] = "";

      status = ucx_barrier (comm, NULL, inner, sizeof inner);
      /* The timeout and connection messages carry the hint already. */
      if (status != MIXPREC_PLUGIN_OK && strstr (inner, "UCX_NET_DEVICES") == NULL)
        ucx_hint_for_world (comm->peers, comm->world_size, comm->rank, hint, sizeof hint);
      if (status != MIXPREC_PLUGIN_OK)
        _mixprec_plugin_fail (errbuf, errbuf_len, status, "the first exchange over UCX failed: %s%s%s",
                              inner, hint[0] != '\0' ? "; " : "", hint);
    }
  if (status != MIXPREC_PLUGIN_OK)
    {
      comm_free (comm);
      return status;
    }
  /* Spinning off when the ranks outnumber the CPUs is a choice a user
   * tuning MIXPREC_UCX_* wants to see. */
  MIXPREC_PLUGIN_LOG (MIXPREC_PLUGIN_LOG_DEBUG,
                      "rank %u of %u: %zu-byte chunks, window %u, spin %lld ns, yield %lld ns",
                      comm->rank, comm->world_size, comm->chunk_bytes, (unsigned) comm->window,
                      (long long) comm->spin_ns, (long long) comm->yield_ns);
  *out = comm;
  return MIXPREC_PLUGIN_OK;
}

static int
ucx_finalize (void   *handle,
              char   *errbuf,
              size_t  errbuf_len)
{
  UcxComm *comm = handle;

  /* Requests nobody waited for: their buffers may be gone, so stop them. */
  if (comm->active != NULL)
    ucx_comm_break (comm, MIXPREC_PLUGIN_ERR_RUNTIME,
                    "the communicator was finalized with collectives still running");
  while (comm->active != NULL)
    finish_op (comm->active, NULL, 0);
  /* Leave together, so that no rank closes its endpoints while a peer
   * still finishes a collective that needs them. */
  if (!comm->broken && comm->world_size > 1)
    {
      char inner[512] = "";

      if (ucx_barrier (comm, NULL, inner, sizeof inner) != MIXPREC_PLUGIN_OK)
        comm->broken = MIXPREC_PLUGIN_ERR_RUNTIME;
    }
  comm_free (comm);
  return MIXPREC_PLUGIN_OK;
}

static const MixprecCommV2 ucx_comm = {
  .base = {
    .name = "ucx",
    .device = "cpu",
    .rank = 100,
    .description = "collectives in host memory over UCX (shared memory, TCP, InfiniBand)",
    .dtype_mask = UCX_DTYPE_MASK,
    .init = ucx_init,
    .all_reduce = ucx_all_reduce,
    .reduce_scatter = ucx_reduce_scatter,
    .all_gather = ucx_all_gather,
    .broadcast = ucx_broadcast,
    .barrier = ucx_barrier,
    .test = ucx_test,
    .wait = ucx_wait,
    .abort = ucx_abort,
    .finalize = ucx_finalize,
  },
  .all_to_all = ucx_all_to_all,
  .all_to_all_v = ucx_all_to_all_v,
};

/* Revision 2 (the all-to-all) where the library takes it, else the
 * revision 1 part, as the ABI asks a plugin to check. */
static int
ucx_register (MixprecPluginHostV1 *host,
              char                *errbuf,
              size_t               errbuf_len)
{
  if (host->struct_size >= offsetof (MixprecPluginHostV1, register_comm_v2) +
                          sizeof host->register_comm_v2 &&
      host->register_comm_v2 != NULL)
    return host->register_comm_v2 (host, &ucx_comm, errbuf, errbuf_len);
  return host->register_comm (host, &ucx_comm.base, errbuf, errbuf_len);
}

MIXPREC_PLUGIN_DEFINE (comm_ucx, "comm-ucx", "collectives between processes over UCX", ucx_register,
                       PACKAGE_VERSION, "LGPL-2.1-or-later", "libmixprec")
