/* mixprec-engine-autoprec.c — closed-loop precision (mixprec.auto_precision):
 * from the per-tensor numerics of the measured steps, widen a parameter
 * whose watched statistic stayed above a threshold for a patience window
 * (fp8 -> the run's 16-bit dtype -> fp32), and narrow it back one level
 * after a longer window below a lower threshold.
 *
 * The decisions read only the agreed statistics (bit-identical on every
 * rank and at every world size, mixprec-engine-numerics.c), the step
 * number, the parameters' sizes and this file's counters, which advance
 * the same way everywhere: every rank decides the same thing without a
 * collective. A change lays the buffers out again at the step boundary:
 * the FP32 masters and optimizer state are kept aside, the groups freed,
 * the parameters' dtypes changed, the groups made anew and the values
 * written back; the working copies are rounded from the masters, as a
 * checkpoint load does. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-engine-autoprec-private.h"

typedef enum {
  LEVEL_FP8,                 /* the policy's dtypes with an FP8 copy */
  LEVEL_LOW,                 /* the policy's 16-bit working copy */
  LEVEL_FP32,                /* FP32 values, no separate master */
} LevelKind;

typedef struct {
  LevelKind ladder[3];       /* ladder[0]: the policy's precision */
  guint n_levels;
  guint level;               /* the current one */
  _MixprecParamDTypes base;  /* the policy's dtypes */
  MixprecDType base_wire;    /* what its gradients travel in at ladder[0] */
  MixprecDType fp8_dtype;    /* its FP8 copy's dtype at LEVEL_FP8 */
  guint64 above;             /* measured steps in a row above widen_above */
  guint64 below;             /* ... below narrow_below */
  guint64 changed_at;        /* the step of its last change (0: none) */
} AutoParam;

struct _MixprecEngineAutoPrec {
  const _MixprecAutoPrecSettings *settings;
  GArray *params;            /* AutoParam, registration order; from the first step */
  guint64 total_numel;
};

static const gchar *
level_name (const AutoParam *ap, guint level)
{
  switch (ap->ladder[level])
    {
    case LEVEL_FP8:
      return mixprec_dtype_get_name (ap->fp8_dtype);
    case LEVEL_LOW:
      return mixprec_dtype_get_name (ap->base.working);
    case LEVEL_FP32:
    default:
      return mixprec_dtype_get_name (MIXPREC_DTYPE_FLOAT32);
    }
}

static gdouble
level_bits (const AutoParam *ap, guint level)
{
  return ap->ladder[level] == LEVEL_FP8 ? 8.0 : ap->ladder[level] == LEVEL_LOW ? 16.0 : 32.0;
}

gboolean
_mixprec_engine_autoprec_setup (MixprecEngine *self,
                                GError       **error)
{
  const _MixprecAutoPrecSettings *a = _mixprec_config_get_auto_precision (self->config);
  const gchar *refused = NULL;

  if (!a->enabled)
    return TRUE;
  if (!_mixprec_device_memory_is_host (self->device))
    refused = "a device other than the cpu (mixprec.device)";
  else if (self->offload)
    refused = "offload_optimizer";
  else if (mixprec_config_get_master_weights (self->config) == MIXPREC_MASTER_WEIGHTS_KAHAN)
    refused = "Kahan-compensated working copies (mixprec.master_weights \"kahan\"), whose pair "
              "a change could not carry over exactly";
  else if (mixprec_config_get_fp4_recipe (self->config, NULL, NULL))
    refused = "4-bit working copies (the fp4 section)";
  else
    for (guint k = 0; k < G_N_ELEMENTS (self->repr.slots); k++)
      if (_mixprec_engine_format_is_scaled (self->repr.slots[k]))
        refused = "scaled or quantized optimizer states (mixprec.optimizer_states)";
  if (refused != NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "mixprec.auto_precision: cannot change the dtypes of parameters under %s; "
                   "set mixprec.auto_precision.enabled to false", refused);
      return FALSE;
    }
  self->autoprec = g_new0 (struct _MixprecEngineAutoPrec, 1);
  self->autoprec->settings = a;
  return TRUE;
}

