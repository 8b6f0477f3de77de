/* test-checkpoint-repr.c — checkpoints whose masters and optimizer state
 * are kept in the representations of optimizer revision 3 (remainder and
 * Kahan masters; scaled and quantized state with block scales).
 *
 * The files are written here, by this test's own writer, from a trained
 * engine's FP32 values: the remainder split and the Kahan pair with this
 * file's bit operations, the state with the block rule of
 * numeric/numeric-quant.h over blocks that this file lays out itself (its
 * own block phases, int4 packing and scale counts). Loading them into an
 * FP32 engine must give exactly the values the formats stand for; the
 * checkpoint's readers and its FP32 export must agree; and every damaged
 * or mismatched tensor is an error that names the file and the tensor,
 * with the engine left as it was. */
#include "config.h"

#include <string.h>

#include <glib/gstdio.h>
#include <json-glib/json-glib.h>

#include "checkpoint-common.h"
#include "numeric/numeric-base.h"
#include "numeric/numeric-quant.h"

/* Small blocks, so that blocks straddle parameters and parameters hold
 * several. */
#define BLOCK 32u

static const gchar * const master_names[] = { "fp32", "remainder", "kahan" };
static const gchar * const state_names[] = {
  "fp32", "bf16", "fp16_scaled", "bf16_scaled", "fp8_e4m3_scaled", "int8", "int4",
};
static const gchar * const state_dtypes[] = { "F32", "BF16", "F16", "BF16", "F8_E4M3", "U8", "U8" };
/* AdamW: exp_avg can be negative (the signed map), exp_avg_sq cannot. */
static const gchar * const slots[] = { "exp_avg", "exp_avg_sq" };
static const gboolean slot_signed[] = { TRUE, FALSE };

typedef enum
{
  DAMAGE_NONE,
  DAMAGE_NO_SCALES,          /* a scaled slot's scales tensor is missing */
  DAMAGE_SHORT_SCALES,       /* one scale too few */
  DAMAGE_BAD_PHASE,          /* block_phase beyond the block */
  DAMAGE_STATE_DTYPE,        /* the codes stored as F32 */
  DAMAGE_NO_REMAINDER,       /* the master's second half is missing */
} Damage;

/* ---------------------------------------------------------------- bits */

static guint32
f32_bits (gfloat f)
{
  guint32 u;

  memcpy (&u, &f, 4);
  return u;
}

static gfloat
f32_from (guint32 u)
{
  gfloat f;

  memcpy (&f, &u, 4);
  return f;
}

/* Round to nearest even (the values here are finite). */
static guint16
bf16_rne (gfloat f)
{
  guint32 u = f32_bits (f);

  return (guint16) ((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static gfloat
bf16_value (guint16 b)
{
  return f32_from ((guint32) b << 16);
}

/* The remainder encoding: the high half rounded up when the low half is
 * at least half a bfloat16 unit; the low half as a signed 16-bit number. */
static void
remainder_split (gfloat f, guint16 *hi, gint16 *rem)
{
  guint32 u = f32_bits (f);
  guint16 lo = u & 0xFFFF;

  *hi = (guint16) ((u >> 16) + (lo >= 0x8000 ? 1 : 0));
  *rem = (gint16) lo;
}

/* ---------------------------------------------------------------- safetensors */

typedef struct
{
  gchar *name;
  const gchar *dtype;
  guint64 n;
  GByteArray *data;
} Tensor;

static void
tensor_free (gpointer p)
{
  Tensor *t = p;

  g_free (t->name);
  g_byte_array_unref (t->data);
  g_free (t);
}

static Tensor *
tensor_add (GPtrArray *tensors, const gchar *name, const gchar *dtype, guint64 n)
{
  Tensor *t = g_new0 (Tensor, 1);

  t->name = g_strdup (name);
  t->dtype = dtype;
  t->n = n;
  t->data = g_byte_array_new ();
  g_ptr_array_add (tensors, t);
  return t;
}

static void
put (Tensor *t, gconstpointer bytes, guint len)
{
  g_byte_array_append (t->data, bytes, len);
}

/* A safetensors file: 8-byte length, the JSON header padded with spaces to
 * a multiple of 8, the tensors' bytes in order. */
static void
write_safetensors (const gchar *path, GPtrArray *metadata, GPtrArray *tensors)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree gchar *header = NULL;
  g_autoptr(GByteArray) out = g_byte_array_new ();
  guint64 offset = 0, len;
  g_autoptr(GError) error = NULL;

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "__metadata__");
  json_builder_begin_object (b);
  for (guint i = 0; i + 1 < metadata->len; i += 2)
    {
      json_builder_set_member_name (b, g_ptr_array_index (metadata, i));
      json_builder_add_string_value (b, g_ptr_array_index (metadata, i + 1));
    }
  json_builder_end_object (b);
  for (guint i = 0; i < tensors->len; i++)
    {
      Tensor *t = g_ptr_array_index (tensors, i);

      json_builder_set_member_name (b, t->name);
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "dtype");
      json_builder_add_string_value (b, t->dtype);
      json_builder_set_member_name (b, "shape");
      json_builder_begin_array (b);
      json_builder_add_int_value (b, (gint64) t->n);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "data_offsets");
      json_builder_begin_array (b);
      json_builder_add_int_value (b, (gint64) offset);
      json_builder_add_int_value (b, (gint64) (offset + t->data->len));
      json_builder_end_array (b);
      json_builder_end_object (b);
      offset += t->data->len;
    }
  json_builder_end_object (b);
  root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  header = json_generator_to_data (gen, NULL);
  len = strlen (header);
  len = (len + 7) / 8 * 8;
  {
    guint64 le = GUINT64_TO_LE (len);

    g_byte_array_append (out, (const guint8 *) &le, 8);
  }
  g_byte_array_append (out, (const guint8 *) header, strlen (header));
  for (guint64 i = strlen (header); i < len; i++)
    g_byte_array_append (out, (const guint8 *) " ", 1);
  for (guint i = 0; i < tensors->len; i++)
    {
      Tensor *t = g_ptr_array_index (tensors, i);

      g_byte_array_append (out, t->data->data, t->data->len);
    }
  g_file_set_contents (path, (const gchar *) out->data, out->len, &error);
  g_assert_no_error (error);
}

