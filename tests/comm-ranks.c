/* comm-ranks.c — one rank of test-comm's multi-process cases over the
 * comm-ucx plugin: every collective, dtype, operation and size against the
 * serial reference, several collectives outstanding at once, the
 * all-to-all of communicator revision 2, and the failure cases (a rank
 * killed or stopped midway, an abort). */
#include "config.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "mixprec-comm-private.h"
#include "comm-ranks.h"
#include "comm-reference.h"

typedef struct
{
  guint rank;
  guint world;
  MixprecComm *comm;
  guint64 hash;                 /* of every result, compared across ranks */
  guint n_cases;
  gchar *dir;                   /* the group's directory, for markers */
} Child;

typedef enum
{
  COLL_ALL_REDUCE,
  COLL_REDUCE_SCATTER,
  COLL_ALL_GATHER,
  COLL_BROADCAST,
} Coll;

static const gchar * const coll_names[] = { "all_reduce", "reduce_scatter", "all_gather", "broadcast" };

typedef struct
{
  Coll coll;
  MixprecDType dtype;
  MixprecReduceOp op;
  guint flags;
  gsize count;
  gboolean in_place;
  guint root;
} Case;

/* A started case: its buffers, kept until it is checked. */
typedef struct
{
  Case k;
  guint salt;
  guint8 *send;
  guint8 *recv;
  guint8 *start;                /* recv before the call, for ACCUMULATE */
  MixprecCommRequest *request;
} Run;

static void
hash_bytes (Child        *c,
            gconstpointer data,
            gsize         len)
{
  const guint8 *p = data;

  for (gsize i = 0; i < len; i++)
    c->hash = (c->hash ^ p[i]) * G_GUINT64_CONSTANT (0x100000001b3);
}

static MixprecDType
out_dtype (const Case *k)
{
  return (k->flags & MIXPREC_COMM_RECV_FP32) ? MIXPREC_DTYPE_FLOAT32 : k->dtype;
}

static void
run_prepare (Child *c,
             Run   *r)
{
  const Case *k = &r->k;
  gsize es = mixprec_dtype_get_size (k->dtype);
  gsize out_es = mixprec_dtype_get_size (out_dtype (k));
  gsize n_send = k->coll == COLL_REDUCE_SCATTER ? c->world * k->count : k->count;
  gsize n_recv = k->coll == COLL_ALL_GATHER ? c->world * k->count : k->count;

  r->send = g_malloc (MAX (n_send * es, 1));
  r->recv = g_malloc (MAX (n_recv * out_es, 1));
  r->start = g_malloc (MAX (n_recv * out_es, 1));
  for (gsize i = 0; i < n_send; i++)
    store_bits (k->dtype, r->send, i, input_bits (k->dtype, c->rank, c->world, i, r->salt));
  /* recv's first term: the same on every rank for an all_reduce, this
   * rank's own for a reduce_scatter. */
  for (gsize i = 0; i < n_recv; i++)
    store_bits (out_dtype (k), r->start, i,
                input_bits (out_dtype (k), k->coll == COLL_ALL_REDUCE ? 0 : c->rank + 7, 64, i,
                            r->salt + 1000));
  memcpy (r->recv, r->start, n_recv * out_es);
  if (k->coll == COLL_BROADCAST)
    memcpy (r->recv, r->send, k->count * es);
  if (k->in_place && k->coll == COLL_ALL_REDUCE)
    memcpy (r->recv, r->send, k->count * es);
}

static gpointer
run_send_ptr (Child *c,
              Run   *r)
{
  const Case *k = &r->k;
  gsize es = mixprec_dtype_get_size (k->dtype);

  if (!k->in_place)
    return r->send;
  switch (k->coll)
    {
    case COLL_ALL_REDUCE:
      return r->recv;
    case COLL_ALL_GATHER:
      memcpy (r->recv + c->rank * k->count * es, r->send, k->count * es);
      return r->recv + c->rank * k->count * es;
    default:
      return r->send;
    }
}

static gpointer
run_recv_ptr (Child *c,
              Run   *r)
{
  const Case *k = &r->k;

  if (k->in_place && k->coll == COLL_REDUCE_SCATTER)
    return r->send + c->rank * k->count * mixprec_dtype_get_size (k->dtype);
  return r->recv;
}

/* Runs the case blocking (@request NULL) or starts it. */
static gboolean
run_start (Child               *c,
           Run                 *r,
           MixprecCommRequest **request,
           GError             **error)
{
  const Case *k = &r->k;
  gpointer send = run_send_ptr (c, r), recv = run_recv_ptr (c, r);

  switch (k->coll)
    {
    case COLL_ALL_REDUCE:
      if (request != NULL)
        return (*request = mixprec_comm_all_reduce_start (c->comm, send, recv, k->count, k->dtype,
                                                          k->op, k->flags, error)) != NULL;
      return mixprec_comm_all_reduce (c->comm, send, recv, k->count, k->dtype, k->op, k->flags,
                                      error);
    case COLL_REDUCE_SCATTER:
      if (request != NULL)
        return (*request = mixprec_comm_reduce_scatter_start (c->comm, send, recv, k->count,
                                                              k->dtype, k->op, k->flags,
                                                              error)) != NULL;
      return mixprec_comm_reduce_scatter (c->comm, send, recv, k->count, k->dtype, k->op,
                                          k->flags, error);
    case COLL_ALL_GATHER:
      if (request != NULL)
        return (*request = mixprec_comm_all_gather_start (c->comm, send, recv, k->count,
                                                          k->dtype, error)) != NULL;
      return mixprec_comm_all_gather (c->comm, send, recv, k->count, k->dtype, error);
    case COLL_BROADCAST:
    default:
      if (request != NULL)
        return (*request = mixprec_comm_broadcast_start (c->comm, recv, k->count, k->dtype,
                                                         k->root, error)) != NULL;
      return mixprec_comm_broadcast (c->comm, recv, k->count, k->dtype, k->root, error);
    }
}

