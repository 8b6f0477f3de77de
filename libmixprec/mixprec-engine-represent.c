/* mixprec-engine-represent.c — how the optimizer keeps what it updates:
 * the master format and each state slot's format, resolved from the
 * config against the optimizer, and where the block scales of the scaled
 * formats live. Blocks start at element 0 of every unit, so they are the
 * same at every world size and ZeRO stage. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-registry-private.h"

/* The config's enums follow the plugin ABI's numbering. */
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_FP32 == (gint) MIXPREC_PLUGIN_STATE_FLOAT32);
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_BF16 == (gint) MIXPREC_PLUGIN_STATE_BFLOAT16);
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_FP16_SCALED == (gint) MIXPREC_PLUGIN_STATE_FLOAT16_SCALED);
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_BF16_SCALED == (gint) MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED);
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_FP8_E4M3_SCALED == (gint) MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED);
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_INT8 == (gint) MIXPREC_PLUGIN_STATE_INT8_DYNAMIC);
G_STATIC_ASSERT ((gint) MIXPREC_STATE_FORMAT_INT4 == (gint) MIXPREC_PLUGIN_STATE_INT4_DYNAMIC);

/* The block sizes the widely used 8-bit and 4-bit optimizers use. */
#define DEFAULT_BLOCK 256
#define DEFAULT_BLOCK_INT4 128

gboolean
_mixprec_engine_format_is_scaled (MixprecPluginStateFormat format)
{
  return format >= MIXPREC_PLUGIN_STATE_FLOAT16_SCALED;
}

MixprecDType
_mixprec_engine_format_dtype (MixprecPluginStateFormat format)
{
  switch (format)
    {
    case MIXPREC_PLUGIN_STATE_FLOAT32:
      return MIXPREC_DTYPE_FLOAT32;
    case MIXPREC_PLUGIN_STATE_BFLOAT16:
    case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
      return MIXPREC_DTYPE_BFLOAT16;
    case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
      return MIXPREC_DTYPE_FLOAT16;
    case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
      return MIXPREC_DTYPE_FLOAT8_E4M3;
    case MIXPREC_PLUGIN_STATE_INT8_DYNAMIC:
    case MIXPREC_PLUGIN_STATE_INT4_DYNAMIC:
    default:
      /* Bytes of codes: addressed as uint8 (INT4 by halves). */
      return MIXPREC_DTYPE_FLOAT8_E4M3;
    }
}

guint64
_mixprec_engine_format_bytes (MixprecPluginStateFormat format,
                              guint64                  n)
{
  if (format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC)
    return (n + 1) / 2;
  return n * mixprec_dtype_get_size (_mixprec_engine_format_dtype (format));
}

MixprecPluginMasterFormat
_mixprec_engine_master_format (const _MixprecRepresentation *repr,
                               const _MixprecParamDTypes    *dt)
{
  if (dt->working == MIXPREC_DTYPE_BFLOAT16 && !dt->has_master)
    return repr->master;
  return MIXPREC_PLUGIN_MASTER_FLOAT32;
}

