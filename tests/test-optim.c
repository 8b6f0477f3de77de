/* test-optim.c — the cpu optimizer plugins (adamw, sgd, lion), loaded as
 * modules straight from the build tree and driven through their vtables:
 * against double-precision references of their formulas written here, and
 * bitwise: scalar against AVX2 and AVX-512 kernels, the working copy against
 * mixprec_convert_array(), split calls against one call, master-less steps
 * against steps on the decoded parameter. */
#include <math.h>
#include <string.h>
#include <gmodule.h>
#include <mixprec/mixprec.h>
#include <mixprec/mixprec-plugin.h>

#include "mixprec-x86-features-private.h"

#define N_ELEMENTS 1037         /* not a multiple of 8 or 16: every call has a tail */
#define N_STEPS 100

/* ------------------------------------------------------------ loading */

typedef struct {
  MixprecPluginHostV1 host;
  const MixprecOptimizerV2 *registered;
  guint n_registered;
} FakeHost;

static int
fake_register (MixprecPluginHostV1      *host,
               const MixprecOptimizerV2 *optimizer,
               char                     *errbuf,
               size_t                    errbuf_len)
{
  FakeHost *fake = host->host_data;

  fake->registered = optimizer;
  fake->n_registered++;
  return MIXPREC_PLUGIN_OK;
}

typedef struct {
  const gchar *feature;
  const MixprecPluginDesc *desc;
  const MixprecOptimizerV2 *best;       /* what init() registers on this CPU */
  const MixprecOptimizerV2 *scalar;     /* what it registers under MIXPREC_SIMD=scalar */
  const MixprecOptimizerV2 *avx2;       /* ... under MIXPREC_SIMD=avx2 */
  const MixprecOptimizerV2 *avx512;     /* ... under MIXPREC_SIMD=avx512 */
} Plugin;

static Plugin plugins[] = { { "adamw" }, { "sgd" }, { "lion" } };

