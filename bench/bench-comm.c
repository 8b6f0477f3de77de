/* bench-comm.c — bus bandwidth of MixprecComm's all_reduce, reduce_scatter
 * and all_gather (float32) between ranks on this host, as nccl-tests
 * defines it:
 *
 *   algbw = S / t, with S the size of the whole buffer (all_reduce's send
 *           buffer, reduce_scatter's send buffer, all_gather's receive
 *           buffer) and t the median time of one collective
 *   busbw = algbw * 2 (W - 1) / W for all_reduce,
 *           algbw * (W - 1) / W for reduce_scatter and all_gather
 *
 * Every size is measured at any world size: all_reduce takes any count;
 * reduce_scatter and all_gather move W equal parts, so a size that W * 4
 * does not divide is rounded up to the next multiple (at most W - 1
 * elements more) and S counts the bytes actually moved.
 *
 * Started without MIXPREC_RANK, it runs itself as --ranks processes on
 * 127.0.0.1 and waits for them; rank 0 prints one line per operation and
 * size (a table, or tab-separated values with --tsv). Under mixprec-run or
 * a job launcher it is one of the ranks.
 *
 *   bench-comm [--ranks 2] [--backend ucx] [--min-size 4096]
 *              [--max-size 268435456] [--ops all_reduce,reduce_scatter,all_gather]
 *              [--iterations 20] [--tsv]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <mixprec/mixprec.h>

typedef enum
{
  OP_ALL_REDUCE,
  OP_REDUCE_SCATTER,
  OP_ALL_GATHER,
} Op;

static const gchar * const op_names[] = { "all_reduce", "reduce_scatter", "all_gather" };

static gint ranks = 2;
static gchar *backend = NULL;
static gint64 min_size = 4096;
static gint64 max_size = (gint64) 256 << 20;
static gchar *ops = NULL;
static gint iterations = 20;
static gboolean tsv = FALSE;

static GOptionEntry entries[] = {
  { "ranks", 0, 0, G_OPTION_ARG_INT, &ranks, "Processes to start (default 2)", "N" },
  { "backend", 0, 0, G_OPTION_ARG_STRING, &backend, "Comm backend (default: auto)", "NAME" },
  { "min-size", 0, 0, G_OPTION_ARG_INT64, &min_size, "Smallest buffer in bytes (default 4096)", "BYTES" },
  { "max-size", 0, 0, G_OPTION_ARG_INT64, &max_size, "Largest buffer in bytes (default 256 MiB)", "BYTES" },
  { "ops", 0, 0, G_OPTION_ARG_STRING, &ops, "Operations (default all_reduce,reduce_scatter,all_gather)", "LIST" },
  { "iterations", 0, 0, G_OPTION_ARG_INT, &iterations, "Timed runs per size at 1 MiB; more for smaller sizes, fewer for larger (default 20)", "N" },
  { "tsv", 0, 0, G_OPTION_ARG_NONE, &tsv, "Print tab-separated values", NULL },
  { NULL }
};

/* Seconds on a nanosecond clock: small collectives take about a
 * microsecond, g_get_monotonic_time()'s resolution. */
