/* test-security-comm.c — the comm-ucx plugin against a malicious or dying
 * peer, on 127.0.0.1: each case runs this program again as the ranks of a
 * job, which open the plugin straight from its module with a bootstrap
 * that wraps the library's own and, on one rank, corrupts what a peer
 * sent or dies midway. The peer bytes come from outside the plugin, as a
 * process that joined the rendezvous would send them; the receiving rank
 * must fail with a sentence naming the rank and the field, never abort,
 * hang or print the bytes raw, and leave nothing in /dev/shm.
 *
 * The last case runs a healthy 2-rank job with UCX_NET_DEVICES and
 * UCX_TLS unset and reads the ranks' listening sockets from
 * /proc/net/tcp{,6}: every one must be on loopback. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>
#include <mixprec/mixprec-plugin.h>

#include "comm-vtable.h"
#include "multiproc.h"
#include "ucx-peer.h"

/* Short enough for the failure cases, long enough for two busy cores. */
#define TIMEOUT_MS 4000

/* The bootstrap exchanges of comm-ucx's init with the same-host path on
 * (two ranks of this host): what each call of all_gather carries. */
enum
{
  CALL_IDENTITIES = 1,
  CALL_SHM_OFFERS = 2,
  CALL_SHM_INVITE = 3,
  CALL_SHM_MAPPED = 4,
  CALL_ADDRESS_LENGTHS = 5,
  CALL_ADDRESSES = 6,
};

/* ------------------------------------------------------------ a rank */

typedef struct
{
  MixprecBootstrap *real;
  const gchar *scenario;
  guint rank;
  guint calls;
} Wrap;

static void
fill_random (guint8 *bytes,
             gsize   len,
             guint32 seed)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);

  for (gsize i = 0; i < len; i++)
    bytes[i] = (guint8) g_rand_int_range (rand, 0, 256);
}

/* What the malicious side does to the bytes of call @call that arrived
 * from rank @peer (@slot: that rank's @len bytes). */
static void
corrupt (Wrap   *w,
         guint8 *out,
         gsize   len)
{
  const gchar *s = w->scenario;
  guint8 *peer1 = out + len, *peer0 = out;

  if (g_str_equal (s, "address-junk") && w->rank == 0 && w->calls == CALL_ADDRESSES)
    {
      /* Random bytes whose version nibble UCX does not know (2 to 15):
       * UCX 1.13 asserts on them (address.c, "addr version"). */
      fill_random (peer1, len, 6);
      peer1[0] = (guint8) ((peer1[0] & 0xf0) | (2 + peer1[0] % 14));
    }
  else if (g_str_equal (s, "address-length") && w->rank == 0 && w->calls == CALL_ADDRESS_LENGTHS)
    {
      guint64 huge = G_GUINT64_CONSTANT (4294967280);

      memcpy (peer1, &huge, sizeof huge);
    }
  else if (g_str_equal (s, "address-empty") && w->rank == 0 && w->calls == CALL_ADDRESS_LENGTHS)
    memset (peer1, 0, sizeof (guint64));
  else if (g_str_equal (s, "chunk-range") && w->rank == 1 && w->calls == CALL_SHM_INVITE)
    {
      guint64 chunk = G_GUINT64_CONSTANT (1) << 40;

      /* UcxShmInvite: name[64], then chunk_bytes */
      memcpy (peer0 + 64, &chunk, sizeof chunk);
    }
  else if (g_str_equal (s, "chunk-mismatch") && w->rank == 1 && w->calls == CALL_SHM_INVITE)
    {
      guint64 chunk = 65536;

      memcpy (peer0 + 64, &chunk, sizeof chunk);
    }
  else if (g_str_equal (s, "string-unterminated") && w->rank == 0 && w->calls == CALL_IDENTITIES)
    /* UcxPeerInfo: pid (8 bytes), then host[96] */
    memset (peer1 + 8, 'A', 96);
  else if (g_str_equal (s, "string-control") && w->rank == 0 && w->calls == CALL_IDENTITIES)
    {
      static const char control[] = "\033[2J\033]0;owned\007";

      memcpy (peer1 + 8, control, sizeof control);
    }
}