gboolean
_mixprec_engine_resolve_representation (MixprecEngine *self,
                                        GError       **error)
{
  _MixprecRepresentation *r = &self->repr;
  const gchar * const *names = mixprec_feature_get_state_names (self->optimizer);
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  MixprecMasterWeights mw = mixprec_config_get_master_weights (self->config);
  gboolean scaled = FALSE, int4 = FALSE;
  guint block = mixprec_config_get_optimizer_state_block_size (self->config);
  g_autoptr(GError) local = NULL;
  const gchar *key = NULL;

  memset (r, 0, sizeof *r);
  if (n_slots > G_N_ELEMENTS (r->slots))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_OPTIMIZER,
                   "optimizer '%s' has %u state slots; the engine keeps at most %u",
                   mixprec_feature_get_name (self->optimizer), n_slots,
                   (guint) G_N_ELEMENTS (r->slots));
      return FALSE;
    }
  for (guint k = 0; k < n_slots; k++)
    {
      r->slots[k] = (MixprecPluginStateFormat)
        mixprec_config_get_optimizer_state_format (self->config, names != NULL ? names[k] : NULL);
      scaled = scaled || _mixprec_engine_format_is_scaled (r->slots[k]);
      int4 = int4 || r->slots[k] == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC;
    }
  r->master = mw == MIXPREC_MASTER_WEIGHTS_REMAINDER ? MIXPREC_PLUGIN_MASTER_REMAINDER
              : mw == MIXPREC_MASTER_WEIGHTS_KAHAN ? MIXPREC_PLUGIN_MASTER_KAHAN
              : MIXPREC_PLUGIN_MASTER_FLOAT32;
  if (scaled)
    r->block_size = block != 0 ? block : int4 ? DEFAULT_BLOCK_INT4 : DEFAULT_BLOCK;
  /* The master alone first, so the message names the key at fault. */
  if (!_mixprec_feature_check_representation (self->optimizer, r->master, NULL, n_slots, &local))
    key = "mixprec.master_weights";
  else if (!_mixprec_feature_check_representation (self->optimizer, r->master, r->slots, n_slots, &local))
    key = "mixprec.optimizer_states";
  if (key != NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_OPTIMIZER,
                   "%s: %s", key, local->message);
      return FALSE;
    }
  return TRUE;
}

guint64
_mixprec_engine_units_scales (GArray  *units,
                              guint    world,
                              gboolean state_local,
                              guint    block_size)
{
  guint64 n = 0;

  for (guint k = 0; k < units->len; k++)
    {
      Unit *u = &g_array_index (units, Unit, k);

      if (block_size == 0)
        u->repr.scales = 0;
      else if (world == 1)
        {
          /* Units are not padded: each unit's blocks follow the last
           * (possibly short) block of the one before. */
          u->repr.scales = n;
          n += (u->numel + block_size - 1) / block_size;
        }
      else
        {
          /* Slices and padded units are multiples of 4096 elements, so the
           * blocks tile them exactly. */
          u->repr.scales = (state_local ? u->local : u->flat) / block_size;
          n += (state_local ? u->padded / world : u->padded) / block_size;
        }
    }
  return n;
}

guint64
_mixprec_engine_scale_at (MixprecEngine *self,
                          Group         *g,
                          const Unit    *u,
                          guint64        e)
{
  guint64 first = g->state_local ? self->rank * UNIT_SLICE (self, u) : 0;
  guint b = self->repr.block_size;

  g_return_val_if_fail (b > 0 && e >= first, 0);
  return u->repr.scales + (e - first) / b;
}

guint64
_mixprec_engine_n_scales (MixprecEngine *self,
                          Group         *g)
{
  guint64 n = 0;

  if (self->repr.block_size == 0 || g->units == NULL || g->units->len == 0)
    return 0;
  if (self->world > 1)
    return (g->state_local ? g->local_n : g->padded) / self->repr.block_size;
  for (guint k = 0; k < g->units->len; k++)
    n += (g_array_index (g->units, Unit, k).numel + self->repr.block_size - 1) / self->repr.block_size;
  return n;
}

guint64
_mixprec_engine_state_index (MixprecEngine *self,
                             Group         *g,
                             const Unit    *u,
                             guint64        e,
                             guint          slot)
{
  guint b = self->repr.block_size;
  gfloat *m;
  gpointer w;
  guint64 state_at;

  if (_mixprec_engine_format_is_scaled (self->repr.slots[slot]))
    return _mixprec_engine_scale_at (self, g, u, e - e % b) * b + e % b;
  _mixprec_engine_values_at (self, g, u, e, &m, &state_at, &w);
  return state_at;
}

void
_mixprec_engine_shape_represent (GroupShape                   *shape,
                                 const _MixprecRepresentation *repr,
                                 const _MixprecParamDTypes    *dt,
                                 GArray                       *units,
                                 guint                         world,
                                 guint                         stage)
{
  shape->master_format = _mixprec_engine_master_format (repr, dt);
  /* The remainders or compensations take the place of the masters. */
  shape->master_extra = shape->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 ? shape->state : 0;
  shape->scales = _mixprec_engine_units_scales (units, world, stage >= 1, repr->block_size);
}
