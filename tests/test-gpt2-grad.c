/* test-gpt2-grad.c — the GPT-2 example's forward and backward in FP64
 * (examples/gpt2/gpt2-model.c built with -DGPT2_REAL_DOUBLE): the
 * gradients against central finite differences, the forward against a
 * naive implementation of the formulas written here, and the promises of
 * gpt2-model.h (loss scale, callback order, rounding, shape checks,
 * thread-count independence). */
#include <math.h>
#include <string.h>

#include <glib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gpt2-model.h"

#ifndef GPT2_REAL_DOUBLE
#error "test-gpt2-grad.c needs gpt2-model.c built with -DGPT2_REAL_DOUBLE"
#endif

typedef struct
{
  Gpt2Shape shape;
  guint batch;
  guint seq_len;
} TestCase;

/* Short sequences; and sequences longer than the 64-row blocks of the
 * causal attention, so that the blocks' edges are checked too. seq_len
 * below n_ctx leaves wpe rows without a gradient. */
static const TestCase small = { { 2, 2, 8, 6 }, 2, 5 };
static const TestCase long_seq = { { 1, 2, 8, 72 }, 2, 70 };

/* Weights well away from GPT-2's initialisation, so that attention is
 * far from uniform, GELU far from linear and LayerNorm far from the
 * identity; every tensor, biases and LayerNorm parameters included. */
static Gpt2Model *
make_model (const TestCase *tc,
            guint32         seed)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);
  Gpt2Model *model = gpt2_model_new (&tc->shape, tc->batch, &error);

  g_assert_no_error (error);
  g_assert_nonnull (model);
  gpt2_model_init_weights (model, seed);
  for (guint i = 0; i < gpt2_model_get_n_tensors (model); i++)
    {
      const Gpt2TensorInfo *t = gpt2_model_get_tensor (model, i);
      gpt2_real *w = gpt2_model_get_weights (model, i);
      double spread = t->n_dims == 2 ? 0.4 : 0.2;

      for (gsize j = 0; j < t->numel; j++)
        w[j] += g_rand_double_range (rand, -spread, spread);
    }
  return model;
}

static void
make_data (const TestCase *tc,
           guint32         seed,
           guint8         *tokens,
           guint8         *targets)
{
  g_autoptr(GRand) rand = g_rand_new_with_seed (seed);

  for (guint i = 0; i < tc->batch * tc->seq_len; i++)
    {
      tokens[i] = (guint8) g_rand_int_range (rand, 0, GPT2_VOCAB);
      targets[i] = (guint8) g_rand_int_range (rand, 0, GPT2_VOCAB);
    }
}

static gsize
tensor_bytes (Gpt2Model *model,
              guint      index)
{
  return gpt2_model_get_tensor (model, index)->numel * sizeof (gpt2_real);
}

static gpt2_real **
copy_grads (Gpt2Model *model)
{
  guint n = gpt2_model_get_n_tensors (model);
  gpt2_real **grads = g_new0 (gpt2_real *, n + 1);

  for (guint i = 0; i < n; i++)
    grads[i] = g_memdup2 (gpt2_model_get_grad (model, i), tensor_bytes (model, i));
  return grads;
}

static void
free_grads (gpt2_real **grads)
{
  for (guint i = 0; grads[i] != NULL; i++)
    g_free (grads[i]);
  g_free (grads);
}

/* ---- Finite differences --------------------------------------------- */

/* The elements of tensor @index to check: all of a small tensor, else 8
 * picked at random; for wte, the rows of tokens the input holds (whose
 * gradient has an embedding and a logits part) and rows it does not
 * (logits only); for wpe, the first and the last row (the last lies
 * beyond seq_len when seq_len < n_ctx). */
static guint
pick_elements (Gpt2Model    *model,
               guint         index,
               const guint8 *tokens,
               gsize         n_tokens,
               GRand        *rand,
               gsize        *picked)
{
  const Gpt2TensorInfo *t = gpt2_model_get_tensor (model, index);
  gsize C = gpt2_model_get_shape (model)->n_embd;
  guint n = 0;

  if (t->numel <= 8)
    {
      for (gsize j = 0; j < t->numel; j++)
        picked[n++] = j;
      return n;
    }
  if (index == 0)
    {
      guint unused = 0;

      while (memchr (tokens, unused, n_tokens) != NULL)
        unused++;
      picked[n++] = (gsize) tokens[0] * C + 1;
      picked[n++] = (gsize) tokens[1] * C + C - 1;
      picked[n++] = (gsize) tokens[2] * C;
      picked[n++] = (gsize) unused * C + 2;
    }
  else if (index == 1)
    {
      picked[n++] = 2;
      picked[n++] = (t->shape[0] - 1) * C + 3;
    }
  while (n < 8)
    picked[n++] = g_rand_int_range (rand, 0, (gint32) t->numel);
  return n;
}

