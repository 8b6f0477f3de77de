/* cuda-optim-quant.cuh — the blocked optimizer kernel of cuda-optim.cu:
 * optimizer revision 3's state formats (bfloat16, scaled float16,
 * bfloat16 and float8_e4m3, int8 and int4 with dynamic maps) and master
 * formats (remainder, Kahan), in one pass over memory.
 *
 * A group of threads owns one scale block: each thread decodes its
 * elements' states with the block's old scale, runs the FP32 update (the
 * shared one of numeric/numeric-optim.h), writes the parameter and keeps
 * the new state values in shared memory; the group then reduces their
 * absolute maximum (a maximum is exact, so the order of the reduction
 * does not matter), derives the block's new scale and encodes. The
 * decoding, encoding, scale and master arithmetic are those of
 * numeric/numeric-quant.h, which the cpu plugins' scalar kernels compile
 * too, so both give the same bits.
 *
 * Groups are min (block, 512) / 2 threads: each thread takes pairs of
 * elements, so an int4 byte (two elements) has one writer. A CUDA block
 * of 256 threads holds 256 / group threads groups. Calls without a scaled
 * slot (bfloat16 state, remainder or Kahan masters over float32 state)
 * use the same code in chunks of 512 elements with nothing to reduce.
 *
 * The phases are __host__ __device__ functions of one thread, so
 * tests/cuda-host-kernels.cu runs them on the CPU, phase by phase for
 * every thread, in place of the __syncthreads() between them. */
#pragma once

#include "cuda-optim-kernel.cuh"
#include "numeric/numeric-quant.h"

#define Q_THREADS 256
/* Elements per group when no slot is scaled. */
#define Q_FREE_CHUNK 512

/* ------------------------------------------------------------ geometry */

struct QGeom {
  unsigned chunk;        /* elements per group: the block size, or Q_FREE_CHUNK */
  unsigned lanes;        /* threads per group: chunk / 2, at most Q_THREADS */
  unsigned groups;       /* groups per CUDA block */
  int scaled;            /* whether any slot keeps block scales */
};

MP_HD QGeom
q_geom (const MixprecCudaOptimLaunch &L)
{
  QGeom q;

  q.scaled = L.block_size != 0;
  q.chunk = q.scaled ? L.block_size : Q_FREE_CHUNK;
  q.lanes = q.chunk / 2 < Q_THREADS ? q.chunk / 2 : Q_THREADS;
  q.groups = Q_THREADS / q.lanes;
  return q;
}

/* Floats of shared memory a CUDA block needs: the new values of each
 * scaled slot of its groups. */
MP_HD size_t
q_stash_floats (const QGeom &q)
{
  return q.scaled ? (size_t) MIXPREC_CUDA_OPTIM_MAX_STATES * q.groups * q.chunk : 0;
}

MP_HD bool
q_is_scaled (int format)
{
  return _mixprec_state_is_blocked ((unsigned) format);
}

/* ------------------------------------------------------------ state slots */

/* The quantization maps of the int slots, where the threads read them.
 * numeric-quant.h keeps them in __constant__ memory, which serves a warp
 * at full speed only when every thread reads the same address; a binary
 * search reads a different one per thread, so the kernel copies the maps
 * it needs into shared memory first and codes with them, through the
 * same numeric-quant.h functions as _mixprec_state_encode1() and
 * _mixprec_state_decode1(). NULL for the other formats. */
struct QMaps {
  const float *map[MIXPREC_CUDA_OPTIM_MAX_STATES];
};

/* Slot k's map in numeric-quant.h (constant memory on the device). */
MP_HD const float *
q_slot_map (const MixprecCudaOptimLaunch &L, int k)
{
  int sgn = (L.state_signed >> k) & 1;

  switch ((unsigned) L.state_formats[k])
    {
    case _MIXPREC_QFMT_INT8_DYNAMIC: return _mixprec_qmap (8, sgn);
    case _MIXPREC_QFMT_INT4_DYNAMIC: return _mixprec_qmap (4, sgn);
    default: return NULL;
    }
}

MP_HD unsigned
q_map_size (unsigned format)
{
  return format == _MIXPREC_QFMT_INT8_DYNAMIC ? 256 : format == _MIXPREC_QFMT_INT4_DYNAMIC ? 16 : 0;
}

