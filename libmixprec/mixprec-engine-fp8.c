/* mixprec-engine-fp8.c — FP8 working copies: the buffers of parameters the
 * precision policy marks fp8, the cast from the FP32 values after each
 * applied step, the amax agreement and the scalings' updates, and the
 * gathers that make the copies whole.
 *
 * The FP8 copy of a parameter is written from its FP32 values (the master,
 * or the FP32 working copy) by the rank that updates them: every element
 * on one process and under ZeRO-0, this rank's slice under ZeRO-1/2/3.
 * Under ZeRO-1/2 the FP8 slices are then all-gathered into the whole FP8
 * copy on every rank (as the working copies are); under ZeRO-3 only the
 * persistent units are, and mixprec_engine_gather() gathers the FP8 slices
 * (and MX scales) of a unit instead of its working copy.
 *
 * Recipes (see mixprec.json(5), the fp8 section):
 *
 * - delayed: the cast uses the scale of the scaling's last update and
 *   records the amax of the values it cast. The amaxes of this rank's
 *   parts travel in the next step's overflow agreement (the all-gather of
 *   the gradient-norm blocks, and its model-parallel counterpart), which
 *   takes their MAX; an applied step then records the agreed amax in each
 *   scaling and updates it before the optimizer runs, so the new copy is
 *   cast with a scale computed from the amaxes of the copies before it (as
 *   Transformer Engine's delayed scaling). A skipped step (overflow)
 *   changes nothing FP8: the masters did not change, so neither does the
 *   copy, its scale or the amax history (Transformer Engine updates the
 *   scale at every forward pass whatever the optimizer did; here the
 *   history moves once per applied step), and the amaxes still pending
 *   are agreed again at the next step.
 * - current: the amax of the new values is taken after the optimizer,
 *   agreed with a MAX all-reduce of its own (the values do not exist at
 *   the time of the overflow agreement, so it cannot carry them), the
 *   scaling updates from it, and the cast follows.
 * - MX: block scales are computed in the cast itself. Every parameter of
 *   an MX group starts a unit of its own, so ranks' slices (multiples of
 *   _MIXPREC_SUMSQ_BLOCK elements from the unit's start) hold whole blocks.
 *
 * After an applied step the cast is fused into the optimizer's pass
 * (mixprec-engine-step.c): the pass goes in tiles of 16384 elements, and
 * each tile's new FP32 values are cast (delayed), or their amax taken
 * (current: the cast follows the agreement, in a pass of its own), right
 * after the optimizer wrote them, while they are in cache. MX casts the
 * whole blocks of a tile, and after the pass the blocks tiles cut. At
 * layout and after a checkpoint load the cast is a pass of its own across
 * the thread pool, in pieces of at most CAST_CHUNK elements.
 *
 * On a device (plugin revision 3, MixprecDeviceV3) the FP8 buffers are in
 * device memory and nothing is fused: the device optimizer's kernels do
 * not cast, so after its pass a second pass on the device's stream casts
 * the group's masters (write_group_device()), the amaxes kept in device
 * memory and read back in one copy per group; the delayed amaxes are
 * agreed in an all-reduce of their own (_mixprec_engine_fp8_agree_device())
 * since the gradient-norm blocks there are device memory too. Only whole
 * parameters are cast on a device (one process, or ZeRO-0 without
 * offloaded masters); registration refuses the rest. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-comm-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-fp8-private.h"
#include "mixprec-parallel-private.h"

#define CAST_CHUNK ((guint64) 1 << 16)

/* ---------------------------------------------------------------- registration */

gboolean
_mixprec_engine_fp8_register (MixprecEngine *self,
                              MixprecParam  *param,
                              GError       **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (param);
  MixprecFp8Recipe *recipe = mixprec_config_get_fp8_recipe (self->config);
  const gchar *name = mixprec_param_get_name (param);
  gboolean fp4 = FALSE;
  guint ndim = 0;

  /* 4-bit copies are the fp4 section's (mixprec-engine-fp4.c). */
  if (!_mixprec_engine_fp4_register (self, param, &fp4, error))
    return FALSE;
  if (fp4 || recipe == NULL ||
      !mixprec_precision_policy_is_fp8 (self->policy, name, mixprec_param_get_module_type (param)))
    return TRUE;
  /* FP8 is for the operands of matrix multiplies: a module's vectors (a
   * Linear's bias) are added, not multiplied, and keep the working dtype,
   * as Transformer Engine and torchao keep them. */
  mixprec_param_get_shape (param, &ndim);
  if (ndim < 2)
    return TRUE;
  if (!_mixprec_device_memory_is_host (self->device) && !_mixprec_device_has_fp8 (self->device))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': FP8 working copies (fp8.enabled) on device '%s' need the "
                   "float8 casts of device plugin revision 3 (plugin ABI 1.3, MixprecDeviceV3), "
                   "but the device's plugin '%s' registered it as revision %u", name,
                   _mixprec_device_get_name (self->device),
                   _mixprec_device_get_plugin_name (self->device),
                   _mixprec_device_get_revision (self->device));
      return FALSE;
    }
  /* On a device the cast covers whole parameters (see the top of this
   * file); the stage and the offload are the engine's from its creation. */
  if (!_mixprec_device_memory_is_host (self->device) && (self->offload || self->stage >= 1))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': FP8 working copies on device '%s' are written for whole "
                   "parameters only for now (one process, or ZeRO stage 0 without "
                   "offload_optimizer), not for %s", name, _mixprec_device_get_name (self->device),
                   self->offload ? "masters offloaded to the host"
                                 : "the slices of ZeRO stage 1 to 3 across ranks");
      return FALSE;
    }
  if (!_mixprec_device_memory_is_host (self->device) &&
      mixprec_fp8_recipe_get_kind (recipe) == MIXPREC_FP8_RECIPE_MX &&
      mixprec_fp8_recipe_get_mx_scale_mode (recipe) != MIXPREC_MX_SCALE_FLOOR)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': the device's MX cast computes FLOOR scales only, and "
                   "fp8.mx_scale_mode asks for another; use \"floor\" on device '%s'", name,
                   _mixprec_device_get_name (self->device));
      return FALSE;
    }
  if (!mixprec_param_has_master (param) &&
      mixprec_param_get_working_dtype (param) != MIXPREC_DTYPE_FLOAT32)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': its FP8 working copy is cast from FP32 values, but the "
                   "precision policy keeps it in %s without master weights", name,
                   mixprec_dtype_get_name (mixprec_param_get_working_dtype (param)));
      return FALSE;
    }
  if (mixprec_fp8_recipe_get_kind (recipe) == MIXPREC_FP8_RECIPE_MX &&
      self->world > 1 && _MIXPREC_SUMSQ_BLOCK % mixprec_fp8_recipe_get_block_size (recipe) != 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': fp8.mx_block_size %u does not divide %" G_GSIZE_FORMAT
                   ", the granularity of the slices across %u ranks", name,
                   mixprec_fp8_recipe_get_block_size (recipe), (gsize) _MIXPREC_SUMSQ_BLOCK,
                   self->world);
      return FALSE;
    }
  if (self->fp8_recipe == NULL)
    self->fp8_recipe = g_object_ref (recipe);
  s->fp8 = TRUE;
  s->fp8_kind = mixprec_fp8_recipe_get_kind (recipe);
  s->fp8_dtype = mixprec_fp8_recipe_get_dtype (recipe, MIXPREC_FP8_ROLE_FORWARD);
  g_clear_object (&s->fp8_scaling);
  s->fp8_scaling = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_FORWARD);
  s->fp8_amax = 0.0f;
  return TRUE;
}

