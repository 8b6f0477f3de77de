/* mixprec-builtin.c — the plugin "builtin": the features compiled into
 * libmixprec, described and registered exactly like a plugin file's, so
 * the registry, mixprec-inspect and the look-ups treat them alike. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-comm-private.h"
#include "mixprec-registry-private.h"

static int
builtin_init (MixprecPluginHostV1 *host,
              char                *errbuf,
              size_t               errbuf_len)
{
  return host->register_comm_v2 (host, _mixprec_comm_local_get_vtable (), errbuf, errbuf_len);
}

static const MixprecPluginDesc builtin_desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = _MIXPREC_BUILTIN_PLUGIN_NAME,
  .description = "features compiled into libmixprec",
  .version = PACKAGE_VERSION,
  .license = "LGPL-2.1-or-later",
  .origin = "libmixprec",
  .init = builtin_init,
};

const MixprecPluginDesc *
_mixprec_builtin_get_desc (void)
{
  return &builtin_desc;
}
