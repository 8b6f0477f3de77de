/* bench-adamw.c — the fused AdamW step of the optim-adamw plugin against
 * the machine's memory bandwidth, measured in the same run.
 *
 * The job is the bandwidth-bound one of a mixed-precision step: FP32 master, exp_avg
 * and exp_avg_sq, a bf16 gradient in (times an unscale factor), a bf16
 * working copy out with round-to-nearest-even: 28 bytes per parameter. The
 * range is cut into one contiguous part per thread, the way the engine
 * calls step() concurrently on disjoint ranges.
 *
 * Bandwidth is the best of STREAM-like kernels over three arrays far
 * larger than the last-level cache, run by the same threads before and
 * after the steps: memcpy counting 2 x bytes; the triad a = b + s * c,
 * with ordinary and with non-temporal stores, and the in-place a += s * b,
 * each counting 12 bytes per element. The triad's write-allocate traffic
 * goes uncounted, as in STREAM, while the step's own stores are mostly in
 * place; taking the best of all of them gives the strictest denominator.
 *
 *   bench-adamw [--plugin PATH] [--threads N] [--sizes M,M,...]
 *               [--min-seconds S] [--bandwidth-mib N] [--tsv]
 *               [--state-formats F,F,...] [--masters M,M,...] [--block-size B]
 *
 * --state-formats and --masters step through revision 3 of the optimizer
 * ABI instead: the moments in each format (fp32, bf16, fp16s, bf16s,
 * fp8s, int8, int4; the "s" ones with a scale per block of --block-size,
 * default 256 and 128 for int4), the parameter with each master (fp32,
 * remainder, kahan), one row per pair. Bytes per parameter then count
 * what that representation moves. MIXPREC_SIMD (scalar, avx2) lowers the
 * kernels the plugin picks, as everywhere.
 *
 * Sizes are in Mi parameters (default 1,4,16,64,256); --bandwidth-mib 0
 * skips the bandwidth kernels. Each figure is the best of repeated runs
 * lasting at least --min-seconds (at least 3). The
 * plugin defaults to $MIXPREC_TOP_BUILDDIR/plugins/.libs/mixprec-optim-adamw.so,
 * else ./plugins/.libs/ under the current directory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <gmodule.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <mixprec/mixprec-plugin.h>

#include "bench-pool.h"

#define BYTES_PER_PARAM 28

/* Parts are cut on multiples of this: whole SIMD blocks and cache lines
 * of fp32, or whole scale blocks of every size (revision 3). */
static gsize part_granule = 8;

/* Part @part of @n elements, cut on multiples of part_granule. */
static void
part_range (gsize  n,
            guint  part,
            guint  n_parts,
            gsize *begin,
            gsize *end)
{
  pool_part_range (n, part_granule, part, n_parts, begin, end);
}

/* ------------------------------------------------------------ bandwidth */

typedef struct {
  float *a;
  float *b;
  float *c;
  gsize n;
} Stream;

static void
stream_copy (gpointer data,
             guint    part,
             guint    n_parts)
{
  Stream *s = data;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  memcpy (s->a + begin, s->b + begin, (end - begin) * sizeof (float));
}

static void
stream_triad (gpointer data,
              guint    part,
              guint    n_parts)
{
  Stream *s = data;
  float *restrict a = s->a;
  const float *restrict b = s->b;
  const float *restrict c = s->c;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i++)
    a[i] = b[i] + 3.0f * c[i];
}

#ifdef __SSE2__
/* The triad with non-temporal stores: no read-for-ownership, the most a
 * core can write. */
static void
stream_triad_nt (gpointer data,
                 guint    part,
                 guint    n_parts)
{
  Stream *s = data;
  const __m128 three = _mm_set1_ps (3.0f);
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i += 4)
    _mm_stream_ps (s->a + i, _mm_add_ps (_mm_load_ps (s->b + i), _mm_mul_ps (three, _mm_load_ps (s->c + i))));
  _mm_sfence ();
}
#endif

/* In place, like most of the step's traffic: no write-allocate. */
static void
stream_axpy (gpointer data,
             guint    part,
             guint    n_parts)
{
  Stream *s = data;
  float *restrict a = s->a;
  const float *restrict b = s->b;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i++)
    a[i] += 3.0f * b[i];
}

static void
stream_init (gpointer data,
             guint    part,
             guint    n_parts)
{
  Stream *s = data;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i++)
    {
      s->a[i] = 0;
      s->b[i] = 1;
      s->c[i] = 2;
    }
}

typedef struct {
  const gchar *name;
  PartFunc func;
  double bytes_per_element;
} StreamKernel;

