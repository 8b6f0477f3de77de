/* mixprec-device-private.h — where the engine's buffers live and which
 * kernels touch them: host memory and the library's CPU kernels, or a
 * device plugin (MixprecDeviceV1) and its kernels. Never installed.
 *
 * Every function takes a _MixprecDevice that may be NULL: NULL is the host,
 * a device like any other whose memory is host memory, whose kernels are
 * the library's CPU kernels and whose dispatch (_mixprec_device_dispatch())
 * is the thread pool, so code written against this file runs unchanged on
 * the CPU and never asks which device it has.
 * Failures of a plugin become GErrors in MIXPREC_PLUGIN_ERROR
 * (MIXPREC_PLUGIN_ERROR_CALL_FAILED) naming the device and the call. */
#pragma once

#include "mixprec.h"
#include "mixprec-plugin.h"
#include "mixprec-parallel-private.h"

G_BEGIN_DECLS

typedef struct _MixprecDevice _MixprecDevice;

/* Opens device @name ("cpu" gives NULL with no error: host memory) of the
 * default registry; @ordinal -1 lets the plugin choose (cuda: LOCAL_RANK, else 0).
 * Fails when no plugin provides @name or the plugin finds no usable
 * device. */
_MixprecDevice *_mixprec_device_open          (const gchar    *name,
                                               gint            ordinal,
                                               GError        **error);
/* Device @name for local rank @local_rank of a multi-process job: ordinal
 * @local_rank modulo the plugin's device count. */
_MixprecDevice *_mixprec_device_open_local    (const gchar    *name,
                                               guint           local_rank,
                                               GError        **error);
/* The same, with a feature of kind MIXPREC_FEATURE_KIND_DEVICE. */
_MixprecDevice *_mixprec_device_open_feature  (MixprecFeature *feature,
                                               gint            ordinal,
                                               GError        **error);
_MixprecDevice *_mixprec_device_ref           (_MixprecDevice *device);
/* Waits for the device and closes it with the last reference. */
void            _mixprec_device_unref         (_MixprecDevice *device);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (_MixprecDevice, _mixprec_device_unref)

/* Whether a plugin's device is usable here: TRUE with the count, or FALSE
 * with the plugin's reason (no driver, no device) in @error. */
gboolean        _mixprec_device_probe         (MixprecFeature *feature,
                                               gint           *n_devices,
                                               GError        **error);

/* "cpu" for NULL. */
const gchar    *_mixprec_device_get_name      (_MixprecDevice *device);
/* The ordinal the device was opened with (0 for NULL). */
gint            _mixprec_device_get_ordinal   (_MixprecDevice *device);
/* DLPack's DLDeviceType of the device's memory, from its name: kDLCPU (1)
 * for NULL, kDLCUDA (2) for "cuda", kDLROCM (10) for "rocm", else
 * kDLExtDev (12), a device no framework knows. */
gint            _mixprec_device_get_dlpack_type (_MixprecDevice *device);
/* One line about the device (its model, ordinal, memory). */
gchar          *_mixprec_device_describe      (_MixprecDevice *device);
/* The plugin's stream (NULL for the host). */
gpointer        _mixprec_device_get_stream    (_MixprecDevice *device);

/* Whether @device's buffers are host memory that the CPU reads and writes
 * directly (the host's; a plugin's device: no). Passes that fuse several
 * kernels while the data is in the CPU's cache (a fold that sums squares
 * as it goes, an optimizer pass that zeroes its gradients or casts FP8
 * copies as it goes) need it; everything else goes through the calls
 * below on every device alike. */
gboolean        _mixprec_device_memory_is_host (_MixprecDevice *device);

/* Runs @func over [0, n) the way @device runs work: on the host across
 * the thread pool (parts of at least @min_chunk items starting on
 * multiples of @align, see _mixprec_parallel_for()), on a device in one
 * call on the calling thread, whose kernels queue on the device's stream.
 * An item is a block or an element, never finer: @func calls the device's
 * kernels over whole ranges. */
void            _mixprec_device_dispatch      (_MixprecDevice   *device,
                                               gsize             n,
                                               gsize             min_chunk,
                                               gsize             align,
                                               _MixprecRangeFunc func,
                                               gpointer          data);

/* @bytes of zeroed memory; @what names the buffer in the error. NULL with
 * no error for 0 bytes. */
gpointer        _mixprec_device_alloc         (_MixprecDevice *device,
                                               gsize           bytes,
                                               const gchar    *what,
                                               GError        **error);
void            _mixprec_device_free          (_MixprecDevice *device,
                                               gpointer        ptr);
/* Pinned (page-locked) host memory from a device of plugin revision 2:
 * whether @device has it (FALSE for the host and revision-1 devices), and
 * @bytes of it zeroed, released with _mixprec_device_host_free(). */
gboolean        _mixprec_device_has_pinned    (_MixprecDevice *device);
gpointer        _mixprec_device_host_alloc    (_MixprecDevice *device,
                                               gsize           bytes,
                                               const gchar    *what,
                                               GError        **error);
void            _mixprec_device_host_free     (_MixprecDevice *device,
                                               gpointer        ptr);
gboolean        _mixprec_device_zero          (_MixprecDevice *device,
                                               gpointer        ptr,
                                               gsize           bytes,
                                               GError        **error);
/* Between host memory and the device's (or within either). A copy to the
 * host returns with the data there. */
gboolean        _mixprec_device_copy          (_MixprecDevice       *device,
                                               gpointer              dst,
                                               gconstpointer         src,
                                               gsize                 bytes,
                                               MixprecPluginCopyKind kind,
                                               GError              **error);
