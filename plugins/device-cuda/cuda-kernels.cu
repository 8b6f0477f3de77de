/* cuda-kernels.cu — the element-wise kernels of MixprecDeviceV1: convert,
 * accumulate, scale, sumsq_blocks and sum_ordered, each producing the bits
 * of the library's CPU kernel (mixprec-convert.c, mixprec-engine-kernels.c).
 *
 * Every value goes through fp32 as on the CPU: decode exactly, compute in
 * fp32 (or double for sums of squares), encode once, with the conversions
 * of libmixprec/numeric/numeric-dtype.h, the same source as the CPU's
 * scalar reference (the element bodies are in cuda-dtype.cuh). Built with
 * --fmad=false, so no multiply-add is contracted: each product and sum is
 * rounded on its own, as the CPU's scalar loops do.
 *
 * One difference is the hardware's, not ours: a NaN made by arithmetic
 * (Inf - Inf, or a NaN operand of a sum or product) is NVIDIA's canonical
 * 0x7FFFFFFF here and the operand's payload (or 0xFFC00000) on x86, so
 * such results are NaN on both sides with possibly different bits. NaNs
 * that are only converted keep exactly the CPU's bits. */
#include "cuda-launch.h"
#include "cuda-dtype.cuh"
#include "cuda-grid.cuh"

/* ------------------------------------------------------------ convert */

/* Element i: mp_convert1() of cuda-dtype.cuh. */
template <int S, int D, bool SR>
static __global__ void
__launch_bounds__ (MIXPREC_CUDA_THREADS)
convert_kernel (const typename MpType<S>::T *__restrict__ src,
                typename MpType<D>::T *__restrict__ dst,
                size_t n, uint64_t seed, uint64_t first_index)
{
  MIXPREC_CUDA_FOR (i, n)
    mp_convert1<S, D, SR> (src, dst, i, seed, first_index);
}

template <int S, int D>
static cudaError_t
launch_convert (const void *src, void *dst, size_t n, bool sr, uint64_t seed,
                uint64_t first_index, cudaStream_t stream, const char **call)
{
  typedef typename MpType<S>::T ST;
  typedef typename MpType<D>::T DT;
  unsigned blocks;
  cudaError_t e = mixprec_cuda_grid (n, &blocks, call);

  if (e != cudaSuccess)
    return e;
  if (sr)
    convert_kernel<S, D, true><<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>>
      ((const ST *) src, (DT *) dst, n, seed, first_index);
  else
    convert_kernel<S, D, false><<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>>
      ((const ST *) src, (DT *) dst, n, seed, first_index);
  return mixprec_cuda_launched ("convert kernel launch", call);
}

template <int S>
static cudaError_t
launch_convert_to (int dst_dtype, const void *src, void *dst, size_t n, bool sr,
                   uint64_t seed, uint64_t first_index, cudaStream_t stream, const char **call)
{
  switch (dst_dtype)
    {
    case 0: return launch_convert<S, 0> (src, dst, n, sr, seed, first_index, stream, call);
    case 1: return launch_convert<S, 1> (src, dst, n, sr, seed, first_index, stream, call);
    case 2: return launch_convert<S, 2> (src, dst, n, sr, seed, first_index, stream, call);
    case 3: return launch_convert<S, 3> (src, dst, n, sr, seed, first_index, stream, call);
    default: return launch_convert<S, 4> (src, dst, n, sr, seed, first_index, stream, call);
    }
}

extern "C" cudaError_t
_mixprec_cuda_convert (const void *src, int src_dtype, void *dst, int dst_dtype, size_t n,
                       int stochastic, uint64_t seed, uint64_t first_index,
                       cudaStream_t stream, const char **call)
{
  bool sr = stochastic && !mp_dtype_is_exact_in (src_dtype, dst_dtype);

  if (n == 0)
    return cudaSuccess;
  if (src_dtype == dst_dtype)
    {
      cudaError_t e;

      if (src == dst)
        return cudaSuccess;
      e = cudaMemcpyAsync (dst, src, n * mp_dtype_size (src_dtype), cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess)
        *call = "cudaMemcpyAsync (device to device)";
      return e;
    }
  switch (src_dtype)
    {
    case 0: return launch_convert_to<0> (dst_dtype, src, dst, n, sr, seed, first_index, stream, call);
    case 1: return launch_convert_to<1> (dst_dtype, src, dst, n, sr, seed, first_index, stream, call);
    case 2: return launch_convert_to<2> (dst_dtype, src, dst, n, sr, seed, first_index, stream, call);
    case 3: return launch_convert_to<3> (dst_dtype, src, dst, n, sr, seed, first_index, stream, call);
    default: return launch_convert_to<4> (dst_dtype, src, dst, n, sr, seed, first_index, stream, call);
    }
}