void
_mixprec_engine_autoprec_free (MixprecEngine *self)
{
  struct _MixprecEngineAutoPrec *ap = g_steal_pointer (&self->autoprec);

  if (ap == NULL)
    return;
  g_clear_pointer (&ap->params, g_array_unref);
  g_free (ap);
}

gboolean
_mixprec_engine_autoprec_check (MixprecEngine *self,
                                GError       **error)
{
  if (self->autoprec == NULL)
    return TRUE;
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);

      if (_mixprec_param_is_external (p))
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                       "mixprec.auto_precision: parameter '%s' lives in memory the caller owns "
                       "(mixprec_engine_register_external(), mixprec.torch), whose dtype the engine "
                       "cannot change; set mixprec.auto_precision.enabled to false",
                       mixprec_param_get_name (p));
          return FALSE;
        }
    }
  return TRUE;
}

/* Each parameter's ladder, from the policy's dtypes (the first use: every
 * parameter is registered and still at the policy's precision). */
static void
make_params (MixprecEngine *self, struct _MixprecEngineAutoPrec *ap)
{
  guint allowed = ap->settings->widen_to;

  ap->params = g_array_sized_new (FALSE, TRUE, sizeof (AutoParam), self->params->len);
  ap->total_numel = 0;
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      AutoParam a = { { 0 } };

      a.base.working = mixprec_param_get_working_dtype (p);
      a.base.grad = mixprec_param_get_grad_dtype (p);
      a.base.accum = mixprec_param_get_accum_dtype (p);
      a.base.comm = mixprec_param_get_comm_dtype (p);
      a.base.has_master = mixprec_param_has_master (p);
      a.base_wire = _mixprec_engine_wire_dtype (&a.base);
      if (mixprec_param_is_fp8 (p))
        {
          a.fp8_dtype = mixprec_param_get_fp8_dtype (p);
          a.ladder[a.n_levels++] = LEVEL_FP8;
          if (allowed & (1u << a.base.working))
            a.ladder[a.n_levels++] = LEVEL_LOW;
        }
      else if (a.base.working != MIXPREC_DTYPE_FLOAT32)
        a.ladder[a.n_levels++] = LEVEL_LOW;
      if (a.n_levels > 0 && (allowed & (1u << MIXPREC_DTYPE_FLOAT32)))
        a.ladder[a.n_levels++] = LEVEL_FP32;
      if (a.n_levels == 0)
        a.ladder[a.n_levels++] = LEVEL_FP32;
      ap->total_numel += mixprec_param_get_numel (p);
      g_array_append_val (ap->params, a);
    }
}

static guint64
widened_numel (MixprecEngine *self, struct _MixprecEngineAutoPrec *ap)
{
  guint64 n = 0;

  for (guint i = 0; i < ap->params->len; i++)
    if (g_array_index (ap->params, AutoParam, i).level > 0)
      n += mixprec_param_get_numel (g_ptr_array_index (self->params, i));
  return n;
}

MixprecDType
_mixprec_engine_autoprec_probe_wire (MixprecEngine *self,
                                     guint          i,
                                     MixprecDType   wire)
{
  struct _MixprecEngineAutoPrec *ap = self->autoprec;
  const AutoParam *a;

  if (ap == NULL || ap->params == NULL || i >= ap->params->len)
    return wire;
  a = &g_array_index (ap->params, AutoParam, i);
  return a->level > 0 ? a->base_wire : wire;
}

/* ---------------------------------------------------------------- laying out again */

typedef struct {
  gfloat *master;
  gpointer states[16];
} Kept;

/* Sets @p's dtypes (and FP8 copy) for @level of @a, and forgets where its
 * buffers were. */
