/* test-fp8-recipe.c — FP8 recipes and scalings: delayed-scaling scale
 * sequences against a second, independent formulation of Transformer
 * Engine's algorithm (a time-ordered window instead of a rolled buffer,
 * double-precision arithmetic rounded once to single), current and MX
 * scaling, argument checks and state round trips. */
#include <float.h>
#include <math.h>
#include <string.h>

#include <mixprec/mixprec.h>

/* ---------------------------------------------------------------- reference */

/* The amaxes recorded before each update, oldest first. */
typedef struct {
  guint n;                 /* history length */
  gboolean use_max;
  gint margin;
  gdouble fp8_max;
  GArray *recorded;        /* gfloat per finished step */
  gfloat pending;          /* recorded since the last update */
  gfloat scale;
} Reference;

static void
reference_init (Reference *ref, guint n, gboolean use_max, gint margin, gdouble fp8_max)
{
  ref->n = n;
  ref->use_max = use_max;
  ref->margin = margin;
  ref->fp8_max = fp8_max;
  ref->recorded = g_array_new (FALSE, FALSE, sizeof (gfloat));
  ref->pending = 0.0f;
  ref->scale = 1.0f;
}

static void
reference_clear (Reference *ref)
{
  g_array_unref (ref->recorded);
}

static void
reference_record (Reference *ref, gfloat amax)
{
  if (isnan (amax) || isnan (ref->pending))
    ref->pending = NAN;
  else
    ref->pending = MAX (ref->pending, amax);
}

/* The window of an update is this step's amax and the n-1 before it. */
static void
reference_update (Reference *ref)
{
  guint len;
  gfloat amax = ref->pending;

  g_array_append_val (ref->recorded, ref->pending);
  ref->pending = 0.0f;
  len = ref->recorded->len;

  if (ref->use_max)
    for (guint k = 1; k < ref->n && k < len; k++)
      {
        gfloat a = g_array_index (ref->recorded, gfloat, len - 1 - k);
        if (isnan (a))
          amax = NAN;
        else if (!isnan (amax) && a > amax)
          amax = a;
      }

  if (amax > 0.0f && isfinite (amax))
    {
      /* Division rounded to double and then to single equals the
       * correctly rounded single division (53 >= 2 * 24 + 2); dividing by
       * 2^margin in double is exact. */
      gfloat q = (gfloat) (ref->fp8_max / (gdouble) amax);
      gfloat s = (gfloat) ((gdouble) q / ldexp (1.0, ref->margin));

      if (isinf (s))
        ref->scale = FLT_MAX;
      else if (s != 0.0f)
        ref->scale = s;
    }
}

/* The history TE's layout gives after the updates so far: slot 0 empty,
 * slot n-1 the newest, slot 1 the oldest still in the window. */
static gfloat
reference_history_slot (Reference *ref, guint slot)
{
  guint len = ref->recorded->len;
  guint back;

  if (slot == 0)
    return ref->pending;
  back = ref->n - 1 - slot;      /* 0: newest */
  if (back >= len)
    return 0.0f;
  return g_array_index (ref->recorded, gfloat, len - 1 - back);
}

static guint32
bits (gfloat f)
{
  guint32 u;
  memcpy (&u, &f, sizeof u);
  return u;
}

/* Random amaxes, with the awkward ones mixed in. */
static gfloat
random_amax (GRand *rand)
{
  switch (g_rand_int_range (rand, 0, 20))
    {
    case 0:
      return 0.0f;
    case 1:
      return INFINITY;
    case 2:
      return NAN;
    case 3:
      return 1e-40f;                 /* subnormal: the quotient overflows */
    case 4:
      return FLT_TRUE_MIN;
    case 5:
      return FLT_MAX;
    case 6:
      return ldexpf ((gfloat) g_rand_double (rand) + 0.5f, g_rand_int_range (rand, -126, -100));
    default:
      return ldexpf ((gfloat) g_rand_double_range (rand, 0.5, 1.0), g_rand_int_range (rand, -20, 20));
    }
}

