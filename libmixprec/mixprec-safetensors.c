/* mixprec-safetensors.c — the safetensors reader: every length, offset and
 * name in a header is checked against the file before any tensor byte is
 * read, so a damaged or hostile file gives an error, never a crash or a
 * huge allocation. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-config-private.h"
#include "mixprec-safetensors-private.h"
#include "mixprec-dtype-private.h"

struct _MixprecSafetensors
{
  gchar      *path;
  int         fd;
  guint64     file_size;
  guint64     data_start;    /* 8 + header length */
  GHashTable *metadata;      /* gchar* -> gchar* */
  GPtrArray  *tensors;       /* _MixprecSafetensorsTensor, data order */
  GHashTable *by_name;       /* name -> tensor (borrowed) */
};

static const struct
{
  const gchar *name;
  guint size;
} dtypes[] = {
  { "BOOL", 1 }, { "U8", 1 }, { "I8", 1 }, { "F8_E4M3", 1 }, { "F8_E5M2", 1 },
  { "I16", 2 }, { "U16", 2 }, { "F16", 2 }, { "BF16", 2 },
  { "I32", 4 }, { "U32", 4 }, { "F32", 4 },
  { "I64", 8 }, { "U64", 8 }, { "F64", 8 },
};

static const gchar *
dtype_lookup (const gchar *name,
              guint       *size)
{
  for (guint i = 0; i < G_N_ELEMENTS (dtypes); i++)
    if (g_str_equal (dtypes[i].name, name))
      {
        *size = dtypes[i].size;
        return dtypes[i].name;
      }
  return NULL;
}

guint
_mixprec_safetensors_dtype_size (const gchar *dtype)
{
  guint size = 0;

  return dtype_lookup (dtype, &size) != NULL ? size : 0;
}

static void
tensor_free (gpointer data)
{
  _MixprecSafetensorsTensor *t = data;

  g_free (t->name);
  g_free (t->shape);
  g_free (t);
}

void
_mixprec_safetensors_free (_MixprecSafetensors *st)
{
  if (st == NULL)
    return;
  if (st->fd >= 0)
    close (st->fd);
  g_clear_pointer (&st->metadata, g_hash_table_unref);
  g_clear_pointer (&st->by_name, g_hash_table_unref);
  g_clear_pointer (&st->tensors, g_ptr_array_unref);
  g_free (st->path);
  g_free (st);
}

const gchar *
_mixprec_safetensors_get_path (_MixprecSafetensors *st)
{
  return st->path;
}

GPtrArray *
_mixprec_safetensors_get_tensors (_MixprecSafetensors *st)
{
  return st->tensors;
}

const _MixprecSafetensorsTensor *
_mixprec_safetensors_lookup (_MixprecSafetensors *st,
                             const gchar         *name)
{
  return g_hash_table_lookup (st->by_name, name);
}

const gchar *
_mixprec_safetensors_get_metadata (_MixprecSafetensors *st,
                                   const gchar         *key)
{
  return g_hash_table_lookup (st->metadata, key);
}

static gboolean
corrupt (GError     **error,
         const gchar *path,
         const gchar *format,
         ...) G_GNUC_PRINTF (3, 4);

static gboolean
corrupt (GError     **error,
         const gchar *path,
         const gchar *format,
         ...)
{
  g_autofree gchar *what = NULL;
  va_list args;

  va_start (args, format);
  what = g_strdup_vprintf (format, args);
  va_end (args);
  g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_CORRUPT,
               "%s: not a valid safetensors file: %s", path, what);
  return FALSE;
}

/* A JSON integer in [0, 2^63): json-glib keeps integers as gint64 and the
 * scanner already refused the ones that do not fit. */
static gboolean
get_count (JsonNode *node,
           guint64  *value)
{
  if (!JSON_NODE_HOLDS_VALUE (node) || json_node_get_value_type (node) != G_TYPE_INT64 ||
      json_node_get_int (node) < 0)
    return FALSE;
  *value = (guint64) json_node_get_int (node);
  return TRUE;
}

