/* ucx-shm.c — all_reduce, reduce_scatter and all_gather through one
 * shared-memory segment, when every rank of the communicator runs on this
 * host (see ucx-shm.h).
 *
 * The segment: a header, one cache line per rank with the number of
 * barriers that rank has arrived at, then two "in" buffers per rank and
 * two "out" buffers of chunk_bytes each. An operation runs in steps; in
 * each, every rank copies its piece of the chunk into its in buffer,
 * arrives at the step's barrier, and once all have arrived uses what the
 * others wrote:
 *
 *   all_reduce      folds its 1/world of the chunk from every rank's in
 *                   buffer, in rank order, into the out buffer; after the
 *                   next barrier, copies the whole reduced chunk out. So
 *                   it takes one step per chunk plus a last barrier.
 *   reduce_scatter  each in buffer holds world pieces, one per part; the
 *                   rank folds its own piece from every rank straight
 *                   into recv.
 *   all_gather      copies every rank's piece to its place in recv.
 *   barrier         one step, with nothing to copy.
 *
 * Buffers alternate by a counter of the steps taken since the segment was
 * made, across operations. A rank writes a buffer only after passing the
 * barrier that follows the last reads of the same buffer, so one barrier
 * per step is enough and operations follow each other without one.
 *
 * Every element is folded in rank order, as over UCX, so both paths give
 * the same bits.
 *
 * A rank's line also holds when it last showed that it was running, and
 * where: a rank that waits spins only while the ranks it waits for are
 * running on other CPUs, and sleeps on the header's futex word otherwise
 * (see ucx_shm_wait). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "mixprec-plugin-fail-private.h"
#include "mixprec-comm-reduce-private.h"
#include "ucx-comm.h"
#include "ucx-peer.h"

#define SHM_LINE    64
#define SHM_WRITING UINT32_MAX         /* broken: the message is being written */

#define DEFAULT_SHM_CHUNK_BYTES ((size_t) 1 << 20)
/* A rank that waits at a barrier spins, at most this long, while every
 * rank it waits for is visibly running on another CPU, and sleeps
 * otherwise. Waking a sleeping rank takes tens to hundreds of microseconds
 * on a virtual machine, longer than a running peer usually needs to catch
 * up; but spinning for a peer that is not running only holds a CPU that
 * it, or the work that delays it, may need. On a busy host the second is
 * the common case, and it decides whether a collective runs at full speed
 * or at a fraction of it. */
#define DEFAULT_SHM_SPIN_US 1000
/* When the ranks outnumber the CPUs, most waits are for a rank that is not
 * running, and a spin holds the CPU it needs: spin only briefly. */
#define CROWDED_SHM_SPIN_US 5
/* A rank inside a collective shows that it runs after every copy of a
 * chunk and every this many bytes that it folds... */
#define SHM_BEAT_BYTES ((size_t) 64 << 10)
/* ...so one that has not shown it for longer than a chunk's copy takes
 * has lost its CPU, or is outside the library (computing), and will not
 * arrive soon. */
#define SHM_BEAT_GRACE_NS ((int64_t) 200000)

/* The segment's start, as rank 0 writes it (ucx-peer.h, so that the
 * fuzzers read it too). */
typedef UcxShmHeader ShmHeader;

struct UcxShm
{
  char *base;
  size_t size;
  ShmHeader *header;
  char *data;
  size_t chunk_bytes;
  unsigned world;
  uint64_t barriers;            /* barriers this rank has arrived at */
  uint64_t steps;               /* data steps taken, every operation */
  uint64_t signed_ops;          /* operations that signed (had a step) */
  uint64_t started;             /* tickets handed to operations */
  uint64_t finished;            /* the ticket of the one that may run */
  int64_t spin_ns;
  unsigned rank;
  unsigned cpus;                /* this process may run on */
};

/* ------------------------------------------------------------ segment */

/* A polite spin: tells the core (and its hyperthread sibling) that this
 * loop only waits. */
static inline void
cpu_relax (void)
{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause ();
#else
  __asm__ __volatile__ ("" ::: "memory");
#endif
}

/* Where the per-rank lines start: after the header, on a line of its own. */
#define LINES_OFFSET ((sizeof (ShmHeader) + SHM_LINE - 1) & ~(size_t) (SHM_LINE - 1))

/* The header and the per-rank lines; the buffers start on the next page. */
static size_t
header_bytes (unsigned world)
{
  return (LINES_OFFSET + (size_t) world * SHM_LINE + 4095) & ~(size_t) 4095;
}

static uint64_t *
arrived_word (UcxShm   *shm,
              unsigned  rank)
{
  return (uint64_t *) (shm->base + LINES_OFFSET + (size_t) rank * SHM_LINE);
}