static void
apply_level (MixprecEngine *self, MixprecParam *p, const AutoParam *a, guint level)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  _MixprecParamDTypes dt = a->base;
  gboolean fp8 = a->ladder[level] == LEVEL_FP8;

  if (a->ladder[level] == LEVEL_FP32)
    {
      dt.working = dt.grad = dt.accum = dt.comm = MIXPREC_DTYPE_FLOAT32;
      dt.has_master = FALSE;
    }
  _mixprec_param_set_dtypes (p, &dt);
  if (fp8 && !s->fp8)
    {
      MixprecFp8Recipe *recipe = mixprec_config_get_fp8_recipe (self->config);

      /* Back to FP8: a scaling of its own, fresh. */
      s->fp8 = TRUE;
      g_clear_object (&s->fp8_scaling);
      s->fp8_scaling = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_FORWARD);
      s->fp8_amax = 0.0f;
    }
  else if (!fp8 && s->fp8)
    {
      s->fp8 = FALSE;
      g_clear_object (&s->fp8_scaling);
    }
  s->working = s->grad = NULL;
  s->master = NULL;
  s->fp8_data = s->fp8_scales = NULL;
  s->n_fp8_scales = 0;
  s->handed = 0;
  s->grad_exposed = FALSE;
  s->grad_stale = FALSE;
}

/* Slot @k of @p's optimizer state, whole, into @out (numel elements of
 * the state dtype): this rank's own where it holds it all, else every
 * rank's slice of @p's unit gathered (collective). */
static gboolean
whole_state (MixprecEngine *self, MixprecParam *p, guint k, gpointer out, GError **error)
{
  Group *g = _mixprec_engine_group_of (self, p);
  Unit *u = _mixprec_engine_unit_of (self, p);
  _MixprecParamStorage *st = _mixprec_param_get_storage (p);
  gsize ssize = mixprec_dtype_get_size (self->state_dtype);
  guint64 numel = mixprec_param_get_numel (p), e0 = st->offset - u->flat;
  g_autofree guint8 *whole = NULL;
  GError *local = NULL;

  if (!g->state_local)
    {
      memcpy (out, _mixprec_engine_at (g->states[k], self->state_dtype, st->offset), numel * ssize);
      return TRUE;
    }
  whole = g_malloc (MAX (u->padded, 1) * ssize);
  if (!_mixprec_engine_before_comm (self, error))
    return FALSE;
  if (!mixprec_comm_all_gather (self->comm, _mixprec_engine_at (g->states[k], self->state_dtype, u->local),
                                whole, UNIT_SLICE (self, u), self->state_dtype, &local))
    return _mixprec_engine_comm_failed (error, local, "gathering optimizer state for auto-precision");
  memcpy (out, whole + e0 * ssize, numel * ssize);
  return TRUE;
}

/* Lays the buffers out again with every parameter at @levels[i]. With
 * @keep, the FP32 values and optimizer state go over to the new layout
 * and the working copies are rounded from them; without, they are left
 * for a checkpoint load to write. */
