/* mixprec-bootstrap-env.c — turns the variables that launchers set (our
 * own, torchrun's, Open MPI's, Slurm's) into a rank, a world size and a
 * rendezvous address, or into an error that names the variable at fault. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"

/* Beyond this a star rendezvous through rank 0 makes no sense anyway, and
 * it keeps every product of sizes far from overflow. */
#define MAX_WORLD_SIZE (1u << 20)

/* Ports derived from a job id fall in [DERIVED_PORT_BASE,
 * DERIVED_PORT_BASE + DERIVED_PORT_SPAN): below Linux's ephemeral range
 * (32768 and up), so an outgoing connection never holds the port, and
 * clear of the well-known ports. */
#define DERIVED_PORT_BASE 20000u
#define DERIVED_PORT_SPAN 10000u

/* Longest value shown in a message; the rest is elided. */
#define MAX_SHOWN 64

typedef struct
{
  const gchar *const *envp;
} Env;

static const gchar *
env_get (const Env   *env,
         const gchar *name)
{
  return g_environ_getenv ((gchar **) env->envp, name);
}

static gchar *
shown (const gchar *value)
{
  if (strlen (value) <= MAX_SHOWN)
    return g_strescape (value, NULL);
  else
    {
      g_autofree gchar *head = g_strndup (value, MAX_SHOWN);
      g_autofree gchar *escaped = g_strescape (head, NULL);
      return g_strconcat (escaped, "...", NULL);
    }
}

/* A plain decimal count: digits only, no sign, no blanks. */
static gboolean
parse_count (const gchar *name,
             const gchar *value,
             guint        max,
             guint       *out,
             GError     **error)
{
  guint64 v = 0;
  const gchar *p;

  for (p = value; *p != '\0'; p++)
    if (!g_ascii_isdigit (*p))
      break;
  if (*value == '\0' || *p != '\0'
      || !g_ascii_string_to_unsigned (value, 10, 0, max, &v, NULL))
    {
      g_autofree gchar *s = shown (value);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s=%s is not a whole number from 0 to %u", name, s, max);
      return FALSE;
    }
  *out = (guint) v;
  return TRUE;
}

/* Reads variable @name as a count; absent is not an error (*present = FALSE). */
static gboolean
get_count (const Env   *env,
           const gchar *name,
           guint        max,
           guint       *out,
           gboolean    *present,
           GError     **error)
{
  const gchar *value = env_get (env, name);

  *present = value != NULL;
  if (value == NULL)
    return TRUE;
  return parse_count (name, value, max, out, error);
}

static gboolean
parse_port (const gchar *name,
            const gchar *value,
            guint16     *out,
            GError     **error)
{
  guint port = 0;

  if (!parse_count (name, value, G_MAXUINT16, &port, NULL) || port == 0)
    {
      g_autofree gchar *s = shown (value);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s=%s is not a TCP port (a whole number from 1 to 65535)", name, s);
      return FALSE;
    }
  *out = (guint16) port;
  return TRUE;
}

/* Loopback addresses mean every rank runs on this host. */
gboolean
_mixprec_bootstrap_is_loopback (const gchar *addr)
{
  g_autoptr(GInetAddress) inet = NULL;

  if (addr == NULL)
    return FALSE;
  if (g_ascii_strcasecmp (addr, "localhost") == 0)
    return TRUE;
  inet = g_inet_address_new_from_string (addr);
  return inet != NULL && g_inet_address_get_is_loopback (inet);
}

/* 32-bit FNV-1a: a fixed, documented hash, so every rank of a job derives
 * the same port from the same job id on any host and build. */
static guint32
fnv1a (const gchar *s)
{
  guint32 h = 2166136261u;

  for (; *s != '\0'; s++)
    {
      h ^= (guchar) *s;
      h *= 16777619u;
    }
  return h;
}

/* The variable names of one family, for messages and look-ups. */
typedef struct
{
  const gchar *source;
  const gchar *rank;
  const gchar *size;
  const gchar *local_rank;
  const gchar *local_size;
} Family;

