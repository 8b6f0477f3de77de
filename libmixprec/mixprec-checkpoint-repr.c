/* mixprec-checkpoint-repr.c — how a checkpoint stores masters and optimizer
 * state in the representations of optimizer revision 3, and reading any
 * of them back as FP32.
 *
 * A checkpoint keeps each representation as the engine holds it, so that
 * it stays as small as the run and a same-representation resume is bit for
 * bit. For a piece of parameter P saved by one rank:
 *
 *   masters  fp32       P/master F32
 *            remainder  P/master BF16 (the working copy) and
 *                       P/master/remainder I16
 *            kahan      P/master BF16 (the working copy) and
 *                       P/master/compensation BF16
 *   slot S   fp32 F32, bf16 BF16, fp16_scaled F16, bf16_scaled BF16,
 *            fp8_e4m3_scaled F8_E4M3, int8 U8 (one code per element),
 *            int4 U8 (two codes per byte, the piece's element 2j in the low
 *            nibble of byte j); the scaled formats also P/S/scales F32,
 *            one per block the piece touches.
 *
 * Blocks are block_size elements of the parameter's unit, as the engine
 * keeps them; the shard metadata "P/block_phase" says where in its block
 * the piece's first element lies, so its scales can be matched to its
 * elements without knowing the unit. Decoding is exact: a stored value
 * times its block's scale (one FP32 product), a remainder joined with its
 * working copy, and a Kahan pair as working + compensation added in FP32
 * (rounded to nearest even: the FP32 value the pair stands for). */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-engine-private.h"
#include "numeric/numeric-base.h"
#include "numeric/numeric-quant.h"

/* Elements decoded per read: bounds the staging of a large piece. */
#define CHUNK ((guint64) 1 << 18)

static const gchar * const master_names[] = { "fp32", "remainder", "kahan" };
static const gchar * const state_st_dtypes[] = {
  "F32", "BF16", "F16", "BF16", "F8_E4M3", "U8", "U8",
};

const gchar *
_mixprec_checkpoint_master_format_name (MixprecPluginMasterFormat format)
{
  g_return_val_if_fail ((guint) format < G_N_ELEMENTS (master_names), "fp32");
  return master_names[format];
}

gboolean
_mixprec_checkpoint_master_format_parse (const gchar               *name,
                                         MixprecPluginMasterFormat *format)
{
  for (guint i = 0; i < G_N_ELEMENTS (master_names); i++)
    if (g_str_equal (name, master_names[i]))
      {
        *format = (MixprecPluginMasterFormat) i;
        return TRUE;
      }
  return FALSE;
}

/* The names are the config's (mixprec.optimizer_states), whose enum has
 * the plugin formats' values. */
const gchar *
_mixprec_checkpoint_state_format_name (MixprecPluginStateFormat format)
{
  g_return_val_if_fail ((guint) format < G_N_ELEMENTS (state_st_dtypes), "fp32");
  return mixprec_state_format_get_name ((MixprecStateFormat) format);
}

gboolean
_mixprec_checkpoint_state_format_parse (const gchar              *name,
                                        MixprecPluginStateFormat *format)
{
  for (guint i = 0; i < G_N_ELEMENTS (state_st_dtypes); i++)
    if (g_str_equal (name, mixprec_state_format_get_name ((MixprecStateFormat) i)))
      {
        *format = (MixprecPluginStateFormat) i;
        return TRUE;
      }
  return FALSE;
}

const gchar *
_mixprec_checkpoint_state_st_dtype (MixprecPluginStateFormat format)
{
  g_return_val_if_fail ((guint) format < G_N_ELEMENTS (state_st_dtypes), "F32");
  return state_st_dtypes[format];
}

guint64
_mixprec_checkpoint_state_stored (MixprecPluginStateFormat format,
                                  guint64                  n)
{
  return format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? n / 2 + n % 2 : n;
}

gboolean
_mixprec_checkpoint_state_is_scaled (MixprecPluginStateFormat format)
{
  return _mixprec_state_is_blocked (format) != 0;
}

guint64
_mixprec_checkpoint_n_blocks (guint64 phase,
                              guint64 n,
                              guint   block_size)
{
  if (n == 0 || block_size == 0)
    return 0;
  return (phase + n - 1) / block_size + 1;
}

