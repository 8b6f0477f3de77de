/* mixprec-engine-monitor.c — what the engine tells about its steps: log
 * messages in the "Mixprec" domain (skipped steps, loss-scale changes,
 * steps_per_print progress, per-step debug detail) and the records of the
 * csv_monitor and tensorboard sections, all described in mixprec.json(5). */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"
#include "mixprec-engine-impl-private.h"
#include "mixprec-engine-autoprec-private.h"
#include "mixprec-monitor-private.h"
#include "mixprec-numerics-private.h"

/* What every optimizer step records, under DeepSpeed's tag names with
 * "Samples" (its x axis) replaced by "Steps" (this one's). */
#define TAG_LOSS_SCALE "Train/Steps/loss_scale"
#define TAG_LR "Train/Steps/lr"
#define TAG_GRAD_NORM "Train/Steps/grad_norm"
#define TAG_SKIPPED "Train/Steps/skipped_steps"
/* The bytes this rank sent during the step (MixprecCommBytes), recorded
 * when there is more than one rank. */
#define TAG_COMM_ALL_GATHER "Comm/allgather_bytes"
#define TAG_COMM_REDUCE_SCATTER "Comm/reducescatter_bytes"
#define TAG_COMM_SCALARS "Comm/scalar_bytes"
#define TAG_COMM_OTHER "Comm/other_bytes"
#define TAG_COMM_TOTAL "Comm/total_bytes"
#define TAG_COMM_INTRA_HOST "Comm/intra_host_bytes"
#define TAG_COMM_INTER_HOST "Comm/inter_host_bytes"

gboolean
_mixprec_engine_open_monitors (MixprecEngine *self,
                               GError       **error)
{
  const gchar *output_path, *job_name;
  g_autofree gchar *dir = NULL;

  self->steps_per_print = _mixprec_config_get_steps_per_print (self->config);
  /* Rank 0 writes, as in DeepSpeed: every rank agrees on the values. */
  if (self->rank != 0)
    return TRUE;
  if (_mixprec_config_get_monitor (self->config, _MIXPREC_MONITOR_CSV, &output_path, &job_name))
    {
      dir = _mixprec_monitor_make_dir ("csv_monitor", output_path, job_name, error);
      if (dir == NULL)
        return FALSE;
      self->csv = _mixprec_csv_monitor_new (dir);
      g_clear_pointer (&dir, g_free);
    }
  if (_mixprec_config_get_monitor (self->config, _MIXPREC_MONITOR_TENSORBOARD, &output_path,
                                   &job_name))
    {
      dir = _mixprec_monitor_make_dir ("tensorboard", output_path, job_name, error);
      if (dir == NULL || (self->tb = _mixprec_tb_monitor_new (dir, error)) == NULL)
        return FALSE;
    }
  return TRUE;
}

void
_mixprec_engine_close_monitors (MixprecEngine *self)
{
  g_clear_pointer (&self->csv, _mixprec_csv_monitor_free);
  g_clear_pointer (&self->tb, _mixprec_tb_monitor_free);
}

/* ---------------------------------------------------------------- records */

typedef struct {
  const gchar *tag;
  gdouble value;
} Scalar;

/* Writes @n scalars at @step to every open monitor and flushes, so that a
 * crash loses no step already recorded. */
static gboolean
record (MixprecEngine *self,
        const Scalar  *scalars,
        guint          n,
        guint64        step,
        GError       **error)
{
  if (self->csv != NULL)
    {
      for (guint i = 0; i < n; i++)
        if (!_mixprec_csv_monitor_add (self->csv, scalars[i].tag, scalars[i].value, step, error))
          return FALSE;
      if (!_mixprec_csv_monitor_flush (self->csv, error))
        return FALSE;
    }
  if (self->tb != NULL)
    {
      for (guint i = 0; i < n; i++)
        if (!_mixprec_tb_monitor_add (self->tb, scalars[i].tag, scalars[i].value, step, error))
          return FALSE;
      if (!_mixprec_tb_monitor_flush (self->tb, error))
        return FALSE;
    }
  return TRUE;
}

