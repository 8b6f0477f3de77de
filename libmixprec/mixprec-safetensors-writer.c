/* mixprec-safetensors-writer.c — writes safetensors files any reader
 * accepts: tensors sorted by name, a header padded with spaces so the
 * data starts 8-byte aligned, integers printed as integers, data
 * little-endian and covering the data section exactly. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-safetensors-private.h"

/* Bytes converted or produced per write() when the data is not written
 * straight from memory. */
#define CHUNK ((gsize) 4 << 20)

typedef struct
{
  gchar   *name;
  const gchar *dtype;
  guint    itemsize;
  guint64 *shape;
  guint    n_dims;
  guint64  n_bytes;
  guint64  offset;           /* in the data section, after the layout */
  /* Source: an array in host order, or a fill function. */
  MixprecDType  src_dtype;
  gconstpointer data;
  _MixprecSafetensorsFill fill;
  gpointer fill_data;
} Entry;

struct _MixprecSafetensorsWriter
{
  GPtrArray  *entries;       /* Entry */
  GHashTable *names;
  GHashTable *metadata;      /* key -> value */
  GBytes     *header;        /* once laid out */
  guint64     file_size;
};

static void
entry_free (gpointer data)
{
  Entry *e = data;

  g_free (e->name);
  g_free (e->shape);
  g_free (e);
}

_MixprecSafetensorsWriter *
_mixprec_safetensors_writer_new (void)
{
  _MixprecSafetensorsWriter *w = g_new0 (_MixprecSafetensorsWriter, 1);

  w->entries = g_ptr_array_new_with_free_func (entry_free);
  w->names = g_hash_table_new (g_str_hash, g_str_equal);
  w->metadata = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  return w;
}

void
_mixprec_safetensors_writer_free (_MixprecSafetensorsWriter *w)
{
  if (w == NULL)
    return;
  g_hash_table_unref (w->names);
  g_hash_table_unref (w->metadata);
  g_ptr_array_unref (w->entries);
  g_clear_pointer (&w->header, g_bytes_unref);
  g_free (w);
}

void
_mixprec_safetensors_writer_add_metadata (_MixprecSafetensorsWriter *w,
                                          const gchar               *key,
                                          const gchar               *value)
{
  g_return_if_fail (w->header == NULL);
  g_hash_table_replace (w->metadata, g_strdup (key), g_strdup (value));
}

static Entry *
add_entry (_MixprecSafetensorsWriter *w,
           const gchar               *name,
           const gchar               *dtype,
           const guint64             *shape,
           guint                      n_dims,
           GError                   **error)
{
  guint itemsize = _mixprec_safetensors_dtype_size (dtype);
  guint64 numel = 1;
  Entry *e;

  g_return_val_if_fail (w->header == NULL, NULL);
  g_return_val_if_fail (itemsize > 0, NULL);

  if (!g_utf8_validate (name, -1, NULL) || *name == '\0' || g_str_equal (name, "__metadata__"))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "'%s' cannot name a safetensors tensor: names are non-empty UTF-8 "
                   "other than __metadata__", name);
      return NULL;
    }
  if (g_hash_table_contains (w->names, name))
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "two tensors would be named '%s' in one safetensors file (a parameter "
                   "name that ends like another parameter's state slot?)", name);
      return NULL;
    }
  if (n_dims > _MIXPREC_SAFETENSORS_MAX_DIMS)
    {
      g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INVALID_ARGUMENT,
                   "tensor '%s' has %u dimensions, more than %u", name, n_dims,
                   _MIXPREC_SAFETENSORS_MAX_DIMS);
      return NULL;
    }
  for (guint i = 0; i < n_dims; i++)
    numel *= shape[i];

  e = g_new0 (Entry, 1);
  e->name = g_strdup (name);
  e->dtype = dtype;
  e->itemsize = itemsize;
  e->shape = g_memdup2 (shape, sizeof (guint64) * MAX (n_dims, 1));
  e->n_dims = n_dims;
  e->n_bytes = numel * itemsize;
  g_ptr_array_add (w->entries, e);
  g_hash_table_add (w->names, e->name);
  return e;
}

static const gchar *
mixprec_dtype_to_st (MixprecDType dtype)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT32:
      return "F32";
    case MIXPREC_DTYPE_FLOAT16:
      return "F16";
    case MIXPREC_DTYPE_BFLOAT16:
      return "BF16";
    case MIXPREC_DTYPE_FLOAT8_E4M3:
      return "F8_E4M3";
    case MIXPREC_DTYPE_FLOAT8_E5M2:
    default:
      return "F8_E5M2";
    }
}

