/* numeric-quant.h — optimizer states kept in fewer bits and parameters
 * kept in two 16-bit halves: the quantization maps, the block scales,
 * one element encoded and decoded, the remainder encoding of an FP32
 * master beside its bfloat16 working copy, and one Kahan-compensated
 * bfloat16 update. The cpu optimizer plugins and the cuda plugin compile
 * these same lines (see numeric-base.h); docs/reference/optimizer-states.md
 * describes the formats for users, and MixprecOptimizerStepV3 in
 * mixprec-plugin-abi.h is the contract they implement.
 *
 * Formats are passed as plain unsigned numbers equal to the values of
 * MixprecPluginStateFormat and MixprecPluginMasterFormat (this header
 * includes no library header; tests/test-optim-formats checks that the
 * numbers agree). */
#pragma once

#include "numeric-fp8.h"

#define _MIXPREC_QFMT_FLOAT32            0u
#define _MIXPREC_QFMT_BFLOAT16           1u
#define _MIXPREC_QFMT_FLOAT16_SCALED     2u
#define _MIXPREC_QFMT_BFLOAT16_SCALED    3u
#define _MIXPREC_QFMT_FLOAT8_E4M3_SCALED 4u
#define _MIXPREC_QFMT_INT8_DYNAMIC       5u
#define _MIXPREC_QFMT_INT4_DYNAMIC       6u
#define _MIXPREC_QFMT_COUNT              7u

#define _MIXPREC_QMASTER_FLOAT32   0u
#define _MIXPREC_QMASTER_REMAINDER 1u
#define _MIXPREC_QMASTER_KAHAN     2u
#define _MIXPREC_QMASTER_COUNT     3u

/* Block sizes a call may use, and the defaults when a setting leaves the
 * size open (those of the 8-bit and 4-bit optimizers the formats come
 * from). */
#define _MIXPREC_QBLOCK_MIN 32u
#define _MIXPREC_QBLOCK_MAX 4096u
#define _MIXPREC_QBLOCK_DEFAULT_INT8 256u
#define _MIXPREC_QBLOCK_DEFAULT_INT4 128u
#define _MIXPREC_QBLOCK_DEFAULT_SCALED 256u

/* Whether @format keeps one FP32 scale per block. */
MIXPREC_NUMERIC_FN int
_mixprec_state_is_blocked (unsigned format)
{
  return format >= _MIXPREC_QFMT_FLOAT16_SCALED && format < _MIXPREC_QFMT_COUNT;
}

/* Bytes of storage of @n elements in @format (int4: two per byte, an odd
 * count rounded up). */
MIXPREC_NUMERIC_FN size_t
_mixprec_state_bytes (unsigned format,
                      size_t   n)
{
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT32:
      return n * 4;
    case _MIXPREC_QFMT_BFLOAT16:
    case _MIXPREC_QFMT_FLOAT16_SCALED:
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      return n * 2;
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      return n;
    case _MIXPREC_QFMT_INT4_DYNAMIC:
      return (n + 1) / 2;
    default:
      return 0;
    }
}

/* ------------------------------------------------------------ maps
 *
 * The values a code of INT8_DYNAMIC / INT4_DYNAMIC stands for, as float32
 * exactly as torch builds them (torchao.optim: create_dynamic_map(signed)
 * for 8 bits, create_dynamic_map(True, 3, 4) for signed 4 bits and
 * linspace(0, 1, 17)[1:] for unsigned 4 bits). The dynamic map of
 * bitsandbytes ("8-bit approximations", Dettmers 2015) takes, for each
 * decade i = 0 .. E-1 (E the exponent bits: 7, or 3 for 4 bits), the
 * midpoints of an even split of [0.1, 1] (torch.linspace in float32) into
 * 2^(i + B - E) parts (signed; B = total bits - 1) or 2^(i + B - E + 1)
 * (unsigned), times 10^(i - E + 1) as a float32 product, negated as well
 * when signed; then 0 and 1, sorted. The signed maps hold 0 but not -1.
 * The tables below are that construction's output, written as C hex
 * floats, and tests/test-quant-maps.py compares them bit for bit with
 * torchao's own get_qmap_* under the PyPI venv. Every map is strictly
 * increasing, so a code's order is its value's. */