gchar *
_mixprec_checkpoint_scales_name (const gchar *slot)
{
  return g_strconcat (slot, "/scales", NULL);
}

gchar *
_mixprec_checkpoint_phase_key (const gchar *param)
{
  return g_strconcat (param, "/block_phase", NULL);
}

MixprecPluginStateFormat
_mixprec_checkpoint_slot_format (const _MixprecManifest          *m,
                                 guint                            slot,
                                 const _MixprecSafetensorsTensor *t)
{
  if (m->repr.present)
    return m->repr.states[slot];
  return t != NULL && g_str_equal (t->dtype, "BF16") ? MIXPREC_PLUGIN_STATE_BFLOAT16
                                                     : MIXPREC_PLUGIN_STATE_FLOAT32;
}

static gint
slot_index (const _MixprecManifest *m,
            const gchar            *slot)
{
  for (guint s = 0; m->state_names[s] != NULL; s++)
    if (g_str_equal (m->state_names[s], slot))
      return (gint) s;
  return -1;
}

static gboolean
manifest_scaled (const _MixprecManifest *m)
{
  for (guint s = 0; m->repr.present && m->state_names[s] != NULL; s++)
    if (_mixprec_checkpoint_state_is_scaled (m->repr.states[s]))
      return TRUE;
  return FALSE;
}

gboolean
_mixprec_checkpoint_piece_phase (MixprecCheckpoint           *self,
                                 const _MixprecManifestParam *param,
                                 const _MixprecManifestPiece *piece,
                                 guint64                     *phase,
                                 GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (self);
  g_autofree gchar *key = _mixprec_checkpoint_phase_key (param->name);
  const _MixprecSafetensorsTensor *t;
  _MixprecSafetensors *st;
  const gchar *text;

  *phase = 0;
  if (!manifest_scaled (m))
    return TRUE;
  t = _mixprec_checkpoint_piece_tensor (self, param, piece, "master", &st, error);
  if (t == NULL)
    return FALSE;
  text = _mixprec_safetensors_get_metadata (st, key);
  if (text == NULL ||
      !g_ascii_string_to_unsigned (text, 10, 0, m->repr.block_size - 1, phase, NULL))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: metadata '%s' is %s%s%s, not an element position in a block of %u",
                   _mixprec_safetensors_get_path (st), key, text ? "'" : "",
                   text ? text : "missing", text ? "'" : "", m->repr.block_size);
      return FALSE;
    }
  return TRUE;
}

/* The scales tensor of slot @s of @piece, checked. */
static const _MixprecSafetensorsTensor *
scales_tensor (MixprecCheckpoint           *self,
               const _MixprecManifestParam *param,
               const _MixprecManifestPiece *piece,
               guint                        s,
               guint64                      phase,
               _MixprecSafetensors        **st,
               GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (self);
  g_autofree gchar *name = _mixprec_checkpoint_scales_name (m->state_names[s]);

  return _mixprec_checkpoint_piece_tensor_as (self, param, piece, name, "F32",
                                              _mixprec_checkpoint_n_blocks (phase, piece->end - piece->begin,
                                                                            m->repr.block_size),
                                              st, error);
}

/* The master's second half: the remainder or the compensation. */
static const _MixprecSafetensorsTensor *
extra_tensor (MixprecCheckpoint           *self,
              const _MixprecManifestParam *param,
              const _MixprecManifestPiece *piece,
              _MixprecSafetensors        **st,
              GError                     **error)
{
  gboolean remainder = param->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER;

  return _mixprec_checkpoint_piece_tensor_as (self, param, piece,
                                              remainder ? _MIXPREC_CHECKPOINT_REMAINDER
                                                        : _MIXPREC_CHECKPOINT_COMPENSATION,
                                              remainder ? "I16" : "BF16",
                                              piece->end - piece->begin, st, error);
}

