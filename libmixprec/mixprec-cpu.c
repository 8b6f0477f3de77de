/* mixprec-cpu.c — run-time CPU feature detection for kernel dispatch. */
#include "config.h"

#include "mixprec-cpu-private.h"
#include "mixprec-x86-features-private.h"

_MixprecSimdLevel
_mixprec_cpu_simd_level_supported (void)
{
#ifdef MIXPREC_HAVE_X86_SIMD
  int level = _mixprec_x86_simd_level ();

# ifdef MIXPREC_HAVE_X86_AVX512
  if (level >= 2)
    return _MIXPREC_SIMD_AVX512;
# endif
  return level >= 1 ? _MIXPREC_SIMD_AVX2 : _MIXPREC_SIMD_SCALAR;
#else
  return _MIXPREC_SIMD_SCALAR;
#endif
}

static _MixprecSimdLevel
detect_simd_level (void)
{
  const gchar *forced = g_getenv ("MIXPREC_SIMD");
  _MixprecSimdLevel best = _mixprec_cpu_simd_level_supported ();

  /* A request can only lower the level: asking for kernels the CPU lacks
   * would crash on the first illegal instruction. Other values are
   * ignored. */
  if (forced == NULL)
    return best;
  if (g_ascii_strcasecmp (forced, "scalar") == 0)
    return _MIXPREC_SIMD_SCALAR;
  if (g_ascii_strcasecmp (forced, "avx2") == 0)
    return MIN (best, _MIXPREC_SIMD_AVX2);
  return best;
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