/* Word 5 of a rank's line: when it last showed that it was running
 * (CLOCK_MONOTONIC, shared by every process of the host); word 6: the CPU
 * it was running on then. */
static uint64_t *
beat_words (UcxShm   *shm,
            unsigned  rank)
{
  return arrived_word (shm, rank) + 5;
}

static void
beat (UcxShm *shm)
{
  uint64_t *words = beat_words (shm, shm->rank);
  int cpu = sched_getcpu ();

  __atomic_store_n (&words[0], (uint64_t) ucx_now_ns (), __ATOMIC_RELAXED);
  __atomic_store_n (&words[1], (uint64_t) (cpu < 0 ? UINT32_MAX : (unsigned) cpu),
                    __ATOMIC_RELAXED);
}

/* After the arrival count, each rank's line holds the signature of its
 * operation (what it was called with), in two slots used in turn. A slot
 * is written again two operations later, after a barrier that every rank
 * passes only once it has read it. */
static uint64_t *
signature_words (UcxShm   *shm,
                 unsigned  rank,
                 uint64_t  slot)
{
  return arrived_word (shm, rank) + 1 + 2 * (slot & 1);
}

static char *
in_buffer (UcxShm   *shm,
           uint64_t  step,
           unsigned  rank)
{
  return shm->data + ((step & 1) * shm->world + rank) * shm->chunk_bytes;
}

static char *
out_buffer (UcxShm   *shm,
            uint64_t  step)
{
  return shm->data + (2 * (size_t) shm->world + (step & 1)) * shm->chunk_bytes;
}

static long
futex (uint32_t *word,
       int       op,
       uint32_t  value,
       int64_t   timeout_ns)
{
  struct timespec ts = { (time_t) (timeout_ns / 1000000000), (long) (timeout_ns % 1000000000) };

  return syscall (SYS_futex, word, op, value, op == FUTEX_WAIT ? &ts : NULL, NULL, 0);
}

static void
wake_all (UcxShm *shm)
{
  __atomic_fetch_add (&shm->header->arrivals, 1, __ATOMIC_SEQ_CST);
  futex (&shm->header->arrivals, FUTEX_WAKE, INT_MAX, 0);
}

typedef enum
{
  SHM_OFF,
  SHM_AUTO,
  SHM_REQUIRED,
} ShmMode;

typedef UcxShmOffer ShmOffer;
typedef UcxShmInvite ShmInvite;

static int
read_settings (unsigned  world,
               ShmMode  *mode,
               size_t   *chunk_bytes,
               int64_t  *spin_ns,
               char     *errbuf,
               size_t    errbuf_len)
{
  const char *value = getenv ("MIXPREC_UCX_SHM");
  size_t spin_us = 0;
  int status;

  *spin_ns = 0;
  *mode = SHM_AUTO;
  if (value == NULL || value[0] == '\0' || strcmp (value, "auto") == 0)
    *mode = SHM_AUTO;
  else if (strcmp (value, "0") == 0)
    *mode = SHM_OFF;
  else if (strcmp (value, "1") == 0)
    *mode = SHM_REQUIRED;
  else
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                     "MIXPREC_UCX_SHM=%s: must be \"auto\", \"0\" or \"1\"", value);
  status = ucx_env_size ("MIXPREC_UCX_SHM_CHUNK_BYTES", DEFAULT_SHM_CHUNK_BYTES, 4096,
                         (size_t) 64 << 20, chunk_bytes, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = ucx_env_size ("MIXPREC_UCX_SHM_SPIN_US",
                           world > ucx_cpus_available () ? CROWDED_SHM_SPIN_US : DEFAULT_SHM_SPIN_US,
                           0, 1000000, &spin_us, errbuf, errbuf_len);
  *spin_ns = (int64_t) spin_us * 1000;
  return status;
}

/* Maps the segment named @name, or makes it (@create). Returns NULL when
 * it cannot, with *@refused set (and the reason in @errbuf) when the
 * segment exists but is not one this rank may trust: another user's,
 * open to group or others, of the wrong size or layout. A segment name
 * travels through the bootstrap and /dev/shm is shared by every user of
 * the host, so a name alone proves nothing. */