/* Typed transfers between the host and @device's memory, converted with
 * round to nearest even on the host (the conversion kernels give the same
 * bits on either side). With a NULL device both are host conversions. */
gboolean        _mixprec_device_download      (_MixprecDevice *device,
                                               gconstpointer   src,
                                               MixprecDType    src_dtype,
                                               gpointer        host_dst,
                                               MixprecDType    dst_dtype,
                                               gsize           n,
                                               GError        **error);
gboolean        _mixprec_device_upload        (_MixprecDevice *device,
                                               gconstpointer   host_src,
                                               MixprecDType    src_dtype,
                                               gpointer        dst,
                                               MixprecDType    dst_dtype,
                                               gsize           n,
                                               GError        **error);
gboolean        _mixprec_device_synchronize   (_MixprecDevice *device,
                                               GError        **error);

/* The kernels of MixprecDeviceV1, with the same bits on either side. */
gboolean        _mixprec_device_convert       (_MixprecDevice *device,
                                               gconstpointer   src,
                                               MixprecDType    src_dtype,
                                               gpointer        dst,
                                               MixprecDType    dst_dtype,
                                               gsize           n,
                                               MixprecRounding rounding,
                                               guint64         seed,
                                               guint64         first_index,
                                               GError        **error);
gboolean        _mixprec_device_accumulate    (_MixprecDevice *device,
                                               gpointer        dst,
                                               MixprecDType    dst_dtype,
                                               gconstpointer   src,
                                               MixprecDType    src_dtype,
                                               gsize           n,
                                               gboolean        first,
                                               GError        **error);
gboolean        _mixprec_device_scale         (_MixprecDevice *device,
                                               gpointer        buf,
                                               MixprecDType    dtype,
                                               gsize           n,
                                               gfloat          factor,
                                               GError        **error);
gboolean        _mixprec_device_sumsq_blocks  (_MixprecDevice             *device,
                                               const MixprecDeviceRangeV1 *ranges,
                                               guint                       n_ranges,
                                               gsize                       block_size,
                                               gdouble                    *block_sums,
                                               GError                    **error);
gboolean        _mixprec_device_sum_ordered   (_MixprecDevice *device,
                                               const gdouble  *values,
                                               gsize           n,
                                               gdouble        *out,
                                               GError        **error);

/* The float8 casts of a device of plugin revision 3 (MixprecDeviceV3):
 * the plugin revision the device was registered with (0 for the host),
 * whether it has them, and the casts on device memory (@amax: NULL or one
 * float of device memory, a running maximum; @dst NULL: the amax only). */
guint           _mixprec_device_get_revision  (_MixprecDevice *device);
/* The name of the plugin that registered the device. */
const gchar    *_mixprec_device_get_plugin_name (_MixprecDevice *device);
gboolean        _mixprec_device_has_fp8       (_MixprecDevice *device);
gboolean        _mixprec_device_fp8_cast      (_MixprecDevice *device,
                                               MixprecDType    fp8_dtype,
                                               gboolean        saturate,
                                               gfloat          scale,
                                               const gfloat   *src,
                                               guint8         *dst,
                                               gsize           n,
                                               gfloat         *amax,
                                               GError        **error);
gboolean        _mixprec_device_mx_cast       (_MixprecDevice *device,
                                               MixprecDType    elem_dtype,
                                               guint           block_size,
                                               const gfloat   *src,
                                               guint8         *dst,
                                               guint8         *scales,
                                               gsize           n,
                                               GError        **error);

/* Events of the device's stream; on the host every event is complete. */
gpointer        _mixprec_device_event_new     (_MixprecDevice *device,
                                               GError        **error);
gboolean        _mixprec_device_event_record  (_MixprecDevice *device,
                                               gpointer        event,
                                               GError        **error);
gboolean        _mixprec_device_event_query   (_MixprecDevice *device,
                                               gpointer        event,
                                               gboolean       *done,
                                               GError        **error);
gboolean        _mixprec_device_event_wait    (_MixprecDevice *device,
                                               gpointer        event,
                                               GError        **error);
void            _mixprec_device_event_free    (_MixprecDevice *device,
                                               gpointer        event);

/* ---- features (the checks of one revision in mixprec-plugin-compat.c,
 * the vtables in mixprec-feature.c: every revision upgraded to V3) */

/* What register_device would answer a plugin: name, every function,
 * reserved space. */
gboolean        _mixprec_device_vtable_check  (const MixprecDeviceV1 *vtable,
                                               GError              **error);
/* The same for revision 2 (register_device_v2): the V1 checks, then
 * host_alloc and host_free, then the V2 reserved space. */
gboolean        _mixprec_device_v2_vtable_check (const MixprecDeviceV2 *vtable,
                                                 GError              **error);
/* The same for revision 3 (register_device_v3): the V2 checks, then
 * fp8_cast and mx_cast, then the V3 reserved space. */
gboolean        _mixprec_device_v3_vtable_check (const MixprecDeviceV3 *vtable,
                                                 GError              **error);
/* The device's vtable (NULL for other kinds). */
const MixprecDeviceV1 *_mixprec_feature_get_device_vtable (MixprecFeature *feature);
/* The whole revision-2 form: host_alloc and host_free are NULL for a
 * device registered as revision 1. */
const MixprecDeviceV2 *_mixprec_feature_get_device_vtable_v2 (MixprecFeature *feature);
/* The whole revision-3 form: fp8_cast and mx_cast are NULL for a device
 * registered as revision 1 or 2. */
const MixprecDeviceV3 *_mixprec_feature_get_device_vtable_v3 (MixprecFeature *feature);

G_END_DECLS
