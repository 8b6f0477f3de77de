/* test-security-rendezvous.c — the attacks of issue 25 on the rendezvous,
 * replayed on 127.0.0.1 against real processes: a foreign hello, junk
 * frames (wrong version, a 4294967280-byte length), a silent connection,
 * a fake rank 0, a late connection after the world is complete, bad
 * secret files, and a job without a secret. This program re-executes
 * itself with `--child join PORT TIMEOUT_MS` as the real rank 1. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "mixprec-bootstrap-private.h"

#define SECRET "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static guint16
free_port (void)
{
  g_autoptr(GSocket) sock = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                          G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) addr = g_inet_socket_address_new (lo, 0);
  g_autoptr(GSocketAddress) bound = NULL;

  g_assert_true (g_socket_bind (sock, addr, TRUE, NULL));
  bound = g_socket_get_local_address (sock, NULL);
  return g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
}

/* A blocking client socket to 127.0.0.1:@port, or NULL (refused). */
static GSocket *
dial (guint16 port)
{
  g_autoptr(GSocket) sock = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                          G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) addr = g_inet_socket_address_new (lo, port);

  if (!g_socket_connect (sock, addr, NULL, NULL))
    return NULL;
  g_socket_set_timeout (sock, 2);
  return g_steal_pointer (&sock);
}

static void
frame (guint8  *out,
       guint32  magic,
       guint16  version,
       guint16  type,
       guint32  length)
{
  _mixprec_wire_put_u32 (out, magic);
  out[4] = version >> 8;
  out[5] = version & 0xff;
  out[6] = type >> 8;
  out[7] = type & 0xff;
  _mixprec_wire_put_u32 (out + 8, 0);
  _mixprec_wire_put_u32 (out + 12, 0);
  _mixprec_wire_put_u32 (out + 16, length);
}

/* Everything the socket gives until it closes or is silent for 2 s. */
static GByteArray *
drain (GSocket *sock)
{
  GByteArray *all = g_byte_array_new ();
  guint8 buf[4096];

  for (;;)
    {
      gssize n = g_socket_receive (sock, (gchar *) buf, sizeof buf, NULL, NULL);

      if (n <= 0)
        break;
      g_byte_array_append (all, buf, (guint) n);
    }
  return all;
}

static gboolean
contains (const GByteArray *haystack,
          const gchar      *needle)
{
  gsize n = strlen (needle);

  for (gsize i = 0; n > 0 && i + n <= haystack->len; i++)
    if (memcmp (haystack->data + i, needle, n) == 0)
      return TRUE;
  return FALSE;
}

/* ------------------------------------------------------------ child */

static int
child_main (guint16 port,
            guint   timeout_ms)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) b = NULL;
  guint8 in[4] = { 1, 2, 3, 4 }, out[8];

  /* the attacker goes first */
  g_usleep (600 * 1000);
  b = mixprec_bootstrap_new (1, 2, "127.0.0.1", port, timeout_ms, &error);
  if (b == NULL || !mixprec_bootstrap_all_gather (b, in, 4, out, &error))
    {
      printf ("error %d %s\n", error->code, error->message);
      return 1;
    }
  printf ("ok %u\n", out[0] + out[4]);
  return 0;
}

static GSubprocess *
spawn_rank1 (guint16      port,
             guint        timeout_ms,
             const gchar *secret)
{
  g_autofree gchar *self_exe = g_file_read_link ("/proc/self/exe", NULL);
  g_autofree gchar *port_s = g_strdup_printf ("%u", port);
  g_autofree gchar *timeout_s = g_strdup_printf ("%u", timeout_ms);
  g_autoptr(GSubprocessLauncher) l =
    g_subprocess_launcher_new (G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE);
  g_autoptr(GError) error = NULL;
  GSubprocess *p;

  g_subprocess_launcher_setenv (l, "MIXPREC_JOB_SECRET", secret, TRUE);
  p = g_subprocess_launcher_spawn (l, &error, self_exe, "--child", "join", port_s, timeout_s,
                                   NULL);
  g_assert_no_error (error);
  return p;
}