static const MixprecOptimizerV2 *
capture_vtable (const MixprecPluginDesc *desc,
                const gchar             *simd)
{
  FakeHost fake = { { 0 } };
  char errbuf[256] = "";

  fake.host.struct_size = sizeof fake.host;
  fake.host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
  fake.host.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
  fake.host.host_data = &fake;
  fake.host.register_optimizer_v2 = fake_register;
  if (simd != NULL)
    g_setenv ("MIXPREC_SIMD", simd, TRUE);
  else
    g_unsetenv ("MIXPREC_SIMD");
  g_assert_cmpint (desc->init (&fake.host, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpuint (fake.n_registered, ==, 1);
  return fake.registered;
}

static gboolean
cpu_has_avx2 (void)
{
#if defined(__x86_64__) || defined(__i386__)
  return _mixprec_x86_simd_level () >= 1;
#else
  return FALSE;
#endif
}

static gboolean
cpu_has_avx512 (void)
{
#if defined(__x86_64__) || defined(__i386__)
  return _mixprec_x86_simd_level () >= 2;
#else
  return FALSE;
#endif
}

static const Plugin *
plugin_get (const gchar *feature)
{
  Plugin *p = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (plugins); i++)
    if (g_str_equal (plugins[i].feature, feature))
      p = &plugins[i];
  g_assert_nonnull (p);

  if (p->desc == NULL)
    {
      g_autofree gchar *base = g_strdup_printf ("mixprec-optim-%s.so", feature);
      g_autofree gchar *symbol = g_strdup_printf ("mixprec_plugin_optim_%s_get_desc", feature);
      g_autofree gchar *path = NULL;
      gchar *saved = g_strdup (g_getenv ("MIXPREC_SIMD"));
      const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
      MixprecPluginGetDescFunc get_desc = NULL;
      GModule *module;

      g_assert_nonnull (top);
      path = g_build_filename (top, "plugins", ".libs", base, NULL);
      module = g_module_open (path, G_MODULE_BIND_LOCAL);
      if (module == NULL)
        g_error ("%s", g_module_error ());
      g_module_make_resident (module);
      g_assert_true (g_module_symbol (module, symbol, (gpointer *) &get_desc));
      p->desc = get_desc ();
      p->scalar = capture_vtable (p->desc, "scalar");
      p->avx2 = capture_vtable (p->desc, "avx2");
      p->avx512 = capture_vtable (p->desc, "avx512");
      p->best = capture_vtable (p->desc, NULL);
      if (saved != NULL)
        g_setenv ("MIXPREC_SIMD", saved, TRUE);
      else
        g_unsetenv ("MIXPREC_SIMD");
      g_free (saved);
    }
  return p;
}

/* ------------------------------------------------------------ buffers */

typedef struct {
  MixprecOptimizerStepV1 args;
  gsize n;
  float *master;               /* NULL: no master */
  void *grad;
  void *states[2];             /* in state_dtype */
  guint n_states;
  void *working;               /* NULL: none */
  MixprecPluginDType state_dtype;      /* of every slot */
  MixprecPluginRounding state_rounding;
  uint64_t state_seed;
} Buffers;

static gsize
dtype_size (MixprecPluginDType dtype)
{
  return dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 4 : 2;
}

static Buffers *
buffers_new (const MixprecOptimizerV2 *opt,
             gsize                     n,
             MixprecPluginDType        grad_dtype,
             gboolean                  has_master,
             gint                      working_dtype)    /* -1: none */
{
  Buffers *b = g_new0 (Buffers, 1);

  b->n = n;
  b->args.struct_size = sizeof b->args;
  b->args.n_hparams = opt->n_hparams;
  b->args.step = 1;
  b->args.lr = 1e-3;
  b->args.grad_factor = 1.0f;
  b->args.grad_dtype = grad_dtype;
  b->args.working_dtype = working_dtype < 0 ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : (MixprecPluginDType) working_dtype;
  b->args.seed = 0x5eed;
  b->args.first_index = 12345;
  b->master = has_master ? g_new0 (float, n) : NULL;
  b->grad = g_malloc0 (n * dtype_size (grad_dtype));
  b->n_states = opt->n_state_slots;
  b->state_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  b->state_seed = 0x57a7e;
  for (guint k = 0; k < b->n_states; k++)
    b->states[k] = g_new0 (float, n);
  b->working = working_dtype >= 0 ? g_malloc0 (n * dtype_size (working_dtype)) : NULL;
  return b;
}

static void
buffers_free (Buffers *b)
{
  g_free (b->master);
  g_free (b->grad);
  for (guint k = 0; k < b->n_states; k++)
    g_free (b->states[k]);
  g_free (b->working);
  g_free (b);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC (Buffers, buffers_free)

static Buffers *
buffers_copy (const Buffers *src)
{
  Buffers *b = g_memdup2 (src, sizeof *src);
  gsize wsize = dtype_size (src->args.working_dtype);

  b->master = src->master ? g_memdup2 (src->master, src->n * 4) : NULL;
  b->grad = g_memdup2 (src->grad, src->n * dtype_size (src->args.grad_dtype));
  for (guint k = 0; k < src->n_states; k++)
    b->states[k] = g_memdup2 (src->states[k], src->n * dtype_size (src->state_dtype));
  b->working = src->working ? g_memdup2 (src->working, src->n * wsize) : NULL;
  return b;
}

static void
assert_buffers_identical (const Buffers *a,
                          const Buffers *b,
                          const gchar   *what)
{
  gboolean same = TRUE;

  if (a->master != NULL)
    same &= memcmp (a->master, b->master, a->n * 4) == 0;
  for (guint k = 0; k < a->n_states; k++)
    same &= memcmp (a->states[k], b->states[k], a->n * dtype_size (a->state_dtype)) == 0;
  if (a->working != NULL)
    same &= memcmp (a->working, b->working, a->n * dtype_size (a->args.working_dtype)) == 0;
  if (!same)
    g_test_fail_printf ("%s: buffers differ", what);
}

/* Runs the step over elements [offset, offset + count) of @b. */
static int
call_range (const MixprecOptimizerV2 *opt,
            Buffers                  *b,
            gsize                     offset,
            gsize                     count,
            char                     *errbuf,
            gsize                     errbuf_len)
{
  MixprecOptimizerStepV2 args = { 0 };
  MixprecPluginDType state_dtypes[2] = { b->state_dtype, b->state_dtype };
  void *states[2] = { NULL, NULL };
  gsize wsize = dtype_size (b->args.working_dtype);

  args.base = b->args;
  /* A block that says it is shorter (an older library) stays so. */
  args.base.struct_size = b->args.struct_size == sizeof b->args ? sizeof args : b->args.struct_size;
  args.base.first_index += offset;
  args.state_dtypes = state_dtypes;
  args.state_rounding = b->state_rounding;
  args.state_seed = b->state_seed;
  for (guint k = 0; k < b->n_states; k++)
    states[k] = b->states[k] != NULL ? (guint8 *) b->states[k] + offset * dtype_size (b->state_dtype) : NULL;
  return opt->step (&args, b->master ? b->master + offset : NULL,
                    (guint8 *) b->grad + offset * dtype_size (b->args.grad_dtype),
                    states, b->working ? (guint8 *) b->working + offset * wsize : NULL,
                    count, errbuf, errbuf_len);
}

static void
call_ok (const MixprecOptimizerV2 *opt,
         Buffers                  *b)
{
  char errbuf[256] = "";
  int status = call_range (opt, b, 0, b->n, errbuf, sizeof errbuf);

  if (status != MIXPREC_PLUGIN_OK)
    g_error ("%s step failed (%d): %s", opt->name, status, errbuf);
}

/* ------------------------------------------------------------ numbers
 *
 * Test data is made and read here without the library: narrow values are
 * built from their fields, so the reference sees exactly what the plugin
 * decodes. */

static guint16
bf16_bits_of (float f)
{
  guint32 u;

  memcpy (&u, &f, 4);
  return (guint16) (u >> 16);
}

static double
decode (MixprecPluginDType dtype,
        const void        *base,
        gsize              i)
{
  guint32 u;
  float f;
  guint16 h;

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
      return ((const float *) base)[i];
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      u = (guint32) ((const guint16 *) base)[i] << 16;
      memcpy (&f, &u, 4);
      return f;
    default:
      h = ((const guint16 *) base)[i];
      {
        int e = (h >> 10) & 0x1F;
        double m = h & 0x3FF;
        double v = e == 0 ? ldexp (m, -24) : e == 31 ? (m != 0 ? NAN : INFINITY)
                                                      : ldexp (1024 + m, e - 25);

        return (h & 0x8000) ? -v : v;
      }
    }
}

/* A random value of @dtype with |x| in [2^emin, 2^(emax+1)), 1 in 32 zero,
 * written into element i. emin >= -14 and emax <= 15 keep it normal in fp16. */
static void
random_value (GRand              *rand,
              MixprecPluginDType  dtype,
              void               *base,
              gsize               i,
              int                 emin,
              int                 emax)
{
  gboolean neg = g_rand_boolean (rand);
  int e = g_rand_int_range (rand, emin, emax + 1);
  gboolean zero = g_rand_int_range (rand, 0, 32) == 0;

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
      ((float *) base)[i] = zero ? 0.0f : (float) ldexp (neg ? -g_rand_double_range (rand, 1, 2)
                                                              : g_rand_double_range (rand, 1, 2), e);
      break;
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      ((guint16 *) base)[i] = zero ? 0 : (guint16) ((neg << 15) | ((e + 127) << 7) |
                                                   g_rand_int_range (rand, 0, 128));
      break;
    default:
      ((guint16 *) base)[i] = zero ? 0 : (guint16) ((neg << 15) | ((e + 15) << 10) |
                                                   g_rand_int_range (rand, 0, 1024));
      break;
    }
}

static double
log_uniform (GRand  *rand,
             double  lo,
             double  hi)
{
  return exp (g_rand_double_range (rand, log (lo), log (hi)));
}

/* ------------------------------------------------------------ references
 *
 * Each is its optimizer's published rule written the plainest way, in
 * double, one element at a time; no code is shared with the plugins. */

typedef struct {
  double p;
  double s[2];
  double path;                 /* sum of |change of p|, for the tolerance */
} RefElement;

/* DeepSpeed FusedAdam's formula, Adam (L2) or AdamW (decoupled). */
static void
ref_adamw (const double *h,
           guint64       t,
           double        lr,
           double        g,
           RefElement   *e,
           double        observed)
{
  double b1 = h[1], b2 = h[2], eps = h[3], wd = h[4];
  double bc1 = h[5] != 0 ? 1 - pow (b1, (double) t) : 1;
  double bc2 = h[5] != 0 ? 1 - pow (b2, (double) t) : 1;
  double *m = &e->s[0], *v = &e->s[1];
  double update;

  if (h[6] == 0)
    g += wd * e->p;
  *m = b1 * *m + (1 - b1) * g;
  *v = b2 * *v + (1 - b2) * g * g;
  update = (*m / bc1) / (sqrt (*v / bc2) + eps);
  if (h[6] != 0)
    update += wd * e->p;
  e->p -= lr * update;
}