/* ------------------------------------------------------------ accumulate */

/* Element i: mp_accumulate1() of cuda-dtype.cuh. */
template <int D, int S>
static __global__ void
__launch_bounds__ (MIXPREC_CUDA_THREADS)
accumulate_kernel (typename MpType<D>::T *dst, const typename MpType<S>::T *src,
                   size_t n, bool first)
{
  MIXPREC_CUDA_FOR (i, n)
    mp_accumulate1<D, S> (dst, src, i, first);
}

template <int D, int S>
static cudaError_t
launch_accumulate (void *dst, const void *src, size_t n, bool first,
                   cudaStream_t stream, const char **call)
{
  unsigned blocks;
  cudaError_t e = mixprec_cuda_grid (n, &blocks, call);

  if (e != cudaSuccess)
    return e;
  accumulate_kernel<D, S><<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>>
    ((typename MpType<D>::T *) dst, (const typename MpType<S>::T *) src, n, first);
  return mixprec_cuda_launched ("accumulate kernel launch", call);
}

template <int D>
static cudaError_t
launch_accumulate_from (int src_dtype, void *dst, const void *src, size_t n, bool first,
                        cudaStream_t stream, const char **call)
{
  switch (src_dtype)
    {
    case 0: return launch_accumulate<D, 0> (dst, src, n, first, stream, call);
    case 1: return launch_accumulate<D, 1> (dst, src, n, first, stream, call);
    case 2: return launch_accumulate<D, 2> (dst, src, n, first, stream, call);
    case 3: return launch_accumulate<D, 3> (dst, src, n, first, stream, call);
    default: return launch_accumulate<D, 4> (dst, src, n, first, stream, call);
    }
}

extern "C" cudaError_t
_mixprec_cuda_accumulate (void *dst, int dst_dtype, const void *src, int src_dtype, size_t n,
                          int first, cudaStream_t stream, const char **call)
{
  if (n == 0)
    return cudaSuccess;
  /* As _mixprec_kernel_fold(): a first term of the same dtype is copied,
   * bits and all (a signalling NaN stays signalling). */
  if (first && dst_dtype == src_dtype)
    {
      cudaError_t e;

      if (src == dst)
        return cudaSuccess;
      e = cudaMemcpyAsync (dst, src, n * mp_dtype_size (src_dtype), cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess)
        *call = "cudaMemcpyAsync (device to device)";
      return e;
    }
  switch (dst_dtype)
    {
    case 0: return launch_accumulate_from<0> (src_dtype, dst, src, n, first, stream, call);
    case 1: return launch_accumulate_from<1> (src_dtype, dst, src, n, first, stream, call);
    case 2: return launch_accumulate_from<2> (src_dtype, dst, src, n, first, stream, call);
    case 3: return launch_accumulate_from<3> (src_dtype, dst, src, n, first, stream, call);
    default: return launch_accumulate_from<4> (src_dtype, dst, src, n, first, stream, call);
    }
}

/* ------------------------------------------------------------ scale */

template <int D>
static __global__ void
__launch_bounds__ (MIXPREC_CUDA_THREADS)
scale_kernel (typename MpType<D>::T *buf, size_t n, float factor)
{
  MIXPREC_CUDA_FOR (i, n)
    mp_scale1<D> (buf, i, factor);
}

template <int D>
static cudaError_t
launch_scale (void *buf, size_t n, float factor, cudaStream_t stream, const char **call)
{
  unsigned blocks;
  cudaError_t e = mixprec_cuda_grid (n, &blocks, call);

  if (e != cudaSuccess)
    return e;
  scale_kernel<D><<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>> ((typename MpType<D>::T *) buf, n, factor);
  return mixprec_cuda_launched ("scale kernel launch", call);
}

extern "C" cudaError_t
_mixprec_cuda_scale (void *buf, int dtype, size_t n, float factor, cudaStream_t stream,
                     const char **call)
{
  if (n == 0)
    return cudaSuccess;
  switch (dtype)
    {
    case 0: return launch_scale<0> (buf, n, factor, stream, call);
    case 1: return launch_scale<1> (buf, n, factor, stream, call);
    case 2: return launch_scale<2> (buf, n, factor, stream, call);
    case 3: return launch_scale<3> (buf, n, factor, stream, call);
    default: return launch_scale<4> (buf, n, factor, stream, call);
    }
}

