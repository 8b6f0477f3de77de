/* ucx-ops.c — the collectives of comm-ucx as state machines that the
 * progress loop advances.
 *
 * The algorithms are "direct", which moves the fewest bytes for bus
 * bandwidth: a reduce-scatter sends part p of the send buffer to rank p,
 * in chunks; rank p folds the world's contributions to each chunk in rank
 * order (the determinism contract) as soon as they are all there, reusing
 * a window of receive slots. Its sends are synchronous and paced by the
 * same window, so a fast sender cannot pile unmatched chunks up at a slow
 * receiver. An all-reduce is a reduce-scatter over world
 * equal parts (the first count % world parts one element longer) whose
 * reduced chunks go out to every rank at once, so both phases overlap.
 * An all-gather sends each rank's part to every rank; a broadcast sends
 * the root's buffer to every rank; a barrier is an empty message from
 * every rank to every rank; an all-to-all sends run p of the send buffer
 * to rank p, in chunks, every receive posted before any send, and an
 * all_to_all_v does the same with a run of its own size for each rank,
 * posting nothing for an empty one. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec-comm-reduce-private.h"
#include "ucx-comm.h"

#define IDLE_SLOT ((size_t) -1)

/* A stalled operation looks at its peers' processes this often. */
#define LIVENESS_INTERVAL_NS INT64_C(100000000)

static const char * const op_names[] = {
  "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "all_to_all",
  "all_to_all_v",
};

const char *
ucx_op_kind_name (uint64_t kind)
{
  return kind < sizeof op_names / sizeof op_names[0] ? op_names[kind] : "another collective";
}

const char *
ucx_op_name (const UcxOp *op)
{
  return ucx_op_kind_name (op->kind);
}

static size_t
n_chunks (const UcxOp *op,
          size_t       len)
{
  return len == 0 ? 0 : (len - 1) / op->chunk_elems + 1;
}

static size_t
chunk_len (const UcxOp *op,
           size_t       len,
           size_t       chunk)
{
  size_t start = chunk * op->chunk_elems;

  return len - start < op->chunk_elems ? len - start : op->chunk_elems;
}

/* Index of @peer among the other ranks (rank order without self). */
static unsigned
peer_index (const UcxOp *op,
            unsigned     peer)
{
  return peer < op->comm->rank ? peer : peer - 1;
}

static unsigned
index_peer (const UcxOp *op,
            unsigned     index)
{
  return index < op->comm->rank ? index : index + 1;
}

static int
has_scatter_phase (const UcxOp *op)
{
  return op->kind == UCX_OP_ALL_REDUCE || op->kind == UCX_OP_REDUCE_SCATTER;
}

static int
has_gather_phase (const UcxOp *op)
{
  return op->kind == UCX_OP_ALL_REDUCE || op->kind == UCX_OP_ALL_GATHER;
}

/* ------------------------------------------------------------ creation */

static void
lay_out (UcxOp *op)
{
  unsigned world = op->comm->world_size, me = op->comm->rank;
  size_t longest = 0;

  for (unsigned p = 0; p < world; p++)
    {
      if (op->kind == UCX_OP_ALL_REDUCE)
        {
          size_t base = op->count / world, rem = op->count % world;

          op->part_len[p] = base + (p < rem);
          op->part_off[p] = p * base + (p < rem ? p : rem);
        }
      else if (op->kind == UCX_OP_BROADCAST)
        {
          op->part_len[p] = p == op->root ? op->count : 0;
          op->part_off[p] = 0;
        }
      else if (op->kind == UCX_OP_BARRIER)
        {
          op->part_len[p] = 0;
          op->part_off[p] = 0;
        }
      else if (op->kind == UCX_OP_ALL_TO_ALL_V)
        {
          /* the receive side; the send side lies in op->runs too */
          op->part_len[p] = op->runs[2 * world + p];
          op->part_off[p] = op->runs[3 * world + p];
          if (op->runs[p] > longest)
            longest = op->runs[p];
        }
      else
        {
          op->part_len[p] = op->count;
          op->part_off[p] = p * op->count;
        }
      if (op->part_len[p] > longest)
        longest = op->part_len[p];
    }

  op->chunk_elems = op->comm->chunk_bytes / op->esize;
  if (op->chunk_elems == 0)
    op->chunk_elems = 1;
  /* Chunk numbers must fit in their tag bits. */
  if (longest / op->chunk_elems >= UCX_MAX_CHUNKS - 1)
    op->chunk_elems = longest / (UCX_MAX_CHUNKS - 2) + 1;

  if (op->kind == UCX_OP_ALL_REDUCE)
    op->result = op->recv + op->part_off[me] * op->out_esize;
  else if (op->kind == UCX_OP_REDUCE_SCATTER)
    op->result = op->recv;
}