void
_mixprec_engine_fp8_init_group (Group        *g,
                                MixprecParam *p)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);

  g->fp8.enabled = mixprec_param_is_fp8 (p) || s->fp4;
  g->fp8.dtype = mixprec_param_get_fp8_dtype (p);
  g->fp8.kind = s->fp8_kind;
  g->fp8.fp4 = s->fp4;
  g->fp8.fp4_recipe = s->fp4_recipe;
}

gboolean
_mixprec_engine_fp8_same_group (const Group *g, MixprecParam *p)
{
  gboolean fp4 = _mixprec_param_get_storage (p)->fp4;

  return g->fp8.enabled == (mixprec_param_is_fp8 (p) || fp4) && g->fp8.fp4 == fp4;
}

static guint
block_size (MixprecEngine *self)
{
  return MAX (mixprec_fp8_recipe_get_block_size (self->fp8_recipe), 1);
}

/* The MX recipe's scale mode (fp8.mx_scale_mode). */
static guint
mx_mode (MixprecEngine *self)
{
  return mixprec_fp8_recipe_get_mx_scale_mode (self->fp8_recipe);
}

/* ---------------------------------------------------------------- layout */

/* ZeRO-3 keeps the slices, then the whole copies of persistent units. */
static guint64
fp8_elements (const Group *g)
{
  return g->working_local ? g->local_n + g->persist_n : g->padded;
}

static void
point_whole (MixprecEngine *self, Group *g)
{
  guint b = g->fp8.kind == MIXPREC_FP8_RECIPE_MX ? block_size (self) : 1;

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
          s->n_fp8_scales = g->fp8.kind == MIXPREC_FP8_RECIPE_MX
                            ? (mixprec_param_get_numel (p) + b - 1) / b : 0;
          if (!g->working_local)
            s->fp8_data = g->fp8.data + s->offset;
          else if (u->persistent)
            s->fp8_data = g->fp8.data + g->local_n + u->persist_at + e0;
          if (s->fp8_data != NULL && g->fp8.kind == MIXPREC_FP8_RECIPE_MX)
            s->fp8_scales = g->fp8.scales + g->fp8.scales_whole + u->fp8.scales_at;
        }
    }
}

gboolean
_mixprec_engine_fp8_layout (MixprecEngine *self,
                            Group         *g,
                            GError       **error)
{
  guint64 at = 0, local = 0;

  if (!g->fp8.enabled)
    return TRUE;
  if (g->fp8.fp4)
    return _mixprec_engine_fp4_layout (self, g, error);
  /* The amax slots are scratch of the agreement, counted with the
   * gradient-norm blocks beside which they are agreed on the cpu device. */
  if (!_mixprec_device_memory_is_host (self->device) &&
      (g->fp8.amax_device = _mixprec_engine_alloc (self, self->device, MAX (g->params->len, 1),
                                                   sizeof (gfloat), BUF_NORM, error)) == NULL)
    return FALSE;
  g->fp8.data = _mixprec_engine_alloc (self, self->device, fp8_elements (g), 1, BUF_FP8, error);
  if (g->fp8.data == NULL)
    return FALSE;
  self->buf_plan[BUF_FP8] += fp8_elements (g);
  g->fp8.agreed = g_new0 (gfloat, MAX (g->params->len, 1));
  if (g->fp8.kind == MIXPREC_FP8_RECIPE_MX)
    {
      guint b = block_size (self);

      /* The whole scale space (up to ZeRO-2); under ZeRO-3 the slices'
       * scales, then from byte fp8_scales_whole the whole scales of the
       * persistent units (which scales_at then counts). */
      for (guint k = 0; k < g->units->len; k++)
        {
          Unit *u = &g_array_index (g->units, Unit, k);
          guint64 n = (u->padded + b - 1) / b;

          u->fp8.scales_at = at;
          u->fp8.scales_local = local;
          if (!g->working_local || u->persistent)
            at += n;
          local += self->world > 1 ? n / self->world : n;
        }
      g->fp8.scales_whole = g->working_local ? local : 0;
      g->fp8.scales_n = g->fp8.scales_whole + at;
      g->fp8.scales = _mixprec_engine_alloc (self, self->device, g->fp8.scales_n, 1, BUF_FP8_SCALES, error);
      if (g->fp8.scales == NULL)
        return FALSE;
      self->buf_plan[BUF_FP8_SCALES] += g->fp8.scales_n;
    }
  point_whole (self, g);
  return TRUE;
}