static const StreamKernel stream_kernels[] = {
  { "memcpy", stream_copy, 8 },
  { "triad", stream_triad, 12 },
#ifdef __SSE2__
  { "triad-nt", stream_triad_nt, 12 },
#endif
  { "axpy", stream_axpy, 12 },
};

/* Raises best[k] to the bytes per second of stream_kernels[k] if higher. */
static void
measure_bandwidth (Pool   *pool,
                   gsize   mib,
                   double  min_seconds,
                   double *best)
{
  Stream s;

  s.n = mib * 1024 * 1024 / sizeof (float);
  /* 64-byte aligned, for the aligned SSE loads and stores. */
  s.a = g_aligned_alloc (s.n, sizeof (float), 64);
  s.b = g_aligned_alloc (s.n, sizeof (float), 64);
  s.c = g_aligned_alloc (s.n, sizeof (float), 64);
  pool_run (pool, stream_init, &s);
  for (guint k = 0; k < G_N_ELEMENTS (stream_kernels); k++)
    best[k] = MAX (best[k], stream_kernels[k].bytes_per_element * s.n /
                            pool_best_seconds (pool, stream_kernels[k].func, &s, min_seconds, NULL));
  g_aligned_free (s.a);
  g_aligned_free (s.b);
  g_aligned_free (s.c);
}

/* ------------------------------------------------------------ the step */

/* The plugin's revision 2 vtable, or with @v3 (a host that offers
 * register_optimizer_v3) its revision 3 one in *v3. */
static const MixprecOptimizerV2 *
load_adamw (const gchar               *path,
            const MixprecOptimizerV3 **v3)
{
  const MixprecOptimizerV2 *v2;

  bench_load_adamw (path, MIXPREC_PLUGIN_ABI_VERSION_MINOR, &v2, v3);
  if (v3 != NULL && *v3 == NULL)
    g_error ("%s: the plugin registered no revision 3 optimizer", path);
  return v2;
}

/* ------------------------------------------------------------ revision 3 */

static const gchar *const format_names[] = { "fp32", "bf16", "fp16s", "bf16s", "fp8s", "int8", "int4" };
static const gchar *const master_names[] = { "fp32", "remainder", "kahan" };

static gint
name_index (const gchar        *name,
            const gchar *const *names,
            guint               n_names)
{
  for (guint k = 0; k < n_names; k++)
    if (g_str_equal (names[k], name))
      return (gint) k;
  return -1;
}

/* Bytes of @n elements of a state format. */
static gsize
format_bytes (guint format,
              gsize n)
{
  static const gsize num[] = { 4, 2, 2, 2, 1, 1, 1 }, den[] = { 1, 1, 1, 1, 1, 1, 2 };

  return (n * num[format] + den[format] - 1) / den[format];
}

/* What one parameter moves: the gradient in; the working copy out (and in
 * beside a 16-bit master half); the master or master_extra and both
 * moments in and out (scales are negligible). */
static double
bytes_per_param (guint format,
                 guint master)
{
  double moments = 2 * 2 * (double) format_bytes (format, 1024) / 1024;

  return 2 + (master == 0 ? 2 + 8 : 4 + 4) + moments;
}

typedef struct {
  const MixprecOptimizerV3 *opt;
  MixprecOptimizerStepV3 args;
  MixprecPluginStateFormat formats[2];
  double hparams[7];
  gsize n;
  float *master;
  guint8 *m;
  guint8 *v;
  float *scales[2];
  guint16 *grad;
  guint16 *working;
  guint16 *extra;
} Step3;

