/* optim-common.c — the argument checks and dispatch every cpu optimizer
 * plugin's step() and init() share (linked into each plugin). */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "optim-common.h"
#include "optim-quant.h"
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

/* The kernels of @level (or the best lower one the build has) over a
 * checked range. */
static void
run_kernels (const _MixprecOptimKernels *kernels,
             _MixprecOptimLevel          level,
             const _MixprecOptimRange   *range,
             const float                *consts)
{
  size_t done = 0;

  if (level >= _MIXPREC_OPTIM_AVX512 && kernels->run_avx512 != NULL)
    done = kernels->run_avx512 (range, consts);
  else if (level >= _MIXPREC_OPTIM_AVX2 && kernels->run_simd != NULL)
    done = kernels->run_simd (range, consts);
  kernels->run_scalar (range, consts, done);
}

/* What revisions 2 and 3 check alike once @range is set up: the state
 * rounding of @args where @range keeps some state in bfloat16 (its
 * state_dtypes set), the arguments of @range, then the kernels' constants
 * into @consts. */
static int
prepare_range (const _MixprecOptimKernels   *kernels,
               const MixprecOptimizerStepV2 *args,
               _MixprecOptimRange           *range,
               float                        *consts,
               char                         *errbuf,
               size_t                        errbuf_len)
{
  const MixprecOptimizerV1 *schema = kernels->schema;
  int status;

  if (range->state_dtypes != NULL &&
      args->state_rounding != MIXPREC_PLUGIN_ROUNDING_NEAREST_EVEN &&
      args->state_rounding != MIXPREC_PLUGIN_ROUNDING_STOCHASTIC)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s: state rounding mode %d is neither nearest-even (0) "
                                "nor stochastic (1).", schema->name, (int) args->state_rounding);
  range->state_sr = args->state_rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;
  range->state_seed = args->state_seed;
  status = _mixprec_optim_check_args (schema, range, errbuf, errbuf_len);
  if (status == MIXPREC_PLUGIN_OK)
    status = kernels->prepare (&args->base, consts, errbuf, errbuf_len);
  return status;
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

  status = prepare_range (kernels, args, &range, consts, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;

  run_kernels (kernels, level, &range, consts);
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

/* ------------------------------------------------------------ revision 3 */

static const char *const format_words[] = {
  "float32", "bfloat16", "float16 with block scales", "bfloat16 with block scales",
  "float8 e4m3 with block scales", "block-wise int8", "block-wise int4",
};

int
_mixprec_optim_check_args_v3 (const MixprecOptimizerV1     *schema,
                              const MixprecOptimizerStepV3 *args,
                              float                        *master,
                              void                         *working,
                              size_t                        n,
                              MixprecPluginDType           *dtypes,
                              char                         *errbuf,
                              size_t                        errbuf_len)
{
  const char *name = schema->name;
  int blocked = 0;

  /* ABI 1.4's struct ends at master_extra; the numerics fields of 1.6
   * are read only where struct_size covers them. */
  if (args == NULL || args->v2.base.struct_size < _MIXPREC_OPTIM_STEP_V3_SIZE_1_4)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s needs a MixprecOptimizerStepV3 of at least %zu bytes, "
                                "got %zu.", name, (size_t) _MIXPREC_OPTIM_STEP_V3_SIZE_1_4,
                                args == NULL ? (size_t) 0 : args->v2.base.struct_size);
  for (unsigned k = 0; k < schema->n_state_slots; k++)
    {
      unsigned f = args->state_formats != NULL ? (unsigned) args->state_formats[k]
                                               : _MIXPREC_QFMT_FLOAT32;

      if (f >= _MIXPREC_QFMT_COUNT)
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                    "Optimizer %s on %s: state slot %u (%s) has format %u, which "
                                    "is not a MixprecPluginStateFormat (0 to %u).", name,
                                    schema->device, k, schema->state_names[k], f,
                                    _MIXPREC_QFMT_COUNT - 1);
      dtypes[k] = f == _MIXPREC_QFMT_BFLOAT16 ? MIXPREC_PLUGIN_DTYPE_BFLOAT16
                                              : MIXPREC_PLUGIN_DTYPE_FLOAT32;
      if (!_mixprec_state_is_blocked (f))
        continue;
      blocked = 1;
      if (n > 0 && (args->state_scales == NULL || args->state_scales[k] == NULL))
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: state slot %u (%s) is kept as %s, which needs "
                                    "one FP32 scale per block, but its scale array is NULL.",
                                    name, k, schema->state_names[k], format_words[f]);
      if (f == _MIXPREC_QFMT_INT4_DYNAMIC && n % 2 != 0)
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: state slot %u (%s) is kept as block-wise int4, "
                                    "two codes per byte, so a call must cover an even number of "
                                    "elements, not %zu.", name, k, schema->state_names[k], n);
    }
  if (blocked &&
      (args->block_size < _MIXPREC_QBLOCK_MIN || args->block_size > _MIXPREC_QBLOCK_MAX ||
       (args->block_size & (args->block_size - 1)) != 0))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: block_size must be a power of two from %u to %u "
                                "when a state slot keeps block scales, got %u.", name,
                                _MIXPREC_QBLOCK_MIN, _MIXPREC_QBLOCK_MAX, args->block_size);
  switch ((unsigned) args->master_format)
    {
    case _MIXPREC_QMASTER_FLOAT32:
      return MIXPREC_PLUGIN_OK;
    case _MIXPREC_QMASTER_REMAINDER:
    case _MIXPREC_QMASTER_KAHAN:
      if (master != NULL)
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: a %s master lives in the working copy and "
                                    "master_extra; the FP32 master must be NULL.", name,
                                    args->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER
                                    ? "remainder" : "Kahan");
      if (n > 0 && (working == NULL || args->master_extra == NULL ||
                    args->v2.base.working_dtype != MIXPREC_PLUGIN_DTYPE_BFLOAT16))
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: a %s master needs a bfloat16 working copy and "
                                    "master_extra (%s per element).", name,
                                    args->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER
                                    ? "remainder" : "Kahan",
                                    args->master_format == MIXPREC_PLUGIN_MASTER_REMAINDER
                                    ? "an int16 remainder" : "a bfloat16 compensation");
      return MIXPREC_PLUGIN_OK;
    default:
      return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                  "Optimizer %s: master format %u is not a "
                                  "MixprecPluginMasterFormat (0 to %u).", name,
                                  (unsigned) args->master_format, _MIXPREC_QMASTER_COUNT - 1);
    }
}