static gboolean
relayout (MixprecEngine *self, const guint *levels, gboolean keep, GError **error)
{
  struct _MixprecEngineAutoPrec *ap = self->autoprec;
  g_autoptr(GArray) shards = NULL;
  g_autofree Kept *kept = NULL;
  guint n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  gsize ssize = mixprec_dtype_get_size (self->state_dtype);
  gboolean ok = TRUE;

  n_slots = MIN (n_slots, 16);
  keep = keep && self->prepared;
  /* Every value of every parameter, whole on every rank (ZeRO-1 and 2
   * shard the masters and state, and the new layout slices them anew):
   * 4 bytes per element and per FP32 state slot, for the change only. */
  if (keep)
    {
      kept = g_new0 (Kept, self->params->len);
      for (guint i = 0; i < self->params->len && ok; i++)
        {
          MixprecParam *p = g_ptr_array_index (self->params, i);
          guint64 n = mixprec_param_get_numel (p);
          g_autoptr(GBytes) master = mixprec_engine_gather_master (self, mixprec_param_get_name (p), error);

          ok = master != NULL;
          if (ok)
            kept[i].master = g_memdup2 (g_bytes_get_data (master, NULL), n * sizeof (gfloat));
          for (guint k = 0; k < n_slots && ok; k++)
            {
              kept[i].states[k] = g_malloc (MAX (n, 1) * ssize);
              ok = whole_state (self, p, k, kept[i].states[k], error);
            }
        }
    }

  if (!ok)
    goto out;
  mixprec_engine_release_all (self);
  for (guint j = 0; j < self->groups->len; j++)
    _mixprec_engine_group_free (self, g_ptr_array_index (self->groups, j));
  g_ptr_array_set_size (self->groups, 0);
  _mixprec_engine_numerics_relayout (self);
  self->prepared = FALSE;
  for (guint i = 0; i < self->params->len; i++)
    {
      AutoParam *a = &g_array_index (ap->params, AutoParam, i);

      a->level = levels[i];
      apply_level (self, g_ptr_array_index (self->params, i), a, a->level);
    }
  ok = mixprec_engine_prepare (self, error);
  if (ok && keep)
    {
      shards = _mixprec_engine_get_load_shards (self, error);
      ok = shards != NULL;
      /* This rank's part of each: all of it, or its slice. */
      for (guint i = 0; ok && i < shards->len; i++)
        {
          const _MixprecEngineShard *sh = &g_array_index (shards, _MixprecEngineShard, i);
          guint64 n = sh->end - sh->begin;

          if (n == 0)
            continue;
          /* As the layout keeps them: FP32 masters, a working copy
           * without (rounded to nearest even, exact for the values it
           * held), or a working copy and its remainder (exact). */
          ok = _mixprec_engine_shard_store_f32 (sh, 0, kept[i].master + sh->begin, n, error);
          for (guint k = 0; ok && k < n_slots; k++)
            memcpy (sh->states[k], (guint8 *) kept[i].states[k] + sh->begin * ssize, n * ssize);
        }
      ok = ok && _mixprec_engine_refresh_working (self, error);
    }
out:
  for (guint i = 0; kept != NULL && i < self->params->len; i++)
    {
      g_free (kept[i].master);
      for (guint k = 0; k < n_slots; k++)
        g_free (kept[i].states[k]);
    }
  return ok;
}

/* ---------------------------------------------------------------- deciding */

/* The worst watched statistic of parameter @name recorded at this step,
 * and which it is; FALSE when none is recorded. */
static gboolean
worst_stat (const _MixprecAutoPrecSettings *a,
            MixprecNumerics                *nm,
            const gchar                    *name,
            gdouble                        *value,
            const gchar                   **stat)
{
  gboolean any = FALSE;

  for (guint k = 0; a->watch[k] != NULL; k++)
    {
      gdouble v;

      if (!mixprec_numerics_get_stat (nm, name, a->watch[k], &v) || v != v)
        continue;
      if (!any || v > *value)
        {
          *value = v;
          *stat = a->watch[k];
        }
      any = TRUE;
    }
  return any;
}

typedef struct {
  guint index;
  gdouble value;
} Candidate;

static gint
by_worst (gconstpointer x, gconstpointer y)
{
  const Candidate *a = x, *b = y;

  if (a->value != b->value)
    return a->value > b->value ? -1 : 1;
  return a->index < b->index ? -1 : a->index > b->index;
}

