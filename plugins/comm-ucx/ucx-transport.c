/* ucx-transport.c — the UCX side of comm-ucx: context, worker and one
 * endpoint per peer (addresses swapped through the library's bootstrap),
 * tagged sends and receives that report to their operation, and the
 * breakdown path that leaves no transfer in UCX's hands after a failure. */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ucx-comm.h"
#include "ucx-peer.h"

/* How long the breakdown path waits for cancelled and force-closed
 * transfers to report back before it stops waiting for them: they
 * usually do at once, and a failure must not take long. */
#define BREAK_DRAIN_NS INT64_C(200000000)
/* While closing or draining, a rank blocks at most this long at a time:
 * a cancelled or force-closed transfer completes locally, which need not
 * signal the worker's event file descriptor. */
#define DRAIN_WAIT_NS INT64_C(1000000)

int64_t
ucx_now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * INT64_C(1000000000) + ts.tv_nsec;
}

uint64_t
ucx_tag (uint32_t seq,
         UcxPhase phase,
         unsigned sender,
         size_t   chunk)
{
  return ((uint64_t) (seq & ((1u << UCX_TAG_SEQ_BITS) - 1)) <<
          (UCX_TAG_PHASE_BITS + UCX_TAG_RANK_BITS + UCX_TAG_CHUNK_BITS)) |
         ((uint64_t) phase << (UCX_TAG_RANK_BITS + UCX_TAG_CHUNK_BITS)) |
         ((uint64_t) sender << UCX_TAG_CHUNK_BITS) |
         (uint64_t) chunk;
}

/* ------------------------------------------------------------ peers */

void
ucx_namespace_identity (const char * const *spaces,
                        size_t              n_spaces,
                        char               *out,
                        size_t              len)
{
  char boot[64] = "";
  FILE *f = fopen ("/proc/sys/kernel/random/boot_id", "r");
  size_t n;

  if (f != NULL)
    {
      if (fgets (boot, sizeof boot, f) == NULL)
        boot[0] = '\0';
      fclose (f);
      boot[strcspn (boot, "\n")] = '\0';
    }
  n = (size_t) snprintf (out, len, "%s", boot);
  for (size_t i = 0; i < n_spaces && n < len; i++)
    {
      char path[32];
      struct stat st;

      snprintf (path, sizeof path, "/proc/self/ns/%s", spaces[i]);
      if (boot[0] == '\0' || stat (path, &st) != 0)
        {
          /* Unknown: an identity no other process shares. */
          snprintf (out, len, "unknown:%ld", (long) getpid ());
          return;
        }
      n += (size_t) snprintf (out + n, len - n, ":%llu", (unsigned long long) st.st_ino);
    }
}

