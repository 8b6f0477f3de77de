/* mixprec-feature.c — MixprecFeature: one capability a plugin registered,
 * with the checks a vtable must pass before it is accepted. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "mixprec.h"
#include "mixprec-device-private.h"
#include "mixprec-plugin-compat-private.h"
#include "mixprec-registry-private.h"

/* The public enums mirror the ABI's plain-C ones value for value. */
G_STATIC_ASSERT ((int) MIXPREC_HYPER_PARAM_TYPE_DOUBLE == (int) MIXPREC_HPARAM_DOUBLE);
G_STATIC_ASSERT ((int) MIXPREC_HYPER_PARAM_TYPE_BOOL == (int) MIXPREC_HPARAM_BOOL);
G_STATIC_ASSERT ((int) MIXPREC_HYPER_PARAM_TYPE_INT == (int) MIXPREC_HPARAM_INT);
G_STATIC_ASSERT ((int) MIXPREC_DTYPE_FLOAT32 == (int) MIXPREC_PLUGIN_DTYPE_FLOAT32);
G_STATIC_ASSERT ((int) MIXPREC_DTYPE_FLOAT16 == (int) MIXPREC_PLUGIN_DTYPE_FLOAT16);
G_STATIC_ASSERT ((int) MIXPREC_DTYPE_BFLOAT16 == (int) MIXPREC_PLUGIN_DTYPE_BFLOAT16);

/* Sanity limits: a schema larger than these is garbage read through a
 * wrong pointer, not an optimizer. */
/* The dtypes a dtype_mask may name (MixprecPluginDType). */
#define N_PLUGIN_DTYPES 5
/* The formats a state_format_mask / master_format_mask may name
 * (MixprecPluginStateFormat, MixprecPluginMasterFormat). */
#define N_STATE_FORMATS 7
#define N_MASTER_FORMATS 3
#define MAX_NAME_LENGTH 64
#define MAX_HPARAMS 64
#define MAX_STATE_SLOTS _MIXPREC_PLUGIN_MAX_STATE_SLOTS

/**
 * MixprecFeature:
 *
 * One capability a plugin registered: an optimizer, a communication
 * backend or a device, known by its kind, name and device (a device
 * feature's device is its own name). Several features may share a name and device; the
 * one with the highest rank is used.
 *
 * An optimizer feature also describes its hyper-parameters (name, type,
 * default value and inclusive range, in the order the plugin receives
 * them), the number of FP32 state values it keeps per element, and the
 * data types it accepts. A communication feature describes the data types
 * its collectives accept (mixprec_feature_get_comm_dtypes()).
 *
 * Features are created by the #MixprecRegistry while it loads plugins.
 *
 * Since: 1.0
 */
struct _MixprecFeature
{
  GObject parent_instance;

  MixprecFeatureKind kind;
  gchar *name;
  gchar *device;
  gchar *description;
  guint rank;
  gchar *plugin_name;
  MixprecPlugin *plugin;        /* weak: the plugin owns its features */

  /* Optimizers: the vtable upgraded to revision 3, whose schema and state
   * names point into the copies below, so nothing but the step functions
   * refers to plugin memory. A revision 1 or 2 plugin's step is step_v1
   * or step_v2 (optimizer.step is then NULL; mixprec-plugin-compat.c
   * calls it). optimizer_v1 is the same schema as a V1 struct, for
   * _mixprec_feature_get_optimizer_vtable(). */
  MixprecOptimizerV3 optimizer;
  _MixprecOptimizerStepV1Func step_v1;
  _MixprecOptimizerStepV2Func step_v2;
  MixprecOptimizerV1 optimizer_v1;
  guint optimizer_revision;     /* 1, 2 or 3: the vtable struct registered */
  MixprecDType state_dtypes[N_PLUGIN_DTYPES];   /* the mask's dtypes, filled on demand */
  MixprecHParamSpecV1 *hparams;
  gdouble *hparam_defaults;
  GStringChunk *strings;
  const gchar **state_names;    /* NULL-terminated */

  /* Communicators: a copy of the vtable whose strings are the feature's,
   * and the dtypes of its dtype_mask in MixprecDType order. */
  MixprecCommV2 comm;
  guint comm_revision;          /* 1 or 2: the vtable struct registered */
  MixprecDType *comm_dtypes;
  gsize n_comm_dtypes;

  /* Devices: a copy of the vtable whose strings are the feature's; a V1
   * vtable's copy has no host_alloc/host_free, a V1 or V2 one no FP8
   * casts. */
  MixprecDeviceV3 device_vtable;
  guint device_revision;        /* 1, 2 or 3: the vtable struct registered */
};

G_DEFINE_FINAL_TYPE (MixprecFeature, mixprec_feature, G_TYPE_OBJECT)

enum
{
  PROP_0,
  PROP_KIND,
  PROP_NAME,
  PROP_DEVICE,
  PROP_RANK,
  PROP_DESCRIPTION,
  PROP_PLUGIN_NAME,
  N_PROPS
};

static GParamSpec *properties[N_PROPS];

/* Every optimizer accepts these (the ABI's contract for step()). */
static const MixprecDType optimizer_grad_dtypes[] = {
  MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
};
static const MixprecDType optimizer_working_dtypes[] = {
  MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16, MIXPREC_DTYPE_FLOAT32,
};

static void
mixprec_feature_finalize (GObject *object)
{
  MixprecFeature *self = MIXPREC_FEATURE (object);

  if (self->plugin != NULL)
    g_object_remove_weak_pointer (G_OBJECT (self->plugin), (gpointer *) &self->plugin);
  g_free (self->name);
  g_free (self->device);
  g_free (self->description);
  g_free (self->plugin_name);
  g_free (self->hparams);
  g_free (self->hparam_defaults);
  g_free (self->state_names);
  g_free (self->comm_dtypes);
  if (self->strings != NULL)
    g_string_chunk_free (self->strings);

  G_OBJECT_CLASS (mixprec_feature_parent_class)->finalize (object);
}

static void
mixprec_feature_get_property (GObject    *object,
                              guint       prop_id,
                              GValue     *value,
                              GParamSpec *pspec)
{
  MixprecFeature *self = MIXPREC_FEATURE (object);

  switch (prop_id)
    {
    case PROP_KIND:
      g_value_set_enum (value, self->kind);
      break;
    case PROP_NAME:
      g_value_set_string (value, self->name);
      break;
    case PROP_DEVICE:
      g_value_set_string (value, self->device);
      break;
    case PROP_RANK:
      g_value_set_uint (value, self->rank);
      break;
    case PROP_DESCRIPTION:
      g_value_set_string (value, self->description);
      break;
    case PROP_PLUGIN_NAME:
      g_value_set_string (value, self->plugin_name);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
    }
}

static void
mixprec_feature_class_init (MixprecFeatureClass *klass)
{
  GObjectClass *object_class = G_OBJECT_CLASS (klass);
  const GParamFlags flags = G_PARAM_READABLE | G_PARAM_STATIC_STRINGS;

  object_class->finalize = mixprec_feature_finalize;
  object_class->get_property = mixprec_feature_get_property;

  /**
   * MixprecFeature:kind:
   *
   * What the feature provides.
   *
   * Since: 1.0
   */
  properties[PROP_KIND] =
    g_param_spec_enum ("kind", NULL, NULL, MIXPREC_TYPE_FEATURE_KIND,
                       MIXPREC_FEATURE_KIND_OPTIMIZER, flags);
  /**
   * MixprecFeature:name:
   *
   * The name configurations use, e.g. "adamw".
   *
   * Since: 1.0
   */
  properties[PROP_NAME] = g_param_spec_string ("name", NULL, NULL, NULL, flags);
  /**
   * MixprecFeature:device:
   *
   * The device whose memory the feature works on, e.g. "cpu" or "cuda".
   *
   * Since: 1.0
   */
  properties[PROP_DEVICE] = g_param_spec_string ("device", NULL, NULL, NULL, flags);
  /**
   * MixprecFeature:rank:
   *
   * Preference among features of the same kind, name and device: the
   * highest rank is used.
   *
   * Since: 1.0
   */
  properties[PROP_RANK] = g_param_spec_uint ("rank", NULL, NULL, 0, G_MAXUINT, 0, flags);
  /**
   * MixprecFeature:description:
   *
   * One sentence from the plugin about the feature; empty when it gave none.
   *
   * Since: 1.0
   */
  properties[PROP_DESCRIPTION] = g_param_spec_string ("description", NULL, NULL, NULL, flags);
  /**
   * MixprecFeature:plugin-name:
   *
   * The name of the plugin that registered the feature.
   *
   * Since: 1.0
   */
  properties[PROP_PLUGIN_NAME] = g_param_spec_string ("plugin-name", NULL, NULL, NULL, flags);

  g_object_class_install_properties (object_class, N_PROPS, properties);
}

