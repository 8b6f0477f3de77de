/* test-security-plugins.c — the attacks on plugin loading of issue 25,
 * replayed against the default registry (built from the environment, in a
 * child process) and against tools/mixprec-inspect: a relative plugin
 * path, a world-writable plugin file, a plugin in a subfolder of a listed
 * folder, a description that is a stray pointer, and a broken file named
 * like a working plugin. Each expectation is what the attack must not
 * achieve: no foreign code loaded, no crash, nothing hidden. */
#include "config.h"

#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

/* A plugin file of the build tree's tests/ folder, e.g. ("plugins", "test-good"). */
static gchar *
built_plugin (const gchar *folder,
              const gchar *name)
{
  g_autofree gchar *base = g_strdup_printf ("mixprec-%s.so", name);

  return g_test_build_filename (G_TEST_BUILT, folder, ".libs", base, NULL);
}

/* Copies a built plugin to @dir/@base (a copy, not a link: the attacks
 * need files whose mode and place the test controls). */
static gchar *
copy_plugin (const gchar *name,
             const gchar *dir,
             const gchar *base)
{
  g_autofree gchar *source = built_plugin ("plugins", name);
  g_autofree gchar *contents = NULL;
  g_autoptr(GError) error = NULL;
  gchar *dest = g_build_filename (dir, base, NULL);
  gsize length;

  g_file_get_contents (source, &contents, &length, &error);
  g_assert_no_error (error);
  g_file_set_contents (dest, contents, (gssize) length, &error);
  g_assert_no_error (error);
  g_assert_no_errno (g_chmod (dest, 0755));
  return dest;
}

