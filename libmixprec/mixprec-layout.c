/* mixprec-layout.c — MixprecLayout: a read-only description of the ZeRO
 * layout an engine runs. The numbers come from the engine's own layout
 * code (mixprec-engine-layout-view.c); this file only keeps and answers
 * them. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-layout-private.h"

/**
 * MixprecLayout:
 *
 * Where every element of every parameter lives across the ranks of a
 * data-parallel group, as a #MixprecEngine lays it out: computed by the
 * engine's own layout code, so its answers are what the engine does.
 * Get one for a running engine with mixprec_engine_get_layout(), or plan
 * one for a model without building an engine with mixprec_layout_new().
 *
 * The layout, in the engine's words:
 *
 * - Parameters form *groups*: those that share their dtypes and optimizer
 *   settings, in registration order. Each group has its own padded
 *   element space; parameters are numbered across groups in registration
 *   order (the `param` arguments below).
 * - A group is cut into *units*, runs of consecutive parameters of at
 *   most 2^20 elements (a larger parameter is a unit alone). Under ZeRO-3,
 *   parameters below `stage3_param_persistence_threshold` are never packed
 *   with larger ones: their units are *persistent*, kept whole on every
 *   rank.
 * - Across W ranks a unit is padded with zeros to a multiple of
 *   W × 4096 elements and cut into W equal *slices*; slice r is rank r's.
 *   So rank r owns one contiguous range of every parameter
 *   (mixprec_layout_get_rank_range()), possibly empty, and the padding
 *   lies at the end of each unit, in the last ranks' slices.
 * - A unit is the bucket of the collectives: one reduce-scatter of its
 *   gradients hands every rank its slice (window by window, through the
 *   group's staging slots, when a unit is larger than a slot allows), one
 *   all-gather makes its working copy whole again, and under ZeRO-3 one
 *   gather brings in the whole unit.
 *
 * |[<!-- language="plain" -->
 *   a group of three parameters over W = 2 ranks (B = 2 × 4096):
 *
 *   unit 0: | p0 p0 p0 p1 p1 . . . | pad to a multiple of B
 *           | rank 0 slice | rank 1 slice |
 *   unit 1: | p2 (more than 2^20 elements) ... pad |
 *           | rank 0 slice        | rank 1 slice        |
 * ]|
 *
 * On one process the units are not padded and the ZeRO stage is 0.
 *
 * Since: 1.1
 */

typedef struct {
  guint group;
  guint unit;                /* in its group */
  guint64 size;
  guint64 offset;            /* in the group's padded element space */
} ParamPlace;

typedef struct {
  guint64 offset;            /* in the group's padded element space */
  guint64 numel;
  guint64 padded;
  gboolean persistent;
  guint first;               /* into the group's params */
  guint n_params;
} UnitPlace;

typedef struct {
  GArray *params;            /* guint: parameter numbers, group order */
  GArray *units;             /* UnitPlace */
  guint64 total;
  guint64 padded;
  guint64 persistent;
  guint64 slot_size;
  guint n_slots;
} GroupPlace;

struct _MixprecLayout
{
  GObject parent_instance;

  guint world;
  guint stage;
  GArray *params;            /* ParamPlace, by parameter number */
  GPtrArray *groups;         /* GroupPlace */
};

G_DEFINE_FINAL_TYPE (MixprecLayout, mixprec_layout, G_TYPE_OBJECT)

