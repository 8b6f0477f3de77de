/* test-bad-comm.c — a plugin that registers a communicator without a wait
 * function; the registry refuses it, and with it the whole plugin. */
#include <mixprec/mixprec-plugin-abi.h>

static int
any_init (const MixprecCommInitV1 *args,
          void                   **comm,
          char                    *errbuf,
          size_t                   errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
any_all_reduce (void                 *comm,
                const void           *send,
                void                 *recv,
                size_t                count,
                MixprecPluginDType    dtype,
                MixprecPluginReduceOp op,
                unsigned              flags,
                void                **request,
                char                 *errbuf,
                size_t                errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
any_all_gather (void              *comm,
                const void        *send,
                void              *recv,
                size_t             count,
                MixprecPluginDType dtype,
                void             **request,
                char              *errbuf,
                size_t             errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
any_broadcast (void              *comm,
               void              *buf,
               size_t             count,
               MixprecPluginDType dtype,
               unsigned           root,
               void             **request,
               char              *errbuf,
               size_t             errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
any_barrier (void   *comm,
             void  **request,
             char   *errbuf,
             size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
any_test (void   *comm,
          void   *request,
          int    *done,
          char   *errbuf,
          size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static void
any_abort (void *comm)
{
}

static int
any_finalize (void   *comm,
              char   *errbuf,
              size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecCommV1 badcomm = {
  .name = "badcomm",
  .device = "cpu",
  .rank = 1,
  .dtype_mask = 1u << MIXPREC_PLUGIN_DTYPE_FLOAT32,
  .init = any_init,
  .all_reduce = any_all_reduce,
  .reduce_scatter = any_all_reduce,
  .all_gather = any_all_gather,
  .broadcast = any_broadcast,
  .barrier = any_barrier,
  .test = any_test,
  .wait = NULL,
  .abort = any_abort,
  .finalize = any_finalize,
};

static int
bad_comm_init (MixprecPluginHostV1 *host,
               char                *errbuf,
               size_t               errbuf_len)
{
  /* Claims success whatever the host says: the refusal must still stick. */
  host->register_comm (host, &badcomm, errbuf, errbuf_len);
  return MIXPREC_PLUGIN_OK;
}

MIXPREC_PLUGIN_DEFINE (test_bad_comm, "test-bad-comm", NULL,
                       bad_comm_init, NULL, NULL, NULL)