static void
check_finite_differences (const TestCase *tc)
{
  g_autoptr(Gpt2Model) model = make_model (tc, 11);
  g_autoptr(GRand) rand = g_rand_new_with_seed (5);
  g_autofree guint8 *tokens = g_malloc (tc->batch * tc->seq_len);
  g_autofree guint8 *targets = g_malloc (tc->batch * tc->seq_len);
  /* Fourth-order central differences, (8 (f(w+h) - f(w-h)) - (f(w+2h) -
   * f(w-2h))) / 12h: their truncation error, h^4 f^(5) / 30, is far below
   * the cancellation error, about eps |f| / h = 1e-16 * 6 / 1e-4, near
   * 1e-11. (Plain two-point differences leave h^2 f'''(w) / 6, and these
   * weights reach f''' ~ 400, which at h = 1e-5 is already 6e-9.) The
   * worst case seen over both shapes is 4.4e-11, the gradients stay
   * below 1, so an error bound of 1e-9 on the scale max (1, |a|, |n|)
   * leaves a factor 20 while any wrong term, 1e-6 or more, still fails. */
  const double h = 1e-4, tol = 1e-9;
  double worst = 0;
  guint n_checked = 0;

  make_data (tc, 3, tokens, targets);
  gpt2_model_forward (model, tokens, targets, tc->batch, tc->seq_len);
  g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));

  for (guint i = 0; i < gpt2_model_get_n_tensors (model); i++)
    {
      gpt2_real *w = gpt2_model_get_weights (model, i);
      const gpt2_real *g = gpt2_model_get_grad (model, i);
      gsize picked[8];
      guint n = pick_elements (model, i, tokens, tc->batch * tc->seq_len, rand, picked);

      for (guint p = 0; p < n; p++)
        {
          gsize j = picked[p];
          double saved = w[j], numeric, err, f[4];
          const double steps[4] = { 2 * h, h, -h, -2 * h };

          for (guint k = 0; k < 4; k++)
            {
              w[j] = saved + steps[k];
              f[k] = gpt2_model_forward (model, tokens, targets, tc->batch, tc->seq_len);
            }
          w[j] = saved;
          numeric = (8 * (f[1] - f[2]) - (f[0] - f[3])) / (12 * h);
          err = fabs (g[j] - numeric) / MAX (1.0, MAX (fabs (g[j]), fabs (numeric)));
          if (err > tol)
            g_test_message ("%s[%" G_GSIZE_FORMAT "]: analytic %.12g, numeric %.12g",
                            gpt2_model_get_tensor (model, i)->name, j, g[j], numeric);
          g_assert_cmpfloat (err, <=, tol);
          worst = MAX (worst, err);
          n_checked++;
        }
    }
  g_test_message ("%u elements, worst error %.3g", n_checked, worst);

  /* The wpe rows beyond seq_len take no part. */
  if (tc->seq_len < tc->shape.n_ctx)
    {
      const gpt2_real *g = gpt2_model_get_grad (model, 1);

      for (gsize j = (gsize) tc->seq_len * tc->shape.n_embd;
           j < (gsize) tc->shape.n_ctx * tc->shape.n_embd; j++)
        g_assert_cmpfloat (g[j], ==, 0);
    }
}

static void
test_grad_finite_differences (void)
{
  check_finite_differences (&small);
  check_finite_differences (&long_seq);
}

/* ---- Loss scale ------------------------------------------------------ */

static void
test_grad_loss_scale (void)
{
  g_autoptr(Gpt2Model) model = make_model (&small, 12);
  guint8 tokens[10], targets[10];
  gpt2_real **unscaled;

  make_data (&small, 4, tokens, targets);
  gpt2_model_forward (model, tokens, targets, small.batch, small.seq_len);
  g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));
  unscaled = copy_grads (model);
  /* The same forward again: backward must not depend on a previous one
   * (the gradients are overwritten, not accumulated). */
  g_assert_true (gpt2_model_backward (model, 1024.0, NULL, NULL, NULL));

  /* Every operation of backward is linear in the gradient, and scaling
   * by a power of two is exact in binary floating point. */
  for (guint i = 0; i < gpt2_model_get_n_tensors (model); i++)
    {
      const gpt2_real *g = gpt2_model_get_grad (model, i);

      for (gsize j = 0; j < gpt2_model_get_tensor (model, i)->numel; j++)
        g_assert_cmpfloat (g[j], ==, 1024.0 * unscaled[i][j]);
    }
  free_grads (unscaled);
}

