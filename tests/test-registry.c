/* test-registry.c — plugin discovery and loading: the test plugins of
 * tests/plugins/ (three valid, the others each broken in one way), search
 * order, duplicates, rank selection, look-up errors, the checks on
 * optimizer and communicator vtables, the built-in plugin, and the
 * optimizer plugins of the build tree. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "mixprec-registry-private.h"

static gchar *
test_plugins_dir (void)
{
  return g_test_build_filename (G_TEST_BUILT, "plugins", NULL);
}

static gchar *
test_plugin_file (const gchar *name)
{
  g_autofree gchar *base = g_strdup_printf ("mixprec-%s.so", name);

  return g_test_build_filename (G_TEST_BUILT, "plugins", ".libs", base, NULL);
}

static MixprecRegistry *
test_plugins_registry (void)
{
  g_autofree gchar *dir = test_plugins_dir ();
  const gchar *paths[] = { dir, NULL };

  return mixprec_registry_new_for_paths (paths, FALSE);
}

/* Removes a temporary tree without following links out of it. */
static void
remove_tree (const gchar *path)
{
  GStatBuf st;

  if (g_lstat (path, &st) != 0)
    return;
  if (S_ISDIR (st.st_mode))
    {
      g_autoptr(GDir) dir = g_dir_open (path, 0, NULL);
      const gchar *entry;

      while (dir != NULL && (entry = g_dir_read_name (dir)) != NULL)
        {
          g_autofree gchar *child = g_build_filename (path, entry, NULL);

          remove_tree (child);
        }
      g_assert_no_errno (g_rmdir (path));
    }
  else
    g_assert_no_errno (g_unlink (path));
}