/* Compares a finished case with the serial reference; FALSE with @why. */
static gboolean
run_check (Child   *c,
           Run     *r,
           GString *why)
{
  const Case *k = &r->k;
  MixprecDType od = out_dtype (k);
  const guint8 *result = run_recv_ptr (c, r);
  gsize n = k->coll == COLL_ALL_GATHER ? c->world * k->count : k->count;

  for (gsize i = 0; i < n; i++)
    {
      guint32 got = load_bits (od, result, i);
      gboolean ok;
      gfloat acc = 0;

      if (k->coll == COLL_ALL_GATHER)
        ok = got == input_bits (k->dtype, (guint) (i / k->count), c->world, i % k->count, r->salt);
      else if (k->coll == COLL_BROADCAST)
        ok = got == input_bits (k->dtype, k->root, c->world, i, r->salt);
      else
        {
          gsize at = k->coll == COLL_REDUCE_SCATTER ? c->rank * k->count + i : i;
          guint first = 0;

          if (k->flags & MIXPREC_COMM_ACCUMULATE)
            acc = bits_value (od, load_bits (od, r->start, i));
          else
            acc = bits_value (k->dtype, input_bits (k->dtype, first++, c->world, at, r->salt));
          for (guint q = first; q < c->world; q++)
            acc = fold (k->op, acc, bits_value (k->dtype, input_bits (k->dtype, q, c->world, at, r->salt)));
          ok = matches (od, got, acc);
        }
      if (!ok)
        {
          g_string_append_printf (why, "%s of %" G_GSIZE_FORMAT " %s (op %d, flags 0x%x, %s, "
                                  "root %u) on rank %u of %u: element %" G_GSIZE_FORMAT
                                  " is 0x%x, expected %.9g",
                                  coll_names[k->coll], k->count, mixprec_dtype_get_name (k->dtype),
                                  k->op, k->flags, k->in_place ? "in place" : "apart", k->root,
                                  c->rank, c->world, i, got, (gdouble) acc);
          return FALSE;
        }
    }
  /* A reduce_scatter leaves each rank a different part. */
  if (k->coll != COLL_REDUCE_SCATTER)
    hash_bytes (c, result, n * mixprec_dtype_get_size (od));
  return TRUE;
}

static void
run_clear (Run *r)
{
  g_free (r->send);
  g_free (r->recv);
  g_free (r->start);
  g_clear_object (&r->request);
}

static gboolean
run_case (Child      *c,
          const Case *k,
          GString    *why)
{
  g_autoptr(GError) error = NULL;
  Run r = { *k, c->n_cases++, NULL, NULL, NULL, NULL };
  gboolean ok;

  run_prepare (c, &r);
  if (!run_start (c, &r, NULL, &error))
    {
      g_string_append_printf (why, "%s of %" G_GSIZE_FORMAT " %s failed: %s", coll_names[k->coll],
                              k->count, mixprec_dtype_get_name (k->dtype), error->message);
      run_clear (&r);
      return FALSE;
    }
  ok = run_check (c, &r, why);
  run_clear (&r);
  return ok;
}

/* Several collectives outstanding at once, tested, then waited for in
 * reverse order. Seven of them reduce, more than the plugin receives at
 * once (two by default), so later ones queue and start as earlier ones
 * finish, whichever request the caller waits for. */
