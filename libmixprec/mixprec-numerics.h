/* mixprec-numerics.h — per-tensor numerics of one optimizer step */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include <mixprec/mixprec-version.h>

G_BEGIN_DECLS

#define MIXPREC_TYPE_NUMERICS (mixprec_numerics_get_type ())
MIXPREC_AVAILABLE_IN_1_1
G_DECLARE_FINAL_TYPE (MixprecNumerics, mixprec_numerics, MIXPREC, NUMERICS, GObject)

MIXPREC_AVAILABLE_IN_1_1
guint64   mixprec_numerics_get_step          (MixprecNumerics *self);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_numerics_get_applied       (MixprecNumerics *self);
MIXPREC_AVAILABLE_IN_1_1
gchar   **mixprec_numerics_list_params       (MixprecNumerics *self);
MIXPREC_AVAILABLE_IN_1_1
gchar   **mixprec_numerics_list_module_types (MixprecNumerics *self);
MIXPREC_AVAILABLE_IN_1_1
gchar   **mixprec_numerics_list_stats        (MixprecNumerics *self,
                                              const gchar     *param);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_numerics_get_stat          (MixprecNumerics *self,
                                              const gchar     *param,
                                              const gchar     *stat,
                                              gdouble         *value);
MIXPREC_AVAILABLE_IN_1_1
gchar   **mixprec_numerics_list_module_stats (MixprecNumerics *self,
                                              const gchar     *module_type);
MIXPREC_AVAILABLE_IN_1_1
gboolean  mixprec_numerics_get_module_stat   (MixprecNumerics *self,
                                              const gchar     *module_type,
                                              const gchar     *stat,
                                              gdouble         *value);
MIXPREC_AVAILABLE_IN_1_1
const gchar * const *mixprec_numerics_get_stat_names (void);

G_END_DECLS
