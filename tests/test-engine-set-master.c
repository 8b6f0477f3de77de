/* test-engine-set-master.c — mixprec_engine_set_master(): new FP32 values
 * for one parameter, taken from a root rank. Right after the call the
 * parameter's masters and working copy are, bit for bit, those of a fresh
 * engine registered with the values, the other parameters and the
 * optimizer state are untouched; training on afterwards on 2 ranks gives
 * the bits of one process that made the same change (the values travel
 * from rank 1, whose own are the new ones; rank 0 passes none). Bad calls
 * get errors on every rank, without a hang. Children are this binary
 * re-executed with the rank variables set. */
#include <math.h>
#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

#define TIMEOUT_MS 3000
#define STEPS_BEFORE 2
#define STEPS_AFTER 2

typedef struct {
  const gchar *mode;        /* "fp32", "bf16" */
  guint stage;
  const gchar *masters;     /* mixprec.master_weights, or NULL */
} Case;

/* A matrix and a vector packed into one unit, and a matrix above the
 * ZeRO-3 persistence threshold in a unit of its own. */
static const struct { const gchar *name; guint64 rows, cols; } model[] = {
  { "w1", 300, 5 }, { "b1", 100, 0 }, { "w2", 200, 60 },
};

static gchar *
config_json (const Case *c, guint gas)
{
  g_autofree gchar *masters = c->masters != NULL
    ? g_strdup_printf ("\"mixprec\": {\"master_weights\": \"%s\"},", c->masters) : g_strdup ("");

  return g_strdup_printf ("{%s %s \"zero_optimization\": {\"stage\": %u,"
                          "  \"stage3_param_persistence_threshold\": 1000},"
                          " \"gradient_accumulation_steps\": %u,"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
                          "   \"weight_decay\": 0.1}}}",
                          g_str_equal (c->mode, "bf16") ? "\"bf16\": {\"enabled\": true}," : "",
                          masters, c->stage, gas);
}

static guint64
numel_of (guint p)
{
  return model[p].rows * MAX (model[p].cols, 1);
}

/* The initial values, and the ones a script writes into a parameter:
 * not representable in bfloat16, so rounding shows. */
static gfloat
init_value (guint p, guint64 i)
{
  return (gfloat) (cos (0.1 * (gdouble) i + p) * 0.5);
}

static gfloat
new_value (guint p, guint64 i)
{
  return (gfloat) (sin (0.031 * (gdouble) i + p) * 0.75 + 1e-4 * (gdouble) (i % 13));
}

/* @x rounded to the nearest bfloat16, ties to even (finite @x). */
static gfloat
bf16_rne (gfloat x)
{
  guint32 u;

  memcpy (&u, &x, sizeof u);
  u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
  memcpy (&x, &u, sizeof u);
  return x;
}

static GBytes *
values_of (guint p, gfloat (*f) (guint, guint64))
{
  guint64 n = numel_of (p);
  gfloat *v = g_new (gfloat, n);

  for (guint64 i = 0; i < n; i++)
    v[i] = f (p, i);
  return g_bytes_new_take (v, n * sizeof (gfloat));
}

/* An engine of @c; with @changed, parameter @changed - 1 registered with
 * new_value() instead of init_value(). */
static MixprecEngine *
build_engine (const Case *c, guint gas, guint changed)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = config_json (c, gas);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint64 shape[2] = { model[p].rows, model[p].cols };
      g_autoptr(GBytes) init = values_of (p, changed == p + 1 ? new_value : init_value);

      g_assert_nonnull (mixprec_engine_register_param (engine, model[p].name, shape,
                                                       model[p].cols ? 2 : 1, "Linear",
                                                       MIXPREC_DTYPE_FLOAT32, init, &error));
      g_assert_no_error (error);
    }
  return engine;
}

static gfloat
grad_value (guint step, guint m, guint p, guint64 i)
{
  return (gfloat) (sin (0.37 * m + 0.011 * (gdouble) i + 1.3 * step + p) *
                   exp2 ((gdouble) ((i * 7 + m) % 9) - 4.0));
}

