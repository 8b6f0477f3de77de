/* mixprec-run.c — starts N local ranks of a program with the MIXPREC_
 * rank variables set, prefixes their output with the rank, and ends the
 * whole job as soon as one rank fails. The single-host counterpart of
 * `torchrun --standalone`. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <glib-unix.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <mixprec/mixprec.h>

#include "run-private.h"

#define MAX_RANKS 4096

typedef struct _Job Job;

typedef struct
{
  Job *job;
  guint rank;
  GSubprocess *process;
  GPid pid;                     /* also its process group */
  gboolean running;
  RunRelay *out;
  RunRelay *err;
} Rank;

struct _Job
{
  Rank *ranks;
  guint n;
  guint running;
  GMainLoop *loop;
  guint grace_ms;

  guint failed_rank;            /* G_MAXUINT until a rank fails */
  gint status;                  /* what mixprec-run exits with */
  gchar *verdict;               /* "mixprec-run: rank 1 exited...", once shown NULL */
  gint signal;                  /* the first signal we received, 0 for none */
  gboolean stopping;            /* SIGTERM sent to the ranks */
  gboolean torchrun_vars;       /* also set RANK, LOCAL_RANK (none was inherited) */
  guint grace_id;
  guint drain_id;
  int guard_fd;                 /* write end of the guardian's pipe, or -1 */
  GPid guard_pid;
};

/* What each child learns between fork and exec. */
static pid_t launcher_pid;
static int listen_fd = -1;      /* passed to rank 0 only */

static const gchar *
signal_name (gint signo)
{
  static const struct { gint signo; const gchar *name; } names[] = {
    { SIGHUP, "SIGHUP" }, { SIGINT, "SIGINT" }, { SIGQUIT, "SIGQUIT" },
    { SIGILL, "SIGILL" }, { SIGTRAP, "SIGTRAP" }, { SIGABRT, "SIGABRT" },
    { SIGBUS, "SIGBUS" }, { SIGFPE, "SIGFPE" }, { SIGKILL, "SIGKILL" },
    { SIGUSR1, "SIGUSR1" }, { SIGSEGV, "SIGSEGV" }, { SIGUSR2, "SIGUSR2" },
    { SIGPIPE, "SIGPIPE" }, { SIGALRM, "SIGALRM" }, { SIGTERM, "SIGTERM" },
    { SIGXCPU, "SIGXCPU" }, { SIGXFSZ, "SIGXFSZ" },
  };
  static gchar other[32];

  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    if (names[i].signo == signo)
      return names[i].name;
  g_snprintf (other, sizeof other, "signal %d", signo);
  return other;
}

/* Runs in each child between fork and exec: its own process group, so a
 * signal reaches the rank and everything it started; default SIGPIPE;
 * and on Linux, SIGTERM should mixprec-run itself die (the guardian
 * follows with SIGKILL for the whole group). If mixprec-run died before
 * the death signal was armed, nobody would send it: check, and go. */
static void
child_setup (gpointer user_data)
{
  gboolean rank0 = GPOINTER_TO_INT (user_data);

  setpgid (0, 0);
  signal (SIGPIPE, SIG_DFL);
#ifdef __linux__
  prctl (PR_SET_PDEATHSIG, SIGTERM);
#endif
  if (getppid () != launcher_pid)
    _exit (127);
  /* rank 0 inherits the listening socket mixprec-run bound */
  if (rank0 && listen_fd >= 0)
    fcntl (listen_fd, F_SETFD, 0);
}

/* The guardian: a child of mixprec-run that outlives it only to end the
 * ranks. It reads the ranks' process groups from a pipe; when the pipe
 * closes (mixprec-run exited or was SIGKILLed) it sends SIGTERM to every
 * group, waits the grace period, and sends SIGKILL. Forked before any
 * thread exists; only async-signal-safe calls after that. */
