/* example-resume.h — the checkpoint an example trainer's --resume
 * continues from. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

/* The latest checkpoint in @dir, or, when that one is damaged, the newest
 * whole one, with a warning on stderr that names @program and what was
 * skipped. %NULL with @error unset when @dir holds no checkpoint yet;
 * %NULL with @error set when it cannot be read. */
MixprecCheckpoint *example_open_resume (const gchar *program,
                                        const gchar *dir,
                                        GError     **error);

G_END_DECLS