static gboolean
run_concurrent (Child   *c,
                GString *why)
{
  const Case cases[] = {
    { COLL_ALL_REDUCE, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, (1 << 18) + 5, FALSE, 0 },
    { COLL_REDUCE_SCATTER, MIXPREC_DTYPE_BFLOAT16, MIXPREC_REDUCE_SUM, MIXPREC_COMM_ACCUMULATE, 1001, FALSE, 0 },
    { COLL_ALL_GATHER, MIXPREC_DTYPE_FLOAT16, 0, 0, 1001, FALSE, 0 },
    { COLL_BROADCAST, MIXPREC_DTYPE_FLOAT32, 0, 0, 4099, FALSE, c->world - 1 },
    { COLL_ALL_REDUCE, MIXPREC_DTYPE_FLOAT16, MIXPREC_REDUCE_MAX, 0, 1001, FALSE, 0 },
    { COLL_ALL_REDUCE, MIXPREC_DTYPE_BFLOAT16, MIXPREC_REDUCE_SUM, MIXPREC_COMM_RECV_FP32, 70001, FALSE, 0 },
    { COLL_REDUCE_SCATTER, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, (1 << 16) + 7, FALSE, 0 },
    { COLL_ALL_GATHER, MIXPREC_DTYPE_FLOAT32, 0, 0, 40000, FALSE, 0 },
    { COLL_REDUCE_SCATTER, MIXPREC_DTYPE_BFLOAT16, MIXPREC_REDUCE_SUM, MIXPREC_COMM_RECV_FP32, 50001, FALSE, 0 },
    { COLL_REDUCE_SCATTER, MIXPREC_DTYPE_FLOAT16, MIXPREC_REDUCE_MAX, 0, 3, FALSE, 0 },
  };
  Run runs[G_N_ELEMENTS (cases)];
  g_autoptr(MixprecCommRequest) barrier = NULL;
  g_autoptr(GError) error = NULL;
  gboolean ok = TRUE;

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      runs[i] = (Run) { cases[i], c->n_cases++, NULL, NULL, NULL, NULL };
      run_prepare (c, &runs[i]);
      if (!run_start (c, &runs[i], &runs[i].request, &error))
        {
          g_string_append_printf (why, "starting concurrent case %" G_GSIZE_FORMAT ": %s", i,
                                  error->message);
          for (gsize j = 0; j <= i; j++)
            run_clear (&runs[j]);
          return FALSE;
        }
    }
  barrier = mixprec_comm_barrier_start (c->comm, &error);
  for (gsize i = 0; i < G_N_ELEMENTS (cases) && error == NULL; i++)
    mixprec_comm_request_test (runs[i].request, &error);
  for (gsize i = G_N_ELEMENTS (cases); i > 0 && error == NULL; i--)
    if (mixprec_comm_request_wait (runs[i - 1].request, &error))
      ok = ok && run_check (c, &runs[i - 1], why);
  if (error == NULL)
    mixprec_comm_request_wait (barrier, &error);
  if (error != NULL)
    {
      g_string_append_printf (why, "concurrent collectives: %s", error->message);
      ok = FALSE;
    }
  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    run_clear (&runs[i]);
  return ok;
}

static gboolean
scenario_collectives (Child   *c,
                      GString *why)
{
  const MixprecDType dtypes[] = { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16 };
  const gsize sizes[] = { 0, 1, c->world - 1, 1001, (1 << 20) + 3 };
  const gsize odd = 3;
  g_autoptr(GError) error = NULL;
  guint64 *hashes;
  Case k;

  for (gsize d = 0; d < G_N_ELEMENTS (dtypes); d++)
    for (gsize s = 0; s < G_N_ELEMENTS (sizes); s++)
      {
        /* reduce_scatter sends world times its count: keep that a few MiB. */
        gsize rs_count = s == G_N_ELEMENTS (sizes) - 1 ? (1 << 18) + 3 : sizes[s];

        for (gint op = MIXPREC_REDUCE_SUM; op <= MIXPREC_REDUCE_MAX; op++)
          {
            k = (Case) { COLL_ALL_REDUCE, dtypes[d], op, 0, sizes[s], FALSE, 0 };
            if (!run_case (c, &k, why))
              return FALSE;
            k.coll = COLL_REDUCE_SCATTER;
            k.count = rs_count;
            if (!run_case (c, &k, why))
              return FALSE;
            if (s != odd)
              continue;
            /* RECV_FP32, ACCUMULATE, in place, and RECV_FP32 with ACCUMULATE. */
            for (guint variant = 0; variant < 5; variant++)
              {
                guint flags = variant == 1 ? MIXPREC_COMM_ACCUMULATE : 0;
                gboolean in_place = variant == 2;

                if (variant == 4)
                  flags = MIXPREC_COMM_RECV_FP32 | MIXPREC_COMM_ACCUMULATE;
                else if (variant == 0)
                  flags = MIXPREC_COMM_RECV_FP32;
                if ((flags & MIXPREC_COMM_RECV_FP32) && dtypes[d] == MIXPREC_DTYPE_FLOAT32)
                  continue;
                /* In place, recv's first term would be each rank's own
                 * data: all_reduce needs it equal on every rank, and
                 * reduce_scatter refuses it. */
                if (in_place && (flags & MIXPREC_COMM_ACCUMULATE))
                  continue;
                k = (Case) { COLL_ALL_REDUCE, dtypes[d], op, flags, sizes[s], in_place, 0 };
                if (!run_case (c, &k, why))
                  return FALSE;
                k.coll = COLL_REDUCE_SCATTER;
                k.count = rs_count;
                if (!run_case (c, &k, why))
                  return FALSE;
              }
          }
        k = (Case) { COLL_ALL_GATHER, dtypes[d], 0, 0, rs_count, FALSE, 0 };
        if (!run_case (c, &k, why))
          return FALSE;
        k.in_place = TRUE;
        if (s == odd && !run_case (c, &k, why))
          return FALSE;
        k = (Case) { COLL_BROADCAST, dtypes[d], 0, 0, sizes[s], FALSE, (guint) (s + d) % c->world };
        if (!run_case (c, &k, why))
          return FALSE;
      }

  if (!run_concurrent (c, why))
    return FALSE;

  /* Dropping a started collective waits for it. */
  {
    gfloat x[3] = { 1.0f + c->rank, 2, 3 }, y[3] = { 0 };
    MixprecCommRequest *r = mixprec_comm_all_reduce_start (c->comm, x, y, 3, MIXPREC_DTYPE_FLOAT32,
                                                           MIXPREC_REDUCE_SUM, 0, &error);

    if (r == NULL)
      {
        g_string_append_printf (why, "a last all_reduce: %s", error->message);
        return FALSE;
      }
    mixprec_comm_request_free (r);
    if (y[0] != (gfloat) (c->world * (c->world + 1) / 2) || y[2] != 3.0f * c->world)
      {
        g_string_append_printf (why, "a dropped all_reduce gave %g %g %g", y[0], y[1], y[2]);
        return FALSE;
      }
  }

  /* Every rank saw the same bits. */
  hashes = g_new0 (guint64, c->world);
  if (!mixprec_comm_all_gather (c->comm, &c->hash, hashes, 2, MIXPREC_DTYPE_FLOAT32, &error))
    {
      g_string_append_printf (why, "gathering result hashes: %s", error->message);
      g_free (hashes);
      return FALSE;
    }
  for (guint q = 0; q < c->world; q++)
    if (hashes[q] != hashes[0])
      {
        g_string_append_printf (why, "rank %u's results differ from rank 0's", q);
        g_free (hashes);
        return FALSE;
      }
  g_free (hashes);
  g_printerr ("rank %u: %u cases, results identical on all %u ranks\n", c->rank, c->n_cases, c->world);
  return mixprec_comm_barrier (c->comm, NULL);
}