/* ---------------------------------------------------------------- the model's values */

typedef struct
{
  gchar *name;
  guint64 numel;
  GBytes *master;            /* FP32 */
  GBytes *states[2];         /* FP32 */
  guint64 phase;             /* element 0's position in its block */
  /* What a load into an FP32 engine must give. */
  gfloat *want_master;
  gfloat *want_states[2];
} Param;

static void
param_free (gpointer p)
{
  Param *q = p;

  g_free (q->name);
  g_bytes_unref (q->master);
  for (guint k = 0; k < 2; k++)
    {
      g_bytes_unref (q->states[k]);
      g_free (q->want_states[k]);
    }
  g_free (q->want_master);
  g_free (q);
}

/* The trained engine's values; blocks laid out as if the parameters
 * followed each other in one unit. */
static GPtrArray *
read_params (MixprecEngine *engine)
{
  g_autoptr(GPtrArray) params = mixprec_engine_get_params (engine);
  GPtrArray *out = g_ptr_array_new_with_free_func (param_free);
  guint64 at = 0;

  for (guint i = 0; i < params->len; i++)
    {
      MixprecParam *mp = g_ptr_array_index (params, i);
      Param *p = g_new0 (Param, 1);
      g_autoptr(GError) error = NULL;

      p->name = g_strdup (mixprec_param_get_name (mp));
      p->numel = mixprec_param_get_numel (mp);
      p->master = mixprec_engine_gather_master (engine, p->name, &error);
      g_assert_no_error (error);
      for (guint k = 0; k < 2; k++)
        {
          p->states[k] = mixprec_engine_get_optimizer_state (engine, p->name, slots[k], &error);
          g_assert_no_error (error);
        }
      p->phase = at % BLOCK;
      at += p->numel;
      g_ptr_array_add (out, p);
    }
  return out;
}

static void
add_master (GPtrArray *tensors, Param *p, guint master, Damage damage)
{
  const gfloat *m = g_bytes_get_data (p->master, NULL);
  g_autofree gchar *name = g_strconcat (p->name, "/master", NULL);
  g_autofree gchar *extra = NULL;
  Tensor *tm, *te = NULL;

  p->want_master = g_new (gfloat, p->numel);
  if (master == 0)
    {
      tm = tensor_add (tensors, name, "F32", p->numel);
      put (tm, m, p->numel * 4);
      memcpy (p->want_master, m, p->numel * 4);
      return;
    }
  tm = tensor_add (tensors, name, "BF16", p->numel);
  extra = g_strconcat (p->name, master == 1 ? "/master/remainder" : "/master/compensation", NULL);
  if (damage != DAMAGE_NO_REMAINDER)
    te = tensor_add (tensors, extra, master == 1 ? "I16" : "BF16", p->numel);
  for (guint64 i = 0; i < p->numel; i++)
    {
      guint16 hi, lo;

      if (master == 1)
        {
          gint16 rem;

          remainder_split (m[i], &hi, &rem);
          lo = (guint16) rem;
          /* Exact: the remainder is the rest of the FP32 value. */
          p->want_master[i] = m[i];
        }
      else
        {
          hi = bf16_rne (m[i]);
          lo = bf16_rne (m[i] - bf16_value (hi));
          /* working + compensation, added in FP32. */
          p->want_master[i] = bf16_value (hi) + bf16_value (lo);
        }
      hi = GUINT16_TO_LE (hi);
      lo = GUINT16_TO_LE (lo);
      put (tm, &hi, 2);
      if (te != NULL)
        put (te, &lo, 2);
    }
}