static UcxShm *
map_segment (const char *name,
             unsigned    world,
             size_t      chunk_bytes,
             int         create,
             int        *refused,
             char       *errbuf,
             size_t      errbuf_len)
{
  size_t size = ucx_peer_shm_segment_bytes (world, chunk_bytes);
  UcxShm *shm = calloc (1, sizeof *shm);
  struct stat st;
  void *base;
  int fd;

  *refused = 0;
  if (shm == NULL)
    return NULL;
  /* O_NOFOLLOW: /dev/shm is world-writable; a link planted under the
   * name must not lead elsewhere. */
  fd = shm_open (name, create ? O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW : O_RDWR | O_NOFOLLOW,
                 0600);
  if (fd < 0)
    {
      free (shm);
      return NULL;
    }
  /* posix_fallocate, unlike ftruncate, fails now when /dev/shm is too
   * small, instead of a SIGBUS at the first touch of a missing page. */
  if ((create && posix_fallocate (fd, 0, (off_t) size) != 0) || fstat (fd, &st) != 0)
    {
      close (fd);
      if (create)
        shm_unlink (name);
      free (shm);
      return NULL;
    }
  if (!S_ISREG (st.st_mode) ||
      ucx_peer_check_segment_stat (name, st.st_uid, st.st_mode, (uint64_t) st.st_size,
                                   geteuid (), size, errbuf, errbuf_len) != 0)
    {
      if (!S_ISREG (st.st_mode))
        _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                              "shared-memory segment %s is not a regular file", name);
      close (fd);
      if (create)
        shm_unlink (name);
      free (shm);
      *refused = 1;
      return NULL;
    }
  base = mmap (NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close (fd);
  if (base == MAP_FAILED)
    {
      if (create)
        shm_unlink (name);
      free (shm);
      return NULL;
    }
  shm->base = base;
  shm->size = size;
  shm->header = base;
  shm->data = shm->base + header_bytes (world);
  shm->chunk_bytes = chunk_bytes;
  shm->world = world;
  if (create)
    {
      shm->header->magic = UCX_SHM_MAGIC;
      shm->header->version = UCX_SHM_VERSION;
      shm->header->world = world;
      shm->header->chunk_bytes = chunk_bytes;
    }
  else if (ucx_peer_check_shm_header (base, size, name, world, chunk_bytes,
                                      errbuf, errbuf_len) != 0)
    {
      munmap (base, size);
      free (shm);
      *refused = 1;
      return NULL;
    }
  return shm;
}

static void
unmap_segment (UcxShm *shm)
{
  if (shm == NULL)
    return;
  munmap (shm->base, shm->size);
  free (shm);
}

/* What each rank says after trying to map the segment. */
enum
{
  MAPPED_NO = 0,
  MAPPED_YES = 1,
  MAPPED_REFUSED = 2,           /* it exists, but this rank does not trust it */
};

