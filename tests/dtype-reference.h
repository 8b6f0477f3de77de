/* dtype-reference.h — an independent model of the number formats for
 * test-dtype and bench/dtype-sweep: values in double precision, rounding
 * with frexp/nearbyint, decoding with ldexp. It shares no code and no
 * method with the library's integer bit manipulation. */
#pragma once

#include <math.h>
#include <string.h>
#include <glib.h>

typedef struct {
  const gchar *name;
  guint bits;         /* storage width */
  gint exp_bits;
  gint man_bits;
  gint bias;
  gboolean no_inf;    /* e4m3fn: no infinities, only S.1111.111 is NaN */
  gdouble max;
} RefFormat;

static const RefFormat ref_bf16 = { "bfloat16", 16, 8, 7, 127, FALSE, 0x1.fep+127 };
static const RefFormat ref_f16 = { "float16", 16, 5, 10, 15, FALSE, 65504.0 };
static const RefFormat ref_e4m3 = { "float8_e4m3", 8, 4, 3, 7, TRUE, 448.0 };
static const RefFormat ref_e5m2 = { "float8_e5m2", 8, 5, 2, 15, FALSE, 57344.0 };

static inline gint
ref_emin (const RefFormat *f)
{
  return 1 - f->bias;
}

/* The value of bit pattern @bits of @f. */
static inline gdouble
ref_decode (const RefFormat *f,
            guint32          bits)
{
  guint32 sign = (bits >> (f->bits - 1)) & 1;
  guint32 e = (bits >> f->man_bits) & ((1u << f->exp_bits) - 1);
  guint32 m = bits & ((1u << f->man_bits) - 1);
  guint32 e_max = (1u << f->exp_bits) - 1;
  gdouble v;

  if (f->no_inf && e == e_max && m == (1u << f->man_bits) - 1)
    v = NAN;
  else if (!f->no_inf && e == e_max)
    v = m != 0 ? NAN : INFINITY;
  else if (e == 0)
    v = ldexp ((gdouble) m, ref_emin (f) - f->man_bits);
  else
    v = ldexp ((gdouble) (m + (1u << f->man_bits)), (gint) e - f->bias - f->man_bits);
  return sign ? -v : v;
}

/* The gap between neighbours of @f around the finite, non-zero @x. */
static inline gdouble
ref_quantum (const RefFormat *f,
             gdouble          x)
{
  gint e;

  frexp (x, &e);                /* |x| in [2^(e-1), 2^e) */
  return ldexp (1.0, MAX (e - 1, ref_emin (f)) - f->man_bits);
}

/* What a rounded value @r of @f becomes when it lies past the format's
 * largest finite value: ±Inf, or NaN where @f has no Inf. */
static inline gdouble
ref_overflow (const RefFormat *f,
              gdouble          r)
{
  if (fabs (r) > f->max)
    return f->no_inf ? NAN : copysign (INFINITY, r);
  return r;
}

/* @x rounded to nearest, ties to even, in @f: ±Inf for overflow, NaN
 * where @f has no Inf. */
static inline gdouble
ref_round_nearest (const RefFormat *f,
                   gdouble          x)
{
  gdouble q, r;

  if (isnan (x))
    return NAN;
  if (isinf (x))
    return f->no_inf ? NAN : x;
  if (x == 0)
    return x;
  q = ref_quantum (f, x);
  r = nearbyint (x / q) * q;    /* the default rounding mode: ties to even */
  if (r == 0)
    return copysign (0.0, x);
  return ref_overflow (f, r);
}

/* The two values of @f around @x that stochastic rounding may give: *lo
 * toward zero and *hi away from zero, equal when @x is exact, each after
 * the overflow rule. Inf and NaN give their round-to-nearest result. */
static inline void
ref_neighbours (const RefFormat *f,
                gdouble          x,
                gdouble         *lo,
                gdouble         *hi)
{
  gdouble q, t;

  if (isnan (x) || isinf (x) || x == 0)
    {
      *lo = *hi = ref_round_nearest (f, x);
      return;
    }
  q = ref_quantum (f, x);
  t = trunc (x / q) * q;
  *lo = ref_overflow (f, t == 0 ? copysign (0.0, x) : t);
  *hi = ref_overflow (f, t == x ? t : t + copysign (q, x));
}

/* Whether @bits of @f encode exactly @expected (same sign for zeros, any
 * NaN for NaN). */
static inline gboolean
ref_matches (const RefFormat *f,
             guint32          bits,
             gdouble          expected)
{
  gdouble v = ref_decode (f, bits);

  if (isnan (expected))
    return isnan (v);
  return v == expected && signbit (v) == signbit (expected);
}

static inline gfloat
ref_f32 (guint32 u)
{
  gfloat f;

  memcpy (&f, &u, sizeof f);
  return f;
}
