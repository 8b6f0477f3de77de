/* mixprec-param.h — one registered tensor and its buffers */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-dtype.h"
#include "mixprec-fp8-recipe.h"
#include "mixprec-fp4.h"

G_BEGIN_DECLS

/**
 * MixprecParamBuffer:
 * @MIXPREC_PARAM_BUFFER_WORKING: the working copy, in the working dtype
 * @MIXPREC_PARAM_BUFFER_GRAD: the gradient buffer, in the gradient dtype
 * @MIXPREC_PARAM_BUFFER_MASTER: the FP32 values the optimizer updates
 * @MIXPREC_PARAM_BUFFER_ACCUM: the buffer gradients are accumulated in
 *   across micro-steps, in the accumulation dtype (read it, never write it)
 * @MIXPREC_PARAM_BUFFER_FP8: the FP8 working copy of a parameter the
 *   precision policy marks fp8, in mixprec_param_get_fp8_dtype() (Since: 1.1)
 * @MIXPREC_PARAM_BUFFER_FP8_SCALES: the E8M0 block scales of an MX FP8
 *   working copy: one byte per block of the recipe's block size (no
 *   #MixprecDType names E8M0; the dtype reported is the FP8 dtype of the
 *   elements they scale) (Since: 1.1)
 *
 * One of a parameter's buffers, for mixprec_param_get_buffer_address().
 *
 * Since: 1.1
 */
typedef enum /*< since=1_1 >*/ {
  MIXPREC_PARAM_BUFFER_WORKING,
  MIXPREC_PARAM_BUFFER_GRAD,
  MIXPREC_PARAM_BUFFER_MASTER,
  MIXPREC_PARAM_BUFFER_ACCUM,
  MIXPREC_PARAM_BUFFER_FP8,
  MIXPREC_PARAM_BUFFER_FP8_SCALES,
} MixprecParamBuffer;

#define MIXPREC_TYPE_PARAM (mixprec_param_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecParam, mixprec_param, MIXPREC, PARAM, GObject)

MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_param_get_name              (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar  *mixprec_param_get_module_type       (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
const guint64 *mixprec_param_get_shape            (MixprecParam *self,
                                                   guint        *n_dims);
MIXPREC_AVAILABLE_IN_1_0
guint64       mixprec_param_get_numel             (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType  mixprec_param_get_working_dtype     (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType  mixprec_param_get_grad_dtype        (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType  mixprec_param_get_accum_dtype       (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
MixprecDType  mixprec_param_get_comm_dtype        (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_param_has_master            (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble       mixprec_param_get_weight_decay_multiplier (MixprecParam *self);

/* Direct access for C trainers (not for bindings). */
MIXPREC_AVAILABLE_IN_1_0
gpointer      mixprec_param_get_working_data      (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
gpointer      mixprec_param_get_grad_data         (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_0
const gfloat *mixprec_param_get_master_data       (MixprecParam *self);

/* Addresses, for bindings that build zero-copy views (ctypes, DLPack). */
MIXPREC_AVAILABLE_IN_1_1
guint64       mixprec_param_get_buffer_address    (MixprecParam       *self,
                                                   MixprecParamBuffer  buffer,
                                                   MixprecDType       *dtype,
                                                   GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean      mixprec_param_reduce_grad_address   (MixprecParam  *self,
                                                   MixprecDType   dtype,
                                                   guint64        address,
                                                   GError       **error);
MIXPREC_AVAILABLE_IN_1_1
guint64       mixprec_param_get_device_address    (MixprecParam       *self,
                                                   MixprecParamBuffer  buffer,
                                                   MixprecDType       *dtype,
                                                   gint               *device_type,
                                                   gint               *device_id,
                                                   GError            **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean      mixprec_param_reduce_grad_device_address (MixprecParam  *self,
                                                   MixprecDType   dtype,
                                                   guint64        address,
                                                   GError       **error);

/* Copies, for bindings and tests. */
MIXPREC_AVAILABLE_IN_1_0
GBytes       *mixprec_param_get_working           (MixprecParam *self,
                                                   MixprecDType  dtype,
                                                   GError      **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes       *mixprec_param_get_master            (MixprecParam *self,
                                                   GError      **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_param_set_grad              (MixprecParam *self,
                                                   MixprecDType  dtype,
                                                   GBytes       *grad,
                                                   GError      **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean      mixprec_param_add_grad              (MixprecParam *self,
                                                   MixprecDType  dtype,
                                                   GBytes       *grad,
                                                   GError      **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean      mixprec_param_reduce_grad           (MixprecParam  *self,
                                                   MixprecDType   dtype,
                                                   gconstpointer  grad,
                                                   GError       **error);
MIXPREC_AVAILABLE_IN_1_1
gboolean      mixprec_param_reduce_grad_bytes     (MixprecParam  *self,
                                                   MixprecDType   dtype,
                                                   GBytes        *grad,
                                                   GError       **error);

/* FP8 working copies (Since: 1.1). */
MIXPREC_AVAILABLE_IN_1_1
gboolean           mixprec_param_is_fp8                (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecDType       mixprec_param_get_fp8_dtype         (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
const guint8      *mixprec_param_get_fp8_data          (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
const guint8      *mixprec_param_get_fp8_block_scales  (MixprecParam *self,
                                                        gsize        *n_scales);
MIXPREC_AVAILABLE_IN_1_1
GBytes            *mixprec_param_get_fp8               (MixprecParam *self,
                                                        GError      **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes            *mixprec_param_get_fp8_block_scales_bytes (MixprecParam *self,
                                                             GError      **error);
MIXPREC_AVAILABLE_IN_1_1
gfloat             mixprec_param_get_fp8_scale_inv     (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecFp8Scaling *mixprec_param_get_fp8_scaling       (MixprecParam *self);

/* 4-bit working copies (Since: 1.1). */
MIXPREC_AVAILABLE_IN_1_1
gboolean           mixprec_param_is_fp4                (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
MixprecBlockRecipe mixprec_param_get_fp4_recipe        (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
guint64            mixprec_param_get_fp4_cols          (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
const guint8      *mixprec_param_get_fp4_data          (MixprecParam *self,
                                                        gsize        *n_bytes);
MIXPREC_AVAILABLE_IN_1_1
const guint8      *mixprec_param_get_fp4_block_scales  (MixprecParam *self,
                                                        gsize        *n_scales);
MIXPREC_AVAILABLE_IN_1_1
gfloat             mixprec_param_get_fp4_tensor_scale  (MixprecParam *self);
MIXPREC_AVAILABLE_IN_1_1
gboolean           mixprec_param_dequantize_fp4        (MixprecParam *self,
                                                        gfloat       *dst,
                                                        gsize         n,
                                                        GError      **error);
MIXPREC_AVAILABLE_IN_1_1
GBytes            *mixprec_param_dequantize_fp4_bytes  (MixprecParam *self,
                                                        GError      **error);
MIXPREC_AVAILABLE_IN_1_1
guint64            mixprec_param_get_fp4_address       (MixprecParam *self,
                                                        guint64      *scales_address,
                                                        gsize        *n_scales,
                                                        gint         *device_type,
                                                        gint         *device_id,
                                                        GError      **error);

G_END_DECLS
