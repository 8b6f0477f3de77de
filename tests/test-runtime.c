/* test-runtime.c — version queries agree with the headers and with the
 * version configure was given. */
#include <mixprec/mixprec.h>

static void
test_runtime_version_matches_headers (void)
{
  g_autofree gchar *s = NULL;

  g_assert_cmpuint (mixprec_get_major_version (), ==, MIXPREC_MAJOR_VERSION);
  g_assert_cmpuint (mixprec_get_minor_version (), ==, MIXPREC_MINOR_VERSION);
  g_assert_cmpuint (mixprec_get_micro_version (), ==, MIXPREC_MICRO_VERSION);
  s = g_strdup_printf ("%u.%u.%u", mixprec_get_major_version (),
                       mixprec_get_minor_version (), mixprec_get_micro_version ());
  g_assert_cmpstr (s, ==, MIXPREC_VERSION_S);
}

static void
test_runtime_check_version (void)
{
  g_assert_null (mixprec_check_version (MIXPREC_MAJOR_VERSION, 0, 0));
  g_assert_null (mixprec_check_version (MIXPREC_MAJOR_VERSION, MIXPREC_MINOR_VERSION,
                                        MIXPREC_MICRO_VERSION));
  g_assert_nonnull (mixprec_check_version (MIXPREC_MAJOR_VERSION + 1, 0, 0));
  g_assert_nonnull (mixprec_check_version (MIXPREC_MAJOR_VERSION, MIXPREC_MINOR_VERSION + 1, 0));
  g_assert_nonnull (mixprec_check_version (MIXPREC_MAJOR_VERSION, MIXPREC_MINOR_VERSION,
                                           MIXPREC_MICRO_VERSION + 1));
  g_assert_true (MIXPREC_CHECK_VERSION (1, 0, 0));
  g_assert_false (MIXPREC_CHECK_VERSION (MIXPREC_MAJOR_VERSION + 1, 0, 0));
}

static void
test_runtime_simd_and_threads (void)
{
  const gchar *simd = mixprec_get_simd_name ();

  g_assert_true (g_str_equal (simd, "avx512") || g_str_equal (simd, "avx2") ||
                 g_str_equal (simd, "scalar"));
  g_assert_cmpuint (mixprec_get_num_threads (), >=, 1);
  if (g_getenv ("MIXPREC_NUM_THREADS") == NULL)
    g_assert_cmpuint (mixprec_get_num_threads (), ==, g_get_num_processors ());
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/runtime/version-matches-headers", test_runtime_version_matches_headers);
  g_test_add_func ("/runtime/check-version", test_runtime_check_version);
  g_test_add_func ("/runtime/simd-and-threads", test_runtime_simd_and_threads);
  return g_test_run ();
}
