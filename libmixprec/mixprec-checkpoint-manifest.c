/* mixprec-checkpoint-manifest.c — manifest.json, the description of a
 * checkpoint: written from a _MixprecManifest, and read back with every key
 * checked for presence, type and range before anything trusts it. Readers
 * ignore keys they do not know; a change older readers must not ignore
 * raises format_version. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-config-private.h"

/* The scaler state is GVariant text; a real one is a few hundred bytes. */
#define MAX_SCALER_STATE 65536

static void
param_free (gpointer data)
{
  _MixprecManifestParam *p = data;

  g_free (p->name);
  g_free (p->shape);
  g_free (p->module_type);
  g_clear_pointer (&p->pieces, g_array_unref);
  g_free (p);
}

static void
file_free (gpointer data)
{
  _MixprecManifestFile *f = data;

  g_free (f->name);
  g_free (f->sha256);
  g_free (f);
}

void
_mixprec_manifest_init (_MixprecManifest *m)
{
  memset (m, 0, sizeof *m);
  m->params = g_ptr_array_new_with_free_func (param_free);
  m->param_index = g_hash_table_new (g_str_hash, g_str_equal);
  m->files = g_ptr_array_new_with_free_func (file_free);
  m->fp8_states = g_hash_table_new_full (g_str_hash, g_str_equal, g_free,
                                         (GDestroyNotify) g_variant_unref);
}

void
_mixprec_manifest_clear (_MixprecManifest *m)
{
  g_free (m->libmixprec_version);
  g_free (m->tag);
  g_free (m->precision_mode);
  g_free (m->low_dtype);
  g_free (m->scaler_type);
  g_clear_pointer (&m->scaler_state, g_variant_unref);
  g_clear_pointer (&m->fp8_states, g_hash_table_unref);
  g_clear_pointer (&m->auto_precision, g_variant_unref);
  g_free (m->lr_schedule_type);
  g_free (m->optimizer_name);
  g_strfreev (m->state_names);
  g_clear_pointer (&m->hyper_parameters, json_node_unref);
  g_clear_pointer (&m->param_index, g_hash_table_unref);
  g_clear_pointer (&m->params, g_ptr_array_unref);
  g_clear_pointer (&m->files, g_ptr_array_unref);
  memset (m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- helpers */

gboolean
_mixprec_checkpoint_name_is_valid (const gchar *name)
{
  gsize n = strlen (name);

  if (n == 0 || n > 200 || name[0] == '.')
    return FALSE;
  for (const gchar *p = name; *p; p++)
    if (!g_ascii_isalnum (*p) && *p != '.' && *p != '_' && *p != '-')
      return FALSE;
  return TRUE;
}

gboolean
_mixprec_checkpoint_mode_scales (const gchar *mode,
                                 const gchar *low)
{
  if (g_strcmp0 (mode, mixprec_precision_mode_get_name (MIXPREC_PRECISION_MODE_FP16)) == 0 ||
      g_strcmp0 (mode, mixprec_precision_mode_get_name (MIXPREC_PRECISION_MODE_FP16_NO_MASTER)) == 0)
    return TRUE;
  return g_strcmp0 (mode, mixprec_precision_mode_get_name (MIXPREC_PRECISION_MODE_AUTOCAST)) == 0 &&
         g_strcmp0 (low, mixprec_dtype_get_name (MIXPREC_DTYPE_FLOAT16)) == 0;
}

gchar *
_mixprec_checkpoint_range_key (const gchar *name)
{
  return g_strconcat (name, "/range", NULL);
}

gchar *
_mixprec_checkpoint_shape_key (const gchar *name)
{
  return g_strconcat (name, "/shape", NULL);
}

gchar *
_mixprec_checkpoint_format_shape (const guint64 *shape,
                                  guint          n_dims,
                                  const gchar   *separator)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < n_dims; i++)
    g_string_append_printf (s, "%s%" G_GUINT64_FORMAT, i ? separator : "", shape[i]);
  return g_string_free (s, FALSE);
}

