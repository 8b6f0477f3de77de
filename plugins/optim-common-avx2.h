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
_mixprec_optim_run_avx2 (const _MixprecOptimRange *r,
                         const float              *consts,
                         _MixprecOptimUpdate8      update)
{
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

  if (r->state_dtypes == NULL)
    {
      for (size_t i = 0; i < n8; i += 8)
        {
          __m256 p = _mixprec_optim_load8 (pdtype, pbase, i);
          __m256 g = _mm256_mul_ps (_mixprec_optim_load8 (gdtype, grad, i), factor);

          p = update (c, p, g, states, i);
          if (master != NULL)
            _mm256_storeu_ps (master + i, p);
          if (working != NULL)
            _mixprec_optim_store_working8 (wdtype, sr, seed, first_index + i, working, i, p);
        }
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
            __m256 g = _mm256_mul_ps (_mixprec_optim_load8 (gdtype, grad, i), factor);

            p = update (c, p, g, at, j);
            if (master != NULL)
              _mm256_storeu_ps (master + i, p);
            if (working != NULL)
              _mixprec_optim_store_working8 (wdtype, sr, seed, first_index + i, working, i, p);
          }
        for (unsigned k = 0; k < n_states; k++)
          if (sdtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
            for (size_t j = 0; j < len; j += 8)
              _mixprec_optim_store_working8 (sdtypes[k], ssr, sseed + k, first_index + i0 + j, states[k],
                                             i0 + j, _mm256_load_ps (staged[k] + j));
      }
  }
  return n8;
}

G_END_DECLS
