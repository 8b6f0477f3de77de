/* inspect-numerics-tb.c — reads the scalars of a TensorBoard event file
 * for `mixprec-inspect --numerics`. The file is a TFRecord stream: each
 * record is its payload's length (8 bytes, little-endian), the masked
 * CRC-32C of those 8 bytes, the payload, and the payload's masked CRC-32C;
 * each payload is a tensorflow.Event protocol buffer, which protobuf-c
 * decodes with the code protoc-c generated from tensorboard-event.proto.
 * Only the framing and its checksum are done here: neither has a library
 * of its own in Debian. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inspect-private.h"

#ifdef HAVE_PROTOBUF_C
#include "tensorboard-event.pb-c.h"

/* CRC-32C (Castagnoli), reflected, as TFRecord checks its records. */
static guint32 crc32c_table[256];

static gpointer
make_crc32c_table (gpointer data)
{
  for (guint32 i = 0; i < 256; i++)
    {
      guint32 c = i;

      for (guint k = 0; k < 8; k++)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      crc32c_table[i] = c;
    }
  return NULL;
}

/* TFRecord stores the CRC rotated and offset ("masked"): a CRC of data
 * that holds CRCs is otherwise a weak check. */
static guint32
masked_crc32c (const guint8 *p,
               gsize         n)
{
  static GOnce once = G_ONCE_INIT;
  guint32 crc = 0xffffffffu;

  g_once (&once, make_crc32c_table, NULL);
  for (gsize i = 0; i < n; i++)
    crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  crc = ~crc;
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

static guint64
le (const guint8 *p,
    guint         n)
{
  guint64 v = 0;

  for (guint i = 0; i < n; i++)
    v |= (guint64) p[i] << (8 * i);
  return v;
}

static void
add_record (GHashTable  *tags,
            const gchar *tag,
            guint64      step,
            gdouble      value)
{
  GArray *records = g_hash_table_lookup (tags, tag);
  InspectRecord r;

  if (records == NULL)
    {
      records = g_array_new (FALSE, FALSE, sizeof (InspectRecord));
      g_hash_table_insert (tags, g_strdup (tag), records);
    }
  r.step = step;
  r.value = value;
  r.order = records->len;
  g_array_append_val (records, r);
}

gboolean
inspect_tb_read (int          dir_fd,
                 const gchar *name,
                 const gchar *path,
                 GHashTable  *tags,
                 GError     **error)
{
  g_autoptr(GByteArray) data = g_byte_array_new ();
  gsize at = 0;
  guint index = 0;
  int fd = inspect_open_file (dir_fd, name, path, error);

  if (fd < 0)
    return FALSE;
  if (!inspect_read_fd (fd, path, data, error))
    {
      close (fd);
      return FALSE;
    }
  close (fd);

  while (at < data->len)
    {
      const guint8 *p = data->data + at;
      gsize left = data->len - at;
      MixprecTb__Event *event;
      guint64 length;

      index++;
      /* A record cut short at the end is one the writer has not finished;
       * a length whose checksum fails is damage. */
      if (left >= 12 && masked_crc32c (p, 8) != (guint32) le (p + 8, 4))
        break;
      length = left >= 12 ? le (p, 8) : 0;
      if (left < 16 || length > left - 16)
        {
          g_printerr ("warning: %s: record %u at byte %" G_GSIZE_FORMAT " is cut short (%"
                      G_GSIZE_FORMAT " bytes left) and is left out: is the run still writing?\n",
                      path, index, at, left);
          return TRUE;
        }
      if (masked_crc32c (p + 12, length) != (guint32) le (p + 12 + length, 4))
        {
          g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                       "%s: record %u at byte %" G_GSIZE_FORMAT ": the CRC-32C of its %"
                       G_GUINT64_FORMAT " bytes does not match: the file is damaged", path, index,
                       at, length);
          return FALSE;
        }
      event = mixprec_tb__event__unpack (NULL, length, p + 12);
      if (event == NULL)
        {
          g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                       "%s: record %u at byte %" G_GSIZE_FORMAT ": not a TensorBoard Event "
                       "protocol buffer", path, index, at);
          return FALSE;
        }
      if (event->summary != NULL)
        for (gsize v = 0; v < event->summary->n_value; v++)
          {
            const MixprecTb__Summary__Value *value = event->summary->value[v];

            /* Scalars only: images, histograms and tensors are others'. */
            if (value->value_case == MIXPREC_TB__SUMMARY__VALUE__VALUE_SIMPLE_VALUE &&
                event->step >= 0 && g_utf8_validate (value->tag, -1, NULL))
              add_record (tags, value->tag, (guint64) event->step, value->simple_value);
          }
      mixprec_tb__event__free_unpacked (event, NULL);
      at += 16 + length;
    }
  if (at < data->len)
    {
      g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                   "%s: record %u at byte %" G_GSIZE_FORMAT ": the CRC-32C of its length does "
                   "not match: not a TensorBoard event file, or a damaged one", path, index, at);
      return FALSE;
    }
  return TRUE;
}

const gchar *
inspect_tb_backend (void)
{
  return protobuf_c_version ();
}

#else /* !HAVE_PROTOBUF_C */

gboolean
inspect_tb_read (int          dir_fd,
                 const gchar *name,
                 const gchar *path,
                 GHashTable  *tags,
                 GError     **error)
{
  g_set_error (error, G_FILE_ERROR, G_FILE_ERROR_NOSYS,
               "%s: this mixprec-inspect was built without protobuf-c, so it reads no "
               "TensorBoard event files; give the csv_monitor folder instead", path);
  return FALSE;
}

const gchar *
inspect_tb_backend (void)
{
  return NULL;
}

#endif /* HAVE_PROTOBUF_C */
