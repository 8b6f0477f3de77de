/* mixprec-registry-private.h — what the registry, the plugin loader and the
 * engine share about plugins and features; never installed. */
#pragma once

#include <gmodule.h>

#include "mixprec.h"
#include "mixprec-plugin-abi.h"

G_BEGIN_DECLS

/* Size of the error buffers handed to plugin functions. */
#define _MIXPREC_PLUGIN_ERRBUF_SIZE 1024

/* ---- features (mixprec-feature.c; the checks of one revision in
 * mixprec-plugin-compat.c, which upgrades every registered vtable) */

/* What register_optimizer would answer a plugin: required fields, names,
 * hyper-parameter schema (types, bounds, defaults), state names, reserved
 * space. The message names the optimizer and the rule it breaks. */
gboolean        _mixprec_optimizer_vtable_check        (const MixprecOptimizerV1 *vtable,
                                                        GError                  **error);
/* The same for revision 2 (register_optimizer_v2): the V1 checks plus a
 * state_dtype_mask that names float32 and known dtypes only. */
gboolean        _mixprec_optimizer_v2_vtable_check     (const MixprecOptimizerV2 *vtable,
                                                        GError                  **error);
/* The same for revision 3 (register_optimizer_v3): the V2 checks plus a
 * state_format_mask and a master_format_mask that name FLOAT32 and known
 * formats only, and a state_signed_mask within the state slots. */
gboolean        _mixprec_optimizer_v3_vtable_check     (const MixprecOptimizerV3 *vtable,
                                                        GError                  **error);

/* For the tests: the optimizer's schema as a V1 struct (NULL for other
 * kinds; its step is the plugin's own for a revision 1 optimizer, NULL for
 * a revision 2 one), and its
 * default hyper-parameters in schema order (n_hparams values). */
const MixprecOptimizerV1 *_mixprec_feature_get_optimizer_vtable (MixprecFeature *feature);
/* Whether optimizer slot @k may be negative, so that its low-bit codes use
 * the signed quantization map: the plugin's state_signed_mask from
 * revision 3 on. Revisions 1 and 2 declare no signs (their states are
 * float32 or bfloat16, which need none); for them, as for the built-in
 * optimizers, every slot but "exp_avg_sq" is signed. */
gboolean        _mixprec_feature_state_is_signed       (MixprecFeature *feature,
                                                        guint           k);
const gdouble  *_mixprec_feature_get_hparam_defaults   (MixprecFeature *feature,
                                                        guint          *n_hparams);
/* Calls the optimizer's step(), filling args->struct_size, hparams and
 * n_hparams (the defaults when @hparams is NULL) and turning a failure
 * into MIXPREC_PLUGIN_ERROR_CALL_FAILED. */
gboolean        _mixprec_feature_optimizer_step        (MixprecFeature           *feature,
                                                        MixprecOptimizerStepV1   *args,
                                                        const gdouble            *hparams,
                                                        gfloat                   *master,
                                                        gconstpointer             grad,
                                                        gfloat * const           *states,
                                                        gpointer                  working,
                                                        gsize                     n,
                                                        GError                  **error);

/* The step of either revision: V2 arguments, state slots in
 * args->state_dtypes (NULL: all float32). A revision 1 optimizer gets
 * &args->base through the shim (mixprec-plugin-compat.c) and only float32
 * state: another dtype is
 * MIXPREC_PLUGIN_ERROR_CALL_FAILED naming the plugin and its revision.
 * _mixprec_feature_optimizer_step() above is this with float32 state. */
gboolean        _mixprec_feature_optimizer_step_v2     (MixprecFeature           *feature,
                                                        MixprecOptimizerStepV2   *args,
                                                        const gdouble            *hparams,
                                                        gfloat                   *master,
                                                        gconstpointer             grad,
                                                        gpointer const           *states,
                                                        gpointer                  working,
                                                        gsize                     n,
                                                        GError                  **error);

/* Whether @feature (an optimizer) measures per-tensor numerics itself in
 * a call whose master is @master_format and whose slots are FLOAT32 or
 * BFLOAT16 (its numerics_master_mask, ABI 1.6). */
gboolean        _mixprec_feature_optimizer_measures    (MixprecFeature           *feature,
                                                        MixprecPluginMasterFormat master_format);

/* The step of any revision with revision 3's arguments: each slot in
 * args->state_formats (NULL: all FLOAT32), the master in
 * args->master_format, args->state_scales / block_size / master_extra as
 * MixprecOptimizerStepV3 says. Fills args->v2.base.struct_size, hparams
 * and n_hparams (the defaults when @hparams is NULL), and
 * args->v2.state_dtypes for the call when the caller left it NULL. First
 * checks the representation (_mixprec_feature_check_representation()),
 * so a revision 1 or 2 optimizer is reached only with FLOAT32 / BFLOAT16
 * slots and a FLOAT32 master; a plugin's failure is
 * MIXPREC_PLUGIN_ERROR_CALL_FAILED with its message. */
