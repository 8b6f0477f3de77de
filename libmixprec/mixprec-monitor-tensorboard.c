/* mixprec-monitor-tensorboard.c — tensorboard: scalars in a TensorBoard
 * event file, a TFRecord stream of tensorflow.Event protocol buffers.
 *
 * The three messages written (Event, Summary, Summary.Value) use six
 * fields of fixed numbers between them, so they are encoded here by hand
 * rather than through a protobuf library and generated code, a build
 * dependency larger than this file. The field numbers are those of
 * tensorboard/compat/proto/event.proto and summary.proto:
 *
 *   Event    { double wall_time = 1; int64 step = 2;
 *              string file_version = 3; Summary summary = 5; }
 *   Summary  { repeated Value value = 1; }
 *   Value    { string tag = 1; float simple_value = 2; }
 *
 * and a record is framed as TFRecord frames it: the payload's length
 * (8 bytes, little-endian), the masked CRC-32C of those 8 bytes, the
 * payload, the masked CRC-32C of the payload. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "mixprec-monitor-private.h"

struct _MixprecTbMonitor
{
  gchar *path;
  FILE *file;
};

/* ---------------------------------------------------------------- CRC-32C */

static guint32 crc32c_table[256];

static gpointer
make_crc32c_table (gpointer data)
{
  for (guint32 i = 0; i < 256; i++)
    {
      guint32 c = i;

      /* 0x82F63B78: the Castagnoli polynomial, bit-reversed. */
      for (guint k = 0; k < 8; k++)
        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      crc32c_table[i] = c;
    }
  return NULL;
}