static void
check_against_reference (MixprecFp8Format format, MixprecFp8Role role, guint n,
                         MixprecFp8AmaxAlgo algo, gint margin, guint32 seed, guint steps)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFp8Recipe) recipe = mixprec_fp8_recipe_new_delayed (format, n, algo, margin, &error);
  g_autoptr(MixprecFp8Scaling) s = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);
  gdouble fp8_max;
  Reference ref;

  g_assert_no_error (error);
  s = mixprec_fp8_recipe_new_scaling (recipe, role);
  fp8_max = mixprec_dtype_get_max (mixprec_fp8_scaling_get_dtype (s));
  reference_init (&ref, n, algo == MIXPREC_FP8_AMAX_MAX, margin, fp8_max);

  for (guint step = 0; step < steps; step++)
    {
      guint records = g_rand_int_range (rand, 0, 4);
      const gfloat *history;
      guint len;

      for (guint r = 0; r < records; r++)
        {
          gfloat a = random_amax (rand);
          mixprec_fp8_scaling_record_amax (s, a);
          reference_record (&ref, a);
        }
      g_assert_true (mixprec_fp8_scaling_update (s, &error));
      g_assert_no_error (error);
      reference_update (&ref);

      if (bits (mixprec_fp8_scaling_get_scale (s)) != bits (ref.scale))
        g_error ("n=%u algo=%d margin=%d step %u: scale %a, expected %a",
                 n, algo, margin, step, mixprec_fp8_scaling_get_scale (s), ref.scale);
      g_assert_cmpuint (bits (mixprec_fp8_scaling_get_scale_inv (s)), ==, bits (1.0f / ref.scale));

      history = mixprec_fp8_scaling_get_amax_history (s, &len);
      g_assert_cmpuint (len, ==, n);
      for (guint i = 0; i < n; i++)
        if (bits (history[i]) != bits (reference_history_slot (&ref, i)))
          g_error ("n=%u step %u: history[%u] = %g, expected %g",
                   n, step, i, history[i], reference_history_slot (&ref, i));
    }
  reference_clear (&ref);
}

/* ---------------------------------------------------------------- delayed */

static void
test_delayed_known_values (void)
{
  g_autoptr(MixprecFp8Recipe) recipe =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 3, MIXPREC_FP8_AMAX_MAX, 0, NULL);
  g_autoptr(MixprecFp8Scaling) fwd = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_FORWARD);
  g_autoptr(MixprecFp8Scaling) bwd = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_BACKWARD);
  /* amax recorded per step, and the scale expected after it (by hand:
   * 448 / window max for E4M3; the window holds 3 steps). */
  const gfloat amaxes[] = { 0.0f, 2.0f, 7.0f, 1.0f, 1.0f, 0.5f, INFINITY, 0.25f };
  const gfloat fwd_expected[] = { 1.0f, 224.0f, 64.0f, 64.0f, 64.0f, 448.0f, 448.0f, 448.0f };
  const gfloat bwd_expected[] = { 1.0f, 28672.0f, 8192.0f, 8192.0f, 8192.0f, 57344.0f, 57344.0f, 57344.0f };

  g_assert_cmpint (mixprec_fp8_scaling_get_dtype (fwd), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  g_assert_cmpint (mixprec_fp8_scaling_get_dtype (bwd), ==, MIXPREC_DTYPE_FLOAT8_E5M2);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (fwd), ==, 1.0f);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale_inv (fwd), ==, 1.0f);

  for (guint i = 0; i < G_N_ELEMENTS (amaxes); i++)
    {
      mixprec_fp8_scaling_record_amax (fwd, amaxes[i]);
      mixprec_fp8_scaling_record_amax (bwd, amaxes[i]);
      g_assert_true (mixprec_fp8_scaling_update (fwd, NULL));
      g_assert_true (mixprec_fp8_scaling_update (bwd, NULL));
      g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (fwd), ==, fwd_expected[i]);
      g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (bwd), ==, bwd_expected[i]);
    }
}

static void
test_delayed_roll_layout (void)
{
  g_autoptr(MixprecFp8Recipe) recipe =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_E4M3, 4, MIXPREC_FP8_AMAX_MOST_RECENT, 0, NULL);
  g_autoptr(MixprecFp8Scaling) s = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_BACKWARD);
  /* torch.roll (h, -1) then h[0] = 0, written out by hand. */
  const gfloat expected[][4] = {
    { 0, 0, 0, 1 },
    { 0, 0, 1, 2 },
    { 0, 1, 2, 3 },
    { 0, 2, 3, 4 },
    { 0, 3, 4, 5 },
  };
  const gfloat *h;
  guint n;

  g_assert_cmpint (mixprec_fp8_scaling_get_dtype (s), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  for (guint step = 0; step < G_N_ELEMENTS (expected); step++)
    {
      mixprec_fp8_scaling_record_amax (s, (gfloat) (step + 1));
      h = mixprec_fp8_scaling_get_amax_history (s, &n);
      g_assert_cmpuint (n, ==, 4);
      g_assert_cmpfloat (h[0], ==, (gfloat) (step + 1));
      g_assert_true (mixprec_fp8_scaling_update (s, NULL));
      h = mixprec_fp8_scaling_get_amax_history (s, &n);
      for (guint i = 0; i < 4; i++)
        g_assert_cmpfloat (h[i], ==, expected[step][i]);
      /* most_recent: 448 / this step's amax */
      g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 448.0f / (gfloat) (step + 1));
    }
}

