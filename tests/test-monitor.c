/* test-monitor.c — what the engine tells about its steps: the log messages
 * of the "Mixprec" domain (skips, loss-scale changes, steps_per_print) and
 * the csv_monitor and tensorboard files, with the config sections behind
 * them. Expected scales come from a second implementation of DeepSpeed's
 * DynamicLossScaler update (mixprec.json(5), fp16), learning rates from
 * WarmupLR's linear formula (DeepSpeed's lr_schedules.py), gradient norms
 * from gradients chosen so that the norm is exact, CRC-32C from its
 * published check value. The TensorBoard file's contents are read back by
 * the tensorboard package in test-monitor-tensorboard-gi.py. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include <mixprec/mixprec.h>
#include "mixprec-monitor-private.h"

/* ---------------------------------------------------------------- capture */

typedef struct {
  GLogLevelFlags level;
  GHashTable *fields;        /* name -> value */
} Captured;

static GPtrArray *captured;

static void
captured_free (gpointer data)
{
  Captured *c = data;

  g_hash_table_unref (c->fields);
  g_free (c);
}

static GLogWriterOutput
capture_writer (GLogLevelFlags   level,
                const GLogField *fields,
                gsize            n_fields,
                gpointer         data)
{
  Captured *c;

  for (gsize i = 0; i < n_fields; i++)
    if (g_str_equal (fields[i].key, "GLIB_DOMAIN") && fields[i].length < 0 &&
        g_str_equal (fields[i].value, "Mixprec") && captured != NULL)
      {
        c = g_new0 (Captured, 1);
        c->level = level & G_LOG_LEVEL_MASK;
        c->fields = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
        for (gsize k = 0; k < n_fields; k++)
          if (fields[k].length < 0)
            g_hash_table_insert (c->fields, g_strdup (fields[k].key), g_strdup (fields[k].value));
        g_ptr_array_add (captured, c);
        return G_LOG_WRITER_HANDLED;
      }
  return g_log_writer_default (level, fields, n_fields, data);
}

static const gchar *
field (Captured    *c,
       const gchar *name)
{
  return g_hash_table_lookup (c->fields, name);
}

/* ---------------------------------------------------------------- model */

/* DeepSpeed's DynamicLossScaler.update_scale, as mixprec.json(5) pins it:
 * an overflow backs off (halving, floored at the minimum) once the
 * hysteresis is used up, else uses one unit of it; after every
 * loss_scale_window overflow-free steps the scale doubles and the
 * hysteresis refills. */
typedef struct {
  gdouble scale, min_scale;
  guint window, hysteresis, left;
  gint64 iter, last_overflow;
} Model;

static void
model_init (Model *m, gdouble scale, guint window, guint hysteresis)
{
  *m = (Model) { scale, 1.0, window, hysteresis, hysteresis, 0, -1 };
}

static void
model_update (Model *m, gboolean overflow)
{
  if (overflow)
    {
      if (m->hysteresis == 1 || m->left == 1)
        m->scale = MAX (m->scale / 2, m->min_scale);
      else
        m->left--;
      m->last_overflow = m->iter;
    }
  else
    {
      gint64 stable = m->iter - m->last_overflow - 1;

      if (stable > 0 && stable % m->window == 0)
        {
          m->left = m->hysteresis;
          m->scale *= 2;
        }
    }
  m->iter++;
}

/* WarmupLR, linear, warmup_min_lr 0: the k-th applied step (from 0) runs
 * at last_batch_iteration k - 1, the first two at the minimum. */
static gdouble
warmup_lr (guint64 applied_before, gdouble max_lr, guint warmup)
{
  gdouble it = applied_before > 0 ? (gdouble) (applied_before - 1) : 0.0;

  return max_lr * MIN (it / warmup, 1.0);
}

/* ---------------------------------------------------------------- engine */

static MixprecEngine *
engine_from_json (const gchar *json, GError **error)
{
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, error);

  if (config == NULL)
    return NULL;
  return mixprec_engine_new (config, error);
}