/* How many transfers each phase needs, and the receive window. */
static size_t
count_xfers (UcxOp *op)
{
  unsigned world = op->comm->world_size, me = op->comm->rank;
  size_t n = 0, mine = n_chunks (op, op->part_len[me]);

  if (has_scatter_phase (op))
    {
      for (unsigned p = 0; p < world; p++)
        if (p != me)
          n += n_chunks (op, op->part_len[p]);
      op->n_slots = mine < op->comm->window ? (unsigned) mine : op->comm->window;
      n += (size_t) op->n_slots * (world - 1);
    }
  if (has_gather_phase (op))
    {
      for (unsigned p = 0; p < world; p++)
        if (p != me)
          n += n_chunks (op, op->part_len[p]);
      n += mine * (world - 1);
    }
  if (op->kind == UCX_OP_BROADCAST)
    n += me == op->root ? n_chunks (op, op->count) * (world - 1) : n_chunks (op, op->count);
  if (op->kind == UCX_OP_BARRIER)
    n += 2 * (size_t) (world - 1);
  if (op->kind == UCX_OP_ALL_TO_ALL)
    n += 2 * (size_t) (world - 1) * n_chunks (op, op->count);
  if (op->kind == UCX_OP_ALL_TO_ALL_V)
    for (unsigned p = 0; p < world; p++)
      if (p != me)
        n += n_chunks (op, op->runs[p]) + n_chunks (op, op->part_len[p]);
  return n;
}

UcxOp *
ucx_op_new (UcxComm               *comm,
            UcxOpKind              kind,
            const void            *send,
            void                  *recv,
            size_t                 count,
            MixprecPluginDType     dtype,
            MixprecPluginReduceOp  reduce,
            unsigned               flags,
            unsigned               root,
            const UcxRuns         *runs)
{
  UcxOp *op = calloc (1, sizeof *op);
  size_t world = comm->world_size;

  if (op == NULL)
    return NULL;
  if (kind == UCX_OP_ALL_TO_ALL_V)
    {
      op->runs = malloc (4 * world * sizeof *op->runs);
      if (op->runs == NULL)
        {
          free (op);
          return NULL;
        }
      memcpy (op->runs, runs->send_len, world * sizeof *op->runs);
      memcpy (op->runs + world, runs->send_off, world * sizeof *op->runs);
      memcpy (op->runs + 2 * world, runs->recv_len, world * sizeof *op->runs);
      memcpy (op->runs + 3 * world, runs->recv_off, world * sizeof *op->runs);
    }
  op->comm = comm;
  op->kind = kind;
  op->dtype = dtype;
  op->out_dtype = (kind == UCX_OP_ALL_REDUCE || kind == UCX_OP_REDUCE_SCATTER) &&
                  (flags & MIXPREC_PLUGIN_COMM_RECV_FP32)
                  ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : dtype;
  op->reduce = reduce;
  op->flags = flags;
  op->esize = kind == UCX_OP_ALL_TO_ALL || kind == UCX_OP_ALL_TO_ALL_V
              ? 1 : _mixprec_reduce_dtype_size (dtype);
  op->out_esize = kind == UCX_OP_ALL_TO_ALL || kind == UCX_OP_ALL_TO_ALL_V
                  ? 1 : _mixprec_reduce_dtype_size (op->out_dtype);
  op->send = send;
  op->recv = recv;
  op->count = count;
  op->root = root;
  if (ucx_shm_adopt (op))
    {
      op->seq = comm->next_seq++;
      return op;
    }
  op->part_off = calloc (comm->world_size, sizeof *op->part_off);
  op->part_len = calloc (comm->world_size, sizeof *op->part_len);
  op->paced = calloc (comm->world_size, sizeof *op->paced);
  op->paced_posted = calloc (comm->world_size, sizeof *op->paced_posted);
  op->paced_total = calloc (comm->world_size, sizeof *op->paced_total);
  op->paced_in_flight = calloc (comm->world_size, sizeof *op->paced_in_flight);
  if (op->part_off == NULL || op->part_len == NULL || op->paced == NULL ||
      op->paced_posted == NULL || op->paced_total == NULL || op->paced_in_flight == NULL)
    goto no_memory;
  lay_out (op);

  op->n_xfers = count_xfers (op);
  op->xfers = calloc (op->n_xfers > 0 ? op->n_xfers : 1, sizeof *op->xfers);
  if (op->xfers == NULL)
    goto no_memory;
  for (size_t i = 0; i < op->n_xfers; i++)
    {
      op->xfers[i].op = op;
      op->xfers[i].slot = -1;
    }
  if (op->n_slots > 0)
    {
      op->slots = calloc (op->n_slots, sizeof *op->slots);
      if (op->slots == NULL)
        goto no_memory;
    }
  op->seq = comm->next_seq++;
  return op;

no_memory:
  ucx_op_free (op);
  return NULL;
}

