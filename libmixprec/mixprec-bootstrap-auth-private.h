/* mixprec-bootstrap-auth-private.h — the job secret and the mutual
 * challenge-response that admits a process to the rendezvous. Pure
 * functions over bytes, so the fuzz targets reach them without sockets. */
#pragma once

#include <glib.h>

#include "mixprec-bootstrap-wire-private.h"

G_BEGIN_DECLS

/* The secret is given as hex digits: at least 16 bytes (32 digits), at
 * most 1024 bytes. mixprec-run makes 32. */
#define MIXPREC_JOB_SECRET_MIN_BYTES 16
#define MIXPREC_JOB_SECRET_MAX_BYTES 1024
/* A secret file is at most this long (hex digits and white space). */
#define MIXPREC_JOB_SECRET_FILE_MAX 4096

#define MIXPREC_AUTH_NONCE_SIZE 32
#define MIXPREC_AUTH_MAC_SIZE 32
/* AUTH_REPLY's payload: rank 0's nonce, then its MAC. */
#define MIXPREC_AUTH_REPLY_SIZE (MIXPREC_AUTH_NONCE_SIZE + MIXPREC_AUTH_MAC_SIZE)

/* Which side computes a MAC: bound into it, so that a MAC one side sends
 * can never be replayed as the other side's. */
typedef enum {
  MIXPREC_AUTH_ROLE_ROOT,
  MIXPREC_AUTH_ROLE_PEER,
} MixprecAuthRole;

gboolean _mixprec_job_secret_parse_hex   (const gchar          *what,
                                          const gchar          *text,
                                          gsize                 len,
                                          gboolean              allow_space,
                                          GBytes              **secret,
                                          GError              **error);
gboolean _mixprec_job_secret_read_file   (const gchar          *path,
                                          GBytes              **secret,
                                          GError              **error);
gboolean _mixprec_job_secret_from_environ (const gchar * const *envp,
                                           GBytes             **secret,
                                           GError             **error);
gboolean _mixprec_auth_random            (guint8               *buffer,
                                          gsize                 len,
                                          GError              **error);
void     _mixprec_auth_mac               (GBytes               *secret,
                                          MixprecAuthRole       role,
                                          const guint8         *peer_nonce,
                                          const guint8         *root_nonce,
                                          guint8               *mac);
gboolean _mixprec_auth_verify            (GBytes               *secret,
                                          MixprecAuthRole       role,
                                          const guint8         *peer_nonce,
                                          const guint8         *root_nonce,
                                          const guint8         *mac,
                                          gsize                 mac_len);

/* The three messages, parsed and checked. Each returns FALSE with @error
 * saying what was wrong; none trusts anything of @payload but its bytes. */
gboolean _mixprec_auth_parse_challenge   (const MixprecWireHeader *header,
                                          const guint8         *payload,
                                          guint8               *peer_nonce,
                                          GError              **error);
gboolean _mixprec_auth_check_reply       (GBytes               *secret,
                                          const guint8         *peer_nonce,
                                          const MixprecWireHeader *header,
                                          const guint8         *payload,
                                          guint8               *root_nonce,
                                          GError              **error);
gboolean _mixprec_auth_check_proof       (GBytes               *secret,
                                          const guint8         *peer_nonce,
                                          const guint8         *root_nonce,
                                          const MixprecWireHeader *header,
                                          const guint8         *payload,
                                          GError              **error);

G_END_DECLS