static const Family families[] = {
  { "mixprec", "MIXPREC_RANK", "MIXPREC_WORLD_SIZE",
    "MIXPREC_LOCAL_RANK", "MIXPREC_LOCAL_WORLD_SIZE" },
  { "torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE" },
  { "openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE" },
  { "slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL },
};

/* Takes an address and port from the MIXPREC_ or torchrun-style pair, the
 * first that is set. Leaves *addr NULL / *port 0 when none is. */
static gboolean
override_address (const Env    *env,
                  const gchar **addr_name,
                  const gchar **addr,
                  const gchar **port_name,
                  guint16      *port,
                  GError      **error)
{
  static const gchar *const addr_vars[] = { "MIXPREC_MASTER_ADDR", "MASTER_ADDR" };
  static const gchar *const port_vars[] = { "MIXPREC_MASTER_PORT", "MASTER_PORT" };

  *addr = NULL;
  *port = 0;
  for (guint i = 0; i < G_N_ELEMENTS (addr_vars) && *addr == NULL; i++)
    if ((*addr = env_get (env, addr_vars[i])) != NULL)
      *addr_name = addr_vars[i];
  for (guint i = 0; i < G_N_ELEMENTS (port_vars); i++)
    {
      const gchar *value = env_get (env, port_vars[i]);

      if (value != NULL)
        {
          *port_name = port_vars[i];
          return parse_port (port_vars[i], value, port, error);
        }
    }
  return TRUE;
}

/**
 * _mixprec_bootstrap_first_host:
 * @nodelist: a Slurm host list in its compressed form
 *
 * Expands only the first host of @nodelist: "node[01-04,07],gpu5" gives
 * "node01", "rack[2-3]-n[5,9]" gives "rack2-n5". Brackets must balance and
 * hold numbers or numeric ranges.
 */
gchar *
_mixprec_bootstrap_first_host (const gchar *nodelist,
                               GError     **error)
{
  g_autoptr(GString) host = g_string_new (NULL);
  const gchar *p = nodelist;

  while (*p != '\0' && *p != ',')
    {
      if (*p == '[')
        {
          const gchar *start = ++p;
          const gchar *end;

          while (g_ascii_isdigit (*p))
            p++;
          end = p;
          /* the rest of the group: more ranges, then the closing bracket */
          while (*p != '\0' && *p != ']' && *p != '[')
            {
              if (!g_ascii_isdigit (*p) && *p != ',' && *p != '-')
                break;
              p++;
            }
          if (end == start || *p != ']' || (*end != ',' && *end != '-' && *end != ']'))
            {
              g_autofree gchar *s = shown (nodelist);
              g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                           "the Slurm node list \"%s\" has a bracket group that is not "
                           "a list of numbers or ranges like [01-04,07]", s);
              return NULL;
            }
          g_string_append_len (host, start, end - start);
          p++;
        }
      else if (*p == ']')
        {
          g_autofree gchar *s = shown (nodelist);
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "the Slurm node list \"%s\" has a ']' without its '['", s);
          return NULL;
        }
      else
        g_string_append_c (host, *p++);
    }
  if (host->len == 0)
    {
      g_autofree gchar *s = shown (nodelist);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "the Slurm node list \"%s\" does not start with a host name", s);
      return NULL;
    }
  return g_string_free (g_steal_pointer (&host), FALSE);
}

/* SLURM_TASKS_PER_NODE, e.g. "4(x2),3": the task count of node @node_id,
 * or of every node when @node_id is G_MAXUINT and all counts agree. */
static gboolean
slurm_tasks_on_node (const gchar *value,
                     guint        node_id,
                     guint       *out,
                     GError     **error)
{
  g_auto(GStrv) groups = g_strsplit (value, ",", -1);
  guint node = 0;
  guint common = 0;

  for (guint i = 0; groups[i] != NULL; i++)
    {
      guint count = 0, repeat = 1;
      gchar *paren = strchr (groups[i], '(');

      if (paren != NULL)
        {
          gsize n = strlen (paren);
          g_autofree gchar *times = NULL;

          if (n < 4 || paren[1] != 'x' || paren[n - 1] != ')')
            goto bad;
          times = g_strndup (paren + 2, n - 3);
          *paren = '\0';
          if (!parse_count ("SLURM_TASKS_PER_NODE", times, MAX_WORLD_SIZE, &repeat, NULL)
              || repeat == 0)
            goto bad;
        }
      if (!parse_count ("SLURM_TASKS_PER_NODE", groups[i], MAX_WORLD_SIZE, &count, NULL))
        goto bad;
      if (node_id == G_MAXUINT)
        {
          if (common != 0 && count != common)
            {
              g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                           "SLURM_TASKS_PER_NODE=%s gives nodes different task counts, "
                           "and SLURM_NODEID is not set to say which node this is", value);
              return FALSE;
            }
          common = count;
        }
      else if (node_id < node + repeat)
        {
          *out = count;
          return TRUE;
        }
      node += repeat;
    }
  if (node_id == G_MAXUINT && common != 0)
    {
      *out = common;
      return TRUE;
    }
  if (node_id != G_MAXUINT && node > 0)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "SLURM_NODEID=%u is beyond the %u nodes of SLURM_TASKS_PER_NODE=%s",
                   node_id, node, value);
      return FALSE;
    }

