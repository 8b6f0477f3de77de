/* mixprec-bootstrap.c — MixprecBootstrap: the public object, what rank 0
 * and the other ranks share (failure, addresses), and the table handed to
 * comm plugins. The rendezvous itself lives in mixprec-bootstrap-root.c
 * (rank 0) and mixprec-bootstrap-peer.c (every other rank). */
#include "config.h"

#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"

/**
 * MixprecBootstrap:
 *
 * The ranks of one job, found through the environment, joined through a
 * TCP rendezvous on rank 0, and able to exchange small blobs.
 *
 * mixprec_bootstrap_new_from_environment() reads the first complete family
 * of variables, in this order:
 *
 * - `MIXPREC_RANK`, `MIXPREC_WORLD_SIZE`, `MIXPREC_LOCAL_RANK`,
 *   `MIXPREC_LOCAL_WORLD_SIZE`, `MIXPREC_MASTER_ADDR`, `MIXPREC_MASTER_PORT`
 *   (set by `mixprec-run`);
 * - torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`,
 *   `MASTER_ADDR`, `MASTER_PORT`;
 * - Open MPI's `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE`,
 *   `OMPI_COMM_WORLD_LOCAL_RANK`, `OMPI_COMM_WORLD_LOCAL_SIZE`;
 * - Slurm's `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, and the
 *   tasks of this node from `SLURM_TASKS_PER_NODE` (e.g. `4(x2),3`, the
 *   entry of node `SLURM_NODEID`) or else `SLURM_NTASKS_PER_NODE`.
 *
 * A family counts when its rank and world-size variables are both set.
 * `MIXPREC_RANK` or `MIXPREC_WORLD_SIZE` alone is an error; so is a
 * torchrun or Open MPI pair with one half missing when no family is
 * complete. Within the chosen family the local world size needs the
 * local rank. Without a local world size (torchrun's variables set by
 * hand with `LOCAL_RANK` alone, Slurm without a task count per node, Open
 * MPI without `OMPI_COMM_WORLD_LOCAL_SIZE`, no local variables at all)
 * the rendezvous counts the ranks of each host, by host name: the local
 * world size is the number of ranks on this host, and the local rank,
 * unless given, this rank's place among them in rank order.
 *
 * Open MPI and Slurm have no rendezvous variables of their own: the
 * address and port come from `MIXPREC_MASTER_ADDR`/`MIXPREC_MASTER_PORT`,
 * else `MASTER_ADDR`/`MASTER_PORT`. Without an address, Open MPI uses
 * 127.0.0.1 when all ranks share this host (local size = size; otherwise
 * the address is required), and Slurm uses the first host of
 * `SLURM_JOB_NODELIST` (or `SLURM_NODELIST`), so `node[01-04,07],gpu5`
 * gives `node01`. Without a port, both derive one that every rank of the
 * job agrees on: Open MPI 20000 + (32-bit FNV-1a of the first of
 * `OMPI_MCA_orte_ess_jobid`, `OMPI_MCA_ess_base_jobid`, `PMIX_NAMESPACE`)
 * mod 10000; Slurm 20000 + `SLURM_JOB_ID` mod 10000, or without
 * `SLURM_JOB_ID` torchrun's default port 29500, with a message saying so.
 * Two jobs on the same rank-0 host may collide on such a port; set one
 * explicitly then.
 *
 * When the rendezvous host is given by name and that name resolves to a
 * loopback address on rank 0 (an /etc/hosts entry such as Debian's
 * 127.0.1.1 for the host's own name), rank 0 warns, naming the address,
 * unless every rank is known to run on its host: ranks elsewhere could
 * never connect.
 *
 * `MIXPREC_TIMEOUT` (seconds, fractions allowed) sets the timeout when
 * the caller passes 0 (else the deprecated `MIXPREC_COMM_TIMEOUT_MS`, in
 * milliseconds); without either the timeout is
 * %MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS.
 *
 * With one rank no socket is opened and the collectives copy locally.
 * Otherwise rank 0 listens on the rendezvous address (that address only)
 * and the other ranks connect to it, retrying until the timeout. Rank 0
 * admits each rank once, refuses duplicates, ranks out of range and
 * world-size mismatches, and waits up to the timeout for every rank; any
 * refusal or absence fails every rank with the same message. After that
 * each collective goes through rank 0: every rank sends its blob, rank 0
 * answers with the concatenation. A rank that closes its connection or
 * stays silent for longer than the timeout fails the collective on every
 * rank, and every later call fails at once: a bootstrap never hangs and
 * is not reused after a failure.
 *
 * The timeout bounds how far apart the ranks may enter the same call
 * (and how long the rendezvous may take). The collectives are meant for
 * control messages: at most 64 MiB gathered per call.
 *
 * Calls are collective: every rank makes the same calls in the same
 * order, one thread at a time per bootstrap. mixprec_bootstrap_abort() is
 * the exception and may be called from any thread.
 *
 * Since: 1.0
 */

