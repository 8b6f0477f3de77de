/* fuzz-rank-env.c — the rank environment: MIXPREC_*, torchrun's, Open
 * MPI's and Slurm's variables (ranks, sizes, addresses, ports, Slurm node
 * lists, timeouts) resolved into one process's settings. The input is the
 * environment, one NAME=VALUE a line. */
#include "config.h"

#include "mixprec.h"
#include "mixprec-bootstrap-private.h"
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
  g_autofree gchar *text = fuzz_strndup (data, size);
  g_auto(GStrv) envp = g_strsplit (text, "\n", 256);
  MixprecBootstrapSettings settings = { 0 };
  g_autoptr(GError) error = NULL;
  guint timeout_ms = 0;

  if (_mixprec_bootstrap_parse_environ ((const gchar * const *) envp, &settings, &error))
    {
      /* What the parser accepted holds together. */
      g_assert (settings.world_size >= 1);
      g_assert (settings.rank < settings.world_size);
      g_assert (settings.local_world_size >= 1);
      g_assert (settings.local_rank < settings.local_world_size || settings.local_from_hosts);
      g_assert (settings.world_size == 1 || settings.master_addr != NULL);
      _mixprec_bootstrap_settings_clear (&settings);
    }
  else
    g_assert (error != NULL && error->message != NULL);
  g_clear_error (&error);
  if (!_mixprec_bootstrap_timeout_from_environ ((const gchar * const *) envp, &timeout_ms, &error))
    g_assert (error != NULL);
  g_clear_error (&error);
  {
    g_autofree gchar *host = _mixprec_bootstrap_first_host (text, &error);

    g_assert ((host == NULL) == (error != NULL));
  }
  _mixprec_bootstrap_is_loopback (text);
  return 0;
}