bad:
  {
    g_autofree gchar *s = shown (value);
    g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                 "SLURM_TASKS_PER_NODE=%s is not a list of task counts like \"4(x2),3\"", s);
  }
  return FALSE;
}

/* Slurm: the task count of this node, or FALSE with *found unset when
 * Slurm gave none. */
static gboolean
slurm_local_size (const Env *env,
                  guint     *out,
                  gboolean  *found,
                  GError   **error)
{
  const gchar *tasks = env_get (env, "SLURM_TASKS_PER_NODE");
  guint node_id = G_MAXUINT;
  gboolean has_node = FALSE;

  *found = TRUE;
  if (tasks != NULL)
    {
      if (!get_count (env, "SLURM_NODEID", MAX_WORLD_SIZE, &node_id, &has_node, error))
        return FALSE;
      return slurm_tasks_on_node (tasks, has_node ? node_id : G_MAXUINT, out, error);
    }
  if (!get_count (env, "SLURM_NTASKS_PER_NODE", MAX_WORLD_SIZE, out, found, error))
    return FALSE;
  return TRUE;
}

/* Where the rendezvous is when the family has no address variables of its
 * own (Open MPI, Slurm). */
static gboolean
derived_address (const Env                *env,
                 const Family             *family,
                 gboolean                  has_local_size,
                 MixprecBootstrapSettings *s,
                 GError                  **error)
{
  const gchar *addr_name = NULL, *port_name = NULL;
  const gchar *addr = NULL;

  if (!override_address (env, &addr_name, &addr, &port_name, &s->master_port, error))
    return FALSE;

  if (g_str_equal (family->source, "openmpi"))
    {
      static const gchar *const job_vars[] = {
        "OMPI_MCA_orte_ess_jobid", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE"
      };

      if (addr != NULL)
        s->master_addr = g_strdup (addr);
      else if (has_local_size && s->local_world_size == s->world_size)
        s->master_addr = g_strdup ("127.0.0.1");
      else
        {
          g_autofree gchar *local = has_local_size
            ? g_strdup_printf ("OMPI_COMM_WORLD_LOCAL_SIZE=%u", s->local_world_size)
            : g_strdup ("OMPI_COMM_WORLD_LOCAL_SIZE is not set");
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "Open MPI's OMPI_COMM_WORLD_SIZE=%u ranks are not known to share this "
                       "host (%s), so rank 0's host must be given: set MIXPREC_MASTER_ADDR "
                       "(and MIXPREC_MASTER_PORT) for every rank", s->world_size, local);
          return FALSE;
        }
      for (guint i = 0; i < G_N_ELEMENTS (job_vars) && s->master_port == 0; i++)
        {
          const gchar *job = env_get (env, job_vars[i]);

          if (job != NULL && *job != '\0')
            s->master_port = DERIVED_PORT_BASE + fnv1a (job) % DERIVED_PORT_SPAN;
        }
      if (s->master_port == 0)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "Open MPI gave no job id (OMPI_MCA_orte_ess_jobid, "
                       "OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE) to derive the rendezvous "
                       "port from: set MIXPREC_MASTER_PORT for every rank");
          return FALSE;
        }
      return TRUE;
    }

  /* slurm */
  if (addr != NULL)
    s->master_addr = g_strdup (addr);
  else
    {
      const gchar *list_name = "SLURM_JOB_NODELIST";
      const gchar *list = env_get (env, list_name);

      if (list == NULL)
        list = env_get (env, list_name = "SLURM_NODELIST");
      if (list == NULL)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "SLURM_NTASKS=%u but neither SLURM_JOB_NODELIST nor SLURM_NODELIST "
                       "names the hosts: set MIXPREC_MASTER_ADDR to rank 0's host",
                       s->world_size);
          return FALSE;
        }
      s->master_addr = _mixprec_bootstrap_first_host (list, error);
      if (s->master_addr == NULL)
        {
          g_prefix_error (error, "%s: ", list_name);
          return FALSE;
        }
    }
  if (s->master_port == 0)
    {
      const gchar *job = env_get (env, "SLURM_JOB_ID");
      guint job_id = 0;

      if (job == NULL)
        job = env_get (env, "SLURM_JOBID");
      if (job == NULL)
        {
          /* srun outside an allocation's environment, a hand-made
           * environment: every task falls back alike */
          s->master_port = _MIXPREC_BOOTSTRAP_DEFAULT_PORT;
          g_message ("SLURM_JOB_ID is not set, so the rendezvous port cannot be derived "
                     "from it: using port %u (set MIXPREC_MASTER_PORT for every task to "
                     "choose another)", s->master_port);
          return TRUE;
        }
      if (!parse_count ("SLURM_JOB_ID", job, G_MAXUINT, &job_id, error))
        return FALSE;
      s->master_port = DERIVED_PORT_BASE + job_id % DERIVED_PORT_SPAN;
    }
  return TRUE;
}

