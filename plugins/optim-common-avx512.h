/* optim-common-avx512.h — the 16-lane twin of optim-common.h's per-element
 * plumbing, bit-identical to it. Include only from files compiled with
 * $(MIXPREC_AVX512_CFLAGS); their code runs only after init() found
 * AVX-512 F, BW and VL besides AVX2, FMA and F16C.
 *
 * Every load and store takes a lane mask, so the tail of a range (fewer
 * than sixteen elements) runs through the same update as the rest rather
 * than through the scalar kernel; masked-off lanes are neither read nor
 * written. */
#pragma once

#include "optim-common.h"
#include "mixprec-avx512-private.h"

G_BEGIN_DECLS

typedef __m512 (*_MixprecOptimUpdate16) (const float  *consts,
                                         __m512        p,
                                         __m512        g,
                                         float *const *states,
                                         size_t        i,
                                         __mmask16     m);

static inline __attribute__ ((always_inline)) __m512
_mixprec_optim_load16 (MixprecPluginDType dtype,
                       const void        *base,
                       size_t             i,
                       __mmask16          m)
{
  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return _mixprec_avx512_bf16_to_f32 (_mm256_maskz_loadu_epi16 (m, (const guint16 *) base + i));
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return _mixprec_avx512_f16_to_f32 (_mm256_maskz_loadu_epi16 (m, (const guint16 *) base + i));
    default:
      return _mm512_maskz_loadu_ps (m, (const float *) base + i);
    }
}

/* Stores the working copy of @p and returns it widened to FP32 (the lanes
 * under @m), which the numerics read from the register: a load of what a
 * masked store just wrote waits for the store to reach the cache. */
static inline __attribute__ ((always_inline)) __m512
_mixprec_optim_store_working16 (MixprecPluginDType     dtype,
                                int                    sr,
                                uint64_t               seed,
                                uint64_t               index,
                                void                  *base,
                                size_t                 i,
                                __m512                 p,
                                __mmask16              m)
{
  guint16 *w16 = (guint16 *) base + i;
  __m256i h;

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      h = sr ? _mixprec_avx512_f32_to_bf16_sr (p, _mixprec_avx512_sr_bits16 (seed, index))
             : _mixprec_avx512_f32_to_bf16_rne (p);
      _mm256_mask_storeu_epi16 (w16, m, h);
      return _mixprec_avx512_bf16_to_f32 (h);
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      h = sr ? _mixprec_avx512_f32_to_f16_sr (p, _mixprec_avx512_sr_bits (seed, index))
             : _mixprec_avx512_f32_to_f16_rne (p);
      _mm256_mask_storeu_epi16 (w16, m, h);
      return _mixprec_avx512_f16_to_f32 (h);
    default:
      _mm512_mask_storeu_ps ((float *) base + i, m, p);
      return p;
    }
}

/* ------------------------------------------------------------ numerics
 * A run's numerics (ABI 1.6) sixteen elements at a time: the sums keep
 * eight lanes, elements i .. i + 7 added before i + 8 .. i + 15, which is
 * _mixprec_optim_measure1()'s order. Lanes under no mask load zeros: no
 * class, nothing added to a sum (x + 0 = x for the non-negative sums),
 * and the stale count takes the mask. */

typedef struct {
  __m256 dsum, msum;
  __m512i amax, under, over, floor_bits;   /* floor_bits: 2^emin as FP32 bits */
  __m512 scale;
  /* Per-lane counts, added up at the end (run_measured() hands the loops
   * at most _MIXPREC_OPTIM_MEASURE_CHUNK elements at a time). */
  __m512i nonfinite, nonzero, n_under, n_over, stale;
} _MixprecOptimAcc16;

static inline __attribute__ ((always_inline)) void
_mixprec_optim_acc16_begin (_MixprecOptimAcc16         *acc,
                            const _MixprecOptimMeasure *m)
{
  acc->dsum = _mm256_loadu_ps (m->dl);
  acc->msum = _mm256_loadu_ps (m->ml);
  acc->amax = _mm512_set1_epi32 ((int) m->amax);
  acc->under = _mm512_set1_epi32 ((int) m->grad_under);
  acc->over = _mm512_set1_epi32 ((int) m->grad_over);
  acc->floor_bits = _mm512_set1_epi32 ((int) (m->floor_field << 23));
  acc->scale = _mm512_set1_ps (m->scale);
  acc->nonfinite = acc->nonzero = acc->n_under = acc->n_over = acc->stale = _mm512_setzero_si512 ();
}

