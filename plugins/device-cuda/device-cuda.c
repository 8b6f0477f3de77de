/* device-cuda.c — the "cuda" device: memory, copies, one non-blocking
 * stream, events and the element-wise kernels of the engine, on one GPU,
 * through the CUDA runtime. The plugin also carries the cuda optimizers
 * (cuda-optim.c).
 *
 * Loading the plugin touches no driver: init() only registers vtables, so
 * a host without a GPU lists the features and probe() says why they
 * cannot run. Every runtime error becomes a status and a sentence naming
 * the call and the device; none is ignored. The library may call a handle
 * from a thread other than the one that opened it, so each entry point
 * first makes the handle's device current (cheap). */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-plugin.h"
#include "cuda-launch.h"

/* Entries of the range table of sumsq_blocks kept between calls. */
#define TABLE_MIN_ENTRIES 64

typedef struct {
  int ordinal;
  cudaStream_t stream;
  char name[256];
  int major, minor;
  size_t total_memory;
  /* sumsq_blocks' range table: filled in pinned memory, copied to the
   * device on the stream. staging_done marks the end of the last copy
   * out of staging, so the next call does not overwrite it early. */
  MixprecCudaRange *staging;
  MixprecCudaRange *table;
  size_t table_entries;
  cudaEvent_t staging_done;
} CudaDevice;

int
_mixprec_cuda_fail (char        *errbuf,
                    size_t       errbuf_len,
                    cudaError_t  error,
                    int          ordinal,
                    const char  *format,
                    ...)
{
  char call[512];
  va_list ap;

  if (ordinal < 0 && cudaGetDevice (&ordinal) != cudaSuccess)
    ordinal = -1;
  va_start (ap, format);
  vsnprintf (call, sizeof call, format, ap);
  va_end (ap);
  if (ordinal >= 0)
    return _mixprec_optim_fail (errbuf, errbuf_len,
                                error == cudaErrorMemoryAllocation ? MIXPREC_PLUGIN_ERR_NO_MEMORY
                                                                   : MIXPREC_PLUGIN_ERR_RUNTIME,
                                "%s on cuda:%d: %s.", call, ordinal, cudaGetErrorString (error));
  return _mixprec_optim_fail (errbuf, errbuf_len,
                              error == cudaErrorMemoryAllocation ? MIXPREC_PLUGIN_ERR_NO_MEMORY
                                                                 : MIXPREC_PLUGIN_ERR_RUNTIME,
                              "%s: %s.", call, cudaGetErrorString (error));
}

static int
ok (char   *errbuf,
    size_t  errbuf_len)
{
  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';
  return MIXPREC_PLUGIN_OK;
}

/* Makes the handle's device current for this thread. */
#define ENTER(dev, errbuf, errbuf_len) \
  do { \
    cudaError_t enter_e_; \
    if ((dev) == NULL) \
      return _mixprec_optim_fail ((errbuf), (errbuf_len), MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, \
                                  "Device cuda: the device handle is NULL."); \
    if ((enter_e_ = cudaSetDevice ((dev)->ordinal)) != cudaSuccess) \
      return _mixprec_cuda_fail ((errbuf), (errbuf_len), enter_e_, (dev)->ordinal, "cudaSetDevice"); \
  } while (0)

/* Returns from the entry point when the runtime call failed. */
#define CHECK(dev, expr, errbuf, errbuf_len, ...) \
  do { \
    cudaError_t check_e_ = (expr); \
    if (check_e_ != cudaSuccess) \
      return _mixprec_cuda_fail ((errbuf), (errbuf_len), check_e_, (dev)->ordinal, __VA_ARGS__); \
  } while (0)

static int
dtype_is_valid (MixprecPluginDType dtype)
{
  return (unsigned) dtype <= MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2;
}

static int
bad_dtype (char       *errbuf,
           size_t      errbuf_len,
           const char *function,
           const char *which,
           int         dtype)
{
  return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                              "Device cuda: %s: %s dtype %d is not one of float32 (0) to "
                              "float8_e5m2 (4).", function, which, dtype);
}