gboolean
_mixprec_safetensors_writer_add_array (_MixprecSafetensorsWriter *w,
                                       const gchar               *name,
                                       const gchar               *dtype,
                                       const guint64             *shape,
                                       guint                      n_dims,
                                       MixprecDType               src_dtype,
                                       gconstpointer              data,
                                       GError                   **error)
{
  Entry *e;

  /* Widening to F32 is exact; anything else would round silently. */
  g_return_val_if_fail (g_str_equal (dtype, mixprec_dtype_to_st (src_dtype)) ||
                        g_str_equal (dtype, "F32"), FALSE);

  e = add_entry (w, name, g_intern_string (dtype), shape, n_dims, error);
  if (e == NULL)
    return FALSE;
  e->src_dtype = src_dtype;
  e->data = data;
  return TRUE;
}

gboolean
_mixprec_safetensors_writer_add_filled (_MixprecSafetensorsWriter *w,
                                        const gchar               *name,
                                        const gchar               *dtype,
                                        const guint64             *shape,
                                        guint                      n_dims,
                                        _MixprecSafetensorsFill    fill,
                                        gpointer                   user_data,
                                        GError                   **error)
{
  Entry *e = add_entry (w, name, g_intern_string (dtype), shape, n_dims, error);

  if (e == NULL)
    return FALSE;
  e->fill = fill;
  e->fill_data = user_data;
  return TRUE;
}

static void
append_json_string (GString     *out,
                    const gchar *s)
{
  g_string_append_c (out, '"');
  for (const guchar *p = (const guchar *) s; *p; p++)
    {
      if (*p == '"' || *p == '\\')
        {
          g_string_append_c (out, '\\');
          g_string_append_c (out, (gchar) *p);
        }
      else if (*p < 0x20)
        g_string_append_printf (out, "\\u%04x", *p);
      else
        g_string_append_c (out, (gchar) *p);
    }
  g_string_append_c (out, '"');
}

static gint
compare_entries (gconstpointer a,
                 gconstpointer b)
{
  return strcmp ((*(const Entry * const *) a)->name, (*(const Entry * const *) b)->name);
}

static void
lay_out (_MixprecSafetensorsWriter *w)
{
  GString *json;
  g_autoptr(GList) keys = NULL;
  guint64 offset = 0, n;
  guint8 prefix[8];
  gboolean first = TRUE;

  /* Laid out once; a second call (the export asks for the size, then
   * writes) must not leak a new header. */
  if (w->header != NULL)
    return;
  json = g_string_new ("{");

  keys = g_list_sort (g_hash_table_get_keys (w->metadata), (GCompareFunc) strcmp);
  if (keys != NULL)
    {
      g_string_append (json, "\"__metadata__\":{");
      for (GList *k = keys; k != NULL; k = k->next)
        {
          if (k != keys)
            g_string_append_c (json, ',');
          append_json_string (json, k->data);
          g_string_append_c (json, ':');
          append_json_string (json, g_hash_table_lookup (w->metadata, k->data));
        }
      g_string_append_c (json, '}');
      first = FALSE;
    }

  g_ptr_array_sort (w->entries, compare_entries);
  for (guint i = 0; i < w->entries->len; i++)
    {
      Entry *e = g_ptr_array_index (w->entries, i);

      if (!first)
        g_string_append_c (json, ',');
      first = FALSE;
      append_json_string (json, e->name);
      g_string_append_printf (json, ":{\"dtype\":\"%s\",\"shape\":[", e->dtype);
      for (guint d = 0; d < e->n_dims; d++)
        g_string_append_printf (json, "%s%" G_GUINT64_FORMAT, d ? "," : "", e->shape[d]);
      e->offset = offset;
      offset += e->n_bytes;
      g_string_append_printf (json, "],\"data_offsets\":[%" G_GUINT64_FORMAT ",%"
                              G_GUINT64_FORMAT "]}", e->offset, offset);
    }
  g_string_append_c (json, '}');
  /* The format lets the header end in spaces; they put the data at a
   * multiple of 8 bytes so readers may map it as aligned arrays. */
  while (json->len % 8 != 0)
    g_string_append_c (json, ' ');

  n = json->len;
  for (guint i = 0; i < 8; i++)
    prefix[i] = (guint8) (n >> (8 * i));
  g_string_prepend_len (json, (const gchar *) prefix, 8);
  w->file_size = json->len + offset;
  w->header = g_string_free_to_bytes (json);
}

