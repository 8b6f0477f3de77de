/* test-zero.c — ZeRO stages across real processes. The same global batch on
 * W ranks (gradient_accumulation_steps g, micro-batch m on rank m % W) must
 * give the same master weights and working copies, bit for bit, as one
 * process with gradient_accumulation_steps W * g: the reference is that
 * single-process run, computed in this process. Children are this binary
 * re-executed with the rank variables set. */
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "mixprec-engine-impl-private.h"
#include "engine-ranks-common.h"
#include "multiproc.h"

#define TIMEOUT_MS 3000

typedef struct {
  const gchar *mode;        /* "fp32", "bf16", "fp16" */
  guint stage;
  guint world;
  guint gas;                /* per rank */
  guint steps;
  gint overflow_step;       /* -1, or the step whose micro-batch overflows */
  gint overflow_rank;       /* the only rank whose gradient is not finite */
  gboolean intake;          /* gradients handed over one parameter at a time
                               (mixprec_param_reduce_grad(), backward order,
                               overlap_comm), ZeRO-3 gathering each in turn */
  const gchar *repr;        /* NULL, or "MASTER/FORMAT/BLOCK": mixprec.master_weights
                               and every optimizer slot's format */
} Scenario;

/* Two small matrices (packed into one unit), a vector (its own group:
 * vectors are not decayed), and a matrix above the ZeRO-3 persistence
 * threshold, a unit of its own larger than a staging slot. */
static const struct { const gchar *name; guint64 rows, cols; } model[] = {
  { "w1", 3000, 5 }, { "b1", 1000, 0 }, { "w2", 4100, 2 }, { "w3", 300, 400 },
};

/* The representation scenarios make the vector odd (1001 elements): a
 * unit of odd length ends in an odd block, which INT4 calls pad. */
static guint64
rows_of (const Scenario *s, guint p)
{
  return model[p].rows + (s->repr != NULL && p == 1 ? 1 : 0);
}

static gchar *
config_json (const Scenario *s, guint gas)
{
  const gchar *precision =
    g_str_equal (s->mode, "fp16") ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12,"
                                    " \"hysteresis\": 1},"
    : g_str_equal (s->mode, "bf16") ? "\"bf16\": {\"enabled\": true},"
    : "";

  g_autofree gchar *repr = NULL;

  if (s->repr != NULL)
    {
      g_auto(GStrv) f = g_strsplit (s->repr, "/", 3);

      repr = g_strdup_printf ("\"mixprec\": {\"master_weights\": \"%s\", \"optimizer_states\":"
                              " {\"default\": \"%s\", \"block_size\": %s}},", f[0], f[1], f[2]);
    }
  return g_strdup_printf ("{%s %s \"zero_optimization\": {\"stage\": %u, \"reduce_bucket_size\": 3000,"
                          "  \"allgather_bucket_size\": 3000,"
                          "  \"overlap_comm\": %s},"
                          " \"gradient_accumulation_steps\": %u, \"gradient_clipping\": 1.0,"
                          " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01,"
                          "   \"weight_decay\": 0.1}},"
                          " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 3}}}",
                          precision, repr != NULL ? repr : "", s->stage, s->intake ? "true" : "false", gas);
}

/* The gradient of global micro-batch m at step k: deterministic, of both
 * signs and several magnitudes; non-finite where the scenario says. */
static gfloat
grad_value (const Scenario *s, guint step, guint m, guint p, guint64 i)
{
  if ((gint) step == s->overflow_step && (gint) (m % s->world) == s->overflow_rank && i == 7)
    return INFINITY;
  return (gfloat) (sin (0.37 * m + 0.011 * (gdouble) i + 1.3 * step + p) *
                   exp2 ((gdouble) ((i * 7 + m) % 9) - 4.0));
}

