/* mixprec-comm.c — MixprecComm: collectives between the ranks of a
 * bootstrap, run by a communication feature of the plugin registry (the
 * built-in "local" one for a single process, comm-ucx across processes).
 * This file checks every argument before the plugin sees it and turns the
 * plugin's status and sentence into a GError. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"
#include "mixprec-comm-private.h"
#include "mixprec-registry-private.h"

/* The public enums mirror the ABI's plain-C ones value for value. */
G_STATIC_ASSERT ((int) MIXPREC_REDUCE_SUM == (int) MIXPREC_PLUGIN_REDUCE_SUM);
G_STATIC_ASSERT ((int) MIXPREC_REDUCE_MAX == (int) MIXPREC_PLUGIN_REDUCE_MAX);
G_STATIC_ASSERT ((int) MIXPREC_COMM_ACCUMULATE == (int) MIXPREC_PLUGIN_COMM_ACCUMULATE);
G_STATIC_ASSERT ((int) MIXPREC_COMM_RECV_FP32 == (int) MIXPREC_PLUGIN_COMM_RECV_FP32);

#define KNOWN_FLAGS ((guint) (MIXPREC_COMM_ACCUMULATE | MIXPREC_COMM_RECV_FP32))

/**
 * MixprecComm:
 *
 * A communicator: the collectives of data-parallel training (all-reduce,
 * reduce-scatter, all-gather, broadcast, barrier) between the ranks of a
 * #MixprecBootstrap, carried out by a communication feature of the plugin
 * registry — the built-in `local` backend for a single process, or a
 * plugin such as `comm-ucx` across processes.
 *
 * Every backend honours the same contract: a sum is formed in rank order,
 * ((x0 + x1) + x2) + ..., in FP32 also for float16 and bfloat16 buffers
 * (rounded to nearest even once, at the end), and every rank receives the
 * same bits, so a run is reproducible at a given world size.
 *
 * Every rank must call the same collectives in the same order, with the
 * same counts, dtypes and roots. Each collective has a blocking form and a
 * `_start` form returning a #MixprecCommRequest; several requests may be
 * outstanding. A communicator is used from one thread at a time (calls
 * from other threads wait for it), except mixprec_comm_abort().
 *
 * A peer that dies or stays silent for longer than the timeout makes the
 * collectives of the other ranks fail with %MIXPREC_COMM_ERROR_PEER_FAILED
 * or %MIXPREC_COMM_ERROR_TIMEOUT, naming the rank: a job never hangs. The
 * timeout counts only time without any progress, so large transfers do
 * not trip it. After such an error the communicator is broken.
 *
 * Drop the last reference on every rank at about the same time: a backend
 * may wait there for the other ranks to finish with it (comm-ucx does, at
 * most the timeout, unless the communicator is broken).
 *
 * The built-in `local` backend serves a world of one process: its
 * collectives are copies and its requests complete at once. The
 * `comm-ucx` plugin works in host memory over UCX (shared memory within a
 * host) and reads `MIXPREC_UCX_CHUNK_BYTES` (pipeline chunk, default
 * 256 KiB), `MIXPREC_UCX_WINDOW` (chunks in flight per peer, default 4),
 * `MIXPREC_UCX_REDUCTIONS` (reductions receiving at once, each holding
 * a window of (world - 1) chunks of scratch; later ones wait their turn;
 * default 2),
 * `MIXPREC_UCX_SPIN_US` and `MIXPREC_UCX_YIELD_US` (how a rank waiting
 * for UCX messages polls, yields and then sleeps), `MIXPREC_UCX_SHM`,
 * `MIXPREC_UCX_SHM_CHUNK_BYTES` and `MIXPREC_UCX_SHM_SPIN_US` (its
 * shared-memory path: when every rank runs on one host, all-reduce,
 * reduce-scatter, all-gather and barrier go through one shared segment,
 * with the same bits as over UCX) and `MIXPREC_UCX_ERROR_MODE` ("none" or "peer")
 * besides UCX's own `UCX_*` variables; it progresses only inside the
 * calls of the communicator and its requests.
 *
 * Since: 1.0
 */
struct _MixprecComm
{
  GObject parent_instance;

  MixprecBootstrap *bootstrap;  /* NULL: a world of one process */
  MixprecFeature *feature;
  const MixprecCommV1 *vtable;  /* owned by the feature */
  const MixprecCommV2 *vtable_v2;  /* the same; all_to_all NULL below revision 2 */
  guint revision;               /* the revision the plugin registered */
  void *handle;
  guint rank;
  guint world_size;
  guint timeout_ms;
  gint aborted;                 /* atomic */
  GMutex lock;                  /* one plugin call at a time, abort() excepted */
  /* The bytes this rank sent, per class and [0] to ranks on its own host,
   * [1] to ranks on other hosts (_mixprec_comm_get_sent()). */
  guint local_peers;            /* other ranks on this rank's host */
  gboolean *peer_is_local;      /* per rank: on this rank's host */
  gint next_class;              /* the class of the next collective; -1: by kind */
  guint64 sent[_MIXPREC_COMM_N_CLASSES][2];
};

G_DEFINE_FINAL_TYPE (MixprecComm, mixprec_comm, G_TYPE_OBJECT)

