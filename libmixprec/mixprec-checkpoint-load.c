/* mixprec-checkpoint-load.c — mixprec_engine_load_checkpoint(): each rank
 * copies into the ranges it owns whatever saved pieces overlap them, so a
 * checkpoint loads under any world size, ZeRO stage and precision mode.
 * Everything is checked before the first value is written. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-engine-private.h"

/* FP32 values staged per read when the engine keeps no master copy. */
#define STAGE_ELEMENTS ((guint64) 1 << 18)

static gboolean
slots_match (const gchar * const *engine_slots,
             const gchar * const *saved)
{
  guint n = engine_slots != NULL ? g_strv_length ((GStrv) engine_slots) : 0;

  if (n != g_strv_length ((GStrv) saved))
    return FALSE;
  for (guint i = 0; i < n; i++)
    if (!g_str_equal (engine_slots[i], saved[i]))
      return FALSE;
  return TRUE;
}

static gboolean
check_params (MixprecCheckpoint          *ckpt,
              GArray                     *shards,
              MixprecCheckpointLoadFlags  flags,
              GError                    **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  g_autoptr(GHashTable) registered = g_hash_table_new (g_str_hash, g_str_equal);
  const gchar *where = mixprec_checkpoint_get_path (ckpt);

  for (guint i = 0; i < shards->len; i++)
    {
      MixprecParam *param = g_array_index (shards, _MixprecEngineShard, i).param;
      const gchar *name = mixprec_param_get_name (param);
      const _MixprecManifestParam *p = g_hash_table_lookup (m->param_index, name);
      guint n_dims;
      const guint64 *shape = mixprec_param_get_shape (param, &n_dims);
      g_autofree gchar *shown = _mixprec_checkpoint_format_shape (shape, n_dims, ", ");

      g_hash_table_add (registered, (gpointer) name);
      if (p == NULL)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_MISSING_PARAM,
                       "%s: holds no parameter '%s' (shape [%s]), which the engine registered",
                       where, name, shown);
          return FALSE;
        }
      if (p->n_dims != n_dims || memcmp (p->shape, shape, n_dims * sizeof (guint64)) != 0)
        {
          g_autofree gchar *saved = _mixprec_checkpoint_format_shape (p->shape, p->n_dims, ", ");

          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_SHAPE_MISMATCH,
                       "%s: parameter '%s' has shape [%s], but the engine registered [%s]",
                       where, name, saved, shown);
          return FALSE;
        }
    }
  if (flags & MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS)
    return TRUE;
  for (guint i = 0; i < m->params->len; i++)
    {
      const _MixprecManifestParam *p = g_ptr_array_index (m->params, i);

      if (!g_hash_table_contains (registered, p->name))
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_UNKNOWN_PARAM,
                       "%s: holds parameter '%s', which the engine did not register (load "
                       "with MIXPREC_CHECKPOINT_LOAD_IGNORE_EXTRA_PARAMS to skip it)",
                       where, p->name);
          return FALSE;
        }
    }
  return TRUE;
}

/* Every file and tensor this rank will read, checked: sizes and SHA-256
 * of the files, then each overlapping piece's tensors. */
static gboolean
check_sources (MixprecCheckpoint   *ckpt,
               GArray              *shards,
               const gchar * const *slots,
               GError             **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);

  for (guint i = 0; i < shards->len; i++)
    {
      const _MixprecEngineShard *sh = &g_array_index (shards, _MixprecEngineShard, i);
      const _MixprecManifestParam *p =
        g_hash_table_lookup (m->param_index, mixprec_param_get_name (sh->param));

      for (guint k = 0; k < p->pieces->len; k++)
        {
          const _MixprecManifestPiece *piece = &g_array_index (p->pieces, _MixprecManifestPiece, k);
          _MixprecSafetensors *st;

          if (MAX (piece->begin, sh->begin) >= MIN (piece->end, sh->end))
            continue;
          if (!_mixprec_checkpoint_verify_file (ckpt, piece->file, error) ||
              _mixprec_checkpoint_piece_tensor (ckpt, p, piece, "master", &st, error) == NULL)
            return FALSE;
          for (guint s = 0; slots != NULL && slots[s] != NULL; s++)
            if (_mixprec_checkpoint_piece_tensor (ckpt, p, piece, slots[s], &st, error) == NULL)
              return FALSE;
        }
    }
  return TRUE;
}