static int
null_buffer (char       *errbuf,
             size_t      errbuf_len,
             const char *function,
             size_t      n)
{
  return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                              "Device cuda: %s of %zu elements got a NULL buffer.", function, n);
}

/* ------------------------------------------------------------ probe, open, close */

static int
cuda_probe (int    *n_devices,
            char   *errbuf,
            size_t  errbuf_len)
{
  int count = 0;
  cudaError_t e = cudaGetDeviceCount (&count);

  if (n_devices != NULL)
    *n_devices = e == cudaSuccess ? count : 0;
  if (e != cudaSuccess)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                                "cudaGetDeviceCount: %s.", cudaGetErrorString (e));
  if (count <= 0)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                                "cudaGetDeviceCount: the CUDA runtime sees no device.");
  return ok (errbuf, errbuf_len);
}

/* LOCAL_RANK (set by torchrun and the MPI launchers), else 0. */
static int
default_ordinal (int    *ordinal,
                 char   *errbuf,
                 size_t  errbuf_len)
{
  const char *env = getenv ("LOCAL_RANK");
  char *end;
  long value;

  *ordinal = 0;
  if (env == NULL || env[0] == '\0')
    return MIXPREC_PLUGIN_OK;
  errno = 0;
  value = strtol (env, &end, 10);
  if (errno != 0 || *end != '\0' || value < 0 || value > 65535)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: LOCAL_RANK=\"%s\" is not a device ordinal; set it "
                                "to a non-negative integer or choose the device explicitly.", env);
  *ordinal = (int) value;
  return MIXPREC_PLUGIN_OK;
}

/* Frees everything the handle holds, and the handle. Returns the first
 * failure (with its call's name in *call); the rest is still released. */
static cudaError_t
release (CudaDevice  *dev,
         const char **call)
{
  cudaError_t first = cudaSuccess, e;

#define RELEASE(expr, name) \
  do { \
    if ((e = (expr)) != cudaSuccess && first == cudaSuccess) \
      { \
        first = e; \
        *call = (name); \
      } \
  } while (0)
  if (dev->stream != NULL)
    RELEASE (cudaStreamSynchronize (dev->stream), "cudaStreamSynchronize before closing");
  if (dev->staging_done != NULL)
    RELEASE (cudaEventDestroy (dev->staging_done), "cudaEventDestroy");
  if (dev->staging != NULL)
    RELEASE (cudaFreeHost (dev->staging), "cudaFreeHost");
  if (dev->table != NULL)
    RELEASE (cudaFree (dev->table), "cudaFree");
  if (dev->stream != NULL)
    RELEASE (cudaStreamDestroy (dev->stream), "cudaStreamDestroy");
#undef RELEASE
  free (dev);
  return first;
}

static int
open_device (CudaDevice *dev,
             char       *errbuf,
             size_t      errbuf_len)
{
  struct cudaDeviceProp prop;

  CHECK (dev, cudaSetDevice (dev->ordinal), errbuf, errbuf_len, "cudaSetDevice");
  CHECK (dev, cudaGetDeviceProperties (&prop, dev->ordinal), errbuf, errbuf_len, "cudaGetDeviceProperties");
  snprintf (dev->name, sizeof dev->name, "%s", prop.name);
  dev->major = prop.major;
  dev->minor = prop.minor;
  dev->total_memory = prop.totalGlobalMem;
  CHECK (dev, cudaStreamCreateWithFlags (&dev->stream, cudaStreamNonBlocking), errbuf, errbuf_len,
         "cudaStreamCreateWithFlags");
  CHECK (dev, cudaEventCreateWithFlags (&dev->staging_done, cudaEventDisableTiming), errbuf, errbuf_len,
         "cudaEventCreateWithFlags");
  dev->table_entries = TABLE_MIN_ENTRIES;
  CHECK (dev, cudaHostAlloc ((void **) &dev->staging, dev->table_entries * sizeof (MixprecCudaRange),
                             cudaHostAllocDefault),
         errbuf, errbuf_len, "cudaHostAlloc (%zu bytes)", dev->table_entries * sizeof (MixprecCudaRange));
  CHECK (dev, cudaMalloc ((void **) &dev->table, dev->table_entries * sizeof (MixprecCudaRange)),
         errbuf, errbuf_len, "cudaMalloc (%zu bytes)", dev->table_entries * sizeof (MixprecCudaRange));
  return MIXPREC_PLUGIN_OK;
}

