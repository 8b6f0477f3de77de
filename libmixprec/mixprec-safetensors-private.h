/* mixprec-safetensors-private.h — a strict reader and writer of the
 * safetensors format: an 8-byte little-endian header length, a JSON header
 * {"__metadata__": {string: string}, name: {"dtype", "shape",
 * "data_offsets": [begin, end)}}, then the tensors' bytes, little-endian,
 * covering the data section exactly. Never installed. */
#pragma once

#include "mixprec.h"

G_BEGIN_DECLS

/* The format's own limit (the reference implementation refuses more). */
#define _MIXPREC_SAFETENSORS_MAX_HEADER 100000000
/* No real tensor has more; the cap keeps a hostile shape small. */
#define _MIXPREC_SAFETENSORS_MAX_DIMS 64

typedef struct
{
  gchar   *name;
  const gchar *dtype;        /* "F32", "BF16", ... (static storage) */
  guint    itemsize;
  guint64 *shape;
  guint    n_dims;
  guint64  numel;
  guint64  begin;            /* byte range in the data section */
  guint64  end;
} _MixprecSafetensorsTensor;

typedef struct _MixprecSafetensors _MixprecSafetensors;

/* Opens @path and validates its whole header against the file's size
 * before anything else is read: the header length, UTF-8, strict JSON,
 * every tensor's dtype, shape and offsets, no overlaps, no gaps, no
 * duplicate names. Errors are MIXPREC_CHECKPOINT_ERROR_IO or _CORRUPT and
 * start with @path. */
_MixprecSafetensors *_mixprec_safetensors_open        (const gchar               *path,
                                                       GError                   **error);
void                 _mixprec_safetensors_free        (_MixprecSafetensors       *st);
const gchar         *_mixprec_safetensors_get_path    (_MixprecSafetensors       *st);
/* Tensors in data order. */
GPtrArray           *_mixprec_safetensors_get_tensors (_MixprecSafetensors       *st);
const _MixprecSafetensorsTensor *
                     _mixprec_safetensors_lookup      (_MixprecSafetensors       *st,
                                                       const gchar               *name);
/* NULL when the header has no such metadata key. */
const gchar         *_mixprec_safetensors_get_metadata (_MixprecSafetensors      *st,
                                                        const gchar              *key);
/* Elements [first, first + count) of an F32 tensor, in host order. */
gboolean             _mixprec_safetensors_read_f32    (_MixprecSafetensors       *st,
                                                       const _MixprecSafetensorsTensor *tensor,
                                                       guint64                    first,
                                                       guint64                    count,
                                                       gfloat                    *dest,
                                                       GError                   **error);

/* Bytes [first, first + n_bytes) of @tensor's data as stored
 * (little-endian), for dtypes read_f32() does not widen. */
gboolean             _mixprec_safetensors_read_bytes  (_MixprecSafetensors       *st,
                                                       const _MixprecSafetensorsTensor *tensor,
                                                       guint64                    first,
                                                       guint64                    n_bytes,
                                                       guint8                    *dest,
                                                       GError                   **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (_MixprecSafetensors, _mixprec_safetensors_free)

/* Item size of a safetensors dtype name, 0 when the format has no such
 * dtype. */
guint                _mixprec_safetensors_dtype_size  (const gchar               *dtype);

/* ---------------------------------------------------------------- writer */

/* Produces @n_bytes of a tensor's little-endian data starting at byte
 * @offset into @dest. */
typedef gboolean (*_MixprecSafetensorsFill) (gpointer   user_data,
                                             guint64    offset,
                                             gsize      n_bytes,
                                             guint8    *dest,
                                             GError   **error);

typedef struct _MixprecSafetensorsWriter _MixprecSafetensorsWriter;

_MixprecSafetensorsWriter *_mixprec_safetensors_writer_new  (void);
void     _mixprec_safetensors_writer_free          (_MixprecSafetensorsWriter *w);
void     _mixprec_safetensors_writer_add_metadata  (_MixprecSafetensorsWriter *w,
                                                    const gchar               *key,
                                                    const gchar               *value);
/* A tensor whose values are @data: F32, F16 or BF16 elements in host
 * order (borrowed until the write), stored as @dtype. Converting between
 * them is allowed when exact (BF16 or F16 widened to F32). Refuses
 * duplicate and non-UTF-8 names. */
gboolean _mixprec_safetensors_writer_add_array     (_MixprecSafetensorsWriter *w,
                                                    const gchar               *name,
                                                    const gchar               *dtype,
                                                    const guint64             *shape,
                                                    guint                      n_dims,
                                                    MixprecDType               src_dtype,
                                                    gconstpointer              data,
                                                    GError                   **error);
/* A tensor whose bytes come from @fill (little-endian already). */
gboolean _mixprec_safetensors_writer_add_filled    (_MixprecSafetensorsWriter *w,
                                                    const gchar               *name,
                                                    const gchar               *dtype,
                                                    const guint64             *shape,
                                                    guint                      n_dims,
                                                    _MixprecSafetensorsFill    fill,
                                                    gpointer                   user_data,
                                                    GError                   **error);
/* The bytes before the data (length prefix and space-padded header, a
 * multiple of 8 long) and the file's total size; fixes the layout. */
GBytes  *_mixprec_safetensors_writer_get_header    (_MixprecSafetensorsWriter *w,
                                                    guint64                   *file_size);
/* Absolute file offset of tensor @name's first byte, after get_header(). */
guint64  _mixprec_safetensors_writer_get_offset    (_MixprecSafetensorsWriter *w,
                                                    const gchar               *name);
/* Writes the whole file to @fd at its current position. When @checksum is
 * not NULL it is fed every byte written. @halfway (nullable) runs once
 * half of the data is written: the crash tests stop a save there. */
gboolean _mixprec_safetensors_writer_write         (_MixprecSafetensorsWriter *w,
                                                    int                        fd,
                                                    const gchar               *path,
                                                    GChecksum                 *checksum,
                                                    GFunc                      halfway,
                                                    gpointer                   halfway_data,
                                                    GError                   **error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (_MixprecSafetensorsWriter, _mixprec_safetensors_writer_free)

G_END_DECLS
