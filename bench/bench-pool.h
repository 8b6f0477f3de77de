/* bench-pool.h — the thread pool, part cutting, timing and step set-up that
 * bench-adamw and bench-optim-states share, with the loading of the
 * optim-adamw plugin, so both measure the same way.
 *
 * Static functions in a header rather than a library: each bench is one
 * file plus this one, and every function here is used by both. */
#ifndef BENCH_POOL_H
#define BENCH_POOL_H

#include <math.h>
#include <pthread.h>
#include <string.h>

#include <glib.h>
#include <gmodule.h>
#include <mixprec/mixprec-plugin.h>

/* ------------------------------------------------------------ thread pool
 *
 * The calling thread is part 0; the others wait on a barrier between
 * runs, so a run costs two barrier crossings and no thread creation. */

typedef void (*PartFunc) (gpointer data,
                          guint    part,
                          guint    n_parts);

typedef struct {
  guint n_threads;
  pthread_t *threads;
  pthread_barrier_t start;
  pthread_barrier_t done;
  PartFunc func;
  gpointer data;
  gboolean quit;
} Pool;

typedef struct {
  Pool *pool;
  guint part;
} Worker;

static gpointer
worker_main (gpointer data)
{
  Worker *w = data;
  Pool *pool = w->pool;

  for (;;)
    {
      pthread_barrier_wait (&pool->start);
      if (pool->quit)
        break;
      pool->func (pool->data, w->part, pool->n_threads);
      pthread_barrier_wait (&pool->done);
    }
  g_free (w);
  return NULL;
}

static Pool *
pool_new (guint n_threads)
{
  Pool *pool = g_new0 (Pool, 1);

  pool->n_threads = n_threads;
  pool->threads = g_new0 (pthread_t, n_threads);
  pthread_barrier_init (&pool->start, NULL, n_threads);
  pthread_barrier_init (&pool->done, NULL, n_threads);
  for (guint k = 1; k < n_threads; k++)
    {
      Worker *w = g_new0 (Worker, 1);

      w->pool = pool;
      w->part = k;
      if (pthread_create (&pool->threads[k], NULL, worker_main, w) != 0)
        g_error ("pthread_create failed");
    }
  return pool;
}

static void
pool_run (Pool     *pool,
          PartFunc  func,
          gpointer  data)
{
  pool->func = func;
  pool->data = data;
  pthread_barrier_wait (&pool->start);
  func (data, 0, pool->n_threads);
  pthread_barrier_wait (&pool->done);
}

static void
pool_free (Pool *pool)
{
  pool->quit = TRUE;
  pthread_barrier_wait (&pool->start);
  for (guint k = 1; k < pool->n_threads; k++)
    pthread_join (pool->threads[k], NULL);
  pthread_barrier_destroy (&pool->start);
  pthread_barrier_destroy (&pool->done);
  g_free (pool->threads);
  g_free (pool);
}

/* Part @part of @n_parts of @n elements, cut on multiples of @granule so
 * that every part starts on a SIMD block, cache line or scale block. */
static void
pool_part_range (gsize  n,
                 gsize  granule,
                 guint  part,
                 guint  n_parts,
                 gsize *begin,
                 gsize *end)
{
  gsize blocks = (n + granule - 1) / granule;

  *begin = MIN (n, blocks * part / n_parts * granule);
  *end = MIN (n, blocks * (part + 1) / n_parts * granule);
}

/* Best seconds of one pool_run over runs lasting @min_seconds in all (at
 * least 3, at most 1000). @before, where not NULL, is called with @data
 * ahead of each run, outside the timing; it returns FALSE to stop there
 * (a step that failed), and the best so far is returned. */
static double
pool_best_seconds (Pool      *pool,
                   PartFunc   func,
                   gpointer   data,
                   double     min_seconds,
                   gboolean (*before) (gpointer data))
{
  double best = INFINITY, total = 0;

  for (guint run = 0; run < 3 || (total < min_seconds && run < 1000); run++)
    {
      gint64 t0;
      double s;

      if (before != NULL && !before (data))
        break;
      t0 = g_get_monotonic_time ();
      pool_run (pool, func, data);
      s = (g_get_monotonic_time () - t0) * 1e-6;
      best = MIN (best, s);
      total += s;
    }
  return best;
}