GBytes *
_mixprec_safetensors_writer_get_header (_MixprecSafetensorsWriter *w,
                                        guint64                   *file_size)
{
  lay_out (w);
  if (file_size != NULL)
    *file_size = w->file_size;
  return g_bytes_ref (w->header);
}

guint64
_mixprec_safetensors_writer_get_offset (_MixprecSafetensorsWriter *w,
                                        const gchar               *name)
{
  lay_out (w);
  for (guint i = 0; i < w->entries->len; i++)
    {
      Entry *e = g_ptr_array_index (w->entries, i);

      if (g_str_equal (e->name, name))
        return g_bytes_get_size (w->header) + e->offset;
    }
  g_return_val_if_reached (0);
}

/* Bytes [offset, offset + n) of an array entry as little-endian @dtype. */
static gboolean
produce (Entry   *e,
         guint64  offset,
         gsize    n,
         guint8  *dest,
         GError **error)
{
  MixprecDType dst = g_str_equal (e->dtype, "F32") ? MIXPREC_DTYPE_FLOAT32 : e->src_dtype;
  gsize src_size = mixprec_dtype_get_size (e->src_dtype);
  guint64 first = offset / e->itemsize;

  if (e->fill != NULL)
    return e->fill (e->fill_data, offset, n, dest, error);
  if (dst == e->src_dtype)
    memcpy (dest, (const guint8 *) e->data + offset, n);
  else if (!mixprec_convert_array (e->src_dtype, (const guint8 *) e->data + first * src_size,
                                   dst, dest, n / e->itemsize, MIXPREC_ROUNDING_NEAREST_EVEN,
                                   0, 0, error))
    return FALSE;
#if G_BYTE_ORDER == G_BIG_ENDIAN
  for (gsize i = 0; i < n; i += e->itemsize)
    for (guint a = 0, b = e->itemsize - 1; a < b; a++, b--)
      {
        guint8 t = dest[i + a];

        dest[i + a] = dest[i + b];
        dest[i + b] = t;
      }
#endif
  return TRUE;
}

static gboolean
emit (int          fd,
      const gchar *path,
      GChecksum   *checksum,
      gconstpointer data,
      gsize        n,
      GError     **error)
{
  if (checksum != NULL)
    g_checksum_update (checksum, data, n);
  return _mixprec_write_all (fd, data, n, path, error);
}

gboolean
_mixprec_safetensors_writer_write (_MixprecSafetensorsWriter *w,
                                   int                        fd,
                                   const gchar               *path,
                                   GChecksum                 *checksum,
                                   GFunc                      halfway,
                                   gpointer                   halfway_data,
                                   GError                   **error)
{
  g_autofree guint8 *buffer = NULL;
  guint64 data_size, written = 0;
  gboolean half_done = FALSE;

  lay_out (w);
  data_size = w->file_size - g_bytes_get_size (w->header);
  if (!emit (fd, path, checksum, g_bytes_get_data (w->header, NULL),
             g_bytes_get_size (w->header), error))
    return FALSE;

  for (guint i = 0; i < w->entries->len; i++)
    {
      Entry *e = g_ptr_array_index (w->entries, i);
      gboolean direct = e->fill == NULL && G_BYTE_ORDER == G_LITTLE_ENDIAN &&
                        (g_str_equal (e->dtype, "F32") ? e->src_dtype == MIXPREC_DTYPE_FLOAT32
                                                       : TRUE);

      for (guint64 at = 0; at < e->n_bytes;)
        {
          gsize n = (gsize) MIN (e->n_bytes - at, CHUNK);

          /* Chunks hold whole elements: CHUNK is a multiple of every size. */
          if (direct)
            {
              if (!emit (fd, path, checksum, (const guint8 *) e->data + at, n, error))
                return FALSE;
            }
          else
            {
              if (buffer == NULL)
                buffer = g_malloc (CHUNK);
              if (!produce (e, at, n, buffer, error) ||
                  !emit (fd, path, checksum, buffer, n, error))
                return FALSE;
            }
          at += n;
          written += n;
          if (!half_done && halfway != NULL && written * 2 >= data_size)
            {
              half_done = TRUE;
              halfway (halfway_data, NULL);
            }
        }
    }
  if (!half_done && halfway != NULL)
    halfway (halfway_data, NULL);
  return TRUE;
}