static MixprecEngine *
build_engine (const Scenario *s, guint gas)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = config_json (s, gas);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint64 numel = rows_of (s, p) * MAX (model[p].cols, 1);
      guint64 shape[2] = { rows_of (s, p), model[p].cols };
      g_autofree gfloat *init = g_new (gfloat, numel);
      g_autoptr(GBytes) bytes = NULL;

      for (guint64 i = 0; i < numel; i++)
        init[i] = (gfloat) cos (0.1 * (gdouble) i + p) * 0.5f;
      bytes = g_bytes_new (init, numel * sizeof (gfloat));
      g_assert_nonnull (mixprec_engine_register_param (engine, model[p].name, shape,
                                                       model[p].cols ? 2 : 1, "Linear",
                                                       MIXPREC_DTYPE_FLOAT32, bytes, &error));
      g_assert_no_error (error);
    }
  return engine;
}

/* Runs the scenario's steps; @rank and @world say which micro-batches this
 * engine sees. Returns FALSE with @error on a failed collective. */
static gboolean
train (MixprecEngine *engine, const Scenario *s, guint rank, guint world, guint gas,
       gint die_at_step, GError **error)
{
  for (guint k = 0; k < s->steps; k++)
    {
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint local = 0; local < gas; local++)
        {
          guint m = local * world + rank;

          if ((gint) k == die_at_step && local == 0)
            raise (SIGKILL);
          for (guint q = 0; q < G_N_ELEMENTS (model); q++)
            {
              /* The backward pass meets the parameters last to first. */
              guint p = s->intake ? G_N_ELEMENTS (model) - 1 - q : q;
              MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
              guint64 numel = mixprec_param_get_numel (param);
              g_autofree gfloat *g = g_new (gfloat, numel);
              gdouble scale = mixprec_engine_get_loss_scale (engine);
              g_autoptr(GBytes) bytes = NULL;

              if (s->intake)
                {
                  /* ZeRO-3: the layer is gathered for its backward pass,
                   * the next one prefetched. */
                  if (q + 1 < G_N_ELEMENTS (model) &&
                      !mixprec_engine_prefetch (engine, mixprec_engine_get_param (engine, model[p - 1].name), error))
                    return FALSE;
                  if (!mixprec_engine_gather (engine, param, error))
                    return FALSE;
                  g_assert_nonnull (mixprec_param_get_working_data (param));
                  mixprec_engine_release (engine, param);
                }
              for (guint64 i = 0; i < numel; i++)
                g[i] = (gfloat) (grad_value (s, k, m, p, i) * scale);
              if (s->intake)
                {
                  if (!mixprec_param_reduce_grad (param, MIXPREC_DTYPE_FLOAT32, g, error))
                    return FALSE;
                  continue;
                }
              bytes = g_bytes_new_take (g_steal_pointer (&g), numel * sizeof (gfloat));
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

/* Master weights then FP32 working copies of every parameter. */
static GByteArray *
snapshot (MixprecEngine *engine, GError **error)
{
  GByteArray *out = g_byte_array_new ();

  if (!mixprec_engine_gather_all (engine, error))
    return NULL;
  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      MixprecParam *param = mixprec_engine_get_param (engine, model[p].name);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, model[p].name, error);
      g_autoptr(GBytes) working = NULL;

      if (master == NULL)
        return NULL;
      working = mixprec_param_get_working (param, MIXPREC_DTYPE_FLOAT32, error);
      if (working == NULL)
        return NULL;
      g_byte_array_append (out, g_bytes_get_data (master, NULL), g_bytes_get_size (master));
      g_byte_array_append (out, g_bytes_get_data (working, NULL), g_bytes_get_size (working));
    }
  mixprec_engine_release_all (engine);
  return out;
}

/* Every optimizer state slot's stored value (a code, or the float's bits)
 * per element, every block scale and every remainder or compensation, of
 * the elements this rank updates, at the same place whatever the world
 * size: the ranks' dumps OR together into the one-process dump. Each
 * group: n_slots codes of 4 bytes per element, n_slots scales per block
 * (blocks of each unit counted from its first element), a 16-bit extra
 * per element. */
static GByteArray *
dump_state (MixprecEngine *engine)
{
  GByteArray *out = g_byte_array_new ();
  guint n_slots = mixprec_feature_get_n_state_slots (engine->optimizer);
  guint bs = engine->repr.block_size;

  for (guint gi = 0; gi < engine->groups->len; gi++)
    {
      Group *g = g_ptr_array_index (engine->groups, gi);
      guint64 n_blocks = 0, blocks_before = 0;
      guint32 *codes, *scales;
      guint16 *extra;
      gsize at = out->len;

      for (guint k = 0; bs > 0 && k < g->units->len; k++)
        n_blocks += (g_array_index (g->units, Unit, k).numel + bs - 1) / bs;
      g_byte_array_set_size (out, at + g->numel * n_slots * 4 + n_blocks * n_slots * 4 + g->numel * 2);
      memset (out->data + at, 0, out->len - at);
      codes = (guint32 *) (out->data + at);
      scales = codes + g->numel * n_slots;
      extra = (guint16 *) (scales + n_blocks * n_slots);
      for (guint k = 0; k < g->units->len; k++)
        {
          const Unit *u = &g_array_index (g->units, Unit, k);
          guint64 slice = UNIT_SLICE (engine, u);
          guint64 lo = g->state_local ? engine->rank * slice : 0;
          guint64 hi = g->state_local ? MIN (u->numel, lo + slice) : u->numel;

          for (guint64 e = lo; e < hi; e++)
            {
              gfloat *m;
              gpointer w;
              guint64 state_at;

              for (guint j = 0; j < n_slots; j++)
                {
                  MixprecPluginStateFormat f = engine->repr.slots[j];
                  guint64 idx = _mixprec_engine_state_index (engine, g, u, e, j);
                  const guint8 *base = g->states[j];
                  guint32 c = 0;

                  if (f == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC)
                    c = (base[idx / 2] >> (4 * (idx & 1))) & 0xf;
                  else
                    {
                      gsize size = _mixprec_engine_format_bytes (f, 1);

                      memcpy (&c, base + idx * size, size);
                    }
                  codes[(u->index + e) * n_slots + j] = c;
                  if (_mixprec_engine_format_is_scaled (f) && e % bs == 0)
                    memcpy (&scales[(blocks_before + e / bs) * n_slots + j],
                            &g->state_scales[j][_mixprec_engine_scale_at (engine, g, u, e)], 4);
                }
              _mixprec_engine_values_at (engine, g, u, e, &m, &state_at, &w);
              if (g->master_extra != NULL)
                extra[u->index + e] = ((const guint16 *) g->master_extra)[state_at];
            }
          if (bs > 0)
            blocks_before += (u->numel + bs - 1) / bs;
        }
    }
  return out;
}

static gboolean
parse_scenario (const gchar *text, Scenario *s)
{
  g_auto(GStrv) f = g_strsplit (text, ":", -1);

  if (g_strv_length (f) != 9)
    return FALSE;
  s->repr = *f[8] != '\0' ? g_intern_string (f[8]) : NULL;
  s->mode = g_intern_string (f[0]);
  s->stage = atoi (f[1]);
  s->world = atoi (f[2]);
  s->gas = atoi (f[3]);
  s->steps = atoi (f[4]);
  s->overflow_step = atoi (f[5]);
  s->overflow_rank = atoi (f[6]);
  s->intake = atoi (f[7]);
  return TRUE;
}

/* The engine's allocation on this rank equals the memory plan buffer by
 * buffer: the bytes it holds after the steps, the most it held, and what
 * its layout planned. The model is two groups (matrices, and vectors exempt
 * from decay), each planned as a model of its own. */
static gboolean
plan_matches (const Scenario *s, MixprecEngine *engine)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = config_json (s, s->gas);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(GPtrArray) held = mixprec_engine_list_buffers (engine);
  guint64 sizes[2][G_N_ELEMENTS (model)];
  guint n[2] = { 0, 0 };
  g_autoptr(GHashTable) planned = g_hash_table_new (g_str_hash, g_str_equal);
  g_autoptr(GPtrArray) plans = g_ptr_array_new_with_free_func ((GDestroyNotify) g_ptr_array_unref);
  gboolean ok = TRUE;

  for (guint p = 0; p < G_N_ELEMENTS (model); p++)
    {
      guint k = model[p].cols ? 0 : 1;

      sizes[k][n[k]++] = rows_of (s, p) * MAX (model[p].cols, 1);
    }
  for (guint k = 0; k < 2; k++)
    {
      GPtrArray *plan = mixprec_memory_plan_list_buffers (config, sizes[k], n[k], s->world, 0, &error);

      if (plan == NULL)
        return FALSE;
      g_ptr_array_add (plans, plan);
      /* Written whole under ZeRO-2/3, gradients take a whole buffer, as
       * ZeRO-1 plans it. */
      if (!s->intake && s->stage >= 2)
        {
          Scenario one = *s;
          g_autofree gchar *json1 = NULL;
          g_autoptr(MixprecConfig) config1 = NULL;
          GPtrArray *plan1;

          one.stage = 1;
          json1 = config_json (&one, one.gas);
          config1 = mixprec_config_new_from_data (json1, -1, &error);
          plan1 = mixprec_memory_plan_list_buffers (config1, sizes[k], n[k], s->world, 0, &error);
          if (plan1 == NULL)
            return FALSE;
          g_ptr_array_add (plans, plan1);
          for (guint i = 0; i < plan1->len; i++)
            {
              MixprecMemoryBuffer *b = g_ptr_array_index (plan1, i);

              if (g_str_equal (b->name, "gradients"))
                g_hash_table_insert (planned, (gpointer) "whole gradients",
                                     GSIZE_TO_POINTER (GPOINTER_TO_SIZE (g_hash_table_lookup (planned, "whole gradients")) +
                                                       b->planned_bytes));
            }
        }
      for (guint i = 0; i < plan->len; i++)
        {
          MixprecMemoryBuffer *b = g_ptr_array_index (plan, i);
          guint64 sum = GPOINTER_TO_SIZE (g_hash_table_lookup (planned, b->name));

          /* ZeRO-3 gathers: the plan assumes a prefetch window; this
           * trainer gathers everything at once, checked below. */
          if (g_str_equal (b->name, "gathered working copies"))
            continue;
          g_hash_table_insert (planned, b->name, GSIZE_TO_POINTER (sum + b->planned_bytes));
        }
    }
  for (guint i = 0; i < held->len; i++)
    {
      MixprecMemoryBuffer *b = g_ptr_array_index (held, i);
      guint64 want = GPOINTER_TO_SIZE (g_hash_table_lookup (planned, b->name));

      if (g_str_equal (b->name, "gathered working copies"))
        {
          /* Released by the step; at most every unit at once. */
          if (b->bytes != 0 || b->planned_bytes != 0)
            ok = FALSE;
          continue;
        }
      if (g_str_equal (b->name, "gradients") && want == 0)
        {
          /* Allocated on first use, not by the layout. */
          want = GPOINTER_TO_SIZE (g_hash_table_lookup (planned, "whole gradients"));
          g_hash_table_remove (planned, "whole gradients");
          if (b->planned_bytes != 0 || b->peak_bytes != want || b->bytes != want)
            ok = FALSE;
          continue;
        }
      if (b->planned_bytes != want || b->peak_bytes != want || b->bytes != want)
        {
          g_printerr ("buffer '%s': held %" G_GUINT64_FORMAT ", peak %" G_GUINT64_FORMAT
                      ", layout %" G_GUINT64_FORMAT ", plan %" G_GUINT64_FORMAT "\n",
                      b->name, b->bytes, b->peak_bytes, b->planned_bytes, want);
          ok = FALSE;
        }
      g_hash_table_remove (planned, b->name);
    }
  {
    GHashTableIter iter;
    gpointer key, value;

    g_hash_table_iter_init (&iter, planned);
    while (g_hash_table_iter_next (&iter, &key, &value))
      if (GPOINTER_TO_SIZE (value) != 0)
        {
          g_printerr ("buffer '%s': planned %" G_GSIZE_FORMAT " bytes, never allocated\n",
                      (const gchar *) key, GPOINTER_TO_SIZE (value));
          ok = FALSE;
        }
  }
  return ok;
}

