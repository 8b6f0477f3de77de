/* mixprec-numerics.c — MixprecNumerics: what the engine measured of each
 * parameter's gradient and update in one optimizer step (the statistics
 * of mixprec.numerics, see mixprec-engine-numerics.c), by parameter and
 * by module type, for a trainer to print or plot. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-numerics-private.h"

/**
 * MixprecNumerics:
 *
 * The per-tensor numerics of one optimizer step.
 *
 * With `mixprec.numerics.every` set to N, every N-th optimizer step the
 * engine measures, for each parameter and each module type, how its
 * gradient and its update fared in low precision, and records the values
 * in the csv_monitor and tensorboard monitors under
 * `Numerics/<parameter>/<stat>` and `NumericsByType/<module type>/<stat>`.
 * mixprec_engine_get_numerics() returns the last measured step's values
 * as a #MixprecNumerics.
 *
 * The statistics, by name (mixprec_numerics_get_stat_names()):
 *
 * - `grad_amax`: the largest magnitude of the finite elements of the
 *   unscaled, averaged gradient;
 * - `grad_norm`: the L2 norm of the unscaled, averaged gradient (the
 *   step's grad_norm restricted to the tensor);
 * - `grad_nonfinite`: the fraction of gradient elements that are infinite
 *   or NaN;
 * - `grad_underflow`: among the non-zero finite elements of the gradient
 *   the step reads (still multiplied by the loss scale), the fraction that
 *   round to zero or to a subnormal number in the dtype gradients travel
 *   in (the group's communication dtype);
 * - `grad_overflow`: among the same elements, the fraction that round to
 *   infinity in that dtype;
 * - `stale`: for a working copy of lower precision than its FP32 master,
 *   the fraction of elements whose master moved by less than half an ulp
 *   of the new working value: an update lost to rounding;
 * - `update_ratio`: the L2 norm of the change of the FP32 values over the
 *   L2 norm of the values before the step;
 * - `fp8_saturation`: for an FP8 working copy of per-tensor scaling
 *   (delayed or current), the fraction of elements whose FP32 value times
 *   the scale lies beyond the FP8 format's largest finite value (clamped,
 *   or NaN without saturation);
 * - `fp8_underflow`: for an FP8 working copy (any recipe), among the
 *   non-zero FP32 values, the fraction whose FP8 code is a zero;
 * - `fp8_scale`: the per-tensor scale the FP8 copy was cast with;
 * - `shadow_rel_l2`: for a parameter that `mixprec.numerics.shadow` (or
 *   `shadow_fraction`) names, the L2 distance of the working copy from
 *   its FP32 shadow (a copy stepped from the first step on by the same
 *   optimizer with the same gradients, in FP32 with FP32 state) over the
 *   shadow's L2 norm;
 * - `shadow_max_ulp`: the most ulps of the working format between a
 *   working value and the shadow's value rounded to nearest even.
 *
 * Fractions are fractions in [0, 1]. A statistic that does not apply to
 * a parameter is absent: `stale` without a separate working copy, the
 * update and FP8 statistics on a skipped step or without FP32 values,
 * the FP8 ones without an FP8 copy, `fp8_saturation` and `fp8_scale`
 * under the MX recipe (block scales), `fp8_scale` for a module type, the
 * shadow's for parameters it does not follow.
 *
 * Since: 1.1
 */

static const gchar *const stat_names[_MIXPREC_NUM_N_STATS + 1] = {
  "grad_amax", "grad_norm", "grad_nonfinite", "grad_underflow", "grad_overflow",
  "stale", "update_ratio", "fp8_saturation", "fp8_underflow", "fp8_scale",
  "shadow_rel_l2", "shadow_max_ulp", NULL
};

typedef struct {
  const gchar *name;         /* in the object's names */
  guint32 set;               /* bit k: statistic k has a value */
  gdouble values[_MIXPREC_NUM_N_STATS];
} Row;

struct _MixprecNumerics
{
  GObject parent_instance;

  guint64 step;
  gboolean applied;
  GStringChunk *names;       /* the rows' names */
  GArray *rows[2];           /* Row: by parameter, by module type */
  /* Names to rows, built when first asked for: an engine measuring every
   * step fills thousands of rows that nobody may look up by name. */
  GMutex lock;
  GHashTable *index[2];      /* name -> 1 + row index */
  guint indexed[2];          /* rows in index[k] so far */
};

G_DEFINE_FINAL_TYPE (MixprecNumerics, mixprec_numerics, G_TYPE_OBJECT)

static void
mixprec_numerics_finalize (GObject *object)
{
  MixprecNumerics *self = MIXPREC_NUMERICS (object);

  for (guint k = 0; k < 2; k++)
    {
      g_array_unref (self->rows[k]);
      g_hash_table_unref (self->index[k]);
    }
  g_string_chunk_free (self->names);
  g_mutex_clear (&self->lock);
  G_OBJECT_CLASS (mixprec_numerics_parent_class)->finalize (object);
}