/* The CPU time this process has used, user and system, in µs. */
static gint64
cpu_time_us (void)
{
  struct rusage usage;

  getrusage (RUSAGE_SELF, &usage);
  return (gint64) (usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000 +
         usage.ru_utime.tv_usec + usage.ru_stime.tv_usec;
}

/* The victim's ways of vanishing, from its SIGALRM handler. */
static void
kill_self (int sig)
{
  raise (SIGKILL);
}

static void
stop_self (int sig)
{
  raise (SIGSTOP);
}

/* A barrier that rank @victim leaves the job after. The victim must not
 * vanish while a peer still finishes that barrier: a message it sent just
 * before dying can be lost with it (a TCP reset drops what the peer had
 * not read yet), and the peer would then rightly fail the barrier instead
 * of the collective under test. So the others say, outside UCX, that they
 * are through, and the victim returns once all of them have. */
static gboolean
barrier_before_victim_leaves (Child   *c,
                              guint    victim,
                              GString *why)
{
  g_autoptr(GError) error = NULL;

  if (!mixprec_comm_barrier (c->comm, &error))
    {
      g_string_append_printf (why, "first barrier: %s", error->message);
      return FALSE;
    }
  if (c->rank != victim)
    {
      g_autofree gchar *marker = g_strdup_printf ("%s/through-barrier-%u", c->dir, c->rank);

      if (!g_file_set_contents (marker, "", 0, &error))
        {
          g_string_append_printf (why, "marker: %s", error->message);
          return FALSE;
        }
      return TRUE;
    }
  for (guint r = 0; r < victim; r++)
    {
      g_autofree gchar *marker = g_strdup_printf ("%s/through-barrier-%u", c->dir, r);

      while (!g_file_test (marker, G_FILE_TEST_EXISTS))
        g_usleep (1000);
    }
  return TRUE;
}

/* A big collective that the victim (the last rank) leaves midway: killed
 * (@stop FALSE) or stopped (@stop TRUE). The others must fail with an
 * error that names it, within the timeout. */
static gboolean
scenario_lose_rank (Child    *c,
                    gboolean  stop,
                    GString  *why)
{
  guint victim = c->world - 1;
  gsize n = (gsize) 8 << 20;
  g_autofree gfloat *send = g_new0 (gfloat, n);
  g_autofree gfloat *recv = g_new0 (gfloat, n);
  g_autoptr(GError) error = NULL;
  g_autofree gchar *name = g_strdup_printf ("rank %u", victim);
  gint64 start, cpu_start;
  gint64 elapsed_ms, cpu_ms;

  if (!barrier_before_victim_leaves (c, victim, why))
    return FALSE;
  if (c->rank == victim)
    {
      MixprecCommRequest *r;
      struct sigaction vanish = { 0 };
      /* A millisecond: far less than moving 32 MiB takes, at any pace. */
      const struct itimerval soon = { { 0, 0 }, { 0, 1000 } };

      /* Let some of it flow, then vanish midway. Not after a count of
       * polls: on the shared-memory path one poll moves every chunk the
       * peers keep pace with, so with a free core each it could carry the
       * whole collective, and the others would rightly succeed. A timer
       * stops or kills the victim while it polls instead. */
      vanish.sa_handler = stop ? stop_self : kill_self;
      sigaction (SIGALRM, &vanish, NULL);
      setitimer (ITIMER_REAL, &soon, NULL);
      r = mixprec_comm_all_reduce_start (c->comm, send, recv, n, MIXPREC_DTYPE_FLOAT32,
                                         MIXPREC_REDUCE_SUM, 0, &error);
      while (r != NULL && !mixprec_comm_request_test (r, NULL))
        ;
      /* Finished (or failed to start) within the millisecond: wait for the
       * timer, and the others report that they succeeded. A stopped
       * victim is killed by the parent; neither gets past here. */
      for (;;)
        pause ();
    }

  start = g_get_monotonic_time ();
  cpu_start = cpu_time_us ();
  if (mixprec_comm_all_reduce (c->comm, send, recv, n, MIXPREC_DTYPE_FLOAT32,
                               MIXPREC_REDUCE_SUM, 0, &error))
    {
      g_string_append (why, "the all_reduce succeeded without the victim");
      return FALSE;
    }
  elapsed_ms = (g_get_monotonic_time () - start) / 1000;
  cpu_ms = (cpu_time_us () - cpu_start) / 1000;
  g_printerr ("rank %u: %" G_GINT64_FORMAT " ms of CPU time while waiting\n", c->rank, cpu_ms);
  /* A rank that waits for a stopped peer sleeps: spinning would hold a
   * CPU for the whole timeout, for nothing. */
  if (stop && cpu_ms * 4 > elapsed_ms)
    {
      g_string_append_printf (why, "waiting %" G_GINT64_FORMAT " ms for the stopped rank "
                              "took %" G_GINT64_FORMAT " ms of CPU time: it spun instead of "
                              "sleeping", elapsed_ms, cpu_ms);
      return FALSE;
    }
  g_printerr ("rank %u: failed after %" G_GINT64_FORMAT " ms: %s\n", c->rank, elapsed_ms, error->message);
  if (!(g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_TIMEOUT) ||
        (!stop && g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_PEER_FAILED))))
    {
      g_string_append_printf (why, "unexpected error (code %d): %s", error->code, error->message);
      return FALSE;
    }
  if (strstr (error->message, name) == NULL)
    {
      g_string_append_printf (why, "the error does not name %s: %s", name, error->message);
      return FALSE;
    }
  if (elapsed_ms > CHILD_TIMEOUT_MS + 2000)
    {
      g_string_append_printf (why, "the failure took %" G_GINT64_FORMAT " ms, more than the "
                              "%d ms timeout allows", elapsed_ms, CHILD_TIMEOUT_MS);
      return FALSE;
    }
  /* The communicator stays broken, and says so at once. */
  g_clear_error (&error);
  start = g_get_monotonic_time ();
  if (mixprec_comm_barrier (c->comm, &error) ||
      !(error->code == MIXPREC_COMM_ERROR_TIMEOUT || error->code == MIXPREC_COMM_ERROR_PEER_FAILED) ||
      strstr (error->message, "broken by an earlier failure") == NULL ||
      g_get_monotonic_time () - start > 500000)
    {
      g_string_append_printf (why, "the next collective did not fail at once: %s",
                              error != NULL ? error->message : "it succeeded");
      return FALSE;
    }
  return TRUE;
}

