/* mixprec-engine-access.c — reading optimizer state, and the private API
 * checkpoints use to reach each rank's shard. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-private.h"
#include "mixprec-parallel-private.h"
#include "mixprec-registry-private.h"
#include "numeric/numeric-base.h"
#include "numeric/numeric-quant.h"

static MixprecDType slot_dtype     (MixprecEngine *self, guint k);
static gboolean     slot_is_signed (MixprecEngine *self, guint k);

/* ---------------------------------------------------------------- access */

/* Copies the FP32 values of @p's elements [begin, end) that this rank
 * holds whole (masters, else the working copy widened) into @out. */
static gboolean
read_whole_values (Group         *g,
                   MixprecParam  *p,
                   guint64        begin,
                   guint64        end,
                   gfloat        *out,
                   GError       **error)
{
  guint64 po = _mixprec_param_get_storage (p)->offset;
  const Segment *seg = _mixprec_engine_segment_of (g, po);

  if (seg->master != NULL)
    return _mixprec_device_download (seg->master == g->master ? g->state_device : g->device,
                                     seg->master + (po + begin - seg->master_base),
                                     MIXPREC_DTYPE_FLOAT32, out, MIXPREC_DTYPE_FLOAT32,
                                     end - begin, error);
  return _mixprec_device_download (g->device,
                                   _mixprec_engine_at (seg->working, g->dtypes.working, po + begin - seg->working_base),
                                   g->dtypes.working, out, MIXPREC_DTYPE_FLOAT32, end - begin, error);
}

/* Elements [e0, e0 + n) of @u of a 16-bit buffer kept in this rank's
 * slices at @local (the working copy under ZeRO-3, the remainders or
 * compensations under ZeRO-1 and above), gathered from every rank.
 * Collective. */
static gboolean
gather_16 (MixprecEngine *self,
           Group         *g,
           const Unit    *u,
           gconstpointer  local,
           guint64        e0,
           guint64        n,
           guint16       *out,
           GError       **error)
{
  gpointer whole;
  GError *local_error = NULL;
  gboolean ok;

  whole = _mixprec_device_alloc (g->device, MAX (u->padded, 1) * sizeof (guint16),
                                 "gathered master weights", error);
  if (whole == NULL)
    return FALSE;
  ok = _mixprec_engine_before_comm (self, error);
  if (ok && !mixprec_comm_all_gather (self->comm, _mixprec_engine_at ((gpointer) local, MIXPREC_DTYPE_BFLOAT16, u->local),
                                      whole, UNIT_SLICE (self, u), MIXPREC_DTYPE_BFLOAT16, &local_error))
    ok = _mixprec_engine_comm_failed (error, local_error, "gathering master weights");
  ok = ok && _mixprec_device_download (g->device, _mixprec_engine_at (whole, MIXPREC_DTYPE_BFLOAT16, e0),
                                       MIXPREC_DTYPE_BFLOAT16, out, MIXPREC_DTYPE_BFLOAT16, n, error);
  _mixprec_device_free (g->device, whole);
  return ok;
}

/* The FP32 values of @p kept as a bfloat16 working copy and a remainder
 * (joined exactly) or a Kahan compensation (added in FP32). Collective
 * when either half is sharded. */
static gboolean
gather_split_master (MixprecEngine *self,
                     Group         *g,
                     Unit          *u,
                     MixprecParam  *p,
                     gfloat        *out,
                     GError       **error)
{
  guint64 numel = mixprec_param_get_numel (p);
  guint64 e0 = _mixprec_param_get_storage (p)->offset - u->flat;
  g_autofree guint16 *w = g_new (guint16, MAX (numel, 1));
  g_autofree guint16 *x = g_new (guint16, MAX (numel, 1));
  gboolean sharded = self->world > 1 && g->state_local;
  gfloat *master;
  guint64 state_at = 0;
  gpointer working = NULL;

  if (!sharded || !g->working_local)
    {
      _mixprec_engine_values_at (self, g, u, sharded ? self->rank * UNIT_SLICE (self, u) : e0,
                                 &master, &state_at, &working);
      if (sharded)
        working = _mixprec_engine_flat_at (self, u, g->working, MIXPREC_DTYPE_BFLOAT16, e0);
      if (!_mixprec_device_download (g->device, working, MIXPREC_DTYPE_BFLOAT16, w,
                                     MIXPREC_DTYPE_BFLOAT16, numel, error))
        return FALSE;
    }
  else if (!gather_16 (self, g, u, g->working, e0, numel, w, error))
    return FALSE;
  if (sharded)
    {
      if (!gather_16 (self, g, u, g->master_extra, e0, numel, x, error))
        return FALSE;
    }
  else if (!_mixprec_device_download (g->state_device, (guint16 *) g->master_extra + state_at,
                                      MIXPREC_DTYPE_BFLOAT16, x, MIXPREC_DTYPE_BFLOAT16, numel, error))
    return FALSE;
  _mixprec_checkpoint_split_master_f32 (_mixprec_engine_master_format (&self->repr, &g->dtypes),
                                        w, x, numel, out);
  return TRUE;
}

GBytes *
_mixprec_engine_split_master_of (MixprecEngine *self,
                                 MixprecParam  *param,
                                 gboolean      *split,
                                 GError       **error)
{
  Group *g;

  *split = FALSE;
  if (!mixprec_engine_prepare (self, error))
    return NULL;
  g = _mixprec_engine_group_of (self, param);
  if (g == NULL || g->master_extra == NULL)
    return NULL;
  *split = TRUE;
  if (self->world > 1 && g->state_local)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': its FP32 values are sharded across ranks; "
                   "mixprec_engine_gather_master() assembles them",
                   mixprec_param_get_name (param));
      return NULL;
    }
  return mixprec_engine_gather_master (self, mixprec_param_get_name (param), error);
}

