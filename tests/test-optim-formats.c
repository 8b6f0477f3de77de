/* test-optim-formats.c — revision 3 of the cpu optimizers (adamw, lion,
 * sgd): every state format, every master format, every kernel level,
 * bit for bit against a reference written here from the documented rules
 * (docs/reference/optimizer-states.md): each block-scaled slot decoded
 * (stored value times the block's scale), the FP32 update of the plugin's
 * own float32 path over the decoded values, each block encoded again (its
 * absmax, its scale, its codes by torchao's search), a remainder master
 * joined and split, a Kahan master stepped. The FP32 update itself is held
 * to double-precision references by tests/test-optim.
 *
 * Also: the table-driven int8 / int4 encoder against torchao's binary
 * search at every step of every map and densely over [-1, 1] (all of it
 * with MIXPREC_TEST_EXHAUSTIVE=1); the codecs of each level against each
 * other on hostile blocks; edge cases (all-zero blocks, NaN and Inf
 * gradients, short last blocks, block sizes 32 .. 4096); and the errors
 * of malformed calls. */
#include "config.h"

#include <math.h>
#include <string.h>
#include <gmodule.h>
#include <mixprec/mixprec.h>
#include <mixprec/mixprec-plugin.h>

#include "mixprec-x86-features-private.h"
#include "optim-quant.h"

#define N 1000                  /* not a multiple of 16 or of any block size: a short last block */
#define N_STEPS 3

G_STATIC_ASSERT (_MIXPREC_QFMT_INT4_DYNAMIC == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC);
G_STATIC_ASSERT (_MIXPREC_QFMT_FLOAT8_E4M3_SCALED == MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED);
G_STATIC_ASSERT (_MIXPREC_QFMT_FLOAT16_SCALED == MIXPREC_PLUGIN_STATE_FLOAT16_SCALED);
G_STATIC_ASSERT (_MIXPREC_QMASTER_KAHAN == MIXPREC_PLUGIN_MASTER_KAHAN);
G_STATIC_ASSERT (_MIXPREC_QMASTER_REMAINDER == MIXPREC_PLUGIN_MASTER_REMAINDER);

/* ------------------------------------------------------------ loading */

typedef struct {
  MixprecPluginHostV1 host;
  const MixprecOptimizerV3 *registered;
} FakeHost;

static int
fake_register_v3 (MixprecPluginHostV1      *host,
                  const MixprecOptimizerV3 *optimizer,
                  char                     *errbuf,
                  size_t                    errbuf_len)
{
  ((FakeHost *) host->host_data)->registered = optimizer;
  return MIXPREC_PLUGIN_OK;
}

static int
fake_register_v2 (MixprecPluginHostV1      *host,
                  const MixprecOptimizerV2 *optimizer,
                  char                     *errbuf,
                  size_t                    errbuf_len)
{
  g_error ("a host with register_optimizer_v3 got a revision 2 optimizer");
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

enum { LEVEL_SCALAR, LEVEL_AVX2, LEVEL_AVX512, N_LEVELS };
static const gchar *const level_names[N_LEVELS] = { "scalar", "avx2", "avx512" };

typedef struct {
  const gchar *name;
  const MixprecOptimizerV3 *vt[N_LEVELS];
} Plugin;

static Plugin plugins[] = { { "adamw" }, { "lion" }, { "sgd" } };

static gboolean
level_available (guint level)
{
#if defined(__x86_64__) || defined(__i386__)
  return level == LEVEL_SCALAR || _mixprec_x86_simd_level () >= (int) level;
#else
  return level == LEVEL_SCALAR;
#endif
}

static const Plugin *
plugin_get (const gchar *name)
{
  Plugin *p = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (plugins); i++)
    if (g_str_equal (plugins[i].name, name))
      p = &plugins[i];
  g_assert_nonnull (p);
  if (p->vt[0] == NULL)
    {
      g_autofree gchar *base = g_strdup_printf ("mixprec-optim-%s.so", name);
      g_autofree gchar *symbol = g_strdup_printf ("mixprec_plugin_optim_%s_get_desc", name);
      g_autofree gchar *path = NULL;
      const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
      MixprecPluginGetDescFunc get_desc = NULL;
      const MixprecPluginDesc *desc;
      GModule *module;

      g_assert_nonnull (top);
      path = g_build_filename (top, "plugins", ".libs", base, NULL);
      module = g_module_open (path, G_MODULE_BIND_LOCAL);
      if (module == NULL)
        g_error ("%s", g_module_error ());
      g_module_make_resident (module);
      g_assert_true (g_module_symbol (module, symbol, (gpointer *) &get_desc));
      desc = get_desc ();
      for (guint level = 0; level < N_LEVELS; level++)
        {
          FakeHost fake = { { 0 } };
          char errbuf[256] = "";

          fake.host.struct_size = sizeof fake.host;
          fake.host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
          fake.host.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
          fake.host.host_data = &fake;
          fake.host.register_optimizer_v2 = fake_register_v2;
          fake.host.register_optimizer_v3 = fake_register_v3;
          g_setenv ("MIXPREC_SIMD", level_names[level], TRUE);
          g_assert_cmpint (desc->init (&fake.host, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
          g_assert_nonnull (fake.registered);
          p->vt[level] = fake.registered;
        }
      g_unsetenv ("MIXPREC_SIMD");
      g_assert_cmphex (p->vt[0]->state_format_mask, ==, 0x7F);
      g_assert_cmphex (p->vt[0]->master_format_mask, ==, 0x7);
      g_assert_cmphex (p->vt[0]->state_signed_mask, ==, 0x1);
    }
  return p;
}

/* ------------------------------------------------------------ the reference codec */

static gboolean
is_blocked (guint format)
{
  return format >= MIXPREC_PLUGIN_STATE_FLOAT16_SCALED && format <= MIXPREC_PLUGIN_STATE_INT4_DYNAMIC;
}

static gsize
format_bytes (guint format,
              gsize n)
{
  static const gsize num[] = { 4, 2, 2, 2, 1, 1, 1 }, den[] = { 1, 1, 1, 1, 1, 1, 2 };

  return (n * num[format] + den[format] - 1) / den[format];
}

static guint32
bits_of (float f)
{
  guint32 u;

  memcpy (&u, &f, 4);
  return u;
}

static float
float_of (guint32 u)
{
  float f;

  memcpy (&f, &u, 4);
  return f;
}

/* One conversion of the library's, round to nearest even. */
static guint32
convert1 (MixprecDType dtype,
          float        x)
{
  guint32 out = 0;

  g_assert_true (mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, &x, dtype, &out, 1,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  return out;
}

static float
widen1 (MixprecDType dtype,
        guint32      code)
{
  float out = 0;

  g_assert_true (mixprec_convert_array (dtype, &code, MIXPREC_DTYPE_FLOAT32, &out, 1,
                                        MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, NULL));
  return out;
}

static const float *
ref_map (guint format,
         gboolean is_signed,
         guint   *n_codes)
{
  /* The tables of numeric-quant.h, which tests/test-quant-maps.py holds
   * to torchao's; everything done with them is written here. */
  *n_codes = format == MIXPREC_PLUGIN_STATE_INT8_DYNAMIC ? 256 : 16;
  if (*n_codes == 256)
    return is_signed ? _mixprec_qmap_int8_signed : _mixprec_qmap_int8_unsigned;
  return is_signed ? _mixprec_qmap_int4_signed : _mixprec_qmap_int4_unsigned;
}

/* torchao's quantize_8bit_with_qmap / quantize_4bit_with_qmap. */
static guint
ref_code (float        q,
          const float *map,
          guint        n_codes)
{
  guint code = 0, up;
  float down;

  for (guint step = n_codes / 2; step >= 1; step /= 2)
    if (q >= map[code + step])
      code += step;
  up = MIN (code + 1, n_codes - 1);
  down = map[code];
  return (q - down) >= (map[up] - down) * 0.5f ? up : code;
}

static float
ref_scale (guint        format,
           const float *x,
           gsize        n)
{
  float absmax = 0;

  for (gsize i = 0; i < n; i++)
    {
      if (isnan (x[i]))
        return float_of (0x7FC00000);
      absmax = MAX (absmax, fabsf (x[i]));
    }
  absmax = MAX (absmax, 1e-12f);
  if (format == MIXPREC_PLUGIN_STATE_FLOAT16_SCALED)
    return absmax / 65504.0f;
  if (format == MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED)
    return absmax / 448.0f;
  return absmax;
}

static guint32
ref_encode (guint    format,
            gboolean is_signed,
            float    x,
            float    scale)
{
  float q = x / scale;
  const float bf16_max = float_of (0x7F7F0000);
  guint n_codes;
  const float *map;

  switch (format)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
      return isnan (q) ? 0x7E00 : convert1 (MIXPREC_DTYPE_FLOAT16, CLAMP (q, -65504.0f, 65504.0f));
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return isnan (q) ? 0x7FC0 : convert1 (MIXPREC_DTYPE_BFLOAT16, CLAMP (q, -bf16_max, bf16_max));
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
      return isnan (q) ? 0x7F : convert1 (MIXPREC_DTYPE_FLOAT8_E4M3, CLAMP (q, -448.0f, 448.0f));
    default:
      map = ref_map (format, is_signed, &n_codes);
      return ref_code (q, map, n_codes);
    }
}

static float
ref_decode (guint    format,
            gboolean is_signed,
            guint32  code,
            float    scale)
{
  guint n_codes;

  switch (format)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
      return widen1 (MIXPREC_DTYPE_FLOAT16, code) * scale;
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return widen1 (MIXPREC_DTYPE_BFLOAT16, code) * scale;
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
      return widen1 (MIXPREC_DTYPE_FLOAT8_E4M3, code) * scale;
    default:
      return ref_map (format, is_signed, &n_codes)[code] * scale;
    }
}

static guint32
ref_load (guint        format,
          const guint8 *base,
          gsize        i)
{
  switch (format)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return ((const guint16 *) base)[i];
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
      return i % 2 == 0 ? base[i / 2] & 0xF : base[i / 2] >> 4;
    default:
      return base[i];
    }
}