/* _mixprec_state_decode1() with the int formats' map at @map. */
MP_HD float
q_decode (unsigned f, int sgn, uint32_t code, float scale, const float *map)
{
  if (map != NULL)
    return _mixprec_num_mul (map[code], scale);
  return _mixprec_state_decode1 (f, sgn, code, scale);
}

/* _mixprec_state_encode1() with the int formats' map at @map. */
MP_HD uint32_t
q_encode (unsigned f, int sgn, float x, float scale, const float *map)
{
  if (map == NULL)
    return _mixprec_state_encode1 (f, sgn, x, scale);
  if (f == _MIXPREC_QFMT_INT8_DYNAMIC)
    return _mixprec_quant_code8 (_mixprec_num_div (x, scale), map);
  return _mixprec_quant_code4 (_mixprec_num_div (x, scale), map);
}

/* Slot k of element i (of the call) as FP32; @scale is its block's. */
MP_HD float
q_state_load (const MixprecCudaOptimLaunch &L, const QMaps &m, int k, size_t i, float scale)
{
  unsigned f = (unsigned) L.state_formats[k];

  if (f == _MIXPREC_QFMT_FLOAT32)
    return ((const float *) L.states[k])[i];
  return q_decode (f, (L.state_signed >> k) & 1, _mixprec_state_load_code (f, L.states[k], i), scale,
                   m.map[k]);
}

/* An unscaled slot written as revision 2 writes it: float32 as is,
 * bfloat16 rounded to nearest even or stochastically with the bits of
 * (state_seed + k, first_index + i). */
MP_HD void
q_state_store_unscaled (const MixprecCudaOptimLaunch &L, int k, size_t i, float v)
{
  if (L.state_formats[k] == _MIXPREC_QFMT_FLOAT32)
    ((float *) L.states[k])[i] = v;
  else
    ((uint16_t *) L.states[k])[i] =
      L.state_stochastic ? _mixprec_f32_to_bf16_sr (v, _mixprec_sr_bits16 (L.state_seed + k, L.first_index + i))
                         : _mixprec_f32_to_bf16_rne (v);
}

/* ------------------------------------------------------------ the parameter */

MP_HD float
q_grad (const MixprecCudaOptimLaunch &L, size_t i)
{
  switch (L.grad_dtype)
    {
    case 2:   /* bfloat16 */ return _mixprec_bf16_to_f32 (((const uint16_t *) L.grad)[i]) * L.grad_factor;
    case 1:   /* float16 */ return _mixprec_f16_to_f32 (((const uint16_t *) L.grad)[i]) * L.grad_factor;
    default: return ((const float *) L.grad)[i] * L.grad_factor;
    }
}

MP_HD float
q_param_load (const MixprecCudaOptimLaunch &L, size_t i)
{
  switch (L.master_format)
    {
    case _MIXPREC_QMASTER_REMAINDER:
      return _mixprec_remainder_join (((const uint16_t *) L.working)[i], ((const int16_t *) L.master_extra)[i]);
    case _MIXPREC_QMASTER_KAHAN:
      return _mixprec_bf16_to_f32 (((const uint16_t *) L.working)[i]);
    default:
      if (L.master != NULL)
        return L.master[i];
      switch (L.working_dtype)
        {
        case 2:   /* bfloat16 */ return _mixprec_bf16_to_f32 (((const uint16_t *) L.working)[i]);
        case 1:   /* float16 */ return _mixprec_f16_to_f32 (((const uint16_t *) L.working)[i]);
        default: return ((const float *) L.working)[i];
        }
    }
}

/* Writes the new parameter @p of element i (Kahan: the update is p minus
 * the working copy still in memory). */
MP_HD void
q_param_store (const MixprecCudaOptimLaunch &L, size_t i, float p)
{
  uint64_t index = L.first_index + i;

  switch (L.master_format)
    {
    case _MIXPREC_QMASTER_REMAINDER:
      _mixprec_remainder_split (p, (uint16_t *) L.working + i, (int16_t *) L.master_extra + i);
      return;
    case _MIXPREC_QMASTER_KAHAN:
      _mixprec_kahan_step (p, (uint16_t *) L.working + i, (uint16_t *) L.master_extra + i);
      return;
    default:
      break;
    }
  if (L.master != NULL)
    L.master[i] = p;
  if (L.working == NULL)
    return;
  switch (L.working_dtype)
    {
    case 2:   /* bfloat16 */
      ((uint16_t *) L.working)[i] = L.stochastic ? _mixprec_f32_to_bf16_sr (p, _mixprec_sr_bits16 (L.seed, index))
                                                 : _mixprec_f32_to_bf16_rne (p);
      break;
    case 1:   /* float16 */
      ((uint16_t *) L.working)[i] = L.stochastic ? _mixprec_f32_to_f16_sr (p, _mixprec_sr_bits (L.seed, index))
                                                 : _mixprec_f32_to_f16_rne (p);
      break;
    default:
      ((float *) L.working)[i] = p;
      break;
    }
}