static int
start_guardian (guint  grace_ms,
                GPid  *guard_pid)
{
  int fds[2];
  pid_t pid;

  if (pipe2 (fds, O_CLOEXEC) < 0)
    return -1;
  pid = fork ();
  if (pid < 0)
    {
      close (fds[0]);
      close (fds[1]);
      return -1;
    }
  if (pid == 0)
    {
      static gint32 groups[MAX_RANKS];
      guint n = 0;
      gint32 g;
      struct timespec pause = { grace_ms / 1000, (long) (grace_ms % 1000) * 1000000L };

      close (fds[1]);
      /* ^C at the terminal reaches us too: mixprec-run handles it */
      signal (SIGINT, SIG_IGN);
      signal (SIGTERM, SIG_IGN);
      signal (SIGHUP, SIG_IGN);
      signal (SIGQUIT, SIG_IGN);
      for (;;)
        {
          gssize r = read (fds[0], &g, sizeof g);

          if (r < 0 && errno == EINTR)
            continue;
          if (r != sizeof g)
            break;
          /* mixprec-run ended the job itself and stands us down */
          if (g == 0)
            _exit (0);
          if (n < MAX_RANKS)
            groups[n++] = g;
        }
      for (guint i = 0; i < n; i++)
        kill (-groups[i], SIGTERM);
      for (guint i = 0; i < n; i++)
        kill (-groups[i], SIGCONT);
      if (n > 0)
        nanosleep (&pause, NULL);
      for (guint i = 0; i < n; i++)
        kill (-groups[i], SIGKILL);
      _exit (0);
    }
  close (fds[0]);
  *guard_pid = pid;
  return fds[1];
}

static void
guard_rank (Job   *job,
            GPid   pid)
{
  gint32 g = pid;

  if (job->guard_fd >= 0 && write (job->guard_fd, &g, sizeof g) != sizeof g)
    g_printerr ("mixprec-run: cannot tell the guardian about rank process %d\n", pid);
}

/* A per-job secret for the rendezvous, 32 bytes from getrandom, in hex:
 * only processes started by this launcher can join the job. */
static gchar *
make_secret (GError **error)
{
  guint8 bytes[32];
  gsize got = 0;

  while (got < sizeof bytes)
    {
      gssize n = getrandom (bytes + got, sizeof bytes - got, 0);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int saved = errno;
          g_set_error (error, G_IO_ERROR, g_io_error_from_errno (saved),
                       "getrandom: %s", g_strerror (saved));
          return NULL;
        }
      got += (gsize) n;
    }
  {
    GString *hex = g_string_sized_new (2 * sizeof bytes);

    for (gsize i = 0; i < sizeof bytes; i++)
      g_string_append_printf (hex, "%02x", bytes[i]);
    memset (bytes, 0, sizeof bytes);
    return g_string_free (hex, FALSE);
  }
}

static gboolean
rank_has_output (Rank *r)
{
  return (r->out != NULL && !run_relay_is_eof (r->out))
         || (r->err != NULL && !run_relay_is_eof (r->err));
}

/* Signals every rank whose process group may still hold something: a
 * running rank, or one whose pipes something still keeps open. */
static void
signal_ranks (Job  *job,
              gint  signo)
{
  for (guint i = 0; i < job->n; i++)
    {
      Rank *r = &job->ranks[i];

      if (r->pid <= 0 || (!r->running && !rank_has_output (r)))
        continue;
      if (kill (-r->pid, signo) < 0 && r->running)
        kill (r->pid, signo);
    }
}

/* Says which rank failed, after the last words it wrote itself. */
static void
show_verdict (Job *job)
{
  if (job->verdict == NULL)
    return;
  run_write_all (STDERR_FILENO, job->verdict, strlen (job->verdict));
  g_clear_pointer (&job->verdict, g_free);
}

static void
maybe_quit (Job *job)
{
  if (job->failed_rank != G_MAXUINT && !rank_has_output (&job->ranks[job->failed_rank]))
    show_verdict (job);

  for (guint i = 0; i < job->n; i++)
    if (job->ranks[i].running || rank_has_output (&job->ranks[i]))
      return;
  g_main_loop_quit (job->loop);
}

static gboolean
grace_over (gpointer user_data)
{
  Job *job = user_data;

  job->grace_id = 0;
  signal_ranks (job, SIGKILL);
  return G_SOURCE_REMOVE;
}

