/* mixprec-parallel.c — a small persistent thread pool for element-wise CPU
 * kernels. Memory-bound kernels need every core to reach the machine's
 * bandwidth, and starting threads per call would cost more than small
 * arrays take, so workers are started once and parked on a condition. */
#include "config.h"

#include <stdlib.h>

#include "mixprec-parallel-private.h"

#define MAX_THREADS 256

typedef struct {
  GMutex lock;            /* serialises jobs: one parallel region at a time */
  GMutex state_lock;
  GCond start_cond;
  GCond done_cond;
  guint n_workers;        /* threads besides the caller */
  guint64 generation;     /* bumped for each job */
  guint pending;          /* workers still running the current job */
  /* The current job */
  _MixprecRangeFunc func;
  gpointer user_data;
  gsize bounds[MAX_THREADS + 1];
  guint n_parts;
} Pool;

static Pool pool;
static GPrivate inside_region;

static guint
read_thread_count (void)
{
  const gchar *env = g_getenv ("MIXPREC_NUM_THREADS");
  guint64 n = 0;

  if (env != NULL && g_ascii_string_to_unsigned (env, 10, 1, MAX_THREADS, &n, NULL))
    return (guint) n;
  return CLAMP (g_get_num_processors (), 1, MAX_THREADS);
}

guint
_mixprec_parallel_num_threads (void)
{
  static gsize n = 0;

  if (g_once_init_enter (&n))
    g_once_init_leave (&n, read_thread_count ());
  return (guint) n;
}

static gpointer
worker_main (gpointer data)
{
  guint index = GPOINTER_TO_UINT (data);   /* this worker runs part index */
  guint64 seen = 0;

  g_private_set (&inside_region, GUINT_TO_POINTER (1));
  for (;;)
    {
      _MixprecRangeFunc func;
      gpointer user_data;
      gsize begin = 0, end = 0;

      g_mutex_lock (&pool.state_lock);
      while (pool.generation == seen)
        g_cond_wait (&pool.start_cond, &pool.state_lock);
      seen = pool.generation;
      func = pool.func;
      user_data = pool.user_data;
      if (index < pool.n_parts)
        {
          begin = pool.bounds[index];
          end = pool.bounds[index + 1];
        }
      g_mutex_unlock (&pool.state_lock);

      if (end > begin)
        func (begin, end, user_data);

      g_mutex_lock (&pool.state_lock);
      if (--pool.pending == 0)
        g_cond_signal (&pool.done_cond);
      g_mutex_unlock (&pool.state_lock);
    }
  return NULL;
}

static void
start_workers (void)
{
  static gsize started = 0;

  if (g_once_init_enter (&started))
    {
      pool.n_workers = _mixprec_parallel_num_threads () - 1;
      for (guint i = 0; i < pool.n_workers; i++)
        {
          GThread *t = g_thread_new ("mixprec-worker", worker_main, GUINT_TO_POINTER (i + 1));
          g_thread_unref (t);   /* workers live as long as the process */
        }
      g_once_init_leave (&started, 1);
    }
}

void
_mixprec_parallel_for (gsize             n,
                       gsize             min_chunk,
                       gsize             align,
                       _MixprecRangeFunc func,
                       gpointer          user_data)
{
  guint n_threads = _mixprec_parallel_num_threads ();
  guint n_parts;
  gsize per_part;

  g_return_if_fail (align > 0 && (align & (align - 1)) == 0);

  if (n == 0)
    return;
  if (min_chunk < align)
    min_chunk = align;
  n_parts = (guint) MIN ((gsize) n_threads, (n + min_chunk - 1) / min_chunk);
  if (n_parts <= 1 || g_private_get (&inside_region) != NULL)
    {
      func (0, n, user_data);
      return;
    }

  start_workers ();
  g_mutex_lock (&pool.lock);
  g_private_set (&inside_region, GUINT_TO_POINTER (1));

  per_part = ((n + n_parts - 1) / n_parts + align - 1) & ~(align - 1);
  g_mutex_lock (&pool.state_lock);
  pool.func = func;
  pool.user_data = user_data;
  pool.n_parts = n_parts;
  for (guint i = 0; i <= n_parts; i++)
    pool.bounds[i] = MIN ((gsize) i * per_part, n);
  pool.pending = pool.n_workers;
  pool.generation++;
  g_cond_broadcast (&pool.start_cond);
  g_mutex_unlock (&pool.state_lock);

  func (pool.bounds[0], pool.bounds[1], user_data);

  g_mutex_lock (&pool.state_lock);
  while (pool.pending > 0)
    g_cond_wait (&pool.done_cond, &pool.state_lock);
  g_mutex_unlock (&pool.state_lock);

  g_private_set (&inside_region, NULL);
  g_mutex_unlock (&pool.lock);
}
