/* charlm-model.c — forward and backward of the character MLP in plain
 * loops, with low-precision training emulated the way a GPU does it:
 *
 *  - each layer computes in the working dtype of its parameters
 *    (mixprec_param_get_working_dtype(): fp16, bf16 or fp32);
 *  - products are accumulated in fp32, as tensor cores do;
 *  - every tensor a layer stores (its output, kept for backward, and the
 *    gradient it hands to the layer below) is rounded to that dtype;
 *  - a layer given a tensor of another dtype casts it on the way in, and
 *    the gradient is cast back on the way out;
 *  - softmax and cross-entropy run in fp32, as autocast runs them.
 *
 * The buffers themselves are fp32 so the kernels stay readable: a value
 * "stored in fp16" is an fp32 holding exactly an fp16 value, which gives
 * the same numbers as fp16 storage. store_as() does the rounding through
 * mixprec_convert_array(). Gradients are what the engine receives: those
 * of the loss multiplied by the loss scale, so with fp16 and a scale of 1
 * small gradients flush to zero exactly as they would on a GPU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "charlm-model.h"
#include "example-weights.h"

#define LAYERNORM_EPS 1e-5f

static void read_dtypes (CharlmModel *model);

struct _CharlmModel
{
  CharlmShape shape;
  guint max_batch;
  guint batch;                         /* rows of the last forward */

  MixprecEngine *engine;               /* borrowed: it outlives the model */
  MixprecParam *params[CHARLM_N_PARAMS];
  gsize numel[CHARLM_N_PARAMS];
  gfloat *w[CHARLM_N_PARAMS];          /* working weights, widened to fp32 */
  gfloat *g[CHARLM_N_PARAMS];          /* gradients, accumulated in fp32 */
  gfloat grad_mult[CHARLM_N_PARAMS];   /* --grad-multiplier: each weight
                                          gradient times this (1 by default) */

  /* MX recipes: elements per E8M0 block scale (0 otherwise). */
  guint mx_block_size;

  /* fp4 with rht: the weight-gradient GEMMs of the fp4 layers multiply
   * NVFP4 operands after the random Hadamard transform of these signs. */
  gboolean fp4_wgrad;
  guint16 rht_mask;

  /* The dtype each layer computes and stores in. */
  MixprecDType dt_wte, dt_h1, dt_ln1, dt_h2, dt_ln2, dt_out;

  /* Activations kept for backward, [batch, width]. */
  guint8 *contexts;
  guint8 *targets;
  gfloat *x0;                          /* embeddings, concatenated */
  gfloat *x0c;                         /* x0 cast for h1 */
  gfloat *a1, *mean1, *rstd1, *t1, *t1c;
  gfloat *a2, *mean2, *rstd2, *t2, *t2c;
  gfloat *logits;
  gfloat *probs;                       /* fp32 softmax */

  /* Gradients flowing down, [batch, width]. */
  gfloat *dlogits;
  gfloat *dh;
  gfloat *dh2;
  gfloat *dx0;

  gpointer scratch;                    /* low-precision side of store_as() */

  /* Gradient values stored since the last charlm_model_take_underflow():
   * how many were not zero, and how many of those the store flushed. */
  guint64 grad_nonzero;
  guint64 grad_flushed;
};

static const struct
{
  const gchar *name;
  const gchar *module_type;
} param_info[CHARLM_N_PARAMS] = {
  [CHARLM_WTE] = { "wte.weight", "Embedding" },
  [CHARLM_H1_W] = { "h1.weight", "Linear" },
  [CHARLM_LN1_W] = { "ln1.weight", "LayerNorm" },
  [CHARLM_LN1_B] = { "ln1.bias", "LayerNorm" },
  [CHARLM_H2_W] = { "h2.weight", "Linear" },
  [CHARLM_LN2_W] = { "ln2.weight", "LayerNorm" },
  [CHARLM_LN2_B] = { "ln2.bias", "LayerNorm" },
  [CHARLM_OUT_W] = { "out.weight", "Linear" },
  [CHARLM_OUT_B] = { "out.bias", "Linear" },
};

/* ------------------------------------------------------------ emulation */

/* Rounds @x as storing it in @dtype would: to nearest even, fp16
 * overflowing to inf and flushing gradually to zero below 6e-8. */
static void
store_as (CharlmModel  *model,
          MixprecDType  dtype,
          gfloat       *x,
          gsize         n)
{
  g_autoptr(GError) error = NULL;

  if (dtype == MIXPREC_DTYPE_FLOAT32)
    return;
  if (!mixprec_convert_array (MIXPREC_DTYPE_FLOAT32, x, dtype, model->scratch, n,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error) ||
      !mixprec_convert_array (dtype, model->scratch, MIXPREC_DTYPE_FLOAT32, x, n,
                              MIXPREC_ROUNDING_NEAREST_EVEN, 0, 0, &error))
    g_error ("converting activations: %s", error->message);
}

/* store_as() for a gradient, counting the values it flushes to zero: the
 * underflow that loss scaling exists to prevent. Rounding never turns a
 * zero into something else, so every new zero was a flushed value. */
