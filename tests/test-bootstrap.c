/* test-bootstrap.c — rank discovery from each launcher's variables (parsed
 * from literal environments, never the process's own), one-rank
 * collectives, and the rendezvous between real processes on 127.0.0.1:
 * this program re-executes itself with `--child MODE` as the other ranks.
 * Every failure case checks that the right error arrives on every rank,
 * names the culprit, and arrives in time. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <mixprec/mixprec.h>

#include "mixprec-bootstrap-private.h"

/* Generous bounds for "fails promptly" on a loaded 2-core machine. */
#define PROMPT_MS 900
#define LATE_SLACK_MS 1500

/* ------------------------------------------------------------ helpers */

/* 32-bit FNV-1a written from its published definition (offset basis
 * 2166136261, prime 16777619), checked against published vectors below. */
static guint32
reference_fnv1a (const gchar *s)
{
  guint32 h = 0x811c9dc5u;

  while (*s != '\0')
    {
      h ^= (guint8) *s++;
      h *= 0x01000193u;
    }
  return h;
}

static void
expect_env (const gchar * const *envp,
            guint                rank,
            guint                world,
            guint                local_rank,
            guint                local_world,
            const gchar         *addr,
            guint                port,
            const gchar         *source)
{
  MixprecBootstrapSettings s;
  g_autoptr(GError) error = NULL;

  g_assert_true (_mixprec_bootstrap_parse_environ (envp, &s, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (s.rank, ==, rank);
  g_assert_cmpuint (s.world_size, ==, world);
  g_assert_cmpuint (s.local_rank, ==, local_rank);
  g_assert_cmpuint (s.local_world_size, ==, local_world);
  g_assert_cmpstr (s.master_addr, ==, addr);
  g_assert_cmpuint (s.master_port, ==, port);
  g_assert_cmpstr (s.source, ==, source);
  _mixprec_bootstrap_settings_clear (&s);
}

static void
expect_env_error (const gchar * const *envp,
                  const gchar         *fragment)
{
  MixprecBootstrapSettings s;
  g_autoptr(GError) error = NULL;

  g_assert_false (_mixprec_bootstrap_parse_environ (envp, &s, &error));
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
  if (strstr (error->message, fragment) == NULL)
    g_error ("expected \"%s\" in: %s", fragment, error->message);
}

#define ENV(...) ((const gchar * const[]) { __VA_ARGS__, NULL })

/* ------------------------------------------------------------ environment */

static void
test_env_single (void)
{
  expect_env (ENV ("HOME=/root", "PATH=/bin"), 0, 1, 0, 1, NULL, 0, "single");
  /* Slurm batch scripts carry SLURM_PROCID without a task count */
  expect_env (ENV ("SLURM_PROCID=0", "SLURM_JOB_ID=7"), 0, 1, 0, 1, NULL, 0, "single");
  /* one rank needs no rendezvous */
  expect_env (ENV ("MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=1"), 0, 1, 0, 1, NULL, 0, "mixprec");
}

static void
test_env_mixprec (void)
{
  expect_env (ENV ("MIXPREC_RANK=2", "MIXPREC_WORLD_SIZE=8", "MIXPREC_LOCAL_RANK=0",
                   "MIXPREC_LOCAL_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=10.0.0.5",
                   "MIXPREC_MASTER_PORT=29500"),
              2, 8, 0, 2, "10.0.0.5", 29500, "mixprec");
  /* no local variables: a loopback rendezvous means all ranks are here */
  expect_env (ENV ("MIXPREC_RANK=3", "MIXPREC_WORLD_SIZE=4", "MIXPREC_MASTER_ADDR=127.0.0.1",
                   "MIXPREC_MASTER_PORT=1234"),
              3, 4, 3, 4, "127.0.0.1", 1234, "mixprec");
  expect_env (ENV ("MIXPREC_RANK=1", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=localhost",
                   "MIXPREC_MASTER_PORT=1"),
              1, 2, 1, 2, "localhost", 1, "mixprec");
  /* ... and any other address that each rank is alone on its host */
  expect_env (ENV ("MIXPREC_RANK=3", "MIXPREC_WORLD_SIZE=4", "MIXPREC_MASTER_ADDR=node7",
                   "MIXPREC_MASTER_PORT=65535"),
              3, 4, 0, 1, "node7", 65535, "mixprec");
}

static void
test_env_torchrun (void)
{
  expect_env (ENV ("RANK=5", "WORLD_SIZE=16", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=4",
                   "MASTER_ADDR=trainer-0", "MASTER_PORT=29400", "GROUP_RANK=1"),
              5, 16, 1, 4, "trainer-0", 29400, "torchrun");
}

static void
test_env_openmpi (void)
{
  guint32 derived;

  /* the port derivation rests on FNV-1a: check the reference first */
  g_assert_cmphex (reference_fnv1a (""), ==, 0x811c9dc5u);
  g_assert_cmphex (reference_fnv1a ("a"), ==, 0xe40c292cu);
  g_assert_cmphex (reference_fnv1a ("foobar"), ==, 0xbf9cf968u);

  derived = 20000 + reference_fnv1a ("3735552001") % 10000;
  expect_env (ENV ("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4",
                   "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                   "OMPI_MCA_orte_ess_jobid=3735552001"),
              1, 4, 1, 4, "127.0.0.1", derived, "openmpi");
  derived = 20000 + reference_fnv1a ("prterun-host-1234@1") % 10000;
  expect_env (ENV ("OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2",
                   "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                   "PMIX_NAMESPACE=prterun-host-1234@1"),
              0, 2, 0, 2, "127.0.0.1", derived, "openmpi");
  /* across hosts the address is given; MIXPREC_ beats torchrun-style names */
  expect_env (ENV ("OMPI_COMM_WORLD_RANK=6", "OMPI_COMM_WORLD_SIZE=8",
                   "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                   "MASTER_ADDR=ignored", "MASTER_PORT=1111",
                   "MIXPREC_MASTER_ADDR=head", "MIXPREC_MASTER_PORT=2222"),
              6, 8, 2, 4, "head", 2222, "openmpi");
  expect_env (ENV ("OMPI_COMM_WORLD_RANK=6", "OMPI_COMM_WORLD_SIZE=8",
                   "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                   "MASTER_ADDR=head", "MASTER_PORT=1111"),
              6, 8, 2, 4, "head", 1111, "openmpi");
  expect_env_error (ENV ("OMPI_COMM_WORLD_RANK=6", "OMPI_COMM_WORLD_SIZE=8",
                         "OMPI_COMM_WORLD_LOCAL_RANK=2", "OMPI_COMM_WORLD_LOCAL_SIZE=4",
                         "OMPI_MCA_orte_ess_jobid=1"),
                    "set MIXPREC_MASTER_ADDR");
  expect_env_error (ENV ("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                         "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2"),
                    "set MIXPREC_MASTER_PORT");
}

static void
test_env_slurm (void)
{
  expect_env (ENV ("SLURM_PROCID=5", "SLURM_NTASKS=8", "SLURM_LOCALID=1",
                   "SLURM_TASKS_PER_NODE=4(x2)", "SLURM_NODEID=1",
                   "SLURM_JOB_NODELIST=node[01-04,07],gpu5", "SLURM_JOB_ID=123456"),
              5, 8, 1, 4, "node01", 20000 + 123456 % 10000, "slurm");
  /* uneven nodes: the third node runs three tasks */
  expect_env (ENV ("SLURM_PROCID=9", "SLURM_NTASKS=11", "SLURM_LOCALID=1",
                   "SLURM_TASKS_PER_NODE=4(x2),3", "SLURM_NODEID=2",
                   "SLURM_NODELIST=gpu5,node[1-2]", "SLURM_JOBID=42"),
              9, 11, 1, 3, "gpu5", 20042, "slurm");
  /* no node id, but every node runs the same count */
  expect_env (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                   "SLURM_TASKS_PER_NODE=2(x2)", "SLURM_JOB_NODELIST=a,b",
                   "SLURM_JOB_ID=10000", "MIXPREC_MASTER_PORT=31000"),
              3, 4, 1, 2, "a", 31000, "slurm");
  expect_env (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                   "SLURM_NTASKS_PER_NODE=2", "SLURM_JOB_NODELIST=a,b",
                   "SLURM_JOB_ID=1", "MASTER_ADDR=b"),
              3, 4, 1, 2, "b", 20001, "slurm");
  expect_env_error (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                         "SLURM_TASKS_PER_NODE=2,1,1", "SLURM_JOB_NODELIST=a,b", "SLURM_JOB_ID=1"),
                    "SLURM_NODEID is not set");
  expect_env_error (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                         "SLURM_TASKS_PER_NODE=2(x2)", "SLURM_NODEID=2",
                         "SLURM_JOB_NODELIST=a,b", "SLURM_JOB_ID=1"),
                    "SLURM_NODEID=2 is beyond the 2 nodes");
  expect_env_error (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                         "SLURM_TASKS_PER_NODE=2(x2", "SLURM_JOB_NODELIST=a,b", "SLURM_JOB_ID=1"),
                    "SLURM_TASKS_PER_NODE=2(x2 is not a list of task counts");
  expect_env_error (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_JOB_ID=1"),
                    "neither SLURM_JOB_NODELIST nor SLURM_NODELIST");
  /* no job id: torchrun's default port, with a note */
  g_test_expect_message ("Mixprec", G_LOG_LEVEL_MESSAGE,
                         "SLURM_JOB_ID is not set*using port 29500*MIXPREC_MASTER_PORT*");
  expect_env (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_JOB_NODELIST=a"),
              3, 4, 0, 1, "a", 29500, "slurm");
  g_test_assert_expected_messages ();
  expect_env_error (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_JOB_NODELIST=a[1-",
                         "SLURM_JOB_ID=1"),
                    "SLURM_JOB_NODELIST: the Slurm node list \"a[1-\"");
  /* SLURM_LOCALID without a task count per node: the rendezvous counts */
  expect_env (ENV ("SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                   "SLURM_JOB_NODELIST=a", "SLURM_JOB_ID=1"),
              3, 4, 1, 2, "a", 20001, "slurm");
}

static void
test_env_nodelist (void)
{
  static const struct { const gchar *list; const gchar *first; } good[] = {
    { "node01", "node01" },
    { "node[01-04,07],gpu5", "node01" },
    { "gpu5,node[1-2]", "gpu5" },
    { "rack[2-3]-n[5,9]", "rack2-n5" },
    { "a[007]", "a007" },
    { "c-[10-12].cluster,d", "c-10.cluster" },
  };
  static const gchar *const bad[] = {
    "node[01-04", "node]01", "node[a-b]", "node[]", "", ",node1", "node[1-2,x]",
  };

  for (guint i = 0; i < G_N_ELEMENTS (good); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree gchar *first = _mixprec_bootstrap_first_host (good[i].list, &error);

      g_assert_no_error (error);
      g_assert_cmpstr (first, ==, good[i].first);
    }
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autofree gchar *first = _mixprec_bootstrap_first_host (bad[i], &error);

      g_assert_null (first);
      g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
      g_assert_nonnull (strstr (error->message, "Slurm node list"));
    }
}

static void
test_env_precedence (void)
{
  /* ours over torchrun's */
  expect_env (ENV ("RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=x", "MASTER_PORT=1",
                   "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=3", "MIXPREC_MASTER_ADDR=y",
                   "MIXPREC_MASTER_PORT=2"),
              0, 3, 0, 1, "y", 2, "mixprec");
  /* torchrun's over Open MPI's and Slurm's */
  expect_env (ENV ("OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                   "SLURM_PROCID=1", "SLURM_NTASKS=2",
                   "RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=3"),
              0, 2, 0, 2, "127.0.0.1", 3, "torchrun");
  /* Open MPI's over Slurm's (mpirun inside an allocation) */
  expect_env (ENV ("SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_JOB_ID=9",
                   "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                   "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                   "MIXPREC_MASTER_PORT=4000"),
              1, 2, 1, 2, "127.0.0.1", 4000, "openmpi");
  /* the first complete family wins over a stray half of an earlier one */
  expect_env (ENV ("RANK=7", "SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_NODELIST=n1",
                   "SLURM_JOB_ID=5"),
              1, 2, 0, 1, "n1", 20005, "slurm");
}

static void
test_env_errors (void)
{
  static const struct { const gchar *env[8]; const gchar *fragment; } cases[] = {
    { { "MIXPREC_RANK=1" }, "MIXPREC_RANK is set but MIXPREC_WORLD_SIZE is not" },
    /* ours are always meant, even next to a complete family */
    { { "MIXPREC_WORLD_SIZE=2", "RANK=0", "WORLD_SIZE=1" },
      "MIXPREC_WORLD_SIZE is set but MIXPREC_RANK is not" },
    { { "MIXPREC_RANK=5", "MIXPREC_WORLD_SIZE=4" }, "MIXPREC_RANK=5 is not below MIXPREC_WORLD_SIZE=4" },
    { { "MIXPREC_RANK=-1", "MIXPREC_WORLD_SIZE=4" }, "MIXPREC_RANK=-1 is not a whole number" },
    { { "MIXPREC_RANK= 1", "MIXPREC_WORLD_SIZE=4" }, "MIXPREC_RANK= 1 is not a whole number" },
    { { "MIXPREC_RANK=", "MIXPREC_WORLD_SIZE=4" }, "MIXPREC_RANK= is not a whole number" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=four" }, "MIXPREC_WORLD_SIZE=four is not a whole number" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=0" }, "MIXPREC_WORLD_SIZE=0: a world needs at least one rank" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_PORT=5" },
      "MIXPREC_MASTER_ADDR is not set" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=", "MIXPREC_MASTER_PORT=5" },
      "MIXPREC_MASTER_ADDR is empty" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=h" },
      "MIXPREC_MASTER_PORT is not set" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=h", "MIXPREC_MASTER_PORT=0" },
      "MIXPREC_MASTER_PORT=0 is not a TCP port" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=h", "MIXPREC_MASTER_PORT=65536" },
      "MIXPREC_MASTER_PORT=65536 is not a TCP port" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=h", "MIXPREC_MASTER_PORT=http" },
      "MIXPREC_MASTER_PORT=http is not a TCP port" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_LOCAL_WORLD_SIZE=2",
        "MIXPREC_MASTER_ADDR=h", "MIXPREC_MASTER_PORT=1" },
      "MIXPREC_LOCAL_WORLD_SIZE is set but MIXPREC_LOCAL_RANK is not" },
    { { "RANK=1", "WORLD_SIZE=2", "LOCAL_RANK=2", "MASTER_ADDR=h", "MASTER_PORT=1" },
      "LOCAL_RANK=2 is not below WORLD_SIZE=2" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_LOCAL_RANK=2", "MIXPREC_LOCAL_WORLD_SIZE=2",
        "MIXPREC_MASTER_ADDR=h", "MIXPREC_MASTER_PORT=1" },
      "MIXPREC_LOCAL_RANK=2 is not below MIXPREC_LOCAL_WORLD_SIZE=2" },
    { { "MIXPREC_RANK=0", "MIXPREC_WORLD_SIZE=2", "MIXPREC_LOCAL_RANK=0", "MIXPREC_LOCAL_WORLD_SIZE=3",
        "MIXPREC_MASTER_ADDR=h", "MIXPREC_MASTER_PORT=1" },
      "MIXPREC_LOCAL_WORLD_SIZE=3 must be between 1 and MIXPREC_WORLD_SIZE=2" },
    { { "RANK=1" }, "RANK is set but WORLD_SIZE is not (torchrun's variables)" },
    { { "RANK=1", "WORLD_SIZE=2", "MASTER_PORT=4" }, "MASTER_ADDR is not set" },
    { { "OMPI_COMM_WORLD_SIZE=2" }, "OMPI_COMM_WORLD_SIZE is set but OMPI_COMM_WORLD_RANK is not" },
    { { "OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=2" },
      "OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2" },
    { { "MIXPREC_TIMEOUT=soon" }, "MIXPREC_TIMEOUT=soon is not a number of seconds" },
    { { "MIXPREC_TIMEOUT=0" }, "MIXPREC_TIMEOUT=0 is not a number of seconds" },
    { { "MIXPREC_TIMEOUT=-2" }, "MIXPREC_TIMEOUT=-2 is not a number of seconds" },
    { { "MIXPREC_TIMEOUT=1e12" }, "MIXPREC_TIMEOUT=1e12 is not a number of seconds" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    expect_env_error (cases[i].env, cases[i].fragment);
}