/* ---- Ready order ----------------------------------------------------- */

#define TEST_ERROR (g_quark_from_static_string ("test-gpt2-error"))

typedef struct
{
  Gpt2Model *model;
  GArray *seen;
  guint fail_at;                       /* 0: never */
} ReadyLog;

static gboolean
log_ready (guint            index,
           const gpt2_real *grad,
           gpointer         user_data,
           GError         **error)
{
  ReadyLog *log = user_data;

  g_assert_true (grad == gpt2_model_get_grad (log->model, index));
  g_array_append_val (log->seen, index);
  if (log->seen->len == log->fail_at)
    {
      g_set_error (error, TEST_ERROR, 1, "stop at %u", index);
      return FALSE;
    }
  return TRUE;
}

static void
test_grad_ready_order (void)
{
  g_autoptr(Gpt2Model) model = make_model (&small, 13);
  g_autoptr(GArray) seen = g_array_new (FALSE, FALSE, sizeof (guint));
  g_autoptr(GError) error = NULL;
  ReadyLog log = { model, seen, 0 };
  guint8 tokens[10], targets[10];
  guint n = gpt2_model_get_n_tensors (model), L = small.shape.n_layer;
  g_autofree guint *count = g_new0 (guint, n);
  guint pos = 0;

  make_data (&small, 5, tokens, targets);
  gpt2_model_forward (model, tokens, targets, small.batch, small.seq_len);
  g_assert_true (gpt2_model_backward (model, 1.0, log_ready, &log, &error));
  g_assert_no_error (error);

  g_assert_cmpuint (seen->len, ==, n);
  for (guint i = 0; i < seen->len; i++)
    count[g_array_index (seen, guint, i)]++;
  for (guint i = 0; i < n; i++)
    g_assert_cmpuint (count[i], ==, 1);

  /* ln_f, then the layers from the last, then wpe, and wte last. */
  for (; pos < 2; pos++)
    {
      guint index = g_array_index (seen, guint, pos);

      g_assert_true (g_str_has_prefix (gpt2_model_get_tensor (model, index)->name,
                                       "transformer.ln_f."));
    }
  for (guint l = L; l-- > 0;)
    for (guint k = 0; k < GPT2_LAYER_TENSORS; k++, pos++)
      {
        guint index = g_array_index (seen, guint, pos);

        g_assert_cmpuint (index, >=, gpt2_model_layer_tensor (l, 0));
        g_assert_cmpuint (index, <=, gpt2_model_layer_tensor (l, GPT2_FC_PROJ_B));
      }
  g_assert_cmpuint (g_array_index (seen, guint, pos), ==, 1);
  g_assert_cmpuint (g_array_index (seen, guint, pos + 1), ==, 0);

  /* A failing callback stops the pass with its error. */
  g_array_set_size (seen, 0);
  log.fail_at = 3;
  g_assert_false (gpt2_model_backward (model, 1.0, log_ready, &log, &error));
  g_assert_error (error, TEST_ERROR, 1);
  g_assert_cmpuint (seen->len, ==, 3);
}

/* ---- Forward against the formulas ------------------------------------ */

static void
ref_layernorm (double       *y,
               const double *x,
               const double *w,
               const double *b,
               guint         C)
{
  double m = 0, v = 0;

  for (guint j = 0; j < C; j++)
    m += x[j] / C;
  for (guint j = 0; j < C; j++)
    v += (x[j] - m) * (x[j] - m) / C;
  for (guint j = 0; j < C; j++)
    y[j] = (x[j] - m) / sqrt (v + 1e-5) * w[j] + b[j];
}

/* y[n_out] = W x + b, W [n_out, n_in] */
static void
ref_linear (double       *y,
            const double *x,
            const double *w,
            const double *b,
            guint         n_in,
            guint         n_out)
{
  for (guint o = 0; o < n_out; o++)
    {
      y[o] = b[o];
      for (guint i = 0; i < n_in; i++)
        y[o] += w[o * n_in + i] * x[i];
    }
}

/* One sequence at a time, one position at a time, straight from the
 * definitions of GPT2LMHeadModel; returns the summed cross-entropy. */