static void
store_grad_as (CharlmModel  *model,
               MixprecDType  dtype,
               gfloat       *x,
               gsize         n)
{
  gsize zeros_before = 0, zeros_after = 0;

  for (gsize i = 0; i < n; i++)
    zeros_before += x[i] == 0.0f;
  store_as (model, dtype, x, n);
  for (gsize i = 0; i < n; i++)
    zeros_after += x[i] == 0.0f;
  model->grad_nonzero += n - zeros_before;
  model->grad_flushed += zeros_after - zeros_before;
}

/* A layer receiving a tensor of another dtype computes on a cast copy. */
static void
cast_into (CharlmModel  *model,
           MixprecDType  dtype,
           gfloat       *dst,
           const gfloat *src,
           gsize         n)
{
  memcpy (dst, src, n * sizeof (gfloat));
  store_as (model, dtype, dst, n);
}

/* -------------------------------------------------------------- kernels */

/* out[n][o] = bias[o] + sum_i in[n][i] * weight[o][i]. Four outputs at a
 * time give the processor four independent sums to work on; each sum
 * still runs over i in order, so the result does not depend on the
 * blocking. */
static void
linear_forward (gfloat       *out,
                const gfloat *in,
                const gfloat *weight,
                const gfloat *bias,
                guint         batch,
                guint         n_in,
                guint         n_out)
{
  for (guint n = 0; n < batch; n++)
    {
      const gfloat *x = in + (gsize) n * n_in;
      gfloat *y = out + (gsize) n * n_out;
      guint o = 0;

      for (; o + 4 <= n_out; o += 4)
        {
          const gfloat *w0 = weight + (gsize) o * n_in;
          const gfloat *w1 = w0 + n_in, *w2 = w1 + n_in, *w3 = w2 + n_in;
          gfloat s0 = 0, s1 = 0, s2 = 0, s3 = 0;

          for (guint i = 0; i < n_in; i++)
            {
              s0 += x[i] * w0[i];
              s1 += x[i] * w1[i];
              s2 += x[i] * w2[i];
              s3 += x[i] * w3[i];
            }
          y[o] = s0;
          y[o + 1] = s1;
          y[o + 2] = s2;
          y[o + 3] = s3;
        }
      for (; o < n_out; o++)
        {
          const gfloat *w0 = weight + (gsize) o * n_in;
          gfloat s0 = 0;

          for (guint i = 0; i < n_in; i++)
            s0 += x[i] * w0[i];
          y[o] = s0;
        }
      if (bias != NULL)
        for (o = 0; o < n_out; o++)
          y[o] += bias[o];
    }
}

/* dweight[o][i] = sum_n dout[n][o] * in[n][i], dbias[o] = sum_n dout[n][o],
 * din[n][i] = sum_o dout[n][o] * weight[o][i]: each an fp32 sum. */
static void
linear_backward (gfloat       *din,
                 gfloat       *dweight,
                 gfloat       *dbias,
                 const gfloat *dout,
                 const gfloat *in,
                 const gfloat *weight,
                 guint         batch,
                 guint         n_in,
                 guint         n_out)
{
  memset (din, 0, (gsize) batch * n_in * sizeof (gfloat));
  for (guint n = 0; n < batch; n++)
    {
      gfloat *dx = din + (gsize) n * n_in;

      for (guint o = 0; o < n_out; o++)
        {
          const gfloat *w = weight + (gsize) o * n_in;
          gfloat d = dout[(gsize) n * n_out + o];

          for (guint i = 0; i < n_in; i++)
            dx[i] += d * w[i];
        }
    }

  memset (dweight, 0, (gsize) n_out * n_in * sizeof (gfloat));
  for (guint o = 0; o < n_out; o++)
    {
      gfloat *dw = dweight + (gsize) o * n_in;

      for (guint n = 0; n < batch; n++)
        {
          const gfloat *x = in + (gsize) n * n_in;
          gfloat d = dout[(gsize) n * n_out + o];

          for (guint i = 0; i < n_in; i++)
            dw[i] += d * x[i];
        }
    }

  if (dbias != NULL)
    for (guint o = 0; o < n_out; o++)
      {
        gfloat s = 0;

        for (guint n = 0; n < batch; n++)
          s += dout[(gsize) n * n_out + o];
        dbias[o] = s;
      }
}

/* An operand of a weight-gradient GEMM as Transformer Engine's NVFP4
 * recipe feeds it: @x [batch, width] read along the batch dimension (the
 * GEMM sums over it), each run of 16 rows of a column put through the
 * random Hadamard transform, quantised to NVFP4 (1x16 blocks along the
 * batch, a per-tensor scale; stochastic rounding for gradients, seeded by
 * @seed) and decoded back into @out. Both operands get the same
 * orthogonal transform, so their products sum to the same weight
 * gradient but for the quantisation; the transform spreads an outlier
 * token over its group of 16 first. */