/* Byte @i of the run rank @from sends rank @to. */
static guint8
a2a_byte (guint from, guint to, gsize i, gsize bytes)
{
  return (guint8) (from * 131u + to * 17u + i * 7u + (i >> 9) + bytes);
}

/* all_to_all_v's run from rank @from to rank @to: empty for some pairs,
 * several chunks for others. */
static gsize
a2av_len (guint from,
          guint to)
{
  if ((from + 2 * to) % 4 == 1)
    return 0;
  return ((from * 3 + to * 5) % 7) * 40000 + (from + to) % 3;
}

/* all_to_all_v, twice: runs of their own size for every pair (some
 * empty, offsets packed in rank order, the send runs in reverse), and
 * the group gather of hpZ (one buffer sent whole to each rank of this
 * rank's pair, {0, 1}, {2, 3}, ..., overlapping send runs, nothing to the
 * rest). Each received run is checked byte for byte, and the bytes
 * counted as sent are exactly the runs to the other ranks. */
static gboolean
all_to_all_v_cases (Child   *c,
                    GString *why)
{
  guint w = c->world, me = c->rank;
  g_autofree gsize *sl = g_new0 (gsize, w), *so = g_new0 (gsize, w);
  g_autofree gsize *rl = g_new0 (gsize, w), *ro = g_new0 (gsize, w);
  g_autofree guint8 *send = NULL, *recv = NULL;
  guint64 before[_MIXPREC_COMM_N_CLASSES][2], after[_MIXPREC_COMM_N_CLASSES][2];
  guint64 expect = 0;
  g_autoptr(GError) error = NULL;
  MixprecCommRequest *r;
  gsize total_s = 0, total_r = 0, mine = 70001;

  for (guint p = w; p-- > 0;)
    {
      sl[p] = a2av_len (me, p);
      so[p] = total_s;
      total_s += sl[p];
      expect += p != me ? sl[p] : 0;
    }
  for (guint p = 0; p < w; p++)
    {
      rl[p] = a2av_len (p, me);
      ro[p] = total_r;
      total_r += rl[p];
    }
  send = g_malloc (total_s + 1);
  recv = g_malloc0 (total_r + 1);
  for (guint p = 0; p < w; p++)
    for (gsize i = 0; i < sl[p]; i++)
      send[so[p] + i] = a2a_byte (me, p, i, sl[p]);
  _mixprec_comm_get_sent (c->comm, before);
  r = _mixprec_comm_all_to_all_v_start (c->comm, send, sl, so, recv, rl, ro, &error);
  if (r == NULL || !mixprec_comm_request_wait (r, &error))
    {
      g_string_append_printf (why, "all_to_all_v: %s", error->message);
      g_clear_pointer (&r, mixprec_comm_request_free);
      return FALSE;
    }
  mixprec_comm_request_free (r);
  _mixprec_comm_get_sent (c->comm, after);
  for (guint p = 0; p < w; p++)
    for (gsize i = 0; i < rl[p]; i++)
      if (recv[ro[p] + i] != a2a_byte (p, me, i, rl[p]))
        {
          g_string_append_printf (why, "all_to_all_v: byte %zu of %zu from rank %u is 0x%02x, "
                                  "rank %u sent 0x%02x", i, rl[p], p, recv[ro[p] + i], p,
                                  a2a_byte (p, me, i, rl[p]));
          return FALSE;
        }
  if (after[_MIXPREC_COMM_GRADIENTS][0] + after[_MIXPREC_COMM_GRADIENTS][1] -
      before[_MIXPREC_COMM_GRADIENTS][0] - before[_MIXPREC_COMM_GRADIENTS][1] != expect)
    {
      g_string_append_printf (why, "all_to_all_v: counted %" G_GUINT64_FORMAT " bytes sent, "
                              "its runs to other ranks hold %" G_GUINT64_FORMAT,
                              after[_MIXPREC_COMM_GRADIENTS][0] + after[_MIXPREC_COMM_GRADIENTS][1] -
                              before[_MIXPREC_COMM_GRADIENTS][0] - before[_MIXPREC_COMM_GRADIENTS][1],
                              expect);
      return FALSE;
    }

  /* The group gather: this rank's buffer to each rank of its pair. */
  g_free (send);
  g_free (recv);
  send = g_malloc (mine);
  recv = g_malloc0 (2 * mine);
  for (gsize i = 0; i < mine; i++)
    send[i] = a2a_byte (me, me ^ 1, i, mine);
  for (guint p = 0; p < w; p++)
    {
      gboolean member = p / 2 == me / 2;

      sl[p] = rl[p] = member ? mine : 0;
      so[p] = 0;
      ro[p] = member ? (p % 2) * mine : 0;
    }
  if (!_mixprec_comm_all_to_all_v (c->comm, send, sl, so, recv, rl, ro, &error))
    {
      g_string_append_printf (why, "all_to_all_v (a group gather): %s", error->message);
      return FALSE;
    }
  for (guint p = me / 2 * 2; p < MIN (me / 2 * 2 + 2, w); p++)
    for (gsize i = 0; i < mine; i++)
      if (recv[(p % 2) * mine + i] != a2a_byte (p, p ^ 1, i, mine))
        {
          g_string_append_printf (why, "all_to_all_v (a group gather): byte %zu from rank %u "
                                  "is 0x%02x", i, p, recv[(p % 2) * mine + i]);
          return FALSE;
        }
  c->n_cases += 2;
  return TRUE;
}

