/* mixprec-param-private.h — how the engine builds and wires a MixprecParam */
#pragma once

#include "mixprec.h"
#include "mixprec-device-private.h"

G_BEGIN_DECLS

/* Where a parameter's values live once the engine has laid out its
 * buffers. Pointers are NULL before that. */
typedef struct {
  gpointer working;          /* working copy, working dtype */
  gpointer grad;             /* gradient written by the user, grad dtype */
  gfloat *master;            /* FP32 master (== working when the working dtype
                                is FP32 and no separate master is kept); NULL
                                for bf16 without master weights */
  _MixprecDevice *device;    /* where the pointers point (NULL: host), a
                                reference the parameter holds */
  gboolean master_on_host;   /* offload: a separate master in host memory */
  guint group;               /* index of the engine group holding it */
  guint unit;                /* index of its unit in the group */
  guint64 offset;            /* element offset inside the group's padded
                                element space */
  guint64 index;             /* element offset inside the group's unpadded
                                element space */
  guint handed;              /* 1 + the micro-step its gradient was handed
                                over in with reduce_grad(), 0 if none */
  gboolean grad_exposed;     /* the caller was given the gradient buffer
                                (an address, or a write through
                                set_grad()/add_grad()): it must read zero
                                after each backward_done() */
  gboolean grad_stale;       /* the buffer still holds a gradient the step
                                consumed (never when exposed) */
  gboolean address_taken;    /* a buffer's address was handed to the caller
                                (*_data(), *_address()): auto-precision,
                                which moves buffers, refuses it */
  /* FP8 working copy (see mixprec-engine-fp8.c). */
  gboolean fp8;              /* the policy marks it fp8 */
  MixprecDType fp8_dtype;
  MixprecFp8RecipeKind fp8_kind;
  guint8 *fp8_data;          /* the whole FP8 copy; NULL under ZeRO-3 until
                                gathered */
  guint8 *fp8_scales;        /* MX: the whole copy's E8M0 block scales */
  gsize n_fp8_scales;
  MixprecFp8Scaling *fp8_scaling;  /* owned; the forward role's state */
  gfloat fp8_amax;           /* this rank's amax of the last cast, not yet
                                agreed (delayed scaling) */
  /* 4-bit working copy (see mixprec-engine-fp4.c): fp8_data and
   * fp8_scales then hold its packed E2M1 bytes and its block scales. */
  gboolean fp4;              /* the policy marks it fp4 */
  MixprecBlockRecipe fp4_recipe;
  guint64 fp4_cols;          /* the length of the rows its blocks run along */
  gfloat fp4_tensor_scale;   /* NVFP4's per-tensor scale (1 for MXFP4) */
} _MixprecParamStorage;

typedef struct {
  MixprecDType working;
  MixprecDType grad;
  MixprecDType accum;
  MixprecDType comm;
  gboolean has_master;       /* a separate FP32 master copy exists */
} _MixprecParamDTypes;

MixprecParam *_mixprec_param_new (gpointer                   engine,
                                  const gchar               *name,
                                  const guint64             *shape,
                                  guint                      n_dims,
                                  guint64                    numel,
                                  const gchar               *module_type,
                                  const _MixprecParamDTypes *dtypes,
                                  gdouble                    weight_decay_multiplier,
                                  gboolean                   external);

_MixprecParamStorage *_mixprec_param_get_storage (MixprecParam *self);
gboolean              _mixprec_param_is_external (MixprecParam *self);
/* Auto-precision (mixprec-engine-autoprec.c) changes the dtypes of a
 * parameter between two layouts of the engine's buffers. */
void                  _mixprec_param_set_dtypes  (MixprecParam              *self,
                                                  const _MixprecParamDTypes *dtypes);
/* Asks the owning engine to lay out its buffers (first access). */
gboolean              _mixprec_param_ensure_storage (MixprecParam *self,
                                                     GError      **error);

gpointer              _mixprec_param_get_engine    (MixprecParam *self);

/* Implemented by the engine: the whole gradient buffer of @param's group. */
gboolean _mixprec_engine_ensure_grad_of (gpointer      engine,
                                         MixprecParam *param,
                                         GError      **error);

/* Implemented by the engine: where @param's elements lie in its group's
 * accumulation buffer (one process only), or NULL with @error set. */
gpointer _mixprec_engine_get_accum_of (gpointer       engine,
                                       MixprecParam  *param,
                                       MixprecDType  *dtype,
                                       GError       **error);

/* Implemented by the engine: lays out every buffer on first use. */
gboolean _mixprec_engine_ensure_prepared (gpointer  engine,
                                          GError  **error);

G_END_DECLS