static void
wgrad_operand (CharlmModel  *model,
               const gfloat *x,
               guint         batch,
               guint         width,
               gboolean      stochastic,
               guint64       seed,
               gfloat       *out)
{
  gsize n = (gsize) batch * width;
  g_autofree gfloat *xt = g_new (gfloat, n);
  g_autofree guint8 *q = g_new (guint8, n / 2);
  g_autofree guint8 *scales = g_new (guint8, n / 16);
  g_autoptr(GError) error = NULL;
  gfloat ts = 0.0f, amax = 0.0f;

  for (guint r = 0; r < batch; r++)
    for (guint c = 0; c < width; c++)
      {
        xt[(gsize) c * batch + r] = x[(gsize) r * width + c];
        amax = fmaxf (amax, fabsf (x[(gsize) r * width + c]));
      }
  /* An all-zero operand: NVFP4's tensor scale would be 0. */
  if (amax == 0.0f)
    {
      memset (out, 0, n * sizeof (gfloat));
      return;
    }
  if (!mixprec_rht_apply (xt, n, model->rht_mask, FALSE, xt, &error) ||
      !mixprec_quantize_blocks (MIXPREC_BLOCK_RECIPE_NVFP4, MIXPREC_MX_SCALE_FLOOR, xt, width, batch,
                                stochastic ? MIXPREC_ROUNDING_STOCHASTIC : MIXPREC_ROUNDING_NEAREST_EVEN,
                                seed, q, scales, &ts, &error) ||
      !mixprec_dequantize_blocks (MIXPREC_BLOCK_RECIPE_NVFP4, q, scales, ts, width, batch, xt, &error))
    g_error ("quantising a weight-gradient operand: %s", error->message);
  for (guint r = 0; r < batch; r++)
    for (guint c = 0; c < width; c++)
      out[(gsize) r * width + c] = xt[(gsize) c * batch + r];
}

/* linear_backward() of an fp4 layer under fp4.rht: the input gradient
 * from @dout as it is, the weight gradient from the NVFP4 operands. */
static void
linear_backward_fp4 (CharlmModel  *model,
                     gfloat       *din,
                     gfloat       *dweight,
                     const gfloat *dout,
                     const gfloat *in,
                     const gfloat *weight,
                     guint         batch,
                     guint         n_in,
                     guint         n_out)
{
  g_autofree gfloat *dq = g_new (gfloat, (gsize) batch * n_out);
  g_autofree gfloat *xq = g_new (gfloat, (gsize) batch * n_in);
  g_autofree gfloat *unused = g_new (gfloat, (gsize) batch * n_in);
  g_autofree gfloat *dw = g_new (gfloat, (gsize) n_out * n_in);
  /* The stochastic rounding's seed comes from the micro-batch itself (its
   * characters, FNV-1a) and the layer, so that a micro-batch rounds alike
   * on whichever rank takes it: runs on 1 and on N ranks stay equal. */
  guint64 seed = 0xcbf29ce484222325ull ^ ((guint64) n_in << 32 | n_out);

  for (gsize k = 0; k < (gsize) batch * model->shape.block_size; k++)
    seed = (seed ^ model->contexts[k]) * 0x100000001b3ull;
  for (guint k = 0; k < batch; k++)
    seed = (seed ^ model->targets[k]) * 0x100000001b3ull;

  linear_backward (din, dweight, NULL, dout, in, weight, batch, n_in, n_out);
  wgrad_operand (model, dout, batch, n_out, TRUE, seed, dq);
  wgrad_operand (model, in, batch, n_in, FALSE, 0, xq);
  linear_backward (unused, dw, NULL, dq, xq, weight, batch, n_in, n_out);
  memcpy (dweight, dw, (gsize) n_out * n_in * sizeof (gfloat));
}

/* Mean and variance in fp32 whatever the input dtype, as PyTorch's
 * LayerNorm kernels do; mean and 1/std are kept for backward. */
static void
layernorm_forward (gfloat       *out,
                   gfloat       *mean,
                   gfloat       *rstd,
                   const gfloat *in,
                   const gfloat *gamma,
                   const gfloat *beta,
                   guint         batch,
                   guint         width)
{
  for (guint n = 0; n < batch; n++)
    {
      const gfloat *x = in + (gsize) n * width;
      gfloat *y = out + (gsize) n * width;
      gfloat m = 0, v = 0, r;

      for (guint i = 0; i < width; i++)
        m += x[i];
      m /= width;
      for (guint i = 0; i < width; i++)
        v += (x[i] - m) * (x[i] - m);
      v /= width;
      r = 1.0f / sqrtf (v + LAYERNORM_EPS);
      for (guint i = 0; i < width; i++)
        y[i] = (x[i] - m) * r * gamma[i] + beta[i];
      mean[n] = m;
      rstd[n] = r;
    }
}

