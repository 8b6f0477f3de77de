/* run-private.h — the pieces of mixprec-run shared between its files. */
#pragma once

#include <gio/gio.h>

G_BEGIN_DECLS

/* Copies one child's pipe to one of our file descriptors, a whole line at
 * a time, each line starting with a prefix such as "[3] ". */
typedef struct _RunRelay RunRelay;

typedef void (*RunRelayDone) (RunRelay *relay,
                              gpointer  user_data);

RunRelay *run_relay_new    (GInputStream *stream,
                            int           fd,
                            const gchar  *prefix,
                            RunRelayDone  done,
                            gpointer      user_data);
void      run_relay_start  (RunRelay     *relay);
gboolean  run_relay_is_eof (RunRelay     *relay);
void      run_relay_flush  (RunRelay     *relay);
void      run_relay_free   (RunRelay     *relay);

/* Writes all of @data to @fd, retrying short writes. */
void      run_write_all    (int           fd,
                            const gchar  *data,
                            gsize         len);

G_END_DECLS