static void
log_change (MixprecEngine *self, MixprecParam *p, const AutoParam *a, guint from, guint to,
            const gchar *reason, const gchar *stat, gdouble value, guint64 window)
{
  const _MixprecAutoPrecSettings *s = self->autoprec->settings;
  g_autofree gchar *message = NULL;
  gchar step[24], rank[24], shown[G_ASCII_DTOSTR_BUF_SIZE];
  const GLogField fields[] = {
    { "GLIB_DOMAIN", G_LOG_DOMAIN, -1 },
    { "PRIORITY", self->rank == 0 ? "5" : "7", -1 },
    { "MESSAGE", NULL, -1 },
    { "MIXPREC_EVENT", "auto-precision", -1 },
    { "MIXPREC_RANK", rank, -1 },
    { "MIXPREC_STEP", step, -1 },
    { "MIXPREC_PARAM", mixprec_param_get_name (p), -1 },
    { "MIXPREC_FROM_DTYPE", level_name (a, from), -1 },
    { "MIXPREC_TO_DTYPE", level_name (a, to), -1 },
    { "MIXPREC_REASON", reason, -1 },
    { "MIXPREC_STAT", stat != NULL ? stat : "", -1 },
    { "MIXPREC_VALUE", g_ascii_dtostr (shown, sizeof shown, value), -1 },
  };
  GLogField *f = (GLogField *) fields;

  if (to > from)
    message = g_strdup_printf ("step %" G_GUINT64_FORMAT ": auto-precision widens %s from %s to %s: "
                               "%s above %g for %" G_GUINT64_FORMAT " measured steps (now %g)",
                               self->steps, mixprec_param_get_name (p), level_name (a, from),
                               level_name (a, to), stat, s->widen_above, window, value);
  else if (stat != NULL)
    message = g_strdup_printf ("step %" G_GUINT64_FORMAT ": auto-precision narrows %s from %s to %s: "
                               "%s below %g for %" G_GUINT64_FORMAT " measured steps",
                               self->steps, mixprec_param_get_name (p), level_name (a, from),
                               level_name (a, to), stat, s->narrow_below, window);
  else
    message = g_strdup_printf ("step %" G_GUINT64_FORMAT ": auto-precision narrows %s from %s to %s: "
                               "none of the watched statistics applies at %s, for %" G_GUINT64_FORMAT
                               " measured steps: trying %s again",
                               self->steps, mixprec_param_get_name (p), level_name (a, from),
                               level_name (a, to), level_name (a, from), window, level_name (a, to));
  f[2].value = message;
  g_snprintf (step, sizeof step, "%" G_GUINT64_FORMAT, self->steps);
  g_snprintf (rank, sizeof rank, "%u", self->rank);
  g_log_structured_array (self->rank == 0 ? G_LOG_LEVEL_MESSAGE : G_LOG_LEVEL_DEBUG,
                          fields, G_N_ELEMENTS (fields));
}

static void
record (MixprecEngine *self)
{
  struct _MixprecEngineAutoPrec *ap = self->autoprec;
  g_autoptr(GPtrArray) tags = g_ptr_array_new_with_free_func (g_free);
  g_autofree gdouble *values = g_new (gdouble, ap->params->len + 1);

  for (guint i = 0; i < ap->params->len; i++)
    {
      const AutoParam *a = &g_array_index (ap->params, AutoParam, i);

      g_ptr_array_add (tags, g_strdup_printf ("AutoPrecision/%s/bits",
                                              mixprec_param_get_name (g_ptr_array_index (self->params, i))));
      values[i] = level_bits (a, a->level);
    }
  g_ptr_array_add (tags, g_strdup ("AutoPrecision/widened_fraction"));
  values[ap->params->len] = ap->total_numel > 0
                            ? (gdouble) widened_numel (self, ap) / (gdouble) ap->total_numel : 0.0;
  _mixprec_engine_record_scalars (self, (const gchar * const *) tags->pdata, values, tags->len,
                                  self->steps);
}