static gchar *
make_temp_dir (void)
{
  g_autoptr(GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("mixprec-registry-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

static void
link_plugin (const gchar *target_name,
             const gchar *dir,
             const gchar *link_base)
{
  g_autofree gchar *target = test_plugin_file (target_name);
  g_autofree gchar *link = g_build_filename (dir, link_base, NULL);

  g_assert_true (g_file_test (target, G_FILE_TEST_IS_REGULAR));
  g_assert_no_errno (symlink (target, link));
}

static MixprecPlugin *
find_in (GList       *plugins,
         const gchar *name)
{
  for (GList *l = plugins; l != NULL; l = l->next)
    if (g_str_equal (mixprec_plugin_get_name (l->data), name))
      return l->data;
  return NULL;
}

static MixprecFeature *
plugin_feature (MixprecPlugin *plugin,
                const gchar   *name)
{
  g_autolist(MixprecFeature) features = mixprec_plugin_get_features (plugin);

  for (GList *l = features; l != NULL; l = l->next)
    if (g_str_equal (mixprec_feature_get_name (l->data), name))
      return g_object_ref (l->data);
  return NULL;
}

/* ------------------------------------------------------------ file names */

static void
test_registry_plugin_name (void)
{
  const struct {
    const gchar *filename;
    const gchar *name;
  } cases[] = {
    { "mixprec-optim-adamw.so", "optim-adamw" },
    { "/usr/lib/mixprec-1.0/mixprec-comm-ucx.so", "comm-ucx" },
    { "mixprec-a.so", "a" },
    { "mixprec-.so", NULL },
    { "mixprec.so", NULL },
    { "libmixprec.so", NULL },
    { "mixprec-optim-adamw.so.0", NULL },
    { "mixprec-optim-adamw.la", NULL },
    { "/mixprec-dir.so/libfoo.so", NULL },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree gchar *name = _mixprec_plugin_name_from_filename (cases[i].filename);

      g_assert_cmpstr (name, ==, cases[i].name);
    }
}

/* ------------------------------------------------------------ the valid plugin */

static void
test_registry_good_plugin (void)
{
  g_autoptr(MixprecRegistry) registry = test_plugins_registry ();
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecPlugin) plugin = NULL;
  g_autoptr(MixprecFeature) feature = NULL;
  g_autofree gchar *expected_file = test_plugin_file ("test-good");
  g_autolist(MixprecFeature) features = NULL;
  const struct {
    const gchar *name;
    MixprecHyperParamType type;
    gdouble def, min, max;
  } hparams[] = {
    { "lr", MIXPREC_HYPER_PARAM_TYPE_DOUBLE, 1e-3, 0.0, INFINITY },
    { "momentum", MIXPREC_HYPER_PARAM_TYPE_DOUBLE, 0.9, 0.0, 1.0 },
    { "nesterov", MIXPREC_HYPER_PARAM_TYPE_BOOL, 0.0, 0.0, 1.0 },
    { "warmup", MIXPREC_HYPER_PARAM_TYPE_INT, 10.0, 0.0, 1000.0 },
  };
  const MixprecDType grad_dtypes[] = {
    MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16,
  };
  const MixprecDType *dtypes;
  gsize n_dtypes;

  plugin = mixprec_registry_find_plugin (registry, "test-good", &error);
  g_assert_no_error (error);
  g_assert_true (mixprec_plugin_is_loaded (plugin));
  g_assert_null (mixprec_plugin_get_load_error (plugin));
  g_assert_cmpstr (mixprec_plugin_get_name (plugin), ==, "test-good");
  g_assert_cmpstr (mixprec_plugin_get_filename (plugin), ==, expected_file);
  g_assert_cmpstr (mixprec_plugin_get_description (plugin), ==, "a valid plugin for the registry tests");
  g_assert_cmpstr (mixprec_plugin_get_version (plugin), ==, "1.2.3");
  g_assert_cmpstr (mixprec_plugin_get_license (plugin), ==, "LGPL-2.1-or-later");
  g_assert_cmpstr (mixprec_plugin_get_origin (plugin), ==, "libmixprec tests");
  g_assert_cmpuint (mixprec_plugin_get_abi_major (plugin), ==, 1);
  g_assert_cmpuint (mixprec_plugin_get_abi_minor (plugin), ==, MIXPREC_PLUGIN_ABI_VERSION_MINOR);

  features = mixprec_plugin_get_features (plugin);
  g_assert_cmpuint (g_list_length (features), ==, 2);
  g_assert_cmpstr (mixprec_feature_get_name (features->data), ==, "testopt");
  g_assert_cmpstr (mixprec_feature_get_name (features->next->data), ==, "otheropt");

  feature = g_object_ref (features->data);
  g_assert_cmpint (mixprec_feature_get_kind (feature), ==, MIXPREC_FEATURE_KIND_OPTIMIZER);
  g_assert_cmpstr (mixprec_feature_get_device (feature), ==, "cpu");
  g_assert_cmpuint (mixprec_feature_get_rank (feature), ==, 100);
  g_assert_cmpstr (mixprec_feature_get_description (feature), ==, "momentum SGD for the registry tests");
  g_assert_cmpstr (mixprec_feature_get_plugin_name (feature), ==, "test-good");
  g_assert_true (mixprec_feature_get_plugin (feature) == plugin);

  g_assert_cmpuint (mixprec_feature_get_n_hparams (feature), ==, G_N_ELEMENTS (hparams));
  for (guint i = 0; i < G_N_ELEMENTS (hparams); i++)
    {
      g_assert_cmpstr (mixprec_feature_get_hparam_name (feature, i), ==, hparams[i].name);
      g_assert_cmpint (mixprec_feature_get_hparam_type (feature, i), ==, hparams[i].type);
      g_assert_cmpfloat (mixprec_feature_get_hparam_default (feature, i), ==, hparams[i].def);
      g_assert_cmpfloat (mixprec_feature_get_hparam_minimum (feature, i), ==, hparams[i].min);
      g_assert_cmpfloat (mixprec_feature_get_hparam_maximum (feature, i), ==, hparams[i].max);
      g_assert_cmpint (mixprec_feature_find_hparam (feature, hparams[i].name), ==, (gint) i);
    }
  g_assert_cmpstr (mixprec_feature_get_hparam_description (feature, 1), ==, "weight of the previous update");
  g_assert_cmpint (mixprec_feature_find_hparam (feature, "betas"), ==, -1);

  g_assert_cmpuint (mixprec_feature_get_n_state_slots (feature), ==, 1);
  g_assert_cmpstrv (mixprec_feature_get_state_names (feature),
                    ((const gchar * const[]) { "momentum_buffer", NULL }));

  dtypes = mixprec_feature_get_grad_dtypes (feature, &n_dtypes);
  g_assert_cmpmem (dtypes, n_dtypes * sizeof *dtypes, grad_dtypes, sizeof grad_dtypes);
  dtypes = mixprec_feature_get_working_dtypes (feature, &n_dtypes);
  g_assert_cmpuint (n_dtypes, ==, 3);

  /* The feature outlives the registry; its plugin pointer does not. */
  g_clear_object (&plugin);
  g_clear_object (&registry);
  g_list_free_full (g_steal_pointer (&features), g_object_unref);
  g_assert_null (mixprec_feature_get_plugin (feature));
  g_assert_cmpstr (mixprec_feature_get_plugin_name (feature), ==, "test-good");
  g_assert_cmpstr (mixprec_feature_get_hparam_name (feature, 3), ==, "warmup");
}

/* ------------------------------------------------------------ broken plugins */

typedef struct
{
  const gchar *plugin;
  gint code;
  const gchar *reason[2];
} ExpectedFailure;

static const ExpectedFailure expected_failures[] = {
  { "test-abi-major", MIXPREC_PLUGIN_ERROR_ABI_MISMATCH,
    { "built for plugin ABI 2.0", "this libmixprec supports 1.0 to 1.7" } },
  { "test-abi-minor", MIXPREC_PLUGIN_ERROR_ABI_MISMATCH,
    { "built for plugin ABI 1.8", "this libmixprec supports 1.0 to 1.7" } },
  { "test-bad-comm", MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
    { "registered an invalid feature", "comm 'badcomm' (cpu): its wait function is NULL" } },
  { "test-bad-feature", MIXPREC_PLUGIN_ERROR_BAD_FEATURE,
    { "registered an invalid feature", "optimizer 'badopt' (cpu): its step function is NULL" } },
  { "test-init-fails", MIXPREC_PLUGIN_ERROR_INIT_FAILED,
    { "failed to initialise", "the test accelerator is not present (runtime error, status 3)" } },
  { "test-name-mismatch", MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
    { "calls itself 'test-renamed'", "file name says 'test-name-mismatch'" } },
  { "test-no-entry", MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
    { "not a libmixprec plugin", "mixprec_plugin_test_no_entry_get_desc()" } },
  { "test-no-init", MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
    { "has no init function", NULL } },
  { "test-null-desc", MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION,
    { "mixprec_plugin_test_null_desc_get_desc() returned no plugin description", NULL } },
  { "test-unrelated", MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT,
    { "not a libmixprec plugin", "mixprec_plugin_test_unrelated_get_desc()" } },
};

static void
test_registry_broken_plugins (void)
{
  g_autoptr(MixprecRegistry) registry = test_plugins_registry ();
  g_autolist(MixprecPlugin) plugins = mixprec_registry_get_plugins (registry);
  g_autolist(MixprecPlugin) failures = mixprec_registry_get_failures (registry);
  g_autolist(MixprecFeature) features = mixprec_registry_get_features (registry);

  g_assert_cmpuint (g_list_length (plugins), ==, 3);
  g_assert_nonnull (find_in (plugins, "test-good"));
  g_assert_nonnull (find_in (plugins, "test-rank"));
  g_assert_nonnull (find_in (plugins, "test-comm"));
  g_assert_cmpuint (g_list_length (failures), ==, G_N_ELEMENTS (expected_failures));

  for (gsize i = 0; i < G_N_ELEMENTS (expected_failures); i++)
    {
      const ExpectedFailure *e = &expected_failures[i];
      MixprecPlugin *plugin = find_in (failures, e->plugin);
      g_autofree gchar *file = test_plugin_file (e->plugin);
      g_autofree gchar *prefix = g_strconcat (file, ": ", NULL);
      g_autolist(MixprecFeature) own = NULL;
      const GError *error;

      g_test_message ("failure of %s", e->plugin);
      g_assert_nonnull (plugin);
      g_assert_false (mixprec_plugin_is_loaded (plugin));
      g_assert_cmpstr (mixprec_plugin_get_filename (plugin), ==, file);
      error = mixprec_plugin_get_load_error (plugin);
      g_assert_error ((GError *) error, MIXPREC_PLUGIN_ERROR, e->code);
      g_assert_true (g_str_has_prefix (error->message, prefix));
      for (gsize r = 0; r < G_N_ELEMENTS (e->reason) && e->reason[r] != NULL; r++)
        g_assert_nonnull (strstr (error->message, e->reason[r]));
      own = mixprec_plugin_get_features (plugin);
      g_assert_null (own);
    }

  /* What the failing plugins registered before failing is not used. */
  g_assert_cmpuint (g_list_length (features), ==, 6);
  for (GList *l = features; l != NULL; l = l->next)
    {
      g_assert_cmpstr (mixprec_feature_get_name (l->data), !=, "failopt");
      g_assert_cmpstr (mixprec_feature_get_name (l->data), !=, "badopt");
      g_assert_cmpstr (mixprec_feature_get_name (l->data), !=, "badcomm");
    }

  /* Only the version fields of a mismatched description are read. */
  g_assert_cmpuint (mixprec_plugin_get_abi_major (find_in (failures, "test-abi-major")), ==, 2);
  g_assert_null (mixprec_plugin_get_description (find_in (failures, "test-abi-major")));
}

static void
test_registry_not_modules (void)
{
  g_autofree gchar *dir = make_temp_dir ();
  g_autofree gchar *garbage = g_build_filename (dir, "mixprec-garbage.so", NULL);
  g_autofree gchar *empty = g_build_filename (dir, "mixprec-empty.so", NULL);
  g_autofree gchar *other = g_build_filename (dir, "notes.txt", NULL);
  g_autofree gchar *odd = g_build_filename (dir, "mixprec-odd.name.so", NULL);
  g_autofree gchar *named = g_build_filename (dir, "libfoo.so", NULL);
  g_autoptr(GError) error = NULL;
  const gchar *paths[] = { dir, named, NULL };
  g_autoptr(MixprecRegistry) registry = NULL;
  g_autolist(MixprecPlugin) failures = NULL;
  const struct {
    const gchar *file;
    const gchar *name;
    gint code;
    const gchar *reason;
  } expected[] = {
    { empty, "empty", MIXPREC_PLUGIN_ERROR_OPEN, "not a loadable module: " },
    { garbage, "garbage", MIXPREC_PLUGIN_ERROR_OPEN, "not a loadable module: " },
    { odd, "odd.name", MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT, "'odd.name' is not a plugin name" },
    { named, "libfoo.so", MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT, "not a plugin file name" },
  };
  GList *l;

  /* Longer than an ELF header, so the loader reads it and rejects it. */
  g_file_set_contents (garbage, "This is text, not an ELF shared object. A file named like a "
                       "plugin must still be reported, not loaded.\n", -1, &error);
  g_assert_no_error (error);
  g_file_set_contents (empty, "", 0, &error);
  g_assert_no_error (error);
  g_file_set_contents (other, "not a candidate: wrong name\n", -1, &error);
  g_assert_no_error (error);
  g_file_set_contents (odd, "", 0, &error);
  g_assert_no_error (error);
  g_file_set_contents (named, "", 0, &error);
  g_assert_no_error (error);

  registry = mixprec_registry_new_for_paths (paths, FALSE);
  failures = mixprec_registry_get_failures (registry);
  g_assert_cmpuint (g_list_length (failures), ==, G_N_ELEMENTS (expected));
  /* In search order: the directory's entries sorted by name, then the file. */
  l = failures;
  for (gsize i = 0; i < G_N_ELEMENTS (expected); i++, l = l->next)
    {
      const GError *e = mixprec_plugin_get_load_error (l->data);
      g_autofree gchar *prefix = g_strconcat (expected[i].file, ": ", NULL);

      g_assert_cmpstr (mixprec_plugin_get_filename (l->data), ==, expected[i].file);
      g_assert_cmpstr (mixprec_plugin_get_name (l->data), ==, expected[i].name);
      g_assert_error ((GError *) e, MIXPREC_PLUGIN_ERROR, expected[i].code);
      g_assert_true (g_str_has_prefix (e->message, prefix));
      g_assert_nonnull (strstr (e->message, expected[i].reason));
      /* The dynamic loader's reason follows, without the file name again. */
      if (expected[i].code == MIXPREC_PLUGIN_ERROR_OPEN)
        g_assert_null (strstr (e->message + strlen (prefix), expected[i].file));
    }
  g_assert_null (mixprec_registry_get_plugins (registry));

  g_clear_object (&registry);
  remove_tree (dir);
}

/* ------------------------------------------------------------ search order */

static void
test_registry_duplicates (void)
{
  g_autofree gchar *first = make_temp_dir ();
  g_autofree gchar *second = make_temp_dir ();
  g_autofree gchar *good_in_first = g_build_filename (first, "mixprec-test-good.so", NULL);
  g_autofree gchar *fake_in_second = g_build_filename (second, "mixprec-test-good.so", NULL);

  /* The same plugin name twice: the real plugin, and an unrelated .so that
   * claims its name (and so has no entry point). */
  link_plugin ("test-good", first, "mixprec-test-good.so");
  link_plugin ("test-unrelated", second, "mixprec-test-good.so");

  {
    const gchar *paths[] = { first, second, NULL };
    g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (paths, FALSE);
    g_autolist(MixprecPlugin) plugins = mixprec_registry_get_plugins (registry);

    g_assert_cmpuint (g_list_length (plugins), ==, 1);
    g_assert_cmpstr (mixprec_plugin_get_filename (plugins->data), ==, good_in_first);
    /* The later file is ignored, not reported. */
    g_assert_null (mixprec_registry_get_failures (registry));
  }
  {
    const gchar *paths[] = { second, first, NULL };
    g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (paths, FALSE);
    g_autolist(MixprecPlugin) plugins = mixprec_registry_get_plugins (registry);
    g_autolist(MixprecPlugin) failures = mixprec_registry_get_failures (registry);

    /* A broken file found first does not hide the working one: it is
     * reported, and the name goes to the file that loads. */
    g_assert_cmpuint (g_list_length (plugins), ==, 1);
    g_assert_cmpstr (mixprec_plugin_get_filename (plugins->data), ==, good_in_first);
    g_assert_cmpuint (g_list_length (failures), ==, 1);
    g_assert_cmpstr (mixprec_plugin_get_filename (failures->data), ==, fake_in_second);
    g_assert_error ((GError *) mixprec_plugin_get_load_error (failures->data),
                    MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NO_ENTRY_POINT);
  }

  remove_tree (first);
  remove_tree (second);
}

/* One level deep: a plugin in a subfolder is not loaded, whatever the
 * subfolder (a link back to the top included), except in the top
 * directory's .libs, libtool's folder, and not below that. */
static void
test_registry_one_level (void)
{
  g_autofree gchar *dir = make_temp_dir ();
  g_autofree gchar *sub = g_build_filename (dir, "sub", NULL);
  g_autofree gchar *loop = g_build_filename (sub, "loop", NULL);
  g_autofree gchar *libs = g_build_filename (dir, ".libs", NULL);
  g_autofree gchar *libs_libs = g_build_filename (libs, ".libs", NULL);
  g_autofree gchar *expected = g_build_filename (libs, "mixprec-test-rank.so", NULL);
  const gchar *paths[] = { dir, NULL };
  g_autoptr(MixprecRegistry) registry = NULL;
  g_autolist(MixprecPlugin) plugins = NULL;

  g_assert_no_errno (g_mkdir_with_parents (sub, 0700));
  g_assert_no_errno (g_mkdir_with_parents (libs_libs, 0700));
  link_plugin ("test-good", sub, "mixprec-test-good.so");
  link_plugin ("test-rank", libs, "mixprec-test-rank.so");
  link_plugin ("test-comm", libs_libs, "mixprec-test-comm.so");
  /* sub/loop -> the top directory: it is not followed either. */
  g_assert_no_errno (symlink (dir, loop));

  registry = mixprec_registry_new_for_paths (paths, FALSE);
  plugins = mixprec_registry_get_plugins (registry);
  g_assert_cmpuint (g_list_length (plugins), ==, 1);
  g_assert_cmpstr (mixprec_plugin_get_filename (plugins->data), ==, expected);
  g_assert_null (mixprec_registry_get_failures (registry));

  g_clear_object (&registry);
  remove_tree (dir);
}

/* A file or directory others may write is never opened, and does not
 * hide a trusted plugin of the same name. */
static void
test_registry_untrusted (void)
{
  g_autofree gchar *first = make_temp_dir ();
  g_autofree gchar *second = make_temp_dir ();
  g_autofree gchar *open_dir = make_temp_dir ();
  g_autofree gchar *copy = g_build_filename (first, "mixprec-test-good.so", NULL);
  g_autofree gchar *source = test_plugin_file ("test-good");
  g_autofree gchar *expected = g_build_filename (second, "mixprec-test-good.so", NULL);
  g_autofree gchar *contents = NULL;
  gsize length;
  g_autoptr(GError) error = NULL;

  g_file_get_contents (source, &contents, &length, &error);
  g_assert_no_error (error);
  g_file_set_contents (copy, contents, (gssize) length, &error);
  g_assert_no_error (error);
  link_plugin ("test-good", second, "mixprec-test-good.so");
  link_plugin ("test-rank", open_dir, "mixprec-test-rank.so");

  {
    const gchar *paths[] = { first, second, NULL };
    g_autoptr(MixprecRegistry) registry = NULL;
    g_autolist(MixprecPlugin) plugins = NULL;
    g_autolist(MixprecPlugin) failures = NULL;
    const GError *e;

    g_assert_no_errno (g_chmod (copy, 0775));
    g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING,
                           "*mixprec-test-good.so: plugin file not opened: it is writable by its group (mode 0775)*");
    registry = mixprec_registry_new_for_paths (paths, FALSE);
    g_test_assert_expected_messages ();
    plugins = mixprec_registry_get_plugins (registry);
    failures = mixprec_registry_get_failures (registry);
    g_assert_cmpuint (g_list_length (plugins), ==, 1);
    g_assert_cmpstr (mixprec_plugin_get_filename (plugins->data), ==, expected);
    g_assert_cmpuint (g_list_length (failures), ==, 1);
    e = mixprec_plugin_get_load_error (failures->data);
    g_assert_error ((GError *) e, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_OPEN);
    g_assert_true (g_str_has_prefix (e->message, copy));
  }
  {
    const gchar *paths[] = { first, NULL };
    g_autoptr(MixprecRegistry) registry = NULL;

    g_assert_no_errno (g_chmod (copy, 0757));
    g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING, "*writable by others (mode 0757)*");
    registry = mixprec_registry_new_for_paths (paths, FALSE);
    g_test_assert_expected_messages ();
    g_assert_null (mixprec_registry_get_plugins (registry));
  }
  {
    const gchar *paths[] = { open_dir, NULL };
    g_autoptr(MixprecRegistry) registry = NULL;
    g_autofree gchar *pattern = g_strdup_printf ("%s: plugin directory skipped: it is writable "
                                                 "by others (mode 0707)*", open_dir);

    g_assert_no_errno (g_chmod (open_dir, 0707));
    g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING, pattern);
    registry = mixprec_registry_new_for_paths (paths, FALSE);
    g_test_assert_expected_messages ();
    g_assert_null (mixprec_registry_get_plugins (registry));
    g_assert_null (mixprec_registry_get_failures (registry));
    g_assert_no_errno (g_chmod (open_dir, 0700));
  }
  /* A file of another user: only root can make one. */
  if (geteuid () == 0)
    {
      const gchar *paths[] = { first, NULL };
      g_autoptr(MixprecRegistry) registry = NULL;

      g_assert_no_errno (g_chmod (copy, 0755));
      g_assert_no_errno (chown (copy, 65534, 65534));
      g_test_expect_message ("Mixprec", G_LOG_LEVEL_WARNING,
                             "*plugin file not opened: it is owned by uid 65534, neither root "
                             "nor the user running this program (uid 0)*");
      registry = mixprec_registry_new_for_paths (paths, FALSE);
      g_test_assert_expected_messages ();
      g_assert_null (mixprec_registry_get_plugins (registry));
    }
  else
    g_test_message ("not root: the case of a file owned by another user is not tested");

  remove_tree (first);
  remove_tree (second);
  remove_tree (open_dir);
}