static void
mixprec_feature_init (MixprecFeature *self)
{
}

/* ------------------------------------------------------------ vtable checks */

/* Names end up in configurations, file names and messages: a letter, then
 * letters, digits, '-' and '_'. */
static gboolean
identifier_is_valid (const char *s)
{
  gsize len;

  if (s == NULL || !g_ascii_isalpha (s[0]))
    return FALSE;
  len = strnlen (s, MAX_NAME_LENGTH + 1);
  if (len > MAX_NAME_LENGTH)
    return FALSE;
  for (gsize i = 1; i < len; i++)
    if (!g_ascii_isalnum (s[i]) && s[i] != '-' && s[i] != '_')
      return FALSE;
  return TRUE;
}

/* A vtable's reserved space, which must be zero: a plugin built against
 * another revision of mixprec-plugin.h has something there. */
static gboolean
reserved_is_zero (void * const *reserved,
                  gsize         n,
                  GString      *problem)
{
  if (_mixprec_pointers_are_null (reserved, n))
    return TRUE;
  g_string_append (problem, "its reserved fields are not zero (was it built against "
                   "another mixprec-plugin.h?)");
  return FALSE;
}

/* One function of a vtable every implementation must provide. */
typedef struct {
  const char *name;
  gboolean set;
} RequiredFunction;

static gboolean
functions_are_set (const RequiredFunction *functions,
                   gsize                   n,
                   const gchar            *implementer,
                   const gchar            *table,
                   GString                *problem)
{
  for (gsize i = 0; i < n; i++)
    if (!functions[i].set)
      {
        g_string_append_printf (problem, "its %s function is NULL; %s implements every "
                                "function of %s", functions[i].name, implementer, table);
        return FALSE;
      }
  return TRUE;
}

static gboolean
is_integral_or_infinite (double v)
{
  return isinf (v) || v == floor (v);
}

static gboolean
hparam_check (const MixprecHParamSpecV1 *spec,
              GString                   *problem)
{
  if (!identifier_is_valid (spec->name))
    {
      g_string_append (problem, "a hyper-parameter name is missing or not an identifier "
                       "(a letter, then letters, digits, '-' or '_', at most 64 characters)");
      return FALSE;
    }
  g_string_append_printf (problem, "hyper-parameter '%s': ", spec->name);
  if (spec->type != MIXPREC_HPARAM_DOUBLE && spec->type != MIXPREC_HPARAM_BOOL &&
      spec->type != MIXPREC_HPARAM_INT)
    {
      g_string_append_printf (problem, "type %d is not a MixprecHParamType", (int) spec->type);
      return FALSE;
    }
  if (isnan (spec->min_value) || isnan (spec->max_value) || spec->min_value > spec->max_value)
    {
      g_string_append_printf (problem, "range [%g, %g] is not an interval",
                              spec->min_value, spec->max_value);
      return FALSE;
    }
  if (!isfinite (spec->default_value) ||
      spec->default_value < spec->min_value || spec->default_value > spec->max_value)
    {
      g_string_append_printf (problem, "default %g is outside its range [%g, %g]",
                              spec->default_value, spec->min_value, spec->max_value);
      return FALSE;
    }
  if (spec->type == MIXPREC_HPARAM_BOOL &&
      (spec->min_value != 0.0 || spec->max_value != 1.0))
    {
      g_string_append_printf (problem, "a boolean must have the range [0, 1], not [%g, %g]",
                              spec->min_value, spec->max_value);
      return FALSE;
    }
  if ((spec->type == MIXPREC_HPARAM_BOOL || spec->type == MIXPREC_HPARAM_INT) &&
      (spec->default_value != floor (spec->default_value) ||
       !is_integral_or_infinite (spec->min_value) || !is_integral_or_infinite (spec->max_value)))
    {
      g_string_append (problem, "an integer or boolean needs an integral default and bounds");
      return FALSE;
    }
  if (!_mixprec_pointers_are_null (spec->reserved, G_N_ELEMENTS (spec->reserved)))
    {
      g_string_append (problem, "its reserved fields are not zero");
      return FALSE;
    }
  g_string_truncate (problem, 0);
  return TRUE;
}

static gboolean
optimizer_check (const MixprecOptimizerV3 *vtable,
                 gboolean                  has_step,
                 GString                  *problem)
{
  if (!identifier_is_valid (vtable->name))
    {
      g_string_append (problem, "the optimizer name is missing or not an identifier "
                       "(a letter, then letters, digits, '-' or '_', at most 64 characters)");
      return FALSE;
    }
  if (!identifier_is_valid (vtable->device))
    {
      g_string_append_printf (problem, "optimizer '%s': the device name is missing or not "
                              "an identifier", vtable->name);
      return FALSE;
    }
  g_string_append_printf (problem, "optimizer '%s' (%s): ", vtable->name, vtable->device);
  if (!has_step)
    {
      g_string_append (problem, "its step function is NULL");
      return FALSE;
    }
  if (vtable->n_hparams > MAX_HPARAMS)
    {
      g_string_append_printf (problem, "%u hyper-parameters is more than the limit of %d",
                              vtable->n_hparams, MAX_HPARAMS);
      return FALSE;
    }
  if ((vtable->n_hparams > 0) != (vtable->hparams != NULL))
    {
      g_string_append_printf (problem, "n_hparams is %u but hparams is %s",
                              vtable->n_hparams, vtable->hparams != NULL ? "set" : "NULL");
      return FALSE;
    }
  for (unsigned i = 0; i < vtable->n_hparams; i++)
    {
      g_autoptr(GString) sub = g_string_new (NULL);

      if (!hparam_check (&vtable->hparams[i], sub))
        {
          g_string_append (problem, sub->str);
          return FALSE;
        }
      for (unsigned j = 0; j < i; j++)
        if (g_str_equal (vtable->hparams[j].name, vtable->hparams[i].name))
          {
            g_string_append_printf (problem, "hyper-parameter '%s' is declared twice",
                                    vtable->hparams[i].name);
            return FALSE;
          }
    }
  if (vtable->n_state_slots > MAX_STATE_SLOTS)
    {
      g_string_append_printf (problem, "%u state slots is more than the limit of %d",
                              vtable->n_state_slots, MAX_STATE_SLOTS);
      return FALSE;
    }
  if (vtable->n_state_slots > 0 && vtable->state_names == NULL)
    {
      g_string_append_printf (problem, "it keeps %u state slots but state_names is NULL",
                              vtable->n_state_slots);
      return FALSE;
    }
  for (unsigned i = 0; i < vtable->n_state_slots; i++)
    {
      if (!identifier_is_valid (vtable->state_names[i]))
        {
          g_string_append_printf (problem, "state slot %u has no name or a name that is not "
                                  "an identifier", i);
          return FALSE;
        }
      for (unsigned j = 0; j < i; j++)
        if (g_str_equal (vtable->state_names[j], vtable->state_names[i]))
          {
            g_string_append_printf (problem, "state slot name '%s' is used twice",
                                    vtable->state_names[i]);
            return FALSE;
          }
    }
  return reserved_is_zero (vtable->reserved, G_N_ELEMENTS (vtable->reserved), problem);
}