int
ucx_shm_open (UcxComm                  *comm,
              const MixprecBootstrapV1 *bootstrap,
              char                     *errbuf,
              size_t                    errbuf_len)
{
  unsigned world = comm->world_size, me = comm->rank;
  ShmOffer mine, *offers = NULL;
  ShmInvite invite, *invites = NULL, theirs;
  int32_t ok, *oks = NULL;
  ShmMode mode = SHM_AUTO;
  size_t chunk_bytes = 0;
  int64_t spin_ns = 0;
  int status, usable = world > 1, required = 0, refused = 0, all_mapped;
  int linked = 0;               /* rank 0: the name exists in /dev/shm */
  UcxShm *shm = NULL;

  status = read_settings (world, &mode, &chunk_bytes, &spin_ns, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK || world == 1)
    return status;

  memset (&mine, 0, sizeof mine);
  memset (&invite, 0, sizeof invite);
  /* Processes share a segment only when they share the boot and the IPC,
   * mount and network namespaces. Ranks in different network namespaces
   * stand for different hosts (containers, the multi-host test): they
   * talk over the network UCX is told to use. */
  ucx_namespace_identity ((const char * const[]) { "ipc", "mnt", "net" }, 3,
                          mine.domain, sizeof mine.domain);
  mine.mode = (int32_t) mode;
  offers = calloc (world, sizeof *offers);
  invites = calloc (world, sizeof *invites);
  oks = calloc (world, sizeof *oks);
  if (offers == NULL || invites == NULL || oks == NULL)
    {
      status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                         "no memory to agree on shared memory with %u ranks", world);
      goto out;
    }
  status = ucx_exchange (bootstrap, &mine, sizeof mine, offers, "shared-memory domains",
                         errbuf, errbuf_len);
  for (unsigned p = 0; p < world && status == MIXPREC_PLUGIN_OK; p++)
    if (ucx_peer_parse_offer (&offers[p], sizeof offers[p], p, &offers[p],
                              errbuf, errbuf_len) != 0)
      status = MIXPREC_PLUGIN_ERR_PEER_FAILED;
  if (status != MIXPREC_PLUGIN_OK)
    goto out;
  /* Every rank reads the same offers, so all decide alike. */
  for (unsigned p = 0; p < world; p++)
    {
      usable &= offers[p].mode != SHM_OFF &&
                strncmp (offers[p].domain, offers[0].domain, sizeof offers[p].domain) == 0;
      required |= offers[p].mode == SHM_REQUIRED;
    }
  if (!usable)
    {
      if (mode == SHM_REQUIRED)
        status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                           "MIXPREC_UCX_SHM=1, but the ranks do not all share this host's "
                           "namespaces (boot, IPC, mount, network), or one set "
                           "MIXPREC_UCX_SHM=0");
      goto out;
    }

  /* Rank 0 makes the segment; every rank sizes it from its own settings
   * and refuses an invite that disagrees. */
  chunk_bytes = ucx_peer_shm_chunk_for_world (chunk_bytes, world);
  if (me == 0)
    {
      for (int attempt = 0; attempt < 8 && shm == NULL && !refused && chunk_bytes > 0; attempt++)
        {
          uint32_t nonce = 0;

          if (getrandom (&nonce, sizeof nonce, 0) != (ssize_t) sizeof nonce)
            nonce = (uint32_t) ucx_now_ns () ^ (uint32_t) attempt;
          snprintf (invite.name, sizeof invite.name, UCX_PEER_SHM_PREFIX "%ld-%08x",
                    (long) getpid (), nonce);
          shm = map_segment (invite.name, world, chunk_bytes, 1, &refused, errbuf, errbuf_len);
          if (shm == NULL && errno != EEXIST)
            break;
        }
      linked = shm != NULL;
      invite.ok = shm != NULL;
      invite.chunk_bytes = chunk_bytes;
    }
  /* From here on, a failure of any kind (a peer that dies in the next two
   * exchanges included) reaches `out`, which unlinks the name: the
   * segment never outlives this call in /dev/shm. */
  status = ucx_exchange (bootstrap, &invite, sizeof invite, invites,
                         "the shared-memory segment's name", errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    goto out;
  if (me != 0)
    {
      if (ucx_peer_parse_invite (&invites[0], sizeof invites[0], me, world, chunk_bytes,
                                 &theirs, errbuf, errbuf_len) != 0)
        refused = 1;
      else if (theirs.ok)
        shm = map_segment (theirs.name, world, (size_t) theirs.chunk_bytes, 0, &refused,
                           errbuf, errbuf_len);
    }
  ok = refused ? MAPPED_REFUSED : shm != NULL ? MAPPED_YES : MAPPED_NO;
  status = ucx_exchange (bootstrap, &ok, sizeof ok, oks, "whether the shared-memory "
                         "segment is mapped", errbuf, errbuf_len);
  /* Every rank has it mapped (or gave up): the name has served. */
  if (linked)
    {
      shm_unlink (invite.name);
      linked = 0;
    }
  if (status != MIXPREC_PLUGIN_OK)
    goto out;
  if (refused)
    {
      /* The reason is in errbuf already. */
      status = MIXPREC_PLUGIN_ERR_RUNTIME;
      goto out;
    }
  all_mapped = 1;
  for (unsigned p = 0; p < world && status == MIXPREC_PLUGIN_OK; p++)
    {
      if (oks[p] == MAPPED_REFUSED)
        status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                       "rank %u refused the shared-memory segment that rank 0 "
                                       "made (its own error says why)", p);
      else if (oks[p] != MAPPED_NO && oks[p] != MAPPED_YES)
        status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_PEER_FAILED,
                                       "rank %u said %d of the shared-memory segment: must be "
                                       "%d (not mapped), %d (mapped) or %d (refused)", p,
                                       (int) oks[p], MAPPED_NO, MAPPED_YES, MAPPED_REFUSED);
      all_mapped &= oks[p] == MAPPED_YES;
    }
  if (status == MIXPREC_PLUGIN_OK && !all_mapped && required)
    status = _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                       "MIXPREC_UCX_SHM=1, but a shared-memory segment of %zu bytes could "
                       "not be made or mapped in /dev/shm (is it full or missing?)",
                       ucx_peer_shm_segment_bytes (world, chunk_bytes));
  if (status == MIXPREC_PLUGIN_OK && all_mapped)
    {
      shm->spin_ns = spin_ns;
      shm->rank = comm->rank;
      shm->cpus = ucx_cpus_available ();
      beat (shm);
      comm->shm = shm;
      shm = NULL;
    }

out:
  if (linked)
    shm_unlink (invite.name);
  unmap_segment (shm);
  free (offers);
  free (invites);
  free (oks);
  return status;
}

