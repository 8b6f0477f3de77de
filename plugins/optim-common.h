/* optim-common.h — what the cpu optimizer plugins share: the checks every
 * step() makes, dispatch between the scalar, AVX2 and AVX-512 kernels, and the
 * per-element plumbing around an optimizer's update (gradient of any dtype
 * times grad_factor, parameter from the master or the working copy, working
 * copy written with either rounding).
 *
 * Plugins link nothing of libmixprec: they get the ABI header and the
 * static inline conversions of mixprec-dtype-private.h (those of
 * numeric/numeric-dtype.h, which the cuda plugin's kernels compile too),
 * nothing more. The updates themselves are in numeric/numeric-optim.h. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <float.h>

#include "mixprec-plugin-abi.h"
#include "mixprec-plugin-fail-private.h"
#include "mixprec-dtype-private.h"

G_BEGIN_DECLS

/* Among features of equal name and device the highest rank wins; these are
 * the reference cpu optimizers, so they take GStreamer's "primary". */
#define _MIXPREC_OPTIM_RANK 256

/* The most state slots an optimizer of this family has. */
#define _MIXPREC_OPTIM_MAX_STATES 4

/* One step() call after its arguments were checked. */
typedef struct {
  const MixprecOptimizerStepV1 *args;       /* of a V2 call: &args->base */
  float                        *master;     /* NULL: the parameter is working[] */
  const void                   *grad;
  void *const                  *states;     /* n_states of them */
  void                         *working;    /* NULL: no low-precision copy */
  size_t                        n;
  unsigned                      n_states;
  /* Revision 2: the dtype of each state slot; NULL when every slot is
   * float32 (a V1 call, or a V2 call that asks for nothing else), so the
   * loops take the state arrays as they are. */
  const MixprecPluginDType     *state_dtypes;
  int                           state_sr;   /* stochastic rounding of bf16 state */
  uint64_t                      state_seed; /* slot k: stream state_seed + k */
  /* ABI 1.6: the run's numerics, measured as the loops go; NULL: none. */
  struct _MixprecOptimMeasure  *measure;
  /* ... or, for the AVX-512 loop alone, n_measures > 1 runs that tile the
   * range: measure[j] holds elements up to measure_ends[j], each run's
   * lanes counted from its own first element. */
  const size_t                 *measure_ends;
  size_t                        n_measures;
} _MixprecOptimRange;

/* The most elements of a run the loops measure at once, so that their
 * counts, summed across lanes in 32 bits, cannot wrap. run_measured()
 * hands a longer run over in pieces of this size, which keep the lanes of
 * the sums (a multiple of 16). */
#define _MIXPREC_OPTIM_MEASURE_CHUNK ((size_t) 1 << 18)

/* One run's numerics (MixprecOptimizerNumericsV1) while the loops measure
 * it: the SIMD loop of a level keeps its sums in registers and leaves them
 * here for the scalar loop that finishes the run, element k of the run in
 * lane k % 8 whoever adds it. */
typedef struct _MixprecOptimMeasure {
  uint32_t grad_under;       /* in: MixprecOptimizerNumericsV1's bounds */
  uint32_t grad_over;
  float    scale;            /* in: 2^p of the working format */
  uint32_t floor_field;      /* in: emin + 127, the exponent field of 2^emin */
  float    dl[8];            /* (now - old)^2, by lane */
  float    ml[8];            /* old^2, by lane */
  uint64_t nonfinite, nonzero, under, over, stale;
  uint32_t amax;
} _MixprecOptimMeasure;

/* The state dtypes the cpu optimizers accept (MixprecOptimizerV2's
 * state_dtype_mask). */
#define _MIXPREC_OPTIM_STATE_DTYPES \
  ((1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16))

/* The per-call constants of an optimizer: floats, indexed by the
 * optimizer's own enum, that prepare() fills once per call (computed in
 * double, rounded once), so the scalar and SIMD loops use the same bits. */
#define _MIXPREC_OPTIM_MAX_CONSTS 16

