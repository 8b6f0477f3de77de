/* mixprec-engine-fp4.c — 4-bit working copies (NVFP4, MXFP4): the packed
 * E2M1 copy and block scales of the parameters the fp4 section covers,
 * written from the FP32 values after each applied step and gathered as
 * the FP8 copies are (mixprec-engine-fp8.c, whose group machinery this
 * file plugs into: an fp4 group is an fp8 group with g->fp8.fp4 set,
 * laid out one parameter per unit as MX groups are, and the fp8 entry
 * points hand its work over to the functions here).
 *
 * The high-precision copies stay: the FP32 master for the optimizer and,
 * except under ZeRO-3 where the 4-bit copy is what is gathered, the
 * bf16/fp16 working copy, which the trainer may read for what its backward
 * needs at higher precision (Transformer Engine keeps its rowwise and
 * columnwise copies for the same reason). Under NVFP4's 16x16 tiles a
 * matrix and its transpose quantise alike, so the one 4-bit copy serves
 * the forward GEMM and the backward's GEMM with the transposed weight.
 *
 * World-size invariance: each rank quantises the blocks of its slice
 * (slices are multiples of _MIXPREC_SUMSQ_BLOCK elements from the
 * parameter's start, so they hold whole 1x16 and 1x32 blocks), but two
 * quantities depend on other ranks' elements: NVFP4's per-tensor scale
 * (the tensor's amax) and, under 16x16 tiles, the amax of a tile whose
 * sixteen rows lie on several ranks. Each rank takes the partial amaxes
 * of its slice (one per tile, or one per tensor), the ranks agree on them
 * with one MAX all-reduce per group, and every rank then computes the
 * same scales the whole tensor gives: the bytes equal
 * mixprec_quantize_blocks() of the whole FP32 tensor at any world size.
 * MXFP4's scales are the blocks' own: no agreement.
 *
 * One departure from mixprec_quantize_blocks(): an all-zero tensor gets
 * the tensor scale 1 instead of 0 (whose block scales would decode to
 * NaN), so that a zero-initialised matrix reads back as zeros, as
 * Transformer Engine's cast does. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-fp4-private.h"
#include "mixprec-parallel-private.h"

#define NVFP4_BLOCK 16u
#define CAST_CHUNK_BLOCKS 4096u

static guint
block_of (MixprecBlockRecipe recipe)
{
  return mixprec_block_recipe_get_block_size (recipe);
}

/* ---------------------------------------------------------------- registration */

gboolean
_mixprec_engine_fp4_register (MixprecEngine *self,
                              MixprecParam  *param,
                              gboolean      *taken,
                              GError       **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (param);
  const gchar *name = mixprec_param_get_name (param);
  MixprecBlockRecipe recipe;
  MixprecMxScaleMode mode;
  const guint64 *shape;
  guint ndim = 0;
  guint b;

  *taken = FALSE;
  if (!mixprec_config_get_fp4_recipe (self->config, &recipe, &mode) ||
      !mixprec_precision_policy_is_fp4 (self->policy, name, mixprec_param_get_module_type (param)))
    return TRUE;
  /* As for FP8: the matrices a GEMM multiplies; vectors keep the working
   * dtype. */
  shape = mixprec_param_get_shape (param, &ndim);
  if (ndim < 2)
    return TRUE;
  b = block_of (recipe);
  if (!_mixprec_device_memory_is_host (self->device))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': 4-bit working copies (fp4.enabled) are written on the cpu "
                   "device only for now, not on device '%s'", name,
                   _mixprec_device_get_name (self->device));
      return FALSE;
    }
  if (shape[ndim - 1] % b != 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': its rows of %" G_GUINT64_FORMAT " elements (the last "
                   "dimension) are not whole %s blocks of %u; leave it out of fp4.modules or "
                   "name it in mixprec.fp32_params", name, shape[ndim - 1],
                   recipe == MIXPREC_BLOCK_RECIPE_MXFP4 ? "MXFP4" : "NVFP4", b);
      return FALSE;
    }
  if (!mixprec_param_has_master (param) &&
      mixprec_param_get_working_dtype (param) != MIXPREC_DTYPE_FLOAT32)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': its 4-bit working copy is quantised from FP32 values, but "
                   "the precision policy keeps it in %s without master weights", name,
                   mixprec_dtype_get_name (mixprec_param_get_working_dtype (param)));
      return FALSE;
    }
  if (self->world > 1 && _MIXPREC_SUMSQ_BLOCK % (2 * b) != 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': blocks of %u do not divide %" G_GSIZE_FORMAT
                   ", the granularity of the slices across %u ranks", name, b,
                   (gsize) _MIXPREC_SUMSQ_BLOCK, self->world);
      return FALSE;
    }
  s->fp8 = FALSE;
  s->fp4 = TRUE;
  s->fp4_recipe = recipe;
  s->fp4_cols = shape[ndim - 1];
  s->fp4_tensor_scale = 1.0f;
  /* The group machinery lays MX groups out one parameter per unit, and
   * agrees on no amax of theirs in the overflow agreement: so for FP4. */
  s->fp8_kind = MIXPREC_FP8_RECIPE_MX;
  *taken = TRUE;
  return TRUE;
}

