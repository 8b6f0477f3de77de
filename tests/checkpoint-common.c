/* checkpoint-common.c — the model, training loop and snapshots the
 * checkpoint tests share. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <glib/gstdio.h>

#include "checkpoint-common.h"

#define COMMON_JSON \
  "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}}," \
  " \"scheduler\": {\"type\": \"WarmupCosineLR\"," \
  "                 \"params\": {\"total_num_steps\": 40, \"warmup_num_steps\": 4}}," \
  " \"gradient_clipping\": 1.0"

const CkptMode ckpt_modes[6] = {
  { "fp32", "{" COMMON_JSON "}", FALSE },
  { "fp16",
    "{\"fp16\": {\"enabled\": true, \"initial_scale_power\": 10, \"loss_scale_window\": 3,"
    "            \"hysteresis\": 1}, " COMMON_JSON "}", TRUE },
  { "bf16",
    "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"]}, "
    COMMON_JSON "}", FALSE },
  { "bf16-no-master",
    "{\"bf16\": {\"enabled\": true, \"bf16_master_weights_and_grads\": true},"
    " \"mixprec\": {\"stochastic_rounding\": true, \"seed\": 77}, " COMMON_JSON "}", FALSE },
  /* Masters and stochastically rounded working copies: a resume must
   * round the restored masters with the last step's random bits. */
  { "bf16-sr",
    "{\"bf16\": {\"enabled\": true}, \"mixprec\": {\"stochastic_rounding\": true, \"seed\": 5}, "
    COMMON_JSON "}", FALSE },
  /* fp16 weights and no master: the scaler and the fp16 weights are the
   * whole state besides the optimizer's. */
  { "fp16-no-master",
    "{\"fp16\": {\"enabled\": true, \"fp16_master_weights_and_grads\": true,"
    "            \"initial_scale_power\": 10, \"loss_scale_window\": 3, \"hysteresis\": 1}, "
    COMMON_JSON "}", TRUE },
};

static const struct
{
  const gchar *name;
  guint64 shape[2];
  guint n_dims;
  const gchar *module_type;
} model[] = {
  { "embed.weight", { 23, 8 }, 2, "Embedding" },
  { "blocks.0.attn.weight", { 8, 8 }, 2, "Linear" },
  { "blocks.0.attn.bias", { 8, 0 }, 1, "Linear" },
  { "blocks.0.ln.weight", { 8, 0 }, 1, "LayerNorm" },
  { "head.weight", { 3, 8 }, 2, "Linear" },
};

MixprecEngine *
ckpt_engine_new (const gchar *json)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  MixprecEngine *engine;

  g_assert_no_error (error);
  engine = mixprec_engine_new (config, &error);
  g_assert_no_error (error);
  return engine;
}

static void
register_one (MixprecEngine *engine,
              const gchar   *name,
              const guint64 *shape,
              guint          n_dims,
              const gchar   *module_type,
              guint          index,
              guint          variant)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) init = NULL;
  guint64 numel = 1;
  gfloat *values;

  for (guint d = 0; d < n_dims; d++)
    numel *= shape[d];
  values = g_new (gfloat, numel);
  for (guint64 i = 0; i < numel; i++)
    values[i] = 0.1f * cosf (0.11f * (gfloat) i + 0.9f * (gfloat) variant + (gfloat) index);
  init = g_bytes_new_take (values, numel * sizeof (gfloat));
  g_assert_nonnull (mixprec_engine_register_param (engine, name, shape, n_dims, module_type,
                                                   MIXPREC_DTYPE_FLOAT32, init, &error));
  g_assert_no_error (error);
}

void
ckpt_build_model (MixprecEngine *engine,
                  guint          variant,
                  guint64        extra_numel)
{
  for (guint k = 0; k < G_N_ELEMENTS (model); k++)
    register_one (engine, model[k].name, model[k].shape, model[k].n_dims, model[k].module_type,
                  k, variant);
  if (extra_numel > 0)
    register_one (engine, "big.weight", &extra_numel, 1, "Linear", G_N_ELEMENTS (model), variant);
}