/**
 * mixprec_comm_error_quark:
 *
 * Gets the error domain of #MixprecComm.
 *
 * Returns: the quark behind %MIXPREC_COMM_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-comm-error-quark, mixprec_comm_error)

enum
{
  PROP_0,
  PROP_RANK,
  PROP_WORLD_SIZE,
  PROP_BACKEND,
  PROP_DEVICE,
  PROP_TIMEOUT,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

static void
mixprec_comm_finalize (GObject *object)
{
  MixprecComm *self = MIXPREC_COMM (object);

  if (self->handle != NULL)
    {
      char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
      int status = self->vtable->finalize (self->handle, errbuf, sizeof errbuf);

      errbuf[sizeof errbuf - 1] = '\0';
      if (status != MIXPREC_PLUGIN_OK)
        g_debug ("comm '%s': finalize failed: %s (status %d)",
                 mixprec_feature_get_name (self->feature), errbuf, status);
    }
  g_clear_object (&self->feature);
  g_clear_object (&self->bootstrap);
  g_free (self->peer_is_local);
  g_mutex_clear (&self->lock);

  G_OBJECT_CLASS (mixprec_comm_parent_class)->finalize (object);
}

static void
mixprec_comm_get_property (GObject    *object,
                           guint       prop_id,
                           GValue     *value,
                           GParamSpec *pspec)
{
  MixprecComm *self = MIXPREC_COMM (object);

  switch (prop_id)
    {
    case PROP_RANK:
      g_value_set_uint (value, self->rank);
      break;
    case PROP_WORLD_SIZE:
      g_value_set_uint (value, self->world_size);
      break;
    case PROP_BACKEND:
      g_value_set_string (value, mixprec_comm_get_backend (self));
      break;
    case PROP_DEVICE:
      g_value_set_string (value, mixprec_comm_get_device (self));
      break;
    case PROP_TIMEOUT:
      g_value_set_uint (value, self->timeout_ms);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_comm_class_init (MixprecCommClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags flags = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->finalize = mixprec_comm_finalize;
  object_class->get_property = mixprec_comm_get_property;

  /**
   * MixprecComm:rank:
   *
   * This process's rank, from 0 to #MixprecComm:world-size - 1.
   *
   * Since: 1.0
   */
  properties[PROP_RANK] = g_param_spec_uint ("rank", NULL, NULL, 0, G_MAXUINT, 0, flags);
  /**
   * MixprecComm:world-size:
   *
   * The number of ranks.
   *
   * Since: 1.0
   */
  properties[PROP_WORLD_SIZE] = g_param_spec_uint ("world-size", NULL, NULL, 1, G_MAXUINT, 1, flags);
  /**
   * MixprecComm:backend:
   *
   * The name of the communication feature in use, e.g. "local" or "ucx".
   *
   * Since: 1.0
   */
  properties[PROP_BACKEND] = g_param_spec_string ("backend", NULL, NULL, NULL, flags);
  /**
   * MixprecComm:device:
   *
   * The device whose memory the buffers live in, e.g. "cpu".
   *
   * Since: 1.0
   */
  properties[PROP_DEVICE] = g_param_spec_string ("device", NULL, NULL, NULL, flags);
  /**
   * MixprecComm:timeout:
   *
   * Milliseconds a collective may go without any progress before it fails.
   *
   * Since: 1.0
   */
  properties[PROP_TIMEOUT] = g_param_spec_uint ("timeout", NULL, NULL, 1, G_MAXUINT, 1, flags);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_comm_init (MixprecComm *self)
{
  g_mutex_init (&self->lock);
}

/* ------------------------------------------------------------ a world of one */

/* The bootstrap table of a communicator created without a bootstrap. */
static int
single_all_gather (void       *ctx,
                   const void *in,
                   size_t      len,
                   void       *out,
                   char       *errbuf,
                   size_t      errbuf_len)
{
  if (len > 0)
    memmove (out, in, len);
  return MIXPREC_PLUGIN_OK;
}

static int
single_barrier (void   *ctx,
                char   *errbuf,
                size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static const MixprecBootstrapV1 single_bootstrap = {
  .struct_size = sizeof (MixprecBootstrapV1),
  .rank = 0,
  .world_size = 1,
  .local_rank = 0,
  .local_world_size = 1,
  .all_gather = single_all_gather,
  .barrier = single_barrier,
};

/* ------------------------------------------------------------ choosing a backend */

/* "auto": "local" for one process; otherwise the highest-ranked feature for
 * @device that is not "local" (which serves one process only). */
static MixprecFeature *
choose_auto (MixprecRegistry  *registry,
             const gchar      *device,
             guint             world_size,
             GError          **error)
{
  g_autolist(MixprecFeature) features = mixprec_registry_get_features (registry);
  g_autoptr(GString) available = g_string_new (NULL);
  MixprecFeature *best = NULL;

  for (GList *l = features; l != NULL; l = l->next)
    {
      MixprecFeature *f = l->data;
      gboolean is_local;

      if (mixprec_feature_get_kind (f) != MIXPREC_FEATURE_KIND_COMM)
        continue;
      g_string_append_printf (available, "%s%s (%s)", available->len > 0 ? ", " : "",
                              mixprec_feature_get_name (f), mixprec_feature_get_device (f));
      if (!g_str_equal (mixprec_feature_get_device (f), device))
        continue;
      is_local = g_str_equal (mixprec_feature_get_name (f), "local");
      if (world_size == 1 && is_local)
        return g_object_ref (f);
      if (!is_local && (best == NULL || mixprec_feature_get_rank (f) > mixprec_feature_get_rank (best)))
        best = f;
    }
  if (best != NULL)
    return g_object_ref (best);

  g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_NOT_FOUND,
               "no communication backend for device '%s' serves a world of %u processes "
               "(available: %s); install a comm plugin such as comm-ucx or add its "
               "directory to MIXPREC_PLUGIN_PATH",
               device, world_size, available->len > 0 ? available->str : "none");
  return NULL;
}

static MixprecFeature *
choose_feature (const gchar  *backend,
                const gchar  *device,
                guint         world_size,
                GError      **error)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  g_autoptr(GError) local_error = NULL;
  MixprecFeature *feature;

  if (backend == NULL || g_str_equal (backend, "auto"))
    return choose_auto (registry, device, world_size, error);

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, backend,
                                           device, &local_error);
  if (feature == NULL)
    g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_NOT_FOUND,
                 "communication backend '%s': %s", backend, local_error->message);
  return feature;
}

/* ------------------------------------------------------------ construction */

/**
 * mixprec_comm_new:
 * @bootstrap: (nullable): the ranks to connect; %NULL for a world of one
 *   process
 * @backend: (nullable): a communication feature name (e.g. "ucx",
 *   "local"), or "auto" (the same as %NULL): "local" for one process,
 *   otherwise the highest-ranked communication feature for @device
 * @device: (nullable): where the buffers live: "cpu" (the default, %NULL)
 *   or a device such as "cuda" (device memory; the communicator then uses
 *   its own stream on the calling thread's current device)
 * @timeout_ms: how long, in milliseconds, a collective may go without any
 *   progress before it fails; 0 takes @bootstrap's timeout (or
 *   %MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS without one)
 * @error: return location for a #GError
 *
 * Creates a communicator between the ranks of @bootstrap. This is itself a
 * collective: every rank calls it, and the backend exchanges its
 * addresses through @bootstrap.
 *
 * Returns: (transfer full): a new communicator, or %NULL with @error set:
 *   %MIXPREC_COMM_ERROR_NOT_FOUND when the registry has no such backend
 *   for @device, %MIXPREC_COMM_ERROR_INIT when the backend failed to
 *   connect the ranks
 *
 * Since: 1.0
 */
MixprecComm *
mixprec_comm_new (MixprecBootstrap  *bootstrap,
                  const gchar       *backend,
                  const gchar       *device,
                  guint              timeout_ms,
                  GError           **error)
{
  return _mixprec_comm_new_on_stream (bootstrap, backend, device, timeout_ms, NULL, error);
}

