/* mixprec-runtime.c — version and capability queries of the loaded library. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-cpu-private.h"
#include "mixprec-parallel-private.h"

/**
 * mixprec_get_major_version:
 *
 * Gives the major version of the libmixprec the program runs with. Compare
 * with %MIXPREC_MAJOR_VERSION, or use mixprec_check_version().
 *
 * Returns: the major version of the libmixprec loaded at run time (which
 *   may differ from %MIXPREC_MAJOR_VERSION, the headers' version)
 *
 * Since: 1.0
 */
guint
mixprec_get_major_version (void)
{
  return MIXPREC_MAJOR_VERSION;
}

/**
 * mixprec_get_minor_version:
 *
 * Gives the minor version of the libmixprec the program runs with, which
 * may differ from %MIXPREC_MINOR_VERSION, the version of the headers the
 * program was built with.
 *
 * Returns: the minor version of the libmixprec loaded at run time
 *
 * Since: 1.0
 */
guint
mixprec_get_minor_version (void)
{
  return MIXPREC_MINOR_VERSION;
}

/**
 * mixprec_get_micro_version:
 *
 * Gives the micro version of the libmixprec the program runs with, which
 * may differ from %MIXPREC_MICRO_VERSION, the version of the headers the
 * program was built with.
 *
 * Returns: the micro version of the libmixprec loaded at run time
 *
 * Since: 1.0
 */
guint
mixprec_get_micro_version (void)
{
  return MIXPREC_MICRO_VERSION;
}

/**
 * mixprec_check_version:
 * @required_major: the required major version
 * @required_minor: the required minor version
 * @required_micro: the required micro version
 *
 * Checks at run time that the loaded libmixprec is compatible with the
 * given version: the same major version and at least the given minor and
 * micro versions.
 *
 * Returns: (nullable): %NULL when compatible, otherwise a string saying
 *   why not, owned by libmixprec
 *
 * Since: 1.0
 */
const gchar *
mixprec_check_version (guint required_major,
                       guint required_minor,
                       guint required_micro)
{
  if (required_major != MIXPREC_MAJOR_VERSION)
    return required_major > MIXPREC_MAJOR_VERSION
           ? "libmixprec version too old (major mismatch)"
           : "libmixprec version too new (major mismatch)";
  if (required_minor > MIXPREC_MINOR_VERSION ||
      (required_minor == MIXPREC_MINOR_VERSION && required_micro > MIXPREC_MICRO_VERSION))
    return "libmixprec version too old (minor or micro mismatch)";
  return NULL;
}

/**
 * mixprec_get_simd_name:
 *
 * Which kernels the CPU kernels dispatch to in this process: "avx512"
 * (AVX-512 F, BW and VL on top of the AVX2 set), "avx2" (AVX2 + F16C +
 * FMA) or "scalar": the best the CPU has. Setting the environment
 * variable `MIXPREC_SIMD` to `avx2` or `scalar` before the first call
 * lowers the choice to that set (`avx512` keeps the best; no value raises
 * it above what the CPU has); all produce identical bits.
 *
 * Returns: the name of the kernel set in use
 *
 * Since: 1.0
 */
const gchar *
mixprec_get_simd_name (void)
{
  switch (_mixprec_cpu_simd_level ())
    {
    case _MIXPREC_SIMD_AVX512:
      return "avx512";
    case _MIXPREC_SIMD_AVX2:
      return "avx2";
    case _MIXPREC_SIMD_SCALAR:
    default:
      return "scalar";
    }
}

/**
 * mixprec_get_num_threads:
 *
 * The number of threads CPU kernels split large arrays across: the
 * environment variable `MIXPREC_NUM_THREADS` when set to a positive
 * integer, otherwise the number of processors available.
 *
 * Returns: the thread count, at least 1
 *
 * Since: 1.0
 */
guint
mixprec_get_num_threads (void)
{
  return _mixprec_parallel_num_threads ();
}