/**
 * mixprec_engine_gather_master:
 * @self: a #MixprecEngine
 * @param_name: a registered parameter's name
 * @error: return location for a #GError
 *
 * The FP32 values the optimizer keeps for a parameter (its master copy, or
 * in bf16 without master weights its working copy widened), assembled from
 * every rank's slice. With `"master_weights": "remainder"` the master is
 * the working copy joined with its remainder (exact); with `"kahan"` the
 * working copy plus its compensation, added in FP32. Collective when the values are sharded: every rank
 * must call it for the same parameters in the same order.
 *
 * Returns: (transfer full): numel FP32 values (bfloat16 state, see
 *   mixprec_config_get_optimizer_state_dtype(), widened exactly), or %NULL
 *   with @error set
 *
 * Since: 1.0
 */
GBytes *
mixprec_engine_gather_master (MixprecEngine *self,
                              const gchar   *param_name,
                              GError       **error)
{
  MixprecParam *p;
  Group *g;
  Unit *u;
  guint64 numel, e0;
  MixprecDType dtype = MIXPREC_DTYPE_FLOAT32;
  gconstpointer slices;
  gpointer whole = NULL;
  g_autofree gfloat *out = NULL;
  GError *local = NULL;
  gboolean ok;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (param_name != NULL, NULL);

  p = g_hash_table_lookup (self->by_name, param_name);
  if (p == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "no parameter named '%s'", param_name);
      return NULL;
    }
  if (!mixprec_engine_prepare (self, error))
    return NULL;
  g = _mixprec_engine_group_of (self, p);
  u = _mixprec_engine_unit_of (self, p);
  numel = mixprec_param_get_numel (p);
  out = g_new (gfloat, MAX (numel, 1));
  e0 = _mixprec_param_get_storage (p)->offset - u->flat;

  /* Remainder and Kahan masters: the FP32 value they stand for. */
  if (g->master_extra != NULL)
    {
      if (!gather_split_master (self, g, u, p, out, error))
        return NULL;
      return g_bytes_new_take (g_steal_pointer (&out), numel * sizeof (gfloat));
    }

  /* Whole on this rank: no master and a whole working copy, or masters
   * that are not sharded. */
  if (self->world == 1 || (g->master != NULL ? !g->state_local : !g->working_local))
    {
      if (!read_whole_values (g, p, 0, numel, out, error))
        return NULL;
      return g_bytes_new_take (g_steal_pointer (&out), numel * sizeof (gfloat));
    }

  /* Every rank contributes its slice of the parameter's unit. */
  if (g->master != NULL)
    slices = _mixprec_engine_at (g->master, MIXPREC_DTYPE_FLOAT32, u->local);
  else
    {
      slices = _mixprec_engine_at (g->working, g->dtypes.working, u->local);
      dtype = g->dtypes.working;
    }
  whole = _mixprec_device_alloc (g->device, MAX (u->padded, 1) * mixprec_dtype_get_size (dtype),
                                 "gathered master weights", error);
  if (whole == NULL)
    return NULL;
  ok = TRUE;
  /* Offloaded masters (or, without masters, working copies under
   * offload_param) are host memory, which the device's communicator does
   * not take: this rank's slice goes up to its place first and is
   * gathered in place. */
  if (g->master != NULL ? g->state_device != g->device : g->working_on_host)
    {
      gpointer mine = _mixprec_engine_at (whole, dtype, self->rank * UNIT_SLICE (self, u));

      ok = _mixprec_device_upload (g->device, slices, dtype, mine, dtype, UNIT_SLICE (self, u), error);
      slices = mine;
    }
  ok = ok && _mixprec_engine_before_comm (self, error);
  if (ok && !mixprec_comm_all_gather (self->comm, slices, whole, UNIT_SLICE (self, u), dtype, &local))
    ok = _mixprec_engine_comm_failed (error, local, "gathering master weights");
  ok = ok && _mixprec_device_download (g->device, _mixprec_engine_at (whole, dtype, e0), dtype,
                                       out, MIXPREC_DTYPE_FLOAT32, numel, error);
  _mixprec_device_free (g->device, whole);
  if (!ok)
    return NULL;
  return g_bytes_new_take (g_steal_pointer (&out), numel * sizeof (gfloat));
}

gboolean
_mixprec_engine_shard_store_f32 (const _MixprecEngineShard *sh,
                                 guint64                    e,
                                 const gfloat              *values,
                                 guint64                    n,
                                 GError                   **error)
{
  if (sh->master_format == MIXPREC_PLUGIN_MASTER_FLOAT32 && sh->master != NULL)
    {
      memcpy (sh->master + e, values, n * sizeof (gfloat));
      return TRUE;
    }
  switch (sh->master_format)
    {
    case MIXPREC_PLUGIN_MASTER_REMAINDER:
      for (guint64 i = 0; i < n; i++)
        _mixprec_remainder_split (values[i], (guint16 *) sh->working + e + i,
                                  (gint16 *) sh->master_extra + e + i);
      return TRUE;
    case MIXPREC_PLUGIN_MASTER_KAHAN:
      for (guint64 i = 0; i < n; i++)
        {
          guint16 w = _mixprec_f32_to_bf16_rne (values[i]);

          ((guint16 *) sh->working)[e + i] = w;
          ((guint16 *) sh->master_extra)[e + i] =
            _mixprec_f32_to_bf16_rne (values[i] - _mixprec_bf16_to_f32 (w));
        }
      return TRUE;
    case MIXPREC_PLUGIN_MASTER_FLOAT32:
    default:
      /* No masters: the working copy is what the optimizer updates. */
      return mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, values, sh->working_dtype,
                                    (guint8 *) sh->working + e * mixprec_dtype_get_size (sh->working_dtype),
                                    n, MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error);
    }
}