MixprecComm *
_mixprec_comm_new_on_stream (MixprecBootstrap  *bootstrap,
                             const gchar       *backend,
                             const gchar       *device,
                             guint              timeout_ms,
                             gpointer           device_stream,
                             GError           **error)
{
  g_autoptr(MixprecComm) self = NULL;
  char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
  MixprecCommInitV1 args = { 0 };
  int status;

  g_return_val_if_fail (bootstrap == NULL || MIXPREC_IS_BOOTSTRAP (bootstrap), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  self = g_object_new (MIXPREC_TYPE_COMM, NULL);
  if (device == NULL)
    device = "cpu";
  if (bootstrap != NULL)
    {
      self->bootstrap = g_object_ref (bootstrap);
      self->rank = mixprec_bootstrap_get_rank (bootstrap);
      self->world_size = mixprec_bootstrap_get_world_size (bootstrap);
    }
  else
    {
      self->rank = 0;
      self->world_size = 1;
    }
  self->next_class = -1;
  for (guint r = 0; bootstrap != NULL && r < self->world_size; r++)
    if (r != self->rank &&
        _mixprec_bootstrap_get_host (bootstrap, r) == _mixprec_bootstrap_get_host (bootstrap, self->rank))
      self->local_peers++;
  self->peer_is_local = g_new0 (gboolean, self->world_size);
  for (guint r = 0; bootstrap != NULL && r < self->world_size; r++)
    self->peer_is_local[r] = r != self->rank &&
                             _mixprec_bootstrap_get_host (bootstrap, r) ==
                             _mixprec_bootstrap_get_host (bootstrap, self->rank);
  self->timeout_ms = timeout_ms;
  if (self->timeout_ms == 0 && bootstrap != NULL)
    self->timeout_ms = mixprec_bootstrap_get_timeout (bootstrap);
  if (self->timeout_ms == 0)
    self->timeout_ms = MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS;

  self->feature = choose_feature (backend, device, self->world_size, error);
  if (self->feature == NULL)
    return NULL;
  self->vtable = _mixprec_feature_get_comm_vtable (self->feature);
  self->vtable_v2 = _mixprec_feature_get_comm_v2 (self->feature, &self->revision);

  args.struct_size = sizeof args;
  args.bootstrap = bootstrap != NULL ? _mixprec_bootstrap_get_vtable (bootstrap) : &single_bootstrap;
  args.timeout_ms = self->timeout_ms;
  args.device_stream = device_stream;
  status = self->vtable->init (&args, &self->handle, errbuf, sizeof errbuf);
  errbuf[sizeof errbuf - 1] = '\0';
  if (status != MIXPREC_PLUGIN_OK)
    {
      self->handle = NULL;
      g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INIT,
                   "communication backend '%s' (%s, plugin %s) failed to connect rank %u "
                   "of %u: %s (%s, status %d)",
                   mixprec_feature_get_name (self->feature), device,
                   mixprec_feature_get_plugin_name (self->feature), self->rank,
                   self->world_size, errbuf[0] != '\0' ? errbuf : "it gave no reason",
                   _mixprec_plugin_status_to_string (status), status);
      return NULL;
    }
  g_debug ("comm: rank %u of %u on backend '%s' (%s), timeout %u ms", self->rank,
           self->world_size, mixprec_feature_get_name (self->feature), device, self->timeout_ms);
  return g_steal_pointer (&self);
}

/* ------------------------------------------------------------ properties */

/**
 * mixprec_comm_get_rank:
 * @self: a #MixprecComm
 *
 * Gives this process's rank in the communicator.
 *
 * Returns: this process's rank
 *
 * Since: 1.0
 */
guint
mixprec_comm_get_rank (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), 0);

  return self->rank;
}

/**
 * mixprec_comm_get_world_size:
 * @self: a #MixprecComm
 *
 * Gives the number of ranks in the communicator.
 *
 * Returns: the number of ranks
 *
 * Since: 1.0
 */
guint
mixprec_comm_get_world_size (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), 1);

  return self->world_size;
}

/**
 * mixprec_comm_get_backend:
 * @self: a #MixprecComm
 *
 * Gives the name of the communication feature this communicator runs on.
 *
 * Returns: the name of the communication feature in use, e.g. "local"
 *
 * Since: 1.0
 */
const gchar *
mixprec_comm_get_backend (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);

  return mixprec_feature_get_name (self->feature);
}

/**
 * mixprec_comm_get_device:
 * @self: a #MixprecComm
 *
 * Gives the device whose memory the collectives read and write.
 *
 * Returns: the device whose memory the buffers live in, e.g. "cpu"
 *
 * Since: 1.0
 */
const gchar *
mixprec_comm_get_device (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);

  return mixprec_feature_get_device (self->feature);
}

/**
 * mixprec_comm_get_timeout:
 * @self: a #MixprecComm
 *
 * Gives how long a collective may wait without progress before it fails
 * with %MIXPREC_COMM_ERROR_TIMEOUT.
 *
 * Returns: the milliseconds a collective may go without progress
 *
 * Since: 1.0
 */
guint
mixprec_comm_get_timeout (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), 0);

  return self->timeout_ms;
}

/**
 * mixprec_comm_supports_dtype:
 * @self: a #MixprecComm
 * @dtype: a data type
 *
 * Tells whether the communication feature in use can reduce and move
 * buffers of @dtype.
 *
 * Returns: whether the collectives accept buffers of @dtype
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_supports_dtype (MixprecComm  *self,
                             MixprecDType  dtype)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), FALSE);

  return (guint) dtype < 32 && (self->vtable->dtype_mask & (1u << dtype)) != 0;
}

MixprecFeature *
_mixprec_comm_get_feature (MixprecComm *self)
{
  return self->feature;
}

/* ------------------------------------------------------------ plugin calls */

gboolean
_mixprec_comm_check_status (MixprecComm *self,
                            int          status,
                            const char  *errbuf,
                            const gchar *what,
                            GError     **error)
{
  g_autofree gchar *suffix = NULL;
  gint code;

  if (status == MIXPREC_PLUGIN_OK)
    return TRUE;

  if (g_atomic_int_get (&self->aborted))
    code = MIXPREC_COMM_ERROR_ABORTED;
  else
    switch (status)
      {
      case MIXPREC_PLUGIN_ERR_TIMEOUT:
        code = MIXPREC_COMM_ERROR_TIMEOUT;
        break;
      case MIXPREC_PLUGIN_ERR_PEER_FAILED:
        code = MIXPREC_COMM_ERROR_PEER_FAILED;
        break;
      case MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT:
      case MIXPREC_PLUGIN_ERR_UNSUPPORTED:
        code = MIXPREC_COMM_ERROR_INVALID_ARGUMENT;
        break;
      default:
        code = MIXPREC_COMM_ERROR_FAILED;
        break;
      }
  /* a timeout names itself and where it is set */
  suffix = code == MIXPREC_COMM_ERROR_TIMEOUT
           ? g_strdup_printf ("; the timeout is %u ms (MIXPREC_TIMEOUT or mixprec.timeout)",
                              self->timeout_ms)
           : NULL;
  g_set_error (error, MIXPREC_COMM_ERROR, code,
               "%s on rank %u of %u (comm '%s'): %s (%s, status %d)%s",
               what, self->rank, self->world_size, mixprec_feature_get_name (self->feature),
               errbuf != NULL && errbuf[0] != '\0' ? errbuf : "the backend gave no reason",
               _mixprec_plugin_status_to_string (status), status, suffix != NULL ? suffix : "");
  return FALSE;
}