/* The descriptions of tests/desc-plugins: each plugin broken, none read
 * in place. */
static void
test_registry_bad_descriptions (void)
{
  g_autofree gchar *dir = g_test_build_filename (G_TEST_BUILT, "desc-plugins", NULL);
  const gchar *paths[] = { dir, NULL };
  g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (paths, FALSE);
  g_autolist(MixprecPlugin) failures = mixprec_registry_get_failures (registry);
  const struct {
    const gchar *name;
    const gchar *reason;
  } expected[] = {
    { "test-bad-init", "the init function of the plugin description points to 0x40, outside the plugin" },
    { "test-bad-name", "the name of the plugin description is not printable text (character U+001B at byte 8)" },
    { "test-bad-ptr", "mixprec_plugin_test_bad_ptr_get_desc() returned 0x1, which is not readable memory of the plugin" },
    { "test-bad-string", "the description text of the plugin description points to 0x10, outside the plugin's own memory" },
    { "test-heap-desc", "which is not readable memory of the plugin (a stray, heap or stack pointer?)" },
    { "test-short-desc", "is cut short: a description of plugin ABI 1." },
    { "test-stack-desc", "which is not readable memory of the plugin (a stray, heap or stack pointer?)" },
  };
  GList *l = failures;

  g_assert_null (mixprec_registry_get_plugins (registry));
  g_assert_cmpuint (g_list_length (failures), ==, G_N_ELEMENTS (expected));
  for (gsize i = 0; i < G_N_ELEMENTS (expected); i++, l = l->next)
    {
      const GError *e = mixprec_plugin_get_load_error (l->data);

      g_test_message ("%s: %s", expected[i].name, e->message);
      g_assert_cmpstr (mixprec_plugin_get_name (l->data), ==, expected[i].name);
      g_assert_error ((GError *) e, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_DESCRIPTION);
      g_assert_nonnull (strstr (e->message, expected[i].reason));
      /* Nothing of a refused description is kept. */
      g_assert_null (mixprec_plugin_get_description (l->data));
    }
}

/* Entries of the environment variables must be absolute. */
static void
test_registry_relative_entries (void)
{
  if (g_test_subprocess ())
    {
      /* Warnings are fatal in tests; this one must reach stderr. */
      g_log_set_always_fatal (G_LOG_FATAL_MASK);
      g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", "plugins:/nonexistent/mixprec", TRUE);
      {
        g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (NULL, TRUE);

        g_assert_cmpstrv (mixprec_registry_get_search_path (registry),
                          ((const gchar * const[]) { "/nonexistent/mixprec", NULL }));
      }
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*MIXPREC_PLUGIN_SYSTEM_PATH: relative entry 'plugins' ignored: "
                             "plugin directories must be absolute paths*");
}

static void
test_registry_system_path (void)
{
  g_autofree gchar *dir = make_temp_dir ();
  g_autofree gchar *saved = g_strdup (g_getenv ("MIXPREC_PLUGIN_SYSTEM_PATH"));
  g_autofree gchar *list = g_strconcat (dir, ":/nonexistent/mixprec", NULL);
  const gchar *paths[] = { "/nonexistent/user", NULL };

  link_plugin ("test-good", dir, "mixprec-test-good.so");

  g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", list, TRUE);
  {
    g_autoptr(MixprecRegistry) with = mixprec_registry_new_for_paths (paths, TRUE);
    g_autoptr(MixprecRegistry) without = mixprec_registry_new_for_paths (paths, FALSE);
    g_autoptr(MixprecPlugin) plugin = mixprec_registry_find_plugin (with, "test-good", NULL);

    g_assert_cmpstrv (mixprec_registry_get_search_path (with),
                      ((const gchar * const[]) { "/nonexistent/user", dir, "/nonexistent/mixprec", NULL }));
    g_assert_nonnull (plugin);
    g_assert_cmpstrv (mixprec_registry_get_search_path (without),
                      ((const gchar * const[]) { "/nonexistent/user", NULL }));
    g_assert_null (mixprec_registry_get_plugins (without));
  }

  /* Set but empty: no system directory at all. */
  g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", "", TRUE);
  {
    g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (NULL, TRUE);

    g_assert_cmpstrv (mixprec_registry_get_search_path (registry), ((const gchar * const[]) { NULL }));
  }

  /* Unset: the directory libmixprec was configured with. */
  g_unsetenv ("MIXPREC_PLUGIN_SYSTEM_PATH");
  {
    g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (NULL, TRUE);

    g_assert_cmpstrv (mixprec_registry_get_search_path (registry),
                      ((const gchar * const[]) { MIXPREC_PLUGIN_DIR, NULL }));
  }

  if (saved != NULL)
    g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", saved, TRUE);
  remove_tree (dir);
}

/* ------------------------------------------------------------ look-ups */

static void
test_registry_rank (void)
{
  g_autoptr(MixprecRegistry) registry = test_plugins_registry ();
  const struct {
    const gchar *name;
    const gchar *device;
    guint rank;
    const gchar *plugin;
  } cases[] = {
    /* found second, ranked higher */
    { "testopt", "cpu", 200, "test-rank" },
    /* found first, ranked higher */
    { "otheropt", "cpu", 20, "test-good" },
    { "testopt", "testdev", 5, "test-rank" },
    { "testopt", NULL, 200, "test-rank" },
  };

  for (gsize i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecFeature) feature =
        mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                       cases[i].name, cases[i].device, &error);

      g_assert_no_error (error);
      g_assert_cmpuint (mixprec_feature_get_rank (feature), ==, cases[i].rank);
      g_assert_cmpstr (mixprec_feature_get_plugin_name (feature), ==, cases[i].plugin);
    }
}