/* ---------------------------------------------------------------- layout */

static guint64
fp4_elements (const Group *g)
{
  return g->working_local ? g->local_n + g->persist_n : g->padded;
}

static void
point_whole (Group *g)
{
  guint b = block_of (g->fp8.fp4_recipe);

  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);

      for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
        {
          MixprecParam *p = g_ptr_array_index (g->params, i);
          _MixprecParamStorage *s = _mixprec_param_get_storage (p);
          guint64 e0 = s->offset - u->flat;

          s->fp8_data = NULL;
          s->fp8_scales = NULL;
          s->n_fp8_scales = mixprec_param_get_numel (p) / b;
          if (!g->working_local)
            s->fp8_data = g->fp8.data + s->offset / 2;
          else if (u->persistent)
            s->fp8_data = g->fp8.data + (g->local_n + u->persist_at + e0) / 2;
          if (s->fp8_data != NULL)
            s->fp8_scales = g->fp8.scales + (g->working_local ? g->fp8.scales_whole : 0) +
                            u->fp8.scales_at + e0 / b;
        }
    }
}

gboolean
_mixprec_engine_fp4_layout (MixprecEngine *self,
                            Group         *g,
                            GError       **error)
{
  guint b = block_of (g->fp8.fp4_recipe);
  guint64 at = 0, local = 0, bytes = (fp4_elements (g) + 1) / 2;

  mixprec_config_get_fp4_recipe (self->config, NULL, &g->fp8.fp4_mode);

  /* Byte offsets are element offsets halved, scale offsets element
   * offsets over the block: every unit and slice must start on a block. */
  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);

      if (u->padded % b != 0 || UNIT_SLICE (self, u) % b != 0 || u->flat % b != 0 ||
          u->local % b != 0 || (u->persistent && u->persist_at % b != 0))
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                       "parameter '%s': its unit of %" G_GUINT64_FORMAT " padded elements "
                       "(%" G_GUINT64_FORMAT " a rank) is not laid out on whole 4-bit blocks of %u",
                       mixprec_param_get_name (g_ptr_array_index (g->params, u->first_param)),
                       u->padded, UNIT_SLICE (self, u), b);
          return FALSE;
        }
    }
  g->fp8.data = _mixprec_engine_alloc (self, self->device, MAX (bytes, 1), 1, BUF_FP8, error);
  if (g->fp8.data == NULL)
    return FALSE;
  self->buf_plan[BUF_FP8] += bytes;
  g->fp8.agreed = g_new0 (gfloat, MAX (g->params->len, 1));
  /* As MX: the whole scale space (up to ZeRO-2); under ZeRO-3 the slices'
   * scales, then from scales_whole those of the persistent units. */
  for (guint k = 0; k < g->units->len; k++)
    {
      Unit *u = &g_array_index (g->units, Unit, k);
      guint64 n = u->padded / b;

      u->fp8.scales_at = at;
      u->fp8.scales_local = local;
      if (!g->working_local || u->persistent)
        at += n;
      local += n / self->world;
    }
  g->fp8.scales_whole = g->working_local ? local : 0;
  g->fp8.scales_n = g->fp8.scales_whole + at;
  g->fp8.scales = _mixprec_engine_alloc (self, self->device, MAX (g->fp8.scales_n, 1), 1,
                                         BUF_FP8_SCALES, error);
  if (g->fp8.scales == NULL)
    return FALSE;
  self->buf_plan[BUF_FP8_SCALES] += g->fp8.scales_n;
  point_whole (g);
  return TRUE;
}

/* ---------------------------------------------------------------- quantisation */

/* What one parameter needs agreed: NVFP4 one amax per 16x16 tile (2D) or
 * per tensor (1D); MXFP4 none. */