/* A vtable check's outcome as a GError naming the rule it broke. */
static gboolean
check_result (gboolean      ok,
              const gchar  *problem,
              GError      **error)
{
  if (!ok)
    g_set_error_literal (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE, problem);
  return ok;
}

/* What every kind of feature carries; the kind-specific parts follow. */
static MixprecFeature *
feature_new (MixprecFeatureKind  kind,
             const gchar        *name,
             const gchar        *device,
             const gchar        *description,
             guint               rank,
             MixprecPlugin      *plugin)
{
  MixprecFeature *self = g_object_new (MIXPREC_TYPE_FEATURE, NULL);

  self->kind = kind;
  self->name = g_strdup (name);
  self->device = g_strdup (device);
  self->description = g_strdup (description != NULL ? description : "");
  self->rank = rank;
  self->plugin_name = g_strdup (mixprec_plugin_get_name (plugin));
  self->plugin = plugin;
  g_object_add_weak_pointer (G_OBJECT (plugin), (gpointer *) &self->plugin);
  return self;
}

/* Whether @mask, the vtable's @field, has bit @required (@required_name,
 * which every optimizer must @duty) and no bit from @n_known up (bits for
 * @unknown that do not exist: the known @known are below); where not, says
 * why in @problem. */
static gboolean
check_mask (GString     *problem,
            const gchar *field,
            guint        mask,
            guint        required,
            const gchar *required_name,
            const gchar *duty,
            guint        n_known,
            const gchar *unknown,
            const gchar *known)
{
  if ((mask & (1u << required)) == 0)
    {
      g_string_append_printf (problem, "its %s 0x%x lacks %s, which every optimizer must %s",
                              field, mask, required_name, duty);
      return FALSE;
    }
  if (mask >> n_known != 0)
    {
      g_string_append_printf (problem, "its %s 0x%x has bits for %s that do not exist (the known "
                              "%s are bits 0 to %u)", field, mask, unknown, known, n_known - 1);
      return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_optimizer_check (const MixprecOptimizerV3 *vtable,
                          gboolean                  has_step,
                          GError                  **error)
{
  g_autoptr(GString) problem = g_string_new (NULL);
  /* The check grows @problem: read its text only once the check is done. */
  gboolean ok = optimizer_check (vtable, has_step, problem) &&
                check_mask (problem, "state_dtype_mask", vtable->state_dtype_mask,
                            MIXPREC_PLUGIN_DTYPE_FLOAT32, "float32", "keep state in",
                            N_PLUGIN_DTYPES, "dtypes", "dtypes") &&
                check_mask (problem, "state_format_mask", vtable->state_format_mask,
                            MIXPREC_PLUGIN_STATE_FLOAT32, "FLOAT32", "keep state in",
                            N_STATE_FORMATS, "formats", "formats") &&
                check_mask (problem, "master_format_mask", vtable->master_format_mask,
                            MIXPREC_PLUGIN_MASTER_FLOAT32, "FLOAT32", "update",
                            N_MASTER_FORMATS, "master formats", "formats");

  if (ok && vtable->n_state_slots < 32 && vtable->state_signed_mask >> vtable->n_state_slots != 0)
    {
      g_string_append_printf (problem, "its state_signed_mask 0x%x names slots beyond its %u "
                              "state slots", vtable->state_signed_mask, vtable->n_state_slots);
      ok = FALSE;
    }
  if (ok && (vtable->numerics_master_mask & ~(uintptr_t) vtable->master_format_mask) != 0)
    {
      g_string_append_printf (problem, "its numerics_master_mask 0x%" G_GINT64_MODIFIER "x names "
                              "master formats outside its master_format_mask 0x%x (or, in an "
                              "optimizer of revision 1 or 2, its reserved fields are not zero)",
                              (guint64) vtable->numerics_master_mask, vtable->master_format_mask);
      ok = FALSE;
    }
  return check_result (ok, problem->str, error);
}

/* An optimizer's part of a feature: copies of the schema and the state
 * names, so that only the step functions point into the plugin. */
static void
feature_set_optimizer (MixprecFeature       *self,
                       const _MixprecVTable *upgraded)
{
  const MixprecOptimizerV3 *vtable = &upgraded->optimizer;

  self->strings = g_string_chunk_new (256);
  self->optimizer = *vtable;
  self->hparams = g_new0 (MixprecHParamSpecV1, MAX (vtable->n_hparams, 1));
  self->hparam_defaults = g_new0 (gdouble, MAX (vtable->n_hparams, 1));
  for (unsigned i = 0; i < vtable->n_hparams; i++)
    {
      self->hparams[i] = vtable->hparams[i];
      self->hparams[i].name = g_string_chunk_insert_const (self->strings, vtable->hparams[i].name);
      self->hparams[i].description =
        g_string_chunk_insert_const (self->strings, vtable->hparams[i].description != NULL
                                                    ? vtable->hparams[i].description : "");
      self->hparam_defaults[i] = vtable->hparams[i].default_value;
    }
  self->state_names = g_new0 (const gchar *, vtable->n_state_slots + 1);
  for (unsigned i = 0; i < vtable->n_state_slots; i++)
    self->state_names[i] = g_string_chunk_insert_const (self->strings, vtable->state_names[i]);

  self->optimizer.name = self->name;
  self->optimizer.device = self->device;
  self->optimizer.description = self->description;
  self->optimizer.hparams = vtable->n_hparams > 0 ? self->hparams : NULL;
  self->optimizer.state_names = vtable->n_state_slots > 0 ? self->state_names : NULL;
  self->step_v1 = upgraded->step_v1;
  self->step_v2 = upgraded->step_v2;
  self->optimizer_revision = upgraded->revision;

  self->optimizer_v1.name = self->optimizer.name;
  self->optimizer_v1.device = self->optimizer.device;
  self->optimizer_v1.rank = self->optimizer.rank;
  self->optimizer_v1.description = self->optimizer.description;
  self->optimizer_v1.hparams = self->optimizer.hparams;
  self->optimizer_v1.n_hparams = self->optimizer.n_hparams;
  self->optimizer_v1.n_state_slots = self->optimizer.n_state_slots;
  self->optimizer_v1.state_names = self->optimizer.state_names;
  self->optimizer_v1.step = self->step_v1;
}

const MixprecOptimizerV1 *
_mixprec_feature_get_optimizer_vtable (MixprecFeature *feature)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  return feature->kind == MIXPREC_FEATURE_KIND_OPTIMIZER ? &feature->optimizer_v1 : NULL;
}

gboolean
_mixprec_feature_state_is_signed (MixprecFeature *feature,
                                  guint           k)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), TRUE);

  if (feature->kind != MIXPREC_FEATURE_KIND_OPTIMIZER || k >= feature->optimizer.n_state_slots)
    return TRUE;
  if (feature->optimizer_revision >= 3)
    return k < 32 && ((feature->optimizer.state_signed_mask >> k) & 1u) != 0;
  return feature->state_names == NULL || feature->state_names[k] == NULL ||
         !g_str_equal (feature->state_names[k], "exp_avg_sq");
}

const gdouble *
_mixprec_feature_get_hparam_defaults (MixprecFeature *feature,
                                      guint          *n_hparams)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  if (n_hparams != NULL)
    *n_hparams = mixprec_feature_get_n_hparams (feature);
  return feature->hparam_defaults;
}

static gboolean
step_failed (MixprecFeature *feature,
             int             status,
             char           *errbuf,
             gsize           errbuf_len,
             gsize           n,
             GError        **error)
{
  errbuf[errbuf_len - 1] = '\0';
  g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
               "optimizer '%s' (%s, plugin %s) failed on %" G_GSIZE_FORMAT " elements: %s (%s, status %d)",
               feature->name, feature->device, feature->plugin_name, n,
               errbuf[0] != '\0' ? errbuf : "it gave no reason",
               _mixprec_plugin_status_to_string (status), status);
  return FALSE;
}

