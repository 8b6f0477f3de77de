/* test-hostdev.c — a device plugin whose "device memory" is host memory,
 * so the engine's device path (every buffer behind MixprecDeviceV1, the
 * optimizer on the device's stream, one read of the norm per step) runs
 * and is checked on any machine, against the engine on "cpu".
 *
 * Its kernels are a second implementation, written here element by element
 * from the contract in mixprec-plugin.h with the scalar conversions of
 * mixprec-dtype-private.h, not the library's array kernels. Its optimizers
 * ("adamw", "sgd", "lion" for device "hostdev") are the cpu plugins' step()
 * functions, loaded from the build tree, behind a check that the engine
 * passes the device's stream. Every allocation is tracked: the test reads
 * the counters below to see that the engine used the device and freed
 * everything.
 *
 * "hostdev" is a device of revision 2 (MixprecDeviceV2): its pinned host
 * memory is tracked too, with every copy whose host side lies in it and
 * the threads that made those copies. It is of revision 3
 * (MixprecDeviceV3) too: its float8 casts (fp8_cast, mx_cast) are written
 * here from the element functions of numeric/numeric-fp8.h (the ones the
 * cuda kernels are built from), not the library's array kernels.
 * "hostdev-v1" is the same device registered as revision 1, without pinned
 * memory, and "hostdev-v2" as revision 2, without float8 casts: old
 * plugins.
 *
 * Across ranks, its "device memory" being host memory, the build tree's
 * comm-ucx carries the device's collectives: its communicator is
 * registered again here as "ucx" for device "hostdev" (when the build has
 * UCX), so that the engine on "hostdev" reduces and gathers through a
 * communicator of its device, as it would through NCCL on "cuda". Like
 * NCCL, it takes device memory only: every buffer of a collective must lie
 * in one of this device's allocations (host memory, pinned or not, is
 * refused), which is what a GPU's communicator would require. */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec-plugin-abi.h"
#include "mixprec-dtype-private.h"
#include "numeric/numeric-fp8.h"

/* Read by the test through dlsym(). */
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_live_allocations;
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_kernel_calls;
/* Calls of fp8_cast (with a cast, amax-only) and of mx_cast. */
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_fp8_casts;
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_fp8_amax_passes;
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_mx_casts;
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_optimizer_calls;
MIXPREC_PLUGIN_EXPORT int mixprec_test_hostdev_last_ordinal = -2;
/* Pinned host memory: live allocations and their bytes; copies to or from
 * it; the threads that made such copies, each counted at its first. */
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_live_pinned;
MIXPREC_PLUGIN_EXPORT size_t mixprec_test_hostdev_pinned_bytes;
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_pinned_copies;
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_pinned_copy_threads;
/* Of those copies, the ones made by the thread that last opened a device. */
MIXPREC_PLUGIN_EXPORT unsigned mixprec_test_hostdev_pinned_copies_by_opener;

/* Live device allocations, for the communicator's check. */
static pthread_mutex_t allocs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  char *ptr;
  size_t bytes;
} *allocs;
static size_t n_allocs, allocs_room;

#define MAX_PINNED 256
static struct {
  char *ptr;
  size_t bytes;
} pinned[MAX_PINNED];
static pthread_t opener;
/* Whether this thread has made a pinned copy: thread-local, so a thread
 * created after another was joined counts anew even where it gets the
 * same pthread_t. */
static __thread int copied_pinned;

/* How many host devices there are: MIXPREC_TEST_HOSTDEV_COUNT, else 1. */
static int
hd_count (void)
{
  const char *env = getenv ("MIXPREC_TEST_HOSTDEV_COUNT");
  int n = env != NULL ? atoi (env) : 1;

  return n > 0 ? n : 1;
}

typedef struct {
  char magic[8];               /* "stream": what get_stream() hands out */
} HostDevice;

static int
fail (char *errbuf, size_t len, int status, const char *message)
{
  if (errbuf != NULL && len > 0)
    snprintf (errbuf, len, "%s", message);
  return status;
}

static int
hd_probe (int *n, char *errbuf, size_t len)
{
  if (getenv ("MIXPREC_TEST_HOSTDEV_ABSENT") != NULL)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_RUNTIME, "hostdevGetCount: no host device (test)");
  *n = hd_count ();
  return MIXPREC_PLUGIN_OK;
}

