/* mixprec-engine-loco.c — LoCo, the error feedback of ZeRO++'s quantized
 * gradients (zero_optimization.zeropp_loco_param): each rank's float16
 * error per element it sends (its contributions, in the flat padded
 * layout, so for every rank's slice). The quantizer
 * (_mixprec_zeropp_qgz_quantize(), called by mixprec-engine-zeropp.c)
 * adds it to the gradient and leaves in it what the codes miss; the step
 * rescales or zeroes it; checkpoints keep it per rank. */
#include "config.h"

#include <string.h>

#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-config-private.h"
#include "mixprec-checkpoint-private.h"
#include "numeric/numeric-dtype.h"

gboolean
_mixprec_engine_loco_layout (MixprecEngine *self,
                             Group         *g,
                             GError       **error)
{
  gdouble beta;

  if (!_mixprec_config_get_zeropp_loco (self->config, &beta, &g->zeropp.loco_reset_t))
    return TRUE;
  g->zeropp.loco_beta = (gfloat) beta;
  g->zeropp.loco_steps = 0;
  g->zeropp.loco_err = _mixprec_engine_alloc (self, NULL, g->padded, sizeof (guint16),
                                              BUF_STAGING, error);
  if (g->zeropp.loco_err == NULL)
    return FALSE;
  memset (g->zeropp.loco_err, 0, g->padded * sizeof (guint16));
  return TRUE;
}

static void
loco_zero (Group *g)
{
  memset (g->zeropp.loco_err, 0, g->padded * sizeof (guint16));
  g->zeropp.loco_steps = 0;
}

void
_mixprec_engine_zeropp_after_scaler (MixprecEngine *self,
                                     gboolean       overflow,
                                     gboolean       applied,
                                     gdouble        prev_scale,
                                     gdouble        scale)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      if (g->zeropp.loco_err == NULL)
        continue;
      /* As DeepSpeed's _loco_err_buf_update: an overflow drops the
       * errors, a new loss scale rescales them. */
      if (overflow)
        {
          loco_zero (g);
          continue;
        }
      if (scale != prev_scale)
        {
          gfloat ratio = (gfloat) (scale / prev_scale);

          for (guint64 i = 0; i < g->padded; i++)
            g->zeropp.loco_err[i] = _mixprec_f32_to_f16_rne (_mixprec_f16_to_f32 (g->zeropp.loco_err[i]) * ratio);
        }
      if (applied && ++g->zeropp.loco_steps >= g->zeropp.loco_reset_t)
        loco_zero (g);
    }
}

void
_mixprec_engine_zeropp_free_group (MixprecEngine *self,
                                   Group         *g)
{
  _mixprec_engine_free (self, NULL, g_steal_pointer (&g->zeropp.loco_err));
}

/* The shard's names for a group's LoCo errors and their step count. */
static gchar *
loco_tensor_name (guint group)
{
  return g_strdup_printf ("zeropp/loco_error/%u", group);
}

static gchar *
loco_steps_key (guint group)
{
  return g_strdup_printf ("zeropp/loco_steps/%u", group);
}

gboolean
_mixprec_engine_zeropp_loco_buffer (MixprecEngine   *self,
                                    guint            index,
                                    guint           *group,
                                    const guint16  **err,
                                    guint64         *n,
                                    guint64         *steps)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      if (g->zeropp.loco_err == NULL || index-- > 0)
        continue;
      *group = j;
      *err = g->zeropp.loco_err;
      *n = g->padded;
      *steps = g->zeropp.loco_steps;
      return TRUE;
    }
  return FALSE;
}

gboolean
_mixprec_engine_zeropp_restore_loco (MixprecEngine     *self,
                                     MixprecCheckpoint *ckpt,
                                     GError           **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  _MixprecSafetensors *st = NULL;

  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      g_autofree gchar *name = loco_tensor_name (j);
      g_autofree gchar *key = loco_steps_key (j);
      const _MixprecSafetensorsTensor *t = NULL;
      const gchar *steps;

      if (g->zeropp.loco_err == NULL)
        continue;
      loco_zero (g);
      /* Errors are this rank's own contributions in this world's layout:
       * another world size starts them afresh. */
      if (m->world_size != self->world)
        continue;
      if (st == NULL && (st = _mixprec_checkpoint_get_rank_shard (ckpt, self->rank, error)) == NULL)
        return FALSE;
      t = _mixprec_safetensors_lookup (st, name);
      steps = _mixprec_safetensors_get_metadata (st, key);
      if (t == NULL)
        continue;           /* saved without LoCo */
      if (g_strcmp0 (t->dtype, "F16") != 0 || t->n_dims != 1 || t->shape[0] != g->padded ||
          steps == NULL)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                       "%s: tensor '%s' is not %" G_GUINT64_FORMAT " F16 LoCo errors with "
                       "their step count ('%s' metadata) as this engine keeps for its "
                       "parameter group %u", _mixprec_safetensors_get_path (st), name,
                       g->padded, key, j);
          return FALSE;
        }
      if (!_mixprec_safetensors_read_bytes (st, t, 0, g->padded * 2, (guint8 *) g->zeropp.loco_err,
                                            error))
        return FALSE;
      for (guint64 i = 0; i < g->padded; i++)
        g->zeropp.loco_err[i] = GUINT16_FROM_LE (g->zeropp.loco_err[i]);
      g->zeropp.loco_steps = g_ascii_strtoull (steps, NULL, 10);
    }
  return TRUE;
}
