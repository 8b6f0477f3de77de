/* inspect-plugins.c — `mixprec-inspect` and `mixprec-inspect NAME`: the
 * plugins and features the registry finds, the ones that failed and why,
 * and the details of one plugin or feature, in gst-inspect-1.0's manner. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "inspect-private.h"

#define LABEL_WIDTH 24

static const gchar *
kind_name (MixprecFeatureKind kind)
{
  g_autoptr(GEnumClass) klass = g_type_class_ref (MIXPREC_TYPE_FEATURE_KIND);
  const GEnumValue *value = g_enum_get_value (klass, kind);

  /* The nicks live in the class, which is never unloaded. */
  return value != NULL ? value->value_nick : "unknown";
}

static const gchar *
plural (guint n)
{
  return n == 1 ? "" : "s";
}

static gint
compare_plugins (gconstpointer a,
                 gconstpointer b)
{
  return strcmp (mixprec_plugin_get_name ((MixprecPlugin *) a),
                 mixprec_plugin_get_name ((MixprecPlugin *) b));
}

/* By name, then device, then the highest rank first. */
static gint
compare_features (gconstpointer a,
                  gconstpointer b)
{
  MixprecFeature *fa = (MixprecFeature *) a;
  MixprecFeature *fb = (MixprecFeature *) b;
  gint c = strcmp (mixprec_feature_get_name (fa), mixprec_feature_get_name (fb));

  if (c == 0)
    c = strcmp (mixprec_feature_get_device (fa), mixprec_feature_get_device (fb));
  if (c == 0)
    c = (mixprec_feature_get_rank (fa) < mixprec_feature_get_rank (fb)) -
        (mixprec_feature_get_rank (fa) > mixprec_feature_get_rank (fb));
  return c;
}

/* "1 device usable", or why none is, for a device feature. */
static gchar *
device_usability (MixprecFeature *feature)
{
  g_autoptr(GError) error = NULL;
  gint n = 0;

  if (!mixprec_feature_probe_device (feature, &n, &error))
    return g_strdup (error->message);
  return g_strdup_printf ("%d device%s usable", n, plural ((guint) n));
}

static void
print_feature_line (MixprecFeature *feature)
{
  const gchar *description = mixprec_feature_get_description (feature);
  g_autofree gchar *usable = NULL;

  if (mixprec_feature_get_kind (feature) == MIXPREC_FEATURE_KIND_DEVICE)
    usable = device_usability (feature);
  g_print ("%s:  %s (%s, %s, rank %u)%s%s%s%s%s\n",
           mixprec_feature_get_plugin_name (feature),
           mixprec_feature_get_name (feature),
           kind_name (mixprec_feature_get_kind (feature)),
           mixprec_feature_get_device (feature),
           mixprec_feature_get_rank (feature),
           description[0] != '\0' ? ": " : "", description,
           usable != NULL ? " [" : "", usable != NULL ? usable : "", usable != NULL ? "]" : "");
}

static void
print_failures (GList *failures)
{
  if (failures == NULL)
    return;
  g_print ("Failed to load: %u plugin%s\n", g_list_length (failures),
           plural (g_list_length (failures)));
  for (GList *l = failures; l != NULL; l = l->next)
    g_print ("  %s\n", mixprec_plugin_get_load_error (l->data)->message);
}

int
inspect_list (void)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  g_autolist(MixprecPlugin) plugins = mixprec_registry_get_plugins (registry);
  g_autolist(MixprecPlugin) failures = mixprec_registry_get_failures (registry);
  guint n_features = 0;

  plugins = g_list_sort (plugins, compare_plugins);
  for (GList *p = plugins; p != NULL; p = p->next)
    {
      g_autolist(MixprecFeature) features = mixprec_plugin_get_features (p->data);

      features = g_list_sort (features, compare_features);
      if (features == NULL)
        g_print ("%s:  no features\n", mixprec_plugin_get_name (p->data));
      for (GList *f = features; f != NULL; f = f->next)
        {
          print_feature_line (f->data);
          n_features++;
        }
    }

  g_print ("\nTotal count: %u plugin%s, %u feature%s\n",
           g_list_length (plugins), plural (g_list_length (plugins)),
           n_features, plural (n_features));
  print_failures (failures);

  /* The built-in plugin is always there; say how the search went when it
   * found no plugin file at all. */
  if (failures == NULL && (plugins == NULL ||
                           (plugins->next == NULL && mixprec_plugin_get_filename (plugins->data) == NULL)))
    {
      const gchar * const *path = mixprec_registry_get_search_path (registry);
      g_autofree gchar *joined = g_strjoinv (":", (gchar **) path);

      if (path[0] != NULL)
        g_print ("No plugin files were found in %s\n", joined);
      else
        g_print ("No plugin files were found: the plugin search path is empty\n");
      g_print ("Set MIXPREC_PLUGIN_PATH to a colon-separated list of directories to search.\n");
    }
  return 0;
}