static void
test_delayed_edge_amaxes (void)
{
  g_autoptr(MixprecFp8Recipe) recipe =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 1, MIXPREC_FP8_AMAX_MAX, 0, NULL);
  g_autoptr(MixprecFp8Recipe) margin3 =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 1, MIXPREC_FP8_AMAX_MAX, 3, NULL);
  g_autoptr(MixprecFp8Recipe) big_margin =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 1, MIXPREC_FP8_AMAX_MAX, 64, NULL);
  g_autoptr(MixprecFp8Scaling) s = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_FORWARD);
  g_autoptr(MixprecFp8Scaling) m = mixprec_fp8_recipe_new_scaling (margin3, MIXPREC_FP8_ROLE_FORWARD);
  g_autoptr(MixprecFp8Scaling) b = mixprec_fp8_recipe_new_scaling (big_margin, MIXPREC_FP8_ROLE_FORWARD);

  mixprec_fp8_scaling_record_amax (s, 4.0f);
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 112.0f);

  /* zero, Inf and NaN keep the scale */
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 112.0f);
  mixprec_fp8_scaling_record_amax (s, INFINITY);
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 112.0f);
  mixprec_fp8_scaling_record_amax (s, NAN);
  mixprec_fp8_scaling_record_amax (s, 1.0f);   /* NaN wins over a later amax */
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 112.0f);

  /* -0 is an amax of 0: slot 0 stays +0 */
  mixprec_fp8_scaling_record_amax (s, -0.0f);
  {
    guint n;
    const gfloat *h = mixprec_fp8_scaling_get_amax_history (s, &n);
    g_assert_cmpuint (bits (h[0]), ==, 0);
  }
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 112.0f);

  /* an amax so small that 448 / amax overflows: FLT_MAX */
  mixprec_fp8_scaling_record_amax (s, 1e-40f);
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, FLT_MAX);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale_inv (s), ==, 1.0f / FLT_MAX);

  /* margin 3: 448 / 7 / 8 = 8 */
  mixprec_fp8_scaling_record_amax (m, 7.0f);
  mixprec_fp8_scaling_update (m, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (m), ==, 8.0f);

  /* margin 64 with amax FLT_MAX: the quotient 448 / FLT_MAX / 2^64
   * underflows to 0, and the scale is kept */
  mixprec_fp8_scaling_record_amax (b, FLT_MAX);
  mixprec_fp8_scaling_update (b, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (b), ==, 1.0f);
  /* a subnormal quotient is kept as it is */
  mixprec_fp8_scaling_record_amax (b, 0x1p80f);
  mixprec_fp8_scaling_update (b, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (b), ==, 0x1.cp-136f);
  g_assert_true (isinf (mixprec_fp8_scaling_get_scale_inv (b)));
}

static void
test_delayed_sequences (void)
{
  const guint lengths[] = { 1, 2, 3, 16, 1024 };
  const gint margins[] = { 0, 1, -2, 5 };
  guint32 seed = 1;

  for (guint l = 0; l < G_N_ELEMENTS (lengths); l++)
    for (guint algo = 0; algo < 2; algo++)
      for (guint m = 0; m < G_N_ELEMENTS (margins); m++)
        for (guint role = 0; role < 2; role++)
          check_against_reference (MIXPREC_FP8_FORMAT_HYBRID, role, lengths[l], algo,
                                   margins[m], seed++, lengths[l] == 1024 ? 2500 : 400);
}

static void
count_notify (GObject *object, GParamSpec *pspec, gpointer user_data)
{
  (*(guint *) user_data)++;
}

static void
test_delayed_notify (void)
{
  g_autoptr(MixprecFp8Recipe) recipe =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 2, MIXPREC_FP8_AMAX_MAX, 0, NULL);
  g_autoptr(MixprecFp8Scaling) s = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_FORWARD);
  guint notified = 0;
  gfloat prop = 0;

  g_signal_connect (s, "notify::scale", G_CALLBACK (count_notify), &notified);
  mixprec_fp8_scaling_record_amax (s, 2.0f);
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpuint (notified, ==, 1);
  g_object_get (s, "scale", &prop, NULL);
  g_assert_cmpfloat (prop, ==, 224.0f);
  /* the window still holds 2: the scale stays, no notification */
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpuint (notified, ==, 1);
  g_assert_true (mixprec_fp8_scaling_get_recipe (s) == recipe);
  g_assert_cmpint (mixprec_fp8_scaling_get_role (s), ==, MIXPREC_FP8_ROLE_FORWARD);
}