/* All ranks ended, but something they started (in another process group)
 * still holds a pipe: stop waiting for it. */
static gboolean
drain_over (gpointer user_data)
{
  Job *job = user_data;

  job->drain_id = 0;
  g_main_loop_quit (job->loop);
  return G_SOURCE_REMOVE;
}

/* Asks every rank to stop, and forces them after the grace period. */
static void
stop_ranks (Job *job)
{
  if (job->stopping)
    return;
  job->stopping = TRUE;
  signal_ranks (job, SIGTERM);
  /* a stopped rank (SIGSTOP, a debugger's ^Z) acts on SIGTERM only once
   * it runs again, as a shell's kill does for stopped jobs */
  signal_ranks (job, SIGCONT);
  job->grace_id = g_timeout_add (job->grace_ms, grace_over, job);
}

static void
rank_exited (GObject      *source,
             GAsyncResult *result,
             gpointer      user_data)
{
  Rank *r = user_data;
  Job *job = r->job;
  GSubprocess *process = G_SUBPROCESS (source);

  g_subprocess_wait_finish (process, result, NULL);
  r->running = FALSE;
  job->running--;

  /* the first rank that fails gives the job's status, also after we
   * passed a signal on: a rank that catches SIGTERM and exits 0 (or 7)
   * decides what mixprec-run says, not the signal */
  if (job->failed_rank == G_MAXUINT)
    {
      g_autofree gchar *message = NULL;

      if (g_subprocess_get_if_signaled (process))
        {
          gint signo = g_subprocess_get_term_sig (process);

          message = g_strdup_printf ("mixprec-run: rank %u was killed by signal %s\n",
                                     r->rank, signal_name (signo));
          job->status = 128 + signo;
        }
      else if (g_subprocess_get_exit_status (process) != 0)
        {
          message = g_strdup_printf ("mixprec-run: rank %u exited with status %d\n", r->rank,
                                     g_subprocess_get_exit_status (process));
          job->status = g_subprocess_get_exit_status (process);
        }
      if (message != NULL)
        {
          job->failed_rank = r->rank;
          job->verdict = g_steal_pointer (&message);
          if (job->signal == 0)
            stop_ranks (job);
        }
    }

  if (job->running == 0)
    {
      if (job->grace_id != 0)
        g_source_remove (job->grace_id);
      job->grace_id = 0;
      /* give pipes kept open by leftovers a moment, then stop reading */
      job->drain_id = g_timeout_add (1000, drain_over, job);
    }
  maybe_quit (job);
}

static void
relay_done (RunRelay *relay,
            gpointer  user_data)
{
  Rank *r = user_data;

  (void) relay;
  maybe_quit (r->job);
}

static gboolean
got_signal (gpointer user_data,
            gint     signo)
{
  Job *job = user_data;
  g_autofree gchar *message = NULL;

  if (job->signal == 0)
    {
      job->signal = signo;
      message = g_strdup_printf ("mixprec-run: got %s, passing it to the ranks\n",
                                 signal_name (signo));
      signal_ranks (job, signo);
    }
  else
    {
      message = g_strdup_printf ("mixprec-run: got %s again, killing the ranks\n",
                                 signal_name (signo));
      signal_ranks (job, SIGKILL);
    }
  run_write_all (STDERR_FILENO, message, strlen (message));
  return G_SOURCE_CONTINUE;
}

static gboolean
on_sigint (gpointer user_data)
{
  return got_signal (user_data, SIGINT);
}

static gboolean
on_sigterm (gpointer user_data)
{
  return got_signal (user_data, SIGTERM);
}

static gboolean
on_sighup (gpointer user_data)
{
  return got_signal (user_data, SIGHUP);
}

/* Binds and listens on @port of @addr (0: the kernel picks one) and keeps
 * the socket: rank 0 inherits it, so no other process can take the port
 * between our choice and rank 0's start. */