static int
cuda_open (const MixprecDeviceOpenV1 *args,
           void                     **device,
           char                      *errbuf,
           size_t                     errbuf_len)
{
  CudaDevice *dev;
  int ordinal, count = 0, status;
  cudaError_t e;

  if (device == NULL || args == NULL || args->struct_size < sizeof (MixprecDeviceOpenV1))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: open() needs a MixprecDeviceOpenV1 of at least %zu "
                                "bytes and a place for the handle.", sizeof (MixprecDeviceOpenV1));
  *device = NULL;
  ordinal = args->ordinal;
  if (ordinal < -1)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: ordinal %d is neither a device nor -1 (the default).",
                                ordinal);
  if (ordinal == -1 && (status = default_ordinal (&ordinal, errbuf, errbuf_len)) != MIXPREC_PLUGIN_OK)
    return status;
  if ((e = cudaGetDeviceCount (&count)) != cudaSuccess)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                                "cudaGetDeviceCount: %s.", cudaGetErrorString (e));
  if (ordinal >= count)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda:%d does not exist: this host has %d CUDA device%s.",
                                ordinal, count, count == 1 ? "" : "s");

  dev = calloc (1, sizeof *dev);
  if (dev == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_NO_MEMORY,
                                "Device cuda: out of host memory for the handle.");
  dev->ordinal = ordinal;
  if ((status = open_device (dev, errbuf, errbuf_len)) != MIXPREC_PLUGIN_OK)
    {
      const char *call = NULL;

      /* The failure that stopped open() is the one to report. */
      (void) release (dev, &call);
      return status;
    }
  *device = dev;
  return ok (errbuf, errbuf_len);
}

static int
cuda_close (void   *device,
            char   *errbuf,
            size_t  errbuf_len)
{
  CudaDevice *dev = device;
  int ordinal;
  const char *call = "cudaSetDevice";
  cudaError_t e;

  if (dev == NULL)
    return ok (errbuf, errbuf_len);
  ordinal = dev->ordinal;
  if ((e = cudaSetDevice (ordinal)) == cudaSuccess)
    e = release (dev, &call);
  else
    {
      const char *ignored = NULL;

      (void) release (dev, &ignored);
    }
  if (e != cudaSuccess)
    return _mixprec_cuda_fail (errbuf, errbuf_len, e, ordinal, "%s", call);
  return ok (errbuf, errbuf_len);
}

static int
cuda_describe (void   *device,
               char   *out,
               size_t  out_len)
{
  CudaDevice *dev = device;

  if (dev == NULL || out == NULL || out_len == 0)
    return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
  snprintf (out, out_len, "%s (cuda:%d, sm_%d%d, %.1f GiB)", dev->name, dev->ordinal,
            dev->major, dev->minor, (double) dev->total_memory / (1024.0 * 1024.0 * 1024.0));
  return MIXPREC_PLUGIN_OK;
}

static void *
cuda_get_stream (void *device)
{
  CudaDevice *dev = device;

  return dev != NULL ? (void *) dev->stream : NULL;
}

/* ------------------------------------------------------------ memory */

