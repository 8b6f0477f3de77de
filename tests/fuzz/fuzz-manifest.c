/* fuzz-manifest.c — a checkpoint's manifest.json as mixprec_checkpoint_open()
 * reads it: strict JSON, every key with its type and range, the world size
 * against the file list, each parameter's pieces covering it exactly once
 * in listed files. A manifest that parsed is written back (to_json) and
 * must parse again. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-checkpoint-private.h"
#include "fuzz-common.h"

#define MANIFEST_PATH "fuzz/manifest.json"

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
  g_autofree gchar *text = g_malloc (size + 1);
  _MixprecManifest m;

  /* As _mixprec_read_small_file() hands it over: every byte (NULs
   * included), then a terminating NUL. */
  memcpy (text, data, size);
  text[size] = '\0';

  _mixprec_manifest_init (&m);
  if (!_mixprec_manifest_parse (&m, MANIFEST_PATH, text, size, &error))
    {
      g_assert (error != NULL && error->message != NULL);
      _mixprec_manifest_clear (&m);
      return 0;
    }
  /* A manifest that loaded writes a manifest that loads again. */
  {
    g_autofree gchar *json = _mixprec_manifest_to_json (&m);
    _MixprecManifest again;

    _mixprec_manifest_init (&again);
    if (!_mixprec_manifest_parse (&again, MANIFEST_PATH, json, strlen (json), &error))
      {
        g_printerr ("written manifest does not load again: %s\n%s\n", error->message, json);
        abort ();
      }
    _mixprec_manifest_clear (&again);
  }
  _mixprec_manifest_clear (&m);
  return 0;
}
