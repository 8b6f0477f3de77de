/* mixprec-cpu-private.h — which SIMD kernels this CPU runs */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Ordered: each level's CPU also runs every lower one. */
typedef enum {
  _MIXPREC_SIMD_SCALAR = 0,
  _MIXPREC_SIMD_AVX2 = 1,       /* AVX2 + F16C + FMA */
  _MIXPREC_SIMD_AVX512 = 2,     /* the above + AVX-512 F, BW and VL */
} _MixprecSimdLevel;

/* The level kernels dispatch on: the best the CPU supports, lowered by the
 * environment variable MIXPREC_SIMD ("scalar", "avx2" or "avx512"; for
 * testing and debugging; it never raises the level above what the CPU
 * has). Decided once per process. */
_MixprecSimdLevel _mixprec_cpu_simd_level (void);

/* The best level of this CPU and build, ignoring MIXPREC_SIMD. */
_MixprecSimdLevel _mixprec_cpu_simd_level_supported (void);

G_END_DECLS
