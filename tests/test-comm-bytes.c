/* test-comm-bytes.c — the bytes on the wire the engine counts
 * (mixprec_engine_get_comm_bytes()) on 2 and 3 ranks on 127.0.0.1 through
 * comm-ucx, at ZeRO-0, 1, 2 and 3, with and without ZeRO++ qwZ and qgZ.
 *
 * Each rank trains two steps of a model of four parameters, which the
 * layout packs into one unit padded to a multiple of W x 4096 elements,
 * W slices of `slice` elements; under ZeRO-3 the trainer gathers every
 * unit for the forward pass and again for the backward pass. The second
 * step's counts must equal what these rules give, worked out here from
 * the layout and the wire formats, not from the library:
 *
 *   all_gather      ZeRO-0: none; ZeRO-1/2: (W-1) slice x working size,
 *                   once (the updated weights); ZeRO-3: twice per micro-step,
 *                   (W-1) slice x working size, qwZ (W-1) (slice + 4 g)
 *                   with g DeepSpeed's block count for the slice
 *   reduce_scatter  per micro-step (W-1) slice x wire size, qgZ
 *                   (W-1) ceil (slice / 512) x (256 + 4), or x (512 + 4)
 *                   with FP8 blocks; ZeRO-0 adds the
 *                   reduced slices gathered back in FP32, (W-1) slice x 4
 *   scalars         (W-1) ceil (slice / 4096) x 8 (norm blocks as doubles)
 *   other           0; everything intra-host (one host)
 *
 * and mixprec_comm_bytes_plan_new() for the same configuration must give
 * the same numbers: the plan is the count of a real run. So must what
 * `mixprec-inspect --plan` prints for a model of one parameter of the
 * four's total size (the same single unit). Rank 0's csv_monitor records
 * them too, as Comm/allgather_bytes and so on. */
#include "config.h"

#include <string.h>

#include <glib/gstdio.h>
#include <mixprec/mixprec.h>

#include "multiproc.h"

#define TIMEOUT_MS 60000

static const guint64 sizes[] = { 20000, 700, 3000, 70001 };
#define N_PARAMS G_N_ELEMENTS (sizes)
#define N_FIELDS 8

typedef struct {
  const gchar *name;
  guint stage;
  gboolean bf16;
  gboolean qwz;
  gboolean qgz;
  guint gas;
  /* mixprec.quantized_weights_format fp8_e4m3, quantized_gradients_format
   * fp8_e5m2: a byte a code for both */
  gboolean fp8;
} Case;

static gchar *
case_json_monitored (const Case *c, const gchar *csv_dir)
{
  g_autofree gchar *csv = csv_dir != NULL
    ? g_strdup_printf ("\"csv_monitor\": {\"enabled\": true, \"output_path\": \"%s\", "
                       "\"job_name\": \"job\"}, ", csv_dir)
    : g_strdup ("");

  return g_strdup_printf ("{%s\"bf16\": {\"enabled\": %s}, \"gradient_accumulation_steps\": %u, "
                          "\"zero_optimization\": {\"stage\": %u, "
                          "\"stage3_param_persistence_threshold\": 0, "
                          "\"stage3_max_reuse_distance\": 0, "
                          "\"zero_quantized_weights\": %s, \"zero_quantized_gradients\": %s}, %s"
                          "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.01}}}",
                          csv, c->bf16 ? "true" : "false", c->gas, c->stage,
                          c->qwz ? "true" : "false", c->qgz ? "true" : "false",
                          c->fp8 ? "\"mixprec\": {\"quantized_weights_format\": \"fp8_e4m3\", "
                                   "\"quantized_gradients_format\": \"fp8_e5m2\"}, " : "");
}

static gchar *
case_json (const Case *c)
{
  return case_json_monitored (c, NULL);
}

/* The value csv_monitor recorded for @tag_file at step 2. */
static guint64
csv_step2 (const gchar *dir, const gchar *tag_file)
{
  g_autoptr(GError) error = NULL;
  g_autofree gchar *path = g_build_filename (dir, "job", tag_file, NULL);
  g_autofree gchar *text = NULL;
  g_auto(GStrv) lines = NULL;

  g_assert_true (g_file_get_contents (path, &text, NULL, &error));
  g_assert_no_error (error);
  lines = g_strsplit (text, "\n", -1);
  for (guint i = 0; lines[i] != NULL; i++)
    if (g_str_has_prefix (lines[i], "2,"))
      return (guint64) g_ascii_strtod (lines[i] + 2, NULL);
  g_assert_not_reached ();
}

