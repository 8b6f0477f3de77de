/* cuda-host-kernels.cu — the element bodies of the cuda plugin's kernels
 * (plugins/device-cuda/cuda-dtype.cuh, cuda-optim-kernel.cuh and
 * cuda-optim-quant.cuh, built on libmixprec/numeric/) compiled by nvcc with
 * the plugin's flags and run on the host, no GPU needed. Only the grid is
 * the test's: the optimizer's threads run one after the other, through the
 * plugin's own dispatch and per-thread code (the blocked kernel's phase by
 * phase, its barriers being the order of the loops). */
#include <stdlib.h>
#include <string.h>

#include "cuda-host-kernels.h"
#include "device-cuda/cuda-optim-quant.cuh"

/* ------------------------------------------------------------ convert */

template <int S, int D>
static void
host_convert (const void *src, void *dst, size_t n, bool sr, uint64_t seed, uint64_t first_index)
{
  const typename MpType<S>::T *s = (const typename MpType<S>::T *) src;
  typename MpType<D>::T *d = (typename MpType<D>::T *) dst;

  for (size_t i = 0; i < n; i++)
    if (sr)
      mp_convert1<S, D, true> (s, d, i, seed, first_index);
    else
      mp_convert1<S, D, false> (s, d, i, seed, first_index);
}

template <int S>
static void
host_convert_to (int dst_dtype, const void *src, void *dst, size_t n, bool sr, uint64_t seed,
                 uint64_t first_index)
{
  switch (dst_dtype)
    {
    case 0: host_convert<S, 0> (src, dst, n, sr, seed, first_index); break;
    case 1: host_convert<S, 1> (src, dst, n, sr, seed, first_index); break;
    case 2: host_convert<S, 2> (src, dst, n, sr, seed, first_index); break;
    case 3: host_convert<S, 3> (src, dst, n, sr, seed, first_index); break;
    default: host_convert<S, 4> (src, dst, n, sr, seed, first_index); break;
    }
}

extern "C" void
test_cuda_host_convert (const void *src, int src_dtype, void *dst, int dst_dtype, size_t n,
                        int stochastic, uint64_t seed, uint64_t first_index)
{
  bool sr = stochastic && !mp_dtype_is_exact_in (src_dtype, dst_dtype);

  /* As _mixprec_cuda_convert(): the same dtype is a copy. */
  if (src_dtype == dst_dtype)
    {
      memmove (dst, src, n * mp_dtype_size (src_dtype));
      return;
    }
  switch (src_dtype)
    {
    case 0: host_convert_to<0> (dst_dtype, src, dst, n, sr, seed, first_index); break;
    case 1: host_convert_to<1> (dst_dtype, src, dst, n, sr, seed, first_index); break;
    case 2: host_convert_to<2> (dst_dtype, src, dst, n, sr, seed, first_index); break;
    case 3: host_convert_to<3> (dst_dtype, src, dst, n, sr, seed, first_index); break;
    default: host_convert_to<4> (dst_dtype, src, dst, n, sr, seed, first_index); break;
    }
}

/* ------------------------------------------------------------ accumulate, scale */

template <int D, int S>
static void
host_accumulate (void *dst, const void *src, size_t n, bool first)
{
  for (size_t i = 0; i < n; i++)
    mp_accumulate1<D, S> ((typename MpType<D>::T *) dst, (const typename MpType<S>::T *) src, i, first);
}

template <int D>
static void
host_accumulate_from (int src_dtype, void *dst, const void *src, size_t n, bool first)
{
  switch (src_dtype)
    {
    case 0: host_accumulate<D, 0> (dst, src, n, first); break;
    case 1: host_accumulate<D, 1> (dst, src, n, first); break;
    case 2: host_accumulate<D, 2> (dst, src, n, first); break;
    case 3: host_accumulate<D, 3> (dst, src, n, first); break;
    default: host_accumulate<D, 4> (dst, src, n, first); break;
    }
}