static void
layernorm_backward (gfloat       *din,
                    gfloat       *dgamma,
                    gfloat       *dbeta,
                    const gfloat *dout,
                    const gfloat *in,
                    const gfloat *mean,
                    const gfloat *rstd,
                    const gfloat *gamma,
                    guint         batch,
                    guint         width)
{
  memset (dgamma, 0, width * sizeof (gfloat));
  memset (dbeta, 0, width * sizeof (gfloat));
  for (guint n = 0; n < batch; n++)
    {
      const gfloat *x = in + (gsize) n * width;
      const gfloat *dy = dout + (gsize) n * width;
      gfloat *dx = din + (gsize) n * width;
      gfloat dnorm_mean = 0, dnorm_xhat_mean = 0;

      for (guint i = 0; i < width; i++)
        {
          gfloat xhat = (x[i] - mean[n]) * rstd[n];
          gfloat dnorm = dy[i] * gamma[i];

          dnorm_mean += dnorm;
          dnorm_xhat_mean += dnorm * xhat;
        }
      dnorm_mean /= width;
      dnorm_xhat_mean /= width;

      for (guint i = 0; i < width; i++)
        {
          gfloat xhat = (x[i] - mean[n]) * rstd[n];
          gfloat dnorm = dy[i] * gamma[i];

          dx[i] = (dnorm - dnorm_mean - xhat * dnorm_xhat_mean) * rstd[n];
          dgamma[i] += dy[i] * xhat;
          dbeta[i] += dy[i];
        }
    }
}

/* Per-example loss -log softmax(logits)[target], in fp32. */
static gdouble
cross_entropy_forward (gfloat       *probs,
                       const gfloat *logits,
                       const guint8 *targets,
                       guint         batch)
{
  gdouble total = 0;

  for (guint n = 0; n < batch; n++)
    {
      const gfloat *z = logits + (gsize) n * CHARLM_VOCAB;
      gfloat *p = probs + (gsize) n * CHARLM_VOCAB;
      gfloat max = z[0], sum = 0;

      for (guint v = 1; v < CHARLM_VOCAB; v++)
        max = MAX (max, z[v]);
      for (guint v = 0; v < CHARLM_VOCAB; v++)
        {
          p[v] = expf (z[v] - max);
          sum += p[v];
        }
      for (guint v = 0; v < CHARLM_VOCAB; v++)
        p[v] /= sum;
      total += -(logf (p[targets[n]]));
    }
  return total / batch;
}

/* ---------------------------------------------------------------- model */

static gsize
param_numel (const CharlmShape *s,
             CharlmParamId      id)
{
  switch (id)
    {
    case CHARLM_WTE:
      return (gsize) CHARLM_VOCAB * s->n_embd;
    case CHARLM_H1_W:
      return (gsize) s->n_hidden * s->block_size * s->n_embd;
    case CHARLM_H2_W:
      return (gsize) s->n_hidden * s->n_hidden;
    case CHARLM_OUT_W:
      return (gsize) CHARLM_VOCAB * s->n_hidden;
    case CHARLM_OUT_B:
      return CHARLM_VOCAB;
    case CHARLM_LN1_W:
    case CHARLM_LN1_B:
    case CHARLM_LN2_W:
    case CHARLM_LN2_B:
    case CHARLM_N_PARAMS:
    default:
      return s->n_hidden;
    }
}

static guint
param_shape (const CharlmShape *s,
             CharlmParamId      id,
             guint64           *shape)
{
  switch (id)
    {
    case CHARLM_WTE:
      shape[0] = CHARLM_VOCAB;
      shape[1] = s->n_embd;
      return 2;
    case CHARLM_H1_W:
      shape[0] = s->n_hidden;
      shape[1] = (guint64) s->block_size * s->n_embd;
      return 2;
    case CHARLM_H2_W:
      shape[0] = s->n_hidden;
      shape[1] = s->n_hidden;
      return 2;
    case CHARLM_OUT_W:
      shape[0] = CHARLM_VOCAB;
      shape[1] = s->n_hidden;
      return 2;
    case CHARLM_OUT_B:
      shape[0] = CHARLM_VOCAB;
      return 1;
    case CHARLM_LN1_W:
    case CHARLM_LN1_B:
    case CHARLM_LN2_W:
    case CHARLM_LN2_B:
    case CHARLM_N_PARAMS:
    default:
      shape[0] = s->n_hidden;
      return 1;
    }
}

/* Embeddings N(0, 1); Linear weights N(0, 1) * gain / sqrt(fan_in) with
 * tanh's gain 5/3 (Kaiming); the output layer scaled down further so the
 * first predictions are near uniform (makemore's trick), which also makes
 * the gradients reaching the lower layers small at the start — small
 * enough to underflow fp16 without loss scaling. LayerNorm starts as the
 * identity, biases at zero. */
static void
init_values (const CharlmShape *s,
             CharlmParamId      id,
             CharlmRng         *rng,
             gfloat            *values,
             gsize              n)
{
  gdouble std;

  switch (id)
    {
    case CHARLM_WTE:
      std = 1.0;
      break;
    case CHARLM_H1_W:
      std = (5.0 / 3.0) / sqrt ((gdouble) s->block_size * s->n_embd);
      break;
    case CHARLM_H2_W:
      std = (5.0 / 3.0) / sqrt ((gdouble) s->n_hidden);
      break;
    case CHARLM_OUT_W:
      std = s->out_init_scale / sqrt ((gdouble) s->n_hidden);
      break;
    case CHARLM_LN1_W:
    case CHARLM_LN2_W:
      for (gsize i = 0; i < n; i++)
        values[i] = 1.0f;
      return;
    case CHARLM_LN1_B:
    case CHARLM_LN2_B:
    case CHARLM_OUT_B:
    case CHARLM_N_PARAMS:
    default:
      memset (values, 0, n * sizeof (gfloat));
      return;
    }
  for (gsize i = 0; i < n; i++)
    values[i] = (gfloat) (charlm_rng_normal (rng) * std);
}