#ifdef __CUDACC__
/* Host and device each need a copy: device code reads __constant__
 * memory, host code (the kernel tests' reference) the host array. */
# define _MIXPREC_QMAP_DEFINE(name, n, ...) \
  static const float name[n] = { __VA_ARGS__ }; \
  static __constant__ const float name##_dev[n] = { __VA_ARGS__ };
# ifdef __CUDA_ARCH__
#  define _MIXPREC_QMAP_PICK(name) (name##_dev)
# else
#  define _MIXPREC_QMAP_PICK(name) (name)
# endif
#else
# define _MIXPREC_QMAP_DEFINE(name, n, ...) \
  static const float name[n] = { __VA_ARGS__ };
# define _MIXPREC_QMAP_PICK(name) (name)
#endif

_MIXPREC_QMAP_DEFINE (_mixprec_qmap_int8_signed, 256,
  -0x1.fc6666p-1f, -0x1.f53334p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f,
  -0x1.df999ap-1f, -0x1.d86666p-1f, -0x1.d13334p-1f, -0x1.cap-1f,
  -0x1.c2ccccp-1f, -0x1.bb999ap-1f, -0x1.b46666p-1f, -0x1.ad3334p-1f,
  -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.97999ap-1f, -0x1.906666p-1f,
  -0x1.893334p-1f, -0x1.82p-1f, -0x1.7accccp-1f, -0x1.73999ap-1f,
  -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56ccccp-1f,
  -0x1.4f999ap-1f, -0x1.486668p-1f, -0x1.413334p-1f, -0x1.3ap-1f,
  -0x1.32ccccp-1f, -0x1.2b999ap-1f, -0x1.246668p-1f, -0x1.1d3334p-1f,
  -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.079998p-1f, -0x1.006666p-1f,
  -0x1.f26664p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f,
  -0x1.b8ccccp-2f, -0x1.aa6666p-2f, -0x1.9cp-2f, -0x1.8d9998p-2f,
  -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626666p-2f, -0x1.54p-2f,
  -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f,
  -0x1.0cp-2f, -0x1.fb3332p-3f, -0x1.de6666p-3f, -0x1.c1999ap-3f,
  -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3334p-3f, -0x1.4e6666p-3f,
  -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f,
  -0x1.93d70ap-4f, -0x1.8851eep-4f, -0x1.7ccccep-4f, -0x1.7147aep-4f,
  -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb854p-4f, -0x1.433334p-4f,
  -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f,
  -0x1.09999ap-4f, -0x1.fc28f6p-5f, -0x1.e51ebap-5f, -0x1.ce147ap-5f,
  -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
  -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c29p-5f,
  -0x1.fd70a4p-6f, -0x1.cf5c2ap-6f, -0x1.a147aep-6f, -0x1.733334p-6f,
  -0x1.451ebap-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
  -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f,
  -0x1.e978d4p-8f, -0x1.c49ba6p-8f, -0x1.9fbe76p-8f, -0x1.7ae148p-8f,
  -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
  -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f,
  -0x1.eecbfep-11f, -0x1.b3d07cp-11f, -0x1.78d5p-11f, -0x1.3dd982p-11f,
  -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
  -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f,
  -0x1.040bfep-17f, -0x1.b43528p-19f, -0x1.27476ep-21f, 0.0f,
  0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
  0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f,
  0x1.19ce0ap-12f, 0x1.8fc506p-12f, 0x1.02de02p-11f, 0x1.3dd982p-11f,
  0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
  0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f,
  0x1.0c49bap-8f, 0x1.3126e8p-8f, 0x1.56041ap-8f, 0x1.7ae148p-8f,
  0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
  0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f,
  0x1.d1eb86p-7f, 0x1.170a3ep-6f, 0x1.451ebap-6f, 0x1.733334p-6f,
  0x1.a147aep-6f, 0x1.cf5c2ap-6f, 0x1.fd70a4p-6f, 0x1.15c29p-5f,
  0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f,
  0x1.88f5c2p-5f, 0x1.ap-5f, 0x1.b70a3ep-5f, 0x1.ce147ap-5f,
  0x1.e51ebap-5f, 0x1.fc28f6p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
  0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f,
  0x1.4eb854p-4f, 0x1.5a3d7p-4f, 0x1.65c29p-4f, 0x1.7147aep-4f,
  0x1.7ccccep-4f, 0x1.8851eep-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
  0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f,
  0x1.6b3334p-3f, 0x1.88p-3f, 0x1.a4ccccp-3f, 0x1.c1999ap-3f,
  0x1.de6666p-3f, 0x1.fb3332p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
  0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f,
  0x1.626666p-2f, 0x1.70ccccp-2f, 0x1.7f3334p-2f, 0x1.8d9998p-2f,
  0x1.9cp-2f, 0x1.aa6666p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
  0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26664p-2f, 0x1.006666p-1f,
  0x1.079998p-1f, 0x1.0eccccp-1f, 0x1.16p-1f, 0x1.1d3334p-1f,
  0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
  0x1.413334p-1f, 0x1.486668p-1f, 0x1.4f999ap-1f, 0x1.56ccccp-1f,
  0x1.5ep-1f, 0x1.653334p-1f, 0x1.6c6668p-1f, 0x1.73999ap-1f,
  0x1.7accccp-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
  0x1.97999ap-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3334p-1f,
  0x1.b46666p-1f, 0x1.bb999ap-1f, 0x1.c2ccccp-1f, 0x1.cap-1f,
  0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df999ap-1f, 0x1.e6ccccp-1f,
  0x1.eep-1f, 0x1.f53334p-1f, 0x1.fc6666p-1f, 0x1p+0f)