/* torch.optim.SGD: L2 decay, momentum with dampening, Nesterov. */
static void
ref_sgd (const double *h,
         guint64       t,
         double        lr,
         double        g,
         RefElement   *e,
         double        observed)
{
  double momentum = h[1], dampening = h[2], wd = h[3];
  double *buf = &e->s[0];

  g += wd * e->p;
  if (momentum != 0)
    {
      *buf = t == 1 ? g : momentum * *buf + (1 - dampening) * g;
      g = h[4] != 0 ? g + momentum * *buf : *buf;
    }
  e->p -= lr * g;
}

static guint lion_ambiguous;

/* Lion (Chen et al. 2023, Algorithm 2) with decoupled decay. sign() is a
 * step function: where the interpolation is zero to within what fp32
 * arithmetic can resolve, the plugin's fp32 and this double computation may
 * legitimately take different signs, so there the reference takes the
 * candidate closest to what the plugin produced (and counts such cases). */
static void
ref_lion (const double *h,
          guint64       t,
          double        lr,
          double        g,
          RefElement   *e,
          double        observed)
{
  double b1 = h[1], b2 = h[2], wd = h[3];
  double *m = &e->s[0];
  double c = b1 * *m + (1 - b1) * g;
  double resolution = 1e-5 * (fabs (b1 * *m) + fabs ((1 - b1) * g));
  double decayed = e->p - lr * wd * e->p;
  double s = c > 0 ? 1 : c < 0 ? -1 : 0;

  if (fabs (c) <= resolution && c != 0)
    {
      double best = INFINITY;

      lion_ambiguous++;
      for (int cand = -1; cand <= 1; cand++)
        if (fabs (decayed - lr * cand - observed) < best)
          {
            best = fabs (decayed - lr * cand - observed);
            s = cand;
          }
    }
  e->p = decayed - lr * s;
  *m = b2 * *m + (1 - b2) * g;
}

typedef void (*RefStep) (const double *h,
                         guint64       t,
                         double        lr,
                         double        g,
                         RefElement   *e,
                         double        observed);

/* Tolerance of the plugin's fp32 master against the double reference.
 *
 * Each fp32 step rounds the new parameter (2^-24 relative) and computes the
 * update from moments that carry a few roundings of their own (~10
 * operations, each within 2^-24), so the difference can grow at most
 * linearly with the steps: after T steps it is bounded by about
 * T * 10 * 2^-24 times the scale of what moved — |p| plus the distance p
 * travelled — which for T = 100 is 6e-5. Rounding errors mostly cancel:
 * measured, the worst case over all these tests is 1.5e-6. 2e-5 keeps a
 * 13x margin over that and still catches slips far smaller than a wrong
 * formula: shifting the bias-correction step by one fails at step 1 with
 * 7e-5, eps inside the square root with 8e-3. */
#define REF_RTOL 2e-5

typedef struct {
  const gchar *feature;
  RefStep ref;
  double hparams[8];
  MixprecPluginDType grad_dtype;
  gint working_dtype;
} RefCase;

static void
run_reference_case (const RefCase *rc,
                    GRand         *rand)
{
  const Plugin *plugin = plugin_get (rc->feature);
  g_autoptr(Buffers) b = buffers_new (plugin->best, N_ELEMENTS, rc->grad_dtype, TRUE, rc->working_dtype);
  g_autofree RefElement *ref = g_new0 (RefElement, N_ELEMENTS);
  double worst = 0;
  int gemin = g_rand_int_range (rand, -14, 0);

  b->args.hparams = rc->hparams;
  for (gsize i = 0; i < b->n; i++)
    {
      random_value (rand, MIXPREC_PLUGIN_DTYPE_FLOAT32, b->master, i, -6, 1);
      ref[i].p = b->master[i];
    }
  /* The first step must not read the momentum buffer (SGD) or anything
   * else that the engine leaves uninitialised: NaN would show. */
  if (g_str_equal (rc->feature, "sgd"))
    for (gsize i = 0; i < b->n; i++)
      ((float *) b->states[0])[i] = NAN;

  for (guint64 t = 1; t <= N_STEPS; t++)
    {
      b->args.step = t;
      /* A schedule: the step's own rate, not the lr hyper-parameter. */
      b->args.lr = rc->hparams[0] * g_rand_double_range (rand, 0.1, 1);
      b->args.grad_factor = (float) log_uniform (rand, 1e-3, 1);
      for (gsize i = 0; i < b->n; i++)
        random_value (rand, rc->grad_dtype, b->grad, i, gemin, gemin + 12);
      call_ok (plugin->best, b);

      for (gsize i = 0; i < b->n; i++)
        {
          double g = decode (rc->grad_dtype, b->grad, i) * (double) b->args.grad_factor;
          double before = ref[i].p, err;

          rc->ref (rc->hparams, t, b->args.lr, g, &ref[i], b->master[i]);
          ref[i].path += fabs (ref[i].p - before);
          err = fabs (b->master[i] - ref[i].p) / (fabs (ref[i].p) + ref[i].path + 1e-30);
          worst = MAX (worst, err);
          if (!(err <= REF_RTOL))
            {
              g_test_fail_printf ("%s step %" G_GUINT64_FORMAT " element %" G_GSIZE_FORMAT
                                  ": plugin %.9g, reference %.9g (relative error %.3g)",
                                  rc->feature, t, i, b->master[i], ref[i].p, err);
              return;
            }
        }
    }
  g_test_message ("%s, grad dtype %d: worst relative error %.3g", rc->feature,
                  rc->grad_dtype, worst);
}

static const MixprecPluginDType grad_dtypes[] = {
  MIXPREC_PLUGIN_DTYPE_FLOAT32, MIXPREC_PLUGIN_DTYPE_BFLOAT16, MIXPREC_PLUGIN_DTYPE_FLOAT16,
};

static void
test_reference_adamw (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (101);

  /* Every mode pair, every gradient dtype, random hyper-parameters. */
  for (guint mode = 0; mode < 4; mode++)
    for (guint d = 0; d < G_N_ELEMENTS (grad_dtypes); d++)
      {
        RefCase rc = { "adamw", ref_adamw, { 0 }, grad_dtypes[d], MIXPREC_PLUGIN_DTYPE_BFLOAT16 };

        rc.hparams[0] = log_uniform (rand, 1e-4, 1e-1);
        rc.hparams[1] = g_rand_double_range (rand, 0, 0.99);
        rc.hparams[2] = g_rand_double_range (rand, 0.9, 0.9999);
        /* Up to the gradients' own size, where eps's placement matters. */
        rc.hparams[3] = log_uniform (rand, 1e-8, 1e-1);
        rc.hparams[4] = g_rand_double_range (rand, 0, 0.2);
        rc.hparams[5] = mode & 1;          /* bias_correction */
        rc.hparams[6] = (mode >> 1) & 1;   /* adam_w_mode */
        run_reference_case (&rc, rand);
      }
}

