/* optim-common.c — the argument checks and dispatch every cpu optimizer
 * plugin's step() and init() share (linked into each plugin). */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "optim-common.h"
#include "mixprec-x86-features-private.h"

static int
dtype_is_supported (MixprecPluginDType dtype)
{
  return dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ||
         dtype == MIXPREC_PLUGIN_DTYPE_FLOAT16 ||
         dtype == MIXPREC_PLUGIN_DTYPE_BFLOAT16;
}

static int
check_hparams (const MixprecOptimizerV1     *schema,
               const MixprecOptimizerStepV1 *args,
               char                         *errbuf,
               size_t                        errbuf_len)
{
  if (args->n_hparams != schema->n_hparams || (args->n_hparams > 0 && args->hparams == NULL))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s takes %u hyper-parameters in its schema's order, "
                                "got %u.", schema->name, schema->n_hparams,
                                args->hparams == NULL ? 0 : args->n_hparams);
  for (unsigned k = 0; k < schema->n_hparams; k++)
    {
      const MixprecHParamSpecV1 *spec = &schema->hparams[k];
      double value = args->hparams[k];

      /* The negated test also catches NaN. */
      if (!(value >= spec->min_value && value <= spec->max_value))
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: hyper-parameter %s must lie in [%g, %g], got %g.",
                                    schema->name, spec->name, spec->min_value, spec->max_value, value);
      if (spec->type != MIXPREC_HPARAM_DOUBLE && value != floor (value))
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: hyper-parameter %s must be %s, got %g.",
                                    schema->name, spec->name,
                                    spec->type == MIXPREC_HPARAM_BOOL ? "0 or 1" : "an integer",
                                    value);
    }
  return MIXPREC_PLUGIN_OK;
}

int
_mixprec_optim_check_args (const MixprecOptimizerV1 *schema,
                           const _MixprecOptimRange *r,
                           char                     *errbuf,
                           size_t                    errbuf_len)
{
  const MixprecOptimizerStepV1 *args = r->args;
  const char *name = schema->name;

  if (args == NULL || args->struct_size < sizeof (MixprecOptimizerStepV1))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s needs a MixprecOptimizerStepV1 of at least %zu bytes, "
                                "got %zu.", name, sizeof (MixprecOptimizerStepV1),
                                args == NULL ? (size_t) 0 : args->struct_size);
  if (!dtype_is_supported (args->grad_dtype))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s on %s takes float32, float16 or bfloat16 gradients, "
                                "not dtype %d.", name, schema->device, (int) args->grad_dtype);
  if (r->working != NULL && !dtype_is_supported (args->working_dtype))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s on %s writes float32, float16 or bfloat16 working "
                                "copies, not dtype %d.", name, schema->device, (int) args->working_dtype);
  if (args->rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN &&
      args->rounding != MIXPREC_PLUGIN_ROUNDING_STOCHASTIC)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s: rounding mode %d is neither nearest-even (0) nor "
                                "stochastic (1).", name, (int) args->rounding);
  if (args->step == 0)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: the step count is 1-based, got 0.", name);
  if (!(args->lr >= 0 && args->lr <= DBL_MAX))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: the learning rate must be finite and not negative, "
                                "got %g.", name, args->lr);
  if (r->n == 0)
    return check_hparams (schema, args, errbuf, errbuf_len);
  if (r->master == NULL && r->working == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s needs the parameter: master and working are both NULL.",
                                name);
  if (r->grad == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: the gradient buffer is NULL.", name);
  for (unsigned k = 0; k < schema->n_state_slots && r->state_dtypes != NULL; k++)
    if (r->state_dtypes[k] != MIXPREC_PLUGIN_DTYPE_FLOAT32 &&
        r->state_dtypes[k] != MIXPREC_PLUGIN_DTYPE_BFLOAT16)
      return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                  "Optimizer %s on %s keeps state slot %u (%s) in float32 or "
                                  "bfloat16, not dtype %d.", name, schema->device, k,
                                  schema->state_names[k], (int) r->state_dtypes[k]);
  for (unsigned k = 0; k < schema->n_state_slots; k++)
    if (r->states == NULL || r->states[k] == NULL)
      return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                  "Optimizer %s: state slot %u (%s) is NULL.", name, k,
                                  schema->state_names[k]);
  return check_hparams (schema, args, errbuf, errbuf_len);
}

