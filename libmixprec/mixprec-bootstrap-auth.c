/* mixprec-bootstrap-auth.c — the job secret (from MIXPREC_JOB_SECRET or a
 * 0600 file named by MIXPREC_JOB_SECRET_FILE) and the HMAC-SHA-256
 * challenge-response by which rank 0 and each other rank prove to one
 * another that they hold it, before either says anything else. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mixprec.h"
#include "mixprec-bootstrap-auth-private.h"

/* Domain separation: these MACs mean "admission to a libmixprec
 * rendezvous, protocol 2", nothing else keyed with the same secret. */
#define AUTH_LABEL "libmixprec bootstrap auth v2"

gboolean
_mixprec_job_secret_parse_hex (const gchar *what,
                               const gchar *text,
                               gsize        len,
                               gboolean     allow_space,
                               GBytes     **secret,
                               GError     **error)
{
  g_autoptr(GByteArray) bytes = g_byte_array_new ();
  gint high = -1;

  for (gsize i = 0; i < len; i++)
    {
      gint v = g_ascii_xdigit_value (text[i]);

      if (v < 0 && allow_space && g_ascii_isspace (text[i]))
        continue;
      if (v < 0)
        {
          /* never echo the secret, not even a piece of it */
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "%s is not a job secret: character %" G_GSIZE_FORMAT " is not a hex "
                       "digit (the secret is %u to %u bytes written as hex digits, e.g. "
                       "from `head -c32 /dev/urandom | xxd -p -c64`)", what, i + 1,
                       MIXPREC_JOB_SECRET_MIN_BYTES, MIXPREC_JOB_SECRET_MAX_BYTES);
          return FALSE;
        }
      if (high < 0)
        high = v;
      else
        {
          guint8 b = (guint8) (high << 4 | v);

          g_byte_array_append (bytes, &b, 1);
          high = -1;
        }
      if (bytes->len > MIXPREC_JOB_SECRET_MAX_BYTES)
        break;
    }
  if (high >= 0 || bytes->len < MIXPREC_JOB_SECRET_MIN_BYTES
      || bytes->len > MIXPREC_JOB_SECRET_MAX_BYTES)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s is not a job secret: it must be an even number of hex digits "
                   "giving %u to %u bytes (%u to %u digits)", what,
                   MIXPREC_JOB_SECRET_MIN_BYTES, MIXPREC_JOB_SECRET_MAX_BYTES,
                   2 * MIXPREC_JOB_SECRET_MIN_BYTES, 2 * MIXPREC_JOB_SECRET_MAX_BYTES);
      return FALSE;
    }
  *secret = g_byte_array_free_to_bytes (g_steal_pointer (&bytes));
  return TRUE;
}

/* The file must be ours alone: a regular file (not a link, FIFO or
 * device), owned by this user, with no permission bits for group or
 * others. Anyone who can read it can join the job. */
gboolean
_mixprec_job_secret_read_file (const gchar *path,
                               GBytes     **secret,
                               GError     **error)
{
  g_autofree gchar *what = g_strdup_printf ("MIXPREC_JOB_SECRET_FILE %s", path);
  gchar text[MIXPREC_JOB_SECRET_FILE_MAX + 1];
  gsize got = 0;
  struct stat st;
  int fd;

  fd = open (path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    {
      int saved = errno;
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "cannot open %s: %s%s", what, g_strerror (saved),
                   saved == ELOOP ? " (it is a symbolic link; name the file itself)" : "");
      return FALSE;
    }
  if (fstat (fd, &st) < 0 || !S_ISREG (st.st_mode))
    {
      close (fd);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s is not a regular file; the job secret file must be one", what);
      return FALSE;
    }
  if (st.st_uid != geteuid ())
    {
      close (fd);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s is owned by uid %u, not by this user (uid %u); the job secret file "
                   "must belong to the user who runs the job", what, (guint) st.st_uid,
                   (guint) geteuid ());
      return FALSE;
    }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    {
      close (fd);
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s has mode %04o; the job secret file must not be accessible to group "
                   "or others (chmod 600 %s)", what, (guint) (st.st_mode & 07777), path);
      return FALSE;
    }
  while (got < sizeof text)
    {
      gssize n = read (fd, text + got, sizeof text - got);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int saved = errno;
          close (fd);
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                       "cannot read %s: %s", what, g_strerror (saved));
          return FALSE;
        }
      if (n == 0)
        break;
      got += (gsize) n;
    }
  close (fd);
  if (got > MIXPREC_JOB_SECRET_FILE_MAX)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "%s is longer than %u bytes; it must hold only the secret in hex",
                   what, MIXPREC_JOB_SECRET_FILE_MAX);
      return FALSE;
    }
  return _mixprec_job_secret_parse_hex (what, text, got, TRUE, secret, error);
}

