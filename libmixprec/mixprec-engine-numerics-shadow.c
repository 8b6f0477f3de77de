/* mixprec-engine-numerics-shadow.c — the FP32 shadow of per-tensor
 * numerics (mixprec.numerics.shadow, shadow_fraction): for the parameters
 * chosen, an FP32 copy of this rank's part stepped every applied step by
 * the engine's optimizer with the step's gradients, in FP32 with FP32
 * state, and how far the working copies have drifted from it, measured
 * with the rest of the numerics (mixprec-engine-numerics.c); and this
 * rank's part in checkpoints. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-config-private.h"
#include "mixprec-dtype-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-numerics-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-registry-private.h"
#include "mixprec-safetensors-private.h"

/* Whether the FP32 shadow follows parameter @i (registration order) of
 * @name: named by a pattern of mixprec.numerics.shadow, or one of an
 * evenly spread shadow_fraction of all. */
gboolean
_mixprec_numerics_shadowed (MixprecEngine *self, guint i, const gchar *name)
{
  gdouble fraction;
  const gchar * const *patterns = _mixprec_config_get_numerics_shadow (self->config, &fraction);

  for (guint k = 0; patterns != NULL && patterns[k] != NULL; k++)
    if (g_pattern_match_simple (patterns[k], name))
      return TRUE;
  return floor ((i + 1) * fraction) > floor (i * fraction);
}

typedef struct {
  MixprecEngine *engine;
  struct _MixprecEngineNumerics *nm;
  MixprecOptimizerStepV1 args;
  GError *error;
} ShadowJob;

/* Each shadowed slot this rank owns: its FP32 values taken from the
 * masters (@start), or stepped by the engine's optimizer with the step's
 * gradients and arguments, in FP32 throughout (no working copy). */
static void
shadow_slots (ShadowJob *job, gsize first, gsize end, gboolean start)
{
  MixprecEngine *self = job->engine;
  struct _MixprecEngineNumerics *nm = job->nm;
  guint n_states = mixprec_feature_get_n_state_slots (self->optimizer);

  for (gsize k = first; k < end; k++)
    {
      const NumSlot *slot = &g_array_index (nm->slots, NumSlot, g_array_index (nm->owned, guint64, k));
      const NumParam *np = &g_array_index (nm->params, NumParam, slot->param);
      guint64 n = slot->hi - slot->lo;
      gfloat *states[G_N_ELEMENTS (nm->shadow_states)];
      MixprecOptimizerStepV1 args = job->args;
      GError *error = NULL;
      MixprecDType dtype;
      gconstpointer grad;
      gfloat *master;
      gpointer working;

      if (!np->shadow)
        continue;
      if (start)
        {
          /* Without FP32 values, from the working copy's. */
          _mixprec_numerics_values_run (self, np, slot->lo, &master, &working);
          if (master != NULL)
            memcpy (nm->shadow + slot->shadow_at, master, n * sizeof (gfloat));
          else
            _mixprec_convert_kernels ()->to_f32[np->group->dtypes.working] (working, nm->shadow + slot->shadow_at,
                                                                            n, 0, 0);
          continue;
        }
      grad = _mixprec_numerics_grad_run (self, np, slot->lo, &dtype);
      for (guint j = 0; j < n_states; j++)
        states[j] = nm->shadow_states[j] + slot->shadow_at;
      args.first_index = slot->index;
      args.grad_dtype = (MixprecPluginDType) dtype;
      args.seed = _mixprec_engine_step_seed (self, np->group->index);
      if (!_mixprec_feature_optimizer_step (self->optimizer, &args, np->group->hparams,
                                            nm->shadow + slot->shadow_at, grad, states, NULL, n, &error) &&
          !g_atomic_pointer_compare_and_exchange (&job->error, NULL, error))
        g_error_free (error);
    }
}

static void
shadow_start (gsize first, gsize end, gpointer data)
{
  shadow_slots (data, first, end, TRUE);
}

static void
shadow_step (gsize first, gsize end, gpointer data)
{
  shadow_slots (data, first, end, FALSE);
}

/* Ordinal of FP32 or 16-bit @bits among the values of their format: the
 * distance in ulps of two finite values is the difference. */
static gint64
ordinal (guint32 bits, guint sign_bit)
{
  gint64 magnitude = bits & ((1u << sign_bit) - 1);

  return (bits >> sign_bit) & 1 ? -magnitude : magnitude;
}

/* The drift of the working copy from the shadow, for each shadowed slot
 * this rank owns: the sums for the relative L2 distance, and the most
 * ulps of the working format between a working value and the shadow's
 * value rounded to that format (to nearest even). */