static void
test_reference_sgd (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (202);
  /* momentum, dampening, nesterov; 0.5 marks "random" */
  static const double combos[][3] = {
    { 0, 0, 0 }, { 0.5, 0, 0 }, { 0.5, 0, 1 }, { 0.5, 0.5, 0 }, { 0.99, 0, 1 },
  };

  for (guint c = 0; c < G_N_ELEMENTS (combos); c++)
    for (guint d = 0; d < G_N_ELEMENTS (grad_dtypes); d++)
      {
        RefCase rc = { "sgd", ref_sgd, { 0 }, grad_dtypes[d], -1 };

        rc.hparams[0] = log_uniform (rand, 1e-4, 1e-1);
        rc.hparams[1] = combos[c][0] == 0.5 ? g_rand_double_range (rand, 0.1, 0.95) : combos[c][0];
        rc.hparams[2] = combos[c][1] == 0.5 ? g_rand_double_range (rand, 0.05, 1) : combos[c][1];
        rc.hparams[3] = g_rand_boolean (rand) ? g_rand_double_range (rand, 0, 0.1) : 0;
        rc.hparams[4] = combos[c][2];
        run_reference_case (&rc, rand);
      }
}

static void
test_reference_lion (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (303);

  lion_ambiguous = 0;
  for (guint rep = 0; rep < 2; rep++)
    for (guint d = 0; d < G_N_ELEMENTS (grad_dtypes); d++)
      {
        RefCase rc = { "lion", ref_lion, { 0 }, grad_dtypes[d], MIXPREC_PLUGIN_DTYPE_FLOAT16 };

        rc.hparams[0] = log_uniform (rand, 1e-5, 1e-2);
        rc.hparams[1] = g_rand_double_range (rand, 0.5, 0.99);
        rc.hparams[2] = g_rand_double_range (rand, 0.9, 0.999);
        rc.hparams[3] = rep == 0 ? 0 : g_rand_double_range (rand, 0, 1);
        run_reference_case (&rc, rand);
      }
  /* A handful of coin flips among 6 * 100 * 1037 signs, not a pattern. */
  g_test_message ("lion: %u signs decided within fp32 resolution", lion_ambiguous);
  g_assert_cmpuint (lion_ambiguous, <, 60);
}

/* sign(0) = 0: a zero gradient on a zero momentum leaves p alone (without
 * decay), and with decay only decays it. */
static void
test_lion_sign_zero (void)
{
  const Plugin *plugin = plugin_get ("lion");
  const MixprecOptimizerV2 *vts[] = { plugin->scalar, plugin->avx2, plugin->best };

  for (guint v = 0; v < G_N_ELEMENTS (vts); v++)
    for (guint with_decay = 0; with_decay < 2; with_decay++)
      {
        g_autoptr(Buffers) b = buffers_new (vts[v], 19, MIXPREC_PLUGIN_DTYPE_FLOAT32, TRUE, -1);
        double h[] = { 0.01, 0.9, 0.99, with_decay ? 0.5 : 0 };

        b->args.hparams = h;
        b->args.lr = h[0];
        for (gsize i = 0; i < b->n; i++)
          b->master[i] = (float) (i + 1) / 8;
        call_ok (vts[v], b);
        for (gsize i = 0; i < b->n; i++)
          {
            double p0 = (double) (i + 1) / 8;

            if (with_decay)
              g_assert_cmpfloat_with_epsilon (b->master[i], p0 * (1 - 0.01 * 0.5), 1e-6);
            else
              g_assert_cmpfloat (b->master[i], ==, p0);
            g_assert_cmpfloat (((float *) b->states[0])[i], ==, 0);
          }
      }
}

/* ------------------------------------------------------------ bitwise */

static void
random_hparams (const MixprecOptimizerV2 *opt,
                GRand                    *rand,
                double                   *h)
{
  for (guint k = 0; k < opt->n_hparams; k++)
    {
      const MixprecHParamSpecV1 *spec = &opt->hparams[k];

      if (spec->type == MIXPREC_HPARAM_BOOL)
        h[k] = g_rand_boolean (rand);
      else if (g_str_equal (spec->name, "lr"))
        h[k] = log_uniform (rand, 1e-4, 1e-1);
      else if (g_str_has_prefix (spec->name, "beta") || g_str_equal (spec->name, "momentum"))
        h[k] = g_rand_double_range (rand, 0.5, 0.999);
      else if (g_str_equal (spec->name, "eps"))
        h[k] = log_uniform (rand, 1e-8, 1e-2);
      else
        h[k] = g_rand_double_range (rand, 0, 0.3);
    }
  /* torch's rule, which the plugin enforces (tested below). */
  if (g_str_equal (opt->name, "sgd") && h[4] != 0)
    h[2] = 0;
}

/* Fills every buffer; parameters and gradients include zeros of both
 * signs, fp32 subnormals, values past fp16's range and, in the gradients,
 * infinities and NaN. */
