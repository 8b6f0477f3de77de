/* mixprec-monitor-private.h — the files the engine records scalars in,
 * configured by DeepSpeed's csv_monitor and tensorboard sections (see
 * mixprec.json(5)): one CSV file per tag, or a TensorBoard event file. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _MixprecCsvMonitor _MixprecCsvMonitor;
typedef struct _MixprecTbMonitor _MixprecTbMonitor;

/* The folder a monitor writes in: @output_path joined with @job_name, as
 * DeepSpeed's monitors do, created with its parents. @section names the
 * config section in the error. */
gchar *_mixprec_monitor_make_dir (const gchar *section,
                                  const gchar *output_path,
                                  const gchar *job_name,
                                  GError     **error);

/* A CSV monitor in @dir: tag "a/b c" goes to dir/a_b_c.csv, whose first
 * line is "step,c" (the tag's last component). */
_MixprecCsvMonitor *_mixprec_csv_monitor_new   (const gchar        *dir);
gboolean            _mixprec_csv_monitor_add   (_MixprecCsvMonitor *self,
                                                const gchar        *tag,
                                                gdouble             value,
                                                guint64             step,
                                                GError            **error);
/* Hands what was added to the kernel: a crash loses nothing added before. */
gboolean            _mixprec_csv_monitor_flush (_MixprecCsvMonitor *self,
                                                GError            **error);
void                _mixprec_csv_monitor_free  (_MixprecCsvMonitor *self);

/* A TensorBoard event file in @dir, events.out.tfevents.<secs>.<host>.<pid>,
 * whose first record names the file version. */
_MixprecTbMonitor  *_mixprec_tb_monitor_new    (const gchar        *dir,
                                                GError            **error);
gboolean            _mixprec_tb_monitor_add    (_MixprecTbMonitor  *self,
                                                const gchar        *tag,
                                                gdouble             value,
                                                guint64             step,
                                                GError            **error);
gboolean            _mixprec_tb_monitor_flush  (_MixprecTbMonitor  *self,
                                                GError            **error);
const gchar        *_mixprec_tb_monitor_get_path (_MixprecTbMonitor *self);
void                _mixprec_tb_monitor_free   (_MixprecTbMonitor  *self);

/* CRC-32C (Castagnoli), as TFRecord frames use it; @crc is 0 to start. */
guint32 _mixprec_crc32c (guint32       crc,
                         gconstpointer data,
                         gsize         n);

/* The shortest decimal text that reads back as @value ("0.1", "65536",
 * "inf", "nan"), whatever the locale; @buf holds G_ASCII_DTOSTR_BUF_SIZE. */
const gchar *_mixprec_monitor_format_double (gchar   *buf,
                                             gdouble  value);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (_MixprecCsvMonitor, _mixprec_csv_monitor_free)
G_DEFINE_AUTOPTR_CLEANUP_FUNC (_MixprecTbMonitor, _mixprec_tb_monitor_free)

G_END_DECLS