static void
add_state (GPtrArray *tensors, Param *p, guint k, guint format, Damage damage)
{
  const gfloat *x = g_bytes_get_data (p->states[k], NULL);
  g_autofree gchar *name = g_strconcat (p->name, "/", slots[k], NULL);
  g_autofree gchar *scales_name = g_strconcat (name, "/scales", NULL);
  guint64 n = p->numel;
  guint64 nb = n == 0 ? 0 : (p->phase + n - 1) / BLOCK + 1;
  g_autofree gfloat *scales = g_new0 (gfloat, MAX (nb, 1));
  g_autofree guint32 *codes = g_new0 (guint32, MAX (n, 1));
  Tensor *t;

  p->want_states[k] = g_new (gfloat, MAX (n, 1));
  if (format == 0 || format == 1)
    {
      t = tensor_add (tensors, name, state_dtypes[format], n);
      for (guint64 i = 0; i < n; i++)
        {
          if (format == 0)
            {
              put (t, &x[i], 4);
              p->want_states[k][i] = x[i];
            }
          else
            {
              guint16 b = GUINT16_TO_LE (bf16_rne (x[i]));

              put (t, &b, 2);
              p->want_states[k][i] = bf16_value (bf16_rne (x[i]));
            }
        }
      return;
    }

  /* Scales: each block's absmax over the parameter's elements in it (a
   * block it shares with a neighbour is its own here: decoding needs only
   * the scale it was encoded with). */
  for (guint64 b = 0; b < nb; b++)
    {
      guint64 lo = b == 0 ? 0 : b * BLOCK - p->phase;
      guint64 hi = MIN (n, (b + 1) * BLOCK - p->phase);
      guint32 absmax = 0;

      for (guint64 i = lo; i < hi; i++)
        absmax = MAX (absmax, f32_bits (x[i]) & 0x7FFFFFFFu);
      scales[b] = _mixprec_state_block_scale (format, absmax);
    }
  for (guint64 i = 0; i < n; i++)
    {
      gfloat scale = scales[(p->phase + i) / BLOCK];

      codes[i] = _mixprec_state_encode1 (format, slot_signed[k], x[i], scale);
      p->want_states[k][i] = _mixprec_state_decode1 (format, slot_signed[k], codes[i], scale);
    }
  if (format == 6)
    {
      t = tensor_add (tensors, name, "U8", (n + 1) / 2);
      for (guint64 i = 0; i < n; i += 2)
        {
          guint8 byte = (guint8) (codes[i] | (i + 1 < n ? codes[i + 1] << 4 : 0));

          put (t, &byte, 1);
        }
    }
  else if (damage == DAMAGE_STATE_DTYPE)
    {
      t = tensor_add (tensors, name, "F32", n);
      for (guint64 i = 0; i < n; i++)
        put (t, &x[i], 4);
    }
  else
    {
      t = tensor_add (tensors, name, state_dtypes[format], n);
      for (guint64 i = 0; i < n; i++)
        {
          if (format == 2 || format == 3)
            {
              guint16 c = GUINT16_TO_LE ((guint16) codes[i]);

              put (t, &c, 2);
            }
          else
            {
              guint8 c = (guint8) codes[i];

              put (t, &c, 1);
            }
        }
    }
  if (damage == DAMAGE_NO_SCALES)
    return;
  t = tensor_add (tensors, scales_name, "F32", damage == DAMAGE_SHORT_SCALES ? nb - 1 : nb);
  put (t, scales, (damage == DAMAGE_SHORT_SCALES ? nb - 1 : nb) * 4);
}

/* Rewrites checkpoint @src (one rank, FP32) as @dst with @master and the
 * state @format, from the engine's @params. */
static void
convert (const gchar *src, const gchar *dst, GPtrArray *params, guint master, guint format,
         Damage damage)
{
  g_autofree gchar *manifest_path = g_build_filename (src, "manifest.json", NULL);
  g_autofree gchar *shard = g_build_filename (dst, "rank-00000.safetensors", NULL);
  g_autofree gchar *text = NULL;
  g_autofree gchar *shard_data = NULL;
  g_autofree gchar *sha = NULL;
  g_autofree gchar *out_path = g_build_filename (dst, "manifest.json", NULL);
  g_autofree gchar *out = NULL;
  g_autoptr(GPtrArray) metadata = g_ptr_array_new_with_free_func (g_free);
  g_autoptr(GPtrArray) tensors = g_ptr_array_new_with_free_func (tensor_free);
  g_autoptr(JsonParser) parser = json_parser_new ();
  g_autoptr(JsonGenerator) gen = json_generator_new ();
  g_autoptr(GError) error = NULL;
  gboolean scaled = format >= 2;
  JsonObject *root, *repr, *states, *file;
  JsonArray *jparams, *signed_slots;
  gsize length;

  g_assert_cmpint (g_mkdir_with_parents (dst, 0755), ==, 0);
  g_ptr_array_add (metadata, g_strdup ("format"));
  g_ptr_array_add (metadata, g_strdup ("libmixprec-shard"));
  g_ptr_array_add (metadata, g_strdup ("format_version"));
  g_ptr_array_add (metadata, g_strdup ("2"));
  g_ptr_array_add (metadata, g_strdup ("rank"));
  g_ptr_array_add (metadata, g_strdup ("0"));
  g_ptr_array_add (metadata, g_strdup ("world_size"));
  g_ptr_array_add (metadata, g_strdup ("1"));
  for (guint i = 0; i < params->len; i++)
    {
      Param *p = g_ptr_array_index (params, i);

      g_ptr_array_add (metadata, g_strconcat (p->name, "/range", NULL));
      g_ptr_array_add (metadata, g_strdup_printf ("0:%" G_GUINT64_FORMAT, p->numel));
      if (scaled)
        {
          g_ptr_array_add (metadata, g_strconcat (p->name, "/block_phase", NULL));
          g_ptr_array_add (metadata, damage == DAMAGE_BAD_PHASE
                                     ? g_strdup_printf ("%u", BLOCK)
                                     : g_strdup_printf ("%" G_GUINT64_FORMAT, p->phase));
        }
      add_master (tensors, p, master, damage);
      for (guint k = 0; k < 2; k++)
        add_state (tensors, p, k, format, damage);
    }
  write_safetensors (shard, metadata, tensors);

  g_file_get_contents (shard, &shard_data, &length, &error);
  g_assert_no_error (error);
  sha = g_compute_checksum_for_data (G_CHECKSUM_SHA256, (const guchar *) shard_data, length);

  g_file_get_contents (manifest_path, &text, NULL, &error);
  g_assert_no_error (error);
  json_parser_load_from_data (parser, text, -1, &error);
  g_assert_no_error (error);
  root = json_node_get_object (json_parser_get_root (parser));
  json_object_set_int_member (root, "format_version", 2);
  repr = json_object_new ();
  json_object_set_int_member (repr, "block_size", scaled ? BLOCK : 0);
  states = json_object_new ();
  signed_slots = json_array_new ();
  for (guint k = 0; k < 2; k++)
    {
      json_object_set_string_member (states, slots[k], state_names[format]);
      if (slot_signed[k])
        json_array_add_string_element (signed_slots, slots[k]);
    }
  json_object_set_object_member (repr, "state_slots", states);
  json_object_set_array_member (repr, "signed_slots", signed_slots);
  json_object_set_object_member (root, "representation", repr);
  jparams = json_object_get_array_member (root, "params");
  for (guint i = 0; i < json_array_get_length (jparams); i++)
    json_object_set_string_member (json_array_get_object_element (jparams, i), "master",
                                   master_names[master]);
  file = json_array_get_object_element (json_object_get_array_member (root, "files"), 0);
  json_object_set_int_member (file, "size", (gint64) length);
  json_object_set_string_member (file, "sha256", sha);
  json_generator_set_root (gen, json_parser_get_root (parser));
  out = json_generator_to_data (gen, &length);
  g_file_set_contents (out_path, out, length, &error);
  g_assert_no_error (error);
}