void
_mixprec_engine_fp8_free_group (MixprecEngine *self, Group *g)
{
  _mixprec_engine_free (self, self->device, g->fp8.data);
  _mixprec_engine_free (self, self->device, g->fp8.scales);
  _mixprec_engine_free (self, self->device, g->fp8.amax_device);
  g->fp8.amax_device = NULL;
  g->fp8.data = NULL;
  g->fp8.scales = NULL;
  g_clear_pointer (&g->fp8.agreed, g_free);
}

/* ---------------------------------------------------------------- cast */

typedef enum {
  CAST_AMAX,                 /* the amax only (current scaling) */
  CAST_SCALED,               /* per-tensor scale, recording the amax */
  CAST_MX,                   /* block scales */
} CastMode;

typedef struct {
  guint param;               /* index in the group */
  const gfloat *src;
  guint8 *dst;
  guint8 *scales;            /* MX: the scale of the piece's first block */
  guint64 n;
} CastPiece;

typedef struct {
  MixprecEngine *engine;
  Group *group;
  CastMode mode;
  GArray *pieces;            /* CastPiece */
  gfloat *amax;              /* per parameter of the group */
  gfloat *scale;             /* per parameter of the group */
  gboolean saturate;
  guint block;
  GMutex lock;
} CastJob;

static void
cast_range (gsize first, gsize end, gpointer data)
{
  CastJob *job = data;

  for (gsize i = first; i < end; i++)
    {
      const CastPiece *p = &g_array_index (job->pieces, CastPiece, i);
      gfloat amax = 0.0f;

      switch (job->mode)
        {
        case CAST_AMAX:
          _mixprec_fp8_amax_f32 (p->src, p->n, &amax);
          break;
        case CAST_SCALED:
          _mixprec_fp8_quantize_f32 (job->group->fp8.dtype, job->saturate, job->scale[p->param],
                                     p->src, p->dst, p->n, &amax);
          break;
        case CAST_MX:
          _mixprec_mx_quantize_f32_mode (job->group->fp8.dtype, mx_mode (job->engine), job->block,
                                         p->src, p->n, p->dst, p->scales);
          continue;
        }
      g_mutex_lock (&job->lock);
      job->amax[p->param] = fmaxf (job->amax[p->param], amax);
      g_mutex_unlock (&job->lock);
    }
}

/* Adds @n elements from @src to @pieces, cut in CAST_CHUNK pieces (whole
 * blocks for MX: @src starts a block). */
static void
add_pieces (GArray *pieces, guint param, const gfloat *src, guint8 *dst, guint8 *scales,
            guint64 n, guint block)
{
  guint64 chunk = MAX (CAST_CHUNK / block, 1) * block;

  for (guint64 a = 0; a < n; a += chunk)
    {
      CastPiece p = { param, src + a, dst + a, scales != NULL ? scales + a / block : NULL,
                      MIN (chunk, n - a) };

      g_array_append_val (pieces, p);
    }
}

/* The parts of @g's parameters this rank casts: every element on one
 * process and under ZeRO-0, else this rank's slice, into the whole copy
 * (ZeRO-1/2) or the slices (ZeRO-3). */
static GArray *
rank_pieces (MixprecEngine *self, Group *g)
{
  GArray *pieces = g_array_new (FALSE, FALSE, sizeof (CastPiece));
  gboolean mx = g->fp8.kind == MIXPREC_FP8_RECIPE_MX;
  guint b = mx ? block_size (self) : 1;

  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 slice = UNIT_SLICE (self, u);

      for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
        {
          MixprecParam *p = g_ptr_array_index (g->params, i);
          _MixprecParamStorage *s = _mixprec_param_get_storage (p);
          guint64 numel = mixprec_param_get_numel (p), e0 = s->offset - u->flat, lo, hi;
          gfloat *master;
          guint64 state_at;
          gpointer working;
          guint8 *dst, *scales = NULL;

          if (numel == 0)
            continue;
          if (self->world == 1 || !g->state_local)
            {
              add_pieces (pieces, i, s->master, s->fp8_data, s->fp8_scales, numel, b);
              continue;
            }
          lo = MAX (e0, self->rank * slice);
          hi = MIN (e0 + numel, (self->rank + 1) * slice);
          if (lo >= hi)
            continue;
          _mixprec_engine_values_at (self, g, u, lo, &master, &state_at, &working);
          if (g->working_local)
            {
              dst = g->fp8.data + u->local + (lo - self->rank * slice);
              if (mx)
                scales = g->fp8.scales + u->fp8.scales_local + (lo - self->rank * slice) / b;
            }
          else
            {
              dst = g->fp8.data + u->flat + lo;
              if (mx)
                scales = g->fp8.scales + u->fp8.scales_at + (lo - e0) / b;
            }
          add_pieces (pieces, i, master, dst, scales, hi - lo, b);
        }
    }
  return pieces;
}

static void
run_cast (MixprecEngine *self, Group *g, GArray *pieces, CastMode mode, gfloat *amax)
{
  CastJob job = { self, g, mode, pieces, amax, NULL, TRUE, 1, { 0 } };
  g_autofree gfloat *scale = g_new (gfloat, MAX (g->params->len, 1));

  for (guint i = 0; i < g->params->len; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      scale[i] = g->fp8.kind == MIXPREC_FP8_RECIPE_MX ? 1.0f : mixprec_fp8_scaling_get_scale (s->fp8_scaling);
      amax[i] = 0.0f;
    }
  job.scale = scale;
  job.saturate = mixprec_fp8_recipe_get_saturate (self->fp8_recipe);
  job.block = block_size (self);
  g_mutex_init (&job.lock);
  _mixprec_parallel_for (pieces->len, 1, 1, cast_range, &job);
  g_mutex_clear (&job.lock);
}