/* Steps [@first, @last): this engine sees micro-batches local * world +
 * rank. */
static gboolean
train (MixprecEngine *engine, guint first, guint last, guint gas, GError **error)
{
  guint rank = mixprec_engine_get_rank (engine), world = mixprec_engine_get_world_size (engine);

  for (guint k = first; k < last; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint local = 0; local < gas; local++)
        {
          for (guint p = 0; p < G_N_ELEMENTS (model); p++)
            {
              MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
              guint64 n = numel_of (p);
              gfloat *g = g_new (gfloat, n);
              g_autoptr(GBytes) bytes = NULL;

              for (guint64 i = 0; i < n; i++)
                g[i] = grad_value (k, local * world + rank, p, i);
              bytes = g_bytes_new_take (g, n * sizeof (gfloat));
              if (!mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, error))
                return FALSE;
            }
          if (!mixprec_engine_backward_done (engine, error))
            return FALSE;
        }
      r = mixprec_engine_step (engine, error);
      if (r == NULL)
        return FALSE;
    }
  return TRUE;
}

/* Parameter @p's FP32 values and its working copy widened to FP32. */
static GByteArray *
snapshot_param (MixprecEngine *engine, guint p, GError **error)
{
  GByteArray *out = g_byte_array_new ();
  MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
  g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, model[p].name, error);
  g_autoptr(GBytes) working = NULL;

  if (master == NULL || !mixprec_engine_gather (engine, param, error))
    return NULL;
  working = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, error);
  mixprec_engine_release (engine, param);
  if (working == NULL)
    return NULL;
  g_byte_array_append (out, g_bytes_get_data (master, NULL), g_bytes_get_size (master));
  g_byte_array_append (out, g_bytes_get_data (working, NULL), g_bytes_get_size (working));
  return out;
}

static GByteArray *
snapshot (MixprecEngine *engine, GError **error)
{
  GByteArray *out = g_byte_array_new ();

  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      g_autoptr(GByteArray) one = snapshot_param (engine, p, error);

      if (one == NULL)
        return NULL;
      g_byte_array_append (out, one->data, one->len);
    }
  return out;
}

static void
assert_same (const GByteArray *a, const GByteArray *b, const gchar *what)
{
  g_assert_nonnull (a);
  g_assert_nonnull (b);
  g_assert_cmpuint (a->len, ==, b->len);
  if (memcmp (a->data, b->data, a->len) != 0)
    g_error ("%s: the bits differ", what);
}

static gboolean
parse_case (const gchar *text, Case *c)
{
  g_auto(GStrv) f = text != NULL ? g_strsplit (text, ":", 3) : NULL;
  static gchar mode[8], masters[16];

  if (f == NULL || g_strv_length (f) != 3)
    return FALSE;
  g_strlcpy (mode, f[0], sizeof mode);
  g_strlcpy (masters, f[2], sizeof masters);
  c->mode = mode;
  c->stage = atoi (f[1]);
  c->masters = masters[0] != '\0' ? masters : NULL;
  return TRUE;
}

/* One rank: trains, takes w2's new values from rank 1 (rank 0 passes
 * none), trains on; rank 0 writes the snapshot. A second engine checks
 * that a wrong size on the root fails on every rank. */