static void
step3_part (gpointer data,
            guint    part,
            guint    n_parts)
{
  Step3 *s = data;
  MixprecOptimizerStepV3 args = s->args;
  char errbuf[256];
  void *states[2];
  float *scales[2];
  gsize begin, end, block = MAX (args.block_size, 1);

  part_range (s->n, part, n_parts, &begin, &end);
  args.v2.base.first_index = begin;
  states[0] = s->m + format_bytes (s->formats[0], begin);
  states[1] = s->v + format_bytes (s->formats[1], begin);
  scales[0] = s->scales[0] + begin / block;
  scales[1] = s->scales[1] + begin / block;
  args.state_scales = scales;
  args.master_extra = s->extra != NULL ? s->extra + begin : NULL;
  if (s->opt->step (&args, s->master != NULL ? s->master + begin : NULL, s->grad + begin, states,
                    s->working + begin, end - begin, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_error ("step failed: %s", errbuf);
}

static void
step3_init (gpointer data,
            guint    part,
            guint    n_parts)
{
  Step3 *s = data;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i++)
    {
      float p = (float) (i % 1000) * 1e-4f - 0.05f;
      guint32 u;

      s->grad[i] = bench_grad_bf16 (i);
      memcpy (&u, &p, 4);
      if (s->master != NULL)
        s->master[i] = p;
      s->working[i] = (guint16) (u >> 16);
      if (s->extra != NULL)
        s->extra[i] = 0;
    }
  memset (s->m + format_bytes (s->formats[0], begin), 0,
          format_bytes (s->formats[0], end) - format_bytes (s->formats[0], begin));
  memset (s->v + format_bytes (s->formats[1], begin), 0,
          format_bytes (s->formats[1], end) - format_bytes (s->formats[1], begin));
}

/* Best seconds of one revision 3 step over @n parameters. */
static double
measure_step3 (Pool                     *pool,
               const MixprecOptimizerV3 *opt,
               guint                     format,
               guint                     master,
               guint                     block_size,
               gsize                     n,
               double                    min_seconds)
{
  gboolean blocked = format >= 2;
  gsize n_blocks;
  Step3 s = { 0 };
  double best;

  if (block_size == 0)
    block_size = format == 6 ? 128 : 256;
  n_blocks = n / block_size + 1;
  s.opt = opt;
  s.n = n;
  s.formats[0] = s.formats[1] = (MixprecPluginStateFormat) format;
  bench_step_base_init (&s.args.v2.base, sizeof s.args, s.hparams);
  s.args.state_formats = s.formats;
  s.args.block_size = blocked ? block_size : 0;
  s.args.master_format = (MixprecPluginMasterFormat) master;
  s.master = master == 0 ? g_new (float, n) : NULL;
  s.extra = master != 0 ? g_new (guint16, n) : NULL;
  s.m = g_malloc (format_bytes (format, n) + 64);
  s.v = g_malloc (format_bytes (format, n) + 64);
  s.scales[0] = g_new0 (float, n_blocks);
  s.scales[1] = g_new0 (float, n_blocks);
  s.grad = g_new (guint16, n);
  s.working = g_new (guint16, n);
  pool_run (pool, step3_init, &s);
  pool_run (pool, step3_part, &s);      /* warm-up */
  s.args.v2.base.step++;
  best = pool_best_seconds (pool, step3_part, &s, min_seconds, NULL);
  g_free (s.master);
  g_free (s.extra);
  g_free (s.m);
  g_free (s.v);
  g_free (s.scales[0]);
  g_free (s.scales[1]);
  g_free (s.grad);
  g_free (s.working);
  return best;
}

typedef struct {
  const MixprecOptimizerV2 *opt;
  MixprecOptimizerStepV2 args;
  double hparams[7];
  gsize n;
  float *master;
  float *m;
  float *v;
  guint16 *grad;
  guint16 *working;
} Step;

static void
step_part (gpointer data,
           guint    part,
           guint    n_parts)
{
  Step *s = data;
  MixprecOptimizerStepV2 args = s->args;
  char errbuf[256];
  void *states[2];
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  args.base.first_index = begin;
  states[0] = s->m + begin;
  states[1] = s->v + begin;
  if (s->opt->step (&args, s->master + begin, s->grad + begin, states, s->working + begin,
                    end - begin, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_error ("step failed: %s", errbuf);
}

static void
step_init (gpointer data,
           guint    part,
           guint    n_parts)
{
  Step *s = data;
  gsize begin, end;

  part_range (s->n, part, n_parts, &begin, &end);
  for (gsize i = begin; i < end; i++)
    {
      s->grad[i] = bench_grad_bf16 (i);
      s->master[i] = (float) (i % 1000) * 1e-4f - 0.05f;
      s->m[i] = 0;
      s->v[i] = 0;
      s->working[i] = 0;
    }
}

/* Best seconds of one step over @n parameters. */
static double
measure_step (Pool                     *pool,
              const MixprecOptimizerV2 *opt,
              gsize                     n,
              double                    min_seconds)
{
  static const MixprecPluginDType fp32_state[2] = { MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                                    MIXPREC_PLUGIN_DTYPE_FLOAT32 };
  Step s = { 0 };
  double best;

  s.opt = opt;
  s.n = n;
  bench_step_base_init (&s.args.base, sizeof s.args, s.hparams);
  s.args.state_dtypes = fp32_state;   /* the peers keep FP32 moments too */
  s.master = g_new (float, n);
  s.m = g_new (float, n);
  s.v = g_new (float, n);
  s.grad = g_new (guint16, n);
  s.working = g_new (guint16, n);
  pool_run (pool, step_init, &s);
  pool_run (pool, step_part, &s);      /* warm-up */
  s.args.base.step++;
  best = pool_best_seconds (pool, step_part, &s, min_seconds, NULL);
  g_free (s.master);
  g_free (s.m);
  g_free (s.v);
  g_free (s.grad);
  g_free (s.working);
  return best;
}

/* --state-formats / --masters: one row per format, master and size. */
static int
run_formats (const gchar        *plugin,
             gint                threads,
             const gchar *const *sizes,
             double              min_seconds,
             gboolean            tsv,
             const gchar        *formats_arg,
             const gchar        *masters_arg,
             gint                block_size)
{
  g_auto(GStrv) formats = g_strsplit (formats_arg, ",", -1);
  g_auto(GStrv) masters = g_strsplit (masters_arg, ",", -1);
  const MixprecOptimizerV3 *opt = NULL;
  Pool *pool;

  if (block_size != 0 && (block_size < 32 || block_size > 4096 || (block_size & (block_size - 1)) != 0))
    {
      g_printerr ("--block-size must be a power of two from 32 to 4096\n");
      return 2;
    }
  for (guint f = 0; formats[f] != NULL; f++)
    if (name_index (formats[f], format_names, G_N_ELEMENTS (format_names)) < 0)
      {
        g_printerr ("unknown state format '%s' (fp32, bf16, fp16s, bf16s, fp8s, int8, int4)\n", formats[f]);
        return 2;
      }
  for (guint m = 0; masters[m] != NULL; m++)
    if (name_index (masters[m], master_names, G_N_ELEMENTS (master_names)) < 0)
      {
        g_printerr ("unknown master '%s' (fp32, remainder, kahan)\n", masters[m]);
        return 2;
      }
  load_adamw (plugin, &opt);
  part_granule = 4096;
  pool = pool_new ((guint) threads);
  if (!tsv)
    g_print ("%d threads, MIXPREC_SIMD=%s\n%-8s %-10s %10s %14s %10s\n", threads,
             g_getenv ("MIXPREC_SIMD") ? g_getenv ("MIXPREC_SIMD") : "(best)",
             "states", "master", "params", "params/s", "GB/s");
  for (guint f = 0; formats[f] != NULL; f++)
    for (guint m = 0; masters[m] != NULL; m++)
      for (guint k = 0; sizes[k] != NULL; k++)
        {
          guint format = (guint) name_index (formats[f], format_names, G_N_ELEMENTS (format_names));
          guint master = (guint) name_index (masters[m], master_names, G_N_ELEMENTS (master_names));
          gsize n = (gsize) (g_ascii_strtod (sizes[k], NULL) * (1 << 20));
          double pps;

          if (n == 0)
            continue;
          pps = n / measure_step3 (pool, opt, format, master, (guint) block_size, n, min_seconds);
          if (tsv)
            g_print ("adamw\t%s\t%s\t%" G_GSIZE_FORMAT "\t%.6g\t%.3f\n", formats[f], masters[m], n, pps,
                     pps * bytes_per_param (format, master) / 1e9);
          else
            g_print ("%-8s %-10s %9gM %14.4g %10.2f\n", formats[f], masters[m], (double) n / (1 << 20), pps,
                     pps * bytes_per_param (format, master) / 1e9);
        }
  pool_free (pool);
  return 0;
}

int
main (int    argc,
      char **argv)
{
  g_autofree gchar *plugin = NULL;
  g_autofree gchar *sizes_arg = NULL;
  g_auto(GStrv) sizes = NULL;
  gint threads = 2;
  gint bandwidth_mib = 256;
  double min_seconds = 1.0;
  gboolean tsv = FALSE;
  g_autofree gchar *formats_arg = NULL;
  g_autofree gchar *masters_arg = NULL;
  gint block_size = 0;
  GOptionEntry entries[] = {
    { "plugin", 0, 0, G_OPTION_ARG_FILENAME, &plugin, "the optim-adamw module", "PATH" },
    { "threads", 0, 0, G_OPTION_ARG_INT, &threads, "threads (default 2)", "N" },
    { "sizes", 0, 0, G_OPTION_ARG_STRING, &sizes_arg, "Mi parameters (default 1,4,16,64,256)", "M,M" },
    { "min-seconds", 0, 0, G_OPTION_ARG_DOUBLE, &min_seconds, "time per figure (default 1)", "S" },
    { "bandwidth-mib", 0, 0, G_OPTION_ARG_INT, &bandwidth_mib, "STREAM array size (default 256; 0: skip)", "N" },
    { "tsv", 0, 0, G_OPTION_ARG_NONE, &tsv, "tab-separated output for scripts", NULL },
    { "state-formats", 0, 0, G_OPTION_ARG_STRING, &formats_arg,
      "revision 3: moments in fp32, bf16, fp16s, bf16s, fp8s, int8, int4", "F,F" },
    { "masters", 0, 0, G_OPTION_ARG_STRING, &masters_arg,
      "revision 3: masters fp32, remainder, kahan (default fp32)", "M,M" },
    { "block-size", 0, 0, G_OPTION_ARG_INT, &block_size,
      "elements per scale (default 256, int4 128)", "B" },
    { NULL }
  };
  g_autoptr(GOptionContext) context = g_option_context_new ("- fused AdamW step against memory bandwidth");
  g_autoptr(GError) error = NULL;
  const MixprecOptimizerV2 *opt;
  double bw_best[G_N_ELEMENTS (stream_kernels)] = { 0 };
  double bw = 0;
  g_autoptr(GArray) ns = g_array_new (FALSE, FALSE, sizeof (gsize));
  g_autoptr(GArray) rates = g_array_new (FALSE, FALSE, sizeof (double));
  Pool *pool;

  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    {
      g_printerr ("%s\n", error->message);
      return 2;
    }
  if (threads < 1 || bandwidth_mib < 0)
    {
      g_printerr ("--threads must be positive and --bandwidth-mib not negative\n");
      return 2;
    }
  if (plugin == NULL)
    plugin = bench_default_adamw_path ();
  sizes = g_strsplit (sizes_arg ? sizes_arg : "1,4,16,64,256", ",", -1);
  if (formats_arg != NULL || masters_arg != NULL)
    return run_formats (plugin, threads, (const gchar *const *) sizes, min_seconds, tsv,
                        formats_arg != NULL ? formats_arg : "fp32",
                        masters_arg != NULL ? masters_arg : "fp32", block_size);
  opt = load_adamw (plugin, NULL);
  pool = pool_new (threads);

  /* Bandwidth before and after the steps, best of both: a machine shared
   * with other work is then judged by its quietest moments on both sides. */
  if (bandwidth_mib > 0)
    measure_bandwidth (pool, bandwidth_mib, min_seconds, bw_best);
  for (guint k = 0; sizes[k] != NULL; k++)
    {
      gsize n = (gsize) (g_ascii_strtod (sizes[k], NULL) * (1 << 20));
      double pps;

      if (n == 0)
        continue;
      pps = n / measure_step (pool, opt, n, min_seconds);
      g_array_append_val (ns, n);
      g_array_append_val (rates, pps);
    }
  if (bandwidth_mib > 0)
    measure_bandwidth (pool, bandwidth_mib, min_seconds, bw_best);

  for (guint k = 0; k < G_N_ELEMENTS (stream_kernels) && bandwidth_mib > 0; k++)
    {
      bw = MAX (bw, bw_best[k]);
      if (tsv)
        g_print ("bandwidth\t%s\t%.3f\n", stream_kernels[k].name, bw_best[k] / 1e9);
      else
        g_print ("%s %s %.2f GB/s", k == 0 ? "memory bandwidth:" : ",", stream_kernels[k].name,
                 bw_best[k] / 1e9);
    }
  if (!tsv && bandwidth_mib > 0)
    g_print ("\n%d threads, %d MiB arrays; the best of these is 100%%\n%10s %14s %10s %12s\n",
             threads, bandwidth_mib, "params", "params/s", "GB/s", "% bandwidth");
  else if (!tsv)
    g_print ("%d threads\n%10s %14s %10s\n", threads, "params", "params/s", "GB/s");
  for (guint k = 0; k < ns->len; k++)
    {
      gsize n = g_array_index (ns, gsize, k);
      double pps = g_array_index (rates, double, k);

      if (tsv)
        g_print ("adamw\t%" G_GSIZE_FORMAT "\t%.6g\t%.3f\n", n, pps, pps * BYTES_PER_PARAM / 1e9);
      else if (bw > 0)
        g_print ("%9gM %14.4g %10.2f %11.1f%%\n", (double) n / (1 << 20), pps,
                 pps * BYTES_PER_PARAM / 1e9, 100 * pps * BYTES_PER_PARAM / bw);
      else
        g_print ("%9gM %14.4g %10.2f\n", (double) n / (1 << 20), pps, pps * BYTES_PER_PARAM / 1e9);
    }
  pool_free (pool);
  return 0;
}