static guint64
n_agreed (MixprecBlockRecipe recipe, guint64 numel, guint64 cols)
{
  guint64 rows = cols > 0 ? numel / cols : 0, bpr = cols / NVFP4_BLOCK;

  switch (recipe)
    {
    case MIXPREC_BLOCK_RECIPE_NVFP4_2D:
      return (rows + NVFP4_BLOCK - 1) / NVFP4_BLOCK * bpr;
    case MIXPREC_BLOCK_RECIPE_NVFP4:
      return 1;
    case MIXPREC_BLOCK_RECIPE_MXFP4:
    default:
      return 0;
    }
}

/* The tile of NVFP4 block @k (blocks counted row-major from the
 * parameter's start). */
static inline guint64
tile_of (guint64 k, guint64 bpr)
{
  return (k / bpr) / NVFP4_BLOCK * bpr + k % bpr;
}

/* The larger of two amaxes, a NaN winning as in torch.amax (fmaxf would
 * drop it). */
static inline gfloat
max_nan (gfloat a, gfloat b)
{
  return isnan (a) || b > a || isnan (b) ? (isnan (a) ? a : b) : a;
}

/* Folds the amaxes of the blocks [k0, k0 + n) at @src into @amax (fp32
 * bits, as floats: the MAX all-reduce moves float32; non-negative floats
 * order as their bits do). */
static void
partial_amaxes (MixprecBlockRecipe recipe, const gfloat *src, guint64 k0, guint64 n,
                guint64 cols, gfloat *amax)
{
  guint64 bpr = cols / NVFP4_BLOCK;

  for (guint64 k = 0; k < n; k++)
    {
      gfloat a = 0.0f;
      guint32 bits = _mixprec_fp4_amax_bits (src + k * NVFP4_BLOCK, NVFP4_BLOCK);

      memcpy (&a, &bits, sizeof a);
      if (recipe == MIXPREC_BLOCK_RECIPE_NVFP4_2D)
        amax[tile_of (k0 + k, bpr)] = max_nan (amax[tile_of (k0 + k, bpr)], a);
      else
        amax[0] = max_nan (amax[0], a);
    }
}

static guint32
float_bits (gfloat f)
{
  guint32 u;

  memcpy (&u, &f, sizeof u);
  return u;
}

/* The per-tensor scale of NVFP4 from the tensor's amax (see the top of
 * this file for the all-zero tensor). */
static gfloat
tensor_scale (guint32 amax_bits)
{
  gfloat ts;

  if (amax_bits == 0)
    return 1.0f;
  /* amax / (448 * 6), one fp32 division as mixprec_quantize_blocks() */
  memcpy (&ts, &amax_bits, sizeof ts);
  return ts / 2688.0f;
}

typedef struct {
  MixprecBlockRecipe recipe;
  MixprecMxScaleMode mode;
  const gfloat *src;         /* the range's first element */
  guint64 k0;                /* its first block (of 16 for NVFP4) */
  guint64 cols;
  const gfloat *amax;        /* the agreed amaxes (NVFP4 2D: per tile) */
  gfloat ts;
  guint8 *dst;               /* packed, at the range's first element */
  guint8 *scales;            /* at the range's first block */
} Cast;

/* Quantises the @n_blocks blocks of @c's range, in order. */
static void
cast_blocks (const Cast *c, guint64 n_blocks)
{
  if (c->recipe == MIXPREC_BLOCK_RECIPE_MXFP4)
    {
      _mixprec_fp4_quantize_mxfp4 (c->mode, c->src, n_blocks, c->dst, c->scales);
      return;
    }
  for (guint64 k = 0; k < n_blocks; k++)
    {
      guint32 bits = c->recipe == MIXPREC_BLOCK_RECIPE_NVFP4_2D
                     ? float_bits (c->amax[tile_of (c->k0 + k, c->cols / NVFP4_BLOCK)])
                     : _mixprec_fp4_amax_bits (c->src + k * NVFP4_BLOCK, NVFP4_BLOCK);

      c->scales[k] = _mixprec_nvfp4_scale_byte (bits, c->ts);
    }
  _mixprec_fp4_cast_nvfp4 (c->src, n_blocks, c->scales, c->ts, c->dst);
}

typedef struct {
  const Cast *cast;
  guint64 n_blocks;
} CastJob;

/* Chunks [first, end) of CAST_CHUNK_BLOCKS blocks: each block's bytes
 * depend on the block and the agreed amaxes only, so chunks are
 * independent. */