CharlmModel *
charlm_model_new (MixprecEngine     *engine,
                  const CharlmShape *shape,
                  guint              max_batch,
                  guint64            seed,
                  GError           **error)
{
  g_autoptr(CharlmModel) model = g_new0 (CharlmModel, 1);

  model->engine = engine;
  CharlmRng rng;
  gsize in_width = (gsize) shape->block_size * shape->n_embd;
  gsize widest = MAX (MAX (in_width, shape->n_hidden), CHARLM_VOCAB);
  gsize rows = max_batch;

  model->shape = *shape;
  model->max_batch = max_batch;

  charlm_rng_init (&rng, seed, 0);
  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    {
      guint64 dims[2];
      guint n_dims = param_shape (shape, id, dims);
      gsize n = param_numel (shape, id);
      g_autofree gfloat *init = g_new (gfloat, n);
      g_autoptr(GBytes) bytes = NULL;

      init_values (shape, id, &rng, init, n);
      bytes = g_bytes_new_take (g_steal_pointer (&init), n * sizeof (gfloat));
      model->params[id] = mixprec_engine_register_param (engine, param_info[id].name,
                                                         dims, n_dims,
                                                         param_info[id].module_type,
                                                         MIXPREC_DTYPE_FLOAT32, bytes,
                                                         error);
      if (model->params[id] == NULL)
        return NULL;
      g_object_ref (model->params[id]);
      model->numel[id] = n;
      model->w[id] = g_new (gfloat, n);
      model->g[id] = g_new (gfloat, n);
    }

  model->mx_block_size = example_mx_block_size (mixprec_engine_get_config (engine));
  {
    MixprecBlockRecipe recipe;

    /* TE applies the transform to NVFP4's weight-gradient operands; the
     * batch must be whole groups of 16. */
    model->fp4_wgrad = mixprec_config_get_fp4_rht (mixprec_engine_get_config (engine),
                                                   &model->rht_mask) &&
                       mixprec_config_get_fp4_recipe (mixprec_engine_get_config (engine), &recipe,
                                                      NULL) &&
                       recipe != MIXPREC_BLOCK_RECIPE_MXFP4;
  }

  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    model->grad_mult[id] = 1.0f;
  read_dtypes (model);

  model->contexts = g_new (guint8, rows * shape->block_size);
  model->targets = g_new (guint8, rows);
  model->x0 = g_new (gfloat, rows * in_width);
  model->x0c = g_new (gfloat, rows * in_width);
  model->a1 = g_new (gfloat, rows * shape->n_hidden);
  model->t1 = g_new (gfloat, rows * shape->n_hidden);
  model->t1c = g_new (gfloat, rows * shape->n_hidden);
  model->a2 = g_new (gfloat, rows * shape->n_hidden);
  model->t2 = g_new (gfloat, rows * shape->n_hidden);
  model->t2c = g_new (gfloat, rows * shape->n_hidden);
  model->mean1 = g_new (gfloat, rows);
  model->rstd1 = g_new (gfloat, rows);
  model->mean2 = g_new (gfloat, rows);
  model->rstd2 = g_new (gfloat, rows);
  model->logits = g_new (gfloat, rows * CHARLM_VOCAB);
  model->probs = g_new (gfloat, rows * CHARLM_VOCAB);
  model->dlogits = g_new (gfloat, rows * CHARLM_VOCAB);
  model->dh = g_new (gfloat, rows * shape->n_hidden);
  model->dh2 = g_new (gfloat, rows * shape->n_hidden);
  model->dx0 = g_new (gfloat, rows * in_width);
  model->scratch = g_malloc (rows * widest * sizeof (gfloat));

  charlm_model_load_weights (model);
  return g_steal_pointer (&model);
}

void
charlm_model_free (CharlmModel *model)
{
  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    {
      g_clear_object (&model->params[id]);
      g_free (model->w[id]);
      g_free (model->g[id]);
    }
  g_free (model->contexts);
  g_free (model->targets);
  g_free (model->x0);
  g_free (model->x0c);
  g_free (model->a1);
  g_free (model->t1);
  g_free (model->t1c);
  g_free (model->a2);
  g_free (model->t2);
  g_free (model->t2c);
  g_free (model->mean1);
  g_free (model->rstd1);
  g_free (model->mean2);
  g_free (model->rstd2);
  g_free (model->logits);
  g_free (model->probs);
  g_free (model->dlogits);
  g_free (model->dh);
  g_free (model->dh2);
  g_free (model->dx0);
  g_free (model->scratch);
  g_free (model);
}

guint64
charlm_model_get_n_params (CharlmModel *model)
{
  guint64 total = 0;

  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    total += model->numel[id];
  return total;
}

/* --grad-multiplier NAME=FACTOR: parameter @param_name's gradient
 * multiplied by @factor before it is stored in its gradient dtype, as a
 * gradient hook scales one module's gradients. Adam's step hardly depends
 * on a constant factor, so in fp32 and bf16 the run barely changes; in
 * fp16 a small factor pushes the module's gradients below fp16's range. */