static void
test_env_timeout (void)
{
  MixprecBootstrapSettings s;
  g_autoptr(MixprecBootstrap) from_env = NULL;
  g_autoptr(MixprecBootstrap) explicit_wins = NULL;
  g_autoptr(MixprecBootstrap) fallback = NULL;

  g_assert_true (_mixprec_bootstrap_parse_environ (ENV ("MIXPREC_TIMEOUT=2.5"), &s, NULL));
  g_assert_cmpuint (s.timeout_ms, ==, 2500);
  _mixprec_bootstrap_settings_clear (&s);

  from_env = mixprec_bootstrap_new_from_environ (ENV ("MIXPREC_TIMEOUT=0.25"), 0, NULL);
  g_assert_cmpuint (mixprec_bootstrap_get_timeout (from_env), ==, 250);
  explicit_wins = mixprec_bootstrap_new_from_environ (ENV ("MIXPREC_TIMEOUT=0.25"), 9000, NULL);
  g_assert_cmpuint (mixprec_bootstrap_get_timeout (explicit_wins), ==, 9000);
  fallback = mixprec_bootstrap_new_from_environ (ENV ("X=1"), 0, NULL);
  g_assert_cmpuint (mixprec_bootstrap_get_timeout (fallback), ==, 5 * 60 * 1000);

  /* the deprecated MIXPREC_COMM_TIMEOUT_MS, in milliseconds, when
   * MIXPREC_TIMEOUT is not set */
  g_assert_true (_mixprec_bootstrap_parse_environ (ENV ("MIXPREC_COMM_TIMEOUT_MS=1500"), &s, NULL));
  g_assert_cmpuint (s.timeout_ms, ==, 1500);
  _mixprec_bootstrap_settings_clear (&s);
  g_assert_true (_mixprec_bootstrap_parse_environ (ENV ("MIXPREC_COMM_TIMEOUT_MS=1500",
                                                        "MIXPREC_TIMEOUT=4"), &s, NULL));
  g_assert_cmpuint (s.timeout_ms, ==, 4000);
  _mixprec_bootstrap_settings_clear (&s);
  {
    guint ms = 7;
    g_autoptr(GError) error = NULL;

    g_assert_true (_mixprec_bootstrap_timeout_from_environ (ENV ("RANK=3"), &ms, NULL));
    g_assert_cmpuint (ms, ==, 0);
    g_assert_false (_mixprec_bootstrap_timeout_from_environ (ENV ("MIXPREC_COMM_TIMEOUT_MS=0"),
                                                             &ms, &error));
    g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
    g_assert_nonnull (strstr (error->message, "set MIXPREC_TIMEOUT"));
    g_clear_error (&error);
    g_assert_false (_mixprec_bootstrap_timeout_from_environ (ENV ("MIXPREC_COMM_TIMEOUT_MS=2s"),
                                                             &ms, &error));
    g_assert_nonnull (strstr (error->message, "MIXPREC_COMM_TIMEOUT_MS=2s"));
  }
}

