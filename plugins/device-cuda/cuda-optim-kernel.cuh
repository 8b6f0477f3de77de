/* cuda-optim-kernel.cuh — the fused optimizer kernel of cuda-optim.cu:
 * the updates (those of libmixprec/numeric/numeric-optim.h, which the cpu
 * plugins' scalar kernels compile too), the per-element plumbing and the
 * kernel itself, apart from the launch code. Everything but the kernel is
 * __host__ __device__: tests/test-device-cuda (through
 * tests/cuda-host-kernels.cu) runs every thread's optim_thread() on the
 * CPU, without a GPU, against the cpu optimizers bit for bit. See
 * cuda-optim.cu for the contract. */
#pragma once

#include "cuda-launch.h"
#include "cuda-dtype.cuh"
#include "cuda-grid.cuh"

#include "numeric/numeric-optim.h"

static_assert (ADAMW_N_CONSTS <= MIXPREC_CUDA_OPTIM_MAX_CONSTS, "adamw constants");
static_assert (SGD_N_CONSTS <= MIXPREC_CUDA_OPTIM_MAX_CONSTS, "sgd constants");
static_assert (LION_N_CONSTS <= MIXPREC_CUDA_OPTIM_MAX_CONSTS, "lion constants");

#define VEC 4

/* ------------------------------------------------------------ updates
 * Each: n_states, whether the states are read and written, and update(),
 * the shared update with the states in registers. */

struct AdamW {
  static constexpr int n_states = 2;
  static constexpr bool reads = true, writes = true;

  MP_HD float
  update (const float *c, float p, float g, float *s)
  {
    return _mixprec_adamw_update (c, p, g, &s[0], &s[1]);
  }
};

/* torch.optim.SGD; MODE (an SgdMode) says what the buffer does this
 * call: untouched (plain), written (first step), updated. */
template <int MODE>
struct Sgd {
  static constexpr int n_states = 1;
  static constexpr bool reads = MODE == SGD_MOMENTUM, writes = MODE != SGD_PLAIN;

  MP_HD float
  update (const float *c, float p, float g, float *s)
  {
    return _mixprec_sgd_update (c, p, g, &s[0], (SgdMode) MODE);
  }
};

struct Lion {
  static constexpr int n_states = 1;
  static constexpr bool reads = true, writes = true;

  MP_HD float
  update (const float *c, float p, float g, float *s)
  {
    return _mixprec_lion_update (c, p, g, &s[0]);
  }
};

/* ------------------------------------------------------------ loads and stores
 * DT is the dtype of the array: 0 float32, 1 float16, 2 bfloat16. */

template <int DT>
MP_HD float
load1 (const void *base, size_t i)
{
  return mp_to_f32<DT> (((const typename MpType<DT>::T *) base)[i]);
}

/* Four elements from i (a multiple of four; the array is 16-byte aligned
 * for fp32, 8-byte for 16-bit types). */
template <int DT>
MP_HD void
load4 (const void *base, size_t i, float out[VEC])
{
  if constexpr (DT == 0)
    {
      float4 v = *(const float4 *) ((const float *) base + i);

      out[0] = v.x; out[1] = v.y; out[2] = v.z; out[3] = v.w;
    }
  else
    {
      /* Little-endian: the low half of each word is the lower index. */
      uint2 v = *(const uint2 *) ((const uint16_t *) base + i);

      out[0] = mp_to_f32<DT> ((uint16_t) (v.x & 0xFFFF));
      out[1] = mp_to_f32<DT> ((uint16_t) (v.x >> 16));
      out[2] = mp_to_f32<DT> ((uint16_t) (v.y & 0xFFFF));
      out[3] = mp_to_f32<DT> ((uint16_t) (v.y >> 16));
    }
}

/* The word of the random stream that element @index draws from: its own
 * for fp16, half of word index / 2 for bf16 (W == 2). The key depends on
 * the high half of the word index. */
template <int W>
MP_HD uint32_t
sr_key_hi (uint64_t index)
{
  return (uint32_t) ((W == 2 ? index >> 1 : index) >> 32);
}

/* The working copy of p for element index (first_index + i). */
template <int W>
MP_HD typename MpType<W>::T
round_working (const MixprecCudaOptimLaunch &L, float p, uint64_t key, uint64_t index)
{
  if (W == 0 || !L.stochastic)
    return mp_from_f32_rne<W> (p);
  if constexpr (W == 2)
    return mp_from_f32_sr<W> (p, _mixprec_sr_half_keyed (key, index));
  else
    return mp_from_f32_sr<W> (p, _mixprec_sr_bits_keyed (key, (uint32_t) index));
}