/* Whether a call that rewrites values may run now: no gradient of the
 * current step handed over, no ZeRO-3 parameter gathered. */
static gboolean
check_quiet (MixprecEngine *self,
             const gchar   *param_name,
             GError       **error)
{
  if (self->micro_steps > 0)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': %u backward passes are accumulated since the last "
                   "step; set master values after step()", param_name, self->micro_steps);
      return FALSE;
    }
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      for (guint k = 0; g->units != NULL && k < g->units->len; k++)
        {
          const Unit *u = &g_array_index (g->units, Unit, k);
          MixprecParam *q = g_ptr_array_index (g->params, u->first_param);

          if (u->intake.arrived > 0)
            {
              g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                           "parameter '%s': gradients were handed over since the last step "
                           "(parameter '%s'); set master values after step()",
                           param_name, mixprec_param_get_name (q));
              return FALSE;
            }
          if (u->zero3.gather_count > 0)
            {
              g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                           "parameter '%s': parameter '%s' is gathered (ZeRO-3); release "
                           "it first", param_name, mixprec_param_get_name (q));
              return FALSE;
            }
        }
    }
  return TRUE;
}

/* @root's @values (or its refusal) on every rank, in @out (numel + 1
 * floats: a flag, then the values), through a buffer the device's
 * communicator takes. */
static gboolean
broadcast_values (MixprecEngine *self,
                  Group         *g,
                  gfloat        *out,
                  guint64        numel,
                  guint          root,
                  GError       **error)
{
  GError *local = NULL;
  gpointer buf;
  gboolean ok;

  buf = _mixprec_device_alloc (g->device, (numel + 1) * sizeof (gfloat), "master values", error);
  if (buf == NULL)
    return FALSE;
  ok = _mixprec_device_upload (g->device, out, MIXPREC_DTYPE_FLOAT32, buf, MIXPREC_DTYPE_FLOAT32,
                               numel + 1, error) &&
       _mixprec_engine_before_comm (self, error);
  if (ok && !mixprec_comm_broadcast (self->comm, buf, numel + 1, MIXPREC_DTYPE_FLOAT32, root, &local))
    ok = _mixprec_engine_comm_failed (error, local, "broadcasting master values");
  ok = ok && _mixprec_device_download (g->device, buf, MIXPREC_DTYPE_FLOAT32, out,
                                       MIXPREC_DTYPE_FLOAT32, numel + 1, error);
  _mixprec_device_free (g->device, buf);
  return ok;
}

static gboolean set_master_in_place (MixprecEngine  *self,
                                     MixprecParam   *p,
                                     const gfloat   *whole,
                                     gboolean       *done,
                                     GError        **error);

/**
 * mixprec_engine_set_master:
 * @self: a #MixprecEngine
 * @param_name: a registered parameter's name
 * @values: (nullable): the parameter's numel new FP32 values, in the
 *   machine's byte order; read on @root only, and may be %NULL elsewhere
 * @root: the rank whose @values every rank takes (0 on one process)
 * @error: return location for a #GError
 *
 * Replaces a parameter's FP32 values, the ones
 * mixprec_engine_gather_master() reads (its masters; in bf16 without
 * master weights its working copy; with `"master_weights": "remainder"`
 * or `"kahan"` the working copy and its remainder or compensation), with
 * @root's @values, as loading them from a checkpoint would: each rank
 * keeps its part as the stage keeps it, and the working copies are
 * rounded from the new values the way the last applied step rounded them
 * (made whole again on every rank where the stage keeps them whole). The
 * optimizer state, the step counters and the other parameters are left
 * as they are. This is what a DeepSpeed script's
 * `GatheredParameters(params, modifier_rank=root)` does on leaving.
 *
 * Collective across ranks: every rank calls it for the same parameter
 * with the same @root, between steps (no gradient handed over since the
 * last mixprec_engine_step()) and with no ZeRO-3 parameter gathered.
 * On a device whose buffers are host memory (the cpu device), without
 * FP8 copies, a call costs a pass over the parameter alone (and under
 * ZeRO-1/2 across ranks an all-gather of its unit), so that setting
 * every parameter in turn costs one pass over the model; elsewhere, like
 * a load, it rounds every parameter's working copy again (which gives
 * the others the bits they had).
 *
 * Returns: %TRUE, or %FALSE with @error set: no such parameter, @root
 *   not a rank, @values missing or not numel FP32 values on @root (every
 *   rank reports it), a call between backward passes and the step, a
 *   gathered parameter, or a failed broadcast
 *
 * Since: 1.1
 */