/* torchrun's variables set by hand, without LOCAL_WORLD_SIZE: LOCAL_RANK
 * is kept, the local world size is left to the rendezvous. */
static void
test_env_local_rank_alone (void)
{
  MixprecBootstrapSettings s;

  g_assert_true (_mixprec_bootstrap_parse_environ (ENV ("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1",
                                                        "MASTER_ADDR=head", "MASTER_PORT=29500"),
                                                   &s, NULL));
  g_assert_cmpuint (s.local_rank, ==, 1);
  g_assert_true (s.local_rank_given);
  g_assert_true (s.local_from_hosts);
  g_assert_cmpstr (s.source, ==, "torchrun");
  _mixprec_bootstrap_settings_clear (&s);

  /* given in full, nothing is left to the rendezvous */
  g_assert_true (_mixprec_bootstrap_parse_environ (ENV ("RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1",
                                                        "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=head",
                                                        "MASTER_PORT=29500"), &s, NULL));
  g_assert_false (s.local_from_hosts);
  _mixprec_bootstrap_settings_clear (&s);
  /* none at all: the rendezvous decides both */
  g_assert_true (_mixprec_bootstrap_parse_environ (ENV ("RANK=3", "WORLD_SIZE=4",
                                                        "MASTER_ADDR=head", "MASTER_PORT=29500"),
                                                   &s, NULL));
  g_assert_true (s.local_from_hosts);
  g_assert_false (s.local_rank_given);
  _mixprec_bootstrap_settings_clear (&s);
}