gboolean        _mixprec_feature_optimizer_step_v3     (MixprecFeature           *feature,
                                                        MixprecOptimizerStepV3   *args,
                                                        const gdouble            *hparams,
                                                        gfloat                   *master,
                                                        gconstpointer             grad,
                                                        gpointer const           *states,
                                                        gpointer                  working,
                                                        gsize                     n,
                                                        GError                  **error);

/* Whether the optimizer can keep its parameters with @master and its
 * @n_formats state slots in @formats (NULL: all FLOAT32; otherwise
 * @n_formats must be its number of slots). FALSE with
 * MIXPREC_PLUGIN_ERROR_CALL_FAILED naming the optimizer, its plugin and
 * revision, the slot and the format it cannot honour. The engine asks
 * this when it plans, before any step. */
gboolean        _mixprec_feature_check_representation  (MixprecFeature                  *feature,
                                                        MixprecPluginMasterFormat        master,
                                                        const MixprecPluginStateFormat  *formats,
                                                        guint                            n_formats,
                                                        GError                         **error);

/* A state format (MixprecPluginStateFormat) and a master format
 * (MixprecPluginMasterFormat) in words for messages ("block-wise dynamic
 * int8", "a remainder master (...)"); NULL for an unknown value. */
const gchar    *_mixprec_plugin_state_format_describe  (guint format);
const gchar    *_mixprec_plugin_master_format_describe (guint format);

/* What register_comm would answer: name, device, every function, a
 * dtype_mask naming only known dtypes, reserved space. */
gboolean        _mixprec_comm_vtable_check             (const MixprecCommV1 *vtable,
                                                        GError             **error);
/* The same for revision 2 (register_comm_v2): the V1 checks plus the
 * all_to_all and the V2 reserved space. */
gboolean        _mixprec_comm_v2_vtable_check          (const MixprecCommV2 *vtable,
                                                        GError             **error);
/* For MixprecComm: the communicator's vtable (NULL for other kinds); and
 * the same upgraded to revision 2, whose all_to_all is NULL when the
 * plugin registered revision 1 (*revision: the one it registered). */
const MixprecCommV1 *_mixprec_feature_get_comm_vtable  (MixprecFeature *feature);
const MixprecCommV2 *_mixprec_feature_get_comm_v2      (MixprecFeature *feature,
                                                        guint          *revision);

/* ---- plugins (mixprec-plugin-object.c, mixprec-plugin-loader.c) */

/* The NAME of a file called mixprec-NAME.so ("mixprec-optim-adamw.so" ->
 * "optim-adamw"), or NULL for any other base name. The loader refuses a
 * NAME with characters other than letters, digits, '-' and '_'. */
gchar          *_mixprec_plugin_name_from_filename     (const gchar *filename);

/* Opens, checks and initialises one plugin file called mixprec-NAME.so.
 * Always returns a plugin: loaded, or not loaded with its load error set. */
MixprecPlugin  *_mixprec_plugin_load                   (const gchar *filename,
                                                        const gchar *name);

/* The plugin named "builtin": the features compiled into libmixprec
 * (mixprec-builtin.c), registered through the same host table and checks
 * as a plugin file's. It has no file and no module. */
#define _MIXPREC_BUILTIN_PLUGIN_NAME "builtin"
const MixprecPluginDesc *_mixprec_builtin_get_desc     (void);
MixprecPlugin  *_mixprec_plugin_load_builtin           (void);

/* The logger of the host table (mixprec-plugin-log.c), and the log_data
 * of plugin @name: both valid for the life of the process. */
void            _mixprec_plugin_log                    (void                 *log_data,
                                                        MixprecPluginLogLevel level,
                                                        const char           *file,
                                                        int                   line,
                                                        const char           *func,
                                                        const char           *format,
                                                        ...) G_GNUC_PRINTF (6, 7);
gpointer        _mixprec_plugin_log_data_new           (const gchar *name);

/* "runtime error": a MixprecPluginStatus in words, for messages. */
const gchar    *_mixprec_plugin_status_to_string       (int status);

/* Building blocks of the loader. */
MixprecPlugin  *_mixprec_plugin_new                    (const gchar *filename,
                                                        const gchar *name);
void            _mixprec_plugin_set_abi                (MixprecPlugin *self,
                                                        guint          abi_major,
                                                        guint          abi_minor);
void            _mixprec_plugin_set_description        (MixprecPlugin           *self,
                                                        const MixprecPluginDesc *desc);
void            _mixprec_plugin_set_loaded             (MixprecPlugin *self,
                                                        GModule       *module,
                                                        GPtrArray     *features);
void            _mixprec_plugin_set_load_error         (MixprecPlugin *self,
                                                        GError        *error);
/* The features in registration order, owned by the plugin. */
GPtrArray      *_mixprec_plugin_peek_features          (MixprecPlugin *self);

/* Whether the @n pointers at @p are all NULL: a plugin struct's reserved
 * space, which a plugin built against another revision of the ABI fills. */
static inline gboolean
_mixprec_pointers_are_null (void * const *p,
                            gsize         n)
{
  for (gsize i = 0; i < n; i++)
    if (p[i] != NULL)
      return FALSE;
  return TRUE;
}

G_END_DECLS
