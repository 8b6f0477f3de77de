/* test-comm.c — MixprecComm: the built-in local communicator of one
 * process, argument checks, how plugin failures become errors (through
 * tests/plugins/test-comm.c), and the comm-ucx plugin across 2, 3 and 4
 * processes, whose ranks are this program run again (comm-ranks.c) and
 * check their results against the serial reference of comm-reference.h. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "mixprec-comm-private.h"
#include "comm-ranks.h"
#include "comm-reference.h"

/* ------------------------------------------------------------ one process */

static MixprecComm *
local_comm (void)
{
  g_autoptr(GError) error = NULL;
  MixprecComm *comm = mixprec_comm_new (NULL, NULL, NULL, 0, &error);

  g_assert_no_error (error);
  g_assert_nonnull (comm);
  return comm;
}

static void
test_local_properties (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  g_autoptr(MixprecComm) named = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *backend = NULL;
  guint world = 0;

  g_assert_cmpstr (mixprec_comm_get_backend (comm), ==, "local");
  g_assert_cmpstr (mixprec_comm_get_device (comm), ==, "cpu");
  g_assert_cmpuint (mixprec_comm_get_rank (comm), ==, 0);
  g_assert_cmpuint (mixprec_comm_get_world_size (comm), ==, 1);
  g_assert_cmpuint (mixprec_comm_get_timeout (comm), ==, MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS);
  g_assert_true (mixprec_comm_supports_dtype (comm, MIXPREC_DTYPE_FLOAT32));
  g_assert_true (mixprec_comm_supports_dtype (comm, MIXPREC_DTYPE_FLOAT16));
  g_assert_true (mixprec_comm_supports_dtype (comm, MIXPREC_DTYPE_BFLOAT16));
  g_assert_false (mixprec_comm_supports_dtype (comm, MIXPREC_DTYPE_FLOAT8_E4M3));
  g_object_get (comm, "backend", &backend, "world-size", &world, NULL);
  g_assert_cmpstr (backend, ==, "local");
  g_assert_cmpuint (world, ==, 1);

  named = mixprec_comm_new (NULL, "local", "cpu", 1234, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_comm_get_timeout (named), ==, 1234);
}