/* *secret stays NULL when neither variable is set: an unauthenticated job,
 * which the caller warns about or refuses. */
gboolean
_mixprec_job_secret_from_environ (const gchar * const *envp,
                                  GBytes             **secret,
                                  GError             **error)
{
  g_auto(GStrv) own = envp == NULL ? g_get_environ () : NULL;
  gchar **env = envp != NULL ? (gchar **) envp : own;
  const gchar *value = g_environ_getenv (env, "MIXPREC_JOB_SECRET");
  const gchar *file = g_environ_getenv (env, "MIXPREC_JOB_SECRET_FILE");

  *secret = NULL;
  if (value != NULL && file != NULL)
    {
      g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                   "both MIXPREC_JOB_SECRET and MIXPREC_JOB_SECRET_FILE (%s) are set; set "
                   "one of them", file);
      return FALSE;
    }
  if (value != NULL)
    {
      g_autofree gchar *trimmed = g_strstrip (g_strdup (value));
      return _mixprec_job_secret_parse_hex ("MIXPREC_JOB_SECRET", trimmed, strlen (trimmed),
                                            FALSE, secret, error);
    }
  if (file != NULL)
    {
      if (*file == '\0')
        {
          g_set_error_literal (error, MIXPREC_BOOTSTRAP_ERROR,
                               MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
                               "MIXPREC_JOB_SECRET_FILE is set but empty; name the file "
                               "that holds the job secret");
          return FALSE;
        }
      return _mixprec_job_secret_read_file (file, secret, error);
    }
  return TRUE;
}

gboolean
_mixprec_auth_random (guint8  *buffer,
                      gsize    len,
                      GError **error)
{
  gsize got = 0;

  while (got < len)
    {
      gssize n = getrandom (buffer + got, len - got, 0);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        {
          int saved = errno;
          g_set_error (error, MIXPREC_BOOTSTRAP_ERROR, MIXPREC_BOOTSTRAP_ERROR_CONNECT,
                       "cannot draw a random nonce for the rendezvous: getrandom: %s",
                       g_strerror (saved));
          return FALSE;
        }
      got += (gsize) n;
    }
  return TRUE;
}

/* HMAC-SHA-256(secret, label || role || peer nonce || root nonce). Both
 * nonces in the same order for both roles; the role byte alone tells the
 * two MACs of one handshake apart. */
void
_mixprec_auth_mac (GBytes         *secret,
                   MixprecAuthRole role,
                   const guint8   *peer_nonce,
                   const guint8   *root_nonce,
                   guint8         *mac)
{
  gsize key_len = 0;
  const guint8 *key = g_bytes_get_data (secret, &key_len);
  g_autoptr(GHmac) hmac = g_hmac_new (G_CHECKSUM_SHA256, key, key_len);
  const gchar *who = role == MIXPREC_AUTH_ROLE_ROOT ? "root" : "peer";
  gsize mac_len = MIXPREC_AUTH_MAC_SIZE;

  g_hmac_update (hmac, (const guchar *) AUTH_LABEL, sizeof AUTH_LABEL);
  g_hmac_update (hmac, (const guchar *) who, 5);
  g_hmac_update (hmac, peer_nonce, MIXPREC_AUTH_NONCE_SIZE);
  g_hmac_update (hmac, root_nonce, MIXPREC_AUTH_NONCE_SIZE);
  g_hmac_get_digest (hmac, mac, &mac_len);
}