typedef struct {
  /* The registered schema in V1 form, for the checks and messages. */
  const MixprecOptimizerV1 *schema;
  /* Checks what the schema's bounds cannot express and fills consts. */
  int    (*prepare)    (const MixprecOptimizerStepV1 *args,
                        float                        *consts,
                        char                         *errbuf,
                        size_t                        errbuf_len);
  /* Elements start .. n-1. */
  void   (*run_scalar) (const _MixprecOptimRange     *range,
                        const float                  *consts,
                        size_t                        start);
  /* A multiple of 8 elements from 0; returns how many it did. NULL when
   * the build has no SIMD kernels. */
  size_t (*run_simd)   (const _MixprecOptimRange     *range,
                        const float                  *consts);
  /* AVX-512: all n elements (the tail under a mask); returns n. NULL
   * when the build has no AVX-512 kernels. */
  size_t (*run_avx512) (const _MixprecOptimRange     *range,
                        const float                  *consts);
  /* Revision 3: bit k when the update reads or writes slot k with these
   * constants (sgd without momentum keeps no buffer); NULL: every slot.
   * A slot left out is neither decoded nor encoded again. */
  unsigned (*states_used) (const float                  *consts);
  /* Revision 3: the state_signed_mask (which slots take a signed map). */
  unsigned signed_mask;
} _MixprecOptimKernels;

/* The kernel levels of _mixprec_optim_step(), as libmixprec's
 * _MixprecSimdLevel. */
typedef enum {
  _MIXPREC_OPTIM_SCALAR = 0,
  _MIXPREC_OPTIM_AVX2 = 1,
  _MIXPREC_OPTIM_AVX512 = 2,
} _MixprecOptimLevel;

/* Declares an optimizer's three kernels, PREFIX_run_scalar (elements
 * start .. n-1), PREFIX_run_avx2 (defined only in SIMD builds) and
 * PREFIX_run_avx512 (defined only in AVX-512 builds). */
#define _MIXPREC_OPTIM_DECLARE_KERNELS(prefix) \
  void   prefix##_run_scalar (const _MixprecOptimRange *range, \
                              const float              *consts, \
                              size_t                    start); \
  size_t prefix##_run_avx2   (const _MixprecOptimRange *range, \
                              const float              *consts); \
  size_t prefix##_run_avx512 (const _MixprecOptimRange *range, \
                              const float              *consts)

/* The whole of a V2 step(): checks, prepare(), the kernels of @level (or
 * the best lower one the build has). */
int  _mixprec_optim_step     (const _MixprecOptimKernels    *kernels,
                              _MixprecOptimLevel             level,
                              const MixprecOptimizerStepV2  *args,
                              float                         *master,
                              const void                    *grad,
                              void *const                   *states,
                              void                          *working,
                              size_t                         n,
                              char                          *errbuf,
                              size_t                         errbuf_len);

/* The whole of a V3 step(): the V3 checks (_mixprec_optim_check_args_v3),
 * then, when no slot is block-scaled and the master is FLOAT32, the V2
 * step; otherwise block by block: each blocked slot decoded into an FP32
 * tile, a REMAINDER / KAHAN parameter reconstructed into one, the kernels
 * of @level over the block, the tiles encoded back with the block's new
 * scale, the parameter split back into its two halves. */
int  _mixprec_optim_step_v3  (const _MixprecOptimKernels    *kernels,
                              _MixprecOptimLevel             level,
                              const MixprecOptimizerStepV3  *args,
                              float                         *master,
                              const void                    *grad,
                              void *const                   *states,
                              void                          *working,
                              size_t                         n,
                              char                          *errbuf,
                              size_t                         errbuf_len);

/* What a V3 call adds to the checks of _mixprec_optim_check_args(), for
 * every device: the struct size, known state and master formats, a
 * scale array for each blocked slot, a block size (a power of two, 32 ..
 * 4096) when a slot is blocked, an even length when a slot is int4, and
 * for a REMAINDER / KAHAN master no FP32 master, a bfloat16 working copy
 * and master_extra. @dtypes receives each slot's dtype for the V2 checks
 * (bfloat16 for a BFLOAT16 slot, float32 otherwise). */
int  _mixprec_optim_check_args_v3 (const MixprecOptimizerV1     *schema,
                                   const MixprecOptimizerStepV3 *args,
                                   float                        *master,
                                   void                         *working,
                                   size_t                        n,
                                   MixprecPluginDType           *dtypes,
                                   char                         *errbuf,
                                   size_t                        errbuf_len);