static void
release_scratch (UcxOp *op)
{
  if (op->scratch == NULL)
    return;
  ucx_scratch_give (op->comm, op->scratch);
  op->scratch = NULL;
  op->comm->reducing--;
}

void
ucx_op_free (UcxOp *op)
{
  if (op == NULL)
    return;
  for (size_t i = 0; op->xfers != NULL && i < op->n_xfers; i++)
    ucx_xfer_release (&op->xfers[i]);
  release_scratch (op);
  if (op->queued)
    op->comm->n_queued--;
  free (op->slots);
  free (op->xfers);
  free (op->runs);
  free (op->part_off);
  free (op->part_len);
  free (op->paced);
  free (op->paced_posted);
  free (op->paced_total);
  free (op->paced_in_flight);
  free (op->shm_terms);
  free (op);
}

/* ------------------------------------------------------------ starting */

static void
arm_slot (UcxOp   *op,
          UcxSlot *slot,
          size_t   chunk)
{
  unsigned me = op->comm->rank;
  size_t len = chunk_len (op, op->part_len[me], chunk);
  size_t stride = op->chunk_elems * op->esize;

  slot->chunk = chunk;
  slot->arrived = 0;
  for (unsigned i = 0; i + 1 < op->comm->world_size; i++)
    ucx_xfer_recv (&slot->xfers[i], slot->scratch + i * stride, len * op->esize,
                   ucx_tag (op->seq, UCX_PHASE_SCATTER, index_peer (op, i), chunk));
}

/* Posts sends of part @part_of_buffer's chunks to @peer, from @base. */
static UcxXfer *
post_part_sends (UcxOp      *op,
                 UcxXfer    *x,
                 unsigned    peer,
                 const char *base,
                 size_t      len,
                 size_t      esize,
                 UcxPhase    phase)
{
  for (size_t c = 0; c < n_chunks (op, len); c++, x++)
    {
      x->peer = peer;
      x->chunk = (uint32_t) c;
      ucx_xfer_send (x, base + c * op->chunk_elems * esize, chunk_len (op, len, c) * esize,
                     ucx_tag (op->seq, phase, op->comm->rank, c), 0);
    }
  return x;
}