/* The all-to-all: every size from nothing to several chunks, several
 * outstanding at once, each run checked byte for byte against what its
 * sender put there; then all_to_all_v_cases(). */
static gboolean
scenario_all_to_all (Child   *c,
                     GString *why)
{
  const gsize sizes[] = { 0, 1, 1001, (gsize) 3 << 18, 4096 };
  MixprecCommRequest *requests[G_N_ELEMENTS (sizes)] = { NULL };
  guint8 *send[G_N_ELEMENTS (sizes)], *recv[G_N_ELEMENTS (sizes)];
  g_autoptr(GError) error = NULL;
  gboolean ok = TRUE;

  for (gsize s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      send[s] = g_malloc (sizes[s] * c->world + 1);
      recv[s] = g_malloc0 (sizes[s] * c->world + 1);
      for (guint to = 0; to < c->world; to++)
        for (gsize i = 0; i < sizes[s]; i++)
          send[s][to * sizes[s] + i] = a2a_byte (c->rank, to, i, sizes[s]);
    }
  /* The first blocking, the others started together and waited in
   * reverse order. */
  if (!_mixprec_comm_all_to_all (c->comm, send[0], recv[0], sizes[0], &error))
    {
      g_string_append_printf (why, "all_to_all of %zu bytes: %s", sizes[0], error->message);
      ok = FALSE;
    }
  for (gsize s = 1; ok && s < G_N_ELEMENTS (sizes); s++)
    if ((requests[s] = _mixprec_comm_all_to_all_start (c->comm, send[s], recv[s], sizes[s],
                                                       &error)) == NULL)
      {
        g_string_append_printf (why, "starting all_to_all of %zu bytes: %s", sizes[s],
                                error->message);
        ok = FALSE;
      }
  for (gsize s = G_N_ELEMENTS (sizes); s-- > 1;)
    if (requests[s] != NULL)
      {
        if (ok && !mixprec_comm_request_wait (requests[s], &error))
          {
            g_string_append_printf (why, "all_to_all of %zu bytes: %s", sizes[s], error->message);
            ok = FALSE;
          }
        mixprec_comm_request_free (requests[s]);
      }
  for (gsize s = 0; ok && s < G_N_ELEMENTS (sizes); s++)
    for (guint from = 0; ok && from < c->world; from++)
      for (gsize i = 0; ok && i < sizes[s]; i++)
        if (recv[s][from * sizes[s] + i] != a2a_byte (from, c->rank, i, sizes[s]))
          {
            g_string_append_printf (why, "all_to_all of %zu bytes: byte %zu from rank %u is "
                                    "0x%02x, rank %u sent 0x%02x", sizes[s], i, from,
                                    recv[s][from * sizes[s] + i], from,
                                    a2a_byte (from, c->rank, i, sizes[s]));
            ok = FALSE;
          }
  for (gsize s = 0; s < G_N_ELEMENTS (sizes); s++)
    {
      g_free (send[s]);
      g_free (recv[s]);
    }
  if (!ok)
    return FALSE;
  c->n_cases += G_N_ELEMENTS (sizes);
  if (!all_to_all_v_cases (c, why))
    return FALSE;
  g_printerr ("rank %u: %u all_to_all and all_to_all_v cases, every run as its sender wrote it\n",
              c->rank, c->n_cases);
  return mixprec_comm_barrier (c->comm, NULL);
}