/* The checks of every step(), whatever the device: the arguments struct,
 * dtypes, rounding, step count, learning rate, buffers (when n > 0), the
 * state dtypes of a V2 call (float32 or bfloat16) and the hyper-parameters
 * against @schema's bounds. */
int  _mixprec_optim_check_args (const MixprecOptimizerV1      *schema,
                                const _MixprecOptimRange      *range,
                                char                          *errbuf,
                                size_t                         errbuf_len);

/* Writes a sentence into errbuf (when there is one) and returns status. */
#define _mixprec_optim_fail _mixprec_plugin_fail

/* init(): registers @avx512 when it is not NULL and the CPU has AVX-512
 * F, BW and VL on top of what @avx2 needs, else @avx2 when it is not NULL
 * and the CPU has AVX2, FMA and F16C, else @scalar. MIXPREC_SIMD
 * ("scalar", "avx2", "avx512"; read at each call, so a test can capture
 * every vtable) lowers the choice, never raises it. *@chosen names the
 * kernels registered ("avx512", "avx2" or "scalar"), for the plugin's log. */
int  _mixprec_optim_register (MixprecPluginHostV1           *host,
                              const MixprecOptimizerV2      *scalar,
                              const MixprecOptimizerV2      *avx2,
                              const MixprecOptimizerV2      *avx512,
                              const char                   **chosen,
                              char                          *errbuf,
                              size_t                         errbuf_len);
/* The same for revision 3: registers the V3 vtable of the chosen level
 * through register_optimizer_v3 where the host table has it (ABI 1.4),
 * else the V2 one of the same level through register_optimizer_v2. */
int  _mixprec_optim_register_v3 (MixprecPluginHostV1        *host,
                                 const MixprecOptimizerV3   *const v3[3],
                                 const MixprecOptimizerV2   *const v2[3],
                                 const char                **chosen,
                                 char                       *errbuf,
                                 size_t                      errbuf_len);

/* The size of a MixprecOptimizerStepV3 of ABI 1.4 and 1.5: up to
 * master_extra. */
#define _MIXPREC_OPTIM_STEP_V3_SIZE_1_4 \
  (G_STRUCT_OFFSET (MixprecOptimizerStepV3, master_extra) + sizeof (void *))

/* The formats every cpu optimizer speaks (revision 3). */
#define _MIXPREC_OPTIM_STATE_FORMATS 0x7Fu
#define _MIXPREC_OPTIM_MASTER_FORMATS 0x7u
/* The master formats whose calls the cpu optimizers measure (ABI 1.6):
 * FLOAT32, whose calls take the loops directly. */
#define _MIXPREC_OPTIM_NUMERICS_MASTERS (1u << MIXPREC_PLUGIN_MASTER_FLOAT32)

/* A kernel of the SIMD (AVX-512) build, or NULL in a build without one. */
#ifdef MIXPREC_HAVE_X86_SIMD
# define _MIXPREC_OPTIM_SIMD(kernel) (kernel)
#else
# define _MIXPREC_OPTIM_SIMD(kernel) NULL
#endif
#ifdef MIXPREC_HAVE_X86_AVX512
# define _MIXPREC_OPTIM_AVX512_KERNEL(kernel) (kernel)
#else
# define _MIXPREC_OPTIM_AVX512_KERNEL(kernel) NULL
#endif

/* A vtable of this family (V2 when @ostep is set, the V1-form schema of
 * the checks when it is NULL); the three of a plugin differ in step only. */
#define _MIXPREC_OPTIM_SCHEMA(oname, odescription, ohparams, ostates) \
  .name = (oname), .device = "cpu", .rank = _MIXPREC_OPTIM_RANK, \
  .description = (odescription), \
  .hparams = (ohparams), .n_hparams = G_N_ELEMENTS (ohparams), \
  .n_state_slots = G_N_ELEMENTS (ostates), .state_names = (ostates)
#define _MIXPREC_OPTIM_VTABLE(oname, odescription, ohparams, ostates, ostep) \
  { _MIXPREC_OPTIM_SCHEMA (oname, odescription, ohparams, ostates), \
    .state_dtype_mask = _MIXPREC_OPTIM_STATE_DTYPES, .step = (ostep) }