static gint
compare_pieces (gconstpointer a,
                gconstpointer b)
{
  const _MixprecManifestPiece *x = a, *y = b;

  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

gboolean
_mixprec_manifest_check_pieces (const _MixprecManifestParam *p,
                                const gchar                 *where,
                                GError                     **error)
{
  guint64 cursor = 0;

  g_array_sort (p->pieces, compare_pieces);
  for (guint i = 0; i < p->pieces->len; i++)
    {
      const _MixprecManifestPiece *piece = &g_array_index (p->pieces, _MixprecManifestPiece, i);

      if (piece->begin >= piece->end || piece->end > p->numel)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                       "%s: parameter '%s': the piece [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                       ") of rank %u is empty or outside its %" G_GUINT64_FORMAT " elements",
                       where, p->name, piece->begin, piece->end, piece->rank, p->numel);
          return FALSE;
        }
      if (piece->begin != cursor)
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                       "%s: parameter '%s': elements [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                       ") %s", where, p->name, MIN (cursor, piece->begin),
                       MAX (cursor, piece->begin),
                       piece->begin < cursor ? "are saved by two ranks (overlapping pieces)"
                                             : "are saved by no rank (a gap between pieces)");
          return FALSE;
        }
      cursor = piece->end;
    }
  if (cursor != p->numel)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: parameter '%s': elements [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                   ") are saved by no rank", where, p->name, cursor, p->numel);
      return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- writing */

static JsonNode *
string_array (const gchar * const *strv)
{
  JsonArray *a = json_array_new ();
  JsonNode *node = json_node_new (JSON_NODE_ARRAY);

  for (guint i = 0; strv != NULL && strv[i] != NULL; i++)
    json_array_add_string_element (a, strv[i]);
  json_node_take_array (node, a);
  return node;
}