/* An all-to-all that the victim (the last rank) never joins: it kills
 * itself once the others are through a barrier. They must fail with an
 * error naming it, within the timeout. */
static gboolean
scenario_all_to_all_lose_rank (Child   *c,
                               GString *why)
{
  guint victim = c->world - 1;
  gsize bytes = (gsize) 1 << 20;
  g_autofree guint8 *send = g_malloc0 (bytes * c->world);
  g_autofree guint8 *recv = g_malloc0 (bytes * c->world);
  g_autofree gchar *name = g_strdup_printf ("rank %u", victim);
  g_autoptr(GError) error = NULL;
  gint64 start, elapsed_ms;

  if (!barrier_before_victim_leaves (c, victim, why))
    return FALSE;
  if (c->rank == victim)
    raise (SIGKILL);
  start = g_get_monotonic_time ();
  if (_mixprec_comm_all_to_all (c->comm, send, recv, bytes, &error))
    {
      g_string_append (why, "the all_to_all succeeded without the victim");
      return FALSE;
    }
  elapsed_ms = (g_get_monotonic_time () - start) / 1000;
  g_printerr ("rank %u: failed after %" G_GINT64_FORMAT " ms: %s\n", c->rank, elapsed_ms,
              error->message);
  if (!g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_TIMEOUT) &&
      !g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_PEER_FAILED))
    {
      g_string_append_printf (why, "unexpected error (code %d): %s", error->code, error->message);
      return FALSE;
    }
  if (strstr (error->message, name) == NULL || strstr (error->message, "all_to_all") == NULL)
    {
      g_string_append_printf (why, "the error does not name %s and the all_to_all: %s", name,
                              error->message);
      return FALSE;
    }
  if (elapsed_ms > CHILD_TIMEOUT_MS + 2000)
    {
      g_string_append_printf (why, "the failure took %" G_GINT64_FORMAT " ms, more than the "
                              "%d ms timeout allows", elapsed_ms, CHILD_TIMEOUT_MS);
      return FALSE;
    }
  return TRUE;
}

/* The ranks call all_reduce with different counts (@barrier FALSE), or
 * rank 0 a barrier where rank 1 calls all_reduce: through shared memory
 * every rank must fail with an error that says so and names the other. */
static gboolean
scenario_mismatch (Child    *c,
                   gboolean  barrier,
                   GString  *why)
{
  gfloat x[1000] = { 0 }, y[1000];
  gsize count = c->rank == 0 ? 1000 : 999;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *expected = NULL;
  gboolean ok;

  if (!barrier)
    expected = g_strdup_printf ("rank %u called all_reduce of %u float32 elements",
                                1 - c->rank, c->rank == 0 ? 999 : 1000);
  else if (c->rank == 0)
    expected = g_strdup ("rank 1 called all_reduce of 999 float32 elements (reduce op 0, "
                         "flags 0x0) where rank 0 called barrier, as barrier #");
  else
    expected = g_strdup ("rank 0 called barrier where rank 1 called all_reduce of 999 float32 "
                         "elements");
  if (barrier && c->rank == 0)
    ok = mixprec_comm_barrier (c->comm, &error);
  else
    ok = mixprec_comm_all_reduce (c->comm, x, y, count, MIXPREC_DTYPE_FLOAT32,
                                  MIXPREC_REDUCE_SUM, 0, &error);
  if (ok)
    {
      g_string_append (why, "mismatched collectives succeeded");
      return FALSE;
    }
  g_printerr ("rank %u: %s\n", c->rank, error->message);
  if (!g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT) ||
      strstr (error->message, expected) == NULL ||
      strstr (error->message, "every rank must call the same collectives") == NULL)
    {
      g_string_append_printf (why, "expected an INVALID_ARGUMENT error saying \"%s\": %s",
                              expected, error->message);
      return FALSE;
    }
  return TRUE;
}

static gpointer
abort_later (gpointer data)
{
  g_usleep (200000);
  mixprec_comm_abort (data);
  return NULL;
}