int
ucx_peer_has_exited (UcxComm  *comm,
                     unsigned  peer)
{
  char path[64], buf[512];
  FILE *f;
  size_t n;
  const char *paren;

  if (strcmp (comm->peers[peer].host, comm->peers[comm->rank].host) != 0)
    return 0;
  snprintf (path, sizeof path, "/proc/%lld/stat", (long long) comm->peers[peer].pid);
  f = fopen (path, "r");
  if (f == NULL)
    return errno == ENOENT;
  n = fread (buf, 1, sizeof buf - 1, f);
  fclose (f);
  buf[n] = '\0';
  /* "pid (comm) S ...": a zombie (Z) or dead (X) process has exited, even
   * though its parent has not reaped it yet. */
  paren = strrchr (buf, ')');
  return paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static void
ep_error (void        *arg,
          ucp_ep_h     ep,
          ucs_status_t status)
{
  UcxComm *comm = arg;

  for (unsigned p = 0; p < comm->world_size; p++)
    if (comm->eps[p] == ep && comm->peer_status[p] == UCS_OK)
      comm->peer_status[p] = status != UCS_OK ? status : UCS_ERR_ENDPOINT_TIMEOUT;
}

/* ------------------------------------------------------------ setup */

static int
fail (char       *errbuf,
      size_t      errbuf_len,
      int         status,
      const char *format,
      ...) __attribute__ ((format (printf, 4, 5)));

static int
fail (char       *errbuf,
      size_t      errbuf_len,
      int         status,
      const char *format,
      ...)
{
  va_list args;

  va_start (args, format);
  vsnprintf (errbuf, errbuf_len, format, args);
  va_end (args);
  return status;
}

int
ucx_exchange (const MixprecBootstrapV1 *bootstrap,
              const void               *in,
              size_t                    len,
              void                     *out,
              const char               *what,
              char                     *errbuf,
              size_t                    errbuf_len)
{
  char inner[512] = "";
  int status = bootstrap->all_gather (bootstrap->ctx, in, len, out, inner, sizeof inner);

  inner[sizeof inner - 1] = '\0';
  if (status != MIXPREC_PLUGIN_OK)
    return fail (errbuf, errbuf_len, status, "exchanging %s through the bootstrap failed: %s",
                 what, inner[0] != '\0' ? inner : "no reason given");
  return MIXPREC_PLUGIN_OK;
}

static int
create_endpoints (UcxComm       *comm,
                  const uint8_t *addresses,
                  size_t         stride,
                  char          *errbuf,
                  size_t         errbuf_len)
{
  for (unsigned p = 0; p < comm->world_size; p++)
    {
      ucp_ep_params_t params;
      ucs_status_t status;

      if (p == comm->rank)
        continue;
      memset (&params, 0, sizeof params);
      params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                          UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                          UCP_EP_PARAM_FIELD_ERR_HANDLER;
      params.address = (const ucp_address_t *) (addresses + p * stride);
      params.err_mode = comm->error_mode_peer ? UCP_ERR_HANDLING_MODE_PEER
                                              : UCP_ERR_HANDLING_MODE_NONE;
      params.err_handler.cb = ep_error;
      params.err_handler.arg = comm;
      status = ucp_ep_create (comm->worker, &params, &comm->eps[p]);
      if (status != UCS_OK)
        {
          char hint[512] = "";

          comm->eps[p] = NULL;
          ucx_hint_for_peer (comm->peers, comm->rank, p, hint, sizeof hint);
          return fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                       "UCX could not create an endpoint to rank %u: %s%s%s",
                       p, ucs_status_string (status), hint[0] != '\0' ? "; " : "", hint);
        }
    }
  return MIXPREC_PLUGIN_OK;
}

/* Whether every rank runs on this host. */
static int
all_local (const UcxComm *comm)
{
  for (unsigned p = 0; p < comm->world_size; p++)
    if (strcmp (comm->peers[p].host, comm->peers[comm->rank].host) != 0)
      return 0;
  return 1;
}

/* Every identity record is a peer's word: its strings are read with
 * strcmp and printed in messages, its pid names a process in /proc. */
static int
check_peer_infos (UcxComm *comm,
                  char    *errbuf,
                  size_t   errbuf_len)
{
  for (unsigned p = 0; p < comm->world_size; p++)
    if (ucx_peer_parse_info (&comm->peers[p], sizeof comm->peers[p], p, &comm->peers[p],
                             errbuf, errbuf_len) != 0)
      return MIXPREC_PLUGIN_ERR_PEER_FAILED;
  return MIXPREC_PLUGIN_OK;
}

/* When every rank shares this host's boot and network namespace, loopback
 * reaches all of them and nothing needs a listener elsewhere: unless the
 * user chose the devices or transports (UCX_NET_DEVICES, UCX_TLS), UCX
 * gets the loopback device only, so that its TCP transport listens on
 * 127.0.0.1 instead of on every address of the host, where anyone on the
 * network could connect. Shared-memory transports are not network
 * devices and stay. Ranks in other network namespaces (containers, the
 * multi-host test) keep UCX's own choice. */
static void
confine_to_loopback (const UcxComm *comm,
                     ucp_config_t  *config)
{
  char device[16];

  if (getenv ("UCX_NET_DEVICES") != NULL || getenv ("UCX_TLS") != NULL)
    return;
  for (unsigned p = 0; p < comm->world_size; p++)
    if (strcmp (comm->peers[p].netns, comm->peers[comm->rank].netns) != 0)
      return;
  if (strncmp (comm->peers[comm->rank].netns, "unknown:", 8) == 0 ||
      !ucx_hint_loopback_device (device, sizeof device))
    return;
  ucp_config_modify (config, "NET_DEVICES", device);
}