/* ---------------------------------------------------------------- current */

static void
test_current_scaling (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFp8Recipe) recipe = mixprec_fp8_recipe_new_current (MIXPREC_FP8_FORMAT_HYBRID, 0, &error);
  g_autoptr(MixprecFp8Recipe) margin1 = mixprec_fp8_recipe_new_current (MIXPREC_FP8_FORMAT_E4M3, 1, &error);
  g_autoptr(MixprecFp8Scaling) s = NULL;
  g_autoptr(MixprecFp8Scaling) m = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (77);
  const gfloat *h;
  guint n;
  Reference ref;

  g_assert_no_error (error);
  g_assert_cmpint (mixprec_fp8_recipe_get_kind (recipe), ==, MIXPREC_FP8_RECIPE_CURRENT);
  g_assert_cmpuint (mixprec_fp8_recipe_get_amax_history_len (recipe), ==, 1);
  g_assert_cmpuint (mixprec_fp8_recipe_get_block_size (recipe), ==, 0);
  g_assert_cmpint (mixprec_fp8_recipe_get_margin (margin1), ==, 1);

  s = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_BACKWARD);
  m = mixprec_fp8_recipe_new_scaling (margin1, MIXPREC_FP8_ROLE_BACKWARD);
  g_assert_cmpint (mixprec_fp8_scaling_get_dtype (m), ==, MIXPREC_DTYPE_FLOAT8_E4M3);

  /* the amax of the tensor about to be cast, in two parts */
  mixprec_fp8_scaling_record_amax (s, 3.0f);
  mixprec_fp8_scaling_record_amax (s, 5.0f);
  h = mixprec_fp8_scaling_get_amax_history (s, &n);
  g_assert_cmpuint (n, ==, 1);
  g_assert_cmpfloat (h[0], ==, 5.0f);
  g_assert_true (mixprec_fp8_scaling_update (s, NULL));
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 57344.0f / 5.0f);
  h = mixprec_fp8_scaling_get_amax_history (s, &n);
  g_assert_cmpfloat (h[0], ==, 0.0f);
  /* a zero tensor keeps the scale */
  mixprec_fp8_scaling_record_amax (s, 0.0f);
  mixprec_fp8_scaling_update (s, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 57344.0f / 5.0f);

  mixprec_fp8_scaling_record_amax (m, 3.0f);
  mixprec_fp8_scaling_update (m, NULL);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (m), ==, (448.0f / 3.0f) / 2.0f);

  /* current scaling is a window of one: the same reference */
  g_clear_object (&s);
  s = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_FORWARD);
  reference_init (&ref, 1, TRUE, 0, 448.0);
  for (guint step = 0; step < 500; step++)
    {
      gfloat a = random_amax (rand);

      mixprec_fp8_scaling_record_amax (s, a);
      reference_record (&ref, a);
      mixprec_fp8_scaling_update (s, NULL);
      reference_update (&ref);
      g_assert_cmpuint (bits (mixprec_fp8_scaling_get_scale (s)), ==, bits (ref.scale));
    }
  reference_clear (&ref);
}

/* ---------------------------------------------------------------- MX */

static void
test_mx_scaling (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecFp8Recipe) recipe = mixprec_fp8_recipe_new_mx (MIXPREC_FP8_FORMAT_E4M3, 32, &error);
  g_autoptr(MixprecFp8Scaling) s = NULL;
  g_autoptr(GVariant) before = NULL;
  g_autoptr(GVariant) after = NULL;
  g_autoptr(GBytes) bytes = NULL;
  guint n = 99;

  g_assert_no_error (error);
  g_assert_cmpint (mixprec_fp8_recipe_get_kind (recipe), ==, MIXPREC_FP8_RECIPE_MX);
  g_assert_cmpuint (mixprec_fp8_recipe_get_block_size (recipe), ==, 32);
  g_assert_cmpuint (mixprec_fp8_recipe_get_amax_history_len (recipe), ==, 0);
  g_assert_cmpint (mixprec_fp8_recipe_get_margin (recipe), ==, 0);
  g_assert_true (mixprec_fp8_recipe_get_saturate (recipe));

  s = mixprec_fp8_recipe_new_scaling (recipe, MIXPREC_FP8_ROLE_BACKWARD);
  g_assert_cmpint (mixprec_fp8_scaling_get_dtype (s), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  before = mixprec_fp8_scaling_save_state (s);
  mixprec_fp8_scaling_record_amax (s, 3.0f);
  g_assert_true (mixprec_fp8_scaling_update (s, &error));
  g_assert_no_error (error);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (s), ==, 1.0f);
  g_assert_cmpfloat (mixprec_fp8_scaling_get_scale_inv (s), ==, 1.0f);
  g_assert_null (mixprec_fp8_scaling_get_amax_history (s, &n));
  g_assert_cmpuint (n, ==, 0);
  bytes = mixprec_fp8_scaling_dup_amax_history (s);
  g_assert_cmpuint (g_bytes_get_size (bytes), ==, 0);
  after = mixprec_fp8_scaling_save_state (s);
  g_assert_true (g_variant_equal (before, after));
}

