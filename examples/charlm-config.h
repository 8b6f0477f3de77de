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

/* The GOptionArgFunc of the example trainers' --seed VALUE and --fp8
 * RECIPE: @data is the CharlmOverrides they set (the option group's user
 * data); a bad value fails with a GError naming the option. */
gboolean charlm_option_seed (const gchar *option_name,
                             const gchar *value,
                             gpointer     data,
                             GError     **error);
gboolean charlm_option_fp8  (const gchar *option_name,
                             const gchar *value,
                             gpointer     data,
                             GError     **error);

MixprecConfig *charlm_config_load (const gchar     *path,
                                   CharlmOverrides *overrides,
                                   GError         **error);

G_END_DECLS