static gboolean
read_family (const Env                *env,
             const Family             *family,
             MixprecBootstrapSettings *s,
             GError                  **error)
{
  gboolean has_local_rank = FALSE, has_local_size = FALSE, dummy;
  const gchar *local_size_name = family->local_size;
  const gchar *rank_value = env_get (env, family->rank);
  const gchar *size_value = env_get (env, family->size);

  if (!get_count (env, family->rank, MAX_WORLD_SIZE, &s->rank, &dummy, error)
      || !get_count (env, family->size, MAX_WORLD_SIZE, &s->world_size, &dummy, error))
    return FALSE;
  if (s->world_size == 0)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s=%s: a world needs at least one rank", family->size, size_value);
      return FALSE;
    }
  if (s->rank >= s->world_size)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s=%s is not below %s=%s", family->rank, rank_value, family->size,
                   size_value);
      return FALSE;
    }

  if (!get_count (env, family->local_rank, MAX_WORLD_SIZE, &s->local_rank, &has_local_rank, error))
    return FALSE;
  if (local_size_name != NULL)
    {
      if (!get_count (env, local_size_name, MAX_WORLD_SIZE, &s->local_world_size,
                      &has_local_size, error))
        return FALSE;
    }
  else
    {
      local_size_name = "SLURM_TASKS_PER_NODE";
      if (!slurm_local_size (env, &s->local_world_size, &has_local_size, error))
        return FALSE;
      if (has_local_size && env_get (env, "SLURM_TASKS_PER_NODE") == NULL)
        local_size_name = "SLURM_NTASKS_PER_NODE";
    }
  /* LOCAL_RANK alone (torchrun's variables set by hand, Slurm without a
   * task count per node) is taken as it is; the rendezvous counts the
   * ranks of this host for the local world size. The other way round
   * there is no telling which rank of the host this is. */
  if (has_local_size && !has_local_rank)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s is set but %s is not; set both or neither",
                   has_local_rank ? family->local_rank : local_size_name,
                   has_local_rank ? local_size_name : family->local_rank);
      return FALSE;
    }

  /* the address first: without local variables it decides what is local */
  if (s->world_size > 1)
    {
      if (g_str_equal (family->source, "openmpi") || g_str_equal (family->source, "slurm"))
        {
          if (!derived_address (env, family, has_local_size, s, error))
            return FALSE;
        }
      else
        {
          const gchar *addr_name = g_str_equal (family->source, "mixprec")
                                   ? "MIXPREC_MASTER_ADDR" : "MASTER_ADDR";
          const gchar *port_name = g_str_equal (family->source, "mixprec")
                                   ? "MIXPREC_MASTER_PORT" : "MASTER_PORT";
          const gchar *addr = env_get (env, addr_name);
          const gchar *port = env_get (env, port_name);

          if (addr == NULL || *addr == '\0' || port == NULL)
            {
              gboolean addr_bad = addr == NULL || *addr == '\0';
              g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                           "%s is %s: with %s=%u every rank needs rank 0's host in %s and its "
                           "port in %s", addr_bad ? addr_name : port_name,
                           addr_bad && addr != NULL ? "empty" : "not set", family->size,
                           s->world_size, addr_name, port_name);
              return FALSE;
            }
          if (!parse_port (port_name, port, &s->master_port, error))
            return FALSE;
          s->master_addr = g_strdup (addr);
        }
    }

  if (!has_local_size && has_local_rank)
    {
      if (s->local_rank >= s->world_size)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "%s=%u is not below %s=%u",
                       family->local_rank, s->local_rank, family->size, s->world_size);
          return FALSE;
        }
      /* until the rendezvous has counted the ranks of this host */
      s->local_world_size = _mixprec_bootstrap_is_loopback (s->master_addr)
                            ? s->world_size : s->local_rank + 1;
      s->local_rank_given = TRUE;
      s->local_from_hosts = s->world_size > 1;
    }
  else if (!has_local_rank)
    {
      s->local_from_hosts = s->world_size > 1;
      if (s->world_size == 1 || _mixprec_bootstrap_is_loopback (s->master_addr))
        {
          s->local_rank = s->rank;
          s->local_world_size = s->world_size;
        }
      else
        {
          s->local_rank = 0;
          s->local_world_size = 1;
        }
    }
  else if (s->local_world_size == 0 || s->local_world_size > s->world_size)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s=%u must be between 1 and %s=%u",
                   local_size_name, s->local_world_size, family->size, s->world_size);
      return FALSE;
    }
  else if (s->local_rank >= s->local_world_size)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s=%u is not below %s=%u",
                   family->local_rank, s->local_rank, local_size_name, s->local_world_size);
      return FALSE;
    }
  s->source = family->source;
  return TRUE;
}