/* ---------------------------------------------------------------- recipes */

static void
test_recipe_getters (void)
{
  g_autoptr(MixprecFp8Recipe) d =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_E4M3, 16, MIXPREC_FP8_AMAX_MOST_RECENT, -3, NULL);
  g_autoptr(MixprecFp8Recipe) h = mixprec_fp8_recipe_new_mx (MIXPREC_FP8_FORMAT_HYBRID, 32, NULL);
  g_autoptr(MixprecFp8Recipe) plain = g_object_new (MIXPREC_TYPE_FP8_RECIPE, "saturate", FALSE, NULL);

  g_assert_cmpint (mixprec_fp8_recipe_get_kind (d), ==, MIXPREC_FP8_RECIPE_DELAYED);
  g_assert_cmpint (mixprec_fp8_recipe_get_format (d), ==, MIXPREC_FP8_FORMAT_E4M3);
  g_assert_cmpuint (mixprec_fp8_recipe_get_amax_history_len (d), ==, 16);
  g_assert_cmpint (mixprec_fp8_recipe_get_amax_compute_algo (d), ==, MIXPREC_FP8_AMAX_MOST_RECENT);
  g_assert_cmpint (mixprec_fp8_recipe_get_margin (d), ==, -3);
  g_assert_cmpuint (mixprec_fp8_recipe_get_block_size (d), ==, 0);
  g_assert_true (mixprec_fp8_recipe_get_saturate (d));
  g_assert_cmpint (mixprec_fp8_recipe_get_dtype (d, MIXPREC_FP8_ROLE_FORWARD), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  g_assert_cmpint (mixprec_fp8_recipe_get_dtype (d, MIXPREC_FP8_ROLE_BACKWARD), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  g_assert_cmpint (mixprec_fp8_recipe_get_dtype (h, MIXPREC_FP8_ROLE_FORWARD), ==, MIXPREC_DTYPE_FLOAT8_E4M3);
  g_assert_cmpint (mixprec_fp8_recipe_get_dtype (h, MIXPREC_FP8_ROLE_BACKWARD), ==, MIXPREC_DTYPE_FLOAT8_E5M2);

  /* Transformer Engine's DelayedScaling defaults */
  g_assert_cmpint (mixprec_fp8_recipe_get_kind (plain), ==, MIXPREC_FP8_RECIPE_DELAYED);
  g_assert_cmpint (mixprec_fp8_recipe_get_format (plain), ==, MIXPREC_FP8_FORMAT_HYBRID);
  g_assert_cmpuint (mixprec_fp8_recipe_get_amax_history_len (plain), ==, 1024);
  g_assert_cmpint (mixprec_fp8_recipe_get_amax_compute_algo (plain), ==, MIXPREC_FP8_AMAX_MAX);
  g_assert_cmpint (mixprec_fp8_recipe_get_margin (plain), ==, 0);
  g_assert_false (mixprec_fp8_recipe_get_saturate (plain));
}

static void
expect_invalid (MixprecFp8Recipe *recipe, GError *error, const gchar *fragment)
{
  g_assert_null (recipe);
  g_assert_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_OUT_OF_RANGE);
  if (strstr (error->message, fragment) == NULL)
    g_error ("“%s” does not mention “%s”", error->message, fragment);
}