gboolean
_mixprec_auth_verify (GBytes         *secret,
                      MixprecAuthRole role,
                      const guint8   *peer_nonce,
                      const guint8   *root_nonce,
                      const guint8   *mac,
                      gsize           mac_len)
{
  guint8 expected[MIXPREC_AUTH_MAC_SIZE];
  guint8 diff = 0;

  if (mac_len != MIXPREC_AUTH_MAC_SIZE)
    return FALSE;
  _mixprec_auth_mac (secret, role, peer_nonce, root_nonce, expected);
  /* constant time: how many leading bytes match must not show in timing */
  for (gsize i = 0; i < MIXPREC_AUTH_MAC_SIZE; i++)
    diff |= expected[i] ^ mac[i];
  return diff == 0;
}

gboolean
_mixprec_auth_parse_challenge (const MixprecWireHeader *header,
                               const guint8            *payload,
                               guint8                  *peer_nonce,
                               GError                 **error)
{
  if (header->type != MIXPREC_WIRE_AUTH_CHALLENGE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "sent message type %u before proving the job secret (a rank without "
                   "MIXPREC_JOB_SECRET, or not a rank at all)", header->type);
      return FALSE;
    }
  if (header->length != MIXPREC_AUTH_NONCE_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "sent a %u-byte challenge where %u bytes belong", header->length,
                   MIXPREC_AUTH_NONCE_SIZE);
      return FALSE;
    }
  memcpy (peer_nonce, payload, MIXPREC_AUTH_NONCE_SIZE);
  return TRUE;
}

gboolean
_mixprec_auth_check_reply (GBytes                  *secret,
                           const guint8            *peer_nonce,
                           const MixprecWireHeader *header,
                           const guint8            *payload,
                           guint8                  *root_nonce,
                           GError                 **error)
{
  if (header->type != MIXPREC_WIRE_AUTH_REPLY || header->length != MIXPREC_AUTH_REPLY_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "answered the challenge with message type %u of %u bytes, not with a "
                   "proof of the job secret (does rank 0 have MIXPREC_JOB_SECRET?)",
                   header->type, header->length);
      return FALSE;
    }
  if (!_mixprec_auth_verify (secret, MIXPREC_AUTH_ROLE_ROOT, peer_nonce, payload,
                             payload + MIXPREC_AUTH_NONCE_SIZE, MIXPREC_AUTH_MAC_SIZE))
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                           "could not prove that it holds this job's secret (another job "
                           "on this port, or a different MIXPREC_JOB_SECRET?)");
      return FALSE;
    }
  memcpy (root_nonce, payload, MIXPREC_AUTH_NONCE_SIZE);
  return TRUE;
}

gboolean
_mixprec_auth_check_proof (GBytes                  *secret,
                           const guint8            *peer_nonce,
                           const guint8            *root_nonce,
                           const MixprecWireHeader *header,
                           const guint8            *payload,
                           GError                 **error)
{
  if (header->type != MIXPREC_WIRE_AUTH_PROOF || header->length != MIXPREC_AUTH_MAC_SIZE)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                   "sent message type %u of %u bytes where its proof of the job secret "
                   "belongs", header->type, header->length);
      return FALSE;
    }
  if (!_mixprec_auth_verify (secret, MIXPREC_AUTH_ROLE_PEER, peer_nonce, root_nonce, payload,
                             header->length))
    {
      g_set_error_literal (error, G_IO_ERROR, G_IO_ERROR_INVALID_DATA,
                           "could not prove that it holds this job's secret (a rank of "
                           "another job, or a different MIXPREC_JOB_SECRET?)");
      return FALSE;
    }
  return TRUE;
}
