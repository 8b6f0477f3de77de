/* mixprec-device.c — host memory and CPU kernels, or a device plugin, behind
 * one set of calls (see mixprec-device-private.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-engine-kernels-private.h"
#include "mixprec-fp8-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"

struct _MixprecDevice
{
  MixprecFeature *feature;       /* keeps the vtable (and its module) alive */
  const MixprecDeviceV1 *vtable;
  const MixprecDeviceV2 *vtable_v2;   /* host_alloc/host_free NULL for revision 1 */
  const MixprecDeviceV3 *vtable_v3;   /* fp8_cast/mx_cast NULL for revisions 1 and 2 */
  gpointer handle;
  gchar *label;                  /* "cuda (plugin device-cuda)" */
  gint ordinal;                  /* the ordinal opened (-1 resolved as the
                                    plugin ABI documents it) */
};

/* Turns a plugin status into a GError naming the device and the call. */
static gboolean
check (_MixprecDevice *device,
       int             status,
       const gchar    *call,
       const char     *errbuf,
       GError        **error)
{
  if (status == MIXPREC_PLUGIN_OK)
    return TRUE;
  g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
               "device %s: %s failed: %s (%s, status %d)", device->label, call,
               errbuf[0] != '\0' ? errbuf : "the plugin gave no reason",
               _mixprec_plugin_status_to_string (status), status);
  return FALSE;
}

#define ERRBUF char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = ""

gboolean
_mixprec_device_probe (MixprecFeature *feature,
                       gint           *n_devices,
                       GError        **error)
{
  const MixprecDeviceV1 *vtable = _mixprec_feature_get_device_vtable (feature);
  int n = 0;
  int status;
  ERRBUF;

  g_return_val_if_fail (vtable != NULL, FALSE);

  status = vtable->probe (&n, errbuf, sizeof errbuf);
  errbuf[sizeof errbuf - 1] = '\0';
  if (status == MIXPREC_PLUGIN_OK && n <= 0)
    {
      status = MIXPREC_PLUGIN_ERR_RUNTIME;
      g_strlcpy (errbuf, "the runtime reports no device", sizeof errbuf);
    }
  if (status != MIXPREC_PLUGIN_OK)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
                   "no %s device is usable: %s", vtable->name,
                   errbuf[0] != '\0' ? errbuf : "the plugin gave no reason");
      return FALSE;
    }
  if (n_devices != NULL)
    *n_devices = n;
  return TRUE;
}

/* What a plugin opens for ordinal -1 (MixprecDeviceOpenV1): LOCAL_RANK,
 * else 0. A value the plugin refuses fails its open() anyway. */
static gint
default_ordinal (void)
{
  const gchar *env = g_getenv ("LOCAL_RANK");
  guint64 value = 0;

  if (env == NULL || !g_ascii_string_to_unsigned (env, 10, 0, 65535, &value, NULL))
    return 0;
  return (gint) value;
}

_MixprecDevice *
_mixprec_device_open_feature (MixprecFeature *feature,
                              gint            ordinal,
                              GError        **error)
{
  const MixprecDeviceV1 *vtable = _mixprec_feature_get_device_vtable (feature);
  MixprecDeviceOpenV1 args = { sizeof args, ordinal };
  g_autoptr(GError) local = NULL;
  _MixprecDevice *device;
  int status;
  ERRBUF;

  g_return_val_if_fail (vtable != NULL, NULL);

  if (!_mixprec_device_probe (feature, NULL, &local))
    {
      g_propagate_error (error, g_steal_pointer (&local));
      return NULL;
    }
  device = g_atomic_rc_box_new0 (_MixprecDevice);
  device->feature = g_object_ref (feature);
  device->vtable = vtable;
  device->vtable_v2 = _mixprec_feature_get_device_vtable_v2 (feature);
  device->vtable_v3 = _mixprec_feature_get_device_vtable_v3 (feature);
  device->label = g_strdup_printf ("'%s' (plugin %s)", vtable->name,
                                   mixprec_feature_get_plugin_name (feature));
  device->ordinal = ordinal >= 0 ? ordinal : default_ordinal ();
  status = vtable->open (&args, &device->handle, errbuf, sizeof errbuf);
  errbuf[sizeof errbuf - 1] = '\0';
  if (!check (device, status, "open", errbuf, error))
    {
      device->handle = NULL;
      _mixprec_device_unref (device);
      return NULL;
    }
  return device;
}