static MixprecParam *
add_param (MixprecEngine *engine)
{
  g_autoptr(GError) error = NULL;
  const gfloat w[2] = { 0.5f, -0.25f };
  guint64 shape[1] = { 2 };
  g_autoptr(GBytes) init = g_bytes_new (w, sizeof w);
  MixprecParam *p = mixprec_engine_register_param (engine, "fc.weight", shape, 1, "Linear",
                                                   MIXPREC_DTYPE_FLOAT32, init, &error);

  g_assert_no_error (error);
  return p;
}

/* A step whose unscaled gradients are (3, 4), so the norm is exactly 5,
 * or with an infinite gradient. */
static MixprecStepResult *
scripted_step (MixprecEngine *engine,
               MixprecParam  *p,
               gboolean       overflow)
{
  g_autoptr(GError) error = NULL;
  gdouble scale = mixprec_engine_get_loss_scale (engine);
  const gfloat g[2] = { overflow ? INFINITY : (gfloat) (3 * scale), (gfloat) (4 * scale) };
  g_autoptr(GBytes) b = g_bytes_new (g, sizeof g);
  MixprecStepResult *r;

  g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, b, &error));
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_backward_done (engine, &error));
  g_assert_no_error (error);
  r = mixprec_engine_step (engine, &error);
  g_assert_no_error (error);
  g_assert_nonnull (r);
  return r;
}

/* Overflow pattern of the scripted runs: hysteresis absorbs the first
 * overflow of a run, later ones halve, clean windows double. */
static const gboolean pattern[] = {
  FALSE, FALSE, FALSE, FALSE, TRUE, TRUE, TRUE, FALSE, FALSE, FALSE, FALSE, TRUE, FALSE,
};

#define SCRIPTED_CONFIG(extra) \
  ("{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 3," \
   "            \"hysteresis\": 2, \"min_loss_scale\": 1}," \
   " \"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01}}," \
   " \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0," \
   "     \"warmup_max_lr\": 0.01, \"warmup_num_steps\": 8, \"warmup_type\": \"linear\"}}" \
   extra "}")

static gchar *
fmt (gdouble v)
{
  gchar buf[G_ASCII_DTOSTR_BUF_SIZE];

  /* The shortest text that reads back as @v: powers of two print as
   * integers ("256"), 5 as "5". */
  if (isinf (v))
    return g_strdup ("inf");
  for (gint digits = 1; digits <= 17; digits++)
    {
      gchar format[8];

      g_snprintf (format, sizeof format, "%%.%dg", digits);
      g_ascii_formatd (buf, sizeof buf, format, v);
      if (g_ascii_strtod (buf, NULL) == v)
        break;
    }
  return g_strdup (buf);
}

/* ---------------------------------------------------------------- tests */

static void
test_crc32c (void)
{
  /* The CRC-32C check value (RFC 3720, B.4; iSCSI). */
  g_assert_cmphex (_mixprec_crc32c (0, "123456789", 9), ==, 0xE3069283);
  /* 32 bytes of zeros, RFC 3720's first example. */
  {
    guint8 zeros[32] = { 0 };

    g_assert_cmphex (_mixprec_crc32c (0, zeros, sizeof zeros), ==, 0x8A9136AA);
  }
  /* Incremental use gives the same CRC. */
  g_assert_cmphex (_mixprec_crc32c (_mixprec_crc32c (0, "1234", 4), "56789", 5), ==, 0xE3069283);
}

/* Every message of a scripted run, in order, with its fields: one skip
 * message per overflow with the attempted and the new scale, one per
 * growth, progress every steps_per_print steps, a debug line per step. */
