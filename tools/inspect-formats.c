/* inspect-formats.c — `mixprec-inspect --formats`: the limits of each number
 * format, from the library's own tables: the dtypes, then the formats of
 * the 4-bit block recipes (FP4 E2M1 elements, E8M0 scales; NVFP4's E4M3
 * scales are the float8_e4m3 row). */
#include "config.h"

#include "inspect-private.h"

#define ROW "%-12s %4u %14.6g %14.6g %14.6g %14.6g\n"

int
inspect_formats (void)
{
  gfloat e2m1_one = mixprec_fp4_e2m1_to_float (2);

  g_print ("%-12s %4s %14s %14s %14s %14s\n",
           "format", "bits", "max", "min normal", "min subnormal", "epsilon");
  for (gint d = 0; d < MIXPREC_DTYPE_COUNT; d++)
    g_print (ROW,
             mixprec_dtype_get_name (d), mixprec_dtype_get_bits (d),
             mixprec_dtype_get_max (d), mixprec_dtype_get_min_normal (d),
             mixprec_dtype_get_min_subnormal (d), mixprec_dtype_get_epsilon (d));
  /* Block formats, not dtypes: E2M1 is packed two per byte and only
   * written through mixprec_quantize_blocks(); E8M0 is a power of two
   * (no subnormals, epsilon 1: the next value after 1 is 2). */
  g_print (ROW, "float4_e2m1", 4u,
           (gdouble) mixprec_fp4_e2m1_to_float (7), (gdouble) e2m1_one,
           (gdouble) mixprec_fp4_e2m1_to_float (1),
           (gdouble) (mixprec_fp4_e2m1_to_float (3) - e2m1_one));
  g_print (ROW, "e8m0", 8u,
           (gdouble) mixprec_e8m0_to_float (254), (gdouble) mixprec_e8m0_to_float (0),
           (gdouble) mixprec_e8m0_to_float (0), (gdouble) (mixprec_e8m0_to_float (128) - 1.0f));
  return 0;
}