G_DEFINE_FINAL_TYPE (MixprecBootstrap, mixprec_bootstrap, G_TYPE_OBJECT)

/**
 * mixprec_bootstrap_error_quark:
 *
 * Gets the error domain of #MixprecBootstrap.
 *
 * Returns: the quark behind %MIXPREC_BOOTSTRAP_ERROR
 *
 * Since: 1.0
 */
G_DEFINE_QUARK (mixprec-bootstrap-error-quark, mixprec_bootstrap_error)

enum
{
  PROP_0,
  PROP_RANK,
  PROP_WORLD_SIZE,
  PROP_LOCAL_RANK,
  PROP_LOCAL_WORLD_SIZE,
  PROP_TIMEOUT,
  PROP_SOURCE,
  PROP_MASTER_ADDR,
  PROP_MASTER_PORT,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

const gchar *
_mixprec_bootstrap_kind_name (guint kind)
{
  return kind == MIXPREC_BOOTSTRAP_KIND_BARRIER ? "barrier" : "all_gather";
}

/* How much longer a rank waits for rank 0 than rank 0 waits for the
 * slowest rank, so that rank 0's explanation arrives before a rank gives
 * up on its own with a vaguer one. */
gint64
_mixprec_bootstrap_slack_us (MixprecBootstrap *self)
{
  return (gint64) MIN (self->timeout_ms, 1000u) * 1000;
}

gint64
_mixprec_bootstrap_deadline (MixprecBootstrap *self)
{
  return g_get_monotonic_time () + (gint64) self->timeout_ms * 1000;
}

/* The rendezvous's WELCOME carries, for every rank, the lowest rank on
 * the same host (32-bit, in rank order): the local rank is the number of
 * ranks before this one with the same id, the local world size the number
 * with the same id. Used only when the environment gave no local world
 * size; a LOCAL_RANK it did give is kept. */
void
_mixprec_bootstrap_apply_hosts (MixprecBootstrap *self,
                                const guint8     *ids,
                                gsize             len)
{
  guint32 mine;
  guint before = 0, count = 0;

  /* Kept for the byte counts of communicators (intra- or inter-host). */
  if (len == (gsize) self->world_size * 4)
    {
      g_free (self->hosts);
      self->hosts = g_new (guint32, self->world_size);
      for (guint r = 0; r < self->world_size; r++)
        self->hosts[r] = _mixprec_wire_get_u32 (ids + (gsize) r * 4);
    }
  if (!self->local_from_hosts || len != (gsize) self->world_size * 4)
    return;
  mine = _mixprec_wire_get_u32 (ids + (gsize) self->rank * 4);
  for (guint r = 0; r < self->world_size; r++)
    if (_mixprec_wire_get_u32 (ids + (gsize) r * 4) == mine)
      {
        before += r < self->rank;
        count++;
      }
  if (self->local_rank_given)
    self->local_world_size = MAX (count, self->local_rank + 1);
  else
    {
      self->local_rank = before;
      self->local_world_size = count;
    }
}

guint
_mixprec_bootstrap_get_host (MixprecBootstrap *self,
                             guint             rank)
{
  if (self->hosts == NULL || rank >= self->world_size)
    return rank;
  return self->hosts[rank];
}

/* Rank 0 listens on a loopback address although the rendezvous host was
 * given by name, and ranks are expected on other hosts: they will never
 * connect. The classic cause is /etc/hosts mapping the host's own name to
 * 127.0.1.1 (Debian) or 127.0.0.1. Returns the warning, or NULL. */
gchar *
_mixprec_bootstrap_loopback_warning (const gchar  *master_addr,
                                     GInetAddress *bound,
                                     guint         local_world_size,
                                     guint         world_size)
{
  g_autofree gchar *shown = NULL;

  if (master_addr == NULL || _mixprec_bootstrap_is_loopback (master_addr)
      || !g_inet_address_get_is_loopback (bound) || local_world_size >= world_size)
    return NULL;
  shown = g_inet_address_to_string (bound);
  return g_strdup_printf ("rank 0 listens on %s, a loopback address, because the rendezvous "
                          "host '%s' resolves to it on rank 0's host (an /etc/hosts entry?): "
                          "any ranks on other hosts cannot connect. Set MIXPREC_MASTER_ADDR "
                          "(or MASTER_ADDR) to an address of rank 0's host that the other "
                          "hosts reach, or fix the host name's entry in /etc/hosts",
                          shown, master_addr);
}

/* ------------------------------------------------------------ failure */

static void
shutdown_sockets (MixprecBootstrap *self)
{
  if (self->root != NULL)
    g_socket_shutdown (self->root->socket, TRUE, TRUE, NULL);
  if (self->peers != NULL)
    for (guint r = 1; r < self->world_size; r++)
      if (self->peers[r] != NULL)
        g_socket_shutdown (self->peers[r]->socket, TRUE, TRUE, NULL);
}

/* Records @error as this bootstrap's failure, tells every rank rank 0 can
 * still reach (so they fail with the same explanation), and closes the
 * connections so nobody waits for this process any longer. */
void
_mixprec_bootstrap_fail (MixprecBootstrap *self,
                         const GError     *error)
{
  if (self->failure == NULL)
    self->failure = g_error_copy (error);

  if (self->rank == 0 && !g_cancellable_is_cancelled (self->cancellable))
    _mixprec_bootstrap_root_tell_failure (self, error);
  shutdown_sockets (self);
  if (self->pending != NULL)
    g_ptr_array_set_size (self->pending, 0);
  if (self->listener != NULL)
    g_socket_close (self->listener, NULL);
}

/* Sets @error and fails the bootstrap with it. */
void
_mixprec_bootstrap_fail_with (MixprecBootstrap     *self,
                              GError              **error,
                              MixprecBootstrapError code,
                              const gchar          *format,
                              ...)
{
  GError *local = NULL;
  va_list args;

  va_start (args, format);
  local = g_error_new_valist (MIXPREC_BOOTSTRAP_ERROR, code, format, args);
  va_end (args);
  _mixprec_bootstrap_fail (self, local);
  g_propagate_error (error, local);
}

void
_mixprec_bootstrap_set_aborted (MixprecBootstrap *self,
                                GError          **error)
{
  g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CLOSED,
               "the bootstrap of rank %u was aborted", self->rank);
}