static int
hd_open (const MixprecDeviceOpenV1 *args, void **device, char *errbuf, size_t len)
{
  HostDevice *d;

  if (args->ordinal >= hd_count ())
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                 hd_count () == 1 ? "only ordinal 0 exists" : "no such ordinal");
  mixprec_test_hostdev_last_ordinal = args->ordinal;
  opener = pthread_self ();
  d = calloc (1, sizeof *d);
  memcpy (d->magic, "stream", 7);
  *device = d;
  return MIXPREC_PLUGIN_OK;
}

static int
hd_close (void *device, char *errbuf, size_t len)
{
  (void) errbuf;
  (void) len;
  free (device);
  return MIXPREC_PLUGIN_OK;
}

static int
hd_describe (void *device, char *out, size_t len)
{
  (void) device;
  snprintf (out, len, "host memory posing as a device (test)");
  return MIXPREC_PLUGIN_OK;
}

static void *
hd_get_stream (void *device)
{
  return device;
}

static int
hd_alloc (void *device, size_t bytes, void **ptr, char *errbuf, size_t len)
{
  (void) device;
  *ptr = NULL;
  if (bytes == 0)
    return MIXPREC_PLUGIN_OK;
  if (posix_memalign (ptr, 256, bytes) != 0)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_NO_MEMORY, "hostdevMalloc: out of memory");
  /* Garbage, as device memory would hold: the engine must zero it. */
  memset (*ptr, 0xA5, bytes);
  pthread_mutex_lock (&allocs_lock);
  if (n_allocs == allocs_room)
    {
      size_t room = allocs_room > 0 ? 2 * allocs_room : 64;
      void *grown = realloc (allocs, room * sizeof *allocs);

      if (grown == NULL)
        {
          pthread_mutex_unlock (&allocs_lock);
          free (*ptr);
          *ptr = NULL;
          return fail (errbuf, len, MIXPREC_PLUGIN_ERR_NO_MEMORY, "hostdevMalloc: out of memory");
        }
      allocs = grown;
      allocs_room = room;
    }
  allocs[n_allocs].ptr = *ptr;
  allocs[n_allocs].bytes = bytes;
  n_allocs++;
  pthread_mutex_unlock (&allocs_lock);
  mixprec_test_hostdev_live_allocations++;
  return MIXPREC_PLUGIN_OK;
}

/* Whether [p, p + bytes) lies inside one live device allocation. */
static int
in_device_memory (const void *p, size_t bytes)
{
  const char *c = p;
  int found = 0;

  if (bytes == 0)
    return 1;
  pthread_mutex_lock (&allocs_lock);
  for (size_t i = 0; i < n_allocs && !found; i++)
    found = c >= allocs[i].ptr && c + bytes <= allocs[i].ptr + allocs[i].bytes;
  pthread_mutex_unlock (&allocs_lock);
  return found;
}

static int
hd_free (void *device, void *ptr, char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  if (ptr != NULL)
    {
      pthread_mutex_lock (&allocs_lock);
      for (size_t i = 0; i < n_allocs; i++)
        if (allocs[i].ptr == ptr)
          {
            allocs[i] = allocs[--n_allocs];
            break;
          }
      pthread_mutex_unlock (&allocs_lock);
      free (ptr);
      mixprec_test_hostdev_live_allocations--;
    }
  return MIXPREC_PLUGIN_OK;
}

static int
hd_memset_zero (void *device, void *ptr, size_t bytes, char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  memset (ptr, 0, bytes);
  return MIXPREC_PLUGIN_OK;
}

static int
hd_host_alloc (void *device, size_t bytes, void **ptr, char *errbuf, size_t len)
{
  unsigned slot;

  (void) device;
  *ptr = NULL;
  if (bytes == 0)
    return MIXPREC_PLUGIN_OK;
  for (slot = 0; slot < MAX_PINNED && pinned[slot].ptr != NULL; slot++)
    ;
  if (slot == MAX_PINNED)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_NO_MEMORY, "hostdevHostAlloc: too many pinned buffers (test)");
  if (posix_memalign (ptr, 64, bytes) != 0)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_NO_MEMORY, "hostdevHostAlloc: out of memory");
  /* Unspecified contents, as the contract says: the engine zeroes. */
  memset (*ptr, 0x5A, bytes);
  pinned[slot].ptr = *ptr;
  pinned[slot].bytes = bytes;
  mixprec_test_hostdev_live_pinned++;
  mixprec_test_hostdev_pinned_bytes += bytes;
  return MIXPREC_PLUGIN_OK;
}