#define _MIXPREC_OPTIM_VTABLE_V3(oname, odescription, ohparams, ostates, osigned, ostep) \
  { _MIXPREC_OPTIM_SCHEMA (oname, odescription, ohparams, ostates), \
    .state_dtype_mask = _MIXPREC_OPTIM_STATE_DTYPES, \
    .state_format_mask = _MIXPREC_OPTIM_STATE_FORMATS, \
    .master_format_mask = _MIXPREC_OPTIM_MASTER_FORMATS, \
    .state_signed_mask = (osigned), .step = (ostep), \
    .numerics_master_mask = _MIXPREC_OPTIM_NUMERICS_MASTERS }

#define _MIXPREC_OPTIM_STEP_V3_FUNC(func, kernels, level) \
  static int \
  func (const MixprecOptimizerStepV3 *args, float *master, const void *grad, \
        void *const *states, void *working, size_t n, char *errbuf, size_t errbuf_len) \
  { \
    return _mixprec_optim_step_v3 ((kernels), (level), args, master, grad, states, working, n, \
                                   errbuf, errbuf_len); \
  }

/* A step() entry point running the kernels of @level. */
#define _MIXPREC_OPTIM_STEP_FUNC(func, kernels, level) \
  static int \
  func (const MixprecOptimizerStepV2 *args, float *master, const void *grad, \
        void *const *states, void *working, size_t n, char *errbuf, size_t errbuf_len) \
  { \
    return _mixprec_optim_step ((kernels), (level), args, master, grad, states, working, n, \
                                errbuf, errbuf_len); \
  }

/* Defines the plugin around one optimizer: the step() entry points and
 * vtables of each level for revisions 2 and 3, init() (which registers
 * revision 3 where the library has it and logs the kernels it chose), and
 * through MIXPREC_PLUGIN_DEFINE the description and the entry point
 * mixprec_plugin_<symbol>_get_desc. @osigned is the state_signed_mask,
 * @ostates_used the kernels' states_used (or NULL). */