gboolean
mixprec_engine_set_master (MixprecEngine *self,
                           const gchar   *param_name,
                           GBytes        *values,
                           guint          root,
                           GError       **error)
{
  g_autoptr(GArray) shards = NULL;
  g_autofree gfloat *whole = NULL;
  const _MixprecEngineShard *sh;
  MixprecParam *p;
  guint64 numel;
  guint index;
  gsize size = 0;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (param_name != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  p = g_hash_table_lookup (self->by_name, param_name);
  if (p == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "no parameter named '%s'", param_name);
      return FALSE;
    }
  if (root >= self->world)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "parameter '%s': root %u is not a rank (world size %u)",
                   param_name, root, self->world);
      return FALSE;
    }
  if (!mixprec_engine_prepare (self, error) || !check_quiet (self, param_name, error))
    return FALSE;

  numel = mixprec_param_get_numel (p);
  /* Element 0 says whether @root's values are good: a refusal on @root
   * alone must reach the other ranks, which would wait for the values. */
  whole = g_new0 (gfloat, numel + 1);
  if (self->rank == root)
    {
      gconstpointer data = values != NULL ? g_bytes_get_data (values, &size) : NULL;

      if (values != NULL && size == numel * sizeof (gfloat))
        {
          memcpy (whole + 1, data, size);
          whole[0] = 1.0f;
        }
    }
  if (self->world > 1 &&
      !broadcast_values (self, _mixprec_engine_group_of (self, p), whole, numel, root, error))
    return FALSE;
  if (whole[0] != 1.0f)
    {
      if (self->rank == root && values == NULL)
        g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                     "parameter '%s': no values given on rank %u, the root", param_name, root);
      else if (self->rank == root)
        g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                     "parameter '%s': %" G_GSIZE_FORMAT " bytes of values, but its %"
                     G_GUINT64_FORMAT " elements take %" G_GUINT64_FORMAT " bytes of FP32",
                     param_name, size, numel, numel * (guint64) sizeof (gfloat));
      else
        g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                     "parameter '%s': rank %u, the root, gave no values of %" G_GUINT64_FORMAT
                     " FP32 elements", param_name, root, numel);
      return FALSE;
    }

  {
    gboolean done = FALSE;

    if (!set_master_in_place (self, p, whole + 1, &done, error))
      return FALSE;
    if (done)
      return TRUE;
  }
  /* Each rank writes its part as a checkpoint load does, then every
   * working copy is rounded from its values again. */
  shards = _mixprec_engine_get_load_shards (self, error);
  if (shards == NULL)
    return FALSE;
  if (!g_ptr_array_find (self->params, p, &index))
    g_assert_not_reached ();
  sh = &g_array_index (shards, _MixprecEngineShard, index);
  if (sh->end > sh->begin &&
      !_mixprec_engine_shard_store_f32 (sh, 0, whole + 1 + sh->begin, sh->end - sh->begin, error))
    return FALSE;
  return _mixprec_engine_refresh_working (self, error);
}

/**
 * mixprec_engine_get_optimizer_state_names:
 * @self: a #MixprecEngine
 *
 * Lists the names of the optimizer's state slots, as checkpoints store
 * them.
 *
 * Returns: (transfer full): the names of the optimizer's FP32 state slots
 *   per element, e.g. "exp_avg" and "exp_avg_sq" for adamw
 *
 * Since: 1.0
 */
GStrv
mixprec_engine_get_optimizer_state_names (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  return g_strdupv ((GStrv) mixprec_feature_get_state_names (self->optimizer));
}

/* Slot @k of @p, kept with block scales, decoded to FP32 (each stored
 * value times its block's scale); the state is whole on this rank. */
static gboolean
decode_scaled_state (MixprecEngine *self,
                     Group         *g,
                     MixprecParam  *p,
                     guint          k,
                     gfloat        *out,
                     GError       **error)
{
  Unit *u = _mixprec_engine_unit_of (self, p);
  guint64 numel = mixprec_param_get_numel (p);
  guint64 e0 = _mixprec_param_get_storage (p)->offset - u->flat;
  MixprecPluginStateFormat format = self->repr.slots[k];
  guint b = self->repr.block_size;
  const gfloat *scales;
  gconstpointer codes;

  if (!_mixprec_device_memory_is_host (g->state_device))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': its %s optimizer state is in device memory; save a "
                   "checkpoint to read it", mixprec_param_get_name (p),
                   _mixprec_checkpoint_state_format_name (format));
      return FALSE;
    }
  codes = g->states[k];
  scales = g->state_scales[k];
  for (guint64 i = 0; i < numel; i++)
    {
      guint64 e = e0 + i;
      guint64 index = _mixprec_engine_state_index (self, g, u, e, k);
      gfloat scale = scales[_mixprec_engine_scale_at (self, g, u, e - e % b)];

      out[i] = _mixprec_state_decode1 (format, slot_is_signed (self, k),
                                       _mixprec_state_load_code (format, codes, index), scale);
    }
  return TRUE;
}

/**
 * mixprec_engine_get_optimizer_state:
 * @self: a #MixprecEngine
 * @param_name: a registered parameter's name
 * @slot: a state slot name from mixprec_engine_get_optimizer_state_names()
 * @error: return location for a #GError
 *
 * Copies one optimizer state slot of one parameter. Under ZeRO-1 and above
 * the state is sharded and only the checkpoint functions see all of it.
 *
 * State kept in a scaled or quantized format (`mixprec.optimizer_states`)
 * is decoded: each stored value times its block's scale.
 *
 * Returns: (transfer full): numel FP32 values, or %NULL with @error set
 *   (unknown parameter or slot, or sharded state)
 *
 * Since: 1.0
 */
GBytes *
mixprec_engine_get_optimizer_state (MixprecEngine *self,
                                    const gchar   *param_name,
                                    const gchar   *slot,
                                    GError       **error)
{
  MixprecParam *param;
  const gchar * const *names;
  _MixprecParamStorage *s;
  Group *g;

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), NULL);
  g_return_val_if_fail (param_name != NULL && slot != NULL, NULL);

  param = g_hash_table_lookup (self->by_name, param_name);
  if (param == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "no parameter named '%s'", param_name);
      return NULL;
    }
  if (!mixprec_engine_prepare (self, error))
    return NULL;
  s = _mixprec_param_get_storage (param);
  g = g_ptr_array_index (self->groups, s->group);
  if (g->state_local)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': optimizer state is sharded across %u ranks (ZeRO-%u)",
                   param_name, self->world, self->stage);
      return NULL;
    }
  names = mixprec_feature_get_state_names (self->optimizer);
  for (guint i = 0; names != NULL && names[i] != NULL; i++)
    if (g_str_equal (names[i], slot))
      {
        guint64 numel = mixprec_param_get_numel (param);
        g_autofree gfloat *out = g_new (gfloat, MAX (numel, 1));

        if (_mixprec_engine_format_is_scaled (self->repr.slots[i]))
          {
            if (!decode_scaled_state (self, g, param, i, out, error))
              return NULL;
          }
        /* bfloat16 state widens exactly. */
        else if (!_mixprec_device_download (g->state_device,
                                            _mixprec_engine_at (g->states[i], slot_dtype (self, i), s->offset),
                                            slot_dtype (self, i), out, MIXPREC_DTYPE_FLOAT32, numel, error))
          return NULL;
        return g_bytes_new_take (g_steal_pointer (&out), numel * sizeof (gfloat));
      }
  g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
               "the '%s' optimizer has no state slot '%s'",
               mixprec_feature_get_name (self->optimizer), slot);
  return NULL;
}