_MixprecDevice *
_mixprec_device_open (const gchar *name,
                      gint         ordinal,
                      GError     **error)
{
  g_autoptr(MixprecFeature) feature = NULL;

  g_return_val_if_fail (name != NULL, NULL);

  if (g_str_equal (name, "cpu"))
    return NULL;
  feature = mixprec_registry_find_feature (mixprec_registry_get_default (),
                                           MIXPREC_FEATURE_KIND_DEVICE, name, name, error);
  if (feature == NULL)
    return NULL;
  return _mixprec_device_open_feature (feature, ordinal, error);
}

/* The device of local rank @local_rank: its ordinal modulo the number of
 * devices the plugin sees (CUDA_VISIBLE_DEVICES applied), so that more
 * ranks than devices on a host share them round-robin. */
_MixprecDevice *
_mixprec_device_open_local (const gchar *name,
                            guint        local_rank,
                            GError     **error)
{
  g_autoptr(MixprecFeature) feature = NULL;
  gint n = 0;

  g_return_val_if_fail (name != NULL, NULL);

  if (g_str_equal (name, "cpu"))
    return NULL;
  feature = mixprec_registry_find_feature (mixprec_registry_get_default (),
                                           MIXPREC_FEATURE_KIND_DEVICE, name, name, error);
  if (feature == NULL || !_mixprec_device_probe (feature, &n, error))
    return NULL;
  return _mixprec_device_open_feature (feature, n > 0 ? (gint) (local_rank % (guint) n) : 0,
                                       error);
}

_MixprecDevice *
_mixprec_device_ref (_MixprecDevice *device)
{
  return device != NULL ? g_atomic_rc_box_acquire (device) : NULL;
}

static void
device_clear (gpointer data)
{
  _MixprecDevice *device = data;
  ERRBUF;

  if (device->handle != NULL &&
      device->vtable->close (device->handle, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_debug ("device %s: close failed: %s", device->label, errbuf);
  g_clear_object (&device->feature);
  g_free (device->label);
}

void
_mixprec_device_unref (_MixprecDevice *device)
{
  if (device != NULL)
    g_atomic_rc_box_release_full (device, device_clear);
}

const gchar *
_mixprec_device_get_name (_MixprecDevice *device)
{
  return device != NULL ? device->vtable->name : "cpu";
}

gint
_mixprec_device_get_ordinal (_MixprecDevice *device)
{
  return device != NULL ? device->ordinal : 0;
}

gint
_mixprec_device_get_dlpack_type (_MixprecDevice *device)
{
  const gchar *name = _mixprec_device_get_name (device);

  if (device == NULL)
    return 1;                   /* kDLCPU */
  if (g_str_equal (name, "cuda"))
    return 2;                   /* kDLCUDA */
  if (g_str_equal (name, "rocm"))
    return 10;                  /* kDLROCM */
  return 12;                    /* kDLExtDev */
}

gchar *
_mixprec_device_describe (_MixprecDevice *device)
{
  char out[512] = "";

  if (device == NULL)
    return g_strdup ("cpu (host memory)");
  if (device->vtable->describe (device->handle, out, sizeof out) != MIXPREC_PLUGIN_OK)
    return g_strdup (device->vtable->name);
  out[sizeof out - 1] = '\0';
  return g_strdup (out);
}

gpointer
_mixprec_device_get_stream (_MixprecDevice *device)
{
  return device != NULL ? device->vtable->get_stream (device->handle) : NULL;
}

/* ---------------------------------------------------------------- memory */

gpointer
_mixprec_device_alloc (_MixprecDevice *device,
                       gsize           bytes,
                       const gchar    *what,
                       GError        **error)
{
  gpointer p = NULL;
  ERRBUF;

  if (bytes == 0)
    return NULL;
  if (device == NULL)
    {
      /* 64-byte alignment: whole cache lines per thread chunk, aligned
       * SIMD. Zeroed: padding must hold zeros, and fresh optimizer state
       * is zero. */
      gsize rounded = (bytes + 63) & ~(gsize) 63;

      if (rounded < bytes || posix_memalign (&p, 64, rounded) != 0)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                       "out of memory allocating %" G_GSIZE_FORMAT " bytes for %s", bytes, what);
          return NULL;
        }
      memset (p, 0, rounded);
      return p;
    }
  if (device->vtable->alloc (device->handle, bytes, &p, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK ||
      p == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "device %s: allocating %" G_GSIZE_FORMAT " bytes for %s failed: %s",
                   device->label, bytes, what, errbuf[0] != '\0' ? errbuf : "no memory");
      return NULL;
    }
  if (!_mixprec_device_zero (device, p, bytes, error))
    {
      _mixprec_device_free (device, p);
      return NULL;
    }
  return p;
}

