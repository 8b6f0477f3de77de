/* inspect-formats.c — `mixprec-inspect --formats`: the limits of each number
 * format, from the library's own tables. */
#include "config.h"

#include "inspect-private.h"

int
inspect_formats (void)
{
  g_print ("%-12s %4s %14s %14s %14s %14s\n",
           "format", "bits", "max", "min normal", "min subnormal", "epsilon");
  for (gint d = 0; d < MIXPREC_DTYPE_COUNT; d++)
    g_print ("%-12s %4u %14.6g %14.6g %14.6g %14.6g\n",
             mixprec_dtype_get_name (d), mixprec_dtype_get_bits (d),
             mixprec_dtype_get_max (d), mixprec_dtype_get_min_normal (d),
             mixprec_dtype_get_min_subnormal (d), mixprec_dtype_get_epsilon (d));
  return 0;
}