static void
rm_rf (const gchar *path)
{
  if (g_file_test (path, G_FILE_TEST_IS_DIR))
    {
      g_autoptr(GDir) d = g_dir_open (path, 0, NULL);
      const gchar *name;

      while (d != NULL && (name = g_dir_read_name (d)) != NULL)
        {
          g_autofree gchar *child = g_build_filename (path, name, NULL);

          rm_rf (child);
        }
      g_rmdir (path);
    }
  else
    g_remove (path);
}

static void
fields_of (const MixprecCommBytes *b, guint64 *f)
{
  f[0] = b->all_gather;
  f[1] = b->reduce_scatter;
  f[2] = b->scalars;
  f[3] = b->other;
  f[4] = b->total;
  f[5] = b->inter_host;
  f[6] = b->inter_host_all_gather;
  f[7] = b->inter_host_reduce_scatter;
}

/* The child: two steps; writes the second step's counts. */
static int
child_main (void)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (g_getenv ("MIXPREC_TEST_JSON"), -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(MixprecCommBytes) before = NULL;
  g_autoptr(MixprecCommBytes) counted = NULL;
  g_autofree gchar *file = NULL;
  g_autoptr(GString) gathered = g_string_new (NULL);
  guint64 f[N_FIELDS];
  guint stage, gas;

  if (config == NULL || (engine = mixprec_engine_new (config, &error)) == NULL)
    goto fail;
  stage = mixprec_engine_get_zero_stage (engine);
  gas = mixprec_config_get_gradient_accumulation_steps (config);
  for (guint k = 0; k < N_PARAMS; k++)
    {
      g_autofree gchar *name = g_strdup_printf ("p%u", k);
      g_autofree gfloat *v = g_new (gfloat, sizes[k]);
      g_autoptr(GBytes) init = NULL;

      for (guint64 i = 0; i < sizes[k]; i++)
        v[i] = (gfloat) ((i % 17) * 0.01 - 0.08);
      init = g_bytes_new_take (g_steal_pointer (&v), sizes[k] * sizeof (gfloat));
      if (mixprec_engine_register_param (engine, name, &sizes[k], 1, "Linear", MIXPREC_DTYPE_FLOAT32,
                                         init, &error) == NULL)
        goto fail;
    }
  if (!mixprec_engine_prepare (engine, &error))
    goto fail;
  before = mixprec_engine_get_comm_bytes (engine);
  if (before->total != 0)
    {
      g_printerr ("comm-bytes child: %" G_GUINT64_FORMAT " bytes before the first step\n",
                  before->total);
      return 1;
    }
  for (guint step = 0; step < 2; step++)
    {
      g_autoptr(MixprecStepResult) result = NULL;

      for (guint m = 0; m < gas; m++)
        {
          /* forward, then backward: each gathers every unit (ZeRO-3) */
          if (stage >= 3)
            {
              if (!mixprec_engine_gather_all (engine, &error))
                goto fail;
              /* what the gathers delivered, for OUT.values.RANK */
              for (guint k = 0; k < N_PARAMS; k++)
                {
                  g_autofree gchar *name = g_strdup_printf ("p%u", k);
                  MixprecParam *p = mixprec_engine_get_param (engine, name);

                  g_string_append_len (gathered, mixprec_param_get_working_data (p),
                                       (gssize) (sizes[k] * mixprec_dtype_get_size (mixprec_param_get_working_dtype (p))));
                }
              mixprec_engine_release_all (engine);
              if (!mixprec_engine_gather_all (engine, &error))
                goto fail;
            }
          for (guint k = 0; k < N_PARAMS; k++)
            {
              g_autofree gchar *name = g_strdup_printf ("p%u", k);
              g_autofree gfloat *g = g_new (gfloat, sizes[k]);
              g_autoptr(GBytes) grad = NULL;

              for (guint64 i = 0; i < sizes[k]; i++)
                g[i] = (gfloat) (((i + k + m) % 13) * 0.001 - 0.006);
              grad = g_bytes_new_take (g_steal_pointer (&g), sizes[k] * sizeof (gfloat));
              if (!mixprec_param_set_grad (mixprec_engine_get_param (engine, name), MIXPREC_DTYPE_FLOAT32,
                                           grad, &error))
                goto fail;
            }
          if (stage >= 3)
            mixprec_engine_release_all (engine);
          if (!mixprec_engine_backward_done (engine, &error))
            goto fail;
        }
      if ((result = mixprec_engine_step (engine, &error)) == NULL)
        goto fail;
    }
  counted = mixprec_engine_get_comm_bytes (engine);
  fields_of (counted, f);
  /* The working copies each forward pass gathered and the masters after
   * the steps too, as OUT.values.RANK, for runs that must compute the
   * same (tests/test-comm-bytes-netns.sh). */
  {
    g_autoptr(GString) values = g_string_new_len (gathered->str, (gssize) gathered->len);
    g_autofree gchar *vfile = g_strdup_printf ("%s.values.%u", g_getenv ("MIXPREC_TEST_OUT"),
                                               mixprec_engine_get_rank (engine));

    for (guint k = 0; k < N_PARAMS; k++)
      {
        g_autofree gchar *name = g_strdup_printf ("p%u", k);
        g_autoptr(GBytes) master = mixprec_engine_gather_master (engine, name, &error);

        if (master == NULL)
          goto fail;
        g_string_append_len (values, g_bytes_get_data (master, NULL), (gssize) g_bytes_get_size (master));
      }
    if (!g_file_set_contents (vfile, values->str, (gssize) values->len, &error))
      goto fail;
  }
  file = g_strdup_printf ("%s.%u", g_getenv ("MIXPREC_TEST_OUT"), mixprec_engine_get_rank (engine));
  return g_file_set_contents (file, (const gchar *) f, sizeof f, NULL) ? 0 : 1;

fail:
  g_printerr ("comm-bytes child: %s\n", error != NULL ? error->message : "?");
  return 1;
}