static GSocket *
hold_port (const gchar *addr,
           guint16      port,
           GError     **error)
{
  g_autoptr(GInetAddress) inet = g_inet_address_new_from_string (addr);
  g_autoptr(GSocketAddress) any = NULL;
  g_autoptr(GSocket) socket = NULL;

  if (inet == NULL)
    {
      g_autoptr(GResolver) resolver = g_resolver_get_default ();
      GList *list = g_resolver_lookup_by_name (resolver, addr, NULL, error);

      if (list == NULL)
        return NULL;
      inet = g_object_ref (list->data);
      g_list_free_full (list, g_object_unref);
    }
  socket = g_socket_new (g_inet_address_get_family (inet), G_SOCKET_TYPE_STREAM,
                         G_SOCKET_PROTOCOL_TCP, error);
  if (socket == NULL)
    return NULL;
  any = g_inet_socket_address_new (inet, port);
  if (!g_socket_bind (socket, any, TRUE, error) || !g_socket_listen (socket, error))
    return NULL;
  return g_steal_pointer (&socket);
}

static gboolean
start_rank (Job                 *job,
            Rank                *r,
            GSubprocessLauncher *launcher,
            const gchar * const *argv,
            gboolean             prefix,
            GError             **error)
{
  g_autofree gchar *rank_s = g_strdup_printf ("%u", r->rank);
  g_autofree gchar *tag = g_strdup_printf ("[%u] ", r->rank);
  const gchar *pid_s;

  g_subprocess_launcher_setenv (launcher, "MIXPREC_RANK", rank_s, TRUE);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_LOCAL_RANK", rank_s, TRUE);
  g_subprocess_launcher_set_child_setup (launcher, child_setup,
                                         GINT_TO_POINTER (r->rank == 0), NULL);
  if (r->rank == 0 && listen_fd >= 0)
    {
      g_autofree gchar *fd_s = g_strdup_printf ("%d", listen_fd);
      g_subprocess_launcher_setenv (launcher, "MIXPREC_BOOTSTRAP_LISTEN_FD", fd_s, TRUE);
    }
  else
    g_subprocess_launcher_unsetenv (launcher, "MIXPREC_BOOTSTRAP_LISTEN_FD");
  if (job->torchrun_vars)
    {
      g_subprocess_launcher_setenv (launcher, "RANK", rank_s, TRUE);
      g_subprocess_launcher_setenv (launcher, "LOCAL_RANK", rank_s, TRUE);
    }
  r->process = g_subprocess_launcher_spawnv (launcher, argv, error);
  if (r->process == NULL)
    return FALSE;
  r->running = TRUE;
  job->running++;
  pid_s = g_subprocess_get_identifier (r->process);
  r->pid = pid_s != NULL ? (GPid) atoi (pid_s) : 0;
  /* also here, not only in the child: whichever runs first wins the race
   * against an early signal */
  if (r->pid > 0)
    {
      setpgid (r->pid, r->pid);
      guard_rank (job, r->pid);
    }
  g_subprocess_wait_async (r->process, NULL, rank_exited, r);
  if (prefix)
    {
      r->out = run_relay_new (g_subprocess_get_stdout_pipe (r->process), STDOUT_FILENO, tag,
                              relay_done, r);
      r->err = run_relay_new (g_subprocess_get_stderr_pipe (r->process), STDERR_FILENO, tag,
                              relay_done, r);
      run_relay_start (r->out);
      run_relay_start (r->err);
    }
  return TRUE;
}

/* Nothing we started outlives us: what is left in the ranks' process
 * groups, and what was reparented to us (we are a subreaper) from
 * elsewhere. Then the guardian is told to stand down, and reaped. */