_MIXPREC_QMAP_DEFINE (_mixprec_qmap_int8_unsigned, 256,
  0.0f, 0x1.5cf754p-22f, 0x1.a0133p-21f, 0x1.1d367p-19f,
  0x1.2599ecp-18f, 0x1.bc98a2p-18f, 0x1.29cbaap-17f, 0x1.0624dcp-16f,
  0x1.c2e34p-16f, 0x1.3fd0dp-15f, 0x1.9e3p-15f, 0x1.fc8f34p-15f,
  0x1.2d7732p-14f, 0x1.5ca6c8p-14f, 0x1.8bd662p-14f, 0x1.0cb296p-13f,
  0x1.82a994p-13f, 0x1.f8a092p-13f, 0x1.374bc8p-12f, 0x1.724744p-12f,
  0x1.ad42c6p-12f, 0x1.e83e44p-12f, 0x1.119ce2p-11f, 0x1.2f1aap-11f,
  0x1.4c986p-11f, 0x1.6a162p-11f, 0x1.8793dep-11f, 0x1.a511ap-11f,
  0x1.c28f5ep-11f, 0x1.e00d1cp-11f, 0x1.fd8adcp-11f, 0x1.2b020cp-10f,
  0x1.74bc6ap-10f, 0x1.be76c8p-10f, 0x1.041894p-9f, 0x1.28f5c2p-9f,
  0x1.4dd2fp-9f, 0x1.72b02p-9f, 0x1.978d4ep-9f, 0x1.bc6a8p-9f,
  0x1.e147aep-9f, 0x1.03126ep-8f, 0x1.158104p-8f, 0x1.27ef9ep-8f,
  0x1.3a5e34p-8f, 0x1.4cccccp-8f, 0x1.5f3b64p-8f, 0x1.71a9fap-8f,
  0x1.841894p-8f, 0x1.96872ap-8f, 0x1.a8f5c2p-8f, 0x1.bb645cp-8f,
  0x1.cdd2fp-8f, 0x1.e0418ap-8f, 0x1.f2b01ep-8f, 0x1.028f5cp-7f,
  0x1.0bc6a8p-7f, 0x1.14fdf2p-7f, 0x1.1e354p-7f, 0x1.276c8ap-7f,
  0x1.30a3d6p-7f, 0x1.39db24p-7f, 0x1.43126ep-7f, 0x1.5eb854p-7f,
  0x1.8ccccep-7f, 0x1.bae146p-7f, 0x1.e8f5c4p-7f, 0x1.0b851ep-6f,
  0x1.228f5ep-6f, 0x1.39999ap-6f, 0x1.50a3d6p-6f, 0x1.67ae16p-6f,
  0x1.7eb852p-6f, 0x1.95c28ep-6f, 0x1.accccep-6f, 0x1.c3d70ep-6f,
  0x1.dae146p-6f, 0x1.f1eb86p-6f, 0x1.047aep-5f, 0x1.1p-5f,
  0x1.1b851ep-5f, 0x1.270a3ep-5f, 0x1.328f5ep-5f, 0x1.3e147ap-5f,
  0x1.49999ap-5f, 0x1.551eb8p-5f, 0x1.60a3d6p-5f, 0x1.6c28f6p-5f,
  0x1.77ae14p-5f, 0x1.833334p-5f, 0x1.8eb85p-5f, 0x1.9a3d7p-5f,
  0x1.a5c28ep-5f, 0x1.b147aep-5f, 0x1.bccccep-5f, 0x1.c851eep-5f,
  0x1.d3d70ep-5f, 0x1.df5c2ap-5f, 0x1.eae146p-5f, 0x1.f66666p-5f,
  0x1.00f5c4p-4f, 0x1.06b854p-4f, 0x1.0c7ae2p-4f, 0x1.123d7p-4f,
  0x1.18p-4f, 0x1.1dc29p-4f, 0x1.23852p-4f, 0x1.2947aep-4f,
  0x1.2f0a3ep-4f, 0x1.34cccep-4f, 0x1.3a8f5ep-4f, 0x1.4051ecp-4f,
  0x1.46147cp-4f, 0x1.4bd70ap-4f, 0x1.51999ap-4f, 0x1.575c2ap-4f,
  0x1.5d1eb8p-4f, 0x1.62e148p-4f, 0x1.68a3d6p-4f, 0x1.6e6666p-4f,
  0x1.7428f6p-4f, 0x1.79eb86p-4f, 0x1.7fae16p-4f, 0x1.8570a4p-4f,
  0x1.8b3334p-4f, 0x1.90f5c4p-4f, 0x1.96b852p-4f, 0x1.a8p-4f,
  0x1.c4ccccp-4f, 0x1.e1999ap-4f, 0x1.fe6666p-4f, 0x1.0d9998p-3f,
  0x1.1cp-3f, 0x1.2a6668p-3f, 0x1.38ccccp-3f, 0x1.473334p-3f,
  0x1.559998p-3f, 0x1.64p-3f, 0x1.726668p-3f, 0x1.80ccccp-3f,
  0x1.8f3334p-3f, 0x1.9d9998p-3f, 0x1.acp-3f, 0x1.ba6668p-3f,
  0x1.c8ccccp-3f, 0x1.d73334p-3f, 0x1.e59998p-3f, 0x1.f4p-3f,
  0x1.013332p-2f, 0x1.086666p-2f, 0x1.0f999ap-2f, 0x1.16ccccp-2f,
  0x1.1ep-2f, 0x1.253334p-2f, 0x1.2c6666p-2f, 0x1.339998p-2f,
  0x1.3accccp-2f, 0x1.42p-2f, 0x1.493334p-2f, 0x1.506666p-2f,
  0x1.579998p-2f, 0x1.5eccccp-2f, 0x1.66p-2f, 0x1.6d3334p-2f,
  0x1.746666p-2f, 0x1.7b9998p-2f, 0x1.82ccccp-2f, 0x1.8ap-2f,
  0x1.913334p-2f, 0x1.986666p-2f, 0x1.9f9998p-2f, 0x1.a6ccccp-2f,
  0x1.aep-2f, 0x1.b53334p-2f, 0x1.bc6666p-2f, 0x1.c39998p-2f,
  0x1.caccccp-2f, 0x1.d2p-2f, 0x1.d93334p-2f, 0x1.e06666p-2f,
  0x1.e79998p-2f, 0x1.eeccccp-2f, 0x1.f6p-2f, 0x1.fd3332p-2f,
  0x1.023334p-1f, 0x1.05ccccp-1f, 0x1.096666p-1f, 0x1.0dp-1f,
  0x1.109998p-1f, 0x1.143334p-1f, 0x1.17ccccp-1f, 0x1.1b6668p-1f,
  0x1.1fp-1f, 0x1.22999ap-1f, 0x1.263334p-1f, 0x1.29ccccp-1f,
  0x1.2d6668p-1f, 0x1.31p-1f, 0x1.34999ap-1f, 0x1.383334p-1f,
  0x1.3bccccp-1f, 0x1.3f6668p-1f, 0x1.43p-1f, 0x1.46999ap-1f,
  0x1.4a3334p-1f, 0x1.4dccccp-1f, 0x1.516668p-1f, 0x1.55p-1f,
  0x1.58999ap-1f, 0x1.5c3334p-1f, 0x1.5fccccp-1f, 0x1.636668p-1f,
  0x1.67p-1f, 0x1.6a999ap-1f, 0x1.6e3334p-1f, 0x1.71ccccp-1f,
  0x1.756668p-1f, 0x1.79p-1f, 0x1.7c999ap-1f, 0x1.803334p-1f,
  0x1.83ccccp-1f, 0x1.876668p-1f, 0x1.8bp-1f, 0x1.8e9998p-1f,
  0x1.923334p-1f, 0x1.95ccccp-1f, 0x1.996668p-1f, 0x1.9dp-1f,
  0x1.a09998p-1f, 0x1.a43334p-1f, 0x1.a7ccccp-1f, 0x1.ab6668p-1f,
  0x1.afp-1f, 0x1.b29998p-1f, 0x1.b63334p-1f, 0x1.b9ccccp-1f,
  0x1.bd6668p-1f, 0x1.c1p-1f, 0x1.c49998p-1f, 0x1.c83334p-1f,
  0x1.cbccccp-1f, 0x1.cf6668p-1f, 0x1.d3p-1f, 0x1.d69998p-1f,
  0x1.da3334p-1f, 0x1.ddccccp-1f, 0x1.e16668p-1f, 0x1.e5p-1f,
  0x1.e89998p-1f, 0x1.ec3334p-1f, 0x1.efccccp-1f, 0x1.f36668p-1f,
  0x1.f7p-1f, 0x1.fa9998p-1f, 0x1.fe3334p-1f, 0x1p+0f)