guint32
_mixprec_crc32c (guint32       crc,
                 gconstpointer data,
                 gsize         n)
{
  static GOnce once = G_ONCE_INIT;
  const guint8 *p = data;

  g_once (&once, make_crc32c_table, NULL);
  crc = ~crc;
  for (gsize i = 0; i < n; i++)
    crc = crc32c_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

/* TFRecord's mask: a CRC of data that holds CRCs is a poor check, so the
 * stored value is rotated and offset. */
static guint32
masked_crc (gconstpointer data,
            gsize         n)
{
  guint32 crc = _mixprec_crc32c (0, data, n);

  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* ---------------------------------------------------------------- protobuf */

enum {
  WIRE_VARINT = 0,
  WIRE_FIXED64 = 1,
  WIRE_LENGTH = 2,
  WIRE_FIXED32 = 5,
};

static void
put_varint (GByteArray *out,
            guint64     v)
{
  do
    {
      guint8 b = (v & 0x7f) | (v > 0x7f ? 0x80 : 0);

      g_byte_array_append (out, &b, 1);
      v >>= 7;
    }
  while (v != 0);
}

static void
put_key (GByteArray *out,
         guint       field,
         guint       wire)
{
  put_varint (out, ((guint64) field << 3) | wire);
}

static void
put_le (GByteArray *out,
        guint64     v,
        guint       n)
{
  for (guint i = 0; i < n; i++)
    {
      guint8 b = (guint8) (v >> (8 * i));

      g_byte_array_append (out, &b, 1);
    }
}

static void
put_bytes (GByteArray   *out,
           guint         field,
           gconstpointer data,
           gsize         n)
{
  put_key (out, field, WIRE_LENGTH);
  put_varint (out, n);
  g_byte_array_append (out, data, n);
}

/* An Event with its wall time and step; the caller appends the rest. */
static GByteArray *
event_new (guint64 step)
{
  GByteArray *event = g_byte_array_new ();
  gdouble wall_time = g_get_real_time () / (gdouble) G_USEC_PER_SEC;
  guint64 bits;

  memcpy (&bits, &wall_time, sizeof bits);
  put_key (event, 1, WIRE_FIXED64);
  put_le (event, bits, 8);
  put_key (event, 2, WIRE_VARINT);
  put_varint (event, step);
  return event;
}

static gboolean
write_record (_MixprecTbMonitor *self,
              GByteArray        *payload,
              GError           **error)
{
  guint8 head[12];
  guint32 crc;

  for (guint i = 0; i < 8; i++)
    head[i] = (guint8) ((guint64) payload->len >> (8 * i));
  crc = masked_crc (head, 8);
  for (guint i = 0; i < 4; i++)
    head[8 + i] = (guint8) (crc >> (8 * i));
  crc = masked_crc (payload->data, payload->len);
  if (fwrite (head, 1, sizeof head, self->file) != sizeof head ||
      fwrite (payload->data, 1, payload->len, self->file) != payload->len ||
      fputc (crc & 0xff, self->file) == EOF || fputc ((crc >> 8) & 0xff, self->file) == EOF ||
      fputc ((crc >> 16) & 0xff, self->file) == EOF || fputc (crc >> 24, self->file) == EOF)
    {
      int saved = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "tensorboard: cannot write %s: %s", self->path, g_strerror (saved));
      return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- monitor */

_MixprecTbMonitor *
_mixprec_tb_monitor_new (const gchar *dir,
                         GError     **error)
{
  static gint counter;
  g_autoptr(_MixprecTbMonitor) self = g_new0 (_MixprecTbMonitor, 1);
  g_autofree gchar *name = NULL;
  g_autoptr(GByteArray) event = NULL;
  static const gchar version[] = "brain.Event:2";
  int fd;

  /* TensorBoard's own name, with the process and a counter so that two
   * writers never share a file. */
  name = g_strdup_printf ("events.out.tfevents.%010" G_GINT64_FORMAT ".%s.%d.%d",
                          g_get_real_time () / G_USEC_PER_SEC, g_get_host_name (),
                          (int) getpid (), g_atomic_int_add (&counter, 1));
  self->path = g_build_filename (dir, name, NULL);
  fd = g_open (self->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0 || (self->file = fdopen (fd, "wb")) == NULL)
    {
      int saved = errno;

      if (fd >= 0)
        close (fd);
      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "tensorboard: cannot create %s: %s", self->path, g_strerror (saved));
      return NULL;
    }
  /* The first record says which format the rest is in. */
  event = event_new (0);
  put_bytes (event, 3, version, strlen (version));
  if (!write_record (self, event, error) || !_mixprec_tb_monitor_flush (self, error))
    return NULL;
  return g_steal_pointer (&self);
}

gboolean
_mixprec_tb_monitor_add (_MixprecTbMonitor *self,
                         const gchar       *tag,
                         gdouble            value,
                         guint64            step,
                         GError           **error)
{
  g_autoptr(GByteArray) val = g_byte_array_new ();
  g_autoptr(GByteArray) summary = g_byte_array_new ();
  g_autoptr(GByteArray) event = event_new (step);
  gfloat f = (gfloat) value;
  guint32 bits;

  put_bytes (val, 1, tag, strlen (tag));
  memcpy (&bits, &f, sizeof bits);
  put_key (val, 2, WIRE_FIXED32);
  put_le (val, bits, 4);
  put_bytes (summary, 1, val->data, val->len);
  put_bytes (event, 5, summary->data, summary->len);
  return write_record (self, event, error);
}

gboolean
_mixprec_tb_monitor_flush (_MixprecTbMonitor *self,
                           GError           **error)
{
  if (fflush (self->file) != 0)
    {
      int saved = errno;

      g_set_error (error, G_FILE_ERROR, g_file_error_from_errno (saved),
                   "tensorboard: cannot write %s: %s", self->path, g_strerror (saved));
      return FALSE;
    }
  return TRUE;
}

const gchar *
_mixprec_tb_monitor_get_path (_MixprecTbMonitor *self)
{
  return self->path;
}

void
_mixprec_tb_monitor_free (_MixprecTbMonitor *self)
{
  if (self == NULL)
    return;
  if (self->file != NULL)
    fclose (self->file);
  g_free (self->path);
  g_free (self);
}
