/* optim-quant.c — the scalar level of optim-quant.h and the code tables
 * all levels share (linked into each cpu optimizer plugin). */
#include "config.h"

#include <math.h>
#include <pthread.h>

#include "optim-quant.h"

static _MixprecQuantTable tables[4];     /* int8 unsigned, signed; int4 unsigned, signed */
static int tables_ok;
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static unsigned
reference_code (const _MixprecQuantTable *t,
                float                     q)
{
  return t->last == 255 ? _mixprec_quant_code8 (q, t->map) : _mixprec_quant_code4 (q, t->map);
}

/* Floats as unsigned keys in the order of their values (-0 just below +0). */
static uint32_t
order_key (float f)
{
  uint32_t u = _mixprec_f32_bits (f);

  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

static float
from_order_key (uint32_t k)
{
  return _mixprec_f32_from_bits ((k & 0x80000000u) ? k & 0x7FFFFFFFu : ~k);
}

/* optim-quant.h's packed[]: per bucket of _mixprec_quant_packed_bucket(),
 * the code at its bottom and the key of the step inside it; packed_ok
 * stays 0 where a bucket holds two steps, an end bucket one, or a step
 * lies outside the bucket its head names. */
static void
packed_build (_MixprecQuantTable *t)
{
  const uint32_t first = _MIXPREC_QUANT_EXP_LO << 7, last = (_MIXPREC_QUANT_EXP_HI << 7) | 127u;

  t->packed_ok = 0;
  for (uint32_t sign = 0; sign < 2; sign++)
    for (uint32_t v = first; v <= last; v++)
      {
        uint32_t head = (sign << 31) | (v << 16);
        uint32_t low = head, high = head | 0xFFFFu, key = _MIXPREC_QUANT_PACKED_NO_STEP;
        int end = v == first || v == last;
        unsigned c_lo, c_hi;

        if (v == first)
          low = sign << 31;                 /* down to zero */
        if (v == last)
          high = (sign << 31) | 0x7F800000u;  /* up to infinity */
        /* In value order: a larger magnitude is a smaller negative value. */
        c_lo = reference_code (t, _mixprec_f32_from_bits (sign ? high : low));
        c_hi = reference_code (t, _mixprec_f32_from_bits (sign ? low : high));
        if (c_hi > c_lo + 1 || (c_hi != c_lo && end))
          return;
        if (c_hi != c_lo)
          {
            uint32_t step = _mixprec_f32_bits (t->up[c_lo + 1]);

            if ((step & 0xFFFF0000u) != head)
              return;
            key = sign ? 0xFFFFu - (step & 0xFFFFu) : step & 0xFFFFu;
          }
        t->packed[_mixprec_quant_packed_bucket (head)] = (c_lo << _MIXPREC_QUANT_PACKED_CODE_SHIFT) | key;
      }
  t->packed_ok = 1;
}

static int
table_build (_MixprecQuantTable *t,
             unsigned            bits,
             int                 is_signed)
{
  t->map = _mixprec_qmap (bits, is_signed);
  t->last = bits == 8 ? 255 : 15;
  t->up[0] = -INFINITY;
  /* Codes are monotonic in q and every code is reached between -4 and 4
   * (the maps lie in [-1, 1]): bisect for the first float of each. */
  for (unsigned c = 1; c <= t->last; c++)
    {
      uint32_t lo = order_key (-4.0f), hi = order_key (4.0f);

      while (lo < hi)
        {
          uint32_t mid = lo + (hi - lo) / 2;

          if (reference_code (t, from_order_key (mid)) >= c)
            hi = mid;
          else
            lo = mid + 1;
        }
      t->up[c] = from_order_key (lo);
    }
  /* Past the last code: NaN, which no comparison passes (+Inf would let
   * q = +Inf step past the last code). */
  for (unsigned c = t->last + 1; c < G_N_ELEMENTS (t->up); c++)
    t->up[c] = _mixprec_f32_from_bits (_MIXPREC_QNAN_BITS);

  {
    unsigned levels = t->last == 255 ? 8 : 4;

    for (unsigned l = 0; l < levels; l++)
      {
        unsigned step = (t->last + 1) >> (l + 1);

        for (unsigned j = 0; j < (1u << l); j++)
          t->level[l][j] = t->up[(2 * j + 1) * step];
      }
  }

  for (uint32_t sign = 0; sign < 2; sign++)
    for (uint32_t e = _MIXPREC_QUANT_EXP_LO; e <= _MIXPREC_QUANT_EXP_HI; e++)
      for (uint32_t m = 0; m < 128; m++)
        {
          uint32_t head = (sign << 31) | (e << 23) | (m << 16);
          uint32_t low, high;
          float lo_v, hi_v;
          unsigned c_lo, c_hi;

          if (e == _MIXPREC_QUANT_EXP_LO)
            {
              if (m != 0)
                continue;
              /* Every magnitude below 2^-24, zero included. */
              low = sign << 31;
              high = (sign << 31) | ((_MIXPREC_QUANT_EXP_LO + 1) << 23);
              high -= 1;
            }
          else
            {
              low = head;
              high = head | 0xFFFFu;
            }
          /* The bucket's smallest and largest values. */
          lo_v = _mixprec_f32_from_bits (sign ? high : low);
          hi_v = _mixprec_f32_from_bits (sign ? low : high);
          c_lo = reference_code (t, lo_v);
          c_hi = reference_code (t, hi_v);
          if (c_hi > c_lo + 1)
            return 0;
          t->lut[_mixprec_quant_bucket (head)] = (uint8_t) c_lo;
        }
  packed_build (t);
  if (bits == 8)
    for (unsigned c = 0; c < 256; c++)
      {
        uint32_t u = _mixprec_f32_bits (t->map[c]);

        for (unsigned b = 0; b < 4; b++)
          t->planes[b][c] = (uint8_t) (u >> (8 * b));
      }
  return 1;
}

static void
tables_build (void)
{
  tables_ok = table_build (&tables[0], 8, 0) && table_build (&tables[1], 8, 1) &&
              table_build (&tables[2], 4, 0) && table_build (&tables[3], 4, 1);
}

int
_mixprec_quant_tables_init (void)
{
  pthread_once (&tables_once, tables_build);
  return tables_ok;
}

const _MixprecQuantTable *
_mixprec_quant_table (unsigned bits,
                      int      is_signed)
{
  if (!_mixprec_quant_tables_init ())
    return NULL;
  return &tables[(bits == 8 ? 0 : 2) + (is_signed ? 1 : 0)];
}

/* ------------------------------------------------------------ scalar level */

void
_mixprec_quant_decode_scalar (unsigned    format,
                              int         is_signed,
                              const void *base,
                              size_t      start,
                              size_t      len,
                              float       scale,
                              float      *out)
{
  for (size_t i = 0; i < len; i++)
    out[i] = _mixprec_state_decode1 (format, is_signed,
                                     _mixprec_state_load_code (format, base, start + i), scale);
}

float
_mixprec_quant_encode_scalar (unsigned     format,
                              int          is_signed,
                              const float *in,
                              size_t       len,
                              void        *base,
                              size_t       start)
{
  const _MixprecQuantTable *t = NULL;
  uint32_t absmax = 0;
  float scale;

  for (size_t i = 0; i < len; i++)
    absmax = _mixprec_absmax_bits (absmax, in[i]);
  scale = _mixprec_state_block_scale (format, absmax);
  if (format == _MIXPREC_QFMT_INT8_DYNAMIC || format == _MIXPREC_QFMT_INT4_DYNAMIC)
    t = _mixprec_quant_table (format == _MIXPREC_QFMT_INT8_DYNAMIC ? 8 : 4, is_signed);
  if (t == NULL)
    {
      for (size_t i = 0; i < len; i++)
        _mixprec_state_store_code (format, base, start + i,
                                   _mixprec_state_encode1 (format, is_signed, in[i], scale));
      return scale;
    }
  if (format == _MIXPREC_QFMT_INT8_DYNAMIC)
    {
      uint8_t *b = (uint8_t *) base + start;

      for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t) _mixprec_quant_fast_code (t, _mixprec_num_div (in[i], scale));
      return scale;
    }
  /* int4: two codes per byte, the even element low; an odd tail keeps the
   * byte's other nibble. */
  {
    uint8_t *b = (uint8_t *) base + start / 2;
    size_t i = 0;

    for (; i + 2 <= len; i += 2)
      b[i / 2] = (uint8_t) (_mixprec_quant_fast_code (t, _mixprec_num_div (in[i], scale)) |
                            _mixprec_quant_fast_code (t, _mixprec_num_div (in[i + 1], scale)) << 4);
    if (i < len)
      _mixprec_state_store_code (format, base, start + i,
                                 _mixprec_quant_fast_code (t, _mixprec_num_div (in[i], scale)));
  }
  return scale;
}

/* ------------------------------------------------------------ masters */

void
_mixprec_quant_master_load (unsigned       master_format,
                            const guint16 *working,
                            const void    *extra,
                            size_t         len,
                            float         *out)
{
  if (master_format == _MIXPREC_QMASTER_REMAINDER)
    {
      const int16_t *rem = extra;

      for (size_t i = 0; i < len; i++)
        out[i] = _mixprec_remainder_join (working[i], rem[i]);
    }
  else
    for (size_t i = 0; i < len; i++)
      out[i] = _mixprec_bf16_to_f32 (working[i]);
}

void
_mixprec_quant_master_store (unsigned       master_format,
                             const float   *in,
                             size_t         len,
                             guint16       *working,
                             void          *extra)
{
  if (master_format == _MIXPREC_QMASTER_REMAINDER)
    {
      int16_t *rem = extra;

      for (size_t i = 0; i < len; i++)
        _mixprec_remainder_split (in[i], &working[i], &rem[i]);
    }
  else
    {
      guint16 *comp = extra;

      for (size_t i = 0; i < len; i++)
        _mixprec_kahan_step (in[i], &working[i], &comp[i]);
    }
}