gboolean
charlm_model_set_grad_multiplier (CharlmModel  *model,
                                  const gchar  *param_name,
                                  gdouble       factor,
                                  GError      **error)
{
  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    if (g_str_equal (mixprec_param_get_name (model->params[id]), param_name))
      {
        model->grad_mult[id] = (gfloat) factor;
        return TRUE;
      }
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
               "--grad-multiplier: the model has no parameter '%s'", param_name);
  return FALSE;
}

MixprecParam *
charlm_model_get_param (CharlmModel   *model,
                        CharlmParamId  id)
{
  g_return_val_if_fail (id < CHARLM_N_PARAMS, NULL);
  return model->params[id];
}

/* The dtype each layer computes in: its parameters' working dtype, which
 * mixprec.auto_precision may change at a step boundary. */
static void
read_dtypes (CharlmModel *model)
{
  model->dt_wte = mixprec_param_get_working_dtype (model->params[CHARLM_WTE]);
  model->dt_h1 = mixprec_param_get_working_dtype (model->params[CHARLM_H1_W]);
  model->dt_ln1 = mixprec_param_get_working_dtype (model->params[CHARLM_LN1_W]);
  model->dt_h2 = mixprec_param_get_working_dtype (model->params[CHARLM_H2_W]);
  model->dt_ln2 = mixprec_param_get_working_dtype (model->params[CHARLM_LN2_W]);
  model->dt_out = mixprec_param_get_working_dtype (model->params[CHARLM_OUT_W]);
}

/* Widens the engine's working copies (fp16/bf16/fp32) to fp32 once per
 * optimizer step; the widened values are exactly the low-precision ones.
 * A parameter the config's fp8 section puts in FP8 (the Linear layers')
 * is read from its FP8 working copy instead, which forward and backward
 * then both use. */
void
charlm_model_load_weights (CharlmModel *model)
{
  g_autoptr(GError) gather_error = NULL;

  /* Under ZeRO-3 each rank keeps a shard; the whole working copies exist
   * between gather and release (a no-op at other stages). */
  if (!mixprec_engine_gather_all (model->engine, &gather_error))
    g_error ("gathering the working weights: %s", gather_error->message);
  read_dtypes (model);
  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    {
      g_autoptr(GError) error = NULL;

      if (!example_read_working (model->params[id], model->mx_block_size, model->w[id],
                                 model->numel[id], &error))
        g_error ("%s", error->message);
    }
  mixprec_engine_release_all (model->engine);
}

/* Hidden block: Linear -> LayerNorm -> tanh, returning the tanh output.
 * @in is already in the Linear's dtype; @weight is the Linear's id, the
 * LayerNorm's weight and bias come next. */
static void
hidden_forward (CharlmModel  *model,
                const gfloat *in,
                guint         n_in,
                CharlmParamId weight,
                MixprecDType  dt_linear,
                MixprecDType  dt_ln,
                gfloat       *a,
                gfloat       *mean,
                gfloat       *rstd,
                gfloat       *t)
{
  guint batch = model->batch;
  guint h = model->shape.n_hidden;
  gsize n = (gsize) batch * h;

  linear_forward (a, in, model->w[weight], NULL, batch, n_in, h);
  store_as (model, dt_linear, a, n);
  /* a is exact in dt_ln whenever dt_ln is at least as wide, which the
   * engine's policies guarantee (LayerNorm is never narrower). */
  layernorm_forward (t, mean, rstd, a, model->w[weight + 1], model->w[weight + 2], batch, h);
  store_as (model, dt_ln, t, n);
  for (gsize i = 0; i < n; i++)
    t[i] = tanhf (t[i]);
  store_as (model, dt_ln, t, n);
}

gdouble
charlm_model_forward (CharlmModel  *model,
                      const guint8 *contexts,
                      const guint8 *targets,
                      guint         batch)
{
  const CharlmShape *s = &model->shape;
  gsize in_width = (gsize) s->block_size * s->n_embd;
  gsize nh = (gsize) batch * s->n_hidden;

  g_return_val_if_fail (batch > 0 && batch <= model->max_batch, NAN);

  model->batch = batch;
  memcpy (model->contexts, contexts, (gsize) batch * s->block_size);
  memcpy (model->targets, targets, batch);

  /* Embedding lookup: rows of the working table, already in dt_wte. */
  for (guint n = 0; n < batch; n++)
    for (guint b = 0; b < s->block_size; b++)
      memcpy (model->x0 + n * in_width + (gsize) b * s->n_embd,
              model->w[CHARLM_WTE] + (gsize) contexts[(gsize) n * s->block_size + b] * s->n_embd,
              s->n_embd * sizeof (gfloat));

  cast_into (model, model->dt_h1, model->x0c, model->x0, batch * in_width);
  hidden_forward (model, model->x0c, in_width, CHARLM_H1_W, model->dt_h1, model->dt_ln1,
                  model->a1, model->mean1, model->rstd1, model->t1);
  cast_into (model, model->dt_h2, model->t1c, model->t1, nh);
  hidden_forward (model, model->t1c, s->n_hidden, CHARLM_H2_W, model->dt_h2, model->dt_ln2,
                  model->a2, model->mean2, model->rstd2, model->t2);
  cast_into (model, model->dt_out, model->t2c, model->t2, nh);

  linear_forward (model->logits, model->t2c, model->w[CHARLM_OUT_W], model->w[CHARLM_OUT_B],
                  batch, s->n_hidden, CHARLM_VOCAB);
  store_as (model, model->dt_out, model->logits, (gsize) batch * CHARLM_VOCAB);

  return cross_entropy_forward (model->probs, model->logits, targets, batch);
}