static gchar *
make_temp_dir (void)
{
  g_autoptr(GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("mixprec-security-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

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

      g_chmod (path, 0700);
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

/* The output of one run of tools/mixprec-inspect. */
typedef struct
{
  gchar *out;
  gchar *err;
  gint status;                  /* a wait status */
} Run;

static void
run_clear (Run *run)
{
  g_free (run->out);
  g_free (run->err);
}

G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (Run, run_clear)

/* Runs mixprec-inspect [@arg] in @cwd with MIXPREC_PLUGIN_PATH=@plugin_path
 * and no system plugin directory, and checks that it was not killed by a
 * signal: whatever the plugins are, the tool must finish. */
static void
inspect (Run         *run,
         const gchar *cwd,
         const gchar *plugin_path,
         const gchar *arg)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autofree gchar *tool = NULL;
  g_auto(GStrv) env = g_get_environ ();
  const gchar *argv[] = { NULL, arg, NULL };
  g_autoptr(GError) error = NULL;

  g_assert_nonnull (top);
  tool = g_build_filename (top, "tools", "mixprec-inspect", NULL);
  argv[0] = tool;
  env = g_environ_setenv (env, "MIXPREC_PLUGIN_PATH", plugin_path, TRUE);
  env = g_environ_setenv (env, "MIXPREC_PLUGIN_SYSTEM_PATH", "", TRUE);
  env = g_environ_unsetenv (env, "G_MESSAGES_DEBUG");

  g_spawn_sync (cwd, (gchar **) argv, env, G_SPAWN_DEFAULT, NULL, NULL,
                &run->out, &run->err, &run->status, &error);
  g_assert_no_error (error);
  g_test_message ("mixprec-inspect %s, MIXPREC_PLUGIN_PATH=%s:\n%s%s", arg != NULL ? arg : "",
                  plugin_path, run->out, run->err);
  g_assert_false (WIFSIGNALED (run->status));
  g_assert_true (WIFEXITED (run->status));
}

/* A plugin path relative to whatever the current directory is loads
 * nothing, even from a directory that holds a valid plugin. */
static void
test_security_relative_path (void)
{
  g_autofree gchar *cwd = make_temp_dir ();
  g_autofree gchar *rel = g_build_filename (cwd, "relative", "dir", NULL);
  g_autofree gchar *plugin = NULL;

  g_assert_no_errno (g_mkdir_with_parents (rel, 0700));
  plugin = copy_plugin ("test-good", rel, "mixprec-test-good.so");

  if (g_test_subprocess ())
    {
      MixprecRegistry *registry;
      g_autoptr(MixprecPlugin) found = NULL;
      g_autoptr(GError) error = NULL;

      /* Warnings are fatal in tests; this one must reach stderr. */
      g_log_set_always_fatal (G_LOG_FATAL_MASK);
      g_assert_no_errno (chdir (cwd));
      g_setenv ("MIXPREC_PLUGIN_PATH", "relative/dir", TRUE);
      g_setenv ("MIXPREC_PLUGIN_SYSTEM_PATH", "", TRUE);
      registry = mixprec_registry_get_default ();
      found = mixprec_registry_find_plugin (registry, "test-good", &error);
      g_assert_null (found);
      g_assert_error (error, MIXPREC_PLUGIN_ERROR, MIXPREC_PLUGIN_ERROR_NOT_FOUND);
      g_assert_null (mixprec_registry_get_failures (registry));
      remove_tree (cwd);
      return;
    }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_passed ();
  g_test_trap_assert_stderr ("*MIXPREC_PLUGIN_PATH: relative entry 'relative/dir' ignored: "
                             "plugin directories must be absolute paths*");

  {
    g_auto(Run) run = { NULL, };

    inspect (&run, cwd, "relative/dir", NULL);
    g_assert_cmpint (WEXITSTATUS (run.status), ==, 0);
    g_assert_null (strstr (run.out, "test-good"));
    g_assert_nonnull (strstr (run.err, "MIXPREC_PLUGIN_PATH: relative entry 'relative/dir' ignored"));
  }
  remove_tree (cwd);
}

/* A plugin file anyone may write is never opened: a warning names it and
 * mixprec-inspect lists it as not loaded, with the reason. */
static void
test_security_world_writable (void)
{
  g_autofree gchar *dir = make_temp_dir ();
  g_autofree gchar *plugin = copy_plugin ("test-good", dir, "mixprec-test-good.so");
  g_autofree gchar *expected = g_strdup_printf ("%s: plugin file not opened: it is writable "
                                                "by others (mode 0777)", plugin);
  g_auto(Run) run = { NULL, };

  g_assert_no_errno (g_chmod (plugin, 0777));
  inspect (&run, dir, dir, NULL);
  g_assert_cmpint (WEXITSTATUS (run.status), ==, 0);
  g_assert_null (strstr (run.out, "testopt"));
  g_assert_nonnull (strstr (run.out, "Failed to load: 1 plugin"));
  g_assert_nonnull (strstr (run.out, expected));
  g_assert_nonnull (strstr (run.err, expected));
  remove_tree (dir);
}

/* A plugin in a subfolder of a listed folder is not loaded. */
static void
test_security_subfolder (void)
{
  g_autofree gchar *dir = make_temp_dir ();
  g_autofree gchar *sub = g_build_filename (dir, "sub", NULL);
  g_autofree gchar *plugin = NULL;
  g_auto(Run) run = { NULL, };

  g_assert_no_errno (g_mkdir (sub, 0700));
  plugin = copy_plugin ("test-good", sub, "mixprec-test-good.so");
  inspect (&run, dir, dir, NULL);
  g_assert_cmpint (WEXITSTATUS (run.status), ==, 0);
  g_assert_null (strstr (run.out, "test-good"));
  g_assert_nonnull (strstr (run.out, "No plugin files were found in"));
  remove_tree (dir);
}

/* An entry point that returns (void *) 1 crashed mixprec-inspect; now the
 * plugin is listed as broken and the tool exits normally. */
static void
test_security_bad_descriptor (void)
{
  g_autofree gchar *dir = g_test_build_filename (G_TEST_BUILT, "desc-plugins", NULL);
  g_autofree gchar *file = built_plugin ("desc-plugins", "test-bad-ptr");
  g_autofree gchar *reason = g_strdup_printf ("%s: mixprec_plugin_test_bad_ptr_get_desc() "
                                              "returned 0x1, which is not readable memory "
                                              "of the plugin", file);

  {
    g_auto(Run) run = { NULL, };

    inspect (&run, dir, dir, NULL);
    g_assert_cmpint (WEXITSTATUS (run.status), ==, 0);
    g_assert_nonnull (strstr (run.out, "Failed to load: 7 plugins"));
    g_assert_nonnull (strstr (run.out, reason));
    /* The escape sequence of test-bad-name never reaches the terminal. */
    g_assert_null (strchr (run.out, '\033'));
    g_assert_null (strchr (run.err, '\033'));
  }
  {
    g_auto(Run) run = { NULL, };

    /* The details of a plugin that failed: printed, status 1 as for any
     * plugin that did not load. */
    inspect (&run, dir, dir, "test-bad-ptr");
    g_assert_cmpint (WEXITSTATUS (run.status), ==, 1);
    g_assert_nonnull (strstr (run.out, "failed to load"));
    g_assert_nonnull (strstr (run.out, reason));
  }
}

/* A broken file that takes a working plugin's name, earlier in the path,
 * does not hide it. */
static void
test_security_broken_does_not_hide (void)
{
  g_autofree gchar *top = make_temp_dir ();
  g_autofree gchar *first = g_build_filename (top, "first", NULL);
  g_autofree gchar *second = g_build_filename (top, "second", NULL);
  g_autofree gchar *broken = NULL;
  g_autofree gchar *good = NULL;
  g_autofree gchar *path = NULL;
  g_auto(Run) run = { NULL, };

  g_assert_no_errno (g_mkdir (first, 0700));
  g_assert_no_errno (g_mkdir (second, 0700));
  broken = copy_plugin ("test-unrelated", first, "mixprec-test-good.so");
  good = copy_plugin ("test-good", second, "mixprec-test-good.so");
  path = g_strjoin (":", first, second, NULL);

  inspect (&run, top, path, NULL);
  g_assert_cmpint (WEXITSTATUS (run.status), ==, 0);
  g_assert_nonnull (strstr (run.out, "test-good:  testopt (optimizer, cpu, rank 100)"));
  g_assert_nonnull (strstr (run.out, "Failed to load: 1 plugin"));
  g_assert_nonnull (strstr (run.out, broken));
  g_clear_pointer (&run.out, g_free);
  g_clear_pointer (&run.err, g_free);

  /* Its details are the working plugin's. */
  inspect (&run, top, path, "test-good");
  g_assert_cmpint (WEXITSTATUS (run.status), ==, 0);
  g_assert_nonnull (strstr (run.out, good));
  g_assert_nonnull (strstr (run.out, "loaded"));
  remove_tree (top);
}

int
main (int    argc,
      char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/security/plugins/relative-path", test_security_relative_path);
  g_test_add_func ("/security/plugins/world-writable", test_security_world_writable);
  g_test_add_func ("/security/plugins/subfolder", test_security_subfolder);
  g_test_add_func ("/security/plugins/bad-descriptor", test_security_bad_descriptor);
  g_test_add_func ("/security/plugins/broken-does-not-hide", test_security_broken_does_not_hide);
  return g_test_run ();
}