static void
assert_floats (GBytes *got, const gfloat *want, guint64 n, const gchar *what)
{
  gsize size;
  const guint32 *g = g_bytes_get_data (got, &size);

  g_assert_cmpuint (size, ==, n * 4);
  for (guint64 i = 0; i < n; i++)
    if (g[i] != f32_bits (want[i]))
      g_error ("%s: element %" G_GUINT64_FORMAT " is %a (0x%08x), expected %a (0x%08x)", what, i,
               f32_from (g[i]), g[i], want[i], f32_bits (want[i]));
}

/* The engine's own values, for a failed load to leave as they were. */
static GPtrArray *
engine_values (MixprecEngine *engine)
{
  return ckpt_snapshot (engine);
}

/* ---------------------------------------------------------------- tests */

typedef struct
{
  guint master;
  guint format;
} Pair;

static void
test_decode (gconstpointer data)
{
  const Pair *pair = data;
  g_autofree gchar *tmp = ckpt_make_tmpdir ();
  g_autofree gchar *src = g_build_filename (tmp, "src", NULL);
  g_autofree gchar *dst = g_build_filename (tmp, "conv", NULL);
  g_autofree gchar *export_a = g_build_filename (tmp, "a.safetensors", NULL);
  g_autofree gchar *export_b = g_build_filename (tmp, "b.safetensors", NULL);
  g_autofree gchar *bytes_a = NULL, *bytes_b = NULL;
  gsize len_a, len_b;
  g_autoptr(MixprecEngine) trained = ckpt_engine_new (ckpt_modes[2].json);
  g_autoptr(MixprecEngine) resumed = ckpt_engine_new (ckpt_modes[2].json);
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GPtrArray) params = NULL;
  g_autoptr(GError) error = NULL;

  ckpt_build_model (trained, 0, 0);
  ckpt_train (trained, 0, 3, FALSE);
  mixprec_engine_save_checkpoint_full (trained, tmp, "src", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  params = read_params (trained);
  convert (src, dst, params, pair->master, pair->format, DAMAGE_NONE);

  ckpt_build_model (resumed, 1, 0);
  mixprec_engine_load_checkpoint (resumed, dst, &error);
  g_assert_no_error (error);
  ckpt = mixprec_checkpoint_open (dst, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_checkpoint_get_format_version (ckpt), ==, 2);
  mixprec_checkpoint_verify (ckpt, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < params->len; i++)
    {
      Param *p = g_ptr_array_index (params, i);
      g_autoptr(GBytes) master = mixprec_engine_gather_master (resumed, p->name, &error);
      g_autoptr(GBytes) read = NULL;
      g_autofree gchar *what = g_strdup_printf ("%s/master (%s)", p->name, master_names[pair->master]);

      g_assert_no_error (error);
      assert_floats (master, p->want_master, p->numel, what);
      read = mixprec_checkpoint_read_master (ckpt, p->name, &error);
      g_assert_no_error (error);
      assert_floats (read, p->want_master, p->numel, what);
      for (guint k = 0; k < 2; k++)
        {
          g_autoptr(GBytes) state = mixprec_engine_get_optimizer_state (resumed, p->name, slots[k], &error);
          g_autoptr(GBytes) saved = NULL;

          g_free (what);
          what = g_strdup_printf ("%s/%s (%s)", p->name, slots[k], state_names[pair->format]);
          g_assert_no_error (error);
          assert_floats (state, p->want_states[k], p->numel, what);
          saved = mixprec_checkpoint_read_state (ckpt, p->name, slots[k], &error);
          g_assert_no_error (error);
          assert_floats (saved, p->want_states[k], p->numel, what);
        }
    }

  /* The offline export of the checkpoint and the export of the engine
   * that loaded it are the same file. */
  mixprec_checkpoint_export_fp32 (ckpt, export_a, &error);
  g_assert_no_error (error);
  mixprec_engine_export_fp32 (resumed, export_b, &error);
  g_assert_no_error (error);
  g_file_get_contents (export_a, &bytes_a, &len_a, NULL);
  g_file_get_contents (export_b, &bytes_b, &len_b, NULL);
  g_assert_cmpmem (bytes_a, len_a, bytes_b, len_b);

  /* The resumed run goes on. */
  ckpt_train (resumed, 3, 2, FALSE);
  ckpt_remove_tree (tmp);
}