static int
hd_host_free (void *device, void *ptr, char *errbuf, size_t len)
{
  (void) device;
  if (ptr == NULL)
    return MIXPREC_PLUGIN_OK;
  for (unsigned slot = 0; slot < MAX_PINNED; slot++)
    if (pinned[slot].ptr == ptr)
      {
        mixprec_test_hostdev_live_pinned--;
        mixprec_test_hostdev_pinned_bytes -= pinned[slot].bytes;
        pinned[slot].ptr = NULL;
        free (ptr);
        return MIXPREC_PLUGIN_OK;
      }
  return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
               "hostdevHostFree: not a pointer host_alloc() gave");
}

/* Whether [p, p + bytes) lies in one pinned allocation. */
static int
is_pinned (const void *p, size_t bytes)
{
  const char *c = p;

  for (unsigned slot = 0; slot < MAX_PINNED; slot++)
    if (pinned[slot].ptr != NULL && c >= pinned[slot].ptr &&
        c + bytes <= pinned[slot].ptr + pinned[slot].bytes)
      return 1;
  return 0;
}

static void
note_pinned_copy (void)
{
  mixprec_test_hostdev_pinned_copies++;
  if (pthread_equal (pthread_self (), opener))
    mixprec_test_hostdev_pinned_copies_by_opener++;
  if (!copied_pinned)
    {
      copied_pinned = 1;
      mixprec_test_hostdev_pinned_copy_threads++;
    }
}

static int
hd_copy (void *device, void *dst, const void *src, size_t bytes, MixprecPluginCopyKind kind,
         char *errbuf, size_t len)
{
  (void) device;
  if ((unsigned) kind > MIXPREC_PLUGIN_COPY_DEVICE_TO_DEVICE)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "unknown copy kind");
  if ((kind == MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST && is_pinned (dst, bytes)) ||
      (kind == MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE && is_pinned (src, bytes)))
    note_pinned_copy ();
  /* The device side of a copy is device memory, as a GPU's copy engine
   * requires. */
  if ((kind != MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE && !in_device_memory (src, bytes)) ||
      (kind != MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST && !in_device_memory (dst, bytes)))
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                 "hostdevMemcpy: the device side of the copy is not hostdev device memory");
  memmove (dst, src, bytes);
  return MIXPREC_PLUGIN_OK;
}

static int
hd_synchronize (void *device, char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  return MIXPREC_PLUGIN_OK;
}

static int
hd_event_create (void *device, void **event, char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  *event = calloc (1, 1);
  return MIXPREC_PLUGIN_OK;
}

static int
hd_event_record (void *device, void *event, char *errbuf, size_t len)
{
  (void) device;
  (void) event;
  (void) errbuf;
  (void) len;
  return MIXPREC_PLUGIN_OK;
}

static int
hd_event_query (void *device, void *event, int *done, char *errbuf, size_t len)
{
  (void) device;
  (void) event;
  (void) errbuf;
  (void) len;
  *done = 1;
  return MIXPREC_PLUGIN_OK;
}

static int
hd_event_wait (void *device, void *event, char *errbuf, size_t len)
{
  (void) device;
  (void) event;
  (void) errbuf;
  (void) len;
  return MIXPREC_PLUGIN_OK;
}

static int
hd_event_destroy (void *device, void *event, char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  free (event);
  return MIXPREC_PLUGIN_OK;
}

/* ------------------------------------------------------------ kernels */

static float
load (const void *p, MixprecPluginDType dtype, size_t i)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT32: return ((const float *) p)[i];
    case MIXPREC_PLUGIN_DTYPE_FLOAT16: return _mixprec_f16_to_f32 (((const uint16_t *) p)[i]);
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16: return _mixprec_bf16_to_f32 (((const uint16_t *) p)[i]);
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3: return _mixprec_e4m3_to_f32 (((const uint8_t *) p)[i]);
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2: return _mixprec_e5m2_to_f32 (((const uint8_t *) p)[i]);
    default: return 0.0f;
    }
}

static void
store (void *p, MixprecPluginDType dtype, size_t i, float v, int stochastic, uint32_t r)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT32:
      ((float *) p)[i] = v;
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      ((uint16_t *) p)[i] = stochastic ? _mixprec_f32_to_f16_sr (v, r) : _mixprec_f32_to_f16_rne (v);
      break;
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      ((uint16_t *) p)[i] = stochastic ? _mixprec_f32_to_bf16_sr (v, r) : _mixprec_f32_to_bf16_rne (v);
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3:
      ((uint8_t *) p)[i] = stochastic ? _mixprec_f32_to_e4m3_sr (v, r) : _mixprec_f32_to_e4m3_rne (v);
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2:
      ((uint8_t *) p)[i] = stochastic ? _mixprec_f32_to_e5m2_sr (v, r) : _mixprec_f32_to_e5m2_rne (v);
      break;
    default:
      break;
    }
}