/* MAX of @n floats over the data-parallel ranks that hold parts (@over_dp)
 * and the model-parallel group. On a device the communicators move device
 * memory: the values go through @staging (@n floats of it). */
static gboolean
agree_max (MixprecEngine *self, gfloat *values, guint n, gboolean over_dp, gfloat *staging,
           GError **error)
{
  GError *local = NULL;
  gboolean dp = over_dp && self->world > 1;
  gfloat *buf = values;

  if (n == 0 || (!dp && self->mp_comm == NULL))
    return TRUE;
  if (!_mixprec_device_memory_is_host (self->device))
    {
      if (!_mixprec_device_copy (self->device, staging, values, n * sizeof (gfloat),
                                 MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error))
        return FALSE;
      buf = staging;
    }
  if (dp &&
      !mixprec_comm_all_reduce (self->comm, buf, buf, n, MIXPREC_DTYPE_FLOAT32,
                                MIXPREC_REDUCE_MAX, 0, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the FP8 amaxes");
  if (self->mp_comm != NULL &&
      !mixprec_comm_all_reduce (self->mp_comm, buf, buf, n, MIXPREC_DTYPE_FLOAT32,
                                MIXPREC_REDUCE_MAX, 0, &local))
    return _mixprec_engine_comm_failed (error, local, "agreeing on the FP8 amaxes");
  return _mixprec_device_memory_is_host (self->device) ||
         _mixprec_device_copy (self->device, values, staging, n * sizeof (gfloat),
                               MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error);
}

gboolean
_mixprec_engine_fp8_agree_device (MixprecEngine *self,
                                  GError       **error)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      guint n = _mixprec_engine_fp8_n_amax (g);

      for (guint i = 0; i < n; i++)
        g->fp8.agreed[i] = _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->fp8_amax;
      if (!agree_max (self, g->fp8.agreed, n, TRUE, g->fp8.amax_device, error))
        return FALSE;
    }
  return TRUE;
}

static gboolean
update_scaling (MixprecParam *p, gfloat amax, GError **error)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  GError *local = NULL;

  mixprec_fp8_scaling_record_amax (s->fp8_scaling, amax);
  if (!mixprec_fp8_scaling_update (s->fp8_scaling, &local))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "parameter '%s': updating its FP8 scaling: %s", mixprec_param_get_name (p),
                   local->message);
      g_error_free (local);
      return FALSE;
    }
  return TRUE;
}

/* Every count here is even: slices are multiples of _MIXPREC_SUMSQ_BLOCK
 * elements. */
gboolean
_mixprec_engine_gather_bytes (MixprecEngine *self, const guint8 *local, guint8 *whole,
                              guint64 n_per_rank, const gchar *what, GError **error)
{
  GError *failure = NULL;

  if (n_per_rank == 0)
    return TRUE;
  if (n_per_rank % 2 != 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "%s: %" G_GUINT64_FORMAT " bytes per rank is odd", what, n_per_rank);
      return FALSE;
    }
  _mixprec_comm_count_next_as (self->comm, _MIXPREC_COMM_WEIGHTS);
  if (!mixprec_comm_all_gather (self->comm, local, whole, n_per_rank / 2, MIXPREC_DTYPE_FLOAT16,
                                &failure))
    return _mixprec_engine_comm_failed (error, failure, what);
  return TRUE;
}

/* Makes the FP8 copies (and MX scales) whole on every rank from the slices
 * each cast: ZeRO-1/2 every unit, in place; ZeRO-3 the persistent units. */
static gboolean
gather_group (MixprecEngine *self, Group *g, GError **error)
{
  gboolean mx = g->fp8.kind == MIXPREC_FP8_RECIPE_MX;
  guint b = block_size (self);

  if (self->world == 1 || !g->state_local)
    return TRUE;
  for (guint k = 0; k < g->units->len; k++)
    {
      const Unit *u = &g_array_index (g->units, Unit, k);
      guint64 slice = UNIT_SLICE (self, u);
      guint8 *whole_data, *whole_scales = NULL;
      g_autofree guint8 *send = NULL, *send_scales = NULL;

      if (slice == 0 || (g->working_local && !u->persistent))
        continue;
      if (g->working_local)
        {
          whole_data = g->fp8.data + g->local_n + u->persist_at;
          if (mx)
            whole_scales = g->fp8.scales + g->fp8.scales_whole + u->fp8.scales_at;
          send = g_memdup2 (g->fp8.data + u->local, slice);
          if (mx)
            send_scales = g_memdup2 (g->fp8.scales + u->fp8.scales_local, slice / b);
        }
      else
        {
          whole_data = g->fp8.data + u->flat;
          if (mx)
            whole_scales = g->fp8.scales + u->fp8.scales_at;
          /* The all-gather reads its send buffer apart from the receive
           * buffer. */
          send = g_memdup2 (whole_data + self->rank * slice, slice);
          if (mx)
            send_scales = g_memdup2 (whole_scales + self->rank * slice / b, slice / b);
        }
      if (!_mixprec_engine_gather_bytes (self, send, whole_data, slice, "gathering the FP8 working copies",
                                         error) ||
          (mx && !_mixprec_engine_gather_bytes (self, send_scales, whole_scales, slice / b,
                                                "gathering the FP8 block scales", error)))
        return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- fused cast */

struct _MixprecFp8Fuse {
  MixprecEngine *engine;
  Group *group;
  guint64 *starts;           /* each parameter's first index, then the end */
  gfloat *scale;
  gfloat *amax;
  gboolean saturate;
  guint block;
  GMutex lock;
  GArray *straddling;        /* MX: guint64 pairs (parameter, block) the
                                pass saw only part of */
};

/* Where element @rel of parameter @i lies in @g's FP8 buffer, and (MX) its
 * block's scale. */
static guint8 *
fp8_at (MixprecEngine *self, Group *g, guint i, guint64 rel, guint8 **scale)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));
  const Unit *u = &g_array_index (g->units, Unit, s->unit);
  guint64 e = s->offset - u->flat + rel, first = self->rank * UNIT_SLICE (self, u);
  guint b = block_size (self);

  /* MX parameters start their units: @e counts from the parameter. */
  if (g->working_local)
    {
      if (scale != NULL)
        *scale = g->fp8.scales + u->fp8.scales_local + (e - first) / b;
      return g->fp8.data + u->local + (e - first);
    }
  if (scale != NULL)
    *scale = g->fp8.scales + u->fp8.scales_at + e / b;
  return g->fp8.data + u->flat + e;
}

