/* mixprec-checkpoint-load.c — mixprec_engine_load_checkpoint(): each rank
 * copies into the ranges it owns whatever saved pieces overlap them, so a
 * checkpoint loads under any world size, ZeRO stage and precision mode.
 * Everything is checked before the first value is written. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-engine-private.h"
#include "numeric/numeric-base.h"
#include "numeric/numeric-quant.h"

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

/* Calls @func on every range where a saved piece overlaps a shard. */
typedef gboolean (*OverlapFunc) (MixprecCheckpoint           *ckpt,
                                 const _MixprecManifestParam *p,
                                 const _MixprecManifestPiece *piece,
                                 const _MixprecEngineShard   *sh,
                                 guint64                      lo,
                                 guint64                      hi,
                                 gpointer                     data,
                                 GError                     **error);

static gboolean
for_each_overlap (MixprecCheckpoint *ckpt,
                  GArray            *shards,
                  OverlapFunc        func,
                  gpointer           data,
                  GError           **error)
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

          if (lo < hi && !func (ckpt, p, piece, sh, lo, hi, data, error))
            return FALSE;
        }
    }
  return TRUE;
}

/* Checks one overlapping piece: its file's size and SHA-256, then its
 * tensors. */
static gboolean
check_source (MixprecCheckpoint           *ckpt,
              const _MixprecManifestParam *p,
              const _MixprecManifestPiece *piece,
              const _MixprecEngineShard   *sh,
              guint64                      lo,
              guint64                      hi,
              gpointer                     data,
              GError                     **error)
{
  return _mixprec_checkpoint_verify_file (ckpt, piece->file, error) &&
         _mixprec_checkpoint_check_piece (ckpt, p, piece, GPOINTER_TO_INT (data), error);
}

/* Every file and tensor this rank will read, checked: sizes and SHA-256
 * of the files, then each overlapping piece's tensors. */
static gboolean
check_sources (MixprecCheckpoint   *ckpt,
               GArray              *shards,
               gboolean             weights_only,
               GError             **error)
{
  return for_each_overlap (ckpt, shards, check_source, GINT_TO_POINTER (weights_only), error);
}

/* ---------------------------------------------------------------- masters */

/* Writes saved master values [lo, hi) of @sh's parameter into the engine,
 * as it keeps them:
 *   FP32 master     the saved value decoded to FP32 (exact)
 *   no master       that value rounded to nearest even into the working copy
 *   REMAINDER       that value split into working copy and remainder
 *                   (exact both ways)
 *   KAHAN           a saved Kahan pair as it is; any other value x as the
 *                   working copy w = x rounded to nearest even and the
 *                   compensation x - w (exact in FP32) rounded to nearest
 *                   even, the error the rounding of x made */
