/* mixprec-x86-features-private.h — which SIMD extensions both the CPU and
 * the operating system support, read from CPUID and XGETBV in a form GCC
 * and clang both compile (clang rejects __builtin_cpu_supports ("f16c")).
 * Header-only: the plugins and the tests, which do not link the library's
 * internals, include it too. Never installed. */
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* CPUID leaf 1, ECX. */
#define _MIXPREC_X86_FMA      (1u << 12)
#define _MIXPREC_X86_OSXSAVE  (1u << 27)
#define _MIXPREC_X86_AVX      (1u << 28)
#define _MIXPREC_X86_F16C     (1u << 29)
/* CPUID leaf 7, sub-leaf 0, EBX. */
#define _MIXPREC_X86_AVX2     (1u << 5)
#define _MIXPREC_X86_AVX512F  (1u << 16)
#define _MIXPREC_X86_AVX512BW (1u << 30)
#define _MIXPREC_X86_AVX512VL (1u << 31)
/* XCR0: the register state the OS saves on a context switch. */
#define _MIXPREC_XCR0_YMM     0x06u  /* SSE and AVX state */
#define _MIXPREC_XCR0_ZMM     0xe6u  /* the above, opmask, ZMM0-15 high halves, ZMM16-31 */

static inline unsigned int
_mixprec_x86_xcr0 (void)
{
  unsigned int eax, edx;

  /* xgetbv by its encoding: assemblers that predate it still take it. */
  __asm__ volatile (".byte 0x0f, 0x01, 0xd0" : "=a" (eax), "=d" (edx) : "c" (0));
  (void) edx;
  return eax;
}

/* 0: no AVX2 kernels; 1: AVX2, FMA and F16C, with the YMM state saved by
 * the OS; 2: also AVX-512 F, BW and VL, with the opmask and ZMM state
 * saved. */
static inline int
_mixprec_x86_simd_level (void)
{
  unsigned int eax, ebx, ecx, edx, xcr0;

  if (!__get_cpuid (1, &eax, &ebx, &ecx, &edx))
    return 0;
  if ((ecx & (_MIXPREC_X86_OSXSAVE | _MIXPREC_X86_AVX | _MIXPREC_X86_FMA | _MIXPREC_X86_F16C)) !=
      (_MIXPREC_X86_OSXSAVE | _MIXPREC_X86_AVX | _MIXPREC_X86_FMA | _MIXPREC_X86_F16C))
    return 0;
  xcr0 = _mixprec_x86_xcr0 ();
  if ((xcr0 & _MIXPREC_XCR0_YMM) != _MIXPREC_XCR0_YMM)
    return 0;
  if (!__get_cpuid_count (7, 0, &eax, &ebx, &ecx, &edx) || !(ebx & _MIXPREC_X86_AVX2))
    return 0;
  if ((ebx & (_MIXPREC_X86_AVX512F | _MIXPREC_X86_AVX512BW | _MIXPREC_X86_AVX512VL)) ==
        (_MIXPREC_X86_AVX512F | _MIXPREC_X86_AVX512BW | _MIXPREC_X86_AVX512VL) &&
      (xcr0 & _MIXPREC_XCR0_ZMM) == _MIXPREC_XCR0_ZMM)
    return 2;
  return 1;
}
#endif
