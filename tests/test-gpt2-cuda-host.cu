/* test-gpt2-cuda-host.cu — the arithmetic of examples/gpt2/gpt2-cuda.cu's
 * kernels (examples/gpt2/gpt2-cuda-math.cuh: GELU, LayerNorm, causal
 * softmax, cross-entropy, forward and backward) compiled by nvcc with the
 * project's flags and run on the host, no GPU needed, against the
 * textbook formulas in double precision and against finite differences of
 * those formulas. One host thread plays a row's lanes (nlanes = 1).
 * Prints TAP. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../examples/gpt2/gpt2-cuda-math.cuh"

static int n_test;
static int n_failed;

static void
report (bool        ok,
        const char *what,
        double      worst)
{
  n_test++;
  if (!ok)
    n_failed++;
  printf ("%sok %d - %s\n", ok ? "" : "not ", n_test, what);
  if (!ok)
    printf ("# worst error %.3g\n", worst);
}

/* A fixed sequence of uniform numbers in [-1, 1): xorshift64*. */
static unsigned long long rng_state = 0x9e3779b97f4a7c15ull;

static double
uniform (void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double) ((rng_state * 0x2545f4914f6cdd1dull) >> 11) / 4503599627370496.0 - 1.0;
}

/* |got - want| relative to max (1, |want|). */
static double
err_rel1 (double got,
          double want)
{
  return fabs (got - want) / fmax (1.0, fabs (want));
}

/* ------------------------------------------------------------ references */