static void
mixprec_numerics_class_init (MixprecNumericsClass *klass)
{
  G_OBJECT_CLASS (klass)->finalize = mixprec_numerics_finalize;
}

static void
mixprec_numerics_init (MixprecNumerics *self)
{
  self->names = g_string_chunk_new (4096);
  g_mutex_init (&self->lock);
  for (guint k = 0; k < 2; k++)
    {
      self->rows[k] = g_array_new (FALSE, TRUE, sizeof (Row));
      self->index[k] = g_hash_table_new (g_str_hash, g_str_equal);
    }
}

/* Row @name of rows[@k] (1 + its index), or 0; with the lock held. */
static guint
lookup_locked (MixprecNumerics *self,
               guint            k,
               const gchar     *name)
{
  GArray *rows = self->rows[k];

  for (; self->indexed[k] < rows->len; self->indexed[k]++)
    g_hash_table_insert (self->index[k], (gpointer) g_array_index (rows, Row, self->indexed[k]).name,
                         GUINT_TO_POINTER (self->indexed[k] + 1));
  return GPOINTER_TO_UINT (g_hash_table_lookup (self->index[k], name));
}

MixprecNumerics *
_mixprec_numerics_new (guint64  step,
                       gboolean applied)
{
  MixprecNumerics *self = g_object_new (MIXPREC_TYPE_NUMERICS, NULL);

  self->step = step;
  self->applied = applied;
  return self;
}

_MixprecNumericsRow *
_mixprec_numerics_row (MixprecNumerics *self,
                       gboolean         by_type,
                       const gchar     *name)
{
  guint k = by_type ? 1 : 0, at;

  g_mutex_lock (&self->lock);
  at = lookup_locked (self, k, name);
  g_mutex_unlock (&self->lock);
  if (at == 0)
    return _mixprec_numerics_append_row (self, by_type, name);
  return (_MixprecNumericsRow *) &g_array_index (self->rows[k], Row, at - 1);
}

_MixprecNumericsRow *
_mixprec_numerics_append_row (MixprecNumerics *self,
                              gboolean         by_type,
                              const gchar     *name)
{
  GArray *rows = self->rows[by_type ? 1 : 0];
  Row fresh = { g_string_chunk_insert (self->names, name), 0, { 0 } };

  g_array_append_val (rows, fresh);
  return (_MixprecNumericsRow *) &g_array_index (rows, Row, rows->len - 1);
}

void
_mixprec_numerics_row_set (_MixprecNumericsRow *row,
                           _MixprecNumStat      stat,
                           gdouble              value)
{
  Row *r = (Row *) row;

  r->values[stat] = value;
  r->set |= 1u << stat;
}

void
_mixprec_numerics_set (MixprecNumerics *self,
                       gboolean         by_type,
                       const gchar     *name,
                       _MixprecNumStat  stat,
                       gdouble          value)
{
  _mixprec_numerics_row_set (_mixprec_numerics_row (self, by_type, name), stat, value);
}

void
_mixprec_numerics_foreach (MixprecNumerics      *self,
                           _MixprecNumericsFunc  func,
                           gpointer              data)
{
  for (guint k = 0; k < 2; k++)
    for (guint i = 0; i < self->rows[k]->len; i++)
      {
        const Row *row = &g_array_index (self->rows[k], Row, i);

        for (guint s = 0; s < _MIXPREC_NUM_N_STATS; s++)
          if (row->set & (1u << s))
            func (k == 1, row->name, stat_names[s], row->values[s], data);
      }
}

static const Row *
find_row (MixprecNumerics *self,
          guint            k,
          const gchar     *name)
{
  guint at;

  g_mutex_lock (&self->lock);
  at = lookup_locked (self, k, name);
  g_mutex_unlock (&self->lock);
  return at == 0 ? NULL : &g_array_index (self->rows[k], Row, at - 1);
}

static gchar **
list_rows (MixprecNumerics *self,
           guint            k)
{
  gchar **out = g_new0 (gchar *, self->rows[k]->len + 1);

  for (guint i = 0; i < self->rows[k]->len; i++)
    out[i] = g_strdup (g_array_index (self->rows[k], Row, i).name);
  return out;
}

static gchar **
list_stats (const Row *row)
{
  GPtrArray *out = g_ptr_array_new ();

  for (guint s = 0; row != NULL && s < _MIXPREC_NUM_N_STATS; s++)
    if (row->set & (1u << s))
      g_ptr_array_add (out, g_strdup (stat_names[s]));
  g_ptr_array_add (out, NULL);
  return (gchar **) g_ptr_array_free (out, FALSE);
}

static gboolean
get_stat (const Row   *row,
          const gchar *stat,
          gdouble     *value)
{
  for (guint s = 0; row != NULL && s < _MIXPREC_NUM_N_STATS; s++)
    if (g_str_equal (stat, stat_names[s]) && (row->set & (1u << s)))
      {
        if (value != NULL)
          *value = row->values[s];
        return TRUE;
      }
  return FALSE;
}