static void
cast_chunks (gsize first, gsize end, gpointer data)
{
  const CastJob *job = data;
  guint b = block_of (job->cast->recipe);

  for (gsize ch = first; ch < end; ch++)
    {
      guint64 k = (guint64) ch * CAST_CHUNK_BLOCKS;
      Cast piece = *job->cast;

      piece.src += k * b;
      piece.k0 += k * (b / NVFP4_BLOCK);
      piece.dst += k * b / 2;
      piece.scales += k;
      cast_blocks (&piece, MIN ((guint64) CAST_CHUNK_BLOCKS, job->n_blocks - k));
    }
}

/* Quantises @n_elements (whole blocks) of @c's range across the pool. */
static void
cast_range (const Cast *c, guint64 n_elements)
{
  CastJob job = { c, n_elements / block_of (c->recipe) };

  _mixprec_parallel_for ((job.n_blocks + CAST_CHUNK_BLOCKS - 1) / CAST_CHUNK_BLOCKS, 1, 1,
                         cast_chunks, &job);
}

/* Where this rank's part of parameter @i of @g lies: elements [*lo, *hi)
 * of the parameter (every element on one process and under ZeRO-0, this
 * rank's slice otherwise), its FP32 values, and its place in the 4-bit
 * buffers (the whole copy up to ZeRO-2, the slices under ZeRO-3). FALSE
 * when the rank holds none of it. */
static gboolean
rank_part (MixprecEngine *self, Group *g, guint i, guint64 *lo, guint64 *hi,
           const gfloat **src, guint8 **dst, guint8 **scales)
{
  MixprecParam *p = g_ptr_array_index (g->params, i);
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  const Unit *u = &g_array_index (g->units, Unit, s->unit);
  guint64 numel = mixprec_param_get_numel (p), e0 = s->offset - u->flat;
  guint64 slice = UNIT_SLICE (self, u), first = self->rank * slice;
  guint b = block_of (g->fp8.fp4_recipe);

  if (self->world == 1 || !g->state_local)
    {
      *lo = 0;
      *hi = numel;
      *src = s->master;
    }
  else
    {
      gfloat *master;
      guint64 state_at;
      gpointer working;

      *lo = MAX (e0, first) - e0;
      *hi = MIN (e0 + numel, first + slice);
      if (*hi <= e0 || *lo + e0 >= *hi)
        return FALSE;
      *hi -= e0;
      _mixprec_engine_values_at (self, g, u, e0 + *lo, &master, &state_at, &working);
      *src = master;
    }
  if (numel == 0)
    return FALSE;
  if (g->working_local)
    {
      *dst = g->fp8.data + (u->local + (e0 + *lo - first)) / 2;
      *scales = g->fp8.scales + u->fp8.scales_local + (e0 + *lo - first) / b;
    }
  else
    {
      *dst = g->fp8.data + (u->flat + e0 + *lo) / 2;
      *scales = g->fp8.scales + u->fp8.scales_at + (e0 + *lo) / b;
    }
  return TRUE;
}

/* MAX of @n floats over the data-parallel ranks that hold parts (@dp)
 * and the model-parallel group (whose ranks hold other shards of the
 * same tensors, as Transformer Engine reduces NVFP4's amax). */