static void
fill_random (Buffers *b,
             GRand   *rand)
{
  static const float specials[] = { 0.0f, -0.0f, 1e-40f, -3e-39f, 70000.0f, -1e6f, 65504.0f };

  for (gsize i = 0; i < b->n; i++)
    {
      float p;

      random_value (rand, MIXPREC_PLUGIN_DTYPE_FLOAT32, &p, 0, -20, 4);
      if (i % 97 < G_N_ELEMENTS (specials))
        p = specials[i % 97];
      if (b->master != NULL)
        b->master[i] = p;
      else if (b->args.working_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32)
        ((float *) b->working)[i] = p;
      else if (b->args.working_dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
        ((guint16 *) b->working)[i] = bf16_bits_of (p);
      else
        random_value (rand, MIXPREC_PLUGIN_DTYPE_FLOAT16, b->working, i, -14, 15);
      random_value (rand, b->args.grad_dtype, b->grad, i, -14, 15);
      for (guint k = 0; k < b->n_states; k++)
        ((float *) b->states[k])[i] = (float) (k == 1 ? g_rand_double_range (rand, 0, 2) : g_rand_double_range (rand, -1, 1));
    }
  /* Non-finite gradients where the engine would have skipped the step: the
   * two kernels must still agree on them. */
  if (b->args.grad_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32)
    {
      ((float *) b->grad)[5] = INFINITY;
      ((float *) b->grad)[b->n - 2] = NAN;
    }
  else
    {
      ((guint16 *) b->grad)[5] = b->args.grad_dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16 ? 0x7F80 : 0x7C00;
      ((guint16 *) b->grad)[b->n - 2] = b->args.grad_dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16 ? 0xFFC1 : 0x7E01;
    }
}

/* The working copy equals the library's own conversion of the new master,
 * with the same rounding, seed and element indices. */
static void
assert_working_is_conversion (const Buffers *b)
{
  gsize size = b->n * dtype_size (b->args.working_dtype);
  g_autofree guint8 *expected = g_malloc (size);
  g_autoptr(GError) error = NULL;

  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, b->master,
                                        (MixprecDType) b->args.working_dtype, expected, b->n,
                                        (MixprecRounding) b->args.rounding, b->args.seed,
                                        b->args.first_index, &error));
  g_assert_no_error (error);
  if (memcmp (expected, b->working, size) != 0)
    g_test_fail_printf ("%s: working copy (dtype %d, rounding %d) is not the conversion of the master",
                        "step", b->args.working_dtype, b->args.rounding);
}

/* One optimizer at one SIMD level, for the bitwise tests. */
typedef struct {
  const gchar *feature;
  const gchar *level;          /* "avx2" or "avx512" */
} BitwiseCase;

static const BitwiseCase bitwise_cases[] = {
  { "adamw", "avx2" }, { "adamw", "avx512" },
  { "sgd", "avx2" }, { "sgd", "avx512" },
  { "lion", "avx2" }, { "lion", "avx512" },
};

static void buffers_narrow_states (Buffers *b);

static void
test_bitwise (gconstpointer data)
{
  const BitwiseCase *bc = data;
  const Plugin *plugin = plugin_get (bc->feature);
  g_autoptr(GRand) rand = g_rand_new_with_seed (g_str_hash (bc->feature));
  static const gint working_dtypes[] = {
    -1, MIXPREC_PLUGIN_DTYPE_FLOAT32, MIXPREC_PLUGIN_DTYPE_FLOAT16, MIXPREC_PLUGIN_DTYPE_BFLOAT16,
  };
  gboolean avx512 = g_str_equal (bc->level, "avx512");
  const MixprecOptimizerV2 *simd = avx512 ? plugin->avx512 : plugin->avx2;
  guint n_cases = 0;

  /* MIXPREC_SIMD=avx512 lowers nothing: the best the CPU has. */
  g_assert_true (plugin->best == plugin->avx512);
  if (!(avx512 ? cpu_has_avx512 () : cpu_has_avx2 ()) ||
      simd == (avx512 ? plugin->avx2 : plugin->scalar))
    {
      g_test_skip_printf ("no %s kernels here (the CPU or the build lacks them): nothing to "
                          "compare with the scalar ones", avx512 ? "AVX-512 F/BW/VL" : "AVX2/FMA/F16C");
      return;
    }
  g_assert_true (simd != plugin->scalar);

  for (guint d = 0; d < G_N_ELEMENTS (grad_dtypes); d++)
    for (guint w = 0; w < G_N_ELEMENTS (working_dtypes); w++)
      for (guint rounding = 0; rounding < 2; rounding++)
        for (guint with_master = 0; with_master < 2; with_master++)
          for (guint bf16_state = 0; bf16_state < 2; bf16_state++)
          {
            g_autoptr(Buffers) a = NULL;
            g_autoptr(Buffers) s = NULL;
            double h[8];

            if (!with_master && working_dtypes[w] < 0)
              continue;
            a = buffers_new (simd, N_ELEMENTS, grad_dtypes[d], with_master, working_dtypes[w]);
            a->args.rounding = rounding;
            a->args.seed = g_rand_int (rand);
            random_hparams (simd, rand, h);
            a->args.hparams = h;
            a->args.lr = h[0];
            a->args.grad_factor = (float) log_uniform (rand, 1e-3, 1);
            fill_random (a, rand);
            if (bf16_state)
              {
                /* The state rounds as the weights do, from its own seed. */
                buffers_narrow_states (a);
                a->state_rounding = rounding;
                a->state_seed = g_rand_int (rand);
              }
            s = buffers_copy (a);

            for (guint64 t = 1; t <= 3; t++)
              {
                a->args.step = s->args.step = t;
                call_ok (simd, a);
                call_ok (plugin->scalar, s);
                assert_buffers_identical (a, s, avx512 ? "scalar against AVX-512" : "scalar against AVX2");
                if (with_master && a->working != NULL)
                  assert_working_is_conversion (a);
              }
            n_cases++;
          }
  g_test_message ("%s (%s): %u dtype/rounding/master combinations", plugin->feature, bc->level, n_cases);
}

/* ------------------------------------------------------------ bf16 state
 *
 * The reference is written here, apart from the plugin: AdamW in FP32 as
 * DeepSpeed's FusedAdam forms it (fused multiply-adds where
 * the scalar kernel has them), the moments read from bfloat16 exactly and
 * stored back rounded to nearest even after every step — what a fused
 * torch AdamW does with bf16 exp_avg/exp_avg_sq tensors: load to FP32,
 * compute, store rounded. */

static float
bf16_to_f32 (guint16 h)
{
  guint32 u = (guint32) h << 16;
  float f;

  memcpy (&f, &u, 4);
  return f;
}