/* A child rank: exit 0 after writing its snapshot (rank 0) and memory
 * report; exit 3 when a collective failed with an engine COMM error, 4
 * when its memory report differs from the plan. */
static int
child_main (void)
{
  Scenario s;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GByteArray) snap = NULL;
  g_autoptr(MixprecMemoryReport) mem = NULL;
  const gchar *out = g_getenv ("MIXPREC_TEST_OUT");
  gint die = atoi (g_getenv ("MIXPREC_TEST_DIE_AT") ? g_getenv ("MIXPREC_TEST_DIE_AT") : "-1");
  guint rank;
  g_autofree gchar *memfile = NULL;
  g_autofree gchar *memtext = NULL;

  if (!parse_scenario (g_getenv ("MIXPREC_TEST_SCENARIO"), &s))
    return 2;
  engine = build_engine (&s, s.gas);
  rank = mixprec_engine_get_rank (engine);
  if (mixprec_engine_get_world_size (engine) != s.world)
    return 2;
  if (!train (engine, &s, rank, s.world, s.gas, rank == 1 ? die : -1, &error) ||
      (snap = snapshot (engine, &error)) == NULL)
    {
      g_printerr ("rank %u: %s\n", rank, error->message);
      return g_error_matches (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_COMM) ? 3 : 1;
    }
  mem = mixprec_engine_get_memory_report (engine);
  if (!plan_matches (&s, engine))
    return 4;
  memtext = g_strdup_printf ("%" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT " %" G_GUINT64_FORMAT,
                             mem->optimizer_state, mem->masters, mem->accumulation);
  memfile = g_strdup_printf ("%s.mem%u", out, rank);
  if (!g_file_set_contents (memfile, memtext, -1, &error))
    return 1;
  if (rank == 0 && !g_file_set_contents (out, (const gchar *) snap->data, snap->len, &error))
    return 1;
  if (s.repr != NULL)
    {
      g_autoptr(GByteArray) state = dump_state (engine);
      g_autofree gchar *statefile = g_strdup_printf ("%s.state%u", out, rank);

      if (!g_file_set_contents (statefile, (const gchar *) state->data, state->len, &error))
        return 1;
    }
  return 0;
}