/* The block codecs of @level, as far as the build has them. */
typedef struct {
  _MixprecQuantDecode decode;
  _MixprecQuantEncode encode;
  _MixprecQuantMasterLoad master_load;
  _MixprecQuantMasterStore master_store;
} Codecs;

static void
pick_codecs (_MixprecOptimLevel  level,
             Codecs             *c)
{
  c->decode = _mixprec_quant_decode_scalar;
  c->encode = _mixprec_quant_encode_scalar;
  c->master_load = _mixprec_quant_master_load;
  c->master_store = _mixprec_quant_master_store;
#ifdef MIXPREC_HAVE_X86_SIMD
  if (level >= _MIXPREC_OPTIM_AVX2)
    {
      c->decode = _mixprec_quant_decode_avx2;
      c->encode = _mixprec_quant_encode_avx2;
      c->master_load = _mixprec_quant_master_load_avx2;
      c->master_store = _mixprec_quant_master_store_avx2;
    }
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
  if (level >= _MIXPREC_OPTIM_AVX512)
    {
      c->decode = _mixprec_quant_have_vbmi () ? _mixprec_quant_decode_avx512_vbmi
                                              : _mixprec_quant_decode_avx512;
      c->encode = _mixprec_quant_encode_avx512;
      c->master_load = _mixprec_quant_master_load_avx512;
      c->master_store = _mixprec_quant_master_store_avx512;
    }
#endif
}

