/* optim-common-avx2.h — the 8-lane twin of optim-common.h's per-element
 * plumbing, bit-identical to it. Include only from files compiled with
 * $(MIXPREC_SIMD_CFLAGS); their code runs only after init() found AVX2,
 * FMA and F16C. */
#pragma once

#include "optim-common.h"
#include "mixprec-avx2-private.h"

G_BEGIN_DECLS

/* Elements of a bfloat16 state slot staged in FP32 at once; a multiple
 * of eight. */
#define _MIXPREC_OPTIM_STAGE 128

typedef __m256 (*_MixprecOptimUpdate8) (const float  *consts,
                                        __m256        p,
                                        __m256        g,
                                        float *const *states,
                                        size_t        i);

static inline __attribute__ ((always_inline)) __m256
_mixprec_optim_load8 (MixprecPluginDType dtype,
                      const void        *base,
                      size_t             i)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return _mixprec_avx2_bf16_to_f32 (_mm_loadu_si128 ((const __m128i *) ((const guint16 *) base + i)));
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return _mixprec_avx2_f16_to_f32 (_mm_loadu_si128 ((const __m128i *) ((const guint16 *) base + i)));
    default:
      return _mm256_loadu_ps ((const float *) base + i);
    }
}

static inline __attribute__ ((always_inline)) void
_mixprec_optim_store_working8 (MixprecPluginDType     dtype,
                               int                    sr,
                               uint64_t               seed,
                               uint64_t               index,
                               void                  *base,
                               size_t                 i,
                               __m256                 p)
{
  __m128i *w16 = (__m128i *) ((guint16 *) base + i);

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      _mm_storeu_si128 (w16, sr ? _mixprec_avx2_f32_to_bf16_sr (p, _mixprec_avx2_sr_bits16 (seed, index))
                                : _mixprec_avx2_f32_to_bf16_rne (p));
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      _mm_storeu_si128 (w16, sr ? _mixprec_avx2_f32_to_f16_sr (p, _mixprec_avx2_sr_bits (seed, index))
                                : _mixprec_avx2_f32_to_f16_rne (p));
      break;
    default:
      _mm256_storeu_ps ((float *) base + i, p);
      break;
    }
}

/* ------------------------------------------------------------ numerics
 * A run's numerics (ABI 1.6) eight elements at a time, element i in lane
 * i % 8 of the sums as _mixprec_optim_measure1() adds it: the loops start
 * runs at element 0 and cover multiples of eight, the scalar loop the
 * rest. */

typedef struct {
  __m256 dsum, msum;
  __m256i amax, under, over, floor_field;
  __m256 scale;
  uint64_t nonfinite, nonzero, n_under, n_over, stale;
} _MixprecOptimAcc8;

static inline __attribute__ ((always_inline)) void
_mixprec_optim_acc8_begin (_MixprecOptimAcc8          *acc,
                           const _MixprecOptimMeasure *m)
{
  acc->dsum = _mm256_loadu_ps (m->dl);
  acc->msum = _mm256_loadu_ps (m->ml);
  acc->amax = _mm256_set1_epi32 ((int) m->amax);
  acc->under = _mm256_set1_epi32 ((int) m->grad_under);
  acc->over = _mm256_set1_epi32 ((int) m->grad_over);
  acc->floor_field = _mm256_set1_epi32 ((int) m->floor_field);
  acc->scale = _mm256_set1_ps (m->scale);
  acc->nonfinite = acc->nonzero = acc->n_under = acc->n_over = acc->stale = 0;
}

static inline __attribute__ ((always_inline)) void
_mixprec_optim_acc8_end (const _MixprecOptimAcc8 *acc,
                         _MixprecOptimMeasure    *m)
{
  uint32_t lanes[8];

  _mm256_storeu_ps (m->dl, acc->dsum);
  _mm256_storeu_ps (m->ml, acc->msum);
  _mm256_storeu_si256 ((__m256i *) lanes, acc->amax);
  for (unsigned k = 0; k < 8; k++)
    m->amax = lanes[k] > m->amax ? lanes[k] : m->amax;
  m->nonfinite += acc->nonfinite;
  m->nonzero += acc->nonzero;
  m->under += acc->n_under;
  m->over += acc->n_over;
  m->stale += acc->stale;
}

static inline __attribute__ ((always_inline)) unsigned
_mixprec_optim_count8 (__m256i mask)
{
  return (unsigned) __builtin_popcount ((unsigned) _mm256_movemask_ps (_mm256_castsi256_ps (mask)));
}

/* Magnitudes compare as unsigned integers: x >= y exactly where
 * max (x, y) == x. */
