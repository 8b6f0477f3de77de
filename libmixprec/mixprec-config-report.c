/* mixprec-config-report.c — how configuration problems are collected and
 * worded: the problem list, JSON paths as messages print them, and the
 * "did you mean" suggestions for misspelt keys. */
#include "config.h"

#include <string.h>

#include "mixprec.h"
#include "mixprec-config-private.h"

static void
problem_free (gpointer data)
{
  MixprecConfigProblem *problem = data;

  g_free (problem->message);
  g_free (problem);
}

void
_mixprec_config_report_init (MixprecConfigReport *report)
{
  report->problems = g_ptr_array_new_with_free_func (problem_free);
  report->warnings = g_ptr_array_new_with_free_func (g_free);
  report->warning_codes = g_array_new (FALSE, FALSE, sizeof (MixprecConfigError));
  report->reported = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  report->overridden = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
}

void
_mixprec_config_report_clear (MixprecConfigReport *report)
{
  g_clear_pointer (&report->problems, g_ptr_array_unref);
  g_clear_pointer (&report->warnings, g_ptr_array_unref);
  g_clear_pointer (&report->warning_codes, g_array_unref);
  g_clear_pointer (&report->reported, g_hash_table_unref);
  g_clear_pointer (&report->overridden, g_hash_table_unref);
}

void
_mixprec_config_report_error (MixprecConfigReport *report,
                              MixprecConfigError   code,
                              const gchar         *format,
                              ...)
{
  MixprecConfigProblem *problem = g_new0 (MixprecConfigProblem, 1);
  va_list args;

  va_start (args, format);
  problem->code = code;
  problem->message = g_strdup_vprintf (format, args);
  va_end (args);
  g_ptr_array_add (report->problems, problem);
}

static void G_GNUC_PRINTF (3, 0)
add_warning (MixprecConfigReport *report,
             MixprecConfigError   code,
             const gchar         *format,
             va_list              args)
{
  g_ptr_array_add (report->warnings, g_strdup_vprintf (format, args));
  g_array_append_val (report->warning_codes, code);
}

void
_mixprec_config_report_warning (MixprecConfigReport *report,
                                const gchar         *format,
                                ...)
{
  va_list args;

  va_start (args, format);
  add_warning (report, MIXPREC_CONFIG_ERROR_UNSUPPORTED, format, args);
  va_end (args);
}

void
_mixprec_config_report_warning_code (MixprecConfigReport *report,
                                     MixprecConfigError   code,
                                     const gchar         *format,
                                     ...)
{
  va_list args;

  va_start (args, format);
  add_warning (report, code, format, args);
  va_end (args);
}

guint
_mixprec_edit_distance (const gchar *a,
                        const gchar *b)
{
  gsize n = strlen (a), m = strlen (b);
  g_autofree guint *d = NULL;
  guint result;

  /* Keys are short; longer inputs are not plausible typos of a key. */
  if (n > 64 || m > 64)
    return G_MAXUINT;

  d = g_new (guint, (n + 1) * (m + 1));
#define D(i, j) d[(i) * (m + 1) + (j)]
  for (gsize i = 0; i <= n; i++)
    D (i, 0) = i;
  for (gsize j = 0; j <= m; j++)
    D (0, j) = j;
  for (gsize i = 1; i <= n; i++)
    for (gsize j = 1; j <= m; j++)
      {
        guint cost = g_ascii_tolower (a[i - 1]) == g_ascii_tolower (b[j - 1]) ? 0 : 1;
        guint best = MIN (D (i - 1, j) + 1, D (i, j - 1) + 1);

        best = MIN (best, D (i - 1, j - 1) + cost);
        if (i > 1 && j > 1
            && g_ascii_tolower (a[i - 1]) == g_ascii_tolower (b[j - 2])
            && g_ascii_tolower (a[i - 2]) == g_ascii_tolower (b[j - 1]))
          best = MIN (best, D (i - 2, j - 2) + 1);
        D (i, j) = best;
      }
  result = D (n, m);
#undef D
  return result;
}

const gchar *
_mixprec_suggest (const gchar         *word,
                  const gchar * const *candidates)
{
  const gchar *best = NULL;
  guint best_distance = G_MAXUINT;
  /* A third of the word's length, between 1 and 3 edits: "stag" -> stage,
   * "loss_scale_windw" -> loss_scale_window, but "lr" suggests nothing. */
  guint limit = CLAMP (strlen (word) / 3, 1, 3);

  for (gsize i = 0; candidates[i] != NULL; i++)
    {
      guint distance = _mixprec_edit_distance (word, candidates[i]);

      if (distance < best_distance)
        {
          best_distance = distance;
          best = candidates[i];
        }
    }
  return best_distance <= limit ? best : NULL;
}

const gchar *
_mixprec_config_dtype_short_name (MixprecDType dtype)
{
  switch (dtype)
    {
    case MIXPREC_DTYPE_FLOAT32:
      return "fp32";
    case MIXPREC_DTYPE_FLOAT16:
      return "fp16";
    case MIXPREC_DTYPE_BFLOAT16:
      return "bf16";
    case MIXPREC_DTYPE_FLOAT8_E4M3:
      return "fp8_e4m3";
    case MIXPREC_DTYPE_FLOAT8_E5M2:
      return "fp8_e5m2";
    default:
      return "invalid";
    }
}

static const gchar *
last_component (const gchar *type)
{
  const gchar *dot = strrchr (type, '.');

  return dot != NULL ? dot + 1 : type;
}

gboolean
_mixprec_module_type_matches (const gchar *type,
                              const gchar *listed)
{
  return g_str_equal (last_component (type), last_component (listed));
}