extern "C" void
test_cuda_host_accumulate (void *dst, int dst_dtype, const void *src, int src_dtype, size_t n,
                           int first)
{
  /* As _mixprec_cuda_accumulate(): a first term of the same dtype is a
   * copy. */
  if (first && dst_dtype == src_dtype)
    {
      memmove (dst, src, n * mp_dtype_size (src_dtype));
      return;
    }
  switch (dst_dtype)
    {
    case 0: host_accumulate_from<0> (src_dtype, dst, src, n, first); break;
    case 1: host_accumulate_from<1> (src_dtype, dst, src, n, first); break;
    case 2: host_accumulate_from<2> (src_dtype, dst, src, n, first); break;
    case 3: host_accumulate_from<3> (src_dtype, dst, src, n, first); break;
    default: host_accumulate_from<4> (src_dtype, dst, src, n, first); break;
    }
}

template <int D>
static void
host_scale (void *buf, size_t n, float factor)
{
  for (size_t i = 0; i < n; i++)
    mp_scale1<D> ((typename MpType<D>::T *) buf, i, factor);
}

extern "C" void
test_cuda_host_scale (void *buf, int dtype, size_t n, float factor)
{
  switch (dtype)
    {
    case 0: host_scale<0> (buf, n, factor); break;
    case 1: host_scale<1> (buf, n, factor); break;
    case 2: host_scale<2> (buf, n, factor); break;
    case 3: host_scale<3> (buf, n, factor); break;
    default: host_scale<4> (buf, n, factor); break;
    }
}

/* ------------------------------------------------------------ optimizers */

template <class Op, int G, int W>
struct HostRun {
  static int
  run (const MixprecCudaOptimLaunch *L, size_t n_threads)
  {
    int head = optim_head<Op, G, W> (L);

    for (size_t t = 0; t < n_threads; t++)
      optim_thread<Op, G, W> (*L, head, t, n_threads);
    return head;
  }
};

/* The blocked kernel: each group's lanes through phase 1, the group's
 * maximum (in lane order: a maximum is the same in any order), then the
 * lanes through phase 2, as the barriers between them order it on the
 * device. */