template <int W>
MP_HD void
store1 (const MixprecCudaOptimLaunch &L, size_t i, float p)
{
  if (L.master != NULL)
    L.master[i] = p;
  if constexpr (W >= 0)
    {
      uint64_t index = L.first_index + i;
      uint64_t key = W != 0 && L.stochastic ? _mixprec_sr_key (L.seed, sr_key_hi<W> (index)) : 0;

      ((typename MpType<W>::T *) L.working)[i] = round_working<W> (L, p, key, index);
    }
}

template <int W>
MP_HD void
store4 (const MixprecCudaOptimLaunch &L, size_t i, const float p[VEC])
{
  if (L.master != NULL)
    *(float4 *) (L.master + i) = make_float4 (p[0], p[1], p[2], p[3]);
  if constexpr (W == 0)
    *(float4 *) ((float *) L.working + i) = make_float4 (p[0], p[1], p[2], p[3]);
  else if constexpr (W > 0)
    {
      uint64_t index = L.first_index + i;
      uint32_t hi = sr_key_hi<W> (index);
      uint64_t key = L.stochastic ? _mixprec_sr_key (L.seed, hi) : 0;
      uint16_t h[VEC];

      for (int j = 0; j < VEC; j++)
        {
          /* The key changes where the word index crosses a multiple of
           * 2^32. */
          if (L.stochastic && sr_key_hi<W> (index + j) != hi)
            key = _mixprec_sr_key (L.seed, hi = sr_key_hi<W> (index + j));
          h[j] = round_working<W> (L, p[j], key, index + j);
        }
      *(uint2 *) ((uint16_t *) L.working + i) =
        make_uint2 ((uint32_t) h[0] | (uint32_t) h[1] << 16, (uint32_t) h[2] | (uint32_t) h[3] << 16);
    }
}

/* ------------------------------------------------------------ the kernel */

template <class Op, int G, int W>
MP_HD void
step1 (const MixprecCudaOptimLaunch &L, size_t i)
{
  float s[Op::n_states];
  float p, g;

  p = L.master != NULL ? L.master[i] : load1<W < 0 ? 0 : W> (L.working, i);
  g = load1<G> (L.grad, i) * L.grad_factor;
  for (int k = 0; k < Op::n_states; k++)
    s[k] = Op::reads ? ((const float *) L.states[k])[i] : 0.0f;
  p = Op::update (L.consts, p, g, s);
  if (Op::writes)
    for (int k = 0; k < Op::n_states; k++)
      ((float *) L.states[k])[i] = s[k];
  store1<W> (L, i, p);
}

template <class Op, int G, int W>
MP_HD void
step4 (const MixprecCudaOptimLaunch &L, size_t i)
{
  float s[Op::n_states][VEC];
  float p[VEC], g[VEC];

  if (L.master != NULL)
    load4<0> (L.master, i, p);
  else
    load4<W < 0 ? 0 : W> (L.working, i, p);
  load4<G> (L.grad, i, g);
  for (int k = 0; k < Op::n_states; k++)
    {
      if (Op::reads)
        load4<0> (L.states[k], i, s[k]);
      else
        for (int j = 0; j < VEC; j++)
          s[k][j] = 0.0f;
    }
  for (int j = 0; j < VEC; j++)
    {
      float sj[Op::n_states];

      for (int k = 0; k < Op::n_states; k++)
        sj[k] = s[k][j];
      p[j] = Op::update (L.consts, p[j], g[j] * L.grad_factor, sj);
      for (int k = 0; k < Op::n_states; k++)
        s[k][j] = sj[k];
    }
  if (Op::writes)
    for (int k = 0; k < Op::n_states; k++)
      *(float4 *) ((float *) L.states[k] + i) = make_float4 (s[k][0], s[k][1], s[k][2], s[k][3]);
  store4<W> (L, i, p);
}

/* Where groups of four elements start aligned for 128-bit loads of fp32
 * arrays and 64-bit loads of 16-bit ones (four elements either way) in
 * every array at once: the number of elements to do one at a time first,
 * or -1 when the arrays disagree (then the whole range goes one at a
 * time). A shard of a larger buffer usually starts at the same element
 * offset in all of them, so it still gets the vector path. */
static inline int
vector_head (const void *const *arrays, const size_t *sizes, int n_arrays, size_t n)
{
  int misalignment = -1;

  for (int k = 0; k < n_arrays; k++)
    {
      uintptr_t p = (uintptr_t) arrays[k];
      int m;

      if (arrays[k] == NULL)
        continue;
      if (p % sizes[k] != 0)
        return -1;
      m = (int) (p % (VEC * sizes[k]) / sizes[k]);
      if (misalignment >= 0 && m != misalignment)
        return -1;
      misalignment = m;
    }
  if (misalignment < 0 || (size_t) ((VEC - misalignment) % VEC) > n)
    return -1;
  return (VEC - misalignment) % VEC;
}