void
_mixprec_device_free (_MixprecDevice *device,
                      gpointer        ptr)
{
  ERRBUF;

  if (ptr == NULL)
    return;
  if (device == NULL)
    free (ptr);
  else if (device->vtable->free (device->handle, ptr, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_debug ("device %s: free failed: %s", device->label, errbuf);
}

gboolean
_mixprec_device_has_pinned (_MixprecDevice *device)
{
  return device != NULL && device->vtable_v2->host_alloc != NULL &&
         device->vtable_v2->host_free != NULL;
}

gpointer
_mixprec_device_host_alloc (_MixprecDevice *device,
                            gsize           bytes,
                            const gchar    *what,
                            GError        **error)
{
  gpointer p = NULL;
  ERRBUF;

  g_return_val_if_fail (_mixprec_device_has_pinned (device), NULL);

  if (bytes == 0)
    return NULL;
  if (device->vtable_v2->host_alloc (device->handle, bytes, &p, errbuf, sizeof errbuf) !=
        MIXPREC_PLUGIN_OK || p == NULL)
    {
      errbuf[sizeof errbuf - 1] = '\0';
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "device %s: allocating %" G_GSIZE_FORMAT " bytes of pinned host memory "
                   "for %s failed: %s", device->label, bytes, what,
                   errbuf[0] != '\0' ? errbuf : "no memory");
      return NULL;
    }
  memset (p, 0, bytes);
  return p;
}

void
_mixprec_device_host_free (_MixprecDevice *device,
                           gpointer        ptr)
{
  ERRBUF;

  if (ptr == NULL)
    return;
  g_return_if_fail (_mixprec_device_has_pinned (device));

  if (device->vtable_v2->host_free (device->handle, ptr, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_debug ("device %s: host_free failed: %s", device->label, errbuf);
}

gboolean
_mixprec_device_zero (_MixprecDevice *device,
                      gpointer        ptr,
                      gsize           bytes,
                      GError        **error)
{
  ERRBUF;

  if (bytes == 0)
    return TRUE;
  if (device == NULL)
    {
      memset (ptr, 0, bytes);
      return TRUE;
    }
  return check (device, device->vtable->memset_zero (device->handle, ptr, bytes, errbuf, sizeof errbuf),
                "memset_zero", errbuf, error);
}

gboolean
_mixprec_device_copy (_MixprecDevice       *device,
                      gpointer              dst,
                      gconstpointer         src,
                      gsize                 bytes,
                      MixprecPluginCopyKind kind,
                      GError              **error)
{
  ERRBUF;

  if (bytes == 0 || dst == src)
    return TRUE;
  if (device == NULL)
    {
      memmove (dst, src, bytes);
      return TRUE;
    }
  return check (device, device->vtable->copy (device->handle, dst, src, bytes, kind, errbuf, sizeof errbuf),
                "copy", errbuf, error);
}

/* Host memory for a typed transfer that converts on the host. */
static gpointer
stage (_MixprecDevice *device,
       gsize           bytes,
       GError        **error)
{
  gpointer staged = g_try_malloc (bytes);

  if (staged == NULL)
    g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                 "out of memory staging %" G_GSIZE_FORMAT " bytes between the host and "
                 "device %s", bytes, device->label);
  return staged;
}

gboolean
_mixprec_device_download (_MixprecDevice *device,
                          gconstpointer   src,
                          MixprecDType    src_dtype,
                          gpointer        host_dst,
                          MixprecDType    dst_dtype,
                          gsize           n,
                          GError        **error)
{
  gsize bytes = n * mixprec_dtype_get_size (src_dtype);
  g_autofree gpointer staged = NULL;

  if (device == NULL || n == 0)
    return mixprec_convert_array (src_dtype, src, dst_dtype, host_dst, n,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error);
  if (src_dtype == dst_dtype)
    return _mixprec_device_copy (device, host_dst, src, bytes, MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error);
  staged = stage (device, bytes, error);
  if (staged == NULL)
    return FALSE;
  return _mixprec_device_copy (device, staged, src, bytes, MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error) &&
         mixprec_convert_array (src_dtype, staged, dst_dtype, host_dst, n,
                                MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error);
}

gboolean
_mixprec_device_upload (_MixprecDevice *device,
                        gconstpointer   host_src,
                        MixprecDType    src_dtype,
                        gpointer        dst,
                        MixprecDType    dst_dtype,
                        gsize           n,
                        GError        **error)
{
  gsize bytes = n * mixprec_dtype_get_size (dst_dtype);
  g_autofree gpointer staged = NULL;

  if (device == NULL || n == 0)
    return mixprec_convert_array (src_dtype, host_src, dst_dtype, dst, n,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error);
  if (src_dtype == dst_dtype)
    return _mixprec_device_copy (device, dst, host_src, bytes, MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error);
  staged = stage (device, bytes, error);
  if (staged == NULL)
    return FALSE;
  return mixprec_convert_array (src_dtype, host_src, dst_dtype, staged, n,
                                MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error) &&
         _mixprec_device_copy (device, dst, staged, bytes, MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error);
}

gboolean
_mixprec_device_synchronize (_MixprecDevice *device,
                             GError        **error)
{
  ERRBUF;

  if (device == NULL)
    return TRUE;
  return check (device, device->vtable->synchronize (device->handle, errbuf, sizeof errbuf),
                "synchronize", errbuf, error);
}

/* ---------------------------------------------------------------- kernels */

gboolean
_mixprec_device_convert (_MixprecDevice *device,
                         gconstpointer   src,
                         MixprecDType    src_dtype,
                         gpointer        dst,
                         MixprecDType    dst_dtype,
                         gsize           n,
                         MixprecRounding rounding,
                         guint64         seed,
                         guint64         first_index,
                         GError        **error)
{
  ERRBUF;

  if (device == NULL)
    return mixprec_convert_array (src_dtype, src, dst_dtype, dst, n, rounding, seed,
                                  first_index, error);
  if (n == 0)
    return TRUE;
  return check (device, device->vtable->convert (device->handle, src, (MixprecPluginDType) src_dtype,
                                                 dst, (MixprecPluginDType) dst_dtype, n,
                                                 (MixprecPluginRounding) rounding, seed, first_index,
                                                 errbuf, sizeof errbuf),
                "convert", errbuf, error);
}

gboolean
_mixprec_device_accumulate (_MixprecDevice *device,
                            gpointer        dst,
                            MixprecDType    dst_dtype,
                            gconstpointer   src,
                            MixprecDType    src_dtype,
                            gsize           n,
                            gboolean        first,
                            GError        **error)
{
  ERRBUF;

  if (device == NULL)
    {
      _mixprec_kernel_fold (dst, dst_dtype, src, src_dtype, n, first);
      return TRUE;
    }
  if (n == 0)
    return TRUE;
  return check (device, device->vtable->accumulate (device->handle, dst, (MixprecPluginDType) dst_dtype,
                                                    src, (MixprecPluginDType) src_dtype, n, first,
                                                    errbuf, sizeof errbuf),
                "accumulate", errbuf, error);
}

gboolean
_mixprec_device_scale (_MixprecDevice *device,
                       gpointer        buf,
                       MixprecDType    dtype,
                       gsize           n,
                       gfloat          factor,
                       GError        **error)
{
  ERRBUF;

  if (device == NULL)
    {
      _mixprec_kernel_scale (buf, dtype, n, factor);
      return TRUE;
    }
  if (n == 0)
    return TRUE;
  return check (device, device->vtable->scale (device->handle, buf, (MixprecPluginDType) dtype, n,
                                               factor, errbuf, sizeof errbuf),
                "scale", errbuf, error);
}

const gchar *
_mixprec_device_get_plugin_name (_MixprecDevice *device)
{
  return device != NULL ? mixprec_feature_get_plugin_name (device->feature) : "builtin";
}

guint
_mixprec_device_get_revision (_MixprecDevice *device)
{
  return device != NULL ? mixprec_feature_get_abi_revision (device->feature) : 0;
}

gboolean
_mixprec_device_has_fp8 (_MixprecDevice *device)
{
  return device != NULL && device->vtable_v3->fp8_cast != NULL && device->vtable_v3->mx_cast != NULL;
}

gboolean
_mixprec_device_fp8_cast (_MixprecDevice *device,
                          MixprecDType    fp8_dtype,
                          gboolean        saturate,
                          gfloat          scale,
                          const gfloat   *src,
                          guint8         *dst,
                          gsize           n,
                          gfloat         *amax,
                          GError        **error)
{
  ERRBUF;

  if (device == NULL)
    {
      gfloat m = amax != NULL ? *amax : 0.0f;

      if (dst != NULL)
        _mixprec_fp8_quantize_f32 (fp8_dtype, saturate, scale, src, dst, n, &m);
      else
        _mixprec_fp8_amax_f32 (src, n, &m);
      if (amax != NULL)
        *amax = m;
      return TRUE;
    }
  g_return_val_if_fail (_mixprec_device_has_fp8 (device), FALSE);
  if (n == 0)
    return TRUE;
  return check (device, device->vtable_v3->fp8_cast (device->handle, (MixprecPluginDType) fp8_dtype,
                                                     saturate ? 1 : 0, scale, src, dst, n, amax,
                                                     errbuf, sizeof errbuf),
                "fp8_cast", errbuf, error);
}

gboolean
_mixprec_device_mx_cast (_MixprecDevice *device,
                         MixprecDType    elem_dtype,
                         guint           block_size,
                         const gfloat   *src,
                         guint8         *dst,
                         guint8         *scales,
                         gsize           n,
                         GError        **error)
{
  ERRBUF;

  if (device == NULL)
    {
      _mixprec_mx_quantize_f32 (elem_dtype, block_size, src, n, dst, scales);
      return TRUE;
    }
  g_return_val_if_fail (_mixprec_device_has_fp8 (device), FALSE);
  if (n == 0)
    return TRUE;
  return check (device, device->vtable_v3->mx_cast (device->handle, (MixprecPluginDType) elem_dtype,
                                                    block_size, src, dst, scales, n,
                                                    errbuf, sizeof errbuf),
                "mx_cast", errbuf, error);
}

gboolean
_mixprec_device_sumsq_blocks (_MixprecDevice             *device,
                              const MixprecDeviceRangeV1 *ranges,
                              guint                       n_ranges,
                              gsize                       block_size,
                              gdouble                    *block_sums,
                              GError                    **error)
{
  ERRBUF;

  g_return_val_if_fail (block_size > 0, FALSE);

  if (device == NULL)
    {
      gsize out = 0;

      for (guint r = 0; r < n_ranges; r++)
        {
          MixprecDType dtype = (MixprecDType) ranges[r].dtype;
          gsize esize = mixprec_dtype_get_size (dtype);
          gsize b = 0;

          /* Whole blocks of the engine's size through the multi-block
           * kernel, the rest one by one: the bits of
           * _mixprec_kernel_sumsq() per block either way. */
          if (block_size == _MIXPREC_SUMSQ_BLOCK && ranges[r].n / block_size > 1)
            {
              gsize whole = ranges[r].n / block_size;

              _mixprec_kernel_sumsq_blocks_best (ranges[r].data, dtype, whole, block_sums + out);
              out += whole;
              b = whole * block_size;
            }
          for (; b < ranges[r].n; b += block_size)
            block_sums[out++] = _mixprec_kernel_sumsq_best ((const guint8 *) ranges[r].data + b * esize,
                                                            dtype, MIN (block_size, ranges[r].n - b));
        }
      return TRUE;
    }
  if (n_ranges == 0)
    return TRUE;
  return check (device, device->vtable->sumsq_blocks (device->handle, ranges, n_ranges, block_size,
                                                      block_sums, errbuf, sizeof errbuf),
                "sumsq_blocks", errbuf, error);
}

gboolean
_mixprec_device_sum_ordered (_MixprecDevice *device,
                             const gdouble  *values,
                             gsize           n,
                             gdouble        *out,
                             GError        **error)
{
  ERRBUF;

  if (device == NULL)
    {
      gdouble sum = 0.0;

      for (gsize i = 0; i < n; i++)
        sum += values[i];
      *out = sum;
      return TRUE;
    }
  return check (device, device->vtable->sum_ordered (device->handle, values, n, out,
                                                     errbuf, sizeof errbuf),
                "sum_ordered", errbuf, error);
}

/* ---------------------------------------------------------------- dispatch */

gboolean
_mixprec_device_memory_is_host (_MixprecDevice *device)
{
  return device == NULL;
}

void
_mixprec_device_dispatch (_MixprecDevice   *device,
                          gsize             n,
                          gsize             min_chunk,
                          gsize             align,
                          _MixprecRangeFunc func,
                          gpointer          data)
{
  if (n == 0)
    return;
  /* A device's kernels are launched from one thread: splitting a range
   * would only multiply the launches. */
  if (device == NULL)
    _mixprec_parallel_for (n, min_chunk, align, func, data);
  else
    func (0, n, data);
}

/* ---------------------------------------------------------------- events */

/* The host's events: work on the host is done when the call returns, so
 * one static marker serves every event. */
static gint host_event;

gpointer
_mixprec_device_event_new (_MixprecDevice *device,
                           GError        **error)
{
  gpointer event = NULL;
  ERRBUF;

  if (device == NULL)
    return &host_event;
  if (!check (device, device->vtable->event_create (device->handle, &event, errbuf, sizeof errbuf),
              "event_create", errbuf, error))
    return NULL;
  return event;
}

gboolean
_mixprec_device_event_record (_MixprecDevice *device,
                              gpointer        event,
                              GError        **error)
{
  ERRBUF;

  if (device == NULL)
    return TRUE;
  return check (device, device->vtable->event_record (device->handle, event, errbuf, sizeof errbuf),
                "event_record", errbuf, error);
}

gboolean
_mixprec_device_event_query (_MixprecDevice *device,
                             gpointer        event,
                             gboolean       *done,
                             GError        **error)
{
  int finished = 1;
  ERRBUF;

  if (device != NULL &&
      !check (device, device->vtable->event_query (device->handle, event, &finished, errbuf, sizeof errbuf),
              "event_query", errbuf, error))
    return FALSE;
  *done = finished != 0;
  return TRUE;
}

gboolean
_mixprec_device_event_wait (_MixprecDevice *device,
                            gpointer        event,
                            GError        **error)
{
  ERRBUF;

  if (device == NULL)
    return TRUE;
  return check (device, device->vtable->event_wait (device->handle, event, errbuf, sizeof errbuf),
                "event_wait", errbuf, error);
}

void
_mixprec_device_event_free (_MixprecDevice *device,
                            gpointer        event)
{
  ERRBUF;

  if (device == NULL || event == NULL)
    return;
  if (device->vtable->event_destroy (device->handle, event, errbuf, sizeof errbuf) != MIXPREC_PLUGIN_OK)
    g_debug ("device %s: event_destroy failed: %s", device->label, errbuf);
}