static int
hd_convert (void *device, const void *src, MixprecPluginDType src_dtype, void *dst,
            MixprecPluginDType dst_dtype, size_t n, MixprecPluginRounding rounding,
            uint64_t seed, uint64_t first_index, char *errbuf, size_t len)
{
  int stochastic = rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;

  (void) device;
  (void) errbuf;
  (void) len;
  mixprec_test_hostdev_kernel_calls++;
  /* Through FP32, as the contract says; a same-dtype copy keeps NaN bits. */
  if (src_dtype == dst_dtype)
    {
      static const size_t sizes[] = { 4, 2, 2, 1, 1 };

      memmove (dst, src, n * sizes[src_dtype]);
      return MIXPREC_PLUGIN_OK;
    }
  for (size_t i = 0; i < n; i++)
    {
      uint64_t index = first_index + i;
      /* bfloat16 takes the low (even index) or high (odd) half of word
       * index / 2 of the stream; the other formats word index. */
      uint32_t r = dst_dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16
                   ? (_mixprec_sr_bits (seed, index / 2) >> (index % 2 == 0 ? 0 : 16)) & 0xFFFF
                   : _mixprec_sr_bits (seed, index);

      store (dst, dst_dtype, i, load (src, src_dtype, i), stochastic, stochastic ? r : 0);
    }
  return MIXPREC_PLUGIN_OK;
}

static int
hd_accumulate (void *device, void *dst, MixprecPluginDType dst_dtype, const void *src,
               MixprecPluginDType src_dtype, size_t n, int first, char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  mixprec_test_hostdev_kernel_calls++;
  for (size_t i = 0; i < n; i++)
    {
      float v = load (src, src_dtype, i);

      if (!first)
        v = load (dst, dst_dtype, i) + v;
      store (dst, dst_dtype, i, v, 0, 0);
    }
  return MIXPREC_PLUGIN_OK;
}

static int
hd_scale (void *device, void *buf, MixprecPluginDType dtype, size_t n, float factor,
          char *errbuf, size_t len)
{
  (void) device;
  (void) errbuf;
  (void) len;
  mixprec_test_hostdev_kernel_calls++;
  for (size_t i = 0; i < n; i++)
    store (buf, dtype, i, load (buf, dtype, i) * factor, 0, 0);
  return MIXPREC_PLUGIN_OK;
}

static int
hd_sumsq_blocks (void *device, const MixprecDeviceRangeV1 *ranges, unsigned n_ranges,
                 size_t block_size, double *block_sums, char *errbuf, size_t len)
{
  size_t out = 0;

  (void) device;
  if (block_size == 0)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "block_size is 0");
  mixprec_test_hostdev_kernel_calls++;
  for (unsigned r = 0; r < n_ranges; r++)
    for (size_t b = 0; b < ranges[r].n; b += block_size)
      {
        double lane[8] = { 0 };
        size_t m = ranges[r].n - b < block_size ? ranges[r].n - b : block_size;

        for (size_t i = 0; i < m; i++)
          {
            double x = load (ranges[r].data, ranges[r].dtype, b + i);

            lane[i % 8] += x * x;
          }
        block_sums[out++] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                            ((lane[4] + lane[5]) + (lane[6] + lane[7]));
      }
  return MIXPREC_PLUGIN_OK;
}

static int
hd_sum_ordered (void *device, const double *values, size_t n, double *out, char *errbuf, size_t len)
{
  double sum = 0.0;

  (void) device;
  (void) errbuf;
  (void) len;
  mixprec_test_hostdev_kernel_calls++;
  for (size_t i = 0; i < n; i++)
    sum += values[i];
  *out = sum;
  return MIXPREC_PLUGIN_OK;
}

static unsigned
fp8_format (MixprecPluginDType dtype)
{
  return dtype == MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3 ? _MIXPREC_FP8_E4M3 : _MIXPREC_FP8_E5M2;
}