static int
wrap_all_gather (void       *ctx,
                 const void *in,
                 size_t      len,
                 void       *out,
                 char       *errbuf,
                 size_t      errbuf_len)
{
  Wrap *w = ctx;
  g_autoptr(GError) error = NULL;
  const gchar *s = w->scenario;

  w->calls++;
  /* A peer that dies in the middle of the shared-memory agreement: before
   * rank 0's invite (it has made the segment), or between the invite and
   * the answer (the others may have opened it). */
  if (w->rank == 1 && ((g_str_equal (s, "shm-die-invite") && w->calls == CALL_SHM_INVITE) ||
                       (g_str_equal (s, "shm-die-mapped") && w->calls == CALL_SHM_MAPPED)))
    _exit (42);
  if (!mixprec_bootstrap_all_gather (w->real, in, len, out, &error))
    {
      g_strlcpy (errbuf, error->message, errbuf_len);
      return MIXPREC_PLUGIN_ERR_PEER_FAILED;
    }
  /* Between rank 0's making of the segment and this rank's opening of it:
   * another user's segment, or one others may open. */
  if (w->rank == 1 && w->calls == CALL_SHM_INVITE &&
      (g_str_equal (s, "shm-mode") || g_str_equal (s, "shm-owner")))
    {
      g_autofree gchar *path = g_strdup_printf ("/dev/shm%s", (const gchar *) out);

      if (g_str_equal (s, "shm-mode"))
        g_assert_cmpint (chmod (path, 0666), ==, 0);
      else
        g_assert_cmpint (chown (path, 65534, 65534), ==, 0);
    }
  corrupt (w, out, len);
  /* MIXPREC_SECURITY_DUMP=DIR keeps what the peers sent, call by call:
   * the seeds of tests/fuzz/seeds/ucx-peer come from there. */
  if (g_getenv ("MIXPREC_SECURITY_DUMP") != NULL && w->rank == 0)
    {
      g_autofree gchar *path = g_strdup_printf ("%s/call-%u", g_getenv ("MIXPREC_SECURITY_DUMP"),
                                                w->calls);

      g_file_set_contents (path, out, (gssize) (2 * len), NULL);
    }
  return MIXPREC_PLUGIN_OK;
}

static int
wrap_barrier (void   *ctx,
              char   *errbuf,
              size_t  errbuf_len)
{
  Wrap *w = ctx;
  g_autoptr(GError) error = NULL;

  if (!mixprec_bootstrap_barrier (w->real, &error))
    {
      g_strlcpy (errbuf, error->message, errbuf_len);
      return MIXPREC_PLUGIN_ERR_PEER_FAILED;
    }
  return MIXPREC_PLUGIN_OK;
}

/* The plugin's vtable, straight from its module. */
static const MixprecCommV1 *
ucx_vtable (void)
{
  return test_comm_plugin_vtable ("comm-ucx");
}

/* The socket inodes of this process's open file descriptors. */
static GHashTable *
socket_inodes (void)
{
  GHashTable *inodes = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GDir) dir = g_dir_open ("/proc/self/fd", 0, NULL);
  const gchar *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    {
      g_autofree gchar *path = g_build_filename ("/proc/self/fd", name, NULL);
      g_autofree gchar *target = g_file_read_link (path, NULL);

      if (target != NULL && g_str_has_prefix (target, "socket:["))
        g_hash_table_add (inodes, g_strndup (target + 8, strlen (target) - 9));
    }
  return inodes;
}

/* "ADDRESS:PORT" of the LISTEN sockets among @inodes in /proc/net/@file,
 * one a line, into @out; the address as the kernel prints it (hex, in
 * network order per 32-bit word). */