static inline __attribute__ ((always_inline)) __m256i
_mixprec_optim_ge8 (__m256i x,
                    __m256i y)
{
  return _mm256_cmpeq_epi32 (_mm256_max_epu32 (x, y), x);
}

static inline __attribute__ ((always_inline)) void
_mixprec_optim_measure8 (_MixprecOptimAcc8  *acc,
                         __m256              graw,
                         __m256              old,
                         __m256              now,
                         int                 has_master,
                         MixprecPluginDType  wdtype,
                         const void         *working,
                         size_t              i)
{
  const __m256i ones = _mm256_set1_epi32 (-1);
  __m256i a = _mm256_and_si256 (_mm256_castps_si256 (graw), _mm256_set1_epi32 (0x7fffffff));
  __m256i nonfinite = _mm256_cmpgt_epi32 (a, _mm256_set1_epi32 (0x7f7fffff));
  __m256i nonzero = _mm256_andnot_si256 (_mm256_or_si256 (nonfinite, _mm256_cmpeq_epi32 (a, _mm256_setzero_si256 ())),
                                         ones);

  acc->nonfinite += _mixprec_optim_count8 (nonfinite);
  acc->nonzero += _mixprec_optim_count8 (nonzero);
  acc->n_under += _mixprec_optim_count8 (_mm256_andnot_si256 (_mixprec_optim_ge8 (a, acc->under), nonzero));
  acc->n_over += _mixprec_optim_count8 (_mm256_and_si256 (_mixprec_optim_ge8 (a, acc->over), nonzero));
  acc->amax = _mm256_max_epu32 (acc->amax, _mm256_and_si256 (a, nonzero));
  if (!has_master)
    return;
  {
    __m256 d = _mm256_sub_ps (now, old);

    acc->dsum = _mm256_add_ps (acc->dsum, _mm256_mul_ps (d, d));
    acc->msum = _mm256_add_ps (acc->msum, _mm256_mul_ps (old, old));
    if (working != NULL)
      {
        __m256i field = _mm256_and_si256 (_mm256_srli_epi32 (_mm256_castps_si256 (_mixprec_optim_load8 (wdtype, working, i)), 23),
                                          _mm256_set1_epi32 (0xff));
        __m256 half = _mm256_castsi256_ps (_mm256_slli_epi32 (_mm256_max_epi32 (field, acc->floor_field), 23));
        __m256i finite = _mm256_andnot_si256 (_mm256_cmpeq_epi32 (field, _mm256_set1_epi32 (0xff)), ones);
        __m256 ad = _mm256_and_ps (d, _mm256_castsi256_ps (_mm256_set1_epi32 (0x7fffffff)));
        __m256 below = _mm256_cmp_ps (_mm256_mul_ps (ad, acc->scale), half, _CMP_LT_OQ);

        acc->stale += _mixprec_optim_count8 (_mm256_and_si256 (_mm256_castps_si256 (below), finite));
      }
  }
}

/* The 8-lane loop around @update over the first n - n % 8 elements;
 * returns that count (the caller's scalar kernel does the rest). Every
 * field and constant is read into a local first: the 16-bit stores may
 * alias anything, and the compiler would otherwise reload the arguments
 * and broadcast the constants again at each block.
 *
 * bfloat16 state slots are staged as in _mixprec_optim_run_scalar(),
 * widened into an FP32 buffer the update works on and then rounded back
 * with the same rounding and random bits per element, but a run of
 * _MIXPREC_OPTIM_STAGE elements at a time: staged eight at a time, each
 * group's widen, update and narrow made one chain of stores and reloads
 * through the same buffer, which the core could not overlap with the next
 * group's (three times the FP32-state kernel's time, on Zen 3). */