static void
test_log_messages (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) e = engine_from_json (SCRIPTED_CONFIG (", \"steps_per_print\": 4"),
                                                 &error);
  MixprecParam *p;
  g_autoptr(GPtrArray) expected = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) expected_events = g_ptr_array_new ();
  guint n_debug = 0, k = 0;
  guint64 skipped = 0, applied = 0;
  Model m;

  g_assert_no_error (error);
  p = add_param (e);
  model_init (&m, 256, 3, 2);
  captured = g_ptr_array_new_with_free_func (captured_free);

  for (guint i = 0; i < G_N_ELEMENTS (pattern); i++)
    {
      g_autoptr(MixprecStepResult) r = scripted_step (e, p, pattern[i]);
      gdouble before = m.scale, lr = warmup_lr (applied, 0.01, 8);
      g_autofree gchar *sb = NULL, *sa = NULL, *slr = NULL;
      guint step = i + 1;

      model_update (&m, pattern[i]);
      sb = fmt (before);
      sa = fmt (m.scale);
      slr = fmt (lr);
      if (pattern[i])
        {
          skipped++;
          g_ptr_array_add (expected,
                           g_strdup_printf ("rank 0: step %u skipped: gradient overflow at loss "
                                            "scale %s; loss scale %s %s", step, sb,
                                            m.scale != before ? "lowered to" : "stays at", sa));
          g_ptr_array_add (expected_events, "overflow-skipped");
        }
      else
        {
          applied++;
          if (m.scale != before)
            {
              g_ptr_array_add (expected,
                               g_strdup_printf ("rank 0: step %u: loss scale raised from %s to %s",
                                                step, sb, sa));
              g_ptr_array_add (expected_events, "loss-scale-raised");
            }
        }
      if (step % 4 == 0)
        {
          g_ptr_array_add (expected,
                           g_strdup_printf ("rank 0: step %u: %" G_GUINT64_FORMAT " skipped so "
                                            "far, lr %s, loss scale %s, grad norm %s", step,
                                            skipped, slr, sb, pattern[i] ? "inf" : "5"));
          g_ptr_array_add (expected_events, "progress");
        }
      /* The engine's own results agree with the model. */
      g_assert_cmpfloat (r->loss_scale, ==, before);
      g_assert_cmpfloat (r->next_loss_scale, ==, m.scale);
      g_assert_cmpuint (r->skipped_steps, ==, skipped);
    }

  /* Messages (not debug) in order, and their fields. */
  for (guint i = 0; i < captured->len; i++)
    {
      Captured *c = g_ptr_array_index (captured, i);

      g_assert_cmpstr (field (c, "MIXPREC_RANK"), ==, "0");
      g_assert_cmpstr (field (c, "MIXPREC_WORLD_SIZE"), ==, "1");
      if (c->level == G_LOG_LEVEL_DEBUG)
        {
          n_debug++;
          g_assert_cmpstr (field (c, "MIXPREC_EVENT"), ==, "step");
          g_assert_true (g_str_has_prefix (field (c, "MESSAGE"), "rank 0: step "));
          continue;
        }
      g_assert_cmpint (c->level, ==, G_LOG_LEVEL_MESSAGE);
      g_assert_cmpuint (k, <, expected->len);
      g_assert_cmpstr (field (c, "MESSAGE"), ==, g_ptr_array_index (expected, k));
      g_assert_cmpstr (field (c, "MIXPREC_EVENT"), ==, g_ptr_array_index (expected_events, k));
      k++;
    }
  g_assert_cmpuint (k, ==, expected->len);
  g_assert_cmpuint (n_debug, ==, G_N_ELEMENTS (pattern));

  /* The fields of the first skip: step 5, the hysteresis keeps 512... */
  {
    g_autofree gchar *first = NULL;

    for (guint i = 0; i < captured->len && first == NULL; i++)
      {
        Captured *c = g_ptr_array_index (captured, i);

        if (g_strcmp0 (field (c, "MIXPREC_EVENT"), "overflow-skipped") == 0)
          first = g_strdup_printf ("%s %s %s %s %s", field (c, "MIXPREC_STEP"),
                                   field (c, "MIXPREC_LOSS_SCALE"),
                                   field (c, "MIXPREC_NEXT_LOSS_SCALE"),
                                   field (c, "MIXPREC_SKIPPED_STEPS"),
                                   field (c, "MIXPREC_GRAD_NORM"));
      }
    /* 256 grew to 512 at step 4 (its update saw 3 overflow-free steps
     * before it, a whole window); step 5 overflows at 512 and the
     * hysteresis (2) keeps it. */
    g_assert_cmpstr (first, ==, "5 512 512 1 inf");
  }
  g_clear_pointer (&captured, g_ptr_array_unref);
}

