/* test-comm-v1.c — a communicator plugin built against the frozen ABI 1.0
 * header (mixprec-plugin-abi-1.0.h), not the library's: it registers a
 * MixprecCommV1 through register_comm, as every communicator released
 * before MixprecCommV2 does, and must keep loading and running, without
 * the all-to-all revision 2 added.
 *
 * "commv1" serves a world of one process: each collective copies send to
 * recv (a sum over one rank), a request is done when it starts. */
#include <stdlib.h>
#include <string.h>

#include "mixprec-plugin-abi-1.0.h"

MIXPREC_PLUGIN_EXPORT const MixprecPluginDesc *mixprec_plugin_test_comm_v1_get_desc (void);

static const char done_request = 0;

static int
finish (void **request)
{
  if (request != NULL)
    *request = (void *) &done_request;
  return MIXPREC_PLUGIN_OK;
}

static int
v1_init (const MixprecCommInitV1 *args, void **comm, char *errbuf, size_t errbuf_len)
{
  if (args->bootstrap->world_size != 1)
    return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
  *comm = malloc (1);
  return *comm != NULL ? MIXPREC_PLUGIN_OK : MIXPREC_PLUGIN_ERR_NO_MEMORY;
}

static int
v1_all_reduce (void *comm, const void *send, void *recv, size_t count, MixprecPluginDType dtype,
               MixprecPluginReduceOp op, unsigned flags, void **request, char *errbuf,
               size_t errbuf_len)
{
  if (send != recv && count > 0)
    memcpy (recv, send, count * sizeof (float));
  return finish (request);
}

static int
v1_reduce_scatter (void *comm, const void *send, void *recv, size_t count,
                   MixprecPluginDType dtype, MixprecPluginReduceOp op, unsigned flags,
                   void **request, char *errbuf, size_t errbuf_len)
{
  return v1_all_reduce (comm, send, recv, count, dtype, op, flags, request, errbuf, errbuf_len);
}

static int
v1_all_gather (void *comm, const void *send, void *recv, size_t count, MixprecPluginDType dtype,
               void **request, char *errbuf, size_t errbuf_len)
{
  return v1_all_reduce (comm, send, recv, count, dtype, MIXPREC_PLUGIN_REDUCE_SUM, 0, request,
                        errbuf, errbuf_len);
}

static int
v1_broadcast (void *comm, void *buf, size_t count, MixprecPluginDType dtype, unsigned root,
              void **request, char *errbuf, size_t errbuf_len)
{
  return finish (request);
}

static int
v1_barrier (void *comm, void **request, char *errbuf, size_t errbuf_len)
{
  return finish (request);
}

static int
v1_test (void *comm, void *request, int *done, char *errbuf, size_t errbuf_len)
{
  *done = 1;
  return MIXPREC_PLUGIN_OK;
}

static int
v1_wait (void *comm, void *request, char *errbuf, size_t errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static void
v1_abort (void *comm)
{
}

static int
v1_finalize (void *comm, char *errbuf, size_t errbuf_len)
{
  free (comm);
  return MIXPREC_PLUGIN_OK;
}

static const MixprecCommV1 commv1 = {
  .name = "commv1",
  .device = "cpu",
  .rank = 0,
  .description = "a communicator of plugin ABI 1.0 for a world of one process",
  .dtype_mask = 1u << MIXPREC_PLUGIN_DTYPE_FLOAT32,
  .init = v1_init,
  .all_reduce = v1_all_reduce,
  .reduce_scatter = v1_reduce_scatter,
  .all_gather = v1_all_gather,
  .broadcast = v1_broadcast,
  .barrier = v1_barrier,
  .test = v1_test,
  .wait = v1_wait,
  .abort = v1_abort,
  .finalize = v1_finalize,
};

static int
comm_v1_init (MixprecPluginHostV1 *host, char *errbuf, size_t errbuf_len)
{
  return host->register_comm (host, &commv1, errbuf, errbuf_len);
}

static const MixprecPluginDesc desc = {
  .abi_major = 1,
  .abi_minor = 0,
  .name = "test-comm-v1",
  .description = "a communicator built against plugin ABI 1.0",
  .version = "1.0",
  .license = "LGPL-2.1-or-later",
  .origin = "libmixprec tests",
  .init = comm_v1_init,
};

const MixprecPluginDesc *
mixprec_plugin_test_comm_v1_get_desc (void)
{
  return &desc;
}