/* ------------------------------------------------------------ hosts */

static void
put_ids (guint8 *out, const guint *ids, guint n)
{
  for (guint i = 0; i < n; i++)
    {
      out[4 * i] = (guint8) (ids[i] >> 24);
      out[4 * i + 1] = (guint8) (ids[i] >> 16);
      out[4 * i + 2] = (guint8) (ids[i] >> 8);
      out[4 * i + 3] = (guint8) ids[i];
    }
}

/* Five ranks on hosts A B A B B (each id the lowest rank of its host). */
static void
test_hosts_local_ranks (void)
{
  const guint ids[] = { 0, 1, 0, 1, 1 };
  const guint local_rank[] = { 0, 0, 1, 1, 2 };
  const guint local_size[] = { 2, 3, 2, 3, 3 };
  guint8 wire[4 * G_N_ELEMENTS (ids)];

  g_assert_cmpuint (_mixprec_wire_get_u32 ((const guint8 *) "\0\0\1\2"), ==, 0x102);
  put_ids (wire, ids, G_N_ELEMENTS (ids));
  for (guint r = 0; r < G_N_ELEMENTS (ids); r++)
    {
      g_autoptr(MixprecBootstrap) b = g_object_new (MIXPREC_TYPE_BOOTSTRAP, NULL);

      b->rank = r;
      b->world_size = G_N_ELEMENTS (ids);
      b->local_from_hosts = TRUE;
      _mixprec_bootstrap_apply_hosts (b, wire, sizeof wire);
      g_assert_cmpuint (b->local_rank, ==, local_rank[r]);
      g_assert_cmpuint (b->local_world_size, ==, local_size[r]);
    }
  {
    g_autoptr(MixprecBootstrap) b = g_object_new (MIXPREC_TYPE_BOOTSTRAP, NULL);

    /* a LOCAL_RANK given by hand stays; a wrong-sized table is ignored */
    b->rank = 4;
    b->world_size = G_N_ELEMENTS (ids);
    b->local_rank = 0;
    b->local_world_size = 1;
    b->local_from_hosts = TRUE;
    b->local_rank_given = TRUE;
    _mixprec_bootstrap_apply_hosts (b, wire, sizeof wire - 4);
    g_assert_cmpuint (b->local_world_size, ==, 1);
    _mixprec_bootstrap_apply_hosts (b, wire, sizeof wire);
    g_assert_cmpuint (b->local_rank, ==, 0);
    g_assert_cmpuint (b->local_world_size, ==, 3);
  }
}

static void
test_hosts_loopback_warning (void)
{
  g_autoptr(GInetAddress) debian = g_inet_address_new_from_string ("127.0.1.1");
  g_autoptr(GInetAddress) net = g_inet_address_new_from_string ("10.1.2.3");
  g_autofree gchar *warning = _mixprec_bootstrap_loopback_warning ("node01", debian, 1, 8);
  gchar *none;

  g_assert_nonnull (warning);
  g_assert_nonnull (strstr (warning, "127.0.1.1"));
  g_assert_nonnull (strstr (warning, "'node01'"));
  g_assert_nonnull (strstr (warning, "MIXPREC_MASTER_ADDR"));
  g_assert_nonnull (strstr (warning, "/etc/hosts"));
  /* loopback asked for, a real address, or every rank on this host */
  g_assert_null ((none = _mixprec_bootstrap_loopback_warning ("127.0.0.1", debian, 1, 8)));
  g_assert_null ((none = _mixprec_bootstrap_loopback_warning ("localhost", debian, 1, 8)));
  g_assert_null ((none = _mixprec_bootstrap_loopback_warning ("node01", net, 1, 8)));
  g_assert_null ((none = _mixprec_bootstrap_loopback_warning ("node01", debian, 8, 8)));
}

/* ------------------------------------------------------------ one rank */

static void
test_single_collectives (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) b = mixprec_bootstrap_new_from_environ (ENV ("A=b"), 0, &error);
  const guint8 in[5] = { 9, 8, 7, 6, 5 };
  guint8 out[5] = { 0 };
  g_autoptr(GBytes) bytes_in = g_bytes_new_static ("hello", 5);
  g_autoptr(GBytes) bytes_out = NULL;
  guint rank = 99, world = 99;

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_bootstrap_get_source (b), ==, "single");
  g_assert_cmpuint (mixprec_bootstrap_get_rank (b), ==, 0);
  g_assert_cmpuint (mixprec_bootstrap_get_world_size (b), ==, 1);
  g_assert_cmpuint (mixprec_bootstrap_get_local_rank (b), ==, 0);
  g_assert_cmpuint (mixprec_bootstrap_get_local_world_size (b), ==, 1);
  g_assert_null (mixprec_bootstrap_get_master_addr (b));
  g_assert_cmpuint (mixprec_bootstrap_get_master_port (b), ==, 0);
  g_object_get (b, "rank", &rank, "world-size", &world, NULL);
  g_assert_cmpuint (rank, ==, 0);
  g_assert_cmpuint (world, ==, 1);

  g_assert_true (mixprec_bootstrap_all_gather (b, in, sizeof in, out, &error));
  g_assert_no_error (error);
  g_assert_cmpmem (out, sizeof out, in, sizeof in);
  g_assert_true (mixprec_bootstrap_all_gather (b, NULL, 0, NULL, &error));
  g_assert_true (mixprec_bootstrap_barrier (b, &error));
  bytes_out = mixprec_bootstrap_all_gather_bytes (b, bytes_in, &error);
  g_assert_no_error (error);
  g_assert_true (g_bytes_equal (bytes_in, bytes_out));
}

static void
test_single_explicit (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) b = mixprec_bootstrap_new (0, 1, NULL, 0, 100, &error);
  MixprecBootstrap *bad;

  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_bootstrap_get_source (b), ==, "explicit");
  g_assert_cmpuint (mixprec_bootstrap_get_timeout (b), ==, 100);

  bad = mixprec_bootstrap_new (2, 2, "127.0.0.1", 1, 100, &error);
  g_assert_null (bad);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
  g_assert_nonnull (strstr (error->message, "rank 2 is not below the world size 2"));
  g_clear_error (&error);
  bad = mixprec_bootstrap_new (0, 2, NULL, 1, 100, &error);
  g_assert_null (bad);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
}