/* steps_per_print: DeepSpeed's default 10, and null for none. */
static void
test_log_steps_per_print (void)
{
  const struct { const gchar *extra; guint every; } cases[] = {
    { "", 10 },
    { ", \"steps_per_print\": 3", 3 },
    { ", \"steps_per_print\": null", 0 },
    { ", \"steps_per_print\": 1e10", 0 },
  };

  for (guint c = 0; c < G_N_ELEMENTS (cases); c++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree gchar *json = g_strdup_printf (
        "{\"bf16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"SGD\","
        " \"params\": {\"lr\": 0.5}}%s}", cases[c].extra);
      g_autoptr(MixprecEngine) e = engine_from_json (json, &error);
      MixprecParam *p;
      g_autoptr(GArray) printed = g_array_new (FALSE, FALSE, sizeof (guint));

      g_assert_no_error (error);
      p = add_param (e);
      captured = g_ptr_array_new_with_free_func (captured_free);
      for (guint i = 0; i < 21; i++)
        {
          g_autoptr(MixprecStepResult) r G_GNUC_UNUSED = scripted_step (e, p, FALSE);
        }
      for (guint i = 0; i < captured->len; i++)
        {
          Captured *cap = g_ptr_array_index (captured, i);

          if (g_strcmp0 (field (cap, "MIXPREC_EVENT"), "progress") == 0)
            {
              guint step = (guint) g_ascii_strtoull (field (cap, "MIXPREC_STEP"), NULL, 10);

              g_array_append_val (printed, step);
              g_assert_cmpint (cap->level, ==, G_LOG_LEVEL_MESSAGE);
            }
        }
      /* After every N-th step, as DeepSpeed's (global_steps + 1) % N. */
      g_assert_cmpuint (printed->len, ==, cases[c].every > 0 ? 21 / cases[c].every : 0);
      for (guint i = 0; i < printed->len; i++)
        g_assert_cmpuint (g_array_index (printed, guint, i), ==, (i + 1) * cases[c].every);
      g_clear_pointer (&captured, g_ptr_array_unref);
    }
}

/* Reads a CSV file of the monitor: its header, and step -> value. */
static gchar *
read_csv (const gchar *path,
          GArray      *steps,
          GArray      *values)
{
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;
  g_autoptr(GError) error = NULL;

  g_assert_true (g_file_get_contents (path, &text, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (g_str_has_suffix (text, "\n"));
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 1; lines[i] != NULL && *lines[i] != '\0'; i++)
    {
      g_auto(GStrv) cells = g_strsplit (lines[i], ",", -1);
      guint64 step;
      gdouble value;
      gchar *end;

      g_assert_cmpuint (g_strv_length (cells), ==, 2);
      step = g_ascii_strtoull (cells[0], &end, 10);
      g_assert_true (*end == '\0');
      value = g_ascii_strtod (cells[1], &end);
      g_assert_true (*end == '\0');
      g_array_append_val (steps, step);
      g_array_append_val (values, value);
    }
  return g_strdup (lines[0]);
}

static void
remove_tree (const gchar *dir)
{
  g_autoptr(GDir) d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *path = g_build_filename (dir, name, NULL);

      if (g_file_test (path, G_FILE_TEST_IS_DIR))
        remove_tree (path);
      else
        g_unlink (path);
    }
  g_rmdir (dir);
}

/* csv_monitor: one file per tag, header "step,<name>", a row per step;
 * the values those of the scripted run and of what the caller reported. */