/* Backward through tanh and LayerNorm of one hidden block: @dt holds the
 * gradient of t on entry; the gradient of a is written to @da. */
static void
hidden_backward_norm (CharlmModel  *model,
                      gfloat       *dt,
                      gfloat       *da,
                      const gfloat *a,
                      const gfloat *mean,
                      const gfloat *rstd,
                      const gfloat *t,
                      CharlmParamId weight,
                      MixprecDType  dt_linear,
                      MixprecDType  dt_ln)
{
  guint batch = model->batch;
  guint h = model->shape.n_hidden;
  gsize n = (gsize) batch * h;

  store_as (model, dt_ln, dt, n);
  for (gsize i = 0; i < n; i++)
    dt[i] *= 1.0f - t[i] * t[i];
  store_grad_as (model, dt_ln, dt, n);
  layernorm_backward (da, model->g[weight + 1], model->g[weight + 2], dt, a, mean, rstd,
                      model->w[weight + 1], batch, h);
  store_grad_as (model, dt_linear, da, n);
}

/* Hands the fp32 sums to the engine in the parameter's gradient dtype. */
static void
write_grads (CharlmModel *model)
{
  for (guint id = 0; id < CHARLM_N_PARAMS; id++)
    {
      g_autoptr(GError) error = NULL;
      MixprecParam *p = model->params[id];

      MixprecDType dtype = mixprec_param_get_grad_dtype (p);

      /* A multiplier acts in fp32, before the gradient is stored in its
       * dtype: what a gradient hook in the backward pass would do. */
      if (model->grad_mult[id] != 1.0f)
        for (gsize i = 0; i < model->numel[id]; i++)
          model->g[id][i] *= model->grad_mult[id];
      /* Rounded here first only to count what the conversion flushes. */
      store_grad_as (model, dtype, model->g[id], model->numel[id]);
      g_autoptr(GBytes) grad = g_bytes_new_static (model->g[id], model->numel[id] * sizeof (gfloat));

      if (!mixprec_param_set_grad (p, MIXPREC_DTYPE_FLOAT32, grad, &error))
        g_error ("writing the gradient of %s: %s", mixprec_param_get_name (p), error->message);
    }
}

/* Whether layer @id's weight gradient comes from NVFP4 operands. */
static gboolean
wgrad_fp4 (CharlmModel *model, CharlmParamId id)
{
  return model->fp4_wgrad && mixprec_param_is_fp4 (model->params[id]) && model->batch % 16 == 0;
}

void
charlm_model_backward (CharlmModel *model,
                       gdouble      loss_scale)
{
  const CharlmShape *s = &model->shape;
  guint batch = model->batch;
  gsize in_width = (gsize) s->block_size * s->n_embd;
  gsize nh = (gsize) batch * s->n_hidden;
  /* d(scale * mean loss)/dlogits = scale / batch * (softmax - onehot). */
  gfloat factor = (gfloat) (loss_scale / batch);

  for (guint n = 0; n < batch; n++)
    for (guint v = 0; v < CHARLM_VOCAB; v++)
      {
        gsize k = (gsize) n * CHARLM_VOCAB + v;

        model->dlogits[k] = (model->probs[k] - (v == model->targets[n] ? 1.0f : 0.0f)) * factor;
      }
  store_grad_as (model, model->dt_out, model->dlogits, (gsize) batch * CHARLM_VOCAB);

  linear_backward (model->dh, model->g[CHARLM_OUT_W], model->g[CHARLM_OUT_B], model->dlogits,
                   model->t2c, model->w[CHARLM_OUT_W], batch, s->n_hidden, CHARLM_VOCAB);
  store_grad_as (model, model->dt_out, model->dh, nh);

  hidden_backward_norm (model, model->dh, model->dh2, model->a2, model->mean2, model->rstd2,
                        model->t2, CHARLM_H2_W, model->dt_h2, model->dt_ln2);
  if (wgrad_fp4 (model, CHARLM_H2_W))
    linear_backward_fp4 (model, model->dh, model->g[CHARLM_H2_W], model->dh2, model->t1c,
                         model->w[CHARLM_H2_W], batch, s->n_hidden, s->n_hidden);
  else
    linear_backward (model->dh, model->g[CHARLM_H2_W], NULL, model->dh2, model->t1c,
                     model->w[CHARLM_H2_W], batch, s->n_hidden, s->n_hidden);
  store_grad_as (model, model->dt_h2, model->dh, nh);

  hidden_backward_norm (model, model->dh, model->dh2, model->a1, model->mean1, model->rstd1,
                        model->t1, CHARLM_H1_W, model->dt_h1, model->dt_ln1);
  if (wgrad_fp4 (model, CHARLM_H1_W))
    linear_backward_fp4 (model, model->dx0, model->g[CHARLM_H1_W], model->dh2, model->x0c,
                         model->w[CHARLM_H1_W], batch, in_width, s->n_hidden);
  else
    linear_backward (model->dx0, model->g[CHARLM_H1_W], NULL, model->dh2, model->x0c,
                     model->w[CHARLM_H1_W], batch, in_width, s->n_hidden);
  store_grad_as (model, model->dt_h1, model->dx0, batch * in_width);
  store_as (model, model->dt_wte, model->dx0, batch * in_width);

  /* Embedding: each context position adds its gradient to its row. */
  memset (model->g[CHARLM_WTE], 0, model->numel[CHARLM_WTE] * sizeof (gfloat));
  for (guint n = 0; n < batch; n++)
    for (guint b = 0; b < s->block_size; b++)
      {
        gfloat *row = model->g[CHARLM_WTE]
                      + (gsize) model->contexts[(gsize) n * s->block_size + b] * s->n_embd;
        const gfloat *d = model->dx0 + n * in_width + (gsize) b * s->n_embd;

        for (guint e = 0; e < s->n_embd; e++)
          row[e] += d[e];
      }

  write_grads (model);
}