static inline __attribute__ ((always_inline)) uint64_t
_mixprec_optim_lanes16 (__m512i counts)
{
  /* At most _MIXPREC_OPTIM_MEASURE_CHUNK in all: no wrap in 32 bits. */
  return (uint64_t) (uint32_t) _mm512_reduce_add_epi32 (counts);
}

static inline __attribute__ ((always_inline)) void
_mixprec_optim_acc16_end (const _MixprecOptimAcc16 *acc,
                          _MixprecOptimMeasure     *m)
{
  uint32_t amax = (uint32_t) _mm512_reduce_max_epu32 (acc->amax);

  _mm256_storeu_ps (m->dl, acc->dsum);
  _mm256_storeu_ps (m->ml, acc->msum);
  m->amax = amax > m->amax ? amax : m->amax;
  m->nonfinite += _mixprec_optim_lanes16 (acc->nonfinite);
  m->nonzero += _mixprec_optim_lanes16 (acc->nonzero);
  m->under += _mixprec_optim_lanes16 (acc->n_under);
  m->over += _mixprec_optim_lanes16 (acc->n_over);
  m->stale += _mixprec_optim_lanes16 (acc->stale);
}

/* @wval: the working copy just stored, widened (when @has_working). */
static inline __attribute__ ((always_inline)) void
_mixprec_optim_measure16 (_MixprecOptimAcc16 *acc,
                          __m512              graw,
                          __m512              old,
                          __m512              now,
                          int                 has_master,
                          int                 has_working,
                          __m512              wval,
                          __mmask16           m)
{
  __m512i a = _mm512_and_si512 (_mm512_castps_si512 (graw), _mm512_set1_epi32 (0x7fffffff));
  __mmask16 nonfinite = _mm512_cmp_epu32_mask (a, _mm512_set1_epi32 (0x7f800000), _MM_CMPINT_NLT);
  __mmask16 nonzero = _mm512_mask_cmp_epu32_mask ((__mmask16) ~nonfinite, a, _mm512_setzero_si512 (),
                                                   _MM_CMPINT_NE);
  const __m512i ones = _mm512_set1_epi32 (-1);

  /* Subtracting -1 under a mask counts its lanes. */
  acc->nonfinite = _mm512_mask_sub_epi32 (acc->nonfinite, nonfinite, acc->nonfinite, ones);
  acc->nonzero = _mm512_mask_sub_epi32 (acc->nonzero, nonzero, acc->nonzero, ones);
  acc->n_under = _mm512_mask_sub_epi32 (acc->n_under, _mm512_mask_cmp_epu32_mask (nonzero, a, acc->under, _MM_CMPINT_LT),
                                        acc->n_under, ones);
  acc->n_over = _mm512_mask_sub_epi32 (acc->n_over, _mm512_mask_cmp_epu32_mask (nonzero, a, acc->over, _MM_CMPINT_NLT),
                                       acc->n_over, ones);
  acc->amax = _mm512_mask_max_epu32 (acc->amax, nonzero, acc->amax, a);
  if (!has_master)
    return;
  {
    __m512 d = _mm512_sub_ps (now, old);
    __m512 dd = _mm512_mul_ps (d, d), oo = _mm512_mul_ps (old, old);

    acc->dsum = _mm256_add_ps (acc->dsum, _mm512_castps512_ps256 (dd));
    acc->dsum = _mm256_add_ps (acc->dsum, _mm256_castpd_ps (_mm512_extractf64x4_pd (_mm512_castps_pd (dd), 1)));
    acc->msum = _mm256_add_ps (acc->msum, _mm512_castps512_ps256 (oo));
    acc->msum = _mm256_add_ps (acc->msum, _mm256_castpd_ps (_mm512_extractf64x4_pd (_mm512_castps_pd (oo), 1)));
    if (has_working)
      {
        /* The exponent field left in place: 2^max(e, emin) is the larger
         * of it and emin's, as FP32 bits. */
        const __m512i expo = _mm512_set1_epi32 (0x7f800000);
        __m512i field = _mm512_and_si512 (_mm512_castps_si512 (wval), expo);
        __m512 half = _mm512_castsi512_ps (_mm512_max_epu32 (field, acc->floor_bits));
        __mmask16 finite = _mm512_mask_cmpneq_epi32_mask (m, field, expo);
        __m512 ad = _mm512_castsi512_ps (_mm512_and_si512 (_mm512_castps_si512 (d), _mm512_set1_epi32 (0x7fffffff)));

        acc->stale = _mm512_mask_sub_epi32 (acc->stale,
                                            _mm512_mask_cmp_ps_mask (finite, _mm512_mul_ps (ad, acc->scale), half, _CMP_LT_OQ),
                                            acc->stale, ones);
      }
  }
}