static gboolean
parse_tensor (_MixprecSafetensors *st,
              const gchar         *name,
              JsonNode            *node,
              guint64              data_size,
              GError             **error)
{
  g_autoptr(GList) members = NULL;
  _MixprecSafetensorsTensor *t;
  JsonObject *o;
  JsonNode *dtype_node, *shape_node, *offsets_node;
  JsonArray *shape, *offsets;
  guint64 bytes;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return corrupt (error, st->path, "tensor '%s' is not described by a JSON object", name);
  o = json_node_get_object (node);
  members = json_object_get_members (o);
  for (GList *m = members; m != NULL; m = m->next)
    if (!g_str_equal (m->data, "dtype") && !g_str_equal (m->data, "shape") &&
        !g_str_equal (m->data, "data_offsets"))
      return corrupt (error, st->path, "tensor '%s' has the unknown key '%s' "
                      "(only dtype, shape and data_offsets are allowed)", name,
                      (const gchar *) m->data);

  dtype_node = json_object_get_member (o, "dtype");
  shape_node = json_object_get_member (o, "shape");
  offsets_node = json_object_get_member (o, "data_offsets");
  if (dtype_node == NULL || shape_node == NULL || offsets_node == NULL)
    return corrupt (error, st->path, "tensor '%s' lacks '%s'", name,
                    dtype_node == NULL ? "dtype" : shape_node == NULL ? "shape" : "data_offsets");

  t = g_new0 (_MixprecSafetensorsTensor, 1);
  t->name = g_strdup (name);
  g_ptr_array_add (st->tensors, t);

  if (!JSON_NODE_HOLDS_VALUE (dtype_node) || json_node_get_value_type (dtype_node) != G_TYPE_STRING)
    return corrupt (error, st->path, "tensor '%s': dtype must be a string", name);
  t->dtype = dtype_lookup (json_node_get_string (dtype_node), &t->itemsize);
  if (t->dtype == NULL)
    return corrupt (error, st->path, "tensor '%s': unknown dtype '%s'", name,
                    json_node_get_string (dtype_node));

  if (!JSON_NODE_HOLDS_ARRAY (shape_node))
    return corrupt (error, st->path, "tensor '%s': shape must be an array of integers", name);
  shape = json_node_get_array (shape_node);
  t->n_dims = json_array_get_length (shape);
  if (t->n_dims > _MIXPREC_SAFETENSORS_MAX_DIMS)
    return corrupt (error, st->path, "tensor '%s' has %u dimensions, more than %u", name,
                    t->n_dims, _MIXPREC_SAFETENSORS_MAX_DIMS);
  t->shape = g_new0 (guint64, MAX (t->n_dims, 1));
  t->numel = 1;
  for (guint i = 0; i < t->n_dims; i++)
    {
      if (!get_count (json_array_get_element (shape, i), &t->shape[i]))
        return corrupt (error, st->path, "tensor '%s': shape[%u] must be a non-negative integer",
                        name, i);
      if (!g_uint64_checked_mul (&t->numel, t->numel, t->shape[i]))
        return corrupt (error, st->path, "tensor '%s': the shape's element count overflows "
                        "64 bits", name);
    }

  if (!JSON_NODE_HOLDS_ARRAY (offsets_node) ||
      json_array_get_length (offsets = json_node_get_array (offsets_node)) != 2 ||
      !get_count (json_array_get_element (offsets, 0), &t->begin) ||
      !get_count (json_array_get_element (offsets, 1), &t->end))
    return corrupt (error, st->path, "tensor '%s': data_offsets must be two non-negative "
                    "integers [begin, end]", name);
  if (t->begin > t->end)
    return corrupt (error, st->path, "tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %"
                    G_GUINT64_FORMAT "] end before they begin", name, t->begin, t->end);
  if (t->end > data_size)
    return corrupt (error, st->path, "tensor '%s': data_offsets [%" G_GUINT64_FORMAT ", %"
                    G_GUINT64_FORMAT "] reach past the %" G_GUINT64_FORMAT
                    "-byte data section (truncated file?)", name, t->begin, t->end, data_size);
  if (!g_uint64_checked_mul (&bytes, t->numel, t->itemsize) || bytes != t->end - t->begin)
    {
      g_autofree gchar *shown = _mixprec_checkpoint_format_shape (t->shape, t->n_dims, ", ");

      return corrupt (error, st->path, "tensor '%s': %s of shape [%s] needs %" G_GUINT64_FORMAT
                      " elements of %u bytes, but data_offsets span %" G_GUINT64_FORMAT " bytes",
                      name, t->dtype, shown, t->numel, t->itemsize, t->end - t->begin);
    }
  g_hash_table_insert (st->by_name, t->name, t);
  return TRUE;
}

static gboolean
parse_metadata (_MixprecSafetensors *st,
                JsonNode            *node,
                GError             **error)
{
  g_autoptr(GList) members = NULL;
  JsonObject *o;

  if (!JSON_NODE_HOLDS_OBJECT (node))
    return corrupt (error, st->path, "__metadata__ must be an object of strings");
  o = json_node_get_object (node);
  members = json_object_get_members (o);
  for (GList *m = members; m != NULL; m = m->next)
    {
      JsonNode *v = json_object_get_member (o, m->data);

      if (!JSON_NODE_HOLDS_VALUE (v) || json_node_get_value_type (v) != G_TYPE_STRING)
        return corrupt (error, st->path, "__metadata__['%s'] must be a string",
                        (const gchar *) m->data);
      g_hash_table_insert (st->metadata, g_strdup (m->data), g_strdup (json_node_get_string (v)));
    }
  return TRUE;
}