/* MIXPREC_TIMEOUT, in seconds; else the deprecated MIXPREC_COMM_TIMEOUT_MS,
 * in milliseconds, which the engine read before MIXPREC_TIMEOUT existed
 * for it. */
static gboolean
read_timeout (const Env *env,
              guint     *timeout_ms,
              GError   **error)
{
  const gchar *value = env_get (env, "MIXPREC_TIMEOUT");
  gchar *end = NULL;
  gdouble seconds;

  *timeout_ms = 0;
  if (value == NULL)
    {
      guint ms = 0;

      value = env_get (env, "MIXPREC_COMM_TIMEOUT_MS");
      if (value == NULL)
        return TRUE;
      if (!parse_count ("MIXPREC_COMM_TIMEOUT_MS", value, G_MAXUINT, &ms, error))
        return FALSE;
      if (ms == 0)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "MIXPREC_COMM_TIMEOUT_MS=0: a timeout is at least 1 ms (this variable "
                       "is deprecated: set MIXPREC_TIMEOUT, in seconds, instead)");
          return FALSE;
        }
      *timeout_ms = ms;
      return TRUE;
    }
  seconds = g_ascii_strtod (value, &end);
  if (*value == '\0' || end == NULL || *end != '\0' || !(seconds > 0)
      || seconds * 1000.0 > (gdouble) G_MAXUINT || seconds * 1000.0 < 1.0)
    {
      g_autofree gchar *s = shown (value);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "MIXPREC_TIMEOUT=%s is not a number of seconds from 0.001 to %u",
                   s, G_MAXUINT / 1000);
      return FALSE;
    }
  *timeout_ms = (guint) (seconds * 1000.0 + 0.5);
  return TRUE;
}

/* _mixprec_bootstrap_timeout_from_environ:
 * @envp: (nullable): "NAME=value" strings; NULL for the process environment
 * @timeout_ms: (out): the timeout the environment asks for, 0 for none
 *
 * Reads MIXPREC_TIMEOUT (seconds) or else the deprecated
 * MIXPREC_COMM_TIMEOUT_MS (milliseconds), and nothing else. */
gboolean
_mixprec_bootstrap_timeout_from_environ (const gchar * const *envp,
                                         guint               *timeout_ms,
                                         GError             **error)
{
  g_auto(GStrv) own = NULL;
  Env env;

  if (envp == NULL)
    envp = (const gchar * const *) (own = g_get_environ ());
  env.envp = envp;
  return read_timeout (&env, timeout_ms, error);
}

void
_mixprec_bootstrap_settings_clear (MixprecBootstrapSettings *settings)
{
  g_clear_pointer (&settings->master_addr, g_free);
  g_clear_pointer (&settings->secret, g_bytes_unref);
  memset (settings, 0, sizeof *settings);
  settings->listen_fd = -1;
}