static void
test_single_limits_and_abort (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) b = mixprec_bootstrap_new (0, 1, NULL, 0, 100, &error);
  g_autoptr(GBytes) huge = g_bytes_new_take (g_malloc0 ((64u << 20) + 1), (64u << 20) + 1);
  const MixprecBootstrapV1 *table = _mixprec_bootstrap_get_vtable (b);
  gchar errbuf[256] = "";
  gint32 mine = 77, got = 0;
  GBytes *result;

  result = mixprec_bootstrap_all_gather_bytes (b, huge, &error);
  g_assert_null (result);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "64 MiB limit"));
  g_clear_error (&error);

  g_assert_cmpuint (table->struct_size, ==, sizeof *table);
  g_assert_cmpuint (table->world_size, ==, 1);
  g_assert_true (table->ctx == (void *) b);
  g_assert_cmpint (table->all_gather (table->ctx, &mine, sizeof mine, &got, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpint (got, ==, 77);
  g_assert_cmpint (table->barrier (table->ctx, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);

  mixprec_bootstrap_abort (b);
  g_assert_false (mixprec_bootstrap_barrier (b, &error));
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CLOSED);
  g_assert_nonnull (strstr (error->message, "aborted"));
  g_assert_cmpint (table->barrier (table->ctx, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_ERR_TIMEOUT);
  g_assert_nonnull (strstr (errbuf, "the bootstrap of rank 0 was aborted"));
  /* a tiny buffer still ends in a NUL */
  memset (errbuf, 'x', sizeof errbuf);
  g_assert_cmpint (table->barrier (table->ctx, errbuf, 4), ==, MIXPREC_PLUGIN_ERR_TIMEOUT);
  g_assert_cmpstr (errbuf, ==, "the");
}

/* ------------------------------------------------------------ child ranks */

/* Rank @rank's byte @i in round @round: every rank computes every other
 * rank's expected bytes from this formula, not from what it received. */
static guint8
pattern (guint rank,
         guint round,
         gsize i)
{
  return (guint8) (rank * 37u + round * 11u + i * 7u + (i >> 8) + 1u);
}

static const gsize gather_sizes[] = { 1, 0, 7, 64, 1000, 65536, 3, 4096 };

static int
child_report_error (GError *error,
                    gint64  since)
{
  g_print ("error %d %" G_GINT64_FORMAT " %s\n", error->code,
           (g_get_monotonic_time () - since) / 1000, error->message);
  return 1;
}

static gboolean
child_gather_round (MixprecBootstrap *b,
                    guint             round,
                    gsize             len,
                    GError          **error)
{
  guint world = mixprec_bootstrap_get_world_size (b);
  guint rank = mixprec_bootstrap_get_rank (b);
  g_autofree guint8 *in = g_malloc (MAX (len, 1));
  g_autofree guint8 *out = g_malloc (MAX (len * world, 1));

  for (gsize i = 0; i < len; i++)
    in[i] = pattern (rank, round, i);
  memset (out, 0xee, MAX (len * world, 1));
  if (!mixprec_bootstrap_all_gather (b, in, len, out, error))
    return FALSE;
  for (guint r = 0; r < world; r++)
    for (gsize i = 0; i < len; i++)
      if (out[r * len + i] != pattern (r, round, i))
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED,
                       "round %u: byte %" G_GSIZE_FORMAT " of rank %u is %u, expected %u",
                       round, i, r, out[r * len + i], pattern (r, round, i));
          return FALSE;
        }
  return TRUE;
}

/* `--child engine`: an engine from the environment (as mixprec_engine_new()
 * finds it under mixprec-run) stepping until a collective fails. Prints
 * "stepping PID" after the first step, so that a test can stop this
 * process, and the engine's error when a step fails. */
static int
child_engine (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = NULL;
  g_autoptr(MixprecEngine) engine = NULL;
  gfloat values[64];
  const guint64 shape[] = { G_N_ELEMENTS (values) };
  g_autoptr(GBytes) init = NULL;
  MixprecParam *param;

  for (guint i = 0; i < G_N_ELEMENTS (values); i++)
    values[i] = (gfloat) i / 64.0f;
  init = g_bytes_new (values, sizeof values);
  config = mixprec_config_new_from_string ("{\"train_micro_batch_size_per_gpu\": 1, "
                                           "\"optimizer\": {\"type\": \"SGD\", "
                                           "\"params\": {\"lr\": 0.01}}}", &error);
  if (config != NULL)
    engine = mixprec_engine_new (config, &error);
  param = engine == NULL ? NULL
          : mixprec_engine_register_param (engine, "w", shape, 1, NULL, MIXPREC_DTYPE_FLOAT32,
                                           init, &error);
  for (guint step = 0; param != NULL; step++)
    {
      g_autoptr(MixprecStepResult) result = NULL;

      if (!mixprec_param_set_grad (param, MIXPREC_DTYPE_FLOAT32, init, &error)
          || !mixprec_engine_backward_done (engine, &error)
          || (result = mixprec_engine_step (engine, &error)) == NULL)
        break;
      if (step == 0)
        {
          g_print ("stepping %d\n", (gint) getpid ());
          fflush (stdout);
        }
    }
  g_printerr ("error: %s\n", error->message);
  return 1;
}

/* The other ranks of the multi-process tests. Prints one line: "ok ..."
 * or "error CODE ELAPSED_MS MESSAGE", ELAPSED timing the failing call. */
static int
child_main (const gchar *mode)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) b = NULL;
  gint64 since = g_get_monotonic_time ();
  gint8 blob[8] = { 0 };
  gint8 all[8 * 8];

  /* never outlive a test that went wrong */
  alarm (20);

  if (g_str_equal (mode, "engine"))
    return child_engine ();

  b = mixprec_bootstrap_new_from_environment (0, &error);
  if (b == NULL)
    return child_report_error (error, since);

  if (g_str_equal (mode, "join"))
    {
      g_print ("ok %s %u/%u\n", mixprec_bootstrap_get_source (b),
               mixprec_bootstrap_get_local_rank (b), mixprec_bootstrap_get_local_world_size (b));
      return 0;
    }
  if (g_str_equal (mode, "gather"))
    {
      for (guint round = 0; round < G_N_ELEMENTS (gather_sizes); round++)
        {
          if (!child_gather_round (b, round, gather_sizes[round], &error)
              || !mixprec_bootstrap_barrier (b, &error))
            return child_report_error (error, since);
        }
      g_print ("ok\n");
      return 0;
    }
  if (g_str_equal (mode, "join-sleep"))
    {
      g_print ("ok\n");
      fflush (stdout);
      g_usleep (30 * G_USEC_PER_SEC);
      return 0;
    }
  if (g_str_equal (mode, "abort"))
    {
      mixprec_bootstrap_abort (b);
      since = g_get_monotonic_time ();
      if (!mixprec_bootstrap_all_gather (b, blob, sizeof blob, all, &error))
        return child_report_error (error, since);
      g_print ("ok\n");
      return 0;
    }
  if (g_str_equal (mode, "length"))
    {
      gsize len = 8 - mixprec_bootstrap_get_rank (b) % 2;

      since = g_get_monotonic_time ();
      if (!mixprec_bootstrap_all_gather (b, blob, len, all, &error))
        return child_report_error (error, since);
      g_print ("ok\n");
      return 0;
    }
  if (g_str_equal (mode, "barrier"))
    {
      since = g_get_monotonic_time ();
      if (!mixprec_bootstrap_barrier (b, &error))
        return child_report_error (error, since);
      g_print ("ok\n");
      return 0;
    }

  /* the rest start with one good all_gather */
  since = g_get_monotonic_time ();
  if (!child_gather_round (b, 0, 8, &error))
    return child_report_error (error, since);
  if (g_str_equal (mode, "die"))
    _exit (0);                  /* no goodbye: the connection just closes */
  if (g_str_equal (mode, "silent"))
    {
      g_usleep (30 * G_USEC_PER_SEC);
      return 0;
    }
  /* "two": the second call is the one under test */
  since = g_get_monotonic_time ();
  if (!child_gather_round (b, 1, 8, &error))
    return child_report_error (error, since);
  g_print ("ok\n");
  return 0;
}