int
_mixprec_comm_plugin_test (MixprecComm *self,
                           void        *handle,
                           int         *done,
                           char        *errbuf,
                           size_t       errbuf_len)
{
  G_GNUC_UNUSED g_autoptr(GMutexLocker) locker = g_mutex_locker_new (&self->lock);

  return self->vtable->test (self->handle, handle, done, errbuf, errbuf_len);
}

int
_mixprec_comm_plugin_wait (MixprecComm *self,
                           void        *handle,
                           char        *errbuf,
                           size_t       errbuf_len)
{
  G_GNUC_UNUSED g_autoptr(GMutexLocker) locker = g_mutex_locker_new (&self->lock);

  return self->vtable->wait (self->handle, handle, errbuf, errbuf_len);
}

/* ------------------------------------------------------------ argument checks */

typedef enum
{
  CALL_ALL_REDUCE,
  CALL_REDUCE_SCATTER,
  CALL_ALL_GATHER,
  CALL_BROADCAST,
  CALL_BARRIER,
  CALL_ALL_TO_ALL,             /* count in bytes, dtype unused */
  CALL_ALL_TO_ALL_V,           /* runs in bytes (Call.runs), count and dtype unused */
} CallKind;

static const gchar * const call_names[] = {
  "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier", "all_to_all",
  "all_to_all_v",
};

/* One collective's arguments. */
typedef struct
{
  CallKind kind;
  const void *send;
  void *recv;
  gsize count;
  MixprecDType dtype;
  MixprecReduceOp op;
  guint flags;
  guint root;
  /* all_to_all_v: send lengths, send offsets, recv lengths, recv offsets */
  const gsize *runs[4];
} Call;

static gboolean
ranges_overlap (const void *a,
                gsize       a_len,
                const void *b,
                gsize       b_len)
{
  guintptr pa = (guintptr) a, pb = (guintptr) b;

  return a_len > 0 && b_len > 0 && pa < pb + b_len && pb < pa + a_len;
}

static gchar *
dtype_list (MixprecComm *self)
{
  gsize n;
  const MixprecDType *dtypes = mixprec_feature_get_comm_dtypes (self->feature, &n);
  g_autoptr(GString) out = g_string_new (NULL);

  for (gsize i = 0; i < n; i++)
    g_string_append_printf (out, "%s%s", i > 0 ? ", " : "", mixprec_dtype_get_name (dtypes[i]));
  return g_string_free (g_steal_pointer (&out), FALSE);
}

static gboolean
invalid (GError      **error,
         const gchar  *format,
         ...) G_GNUC_PRINTF (2, 3);

static gboolean
invalid (GError      **error,
         const gchar  *format,
         ...)
{
  va_list args;
  g_autofree gchar *message = NULL;

  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  g_set_error_literal (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT, message);
  return FALSE;
}

/* A run of the send (@is_recv FALSE) or receive buffer, for the overlap
 * check of all_to_all_v. */
typedef struct
{
  guintptr start;
  gsize len;
  gboolean is_recv;
} Run;

static gint
run_order (gconstpointer a,
           gconstpointer b)
{
  const Run *x = a, *y = b;

  return x->start < y->start ? -1 : x->start > y->start;
}

/* all_to_all_v: the runs fit the address space, this rank's own run is
 * as long on both sides, and no receive run overlaps another run (send
 * runs may overlap each other: one buffer sent to several ranks). */
static gboolean
check_runs (MixprecComm  *self,
            const Call   *call,
            GError      **error)
{
  guint w = self->world_size, me = self->rank, n = 0;
  g_autofree Run *runs = NULL;
  guintptr end_any = 0, end_recv = 0;

  if (self->vtable_v2->all_to_all_v == NULL)
    {
      g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT,
                   "all_to_all_v: comm '%s' (%s, plugin %s) has no all_to_all_v (plugin "
                   "ABI 1.7 added it; the plugin is older)",
                   mixprec_feature_get_name (self->feature), mixprec_comm_get_device (self),
                   mixprec_feature_get_plugin_name (self->feature));
      return FALSE;
    }
  for (guint k = 0; k < 4; k++)
    if (call->runs[k] == NULL)
      return invalid (error, "all_to_all_v: its array of %s is NULL",
                      (const gchar *[]) { "send sizes", "send offsets", "receive sizes",
                                          "receive offsets" }[k]);
  if (call->runs[0][me] != call->runs[2][me])
    return invalid (error, "all_to_all_v: rank %u sends itself %" G_GSIZE_FORMAT " bytes "
                    "but expects %" G_GSIZE_FORMAT, me, call->runs[0][me], call->runs[2][me]);
  runs = g_new (Run, 2 * (gsize) w);
  for (guint r = 0; r < w; r++)
    for (guint side = 0; side < 2; side++)
      {
        gsize len = call->runs[2 * side][r], off = call->runs[2 * side + 1][r];
        guintptr base = side == 0 ? (guintptr) call->send : (guintptr) call->recv;

        if (len == 0)
          continue;
        if ((side == 0 ? call->send == NULL : call->recv == NULL) ||
            off > G_MAXSIZE - len || base > UINTPTR_MAX - off - len)
          return invalid (error, "all_to_all_v: the %s run of rank %u (%" G_GSIZE_FORMAT
                          " bytes at %" G_GSIZE_FORMAT ") is outside the address space or "
                          "its buffer is NULL", side == 0 ? "send" : "receive", r, len, off);
        runs[n++] = (Run) { base + off, len, side == 1 };
      }
  qsort (runs, n, sizeof *runs, run_order);
  for (guint i = 0; i < n; i++)
    {
      if (runs[i].start < (runs[i].is_recv ? end_any : end_recv))
        return invalid (error, "all_to_all_v: a receive run overlaps another run");
      end_any = MAX (end_any, runs[i].start + runs[i].len);
      if (runs[i].is_recv)
        end_recv = MAX (end_recv, runs[i].start + runs[i].len);
    }
  return TRUE;
}