/* A tile for the parameter of a REMAINDER / KAHAN master alone (no
 * blocked slot): any length works; this keeps it in L1. */
#define MASTER_TILE 1024

/* The numerics a V3 call asks for: NULL unless its struct_size covers
 * ABI 1.6's fields and it set them. */
static MixprecOptimizerNumericsV1 *
numerics_of (const MixprecOptimizerStepV3 *args)
{
  if (args->v2.base.struct_size < G_STRUCT_OFFSET (MixprecOptimizerStepV3, working_emin) + sizeof (int) ||
      args->n_numerics == 0)
    return NULL;
  return args->numerics;
}

/* Elements [@from, @from + @n) of @range as a range of their own: the
 * buffers moved on, the first index in @base (the random bits of
 * stochastic rounding follow the element, not the call), the state
 * pointers in @states. */
static void
subrange (const _MixprecOptimRange *range,
          size_t                    from,
          size_t                    n,
          MixprecOptimizerStepV1   *base,
          void                    **states,
          _MixprecOptimRange       *out)
{
  const MixprecOptimizerStepV1 *a = range->args;

  *base = *a;
  base->first_index += from;
  *out = *range;
  out->args = base;
  out->n = n;
  out->grad = (const char *) range->grad + from * _mixprec_optim_dtype_size (a->grad_dtype);
  out->master = range->master != NULL ? range->master + from : NULL;
  out->working = range->working != NULL
                 ? (char *) range->working + from * _mixprec_optim_dtype_size (a->working_dtype) : NULL;
  for (unsigned k = 0; k < _MIXPREC_OPTIM_MAX_STATES; k++)
    states[k] = k < range->n_states
                ? (char *) range->states[k] + from * (range->state_dtypes != NULL
                                                      ? _mixprec_optim_dtype_size (range->state_dtypes[k])
                                                      : sizeof (float))
                : NULL;
  out->states = states;
}

/* Eight FP32 lanes added in double in MixprecOptimizerNumericsV1's tree. */
static double
lanes_sum (const float l[8])
{
  return (((double) l[0] + l[1]) + ((double) l[2] + l[3])) + (((double) l[4] + l[5]) + ((double) l[6] + l[7]));
}

static void
measure_init (_MixprecOptimMeasure             *m,
              const MixprecOptimizerNumericsV1 *rec,
              const MixprecOptimizerStepV3     *args)
{
  m->grad_under = rec->grad_under;
  m->grad_over = rec->grad_over;
  m->scale = ldexpf (1.0f, args->working_precision);
  m->floor_field = (uint32_t) (args->working_emin + 127);
}

static void
measure_done (MixprecOptimizerNumericsV1 *rec,
              const _MixprecOptimMeasure *m)
{
  rec->nonfinite = m->nonfinite;
  rec->nonzero = m->nonzero;
  rec->under = m->under;
  rec->over = m->over;
  rec->grad_amax = m->amax;
  rec->stale = m->stale;
  rec->delta_sumsq = lanes_sum (m->dl);
  rec->old_sumsq = lanes_sum (m->ml);
  rec->measured = 1;
}

/* Whether no run is longer than the loops measure at once. */
static int
runs_fit (const MixprecOptimizerNumericsV1 *numerics,
          unsigned                          n)
{
  size_t start = 0;

  for (unsigned j = 0; j < n; j++)
    {
      if (numerics[j].end - start > _MIXPREC_OPTIM_MEASURE_CHUNK)
        return 0;
      start = numerics[j].end;
    }
  return 1;
}

/* The runs of a call that run_measured() checked, through the AVX-512
 * loop RUNS_AT_ONCE at a time (_MixprecOptimRange's measure_ends): a call
 * per run of a few thousand elements cost about as much as the measuring
 * itself. */
#define RUNS_AT_ONCE 64