static int
child_main (void)
{
  Case c;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GByteArray) snap = NULL;
  g_autoptr(GByteArray) right_after = NULL;
  g_autofree gchar *after_file = NULL;
  g_autoptr(GBytes) mine = NULL;
  g_autoptr(GBytes) shorter = NULL;
  g_autoptr(GBytes) whole = values_of (2, new_value);
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  guint rank;

  if (!parse_case (g_getenv ("MIXPREC_TEST_CASE"), &c))
    return 2;
  engine = build_engine (&c, 1, 0);
  rank = mixprec_engine_get_rank (engine);
  if (mixprec_engine_get_world_size (engine) != 2)
    return 2;
  mine = rank == 1 ? values_of (2, new_value) : NULL;
  if (!train (engine, 0, STEPS_BEFORE, 1, &error) ||
      !mixprec_engine_set_master (engine, "w2", mine, 1, &error) ||
      (right_after = snapshot_param (engine, 2, &error)) == NULL ||
      !train (engine, STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER, 1, &error) ||
      (snap = snapshot (engine, &error)) == NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return 1;
    }
  /* Rank 1, the root, gives one element too few: both ranks refuse. */
  shorter = g_bytes_new_from_bytes (whole, 0, (numel_of (2) - 1) * sizeof (gfloat));
  if (mixprec_engine_set_master (engine, "w2", shorter, 1, &error) ||
      !g_error_matches (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT))
    {
      g_printerr ("rank %u: a short buffer on the root was not refused\n", rank);
      return 4;
    }
  g_clear_error (&error);
  after_file = g_strdup_printf ("%s.after", out);
  if (rank == 0 &&
      (!g_file_set_contents (out, (const gchar *) snap->data, snap->len, &error) ||
       !g_file_set_contents (after_file, (const gchar *) right_after->data, right_after->len, &error)))
    return 1;
  return 0;
}

/* One process: right after the call, w2 is a fresh engine's; the other
 * parameters and w2's optimizer state are as they were. */
static void
test_set_master_one (gconstpointer data)
{
  const Case *c = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = build_engine (c, 1, 0);
  g_autoptr(MixprecEngine) fresh = build_engine (c, 1, 3);
  g_autoptr(GBytes) values = values_of (2, new_value);
  g_autoptr(GByteArray) before0 = NULL, before1 = NULL, after0 = NULL, after1 = NULL;
  g_autoptr(GByteArray) got = NULL, want = NULL;
  g_auto(GStrv) slots = NULL;
  GPtrArray *states = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);

  g_assert_true (train (engine, 0, STEPS_BEFORE, 1, &error));
  g_assert_no_error (error);
  before0 = snapshot_param (engine, 0, &error);
  before1 = snapshot_param (engine, 1, &error);
  slots = mixprec_engine_get_optimizer_state_names (engine);
  for (guint k = 0; slots[k] != NULL; k++)
    g_ptr_array_add (states, mixprec_engine_get_optimizer_state (engine, "w2", slots[k], &error));
  g_assert_no_error (error);

  g_assert_true (mixprec_engine_set_master (engine, "w2", values, 0, &error));
  g_assert_no_error (error);

  got = snapshot_param (engine, 2, &error);
  want = snapshot_param (fresh, 2, &error);
  g_assert_no_error (error);
  if (c->masters != NULL && g_str_equal (c->masters, "kahan"))
    {
      /* A fresh engine starts its compensations at zero; new values keep
       * the error of their rounding there, as a checkpoint's FP32 values
       * do: the working copy is the fresh engine's, the master w + c. */
      const gfloat *x = g_bytes_get_data (values, NULL);
      gfloat *m = (gfloat *) want->data;
      guint64 n = numel_of (2);

      for (guint64 i = 0; i < n; i++)
        {
          gfloat w = bf16_rne (x[i]);

          m[i] = w + bf16_rne (x[i] - w);
        }
    }
  assert_same (got, want, "w2 against a fresh engine");
  if (c->masters == NULL || g_str_equal (c->masters, "fp32") || g_str_equal (c->masters, "remainder"))
    /* These keep any FP32 value exactly. */
    g_assert_cmpmem (got->data, g_bytes_get_size (values),
                     g_bytes_get_data (values, NULL), g_bytes_get_size (values));
  after0 = snapshot_param (engine, 0, &error);
  after1 = snapshot_param (engine, 1, &error);
  assert_same (after0, before0, "w1, untouched");
  assert_same (after1, before1, "b1, untouched");
  for (guint k = 0; slots[k] != NULL; k++)
    {
      g_autoptr(GBytes) now = mixprec_engine_get_optimizer_state (engine, "w2", slots[k], &error);

      g_assert_no_error (error);
      g_assert_true (g_bytes_equal (now, g_ptr_array_index (states, k)));
    }
  g_ptr_array_unref (states);

  /* And training goes on. */
  g_assert_true (train (engine, STEPS_BEFORE, STEPS_BEFORE + 1, 1, &error));
  g_assert_no_error (error);
}