static void
test_registry_lookup_errors (void)
{
  g_autoptr(MixprecRegistry) registry = test_plugins_registry ();
  g_autoptr(MixprecRegistry) empty = mixprec_registry_new_for_paths (NULL, FALSE);
  g_autoptr(GError) error = NULL;
  MixprecFeature *feature;
  MixprecPlugin *plugin;

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                           "nosuch", "cpu", &error);
  g_assert_null (feature);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_cmpstr (error->message, ==,
                   "no optimizer 'nosuch' for device 'cpu'; available: otheropt (cpu), "
                   "testopt (cpu), testopt (testdev); 10 plugin files failed to load "
                   "(run mixprec-inspect to see why)");
  g_clear_error (&error);

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                           "testopt", "cuda", &error);
  g_assert_null (feature);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_true (g_str_has_prefix (error->message, "no optimizer 'testopt' for device 'cuda'; available: "));
  g_clear_error (&error);

  /* Features registered by a plugin whose init() failed do not exist. */
  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                           "failopt", NULL, &error);
  g_assert_null (feature);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_true (g_str_has_prefix (error->message, "no optimizer 'failopt' for any device; "));
  g_clear_error (&error);

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, "ucx", NULL, &error);
  g_assert_null (feature);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_true (g_str_has_prefix (error->message, "no comm 'ucx' for any device; available: testcomm (cpu); "));
  g_clear_error (&error);

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_DEVICE, "cuda", NULL, &error);
  g_assert_null (feature);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_true (g_str_has_prefix (error->message, "no device 'cuda' for any device; no plugin provides any device (searched: "));
  g_clear_error (&error);

  plugin = mixprec_registry_find_plugin (registry, "test-abi-major", &error);
  g_assert_null (plugin);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_true (g_str_has_prefix (error->message, "plugin 'test-abi-major' failed to load: "));
  g_assert_nonnull (strstr (error->message, "built for plugin ABI 2.0"));
  g_clear_error (&error);

  plugin = mixprec_registry_find_plugin (registry, "optim-nosuch", &error);
  g_assert_null (plugin);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_cmpstr (error->message, ==, "no plugin 'optim-nosuch'; loaded plugins: test-comm, test-good, test-rank");
  g_clear_error (&error);

  plugin = mixprec_registry_find_plugin (empty, "optim-adamw", &error);
  g_assert_null (plugin);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_cmpstr (error->message, ==, "no plugin 'optim-adamw'; no plugins loaded "
                   "(the plugin search path is empty)");
}

/* ------------------------------------------------------------ vtable checks */

static int
dummy_step (const MixprecOptimizerStepV1 *args,
            float                        *master,
            const void                   *grad,
            float *const                 *states,
            void                         *working,
            size_t                        n,
            char                         *errbuf,
            size_t                        errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static void
test_registry_vtable_check (void)
{
  static const char *const two_states[] = { "exp_avg", "exp_avg_sq" };
  static const char *const same_states[] = { "exp_avg", "exp_avg" };
  static const char *const null_state[] = { "exp_avg", NULL };
  static const MixprecHParamSpecV1 ok_spec = {
    .name = "lr", .type = MIXPREC_HPARAM_DOUBLE, .default_value = 1e-3,
    .min_value = 0.0, .max_value = INFINITY,
  };
  static int reserved_marker;
  MixprecHParamSpecV1 spec[2];
  MixprecOptimizerV1 v;
  const MixprecOptimizerV1 valid = {
    .name = "adamw", .device = "cpu", .rank = 100, .step = dummy_step,
    .hparams = &ok_spec, .n_hparams = 1,
    .n_state_slots = 2, .state_names = two_states,
  };
  g_autoptr(GError) error = NULL;

  g_assert_true (_mixprec_optimizer_vtable_check (&valid, &error));
  g_assert_no_error (error);

  /* Each case breaks one rule of a copy of the valid vtable. */
#define EXPECT_REFUSED(reason) G_STMT_START {                                  \
    g_test_message ("vtable case: %s", reason);                                \
    g_assert_false (_mixprec_optimizer_vtable_check (&v, &error));             \
    g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE); \
    if (strstr (error->message, reason) == NULL)                               \
      g_error ("'%s' does not say '%s'", error->message, reason);              \
    g_clear_error (&error);                                                    \
  } G_STMT_END

  g_assert_false (_mixprec_optimizer_vtable_check (NULL, &error));
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE);
  g_clear_error (&error);

  v = valid; v.name = NULL;
  EXPECT_REFUSED ("the optimizer name is missing or not an identifier");
  v = valid; v.name = "adam w";
  EXPECT_REFUSED ("the optimizer name is missing or not an identifier");
  v = valid; v.name = "0adam";
  EXPECT_REFUSED ("the optimizer name is missing or not an identifier");
  v = valid; v.device = NULL;
  EXPECT_REFUSED ("optimizer 'adamw': the device name is missing");
  v = valid; v.step = NULL;
  EXPECT_REFUSED ("optimizer 'adamw' (cpu): its step function is NULL");
  v = valid; v.hparams = NULL;
  EXPECT_REFUSED ("n_hparams is 1 but hparams is NULL");
  v = valid; v.n_hparams = 0;
  EXPECT_REFUSED ("n_hparams is 0 but hparams is set");
  v = valid; v.n_hparams = 65;
  EXPECT_REFUSED ("65 hyper-parameters is more than the limit of 64");
  v = valid; v.state_names = NULL;
  EXPECT_REFUSED ("it keeps 2 state slots but state_names is NULL");
  v = valid; v.state_names = null_state;
  EXPECT_REFUSED ("state slot 1 has no name");
  v = valid; v.state_names = same_states;
  EXPECT_REFUSED ("state slot name 'exp_avg' is used twice");
  v = valid; v.n_state_slots = 17;
  EXPECT_REFUSED ("17 state slots is more than the limit of 16");
  v = valid; v.reserved[3] = &reserved_marker;
  EXPECT_REFUSED ("its reserved fields are not zero");

  v = valid; v.hparams = spec; v.n_hparams = 1;
  spec[0] = ok_spec; spec[0].name = "";
  EXPECT_REFUSED ("a hyper-parameter name is missing or not an identifier");
  spec[0] = ok_spec; spec[0].type = (MixprecHParamType) 7;
  EXPECT_REFUSED ("hyper-parameter 'lr': type 7 is not a MixprecHParamType");
  spec[0] = ok_spec; spec[0].default_value = -1.0;
  EXPECT_REFUSED ("hyper-parameter 'lr': default -1 is outside its range [0, inf]");
  spec[0] = ok_spec; spec[0].default_value = NAN;
  EXPECT_REFUSED ("hyper-parameter 'lr': default nan is outside its range");
  spec[0] = ok_spec; spec[0].min_value = 2.0; spec[0].max_value = 1.0;
  EXPECT_REFUSED ("hyper-parameter 'lr': range [2, 1] is not an interval");
  spec[0] = ok_spec; spec[0].max_value = NAN;
  EXPECT_REFUSED ("hyper-parameter 'lr': range [0, nan] is not an interval");
  spec[0] = ok_spec; spec[0].reserved[0] = &reserved_marker;
  EXPECT_REFUSED ("hyper-parameter 'lr': its reserved fields are not zero");
  spec[0] = ok_spec; spec[0].type = MIXPREC_HPARAM_BOOL; spec[0].default_value = 1.0;
  spec[0].max_value = 2.0;
  EXPECT_REFUSED ("a boolean must have the range [0, 1], not [0, 2]");
  spec[0] = ok_spec; spec[0].type = MIXPREC_HPARAM_INT; spec[0].default_value = 1.5;
  EXPECT_REFUSED ("an integer or boolean needs an integral default and bounds");
  spec[0] = ok_spec; spec[0].type = MIXPREC_HPARAM_INT; spec[0].default_value = 1.0;
  spec[0].max_value = 10.5;
  EXPECT_REFUSED ("an integer or boolean needs an integral default and bounds");
  v.n_hparams = 2;
  spec[0] = ok_spec; spec[1] = ok_spec;
  EXPECT_REFUSED ("hyper-parameter 'lr' is declared twice");

  /* An integer with an unbounded range and a boolean are fine. */
  spec[0] = ok_spec; spec[0].type = MIXPREC_HPARAM_INT; spec[0].default_value = 3.0;
  spec[1] = ok_spec; spec[1].name = "amsgrad"; spec[1].type = MIXPREC_HPARAM_BOOL;
  spec[1].default_value = 0.0; spec[1].max_value = 1.0;
  g_assert_true (_mixprec_optimizer_vtable_check (&v, &error));
  g_assert_no_error (error);
#undef EXPECT_REFUSED
}

/* ------------------------------------------------------------ calling an optimizer */