template <class Op>
struct QHostRun {
  static int
  run (const MixprecCudaOptimLaunch *L, size_t n_threads)
  {
    QGeom q = q_geom (*L);
    size_t n_chunks = (L->n + q.chunk - 1) / q.chunk;
    float *stash = (float *) calloc ((size_t) MIXPREC_CUDA_OPTIM_MAX_STATES * q.chunk, sizeof (float));
    uint32_t (*amax)[MIXPREC_CUDA_OPTIM_MAX_STATES] =
      (uint32_t (*)[MIXPREC_CUDA_OPTIM_MAX_STATES]) calloc (q.lanes, sizeof *amax);

    QMaps m = { { NULL, NULL } };

    (void) n_threads;
    /* The host's copies of the maps, where the kernel has shared ones. */
    for (int k = 0; k < Op::n_states; k++)
      m.map[k] = q_slot_map (*L, k);
    for (size_t g = 0; g < n_chunks; g++)
      {
        uint32_t mx[MIXPREC_CUDA_OPTIM_MAX_STATES] = { 0, 0 };

        for (unsigned lane = 0; lane < q.lanes; lane++)
          q_phase1<Op> (*L, q, m, g, lane, stash, amax[lane]);
        if (!q.scaled)
          continue;
        for (unsigned lane = 0; lane < q.lanes; lane++)
          for (int k = 0; k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
            mx[k] = amax[lane][k] > mx[k] ? amax[lane][k] : mx[k];
        for (unsigned lane = 0; lane < q.lanes; lane++)
          q_phase2<Op> (*L, q, m, g, lane, stash, mx);
      }
    free (stash);
    free (amax);
    return -1;
  }
};

extern "C" int
test_cuda_host_optim_step (const MixprecCudaOptimLaunch *L, size_t n_threads)
{
  if (L->n == 0)
    return -1;
  if (q_needed (*L))
    return q_dispatch<QHostRun> (L, n_threads);
  return optim_dispatch<HostRun> (L, n_threads);
}

/* ------------------------------------------------------------ float8 casts */

#include "device-cuda/cuda-fp8.cuh"

extern "C" void
test_cuda_host_fp8_quantize (const float *src, uint8_t *dst, size_t n, int format, int saturate,
                             float scale, uint32_t *amax_bits)
{
  uint32_t m = 0;

  for (size_t i = 0; i < n; i++)
    {
      uint32_t a = mp_fp8_quantize1 (src, dst, i, (unsigned) format, saturate, scale);

      m = a > m ? a : m;
    }
  if (amax_bits != NULL && m > *amax_bits)
    *amax_bits = m;
}

extern "C" void
test_cuda_host_fp8_dequantize (const uint8_t *src, float *dst, size_t n, int format, float scale_inv)
{
  for (size_t i = 0; i < n; i++)
    mp_fp8_dequantize1 (src, dst, i, (unsigned) format, scale_inv);
}

extern "C" void
test_cuda_host_mx_quantize (const float *src, size_t n, int format, unsigned block_size, uint8_t *dst,
                            uint8_t *scales)
{
  size_t n_blocks = n / block_size + (n % block_size != 0);

  for (size_t b = 0; b < n_blocks; b++)
    mp_mx_block1 (src, n, (unsigned) format, block_size, b, dst, scales);
}

extern "C" void
test_cuda_host_mx_dequantize (const uint8_t *src, const uint8_t *scales, float *dst, size_t n, int format,
                              unsigned block_size)
{
  for (size_t i = 0; i < n; i++)
    mp_mx_dequantize1 (src, scales, dst, i, (unsigned) format, block_size);
}

/* ------------------------------------------------------------ 4-bit blocks */

#include "device-cuda/cuda-fp4.cuh"

extern "C" void
test_cuda_host_fp4_quantize (int recipe, int scale_mode, const float *src, size_t rows, size_t cols,
                             int stochastic, uint64_t seed, uint8_t *dst, uint8_t *scales,
                             float *tensor_scale)
{
  size_t n = rows * cols, units = mp_fp4_units ((unsigned) recipe, rows, cols);
  float ts = 1.0f;

  if (recipe != MIXPREC_CUDA_FP4_MXFP4)
    {
      uint32_t m = 0;

      /* The amax kernel's per-thread folds and atomicMax, in one order. */
      for (size_t i = 0; i < n; i++)
        m = mp_fp4_amax_fold (m, src[i]);
      ts = _mixprec_nvfp4_tensor_scale (mp_fp4_amax_final (m));
    }
  if (tensor_scale != NULL)
    *tensor_scale = ts;
  for (size_t u = 0; u < units; u++)
    {
      if (recipe == MIXPREC_CUDA_FP4_MXFP4)
        mp_mxfp4_block1 (src, u, (unsigned) scale_mode, stochastic, seed, dst, scales);
      else if (recipe == MIXPREC_CUDA_FP4_NVFP4_2D)
        mp_nvfp4_tile1 (src, rows, cols, u, ts, stochastic, seed, dst, scales);
      else
        mp_nvfp4_block1 (src, u, ts, stochastic, seed, dst, scales);
    }
}

extern "C" void
test_cuda_host_fp4_dequantize (int recipe, const uint8_t *src, const uint8_t *scales, float tensor_scale,
                               size_t n, float *dst)
{
  for (size_t i = 0; i < n; i++)
    mp_fp4_dequantize1 (src, scales, tensor_scale, recipe == MIXPREC_CUDA_FP4_MXFP4, i, dst);
}

extern "C" void
test_cuda_host_rht (const float *src, size_t n, uint16_t sign_mask, int inverse, float *dst)
{
  for (size_t g = 0; g < n / _MIXPREC_RHT_GROUP; g++)
    mp_rht_group1 (src, g, sign_mask, inverse, dst);
}