static UcxXfer *
post_part_recvs (UcxOp    *op,
                 UcxXfer  *x,
                 unsigned  peer,
                 char     *base,
                 size_t    len,
                 size_t    esize,
                 UcxPhase  phase)
{
  for (size_t c = 0; c < n_chunks (op, len); c++, x++)
    {
      x->peer = peer;
      x->is_recv = 1;
      x->chunk = (uint32_t) c;
      ucx_xfer_recv (x, base + c * op->chunk_elems * esize, chunk_len (op, len, c) * esize,
                     ucx_tag (op->seq, phase, peer, c));
    }
  return x;
}

/* Posts the paced sends (a reduce-scatter's contributions, an
 * all-gather's part) while each peer has fewer than a window of them in
 * flight. Reduce-scatter sends are synchronous: in flight until the
 * receiver matched them, so at most a window waits unmatched there. */
static void
post_paced_sends (UcxOp *op)
{
  unsigned world = op->comm->world_size, window = op->comm->window;
  int scatter = has_scatter_phase (op);

  for (unsigned i = 1; i < world && op->paced_left > 0; i++)
    {
      unsigned p = (op->comm->rank + i) % world, idx = peer_index (op, p);
      const char *base = scatter ? op->send + op->part_off[p] * op->esize : op->send;
      size_t len = scatter ? op->part_len[p] : op->count;

      while (op->paced_in_flight[idx] < window && op->paced_posted[idx] < op->paced_total[idx])
        {
          size_t c = op->paced_posted[idx]++;

          op->paced_in_flight[idx]++;
          op->paced_left--;
          ucx_xfer_send (&op->paced[idx][c], base + c * op->chunk_elems * op->esize,
                         chunk_len (op, len, c) * op->esize,
                         ucx_tag (op->seq, scatter ? UCX_PHASE_SCATTER : UCX_PHASE_GATHER,
                                  op->comm->rank, c), scatter);
        }
    }
}

/* Lays the paced sends to every peer out from @x on; returns the end. */
static UcxXfer *
prepare_paced_sends (UcxOp   *op,
                     UcxXfer *x)
{
  unsigned world = op->comm->world_size, me = op->comm->rank;

  for (unsigned i = 1; i < world; i++)
    {
      unsigned p = (me + i) % world, idx = peer_index (op, p);
      size_t n = n_chunks (op, has_scatter_phase (op) ? op->part_len[p] : op->count);

      op->paced[idx] = x;
      op->paced_total[idx] = n;
      op->paced_left += n;
      for (size_t c = 0; c < n; c++, x++)
        {
          x->peer = p;
          x->chunk = (uint32_t) c;
          x->paced = 1;
        }
    }
  return x;
}

