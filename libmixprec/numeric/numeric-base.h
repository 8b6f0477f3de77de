/* numeric-base.h — what the numeric headers of this folder need to be
 * compiled twice from the same lines: by the C compiler into the library
 * and the cpu plugins, and by nvcc into the cuda plugin's kernels (and the
 * host side of its .cu files).
 *
 * The headers of libmixprec/numeric/ hold the per-element arithmetic that
 * the scalar reference and the CUDA kernels share: the dtype conversions
 * and the random bits of stochastic rounding (numeric-dtype.h) and the
 * optimizers' updates (numeric-optim.h). They are plain C99 that nvcc's
 * C++ accepts, use <stdint.h> types and no GLib, and are never installed:
 * they are internals of the library and its in-tree plugins, reached
 * through -I$(top_srcdir)/libmixprec. Out-of-tree plugins get the same
 * bits from mixprec_convert_array() and the plugin ABI; installing these
 * headers would freeze every helper's name and signature as ABI. The AVX2
 * and AVX-512 kernels are the only other copies of this arithmetic, and
 * the bitwise tests (tests/test-dtype, tests/test-optim,
 * tests/test-engine-kernels) hold them to it.
 *
 * MIXPREC_NUMERIC_FN qualifies every function: static inline for the C
 * compiler, static __host__ __device__ __forceinline__ under nvcc. The few
 * operations whose spelling differs between host and device (bit casts,
 * fused multiply-add, IEEE square root and division) are wrapped below, so
 * each formula is written once and rounds the same way on both. nvcc is
 * run with --fmad=false and the C compiler with -ffp-contract=off: nothing
 * fuses except where a formula says _mixprec_num_fma(). */
#pragma once

#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <math.h>

#ifdef __CUDACC__
# define MIXPREC_NUMERIC_FN static __host__ __device__ __forceinline__
#else
# define MIXPREC_NUMERIC_FN static inline
#endif

/* ------------------------------------------------------------ bit views */

MIXPREC_NUMERIC_FN uint32_t
_mixprec_f32_bits (float f)
{
#ifdef __CUDA_ARCH__
  return __float_as_uint (f);
#else
  uint32_t u;

  memcpy (&u, &f, sizeof u);
  return u;
#endif
}

MIXPREC_NUMERIC_FN float
_mixprec_f32_from_bits (uint32_t u)
{
#ifdef __CUDA_ARCH__
  return __uint_as_float (u);
#else
  float f;

  memcpy (&f, &u, sizeof f);
  return f;
#endif
}

/* ------------------------------------------------------------ IEEE operations
 *
 * Each rounds once, to nearest even, on both sides. The device spellings
 * are the _rn intrinsics, so the result does not depend on nvcc's
 * -prec-div, -prec-sqrt or -use_fast_math. */

MIXPREC_NUMERIC_FN float
_mixprec_num_fma (float a,
                  float b,
                  float c)
{
#ifdef __CUDA_ARCH__
  return __fmaf_rn (a, b, c);
#else
  return fmaf (a, b, c);
#endif
}

MIXPREC_NUMERIC_FN float
_mixprec_num_sqrt (float a)
{
#ifdef __CUDA_ARCH__
  return __fsqrt_rn (a);
#else
  return sqrtf (a);
#endif
}

MIXPREC_NUMERIC_FN float
_mixprec_num_div (float a,
                  float b)
{
#ifdef __CUDA_ARCH__
  return __fdiv_rn (a, b);
#else
  return a / b;
#endif
}
