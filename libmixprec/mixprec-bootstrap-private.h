/* mixprec-bootstrap-private.h — what the library shares about the
 * bootstrap: the environment parser (which tests reach without opening
 * sockets), the object's fields and helpers shared by rank 0's and the
 * other ranks' sides of the rendezvous, and the plain-C table handed to
 * comm plugins. */
#pragma once

#include <gio/gio.h>

#include "mixprec-bootstrap.h"
#include "mixprec-plugin.h"
#include "mixprec-bootstrap-wire-private.h"
#include "mixprec-bootstrap-auth-private.h"

G_BEGIN_DECLS

/* The rendezvous port when nothing names or derives one: torchrun's
 * default MASTER_PORT. */
#define _MIXPREC_BOOTSTRAP_DEFAULT_PORT 29500

/* Rank 0 holds at most this many connections that have not proven the
 * job secret; beyond it the oldest is dropped, so strangers can delay
 * a rank's admission but never fill the table for good. */
#define _MIXPREC_BOOTSTRAP_MAX_UNPROVEN 64
/* How long such a connection may take to prove it (capped by the
 * timeout): a real rank answers in microseconds. */
#define _MIXPREC_BOOTSTRAP_PROOF_MS 5000u
/* Dropped strangers are logged, each once, up to this many per job. */
#define _MIXPREC_BOOTSTRAP_MAX_DROP_LOGS 16

/* The resolved rank settings of one process, before any socket is opened. */
typedef struct {
  guint rank;
  guint world_size;
  guint local_rank;
  guint local_world_size;
  gchar *master_addr;          /* NULL when world_size == 1 */
  guint16 master_port;         /* 0 when world_size == 1 */
  guint timeout_ms;            /* from MIXPREC_TIMEOUT (or MIXPREC_COMM_TIMEOUT_MS), 0 when unset */
  const gchar *source;         /* "mixprec", "torchrun", "openmpi", "slurm", "single" */
  /* The environment gave no local world size: the rendezvous counts the
   * ranks of each host (by host name) and replaces local_world_size, and
   * local_rank too unless local_rank_given. */
  gboolean local_from_hosts;
  gboolean local_rank_given;
  GBytes *secret;              /* the job secret, NULL for none */
  gboolean require_secret;     /* MIXPREC_REQUIRE_JOB_SECRET=1 */
  gint listen_fd;              /* MIXPREC_BOOTSTRAP_LISTEN_FD, -1 when unset */
} MixprecBootstrapSettings;

void     _mixprec_bootstrap_settings_clear  (MixprecBootstrapSettings *settings);
gboolean _mixprec_bootstrap_parse_environ   (const gchar * const      *envp,
                                             MixprecBootstrapSettings *settings,
                                             GError                  **error);
gboolean _mixprec_bootstrap_security_from_environ (const gchar * const *envp,
                                                   MixprecBootstrapSettings *settings,
                                                   GError             **error);
MixprecBootstrap *_mixprec_bootstrap_new_from_environ_full (const gchar * const *envp,
                                                            guint                timeout_ms,
                                                            gboolean             require_secret,
                                                            GError             **error);
gboolean _mixprec_bootstrap_timeout_from_environ (const gchar * const *envp,
                                                  guint               *timeout_ms,
                                                  GError             **error);
gboolean _mixprec_bootstrap_is_loopback    (const gchar              *addr);
gchar   *_mixprec_bootstrap_first_host      (const gchar              *nodelist,
                                             GError                  **error);

/* Shared by the object (mixprec-bootstrap.c) and the two sides of the
 * rendezvous. */
struct _MixprecBootstrap
{
  GObject parent_instance;

  guint rank;
  guint world_size;
  guint local_rank;
  guint local_world_size;
  gboolean local_from_hosts;    /* see MixprecBootstrapSettings */
  gboolean local_rank_given;
  guint32 *hosts;               /* per rank, its host as the lowest rank on it; NULL: unknown */
  guint timeout_ms;
  const gchar *source;
  gchar *master_addr;
  guint16 master_port;