int
ucx_comm_open (UcxComm                  *comm,
               const MixprecBootstrapV1 *bootstrap,
               char                     *errbuf,
               size_t                    errbuf_len)
{
  ucp_config_t *config = NULL;
  ucp_params_t params;
  ucp_worker_params_t worker_params;
  ucp_address_t *address = NULL;
  size_t address_length = 0, stride = 0;
  uint64_t *lengths = NULL;
  uint64_t mine_length;
  UcxPeerInfo mine;
  uint8_t *padded = NULL, *addresses = NULL;
  ucs_status_t status;
  int result;

  /* Who runs where first: it decides the protocols below. */
  memset (&mine, 0, sizeof mine);
  mine.pid = (int64_t) getpid ();
  /* Processes with the same boot id and pid namespace see each other's
   * pids, so a dead local peer can be told from a slow one. */
  ucx_namespace_identity ((const char * const[]) { "pid" }, 1, mine.host, sizeof mine.host);
  /* Processes with the same boot id and network namespace reach each
   * other over loopback. */
  ucx_namespace_identity ((const char * const[]) { "net" }, 1, mine.netns, sizeof mine.netns);
  ucx_hint_scan_devices (&mine);
  result = ucx_exchange (bootstrap, &mine, sizeof mine, comm->peers, "process identities",
                         errbuf, errbuf_len);
  if (result == MIXPREC_PLUGIN_OK)
    result = check_peer_infos (comm, errbuf, errbuf_len);
  if (result == MIXPREC_PLUGIN_OK)
    result = ucx_shm_open (comm, bootstrap, errbuf, errbuf_len);
  if (result != MIXPREC_PLUGIN_OK)
    return result;

  status = ucp_config_read (NULL, NULL, &config);
  if (status != UCS_OK)
    return fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                 "UCX could not read its configuration (UCX_* environment): %s",
                 ucs_status_string (status));
  /* Within one host, copying through UCX's shared-memory FIFOs (eager)
   * beats its single-copy rendezvous over CMA (process_vm_readv), whose
   * page pinning costs more than a second copy on virtual machines: every
   * message of a collective is at most a chunk, so all go eager. The
   * user's UCX_RNDV_THRESH wins. */
  if (all_local (comm) && getenv ("UCX_RNDV_THRESH") == NULL)
    ucp_config_modify (config, "RNDV_THRESH", "inf");
  confine_to_loopback (comm, config);
  memset (&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                      UCP_PARAM_FIELD_ESTIMATED_NUM_PPN;
  /* WAKEUP: a waiting rank blocks on the worker's event file descriptor
   * (see ucx_worker_wait) instead of polling a core that a peer or other
   * work may need. */
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.estimated_num_eps = comm->world_size;
  params.estimated_num_ppn = bootstrap->local_world_size > 0 ? bootstrap->local_world_size : 1;
  status = ucp_init (&params, config, &comm->context);
  if (status != UCS_OK)
    {
      /* Transports without events (some InfiniBand setups) may refuse
       * WAKEUP: then the rank polls and sleeps. */
      params.features = UCP_FEATURE_TAG;
      status = ucp_init (&params, config, &comm->context);
    }
  ucp_config_release (config);
  if (status != UCS_OK)
    {
      comm->context = NULL;
      return fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                   "UCX could not start (ucp_init): %s; check the UCX_* environment "
                   "(UCX_TLS, UCX_NET_DEVICES)", ucs_status_string (status));
    }

  memset (&worker_params, 0, sizeof worker_params);
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SINGLE;
  status = ucp_worker_create (comm->context, &worker_params, &comm->worker);
  if (status != UCS_OK)
    {
      comm->worker = NULL;
      return fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                   "UCX could not create a worker: %s", ucs_status_string (status));
    }
  if (params.features & UCP_FEATURE_WAKEUP)
    {
      int fd = -1;

      if (ucp_worker_get_efd (comm->worker, &fd) == UCS_OK)
        comm->efd = fd;
    }
  status = ucp_worker_get_address (comm->worker, &address, &address_length);
  if (status != UCS_OK)
    return fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                 "UCX could not tell its worker address: %s", ucs_status_string (status));

  /* Addresses differ in length; the bootstrap gathers equal lengths, so
   * first the lengths, then the addresses padded to the longest. */
  mine_length = address_length;
  lengths = calloc (comm->world_size, sizeof *lengths);
  if (lengths == NULL)
    result = fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                   "no memory for %u UCX address lengths", comm->world_size);
  else
    result = ucx_exchange (bootstrap, &mine_length, sizeof mine_length, lengths,
                           "UCX address lengths", errbuf, errbuf_len);
  /* A length is a peer's word: bounded before it sizes an allocation of
   * world × length bytes. */
  for (unsigned p = 0; p < comm->world_size && result == MIXPREC_PLUGIN_OK; p++)
    if (ucx_peer_check_address_length (lengths[p], p, errbuf, errbuf_len) != 0)
      result = MIXPREC_PLUGIN_ERR_PEER_FAILED;
  if (result == MIXPREC_PLUGIN_OK)
    {
      for (unsigned p = 0; p < comm->world_size; p++)
        if (lengths[p] > stride)
          stride = lengths[p];
      padded = calloc (1, stride);
      addresses = calloc (comm->world_size, stride);
      if (padded == NULL || addresses == NULL)
        result = fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                       "no memory for %u UCX addresses of %zu bytes", comm->world_size, stride);
    }
  if (result == MIXPREC_PLUGIN_OK)
    {
      memcpy (padded, address, address_length);
      result = ucx_exchange (bootstrap, padded, stride, addresses, "UCX worker addresses",
                             errbuf, errbuf_len);
    }
  /* UCX asserts (aborting the process) on an address of a version it does
   * not know: check the header of every peer's before UCX reads it. */
  for (unsigned p = 0; p < comm->world_size && result == MIXPREC_PLUGIN_OK; p++)
    if (p != comm->rank &&
        ucx_peer_check_address (addresses + p * stride, (size_t) lengths[p], p,
                                errbuf, errbuf_len) != 0)
      result = MIXPREC_PLUGIN_ERR_PEER_FAILED;
  if (result == MIXPREC_PLUGIN_OK)
    result = create_endpoints (comm, addresses, stride, errbuf, errbuf_len);

  ucp_worker_release_address (comm->worker, address);
  free (lengths);
  free (padded);
  free (addresses);
  return result;
}

