/* test-reduce-fp32.c — low-precision transport, FP32 sums: random
 * gradients of wide dynamic range summed over 2, 3, 4 and 8 ranks on
 * 127.0.0.1 through comm-ucx, each rank's FP32 gradient rounded once to
 * bfloat16 (or float16) for the wire.
 *
 * With MIXPREC_COMM_RECV_FP32 (what `mixprec.reduce_accumulation: "fp32"`
 * requests) the sum is formed in FP32 and kept: its error against the FP64
 * sum of the unrounded gradients is one rounding per contribution,
 * |err| <= 2^-8 (float16: 2^-11) * sum |g_r|, plus FP32 additions (< 2^-20
 * of it for up to 16 ranks), at every world size. A result in the wire
 * dtype (today's bf16 reduce, no flag) is rounded once more and exceeds
 * that bound. The FP32 results
 * are also the contract's bits (a fold in rank order), the same on every
 * rank, in every run, and whether the ranks meet in shared memory or over
 * UCX alone (as ranks on several hosts do; tests/test-reduce-fp32-netns.sh
 * runs this file's child on 3 network-namespace hosts).
 *
 * Through the engine, `mixprec.reduce_accumulation: "fp32"` in bf16 mode
 * reduces in bf16 into an FP32 accumulation buffer, and W ranks of one
 * or two micro-batches each (ZeRO stages 0 to 3) train to the bits of one
 * process that accumulates the same micro-batches in the same order. ZeRO-3
 * overlaps its reductions (overlap_comm defaults to true there), so its
 * second micro-batch's gradient is written while the first is reduced. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "dtype-reference.h"
#include "multiproc.h"

#define TIMEOUT_MS 60000
/* Elements of each rank's part of the reduce-scatter, and of the
 * all-reduce (not a multiple of any world size: uneven parts). */
#define RS_COUNT 4096
#define AR_COUNT 5003
/* The wire dtype of this process's cases: bfloat16, or float16. */
static MixprecDType wire = MIXPREC_DTYPE_BFLOAT16;

/* One rounding to the wire dtype (ties to even: half an ulp, 2^-8
 * relative for bfloat16, 2^-11 for float16's normal numbers). */
static gdouble
unit_roundoff (void)
{
  return wire == MIXPREC_DTYPE_FLOAT16 ? 0x1p-11 : 0x1p-8;
}

/* That, and room for the FP32 additions of up to 16 terms. */
static gdouble
bound (void)
{
  return unit_roundoff () + 0x1p-20;
}

