/* inspect-private.h — the parts of mixprec-inspect, one file each. Every
 * part prints to stdout, reports problems on stderr and returns the exit
 * status. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

int inspect_formats (void);
int inspect_list    (void);
int inspect_name    (const gchar *name);
int inspect_config  (const gchar *path);
int inspect_plan    (const gchar *config_path,
                     guint64      n_params,
                     guint        world_size,
                     guint64      gathered);
int inspect_checkpoint (const gchar *dir,
                        gboolean     verify);

G_END_DECLS
