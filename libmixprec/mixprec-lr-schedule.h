/* mixprec-lr-schedule.h — DeepSpeed's learning-rate schedules, advanced
 * once per applied optimizer step */
#pragma once

#if !defined(__MIXPREC_INSIDE__) && !defined(MIXPREC_COMPILATION)
#error "Only <mixprec/mixprec.h> can be included directly."
#endif

#include <glib-object.h>
#include <json-glib/json-glib.h>
#include "mixprec-version.h"
#include "mixprec-config.h"

G_BEGIN_DECLS

/**
 * MIXPREC_LR_SCHEDULE_ERROR:
 *
 * Error domain of #MixprecLrSchedule. Errors in this domain are from the
 * #MixprecLrScheduleError enumeration.
 *
 * Since: 1.0
 */
#define MIXPREC_LR_SCHEDULE_ERROR (mixprec_lr_schedule_error_quark ())

/**
 * MixprecLrScheduleError:
 * @MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE: a schedule type libmixprec does
 *   not implement
 * @MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM: a parameter the schedule type
 *   does not take
 * @MIXPREC_LR_SCHEDULE_ERROR_MISSING_PARAM: a required parameter is not set
 * @MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM: a parameter of the wrong type
 *   or outside the range it allows
 * @MIXPREC_LR_SCHEDULE_ERROR_CONFLICT: parameters that are valid one by one
 *   but make no sense together
 *
 * Errors from building a learning-rate schedule. Values are appended only.
 *
 * Since: 1.0
 */
typedef enum {
  MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_TYPE,
  MIXPREC_LR_SCHEDULE_ERROR_UNKNOWN_PARAM,
  MIXPREC_LR_SCHEDULE_ERROR_MISSING_PARAM,
  MIXPREC_LR_SCHEDULE_ERROR_INVALID_PARAM,
  MIXPREC_LR_SCHEDULE_ERROR_CONFLICT,
} MixprecLrScheduleError;

/**
 * MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR:
 *
 * The optimizer learning rate assumed when `optimizer.params.lr` is not
 * set: 1e-3, the default of DeepSpeed's Adam, AdamW and Lamb.
 *
 * Since: 1.0
 */
#define MIXPREC_LR_SCHEDULE_DEFAULT_BASE_LR 1e-3

#define MIXPREC_TYPE_LR_SCHEDULE (mixprec_lr_schedule_get_type ())
MIXPREC_AVAILABLE_IN_1_0
G_DECLARE_FINAL_TYPE (MixprecLrSchedule, mixprec_lr_schedule, MIXPREC, LR_SCHEDULE, GObject)

MIXPREC_AVAILABLE_IN_1_0
GQuark             mixprec_lr_schedule_error_quark      (void);

MIXPREC_AVAILABLE_IN_1_0
MixprecLrSchedule *mixprec_lr_schedule_new              (const gchar       *type,
                                                         JsonObject        *params,
                                                         gdouble            base_lr,
                                                         GError           **error);
MIXPREC_AVAILABLE_IN_1_0
MixprecLrSchedule *mixprec_lr_schedule_new_from_config  (MixprecConfig     *config,
                                                         GError           **error);

MIXPREC_AVAILABLE_IN_1_0
const gchar       *mixprec_lr_schedule_get_type_name    (MixprecLrSchedule *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble            mixprec_lr_schedule_get_base_lr      (MixprecLrSchedule *self);
MIXPREC_AVAILABLE_IN_1_0
JsonObject        *mixprec_lr_schedule_dup_params       (MixprecLrSchedule *self);

MIXPREC_AVAILABLE_IN_1_0
gdouble            mixprec_lr_schedule_get_lr           (MixprecLrSchedule *self);
MIXPREC_AVAILABLE_IN_1_0
gdouble            mixprec_lr_schedule_get_lr_at        (MixprecLrSchedule *self,
                                                         guint64            position);
MIXPREC_AVAILABLE_IN_1_0
void               mixprec_lr_schedule_advance          (MixprecLrSchedule *self);
MIXPREC_AVAILABLE_IN_1_0
guint64            mixprec_lr_schedule_get_position     (MixprecLrSchedule *self);
MIXPREC_AVAILABLE_IN_1_0
void               mixprec_lr_schedule_set_position     (MixprecLrSchedule *self,
                                                         guint64            position);

G_END_DECLS