static double
ref_sequence_loss (Gpt2Model    *model,
                   const guint8 *tokens,
                   const guint8 *targets,
                   guint         T,
                   double       *logits)
{
  const Gpt2Shape *s = gpt2_model_get_shape (model);
  guint C = s->n_embd, NH = s->n_head, hs = C / NH, L = s->n_layer;
  const double *wte = gpt2_model_get_weights (model, 0);
  const double *wpe = gpt2_model_get_weights (model, 1);
  g_autofree double *x = g_new (double, T * C);
  g_autofree double *qkv = g_new (double, T * 3 * C);
  g_autofree double *h = g_new (double, 4 * C);
  g_autofree double *y = g_new (double, C);
  g_autofree double *f = g_new (double, 4 * C);
  g_autofree double *a = g_new (double, T);
  double loss = 0;

  for (guint t = 0; t < T; t++)
    for (guint j = 0; j < C; j++)
      x[t * C + j] = wte[tokens[t] * C + j] + wpe[t * C + j];

  for (guint l = 0; l < L; l++)
    {
#define W(k) gpt2_model_get_weights (model, gpt2_model_layer_tensor (l, k))
      g_autofree double *att_out = g_new0 (double, T * C);

      for (guint t = 0; t < T; t++)
        {
          ref_layernorm (h, x + t * C, W (GPT2_LN_1_W), W (GPT2_LN_1_B), C);
          ref_linear (qkv + t * 3 * C, h, W (GPT2_ATTN_W), W (GPT2_ATTN_B), C, 3 * C);
        }
      for (guint t = 0; t < T; t++)
        for (guint hd = 0; hd < NH; hd++)
          {
            double maxv = -INFINITY, sum = 0;

            for (guint u = 0; u <= t; u++)
              {
                a[u] = 0;
                for (guint d = 0; d < hs; d++)
                  a[u] += qkv[t * 3 * C + hd * hs + d] * qkv[u * 3 * C + C + hd * hs + d];
                a[u] /= sqrt (hs);
                maxv = MAX (maxv, a[u]);
              }
            for (guint u = 0; u <= t; u++)
              sum += exp (a[u] - maxv);
            for (guint u = 0; u <= t; u++)
              for (guint d = 0; d < hs; d++)
                att_out[t * C + hd * hs + d] += exp (a[u] - maxv) / sum
                                                * qkv[u * 3 * C + 2 * C + hd * hs + d];
          }
      for (guint t = 0; t < T; t++)
        {
          ref_linear (y, att_out + t * C, W (GPT2_ATTN_PROJ_W), W (GPT2_ATTN_PROJ_B), C, C);
          for (guint j = 0; j < C; j++)
            x[t * C + j] += y[j];
          ref_layernorm (h, x + t * C, W (GPT2_LN_2_W), W (GPT2_LN_2_B), C);
          ref_linear (f, h, W (GPT2_FC_W), W (GPT2_FC_B), C, 4 * C);
          for (guint j = 0; j < 4 * C; j++)
            f[j] = 0.5 * f[j] * (1 + tanh (sqrt (2 / G_PI) * (f[j] + 0.044715 * pow (f[j], 3))));
          ref_linear (y, f, W (GPT2_FC_PROJ_W), W (GPT2_FC_PROJ_B), 4 * C, C);
          for (guint j = 0; j < C; j++)
            x[t * C + j] += y[j];
        }
#undef W
    }

  for (guint t = 0; t < T; t++)
    {
      double *z = logits + t * GPT2_VOCAB, sum = 0;

      ref_layernorm (h, x + t * C, gpt2_model_get_weights (model, 2 + 12 * L),
                     gpt2_model_get_weights (model, 2 + 12 * L + 1), C);
      for (guint v = 0; v < GPT2_VOCAB; v++)
        {
          z[v] = 0;
          for (guint j = 0; j < C; j++)
            z[v] += h[j] * wte[v * C + j];
          sum += exp (z[v]);
        }
      loss += log (sum) - z[targets[t]];
    }
  return loss;
}

