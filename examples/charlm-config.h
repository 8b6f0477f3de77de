/* charlm-config.h — the JSON config file with the command line's
 * overrides applied. */
#pragma once

#include <mixprec/mixprec.h>

G_BEGIN_DECLS

typedef struct
{
  gint steps;                /* > 0: the run's length, and the schedule's */
  guint micro_batch;         /* > 0: replaces train_micro_batch_size_per_gpu */
  guint accumulation;        /* > 0: replaces gradient_accumulation_steps */
  gint zero_stage;           /* >= 0: replaces zero_optimization.stage */
  const gchar *device;          /* mixprec.device, or NULL to keep the config's */
  gboolean seed_set;
  guint64 seed;              /* replaces mixprec.seed when seed_set */
  const gchar *fp8_recipe;   /* "delayed", "current" or "mx" turns fp8 on with that
                              * recipe, "off" turns it off; NULL keeps the config's */
} CharlmOverrides;

MixprecConfig *charlm_config_load (const gchar     *path,
                                   CharlmOverrides *overrides,
                                   GError         **error);

G_END_DECLS