static guint16
bf16_rne (float f)
{
  guint32 u;

  memcpy (&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return (guint16) ((u >> 16) | 0x40);
  return (guint16) ((u + 0x7FFFu + ((u >> 16) & 1)) >> 16);
}

/* The states of @b, rounded to nearest even into bfloat16 arrays. */
static void
buffers_narrow_states (Buffers *b)
{
  for (guint k = 0; k < b->n_states; k++)
    {
      guint16 *narrow = g_new (guint16, b->n);

      for (gsize i = 0; i < b->n; i++)
        narrow[i] = bf16_rne (((float *) b->states[k])[i]);
      g_free (b->states[k]);
      b->states[k] = narrow;
    }
  b->state_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
}

static void
test_adamw_bf16_state (void)
{
  const Plugin *plugin = plugin_get ("adamw");
  const MixprecOptimizerV2 *vts[] = { plugin->scalar, plugin->avx2, plugin->best };
  enum { N = 67, STEPS = 12 };
  /* lr, beta1, beta2, eps, weight_decay, bias_correction, adam_w_mode */
  double h[7] = { 1e-2, 0.9, 0.999, 1e-8, 0.01, 1, 1 };

  for (guint v = 0; v < G_N_ELEMENTS (vts); v++)
    {
      g_autoptr(GRand) rand = g_rand_new_with_seed (77);
      g_autoptr(Buffers) b = buffers_new (vts[v], N, MIXPREC_PLUGIN_DTYPE_FLOAT32, TRUE,
                                          MIXPREC_PLUGIN_DTYPE_BFLOAT16);
      float p[N], grads[STEPS][N];
      guint16 m[N] = { 0 }, vv[N] = { 0 };

      buffers_narrow_states (b);
      b->args.hparams = h;
      for (gsize i = 0; i < N; i++)
        {
          p[i] = b->master[i] = (float) g_rand_double_range (rand, -1, 1);
          for (guint t = 0; t < STEPS; t++)
            grads[t][i] = (float) g_rand_double_range (rand, -1e-2, 1e-2) * (i % 5 == 0 ? 100 : 1);
        }
      for (guint t = 1; t <= STEPS; t++)
        {
          double lr = h[0] * (1.0 - (t - 1) / (2.0 * STEPS));
          double bc1 = 1 - pow (h[1], t), bc2 = 1 - pow (h[2], t);
          float b1 = (float) h[1], omb1 = (float) (1 - h[1]), b2 = (float) h[2];
          float omb2 = (float) (1 - h[2]), eps = (float) h[3];
          float rsqrt_bc2 = (float) (1 / sqrt (bc2)), neg_step = (float) (-lr / bc1);
          float neg_lr_decay = (float) (-lr * h[4]);

          memcpy (b->grad, grads[t - 1], sizeof grads[0]);
          b->args.step = t;
          b->args.lr = lr;
          call_ok (vts[v], b);
          for (gsize i = 0; i < N; i++)
            {
              float g = grads[t - 1][i];
              float mf = fmaf (omb1, g, b1 * bf16_to_f32 (m[i]));
              float vf = fmaf (omb2, g * g, b2 * bf16_to_f32 (vv[i]));
              float denom = fmaf (sqrtf (vf), rsqrt_bc2, eps);

              p[i] = fmaf (neg_lr_decay, p[i], p[i]);
              p[i] = fmaf (neg_step, mf / denom, p[i]);
              m[i] = bf16_rne (mf);
              vv[i] = bf16_rne (vf);
            }
          g_assert_cmpmem (b->master, sizeof p, p, sizeof p);
          g_assert_cmpmem (b->states[0], sizeof m, m, sizeof m);
          g_assert_cmpmem (b->states[1], sizeof vv, vv, sizeof vv);
          for (gsize i = 0; i < N; i++)
            g_assert_cmpuint (((guint16 *) b->working)[i], ==, bf16_rne (p[i]));
        }
    }
}

/* Stochastic rounding of the state draws from (state_seed + slot,
 * first_index + i): a value between two bfloat16 neighbours lands on either,
 * with about the right frequency, and never elsewhere. */
static void
test_sgd_bf16_state_stochastic (void)
{
  const Plugin *plugin = plugin_get ("sgd");
  enum { N = 4096 };
  /* lr 0, momentum 0.5: the first step stores buf = g exactly as given. */
  double h[5] = { 0, 0.5, 0, 0, 0 };
  g_autoptr(Buffers) b = buffers_new (plugin->best, N, MIXPREC_PLUGIN_DTYPE_FLOAT32, TRUE, -1);
  const float lo = 1.0f, hi = 1.0078125f;   /* neighbours in bfloat16 */
  const float x = lo + (hi - lo) / 4;       /* a quarter of the way up */
  guint n_hi = 0;

  buffers_narrow_states (b);
  b->state_rounding = MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  b->args.hparams = h;
  b->args.lr = 0;
  for (gsize i = 0; i < N; i++)
    ((float *) b->grad)[i] = x;
  call_ok (plugin->best, b);
  for (gsize i = 0; i < N; i++)
    {
      float got = bf16_to_f32 (((guint16 *) b->states[0])[i]);

      g_assert_true (got == lo || got == hi);
      n_hi += got == hi;
    }
  /* Binomial(4096, 1/4): mean 1024, sd 28. */
  g_assert_cmpuint (n_hi, >, 1024 - 6 * 28);
  g_assert_cmpuint (n_hi, <, 1024 + 6 * 28);
}

/* Element i uses the random bits of index first_index + i, so a range cut
 * into calls at arbitrary points (here inside SIMD blocks, too) gives the
 * bits of one call; so do two threads on two halves at once. */
static gpointer
step_thread (gpointer data)
{
  gpointer *job = data;
  char errbuf[128];
  Buffers *b = job[1];
  gsize half = b->n / 2;
  gboolean second = GPOINTER_TO_UINT (job[2]);

  return GINT_TO_POINTER (call_range (job[0], b, second ? half : 0, second ? b->n - half : half,
                                      errbuf, sizeof errbuf));
}

static void
test_chunking (gconstpointer data)
{
  const Plugin *plugin = plugin_get (data);
  const MixprecOptimizerV2 *vts[] = { plugin->scalar, plugin->avx2, plugin->best };
  g_autoptr(GRand) rand = g_rand_new_with_seed (g_str_hash (data) + 1);
  static const gsize cuts[] = { 0, 5, 13, 400, 401, 1000, N_ELEMENTS };

  for (guint v = 0; v < G_N_ELEMENTS (vts); v++)
    for (guint w = MIXPREC_PLUGIN_DTYPE_FLOAT16; w <= MIXPREC_PLUGIN_DTYPE_BFLOAT16; w++)
      {
        g_autoptr(Buffers) whole = buffers_new (vts[v], N_ELEMENTS, MIXPREC_PLUGIN_DTYPE_BFLOAT16, TRUE, w);
        g_autoptr(Buffers) pieces = NULL;
        g_autoptr(Buffers) threads = NULL;
        gpointer jobs[2][3];
        GThread *th[2];
        double h[8];
        char errbuf[128];

        whole->args.rounding = MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
        random_hparams (vts[v], rand, h);
        whole->args.hparams = h;
        whole->args.lr = h[0];
        fill_random (whole, rand);
        pieces = buffers_copy (whole);
        threads = buffers_copy (whole);

        call_ok (vts[v], whole);
        for (guint c = 0; c + 1 < G_N_ELEMENTS (cuts); c++)
          g_assert_cmpint (call_range (vts[v], pieces, cuts[c], cuts[c + 1] - cuts[c], errbuf, sizeof errbuf),
                           ==, MIXPREC_PLUGIN_OK);
        assert_buffers_identical (whole, pieces, "calls over pieces");

        for (guint k = 0; k < 2; k++)
          {
            jobs[k][0] = (gpointer) vts[v];
            jobs[k][1] = threads;
            jobs[k][2] = GUINT_TO_POINTER (k);
            th[k] = g_thread_new ("step", step_thread, jobs[k]);
          }
        for (guint k = 0; k < 2; k++)
          g_assert_cmpint (GPOINTER_TO_INT (g_thread_join (th[k])), ==, MIXPREC_PLUGIN_OK);
        assert_buffers_identical (whole, threads, "two threads");
      }
}

/* Without a master, the parameter is read from the working copy and the
 * result written back to it: the same bits as a step on an fp32 master
 * holding the decoded working copy, followed by the conversion. */
static void
test_no_master (gconstpointer data)
{
  const Plugin *plugin = plugin_get (data);
  g_autoptr(GRand) rand = g_rand_new_with_seed (g_str_hash (data) + 2);

  for (guint w = MIXPREC_PLUGIN_DTYPE_FLOAT16; w <= MIXPREC_PLUGIN_DTYPE_BFLOAT16; w++)
    for (guint rounding = 0; rounding < 2; rounding++)
      {
        g_autoptr(Buffers) bare = buffers_new (plugin->best, N_ELEMENTS, MIXPREC_PLUGIN_DTYPE_FLOAT32, FALSE, w);
        g_autoptr(Buffers) mastered = NULL;
        double h[8];

        bare->args.rounding = rounding;
        random_hparams (plugin->best, rand, h);
        bare->args.hparams = h;
        bare->args.lr = h[0];
        fill_random (bare, rand);
        mastered = buffers_copy (bare);
        mastered->master = g_new (float, bare->n);

        for (guint64 t = 1; t <= 5; t++)
          {
            bare->args.step = mastered->args.step = t;
            for (gsize i = 0; i < bare->n; i++)
              mastered->master[i] = (float) decode (w, mastered->working, i);
            call_ok (plugin->best, bare);
            call_ok (plugin->best, mastered);
            if (memcmp (bare->working, mastered->working, bare->n * 2) != 0 ||
                memcmp (bare->states[0], mastered->states[0], bare->n * 4) != 0 ||
                (bare->n_states > 1 && memcmp (bare->states[1], mastered->states[1], bare->n * 4) != 0))
              g_test_fail_printf ("%s without master, dtype %u rounding %u: differs at step %"
                                  G_GUINT64_FORMAT, plugin->feature, w, rounding, t);
          }
      }
}

/* ------------------------------------------------------------ errors */

static void
assert_step_fails (const MixprecOptimizerV2 *opt,
                   Buffers                  *b,
                   int                       status,
                   const gchar              *needle)
{
  char errbuf[256] = "";
  char tiny[6];

  g_assert_cmpint (call_range (opt, b, 0, b->n, errbuf, sizeof errbuf), ==, status);
  if (strstr (errbuf, needle) == NULL || errbuf[strlen (errbuf) - 1] != '.')
    g_test_fail_printf ("message \"%s\" lacks \"%s\" or is not a sentence", errbuf, needle);
  /* A short buffer still gets a terminated (truncated) message. */
  memset (tiny, 'x', sizeof tiny);
  g_assert_cmpint (call_range (opt, b, 0, b->n, tiny, sizeof tiny), ==, status);
  g_assert_cmpuint (strnlen (tiny, sizeof tiny), ==, sizeof tiny - 1);
}

static void
test_errors (gconstpointer data)
{
  const Plugin *plugin = plugin_get (data);
  const MixprecOptimizerV2 *opt = plugin->best;
  g_autoptr(Buffers) b = buffers_new (opt, 16, MIXPREC_PLUGIN_DTYPE_BFLOAT16, TRUE,
                                      MIXPREC_PLUGIN_DTYPE_BFLOAT16);
  double h[8];
  Buffers saved;

  for (guint k = 0; k < opt->n_hparams; k++)
    h[k] = opt->hparams[k].default_value;
  b->args.hparams = h;
  saved = *b;
  call_ok (opt, b);

  b->args.n_hparams = opt->n_hparams - 1;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "hyper-parameters");
  b->args = saved.args;
  b->args.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_UNSUPPORTED, "gradients");
  b->args = saved.args;
  b->args.working_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_UNSUPPORTED, "working");
  b->args = saved.args;
  b->args.rounding = 7;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_UNSUPPORTED, "rounding");
  b->args = saved.args;
  b->args.step = 0;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "1-based");
  b->args = saved.args;
  b->args.lr = NAN;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "learning rate");
  b->args = saved.args;
  b->args.struct_size = 8;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "MixprecOptimizerStepV2");
  b->args = saved.args;
  /* float16 state is no part of the contract (MixprecOptimizerV2). */
  b->state_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT16;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_UNSUPPORTED, "float32 or bfloat16");
  b->state_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  b->state_rounding = 7;
  b->state_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_UNSUPPORTED, "state rounding");
  b->state_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  b->state_rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;

  h[1] = -0.5;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, opt->hparams[1].name);
  h[1] = opt->hparams[1].default_value;
  for (guint k = 0; k < opt->n_hparams; k++)
    if (opt->hparams[k].type == MIXPREC_HPARAM_BOOL)
      {
        h[k] = 0.5;
        assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, opt->hparams[k].name);
        h[k] = opt->hparams[k].default_value;
      }

  b->master = NULL;
  b->working = NULL;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "master and working");
  b->master = saved.master;
  b->working = saved.working;
  b->states[0] = NULL;
  assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, opt->state_names[0]);
  b->states[0] = saved.states[0];

  /* An empty range checks its arguments and touches nothing. */
  {
    char errbuf[64];

    g_assert_cmpint (call_range (opt, b, 0, 0, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  }

  if (g_str_equal (opt->name, "sgd"))
    {
      h[4] = 1;        /* nesterov, with the default momentum 0 */
      assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "nesterov");
      h[1] = 0.9;
      h[2] = 0.1;      /* and with dampening */
      assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "dampening 0");
      h[2] = 0;
      call_ok (opt, b);
    }
  if (g_str_equal (opt->name, "adamw"))
    {
      h[2] = 1;        /* beta2 = 1 would divide by a zero bias correction */
      assert_step_fails (opt, b, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "below 1");
    }
}