/* ------------------------------------------------------------ parent */

static guint16
free_port (void)
{
  g_autoptr(GSocket) socket = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (lo, 0);
  g_autoptr(GSocketAddress) bound = NULL;

  g_assert_true (g_socket_bind (socket, any, FALSE, NULL));
  bound = g_socket_get_local_address (socket, NULL);
  return g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
}

typedef struct
{
  GSubprocess *process;
  gboolean ok;
  gint code;
  guint elapsed_ms;
  gchar *line;
} Child;

/* The children of one test; every one is killed and reaped at the end,
 * whatever happened. */
typedef struct
{
  GPtrArray *children;
  guint16 port;
} Job;

static void
child_free (Child *c)
{
  if (c->process != NULL)
    {
      g_subprocess_force_exit (c->process);
      g_subprocess_wait (c->process, NULL, NULL);
      g_object_unref (c->process);
    }
  g_free (c->line);
  g_free (c);
}

static void
job_init (Job *job)
{
  job->children = g_ptr_array_new_with_free_func ((GDestroyNotify) child_free);
  job->port = free_port ();
}

static void
job_clear (Job *job)
{
  g_ptr_array_unref (job->children);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Job, job_clear)

/* Starts this program as rank @rank of @world, in @mode, with the MIXPREC_
 * variables (or, with @torchrun, torchrun's; with JOB_TORCHRUN_LOCAL_RANK,
 * torchrun's plus LOCAL_RANK alone, as people set them by hand). */
#define JOB_TORCHRUN_LOCAL_RANK 2
static Child *
job_spawn (Job         *job,
           const gchar *mode,
           guint        rank,
           guint        world,
           const gchar *timeout_s,
           guint        torchrun)
{
  g_autoptr(GSubprocessLauncher) launcher = g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE);
  g_autofree gchar *self_exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree gchar *rank_s = g_strdup_printf ("%u", rank);
  g_autofree gchar *world_s = g_strdup_printf ("%u", world);
  g_autofree gchar *port_s = g_strdup_printf ("%u", job->port);
  const gchar *const families[] = {
    "MIXPREC_RANK", "MIXPREC_WORLD_SIZE", "MIXPREC_LOCAL_RANK", "MIXPREC_LOCAL_WORLD_SIZE",
    "MIXPREC_MASTER_ADDR", "MIXPREC_MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
    "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
  };
  const gchar *prefix = torchrun ? "" : "MIXPREC_";
  g_autoptr(GError) error = NULL;
  Child *c = g_new0 (Child, 1);

  g_assert_nonnull (self_exe);
  for (guint i = 0; i < G_N_ELEMENTS (families); i++)
    g_subprocess_launcher_unsetenv (launcher, families[i]);
  {
    g_autofree gchar *n1 = g_strconcat (prefix, "RANK", NULL);
    g_autofree gchar *n2 = g_strconcat (prefix, "WORLD_SIZE", NULL);
    g_autofree gchar *n3 = g_strconcat (prefix, "MASTER_ADDR", NULL);
    g_autofree gchar *n4 = g_strconcat (prefix, "MASTER_PORT", NULL);

    g_subprocess_launcher_setenv (launcher, n1, rank_s, TRUE);
    g_subprocess_launcher_setenv (launcher, n2, world_s, TRUE);
    g_subprocess_launcher_setenv (launcher, n3, "127.0.0.1", TRUE);
    g_subprocess_launcher_setenv (launcher, n4, port_s, TRUE);
  }
  if (torchrun == JOB_TORCHRUN_LOCAL_RANK)
    g_subprocess_launcher_setenv (launcher, "LOCAL_RANK", rank_s, TRUE);
  g_subprocess_launcher_setenv (launcher, "MIXPREC_TIMEOUT", timeout_s, TRUE);
  c->process = g_subprocess_launcher_spawn (launcher, &error, self_exe, "--child", mode, NULL);
  g_assert_no_error (error);
  g_ptr_array_add (job->children, c);
  return c;
}

/* Waits for @c to end by itself and reads its report. */
static void
child_finish (Child *c)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *out = NULL;

  g_assert_true (g_subprocess_communicate_utf8 (c->process, NULL, NULL, &out, NULL, &error));
  g_assert_no_error (error);
  g_assert_true (g_subprocess_get_if_exited (c->process));
  c->line = g_strchomp (g_steal_pointer (&out));
  if (g_str_has_prefix (c->line, "ok"))
    {
      c->ok = TRUE;
      g_assert_cmpint (g_subprocess_get_exit_status (c->process), ==, 0);
    }
  else
    {
      gchar *end = NULL;

      g_assert_true (g_str_has_prefix (c->line, "error "));
      c->code = (gint) g_ascii_strtoll (c->line + 6, &end, 10);
      c->elapsed_ms = (guint) g_ascii_strtoull (end, NULL, 10);
      g_assert_cmpint (g_subprocess_get_exit_status (c->process), ==, 1);
    }
  g_test_message ("child: %s", c->line);
}

static void
expect_child_error (Child       *c,
                    gint         code,
                    const gchar *fragment,
                    guint        max_ms)
{
  child_finish (c);
  if (c->ok || c->code != code || strstr (c->line, fragment) == NULL)
    g_error ("expected error %d with \"%s\", got: %s", code, fragment, c->line);
  g_assert_cmpuint (c->elapsed_ms, <=, max_ms);
}

static void
test_multi_gather (gconstpointer data)
{
  guint world = GPOINTER_TO_UINT (data);
  g_auto(Job) job;
  GPtrArray *children;

  job_init (&job);
  for (guint r = 0; r < world; r++)
    job_spawn (&job, "gather", r, world, "10", FALSE);
  children = job.children;
  for (guint r = 0; r < world; r++)
    {
      Child *c = g_ptr_array_index (children, r);

      child_finish (c);
      if (!c->ok)
        g_error ("rank %u: %s", r, c->line);
    }
}

static void
test_multi_torchrun_variables (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "join", 0, 2, "10", TRUE);
  job_spawn (&job, "join", 1, 2, "10", TRUE);
  for (guint r = 0; r < 2; r++)
    {
      Child *c = g_ptr_array_index (job.children, r);
      g_autofree gchar *expected = g_strdup_printf ("ok torchrun %u/2", r);

      child_finish (c);
      g_assert_cmpstr (c->line, ==, expected);
    }
}