/* DeepSpeed's block count for a slice of @n elements under qwZ, as its
 * quantizer sizes it: start at ceil (n / 8000), step up to the first g
 * with n divisible by 8 g, double while n stays divisible by 16 g and the
 * blocks stay above 8000 elements. */
static guint64
qwz_groups (guint64 n)
{
  guint64 g = (n + 7999) / 8000;

  while (n % (8 * g) != 0)
    g++;
  while (n % (16 * g) == 0 && n > 8000 * g)
    g *= 2;
  return g;
}

/* The expected counts of @c on @world ranks, from the rules above. */
static void
expected (const Case *c, guint world, guint64 *f)
{
  guint64 numel = 0, align = (guint64) world * 4096, padded, slice, peers = world - 1;
  guint64 wsize = c->bf16 ? 2 : 4, gather, reduce;

  for (guint k = 0; k < N_PARAMS; k++)
    numel += sizes[k];
  padded = (numel + align - 1) / align * align;
  slice = padded / world;
  if (c->stage >= 3)
    gather = 2 * c->gas * peers * (c->qwz ? slice + 4 * qwz_groups (slice) : slice * wsize);
  else if (c->stage >= 1)
    gather = peers * slice * wsize;
  else
    gather = 0;
  reduce = c->gas * peers * (c->qgz ? (slice + 511) / 512 * ((c->fp8 ? 512 : 256) + 4) : slice * wsize);
  /* ZeRO-0: the reduced slices gathered back to every rank, in FP32 (the
   * accumulation dtype the optimizer reads) */
  if (c->stage == 0)
    reduce += peers * slice * 4;
  memset (f, 0, sizeof (guint64) * N_FIELDS);
  f[0] = gather;
  f[1] = reduce;
  f[2] = peers * ((slice + 4095) / 4096) * 8;
  f[4] = f[0] + f[1] + f[2];
}

/* The bytes of row @label that `mixprec-inspect --plan` printed. */
static guint64
printed (const gchar *out, const gchar *label)
{
  g_autofree gchar *pattern = g_strdup_printf ("^  %s +([0-9]+) bytes", label);
  g_autoptr(GRegex) re = g_regex_new (pattern, G_REGEX_MULTILINE, 0, NULL);
  g_autoptr(GMatchInfo) m = NULL;
  g_autofree gchar *n = NULL;

  g_assert_nonnull (re);
  if (!g_regex_match (re, out, 0, &m))
    {
      g_test_message ("no row '%s' in:\n%s", label, out);
      g_assert_not_reached ();
    }
  n = g_match_info_fetch (m, 1);
  return g_ascii_strtoull (n, NULL, 10);
}