/* ------------------------------------------------------------ details */

static void
print_field (const gchar *label,
             const gchar *value)
{
  g_print ("  %-*s %s\n", LABEL_WIDTH, label, value != NULL ? value : "(unknown)");
}

static void
print_plugin_fields (MixprecPlugin *plugin)
{
  g_autofree gchar *abi = g_strdup_printf ("%u.%u", mixprec_plugin_get_abi_major (plugin),
                                           mixprec_plugin_get_abi_minor (plugin));
  const GError *error = mixprec_plugin_get_load_error (plugin);

  print_field ("Name", mixprec_plugin_get_name (plugin));
  print_field ("Description", mixprec_plugin_get_description (plugin));
  print_field ("Filename", mixprec_plugin_get_filename (plugin) != NULL
                           ? mixprec_plugin_get_filename (plugin) : "(built into libmixprec)");
  print_field ("Version", mixprec_plugin_get_version (plugin));
  print_field ("License", mixprec_plugin_get_license (plugin));
  print_field ("Origin", mixprec_plugin_get_origin (plugin));
  print_field ("ABI", mixprec_plugin_get_abi_major (plugin) != 0 ? abi : NULL);
  print_field ("Status", error == NULL ? "loaded" : "failed to load");
  if (error != NULL)
    print_field ("Reason", error->message);
}

static int
print_plugin (MixprecPlugin *plugin)
{
  g_autolist(MixprecFeature) features = mixprec_plugin_get_features (plugin);

  g_print ("Plugin Details:\n");
  print_plugin_fields (plugin);
  if (!mixprec_plugin_is_loaded (plugin))
    return 1;

  features = g_list_sort (features, compare_features);
  g_print ("\nFeatures:\n");
  for (GList *f = features; f != NULL; f = f->next)
    {
      const gchar *description = mixprec_feature_get_description (f->data);

      g_autofree gchar *revision = mixprec_feature_get_kind (f->data) == MIXPREC_FEATURE_KIND_OPTIMIZER
        ? g_strdup_printf (", ABI: optimizer v%u", mixprec_feature_get_abi_revision (f->data)) : NULL;

      g_print ("  %s (%s, %s, rank %u%s)%s%s\n",
               mixprec_feature_get_name (f->data),
               kind_name (mixprec_feature_get_kind (f->data)),
               mixprec_feature_get_device (f->data),
               mixprec_feature_get_rank (f->data),
               revision != NULL ? revision : "",
               description[0] != '\0' ? ": " : "", description);
    }
  g_print ("\n  %u feature%s\n", g_list_length (features), plural (g_list_length (features)));
  return 0;
}

/* The state and master formats of plugin ABI 1.4 (MixprecPluginStateFormat,
 * MixprecPluginMasterFormat, in their order), as the reference page
 * "Optimizer states" names them. */
static const gchar *const state_format_words[] = {
  "float32", "bfloat16", "float16 block-scaled", "bfloat16 block-scaled",
  "float8 e4m3 block-scaled", "int8 block-wise dynamic", "int4 block-wise dynamic",
};
static const gchar *const master_format_words[] = {
  "float32", "remainder (bfloat16 + int16, exact)", "kahan (bfloat16 + bfloat16 compensation)",
};

/* The names of the bits of @mask, comma-separated; a bit past @n_words
 * as its number. */
static gchar *
mask_list (guint               mask,
           const gchar *const *words,
           gsize               n_words)
{
  GString *list = g_string_new (NULL);

  for (guint bit = 0; bit < 32; bit++)
    {
      if ((mask & (1u << bit)) == 0)
        continue;
      if (list->len > 0)
        g_string_append (list, ", ");
      if (bit < n_words)
        g_string_append (list, words[bit]);
      else
        g_string_append_printf (list, "format %u", bit);
    }
  return g_string_free (list, FALSE);
}