/**
 * mixprec_engine_get_loss_scale:
 * @self: a #MixprecEngine
 *
 * Gives the loss scale of the next backward pass, the engine's loss
 * scaler's current scale: multiply the loss by it before computing
 * gradients.
 *
 * Returns: the factor to multiply the loss by before the backward pass
 *
 * Since: 1.0
 */
gdouble
mixprec_engine_get_loss_scale (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1.0);
  return mixprec_loss_scaler_get_scale (self->scaler);
}

/**
 * mixprec_engine_get_lr:
 * @self: a #MixprecEngine
 *
 * Gives the learning rate of the next applied step, as the learning-rate
 * schedule sets it.
 *
 * Returns: the learning rate the next applied step will use
 *
 * Since: 1.0
 */
gdouble
mixprec_engine_get_lr (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 0.0);
  return mixprec_lr_schedule_get_lr (self->schedule);
}

/**
 * mixprec_engine_get_gradient_accumulation_steps:
 * @self: a #MixprecEngine
 *
 * Gives how many micro-steps (backward passes) the engine folds into each
 * optimizer step.
 *
 * Returns: the number of backward passes per optimizer step
 *
 * Since: 1.0
 */
guint
mixprec_engine_get_gradient_accumulation_steps (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), 1);
  return self->gas;
}

/**
 * mixprec_engine_is_accumulation_boundary:
 * @self: a #MixprecEngine
 *
 * Tells whether the micro-steps folded so far complete an optimizer step.
 *
 * Returns: %TRUE when gradient_accumulation_steps backward passes have been
 *   folded and mixprec_engine_step() is due
 *
 * Since: 1.0
 */
gboolean
mixprec_engine_is_accumulation_boundary (MixprecEngine *self)
{
  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  return self->micro_steps == self->gas;
}

/* ---------------------------------------------------------------- private API */

void
_mixprec_engine_drop_mirrors (Group *g)
{
  if (g->mirrors.copies == NULL)
    return;
  for (guint i = 0; i < g->mirrors.copies->len; i++)
    g_free (g_array_index (g->mirrors.copies, HostMirror, i).host);
  g_clear_pointer (&g->mirrors.copies, g_array_unref);
}

/* Copies @bytes of device buffer @buffer to the host, for the shards. */
static gboolean
add_mirror (Group        *g,
            gpointer      buffer,
            gsize         bytes,
            GError      **error)
{
  HostMirror m = { buffer, NULL, bytes };

  if (buffer == NULL)
    return TRUE;
  for (guint i = 0; i < g->mirrors.copies->len; i++)
    if (g_array_index (g->mirrors.copies, HostMirror, i).device == buffer)
      return TRUE;
  m.host = g_try_malloc (MAX (bytes, 1));
  if (m.host == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                   "out of memory copying %" G_GSIZE_FORMAT " bytes of device buffers "
                   "to the host for a checkpoint", bytes);
      return FALSE;
    }
  g_array_append_val (g->mirrors.copies, m);
  return _mixprec_device_copy (g->device, m.host, buffer, bytes,
                               MIXPREC_PLUGIN_COPY_DEVICE_TO_HOST, error);
}

/* Host copies of every device buffer a checkpoint reads or writes: the
 * working copy, the masters and the optimizer state (unless offloaded:
 * then they are in host memory already). */
static gboolean
mirror_group (MixprecEngine *self,
              Group         *g,
              GError       **error)
{
  guint64 n_state = g->state_local ? g->local_n : g->padded;
  guint64 n_working = g->working_local ? g->local_n : g->padded;

  _mixprec_engine_drop_mirrors (g);
  g->mirrors.copies = g_array_new (FALSE, FALSE, sizeof (HostMirror));
  /* offload_param: the working slices are host memory already. */
  if (!g->working_on_host &&
      !add_mirror (g, g->working, n_working * mixprec_dtype_get_size (g->dtypes.working), error))
    return FALSE;
  if (_mixprec_device_memory_is_host (g->state_device))
    return TRUE;
  if (!add_mirror (g, g->master, n_state * sizeof (gfloat), error) ||
      !add_mirror (g, g->master_extra, n_state * sizeof (guint16), error))
    return FALSE;
  for (guint k = 0; k < mixprec_feature_get_n_state_slots (self->optimizer); k++)
    {
      MixprecPluginStateFormat format = self->repr.slots[k];
      guint64 n_scales = _mixprec_engine_n_scales (self, g);

      if (!_mixprec_engine_format_is_scaled (format))
        {
          if (!add_mirror (g, g->states[k], n_state * mixprec_dtype_get_size (slot_dtype (self, k)), error))
            return FALSE;
          continue;
        }
      if (!add_mirror (g, g->states[k], _mixprec_engine_format_bytes (format, n_scales * self->repr.block_size),
                       error) ||
          !add_mirror (g, g->state_scales[k], n_scales * sizeof (gfloat), error))
        return FALSE;
    }
  return TRUE;
}

/* The host address of device address @p inside one of @g's mirrors;
 * @p itself on the host (offloaded masters and state included). */