/* Rank 0 waits for a collective rank 1 never joins; another thread aborts. */
static gboolean
scenario_abort (Child   *c,
                GString *why)
{
  gfloat x[1000] = { 0 };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecCommRequest) r = NULL;
  GThread *thread;
  gint64 start;

  if (c->rank != 0)
    {
      g_usleep (500000);
      return TRUE;
    }
  r = mixprec_comm_all_reduce_start (c->comm, x, x, 1000, MIXPREC_DTYPE_FLOAT32,
                                     MIXPREC_REDUCE_SUM, 0, &error);
  start = g_get_monotonic_time ();
  thread = g_thread_new ("abort", abort_later, c->comm);
  if (r == NULL || mixprec_comm_request_wait (r, &error))
    {
      g_string_append (why, "the all_reduce did not fail");
      g_thread_join (thread);
      return FALSE;
    }
  g_thread_join (thread);
  g_printerr ("rank 0: aborted after %" G_GINT64_FORMAT " ms: %s\n",
              (g_get_monotonic_time () - start) / 1000, error->message);
  /* Without the abort the wait would last the timeout and end TIMEOUT. */
  if (!g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_ABORTED) ||
      g_get_monotonic_time () - start >= CHILD_TIMEOUT_MS * 1000)
    {
      g_string_append_printf (why, "expected an ABORTED error before the timeout: %s",
                              error->message);
      return FALSE;
    }
  g_clear_error (&error);
  if (mixprec_comm_barrier (c->comm, &error) ||
      !g_error_matches (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_ABORTED))
    {
      g_string_append (why, "a collective after the abort did not fail as aborted");
      return FALSE;
    }
  return TRUE;
}

/* Whether this rank maps comm-ucx's shared segment, as the parent expects
 * (MIXPREC_TEST_EXPECT_SHM): its name is gone from /dev/shm once every
 * rank mapped it, but the mapping stays in the process's map. */
static gboolean
check_shared_memory (Child   *c,
                     GString *why)
{
  const gchar *expect = g_getenv ("MIXPREC_TEST_EXPECT_SHM");
  g_autofree gchar *maps = NULL;
  gboolean mapped;

  if (expect == NULL)
    return TRUE;
  if (!g_file_get_contents ("/proc/self/maps", &maps, NULL, NULL))
    {
      g_string_append (why, "cannot read /proc/self/maps");
      return FALSE;
    }
  mapped = strstr (maps, "/dev/shm/mixprec-ucx-") != NULL;
  if (mapped != g_str_equal (expect, "1"))
    {
      g_string_append_printf (why, "the shared-memory segment is %s, expected %s",
                              mapped ? "mapped" : "not mapped",
                              g_str_equal (expect, "1") ? "mapped" : "not mapped");
      return FALSE;
    }
  g_printerr ("rank %u: shared-memory segment %s, as expected\n", c->rank,
              mapped ? "mapped" : "not mapped");
  return TRUE;
}

int
comm_ranks_main (int    argc,
                 char **argv)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = NULL;
  g_autoptr(GString) why = g_string_new (NULL);
  Child c = { 0 };
  const gchar *scenario;
  guint port;
  gboolean ok;
  FILE *log;

  if (argc != 7)
    return 2;
  log = freopen (argv[6], "w", stderr);
  if (log == NULL)
    return 2;
  setvbuf (stderr, NULL, _IOLBF, 0);
  /* UCX logs to stdout, which is the parent's TAP stream. */
  if (dup2 (fileno (stderr), STDOUT_FILENO) < 0)
    return 2;
  /* Whatever happens, this rank does not outlive the test. */
  alarm (GROUP_DEADLINE_S);
  scenario = argv[2];
  c.dir = g_path_get_dirname (argv[6]);
  c.rank = (guint) atoi (argv[3]);
  c.world = (guint) atoi (argv[4]);
  port = (guint) atoi (argv[5]);
  c.hash = G_GUINT64_CONSTANT (0xcbf29ce484222325);

  bootstrap = mixprec_bootstrap_new (c.rank, c.world, "127.0.0.1", (guint16) port,
                                     CHILD_TIMEOUT_MS * 5, &error);
  if (bootstrap == NULL)
    {
      g_printerr ("rank %u: bootstrap: %s\n", c.rank, error->message);
      return 1;
    }
  c.comm = mixprec_comm_new (bootstrap, "ucx", "cpu", CHILD_TIMEOUT_MS, &error);
  if (c.comm == NULL)
    {
      g_printerr ("rank %u: communicator: %s\n", c.rank, error->message);
      return 1;
    }

  if (!check_shared_memory (&c, why))
    ok = FALSE;
  else if (g_str_equal (scenario, "collectives"))
    ok = scenario_collectives (&c, why);
  else if (g_str_equal (scenario, "kill"))
    ok = scenario_lose_rank (&c, FALSE, why);
  else if (g_str_equal (scenario, "stop"))
    ok = scenario_lose_rank (&c, TRUE, why);
  else if (g_str_equal (scenario, "all-to-all"))
    ok = scenario_all_to_all (&c, why);
  else if (g_str_equal (scenario, "all-to-all-kill"))
    ok = scenario_all_to_all_lose_rank (&c, why);
  else if (g_str_equal (scenario, "abort"))
    ok = scenario_abort (&c, why);
  else if (g_str_equal (scenario, "mismatch"))
    ok = scenario_mismatch (&c, FALSE, why);
  else if (g_str_equal (scenario, "mismatch-barrier"))
    ok = scenario_mismatch (&c, TRUE, why);
  else
    {
      g_string_append_printf (why, "unknown scenario '%s'", scenario);
      ok = FALSE;
    }
  if (!ok)
    g_printerr ("rank %u: FAILED: %s\n", c.rank, why->str);
  g_object_unref (c.comm);
  g_free (c.dir);
  /* Leave without running atexit handlers of libraries that share the
   * parent's state (the test harness's). */
  fflush (stderr);
  _exit (ok ? 0 : 1);
}