static void
list_listeners (const gchar *file,
                GHashTable  *inodes,
                GString     *out)
{
  g_autofree gchar *path = g_build_filename ("/proc/net", file, NULL);
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return;
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 1; lines[i] != NULL; i++)
    {
      g_auto(GStrv) f = g_strsplit_set (g_strstrip (lines[i]), " ", -1);
      GPtrArray *fields = g_ptr_array_new ();

      for (guint k = 0; f[k] != NULL; k++)
        if (f[k][0] != '\0')
          g_ptr_array_add (fields, f[k]);
      /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
      if (fields->len >= 10 && g_str_equal (g_ptr_array_index (fields, 3), "0A") &&
          g_hash_table_contains (inodes, g_ptr_array_index (fields, 9)))
        g_string_append_printf (out, "%s %s\n", file, (const gchar *) g_ptr_array_index (fields, 1));
      g_ptr_array_unref (fields);
    }
}

/* Runs this rank; exits 0 when init succeeded (after a collective), 1
 * when it failed, with the message in $DIR/rankN. */
static int
rank_main (const gchar *scenario)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) real = NULL;
  const gchar *dir = g_getenv ("MIXPREC_SECURITY_DIR");
  const MixprecCommV1 *vt;
  MixprecBootstrapV1 boot = { 0 };
  MixprecCommInitV1 args = { 0 };
  Wrap w = { 0 };
  char errbuf[1024] = "";
  g_autoptr(GString) report = g_string_new (NULL);
  g_autofree gchar *file = NULL;
  void *handle = NULL;
  int status;

  if (g_str_equal (scenario, "listeners"))
    {
      g_unsetenv ("UCX_NET_DEVICES");
      g_unsetenv ("UCX_TLS");
    }
  vt = ucx_vtable ();
  real = mixprec_bootstrap_new_from_environment (TIMEOUT_MS, &error);
  g_assert_no_error (error);
  w.real = real;
  w.scenario = scenario;
  w.rank = mixprec_bootstrap_get_rank (real);
  boot.struct_size = sizeof boot;
  boot.rank = w.rank;
  boot.world_size = mixprec_bootstrap_get_world_size (real);
  boot.local_rank = mixprec_bootstrap_get_local_rank (real);
  boot.local_world_size = mixprec_bootstrap_get_local_world_size (real);
  boot.ctx = &w;
  boot.all_gather = wrap_all_gather;
  boot.barrier = wrap_barrier;
  args.struct_size = sizeof args;
  args.bootstrap = &boot;
  args.timeout_ms = TIMEOUT_MS;

  status = vt->init (&args, &handle, errbuf, sizeof errbuf);
  file = g_strdup_printf ("%s/rank%u", dir, w.rank);
  if (status != MIXPREC_PLUGIN_OK)
    {
      g_string_append_printf (report, "status %d\n%s\n", status, errbuf);
      g_assert_true (g_file_set_contents (file, report->str, -1, NULL));
      return 1;
    }
  if (g_str_equal (scenario, "listeners"))
    {
      g_autoptr(GHashTable) inodes = socket_inodes ();
      g_autofree gchar *ss = NULL;
      float x = 1.0f + (float) w.rank, sum = 0.0f;

      /* The job works: one all_reduce over what UCX was given. */
      g_assert_cmpint (vt->all_reduce (handle, &x, &sum, 1, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                       MIXPREC_PLUGIN_REDUCE_SUM, 0, NULL, errbuf, sizeof errbuf),
                       ==, MIXPREC_PLUGIN_OK);
      g_assert_cmpfloat (sum, ==, 3.0f);
      g_string_append_printf (report, "master-port %u\n",
                              mixprec_bootstrap_get_master_port (real));
      list_listeners ("tcp", inodes, report);
      list_listeners ("tcp6", inodes, report);
      /* For the record, when ss is there: the same, by process. */
      if (g_spawn_command_line_sync ("ss -ltnp", &ss, NULL, NULL, NULL) && ss != NULL)
        {
          g_auto(GStrv) lines = g_strsplit (ss, "\n", -1);
          g_autofree gchar *pid = g_strdup_printf ("pid=%d,", (int) getpid ());

          for (guint i = 0; lines[i] != NULL; i++)
            if (strstr (lines[i], pid) != NULL)
              g_string_append_printf (report, "ss %s\n", lines[i]);
        }
      /* Both ranks have listed theirs before either closes its sockets. */
      g_assert_true (mixprec_bootstrap_barrier (real, NULL));
    }
  g_assert_cmpint (vt->finalize (handle, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_string_append (report, "status 0\n");
  g_assert_true (g_file_set_contents (file, report->str, -1, NULL));
  return 0;
}

/* ------------------------------------------------------------ the cases */

typedef struct
{
  gchar *dir;
  gint status[2];
  gchar *out[2];
} Job;

static GHashTable *
shm_segments (void)
{
  GHashTable *names = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr(GDir) dir = g_dir_open ("/dev/shm", 0, NULL);
  const gchar *name;

  while (dir != NULL && (name = g_dir_read_name (dir)) != NULL)
    if (g_str_has_prefix (name, "mixprec-"))
      g_hash_table_add (names, g_strdup (name));
  return names;
}

/* Whether the process that made segment @name ("mixprec-ucx-PID-NONCE")
 * still runs: then it is another job's, alive (make check runs tests side
 * by side), not a leak of this one, whose ranks have all exited. */
static gboolean
creator_alive (const gchar *name)
{
  const gchar *p = name + strlen ("mixprec-ucx-");
  g_autofree gchar *proc = NULL;
  guint64 pid = 0;
  gchar *end = NULL;

  if (!g_str_has_prefix (name, "mixprec-ucx-"))
    return FALSE;
  pid = g_ascii_strtoull (p, &end, 10);
  if (end == p || *end != '-' || pid == 0)
    return FALSE;
  proc = g_strdup_printf ("/proc/%" G_GUINT64_FORMAT, pid);
  return g_file_test (proc, G_FILE_TEST_EXISTS);
}

/* Runs @scenario as 2 ranks; asserts that no rank died by a signal and
 * that /dev/shm holds no segment of the job afterwards. */
static void
run_job (const gchar *scenario,
         Job         *job)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GHashTable) before = shm_segments ();
  g_autoptr(GHashTable) after = NULL;
  g_autofree gchar *scenario_env = g_strdup_printf ("MIXPREC_SECURITY_SCENARIO=%s", scenario);
  g_autofree gchar *dir_env = NULL;
  const gchar *env[4] = { NULL };
  GHashTableIter iter;
  gpointer name;

  job->dir = g_dir_make_tmp ("mixprec-security-XXXXXX", &error);
  g_assert_no_error (error);
  dir_env = g_strdup_printf ("MIXPREC_SECURITY_DIR=%s", job->dir);
  env[0] = scenario_env;
  env[1] = dir_env;
  mp_run_ranks (2, TIMEOUT_MS, env, job->status);
  for (guint r = 0; r < 2; r++)
    {
      g_autofree gchar *file = g_strdup_printf ("%s/rank%u", job->dir, r);

      if (!g_file_get_contents (file, &job->out[r], NULL, NULL))
        job->out[r] = g_strdup ("");
      g_test_message ("%s: rank %u exited %d: %s", scenario, r, job->status[r], job->out[r]);
      /* 1: init failed cleanly; 0: it worked; 42: the dying rank. Never
       * a signal (134 is UCX's abort). */
      g_assert_true (job->status[r] == 0 || job->status[r] == 1 || job->status[r] == 42);
      /* Nothing printed raw: a terminal escape never reaches a message. */
      g_assert_null (strchr (job->out[r], '\033'));
      g_unlink (file);
    }
  g_rmdir (job->dir);
  after = shm_segments ();
  g_hash_table_iter_init (&iter, after);
  while (g_hash_table_iter_next (&iter, &name, NULL))
    if (!g_hash_table_contains (before, name) && !creator_alive (name))
      g_error ("%s: /dev/shm/%s remains after the job", scenario, (const gchar *) name);
}