typedef struct
{
  Damage damage;
  guint master;
  guint format;
  const gchar *needle;       /* in the message, besides the shard's name */
} DamageCase;

static void
test_damage (gconstpointer data)
{
  const DamageCase *c = data;
  g_autofree gchar *tmp = ckpt_make_tmpdir ();
  g_autofree gchar *src = g_build_filename (tmp, "src", NULL);
  g_autofree gchar *dst = g_build_filename (tmp, "conv", NULL);
  g_autoptr(MixprecEngine) trained = ckpt_engine_new (ckpt_modes[2].json);
  g_autoptr(MixprecEngine) other = ckpt_engine_new (ckpt_modes[2].json);
  g_autoptr(GPtrArray) params = NULL;
  g_autoptr(GPtrArray) before = NULL;
  g_autoptr(GPtrArray) after = NULL;
  g_autoptr(GError) error = NULL;

  ckpt_build_model (trained, 0, 0);
  ckpt_train (trained, 0, 2, FALSE);
  mixprec_engine_save_checkpoint_full (trained, tmp, "src", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  params = read_params (trained);
  convert (src, dst, params, c->master, c->format, c->damage);

  ckpt_build_model (other, 1, 0);
  ckpt_train (other, 0, 1, FALSE);
  before = engine_values (other);
  g_assert_false (mixprec_engine_load_checkpoint (other, dst, &error));
  g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "rank-00000.safetensors"));
  g_assert_nonnull (strstr (error->message, c->needle));
  after = engine_values (other);
  ckpt_assert_same (before, after);
  ckpt_remove_tree (tmp);
}

/* A manifest that declares a representation must be consistent. */
static void
test_manifest_errors (void)
{
  g_autofree gchar *tmp = ckpt_make_tmpdir ();
  g_autofree gchar *src = g_build_filename (tmp, "src", NULL);
  g_autofree gchar *dst = g_build_filename (tmp, "conv", NULL);
  g_autofree gchar *manifest = g_build_filename (dst, "manifest.json", NULL);
  g_autoptr(MixprecEngine) trained = ckpt_engine_new (ckpt_modes[2].json);
  g_autoptr(GPtrArray) params = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *text = NULL;
  const struct
  {
    const gchar *old, *new, *needle;
  } edits[] = {
    { "\"int8\"", "\"int7\"", "is not a state format" },
    { "\"block_size\":32", "\"block_size\":48", "block_size" },
    { "\"block_size\":32", "\"block_size\":0", "block_size" },
    { "\"signed_slots\":[\"exp_avg\"]", "\"signed_slots\":[\"nope\"]", "signed_slots" },
    { "\"master\":\"remainder\"", "\"master\":\"fp64\"", "master" },
  };

  ckpt_build_model (trained, 0, 0);
  ckpt_train (trained, 0, 1, FALSE);
  mixprec_engine_save_checkpoint_full (trained, tmp, "src", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  params = read_params (trained);
  convert (src, dst, params, 1, 5, DAMAGE_NONE);
  g_file_get_contents (manifest, &text, NULL, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < G_N_ELEMENTS (edits); i++)
    {
      g_autoptr(GString) edited = g_string_new (text);
      g_autoptr(MixprecCheckpoint) ckpt = NULL;

      g_assert_cmpuint (g_string_replace (edited, edits[i].old, edits[i].new, 1), ==, 1);
      g_file_set_contents (manifest, edited->str, edited->len, &error);
      g_assert_no_error (error);
      ckpt = mixprec_checkpoint_open (dst, &error);
      g_assert_null (ckpt);
      g_assert_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT);
      g_assert_nonnull (strstr (error->message, "manifest.json"));
      g_assert_nonnull (strstr (error->message, edits[i].needle));
      g_clear_error (&error);
    }
  ckpt_remove_tree (tmp);
}

/* ---------------------------------------------------------------- engines in each representation */

#define REPR_BLOCK 64

/* bf16 with LayerNorm kept in FP32 (its own master), ZeRO @stage, the
 * masters and every state slot as given. */
