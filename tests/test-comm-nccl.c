/* test-comm-nccl.c — the comm-nccl plugin: registration, failures without
 * a GPU, the plugin's own argument checks, and on a machine with a CUDA
 * device every collective, dtype and flag at a world of one, against
 * results computed on the host from the contract's wording
 * (comm-reference.h). */
#include "config.h"

#include <string.h>

#include <mixprec/mixprec.h>
#include <mixprec/mixprec-plugin.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cuda_runtime_api.h>
#pragma GCC diagnostic pop

#include "comm-reference.h"
#include "comm-vtable.h"
#include "nccl-peer.h"

#define N_AR 4099               /* odd, so no vector width divides it */
#define N_RS 1031

static const MixprecDType dtypes[] = {
  MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
};

/* Why the GPU tests cannot run here, or NULL when they can. */
static const gchar *
no_gpu_reason (void)
{
  static gchar *reason = NULL;
  static gsize ready = 0;

  if (g_once_init_enter (&ready))
    {
      int n = 0;
      cudaError_t err = cudaGetDeviceCount (&n);

      if (err != cudaSuccess)
        reason = g_strdup_printf ("no CUDA device: cudaGetDeviceCount: %s",
                                  cudaGetErrorString (err));
      else if (n == 0)
        reason = g_strdup ("no CUDA device: cudaGetDeviceCount found none");
      g_once_init_leave (&ready, 1);
    }
  return reason;
}

#define SKIP_WITHOUT_GPU() \
  G_STMT_START { \
    if (no_gpu_reason () != NULL) \
      { \
        g_test_skip (no_gpu_reason ()); \
        return; \
      } \
  } G_STMT_END

/* ------------------------------------------------------------ the vtable */

/* The plugin's vtable, straight from its module, for what the library
 * checks before it would reach the plugin. */
static const MixprecCommV1 *
plugin_vtable (void)
{
  return test_comm_plugin_vtable ("comm-nccl");
}

/* A bootstrap of a world of one, or a pretend rank of a larger world whose
 * peers all report that their device failed. */
typedef struct
{
  gboolean peers_failed;
  guint calls;
  gint32 sent_status;
} FakeWorld;

static int
fake_all_gather (void       *ctx,
                 const void *in,
                 size_t      len,
                 void       *out,
                 char       *errbuf,
                 size_t      errbuf_len)
{
  FakeWorld *w = ctx;

  w->calls++;
  memcpy (&w->sent_status, in, sizeof w->sent_status);
  if (!w->peers_failed)
    {
      memmove (out, in, len);
      return MIXPREC_PLUGIN_OK;
    }
  /* rank 1 of 2: rank 0's record says its device failed */
  memset (out, 0, 2 * len);
  *(gint32 *) out = MIXPREC_PLUGIN_ERR_RUNTIME;
  memcpy ((char *) out + len, in, len);
  return MIXPREC_PLUGIN_OK;
}

static MixprecBootstrapV1
fake_bootstrap (FakeWorld *w,
                guint      rank,
                guint      world)
{
  MixprecBootstrapV1 b = { 0 };

  b.struct_size = sizeof b;
  b.rank = rank;
  b.world_size = world;
  b.local_world_size = world;
  b.local_rank = rank;
  b.ctx = w;
  b.all_gather = fake_all_gather;
  return b;
}

/* ------------------------------------------------------------ host side */