static gchar *
finish (GSubprocess *p,
        gchar      **err)
{
  g_autoptr(GError) error = NULL;
  gchar *out = NULL;

  g_assert_true (g_subprocess_communicate_utf8 (p, NULL, NULL, &out, err, &error));
  g_assert_no_error (error);
  return g_strchomp (out);
}

/* ------------------------------------------------------------ attacks */

typedef struct
{
  guint16 port;
  GByteArray *hello_answer;     /* what rank 0 said to a foreign hello */
  gboolean junk_dropped;
  gboolean huge_dropped;
  gboolean proof_refused;
} Attack;

static gpointer
attacker (gpointer data)
{
  Attack *a = data;
  g_autoptr(GSocket) hello = NULL;
  g_autoptr(GSocket) junk = NULL;
  g_autoptr(GSocket) huge = NULL;
  g_autoptr(GSocket) silent = NULL;
  g_autoptr(GSocket) forger = NULL;
  guint8 msg[MIXPREC_WIRE_HEADER_SIZE + MIXPREC_WIRE_HELLO_SIZE + 5];
  g_autoptr(GByteArray) got = NULL;
  gint64 until = g_get_monotonic_time () + 5 * G_USEC_PER_SEC;

  while ((hello = dial (a->port)) == NULL && g_get_monotonic_time () < until)
    g_usleep (20 * 1000);
  g_assert_nonnull (hello);
  silent = dial (a->port);

  /* a well-formed hello for rank 1, without the handshake */
  frame (msg, MIXPREC_WIRE_MAGIC, MIXPREC_WIRE_VERSION, MIXPREC_WIRE_HELLO,
         MIXPREC_WIRE_HELLO_SIZE + 5);
  _mixprec_wire_put_u32 (msg + 20, 1);
  _mixprec_wire_put_u32 (msg + 24, 2);
  _mixprec_wire_put_u32 (msg + 28, 1);
  _mixprec_wire_put_u32 (msg + 32, 2);
  _mixprec_wire_put_u32 (msg + 36, 4242);
  memcpy (msg + 40, "evil!", 5);
  g_assert_cmpint (g_socket_send (hello, (gchar *) msg, sizeof msg, NULL, NULL), ==, sizeof msg);
  a->hello_answer = drain (hello);

  /* right magic, wrong version */
  junk = dial (a->port);
  frame (msg, MIXPREC_WIRE_MAGIC, 77, MIXPREC_WIRE_HELLO, 0);
  g_socket_send (junk, (gchar *) msg, MIXPREC_WIRE_HEADER_SIZE, NULL, NULL);
  got = drain (junk);
  a->junk_dropped = got->len == 0;
  g_clear_pointer (&got, g_byte_array_unref);

  /* right magic and version, a 4294967280-byte length */
  huge = dial (a->port);
  frame (msg, MIXPREC_WIRE_MAGIC, MIXPREC_WIRE_VERSION, MIXPREC_WIRE_AUTH_CHALLENGE,
         4294967280u);
  g_socket_send (huge, (gchar *) msg, MIXPREC_WIRE_HEADER_SIZE, NULL, NULL);
  got = drain (huge);
  a->huge_dropped = got->len == 0;
  g_clear_pointer (&got, g_byte_array_unref);

  /* a proper challenge, then a forged proof: rank 0's own MAC reflected */
  forger = dial (a->port);
  {
    guint8 challenge[MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_NONCE_SIZE] = { 0 };
    guint8 reply[MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_REPLY_SIZE];
    guint8 proof[MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_MAC_SIZE];
    gsize have = 0;

    frame (challenge, MIXPREC_WIRE_MAGIC, MIXPREC_WIRE_VERSION, MIXPREC_WIRE_AUTH_CHALLENGE,
           MIXPREC_AUTH_NONCE_SIZE);
    g_socket_send (forger, (gchar *) challenge, sizeof challenge, NULL, NULL);
    while (have < sizeof reply)
      {
        gssize n = g_socket_receive (forger, (gchar *) reply + have, sizeof reply - have,
                                     NULL, NULL);
        if (n <= 0)
          break;
        have += (gsize) n;
      }
    g_assert_cmpuint (have, ==, sizeof reply);
    frame (proof, MIXPREC_WIRE_MAGIC, MIXPREC_WIRE_VERSION, MIXPREC_WIRE_AUTH_PROOF,
           MIXPREC_AUTH_MAC_SIZE);
    memcpy (proof + MIXPREC_WIRE_HEADER_SIZE,
            reply + MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_NONCE_SIZE, MIXPREC_AUTH_MAC_SIZE);
    g_socket_send (forger, (gchar *) proof, sizeof proof, NULL, NULL);
    got = drain (forger);
    a->proof_refused = got->len == 0;
  }
  return NULL;
}