static void
ref_store (guint    format,
           guint8  *base,
           gsize    i,
           guint32  code)
{
  switch (format)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      ((guint16 *) base)[i] = (guint16) code;
      break;
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
      base[i / 2] = i % 2 == 0 ? (guint8) ((base[i / 2] & 0xF0) | code)
                               : (guint8) ((base[i / 2] & 0x0F) | code << 4);
      break;
    default:
      base[i] = (guint8) code;
      break;
    }
}

/* Transformer Engine's remainder encoding, from its description. */
static float
ref_join (guint16 hi,
          gint16  rem)
{
  if (rem < 0)
    hi = (guint16) (hi - 1);
  return float_of ((guint32) hi << 16 | (guint16) rem);
}

static void
ref_split (float    p,
           guint16 *hi,
           gint16  *rem)
{
  guint32 u = bits_of (p);

  *rem = (gint16) (guint16) (u & 0xFFFF);
  *hi = (guint16) (u >> 16);
  if (*rem < 0)
    *hi = (guint16) (*hi + 1);
}

/* optimi's kahan_sum for one bfloat16 element. */
static void
ref_kahan (float    p_new,
           guint16 *p,
           guint16 *c)
{
  float p0 = widen1 (MIXPREC_DTYPE_BFLOAT16, *p);
  float c1 = widen1 (MIXPREC_DTYPE_BFLOAT16,
                     convert1 (MIXPREC_DTYPE_BFLOAT16, widen1 (MIXPREC_DTYPE_BFLOAT16, *c) + (p_new - p0)));
  guint16 p1 = (guint16) convert1 (MIXPREC_DTYPE_BFLOAT16, p0 + c1);
  float d = widen1 (MIXPREC_DTYPE_BFLOAT16,
                    convert1 (MIXPREC_DTYPE_BFLOAT16, p0 - widen1 (MIXPREC_DTYPE_BFLOAT16, p1)));

  *p = p1;
  *c = (guint16) convert1 (MIXPREC_DTYPE_BFLOAT16, c1 + d);
}

/* ------------------------------------------------------------ one run's buffers */

typedef struct {
  const MixprecOptimizerV3 *vt;
  gsize n;
  guint block;
  guint formats[2];
  guint master_format;
  gdouble hparams[8];
  float *master;               /* FLOAT32 master */
  guint16 *working;            /* bfloat16 */
  guint16 *extra;              /* int16 remainder or bfloat16 compensation */
  float *grad;
  guint8 *states[2];
  float *scales[2];
} Run;

static void
run_free (Run *r)
{
  g_free (r->master);
  g_free (r->working);
  g_free (r->extra);
  g_free (r->grad);
  for (guint k = 0; k < 2; k++)
    {
      g_free (r->states[k]);
      g_free (r->scales[k]);
    }
  g_free (r);
}
G_DEFINE_AUTOPTR_CLEANUP_FUNC (Run, run_free)

static gsize
n_blocks (const Run *r)
{
  return r->block == 0 ? 0 : (r->n + r->block - 1) / r->block;
}

static Run *
run_new (const MixprecOptimizerV3 *vt,
         gsize                     n,
         guint                     block,
         guint                     f0,
         guint                     f1,
         guint                     master_format,
         GRand                    *rand)
{
  Run *r = g_new0 (Run, 1);

  r->vt = vt;
  r->n = n;
  r->block = block;
  r->formats[0] = f0;
  r->formats[1] = f1;
  r->master_format = master_format;
  for (guint k = 0; k < vt->n_hparams; k++)
    r->hparams[k] = vt->hparams[k].default_value;
  if (g_str_equal (vt->name, "sgd"))
    {
      r->hparams[1] = 0.9;     /* momentum: a buffer to keep */
      r->hparams[3] = 0.01;    /* weight decay */
    }
  else if (g_str_equal (vt->name, "adamw"))
    r->hparams[4] = 0.01;
  r->master = master_format == MIXPREC_PLUGIN_MASTER_FLOAT32 ? g_new0 (float, n) : NULL;
  r->working = g_new0 (guint16, n);
  r->extra = g_new0 (guint16, n);
  r->grad = g_new0 (float, n);
  for (gsize i = 0; i < n; i++)
    {
      float p = (float) g_rand_double_range (rand, -2, 2);

      if (r->master != NULL)
        r->master[i] = p;
      else if (master_format == MIXPREC_PLUGIN_MASTER_REMAINDER)
        ref_split (p, &r->working[i], (gint16 *) &r->extra[i]);
      else
        r->working[i] = (guint16) convert1 (MIXPREC_DTYPE_BFLOAT16, p);
      if (r->master != NULL)
        r->working[i] = (guint16) convert1 (MIXPREC_DTYPE_BFLOAT16, p);
    }
  for (guint k = 0; k < vt->n_state_slots; k++)
    {
      r->states[k] = g_malloc0 (format_bytes (r->formats[k], n) + 1);
      r->scales[k] = g_new0 (float, MAX (n_blocks (r), 1));
    }
  return r;
}

static Run *
run_copy (const Run *src)
{
  Run *r = g_memdup2 (src, sizeof *src);

  r->master = src->master != NULL ? g_memdup2 (src->master, src->n * 4) : NULL;
  r->working = g_memdup2 (src->working, src->n * 2);
  r->extra = g_memdup2 (src->extra, src->n * 2);
  r->grad = g_memdup2 (src->grad, src->n * 4);
  for (guint k = 0; k < src->vt->n_state_slots; k++)
    {
      r->states[k] = g_memdup2 (src->states[k], format_bytes (src->formats[k], src->n) + 1);
      r->scales[k] = g_memdup2 (src->scales[k], MAX (n_blocks (src), 1) * 4);
    }
  return r;
}

static void
fill_grad (Run   *r,
           GRand *rand,
           float  magnitude)
{
  for (gsize i = 0; i < r->n; i++)
    r->grad[i] = (float) g_rand_double_range (rand, -1, 1) * magnitude;
}

static void
step_args (const Run              *r,
           guint64                 t,
           MixprecOptimizerStepV3 *a,
           MixprecPluginStateFormat *formats,
           float                  **scales)
{
  memset (a, 0, sizeof *a);
  a->v2.base.struct_size = sizeof *a;
  a->v2.base.hparams = r->hparams;
  a->v2.base.n_hparams = r->vt->n_hparams;
  a->v2.base.step = t;
  a->v2.base.lr = 1e-2;
  a->v2.base.grad_factor = 0.5f;
  a->v2.base.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  a->v2.base.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  a->v2.base.seed = 0x5eed;
  a->v2.base.first_index = 4096;
  a->v2.state_seed = 0x57a7e;
  for (guint k = 0; k < r->vt->n_state_slots; k++)
    {
      formats[k] = (MixprecPluginStateFormat) r->formats[k];
      scales[k] = r->scales[k];
    }
  a->state_formats = formats;
  a->state_scales = scales;
  a->block_size = r->block;
  a->master_format = (MixprecPluginMasterFormat) r->master_format;
  a->master_extra = r->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? r->extra : NULL;
}