/* vector_head() of the arrays of @L as the kernel <Op, G, W> reads them. */
template <class Op, int G, int W>
static inline int
optim_head (const MixprecCudaOptimLaunch *L)
{
  const void *arrays[3 + MIXPREC_CUDA_OPTIM_MAX_STATES] = { L->master, L->grad, W >= 0 ? L->working : NULL };
  size_t sizes[3 + MIXPREC_CUDA_OPTIM_MAX_STATES] = { 4, G == 0 ? 4u : 2u, W == 0 ? 4u : 2u };

  for (int k = 0; k < Op::n_states; k++)
    {
      arrays[3 + k] = L->states[k];
      sizes[3 + k] = 4;
    }
  return vector_head (arrays, sizes, 3 + Op::n_states, L->n);
}

/* What thread @t of @n_threads does. @head < 0: one element at a time.
 * Otherwise elements head, head + 4, ... start groups aligned in every
 * array, which threads take four at a time; the first @head elements and
 * the last (n - head) % 4 are one per thread among the first threads of
 * the grid (which has at least n / 4 + 4 threads). */
template <class Op, int G, int W>
MP_HD void
optim_thread (const MixprecCudaOptimLaunch &L, int head, size_t t, size_t n_threads)
{
  if (head >= 0)
    {
      size_t n4 = (L.n - head) / VEC;

      for (size_t v = t; v < n4; v += n_threads)
        step4<Op, G, W> (L, head + v * VEC);
      if (t < (size_t) head)
        step1<Op, G, W> (L, t);
      else if (head + n4 * VEC + (t - head) < L.n)
        step1<Op, G, W> (L, head + n4 * VEC + (t - head));
    }
  else
    {
      for (size_t i = t; i < L.n; i += n_threads)
        step1<Op, G, W> (L, i);
    }
}

template <class Op, int G, int W>
static __global__ void
__launch_bounds__ (MIXPREC_CUDA_THREADS)
optim_kernel (const MixprecCudaOptimLaunch L, int head)
{
  optim_thread<Op, G, W> (L, head, (size_t) blockIdx.x * blockDim.x + threadIdx.x,
                          (size_t) gridDim.x * blockDim.x);
}

/* ------------------------------------------------------------ dispatch
 * Run<Op, G, W>::run (L, a...) for the update, gradient dtype and working
 * dtype (-1: none) of @L: the kernel launch of cuda-optim.cu, or the
 * host-side run of tests/cuda-host-kernels.cu. */

template <template <class, int, int> class Run, class Op, int G, class... A>
static inline auto
optim_dispatch_w (const MixprecCudaOptimLaunch *L, A... a)
{
  switch (L->working_dtype)
    {
    case 0: return Run<Op, G, 0>::run (L, a...);
    case 1: return Run<Op, G, 1>::run (L, a...);
    case 2: return Run<Op, G, 2>::run (L, a...);
    default: return Run<Op, G, -1>::run (L, a...);
    }
}

template <template <class, int, int> class Run, class Op, class... A>
static inline auto
optim_dispatch_g (const MixprecCudaOptimLaunch *L, A... a)
{
  switch (L->grad_dtype)
    {
    case 1: return optim_dispatch_w<Run, Op, 1> (L, a...);
    case 2: return optim_dispatch_w<Run, Op, 2> (L, a...);
    default: return optim_dispatch_w<Run, Op, 0> (L, a...);
    }
}

template <template <class, int, int> class Run, class... A>
static inline auto
optim_dispatch (const MixprecCudaOptimLaunch *L, A... a)
{
  switch (L->kind)
    {
    case MIXPREC_CUDA_OPTIM_ADAMW: return optim_dispatch_g<Run, AdamW> (L, a...);
    case MIXPREC_CUDA_OPTIM_SGD_PLAIN: return optim_dispatch_g<Run, Sgd<SGD_PLAIN>> (L, a...);
    case MIXPREC_CUDA_OPTIM_SGD_FIRST: return optim_dispatch_g<Run, Sgd<SGD_FIRST>> (L, a...);
    case MIXPREC_CUDA_OPTIM_SGD_MOMENTUM: return optim_dispatch_g<Run, Sgd<SGD_MOMENTUM>> (L, a...);
    default: return optim_dispatch_g<Run, Lion> (L, a...);
    }
}