static gint
compare_offsets (gconstpointer a,
                 gconstpointer b)
{
  const _MixprecSafetensorsTensor *x = *(const _MixprecSafetensorsTensor * const *) a;
  const _MixprecSafetensorsTensor *y = *(const _MixprecSafetensorsTensor * const *) b;

  if (x->begin != y->begin)
    return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end)
    return x->end < y->end ? -1 : 1;
  return strcmp (x->name, y->name);
}

/* The format requires the tensors to tile the data section: sorted by
 * offset, each starts where the previous ended, the last ends with the
 * file. */
static gboolean
check_tiling (_MixprecSafetensors *st,
              guint64              data_size,
              GError             **error)
{
  guint64 cursor = 0;
  const _MixprecSafetensorsTensor *prev = NULL;

  g_ptr_array_sort (st->tensors, compare_offsets);
  for (guint i = 0; i < st->tensors->len; i++)
    {
      const _MixprecSafetensorsTensor *t = g_ptr_array_index (st->tensors, i);

      if (t->begin < cursor)
        return corrupt (error, st->path, "tensor '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                        ") overlaps tensor '%s' [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ")",
                        t->name, t->begin, t->end, prev->name, prev->begin, prev->end);
      if (t->begin > cursor)
        return corrupt (error, st->path, "bytes [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT
                        ") of the data section belong to no tensor (a gap before '%s')",
                        cursor, t->begin, t->name);
      cursor = t->end;
      prev = t;
    }
  if (cursor != data_size)
    return corrupt (error, st->path, "the tensors end at byte %" G_GUINT64_FORMAT
                    " of the data section, but it holds %" G_GUINT64_FORMAT
                    " bytes (trailing data or a wrong header)", cursor, data_size);
  return TRUE;
}

static gboolean
parse_header (_MixprecSafetensors *st,
              const gchar         *text,
              gsize                length,
              guint64              data_size,
              GError             **error)
{
  MixprecConfigReport report;
  g_autoptr(JsonParser) parser = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autoptr(GList) members = NULL;
  const gchar *bad;
  JsonNode *root;
  JsonObject *o;
  gboolean ok;

  if (!g_utf8_validate_len (text, length, &bad))
    return corrupt (error, st->path, "the header is not UTF-8 text (byte 0x%02X at header "
                    "offset %" G_GSIZE_FORMAT ")", (guchar) *bad, (gsize) (bad - text));
  if (length == 0 || text[0] != '{')
    return corrupt (error, st->path, "the header does not start with '{'");

  /* json-glib accepts comments, duplicate keys and wrapped integers, and
   * recurses per nesting level; the strict scanner refuses all of that. */
  _mixprec_config_report_init (&report);
  ok = _mixprec_json_scan (text, length, &report);
  if (!ok || report.problems->len > 0)
    {
      const MixprecConfigProblem *first = report.problems->len > 0
        ? g_ptr_array_index (report.problems, 0) : NULL;

      corrupt (error, st->path, "header JSON: %s",
               first != NULL ? first->message : "syntax error");
      _mixprec_config_report_clear (&report);
      return FALSE;
    }
  _mixprec_config_report_clear (&report);

  parser = json_parser_new_immutable ();
  if (!json_parser_load_from_data (parser, text, length, &local_error))
    return corrupt (error, st->path, "header JSON: %s", local_error->message);
  root = json_parser_get_root (parser);
  if (root == NULL || !JSON_NODE_HOLDS_OBJECT (root))
    return corrupt (error, st->path, "the header is not a JSON object");
  o = json_node_get_object (root);
  members = json_object_get_members (o);
  for (GList *m = members; m != NULL; m = m->next)
    {
      JsonNode *node = json_object_get_member (o, m->data);

      if (g_str_equal (m->data, "__metadata__"))
        ok = parse_metadata (st, node, error);
      else
        ok = parse_tensor (st, m->data, node, data_size, error);
      if (!ok)
        return FALSE;
    }
  return check_tiling (st, data_size, error);
}