/* LOCAL_RANK without LOCAL_WORLD_SIZE: accepted, and the rendezvous
 * counts the ranks of this host for the local world size. */
static void
test_multi_local_rank_alone (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "join", 0, 3, "10", JOB_TORCHRUN_LOCAL_RANK);
  job_spawn (&job, "join", 1, 3, "10", JOB_TORCHRUN_LOCAL_RANK);
  job_spawn (&job, "join", 2, 3, "10", JOB_TORCHRUN_LOCAL_RANK);
  for (guint r = 0; r < 3; r++)
    {
      Child *c = g_ptr_array_index (job.children, r);
      g_autofree gchar *expected = g_strdup_printf ("ok torchrun %u/3", r);

      child_finish (c);
      g_assert_cmpstr (c->line, ==, expected);
    }
}

static void
test_multi_wrong_port (void)
{
  guint16 port = free_port ();
  g_autoptr(GError) error = NULL;
  g_autofree gchar *where = g_strdup_printf ("rank 0 at 127.0.0.1:%u within 800 ms", port);
  gint64 start = g_get_monotonic_time ();
  MixprecBootstrap *b = mixprec_bootstrap_new (1, 2, "127.0.0.1", port, 800, &error);
  gint64 elapsed_ms = (g_get_monotonic_time () - start) / 1000;

  g_assert_null (b);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT);
  g_assert_nonnull (strstr (error->message, where));
  g_assert_nonnull (strstr (error->message, "is the port right?"));
  g_assert_cmpint (elapsed_ms, >=, 790);
  g_assert_cmpint (elapsed_ms, <=, 800 + PROMPT_MS);
}

static void
test_multi_port_in_use (void)
{
  g_autoptr(GSocket) holder = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                            G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (lo, 0);
  g_autoptr(GSocketAddress) bound = NULL;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *where = NULL;
  gint64 start;
  MixprecBootstrap *b;
  guint16 port;

  g_assert_true (g_socket_bind (holder, any, TRUE, NULL));
  g_assert_true (g_socket_listen (holder, NULL));
  bound = g_socket_get_local_address (holder, NULL);
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  where = g_strdup_printf ("rank 0 cannot listen on 127.0.0.1:%u", port);

  start = g_get_monotonic_time ();
  b = mixprec_bootstrap_new (0, 2, "127.0.0.1", port, 3000, &error);
  g_assert_null (b);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT);
  g_assert_nonnull (strstr (error->message, where));
  g_assert_cmpint ((g_get_monotonic_time () - start) / 1000, <=, PROMPT_MS);
}

static void
test_multi_missing_rank (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "join", 0, 3, "1", FALSE);
  job_spawn (&job, "join", 1, 3, "1", FALSE);
  for (guint r = 0; r < 2; r++)
    expect_child_error (g_ptr_array_index (job.children, r), MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                        "rank 2 of 3 did not join within 1000 ms", 1000 + LATE_SLACK_MS);
}

static void
test_multi_duplicate_rank (void)
{
  g_auto(Job) job;

  /* rank 2 never comes, so the duplicate arrives while rank 0 still waits */
  job_init (&job);
  job_spawn (&job, "join", 0, 3, "3", FALSE);
  job_spawn (&job, "join", 1, 3, "3", FALSE);
  job_spawn (&job, "join", 1, 3, "3", FALSE);
  for (guint i = 0; i < 3; i++)
    expect_child_error (g_ptr_array_index (job.children, i), MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                        "rank 1 was started twice", PROMPT_MS);
}

static void
test_multi_duplicate_late (void)
{
  g_auto(Job) job;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) root = NULL;

  /* rank 0 is this process; the second rank 1 arrives after the job
   * started. Rank 0 stopped listening when the world was complete, so
   * the late process finds nobody (and fails by itself after its
   * timeout) while the job runs on unharmed. */
  job_init (&job);
  job_spawn (&job, "barrier", 1, 2, "3", FALSE);
  root = mixprec_bootstrap_new (0, 2, "127.0.0.1", job.port, 3000, &error);
  g_assert_no_error (error);
  g_assert_null (root->listener);
  job_spawn (&job, "join", 1, 2, "1", FALSE);

  g_assert_true (mixprec_bootstrap_barrier (root, &error));
  g_assert_no_error (error);
  child_finish (g_ptr_array_index (job.children, 0));
  g_assert_cmpstr (((Child *) g_ptr_array_index (job.children, 0))->line, ==, "ok");
  expect_child_error (g_ptr_array_index (job.children, 1), MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                      "could not reach rank 0", 1000 + PROMPT_MS);
}

static void
test_multi_world_mismatch (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "join", 0, 2, "3", FALSE);
  job_spawn (&job, "join", 1, 3, "3", FALSE);
  for (guint r = 0; r < 2; r++)
    expect_child_error (g_ptr_array_index (job.children, r), MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                        "rank 1 (pid ", PROMPT_MS);
  g_assert_nonnull (strstr (((Child *) g_ptr_array_index (job.children, 0))->line,
                            "was started with world size 3, but rank 0 with world size 2"));
}

static void
test_multi_peer_dies (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "two", 0, 3, "3", FALSE);
  job_spawn (&job, "two", 1, 3, "3", FALSE);
  job_spawn (&job, "die", 2, 3, "3", FALSE);
  for (guint r = 0; r < 2; r++)
    expect_child_error (g_ptr_array_index (job.children, r), MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                        "rank 2 closed its connection during all_gather #2", PROMPT_MS);
}

static void
test_multi_root_dies (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "die", 0, 2, "3", FALSE);
  job_spawn (&job, "two", 1, 2, "3", FALSE);
  expect_child_error (g_ptr_array_index (job.children, 1), MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                      "rank 0 closed its connection during all_gather #2", PROMPT_MS);
}

static void
test_multi_peer_silent (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "two", 0, 3, "1", FALSE);
  job_spawn (&job, "two", 1, 3, "1", FALSE);
  job_spawn (&job, "silent", 2, 3, "1", FALSE);
  for (guint r = 0; r < 2; r++)
    {
      Child *c = g_ptr_array_index (job.children, r);

      expect_child_error (c, MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
                          "rank 2 of 3 did not reach all_gather #2 within 1000 ms",
                          1000 + LATE_SLACK_MS);
      /* rank 0 times the wait itself; rank 1 may have entered a bit later */
      g_assert_cmpuint (c->elapsed_ms, >=, r == 0 ? 990 : 500);
    }
}

static void
test_multi_length_mismatch (void)
{
  g_auto(Job) job;

  job_init (&job);
  for (guint r = 0; r < 3; r++)
    job_spawn (&job, "length", r, 3, "3", FALSE);
  for (guint r = 0; r < 3; r++)
    expect_child_error (g_ptr_array_index (job.children, r), MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
                        "ranks disagree on the length of all_gather #1: rank 0 passed 8 bytes, "
                        "rank 1 passed 7", PROMPT_MS);
}