static gboolean
load_master (MixprecCheckpoint           *ckpt,
             const _MixprecManifestParam *p,
             const _MixprecManifestPiece *piece,
             const _MixprecEngineShard   *sh,
             guint64                      lo,
             guint64                      hi,
             GError                     **error)
{
  MixprecPluginMasterFormat saved = p->master_format;
  g_autofree gfloat *stage = NULL;

  if (sh->master_format == MIXPREC_PLUGIN_MASTER_FLOAT32 && sh->master != NULL)
    return _mixprec_checkpoint_read_piece (ckpt, p, piece, "master", lo - piece->begin, hi - lo,
                                           sh->master + (lo - sh->begin), error);
  if (sh->master_format == MIXPREC_PLUGIN_MASTER_KAHAN && saved == MIXPREC_PLUGIN_MASTER_KAHAN)
    {
      const _MixprecSafetensorsTensor *t;
      _MixprecSafetensors *st;
      guint8 *w = (guint8 *) sh->working + (lo - sh->begin) * 2;
      guint8 *c = (guint8 *) sh->master_extra + (lo - sh->begin) * 2;

      if ((t = _mixprec_checkpoint_piece_tensor (ckpt, p, piece, "master", &st, error)) == NULL ||
          !_mixprec_safetensors_read_bytes (st, t, (lo - piece->begin) * 2, (hi - lo) * 2, w, error) ||
          (t = _mixprec_checkpoint_piece_tensor_as (ckpt, p, piece, _MIXPREC_CHECKPOINT_COMPENSATION,
                                                    "BF16", piece->end - piece->begin, &st,
                                                    error)) == NULL ||
          !_mixprec_safetensors_read_bytes (st, t, (lo - piece->begin) * 2, (hi - lo) * 2, c, error))
        return FALSE;
#if G_BYTE_ORDER == G_BIG_ENDIAN
      for (guint64 i = 0; i < hi - lo; i++)
        {
          ((guint16 *) w)[i] = GUINT16_FROM_LE (((guint16 *) w)[i]);
          ((guint16 *) c)[i] = GUINT16_FROM_LE (((guint16 *) c)[i]);
        }
#endif
      return TRUE;
    }

  stage = g_new (gfloat, MIN (hi - lo, STAGE_ELEMENTS));
  for (guint64 at = lo; at < hi; at += STAGE_ELEMENTS)
    {
      guint64 n = MIN (hi - at, STAGE_ELEMENTS);
      guint64 e = at - sh->begin;

      if (!_mixprec_checkpoint_read_piece (ckpt, p, piece, "master", at - piece->begin, n, stage, error))
        return FALSE;
      if (!_mixprec_engine_shard_store_f32 (sh, e, stage, n, error))
        return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- state */

/* One unscaled state slot's range. Saved state of any representation is
 * decoded to FP32 (exact); a bfloat16 engine rounds it to nearest even,
 * so an FP32-state checkpoint resumes with bf16.bf16_optimizer_states the
 * way the first step would have stored it, and the other way is exact. */
static gboolean
load_plain_state (MixprecCheckpoint           *ckpt,
                  const _MixprecManifestParam *p,
                  const _MixprecManifestPiece *piece,
                  const _MixprecEngineShard   *sh,
                  guint                        k,
                  guint64                      lo,
                  guint64                      hi,
                  GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  g_autofree gfloat *wide = NULL;

  if (sh->state_formats[k] == MIXPREC_PLUGIN_STATE_FLOAT32)
    return _mixprec_checkpoint_read_piece (ckpt, p, piece, m->state_names[k], lo - piece->begin,
                                           hi - lo, (gfloat *) sh->states[k] + (lo - sh->begin), error);
  wide = g_new (gfloat, MIN (hi - lo, STAGE_ELEMENTS));
  for (guint64 at = lo; at < hi; at += STAGE_ELEMENTS)
    {
      guint64 n = MIN (hi - at, STAGE_ELEMENTS);

      if (!_mixprec_checkpoint_read_piece (ckpt, p, piece, m->state_names[k], at - piece->begin, n,
                                           wide, error) ||
          !mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, wide, MIXPREC_DTYPE_BFLOAT16,
                                  (guint16 *) sh->states[k] + (at - sh->begin), n,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
        return FALSE;
    }
  return TRUE;
}

typedef struct
{
  guint slot;
  gboolean native;           /* out of same_blocks(): every range copies as it is */
  GHashTable *stages;        /* staged: shard -> its FP32 values */
} ScaledLoad;

/* Whether the saved codes and scales of [lo, hi) are the engine's own:
 * same format, map, block size and position in the blocks. */
static gboolean
same_blocks (MixprecCheckpoint           *ckpt,
             const _MixprecManifestParam *p,
             const _MixprecManifestPiece *piece,
             const _MixprecEngineShard   *sh,
             guint64                      lo,
             guint64                      hi,
             gpointer                     data,
             GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  ScaledLoad *l = data;
  guint64 phase;

  if (!m->repr.present || m->repr.states[l->slot] != sh->state_formats[l->slot] ||
      m->repr.state_signed[l->slot] != sh->state_signed[l->slot] ||
      m->repr.block_size != sh->block_size)
    {
      l->native = FALSE;
      return TRUE;
    }
  if (!_mixprec_checkpoint_piece_phase (ckpt, p, piece, &phase, error))
    return FALSE;
  if ((phase + lo - piece->begin) % sh->block_size != (sh->block_phase + lo - sh->begin) % sh->block_size)
    l->native = FALSE;
  return TRUE;
}

/* Copies codes and scales of [lo, hi) as they are. */
static gboolean
copy_blocks (MixprecCheckpoint           *ckpt,
             const _MixprecManifestParam *p,
             const _MixprecManifestPiece *piece,
             const _MixprecEngineShard   *sh,
             guint64                      lo,
             guint64                      hi,
             gpointer                     data,
             GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  const ScaledLoad *l = data;
  guint k = l->slot;
  MixprecPluginStateFormat format = sh->state_formats[k];
  guint block = sh->block_size;
  guint width = format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? 1 : (guint) _mixprec_state_bytes (format, 1);
  g_autofree gchar *scales_name = _mixprec_checkpoint_scales_name (m->state_names[k]);
  const _MixprecSafetensorsTensor *tc, *ts;
  _MixprecSafetensors *sc, *ss;
  guint64 phase, first = lo - piece->begin, n = hi - lo, e = lo - sh->begin;
  guint64 code0 = format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? first / 2 * 2 : first;
  guint64 code_bytes = format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC
                       ? _mixprec_checkpoint_state_stored (format, first + n) - code0 / 2 : n * width;
  guint64 nb, b_saved, b_engine;
  g_autofree guint8 *codes = NULL;

  if (!_mixprec_checkpoint_piece_phase (ckpt, p, piece, &phase, error) ||
      (tc = _mixprec_checkpoint_piece_tensor (ckpt, p, piece, m->state_names[k], &sc, error)) == NULL ||
      (ts = _mixprec_checkpoint_piece_tensor_as (ckpt, p, piece, scales_name, "F32",
                                                 _mixprec_checkpoint_n_blocks (phase, piece->end - piece->begin, block),
                                                 &ss, error)) == NULL)
    return FALSE;
  codes = g_malloc (MAX (code_bytes, 1));
  if (!_mixprec_safetensors_read_bytes (sc, tc, format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? code0 / 2 : code0 * width,
                                        code_bytes, codes, error))
    return FALSE;
  if (width == 2)
    for (guint64 i = 0; i < n; i++)
      ((guint16 *) codes)[i] = GUINT16_FROM_LE (((guint16 *) codes)[i]);
  for (guint64 i = 0; i < n; i++)
    _mixprec_state_store_code (format, sh->states[k], sh->code_phase + e + i,
                               _mixprec_state_load_code (format, codes, first + i - code0));
  b_saved = (phase + first) / block;
  b_engine = (sh->block_phase + e) / block;
  nb = _mixprec_checkpoint_n_blocks ((phase + first) % block, n, block);
  return _mixprec_safetensors_read_f32 (ss, ts, b_saved, nb, sh->state_scales[k] + b_engine, error);
}

/* Decodes [lo, hi) into the shard's FP32 stage. */
static gboolean
stage_range (MixprecCheckpoint           *ckpt,
             const _MixprecManifestParam *p,
             const _MixprecManifestPiece *piece,
             const _MixprecEngineShard   *sh,
             guint64                      lo,
             guint64                      hi,
             gpointer                     data,
             GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (ckpt);
  ScaledLoad *l = data;
  gfloat *stage = g_hash_table_lookup (l->stages, sh);

  if (stage == NULL)
    {
      stage = g_new0 (gfloat, MAX (sh->end - sh->begin, 1));
      g_hash_table_insert (l->stages, (gpointer) sh, stage);
    }
  return _mixprec_checkpoint_read_piece (ckpt, p, piece, m->state_names[l->slot], lo - piece->begin,
                                         hi - lo, stage + (lo - sh->begin), error);
}

/* Encodes the staged values of slot @l->slot with the engine's rule: one
 * scale per block of the unit from the absmax of the block's elements
 * (those of every parameter sharing it), then each element's code. A
 * block's scale is addressed by the same pointer from each shard sharing
 * it, which is what the absmax is gathered under. */
static void
encode_staged (GArray     *shards,
               ScaledLoad *l)
{
  g_autoptr(GHashTable) absmax = g_hash_table_new (NULL, NULL);
  guint k = l->slot;

  for (guint i = 0; i < shards->len; i++)
    {
      const _MixprecEngineShard *sh = &g_array_index (shards, _MixprecEngineShard, i);
      const gfloat *stage = g_hash_table_lookup (l->stages, sh);

      for (guint64 e = 0; stage != NULL && e < sh->end - sh->begin; e++)
        {
          gfloat *scale = sh->state_scales[k] + (sh->block_phase + e) / sh->block_size;
          guint32 bits = GPOINTER_TO_UINT (g_hash_table_lookup (absmax, scale));

          /* Stored + 1 so that an absmax of 0 is told from a block not seen. */
          bits = bits == 0 ? 0 : bits - 1;
          g_hash_table_insert (absmax, scale, GUINT_TO_POINTER (_mixprec_absmax_bits (bits, stage[e]) + 1));
        }
    }
  {
    /* The format is the engine's, the same in every shard. */
    MixprecPluginStateFormat format = g_array_index (shards, _MixprecEngineShard, 0).state_formats[k];
    GHashTableIter iter;
    gpointer key, value;

    g_hash_table_iter_init (&iter, absmax);
    while (g_hash_table_iter_next (&iter, &key, &value))
      *(gfloat *) key = _mixprec_state_block_scale (format, GPOINTER_TO_UINT (value) - 1);
  }
  for (guint i = 0; i < shards->len; i++)
    {
      const _MixprecEngineShard *sh = &g_array_index (shards, _MixprecEngineShard, i);
      const gfloat *stage = g_hash_table_lookup (l->stages, sh);

      for (guint64 e = 0; stage != NULL && e < sh->end - sh->begin; e++)
        {
          gfloat scale = sh->state_scales[k][(sh->block_phase + e) / sh->block_size];

          _mixprec_state_store_code (sh->state_formats[k], sh->states[k], sh->code_phase + e,
                                     _mixprec_state_encode1 (sh->state_formats[k], sh->state_signed[k],
                                                             stage[e], scale));
        }
    }
}

/* A state slot the engine keeps with block scales: the saved codes and
 * scales as they are where they are the engine's own (a same-representation
 * resume at any world size: blocks are unit-relative), otherwise every
 * value decoded to FP32 and encoded again with the engine's rule
 * (docs/reference/optimizer-states.md). */
static gboolean
load_scaled_state (MixprecCheckpoint *ckpt,
                   GArray            *shards,
                   guint              slot,
                   GError           **error)
{
  ScaledLoad l = { slot, TRUE, NULL };
  gboolean ok;

  if (!for_each_overlap (ckpt, shards, same_blocks, &l, error))
    return FALSE;
  if (l.native)
    return for_each_overlap (ckpt, shards, copy_blocks, &l, error);
  l.stages = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  ok = for_each_overlap (ckpt, shards, stage_range, &l, error);
  if (ok)
    encode_staged (shards, &l);
  g_hash_table_unref (l.stages);
  return ok;
}

static gboolean
load_range (MixprecCheckpoint           *ckpt,
            const _MixprecManifestParam *p,
            const _MixprecManifestPiece *piece,
            const _MixprecEngineShard   *sh,
            guint64                      lo,
            guint64                      hi,
            gpointer                     data,
            GError                     **error)
{
  gboolean weights_only = GPOINTER_TO_INT (data);

  if (!load_master (ckpt, p, piece, sh, lo, hi, error))
    return FALSE;
  for (guint k = 0; !weights_only && k < sh->n_state_slots; k++)
    if (!_mixprec_checkpoint_state_is_scaled (sh->state_formats[k]) &&
        !load_plain_state (ckpt, p, piece, sh, k, lo, hi, error))
      return FALSE;
  return TRUE;
}

static gboolean
copy_values (MixprecCheckpoint *ckpt,
             GArray            *shards,
             gboolean           weights_only,
             GError           **error)
{
  const _MixprecEngineShard *first;

  if (!for_each_overlap (ckpt, shards, load_range, GINT_TO_POINTER (weights_only), error))
    return FALSE;
  if (weights_only || shards->len == 0)
    return TRUE;
  first = &g_array_index (shards, _MixprecEngineShard, 0);
  for (guint k = 0; k < first->n_state_slots; k++)
    if (_mixprec_checkpoint_state_is_scaled (first->state_formats[k]) &&
        !load_scaled_state (ckpt, shards, k, error))
      return FALSE;
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

  shards = _mixprec_engine_get_load_shards (engine, error);
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
      /* Auto-precision's dtypes first: the buffers the values go into
       * are laid out for them. */
      if (ok && !weights_only)
        {
          ok = _mixprec_engine_autoprec_restore (engine, mixprec_checkpoint_get_path (ckpt),
                                                 m->auto_precision, &local_error);
          g_clear_pointer (&shards, g_array_unref);
          shards = ok ? _mixprec_engine_get_load_shards (engine, &local_error) : NULL;
          ok = shards != NULL;
        }
      ok = ok && check_params (ckpt, shards, flags, &local_error) &&
           check_sources (ckpt, shards, weights_only, &local_error) &&
           (weights_only || restore_scaler (engine, ckpt, flags, &local_error)) &&
           (weights_only || _mixprec_engine_restore_fp8 (engine, mixprec_checkpoint_get_path (ckpt),
                                                         m->fp8_states, &local_error)) &&
           copy_values (ckpt, shards, weights_only, &local_error) &&
           (weights_only || _mixprec_engine_zeropp_restore_loco (engine, ckpt, &local_error)) &&
           _mixprec_engine_numerics_restore_shadow (engine, weights_only ? NULL : ckpt, &local_error);
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