static int
cuda_alloc (void   *device,
            size_t  bytes,
            void  **ptr,
            char   *errbuf,
            size_t  errbuf_len)
{
  CudaDevice *dev = device;

  if (ptr == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: alloc() got no place for the pointer.");
  *ptr = NULL;
  ENTER (dev, errbuf, errbuf_len);
  if (bytes == 0)
    return ok (errbuf, errbuf_len);
  CHECK (dev, cudaMalloc (ptr, bytes), errbuf, errbuf_len, "cudaMalloc (%zu bytes)", bytes);
  return ok (errbuf, errbuf_len);
}

static int
cuda_free (void   *device,
           void   *ptr,
           char   *errbuf,
           size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  if (ptr == NULL)
    return ok (errbuf, errbuf_len);
  /* Kernels still queued may use the memory. */
  CHECK (dev, cudaStreamSynchronize (dev->stream), errbuf, errbuf_len, "cudaStreamSynchronize before cudaFree");
  CHECK (dev, cudaFree (ptr), errbuf, errbuf_len, "cudaFree");
  return ok (errbuf, errbuf_len);
}

/* Pinned host memory for the engine's offload transfers: page-locked, so
 * copies run at full bandwidth, and portable, so any context of the
 * process may copy from it. */
static int
cuda_host_alloc (void   *device,
                 size_t  bytes,
                 void  **ptr,
                 char   *errbuf,
                 size_t  errbuf_len)
{
  CudaDevice *dev = device;

  if (ptr == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: host_alloc() got no place for the pointer.");
  *ptr = NULL;
  ENTER (dev, errbuf, errbuf_len);
  if (bytes == 0)
    return ok (errbuf, errbuf_len);
  CHECK (dev, cudaHostAlloc (ptr, bytes, cudaHostAllocPortable), errbuf, errbuf_len,
         "cudaHostAlloc (%zu bytes, cudaHostAllocPortable)", bytes);
  return ok (errbuf, errbuf_len);
}

static int
cuda_host_free (void   *device,
                void   *ptr,
                char   *errbuf,
                size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  if (ptr == NULL)
    return ok (errbuf, errbuf_len);
  /* A copy still queued may read or write it. */
  CHECK (dev, cudaStreamSynchronize (dev->stream), errbuf, errbuf_len,
         "cudaStreamSynchronize before cudaFreeHost");
  CHECK (dev, cudaFreeHost (ptr), errbuf, errbuf_len, "cudaFreeHost");
  return ok (errbuf, errbuf_len);
}

static int
cuda_memset_zero (void   *device,
                  void   *ptr,
                  size_t  bytes,
                  char   *errbuf,
                  size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  if (bytes == 0)
    return ok (errbuf, errbuf_len);
  if (ptr == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: memset_zero of %zu bytes got a NULL pointer.", bytes);
  CHECK (dev, cudaMemsetAsync (ptr, 0, bytes, dev->stream), errbuf, errbuf_len,
         "cudaMemsetAsync (%zu bytes)", bytes);
  return ok (errbuf, errbuf_len);
}

static int
cuda_copy (void                 *device,
           void                 *dst,
           const void           *src,
           size_t                bytes,
           MixprecPluginCopyKind kind,
           char                 *errbuf,
           size_t                errbuf_len)
{
  static const char *const names[] = { "host to device", "device to host", "device to device" };
  static const enum cudaMemcpyKind kinds[] = {
    cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice
  };
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  if ((unsigned) kind > MIXPREC_PLUGIN_COPY_DEVICE_TO_DEVICE)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: copy kind %d is not a MixprecPluginCopyKind.", (int) kind);
  if (bytes == 0)
    return ok (errbuf, errbuf_len);
  if (dst == NULL || src == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: copy of %zu bytes got a NULL pointer.", bytes);
  CHECK (dev, cudaMemcpyAsync (dst, src, bytes, kinds[kind], dev->stream), errbuf, errbuf_len,
         "cudaMemcpyAsync (%zu bytes, %s)", bytes, names[kind]);
  /* Host memory may be pinned, and then the copy really is asynchronous:
   * wait, so the host buffer is reusable (or filled) on return. */
  if (kind != MIXPREC_PLUGIN_COPY_DEVICE_TO_DEVICE)
    CHECK (dev, cudaStreamSynchronize (dev->stream), errbuf, errbuf_len,
           "cudaStreamSynchronize after cudaMemcpyAsync (%zu bytes, %s)", bytes, names[kind]);
  return ok (errbuf, errbuf_len);
}

static int
cuda_synchronize (void   *device,
                  char   *errbuf,
                  size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  CHECK (dev, cudaStreamSynchronize (dev->stream), errbuf, errbuf_len, "cudaStreamSynchronize");
  return ok (errbuf, errbuf_len);
}

/* ------------------------------------------------------------ events */

static int
cuda_event_create (void   *device,
                   void  **event,
                   char   *errbuf,
                   size_t  errbuf_len)
{
  CudaDevice *dev = device;
  cudaEvent_t ev;

  ENTER (dev, errbuf, errbuf_len);
  if (event == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: event_create() got no place for the event.");
  CHECK (dev, cudaEventCreateWithFlags (&ev, cudaEventDisableTiming), errbuf, errbuf_len,
         "cudaEventCreateWithFlags");
  *event = ev;
  return ok (errbuf, errbuf_len);
}

static int
cuda_event_record (void   *device,
                   void   *event,
                   char   *errbuf,
                   size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  CHECK (dev, cudaEventRecord ((cudaEvent_t) event, dev->stream), errbuf, errbuf_len, "cudaEventRecord");
  return ok (errbuf, errbuf_len);
}

static int
cuda_event_query (void   *device,
                  void   *event,
                  int    *done,
                  char   *errbuf,
                  size_t  errbuf_len)
{
  CudaDevice *dev = device;
  cudaError_t e;

  ENTER (dev, errbuf, errbuf_len);
  if (event == NULL || done == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: event_query() needs an event and a place for the answer.");
  e = cudaEventQuery ((cudaEvent_t) event);
  if (e == cudaErrorNotReady)
    {
      /* Not an error: the work is still running. */
      *done = 0;
      return ok (errbuf, errbuf_len);
    }
  CHECK (dev, e, errbuf, errbuf_len, "cudaEventQuery");
  *done = 1;
  return ok (errbuf, errbuf_len);
}

static int
cuda_event_wait (void   *device,
                 void   *event,
                 char   *errbuf,
                 size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  CHECK (dev, cudaEventSynchronize ((cudaEvent_t) event), errbuf, errbuf_len, "cudaEventSynchronize");
  return ok (errbuf, errbuf_len);
}

static int
cuda_event_destroy (void   *device,
                    void   *event,
                    char   *errbuf,
                    size_t  errbuf_len)
{
  CudaDevice *dev = device;

  ENTER (dev, errbuf, errbuf_len);
  if (event == NULL)
    return ok (errbuf, errbuf_len);
  CHECK (dev, cudaEventDestroy ((cudaEvent_t) event), errbuf, errbuf_len, "cudaEventDestroy");
  return ok (errbuf, errbuf_len);
}

/* ------------------------------------------------------------ kernels */

static int
cuda_convert (void                 *device,
              const void           *src,
              MixprecPluginDType    src_dtype,
              void                 *dst,
              MixprecPluginDType    dst_dtype,
              size_t                n,
              MixprecPluginRounding rounding,
              uint64_t              seed,
              uint64_t              first_index,
              char                 *errbuf,
              size_t                errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "convert";

  ENTER (dev, errbuf, errbuf_len);
  if (!dtype_is_valid (src_dtype))
    return bad_dtype (errbuf, errbuf_len, "convert", "source", src_dtype);
  if (!dtype_is_valid (dst_dtype))
    return bad_dtype (errbuf, errbuf_len, "convert", "destination", dst_dtype);
  if (rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN && rounding != MIXPREC_PLUGIN_ROUNDING_STOCHASTIC)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Device cuda: convert: rounding mode %d is neither nearest-even (0) "
                                "nor stochastic (1).", (int) rounding);
  if (n > 0 && (src == NULL || dst == NULL))
    return null_buffer (errbuf, errbuf_len, "convert", n);
  CHECK (dev, _mixprec_cuda_convert (src, src_dtype, dst, dst_dtype, n,
                                     rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC, seed, first_index,
                                     dev->stream, &call),
         errbuf, errbuf_len, "%s (%zu elements)", call, n);
  return ok (errbuf, errbuf_len);
}

static int
cuda_accumulate (void              *device,
                 void              *dst,
                 MixprecPluginDType dst_dtype,
                 const void        *src,
                 MixprecPluginDType src_dtype,
                 size_t             n,
                 int                first,
                 char              *errbuf,
                 size_t             errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "accumulate";

  ENTER (dev, errbuf, errbuf_len);
  if (!dtype_is_valid (dst_dtype))
    return bad_dtype (errbuf, errbuf_len, "accumulate", "destination", dst_dtype);
  if (!dtype_is_valid (src_dtype))
    return bad_dtype (errbuf, errbuf_len, "accumulate", "source", src_dtype);
  if (n > 0 && (src == NULL || dst == NULL))
    return null_buffer (errbuf, errbuf_len, "accumulate", n);
  CHECK (dev, _mixprec_cuda_accumulate (dst, dst_dtype, src, src_dtype, n, first != 0, dev->stream, &call),
         errbuf, errbuf_len, "%s (%zu elements)", call, n);
  return ok (errbuf, errbuf_len);
}

static int
cuda_scale (void              *device,
            void              *buf,
            MixprecPluginDType dtype,
            size_t             n,
            float              factor,
            char              *errbuf,
            size_t             errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "scale";

  ENTER (dev, errbuf, errbuf_len);
  if (!dtype_is_valid (dtype))
    return bad_dtype (errbuf, errbuf_len, "scale", "buffer", dtype);
  if (n > 0 && buf == NULL)
    return null_buffer (errbuf, errbuf_len, "scale", n);
  CHECK (dev, _mixprec_cuda_scale (buf, dtype, n, factor, dev->stream, &call),
         errbuf, errbuf_len, "%s (%zu elements)", call, n);
  return ok (errbuf, errbuf_len);
}

/* Room for @n entries in the staging buffer and the device table. */
static int
reserve_table (CudaDevice *dev,
               size_t      n,
               char       *errbuf,
               size_t      errbuf_len)
{
  size_t entries = dev->table_entries;

  if (n <= entries)
    return MIXPREC_PLUGIN_OK;
  /* Zero after a failed growth: start again. */
  if (entries == 0)
    entries = TABLE_MIN_ENTRIES;
  while (entries < n)
    entries *= 2;
  /* Both old buffers may still be in use by queued work. */
  CHECK (dev, cudaStreamSynchronize (dev->stream), errbuf, errbuf_len,
         "cudaStreamSynchronize before growing the sumsq range table");
  dev->table_entries = 0;
  if (dev->staging != NULL)
    CHECK (dev, cudaFreeHost (dev->staging), errbuf, errbuf_len, "cudaFreeHost");
  dev->staging = NULL;
  if (dev->table != NULL)
    CHECK (dev, cudaFree (dev->table), errbuf, errbuf_len, "cudaFree");
  dev->table = NULL;
  CHECK (dev, cudaHostAlloc ((void **) &dev->staging, entries * sizeof (MixprecCudaRange),
                             cudaHostAllocDefault),
         errbuf, errbuf_len, "cudaHostAlloc (%zu bytes)", entries * sizeof (MixprecCudaRange));
  CHECK (dev, cudaMalloc ((void **) &dev->table, entries * sizeof (MixprecCudaRange)),
         errbuf, errbuf_len, "cudaMalloc (%zu bytes)", entries * sizeof (MixprecCudaRange));
  dev->table_entries = entries;
  return MIXPREC_PLUGIN_OK;
}

static int
cuda_sumsq_blocks (void                       *device,
                   const MixprecDeviceRangeV1 *ranges,
                   unsigned                    n_ranges,
                   size_t                      block_size,
                   double                     *block_sums,
                   char                       *errbuf,
                   size_t                      errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "sumsq_blocks";
  size_t n_blocks = 0;
  int status;

  ENTER (dev, errbuf, errbuf_len);
  if (n_ranges == 0)
    return ok (errbuf, errbuf_len);
  if (ranges == NULL || block_size == 0)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: sumsq_blocks needs the %u ranges and a block size "
                                "above 0, got %zu.", n_ranges, block_size);
  for (unsigned k = 0; k < n_ranges; k++)
    {
      if (!dtype_is_valid (ranges[k].dtype))
        return bad_dtype (errbuf, errbuf_len, "sumsq_blocks", "range", ranges[k].dtype);
      if (ranges[k].n > 0 && ranges[k].data == NULL)
        return null_buffer (errbuf, errbuf_len, "sumsq_blocks", ranges[k].n);
      n_blocks += (ranges[k].n + block_size - 1) / block_size;
    }
  if (n_blocks == 0)
    return ok (errbuf, errbuf_len);
  if (block_sums == NULL)
    return null_buffer (errbuf, errbuf_len, "sumsq_blocks", n_blocks);
  if ((status = reserve_table (dev, n_ranges, errbuf, errbuf_len)) != MIXPREC_PLUGIN_OK)
    return status;

  /* The previous call's copy out of staging must be done before we
   * overwrite it; usually it is long finished. */
  CHECK (dev, cudaEventSynchronize (dev->staging_done), errbuf, errbuf_len,
         "cudaEventSynchronize (sumsq range table)");
  n_blocks = 0;
  for (unsigned k = 0; k < n_ranges; k++)
    {
      dev->staging[k].data = ranges[k].data;
      dev->staging[k].dtype = ranges[k].dtype;
      dev->staging[k].n = ranges[k].n;
      dev->staging[k].first_block = n_blocks;
      n_blocks += (ranges[k].n + block_size - 1) / block_size;
    }
  CHECK (dev, cudaMemcpyAsync (dev->table, dev->staging, n_ranges * sizeof (MixprecCudaRange),
                               cudaMemcpyHostToDevice, dev->stream),
         errbuf, errbuf_len, "cudaMemcpyAsync (sumsq range table, %u ranges)", n_ranges);
  CHECK (dev, cudaEventRecord (dev->staging_done, dev->stream), errbuf, errbuf_len,
         "cudaEventRecord (sumsq range table)");
  CHECK (dev, _mixprec_cuda_sumsq_blocks (dev->table, n_ranges, n_blocks, block_size, block_sums,
                                          dev->stream, &call),
         errbuf, errbuf_len, "%s (%u ranges, %zu blocks)", call, n_ranges, n_blocks);
  return ok (errbuf, errbuf_len);
}

static int
cuda_sum_ordered (void         *device,
                  const double *values,
                  size_t        n,
                  double       *out,
                  char         *errbuf,
                  size_t        errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "sum_ordered";

  ENTER (dev, errbuf, errbuf_len);
  if (out == NULL || (n > 0 && values == NULL))
    return null_buffer (errbuf, errbuf_len, "sum_ordered", n);
  CHECK (dev, _mixprec_cuda_sum_ordered (values, n, out, dev->stream, &call),
         errbuf, errbuf_len, "%s (%zu values)", call, n);
  return ok (errbuf, errbuf_len);
}

/* ------------------------------------------------------------ float8 (revision 3) */

static int
fp8_format (MixprecPluginDType dtype)
{
  return dtype == MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3 ? 0
         : dtype == MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2 ? 1 : -1;
}

/* The running amax is a float of device memory; non-negative floats order
 * as their bits, so the kernel's atomicMax on the bits keeps it. */
static int
cuda_fp8_cast (void              *device,
               MixprecPluginDType fp8_dtype,
               int                saturate,
               float              scale,
               const float       *src,
               uint8_t           *dst,
               size_t             n,
               float             *amax,
               char              *errbuf,
               size_t             errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "fp8_cast";
  int format = fp8_format (fp8_dtype);

  ENTER (dev, errbuf, errbuf_len);
  if (format < 0)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: fp8_cast: dtype %d is not a float8 dtype.", (int) fp8_dtype);
  if (n > 0 && src == NULL)
    return null_buffer (errbuf, errbuf_len, "fp8_cast", n);
  CHECK (dev, _mixprec_cuda_fp8_quantize (src, dst, n, format, saturate, scale, (uint32_t *) amax,
                                          dev->stream, &call),
         errbuf, errbuf_len, "%s (%zu elements)", call, n);
  return ok (errbuf, errbuf_len);
}

static int
cuda_mx_cast (void              *device,
              MixprecPluginDType elem_dtype,
              unsigned           block_size,
              const float       *src,
              uint8_t           *dst,
              uint8_t           *scales,
              size_t             n,
              char              *errbuf,
              size_t             errbuf_len)
{
  CudaDevice *dev = device;
  const char *call = "mx_cast";
  int format = fp8_format (elem_dtype);

  ENTER (dev, errbuf, errbuf_len);
  if (format < 0 || block_size == 0)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Device cuda: mx_cast: dtype %d, block size %u (a float8 dtype and a "
                                "block size above 0 are needed).", (int) elem_dtype, block_size);
  if (n > 0 && (src == NULL || dst == NULL || scales == NULL))
    return null_buffer (errbuf, errbuf_len, "mx_cast", n);
  CHECK (dev, _mixprec_cuda_mx_quantize (src, n, format, block_size, dst, scales, dev->stream, &call),
         errbuf, errbuf_len, "%s (%zu elements)", call, n);
  return ok (errbuf, errbuf_len);
}

/* ------------------------------------------------------------ the plugin */

static const MixprecDeviceV3 cuda_device = {
  .base.base = {
    .name = "cuda",
    .rank = _MIXPREC_OPTIM_RANK,
    .description = "One NVIDIA GPU through the CUDA runtime: memory, pinned host memory, copies, "
                   "a stream, events and the engine's element-wise and float8 kernels, bit-identical "
                   "to the cpu ones",
    .probe = cuda_probe,
    .open = cuda_open,
    .close = cuda_close,
    .describe = cuda_describe,
    .get_stream = cuda_get_stream,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .memset_zero = cuda_memset_zero,
    .copy = cuda_copy,
    .synchronize = cuda_synchronize,
    .event_create = cuda_event_create,
    .event_record = cuda_event_record,
    .event_query = cuda_event_query,
    .event_wait = cuda_event_wait,
    .event_destroy = cuda_event_destroy,
    .convert = cuda_convert,
    .accumulate = cuda_accumulate,
    .scale = cuda_scale,
    .sumsq_blocks = cuda_sumsq_blocks,
    .sum_ordered = cuda_sum_ordered,
  },
  .base.host_alloc = cuda_host_alloc,
  .base.host_free = cuda_host_free,
  .fp8_cast = cuda_fp8_cast,
  .mx_cast = cuda_mx_cast,
};

static int
device_cuda_init (MixprecPluginHostV1 *host,
                  char                *errbuf,
                  size_t               errbuf_len)
{
  int status, revision = 3;

  if (host == NULL || host->abi_major != MIXPREC_PLUGIN_ABI_VERSION_MAJOR ||
      host->struct_size < offsetof (MixprecPluginHostV1, register_device) + sizeof host->register_device ||
      host->register_optimizer == NULL || host->register_device == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Plugin device-cuda needs plugin ABI %d.x with register_device; "
                                "the library's host table lacks it.", MIXPREC_PLUGIN_ABI_VERSION_MAJOR);
  /* Revision 3 (float8 casts) where the library has it, else 2 (pinned
   * host memory), else 1. */
  if (host->struct_size >= offsetof (MixprecPluginHostV1, register_device_v3) + sizeof host->register_device_v3 &&
      host->register_device_v3 != NULL)
    status = host->register_device_v3 (host, &cuda_device, errbuf, errbuf_len);
  else if (host->struct_size >= offsetof (MixprecPluginHostV1, register_device_v2) + sizeof host->register_device_v2 &&
           host->register_device_v2 != NULL)
    {
      revision = 2;
      status = host->register_device_v2 (host, &cuda_device.base, errbuf, errbuf_len);
    }
  else
    {
      revision = 1;
      status = host->register_device (host, &cuda_device.base.base, errbuf, errbuf_len);
    }
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  MIXPREC_PLUGIN_LOG (MIXPREC_PLUGIN_LOG_DEBUG, "registered the cuda device as revision %d of 3",
                      revision);
  return _mixprec_cuda_optim_register (host, errbuf, errbuf_len);
}

MIXPREC_PLUGIN_DEFINE (device_cuda, "device-cuda",
                       "NVIDIA GPUs through the CUDA runtime: the cuda device and the cuda adamw, "
                       "sgd and lion optimizers",
                       device_cuda_init, PACKAGE_VERSION, "LGPL-2.1-or-later", PACKAGE_NAME)