static void
job_clear (Job *job)
{
  g_free (job->dir);
  g_free (job->out[0]);
  g_free (job->out[1]);
}

static void
assert_failed_with (const Job   *job,
                    guint        rank,
                    const gchar *text)
{
  g_assert_cmpint (job->status[rank], ==, 1);
  if (strstr (job->out[rank], text) == NULL)
    g_error ("rank %u's error lacks \"%s\": %s", rank, text, job->out[rank]);
}

static void
test_address_junk (void)
{
  Job job = { 0 };

  run_job ("address-junk", &job);
  assert_failed_with (&job, 0, "rank 1 sent a UCX worker address whose first byte");
  assert_failed_with (&job, 0, "UCX knows 0 (v1) and 1 (v2) only");
  job_clear (&job);
}

static void
test_address_length (void)
{
  Job job = { 0 };

  run_job ("address-length", &job);
  assert_failed_with (&job, 0, "rank 1 announced a UCX worker address of 4294967280 bytes: "
                      "must be from 1 to 65536");
  job_clear (&job);
  run_job ("address-empty", &job);
  assert_failed_with (&job, 0, "rank 1 announced a UCX worker address of 0 bytes");
  job_clear (&job);
}

static void
test_chunk_bytes (void)
{
  Job job = { 0 };

  run_job ("chunk-range", &job);
  assert_failed_with (&job, 1, "rank 0 sent a shared-memory chunk of 1099511627776 bytes: for "
                      "2 ranks it must be from 4096 to");
  job_clear (&job);
  run_job ("chunk-mismatch", &job);
  assert_failed_with (&job, 1, "rank 0 sent a shared-memory chunk of 65536 bytes where rank 1's "
                      "settings give 1048576");
  /* Rank 0 learns that its peer refused. */
  assert_failed_with (&job, 0, "rank 1 refused the shared-memory segment");
  job_clear (&job);
}