void
ckpt_train (MixprecEngine *engine,
            guint64        first,
            guint          n,
            gboolean       overflows)
{
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (engine);

  for (guint64 step = first; step < first + n; step++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecStepResult) result = NULL;
      gdouble scale = mixprec_engine_get_loss_scale (engine);

      for (guint k = 0; k < params->len; k++)
        {
          MixprecParam *p = g_ptr_array_index (params, k);
          guint64 numel = mixprec_param_get_numel (p);
          gfloat *g = g_new (gfloat, numel);
          g_autoptr(GBytes) bytes = NULL;

          for (guint64 i = 0; i < numel; i++)
            g[i] = (gfloat) (sin (0.37 * (gdouble) (i % 1000) + 1.3 * (gdouble) step + 0.7 * k) *
                             (0.5 + 0.1 * k) * scale);
          if (overflows && (step == 2 || step == 7) && k == 1)
            g[numel / 2] = INFINITY;
          bytes = g_bytes_new_take (g, numel * sizeof (gfloat));
          g_assert_true (mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, bytes, &error));
          g_assert_no_error (error);
        }
      g_assert_true (mixprec_engine_backward_done (engine, &error));
      g_assert_no_error (error);
      result = mixprec_engine_step (engine, &error);
      g_assert_no_error (error);
      g_assert_cmpuint (result->step, ==, step + 1);
    }
}

static void
add_double (GPtrArray *out,
            gdouble    value)
{
  g_ptr_array_add (out, g_bytes_new (&value, sizeof value));
}

GPtrArray *
ckpt_snapshot (MixprecEngine *engine)
{
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (engine);
  g_auto(GStrv) slots = mixprec_engine_get_optimizer_state_names (engine);
  g_autoptr(GVariant) scaler = mixprec_loss_scaler_save_state (mixprec_engine_get_loss_scaler (engine));
  g_autofree gchar *scaler_text = g_variant_print (scaler, TRUE);

  for (guint k = 0; k < params->len; k++)
    {
      MixprecParam *p = g_ptr_array_index (params, k);
      g_autoptr(GError) error = NULL;

      if (mixprec_param_has_master (p))
        {
          g_ptr_array_add (out, mixprec_param_get_master (p, &error));
          g_assert_no_error (error);
        }
      g_ptr_array_add (out, mixprec_param_get_working (p, mixprec_param_get_working_dtype (p), &error));
      g_assert_no_error (error);
      for (guint s = 0; slots[s] != NULL; s++)
        {
          g_ptr_array_add (out, mixprec_engine_get_optimizer_state (engine, mixprec_param_get_name (p),
                                                                    slots[s], &error));
          g_assert_no_error (error);
        }
    }
  add_double (out, mixprec_engine_get_loss_scale (engine));
  add_double (out, mixprec_engine_get_lr (engine));
  g_ptr_array_add (out, g_bytes_new (scaler_text, strlen (scaler_text)));
  return out;
}

GPtrArray *
ckpt_weights (MixprecEngine *engine)
{
  GPtrArray *out = g_ptr_array_new_with_free_func ((GDestroyNotify) g_bytes_unref);
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (engine);

  for (guint k = 0; k < params->len; k++)
    {
      MixprecParam *p = g_ptr_array_index (params, k);
      g_autoptr(GError) error = NULL;

      if (mixprec_param_has_master (p))
        g_ptr_array_add (out, mixprec_param_get_master (p, &error));
      else
        g_ptr_array_add (out, mixprec_param_get_working (p, MIXPREC_DTYPE_FLOAT32, &error));
      g_assert_no_error (error);
    }
  return out;
}

gboolean
ckpt_same (GPtrArray *a,
           GPtrArray *b)
{
  if (a->len != b->len)
    return FALSE;
  for (guint i = 0; i < a->len; i++)
    if (!g_bytes_equal (g_ptr_array_index (a, i), g_ptr_array_index (b, i)))
      return FALSE;
  return TRUE;
}

void
ckpt_assert_same (GPtrArray *a,
                  GPtrArray *b)
{
  g_assert_cmpuint (a->len, ==, b->len);
  for (guint i = 0; i < a->len; i++)
    {
      GBytes *x = g_ptr_array_index (a, i);
      GBytes *y = g_ptr_array_index (b, i);
      gsize nx, ny;
      const guint8 *px = g_bytes_get_data (x, &nx);
      const guint8 *py = g_bytes_get_data (y, &ny);

      g_assert_cmpuint (nx, ==, ny);
      if (nx > 0 && memcmp (px, py, nx) != 0)
        {
          gsize at = 0;

          while (px[at] == py[at])
            at++;
          g_error ("snapshot item %u differs at byte %" G_GSIZE_FORMAT, i, at);
        }
    }
}

gchar *
ckpt_make_tmpdir (void)
{
  g_autoptr(GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("mixprec-ckpt-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

void
ckpt_remove_tree (const gchar *path)
{
  g_autoptr(GDir) d = NULL;
  const gchar *name;

  if (g_file_test (path, G_FILE_TEST_IS_SYMLINK) || !g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_remove (path);
      return;
    }
  d = g_dir_open (path, 0, NULL);
  while (d != NULL && (name = g_dir_read_name (d)) != NULL)
    {
      g_autofree gchar *child = g_build_filename (path, name, NULL);

      ckpt_remove_tree (child);
    }
  g_rmdir (path);
}