gchar *
_mixprec_manifest_to_json (const _MixprecManifest *m)
{
  g_autoptr(JsonBuilder) b = json_builder_new ();
  g_autoptr(JsonNode) root = NULL;
  g_autofree gchar *seed = g_strdup_printf ("%" G_GUINT64_FORMAT, m->seed);
  g_autofree gchar *state = g_variant_print (m->scaler_state, TRUE);
  GString *out = g_string_new (NULL);

  json_builder_begin_object (b);
  json_builder_set_member_name (b, "format");
  json_builder_add_string_value (b, _MIXPREC_CHECKPOINT_MANIFEST_KIND);
  json_builder_set_member_name (b, "format_version");
  json_builder_add_int_value (b, m->format_version);
  json_builder_set_member_name (b, "libmixprec_version");
  json_builder_add_string_value (b, m->libmixprec_version);
  json_builder_set_member_name (b, "tag");
  json_builder_add_string_value (b, m->tag);
  json_builder_set_member_name (b, "step");
  json_builder_add_int_value (b, (gint64) m->step);
  json_builder_set_member_name (b, "applied_steps");
  json_builder_add_int_value (b, (gint64) m->applied_steps);
  json_builder_set_member_name (b, "skipped_steps");
  json_builder_add_int_value (b, (gint64) m->skipped_steps);
  /* A string: seeds use all 64 bits, JSON integers here stop at 2^63. */
  json_builder_set_member_name (b, "seed");
  json_builder_add_string_value (b, seed);
  json_builder_set_member_name (b, "precision_mode");
  json_builder_add_string_value (b, m->precision_mode);
  json_builder_set_member_name (b, "low_dtype");
  json_builder_add_string_value (b, m->low_dtype);
  json_builder_set_member_name (b, "world_size");
  json_builder_add_int_value (b, m->world_size);
  json_builder_set_member_name (b, "zero_stage");
  json_builder_add_int_value (b, m->zero_stage);

  /* GVariant text keeps each value's type (steps are "t", the scale a
   * double printed to round-trip), which JSON would lose. */
  json_builder_set_member_name (b, "loss_scaler");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, m->scaler_type);
  json_builder_set_member_name (b, "state");
  json_builder_add_string_value (b, state);
  json_builder_end_object (b);

  /* FP8 scalings (amax histories and scales), by parameter name, in
   * GVariant text like the scaler's state; only when there are any. */
  if (m->fp8_states != NULL && g_hash_table_size (m->fp8_states) > 0)
    {
      json_builder_set_member_name (b, "fp8");
      json_builder_begin_object (b);
      /* In registration order. */
      for (guint i = 0; i < m->params->len; i++)
        {
          const _MixprecManifestParam *p = g_ptr_array_index (m->params, i);
          GVariant *saved = g_hash_table_lookup (m->fp8_states, p->name);
          g_autofree gchar *text = NULL;

          if (saved == NULL)
            continue;
          text = g_variant_print (saved, TRUE);
          json_builder_set_member_name (b, p->name);
          json_builder_add_string_value (b, text);
        }
      json_builder_end_object (b);
    }

  /* mixprec.auto_precision: each parameter's dtype and counters. */
  if (m->auto_precision != NULL)
    {
      g_autofree gchar *text = g_variant_print (m->auto_precision, TRUE);

      json_builder_set_member_name (b, "auto_precision");
      json_builder_add_string_value (b, text);
    }

  json_builder_set_member_name (b, "lr_schedule");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "type");
  json_builder_add_string_value (b, m->lr_schedule_type);
  json_builder_set_member_name (b, "position");
  json_builder_add_int_value (b, (gint64) m->lr_position);
  json_builder_set_member_name (b, "base_lr");
  json_builder_add_double_value (b, m->base_lr);
  json_builder_end_object (b);

  json_builder_set_member_name (b, "optimizer");
  json_builder_begin_object (b);
  json_builder_set_member_name (b, "name");
  json_builder_add_string_value (b, m->optimizer_name);
  json_builder_set_member_name (b, "state_slots");
  json_builder_add_value (b, string_array ((const gchar * const *) m->state_names));
  json_builder_set_member_name (b, "hyper_parameters");
  if (m->hyper_parameters != NULL)
    json_builder_add_value (b, json_node_copy (m->hyper_parameters));
  else
    {
      json_builder_begin_object (b);
      json_builder_end_object (b);
    }
  json_builder_end_object (b);

  if (m->repr.present)
    {
      json_builder_set_member_name (b, "representation");
      json_builder_begin_object (b);
      json_builder_set_member_name (b, "block_size");
      json_builder_add_int_value (b, m->repr.block_size);
      json_builder_set_member_name (b, "state_slots");
      json_builder_begin_object (b);
      for (guint s = 0; m->state_names[s] != NULL; s++)
        {
          json_builder_set_member_name (b, m->state_names[s]);
          json_builder_add_string_value (b, _mixprec_checkpoint_state_format_name (m->repr.states[s]));
        }
      json_builder_end_object (b);
      json_builder_set_member_name (b, "signed_slots");
      json_builder_begin_array (b);
      for (guint s = 0; m->state_names[s] != NULL; s++)
        if (m->repr.state_signed[s])
          json_builder_add_string_value (b, m->state_names[s]);
      json_builder_end_array (b);
      json_builder_end_object (b);
    }

  json_builder_set_member_name (b, "params");
  json_builder_begin_array (b);
  for (guint i = 0; i < m->params->len; i++)
    {
      const _MixprecManifestParam *p = g_ptr_array_index (m->params, i);

      json_builder_begin_object (b);
      json_builder_set_member_name (b, "name");
      json_builder_add_string_value (b, p->name);
      json_builder_set_member_name (b, "shape");
      json_builder_begin_array (b);
      for (guint d = 0; d < p->n_dims; d++)
        json_builder_add_int_value (b, (gint64) p->shape[d]);
      json_builder_end_array (b);
      json_builder_set_member_name (b, "numel");
      json_builder_add_int_value (b, (gint64) p->numel);
      json_builder_set_member_name (b, "module_type");
      json_builder_add_string_value (b, p->module_type);
      if (m->repr.present)
        {
          json_builder_set_member_name (b, "master");
          json_builder_add_string_value (b, _mixprec_checkpoint_master_format_name (p->master_format));
        }
      json_builder_set_member_name (b, "pieces");
      json_builder_begin_array (b);
      for (guint k = 0; k < p->pieces->len; k++)
        {
          const _MixprecManifestPiece *piece = &g_array_index (p->pieces, _MixprecManifestPiece, k);
          const _MixprecManifestFile *f = g_ptr_array_index (m->files, piece->file);

          json_builder_begin_object (b);
          json_builder_set_member_name (b, "rank");
          json_builder_add_int_value (b, piece->rank);
          json_builder_set_member_name (b, "file");
          json_builder_add_string_value (b, f->name);
          json_builder_set_member_name (b, "begin");
          json_builder_add_int_value (b, (gint64) piece->begin);
          json_builder_set_member_name (b, "end");
          json_builder_add_int_value (b, (gint64) piece->end);
          json_builder_end_object (b);
        }
      json_builder_end_array (b);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);

  json_builder_set_member_name (b, "files");
  json_builder_begin_array (b);
  for (guint i = 0; i < m->files->len; i++)
    {
      const _MixprecManifestFile *f = g_ptr_array_index (m->files, i);

      json_builder_begin_object (b);
      json_builder_set_member_name (b, "name");
      json_builder_add_string_value (b, f->name);
      json_builder_set_member_name (b, "rank");
      json_builder_add_int_value (b, f->rank);
      json_builder_set_member_name (b, "size");
      json_builder_add_int_value (b, (gint64) f->size);
      json_builder_set_member_name (b, "sha256");
      json_builder_add_string_value (b, f->sha256);
      json_builder_end_object (b);
    }
  json_builder_end_array (b);
  json_builder_end_object (b);

  root = json_builder_get_root (b);
  /* json-glib 1.6's generator misprints some doubles (base_lr, the
   * hyper-parameters); this writer prints them to read back exactly. */
  _mixprec_json_write (out, root, 0);
  g_string_append_c (out, '\n');
  return g_string_free (out, FALSE);
}