static guint32
mix32 (guint32 x)
{
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* Rank @rank's FP32 gradient at @i: sign, a binary exponent in [-20, 20]
 * (bfloat16) or [-12, 11] (float16: normal numbers whose sum over 8 ranks
 * stays finite) and a full 24-bit significand, all from a hash. */
static gfloat
grad_value (guint rank,
            gsize i,
            guint salt)
{
  guint32 h = mix32 ((guint32) i * 0x9e3779b1u ^ mix32 (rank * 0x85ebca77u + salt + 1));
  guint32 m = mix32 (h ^ 0x27d4eb2fu);
  gint e = wire == MIXPREC_DTYPE_FLOAT16 ? (gint) (h % 24) - 12 : (gint) (h % 41) - 20;
  gdouble v = ldexp (1.0 + (gdouble) (m >> 8) * 0x1p-24, e);

  return (gfloat) ((h >> 31) ? -v : v);
}

/* The wire bits of @v rounded to nearest even, from the independent
 * number model: bfloat16 is the top half of the FP32 value; a normal
 * float16 is sign, exponent + 15, and the 10 bits after the leading one. */
static guint16
to_wire (gfloat v)
{
  gdouble r = ref_round_nearest (wire == MIXPREC_DTYPE_FLOAT16 ? &ref_f16 : &ref_bf16, v);
  guint32 bits;
  gfloat f = (gfloat) r;
  gint e;

  if (wire == MIXPREC_DTYPE_FLOAT16)
    {
      gdouble m = frexp (fabs (r), &e);            /* |r| = m 2^e, m in [0.5, 1) */

      g_assert (e - 1 >= -14 && e - 1 <= 15);
      return (guint16) ((r < 0) << 15 | (guint32) (e - 1 + 15) << 10 |
                        (guint32) ((m * 2 - 1) * 1024));
    }
  memcpy (&bits, &f, sizeof bits);
  g_assert ((bits & 0xffff) == 0);
  return (guint16) (bits >> 16);
}

static gfloat
wire_value (guint16 bits)
{
  guint32 b = (guint32) bits << 16;
  gfloat v;

  if (wire == MIXPREC_DTYPE_FLOAT16)
    return (gfloat) ref_decode (&ref_f16, bits);
  memcpy (&v, &b, sizeof v);
  return v;
}

static void
hash_bytes (guint64      *hash,
            gconstpointer data,
            gsize         len)
{
  const guint8 *p = data;

  for (gsize i = 0; i < len; i++)
    *hash = (*hash ^ p[i]) * G_GUINT64_CONSTANT (0x100000001b3);
}

/* Element @i's error against the FP64 sum of the unrounded gradients,
 * relative to the sum of their magnitudes; counts in *@unordered the FP32
 * results that are not the fold of the bfloat16 terms in rank order. */
static gdouble
element_error (guint     world,
               gsize     i,
               guint     salt,
               gdouble   got,
               gboolean  fp32_result,
               guint    *unordered)
{
  gdouble exact = 0, magnitude = 0;
  gfloat fold = 0;

  for (guint r = 0; r < world; r++)
    {
      gfloat g = grad_value (r, i, salt);

      exact += g;
      magnitude += fabs ((gdouble) g);
      fold = r == 0 ? wire_value (to_wire (g)) : fold + wire_value (to_wire (g));
    }
  if (fp32_result && (gfloat) got != fold)
    (*unordered)++;
  return fabs (got - exact) / magnitude;
}

static int
child_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_autoptr(MixprecComm) comm = NULL;
  g_autofree guint16 *rs_send = NULL, *rs_today = NULL, *ar_send = NULL, *ar_today = NULL;
  g_autofree gfloat *rs_ours = NULL, *ar_ours = NULL;
  g_autofree gchar *file = NULL, *line = NULL;
  guint64 h_rs = G_GUINT64_CONSTANT (0xcbf29ce484222325), h_ar = h_rs;
  gdouble e_rs_ours = 0, e_rs_today = 0, e_ar_ours = 0, e_ar_today = 0;
  guint rank, world, unordered = 0, ignored = 0;

  if (bootstrap == NULL)
    {
      g_printerr ("bootstrap: %s\n", error->message);
      return 1;
    }
  rank = mixprec_bootstrap_get_rank (bootstrap);
  world = mixprec_bootstrap_get_world_size (bootstrap);
  if (g_strcmp0 (g_getenv ("MIXPREC_TEST_REDUCE_DTYPE"), "fp16") == 0)
    wire = MIXPREC_DTYPE_FLOAT16;
  comm = mixprec_comm_new (bootstrap, "ucx", "cpu", TIMEOUT_MS, &error);
  if (comm == NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }

  rs_send = g_new (guint16, (gsize) world * RS_COUNT);
  rs_today = g_new (guint16, RS_COUNT);
  rs_ours = g_new (gfloat, RS_COUNT);
  ar_send = g_new (guint16, AR_COUNT);
  ar_today = g_new (guint16, AR_COUNT);
  ar_ours = g_new (gfloat, AR_COUNT);
  for (gsize i = 0; i < (gsize) world * RS_COUNT; i++)
    rs_send[i] = to_wire (grad_value (rank, i, 0));
  for (gsize i = 0; i < AR_COUNT; i++)
    ar_send[i] = to_wire (grad_value (rank, i, 1));

  if (!mixprec_comm_reduce_scatter (comm, rs_send, rs_ours, RS_COUNT, wire,
                                    MIXPREC_REDUCE_SUM, MIXPREC_COMM_RECV_FP32, &error) ||
      !mixprec_comm_reduce_scatter (comm, rs_send, rs_today, RS_COUNT, wire,
                                    MIXPREC_REDUCE_SUM, 0, &error) ||
      !mixprec_comm_all_reduce (comm, ar_send, ar_ours, AR_COUNT, wire,
                                MIXPREC_REDUCE_SUM, MIXPREC_COMM_RECV_FP32, &error) ||
      !mixprec_comm_all_reduce (comm, ar_send, ar_today, AR_COUNT, wire,
                                MIXPREC_REDUCE_SUM, 0, &error))
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }

  for (gsize j = 0; j < RS_COUNT; j++)
    {
      gsize i = (gsize) rank * RS_COUNT + j;

      e_rs_ours = MAX (e_rs_ours, element_error (world, i, 0, rs_ours[j], TRUE, &unordered));
      e_rs_today = MAX (e_rs_today, element_error (world, i, 0, wire_value (rs_today[j]),
                                                   FALSE, &ignored));
    }
  for (gsize i = 0; i < AR_COUNT; i++)
    {
      e_ar_ours = MAX (e_ar_ours, element_error (world, i, 1, ar_ours[i], TRUE, &unordered));
      e_ar_today = MAX (e_ar_today, element_error (world, i, 1, wire_value (ar_today[i]),
                                                   FALSE, &ignored));
    }
  hash_bytes (&h_rs, rs_ours, RS_COUNT * sizeof (gfloat));
  hash_bytes (&h_rs, rs_today, RS_COUNT * sizeof (guint16));
  hash_bytes (&h_ar, ar_ours, AR_COUNT * sizeof (gfloat));
  hash_bytes (&h_ar, ar_today, AR_COUNT * sizeof (guint16));

  line = g_strdup_printf ("%016" G_GINT64_MODIFIER "x %016" G_GINT64_MODIFIER "x %u "
                          "%.9g %.9g %.9g %.9g\n", h_rs, h_ar, unordered,
                          e_rs_ours, e_rs_today, e_ar_ours, e_ar_today);
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), rank);
  return g_file_set_contents (file, line, -1, NULL) ? 0 : 1;
}

