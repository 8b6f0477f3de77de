/* mixprec-cpu-private.h — which SIMD kernels this CPU runs */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum {
  _MIXPREC_SIMD_SCALAR = 0,
  _MIXPREC_SIMD_AVX2 = 1,       /* AVX2 + F16C + FMA */
} _MixprecSimdLevel;

/* The level kernels dispatch on: the best the CPU supports, lowered by the
 * environment variable MIXPREC_SIMD=scalar (for testing and debugging).
 * Decided once per process. */
_MixprecSimdLevel _mixprec_cpu_simd_level (void);

G_END_DECLS