gboolean
_mixprec_engine_autoprec_check_step (MixprecEngine *self,
                                     GError       **error)
{
  if (self->autoprec == NULL)
    return TRUE;
  /* A caller holding a buffer's address would read freed memory after a
   * change: refused at the first step after it took one, before the step
   * does anything. */
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);

      if (_mixprec_param_get_storage (p)->address_taken)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                       "mixprec.auto_precision: the address of a buffer of parameter '%s' was "
                       "handed out (mixprec_param_get_working_data(), _get_grad_data(), "
                       "_get_master_data(), _get_buffer_address(), _get_device_address(); "
                       "mixprec.torch reads its tensors so), and auto-precision moves the "
                       "buffers of the parameters it widens; read the values with "
                       "mixprec_param_get_working() and hand gradients over with "
                       "mixprec_param_set_grad(), or set mixprec.auto_precision.enabled to false",
                       mixprec_param_get_name (p));
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
_mixprec_engine_autoprec_step (MixprecEngine *self,
                               GError       **error)
{
  struct _MixprecEngineAutoPrec *ap = self->autoprec;
  const _MixprecAutoPrecSettings *s;
  g_autoptr(MixprecNumerics) nm = NULL;
  g_autoptr(GArray) candidates = NULL;
  g_autofree guint *levels = NULL;
  guint64 widened, budget;
  gboolean changed = FALSE;

  if (ap == NULL)
    return TRUE;
  s = ap->settings;
  if (ap->params == NULL)
    make_params (self, ap);
  nm = mixprec_engine_get_numerics (self);
  /* Only a step that measured, and applied: a skipped step's gradients
   * are those of a scale being lowered, and it measures no update. */
  if (nm == NULL || mixprec_numerics_get_step (nm) != self->steps || !mixprec_numerics_get_applied (nm))
    return TRUE;

  levels = g_new (guint, ap->params->len);
  candidates = g_array_new (FALSE, FALSE, sizeof (Candidate));
  for (guint i = 0; i < ap->params->len; i++)
    {
      AutoParam *a = &g_array_index (ap->params, AutoParam, i);
      MixprecParam *p = g_ptr_array_index (self->params, i);
      const gchar *stat = NULL;
      gdouble worst = 0.0;
      gboolean any = worst_stat (s, nm, mixprec_param_get_name (p), &worst, &stat);

      levels[i] = a->level;
      if (mixprec_param_get_numel (p) == 0)
        continue;
      a->above = any && worst > s->widen_above ? a->above + 1 : 0;
      /* Nothing recorded (an FP8 statistic after the copy was widened
       * away): no evidence against trying the narrower dtype again. */
      a->below = !any || worst < s->narrow_below ? a->below + 1 : 0;
      if (a->level > 0 && s->narrow_patience > 0 && a->below >= s->narrow_patience)
        {
          levels[i] = a->level - 1;
          log_change (self, p, a, a->level, levels[i], any ? "below" : "not-measured", any ? stat : NULL,
                      worst, a->below);
          changed = TRUE;
        }
      else if (a->level + 1 < a->n_levels && a->above >= s->widen_patience)
        {
          Candidate c = { i, worst };

          g_array_append_val (candidates, c);
        }
    }
  /* The worst first, within the budget of widened elements (narrowing
   * above made room first). */
  g_array_sort (candidates, by_worst);
  widened = 0;
  for (guint i = 0; i < ap->params->len; i++)
    if (levels[i] > 0)
      widened += mixprec_param_get_numel (g_ptr_array_index (self->params, i));
  budget = (guint64) (s->max_widened_fraction * (gdouble) ap->total_numel);
  for (guint k = 0; k < candidates->len; k++)
    {
      guint i = g_array_index (candidates, Candidate, k).index;
      AutoParam *a = &g_array_index (ap->params, AutoParam, i);
      MixprecParam *p = g_ptr_array_index (self->params, i);
      guint64 extra = a->level == 0 ? mixprec_param_get_numel (p) : 0;
      const gchar *stat = NULL;
      gdouble worst = 0.0;

      if (widened + extra > budget)
        continue;
      widened += extra;
      levels[i] = a->level + 1;
      worst_stat (s, nm, mixprec_param_get_name (p), &worst, &stat);
      log_change (self, p, a, a->level, levels[i], "above", stat, worst, a->above);
      changed = TRUE;
    }
  for (guint i = 0; changed && i < ap->params->len; i++)
    {
      AutoParam *a = &g_array_index (ap->params, AutoParam, i);

      if (levels[i] != a->level)
        {
          a->above = a->below = 0;
          a->changed_at = self->steps;
        }
    }
  if (changed && !relayout (self, levels, TRUE, error))
    {
      g_prefix_error (error, "step %" G_GUINT64_FORMAT ": mixprec.auto_precision: ", self->steps);
      return FALSE;
    }
  record (self);
  return TRUE;
}