/* ------------------------------------------------------------ the phases
 *
 * Thread @lane of the group that owns chunk @g (elements g * chunk ..).
 * @stash: the group's shared memory, MIXPREC_CUDA_OPTIM_MAX_STATES rows
 * of chunk floats (unused when no slot is scaled). Absolute maxima travel
 * as fp32 bits (numeric-quant.h's _mixprec_absmax_bits: a NaN wins). */

template <class Op>
MP_HD void
q_element (const MixprecCudaOptimLaunch &L, const QGeom &q, const QMaps &m, size_t g, unsigned e,
           const float *scales, float *stash, uint32_t *amax)
{
  size_t i = g * q.chunk + e;
  float s[Op::n_states];
  float p;

  for (int k = 0; k < Op::n_states; k++)
    s[k] = Op::reads ? q_state_load (L, m, k, i, scales[k]) : 0.0f;
  p = Op::update (L.consts, q_param_load (L, i), q_grad (L, i), s);
  q_param_store (L, i, p);
  if constexpr (Op::writes)
    for (int k = 0; k < Op::n_states; k++)
      if (q_is_scaled (L.state_formats[k]))
        {
          stash[k * q.chunk + e] = s[k];
          amax[k] = _mixprec_absmax_bits (amax[k], s[k]);
        }
      else
        q_state_store_unscaled (L, k, i, s[k]);
}

/* The elements of chunk @g: the whole block, or the call's short end. */
MP_HD unsigned
q_chunk_len (const MixprecCudaOptimLaunch &L, const QGeom &q, size_t g)
{
  size_t first = g * q.chunk;

  return L.n - first < q.chunk ? (unsigned) (L.n - first) : q.chunk;
}

/* Decode, update, write the parameter and the unscaled slots, keep the
 * scaled ones in @stash; this thread's absolute maximum of each slot in
 * @amax. */