/* How a state format and a master format read in messages. */
const gchar *
_mixprec_plugin_state_format_describe (guint format)
{
  static const gchar *const words[N_STATE_FORMATS] = {
    [MIXPREC_PLUGIN_STATE_FLOAT32] = "float32",
    [MIXPREC_PLUGIN_STATE_BFLOAT16] = "bfloat16",
    [MIXPREC_PLUGIN_STATE_FLOAT16_SCALED] = "float16 with block scales",
    [MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED] = "bfloat16 with block scales",
    [MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED] = "float8 e4m3 with block scales",
    [MIXPREC_PLUGIN_STATE_INT8_DYNAMIC] = "block-wise dynamic int8",
    [MIXPREC_PLUGIN_STATE_INT4_DYNAMIC] = "block-wise dynamic int4",
  };

  return format < N_STATE_FORMATS ? words[format] : NULL;
}

const gchar *
_mixprec_plugin_master_format_describe (guint format)
{
  static const gchar *const words[N_MASTER_FORMATS] = {
    [MIXPREC_PLUGIN_MASTER_FLOAT32] = "a float32 master",
    [MIXPREC_PLUGIN_MASTER_REMAINDER] = "a remainder master (bfloat16 working copy and int16 remainder)",
    [MIXPREC_PLUGIN_MASTER_KAHAN] = "a Kahan master (bfloat16 weights and bfloat16 compensation)",
  };

  return format < N_MASTER_FORMATS ? words[format] : NULL;
}

/* What an older revision is told to do about a representation it lacks. */
static const gchar *
revision_hint (MixprecFeature *feature)
{
  return feature->optimizer_revision < 3
    ? " (optimizer ABI revisions 1 and 2 know float32 and bfloat16 state and float32 masters "
      "only; rebuild it against MixprecOptimizerV3)" : "";
}

gboolean
_mixprec_feature_check_representation (MixprecFeature                  *feature,
                                       MixprecPluginMasterFormat        master,
                                       const MixprecPluginStateFormat  *formats,
                                       guint                            n_formats,
                                       GError                         **error)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), FALSE);
  g_return_val_if_fail (feature->kind == MIXPREC_FEATURE_KIND_OPTIMIZER, FALSE);

  if ((guint) master >= N_MASTER_FORMATS
      || (feature->optimizer.master_format_mask & (1u << master)) == 0)
    {
      const gchar *what = _mixprec_plugin_master_format_describe (master);
      g_autofree gchar *unknown = g_strdup_printf ("an unknown master format (%u)", (guint) master);

      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
                   "optimizer '%s' (%s, plugin %s, optimizer ABI revision %u) cannot keep its "
                   "parameters with %s%s",
                   feature->name, feature->device, feature->plugin_name,
                   feature->optimizer_revision, what != NULL ? what : unknown,
                   what != NULL ? revision_hint (feature) : "");
      return FALSE;
    }
  if (formats != NULL && n_formats != feature->optimizer.n_state_slots)
    {
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
                   "optimizer '%s' (%s, plugin %s) keeps %u state slots, not %u",
                   feature->name, feature->device, feature->plugin_name,
                   feature->optimizer.n_state_slots, n_formats);
      return FALSE;
    }
  for (guint k = 0; formats != NULL && k < n_formats; k++)
    {
      guint f = (guint) formats[k];
      const gchar *what = _mixprec_plugin_state_format_describe (f);
      g_autofree gchar *unknown = NULL;

      if (f < N_STATE_FORMATS && (feature->optimizer.state_format_mask & (1u << f)) != 0)
        continue;
      unknown = g_strdup_printf ("an unknown format (%u)", f);
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
                   "optimizer '%s' (%s, plugin %s, optimizer ABI revision %u) cannot keep state "
                   "slot '%s' in %s%s",
                   feature->name, feature->device, feature->plugin_name,
                   feature->optimizer_revision, feature->state_names[k],
                   what != NULL ? what : unknown, what != NULL ? revision_hint (feature) : "");
      return FALSE;
    }
  return TRUE;
}

gboolean
_mixprec_feature_optimizer_measures (MixprecFeature           *feature,
                                     MixprecPluginMasterFormat master_format)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), FALSE);

  return feature->kind == MIXPREC_FEATURE_KIND_OPTIMIZER && (guint) master_format < 32 &&
         (feature->optimizer.numerics_master_mask & ((uintptr_t) 1 << master_format)) != 0;
}

/* The V3 step after the representation was checked: an older revision
 * gets its own arguments, with state_dtypes naming each slot's dtype. */
static gboolean
optimizer_call (MixprecFeature         *feature,
                MixprecOptimizerStepV3 *args,
                const gdouble          *hparams,
                gfloat                 *master,
                gconstpointer           grad,
                gpointer const         *states,
                gpointer                working,
                gsize                   n,
                GError                **error)
{
  char errbuf[_MIXPREC_PLUGIN_ERRBUF_SIZE] = "";
  int status;

  args->v2.base.struct_size = sizeof *args;
  args->v2.base.hparams = hparams != NULL ? hparams : feature->hparam_defaults;
  args->v2.base.n_hparams = feature->optimizer.n_hparams;
  status = _mixprec_plugin_compat_optimizer_step (&feature->optimizer, feature->step_v1,
                                                  feature->step_v2, args, master, grad, states,
                                                  working, n, errbuf, sizeof errbuf);
  if (status == MIXPREC_PLUGIN_OK)
    return TRUE;
  return step_failed (feature, status, errbuf, sizeof errbuf, n, error);
}

gboolean
_mixprec_feature_optimizer_step_v3 (MixprecFeature         *feature,
                                    MixprecOptimizerStepV3 *args,
                                    const gdouble          *hparams,
                                    gfloat                 *master,
                                    gconstpointer           grad,
                                    gpointer const         *states,
                                    gpointer                working,
                                    gsize                   n,
                                    GError                **error)
{
  MixprecPluginDType dtypes[_MIXPREC_PLUGIN_MAX_STATE_SLOTS];
  const MixprecPluginDType *caller_dtypes;
  gboolean ok;

  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), FALSE);
  g_return_val_if_fail (feature->kind == MIXPREC_FEATURE_KIND_OPTIMIZER, FALSE);
  g_return_val_if_fail (args != NULL, FALSE);

  if (!_mixprec_feature_check_representation (feature, args->master_format, args->state_formats,
                                               feature->optimizer.n_state_slots, error))
    return FALSE;

  /* state_dtypes names each FLOAT32 / BFLOAT16 slot's dtype, and the
   * stored dtype of the others where they have one; the caller's, when
   * it gave one, is kept. */
  caller_dtypes = args->v2.state_dtypes;
  if (caller_dtypes == NULL)
    {
      for (guint k = 0; k < feature->optimizer.n_state_slots; k++)
        {
          MixprecPluginStateFormat f = args->state_formats != NULL ? args->state_formats[k]
                                                                   : MIXPREC_PLUGIN_STATE_FLOAT32;

          switch (f)
            {
            case MIXPREC_PLUGIN_STATE_BFLOAT16:
            case MIXPREC_PLUGIN_STATE_BFLOAT16_SCALED:
              dtypes[k] = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
              break;
            case MIXPREC_PLUGIN_STATE_FLOAT16_SCALED:
              dtypes[k] = MIXPREC_PLUGIN_DTYPE_FLOAT16;
              break;
            case MIXPREC_PLUGIN_STATE_FLOAT8_E4M3_SCALED:
              dtypes[k] = MIXPREC_PLUGIN_DTYPE_FLOAT8_E4M3;
              break;
            default:
              dtypes[k] = MIXPREC_PLUGIN_DTYPE_FLOAT32;
              break;
            }
        }
      args->v2.state_dtypes = dtypes;
    }
  ok = optimizer_call (feature, args, hparams, master, grad, states, working, n, error);
  args->v2.state_dtypes = caller_dtypes;
  return ok;
}