/* The plugin's revision 3 step at @level. */
static int
plugin_step (const Plugin *p,
             guint         level,
             Run          *r,
             guint64       t,
             char         *errbuf,
             gsize         errbuf_len)
{
  MixprecOptimizerStepV3 a;
  MixprecPluginStateFormat formats[2];
  float *scales[2];
  void *states[2] = { r->states[0], r->states[1] };

  step_args (r, t, &a, formats, scales);
  return p->vt[level]->step (&a, r->master, r->grad, states, r->working, r->n, errbuf, errbuf_len);
}

/* The reference: decode, the float32 step, encode. */
static void
reference_step (const Plugin *p,
                Run          *r,
                guint64       t)
{
  const MixprecOptimizerV3 *vt = p->vt[LEVEL_SCALAR];
  MixprecOptimizerStepV3 a;
  MixprecPluginStateFormat formats[2], f32[2] = { MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_STATE_FLOAT32 };
  float *scales[2];
  g_autofree float *param = g_new (float, r->n);
  g_autofree float *decoded0 = g_new (float, r->n);
  g_autofree float *decoded1 = g_new (float, r->n);
  float *decoded[2] = { decoded0, decoded1 };
  void *states[2];
  gboolean sgd_plain = g_str_equal (vt->name, "sgd") && r->hparams[1] == 0;
  char errbuf[256] = "";

  for (guint k = 0; k < vt->n_state_slots; k++)
    {
      gboolean is_signed = (vt->state_signed_mask >> k) & 1;

      if (r->formats[k] == MIXPREC_PLUGIN_STATE_FLOAT32)
        memcpy (decoded[k], r->states[k], r->n * 4);
      else if (r->formats[k] == MIXPREC_PLUGIN_STATE_BFLOAT16)
        {
          /* Kept as it is: the float32 path rounds it as revision 2 does. */
        }
      else
        for (gsize i = 0; i < r->n; i++)
          decoded[k][i] = ref_decode (r->formats[k], is_signed, ref_load (r->formats[k], r->states[k], i),
                                      r->scales[k][i / r->block]);
      states[k] = r->formats[k] == MIXPREC_PLUGIN_STATE_BFLOAT16 ? (void *) r->states[k] : decoded[k];
      f32[k] = r->formats[k] == MIXPREC_PLUGIN_STATE_BFLOAT16 ? MIXPREC_PLUGIN_STATE_BFLOAT16
                                                              : MIXPREC_PLUGIN_STATE_FLOAT32;
    }
  for (gsize i = 0; i < r->n; i++)
    param[i] = r->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER
               ? ref_join (r->working[i], (gint16) r->extra[i])
               : widen1 (MIXPREC_DTYPE_BFLOAT16, r->working[i]);

  step_args (r, t, &a, formats, scales);
  a.state_formats = f32;
  a.block_size = 0;
  a.master_format = MIXPREC_PLUGIN_MASTER_FLOAT32;
  a.master_extra = NULL;
  if (r->master_format == MIXPREC_PLUGIN_MASTER_FLOAT32)
    g_assert_cmpint (vt->step (&a, r->master, r->grad, states, r->working, r->n, errbuf, sizeof errbuf), ==,
                     MIXPREC_PLUGIN_OK);
  else
    g_assert_cmpint (vt->step (&a, param, r->grad, states, NULL, r->n, errbuf, sizeof errbuf), ==,
                     MIXPREC_PLUGIN_OK);

  for (guint k = 0; k < vt->n_state_slots; k++)
    {
      gboolean is_signed = (vt->state_signed_mask >> k) & 1;

      if (r->formats[k] == MIXPREC_PLUGIN_STATE_FLOAT32)
        memcpy (r->states[k], decoded[k], r->n * 4);
      if (!is_blocked (r->formats[k]) || sgd_plain)
        continue;
      for (gsize b = 0; b * r->block < r->n; b++)
        {
          gsize s = b * r->block, len = MIN (r->block, r->n - s);
          float scale = ref_scale (r->formats[k], decoded[k] + s, len);

          r->scales[k][b] = scale;
          for (gsize i = s; i < s + len; i++)
            ref_store (r->formats[k], r->states[k], i, ref_encode (r->formats[k], is_signed, decoded[k][i], scale));
        }
    }
  for (gsize i = 0; i < r->n; i++)
    if (r->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER)
      ref_split (param[i], &r->working[i], (gint16 *) &r->extra[i]);
    else if (r->master_format == MIXPREC_PLUGIN_MASTER_KAHAN)
      ref_kahan (param[i], &r->working[i], &r->extra[i]);
}

static void
assert_runs_equal (const Run   *a,
                   const Run   *b,
                   const gchar *what)
{
  const gchar *differs = NULL;

  if (a->master != NULL && memcmp (a->master, b->master, a->n * 4) != 0)
    differs = "master";
  else if (memcmp (a->working, b->working, a->n * 2) != 0)
    differs = "working copy";
  else if (a->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 && memcmp (a->extra, b->extra, a->n * 2) != 0)
    differs = "master_extra";
  for (guint k = 0; k < a->vt->n_state_slots && differs == NULL; k++)
    {
      if (memcmp (a->states[k], b->states[k], format_bytes (a->formats[k], a->n)) != 0)
        differs = k == 0 ? "state slot 0" : "state slot 1";
      else if (is_blocked (a->formats[k]) && memcmp (a->scales[k], b->scales[k], n_blocks (a) * 4) != 0)
        differs = k == 0 ? "scales of slot 0" : "scales of slot 1";
    }
  if (differs != NULL)
    g_test_fail_printf ("%s: the %s differs from the reference", what, differs);
}

/* N_STEPS steps of the plugin at every level and of the reference, from
 * the same start, compared after each. */