/* The FP32 values of element @rel of parameter @i, on the rank that
 * updates it. */
static const gfloat *
master_at (MixprecEngine *self, Group *g, guint i, guint64 rel)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));
  const Unit *u = &g_array_index (g->units, Unit, s->unit);
  gfloat *master;
  guint64 state_at;
  gpointer working;

  if (self->world == 1 || !g->state_local)
    return s->master + rel;
  _mixprec_engine_values_at (self, g, u, s->offset - u->flat + rel, &master, &state_at, &working);
  return master;
}

void
_mixprec_engine_fp8_fuse_begin (MixprecEngine *self, Group *g)
{
  _MixprecFp8Fuse *f;
  guint n = g->params->len;

  /* The cast fuses into the optimizer's pass only where the CPU runs it
   * over host memory; elsewhere it is a pass of its own. */
  if (!g->fp8.enabled || g->fp8.fp4 || !_mixprec_device_memory_is_host (g->device))
    return;
  f = g_new0 (_MixprecFp8Fuse, 1);

  f->engine = self;
  f->group = g;
  f->starts = g_new (guint64, n + 1);
  f->scale = g_new (gfloat, MAX (n, 1));
  f->amax = g_new0 (gfloat, MAX (n, 1));
  for (guint i = 0; i < n; i++)
    {
      MixprecParam *p = g_ptr_array_index (g->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);

      f->starts[i] = s->index;
      f->scale[i] = g->fp8.kind == MIXPREC_FP8_RECIPE_MX ? 1.0f
                    : mixprec_fp8_scaling_get_scale (s->fp8_scaling);
    }
  f->starts[n] = n > 0 ? f->starts[n - 1] + mixprec_param_get_numel (g_ptr_array_index (g->params, n - 1)) : 0;
  f->saturate = mixprec_fp8_recipe_get_saturate (self->fp8_recipe);
  f->block = block_size (self);
  f->straddling = g_array_new (FALSE, FALSE, sizeof (guint64));
  g_mutex_init (&f->lock);
  g->fp8.fuse = f;
}

static void
note_block (_MixprecFp8Fuse *f, guint i, guint64 block)
{
  guint64 pair[2] = { i, block };

  g_mutex_lock (&f->lock);
  g_array_append_vals (f->straddling, pair, 2);
  g_mutex_unlock (&f->lock);
}

void
_mixprec_engine_fp8_fused (_MixprecFp8Fuse *f,
                           guint64          index,
                           const gfloat    *master,
                           guint64          n)
{
  Group *g = f->group;
  guint lo = 0, hi = g->params->len;

  /* The last parameter starting at or before @index. */
  while (hi - lo > 1)
    {
      guint mid = (lo + hi) / 2;

      if (f->starts[mid] <= index)
        lo = mid;
      else
        hi = mid;
    }
  for (guint i = lo; i < g->params->len && f->starts[i] < index + n; i++)
    {
      guint64 a = MAX (index, f->starts[i]), b = MIN (index + n, f->starts[i + 1]);
      guint64 rel_a = a - f->starts[i], rel_b = b - f->starts[i];
      guint64 numel = f->starts[i + 1] - f->starts[i];
      const gfloat *src = master + (a - index);
      gfloat amax = 0.0f;

      if (a >= b)
        continue;
      if (g->fp8.kind == MIXPREC_FP8_RECIPE_MX)
        {
          guint64 bs = f->block;
          guint64 first = (rel_a + bs - 1) / bs;                  /* whole blocks */
          guint64 end = rel_b == numel ? (rel_b + bs - 1) / bs : rel_b / bs;
          guint8 *scales;

          if (first < end)
            {
              guint8 *dst = fp8_at (f->engine, g, i, first * bs, &scales);

              _mixprec_mx_quantize_f32_mode (g->fp8.dtype, mx_mode (f->engine), f->block,
                                             src + (first * bs - rel_a),
                                        MIN (end * bs, numel) - first * bs, dst, scales);
            }
          /* The blocks at either end this range holds part of: cast after
           * the pass. */
          {
            guint64 blk_a = rel_a / bs, blk_z = (rel_b - 1) / bs;

            if (!(first <= blk_a && blk_a < end))
              note_block (f, i, blk_a);
            if (blk_z != blk_a && !(first <= blk_z && blk_z < end))
              note_block (f, i, blk_z);
          }
          continue;
        }
      if (g->fp8.kind == MIXPREC_FP8_RECIPE_CURRENT)
        _mixprec_fp8_amax_f32 (src, b - a, &amax);
      else
        _mixprec_fp8_quantize_f32 (g->fp8.dtype, f->saturate, f->scale[i], src,
                                   fp8_at (f->engine, g, i, rel_a, NULL), b - a, &amax);
      g_mutex_lock (&f->lock);
      f->amax[i] = fmaxf (f->amax[i], amax);
      g_mutex_unlock (&f->lock);
    }
}