static gpointer
host_view (Group *g, gconstpointer p)
{
  if (g->mirrors.copies == NULL || p == NULL)
    return (gpointer) p;
  for (guint i = 0; i < g->mirrors.copies->len; i++)
    {
      HostMirror *m = &g_array_index (g->mirrors.copies, HostMirror, i);
      const guint8 *base = m->device;

      if ((const guint8 *) p >= base && (const guint8 *) p <= base + m->bytes)
        return (guint8 *) m->host + ((const guint8 *) p - base);
    }
  if (_mixprec_device_memory_is_host (g->state_device))
    return (gpointer) p;
  g_return_val_if_reached (NULL);
}

/* Writes the mirrors back to the device (after a checkpoint was loaded
 * into them) and drops them. */
static gboolean
upload_mirrors (Group   *g,
                GError **error)
{
  gboolean ok = TRUE;

  for (guint i = 0; g->mirrors.copies != NULL && i < g->mirrors.copies->len && ok; i++)
    {
      HostMirror *m = &g_array_index (g->mirrors.copies, HostMirror, i);

      ok = _mixprec_device_copy (g->device, m->device, m->host, m->bytes,
                                 MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error);
    }
  _mixprec_engine_drop_mirrors (g);
  return ok;
}

/* Whether the optimizer's slot @k may be negative and so takes the
 * signed quantization map: what the plugin declared (state_signed_mask),
 * which is also what its step encodes with. */
static gboolean
slot_is_signed (MixprecEngine *self,
                guint          k)
{
  return _mixprec_feature_state_is_signed (self->optimizer, k);
}

/* The element size of slot @k when it is not scaled. */
static MixprecDType
slot_dtype (MixprecEngine *self,
            guint          k)
{
  return _mixprec_engine_format_dtype (self->repr.slots[k]);
}

/* Points @shard at the state, the scales and the master's second half of
 * element @e (unit-relative) of @u, its first, whose values are at
 * @state_at. */
static void
point_shard (MixprecEngine       *self,
             Group               *g,
             const Unit          *u,
             guint64              e,
             guint64              state_at,
             _MixprecEngineShard *shard)
{
  guint b = self->repr.block_size;

  shard->master_format = _mixprec_engine_master_format (&self->repr, &g->dtypes);
  shard->master_extra = g->master_extra != NULL
                        ? host_view (g, (guint16 *) g->master_extra + state_at) : NULL;
  if (g->master_extra == NULL)
    shard->master_format = MIXPREC_PLUGIN_MASTER_FLOAT32;
  shard->block_size = 0;
  shard->block_phase = 0;
  shard->code_phase = 0;
  for (guint k = 0; k < shard->n_state_slots; k++)
    {
      MixprecPluginStateFormat format = self->repr.slots[k];

      shard->state_formats[k] = format;
      shard->state_signed[k] = slot_is_signed (self, k);
      shard->state_scales[k] = NULL;
      if (!_mixprec_engine_format_is_scaled (format))
        {
          shard->states[k] = host_view (g, _mixprec_engine_at (g->states[k], slot_dtype (self, k), state_at));
          continue;
        }
      {
        guint64 index = _mixprec_engine_state_index (self, g, u, e, k);

        shard->block_size = b;
        shard->block_phase = e % b;
        shard->state_scales[k] = host_view (g, g->state_scales[k] +
                                               _mixprec_engine_scale_at (self, g, u, e - e % b));
        if (format == MIXPREC_PLUGIN_STATE_INT4_DYNAMIC)
          {
            shard->states[k] = host_view (g, (guint8 *) g->states[k] + index / 2);
            shard->code_phase = index & 1;
          }
        else
          shard->states[k] = host_view (g, (guint8 *) g->states[k] +
                                           _mixprec_engine_format_bytes (format, index));
      }
    }
}

/* This rank's part of @p: the whole parameter on one process, its slice
 * of the parameter's unit across ranks (with @whole, under ZeRO-0 across
 * ranks: the whole parameter). */
static void
shard_of (MixprecEngine      *self,
          Group              *g,
          MixprecParam       *p,
          _MixprecEngineShard *shard,
          guint               n_slots,
          gboolean            whole)
{
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  const Unit *u = &g_array_index (g->units, Unit, s->unit);
  guint64 numel = mixprec_param_get_numel (p);
  guint64 e0 = s->offset - u->flat;
  guint64 slice = UNIT_SLICE (self, u);
  guint64 lo = MAX (e0, self->rank * slice), hi = MIN (e0 + numel, (self->rank + 1) * slice);
  gfloat *master;
  guint64 state_at;
  gpointer working;

  shard->param = p;
  shard->working_dtype = g->dtypes.working;
  shard->n_state_slots = MIN (n_slots, G_N_ELEMENTS (shard->states));
  shard->state_dtype = self->state_dtype;
  if (whole && self->world > 1 && !g->state_local)
    {
      /* ZeRO-0 across ranks: every rank holds (and loads) everything. */
      lo = e0;
      hi = e0 + numel;
    }
  if (self->world == 1)
    {
      const Segment *seg = _mixprec_engine_segment_of (g, s->offset);

      shard->begin = 0;
      shard->end = numel;
      shard->master = seg->master != NULL ? host_view (g, seg->master + (s->offset - seg->master_base)) : NULL;
      shard->working = host_view (g, _mixprec_engine_at (seg->working, g->dtypes.working, s->offset - seg->working_base));
      point_shard (self, g, u, e0, s->offset, shard);
      return;
    }
  /* A checkpoint stores each element once: each rank saves its slice,
   * whatever the stage keeps besides. */
  if (hi <= lo)
    {
      /* Nothing to point at; the formats still say what the engine keeps. */
      shard->begin = shard->end = 0;
      shard->master_format = g->master_extra != NULL
                             ? _mixprec_engine_master_format (&self->repr, &g->dtypes)
                             : MIXPREC_PLUGIN_MASTER_FLOAT32;
      shard->block_size = self->repr.block_size;
      for (guint k = 0; k < shard->n_state_slots; k++)
        {
          shard->state_formats[k] = self->repr.slots[k];
          shard->state_signed[k] = slot_is_signed (self, k);
        }
      return;
    }
  shard->begin = lo - e0;
  shard->end = hi - e0;
  _mixprec_engine_values_at (self, g, u, lo, &master, &state_at, &working);
  shard->master = host_view (g, master);
  shard->working = host_view (g, working != NULL ? working : master);
  point_shard (self, g, u, lo, state_at, shard);
}

