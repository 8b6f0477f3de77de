/* test-comm.c — a valid test plugin with one communicator, "testcomm" (cpu,
 * rank 1, float32 only), for a world of one process. Its collectives copy,
 * except that some element counts make it fail the way a real transport
 * would, so tests/test-comm.c can check how MixprecComm reports plugin
 * failures: 13 elements time out, 17 report a failed peer, and a started
 * operation of 19 elements fails only when it is waited for. It registers
 * revision 1 of the comm ABI (no all-to-all). With MIXPREC_TEST_COMM_ANY_WORLD
 * set it also serves a larger world, still copying (its sums are wrong
 * there), for tests of what refuses a revision 1 communicator. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixprec/mixprec-plugin-abi.h>

#define COUNT_TIMEOUT 13
#define COUNT_PEER_FAILED 17
#define COUNT_LATE_FAILURE 19

typedef struct
{
  int status;
  int polls_left;               /* test() calls before it is done */
} TestRequest;

static int
testcomm_init (const MixprecCommInitV1 *args,
               void                   **comm,
               char                    *errbuf,
               size_t                   errbuf_len)
{
  if (args->bootstrap->world_size != 1 && getenv ("MIXPREC_TEST_COMM_ANY_WORLD") == NULL)
    {
      snprintf (errbuf, errbuf_len, "testcomm serves one process, not %u",
                args->bootstrap->world_size);
      return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
    }
  *comm = calloc (1, sizeof (int));
  return *comm != NULL ? MIXPREC_PLUGIN_OK : MIXPREC_PLUGIN_ERR_NO_MEMORY;
}

/* The outcome for @count elements: now (the return value) or at wait(). */
static int
outcome (size_t   count,
         void   **request,
         char    *errbuf,
         size_t   errbuf_len)
{
  int late = MIXPREC_PLUGIN_OK;

  if (count == COUNT_TIMEOUT)
    {
      snprintf (errbuf, errbuf_len, "rank 1 has not answered for 5 ms (testcomm)");
      return MIXPREC_PLUGIN_ERR_TIMEOUT;
    }
  if (count == COUNT_PEER_FAILED)
    {
      snprintf (errbuf, errbuf_len, "rank 1 exited (testcomm)");
      return MIXPREC_PLUGIN_ERR_PEER_FAILED;
    }
  if (count == COUNT_LATE_FAILURE)
    {
      if (request == NULL)
        {
          snprintf (errbuf, errbuf_len, "the late failure of testcomm");
          return MIXPREC_PLUGIN_ERR_RUNTIME;
        }
      late = MIXPREC_PLUGIN_ERR_RUNTIME;
    }
  if (request != NULL)
    {
      TestRequest *r = calloc (1, sizeof *r);

      if (r == NULL)
        return MIXPREC_PLUGIN_ERR_NO_MEMORY;
      r->status = late;
      r->polls_left = 2;
      *request = r;
    }
  return MIXPREC_PLUGIN_OK;
}

static int
testcomm_all_reduce (void                 *comm,
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
  int status = outcome (count, request, errbuf, errbuf_len);

  if (status == MIXPREC_PLUGIN_OK && send != recv)
    memmove (recv, send, count * 4);
  return status;
}

static int
testcomm_all_gather (void              *comm,
                     const void        *send,
                     void              *recv,
                     size_t             count,
                     MixprecPluginDType dtype,
                     void             **request,
                     char              *errbuf,
                     size_t             errbuf_len)
{
  return testcomm_all_reduce (comm, send, recv, count, dtype, MIXPREC_PLUGIN_REDUCE_SUM, 0,
                              request, errbuf, errbuf_len);
}

static int
testcomm_broadcast (void              *comm,
                    void              *buf,
                    size_t             count,
                    MixprecPluginDType dtype,
                    unsigned           root,
                    void             **request,
                    char              *errbuf,
                    size_t             errbuf_len)
{
  return outcome (count, request, errbuf, errbuf_len);
}

static int
testcomm_barrier (void   *comm,
                  void  **request,
                  char   *errbuf,
                  size_t  errbuf_len)
{
  return outcome (0, request, errbuf, errbuf_len);
}

static int
testcomm_test (void   *comm,
               void   *request,
               int    *done,
               char   *errbuf,
               size_t  errbuf_len)
{
  TestRequest *r = request;

  if (r->polls_left > 0)
    r->polls_left--;
  *done = r->polls_left == 0;
  return MIXPREC_PLUGIN_OK;
}

static int
testcomm_wait (void   *comm,
               void   *request,
               char   *errbuf,
               size_t  errbuf_len)
{
  TestRequest *r = request;
  int status = r->status;

  if (status != MIXPREC_PLUGIN_OK)
    snprintf (errbuf, errbuf_len, "the late failure of testcomm");
  free (r);
  return status;
}

static void
testcomm_abort (void *comm)
{
}

static int
testcomm_finalize (void   *comm,
                   char   *errbuf,
                   size_t  errbuf_len)
{
  free (comm);
  return MIXPREC_PLUGIN_OK;
}

static const MixprecCommV1 testcomm = {
  .name = "testcomm",
  .device = "cpu",
  .rank = 1,
  .description = "a one-process communicator for the comm tests",
  .dtype_mask = 1u << MIXPREC_PLUGIN_DTYPE_FLOAT32,
  .init = testcomm_init,
  .all_reduce = testcomm_all_reduce,
  .reduce_scatter = testcomm_all_reduce,
  .all_gather = testcomm_all_gather,
  .broadcast = testcomm_broadcast,
  .barrier = testcomm_barrier,
  .test = testcomm_test,
  .wait = testcomm_wait,
  .abort = testcomm_abort,
  .finalize = testcomm_finalize,
};

MIXPREC_PLUGIN_DEFINE_FEATURE (test_comm, "test-comm", "a communicator plugin for the registry and comm tests",
                               register_comm, testcomm,
                               "0.1", "LGPL-2.1-or-later", "libmixprec tests")
