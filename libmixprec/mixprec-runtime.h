/* mixprec-runtime.h — what the library loaded at run time is and can do */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib.h>
#include "mixprec-version.h"

G_BEGIN_DECLS

MIXPREC_AVAILABLE_IN_1_0
guint        mixprec_get_major_version (void);
MIXPREC_AVAILABLE_IN_1_0
guint        mixprec_get_minor_version (void);
MIXPREC_AVAILABLE_IN_1_0
guint        mixprec_get_micro_version (void);
MIXPREC_AVAILABLE_IN_1_0
const gchar *mixprec_check_version     (guint required_major,
                                        guint required_minor,
                                        guint required_micro);
MIXPREC_AVAILABLE_IN_1_0
const gchar *mixprec_get_simd_name     (void);
MIXPREC_AVAILABLE_IN_1_0
guint        mixprec_get_num_threads   (void);

G_END_DECLS