static void
test_csv_monitor (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *tmp = g_dir_make_tmp ("mixprec-monitor-XXXXXX", &error);
  g_autofree gchar *json = NULL;
  g_autoptr(MixprecEngine) e = NULL;
  MixprecParam *p;
  Model m;
  g_autoptr(GArray) want_scale = g_array_new (FALSE, FALSE, sizeof (gdouble));
  g_autoptr(GArray) want_lr = g_array_new (FALSE, FALSE, sizeof (gdouble));
  g_autoptr(GArray) want_norm = g_array_new (FALSE, FALSE, sizeof (gdouble));
  g_autoptr(GArray) want_skipped = g_array_new (FALSE, FALSE, sizeof (gdouble));
  g_autoptr(GArray) want_loss = g_array_new (FALSE, FALSE, sizeof (gdouble));
  guint64 skipped = 0, applied = 0;
  const struct { const gchar *file, *header; GArray *want; } files[] = {
    { "Train_Steps_loss_scale.csv", "step,loss_scale", want_scale },
    { "Train_Steps_lr.csv", "step,lr", want_lr },
    { "Train_Steps_grad_norm.csv", "step,grad_norm", want_norm },
    { "Train_Steps_skipped_steps.csv", "step,skipped_steps", want_skipped },
    { "my_train_loss.csv", "step,train loss", want_loss },
  };

  g_assert_no_error (error);
  json = g_strdup_printf (SCRIPTED_CONFIG (", \"steps_per_print\": null, \"csv_monitor\": "
                                           "{\"enabled\": true, \"output_path\": \"%s/out\","
                                           " \"job_name\": \"job1\"}"), tmp);
  e = engine_from_json (json, &error);
  g_assert_no_error (error);
  /* The folder exists as soon as the engine does. */
  {
    g_autofree gchar *dir = g_build_filename (tmp, "out", "job1", NULL);

    g_assert_true (g_file_test (dir, G_FILE_TEST_IS_DIR));
  }
  p = add_param (e);
  model_init (&m, 256, 3, 2);
  for (guint i = 0; i < G_N_ELEMENTS (pattern); i++)
    {
      g_autoptr(MixprecStepResult) r G_GNUC_UNUSED = NULL;
      gdouble loss = 10.0 / (i + 1), lr = warmup_lr (applied, 0.01, 8);
      gdouble norm = pattern[i] ? INFINITY : 5.0, skipped_d;

      /* Reported before the step: recorded at the step in progress. */
      g_assert_true (mixprec_engine_report_scalar (e, "my/train loss", loss, &error));
      g_assert_no_error (error);
      r = scripted_step (e, p, pattern[i]);
      g_array_append_val (want_scale, m.scale);
      model_update (&m, pattern[i]);
      if (pattern[i])
        skipped++;
      else
        applied++;
      skipped_d = (gdouble) skipped;
      g_array_append_val (want_lr, lr);
      g_array_append_val (want_norm, norm);
      g_array_append_val (want_skipped, skipped_d);
      g_array_append_val (want_loss, loss);
    }

  for (guint f = 0; f < G_N_ELEMENTS (files); f++)
    {
      g_autofree gchar *path = g_build_filename (tmp, "out", "job1", files[f].file, NULL);
      g_autoptr(GArray) steps = g_array_new (FALSE, FALSE, sizeof (guint64));
      g_autoptr(GArray) values = g_array_new (FALSE, FALSE, sizeof (gdouble));
      g_autofree gchar *header = read_csv (path, steps, values);

      g_test_message ("%s", files[f].file);
      g_assert_cmpstr (header, ==, files[f].header);
      g_assert_cmpuint (steps->len, ==, G_N_ELEMENTS (pattern));
      for (guint i = 0; i < steps->len; i++)
        {
          gdouble got = g_array_index (values, gdouble, i);
          gdouble want = g_array_index (files[f].want, gdouble, i);

          g_assert_cmpuint (g_array_index (steps, guint64, i), ==, i + 1);
          if (isinf (want))
            g_assert_true (isinf (got) && got > 0);
          else
            /* The schedule computes lr as min + (max - min) * fraction:
             * the same number up to the last bit. */
            g_assert_cmpfloat (fabs (got - want), <=, fabs (want) * 1e-15);
        }
    }

  /* A second engine on the same folder appends, without a second header
   * (a resumed job). */
  g_clear_object (&e);
  e = engine_from_json (json, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_engine_report_scalar (e, "my/train loss", 0.5, &error));
  g_assert_no_error (error);
  {
    g_autofree gchar *path = g_build_filename (tmp, "out", "job1", "my_train_loss.csv", NULL);
    g_autoptr(GArray) steps = g_array_new (FALSE, FALSE, sizeof (guint64));
    g_autoptr(GArray) values = g_array_new (FALSE, FALSE, sizeof (gdouble));
    g_autofree gchar *header = read_csv (path, steps, values);

    g_assert_cmpstr (header, ==, "step,train loss");
    g_assert_cmpuint (steps->len, ==, G_N_ELEMENTS (pattern) + 1);
    g_assert_cmpfloat (g_array_index (values, gdouble, steps->len - 1), ==, 0.5);
  }
  g_clear_object (&e);
  remove_tree (tmp);
}