static void
test_strings (void)
{
  Job job = { 0 };

  run_job ("string-unterminated", &job);
  assert_failed_with (&job, 0, "rank 1 sent a host identity that is not NUL-terminated within "
                      "its 96 bytes");
  job_clear (&job);
  run_job ("string-control", &job);
  assert_failed_with (&job, 0, "rank 1 sent a host identity with bytes other than printable "
                      "ASCII (\"\\x1b[2J\\x1b]0;owned\\x07\")");
  job_clear (&job);
}

static void
test_shm_peer_dies (void)
{
  Job job = { 0 };

  /* run_job asserts that /dev/shm holds no new mixprec-* afterwards. */
  run_job ("shm-die-invite", &job);
  g_assert_cmpint (job.status[1], ==, 42);
  assert_failed_with (&job, 0, "exchanging the shared-memory segment's name through the "
                      "bootstrap failed");
  job_clear (&job);
  run_job ("shm-die-mapped", &job);
  g_assert_cmpint (job.status[1], ==, 42);
  assert_failed_with (&job, 0, "exchanging whether the shared-memory segment is mapped");
  job_clear (&job);
}

static void
test_shm_foreign (void)
{
  Job job = { 0 };

  run_job ("shm-mode", &job);
  assert_failed_with (&job, 1, "has mode 0666: refusing a segment that group or others may "
                      "open");
  assert_failed_with (&job, 1, "shared-memory segment /mixprec-ucx-");
  assert_failed_with (&job, 0, "rank 1 refused the shared-memory segment");
  job_clear (&job);
  if (geteuid () != 0)
    {
      g_test_skip ("giving a segment to another uid needs root");
      return;
    }
  run_job ("shm-owner", &job);
  assert_failed_with (&job, 1, "belongs to uid 65534, not to this rank's uid 0");
  job_clear (&job);
}

static gboolean
is_loopback_hex (const gchar *address)
{
  /* /proc/net/tcp: 127.x.y.z is "..7F" little-endian on x86 and arm64;
   * /proc/net/tcp6: ::1 and ::ffff:127.x.y.z. */
  gsize n = strcspn (address, ":");

  if (n == 8)
    return g_ascii_strncasecmp (address + 6, "7F", 2) == 0;
  if (n == 32)
    return g_ascii_strncasecmp (address, "00000000000000000000000001000000", 32) == 0 ||
           (g_ascii_strncasecmp (address, "0000000000000000FFFF0000", 24) == 0 &&
            g_ascii_strncasecmp (address + 30, "7F", 2) == 0);
  return FALSE;
}