gboolean
_mixprec_checkpoint_check_piece (MixprecCheckpoint           *self,
                                 const _MixprecManifestParam *param,
                                 const _MixprecManifestPiece *piece,
                                 gboolean                     weights_only,
                                 GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (self);
  _MixprecSafetensors *st;
  guint64 phase;

  if (_mixprec_checkpoint_piece_tensor (self, param, piece, "master", &st, error) == NULL)
    return FALSE;
  if (param->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32 &&
      extra_tensor (self, param, piece, &st, error) == NULL)
    return FALSE;
  if (weights_only)
    return TRUE;
  if (!_mixprec_checkpoint_piece_phase (self, param, piece, &phase, error))
    return FALSE;
  for (guint s = 0; m->state_names[s] != NULL; s++)
    {
      if (_mixprec_checkpoint_piece_tensor (self, param, piece, m->state_names[s], &st, error) == NULL)
        return FALSE;
      if (m->repr.present && _mixprec_checkpoint_state_is_scaled (m->repr.states[s]) &&
          scales_tensor (self, param, piece, s, phase, &st, error) == NULL)
        return FALSE;
    }
  return TRUE;
}

static void
u16_from_le (guint16 *v,
             guint64  n)
{
#if G_BYTE_ORDER == G_BIG_ENDIAN
  for (guint64 i = 0; i < n; i++)
    v[i] = GUINT16_FROM_LE (v[i]);
#else
  (void) v;
  (void) n;
#endif
}

/* Masters kept as two 16-bit halves, [first, first + count) of the piece. */
static gboolean
read_split_master (MixprecCheckpoint           *self,
                   const _MixprecManifestParam *param,
                   const _MixprecManifestPiece *piece,
                   guint64                      first,
                   guint64                      count,
                   gfloat                      *dest,
                   GError                     **error)
{
  g_autofree guint16 *hi = g_new (guint16, MIN (count, CHUNK) + 1);
  g_autofree guint16 *lo = g_new (guint16, MIN (count, CHUNK) + 1);
  const _MixprecSafetensorsTensor *tw, *te;
  _MixprecSafetensors *sw, *se;

  tw = _mixprec_checkpoint_piece_tensor (self, param, piece, "master", &sw, error);
  if (tw == NULL || (te = extra_tensor (self, param, piece, &se, error)) == NULL)
    return FALSE;
  for (guint64 at = 0; at < count; at += CHUNK)
    {
      guint64 n = MIN (count - at, CHUNK);

      if (!_mixprec_safetensors_read_bytes (sw, tw, (first + at) * 2, n * 2, (guint8 *) hi, error) ||
          !_mixprec_safetensors_read_bytes (se, te, (first + at) * 2, n * 2, (guint8 *) lo, error))
        return FALSE;
      u16_from_le (hi, n);
      u16_from_le (lo, n);
      _mixprec_checkpoint_split_master_f32 (param->master_format, hi, lo, n, dest + at);
    }
  return TRUE;
}

/* A scaled slot @s, [first, first + count) of the piece. */
static gboolean
read_scaled_state (MixprecCheckpoint           *self,
                   const _MixprecManifestParam *param,
                   const _MixprecManifestPiece *piece,
                   guint                        s,
                   guint64                      first,
                   guint64                      count,
                   gfloat                      *dest,
                   GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (self);
  MixprecPluginStateFormat format = m->repr.states[s];
  gboolean is_signed = m->repr.state_signed[s];
  guint block = m->repr.block_size;
  guint width = (guint) _mixprec_state_bytes (format, 1);
  const _MixprecSafetensorsTensor *tc, *ts;
  _MixprecSafetensors *sc, *ss;
  guint64 phase;

  if (!_mixprec_checkpoint_piece_phase (self, param, piece, &phase, error) ||
      (tc = _mixprec_checkpoint_piece_tensor (self, param, piece, m->state_names[s], &sc, error)) == NULL ||
      (ts = scales_tensor (self, param, piece, s, phase, &ss, error)) == NULL)
    return FALSE;
  for (guint64 at = 0; at < count; at += CHUNK)
    {
      guint64 n = MIN (count - at, CHUNK);
      guint64 e = first + at;      /* piece-relative */
      /* int4: whole bytes from the one holding element e; the others from e. */
      guint64 code0 = format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? e / 2 * 2 : e;
      guint64 code_n = format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC
                       ? _mixprec_checkpoint_state_stored (format, e + n) - code0 / 2 : n;
      guint64 b0 = (phase + e) / block, nb = (phase + e + n - 1) / block - b0 + 1;
      g_autofree guint8 *codes = g_malloc (MAX (code_n * width, 1));
      g_autofree gfloat *scales = g_new (gfloat, nb);

      if (!_mixprec_safetensors_read_bytes (sc, tc,
                                            format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC ? code0 / 2 : code0 * width,
                                            code_n * width, codes, error) ||
          !_mixprec_safetensors_read_f32 (ss, ts, b0, nb, scales, error))
        return FALSE;
      if (width == 2)
        u16_from_le ((guint16 *) codes, code_n);
      for (guint64 i = 0; i < n; i++)
        {
          guint32 code = _mixprec_state_load_code (format, codes, e + i - code0);

          dest[at + i] = _mixprec_state_decode1 (format, is_signed, code,
                                                 scales[(phase + e + i) / block - b0]);
        }
    }
  return TRUE;
}