/* An abort seen during a call: fail it, and the bootstrap, as aborted. */
void
_mixprec_bootstrap_fail_aborted (MixprecBootstrap *self,
                                 GError          **error)
{
  GError *local = NULL;

  _mixprec_bootstrap_set_aborted (self, &local);
  _mixprec_bootstrap_fail (self, local);
  g_propagate_error (error, local);
}

static gboolean
check_usable (MixprecBootstrap *self,
              GError          **error)
{
  if (g_cancellable_is_cancelled (self->cancellable))
    {
      _mixprec_bootstrap_set_aborted (self, error);
      return FALSE;
    }
  if (self->failure != NULL)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, self->failure->code,
                   "an earlier bootstrap call failed, so this one cannot run: %s",
                   self->failure->message);
      return FALSE;
    }
  return TRUE;
}

/* ------------------------------------------------------------ sockets */

void
_mixprec_bootstrap_tune_socket (GSocket *socket)
{
  g_socket_set_blocking (socket, FALSE);
  /* request and reply are small and latency-bound: no Nagle delay */
  g_socket_set_option (socket, IPPROTO_TCP, TCP_NODELAY, 1, NULL);
}

GList *
_mixprec_bootstrap_resolve (MixprecBootstrap *self,
                            GError          **error)
{
  GInetAddress *numeric = g_inet_address_new_from_string (self->master_addr);
  g_autoptr(GResolver) resolver = NULL;
  g_autoptr(GError) local = NULL;
  GList *list;

  if (numeric != NULL)
    return g_list_prepend (NULL, numeric);
  resolver = g_resolver_get_default ();
  list = g_resolver_lookup_by_name (resolver, self->master_addr, self->cancellable, &local);
  if (list == NULL)
    g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                 "cannot resolve the rendezvous host \"%s\" (rank 0's address): %s",
                 self->master_addr, local->message);
  return list;
}

/* ------------------------------------------------------------ object */

static void
mixprec_bootstrap_finalize (GObject *object)
{
  MixprecBootstrap *self = MIXPREC_BOOTSTRAP (object);

  if (self->peers != NULL)
    for (guint r = 1; r < self->world_size; r++)
      _mixprec_wire_conn_free (self->peers[r]);
  g_free (self->peers);
  g_clear_pointer (&self->pending, g_ptr_array_unref);
  g_clear_pointer (&self->root, _mixprec_wire_conn_free);
  if (self->listener != NULL)
    g_socket_close (self->listener, NULL);
  g_clear_object (&self->listener);
  g_clear_object (&self->cancellable);
  g_clear_pointer (&self->secret, g_bytes_unref);
  g_clear_error (&self->failure);
  g_free (self->master_addr);
  g_free (self->hosts);

  G_OBJECT_CLASS (mixprec_bootstrap_parent_class)->finalize (object);
}