void
ucx_shm_close (UcxComm *comm)
{
  unmap_segment (comm->shm);
  comm->shm = NULL;
}

/* ------------------------------------------------------------ barriers */

static void
arrive (UcxComm *comm)
{
  UcxShm *shm = comm->shm;

  shm->barriers++;
  beat (shm);
  /* Release: whoever sees the count sees what this rank wrote before. */
  __atomic_store_n (arrived_word (shm, comm->rank), shm->barriers, __ATOMIC_RELEASE);
  __atomic_fetch_add (&shm->header->arrivals, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n (&shm->header->sleepers, __ATOMIC_SEQ_CST) != 0)
    futex (&shm->header->arrivals, FUTEX_WAKE, INT_MAX, 0);
}

static unsigned
missing (UcxShm   *shm,
         unsigned *lowest)
{
  unsigned n = 0;

  *lowest = shm->world;
  for (unsigned r = 0; r < shm->world; r++)
    if (__atomic_load_n (arrived_word (shm, r), __ATOMIC_ACQUIRE) < shm->barriers)
      {
        if (n++ == 0)
          *lowest = r;
      }
  return n;
}

static int
barrier_passed (UcxShm *shm)
{
  unsigned lowest;

  return missing (shm, &lowest) == 0;
}

static uint32_t
broken_by (UcxShm *shm)
{
  return __atomic_load_n (&shm->header->broken, __ATOMIC_ACQUIRE);
}

