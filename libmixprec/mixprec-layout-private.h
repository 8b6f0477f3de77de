/* mixprec-layout-private.h — how a MixprecLayout is filled in: by the
 * engine's own layout code (mixprec-engine-layout-view.c), from a plan or
 * from a running engine. Never installed. */
#pragma once

#include "mixprec.h"

G_BEGIN_DECLS

/* An empty layout of @n_params parameters over @world ranks. */
MixprecLayout *_mixprec_layout_new        (guint          world,
                                           guint          stage,
                                           guint          n_params);
/* Appends a group with its staging (elements per slot, and slots). */
guint          _mixprec_layout_add_group  (MixprecLayout *self,
                                           guint64        slot_size,
                                           guint          n_slots);
/* Appends a unit to @group: @offset in the group's padded element space,
 * @numel real elements padded to @padded. */
void           _mixprec_layout_add_unit   (MixprecLayout *self,
                                           guint          group,
                                           guint64        offset,
                                           guint64        numel,
                                           guint64        padded,
                                           gboolean       persistent);
/* Places parameter @param (of @size elements) at @offset of @group's
 * padded element space, in the group's last unit. */
void           _mixprec_layout_add_param  (MixprecLayout *self,
                                           guint          group,
                                           guint          param,
                                           guint64        size,
                                           guint64        offset);

/* The layout of @sizes as one group under @config over @world ranks,
 * computed by the engine's layout code without building an engine. */
MixprecLayout *_mixprec_engine_plan_layout (MixprecConfig *config,
                                            const guint64 *sizes,
                                            guint          n_sizes,
                                            guint          world,
                                            GError       **error);

G_END_DECLS