enum
{
  PROP_0,
  PROP_WORLD_SIZE,
  PROP_ZERO_STAGE,
  PROP_N_PARAMS,
  PROP_N_GROUPS,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void
group_place_free (gpointer data)
{
  GroupPlace *g = data;

  g_array_unref (g->params);
  g_array_unref (g->units);
  g_free (g);
}

/* ---------------------------------------------------------------- filling in */

MixprecLayout *
_mixprec_layout_new (guint world,
                     guint stage,
                     guint n_params)
{
  MixprecLayout *self = g_object_new (MIXPREC_TYPE_LAYOUT, NULL);

  self->world = MAX (world, 1);
  self->stage = stage;
  g_array_set_size (self->params, n_params);
  return self;
}

guint
_mixprec_layout_add_group (MixprecLayout *self,
                           guint64        slot_size,
                           guint          n_slots)
{
  GroupPlace *g = g_new0 (GroupPlace, 1);

  g->params = g_array_new (FALSE, FALSE, sizeof (guint));
  g->units = g_array_new (FALSE, TRUE, sizeof (UnitPlace));
  g->slot_size = slot_size;
  g->n_slots = slot_size > 0 ? n_slots : 0;
  g_ptr_array_add (self->groups, g);
  return self->groups->len - 1;
}

void
_mixprec_layout_add_unit (MixprecLayout *self,
                          guint          group,
                          guint64        offset,
                          guint64        numel,
                          guint64        padded,
                          gboolean       persistent)
{
  GroupPlace *g = g_ptr_array_index (self->groups, group);
  UnitPlace u = { offset, numel, padded, persistent, g->params->len, 0 };

  g_array_append_val (g->units, u);
  g->total += numel;
  g->padded += padded;
  if (persistent)
    g->persistent += padded;
}

void
_mixprec_layout_add_param (MixprecLayout *self,
                           guint          group,
                           guint          param,
                           guint64        size,
                           guint64        offset)
{
  GroupPlace *g = g_ptr_array_index (self->groups, group);
  ParamPlace *p = &g_array_index (self->params, ParamPlace, param);

  g_assert (g->units->len > 0);
  p->group = group;
  p->unit = g->units->len - 1;
  p->size = size;
  p->offset = offset;
  g_array_append_val (g->params, param);
  g_array_index (g->units, UnitPlace, p->unit).n_params++;
}

/* ---------------------------------------------------------------- lookups */

static GroupPlace *
group_at (MixprecLayout *self,
          guint          group)
{
  return g_ptr_array_index (self->groups, group);
}

static const UnitPlace *
unit_at (MixprecLayout *self,
         guint          group,
         guint          unit)
{
  return &g_array_index (group_at (self, group)->units, UnitPlace, unit);
}

static const ParamPlace *
param_at (MixprecLayout *self,
          guint          param)
{
  return &g_array_index (self->params, ParamPlace, param);
}

/* Elements of @p's unit that rank @rank owns, as [lo, hi) counted from
 * the unit's start: its slice, clipped to the parameter. */
static void
owned (MixprecLayout    *self,
       const ParamPlace *p,
       guint             rank,
       guint64          *lo,
       guint64          *hi)
{
  const UnitPlace *u = unit_at (self, p->group, p->unit);
  guint64 slice = u->padded / self->world;
  guint64 e0 = p->offset - u->offset;

  *lo = MAX (e0, rank * slice);
  *hi = MIN (e0 + p->size, (rank + 1) * slice);
  if (*hi < *lo)
    *hi = *lo;
}

#define CHECK_PARAM(self, param, val) \
  g_return_val_if_fail (MIXPREC_IS_LAYOUT (self), (val)); \
  g_return_val_if_fail ((param) < (self)->params->len, (val))
#define CHECK_GROUP(self, group, val) \
  g_return_val_if_fail (MIXPREC_IS_LAYOUT (self), (val)); \
  g_return_val_if_fail ((group) < (self)->groups->len, (val))
#define CHECK_UNIT(self, group, unit, val) \
  CHECK_GROUP (self, group, val); \
  g_return_val_if_fail ((unit) < group_at ((self), (group))->units->len, (val))

/**
 * mixprec_layout_get_world_size:
 * @self: a #MixprecLayout
 *
 * Gets the number of ranks the layout is cut for.
 *
 * Returns: the number of data-parallel ranks the layout is cut for
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_world_size (MixprecLayout *self)
{
  g_return_val_if_fail (MIXPREC_IS_LAYOUT (self), 0);

  return self->world;
}

/**
 * mixprec_layout_get_zero_stage:
 * @self: a #MixprecLayout
 *
 * Gets the ZeRO stage the layout is for.
 *
 * Returns: the ZeRO stage in effect: the configured one across ranks, 0
 *   on one process
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_zero_stage (MixprecLayout *self)
{
  g_return_val_if_fail (MIXPREC_IS_LAYOUT (self), 0);

  return self->stage;
}

/**
 * mixprec_layout_get_n_params:
 * @self: a #MixprecLayout
 *
 * Gets the number of parameters the layout places.
 *
 * Returns: the number of parameters, numbered from 0 in registration
 *   order (the order of the sizes given to mixprec_layout_new())
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_n_params (MixprecLayout *self)
{
  g_return_val_if_fail (MIXPREC_IS_LAYOUT (self), 0);

  return self->params->len;
}

/**
 * mixprec_layout_get_param_size:
 * @self: a #MixprecLayout
 * @param: a parameter number, below mixprec_layout_get_n_params()
 *
 * Gets the size of a parameter.
 *
 * Returns: the number of elements of @param
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_param_size (MixprecLayout *self,
                               guint          param)
{
  CHECK_PARAM (self, param, 0);

  return param_at (self, param)->size;
}

/**
 * mixprec_layout_get_param_group:
 * @self: a #MixprecLayout
 * @param: a parameter number
 *
 * Gets the group a parameter belongs to.
 *
 * Returns: the group @param belongs to
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_param_group (MixprecLayout *self,
                                guint          param)
{
  CHECK_PARAM (self, param, 0);

  return param_at (self, param)->group;
}

/**
 * mixprec_layout_get_param_unit:
 * @self: a #MixprecLayout
 * @param: a parameter number
 *
 * Gets the unit that holds a parameter.
 *
 * Returns: the unit of its group that holds @param
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_param_unit (MixprecLayout *self,
                               guint          param)
{
  CHECK_PARAM (self, param, 0);

  return param_at (self, param)->unit;
}

/**
 * mixprec_layout_get_param_offset:
 * @self: a #MixprecLayout
 * @param: a parameter number
 *
 * Gets where a parameter starts in its group.
 *
 * Returns: where the first element of @param lies in its group's padded
 *   element space (the position in the whole, unsharded buffers)
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_param_offset (MixprecLayout *self,
                                 guint          param)
{
  CHECK_PARAM (self, param, 0);

  return param_at (self, param)->offset;
}

/**
 * mixprec_layout_get_rank_range:
 * @self: a #MixprecLayout
 * @param: a parameter number
 * @rank: a rank, below the world size
 * @begin: (out) (optional): the first element of @param that @rank owns
 * @end: (out) (optional): one past the last one
 *
 * The elements of @param whose FP32 master, optimizer state and reduced
 * gradient @rank keeps (at every stage above 0; at stage 0 the rank that
 * saves them in a checkpoint): one contiguous range, counted inside the
 * parameter. A rank that owns none of @param gets 0 and 0.
 *
 * Since: 1.1
 */
void
mixprec_layout_get_rank_range (MixprecLayout *self,
                               guint          param,
                               guint          rank,
                               guint64       *begin,
                               guint64       *end)
{
  const ParamPlace *p;
  const UnitPlace *u;
  guint64 lo, hi;

  if (begin != NULL)
    *begin = 0;
  if (end != NULL)
    *end = 0;
  g_return_if_fail (MIXPREC_IS_LAYOUT (self));
  g_return_if_fail (param < self->params->len);
  g_return_if_fail (rank < self->world);

  p = param_at (self, param);
  u = unit_at (self, p->group, p->unit);
  owned (self, p, rank, &lo, &hi);
  if (hi <= lo)
    return;
  if (begin != NULL)
    *begin = lo - (p->offset - u->offset);
  if (end != NULL)
    *end = hi - (p->offset - u->offset);
}

/**
 * mixprec_layout_get_owner:
 * @self: a #MixprecLayout
 * @param: a parameter number
 * @element: an element of @param, below its size
 *
 * Finds the rank that owns one element of a parameter.
 *
 * Returns: the rank that owns @element of @param
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_owner (MixprecLayout *self,
                          guint          param,
                          guint64        element)
{
  const ParamPlace *p;
  const UnitPlace *u;

  CHECK_PARAM (self, param, 0);
  p = param_at (self, param);
  g_return_val_if_fail (element < p->size, 0);
  u = unit_at (self, p->group, p->unit);
  return (guint) ((p->offset - u->offset + element) / (u->padded / self->world));
}

/**
 * mixprec_layout_get_n_groups:
 * @self: a #MixprecLayout
 *
 * Gets the number of parameter groups.
 *
 * Returns: the number of parameter groups (one for a planned layout)
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_n_groups (MixprecLayout *self)
{
  g_return_val_if_fail (MIXPREC_IS_LAYOUT (self), 0);

  return self->groups->len;
}

/**
 * mixprec_layout_get_group_total:
 * @self: a #MixprecLayout
 * @group: a group, below mixprec_layout_get_n_groups()
 *
 * Gets the real (unpadded) size of a group.
 *
 * Returns: the number of elements of the parameters of @group
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_group_total (MixprecLayout *self,
                                guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->total;
}

/**
 * mixprec_layout_get_group_padded_total:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * Gets the padded size of a group.
 *
 * Returns: the size of @group's padded element space: the sum of its
 *   units' padded sizes, what a whole (unsharded) buffer of the group holds
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_group_padded_total (MixprecLayout *self,
                                       guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->padded;
}

/**
 * mixprec_layout_get_rank_elements:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * Gets the length of a rank's sharded buffers of a group.
 *
 * Returns: the elements of @group's slices one rank holds (the same on
 *   every rank, padding included): the length of its sharded buffers
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_rank_elements (MixprecLayout *self,
                                  guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->padded / self->world;
}

/**
 * mixprec_layout_get_rank_padding:
 * @self: a #MixprecLayout
 * @group: a group
 * @rank: a rank
 *
 * Counts the padding among a rank's elements of a group.
 *
 * Returns: how many of @rank's elements of @group are padding
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_rank_padding (MixprecLayout *self,
                                 guint          group,
                                 guint          rank)
{
  GroupPlace *g;
  guint64 padding = 0;

  CHECK_GROUP (self, group, 0);
  g_return_val_if_fail (rank < self->world, 0);
  g = group_at (self, group);
  for (guint k = 0; k < g->units->len; k++)
    {
      const UnitPlace *u = &g_array_index (g->units, UnitPlace, k);
      guint64 slice = u->padded / self->world;
      guint64 lo = MAX (u->numel, rank * slice), hi = (rank + 1) * slice;

      padding += hi > lo ? hi - lo : 0;
    }
  return padding;
}

/**
 * mixprec_layout_get_persistent_elements:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * Gets the size of a group's ZeRO-3 persistent units.
 *
 * Returns: under ZeRO-3, the padded elements of @group's persistent
 *   units, whose working copies every rank keeps whole; 0 otherwise
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_persistent_elements (MixprecLayout *self,
                                        guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->persistent;
}

/**
 * mixprec_layout_get_rank_pieces:
 * @self: a #MixprecLayout
 * @group: a group
 * @rank: a rank
 *
 * What @rank owns of @group, parameter by parameter in group order: each
 * piece's @param_index is a parameter number, @param_offset and @length
 * the range of mixprec_layout_get_rank_range(), and @flat_offset where
 * that range starts in the group's padded element space.
 *
 * Returns: (transfer container) (element-type MixprecPartitionPiece): the
 *   pieces, none for parameters @rank owns nothing of
 *
 * Since: 1.1
 */
GPtrArray *
mixprec_layout_get_rank_pieces (MixprecLayout *self,
                                guint          group,
                                guint          rank)
{
  GPtrArray *pieces;
  GroupPlace *g;

  CHECK_GROUP (self, group, NULL);
  g_return_val_if_fail (rank < self->world, NULL);
  g = group_at (self, group);
  pieces = g_ptr_array_new_with_free_func ((GDestroyNotify) mixprec_partition_piece_free);
  for (guint i = 0; i < g->params->len; i++)
    {
      guint param = g_array_index (g->params, guint, i);
      const ParamPlace *p = param_at (self, param);
      const UnitPlace *u = unit_at (self, group, p->unit);
      MixprecPartitionPiece *piece;
      guint64 lo, hi;

      owned (self, p, rank, &lo, &hi);
      if (hi <= lo)
        continue;
      piece = g_new0 (MixprecPartitionPiece, 1);
      piece->param_index = param;
      piece->param_offset = lo - (p->offset - u->offset);
      piece->flat_offset = u->offset + lo;
      piece->length = hi - lo;
      g_ptr_array_add (pieces, piece);
    }
  return pieces;
}

/**
 * mixprec_layout_get_n_units:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * Gets the number of units of a group.
 *
 * Returns: the number of units of @group
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_n_units (MixprecLayout *self,
                            guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->units->len;
}

/**
 * mixprec_layout_get_unit:
 * @self: a #MixprecLayout
 * @group: a group
 * @unit: a unit of @group, below mixprec_layout_get_n_units()
 * @offset: (out) (optional): where @unit starts in the group's padded
 *   element space
 * @numel: (out) (optional): the elements of its parameters
 * @padded: (out) (optional): its size with padding: a multiple of the
 *   world size × 4096 across ranks, @numel on one process. Each rank's
 *   slice is @padded / world size elements.
 *
 * Describes one unit: the bucket that one reduce-scatter, one all-gather
 * and (under ZeRO-3) one gather move.
 *
 * Since: 1.1
 */
void
mixprec_layout_get_unit (MixprecLayout *self,
                         guint          group,
                         guint          unit,
                         guint64       *offset,
                         guint64       *numel,
                         guint64       *padded)
{
  const UnitPlace *u;

  g_return_if_fail (MIXPREC_IS_LAYOUT (self));
  g_return_if_fail (group < self->groups->len);
  g_return_if_fail (unit < group_at (self, group)->units->len);
  u = unit_at (self, group, unit);
  if (offset != NULL)
    *offset = u->offset;
  if (numel != NULL)
    *numel = u->numel;
  if (padded != NULL)
    *padded = u->padded;
}

/**
 * mixprec_layout_get_unit_params:
 * @self: a #MixprecLayout
 * @group: a group
 * @unit: a unit of @group
 * @n_params: (out): the number of parameters returned
 *
 * Lists the parameters of one unit.
 *
 * Returns: (array length=n_params) (transfer full): the numbers of the
 *   parameters @unit holds, in the order they lie in it
 *
 * Since: 1.1
 */
guint *
mixprec_layout_get_unit_params (MixprecLayout *self,
                                guint          group,
                                guint          unit,
                                guint         *n_params)
{
  const UnitPlace *u;
  GroupPlace *g;

  g_return_val_if_fail (n_params != NULL, NULL);
  *n_params = 0;
  CHECK_UNIT (self, group, unit, NULL);
  g = group_at (self, group);
  u = unit_at (self, group, unit);
  *n_params = u->n_params;
  if (u->n_params == 0)
    return g_new0 (guint, 1);
  return g_memdup2 (&g_array_index (g->params, guint, u->first), sizeof (guint) * u->n_params);
}

/**
 * mixprec_layout_unit_is_persistent:
 * @self: a #MixprecLayout
 * @group: a group
 * @unit: a unit of @group
 *
 * Tells whether a unit is kept whole on every rank under ZeRO-3.
 *
 * Returns: %TRUE when @unit holds ZeRO-3 persistent parameters (below
 *   `stage3_param_persistence_threshold`), whose working copies every
 *   rank keeps whole; always %FALSE below stage 3 and on one process
 *
 * Since: 1.1
 */
gboolean
mixprec_layout_unit_is_persistent (MixprecLayout *self,
                                   guint          group,
                                   guint          unit)
{
  CHECK_UNIT (self, group, unit, FALSE);

  return unit_at (self, group, unit)->persistent;
}

/**
 * mixprec_layout_get_slot_size:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * Gets the size of a group's gradient staging slots.
 *
 * Returns: the elements of each of @group's gradient staging slots, where
 *   gradients collect on their way to the reduce-scatter (ZeRO-2/3, or a
 *   communication dtype other than the gradients'); 0 when the group
 *   needs none
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_slot_size (MixprecLayout *self,
                              guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->slot_size;
}

/**
 * mixprec_layout_get_n_slots:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * Gets the number of a group's gradient staging slots.
 *
 * Returns: the number of staging slots the layout allocates for @group
 *   (0 when it needs none)
 *
 * Since: 1.1
 */
guint
mixprec_layout_get_n_slots (MixprecLayout *self,
                            guint          group)
{
  CHECK_GROUP (self, group, 0);

  return group_at (self, group)->n_slots;
}

/**
 * mixprec_layout_get_window_size:
 * @self: a #MixprecLayout
 * @group: a group
 *
 * A unit whose gradients do not wait in a slot whole (a parameter alone
 * in its unit, handed over with mixprec_param_reduce_grad(), or gradients
 * converted to the communication dtype on their way out) is reduced
 * window by window: window [a, a + w) of every rank's slice, packed rank
 * after rank into a slot, is one reduce-scatter.
 *
 * Returns: w, the elements of each rank's slice one window covers; 0 when
 *   the group has no staging slots (each unit is one reduce-scatter)
 *
 * Since: 1.1
 */
guint64
mixprec_layout_get_window_size (MixprecLayout *self,
                                guint          group)
{
  GroupPlace *g;

  CHECK_GROUP (self, group, 0);
  g = group_at (self, group);
  return g->slot_size > 0 ? MAX (g->slot_size / self->world, 1) : 0;
}

/* ---------------------------------------------------------------- GObject */

static void
mixprec_layout_get_property (GObject    *object,
                             guint       prop_id,
                             GValue     *value,
                             GParamSpec *pspec)
{
  MixprecLayout *self = MIXPREC_LAYOUT (object);

  switch (prop_id)
    {
    case PROP_WORLD_SIZE:
      g_value_set_uint (value, self->world);
      break;
    case PROP_ZERO_STAGE:
      g_value_set_uint (value, self->stage);
      break;
    case PROP_N_PARAMS:
      g_value_set_uint (value, self->params->len);
      break;
    case PROP_N_GROUPS:
      g_value_set_uint (value, self->groups->len);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_layout_finalize (GObject *object)
{
  MixprecLayout *self = MIXPREC_LAYOUT (object);

  g_array_unref (self->params);
  g_ptr_array_unref (self->groups);
  G_OBJECT_CLASS (mixprec_layout_parent_class)->finalize (object);
}

static void
mixprec_layout_class_init (MixprecLayoutClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);

  object_class->get_property = mixprec_layout_get_property;
  object_class->finalize = mixprec_layout_finalize;

  /**
   * MixprecLayout:world-size:
   *
   * The number of data-parallel ranks.
   *
   * Since: 1.1
   */
  properties[PROP_WORLD_SIZE] =
    g_param_spec_uint ("world-size", NULL, NULL, 1, G_MAXUINT, 1,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * MixprecLayout:zero-stage:
   *
   * The ZeRO stage in effect (0 on one process).
   *
   * Since: 1.1
   */
  properties[PROP_ZERO_STAGE] =
    g_param_spec_uint ("zero-stage", NULL, NULL, 0, 3, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * MixprecLayout:n-params:
   *
   * The number of parameters.
   *
   * Since: 1.1
   */
  properties[PROP_N_PARAMS] =
    g_param_spec_uint ("n-params", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  /**
   * MixprecLayout:n-groups:
   *
   * The number of parameter groups.
   *
   * Since: 1.1
   */
  properties[PROP_N_GROUPS] =
    g_param_spec_uint ("n-groups", NULL, NULL, 0, G_MAXUINT, 0,
                       G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_layout_init (MixprecLayout *self)
{
  self->world = 1;
  self->params = g_array_new (FALSE, TRUE, sizeof (ParamPlace));
  self->groups = g_ptr_array_new_with_free_func (group_place_free);
}

/**
 * mixprec_layout_new:
 * @config: a training configuration
 * @sizes: (array length=n_sizes) (nullable): the element count of every
 *   parameter, in registration order; sizes of 0 are allowed
 * @n_sizes: the number of parameters
 * @world_size: the number of data-parallel ranks, at least 1
 * @error: return location for a #GError
 *
 * Plans the layout an engine with @config would run over @world_size
 * ranks for parameters of these sizes registered as one group (the same
 * dtypes and optimizer settings: matrices of one module type), without
 * building an engine or allocating its buffers. The layout of a running
 * engine, every group of it, is mixprec_engine_get_layout().
 *
 * Returns: (transfer full): the layout, or %NULL with @error set (a world
 *   size of 0, or a configuration whose optimizer or policy cannot be
 *   resolved)
 *
 * Since: 1.1
 */
MixprecLayout *
mixprec_layout_new (MixprecConfig  *config,
                    const guint64  *sizes,
                    guint           n_sizes,
                    guint           world_size,
                    GError        **error)
{
  g_return_val_if_fail (MIXPREC_IS_CONFIG (config), NULL);
  g_return_val_if_fail (sizes != NULL || n_sizes == 0, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_engine_plan_layout (config, sizes, n_sizes, world_size, error);
}