static gboolean
check_call (MixprecComm  *self,
            const Call   *call,
            GError      **error)
{
  const gchar *name = call_names[call->kind];
  gsize esize, world = self->world_size, bytes, recv_bytes;
  gboolean same_size;

  if (call->kind == CALL_BARRIER)
    return TRUE;
  if (call->kind == CALL_ALL_TO_ALL_V)
    return check_runs (self, call, error);
  if (call->kind == CALL_ALL_TO_ALL)
    {
      if (!_mixprec_comm_has_all_to_all (self, error))
        return FALSE;
      if (call->count > G_MAXSIZE / world)
        return invalid (error, "all_to_all: %" G_GSIZE_FORMAT " bytes per rank, times %u "
                        "ranks, do not fit in the address space", call->count, self->world_size);
      if (ranges_overlap (call->send, call->count * world, call->recv, call->count * world))
        return invalid (error, "all_to_all: the send and receive buffers overlap");
      return TRUE;
    }

  if (!mixprec_comm_supports_dtype (self, call->dtype))
    {
      g_autofree gchar *supported = dtype_list (self);
      g_autofree gchar *shown = mixprec_dtype_is_valid (call->dtype)
        ? g_strdup (mixprec_dtype_get_name (call->dtype))
        : g_strdup_printf ("%d (not a MixprecDType)", (int) call->dtype);

      return invalid (error, "%s: comm '%s' (%s) does not accept dtype %s; it accepts %s",
                      name, mixprec_comm_get_backend (self), mixprec_comm_get_device (self),
                      shown, supported);
    }
  esize = mixprec_dtype_get_size (call->dtype);

  if (call->kind == CALL_ALL_REDUCE || call->kind == CALL_REDUCE_SCATTER)
    {
      if (call->op != MIXPREC_REDUCE_SUM && call->op != MIXPREC_REDUCE_MAX)
        return invalid (error, "%s: operation %d is not a MixprecReduceOp (sum or max)",
                        name, (int) call->op);
      if ((call->flags & ~KNOWN_FLAGS) != 0)
        return invalid (error, "%s: flags 0x%x include bits that are not MixprecCommFlags",
                        name, call->flags);
    }
  if (call->kind == CALL_BROADCAST && call->root >= self->world_size)
    return invalid (error, "broadcast: root %u is not a rank of a world of %u processes",
                    call->root, self->world_size);

  /* The largest buffer is world * count elements (reduce_scatter's send,
   * all_gather's recv); it must be addressable. */
  if (call->count > G_MAXSIZE / esize / world)
    return invalid (error, "%s: %" G_GSIZE_FORMAT " elements of %s per rank, times %u "
                    "ranks, do not fit in the address space",
                    name, call->count, mixprec_dtype_get_name (call->dtype), self->world_size);
  bytes = call->count * esize;
  recv_bytes = (call->flags & MIXPREC_COMM_RECV_FP32) ? call->count * 4 : bytes;
  same_size = recv_bytes == bytes;

  switch (call->kind)
    {
    case CALL_ALL_REDUCE:
      if (call->send == call->recv && bytes > 0 && !same_size)
        return invalid (error, "all_reduce: an in-place all_reduce cannot use RECV_FP32 with "
                        "dtype %s: the float32 results are larger than the elements they "
                        "replace", mixprec_dtype_get_name (call->dtype));
      if (call->send != call->recv && ranges_overlap (call->send, bytes, call->recv, recv_bytes))
        return invalid (error, "all_reduce: the send and receive buffers overlap without "
                        "being the same; pass the same pointer for an in-place all_reduce");
      break;
    case CALL_REDUCE_SCATTER:
      if (call->recv == (const char *) call->send + self->rank * bytes && bytes > 0)
        {
          if (!same_size)
            return invalid (error, "reduce_scatter: an in-place reduce_scatter cannot use "
                            "RECV_FP32 with dtype %s: the float32 results are larger than "
                            "the elements they replace", mixprec_dtype_get_name (call->dtype));
          if (call->flags & MIXPREC_COMM_ACCUMULATE)
            return invalid (error, "reduce_scatter: an in-place reduce_scatter (recv at this "
                            "rank's part of send) cannot ACCUMULATE: recv would be both the "
                            "first term and this rank's contribution");
        }
      else if (ranges_overlap (call->send, bytes * world, call->recv, recv_bytes))
        return invalid (error, "reduce_scatter: the receive buffer overlaps the send buffer; "
                        "it may only be exactly this rank's part of it (send + rank * count)");
      break;
    case CALL_ALL_GATHER:
      if (call->send != (const char *) call->recv + self->rank * bytes &&
          ranges_overlap (call->send, bytes, call->recv, bytes * world))
        return invalid (error, "all_gather: the send buffer overlaps the receive buffer; "
                        "it may only be exactly this rank's part of it (recv + rank * count)");
      break;
    case CALL_BROADCAST:
    case CALL_BARRIER:
    default:
      break;
    }
  return TRUE;
}

static gchar *
describe_call (const Call *call)
{
  if (call->kind == CALL_BARRIER)
    return g_strdup ("barrier");
  if (call->kind == CALL_ALL_TO_ALL)
    return g_strdup_printf ("all_to_all of %" G_GSIZE_FORMAT " byte%s per rank", call->count,
                            call->count == 1 ? "" : "s");
  if (call->kind == CALL_ALL_TO_ALL_V)
    return g_strdup ("all_to_all_v");
  return g_strdup_printf ("%s of %" G_GSIZE_FORMAT " %s element%s", call_names[call->kind],
                          call->count, mixprec_dtype_get_name (call->dtype),
                          call->count == 1 ? "" : "s");
}

/* Adds what @call sends from this rank to the counts of its class (see
 * _mixprec_comm_get_sent() for the rule), split by where the peers are. */