static void
test_registry_optimizer_step (void)
{
  g_autoptr(MixprecRegistry) registry = test_plugins_registry ();
  g_autoptr(MixprecPlugin) plugin = mixprec_registry_find_plugin (registry, "test-good", NULL);
  g_autoptr(MixprecFeature) feature = plugin_feature (plugin, "testopt");
  g_autoptr(GError) error = NULL;
  const MixprecOptimizerV1 *vtable = _mixprec_feature_get_optimizer_vtable (feature);
  const gdouble *defaults;
  guint n_defaults;
  gfloat master[4] = { 1.0f, -2.0f, 0.5f, 4.0f };
  gfloat buffer[4] = { 0.25f, 0.0f, -1.0f, 2.0f };
  const gfloat grad[4] = { 8.0f, -4.0f, 2.0f, 0.0f };
  gfloat expected_master[4], expected_buffer[4];
  gfloat *states[1] = { buffer };
  MixprecOptimizerStepV1 args = { 0 };

  g_assert_nonnull (vtable);
  g_assert_cmpstr (vtable->name, ==, "testopt");
  g_assert_cmpstr (vtable->hparams[1].name, ==, "momentum");
  g_assert_cmpstr (vtable->state_names[0], ==, "momentum_buffer");
  defaults = _mixprec_feature_get_hparam_defaults (feature, &n_defaults);
  g_assert_cmpuint (n_defaults, ==, 4);
  g_assert_cmpfloat (defaults[1], ==, 0.9);

  /* buf = 0.9 buf + g / 4;  master -= 0.5 buf  (all exact in binary32
   * except 0.9, which both sides round the same way). */
  for (guint i = 0; i < 4; i++)
    {
      expected_buffer[i] = 0.9f * buffer[i] + grad[i] * 0.25f;
      expected_master[i] = master[i] - 0.5f * expected_buffer[i];
    }
  args.lr = 0.5;
  args.grad_factor = 0.25f;
  args.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  args.working_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  g_assert_true (_mixprec_feature_optimizer_step (feature, &args, NULL, master, grad,
                                                  states, NULL, 4, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (args.struct_size, ==, sizeof args);
  g_assert_cmpmem (buffer, sizeof buffer, expected_buffer, sizeof expected_buffer);
  g_assert_cmpmem (master, sizeof master, expected_master, sizeof expected_master);

  /* A failure of the plugin becomes an error carrying its sentence. */
  args.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT16;
  g_assert_false (_mixprec_feature_optimizer_step (feature, &args, NULL, master, grad,
                                                   states, NULL, 4, &error));
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
  g_assert_cmpstr (error->message, ==,
                   "optimizer 'testopt' (cpu, plugin test-good) failed on 4 elements: "
                   "testopt takes float32 gradients only, got dtype 1 (unsupported, status 2)");
}

/* ------------------------------------------------------------ the default registry */

static gpointer
get_default_thread (gpointer data)
{
  return mixprec_registry_get_default ();
}

static void
test_registry_default_threads (void)
{
  GThread *threads[4];
  gpointer seen[G_N_ELEMENTS (threads)];

  for (gsize i = 0; i < G_N_ELEMENTS (threads); i++)
    threads[i] = g_thread_new ("get-default", get_default_thread, NULL);
  for (gsize i = 0; i < G_N_ELEMENTS (threads); i++)
    seen[i] = g_thread_join (threads[i]);
  for (gsize i = 0; i < G_N_ELEMENTS (threads); i++)
    {
      g_assert_nonnull (seen[i]);
      g_assert_true (seen[i] == seen[0]);
    }
  g_assert_true (mixprec_registry_get_default () == seen[0]);
}

static int
one_rank_gather (void *ctx, const void *in, size_t len, void *out, char *errbuf, size_t errbuf_len)
{
  memmove (out, in, len);
  return MIXPREC_PLUGIN_OK;
}

static int
one_rank_barrier (void *ctx, char *errbuf, size_t errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

/* A communicator of ABI 1.0, built against the frozen header: it loads,
 * reports revision 1, runs through the upgraded vtable, and has no
 * all-to-all (NULL in the revision 2 struct the library keeps). */
static void
test_registry_v1_comm (void)
{
  g_autofree gchar *v1_dir = g_test_build_filename (G_TEST_BUILT, "abi-plugins", NULL);
  const gchar *paths[] = { v1_dir, NULL };
  g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (paths, FALSE);
  g_autoptr(MixprecFeature) feature = NULL;
  g_autoptr(GError) error = NULL;
  MixprecBootstrapV1 bootstrap = { sizeof bootstrap, 0, 1, 0, 1, NULL, one_rank_gather,
                                   one_rank_barrier, { NULL } };
  MixprecCommInitV1 args = { sizeof args, &bootstrap, 1000, NULL };
  const MixprecCommV2 *vt;
  gfloat x[5] = { 1, 2, 3, 4, 5 }, y[5] = { 0 };
  char errbuf[256] = "";
  void *comm = NULL;
  guint revision = 0;

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, "commv1", "cpu", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_plugin_get_abi_minor (mixprec_feature_get_plugin (feature)), ==, 0);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (feature), ==, 1);
  vt = _mixprec_feature_get_comm_v2 (feature, &revision);
  g_assert_cmpuint (revision, ==, 1);
  g_assert_null (vt->all_to_all);
  g_assert_true (&vt->base == _mixprec_feature_get_comm_vtable (feature));
  g_assert_cmpint (vt->base.init (&args, &comm, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpint (vt->base.all_reduce (comm, x, y, 5, MIXPREC_PLUGIN_DTYPE_FLOAT32,
                                        MIXPREC_PLUGIN_REDUCE_SUM, 0, NULL, errbuf, sizeof errbuf),
                   ==, MIXPREC_PLUGIN_OK);
  g_assert_cmpmem (y, sizeof y, x, sizeof x);
  g_assert_cmpint (vt->base.finalize (comm, errbuf, sizeof errbuf), ==, MIXPREC_PLUGIN_OK);
}

/* A plugin of ABI 1.0, built against the frozen header in tests/abi-plugins,
 * registers a MixprecOptimizerV1: the V1 shim steps it with float32 state,
 * bit for bit as the shipped V2 sgd steps the same SGD, and refuses bf16
 * state naming the plugin and its revision. */
static void
test_registry_v1_optimizer_shim (void)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *v1_dir = g_test_build_filename (G_TEST_BUILT, "abi-plugins", NULL);
  g_autofree gchar *optim_dir = NULL;
  g_autoptr(MixprecRegistry) registry = NULL;
  g_autoptr(MixprecFeature) v1 = NULL;
  g_autoptr(MixprecFeature) v2 = NULL;
  g_autoptr(GError) error = NULL;
  enum { N = 37 };
  gfloat master1[N], master2[N], buf1[N], buf2[N], grad[N];
  guint16 work1[N], work2[N], narrow[N];
  gfloat *states1[1] = { buf1 }, *states2[1] = { buf2 };
  gpointer narrow_states[1] = { narrow };
  const MixprecPluginDType bf16[1] = { MIXPREC_PLUGIN_DTYPE_BFLOAT16 };
  /* lr, momentum, weight_decay | lr, momentum, dampening, weight_decay, nesterov */
  const gdouble h1[3] = { 0.05, 0.9, 0.01 }, h2[5] = { 0.05, 0.9, 0, 0.01, 0 };
  gsize n_dtypes;
  const MixprecDType *dtypes;
  MixprecOptimizerStepV2 args2 = { 0 };

  if (top == NULL)
    {
      g_test_skip ("MIXPREC_TOP_BUILDDIR is set by make check");
      return;
    }
  optim_dir = g_build_filename (top, "plugins", NULL);
  {
    const gchar *paths[] = { v1_dir, optim_dir, NULL };

    registry = mixprec_registry_new_for_paths (paths, FALSE);
  }
  v1 = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER, "sgdv1", "cpu", &error);
  g_assert_no_error (error);
  v2 = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER, "sgd", "cpu", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_plugin_get_abi_minor (mixprec_feature_get_plugin (v1)), ==, 0);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (v1), ==, 1);
  g_assert_cmpuint (mixprec_feature_get_abi_revision (v2), ==, 3);
  dtypes = mixprec_feature_get_state_dtypes (v1, &n_dtypes);
  g_assert_cmpuint (n_dtypes, ==, 1);
  g_assert_cmpint (dtypes[0], ==, MIXPREC_DTYPE_FLOAT32);

  for (guint i = 0; i < N; i++)
    master1[i] = master2[i] = (gfloat) sin (i * 0.7) * 2;
  for (guint64 t = 1; t <= 4; t++)
    {
      MixprecOptimizerStepV1 a1 = { 0 }, a2 = { 0 };

      for (guint i = 0; i < N; i++)
        grad[i] = (gfloat) cos (i * 1.3 + t) * 3;
      a1.step = a2.step = t;
      a1.lr = a2.lr = 0.05 / t;
      a1.grad_factor = a2.grad_factor = 0.5f;
      a1.grad_dtype = a2.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
      a1.working_dtype = a2.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
      g_assert_true (_mixprec_feature_optimizer_step (v1, &a1, h1, master1, grad, states1, work1, N, &error));
      g_assert_no_error (error);
      g_assert_true (_mixprec_feature_optimizer_step (v2, &a2, h2, master2, grad, states2, work2, N, &error));
      g_assert_no_error (error);
      g_assert_cmpmem (master1, sizeof master1, master2, sizeof master2);
      g_assert_cmpmem (buf1, sizeof buf1, buf2, sizeof buf2);
      g_assert_cmpmem (work1, sizeof work1, work2, sizeof work2);
    }

  /* bfloat16 state: the shim refuses, before the plugin sees the call. */
  args2.base.step = 1;
  args2.base.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  args2.base.working_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
  args2.state_dtypes = bf16;
  g_assert_false (_mixprec_feature_optimizer_step_v2 (v1, &args2, h1, master1, grad, narrow_states,
                                                      NULL, N, &error));
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
  g_assert_nonnull (strstr (error->message, "plugin test-optim-v1"));
  g_assert_nonnull (strstr (error->message, "revision 1"));
  g_assert_nonnull (strstr (error->message, "bfloat16"));
  g_clear_error (&error);
  /* ... and the V2 one takes it. */
  memset (narrow, 0, sizeof narrow);
  g_assert_true (_mixprec_feature_optimizer_step_v2 (v2, &args2, h2, master2, grad, narrow_states,
                                                     NULL, N, &error));
  g_assert_no_error (error);
}