/* ---------------------------------------------------------------- reading */

typedef struct
{
  const gchar *file;
  GError     **error;
} Reader;

static gboolean
bad (Reader      *r,
     const gchar *prefix,
     const gchar *key,
     const gchar *rule)
{
  g_autofree gchar *path = _mixprec_json_join_path (prefix, key);

  g_set_error (r->error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
               "%s: '%s' %s", r->file, path, rule);
  return FALSE;
}

static JsonNode *
member (Reader      *r,
        JsonObject  *o,
        const gchar *prefix,
        const gchar *key)
{
  JsonNode *node = json_object_get_member (o, key);

  if (node == NULL)
    bad (r, prefix, key, "is missing");
  return node;
}

static gboolean
get_string (Reader       *r,
            JsonObject   *o,
            const gchar  *prefix,
            const gchar  *key,
            gchar       **out)
{
  JsonNode *node = member (r, o, prefix, key);

  if (node == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_STRING)
    return bad (r, prefix, key, "must be a string");
  *out = g_strdup (json_node_get_string (node));
  return TRUE;
}

static gboolean
get_uint (Reader      *r,
          JsonObject  *o,
          const gchar *prefix,
          const gchar *key,
          guint64      max,
          guint64     *out)
{
  JsonNode *node = member (r, o, prefix, key);

  if (node == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64 ||
      json_node_get_int (node) < 0 || (guint64) json_node_get_int (node) > max)
    {
      g_autofree gchar *rule = g_strdup_printf ("must be an integer from 0 to %" G_GUINT64_FORMAT,
                                                max);
      return bad (r, prefix, key, rule);
    }
  *out = (guint64) json_node_get_int (node);
  return TRUE;
}

static JsonObject *
get_object (Reader      *r,
            JsonObject  *o,
            const gchar *prefix,
            const gchar *key)
{
  JsonNode *node = member (r, o, prefix, key);

  if (node == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      bad (r, prefix, key, "must be an object");
      return NULL;
    }
  return json_node_get_object (node);
}

static JsonArray *
get_array (Reader      *r,
           JsonObject  *o,
           const gchar *prefix,
           const gchar *key)
{
  JsonNode *node = member (r, o, prefix, key);

  if (node == NULL)
    return NULL;
  if (!JSON_NODE_HOLDS_ARRAY (node))
    {
      bad (r, prefix, key, "must be an array");
      return NULL;
    }
  return json_node_get_array (node);
}