static void
test_recipe_invalid (void)
{
  struct {
    MixprecFp8RecipeKind kind;
    gint format;
    guint len;
    gint algo;
    gint margin;
    guint block;
    const gchar *fragment;
  } cases[] = {
    { MIXPREC_FP8_RECIPE_DELAYED, 0, 0, 0, 0, 32, "amax_history_len" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, MIXPREC_FP8_MAX_AMAX_HISTORY_LEN + 1, 0, 0, 32, "amax_history_len" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, G_MAXUINT, 0, 0, 32, "amax_history_len" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, 8, 0, 65, 32, "margin" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, 8, 0, -65, 32, "margin" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, 8, 0, G_MININT, 32, "margin" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, 8, 2, 0, 32, "MixprecFp8AmaxAlgo" },
    { MIXPREC_FP8_RECIPE_DELAYED, 0, 8, -1, 0, 32, "MixprecFp8AmaxAlgo" },
    { MIXPREC_FP8_RECIPE_DELAYED, 2, 8, 0, 0, 32, "MixprecFp8Format" },
    { MIXPREC_FP8_RECIPE_CURRENT, 0, 1, 0, 100, 32, "margin" },
    { MIXPREC_FP8_RECIPE_CURRENT, 5, 1, 0, 0, 32, "MixprecFp8Format" },
    { MIXPREC_FP8_RECIPE_MX, 0, 1, 0, 0, 16, "block size" },
    { MIXPREC_FP8_RECIPE_MX, 0, 1, 0, 0, 0, "block size" },
    { MIXPREC_FP8_RECIPE_MX, 0, 1, 0, 0, 64, "block size" },
    { MIXPREC_FP8_RECIPE_MX, -1, 1, 0, 0, 32, "MixprecFp8Format" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(MixprecFp8Recipe) r = NULL;

      switch (cases[i].kind)
        {
        case MIXPREC_FP8_RECIPE_DELAYED:
          r = mixprec_fp8_recipe_new_delayed (cases[i].format, cases[i].len, cases[i].algo,
                                              cases[i].margin, &error);
          break;
        case MIXPREC_FP8_RECIPE_CURRENT:
          r = mixprec_fp8_recipe_new_current (cases[i].format, cases[i].margin, &error);
          break;
        case MIXPREC_FP8_RECIPE_MX:
        default:
          r = mixprec_fp8_recipe_new_mx (cases[i].format, cases[i].block, &error);
          break;
        }
      expect_invalid (r, error, cases[i].fragment);
    }

  /* the extremes that are allowed */
  {
    g_autoptr(MixprecFp8Recipe) a =
      mixprec_fp8_recipe_new_delayed (0, MIXPREC_FP8_MAX_AMAX_HISTORY_LEN, 1, MIXPREC_FP8_MAX_MARGIN, NULL);
    g_autoptr(MixprecFp8Recipe) b =
      mixprec_fp8_recipe_new_current (1, -MIXPREC_FP8_MAX_MARGIN, NULL);
    g_assert_nonnull (a);
    g_assert_nonnull (b);
  }
}

/* ---------------------------------------------------------------- state */

static MixprecFp8Scaling *
scaling_after_steps (MixprecFp8Recipe *recipe, MixprecFp8Role role, guint steps, guint32 seed)
{
  MixprecFp8Scaling *s = mixprec_fp8_recipe_new_scaling (recipe, role);
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);

  for (guint i = 0; i < steps; i++)
    {
      mixprec_fp8_scaling_record_amax (s, random_amax (rand));
      mixprec_fp8_scaling_update (s, NULL);
    }
  /* leave something pending in slot 0 */
  mixprec_fp8_scaling_record_amax (s, 0.75f);
  return s;
}

static void
test_state_round_trip (void)
{
  MixprecFp8Recipe *recipes[3] = {
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 7, MIXPREC_FP8_AMAX_MAX, 1, NULL),
    mixprec_fp8_recipe_new_current (MIXPREC_FP8_FORMAT_HYBRID, 0, NULL),
    mixprec_fp8_recipe_new_mx (MIXPREC_FP8_FORMAT_HYBRID, 32, NULL),
  };

  for (guint r = 0; r < G_N_ELEMENTS (recipes); r++)
    {
      g_autoptr(MixprecFp8Scaling) a = scaling_after_steps (recipes[r], MIXPREC_FP8_ROLE_BACKWARD, 23, 5);
      g_autoptr(MixprecFp8Scaling) b = mixprec_fp8_recipe_new_scaling (recipes[r], MIXPREC_FP8_ROLE_BACKWARD);
      g_autoptr(GVariant) state = mixprec_fp8_scaling_save_state (a);
      g_autoptr(GVariant) again = NULL;
      g_autoptr(GError) error = NULL;
      g_autoptr(GRand) rand = g_rand_new_with_seed (9);

      g_assert_true (g_variant_is_of_type (state, G_VARIANT_TYPE_VARDICT));
      g_assert_false (g_variant_is_floating (state));
      g_assert_true (mixprec_fp8_scaling_restore_state (b, state, &error));
      g_assert_no_error (error);
      again = mixprec_fp8_scaling_save_state (b);
      g_assert_true (g_variant_equal (state, again));

      /* both continue bit for bit */
      for (guint i = 0; i < 40; i++)
        {
          gfloat amax = random_amax (rand);
          const gfloat *ha, *hb;
          guint na, nb;

          mixprec_fp8_scaling_record_amax (a, amax);
          mixprec_fp8_scaling_record_amax (b, amax);
          mixprec_fp8_scaling_update (a, NULL);
          mixprec_fp8_scaling_update (b, NULL);
          g_assert_cmpuint (bits (mixprec_fp8_scaling_get_scale (a)), ==,
                            bits (mixprec_fp8_scaling_get_scale (b)));
          g_assert_cmpuint (bits (mixprec_fp8_scaling_get_scale_inv (a)), ==,
                            bits (mixprec_fp8_scaling_get_scale_inv (b)));
          ha = mixprec_fp8_scaling_get_amax_history (a, &na);
          hb = mixprec_fp8_scaling_get_amax_history (b, &nb);
          g_assert_cmpuint (na, ==, nb);
          if (na > 0)
            g_assert_cmpmem (ha, na * sizeof (gfloat), hb, nb * sizeof (gfloat));
        }
    }

  for (guint r = 0; r < G_N_ELEMENTS (recipes); r++)
    g_object_unref (recipes[r]);
}