static void
check_against_reference (const TestCase *tc)
{
  g_autoptr(Gpt2Model) model = make_model (tc, 14);
  g_autofree guint8 *tokens = g_malloc (tc->batch * tc->seq_len);
  g_autofree guint8 *targets = g_malloc (tc->batch * tc->seq_len);
  g_autofree double *ref_logits = g_new (double, tc->seq_len * GPT2_VOCAB);
  double loss, ref = 0;

  make_data (tc, 6, tokens, targets);
  loss = gpt2_model_forward (model, tokens, targets, tc->batch, tc->seq_len);
  for (guint b = 0; b < tc->batch; b++)
    {
      const gpt2_real *logits = gpt2_model_get_logits (model) + b * tc->seq_len * GPT2_VOCAB;

      ref += ref_sequence_loss (model, tokens + b * tc->seq_len, targets + b * tc->seq_len,
                                tc->seq_len, ref_logits);
      /* The same sums in another order: a few ulps of values near 1. */
      for (guint i = 0; i < tc->seq_len * GPT2_VOCAB; i++)
        g_assert_cmpfloat_with_epsilon (logits[i], ref_logits[i], 1e-12);
    }
  ref /= tc->batch * tc->seq_len;
  g_assert_cmpfloat_with_epsilon (loss, ref, 1e-12);
}

static void
test_forward_reference (void)
{
  const TestCase one_layer = { { 1, 2, 8, 4 }, 1, 4 };

  /* GPT-2's initialisation gives logits of about 0.02 sqrt (C) = 0.057
   * (LayerNorm outputs of norm sqrt (C) against N(0, 0.02^2) rows of wte):
   * the loss is ln 256 plus half their variance, 0.0016, give or take
   * their spread over the 140 positions, 0.057 / sqrt (140) = 0.005. */
  {
    g_autoptr(Gpt2Model) model = gpt2_model_new (&long_seq.shape, long_seq.batch, NULL);
    g_autofree guint8 *tokens = g_malloc (2 * long_seq.seq_len);
    g_autofree guint8 *targets = g_malloc (2 * long_seq.seq_len);
    double loss;

    gpt2_model_init_weights (model, 1);
    make_data (&long_seq, 7, tokens, targets);
    loss = gpt2_model_forward (model, tokens, targets, 2, long_seq.seq_len);
    g_assert_cmpfloat_with_epsilon (loss, 8 * G_LN2, 0.02);
  }

  /* All weights zero but LayerNorm's: every logit is 0, the loss ln 256. */
  {
    g_autoptr(Gpt2Model) model = gpt2_model_new (&one_layer.shape, 1, NULL);
    guint8 tokens[4], targets[4];
    const gpt2_real *logits;

    gpt2_model_init_weights (model, 1);
    for (guint i = 0; i < gpt2_model_get_n_tensors (model); i++)
      if (gpt2_model_get_tensor (model, i)->n_dims == 2)
        memset (gpt2_model_get_weights (model, i), 0,
                gpt2_model_get_tensor (model, i)->numel * sizeof (gpt2_real));
    make_data (&one_layer, 8, tokens, targets);
    g_assert_cmpfloat_with_epsilon (gpt2_model_forward (model, tokens, targets, 1, 4),
                                    8 * G_LN2, 1e-15);
    logits = gpt2_model_get_logits (model);
    for (guint i = 0; i < 4 * GPT2_VOCAB; i++)
      g_assert_cmpfloat (logits[i], ==, 0);
  }

  check_against_reference (&small);
  check_against_reference (&long_seq);
}

/* Changing the token at one position changes nothing before it. */
static void
test_forward_causal (void)
{
  g_autoptr(Gpt2Model) model = make_model (&long_seq, 15);
  guint T = long_seq.seq_len, pos = 3;
  g_autofree guint8 *tokens = g_malloc (2 * T);
  g_autofree guint8 *targets = g_malloc (2 * T);
  g_autofree gpt2_real *before = NULL;
  const gpt2_real *after;

  make_data (&long_seq, 9, tokens, targets);
  gpt2_model_forward (model, tokens, targets, 2, T);
  before = g_memdup2 (gpt2_model_get_logits (model), 2 * T * GPT2_VOCAB * sizeof (gpt2_real));
  tokens[T + 65] ^= 0x55;
  tokens[pos] ^= 0x55;
  gpt2_model_forward (model, tokens, targets, 2, T);
  after = gpt2_model_get_logits (model);
  g_assert_cmpmem (after, pos * GPT2_VOCAB * sizeof (gpt2_real),
                   before, pos * GPT2_VOCAB * sizeof (gpt2_real));
  g_assert_cmpmem (after + T * GPT2_VOCAB, 65 * GPT2_VOCAB * sizeof (gpt2_real),
                   before + T * GPT2_VOCAB, 65 * GPT2_VOCAB * sizeof (gpt2_real));
  g_assert_cmpfloat (after[pos * GPT2_VOCAB], !=, before[pos * GPT2_VOCAB]);
}