/* Every collective of one process, against the contract's definitions. */
static void
test_local_collectives (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  g_autoptr(GError) error = NULL;
  const MixprecDType dtypes[] = { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16 };
  enum { N = 300 };

  for (gsize d = 0; d < G_N_ELEMENTS (dtypes); d++)
    {
      MixprecDType dt = dtypes[d];
      gsize es = mixprec_dtype_get_size (dt);
      g_autofree guint8 *send = g_malloc (N * es);
      g_autofree guint8 *recv = g_malloc (N * es);
      g_autofree guint8 *start = g_malloc (N * es);
      g_autofree gfloat *wide = g_new (gfloat, N);

      for (gsize i = 0; i < N; i++)
        {
          store_bits (dt, send, i, input_bits (dt, 0, 1, i, 1));
          store_bits (dt, start, i, input_bits (dt, 5, 7, i, 2));
        }

      /* A plain reduction of one rank is its data, NaN payloads and all. */
      memset (recv, 0xa5, N * es);
      g_assert_true (mixprec_comm_all_reduce (comm, send, recv, N, dt, MIXPREC_REDUCE_SUM, 0, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (recv, N * es, send, N * es);
      memset (recv, 0xa5, N * es);
      g_assert_true (mixprec_comm_reduce_scatter (comm, send, recv, N, dt, MIXPREC_REDUCE_MAX, 0, &error));
      g_assert_cmpmem (recv, N * es, send, N * es);
      memset (recv, 0xa5, N * es);
      g_assert_true (mixprec_comm_all_gather (comm, send, recv, N, dt, &error));
      g_assert_cmpmem (recv, N * es, send, N * es);
      g_assert_true (mixprec_comm_all_gather (comm, recv, recv, N, dt, &error));
      g_assert_cmpmem (recv, N * es, send, N * es);
      g_assert_true (mixprec_comm_broadcast (comm, recv, N, dt, 0, &error));
      g_assert_cmpmem (recv, N * es, send, N * es);
      g_assert_true (mixprec_comm_barrier (comm, &error));

      /* ACCUMULATE: recv is the first term, one rounding. */
      for (gint op = MIXPREC_REDUCE_SUM; op <= MIXPREC_REDUCE_MAX; op++)
        {
          memcpy (recv, start, N * es);
          g_assert_true (mixprec_comm_all_reduce (comm, send, recv, N, dt, op,
                                                  MIXPREC_COMM_ACCUMULATE, &error));
          for (gsize i = 0; i < N; i++)
            g_assert_true (matches (dt, load_bits (dt, recv, i),
                                    fold (op, bits_value (dt, load_bits (dt, start, i)),
                                          bits_value (dt, load_bits (dt, send, i)))));
          memcpy (recv, start, N * es);
          g_assert_true (mixprec_comm_reduce_scatter (comm, send, recv, N, dt, op,
                                                      MIXPREC_COMM_ACCUMULATE, &error));
          for (gsize i = 0; i < N; i++)
            g_assert_true (matches (dt, load_bits (dt, recv, i),
                                    fold (op, bits_value (dt, load_bits (dt, start, i)),
                                          bits_value (dt, load_bits (dt, send, i)))));
        }

      /* RECV_FP32: exact widening, and FP32 accumulation without rounding. */
      for (gsize i = 0; i < N; i++)
        wide[i] = 0.5f + (gfloat) i;
      g_assert_true (mixprec_comm_all_reduce (comm, send, wide, N, dt, MIXPREC_REDUCE_SUM,
                                              MIXPREC_COMM_RECV_FP32 | MIXPREC_COMM_ACCUMULATE,
                                              &error));
      g_assert_no_error (error);
      for (gsize i = 0; i < N; i++)
        g_assert_true (matches (MIXPREC_DTYPE_FLOAT32, load_bits (MIXPREC_DTYPE_FLOAT32, wide, i),
                                fold (MIXPREC_REDUCE_SUM, 0.5f + (gfloat) i,
                                      bits_value (dt, load_bits (dt, send, i)))));
      g_assert_true (mixprec_comm_reduce_scatter (comm, send, wide, N, dt, MIXPREC_REDUCE_SUM,
                                                  MIXPREC_COMM_RECV_FP32, &error));
      for (gsize i = 0; i < N; i++)
        g_assert_true (matches (MIXPREC_DTYPE_FLOAT32, load_bits (MIXPREC_DTYPE_FLOAT32, wide, i),
                                bits_value (dt, load_bits (dt, send, i))));
    }

  /* Zero elements need no buffers. */
  g_assert_true (mixprec_comm_all_reduce (comm, NULL, NULL, 0, MIXPREC_DTYPE_FLOAT32,
                                          MIXPREC_REDUCE_SUM, 0, &error));
  g_assert_no_error (error);
}

static void
test_local_requests (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  g_autoptr(GError) error = NULL;
  gfloat a[4] = { 1, 2, 3, 4 }, b[4] = { 0 }, c[4] = { 10, 20, 30, 40 };
  MixprecCommRequest *r1, *r2, *r3, *r4;

  r1 = mixprec_comm_all_reduce_start (comm, a, b, 4, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM,
                                      0, &error);
  g_assert_no_error (error);
  r2 = mixprec_comm_all_reduce_start (comm, a, c, 4, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM,
                                      MIXPREC_COMM_ACCUMULATE, &error);
  r3 = mixprec_comm_barrier_start (comm, &error);
  r4 = mixprec_comm_broadcast_start (comm, a, 4, MIXPREC_DTYPE_FLOAT32, 0, &error);
  g_assert_no_error (error);
  g_assert_nonnull (r1);
  g_assert_false (mixprec_comm_request_is_done (r1));

  /* Complete the moment they start; each outcome can be asked for again. */
  g_assert_true (mixprec_comm_request_test (r1, &error));
  g_assert_true (mixprec_comm_request_is_done (r1));
  g_assert_true (mixprec_comm_request_wait (r1, &error));
  g_assert_true (mixprec_comm_request_wait (r2, &error));
  g_assert_true (mixprec_comm_request_test (r2, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (b, sizeof b, a, sizeof a);
  g_assert_cmpfloat (c[0], ==, 11);
  g_assert_cmpfloat (c[3], ==, 44);

  /* Dropping requests nobody waited for is fine. */
  g_object_unref (r3);
  mixprec_comm_request_free (r4);
  g_object_unref (r1);
  mixprec_comm_request_free (r2);
}

static void
test_local_bytes (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  g_autoptr(GError) error = NULL;
  const guint16 half[3] = { 0x3c00, 0xc000, 0x7e01 };
  g_autoptr(GBytes) in = g_bytes_new (half, sizeof half);
  g_autoptr(GBytes) odd = g_bytes_new (half, 5);
  g_autoptr(GBytes) out = NULL;

  out = mixprec_comm_all_reduce_bytes (comm, in, MIXPREC_DTYPE_FLOAT16, MIXPREC_REDUCE_SUM, &error);
  g_assert_no_error (error);
  g_assert_true (g_bytes_equal (out, in));
  g_clear_pointer (&out, g_bytes_unref);
  out = mixprec_comm_reduce_scatter_bytes (comm, in, MIXPREC_DTYPE_BFLOAT16, MIXPREC_REDUCE_MAX, &error);
  g_assert_true (g_bytes_equal (out, in));
  g_clear_pointer (&out, g_bytes_unref);
  out = mixprec_comm_all_gather_bytes (comm, in, MIXPREC_DTYPE_FLOAT16, &error);
  g_assert_true (g_bytes_equal (out, in));
  g_clear_pointer (&out, g_bytes_unref);
  out = mixprec_comm_broadcast_bytes (comm, in, MIXPREC_DTYPE_FLOAT16, 0, &error);
  g_assert_true (g_bytes_equal (out, in));
  g_clear_pointer (&out, g_bytes_unref);

  out = mixprec_comm_all_reduce_bytes (comm, odd, MIXPREC_DTYPE_FLOAT16, MIXPREC_REDUCE_SUM, &error);
  g_assert_null (out);
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
  g_assert_cmpstr (error->message, ==, "all_reduce: 5 bytes is not a whole number of float16 "
                   "elements (2 bytes each)");
}

/* ------------------------------------------------------------ argument checks */

#define EXPECT_INVALID(call, text) G_STMT_START {                               \
    g_autoptr(GError) e_ = NULL;                                                \
    GError **error = &e_;                                                       \
    g_assert_false (call);                                                      \
    g_assert_error (e_, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT); \
    if (strstr (e_->message, text) == NULL)                                     \
      g_error ("message \"%s\" lacks \"%s\"", e_->message, text);               \
  } G_STMT_END

static void
test_arguments (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  gfloat buf[64] = { 0 };
  guint16 half[64] = { 0 };
  guint8 fp8[8] = { 0 };

  EXPECT_INVALID (mixprec_comm_all_reduce (comm, fp8, fp8, 8, MIXPREC_DTYPE_FLOAT8_E4M3,
                                           MIXPREC_REDUCE_SUM, 0, error),
                  "all_reduce: comm 'local' (cpu) does not accept dtype float8_e4m3; it "
                  "accepts float32, float16, bfloat16");
  EXPECT_INVALID (mixprec_comm_all_gather (comm, buf, buf + 8, 4, (MixprecDType) 9, error),
                  "does not accept dtype 9 (not a MixprecDType)");
  EXPECT_INVALID (mixprec_comm_all_reduce (comm, buf, buf + 8, 4, MIXPREC_DTYPE_FLOAT32,
                                           (MixprecReduceOp) 7, 0, error),
                  "all_reduce: operation 7 is not a MixprecReduceOp");
  EXPECT_INVALID (mixprec_comm_reduce_scatter (comm, buf, buf + 8, 4, MIXPREC_DTYPE_FLOAT32,
                                               MIXPREC_REDUCE_SUM, 1 << 5, error),
                  "reduce_scatter: flags 0x20 include bits that are not MixprecCommFlags");
  EXPECT_INVALID (mixprec_comm_all_reduce (comm, buf, buf + 8, G_MAXSIZE / 2,
                                           MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, error),
                  "do not fit in the address space");
  EXPECT_INVALID (mixprec_comm_broadcast (comm, buf, 4, MIXPREC_DTYPE_FLOAT32, 1, error),
                  "broadcast: root 1 is not a rank of a world of 1 processes");
  EXPECT_INVALID (mixprec_comm_all_reduce (comm, buf, buf + 2, 4, MIXPREC_DTYPE_FLOAT32,
                                           MIXPREC_REDUCE_SUM, 0, error),
                  "all_reduce: the send and receive buffers overlap");
  EXPECT_INVALID (mixprec_comm_all_reduce (comm, half, half, 8, MIXPREC_DTYPE_FLOAT16,
                                           MIXPREC_REDUCE_SUM, MIXPREC_COMM_RECV_FP32, error),
                  "an in-place all_reduce cannot use RECV_FP32 with dtype float16");
  /* RECV_FP32 makes recv twice as long: half + 4 is inside it. */
  EXPECT_INVALID (mixprec_comm_all_reduce (comm, half + 6, half, 4, MIXPREC_DTYPE_FLOAT16,
                                           MIXPREC_REDUCE_SUM, MIXPREC_COMM_RECV_FP32, error),
                  "overlap");
  EXPECT_INVALID (mixprec_comm_reduce_scatter (comm, buf, buf, 4, MIXPREC_DTYPE_FLOAT32,
                                               MIXPREC_REDUCE_SUM, MIXPREC_COMM_ACCUMULATE, error),
                  "an in-place reduce_scatter (recv at this rank's part of send) cannot ACCUMULATE");
  EXPECT_INVALID (mixprec_comm_reduce_scatter (comm, buf, buf + 1, 4, MIXPREC_DTYPE_FLOAT32,
                                               MIXPREC_REDUCE_SUM, 0, error),
                  "reduce_scatter: the receive buffer overlaps the send buffer");
  EXPECT_INVALID (mixprec_comm_all_gather (comm, buf + 1, buf, 4, MIXPREC_DTYPE_FLOAT32, error),
                  "all_gather: the send buffer overlaps the receive buffer");
  {
    g_autoptr(GError) error = NULL;

    g_assert_null (mixprec_comm_all_reduce_start (comm, fp8, fp8, 8, MIXPREC_DTYPE_FLOAT8_E5M2,
                                                  MIXPREC_REDUCE_SUM, 0, &error));
    g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
  }
  /* The checks did not break the communicator. */
  {
    g_autoptr(GError) error = NULL;

    g_assert_true (mixprec_comm_barrier (comm, &error));
    g_assert_no_error (error);
  }
}

static void
test_backend_errors (void)
{
  g_autoptr(GError) error = NULL;
  MixprecComm *comm;

  comm = mixprec_comm_new (NULL, "nosuch", "cpu", 0, &error);
  g_assert_null (comm);
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "communication backend 'nosuch': no comm 'nosuch' "
                            "for device 'cpu'; available: "));
  g_assert_nonnull (strstr (error->message, "local (cpu)"));
  g_clear_error (&error);

  comm = mixprec_comm_new (NULL, "auto", "tpu", 0, &error);
  g_assert_null (comm);
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "no communication backend for device 'tpu' serves "
                            "a world of 1 processes"));
}