static void
test_attacks_on_rank0 (void)
{
  Attack a = { free_port (), };
  g_autoptr(GSubprocess) rank1 = spawn_rank1 (a.port, 10000, SECRET);
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) root = NULL;
  g_autofree gchar *out = NULL;
  g_autofree gchar *err = NULL;
  g_autofree gchar *pid_s = g_strdup_printf ("%u", (guint) getpid ());
  g_autoptr(GSocket) late = NULL;
  GThread *thread = g_thread_new ("attacker", attacker, &a);
  guint8 in[4] = { 5, 6, 7, 8 }, all[8];

  root = mixprec_bootstrap_new (0, 2, "127.0.0.1", a.port, 10000, &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_bootstrap_all_gather (root, in, 4, all, &error));
  g_assert_no_error (error);
  g_thread_join (thread);
  out = finish (rank1, &err);
  g_test_message ("rank 1: %s; stderr: %s", out, err);
  g_assert_cmpstr (out, ==, "ok 6");
  g_assert_cmpuint (all[0] + all[4], ==, 6);

  /* the foreign hello got a fixed refusal, and nothing of the job */
  g_assert_cmpuint (a.hello_answer->len, >, MIXPREC_WIRE_HEADER_SIZE);
  g_assert_cmpuint (_mixprec_wire_get_u32 (a.hello_answer->data), ==, MIXPREC_WIRE_MAGIC);
  g_assert_cmpuint ((a.hello_answer->data[6] << 8) | a.hello_answer->data[7], ==,
                    MIXPREC_WIRE_FAIL);
  g_assert_true (contains (a.hello_answer, "requires the job secret"));
  g_assert_false (contains (a.hello_answer, pid_s));
  g_assert_false (contains (a.hello_answer, g_get_host_name ()));
  g_byte_array_unref (a.hello_answer);
  g_assert_true (a.junk_dropped);
  g_assert_true (a.huge_dropped);
  g_assert_true (a.proof_refused);

  /* the world is complete: the port is closed */
  late = dial (a.port);
  g_assert_null (late);
}

/* A fake rank 0 on the port: it reads what the real rank 1 sends and
 * answers the challenge with a made-up proof. */