#define _MIXPREC_OPTIM_PLUGIN_DEFINE(symbol, plugin_name, plugin_description, \
                                     oname, odescription, ohparams, ostates, osigned, \
                                     oprepare, orun_scalar, orun_simd, orun_avx512, \
                                     ostates_used) \
  static const MixprecOptimizerV1 symbol##_schema = \
    { _MIXPREC_OPTIM_SCHEMA (oname, odescription, ohparams, ostates) }; \
  static const _MixprecOptimKernels symbol##_kernels = { \
    &symbol##_schema, (oprepare), (orun_scalar), _MIXPREC_OPTIM_SIMD (orun_simd), \
    _MIXPREC_OPTIM_AVX512_KERNEL (orun_avx512), (ostates_used), (osigned) }; \
  _MIXPREC_OPTIM_STEP_FUNC (symbol##_step_scalar, &symbol##_kernels, _MIXPREC_OPTIM_SCALAR) \
  _MIXPREC_OPTIM_STEP_FUNC (symbol##_step_simd, &symbol##_kernels, _MIXPREC_OPTIM_AVX2) \
  _MIXPREC_OPTIM_STEP_FUNC (symbol##_step_avx512, &symbol##_kernels, _MIXPREC_OPTIM_AVX512) \
  _MIXPREC_OPTIM_STEP_V3_FUNC (symbol##_step3_scalar, &symbol##_kernels, _MIXPREC_OPTIM_SCALAR) \
  _MIXPREC_OPTIM_STEP_V3_FUNC (symbol##_step3_simd, &symbol##_kernels, _MIXPREC_OPTIM_AVX2) \
  _MIXPREC_OPTIM_STEP_V3_FUNC (symbol##_step3_avx512, &symbol##_kernels, _MIXPREC_OPTIM_AVX512) \
  static const MixprecOptimizerV2 symbol##_scalar_vtable = \
    _MIXPREC_OPTIM_VTABLE (oname, odescription, ohparams, ostates, symbol##_step_scalar); \
  static const MixprecOptimizerV2 symbol##_simd_vtable = \
    _MIXPREC_OPTIM_VTABLE (oname, odescription, ohparams, ostates, symbol##_step_simd); \
  static const MixprecOptimizerV2 symbol##_avx512_vtable = \
    _MIXPREC_OPTIM_VTABLE (oname, odescription, ohparams, ostates, symbol##_step_avx512); \
  static const MixprecOptimizerV3 symbol##_scalar_vtable3 = \
    _MIXPREC_OPTIM_VTABLE_V3 (oname, odescription, ohparams, ostates, osigned, symbol##_step3_scalar); \
  static const MixprecOptimizerV3 symbol##_simd_vtable3 = \
    _MIXPREC_OPTIM_VTABLE_V3 (oname, odescription, ohparams, ostates, osigned, symbol##_step3_simd); \
  static const MixprecOptimizerV3 symbol##_avx512_vtable3 = \
    _MIXPREC_OPTIM_VTABLE_V3 (oname, odescription, ohparams, ostates, osigned, symbol##_step3_avx512); \
  static int \
  symbol##_init (MixprecPluginHostV1 *host, char *errbuf, size_t errbuf_len) \
  { \
    const char *chosen = NULL; \
    const MixprecOptimizerV3 *const v3[3] = { \
      &symbol##_scalar_vtable3, \
      symbol##_kernels.run_simd != NULL ? &symbol##_simd_vtable3 : NULL, \
      symbol##_kernels.run_avx512 != NULL ? &symbol##_avx512_vtable3 : NULL }; \
    const MixprecOptimizerV2 *const v2[3] = { \
      &symbol##_scalar_vtable, \
      symbol##_kernels.run_simd != NULL ? &symbol##_simd_vtable : NULL, \
      symbol##_kernels.run_avx512 != NULL ? &symbol##_avx512_vtable : NULL }; \
    int status = _mixprec_optim_register_v3 (host, v3, v2, &chosen, errbuf, errbuf_len); \
    if (status == MIXPREC_PLUGIN_OK) \
      MIXPREC_PLUGIN_LOG (MIXPREC_PLUGIN_LOG_INFO, "optimizer %s (cpu): %s kernels", (oname), chosen); \
    return status; \
  } \
  MIXPREC_PLUGIN_DEFINE (symbol, (plugin_name), (plugin_description), symbol##_init, \
                         PACKAGE_VERSION, "LGPL-2.1-or-later", PACKAGE_NAME)

/* ------------------------------------------------------------ one element
 *
 * The scalar loop of every optimizer and the tail of its SIMD loop. */

typedef float (*_MixprecOptimUpdate1) (const float  *consts,
                                       float         p,
                                       float         g,
                                       float *const *states,
                                       size_t        i);

static inline float
_mixprec_optim_grad1 (const _MixprecOptimRange *r,
                      size_t                    i)
{
  float g;

  switch (r->args->grad_dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      g = _mixprec_bf16_to_f32 (((const guint16 *) r->grad)[i]);
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      g = _mixprec_f16_to_f32 (((const guint16 *) r->grad)[i]);
      break;
    default:
      g = ((const float *) r->grad)[i];
      break;
    }
  return g * r->args->grad_factor;
}

/* Bytes per element of a buffer of @dtype (float32, or a 16-bit format). */
static inline size_t
_mixprec_optim_dtype_size (MixprecPluginDType dtype)
{
  return dtype == MIXPREC_PLUGIN_DTYPE_FLOAT32 ? 4 : 2;
}

/* How far ahead of the block the SIMD loops prefetch, in elements. The
 * step streams four or five arrays at once, more than the hardware
 * prefetchers keep far enough ahead of an out-of-order window filled by
 * AdamW's division and square root (measured on an AVX-512 Xeon: the
 * FP32-master AdamW pass about 15% faster with it, 256 and 1024 alike). */
#define _MIXPREC_OPTIM_PREFETCH 256

/* Prefetches element @i + _MIXPREC_OPTIM_PREFETCH of @base (elements of
 * @size bytes) from the block of @lanes elements at @i that starts one of
 * its cache lines: once per line. A prefetch past the end of an array is
 * harmless: it never faults and reads nothing. */
static inline __attribute__ ((always_inline)) void
_mixprec_optim_prefetch (const void *base,
                         size_t      size,
                         size_t      i,
                         size_t      lanes)
{
  if (base != NULL && (i & (64 / size - 1)) < lanes)
    __builtin_prefetch ((const char *) base + (i + _MIXPREC_OPTIM_PREFETCH) * size, 0, 3);
}

/* The step's arrays ahead of the block of @lanes elements at @i: the
 * parameter, the gradient, the working copy (unless it is the parameter)
 * and @n_states state slots, float32 or each in @sdtypes[k] when @sdtypes
 * is not NULL. */
static inline __attribute__ ((always_inline)) void
_mixprec_optim_prefetch_streams (const void               *pbase,
                                 MixprecPluginDType        pdtype,
                                 const void               *grad,
                                 MixprecPluginDType        gdtype,
                                 const void               *working,
                                 MixprecPluginDType        wdtype,
                                 float *const             *states,
                                 unsigned                  n_states,
                                 const MixprecPluginDType *sdtypes,
                                 size_t                    i,
                                 size_t                    lanes)
{
  _mixprec_optim_prefetch (pbase, _mixprec_optim_dtype_size (pdtype), i, lanes);
  _mixprec_optim_prefetch (grad, _mixprec_optim_dtype_size (gdtype), i, lanes);
  if (working != NULL && working != pbase)
    _mixprec_optim_prefetch (working, _mixprec_optim_dtype_size (wdtype), i, lanes);
  for (unsigned k = 0; k < n_states; k++)
    _mixprec_optim_prefetch (states[k], sdtypes != NULL ? _mixprec_optim_dtype_size (sdtypes[k]) : 4, i, lanes);
}

/* Element @i of the gradient widened to FP32, before grad_factor. */
static inline float
_mixprec_optim_grad_raw1 (const _MixprecOptimRange *r,
                          size_t                    i)
{
  switch (r->args->grad_dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return _mixprec_bf16_to_f32 (((const guint16 *) r->grad)[i]);
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return _mixprec_f16_to_f32 (((const guint16 *) r->grad)[i]);
    default:
      return ((const float *) r->grad)[i];
    }
}

static inline uint32_t
_mixprec_optim_bits1 (float f)
{
  uint32_t bits;

  memcpy (&bits, &f, sizeof bits);
  return bits;
}

/* What element @i of the run adds to @m: the raw gradient @g's class and
 * magnitude; with a master, @old and @now, and with a working copy too,
 * whether the working value just written moved by less than half an ulp
 * (see MixprecOptimizerNumericsV1). */
static inline void
_mixprec_optim_measure1 (_MixprecOptimMeasure     *m,
                         const _MixprecOptimRange *r,
                         size_t                    i,
                         float                     g,
                         float                     old,
                         float                     now)
{
  uint32_t a = _mixprec_optim_bits1 (g) & 0x7fffffffu;

  if (a >= 0x7f800000u)
    m->nonfinite++;
  else if (a != 0)
    {
      m->nonzero++;
      m->under += a < m->grad_under;
      m->over += a >= m->grad_over;
      m->amax = a > m->amax ? a : m->amax;
    }
  if (r->master == NULL)
    return;
  {
    float d = now - old;

    m->dl[i % 8] += d * d;
    m->ml[i % 8] += old * old;
    if (r->working != NULL)
      {
        float w;
        uint32_t field, half_bits;
        float half;

        switch (r->args->working_dtype)
          {
          case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
            w = _mixprec_bf16_to_f32 (((const guint16 *) r->working)[i]);
            break;
          case MIXPREC_PLUGIN_DTYPE_FLOAT16:
            w = _mixprec_f16_to_f32 (((const guint16 *) r->working)[i]);
            break;
          default:
            w = ((const float *) r->working)[i];
            break;
          }
        field = (_mixprec_optim_bits1 (w) >> 23) & 0xffu;
        half_bits = (field > m->floor_field ? field : m->floor_field) << 23;
        memcpy (&half, &half_bits, sizeof half);
        m->stale += field != 0xffu && (d < 0 ? -d : d) * m->scale < half;
      }
  }
}

static inline float
_mixprec_optim_param1 (const _MixprecOptimRange *r,
                       size_t                    i)
{
  if (r->master != NULL)
    return r->master[i];
  switch (r->args->working_dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      return _mixprec_bf16_to_f32 (((const guint16 *) r->working)[i]);
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      return _mixprec_f16_to_f32 (((const guint16 *) r->working)[i]);
    default:
      return ((const float *) r->working)[i];
    }
}

static inline void
_mixprec_optim_store1 (const _MixprecOptimRange *r,
                       size_t                    i,
                       float                     p)
{
  const MixprecOptimizerStepV1 *a = r->args;
  int sr = a->rounding == MIXPREC_PLUGIN_ROUNDING_STOCHASTIC;

  if (r->master != NULL)
    r->master[i] = p;
  if (r->working == NULL)
    return;
  switch (a->working_dtype)
    {
    case MIXPREC_PLUGIN_DTYPE_BFLOAT16:
      ((guint16 *) r->working)[i] =
        sr ? _mixprec_f32_to_bf16_sr (p, _mixprec_sr_bits16 (a->seed, a->first_index + i))
           : _mixprec_f32_to_bf16_rne (p);
      break;
    case MIXPREC_PLUGIN_DTYPE_FLOAT16:
      ((guint16 *) r->working)[i] =
        sr ? _mixprec_f32_to_f16_sr (p, _mixprec_sr_bits (a->seed, a->first_index + i))
           : _mixprec_f32_to_f16_rne (p);
      break;
    default:
      ((float *) r->working)[i] = p;
      break;
    }
}

/* One bfloat16 state value from FP32: nearest even, or stochastic with
 * the bits of (seed, index) as the working copy draws them. */
static inline guint16
_mixprec_optim_state_bf16 (float    v,
                           int      sr,
                           uint64_t seed,
                           uint64_t index)
{
  return sr ? _mixprec_f32_to_bf16_sr (v, _mixprec_sr_bits16 (seed, index))
            : _mixprec_f32_to_bf16_rne (v);
}

/* The scalar loop around @update; inlined into each optimizer's scalar
 * kernel, where @update is a constant and gets inlined too.
 *
 * With bfloat16 state the update still sees FP32 arrays: each element's
 * slots are widened (exactly) into a one-element FP32 staging slot, the
 * update runs there unchanged, and the result is rounded back. The
 * optimizers' formulas thus stay in one place and the SIMD loops, which
 * stage a block the same way, give the same bits. */
static inline __attribute__ ((always_inline)) void
_mixprec_optim_run_scalar (const _MixprecOptimRange *r,
                           const float              *consts,
                           size_t                    start,
                           _MixprecOptimUpdate1      update)
{
  float *states[_MIXPREC_OPTIM_MAX_STATES] = { NULL };
  const unsigned n_states = r->n_states < _MIXPREC_OPTIM_MAX_STATES ? r->n_states
                                                                     : _MIXPREC_OPTIM_MAX_STATES;

  for (unsigned k = 0; k < n_states; k++)
    states[k] = r->states[k];
  if (r->state_dtypes == NULL)
    {
      for (size_t i = start; i < r->n; i++)
        {
          float p = _mixprec_optim_param1 (r, i);
          float g = _mixprec_optim_grad1 (r, i);
          float now = update (consts, p, g, states, i);

          _mixprec_optim_store1 (r, i, now);
          if (r->measure != NULL)
            _mixprec_optim_measure1 (r->measure, r, i, _mixprec_optim_grad_raw1 (r, i), p, now);
        }
      return;
    }
  for (size_t i = start; i < r->n; i++)
    {
      float p = _mixprec_optim_param1 (r, i);
      float g = _mixprec_optim_grad1 (r, i);
      float old = p;
      float staged[_MIXPREC_OPTIM_MAX_STATES];
      float *at[_MIXPREC_OPTIM_MAX_STATES] = { NULL };

      for (unsigned k = 0; k < n_states; k++)
        {
          if (r->state_dtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
            {
              staged[k] = _mixprec_bf16_to_f32 (((const guint16 *) states[k])[i]);
              at[k] = &staged[k];
            }
          else
            at[k] = states[k] + i;
        }
      p = update (consts, p, g, at, 0);
      for (unsigned k = 0; k < n_states; k++)
        if (r->state_dtypes[k] == MIXPREC_PLUGIN_DTYPE_BFLOAT16)
          ((guint16 *) states[k])[i] =
            _mixprec_optim_state_bf16 (staged[k], r->state_sr, r->state_seed + k,
                                       r->args->first_index + i);
      _mixprec_optim_store1 (r, i, p);
      if (r->measure != NULL)
        _mixprec_optim_measure1 (r->measure, r, i, _mixprec_optim_grad_raw1 (r, i), old, p);
    }
}

G_END_DECLS
