/* mixprec-plugin-compat.c — the plugin ABI's older revisions upgraded to
 * the newest struct of each kind: the registration table behind the host
 * table's register_* entries, and the one shim a call needs (a revision 1
 * optimizer's step()). NCCL keeps its net-plugin shims the same way, one
 * upgrade per old revision, so that nothing past this file sees an old
 * struct. */
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
  const gchar *what;            /* "optimizer": for "the optimizer vtable is NULL" */
  UpgradeFunc upgrade;
};

/* ------------------------------------------------------------ upgrades */

/* V1 -> V2: the same schema; state in float32 only; the step kept apart,
 * since its arguments differ (see _mixprec_plugin_compat_optimizer_step). */
static gboolean
upgrade_optimizer_v1 (const _MixprecRegistration *registration,
                      gconstpointer               registered,
                      _MixprecVTable             *out,
                      GError                    **error)
{
  const MixprecOptimizerV1 *v1 = registered;

  G_STATIC_ASSERT (sizeof v1->reserved == sizeof out->optimizer.reserved);

  out->optimizer.name = v1->name;
  out->optimizer.device = v1->device;
  out->optimizer.rank = v1->rank;
  out->optimizer.description = v1->description;
  out->optimizer.hparams = v1->hparams;
  out->optimizer.n_hparams = v1->n_hparams;
  out->optimizer.n_state_slots = v1->n_state_slots;
  out->optimizer.state_names = v1->state_names;
  out->optimizer.state_dtype_mask = 1u << MIXPREC_PLUGIN_DTYPE_FLOAT32;
  memcpy (out->optimizer.reserved, v1->reserved, sizeof v1->reserved);
  out->step_v1 = v1->step;
  return _mixprec_optimizer_check (&out->optimizer, v1->step != NULL, error);
}

static gboolean
upgrade_optimizer_v2 (const _MixprecRegistration *registration,
                      gconstpointer               registered,
                      _MixprecVTable             *out,
                      GError                    **error)
{
  out->optimizer = *(const MixprecOptimizerV2 *) registered;
  return _mixprec_optimizer_check (&out->optimizer, out->optimizer.step != NULL, error);
}

static gboolean
upgrade_comm_v1 (const _MixprecRegistration *registration,
                 gconstpointer               registered,
                 _MixprecVTable             *out,
                 GError                    **error)
{
  out->comm = *(const MixprecCommV1 *) registered;
  return _mixprec_comm_check (&out->comm, error);
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

/* The register_* entries of MixprecPluginHostV1, in the table's order. */
enum
{
  REGISTER_OPTIMIZER,
  REGISTER_OPTIMIZER_V2,
  REGISTER_COMM,
  REGISTER_DEVICE,
  REGISTER_DEVICE_V2,
  REGISTER_DEVICE_V3,
};

#define OPTIMIZER MIXPREC_FEATURE_KIND_OPTIMIZER
#define COMM MIXPREC_FEATURE_KIND_COMM
#define DEVICE MIXPREC_FEATURE_KIND_DEVICE

static const _MixprecRegistration registrations[] = {
  [REGISTER_OPTIMIZER] =
    { OPTIMIZER, 1, sizeof (MixprecOptimizerV1), "register_optimizer", "optimizer", upgrade_optimizer_v1 },
  [REGISTER_OPTIMIZER_V2] =
    { OPTIMIZER, 2, sizeof (MixprecOptimizerV2), "register_optimizer_v2", "optimizer", upgrade_optimizer_v2 },
  [REGISTER_COMM] =
    { COMM, 1, sizeof (MixprecCommV1), "register_comm", "comm", upgrade_comm_v1 },
  [REGISTER_DEVICE] =
    { DEVICE, 1, sizeof (MixprecDeviceV1), "register_device", "device", upgrade_device },
  [REGISTER_DEVICE_V2] =
    { DEVICE, 2, sizeof (MixprecDeviceV2), "register_device_v2", "device", upgrade_device },
  [REGISTER_DEVICE_V3] =
    { DEVICE, 3, sizeof (MixprecDeviceV3), "register_device_v3", "device", upgrade_device },
};

#undef OPTIMIZER
#undef COMM
#undef DEVICE

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
                   "the %s vtable is NULL", registration->what);
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