static int
dummy_step_v3 (const MixprecOptimizerStepV3 *args,
               float                        *master,
               const void                   *grad,
               void *const                  *states,
               void                         *working,
               size_t                        n,
               char                         *errbuf,
               size_t                        errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

/* Revision 3's own rules: the format masks name FLOAT32 and known formats
 * only, and the signed mask stays within the slots. */
static void
test_registry_v3_vtable_check (void)
{
  static const char *const two_states[] = { "exp_avg", "exp_avg_sq" };
  const MixprecOptimizerV3 valid = {
    .name = "adamw", .device = "cpu", .rank = 100, .step = dummy_step_v3,
    .n_state_slots = 2, .state_names = two_states,
    .state_dtype_mask = (1u << MIXPREC_PLUGIN_DTYPE_FLOAT32) | (1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16),
    .state_format_mask = 0x7F, .master_format_mask = 0x7, .state_signed_mask = 0x1,
  };
  MixprecOptimizerV3 v;
  g_autoptr(GError) error = NULL;

  g_assert_true (_mixprec_optimizer_v3_vtable_check (&valid, &error));
  g_assert_no_error (error);

#define EXPECT_REFUSED(reason) G_STMT_START {                                  \
    g_test_message ("vtable case: %s", reason);                                \
    g_assert_false (_mixprec_optimizer_v3_vtable_check (&v, &error));          \
    g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE); \
    if (strstr (error->message, reason) == NULL)                               \
      g_error ("'%s' does not say '%s'", error->message, reason);              \
    g_clear_error (&error);                                                    \
  } G_STMT_END

  g_assert_false (_mixprec_optimizer_v3_vtable_check (NULL, &error));
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE);
  g_clear_error (&error);
  v = valid; v.step = NULL;
  EXPECT_REFUSED ("optimizer 'adamw' (cpu): its step function is NULL");
  v = valid; v.state_dtype_mask = 1u << MIXPREC_PLUGIN_DTYPE_BFLOAT16;
  EXPECT_REFUSED ("its state_dtype_mask 0x4 lacks float32");
  v = valid; v.state_format_mask = 0x7E;
  EXPECT_REFUSED ("its state_format_mask 0x7e lacks FLOAT32");
  v = valid; v.state_format_mask = 0xFF;
  EXPECT_REFUSED ("its state_format_mask 0xff has bits for formats that do not exist");
  v = valid; v.master_format_mask = 0x6;
  EXPECT_REFUSED ("its master_format_mask 0x6 lacks FLOAT32");
  v = valid; v.master_format_mask = 0x9;
  EXPECT_REFUSED ("its master_format_mask 0x9 has bits for master formats that do not exist");
  v = valid; v.state_signed_mask = 0x4;
  EXPECT_REFUSED ("its state_signed_mask 0x4 names slots beyond its 2 state slots");
  /* ABI 1.6: an optimizer measures numerics only for masters it keeps. */
  v = valid; v.numerics_master_mask = 0x1;
  g_assert_true (_mixprec_optimizer_v3_vtable_check (&v, &error));
  g_assert_no_error (error);
  v = valid; v.master_format_mask = 0x1; v.numerics_master_mask = 0x2;
  EXPECT_REFUSED ("its numerics_master_mask 0x2 names master formats outside its master_format_mask 0x1");
#undef EXPECT_REFUSED
}

/* A revision 3 call reaches an older optimizer only with the
 * representations it knows, and with the same result as its own call;
 * anything else is an error naming the plugin, the slot and the format. */
static void
test_registry_v3_step_compat (void)
{
  g_autofree gchar *v1_dir = g_test_build_filename (G_TEST_BUILT, "abi-plugins", NULL);
  const gchar *paths[] = { v1_dir, NULL };
  g_autoptr(MixprecRegistry) registry = mixprec_registry_new_for_paths (paths, FALSE);
  g_autoptr(MixprecFeature) v1 = NULL;
  g_autoptr(GError) error = NULL;
  enum { N = 29 };
  gfloat master1[N], master3[N], buf1[N], buf3[N], grad[N];
  gfloat *states1[1] = { buf1 };
  gpointer states3[1] = { buf3 };
  const gdouble h[3] = { 0.05, 0.9, 0.01 };
  MixprecPluginStateFormat formats[1] = { MIXPREC_PLUGIN_STATE_FLOAT32 };

  v1 = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER, "sgdv1", "cpu", &error);
  g_assert_no_error (error);
  g_assert_cmpuint (mixprec_feature_get_state_format_mask (v1), ==, 1u << MIXPREC_PLUGIN_STATE_FLOAT32);
  g_assert_cmpuint (mixprec_feature_get_master_format_mask (v1), ==, 1u << MIXPREC_PLUGIN_MASTER_FLOAT32);

  for (guint i = 0; i < N; i++)
    {
      master1[i] = master3[i] = (gfloat) sin (i * 0.3) * 2;
      buf1[i] = buf3[i] = 0;
    }
  for (guint64 t = 1; t <= 3; t++)
    {
      MixprecOptimizerStepV1 a1 = { 0 };
      MixprecOptimizerStepV3 a3 = { 0 };

      for (guint i = 0; i < N; i++)
        grad[i] = (gfloat) cos (i * 1.1 + t);
      a1.step = t;
      a1.lr = 0.05;
      a1.grad_factor = 1.0f;
      a1.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
      a1.working_dtype = MIXPREC_PLUGIN_DTYPE_BFLOAT16;
      a3.v2.base = a1;
      a3.state_formats = formats;
      a3.master_format = MIXPREC_PLUGIN_MASTER_FLOAT32;
      g_assert_true (_mixprec_feature_optimizer_step (v1, &a1, h, master1, grad, states1, NULL, N, &error));
      g_assert_no_error (error);
      g_assert_true (_mixprec_feature_optimizer_step_v3 (v1, &a3, h, master3, grad, states3, NULL, N, &error));
      g_assert_no_error (error);
      g_assert_cmpuint (a3.v2.base.struct_size, ==, sizeof a3);
      g_assert_null (a3.v2.state_dtypes);
      g_assert_cmpmem (master1, sizeof master1, master3, sizeof master3);
      g_assert_cmpmem (buf1, sizeof buf1, buf3, sizeof buf3);
    }

  /* Checked before any call, and by the step itself. */
  g_assert_true (_mixprec_feature_check_representation (v1, MIXPREC_PLUGIN_MASTER_FLOAT32, NULL, 0, &error));
  g_assert_no_error (error);
  g_assert_false (_mixprec_feature_check_representation (v1, MIXPREC_PLUGIN_MASTER_REMAINDER,
                                                         formats, 1, &error));
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
  g_assert_nonnull (strstr (error->message, "plugin test-optim-v1"));
  g_assert_nonnull (strstr (error->message, "remainder master"));
  g_assert_nonnull (strstr (error->message, "MixprecOptimizerV3"));
  g_clear_error (&error);

  formats[0] = MIXPREC_PLUGIN_STATE_INT8_DYNAMIC;
  {
    MixprecOptimizerStepV3 a3 = { 0 };

    a3.v2.base.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
    a3.state_formats = formats;
    g_assert_false (_mixprec_feature_optimizer_step_v3 (v1, &a3, h, master3, grad, states3, NULL, N, &error));
    g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_CALL_FAILED);
    g_assert_nonnull (strstr (error->message, "optimizer 'sgdv1'"));
    g_assert_nonnull (strstr (error->message, "state slot 'momentum_buffer'"));
    g_assert_nonnull (strstr (error->message, "int8"));
    g_clear_error (&error);
  }
  formats[0] = (MixprecPluginStateFormat) 9;
  g_assert_false (_mixprec_feature_check_representation (v1, MIXPREC_PLUGIN_MASTER_FLOAT32,
                                                         formats, 1, &error));
  g_assert_nonnull (strstr (error->message, "an unknown format (9)"));
  g_clear_error (&error);
  g_assert_false (_mixprec_feature_check_representation (v1, MIXPREC_PLUGIN_MASTER_FLOAT32,
                                                         formats, 2, &error));
  g_assert_nonnull (strstr (error->message, "keeps 1 state slots, not 2"));
  g_clear_error (&error);

  /* Revision 2: bfloat16 state through the shim, with its own argument
   * block (the plugin insists on exactly a MixprecOptimizerStepV2), the
   * same bits as its own call; int8 refused naming revision 2. */
  {
    g_autoptr(MixprecFeature) v2 =
      mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER, "sgdv2", "cpu", &error);
    guint16 narrow2[N], narrow3[N];
    gpointer nstates2[1] = { narrow2 }, nstates3[1] = { narrow3 };
    const MixprecPluginDType bf16[1] = { MIXPREC_PLUGIN_DTYPE_BFLOAT16 };
    const gdouble h2[2] = { 0.05, 0.9 };

    g_assert_no_error (error);
    g_assert_cmpuint (mixprec_feature_get_abi_revision (v2), ==, 2);
    g_assert_cmpuint (mixprec_feature_get_state_format_mask (v2), ==,
                      (1u << MIXPREC_PLUGIN_STATE_FLOAT32) | (1u << MIXPREC_PLUGIN_STATE_BFLOAT16));
    g_assert_cmpuint (mixprec_feature_get_master_format_mask (v2), ==, 1u << MIXPREC_PLUGIN_MASTER_FLOAT32);
    memset (narrow2, 0, sizeof narrow2);
    memset (narrow3, 0, sizeof narrow3);
    for (guint i = 0; i < N; i++)
      master1[i] = master3[i] = (gfloat) sin (i * 0.3) * 2;
    for (guint64 t = 1; t <= 3; t++)
      {
        MixprecOptimizerStepV2 a2 = { 0 };
        MixprecOptimizerStepV3 a3 = { 0 };

        for (guint i = 0; i < N; i++)
          grad[i] = (gfloat) cos (i * 1.1 + t);
        a2.base.step = t;
        a2.base.lr = 0.05;
        a2.base.grad_dtype = MIXPREC_PLUGIN_DTYPE_FLOAT32;
        a2.state_dtypes = bf16;
        a3.v2 = a2;
        a3.v2.state_dtypes = NULL;
        formats[0] = MIXPREC_PLUGIN_STATE_BFLOAT16;
        a3.state_formats = formats;
        g_assert_true (_mixprec_feature_optimizer_step_v2 (v2, &a2, h2, master1, grad, nstates2, NULL, N, &error));
        g_assert_no_error (error);
        g_assert_true (_mixprec_feature_optimizer_step_v3 (v2, &a3, h2, master3, grad, nstates3, NULL, N, &error));
        g_assert_no_error (error);
        g_assert_cmpmem (master1, sizeof master1, master3, sizeof master3);
        g_assert_cmpmem (narrow2, sizeof narrow2, narrow3, sizeof narrow3);
      }
    formats[0] = MIXPREC_PLUGIN_STATE_INT8_DYNAMIC;
    g_assert_false (_mixprec_feature_check_representation (v2, MIXPREC_PLUGIN_MASTER_FLOAT32,
                                                           formats, 1, &error));
    g_assert_nonnull (strstr (error->message, "plugin test-optim-v2, optimizer ABI revision 2"));
    g_assert_nonnull (strstr (error->message, "block-wise dynamic int8"));
    g_clear_error (&error);
    g_assert_false (_mixprec_feature_check_representation (v2, MIXPREC_PLUGIN_MASTER_KAHAN, NULL, 0, &error));
    g_assert_nonnull (strstr (error->message, "a Kahan master"));
  }
}

