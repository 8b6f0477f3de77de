/* numeric-rht.h — the random Hadamard transform (RHT) of 16-element groups
 * that NVFP4 training applies before quantising: a 16x16 Sylvester
 * Hadamard matrix times a diagonal of random signs, scaled by 1/4 so that
 * the transform is orthogonal. One fixed order of float32 operations, so
 * that every build, SIMD level and device gives the same bits. */
#pragma once

#include "numeric-base.h"

#define _MIXPREC_RHT_GROUP 16

/* @y = the transform of the 16 values @x, as a row vector times
 * M = diag(s) H / 4 (Transformer Engine's `x.reshape(-1, 16) @ rht_matrix`):
 * the signs first (s_i = -1 where bit i of @sign_mask is set), then the
 * in-place butterflies of the fast Walsh-Hadamard transform (pairs
 * h = 1, 2, 4, 8 apart: a + b, a - b), then the exact product by 0.25.
 * @inverse: y = x M^T = H diag(s) / 4 applied as the butterflies, the
 * 0.25, then the signs (M is orthogonal, so M^T undoes M up to the
 * roundings of the sums). @x and @y may be the same array. */
MIXPREC_NUMERIC_FN void
_mixprec_rht16 (const float *x,
                uint16_t     sign_mask,
                int          inverse,
                float       *y)
{
  float v[_MIXPREC_RHT_GROUP];

  for (int i = 0; i < _MIXPREC_RHT_GROUP; i++)
    v[i] = !inverse && ((sign_mask >> i) & 1u) ? -x[i] : x[i];
  for (int h = 1; h < _MIXPREC_RHT_GROUP; h <<= 1)
    for (int i = 0; i < _MIXPREC_RHT_GROUP; i += 2 * h)
      for (int j = i; j < i + h; j++)
        {
          float a = v[j], b = v[j + h];

          v[j] = a + b;
          v[j + h] = a - b;
        }
  for (int i = 0; i < _MIXPREC_RHT_GROUP; i++)
    {
      float w = v[i] * 0.25f;

      y[i] = inverse && ((sign_mask >> i) & 1u) ? -w : w;
    }
}

/* The 16 signs of a seed: the low 16 bits of SplitMix64's first output
 * for @seed, so that every rank that reads the same seed derives the same
 * diagonal without a message. */
MIXPREC_NUMERIC_FN uint16_t
_mixprec_rht_sign_mask (uint64_t seed)
{
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;

  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (uint16_t) (z & 0xFFFFu);
}