_MIXPREC_QMAP_DEFINE (_mixprec_qmap_int4_signed, 16,
  -0x1.c66666p-1f, -0x1.533334p-1f, -0x1.cp-2f, -0x1.b33332p-3f,
  -0x1.3d70a4p-4f, -0x1.0a3d72p-5f, -0x1.6872bp-8f, 0.0f,
  0x1.6872bp-8f, 0x1.0a3d72p-5f, 0x1.3d70a4p-4f, 0x1.b33332p-3f,
  0x1.cp-2f, 0x1.533334p-1f, 0x1.c66666p-1f, 0x1p+0f)

_MIXPREC_QMAP_DEFINE (_mixprec_qmap_int4_unsigned, 16,
  0x1p-4f, 0x1p-3f, 0x1.8p-3f, 0x1p-2f,
  0x1.4p-2f, 0x1.8p-2f, 0x1.cp-2f, 0x1p-1f,
  0x1.2p-1f, 0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f,
  0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f, 0x1p+0f)

#undef _MIXPREC_QMAP_DEFINE

/* The map of @bits (8 or 4) for a signed or unsigned slot. */
MIXPREC_NUMERIC_FN const float *
_mixprec_qmap (unsigned bits,
               int      is_signed)
{
  if (bits == 8)
    return is_signed ? _MIXPREC_QMAP_PICK (_mixprec_qmap_int8_signed)
                     : _MIXPREC_QMAP_PICK (_mixprec_qmap_int8_unsigned);
  return is_signed ? _MIXPREC_QMAP_PICK (_mixprec_qmap_int4_signed)
                   : _MIXPREC_QMAP_PICK (_mixprec_qmap_int4_unsigned);
}