static void
test_multi_abort_peer (void)
{
  g_auto(Job) job;

  job_init (&job);
  job_spawn (&job, "two", 0, 2, "3", FALSE);
  job_spawn (&job, "abort", 1, 2, "3", FALSE);
  expect_child_error (g_ptr_array_index (job.children, 0), MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                      "rank 1 closed its connection during all_gather #1", PROMPT_MS);
  expect_child_error (g_ptr_array_index (job.children, 1), MIXPREC_BOOTSTRAP_ERROR_CLOSED,
                      "the bootstrap of rank 1 was aborted", 100);
}

static gpointer
abort_later (gpointer data)
{
  g_usleep (200 * 1000);
  mixprec_bootstrap_abort (data);
  return NULL;
}

static void
test_multi_abort_thread (void)
{
  g_auto(Job) job;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) root = NULL;
  GThread *thread;
  gint64 start;

  job_init (&job);
  job_spawn (&job, "join-sleep", 1, 2, "3", FALSE);
  root = mixprec_bootstrap_new (0, 2, "127.0.0.1", job.port, 3000, &error);
  g_assert_no_error (error);

  thread = g_thread_new ("abort", abort_later, root);
  start = g_get_monotonic_time ();
  g_assert_false (mixprec_bootstrap_barrier (root, &error));
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CLOSED);
  g_assert_nonnull (strstr (error->message, "aborted"));
  g_assert_cmpint ((g_get_monotonic_time () - start) / 1000, <=, PROMPT_MS);
  g_thread_join (thread);
  g_clear_error (&error);
  g_assert_false (mixprec_bootstrap_barrier (root, &error));
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CLOSED);
}

static void
test_multi_vtable (void)
{
  g_auto(Job) job;
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) root = NULL;
  const MixprecBootstrapV1 *table;
  guint8 mine[8], all[16];
  gchar errbuf[128];

  /* this process is rank 0 of 2, the child runs "two" (two all_gathers
   * of 8 bytes), and both sides check the other's pattern */
  job_init (&job);
  job_spawn (&job, "two", 1, 2, "3", FALSE);
  root = mixprec_bootstrap_new (0, 2, "127.0.0.1", job.port, 3000, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (mixprec_bootstrap_get_master_addr (root), ==, "127.0.0.1");
  g_assert_cmpuint (mixprec_bootstrap_get_master_port (root), ==, job.port);
  g_assert_cmpuint (mixprec_bootstrap_get_local_world_size (root), ==, 2);
  table = _mixprec_bootstrap_get_vtable (root);
  g_assert_cmpuint (table->rank, ==, 0);
  g_assert_cmpuint (table->world_size, ==, 2);
  g_assert_cmpuint (table->local_world_size, ==, 2);
  for (guint round = 0; round < 2; round++)
    {
      for (gsize i = 0; i < 8; i++)
        mine[i] = pattern (0, round, i);
      g_assert_cmpint (table->all_gather (table->ctx, mine, 8, all, errbuf, sizeof errbuf),
                       ==, MIXPREC_PLUGIN_OK);
      for (guint r = 0; r < 2; r++)
        for (gsize i = 0; i < 8; i++)
          g_assert_cmpuint (all[r * 8 + i], ==, pattern (r, round, i));
    }
  child_finish (g_ptr_array_index (job.children, 0));
  g_assert_cmpstr (((Child *) g_ptr_array_index (job.children, 0))->line, ==, "ok");
}

int
main (int    argc,
      char **argv)
{
  if (argc == 3 && g_str_equal (argv[1], "--child"))
    return child_main (argv[2]);

  g_test_init (&argc, &argv, NULL);

  /* the ranks of these jobs share a secret, as under mixprec-run; the
   * children inherit it, and mixprec_bootstrap_new() reads it here */
  g_setenv ("MIXPREC_JOB_SECRET", "746573742d626f6f747374726170207365637265742121", TRUE);
  g_unsetenv ("MIXPREC_JOB_SECRET_FILE");

  g_test_add_func ("/bootstrap/env/single", test_env_single);
  g_test_add_func ("/bootstrap/env/mixprec", test_env_mixprec);
  g_test_add_func ("/bootstrap/env/torchrun", test_env_torchrun);
  g_test_add_func ("/bootstrap/env/openmpi", test_env_openmpi);
  g_test_add_func ("/bootstrap/env/slurm", test_env_slurm);
  g_test_add_func ("/bootstrap/env/slurm-nodelist", test_env_nodelist);
  g_test_add_func ("/bootstrap/env/precedence", test_env_precedence);
  g_test_add_func ("/bootstrap/env/errors", test_env_errors);
  g_test_add_func ("/bootstrap/env/timeout", test_env_timeout);
  g_test_add_func ("/bootstrap/env/local-rank-alone", test_env_local_rank_alone);
  g_test_add_func ("/bootstrap/hosts/local-ranks", test_hosts_local_ranks);
  g_test_add_func ("/bootstrap/hosts/loopback-warning", test_hosts_loopback_warning);
  g_test_add_func ("/bootstrap/single/collectives", test_single_collectives);
  g_test_add_func ("/bootstrap/single/explicit", test_single_explicit);
  g_test_add_func ("/bootstrap/single/limits-and-abort", test_single_limits_and_abort);
  g_test_add_data_func ("/bootstrap/multi/gather/2", GUINT_TO_POINTER (2), test_multi_gather);
  g_test_add_data_func ("/bootstrap/multi/gather/3", GUINT_TO_POINTER (3), test_multi_gather);
  g_test_add_data_func ("/bootstrap/multi/gather/4", GUINT_TO_POINTER (4), test_multi_gather);
  g_test_add_func ("/bootstrap/multi/torchrun-variables", test_multi_torchrun_variables);
  g_test_add_func ("/bootstrap/multi/local-rank-alone", test_multi_local_rank_alone);
  g_test_add_func ("/bootstrap/multi/vtable", test_multi_vtable);
  g_test_add_func ("/bootstrap/multi/wrong-port", test_multi_wrong_port);
  g_test_add_func ("/bootstrap/multi/port-in-use", test_multi_port_in_use);
  g_test_add_func ("/bootstrap/multi/missing-rank", test_multi_missing_rank);
  g_test_add_func ("/bootstrap/multi/duplicate-rank", test_multi_duplicate_rank);
  g_test_add_func ("/bootstrap/multi/duplicate-late", test_multi_duplicate_late);
  g_test_add_func ("/bootstrap/multi/world-mismatch", test_multi_world_mismatch);
  g_test_add_func ("/bootstrap/multi/peer-dies", test_multi_peer_dies);
  g_test_add_func ("/bootstrap/multi/root-dies", test_multi_root_dies);
  g_test_add_func ("/bootstrap/multi/peer-silent", test_multi_peer_silent);
  g_test_add_func ("/bootstrap/multi/length-mismatch", test_multi_length_mismatch);
  g_test_add_func ("/bootstrap/multi/abort-peer", test_multi_abort_peer);
  g_test_add_func ("/bootstrap/multi/abort-thread", test_multi_abort_thread);

  return g_test_run ();
}