/* ---- Rounding -------------------------------------------------------- */

/* Round to nearest even on bfloat16's 8 significant bits, straight from
 * the double's bits (no double rounding through float); the values here
 * stay far inside bfloat16's exponent range. */
static void
round_bf16 (double  *x,
            gsize    n,
            gpointer user_data)
{
  guint *calls = user_data;

  (*calls)++;
  for (gsize i = 0; i < n; i++)
    {
      guint64 bits;

      memcpy (&bits, &x[i], sizeof bits);
      bits += (G_GUINT64_CONSTANT (1) << 44) - 1 + ((bits >> 45) & 1);
      bits &= ~((G_GUINT64_CONSTANT (1) << 45) - 1);
      memcpy (&x[i], &bits, sizeof bits);
    }
}

static gboolean
is_bf16 (double x)
{
  guint64 bits;

  memcpy (&bits, &x, sizeof bits);
  return (bits & ((G_GUINT64_CONSTANT (1) << 45) - 1)) == 0;
}

static void
test_rounding (void)
{
  g_autoptr(Gpt2Model) model = make_model (&small, 16);
  guint8 tokens[10], targets[10];
  guint calls = 0, forward_calls;
  double exact, rounded;
  const gpt2_real *logits;

  make_data (&small, 10, tokens, targets);
  exact = gpt2_model_forward (model, tokens, targets, 2, 5);
  gpt2_model_set_rounding (model, round_bf16, &calls);
  rounded = gpt2_model_forward (model, tokens, targets, 2, 5);
  forward_calls = calls;
  g_test_message ("loss %.9g exact, %.9g through bfloat16, %u roundings", exact, rounded, calls);

  /* Per layer: ln_1, c_attn, scores, probabilities, att · v, c_proj,
   * ln_2, c_fc, GELU, c_proj; then ln_f and the logits. */
  g_assert_cmpuint (forward_calls, ==, 10 * small.shape.n_layer + 2);
  g_assert_cmpfloat (rounded, !=, exact);
  /* bfloat16 keeps 8 bits: a relative error near 2^-9 per value, which
   * averages out over the sums of a forward far below a percent. */
  g_assert_cmpfloat (fabs (rounded - exact), <, 0.02 * exact);
  logits = gpt2_model_get_logits (model);
  for (guint i = 0; i < 10 * GPT2_VOCAB; i++)
    g_assert_true (is_bf16 (logits[i]));

  g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));
  g_assert_cmpuint (calls, >, forward_calls);

  gpt2_model_set_rounding (model, NULL, NULL);
  g_assert_cmpfloat (gpt2_model_forward (model, tokens, targets, 2, 5), ==, exact);
}

/* Leaves the values as they are, but checks them: the model hands only
 * values it computed (never uninitialised memory) to the rounding. */
static void
round_none (double  *x,
            gsize    n,
            gpointer user_data)
{
  guint *calls = user_data;

  (*calls)++;
  g_assert_cmpuint (n, >, 0);
  for (gsize i = 0; i < n; i++)
    g_assert_true (isfinite (x[i]));
}

/* With a rounding function set, attention runs step by step so that the
 * rounding sees each product (without one, each (batch, head) pair runs
 * through in one go): a function that changes nothing must give the same
 * bits as none. */
static void
test_rounding_identity (void)
{
  g_autoptr(Gpt2Model) model = make_model (&long_seq, 18);
  g_autofree guint8 *tokens = g_malloc (2 * long_seq.seq_len);
  g_autofree guint8 *targets = g_malloc (2 * long_seq.seq_len);
  guint calls = 0;
  double plain, rounded;
  gpt2_real **grads;

  make_data (&long_seq, 12, tokens, targets);
  plain = gpt2_model_forward (model, tokens, targets, 2, long_seq.seq_len);
  g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));
  grads = copy_grads (model);

  gpt2_model_set_rounding (model, round_none, &calls);
  rounded = gpt2_model_forward (model, tokens, targets, 2, long_seq.seq_len);
  g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));
  g_assert_cmpuint (calls, >, 0);
  g_assert_cmpfloat (rounded, ==, plain);
  for (guint i = 0; i < gpt2_model_get_n_tensors (model); i++)
    g_assert_cmpmem (gpt2_model_get_grad (model, i), tensor_bytes (model, i),
                     grads[i], tensor_bytes (model, i));
  free_grads (grads);
}

