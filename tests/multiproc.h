/* multiproc.h — tests that run as several ranks: the test binary starts
 * copies of itself on 127.0.0.1 with the rank variables set. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The job secret the ranks of a test share, as mixprec-run would give
 * them one: tests exercise the authenticated rendezvous, and a rank
 * without a secret would warn (fatal under GTest). */
#define MP_JOB_SECRET "6d69787072656320746573742073656372657420666f722072616e6b73212121"

/* A TCP port on 127.0.0.1 nobody listens on right now. */
guint16 mp_free_port     (void);

/* Starts @world copies of this executable with MIXPREC_RANK etc. set, a
 * fresh rendezvous port, MIXPREC_COMM_TIMEOUT_MS=@timeout_ms,
 * MIXPREC_JOB_SECRET=MP_JOB_SECRET (unless @env names one) and the extra
 * "NAME=VALUE" strings of @env, waits for all of them, and stores each
 * exit status in @status (128 + signal for a killed rank). */
void    mp_run_ranks     (guint               world,
                          guint               timeout_ms,
                          const gchar * const *env,
                          gint                *status);

G_END_DECLS