static GArray *
get_shards (MixprecEngine *self,
            gboolean       whole,
            GError       **error)
{
  GArray *shards;
  guint n_slots;

  if (!mixprec_engine_prepare (self, error))
    return NULL;
  /* Fresh host copies for every call: the device's values move on. */
  for (guint j = 0; j < self->groups->len; j++)
    _mixprec_engine_drop_mirrors (g_ptr_array_index (self->groups, j));
  n_slots = mixprec_feature_get_n_state_slots (self->optimizer);
  shards = g_array_sized_new (FALSE, TRUE, sizeof (_MixprecEngineShard), self->params->len);
  for (guint i = 0; i < self->params->len; i++)
    {
      MixprecParam *p = g_ptr_array_index (self->params, i);
      Group *g = _mixprec_engine_group_of (self, p);
      _MixprecEngineShard shard = { 0 };

      if (!_mixprec_device_memory_is_host (g->device) && g->mirrors.copies == NULL && !mirror_group (self, g, error))
        {
          g_array_unref (shards);
          return NULL;
        }
      shard_of (self, g, p, &shard, n_slots, whole);
      g_array_append_val (shards, shard);
    }
  return shards;
}

GArray *
_mixprec_engine_get_shards (MixprecEngine *self,
                            GError       **error)
{
  return get_shards (self, FALSE, error);
}

GArray *
_mixprec_engine_get_load_shards (MixprecEngine *self,
                                 GError       **error)
{
  return get_shards (self, TRUE, error);
}

void
_mixprec_engine_get_counters (MixprecEngine          *self,
                              _MixprecEngineCounters *counters)
{
  counters->steps = self->steps;
  counters->applied_steps = self->applied_steps;
  counters->skipped_steps = self->skipped_steps;
  counters->seed = self->seed;
}

void
_mixprec_engine_set_counters (MixprecEngine                *self,
                              const _MixprecEngineCounters *counters)
{
  self->steps = counters->steps;
  self->applied_steps = counters->applied_steps;
  self->skipped_steps = counters->skipped_steps;
  self->seed = counters->seed;
}

MixprecLrSchedule *
_mixprec_engine_get_schedule (MixprecEngine *self)
{
  return self->schedule;
}

MixprecFeature *
_mixprec_engine_get_optimizer (MixprecEngine *self)
{
  return self->optimizer;
}

guint
_mixprec_engine_get_rank (MixprecEngine *self)
{
  return self->rank;
}

guint
_mixprec_engine_get_world_size (MixprecEngine *self)
{
  return self->world;
}

guint
_mixprec_engine_get_zero_stage (MixprecEngine *self)
{
  return mixprec_config_get_zero_stage (self->config);
}

gboolean
_mixprec_engine_barrier (MixprecEngine *self,
                         GError       **error)
{
  GError *local = NULL;

  if (self->comm == NULL)
    return TRUE;
  if (!mixprec_comm_barrier (self->comm, &local))
    return _mixprec_engine_comm_failed (error, local, "barrier");
  return TRUE;
}

/* Rounds the FP32 values of @u's elements [e, e + n) into its working
 * copy as the last applied step rounded them, so a resumed run continues
 * bit for bit: with stochastic rounding its seed and the element's
 * position in the group pick the same random bits. */
static gboolean
round_working (MixprecEngine *self,
               Group         *g,
               const Unit    *u,
               guint64        e,
               guint64        n,
               GError       **error)
{
  gboolean stochastic = self->stochastic && self->applied_steps > 0;
  gfloat *master;
  guint64 state_at;
  gpointer working;

  if (n == 0)
    return TRUE;
  _mixprec_engine_values_at (self, g, u, e, &master, &state_at, &working);
  if (working == NULL || master == NULL)
    return TRUE;
  if (g->working_on_host)
    /* offload_param: both in host memory, rounded as the step rounds. */
    return mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, master, g->dtypes.working, working, n,
                                  stochastic ? MIXPREC_ROUNDING_STOCHASTIC : MIXPREC_ROUNDING_NEAREST_EVEN,
                                  stochastic ? _mixprec_engine_step_seed (self, g->index) : 0,
                                  u->index + e, error);
  if (!_mixprec_device_memory_is_host (g->device) && _mixprec_device_memory_is_host (g->state_device))
    {
      /* Offloaded masters: rounded on the host as the step rounds them,
       * then copied up. */
      gsize wsize = mixprec_dtype_get_size (g->dtypes.working);
      g_autofree guint8 *host = g_try_malloc (MAX (n * wsize, 1));

      if (host == NULL)
        {
          g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_PARAM,
                       "out of memory rounding %" G_GUINT64_FORMAT " restored master weights", n);
          return FALSE;
        }
      return mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, master, g->dtypes.working, host, n,
                                    stochastic ? MIXPREC_ROUNDING_STOCHASTIC : MIXPREC_ROUNDING_NEAREST_EVEN,
                                    stochastic ? _mixprec_engine_step_seed (self, g->index) : 0,
                                    u->index + e, error) &&
             _mixprec_device_copy (g->device, working, host, n * wsize,
                                   MIXPREC_PLUGIN_COPY_HOST_TO_DEVICE, error);
    }
  return _mixprec_device_convert (g->device, master, MIXPREC_DTYPE_FLOAT32, working, g->dtypes.working, n,
                                  stochastic ? MIXPREC_ROUNDING_STOCHASTIC : MIXPREC_ROUNDING_NEAREST_EVEN,
                                  stochastic ? _mixprec_engine_step_seed (self, g->index) : 0,
                                  u->index + e, error);
}

