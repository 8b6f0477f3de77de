/* cuda-dtype.cuh — the number formats of the cuda plugin's kernels: the
 * conversions and random bits of libmixprec/numeric/numeric-dtype.h (the
 * very functions of the library's scalar reference, compiled here by nvcc
 * for host and device: see numeric-base.h) picked by dtype at compile time,
 * and the per-element bodies of the convert, accumulate and scale kernels.
 * Everything is __host__ __device__, so tests/test-device-cuda (through
 * tests/cuda-host-kernels.cu) runs these same lines on the CPU of a
 * machine without a GPU and compares them with the library bit for bit. */
#pragma once

#include <stdint.h>
#include <stddef.h>

#include "numeric/numeric-dtype.h"

#define MP_HD static __host__ __device__ __forceinline__

/* ------------------------------------------------------------ by dtype
 * Element types as template parameters: DT is a MixprecPluginDType. */

template <int DT> struct MpType;
template <> struct MpType<0> { typedef float T; };
template <> struct MpType<1> { typedef uint16_t T; };
template <> struct MpType<2> { typedef uint16_t T; };
template <> struct MpType<3> { typedef uint8_t T; };
template <> struct MpType<4> { typedef uint8_t T; };

template <int DT>
MP_HD float
mp_to_f32 (typename MpType<DT>::T v)
{
  if constexpr (DT == 0)
    return v;
  else if constexpr (DT == 1)
    return _mixprec_f16_to_f32 (v);
  else if constexpr (DT == 2)
    return _mixprec_bf16_to_f32 (v);
  else if constexpr (DT == 3)
    return _mixprec_e4m3_to_f32 (v);
  else
    return _mixprec_e5m2_to_f32 (v);
}

template <int DT>
MP_HD typename MpType<DT>::T
mp_from_f32_rne (float f)
{
  if constexpr (DT == 0)
    return f;
  else if constexpr (DT == 1)
    return _mixprec_f32_to_f16_rne (f);
  else if constexpr (DT == 2)
    return _mixprec_f32_to_bf16_rne (f);
  else if constexpr (DT == 3)
    return _mixprec_f32_to_e4m3_rne (f);
  else
    return _mixprec_f32_to_e5m2_rne (f);
}

template <int DT>
MP_HD typename MpType<DT>::T
mp_from_f32_sr (float f, uint32_t r)
{
  if constexpr (DT == 0)
    return f;
  else if constexpr (DT == 1)
    return _mixprec_f32_to_f16_sr (f, r);
  else if constexpr (DT == 2)
    return _mixprec_f32_to_bf16_sr (f, r);
  else if constexpr (DT == 3)
    return _mixprec_f32_to_e4m3_sr (f, r);
  else
    return _mixprec_f32_to_e5m2_sr (f, r);
}

/* Bytes per element of dtype @dt. */
static inline size_t
mp_dtype_size (int dt)
{
  return dt == 0 ? 4 : dt <= 2 ? 2 : 1;
}

/* _mixprec_dtype_is_exact_in(): every value of @src fits @dst, so the
 * rounding mode cannot matter and the CPU skips the hashing; so do the
 * kernels (the bits are the same either way, the time is not). */
static inline bool
mp_dtype_is_exact_in (int src, int dst)
{
  return src == dst || dst == 0 || ((src == 3 || src == 4) && (dst == 1 || dst == 2));
}

/* ------------------------------------------------------------ element bodies
 * Element i of the kernels of cuda-kernels.cu. */

/* convert: dst[i] = src[i] rounded to D, with the random bits of element
 * first_index + i for stochastic rounding (half a word for bfloat16). */
template <int S, int D, bool SR>
MP_HD void
mp_convert1 (const typename MpType<S>::T *__restrict__ src, typename MpType<D>::T *__restrict__ dst,
             size_t i, uint64_t seed, uint64_t first_index)
{
  float f = mp_to_f32<S> (src[i]);

  if constexpr (SR)
    dst[i] = mp_from_f32_sr<D> (f, D == 2 ? _mixprec_sr_bits16 (seed, first_index + i)
                                          : _mixprec_sr_bits (seed, first_index + i));
  else
    dst[i] = mp_from_f32_rne<D> (f);
}

/* accumulate (_mixprec_kernel_fold): the fp32 sum (or the source alone),
 * rounded once. A first term of the dtype of @dst is a copy instead, on
 * both sides (_mixprec_cuda_accumulate()): rounding back would quiet a
 * signalling NaN. */
template <int D, int S>
MP_HD void
mp_accumulate1 (typename MpType<D>::T *dst, const typename MpType<S>::T *src, size_t i, bool first)
{
  float g = mp_to_f32<S> (src[i]);

  if (!first)
    g = mp_to_f32<D> (dst[i]) + g;
  dst[i] = mp_from_f32_rne<D> (g);
}

/* scale: buf[i] times factor, rounded once. */
template <int D>
MP_HD void
mp_scale1 (typename MpType<D>::T *buf, size_t i, float factor)
{
  buf[i] = mp_from_f32_rne<D> (mp_to_f32<D> (buf[i]) * factor);
}