/* Writes saved master values [lo, hi) of @sh's parameter into the engine:
 * into the master copy, or rounded to nearest even into the working copy
 * when there is none. */
static gboolean
copy_master (const _MixprecEngineShard       *sh,
             _MixprecSafetensors             *st,
             const _MixprecSafetensorsTensor *t,
             guint64                          piece_begin,
             guint64                          lo,
             guint64                          hi,
             GError                         **error)
{
  g_autofree gfloat *stage = NULL;
  gsize wsize;

  if (sh->master != NULL)
    return _mixprec_safetensors_read_f32 (st, t, lo - piece_begin, hi - lo,
                                          sh->master + (lo - sh->begin), error);

  wsize = mixprec_dtype_get_size (sh->working_dtype);
  stage = g_new (gfloat, MIN (hi - lo, STAGE_ELEMENTS));
  for (guint64 at = lo; at < hi; at += STAGE_ELEMENTS)
    {
      guint64 n = MIN (hi - at, STAGE_ELEMENTS);

      if (!_mixprec_safetensors_read_f32 (st, t, at - piece_begin, n, stage, error) ||
          !mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, stage, sh->working_dtype,
                                  (guint8 *) sh->working + (at - sh->begin) * wsize, n,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
        return FALSE;
    }
  return TRUE;
}

/* One state slot's range. Saved state of either dtype is read as FP32
 * (bfloat16 widens exactly); a bfloat16 engine rounds it to nearest even,
 * so an FP32-state checkpoint resumes with bf16.bf16_optimizer_states the
 * way the first step would have stored it, and the other way is exact. */
static gboolean
copy_state (const _MixprecEngineShard       *sh,
            guint                            slot,
            _MixprecSafetensors             *st,
            const _MixprecSafetensorsTensor *t,
            guint64                          first,
            guint64                          at,
            guint64                          count,
            GError                         **error)
{
  g_autofree gfloat *wide = NULL;

  if (sh->state_dtype == MIXPREC_DTYPE_FLOAT32)
    return _mixprec_safetensors_read_f32 (st, t, first, count, (gfloat *) sh->states[slot] + at, error);
  wide = g_new (gfloat, MAX (count, 1));
  if (!_mixprec_safetensors_read_f32 (st, t, first, count, wide, error))
    return FALSE;
  return mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, wide, sh->state_dtype,
                                (guint16 *) sh->states[slot] + at, count,
                                MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error);
}

static gboolean
copy_values (MixprecCheckpoint   *ckpt,
             GArray              *shards,
             const gchar * const *slots,
             GError             **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);

  for (guint i = 0; i < shards->len; i++)
    {
      const _MixprecEngineShard *sh = &g_array_index (shards, _MixprecEngineShard, i);
      const _MixprecManifestParam *p =
        g_hash_table_lookup (m->param_index, mixprec_param_get_name (sh->param));

      for (guint k = 0; k < p->pieces->len; k++)
        {
          const _MixprecManifestPiece *piece = &g_array_index (p->pieces, _MixprecManifestPiece, k);
          guint64 lo = MAX (piece->begin, sh->begin);
          guint64 hi = MIN (piece->end, sh->end);
          const _MixprecSafetensorsTensor *t;
          _MixprecSafetensors *st;

          if (lo >= hi)
            continue;
          t = _mixprec_checkpoint_piece_tensor (ckpt, p, piece, "master", &st, error);
          if (t == NULL || !copy_master (sh, st, t, piece->begin, lo, hi, error))
            return FALSE;
          for (guint s = 0; slots != NULL && slots[s] != NULL; s++)
            {
              t = _mixprec_checkpoint_piece_tensor (ckpt, p, piece, slots[s], &st, error);
              if (t == NULL || !copy_state (sh, s, st, t, lo - piece->begin, lo - sh->begin,
                                            hi - lo, error))
                return FALSE;
            }
        }
    }
  return TRUE;
}