/* Runs a close request to completion or until the deadline. */
static void
close_endpoint (UcxComm *comm,
                unsigned peer,
                int      force,
                int64_t  deadline)
{
  ucp_request_param_t param;
  ucs_status_ptr_t request;

  if (comm->eps[peer] == NULL)
    return;
  memset (&param, 0, sizeof param);
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  request = ucp_ep_close_nbx (comm->eps[peer], &param);
  comm->eps[peer] = NULL;
  if (request == NULL || UCS_PTR_IS_ERR (request))
    return;
  /* A peer that is gone may never confirm; the request is released
   * either way and UCX finishes the close on its own. */
  while (ucp_request_check_status (request) == UCS_INPROGRESS && ucx_now_ns () < deadline)
    if (ucp_worker_progress (comm->worker) == 0)
      ucx_worker_wait (comm, DRAIN_WAIT_NS);
  ucp_request_free (request);
}

void
ucx_comm_close (UcxComm *comm)
{
  /* A graceful close flushes what is in flight: give it the timeout, at
   * most ten seconds. A forced one only waits for UCX's confirmation. */
  int64_t flush_ns = comm->timeout_ns < INT64_C(10000000000) ? comm->timeout_ns
                                                              : INT64_C(10000000000);

  for (unsigned p = 0; comm->eps != NULL && p < comm->world_size; p++)
    {
      int force = comm->broken || comm->peer_status[p] != UCS_OK;

      close_endpoint (comm, p, force, ucx_now_ns () + (force ? BREAK_DRAIN_NS : flush_ns));
    }
  if (comm->worker != NULL)
    ucp_worker_destroy (comm->worker);
  if (comm->context != NULL)
    ucp_cleanup (comm->context);
  comm->worker = NULL;
  comm->context = NULL;
  comm->efd = -1;
  ucx_shm_close (comm);
  for (unsigned i = 0; i < comm->n_scratch_pool; i++)
    free (comm->scratch_pool[i]);
  free (comm->scratch_pool);
  comm->scratch_pool = NULL;
  comm->n_scratch_pool = 0;
}

/* ------------------------------------------------------------ waiting */

#define BUSY_SPIN_NS INT64_C(10000000)
#define BUSY_SLEEP_NS INT64_C(1000000)

/* UCX's wake-up protocol: once ucp_worker_progress() found nothing, arm
 * the worker and sleep on its event file descriptor; UCS_ERR_BUSY means
 * events arrived meanwhile and the caller must progress again. A sleeping
 * rank leaves its core to the peer (or other work) it waits on, and the
 * kernel wakes it when a message lands, so a host with more busy
 * processes than cores does not starve the collective. Without a file
 * descriptor (a transport without events) it sleeps briefly instead.
 *
 * UCX can also say busy again and again while progress finds nothing:
 * between ranks of one host its shared-memory transports cannot be armed,
 * and with a peer that stopped midway that lasts as long as the peer stays
 * stopped. A healthy transfer finds something within microseconds; so
 * after BUSY_SPIN_NS of such answers the rank sleeps BUSY_SLEEP_NS between
 * polls instead of spinning until the timeout. */