static inline __attribute__ ((always_inline)) size_t
_mixprec_optim_loop_avx2 (const _MixprecOptimRange *r,
                          const float              *consts,
                          _MixprecOptimUpdate8      update,
                          _MixprecOptimMeasure     *meas)
{
  _MixprecOptimAcc8 acc;

  float c[_MIXPREC_OPTIM_MAX_CONSTS];
  const MixprecOptimizerStepV1 *a = r->args;
  const __m256 factor = _mm256_set1_ps (a->grad_factor);
  const MixprecPluginDType gdtype = a->grad_dtype;
  const MixprecPluginDType wdtype = a->working_dtype;
  const MixprecPluginDType pdtype = r->master != NULL ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : wdtype;
  const int sr = a->rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  const uint64_t seed = a->seed;
  const uint64_t first_index = a->first_index;
  const void *grad = r->grad;
  float *master = r->master;
  void *working = r->working;
  const void *pbase = master != NULL ? (const void *) master : working;
  float *states[_MIXPREC_OPTIM_MAX_STATES] = { NULL };
  const unsigned n_states = r->n_states < _MIXPREC_OPTIM_MAX_STATES ? r->n_states
                                                                     : _MIXPREC_OPTIM_MAX_STATES;
  size_t n8 = r->n - r->n % 8;

  memcpy (c, consts, sizeof c);
  for (unsigned k = 0; k < n_states; k++)
    states[k] = r->states[k];
  if (meas != NULL)
    _mixprec_optim_acc8_begin (&acc, meas);

  if (r->state_dtypes == NULL)
    {
      for (size_t i = 0; i < n8; i += 8)
        {
          __m256 p = _mixprec_optim_load8 (pdtype, pbase, i);
          __m256 graw = _mixprec_optim_load8 (gdtype, grad, i);
          __m256 g = _mm256_mul_ps (graw, factor);
          __m256 old = p;

          p = update (c, p, g, states, i);
          if (master != NULL)
            _mm256_storeu_ps (master + i, p);
          if (working != NULL)
            _mixprec_optim_store_working8 (wdtype, sr, seed, first_index + i, working, i, p);
          if (meas != NULL)
            _mixprec_optim_measure8 (&acc, graw, old, p, master != NULL, wdtype, working, i);
          _mixprec_optim_prefetch_streams (pbase, pdtype, grad, gdtype, working, wdtype, states, n_states,
                                           NULL, i, 8);
        }
      if (meas != NULL)
        _mixprec_optim_acc8_end (&acc, meas);
      return n8;
    }

  {
    MixprecPluginDType sdtypes[_MIXPREC_OPTIM_MAX_STATES] = { MIXPREC_PLUGIN_DTYPE_FLOAT32 };
    const int ssr = r->state_sr;
    const uint64_t sseed = r->state_seed;
    float staged[_MIXPREC_OPTIM_MAX_STATES][_MIXPREC_OPTIM_STAGE] __attribute__ ((aligned (32)));

    for (unsigned k = 0; k < n_states; k++)
      sdtypes[k] = r->state_dtypes[k];
    for (size_t i0 = 0; i0 < n8; i0 += _MIXPREC_OPTIM_STAGE)
      {
        const size_t len = n8 - i0 < _MIXPREC_OPTIM_STAGE ? n8 - i0 : _MIXPREC_OPTIM_STAGE;
        float *at[_MIXPREC_OPTIM_MAX_STATES] = { NULL };

        for (unsigned k = 0; k < n_states; k++)
          if (sdtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
            {
              for (size_t j = 0; j < len; j += 8)
                _mm256_store_ps (staged[k] + j, _mixprec_optim_load8 (sdtypes[k], states[k], i0 + j));
              at[k] = staged[k];
            }
          else
            at[k] = states[k] + i0;
        for (size_t j = 0; j < len; j += 8)
          {
            const size_t i = i0 + j;
            __m256 p = _mixprec_optim_load8 (pdtype, pbase, i);
            __m256 graw = _mixprec_optim_load8 (gdtype, grad, i);
            __m256 g = _mm256_mul_ps (graw, factor);
            __m256 old = p;

            p = update (c, p, g, at, j);
            if (master != NULL)
              _mm256_storeu_ps (master + i, p);
            if (working != NULL)
              _mixprec_optim_store_working8 (wdtype, sr, seed, first_index + i, working, i, p);
            if (meas != NULL)
              _mixprec_optim_measure8 (&acc, graw, old, p, master != NULL, wdtype, working, i);
            _mixprec_optim_prefetch_streams (pbase, pdtype, grad, gdtype, working, wdtype, states, n_states,
                                            sdtypes, i, 8);
          }
        for (unsigned k = 0; k < n_states; k++)
          if (sdtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
            for (size_t j = 0; j < len; j += 8)
              _mixprec_optim_store_working8 (sdtypes[k], ssr, sseed + k, first_index + i0 + j, states[k],
                                             i0 + j, _mm256_load_ps (staged[k] + j));
      }
  }
  if (meas != NULL)
    _mixprec_optim_acc8_end (&acc, meas);
  return n8;
}

/* The 8-lane loop around @update over the first n - n % 8 elements,
 * measuring them when the range asks (the loop specialized both ways, so
 * that a step that measures nothing pays nothing). */
static inline __attribute__ ((always_inline)) size_t
_mixprec_optim_run_avx2 (const _MixprecOptimRange *r,
                         const float              *consts,
                         _MixprecOptimUpdate8      update)
{
  if (r->measure != NULL)
    return _mixprec_optim_loop_avx2 (r, consts, update, r->measure);
  return _mixprec_optim_loop_avx2 (r, consts, update, NULL);
}

G_END_DECLS