static void
mixprec_bootstrap_get_property (GObject    *object,
                                guint       prop_id,
                                GValue     *value,
                                GParamSpec *pspec)
{
  MixprecBootstrap *self = MIXPREC_BOOTSTRAP (object);

  switch (prop_id)
    {
    case PROP_RANK:
      g_value_set_uint (value, self->rank);
      break;
    case PROP_WORLD_SIZE:
      g_value_set_uint (value, self->world_size);
      break;
    case PROP_LOCAL_RANK:
      g_value_set_uint (value, self->local_rank);
      break;
    case PROP_LOCAL_WORLD_SIZE:
      g_value_set_uint (value, self->local_world_size);
      break;
    case PROP_TIMEOUT:
      g_value_set_uint (value, self->timeout_ms);
      break;
    case PROP_SOURCE:
      g_value_set_string (value, self->source);
      break;
    case PROP_MASTER_ADDR:
      g_value_set_string (value, self->master_addr);
      break;
    case PROP_MASTER_PORT:
      g_value_set_uint (value, self->master_port);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_bootstrap_class_init (MixprecBootstrapClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags flags = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->finalize = mixprec_bootstrap_finalize;
  object_class->get_property = mixprec_bootstrap_get_property;

  /**
   * MixprecBootstrap:rank:
   *
   * This process's rank, from 0 to #MixprecBootstrap:world-size - 1.
   *
   * Since: 1.0
   */
  properties[PROP_RANK] = g_param_spec_uint ("rank", NULL, NULL, 0, G_MAXUINT, 0, flags);
  /**
   * MixprecBootstrap:world-size:
   *
   * The number of ranks of the job.
   *
   * Since: 1.0
   */
  properties[PROP_WORLD_SIZE] = g_param_spec_uint ("world-size", NULL, NULL,
                                                   1, G_MAXUINT, 1, flags);
  /**
   * MixprecBootstrap:local-rank:
   *
   * This process's rank among the ranks on its host.
   *
   * Since: 1.0
   */
  properties[PROP_LOCAL_RANK] = g_param_spec_uint ("local-rank", NULL, NULL,
                                                   0, G_MAXUINT, 0, flags);
  /**
   * MixprecBootstrap:local-world-size:
   *
   * The number of ranks on this process's host.
   *
   * Since: 1.0
   */
  properties[PROP_LOCAL_WORLD_SIZE] = g_param_spec_uint ("local-world-size", NULL, NULL,
                                                         1, G_MAXUINT, 1, flags);
  /**
   * MixprecBootstrap:timeout:
   *
   * How long, in milliseconds, the rendezvous may take and how far apart
   * the ranks may enter the same collective.
   *
   * Since: 1.0
   */
  properties[PROP_TIMEOUT] = g_param_spec_uint ("timeout", NULL, NULL, 1, G_MAXUINT,
                                                MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS, flags);
  /**
   * MixprecBootstrap:source:
   *
   * Where the ranks came from: "mixprec", "torchrun", "openmpi" or
   * "slurm" (the variable family used), "explicit" (mixprec_bootstrap_new())
   * or "single" (no variables: one rank).
   *
   * Since: 1.0
   */
  properties[PROP_SOURCE] = g_param_spec_string ("source", NULL, NULL, NULL, flags);
  /**
   * MixprecBootstrap:master-addr:
   *
   * The host rank 0 listens on; %NULL with one rank.
   *
   * Since: 1.0
   */
  properties[PROP_MASTER_ADDR] = g_param_spec_string ("master-addr", NULL, NULL, NULL, flags);
  /**
   * MixprecBootstrap:master-port:
   *
   * The TCP port rank 0 listens on; 0 with one rank.
   *
   * Since: 1.0
   */
  properties[PROP_MASTER_PORT] = g_param_spec_uint ("master-port", NULL, NULL, 0, G_MAXUINT16,
                                                    0, flags);
  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_bootstrap_init (MixprecBootstrap *self)
{
  self->cancellable = g_cancellable_new ();
  self->listen_fd = -1;
}

/* A job without a secret admits whoever connects first: say so once per
 * process, or refuse when the job asked for a secret. */
static gboolean
check_secret (const MixprecBootstrapSettings *s,
              gboolean                        require_secret,
              GError                        **error)
{
  static gsize warned = 0;

  if (s->secret != NULL || s->world_size <= 1)
    return TRUE;
  if (require_secret || s->require_secret)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "this job requires a job secret (%s), but neither MIXPREC_JOB_SECRET "
                   "nor MIXPREC_JOB_SECRET_FILE is set; mixprec-run sets one, other "
                   "launchers need it exported to every rank (see libmixprec(7))",
                   s->require_secret ? "MIXPREC_REQUIRE_JOB_SECRET=1"
                   : "mixprec.require_job_secret");
      return FALSE;
    }
  if (g_once_init_enter (&warned))
    {
      g_warning ("the rendezvous of rank %u of %u is unauthenticated: any process that "
                 "reaches %s:%u can join the job or pose as rank 0. Set MIXPREC_JOB_SECRET "
                 "(or MIXPREC_JOB_SECRET_FILE) on every rank, as mixprec-run does",
                 s->rank, s->world_size, s->master_addr, s->master_port);
      g_once_init_leave (&warned, 1);
    }
  return TRUE;
}

static MixprecBootstrap *
create (const MixprecBootstrapSettings *s,
        guint                           timeout_ms,
        gboolean                        require_secret,
        GError                        **error)
{
  g_autoptr(MixprecBootstrap) self = NULL;

  if (!check_secret (s, require_secret, error))
    return NULL;
  self = g_object_new (MIXPREC_TYPE_BOOTSTRAP, NULL);
  self->rank = s->rank;
  self->world_size = s->world_size;
  self->local_rank = s->local_rank;
  self->local_world_size = s->local_world_size;
  self->local_from_hosts = s->local_from_hosts;
  self->local_rank_given = s->local_rank_given;
  self->source = s->source;
  self->timeout_ms = timeout_ms != 0 ? timeout_ms
                     : s->timeout_ms != 0 ? s->timeout_ms : MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS;
  if (self->world_size > 1)
    {
      self->master_addr = g_strdup (s->master_addr);
      self->master_port = s->master_port;
      self->secret = s->secret != NULL ? g_bytes_ref (s->secret) : NULL;
      self->listen_fd = self->rank == 0 ? s->listen_fd : -1;
      gboolean joined = self->rank == 0 ? _mixprec_bootstrap_root_setup (self, error)
                                        : _mixprec_bootstrap_peer_join (self, error);
      if (!joined)
        return NULL;
    }
  return g_steal_pointer (&self);
}

/* mixprec_bootstrap_new_from_environ(), and the job secret required when
 * @require_secret (mixprec.require_job_secret: the engine knows its
 * config, the public constructors do not). */
MixprecBootstrap *
_mixprec_bootstrap_new_from_environ_full (const gchar * const *envp,
                                          guint                timeout_ms,
                                          gboolean             require_secret,
                                          GError             **error)
{
  MixprecBootstrapSettings settings;
  MixprecBootstrap *self = NULL;

  if (!_mixprec_bootstrap_parse_environ (envp, &settings, error))
    return NULL;
  if (_mixprec_bootstrap_security_from_environ (envp, &settings, error))
    self = create (&settings, timeout_ms, require_secret, error);
  _mixprec_bootstrap_settings_clear (&settings);
  return self;
}

/**
 * mixprec_bootstrap_new_from_environ:
 * @envp: (nullable) (array zero-terminated=1): the environment to read, as
 *   `NAME=value` strings; %NULL reads the process environment
 * @timeout_ms: the timeout in milliseconds; 0 uses `MIXPREC_TIMEOUT`
 *   (seconds) when set, else %MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS
 * @error: return location for a #GError
 *
 * Finds this process's rank and the rendezvous from the variables of
 * @envp (see #MixprecBootstrap for the families and their order) and
 * joins the other ranks. Blocks until every rank has joined, or fails
 * within the timeout.
 *
 * Returns: (transfer full): a bootstrap, or %NULL with @error set:
 *   %MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT naming the variable and value at
 *   fault, %MIXPREC_BOOTSTRAP_ERROR_CONNECT when rank 0 cannot listen or
 *   cannot be reached, %MIXPREC_BOOTSTRAP_ERROR_TIMEOUT naming the ranks
 *   that did not join, %MIXPREC_BOOTSTRAP_ERROR_PROTOCOL for a duplicate
 *   rank or mismatched world sizes, %MIXPREC_BOOTSTRAP_ERROR_CLOSED when
 *   rank 0 went away.
 *
 * Since: 1.0
 */
MixprecBootstrap *
mixprec_bootstrap_new_from_environ (const gchar * const *envp,
                                    guint                timeout_ms,
                                    GError             **error)
{
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  return _mixprec_bootstrap_new_from_environ_full (envp, timeout_ms, FALSE, error);
}

/**
 * mixprec_bootstrap_new_from_environment:
 * @timeout_ms: the timeout in milliseconds; 0 uses `MIXPREC_TIMEOUT`
 *   (seconds) when set, else %MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS
 * @error: return location for a #GError
 *
 * mixprec_bootstrap_new_from_environ() on the process environment. With
 * no rank variables at all this is rank 0 of 1, source "single".
 *
 * Returns: (transfer full): a bootstrap, or %NULL with @error set
 *
 * Since: 1.0
 */
MixprecBootstrap *
mixprec_bootstrap_new_from_environment (guint    timeout_ms,
                                        GError **error)
{
  return mixprec_bootstrap_new_from_environ (NULL, timeout_ms, error);
}

/**
 * mixprec_bootstrap_new:
 * @rank: this process's rank
 * @world_size: the number of ranks, at least 1
 * @master_addr: (nullable): rank 0's host name or address; ignored (and
 *   may be %NULL) when @world_size is 1
 * @master_port: the TCP port rank 0 listens on, 1 to 65535; ignored when
 *   @world_size is 1
 * @timeout_ms: the timeout in milliseconds, 0 for
 *   %MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS
 * @error: return location for a #GError
 *
 * Joins the ranks of a job whose layout the caller knows, ignoring the
 * environment. The local rank and local world size come from the ranks'
 * host names, counted at the rendezvous.
 *
 * Returns: (transfer full): a bootstrap, source "explicit", or %NULL with
 *   @error set as for mixprec_bootstrap_new_from_environ()
 *
 * Since: 1.0
 */
MixprecBootstrap *
mixprec_bootstrap_new (guint         rank,
                       guint         world_size,
                       const gchar  *master_addr,
                       guint16       master_port,
                       guint         timeout_ms,
                       GError      **error)
{
  MixprecBootstrapSettings s = { 0, };
  MixprecBootstrap *self = NULL;

  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  if (world_size == 0 || rank >= world_size)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "rank %u is not below the world size %u", rank, world_size);
      return NULL;
    }
  if (world_size > 1 && (master_addr == NULL || *master_addr == '\0' || master_port == 0))
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "a world of %u ranks needs rank 0's address and a port from 1 to 65535 "
                   "(got \"%s\" and %u)", world_size, master_addr != NULL ? master_addr : "",
                   master_port);
      return NULL;
    }
  s.rank = rank;
  s.world_size = world_size;
  s.source = "explicit";
  if (world_size == 1 || _mixprec_bootstrap_is_loopback (master_addr))
    {
      s.local_rank = rank;
      s.local_world_size = world_size;
    }
  else
    {
      s.local_rank = 0;
      s.local_world_size = 1;
    }
  s.local_from_hosts = world_size > 1;
  s.master_port = master_port;
  /* the layout is the caller's, but the job secret (a credential, not a
   * layout) still comes from the environment */
  if (_mixprec_bootstrap_security_from_environ (NULL, &s, error))
    {
      s.listen_fd = -1;
      s.master_addr = (gchar *) master_addr;
      self = create (&s, timeout_ms, FALSE, error);
      s.master_addr = NULL;
    }
  _mixprec_bootstrap_settings_clear (&s);
  return self;
}

