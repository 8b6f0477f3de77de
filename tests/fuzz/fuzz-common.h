/* fuzz-common.h — what every libFuzzer target of tests/fuzz/ shares: a
 * quiet log (the parsers' warnings are expected on junk input) in which a
 * critical or an error still aborts, so that a g_return_if_fail() reached
 * by outside bytes is a finding. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <glib.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);
int LLVMFuzzerInitialize (int *argc, char ***argv);

static void
fuzz_quiet_log (const gchar    *domain,
                GLogLevelFlags  level,
                const gchar    *message,
                gpointer        user_data)
{
  if (level & (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL))
    {
      g_printerr ("%s: %s\n", domain != NULL ? domain : "?", message);
      abort ();
    }
}

/* Call once, from LLVMFuzzerInitialize(). */
static inline void
fuzz_init (void)
{
  g_log_set_default_handler (fuzz_quiet_log, NULL);
  g_log_set_always_fatal (G_LOG_LEVEL_ERROR | G_LOG_LEVEL_CRITICAL);
}

/* @data as a NUL-terminated string (outside bytes carry no terminator). */
static inline gchar *
fuzz_strndup (const uint8_t *data,
              size_t         size)
{
  return g_strndup ((const gchar *) data, size);
}