static gdouble
now_seconds (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static gint
compare_doubles (gconstpointer a,
                 gconstpointer b)
{
  gdouble x = *(const gdouble *) a, y = *(const gdouble *) b;

  return (x > y) - (x < y);
}

/* Runs of one size: many for small buffers (latency noise), at least 5. */
static guint
runs_for (gint64 bytes)
{
  gdouble scale = (gdouble) ((gint64) 1 << 20) / (gdouble) bytes;
  gdouble n = iterations * (scale > 1 ? (scale > 16 ? 16 : scale) : scale);

  return n < 5 ? 5 : (guint) n;
}

/* Elements of one rank's part of a reduce_scatter or all_gather of
 * @total elements: rounded up, so that no size is skipped. */
static gsize
part_count (gsize total,
            guint world)
{
  return (total + world - 1) / world;
}

/* Bytes a collective of the nominal size @bytes moves: S above. */
static gint64
moved_bytes (Op     op,
             gint64 bytes,
             guint  world)
{
  gsize total = (gsize) bytes / sizeof (gfloat);

  if (op == OP_ALL_REDUCE)
    return (gint64) (total * sizeof (gfloat));
  return (gint64) (part_count (total, world) * world * sizeof (gfloat));
}

static gboolean
run_op (MixprecComm  *comm,
        Op            op,
        gfloat       *send,
        gfloat       *recv,
        gsize         total,
        GError      **error)
{
  guint world = mixprec_comm_get_world_size (comm);

  switch (op)
    {
    case OP_ALL_REDUCE:
      return mixprec_comm_all_reduce (comm, send, recv, total, MIXPREC_DTYPE_FLOAT32,
                                      MIXPREC_REDUCE_SUM, 0, error);
    case OP_REDUCE_SCATTER:
      return mixprec_comm_reduce_scatter (comm, send, recv, part_count (total, world),
                                          MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, error);
    case OP_ALL_GATHER:
    default:
      return mixprec_comm_all_gather (comm, send, recv, part_count (total, world),
                                      MIXPREC_DTYPE_FLOAT32, error);
    }
}

/* The median seconds of one collective on @bytes, the same on every rank
 * (rank 0's timings, broadcast, so all ranks print or skip alike). */
static gboolean
measure (MixprecComm  *comm,
         Op            op,
         gint64        bytes,
         gfloat       *send,
         gfloat       *recv,
         gdouble      *median,
         GError      **error)
{
  gsize total = (gsize) bytes / sizeof (gfloat);
  guint runs = runs_for (bytes);
  g_autofree gdouble *times = g_new (gdouble, runs);

  for (guint w = 0; w < 3; w++)
    if (!run_op (comm, op, send, recv, total, error))
      return FALSE;
  for (guint i = 0; i < runs; i++)
    {
      gdouble start;

      if (!mixprec_comm_barrier (comm, error))
        return FALSE;
      start = now_seconds ();
      if (!run_op (comm, op, send, recv, total, error))
        return FALSE;
      times[i] = now_seconds () - start;
    }
  qsort (times, runs, sizeof *times, (int (*) (const void *, const void *)) compare_doubles);
  *median = times[runs / 2];
  return mixprec_comm_broadcast (comm, median, 2, MIXPREC_DTYPE_FLOAT32, 0, error);
}

static int
rank_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (60000, &error);
  g_autoptr(MixprecComm) comm = NULL;
  g_auto(GStrv) names = g_strsplit (ops != NULL ? ops : "all_reduce,reduce_scatter,all_gather", ",", -1);
  gfloat *send, *recv;
  gsize buffer_elems;
  guint world, rank;

  if (bootstrap == NULL)
    {
      g_printerr ("bench-comm: %s\n", error->message);
      return 1;
    }
  comm = mixprec_comm_new (bootstrap, backend, "cpu", 60000, &error);
  if (comm == NULL)
    {
      g_printerr ("bench-comm: %s\n", error->message);
      return 1;
    }
  world = mixprec_comm_get_world_size (comm);
  rank = mixprec_comm_get_rank (comm);
  /* Room for the rounded-up parts of reduce_scatter and all_gather. */
  buffer_elems = (gsize) max_size / sizeof (gfloat) + world;
  send = g_new (gfloat, buffer_elems);
  recv = g_new (gfloat, buffer_elems);
  /* Touch every page before timing. */
  for (gsize i = 0; i < buffer_elems; i++)
    {
      send[i] = (gfloat) ((i + rank) % 1000) * 0.001f;
      recv[i] = 0;
    }

  if (rank == 0 && !tsv)
    g_print ("# %s, %u ranks, float32; busbw as nccl-tests; median of timed runs\n"
             "%-15s %12s %12s %12s %12s\n", mixprec_comm_get_backend (comm), world,
             "op", "size", "time (us)", "algbw GB/s", "busbw GB/s");
  for (guint n = 0; names[n] != NULL; n++)
    {
      Op op;

      if (g_str_equal (names[n], "all_reduce"))
        op = OP_ALL_REDUCE;
      else if (g_str_equal (names[n], "reduce_scatter"))
        op = OP_REDUCE_SCATTER;
      else if (g_str_equal (names[n], "all_gather"))
        op = OP_ALL_GATHER;
      else
        {
          g_printerr ("bench-comm: unknown operation '%s'\n", names[n]);
          return 1;
        }
      for (gint64 bytes = min_size; bytes <= max_size; bytes *= 2)
        {
          gdouble t, algbw, busbw;

          if (!measure (comm, op, bytes, send, recv, &t, &error))
            {
              g_printerr ("bench-comm: rank %u: %s of %" G_GINT64_FORMAT " bytes: %s\n",
                          rank, op_names[op], bytes, error->message);
              return 1;
            }
          algbw = moved_bytes (op, bytes, world) / t / 1e9;
          busbw = algbw * (op == OP_ALL_REDUCE ? 2.0 * (world - 1) / world
                                               : (gdouble) (world - 1) / world);
          if (rank != 0)
            continue;
          if (tsv)
            g_print ("%s\t%" G_GINT64_FORMAT "\t%.2f\t%.3f\t%.3f\n", op_names[op], bytes, t * 1e6,
                     algbw, busbw);
          else
            g_print ("%-15s %12" G_GINT64_FORMAT " %12.1f %12.3f %12.3f\n", op_names[op], bytes,
                     t * 1e6, algbw, busbw);
        }
    }
  g_free (send);
  g_free (recv);
  return 0;
}