/* Starts @s.world ranks of this binary running the scenario. */
static void
run_children (const Scenario *s, const gchar *out, gint die_at, gint *status)
{
  g_autofree gchar *scenario = g_strdup_printf ("MIXPREC_TEST_SCENARIO=%s:%u:%u:%u:%u:%d:%d:%d:%s",
                                                s->mode, s->stage, s->world, s->gas, s->steps,
                                                s->overflow_step, s->overflow_rank, s->intake,
                                                s->repr != NULL ? s->repr : "");
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  g_autofree gchar *die = g_strdup_printf ("MIXPREC_TEST_DIE_AT=%d", die_at);
  const gchar *env[] = { "MIXPREC_TEST_ZERO_CHILD=1", scenario, out_var, die, NULL };

  mp_run_ranks (s->world, TIMEOUT_MS, env, status);
}

static void
test_zero_scenario (gconstpointer data)
{
  const Scenario *s = data;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) ref = NULL;
  g_autoptr(GByteArray) expected = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-zero-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "snapshot", NULL);
  g_autofree gchar *got = NULL;
  gsize got_len = 0;
  gint status[8];
  guint64 matrices = 0, vectors = 0;

  /* The reference: one process, every micro-batch in order. */
  ref = build_engine (s, s->gas * s->world);
  g_assert_true (train (ref, s, 0, 1, s->gas * s->world, -1, &error));
  g_assert_no_error (error);
  expected = snapshot (ref, &error);
  g_assert_no_error (error);

  run_children (s, out, -1, status);
  for (guint r = 0; r < s->world; r++)
    g_assert_cmpint (status[r], ==, 0);
  g_assert_true (g_file_get_contents (out, &got, &got_len, &error));
  g_assert_cmpuint (got_len, ==, expected->len);
  g_assert_true (memcmp (got, expected->data, got_len) == 0);

  /* Every slot's codes and scales and every remainder or compensation:
   * the ranks' parts make the one process's, bit for bit. */
  if (s->repr != NULL)
    {
      g_autoptr(GByteArray) want = dump_state (ref);
      g_autofree guint8 *merged = g_malloc0 (MAX (want->len, 1));

      for (guint r = 0; r < s->world; r++)
        {
          g_autofree gchar *file = g_strdup_printf ("%s.state%u", out, r);
          g_autofree gchar *part = NULL;
          gsize part_len = 0;

          g_assert_true (g_file_get_contents (file, &part, &part_len, &error));
          g_assert_cmpuint (part_len, ==, want->len);
          for (gsize i = 0; i < part_len; i++)
            merged[i] |= (guint8) part[i];
          g_remove (file);
        }
      g_assert_true (memcmp (merged, want->data, want->len) == 0);
      /* The steps wrote state (not a comparison of zeros). */
      {
        gsize nonzero = 0;

        for (gsize i = 0; i < want->len; i++)
          nonzero += want->data[i] != 0;
        g_test_message ("%" G_GSIZE_FORMAT " of %u state bytes are not zero", nonzero, want->len);
        g_assert_cmpuint (nonzero, >, want->len / 8);
      }
      g_remove (out);
      g_rmdir (dir);
      return;
    }

  /* Optimizer state per rank: 1/world of the whole from ZeRO-1 on, each
   * unit padded to world * 4096 elements; AdamW keeps two FP32 slots. The
   * units: w1 and w2 packed (both below the persistence threshold), w3
   * alone, b1 alone (vectors are a group of their own). */
  matrices = er_padded_numel (model[0].rows * model[0].cols + model[2].rows * model[2].cols, s->world) +
             er_padded_numel (model[3].rows * model[3].cols, s->world);
  vectors = er_padded_numel (model[1].rows, s->world);
  for (guint r = 0; r < s->world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.mem%u", out, r);
      g_autofree gchar *text = NULL;
      guint64 state = 0, per_rank;

      g_assert_true (g_file_get_contents (file, &text, NULL, &error));
      state = g_ascii_strtoull (text, NULL, 10);
      per_rank = (matrices + vectors) / (s->stage >= 1 ? s->world : 1);
      g_assert_cmpuint (state, ==, 2 * sizeof (gfloat) * per_rank);
      g_remove (file);
    }
  g_remove (out);
  g_rmdir (dir);
}