static gboolean
agree_max (MixprecEngine *self, gfloat *values, guint64 n, gboolean dp, GError **error)
{
  GError *local = NULL;

  if (n == 0)
    return TRUE;
  if (dp && self->world > 1 &&
      !mixprec_comm_all_reduce (self->comm, values, values, n, MIXPREC_DTYPE_FLOAT32,
                                MIXPREC_REDUCE_MAX, 0, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the NVFP4 amaxes");
  if (self->mp_comm != NULL &&
      !mixprec_comm_all_reduce (self->mp_comm, values, values, n, MIXPREC_DTYPE_FLOAT32,
                                MIXPREC_REDUCE_MAX, 0, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the NVFP4 amaxes");
  return TRUE;
}

/* Makes the copies whole from the slices each rank wrote: ZeRO-1/2 every
 * unit, in place; ZeRO-3 the persistent units. */
static gboolean
gather_group (MixprecEngine *self, Group *g, GError **error)
{
  guint b = block_of (g->fp8.fp4_recipe);

  if (!g->state_local)
    return TRUE;
  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 slice = UNIT_SLICE (self, u);
      guint8 *whole_data, *whole_scales;
      g_autofree guint8 *send = NULL, *send_scales = NULL;

      if (slice == 0 || (g->working_local && !u->persistent) || (self->world == 1 && !g->working_local))
        continue;
      if (g->working_local)
        {
          whole_data = g->fp8.data + (g->local_n + u->persist_at) / 2;
          whole_scales = g->fp8.scales + g->fp8.scales_whole + u->fp8.scales_at;
          if (self->world == 1)
            {
              /* One process under ZeRO-3: the slice is the whole unit. */
              memcpy (whole_data, g->fp8.data + u->local / 2, slice / 2);
              memcpy (whole_scales, g->fp8.scales + u->fp8.scales_local, slice / b);
              continue;
            }
          send = g_memdup2 (g->fp8.data + u->local / 2, slice / 2);
          send_scales = g_memdup2 (g->fp8.scales + u->fp8.scales_local, slice / b);
        }
      else
        {
          whole_data = g->fp8.data + u->flat / 2;
          whole_scales = g->fp8.scales + u->fp8.scales_at;
          /* The all-gather reads its send buffer apart from the receive
           * buffer. */
          send = g_memdup2 (whole_data + self->rank * slice / 2, slice / 2);
          send_scales = g_memdup2 (whole_scales + self->rank * slice / b, slice / b);
        }
      if (!_mixprec_engine_gather_bytes (self, send, whole_data, slice / 2,
                                         "gathering the 4-bit working copies", error) ||
          !_mixprec_engine_gather_bytes (self, send_scales, whole_scales, slice / b,
                                         "gathering the 4-bit block scales", error))
        return FALSE;
    }
  return TRUE;
}

/* Writes @g's 4-bit copies from this rank's FP32 values; @collective: the
 * ranks agree on the amaxes and gather the copies (not at layout). */
gboolean
_mixprec_engine_fp4_write (MixprecEngine *self,
                           Group         *g,
                           gboolean       collective,
                           GError       **error)
{
  MixprecBlockRecipe recipe = g->fp8.fp4_recipe;
  g_autofree guint64 *at = g_new0 (guint64, g->params->len + 1);
  g_autofree gfloat *amax = NULL;

  for (guint i = 0; i < g->params->len; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      at[i + 1] = at[i] + n_agreed (recipe, mixprec_param_get_numel (g_ptr_array_index (g->params, i)),
                                    s->fp4_cols);
    }
  amax = g_new0 (gfloat, MAX (at[g->params->len], 1));
  for (guint i = 0; i < g->params->len && at[g->params->len] > 0; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));
      guint64 lo, hi;
      const gfloat *src;
      guint8 *dst, *scales;

      if (rank_part (self, g, i, &lo, &hi, &src, &dst, &scales))
        partial_amaxes (recipe, src, lo / NVFP4_BLOCK, (hi - lo) / NVFP4_BLOCK, s->fp4_cols,
                        amax + at[i]);
    }
  if (collective && !agree_max (self, amax, at[g->params->len], g->state_local, error))
    return FALSE;
  for (guint i = 0; i < g->params->len; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));
      Cast c = { recipe, g->fp8.fp4_mode, NULL, 0, s->fp4_cols, amax + at[i], 1.0f, NULL, NULL };
      guint64 lo, hi;

      if (recipe != MIXPREC_BLOCK_RECIPE_MXFP4)
        {
          gfloat m = 0.0f;

          for (guint64 t = at[i]; t < at[i + 1]; t++)
            m = max_nan (m, amax[t]);
          c.ts = tensor_scale (float_bits (m));
        }
      s->fp4_tensor_scale = c.ts;
      if (!rank_part (self, g, i, &lo, &hi, &c.src, &c.dst, &c.scales))
        continue;
      c.k0 = lo / NVFP4_BLOCK;
      cast_range (&c, hi - lo);
    }
  return !collective || gather_group (self, g, error);
}

/* At layout: every rank quantises each parameter whole from its initial
 * values (what the agreement would give), and keeps its part. */
