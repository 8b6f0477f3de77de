/* nccl-kernels.cu — comm-nccl's kernels: widening and first-term folding
 * before a sum, the FP32 fold in rank order of contributions received in
 * a narrower dtype, and the order-preserving integer keys of a MAX.
 *
 * Values are handled as raw bits (uint16_t for float16 and bfloat16) so
 * that a NaN's payload survives a copy; conversions to FP32 are exact and
 * the one rounding back is to nearest even. */
#include "config.h"

#include "nccl-kernels.h"
#include "numeric/numeric-dtype.h"

#define THREADS 256
#define MAX_BLOCKS 4096

static unsigned
blocks_for (size_t n)
{
  size_t b = (n + THREADS - 1) / THREADS;

  return b > MAX_BLOCKS ? MAX_BLOCKS : (unsigned) b;
}

/* The conversions of libmixprec/numeric/numeric-dtype.h, the library's own
 * (and the cuda device plugin's): the same bits as a reduction on the
 * CPU, NaN payloads included. */
__device__ static float
load_float (const void *buf, MixprecPluginDType dtype, size_t i)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return _mixprec_f16_to_f32 (((const uint16_t *) buf)[i]);
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return _mixprec_bf16_to_f32 (((const uint16_t *) buf)[i]);
    default:
      return ((const float *) buf)[i];
    }
}

__device__ static void
store_float (void *buf, MixprecPluginDType dtype, size_t i, float v)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      ((uint16_t *) buf)[i] = _mixprec_f32_to_f16_rne (v);
      break;
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      ((uint16_t *) buf)[i] = _mixprec_f32_to_bf16_rne (v);
      break;
    default:
      ((float *) buf)[i] = v;
      break;
    }
}

/* The raw bits of element i, widened exactly to key_dtype first. */
__device__ static uint32_t
load_bits_as (const void *buf, MixprecPluginDType dtype, MixprecPluginDType key_dtype, size_t i)
{
  if (key_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32)
    {
      if (dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32)
        return ((const uint32_t *) buf)[i];
      return __float_as_uint (load_float (buf, dtype, i));
    }
  return ((const uint16_t *) buf)[i];
}

/* Sign and magnitude to a two's-complement order: -x below -y when |x| >
 * |y|, -0 (key -1) just below +0 (key 0); a NaN drops its sign, so its
 * magnitude (above the infinity's) puts it above every number. */
__device__ static int32_t
bits_to_key (uint32_t bits, MixprecPluginDType key_dtype)
{
  uint32_t sign = key_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 0x80000000u : 0x8000u;
  uint32_t inf = key_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 0x7f800000u
                 : key_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT16 ? 0x7c00u : 0x7f80u;
  uint32_t mag = bits & (sign - 1);

  if (!(bits & sign) || mag > inf)
    return (int32_t) mag;
  return -(int32_t) mag - 1;
}

__device__ static uint32_t
key_to_bits (int32_t key, MixprecPluginDType key_dtype)
{
  uint32_t sign = key_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 0x80000000u : 0x8000u;

  if (key >= 0)
    return (uint32_t) key;
  return sign | (uint32_t) (-(key + 1));
}

__global__ static void
prepare_kernel (void *dst, MixprecPluginDType dst_dtype, const void *src,
                MixprecPluginDType src_dtype, size_t n, const void *first,
                size_t first_offset, size_t first_len)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    {
      float v = load_float (src, src_dtype, i);

      /* No "+ 0" outside the range: it would turn -0 into +0. */
      if (first != NULL && i >= first_offset && i - first_offset < first_len)
        v = load_float (first, dst_dtype, i - first_offset) + v;
      store_float (dst, dst_dtype, i, v);
    }
}

__global__ static void
fold_fp32_kernel (float *dst, const float *first, const void *terms, size_t term_stride,
                  const void *own, unsigned own_rank, unsigned n_terms,
                  MixprecPluginDType term_dtype, size_t n)
{
  size_t esize = term_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 4 : 2;

  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    {
      float acc = 0;

      for (unsigned r = 0; r < n_terms; r++)
        {
          const void *t = r == own_rank ? own
                          : (const void *) ((const char *) terms + r * term_stride * esize);
          float v = load_float (t, term_dtype, i);

          /* The fold starts from the first term, not from 0 + it (which
           * would turn -0 into +0). */
          if (r == 0)
            acc = first != NULL ? first[i] + v : v;
          else
            acc = acc + v;
        }
      dst[i] = acc;
    }
}

__global__ static void
max_encode_kernel (int32_t *keys, MixprecPluginDType key_dtype, const void *src,
                   MixprecPluginDType src_dtype, size_t n, const void *first,
                   size_t first_offset, size_t first_len)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    {
      int32_t k = bits_to_key (load_bits_as (src, src_dtype, key_dtype, i), key_dtype);

      if (first != NULL && i >= first_offset && i - first_offset < first_len)
        {
          int32_t f = bits_to_key (load_bits_as (first, key_dtype, key_dtype, i - first_offset),
                                   key_dtype);

          k = f > k ? f : k;
        }
      keys[i] = k;
    }
}

__global__ static void
max_decode_kernel (void *dst, MixprecPluginDType key_dtype, const int32_t *keys, size_t n)
{
  for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (size_t) gridDim.x * blockDim.x)
    {
      uint32_t bits = key_to_bits (keys[i], key_dtype);

      if (key_dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32)
        ((uint32_t *) dst)[i] = bits;
      else
        ((uint16_t *) dst)[i] = (uint16_t) bits;
    }
}

extern "C" cudaError_t
nccl_kernel_prepare (void *dst, MixprecPluginDType dst_dtype, const void *src,
                     MixprecPluginDType src_dtype, size_t n, const void *first,
                     size_t first_offset, size_t first_len, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  prepare_kernel<<<blocks_for (n), THREADS, 0, stream>>> (dst, dst_dtype, src, src_dtype, n,
                                                          first, first_offset, first_len);
  return cudaGetLastError ();
}

extern "C" cudaError_t
nccl_kernel_fold_fp32 (float *dst, const float *first, const void *terms, size_t term_stride,
                       const void *own, unsigned own_rank, unsigned n_terms,
                       MixprecPluginDType term_dtype, size_t n, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  fold_fp32_kernel<<<blocks_for (n), THREADS, 0, stream>>> (dst, first, terms, term_stride, own,
                                                            own_rank, n_terms, term_dtype, n);
  return cudaGetLastError ();
}

extern "C" cudaError_t
nccl_kernel_max_encode (int32_t *keys, MixprecPluginDType key_dtype, const void *src,
                        MixprecPluginDType src_dtype, size_t n, const void *first,
                        size_t first_offset, size_t first_len, cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  max_encode_kernel<<<blocks_for (n), THREADS, 0, stream>>> (keys, key_dtype, src, src_dtype, n,
                                                             first, first_offset, first_len);
  return cudaGetLastError ();
}

extern "C" cudaError_t
nccl_kernel_max_decode (void *dst, MixprecPluginDType key_dtype, const int32_t *keys, size_t n,
                        cudaStream_t stream)
{
  if (n == 0)
    return cudaSuccess;
  max_decode_kernel<<<blocks_for (n), THREADS, 0, stream>>> (dst, key_dtype, keys, n);
  return cudaGetLastError ();
}