gboolean
_mixprec_feature_optimizer_step_v2 (MixprecFeature         *feature,
                                    MixprecOptimizerStepV2 *args,
                                    const gdouble          *hparams,
                                    gfloat                 *master,
                                    gconstpointer           grad,
                                    gpointer const         *states,
                                    gpointer                working,
                                    gsize                   n,
                                    GError                **error)
{
  MixprecPluginStateFormat formats[_MIXPREC_PLUGIN_MAX_STATE_SLOTS];
  MixprecOptimizerStepV3 v3 = { 0 };
  gboolean ok;

  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), FALSE);
  g_return_val_if_fail (feature->kind == MIXPREC_FEATURE_KIND_OPTIMIZER, FALSE);
  g_return_val_if_fail (args != NULL, FALSE);

  for (guint k = 0; k < feature->optimizer.n_state_slots; k++)
    {
      MixprecPluginDType d = args->state_dtypes != NULL ? args->state_dtypes[k]
                                                        : MIXPREC_PLUGIN_DTYPE_FLOAT32;
      gboolean known = (guint) d < N_PLUGIN_DTYPES
                       && (feature->optimizer.state_dtype_mask & (1u << d)) != 0;

      /* A revision 3 plugin reads the formats, which have no unscaled
       * float16 or float8: those dtypes reach only the older revisions
       * that declared them. */
      if (known && feature->optimizer_revision >= 3
          && d != MIXPREC_PLUGIN_DTYPE_FLOAT32 && d != MIXPREC_PLUGIN_DTYPE_BFLOAT16)
        known = FALSE;
      if (known)
        {
          formats[k] = d == MIXPREC_PLUGIN_DTYPE_BFLOAT16 ? MIXPREC_PLUGIN_STATE_BFLOAT16
                                                          : MIXPREC_PLUGIN_STATE_FLOAT32;
          continue;
        }
      /* The shim: a V1 plugin knows FP32 state only, and says nothing
       * else; tell the user which revision it speaks. */
      g_set_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED,
                   "optimizer '%s' (%s, plugin %s) speaks optimizer ABI revision %u, which "
                   "cannot keep state slot '%s' in %s%s",
                   feature->name, feature->device, feature->plugin_name,
                   feature->optimizer_revision, feature->state_names[k],
                   (guint) d < N_PLUGIN_DTYPES ? mixprec_dtype_get_name ((MixprecDType) d) : "an unknown dtype",
                   feature->optimizer_revision < 2
                   ? " (it keeps float32 state only; rebuild it against MixprecOptimizerV2)" : "");
      return FALSE;
    }

  v3.v2 = *args;
  v3.state_formats = formats;
  v3.master_format = MIXPREC_PLUGIN_MASTER_FLOAT32;
  ok = optimizer_call (feature, &v3, hparams, master, grad, states, working, n, error);
  args->base.struct_size = sizeof *args;
  args->base.hparams = v3.v2.base.hparams;
  args->base.n_hparams = v3.v2.base.n_hparams;
  return ok;
}

gboolean
_mixprec_feature_optimizer_step (MixprecFeature         *feature,
                                 MixprecOptimizerStepV1 *args,
                                 const gdouble          *hparams,
                                 gfloat                 *master,
                                 gconstpointer           grad,
                                 gfloat * const         *states,
                                 gpointer                working,
                                 gsize                   n,
                                 GError                **error)
{
  MixprecOptimizerStepV2 v2 = { 0 };
  gboolean ok;

  g_return_val_if_fail (args != NULL, FALSE);

  v2.base = *args;
  ok = _mixprec_feature_optimizer_step_v2 (feature, &v2, hparams, master, grad,
                                           (gpointer const *) states, working, n, error);
  args->struct_size = sizeof *args;
  args->hparams = v2.base.hparams;
  args->n_hparams = v2.base.n_hparams;
  return ok;
}

/* ------------------------------------------------------------ communicators */

static gboolean
comm_check (const MixprecCommV1 *vtable,
            GString             *problem)
{
  const RequiredFunction functions[] = {
    { "init", vtable->init != NULL },
    { "all_reduce", vtable->all_reduce != NULL },
    { "reduce_scatter", vtable->reduce_scatter != NULL },
    { "all_gather", vtable->all_gather != NULL },
    { "broadcast", vtable->broadcast != NULL },
    { "barrier", vtable->barrier != NULL },
    { "test", vtable->test != NULL },
    { "wait", vtable->wait != NULL },
    { "abort", vtable->abort != NULL },
    { "finalize", vtable->finalize != NULL },
  };

  if (!identifier_is_valid (vtable->name))
    {
      g_string_append (problem, "the comm name is missing or not an identifier "
                       "(a letter, then letters, digits, '-' or '_', at most 64 characters)");
      return FALSE;
    }
  if (!identifier_is_valid (vtable->device))
    {
      g_string_append_printf (problem, "comm '%s': the device name is missing or not "
                              "an identifier", vtable->name);
      return FALSE;
    }
  g_string_append_printf (problem, "comm '%s' (%s): ", vtable->name, vtable->device);
  if (!functions_are_set (functions, G_N_ELEMENTS (functions), "a communicator",
                          "MixprecCommV1", problem))
    return FALSE;
  if (vtable->dtype_mask == 0)
    {
      g_string_append (problem, "its dtype_mask is 0: it must accept at least one dtype");
      return FALSE;
    }
  if (vtable->dtype_mask >> N_PLUGIN_DTYPES != 0)
    {
      g_string_append_printf (problem, "its dtype_mask 0x%x has bits for dtypes that do "
                              "not exist (the known dtypes are bits 0 to %d)",
                              vtable->dtype_mask, N_PLUGIN_DTYPES - 1);
      return FALSE;
    }
  return reserved_is_zero (vtable->reserved, G_N_ELEMENTS (vtable->reserved), problem);
}

/* What revision 2 adds: the all-to-all, and its own reserved space. */
static gboolean
comm_v2_check (const MixprecCommV2 *vtable,
               GString             *problem)
{
  const RequiredFunction functions[] = {
    { "all_to_all", vtable->all_to_all != NULL },
  };

  if (!functions_are_set (functions, G_N_ELEMENTS (functions), "a communicator of revision 2",
                          "MixprecCommV2", problem))
    return FALSE;
  return reserved_is_zero (vtable->reserved, G_N_ELEMENTS (vtable->reserved), problem);
}

gboolean
_mixprec_comm_check (const MixprecCommV2 *vtable,
                     guint                revision,
                     GError             **error)
{
  g_autoptr(GString) problem = g_string_new (NULL);
  /* The check grows @problem: read its text only once the check is done. */
  gboolean ok = comm_check (&vtable->base, problem) &&
                (revision < 2 || comm_v2_check (vtable, problem));

  return check_result (ok, problem->str, error);
}

static void
feature_set_comm (MixprecFeature      *self,
                  const MixprecCommV2 *vtable,
                  guint                revision)
{
  self->comm = *vtable;
  self->comm_revision = revision;
  self->comm.base.name = self->name;
  self->comm.base.device = self->device;
  self->comm.base.description = self->description;

  self->comm_dtypes = g_new0 (MixprecDType, N_PLUGIN_DTYPES);
  for (guint d = 0; d < N_PLUGIN_DTYPES; d++)
    if (vtable->base.dtype_mask & (1u << d))
      self->comm_dtypes[self->n_comm_dtypes++] = (MixprecDType) d;
}

const MixprecCommV1 *
_mixprec_feature_get_comm_vtable (MixprecFeature *feature)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  return feature->kind == MIXPREC_FEATURE_KIND_COMM ? &feature->comm.base : NULL;
}