void
ucx_shm_mark_broken (UcxComm *comm)
{
  UcxShm *shm = comm->shm;
  uint32_t expected = 0;

  if (shm == NULL)
    return;
  if (__atomic_compare_exchange_n (&shm->header->broken, &expected, SHM_WRITING, 0,
                                   __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    {
      shm->header->status = comm->broken;
      snprintf (shm->header->message, sizeof shm->header->message, "%.900s",
                comm->broken_message);
      __atomic_store_n (&shm->header->broken, comm->rank + 1, __ATOMIC_RELEASE);
    }
  wake_all (shm);
}

void
ucx_shm_wake (UcxComm *comm)
{
  if (comm->shm != NULL)
    wake_all (comm->shm);
}

/* ------------------------------------------------------------ operations */

static size_t
min_size (size_t a,
          size_t b)
{
  return a < b ? a : b;
}

int
ucx_shm_adopt (UcxOp *op)
{
  UcxShm *shm = op->comm->shm;
  unsigned world = op->comm->world_size;

  if (shm == NULL)
    return 0;
  switch (op->kind)
    {
    case UCX_OP_ALL_REDUCE:
      op->shm_chunk_elems = shm->chunk_bytes / op->out_esize;
      break;
    case UCX_OP_REDUCE_SCATTER:
    case UCX_OP_ALL_TO_ALL:
      /* A chunk of every rank's block: one piece per destination. */
      op->shm_chunk_elems = shm->chunk_bytes / ((size_t) world * op->esize);
      break;
    case UCX_OP_ALL_GATHER:
      op->shm_chunk_elems = shm->chunk_bytes / op->esize;
      break;
    case UCX_OP_BARRIER:
      /* No chunks; its one step is the barrier. */
      op->shm_chunk_elems = 1;
      break;
    case UCX_OP_BROADCAST:
    default:
      return 0;
    }
  if (op->shm_chunk_elems == 0)
    return 0;
  op->shm_terms = calloc (world, sizeof *op->shm_terms);
  if (op->shm_terms == NULL)
    return 0;
  op->shm = 1;
  op->shm_chunks = (op->count + op->shm_chunk_elems - 1) / op->shm_chunk_elems;
  /* all_reduce copies its last chunk out after one more barrier. */
  op->shm_steps = op->shm_chunks + (op->kind == UCX_OP_ALL_REDUCE && op->shm_chunks > 0) +
                  (op->kind == UCX_OP_BARRIER);
  op->shm_ticket = shm->started++;
  return 1;
}

static size_t
step_len (const UcxOp *op,
          size_t       chunk)
{
  return min_size (op->shm_chunk_elems, op->count - chunk * op->shm_chunk_elems);
}

/* memcpy(), then a sign that this rank runs. In one piece: a copy in
 * pieces of less than a chunk costs up to a sixth of the bandwidth on
 * some x86 hosts, more than a few waits cost. */
static void
copy_beating (UcxShm     *shm,
              char       *dst,
              const char *src,
              size_t      bytes)
{
  memcpy (dst, src, bytes);
  beat (shm);
}

/* Folds @n elements of op->shm_terms (moved past them) into @dst, in
 * pieces, showing after each that this rank runs. An element's fold does
 * not depend on its neighbours, so the pieces give the bits of one call. */
static void
reduce_beating (UcxOp      *op,
                char       *dst,
                const char *first,
                size_t      n)
{
  UcxShm *shm = op->comm->shm;
  size_t piece = SHM_BEAT_BYTES / op->esize;

  for (size_t done = 0; done < n; done += piece)
    {
      size_t len = min_size (piece, n - done);

      _mixprec_reduce_terms (dst + done * op->out_esize, op->out_dtype,
                             first != NULL ? first + done * op->out_esize : NULL,
                             op->shm_terms, op->comm->world_size, len, op->dtype, op->reduce);
      for (unsigned r = 0; r < op->comm->world_size; r++)
        op->shm_terms[r] = (const char *) op->shm_terms[r] + len * op->esize;
      beat (shm);
    }
}

/* Before the barrier of step @i: this rank's piece of chunk @i in. */
static void
put (UcxOp  *op,
     size_t  i)
{
  UcxShm *shm = op->comm->shm;
  unsigned world = op->comm->world_size, me = op->comm->rank;
  uint64_t step = op->shm_first_step + i;
  size_t len = step_len (op, i), at = i * op->shm_chunk_elems;

  if (op->kind == UCX_OP_REDUCE_SCATTER || op->kind == UCX_OP_ALL_TO_ALL)
    for (unsigned p = 0; p < world; p++)
      copy_beating (shm, in_buffer (shm, step, me) + p * op->shm_chunk_elems * op->esize,
                    op->send + ((size_t) p * op->count + at) * op->esize, len * op->esize);
  else
    copy_beating (shm, in_buffer (shm, step, me), op->send + at * op->esize, len * op->esize);
}

/* After the barrier of step @i: every rank's pieces are in. */
static void
take (UcxOp  *op,
      size_t  i)
{
  UcxShm *shm = op->comm->shm;
  unsigned world = op->comm->world_size, me = op->comm->rank;
  uint64_t step = op->shm_first_step + i;
  int accumulate = (op->flags & MIXPREC_PLUGIN_COMM_ACCUMULATE) != 0;

  if (op->kind == UCX_OP_ALL_REDUCE)
    {
      if (i < op->shm_chunks)
        {
          size_t len = step_len (op, i), at = i * op->shm_chunk_elems;
          size_t lo = len * me / world, hi = len * (me + 1) / world;

          for (unsigned r = 0; r < world; r++)
            op->shm_terms[r] = in_buffer (shm, step, r) + lo * op->esize;
          reduce_beating (op, out_buffer (shm, step) + lo * op->out_esize,
                          accumulate ? op->recv + (at + lo) * op->out_esize : NULL, hi - lo);
        }
      if (i > 0)
        copy_beating (shm, op->recv + (i - 1) * op->shm_chunk_elems * op->out_esize,
                      out_buffer (shm, step - 1), step_len (op, i - 1) * op->out_esize);
    }
  else if (op->kind == UCX_OP_REDUCE_SCATTER)
    {
      char *dst = op->recv + i * op->shm_chunk_elems * op->out_esize;

      for (unsigned r = 0; r < world; r++)
        op->shm_terms[r] = in_buffer (shm, step, r) + me * op->shm_chunk_elems * op->esize;
      reduce_beating (op, dst, accumulate ? dst : NULL, step_len (op, i));
    }
  else if (op->kind == UCX_OP_ALL_GATHER)
    {
      size_t len = step_len (op, i), at = i * op->shm_chunk_elems;

      for (unsigned r = 0; r < world; r++)
        copy_beating (shm, op->recv + ((size_t) r * op->count + at) * op->esize,
                      in_buffer (shm, step, r), len * op->esize);
    }
  else if (op->kind == UCX_OP_ALL_TO_ALL)
    {
      /* Rank r's piece for this rank, to block r of recv. */
      size_t len = step_len (op, i), at = i * op->shm_chunk_elems;

      for (unsigned r = 0; r < world; r++)
        copy_beating (shm, op->recv + ((size_t) r * op->count + at) * op->esize,
                      in_buffer (shm, step, r) + me * op->shm_chunk_elems * op->esize, len * op->esize);
    }
}

static UcxOp *
current_op (UcxComm *comm)
{
  for (UcxOp *op = comm->active; op != NULL; op = op->next)
    if (op->shm && !op->finished && op->shm_ticket == comm->shm->finished)
      return op;
  return NULL;
}

static uint64_t
signature (const UcxOp *op)
{
  return (uint64_t) op->kind | (uint64_t) op->dtype << 8 | (uint64_t) op->out_dtype << 16 |
         (uint64_t) op->reduce << 24 | (uint64_t) (op->flags & 0xffffffffu) << 32;
}

static const char *
dtype_name (uint64_t dtype)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
      return "float32";
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return "float16";
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return "bfloat16";
    default:
      return "other";
    }
}

