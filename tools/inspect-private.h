/* inspect-private.h — the parts of mixprec-inspect, one file each. Every
 * part prints to stdout, reports problems on stderr and returns the exit
 * status. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

int inspect_formats (void);
int inspect_list    (void);
int inspect_name    (const gchar *name);
int inspect_config  (const gchar         *path,
                     const gchar * const *sets);
int inspect_plan    (const gchar         *config_path,
                     const gchar * const *sets,
                     guint64              n_params,
                     guint                world_size,
                     guint64              gathered);
int inspect_checkpoint (const gchar *dir,
                        gboolean     verify);

/* Reads @path (NULL: every default) with the --set overrides @sets
 * (path=VALUE each, may be NULL). */
MixprecConfig *inspect_load_config (const gchar         *path,
                                    const gchar * const *sets,
                                    GError             **error);

G_END_DECLS