/* `mixprec-inspect --plan` for @json on @world ranks, against @want. */
static void
check_inspect (const gchar *dir, const gchar *json, guint world, const guint64 *want)
{
  const gchar *top = g_getenv ("MIXPREC_TOP_BUILDDIR");
  g_autoptr(GError) error = NULL;
  g_autofree gchar *inspect = NULL;
  g_autofree gchar *config = g_build_filename (dir, "config.json", NULL);
  g_autofree gchar *world_text = g_strdup_printf ("%u", world);
  g_autofree gchar *params_text = NULL;
  g_autofree gchar *out = NULL;
  guint64 numel = 0;
  gint status = 0;

  if (top == NULL)
    {
      g_test_message ("MIXPREC_TOP_BUILDDIR unset: mixprec-inspect not compared");
      return;
    }
  for (guint k = 0; k < N_PARAMS; k++)
    numel += sizes[k];
  params_text = g_strdup_printf ("%" G_GUINT64_FORMAT, numel);
  inspect = g_build_filename (top, "tools", "mixprec-inspect", NULL);
  g_assert_true (g_file_set_contents (config, json, -1, &error));
  {
    const gchar *argv[] = { inspect, "--plan", "--params", params_text, "--world", world_text,
                            "--config", config, NULL };

    g_assert_true (g_spawn_sync (NULL, (gchar **) argv, NULL, G_SPAWN_STDERR_TO_DEV_NULL, NULL,
                                 NULL, &out, NULL, &status, &error));
  }
  g_assert_no_error (error);
  g_assert_true (g_spawn_check_wait_status (status, NULL));
  g_assert_cmpuint (printed (out, "all-gather \\(weights\\)"), ==, want[0]);
  g_assert_cmpuint (printed (out, "reduce-scatter \\(gradients\\)"), ==, want[1]);
  g_assert_cmpuint (printed (out, "scalars \\(norm agreement\\)"), ==, want[2]);
  g_assert_cmpuint (printed (out, "wire total"), ==, want[4]);
  g_remove (config);
}

static void
test_case (gconstpointer data)
{
  const Case *c = data;
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = case_json (c);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);

  g_assert_no_error (error);
  for (guint world = 2; world <= 3; world++)
    {
      g_autofree gchar *dir = g_dir_make_tmp ("mixprec-comm-bytes-XXXXXX", &error);
      g_autofree gchar *out = g_build_filename (dir, "bytes", NULL);
      g_autofree gchar *out_var = g_strdup_printf ("MIXPREC_TEST_OUT=%s", out);
      g_autofree gchar *csv_dir = g_build_filename (dir, "csv", NULL);
      g_autofree gchar *child_json = case_json_monitored (c, csv_dir);
      g_autofree gchar *json_var = g_strdup_printf ("MIXPREC_TEST_JSON=%s", child_json);
      const gchar *env[] = { "MIXPREC_TEST_COMM_BYTES_CHILD=1", "UCX_NET_DEVICES=lo", out_var,
                             json_var, NULL };
      g_autoptr(MixprecCommBytes) plan = NULL;
      guint64 want[N_FIELDS], planned[N_FIELDS];
      gint status[3];

      g_assert_no_error (error);
      expected (c, world, want);
      plan = mixprec_comm_bytes_plan_new (config, sizes, N_PARAMS, world, 0, &error);
      g_assert_no_error (error);
      fields_of (plan, planned);
      for (guint i = 0; i < N_FIELDS; i++)
        g_assert_cmpuint (planned[i], ==, want[i]);
      mp_run_ranks (world, TIMEOUT_MS, env, status);
      for (guint r = 0; r < world; r++)
        {
          g_autofree gchar *file = g_strdup_printf ("%s.%u", out, r);
          g_autofree gchar *got = NULL;
          gsize len = 0;

          g_assert_cmpint (status[r], ==, 0);
          g_assert_true (g_file_get_contents (file, &got, &len, &error));
          g_assert_no_error (error);
          g_assert_cmpuint (len, ==, sizeof want);
          for (guint i = 0; i < N_FIELDS; i++)
            {
              guint64 v;

              memcpy (&v, got + i * sizeof v, sizeof v);
              if (v != want[i])
                g_test_message ("%s, %u ranks, rank %u: field %u counted %" G_GUINT64_FORMAT
                                ", expected %" G_GUINT64_FORMAT, c->name, world, r, i, v, want[i]);
              g_assert_cmpuint (v, ==, want[i]);
            }
          g_remove (file);
        }
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_allgather_bytes.csv"), ==, want[0]);
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_reducescatter_bytes.csv"), ==, want[1]);
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_scalar_bytes.csv"), ==, want[2]);
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_other_bytes.csv"), ==, 0);
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_total_bytes.csv"), ==, want[4]);
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_intra_host_bytes.csv"), ==, want[4]);
      g_assert_cmpuint (csv_step2 (csv_dir, "Comm_inter_host_bytes.csv"), ==, 0);
      check_inspect (dir, json, world, want);
      rm_rf (dir);
    }
}