/**
 * mixprec_bootstrap_get_rank:
 * @self: a #MixprecBootstrap
 *
 * Gives this process's rank in the job, from 0 to the world size minus
 * one.
 *
 * Returns: this process's rank
 *
 * Since: 1.0
 */
guint
mixprec_bootstrap_get_rank (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), 0);
  return self->rank;
}

/**
 * mixprec_bootstrap_get_world_size:
 * @self: a #MixprecBootstrap
 *
 * Gives the number of processes (ranks) in the job.
 *
 * Returns: the number of ranks
 *
 * Since: 1.0
 */
guint
mixprec_bootstrap_get_world_size (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), 0);
  return self->world_size;
}

/**
 * mixprec_bootstrap_get_local_rank:
 * @self: a #MixprecBootstrap
 *
 * Gives this process's position among the ranks that run on the same host,
 * as the launcher set it (`LOCAL_RANK` and its equivalents); a device
 * plugin uses it to pick the accelerator of the process.
 *
 * Returns: this process's rank among the ranks on its host
 *
 * Since: 1.0
 */
guint
mixprec_bootstrap_get_local_rank (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), 0);
  return self->local_rank;
}

/**
 * mixprec_bootstrap_get_local_world_size:
 * @self: a #MixprecBootstrap
 *
 * Gives how many ranks of the job run on this process's host.
 *
 * Returns: the number of ranks on this process's host
 *
 * Since: 1.0
 */
