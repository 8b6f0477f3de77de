/* engine-ranks-common.c — rank children's reports and the parent's
 * comparison, shared by the ZeRO tests of the working copies. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <glib/gstdio.h>

#include "engine-ranks-common.h"
#include "multiproc.h"

guint64
er_padded_numel (guint64 numel, guint world)
{
  guint64 align = (guint64) world * 4096;   /* the sum-of-squares block is 4096 */

  return (numel + align - 1) / align * align;
}

static gfloat
grad_value (guint step, guint m, guint p, guint64 i)
{
  return (gfloat) (sin (0.37 * m + 0.011 * (gdouble) i + 1.3 * step + p) *
                   exp2 ((gdouble) ((i * 7 + m) % 9) - 4.0));
}

gboolean
er_step (MixprecEngine *engine, guint step, guint rank, guint world, guint gas, GError **error)
{
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (engine);
  g_autoptr(MixprecStepResult) r = NULL;

  for (guint local = 0; local < gas; local++)
    {
      guint m = local * world + rank;

      for (guint p = 0; p < params->len; p++)
        {
          MixprecParam *param = params->pdata[p];
          guint64 numel = mixprec_param_get_numel (param);
          gfloat *g = g_new (gfloat, numel);
          g_autoptr(GBytes) bytes = NULL;

          for (guint64 i = 0; i < numel; i++)
            g[i] = grad_value (step, m, p, i);
          bytes = g_bytes_new_take (g, numel * sizeof (gfloat));
          if (!mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, bytes, error))
            return FALSE;
        }
      if (!mixprec_engine_backward_done (engine, error))
        return FALSE;
    }
  r = mixprec_engine_step (engine, error);
  return r != NULL;
}

gboolean
er_parse_scenario (const gchar *text, const gchar **tag, guint *stage, guint *world, guint *steps)
{
  g_auto(GStrv) f = g_strsplit (text, ":", -1);

  if (g_strv_length (f) != 4)
    return FALSE;
  *tag = g_intern_string (f[0]);
  *stage = atoi (f[1]);
  *world = atoi (f[2]);
  *steps = atoi (f[3]);
  return TRUE;
}

static guint64
buffer_bytes (GPtrArray *buffers, const gchar *name, gboolean planned)
{
  for (guint i = 0; i < buffers->len; i++)
    {
      MixprecMemoryBuffer *b = buffers->pdata[i];

      if (g_str_equal (b->name, name))
        return planned ? b->planned_bytes : b->bytes;
    }
  return 0;
}

gboolean
er_buffers_match_plan (MixprecEngine *engine, const guint64 *sizes, guint n_sizes, guint world,
                       const gchar * const *names, guint n_names, guint n_required)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GPtrArray) held = mixprec_engine_list_buffers (engine);
  g_autoptr(GPtrArray) plan = NULL;

  plan = mixprec_memory_plan_list_buffers (mixprec_engine_get_config (engine), sizes, n_sizes, world, 0,
                                           &error);
  if (plan == NULL)
    return FALSE;
  for (guint n = 0; n < n_names; n++)
    {
      guint64 a = buffer_bytes (held, names[n], FALSE);
      guint64 b = buffer_bytes (plan, names[n], TRUE);

      if (a != b || (n < n_required && a == 0))
        {
          g_printerr ("%s: the engine holds %" G_GUINT64_FORMAT " bytes, the plan says %"
                      G_GUINT64_FORMAT "\n", names[n], a, b);
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
er_write_rank_result (const gchar *out, guint rank, guint64 gathered, GByteArray *snapshot, GError **error)
{
  g_autofree gchar *bytes_text = g_strdup_printf ("%" G_GUINT64_FORMAT, gathered);
  g_autofree gchar *bytes_file = g_strdup_printf ("%s.gathered%u", out, rank);

  if (!g_file_set_contents (bytes_file, bytes_text, -1, error))
    return FALSE;
  return rank != 0 || g_file_set_contents (out, (const gchar *) snapshot->data, snapshot->len, error);
}

void
er_run_ranks (const gchar *child_var, const gchar *scenario, guint world, guint timeout_ms,
              GByteArray *expected, guint64 *gathered)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-engine-ranks-XXXXXX", &error);
  g_autofree gchar *out = g_build_filename (dir, "snapshot", NULL);
  g_autofree gchar *child = g_strdup_printf ("%s=1", child_var);
  g_autofree gchar *scenario_var = g_strdup_printf ("MIXPREC_TEST_SCENARIO=%s", scenario);
  g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
  const gchar *env[] = { child, scenario_var, out_var, NULL };
  g_autofree gchar *got = NULL;
  g_autofree gint *status = g_new0 (gint, world);
  gsize got_len = 0;

  g_assert_no_error (error);
  mp_run_ranks (world, timeout_ms, env, status);
  for (guint r = 0; r < world; r++)
    g_assert_cmpint (status[r], ==, 0);
  g_assert_true (g_file_get_contents (out, &got, &got_len, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (got_len, ==, expected->len);
  g_assert_true (memcmp (got, expected->data, got_len) == 0);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s.gathered%u", out, r);
      g_autofree gchar *text = NULL;

      g_assert_true (g_file_get_contents (file, &text, NULL, &error));
      g_assert_no_error (error);
      gathered[r] = g_ascii_strtoull (text, NULL, 10);
      g_remove (file);
    }
  g_remove (out);
  g_rmdir (dir);
}
