/* fuzz-config.c — MixprecConfig from JSON: the DeepSpeed-style config and
 * its "mixprec" section, every key validated and every default resolved,
 * then printed back (to_data) and parsed again. */
#include "config.h"

#include "mixprec.h"
#include "fuzz-common.h"

int
LLVMFuzzerInitialize (int *argc, char ***argv)
{
  fuzz_init ();
  return 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data ((const gchar *) data,
                                                                  (gssize) size, &error);

  if (config == NULL)
    {
      g_assert (error != NULL && error->message != NULL);
      return 0;
    }
  /* A config that loaded prints a config that loads again. */
  {
    g_autofree gchar *resolved = mixprec_config_to_data (config, NULL);
    g_autoptr(MixprecConfig) again = mixprec_config_new_from_data (resolved, -1, &error);

    if (again == NULL)
      {
        g_printerr ("resolved config does not load again: %s\n%s\n", error->message, resolved);
        abort ();
      }
  }
  return 0;
}