void
_mixprec_engine_fp8_fuse_end (MixprecEngine *self, Group *g)
{
  _MixprecFp8Fuse *f = g_steal_pointer (&g->fp8.fuse);

  if (f == NULL)
    return;
  if (g->fp8.kind == MIXPREC_FP8_RECIPE_MX)
    {
      /* Each block the pass cut: whole now (the pass is over), and on this
       * rank (its slice holds whole blocks). Cast twice when two ranges
       * cut it: the same bytes. */
      for (guint k = 0; k + 1 < f->straddling->len; k += 2)
        {
          guint i = (guint) g_array_index (f->straddling, guint64, k);
          guint64 blk = g_array_index (f->straddling, guint64, k + 1);
          guint64 numel = f->starts[i + 1] - f->starts[i], at = blk * f->block;
          guint8 *scales;
          guint8 *dst = fp8_at (self, g, i, at, &scales);

          _mixprec_mx_quantize_f32_mode (g->fp8.dtype, mx_mode (self), f->block,
                                         master_at (self, g, i, at),
                                    MIN ((guint64) f->block, numel - at), dst, scales);
        }
    }
  else
    for (guint i = 0; i < g->params->len; i++)
      _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->fp8_amax = f->amax[i];
  g->fp8.fused = TRUE;
  g_mutex_clear (&f->lock);
  g_array_unref (f->straddling);
  g_free (f->starts);
  g_free (f->scale);
  g_free (f->amax);
  g_free (f);
}

/* On a device: the cast is a pass of its own over the group's masters
 * after the optimizer's (the device optimizer's kernels do not cast), one
 * fp8_cast or mx_cast call per piece on the device's stream, into the FP8
 * copy in device memory. The amaxes gather in one device float per
 * parameter (a running maximum the kernels take), read back with one
 * device-to-host copy of the group's amaxes: delayed after the cast (for
 * the next step's agreement), current after an amax-only pass, before the
 * agreement, the scalings' update and the cast. */
static gboolean
device_amaxes (MixprecEngine *self, Group *g, GArray *pieces, gboolean cast, gfloat *amax,
               GError **error)
{
  gsize bytes = MAX (g->params->len, 1) * sizeof (gfloat);
  gboolean saturate = mixprec_fp8_recipe_get_saturate (self->fp8_recipe);

  if (!_mixprec_device_zero (self->device, g->fp8.amax_device, bytes, error))
    return FALSE;
  for (guint k = 0; k < pieces->len; k++)
    {
      const CastPiece *p = &g_array_index (pieces, CastPiece, k);
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, p->param));

      if (!_mixprec_device_fp8_cast (self->device, g->fp8.dtype, saturate,
                                     mixprec_fp8_scaling_get_scale (s->fp8_scaling), p->src,
                                     cast ? p->dst : NULL, p->n, g->fp8.amax_device + p->param,
                                     error))
        return FALSE;
    }
  return _mixprec_device_copy (self->device, amax, g->fp8.amax_device, bytes,
                               MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error);
}

static gboolean
write_group_device (MixprecEngine *self, Group *g, GArray *pieces, gfloat *amax,
                    gboolean collective, GError **error)
{
  g->fp8.fused = FALSE;
  switch (g->fp8.kind)
    {
    case MIXPREC_FP8_RECIPE_CURRENT:
      if (!device_amaxes (self, g, pieces, FALSE, amax, error))
        return FALSE;
      if (collective && !agree_max (self, amax, g->params->len, g->state_local, g->fp8.amax_device, error))
        return FALSE;
      for (guint i = 0; i < g->params->len; i++)
        if (!update_scaling (g_ptr_array_index (g->params, i), amax[i], error))
          return FALSE;
      for (guint k = 0; k < pieces->len; k++)
        {
          const CastPiece *p = &g_array_index (pieces, CastPiece, k);
          _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, p->param));

          if (!_mixprec_device_fp8_cast (self->device, g->fp8.dtype,
                                         mixprec_fp8_recipe_get_saturate (self->fp8_recipe),
                                         mixprec_fp8_scaling_get_scale (s->fp8_scaling),
                                         p->src, p->dst, p->n, NULL, error))
            return FALSE;
        }
      break;
    case MIXPREC_FP8_RECIPE_MX:
      for (guint k = 0; k < pieces->len; k++)
        {
          const CastPiece *p = &g_array_index (pieces, CastPiece, k);

          if (!_mixprec_device_mx_cast (self->device, g->fp8.dtype, block_size (self), p->src,
                                        p->dst, p->scales, p->n, error))
            return FALSE;
        }
      break;
    case MIXPREC_FP8_RECIPE_DELAYED:
    default:
      if (!device_amaxes (self, g, pieces, TRUE, amax, error))
        return FALSE;
      for (guint i = 0; i < g->params->len; i++)
        _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->fp8_amax = amax[i];
      break;
    }
  return TRUE;
}

/* Writes @g's FP8 copies from this rank's FP32 values; @collective: the
 * ranks agree on current scaling's amaxes and gather the copies (not at
 * layout, where each rank casts whole parameters on its own). */
static gboolean
write_group (MixprecEngine *self, Group *g, gboolean collective, gboolean after_step, GError **error)
{
  g_autoptr(GArray) pieces = rank_pieces (self, g);
  g_autofree gfloat *amax = g_new0 (gfloat, MAX (g->params->len, 1));

  gboolean fused = after_step && g->fp8.fused;

  if (!_mixprec_device_memory_is_host (self->device))
    return write_group_device (self, g, pieces, amax, collective, error);
  g->fp8.fused = FALSE;
  switch (g->fp8.kind)
    {
    case MIXPREC_FP8_RECIPE_CURRENT:
      if (fused)
        for (guint i = 0; i < g->params->len; i++)
          amax[i] = _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->fp8_amax;
      else
        run_cast (self, g, pieces, CAST_AMAX, amax);
      if (collective && !agree_max (self, amax, g->params->len, g->state_local, g->fp8.amax_device, error))
        return FALSE;
      for (guint i = 0; i < g->params->len; i++)
        if (!update_scaling (g_ptr_array_index (g->params, i), amax[i], error))
          return FALSE;
      run_cast (self, g, pieces, CAST_SCALED, amax);
      break;
    case MIXPREC_FP8_RECIPE_MX:
      if (!fused)
        run_cast (self, g, pieces, CAST_MX, amax);
      break;
    case MIXPREC_FP8_RECIPE_DELAYED:
    default:
      if (fused)
        break;             /* cast in the optimizer's pass, amaxes kept */
      run_cast (self, g, pieces, CAST_SCALED, amax);
      for (guint i = 0; i < g->params->len; i++)
        _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->fp8_amax = amax[i];
      break;
    }
  return !collective || gather_group (self, g, error);
}