static guint
free_port (void)
{
  struct sockaddr_in addr = { 0 };
  socklen_t len = sizeof addr;
  int fd = socket (AF_INET, SOCK_STREAM, 0);
  guint port = 0;

  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  if (fd >= 0 && bind (fd, (struct sockaddr *) &addr, sizeof addr) == 0 &&
      getsockname (fd, (struct sockaddr *) &addr, &len) == 0)
    port = ntohs (addr.sin_port);
  if (fd >= 0)
    close (fd);
  return port;
}

/* Starts the ranks: this program again, told its rank by the environment. */
static int
launch (char **argv)
{
  g_autofree gchar *self = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree gchar *port = g_strdup_printf ("%u", free_port ());
  g_autofree gchar *world = g_strdup_printf ("%d", ranks);
  GPid *pids = g_new0 (GPid, ranks);
  int result = 0;

  g_free (argv[0]);
  argv[0] = g_strdup (self);
  for (gint r = 0; r < ranks; r++)
    {
      g_auto(GStrv) env = g_get_environ ();
      g_autofree gchar *rank = g_strdup_printf ("%d", r);
      g_autoptr(GError) error = NULL;

      env = g_environ_setenv (env, "MIXPREC_RANK", rank, TRUE);
      env = g_environ_setenv (env, "MIXPREC_WORLD_SIZE", world, TRUE);
      env = g_environ_setenv (env, "MIXPREC_MASTER_ADDR", "127.0.0.1", TRUE);
      env = g_environ_setenv (env, "MIXPREC_MASTER_PORT", port, TRUE);
      if (!g_spawn_async (NULL, argv, env, G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_CHILD_INHERITS_STDIN,
                          NULL, NULL, &pids[r], &error))
        {
          g_printerr ("bench-comm: starting rank %d: %s\n", r, error->message);
          return 1;
        }
    }
  for (gint r = 0; r < ranks; r++)
    {
      int status = 0;

      if (waitpid (pids[r], &status, 0) != pids[r] || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
        result = 1;
      g_spawn_close_pid (pids[r]);
    }
  g_free (pids);
  return result;
}

int
main (int argc, char **argv)
{
  g_autoptr(GOptionContext) context = g_option_context_new ("— MixprecComm bus bandwidth");
  g_autoptr(GError) error = NULL;
  g_auto(GStrv) args = g_strdupv (argv);

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("bench-comm: %s\n", error->message);
      return 2;
    }
  if (ranks < 1 || min_size < 16 || max_size < min_size || iterations < 1)
    {
      g_printerr ("bench-comm: --ranks, --iterations must be positive, and 16 <= --min-size <= --max-size\n");
      return 2;
    }
  if (g_getenv ("MIXPREC_RANK") == NULL)
    return launch (args);
  return rank_main ();
}