guint
mixprec_bootstrap_get_local_world_size (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), 0);
  return self->local_world_size;
}

/**
 * mixprec_bootstrap_get_timeout:
 * @self: a #MixprecBootstrap
 *
 * Gives how long the rendezvous and each exchange wait for the other ranks
 * before they fail.
 *
 * Returns: the timeout in milliseconds
 *
 * Since: 1.0
 */
guint
mixprec_bootstrap_get_timeout (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), 0);
  return self->timeout_ms;
}

/**
 * mixprec_bootstrap_get_source:
 * @self: a #MixprecBootstrap
 *
 * Says which launcher's environment variables the ranks were read from, so
 * that a program can report how it was started.
 *
 * Returns: which variables gave the ranks: "mixprec", "torchrun",
 *   "openmpi", "slurm", "explicit" or "single"
 *
 * Since: 1.0
 */
const gchar *
mixprec_bootstrap_get_source (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), NULL);
  return self->source;
}

/**
 * mixprec_bootstrap_get_master_addr:
 * @self: a #MixprecBootstrap
 *
 * Gives the host name or address of rank 0, where the rendezvous listens.
 *
 * Returns: (nullable): rank 0's host, or %NULL with one rank
 *
 * Since: 1.0
 */
const gchar *
mixprec_bootstrap_get_master_addr (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), NULL);
  return self->master_addr;
}