/* ------------------------------------------------------------ the plugin */

typedef struct {
  MixprecPluginHostV1 host;
  const MixprecOptimizerV2 *v2;
  const MixprecOptimizerV3 *v3;
} BenchHost;

static int
bench_host_register_v2 (MixprecPluginHostV1      *host,
                        const MixprecOptimizerV2 *optimizer,
                        char                     *errbuf,
                        size_t                    errbuf_len)
{
  ((BenchHost *) host->host_data)->v2 = optimizer;
  return MIXPREC_PLUGIN_OK;
}

static int
bench_host_register_v3 (MixprecPluginHostV1      *host,
                        const MixprecOptimizerV3 *optimizer,
                        char                     *errbuf,
                        size_t                    errbuf_len)
{
  ((BenchHost *) host->host_data)->v3 = optimizer;
  return MIXPREC_PLUGIN_OK;
}

/* Opens the optim-adamw module at @path and initializes it through a host
 * of plugin ABI 1.@abi_minor; that host offers register_optimizer_v3 only
 * where @v3 is not NULL and the minor has it (4 and later). *v2 and *v3
 * get what the plugin registered, NULL where it registered nothing. */
static void
bench_load_adamw (const gchar               *path,
                  guint                      abi_minor,
                  const MixprecOptimizerV2 **v2,
                  const MixprecOptimizerV3 **v3)
{
  MixprecPluginGetDescFunc get_desc;
  BenchHost host = { { 0 } };
  char errbuf[256] = "";
  GModule *module = g_module_open (path, G_MODULE_BIND_LOCAL);

  if (module == NULL)
    g_error ("%s", g_module_error ());
  if (!g_module_symbol (module, "mixprec_plugin_optim_adamw_get_desc", (gpointer *) &get_desc))
    g_error ("%s: %s", path, g_module_error ());
  host.host.struct_size = sizeof host.host;
  host.host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
  host.host.abi_minor = abi_minor;
  host.host.host_data = &host;
  host.host.register_optimizer_v2 = bench_host_register_v2;
  if (v3 != NULL && abi_minor >= 4)
    host.host.register_optimizer_v3 = bench_host_register_v3;
  if (get_desc ()->init (&host.host, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_error ("%s: init failed: %s", path, errbuf);
  *v2 = host.v2;
  if (v3 != NULL)
    *v3 = host.v3;
}

/* ------------------------------------------------------------ the step */

/* AdamW's hyperparameters and the step's common fields, the same in every
 * bench: a bf16 gradient of a loss scaled by 1024 in, a bf16 working copy
 * out with round-to-nearest-even. @hparams holds 7 doubles and must live
 * as long as @base. */
static void
bench_step_base_init (MixprecOptimizerStepV1 *base,
                      gsize                   struct_size,
                      double                 *hparams)
{
  static const double defaults[] = { 1e-3, 0.9, 0.999, 1e-8, 0.01, 1, 1 };

  memcpy (hparams, defaults, sizeof defaults);
  base->struct_size = struct_size;
  base->hparams = hparams;
  base->n_hparams = G_N_ELEMENTS (defaults);
  base->step = 1;
  base->lr = 1e-3;
  base->grad_factor = 1.0f / 1024;
  base->grad_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  base->working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  base->rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
}

/* The bf16 gradient of element @i (truncated: exact for these integers),
 * a loss scaled by 1024 that grad_factor unscales. */
static guint16
bench_grad_bf16 (gsize i)
{
  float g = (float) ((int) (i % 2001) - 1000);
  guint32 u;

  memcpy (&u, &g, 4);
  return (guint16) (u >> 16);
}

/* The plugin's default path: $MIXPREC_TOP_BUILDDIR, else the current
 * directory, then plugins/.libs/mixprec-optim-adamw.so. */
static gchar *
bench_default_adamw_path (void)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");

  return g_build_filename (top != NULL ? top : ".", "plugins", ".libs", "mixprec-optim-adamw.so", NULL);
}

#endif /* BENCH_POOL_H */