void
ucx_worker_wait (UcxComm *comm,
                 int64_t  timeout_ns)
{
  struct pollfd pfd;
  struct timespec ts;
  ucs_status_t status;

  if (timeout_ns <= 0)
    return;
  /* At most a second: callers loop. */
  if (timeout_ns > INT64_C(1000000000))
    timeout_ns = INT64_C(1000000000);
  if (comm->efd < 0)
    {
      nanosleep (&(struct timespec) { 0, timeout_ns < 50000 ? (long) timeout_ns : 50000 }, NULL);
      return;
    }
  status = ucp_worker_arm (comm->worker);
  if (status == UCS_ERR_BUSY)
    {
      int64_t now = ucx_now_ns ();

      if (comm->busy_since_ns == 0)
        comm->busy_since_ns = now;
      else if (now - comm->busy_since_ns > BUSY_SPIN_NS)
        nanosleep (&(struct timespec) { 0, (long) (timeout_ns < BUSY_SLEEP_NS ? timeout_ns
                                                                              : BUSY_SLEEP_NS) },
                   NULL);
      return;
    }
  comm->busy_since_ns = 0;
  if (status != UCS_OK)
    {
      nanosleep (&(struct timespec) { 0, 50000 }, NULL);
      return;
    }
  pfd.fd = comm->efd;
  pfd.events = POLLIN;
  pfd.revents = 0;
  ts.tv_sec = (time_t) (timeout_ns / INT64_C(1000000000));
  ts.tv_nsec = (long) (timeout_ns % INT64_C(1000000000));
  if (ppoll (&pfd, 1, &ts, NULL) < 0 && errno != EINTR)
    nanosleep (&(struct timespec) { 0, 50000 }, NULL);
}

/* ------------------------------------------------------------ transfers */

static void
xfer_complete (UcxXfer      *xfer,
               ucs_status_t  status)
{
  UcxOp *op = xfer->op;

  xfer->state = UCX_XFER_DONE;
  xfer->status = status;
  xfer->next_done = op->done_head;
  op->done_head = xfer;
  op->n_unfinished--;
  op->progressed = 1;
}

static void
send_done (void        *request,
           ucs_status_t status,
           void        *user_data)
{
  xfer_complete (user_data, status);
}

static void
recv_done (void                      *request,
           ucs_status_t               status,
           const ucp_tag_recv_info_t *info,
           void                      *user_data)
{
  UcxXfer *xfer = user_data;

  if (info != NULL)
    xfer->received = info->length;
  xfer_complete (xfer, status);
}

static void
xfer_begin (UcxXfer *xfer)
{
  xfer->state = UCX_XFER_PENDING;
  xfer->req = NULL;
  xfer->status = UCS_INPROGRESS;
  xfer->received = 0;
  xfer->op->n_unfinished++;
}

void
ucx_xfer_send (UcxXfer    *xfer,
               const void *buffer,
               size_t      length,
               uint64_t    tag,
               int         sync)
{
  UcxComm *comm = xfer->op->comm;
  ucp_request_param_t param;
  ucs_status_ptr_t request;

  xfer_begin (xfer);
  if (comm->eps[xfer->peer] == NULL)
    {
      xfer_complete (xfer, UCS_ERR_CONNECTION_RESET);
      return;
    }
  memset (&param, 0, sizeof param);
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = send_done;
  param.user_data = xfer;
  request = sync ? ucp_tag_send_sync_nbx (comm->eps[xfer->peer], buffer, length, tag, &param)
                 : ucp_tag_send_nbx (comm->eps[xfer->peer], buffer, length, tag, &param);
  if (request == NULL)
    xfer_complete (xfer, UCS_OK);
  else if (UCS_PTR_IS_ERR (request))
    xfer_complete (xfer, UCS_PTR_STATUS (request));
  else
    xfer->req = request;
}

