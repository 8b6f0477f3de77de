/* comm-reference.h — the inputs and the serial reference of test-comm:
 * every rank's input is a function of the rank and the element index, and
 * the expected result of a reduction is the determinism contract written
 * from its wording (fold in rank order in FP32, round once) with the
 * independent number model of dtype-reference.h. */
#pragma once

#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

#include "dtype-reference.h"

static inline guint32
mix32 (guint32 x)
{
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

/* The bits of element @i of rank @rank's input in @dtype, for test case
 * @salt: finite values of many magnitudes (so that the order of additions
 * shows in the result), subnormals, signed zeros and the odd NaN. */
static inline guint32
input_bits (MixprecDType dtype,
            guint        rank,
            guint        world,
            gsize        i,
            guint        salt)
{
  guint32 h = mix32 ((guint32) i * 0x9e3779b1u ^ mix32 (rank * 0x85ebca77u + salt * 0xc2b2ae3du + 1));
  guint32 sign = h >> 31;

  if (i % 101 == 7 && rank == (i / 101) % world)
    {
      switch (dtype)
        {
        case MIXPREC_DTYPE_FLOAT16:
          return 0x7e00u | (h & 0xf);
        case MIXPREC_DTYPE_BFLOAT16:
          return 0x7fc0u | (h & 0xf);
        default:
          return 0x7fc00000u | (h & 0xffff);
        }
    }
  if (i % 53 == 2)
    sign = rank == 0;           /* -0 first, +0 from the others */

  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      if (i % 53 == 2)
        return sign << 15;
      if (i % 17 == 0)
        return sign << 15 | (h & 0x3ff);                  /* subnormal */
      return sign << 15 | (1 + (h >> 10) % 20) << 10 | (h & 0x3ff);
    case MIXPREC_DTYPE_BFLOAT16:
      if (i % 53 == 2)
        return sign << 15;
      return sign << 15 | (107 + (h >> 7) % 41) << 7 | (h & 0x7f);
    default:
      if (i % 53 == 2)
        return sign << 31;
      return sign << 31 | (103 + (h >> 23) % 49) << 23 | (h & 0x7fffff);
    }
}

/* Element values: float16 from a table of dtype-reference.h's decoding,
 * bfloat16 by definition the top half of a float32. */
static inline gfloat
bits_value (MixprecDType dtype,
            guint32      bits)
{
  static gfloat *f16 = NULL;
  static gsize f16_ready = 0;

  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      if (g_once_init_enter (&f16_ready))
        {
          f16 = g_new (gfloat, 65536);
          for (guint32 b = 0; b < 65536; b++)
            f16[b] = (gfloat) ref_decode (&ref_f16, b);
          g_once_init_leave (&f16_ready, 1);
        }
      return f16[bits & 0xffff];
    case MIXPREC_DTYPE_BFLOAT16:
      return ref_f32 (bits << 16);
    default:
      return ref_f32 (bits);
    }
}

static inline guint32
load_bits (MixprecDType  dtype,
           gconstpointer buf,
           gsize         i)
{
  if (dtype != MIXPREC_DTYPE_FLOAT32)
    return ((const guint16 *) buf)[i];
  return ((const guint32 *) buf)[i];
}

static inline void
store_bits (MixprecDType dtype,
            gpointer     buf,
            gsize        i,
            guint32      bits)
{
  if (dtype != MIXPREC_DTYPE_FLOAT32)
    ((guint16 *) buf)[i] = (guint16) bits;
  else
    ((guint32 *) buf)[i] = bits;
}

/* The contract's fold, written from its wording: a sum in FP32 in rank
 * order; a max that keeps the earlier value on ties and lets NaN win. */
static inline gfloat
fold (MixprecReduceOp op,
      gfloat          acc,
      gfloat          term)
{
  if (op == MIXPREC_REDUCE_SUM)
    return acc + term;
  return (acc >= term || isnan (acc)) ? acc : term;
}

/* Whether @bits in @dtype are the FP32 value @acc rounded once. A NaN
 * matches any NaN: payloads are the hardware's business (that every rank
 * gets the same bits is checked separately). */
static inline gboolean
matches (MixprecDType dtype,
         guint32      bits,
         gfloat       acc)
{
  guint32 acc_bits;

  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT16:
      return ref_matches (&ref_f16, bits, ref_round_nearest (&ref_f16, acc));
    case MIXPREC_DTYPE_BFLOAT16:
      return ref_matches (&ref_bf16, bits, ref_round_nearest (&ref_bf16, acc));
    default:
      memcpy (&acc_bits, &acc, sizeof acc_bits);
      return bits == acc_bits || (isnan (acc) && isnan (ref_f32 (bits)));
    }
}
