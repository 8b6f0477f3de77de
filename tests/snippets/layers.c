/* layers.c — what README.md's per-layer backward fragment needs around it:
 * three layers, a backward pass that writes each layer's gradient in bf16,
 * and a check afterwards. doc-snippets.py compiles this file with
 * -DSNIPPET_FILE naming the fragment, which lands, as written, in
 * backward() below; one optimizer step must then move every layer by the
 * same amount (AdamW's first step is lr * sign of the gradient). */
#include <mixprec/mixprec.h>

#define N_LAYERS 3
#define WIDTH 8

typedef struct
{
  MixprecParam *weight;
} Layer;

/* "your code": the gradient of every element is 0.5 (bf16 0x3f00) */
static void
layer_backward (Layer   *layer,
                guint16 *grad)
{
  for (guint64 i = 0; i < mixprec_param_get_numel (layer->weight); i++)
    grad[i] = 0x3f00;
}

static gboolean
backward (MixprecEngine *engine,
          Layer         *layers,
          gint           n_layers,
          guint16       *grad_scratch,
          GError       **error_out)
{
  GError *error = NULL;

#include SNIPPET_FILE

  if (error != NULL)
    {
      g_propagate_error (error_out, error);
      return FALSE;
    }
  return TRUE;
}

int
main (void)
{
  const gchar *json =
    "{\"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3},"
    " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.125, \"weight_decay\": 0}}}";
  const guint64 shape[2] = { WIDTH, WIDTH };
  gfloat init[WIDTH * WIDTH] = { 0 };
  guint16 grad_scratch[WIDTH * WIDTH];
  Layer layers[N_LAYERS];
  g_autoptr(GError) error = NULL;
  g_autoptr(MixprecConfig) config = mixprec_config_new_from_data (json, -1, &error);
  g_autoptr(MixprecEngine) engine = NULL;
  g_autoptr(MixprecStepResult) result = NULL;

  if (config == NULL || (engine = mixprec_engine_new (config, &error)) == NULL)
    goto fail;
  for (guint l = 0; l < N_LAYERS; l++)
    {
      g_autofree gchar *name = g_strdup_printf ("layers.%u.weight", l);
      g_autoptr(GBytes) bytes = g_bytes_new (init, sizeof init);

      layers[l].weight = mixprec_engine_register_param (engine, name, shape, 2, "Linear",
                                                        MIXPREC_DTYPE_FLOAT32, bytes, &error);
      if (layers[l].weight == NULL)
        goto fail;
    }
  if (!backward (engine, layers, N_LAYERS, grad_scratch, &error) ||
      (result = mixprec_engine_step (engine, &error)) == NULL)
    goto fail;
  for (guint l = 0; l < N_LAYERS; l++)
    {
      g_autoptr(GBytes) master = mixprec_engine_gather_master (engine,
                                   mixprec_param_get_name (layers[l].weight), &error);
      const gfloat *m;

      if (master == NULL)
        goto fail;
      m = g_bytes_get_data (master, NULL);
      for (guint i = 0; i < WIDTH * WIDTH; i++)
        if (!(m[i] < -0.12f && m[i] > -0.13f))
          {
            g_printerr ("layer %u element %u: %g after one step, expected about -0.125\n",
                        l, i, m[i]);
            return 1;
          }
    }
  g_print ("one step over %d layers, every weight -0.125\n", N_LAYERS);
  return 0;

fail:
  g_printerr ("%s\n", error->message);
  return 1;
}