/* ------------------------------------------------------------ schemas */

typedef struct {
  const gchar *name;
  MixprecHParamType type;
  double default_value;
} Expected;

static void
assert_schema (const gchar    *feature,
               const Expected *expected,
               guint           n_expected,
               const gchar   **states)
{
  const Plugin *plugin = plugin_get (feature);
  const MixprecOptimizerV2 *opt = plugin->best;
  g_autofree gchar *plugin_name = g_strdup_printf ("optim-%s", feature);

  g_assert_cmpuint (plugin->desc->abi_major, ==, MIXPREC_PLUGIN_ABI_VERSION_MAJOR);
  g_assert_cmpuint (plugin->desc->abi_minor, <=, MIXPREC_PLUGIN_ABI_VERSION_MINOR);
  g_assert_cmpstr (plugin->desc->name, ==, plugin_name);
  g_assert_nonnull (plugin->desc->license);
  g_assert_nonnull (plugin->desc->version);
  g_assert_cmpstr (opt->name, ==, feature);
  g_assert_cmpstr (opt->device, ==, "cpu");
  g_assert_nonnull (opt->description);
  g_assert_cmpuint (opt->n_hparams, ==, n_expected);
  for (guint k = 0; k < n_expected; k++)
    {
      g_assert_cmpstr (opt->hparams[k].name, ==, expected[k].name);
      g_assert_cmpint (opt->hparams[k].type, ==, expected[k].type);
      g_assert_cmpfloat (opt->hparams[k].default_value, ==, expected[k].default_value);
      g_assert_cmpfloat (opt->hparams[k].min_value, <=, opt->hparams[k].default_value);
      g_assert_cmpfloat (opt->hparams[k].max_value, >=, opt->hparams[k].default_value);
      g_assert_nonnull (opt->hparams[k].description);
    }
  g_assert_cmpuint (opt->n_state_slots, ==, g_strv_length ((gchar **) states));
  for (guint k = 0; k < opt->n_state_slots; k++)
    g_assert_cmpstr (opt->state_names[k], ==, states[k]);
  for (guint k = 0; k < G_N_ELEMENTS (opt->reserved); k++)
    g_assert_null (opt->reserved[k]);
  /* The two vtables describe the same optimizer. */
  g_assert_true (plugin->scalar->hparams == opt->hparams);
}