/* ---- Tensors and initialisation -------------------------------------- */

static void
test_tensors (void)
{
  g_autoptr(Gpt2Model) model = gpt2_model_new (&small.shape, 1, NULL);
  guint C = small.shape.n_embd, L = small.shape.n_layer;
  /* GPT-2's count: (V + T) C embeddings, 12 C^2 + 13 C per block, 2 C for ln_f. */
  gsize expected = (gsize) (GPT2_VOCAB + small.shape.n_ctx) * C + L * (12 * C * C + 13 * C) + 2 * C;
  const Gpt2TensorInfo *t;

  g_assert_cmpuint (gpt2_model_get_n_tensors (model), ==, 2 + 12 * L + 2);
  g_assert_cmpuint (gpt2_model_get_n_params (model), ==, expected);

  t = gpt2_model_get_tensor (model, 0);
  g_assert_cmpstr (t->name, ==, "transformer.wte.weight");
  g_assert_cmpstr (t->module_type, ==, "Embedding");
  g_assert_cmpuint (t->shape[0], ==, GPT2_VOCAB);
  t = gpt2_model_get_tensor (model, gpt2_model_layer_tensor (1, GPT2_ATTN_W));
  g_assert_cmpstr (t->name, ==, "transformer.h.1.attn.c_attn.weight");
  g_assert_cmpuint (t->n_dims, ==, 2);
  g_assert_cmpuint (t->shape[0], ==, 3 * C);
  g_assert_cmpuint (t->shape[1], ==, C);
  t = gpt2_model_get_tensor (model, gpt2_model_layer_tensor (1, GPT2_FC_PROJ_W));
  g_assert_cmpstr (t->name, ==, "transformer.h.1.mlp.c_proj.weight");
  g_assert_cmpstr (t->module_type, ==, "Linear");
  g_assert_cmpuint (t->shape[0], ==, C);
  g_assert_cmpuint (t->shape[1], ==, 4 * C);
  t = gpt2_model_get_tensor (model, gpt2_model_layer_tensor (0, GPT2_LN_2_B));
  g_assert_cmpstr (t->name, ==, "transformer.h.0.ln_2.bias");
  g_assert_cmpstr (t->module_type, ==, "LayerNorm");
  g_assert_cmpuint (t->n_dims, ==, 1);
  t = gpt2_model_get_tensor (model, 2 + 12 * L + 1);
  g_assert_cmpstr (t->name, ==, "transformer.ln_f.bias");
}

static double
sample_std (const gpt2_real *x,
            gsize            n)
{
  double s = 0;

  for (gsize i = 0; i < n; i++)
    s += x[i] * x[i];
  return sqrt (s / n);
}

static void
test_init (void)
{
  const Gpt2Shape shape = { 2, 2, 64, 64 };
  g_autoptr(Gpt2Model) a = gpt2_model_new (&shape, 1, NULL);
  g_autoptr(Gpt2Model) b = gpt2_model_new (&shape, 1, NULL);
  guint proj = gpt2_model_layer_tensor (1, GPT2_FC_PROJ_W);
  gsize n_wte = gpt2_model_get_tensor (a, 0)->numel;
  gsize n_proj = gpt2_model_get_tensor (a, proj)->numel;

  gpt2_model_init_weights (a, 42);
  gpt2_model_init_weights (b, 42);
  for (guint i = 0; i < gpt2_model_get_n_tensors (a); i++)
    g_assert_cmpmem (gpt2_model_get_weights (a, i), tensor_bytes (a, i),
                     gpt2_model_get_weights (b, i), tensor_bytes (b, i));

  /* The standard deviations of GPT-2's initialisation, to the sampling
   * error of 16384 values (under 1 %); 0.02 / sqrt (2 L) for c_proj. */
  g_assert_cmpfloat_with_epsilon (sample_std (gpt2_model_get_weights (a, 0), n_wte),
                                  0.02, 0.02 * 0.03);
  g_assert_cmpfloat_with_epsilon (sample_std (gpt2_model_get_weights (a, proj), n_proj),
                                  0.01, 0.01 * 0.03);
#define LAYER0(which) gpt2_model_get_weights (a, gpt2_model_layer_tensor (0, which))
  g_assert_cmpfloat (LAYER0 (GPT2_LN_1_W)[5], ==, 1);
  g_assert_cmpfloat (LAYER0 (GPT2_LN_1_B)[5], ==, 0);
  g_assert_cmpfloat (LAYER0 (GPT2_FC_B)[5], ==, 0);
#undef LAYER0

  /* Another seed, other numbers; the same seed on a model of another
   * depth keeps the tensors it shares (a stream per tensor). */
  gpt2_model_init_weights (b, 43);
  g_assert_cmpfloat (gpt2_model_get_weights (a, 0)[0], !=, gpt2_model_get_weights (b, 0)[0]);
  {
    const Gpt2Shape deeper = { 3, 2, 64, 64 };
    g_autoptr(Gpt2Model) c = gpt2_model_new (&deeper, 1, NULL);
    guint attn = gpt2_model_layer_tensor (1, GPT2_ATTN_W);

    gpt2_model_init_weights (c, 42);
    g_assert_cmpmem (gpt2_model_get_weights (a, attn), tensor_bytes (a, attn),
                     gpt2_model_get_weights (c, attn), tensor_bytes (c, attn));
  }
}