static gchar *
dtype_list (const MixprecDType *dtypes,
            gsize               n)
{
  g_autoptr(GString) out = g_string_new (NULL);

  for (gsize i = 0; i < n; i++)
    g_string_append_printf (out, "%s%s", i > 0 ? ", " : "", mixprec_dtype_get_name (dtypes[i]));
  return g_string_free (g_steal_pointer (&out), FALSE);
}

static void
print_hparam (MixprecFeature *feature,
              guint           i)
{
  const gchar *description = mixprec_feature_get_hparam_description (feature, i);
  gdouble def = mixprec_feature_get_hparam_default (feature, i);
  gdouble min = mixprec_feature_get_hparam_minimum (feature, i);
  gdouble max = mixprec_feature_get_hparam_maximum (feature, i);

  g_print ("  %-*s: %s\n", LABEL_WIDTH - 1, mixprec_feature_get_hparam_name (feature, i),
           description[0] != '\0' ? description : "(no description)");
  switch (mixprec_feature_get_hparam_type (feature, i))
    {
    case MIXPREC_HYPER_PARAM_TYPE_BOOL:
      g_print ("  %-*s  Boolean. Default: %s\n", LABEL_WIDTH - 1, "",
               def != 0.0 ? "true" : "false");
      break;
    case MIXPREC_HYPER_PARAM_TYPE_INT:
      g_print ("  %-*s  Integer. Range: %.17g - %.17g Default: %.17g\n", LABEL_WIDTH - 1, "",
               min, max, def);
      break;
    case MIXPREC_HYPER_PARAM_TYPE_DOUBLE:
    default:
      g_print ("  %-*s  Double. Range: %g - %g Default: %g\n", LABEL_WIDTH - 1, "",
               min, max, def);
      break;
    }
}

static void
print_feature (MixprecFeature *feature)
{
  MixprecPlugin *plugin = mixprec_feature_get_plugin (feature);
  g_autofree gchar *rank = g_strdup_printf ("%u", mixprec_feature_get_rank (feature));
  const gchar * const *states = mixprec_feature_get_state_names (feature);
  const MixprecDType *dtypes;
  gsize n_dtypes;
  guint n_hparams = mixprec_feature_get_n_hparams (feature);

  g_print ("Feature Details:\n");
  print_field ("Name", mixprec_feature_get_name (feature));
  print_field ("Kind", kind_name (mixprec_feature_get_kind (feature)));
  print_field ("Device", mixprec_feature_get_device (feature));
  print_field ("Rank", rank);
  if (mixprec_feature_get_kind (feature) == MIXPREC_FEATURE_KIND_OPTIMIZER)
    {
      /* Which vtable the plugin speaks: revision 1 runs through the
       * library's shim and keeps float32 state only. */
      g_autofree gchar *abi = g_strdup_printf ("optimizer v%u (MixprecOptimizerV%u)",
                                               mixprec_feature_get_abi_revision (feature),
                                               mixprec_feature_get_abi_revision (feature));

      print_field ("ABI", abi);
    }
  print_field ("Description", mixprec_feature_get_description (feature));

  if (plugin != NULL)
    {
      g_print ("\nPlugin Details:\n");
      print_plugin_fields (plugin);
    }

  if (mixprec_feature_get_kind (feature) == MIXPREC_FEATURE_KIND_COMM)
    {
      g_autofree gchar *list = NULL;

      dtypes = mixprec_feature_get_comm_dtypes (feature, &n_dtypes);
      list = dtype_list (dtypes, n_dtypes);
      g_print ("\nCollectives:\n");
      /* Revision 2 added the all-to-all (ZeRO++'s quantized gradients). */
      print_field ("Operations", mixprec_feature_get_abi_revision (feature) >= 2
                   ? "all_reduce (sum, max), reduce_scatter (sum, max), all_gather, broadcast, "
                     "barrier, all_to_all; each blocking or started"
                   : "all_reduce (sum, max), reduce_scatter (sum, max), all_gather, broadcast, "
                     "barrier; each blocking or started (comm ABI revision 1: no all_to_all)");
      print_field ("Data types", list);
      print_field ("Buffers", g_str_equal (mixprec_feature_get_device (feature), "cpu")
                              ? "host memory" : mixprec_feature_get_device (feature));
      return;
    }
  if (mixprec_feature_get_kind (feature) == MIXPREC_FEATURE_KIND_DEVICE)
    {
      g_autofree gchar *usable = device_usability (feature);

      g_print ("\nDevice:\n");
      print_field ("Usable here", usable);
      print_field ("Kernels", "convert (nearest-even, stochastic), accumulate, scale, "
                   "multi-tensor sum of squares; the same bits as the cpu kernels");
      return;
    }
  if (mixprec_feature_get_kind (feature) != MIXPREC_FEATURE_KIND_OPTIMIZER)
    return;

  g_print ("\nData types:\n");
  dtypes = mixprec_feature_get_grad_dtypes (feature, &n_dtypes);
  {
    g_autofree gchar *list = dtype_list (dtypes, n_dtypes);

    print_field ("Gradients", list);
  }
  dtypes = mixprec_feature_get_working_dtypes (feature, &n_dtypes);
  {
    g_autofree gchar *list = dtype_list (dtypes, n_dtypes);

    print_field ("Working copy", list);
  }
  {
    g_autofree gchar *list = mask_list (mixprec_feature_get_master_format_mask (feature),
                                        master_format_words, G_N_ELEMENTS (master_format_words));

    print_field ("Master weights", list);
  }
  dtypes = mixprec_feature_get_state_dtypes (feature, &n_dtypes);
  {
    g_autofree gchar *list = dtype_list (dtypes, n_dtypes);

    print_field ("State", list);
  }
  {
    g_autofree gchar *list = mask_list (mixprec_feature_get_state_format_mask (feature),
                                        state_format_words, G_N_ELEMENTS (state_format_words));

    print_field ("State formats", list);
  }

  g_print ("\nState (%u value%s per element):\n",
           mixprec_feature_get_n_state_slots (feature),
           plural (mixprec_feature_get_n_state_slots (feature)));
  if (states[0] == NULL)
    g_print ("  none\n");
  for (guint i = 0; states[i] != NULL; i++)
    g_print ("  %s\n", states[i]);

  g_print ("\nHyper-parameters (%u):\n", n_hparams);
  if (n_hparams == 0)
    g_print ("  none\n");
  for (guint i = 0; i < n_hparams; i++)
    print_hparam (feature, i);
}