static void
test_fake_root (void)
{
  g_autoptr(GSocket) listener = g_socket_new (G_SOCKET_FAMILY_IPV4, G_SOCKET_TYPE_STREAM,
                                              G_SOCKET_PROTOCOL_TCP, NULL);
  g_autoptr(GInetAddress) lo = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
  g_autoptr(GSocketAddress) any = g_inet_socket_address_new (lo, 0);
  g_autoptr(GSocketAddress) bound = NULL;
  g_autoptr(GSubprocess) rank1 = NULL;
  g_autoptr(GByteArray) heard = g_byte_array_new ();
  g_autofree gchar *out = NULL;
  g_autofree gchar *err = NULL;
  g_autofree gchar *where = NULL;
  guint16 port;
  guint connections = 0;
  gint64 until;

  g_assert_true (g_socket_bind (listener, any, TRUE, NULL));
  g_assert_true (g_socket_listen (listener, NULL));
  bound = g_socket_get_local_address (listener, NULL);
  port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
  where = g_strdup_printf ("found no rank 0 at 127.0.0.1:%u that proves the job secret", port);
  rank1 = spawn_rank1 (port, 2500, SECRET);

  g_socket_set_timeout (listener, 1);
  until = g_get_monotonic_time () + 4 * G_USEC_PER_SEC;
  while (g_get_monotonic_time () < until)
    {
      g_autoptr(GSocket) c = g_socket_accept (listener, NULL, NULL);
      guint8 reply[MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_REPLY_SIZE];
      guint8 buf[4096];
      gssize n;
      guint got_here = 0;

      if (c == NULL)
        continue;
      connections++;
      g_socket_set_timeout (c, 1);
      n = g_socket_receive (c, (gchar *) buf, sizeof buf, NULL, NULL);
      if (n > 0)
        {
          g_byte_array_append (heard, buf, (guint) n);
          got_here += (guint) n;
        }
      frame (reply, MIXPREC_WIRE_MAGIC, MIXPREC_WIRE_VERSION, MIXPREC_WIRE_AUTH_REPLY,
             MIXPREC_AUTH_REPLY_SIZE);
      memset (reply + MIXPREC_WIRE_HEADER_SIZE, 0x5a, MIXPREC_AUTH_REPLY_SIZE);
      g_socket_send (c, (gchar *) reply, sizeof reply, NULL, NULL);
      while ((n = g_socket_receive (c, (gchar *) buf, sizeof buf, NULL, NULL)) > 0)
        {
          g_byte_array_append (heard, buf, (guint) n);
          got_here += (guint) n;
        }
      /* only the challenge: a header and a nonce */
      g_assert_cmpuint (got_here, ==, MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_NONCE_SIZE);
    }
  out = finish (rank1, &err);
  g_test_message ("rank 1 after %u connections: %s", connections, out);
  g_assert_cmpuint (connections, >=, 2);
  g_assert_true (g_str_has_prefix (out, "error "));
  g_assert_nonnull (strstr (out, where));
  for (guint i = 0; i + MIXPREC_WIRE_HEADER_SIZE <= heard->len;
       i += MIXPREC_WIRE_HEADER_SIZE + MIXPREC_AUTH_NONCE_SIZE)
    g_assert_cmpuint ((heard->data[i + 6] << 8) | heard->data[i + 7], ==,
                      MIXPREC_WIRE_AUTH_CHALLENGE);
  /* What rank 1 sent is challenges only (their sizes and types above), so
   * nothing of the host can be in it unless a nonce were made of it. The
   * nonces are random bytes: a short host name ("vm") turns up in a few
   * hundred of them now and then, so only a name long enough not to
   * appear by chance is looked for. */
  if (strlen (g_get_host_name ()) >= 8)
    g_assert_false (contains (heard, g_get_host_name ()));
}

/* ------------------------------------------------------------ secrets */

static gchar *
secret_file (const gchar *dir,
             const gchar *name,
             guint        mode)
{
  gchar *path = g_build_filename (dir, name, NULL);

  g_assert_true (g_file_set_contents (path, SECRET "\n", -1, NULL));
  g_assert_cmpint (chmod (path, mode), ==, 0);
  return path;
}

static void
expect_file_refused (const gchar *path,
                     const gchar *rule)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) secret = NULL;

  g_assert_false (_mixprec_job_secret_read_file (path, &secret, &error));
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
  g_test_message ("%s", error->message);
  g_assert_nonnull (strstr (error->message, path));
  g_assert_nonnull (strstr (error->message, rule));
}