/* Before the first barrier: what this rank was called with. */
static void
sign (UcxOp *op)
{
  UcxShm *shm = op->comm->shm;
  uint64_t *words = signature_words (shm, op->comm->rank, shm->signed_ops);

  words[0] = signature (op);
  words[1] = op->count;
}

/* What a signature says was called, for an error message. */
static void
describe_call (char     *buf,
               size_t    len,
               uint64_t  signature,
               uint64_t  count)
{
  if ((signature & 0xff) == UCX_OP_BARRIER)
    snprintf (buf, len, "barrier");
  else
    snprintf (buf, len, "%s of %llu %s elements (reduce op %llu, flags 0x%llx)",
              ucx_op_kind_name (signature & 0xff), (unsigned long long) count,
              dtype_name ((signature >> 8) & 0xff),
              (unsigned long long) ((signature >> 24) & 0xff),
              (unsigned long long) (signature >> 32));
}

/* After it: whether every rank was called the same way. Ranks that call
 * different collectives, or the same with other counts, dtypes or flags,
 * would otherwise fold each other's bytes silently. */
static int
check_signatures (UcxOp *op)
{
  UcxShm *shm = op->comm->shm;
  uint64_t mine = signature (op);

  for (unsigned r = 0; r < shm->world; r++)
    {
      const uint64_t *words = signature_words (shm, r, shm->signed_ops);
      char theirs[160], ours[160], message[512];

      if (words[0] == mine && words[1] == op->count)
        continue;
      describe_call (theirs, sizeof theirs, words[0], words[1]);
      describe_call (ours, sizeof ours, mine, op->count);
      snprintf (message, sizeof message, "rank %u called %s where rank %u called %s, as %s "
                "#%u: every rank must call the same collectives, with the same counts, "
                "dtypes and flags, in the same order",
                r, theirs, op->comm->rank, ours, ucx_op_name (op), op->seq);
      ucx_op_fail (op, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, message);
      return 0;
    }
  return 1;
}

/* Ends @op with the error a peer left in the segment, once written. */
static int
fail_from_peer (UcxOp    *op,
                uint32_t  by)
{
  UcxShm *shm = op->comm->shm;
  char message[1024], shown[900];
  int status;

  if (by == SHM_WRITING)
    return 0;
  status = shm->header->status == MIXPREC_PLUGIN_ERR_TIMEOUT ? MIXPREC_PLUGIN_ERR_TIMEOUT
                                                             : MIXPREC_PLUGIN_ERR_PEER_FAILED;
  /* The message is a peer's: shown escaped, within its field. */
  ucx_peer_printable (shm->header->message, sizeof shm->header->message, shown, sizeof shown);
  if (ucx_peer_broken_rank (by, shm->world) == shm->world)
    snprintf (message, sizeof message, "the shared-memory segment names rank %u, of no world of "
              "%u ranks, as the one that gave up during %s #%u", by - 1, shm->world,
              ucx_op_name (op), op->seq);
  else
    snprintf (message, sizeof message, "rank %u gave up during %s #%u: %s", by - 1,
              ucx_op_name (op), op->seq, shown);
  ucx_op_fail (op, status, message);
  return 1;
}

/* Runs @op's steps until a barrier holds it; non-zero when it moved. */
static int
advance (UcxOp *op)
{
  UcxComm *comm = op->comm;
  UcxShm *shm = comm->shm;
  int moved = 0;

  while (!op->finished)
    {
      if (op->shm_step == op->shm_steps)
        {
          op->finished = 1;
          op->status = MIXPREC_PLUGIN_OK;
          shm->steps += op->shm_chunks;
          shm->finished++;
          moved = 1;
          break;
        }
      if (!op->shm_arrived)
        {
          if (op->shm_step == 0)
            {
              op->shm_first_step = shm->steps;
              sign (op);
            }
          if (op->shm_step < op->shm_chunks)
            put (op, op->shm_step);
          arrive (comm);
          op->shm_arrived = 1;
          moved = 1;
        }
      if (!barrier_passed (shm))
        {
          /* A peer that gave up will not come: fail now, not at the
           * timeout. Only here, where this rank would have to wait: a
           * peer may give up later on, once past this operation. */
          uint32_t by = broken_by (shm);

          if (by != 0 && by != comm->rank + 1 && fail_from_peer (op, by))
            moved = 1;
          break;
        }
      if (op->shm_step == 0)
        {
          if (!check_signatures (op))
            return 1;
          shm->signed_ops++;
        }
      take (op, op->shm_step);
      op->shm_arrived = 0;
      op->shm_step++;
      moved = 1;
    }
  if (moved)
    op->stall_ns = 0;
  return moved;
}

