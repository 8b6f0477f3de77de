/* mixprec-plugin-compat-private.h — every revision of the plugin ABI's
 * vtables upgraded to the newest struct of its kind, in one place
 * (mixprec-plugin-compat.c); never installed.
 *
 * A plugin registers one of eight structs (the register_* entries of
 * MixprecPluginHostV1). Each is checked and upgraded at once into a
 * _MixprecVTable, which holds the newest revision of its kind: the rest of
 * the library (features, devices, the engine) knows no older struct. What
 * an old revision lacks is NULL in the upgraded struct (a V1 device has no
 * host_alloc), and the calls whose arguments changed, the step() of a V1
 * or V2 optimizer, go through _mixprec_plugin_compat_optimizer_step(). */
#pragma once

#include "mixprec.h"
#include "mixprec-plugin-abi.h"

G_BEGIN_DECLS

/* The most state slots an optimizer may declare: more is garbage read
 * through a wrong pointer, not an optimizer. */
#define _MIXPREC_PLUGIN_MAX_STATE_SLOTS 16

/* What a V1 optimizer's step() is. */
typedef int (*_MixprecOptimizerStepV1Func) (const MixprecOptimizerStepV1 *args,
                                            float                        *master,
                                            const void                   *grad,
                                            float *const                 *states,
                                            void                         *working,
                                            size_t                        n,
                                            char                         *errbuf,
                                            size_t                        errbuf_len);

/* What a V2 optimizer's step() is. */
typedef int (*_MixprecOptimizerStepV2Func) (const MixprecOptimizerStepV2 *args,
                                            float                        *master,
                                            const void                   *grad,
                                            void *const                  *states,
                                            void                         *working,
                                            size_t                        n,
                                            char                         *errbuf,
                                            size_t                        errbuf_len);

/* A registered vtable in the newest revision of its kind. Its strings and
 * arrays still point into the plugin: the feature copies them. */
typedef struct
{
  MixprecFeatureKind kind;
  guint revision;               /* the revision the plugin registered */
  /* Optimizers. A revision 1 or 2 optimizer's step is NULL here and its
   * own step() is step_v1 or step_v2 (called with its own arguments
   * through the shim). A revision 1 optimizer's state_dtype_mask is
   * float32 only; an older revision's state_format_mask holds the
   * formats its state_dtype_mask names (FLOAT32, BFLOAT16), its
   * master_format_mask FLOAT32 alone. */
  MixprecOptimizerV3 optimizer;
  _MixprecOptimizerStepV1Func step_v1;
  _MixprecOptimizerStepV2Func step_v2;
  /* Communicators: a revision 1 one's all_to_all is NULL. */
  MixprecCommV2 comm;
  MixprecDeviceV3 device;
} _MixprecVTable;

/* One row of the registration table: a register_* entry of the host table
 * and the struct it takes. */
typedef struct _MixprecRegistration _MixprecRegistration;

/* Checks @registered (a struct of @registration's kind and revision) and
 * upgrades it into @out; FALSE with @error (MIXPREC_PLUGIN_ERROR_BAD_FEATURE)
 * naming the feature and the rule it breaks. */
gboolean  _mixprec_plugin_compat_upgrade        (const _MixprecRegistration *registration,
                                                 gconstpointer               registered,
                                                 _MixprecVTable             *out,
                                                 GError                    **error);
/* The register_* entry's name, e.g. "register_device_v2". */
const gchar *_mixprec_registration_get_function (const _MixprecRegistration *registration);

/* Sets every register_* entry of @host: each passes its struct, with its
 * row of the table, to _mixprec_plugin_host_register() (the loader's). */
void      _mixprec_plugin_compat_fill_host      (MixprecPluginHostV1 *host);
int       _mixprec_plugin_host_register         (MixprecPluginHostV1        *host,
                                                 const _MixprecRegistration *registration,
                                                 gconstpointer               registered,
                                                 char                       *errbuf,
                                                 size_t                      errbuf_len);

/* Calls an upgraded optimizer's step(): a revision 3 one as it is; a
 * revision 2 one (@step_v2) with &args->v2, its struct_size its own; a
 * revision 1 one (@step_v1) with &args->v2.base, its struct_size its own,
 * and @states as float arrays. The caller has checked that an older
 * revision gets only the representations it knows (FLOAT32 / BFLOAT16
 * slots named in args->v2.state_dtypes, a FLOAT32 master). */
int       _mixprec_plugin_compat_optimizer_step (const MixprecOptimizerV3    *optimizer,
                                                 _MixprecOptimizerStepV1Func  step_v1,
                                                 _MixprecOptimizerStepV2Func  step_v2,
                                                 const MixprecOptimizerStepV3 *args,
                                                 float                       *master,
                                                 const void                  *grad,
                                                 void *const                 *states,
                                                 void                        *working,
                                                 size_t                       n,
                                                 char                        *errbuf,
                                                 size_t                       errbuf_len);

/* ---- the checks (mixprec-feature.c), on the newest structs */

/* An optimizer: names, step, hyper-parameter schema, state names, reserved
 * space, state_dtype_mask, and the masks of revision 3 (formats known,
 * FLOAT32 among them, signed bits within the slots). @has_step: whether
 * it has a step() of any revision. */
gboolean  _mixprec_optimizer_check              (const MixprecOptimizerV3 *vtable,
                                                 gboolean                  has_step,
                                                 GError                  **error);
/* A device registered as @revision: the functions of every revision up to
 * it, and the reserved space of each. */
gboolean  _mixprec_device_check                 (const MixprecDeviceV3 *vtable,
                                                 guint                  revision,
                                                 GError               **error);
/* A communicator registered as @revision: name, device, the functions of
 * every revision up to it, dtype_mask, the reserved space of each. */
gboolean  _mixprec_comm_check                   (const MixprecCommV2 *vtable,
                                                 guint                revision,
                                                 GError             **error);

/* A feature holding a copy of an upgraded vtable. */
MixprecFeature *_mixprec_feature_new            (const _MixprecVTable *vtable,
                                                 MixprecPlugin        *plugin);

G_END_DECLS
