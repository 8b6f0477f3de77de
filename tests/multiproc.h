/* multiproc.h — tests that run as several ranks: the test binary starts
 * copies of itself on 127.0.0.1 with the rank variables set. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* A TCP port on 127.0.0.1 nobody listens on right now. */
guint16 mp_free_port     (void);

/* Starts @world copies of this executable with MIXPREC_RANK etc. set, a
 * fresh rendezvous port, MIXPREC_COMM_TIMEOUT_MS=@timeout_ms and the extra
 * "NAME=VALUE" strings of @env, waits for all of them, and stores each
 * exit status in @status (128 + signal for a killed rank). */
void    mp_run_ranks     (guint               world,
                          guint               timeout_ms,
                          const gchar * const *env,
                          gint                *status);

G_END_DECLS