static gchar *
repr_json (guint master, guint format, guint stage)
{
  return g_strdup_printf (
    "{\"zero_optimization\": {\"stage\": %u}, \"bf16\": {\"enabled\": true},"
    " \"mixprec\": {\"fp32_modules\": [\"LayerNorm\"], \"master_weights\": \"%s\","
    "               \"optimizer_states\": {\"default\": \"%s\"%s}},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.01, \"weight_decay\": 0.01}},"
    " \"scheduler\": {\"type\": \"WarmupCosineLR\","
    "                 \"params\": {\"total_num_steps\": 40, \"warmup_num_steps\": 4}},"
    " \"gradient_clipping\": 1.0}",
    stage, master_names[master], state_names[format],
    format >= 2 ? ", \"block_size\": " G_STRINGIFY (REPR_BLOCK) : "");
}

static MixprecEngine *
repr_engine (guint master, guint format, guint variant)
{
  g_autofree gchar *json = repr_json (master, format, 0);
  MixprecEngine *engine = ckpt_engine_new (json);

  ckpt_build_model (engine, variant, 0);
  return engine;
}

/* Save, go on; load into a fresh engine, go on the same way: the same
 * values, bit for bit, and the checkpoint says what it holds. */
static void
test_resume (gconstpointer data)
{
  const Pair *pair = data;
  g_autofree gchar *tmp = ckpt_make_tmpdir ();
  g_autofree gchar *dir = g_build_filename (tmp, "r", NULL);
  g_autoptr(MixprecEngine) a = repr_engine (pair->master, pair->format, 0);
  g_autoptr(MixprecEngine) b = repr_engine (pair->master, pair->format, 1);
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GPtrArray) sa = NULL, sb = NULL;
  g_autoptr(GError) error = NULL;
  gboolean plain = pair->master == 0 && pair->format <= 1;

  ckpt_train (a, 0, 5, FALSE);
  mixprec_engine_save_checkpoint_full (a, tmp, "r", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  ckpt_train (a, 5, 4, FALSE);
  sa = ckpt_snapshot (a);

  mixprec_engine_load_checkpoint (b, dir, &error);
  g_assert_no_error (error);
  ckpt_train (b, 5, 4, FALSE);
  sb = ckpt_snapshot (b);
  ckpt_assert_same (sa, sb);

  ckpt = mixprec_checkpoint_open (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_checkpoint_get_format_version (ckpt), ==, plain ? 1 : 2);
  g_assert_cmpstr (mixprec_checkpoint_get_state_format (ckpt, "exp_avg"), ==, state_names[pair->format]);
  g_assert_cmpstr (mixprec_checkpoint_get_param_master_format (ckpt, "embed.weight"), ==,
                   master_names[pair->master]);
  /* LayerNorm is kept in FP32: its own master. */
  g_assert_cmpstr (mixprec_checkpoint_get_param_master_format (ckpt, "blocks.0.ln.weight"), ==, "fp32");
  g_assert_cmpuint (mixprec_checkpoint_get_block_size (ckpt), ==, pair->format >= 2 ? REPR_BLOCK : 0);
  ckpt_remove_tree (tmp);
}

/* The group a parameter of the test model is in: LayerNorm is kept in
 * FP32, biases take no weight decay, the rest share one. */
static guint
group_of (const gchar *name)
{
  if (strstr (name, ".ln.") != NULL)
    return 1;
  return g_str_has_suffix (name, ".bias") ? 2 : 0;
}

/* Where each parameter lies in its unit on one process: the parameters of
 * one group follow each other in registration order (the model is far
 * below the unit size). */
static guint64
unit_offset (GPtrArray *params, guint i)
{
  guint group = group_of (((Param *) g_ptr_array_index (params, i))->name);
  guint64 at = 0;

  for (guint j = 0; j < i; j++)
    if (group_of (((Param *) g_ptr_array_index (params, j))->name) == group)
      at += ((Param *) g_ptr_array_index (params, j))->numel;
  return at;
}

/* @x (every parameter's values of one slot, FP32) encoded into @format by
 * blocks of REPR_BLOCK of each unit and decoded again: what an engine in
 * @format holds after loading them. */
static gfloat **
expected_encoding (GPtrArray *params, GPtrArray *values, guint format, gboolean is_signed)
{
  gfloat **out = g_new0 (gfloat *, params->len);
  g_autoptr(GHashTable) absmax = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);

  /* Blocks are named by group and index. */
  for (guint pass = 0; pass < 2; pass++)
    for (guint i = 0; i < params->len; i++)
      {
        Param *p = g_ptr_array_index (params, i);
        const gfloat *x = g_ptr_array_index (values, i);
        guint64 base = unit_offset (params, i);
        guint group = group_of (p->name);

        if (pass == 1)
          out[i] = g_new (gfloat, MAX (p->numel, 1));
        for (guint64 e = 0; e < p->numel; e++)
          {
            g_autofree gchar *key = g_strdup_printf ("%u:%" G_GUINT64_FORMAT, group, (base + e) / REPR_BLOCK);
            guint32 bits = GPOINTER_TO_UINT (g_hash_table_lookup (absmax, key));

            if (pass == 0)
              {
                /* Stored + 1: 0 means no element seen yet. */
                guint32 a = f32_bits (x[e]) & 0x7FFFFFFFu;

                bits = bits == 0 ? a + 1 : MAX (bits, a + 1);
                g_hash_table_replace (absmax, g_steal_pointer (&key), GUINT_TO_POINTER (bits));
              }
            else
              {
                gfloat scale = _mixprec_state_block_scale (format, bits - 1);

                out[i][e] = _mixprec_state_decode1 (format, is_signed,
                                                    _mixprec_state_encode1 (format, is_signed, x[e], scale),
                                                    scale);
              }
          }
      }
  return out;
}