/* ------------------------------------------------------------ codes
 *
 * The code of a value @q already divided by its block's scale: torchao's
 * rule (quantize_8bit_with_qmap / quantize_4bit_with_qmap), the same
 * comparisons in the same order. A branch-free binary search finds the
 * largest code whose value is <= q (code 0 when q is below every value,
 * and for NaN, which compares false); then q moves up one code when its
 * distance above that value is at least half the gap to the next one,
 * both differences rounded as float32 (so ties go up, and a value a hair
 * under a midpoint may too). These are the reference: the SIMD kernels
 * find the same codes another way and tests/test-optim-formats holds them
 * to these, input by input. */

MIXPREC_NUMERIC_FN unsigned
_mixprec_quant_round_up (float        q,
                         const float *map,
                         unsigned     code,
                         unsigned     last)
{
  unsigned up = code + 1 > last ? last : code + 1;
  float down = map[code];

  return (q - down) >= (map[up] - down) * 0.5f ? up : code;
}

MIXPREC_NUMERIC_FN unsigned
_mixprec_quant_code8 (float        q,
                      const float *map)
{
  unsigned code = q >= map[128] ? 128u : 0u;

  code += q >= map[code + 64] ? 64u : 0u;
  code += q >= map[code + 32] ? 32u : 0u;
  code += q >= map[code + 16] ? 16u : 0u;
  code += q >= map[code + 8] ? 8u : 0u;
  code += q >= map[code + 4] ? 4u : 0u;
  code += q >= map[code + 2] ? 2u : 0u;
  code += q >= map[code + 1] ? 1u : 0u;
  return _mixprec_quant_round_up (q, map, code, 255);
}