/* Posts the operation's first receives and sends. */
static void
begin (UcxOp *op)
{
  UcxComm *comm = op->comm;
  unsigned world = comm->world_size, me = comm->rank;
  UcxXfer *x = op->xfers;

  /* Receives first, so that most messages find their buffer waiting. */
  if (has_scatter_phase (op))
    {
      size_t stride = op->chunk_elems * op->esize;

      for (unsigned s = 0; s < op->n_slots; s++)
        {
          UcxSlot *slot = &op->slots[s];

          slot->xfers = x;
          slot->scratch = op->scratch + (size_t) s * (world - 1) * stride;
          for (unsigned i = 0; i + 1 < world; i++, x++)
            {
              x->peer = index_peer (op, i);
              x->is_recv = 1;
              x->slot = (int) s;
            }
          slot->chunk = IDLE_SLOT;
        }
    }
  if (has_gather_phase (op))
    for (unsigned i = 1; i < world; i++)
      {
        unsigned p = (me + world - i) % world;

        x = post_part_recvs (op, x, p, op->recv + op->part_off[p] * op->out_esize,
                             op->part_len[p], op->out_esize, UCX_PHASE_GATHER);
      }
  if (op->kind == UCX_OP_BROADCAST && me != op->root)
    x = post_part_recvs (op, x, op->root, op->recv, op->count, op->esize, UCX_PHASE_BROADCAST);
  if (op->kind == UCX_OP_BARRIER)
    for (unsigned p = 0; p < world; p++)
      if (p != me)
        {
          x->peer = p;
          x->is_recv = 1;
          ucx_xfer_recv (x++, NULL, 0, ucx_tag (op->seq, UCX_PHASE_BARRIER, p, 0));
        }
  if (op->kind == UCX_OP_ALL_TO_ALL)
    for (unsigned i = 1; i < world; i++)
      {
        unsigned p = (me + world - i) % world;

        x = post_part_recvs (op, x, p, op->recv + (size_t) p * op->count, op->count, 1,
                             UCX_PHASE_GATHER);
      }
  if (op->kind == UCX_OP_ALL_TO_ALL_V)
    for (unsigned i = 1; i < world; i++)
      {
        unsigned p = (me + world - i) % world;

        x = post_part_recvs (op, x, p, op->recv + op->part_off[p], op->part_len[p], 1,
                             UCX_PHASE_GATHER);
      }

  for (unsigned s = 0; s < op->n_slots; s++)
    arm_slot (op, &op->slots[s], op->next_chunk++);

  /* Sends, starting with the next rank so that ranks do not all serve the
   * same peer first. */
  if (has_scatter_phase (op))
    {
      x = prepare_paced_sends (op, x);
      post_paced_sends (op);
    }
  if (op->kind == UCX_OP_ALL_GATHER)
    {
      char *own = op->recv + op->part_off[me] * op->esize;

      if (op->send != own && op->count > 0)
        memmove (own, op->send, op->count * op->esize);
      x = prepare_paced_sends (op, x);
      post_paced_sends (op);
    }
  if (op->kind == UCX_OP_ALL_REDUCE)
    op->gather_sends = x;      /* posted chunk by chunk as they are reduced */
  if (op->kind == UCX_OP_BROADCAST && me == op->root)
    for (unsigned i = 1; i < world; i++)
      x = post_part_sends (op, x, (me + i) % world, op->recv, op->count, op->esize,
                           UCX_PHASE_BROADCAST);
  if (op->kind == UCX_OP_ALL_TO_ALL)
    {
      if (op->count > 0)
        memcpy (op->recv + (size_t) me * op->count, op->send + (size_t) me * op->count,
                op->count);
      for (unsigned i = 1; i < world; i++)
        {
          unsigned p = (me + i) % world;

          x = post_part_sends (op, x, p, op->send + (size_t) p * op->count, op->count, 1,
                               UCX_PHASE_GATHER);
        }
    }
  if (op->kind == UCX_OP_ALL_TO_ALL_V)
    {
      if (op->part_len[me] > 0)
        memcpy (op->recv + op->part_off[me], op->send + op->runs[world + me], op->part_len[me]);
      for (unsigned i = 1; i < world; i++)
        {
          unsigned p = (me + i) % world;

          x = post_part_sends (op, x, p, op->send + op->runs[world + p], op->runs[p], 1,
                               UCX_PHASE_GATHER);
        }
    }
  if (op->kind == UCX_OP_BARRIER)
    for (unsigned i = 1; i < world; i++, x++)
      {
        x->peer = (me + i) % world;
        ucx_xfer_send (x, NULL, 0, ucx_tag (op->seq, UCX_PHASE_BARRIER, me, 0), 0);
      }
}

int
ucx_op_start (UcxOp *op)
{
  UcxComm *comm = op->comm;

  /* Every rank starts operations in the same order and admits them to
   * the receive windows in that order, so the oldest unfinished one is
   * receiving on every rank that has not finished it: queueing cannot
   * deadlock. */
  if (op->n_slots > 0)
    {
      if (comm->n_queued > 0 || comm->reducing >= comm->max_reducing)
        {
          op->queued = 1;
          comm->n_queued++;
        }
      else if ((op->scratch = ucx_scratch_take (comm)) == NULL)
        return MIXPREC_PLUGIN_ERR_NO_MEMORY;
      else
        comm->reducing++;
    }

  op->next = comm->active;
  if (comm->active != NULL)
    comm->active->prev = op;
  comm->active = op;
  if (!op->queued && !op->shm)
    begin (op);
  return MIXPREC_PLUGIN_OK;
}