/* One block of up to sixteen elements from @i. */
static inline __attribute__ ((always_inline)) void
_mixprec_optim_block16 (const float             *c,
                        const __m512             factor,
                        MixprecPluginDType       gdtype,
                        MixprecPluginDType       wdtype,
                        MixprecPluginDType       pdtype,
                        int                      sr,
                        uint64_t                 seed,
                        uint64_t                 first_index,
                        const void              *grad,
                        float                   *master,
                        void                    *working,
                        const void              *pbase,
                        float *const            *states,
                        size_t                   i,
                        __mmask16                m,
                        _MixprecOptimUpdate16    update,
                        _MixprecOptimAcc16      *acc)
{
  __m512 p = _mixprec_optim_load16 (pdtype, pbase, i, m);
  __m512 graw = _mixprec_optim_load16 (gdtype, grad, i, m);
  __m512 g = _mm512_mul_ps (graw, factor);
  __m512 old = p, wval = p;

  p = update (c, p, g, states, i, m);
  if (master != NULL)
    _mm512_mask_storeu_ps (master + i, m, p);
  if (working != NULL)
    wval = _mixprec_optim_store_working16 (wdtype, sr, seed, first_index + i, working, i, p, m);
  if (acc != NULL)
    _mixprec_optim_measure16 (acc, graw, old, p, master != NULL, working != NULL, wval, m);
  _mixprec_optim_prefetch_streams (pbase, pdtype, grad, gdtype, working, wdtype, states,
                                   _MIXPREC_OPTIM_MAX_STATES, NULL, i, 16);
}

/* One block of up to sixteen elements from @i with bfloat16 state slots
 * staged as in _mixprec_optim_run_avx2(). */