static void
test_set_master_errors (void)
{
  static const Case c = { "bf16", 0, NULL };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = build_engine (&c, 2, 0);
  g_autoptr(GBytes) values = values_of (2, new_value);
  g_autoptr(GBytes) wrong = values_of (0, new_value);

  g_assert_false (mixprec_engine_set_master (engine, "w9", values, 0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "'w9'"));
  g_clear_error (&error);
  g_assert_false (mixprec_engine_set_master (engine, "w2", wrong, 0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "'w2'"));
  g_assert_nonnull (strstr (error->message, "48000 bytes"));
  g_clear_error (&error);
  g_assert_false (mixprec_engine_set_master (engine, "w2", NULL, 0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (mixprec_engine_set_master (engine, "w2", values, 1, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "root 1"));
  g_clear_error (&error);

  /* Between a backward pass and the step (gradient_accumulation_steps 2). */
  g_assert_true (train (engine, 0, 1, 2, &error));
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      g_autoptr(GBytes) g = values_of (p, init_value);

      g_assert_true (mixprec_param_set_grad (mixprec_engine_get_param (engine, model[p].name),
                                             MIXPREC_DTYPE_FLOAT32, g, &error));
    }
  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_assert_no_error (error);
  g_assert_false (mixprec_engine_set_master (engine, "w2", values, 0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE);
  g_assert_nonnull (strstr (error->message, "after step()"));
  g_clear_error (&error);
}

/* The call touches its parameter alone: a marker written into another
 * parameter's working copy (w1's first element, a value its master does
 * not round to) stays, where rounding every working copy again would
 * overwrite it, and w2's working copy is its new FP32 values rounded to
 * the nearest bfloat16, ties to even (bf16_rne() above, the formula).
 * Setting each parameter in turn thus costs one pass over the model, not
 * one per parameter. */
static void
test_set_master_one_param (void)
{
  static const Case c = { "bf16", 0, NULL };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = build_engine (&c, 1, 0);
  g_autoptr(GBytes) values = values_of (2, new_value);
  g_autoptr(GBytes) master = NULL, working = NULL;
  MixprecParam *w1 = NULL;
  MixprecDType dtype;
  guint16 *w1_working, marker;
  const gfloat *x, *m, *w;
  guint64 addr;

  g_assert_true (train (engine, 0, STEPS_BEFORE, 1, &error));
  g_assert_no_error (error);
  w1 = mixprec_engine_get_param (engine, "w1");
  addr = mixprec_param_get_device_address (w1, MIXPREC_PARAM_BUFFER_WORKING, &dtype, NULL, NULL,
                                           &error);
  g_assert_no_error (error);
  g_assert_cmpint (dtype, ==, MIXPREC_DTYPE_BFLOAT16);
  w1_working = GSIZE_TO_POINTER ((gsize) addr);
  /* 0x4242 is 48.5 in bfloat16; w1's masters are within [-0.5, 0.5]. */
  marker = 0x4242;
  w1_working[0] = marker;

  g_assert_true (mixprec_engine_set_master (engine, "w2", values, 0, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (w1_working[0], ==, marker);

  master = mixprec_engine_gather_master (engine, "w2", &error);
  working = mixprec_param_get_working (mixprec_engine_get_param (engine, "w2"),
                                       MIXPREC_DTYPE_FLOAT32, &error);
  g_assert_no_error (error);
  x = g_bytes_get_data (values, NULL);
  m = g_bytes_get_data (master, NULL);
  w = g_bytes_get_data (working, NULL);
  for (guint64 i = 0; i < numel_of (2); i++)
    {
      g_assert_cmpmem (&m[i], sizeof (gfloat), &x[i], sizeof (gfloat));
      if (w[i] != bf16_rne (x[i]))
        g_error ("w2[%" G_GUINT64_FORMAT "]: working copy %a, RNE of the new master %a",
                 i, (gdouble) w[i], (gdouble) bf16_rne (x[i]));
    }
}

/* 2 ranks (gradient_accumulation_steps 1) against one process with 2. */
static void
test_set_master_ranks (gconstpointer data)
{
  const Case *c = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GBytes) values = values_of (2, new_value);
  g_autoptr(GByteArray) want = NULL, want_after = NULL;
  g_autofree gchar *dir = NULL, *out = NULL, *got = NULL, *after = NULL, *got_after = NULL;
  g_autofree gchar *case_var = NULL, *out_var = NULL;
  gsize len = 0;
  gint status[2];

  if (g_getenv ("MIXPREC_TEST_HAVE_UCX") == NULL)
    {
      g_test_skip ("no UCX communication plugin");
      return;
    }
  /* One process: the values test_set_master_one() checks against a
   * fresh engine. */
  engine = build_engine (c, 2, 0);
  g_assert_true (train (engine, 0, STEPS_BEFORE, 2, &error) &&
                 mixprec_engine_set_master (engine, "w2", values, 0, &error));
  g_assert_no_error (error);
  want_after = snapshot_param (engine, 2, &error);
  g_assert_no_error (error);
  g_assert_true (train (engine, STEPS_BEFORE, STEPS_BEFORE + STEPS_AFTER, 2, &error));
  g_assert_no_error (error);
  want = snapshot (engine, &error);
  g_assert_no_error (error);

  dir = g_dir_make_tmp ("mixprec-set-master-XXXXXX", &error);
  g_assert_no_error (error);
  out = g_build_filename (dir, "snapshot", NULL);
  case_var = g_strdup_printf ("MIXPREC_TEST_CASE=%s:%u:%s", c->mode, c->stage,
                              c->masters != NULL ? c->masters : "");
  out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  {
    const gchar *env[] = { "MIXPREC_TEST_SET_MASTER_CHILD=1", case_var, out_var, NULL };

    mp_run_ranks (2, TIMEOUT_MS, env, status);
  }
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  after = g_strdup_printf ("%s.after", out);
  g_assert_true (g_file_get_contents (after, &got_after, &len, &error));
  g_assert_no_error (error);
  g_unlink (after);
  g_assert_cmpuint (len, ==, want_after->len);
  if (memcmp (got_after, want_after->data, len) != 0)
    g_error ("2 ranks: w2 right after the call differs from one process's");
  g_assert_true (g_file_get_contents (out, &got, &len, &error));
  g_assert_no_error (error);
  g_unlink (out);
  g_rmdir (dir);
  g_assert_cmpuint (len, ==, want->len);
  if (memcmp (got, want->data, len) != 0)
    g_error ("2 ranks differ from one process after the same new values");
}

int
main (int argc, char **argv)
{
  static const Case one[] = {
    { "fp32", 0, NULL },
    { "bf16", 0, NULL },
    { "bf16", 0, "remainder" },
    { "bf16", 0, "kahan" },
    { "bf16", 0, "none" },
  };
  static const Case ranks[] = {
    { "bf16", 3, NULL },
    { "fp32", 2, NULL },
    { "bf16", 1, "kahan" },
    { "bf16", 3, "remainder" },
    { "bf16", 0, NULL },
  };

  if (g_getenv ("MIXPREC_TEST_SET_MASTER_CHILD") != NULL)
    return child_main ();

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (one); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/engine/set-master/one/%s/%s", one[i].mode,
                                                one[i].masters != NULL ? one[i].masters : "default");

      g_test_add_data_func (path, &one[i], test_set_master_one);
    }
  g_test_add_func ("/engine/set-master/errors", test_set_master_errors);
  g_test_add_func ("/engine/set-master/one/param-alone", test_set_master_one_param);
  for (guint i = 0; i < G_N_ELEMENTS (ranks); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/engine/set-master/ranks/%s/stage%u/%s",
                                                ranks[i].mode, ranks[i].stage,
                                                ranks[i].masters != NULL ? ranks[i].masters : "default");

      g_test_add_data_func (path, &ranks[i], test_set_master_ranks);
    }
  return g_test_run ();
}