/**
 * mixprec_numerics_get_step:
 * @self: a #MixprecNumerics
 *
 * Gets the optimizer step the statistics were measured in: the `step` of
 * that step's #MixprecStepResult, and the step the monitors record them at.
 *
 * Returns: the step number (from 1)
 *
 * Since: 1.1
 */
guint64
mixprec_numerics_get_step (MixprecNumerics *self)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), 0);
  return self->step;
}

/**
 * mixprec_numerics_get_applied:
 * @self: a #MixprecNumerics
 *
 * Gets whether the measured step was applied; a skipped step (a gradient
 * overflow) has gradient statistics only.
 *
 * Returns: %TRUE when the optimizer ran in that step
 *
 * Since: 1.1
 */
gboolean
mixprec_numerics_get_applied (MixprecNumerics *self)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), FALSE);
  return self->applied;
}

/**
 * mixprec_numerics_list_params:
 * @self: a #MixprecNumerics
 *
 * Lists the parameters measured, in the order they were registered.
 *
 * Returns: (transfer full) (array zero-terminated=1): parameter names
 *
 * Since: 1.1
 */
gchar **
mixprec_numerics_list_params (MixprecNumerics *self)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), NULL);
  return list_rows (self, 0);
}

/**
 * mixprec_numerics_list_module_types:
 * @self: a #MixprecNumerics
 *
 * Lists the module types of the parameters measured, in the order of
 * their first parameter.
 *
 * Returns: (transfer full) (array zero-terminated=1): module type names
 *
 * Since: 1.1
 */
gchar **
mixprec_numerics_list_module_types (MixprecNumerics *self)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), NULL);
  return list_rows (self, 1);
}

/**
 * mixprec_numerics_list_stats:
 * @self: a #MixprecNumerics
 * @param: a parameter name
 *
 * Lists the statistics measured for @param, in the order of
 * mixprec_numerics_get_stat_names(); empty for a parameter not measured.
 *
 * Returns: (transfer full) (array zero-terminated=1): statistic names
 *
 * Since: 1.1
 */
gchar **
mixprec_numerics_list_stats (MixprecNumerics *self,
                             const gchar     *param)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), NULL);
  g_return_val_if_fail (param != NULL, NULL);
  return list_stats (find_row (self, 0, param));
}

/**
 * mixprec_numerics_get_stat:
 * @self: a #MixprecNumerics
 * @param: a parameter name
 * @stat: a statistic name, such as "grad_amax"
 * @value: (out) (optional): where to store the value
 *
 * Gets one statistic of one parameter.
 *
 * Returns: %TRUE when @param has a value of @stat in this step
 *
 * Since: 1.1
 */
gboolean
mixprec_numerics_get_stat (MixprecNumerics *self,
                           const gchar     *param,
                           const gchar     *stat,
                           gdouble         *value)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), FALSE);
  g_return_val_if_fail (param != NULL && stat != NULL, FALSE);
  return get_stat (find_row (self, 0, param), stat, value);
}

/**
 * mixprec_numerics_list_module_stats:
 * @self: a #MixprecNumerics
 * @module_type: a module type, such as "Linear"
 *
 * Lists the statistics measured for the parameters of @module_type taken
 * together.
 *
 * Returns: (transfer full) (array zero-terminated=1): statistic names
 *
 * Since: 1.1
 */
gchar **
mixprec_numerics_list_module_stats (MixprecNumerics *self,
                                    const gchar     *module_type)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), NULL);
  g_return_val_if_fail (module_type != NULL, NULL);
  return list_stats (find_row (self, 1, module_type));
}

/**
 * mixprec_numerics_get_module_stat:
 * @self: a #MixprecNumerics
 * @module_type: a module type, such as "Linear"
 * @stat: a statistic name, such as "grad_norm"
 * @value: (out) (optional): where to store the value
 *
 * Gets one statistic of the parameters of @module_type taken together:
 * the largest amax, the norm of all their elements, fractions of all
 * their elements (of their non-zero finite ones for underflow and
 * overflow), the ratio of the norms of all their updates and values.
 *
 * Returns: %TRUE when @module_type has a value of @stat in this step
 *
 * Since: 1.1
 */
gboolean
mixprec_numerics_get_module_stat (MixprecNumerics *self,
                                  const gchar     *module_type,
                                  const gchar     *stat,
                                  gdouble         *value)
{
  g_return_val_if_fail (MIXPREC_IS_NUMERICS (self), FALSE);
  g_return_val_if_fail (module_type != NULL && stat != NULL, FALSE);
  return get_stat (find_row (self, 1, module_type), stat, value);
}

/**
 * mixprec_numerics_get_stat_names:
 *
 * Gets every statistic name, in their order: the last component of the
 * monitors' `Numerics/` tags.
 *
 * Returns: (transfer none) (array zero-terminated=1): the names
 *
 * Since: 1.1
 */
const gchar * const *
mixprec_numerics_get_stat_names (void)
{
  return stat_names;
}