static gboolean
restore_scaler (MixprecEngine              *engine,
                MixprecCheckpoint          *ckpt,
                MixprecCheckpointLoadFlags  flags,
                GError                    **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  MixprecConfig *config = mixprec_engine_get_config (engine);
  const gchar *mode = mixprec_precision_mode_get_name (mixprec_config_get_precision_mode (config));
  const gchar *low = mixprec_dtype_get_name (mixprec_config_get_low_dtype (config));
  g_autoptr(GError) local_error = NULL;

  if (flags & MIXPREC_CHECKPOINT_LOAD_RESET_SCALER)
    return TRUE;
  /* A scaler that guards FP16 gradients has nothing to hand to one that
   * does not (and back): the new mode's scaler starts fresh. */
  if (_mixprec_checkpoint_mode_scales (m->precision_mode, m->low_dtype) !=
      _mixprec_checkpoint_mode_scales (mode, low))
    return TRUE;
  if (!mixprec_loss_scaler_restore_state (mixprec_engine_get_loss_scaler (engine),
                                          m->scaler_state, &local_error))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE,
                   "%s/%s: the saved loss scaler (%s) does not fit this engine's (%s): %s; load "
                   "with MIXPREC_CHECKPOINT_LOAD_RESET_SCALER to start the scaler from the "
                   "configuration", mixprec_checkpoint_get_path (ckpt),
                   _MIXPREC_CHECKPOINT_MANIFEST, m->scaler_type,
                   G_OBJECT_TYPE_NAME (mixprec_engine_get_loss_scaler (engine)),
                   local_error->message);
      return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_checkpoint_load (MixprecEngine              *engine,
                          const gchar                *dir,
                          MixprecCheckpointLoadFlags  flags,
                          GError                    **error)
{
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GArray) shards = NULL;
  g_autoptr(GError) local_error = NULL;
  const _MixprecManifest *m = NULL;
  const gchar * const *engine_slots;
  const gchar * const *slots = NULL;
  gboolean weights_only = (flags & MIXPREC_CHECKPOINT_LOAD_WEIGHTS_ONLY) != 0;
  gboolean ok;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (engine), FALSE);
  g_return_val_if_fail (dir != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  shards = _mixprec_engine_get_shards (engine, error);
  if (shards == NULL)
    return FALSE;
  engine_slots = mixprec_feature_get_state_names (_mixprec_engine_get_optimizer (engine));

  ckpt = mixprec_checkpoint_open (dir, &local_error);
  ok = ckpt != NULL;
  if (ok)
    {
      m = _mixprec_checkpoint_get_manifest (ckpt);
      if (!weights_only)
        {
          slots = (const gchar * const *) m->state_names;
          if (!slots_match (engine_slots, slots))
            {
              g_autofree gchar *saved = g_strjoinv (", ", m->state_names);
              g_autofree gchar *ours = engine_slots != NULL ? g_strjoinv (", ", (GStrv) engine_slots)
                                                            : g_strdup ("");

              g_set_error (&local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE,
                           "%s/%s: the '%s' optimizer saved the state slots [%s], but this engine's "
                           "'%s' keeps [%s]; load with MIXPREC_CHECKPOINT_LOAD_WEIGHTS_ONLY to take "
                           "the weights alone", mixprec_checkpoint_get_path (ckpt),
                           _MIXPREC_CHECKPOINT_MANIFEST, m->optimizer_name, saved,
                           mixprec_feature_get_name (_mixprec_engine_get_optimizer (engine)), ours);
              ok = FALSE;
            }
        }
      ok = ok && check_params (ckpt, shards, flags, &local_error) &&
           check_sources (ckpt, shards, slots, &local_error) &&
           (weights_only || restore_scaler (engine, ckpt, flags, &local_error)) &&
           (weights_only || _mixprec_engine_restore_fp8 (engine, mixprec_checkpoint_get_path (ckpt),
                                                         m->fp8_states, &local_error)) &&
           copy_values (ckpt, shards, slots, &local_error);
    }
  if (ok && !weights_only)
    {
      _MixprecEngineCounters counters;

      counters.steps = m->step;
      counters.applied_steps = m->applied_steps;
      counters.skipped_steps = m->skipped_steps;
      counters.seed = m->seed;
      _mixprec_engine_set_counters (engine, &counters);
      mixprec_lr_schedule_set_position (_mixprec_engine_get_schedule (engine), m->lr_position);
    }

  /* Refreshing the working copies is collective: with several ranks,
   * a rank whose checks failed (its values untouched) still takes part so
   * that the others do not wait for it forever. */
  if ((ok || _mixprec_engine_get_world_size (engine) > 1) &&
      !_mixprec_engine_refresh_working (engine, ok ? &local_error : NULL))
    ok = FALSE;
  if (!ok)
    {
      if (local_error == NULL)
        g_set_error (&local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_IO,
                     "%s: refreshing the working copies after the load failed", dir);
      g_propagate_error (error, g_steal_pointer (&local_error));
    }
  return ok;
}
