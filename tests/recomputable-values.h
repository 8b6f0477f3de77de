/* recomputable-values.h — gradients and weights a reader can recompute: a hash of
 * (seed, index) mapped to [-1, 1), scaled over several binades so that
 * rounding matters. Shared by the device-engine tests. */
#pragma once

#include <glib.h>

static inline gfloat
value_at (guint seed, guint64 i)
{
  guint32 x = (guint32) (i * 2654435761u) ^ (seed * 0x9E3779B9u);

  x ^= x >> 15;
  x *= 0x2C1B3C6Du;
  x ^= x >> 12;
  return ((gfloat) (x & 0xFFFFFF) / 8388608.0f - 1.0f) * (gfloat) (1u << (x >> 29)) / 8.0f;
}

/* n values of seed, each times factor, as fp32 bytes. */
static inline GBytes *
values (guint seed, guint64 n, gfloat factor)
{
  gfloat *v = g_new (gfloat, MAX (n, 1));

  for (guint64 i = 0; i < n; i++)
    v[i] = value_at (seed, i) * factor;
  return g_bytes_new_take (v, n * sizeof (gfloat));
}