static int
hd_fp8_cast (void *device, MixprecPluginDType fp8_dtype, int saturate, float scale, const float *src,
             uint8_t *dst, size_t n, float *amax, char *errbuf, size_t len)
{
  uint32_t m;

  (void) device;
  if (fp8_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3 && fp8_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2)
    {
      snprintf (errbuf, len, "fp8_cast: dtype %d is not a float8 dtype", (int) fp8_dtype);
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  if (dst != NULL)
    mixprec_test_hostdev_fp8_casts++;
  else
    mixprec_test_hostdev_fp8_amax_passes++;
  /* The running maximum as the cuda kernel keeps it: fp32 bits. */
  m = amax != NULL ? _mixprec_f32_bits (*amax) : 0;
  for (size_t i = 0; i < n; i++)
    {
      m = _mixprec_fp8_amax_bits (m, src[i]);
      if (dst != NULL)
        dst[i] = _mixprec_fp8_cast (fp8_format (fp8_dtype), saturate != 0, src[i], scale);
    }
  if (amax != NULL)
    *amax = _mixprec_f32_from_bits (m);
  return MIXPREC_PLUGIN_OK;
}

static int
hd_mx_cast (void *device, MixprecPluginDType elem_dtype, unsigned block_size, const float *src,
            uint8_t *dst, uint8_t *scales, size_t n, char *errbuf, size_t len)
{
  unsigned format = fp8_format (elem_dtype);

  (void) device;
  if ((elem_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3 && elem_dtype != MIXPREC_PLUGIN_DTYPE_FLOAT8_E5M2) ||
      block_size == 0)
    {
      snprintf (errbuf, len, "mx_cast: dtype %d, block size %u", (int) elem_dtype, block_size);
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  mixprec_test_hostdev_mx_casts++;
  for (size_t start = 0; start < n; start += block_size)
    {
      size_t l = n - start < block_size ? n - start : block_size;
      uint32_t m = 0;
      int has_nan = 0;
      float inv;

      for (size_t k = 0; k < l; k++)
        {
          m = _mixprec_fp8_amax_bits (m, src[start + k]);
          has_nan |= (_mixprec_f32_bits (src[start + k]) & 0x7FFFFFFF) > 0x7F800000;
        }
      scales[start / block_size] = _mixprec_mx_scale_byte (m, has_nan, format);
      inv = _mixprec_mx_inv_scale (scales[start / block_size]);
      for (size_t k = 0; k < l; k++)
        dst[start + k] = _mixprec_mx_cast (format, src[start + k], inv);
    }
  return MIXPREC_PLUGIN_OK;
}

static const MixprecDeviceV3 hostdev_vtable = {
  .base.base = {
    .name = "hostdev",
    .rank = 1,
    .description = "host memory behind the device ABI, for tests",
    .probe = hd_probe,
    .open = hd_open,
    .close = hd_close,
    .describe = hd_describe,
    .get_stream = hd_get_stream,
    .alloc = hd_alloc,
    .free = hd_free,
    .memset_zero = hd_memset_zero,
    .copy = hd_copy,
    .synchronize = hd_synchronize,
    .event_create = hd_event_create,
    .event_record = hd_event_record,
    .event_query = hd_event_query,
    .event_wait = hd_event_wait,
    .event_destroy = hd_event_destroy,
    .convert = hd_convert,
    .accumulate = hd_accumulate,
    .scale = hd_scale,
    .sumsq_blocks = hd_sumsq_blocks,
    .sum_ordered = hd_sum_ordered,
  },
  .base.host_alloc = hd_host_alloc,
  .base.host_free = hd_host_free,
  .fp8_cast = hd_fp8_cast,
  .mx_cast = hd_mx_cast,
};

/* The same device as a plugin of revision 2 would register it. */
static MixprecDeviceV2 hostdev_v2_vtable;

/* The same device as an old plugin would register it. */
static MixprecDeviceV1 hostdev_v1_vtable;

/* ------------------------------------------------------------ optimizers */

#define N_OPTIMIZERS 3
static MixprecOptimizerV2 cpu_optimizers[N_OPTIMIZERS];
static MixprecOptimizerV2 device_optimizers[N_OPTIMIZERS];
static unsigned n_captured;

static int
capture_optimizer (MixprecPluginHostV1 *host, const MixprecOptimizerV2 *optimizer,
                   char *errbuf, size_t len)
{
  (void) host;
  if (n_captured >= N_OPTIMIZERS)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, "too many optimizers");
  cpu_optimizers[n_captured++] = *optimizer;
  return MIXPREC_PLUGIN_OK;
}

/* The device's step: the cpu step, once the stream is the device's. */
static int
step_on_stream (unsigned which, const MixprecOptimizerStepV2 *args, float *master, const void *grad,
                void *const *states, void *working, size_t n, char *errbuf, size_t len)
{
  const HostDevice *stream = args->base.device_stream;

  if (args->base.struct_size < sizeof *args || stream == NULL || memcmp (stream->magic, "stream", 7) != 0)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                 "the step did not come with the hostdev stream");
  mixprec_test_hostdev_optimizer_calls++;
  return cpu_optimizers[which].step (args, master, grad, states, working, n, errbuf, len);
}