static JsonObject *
element_object (Reader      *r,
                JsonArray   *a,
                const gchar *path,
                guint        index)
{
  JsonNode *node = json_array_get_element (a, index);

  if (!JSON_NODE_HOLDS_OBJECT (node))
    {
      g_autofree gchar *where = _mixprec_json_index_path (path, index);

      g_set_error (r->error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: '%s' must be an object", r->file, where);
      return NULL;
    }
  return json_node_get_object (node);
}

static gboolean
is_sha256 (const gchar *s)
{
  if (strlen (s) != 64)
    return FALSE;
  for (const gchar *p = s; *p; p++)
    if (!g_ascii_isdigit (*p) && !(*p >= 'a' && *p <= 'f'))
      return FALSE;
  return TRUE;
}

/* A save writes exactly one shard per rank: a list of another length, or
 * two files of one rank, is not a checkpoint of that world size (and a
 * huge world_size over a short list would make a load believe in ranks
 * that never existed). */
static gboolean
check_one_file_per_rank (Reader                 *r,
                         const _MixprecManifest *m)
{
  g_autofree guint8 *seen = NULL;

  if (m->files->len != m->world_size)
    {
      g_autofree gchar *rule = g_strdup_printf ("lists %u files, but 'world_size' is %u: a "
                                                "checkpoint holds one shard file per rank",
                                                m->files->len, m->world_size);

      return bad (r, "", "files", rule);
    }
  seen = g_new0 (guint8, MAX (m->world_size, 1));
  for (guint i = 0; i < m->files->len; i++)
    {
      const _MixprecManifestFile *f = g_ptr_array_index (m->files, i);
      g_autofree gchar *where = _mixprec_json_index_path ("files", i);

      if (seen[f->rank]++)
        return bad (r, where, "rank", "names a rank whose file is listed already");
    }
  return TRUE;
}

/* "representation": required by format_version 2, refused by 1 (whose
 * readers would ignore it and misread the tensors). */
static gboolean
parse_representation (Reader           *r,
                      _MixprecManifest *m,
                      JsonObject       *root)
{
  JsonObject *repr, *slots;
  JsonArray *signed_slots;
  guint n = g_strv_length (m->state_names);
  gboolean scaled = FALSE;
  guint64 value;

  if (m->format_version == MIXPREC_CHECKPOINT_FORMAT_VERSION)
    {
      if (json_object_has_member (root, "representation"))
        return bad (r, "", "representation", "needs format_version 2");
      return TRUE;
    }
  if ((repr = get_object (r, root, "", "representation")) == NULL ||
      (slots = get_object (r, repr, "representation", "state_slots")) == NULL ||
      (signed_slots = get_array (r, repr, "representation", "signed_slots")) == NULL ||
      !get_uint (r, repr, "representation", "block_size", 4096, &value))
    return FALSE;
  m->repr.present = TRUE;
  m->repr.block_size = (guint) value;
  if (json_object_get_size (slots) != n)
    return bad (r, "representation", "state_slots", "must name each of optimizer.state_slots once");
  for (guint s = 0; s < n; s++)
    {
      g_autofree gchar *format = NULL;

      if (!get_string (r, slots, "representation.state_slots", m->state_names[s], &format))
        return FALSE;
      if (!_mixprec_checkpoint_state_format_parse (format, &m->repr.states[s]))
        return bad (r, "representation.state_slots", m->state_names[s],
                    "is not a state format (fp32, bf16, fp16_scaled, bf16_scaled, "
                    "fp8_e4m3_scaled, int8, int4)");
      scaled = scaled || _mixprec_checkpoint_state_is_scaled (m->repr.states[s]);
    }
  for (guint i = 0; i < json_array_get_length (signed_slots); i++)
    {
      JsonNode *e = json_array_get_element (signed_slots, i);
      guint s;

      if (!JSON_NODE_HOLDS_VALUE (e) || json_node_get_value_type (e) != G_TYPE_STRING)
        return bad (r, "representation", "signed_slots", "must hold slot names");
      for (s = 0; s < n && !g_str_equal (m->state_names[s], json_node_get_string (e)); s++)
        ;
      if (s == n || m->repr.state_signed[s])
        return bad (r, "representation", "signed_slots", "must name distinct state slots");
      m->repr.state_signed[s] = TRUE;
    }
  if (scaled ? (value < 32 || (value & (value - 1)) != 0) : value != 0)
    return bad (r, "representation", "block_size",
                "must be a power of two from 32 to 4096 when a slot is scaled, else 0");
  return TRUE;
}

static gboolean
parse_files (Reader           *r,
             _MixprecManifest *m,
             JsonObject       *root,
             GHashTable       *file_index)
{
  JsonArray *files = get_array (r, root, "", "files");

  if (files == NULL)
    return FALSE;
  for (guint i = 0; i < json_array_get_length (files); i++)
    {
      g_autofree gchar *where = _mixprec_json_index_path ("files", i);
      JsonObject *o = element_object (r, files, "files", i);
      _MixprecManifestFile *f;
      guint64 rank;

      if (o == NULL)
        return FALSE;
      f = g_new0 (_MixprecManifestFile, 1);
      g_ptr_array_add (m->files, f);
      if (!get_string (r, o, where, "name", &f->name) ||
          !get_uint (r, o, where, "rank", m->world_size - 1, &rank) ||
          !get_uint (r, o, where, "size", G_MAXINT64, &f->size) ||
          !get_string (r, o, where, "sha256", &f->sha256))
        return FALSE;
      f->rank = (guint) rank;
      if (!_mixprec_checkpoint_name_is_valid (f->name))
        return bad (r, where, "name", "must be a plain file name ([A-Za-z0-9._-], not "
                    "starting with '.')");
      if (!is_sha256 (f->sha256))
        return bad (r, where, "sha256", "must be 64 lowercase hexadecimal digits");
      if (g_hash_table_contains (file_index, f->name))
        return bad (r, where, "name", "names a file listed twice");
      g_hash_table_insert (file_index, f->name, GUINT_TO_POINTER (i + 1));
    }
  return check_one_file_per_rank (r, m);
}

static gboolean
parse_param (Reader           *r,
             _MixprecManifest *m,
             JsonObject       *o,
             const gchar      *where,
             GHashTable       *file_index)
{
  _MixprecManifestParam *p = g_new0 (_MixprecManifestParam, 1);
  g_autofree gchar *pieces_path = _mixprec_json_join_path (where, "pieces");
  JsonArray *shape, *pieces;
  guint64 numel = 1;

  p->pieces = g_array_new (FALSE, FALSE, sizeof (_MixprecManifestPiece));
  g_ptr_array_add (m->params, p);
  if (!get_string (r, o, where, "name", &p->name) ||
      !get_string (r, o, where, "module_type", &p->module_type) ||
      !get_uint (r, o, where, "numel", G_MAXINT64, &p->numel) ||
      (shape = get_array (r, o, where, "shape")) == NULL ||
      (pieces = get_array (r, o, where, "pieces")) == NULL)
    return FALSE;
  if (*p->name == '\0')
    return bad (r, where, "name", "must not be empty");
  /* How its master is kept: declared per parameter, as parameters kept in
   * FP32 are their own masters whatever the others use. */
  if (m->repr.present)
    {
      g_autofree gchar *master = NULL;

      if (!get_string (r, o, where, "master", &master))
        return FALSE;
      if (!_mixprec_checkpoint_master_format_parse (master, &p->master_format))
        return bad (r, where, "master", "must be \"fp32\", \"remainder\" or \"kahan\"");
    }
  else if (json_object_has_member (o, "master"))
    return bad (r, where, "master", "needs format_version 2");
  if (g_hash_table_contains (m->param_index, p->name))
    return bad (r, where, "name", "names a parameter listed twice");
  g_hash_table_insert (m->param_index, p->name, p);

  p->n_dims = json_array_get_length (shape);
  if (p->n_dims > _MIXPREC_SAFETENSORS_MAX_DIMS)
    return bad (r, where, "shape", "has more than 64 dimensions");
  p->shape = g_new0 (guint64, MAX (p->n_dims, 1));
  for (guint d = 0; d < p->n_dims; d++)
    {
      JsonNode *node = json_array_get_element (shape, d);

      if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64 ||
          json_node_get_int (node) < 0)
        return bad (r, where, "shape", "must hold non-negative integers");
      p->shape[d] = (guint64) json_node_get_int (node);
      if (!g_uint64_checked_mul (&numel, numel, p->shape[d]))
        return bad (r, where, "shape", "has more elements than 64 bits count");
    }
  if (numel != p->numel)
    return bad (r, where, "numel", "differs from the product of the shape");

  for (guint k = 0; k < json_array_get_length (pieces); k++)
    {
      g_autofree gchar *piece_path = _mixprec_json_index_path (pieces_path, k);
      JsonObject *po = element_object (r, pieces, pieces_path, k);
      _MixprecManifestPiece piece = { 0 };
      g_autofree gchar *file = NULL;
      guint64 rank;
      gpointer index;

      if (po == NULL ||
          !get_uint (r, po, piece_path, "rank", m->world_size - 1, &rank) ||
          !get_string (r, po, piece_path, "file", &file) ||
          !get_uint (r, po, piece_path, "begin", p->numel, &piece.begin) ||
          !get_uint (r, po, piece_path, "end", p->numel, &piece.end))
        return FALSE;
      index = g_hash_table_lookup (file_index, file);
      if (index == NULL)
        return bad (r, piece_path, "file", "names a file that 'files' does not list");
      piece.rank = (guint) rank;
      piece.file = GPOINTER_TO_UINT (index) - 1;
      if (((_MixprecManifestFile *) g_ptr_array_index (m->files, piece.file))->rank != piece.rank)
        return bad (r, piece_path, "rank", "differs from the rank of the file it names");
      g_array_append_val (p->pieces, piece);
    }
  return _mixprec_manifest_check_pieces (p, r->file, r->error);
}