static void
test_registered (void)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFeature) feature = NULL;
  g_autolist(MixprecPlugin) failures = mixprec_registry_get_failures (registry);
  const MixprecDType *comm_dtypes;
  gsize n = 0;

  for (GList *l = failures; l != NULL; l = l->next)
    g_assert_null (strstr (mixprec_plugin_get_name (l->data), "comm-nccl"));
  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, "nccl", "cuda",
                                           &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_feature_get_device (feature), ==, "cuda");
  g_assert_cmpstr (mixprec_feature_get_plugin_name (feature), ==, "comm-nccl");
  g_assert_cmpuint (mixprec_feature_get_rank (feature), ==, 256);
  /* The description owns up to NCCL's order of additions. */
  g_assert_nonnull (strstr (mixprec_feature_get_description (feature), "not rank order"));
  comm_dtypes = mixprec_feature_get_comm_dtypes (feature, &n);
  g_assert_cmpuint (n, ==, 3);
  for (gsize i = 0; i < n; i++)
    g_assert_cmpint (comm_dtypes[i], ==, dtypes[i]);

  /* Not for host memory. */
  g_clear_object (&feature);
  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, "nccl", "cpu",
                                           &error);
  g_assert_null (feature);
  g_assert_nonnull (error);
}

static void
test_no_device (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecComm) comm = NULL;

  if (no_gpu_reason () == NULL)
    {
      g_test_skip ("a CUDA device is present, so init succeeds");
      return;
    }
  comm = mixprec_comm_new (NULL, "nccl", "cuda", 0, &error);
  g_assert_null (comm);
  g_assert_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INIT);
  g_assert_nonnull (strstr (error->message, "cudaGetDevice: "));
  g_assert_nonnull (strstr (error->message, "'nccl'"));
}

static void
test_init_arguments (void)
{
  const MixprecCommV1 *vt = plugin_vtable ();
  FakeWorld w = { 0 };
  MixprecBootstrapV1 b = fake_bootstrap (&w, 0, 1);
  MixprecCommInitV1 args = { sizeof args, &b, 1000, NULL };
  char errbuf[512] = "";
  void *handle = NULL;
  int status;

  status = vt->init (NULL, &handle, errbuf, sizeof errbuf);
  g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "bootstrap"));

  b.rank = 1;
  status = vt->init (&args, &handle, errbuf, sizeof errbuf);
  g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "rank 1 of a world of 1"));

  b.rank = 0;
  b.all_gather = NULL;
  status = vt->init (&args, &handle, errbuf, sizeof errbuf);
  g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_cmpuint (w.calls, ==, 0);
  g_assert_null (handle);
}

/* A rank whose device fails still joins the id exchange (so its peers do
 * not wait for it), and a rank whose peer failed gives up at once. */
static void
test_init_peer_failure (void)
{
  const MixprecCommV1 *vt = plugin_vtable ();
  FakeWorld w = { .peers_failed = TRUE };
  MixprecBootstrapV1 b = fake_bootstrap (&w, 1, 2);
  MixprecCommInitV1 args = { sizeof args, &b, 1000, NULL };
  char errbuf[512] = "";
  void *handle = NULL;
  int status;

  status = vt->init (&args, &handle, errbuf, sizeof errbuf);
  g_assert_cmpuint (w.calls, ==, 1);
  g_assert_null (handle);
  if (no_gpu_reason () != NULL)
    {
      g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_RUNTIME);
      g_assert_cmpint (w.sent_status, ==, MIXPREC_PLUGIN_ERR_RUNTIME);
      g_assert_nonnull (strstr (errbuf, "cudaGetDevice: "));
    }
  else
    {
      g_assert_cmpint (status, ==, MIXPREC_PLUGIN_ERR_PEER_FAILED);
      g_assert_cmpint (w.sent_status, ==, MIXPREC_PLUGIN_OK);
      g_assert_nonnull (strstr (errbuf, "rank 0 could not"));
    }
}

/* ------------------------------------------------------------ device helpers */

static void
check_cuda (cudaError_t  err,
            const gchar *what)
{
  if (err != cudaSuccess)
    g_error ("%s: %s", what, cudaGetErrorString (err));
}

