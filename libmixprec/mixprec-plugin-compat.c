/* mixprec-plugin-compat.c — the plugin ABI's older revisions upgraded to
 * the newest struct of each kind: the registration table behind the host
 * table's register_* entries, and the one shim a call needs (the step()
 * of a revision 1 or 2 optimizer). NCCL keeps its net-plugin shims the
 * same way, one upgrade per old revision, so that nothing past this file
 * sees an old struct. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-plugin-compat-private.h"
#include "mixprec-registry-private.h"

/* Fills @out (zeroed, its kind and revision set) from @registered, a
 * struct of @registration's, and checks it. */
typedef gboolean (*UpgradeFunc) (const _MixprecRegistration *registration,
                                 gconstpointer               registered,
                                 _MixprecVTable             *out,
                                 GError                    **error);

struct _MixprecRegistration
{
  MixprecFeatureKind kind;
  guint revision;
  gsize struct_size;            /* of the struct the plugin registers */
  const gchar *function;        /* its entry in the host table */
  UpgradeFunc upgrade;
};

/* ------------------------------------------------------------ upgrades */

/* What an optimizer of revision 1 or 2 can be asked for in revision 3's
 * terms: the formats its state_dtype_mask names (float32, bfloat16) and a
 * float32 master. */
static void
formats_from_dtypes (MixprecOptimizerV3 *optimizer)
{
  optimizer->state_format_mask = 1u << MIXPREC_PLUGIN_STATE_FLOAT32;
  if (optimizer->state_dtype_mask & (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16))
    optimizer->state_format_mask |= 1u << MIXPREC_PLUGIN_STATE_BFLOAT16;
  optimizer->master_format_mask = 1u << MIXPREC_PLUGIN_MASTER_FLOAT32;
  optimizer->state_signed_mask = 0;
}

/* The fields revisions 1 and 2 share with revision 3, given one by one
 * since their structs differ: the schema as it is, @state_dtype_mask and
 * the formats it allows, and the reserved words (as many in every
 * revision, which the callers assert). */
static void
upgrade_schema (MixprecOptimizerV3        *optimizer,
                const char                *name,
                const char                *device,
                unsigned                   rank,
                const char                *description,
                const MixprecHParamSpecV1 *hparams,
                unsigned                   n_hparams,
                unsigned                   n_state_slots,
                const char *const         *state_names,
                unsigned                   state_dtype_mask,
                void *const               *reserved)
{
  optimizer->name = name;
  optimizer->device = device;
  optimizer->rank = rank;
  optimizer->description = description;
  optimizer->hparams = hparams;
  optimizer->n_hparams = n_hparams;
  optimizer->n_state_slots = n_state_slots;
  optimizer->state_names = state_names;
  optimizer->state_dtype_mask = state_dtype_mask;
  formats_from_dtypes (optimizer);
  /* Revisions 1 and 2 measure nothing. Their first reserved word is
   * where revision 3 keeps numerics_master_mask: one that is not zero
   * becomes a mask that _mixprec_optimizer_check() refuses, as the
   * reserved words' own check refuses the rest. */
  optimizer->numerics_master_mask = reserved[0] != NULL ? ~(uintptr_t) 0 : 0;
  memcpy (optimizer->reserved, reserved + 1, sizeof optimizer->reserved);
}

/* V1 -> V3: the same schema; state in float32 only; the step kept apart,
 * since its arguments differ (see _mixprec_plugin_compat_optimizer_step). */
static gboolean
upgrade_optimizer_v1 (const _MixprecRegistration *registration,
                      gconstpointer               registered,
                      _MixprecVTable             *out,
                      GError                    **error)
{
  const MixprecOptimizerV1 *v1 = registered;

  G_STATIC_ASSERT (sizeof v1->reserved == sizeof out->optimizer.reserved + sizeof (gpointer));

  upgrade_schema (&out->optimizer, v1->name, v1->device, v1->rank, v1->description, v1->hparams,
                  v1->n_hparams, v1->n_state_slots, v1->state_names,
                  1u << MIXPREC_PLUGIN_DTYPE_FLOAT32, v1->reserved);
  out->step_v1 = v1->step;
  return _mixprec_optimizer_check (&out->optimizer, v1->step != NULL, error);
}