/**
 * mixprec_bootstrap_get_master_port:
 * @self: a #MixprecBootstrap
 *
 * Gives the TCP port of rank 0's rendezvous.
 *
 * Returns: rank 0's TCP port, or 0 with one rank
 *
 * Since: 1.0
 */
guint16
mixprec_bootstrap_get_master_port (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), 0);
  return self->master_port;
}

/* The gathered result must fit one frame. The check is local, so every
 * rank refuses the same call the same way without talking. */
static gboolean
check_length (MixprecBootstrap *self,
              gsize             len,
              GError          **error)
{
  if (len > MIXPREC_WIRE_MAX_PAYLOAD / self->world_size)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                   "all_gather of %" G_GSIZE_FORMAT " bytes from each of %u ranks exceeds "
                   "the bootstrap's %u MiB limit; it carries control messages, not data",
                   len, self->world_size, MIXPREC_WIRE_MAX_PAYLOAD >> 20);
      return FALSE;
    }
  return TRUE;
}

static gboolean
gather (MixprecBootstrap *self,
        guint             kind,
        gconstpointer     in,
        gsize             len,
        gpointer          out,
        GError          **error)
{
  if (!check_usable (self, error) || !check_length (self, len, error))
    return FALSE;
  self->seq++;
  if (self->world_size == 1)
    {
      if (len > 0)
        memmove (out, in, len);
      return TRUE;
    }
  if (self->rank == 0)
    return _mixprec_bootstrap_root_gather (self, kind, in, len, out, error);
  return _mixprec_bootstrap_peer_gather (self, kind, in, len, out, error);
}

/**
 * mixprec_bootstrap_all_gather: (skip)
 * @self: a #MixprecBootstrap
 * @in: (array length=len) (element-type guint8) (nullable): this rank's
 *   @len bytes; may be %NULL when @len is 0
 * @len: the number of bytes every rank contributes
 * @out: world-size × @len bytes: rank r's bytes land at r × @len
 * @error: return location for a #GError
 *
 * Gathers @len bytes from every rank into @out on every rank, in rank
 * order. Collective: every rank calls it, with the same @len.
 *
 * Returns: %TRUE on success; %FALSE with @error set to
 *   %MIXPREC_BOOTSTRAP_ERROR_PROTOCOL when the ranks passed different
 *   lengths or called different collectives (the message names the
 *   ranks), %MIXPREC_BOOTSTRAP_ERROR_CLOSED naming a rank that went away,
 *   %MIXPREC_BOOTSTRAP_ERROR_TIMEOUT naming the ranks that did not call
 *   within the timeout. After a failure every later call fails too.
 *
 * Since: 1.0
 */
gboolean
mixprec_bootstrap_all_gather (MixprecBootstrap *self,
                              gconstpointer     in,
                              gsize             len,
                              gpointer          out,
                              GError          **error)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), FALSE);
  g_return_val_if_fail (in != NULL || len == 0, FALSE);
  g_return_val_if_fail (out != NULL || len == 0, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return gather (self, MIXPREC_BOOTSTRAP_KIND_ALL_GATHER, in, len, out, error);
}

/**
 * mixprec_bootstrap_all_gather_bytes:
 * @self: a #MixprecBootstrap
 * @in: this rank's bytes; every rank passes the same length
 * @error: return location for a #GError
 *
 * mixprec_bootstrap_all_gather() for bindings.
 *
 * Returns: (transfer full): world-size × the length of @in bytes, rank
 *   r's at r × that length; %NULL with @error set on failure
 *
 * Since: 1.0
 */