static void
kill_leftovers (Job *job)
{
  g_autoptr(GDir) proc = g_dir_open ("/proc", 0, NULL);
  const gchar *name;
  gint32 done = 0;

  for (guint i = 0; i < job->n; i++)
    if (job->ranks[i].pid > 0)
      kill (-job->ranks[i].pid, SIGKILL);
  while (proc != NULL && (name = g_dir_read_name (proc)) != NULL)
    {
      g_autofree gchar *path = NULL;
      g_autofree gchar *stat = NULL;
      const gchar *after;
      gint ppid = 0;
      gint64 pid = g_ascii_strtoll (name, NULL, 10);

      if (pid <= 0)
        continue;
      path = g_strdup_printf ("/proc/%s/stat", name);
      if (!g_file_get_contents (path, &stat, NULL, NULL)
          || (after = strrchr (stat, ')')) == NULL
          || sscanf (after, ") %*c %d", &ppid) != 1 || ppid != (gint) getpid ())
        continue;
      if (job->guard_pid != (GPid) pid)
        kill ((pid_t) pid, SIGKILL);
    }
  if (job->guard_fd >= 0)
    {
      if (write (job->guard_fd, &done, sizeof done) != sizeof done)
        {
          /* it will act on the pipe's end alone: the groups are empty */
        }
      close (job->guard_fd);
      job->guard_fd = -1;
    }
  /* reap the guardian and whatever we killed */
  while (waitpid (-1, NULL, WNOHANG) > 0 || (job->guard_pid > 0 && waitpid (job->guard_pid, NULL, 0) > 0))
    ;
}

static int
usage_error (const gchar *message)
{
  g_printerr ("mixprec-run: %s\n", message);
  g_printerr ("Run 'mixprec-run --help' to see the options.\n");
  return 2;
}