static void
drift_slots (gsize first, gsize end, gpointer data)
{
  ShadowJob *job = data;
  struct _MixprecEngineNumerics *nm = job->nm;

  for (gsize k = first; k < end; k++)
    {
      guint64 s = g_array_index (nm->owned, guint64, k);
      const NumSlot *slot = &g_array_index (nm->slots, NumSlot, s);
      const NumParam *np = &g_array_index (nm->params, NumParam, slot->param);
      const gfloat *shadow = nm->shadow + slot->shadow_at;
      MixprecDType wdtype = np->group->dtypes.working;
      gdouble *rec = nm->records + s * N_REC, diff = 0, norm = 0;
      guint64 ulps = 0;
      gfloat *master;
      gpointer working;

      if (!np->shadow)
        continue;
      _mixprec_numerics_values_run (job->engine, np, slot->lo, &master, &working);
      if (working == NULL)
        {
          working = master;
          wdtype = MIXPREC_DTYPE_FLOAT32;
        }
      for (guint64 i = 0; i < slot->hi - slot->lo; i++)
        {
          guint32 wb, sb;
          gfloat w;
          gint64 apart;

          switch (wdtype)
            {
            case MIXPREC_DTYPE_FLOAT16:
              wb = ((const guint16 *) working)[i];
              sb = _mixprec_f32_to_f16_rne (shadow[i]);
              w = _mixprec_f16_to_f32 ((guint16) wb);
              apart = ordinal (wb, 15) - ordinal (sb, 15);
              break;
            case MIXPREC_DTYPE_BFLOAT16:
              wb = ((const guint16 *) working)[i];
              sb = _mixprec_f32_to_bf16_rne (shadow[i]);
              w = _mixprec_bf16_to_f32 ((guint16) wb);
              apart = ordinal (wb, 15) - ordinal (sb, 15);
              break;
            default:
              w = ((const gfloat *) working)[i];
              memcpy (&wb, &w, sizeof wb);
              memcpy (&sb, shadow + i, sizeof sb);
              apart = ordinal (wb, 31) - ordinal (sb, 31);
              break;
            }
          diff += ((gdouble) w - shadow[i]) * ((gdouble) w - shadow[i]);
          norm += (gdouble) shadow[i] * shadow[i];
          if (isfinite (w) && isfinite (shadow[i]))
            ulps = MAX (ulps, (guint64) ABS (apart));
        }
      rec[REC_SHADOW_DIFF_SUMSQ] = diff;
      rec[REC_SHADOW_SUMSQ] = norm;
      rec[REC_SHADOW_ULP] = (gdouble) ulps;
    }
}

gboolean
_mixprec_engine_numerics_shadow (MixprecEngine *self,
                                 gdouble        lr,
                                 gfloat         factor,
                                 GError       **error)
{
  struct _MixprecEngineNumerics *nm = self->numerics;
  ShadowJob job = { self, nm, { 0 }, NULL };
  guint n_states;

  if (nm == NULL)
    return TRUE;
  if (nm->params == NULL)
    _mixprec_numerics_layout (self, nm);
  if (nm->shadow_n == 0)
    return TRUE;
  n_states = mixprec_feature_get_n_state_slots (self->optimizer);
  if (!nm->shadow_started)
    {
      /* From the values the first applied step starts from, with fresh
       * state. */
      nm->shadow = g_new (gfloat, nm->shadow_n);
      for (guint j = 0; j < n_states && j < G_N_ELEMENTS (nm->shadow_states); j++)
        nm->shadow_states[j] = g_new0 (gfloat, nm->shadow_n);
      _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, shadow_start, &job);
      nm->shadow_started = TRUE;
    }
  job.args.step = self->applied_steps;
  job.args.lr = lr;
  job.args.grad_factor = factor;
  job.args.working_dtype = (MixprecPluginDType) MIXPREC_DTYPE_FLOAT32;
  job.args.rounding = MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN;
  _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, shadow_step, &job);
  if (job.error != NULL)
    {
      g_propagate_prefixed_error (error, job.error, "step %" G_GUINT64_FORMAT " (FP32 shadow): ", self->steps);
      return FALSE;
    }
  return TRUE;
}

void
_mixprec_numerics_shadow_drift (MixprecEngine                 *self,
                                struct _MixprecEngineNumerics *nm)
{
  ShadowJob job = { self, nm, { 0 }, NULL };

  if (nm->shadow_started)
    _mixprec_device_dispatch (NULL, nm->owned->len, 16, 1, drift_slots, &job);
}

void
_mixprec_numerics_shadow_free (struct _MixprecEngineNumerics *nm)
{
  g_free (nm->shadow);
  for (guint j = 0; j < G_N_ELEMENTS (nm->shadow_states); j++)
    g_free (nm->shadow_states[j]);
}

/* ---------------------------------------------------------------- in checkpoints
 *
 * Each rank saves its part of the shadow and the shadow's optimizer state
 * in its own shard, with what that part's layout depends on: the world
 * size, the ZeRO stage, its element count and the names of the shadowed
 * parameters. A load into the same layout continues the shadow bit for
 * bit; any other (another world size or selection, a checkpoint saved
 * before the shadow started or without one) starts a fresh shadow at the
 * next applied step, as a run's first step does. */

#define SHADOW_TENSOR "numerics/shadow"
#define SHADOW_LAYOUT_KEY "numerics/shadow_layout"

static guint
shadow_n_states (MixprecEngine *self)
{
  return MIN (mixprec_feature_get_n_state_slots (self->optimizer), G_N_ELEMENTS (self->numerics->shadow_states));
}