#define STEP_ENTRY(i) \
  static int step_##i (const MixprecOptimizerStepV2 *args, float *master, const void *grad, \
                       void *const *states, void *working, size_t n, char *errbuf, size_t len) \
  { return step_on_stream (i, args, master, grad, states, working, n, errbuf, len); }
STEP_ENTRY (0)
STEP_ENTRY (1)
STEP_ENTRY (2)

typedef int (*StepFunc) (const MixprecOptimizerStepV2 *, float *, const void *, void *const *,
                         void *, size_t, char *, size_t);
static const StepFunc step_entries[N_OPTIMIZERS] = { step_0, step_1, step_2 };

/* Loads the cpu optimizer plugin @name of the build tree and keeps the
 * vtable its init() registers. */
static int
load_cpu_optimizer (const char *top, const char *name, char *errbuf, size_t len)
{
  char path[4096], symbol[128];
  const MixprecPluginDesc *(*get_desc) (void);
  const MixprecPluginDesc *desc;
  MixprecPluginHostV1 host = { 0 };
  void *module;

  snprintf (path, sizeof path, "%s/plugins/.libs/mixprec-optim-%s.so", top, name);
  snprintf (symbol, sizeof symbol, "mixprec_plugin_optim_%s_get_desc", name);
  module = dlopen (path, RTLD_NOW | RTLD_LOCAL);
  if (module == NULL)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_RUNTIME, dlerror ());
  *(void **) &get_desc = dlsym (module, symbol);
  if (get_desc == NULL || (desc = get_desc ()) == NULL)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_RUNTIME, "no optimizer entry point");
  host.struct_size = sizeof host;
  host.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
  host.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
  host.register_optimizer_v2 = capture_optimizer;
  return desc->init (&host, errbuf, len);
}

/* ------------------------------------------------------------ a communicator */

static MixprecCommV1 ucx_comm;         /* comm-ucx's own */
static MixprecCommV1 ucx_for_hostdev;  /* the checking wrapper below */
static int have_ucx;

/* A communicator of comm-ucx and its world size. */
typedef struct {
  void *inner;
  unsigned world;
} HdComm;

static const size_t dtype_sizes[] = { 4, 2, 2, 1, 1 };

static int
check_buffer (const char *op, const char *which, const void *p, size_t count, MixprecPluginDType dtype,
              char *errbuf, size_t len)
{
  char message[256];

  if ((unsigned) dtype < sizeof dtype_sizes / sizeof dtype_sizes[0] &&
      in_device_memory (p, count * dtype_sizes[dtype]))
    return MIXPREC_PLUGIN_OK;
  snprintf (message, sizeof message, "hostdev communicator: %s: the %s buffer %p (%zu elements) is "
            "not hostdev device memory", op, which, p, count);
  return fail (errbuf, len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT, message);
}

static int
hdc_init (const MixprecCommInitV1 *args, void **comm, char *errbuf, size_t len)
{
  HdComm *c = calloc (1, sizeof *c);
  int status;

  if (c == NULL)
    return fail (errbuf, len, MIXPREC_PLUGIN_ERR_NO_MEMORY, "out of memory");
  c->world = args->bootstrap->world_size;
  status = ucx_comm.init (args, &c->inner, errbuf, len);
  if (status != MIXPREC_PLUGIN_OK)
    {
      free (c);
      return status;
    }
  *comm = c;
  return MIXPREC_PLUGIN_OK;
}

static int
hdc_all_reduce (void *comm, const void *send, void *recv, size_t count, MixprecPluginDType dtype,
                MixprecPluginReduceOp op, unsigned flags, void **request, char *errbuf, size_t len)
{
  HdComm *c = comm;
  int status;

  if ((status = check_buffer ("all_reduce", "send", send, count, dtype, errbuf, len)) != MIXPREC_PLUGIN_OK ||
      (status = check_buffer ("all_reduce", "recv", recv, count,
                              flags & MIXPREC_PLUGIN_COMM_RECV_FP32 ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : dtype,
                              errbuf, len)) != MIXPREC_PLUGIN_OK)
    return status;
  return ucx_comm.all_reduce (c->inner, send, recv, count, dtype, op, flags, request, errbuf, len);
}