MIXPREC_NUMERIC_FN unsigned
_mixprec_quant_code4 (float        q,
                      const float *map)
{
  unsigned code = q >= map[8] ? 8u : 0u;

  code += q >= map[code + 4] ? 4u : 0u;
  code += q >= map[code + 2] ? 2u : 0u;
  code += q >= map[code + 1] ? 1u : 0u;
  return _mixprec_quant_round_up (q, map, code, 15);
}

/* ------------------------------------------------------------ block scales
 *
 * A block's absmax is kept as fp32 bits, the largest of |x|'s patterns:
 * non-negative floats order as their bits, and a NaN's pattern is above
 * every number's, so a NaN anywhere in the block makes the absmax NaN, as
 * torch's amax() does (the whole block then decodes to NaN: a poisoned
 * state stays visible instead of being hidden by a scale that skipped
 * it). */

#define _MIXPREC_QSCALE_FLOOR_BITS 0x2B8CBCCCu    /* 1e-12f */
#define _MIXPREC_QNAN_BITS 0x7FC00000u

MIXPREC_NUMERIC_FN uint32_t
_mixprec_absmax_bits (uint32_t running,
                      float    x)
{
  uint32_t a = _mixprec_f32_bits (x) & 0x7FFFFFFFu;

  return a > running ? a : running;
}

/* The FP32 scale of a block of @format whose absmax has the bits
 * @absmax_bits: max (absmax, 1e-12), divided by the largest finite value
 * of the stored dtype for FLOAT16_SCALED (65504) and FLOAT8_E4M3_SCALED
 * (448), so the block's largest element lands on it. BFLOAT16_SCALED is
 * normalized to 1 instead: bfloat16's largest finite value is ~3.4e38,
 * and dividing by it would leave the scale of any block with an absmax
 * below ~4 subnormal or zero in fp32. The int formats are normalized to
 * 1, their maps' range. NaN absmax: the quiet NaN 0x7FC00000. */
MIXPREC_NUMERIC_FN float
_mixprec_state_block_scale (unsigned format,
                            uint32_t absmax_bits)
{
  float a;

  if (absmax_bits > 0x7F800000u)
    return _mixprec_f32_from_bits (_MIXPREC_QNAN_BITS);
  a = _mixprec_f32_from_bits (absmax_bits < _MIXPREC_QSCALE_FLOOR_BITS
                              ? _MIXPREC_QSCALE_FLOOR_BITS : absmax_bits);
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT16_SCALED:
      return _mixprec_num_div (a, 65504.0f);
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
      return _mixprec_num_div (a, 448.0f);
    default:
      return a;
    }
}