/* Saved in one representation, loaded into another (one process): the
 * masters and state the new engine holds are the saved FP32 values (exact
 * decoding) converted with the documented rules, recomputed here. */
static void
test_convert (gconstpointer data)
{
  const guint *codes = data;    /* from master, from format, to master, to format */
  g_autofree gchar *tmp = ckpt_make_tmpdir ();
  g_autofree gchar *dir = g_build_filename (tmp, "c", NULL);
  g_autoptr(MixprecEngine) a = repr_engine (codes[0], codes[1], 0);
  g_autoptr(MixprecEngine) b = repr_engine (codes[2], codes[3], 1);
  g_autoptr(MixprecCheckpoint) ckpt = NULL;
  g_autoptr(GPtrArray) params = NULL;
  g_autoptr(GError) error = NULL;

  ckpt_train (a, 0, 4, FALSE);
  mixprec_engine_save_checkpoint_full (a, tmp, "c", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  ckpt = mixprec_checkpoint_open (dir, &error);
  g_assert_no_error (error);
  mixprec_engine_load_checkpoint (b, dir, &error);
  g_assert_no_error (error);
  params = read_params (b);

  for (guint i = 0; i < params->len; i++)
    {
      Param *p = g_ptr_array_index (params, i);
      g_autoptr(GBytes) saved = mixprec_checkpoint_read_master (ckpt, p->name, &error);
      const gfloat *x;
      g_autofree gfloat *want = g_new (gfloat, MAX (p->numel, 1));
      g_autofree gchar *what = g_strdup_printf ("%s/master %s -> %s", p->name,
                                                master_names[codes[0]], master_names[codes[2]]);
      gboolean own = strstr (p->name, ".ln.") != NULL;

      g_assert_no_error (error);
      x = g_bytes_get_data (saved, NULL);
      for (guint64 e = 0; e < p->numel; e++)
        {
          if (codes[2] == 2 && !own)
            {
              /* Kahan: the working copy is the FP32 value rounded to
               * nearest even, the compensation that rounding's error. */
              guint16 w = bf16_rne (x[e]);

              want[e] = bf16_value (w) + bf16_value (bf16_rne (x[e] - bf16_value (w)));
            }
          else
            want[e] = x[e];
        }
      assert_floats (p->master, want, p->numel, what);
    }
  for (guint k = 0; k < 2; k++)
    {
      g_autoptr(GPtrArray) values = g_ptr_array_new_with_free_func (g_free);
      gfloat **want = NULL;

      for (guint i = 0; i < params->len; i++)
        {
          Param *p = g_ptr_array_index (params, i);
          g_autoptr(GBytes) saved = mixprec_checkpoint_read_state (ckpt, p->name, slots[k], &error);

          g_assert_no_error (error);
          g_ptr_array_add (values, g_memdup2 (g_bytes_get_data (saved, NULL), MAX (p->numel, 1) * 4));
        }
      if (codes[3] >= 2)
        want = expected_encoding (params, values, codes[3], slot_signed[k]);
      for (guint i = 0; i < params->len; i++)
        {
          Param *p = g_ptr_array_index (params, i);
          const gfloat *x = g_ptr_array_index (values, i);
          g_autofree gfloat *plain = g_new (gfloat, MAX (p->numel, 1));
          g_autofree gchar *what = g_strdup_printf ("%s/%s %s -> %s", p->name, slots[k],
                                                    state_names[codes[1]], state_names[codes[3]]);

          for (guint64 e = 0; e < p->numel; e++)
            plain[e] = codes[3] == 1 ? bf16_value (bf16_rne (x[e])) : x[e];
          assert_floats (p->states[k], want != NULL ? want[i] : plain, p->numel, what);
          if (want != NULL)
            g_free (want[i]);
        }
      g_free (want);
    }
  /* And it trains on. */
  ckpt_train (b, 4, 2, FALSE);
  ckpt_remove_tree (tmp);
}

/* mixprec-inspect --checkpoint says how each tensor is stored. */
static void
test_inspect (void)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *tmp = NULL;
  g_autofree gchar *src = NULL;
  g_autofree gchar *dst = NULL;
  g_autofree gchar *tool = NULL;
  g_autoptr(MixprecEngine) trained = NULL;
  g_autoptr(GPtrArray) params = NULL;
  g_autoptr(GError) error = NULL;
  const struct
  {
    const gchar *dir;
    const gchar *expected[4];
  } runs[] = {
    { "src", { "format version   1", "state formats    exp_avg fp32, exp_avg_sq fp32\n",
               "rank 0 [0, 184)\n", NULL } },
    { "conv", { "format version   2",
                "state formats    exp_avg int4, exp_avg_sq int4 (one FP32 scale per 32 elements)",
                "rank 0 [0, 184); master remainder (bf16 + int16, exact)", NULL } },
  };

  if (top == NULL)
    {
      g_test_skip ("MIXPREC_TOP_BUILDDIR is not set: run the test through make check");
      return;
    }
  tmp = ckpt_make_tmpdir ();
  src = g_build_filename (tmp, "src", NULL);
  dst = g_build_filename (tmp, "conv", NULL);
  tool = g_build_filename (top, "tools", "mixprec-inspect", NULL);
  trained = ckpt_engine_new (ckpt_modes[2].json);
  ckpt_build_model (trained, 0, 0);
  ckpt_train (trained, 0, 1, FALSE);
  mixprec_engine_save_checkpoint_full (trained, tmp, "src", MIXPREC_CHECKPOINT_SAVE_NO_LATEST, &error);
  g_assert_no_error (error);
  params = read_params (trained);
  convert (src, dst, params, 1, 6, DAMAGE_NONE);
  for (guint r = 0; r < G_N_ELEMENTS (runs); r++)
    {
      g_autofree gchar *dir = g_build_filename (tmp, runs[r].dir, NULL);
      const gchar *argv[] = { tool, "--checkpoint", dir, "--verify", NULL };
      g_autofree gchar *out = NULL;
      gint status = 0;

      g_assert_true (g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                                   &out, NULL, &status, &error));
      g_assert_no_error (error);
      g_assert_true (g_spawn_check_wait_status (status, NULL));
      for (guint i = 0; runs[r].expected[i] != NULL; i++)
        if (strstr (out, runs[r].expected[i]) == NULL)
          g_error ("mixprec-inspect --checkpoint printed no '%s':\n%s", runs[r].expected[i], out);
    }
  ckpt_remove_tree (tmp);
}

