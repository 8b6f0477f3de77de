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

static inline __attribute__ ((always_inline)) void
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

  switch (dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      _mm256_mask_storeu_epi16 (w16, m, sr ? _mixprec_avx512_f32_to_bf16_sr (p, _mixprec_avx512_sr_bits16 (seed, index))
                                           : _mixprec_avx512_f32_to_bf16_rne (p));
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      _mm256_mask_storeu_epi16 (w16, m, sr ? _mixprec_avx512_f32_to_f16_sr (p, _mixprec_avx512_sr_bits (seed, index))
                                           : _mixprec_avx512_f32_to_f16_rne (p));
      break;
    default:
      _mm512_mask_storeu_ps ((float *) base + i, m, p);
      break;
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
                        _MixprecOptimUpdate16    update)
{
  __m512 p = _mixprec_optim_load16 (pdtype, pbase, i, m);
  __m512 g = _mm512_mul_ps (_mixprec_optim_load16 (gdtype, grad, i, m), factor);

  p = update (c, p, g, states, i, m);
  if (master != NULL)
    _mm512_mask_storeu_ps (master + i, m, p);
  if (working != NULL)
    _mixprec_optim_store_working16 (wdtype, sr, seed, first_index + i, working, i, p, m);
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
                               _MixprecOptimUpdate16    update)
{
  float staged[_MIXPREC_OPTIM_MAX_STATES][16] __attribute__ ((aligned (64)));
  float *at[_MIXPREC_OPTIM_MAX_STATES] = { NULL };
  __m512 p = _mixprec_optim_load16 (pdtype, pbase, i, m);
  __m512 g = _mm512_mul_ps (_mixprec_optim_load16 (gdtype, grad, i, m), factor);

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
    _mixprec_optim_store_working16 (wdtype, sr, seed, first_index + i, working, i, p, m);
}

/* The 16-lane loop around @update over all n elements, the last block
 * under a mask; returns n. Every field and constant is read into a local
 * first, as in _mixprec_optim_run_avx2(). */
static inline __attribute__ ((always_inline)) size_t
_mixprec_optim_run_avx512 (const _MixprecOptimRange *r,
                           const float              *consts,
                           _MixprecOptimUpdate16     update)
{
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
  size_t i = 0;

  memcpy (c, consts, sizeof c);
  for (unsigned k = 0; k < n_states; k++)
    states[k] = r->states[k];

  if (r->state_dtypes != NULL)
    {
      MixprecPluginDType sdtypes[_MIXPREC_OPTIM_MAX_STATES] = { MIXPREC_PLUGIN_DTYPE_FLOAT32 };

      for (unsigned k = 0; k < n_states; k++)
        sdtypes[k] = r->state_dtypes[k];
      for (; i < n; i += 16)
        _mixprec_optim_block16_staged (c, factor, gdtype, wdtype, pdtype, sr, seed, first_index, grad,
                                       master, working, pbase, states, n_states, sdtypes,
                                       r->state_sr, r->state_seed, i,
                                       n - i >= 16 ? (__mmask16) 0xFFFF : _mixprec_avx512_mask (n - i),
                                       update);
      return n;
    }
  for (; i + 16 <= n; i += 16)
    _mixprec_optim_block16 (c, factor, gdtype, wdtype, pdtype, sr, seed, first_index, grad,
                            master, working, pbase, states, i, (__mmask16) 0xFFFF, update);
  if (i < n)
    _mixprec_optim_block16 (c, factor, gdtype, wdtype, pdtype, sr, seed, first_index, grad,
                            master, working, pbase, states, i, _mixprec_avx512_mask (n - i), update);
  return n;
}

G_END_DECLS