/**
 * mixprec_engine_report_scalar:
 * @self: a #MixprecEngine
 * @tag: the name of the series, such as "Train/Steps/train_loss": one
 *   CSV file of csv_monitor (slashes and spaces made underscores), one
 *   tag of tensorboard
 * @value: the value
 * @error: return location for a #GError
 *
 * Records @value in the monitors the configuration enables (csv_monitor,
 * tensorboard) at the step in progress: the optimizer step that the next
 * mixprec_engine_step() completes, the number its #MixprecStepResult's
 * `step` will carry. A loss computed by the forward passes of a step is
 * thus recorded beside that step's loss scale, learning rate and gradient
 * norm, which the engine records itself under "Train/Steps/".
 *
 * As in DeepSpeed, rank 0 writes: on other ranks, and when no monitor is
 * enabled, the call checks @tag and records nothing. Every record is
 * handed to the operating system before the call returns.
 *
 * Returns: %TRUE on success; %FALSE with @error set when @tag is empty,
 *   not UTF-8 or holds control characters (%MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT),
 *   or a monitor file could not be written (a #GFileError)
 *
 * Since: 1.1
 */
gboolean
mixprec_engine_report_scalar (MixprecEngine *self,
                              const gchar   *tag,
                              gdouble        value,
                              GError       **error)
{
  Scalar s = { tag, value };

  g_return_val_if_fail (MIXPREC_IS_ENGINE (self), FALSE);
  g_return_val_if_fail (tag != NULL, FALSE);
  g_return_val_if_fail (error == NULL || *error == NULL, FALSE);

  if (*tag == '\0' || !g_utf8_validate (tag, -1, NULL))
    {
      g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                   "report_scalar: the tag must be a non-empty UTF-8 string");
      return FALSE;
    }
  for (const gchar *c = tag; *c != '\0'; c++)
    if ((guchar) *c < 0x20 || *c == 0x7f)
      {
        g_autofree gchar *shown = g_strescape (tag, NULL);

        g_set_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT,
                     "report_scalar: the tag \"%s\" holds a control character (byte 0x%02x)",
                     shown, (guchar) *c);
        return FALSE;
      }
  return record (self, &s, 1, self->steps + 1, error);
}

/* ---------------------------------------------------------------- log */

typedef enum {
  EVENT_SKIPPED,
  EVENT_NOT_FINITE_APPLIED,
  EVENT_SCALE_RAISED,
  EVENT_SCALE_LOWERED,
  EVENT_PROGRESS,
  EVENT_STEP,
} Event;

static const gchar *const event_names[] = {
  "overflow-skipped", "overflow-applied", "loss-scale-raised", "loss-scale-lowered",
  "progress", "step",
};

/* One structured message with every number of the step as a field of its
 * own (MIXPREC_*), so that a log writer need not parse the text. */
static void
log_step (MixprecEngine           *self,
          GLogLevelFlags           level,
          Event                    event,
          const MixprecStepResult *r,
          const gchar             *message)
{
  gchar rank[24], world[24], step[24], skipped[24];
  gchar scale[G_ASCII_DTOSTR_BUF_SIZE], next[G_ASCII_DTOSTR_BUF_SIZE];
  gchar lr[G_ASCII_DTOSTR_BUF_SIZE], norm[G_ASCII_DTOSTR_BUF_SIZE];
  const GLogField fields[] = {
    { "GLIB_DOMAIN", G_LOG_DOMAIN, -1 },
    { "PRIORITY", level == G_LOG_LEVEL_DEBUG ? "7" : "5", -1 },
    { "MESSAGE", message, -1 },
    { "MIXPREC_EVENT", event_names[event], -1 },
    { "MIXPREC_RANK", rank, -1 },
    { "MIXPREC_WORLD_SIZE", world, -1 },
    { "MIXPREC_STEP", step, -1 },
    { "MIXPREC_SKIPPED_STEPS", skipped, -1 },
    { "MIXPREC_LOSS_SCALE", _mixprec_monitor_format_double (scale, r->loss_scale), -1 },
    { "MIXPREC_NEXT_LOSS_SCALE", _mixprec_monitor_format_double (next, r->next_loss_scale), -1 },
    { "MIXPREC_LR", _mixprec_monitor_format_double (lr, r->lr), -1 },
    { "MIXPREC_GRAD_NORM", _mixprec_monitor_format_double (norm, r->grad_norm), -1 },
  };

  g_snprintf (rank, sizeof rank, "%u", self->rank);
  g_snprintf (world, sizeof world, "%u", self->world);
  g_snprintf (step, sizeof step, "%" G_GUINT64_FORMAT, r->step);
  g_snprintf (skipped, sizeof skipped, "%" G_GUINT64_FORMAT, r->skipped_steps);
  g_log_structured_array (level, fields, G_N_ELEMENTS (fields));
}