static gchar *
shadow_layout (MixprecEngine *self, struct _MixprecEngineNumerics *nm)
{
  g_autoptr(GChecksum) sum = g_checksum_new (G_CHECKSUM_SHA256);

  for (guint i = 0; i < nm->params->len; i++)
    {
      const NumParam *np = &g_array_index (nm->params, NumParam, i);
      const gchar *name = mixprec_param_get_name (np->param);

      if (np->shadow)
        g_checksum_update (sum, (const guchar *) name, (gssize) strlen (name) + 1);
    }
  return g_strdup_printf ("world %u stage %u elements %" G_GUINT64_FORMAT " states %u params %s", self->world,
                          self->stage, nm->shadow_n, shadow_n_states (self), g_checksum_get_string (sum));
}

gchar *
_mixprec_engine_numerics_shadow_state_name (guint k)
{
  return g_strdup_printf ("numerics/shadow_state/%u", k);
}

gboolean
_mixprec_engine_numerics_shadow_saved (MixprecEngine       *self,
                                       const gfloat       **shadow,
                                       const gfloat *const **states,
                                       guint               *n_states,
                                       guint64             *n,
                                       const gchar        **tensor,
                                       const gchar        **layout_key,
                                       gchar              **layout)
{
  struct _MixprecEngineNumerics *nm = self->numerics;

  if (nm == NULL || !nm->shadow_started || nm->shadow_n == 0)
    return FALSE;
  *shadow = nm->shadow;
  *states = (const gfloat *const *) nm->shadow_states;
  *n_states = shadow_n_states (self);
  *n = nm->shadow_n;
  *tensor = SHADOW_TENSOR;
  *layout_key = SHADOW_LAYOUT_KEY;
  *layout = shadow_layout (self, nm);
  return TRUE;
}

static void
shadow_drop (struct _MixprecEngineNumerics *nm)
{
  _mixprec_numerics_shadow_free (nm);
  nm->shadow = NULL;
  memset (nm->shadow_states, 0, sizeof nm->shadow_states);
  nm->shadow_started = FALSE;
}

/* @t: the F32 vector of @nm's shadow_n elements, or an error naming it. */
static gboolean
check_shadow_tensor (_MixprecSafetensors *st, const _MixprecSafetensorsTensor *t, const gchar *name,
                     guint64 n, GError **error)
{
  if (t != NULL && g_strcmp0 (t->dtype, "F32") == 0 && t->n_dims == 1 && t->shape[0] == n)
    return TRUE;
  g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
               "%s: tensor '%s' is %s, but its '%s' metadata says this rank's FP32 shadow has %"
               G_GUINT64_FORMAT " F32 elements", _mixprec_safetensors_get_path (st), name,
               t == NULL ? "missing" : "of another dtype or shape", SHADOW_LAYOUT_KEY, n);
  return FALSE;
}

gboolean
_mixprec_engine_numerics_restore_shadow (MixprecEngine     *self,
                                         MixprecCheckpoint *ckpt,
                                         GError           **error)
{
  struct _MixprecEngineNumerics *nm = self->numerics;
  _MixprecSafetensors *st;
  const _MixprecSafetensorsTensor *t;
  g_autofree gchar *layout = NULL;
  guint n_states;

  if (nm == NULL)
    return TRUE;
  if (nm->params == NULL)
    _mixprec_numerics_layout (self, nm);
  /* Whatever the checkpoint holds, the shadow of the values before the
   * load is no longer theirs. */
  shadow_drop (nm);
  if (ckpt == NULL || nm->shadow_n == 0 || _mixprec_checkpoint_get_manifest (ckpt)->world_size != self->world)
    return TRUE;
  if ((st = _mixprec_checkpoint_get_rank_shard (ckpt, self->rank, error)) == NULL)
    return FALSE;
  layout = shadow_layout (self, nm);
  if ((t = _mixprec_safetensors_lookup (st, SHADOW_TENSOR)) == NULL ||
      g_strcmp0 (_mixprec_safetensors_get_metadata (st, SHADOW_LAYOUT_KEY), layout) != 0)
    return TRUE;
  n_states = shadow_n_states (self);
  if (!check_shadow_tensor (st, t, SHADOW_TENSOR, nm->shadow_n, error))
    return FALSE;
  nm->shadow = g_new (gfloat, nm->shadow_n);
  if (!_mixprec_safetensors_read_f32 (st, t, 0, nm->shadow_n, nm->shadow, error))
    {
      shadow_drop (nm);
      return FALSE;
    }
  for (guint k = 0; k < n_states; k++)
    {
      g_autofree gchar *name = _mixprec_engine_numerics_shadow_state_name (k);

      t = _mixprec_safetensors_lookup (st, name);
      nm->shadow_states[k] = g_new (gfloat, nm->shadow_n);
      if (!check_shadow_tensor (st, t, name, nm->shadow_n, error) ||
          !_mixprec_safetensors_read_f32 (st, t, 0, nm->shadow_n, nm->shadow_states[k], error))
        {
          shadow_drop (nm);
          return FALSE;
        }
    }
  nm->shadow_started = TRUE;
  return TRUE;
}