/* How a plugin's failures reach the caller (tests/plugins/test-comm.c). */
/* The all-to-all of revision 2 in a world of one: this rank's run comes
 * back as it was, started or blocking. */
static void
test_local_all_to_all (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  g_autoptr(GError) error = NULL;
  guint8 send[37], recv[37] = { 0 }, again[37] = { 0 };
  MixprecCommRequest *r;

  for (guint i = 0; i < sizeof send; i++)
    send[i] = (guint8) (i * 29 + 3);
  g_assert_true (_mixprec_comm_has_all_to_all (comm, &error));
  g_assert_cmpuint (mixprec_feature_get_abi_revision (_mixprec_comm_get_feature (comm)), ==, 2);
  g_assert_true (_mixprec_comm_all_to_all (comm, send, recv, sizeof send, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (recv, sizeof recv, send, sizeof send);
  r = _mixprec_comm_all_to_all_start (comm, send, again, sizeof send, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_comm_request_wait (r, &error));
  mixprec_comm_request_free (r);
  g_assert_cmpmem (again, sizeof again, send, sizeof send);
  /* Overlapping buffers are refused before the backend sees them. */
  g_assert_false (_mixprec_comm_all_to_all (comm, send, send + 1, 8, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "all_to_all: the send and receive buffers overlap"));
  g_clear_error (&error);

  /* all_to_all_v (plugin ABI 1.7): the one run, at its offsets */
  {
    gsize len = 20, soff = 5, roff = 11, zero = 0;
    guint8 out[37] = { 0 };

    g_assert_true (_mixprec_comm_has_all_to_all_v (comm));
    g_assert_true (_mixprec_comm_all_to_all_v (comm, send, &len, &soff, out, &len, &roff, &error));
    g_assert_no_error (error);
    g_assert_cmpmem (out + roff, len, send + soff, len);
    g_assert_cmpuint (out[roff - 1], ==, 0);
    g_assert_cmpuint (out[roff + len], ==, 0);
    /* refused before the backend sees them: a receive run over a send
     * run, and a run to itself of two sizes */
    g_assert_false (_mixprec_comm_all_to_all_v (comm, send, &len, &zero, send, &len, &soff, &error));
    g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
    g_assert_nonnull (strstr (error->message, "all_to_all_v: a receive run overlaps another run"));
    g_clear_error (&error);
    g_assert_false (_mixprec_comm_all_to_all_v (comm, send, &len, &zero, out, &zero, &zero, &error));
    g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
    g_assert_nonnull (strstr (error->message, "rank 0 sends itself 20 bytes but expects 0"));
  }
}

/* A communicator registered as revision 1 (testcomm) has no all-to-all:
 * asking for one names it, its plugin and its revision. */
static void
test_v1_no_all_to_all (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecComm) comm = mixprec_comm_new (NULL, "testcomm", NULL, 0, &error);
  guint8 send[4] = { 0 }, recv[4];

  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (_mixprec_comm_get_feature (comm)), ==, 1);
  g_assert_false (_mixprec_comm_has_all_to_all (comm, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, "comm 'testcomm'"));
  g_assert_nonnull (strstr (error->message, "plugin test-comm"));
  g_assert_nonnull (strstr (error->message, "revision 1, which has no all-to-all"));
  g_clear_error (&error);
  g_assert_false (_mixprec_comm_all_to_all (comm, send, recv, sizeof send, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
  g_clear_error (&error);
  /* nor all_to_all_v, which names the ABI that added it */
  {
    gsize len = 4, off = 0;

    g_assert_false (_mixprec_comm_has_all_to_all_v (comm));
    g_assert_false (_mixprec_comm_all_to_all_v (comm, send, &len, &off, recv, &len, &off, &error));
    g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
    g_assert_nonnull (strstr (error->message, "has no all_to_all_v (plugin ABI 1.7 added it"));
  }
}

static void
test_plugin_failures (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecComm) comm = mixprec_comm_new (NULL, "testcomm", NULL, 0, &error);
  g_autoptr(MixprecCommRequest) request = NULL;
  gfloat buf[32] = { 0 };
  guint16 half[4] = { 0 };

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_comm_get_backend (comm), ==, "testcomm");

  g_assert_false (mixprec_comm_all_reduce (comm, buf, buf, 13, MIXPREC_DTYPE_FLOAT32,
                                           MIXPREC_REDUCE_SUM, 0, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_TIMEOUT);
  g_assert_cmpstr (error->message, ==, "all_reduce of 13 float32 elements on rank 0 of 1 "
                   "(comm 'testcomm'): rank 1 has not answered for 5 ms (testcomm) "
                   "(timeout, status 4); the timeout is 300000 ms (MIXPREC_TIMEOUT or "
                   "mixprec.timeout)");
  g_clear_error (&error);

  g_assert_false (mixprec_comm_all_gather (comm, buf, buf + 17, 17, MIXPREC_DTYPE_FLOAT32, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_PEER_FAILED);
  g_assert_nonnull (strstr (error->message, "rank 1 exited (testcomm)"));
  g_clear_error (&error);

  /* The backend's dtype mask is enforced before it is called. */
  g_assert_false (mixprec_comm_all_reduce (comm, half, half, 4, MIXPREC_DTYPE_FLOAT16,
                                           MIXPREC_REDUCE_SUM, 0, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (error->message, "does not accept dtype float16; it accepts float32"));
  g_clear_error (&error);

  /* A started operation that fails when it completes: test() reports
   * "not yet", then the failure, and wait() repeats it. */
  request = mixprec_comm_broadcast_start (comm, buf, 19, MIXPREC_DTYPE_FLOAT32, 0, &error);
  g_assert_no_error (error);
  g_assert_false (mixprec_comm_request_test (request, &error));
  g_assert_no_error (error);
  g_assert_false (mixprec_comm_request_is_done (request));
  g_assert_false (mixprec_comm_request_test (request, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_FAILED);
  g_assert_nonnull (strstr (error->message, "broadcast of 19 float32 elements on rank 0 of 1 "
                            "(comm 'testcomm'): the late failure of testcomm"));
  g_clear_error (&error);
  g_assert_true (mixprec_comm_request_is_done (request));
  g_assert_false (mixprec_comm_request_wait (request, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_FAILED);
  g_clear_error (&error);

  /* After mixprec_comm_abort() failures read as aborted. */
  mixprec_comm_abort (comm);
  g_assert_false (mixprec_comm_all_reduce (comm, buf, buf, 13, MIXPREC_DTYPE_FLOAT32,
                                           MIXPREC_REDUCE_SUM, 0, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_ABORTED);
}

static void
test_local_abort (void)
{
  g_autoptr(MixprecComm) comm = local_comm ();
  g_autoptr(GError) error = NULL;
  gfloat x = 1;

  mixprec_comm_abort (comm);
  g_assert_false (mixprec_comm_all_reduce (comm, &x, &x, 1, MIXPREC_DTYPE_FLOAT32,
                                           MIXPREC_REDUCE_SUM, 0, &error));
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_ABORTED);
  g_assert_nonnull (strstr (error->message, "the communicator was aborted"));
}

/* ------------------------------------------------------------ the parent */

static guint
free_port (void)
{
  struct sockaddr_in addr = { 0 };
  socklen_t len = sizeof addr;
  int fd = socket (AF_INET, SOCK_STREAM, 0);

  g_assert_cmpint (fd, >=, 0);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
  g_assert_no_errno (bind (fd, (struct sockaddr *) &addr, sizeof addr));
  g_assert_no_errno (getsockname (fd, (struct sockaddr *) &addr, &len));
  close (fd);
  return ntohs (addr.sin_port);
}

typedef struct
{
  GPid pid;
  gint status;
  gboolean reaped;
  gboolean stopped;
  gchar *log;
} Rank;

/* Runs @world ranks of @scenario and reaps them all (killing stragglers,
 * and a rank that stopped itself once the others are done). */
static Rank *
run_group (const gchar *scenario,
           guint        world)
{
  g_autofree gchar *self = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-comm-XXXXXX", NULL);
  g_autofree gchar *port = g_strdup_printf ("%u", free_port ());
  g_autofree gchar *world_str = g_strdup_printf ("%u", world);
  Rank *ranks = g_new0 (Rank, world);
  gint64 deadline = g_get_monotonic_time () + (gint64) GROUP_DEADLINE_S * G_USEC_PER_SEC;
  guint left = world;

  g_assert_nonnull (self);
  g_assert_nonnull (dir);
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *rank = g_strdup_printf ("%u", r);
      g_autofree gchar *log = g_strdup_printf ("%s/rank-%u.log", dir, r);
      const gchar *argv[] = { self, "--child", scenario, rank, world_str, port, log, NULL };
      g_autoptr(GError) error = NULL;

      ranks[r].log = g_steal_pointer (&log);
      g_assert_true (g_spawn_async (NULL, (gchar **) argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD,
                                    NULL, NULL, &ranks[r].pid, &error));
      g_assert_no_error (error);
    }

  while (left > 0)
    {
      gboolean progressed = FALSE;
      guint stopped = 0;

      for (guint r = 0; r < world; r++)
        {
          gint status;
          pid_t got;

          if (ranks[r].reaped)
            continue;
          got = waitpid (ranks[r].pid, &status, WNOHANG | WUNTRACED);
          if (got == ranks[r].pid && WIFSTOPPED (status))
            ranks[r].stopped = TRUE;
          else if (got == ranks[r].pid)
            {
              ranks[r].status = status;
              ranks[r].reaped = TRUE;
              left--;
              progressed = TRUE;
            }
          stopped += !ranks[r].reaped && ranks[r].stopped;
        }
      /* Ranks that stopped themselves end once the others are done; all
       * end when time is up. */
      if (left > 0 && (stopped == left || g_get_monotonic_time () > deadline))
        {
          for (guint r = 0; r < world; r++)
            if (!ranks[r].reaped && (ranks[r].stopped || g_get_monotonic_time () > deadline))
              {
                if (!ranks[r].stopped)
                  g_test_message ("rank %u did not finish in %d s: killed", r, GROUP_DEADLINE_S);
                kill (ranks[r].pid, SIGKILL);
                ranks[r].stopped = FALSE;
              }
          if (g_get_monotonic_time () > deadline)
            deadline = G_MAXINT64;
        }
      if (!progressed)
        g_usleep (5000);
    }
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *text = NULL;

      if (g_file_get_contents (ranks[r].log, &text, NULL, NULL))
        g_test_message ("rank %u (status 0x%x):\n%s", r, ranks[r].status, text);
      g_unlink (ranks[r].log);
    }
  for (guint r = 0; r < world; r++)
    {
      g_autofree gchar *marker = g_strdup_printf ("%s/through-barrier-%u", dir, r);

      g_unlink (marker);
    }
  g_rmdir (dir);
  return ranks;
}

static void
free_ranks (Rank  *ranks,
            guint  world)
{
  for (guint r = 0; r < world; r++)
    {
      g_spawn_close_pid (ranks[r].pid);
      g_free (ranks[r].log);
    }
  g_free (ranks);
}

static gboolean
have_ucx (void)
{
#ifdef MIXPREC_TEST_HAVE_UCX
  return TRUE;
#else
  g_test_skip ("libmixprec was configured without UCX: the comm-ucx plugin is not built");
  return FALSE;
#endif
}

/* A multi-process case, and whether its ranks share a segment: by
 * default they do (all run on this host), with MIXPREC_UCX_SHM=0 every
 * collective goes over UCX. The ranks check which from their own memory
 * map (MIXPREC_TEST_EXPECT_SHM), so neither path passes for the other. */
typedef struct
{
  const gchar *scenario;
  guint world;
  gboolean shm;
} Group;

/* Whether the shared path can be expected: it needs /dev/shm. */
static gboolean
shm_possible (const Group *g)
{
  if (g->shm && access ("/dev/shm", W_OK | X_OK) != 0)
    {
      g_test_skip ("/dev/shm is missing or not writable here, so comm-ucx cannot "
                   "share memory between ranks (the no-shm cases still run)");
      return FALSE;
    }
  return TRUE;
}

static Rank *
run_group_as (const Group *g)
{
  Rank *ranks;

  if (!g->shm)
    g_setenv ("MIXPREC_UCX_SHM", "0", TRUE);
  g_setenv ("MIXPREC_TEST_EXPECT_SHM", g->shm ? "1" : "0", TRUE);
  ranks = run_group (g->scenario, g->world);
  g_unsetenv ("MIXPREC_UCX_SHM");
  g_unsetenv ("MIXPREC_TEST_EXPECT_SHM");
  return ranks;
}

/* A group whose ranks each check their own outcome and exit 0 when it is
 * right: the collectives, an abort, mismatched calls. */
static void
test_multi_collectives (gconstpointer data)
{
  const Group *g = data;
  guint world = g->world;
  Rank *ranks;

  if (!have_ucx () || !shm_possible (g))
    return;
  /* Four ranks receive one reduction at a time, so every concurrent
   * reduction but the first waits in the plugin's queue. */
  if (world == 4)
    g_setenv ("MIXPREC_UCX_REDUCTIONS", "1", TRUE);
  ranks = run_group_as (g);
  g_unsetenv ("MIXPREC_UCX_REDUCTIONS");
  for (guint r = 0; r < world; r++)
    {
      g_assert_true (WIFEXITED (ranks[r].status));
      g_assert_cmpint (WEXITSTATUS (ranks[r].status), ==, 0);
    }
  free_ranks (ranks, world);
}

/* The victim (last rank) is killed or stopped midway; the other ranks
 * check their own errors and exit 0. */
static void
test_multi_lose_rank (gconstpointer data)
{
  const Group *g = data;
  guint world = g->world;
  Rank *ranks;

  if (!have_ucx () || !shm_possible (g))
    return;
  ranks = run_group_as (g);
  for (guint r = 0; r + 1 < world; r++)
    {
      g_assert_true (WIFEXITED (ranks[r].status));
      g_assert_cmpint (WEXITSTATUS (ranks[r].status), ==, 0);
    }
  g_assert_true (WIFSIGNALED (ranks[world - 1].status));
  g_assert_cmpint (WTERMSIG (ranks[world - 1].status), ==, SIGKILL);
  free_ranks (ranks, world);
}

/* comm-ucx in a world of one process: the same collectives, no peers. */
static void
test_ucx_single (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecComm) comm = NULL;
  guint16 a[5] = { 0x3c00, 0x4000, 0x7e05, 0x8000, 0x0001 }, b[5] = { 0 };
  gfloat wide[5] = { 1, 1, 1, 1, 1 };

  if (!have_ucx ())
    return;
  comm = mixprec_comm_new (NULL, "ucx", "cpu", 0, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_comm_get_backend (comm), ==, "ucx");
  g_assert_true (mixprec_comm_all_reduce (comm, a, b, 5, MIXPREC_DTYPE_FLOAT16,
                                          MIXPREC_REDUCE_SUM, 0, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (a, sizeof a, b, sizeof b);
  g_assert_true (mixprec_comm_reduce_scatter (comm, a, wide, 5, MIXPREC_DTYPE_FLOAT16,
                                              MIXPREC_REDUCE_SUM,
                                              MIXPREC_COMM_ACCUMULATE | MIXPREC_COMM_RECV_FP32,
                                              &error));
  g_assert_cmpfloat (wide[0], ==, 2.0f);
  g_assert_cmpfloat (wide[1], ==, 3.0f);
  g_assert_true (isnan (wide[2]));
  g_assert_cmpfloat (wide[3], ==, 1.0f);
  g_assert_true (mixprec_comm_barrier (comm, &error));

  /* Settings of the plugin are checked at init. */
  g_setenv ("MIXPREC_UCX_WINDOW", "0", TRUE);
  g_assert_null (mixprec_comm_new (NULL, "ucx", "cpu", 0, &error));
  g_unsetenv ("MIXPREC_UCX_WINDOW");
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INIT);
  g_assert_nonnull (strstr (error->message, "MIXPREC_UCX_WINDOW=0: must be an integer from 1 to 64"));
  g_clear_error (&error);
  g_setenv ("MIXPREC_UCX_REDUCTIONS", "65", TRUE);
  g_assert_null (mixprec_comm_new (NULL, "ucx", "cpu", 0, &error));
  g_unsetenv ("MIXPREC_UCX_REDUCTIONS");
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INIT);
  g_assert_nonnull (strstr (error->message, "MIXPREC_UCX_REDUCTIONS=65: must be an integer from 1 to 64"));
  g_clear_error (&error);
  g_setenv ("MIXPREC_UCX_SHM", "yes", TRUE);
  g_assert_null (mixprec_comm_new (NULL, "ucx", "cpu", 0, &error));
  g_unsetenv ("MIXPREC_UCX_SHM");
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INIT);
  g_assert_nonnull (strstr (error->message, "MIXPREC_UCX_SHM=yes: must be \"auto\", \"0\" or \"1\""));
  g_clear_error (&error);
  g_setenv ("MIXPREC_UCX_SHM_CHUNK_BYTES", "4095", TRUE);
  g_assert_null (mixprec_comm_new (NULL, "ucx", "cpu", 0, &error));
  g_unsetenv ("MIXPREC_UCX_SHM_CHUNK_BYTES");
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INIT);
  g_assert_nonnull (strstr (error->message, "MIXPREC_UCX_SHM_CHUNK_BYTES=4095: must be an integer "
                                            "from 4096 to 67108864"));
}