static int
hdc_reduce_scatter (void *comm, const void *send, void *recv, size_t count, MixprecPluginDType dtype,
                    MixprecPluginReduceOp op, unsigned flags, void **request, char *errbuf, size_t len)
{
  HdComm *c = comm;
  int status;

  if ((status = check_buffer ("reduce_scatter", "send", send, count * c->world, dtype, errbuf, len)) != MIXPREC_PLUGIN_OK ||
      (status = check_buffer ("reduce_scatter", "recv", recv, count,
                              flags & MIXPREC_PLUGIN_COMM_RECV_FP32 ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : dtype,
                              errbuf, len)) != MIXPREC_PLUGIN_OK)
    return status;
  return ucx_comm.reduce_scatter (c->inner, send, recv, count, dtype, op, flags, request, errbuf, len);
}

static int
hdc_all_gather (void *comm, const void *send, void *recv, size_t count, MixprecPluginDType dtype,
                void **request, char *errbuf, size_t len)
{
  HdComm *c = comm;
  int status;

  if ((status = check_buffer ("all_gather", "send", send, count, dtype, errbuf, len)) != MIXPREC_PLUGIN_OK ||
      (status = check_buffer ("all_gather", "recv", recv, count * c->world, dtype, errbuf, len)) != MIXPREC_PLUGIN_OK)
    return status;
  return ucx_comm.all_gather (c->inner, send, recv, count, dtype, request, errbuf, len);
}

static int
hdc_broadcast (void *comm, void *buf, size_t count, MixprecPluginDType dtype, unsigned root,
               void **request, char *errbuf, size_t len)
{
  HdComm *c = comm;
  int status = check_buffer ("broadcast", "", buf, count, dtype, errbuf, len);

  if (status != MIXPREC_PLUGIN_OK)
    return status;
  return ucx_comm.broadcast (c->inner, buf, count, dtype, root, request, errbuf, len);
}

static int
hdc_barrier (void *comm, void **request, char *errbuf, size_t len)
{
  return ucx_comm.barrier (((HdComm *) comm)->inner, request, errbuf, len);
}

static int
hdc_test (void *comm, void *request, int *done, char *errbuf, size_t len)
{
  return ucx_comm.test (((HdComm *) comm)->inner, request, done, errbuf, len);
}

static int
hdc_wait (void *comm, void *request, char *errbuf, size_t len)
{
  return ucx_comm.wait (((HdComm *) comm)->inner, request, errbuf, len);
}

static void
hdc_abort (void *comm)
{
  ucx_comm.abort (((HdComm *) comm)->inner);
}

static int
hdc_finalize (void *comm, char *errbuf, size_t len)
{
  HdComm *c = comm;
  int status = ucx_comm.finalize (c->inner, errbuf, len);

  free (c);
  return status;
}

static int
capture_comm (MixprecPluginHostV1 *host, const MixprecCommV1 *comm, char *errbuf, size_t len)
{
  (void) host;
  (void) errbuf;
  (void) len;
  ucx_comm = *comm;
  have_ucx = 1;
  return MIXPREC_PLUGIN_OK;
}

/* comm-ucx of the build tree, registered for this device; nothing when
 * the build has no UCX (its plugin is absent). */
