/* example-resume.c — where --resume starts. A damaged newest checkpoint
 * is never taken for an empty folder (starting over would save over the
 * older ones): the run goes on from the newest whole one, and says so. */
#include "example-resume.h"

MixprecCheckpoint *
example_open_resume (const gchar *program,
                     const gchar *dir,
                     GError     **error)
{
  g_autoptr(MixprecCheckpoint) checkpoint = NULL;
  g_autoptr(GError) local_error = NULL;
  g_autofree gchar *skipped = NULL;

  checkpoint = mixprec_checkpoint_open (dir, &local_error);
  if (checkpoint != NULL)
    return g_steal_pointer (&checkpoint);
  if (g_error_matches (local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_NOT_FOUND))
    return NULL;
  if (!g_error_matches (local_error, MIXPREC_CHECKPOINT_ERROR, MIXPREC_CHECKPOINT_ERROR_DAMAGED))
    {
      g_propagate_error (error, g_steal_pointer (&local_error));
      return NULL;
    }
  g_clear_error (&local_error);
  checkpoint = mixprec_checkpoint_open_newest_intact (dir, &skipped, error);
  if (checkpoint != NULL)
    g_printerr ("%s: WARNING: the latest checkpoint in %s is damaged:\n%s\n"
                "%s: WARNING: falling back to %s, the newest whole checkpoint (step %"
                G_GUINT64_FORMAT ")\n", program, dir, skipped != NULL ? skipped : "", program,
                mixprec_checkpoint_get_path (checkpoint), mixprec_checkpoint_get_step (checkpoint));
  return g_steal_pointer (&checkpoint);
}
