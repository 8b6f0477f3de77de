/* mixprec-cpu.c — run-time CPU feature detection for kernel dispatch. */
#include "config.h"

#include "mixprec-cpu-private.h"

static _MixprecSimdLevel
detect_simd_level (void)
{
  const gchar *forced = g_getenv ("MIXPREC_SIMD");

  if (forced != NULL && g_ascii_strcasecmp (forced, "scalar") == 0)
    return _MIXPREC_SIMD_SCALAR;

#ifdef MIXPREC_HAVE_X86_SIMD
  __builtin_cpu_init ();
  if (__builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma") &&
      __builtin_cpu_supports ("f16c"))
    return _MIXPREC_SIMD_AVX2;
#endif
  return _MIXPREC_SIMD_SCALAR;
}

_MixprecSimdLevel
_mixprec_cpu_simd_level (void)
{
  static gsize level = 0;

  /* g_once_init_* cannot store 0, hence the +1. */
  if (g_once_init_enter (&level))
    g_once_init_leave (&level, (gsize) detect_simd_level () + 1);
  return (_MixprecSimdLevel) (level - 1);
}