gboolean
_mixprec_engine_fp8_write (MixprecEngine *self,
                           gboolean       after_step,
                           GError       **error)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      if (g->fp8.enabled && g->fp8.fp4)
        {
          if (!_mixprec_engine_fp4_write (self, g, TRUE, error))
            return FALSE;
        }
      else if (g->fp8.enabled && !write_group (self, g, TRUE, after_step, error))
        return FALSE;
    }
  return TRUE;
}

/* At layout: every rank casts each parameter whole from its initial
 * values (the masters are those values in FP32, exactly), so no rank
 * waits for another. One process and ZeRO-0 read their whole masters. */
gboolean
_mixprec_engine_fp8_write_initial (MixprecEngine *self,
                                   GError       **error)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);
      gboolean mx;
      guint b;

      if (!g->fp8.enabled)
        continue;
      if (g->fp8.fp4)
        {
          if (!_mixprec_engine_fp4_write_initial (self, g, error))
            return FALSE;
          continue;
        }
      if (self->world == 1 || !g->state_local)
        {
          /* No collective: the whole parameters are this rank's part. */
          if (!write_group (self, g, FALSE, FALSE, error))
            return FALSE;
          continue;
        }
      mx = g->fp8.kind == MIXPREC_FP8_RECIPE_MX;
      b = block_size (self);
      for (guint k = 0; k < g->units->len; k++)
        {
          const Unit *u = &g_array_index (g->units, Unit, k);
          guint64 slice = UNIT_SLICE (self, u);

          for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
            {
              MixprecParam *p = g_ptr_array_index (g->params, i);
              _MixprecParamStorage *s = _mixprec_param_get_storage (p);
              InitValues *init = g_hash_table_lookup (self->init_values, p);
              guint64 numel = mixprec_param_get_numel (p), e0 = s->offset - u->flat;
              guint64 nsc = mx ? (numel + b - 1) / b : 0;
              g_autofree gfloat *values = NULL;
              g_autofree guint8 *whole = NULL, *scales = NULL;
              gfloat amax = 0.0f;

              /* Without initial values the masters are zeros, and so is
               * the FP8 copy the layout allocated (0 encodes 0, and an
               * all-zero block's scale is byte 0). */
              if (init == NULL || numel == 0)
                continue;
              values = g_new (gfloat, numel);
              if (!mixprec_convert_array (init->dtype, g_bytes_get_data (init->values, NULL),
                                          MIXPREC_DTYPE_FLOAT32, values, numel,
                                          MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
                return FALSE;
              whole = g_new (guint8, numel);
              scales = g_new (guint8, MAX (nsc, 1));
              if (mx)
                _mixprec_mx_quantize_f32_mode (g->fp8.dtype, mx_mode (self), b, values, numel,
                                               whole, scales);
              else
                {
                  if (g->fp8.kind == MIXPREC_FP8_RECIPE_CURRENT)
                    {
                      _mixprec_fp8_amax_f32 (values, numel, &amax);
                      if (!update_scaling (p, amax, error))
                        return FALSE;
                      amax = 0.0f;
                    }
                  _mixprec_fp8_quantize_f32 (g->fp8.dtype, mixprec_fp8_recipe_get_saturate (self->fp8_recipe),
                                             mixprec_fp8_scaling_get_scale (s->fp8_scaling),
                                             values, whole, numel, &amax);
                  s->fp8_amax = amax;
                }
              if (!g->working_local)
                {
                  memcpy (s->fp8_data, whole, numel);
                  if (mx)
                    memcpy (s->fp8_scales, scales, nsc);
                  continue;
                }
              /* ZeRO-3: this rank's slice, and the whole persistent copy. */
              {
                guint64 lo = MAX (e0, self->rank * slice), hi = MIN (e0 + numel, (self->rank + 1) * slice);

                if (lo < hi)
                  {
                    memcpy (g->fp8.data + u->local + (lo - self->rank * slice), whole + (lo - e0), hi - lo);
                    if (mx)
                      memcpy (g->fp8.scales + u->fp8.scales_local + (lo - self->rank * slice) / b,
                              scales + (lo - e0) / b, (hi - lo + b - 1) / b);
                  }
                if (s->fp8_data != NULL)
                  {
                    memcpy (s->fp8_data, whole, numel);
                    if (mx)
                      memcpy (s->fp8_scales, scales, nsc);
                  }
              }
            }
        }
    }
  return TRUE;
}

/* ---------------------------------------------------------------- amax agreement */

guint
_mixprec_engine_fp8_n_amax (const Group *g)
{
  return g->fp8.enabled && g->fp8.kind == MIXPREC_FP8_RECIPE_DELAYED ? g->params->len : 0;
}

void
_mixprec_engine_fp8_put_amax (const Group *g, gdouble *out)
{
  for (guint i = 0; i < _mixprec_engine_fp8_n_amax (g); i++)
    out[i] = _mixprec_param_get_storage (g_ptr_array_index (g->params, i))->fp8_amax;
}

void
_mixprec_engine_fp8_take_amax (Group *g, const gdouble *all, guint n_ranks, gsize stride, gsize at)
{
  for (guint i = 0; i < _mixprec_engine_fp8_n_amax (g); i++)
    {
      gfloat m = 0.0f;

      for (guint r = 0; r < n_ranks; r++)
        m = fmaxf (m, (gfloat) all[r * stride + at + i]);
      g->fp8.agreed[i] = m;
    }
}

gboolean
_mixprec_engine_fp8_update (MixprecEngine *self,
                            GError       **error)
{
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      for (guint i = 0; i < _mixprec_engine_fp8_n_amax (g); i++)
        if (!update_scaling (g_ptr_array_index (g->params, i), g->fp8.agreed[i], error))
          return FALSE;
    }
  return TRUE;
}