/* ------------------------------------------------------------ engine */

#define ENGINE_NUMEL 3000
#define ENGINE_STEPS 2

static MixprecEngine *
engine_new (guint stage, guint gas, GError **error)
{
  g_autofree gchar *json =
    g_strdup_printf ("{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"reduce_accumulation\": "
                     "\"fp32\"}, \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": "
                     "1000}, \"gradient_accumulation_steps\": %u, \"optimizer\": {\"type\": "
                     "\"SGD\", \"params\": {\"lr\": 0.5}}}", stage, gas);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, error);
  g_autofree gfloat *init = g_new (gfloat, ENGINE_NUMEL);
  g_autoptr(GBytes) bytes = NULL;
  guint64 shape[1] = { ENGINE_NUMEL };
  MixprecEngine *engine;
  MixprecParam *p;

  if (config == NULL || (engine = mixprec_engine_new (config, error)) == NULL)
    return NULL;
  for (guint i = 0; i < ENGINE_NUMEL; i++)
    init[i] = (gfloat) cos (0.1 * i);
  bytes = g_bytes_new (init, ENGINE_NUMEL * sizeof (gfloat));
  p = mixprec_engine_register_param (engine, "w", shape, 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                     bytes, error);
  /* The transport is bf16, the sums FP32. */
  if (p == NULL || mixprec_param_get_comm_dtype (p) != MIXPREC_DTYPE_BFLOAT16 ||
      mixprec_param_get_accum_dtype (p) != MIXPREC_DTYPE_FLOAT32)
    {
      if (p != NULL)
        g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "w: comm %s, accumulation %s",
                     mixprec_dtype_get_name (mixprec_param_get_comm_dtype (p)),
                     mixprec_dtype_get_name (mixprec_param_get_accum_dtype (p)));
      g_object_unref (engine);
      return NULL;
    }
  return engine;
}

/* Trains micro-batches @first, @first + @stride ... (@gas of them per
 * step); micro-batch m's gradient is grad_value (m, ., 100 + step) in
 * bfloat16. Returns the gathered FP32 masters. */