static void
test_secret_file (void)
{
  g_autofree gchar *dir = g_dir_make_tmp ("mixprec-secret-XXXXXX", NULL);
  g_autofree gchar *good = secret_file (dir, "good", 0600);
  g_autofree gchar *open_to_all = secret_file (dir, "open", 0644);
  g_autofree gchar *link = g_build_filename (dir, "link", NULL);
  g_autofree gchar *env_file = g_strconcat ("MIXPREC_JOB_SECRET_FILE=", open_to_all, NULL);
  const gchar *envp[] = { "MIXPREC_RANK=1", "MIXPREC_WORLD_SIZE=2", "MIXPREC_MASTER_ADDR=127.0.0.1",
                          "MIXPREC_MASTER_PORT=1", env_file, NULL };
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) secret = NULL;
  g_autoptr(MixprecBootstrap) b = NULL;

  g_assert_true (_mixprec_job_secret_read_file (good, &secret, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (g_bytes_get_size (secret), ==, 32);

  expect_file_refused (open_to_all, "mode 0644");
  g_assert_cmpint (symlink (good, link), ==, 0);
  expect_file_refused (link, "symbolic link");
  expect_file_refused (dir, "not a regular file");
  if (geteuid () == 0)
    {
      g_autofree gchar *foreign = secret_file (dir, "foreign", 0600);
      g_assert_cmpint (chown (foreign, 65534, 65534), ==, 0);
      expect_file_refused (foreign, "owned by uid 65534");
      g_unlink (foreign);
    }
  else
    g_test_message ("not root: the owner check is not exercised");

  /* the bootstrap refuses to start, naming the file */
  b = mixprec_bootstrap_new_from_environ (envp, 300, &error);
  g_assert_null (b);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
  g_assert_nonnull (strstr (error->message, open_to_all));

  g_unlink (link);
  g_unlink (good);
  g_unlink (open_to_all);
  g_rmdir (dir);
}

static void
test_secret_values (void)
{
  static const gchar *const bad[] = {
    "", "abc", "0123456789abcdef0123456789abcde",   /* odd */
    "0123456789abcdef0123456789abcdef0123456789abcdeg",  /* not hex */
    "00112233445566778899aabbccddee",  /* 15 bytes */
  };
  g_autoptr(GError) error = NULL;
  g_autoptr(GBytes) secret = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_assert_false (_mixprec_job_secret_parse_hex ("MIXPREC_JOB_SECRET", bad[i], strlen (bad[i]),
                                                     FALSE, &secret, &error));
      g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
      g_assert_nonnull (strstr (error->message, "MIXPREC_JOB_SECRET"));
      g_clear_error (&error);
    }
  g_assert_true (_mixprec_job_secret_parse_hex ("x", "00112233445566778899aabbccddeeff", 32,
                                                FALSE, &secret, &error));
  g_assert_cmpuint (g_bytes_get_size (secret), ==, 16);
}

/* The two MACs of one handshake differ by role: rank 0's proof does not
 * pass as a rank's, a wrong secret fails, a changed nonce fails. */
static void
test_handshake_macs (void)
{
  g_autoptr(GBytes) secret = g_bytes_new ("0123456789abcdef", 16);
  g_autoptr(GBytes) other = g_bytes_new ("0123456789abcdeF", 16);
  guint8 pn[32], rn[32], root_mac[32], peer_mac[32];

  memset (pn, 1, sizeof pn);
  memset (rn, 2, sizeof rn);
  _mixprec_auth_mac (secret, MIXPREC_AUTH_ROLE_ROOT, pn, rn, root_mac);
  _mixprec_auth_mac (secret, MIXPREC_AUTH_ROLE_PEER, pn, rn, peer_mac);
  g_assert_true (memcmp (root_mac, peer_mac, 32) != 0);
  g_assert_true (_mixprec_auth_verify (secret, MIXPREC_AUTH_ROLE_PEER, pn, rn, peer_mac, 32));
  g_assert_false (_mixprec_auth_verify (secret, MIXPREC_AUTH_ROLE_PEER, pn, rn, root_mac, 32));
  g_assert_false (_mixprec_auth_verify (other, MIXPREC_AUTH_ROLE_PEER, pn, rn, peer_mac, 32));
  g_assert_false (_mixprec_auth_verify (secret, MIXPREC_AUTH_ROLE_PEER, pn, rn, peer_mac, 31));
  rn[5] ^= 1;
  g_assert_false (_mixprec_auth_verify (secret, MIXPREC_AUTH_ROLE_PEER, pn, rn, peer_mac, 32));
}