static void
count_sent (MixprecComm *self,
            const Call  *call,
            gint         cls)
{
  guint64 w = self->world_size, local = self->local_peers, bytes, intra, inter;

  if (cls < 0)
    cls = call->kind == CALL_REDUCE_SCATTER || call->kind == CALL_ALL_TO_ALL ||
          call->kind == CALL_ALL_TO_ALL_V
            ? _MIXPREC_COMM_GRADIENTS
            : call->kind == CALL_ALL_REDUCE ? _MIXPREC_COMM_SCALARS : _MIXPREC_COMM_OTHER;
  if (w < 2 || call->kind == CALL_BARRIER)
    return;
  if (call->kind == CALL_ALL_TO_ALL_V)
    {
      /* each peer's run, where that peer is */
      for (guint r = 0; r < w; r++)
        if (r != self->rank)
          self->sent[cls][self->peer_is_local[r] ? 0 : 1] += call->runs[0][r];
      return;
    }
  bytes = call->kind == CALL_ALL_TO_ALL ? call->count
                                        : call->count * mixprec_dtype_get_size (call->dtype);
  switch (call->kind)
    {
    case CALL_ALL_REDUCE:
      /* a reduce-scatter then an all-gather: 2 n / W to each peer */
      intra = 2 * bytes * local / w;
      inter = 2 * bytes * (w - 1) / w - intra;
      break;
    case CALL_BROADCAST:
      intra = self->rank == call->root ? bytes * local : 0;
      inter = self->rank == call->root ? bytes * (w - 1 - local) : 0;
      break;
    case CALL_REDUCE_SCATTER:
    case CALL_ALL_GATHER:
    case CALL_ALL_TO_ALL:
    default:
      intra = bytes * local;
      inter = bytes * (w - 1 - local);
      break;
    }
  self->sent[cls][0] += intra;
  self->sent[cls][1] += inter;
}

/* Checks @call and hands it to the plugin: blocking when @request is NULL,
 * otherwise started, with the plugin's request in *request. */
static gboolean
run_call (MixprecComm  *self,
          const Call   *call,
          void        **request,
          gchar       **what,
          GError      **error)
{
  char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
  g_autofree gchar *description = NULL;
  MixprecPluginDType dtype = (MixprecPluginDType) call->dtype;
  MixprecPluginReduceOp op = (MixprecPluginReduceOp) call->op;
  int status = MIXPREC_PLUGIN_OK;
  gint cls = self->next_class;

  /* the class set for this call, and for no later one */
  self->next_class = -1;
  if (!check_call (self, call, error))
    return FALSE;
  description = describe_call (call);

  {
    G_GNUC_UNUSED g_autoptr(GMutexLocker) locker = g_mutex_locker_new (&self->lock);

    switch (call->kind)
      {
      case CALL_ALL_REDUCE:
        status = self->vtable->all_reduce (self->handle, call->send, call->recv, call->count,
                                           dtype, op, call->flags, request,
                                           errbuf, sizeof errbuf);
        break;
      case CALL_REDUCE_SCATTER:
        status = self->vtable->reduce_scatter (self->handle, call->send, call->recv,
                                               call->count, dtype, op, call->flags, request,
                                               errbuf, sizeof errbuf);
        break;
      case CALL_ALL_GATHER:
        status = self->vtable->all_gather (self->handle, call->send, call->recv, call->count,
                                           dtype, request, errbuf, sizeof errbuf);
        break;
      case CALL_BROADCAST:
        status = self->vtable->broadcast (self->handle, call->recv, call->count, dtype,
                                          call->root, request, errbuf, sizeof errbuf);
        break;
      case CALL_ALL_TO_ALL:
        status = self->vtable_v2->all_to_all (self->handle, call->send, call->recv, call->count,
                                              request, errbuf, sizeof errbuf);
        break;
      case CALL_ALL_TO_ALL_V:
        status = self->vtable_v2->all_to_all_v (self->handle, call->send, call->runs[0],
                                                call->runs[1], call->recv, call->runs[2],
                                                call->runs[3], request, errbuf, sizeof errbuf);
        break;
      case CALL_BARRIER:
      default:
        status = self->vtable->barrier (self->handle, request, errbuf, sizeof errbuf);
        break;
      }
  }
  errbuf[sizeof errbuf - 1] = '\0';
  if (!_mixprec_comm_check_status (self, status, errbuf, description, error))
    return FALSE;
  count_sent (self, call, cls);
  if (what != NULL)
    *what = g_steal_pointer (&description);
  return TRUE;
}

static gboolean
run_blocking (MixprecComm  *self,
              const Call   *call,
              GError      **error)
{
  return run_call (self, call, NULL, NULL, error);
}

static MixprecCommRequest *
run_started (MixprecComm  *self,
             const Call   *call,
             GError      **error)
{
  void *handle = NULL;
  gchar *what = NULL;

  if (!run_call (self, call, &handle, &what, error))
    return NULL;
  return _mixprec_comm_request_new (self, handle, what);
}

#define CHECK_BUFFERS(send, recv, count, val) G_STMT_START {               \
    g_return_val_if_fail (MIXPREC_IS_COMM (self), (val));                   \
    g_return_val_if_fail ((count) == 0 || ((send) != NULL && (recv) != NULL), (val)); \
    g_return_val_if_fail (error == NULL || *error == NULL, (val));          \
  } G_STMT_END

/* ------------------------------------------------------------ collectives */

