/* mixprec-engine-layout-view.c — the engine's layout as a MixprecLayout:
 * read from a running engine's groups and units, or planned for a model
 * with the same code that lays an engine out (_mixprec_engine_make_units_full()
 * and _mixprec_engine_group_shape()). The only file outside the engine's
 * own that reads its internals for the public description. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-layout-private.h"

/* Adds @units (of a group whose parameters are numbered @numbers and
 * sized @sizes, group order) to @layout as group @group. @offsets: where
 * a running engine placed each parameter (NULL: packed in its unit). */
static void
add_units (MixprecLayout *layout,
           guint          group,
           GArray        *units,
           const guint   *numbers,
           const guint64 *sizes,
           const guint64 *offsets)
{
  for (guint k = 0; k < units->len; k++)
    {
      const Unit *u = &g_array_index (units, Unit, k);
      guint64 flat = u->flat;

      _mixprec_layout_add_unit (layout, group, u->flat, u->numel, u->padded, u->persistent);
      for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
        {
          _mixprec_layout_add_param (layout, group, numbers != NULL ? numbers[i] : i, sizes[i],
                                     offsets != NULL ? offsets[i] : flat);
          flat += sizes[i];
        }
    }
}

MixprecLayout *
_mixprec_engine_plan_layout (MixprecConfig *config,
                             const guint64 *sizes,
                             guint          n_sizes,
                             guint          world,
                             GError       **error)
{
  g_auto(_MixprecPlannedGroup) pg = { 0 };
  MixprecLayout *layout;

  if (!_mixprec_engine_plan_group (config, sizes, n_sizes, world, &pg, error))
    return NULL;
  layout = _mixprec_layout_new (world, pg.stage, n_sizes);
  if (n_sizes > 0)
    add_units (layout, _mixprec_layout_add_group (layout, pg.shape.slot_elements, (guint) pg.shape.n_slots),
               pg.units, NULL, sizes, NULL);
  return layout;
}

/**
 * mixprec_engine_get_layout:
 * @engine: a #MixprecEngine
 * @error: return location for a #GError
 *
 * The layout @engine runs, every group of it, read from its buffers as
 * laid out: parameters are numbered in registration order
 * (mixprec_engine_get_params()). Lays out the buffers first if that has
 * not happened yet (see mixprec_engine_prepare()).
 *
 * Returns: (transfer full): a snapshot of the layout, or %NULL with
 *   @error set when laying out failed
 *
 * Since: 1.1
 */
MixprecLayout *
mixprec_engine_get_layout (MixprecEngine  *engine,
                           GError        **error)
{
  g_autoptr(GHashTable) numbers = NULL;
  MixprecLayout *layout;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (engine), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (!mixprec_engine_prepare (engine, error))
    return NULL;

  numbers = g_hash_table_new (NULL, NULL);
  for (guint i = 0; i < engine->params->len; i++)
    g_hash_table_insert (numbers, g_ptr_array_index (engine->params, i), GUINT_TO_POINTER (i));

  layout = _mixprec_layout_new (engine->world, engine->stage, engine->params->len);
  for (guint j = 0; j < engine->groups->len; j++)
    {
      const Group *g = g_ptr_array_index (engine->groups, j);
      g_autofree guint *group_numbers = g_new (guint, MAX (g->params->len, 1));
      g_autofree guint64 *sizes = g_new (guint64, MAX (g->params->len, 1));
      g_autofree guint64 *offsets = g_new (guint64, MAX (g->params->len, 1));
      guint group = _mixprec_layout_add_group (layout, g->slot_elements,
                                               g->slot_elements > 0 ? _MIXPREC_N_SLOTS : 0);

      for (guint i = 0; i < g->params->len; i++)
        {
          MixprecParam *p = g_ptr_array_index (g->params, i);

          group_numbers[i] = GPOINTER_TO_UINT (g_hash_table_lookup (numbers, p));
          sizes[i] = mixprec_param_get_numel (p);
          offsets[i] = _mixprec_param_get_storage (p)->offset;
        }
      add_units (layout, group, g->units, group_numbers, sizes, offsets);
    }
  return layout;
}