static double
ref_gelu (double x)
{
  return 0.5 * x * (1.0 + tanh (sqrt (2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double
ref_gelu_grad (double x)
{
  double k = sqrt (2.0 / M_PI), u = k * (x + 0.044715 * x * x * x), th = tanh (u);

  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

/* torch.nn.LayerNorm: biased variance, eps 1e-5. */
static void
ref_layernorm (const double *x,
               const double *w,
               const double *b,
               double       *out,
               int           n,
               double       *mean_out,
               double       *rstd_out)
{
  double mean = 0.0, var = 0.0;

  for (int i = 0; i < n; i++)
    mean += x[i];
  mean /= n;
  for (int i = 0; i < n; i++)
    var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  double rstd = 1.0 / sqrt (var + 1e-5);
  for (int i = 0; i < n; i++)
    out[i] = (x[i] - mean) * rstd * w[i] + b[i];
  *mean_out = mean;
  *rstd_out = rstd;
}

static void
ref_softmax (const double *x,
             double       *p,
             int           n)
{
  double mx = x[0], s = 0.0;

  for (int i = 1; i < n; i++)
    mx = fmax (mx, x[i]);
  for (int i = 0; i < n; i++)
    s += exp (x[i] - mx);
  for (int i = 0; i < n; i++)
    p[i] = exp (x[i] - mx) / s;
}

static double
ref_cross_entropy (const double *l,
                   int           n,
                   int           target)
{
  double mx = l[0], s = 0.0;

  for (int i = 1; i < n; i++)
    mx = fmax (mx, l[i]);
  for (int i = 0; i < n; i++)
    s += exp (l[i] - mx);
  return log (s) + mx - l[target];
}

/* ------------------------------------------------------------ GELU */

static void
test_gelu (void)
{
  double worst = 0.0, worst_ref = 0.0, worst_fd = 0.0;

  for (int i = -1000; i <= 1000; i++)
    {
      float x = (float) (i * 0.008);
      double dx = x, h = 1e-5;
      double fd = (ref_gelu (dx + h) - ref_gelu (dx - h)) / (2 * h);

      worst = fmax (worst, err_rel1 (gpt2_gelu (x), ref_gelu (dx)));
      worst_ref = fmax (worst_ref, err_rel1 (gpt2_gelu_backward (x, 0.75f), 0.75 * ref_gelu_grad (dx)));
      worst_fd = fmax (worst_fd, err_rel1 (ref_gelu_grad (dx), fd));
    }
  report (worst < 2e-6, "gelu matches 0.5 x (1 + tanh (sqrt (2/pi) (x + 0.044715 x^3))) on [-8, 8]", worst);
  report (worst_ref < 4e-6, "gelu_backward matches the analytic derivative times dout", worst_ref);
  report (worst_fd < 1e-7, "that derivative matches central differences of the double GELU", worst_fd);
}

/* ------------------------------------------------------------ LayerNorm */

#define LN_N 384

static void
test_layernorm (void)
{
  float x[LN_N], w[LN_N], b[LN_N], out[LN_N], mean, rstd;
  __nv_bfloat16 out_bf[LN_N];
  double dx[LN_N], dw[LN_N], db[LN_N], dout[LN_N], dmean, drstd;
  double worst = 0.0, worst_stats = 0.0;
  bool bf_ok = true;

  /* An offset of 100 on unit noise: a plain FP32 sum of x, or
   * E[x^2] - mean^2, would lose digits of xhat here; the shifted sums
   * do not. */
  for (int i = 0; i < LN_N; i++)
    {
      x[i] = (float) (100.0 + uniform ());
      w[i] = (float) (1.0 + 0.5 * uniform ());
      b[i] = (float) (0.1 * uniform ());
      dx[i] = x[i];
      dw[i] = w[i];
      db[i] = b[i];
    }
  gpt2_layernorm_row (x, w, b, out, LN_N, 0, 1, Gpt2SerialReduce (), &mean, &rstd);
  ref_layernorm (dx, dw, db, dout, LN_N, &dmean, &drstd);
  for (int i = 0; i < LN_N; i++)
    worst = fmax (worst, err_rel1 (out[i], dout[i]));
  worst_stats = fmax (fabs (mean - dmean) * drstd, fabs (rstd - drstd) / drstd);
  report (worst < 2e-5, "layernorm_row matches the double LayerNorm on a row offset by 100", worst);
  /* The FP32 mean of a row near 100 is itself only good to half an ulp
   * there, 0.66e-5 of this row's standard deviation. */
  report (worst_stats < 2e-5, "layernorm_row's mean (to 2e-5 standard deviations) and rstd match the double ones",
          worst_stats);

  gpt2_layernorm_row (x, w, b, out_bf, LN_N, 0, 1, Gpt2SerialReduce (), &mean, &rstd);
  for (int i = 0; i < LN_N; i++)
    {
      __nv_bfloat16 r = __float2bfloat16 (out[i]);
      bf_ok = bf_ok && memcmp (&r, &out_bf[i], sizeof r) == 0;
    }
  report (bf_ok, "layernorm_row into bfloat16 stores the FP32 result rounded once", 0.0);
}

static void
test_layernorm_backward (void)
{
  float x[LN_N], w[LN_N], dy[LN_N], dx[LN_N], b[LN_N], out[LN_N], mean, rstd;
  double rx[LN_N], rw[LN_N], rb[LN_N], rdy[LN_N], rout[LN_N], m0, r0;
  double worst = 0.0, worst_fd = 0.0;

  for (int i = 0; i < LN_N; i++)
    {
      x[i] = (float) (3.0 * uniform () + 0.5);
      w[i] = (float) (1.0 + 0.5 * uniform ());
      b[i] = 0.0f;
      dy[i] = (float) uniform ();
      dx[i] = 0.25f;            /* what the residual path brought already */
      rx[i] = x[i];
      rw[i] = w[i];
      rb[i] = 0.0;
      rdy[i] = dy[i];
    }
  gpt2_layernorm_row (x, w, b, out, LN_N, 0, 1, Gpt2SerialReduce (), &mean, &rstd);
  gpt2_layernorm_backward_row (x, dy, w, mean, rstd, dx, LN_N, 0, 1, Gpt2SerialReduce ());

  /* The closed form, in double. */
  ref_layernorm (rx, rw, rb, rout, LN_N, &m0, &r0);
  double mg = 0.0, mgx = 0.0;
  for (int i = 0; i < LN_N; i++)
    {
      double g = rw[i] * rdy[i], xhat = (rx[i] - m0) * r0;
      mg += g / LN_N;
      mgx += g * xhat / LN_N;
    }
  for (int i = 0; i < LN_N; i++)
    {
      double g = rw[i] * rdy[i], xhat = (rx[i] - m0) * r0;
      worst = fmax (worst, err_rel1 (dx[i], 0.25 + r0 * (g - mg - xhat * mgx)));
    }
  report (worst < 1e-5, "layernorm_backward_row adds rstd (g - mean g - xhat mean (g xhat)) to dx", worst);

  /* d/dx_i of sum_j dy_j LN(x)_j by central differences, at a few i. */
  for (int i = 0; i < LN_N; i += 37)
    {
      double h = 1e-6, save = rx[i], lp = 0.0, lm = 0.0;

      rx[i] = save + h;
      ref_layernorm (rx, rw, rb, rout, LN_N, &m0, &r0);
      for (int j = 0; j < LN_N; j++)
        lp += rdy[j] * rout[j];
      rx[i] = save - h;
      ref_layernorm (rx, rw, rb, rout, LN_N, &m0, &r0);
      for (int j = 0; j < LN_N; j++)
        lm += rdy[j] * rout[j];
      rx[i] = save;
      worst_fd = fmax (worst_fd, err_rel1 (dx[i] - 0.25, (lp - lm) / (2 * h)));
    }
  report (worst_fd < 1e-4, "layernorm_backward_row matches central differences of the double LayerNorm",
          worst_fd);
}

/* ------------------------------------------------------------ causal softmax */

#define SM_N 40
#define SM_VALID 29

static void
test_softmax (void)
{
  float in[SM_N], out[SM_N], datt[SM_N], dpre[SM_N];
  double rin[SM_VALID], rp[SM_VALID], worst = 0.0, sum = 0.0, worst_b = 0.0, worst_fd = 0.0;
  bool zeros = true;
  const float scale = 0.125f;

  for (int j = 0; j < SM_N; j++)
    {
      in[j] = (float) (6.0 * uniform ());
      datt[j] = (float) uniform ();
      out[j] = dpre[j] = 7.0f;  /* must be overwritten, zeros included */
    }
  for (int j = 0; j < SM_VALID; j++)
    rin[j] = in[j];
  gpt2_softmax_row (in, out, SM_VALID, SM_N, 0, 1, Gpt2SerialReduce ());
  ref_softmax (rin, rp, SM_VALID);
  for (int j = 0; j < SM_VALID; j++)
    {
      worst = fmax (worst, fabs (out[j] - rp[j]));
      sum += out[j];
    }
  for (int j = SM_VALID; j < SM_N; j++)
    zeros = zeros && out[j] == 0.0f;
  report (worst < 1e-6, "softmax_row matches the double softmax over the causal part", worst);
  report (zeros && fabs (sum - 1.0) < 1e-5, "softmax_row sums to 1 and writes zeros past the diagonal",
          fabs (sum - 1.0));

  gpt2_softmax_backward_row (out, datt, dpre, SM_VALID, SM_N, scale, 0, 1, Gpt2SerialReduce ());
  double s = 0.0;
  for (int j = 0; j < SM_VALID; j++)
    s += rp[j] * datt[j];
  zeros = true;
  for (int j = 0; j < SM_VALID; j++)
    worst_b = fmax (worst_b, fabs (dpre[j] - scale * rp[j] * (datt[j] - s)));
  for (int j = SM_VALID; j < SM_N; j++)
    zeros = zeros && dpre[j] == 0.0f;
  report (worst_b < 1e-6 && zeros, "softmax_backward_row is scale p (datt - sum p datt), zeros past the diagonal",
          worst_b);

  /* d/d pre_i of sum_j datt_j softmax (scale pre)_j, pre being the
   * unscaled product: the scale the row function applies. */
  for (int i = 0; i < SM_VALID; i += 4)
    {
      double h = 1e-6, lp = 0.0, lm = 0.0, x[SM_VALID], p[SM_VALID];

      for (int j = 0; j < SM_VALID; j++)
        x[j] = rin[j] / scale;
      x[i] += h;
      for (int j = 0; j < SM_VALID; j++)
        x[j] *= scale;
      ref_softmax (x, p, SM_VALID);
      for (int j = 0; j < SM_VALID; j++)
        lp += datt[j] * p[j];
      for (int j = 0; j < SM_VALID; j++)
        x[j] = rin[j] / scale;
      x[i] -= h;
      for (int j = 0; j < SM_VALID; j++)
        x[j] *= scale;
      ref_softmax (x, p, SM_VALID);
      for (int j = 0; j < SM_VALID; j++)
        lm += datt[j] * p[j];
      worst_fd = fmax (worst_fd, fabs (dpre[i] - (lp - lm) / (2 * h)));
    }
  report (worst_fd < 1e-5, "softmax_backward_row matches central differences through the scale", worst_fd);
}

/* ------------------------------------------------------------ cross-entropy */

#define CE_V 256

static void
test_cross_entropy (void)
{
  float l[CE_V], d[CE_V];
  __half lh[CE_V], dh[CE_V];
  double rl[CE_V], worst = 0.0, worst_b = 0.0, worst_fd = 0.0, sum = 0.0;
  const int target = 77;
  const float scale = 1024.0f / 4096.0f;   /* loss_scale / (batch * seq_len) */

  /* Logits near 90: exp without the max shift would overflow FP32. */
  for (int j = 0; j < CE_V; j++)
    {
      l[j] = (float) (90.0 + 4.0 * uniform ());
      rl[j] = l[j];
    }
  worst = err_rel1 (gpt2_cross_entropy_row (l, CE_V, target, 0, 1, Gpt2SerialReduce ()),
                    ref_cross_entropy (rl, CE_V, target));
  report (worst < 2e-6, "cross_entropy_row is log sum exp - logit[target], logits near 90", worst);

  gpt2_cross_entropy_backward_row (l, d, CE_V, target, scale, 0, 1, Gpt2SerialReduce ());
  double p[CE_V];
  ref_softmax (rl, p, CE_V);
  for (int j = 0; j < CE_V; j++)
    {
      worst_b = fmax (worst_b, fabs (d[j] - scale * (p[j] - (j == target))));
      sum += d[j];
    }
  report (worst_b < 1e-7 && fabs (sum) < 1e-6,
          "cross_entropy_backward_row is scale (softmax - onehot), summing to 0", worst_b);

  for (int i = 0; i < CE_V; i += 51)
    {
      double h = 1e-5, save = rl[i], lp, lm;

      rl[i] = save + h;
      lp = ref_cross_entropy (rl, CE_V, target);
      rl[i] = save - h;
      lm = ref_cross_entropy (rl, CE_V, target);
      rl[i] = save;
      worst_fd = fmax (worst_fd, fabs (d[i] / scale - (lp - lm) / (2 * h)));
    }
  report (worst_fd < 1e-6, "cross_entropy_backward_row matches central differences", worst_fd);

  /* In float16, as the GPU keeps logits there. */
  bool same = true;
  for (int j = 0; j < CE_V; j++)
    {
      lh[j] = __float2half (l[j] - 90.0f);
      l[j] = __half2float (lh[j]);
    }
  gpt2_cross_entropy_backward_row (lh, dh, CE_V, target, scale, 0, 1, Gpt2SerialReduce ());
  gpt2_cross_entropy_backward_row (l, d, CE_V, target, scale, 0, 1, Gpt2SerialReduce ());
  for (int j = 0; j < CE_V; j++)
    {
      __half r = __float2half (d[j]);
      same = same && memcmp (&r, &dh[j], sizeof r) == 0;
    }
  report (same, "cross_entropy_backward_row over float16 widens, computes in FP32, rounds once", 0.0);
}

/* ------------------------------------------------------------ storage */

static void
test_rounding (void)
{
  float b1, b2, h1, h2;
  __nv_bfloat16 bf;
  __half hf;

  /* Halfway cases go to the even neighbour. */
  gpt2_store (&bf, 1.0f + 0x1p-8f);
  b1 = gpt2_load (bf);
  gpt2_store (&bf, 1.0f + 3 * 0x1p-8f);
  b2 = gpt2_load (bf);
  gpt2_store (&hf, 1.0f + 0x1p-11f);
  h1 = gpt2_load (hf);
  gpt2_store (&hf, 1.0f + 3 * 0x1p-11f);
  h2 = gpt2_load (hf);
  report (b1 == 1.0f && b2 == 1.0f + 0x1p-6f && h1 == 1.0f && h2 == 1.0f + 0x1p-9f,
          "gpt2_store rounds to nearest even in bfloat16 and float16", 0.0);
}

int
main (void)
{
  printf ("1..17\n");
  test_gelu ();
  test_layernorm ();
  test_layernorm_backward ();
  test_softmax ();
  test_cross_entropy ();
  test_rounding ();
  return n_failed == 0 && n_test == 17 ? 0 : 1;
}