static void
test_listeners_loopback (void)
{
  Job job = { 0 };

  run_job ("listeners", &job);
  for (guint r = 0; r < 2; r++)
    {
      g_auto(GStrv) lines = g_strsplit (job.out[r], "\n", -1);
      guint n = 0;

      g_assert_cmpint (job.status[r], ==, 0);
      for (guint i = 0; lines[i] != NULL; i++)
        {
          g_auto(GStrv) f = g_strsplit (lines[i], " ", 2);

          if (f[0] != NULL && f[1] != NULL &&
              (g_str_equal (f[0], "tcp") || g_str_equal (f[0], "tcp6")))
            {
              n++;
              if (!is_loopback_hex (f[1]))
                g_error ("rank %u listens on %s (/proc/net/%s): not loopback", r, f[1], f[0]);
            }
        }
      /* At least UCX's TCP transport on lo (and rank 0's rendezvous). */
      g_assert_cmpuint (n, >=, 1);
    }
  job_clear (&job);
}

/* ------------------------------------------------------------ pure checks */

static void
assert_refused (int          verdict,
                const char  *err,
                const gchar *text)
{
  g_assert_cmpint (verdict, ==, -1);
  if (strstr (err, text) == NULL)
    g_error ("expected \"%s\" in: %s", text, err);
}

/* The header layout of ucp_address_pack (UCX src/ucp/wireup/address.c):
 * version nibble, then flags, then the optional ids. */
static void
test_peer_address (void)
{
  const guint8 v1[] = { 0x00, 0xff }, v1_uuid[] = { 0x20, 1, 2, 3, 4, 5, 6, 7, 8, 0xff };
  const guint8 v2[] = { 0x51, 0x00, 0xff }, v2_flags[] = { 0x01, 0x80, 0xff };
  guint8 junk[16];
  char err[512];

  g_assert_cmpint (ucx_peer_check_address (v1, sizeof v1, 1, err, sizeof err), ==, 0);
  g_assert_cmpint (ucx_peer_check_address (v1_uuid, sizeof v1_uuid, 1, err, sizeof err), ==, 0);
  g_assert_cmpint (ucx_peer_check_address (v2, sizeof v2, 1, err, sizeof err), ==, 0);
  assert_refused (ucx_peer_check_address (v1_uuid, 5, 1, err, sizeof err), err,
                  "rank 1 sent a UCX worker address of 5 bytes whose header (flags 0x02) "
                  "needs at least 10");
  assert_refused (ucx_peer_check_address (v2_flags, sizeof v2_flags, 2, err, sizeof err), err,
                  "rank 2 sent a UCX worker address with header flags 0x80");
  for (guint v = 2; v < 16; v++)
    {
      memset (junk, 0xff, sizeof junk);
      junk[0] = (guint8) (0x30 | v);
      assert_refused (ucx_peer_check_address (junk, sizeof junk, 1, err, sizeof err), err,
                      "UCX knows 0 (v1) and 1 (v2) only");
    }
  assert_refused (ucx_peer_check_address (junk, 0, 1, err, sizeof err), err,
                  "of 0 bytes: must be from 1 to 65536");
}

static void
test_peer_strings (void)
{
  char shown[32];

  g_assert_true (ucx_peer_string_ok ("lo", 3));
  g_assert_false (ucx_peer_string_ok ("lo", 2));
  g_assert_false (ucx_peer_string_ok ("l\no", 4));
  ucx_peer_printable ("a\033b\\c\xff", 7, shown, sizeof shown);
  g_assert_cmpstr (shown, ==, "a\\x1bb\\x5cc\\xff");
  /* Cut to fit, never half an escape. */
  ucx_peer_printable ("\001\002\003", 3, shown, 8);
  g_assert_cmpstr (shown, ==, "\\x01");
}