/* ---------------------------------------------------------------- checkpoints */

GVariant *
_mixprec_engine_autoprec_save_state (MixprecEngine *self)
{
  struct _MixprecEngineAutoPrec *ap = self->autoprec;
  GVariantBuilder b;

  if (ap == NULL)
    return NULL;
  if (ap->params == NULL)
    make_params (self, ap);
  g_variant_builder_init (&b, G_VARIANT_TYPE_VARDICT);
  for (guint i = 0; i < ap->params->len; i++)
    {
      const AutoParam *a = &g_array_index (ap->params, AutoParam, i);

      g_variant_builder_add (&b, "{sv}", mixprec_param_get_name (g_ptr_array_index (self->params, i)),
                             g_variant_new ("(sttt)", level_name (a, a->level), a->above, a->below,
                                            a->changed_at));
    }
  return g_variant_ref_sink (g_variant_builder_end (&b));
}

gboolean
_mixprec_engine_autoprec_restore (MixprecEngine *self,
                                  const gchar   *path,
                                  GVariant      *state,
                                  GError       **error)
{
  struct _MixprecEngineAutoPrec *ap = self->autoprec;
  g_autofree guint *levels = NULL;
  g_autofree guint64 *counts = NULL;
  gboolean differ = FALSE;

  /* Weights carry no dtype: an engine without auto-precision loads them
   * at its policy's precision. */
  if (ap == NULL)
    return TRUE;
  if (ap->params == NULL)
    make_params (self, ap);
  levels = g_new0 (guint, ap->params->len);
  counts = g_new0 (guint64, 3 * ap->params->len);
  for (guint i = 0; state != NULL && i < ap->params->len; i++)
    {
      const AutoParam *a = &g_array_index (ap->params, AutoParam, i);
      const gchar *name = mixprec_param_get_name (g_ptr_array_index (self->params, i));
      g_autoptr(GVariant) v = g_variant_lookup_value (state, name, G_VARIANT_TYPE ("(sttt)"));
      const gchar *dtype;
      guint l;

      if (v == NULL)
        continue;
      g_variant_get (v, "(&sttt)", &dtype, &counts[3 * i], &counts[3 * i + 1], &counts[3 * i + 2]);
      for (l = 0; l < a->n_levels && !g_str_equal (level_name (a, l), dtype); l++)
        ;
      if (l == a->n_levels)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE,
                       "%s: auto_precision: parameter '%s' was saved in %s, which this engine's "
                       "policy and mixprec.auto_precision.widen_to do not allow it", path, name,
                       dtype);
          return FALSE;
        }
      levels[i] = l;
    }
  for (guint i = 0; i < ap->params->len; i++)
    {
      AutoParam *a = &g_array_index (ap->params, AutoParam, i);

      differ |= levels[i] != a->level;
      a->above = counts[3 * i];
      a->below = counts[3 * i + 1];
      a->changed_at = counts[3 * i + 2];
    }
  /* The values go over too: a load that fails after this leaves the
   * engine as it was, in the saved dtypes. */
  return !differ || relayout (self, levels, TRUE, error);
}
