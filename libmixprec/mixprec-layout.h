/* mixprec-layout.h — the ZeRO layout an engine runs: which rank owns which
 * range of which parameter, its units (the reduce-scatter and all-gather
 * buckets), padding and staging, planned or read from a running engine */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include "mixprec-version.h"
#include "mixprec-config.h"
#include "mixprec-engine.h"

G_BEGIN_DECLS

#define MIXPREC_TYPE_LAYOUT (mixprec_layout_get_type ())
MIXPREC_AVAILABLE_IN_1_1
G_DECLARE_FINAL_TYPE (MixprecLayout, mixprec_layout, MIXPREC, LAYOUT, GObject)

MIXPREC_AVAILABLE_IN_1_1
MixprecLayout *mixprec_layout_new                    (MixprecConfig  *config,
                                                      const guint64  *sizes,
                                                      guint           n_sizes,
                                                      guint           world_size,
                                                      GError        **error);
MIXPREC_AVAILABLE_IN_1_1
MixprecLayout *mixprec_engine_get_layout             (MixprecEngine  *engine,
                                                      GError        **error);

MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_world_size         (MixprecLayout  *self);
MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_zero_stage         (MixprecLayout  *self);

MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_n_params           (MixprecLayout  *self);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_param_size         (MixprecLayout  *self,
                                                      guint           param);
MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_param_group        (MixprecLayout  *self,
                                                      guint           param);
MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_param_unit         (MixprecLayout  *self,
                                                      guint           param);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_param_offset       (MixprecLayout  *self,
                                                      guint           param);
MIXPREC_AVAILABLE_IN_1_1
void           mixprec_layout_get_rank_range         (MixprecLayout  *self,
                                                      guint           param,
                                                      guint           rank,
                                                      guint64        *begin,
                                                      guint64        *end);
MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_owner              (MixprecLayout  *self,
                                                      guint           param,
                                                      guint64         element);

MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_n_groups           (MixprecLayout  *self);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_group_total        (MixprecLayout  *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_group_padded_total (MixprecLayout  *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_rank_elements      (MixprecLayout  *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_rank_padding       (MixprecLayout  *self,
                                                      guint           group,
                                                      guint           rank);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_persistent_elements (MixprecLayout *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
GPtrArray     *mixprec_layout_get_rank_pieces        (MixprecLayout  *self,
                                                      guint           group,
                                                      guint           rank);

MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_n_units            (MixprecLayout  *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
void           mixprec_layout_get_unit               (MixprecLayout  *self,
                                                      guint           group,
                                                      guint           unit,
                                                      guint64        *offset,
                                                      guint64        *numel,
                                                      guint64        *padded);
MIXPREC_AVAILABLE_IN_1_1
guint         *mixprec_layout_get_unit_params        (MixprecLayout  *self,
                                                      guint           group,
                                                      guint           unit,
                                                      guint          *n_params);
MIXPREC_AVAILABLE_IN_1_1
gboolean       mixprec_layout_unit_is_persistent     (MixprecLayout  *self,
                                                      guint           group,
                                                      guint           unit);

MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_slot_size          (MixprecLayout  *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
guint          mixprec_layout_get_n_slots            (MixprecLayout  *self,
                                                      guint           group);
MIXPREC_AVAILABLE_IN_1_1
guint64        mixprec_layout_get_window_size        (MixprecLayout  *self,
                                                      guint           group);

G_END_DECLS