static gboolean
parse_root (Reader           *r,
            _MixprecManifest *m,
            JsonObject       *root)
{
  g_autoptr(GHashTable) file_index = g_hash_table_new (g_str_hash, g_str_equal);
  g_autofree gchar *format = NULL;
  g_autofree gchar *seed = NULL;
  g_autofree gchar *state = NULL;
  g_autoptr(GError) local_error = NULL;
  JsonObject *scaler, *lr, *opt;
  JsonArray *slots, *params;
  JsonNode *node;
  guint64 value;

  if (!get_string (r, root, "", "format", &format))
    return FALSE;
  if (!g_str_equal (format, _MIXPREC_CHECKPOINT_MANIFEST_KIND))
    return bad (r, "", "format", "must be \"" _MIXPREC_CHECKPOINT_MANIFEST_KIND "\"");
  /* The version comes before every other key: a newer format may have
   * renamed them, and "too new" is the useful message then. */
  if (!get_uint (r, root, "", "format_version", G_MAXINT64, &value))
    return FALSE;
  if (value != MIXPREC_CHECKPOINT_FORMAT_VERSION && value != _MIXPREC_CHECKPOINT_FORMAT_VERSION_REPR)
    {
      g_set_error (r->error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_VERSION,
                   "%s: format_version %" G_GUINT64_FORMAT " is not one this libmixprec (%s) "
                   "reads (%d or %d)%s", r->file, value, MIXPREC_VERSION_S,
                   MIXPREC_CHECKPOINT_FORMAT_VERSION, _MIXPREC_CHECKPOINT_FORMAT_VERSION_REPR,
                   value > _MIXPREC_CHECKPOINT_FORMAT_VERSION_REPR
                     ? "; it was written by a newer libmixprec: load it with that" : "");
      return FALSE;
    }
  m->format_version = (guint) value;

  if (!get_string (r, root, "", "libmixprec_version", &m->libmixprec_version) ||
      !get_string (r, root, "", "tag", &m->tag) ||
      !get_uint (r, root, "", "step", G_MAXINT64, &m->step) ||
      !get_uint (r, root, "", "applied_steps", m->step, &m->applied_steps) ||
      !get_uint (r, root, "", "skipped_steps", m->step, &m->skipped_steps) ||
      !get_string (r, root, "", "seed", &seed) ||
      !get_string (r, root, "", "precision_mode", &m->precision_mode) ||
      !get_string (r, root, "", "low_dtype", &m->low_dtype) ||
      !get_uint (r, root, "", "world_size", _MIXPREC_CHECKPOINT_MAX_WORLD, &value))
    return FALSE;
  if (!_mixprec_checkpoint_name_is_valid (m->tag))
    return bad (r, "", "tag", "must be a plain folder name");
  if (m->applied_steps + m->skipped_steps != m->step)
    return bad (r, "", "step", "differs from applied_steps + skipped_steps");
  if (!g_ascii_string_to_unsigned (seed, 10, 0, G_MAXUINT64, &m->seed, NULL))
    return bad (r, "", "seed", "must be a decimal unsigned 64-bit integer in a string");
  if (value == 0)
    return bad (r, "", "world_size", "must be at least 1");
  m->world_size = (guint) value;
  if (!get_uint (r, root, "", "zero_stage", 3, &value))
    return FALSE;
  m->zero_stage = (guint) value;

  if ((scaler = get_object (r, root, "", "loss_scaler")) == NULL ||
      !get_string (r, scaler, "loss_scaler", "type", &m->scaler_type) ||
      !get_string (r, scaler, "loss_scaler", "state", &state))
    return FALSE;
  if (strlen (state) > MAX_SCALER_STATE)
    return bad (r, "loss_scaler", "state", "is longer than any scaler state");
  m->scaler_state = g_variant_parse (G_VARIANT_TYPE_VARDICT, state, NULL, NULL, &local_error);
  if (m->scaler_state == NULL)
    {
      g_autofree gchar *rule = g_strdup_printf ("is not a GVariant dictionary (a{sv}): %s",
                                                local_error->message);
      return bad (r, "loss_scaler", "state", rule);
    }
  /* g_variant_parse() returns a reference of our own, not a floating one:
   * sinking it would take a second reference that nothing drops. */

  /* Optional: FP8 scalings by parameter name. */
  if (json_object_has_member (root, "fp8"))
    {
      JsonObject *fp8 = get_object (r, root, "", "fp8");
      g_autoptr(GList) names = NULL;

      if (fp8 == NULL)
        return FALSE;
      names = json_object_get_members (fp8);
      for (GList *l = names; l != NULL; l = l->next)
        {
          g_autofree gchar *text = NULL;
          GVariant *v;

          if (!get_string (r, fp8, "fp8", l->data, &text))
            return FALSE;
          if (strlen (text) > MAX_SCALER_STATE)
            return bad (r, "fp8", l->data, "is longer than any FP8 scaling state");
          g_clear_error (&local_error);
          v = g_variant_parse (G_VARIANT_TYPE_VARDICT, text, NULL, NULL, &local_error);
          if (v == NULL)
            {
              g_autofree gchar *rule = g_strdup_printf ("is not a GVariant dictionary (a{sv}): %s",
                                                        local_error->message);
              return bad (r, "fp8", l->data, rule);
            }
          g_hash_table_replace (m->fp8_states, g_strdup (l->data), v);
        }
    }

  /* Optional: auto-precision's state (mixprec-engine-autoprec.c checks
   * what it holds). */
  if (json_object_has_member (root, "auto_precision"))
    {
      g_autofree gchar *text = NULL;

      if (!get_string (r, root, "", "auto_precision", &text))
        return FALSE;
      g_clear_error (&local_error);
      m->auto_precision = g_variant_parse (G_VARIANT_TYPE_VARDICT, text, NULL, NULL, &local_error);
      if (m->auto_precision == NULL)
        {
          g_autofree gchar *rule = g_strdup_printf ("is not a GVariant dictionary (a{sv}): %s",
                                                    local_error->message);
          return bad (r, "", "auto_precision", rule);
        }
    }

  if ((lr = get_object (r, root, "", "lr_schedule")) == NULL ||
      !get_string (r, lr, "lr_schedule", "type", &m->lr_schedule_type) ||
      !get_uint (r, lr, "lr_schedule", "position", G_MAXINT64, &m->lr_position) ||
      (node = member (r, lr, "lr_schedule", "base_lr")) == NULL)
    return FALSE;
  if (!JSON_NODE_HOLDS_VALUE (node) ||
      (json_node_get_value_type (node) != G_TYPE_DOUBLE &&
       json_node_get_value_type (node) != G_TYPE_INT64))
    return bad (r, "lr_schedule", "base_lr", "must be a number");
  m->base_lr = json_node_get_double (node);

  if ((opt = get_object (r, root, "", "optimizer")) == NULL ||
      !get_string (r, opt, "optimizer", "name", &m->optimizer_name) ||
      (slots = get_array (r, opt, "optimizer", "state_slots")) == NULL ||
      get_object (r, opt, "optimizer", "hyper_parameters") == NULL)
    return FALSE;
  m->hyper_parameters = json_node_copy (json_object_get_member (opt, "hyper_parameters"));
  if (json_array_get_length (slots) > 16)
    return bad (r, "optimizer", "state_slots", "lists more than 16 slots");
  m->state_names = g_new0 (gchar *, json_array_get_length (slots) + 1);
  for (guint i = 0; i < json_array_get_length (slots); i++)
    {
      JsonNode *s = json_array_get_element (slots, i);

      if (!JSON_NODE_HOLDS_VALUE (s) || json_node_get_value_type (s) != G_TYPE_STRING ||
          !_mixprec_checkpoint_name_is_valid (json_node_get_string (s)) ||
          g_strv_contains ((const gchar * const *) m->state_names, json_node_get_string (s)) ||
          g_str_equal (json_node_get_string (s), "master"))
        return bad (r, "optimizer", "state_slots", "must hold distinct plain names other than "
                    "\"master\"");
      m->state_names[i] = g_strdup (json_node_get_string (s));
    }

  if (!parse_representation (r, m, root))
    return FALSE;
  if (!parse_files (r, m, root, file_index))
    return FALSE;
  if ((params = get_array (r, root, "", "params")) == NULL)
    return FALSE;
  for (guint i = 0; i < json_array_get_length (params); i++)
    {
      g_autofree gchar *where = _mixprec_json_index_path ("params", i);
      JsonObject *o = element_object (r, params, "params", i);

      if (o == NULL || !parse_param (r, m, o, where, file_index))
        return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_manifest_parse (_MixprecManifest *m,
                         const gchar      *path,
                         const gchar      *data,
                         gsize             length,
                         GError          **error)
{
  MixprecConfigReport report;
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) local_error = NULL;
  Reader r = { path, error };
  JsonNode *root;
  gboolean ok;

  _mixprec_config_report_init (&report);
  ok = _mixprec_json_scan (data, length, &report);
  if (!ok || report.problems->len > 0)
    {
      const MixprecConfigProblem *first = report.problems->len > 0
        ? g_ptr_array_index (report.problems, 0) : NULL;

      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: not a valid manifest: %s", path,
                   first != NULL ? first->message : "invalid JSON");
      _mixprec_config_report_clear (&report);
      return FALSE;
    }
  _mixprec_config_report_clear (&report);

  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, data, length, &local_error))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: not a valid manifest: %s", path, local_error->message);
      return FALSE;
    }
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
                   "%s: not a valid manifest: the top level is not a JSON object", path);
      return FALSE;
    }
  return parse_root (&r, m, json_node_get_object (root));
}