/* ---- Shapes ---------------------------------------------------------- */

static void
check_rejected (Gpt2Shape    shape,
                guint        max_batch,
                const gchar *named)
{
  g_autoptr(GError) error = NULL;
  g_autoptr(Gpt2Model) model = gpt2_model_new (&shape, max_batch, &error);

  g_assert_null (model);
  g_assert_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE);
  g_assert_nonnull (strstr (error->message, named));
}

static void
test_shape_invalid (void)
{
  check_rejected ((Gpt2Shape) { 2, 3, 8, 6 }, 1, "n_embd");
  check_rejected ((Gpt2Shape) { 0, 2, 8, 6 }, 1, "n_layer");
  check_rejected ((Gpt2Shape) { 2, 0, 8, 6 }, 1, "n_head");
  check_rejected ((Gpt2Shape) { 2, 2, 0, 6 }, 1, "n_embd");
  check_rejected ((Gpt2Shape) { 2, 2, 8, 0 }, 1, "n_ctx");
  check_rejected ((Gpt2Shape) { 2, 2, 8, 6 }, 0, "max_batch");
}

/* ---- Threads --------------------------------------------------------- */

/* 1, 2 and 3 threads: the same bits. */
static void
test_threads (void)
{
#ifdef _OPENMP
  const TestCase tc = { { 2, 4, 32, 80 }, 3, 80 };
  g_autoptr(Gpt2Model) model = make_model (&tc, 17);
  g_autofree guint8 *tokens = g_malloc (tc.batch * tc.seq_len);
  g_autofree guint8 *targets = g_malloc (tc.batch * tc.seq_len);
  int saved = omp_get_max_threads ();
  double loss1;
  gpt2_real **one;

  make_data (&tc, 11, tokens, targets);
  omp_set_num_threads (1);
  loss1 = gpt2_model_forward (model, tokens, targets, tc.batch, tc.seq_len);
  g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));
  one = copy_grads (model);

  for (int n = 2; n <= 3; n++)
    {
      double loss;

      omp_set_num_threads (n);
      loss = gpt2_model_forward (model, tokens, targets, tc.batch, tc.seq_len);
      g_assert_true (gpt2_model_backward (model, 1.0, NULL, NULL, NULL));
      g_assert_cmpmem (&loss, sizeof loss, &loss1, sizeof loss1);
      for (guint i = 0; i < gpt2_model_get_n_tensors (model); i++)
        g_assert_cmpmem (gpt2_model_get_grad (model, i), tensor_bytes (model, i),
                         one[i], tensor_bytes (model, i));
    }
  omp_set_num_threads (saved);
  free_grads (one);
#else
  g_test_skip ("built without OpenMP");
#endif
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/gpt2/grad/finite-differences", test_grad_finite_differences);
  g_test_add_func ("/gpt2/grad/loss-scale", test_grad_loss_scale);
  g_test_add_func ("/gpt2/grad/ready-order", test_grad_ready_order);
  g_test_add_func ("/gpt2/forward/reference", test_forward_reference);
  g_test_add_func ("/gpt2/forward/causal", test_forward_causal);
  g_test_add_func ("/gpt2/rounding", test_rounding);
  g_test_add_func ("/gpt2/rounding/identity", test_rounding_identity);
  g_test_add_func ("/gpt2/shape/invalid", test_shape_invalid);
  g_test_add_func ("/gpt2/tensors", test_tensors);
  g_test_add_func ("/gpt2/init", test_init);
  g_test_add_func ("/gpt2/threads", test_threads);
  return g_test_run ();
}