  GCancellable *cancellable;    /* cancelled by abort */
  GError *failure;              /* the first failure; later calls repeat it */
  guint32 seq;                  /* collectives started so far */

  GBytes *secret;               /* NULL: an unauthenticated rendezvous */
  gint listen_fd;               /* rank 0: a socket mixprec-run bound for us, or -1 */
  guint drops_logged;           /* rank 0: strangers logged so far */

  GSocket *listener;            /* rank 0, until the world is complete */
  GPtrArray *pending;           /* rank 0: connections not yet admitted */
  MixprecWireConn **peers;      /* rank 0: one per rank, [0] unused */
  MixprecWireConn *root;        /* other ranks: the connection to rank 0 */

  MixprecBootstrapV1 vtable;
};

/* The kinds of collective, carried in GATHER frames so that ranks calling
 * different ones are caught. */
enum
{
  MIXPREC_BOOTSTRAP_KIND_ALL_GATHER = 0,
  MIXPREC_BOOTSTRAP_KIND_BARRIER = 1,
};

const gchar *_mixprec_bootstrap_kind_name   (guint                      kind);
gint64       _mixprec_bootstrap_deadline    (MixprecBootstrap          *self);
gint64       _mixprec_bootstrap_slack_us    (MixprecBootstrap          *self);
void         _mixprec_bootstrap_fail        (MixprecBootstrap          *self,
                                             const GError              *error);
void         _mixprec_bootstrap_fail_with   (MixprecBootstrap          *self,
                                             GError                   **error,
                                             MixprecBootstrapError      code,
                                             const gchar               *format,
                                             ...) G_GNUC_PRINTF (4, 5);
void         _mixprec_bootstrap_set_aborted (MixprecBootstrap          *self,
                                             GError                   **error);
void         _mixprec_bootstrap_fail_aborted (MixprecBootstrap         *self,
                                              GError                  **error);
void         _mixprec_bootstrap_apply_hosts (MixprecBootstrap         *self,
                                             const guint8             *ids,
                                             gsize                     len);
gchar       *_mixprec_bootstrap_loopback_warning (const gchar        *master_addr,
                                                  GInetAddress       *bound,
                                                  guint               local_world_size,
                                                  guint               world_size);
GList       *_mixprec_bootstrap_resolve     (MixprecBootstrap          *self,
                                             GError                   **error);
void         _mixprec_bootstrap_tune_socket (GSocket                   *socket);

/* rank 0 (mixprec-bootstrap-root.c) */
gboolean _mixprec_bootstrap_root_setup  (MixprecBootstrap *self,
                                         GError          **error);
gboolean _mixprec_bootstrap_root_gather (MixprecBootstrap *self,
                                         guint             kind,
                                         gconstpointer     in,
                                         gsize             len,
                                         guint8           *out,
                                         GError          **error);
void     _mixprec_bootstrap_root_tell_failure (MixprecBootstrap *self,
                                              const GError     *error);
/* every other rank (mixprec-bootstrap-peer.c) */
gboolean _mixprec_bootstrap_peer_join   (MixprecBootstrap *self,
                                         GError          **error);
gboolean _mixprec_bootstrap_peer_gather (MixprecBootstrap *self,
                                         guint             kind,
                                         gconstpointer     in,
                                         gsize             len,
                                         guint8           *out,
                                         GError          **error);

/* The table handed to a communicator's init(); ctx is @self, and the
 * functions write the GError message into errbuf. Owned by @self. */
const MixprecBootstrapV1 *_mixprec_bootstrap_get_vtable (MixprecBootstrap *self);
/* Rank @rank's host as the lowest rank on the same host (by host name, as
 * the rendezvous learnt them); @rank itself when the bootstrap does not
 * know (a world of one, or before the rendezvous). */
guint        _mixprec_bootstrap_get_host    (MixprecBootstrap         *self,
                                             guint                     rank);

G_END_DECLS