/* Starts queued operations, oldest first, while receive windows are free. */
static void
admit_queued (UcxComm *comm)
{
  while (comm->n_queued > 0 && comm->reducing < comm->max_reducing && !comm->broken)
    {
      UcxOp *oldest = NULL;

      for (UcxOp *op = comm->active; op != NULL; op = op->next)
        if (op->queued && (oldest == NULL || (int32_t) (op->seq - oldest->seq) < 0))
          oldest = op;
      oldest->queued = 0;
      comm->n_queued--;
      oldest->scratch = ucx_scratch_take (comm);
      if (oldest->scratch == NULL)
        {
          char message[128];

          snprintf (message, sizeof message, "no memory for the receive window of %s #%u",
                    ucx_op_name (oldest), oldest->seq);
          ucx_op_fail (oldest, MIXPREC_PLUGIN_ERR_NO_MEMORY, message);
          return;
        }
      comm->reducing++;
      begin (oldest);
    }
}

/* ------------------------------------------------------------ advancing */

/* Folds the world's contributions to one chunk of this rank's part, in rank
 * order, and (all-reduce) sends the result to every rank. */
static void
reduce_chunk (UcxOp   *op,
              UcxSlot *slot)
{
  UcxComm *comm = op->comm;
  unsigned world = comm->world_size, me = comm->rank;
  size_t c = slot->chunk;
  size_t len = chunk_len (op, op->part_len[me], c);
  size_t in_stride = op->chunk_elems * op->esize;
  const char *own = op->send + (op->part_off[me] + c * op->chunk_elems) * op->esize;
  char *dst = op->result + c * op->chunk_elems * op->out_esize;
  const void *terms_static[16];
  const void **terms = world <= 16 ? terms_static : malloc (world * sizeof *terms);
  const void *first = (op->flags & MIXPREC_PLUGIN_COMM_ACCUMULATE) ? dst : NULL;

  if (terms == NULL)
    {
      ucx_op_fail (op, MIXPREC_PLUGIN_ERR_NO_MEMORY, "no memory to reduce a chunk");
      return;
    }
  for (unsigned r = 0; r < world; r++)
    terms[r] = r == me ? own : slot->scratch + peer_index (op, r) * in_stride;
  if (world == 1 && first == NULL && op->out_dtype == op->dtype)
    memmove (dst, own, len * op->esize);
  else
    _mixprec_reduce_terms (dst, op->out_dtype, first, terms, world, len, op->dtype, op->reduce);
  if (terms != terms_static)
    free (terms);

  if (op->kind == UCX_OP_ALL_REDUCE)
    for (unsigned i = 1; i < world; i++)
      {
        UcxXfer *x = &op->gather_sends[c * (world - 1) + (i - 1)];

        x->peer = (me + i) % world;
        x->chunk = (uint32_t) c;
        ucx_xfer_send (x, dst, len * op->out_esize,
                       ucx_tag (op->seq, UCX_PHASE_GATHER, me, c), 0);
      }
  op->chunks_reduced++;
}

static void
describe_failure (UcxOp       *op,
                  UcxXfer     *x,
                  char        *out,
                  size_t       len)
{
  const char *phase = x->slot >= 0 ? "contribution" : "message";

  if (x->status == UCS_ERR_MESSAGE_TRUNCATED)
    snprintf (out, len, "rank %u sent more than the %zu bytes expected for chunk %u of "
              "%s #%u; do all ranks pass the same count, dtype and root?",
              x->peer, x->expected, x->chunk, ucx_op_name (op), op->seq);
  else if (x->status == UCS_OK && x->received != x->expected)
    snprintf (out, len, "rank %u sent %zu bytes for chunk %u of %s #%u where %zu were "
              "expected; do all ranks pass the same count, dtype and root?",
              x->peer, x->received, x->chunk, ucx_op_name (op), op->seq, x->expected);
  else
    snprintf (out, len, "%s %s chunk %u %s rank %u failed in %s #%u: %s",
              x->is_recv ? "receiving" : "sending", phase, x->chunk,
              x->is_recv ? "from" : "to", x->peer, ucx_op_name (op), op->seq,
              ucs_status_string (x->status));
}