/* ------------------------------------------------------------ one element
 *
 * encode: the stored code of @x in a block of scale @scale. The scaled
 * floats store x / scale (one IEEE division) rounded to nearest even and
 * saturated at the dtype's largest finite value, Inf included; a NaN
 * quotient stores the dtype's positive quiet NaN whatever its sign, so
 * that CPU and GPU agree (they make NaNs differently). The int formats
 * store _mixprec_quant_code8/4 of x / scale. FLOAT32 stores x's bits and
 * BFLOAT16 its round to nearest even, unscaled (@scale unused).
 *
 * decode: the stored value times the scale, one fp32 product. */

MIXPREC_NUMERIC_FN uint16_t
_mixprec_f32_to_f16_sat (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFFu;

  if (a > 0x7F800000u)
    return 0x7E00;
  return (uint16_t) (((u >> 16) & 0x8000u)
                     | _mixprec_num_min32 (_mixprec_round_rne_bits (a, 10, 113), 0x7BFFu));
}

MIXPREC_NUMERIC_FN uint16_t
_mixprec_f32_to_bf16_sat (float f)
{
  uint32_t u = _mixprec_f32_bits (f);
  uint32_t a = u & 0x7FFFFFFFu;

  if (a > 0x7F800000u)
    return 0x7FC0;
  return (uint16_t) (((u >> 16) & 0x8000u)
                     | _mixprec_num_min32 ((a + 0x7FFFu + ((a >> 16) & 1u)) >> 16, 0x7F7Fu));
}

MIXPREC_NUMERIC_FN uint32_t
_mixprec_state_encode1 (unsigned format,
                        int      is_signed,
                        float    x,
                        float    scale)
{
  float q;

  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT32:
      return _mixprec_f32_bits (x);
    case _MIXPREC_QFMT_BFLOAT16:
      return _mixprec_f32_to_bf16_rne (x);
    default:
      break;
    }
  q = _mixprec_num_div (x, scale);
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT16_SCALED:
      return _mixprec_f32_to_f16_sat (q);
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      return _mixprec_f32_to_bf16_sat (q);
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
      {
        uint8_t b = _mixprec_f32_to_e4m3_sat (q);

        return (b & 0x7Fu) == 0x7Fu ? 0x7Fu : b;
      }
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      return _mixprec_quant_code8 (q, _mixprec_qmap (8, is_signed));
    default:
      return _mixprec_quant_code4 (q, _mixprec_qmap (4, is_signed));
    }
}

/* The stored value of @code before its scale. */
MIXPREC_NUMERIC_FN float
_mixprec_state_value1 (unsigned format,
                       int      is_signed,
                       uint32_t code)
{
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT32:
      return _mixprec_f32_from_bits (code);
    case _MIXPREC_QFMT_BFLOAT16:
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      return _mixprec_bf16_to_f32 ((uint16_t) code);
    case _MIXPREC_QFMT_FLOAT16_SCALED:
      return _mixprec_f16_to_f32 ((uint16_t) code);
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
      return _mixprec_e4m3_to_f32 ((uint8_t) code);
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      return _mixprec_qmap (8, is_signed)[code & 0xFFu];
    default:
      return _mixprec_qmap (4, is_signed)[code & 0xFu];
    }
}

MIXPREC_NUMERIC_FN float
_mixprec_state_decode1 (unsigned format,
                        int      is_signed,
                        uint32_t code,
                        float    scale)
{
  float v = _mixprec_state_value1 (format, is_signed, code);

  if (format == _MIXPREC_QFMT_FLOAT32 || format == _MIXPREC_QFMT_BFLOAT16)
    return v;
  return _mixprec_num_mul (v, scale);
}

/* Element @i of a slot's storage @base: its code (int4: nibble i % 2 of
 * byte i / 2, the even element in the low nibble). */
MIXPREC_NUMERIC_FN uint32_t
_mixprec_state_load_code (unsigned    format,
                          const void *base,
                          size_t      i)
{
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT32:
      return ((const uint32_t *) base)[i];
    case _MIXPREC_QFMT_BFLOAT16:
    case _MIXPREC_QFMT_FLOAT16_SCALED:
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      return ((const uint16_t *) base)[i];
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      return ((const uint8_t *) base)[i];
    default:
      return (((const uint8_t *) base)[i / 2] >> ((i & 1) * 4)) & 0xFu;
    }
}