/* V2 -> V3: the same schema and dtypes; the step kept apart. */
static gboolean
upgrade_optimizer_v2 (const _MixprecRegistration *registration,
                      gconstpointer               registered,
                      _MixprecVTable             *out,
                      GError                    **error)
{
  const MixprecOptimizerV2 *v2 = registered;

  G_STATIC_ASSERT (sizeof v2->reserved == sizeof out->optimizer.reserved + sizeof (gpointer));

  upgrade_schema (&out->optimizer, v2->name, v2->device, v2->rank, v2->description, v2->hparams,
                  v2->n_hparams, v2->n_state_slots, v2->state_names, v2->state_dtype_mask,
                  v2->reserved);
  out->step_v2 = v2->step;
  return _mixprec_optimizer_check (&out->optimizer, v2->step != NULL, error);
}

static gboolean
upgrade_optimizer_v3 (const _MixprecRegistration *registration,
                      gconstpointer               registered,
                      _MixprecVTable             *out,
                      GError                    **error)
{
  out->optimizer = *(const MixprecOptimizerV3 *) registered;
  return _mixprec_optimizer_check (&out->optimizer, out->optimizer.step != NULL, error);
}

/* Revision 2 begins with the whole revision 1, as the devices do: a V1
 * communicator upgrades to its bytes followed by zeros, so its
 * all_to_all is NULL and the engine refuses what needs one. */
static gboolean
upgrade_comm (const _MixprecRegistration *registration,
              gconstpointer               registered,
              _MixprecVTable             *out,
              GError                    **error)
{
  G_STATIC_ASSERT (G_STRUCT_OFFSET (MixprecCommV2, base) == 0);
  g_assert (registration->struct_size <= sizeof out->comm);

  memcpy (&out->comm, registered, registration->struct_size);
  return _mixprec_comm_check (&out->comm, registration->revision, error);
}

/* Each device revision begins with the whole previous one, so the upgrade
 * is the registered bytes followed by zeros: the functions a revision
 * lacks are NULL, and its reserved space is zero. */
static gboolean
upgrade_device (const _MixprecRegistration *registration,
                gconstpointer               registered,
                _MixprecVTable             *out,
                GError                    **error)
{
  G_STATIC_ASSERT (G_STRUCT_OFFSET (MixprecDeviceV3, base) == 0);
  G_STATIC_ASSERT (G_STRUCT_OFFSET (MixprecDeviceV2, base) == 0);
  g_assert (registration->struct_size <= sizeof out->device);

  memcpy (&out->device, registered, registration->struct_size);
  return _mixprec_device_check (&out->device, registration->revision, error);
}

/* The table: one row per register_* entry of MixprecPluginHostV1, with
 * the struct it takes, the kind and revision that struct is, how it is
 * upgraded, and the check of that revision alone (what a plugin of it
 * would be told, for the tests of each rule). A new revision is a row
 * here and an upgrade function above; nothing else in the library
 * changes. */
#define REGISTRATIONS(ROW) \
  ROW (register_optimizer, MixprecOptimizerV1, OPTIMIZER, 1, upgrade_optimizer_v1, \
       _mixprec_optimizer_vtable_check) \
  ROW (register_optimizer_v2, MixprecOptimizerV2, OPTIMIZER, 2, upgrade_optimizer_v2, \
       _mixprec_optimizer_v2_vtable_check) \
  ROW (register_optimizer_v3, MixprecOptimizerV3, OPTIMIZER, 3, upgrade_optimizer_v3, \
       _mixprec_optimizer_v3_vtable_check) \
  ROW (register_comm, MixprecCommV1, COMM, 1, upgrade_comm, \
       _mixprec_comm_vtable_check) \
  ROW (register_comm_v2, MixprecCommV2, COMM, 2, upgrade_comm, \
       _mixprec_comm_v2_vtable_check) \
  ROW (register_device, MixprecDeviceV1, DEVICE, 1, upgrade_device, \
       _mixprec_device_vtable_check) \
  ROW (register_device_v2, MixprecDeviceV2, DEVICE, 2, upgrade_device, \
       _mixprec_device_v2_vtable_check) \
  ROW (register_device_v3, MixprecDeviceV3, DEVICE, 3, upgrade_device, \
       _mixprec_device_v3_vtable_check)

#define ROW_INDEX(entry, type, kind, revision, upgrade, check) ROW_##entry,
enum { REGISTRATIONS (ROW_INDEX) N_REGISTRATIONS };
#undef ROW_INDEX