static void
run_measured_at_once (const _MixprecOptimKernels   *kernels,
                      _MixprecOptimLevel            level,
                      const _MixprecOptimRange     *range,
                      const float                  *consts,
                      const MixprecOptimizerStepV3 *args,
                      MixprecOptimizerNumericsV1   *numerics)
{
  size_t start = 0;

  for (unsigned first = 0; first < args->n_numerics; first += RUNS_AT_ONCE)
    {
      const unsigned n = MIN (args->n_numerics - first, RUNS_AT_ONCE);
      _MixprecOptimMeasure ms[RUNS_AT_ONCE];
      size_t ends[RUNS_AT_ONCE];
      MixprecOptimizerStepV1 base;
      void *states[_MIXPREC_OPTIM_MAX_STATES];
      _MixprecOptimRange batch;

      memset (ms, 0, n * sizeof *ms);
      for (unsigned j = 0; j < n; j++)
        {
          measure_init (&ms[j], &numerics[first + j], args);
          ends[j] = numerics[first + j].end - start;
        }
      subrange (range, start, ends[n - 1], &base, states, &batch);
      batch.measure = ms;
      batch.measure_ends = ends;
      batch.n_measures = n;
      /* One run is a call of its own (n_measures > 1 only). */
      run_kernels (kernels, level, &batch, consts);
      for (unsigned j = 0; j < n; j++)
        measure_done (&numerics[first + j], &ms[j]);
      start = numerics[first + n - 1].end;
    }
}

/* A measured call (ABI 1.6): each run of args->numerics through the
 * kernels on its own, from its element 0, so that the lanes of its sums
 * are those of MixprecOptimizerNumericsV1 whatever the run's place in the
 * call; the kernels are element-wise and told each run's first index, so
 * the cuts change no bit of the update. */
static int
run_measured (const _MixprecOptimKernels   *kernels,
              _MixprecOptimLevel            level,
              const _MixprecOptimRange     *range,
              const float                  *consts,
              const MixprecOptimizerStepV3 *args,
              MixprecOptimizerNumericsV1   *numerics,
              char                         *errbuf,
              size_t                        errbuf_len)
{
  size_t start = 0;

  if (args->working_precision < 2 || args->working_precision > 24 ||
      args->working_emin < -126 || args->working_emin > 0)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: numerics with working_precision %d and "
                                "working_emin %d, which no format of FP32's range has.",
                                kernels->schema->name, args->working_precision, args->working_emin);
  for (unsigned j = 0; j < args->n_numerics; j++)
    {
      size_t end = numerics[j].end;

      if (end < start || end > range->n || (j + 1 == args->n_numerics && end != range->n))
        return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                    "Optimizer %s: numerics run %u ends at %zu, which does not "
                                    "tile the call's %zu elements.", kernels->schema->name, j, end,
                                    range->n);
      start = end;
    }
  if (level >= _MIXPREC_OPTIM_AVX512 && kernels->run_avx512 != NULL && args->n_numerics > 1 &&
      runs_fit (numerics, args->n_numerics))
    {
      run_measured_at_once (kernels, level, range, consts, args, numerics);
      return MIXPREC_PLUGIN_OK;
    }
  start = 0;
  for (unsigned j = 0; j < args->n_numerics; j++)
    {
      MixprecOptimizerNumericsV1 *rec = &numerics[j];
      _MixprecOptimMeasure m = { 0 };

      measure_init (&m, rec, args);
      /* In pieces the loops' counters hold, each from a multiple of 16
       * of the run: the sums keep their lanes across pieces. */
      for (size_t at = start; at < rec->end; at += _MIXPREC_OPTIM_MEASURE_CHUNK)
        {
          MixprecOptimizerStepV1 base;
          void *states[_MIXPREC_OPTIM_MAX_STATES];
          _MixprecOptimRange piece;

          subrange (range, at, MIN (rec->end - at, _MIXPREC_OPTIM_MEASURE_CHUNK), &base, states, &piece);
          piece.measure = &m;
          run_kernels (kernels, level, &piece, consts);
        }
      measure_done (rec, &m);
      start = rec->end;
    }
  return MIXPREC_PLUGIN_OK;
}