static void
log_step_messages (MixprecEngine           *self,
                   const MixprecStepResult *r,
                   gboolean                 overflow)
{
  gchar scale[G_ASCII_DTOSTR_BUF_SIZE], next[G_ASCII_DTOSTR_BUF_SIZE];
  gchar lr[G_ASCII_DTOSTR_BUF_SIZE], norm[G_ASCII_DTOSTR_BUF_SIZE];
  gchar coef[G_ASCII_DTOSTR_BUF_SIZE];
  gboolean progress = self->steps_per_print > 0 && r->step % self->steps_per_print == 0;

  /* Nothing is formatted for a step with nothing to say: a step of a
   * small model takes microseconds. */
  if ((self->rank != 0 || (r->applied && !overflow && r->next_loss_scale == r->loss_scale &&
                           !progress)) &&
      g_log_writer_default_would_drop (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN))
    return;
  _mixprec_monitor_format_double (coef, r->clip_coef);
  _mixprec_monitor_format_double (scale, r->loss_scale);
  _mixprec_monitor_format_double (next, r->next_loss_scale);
  _mixprec_monitor_format_double (lr, r->lr);
  _mixprec_monitor_format_double (norm, r->grad_norm);

  /* Every rank's own line, for following one rank (G_MESSAGES_DEBUG). */
  if (!g_log_writer_default_would_drop (G_LOG_LEVEL_DEBUG, G_LOG_DOMAIN))
    {
      g_autofree gchar *detail =
        g_strdup_printf ("rank %u: step %" G_GUINT64_FORMAT " %s: loss scale %s (next %s), "
                         "grad norm %s, clip coefficient %s, lr %s", self->rank, r->step,
                         r->applied ? "applied" : "skipped", scale, next, norm, coef, lr);

      log_step (self, G_LOG_LEVEL_DEBUG, EVENT_STEP, r, detail);
    }

  /* The rest once per job: every rank agreed on the overflow and holds
   * the same scale, so rank 0 speaks for all. */
  if (self->rank != 0)
    return;
  if (!r->applied)
    {
      g_autofree gchar *m = NULL;

      if (r->next_loss_scale != r->loss_scale)
        m = g_strdup_printf ("rank %u: step %" G_GUINT64_FORMAT " skipped: gradient overflow "
                             "at loss scale %s; loss scale lowered to %s", self->rank, r->step,
                             scale, next);
      else
        m = g_strdup_printf ("rank %u: step %" G_GUINT64_FORMAT " skipped: gradient overflow "
                             "at loss scale %s; loss scale stays at %s", self->rank, r->step,
                             scale, next);
      log_step (self, G_LOG_LEVEL_MESSAGE, EVENT_SKIPPED, r, m);
    }
  else
    {
      if (overflow)
        {
          g_autofree gchar *m =
            g_strdup_printf ("rank %u: step %" G_GUINT64_FORMAT " applied with non-finite "
                             "gradients (overflow checking is off)", self->rank, r->step);

          log_step (self, G_LOG_LEVEL_MESSAGE, EVENT_NOT_FINITE_APPLIED, r, m);
        }
      if (r->next_loss_scale != r->loss_scale)
        {
          gboolean up = r->next_loss_scale > r->loss_scale;
          g_autofree gchar *m =
            g_strdup_printf ("rank %u: step %" G_GUINT64_FORMAT ": loss scale %s from %s to %s",
                             self->rank, r->step, up ? "raised" : "lowered", scale, next);

          log_step (self, G_LOG_LEVEL_MESSAGE, up ? EVENT_SCALE_RAISED : EVENT_SCALE_LOWERED,
                    r, m);
        }
    }
  /* DeepSpeed's steps_per_print: after every N-th step, counting skipped
   * ones. */
  if (progress)
    {
      g_autofree gchar *m =
        g_strdup_printf ("rank %u: step %" G_GUINT64_FORMAT ": %" G_GUINT64_FORMAT " skipped "
                         "so far, lr %s, loss scale %s, grad norm %s", self->rank, r->step,
                         r->skipped_steps, lr, scale, norm);

      log_step (self, G_LOG_LEVEL_MESSAGE, EVENT_PROGRESS, r, m);
    }
}