int
main (int argc, char **argv)
{
  static Pair pairs[G_N_ELEMENTS (master_names) * G_N_ELEMENTS (state_names)];
  static const DamageCase damages[] = {
    { DAMAGE_NO_SCALES, 0, 5, "exp_avg/scales" },
    { DAMAGE_SHORT_SCALES, 0, 6, "exp_avg/scales" },
    { DAMAGE_BAD_PHASE, 0, 4, "block_phase" },
    { DAMAGE_STATE_DTYPE, 0, 5, "/exp_avg'" },
    { DAMAGE_NO_REMAINDER, 1, 0, "master/remainder" },
    { DAMAGE_NO_REMAINDER, 2, 0, "master/compensation" },
  };
  static const gchar * const damage_names[] = {
    "none", "no-scales", "short-scales", "bad-phase", "state-dtype", "no-remainder",
  };
  /* Every master pair and every state pair, each at least once, in both
   * directions: (master, state) -> (master, state). */
  static const guint conversions[][4] = {
    { 0, 0, 1, 5 }, { 1, 5, 0, 0 },      /* fp32 <-> remainder, fp32 <-> int8 */
    { 0, 0, 2, 6 }, { 2, 6, 0, 0 },      /* fp32 <-> kahan, fp32 <-> int4 */
    { 1, 1, 2, 4 }, { 2, 4, 1, 1 },      /* remainder <-> kahan, bf16 <-> fp8 */
    { 1, 5, 1, 6 }, { 1, 6, 1, 5 },      /* int8 <-> int4 */
    { 0, 2, 0, 5 }, { 0, 3, 0, 4 },      /* fp16_scaled -> int8, bf16_scaled -> fp8 */
    { 0, 5, 0, 3 }, { 2, 4, 0, 2 },      /* int8 -> bf16_scaled, fp8 -> fp16_scaled */
    { 0, 1, 0, 6 }, { 0, 6, 0, 1 },      /* bf16 <-> int4 */
  };
  guint n = 0;

  g_test_init (&argc, &argv, NULL);
  for (guint m = 0; m < G_N_ELEMENTS (master_names); m++)
    for (guint f = 0; f < G_N_ELEMENTS (state_names); f++)
      {
        g_autofree gchar *path = g_strdup_printf ("/checkpoint-repr/decode/%s/%s", master_names[m],
                                                  state_names[f]);

        pairs[n].master = m;
        pairs[n].format = f;
        g_test_add_data_func (path, &pairs[n++], test_decode);
      }
  for (guint i = 0; i < G_N_ELEMENTS (damages); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/checkpoint-repr/damage/%s/%s/%s",
                                                damage_names[damages[i].damage],
                                                master_names[damages[i].master],
                                                state_names[damages[i].format]);

      g_test_add_data_func (path, &damages[i], test_damage);
    }
  g_test_add_func ("/checkpoint-repr/manifest-errors", test_manifest_errors);
  g_test_add_func ("/checkpoint-repr/inspect", test_inspect);
  for (guint i = 0; i < n; i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/checkpoint-repr/resume/%s/%s",
                                                master_names[pairs[i].master],
                                                state_names[pairs[i].format]);

      g_test_add_data_func (path, &pairs[i], test_resume);
    }
  for (guint i = 0; i < G_N_ELEMENTS (conversions); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/checkpoint-repr/convert/%s+%s/%s+%s",
                                                master_names[conversions[i][0]],
                                                state_names[conversions[i][1]],
                                                master_names[conversions[i][2]],
                                                state_names[conversions[i][3]]);

      g_test_add_data_func (path, conversions[i], test_convert);
    }
  return g_test_run ();
}