static void
test_schemas (void)
{
  /* DeepSpeed's defaults (mixprec.json(5)), torch.optim.SGD, Lion's paper. */
  static const Expected adamw[] = {
    { "lr", MIXPREC_HPARAM_DOUBLE, 1e-3 }, { "beta1", MIXPREC_HPARAM_DOUBLE, 0.9 },
    { "beta2", MIXPREC_HPARAM_DOUBLE, 0.999 }, { "eps", MIXPREC_HPARAM_DOUBLE, 1e-8 },
    { "weight_decay", MIXPREC_HPARAM_DOUBLE, 0 }, { "bias_correction", MIXPREC_HPARAM_BOOL, 1 },
    { "adam_w_mode", MIXPREC_HPARAM_BOOL, 1 },
  };
  static const Expected sgd[] = {
    { "lr", MIXPREC_HPARAM_DOUBLE, 1e-3 }, { "momentum", MIXPREC_HPARAM_DOUBLE, 0 },
    { "dampening", MIXPREC_HPARAM_DOUBLE, 0 }, { "weight_decay", MIXPREC_HPARAM_DOUBLE, 0 },
    { "nesterov", MIXPREC_HPARAM_BOOL, 0 },
  };
  static const Expected lion[] = {
    { "lr", MIXPREC_HPARAM_DOUBLE, 1e-4 }, { "beta1", MIXPREC_HPARAM_DOUBLE, 0.9 },
    { "beta2", MIXPREC_HPARAM_DOUBLE, 0.99 }, { "weight_decay", MIXPREC_HPARAM_DOUBLE, 0 },
  };
  const gchar *adamw_states[] = { "exp_avg", "exp_avg_sq", NULL };
  const gchar *sgd_states[] = { "momentum_buffer", NULL };
  const gchar *lion_states[] = { "exp_avg", NULL };

  assert_schema ("adamw", adamw, G_N_ELEMENTS (adamw), adamw_states);
  assert_schema ("sgd", sgd, G_N_ELEMENTS (sgd), sgd_states);
  assert_schema ("lion", lion, G_N_ELEMENTS (lion), lion_states);
}

/* init() refuses a host table too short to hold register_optimizer, and
 * a library of another ABI major version. */
static void
test_bad_host (void)
{
  const Plugin *plugin = plugin_get ("adamw");
  MixprecPluginHostV1 host = { 0 };
  char errbuf[256] = "";

  host.struct_size = sizeof (size_t);
  g_assert_cmpint (plugin->desc->init (&host, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "register_optimizer"));

  host.struct_size = sizeof host;
  host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR + 1;
  host.register_optimizer_v2 = fake_register;
  g_assert_cmpint (plugin->desc->init (&host, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_ERR_UNSUPPORTED);
  g_assert_nonnull (strstr (errbuf, "ABI"));
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/optim/schemas", test_schemas);
  g_test_add_func ("/optim/bad-host", test_bad_host);
  g_test_add_func ("/optim/adamw/reference", test_reference_adamw);
  g_test_add_func ("/optim/sgd/reference", test_reference_sgd);
  g_test_add_func ("/optim/lion/reference", test_reference_lion);
  g_test_add_func ("/optim/lion/sign-zero", test_lion_sign_zero);
  g_test_add_func ("/optim/adamw/bf16-state", test_adamw_bf16_state);
  g_test_add_func ("/optim/sgd/bf16-state-stochastic", test_sgd_bf16_state_stochastic);
  for (guint i = 0; i < G_N_ELEMENTS (plugins); i++)
    {
      const gchar *f = plugins[i].feature;
      g_autofree gchar *chunking = g_strdup_printf ("/optim/%s/chunking", f);
      g_autofree gchar *no_master = g_strdup_printf ("/optim/%s/no-master", f);
      g_autofree gchar *errors = g_strdup_printf ("/optim/%s/errors", f);

      g_test_add_data_func (chunking, f, test_chunking);
      g_test_add_data_func (no_master, f, test_no_master);
      g_test_add_data_func (errors, f, test_errors);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bitwise_cases); i++)
    {
      g_autofree gchar *bitwise = g_strdup_printf ("/optim/%s/scalar-equals-%s", bitwise_cases[i].feature,
                                                   bitwise_cases[i].level);

      g_test_add_data_func (bitwise, &bitwise_cases[i], test_bitwise);
    }
  return g_test_run ();
}