_MixprecSafetensors *
_mixprec_safetensors_open (const gchar *path,
                           GError     **error)
{
  g_autoptr(_MixprecSafetensors) st = g_new0 (_MixprecSafetensors, 1);
  g_autofree gchar *header = NULL;
  struct stat sb;
  guint8 prefix[8];
  guint64 n = 0;

  st->path = g_strdup (path);
  st->fd = -1;
  st->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  st->tensors = g_ptr_array_new_with_free_func (tensor_free);
  st->by_name = g_hash_table_new (g_str_hash, g_str_equal);

  /* Never through a link, never blocking on a FIFO, regular files only. */
  st->fd = _mixprec_open_regular (path, MIXPREC_CHECKPOINT_ERROR_MISSING_SHARD, error);
  if (st->fd < 0)
    return NULL;
  if (fstat (st->fd, &sb) != 0)
    {
      _mixprec_set_io_error (error, errno, path, "cannot read its size");
      return NULL;
    }
  st->file_size = (guint64) sb.st_size;
  if (st->file_size < 8)
    {
      corrupt (error, path, "the file is %" G_GUINT64_FORMAT " bytes, shorter than the "
               "8-byte header length that starts every safetensors file", st->file_size);
      return NULL;
    }
  if (!_mixprec_pread_all (st->fd, prefix, 8, 0, path, error))
    return NULL;
  for (guint i = 0; i < 8; i++)
    n |= (guint64) prefix[i] << (8 * i);
  if (n > st->file_size - 8)
    {
      corrupt (error, path, "the header length %" G_GUINT64_FORMAT " is larger than the %"
               G_GUINT64_FORMAT " bytes that follow it (truncated file or damaged length)",
               n, st->file_size - 8);
      return NULL;
    }
  if (n > _MIXPREC_SAFETENSORS_MAX_HEADER)
    {
      corrupt (error, path, "the header length %" G_GUINT64_FORMAT " exceeds the format's "
               "limit of %u bytes", n, _MIXPREC_SAFETENSORS_MAX_HEADER);
      return NULL;
    }
  header = g_malloc (n + 1);
  if (!_mixprec_pread_all (st->fd, header, n, 8, path, error))
    return NULL;
  header[n] = '\0';
  st->data_start = 8 + n;
  if (!parse_header (st, header, n, st->file_size - st->data_start, error))
    return NULL;
  return g_steal_pointer (&st);
}

gboolean
_mixprec_safetensors_read_f32 (_MixprecSafetensors             *st,
                               const _MixprecSafetensorsTensor *tensor,
                               guint64                          first,
                               guint64                          count,
                               gfloat                          *dest,
                               GError                         **error)
{
  gboolean bf16 = g_str_equal (tensor->dtype, "BF16");

  /* BF16: optimizer state saved with bf16.bf16_optimizer_states, widened
   * here exactly so every reader sees FP32. */
  if (!g_str_equal (tensor->dtype, "F32") && !bf16)
    return corrupt (error, st->path, "tensor '%s' is %s, expected F32 or BF16", tensor->name,
                    tensor->dtype);
  if (first > tensor->numel || count > tensor->numel - first)
    return corrupt (error, st->path, "tensor '%s' has %" G_GUINT64_FORMAT " elements, "
                    "elements [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ") were asked for",
                    tensor->name, tensor->numel, first, first + count);
  if (count == 0)
    return TRUE;
  if (bf16)
    {
      g_autofree guint16 *raw = g_new (guint16, count);

      if (!_mixprec_pread_all (st->fd, raw, count * sizeof (guint16),
                               st->data_start + tensor->begin + first * sizeof (guint16),
                               st->path, error))
        return FALSE;
      for (guint64 i = 0; i < count; i++)
        dest[i] = _mixprec_bf16_to_f32 (GUINT16_FROM_LE (raw[i]));
      return TRUE;
    }
  if (!_mixprec_pread_all (st->fd, dest, count * sizeof (gfloat),
                           st->data_start + tensor->begin + first * sizeof (gfloat),
                           st->path, error))
    return FALSE;
#if G_BYTE_ORDER == G_BIG_ENDIAN
  for (guint64 i = 0; i < count; i++)
    {
      guint32 bits;

      memcpy (&bits, &dest[i], 4);
      bits = GUINT32_FROM_LE (bits);
      memcpy (&dest[i], &bits, 4);
    }
#endif
  return TRUE;
}

gboolean
_mixprec_safetensors_read_bytes (_MixprecSafetensors             *st,
                                 const _MixprecSafetensorsTensor *tensor,
                                 guint64                          first,
                                 guint64                          n_bytes,
                                 guint8                          *dest,
                                 GError                         **error)
{
  guint64 size = tensor->end - tensor->begin;

  if (first > size || n_bytes > size - first)
    return corrupt (error, st->path, "tensor '%s' has %" G_GUINT64_FORMAT " bytes, "
                    "bytes [%" G_GUINT64_FORMAT ", %" G_GUINT64_FORMAT ") were asked for",
                    tensor->name, size, first, first + n_bytes);
  if (n_bytes == 0)
    return TRUE;
  return _mixprec_pread_all (st->fd, dest, n_bytes, st->data_start + tensor->begin + first,
                             st->path, error);
}