int
_mixprec_optim_step_v3 (const _MixprecOptimKernels   *kernels,
                        _MixprecOptimLevel            level,
                        const MixprecOptimizerStepV3 *args,
                        float                        *master,
                        const void                   *grad,
                        void *const                  *states,
                        void                         *working,
                        size_t                        n,
                        char                         *errbuf,
                        size_t                        errbuf_len)
{
  const MixprecOptimizerV1 *schema = kernels->schema;
  const unsigned n_states = schema->n_state_slots;
  MixprecPluginDType dtypes[_MIXPREC_OPTIM_MAX_STATES];
  unsigned formats[_MIXPREC_OPTIM_MAX_STATES] = { 0 };
  _MixprecOptimRange range = { NULL, master, grad, states, working, n, n_states, NULL, 0, 0 };
  float consts[_MIXPREC_OPTIM_MAX_CONSTS];
  float tiles[_MIXPREC_OPTIM_MAX_STATES][_MIXPREC_QBLOCK_MAX] __attribute__ ((aligned (64)));
  float ptile[_MIXPREC_QBLOCK_MAX] __attribute__ ((aligned (64)));
  Codecs codecs;
  unsigned blocked = 0, used, master_format;
  size_t block, grad_size;
  int any_bf16 = 0, status;
  MixprecOptimizerNumericsV1 *numerics;

  G_STATIC_ASSERT (_MIXPREC_OPTIM_MAX_STATES <= 4);
  if (n_states > _MIXPREC_OPTIM_MAX_STATES)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s keeps more state slots than the cpu kernels hold.",
                                schema->name);
  status = _mixprec_optim_check_args_v3 (schema, args, master, working, n, dtypes,
                                         errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  range.args = &args->v2.base;
  for (unsigned k = 0; k < n_states; k++)
    {
      formats[k] = args->state_formats != NULL ? (unsigned) args->state_formats[k]
                                               : _MIXPREC_QFMT_FLOAT32;
      if (_mixprec_state_is_blocked (formats[k]))
        blocked |= 1u << k;
      any_bf16 |= formats[k] == _MIXPREC_QFMT_BFLOAT16;
    }
  master_format = (unsigned) args->master_format;
  range.state_dtypes = any_bf16 ? dtypes : NULL;
  /* The V2 checks see the parameter where the kernels will read it. */
  status = prepare_range (kernels, &args->v2, &range, consts, errbuf, errbuf_len);
  if (status != MIXPREC_PLUGIN_OK)
    return status;
  if (errbuf != NULL && errbuf_len > 0)
    errbuf[0] = '\0';

  numerics = numerics_of (args);
  if (numerics != NULL && (blocked != 0 || master_format != _MIXPREC_QMASTER_FLOAT32))
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s on %s measures numerics only with a FLOAT32 master "
                                "and FLOAT32 or BFLOAT16 state (its numerics_master_mask).",
                                schema->name, schema->device);
  if (numerics != NULL)
    return run_measured (kernels, level, &range, consts, args, numerics, errbuf, errbuf_len);
  if (blocked == 0 && master_format == _MIXPREC_QMASTER_FLOAT32)
    {
      run_kernels (kernels, level, &range, consts);
      return MIXPREC_PLUGIN_OK;
    }

  pick_codecs (level, &codecs);
  used = kernels->states_used != NULL ? kernels->states_used (consts) : ~0u;
  block = blocked != 0 ? args->block_size : MASTER_TILE;
  grad_size = _mixprec_optim_dtype_size (args->v2.base.grad_dtype);
  for (size_t s = 0, b = 0; s < n; s += block, b++)
    {
      size_t len = n - s < block ? n - s : block;
      MixprecOptimizerStepV1 base = args->v2.base;
      void *at[_MIXPREC_OPTIM_MAX_STATES] = { NULL };
      _MixprecOptimRange sub = range;

      /* Element i of the block is element s + i of the call, also for
       * the random bits of stochastic rounding. */
      base.first_index += s;
      sub.args = &base;
      sub.grad = (const char *) grad + s * grad_size;
      sub.n = len;
      sub.states = at;
      if (master_format == _MIXPREC_QMASTER_FLOAT32)
        {
          sub.master = master != NULL ? master + s : NULL;
          sub.working = working != NULL
                        ? (char *) working + s * _mixprec_optim_dtype_size (base.working_dtype) : NULL;
        }
      else
        {
          codecs.master_load (master_format, (const guint16 *) working + s,
                              (const guint16 *) args->master_extra + s, len, ptile);
          sub.master = ptile;
          sub.working = NULL;
        }
      for (unsigned k = 0; k < n_states; k++)
        {
          int is_signed = (int) ((kernels->signed_mask >> k) & 1u);

          if ((blocked & (1u << k)) == 0)
            at[k] = (char *) states[k] + s * _mixprec_optim_dtype_size (dtypes[k]);
          else
            {
              at[k] = tiles[k];
              if (used & (1u << k))
                codecs.decode (formats[k], is_signed, states[k], s, len, args->state_scales[k][b],
                               tiles[k]);
            }
        }
      run_kernels (kernels, level, &sub, consts);
      for (unsigned k = 0; k < n_states; k++)
        if ((blocked & used & (1u << k)) != 0)
          args->state_scales[k][b] =
            codecs.encode (formats[k], (int) ((kernels->signed_mask >> k) & 1u),
                           tiles[k], len, states[k], s);
      if (master_format != _MIXPREC_QMASTER_FLOAT32)
        codecs.master_store (master_format, ptile, len, (guint16 *) working + s,
                             (guint16 *) args->master_extra + s);
    }
  return MIXPREC_PLUGIN_OK;
}