/* A rank that dies mid-step makes the other fail with a communication
 * error within the timeout, never hang. */
static void
test_zero_dead_peer (void)
{
  Scenario s = { "bf16", 2, 2, 1, 4, -1, -1 };
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-zero-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "snapshot", NULL);
  gint status[2];
  gint64 start = g_get_monotonic_time ();

  run_children (&s, out, 2, status);
  g_assert_cmpint (status[1], ==, 128 + SIGKILL);
  g_assert_cmpint (status[0], ==, 3);
  /* The timeout is 3 s; allow generous slack for a loaded machine. */
  g_assert_cmpint (g_get_monotonic_time () - start, <, 30 * G_USEC_PER_SEC);
  g_rmdir (dir);
}

/* Model parallelism: two ranks hold different parts of a model (each its
 * own data-parallel group of one), so their gradients differ; overflow and
 * the norm are agreed over the model-parallel communicator. Rank r's
 * gradient at step k is (r + 1) * (k + 1) * 0.25 for all 8 elements, and
 * rank 1's is infinite at step 1. */
#define MP_STEPS 3

static gfloat
mp_grad (guint rank, guint step)
{
  return (gfloat) ((rank + 1) * (step + 1)) * 0.25f;
}

static int
mp_child_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) bootstrap = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_autoptr(MixprecComm) mp = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(GString) out = g_string_new (NULL);
  g_autofree gchar *file = NULL;
  guint rank;
  gfloat init[8] = { 0 };
  guint64 shape[1] = { 8 };
  g_autoptr(GBytes) bytes = g_bytes_new (init, sizeof init);
  MixprecParam *p;

  if (bootstrap == NULL)
    return 1;
  rank = mixprec_bootstrap_get_rank (bootstrap);
  mp = mixprec_comm_new (bootstrap, "auto", "cpu", TIMEOUT_MS, &error);
  config = mixprec_config_new_from_data ("{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 4,"
                                         " \"hysteresis\": 1},"
                                         " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.1}}}",
                                         -1, &error);
  if (mp == NULL || config == NULL)
    return 1;
  engine = mixprec_engine_new_with_comm (config, NULL, mp, &error);
  if (engine == NULL || mixprec_engine_get_world_size (engine) != 1)
    return 1;
  p = mixprec_engine_register_param (engine, "w", shape, 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                     bytes, &error);
  for (guint k = 0; k < MP_STEPS && p != NULL; k++)
    {
      gfloat g[8];
      gdouble scale = mixprec_engine_get_loss_scale (engine);
      g_autoptr(GBytes) gb = NULL;
      g_autoptr(MixprecStepResult) r = NULL;

      for (guint i = 0; i < 8; i++)
        g[i] = (k == 1 && rank == 1) ? INFINITY : (gfloat) (mp_grad (rank, k) * scale);
      gb = g_bytes_new (g, sizeof g);
      if (!mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, gb, &error) ||
          !mixprec_engine_backward_done (engine, &error) ||
          (r = mixprec_engine_step (engine, &error)) == NULL)
        {
          g_printerr ("rank %u: %s\n", rank, error->message);
          return 1;
        }
      g_string_append_printf (out, "%d %.17g\n", r->applied, r->grad_norm);
    }
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), rank);
  return g_file_set_contents (file, out->str, -1, NULL) ? 0 : 1;
}

