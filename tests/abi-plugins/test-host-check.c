/* test-host-check.c — a plugin that reports the host table the library
 * hands to init(): its struct_size and ABI version go into the description
 * of the optimizer it registers, where tests/test-abi.c reads them back.
 *
 * It reads the host the way every plugin must: only fields that lie inside
 * host->struct_size, so that a plugin built against an older, shorter
 * revision of MixprecPluginHostV1 keeps working with a newer library. */
#include <stdio.h>

#include <mixprec/mixprec-plugin.h>

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_host_check_get_desc (void);

static char seen[160];

static int
hostcheck_step (const MixprecOptimizerStepV1 *args,
                float                        *master,
                const void                   *grad,
                float *const                 *states,
                void                         *working,
                size_t                        n,
                char                         *errbuf,
                size_t                        errbuf_len)
{
  snprintf (errbuf, errbuf_len, "hostcheck only reports the host table");
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static MixprecOptimizerV1 hostcheck = {
  .name = "hostcheck",
  .device = "cpu",
  .rank = 1,
  .description = seen,
  .step = hostcheck_step,
};

static int
host_check_init (MixprecPluginHostV1 *host,
                 char                *errbuf,
                 size_t               errbuf_len)
{
  size_t needed = offsetof (MixprecPluginHostV1, register_optimizer) + sizeof host->register_optimizer;

  if (host->struct_size < needed || host->register_optimizer == NULL)
    {
      snprintf (errbuf, errbuf_len,
                "the host table is %zu bytes; register_optimizer needs at least %zu",
                host->struct_size, needed);
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  snprintf (seen, sizeof seen, "struct_size=%zu abi=%u.%u",
            host->struct_size, host->abi_major, host->abi_minor);
  return host->register_optimizer (host, &hostcheck, errbuf, errbuf_len);
}

static const MixprecPluginDesc desc = {
  .abi_major = MIXPREC_PLUGIN_ABI_VERSION_MAJOR,
  .abi_minor = MIXPREC_PLUGIN_ABI_VERSION_MINOR,
  .name = "test-host-check",
  .description = "reports the host table it was given",
  .version = "1.0",
  .license = "LGPL-2.1-or-later",
  .init = host_check_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_host_check_get_desc (void)
{
  return &desc;
}