int
ucx_shm_progress (UcxComm *comm)
{
  int moved = 0;
  UcxOp *op;

  if (comm->shm == NULL)
    return 0;
  while ((op = current_op (comm)) != NULL)
    {
      moved |= advance (op);
      if (!op->finished)
        break;
    }
  return moved;
}

int
ucx_shm_waiting (UcxComm *comm)
{
  UcxOp *op;

  if (comm->shm == NULL || (op = current_op (comm)) == NULL)
    return 0;
  return op->shm_arrived;
}

static int
wait_is_over (UcxComm *comm)
{
  return barrier_passed (comm->shm) || broken_by (comm->shm) != 0 ||
         __atomic_load_n (&comm->aborted, __ATOMIC_ACQUIRE);
}

typedef enum
{
  PEERS_RUNNING,                /* on other CPUs: spin */
  PEER_HERE,                    /* one on this rank's CPU: let it run */
  PEER_AWAY,                    /* one off its CPU, or computing: sleep */
} PeerState;

/* Where the ranks that this one waits for are. One that has shown that it
 * runs within the grace time, on another CPU, will arrive within
 * microseconds and is worth spinning for. One on this rank's CPU cannot
 * run while this rank spins there. One that has not shown it for longer
 * is off its CPU or outside the library; so are some of them when more
 * are missing than the CPUs this rank leaves free. */
static PeerState
peer_state (UcxShm *shm,
            int64_t now)
{
  uint64_t cpu = __atomic_load_n (&beat_words (shm, shm->rank)[1], __ATOMIC_RELAXED);
  PeerState state = PEERS_RUNNING;
  unsigned n_missing = 0;

  for (unsigned r = 0; r < shm->world; r++)
    {
      const uint64_t *words = beat_words (shm, r);

      if (r == shm->rank ||
          __atomic_load_n (arrived_word (shm, r), __ATOMIC_ACQUIRE) >= shm->barriers)
        continue;
      if (now - (int64_t) __atomic_load_n (&words[0], __ATOMIC_RELAXED) > SHM_BEAT_GRACE_NS)
        return PEER_AWAY;
      if (__atomic_load_n (&words[1], __ATOMIC_RELAXED) == cpu)
        state = PEER_HERE;
      n_missing++;
    }
  return n_missing >= shm->cpus ? PEER_AWAY : state;
}

void
ucx_shm_wait (UcxComm *comm,
              int64_t  spin_until,
              int64_t  timeout_ns)
{
  UcxShm *shm = comm->shm;
  uint32_t seen;
  int64_t now;

  /* Spinning, this rank runs too: say so, for the peers that will wait
   * for it at the next barrier. A peer on this CPU gets it by a yield, not
   * a sleep: this rank stays runnable, so the scheduler sees two ranks
   * queued on one CPU and moves one to another, where both can run. */
  for (;;)
    {
      PeerState state;

      beat (shm);
      now = ucx_now_ns ();
      if (now >= spin_until || (state = peer_state (shm, now)) == PEER_AWAY)
        break;
      if (state == PEER_HERE)
        sched_yield ();
      for (int i = 0; i < 64; i++)
        {
          if (wait_is_over (comm))
            return;
          cpu_relax ();
        }
    }
  /* Whoever arrives after this load changes the word, so the futex call
   * returns at once instead of sleeping through the arrival. */
  seen = __atomic_load_n (&shm->header->arrivals, __ATOMIC_SEQ_CST);
  __atomic_fetch_add (&shm->header->sleepers, 1, __ATOMIC_SEQ_CST);
  if (!wait_is_over (comm))
    futex (&shm->header->arrivals, FUTEX_WAIT, seen, timeout_ns);
  __atomic_fetch_sub (&shm->header->sleepers, 1, __ATOMIC_SEQ_CST);
  beat (shm);
}

int64_t
ucx_shm_spin_ns (const UcxComm *comm)
{
  return comm->shm != NULL ? comm->shm->spin_ns : 0;
}

unsigned
ucx_shm_missing_rank (const UcxOp *op,
                      unsigned    *n_missing)
{
  unsigned lowest = op->comm->world_size;

  *n_missing = 0;
  if (op->shm && op->shm_arrived && op->comm->shm != NULL)
    *n_missing = missing (op->comm->shm, &lowest);
  return lowest;
}