/* An entry of the host table: its struct type, and its row. */
#define HOST_ENTRY(func, type, row) \
  static int \
  func (MixprecPluginHostV1 *host, const type *vtable, char *errbuf, size_t errbuf_len) \
  { \
    return _mixprec_plugin_host_register (host, &registrations[row], vtable, errbuf, errbuf_len); \
  }

HOST_ENTRY (host_register_optimizer, MixprecOptimizerV1, REGISTER_OPTIMIZER)
HOST_ENTRY (host_register_optimizer_v2, MixprecOptimizerV2, REGISTER_OPTIMIZER_V2)
HOST_ENTRY (host_register_comm, MixprecCommV1, REGISTER_COMM)
HOST_ENTRY (host_register_device, MixprecDeviceV1, REGISTER_DEVICE)
HOST_ENTRY (host_register_device_v2, MixprecDeviceV2, REGISTER_DEVICE_V2)
HOST_ENTRY (host_register_device_v3, MixprecDeviceV3, REGISTER_DEVICE_V3)

void
_mixprec_plugin_compat_fill_host (MixprecPluginHostV1 *host)
{
  host->register_optimizer = host_register_optimizer;
  host->register_optimizer_v2 = host_register_optimizer_v2;
  host->register_comm = host_register_comm;
  host->register_device = host_register_device;
  host->register_device_v2 = host_register_device_v2;
  host->register_device_v3 = host_register_device_v3;
}

/* ------------------------------------------------------------ checks of one revision
 *
 * What a plugin of that revision would be told at registration, for the
 * tests of each rule. */

#define REVISION_CHECK(func, type, row) \
  gboolean \
  func (const type *vtable, GError **error) \
  { \
    _MixprecVTable upgraded; \
    return _mixprec_plugin_compat_upgrade (&registrations[row], vtable, &upgraded, error); \
  }

REVISION_CHECK (_mixprec_optimizer_vtable_check, MixprecOptimizerV1, REGISTER_OPTIMIZER)
REVISION_CHECK (_mixprec_optimizer_v2_vtable_check, MixprecOptimizerV2, REGISTER_OPTIMIZER_V2)
REVISION_CHECK (_mixprec_comm_vtable_check, MixprecCommV1, REGISTER_COMM)
REVISION_CHECK (_mixprec_device_vtable_check, MixprecDeviceV1, REGISTER_DEVICE)
REVISION_CHECK (_mixprec_device_v2_vtable_check, MixprecDeviceV2, REGISTER_DEVICE_V2)
REVISION_CHECK (_mixprec_device_v3_vtable_check, MixprecDeviceV3, REGISTER_DEVICE_V3)

/* ------------------------------------------------------------ calls */

int
_mixprec_plugin_compat_optimizer_step (const MixprecOptimizerV2     *optimizer,
                                       _MixprecOptimizerStepV1Func   step_v1,
                                       const MixprecOptimizerStepV2 *args,
                                       float                        *master,
                                       const void                   *grad,
                                       void *const                  *states,
                                       void                         *working,
                                       size_t                        n,
                                       char                         *errbuf,
                                       size_t                        errbuf_len)
{
  MixprecOptimizerStepV1 base;
  float *v1_states[_MIXPREC_PLUGIN_MAX_STATE_SLOTS];

  if (step_v1 == NULL)
    return optimizer->step (args, master, grad, states, working, n, errbuf, errbuf_len);

  /* V1: the leading V1 block, with its own size, and FP32 state. */
  g_assert (optimizer->n_state_slots <= _MIXPREC_PLUGIN_MAX_STATE_SLOTS);
  base = args->base;
  base.struct_size = sizeof base;
  for (guint k = 0; k < optimizer->n_state_slots; k++)
    v1_states[k] = states != NULL ? states[k] : NULL;
  return step_v1 (&base, master, grad, states != NULL ? v1_states : NULL, working, n,
                  errbuf, errbuf_len);
}