/* Returns non-zero when the operation moved. */
static int
op_advance (UcxOp *op)
{
  unsigned me = op->comm->rank;
  int moved = op->progressed;
  UcxXfer *x;

  if (op->queued || op->shm)
    return 0;
  op->progressed = 0;
  while ((x = op->done_head) != NULL)
    {
      op->done_head = x->next_done;
      ucx_xfer_release (x);
      if (op->finished)
        continue;
      if (x->status != UCS_OK || (x->is_recv && x->received != x->expected))
        {
          char message[512];
          int status = x->status == UCS_OK || x->status == UCS_ERR_MESSAGE_TRUNCATED
                       ? MIXPREC_PLUGIN_ERR_RUNTIME : MIXPREC_PLUGIN_ERR_PEER_FAILED;

          describe_failure (op, x, message, sizeof message);
          ucx_op_fail (op, status, message);
          return 1;
        }
      if (x->slot >= 0)
        op->slots[x->slot].arrived++;
      if (x->paced)
        op->paced_in_flight[peer_index (op, x->peer)]--;
    }
  if (op->finished)
    return moved;
  if (op->paced_left > 0)
    post_paced_sends (op);

  for (unsigned s = 0; s < op->n_slots; s++)
    {
      UcxSlot *slot = &op->slots[s];

      if (slot->chunk == IDLE_SLOT || slot->arrived + 1 < op->comm->world_size)
        continue;
      reduce_chunk (op, slot);
      if (op->finished)
        return 1;
      moved = 1;
      if (op->next_chunk < n_chunks (op, op->part_len[me]))
        arm_slot (op, slot, op->next_chunk++);
      else
        slot->chunk = IDLE_SLOT;
    }

  if (op->n_unfinished == 0 && op->paced_left == 0 &&
      (!has_scatter_phase (op) || op->chunks_reduced == n_chunks (op, op->part_len[me])))
    {
      op->finished = 1;
      op->status = MIXPREC_PLUGIN_OK;
      release_scratch (op);
      moved = 1;
    }
  if (moved)
    op->stall_ns = 0;
  return moved;
}

int
ucx_comm_progress (UcxComm *comm)
{
  int busy = 0;
  UcxOp *op, *next;

  for (int i = 0; i < 64 && ucp_worker_progress (comm->worker) > 0; i++)
    busy = 1;
  if (busy)
    comm->busy_since_ns = 0;
  for (op = comm->active; op != NULL; op = next)
    {
      next = op->next;
      busy |= op_advance (op);
    }
  busy |= ucx_shm_progress (comm);
  admit_queued (comm);
  return busy;
}

void
ucx_op_fail (UcxOp      *op,
             int         status,
             const char *message)
{
  if (op->finished)
    return;
  ucx_comm_break (op->comm, status, "%s", message);
}

/* ------------------------------------------------------------ stalls */

/* The lowest rank this operation still waits on, and how many transfers. */
static unsigned
waited_peer (const UcxOp *op,
             size_t      *n_waiting)
{
  unsigned peer = op->comm->world_size;

  *n_waiting = 0;
  for (size_t i = 0; i < op->n_xfers; i++)
    if (op->xfers[i].state == UCX_XFER_PENDING && op->xfers[i].peer <= peer)
      {
        if (op->xfers[i].peer < peer)
          *n_waiting = 0;
        peer = op->xfers[i].peer;
        (*n_waiting)++;
      }
  return peer;
}

/* A peer the transport or the process table says is gone, among those
 * the operation waits on; world_size when none. */