static gint
compare_rank_descending (gconstpointer a,
                         gconstpointer b)
{
  guint ra = mixprec_feature_get_rank ((MixprecFeature *) a);
  guint rb = mixprec_feature_get_rank ((MixprecFeature *) b);

  return (ra < rb) - (ra > rb);
}

/* A path to one plugin file: load just that file, as a plugin author would
 * check it. Anything but a shared object (an ELF file) is refused before
 * it gets near dlopen(). */
static int
inspect_file (const gchar *filename)
{
  const gchar *paths[] = { filename, NULL };
  g_autoptr(MixprecRegistry) registry = NULL;
  g_autolist(MixprecPlugin) plugins = NULL;
  g_autolist(MixprecPlugin) failures = NULL;
  gchar magic[4] = { 0 };
  FILE *f;

  if (!g_file_test (filename, G_FILE_TEST_IS_REGULAR))
    {
      g_printerr ("%s: not a plugin file: %s\n", filename,
                  g_file_test (filename, G_FILE_TEST_EXISTS) ? "not a regular file"
                                                              : "no such file");
      return 1;
    }
  f = fopen (filename, "rb");
  if (f == NULL || fread (magic, 1, sizeof magic, f) != sizeof magic ||
      memcmp (magic, "\177ELF", 4) != 0)
    {
      if (f != NULL)
        fclose (f);
      g_printerr ("%s: not a plugin file: a plugin is a shared object (an ELF file such as "
                  "mixprec-optim-adamw.so)\n", filename);
      return 1;
    }
  fclose (f);
  registry = mixprec_registry_new_for_paths (paths, FALSE);
  plugins = mixprec_registry_get_plugins (registry);
  failures = mixprec_registry_get_failures (registry);
  if (plugins != NULL)
    return print_plugin (plugins->data);
  if (failures != NULL)
    return print_plugin (failures->data);
  g_printerr ("%s: not a plugin file\n", filename);
  return 1;
}

/* Optimal string alignment distance, case-blind: a swap of two adjacent
 * letters counts as one edit. */