/* Every multi-process case, through the shared segment (the default on
 * one host) and over UCX alone. */
static const Group groups[] = {
  { "collectives", 2, TRUE },
  { "collectives", 3, TRUE },
  { "collectives", 4, TRUE },
  { "collectives", 2, FALSE },
  { "collectives", 3, FALSE },
  { "kill", 3, TRUE },
  { "kill", 3, FALSE },
  { "stop", 2, TRUE },
  { "stop", 2, FALSE },
  { "abort", 2, TRUE },
  { "abort", 2, FALSE },
  { "mismatch", 2, TRUE },
  { "mismatch-barrier", 2, TRUE },
  { "all-to-all", 3, TRUE },
  { "all-to-all", 4, TRUE },
  { "all-to-all", 3, FALSE },
  { "all-to-all-kill", 3, TRUE },
  { "all-to-all-kill", 3, FALSE },
};

int
main (int argc, char **argv)
{
  g_autofree gchar *plugins = NULL;
  g_autofree gchar *path = NULL;
  const gchar *old;

  if (argc > 1 && g_str_equal (argv[1], "--child"))
    return comm_ranks_main (argc, argv);

  g_test_init (&argc, &argv, NULL);

  /* one job secret for every rank, as a launcher gives it; they inherit it */
  g_setenv ("MIXPREC_JOB_SECRET", "746573742d636f6d6d2073656372657420666f722072616e6b73", TRUE);

  /* The test plugins (testcomm) join the build tree's plugins; the default
   * registry reads this the first time it is used. The ranks inherit it. */
  plugins = g_test_build_filename (G_TEST_BUILT, "plugins", NULL);
  old = g_getenv ("MIXPREC_PLUGIN_PATH");
  path = old != NULL && old[0] != '\0' ? g_strconcat (plugins, ":", old, NULL) : g_strdup (plugins);
  g_setenv ("MIXPREC_PLUGIN_PATH", path, TRUE);
  /* Small chunks and a small window, so that a few MiB take many chunks
   * and the receive slots are reused. */
  g_setenv ("MIXPREC_UCX_CHUNK_BYTES", "65536", TRUE);
  g_setenv ("MIXPREC_UCX_WINDOW", "2", TRUE);
  g_setenv ("MIXPREC_UCX_SHM_CHUNK_BYTES", "65536", TRUE);
  /* The failure cases leave UCX requests behind on purpose; its warnings
   * about them at exit are expected. */
  g_setenv ("UCX_LOG_LEVEL", "error", FALSE);

  g_test_add_func ("/comm/local/properties", test_local_properties);
  g_test_add_func ("/comm/local/collectives", test_local_collectives);
  g_test_add_func ("/comm/local/requests", test_local_requests);
  g_test_add_func ("/comm/local/bytes", test_local_bytes);
  g_test_add_func ("/comm/local/abort", test_local_abort);
  g_test_add_func ("/comm/local/all-to-all", test_local_all_to_all);
  g_test_add_func ("/comm/v1-plugin/no-all-to-all", test_v1_no_all_to_all);
  g_test_add_func ("/comm/arguments", test_arguments);
  g_test_add_func ("/comm/backend-errors", test_backend_errors);
  g_test_add_func ("/comm/plugin-failures", test_plugin_failures);
  g_test_add_func ("/comm/ucx/single", test_ucx_single);
  for (gsize i = 0; i < G_N_ELEMENTS (groups); i++)
    {
      const Group *g = &groups[i];
      g_autofree gchar *test_path = NULL;
      GTestDataFunc func = test_multi_collectives;

      if (g_str_equal (g->scenario, "kill") || g_str_equal (g->scenario, "stop") ||
          g_str_equal (g->scenario, "all-to-all-kill"))
        func = test_multi_lose_rank;
      if (g_str_equal (g->scenario, "collectives"))
        test_path = g_strdup_printf ("/comm/ucx/%sranks-%u", g->shm ? "" : "no-shm/", g->world);
      else if (g_str_equal (g->scenario, "all-to-all"))
        test_path = g_strdup_printf ("/comm/ucx/%sall-to-all/ranks-%u", g->shm ? "" : "no-shm/", g->world);
      else
        test_path = g_strdup_printf ("/comm/ucx/%s%s", g->shm ? "" : "no-shm/",
                                     g_str_equal (g->scenario, "kill") ? "killed-rank" :
                                     g_str_equal (g->scenario, "stop") ? "stopped-rank" :
                                     g->scenario);
      g_test_add_data_func (test_path, g, func);
    }

  return g_test_run ();
}