/* ------------------------------------------------------------ sumsq_blocks
 *
 * _mixprec_kernel_sumsq on each block: eight double lanes, element k of the
 * block into lane k % 8 in order. The order of additions inside a lane is
 * sequential by definition, so the parallelism is across lanes and blocks:
 * eight consecutive threads of a warp own the eight lanes of one block
 * (reading eight consecutive elements at a time), a warp owns four blocks,
 * and the lanes are combined with shuffles in the CPU's order
 * ((0+1)+(2+3))+((4+5)+(6+7)). All ranges go in one launch; a group finds
 * its range by binary search over the table's first_block. */

template <int DT>
static __device__ double
lane_sumsq (const void *data, size_t start, size_t len, unsigned lane)
{
  const typename MpType<DT>::T *v = (const typename MpType<DT>::T *) data + start;
  double acc = 0.0;

  for (size_t k = lane; k < len; k += 8)
    {
      double x = mp_to_f32<DT> (v[k]);

      acc = acc + x * x;
    }
  return acc;
}

static __global__ void
__launch_bounds__ (MIXPREC_CUDA_THREADS)
sumsq_blocks_kernel (const MixprecCudaRange *__restrict__ table, unsigned n_ranges,
                     size_t n_blocks, size_t block_size, double *__restrict__ block_sums)
{
  const unsigned lane = threadIdx.x & 7;
  const size_t group = ((size_t) blockIdx.x * blockDim.x + threadIdx.x) >> 3;
  const size_t n_groups = ((size_t) gridDim.x * blockDim.x) >> 3;
  /* Every thread of a warp runs the same number of iterations, so the
   * full-mask shuffles below always have all 32 lanes. */
  const size_t warp_first = group & ~(size_t) 3;

  for (size_t base = warp_first; base < n_blocks; base += n_groups)
    {
      size_t o = base + (group - warp_first);
      double acc = 0.0;

      if (o < n_blocks)
        {
          unsigned lo = 0, hi = n_ranges - 1;
          const MixprecCudaRange *r;
          size_t start, len;

          /* The last range whose first block is at most o (ranges without
           * blocks share first_block with their successor: skip them). */
          while (lo < hi)
            {
              unsigned mid = lo + (hi - lo + 1) / 2;

              if (table[mid].first_block <= o)
                lo = mid;
              else
                hi = mid - 1;
            }
          r = &table[lo];
          start = (o - r->first_block) * block_size;
          len = r->n - start < block_size ? r->n - start : block_size;
          switch (r->dtype)
            {
            case 0: acc = lane_sumsq<0> (r->data, start, len, lane); break;
            case 1: acc = lane_sumsq<1> (r->data, start, len, lane); break;
            case 2: acc = lane_sumsq<2> (r->data, start, len, lane); break;
            case 3: acc = lane_sumsq<3> (r->data, start, len, lane); break;
            default: acc = lane_sumsq<4> (r->data, start, len, lane); break;
            }
        }
      /* Lane 0 of each group ends with ((0+1)+(2+3))+((4+5)+(6+7)). */
      acc = acc + __shfl_down_sync (0xFFFFFFFFu, acc, 1, 8);
      acc = acc + __shfl_down_sync (0xFFFFFFFFu, acc, 2, 8);
      acc = acc + __shfl_down_sync (0xFFFFFFFFu, acc, 4, 8);
      if (o < n_blocks && lane == 0)
        block_sums[o] = acc;
    }
}

extern "C" cudaError_t
_mixprec_cuda_sumsq_blocks (const MixprecCudaRange *table, unsigned n_ranges, size_t n_blocks,
                            size_t block_size, double *block_sums, cudaStream_t stream,
                            const char **call)
{
  unsigned blocks;
  cudaError_t e;

  if (n_blocks == 0)
    return cudaSuccess;
  if ((e = mixprec_cuda_grid (n_blocks * 8, &blocks, call)) != cudaSuccess)
    return e;
  sumsq_blocks_kernel<<<blocks, MIXPREC_CUDA_THREADS, 0, stream>>>
    (table, n_ranges, n_blocks, block_size, block_sums);
  return mixprec_cuda_launched ("sumsq_blocks kernel launch", call);
}

/* ------------------------------------------------------------ sum_ordered */

/* One thread: the order of a double sum is its value. The inputs are a
 * few thousand block sums, so this is microseconds. */
static __global__ void
sum_ordered_kernel (const double *values, size_t n, double *out)
{
  double s = 0.0;

  for (size_t i = 0; i < n; i++)
    s = s + values[i];
  *out = s;
}

extern "C" cudaError_t
_mixprec_cuda_sum_ordered (const double *values, size_t n, double *out, cudaStream_t stream,
                           const char **call)
{
  sum_ordered_kernel<<<1, 1, 0, stream>>> (values, n, out);
  return mixprec_cuda_launched ("sum_ordered kernel launch", call);
}