/* mixprec_engine_set_master() for @p alone, where that gives the bits a
 * load's refresh of every working copy gives (@done): the group's
 * buffers are host memory, without mirrors, FP8 copies or external
 * segments. Stores this rank's part of @whole (the parameter's numel
 * values) as a load does, rounds that part of the working copy as
 * _mixprec_engine_refresh_working() rounds it (element by element, the
 * same function over the same positions) and makes the unit whole again
 * where the stage keeps it whole. The other parameters keep their bits,
 * which a refresh would round from their unchanged values again. */
static gboolean
set_master_in_place (MixprecEngine  *self,
                     MixprecParam   *p,
                     const gfloat   *whole,
                     gboolean       *done,
                     GError        **error)
{
  Group *g = _mixprec_engine_group_of (self, p);
  _MixprecParamStorage *s = _mixprec_param_get_storage (p);
  _MixprecEngineShard shard = { 0 };
  const Unit *u;
  guint64 e0, lo, hi;

  *done = FALSE;
  if (g->external || g->fp8.enabled || !_mixprec_device_memory_is_host (g->device) ||
      !_mixprec_device_memory_is_host (g->state_device))
    return TRUE;
  /* A unit gathered (or on its way) would keep the old values, and so
   * would hpZ's parts of it. */
  mixprec_engine_release_all (self);
  _mixprec_engine_hpz_forget (self);
  shard_of (self, g, p, &shard, mixprec_feature_get_n_state_slots (self->optimizer), TRUE);
  if (shard.end > shard.begin &&
      !_mixprec_engine_shard_store_f32 (&shard, 0, whole + shard.begin, shard.end - shard.begin, error))
    return FALSE;
  u = &g_array_index (g->units, Unit, s->unit);
  e0 = s->offset - u->flat;
  lo = e0;
  hi = e0 + mixprec_param_get_numel (p);
  if (self->world > 1 && g->state_local)
    {
      guint64 slice = UNIT_SLICE (self, u);

      lo = MAX (lo, self->rank * slice);
      hi = MIN (hi, (self->rank + 1) * slice);
    }
  if (hi > lo && !round_working (self, g, u, lo, hi - lo, error))
    return FALSE;
  if (!_mixprec_engine_refresh_whole_unit (self, g, u, error))
    return FALSE;
  *done = TRUE;
  return TRUE;
}

gboolean
_mixprec_engine_refresh_working (MixprecEngine *self,
                                 GError       **error)
{
  if (!mixprec_engine_prepare (self, error))
    return FALSE;
  mixprec_engine_release_all (self);
  _mixprec_engine_hpz_forget (self);
  for (guint j = 0; j < self->groups->len; j++)
    {
      Group *g = g_ptr_array_index (self->groups, j);

      /* On a device, what was restored sits in the host mirrors. */
      if (!upload_mirrors (g, error))
        return FALSE;

      if (g->external)
        {
          for (guint k = 0; k < g->segments->len; k++)
            {
              const Segment *c = &g_array_index (g->segments, Segment, k);

              if (c->master != NULL && c->master != (gpointer) c->working &&
                  !mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, c->master, g->dtypes.working,
                                          c->working, c->numel,
                                          MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, error))
                return FALSE;
            }
          continue;
        }
      /* ZeRO-0 across ranks: every rank restored everything
       * (_mixprec_engine_get_load_shards()), so nothing is gathered. */
      for (guint k = 0; k < g->units->len; k++)
        {
          const Unit *u = &g_array_index (g->units, Unit, k);
          guint64 slice = UNIT_SLICE (self, u), e = self->rank * slice;
          guint64 n = u->numel > e ? MIN (u->numel - e, slice) : 0;

          if (self->world == 1 || !g->state_local)
            e = 0, n = u->numel;
          if (!round_working (self, g, u, e, n, error))
            return FALSE;
        }
    }
  if (self->stage >= 1 && !_mixprec_engine_refresh_whole (self, error))
    return FALSE;
  /* The FP8 copies follow the restored values, cast with the restored
   * scalings (or fresh ones). */
  if (!_mixprec_engine_fp8_write (self, FALSE, error))
    return FALSE;
  _mixprec_engine_clear_gradients (self);
  return TRUE;
}

gpointer
_mixprec_engine_get_accum_of (gpointer       engine,
                              MixprecParam  *param,
                              MixprecDType  *dtype,
                              GError       **error)
{
  MixprecEngine *self = engine;
  Group *g;

  if (self == NULL || !_mixprec_engine_ensure_prepared (self, error))
    {
      if (self == NULL)
        g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                     "parameter '%s': its engine is gone", mixprec_param_get_name (param));
      return NULL;
    }
  g = _mixprec_engine_group_of (self, param);
  if (self->world > 1)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': across %u ranks each rank accumulates only its "
                   "slices of the gradients", mixprec_param_get_name (param), self->world);
      return NULL;
    }
  if (g->accum == NULL)
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_WRONG_STATE,
                   "parameter '%s': the engine keeps no accumulation buffer: with one "
                   "micro-step per step it reads the gradient buffer in place",
                   mixprec_param_get_name (param));
      return NULL;
    }
  *dtype = g->dtypes.accum;
  return _mixprec_engine_at (g->accum, g->dtypes.accum, _mixprec_param_get_storage (param)->offset);
}