static GBytes *
engine_train (MixprecEngine *engine, guint first, guint stride, guint gas, GError **error)
{
  MixprecParam *p = mixprec_engine_get_param (engine, "w");

  for (guint k = 0; k < ENGINE_STEPS; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint local = 0; local < gas; local++)
        {
          guint m = first + local * stride;
          g_autofree guint16 *g = g_new (guint16, ENGINE_NUMEL);
          g_autoptr(GBytes) bytes = NULL;

          for (guint i = 0; i < ENGINE_NUMEL; i++)
            g[i] = to_wire (grad_value (m, i, 100 + k));
          bytes = g_bytes_new_take (g_steal_pointer (&g), ENGINE_NUMEL * sizeof (guint16));
          if (!mixprec_param_set_grad (p, MIXPREC_DTYPE_BFLOAT16, bytes, error) ||
              !mixprec_engine_backward_done (engine, error))
            return NULL;
        }
      if ((r = mixprec_engine_step (engine, error)) == NULL)
        return NULL;
    }
  return mixprec_engine_gather_master (engine, "w", error);
}

static int
engine_child_main (void)
{
  g_autoptr(GError) error = NULL;
  guint code = (guint) atoi (g_getenv ("MIXPREC_TEST_REDUCE_ENGINE"));
  guint stage = code & 0xf, gas = code >> 4;
  g_autoptr(MixprecEngine) engine = engine_new (stage, gas, &error);
  g_autoptr(GBytes) master = NULL;
  g_autofree gchar *file = NULL;
  guint rank;

  if (engine == NULL)
    {
      g_printerr ("engine: %s\n", error->message);
      return 1;
    }
  rank = mixprec_engine_get_rank (engine);
  /* Micro-batch m of a step is rank m % world's. */
  master = engine_train (engine, rank, mixprec_engine_get_world_size (engine), gas, &error);
  if (master == NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), rank);
  return g_file_set_contents (file, g_bytes_get_data (master, NULL),
                              (gssize) g_bytes_get_size (master), NULL) ? 0 : 1;
}

static void
test_engine (gconstpointer data)
{
  guint world = 4, stage = GPOINTER_TO_UINT (data) & 0xf, gas = GPOINTER_TO_UINT (data) >> 4;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) ref = engine_new (stage, gas * world, &error);
  g_autoptr(GBytes) want = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-reduce-fp32-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "master", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *stage_var = g_strdup_printf ("MIXPREC_TEST_REDUCE_ENGINE=%u", stage | gas << 4);
  const gchar *env[] = { stage_var, "UCX_NET_DEVICES=lo", out_var, NULL };
  gint status[4];

  g_assert_no_error (error);
  g_assert_nonnull (ref);
  wire = MIXPREC_DTYPE_BFLOAT16;
  want = engine_train (ref, 0, 1, gas * world, &error);
  g_assert_no_error (error);
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
      g_autofree gchar *got = NULL;
      gsize len = 0;

      g_assert_cmpint (status[r], ==, 0);
      g_assert_true (g_file_get_contents (file, &got, &len, &error));
      g_assert_cmpmem (got, len, g_bytes_get_data (want, NULL), g_bytes_get_size (want));
      g_remove (file);
    }
  g_rmdir (dir);
}

/* ------------------------------------------------------------ comm */

typedef struct
{
  gchar *rs_hash[8];
  gchar *ar_hash;
  gdouble ours;                 /* max over ranks, reduce_scatter and all_reduce */
  gdouble today;
} Outcome;

static void
outcome_clear (Outcome *o)
{
  for (guint r = 0; r < G_N_ELEMENTS (o->rs_hash); r++)
    g_free (o->rs_hash[r]);
  g_free (o->ar_hash);
}

/* Runs @world ranks; @shm "0" keeps them off the shared segment. */
static void
run_world (guint        world,
           const gchar *shm,
           Outcome     *o)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-reduce-fp32-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "out", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *shm_var = g_strdup_printf ("MIXPREC_UCX_SHM=%s", shm);
  const gchar *env[] = { "MIXPREC_TEST_REDUCE_CHILD=1", "UCX_NET_DEVICES=lo", out_var, shm_var,
                         wire == MIXPREC_DTYPE_FLOAT16 ? "MIXPREC_TEST_REDUCE_DTYPE=fp16"
                                                       : "MIXPREC_TEST_REDUCE_DTYPE=bf16",
                         NULL };
  gint status[8];

  g_assert_no_error (error);
  g_assert_cmpuint (world, <=, G_N_ELEMENTS (status));
  memset (o, 0, sizeof *o);
  mp_run_ranks (world, TIMEOUT_MS, env, status);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
      g_autofree gchar *text = NULL;
      gchar rs[17], ar[17];
      guint unordered = 0;
      gdouble e[4];

      g_assert_cmpint (status[r], ==, 0);
      g_assert_true (g_file_get_contents (file, &text, NULL, &error));
      g_assert_cmpint (sscanf (text, "%16s %16s %u %lg %lg %lg %lg", rs, ar, &unordered,
                               &e[0], &e[1], &e[2], &e[3]), ==, 7);
      /* The FP32 results are the contract's fold, in rank order. */
      g_assert_cmpuint (unordered, ==, 0);
      o->rs_hash[r] = g_strdup (rs);
      /* Every rank holds the same all-reduce bits. */
      if (r == 0)
        o->ar_hash = g_strdup (ar);
      else
        g_assert_cmpstr (ar, ==, o->ar_hash);
      o->ours = MAX (o->ours, MAX (e[0], e[2]));
      o->today = MAX (o->today, MAX (e[1], e[3]));
      g_remove (file);
    }
  g_rmdir (dir);
}