const MixprecCommV2 *
_mixprec_feature_get_comm_v2 (MixprecFeature *feature,
                              guint          *revision)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  if (feature->kind != MIXPREC_FEATURE_KIND_COMM)
    return NULL;
  if (revision != NULL)
    *revision = feature->comm_revision;
  return &feature->comm;
}

/* ------------------------------------------------------------ devices */

static gboolean
device_check (const MixprecDeviceV1 *vtable,
              GString               *problem)
{
  const RequiredFunction functions[] = {
    { "probe", vtable->probe != NULL },
    { "open", vtable->open != NULL },
    { "close", vtable->close != NULL },
    { "describe", vtable->describe != NULL },
    { "get_stream", vtable->get_stream != NULL },
    { "alloc", vtable->alloc != NULL },
    { "free", vtable->free != NULL },
    { "memset_zero", vtable->memset_zero != NULL },
    { "copy", vtable->copy != NULL },
    { "synchronize", vtable->synchronize != NULL },
    { "event_create", vtable->event_create != NULL },
    { "event_record", vtable->event_record != NULL },
    { "event_query", vtable->event_query != NULL },
    { "event_wait", vtable->event_wait != NULL },
    { "event_destroy", vtable->event_destroy != NULL },
    { "convert", vtable->convert != NULL },
    { "accumulate", vtable->accumulate != NULL },
    { "scale", vtable->scale != NULL },
    { "sumsq_blocks", vtable->sumsq_blocks != NULL },
    { "sum_ordered", vtable->sum_ordered != NULL },
  };

  if (!identifier_is_valid (vtable->name))
    {
      g_string_append (problem, "the device name is missing or not an identifier "
                       "(a letter, then letters, digits, '-' or '_', at most 64 characters)");
      return FALSE;
    }
  if (g_str_equal (vtable->name, "cpu"))
    {
      g_string_append (problem, "device 'cpu': the name belongs to the library's host "
                       "memory and kernels; a plugin cannot replace it");
      return FALSE;
    }
  g_string_append_printf (problem, "device '%s': ", vtable->name);
  if (!functions_are_set (functions, G_N_ELEMENTS (functions), "a device",
                          "MixprecDeviceV1", problem))
    return FALSE;
  return reserved_is_zero (vtable->reserved, G_N_ELEMENTS (vtable->reserved), problem);
}

gboolean
_mixprec_device_check (const MixprecDeviceV3 *vtable,
                       guint                  revision,
                       GError               **error)
{
  g_autoptr(GString) problem = g_string_new (NULL);
  const RequiredFunction functions[] = {
    { "host_alloc", vtable->base.host_alloc != NULL },
    { "host_free", vtable->base.host_free != NULL },
    { "fp8_cast", vtable->fp8_cast != NULL },
    { "mx_cast", vtable->mx_cast != NULL },
  };
  /* The functions revisions 2 and 3 added, and the table named in the
   * message: the one the plugin registered. */
  const gsize n_functions = revision >= 3 ? 4 : revision == 2 ? 2 : 0;
  g_autofree gchar *table = g_strdup_printf ("MixprecDeviceV%u", revision);
  gboolean ok = device_check (&vtable->base.base, problem) &&
                functions_are_set (functions, n_functions, "a device", table, problem) &&
                reserved_is_zero (vtable->base.reserved, G_N_ELEMENTS (vtable->base.reserved),
                                  problem) &&
                reserved_is_zero (vtable->reserved, G_N_ELEMENTS (vtable->reserved), problem);

  return check_result (ok, problem->str, error);
}

MixprecFeature *
_mixprec_feature_new (const _MixprecVTable *vtable,
                      MixprecPlugin        *plugin)
{
  MixprecFeature *self;

  switch (vtable->kind)
    {
    case MIXPREC_FEATURE_KIND_OPTIMIZER:
      self = feature_new (vtable->kind, vtable->optimizer.name, vtable->optimizer.device,
                          vtable->optimizer.description, vtable->optimizer.rank, plugin);
      feature_set_optimizer (self, vtable);
      return self;
    case MIXPREC_FEATURE_KIND_COMM:
      self = feature_new (vtable->kind, vtable->comm.base.name, vtable->comm.base.device,
                          vtable->comm.base.description, vtable->comm.base.rank, plugin);
      feature_set_comm (self, &vtable->comm, vtable->revision);
      return self;
    case MIXPREC_FEATURE_KIND_DEVICE:
      /* A device feature's device is its own name. */
      self = feature_new (vtable->kind, vtable->device.base.base.name,
                          vtable->device.base.base.name, vtable->device.base.base.description,
                          vtable->device.base.base.rank, plugin);
      self->device_vtable = vtable->device;
      self->device_vtable.base.base.name = self->name;
      self->device_vtable.base.base.description = self->description;
      self->device_revision = vtable->revision;
      return self;
    default:
      g_return_val_if_reached (NULL);
    }
}

const MixprecDeviceV1 *
_mixprec_feature_get_device_vtable (MixprecFeature *feature)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  return feature->kind == MIXPREC_FEATURE_KIND_DEVICE ? &feature->device_vtable.base.base : NULL;
}

const MixprecDeviceV2 *
_mixprec_feature_get_device_vtable_v2 (MixprecFeature *feature)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  return feature->kind == MIXPREC_FEATURE_KIND_DEVICE ? &feature->device_vtable.base : NULL;
}

const MixprecDeviceV3 *
_mixprec_feature_get_device_vtable_v3 (MixprecFeature *feature)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (feature), NULL);

  return feature->kind == MIXPREC_FEATURE_KIND_DEVICE ? &feature->device_vtable : NULL;
}

/* ------------------------------------------------------------ public API */

/**
 * mixprec_feature_get_kind:
 * @self: a #MixprecFeature
 *
 * Says what kind of feature this is: an optimizer, a communication backend
 * or a device.
 *
 * Returns: what the feature provides
 *
 * Since: 1.0
 */
MixprecFeatureKind
mixprec_feature_get_kind (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), MIXPREC_FEATURE_KIND_OPTIMIZER);

  return self->kind;
}

/**
 * mixprec_feature_get_name:
 * @self: a #MixprecFeature
 *
 * Gives the feature's name, the one configurations and
 * mixprec_registry_find_feature() use.
 *
 * Returns: the feature's name, e.g. "adamw"
 *
 * Since: 1.0
 */
const gchar *
mixprec_feature_get_name (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);

  return self->name;
}

/**
 * mixprec_feature_get_device:
 * @self: a #MixprecFeature
 *
 * Gives the name of the device whose memory the feature works on.
 *
 * Returns: the device the feature works on, e.g. "cpu"
 *
 * Since: 1.0
 */
const gchar *
mixprec_feature_get_device (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);

  return self->device;
}

/**
 * mixprec_feature_get_rank:
 * @self: a #MixprecFeature
 *
 * Gives the feature's rank, which decides between features of the same
 * kind, name and device.
 *
 * Returns: the feature's rank: among features of the same kind, name and
 *   device, the highest rank is used
 *
 * Since: 1.0
 */
guint
mixprec_feature_get_rank (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), 0);

  return self->rank;
}

/**
 * mixprec_feature_get_description:
 * @self: a #MixprecFeature
 *
 * Gives the plugin's description of the feature, for listings such as
 * mixprec-inspect's.
 *
 * Returns: the plugin's one-sentence description of the feature; empty
 *   when it gave none
 *
 * Since: 1.0
 */
const gchar *
mixprec_feature_get_description (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);

  return self->description;
}

/**
 * mixprec_feature_get_plugin_name:
 * @self: a #MixprecFeature
 *
 * Gives the name of the plugin that registered the feature.
 *
 * Returns: the name of the plugin that registered the feature (valid even
 *   after the plugin object is gone)
 *
 * Since: 1.0
 */
const gchar *
mixprec_feature_get_plugin_name (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);

  return self->plugin_name;
}