static gpointer
device_copy_of (gconstpointer host,
                gsize         bytes)
{
  void *dev = NULL;

  check_cuda (cudaMalloc (&dev, bytes > 0 ? bytes : 1), "cudaMalloc");
  if (bytes > 0)
    check_cuda (cudaMemcpy (dev, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  /* The communicator's stream does not wait for the legacy stream the
   * copy went on. */
  check_cuda (cudaDeviceSynchronize (), "cudaDeviceSynchronize");
  return dev;
}

static gpointer
host_copy_of (gconstpointer dev,
              gsize         bytes)
{
  gpointer host = g_malloc0 (bytes > 0 ? bytes : 1);

  if (bytes > 0)
    check_cuda (cudaMemcpy (host, dev, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
  return host;
}

static gsize
esize (MixprecDType dtype)
{
  return mixprec_dtype_get_size (dtype);
}

static gpointer
make_input (MixprecDType dtype,
            guint        rank,
            guint        world,
            gsize        n,
            guint        salt)
{
  gpointer buf = g_malloc0 (n * esize (dtype) + 1);

  for (gsize i = 0; i < n; i++)
    store_bits (dtype, buf, i, input_bits (dtype, rank, world, i, salt));
  return buf;
}

/* The expected value of element @i at a world of one: the contract's fold
 * of recv (with ACCUMULATE) and the one term, in FP32. Besides, the plugin
 * documents that +0 wins over -0 in a MAX. */
static gfloat
expected (MixprecReduceOp op,
          gboolean        accumulate,
          gfloat          first,
          gfloat          term)
{
  if (!accumulate)
    return term;
  if (op == MIXPREC_REDUCE_MAX && first == 0.0f && term == 0.0f)
    return signbit (first) && signbit (term) ? -0.0f : 0.0f;
  return fold (op, first, term);
}

/* ------------------------------------------------------------ world of one */

static MixprecComm *
open_world_of_one (void)
{
  g_autoptr(GError) error = NULL;
  MixprecComm *comm = mixprec_comm_new (NULL, "nccl", "cuda", 20000, &error);

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_comm_get_backend (comm), ==, "nccl");
  g_assert_cmpuint (mixprec_comm_get_world_size (comm), ==, 1);
  return comm;
}

static void
run_reduction (MixprecComm     *comm,
               gboolean         scatter,
               MixprecDType     dtype,
               MixprecReduceOp  op,
               MixprecCommFlags flags,
               gboolean         blocking,
               guint            salt)
{
  gsize n = scatter ? N_RS : N_AR;
  MixprecDType out = (flags & MIXPREC_COMM_RECV_FP32) ? MIXPREC_DTYPE_FLOAT32 : dtype;
  gboolean accumulate = (flags & MIXPREC_COMM_ACCUMULATE) != 0;
  g_autofree gpointer send = make_input (dtype, 0, 1, n, salt);
  /* recv's first terms: another rank's values, so zeros of the other sign */
  g_autofree gpointer first = make_input (out, 1, 2, n, salt ^ 0x5a5a);
  g_autofree gpointer result = NULL;
  g_autoptr(GError) error = NULL;
  gpointer d_send = device_copy_of (send, n * esize (dtype));
  gpointer d_recv = device_copy_of (first, n * esize (out));
  gboolean ok;

  if (blocking)
    ok = scatter
      ? mixprec_comm_reduce_scatter (comm, d_send, d_recv, n, dtype, op, flags, &error)
      : mixprec_comm_all_reduce (comm, d_send, d_recv, n, dtype, op, flags, &error);
  else
    {
      MixprecCommRequest *request = scatter
        ? mixprec_comm_reduce_scatter_start (comm, d_send, d_recv, n, dtype, op, flags, &error)
        : mixprec_comm_all_reduce_start (comm, d_send, d_recv, n, dtype, op, flags, &error);

      g_assert_no_error (error);
      ok = mixprec_comm_request_wait (request, &error);
      mixprec_comm_request_free (request);
    }
  g_assert_no_error (error);
  g_assert_true (ok);

  result = host_copy_of (d_recv, n * esize (out));
  for (gsize i = 0; i < n; i++)
    {
      gfloat term = bits_value (dtype, load_bits (dtype, send, i));
      gfloat f = bits_value (out, load_bits (out, first, i));
      gfloat want = expected (op, accumulate, f, term);
      guint32 got = load_bits (out, result, i);

      if (!matches (out, got, want))
        g_error ("%s %s %s flags %u %s: element %" G_GSIZE_FORMAT ": got 0x%x (%g), expected "
                 "%a (first %a, term %a)", scatter ? "reduce_scatter" : "all_reduce",
                 mixprec_dtype_get_name (dtype), op == MIXPREC_REDUCE_SUM ? "sum" : "max",
                 flags, blocking ? "blocking" : "started", i, got, bits_value (out, got),
                 (double) want, (double) f, (double) term);
    }
  check_cuda (cudaFree (d_send), "cudaFree");
  check_cuda (cudaFree (d_recv), "cudaFree");
}

static void
test_reductions (void)
{
  static const MixprecCommFlags flag_sets[] = {
    0, MIXPREC_COMM_ACCUMULATE, MIXPREC_COMM_RECV_FP32,
    MIXPREC_COMM_ACCUMULATE | MIXPREC_COMM_RECV_FP32,
  };
  g_autoptr(MixprecComm) comm = NULL;
  guint salt = 1;

  SKIP_WITHOUT_GPU ();
  comm = open_world_of_one ();
  for (gsize d = 0; d < G_N_ELEMENTS (dtypes); d++)
    for (gsize f = 0; f < G_N_ELEMENTS (flag_sets); f++)
      for (int op = MIXPREC_REDUCE_SUM; op <= MIXPREC_REDUCE_MAX; op++)
        for (int scatter = 0; scatter < 2; scatter++)
          for (int blocking = 0; blocking < 2; blocking++)
            run_reduction (comm, scatter, dtypes[d], (MixprecReduceOp) op, flag_sets[f],
                           blocking, salt++);
}

/* all_gather, broadcast and barrier move bits unchanged; several requests
 * outstanding at once finish in any order. */
static void
test_data_movement (void)
{
  g_autoptr(MixprecComm) comm = NULL;

  SKIP_WITHOUT_GPU ();
  comm = open_world_of_one ();
  for (gsize d = 0; d < G_N_ELEMENTS (dtypes); d++)
    {
      MixprecDType dtype = dtypes[d];
      gsize bytes = N_AR * esize (dtype);
      g_autofree gpointer a = make_input (dtype, 0, 1, N_AR, 77 + d);
      g_autofree gpointer b = make_input (dtype, 0, 1, N_AR, 99 + d);
      g_autofree gpointer got_gather = NULL, got_bcast = NULL, got_inplace = NULL;
      g_autoptr(GError) error = NULL;
      gpointer d_a = device_copy_of (a, bytes);
      gpointer d_b = device_copy_of (b, bytes);
      gpointer d_out = device_copy_of (b, bytes);
      MixprecCommRequest *r_gather, *r_bcast, *r_barrier;

      g_assert_true (mixprec_comm_all_gather (comm, d_a, d_out, N_AR, dtype, &error));
      g_assert_no_error (error);
      got_gather = host_copy_of (d_out, bytes);
      g_assert_cmpmem (got_gather, bytes, a, bytes);
      /* in place: send is recv + rank * count */
      g_assert_true (mixprec_comm_all_gather (comm, d_out, d_out, N_AR, dtype, &error));
      g_assert_no_error (error);
      g_assert_true (mixprec_comm_broadcast (comm, d_b, N_AR, dtype, 0, &error));
      g_assert_no_error (error);
      g_assert_true (mixprec_comm_barrier (comm, &error));
      g_assert_no_error (error);

      check_cuda (cudaMemcpy (d_out, b, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
      check_cuda (cudaDeviceSynchronize (), "cudaDeviceSynchronize");
      r_gather = mixprec_comm_all_gather_start (comm, d_a, d_out, N_AR, dtype, &error);
      g_assert_no_error (error);
      r_bcast = mixprec_comm_broadcast_start (comm, d_b, N_AR, dtype, 0, &error);
      g_assert_no_error (error);
      r_barrier = mixprec_comm_barrier_start (comm, &error);
      g_assert_no_error (error);
      g_assert_true (mixprec_comm_request_wait (r_barrier, &error));
      g_assert_true (mixprec_comm_request_wait (r_bcast, &error));
      g_assert_true (mixprec_comm_request_wait (r_gather, &error));
      g_assert_no_error (error);
      mixprec_comm_request_free (r_barrier);
      mixprec_comm_request_free (r_bcast);
      mixprec_comm_request_free (r_gather);

      got_inplace = host_copy_of (d_out, bytes);
      got_bcast = host_copy_of (d_b, bytes);
      g_assert_cmpmem (got_inplace, bytes, a, bytes);
      g_assert_cmpmem (got_bcast, bytes, b, bytes);
      check_cuda (cudaFree (d_a), "cudaFree");
      check_cuda (cudaFree (d_b), "cudaFree");
      check_cuda (cudaFree (d_out), "cudaFree");
    }
}

/* Straight through the vtable: the plugin's own argument checks, empty
 * collectives, the caller's stream, and abort(). */
/* Revision 2's all_to_all and all_to_all_v in a world of one, straight
 * through the vtable: this rank's own run, copied on the device, and
 * nothing else touched. */
static void
test_plugin_all_to_all (void)
{
  const MixprecCommV2 *vt;
  FakeWorld w = { 0 };
  MixprecBootstrapV1 b = fake_bootstrap (&w, 0, 1);
  MixprecCommInitV1 args = { sizeof args, &b, 20000, NULL };
  guint8 host_in[64], host_out[64];
  g_autofree guint8 *got = NULL, *got_v = NULL;
  size_t len = 24, send_at = 8, recv_at = 20;
  char errbuf[512] = "";
  void *handle = NULL, *request = NULL;
  gpointer d_in, d_out;

  SKIP_WITHOUT_GPU ();
  vt = (const MixprecCommV2 *) plugin_vtable ();
  g_assert_nonnull (vt->all_to_all_v);
  for (guint i = 0; i < sizeof host_in; i++)
    {
      host_in[i] = (guint8) (i * 37 + 11);
      host_out[i] = 0xA5;
    }
  g_assert_cmpint (vt->base.init (&args, &handle, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  d_in = device_copy_of (host_in, sizeof host_in);
  d_out = device_copy_of (host_out, sizeof host_out);
  g_assert_cmpint (vt->all_to_all (handle, d_in, d_out, sizeof host_in, NULL, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_OK);
  got = host_copy_of (d_out, sizeof host_out);
  g_assert_cmpmem (got, sizeof host_in, host_in, sizeof host_in);
  check_cuda (cudaMemcpy (d_out, host_out, sizeof host_out, cudaMemcpyHostToDevice), "cudaMemcpy");
  g_assert_cmpint (vt->all_to_all_v (handle, d_in, &len, &send_at, d_out, &len, &recv_at, &request,
                                     errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpint (vt->base.wait (handle, request, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  got_v = host_copy_of (d_out, sizeof host_out);
  memcpy (host_out + recv_at, host_in + send_at, len);
  g_assert_cmpmem (got_v, sizeof host_out, host_out, sizeof host_out);
  check_cuda (cudaFree (d_in), "cudaFree");
  check_cuda (cudaFree (d_out), "cudaFree");
  g_assert_cmpint (vt->base.finalize (handle, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
}

static void
test_plugin_direct (void)
{
  const MixprecCommV1 *vt;
  FakeWorld w = { 0 };
  MixprecBootstrapV1 b = fake_bootstrap (&w, 0, 1);
  MixprecCommInitV1 args = { sizeof args, &b, 20000, NULL };
  float host_in[8] = { 1, -2, 3.5f, 0, 5, 6, 7, 8 }, host_acc[8] = { 0.5f, 0.5f, 0.5f, 0.5f,
                                                                      0.5f, 0.5f, 0.5f, 0.5f };
  g_autofree gpointer got = NULL;
  char errbuf[512] = "";
  cudaStream_t stream;
  void *handle = NULL, *request = NULL;
  gpointer d_in, d_acc;
  int done = 0;

  SKIP_WITHOUT_GPU ();
  vt = plugin_vtable ();
  check_cuda (cudaStreamCreate (&stream), "cudaStreamCreate");
  args.device_stream = stream;
  g_assert_cmpint (vt->init (&args, &handle, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  d_in = device_copy_of (host_in, sizeof host_in);
  d_acc = device_copy_of (host_acc, sizeof host_acc);

  g_assert_cmpint (vt->all_reduce (handle, NULL, d_acc, 8, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                   MIXPREC_PLUGIN_REDUCE_SUM, 0, NULL, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "send buffer is NULL"));
  g_assert_cmpint (vt->all_gather (handle, d_in, d_acc, 8, MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3,
                                   NULL, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_ERR_UNSUPPORTED);
  g_assert_cmpint (vt->broadcast (handle, d_in, 8, MIXPREC_PLUGIN_DTYPE_FLOAT32, 1, NULL,
                                  errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_nonnull (strstr (errbuf, "root 1"));
  g_assert_cmpint (vt->reduce_scatter (handle, d_in, d_in, 8, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                       MIXPREC_PLUGIN_REDUCE_SUM, MIXPREC_PLUGIN_COMM_ACCUMULATE,
                                       NULL, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  g_assert_cmpint (vt->all_reduce (handle, d_in, d_acc, 8, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                   (MixprecPluginReduceOp) 7, 0, NULL, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT);
  /* Zero elements: NULL buffers are fine and the request completes. */
  g_assert_cmpint (vt->all_reduce (handle, NULL, NULL, 0, MIXPREC_PLUGIN_DTYPE_BFLOAT16,
                                   MIXPREC_PLUGIN_REDUCE_SUM, MIXPREC_PLUGIN_COMM_RECV_FP32,
                                   &request, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpint (vt->wait (handle, request, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);

  /* After the argument errors the communicator still works, on the
   * caller's stream: test() until done, then wait(). */
  g_assert_cmpint (vt->all_reduce (handle, d_in, d_acc, 8, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                   MIXPREC_PLUGIN_REDUCE_SUM, MIXPREC_PLUGIN_COMM_ACCUMULATE,
                                   &request, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  for (guint spins = 0; !done; spins++)
    {
      g_assert_cmpint (vt->test (handle, request, &done, errbuf, sizeof errbuf), ==,
                       MIXPREC_PLUGIN_OK);
      g_assert_cmpuint (spins, <, 10000000);
    }
  g_assert_cmpint (vt->wait (handle, request, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  got = host_copy_of (d_acc, sizeof host_acc);
  for (int i = 0; i < 8; i++)
    g_assert_cmpfloat (((float *) got)[i], ==, host_in[i] + 0.5f);

  vt->abort (handle);
  vt->abort (handle);           /* a second abort changes nothing */
  g_assert_cmpint (vt->barrier (handle, NULL, errbuf, sizeof errbuf), ==,
                   MIXPREC_PLUGIN_ERR_RUNTIME);
  g_assert_nonnull (strstr (errbuf, "broken by an earlier failure"));
  g_assert_nonnull (strstr (errbuf, "aborted"));
  g_assert_cmpint (vt->finalize (handle, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);

  check_cuda (cudaFree (d_in), "cudaFree");
  check_cuda (cudaFree (d_acc), "cudaFree");
  check_cuda (cudaStreamDestroy (stream), "cudaStreamDestroy");
}

/* ------------------------------------------------------------ peer records */

/* A healthy exchange of @world records, rank 0's id 0x01 0x02 ... */
static NcclPeerRecord *
good_records (unsigned world)
{
  NcclPeerRecord *all = g_new0 (NcclPeerRecord, world);
  guint8 id[NCCL_PEER_ID_BYTES];

  for (guint i = 0; i < sizeof id; i++)
    id[i] = (guint8) (i + 1);
  for (unsigned r = 0; r < world; r++)
    nccl_peer_record_init (&all[r], MIXPREC_PLUGIN_OK, r, world, r == 0 ? id : NULL);
  return all;
}

static void
assert_records_refused (NcclPeerRecord *all,
                        size_t          len,
                        unsigned        world,
                        const gchar    *text)
{
  guint8 id[NCCL_PEER_ID_BYTES];
  char err[512] = "";
  int status = nccl_peer_check_records (all, len, world, 1, id, err, sizeof err);

  g_assert_cmpint (status, !=, MIXPREC_PLUGIN_OK);
  if (strstr (err, text) == NULL)
    g_error ("expected \"%s\" in: %s", text, err);
}

/* The unique-id exchange distrusts every record but this rank's own: no
 * GPU needed, the checks are pure. */
static void
test_peer_records (void)
{
  g_autofree NcclPeerRecord *all = good_records (3);
  guint8 id[NCCL_PEER_ID_BYTES];
  char err[512] = "";

  g_assert_cmpuint (sizeof (NcclPeerRecord), ==, 4 + NCCL_PEER_ID_BYTES + 12);
  g_assert_cmpint (nccl_peer_check_records (all, sizeof *all, 3, 1, id, err, sizeof err), ==,
                   MIXPREC_PLUGIN_OK);
  g_assert_cmpmem (id, sizeof id, all[0].id, sizeof all[0].id);

  /* Another size: another build, or junk. */
  assert_records_refused (all, sizeof *all - 1, 3, "records of 143 bytes where this rank "
                          "expects 144");
  /* A status no plugin returns. */
  all[2].status = 99;
  assert_records_refused (all, sizeof *all, 3, "rank 2 sent status 99 in the NCCL id exchange: "
                          "must be from 0 to 6");
  all[2].status = MIXPREC_PLUGIN_ERR_RUNTIME;
  assert_records_refused (all, sizeof *all, 3, "rank 2 could not open its CUDA device");
  g_free (all);

  all = good_records (3);
  all[2].magic = 0x41414141;
  assert_records_refused (all, sizeof *all, 3, "rank 2 sent an NCCL id record with magic "
                          "0x41414141");
  g_free (all);

  all = good_records (3);
  all[2].rank = 0;
  assert_records_refused (all, sizeof *all, 3, "the NCCL id record in rank 2's place says "
                          "rank 0 of a world of 3");
  g_free (all);

  all = good_records (3);
  all[0].world_size = 2;
  assert_records_refused (all, sizeof *all, 3, "says rank 0 of a world of 2, where this rank "
                          "(1) runs in a world of 3");
  g_free (all);

  /* The id comes from rank 0, and only from rank 0. */
  all = good_records (3);
  memset (all[0].id, 0, sizeof all[0].id);
  assert_records_refused (all, sizeof *all, 3, "rank 0 sent an NCCL unique id of 128 zero "
                          "bytes");
  g_free (all);

  all = good_records (3);
  all[2].id[17] = 1;
  assert_records_refused (all, sizeof *all, 3, "rank 2 sent an NCCL unique id: only rank 0 "
                          "makes the job's id");
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/comm-nccl/registered", test_registered);
  g_test_add_func ("/comm-nccl/no-device", test_no_device);
  g_test_add_func ("/comm-nccl/init-arguments", test_init_arguments);
  g_test_add_func ("/comm-nccl/init-peer-failure", test_init_peer_failure);
  g_test_add_func ("/comm-nccl/peer-records", test_peer_records);
  g_test_add_func ("/comm-nccl/gpu/reductions", test_reductions);
  g_test_add_func ("/comm-nccl/gpu/data-movement", test_data_movement);
  g_test_add_func ("/comm-nccl/gpu/plugin-direct", test_plugin_direct);
  g_test_add_func ("/comm-nccl/gpu/all-to-all", test_plugin_all_to_all);
  return g_test_run ();
}