static int
register_ucx (MixprecPluginHostV1 *host, const char *top, char *errbuf, size_t len)
{
  char path[4096];
  const MixprecPluginDesc *(*get_desc) (void);
  const MixprecPluginDesc *desc;
  MixprecPluginHostV1 capture = { 0 };
  void *module;
  int status;

  if (!have_ucx)
    {
      snprintf (path, sizeof path, "%s/plugins/.libs/mixprec-comm-ucx.so", top);
      module = dlopen (path, RTLD_NOW | RTLD_LOCAL);
      if (module == NULL)
        return MIXPREC_PLUGIN_OK;
      *(void **) &get_desc = dlsym (module, "mixprec_plugin_comm_ucx_get_desc");
      if (get_desc == NULL || (desc = get_desc ()) == NULL)
        return fail (errbuf, len, MIXPREC_PLUGIN_ERR_RUNTIME, "comm-ucx has no entry point");
      capture.struct_size = sizeof capture;
      capture.abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR;
      capture.abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR;
      capture.register_comm = capture_comm;
      if (host->struct_size >= offsetof (MixprecPluginHostV1, log_data) + sizeof (void *))
        {
          capture.log = host->log;
          capture.log_data = host->log_data;
        }
      status = desc->init (&capture, errbuf, len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
      if (!have_ucx)
        return fail (errbuf, len, MIXPREC_PLUGIN_ERR_RUNTIME, "comm-ucx registered no communicator");
      ucx_for_hostdev = ucx_comm;
      ucx_for_hostdev.device = "hostdev";
      ucx_for_hostdev.description = "comm-ucx's collectives on hostdev device memory only, for tests";
      ucx_for_hostdev.init = hdc_init;
      ucx_for_hostdev.all_reduce = hdc_all_reduce;
      ucx_for_hostdev.reduce_scatter = hdc_reduce_scatter;
      ucx_for_hostdev.all_gather = hdc_all_gather;
      ucx_for_hostdev.broadcast = hdc_broadcast;
      ucx_for_hostdev.barrier = hdc_barrier;
      ucx_for_hostdev.test = hdc_test;
      ucx_for_hostdev.wait = hdc_wait;
      ucx_for_hostdev.abort = hdc_abort;
      ucx_for_hostdev.finalize = hdc_finalize;
    }
  return host->register_comm (host, &ucx_for_hostdev, errbuf, len);
}

static int
hostdev_init (MixprecPluginHostV1 *host, char *errbuf, size_t len)
{
  static const char *const names[N_OPTIMIZERS] = { "adamw", "sgd", "lion" };
  const char *top = getenv ("MIXPREC_TOP_BUILDDIR");
  int status;

  /* Revision 3 where the library has it, else 2, else 1 (the contract
   * of register_device_v3 and register_device_v2). */
  if (host->struct_size >= offsetof (MixprecPluginHostV1, register_device_v3) + sizeof (void *) &&
      host->register_device_v3 != NULL)
    status = host->register_device_v3 (host, &hostdev_vtable, errbuf, len);
  else if (host->struct_size >= offsetof (MixprecPluginHostV1, register_device_v2) + sizeof (void *) &&
           host->register_device_v2 != NULL)
    status = host->register_device_v2 (host, &hostdev_vtable.base, errbuf, len);
  else
    status = host->register_device (host, &hostdev_vtable.base.base, errbuf, len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  if (host->struct_size >= offsetof (MixprecPluginHostV1, register_device_v2) + sizeof (void *) &&
      host->register_device_v2 != NULL)
    {
      hostdev_v2_vtable = hostdev_vtable.base;
      hostdev_v2_vtable.base.name = "hostdev-v2";
      hostdev_v2_vtable.base.description = "hostdev as a device plugin of revision 2 (no float8 casts), for tests";
      status = host->register_device_v2 (host, &hostdev_v2_vtable, errbuf, len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
    }
  hostdev_v1_vtable = hostdev_vtable.base.base;
  hostdev_v1_vtable.name = "hostdev-v1";
  hostdev_v1_vtable.description = "hostdev as a device plugin of revision 1 (no pinned memory), for tests";
  status = host->register_device (host, &hostdev_v1_vtable, errbuf, len);

  /* Outside the build tree there are no cpu optimizers to wrap. A second
   * registry (tests make several) reuses what the first init loaded. */
  if (status != MIXPREC_PLUGIN_OK || top == NULL)
    return status;
  for (unsigned i = 0; n_captured < N_OPTIMIZERS && i < N_OPTIMIZERS; i++)
    {
      status = load_cpu_optimizer (top, names[i], errbuf, len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
    }
  for (unsigned i = 0; i < N_OPTIMIZERS; i++)
    {
      device_optimizers[i] = cpu_optimizers[i];
      device_optimizers[i].device = "hostdev";
      device_optimizers[i].step = step_entries[i];
      status = host->register_optimizer_v2 (host, &device_optimizers[i], errbuf, len);
      if (status != MIXPREC_PLUGIN_OK)
        return status;
    }
  return register_ucx (host, top, errbuf, len);
}

MIXPREC_PLUGIN_DEFINE (test_hostdev, "test-hostdev",
                       "a host-memory device for testing the engine's device path",
                       hostdev_init, PACKAGE_VERSION, "LGPL-2.1-or-later", "libmixprec tests")