gboolean
_mixprec_engine_fp4_write_initial (MixprecEngine *self,
                                   Group         *g,
                                   GError       **error)
{
  MixprecBlockRecipe recipe = g->fp8.fp4_recipe;
  guint b = block_of (recipe);

  for (guint i = 0; i < g->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (g->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);
      const Unit *u = &g_array_index (g->units, Unit, s->unit);
      InitValues *init = g_hash_table_lookup (self->init_values, p);
      guint64 numel = mixprec_param_get_numel (p), e0 = s->offset - u->flat;
      guint64 na = n_agreed (recipe, numel, s->fp4_cols), slice = UNIT_SLICE (self, u);
      g_autofree gfloat *values = g_new0 (gfloat, MAX (numel, 1));
      g_autofree gfloat *amax = g_new0 (gfloat, MAX (na, 1));
      g_autofree guint8 *whole = g_new0 (guint8, MAX (numel / 2, 1));
      g_autofree guint8 *scales = g_new0 (guint8, MAX (numel / b, 1));
      Cast c = { recipe, g->fp8.fp4_mode, values, 0, s->fp4_cols, amax, 1.0f, whole, scales };
      gfloat m = 0.0f;

      if (numel == 0)
        continue;
      /* Without initial values the masters are zeros: quantised too, for
       * the scales zeros get. */
      if (init != NULL &&
          !mixprec_convert_array (init->dtype, g_bytes_get_data (init->values, NULL),
                                  MIXPREC_DTYPE_FLOAT32, values, numel,
                                  MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
        return FALSE;
      if (na > 0)
        partial_amaxes (recipe, values, 0, numel / NVFP4_BLOCK, s->fp4_cols, amax);
      for (guint64 t = 0; t < na; t++)
        m = max_nan (m, amax[t]);
      if (recipe != MIXPREC_BLOCK_RECIPE_MXFP4)
        c.ts = tensor_scale (float_bits (m));
      s->fp4_tensor_scale = c.ts;
      cast_range (&c, numel);
      if (!g->working_local)
        {
          memcpy (s->fp8_data, whole, numel / 2);
          memcpy (s->fp8_scales, scales, numel / b);
          continue;
        }
      /* ZeRO-3: this rank's slice, and the whole persistent copy. */
      {
        guint64 first = self->rank * slice;
        guint64 lo = MAX (e0, first), hi = MIN (e0 + numel, first + slice);

        if (lo < hi)
          {
            memcpy (g->fp8.data + (u->local + (lo - first)) / 2, whole + (lo - e0) / 2, (hi - lo) / 2);
            memcpy (g->fp8.scales + u->fp8.scales_local + (lo - first) / b, scales + (lo - e0) / b,
                    (hi - lo) / b);
          }
        if (s->fp8_data != NULL)
          {
            memcpy (s->fp8_data, whole, numel / 2);
            memcpy (s->fp8_scales, scales, numel / b);
          }
      }
    }
  return TRUE;
}

/* ---------------------------------------------------------------- ZeRO-3 */

guint64
_mixprec_engine_fp4_unit_bytes (MixprecEngine *self, const Group *g, const Unit *u)
{
  return u->padded / 2 + u->padded / block_of (g->fp8.fp4_recipe);
}

void
_mixprec_engine_fp4_point (MixprecEngine *self, Group *g, const Unit *u, guint8 *base)
{
  for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      /* One parameter per unit: its packed bytes, then its scales. */
      s->fp8_data = base != NULL ? base + (s->offset - u->flat) / 2 : NULL;
      s->fp8_scales = base != NULL ? base + u->padded / 2 : NULL;
    }
}

/* The 4-bit payload and the block scales of @u's slices: 0.5 + 1/16
 * bytes an element under NVFP4 (0.5 + 1/32 under MXFP4) where a bf16
 * working copy takes 2. */
gboolean
_mixprec_engine_fp4_gather_unit (MixprecEngine *self, Group *g, const Unit *u,
                                 guint8 *dst, GError **error)
{
  guint64 slice = UNIT_SLICE (self, u);
  guint b = block_of (g->fp8.fp4_recipe);

  if (self->world == 1)
    {
      memcpy (dst, g->fp8.data + u->local / 2, slice / 2);
      memcpy (dst + u->padded / 2, g->fp8.scales + u->fp8.scales_local, slice / b);
      return TRUE;
    }
  if (!_mixprec_engine_gather_bytes (self, g->fp8.data + u->local / 2, dst, slice / 2,
                                     "gathering a ZeRO-3 4-bit parameter unit", error) ||
      !_mixprec_engine_gather_bytes (self, g->fp8.scales + u->fp8.scales_local, dst + u->padded / 2,
                                     slice / b, "gathering a ZeRO-3 4-bit parameter unit's block scales",
                                     error))
    return FALSE;
  self->gathered_bytes += (_mixprec_engine_fp4_unit_bytes (self, g, u) / self->world) * (self->world - 1);
  return TRUE;
}
