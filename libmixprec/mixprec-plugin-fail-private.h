/* mixprec-plugin-fail-private.h — how every plugin (and the library's built-in features)
 * reports a failure through the ABI: a sentence into the caller's error
 * buffer, the status back. Plain C, no GLib, so any plugin can include it. */
#pragma once

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int
_mixprec_plugin_fail (char       *errbuf,
                      size_t      errbuf_len,
                      int         status,
                      const char *format,
                      ...) __attribute__ ((format (printf, 4, 5)));

static inline int
_mixprec_plugin_fail (char       *errbuf,
                      size_t      errbuf_len,
                      int         status,
                      const char *format,
                      ...)
{
  va_list args;

  if (errbuf != NULL && errbuf_len > 0)
    {
      va_start (args, format);
      vsnprintf (errbuf, errbuf_len, format, args);
      va_end (args);
    }
  return status;
}