/**
 * mixprec_comm_all_reduce: (skip)
 * @self: a #MixprecComm
 * @send: (nullable): @count elements of @dtype from this rank
 * @recv: (nullable): where the @count reduced elements go (float32 ones
 *   with %MIXPREC_COMM_RECV_FP32); may be @send (in place)
 * @count: the number of elements, the same on every rank
 * @dtype: the buffers' data type
 * @op: how the ranks' values combine
 * @flags: %MIXPREC_COMM_ACCUMULATE to fold the result into @recv,
 *   %MIXPREC_COMM_RECV_FP32 for a float32 @recv
 * @error: return location for a #GError
 *
 * recv[i] = op over the ranks of send[i], identical on every rank. A sum
 * is formed in rank order in FP32 and rounded once (see #MixprecComm).
 *
 * Returns: %TRUE on success; %FALSE with @error set (see #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_all_reduce (MixprecComm       *self,
                         gconstpointer      send,
                         gpointer           recv,
                         gsize              count,
                         MixprecDType       dtype,
                         MixprecReduceOp    op,
                         MixprecCommFlags   flags,
                         GError           **error)
{
  Call call = { CALL_ALL_REDUCE, send, recv, count, dtype, op, flags, 0 };

  CHECK_BUFFERS (send, recv, count, FALSE);
  return run_blocking (self, &call, error);
}

/**
 * mixprec_comm_reduce_scatter: (skip)
 * @self: a #MixprecComm
 * @send: (nullable): world size × @count elements of @dtype from this rank
 * @recv: (nullable): where this rank's @count reduced elements go (float32
 *   ones with %MIXPREC_COMM_RECV_FP32): the reduction of every rank's
 *   send[rank × @count ...]. It may be exactly
 *   this rank's part of @send (in place, without
 *   %MIXPREC_COMM_ACCUMULATE) and must not overlap @send otherwise.
 * @count: the number of elements each rank receives, the same on every rank
 * @dtype: the buffers' data type
 * @op: how the ranks' values combine
 * @flags: %MIXPREC_COMM_ACCUMULATE to fold the result into @recv,
 *   %MIXPREC_COMM_RECV_FP32 for a float32 @recv
 * @error: return location for a #GError
 *
 * The ZeRO gradient reduction: each rank receives its part of the reduced
 * buffer.
 *
 * Returns: %TRUE on success; %FALSE with @error set (see #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_reduce_scatter (MixprecComm       *self,
                             gconstpointer      send,
                             gpointer           recv,
                             gsize              count,
                             MixprecDType       dtype,
                             MixprecReduceOp    op,
                             MixprecCommFlags   flags,
                             GError           **error)
{
  Call call = { CALL_REDUCE_SCATTER, send, recv, count, dtype, op, flags, 0 };

  CHECK_BUFFERS (send, recv, count, FALSE);
  return run_blocking (self, &call, error);
}

/**
 * mixprec_comm_all_gather: (skip)
 * @self: a #MixprecComm
 * @send: (nullable): @count elements of @dtype from this rank; may be
 *   exactly this rank's part of @recv (recv + rank × @count)
 * @recv: (nullable): world size × @count elements: rank r's at r × @count
 * @count: the number of elements each rank contributes, the same on every rank
 * @dtype: the buffers' data type
 * @error: return location for a #GError
 *
 * Gathers every rank's elements on every rank.
 *
 * Returns: %TRUE on success; %FALSE with @error set (see #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_all_gather (MixprecComm   *self,
                         gconstpointer  send,
                         gpointer       recv,
                         gsize          count,
                         MixprecDType   dtype,
                         GError       **error)
{
  Call call = { CALL_ALL_GATHER, send, recv, count, dtype, MIXPREC_REDUCE_SUM, 0, 0 };

  CHECK_BUFFERS (send, recv, count, FALSE);
  return run_blocking (self, &call, error);
}

/**
 * mixprec_comm_broadcast: (skip)
 * @self: a #MixprecComm
 * @buf: (nullable): @count elements: read on @root, written on the others
 * @count: the number of elements, the same on every rank
 * @dtype: the buffer's data type
 * @root: the rank whose elements every rank receives
 * @error: return location for a #GError
 *
 * Copies @root's buffer to every rank.
 *
 * Returns: %TRUE on success; %FALSE with @error set (see #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_broadcast (MixprecComm   *self,
                        gpointer       buf,
                        gsize          count,
                        MixprecDType   dtype,
                        guint          root,
                        GError       **error)
{
  Call call = { CALL_BROADCAST, buf, buf, count, dtype, MIXPREC_REDUCE_SUM, 0, root };

  CHECK_BUFFERS (buf, buf, count, FALSE);
  return run_blocking (self, &call, error);
}

/**
 * mixprec_comm_barrier:
 * @self: a #MixprecComm
 * @error: return location for a #GError
 *
 * Returns once every rank has called it.
 *
 * Returns: %TRUE on success; %FALSE with @error set (see #MixprecCommError)
 *
 * Since: 1.0
 */
gboolean
mixprec_comm_barrier (MixprecComm  *self,
                      GError      **error)
{
  Call call = { CALL_BARRIER, NULL, NULL, 0, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, 0 };

  g_return_val_if_fail (MIXPREC_IS_COMM (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);
  return run_blocking (self, &call, error);
}

/**
 * mixprec_comm_all_reduce_start: (skip)
 * @self: a #MixprecComm
 * @send: (nullable): as for mixprec_comm_all_reduce()
 * @recv: (nullable): as for mixprec_comm_all_reduce()
 * @count: as for mixprec_comm_all_reduce()
 * @dtype: as for mixprec_comm_all_reduce()
 * @op: as for mixprec_comm_all_reduce()
 * @flags: as for mixprec_comm_all_reduce()
 * @error: return location for a #GError
 *
 * Starts mixprec_comm_all_reduce(). The buffers must stay valid and
 * untouched until the request completes.
 *
 * Returns: (transfer full): the request to wait for, or %NULL with @error
 *   set when the operation could not start
 *
 * Since: 1.0
 */
MixprecCommRequest *
mixprec_comm_all_reduce_start (MixprecComm       *self,
                               gconstpointer      send,
                               gpointer           recv,
                               gsize              count,
                               MixprecDType       dtype,
                               MixprecReduceOp    op,
                               MixprecCommFlags   flags,
                               GError           **error)
{
  Call call = { CALL_ALL_REDUCE, send, recv, count, dtype, op, flags, 0 };

  CHECK_BUFFERS (send, recv, count, NULL);
  return run_started (self, &call, error);
}

/**
 * mixprec_comm_reduce_scatter_start: (skip)
 * @self: a #MixprecComm
 * @send: (nullable): as for mixprec_comm_reduce_scatter()
 * @recv: (nullable): as for mixprec_comm_reduce_scatter()
 * @count: as for mixprec_comm_reduce_scatter()
 * @dtype: as for mixprec_comm_reduce_scatter()
 * @op: as for mixprec_comm_reduce_scatter()
 * @flags: as for mixprec_comm_reduce_scatter()
 * @error: return location for a #GError
 *
 * Starts mixprec_comm_reduce_scatter(). The buffers must stay valid and
 * untouched until the request completes.
 *
 * Returns: (transfer full): the request to wait for, or %NULL with @error
 *   set when the operation could not start
 *
 * Since: 1.0
 */
MixprecCommRequest *
mixprec_comm_reduce_scatter_start (MixprecComm       *self,
                                   gconstpointer      send,
                                   gpointer           recv,
                                   gsize              count,
                                   MixprecDType       dtype,
                                   MixprecReduceOp    op,
                                   MixprecCommFlags   flags,
                                   GError           **error)
{
  Call call = { CALL_REDUCE_SCATTER, send, recv, count, dtype, op, flags, 0 };

  CHECK_BUFFERS (send, recv, count, NULL);
  return run_started (self, &call, error);
}

/**
 * mixprec_comm_all_gather_start: (skip)
 * @self: a #MixprecComm
 * @send: (nullable): as for mixprec_comm_all_gather()
 * @recv: (nullable): as for mixprec_comm_all_gather()
 * @count: as for mixprec_comm_all_gather()
 * @dtype: as for mixprec_comm_all_gather()
 * @error: return location for a #GError
 *
 * Starts mixprec_comm_all_gather(). The buffers must stay valid and
 * untouched until the request completes.
 *
 * Returns: (transfer full): the request to wait for, or %NULL with @error
 *   set when the operation could not start
 *
 * Since: 1.0
 */
MixprecCommRequest *
mixprec_comm_all_gather_start (MixprecComm   *self,
                               gconstpointer  send,
                               gpointer       recv,
                               gsize          count,
                               MixprecDType   dtype,
                               GError       **error)
{
  Call call = { CALL_ALL_GATHER, send, recv, count, dtype, MIXPREC_REDUCE_SUM, 0, 0 };

  CHECK_BUFFERS (send, recv, count, NULL);
  return run_started (self, &call, error);
}

/**
 * mixprec_comm_broadcast_start: (skip)
 * @self: a #MixprecComm
 * @buf: (nullable): as for mixprec_comm_broadcast()
 * @count: as for mixprec_comm_broadcast()
 * @dtype: as for mixprec_comm_broadcast()
 * @root: as for mixprec_comm_broadcast()
 * @error: return location for a #GError
 *
 * Starts mixprec_comm_broadcast(). The buffer must stay valid and
 * untouched until the request completes.
 *
 * Returns: (transfer full): the request to wait for, or %NULL with @error
 *   set when the operation could not start
 *
 * Since: 1.0
 */
MixprecCommRequest *
mixprec_comm_broadcast_start (MixprecComm   *self,
                              gpointer       buf,
                              gsize          count,
                              MixprecDType   dtype,
                              guint          root,
                              GError       **error)
{
  Call call = { CALL_BROADCAST, buf, buf, count, dtype, MIXPREC_REDUCE_SUM, 0, root };

  CHECK_BUFFERS (buf, buf, count, NULL);
  return run_started (self, &call, error);
}

/**
 * mixprec_comm_barrier_start:
 * @self: a #MixprecComm
 * @error: return location for a #GError
 *
 * Starts mixprec_comm_barrier(): the request completes once every rank
 * has started its barrier.
 *
 * Returns: (transfer full): the request to wait for, or %NULL with @error
 *   set when the operation could not start
 *
 * Since: 1.0
 */
MixprecCommRequest *
mixprec_comm_barrier_start (MixprecComm  *self,
                            GError      **error)
{
  Call call = { CALL_BARRIER, NULL, NULL, 0, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, 0 };

  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);
  return run_started (self, &call, error);
}

