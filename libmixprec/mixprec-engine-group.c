/* mixprec-engine-group.c — a group's life: made from the parameters that
 * share their dtypes and optimizer settings, laid out, each phase's part
 * set up beside the layout, and freed part by part. The layout and the
 * parts do not call each other; this file puts them together. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-engine-autoprec-private.h"

static gboolean
same_group (const Group *g, MixprecParam *p)
{
  return g->external == _mixprec_param_is_external (p) &&
         g->dtypes.working == mixprec_param_get_working_dtype (p) &&
         g->dtypes.accum == mixprec_param_get_accum_dtype (p) &&
         g->dtypes.comm == mixprec_param_get_comm_dtype (p) &&
         g->dtypes.has_master == mixprec_param_has_master (p) &&
         g->weight_decay_multiplier == mixprec_param_get_weight_decay_multiplier (p) &&
         _mixprec_engine_fp8_same_group (g, p);
}

/* @g laid out, then the parts the phases keep beside the layout. */
static gboolean
setup_group (MixprecEngine *self,
             Group         *g,
             GError       **error)
{
  GroupShape shape;

  return _mixprec_engine_layout_group (self, g, &shape, error) &&
         _mixprec_engine_intake_layout (self, g, shape.n_slots, error) &&
         _mixprec_engine_norm_layout (self, g, shape.norm_blocks, error) &&
         (!self->offload || _mixprec_engine_offload_layout (self, g, &shape, error)) &&
         _mixprec_engine_fp8_layout (self, g, error);
}

void
_mixprec_engine_group_free (MixprecEngine *self,
                            Group         *g)
{
  /* The parts first: nothing may run on over the layout's buffers. */
  _mixprec_engine_intake_clear (self, g);
  _mixprec_engine_zero3_clear (self, g);
  _mixprec_engine_hpz_free_group (self, g);
  _mixprec_engine_offload_free_group (self, g);
  _mixprec_engine_norm_free (self, g);
  _mixprec_engine_fp8_free_group (self, g);
  _mixprec_engine_zeropp_free_group (self, g);
  _mixprec_engine_drop_mirrors (g);
  _mixprec_engine_layout_free (self, g);
}

gboolean
_mixprec_engine_ensure_prepared (gpointer  engine,
                                 GError  **error)
{
  return mixprec_engine_prepare (MIXPREC_ENGINE (engine), error);
}

/**
 * mixprec_engine_prepare:
 * @self: a #MixprecEngine
 * @error: return location for a #GError
 *
 * Lays out the buffers of every registered parameter: contiguous groups of
 * parameters that share their dtypes and optimizer settings, each with its
 * working copies, gradients, FP32 masters, accumulation buffer and
 * optimizer state, partitioned across ranks as the ZeRO stage says (see
 * mixprec_engine_list_buffers()). Called implicitly by the first buffer
 * access, mixprec_engine_backward_done() or mixprec_engine_step(); calling
 * it explicitly reports allocation failures where they happen. Afterwards
 * no more parameters can be registered. Every rank must register the same
 * parameters in the same order.
 *
 * Returns: %TRUE on success (also when already prepared)
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_prepare (MixprecEngine *self,
                        GError       **error)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);

  if (self->prepared)
    return TRUE;
  if (!_mixprec_engine_autoprec_check (self, error))
    return FALSE;

  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      Group *g = NULL;

      for (guint j = 0; j < self->groups->len && g == NULL; j++)
        if (same_group (g_ptr_array_index (self->groups, j), p))
          g = g_ptr_array_index (self->groups, j);
      if (g == NULL)
        {
          g = _mixprec_engine_group_new (self, p);
          _mixprec_engine_fp8_init_group (g, p);
          g_ptr_array_add (self->groups, g);
        }
      _mixprec_engine_group_add_param (g, p);
    }

  memset (self->buf_plan, 0, sizeof self->buf_plan);
  for (guint j = 0; j < self->groups->len; j++)
    if (!setup_group (self, g_ptr_array_index (self->groups, j), error))
      {
        g_ptr_array_set_size (self->groups, 0);
        return FALSE;
      }
  self->prepared = TRUE;
  /* Every rank casts whole parameters from the initial values: no
   * collective (see _mixprec_engine_fp8_write()). */
  if (!_mixprec_engine_fp8_write_initial (self, error))
    {
      self->prepared = FALSE;
      g_ptr_array_set_size (self->groups, 0);
      return FALSE;
    }
  g_hash_table_remove_all (self->init_values);
  return TRUE;
}