/**
 * mixprec_feature_get_plugin:
 * @self: a #MixprecFeature
 *
 * Gives the plugin that registered the feature.
 *
 * Returns: (transfer none) (nullable): the plugin that registered the
 *   feature, or %NULL when the plugin object was finalized (the registry
 *   it belonged to was)
 *
 * Since: 1.0
 */
MixprecPlugin *
mixprec_feature_get_plugin (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);

  return self->plugin;
}

/**
 * mixprec_feature_get_n_hparams:
 * @self: a #MixprecFeature
 *
 * Gives how many hyper-parameters an optimizer feature declares; valid
 * indexes for the mixprec_feature_get_hparam_*() functions are below it.
 *
 * Returns: the number of hyper-parameters of an optimizer; 0 for other
 *   kinds of features
 *
 * Since: 1.0
 */
guint
mixprec_feature_get_n_hparams (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), 0);

  return self->kind == MIXPREC_FEATURE_KIND_OPTIMIZER ? self->optimizer.n_hparams : 0;
}

/**
 * mixprec_feature_find_hparam:
 * @self: a #MixprecFeature
 * @name: a hyper-parameter name, e.g. "weight_decay"
 *
 * Looks up one of an optimizer's hyper-parameters by name.
 *
 * Returns: the index of the hyper-parameter called @name (its position in
 *   the values the optimizer receives), or -1 when there is none
 *
 * Since: 1.0
 */
gint
mixprec_feature_find_hparam (MixprecFeature *self,
                             const gchar    *name)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), -1);
  g_return_val_if_fail (name != NULL, -1);

  for (guint i = 0; i < mixprec_feature_get_n_hparams (self); i++)
    if (g_str_equal (self->hparams[i].name, name))
      return (gint) i;
  return -1;
}

/* Programmer errors: an index past the schema. */
#define CHECK_HPARAM_INDEX(self, index, val) G_STMT_START {                 \
    g_return_val_if_fail (MIXPREC_IS_FEATURE (self), (val));                \
    g_return_val_if_fail ((index) < mixprec_feature_get_n_hparams (self), (val)); \
  } G_STMT_END

/**
 * mixprec_feature_get_hparam_name:
 * @self: a #MixprecFeature
 * @index: a hyper-parameter index, less than mixprec_feature_get_n_hparams()
 *
 * Gives the name of one of an optimizer's hyper-parameters.
 *
 * Returns: the name of the hyper-parameter, as configurations spell it
 *
 * Since: 1.0
 */
const gchar *
mixprec_feature_get_hparam_name (MixprecFeature *self,
                                 guint           index)
{
  CHECK_HPARAM_INDEX (self, index, NULL);

  return self->hparams[index].name;
}

/**
 * mixprec_feature_get_hparam_description:
 * @self: a #MixprecFeature
 * @index: a hyper-parameter index, less than mixprec_feature_get_n_hparams()
 *
 * Gives the plugin's description of one of an optimizer's
 * hyper-parameters.
 *
 * Returns: what the hyper-parameter does; empty when the plugin did not say
 *
 * Since: 1.0
 */
const gchar *
mixprec_feature_get_hparam_description (MixprecFeature *self,
                                        guint           index)
{
  CHECK_HPARAM_INDEX (self, index, NULL);

  return self->hparams[index].description;
}

/**
 * mixprec_feature_get_hparam_type:
 * @self: a #MixprecFeature
 * @index: a hyper-parameter index, less than mixprec_feature_get_n_hparams()
 *
 * Gives the type of one of an optimizer's hyper-parameters: a real number,
 * an integer or a truth value.
 *
 * Returns: which values the hyper-parameter accepts
 *
 * Since: 1.0
 */
MixprecHyperParamType
mixprec_feature_get_hparam_type (MixprecFeature *self,
                                 guint           index)
{
  CHECK_HPARAM_INDEX (self, index, MIXPREC_HYPER_PARAM_TYPE_DOUBLE);

  return (MixprecHyperParamType) self->hparams[index].type;
}

/**
 * mixprec_feature_get_hparam_default:
 * @self: a #MixprecFeature
 * @index: a hyper-parameter index, less than mixprec_feature_get_n_hparams()
 *
 * Gives the default value of one of an optimizer's hyper-parameters.
 *
 * Returns: the value used when a configuration does not set the
 *   hyper-parameter; within its range
 *
 * Since: 1.0
 */
gdouble
mixprec_feature_get_hparam_default (MixprecFeature *self,
                                    guint           index)
{
  CHECK_HPARAM_INDEX (self, index, 0.0);

  return self->hparams[index].default_value;
}

/**
 * mixprec_feature_get_hparam_minimum:
 * @self: a #MixprecFeature
 * @index: a hyper-parameter index, less than mixprec_feature_get_n_hparams()
 *
 * Gives the smallest value one of an optimizer's hyper-parameters accepts;
 * a configuration asking for less is refused.
 *
 * Returns: the smallest valid value (inclusive; may be -infinity)
 *
 * Since: 1.0
 */
gdouble
mixprec_feature_get_hparam_minimum (MixprecFeature *self,
                                    guint           index)
{
  CHECK_HPARAM_INDEX (self, index, 0.0);

  return self->hparams[index].min_value;
}

/**
 * mixprec_feature_get_hparam_maximum:
 * @self: a #MixprecFeature
 * @index: a hyper-parameter index, less than mixprec_feature_get_n_hparams()
 *
 * Gives the largest value one of an optimizer's hyper-parameters accepts;
 * a configuration asking for more is refused.
 *
 * Returns: the largest valid value (inclusive; may be +infinity)
 *
 * Since: 1.0
 */
gdouble
mixprec_feature_get_hparam_maximum (MixprecFeature *self,
                                    guint           index)
{
  CHECK_HPARAM_INDEX (self, index, 0.0);

  return self->hparams[index].max_value;
}

/**
 * mixprec_feature_get_n_state_slots:
 * @self: a #MixprecFeature
 *
 * Gives how many state values an optimizer feature keeps for every
 * parameter element.
 *
 * Returns: how many FP32 values of state an optimizer keeps per parameter
 *   element (2 for Adam's moments); 0 for other kinds of features
 *
 * Since: 1.0
 */
guint
mixprec_feature_get_n_state_slots (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), 0);

  return self->kind == MIXPREC_FEATURE_KIND_OPTIMIZER ? self->optimizer.n_state_slots : 0;
}

/**
 * mixprec_feature_get_state_names:
 * @self: a #MixprecFeature
 *
 * Lists the names of an optimizer feature's state slots.
 *
 * Returns: (transfer none) (array zero-terminated=1): the names of an
 *   optimizer's state slots (e.g. "exp_avg", "exp_avg_sq"), as checkpoints
 *   store them; empty for other kinds of features
 *
 * Since: 1.0
 */
const gchar * const *
mixprec_feature_get_state_names (MixprecFeature *self)
{
  static const gchar * const none[] = { NULL };

  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);

  if (self->state_names == NULL)
    return none;
  return (const gchar * const *) self->state_names;
}

/**
 * mixprec_feature_get_grad_dtypes:
 * @self: a #MixprecFeature
 * @n_dtypes: (out): the number of data types returned
 *
 * Lists the gradient data types an optimizer feature reads.
 *
 * Returns: (transfer none) (array length=n_dtypes) (nullable): the
 *   gradient data types an optimizer accepts (plugin ABI 1.0: float32,
 *   float16 and bfloat16 for every optimizer); %NULL for other kinds
 *
 * Since: 1.0
 */
const MixprecDType *
mixprec_feature_get_grad_dtypes (MixprecFeature *self,
                                 gsize          *n_dtypes)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);
  g_return_val_if_fail (n_dtypes != NULL, NULL);

  if (self->kind != MIXPREC_FEATURE_KIND_OPTIMIZER)
    {
      *n_dtypes = 0;
      return NULL;
    }
  *n_dtypes = G_N_ELEMENTS (optimizer_grad_dtypes);
  return optimizer_grad_dtypes;
}

