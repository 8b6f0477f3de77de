/* optim-quant.h — the low-bit state slots of MixprecOptimizerV3 for the
 * cpu optimizers: a block of a slot decoded into an FP32 tile and the
 * updated tile encoded back (its absmax, its scale, its codes), at each
 * kernel level. Every level gives the bits of numeric/numeric-quant.h's
 * one-element reference; tests/test-optim-formats holds them to it.
 *
 * The int8 / int4 codes are found without torchao's binary search: its
 * rule is a monotonic step function of q (a larger q never gets a smaller
 * code), so a code c is reached exactly from the smallest float up[c]
 * with code >= c. A table indexed by q's sign, exponent and top seven
 * mantissa bits gives the code at the bottom of q's bucket, and one
 * comparison with up[] the code of q (the scalar level); the AVX2 level
 * gathers one word per bucket that holds both the code and where in the
 * bucket the step lies (packed[]), so the second lookup becomes an
 * integer comparison; AVX-512 does the same on Intel's cores and runs a
 * binary search over up[] held in registers on AMD's, where gathers are
 * slow. _mixprec_quant_tables_init()
 * computes up[] from the reference rule by bisection over the floats,
 * builds the buckets and checks that no bucket spans two steps; the
 * tests compare the result with the reference at every step, on both
 * sides of it, and on a dense sample of [-1, 1]. */
#pragma once

#include "optim-common.h"
#include "numeric/numeric-quant.h"

G_BEGIN_DECLS

/* Buckets: 2 signs x 26 exponents (one for |q| < 2^-24, then 2^-24 ..
 * 2^1, larger magnitudes clamped into the last) x 128 mantissa heads. */
#define _MIXPREC_QUANT_EXP_LO 102u
#define _MIXPREC_QUANT_EXP_HI 127u
#define _MIXPREC_QUANT_N_EXP (_MIXPREC_QUANT_EXP_HI - _MIXPREC_QUANT_EXP_LO + 1)
#define _MIXPREC_QUANT_N_BUCKETS (2 * _MIXPREC_QUANT_N_EXP * 128)

typedef struct {
  const float *map;
  unsigned last;                  /* 255 or 15 */
  /* up[c], c = 1 .. last: the smallest float whose code is at least c;
   * NaN past last. Read at candidate + 1. */
  float up[258] __attribute__ ((aligned (64)));
  /* The code at the bottom of each bucket, with four bytes of padding so
   * a 32-bit gather at any index stays inside. */
  uint8_t lut[_MIXPREC_QUANT_N_BUCKETS + 4] __attribute__ ((aligned (64)));
  /* The same steps for a branch-free binary search, level by level: at
   * level l (step 128 >> l of the int8 search, 8 >> l of the int4 one)
   * the candidate c is a multiple of twice the step and the comparison
   * is with up[c + step], which is level[l][c / (2 step)]. Registers hold
   * these where gathers are slow (AVX-512). */
  float level[8][128] __attribute__ ((aligned (64)));
  /* The codes again, for a single gather and no second lookup (the AVX2
   * level), in buckets of _mixprec_quant_packed_bucket(): per bucket the
   * code at its bottom above bit 17, and below it the key T of the step
   * inside it, 0x10000 where it holds none. The floats of a bucket share
   * its head's top sixteen bits, and so does a step inside it: q is at or
   * past the step exactly when key(q) >= T, key(q) being q's low sixteen
   * bits for positive q and their complement for negative q (a larger
   * magnitude is a smaller value there). The two end buckets of each sign
   * also take every smaller (down to zero) or larger (up to infinity)
   * magnitude, so they must hold no step; packed_ok says the table was
   * built, and the AVX2 level keeps lut[] and up[] where it was not. */
  uint32_t packed[_MIXPREC_QUANT_N_BUCKETS] __attribute__ ((aligned (64)));
  int packed_ok;
  /* The int8 map split into its four byte planes (planes[b][c] is byte b,
   * little end first, of map[c]): a byte permute looks up 64 codes of
   * one plane at a time where the CPU has AVX-512 VBMI. */
  uint8_t planes[4][256] __attribute__ ((aligned (64)));
} _MixprecQuantTable;

#define _MIXPREC_QUANT_PACKED_NO_STEP 0x10000u
#define _MIXPREC_QUANT_PACKED_CODE_SHIFT 17

/* Builds the four tables, once per process (pthread_once); returns 0
 * when a bucket would span two steps (never, for these maps: the tests
 * assert it), and the kernels then keep the reference search. */
int  _mixprec_quant_tables_init (void);
/* The table of @bits (8 or 4) for a signed or unsigned slot. */
const _MixprecQuantTable *_mixprec_quant_table (unsigned bits,
                                                int      is_signed);

static inline unsigned
_mixprec_quant_bucket (uint32_t u)
{
  uint32_t e = (u >> 23) & 0xFFu;
  uint32_t m = (u >> 16) & 0x7Fu;

  if (e <= _MIXPREC_QUANT_EXP_LO)
    {
      e = _MIXPREC_QUANT_EXP_LO;
      m = 0;
    }
  else if (e > _MIXPREC_QUANT_EXP_HI)
    e = _MIXPREC_QUANT_EXP_HI;
  return (((u >> 31) * _MIXPREC_QUANT_N_EXP + (e - _MIXPREC_QUANT_EXP_LO)) << 7) | m;
}