/* What "the optimizer vtable is NULL" calls each kind. */
static const gchar *const kind_words[] = {
  [MIXPREC_FEATURE_KIND_OPTIMIZER] = "optimizer",
  [MIXPREC_FEATURE_KIND_COMM] = "comm",
  [MIXPREC_FEATURE_KIND_DEVICE] = "device",
};

#define ROW_DATA(entry, type, kind, revision, upgrade, check) \
  [ROW_##entry] = { MIXPREC_FEATURE_KIND_##kind, revision, sizeof (type), #entry, upgrade },
static const _MixprecRegistration registrations[N_REGISTRATIONS] = { REGISTRATIONS (ROW_DATA) };
#undef ROW_DATA

gboolean
_mixprec_plugin_compat_upgrade (const _MixprecRegistration *registration,
                                gconstpointer               registered,
                                _MixprecVTable             *out,
                                GError                    **error)
{
  memset (out, 0, sizeof *out);
  out->kind = registration->kind;
  out->revision = registration->revision;
  if (registered == NULL)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
                   "the %s vtable is NULL", kind_words[registration->kind]);
      return FALSE;
    }
  return registration->upgrade (registration, registered, out, error);
}

const gchar *
_mixprec_registration_get_function (const _MixprecRegistration *registration)
{
  return registration->function;
}

/* ------------------------------------------------------------ the host table */

/* The host table's entries, typed as the ABI declares them, each passing
 * its struct on with its row. */
#define ROW_HOST_ENTRY(entry, type, kind, revision, upgrade, check) \
  static int \
  host_##entry (MixprecPluginHostV1 *host, const type *vtable, char *errbuf, size_t errbuf_len) \
  { \
    return _mixprec_plugin_host_register (host, &registrations[ROW_##entry], vtable, \
                                          errbuf, errbuf_len); \
  }
REGISTRATIONS (ROW_HOST_ENTRY)
#undef ROW_HOST_ENTRY

void
_mixprec_plugin_compat_fill_host (MixprecPluginHostV1 *host)
{
#define ROW_FILL(entry, type, kind, revision, upgrade, check) host->entry = host_##entry;
  REGISTRATIONS (ROW_FILL)
#undef ROW_FILL
}

/* The check of each revision alone: the upgrade, whose result is dropped. */
#define ROW_CHECK(entry, type, kind, revision, upgrade, check) \
  gboolean \
  check (const type *vtable, GError **error) \
  { \
    _MixprecVTable upgraded; \
    return _mixprec_plugin_compat_upgrade (&registrations[ROW_##entry], vtable, &upgraded, error); \
  }
REGISTRATIONS (ROW_CHECK)
#undef ROW_CHECK

/* ------------------------------------------------------------ calls */

int
_mixprec_plugin_compat_optimizer_step (const MixprecOptimizerV3     *optimizer,
                                       _MixprecOptimizerStepV1Func   step_v1,
                                       _MixprecOptimizerStepV2Func   step_v2,
                                       const MixprecOptimizerStepV3 *args,
                                       float                        *master,
                                       const void                   *grad,
                                       void *const                  *states,
                                       void                         *working,
                                       size_t                        n,
                                       char                         *errbuf,
                                       size_t                        errbuf_len)
{
  MixprecOptimizerStepV2 v2;
  MixprecOptimizerStepV1 base;
  float *v1_states[_MIXPREC_PLUGIN_MAX_STATE_SLOTS];

  if (step_v1 == NULL && step_v2 == NULL)
    return optimizer->step (args, master, grad, states, working, n, errbuf, errbuf_len);

  if (step_v2 != NULL)
    {
      /* V2: the leading V2 block, with its own size. */
      v2 = args->v2;
      v2.base.struct_size = sizeof v2;
      return step_v2 (&v2, master, grad, states, working, n, errbuf, errbuf_len);
    }

  /* V1: the leading V1 block, with its own size, and FP32 state. */
  g_assert (optimizer->n_state_slots <= _MIXPREC_PLUGIN_MAX_STATE_SLOTS);
  base = args->v2.base;
  base.struct_size = sizeof base;
  for (guint k = 0; k < optimizer->n_state_slots; k++)
    v1_states[k] = states != NULL ? states[k] : NULL;
  return step_v1 (&base, master, grad, states != NULL ? v1_states : NULL, working, n,
                  errbuf, errbuf_len);
}