static void
test_registry_default_build_tree (void)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  const gchar *path = g_getenv ("MIXPREC_PLUGIN_PATH");
  const gchar *optimizers[] = { "adamw", "sgd", "lion" };
  g_autofree gchar *libs = NULL;
  g_auto(GStrv) expected_path = NULL;
  MixprecRegistry *registry;
  g_autolist(MixprecPlugin) failures = NULL;

  if (top == NULL || path == NULL)
    {
      g_test_skip ("MIXPREC_TOP_BUILDDIR and MIXPREC_PLUGIN_PATH are set by make check");
      return;
    }
  libs = g_build_filename (top, "plugins", ".libs", NULL);
  if (!g_file_test (libs, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("no optimizer plugins built in plugins/.libs yet");
      return;
    }

  registry = mixprec_registry_get_default ();
  expected_path = g_strsplit (path, ":", -1);
  g_assert_cmpstrv (mixprec_registry_get_search_path (registry), expected_path);

  for (gsize i = 0; i < G_N_ELEMENTS (optimizers); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecFeature) feature =
        mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER,
                                       optimizers[i], "cpu", &error);
      g_autofree gchar *plugin = g_strconcat ("optim-", optimizers[i], NULL);

      g_assert_no_error (error);
      g_assert_cmpstr (mixprec_feature_get_device (feature), ==, "cpu");
      g_assert_cmpstr (mixprec_feature_get_plugin_name (feature), ==, plugin);
      g_assert_cmpint (mixprec_feature_find_hparam (feature, "lr"), >=, 0);
    }

  /* No optimizer plugin of the build tree fails to load. */
  failures = mixprec_registry_get_failures (registry);
  for (GList *l = failures; l != NULL; l = l->next)
    {
      const GError *e = mixprec_plugin_get_load_error (l->data);

      g_test_message ("%s", e->message);
      g_assert_false (g_str_has_prefix (mixprec_plugin_get_name (l->data), "optim-"));
    }
}

/* ------------------------------------------------------------ communicators */

static int
dummy_comm_init (const MixprecCommInitV1 *args,
                 void                   **comm,
                 char                    *errbuf,
                 size_t                   errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
dummy_all_reduce (void                 *comm,
                  const void           *send,
                  void                 *recv,
                  size_t                count,
                  MixprecPluginDType    dtype,
                  MixprecPluginReduceOp op,
                  unsigned              flags,
                  void                **request,
                  char                 *errbuf,
                  size_t                errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
dummy_all_gather (void              *comm,
                  const void        *send,
                  void              *recv,
                  size_t             count,
                  MixprecPluginDType dtype,
                  void             **request,
                  char              *errbuf,
                  size_t             errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
dummy_broadcast (void              *comm,
                 void              *buf,
                 size_t             count,
                 MixprecPluginDType dtype,
                 unsigned           root,
                 void             **request,
                 char              *errbuf,
                 size_t             errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
dummy_barrier (void   *comm,
               void  **request,
               char   *errbuf,
               size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
dummy_test (void   *comm,
            void   *request,
            int    *done,
            char   *errbuf,
            size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static int
dummy_wait (void   *comm,
            void   *request,
            char   *errbuf,
            size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_ERR_UNSUPPORTED;
}

static void
dummy_abort (void *comm)
{
}

static int
dummy_finalize (void   *comm,
                char   *errbuf,
                size_t  errbuf_len)
{
  return MIXPREC_PLUGIN_OK;
}

static void
test_registry_comm_vtable_check (void)
{
  static int reserved_marker;
  g_autofree gchar *name_65 = g_strnfill (65, 'c');
  const MixprecCommV1 valid = {
    .name = "ucx", .device = "cpu", .rank = 100, .dtype_mask = 0x7,
    .init = dummy_comm_init, .all_reduce = dummy_all_reduce,
    .reduce_scatter = dummy_all_reduce, .all_gather = dummy_all_gather,
    .broadcast = dummy_broadcast, .barrier = dummy_barrier, .test = dummy_test,
    .wait = dummy_wait, .abort = dummy_abort, .finalize = dummy_finalize,
  };
  const gchar *function_names[] = {
    "init", "all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier",
    "test", "wait", "abort", "finalize",
  };
  g_autoptr(GError) error = NULL;
  MixprecCommV1 v;

  g_assert_true (_mixprec_comm_vtable_check (&valid, &error));
  g_assert_no_error (error);
  g_assert_false (_mixprec_comm_vtable_check (NULL, &error));
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE);
  g_clear_error (&error);

#define EXPECT_COMM_REFUSED(reason) G_STMT_START {                             \
    g_test_message ("comm vtable case: %s", reason);                           \
    g_assert_false (_mixprec_comm_vtable_check (&v, &error));                  \
    g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_BAD_FEATURE); \
    if (strstr (error->message, reason) == NULL)                               \
      g_error ("'%s' does not say '%s'", error->message, reason);              \
    g_clear_error (&error);                                                    \
  } G_STMT_END

  v = valid; v.name = NULL;
  EXPECT_COMM_REFUSED ("the comm name is missing or not an identifier");
  v = valid; v.name = "u c x";
  EXPECT_COMM_REFUSED ("the comm name is missing or not an identifier");
  v = valid; v.name = name_65;
  EXPECT_COMM_REFUSED ("at most 64 characters");
  v = valid; v.device = "";
  EXPECT_COMM_REFUSED ("comm 'ucx': the device name is missing or not an identifier");
  /* Every function, one at a time. */
  for (gsize i = 0; i < G_N_ELEMENTS (function_names); i++)
    {
      g_autofree gchar *reason = g_strdup_printf ("comm 'ucx' (cpu): its %s function is NULL",
                                                  function_names[i]);

      v = valid;
      switch (i)
        {
        case 0: v.init = NULL; break;
        case 1: v.all_reduce = NULL; break;
        case 2: v.reduce_scatter = NULL; break;
        case 3: v.all_gather = NULL; break;
        case 4: v.broadcast = NULL; break;
        case 5: v.barrier = NULL; break;
        case 6: v.test = NULL; break;
        case 7: v.wait = NULL; break;
        case 8: v.abort = NULL; break;
        default: v.finalize = NULL; break;
        }
      EXPECT_COMM_REFUSED (reason);
    }
  v = valid; v.dtype_mask = 0;
  EXPECT_COMM_REFUSED ("comm 'ucx' (cpu): its dtype_mask is 0: it must accept at least one dtype");
  v = valid; v.dtype_mask = 0x21;
  EXPECT_COMM_REFUSED ("its dtype_mask 0x21 has bits for dtypes that do not exist "
                       "(the known dtypes are bits 0 to 4)");
  v = valid; v.reserved[7] = &reserved_marker;
  EXPECT_COMM_REFUSED ("its reserved fields are not zero");
#undef EXPECT_COMM_REFUSED

  /* The fp8 dtypes are valid bits. */
  v = valid; v.dtype_mask = 0x1f;
  g_assert_true (_mixprec_comm_vtable_check (&v, &error));
  g_assert_no_error (error);
}

static void
test_registry_comm_plugin (void)
{
  g_autoptr(MixprecRegistry) registry = test_plugins_registry ();
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFeature) feature = NULL;
  const MixprecCommV1 *vtable;
  const MixprecDType *dtypes;
  gsize n_dtypes;

  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, "testcomm",
                                           "cpu", &error);
  g_assert_no_error (error);
  g_assert_cmpint (mixprec_feature_get_kind (feature), ==, MIXPREC_FEATURE_KIND_COMM);
  g_assert_cmpuint (mixprec_feature_get_rank (feature), ==, 1);
  g_assert_cmpstr (mixprec_feature_get_plugin_name (feature), ==, "test-comm");
  g_assert_cmpstr (mixprec_feature_get_description (feature), ==,
                   "a one-process communicator for the comm tests");
  dtypes = mixprec_feature_get_comm_dtypes (feature, &n_dtypes);
  g_assert_cmpuint (n_dtypes, ==, 1);
  g_assert_cmpint (dtypes[0], ==, MIXPREC_DTYPE_FLOAT32);

  /* Optimizer properties of a communicator are empty. */
  g_assert_null (mixprec_feature_get_grad_dtypes (feature, &n_dtypes));
  g_assert_cmpuint (n_dtypes, ==, 0);
  g_assert_cmpuint (mixprec_feature_get_n_hparams (feature), ==, 0);
  g_assert_null (_mixprec_feature_get_optimizer_vtable (feature));

  /* The copy of the vtable keeps the functions and owns its strings. */
  vtable = _mixprec_feature_get_comm_vtable (feature);
  g_assert_nonnull (vtable);
  g_assert_true (vtable->name == mixprec_feature_get_name (feature));
  g_assert_cmpuint (vtable->dtype_mask, ==, 1u << MIXPREC_PLUGIN_DTYPE_FLOAT32);
  g_assert_nonnull (vtable->wait);

  /* And an optimizer has no comm side. */
  g_clear_object (&feature);
  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_OPTIMIZER, "testopt",
                                           "cpu", &error);
  g_assert_null (_mixprec_feature_get_comm_vtable (feature));
  g_assert_null (mixprec_feature_get_comm_dtypes (feature, &n_dtypes));

  /* Look-ups of communicators name the kind and list what there is. */
  g_clear_object (&feature);
  feature = mixprec_registry_find_feature (registry, MIXPREC_FEATURE_KIND_COMM, "nccl",
                                           "cuda", &error);
  g_assert_null (feature);
  g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
  g_assert_nonnull (strstr (error->message, "no comm 'nccl' for device 'cuda'; available: testcomm (cpu)"));
}