template <class Op>
MP_HD void
q_phase1 (const MixprecCudaOptimLaunch &L, const QGeom &q, const QMaps &m, size_t g, unsigned lane,
          float *stash, uint32_t *amax)
{
  float scales[MIXPREC_CUDA_OPTIM_MAX_STATES];
  unsigned len = q_chunk_len (L, q, g);

  for (int k = 0; k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
    {
      amax[k] = 0;
      scales[k] = k < Op::n_states && L.state_scales[k] != NULL ? L.state_scales[k][g] : 1.0f;
    }
  for (unsigned pair = lane; 2 * pair < len; pair += q.lanes)
    {
      q_element<Op> (L, q, m, g, 2 * pair, scales, stash, amax);
      if (2 * pair + 1 < len)
        q_element<Op> (L, q, m, g, 2 * pair + 1, scales, stash, amax);
    }
}

/* With the group's absolute maxima: the block's new scales (written by
 * lane 0) and the codes. A thread writes whole pairs, so an int4 byte has
 * one writer; a lone last element of an odd call changes only its own
 * nibble, as numeric-quant.h stores it. */
template <class Op>
MP_HD void
q_phase2 (const MixprecCudaOptimLaunch &L, const QGeom &q, const QMaps &m, size_t g, unsigned lane,
          const float *stash, const uint32_t *amax)
{
  size_t first = g * q.chunk;
  unsigned len = q_chunk_len (L, q, g);

  for (int k = 0; k < (Op::writes ? Op::n_states : 0); k++)
    {
      unsigned f = (unsigned) L.state_formats[k];
      int sgn = (L.state_signed >> k) & 1;
      const float *v = stash + k * q.chunk;
      float scale;

      if (!q_is_scaled ((int) f))
        continue;
      scale = _mixprec_state_block_scale (f, amax[k]);
      if (lane == 0)
        L.state_scales[k][g] = scale;
      for (unsigned pair = lane; 2 * pair < len; pair += q.lanes)
        {
          unsigned e = 2 * pair;
          uint32_t lo = q_encode (f, sgn, v[e], scale, m.map[k]);

          if (e + 1 >= len)
            _mixprec_state_store_code (f, L.states[k], first + e, lo);
          else if (f == _MIXPREC_QFMT_INT4_DYNAMIC)
            ((uint8_t *) L.states[k])[(first + e) / 2] =
              (uint8_t) (lo | q_encode (f, sgn, v[e + 1], scale, m.map[k]) << 4);
          else
            {
              _mixprec_state_store_code (f, L.states[k], first + e, lo);
              _mixprec_state_store_code (f, L.states[k], first + e + 1,
                                         q_encode (f, sgn, v[e + 1], scale, m.map[k]));
            }
        }
    }
}

/* ------------------------------------------------------------ the kernel */

template <class Op>
static __global__ void
__launch_bounds__ (Q_THREADS)
q_kernel (const MixprecCudaOptimLaunch L, QGeom q, size_t n_chunks)
{
  extern __shared__ float q_stash[];
  __shared__ uint32_t q_red[MIXPREC_CUDA_OPTIM_MAX_STATES][Q_THREADS];
  __shared__ float q_map_mem[MIXPREC_CUDA_OPTIM_MAX_STATES][256];
  unsigned group = threadIdx.x / q.lanes, lane = threadIdx.x % q.lanes;
  size_t g = (size_t) blockIdx.x * q.groups + group;
  float *stash = q_stash + (size_t) group * MIXPREC_CUDA_OPTIM_MAX_STATES * q.chunk;
  uint32_t amax[MIXPREC_CUDA_OPTIM_MAX_STATES] = { 0, 0 };
  QMaps m = { { NULL, NULL } };
  bool any_map = false;

  for (int k = 0; k < Op::n_states; k++)
    {
      const float *map = q_slot_map (L, k);
      unsigned size = q_map_size ((unsigned) L.state_formats[k]);

      if (map == NULL)
        continue;
      for (unsigned j = threadIdx.x; j < size; j += blockDim.x)
        q_map_mem[k][j] = map[j];
      m.map[k] = q_map_mem[k];
      any_map = true;
    }
  if (any_map)           /* the same for every thread of the block */
    __syncthreads ();
  if (g < n_chunks)
    q_phase1<Op> (L, q, m, g, lane, stash, amax);
  if (!q.scaled)
    return;
  /* The group's maxima: a tree over its lanes, every thread of the CUDA
   * block at each barrier (the groups are equal, so the loop is too). */
  for (int k = 0; k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
    q_red[k][threadIdx.x] = amax[k];
  __syncthreads ();
  for (unsigned s = q.lanes / 2; s > 0; s /= 2)
    {
      if (lane < s)
        for (int k = 0; k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
          q_red[k][threadIdx.x] = max (q_red[k][threadIdx.x], q_red[k][threadIdx.x + s]);
      __syncthreads ();
    }
  for (int k = 0; k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
    amax[k] = q_red[k][group * q.lanes];
  if (g < n_chunks)
    q_phase2<Op> (L, q, m, g, lane, stash, amax);
}

/* Run<Op>::run (L, a...) for the update of @L. */
template <template <class> class Run, class... A>
static inline auto
q_dispatch (const MixprecCudaOptimLaunch *L, A... a)
{
  switch (L->kind)
    {
    case MIXPREC_CUDA_OPTIM_ADAMW: return Run<AdamW>::run (L, a...);
    case MIXPREC_CUDA_OPTIM_SGD_PLAIN: return Run<Sgd<SGD_PLAIN>>::run (L, a...);
    case MIXPREC_CUDA_OPTIM_SGD_FIRST: return Run<Sgd<SGD_FIRST>>::run (L, a...);
    case MIXPREC_CUDA_OPTIM_SGD_MOMENTUM: return Run<Sgd<SGD_MOMENTUM>>::run (L, a...);
    default: return Run<Lion>::run (L, a...);
    }
}

/* Whether @L needs the blocked kernel: a slot not in float32, or a
 * master not in float32. */
MP_HD bool
q_needed (const MixprecCudaOptimLaunch &L)
{
  if ((unsigned) L.master_format != _MIXPREC_QMASTER_FLOAT32)
    return true;
  for (int k = 0; k < MIXPREC_CUDA_OPTIM_MAX_STATES; k++)
    if (L.states[k] != NULL && (unsigned) L.state_formats[k] != _MIXPREC_QFMT_FLOAT32)
      return true;
  return false;
}