/* Mean loss over every @stride-th example, in the same precision as
 * training. */
gdouble
charlm_model_evaluate (CharlmModel          *model,
                       const CharlmExamples *examples,
                       gsize                 stride)
{
  guint block = examples->block_size;
  g_autofree guint8 *contexts = g_new (guint8, (gsize) model->max_batch * block);
  g_autofree guint8 *targets = g_new (guint8, model->max_batch);
  gdouble total = 0;
  gsize count = 0;
  gsize i = 0;

  g_return_val_if_fail (stride > 0 && block == model->shape.block_size, NAN);

  while (i < examples->n)
    {
      guint rows = 0;

      for (; i < examples->n && rows < model->max_batch; i += stride, rows++)
        {
          memcpy (contexts + (gsize) rows * block, examples->contexts + i * block, block);
          targets[rows] = examples->targets[i];
        }
      total += charlm_model_forward (model, contexts, targets, rows) * rows;
      count += rows;
    }
  return total / count;
}

/* The fraction of the nonzero gradient values stored since the last call
 * (activation gradients and the parameter gradients handed to the engine)
 * that the low-precision dtype flushed to zero. */
gdouble
charlm_model_take_underflow (CharlmModel *model)
{
  gdouble fraction = model->grad_nonzero > 0
                     ? (gdouble) model->grad_flushed / model->grad_nonzero : 0.0;

  model->grad_nonzero = 0;
  model->grad_flushed = 0;
  return fraction;
}

static gint
compare_floats (gconstpointer a,
                gconstpointer b)
{
  gfloat x = *(const gfloat *) a, y = *(const gfloat *) b;

  return (x > y) - (x < y);
}

/* One line per Linear weight matrix: the precision the matmuls read it in
 * and how many distinct values the fp32 weights they multiplied hold. An
 * FP8 tensor with one scale has at most 256 (the codes of one byte); a
 * bf16 one has thousands. */
gchar *
charlm_model_describe_linear_weights (CharlmModel *model)
{
  const CharlmParamId linear[] = { CHARLM_H1_W, CHARLM_H2_W, CHARLM_OUT_W };
  g_autoptr(GString) text = g_string_new (NULL);

  for (guint k = 0; k < G_N_ELEMENTS (linear); k++)
    {
      MixprecParam *p = model->params[linear[k]];
      gsize n = model->numel[linear[k]];
      g_autofree gfloat *sorted = g_memdup2 (model->w[linear[k]], n * sizeof (gfloat));
      gsize distinct = n > 0;

      qsort (sorted, n, sizeof (gfloat), compare_floats);
      for (gsize i = 1; i < n; i++)
        distinct += sorted[i] != sorted[i - 1];

      g_string_append_printf (text, "%s: ", mixprec_param_get_name (p));
      if (mixprec_param_is_fp4 (p))
        g_string_append_printf (text, "%s (4-bit E2M1)",
                                mixprec_param_get_fp4_recipe (p) == MIXPREC_BLOCK_RECIPE_MXFP4 ? "MXFP4"
                                : mixprec_param_get_fp4_recipe (p) == MIXPREC_BLOCK_RECIPE_NVFP4_2D
                                ? "NVFP4 16x16" : "NVFP4");
      else if (!mixprec_param_is_fp8 (p))
        g_string_append (text, mixprec_dtype_get_name (mixprec_param_get_working_dtype (p)));
      else if (model->mx_block_size > 0)
        g_string_append_printf (text, "%s with an E8M0 scale per %u elements",
                                mixprec_dtype_get_name (mixprec_param_get_fp8_dtype (p)),
                                model->mx_block_size);
      else
        g_string_append_printf (text, "%s x scale_inv %g",
                                mixprec_dtype_get_name (mixprec_param_get_fp8_dtype (p)),
                                mixprec_param_get_fp8_scale_inv (p));
      g_string_append_printf (text, ", %zu distinct values in %zu\n", distinct, n);
    }
  return g_string_free (g_steal_pointer (&text), FALSE);
}