static GVariant *
edit_state (GVariant *state, const gchar *key, GVariant *value)
{
  g_autoptr(GVariantDict) dict = g_variant_dict_new (state);

  if (value == NULL)
    g_variant_dict_remove (dict, key);
  else
    g_variant_dict_insert_value (dict, key, value);
  return g_variant_ref_sink (g_variant_dict_end (dict));
}

static void
test_state_rejected (void)
{
  g_autoptr(MixprecFp8Recipe) recipe =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 3, MIXPREC_FP8_AMAX_MAX, 0, NULL);
  g_autoptr(MixprecFp8Recipe) other_len =
    mixprec_fp8_recipe_new_delayed (MIXPREC_FP8_FORMAT_HYBRID, 4, MIXPREC_FP8_AMAX_MAX, 0, NULL);
  g_autoptr(MixprecFp8Recipe) current = mixprec_fp8_recipe_new_current (MIXPREC_FP8_FORMAT_HYBRID, 0, NULL);
  g_autoptr(MixprecFp8Recipe) mx = mixprec_fp8_recipe_new_mx (MIXPREC_FP8_FORMAT_HYBRID, 32, NULL);
  g_autoptr(MixprecFp8Scaling) target = scaling_after_steps (recipe, MIXPREC_FP8_ROLE_FORWARD, 4, 3);
  g_autoptr(MixprecFp8Scaling) source = scaling_after_steps (recipe, MIXPREC_FP8_ROLE_FORWARD, 9, 4);
  g_autoptr(MixprecFp8Scaling) bwd = scaling_after_steps (recipe, MIXPREC_FP8_ROLE_BACKWARD, 2, 4);
  g_autoptr(MixprecFp8Scaling) longer = scaling_after_steps (other_len, MIXPREC_FP8_ROLE_FORWARD, 2, 4);
  g_autoptr(MixprecFp8Scaling) cur = scaling_after_steps (current, MIXPREC_FP8_ROLE_FORWARD, 2, 4);
  g_autoptr(MixprecFp8Scaling) mxs = mixprec_fp8_recipe_new_scaling (mx, MIXPREC_FP8_ROLE_FORWARD);
  g_autoptr(GVariant) good = mixprec_fp8_scaling_save_state (source);
  g_autoptr(GVariant) before = mixprec_fp8_scaling_save_state (target);
  const gdouble negative[] = { 0.0, -1.0, 2.0 };
  const gdouble not_single[] = { 0.0, 0.1, 2.0 };
  struct {
    GVariant *state;
    const gchar *fragment;
  } cases[] = {
    { g_variant_ref_sink (g_variant_new_int32 (3)), "a{sv}" },
    { edit_state (good, "recipe", NULL), "“recipe”" },
    { edit_state (good, "dtype", NULL), "“dtype”" },
    { edit_state (good, "scale", NULL), "“scale”" },
    { edit_state (good, "amax_history", NULL), "“amax_history”" },
    { edit_state (good, "scale", g_variant_new_int32 (1)), "“scale”" },
    { edit_state (good, "amax_history", g_variant_new_string ("x")), "“amax_history”" },
    { edit_state (good, "recipe", g_variant_new_string ("current")), "“recipe”" },
    { edit_state (good, "dtype", g_variant_new_string ("float8_e5m2")), "“dtype”" },
    { edit_state (good, "scale", g_variant_new_double (0.0)), "“scale”" },
    { edit_state (good, "scale", g_variant_new_double (-2.0)), "“scale”" },
    { edit_state (good, "scale", g_variant_new_double (NAN)), "“scale”" },
    { edit_state (good, "scale", g_variant_new_double (INFINITY)), "“scale”" },
    { edit_state (good, "scale", g_variant_new_double (0.1)), "“scale”" },
    { edit_state (good, "scale", g_variant_new_double (1e300)), "“scale”" },
    { edit_state (good, "amax_history",
                  g_variant_new_fixed_array (G_VARIANT_TYPE_DOUBLE, negative, 3, sizeof (gdouble))),
      "“amax_history”[1]" },
    { edit_state (good, "amax_history",
                  g_variant_new_fixed_array (G_VARIANT_TYPE_DOUBLE, not_single, 3, sizeof (gdouble))),
      "“amax_history”[1]" },
    { edit_state (good, "amax_history",
                  g_variant_new_fixed_array (G_VARIANT_TYPE_DOUBLE, negative, 2, sizeof (gdouble))),
      "“amax_history”" },
    { mixprec_fp8_scaling_save_state (bwd), "“dtype”" },
    { mixprec_fp8_scaling_save_state (longer), "“amax_history”" },
    { mixprec_fp8_scaling_save_state (cur), "“recipe”" },
    { mixprec_fp8_scaling_save_state (mxs), "“recipe”" },
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autoptr(GError) error = NULL;
      g_autoptr(GVariant) after = NULL;

      g_assert_false (mixprec_fp8_scaling_restore_state (target, cases[i].state, &error));
      g_assert_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE);
      if (strstr (error->message, cases[i].fragment) == NULL)
        g_error ("case %u: “%s” does not mention “%s”", i, error->message, cases[i].fragment);
      after = mixprec_fp8_scaling_save_state (target);
      g_assert_true (g_variant_equal (before, after));
      g_variant_unref (cases[i].state);
    }

  /* an MX scaling has no scale to restore */
  {
    g_autoptr(GVariant) mx_state = mixprec_fp8_scaling_save_state (mxs);
    g_autoptr(GVariant) bad = edit_state (mx_state, "scale", g_variant_new_double (2.0));
    g_autoptr(GError) error = NULL;

    g_assert_false (mixprec_fp8_scaling_restore_state (mxs, bad, &error));
    g_assert_error (error, MIXPREC_FP8_RECIPE_ERROR, MIXPREC_FP8_RECIPE_ERROR_INVALID_STATE);
    g_assert_nonnull (strstr (error->message, "“scale”"));
    g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (mxs), ==, 1.0f);
  }

  /* NaN and Inf amaxes restore, and unknown keys are ignored */
  {
    const gdouble odd[] = { NAN, INFINITY, 0.5 };
    g_autoptr(GVariant) odd_state =
      edit_state (good, "amax_history", g_variant_new_fixed_array (G_VARIANT_TYPE_DOUBLE, odd, 3, sizeof (gdouble)));
    g_autoptr(GVariant) extra = edit_state (odd_state, "from_the_future", g_variant_new_boolean (TRUE));
    g_autoptr(GError) error = NULL;
    const gfloat *h;
    guint n;

    g_assert_true (mixprec_fp8_scaling_restore_state (target, extra, &error));
    g_assert_no_error (error);
    h = mixprec_fp8_scaling_get_amax_history (target, &n);
    g_assert_cmpuint (n, ==, 3);
    g_assert_true (isnan (h[0]));
    g_assert_true (isinf (h[1]));
    g_assert_cmpfloat (h[2], ==, 0.5f);
    g_assert_cmpfloat (mixprec_fp8_scaling_get_scale (target), ==, mixprec_fp8_scaling_get_scale (source));
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);

  g_test_add_func ("/fp8-recipe/delayed/known-values", test_delayed_known_values);
  g_test_add_func ("/fp8-recipe/delayed/roll-layout", test_delayed_roll_layout);
  g_test_add_func ("/fp8-recipe/delayed/edge-amaxes", test_delayed_edge_amaxes);
  g_test_add_func ("/fp8-recipe/delayed/sequences", test_delayed_sequences);
  g_test_add_func ("/fp8-recipe/delayed/notify", test_delayed_notify);
  g_test_add_func ("/fp8-recipe/current/scaling", test_current_scaling);
  g_test_add_func ("/fp8-recipe/mx/no-scale", test_mx_scaling);
  g_test_add_func ("/fp8-recipe/recipe/getters", test_recipe_getters);
  g_test_add_func ("/fp8-recipe/recipe/invalid", test_recipe_invalid);
  g_test_add_func ("/fp8-recipe/state/round-trip", test_state_round_trip);
  g_test_add_func ("/fp8-recipe/state/rejected", test_state_rejected);

  return g_test_run ();
}