/* _mixprec_bootstrap_security_from_environ:
 *
 * The job secret (see mixprec-bootstrap-auth.c), whether one is required
 * (MIXPREC_REQUIRE_JOB_SECRET, "0" or "1"), and the listening socket
 * mixprec-run bound for rank 0 (MIXPREC_BOOTSTRAP_LISTEN_FD). Kept apart
 * from _mixprec_bootstrap_parse_environ(), which reads no files. */
gboolean
_mixprec_bootstrap_security_from_environ (const gchar * const      *envp,
                                          MixprecBootstrapSettings *settings,
                                          GError                  **error)
{
  g_auto(GStrv) own = NULL;
  const gchar *value;
  Env env;
  guint fd = 0;

  if (envp == NULL)
    envp = (const gchar * const *) (own = g_get_environ ());
  env.envp = envp;
  settings->listen_fd = -1;

  value = env_get (&env, "MIXPREC_REQUIRE_JOB_SECRET");
  if (value != NULL && !g_str_equal (value, "0") && !g_str_equal (value, "1"))
    {
      g_autofree gchar *s = shown (value);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "MIXPREC_REQUIRE_JOB_SECRET=%s is neither 0 nor 1", s);
      return FALSE;
    }
  settings->require_secret = value != NULL && g_str_equal (value, "1");

  value = env_get (&env, "MIXPREC_BOOTSTRAP_LISTEN_FD");
  if (value != NULL)
    {
      if (!parse_count ("MIXPREC_BOOTSTRAP_LISTEN_FD", value, G_MAXINT, &fd, error))
        return FALSE;
      settings->listen_fd = (gint) fd;
    }

  g_clear_pointer (&settings->secret, g_bytes_unref);
  return _mixprec_job_secret_from_environ (envp, &settings->secret, error);
}

/* _mixprec_bootstrap_parse_environ:
 * @envp: (nullable): "NAME=value" strings; NULL for the process environment
 *
 * Picks the first family whose rank and world-size variables are both set
 * (MIXPREC_, torchrun's, Open MPI's, Slurm's, in that order). MIXPREC_RANK
 * or MIXPREC_WORLD_SIZE alone is an error even when another family is
 * complete: our own variables are always meant. With no family at all the
 * process is rank 0 of 1 ("single"), unless some family is half set. */
gboolean
_mixprec_bootstrap_parse_environ (const gchar * const      *envp,
                                  MixprecBootstrapSettings *settings,
                                  GError                  **error)
{
  g_auto(GStrv) own = NULL;
  Env env;

  memset (settings, 0, sizeof *settings);
  if (envp == NULL)
    envp = (const gchar * const *) (own = g_get_environ ());
  env.envp = envp;

  if (!read_timeout (&env, &settings->timeout_ms, error))
    return FALSE;

  for (guint i = 0; i < G_N_ELEMENTS (families); i++)
    {
      const Family *family = &families[i];
      gboolean has_rank = env_get (&env, family->rank) != NULL;
      gboolean has_size = env_get (&env, family->size) != NULL;

      if (has_rank && has_size)
        {
          if (read_family (&env, family, settings, error))
            return TRUE;
          _mixprec_bootstrap_settings_clear (settings);
          return FALSE;
        }
      if ((has_rank || has_size) && i == 0)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "%s is set but %s is not; set both or neither",
                       has_rank ? family->rank : family->size,
                       has_rank ? family->size : family->rank);
          return FALSE;
        }
    }

  /* No complete family: a half-set one is a mistake worth reporting,
   * because running alone would silently train on 1/N of the job. Not so
   * for Slurm, whose batch scripts carry SLURM_PROCID without
   * SLURM_NTASKS when no task count was asked for: that is one process. */
  for (guint i = 1; i < G_N_ELEMENTS (families); i++)
    {
      const Family *family = &families[i];

      if (g_str_equal (family->source, "slurm"))
        continue;
      gboolean has_rank = env_get (&env, family->rank) != NULL;
      gboolean has_size = env_get (&env, family->size) != NULL;

      if (has_rank != has_size)
        {
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "%s is set but %s is not (%s's variables); set both or neither",
                       has_rank ? family->rank : family->size,
                       has_rank ? family->size : family->rank, family->source);
          return FALSE;
        }
    }

  settings->rank = 0;
  settings->world_size = 1;
  settings->local_rank = 0;
  settings->local_world_size = 1;
  settings->source = "single";
  return TRUE;
}