static unsigned
failed_peer (UcxOp *op,
             int    check_processes,
             int   *exited)
{
  UcxComm *comm = op->comm;
  unsigned n_missing;

  /* At a shared-memory barrier: the ranks that have not arrived. */
  if (ucx_shm_missing_rank (op, &n_missing) < comm->world_size)
    {
      for (unsigned p = 0; check_processes && p < comm->world_size; p++)
        if (p != comm->rank && ucx_peer_has_exited (comm, p))
          {
            *exited = 1;
            return p;
          }
      return comm->world_size;
    }
  for (size_t i = 0; i < op->n_xfers; i++)
    {
      unsigned p = op->xfers[i].peer;

      if (op->xfers[i].state != UCX_XFER_PENDING)
        continue;
      if (comm->peer_status[p] != UCS_OK)
        {
          *exited = 0;
          return p;
        }
      if (check_processes && ucx_peer_has_exited (comm, p))
        {
          *exited = 1;
          return p;
        }
    }
  return comm->world_size;
}

/* Appends, after "; ", why the network device choice may keep @peer
 * unreachable, when ucx-hint.c sees a likely cause. */
static void
append_device_hint (UcxComm *comm,
                    unsigned peer,
                    char    *message,
                    size_t   len)
{
  char hint[512];
  size_t n = strlen (message);

  if (peer < comm->world_size && n + 2 < len &&
      ucx_hint_for_peer (comm->peers, comm->rank, peer, hint, sizeof hint))
    snprintf (message + n, len - n, "; %s", hint);
}

void
ucx_comm_check_stalls (UcxComm *comm,
                       int64_t  elapsed_ns)
{
  int64_t now = ucx_now_ns ();
  int check_processes = now - comm->liveness_checked_ns > LIVENESS_INTERVAL_NS;
  int any_failed_peer = 0;

  for (unsigned p = 0; p < comm->world_size; p++)
    any_failed_peer |= comm->peer_status[p] != UCS_OK;

  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    {
      unsigned peer;
      int exited = 0;

      /* A queued operation, or a shared-memory one behind another, waits
       * for the ones ahead of it, which time out first when a peer is gone. */
      if (op->finished || op->queued || (op->shm && !op->shm_arrived))
        continue;
      op->stall_ns += elapsed_ns;
      if (any_failed_peer || (check_processes && op->stall_ns > LIVENESS_INTERVAL_NS))
        {
          comm->liveness_checked_ns = now;
          peer = failed_peer (op, check_processes, &exited);
          if (peer < comm->world_size)
            {
              char message[1024];

              if (exited)
                snprintf (message, sizeof message, "rank %u (process %lld on this host) "
                          "exited during %s #%u", peer, (long long) comm->peers[peer].pid,
                          ucx_op_name (op), op->seq);
              else
                {
                  snprintf (message, sizeof message, "the connection to rank %u failed "
                            "during %s #%u: %s", peer, ucx_op_name (op), op->seq,
                            ucs_status_string (comm->peer_status[peer]));
                  append_device_hint (comm, peer, message, sizeof message);
                }
              ucx_op_fail (op, MIXPREC_PLUGIN_ERR_PEER_FAILED, message);
              return;
            }
        }
      if (op->stall_ns > comm->timeout_ns)
        {
          char message[1024];
          size_t n_waiting;

          if (op->shm)
            {
              unsigned n_missing;

              peer = ucx_shm_missing_rank (op, &n_missing);
              snprintf (message, sizeof message, "rank %u has not answered for %lld ms: "
                        "%s #%u waits for it%s at a shared-memory barrier (has that "
                        "process died, hung, or called other collectives?)",
                        peer, (long long) (op->stall_ns / 1000000), ucx_op_name (op), op->seq,
                        n_missing > 1 ? " and others" : "");
            }
          else
            {
              peer = waited_peer (op, &n_waiting);
              snprintf (message, sizeof message, "rank %u has not answered for %lld ms: "
                        "%s #%u still waits for %zu transfer%s with it (has that process "
                        "died, hung, or called other collectives?)",
                        peer, (long long) (op->stall_ns / 1000000), ucx_op_name (op), op->seq,
                        n_waiting, n_waiting == 1 ? "" : "s");
            }
          append_device_hint (comm, peer, message, sizeof message);
          ucx_op_fail (op, MIXPREC_PLUGIN_ERR_TIMEOUT, message);
          return;
        }
    }
}