int
main (int argc, char **argv)
{
  gint nproc = G_MININT;        /* not given */
  gint port = 0;
  g_autofree gchar *addr = NULL;
  g_autofree gchar *timeout_s = NULL;
  gdouble grace_s = 5.0;
  gboolean no_prefix = FALSE;
  gboolean show_version = FALSE;
  g_autoptr(GOptionContext) context = NULL;
  g_autoptr(GError) error = NULL;
  g_autoptr(GSubprocessLauncher) launcher = NULL;
  g_autofree gchar *world_s = NULL;
  g_autofree gchar *port_s = NULL;
  g_autofree gchar *threads_s = NULL;
  g_autoptr(GSocket) held = NULL;
  g_autofree gchar *secret = NULL;
  const gchar * const *program;
  Job job = { 0, };
  const GOptionEntry entries[] = {
    { "nproc", 'n', 0, G_OPTION_ARG_INT, &nproc,
      "Number of ranks to start (required)", "N" },
    { "port", 0, 0, G_OPTION_ARG_INT, &port,
      "TCP port for rank 0's rendezvous (default: a free one)", "P" },
    { "addr", 0, 0, G_OPTION_ARG_STRING, &addr,
      "Address rank 0 listens on (default: 127.0.0.1)", "ADDR" },
    { "timeout", 0, 0, G_OPTION_ARG_STRING, &timeout_s,
      "Rendezvous and collective timeout of the ranks, in seconds (sets MIXPREC_TIMEOUT)", "S" },
    { "grace", 0, 0, G_OPTION_ARG_DOUBLE, &grace_s,
      "Seconds between SIGTERM and SIGKILL when ending the ranks (default: 5)", "S" },
    { "no-prefix", 0, 0, G_OPTION_ARG_NONE, &no_prefix,
      "Let the ranks write to our stdout and stderr directly, without \"[RANK] \"", NULL },
    { "version", 0, 0, G_OPTION_ARG_NONE, &show_version,
      "Print the version and exit", NULL },
    G_OPTION_ENTRY_NULL
  };

  setlocale (LC_ALL, "");
  /* a reader of our output that goes away (`| head`) must not end the
   * job: the output is dropped, the ranks run on (they get SIGPIPE back
   * in child_setup) */
  signal (SIGPIPE, SIG_IGN);
  context = g_option_context_new ("PROGRAM [ARGUMENTS...] - run N local ranks of a program");
  g_option_context_set_summary (context,
      "Starts N copies of PROGRAM as ranks 0 to N-1 of one job on this host,\n"
      "with MIXPREC_RANK, MIXPREC_WORLD_SIZE, MIXPREC_LOCAL_RANK,\n"
      "MIXPREC_LOCAL_WORLD_SIZE, MIXPREC_MASTER_ADDR and MIXPREC_MASTER_PORT set\n"
      "(and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE unless set).\n"
      "Each line a rank prints is prefixed with \"[RANK] \". When a rank fails,\n"
      "the others are stopped and mixprec-run exits with that rank's status.");
  /* stop at PROGRAM, so its own options reach it untouched */
  g_option_context_set_strict_posix (context, TRUE);
  g_option_context_add_main_entries (context, entries, NULL);
  if (!g_option_context_parse (context, &argc, &argv, &error))
    return usage_error (error->message);
  if (show_version)
    {
      g_print ("mixprec-run %s\n", MIXPREC_VERSION_S);
      return 0;
    }

  program = (const gchar * const *) argv + 1;
  if (program[0] != NULL && g_str_equal (program[0], "--"))
    program++;
  if (program[0] == NULL)
    return usage_error ("no PROGRAM to run");
  if (nproc == G_MININT)
    return usage_error ("the number of ranks is missing: give -n N");
  if (nproc < 1 || nproc > MAX_RANKS)
    {
      g_autofree gchar *message = g_strdup_printf ("-n must be from 1 to %d, got %d",
                                                   MAX_RANKS, nproc);
      return usage_error (message);
    }
  if (port < 0 || port > 65535)
    {
      g_autofree gchar *message = g_strdup_printf ("--port must be from 1 to 65535, got %d", port);
      return usage_error (message);
    }
  if (timeout_s != NULL)
    {
      gchar *end = NULL;
      gdouble t = g_ascii_strtod (timeout_s, &end);

      if (*timeout_s == '\0' || *end != '\0' || !(t >= 0.001) || t > G_MAXUINT / 1000)
        {
          g_autofree gchar *message = g_strdup_printf ("--timeout must be a positive number "
                                                       "of seconds, got '%s'", timeout_s);
          return usage_error (message);
        }
    }
  if (!(grace_s >= 0) || grace_s > 3600)
    return usage_error ("--grace must be from 0 to 3600 seconds");
  if (addr == NULL)
    addr = g_strdup ("127.0.0.1");

  /* before any thread exists: the guardian is forked */
  launcher_pid = getpid ();
#ifdef __linux__
  /* what a rank starts and leaves behind is reparented to us, not to
   * init, while we run; kill_leftovers() ends it */
  prctl (PR_SET_CHILD_SUBREAPER, 1);
#endif
  job.guard_fd = start_guardian ((guint) (grace_s * 1000), &job.guard_pid);
  if (job.guard_fd < 0)
    g_printerr ("mixprec-run: cannot start the guardian (%s): if mixprec-run is killed, "
                "its ranks may outlive it\n", g_strerror (errno));

  held = hold_port (addr, (guint16) port, &error);
  if (held == NULL)
    {
      if (port == 0)
        g_printerr ("mixprec-run: cannot find a free port on %s: %s\n", addr,
                    error != NULL ? error->message : "no address");
      else
        g_printerr ("mixprec-run: cannot listen on %s:%d: %s\n", addr, port,
                    error != NULL ? error->message : "no address");
      return 1;
    }
  {
    g_autoptr(GSocketAddress) bound = g_socket_get_local_address (held, NULL);
    port = bound != NULL ? g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound)) : 0;
  }
  /* one rank has no rendezvous: nothing needs the socket */
  if (nproc > 1)
    listen_fd = g_socket_get_fd (held);
  else
    g_socket_close (held, NULL);

  secret = make_secret (&error);
  if (secret == NULL)
    {
      g_printerr ("mixprec-run: cannot make the job secret: %s\n", error->message);
      return 1;
    }

  launcher = g_subprocess_launcher_new (no_prefix ? G_SUBPROCESS_FLAGS_NONE
                                        : G_SUBPROCESS_FLAGS_STDOUT_PIPE
                                          | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_JOB_SECRET", secret, TRUE);
  g_subprocess_launcher_unsetenv (launcher, "MIXPREC_JOB_SECRET_FILE");
  world_s = g_strdup_printf ("%d", nproc);
  port_s = g_strdup_printf ("%d", port);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_WORLD_SIZE", world_s, TRUE);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_LOCAL_WORLD_SIZE", world_s, TRUE);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_MASTER_ADDR", addr, TRUE);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_MASTER_PORT", port_s, TRUE);
  if (timeout_s != NULL)
    g_subprocess_launcher_setenv (launcher, "MIXPREC_TIMEOUT", timeout_s, TRUE);
  /* The ranks share this host's processors: each one's CPU kernels get
   * its share of them, as torchrun gives its ranks one OpenMP thread,
   * unless the caller chose. A pool of every processor in each rank
   * would make a rank wait, at every parallel kernel, for a worker that
   * shares a processor with another rank's work. */
  if (nproc > 1 && g_getenv ("MIXPREC_NUM_THREADS") == NULL)
    {
      threads_s = g_strdup_printf ("%u", MAX (g_get_num_processors () / (guint) nproc, 1));
      g_subprocess_launcher_setenv (launcher, "MIXPREC_NUM_THREADS", threads_s, TRUE);
    }
  /* torchrun's rank variables too, for code that reads only those (a
   * PyTorch data sampler, a logging helper), unless this job runs inside
   * another launcher's: mixing the two sets would describe two worlds.
   * MASTER_ADDR/MASTER_PORT stay unset: a program that also starts
   * torch.distributed must not take libmixprec's rendezvous port. */
  {
    static const gchar *const torchrun_names[] = { "RANK", "WORLD_SIZE", "LOCAL_RANK",
                                                   "LOCAL_WORLD_SIZE" };
    const gchar *inherited = NULL;

    for (guint i = 0; i < G_N_ELEMENTS (torchrun_names) && inherited == NULL; i++)
      if (g_getenv (torchrun_names[i]) != NULL)
        inherited = torchrun_names[i];
    job.torchrun_vars = inherited == NULL;
    if (job.torchrun_vars)
      {
        g_subprocess_launcher_setenv (launcher, "WORLD_SIZE", world_s, TRUE);
        g_subprocess_launcher_setenv (launcher, "LOCAL_WORLD_SIZE", world_s, TRUE);
      }
    else
      g_printerr ("mixprec-run: %s is set already, so the ranks get RANK, WORLD_SIZE, "
                  "LOCAL_RANK and LOCAL_WORLD_SIZE as they are (the MIXPREC_ variables "
                  "describe this job)\n", inherited);
  }

  job.n = (guint) nproc;
  job.ranks = g_new0 (Rank, job.n);
  job.loop = g_main_loop_new (NULL, FALSE);
  job.grace_ms = (guint) (grace_s * 1000);
  job.failed_rank = G_MAXUINT;
  g_unix_signal_add (SIGINT, on_sigint, &job);
  g_unix_signal_add (SIGTERM, on_sigterm, &job);
  g_unix_signal_add (SIGHUP, on_sighup, &job);

  for (guint i = 0; i < job.n; i++)
    {
      job.ranks[i].job = &job;
      job.ranks[i].rank = i;
      if (!start_rank (&job, &job.ranks[i], launcher, program, !no_prefix, &error))
        {
          g_printerr ("mixprec-run: cannot start rank %u: %s\n", i, error->message);
          job.failed_rank = i;
          job.status = 127;
          stop_ranks (&job);
          break;
        }
      /* rank 0 has the listening socket now; ours would keep the port
       * open after rank 0 closes it */
      if (i == 0 && listen_fd >= 0)
        {
          g_socket_close (held, NULL);
          listen_fd = -1;
        }
    }

  if (job.running > 0)
    g_main_loop_run (job.loop);

  for (guint i = 0; i < job.n; i++)
    {
      Rank *r = &job.ranks[i];

      if (r->out != NULL)
        run_relay_flush (r->out);
      if (r->err != NULL)
        run_relay_flush (r->err);
      run_relay_free (r->out);
      run_relay_free (r->err);
      g_clear_object (&r->process);
    }
  show_verdict (&job);
  kill_leftovers (&job);
  g_free (job.ranks);
  g_main_loop_unref (job.loop);

  if (job.failed_rank != G_MAXUINT)
    return job.status;
  return 0;
}
