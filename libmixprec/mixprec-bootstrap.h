/* mixprec-bootstrap.h — rank discovery and the small control-message
 * exchange that communicators use to swap their addresses */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"

G_BEGIN_DECLS

/**
 * MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS:
 *
 * The timeout used when a caller passes 0 and `MIXPREC_TIMEOUT` is not set:
 * five minutes, long enough for slow job starts, short enough that a lost
 * rank does not hold a job forever.
 *
 * Since: 1.0
 */
#define MIXPREC_BOOTSTRAP_DEFAULT_TIMEOUT_MS 300000u

/**
 * MIXPREC_BOOTSTRAP_ERROR:
 *
 * The error domain of #MixprecBootstrap.
 *
 * Since: 1.0
 */
#define MIXPREC_BOOTSTRAP_ERROR (mixprec_bootstrap_error_quark ())

/**
 * MixprecBootstrapError:
 * @MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT: the rank variables are missing,
 *   malformed, partial or inconsistent
 * @MIXPREC_BOOTSTRAP_ERROR_CONNECT: rank 0 could not listen on the
 *   rendezvous address, or another rank could not reach it
 * @MIXPREC_BOOTSTRAP_ERROR_TIMEOUT: a peer never arrived, or stopped
 *   answering for longer than the timeout
 * @MIXPREC_BOOTSTRAP_ERROR_PROTOCOL: a duplicate rank, a world size
 *   mismatch, a rank out of range, differing message lengths, or a message
 *   that is not part of the protocol
 * @MIXPREC_BOOTSTRAP_ERROR_CLOSED: a peer closed its connection (its
 *   process ended or aborted), or the bootstrap was aborted
 *
 * Errors of #MixprecBootstrap.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_BOOTSTRAP_ERROR_ENVIRONMENT,
  MIXPREC_BOOTSTRAP_ERROR_CONNECT,
  MIXPREC_BOOTSTRAP_ERROR_TIMEOUT,
  MIXPREC_BOOTSTRAP_ERROR_PROTOCOL,
  MIXPREC_BOOTSTRAP_ERROR_CLOSED,
} MixprecBootstrapError;

MIXPREC_AVAILABLE_IN_1_0
GQuark mixprec_bootstrap_error_quark (void);

#define MIXPREC_TYPE_BOOTSTRAP (mixprec_bootstrap_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecBootstrap, mixprec_bootstrap, MIXPREC, BOOTSTRAP, GObject)

MIXPREC_AVAILABLE_IN_1_0
MixprecBootstrap *mixprec_bootstrap_new_from_environment (guint                 timeout_ms,
                                                          GError              **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecBootstrap *mixprec_bootstrap_new_from_environ     (const gchar * const  *envp,
                                                          guint                 timeout_ms,
                                                          GError              **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecBootstrap *mixprec_bootstrap_new                  (guint                 rank,
                                                          guint                 world_size,
                                                          const gchar          *master_addr,
                                                          guint16               master_port,
                                                          guint                 timeout_ms,
                                                          GError              **error);

MIXPREC_AVAILABLE_IN_1_0
guint             mixprec_bootstrap_get_rank             (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
guint             mixprec_bootstrap_get_world_size       (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
guint             mixprec_bootstrap_get_local_rank       (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
guint             mixprec_bootstrap_get_local_world_size (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
guint             mixprec_bootstrap_get_timeout          (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar      *mixprec_bootstrap_get_source           (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
const gchar      *mixprec_bootstrap_get_master_addr      (MixprecBootstrap     *self);
MIXPREC_AVAILABLE_IN_1_0
guint16           mixprec_bootstrap_get_master_port      (MixprecBootstrap     *self);

MIXPREC_AVAILABLE_IN_1_0
gboolean          mixprec_bootstrap_all_gather           (MixprecBootstrap     *self,
                                                          gconstpointer         in,
                                                          gsize                 len,
                                                          gpointer              out,
                                                          GError              **error);
MIXPREC_AVAILABLE_IN_1_0
GBytes           *mixprec_bootstrap_all_gather_bytes     (MixprecBootstrap     *self,
                                                          GBytes               *in,
                                                          GError              **error);
MIXPREC_AVAILABLE_IN_1_0
gboolean          mixprec_bootstrap_barrier              (MixprecBootstrap     *self,
                                                          GError              **error);
MIXPREC_AVAILABLE_IN_1_0
void              mixprec_bootstrap_abort                (MixprecBootstrap     *self);

G_END_DECLS