int
_mixprec_optim_register_v3 (MixprecPluginHostV1      *host,
                            const MixprecOptimizerV3 *const v3[3],
                            const MixprecOptimizerV2 *const v2[3],
                            const char              **chosen_kernels,
                            char                     *errbuf,
                            size_t                    errbuf_len)
{
  static const char *const level_names[3] = { "scalar", "avx2", "avx512" };
  int level = 0;

  *chosen_kernels = level_names[0];
  if (host == NULL ||
      host->struct_size < offsetof (MixprecPluginHostV1, register_optimizer_v2) + sizeof host->register_optimizer_v2 ||
      host->register_optimizer_v2 == NULL)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                                "Optimizer %s: the host table offers no register_optimizer_v2 "
                                "(plugin ABI 1.1).", v3[0]->name);
  if (host->abi_major != MIXPREC_PLUGIN_ABI_VERSION_MAJOR)
    return _mixprec_optim_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                                "Optimizer %s was built for plugin ABI %d.x; the library offers %u.%u.",
                                v3[0]->name, MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
                                host->abi_major, host->abi_minor);
  switch (cpu_simd_level ())
    {
    case _MIXPREC_OPTIM_AVX512:
      level = v3[2] != NULL ? 2 : v3[1] != NULL ? 1 : 0;
      break;
    case _MIXPREC_OPTIM_AVX2:
      level = v3[1] != NULL ? 1 : 0;
      break;
    default:
      break;
    }
  *chosen_kernels = level_names[level];
  /* Only the code tables can fail, and only if the maps changed; the
   * kernels then keep the reference search, so this is not fatal. */
  (void) _mixprec_quant_tables_init ();
  /* A library of ABI 1.1 .. 1.3 has the entry reserved (zero) or short of
   * it: revision 2 there. */
  if (host->abi_minor >= 4 &&
      host->struct_size >= offsetof (MixprecPluginHostV1, register_optimizer_v3) + sizeof host->register_optimizer_v3 &&
      host->register_optimizer_v3 != NULL)
    return host->register_optimizer_v3 (host, v3[level], errbuf, errbuf_len);
  return host->register_optimizer_v2 (host, v2[level], errbuf, errbuf_len);
}