gboolean
_mixprec_checkpoint_read_piece (MixprecCheckpoint           *self,
                                const _MixprecManifestParam *param,
                                const _MixprecManifestPiece *piece,
                                const gchar                 *slot,
                                guint64                      first,
                                guint64                      count,
                                gfloat                      *dest,
                                GError                     **error)
{
  const _MixprecManifest *m = _mixprec_checkpoint_get_manifest (self);
  gboolean master = g_str_equal (slot, "master");
  gint s = master ? -1 : slot_index (m, slot);
  const _MixprecSafetensorsTensor *t;
  _MixprecSafetensors *st;

  if (master && param->master_format != MIXPREC_PLUGIN_MASTER_FLOAT32)
    return read_split_master (self, param, piece, first, count, dest, error);
  if (m->repr.present && s >= 0 && _mixprec_checkpoint_state_is_scaled (m->repr.states[s]))
    return read_scaled_state (self, param, piece, (guint) s, first, count, dest, error);
  /* FP32, or BF16 widened exactly. */
  t = _mixprec_checkpoint_piece_tensor (self, param, piece, slot, &st, error);
  return t != NULL && _mixprec_safetensors_read_f32 (st, t, first, count, dest, error);
}

guint
_mixprec_checkpoint_load_nibble (gconstpointer base,
                                 guint64       i)
{
  return _mixprec_state_load_code (MIXPREC_PLUGIN_STATE_INT4_DYNAMIC, base, i);
}

void
_mixprec_checkpoint_shards_repr (GArray               *shards,
                                 _MixprecManifestRepr *repr)
{
  const _MixprecEngineShard *sh;

  memset (repr, 0, sizeof *repr);
  if (shards->len == 0)
    return;
  /* The representation is the engine's, the same in every shard. */
  for (guint i = 0; i < shards->len; i++)
    if (g_array_index (shards, _MixprecEngineShard, i).master_format != MIXPREC_PLUGIN_MASTER_FLOAT32)
      repr->present = TRUE;
  /* The state's representation is the engine's, the same in every shard. */
  sh = &g_array_index (shards, _MixprecEngineShard, 0);
  for (guint k = 0; k < sh->n_state_slots; k++)
    {
      repr->states[k] = sh->state_formats[k];
      repr->state_signed[k] = sh->state_signed[k];
      if (sh->state_formats[k] != MIXPREC_PLUGIN_STATE_FLOAT32 &&
          sh->state_formats[k] != MIXPREC_PLUGIN_STATE_BFLOAT16)
        {
          repr->present = TRUE;
          repr->block_size = sh->block_size;
        }
    }
}

guint
_mixprec_checkpoint_shards_version (GArray *shards)
{
  _MixprecManifestRepr repr;

  _mixprec_checkpoint_shards_repr (shards, &repr);
  return repr.present ? _MIXPREC_CHECKPOINT_FORMAT_VERSION_REPR : MIXPREC_CHECKPOINT_FORMAT_VERSION;
}

void
_mixprec_checkpoint_split_master_f32 (MixprecPluginMasterFormat format,
                                      const guint16            *working,
                                      const guint16            *extra,
                                      guint64                   n,
                                      gfloat                   *out)
{
  for (guint64 i = 0; i < n; i++)
    out[i] = format == MIXPREC_PLUGIN_MASTER_REMAINDER
             ? _mixprec_remainder_join (working[i], (gint16) extra[i])
             : _mixprec_bf16_to_f32 (working[i]) + _mixprec_bf16_to_f32 (extra[i]);
}