static void
record_step (MixprecEngine           *self,
             const MixprecStepResult *r)
{
  const MixprecCommBytes *c = &self->comm_bytes;
  const Scalar scalars[] = {
    { TAG_LOSS_SCALE, r->loss_scale },
    { TAG_LR, r->lr },
    { TAG_GRAD_NORM, r->grad_norm },
    { TAG_SKIPPED, (gdouble) r->skipped_steps },
    { TAG_COMM_ALL_GATHER, (gdouble) c->all_gather },
    { TAG_COMM_REDUCE_SCATTER, (gdouble) c->reduce_scatter },
    { TAG_COMM_SCALARS, (gdouble) c->scalars },
    { TAG_COMM_OTHER, (gdouble) c->other },
    { TAG_COMM_TOTAL, (gdouble) c->total },
    { TAG_COMM_INTRA_HOST, (gdouble) (c->total - c->inter_host) },
    { TAG_COMM_INTER_HOST, (gdouble) c->inter_host },
  };
  GError *error = NULL;

  /* The "Comm/" series only where bytes move. */
  if (!record (self, scalars, self->comm != NULL && self->world > 1 ? G_N_ELEMENTS (scalars) : 4,
               r->step, &error))
    {
      /* The step itself succeeded: training goes on, without the
       * monitors, and says so once. */
      g_warning ("step %" G_GUINT64_FORMAT ": %s; the monitors record nothing more",
                 r->step, error->message);
      g_error_free (error);
      _mixprec_engine_close_monitors (self);
    }
}

void
_mixprec_engine_report_step (MixprecEngine           *self,
                             const MixprecStepResult *r,
                             gboolean                 overflow)
{
  _mixprec_engine_take_comm_bytes (self);
  log_step_messages (self, r, overflow);
  if (self->csv != NULL || self->tb != NULL)
    record_step (self, r);
}

/* ---------------------------------------------------------------- numerics */

/* Tags of mixprec.numerics: "Numerics/<parameter>/<stat>" and
 * "NumericsByType/<module type>/<stat>", so that a CSV file's header
 * names the statistic. */
static void
add_numeric (gboolean     by_type,
             const gchar *name,
             const gchar *stat,
             gdouble      value,
             gpointer     data)
{
  GArray *scalars = data;
  Scalar s = { g_strdup_printf ("%s/%s/%s", by_type ? "NumericsByType" : "Numerics", name, stat),
               value };

  g_array_append_val (scalars, s);
}

void
_mixprec_engine_record_scalars (MixprecEngine       *self,
                                const gchar * const *tags,
                                const gdouble       *values,
                                guint                n,
                                guint64              step)
{
  g_autofree Scalar *scalars = NULL;
  GError *error = NULL;

  if (self->csv == NULL && self->tb == NULL)
    return;
  scalars = g_new (Scalar, MAX (n, 1));
  for (guint i = 0; i < n; i++)
    {
      scalars[i].tag = tags[i];
      scalars[i].value = values[i];
    }
  if (!record (self, scalars, n, step, &error))
    {
      g_warning ("step %" G_GUINT64_FORMAT ": %s; the monitors record nothing more",
                 step, error->message);
      g_error_free (error);
      _mixprec_engine_close_monitors (self);
    }
}

void
_mixprec_engine_record_numerics (MixprecEngine   *self,
                                 MixprecNumerics *numerics)
{
  g_autoptr(GArray) scalars = NULL;
  GError *error = NULL;
  guint64 step = mixprec_numerics_get_step (numerics);

  if (self->csv == NULL && self->tb == NULL)
    return;
  scalars = g_array_new (FALSE, FALSE, sizeof (Scalar));
  _mixprec_numerics_foreach (numerics, add_numeric, scalars);
  if (!record (self, (const Scalar *) scalars->data, scalars->len, step, &error))
    {
      g_warning ("step %" G_GUINT64_FORMAT ": %s; the monitors record nothing more",
                 step, error->message);
      g_error_free (error);
      _mixprec_engine_close_monitors (self);
    }
  for (guint i = 0; i < scalars->len; i++)
    g_free ((gchar *) g_array_index (scalars, Scalar, i).tag);
}