/* The bucket of packed[]: q's exponent and top seven mantissa bits,
 * clamped to those from 2^(EXP_LO - 127) to the last head below
 * 2^(EXP_HI - 126), in the half of the table of q's sign. */
static inline unsigned
_mixprec_quant_packed_bucket (uint32_t u)
{
  uint32_t v = (u >> 16) & 0x7FFFu;

  if (v < (_MIXPREC_QUANT_EXP_LO << 7))
    v = _MIXPREC_QUANT_EXP_LO << 7;
  else if (v > ((_MIXPREC_QUANT_EXP_HI << 7) | 127u))
    v = (_MIXPREC_QUANT_EXP_HI << 7) | 127u;
  return (u >> 31) * (_MIXPREC_QUANT_N_EXP << 7) + v - (_MIXPREC_QUANT_EXP_LO << 7);
}

/* _mixprec_quant_code8/4 (q, map) through the table. */
static inline unsigned
_mixprec_quant_fast_code (const _MixprecQuantTable *t,
                          float                     q)
{
  uint32_t u = _mixprec_f32_bits (q);
  unsigned c;

  if ((u & 0x7FFFFFFFu) > 0x7F800000u)
    return 0;
  c = t->lut[_mixprec_quant_bucket (u)];
  return c + (q >= t->up[c + 1] ? 1u : 0u);
}

/* Decodes elements start .. start + len - 1 of a slot of @format (a
 * blocked one, _mixprec_state_is_blocked()) with the block's @scale into
 * @out; encodes @len FP32 values of @in as elements start .. of the slot
 * and returns the block's new scale. start is even for INT4_DYNAMIC, and
 * len too unless the block is the last of the slot. */
typedef void  (*_MixprecQuantDecode) (unsigned     format,
                                      int          is_signed,
                                      const void  *base,
                                      size_t       start,
                                      size_t       len,
                                      float        scale,
                                      float       *out);
typedef float (*_MixprecQuantEncode) (unsigned     format,
                                      int          is_signed,
                                      const float *in,
                                      size_t       len,
                                      void        *base,
                                      size_t       start);

void  _mixprec_quant_decode_scalar (unsigned format, int is_signed, const void *base,
                                    size_t start, size_t len, float scale, float *out);
float _mixprec_quant_encode_scalar (unsigned format, int is_signed, const float *in,
                                    size_t len, void *base, size_t start);
void  _mixprec_quant_decode_avx2   (unsigned format, int is_signed, const void *base,
                                    size_t start, size_t len, float scale, float *out);
float _mixprec_quant_encode_avx2   (unsigned format, int is_signed, const float *in,
                                    size_t len, void *base, size_t start);
void  _mixprec_quant_decode_avx512 (unsigned format, int is_signed, const void *base,
                                    size_t start, size_t len, float scale, float *out);
float _mixprec_quant_encode_avx512 (unsigned format, int is_signed, const float *in,
                                    size_t len, void *base, size_t start);
/* The AVX-512 decode with the int8 map looked up by byte permutes: for a
 * CPU that also has AVX-512 VBMI (_mixprec_quant_have_vbmi()); the same
 * bits as every other level. */
void  _mixprec_quant_decode_avx512_vbmi (unsigned format, int is_signed, const void *base,
                                         size_t start, size_t len, float scale, float *out);
int   _mixprec_quant_have_vbmi     (void);
/* The two int8 encoders _mixprec_quant_encode_avx512() picks between by
 * CPU (the same bits): the search in registers and the packed[] gather. */
float _mixprec_quant_encode_avx512_search (unsigned format, int is_signed, const float *in,
                                           size_t len, void *base, size_t start);
float _mixprec_quant_encode_avx512_gather (unsigned format, int is_signed, const float *in,
                                           size_t len, void *base, size_t start);

/* The remainder and Kahan masters over a tile: the FP32 parameters from
 * (working, extra) and back, at each level. */
typedef void (*_MixprecQuantMasterLoad)  (unsigned       master_format,
                                          const guint16 *working,
                                          const void    *extra,
                                          size_t         len,
                                          float         *out);
typedef void (*_MixprecQuantMasterStore) (unsigned       master_format,
                                          const float   *in,
                                          size_t         len,
                                          guint16       *working,
                                          void          *extra);

void  _mixprec_quant_master_load         (unsigned master_format, const guint16 *working,
                                          const void *extra, size_t len, float *out);
void  _mixprec_quant_master_store        (unsigned master_format, const float *in, size_t len,
                                          guint16 *working, void *extra);
void  _mixprec_quant_master_load_avx2    (unsigned master_format, const guint16 *working,
                                          const void *extra, size_t len, float *out);
void  _mixprec_quant_master_store_avx2   (unsigned master_format, const float *in, size_t len,
                                          guint16 *working, void *extra);
void  _mixprec_quant_master_load_avx512  (unsigned master_format, const guint16 *working,
                                          const void *extra, size_t len, float *out);
void  _mixprec_quant_master_store_avx512 (unsigned master_format, const float *in, size_t len,
                                          guint16 *working, void *extra);

G_END_DECLS