/**
 * mixprec_feature_get_working_dtypes:
 * @self: a #MixprecFeature
 * @n_dtypes: (out): the number of data types returned
 *
 * Lists the data types an optimizer feature can write the working copy of
 * the weights in.
 *
 * Returns: (transfer none) (array length=n_dtypes) (nullable): the data
 *   types an optimizer can write the working copy in (plugin ABI 1.0:
 *   float16, bfloat16 and float32 for every optimizer); %NULL for other
 *   kinds
 *
 * Since: 1.0
 */
const MixprecDType *
mixprec_feature_get_working_dtypes (MixprecFeature *self,
                                    gsize          *n_dtypes)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);
  g_return_val_if_fail (n_dtypes != NULL, NULL);

  if (self->kind != MIXPREC_FEATURE_KIND_OPTIMIZER)
    {
      *n_dtypes = 0;
      return NULL;
    }
  *n_dtypes = G_N_ELEMENTS (optimizer_working_dtypes);
  return optimizer_working_dtypes;
}

/**
 * mixprec_feature_get_abi_revision:
 * @self: a #MixprecFeature
 *
 * The revision of the plugin ABI vtable the feature was registered with:
 * 2 for an optimizer registered as a `MixprecOptimizerV2` (plugin ABI 1.1)
 * and for a device registered as a `MixprecDeviceV2` (plugin ABI 1.2), 3 for
 * a device registered as a `MixprecDeviceV3` (plugin ABI 1.3, the float8
 * casts FP8 working copies need on a device) and for an optimizer
 * registered as a `MixprecOptimizerV3` (plugin ABI 1.4, block-scaled
 * low-bit state and 16-bit masters), 2 for a communicator registered as a
 * `MixprecCommV2` (plugin ABI 1.5, the all-to-all ZeRO++'s quantized
 * gradients need), 1 for a `MixprecOptimizerV1`, a `MixprecDeviceV1` and
 * a `MixprecCommV1`. The library reaches revision 1 optimizers through a
 * shim that keeps their state in float32, and revision 1 devices without
 * pinned host memory (offloaded transfers then use pageable memory).
 *
 * Returns: the vtable revision, 1 or more
 *
 * Since: 1.1
 */
guint
mixprec_feature_get_abi_revision (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), 0);

  switch (self->kind)
    {
    case MIXPREC_FEATURE_KIND_OPTIMIZER:
      return self->optimizer_revision;
    case MIXPREC_FEATURE_KIND_DEVICE:
      return self->device_revision;
    case MIXPREC_FEATURE_KIND_COMM:
      return self->comm_revision;
    default:
      return 1;
    }
}

/**
 * mixprec_feature_get_state_dtypes:
 * @self: a #MixprecFeature
 * @n_dtypes: (out): the number of data types returned
 *
 * Lists the data types an optimizer feature can keep its state in.
 *
 * Returns: (transfer none) (array length=n_dtypes) (nullable): the data
 *   types an optimizer can keep its state slots in, in #MixprecDType
 *   order: float32 always, bfloat16 too for optimizers of revision 2 that
 *   declare it (mixprec_feature_get_abi_revision()); %NULL for other kinds
 *
 * Since: 1.1
 */
const MixprecDType *
mixprec_feature_get_state_dtypes (MixprecFeature *self,
                                  gsize          *n_dtypes)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);
  g_return_val_if_fail (n_dtypes != NULL, NULL);

  *n_dtypes = 0;
  if (self->kind != MIXPREC_FEATURE_KIND_OPTIMIZER)
    return NULL;
  for (guint d = 0; d < N_PLUGIN_DTYPES; d++)
    if (self->optimizer.state_dtype_mask & (1u << d))
      self->state_dtypes[(*n_dtypes)++] = (MixprecDType) d;
  return self->state_dtypes;
}

/**
 * mixprec_feature_get_state_format_mask:
 * @self: a #MixprecFeature
 *
 * Says in which representations an optimizer feature can keep its state
 * slots: bit `1 << f` for each format `f` of the plugin ABI's
 * `MixprecPluginStateFormat` (0 float32, 1 bfloat16, 2 float16 with
 * block scales, 3 bfloat16 with block scales, 4 float8 e4m3 with block
 * scales, 5 block-wise dynamic int8, 6 block-wise dynamic int4; the
 * formats are described in the "Optimizer states" reference page).
 * Optimizers registered before revision 3 of the optimizer ABI
 * (mixprec_feature_get_abi_revision()) know float32, and bfloat16 when
 * mixprec_feature_get_state_dtypes() lists it.
 *
 * Returns: the mask of state formats; float32 (bit 0) is always set for
 *   an optimizer; 0 for other kinds
 *
 * Since: 1.1
 */
guint
mixprec_feature_get_state_format_mask (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), 0);

  return self->kind == MIXPREC_FEATURE_KIND_OPTIMIZER ? self->optimizer.state_format_mask : 0;
}

/**
 * mixprec_feature_get_master_format_mask:
 * @self: a #MixprecFeature
 *
 * Says how an optimizer feature can keep the FP32 value of the parameters
 * it updates: bit `1 << f` for each format `f` of the plugin ABI's
 * `MixprecPluginMasterFormat` (0 a float32 master, 1 a bfloat16 working
 * copy with an int16 remainder that together hold the float32 value
 * exactly, 2 bfloat16 weights with a bfloat16 Kahan compensation).
 * Optimizers registered before revision 3 of the optimizer ABI know the
 * float32 master only.
 *
 * Returns: the mask of master formats; float32 (bit 0) is always set for
 *   an optimizer; 0 for other kinds
 *
 * Since: 1.1
 */
guint
mixprec_feature_get_master_format_mask (MixprecFeature *self)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), 0);

  return self->kind == MIXPREC_FEATURE_KIND_OPTIMIZER ? self->optimizer.master_format_mask : 0;
}

/**
 * mixprec_feature_probe_device:
 * @self: a #MixprecFeature of kind %MIXPREC_FEATURE_KIND_DEVICE
 * @n_devices: (out) (optional): how many devices the plugin can use
 * @error: return location for a #GError
 *
 * Asks a device plugin whether it can run here: a plugin loads on any
 * machine, but its device needs a driver and hardware. Cheap: it opens no
 * device.
 *
 * Returns: %TRUE when at least one device is usable; otherwise %FALSE with
 *   @error (%MIXPREC_PLUGIN_ERROR_CALL_FAILED) saying why, e.g. that no
 *   driver or no device was found
 *
 * Since: 1.0
 */
gboolean
mixprec_feature_probe_device (MixprecFeature *self,
                              gint           *n_devices,
                              GError        **error)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), FALSE);
  g_return_val_if_fail (self->kind == MIXPREC_FEATURE_KIND_DEVICE, FALSE);

  return _mixprec_device_probe (self, n_devices, error);
}

/**
 * mixprec_feature_get_comm_dtypes:
 * @self: a #MixprecFeature
 * @n_dtypes: (out): the number of data types returned
 *
 * Lists the data types a communication feature can reduce and move.
 *
 * Returns: (transfer none) (array length=n_dtypes) (nullable): the data
 *   types a communication feature's collectives accept, in #MixprecDType
 *   order; %NULL for other kinds
 *
 * Since: 1.0
 */
const MixprecDType *
mixprec_feature_get_comm_dtypes (MixprecFeature *self,
                                 gsize          *n_dtypes)
{
  g_return_val_if_fail (MIXPREC_IS_FEATURE (self), NULL);
  g_return_val_if_fail (n_dtypes != NULL, NULL);

  if (self->kind != MIXPREC_FEATURE_KIND_COMM)
    {
      *n_dtypes = 0;
      return NULL;
    }
  *n_dtypes = self->n_comm_dtypes;
  return self->comm_dtypes;
}