static inline __attribute__ ((always_inline)) void
_mixprec_optim_block16_staged (const float             *c,
                               const __m512             factor,
                               MixprecPluginDType       gdtype,
                               MixprecPluginDType       wdtype,
                               MixprecPluginDType       pdtype,
                               int                      sr,
                               uint64_t                 seed,
                               uint64_t                 first_index,
                               const void              *grad,
                               float                   *master,
                               void                    *working,
                               const void              *pbase,
                               float *const            *states,
                               unsigned                 n_states,
                               const MixprecPluginDType *sdtypes,
                               int                      ssr,
                               uint64_t                 sseed,
                               size_t                   i,
                               __mmask16                m,
                               _MixprecOptimUpdate16    update,
                               _MixprecOptimAcc16      *acc)
{
  float staged[_MIXPREC_OPTIM_MAX_STATES][16] __attribute__ ((aligned (64)));
  float *at[_MIXPREC_OPTIM_MAX_STATES] = { NULL };
  __m512 p = _mixprec_optim_load16 (pdtype, pbase, i, m);
  __m512 graw = _mixprec_optim_load16 (gdtype, grad, i, m);
  __m512 g = _mm512_mul_ps (graw, factor);
  __m512 old = p, wval = p;

  for (unsigned k = 0; k < n_states; k++)
    if (sdtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
      {
        _mm512_store_ps (staged[k], _mixprec_optim_load16 (sdtypes[k], states[k], i, m));
        at[k] = staged[k];
      }
    else
      at[k] = states[k] + i;
  p = update (c, p, g, at, 0, m);
  for (unsigned k = 0; k < n_states; k++)
    if (sdtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
      _mixprec_optim_store_working16 (sdtypes[k], ssr, sseed + k, first_index + i, states[k], i,
                                      _mm512_load_ps (staged[k]), m);
  if (master != NULL)
    _mm512_mask_storeu_ps (master + i, m, p);
  if (working != NULL)
    wval = _mixprec_optim_store_working16 (wdtype, sr, seed, first_index + i, working, i, p, m);
  if (acc != NULL)
    _mixprec_optim_measure16 (acc, graw, old, p, master != NULL, working != NULL, wval, m);
  _mixprec_optim_prefetch_streams (pbase, pdtype, grad, gdtype, working, wdtype, states, n_states,
                                   sdtypes, i, 16);
}

/* The 16-lane loop around @update over all n elements, the last block
 * under a mask; returns n. Every field and constant is read into a local
 * first, as in _mixprec_optim_run_avx2(). */
static inline __attribute__ ((always_inline)) size_t
_mixprec_optim_loop_avx512 (const _MixprecOptimRange *r,
                            const float              *consts,
                            _MixprecOptimUpdate16     update,
                            _MixprecOptimMeasure     *meas)
{
  _MixprecOptimAcc16 acc_data;
  _MixprecOptimAcc16 *acc = meas != NULL ? &acc_data : NULL;
  float c[_MIXPREC_OPTIM_MAX_CONSTS];
  const MixprecOptimizerStepV1 *a = r->args;
  const __m512 factor = _mm512_set1_ps (a->grad_factor);
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
  const size_t n = r->n;
  const size_t n_runs = acc != NULL && r->n_measures > 1 ? r->n_measures : 1;
  MixprecPluginDType sdtypes[_MIXPREC_OPTIM_MAX_STATES] = { MIXPREC_PLUGIN_DTYPE_FLOAT32 };
  size_t i = 0, start = 0;

  memcpy (c, consts, sizeof c);
  for (unsigned k = 0; k < n_states; k++)
    states[k] = r->states[k];
  if (r->state_dtypes != NULL)
    for (unsigned k = 0; k < n_states; k++)
      sdtypes[k] = r->state_dtypes[k];
  /* Run by run when measuring several: each from its first element, the
   * last block of each under a mask, so its lanes are those of a call of
   * its own (the same elements in the same lanes, the same bits). */
  for (size_t j = 0; j < n_runs; j++)
    {
      const size_t end = n_runs > 1 ? r->measure_ends[j] : n;
      _MixprecOptimMeasure *mj = n_runs > 1 ? &meas[j] : meas;

      if (acc != NULL)
        _mixprec_optim_acc16_begin (acc, mj);
      if (r->state_dtypes != NULL)
        for (i = start; i < end; i += 16)
          _mixprec_optim_block16_staged (c, factor, gdtype, wdtype, pdtype, sr, seed, first_index, grad,
                                         master, working, pbase, states, n_states, sdtypes,
                                         r->state_sr, r->state_seed, i,
                                         end - i >= 16 ? (__mmask16) 0xFFFF : _mixprec_avx512_mask (end - i),
                                         update, acc);
      else
        {
          for (i = start; i + 16 <= end; i += 16)
            _mixprec_optim_block16 (c, factor, gdtype, wdtype, pdtype, sr, seed, first_index, grad,
                                    master, working, pbase, states, i, (__mmask16) 0xFFFF, update, acc);
          if (i < end)
            _mixprec_optim_block16 (c, factor, gdtype, wdtype, pdtype, sr, seed, first_index, grad,
                                    master, working, pbase, states, i, _mixprec_avx512_mask (end - i),
                                    update, acc);
        }
      if (acc != NULL)
        _mixprec_optim_acc16_end (acc, mj);
      start = end;
    }
  return n;
}

/* The 16-lane loop around @update over all n elements, measuring them
 * when the range asks (specialized both ways: a step that measures
 * nothing pays nothing); returns n. */
static inline __attribute__ ((always_inline)) size_t
_mixprec_optim_run_avx512 (const _MixprecOptimRange *r,
                           const float              *consts,
                           _MixprecOptimUpdate16     update)
{
  if (r->measure != NULL)
    return _mixprec_optim_loop_avx512 (r, consts, update, r->measure);
  return _mixprec_optim_loop_avx512 (r, consts, update, NULL);
}

G_END_DECLS