static void
test_zero_model_parallel (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-mp-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "mp", NULL);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  const gchar *env[] = { "MIXPREC_TEST_MP_CHILD=1", out_var, NULL };
  gint status[2];

  mp_run_ranks (2, TIMEOUT_MS, env, status);
  g_assert_cmpint (status[0], ==, 0);
  g_assert_cmpint (status[1], ==, 0);
  for (guint r = 0; r < 2; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
      g_autofree gchar *text = NULL;
      g_auto(GStrv) lines = NULL;

      g_assert_true (g_file_get_contents (file, &text, NULL, &error));
      lines = g_strsplit (text, "\n", -1);
      for (guint k = 0; k < MP_STEPS; k++)
        {
          gint applied = 0;
          gdouble norm = 0;
          /* Both ranks' 8 elements: the norm of the whole model. */
          gdouble expected = sqrt (8.0 * (mp_grad (0, k) * mp_grad (0, k) + mp_grad (1, k) * mp_grad (1, k)));

          g_assert_cmpint (sscanf (lines[k], "%d %lg", &applied, &norm), ==, 2);
          g_assert_cmpint (applied, ==, k != 1);     /* rank 1's overflow skips both */
          if (k != 1)
            g_assert_cmpfloat_with_epsilon (norm, expected, 1e-12 * expected);
        }
      g_remove (file);
    }
  g_rmdir (dir);
}