int
_mixprec_optim_step (const _MixprecOptimKernels   *kernels,
                     _MixprecOptimLevel            level,
                     const MixprecOptimizerStepV2 *args,
                     float                        *master,
                     const void                   *grad,
                     void *const                  *states,
                     void                         *working,
                     size_t                        n,
                     char                         *errbuf,
                     size_t                        errbuf_len)
{
  const MixprecOptimizerV1 *schema = kernels->schema;
  _MixprecOptimRange range = { NULL, master, grad, states, working, n, schema->n_state_slots,
                               NULL, 0, 0 };
  float consts[_MIXPREC_OPTIM_MAX_CONSTS];
  size_t done = 0;
  int status;

  if (args == NULL || args->base.struct_size < sizeof (MixprecOptimizerStepV2))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s needs a MixprecOptimizerStepV2 of at least %zu bytes, "
                                "got %zu.", schema->name, sizeof (MixprecOptimizerStepV2),
                                args == NULL ? (size_t) 0 : args->base.struct_size);
  range.args = &args->base;
  /* All-float32 state takes the loops' plain path. */
  for (unsigned k = 0; k < schema->n_state_slots && args->state_dtypes != NULL; k++)
    if (args->state_dtypes[k] != MIXPREC_PLUGIN_DTYPE_FLOAT32)
      range.state_dtypes = args->state_dtypes;
  if (range.state_dtypes != NULL &&
      args->state_rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN &&
      args->state_rounding != MIXPREC_PLUGIN_ROUNDING_STOCHASTIC)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s: state rounding mode %d is neither nearest-even (0) "
                                "nor stochastic (1).", schema->name, (int) args->state_rounding);
  range.state_sr = args->state_rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  range.state_seed = args->state_seed;

  status = _mixprec_optim_check_args (schema, &range, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = kernels->prepare (&args->base, consts, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;

  if (level >= _MIXPREC_OPTIM_AVX512 && kernels->run_avx512 != NULL)
    done = kernels->run_avx512 (&range, consts);
  else if (level >= _MIXPREC_OPTIM_AVX2 && kernels->run_simd != NULL)
    done = kernels->run_simd (&range, consts);
  kernels->run_scalar (&range, consts, done);
  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';
  return MIXPREC_PLUGIN_OK;
}

/* The rule of libmixprec's _mixprec_cpu_simd_level(), which plugins do
 * not link: the best level of the CPU, lowered by MIXPREC_SIMD. */
static _MixprecOptimLevel
cpu_simd_level (void)
{
  const char *forced = getenv ("MIXPREC_SIMD");
  _MixprecOptimLevel best = _MIXPREC_OPTIM_SCALAR;

#ifdef MIXPREC_HAVE_X86_SIMD
  {
    int level = _mixprec_x86_simd_level ();

    if (level >= 1)
      best = _MIXPREC_OPTIM_AVX2;
# ifdef MIXPREC_HAVE_X86_AVX512
    if (level >= 2)
      best = _MIXPREC_OPTIM_AVX512;
# endif
  }
#endif
  if (forced != NULL && strcasecmp (forced, "scalar") == 0)
    return _MIXPREC_OPTIM_SCALAR;
  if (forced != NULL && strcasecmp (forced, "avx2") == 0 && best > _MIXPREC_OPTIM_AVX2)
    return _MIXPREC_OPTIM_AVX2;
  return best;
}

int
_mixprec_optim_register (MixprecPluginHostV1      *host,
                         const MixprecOptimizerV2 *scalar,
                         const MixprecOptimizerV2 *avx2,
                         const MixprecOptimizerV2 *avx512,
                         const char              **chosen_kernels,
                         char                     *errbuf,
                         size_t                    errbuf_len)
{
  const MixprecOptimizerV2 *chosen = scalar;
  _MixprecOptimLevel level;

  *chosen_kernels = "scalar";

  /* These optimizers speak revision 2 only: a library of ABI 1.0 has no
   * register_optimizer_v2 (and refuses this plugin's 1.1 anyway). */
  if (host == NULL ||
      host->struct_size < offsetof (MixprecPluginHostV1, register_optimizer_v2) + sizeof host->register_optimizer_v2 ||
      host->register_optimizer_v2 == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: the host table offers no register_optimizer_v2 "
                                "(plugin ABI 1.1).", scalar->name);
  if (host->abi_major != MIXPREC_PLUGIN_ABI_VERSION_MAJOR)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s was built for plugin ABI %d.x; the library offers %u.%u.",
                                scalar->name, MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
                                host->abi_major, host->abi_minor);
  level = cpu_simd_level ();
  if (level >= _MIXPREC_OPTIM_AVX512 && avx512 != NULL)
    {
      chosen = avx512;
      *chosen_kernels = "avx512";
    }
  else if (level >= _MIXPREC_OPTIM_AVX2 && avx2 != NULL)
    {
      chosen = avx2;
      *chosen_kernels = "avx2";
    }
  return host->register_optimizer_v2 (host, chosen, errbuf, errbuf_len);
}