/**
 * mixprec_comm_abort:
 * @self: a #MixprecComm
 *
 * Makes every pending and later collective of @self fail quickly with
 * %MIXPREC_COMM_ERROR_ABORTED, e.g. when this rank learns that the job is
 * going down. May be called from any thread, also while another thread
 * waits for a collective.
 *
 * Since: 1.0
 */
void
mixprec_comm_abort (MixprecComm *self)
{
  g_return_if_fail (MIXPREC_IS_COMM (self));

  g_atomic_int_set (&self->aborted, 1);
  self->vtable->abort (self->handle);
}

/* ------------------------------------------------------------ all-to-all (private) */

gboolean
_mixprec_comm_has_all_to_all (MixprecComm  *self,
                              GError      **error)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), FALSE);

  if (self->vtable_v2->all_to_all != NULL)
    return TRUE;
  g_set_error (error, MIXPREC_COMM_ERROR, MIXPREC_COMM_ERROR_INVALID_ARGUMENT,
               "all_to_all: comm '%s' (%s, plugin %s) registered communicator ABI revision "
               "%u, which has no all-to-all (revision 2, plugin ABI 1.5, added it)",
               mixprec_feature_get_name (self->feature), mixprec_comm_get_device (self),
               mixprec_feature_get_plugin_name (self->feature), self->revision);
  return FALSE;
}

gboolean
_mixprec_comm_all_to_all (MixprecComm   *self,
                          gconstpointer  send,
                          gpointer       recv,
                          gsize          bytes,
                          GError       **error)
{
  Call call = { CALL_ALL_TO_ALL, send, recv, bytes, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, 0 };

  CHECK_BUFFERS (send, recv, bytes, FALSE);
  return run_blocking (self, &call, error);
}

MixprecCommRequest *
_mixprec_comm_all_to_all_start (MixprecComm   *self,
                                gconstpointer  send,
                                gpointer       recv,
                                gsize          bytes,
                                GError       **error)
{
  Call call = { CALL_ALL_TO_ALL, send, recv, bytes, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, 0 };

  CHECK_BUFFERS (send, recv, bytes, NULL);
  return run_started (self, &call, error);
}

gboolean
_mixprec_comm_has_all_to_all_v (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), FALSE);

  return self->vtable_v2->all_to_all_v != NULL;
}

MixprecCommRequest *
_mixprec_comm_all_to_all_v_start (MixprecComm   *self,
                                  gconstpointer  send,
                                  const gsize   *send_bytes,
                                  const gsize   *send_offsets,
                                  gpointer       recv,
                                  const gsize   *recv_bytes,
                                  const gsize   *recv_offsets,
                                  GError       **error)
{
  Call call = { CALL_ALL_TO_ALL_V, send, recv, 0, MIXPREC_DTYPE_FLOAT32, MIXPREC_REDUCE_SUM, 0, 0,
                { send_bytes, send_offsets, recv_bytes, recv_offsets } };

  g_return_val_if_fail (MIXPREC_IS_COMM (self), NULL);
  return run_started (self, &call, error);
}

gboolean
_mixprec_comm_all_to_all_v (MixprecComm   *self,
                            gconstpointer  send,
                            const gsize   *send_bytes,
                            const gsize   *send_offsets,
                            gpointer       recv,
                            const gsize   *recv_bytes,
                            const gsize   *recv_offsets,
                            GError       **error)
{
  MixprecCommRequest *request = _mixprec_comm_all_to_all_v_start (self, send, send_bytes, send_offsets, recv,
                                                                  recv_bytes, recv_offsets, error);
  gboolean ok;

  if (request == NULL)
    return FALSE;
  ok = mixprec_comm_request_wait (request, error);
  mixprec_comm_request_free (request);
  return ok;
}

void
_mixprec_comm_count_next_as (MixprecComm        *self,
                             _MixprecCommClass   cls)
{
  /* NULL: one process, where nothing is sent or counted */
  if (self == NULL)
    return;
  g_return_if_fail (MIXPREC_IS_COMM (self));

  self->next_class = (gint) cls;
}

void
_mixprec_comm_get_sent (MixprecComm *self,
                        guint64      sent[_MIXPREC_COMM_N_CLASSES][2])
{
  g_return_if_fail (MIXPREC_IS_COMM (self));

  memcpy (sent, self->sent, sizeof self->sent);
}

guint
_mixprec_comm_get_host (MixprecComm *self,
                        guint        rank)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), 0);
  g_return_val_if_fail (rank < self->world_size, 0);

  return self->bootstrap != NULL ? _mixprec_bootstrap_get_host (self->bootstrap, rank) : 0;
}

guint
_mixprec_comm_get_local_peers (MixprecComm *self)
{
  g_return_val_if_fail (MIXPREC_IS_COMM (self), 0);

  return self->local_peers;
}