static void
test_reduce_fp32 (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data) & 0xff;
  const gchar *name = (GPOINTER_TO_UINT (data) & 0x100) ? "fp16" : "bf16";
  Outcome first, again, no_shm;

  wire = (GPOINTER_TO_UINT (data) & 0x100) ? MIXPREC_DTYPE_FLOAT16 : MIXPREC_DTYPE_BFLOAT16;
  run_world (world, "auto", &first);
  g_test_message ("%u ranks, %s transport: max relative error %.4g with FP32 sums, "
                  "%.4g with a %s result (bound %.4g)", world, name, first.ours, first.today,
                  name, bound ());
  /* One rounding to the wire dtype per contribution, at every world
   * size... */
  g_assert_cmpfloat (first.ours, <=, bound ());
  /* ...and the bound is tight: the measurement sees that rounding. */
  g_assert_cmpfloat (first.ours, >, unit_roundoff () / 2);
  /* A result in the wire dtype is rounded once more and exceeds it. */
  if (world == 8)
    g_assert_cmpfloat (first.today, >, bound ());

  /* The same bits in another run, and over UCX alone (as ranks on
   * several hosts meet) where the first run met in shared memory. */
  run_world (world, "auto", &again);
  run_world (world, "0", &no_shm);
  g_assert_cmpstr (again.ar_hash, ==, first.ar_hash);
  g_assert_cmpstr (no_shm.ar_hash, ==, first.ar_hash);
  for (guint r = 0; r < world; r++)
    {
      g_assert_cmpstr (again.rs_hash[r], ==, first.rs_hash[r]);
      g_assert_cmpstr (no_shm.rs_hash[r], ==, first.rs_hash[r]);
    }
  outcome_clear (&first);
  outcome_clear (&again);
  outcome_clear (&no_shm);
}

int
main (int argc, char **argv)
{
  static const guint worlds[] = { 2, 3, 4, 8 };

  if (g_getenv ("MIXPREC_TEST_REDUCE_CHILD") != NULL)
    return child_main ();
  if (g_getenv ("MIXPREC_TEST_REDUCE_ENGINE") != NULL)
    return engine_child_main ();

  g_test_init (&argc, &argv, NULL);
  g_setenv ("MIXPREC_JOB_SECRET", MP_JOB_SECRET, TRUE);
  g_setenv ("UCX_LOG_LEVEL", "error", FALSE);
  for (guint fp16 = 0; fp16 < 2; fp16++)
    for (gsize i = 0; i < G_N_ELEMENTS (worlds); i++)
      {
        g_autofree gchar *path = g_strdup_printf ("/reduce-fp32/%s/ranks-%u",
                                                  fp16 ? "fp16" : "bf16", worlds[i]);

        g_test_add_data_func (path, GUINT_TO_POINTER (worlds[i] | fp16 << 8), test_reduce_fp32);
      }
  for (guint stage = 0; stage <= 3; stage++)
    for (guint gas = 1; gas <= 2; gas++)
      {
        g_autofree gchar *path = g_strdup_printf ("/reduce-fp32/engine/bf16/stage%u/ranks-4/gas%u",
                                                  stage, gas);

        g_test_add_data_func (path, GUINT_TO_POINTER (stage | gas << 4), test_engine);
      }
  return g_test_run ();
}