/* The plugin "builtin": in every registry that includes the system
 * directories, with the local communicator, and no file. */
static void
test_registry_builtin (void)
{
  g_autofree gchar *saved = g_strdup (g_getenv ("MIXPREC_PLUGIN_SYSTEM_PATH"));
  g_autofree gchar *dir = make_temp_dir ();
  const gchar *paths[] = { dir, NULL };
  const MixprecDType expected[] = { MIXPREC_DTYPE_FLOAT32, MIXPREC_DTYPE_FLOAT16, MIXPREC_DTYPE_BFLOAT16 };

  /* A file that claims the name is not loaded in its place. */
  link_plugin ("test-good", dir, "mixprec-builtin.so");
  g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", "", TRUE);
  {
    g_autoptr(MixprecRegistry) with = mixprec_registry_new_for_paths (paths, TRUE);
    g_autoptr(MixprecRegistry) without = mixprec_registry_new_for_paths (paths, FALSE);
    g_autolist(MixprecPlugin) plugins = mixprec_registry_get_plugins (with);
    g_autolist(MixprecFeature) features = NULL;
    g_autoptr(MixprecFeature) local = NULL;
    g_autoptr(GError) error = NULL;
    MixprecPlugin *builtin;
    const MixprecDType *dtypes;
    gsize n_dtypes;

    g_assert_cmpuint (g_list_length (plugins), ==, 1);
    g_assert_null (mixprec_registry_get_failures (with));
    builtin = plugins->data;
    g_assert_cmpstr (mixprec_plugin_get_name (builtin), ==, "builtin");
    g_assert_null (mixprec_plugin_get_filename (builtin));
    g_assert_true (mixprec_plugin_is_loaded (builtin));
    g_assert_cmpstr (mixprec_plugin_get_version (builtin), ==, PACKAGE_VERSION);
    g_assert_cmpstr (mixprec_plugin_get_license (builtin), ==, "LGPL-2.1-or-later");
    g_assert_cmpuint (mixprec_plugin_get_abi_major (builtin), ==, MIXPREC_PLUGIN_ABI_VERSION_MAJOR);

    features = mixprec_plugin_get_features (builtin);
    g_assert_cmpuint (g_list_length (features), ==, 1);
    local = mixprec_registry_find_feature (with, MIXPREC_FEATURE_KIND_COMM, "local", "cpu", &error);
    g_assert_no_error (error);
    g_assert_true (local == features->data);
    g_assert_cmpuint (mixprec_feature_get_rank (local), ==, 0);
    dtypes = mixprec_feature_get_comm_dtypes (local, &n_dtypes);
    g_assert_cmpmem (dtypes, n_dtypes * sizeof *dtypes, expected, sizeof expected);

    /* Without the system part there is no built-in plugin, and the
     * impostor is tried: it lacks mixprec_plugin_builtin_get_desc(). */
    g_assert_null (mixprec_registry_get_plugins (without));
    g_assert_null (mixprec_registry_find_plugin (without, "builtin", &error));
    g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
    g_assert_nonnull (strstr (error->message, "mixprec_plugin_builtin_get_desc()"));
  }

  if (saved != NULL)
    g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", saved, TRUE);
  else
    g_unsetenv ("MIXPREC_PLUGIN_SYSTEM_PATH");
  remove_tree (dir);
}

/* ------------------------------------------------------------ plugin log */

/* What the test plugins logged, as "DOMAIN|MIXPREC_PLUGIN|CODE_FUNC|MESSAGE"
 * lines: the writer below records every message of a Mixprec-* domain
 * other than the library's own. */
static GPtrArray *plugin_log;
static GMutex plugin_log_lock;

static const gchar *
log_field (const GLogField *fields,
           gsize            n_fields,
           const gchar     *key)
{
  for (gsize i = 0; i < n_fields; i++)
    if (g_str_equal (fields[i].key, key))
      return fields[i].length < 0 ? fields[i].value : NULL;
  return NULL;
}

static GLogWriterOutput
record_plugin_log (GLogLevelFlags   level,
                   const GLogField *fields,
                   gsize            n_fields,
                   gpointer         user_data)
{
  const gchar *domain = log_field (fields, n_fields, "GLIB_DOMAIN");

  if (domain != NULL && g_str_has_prefix (domain, "Mixprec-"))
    {
      const gchar *plugin = log_field (fields, n_fields, "MIXPREC_PLUGIN");
      const gchar *func = log_field (fields, n_fields, "CODE_FUNC");
      const gchar *message = log_field (fields, n_fields, "MESSAGE");

      g_mutex_lock (&plugin_log_lock);
      g_ptr_array_add (plugin_log, g_strdup_printf ("%s|%s|%s|%s|%d", domain,
                                                    plugin != NULL ? plugin : "(none)",
                                                    func != NULL ? func : "(none)",
                                                    message != NULL ? message : "(none)",
                                                    level & G_LOG_LEVEL_MASK));
      g_mutex_unlock (&plugin_log_lock);
      return G_LOG_WRITER_HANDLED;
    }
  return g_log_writer_default (level, fields, n_fields, user_data);
}

static gboolean
plugin_log_has (const gchar *line)
{
  gboolean found;

  g_mutex_lock (&plugin_log_lock);
  found = g_ptr_array_find_with_equal_func (plugin_log, line, g_str_equal, NULL);
  g_mutex_unlock (&plugin_log_lock);
  return found;
}

/* A plugin's message reaches GLib's structured log under its own domain,
 * with its name and where it comes from; the library's optimizer plugins
 * say which kernels they chose. */
static void
test_registry_plugin_log (void)
{
  g_autoptr(MixprecRegistry) registry = NULL;
  g_autoptr(MixprecRegistry) optimizers = NULL;
  g_autofree gchar *expected = g_strdup_printf ("Mixprec-test-good|test-good|good_init|"
                                                "registered testopt and otheropt?|%d",
                                                G_LOG_LEVEL_INFO);
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *libs = top != NULL ? g_build_filename (top, "plugins", ".libs", NULL) : NULL;
  const gchar *paths[] = { libs, NULL };
  gboolean chose = FALSE;

  g_mutex_lock (&plugin_log_lock);
  g_ptr_array_set_size (plugin_log, 0);
  g_mutex_unlock (&plugin_log_lock);

  registry = test_plugins_registry ();
  for (guint i = 0; i < plugin_log->len; i++)
    g_test_message ("plugin log: %s", (const gchar *) g_ptr_array_index (plugin_log, i));
  g_assert_true (plugin_log_has (expected));

  /* The optimizer plugins' init() names the kernels it registered. */
  if (libs == NULL || !g_file_test (libs, G_FILE_TEST_IS_DIR))
    {
      g_test_skip ("MIXPREC_TOP_BUILDDIR is set by make check, after the plugins are built");
      return;
    }
  optimizers = mixprec_registry_new_for_paths (paths, FALSE);
  g_mutex_lock (&plugin_log_lock);
  for (guint i = 0; i < plugin_log->len; i++)
    if (g_str_has_prefix (g_ptr_array_index (plugin_log, i), "Mixprec-optim-adamw|optim-adamw|") &&
        strstr (g_ptr_array_index (plugin_log, i), "optimizer adamw (cpu): ") != NULL)
      chose = TRUE;
  g_mutex_unlock (&plugin_log_lock);
  g_assert_true (chose);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  plugin_log = g_ptr_array_new_with_free_func (g_free);
  g_log_set_writer_func (record_plugin_log, NULL, NULL);

  g_test_add_func ("/registry/v1-optimizer-shim", test_registry_v1_optimizer_shim);
  g_test_add_func ("/registry/v1-comm", test_registry_v1_comm);
  g_test_add_func ("/registry/v3-vtable-check", test_registry_v3_vtable_check);
  g_test_add_func ("/registry/v3-step-compat", test_registry_v3_step_compat);
  g_test_add_func ("/registry/plugin-log", test_registry_plugin_log);
  g_test_add_func ("/registry/plugin-name", test_registry_plugin_name);
  g_test_add_func ("/registry/good-plugin", test_registry_good_plugin);
  g_test_add_func ("/registry/broken-plugins", test_registry_broken_plugins);
  g_test_add_func ("/registry/not-modules", test_registry_not_modules);
  g_test_add_func ("/registry/duplicates", test_registry_duplicates);
  g_test_add_func ("/registry/one-level", test_registry_one_level);
  g_test_add_func ("/registry/untrusted", test_registry_untrusted);
  g_test_add_func ("/registry/bad-descriptions", test_registry_bad_descriptions);
  g_test_add_func ("/registry/relative-entries", test_registry_relative_entries);
  g_test_add_func ("/registry/system-path", test_registry_system_path);
  g_test_add_func ("/registry/rank", test_registry_rank);
  g_test_add_func ("/registry/lookup-errors", test_registry_lookup_errors);
  g_test_add_func ("/registry/vtable-check", test_registry_vtable_check);
  g_test_add_func ("/registry/optimizer-step", test_registry_optimizer_step);
  g_test_add_func ("/registry/comm-vtable-check", test_registry_comm_vtable_check);
  g_test_add_func ("/registry/comm-plugin", test_registry_comm_plugin);
  g_test_add_func ("/registry/builtin", test_registry_builtin);
  g_test_add_func ("/registry/default/threads", test_registry_default_threads);
  g_test_add_func ("/registry/default/build-tree", test_registry_default_build_tree);

  return g_test_run ();
}