/* ---------------------------------------------------------------- ZeRO-3 */

guint64
_mixprec_engine_fp8_unit_bytes (MixprecEngine *self, const Group *g, const Unit *u)
{
  guint b;

  if (g->fp8.fp4)
    return _mixprec_engine_fp4_unit_bytes (self, g, u);
  b = g->fp8.kind == MIXPREC_FP8_RECIPE_MX ? block_size (self) : 0;
  return u->padded + (b > 0 ? (u->padded + b - 1) / b : 0);
}

void
_mixprec_engine_fp8_point (MixprecEngine *self, Group *g, const Unit *u, guint8 *base)
{
  if (g->fp8.fp4)
    {
      _mixprec_engine_fp4_point (self, g, u, base);
      return;
    }
  for (guint i = u->first_param; i < u->first_param + u->n_params; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (g->params, i));

      s->fp8_data = base != NULL ? base + (s->offset - u->flat) : NULL;
      /* MX: one parameter per unit, its scales after the data. */
      s->fp8_scales = base != NULL && g->fp8.kind == MIXPREC_FP8_RECIPE_MX ? base + u->padded : NULL;
    }
}

gboolean
_mixprec_engine_fp8_gather_unit (MixprecEngine *self, Group *g, const Unit *u,
                                 guint8 *dst, GError **error)
{
  guint64 slice = UNIT_SLICE (self, u);
  guint b;

  if (g->fp8.fp4)
    return _mixprec_engine_fp4_gather_unit (self, g, u, dst, error);
  b = block_size (self);
  if (!_mixprec_engine_gather_bytes (self, g->fp8.data + u->local, dst, slice,
                                     "gathering a ZeRO-3 FP8 parameter unit", error))
    return FALSE;
  if (g->fp8.kind == MIXPREC_FP8_RECIPE_MX &&
      !_mixprec_engine_gather_bytes (self, g->fp8.scales + u->fp8.scales_local, dst + u->padded, slice / b,
                                     "gathering a ZeRO-3 FP8 parameter unit's block scales", error))
    return FALSE;
  self->gathered_bytes += (_mixprec_engine_fp8_unit_bytes (self, g, u) / self->world) * (self->world - 1);
  return TRUE;
}

/* ---------------------------------------------------------------- checkpoints */

/* @state with its amax history made @len long, for a run that changed
 * fp8.amax_history_len since the checkpoint. Slot 0 (the amax not yet
 * used) stays; slots 1 .. n-1 run from the oldest amax to the newest (the
 * update rolls the history back by one), so the newest len - 1 of them
 * are kept, ending the new history, and a longer history is padded with
 * zeros at its old end, which no max sees. The scale carries over as it
 * was. Returns NULL when @state has no history of doubles to resize. */
static GVariant *
resize_history (GVariant *state,
                guint     len)
{
  g_auto(GVariantDict) dict = G_VARIANT_DICT_INIT (state);
  g_autoptr(GVariant) history_v = g_variant_dict_lookup_value (&dict, "amax_history",
                                                               G_VARIANT_TYPE ("ad"));
  g_autofree gdouble *resized = NULL;
  const gdouble *history;
  gsize n = 0;

  if (history_v == NULL || len == 0)
    return NULL;
  history = g_variant_get_fixed_array (history_v, &n, sizeof (gdouble));
  if (n == 0)
    return NULL;
  resized = g_new0 (gdouble, len);
  resized[0] = history[0];
  for (gsize k = 1; k < len && k < n; k++)
    resized[len - k] = history[n - k];
  g_variant_dict_insert_value (&dict, "amax_history",
                               g_variant_new_fixed_array (G_VARIANT_TYPE_DOUBLE, resized, len,
                                                          sizeof (gdouble)));
  return g_variant_ref_sink (g_variant_dict_end (&dict));
}

gboolean
_mixprec_engine_restore_fp8 (MixprecEngine *self,
                             const gchar   *path,
                             GHashTable    *states,
                             GError       **error)
{
  g_autoptr(GPtrArray) fresh = g_ptr_array_new_with_free_func (g_object_unref);

  /* Into new scalings first, so that a bad state changes nothing. */
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      _MixprecParamStorage *s = _mixprec_param_get_storage (p);
      g_autoptr(GVariant) resized = NULL;
      GVariant *state;
      MixprecFp8Scaling *scaling;
      GError *local = NULL;
      guint len;

      if (!s->fp8)
        continue;
      len = mixprec_fp8_recipe_get_kind (self->fp8_recipe) == MIXPREC_FP8_RECIPE_DELAYED
        ? mixprec_fp8_recipe_get_amax_history_len (self->fp8_recipe) : 0;
      scaling = mixprec_fp8_recipe_new_scaling (self->fp8_recipe, MIXPREC_FP8_ROLE_FORWARD);
      g_ptr_array_add (fresh, scaling);
      state = states != NULL ? g_hash_table_lookup (states, mixprec_param_get_name (p)) : NULL;
      if (state != NULL && len > 0)
        {
          /* A run may change fp8.amax_history_len and resume. */
          resized = resize_history (state, len);
          if (resized != NULL)
            state = resized;
        }
      if (state != NULL && !mixprec_fp8_scaling_restore_state (scaling, state, &local))
        {
          g_set_error (error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_INCOMPATIBLE,
                       "%s: the FP8 scaling saved for parameter '%s' does not fit this engine's "
                       "fp8 recipe: %s", path, mixprec_param_get_name (p), local->message);
          g_error_free (local);
          return FALSE;
        }
    }
  for (guint i = 0, k = 0; i < self->params->len; i++)
    {
      _MixprecParamStorage *s = _mixprec_param_get_storage (g_ptr_array_index (self->params, i));

      if (!s->fp8)
        continue;
      g_clear_object (&s->fp8_scaling);
      s->fp8_scaling = g_object_ref (g_ptr_array_index (fresh, k++));
      s->fp8_amax = 0.0f;
    }
  return TRUE;
}
