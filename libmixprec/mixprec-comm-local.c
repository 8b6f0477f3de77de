/* mixprec-comm-local.c — the communicator "local": a world of one process.
 * Every collective is a copy (ACCUMULATE folds recv and the data in FP32
 * and rounds once, as the comm ABI's contract says), and a request is
 * complete the moment it is started. It lets the engine run the same
 * pipeline with and without other ranks. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-comm-private.h"
#include "mixprec-plugin-fail-private.h"
#include "mixprec-comm-reduce-private.h"

#define LOCAL_DTYPE_MASK ((1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | \
                          (1u << MIXPREC_PLUGIN_DTYPE_FLOAT16) | \
                          (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16))

typedef struct
{
  gint aborted;                 /* atomic: abort() may come from another thread */
} LocalComm;

/* What a started operation hands back: it is already complete. */
static const char local_request_done = 0;


/* Common checks of every collective, and the request of a started one. */
static int
local_begin (LocalComm          *comm,
             MixprecPluginDType  dtype,
             void              **request,
             char               *errbuf,
             size_t              errbuf_len)
{
  if (g_atomic_int_get (&comm->aborted))
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_RUNTIME,
                 "the communicator was aborted");
  if ((unsigned) dtype >= 32 || !(LOCAL_DTYPE_MASK & (1u << dtype)))
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                 "the local communicator does not reduce dtype %d", (int) dtype);
  if (request != NULL)
    *request = (void *) &local_request_done;
  return MIXPREC_PLUGIN_OK;
}

static int
local_init (const MixprecCommInitV1 *args,
            void                   **comm,
            char                    *errbuf,
            size_t                   errbuf_len)
{
  if (args == NULL || args->struct_size < G_STRUCT_OFFSET (MixprecCommInitV1, device_stream) ||
      args->bootstrap == NULL)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                 "init() needs its arguments and a bootstrap");
  if (args->bootstrap->world_size != 1)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_UNSUPPORTED,
                 "the local communicator serves a world of one process, but this world "
                 "has %u ranks; use a multi-process backend such as 'ucx'",
                 args->bootstrap->world_size);
  *comm = g_new0 (LocalComm, 1);
  return MIXPREC_PLUGIN_OK;
}

/* recv = send, or recv = recv op send with ACCUMULATE: one rank's
 * reduction, with the same fold as every other communicator. */
static void
local_reduce (const void           *send,
              void                 *recv,
              size_t                count,
              MixprecPluginDType    dtype,
              MixprecPluginReduceOp op,
              unsigned              flags)
{
  const void *terms[1] = { send };
  MixprecPluginDType out_dtype = (flags & MIXPREC_PLUGIN_COMM_RECV_FP32)
    ? MIXPREC_PLUGIN_DTYPE_FLOAT32 : dtype;

  if (flags & MIXPREC_PLUGIN_COMM_ACCUMULATE)
    _mixprec_reduce_terms (recv, out_dtype, recv, terms, 1, count, dtype, op);
  else if (out_dtype != dtype)
    _mixprec_reduce_terms (recv, out_dtype, NULL, terms, 1, count, dtype, op);
  else if (send != recv)
    memmove (recv, send, count * _mixprec_reduce_dtype_size (dtype));
}

static int
local_all_reduce (void                 *comm,
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
  int status = local_begin (comm, dtype, request, errbuf, errbuf_len);

  if (status == MIXPREC_PLUGIN_OK)
    local_reduce (send, recv, count, dtype, op, flags);
  return status;
}

static int
local_reduce_scatter (void                 *comm,
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
  return local_all_reduce (comm, send, recv, count, dtype, op, flags, request,
                           errbuf, errbuf_len);
}

static int
local_all_gather (void              *comm,
                  const void        *send,
                  void              *recv,
                  size_t             count,
                  MixprecPluginDType dtype,
                  void             **request,
                  char              *errbuf,
                  size_t             errbuf_len)
{
  int status = local_begin (comm, dtype, request, errbuf, errbuf_len);

  if (status == MIXPREC_PLUGIN_OK && send != recv)
    memmove (recv, send, count * _mixprec_reduce_dtype_size (dtype));
  return status;
}

static int
local_broadcast (void              *comm,
                 void              *buf,
                 size_t             count,
                 MixprecPluginDType dtype,
                 unsigned           root,
                 void             **request,
                 char              *errbuf,
                 size_t             errbuf_len)
{
  if (root != 0)
    return _mixprec_plugin_fail (errbuf, errbuf_len, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT,
                 "broadcast root %u is not a rank of a world of one process", root);
  return local_begin (comm, dtype, request, errbuf, errbuf_len);
}

static int
local_barrier (void   *comm,
               void  **request,
               char   *errbuf,
               size_t  errbuf_len)
{
  return local_begin (comm, MIXPREC_PLUGIN_DTYPE_FLOAT32, request, errbuf, errbuf_len);
}

/* The one run of a world of one goes to this rank. */
static int
local_all_to_all (void       *comm,
                  const void *send,
                  void       *recv,
                  size_t      bytes,
                  void      **request,
                  char       *errbuf,
                  size_t      errbuf_len)
{
  int status = local_begin (comm, MIXPREC_PLUGIN_DTYPE_FLOAT32, request, errbuf, errbuf_len);

  if (status == MIXPREC_PLUGIN_OK && bytes > 0)
    memcpy (recv, send, bytes);
  return status;
}

static int
local_all_to_all_v (void         *comm,
                    const void   *send,
                    const size_t *send_bytes,
                    const size_t *send_offsets,
                    void         *recv,
                    const size_t *recv_bytes,
                    const size_t *recv_offsets,
                    void        **request,
                    char         *errbuf,
                    size_t        errbuf_len)
{
  int status = local_begin (comm, MIXPREC_PLUGIN_DTYPE_FLOAT32, request, errbuf, errbuf_len);

  if (status == MIXPREC_PLUGIN_OK && send_bytes[0] > 0)
    memcpy ((char *) recv + recv_offsets[0], (const char *) send + send_offsets[0], send_bytes[0]);
  return status;
}

static int
local_test (void   *comm,
            void   *request,
            int    *done,
            char   *errbuf,
            size_t  errbuf_len)
{
  *done = 1;
  return MIXPREC_PLUGIN_OK;
}

static int
local_wait (void   *comm,
            void   *request,
            char   *errbuf,
            size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static void
local_abort (void *comm)
{
  g_atomic_int_set (&((LocalComm *) comm)->aborted, 1);
}

static int
local_finalize (void   *comm,
                char   *errbuf,
                size_t  errbuf_len)
{
  g_free (comm);
  return MIXPREC_PLUGIN_OK;
}

static const MixprecCommV2 local_comm = {
  .base = {
    .name = "local",
    .device = "cpu",
    .rank = 0,
    .description = "a world of one process: collectives are copies",
    .dtype_mask = LOCAL_DTYPE_MASK,
    .init = local_init,
    .all_reduce = local_all_reduce,
    .reduce_scatter = local_reduce_scatter,
    .all_gather = local_all_gather,
    .broadcast = local_broadcast,
    .barrier = local_barrier,
    .test = local_test,
    .wait = local_wait,
    .abort = local_abort,
    .finalize = local_finalize,
  },
  .all_to_all = local_all_to_all,
  .all_to_all_v = local_all_to_all_v,
};

const MixprecCommV2 *
_mixprec_comm_local_get_vtable (void)
{
  return &local_comm;
}