static guint
edit_distance (const gchar *a,
               const gchar *b)
{
  gsize n = strlen (a), m = strlen (b);
  g_autofree guint *d = NULL;

  if (n > 64 || m > 64)
    return G_MAXUINT;
  d = g_new (guint, (n + 1) * (m + 1));
#define D(i, j) d[(i) * (m + 1) + (j)]
  for (gsize i = 0; i <= n; i++)
    D (i, 0) = (guint) i;
  for (gsize j = 0; j <= m; j++)
    D (0, j) = (guint) j;
  for (gsize i = 1; i <= n; i++)
    for (gsize j = 1; j <= m; j++)
      {
        guint cost = g_ascii_tolower (a[i - 1]) != g_ascii_tolower (b[j - 1]);
        guint best = MIN (MIN (D (i - 1, j) + 1, D (i, j - 1) + 1), D (i - 1, j - 1) + cost);

        if (i > 1 && j > 1 && g_ascii_tolower (a[i - 1]) == g_ascii_tolower (b[j - 2]) &&
            g_ascii_tolower (a[i - 2]) == g_ascii_tolower (b[j - 1]))
          best = MIN (best, D (i - 2, j - 2) + 1);
        D (i, j) = best;
      }
  return D (n, m);
#undef D
}

static void
consider (const gchar  *name,
          const gchar  *candidate,
          const gchar **best,
          guint        *best_distance)
{
  guint distance = edit_distance (name, candidate);

  if (distance < *best_distance)
    {
      *best_distance = distance;
      *best = candidate;
    }
}

/* The feature or plugin name @name most likely misspells: at most a third
 * of its length in edits (1 to 3), as the config's "did you mean". The
 * result points into @features' or the registry's strings. */
static const gchar *
suggest_name (const gchar *name,
              GList       *features,
              GList       *failures)
{
  MixprecRegistry *registry = mixprec_registry_get_default ();
  g_autolist(MixprecPlugin) plugins = mixprec_registry_get_plugins (registry);
  guint limit = CLAMP ((guint) strlen (name) / 3, 1, 3);
  guint best_distance = G_MAXUINT;
  const gchar *best = NULL;

  for (GList *l = features; l != NULL; l = l->next)
    consider (name, mixprec_feature_get_name (l->data), &best, &best_distance);
  /* Plugin names live as long as the default registry, which is never
   * freed: safe to return after the list goes. */
  for (GList *l = plugins; l != NULL; l = l->next)
    consider (name, mixprec_plugin_get_name (l->data), &best, &best_distance);
  for (GList *l = failures; l != NULL; l = l->next)
    consider (name, mixprec_plugin_get_name (l->data), &best, &best_distance);
  return best_distance <= limit ? best : NULL;
}

int
inspect_name (const gchar *name)
{
  MixprecRegistry *registry;
  g_autolist(MixprecFeature) all = NULL;
  g_autoptr(GList) matches = NULL;
  g_autolist(MixprecPlugin) failures = NULL;
  g_autoptr(MixprecPlugin) plugin = NULL;
  const gchar *suggestion;

  if (strchr (name, G_DIR_SEPARATOR) != NULL ||
      (g_str_has_suffix (name, ".so") && g_file_test (name, G_FILE_TEST_EXISTS)))
    return inspect_file (name);

  registry = mixprec_registry_get_default ();
  all = mixprec_registry_get_features (registry);
  for (GList *l = all; l != NULL; l = l->next)
    if (g_str_equal (mixprec_feature_get_name (l->data), name))
      matches = g_list_prepend (matches, l->data);
  if (matches != NULL)
    {
      matches = g_list_sort (g_list_reverse (matches), compare_rank_descending);
      for (GList *l = matches; l != NULL; l = l->next)
        {
          if (l != matches)
            g_print ("\n");
          print_feature (l->data);
        }
      return 0;
    }

  plugin = mixprec_registry_find_plugin (registry, name, NULL);
  if (plugin != NULL)
    return print_plugin (plugin);

  failures = mixprec_registry_get_failures (registry);
  for (GList *l = failures; l != NULL; l = l->next)
    if (g_str_equal (mixprec_plugin_get_name (l->data), name))
      return print_plugin (l->data);

  suggestion = suggest_name (name, all, failures);
  g_printerr ("No such plugin or feature '%s'%s%s%s\n", name,
              suggestion != NULL ? "; did you mean '" : "", suggestion != NULL ? suggestion : "",
              suggestion != NULL ? "'?" : "");
  return 1;
}