/* A plan over hosts: the peers on the own host and on the others. */
static void
test_plan_hosts (void)
{
  static const Case z3 = { "zero3", 3, TRUE, FALSE, FALSE, 1, FALSE };
  g_autoptr(GError) error = NULL;
  g_autofree gchar *json = case_json (&z3);
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecCommBytes) one = NULL;
  g_autoptr(MixprecCommBytes) split = NULL;
  g_autoptr(MixprecCommBytes) bad = NULL;

  g_assert_no_error (error);
  one = mixprec_comm_bytes_plan_new (config, sizes, N_PARAMS, 6, 0, &error);
  g_assert_no_error (error);
  split = mixprec_comm_bytes_plan_new (config, sizes, N_PARAMS, 6, 2, &error);
  g_assert_no_error (error);
  /* 6 ranks, 2 per host: 1 of the 5 peers on the own host, for the
   * reductions; the gathers in two levels send a slice to the 2 other
   * hosts' ranks of the same place, then 3 slices to the host's other
   * rank: 2 of 5 cross hosts */
  g_assert_cmpuint (one->total, ==, split->total);
  g_assert_cmpuint (one->inter_host, ==, 0);
  g_assert_cmpuint (split->inter_host_all_gather, ==, split->all_gather / 5 * 2);
  g_assert_cmpuint (split->inter_host, ==, split->all_gather / 5 * 2 + (split->total - split->all_gather) / 5 * 4);
  bad = mixprec_comm_bytes_plan_new (config, sizes, N_PARAMS, 6, 4, &error);
  g_assert_null (bad);
  g_assert_error (error, MIXPREC_ENGINE_ERROR, MIXPREC_ENGINE_ERROR_INVALID_ARGUMENT);
}

static const Case cases[] = {
  { "zero0-bf16", 0, TRUE, FALSE, FALSE, 1, FALSE },
  { "zero1-bf16", 1, TRUE, FALSE, FALSE, 1, FALSE },
  { "zero2-bf16", 2, TRUE, FALSE, FALSE, 1, FALSE },
  { "zero2-fp32", 2, FALSE, FALSE, FALSE, 1, FALSE },
  { "zero3-bf16", 3, TRUE, FALSE, FALSE, 1, FALSE },
  { "zero3-fp32-gas2", 3, FALSE, FALSE, FALSE, 2, FALSE },
  { "zero3-qwz", 3, TRUE, TRUE, FALSE, 1, FALSE },
  { "zero3-qgz", 3, TRUE, FALSE, TRUE, 1, FALSE },
  { "zero3-qwz-qgz-gas2", 3, TRUE, TRUE, TRUE, 2, FALSE },
  { "zero3-qwz-qgz-fp8", 3, TRUE, TRUE, TRUE, 1, TRUE },
};

int
main (int argc, char **argv)
{
  if (g_getenv ("MIXPREC_TEST_COMM_BYTES_CHILD") != NULL)
    return child_main ();

  g_test_init (&argc, &argv, NULL);
  g_setenv ("MIXPREC_JOB_SECRET", MP_JOB_SECRET, TRUE);
  g_setenv ("UCX_LOG_LEVEL", "error", FALSE);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    {
      g_autofree gchar *path = g_strdup_printf ("/comm-bytes/%s", cases[i].name);

      g_test_add_data_func (path, &cases[i], test_case);
    }
  g_test_add_func ("/comm-bytes/plan/hosts", test_plan_hosts);
  return g_test_run ();
}