/* tensorboard: the event file exists from the start, named as
 * TensorBoard names it, and begins with a whole TFRecord frame. */
static void
test_tensorboard_file (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *tmp = g_dir_make_tmp ("mixprec-monitor-XXXXXX", &error);
  g_autofree gchar *json = NULL;
  g_autofree gchar *dir = NULL;
  g_autoptr(MixprecEngine) e = NULL;
  g_autoptr(GDir) d = NULL;
  const gchar *name;
  g_autofree gchar *path = NULL;
  g_autofree gchar *data = NULL;
  gsize len;
  guint64 payload = 0;

  g_assert_no_error (error);
  json = g_strdup_printf ("{\"tensorboard\": {\"enabled\": true, \"output_path\": \"%s\"}}", tmp);
  e = engine_from_json (json, &error);
  g_assert_no_error (error);
  /* DeepSpeed's default job_name. */
  dir = g_build_filename (tmp, "DeepSpeedJobName", NULL);
  d = g_dir_open (dir, 0, &error);
  g_assert_no_error (error);
  name = g_dir_read_name (d);
  g_assert_nonnull (name);
  g_assert_true (g_str_has_prefix (name, "events.out.tfevents."));
  g_assert_true (strstr (name, g_get_host_name ()) != NULL);
  path = g_build_filename (dir, name, NULL);
  g_assert_null (g_dir_read_name (d));

  g_assert_true (g_file_get_contents (path, &data, &len, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (len, >=, 16);
  for (guint i = 0; i < 8; i++)
    payload |= (guint64) (guint8) data[i] << (8 * i);
  g_assert_cmpuint (len, ==, 16 + payload);
  /* The payload ends with the format's name, field 3 (key 0x1a, length
   * 13): "brain.Event:2". */
  g_assert_cmpuint (payload, >, 15);
  g_assert_cmpmem (data + 12 + payload - 15, 15, "\032\015brain.Event:2", 15);
  g_clear_object (&e);
  remove_tree (tmp);
}

/* An output_path that cannot hold the folder fails the engine's creation,
 * naming the key and the path. */
static void
test_bad_output_path (void)
{
  const gchar *const sections[] = { "csv_monitor", "tensorboard" };
  g_autoptr(GError) error = NULL;
  g_autofree gchar *tmp = g_dir_make_tmp ("mixprec-monitor-XXXXXX", &error);
  g_autofree gchar *file = g_build_filename (tmp, "a-file", NULL);

  g_assert_no_error (error);
  g_assert_true (g_file_set_contents (file, "x", 1, &error));
  for (guint s = 0; s < G_N_ELEMENTS (sections); s++)
    {
      g_autoptr(GError) local = NULL;
      g_autofree gchar *json = g_strdup_printf ("{\"%s\": {\"enabled\": true, \"output_path\": "
                                                "\"%s\", \"job_name\": \"j\"}}", sections[s], file);
      g_autoptr(MixprecEngine) e = engine_from_json (json, &local);
      g_autofree gchar *key = g_strdup_printf ("%s.output_path: ", sections[s]);

      g_assert_null (e);
      g_assert_error (local, G_FILE_ERROR, G_FILE_ERROR_NOTDIR);
      g_assert_true (g_str_has_prefix (local->message, key));
      g_assert_nonnull (strstr (local->message, file));
    }
  /* Disabled, the same path is never touched. */
  {
    g_autofree gchar *json = g_strdup_printf ("{\"csv_monitor\": {\"enabled\": false, "
                                              "\"output_path\": \"%s\"}}", file);
    g_autoptr(MixprecEngine) e = engine_from_json (json, &error);

    g_assert_no_error (error);
    g_assert_nonnull (e);
  }
  remove_tree (tmp);
}

/* A full disk: report_scalar() fails with the file's error; in a step,
 * which itself succeeded, it is a warning and the monitors stop. */
static void
test_write_failure (void)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *tmp = NULL;
  g_autofree gchar *json = NULL;
  g_autofree gchar *dir = NULL;
  g_autofree gchar *link = NULL;
  g_autoptr(MixprecEngine) e = NULL;
  MixprecParam *p;

  if (!g_file_test ("/dev/full", G_FILE_TEST_EXISTS))
    {
      g_test_skip ("no /dev/full");
      return;
    }
  tmp = g_dir_make_tmp ("mixprec-monitor-XXXXXX", &error);
  g_assert_no_error (error);
  dir = g_build_filename (tmp, "job", NULL);
  g_assert_cmpint (g_mkdir (dir, 0700), ==, 0);
  link = g_build_filename (dir, "Train_Steps_loss_scale.csv", NULL);
  g_assert_cmpint (symlink ("/dev/full", link), ==, 0);
  json = g_strdup_printf ("{\"bf16\": {\"enabled\": true}, \"steps_per_print\": null,"
                          " \"csv_monitor\": {\"enabled\": true, \"output_path\": \"%s\","
                          " \"job_name\": \"job\"}}", tmp);
  e = engine_from_json (json, &error);
  g_assert_no_error (error);
  p = add_param (e);

  g_assert_false (mixprec_engine_report_scalar (e, "Train/Steps/loss_scale", 1.0, &error));
  g_assert_error (error, G_FILE_ERROR, G_FILE_ERROR_NOSPC);
  g_assert_nonnull (strstr (error->message, "Train/Steps/loss_scale"));
  g_clear_error (&error);

  g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING,
                         "step 1: csv_monitor: cannot write the tag \"Train/Steps/loss_scale\"*; "
                         "the monitors record nothing more");
  {
    g_autoptr(MixprecStepResult) r = scripted_step (e, p, FALSE);

    g_assert_true (r->applied);
  }
  g_test_assert_expected_messages ();
  /* Closed: later steps and reports write nothing and fail nothing. */
  {
    g_autoptr(MixprecStepResult) r G_GNUC_UNUSED = scripted_step (e, p, FALSE);
  }
  g_assert_true (mixprec_engine_report_scalar (e, "Train/Steps/loss_scale", 1.0, &error));
  g_assert_no_error (error);
  g_clear_object (&e);
  remove_tree (tmp);
}