void
ucx_xfer_recv (UcxXfer  *xfer,
               void     *buffer,
               size_t    length,
               uint64_t  tag)
{
  UcxComm *comm = xfer->op->comm;
  ucp_request_param_t param;
  ucs_status_ptr_t request;

  xfer_begin (xfer);
  xfer->expected = length;
  memset (&param, 0, sizeof param);
  /* No immediate completion: UCX 1.13 leaves recv_info unset on that path,
   * and the received length is what tells a mismatched count. */
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = recv_done;
  param.user_data = xfer;
  request = ucp_tag_recv_nbx (comm->worker, buffer, length, tag, UINT64_MAX, &param);
  if (request == NULL)
    xfer_complete (xfer, UCS_ERR_NO_PROGRESS);
  else if (UCS_PTR_IS_ERR (request))
    xfer_complete (xfer, UCS_PTR_STATUS (request));
  else
    xfer->req = request;
}

void
ucx_xfer_release (UcxXfer *xfer)
{
  if (xfer->req != NULL)
    {
      ucp_request_free (xfer->req);
      xfer->req = NULL;
    }
}

/* ------------------------------------------------------------ breakdown */

static size_t
count_pending (UcxComm *comm)
{
  size_t n = 0;

  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    n += op->n_unfinished;
  return n;
}

static void
drain (UcxComm *comm,
       int64_t  deadline)
{
  while (count_pending (comm) > 0 && ucx_now_ns () < deadline)
    if (ucp_worker_progress (comm->worker) == 0)
      ucx_worker_wait (comm, DRAIN_WAIT_NS);
}

void
ucx_comm_break (UcxComm    *comm,
                int         status,
                const char *format,
                ...)
{
  va_list args;
  int64_t deadline;

  if (!comm->broken)
    {
      comm->broken = status;
      va_start (args, format);
      vsnprintf (comm->broken_message, sizeof comm->broken_message, format, args);
      va_end (args);
      /* Peers waiting in shared memory learn it at once. */
      ucx_shm_mark_broken (comm);
    }

  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    if (!op->finished)
      {
        op->finished = 1;
        op->status = comm->broken;
        snprintf (op->message, sizeof op->message, "%s", comm->broken_message);
      }

  /* Receives can be cancelled; sends are completed by force-closing the
   * endpoints they wait on. Either way UCX lets go of the user's buffers. */
  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    for (size_t i = 0; i < op->n_xfers; i++)
      if (op->xfers[i].state == UCX_XFER_PENDING && op->xfers[i].is_recv &&
          op->xfers[i].req != NULL)
        ucp_request_cancel (comm->worker, op->xfers[i].req);
  drain (comm, ucx_now_ns () + BREAK_DRAIN_NS / 4);
  deadline = ucx_now_ns () + BREAK_DRAIN_NS;

  for (unsigned p = 0; p < comm->world_size && count_pending (comm) > 0; p++)
    {
      int waits_on_peer = 0;

      for (UcxOp *op = comm->active; op != NULL && !waits_on_peer; op = op->next)
        for (size_t i = 0; i < op->n_xfers && !waits_on_peer; i++)
          waits_on_peer = op->xfers[i].state == UCX_XFER_PENDING && op->xfers[i].peer == p;
      if (waits_on_peer)
        close_endpoint (comm, p, 1, deadline);
    }
  drain (comm, deadline);

  /* Whatever is still pending now will never report: forget it, so that
   * no operation waits for it. */
  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    for (size_t i = 0; i < op->n_xfers; i++)
      if (op->xfers[i].state == UCX_XFER_PENDING)
        {
          /* Freeing a pending request also stops its callback. */
          ucx_xfer_release (&op->xfers[i]);
          op->xfers[i].state = UCX_XFER_DONE;
          op->xfers[i].status = UCS_ERR_CANCELED;
          op->n_unfinished--;
        }
}

/* ------------------------------------------------------------ scratch */

char *
ucx_scratch_take (UcxComm *comm)
{
  void *p = NULL;

  if (comm->n_scratch_pool > 0)
    return comm->scratch_pool[--comm->n_scratch_pool];
  if (posix_memalign (&p, 64, comm->scratch_bytes) != 0)
    return NULL;
  return p;
}

void
ucx_scratch_give (UcxComm *comm,
                  char    *scratch)
{
  if (scratch == NULL)
    return;
  if (comm->n_scratch_pool == comm->scratch_pool_size)
    {
      unsigned size = comm->scratch_pool_size > 0 ? comm->scratch_pool_size * 2 : 4;
      char **pool = realloc (comm->scratch_pool, size * sizeof *pool);

      if (pool == NULL)
        {
          free (scratch);
          return;
        }
      comm->scratch_pool = pool;
      comm->scratch_pool_size = size;
    }
  comm->scratch_pool[comm->n_scratch_pool++] = scratch;
}
