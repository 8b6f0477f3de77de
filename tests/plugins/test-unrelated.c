/* test-unrelated.c — an ordinary shared object that happens to be named
 * like a plugin (mixprec-test-unrelated.so): it loads, but is no plugin. */

int mixprec_test_unrelated_add (int a, int b);

int
mixprec_test_unrelated_add (int a,
                            int b)
{
  return a + b;
}