/* The sections are read strictly, printed resolved, and wandb and comet
 * stay ignored with a warning. */
static void
test_config_sections (void)
{
  const struct { const gchar *json, *message; } bad[] = {
    { "{\"csv_monitor\": {\"enabled\": true, \"output\": \"x\"}}",
      "csv_monitor.output: unknown key in csv_monitor" },
    { "{\"tensorboard\": {\"enabled\": \"yes\"}}", "tensorboard.enabled: must be" },
    { "{\"tensorboard\": {\"output_path\": 3}}", "tensorboard.output_path: must be a string" },
    { "{\"csv_monitor\": {\"job_name\": [\"a\"]}}", "csv_monitor.job_name: must be a string" },
    { "{\"csv_monitor\": true}", "csv_monitor: must be a JSON object" },
    { "{\"steps_per_print\": 0}", "steps_per_print: must be a positive integer" },
    { "{\"steps_per_print\": 2.5}", "steps_per_print: must be a positive integer" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (bad[i].json, -1, &error);

      g_test_message ("%s", bad[i].json);
      g_assert_null (c);
      g_assert_nonnull (error);
      g_assert_nonnull (strstr (error->message, bad[i].message));
    }

  {
    g_autoptr(GError) error = NULL;
    g_autoptr(MixprecConfig) c = mixprec_config_new_from_data (
      "{\"steps_per_print\": 50, \"tensorboard\": {\"enabled\": true, \"job_name\": \"run\"},"
      " \"wandb\": {\"enabled\": true}, \"comet\": {\"enabled\": true}}", -1, &error);
    g_autofree gchar *text = NULL;
    g_autoptr(JsonNode) root = NULL;
    JsonObject *o, *tb, *csv;
    const gchar *const *warnings;
    guint n_ignored = 0;

    g_assert_no_error (error);
    warnings = (const gchar *const *) mixprec_config_get_warnings (c);
    for (guint i = 0; warnings != NULL && warnings[i] != NULL; i++)
      {
        g_assert_false (g_str_has_prefix (warnings[i], "tensorboard"));
        g_assert_false (g_str_has_prefix (warnings[i], "steps_per_print"));
        if (g_str_has_prefix (warnings[i], "wandb: ") || g_str_has_prefix (warnings[i], "comet: "))
          n_ignored++;
      }
    g_assert_cmpuint (n_ignored, ==, 2);

    text = mixprec_config_to_data (c, NULL);
    root = json_from_string (text, &error);
    g_assert_no_error (error);
    o = json_node_get_object (root);
    g_assert_cmpint (json_object_get_int_member (o, "steps_per_print"), ==, 50);
    tb = json_object_get_object_member (o, "tensorboard");
    g_assert_true (json_object_get_boolean_member (tb, "enabled"));
    g_assert_cmpstr (json_object_get_string_member (tb, "output_path"), ==, "");
    g_assert_cmpstr (json_object_get_string_member (tb, "job_name"), ==, "run");
    /* DeepSpeed's defaults fill the absent section. */
    csv = json_object_get_object_member (o, "csv_monitor");
    g_assert_false (json_object_get_boolean_member (csv, "enabled"));
    g_assert_cmpstr (json_object_get_string_member (csv, "job_name"), ==, "DeepSpeedJobName");
    g_assert_false (json_object_has_member (o, "wandb"));
  }
  {
    g_autoptr(GError) error = NULL;
    g_autoptr(MixprecConfig) c = mixprec_config_new_from_data ("{\"steps_per_print\": null}", -1,
                                                               &error);
    g_autofree gchar *text = NULL;
    g_autoptr(JsonNode) root = NULL;

    g_assert_no_error (error);
    text = mixprec_config_to_data (c, NULL);
    root = json_from_string (text, &error);
    g_assert_no_error (error);
    g_assert_true (json_object_get_null_member (json_node_get_object (root), "steps_per_print"));
  }
}

static void
test_report_scalar_bad_tag (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecEngine) e = engine_from_json ("{}", &error);

  g_assert_no_error (error);
  g_assert_false (mixprec_engine_report_scalar (e, "", 1.0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  g_assert_false (mixprec_engine_report_scalar (e, "a\nb", 1.0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "a\\nb"));
  g_clear_error (&error);
  g_assert_false (mixprec_engine_report_scalar (e, "\xff", 1.0, &error));
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* Without monitors a good tag records nothing and succeeds. */
  g_assert_true (mixprec_engine_report_scalar (e, "loss", 1.0, &error));
  g_assert_no_error (error);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  /* The per-step debug lines are formatted only when debug messages are
   * on (G_MESSAGES_DEBUG, or this). */
  g_log_set_debug_enabled (TRUE);
  g_log_set_writer_func (capture_writer, NULL, NULL);
  g_test_add_func ("/monitor/crc32c", test_crc32c);
  g_test_add_func ("/monitor/log/messages", test_log_messages);
  g_test_add_func ("/monitor/log/steps-per-print", test_log_steps_per_print);
  g_test_add_func ("/monitor/csv", test_csv_monitor);
  g_test_add_func ("/monitor/tensorboard/file", test_tensorboard_file);
  g_test_add_func ("/monitor/bad-output-path", test_bad_output_path);
  g_test_add_func ("/monitor/write-failure", test_write_failure);
  g_test_add_func ("/monitor/config", test_config_sections);
  g_test_add_func ("/monitor/report-scalar/bad-tag", test_report_scalar_bad_tag);
  return g_test_run ();
}