static void
check_against_reference (const Plugin *p,
                         const Run    *start,
                         GRand        *rand,
                         float         grad_magnitude,
                         const gchar  *what)
{
  g_autoptr(Run) ref = run_copy (start);
  Run *runs[N_LEVELS] = { NULL };

  for (guint level = 0; level < N_LEVELS; level++)
    if (level_available (level))
      runs[level] = run_copy (start);
  for (guint64 t = 1; t <= N_STEPS; t++)
    {
      fill_grad (ref, rand, grad_magnitude);
      reference_step (p, ref, t);
      for (guint level = 0; level < N_LEVELS; level++)
        {
          g_autofree gchar *label = NULL;
          char errbuf[256] = "";

          if (runs[level] == NULL)
            continue;
          memcpy (runs[level]->grad, ref->grad, ref->n * 4);
          g_assert_cmpint (plugin_step (p, level, runs[level], t, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
          label = g_strdup_printf ("%s, %s, step %" G_GUINT64_FORMAT, what, level_names[level], t);
          assert_runs_equal (runs[level], ref, label);
        }
    }
  for (guint level = 0; level < N_LEVELS; level++)
    if (runs[level] != NULL)
      run_free (runs[level]);
}

static const gchar *const format_names[] = {
  "fp32", "bf16", "fp16-scaled", "bf16-scaled", "fp8-scaled", "int8", "int4",
};
static const gchar *const master_names[] = { "fp32-master", "remainder", "kahan" };

/* Every format x every master x every optimizer x every level. */
static void
test_formats_all (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (26);

  for (guint pi = 0; pi < G_N_ELEMENTS (plugins); pi++)
    {
      const Plugin *p = plugin_get (plugins[pi].name);

      for (guint f = 0; f < 7; f++)
        for (guint m = 0; m < 3; m++)
          {
            guint block = is_blocked (f) ? (f == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? 128 : 256) : 0;
            g_autoptr(Run) start = run_new (p->vt[0], N, block, f, f, m, rand);
            g_autofree gchar *what = g_strdup_printf ("%s, %s states, %s", p->name, format_names[f],
                                                      master_names[m]);

            check_against_reference (p, start, rand, 1.0f, what);
          }
    }
}

/* Slots in different formats, and each block size from 32 to 4096. */
static void
test_formats_mixed_blocks (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (2626);
  const Plugin *p = plugin_get ("adamw");
  static const guint pairs[][2] = {
    { MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, MIXPREC_PLUGIN_STATE_INT4_DYNAMIC },
    { MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED, MIXPREC_PLUGIN_STATE_BFLOAT16 },
    { MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_STATE_INT8_DYNAMIC },
    { MIXPREC_PLUGIN_STATE_FLOAT16_SCALED, MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED },
  };

  for (guint block = 32; block <= 4096; block *= 2)
    for (guint i = 0; i < G_N_ELEMENTS (pairs); i++)
      {
        gsize n = block == 4096 ? 5000 : N;
        g_autoptr(Run) start = run_new (p->vt[0], n, block, pairs[i][0], pairs[i][1],
                                        block % 256 == 0 ? MIXPREC_PLUGIN_MASTER_REMAINDER
                                                         : MIXPREC_PLUGIN_MASTER_FLOAT32, rand);
        g_autofree gchar *what = g_strdup_printf ("adamw, %s + %s, block %u", format_names[pairs[i][0]],
                                                  format_names[pairs[i][1]], block);

        check_against_reference (p, start, rand, 1.0f, what);
      }
}

/* All-zero blocks, NaN and Inf gradients in one block, tiny and huge
 * gradients, a last block of two elements. */
static void
test_formats_edges (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (262626);

  for (guint pi = 0; pi < G_N_ELEMENTS (plugins); pi++)
    {
      const Plugin *p = plugin_get (plugins[pi].name);

      for (guint f = MIXPREC_PLUGIN_STATE_FLOAT16_SCALED; f <= MIXPREC_PLUGIN_STATE_INT4_DYNAMIC; f++)
        {
          g_autofree gchar *what = NULL;
          g_autoptr(Run) zero = run_new (p->vt[0], 258, 64, f, f, MIXPREC_PLUGIN_MASTER_KAHAN, rand);
          g_autoptr(Run) start = NULL;
          g_autoptr(Run) plugin_run = NULL;
          char errbuf[256] = "";

          /* Zero gradients on zero state: every block stays zero, scale
           * 1e-12 / max where the state was written. */
          what = g_strdup_printf ("%s, %s, zero gradients", p->name, format_names[f]);
          check_against_reference (p, zero, rand, 0.0f, what);
          g_clear_pointer (&what, g_free);
          what = g_strdup_printf ("%s, %s, tiny gradients", p->name, format_names[f]);
          check_against_reference (p, zero, rand, 1e-30f, what);
          g_clear_pointer (&what, g_free);
          what = g_strdup_printf ("%s, %s, huge gradients", p->name, format_names[f]);
          check_against_reference (p, zero, rand, 1e30f, what);
          g_clear_pointer (&what, g_free);

          /* NaN and Inf gradients in the second block of 64: the plugin at
           * every level and the reference agree; the other blocks stay
           * finite. */
          start = run_new (p->vt[0], 258, 64, f, f, MIXPREC_PLUGIN_MASTER_FLOAT32, rand);
          plugin_run = run_copy (start);
          fill_grad (plugin_run, rand, 1.0f);
          plugin_run->grad[70] = NAN;
          plugin_run->grad[71] = INFINITY;
          g_assert_cmpint (plugin_step (p, LEVEL_SCALAR, plugin_run, 1, errbuf, sizeof errbuf), ==,
                           MIXPREC_PLUGIN_OK);
          for (guint k = 0; k < p->vt[0]->n_state_slots; k++)
            {
              g_assert_true (isfinite (plugin_run->scales[k][0]));
              g_assert_true (isfinite (plugin_run->scales[k][2]));
            }
          {
            g_autoptr(Run) ref = run_copy (start);

            memcpy (ref->grad, plugin_run->grad, ref->n * 4);
            reference_step (p, ref, 1);
            what = g_strdup_printf ("%s, %s, NaN and Inf gradients", p->name, format_names[f]);
            assert_runs_equal (plugin_run, ref, what);
            for (guint level = 1; level < N_LEVELS; level++)
              if (level_available (level))
                {
                  g_autoptr(Run) other = run_copy (start);

                  memcpy (other->grad, plugin_run->grad, other->n * 4);
                  g_assert_cmpint (plugin_step (p, level, other, 1, errbuf, sizeof errbuf), ==,
                                   MIXPREC_PLUGIN_OK);
                  assert_runs_equal (other, ref, what);
                }
          }
        }
    }
}

/* sgd without momentum keeps no buffer: its bytes and scales stay. */
static void
test_formats_sgd_plain (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (7);
  const Plugin *p = plugin_get ("sgd");
  g_autoptr(Run) r = run_new (p->vt[0], N, 128, MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, 0,
                              MIXPREC_PLUGIN_MASTER_FLOAT32, rand);
  g_autofree guint8 *before = NULL;
  char errbuf[256] = "";

  for (gsize i = 0; i < N; i++)
    r->states[0][i] = (guint8) g_rand_int_range (rand, 0, 256);
  r->scales[0][0] = 0.5f;
  before = g_memdup2 (r->states[0], N);
  r->hparams[1] = 0;
  fill_grad (r, rand, 1.0f);
  for (guint level = 0; level < N_LEVELS; level++)
    if (level_available (level))
      g_assert_cmpint (plugin_step (p, level, r, 2, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpmem (r->states[0], N, before, N);
  g_assert_cmpfloat (r->scales[0][0], ==, 0.5f);
}

/* ------------------------------------------------------------ numerics in the pass
 * ABI 1.6: a cpu optimizer measures a call's runs itself. What it reports
 * is checked against MixprecOptimizerNumericsV1's own definition, written
 * out below from the buffers before and after a step taken without
 * measuring; and measuring must not change a bit of the step. */

#define NUM_N 5003
static const size_t num_ends[] = { 0, 37, 4133, 4133, NUM_N };

static float
num_widen (MixprecPluginDType dtype, const void *base, gsize i)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return _mixprec_bf16_to_f32 (((const guint16 *) base)[i]);
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return _mixprec_f16_to_f32 (((const guint16 *) base)[i]);
    default:
      return ((const float *) base)[i];
    }
}

static guint32
num_bits (float f)
{
  guint32 b;

  memcpy (&b, &f, sizeof b);
  return b;
}

/* The definition, element by element. */
static void
num_expected (const void *grad, MixprecPluginDType gdtype, const float *old, const float *now,
              const void *working, MixprecPluginDType wdtype, int p, int emin, gsize start,
              gsize end, guint32 under, guint32 over, MixprecOptimizerNumericsV1 *out)
{
  float dl[8] = { 0 }, ml[8] = { 0 };

  memset (out, 0, sizeof *out);
  for (gsize i = start; i < end; i++)
    {
      guint32 a = num_bits (num_widen (gdtype, grad, i)) & 0x7fffffffu;
      float d = now[i] - old[i];

      if (a >= 0x7f800000u)
        out->nonfinite++;
      else if (a != 0)
        {
          out->nonzero++;
          out->under += a < under;
          out->over += a >= over;
          out->grad_amax = MAX (out->grad_amax, a);
        }
      dl[(i - start) % 8] += d * d;
      ml[(i - start) % 8] += old[i] * old[i];
      if (working != NULL)
        {
          float w = num_widen (wdtype, working, i);
          int e = (int) ((num_bits (w) >> 23) & 0xff) - 127;

          if (e != 128 && fabsf (d) * ldexpf (1.0f, p) < ldexpf (1.0f, MAX (e, emin)))
            out->stale++;
        }
    }
  out->delta_sumsq = (((double) dl[0] + dl[1]) + ((double) dl[2] + dl[3])) +
                     (((double) dl[4] + dl[5]) + ((double) dl[6] + dl[7]));
  out->old_sumsq = (((double) ml[0] + ml[1]) + ((double) ml[2] + ml[3])) +
                   (((double) ml[4] + ml[5]) + ((double) ml[6] + ml[7]));
}

static gboolean
num_same_double (double x, double y)
{
  return (isnan (x) && isnan (y)) || memcmp (&x, &y, sizeof x) == 0;
}

static void
num_store (MixprecPluginDType dtype, void *base, gsize i, float v)
{
  if (dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
    ((guint16 *) base)[i] = _mixprec_f32_to_bf16_rne (v);
  else if (dtype == MIXPREC_PLUGIN_DTYPE_FLOAT16)
    ((guint16 *) base)[i] = _mixprec_f32_to_f16_rne (v);
  else
    ((float *) base)[i] = v;
}

/* Step arguments for @vt with its default hyper-parameters (into
 * @hparams, 8 of them at most), learning rate 1e-3 and @working_dtype;
 * the caller sets the rest. */
static void
num_args (const MixprecOptimizerV3 *vt,
          double                    hparams[8],
          guint64                   step,
          float                     grad_factor,
          MixprecPluginDType        working_dtype,
          MixprecOptimizerStepV3   *a)
{
  for (guint h = 0; h < vt->n_hparams && h < 8; h++)
    hparams[h] = vt->hparams[h].default_value;
  memset (a, 0, sizeof *a);
  a->v2.base.struct_size = sizeof *a;
  a->v2.base.hparams = hparams;
  a->v2.base.n_hparams = vt->n_hparams;
  a->v2.base.step = step;
  a->v2.base.lr = 1e-3;
  a->v2.base.grad_factor = grad_factor;
  a->v2.base.working_dtype = working_dtype;
}

static void
test_numerics_in_pass (void)
{
  static const MixprecPluginDType gdtypes[] = { MIXPREC_PLUGIN_DTYPE_FLOAT32, MIXPREC_PLUGIN_DTYPE_BFLOAT16,
                                                MIXPREC_PLUGIN_DTYPE_FLOAT16 };
  static const MixprecPluginDType wdtypes[] = { MIXPREC_PLUGIN_DTYPE_BFLOAT16, MIXPREC_PLUGIN_DTYPE_FLOAT16,
                                                MIXPREC_PLUGIN_DTYPE_FLOAT32 };
  const guint n_runs = G_N_ELEMENTS (num_ends);
  guint checked = 0;

  for (guint pi = 0; pi < G_N_ELEMENTS (plugins); pi++)
    for (guint gi = 0; gi < G_N_ELEMENTS (gdtypes); gi++)
      for (guint wi = 0; wi < G_N_ELEMENTS (wdtypes); wi++)
        for (guint bf16_state = 0; bf16_state < 2; bf16_state++)
          for (guint level = 0; level < N_LEVELS; level++)
            {
              const Plugin *p = plugin_get (plugins[pi].name);
              const MixprecOptimizerV3 *vt = p->vt[level];
              MixprecPluginDType gd = gdtypes[gi], wd = wdtypes[wi];
              MixprecPluginDType sd = bf16_state ? MIXPREC_PLUGIN_DTYPE_BFLOAT16 : MIXPREC_PLUGIN_DTYPE_FLOAT32;
              MixprecPluginStateFormat formats[2];
              g_autoptr(GRand) rand = g_rand_new_with_seed (11 + pi * 100 + gi * 10 + wi);
              g_autofree float *master = g_new (float, NUM_N), *old = NULL, *ref_master = NULL;
              g_autofree guint8 *grad = g_malloc (NUM_N * 4), *working = NULL, *ref_working = NULL;
              g_autofree guint8 *states = g_malloc0 ((gsize) 2 * NUM_N * 4), *ref_states = NULL;
              void *st[2] = { states, states + (gsize) NUM_N * 4 };
              void *ref_st[2];
              MixprecOptimizerNumericsV1 runs[G_N_ELEMENTS (num_ends)];
              MixprecOptimizerStepV3 a;
              double hparams[8];
              int prec = wd == MIXPREC_PLUGIN_DTYPE_FLOAT16 ? 11 : wd == MIXPREC_PLUGIN_DTYPE_BFLOAT16 ? 8 : 24;
              int emin = wd == MIXPREC_PLUGIN_DTYPE_FLOAT16 ? -14 : -126;
              gboolean with_working = wd != MIXPREC_PLUGIN_DTYPE_FLOAT32;
              char errbuf[256] = "";

              if (!level_available (level))
                continue;
              g_assert_cmpuint (vt->numerics_master_mask, ==, 1u << MIXPREC_PLUGIN_MASTER_FLOAT32);
              working = with_working ? g_malloc (NUM_N * 2) : NULL;
              for (gsize i = 0; i < NUM_N; i++)
                {
                  float g;

                  /* Masters of every size: some so large that the update
                   * is far below half an ulp of their working value. */
                  master[i] = (float) g_rand_double_range (rand, -2, 2) * (i % 7 == 0 ? 3e4f : 1.0f);
                  if (i % 97 == 5)
                    master[i] = 0;
                  switch (i % 11)
                    {
                    case 0: g = 0; break;
                    case 1: g = 1e-41f; break;               /* FP32 subnormal */
                    case 2: g = 3e-6f; break;                /* below fp16's normals */
                    case 3: g = -7e4f; break;                /* beyond fp16 */
                    case 4:
                      {
                        /* bfloat16 values on either side of the bounds
                         * of the odd runs, which lie between two. */
                        guint32 b = num_bits ((i / 11) % 2 ? 65520.0f : 6.1e-5f) & 0xffff0000u;

                        b += ((i / 22) % 2) << 16;
                        memcpy (&g, &b, sizeof g);
                        break;
                      }
                    default: g = (float) g_rand_double_range (rand, -1, 1); break;
                    }
                  if (i == 4500)
                    g = INFINITY;
                  if (i == 4501)
                    g = NAN;
                  num_store (gd, grad, i, g);
                  if (with_working)
                    num_store (wd, working, i, master[i]);
                  for (guint k = 0; k < 2; k++)
                    num_store (sd, st[k], i, (float) g_rand_double_range (rand, 0, 1e-3));
                }
              old = g_memdup2 (master, NUM_N * sizeof (float));
              ref_master = g_memdup2 (master, NUM_N * sizeof (float));
              ref_working = with_working ? g_memdup2 (working, NUM_N * 2) : NULL;
              ref_states = g_memdup2 (states, (gsize) 2 * NUM_N * 4);
              ref_st[0] = ref_states;
              ref_st[1] = ref_states + (gsize) NUM_N * 4;

              num_args (vt, hparams, 3, 0.5f, with_working ? wd : MIXPREC_PLUGIN_DTYPE_FLOAT32, &a);
              a.v2.base.grad_dtype = gd;
              a.v2.base.seed = 0x5eed;
              a.v2.base.first_index = 123;
              formats[0] = formats[1] = bf16_state ? MIXPREC_PLUGIN_STATE_BFLOAT16 : MIXPREC_PLUGIN_STATE_FLOAT32;
              a.state_formats = formats;
              a.master_format = MIXPREC_PLUGIN_MASTER_FLOAT32;
              /* Unmeasured, then measured: the same bits. */
              g_assert_cmpint (vt->step (&a, ref_master, grad, ref_st, ref_working, NUM_N, errbuf, sizeof errbuf),
                               ==, MIXPREC_PLUGIN_OK);
              memset (runs, 0, sizeof runs);
              for (guint j = 0; j < n_runs; j++)
                {
                  runs[j].end = num_ends[j];
                  runs[j].grad_under = j % 2 ? num_bits (6.1e-5f) : 0x00800000u;
                  runs[j].grad_over = j % 2 ? num_bits (65520.0f) : 0x7f800000u;
                }
              a.numerics = runs;
              a.n_numerics = n_runs;
              a.working_precision = prec;
              a.working_emin = emin;
              g_assert_cmpint (vt->step (&a, master, grad, st, working, NUM_N, errbuf, sizeof errbuf),
                               ==, MIXPREC_PLUGIN_OK);
              g_assert_cmpmem (master, NUM_N * sizeof (float), ref_master, NUM_N * sizeof (float));
              if (with_working)
                g_assert_cmpmem (working, NUM_N * 2, ref_working, NUM_N * 2);
              g_assert_cmpmem (states, (gsize) 2 * NUM_N * 4, ref_states, (gsize) 2 * NUM_N * 4);
              for (guint j = 0; j < n_runs; j++)
                {
                  MixprecOptimizerNumericsV1 want;

                  num_expected (grad, gd, old, master, working, wd, prec, emin, j ? num_ends[j - 1] : 0,
                                num_ends[j], runs[j].grad_under, runs[j].grad_over, &want);
                  g_assert_cmpuint (runs[j].measured, ==, 1);
                  g_assert_cmpuint (runs[j].nonfinite, ==, want.nonfinite);
                  g_assert_cmpuint (runs[j].nonzero, ==, want.nonzero);
                  g_assert_cmpuint (runs[j].under, ==, want.under);
                  g_assert_cmpuint (runs[j].over, ==, want.over);
                  g_assert_cmphex (runs[j].grad_amax, ==, want.grad_amax);
                  g_assert_cmpuint (runs[j].stale, ==, want.stale);
                  g_assert_true (num_same_double (runs[j].delta_sumsq, want.delta_sumsq));
                  g_assert_true (num_same_double (runs[j].old_sumsq, want.old_sumsq));
                  /* The crafted gradients reach every class. */
                  if (j == 1 && gd != MIXPREC_PLUGIN_DTYPE_FLOAT16)
                    g_assert_true (want.nonfinite == 0 && want.under > 0 && want.over > 0);
                  if (j == 1 && gd == MIXPREC_PLUGIN_DTYPE_FLOAT16)   /* -7e4 is inf in fp16 */
                    g_assert_true (want.nonfinite > 0 && want.under > 0);
                  if (j == 1 && with_working)
                    g_assert_cmpuint (want.stale, >, 0);
                  if (j == 2 && gd == MIXPREC_PLUGIN_DTYPE_FLOAT32)
                    g_assert_true (want.under > 0 && want.over == 0);
                  if (j == 4 && gd != MIXPREC_PLUGIN_DTYPE_FLOAT16)
                    g_assert_cmpuint (want.nonfinite, ==, 2);
                }
              checked++;
            }
  g_test_message ("%u measured calls matched the definition", checked);
  g_assert_cmpuint (checked, >=, 3 * 3 * 3 * 2);
}

/* A run longer than the loops measure at once (_MIXPREC_OPTIM_MEASURE_CHUNK)
 * is measured in pieces whose sums keep their lanes: the same record as
 * the definition's. */
static void
test_numerics_in_pass_long_run (void)
{
  const gsize n = _MIXPREC_OPTIM_MEASURE_CHUNK * 2 + 1003;
  const Plugin *p = plugin_get ("adamw");
  g_autoptr(GRand) rand = g_rand_new_with_seed (5);
  g_autofree float *master = g_new (float, n), *old = NULL, *grad = g_new (float, n);
  g_autofree float *m = g_new0 (float, n), *v = g_new0 (float, n);
  g_autofree guint16 *working = g_new (guint16, n);

  for (guint level = 0; level < N_LEVELS; level++)
    {
      const MixprecOptimizerV3 *vt = p->vt[level];
      MixprecOptimizerNumericsV1 run = { 0 }, want;
      MixprecOptimizerStepV3 a;
      double hparams[8];
      void *st[2] = { m, v };
      char errbuf[256] = "";

      if (!level_available (level))
        continue;
      for (gsize i = 0; i < n; i++)
        {
          master[i] = (float) g_rand_double_range (rand, -2, 2) * (i % 5 == 0 ? 1e4f : 1.0f);
          grad[i] = i % 9 == 0 ? 0.0f : (float) g_rand_double_range (rand, -1, 1);
          working[i] = _mixprec_f32_to_bf16_rne (master[i]);
        }
      g_free (old);
      old = g_memdup2 (master, n * sizeof (float));
      num_args (vt, hparams, 1, 1.0f, MIXPREC_PLUGIN_DTYPE_BFLOAT16, &a);
      run.end = n;
      run.grad_under = num_bits (1e-3f);
      run.grad_over = num_bits (0.5f);
      a.numerics = &run;
      a.n_numerics = 1;
      a.working_precision = 8;
      a.working_emin = -126;
      g_assert_cmpint (vt->step (&a, master, grad, st, working, n, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
      num_expected (grad, MIXPREC_PLUGIN_DTYPE_FLOAT32, old, master, working, MIXPREC_PLUGIN_DTYPE_BFLOAT16, 8, -126,
                    0, n, run.grad_under, run.grad_over, &want);
      g_assert_cmpuint (run.nonzero, ==, want.nonzero);
      g_assert_cmpuint (run.under, ==, want.under);
      g_assert_cmpuint (run.over, ==, want.over);
      g_assert_cmpuint (run.stale, ==, want.stale);
      g_assert_cmphex (run.grad_amax, ==, want.grad_amax);
      g_assert_true (num_same_double (run.delta_sumsq, want.delta_sumsq));
      g_assert_true (num_same_double (run.old_sumsq, want.old_sumsq));
      g_assert_cmpuint (want.stale, >, 0);
    }
}

/* Many runs in one call: more than the AVX-512 loop takes at once (in
 * batches, the last a single run), then the same with one run longer
 * than the loops measure at once among them (run by run). Each run's record is
 * the definition's and the step's bits are those of an unmeasured step. */
static void
test_numerics_in_pass_many_runs (void)
{
  const gsize long_run = _MIXPREC_OPTIM_MEASURE_CHUNK + 21;
  const Plugin *p = plugin_get ("adamw");

  for (guint with_long = 0; with_long < 2; with_long++)
    for (guint level = 0; level < N_LEVELS; level++)
      {
        const MixprecOptimizerV3 *vt = p->vt[level];
        const guint n_runs = 129;
        g_autofree MixprecOptimizerNumericsV1 *runs = g_new0 (MixprecOptimizerNumericsV1, n_runs);
        g_autoptr(GRand) rand = g_rand_new_with_seed (17 + with_long);
        g_autofree float *master = NULL, *old = NULL, *ref = NULL, *grad = NULL, *m = NULL, *v = NULL;
        g_autofree float *ref_m = NULL, *ref_v = NULL;
        g_autofree guint16 *working = NULL, *ref_working = NULL;
        MixprecOptimizerStepV3 a;
        double hparams[8];
        char errbuf[256] = "";
        gsize n = 0;

        if (!level_available (level))
          continue;
        /* Runs of every length mod 16, some empty; one long. */
        for (guint j = 0; j < n_runs; j++)
          {
            n += with_long && j == 70 ? long_run : (j * 37) % 101;
            runs[j].end = n;
            runs[j].grad_under = num_bits (1e-3f);
            runs[j].grad_over = num_bits (0.5f);
          }
        master = g_new (float, n);
        grad = g_new (float, n);
        m = g_new0 (float, n);
        v = g_new0 (float, n);
        working = g_new (guint16, n);
        for (gsize i = 0; i < n; i++)
          {
            master[i] = (float) g_rand_double_range (rand, -2, 2) * (i % 5 == 0 ? 1e4f : 1.0f);
            grad[i] = i % 9 == 0 ? 0.0f : (float) g_rand_double_range (rand, -1, 1);
            working[i] = _mixprec_f32_to_bf16_rne (master[i]);
          }
        old = g_memdup2 (master, n * sizeof (float));
        ref = g_memdup2 (master, n * sizeof (float));
        ref_m = g_memdup2 (m, n * sizeof (float));
        ref_v = g_memdup2 (v, n * sizeof (float));
        ref_working = g_memdup2 (working, n * sizeof (guint16));
        num_args (vt, hparams, 1, 1.0f, MIXPREC_PLUGIN_DTYPE_BFLOAT16, &a);
        {
          void *st[2] = { ref_m, ref_v };

          g_assert_cmpint (vt->step (&a, ref, grad, st, ref_working, n, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
        }
        a.numerics = runs;
        a.n_numerics = n_runs;
        a.working_precision = 8;
        a.working_emin = -126;
        {
          void *st[2] = { m, v };

          g_assert_cmpint (vt->step (&a, master, grad, st, working, n, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
        }
        g_assert_cmpmem (master, n * sizeof (float), ref, n * sizeof (float));
        g_assert_cmpmem (working, n * sizeof (guint16), ref_working, n * sizeof (guint16));
        g_assert_cmpmem (m, n * sizeof (float), ref_m, n * sizeof (float));
        g_assert_cmpmem (v, n * sizeof (float), ref_v, n * sizeof (float));
        for (guint j = 0; j < n_runs; j++)
          {
            MixprecOptimizerNumericsV1 want;

            num_expected (grad, MIXPREC_PLUGIN_DTYPE_FLOAT32, old, master, working, MIXPREC_PLUGIN_DTYPE_BFLOAT16,
                          8, -126, j ? runs[j - 1].end : 0, runs[j].end, runs[j].grad_under, runs[j].grad_over,
                          &want);
            g_assert_cmpuint (runs[j].measured, ==, 1);
            g_assert_cmpuint (runs[j].nonzero, ==, want.nonzero);
            g_assert_cmpuint (runs[j].under, ==, want.under);
            g_assert_cmpuint (runs[j].over, ==, want.over);
            g_assert_cmpuint (runs[j].stale, ==, want.stale);
            g_assert_cmphex (runs[j].grad_amax, ==, want.grad_amax);
            g_assert_true (num_same_double (runs[j].delta_sumsq, want.delta_sumsq));
            g_assert_true (num_same_double (runs[j].old_sumsq, want.old_sumsq));
          }
      }
}

/* What a measured call refuses, and an ABI 1.4 caller's struct that ends
 * before the numerics fields (never read). */
static void
test_numerics_in_pass_errors (void)
{
  const Plugin *p = plugin_get ("adamw");
  const MixprecOptimizerV3 *vt = p->vt[LEVEL_SCALAR];
  float master[64] = { 0 }, grad[64] = { 0 }, m[64] = { 0 }, v[64] = { 0 };
  guint8 q[64] = { 0 };
  float scale = 1.0f, *scales[2] = { &scale, &scale };
  void *st[2] = { m, v };
  MixprecPluginStateFormat formats[2] = { MIXPREC_PLUGIN_STATE_FLOAT32, MIXPREC_PLUGIN_STATE_FLOAT32 };
  MixprecOptimizerNumericsV1 runs[2] = { { 0 } };
  MixprecOptimizerStepV3 a;
  double hparams[8];
  char errbuf[256] = "";

  num_args (vt, hparams, 1, 1.0f, MIXPREC_PLUGIN_DTYPE_FLOAT32, &a);
  a.state_formats = formats;
  a.numerics = runs;
  a.n_numerics = 2;
  a.working_precision = 8;
  a.working_emin = -126;
  /* Runs that do not tile the call. */
  runs[0].end = 40;
  runs[1].end = 30;
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "does not tile"));
  runs[1].end = 63;
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  runs[1].end = 64;
  /* A precision no format has. */
  a.working_precision = 40;
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "working_precision 40"));
  a.working_precision = 8;
  /* Block-scaled state is measured by the library, not in the pass. */
  formats[0] = MIXPREC_PLUGIN_STATE_INT8_DYNAMIC;
  st[0] = q;
  a.state_scales = scales;
  a.block_size = 32;
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_UNSUPPORTED);
  g_assert_nonnull (strstr (errbuf, "numerics_master_mask"));
  formats[0] = MIXPREC_PLUGIN_STATE_FLOAT32;
  st[0] = m;
  a.state_scales = NULL;
  a.block_size = 0;
  /* ABI 1.4's struct: the fields beyond it are not read. */
  a.v2.base.struct_size = G_STRUCT_OFFSET (MixprecOptimizerStepV3, master_extra) + sizeof (void *);
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpuint (runs[0].measured, ==, 0);
  g_assert_cmpuint (runs[1].measured, ==, 0);
  a.v2.base.struct_size = G_STRUCT_OFFSET (MixprecOptimizerStepV3, master_extra);
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  a.v2.base.struct_size = sizeof a;
  g_assert_cmpint (vt->step (&a, master, grad, st, NULL, 64, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpuint (runs[0].measured, ==, 1);
  g_assert_cmpuint (runs[1].measured, ==, 1);
}

/* ------------------------------------------------------------ errors */

static void
expect_error (const Plugin *p,
              Run          *r,
              const gchar  *sentence)
{
  char errbuf[512] = "";

  for (guint level = 0; level < N_LEVELS; level++)
    {
      if (!level_available (level))
        continue;
      errbuf[0] = '\0';
      g_assert_cmpint (plugin_step (p, level, r, 1, errbuf, sizeof errbuf), !=, MIXPREC_PLUGIN_OK);
      if (strstr (errbuf, sentence) == NULL)
        g_test_fail_printf ("'%s' does not say '%s'", errbuf, sentence);
    }
}

static void
test_formats_errors (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (1);
  const Plugin *p = plugin_get ("adamw");
  g_autoptr(Run) r = run_new (p->vt[0], 64, 32, MIXPREC_PLUGIN_STATE_INT8_DYNAMIC,
                              MIXPREC_PLUGIN_STATE_INT4_DYNAMIC, MIXPREC_PLUGIN_MASTER_FLOAT32, rand);
  float *saved;

  for (guint bad = 0; bad < 5; bad++)
    {
      static const guint sizes[] = { 0, 16, 48, 8192, 100 };

      r->block = sizes[bad];
      expect_error (p, r, "block_size must be a power of two from 32 to 4096 when a state slot "
                          "keeps block scales");
    }
  r->block = 32;
  r->formats[1] = 9;
  expect_error (p, r, "state slot 1 (exp_avg_sq) has format 9, which is not a MixprecPluginStateFormat");
  r->formats[1] = MIXPREC_PLUGIN_STATE_INT4_DYNAMIC;
  saved = r->scales[0];
  r->scales[0] = NULL;
  expect_error (p, r, "state slot 0 (exp_avg) is kept as block-wise int8, which needs one FP32 scale "
                      "per block, but its scale array is NULL");
  r->scales[0] = saved;
  r->n = 63;
  expect_error (p, r, "state slot 1 (exp_avg_sq) is kept as block-wise int4, two codes per byte, so a "
                      "call must cover an even number of elements, not 63");
  r->n = 64;
  r->master_format = 7;
  expect_error (p, r, "master format 7 is not a MixprecPluginMasterFormat");
  r->master_format = MIXPREC_PLUGIN_MASTER_REMAINDER;
  expect_error (p, r, "a remainder master lives in the working copy and master_extra; the FP32 "
                      "master must be NULL");
  g_clear_pointer (&r->master, g_free);
  r->master_format = MIXPREC_PLUGIN_MASTER_KAHAN;
  {
    guint16 *extra = r->extra;

    r->extra = NULL;
    expect_error (p, r, "a Kahan master needs a bfloat16 working copy and master_extra");
    r->extra = extra;
  }
}

/* ------------------------------------------------------------ the encoder */

/* Every block encoder: one per level, and the AVX-512 level's two int8
 * rules (the search in registers, the packed[] gather), which it picks
 * between by CPU; both run wherever AVX-512 does. */
enum { N_ENCODERS = N_LEVELS + 1 };
static const _MixprecQuantEncode encoders[N_ENCODERS] = {
  _mixprec_quant_encode_scalar,
#ifdef MIXPREC_HAVE_X86_SIMD
  _mixprec_quant_encode_avx2,
#else
  NULL,
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
  _mixprec_quant_encode_avx512_search,
  _mixprec_quant_encode_avx512_gather,
#else
  NULL,
  NULL,
#endif
};

/* The level an encoder runs at. */
static guint
encoder_level (guint e)
{
  return MIN (e, (guint) LEVEL_AVX512);
}


/* Each SIMD level's block encoder on quotients @q (each in [-1, 1]): a
 * block that starts with 1.0 has the scale 1, so its quotients are its
 * values; returns how many codes differ from torchao's search. */
static guint64
levels_wrong (guint        format,
              gboolean     is_signed,
              const float *q,
              gsize        n,
              const float *map,
              guint        n_codes)
{
  float block[4096];
  guint8 codes[4096];
  guint64 wrong = 0;

  for (gsize at = 0; at < n;)
    {
      gsize fill = 1;

      block[0] = 1.0f;
      while (fill < G_N_ELEMENTS (block) && at < n)
        block[fill++] = q[at++];
      fill &= ~(gsize) 1;
      for (guint level = 1; level < N_ENCODERS; level++)
        {
          if (encoders[level] == NULL || !level_available (encoder_level (level)))
            continue;
          g_assert_cmpfloat (encoders[level] (format, is_signed, block, fill, codes, 0), ==, 1.0f);
          for (gsize i = 0; i < fill; i++)
            wrong += ref_load (format, codes, i) != ref_code (block[i], map, n_codes);
        }
    }
  return wrong;
}

/* The int8 / int4 codes of every level's encoder against torchao's search,
 * at each step of each map (the first float of each code and the one
 * below it), at every bucket boundary, and over [-1, 1]: every 97th float
 * (every float with MIXPREC_TEST_EXHAUSTIVE=1). */
static void
test_encoder_codes (void)
{
  gboolean exhaustive = g_getenv ("MIXPREC_TEST_EXHAUSTIVE") != NULL;
  guint32 stride = exhaustive ? 1 : 97;

  g_assert_true (_mixprec_quant_tables_init ());
  for (guint bits = 4; bits <= 8; bits += 4)
    for (gboolean is_signed = FALSE; is_signed <= TRUE; is_signed++)
      {
        const _MixprecQuantTable *t = _mixprec_quant_table (bits, is_signed);
        guint format = bits == 8 ? MIXPREC_PLUGIN_STATE_INT8_DYNAMIC : MIXPREC_PLUGIN_STATE_INT4_DYNAMIC;
        guint n_codes;
        const float *map = ref_map (format, is_signed, &n_codes);
        guint64 checked = 0, wrong = 0;

        g_assert_nonnull (t);
        /* The AVX2 level's one-gather table was built (else it would keep
         * the two lookups, and this test would not see the fast path). */
        g_assert_true (t->packed_ok);
        for (guint c = 1; c < n_codes; c++)
          {
            float u = t->up[c];

            g_assert_cmpuint (ref_code (u, map, n_codes), >=, c);
            g_assert_cmpuint (ref_code (nextafterf (u, -INFINITY), map, n_codes), <, c);
          }
        for (guint32 sign = 0; sign < 2; sign++)
          {
            /* Through each level's block encoder too: a block whose
             * absmax is 1 has the scale 1, so its quotients are its
             * values. */
            float block[4096];
            guint8 codes[4096];
            guint fill = 1;

            block[0] = 1.0f;
            for (guint32 u = 0; u <= 0x3F800000u; u += (u < 0x3F800000u - stride ? stride : 1))
              {
                float q = float_of (u | sign << 31);

                checked++;
                wrong += _mixprec_quant_fast_code (t, q) != ref_code (q, map, n_codes);
                block[fill++] = q;
                if (fill == G_N_ELEMENTS (block) || u == 0x3F800000u)
                  {
                    for (guint level = 1; level < N_ENCODERS; level++)
                      {
                        if (encoders[level] == NULL || !level_available (encoder_level (level)))
                          continue;
                        g_assert_cmpfloat (encoders[level] (format, is_signed, block, fill & ~1u, codes, 0), ==, 1.0f);
                        for (guint i = 0; i < (fill & ~1u); i++)
                          wrong += ref_load (format, codes, i) != ref_code (block[i], map, n_codes);
                      }
                    fill = 1;
                  }
                if (u == 0x3F800000u)
                  break;
              }
          }
        {
          /* The block encoders at each step, on both sides of it, and at
           * both ends of every bucket of 2^16 floats within [-1, 1]. */
          g_autoptr(GArray) edges = g_array_new (FALSE, FALSE, sizeof (float));

          for (guint c = 1; c < n_codes; c++)
            {
              float at[] = { t->up[c], nextafterf (t->up[c], -INFINITY), nextafterf (t->up[c], INFINITY) };

              g_array_append_vals (edges, at, G_N_ELEMENTS (at));
            }
          for (guint32 e = 0; e < 256; e++)
            for (guint32 m = 0; m < 128; m++)
              for (guint32 sign = 0; sign < 2; sign++)
                {
                  guint32 head = sign << 31 | e << 23 | m << 16;

                  for (guint32 low = 0; low <= 0xFFFF; low += 0xFFFF)
                    {
                      float q = float_of (head | low);

                      checked++;
                      wrong += _mixprec_quant_fast_code (t, q) != ref_code (q, map, n_codes);
                      if (fabsf (q) <= 1.0f)
                        g_array_append_val (edges, q);
                    }
                }
          checked += edges->len;
          wrong += levels_wrong (format, is_signed, (const float *) edges->data, edges->len, map, n_codes);
        }
        g_test_message ("int%u %s: %" G_GUINT64_FORMAT " quotients, %" G_GUINT64_FORMAT " wrong",
                        bits, is_signed ? "signed" : "unsigned", checked, wrong);
        g_assert_cmpuint (wrong, ==, 0);
        /* NaN: code 0, as torchao's comparisons all fail. */
        g_assert_cmpuint (_mixprec_quant_fast_code (t, NAN), ==, 0);
        g_assert_cmpuint (ref_code (NAN, map, n_codes), ==, 0);
      }
}

/* Each level's block codec against the scalar one on hostile blocks:
 * zeros of both signs, subnormals, values past every format's range,
 * Inf, NaN, odd lengths. */
static void
test_encoder_levels (void)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (99);
  const _MixprecQuantDecode decoders[N_LEVELS] = {
    _mixprec_quant_decode_scalar,
#ifdef MIXPREC_HAVE_X86_SIMD
    _mixprec_quant_decode_avx2,
#else
    NULL,
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
    _mixprec_quant_decode_avx512,
#else
    NULL,
#endif
  };
  static const float specials[] = { 0.0f, -0.0f, 1e-40f, -1e-45f, 70000.0f, -1e30f, 3e38f, INFINITY,
                                    -INFINITY, NAN, 448.5f, -65519.0f };
  guint vbmi_checked = 0;

  for (guint round = 0; round < 200; round++)
    for (guint f = MIXPREC_PLUGIN_STATE_FLOAT16_SCALED; f <= MIXPREC_PLUGIN_STATE_INT4_DYNAMIC; f++)
      for (gboolean is_signed = FALSE; is_signed <= TRUE; is_signed++)
        {
          gsize len = (gsize) g_rand_int_range (rand, 1, 300);
          gsize start = 2 * (gsize) g_rand_int_range (rand, 0, 8);
          float in[300], out[N_ENCODERS][300];
          guint8 bytes[N_ENCODERS][2 * 320];
          float scale[N_ENCODERS];

          if (f == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC && len % 2 != 0 && round % 2 == 0)
            len++;
          for (gsize i = 0; i < len; i++)
            in[i] = (float) g_rand_double_range (rand, -1, 1) * powf (10, (float) g_rand_int_range (rand, -30, 5));
          if (round % 3 == 0)
            for (guint s = 0; s < 3; s++)
              in[g_rand_int_range (rand, 0, (gint32) len)] =
                specials[g_rand_int_range (rand, 0, (gint32) G_N_ELEMENTS (specials))];
          for (guint level = 0; level < N_ENCODERS; level++)
            {
              if (encoders[level] == NULL || !level_available (encoder_level (level)))
                continue;
              memset (bytes[level], 0xA5, sizeof bytes[level]);
              scale[level] = encoders[level] (f, is_signed, in, len, bytes[level], start);
              decoders[encoder_level (level)] (f, is_signed, bytes[level], start, len, scale[level], out[level]);
              if (level == 0)
                {
                  /* The scalar level is the reference's, element by element. */
                  g_assert_cmphex (bits_of (scale[0]), ==, bits_of (ref_scale (f, in, len)));
                  for (gsize i = 0; i < len; i++)
                    g_assert_cmphex (ref_load (f, bytes[0], start + i), ==,
                                     ref_encode (f, is_signed, in[i], scale[0]));
                  continue;
                }
              g_assert_cmphex (bits_of (scale[level]), ==, bits_of (scale[0]));
              g_assert_cmpmem (bytes[level], sizeof bytes[level], bytes[0], sizeof bytes[0]);
              g_assert_cmpmem (out[level], len * 4, out[0], len * 4);
#ifdef MIXPREC_HAVE_X86_AVX512
              /* The byte-permute decode of a CPU with VBMI. */
              if (level == 2 && _mixprec_quant_have_vbmi ())
                {
                  float vbmi[300];

                  _mixprec_quant_decode_avx512_vbmi (f, is_signed, bytes[0], start, len, scale[0], vbmi);
                  g_assert_cmpmem (vbmi, len * 4, out[0], len * 4);
                  vbmi_checked++;
                }
#endif
            }
        }

#ifdef MIXPREC_HAVE_X86_AVX512
  if (level_available (2) && _mixprec_quant_have_vbmi ())
    {
      /* Every code of both int8 maps, at every alignment of a 64-code
       * chunk, against the scalar decode. */
      for (gboolean is_signed = FALSE; is_signed <= TRUE; is_signed++)
        for (gsize start = 0; start < 64; start += 7)
          {
            guint8 codes[64 + 300];
            float want[300], got[300];

            for (gsize i = 0; i < G_N_ELEMENTS (codes); i++)
              codes[i] = (guint8) (i * 37 + start);
            _mixprec_quant_decode_scalar (MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, is_signed, codes, start, 300,
                                          0.75f, want);
            _mixprec_quant_decode_avx512_vbmi (MIXPREC_PLUGIN_STATE_INT8_DYNAMIC, is_signed, codes, start, 300,
                                               0.75f, got);
            g_assert_cmpmem (got, sizeof got, want, sizeof want);
          }
      g_assert_cmpuint (vbmi_checked, >, 0);
    }
  else
    g_test_message ("no AVX-512 VBMI on this CPU: its int8 decode is not run");
#endif
}

/* The remainder encoding keeps every float32 pattern, and its working
 * copy is the round to nearest of the value, ties away from zero. */
static void
test_remainder_roundtrip (void)
{
  for (guint64 u = 0; u <= 0xFFFFFFFFu; u += 65521)
    {
      float p = float_of ((guint32) u);
      guint16 hi, hi2;
      gint16 rem, rem2;
      guint32 back;

      _mixprec_remainder_split (p, &hi, &rem);
      ref_split (p, &hi2, &rem2);
      g_assert_cmphex (hi, ==, hi2);
      g_assert_cmpint (rem, ==, rem2);
      back = bits_of (_mixprec_remainder_join (hi, rem));
      g_assert_cmphex (back, ==, (guint32) u);
      if (!isnan (p) && (u & 0xFFFF) != 0x8000)
        g_assert_cmphex (hi, ==, convert1 (MIXPREC_DTYPE_BFLOAT16, p));
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/optim-formats/encoder/codes", test_encoder_codes);
  g_test_add_func ("/optim-formats/encoder/levels", test_encoder_levels);
  g_test_add_func ("/optim-formats/remainder-roundtrip", test_remainder_roundtrip);
  g_test_add_func ("/optim-formats/all", test_formats_all);
  g_test_add_func ("/optim-formats/mixed-and-block-sizes", test_formats_mixed_blocks);
  g_test_add_func ("/optim-formats/edges", test_formats_edges);
  g_test_add_func ("/optim-formats/sgd-without-momentum", test_formats_sgd_plain);
  g_test_add_func ("/optim-formats/errors", test_formats_errors);
  g_test_add_func ("/optim-formats/numerics-in-pass", test_numerics_in_pass);
  g_test_add_func ("/optim-formats/numerics-in-pass/errors", test_numerics_in_pass_errors);
  g_test_add_func ("/optim-formats/numerics-in-pass/long-run", test_numerics_in_pass_long_run);
  g_test_add_func ("/optim-formats/numerics-in-pass/many-runs", test_numerics_in_pass_many_runs);
  return g_test_run ();
}