GBytes *
mixprec_bootstrap_all_gather_bytes (MixprecBootstrap *self,
                                    GBytes           *in,
                                    GError          **error)
{
  gsize len = 0;
  gconstpointer data;
  guint8 *out;

  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), NULL);
  g_return_val_if_fail (in != NULL, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  data = g_bytes_get_data (in, &len);
  if (!check_length (self, len, error))
    return NULL;
  out = g_malloc (MAX (len * self->world_size, 1));
  if (!gather (self, MIXPREC_BOOTSTRAP_KIND_ALL_GATHER, data, len, out, error))
    {
      g_free (out);
      return NULL;
    }
  return g_bytes_new_take (out, len * self->world_size);
}

/**
 * mixprec_bootstrap_barrier:
 * @self: a #MixprecBootstrap
 * @error: return location for a #GError
 *
 * Returns once every rank has called it. Collective.
 *
 * Returns: %TRUE on success; %FALSE with @error set as for
 *   mixprec_bootstrap_all_gather()
 *
 * Since: 1.0
 */
gboolean
mixprec_bootstrap_barrier (MixprecBootstrap *self,
                           GError          **error)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  return gather (self, MIXPREC_BOOTSTRAP_KIND_BARRIER, NULL, 0, NULL, error);
}

/**
 * mixprec_bootstrap_abort:
 * @self: a #MixprecBootstrap
 *
 * Makes a call in progress (in another thread) and every later call fail
 * at once with %MIXPREC_BOOTSTRAP_ERROR_CLOSED, and closes this rank's
 * connections so that the other ranks fail promptly too instead of
 * waiting for the timeout. May be called from any thread.
 *
 * Since: 1.0
 */
void
mixprec_bootstrap_abort (MixprecBootstrap *self)
{
  g_return_if_fail (MIXPREC_IS_BOOTSTRAP (self));

  g_cancellable_cancel (self->cancellable);
  shutdown_sockets (self);
}

/* ------------------------------------------------------------ plugin table */

static int
status_of (const GError *error)
{
  switch (error->code)
    {
    case MIXPREC_BOOTSTRAP_ERROR_TIMEOUT:
    case MIXPREC_BOOTSTRAP_ERROR_CLOSED:
      return MIXPREC_PLUGIN_ERR_TIMEOUT;
    case MIXPREC_BOOTSTRAP_ERROR_PROTOCOL:
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    default:
      return MIXPREC_PLUGIN_ERR_RUNTIME;
    }
}

static int
table_all_gather (void       *ctx,
                  const void *in,
                  size_t      len,
                  void       *out,
                  char       *errbuf,
                  size_t      errbuf_len)
{
  g_autoptr(GError) error = NULL;

  if ((in == NULL || out == NULL) && len > 0)
    {
      if (errbuf != NULL && errbuf_len > 0)
        g_strlcpy (errbuf, "bootstrap all_gather: NULL buffer with a non-zero length",
                   errbuf_len);
      return MIXPREC_PLUGIN_ERR_INVALID_ARGUMENT;
    }
  if (gather (ctx, MIXPREC_BOOTSTRAP_KIND_ALL_GATHER, in, len, out, &error))
    return MIXPREC_PLUGIN_OK;
  if (errbuf != NULL && errbuf_len > 0)
    g_strlcpy (errbuf, error->message, errbuf_len);
  return status_of (error);
}

static int
table_barrier (void   *ctx,
               char   *errbuf,
               size_t  errbuf_len)
{
  g_autoptr(GError) error = NULL;

  if (gather (ctx, MIXPREC_BOOTSTRAP_KIND_BARRIER, NULL, 0, NULL, &error))
    return MIXPREC_PLUGIN_OK;
  if (errbuf != NULL && errbuf_len > 0)
    g_strlcpy (errbuf, error->message, errbuf_len);
  return status_of (error);
}

const MixprecBootstrapV1 *
_mixprec_bootstrap_get_vtable (MixprecBootstrap *self)
{
  g_return_val_if_fail (MIXPREC_IS_BOOTSTRAP (self), NULL);

  memset (&self->vtable, 0, sizeof self->vtable);
  self->vtable.struct_size = sizeof self->vtable;
  self->vtable.rank = self->rank;
  self->vtable.world_size = self->world_size;
  self->vtable.local_rank = self->local_rank;
  self->vtable.local_world_size = self->local_world_size;
  self->vtable.ctx = self;
  self->vtable.all_gather = table_all_gather;
  self->vtable.barrier = table_barrier;
  return &self->vtable;
}