/* ------------------------------------------------------------ no secret */

static void
test_no_secret_required (void)
{
  const gchar *envp[] = { "MIXPREC_RANK=1", "MIXPREC_WORLD_SIZE=2",
                          "MIXPREC_MASTER_ADDR=127.0.0.1", "MIXPREC_MASTER_PORT=1",
                          "MIXPREC_REQUIRE_JOB_SECRET=1", NULL };
  const gchar *bad[] = { "MIXPREC_RANK=1", "MIXPREC_WORLD_SIZE=2",
                         "MIXPREC_MASTER_ADDR=127.0.0.1", "MIXPREC_MASTER_PORT=1",
                         "MIXPREC_REQUIRE_JOB_SECRET=yes", NULL };
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecBootstrap) b = NULL;

  b = mixprec_bootstrap_new_from_environ (envp, 300, &error);
  g_assert_null (b);
  g_assert_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT);
  g_assert_nonnull (strstr (error->message, "requires a job secret"));
  g_clear_error (&error);
  b = mixprec_bootstrap_new_from_environ (bad, 300, &error);
  g_assert_null (b);
  g_assert_nonnull (strstr (error->message, "MIXPREC_REQUIRE_JOB_SECRET=yes"));
  g_clear_error (&error);
  b = _mixprec_bootstrap_new_from_environ_full (envp + 1, 300, TRUE, &error);
  g_assert_null (b);
}

static void
test_no_secret_warns_once (void)
{
  if (g_test_subprocess ())
    {
      const gchar *envp[] = { "MIXPREC_RANK=1", "MIXPREC_WORLD_SIZE=2",
                              "MIXPREC_MASTER_ADDR=127.0.0.1", "MIXPREC_MASTER_PORT=1", NULL };

      /* the warning is the point here: not fatal */
      g_log_set_always_fatal (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL);
      g_log_set_fatal_mask ("mixprec", G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL);
      for (guint i = 0; i < 2; i++)
        {
          g_autoptr(GError) error = NULL;
          g_autoptr(MixprecBootstrap) b = mixprec_bootstrap_new_from_environ (envp, 200, &error);
          g_assert_null (b);
        }
      return;
    }
  g_test_trap_subprocess (NULL, 20 * G_USEC_PER_SEC, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*rendezvous of rank 1 of 2 is unauthenticated*");
  g_test_trap_assert_stderr_unmatched ("*unauthenticated*unauthenticated*");
}

int
main (int    argc,
      char **argv)
{
  if (argc == 5 && g_str_equal (argv[1], "--child"))
    return child_main ((guint16) atoi (argv[3]), (guint) atoi (argv[4]));

  g_test_init (&argc, &argv, NULL);
  g_setenv ("MIXPREC_JOB_SECRET", SECRET, TRUE);
  g_unsetenv ("MIXPREC_JOB_SECRET_FILE");
  g_unsetenv ("MIXPREC_REQUIRE_JOB_SECRET");
  g_setenv ("UCX_NET_DEVICES", "lo", TRUE);

  g_test_add_func ("/security/rendezvous/attacks-on-rank0", test_attacks_on_rank0);
  g_test_add_func ("/security/rendezvous/fake-root", test_fake_root);
  g_test_add_func ("/security/rendezvous/secret-file", test_secret_file);
  g_test_add_func ("/security/rendezvous/secret-values", test_secret_values);
  g_test_add_func ("/security/rendezvous/handshake-macs", test_handshake_macs);
  g_test_add_func ("/security/rendezvous/no-secret-required", test_no_secret_required);
  g_test_add_func ("/security/rendezvous/no-secret-warns-once", test_no_secret_warns_once);
  return g_test_run ();
}