/* Stores @code as element @i (int4: only its own nibble changes). */
MIXPREC_NUMERIC_FN void
_mixprec_state_store_code (unsigned format,
                           void    *base,
                           size_t   i,
                           uint32_t code)
{
  switch (format)
    {
    case _MIXPREC_QFMT_FLOAT32:
      ((uint32_t *) base)[i] = code;
      break;
    case _MIXPREC_QFMT_BFLOAT16:
    case _MIXPREC_QFMT_FLOAT16_SCALED:
    case _MIXPREC_QFMT_BFLOAT16_SCALED:
      ((uint16_t *) base)[i] = (uint16_t) code;
      break;
    case _MIXPREC_QFMT_FLOAT8_E4M3_SCALED:
    case _MIXPREC_QFMT_INT8_DYNAMIC:
      ((uint8_t *) base)[i] = (uint8_t) code;
      break;
    default:
      {
        uint8_t *b = (uint8_t *) base + i / 2;
        unsigned shift = (unsigned) (i & 1) * 4;

        *b = (uint8_t) ((*b & ~(0xFu << shift)) | ((code & 0xFu) << shift));
      }
      break;
    }
}

/* ------------------------------------------------------------ remainder master
 *
 * Transformer Engine's store_param_remainders: an FP32 master p is kept as
 * its bfloat16 round (the working copy) and the int16 low half of its bit
 * pattern. Splitting takes the high half and adds one to it when the low
 * half, read as int16, is negative (bit 15 set: the low half is at least
 * half a bfloat16 unit, so rounding goes away from zero, ties included);
 * joining subtracts that one again. Both halves wrap as 16-bit integers,
 * so every pattern, NaN payloads included, survives the round trip. */

MIXPREC_NUMERIC_FN float
_mixprec_remainder_join (uint16_t working,
                         int16_t  rem)
{
  uint32_t hi = (uint16_t) (working - (rem < 0 ? 1u : 0u));

  return _mixprec_f32_from_bits ((hi << 16) | (uint16_t) rem);
}

MIXPREC_NUMERIC_FN void
_mixprec_remainder_split (float     p,
                          uint16_t *working,
                          int16_t  *rem)
{
  uint32_t u = _mixprec_f32_bits (p);
  uint16_t lo = (uint16_t) (u & 0xFFFFu);

  *rem = (int16_t) (lo >= 0x8000u ? (int32_t) lo - 0x10000 : (int32_t) lo);
  *working = (uint16_t) ((u >> 16) + (lo >= 0x8000u ? 1u : 0u));
}

/* ------------------------------------------------------------ Kahan master
 *
 * optimi's kahan_sum for a bfloat16 parameter p with a bfloat16
 * compensation c, the optimizer's update being u = p_new - p (one fp32
 * subtraction; exact when the step is below half of |p|):
 *
 *   c1 = bf16 (c + u)           the update joins the carried error
 *   p' = bf16 (p + c1)          what the parameter can take of it
 *   c' = bf16 (c1 + bf16 (p - p'))   what it could not, carried
 *
 * Each line is one fp32 operation rounded to bfloat16 to nearest even, as
 * torch's bfloat16 tensor arithmetic does in optimi's in-place ops. optimi
 * applies its weight decay to p directly; here the optimizer's whole
 * update (decay included) goes through c, so the results agree with optimi
 * within rounding, not bit for bit. */
MIXPREC_NUMERIC_FN void
_mixprec_kahan_step (float     p_new,
                     uint16_t *p,
                     uint16_t *comp)
{
  float p0 = _mixprec_bf16_to_f32 (*p);
  float u = p_new - p0;
  float c1 = _mixprec_bf16_to_f32 (_mixprec_f32_to_bf16_rne (_mixprec_bf16_to_f32 (*comp) + u));
  uint16_t p1 = _mixprec_f32_to_bf16_rne (p0 + c1);
  float d = _mixprec_bf16_to_f32 (_mixprec_f32_to_bf16_rne (p0 - _mixprec_bf16_to_f32 (p1)));

  *p = p1;
  *comp = _mixprec_f32_to_bf16_rne (c1 + d);
}