static void
test_peer_segment (void)
{
  UcxShmInvite invite = { 0 }, out;
  char err[512];

  g_assert_cmpint (ucx_peer_check_segment_stat ("/mixprec-ucx-1", 0, 0100600, 4096, 0, 4096,
                                                err, sizeof err), ==, 0);
  assert_refused (ucx_peer_check_segment_stat ("/mixprec-ucx-1", 1000, 0100600, 4096, 0, 4096,
                                               err, sizeof err), err,
                  "shared-memory segment /mixprec-ucx-1 belongs to uid 1000, not to this "
                  "rank's uid 0");
  assert_refused (ucx_peer_check_segment_stat ("/mixprec-ucx-1", 0, 0100640, 4096, 0, 4096,
                                               err, sizeof err), err, "has mode 0640");
  assert_refused (ucx_peer_check_segment_stat ("/mixprec-ucx-1", 0, 0100600, 8192, 0, 4096,
                                               err, sizeof err), err,
                  "has 8192 bytes where this rank's settings need 4096");

  invite.ok = 1;
  invite.chunk_bytes = 1 << 20;
  g_strlcpy (invite.name, "/mixprec-ucx-12-abcdef01", sizeof invite.name);
  g_assert_cmpint (ucx_peer_parse_invite (&invite, sizeof invite, 1, 2, 1 << 20, &out,
                                          err, sizeof err), ==, 0);
  g_strlcpy (invite.name, "/mixprec-ucx-../../etc/x", sizeof invite.name);
  assert_refused (ucx_peer_parse_invite (&invite, sizeof invite, 1, 2, 1 << 20, &out,
                                         err, sizeof err), err, "hold no other '/'");
  g_strlcpy (invite.name, "/other", sizeof invite.name);
  assert_refused (ucx_peer_parse_invite (&invite, sizeof invite, 1, 2, 1 << 20, &out,
                                         err, sizeof err), err, "must start with");
  invite.ok = 7;
  assert_refused (ucx_peer_parse_invite (&invite, sizeof invite, 1, 2, 1 << 20, &out,
                                         err, sizeof err), err,
                  "rank 0 sent shared-memory ok = 7: must be 0 or 1");
  /* The segment's layout: the plugin's own (ucx-shm.c) for 2 ranks, 1 MiB
   * chunks: a page of header and lines, 6 buffers. */
  g_assert_cmpuint (ucx_peer_shm_segment_bytes (2, 1 << 20), ==, 4096 + 6 * (1 << 20));
  g_assert_cmpuint (ucx_peer_broken_rank (0, 2), ==, 2);
  g_assert_cmpuint (ucx_peer_broken_rank (2, 2), ==, 1);
  g_assert_cmpuint (ucx_peer_broken_rank (3, 2), ==, 2);
}

int
main (int    argc,
      char **argv)
{
  const gchar *scenario = g_getenv ("MIXPREC_SECURITY_SCENARIO");

  if (scenario != NULL && g_getenv ("MIXPREC_RANK") != NULL)
    return rank_main (scenario);
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/security-comm/ucx-peer/address", test_peer_address);
  g_test_add_func ("/security-comm/ucx-peer/strings", test_peer_strings);
  g_test_add_func ("/security-comm/ucx-peer/segment", test_peer_segment);
  g_test_add_func ("/security-comm/ucx/address-junk", test_address_junk);
  g_test_add_func ("/security-comm/ucx/address-length", test_address_length);
  g_test_add_func ("/security-comm/ucx/chunk-bytes", test_chunk_bytes);
  g_test_add_func ("/security-comm/ucx/strings", test_strings);
  g_test_add_func ("/security-comm/ucx/shm-peer-dies", test_shm_peer_dies);
  g_test_add_func ("/security-comm/ucx/shm-foreign", test_shm_foreign);
  g_test_add_func ("/security-comm/ucx/listeners-loopback", test_listeners_loopback);
  return g_test_run ();
}