int
main (int argc, char **argv)
{
  static const Scenario scenarios[] = {
    { "fp32", 0, 2, 1, 3, -1, -1 },
    { "fp32", 1, 2, 2, 3, -1, -1 },
    { "bf16", 1, 2, 1, 3, -1, -1 },
    { "bf16", 2, 2, 2, 3, -1, -1 },
    { "bf16", 3, 2, 1, 3, -1, -1 },
    { "fp16", 2, 2, 1, 4, 1, 1 },      /* overflow on rank 1 only, at step 1 */
    { "bf16", 2, 3, 1, 3, -1, -1 },
    { "fp32", 3, 3, 2, 2, -1, -1 },
    { "bf16", 1, 4, 1, 2, -1, -1 },
    /* Gradients handed over as the backward pass produces them. */
    { "bf16", 0, 3, 1, 2, -1, -1, TRUE },
    { "fp32", 1, 2, 1, 2, -1, -1, TRUE },
    { "bf16", 2, 3, 2, 2, -1, -1, TRUE },
    { "fp16", 2, 2, 1, 4, 1, 1, TRUE },
    { "bf16", 3, 3, 1, 3, -1, -1, TRUE },
    { "fp32", 3, 2, 2, 2, -1, -1, TRUE },
    /* Masters and optimizer states in every representation: the same
     * bits at every world size and stage. */
    { "bf16", 0, 2, 1, 3, -1, -1, FALSE, "remainder/int8/256" },
    { "bf16", 1, 3, 1, 3, -1, -1, FALSE, "remainder/int4/128" },
    { "bf16", 2, 2, 2, 3, -1, -1, FALSE, "kahan/fp8_e4m3_scaled/32" },
    { "bf16", 3, 3, 1, 3, -1, -1, TRUE, "remainder/fp16_scaled/4096" },
    { "bf16", 1, 2, 1, 3, -1, -1, FALSE, "none/bf16_scaled/256" },
    { "bf16", 3, 2, 1, 3, -1, -1, FALSE, "kahan/int8/256" },
    { "bf16", 0, 3, 1, 2, -1, -1, TRUE, "kahan/int4/32" },
    { "bf16", 2, 4, 1, 2, -1, -1, FALSE, "fp32/int8/4096" },
    { "fp32", 3, 2, 1, 3, -1, -1, TRUE, "fp32/int4/256" },
    { "bf16", 1, 2, 1, 3, -1, -1, FALSE, "kahan/bf16/256" },
    { "fp16", 2, 2, 1, 4, 1, 1, FALSE, "fp32/fp8_e4m3_scaled/128" },
    { "fp32", 0, 2, 1, 3, -1, -1, FALSE, "fp32/fp32/256" },
  };

  if (g_getenv ("MIXPREC_TEST_ZERO_CHILD") != NULL)
    return child_main ();
  if (g_getenv ("MIXPREC_TEST_MP_CHILD") != NULL)
    return mp_child_main ();

  g_test_init (&argc, &argv, NULL);
  for (guint i = 0; i < G_N_ELEMENTS (scenarios); i++)
    {
      const Scenario *s = &scenarios[i];
      g_autofree gchar *repr = s->repr != NULL ? g_strdelimit (g_strdup_printf ("/%s", s->repr), "/", '-') : NULL;
      g_autofree gchar *path = g_strdup_printf ("/zero/%s/%s%s/stage%u/world%u/gas%u%s",
                                                s->intake ? "per-param" : "whole", s->mode,
                                                repr != NULL ? repr : "", s->stage,
                                                s->world, s->gas,
                                                s->overflow_step >= 0 ? "/overflow-on-one-rank" : "");
      g_test_add_data_func (path, s, test_zero_scenario);
    }
  g_test_add_func ("/zero/dead-peer", test_zero_dead_peer);
  g_test_add_func ("/zero/model-parallel-agreement", test_zero_model_parallel);
  return g_test_run ();
}
